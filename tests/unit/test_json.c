/* test_json.c - JSON <-> msgpack conversion at the edges. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <msgpack.h>
#include <string.h>

#include "th/json.h"

static void roundtrip(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    th_buf b = TH_BUF_INIT;
    CU_ASSERT_EQUAL(th_json_to_msgpack(j, &b), 0);
    th_error err;
    json_t *back = th_json_from_msgpack(b.data, b.len, &err);
    CU_ASSERT_PTR_NOT_NULL(back);
    CU_ASSERT_TRUE(back && json_equal(j, back));
    json_decref(back);
    json_decref(j);
    th_buf_destroy(&b);
}

static void test_roundtrip(void)
{
    roundtrip("{\"a\": 1, \"b\": [true, false, null, -5, 2.5], \"c\": {\"d\": \"x\"}}");
    roundtrip("[]");
    roundtrip("\"\\u00e9t\\u00e9\"");
    roundtrip("9223372036854775807");
}

static void test_refusals(void)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_int(&pk, 3); /* an integer key */
    msgpack_pack_nil(&pk);
    th_error err;
    CU_ASSERT_PTR_NULL(th_json_from_msgpack(b.data, b.len, &err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "key"));
    th_buf_reset(&b);
    msgpack_pack_bin_with_body(&pk, "\xff\xfe", 2);
    CU_ASSERT_PTR_NULL(th_json_from_msgpack(b.data, b.len, &err));
    th_buf_reset(&b);
    msgpack_pack_bin_with_body(&pk, "ok", 2);
    json_t *j = th_json_from_msgpack(b.data, b.len, &err);
    CU_ASSERT_STRING_EQUAL(json_string_value(j), "ok");
    json_decref(j);
    CU_ASSERT_PTR_NULL(th_json_from_msgpack((const uint8_t *)"\xc1", 1, &err));
    th_buf_destroy(&b);
}

/* Findings of the json fuzz target, kept as regressions. */
static void test_edge_values(void)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    th_error err;
    th_error_clear(&err);
    /* NaN: refused with a reason (strict), null when printing (lossy) */
    msgpack_pack_double(&pk, NAN);
    CU_ASSERT_PTR_NULL(th_json_from_msgpack(b.data, b.len, &err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "NaN"));
    json_t *j = th_json_from_msgpack_lossy(b.data, b.len, &err);
    CU_ASSERT_TRUE(json_is_null(j));
    json_decref(j);
    /* empty strings, as a value and as a key, at the end of the buffer */
    th_buf_reset(&b);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str(&pk, 0);
    msgpack_pack_str(&pk, 0);
    j = th_json_from_msgpack(b.data, b.len, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "")), "");
    json_decref(j);
    /* a key with a NUL inside keeps its length */
    json_t *o = json_object();
    json_object_setn_new(o, "a\0b", 3, json_true());
    json_object_setn_new(o, "a", 1, json_false());
    th_buf_reset(&b);
    CU_ASSERT_EQUAL(th_json_to_msgpack(o, &b), 0);
    json_t *back = th_json_from_msgpack(b.data, b.len, &err);
    CU_ASSERT_EQUAL(json_object_size(back), 2);
    json_decref(back);
    json_decref(o);
    th_buf_destroy(&b);
}

void th_suite_json(void)
{
    CU_pSuite s = CU_add_suite("json", NULL, NULL);
    CU_add_test(s, "roundtrip", test_roundtrip);
    CU_add_test(s, "refusals", test_refusals);
    CU_add_test(s, "edge_values", test_edge_values);
}
