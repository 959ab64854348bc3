/* test_validate.c - parameter tables from the ABI, argument validation
 * (every rule with its exact message), defaults, validate_args, and the
 * canonical msgpack form. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/tool.h"

/* ---- helpers ------------------------------------------------------------- */

static void pack_json(msgpack_packer *pk, const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        msgpack_pack_map(pk, json_object_size(j));
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v)
        {
            msgpack_pack_str_with_body(pk, k, strlen(k));
            pack_json(pk, v);
        }
        break;
    }
    case JSON_ARRAY: {
        msgpack_pack_array(pk, json_array_size(j));
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) pack_json(pk, v);
        break;
    }
    case JSON_STRING:
        msgpack_pack_str_with_body(pk, json_string_value(j),
                                   json_string_length(j));
        break;
    case JSON_INTEGER:
        msgpack_pack_int64(pk, json_integer_value(j));
        break;
    case JSON_REAL:
        msgpack_pack_double(pk, json_real_value(j));
        break;
    case JSON_TRUE:
        msgpack_pack_true(pk);
        break;
    case JSON_FALSE:
        msgpack_pack_false(pk);
        break;
    default:
        msgpack_pack_nil(pk);
    }
}

/* JSON text (keys in the order written) -> msgpack in b. */
static void mp(th_buf *b, const char *json)
{
    json_error_t e;
    json_t *j = json_loads(json, JSON_DECODE_ANY | JSON_PRESERVE_ORDER, &e);
    if (!j) {
        fprintf(stderr, "bad test JSON: %s\n", json);
        abort();
    }
    th_buf_reset(b);
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, th_buf_msgpack_write);
    pack_json(&pk, j);
    json_decref(j);
}

/* msgpack -> compact JSON-ish text via msgpack_object_print_buffer. */
static void mp_print(const uint8_t *d, size_t n, char *dst, size_t cap)
{
    msgpack_zone z;
    msgpack_zone_init(&z, 1024);
    msgpack_object o;
    size_t off = 0;
    dst[0] = '\0';
    if (msgpack_unpack((const char *)d, n, &off, &z, &o) ==
        MSGPACK_UNPACK_SUCCESS)
        msgpack_object_print_buffer(dst, cap, o);
    msgpack_zone_destroy(&z);
}

static const char *const modes[] = {"fast", "slow", NULL};

#define P(...) {sizeof(toolhost_param), __VA_ARGS__}

/* The table most tests use. */
static const toolhost_param fs_params[] = {
    P("path", TOOLHOST_TYPE_STRING, 1, "File to read", NULL, NULL, 0),
    P("offset", TOOLHOST_TYPE_INTEGER, 0, "First line", NULL, "1", 0),
    P("ratio", TOOLHOST_TYPE_NUMBER, 0, "A ratio", NULL, NULL, 0),
    P("mode", TOOLHOST_TYPE_STRING, 0, "Speed", modes, "\"fast\"", 0),
    P("follow", TOOLHOST_TYPE_BOOLEAN, 0, "Follow links", NULL, NULL, 0),
    P("tags", TOOLHOST_TYPE_ARRAY, 0, "Tags", NULL, NULL,
      TOOLHOST_TYPE_STRING),
    P("opts", TOOLHOST_TYPE_OBJECT, 0, "Options", NULL, NULL, 0),
};

static th_param *tp;
static size_t ntp;

static int suite_init(void)
{
    th_error e;
    return th_params_from_abi("tool 'fs_read'", fs_params, 7, &tp, &ntp, &e);
}

static int suite_clean(void)
{
    th_params_free(tp, ntp);
    return 0;
}

/* Validates JSON args against tp; returns rc, message in ve. */
static int check(const char *json, th_verr *ve)
{
    th_buf in = TH_BUF_INIT, out = TH_BUF_INIT;
    mp(&in, json);
    bool filled = false;
    int rc = th_validate_params("fs_read", tp, ntp, in.data, in.len, &out,
                                &filled, ve);
    th_buf_destroy(&in);
    th_buf_destroy(&out);
    return rc;
}

#define EXPECT(json_, key_, msg_)                                                \
    do {                                                                      \
        th_verr ve_;                                                          \
        CU_ASSERT_EQUAL(check(json_, &ve_), TH_EARGS);                         \
        CU_ASSERT_EQUAL(ve_.e.code, TH_EARGS);                                \
        CU_ASSERT_STRING_EQUAL(ve_.e.msg,                                     \
                               "Error parsing arguments for fs_read: " msg_);  \
        CU_ASSERT_STRING_EQUAL(ve_.key, key_);                                 \
        if (strcmp(ve_.e.msg, "Error parsing arguments for fs_read: " msg_))   \
            fprintf(stderr, "\n  got: %s\n", ve_.e.msg);                      \
    } while (0)

/* ---- parameter tables ------------------------------------------------------- */

static void params_converted(void)
{
    CU_ASSERT_EQUAL_FATAL(ntp, 7);
    CU_ASSERT_STRING_EQUAL(tp[0].name, "path");
    CU_ASSERT_TRUE(tp[0].required);
    CU_ASSERT_PTR_NULL(tp[0].default_mp);
    CU_ASSERT_EQUAL(tp[1].default_len, 1);
    CU_ASSERT_EQUAL(tp[1].default_mp[0], 0x01);
    CU_ASSERT_EQUAL(tp[3].n_enum, 2);
    CU_ASSERT_STRING_EQUAL(tp[3].enum_values[1], "slow");
    CU_ASSERT_EQUAL(tp[3].default_len, 5); /* fixstr "fast" */
    CU_ASSERT_EQUAL(tp[5].item_type, TOOLHOST_TYPE_STRING);
}

static void bad_table(const toolhost_param *ps, uint32_t n, const char *msg)
{
    th_param *out = (th_param *)1;
    size_t nout = 99;
    th_error e;
    CU_ASSERT_EQUAL(th_params_from_abi("tool 't'", ps, n, &out, &nout, &e),
                    TH_ELOAD);
    CU_ASSERT_PTR_NULL(out);
    CU_ASSERT_EQUAL(nout, 0);
    CU_ASSERT_STRING_EQUAL(e.msg, msg);
    if (strcmp(e.msg, msg))
        fprintf(stderr, "\n  got: %s\n", e.msg);
}

