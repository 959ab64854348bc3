/* test_argview.c - ABI 1.2, the decoded arguments (toolhost_call.args_view):
 * th_args_view_build() on good and broken maps, the SDK's getters reading
 * the view give what they give parsing the map (a model over random maps,
 * every getter, every type), an older host's call (struct_size of 1.1) is
 * never read past its end, and through the real call path (th_host_open,
 * th_call_sync) a plugin gets the view of its validated arguments
 * (defaults filled in) or, with more than TH_ARGS_VIEW_MAX arguments,
 * none, reading the same values either way. */
#include <CUnit/CUnit.h>
#include <msgpack.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/host_session.h"
#include "common/th_test.h"
#include "th/host.h"
#include "th/json.h"
#include "th/tool.h"
#include "toolhost/sdk.h"

/* ---- th_args_view_build --------------------------------------------------- */

static void build_refuses_what_is_not_a_flat_map(void)
{
    toolhost_arg it[TH_ARGS_VIEW_MAX];
    toolhost_args_view v;
    static const uint8_t not_map[] = {0x91, 0x01};
    static const uint8_t int_key[] = {0x81, 0x01, 0x02};
    static const uint8_t truncated[] = {0x81, 0xa4, 't', 'e', 'x', 't', 0xa5, 'a'};
    static const uint8_t trailing[] = {0x81, 0xa1, 'a', 0x01, 0x02};
    static const uint8_t nested_short[] = {0x81, 0xa1, 'a', 0x92, 0x01};
    static const uint8_t c1[] = {0x81, 0xa1, 'a', 0xc1};
    static const uint8_t empty[] = {0x80};
    CU_ASSERT_EQUAL(th_args_view_build(not_map, sizeof not_map, it, 16, &v), -1);
    CU_ASSERT_EQUAL(th_args_view_build(int_key, sizeof int_key, it, 16, &v), -1);
    CU_ASSERT_EQUAL(th_args_view_build(truncated, sizeof truncated, it, 16, &v), -1);
    CU_ASSERT_EQUAL(th_args_view_build(trailing, sizeof trailing, it, 16, &v), -1);
    CU_ASSERT_EQUAL(th_args_view_build(nested_short, sizeof nested_short, it, 16, &v), -1);
    CU_ASSERT_EQUAL(th_args_view_build(c1, sizeof c1, it, 16, &v), -1);
    CU_ASSERT_EQUAL(th_args_view_build(NULL, 0, it, 16, &v), -1);
    CU_ASSERT_EQUAL(th_args_view_build(empty, sizeof empty, it, 16, &v), 0);
    CU_ASSERT_EQUAL(v.n_args, 0);
    /* more entries than room: no view */
    static const uint8_t two[] = {0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x02};
    CU_ASSERT_EQUAL(th_args_view_build(two, sizeof two, it, 1, &v), -1);
    CU_ASSERT_EQUAL(th_args_view_build(two, sizeof two, it, 2, &v), 0);
    CU_ASSERT_EQUAL(v.n_args, 2);
    CU_ASSERT_EQUAL(it[1].type, TOOLHOST_VALUE_UINT);
    CU_ASSERT_EQUAL(it[1].u, 2);
    CU_ASSERT_EQUAL(it[1].name_len, 1);
    CU_ASSERT_EQUAL(it[1].name[0], 'b');
    CU_ASSERT_EQUAL(it[1].struct_size, sizeof(toolhost_arg));
    CU_ASSERT_PTR_EQUAL(v.data, two);
}

