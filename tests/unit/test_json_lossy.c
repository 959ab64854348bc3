/* test_json_lossy.c - msgpack -> JSON with text that is not UTF-8: the
 * strict conversion refuses it (str, bin, map keys), the lossy one (for
 * printing results and meta) replaces each maximal ill-formed subpart with
 * U+FFFD and keeps everything else byte for byte. */
#include <CUnit/CUnit.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "th/json.h"

#define FFFD "\xEF\xBF\xBD"

static void pack_str(th_buf *b, const char *s, size_t n)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, th_buf_msgpack_write);
    msgpack_pack_str_with_body(&pk, s, n);
}

/* Lossy conversion of a str; returns the JSON string's bytes (malloc). */
static char *lossy_str(const char *s, size_t n, size_t *len)
{
    th_buf b = TH_BUF_INIT;
    pack_str(&b, s, n);
    th_error err;
    th_error_clear(&err);
    json_t *j = th_json_from_msgpack_lossy(b.data, b.len, &err);
    th_buf_destroy(&b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_TRUE_FATAL(json_is_string(j));
    *len = json_string_length(j);
    char *out = malloc(*len + 1);
    memcpy(out, json_string_value(j), *len + 1);
    json_decref(j);
    return out;
}

static void expect(const char *in, size_t n, const char *want)
{
    size_t len;
    char *got = lossy_str(in, n, &len);
    CU_ASSERT_EQUAL(len, strlen(want));
    CU_ASSERT_EQUAL(memcmp(got, want, len < strlen(want) ? len : strlen(want)), 0);
    free(got);
}

static void test_replacements(void)
{
    /* valid text is untouched, NUL included */
    expect("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10,
           "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    size_t len;
    char *z = lossy_str("a\0b", 3, &len);
    CU_ASSERT_EQUAL(len, 3);
    CU_ASSERT_EQUAL(memcmp(z, "a\0b", 3), 0);
    free(z);
    /* a stray continuation byte, 0xff, 0xc0/0xc1 (overlong leads) */
    expect("a\x80" "b", 3, "a" FFFD "b");
    expect("\xff\xfe", 2, FFFD FFFD);
    expect("\xc0\xaf", 2, FFFD FFFD);
    /* a truncated sequence is one maximal subpart: one U+FFFD */
    expect("\xe2\x82" "x", 3, FFFD "x");
    expect("\xf0\x9f\x98", 3, FFFD);
    /* overlong 3-byte, surrogate, past U+10FFFF */
    expect("\xe0\x80\x80", 3, FFFD FFFD FFFD);
    expect("\xed\xa0\x80", 3, FFFD FFFD FFFD);
    expect("\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD);
    /* the flood fixture's invalid unit */
    expect("a\x80\xc3\xe2\x82\xff\xf0\x9f\x98\x80\n", 11,
           "a" FFFD FFFD FFFD FFFD "\xf0\x9f\x98\x80\n");
}

static void test_strict_refuses(void)
{
    th_error err;
    th_buf b = TH_BUF_INIT;
    pack_str(&b, "a\xff", 2);
    th_error_clear(&err);
    CU_ASSERT_PTR_NULL(th_json_from_msgpack(b.data, b.len, &err));
    CU_ASSERT_EQUAL(err.code, TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "UTF-8"));
    th_buf_destroy(&b);

    /* a surrogate in bin: refused (was let through before) */
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    msgpack_pack_bin_with_body(&pk, "\xed\xa0\x80", 3);
    CU_ASSERT_PTR_NULL(th_json_from_msgpack(b.data, b.len, &err));
    json_t *j = th_json_from_msgpack_lossy(b.data, b.len, &err);
    CU_ASSERT_TRUE(j && strcmp(json_string_value(j), FFFD FFFD FFFD) == 0);
    json_decref(j);
    th_buf_destroy(&b);

    /* valid text passes the strict one too */
    pack_str(&b, "caf\xc3\xa9", 5);
    j = th_json_from_msgpack(b.data, b.len, &err);
    CU_ASSERT_TRUE(j && strcmp(json_string_value(j), "caf\xc3\xa9") == 0);
    json_decref(j);
    th_buf_destroy(&b);
}

/* Meta as a tool may set it: nested maps, bad keys and values; the lossy
 * result dumps as JSON (jansson refuses nothing), the strict one refuses. */
static void test_meta_dumps(void)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "path", 4);
    msgpack_pack_str_with_body(&pk, "dir/\xff.txt", 9);
    msgpack_pack_str_with_body(&pk, "k\xfe", 2);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_bin_with_body(&pk, "ok", 2);
    msgpack_pack_int(&pk, -3);
    th_error err;
    th_error_clear(&err);
    CU_ASSERT_PTR_NULL(th_json_from_msgpack(b.data, b.len, &err));
    json_t *j = th_json_from_msgpack_lossy(b.data, b.len, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    char *s = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
    CU_ASSERT_PTR_NOT_NULL(s);
    CU_ASSERT_STRING_EQUAL(s ? s : "",
                           "{\"k" FFFD "\":[\"ok\",-3],\"path\":\"dir/" FFFD
                           ".txt\"}");
    /* and it reads back */
    json_error_t je;
    json_t *back = s ? json_loads(s, 0, &je) : NULL;
    CU_ASSERT_TRUE(back && json_equal(back, j));
    json_decref(back);
    free(s);
    json_decref(j);
    th_buf_destroy(&b);
}

void th_suite_json_lossy(void)
{
    CU_pSuite s = CU_add_suite("json_lossy", NULL, NULL);
    CU_add_test(s, "replacements", test_replacements);
    CU_add_test(s, "strict_refuses", test_strict_refuses);
    CU_add_test(s, "meta_dumps", test_meta_dumps);
}