static void params_bad(void)
{
    static const char *const empty[] = {NULL};
    static const char *const twice[] = {"a", "a", NULL};
    const toolhost_param bad_name[] = {P("1x", 1, 0, "d", NULL, NULL, 0)};
    bad_table(bad_name, 1,
              "tool 't': parameter '1x' has an invalid name (allowed: a "
              "letter or _, then letters, digits or _, at most 64)");
    const toolhost_param no_name[] = {P("a", 1, 0, "d", NULL, NULL, 0),
                                      P(NULL, 1, 0, "d", NULL, NULL, 0)};
    bad_table(no_name, 2, "tool 't': parameter #2 has no name");
    const toolhost_param dup[] = {P("a", 1, 0, "d", NULL, NULL, 0),
                                  P("a", 2, 0, "d", NULL, NULL, 0)};
    bad_table(dup, 2, "tool 't': parameter 'a' appears twice");
    const toolhost_param type[] = {P("a", 7, 0, "d", NULL, NULL, 0)};
    bad_table(type, 1,
              "tool 't': parameter 'a' has an unknown type 7 (known: 1 "
              "string, 2 integer, 3 number, 4 boolean, 5 array, 6 object)");
    const toolhost_param desc[] = {P("a", 1, 0, "", NULL, NULL, 0)};
    bad_table(desc, 1,
              "tool 't': parameter 'a' has no description (a model needs "
              "one line saying what it is)");
    const toolhost_param en[] = {P("a", 2, 0, "d", modes, NULL, 0)};
    bad_table(en, 1,
              "tool 't': parameter 'a' has enum values but is of type "
              "integer (enums are only for strings)");
    const toolhost_param en0[] = {P("a", 1, 0, "d", empty, NULL, 0)};
    bad_table(en0, 1,
              "tool 't': parameter 'a' has an empty enum (give at least one "
              "value, or enum_values = NULL)");
    const toolhost_param en2[] = {P("a", 1, 0, "d", twice, NULL, 0)};
    bad_table(en2, 1, "tool 't': parameter 'a' lists the enum value 'a' twice");
    const toolhost_param def_type[] = {P("a", 2, 0, "d", NULL, "\"x\"", 0)};
    bad_table(def_type, 1,
              "tool 't': parameter 'a' has a default \"x\" that is not of "
              "its type integer");
    const toolhost_param def_num[] = {P("a", 2, 0, "d", NULL, "1.5", 0)};
    bad_table(def_num, 1,
              "tool 't': parameter 'a' has a default 1.5 that is not of its "
              "type integer");
    const toolhost_param def_req[] = {P("a", 2, 1, "d", NULL, "1", 0)};
    bad_table(def_req, 1,
              "tool 't': parameter 'a' is required and has a default (a "
              "default is only for optional parameters)");
    const toolhost_param def_json[] = {P("a", 1, 0, "d", NULL, "'x'", 0)};
    th_param *o;
    size_t no;
    th_error e;
    CU_ASSERT_EQUAL(th_params_from_abi("tool 't'", def_json, 1, &o, &no, &e),
                    TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(e.msg, "parameter 'a' has a default that is not valid JSON"));
    const toolhost_param def_enum[] = {P("a", 1, 0, "d", modes, "\"x\"", 0)};
    bad_table(def_enum, 1,
              "tool 't': parameter 'a' has a default \"x\" that is not one "
              "of its enum values");
    const toolhost_param def_items[] = {P("a", 5, 0, "d", NULL, "[1,\"x\"]",
                                          TOOLHOST_TYPE_INTEGER)};
    bad_table(def_items, 1,
              "tool 't': parameter 'a' has a default whose item 1 is not of "
              "the item type integer");
    const toolhost_param item[] = {P("a", 1, 0, "d", NULL, NULL, 1)};
    bad_table(item, 1,
              "tool 't': parameter 'a' has an item_type but is of type "
              "string (item_type is only for arrays)");
    toolhost_param small[] = {P("a", 1, 0, "d", NULL, NULL, 0)};
    small[0].struct_size = 8;
    char want[200];
    snprintf(want, sizeof want,
             "tool 't': toolhost_param struct_size 8 is smaller than the %zu "
             "bytes of ABI 1.0",
             TH_ABI10_PARAM_SIZE);
    bad_table(small, 1, want);
    toolhost_param mixed[] = {P("a", 1, 0, "d", NULL, NULL, 0),
                              P("b", 1, 0, "d", NULL, NULL, 0)};
    mixed[1].struct_size = 8;
    snprintf(want, sizeof want,
             "tool 't': parameter #2 has struct_size 8, the first has %zu "
             "(all must be the same)",
             sizeof(toolhost_param));
    bad_table(mixed, 2, want);
    bad_table(NULL, 2, "tool 't': n_params is 2 but params is NULL");
    /* Zero parameters is fine. */
    CU_ASSERT_EQUAL(th_params_from_abi("t", NULL, 0, &o, &no, &e), 0);
    CU_ASSERT_EQUAL(no, 0);
}

/* A table from a newer plugin (bigger struct_size) is walked by its stride. */
typedef struct param_v2 {
    toolhost_param v1;
    uint64_t future;
} param_v2;

static void params_stride(void)
{
    param_v2 ps[2];
    memset(ps, 0, sizeof ps);
    for (int i = 0; i < 2; i++) {
        ps[i].v1.struct_size = sizeof(param_v2);
        ps[i].v1.type = TOOLHOST_TYPE_STRING;
        ps[i].v1.description = "d";
        ps[i].future = 0xdeadbeef;
    }
    ps[0].v1.name = "first";
    ps[1].v1.name = "second";
    th_param *o;
    size_t n;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_params_from_abi("t", &ps[0].v1, 2, &o, &n, &e),
                          0);
    CU_ASSERT_STRING_EQUAL(o[1].name, "second");
    th_params_free(o, n);
}

static void names(void)
{
    CU_ASSERT_TRUE(th_tool_name_valid("fs_read"));
    CU_ASSERT_TRUE(th_tool_name_valid("a-b_9"));
    CU_ASSERT_FALSE(th_tool_name_valid(""));
    CU_ASSERT_FALSE(th_tool_name_valid(NULL));
    CU_ASSERT_FALSE(th_tool_name_valid("bad name!"));
    CU_ASSERT_FALSE(th_tool_name_valid("a.b"));
    char n64[66];
    memset(n64, 'x', 64);
    n64[64] = '\0';
    CU_ASSERT_TRUE(th_tool_name_valid(n64));
    n64[64] = 'x';
    n64[65] = '\0';
    CU_ASSERT_FALSE(th_tool_name_valid(n64));
    CU_ASSERT_TRUE(th_param_name_valid("_x1"));
    CU_ASSERT_FALSE(th_param_name_valid("9x"));
    CU_ASSERT_FALSE(th_param_name_valid("a-b"));
}

/* ---- validation rules ---------------------------------------------------------- */