/* ---- the SDK over the view: a model ---------------------------------------- */

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void pack_random_value(msgpack_packer *pk, int depth)
{
    static const char *strs[] = {"", "hi", "with\0nul", "é ü", "a longer string of more than thirty-one bytes"};
    static const unsigned char bad_utf8[] = {0xff, 0xfe, 'x'};
    switch (rnd() % (depth ? 13 : 11)) {
    case 0: msgpack_pack_nil(pk); break;
    case 1: rnd() & 1 ? msgpack_pack_true(pk) : msgpack_pack_false(pk); break;
    case 2: msgpack_pack_uint64(pk, rnd() >> (rnd() % 64)); break;
    case 3: msgpack_pack_int64(pk, -(int64_t)(rnd() >> (1 + rnd() % 63)) - 1); break;
    case 4: msgpack_pack_float(pk, (float)(rnd() % 1000) / 7.0f); break;
    case 5: msgpack_pack_double(pk, (double)(rnd() % 100000) / 3.0); break;
    case 6: {
        const char *s = strs[rnd() % 5];
        size_t n = s[0] == 'w' ? 8 : strlen(s);
        msgpack_pack_str_with_body(pk, s, n);
        break;
    }
    case 7:
        if (rnd() & 1)
            msgpack_pack_bin_with_body(pk, "utf8 bin", 8);
        else
            msgpack_pack_bin_with_body(pk, bad_utf8, sizeof bad_utf8);
        break;
    case 8: msgpack_pack_ext_with_body(pk, "abcd", 1u << (rnd() % 3), 5); break;
    case 9: msgpack_pack_int8(pk, (int8_t)(rnd() % 256)); break;
    case 10: msgpack_pack_int32(pk, (int32_t)rnd()); break;
    case 11: {
        uint32_t n = (uint32_t)(rnd() % 4);
        msgpack_pack_array(pk, n);
        int ints = rnd() & 1;
        for (uint32_t i = 0; i < n; i++) {
            if (ints)
                msgpack_pack_int64(pk, (int64_t)(rnd() % 100) - 50);
            else
                msgpack_pack_str_with_body(pk, "el", 2);
        }
        break;
    }
    default:
        msgpack_pack_map(pk, 1);
        msgpack_pack_str_with_body(pk, "in", 2);
        pack_random_value(pk, depth - 1);
        break;
    }
}

typedef struct reading {
    int rc[9];
    bool has;
    const char *s;
    size_t slen;
    int64_t i, i_or;
    double d;
    bool b;
    char cstr[64];
    int otype;
    size_t nstrings, nints;
    int64_t ints_sum;
} reading;

static void read_key(th_sdk_args *a, const char *key, reading *r)
{
    memset(r, 0, sizeof *r);
    r->has = th_sdk_arg_has(a, key);
    r->rc[0] = th_sdk_arg_string(a, key, &r->s, &r->slen);
    r->rc[1] = th_sdk_arg_int(a, key, &r->i);
    r->rc[2] = th_sdk_arg_number(a, key, &r->d);
    r->rc[3] = th_sdk_arg_bool(a, key, &r->b);
    r->i_or = th_sdk_arg_int_or(a, key, 3);
    const char *c = NULL;
    r->rc[4] = th_sdk_arg_cstr(a, key, &c);
    if (c)
        snprintf(r->cstr, sizeof r->cstr, "%s", c);
    const msgpack_object *o = NULL;
    r->rc[5] = th_sdk_arg_object(a, key, &o);
    r->otype = o ? (int)o->type : -1;
    const char *const *ss = NULL;
    r->rc[6] = th_sdk_arg_strings(a, key, &ss, &r->nstrings);
    const int64_t *is = NULL;
    r->rc[7] = th_sdk_arg_ints(a, key, &is, &r->nints);
    for (size_t k = 0; is && k < r->nints; k++)
        r->ints_sum = (int64_t)((uint64_t)r->ints_sum + (uint64_t)is[k]);
}

static bool same_reading(const reading *x, const reading *y)
{
    return memcmp(x->rc, y->rc, sizeof x->rc) == 0 && x->has == y->has &&
           x->slen == y->slen && (!x->slen || memcmp(x->s, y->s, x->slen) == 0) &&
           x->i == y->i && x->i_or == y->i_or && (x->d == y->d || (x->d != x->d && y->d != y->d)) &&
           x->b == y->b && strcmp(x->cstr, y->cstr) == 0 &&
           x->otype == y->otype && x->nstrings == y->nstrings &&
           x->nints == y->nints && x->ints_sum == y->ints_sum;
}