static void not_map(void)
{
    EXPECT("[1,2]", "",
           "the arguments must be an object (a map of parameter names to "
           "values), got an array");
    EXPECT("\"x\"", "",
           "the arguments must be an object (a map of parameter names to "
           "values), got a string");
    th_verr ve;
    CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, NULL, 0, NULL,
                                       NULL, &ve),
                    TH_EARGS);
    CU_ASSERT_STRING_EQUAL(ve.e.msg,
                           "Error parsing arguments for fs_read: the "
                           "arguments are empty; send an object (a map of "
                           "parameter names to values), {} when there are "
                           "none");
    const uint8_t trunc[] = {0x81, 0xa4, 'p', 'a'};
    CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, trunc, sizeof trunc,
                                       NULL, NULL, &ve),
                    TH_EARGS);
    CU_ASSERT_STRING_EQUAL(ve.e.msg,
                           "Error parsing arguments for fs_read: the "
                           "arguments are not valid: truncated msgpack: the "
                           "value at byte 1 announces 4 bytes but only 2 "
                           "follow");
    const uint8_t extra[] = {0x80, 0x01, 0x02};
    CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, extra, sizeof extra,
                                       NULL, NULL, &ve),
                    TH_EARGS);
    CU_ASSERT_STRING_EQUAL(ve.e.msg,
                           "Error parsing arguments for fs_read: the "
                           "arguments are followed by 2 extra bytes; send "
                           "exactly one object");
    const uint8_t intkey[] = {0x81, 0x01, 0x02};
    CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, intkey,
                                       sizeof intkey, NULL, NULL, &ve),
                    TH_EARGS);
    CU_ASSERT_STRING_EQUAL(ve.e.msg,
                           "Error parsing arguments for fs_read: parameter "
                           "names must be strings, got an integer");
}

static void unknown(void)
{
    EXPECT("{\"path\":\"a\",\"pth\":1}", "pth",
           "unknown parameter 'pth' (accepted parameters: path, offset, "
           "ratio, mode, follow, tags, opts)");
    th_verr ve;
    th_buf in = TH_BUF_INIT;
    mp(&in, "{\"x\":1}");
    CU_ASSERT_EQUAL(th_validate_params("noargs", NULL, 0, in.data, in.len,
                                       NULL, NULL, &ve),
                    TH_EARGS);
    CU_ASSERT_STRING_EQUAL(ve.e.msg, "Error parsing arguments for noargs: "
                                     "unknown parameter 'x' (this takes no "
                                     "parameters)");
    mp(&in, "{}");
    CU_ASSERT_EQUAL(th_validate_params("noargs", NULL, 0, in.data, in.len,
                                       NULL, NULL, &ve),
                    0);
    th_buf_destroy(&in);
}

static void duplicate_key(void)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "path", 4);
    msgpack_pack_str_with_body(&pk, "a", 1);
    msgpack_pack_str_with_body(&pk, "path", 4);
    msgpack_pack_str_with_body(&pk, "b", 1);
    th_verr ve;
    CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, b.data, b.len, NULL,
                                       NULL, &ve),
                    TH_EARGS);
    CU_ASSERT_STRING_EQUAL(ve.e.msg, "Error parsing arguments for fs_read: "
                                     "parameter 'path' is given twice");
    CU_ASSERT_STRING_EQUAL(ve.key, "path");
    /* A key with a NUL inside is not "path". */
    th_buf_reset(&b);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "path\0long key", 13);
    msgpack_pack_str_with_body(&pk, "a", 1);
    CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, b.data, b.len, NULL,
                                       NULL, &ve),
                    TH_EARGS);
    CU_ASSERT_STRING_EQUAL(ve.key, "path?long key");
    th_buf_destroy(&b);
}

static void missing_required(void)
{
    EXPECT("{}", "path", "missing required parameter 'path'");
    EXPECT("{\"offset\":3}", "path", "missing required parameter 'path'");
}

static void wrong_type(void)
{
    EXPECT("{\"path\":3}", "path", "parameter 'path' must be a string, got "
                                   "an integer");
    EXPECT("{\"path\":\"a\",\"offset\":\"3\"}", "offset",
           "parameter 'offset' must be an integer, got a string");
    EXPECT("{\"path\":\"a\",\"offset\":3.0}", "offset",
           "parameter 'offset' must be an integer, got a number with a "
           "fraction");
    EXPECT("{\"path\":\"a\",\"ratio\":\"0.5\"}", "ratio",
           "parameter 'ratio' must be a number, got a string");
    EXPECT("{\"path\":\"a\",\"follow\":1}", "follow",
           "parameter 'follow' must be a boolean, got an integer");
    EXPECT("{\"path\":\"a\",\"follow\":\"true\"}", "follow",
           "parameter 'follow' must be a boolean, got a string");
    EXPECT("{\"path\":\"a\",\"tags\":\"x\"}", "tags",
           "parameter 'tags' must be an array, got a string");
    EXPECT("{\"path\":\"a\",\"tags\":[\"x\",\"y\",7]}", "tags",
           "parameter 'tags' must be an array of strings; tags[2] is an "
           "integer");
    EXPECT("{\"path\":\"a\",\"opts\":[]}", "opts",
           "parameter 'opts' must be an object, got an array");
    EXPECT("{\"path\":{}}", "path",
           "parameter 'path' must be a string, got an object");
}

/* ABI 1.1 constraints: checked by the host before execute(), with
 * messages a model can act on. */
static int check_table(const th_param *ps, size_t n, const char *json,
                       th_verr *ve)
{
    th_buf in = TH_BUF_INIT, out = TH_BUF_INIT;
    mp(&in, json);
    bool filled = false;
    int rc = th_validate_params("t", ps, n, in.data, in.len, &out, &filled,
                                ve);
    th_buf_destroy(&in);
    th_buf_destroy(&out);
    return rc;
}

static void constraints(void)
{
    toolhost_param ps[] = {
        P("limit", TOOLHOST_TYPE_INTEGER, 0, "Max rows", NULL, "10", 0),
        P("ratio", TOOLHOST_TYPE_NUMBER, 0, "A ratio", NULL, NULL, 0),
        P("name", TOOLHOST_TYPE_STRING, 0, "A name", NULL, NULL, 0),
        P("tags", TOOLHOST_TYPE_ARRAY, 0, "Tags", NULL, NULL,
          TOOLHOST_TYPE_STRING),
        P("filter", TOOLHOST_TYPE_OBJECT, 0, "Filter", NULL, NULL, 0),
    };
    ps[0].bounds = TOOLHOST_BOUND_MINIMUM | TOOLHOST_BOUND_MAXIMUM;
    ps[0].minimum = 1;
    ps[0].maximum = 1000;
    ps[1].bounds = TOOLHOST_BOUND_EXCLUSIVE_MINIMUM;
    ps[1].minimum = 0;
    ps[2].min_length = 2;
    ps[2].max_length = 4;
    ps[2].pattern = "^[a-z]+$";
    ps[3].min_items = 1;
    ps[3].max_items = 2;
    ps[4].schema_json = "{\"type\":\"object\",\"properties\":{\"since\":"
                        "{\"type\":\"integer\",\"minimum\":0}},"
                        "\"additionalProperties\":false}";
    th_param *t;
    size_t n;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_params_from_abi("tool 't'", ps, 5, &t, &n, &e),
                          0);
    struct {
        const char *json, *key, *msg;
    } bad[] = {
        {"{\"limit\":0}", "limit", "parameter 'limit' must be >= 1, got 0"},
        {"{\"limit\":1001}", "limit",
         "parameter 'limit' must be <= 1000, got 1001"},
        {"{\"ratio\":0}", "ratio", "parameter 'ratio' must be > 0, got 0"},
        {"{\"name\":\"a\"}", "name",
         "parameter 'name' must be at least 2 characters long, is 1"},
        {"{\"name\":\"abcde\"}", "name",
         "parameter 'name' must be at most 4 characters long, is 5"},
        {"{\"name\":\"AB\"}", "name",
         "parameter 'name' must match the pattern '^[a-z]+$'"},
        {"{\"tags\":[]}", "tags",
         "parameter 'tags' must have at least 1 items, has 0"},
        {"{\"tags\":[\"a\",\"b\",\"c\"]}", "tags",
         "parameter 'tags' must have at most 2 items, has 3"},
        {"{\"filter\":{\"since\":-1}}", "filter",
         "parameter 'filter' at /since: must be >= 0, got -1"},
        {"{\"filter\":{\"x\":1}}", "filter",
         "parameter 'filter' has the property 'x', which is not allowed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        th_verr ve;
        CU_ASSERT_EQUAL(check_table(t, n, bad[i].json, &ve), TH_EARGS);
        char want[300];
        snprintf(want, sizeof want, "Error parsing arguments for t: %s",
                 bad[i].msg);
        CU_ASSERT_STRING_EQUAL(ve.e.msg, want);
        CU_ASSERT_STRING_EQUAL(ve.key, bad[i].key);
        if (strcmp(ve.e.msg, want))
            fprintf(stderr, "\n  got: %s\n", ve.e.msg);
    }
    th_verr ve;
    CU_ASSERT_EQUAL(check_table(t, n, "{\"limit\":1000,\"ratio\":0.5,"
                                      "\"name\":\"abcd\",\"tags\":[\"x\"],"
                                      "\"filter\":{\"since\":3}}",
                                &ve),
                    0);
    CU_ASSERT_EQUAL(check_table(t, n, "{}", &ve), 0);
    th_params_free(t, n);

    /* Refused at load: misplaced, impossible, bad pattern, outside the
     * subset, a default that breaks its own bounds. */
    toolhost_param b1[] = {P("s", TOOLHOST_TYPE_STRING, 0, "d", NULL, NULL, 0)};
    b1[0].bounds = TOOLHOST_BOUND_MINIMUM;
    bad_table(b1, 1, "tool 't': parameter 's' of type string has "
                     "minimum/maximum (only for integers and numbers)");
    toolhost_param b2[] = {P("s", TOOLHOST_TYPE_STRING, 0, "d", NULL, NULL, 0)};
    b2[0].pattern = "([";
    CU_ASSERT_EQUAL(th_params_from_abi("tool 't'", b2, 1, &t, &n, &e),
                    TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "tool 't': parameter 's': pattern "
                                         "'([' does not compile"));
    toolhost_param b3[] = {P("o", TOOLHOST_TYPE_OBJECT, 0, "d", NULL, NULL, 0)};
    b3[0].schema_json = "{\"type\":\"object\",\"$dynamicRef\":\"#x\"}";
    CU_ASSERT_EQUAL(th_params_from_abi("tool 't'", b3, 1, &t, &n, &e),
                    TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "tool 't': parameter 'o': "
                                         "schema_json: uses the keyword "
                                         "'$dynamicRef'"));
    toolhost_param b4[] = {P("n", TOOLHOST_TYPE_INTEGER, 0, "d", NULL, "0", 0)};
    b4[0].bounds = TOOLHOST_BOUND_MINIMUM;
    b4[0].minimum = 1;
    bad_table(b4, 1, "tool 't': parameter 'n' has a default 0 that breaks "
                     "its own constraints: must be >= 1, got 0");
    toolhost_param b5[] = {P("n", TOOLHOST_TYPE_INTEGER, 0, "d", NULL, NULL, 0)};
    b5[0].bounds = TOOLHOST_BOUND_MINIMUM | TOOLHOST_BOUND_MAXIMUM;
    b5[0].minimum = 5;
    b5[0].maximum = 1;
    bad_table(b5, 1, "tool 't': parameter 'n' has bounds that no value meets "
                     "(minimum 5, maximum 1)");
}

static void accepted(void)
{
    th_verr ve;
    /* An integer for a number, negative too; floats for numbers. */
    CU_ASSERT_EQUAL(check("{\"path\":\"a\",\"ratio\":2,\"offset\":1,"
                          "\"mode\":\"slow\"}",
                          &ve),
                    0);
    CU_ASSERT_EQUAL(check("{\"path\":\"a\",\"ratio\":-2,\"offset\":-1,"
                          "\"mode\":\"fast\"}",
                          &ve),
                    0);
    CU_ASSERT_EQUAL(check("{\"path\":\"a\",\"ratio\":0.25,\"offset\":1,"
                          "\"mode\":\"fast\",\"follow\":false,"
                          "\"tags\":[],\"opts\":{\"k\":[1]}}",
                          &ve),
                    0);
    CU_ASSERT_STRING_EQUAL(ve.e.msg, "");
    /* bin counts as a string, for plain and enum parameters. */
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str_with_body(&pk, "path", 4);
    msgpack_pack_bin_with_body(&pk, "a.txt", 5);
    msgpack_pack_str_with_body(&pk, "mode", 4);
    msgpack_pack_bin_with_body(&pk, "slow", 4);
    msgpack_pack_str_with_body(&pk, "offset", 6);
    msgpack_pack_int(&pk, 1);
    bool filled = true;
    CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, b.data, b.len, NULL,
                                       &filled, &ve),
                    0);
    CU_ASSERT_FALSE(filled);
    th_buf_destroy(&b);
}

/* The one str/bin rule (the SDK's th_sdk_arg_string applies the same): bin
 * that is not UTF-8 is not a string, refused here with a reason instead
 * of failing inside the tool with an empty stderr. */