static void sdk_view_reads_as_parsing(void)
{
    static const char *keys[] = {"k0", "k1", "k2", "k3", "k4", "k5", "absent"};
    int rounds = 3000, viewed = 0, bad = 0;
    for (int round = 0; round < rounds; round++) {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        uint32_t n = (uint32_t)(rnd() % 7);
        msgpack_pack_map(&pk, n);
        for (uint32_t k = 0; k < n; k++) {
            const char *key = keys[rnd() % 6]; /* repeats happen */
            msgpack_pack_str_with_body(&pk, key, 2);
            pack_random_value(&pk, 2);
        }
        const uint8_t *data = (const uint8_t *)sb.data;
        toolhost_arg it[TH_ARGS_VIEW_MAX];
        toolhost_args_view v;
        CU_ASSERT_EQUAL_FATAL(th_args_view_build(data, sb.size, it, 16, &v), 0);
        toolhost_call call;
        memset(&call, 0, sizeof call);
        call.struct_size = sizeof call;
        call.args_view = &v;
        th_sdk_args a, b;
        CU_ASSERT_EQUAL(th_sdk_args_init_call(&a, &call, data, sb.size), 0);
        viewed += a.view != NULL;
        CU_ASSERT_EQUAL(th_sdk_args_init(&b, data, sb.size), 0);
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
            /* a fresh view per key: the object getters leave it */
            th_sdk_args_destroy(&a);
            th_sdk_args_init_call(&a, &call, data, sb.size);
            reading ra, rb;
            read_key(&a, keys[k], &ra);
            read_key(&b, keys[k], &rb);
            if (!same_reading(&ra, &rb)) {
                if (bad++ < 3)
                    fprintf(stderr, "round %d key %s: view and parse differ\n",
                            round, keys[k]);
            }
        }
        th_sdk_args_destroy(&a);
        th_sdk_args_destroy(&b);
        msgpack_sbuffer_destroy(&sb);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(viewed, rounds);
}

/* A call of an older host (struct_size of 1.1) ends before args_view:
 * the SDK must not read it; a view of other bytes is not used either. */
static void sdk_ignores_what_it_must_not_read(void)
{
    static const uint8_t args[] = {0x81, 0xa4, 't', 'e', 'x', 't', 0xa2, 'h', 'i'};
    toolhost_arg it[4];
    toolhost_args_view v;
    CU_ASSERT_EQUAL_FATAL(th_args_view_build(args, sizeof args, it, 4, &v), 0);
    it[0].bytes = (const uint8_t *)"XX"; /* what a read of the view gives */
    toolhost_call call;
    memset(&call, 0, sizeof call);
    call.args_view = &v;
    const char *s;
    size_t n;
    th_sdk_args a;

    call.struct_size = offsetof(toolhost_call, args_view); /* a 1.1 host */
    CU_ASSERT_EQUAL(th_sdk_args_init_call(&a, &call, args, sizeof args), 0);
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, "text", &s, &n), 0);
    CU_ASSERT_NSTRING_EQUAL(s, "hi", 2);
    th_sdk_args_destroy(&a);

    call.struct_size = sizeof call; /* a 1.2 host: the view is read */
    CU_ASSERT_EQUAL(th_sdk_args_init_call(&a, &call, args, sizeof args), 0);
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, "text", &s, &n), 0);
    CU_ASSERT_NSTRING_EQUAL(s, "XX", 2);
    th_sdk_args_destroy(&a);

    uint8_t copy[sizeof args]; /* other bytes: parsed */
    memcpy(copy, args, sizeof args);
    CU_ASSERT_EQUAL(th_sdk_args_init_call(&a, &call, copy, sizeof copy), 0);
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, "text", &s, &n), 0);
    CU_ASSERT_NSTRING_EQUAL(s, "hi", 2);
    th_sdk_args_destroy(&a);

    v.struct_size = offsetof(toolhost_args_view, args); /* too small */
    CU_ASSERT_EQUAL(th_sdk_args_init_call(&a, &call, args, sizeof args), 0);
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, "text", &s, &n), 0);
    CU_ASSERT_NSTRING_EQUAL(s, "hi", 2);
    th_sdk_args_destroy(&a);

    CU_ASSERT_EQUAL(th_sdk_args_init_call(&a, NULL, args, sizeof args), 0);
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, "text", &s, &n), 0);
    th_sdk_args_destroy(&a);
    CU_ASSERT_EQUAL(th_sdk_args_init_call(NULL, &call, args, sizeof args),
                    TH_SDK_EINVAL);
}

/* ---- through the real call path --------------------------------------------- */

static th_host *h;
static th_session *s;

static int suite_init(void)
{
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "plugins:\n"
             "  - name: abi12_view\n"
             "    path: %s\n"
             "  - name: abi10_basic\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: main\n"
             "    tools: [\"*\"]\n",
             th_test_build_path("fixtures/abi12_view.so"),
             th_test_build_path("fixtures/abi10_basic.so"));
    return th_test_host_session_open("abi12.yaml", yaml, &h, &s);
}