static void bin_strings(void)
{
    static const struct {
        const char *key, *bytes;
        size_t n;
        const char *msg;
    } cases[] = {
        {"path", "\xff\xfe", 2,
         "parameter 'path' must be a string, got binary data that is not "
         "UTF-8 text"},
        {"path", "a\xed\xa0\x80", 4, /* a surrogate */
         "parameter 'path' must be a string, got binary data that is not "
         "UTF-8 text"},
        {"tags", "\xc0\x80", 2, /* overlong, in an array */
         "parameter 'tags' must be an array of strings; tags[0] is binary "
         "data that is not UTF-8 text"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        th_buf b = TH_BUF_INIT;
        msgpack_packer pk;
        msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
        bool arr = strcmp(cases[i].key, "tags") == 0;
        msgpack_pack_map(&pk, arr ? 2 : 1);
        if (arr) {
            msgpack_pack_str_with_body(&pk, "path", 4);
            msgpack_pack_str_with_body(&pk, "a", 1);
        }
        msgpack_pack_str_with_body(&pk, cases[i].key, strlen(cases[i].key));
        if (arr)
            msgpack_pack_array(&pk, 1);
        msgpack_pack_bin_with_body(&pk, cases[i].bytes, cases[i].n);
        th_verr ve;
        bool filled = false;
        CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, b.data, b.len,
                                           NULL, &filled, &ve),
                        TH_EARGS);
        char want[256];
        snprintf(want, sizeof want, "Error parsing arguments for fs_read: %s",
                 cases[i].msg);
        CU_ASSERT_STRING_EQUAL(ve.e.msg, want);
        if (strcmp(ve.e.msg, want))
            fprintf(stderr, "\n  got: %s\n", ve.e.msg);
        th_buf_destroy(&b);
    }
}

static void enum_values(void)
{
    EXPECT("{\"path\":\"a\",\"mode\":\"medium\"}", "mode",
           "parameter 'mode' must be one of 'fast', 'slow'; got 'medium'");
    EXPECT("{\"path\":\"a\",\"mode\":\"fas\"}", "mode",
           "parameter 'mode' must be one of 'fast', 'slow'; got 'fas'");
    EXPECT("{\"path\":\"a\",\"mode\":\"fastt\"}", "mode",
           "parameter 'mode' must be one of 'fast', 'slow'; got 'fastt'");
}

static void defaults_filled(void)
{
    th_buf in = TH_BUF_INIT, out = TH_BUF_INIT;
    mp(&in, "{\"path\":\"a.txt\"}");
    bool filled = false;
    th_verr ve;
    CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, in.data, in.len,
                                       &out, &filled, &ve),
                    0);
    CU_ASSERT_TRUE(filled);
    char text[256];
    mp_print(out.data, out.len, text, sizeof text);
    CU_ASSERT_STRING_EQUAL(text,
                           "{\"path\"=>\"a.txt\", \"offset\"=>1, "
                           "\"mode\"=>\"fast\"}");
    /* The filled map passes validation unchanged. */
    filled = true;
    CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, out.data, out.len,
                                       NULL, &filled, &ve),
                    0);
    CU_ASSERT_FALSE(filled);
    /* Given values win over defaults; only the absent one is filled. */
    mp(&in, "{\"mode\":\"slow\",\"path\":\"b\"}");
    CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, in.data, in.len,
                                       &out, &filled, &ve),
                    0);
    CU_ASSERT_TRUE(filled);
    mp_print(out.data, out.len, text, sizeof text);
    CU_ASSERT_STRING_EQUAL(text,
                           "{\"mode\"=>\"slow\", \"path\"=>\"b\", \"offset\"=>1}");
    th_buf_destroy(&in);
    th_buf_destroy(&out);
}

/* OpenAI strict mode sends every property, null for the optional ones:
 * null is "absent" for an optional parameter (its default applies, the
 * key is dropped) and refused for a required one. */
static void null_optional(void)
{
    th_buf in = TH_BUF_INIT, out = TH_BUF_INIT;
    bool filled = false;
    th_verr ve;
    char text[256];
    mp(&in, "{\"path\":\"a\",\"offset\":null,\"mode\":null,"
            "\"follow\":null}");
    CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, in.data, in.len,
                                       &out, &filled, &ve),
                    0);
    CU_ASSERT_TRUE(filled);
    mp_print(out.data, out.len, text, sizeof text);
    CU_ASSERT_STRING_EQUAL(text, "{\"path\"=>\"a\", \"offset\"=>1, "
                                 "\"mode\"=>\"fast\"}");
    /* The filled map passes validation unchanged. */
    CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, out.data, out.len,
                                       NULL, &filled, &ve),
                    0);
    CU_ASSERT_FALSE(filled);
    /* A null with no default: just dropped. */
    mp(&in, "{\"follow\":null,\"path\":\"b\"}");
    CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, in.data, in.len,
                                       &out, &filled, &ve),
                    0);
    mp_print(out.data, out.len, text, sizeof text);
    CU_ASSERT_STRING_EQUAL(text, "{\"path\"=>\"b\", \"offset\"=>1, "
                                 "\"mode\"=>\"fast\"}");
    /* Required: refused, clearly. */
    EXPECT("{\"path\":null}", "path",
           "parameter 'path' is required and cannot be null; give it a "
           "value");
    th_buf_destroy(&in);
    th_buf_destroy(&out);
}

static void no_prefix(void)
{
    th_buf in = TH_BUF_INIT;
    mp(&in, "{\"offset\":\"x\",\"path\":\"p\"}");
    th_verr ve;
    CU_ASSERT_EQUAL(th_validate_params(NULL, tp, ntp, in.data, in.len, NULL,
                                       NULL, &ve),
                    TH_EARGS);
    CU_ASSERT_STRING_EQUAL(ve.e.msg,
                           "parameter 'offset' must be an integer, got a "
                           "string");
    CU_ASSERT_STRING_EQUAL(ve.key, "offset");
    /* A default to fill in but nowhere to put it. */
    mp(&in, "{\"path\":\"p\"}");
    CU_ASSERT_EQUAL(th_validate_params("fs_read", tp, ntp, in.data, in.len,
                                       NULL, NULL, &ve),
                    TH_EINVAL);
    mp(&in, "{\"offset\":\"x\",\"path\":\"p\"}");
    /* err may be NULL */
    CU_ASSERT_EQUAL(th_validate_params(NULL, tp, ntp, in.data, in.len, NULL,
                                       NULL, NULL),
                    TH_EARGS);
    th_buf_destroy(&in);
}

/* ---- th_validate_call --------------------------------------------------------- */

static int range_check(void *state, const toolhost_tool *tool,
                       const uint8_t *args, size_t len, char *err,
                       size_t size)
{
    (void)state;
    (void)tool;
    /* {"a": x, "b": y} with a <= b; the host filled b's default. */
    msgpack_zone z;
    msgpack_zone_init(&z, 256);
    msgpack_object o;
    size_t off = 0;
    int64_t a = 0, b = 0;
    if (msgpack_unpack((const char *)args, len, &off, &z, &o) ==
        MSGPACK_UNPACK_SUCCESS) {
        for (uint32_t i = 0; i < o.via.map.size; i++) {
            const msgpack_object_kv *kv = &o.via.map.ptr[i];
            if (kv->key.via.str.ptr[0] == 'a')
                a = kv->val.via.i64;
            else
                b = kv->val.via.i64;
        }
    }
    msgpack_zone_destroy(&z);
    if (a > b) {
        snprintf(err, size, "'a' (%lld) must not be greater than 'b' (%lld)",
                 (long long)a, (long long)b);
        return 1;
    }
    return 0;
}

static int silent_reject(void *state, const toolhost_tool *tool,
                         const uint8_t *args, size_t len, char *err,
                         size_t size)
{
    (void)state, (void)tool, (void)args, (void)len, (void)err, (void)size;
    return 1;
}

static void validate_call(void)
{
    static const toolhost_param ab[] = {
        P("a", TOOLHOST_TYPE_INTEGER, 1, "low", NULL, NULL, 0),
        P("b", TOOLHOST_TYPE_INTEGER, 0, "high", NULL, "10", 0),
    };
    toolhost_tool desc = {.struct_size = sizeof desc,
                          .name = "range",
                          .validate_args = range_check};
    th_tool t = {.name = "range", .desc = &desc};
    th_error e;
    CU_ASSERT_EQUAL_FATAL(
        th_params_from_abi("tool 'range'", ab, 2, &t.params, &t.n_params, &e),
        0);
    th_buf in = TH_BUF_INIT, out = TH_BUF_INIT;
    const uint8_t *a;
    size_t n;
    mp(&in, "{\"a\":3}");
    CU_ASSERT_EQUAL(th_validate_call(&t, in.data, in.len, &out, &a, &n, &e), 0);
    CU_ASSERT_PTR_EQUAL(a, out.data); /* b filled in */
    CU_ASSERT_EQUAL(n, out.len);
    mp(&in, "{\"a\":3,\"b\":4}");
    CU_ASSERT_EQUAL(th_validate_call(&t, in.data, in.len, &out, &a, &n, &e), 0);
    CU_ASSERT_PTR_EQUAL(a, in.data); /* the input stands */
    mp(&in, "{\"a\":30}");
    CU_ASSERT_EQUAL(th_validate_call(&t, in.data, in.len, &out, &a, &n, &e),
                    TH_EARGS);
    CU_ASSERT_STRING_EQUAL(e.msg, "Error parsing arguments for range: 'a' (30) "
                                  "must not be greater than 'b' (10)");
    mp(&in, "{\"b\":30}");
    CU_ASSERT_EQUAL(th_validate_call(&t, in.data, in.len, &out, &a, &n, &e),
                    TH_EARGS);
    CU_ASSERT_STRING_EQUAL(e.msg, "Error parsing arguments for range: missing "
                                  "required parameter 'a'");
    desc.validate_args = silent_reject;
    mp(&in, "{\"a\":1}");
    CU_ASSERT_EQUAL(th_validate_call(&t, in.data, in.len, &out, &a, &n, &e),
                    TH_EARGS);
    CU_ASSERT_STRING_EQUAL(e.msg, "Error parsing arguments for range: the tool "
                                  "rejected the arguments without saying why");
    th_buf_destroy(&in);
    th_buf_destroy(&out);
    th_params_free(t.params, t.n_params);
}

/* ---- canonical form ---------------------------------------------------------- */

static void canonical(void)
{
    th_buf a = TH_BUF_INIT, b = TH_BUF_INIT, ca = TH_BUF_INIT,
           cb = TH_BUF_INIT;
    mp(&a, "{\"b\":1,\"a\":{\"d\":[{\"y\":1,\"x\":2}],\"c\":3},\"aa\":0}");
    mp(&b, "{\"a\":{\"c\":3,\"d\":[{\"x\":2,\"y\":1}]},\"aa\":0,\"b\":1}");
    CU_ASSERT_EQUAL(th_msgpack_canonical(a.data, a.len, &ca), 0);
    CU_ASSERT_EQUAL(th_msgpack_canonical(b.data, b.len, &cb), 0);
    CU_ASSERT_EQUAL_FATAL(ca.len, cb.len);
    CU_ASSERT_EQUAL(memcmp(ca.data, cb.data, ca.len), 0);
    char text[256];
    mp_print(ca.data, ca.len, text, sizeof text);
    CU_ASSERT_STRING_EQUAL(text, "{\"a\"=>{\"c\"=>3, \"d\"=>[{\"x\"=>2, "
                                 "\"y\"=>1}]}, \"aa\"=>0, \"b\"=>1}");
    /* "b" sorts after "aa" although its encoding is shorter. */
    /* Integers in their shortest form: 5 as uint32 becomes a fixint. */
    const uint8_t wide[] = {0x81, 0xa1, 'k', 0xce, 0, 0, 0, 5};
    CU_ASSERT_EQUAL(th_msgpack_canonical(wide, sizeof wide, &ca), 0);
    const uint8_t want[] = {0x81, 0xa1, 'k', 0x05};
    CU_ASSERT_EQUAL_FATAL(ca.len, sizeof want);
    CU_ASSERT_EQUAL(memcmp(ca.data, want, sizeof want), 0);
    /* Non-string keys first, ordered by their encoding. */
    const uint8_t mixed[] = {0x83, 0xa1, 'a', 0x01, 0x02, 0x02, 0x01, 0x03};
    CU_ASSERT_EQUAL(th_msgpack_canonical(mixed, sizeof mixed, &ca), 0);
    const uint8_t mwant[] = {0x83, 0x01, 0x03, 0x02, 0x02, 0xa1, 'a', 0x01};
    CU_ASSERT_EQUAL_FATAL(ca.len, sizeof mwant);
    CU_ASSERT_EQUAL(memcmp(ca.data, mwant, sizeof mwant), 0);
    const uint8_t bad[] = {0x92, 0x01};
    CU_ASSERT_EQUAL(th_msgpack_canonical(bad, sizeof bad, &ca), TH_EINVAL);
    th_buf_destroy(&a);
    th_buf_destroy(&b);
    th_buf_destroy(&ca);
    th_buf_destroy(&cb);
}

/* ---- threads ------------------------------------------------------------------ */

static void *validate_many(void *arg)
{
    (void)arg;
    th_buf in = TH_BUF_INIT, out = TH_BUF_INIT;
    long bad = 0;
    for (int i = 0; i < 2000; i++) {
        th_verr ve;
        bool filled;
        mp(&in, (i & 1) ? "{\"path\":\"a\"}" : "{\"path\":\"a\",\"mode\":\"x\"}");
        int rc = th_validate_params("fs_read", tp, ntp, in.data, in.len, &out,
                                    &filled, &ve);
        if ((i & 1) ? (rc != 0 || !filled) : rc != TH_EARGS)
            bad++;
    }
    th_buf_destroy(&in);
    th_buf_destroy(&out);
    return (void *)bad;
}

static void threads(void)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, validate_many, NULL),
                              0);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        CU_ASSERT_EQUAL((long)r, 0);
    }
}