static int suite_clean(void)
{
    th_test_host_session_close(h, s);
    return 0;
}

static int call_json(const char *tool, const char *json, bool may_block,
                     th_result_copy *r)
{
    return th_test_call_json(s, tool, json, 10000, may_block, r);
}

#define out_of th_test_out

static void host_hands_the_view(void)
{
    th_result_copy r;
    /* defaults filled in (n, flag): the view is of the validated map */
    CU_ASSERT_EQUAL(call_json("abi12_view_probe", "{\"text\": \"hi\"}", true, &r), 0);
    CU_ASSERT_TRUE(r.ok);
    CU_ASSERT_STRING_EQUAL(out_of(&r), "view=1 n_args=3 same=1 text=hi n=7 flag=0");
    th_result_copy_destroy(&r);
    /* on a worker (the caller does not run it) too */
    CU_ASSERT_EQUAL(call_json("abi12_view_probe",
                              "{\"text\": \"yo\", \"n\": -3, \"flag\": true, \"x\": 1.5}",
                              false, &r), 0);
    CU_ASSERT_STRING_EQUAL(out_of(&r), "view=1 n_args=4 same=1 text=yo n=-3 flag=1");
    th_result_copy_destroy(&r);
}

/* Every parameter given (nothing filled in): execute() gets the view
 * validation decoded the caller's bytes into (the call path builds none
 * of its own while the arguments are borrowed), inline and when the call
 * leaves the caller's frame for a worker (its own view then). */
static void validation_view_handed_on(void)
{
    th_result_copy r;
    for (int inl = 1; inl >= 0; inl--) {
        CU_ASSERT_EQUAL(call_json("abi12_view_probe",
                                  "{\"flag\": true, \"text\": \"all\", \"n\": 5}",
                                  inl != 0, &r), 0);
        CU_ASSERT_TRUE(r.ok);
        CU_ASSERT_STRING_EQUAL(out_of(&r),
                               "view=1 n_args=3 same=1 text=all n=5 flag=1");
        th_result_copy_destroy(&r);
    }
}

static void many_args_no_view(void)
{
    char json[1024] = "{\"text\": \"many\"";
    for (int i = 1; i <= 17; i++) {
        char kv[32];
        snprintf(kv, sizeof kv, ", \"p%d\": \"v\"", i);
        strcat(json, kv);
    }
    strcat(json, "}");
    th_result_copy r;
    CU_ASSERT_EQUAL(call_json("abi12_view_probe", json, true, &r), 0);
    CU_ASSERT_TRUE(r.ok);
    CU_ASSERT_STRING_EQUAL(out_of(&r), "view=0 n_args=0 same=1 text=many n=7 flag=0");
    th_result_copy_destroy(&r);
}

/* A plugin of the frozen 1.0 header beside it: its call struct is the
 * host's (with args_view), which it does not know; it works unchanged. */
static void old_plugin_unchanged(void)
{
    th_result_copy r;
    CU_ASSERT_EQUAL(call_json("a10_echo", "{\"text\": \"ab\"}", true, &r), 0);
    CU_ASSERT_TRUE(r.ok);
    char want[64];
    snprintf(want, sizeof want, "abi 1.%u n=2: abab", TOOLHOST_ABI_MINOR);
    CU_ASSERT_STRING_EQUAL(out_of(&r), want);
    th_result_copy_destroy(&r);
}

void th_suite_argview(void)
{
    CU_pSuite su = CU_add_suite("argview", suite_init, suite_clean);
    CU_add_test(su, "build_refuses", build_refuses_what_is_not_a_flat_map);
    CU_add_test(su, "sdk_view_reads_as_parsing", sdk_view_reads_as_parsing);
    CU_add_test(su, "sdk_ignores_what_it_must_not_read", sdk_ignores_what_it_must_not_read);
    CU_add_test(su, "host_hands_the_view", host_hands_the_view);
    CU_add_test(su, "validation_view_handed_on", validation_view_handed_on);
    CU_add_test(su, "many_args_no_view", many_args_no_view);
    CU_add_test(su, "old_plugin_unchanged", old_plugin_unchanged);
}