/* The one-pass check of a flat map (validate_view_quick) against a model
 * of the rules: random tables of scalar parameters (required, defaults,
 * enums) and random maps of their names, near-miss names (a prefix, one
 * byte more, a NUL inside) and values of every scalar kind.  The quick
 * check may only accept what the rules accept, and with nothing filled
 * in; everything else goes to the full check, whose messages the tests
 * above pin. */
static const char *const q_enum[] = {"ab", "c", NULL};
static void quick_model(void)
{
    static const toolhost_param pool[] = {
        P("a", TOOLHOST_TYPE_STRING, 1, "x", NULL, NULL, 0),
        P("bb", TOOLHOST_TYPE_INTEGER, 0, "x", NULL, NULL, 0),
        P("ccc", TOOLHOST_TYPE_NUMBER, 0, "x", NULL, "2", 0),
        P("dd", TOOLHOST_TYPE_BOOLEAN, 1, "x", NULL, NULL, 0),
        P("e", TOOLHOST_TYPE_STRING, 0, "x", q_enum, NULL, 0),
        P("ab", TOOLHOST_TYPE_STRING, 0, "x", NULL, NULL, 0),
    };
    static const char *const keys[] = {"a", "bb", "ccc", "dd", "e", "ab",
                                       "b", "cc", "abc", "a\0", ""};
    static const size_t klen[] = {1, 2, 3, 2, 1, 2, 1, 2, 3, 2, 0};
    unsigned seed = 17;
    int accepted = 0, refused = 0;
    for (int round = 0; round < 20000; round++) {
        toolhost_param tab[6];
        uint32_t nt = 0;
        for (size_t i = 0; i < 6; i++)
            if (rand_r(&seed) % 3)
                tab[nt++] = pool[i];
        th_param *ps = NULL;
        size_t nps = 0;
        th_error e;
        int prc = th_params_from_abi("t", tab, nt, &ps, &nps, &e);
        if (prc)
            fprintf(stderr, "\n  table: %s\n", e.msg);
        CU_ASSERT_FATAL(prc == 0);
        th_buf b = TH_BUF_INIT;
        msgpack_packer pk;
        msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
        unsigned n = (unsigned)rand_r(&seed) % 5;
        msgpack_pack_map(&pk, n);
        bool ok = true;
        uint64_t seen = 0, nulls = 0;
        bool fill = false;
        for (unsigned i = 0; i < n; i++) {
            size_t k = (size_t)rand_r(&seed) % 11;
            msgpack_pack_str_with_body(&pk, keys[k], klen[k]);
            int vk = rand_r(&seed) % 8;
            switch (vk) {
            case 0: msgpack_pack_str_with_body(&pk, "ab", 2); break;
            case 1: msgpack_pack_str_with_body(&pk, "zz", 2); break;
            case 2: msgpack_pack_int64(&pk, 5); break;
            case 3: msgpack_pack_int64(&pk, -5); break;
            case 4: msgpack_pack_double(&pk, 1.5); break;
            case 5: msgpack_pack_true(&pk); break;
            case 6: msgpack_pack_nil(&pk); break;
            default: msgpack_pack_bin_with_body(&pk, "ab", 2); break;
            }
            size_t j;
            for (j = 0; j < nps; j++)
                if (strlen(ps[j].name) == klen[k] &&
                    memcmp(ps[j].name, keys[k], klen[k]) == 0)
                    break;
            if (j == nps || (seen >> j & 1)) {
                ok = false;
                continue;
            }
            seen |= 1ull << j;
            const th_param *p = &ps[j];
            bool str = vk <= 1 || vk == 7; /* bin "ab" is valid UTF-8 */
            bool t;
            if (vk == 6) { /* null: refused if required, else absent
                              (the map is written again without it) */
                t = !p->required;
                nulls |= 1ull << j;
                fill = true;
            } else if (p->type == TOOLHOST_TYPE_STRING)
                t = str && (!p->n_enum || vk == 0 || vk == 7);
            else if (p->type == TOOLHOST_TYPE_INTEGER)
                t = vk == 2 || vk == 3;
            else if (p->type == TOOLHOST_TYPE_NUMBER)
                t = vk >= 2 && vk <= 4;
            else
                t = vk == 5;
            ok = ok && t;
        }
        seen &= ~nulls;
        for (size_t j = 0; j < nps; j++) {
            if (seen >> j & 1)
                continue;
            if (ps[j].required)
                ok = false;
            else if (ps[j].default_mp)
                fill = true;
        }
        th_buf out = TH_BUF_INIT;
        bool filled = false;
        th_verr ve;
        int rc = th_validate_params("t", ps, nps, b.data, b.len, &out,
                                    &filled, &ve);
        CU_ASSERT_EQUAL(rc, ok ? 0 : TH_EARGS);
        if (ok)
            CU_ASSERT_EQUAL(filled, fill);
        /* the call's entry (view built first, then the quick check): the
         * same verdict, the bytes with the defaults when filled, and the
         * view handed on only when it describes the bytes given */
        th_tool tool = {.name = "t", .params = ps, .n_params = nps};
        toolhost_arg items[TH_ARGS_VIEW_MAX];
        toolhost_args_view view;
        th_buf vout = TH_BUF_INIT;
        const uint8_t *va = NULL;
        size_t vl = 0;
        th_error ve2;
        int vrc = th_validate_call_view(&tool, b.data, b.len, &vout, &va, &vl,
                                        items, &view, &ve2);
        CU_ASSERT_EQUAL(vrc, rc);
        if (vrc == 0 && rc == 0) {
            if (fill) {
                CU_ASSERT_PTR_EQUAL(va, vout.data);
                CU_ASSERT_PTR_NULL(view.data);
            } else {
                CU_ASSERT_PTR_EQUAL(va, b.data);
                CU_ASSERT_EQUAL(vl, b.len);
                CU_ASSERT_PTR_EQUAL(view.data, b.data);
                CU_ASSERT_EQUAL(view.n_args, n);
            }
        } else if (vrc) {
            CU_ASSERT_STRING_EQUAL(ve2.msg, ve.e.msg);
        }
        th_buf_destroy(&vout);
        if ((rc == 0) != ok)
            fprintf(stderr, "\n  round %d: rc %d, model %d: %s\n", round, rc,
                    ok, ve.e.msg);
        accepted += ok;
        refused += !ok;
        th_buf_destroy(&out);
        th_buf_destroy(&b);
        th_params_free(ps, nps);
    }
    if (accepted < 300 || refused < 300)
        fprintf(stderr, "\n  accepted %d, refused %d\n", accepted, refused);
    CU_ASSERT(accepted >= 300 && refused >= 300);
}

/* The one-pass check against the full check itself (review7): the same
 * random parameters and maps validated through a table of at most 5
 * parameters (the quick check applies) and through the same table padded
 * to 70 optional parameters that no map names (more than the quick
 * check's 64: the full check decides).  Both must agree on the outcome
 * and on the bytes handed on.  Values of every kind the view decodes:
 * nil, booleans, integers at the ends of their ranges, float32 and
 * float64, strings (one not UTF-8, one empty), bin (UTF-8 or not), ext;
 * types: any, string (with or without an enum), integer, number,
 * boolean; required and defaulted parameters; duplicate, unknown, empty
 * and near-miss keys. */
static void pack_any(msgpack_packer *pk, unsigned k)
{
    static const char *const strs[] = {"ab", "c", "", "a\xff", "zz"};
    switch (k % 13) {
    case 0: msgpack_pack_nil(pk); break;
    case 1: msgpack_pack_true(pk); break;
    case 2: msgpack_pack_uint64(pk, UINT64_MAX); break;
    case 3: msgpack_pack_int64(pk, INT64_MIN); break;
    case 4: msgpack_pack_uint64(pk, 7); break;
    case 5: msgpack_pack_float(pk, 1.0f); break;
    case 6: msgpack_pack_double(pk, 2.5); break;
    case 7: msgpack_pack_bin_with_body(pk, "ab", 2); break;
    case 8: msgpack_pack_bin_with_body(pk, "\xff\xfe", 2); break;
    case 9: msgpack_pack_ext_with_body(pk, "xy", 2, 5); break;
    default: {
        const char *v = strs[(k / 13) % 5];
        msgpack_pack_str_with_body(pk, v, strlen(v));
        break;
    }
    }
}

static void quick_vs_full(void)
{
    static const char *const names[] = {"a", "bb", "c", "dd", "e"};
    static const char *const keys[] = {"a", "bb", "c", "dd", "e", "b", "",
                                       "zpad00"};
    static const toolhost_type types[] = {
        0, TOOLHOST_TYPE_STRING, TOOLHOST_TYPE_INTEGER, TOOLHOST_TYPE_NUMBER,
        TOOLHOST_TYPE_BOOLEAN};
    static char *en[] = {"ab", "c"};
    static uint8_t dflt[] = {0x07};
    enum { PAD = 70 };
    th_param *ps = calloc(PAD, sizeof *ps);
    char (*pad)[8] = calloc(PAD, sizeof *pad);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ps);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pad);
    for (size_t i = 0; i < PAD; i++) {
        snprintf(pad[i], sizeof pad[i], "zpad%02zu", i + 1);
        ps[i].name = pad[i];
    }
    unsigned seed = 7;
    int quick_ok = 0, differ = 0;
    for (int round = 0; round < 30000; round++) {
        size_t np = (size_t)rand_r(&seed) % 6;
        for (size_t j = 0; j < PAD; j++) {
            th_param *p = &ps[j];
            p->name = j < np ? (char *)names[j] : pad[j];
            p->type = j < np ? types[rand_r(&seed) % 5] : 0;
            p->required = j < np && rand_r(&seed) % 4 == 0;
            p->enum_values = NULL;
            p->n_enum = 0;
            p->default_mp = NULL;
            p->default_len = 0;
            if (j < np && p->type == TOOLHOST_TYPE_STRING &&
                rand_r(&seed) % 3 == 0) {
                p->enum_values = en;
                p->n_enum = 2;
            }
            if (j < np && rand_r(&seed) % 5 == 0) {
                p->default_mp = dflt;
                p->default_len = sizeof dflt;
            }
        }
        th_buf in = TH_BUF_INIT;
        msgpack_packer pk;
        msgpack_packer_init(&pk, &in, th_buf_msgpack_write);
        unsigned nk = (unsigned)rand_r(&seed) % 5;
        msgpack_pack_map(&pk, nk);
        for (unsigned i = 0; i < nk; i++) {
            const char *k = keys[rand_r(&seed) % 8];
            msgpack_pack_str_with_body(&pk, k, strlen(k));
            pack_any(&pk, (unsigned)rand_r(&seed));
        }
        int rc[2];
        size_t olen[2];
        bool filled[2];
        th_buf out[2] = {TH_BUF_INIT, TH_BUF_INIT};
        for (int w = 0; w < 2; w++) {
            th_tool t;
            memset(&t, 0, sizeof t);
            t.name = "t";
            t.params = ps;
            t.n_params = w ? PAD : np;
            toolhost_arg items[TH_ARGS_VIEW_MAX];
            toolhost_args_view view;
            const uint8_t *ao = NULL;
            size_t lo = 0;
            th_error e;
            rc[w] = th_validate_call_view(&t, in.data, in.len, &out[w], &ao,
                                          &lo, items, &view, &e);
            filled[w] = rc[w] == 0 && ao != in.data;
            olen[w] = rc[w] == 0 ? lo : 0;
        }
        bool same = rc[0] == rc[1] && filled[0] == filled[1] &&
                    olen[0] == olen[1] &&
                    (!filled[0] || memcmp(out[0].data, out[1].data,
                                          olen[0]) == 0);
        if (!same && differ++ < 3)
            fprintf(stderr, "\n  round %d: rc %d/%d filled %d/%d len %zu/%zu",
                    round, rc[0], rc[1], filled[0], filled[1], olen[0],
                    olen[1]);
        quick_ok += rc[0] == 0 && !filled[0];
        th_buf_destroy(&out[0]);
        th_buf_destroy(&out[1]);
        th_buf_destroy(&in);
    }
    CU_ASSERT_EQUAL(differ, 0);
    CU_ASSERT(quick_ok >= 1000); /* the quick check was exercised */
    free(pad);
    free(ps);
}

void th_suite_validate(void)
{
    CU_pSuite s = CU_add_suite("validate", suite_init, suite_clean);
    CU_add_test(s, "params_converted", params_converted);
    CU_add_test(s, "params_bad", params_bad);
    CU_add_test(s, "params_stride", params_stride);
    CU_add_test(s, "names", names);
    CU_add_test(s, "not_map", not_map);
    CU_add_test(s, "unknown", unknown);
    CU_add_test(s, "duplicate_key", duplicate_key);
    CU_add_test(s, "missing_required", missing_required);
    CU_add_test(s, "wrong_type", wrong_type);
    CU_add_test(s, "accepted", accepted);
    CU_add_test(s, "constraints", constraints);
    CU_add_test(s, "enum_values", enum_values);
    CU_add_test(s, "bin_strings", bin_strings);
    CU_add_test(s, "defaults_filled", defaults_filled);
    CU_add_test(s, "no_prefix", no_prefix);
    CU_add_test(s, "null_optional", null_optional);
    CU_add_test(s, "validate_call", validate_call);
    CU_add_test(s, "canonical", canonical);
    CU_add_test(s, "threads", threads);
    CU_add_test(s, "quick_model", quick_model);
    CU_add_test(s, "quick_vs_full", quick_vs_full);
}
