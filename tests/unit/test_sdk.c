/* test_sdk.c - the plugin SDK: argument getters, writers, meta builder,
 * progress and cancellation helpers, declaration macros, root-confined
 * paths. */
#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/plugin_harness.h"
#include "common/th_test.h"
#include "th/buf.h"
#include "th/tool.h"
#include <jansson.h>
#include "toolhost/sdk.h"
#include "toolhost/testing.h"


/* ---- a tiny fake call ----------------------------------------------------- */

typedef struct fake {
    toolhost_call call;
    th_buf out, err;
    uint8_t meta[256];
    size_t meta_len;
    int n_progress;
    double fraction;
    char message[128];
    int cancelled;
    char log[256];
} fake;

static int f_write(toolhost_call *c, int stream, const void *d, size_t n)
{
    fake *f = (fake *)c;
    if (f->cancelled)
        return TOOLHOST_ECANCELLED;
    th_buf_append(stream == TOOLHOST_STDOUT ? &f->out : &f->err, d, n);
    return 0;
}
static int f_set_meta(toolhost_call *c, const uint8_t *m, size_t n)
{
    fake *f = (fake *)c;
    if (n > sizeof f->meta)
        return TOOLHOST_EINVAL;
    memcpy(f->meta, m, n);
    f->meta_len = n;
    return 0;
}
static int f_progress(toolhost_call *c, double fr, const char *msg,
                      const uint8_t *d, size_t n)
{
    (void)d, (void)n;
    fake *f = (fake *)c;
    f->n_progress++;
    f->fraction = fr;
    snprintf(f->message, sizeof f->message, "%s", msg ? msg : "(null)");
    return 0;
}
static int f_is_cancelled(const toolhost_call *c)
{
    return ((const fake *)c)->cancelled;
}
static void f_log(const toolhost_host_api *h, int level, const char *m);

static const toolhost_host_api fake_api = {
    .struct_size = sizeof(toolhost_host_api),
    .abi_major = TOOLHOST_ABI_MAJOR,
    .write = f_write,
    .set_meta = f_set_meta,
    .progress = f_progress,
    .is_cancelled = f_is_cancelled,
    .log = f_log,
};

static fake *log_target;
static void f_log(const toolhost_host_api *h, int level, const char *m)
{
    (void)h;
    snprintf(log_target->log, sizeof log_target->log, "%d:%s", level, m);
}

static void fake_init(fake *f)
{
    memset(f, 0, sizeof *f);
    f->call.struct_size = sizeof f->call;
    f->call.host = &fake_api;
    th_buf_init(&f->out);
    th_buf_init(&f->err);
}

static void fake_free(fake *f)
{
    th_buf_destroy(&f->out);
    th_buf_destroy(&f->err);
}

static const char *text(const th_buf *b)
{
    return b->data ? (const char *)b->data : "";
}

/* ---- arguments ----------------------------------------------------------- */

/* {"s":"hello","neg":-5,"u":42,"big":2^64-1,"f":1.5,"b":true,"nil":nil,
 *  "strs":["a","bc"],"ints":[1,-2,3],"mixed":[1,"x"],"nul":"a\0b",
 *  "obj":{"k":1},"empty":[]} */
static void pack_args(th_buf *b)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, th_buf_msgpack_write);
#define K(s) msgpack_pack_str_with_body(&pk, s, strlen(s))
    msgpack_pack_map(&pk, 13);
    K("s"), K("hello");
    K("neg"), msgpack_pack_int64(&pk, -5);
    K("u"), msgpack_pack_uint64(&pk, 42);
    K("big"), msgpack_pack_uint64(&pk, UINT64_MAX);
    K("f"), msgpack_pack_double(&pk, 1.5);
    K("b"), msgpack_pack_true(&pk);
    K("nil"), msgpack_pack_nil(&pk);
    K("strs"), msgpack_pack_array(&pk, 2), K("a"), K("bc");
    K("ints"), msgpack_pack_array(&pk, 3), msgpack_pack_int(&pk, 1),
        msgpack_pack_int(&pk, -2), msgpack_pack_int(&pk, 3);
    K("mixed"), msgpack_pack_array(&pk, 2), msgpack_pack_int(&pk, 1), K("x");
    K("nul"), msgpack_pack_str_with_body(&pk, "a\0b", 3);
    K("obj"), msgpack_pack_map(&pk, 1), K("k"), msgpack_pack_int(&pk, 1);
    K("empty"), msgpack_pack_array(&pk, 0);
#undef K
}

static void test_args_init(void)
{
    th_sdk_args a;
    CU_ASSERT_EQUAL(th_sdk_args_init(&a, NULL, 0), 0);
    CU_ASSERT_FALSE(th_sdk_arg_has(&a, "x"));
    int64_t v = 7;
    CU_ASSERT_EQUAL(th_sdk_arg_int(&a, "x", &v), TH_SDK_EABSENT);
    CU_ASSERT_EQUAL(v, 7);
    th_sdk_args_destroy(&a);
    th_sdk_args_destroy(&a); /* twice is fine */

    const uint8_t arr[] = {0x91, 0x01};      /* [1]: not a map */
    CU_ASSERT_EQUAL(th_sdk_args_init(&a, arr, sizeof arr), TH_SDK_EINVAL);
    th_sdk_args_destroy(&a);
    const uint8_t trail[] = {0x80, 0x01};    /* {} then garbage */
    CU_ASSERT_EQUAL(th_sdk_args_init(&a, trail, sizeof trail), TH_SDK_EINVAL);
    th_sdk_args_destroy(&a);
    const uint8_t cut[] = {0x81, 0xa1};      /* truncated */
    CU_ASSERT_EQUAL(th_sdk_args_init(&a, cut, sizeof cut), TH_SDK_EINVAL);
    th_sdk_args_destroy(&a);
    CU_ASSERT_EQUAL(th_sdk_args_init(NULL, arr, 1), TH_SDK_EINVAL);
}

/* The one str/bin rule: a bin that is valid UTF-8 is a string for every
 * string getter; other bin is TH_SDK_ETYPE (the host's validator refuses
 * it first, see validate:bin_strings). */
static void test_args_bin_strings(void)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
#define K(s) msgpack_pack_str_with_body(&pk, s, strlen(s))
    msgpack_pack_map(&pk, 5);
    K("t"), msgpack_pack_bin_with_body(&pk, "h\xc3\xa9llo", 6);
    K("raw"), msgpack_pack_bin_with_body(&pk, "\xff\xfe", 2);
    K("sur"), msgpack_pack_bin_with_body(&pk, "\xed\xa0\x80", 3);
    K("arr"), msgpack_pack_array(&pk, 2), K("a"),
        msgpack_pack_bin_with_body(&pk, "bc", 2);
    K("badarr"), msgpack_pack_array(&pk, 1),
        msgpack_pack_bin_with_body(&pk, "\xc0\x80", 2);
#undef K
    th_sdk_args a;
    CU_ASSERT_EQUAL_FATAL(th_sdk_args_init(&a, b.data, b.len), 0);
    const char *s = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, "t", &s, &n), 0);
    CU_ASSERT(n == 6 && s && memcmp(s, "h\xc3\xa9llo", 6) == 0);
    s = NULL;
    CU_ASSERT_EQUAL(th_sdk_arg_cstr(&a, "t", &s), 0);
    CU_ASSERT(s && strcmp(s, "h\xc3\xa9llo") == 0);
    CU_ASSERT_STRING_EQUAL(th_sdk_arg_cstr_or(&a, "t", "d"), "h\xc3\xa9llo");
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, "raw", &s, &n), TH_SDK_ETYPE);
    CU_ASSERT_EQUAL(th_sdk_arg_cstr(&a, "raw", &s), TH_SDK_ETYPE);
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, "sur", &s, &n), TH_SDK_ETYPE);
    const char *const *ss = NULL;
    CU_ASSERT_EQUAL(th_sdk_arg_strings(&a, "arr", &ss, &n), 0);
    CU_ASSERT(n == 2 && ss && strcmp(ss[1], "bc") == 0);
    CU_ASSERT_EQUAL(th_sdk_arg_strings(&a, "badarr", &ss, &n), TH_SDK_ETYPE);
    th_sdk_args_destroy(&a);
    th_buf_destroy(&b);
}

static void test_args_scalars(void)
{
    th_buf b = TH_BUF_INIT;
    pack_args(&b);
    th_sdk_args a;
    CU_ASSERT_EQUAL_FATAL(th_sdk_args_init(&a, b.data, b.len), 0);

    CU_ASSERT_TRUE(th_sdk_arg_has(&a, "nil"));
    CU_ASSERT_FALSE(th_sdk_arg_has(&a, "nope"));
    CU_ASSERT_FALSE(th_sdk_arg_has(&a, NULL));

    const char *s = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, "s", &s, &n), 0);
    CU_ASSERT_EQUAL(n, 5);
    CU_ASSERT_NSTRING_EQUAL(s, "hello", 5);
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, "s", &s, NULL), 0);
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, "u", &s, &n), TH_SDK_ETYPE);
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, "nope", &s, &n), TH_SDK_EABSENT);
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, "s", NULL, &n), TH_SDK_EINVAL);
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, NULL, &s, &n), TH_SDK_EINVAL);
    CU_ASSERT_EQUAL(th_sdk_arg_string(&a, "nul", &s, &n), 0);
    CU_ASSERT_EQUAL(n, 3);

    const char *c = NULL;
    CU_ASSERT_EQUAL(th_sdk_arg_cstr(&a, "s", &c), 0);
    CU_ASSERT_STRING_EQUAL(c, "hello");
    CU_ASSERT_EQUAL(th_sdk_arg_cstr(&a, "nul", &c), TH_SDK_EINVAL);
    CU_ASSERT_EQUAL(th_sdk_arg_cstr(&a, "b", &c), TH_SDK_ETYPE);
    CU_ASSERT_EQUAL(th_sdk_arg_cstr(&a, "nope", &c), TH_SDK_EABSENT);
    CU_ASSERT_STRING_EQUAL(c, "hello"); /* untouched on failure */

    int64_t i = 0;
    CU_ASSERT_EQUAL(th_sdk_arg_int(&a, "u", &i), 0);
    CU_ASSERT_EQUAL(i, 42);
    CU_ASSERT_EQUAL(th_sdk_arg_int(&a, "neg", &i), 0);
    CU_ASSERT_EQUAL(i, -5);
    CU_ASSERT_EQUAL(th_sdk_arg_int(&a, "big", &i), TH_SDK_ERANGE);
    CU_ASSERT_EQUAL(i, -5);
    CU_ASSERT_EQUAL(th_sdk_arg_int(&a, "f", &i), TH_SDK_ETYPE);
    CU_ASSERT_EQUAL(th_sdk_arg_int(&a, "s", &i), TH_SDK_ETYPE);
    CU_ASSERT_EQUAL(th_sdk_arg_int(&a, "nil", &i), TH_SDK_ETYPE);
    CU_ASSERT_EQUAL(th_sdk_arg_int(&a, "nope", &i), TH_SDK_EABSENT);
    CU_ASSERT_EQUAL(th_sdk_arg_int(&a, "u", NULL), TH_SDK_EINVAL);

    double d = 0;
    CU_ASSERT_EQUAL(th_sdk_arg_number(&a, "f", &d), 0);
    CU_ASSERT_DOUBLE_EQUAL(d, 1.5, 1e-12);
    CU_ASSERT_EQUAL(th_sdk_arg_number(&a, "u", &d), 0); /* int is a number */
    CU_ASSERT_DOUBLE_EQUAL(d, 42.0, 1e-12);
    CU_ASSERT_EQUAL(th_sdk_arg_number(&a, "neg", &d), 0);
    CU_ASSERT_DOUBLE_EQUAL(d, -5.0, 1e-12);
    CU_ASSERT_EQUAL(th_sdk_arg_number(&a, "b", &d), TH_SDK_ETYPE);
    CU_ASSERT_EQUAL(th_sdk_arg_number(&a, "nope", &d), TH_SDK_EABSENT);

    bool bv = false;
    CU_ASSERT_EQUAL(th_sdk_arg_bool(&a, "b", &bv), 0);
    CU_ASSERT_TRUE(bv);
    CU_ASSERT_EQUAL(th_sdk_arg_bool(&a, "u", &bv), TH_SDK_ETYPE);
    CU_ASSERT_EQUAL(th_sdk_arg_bool(&a, "nope", &bv), TH_SDK_EABSENT);

    const msgpack_object *o = NULL;
    CU_ASSERT_EQUAL(th_sdk_arg_object(&a, "obj", &o), 0);
    CU_ASSERT_EQUAL(o->type, MSGPACK_OBJECT_MAP);
    CU_ASSERT_EQUAL(th_sdk_arg_object(&a, "nope", &o), TH_SDK_EABSENT);
    CU_ASSERT_EQUAL(th_sdk_arg_object(&a, "obj", NULL), TH_SDK_EINVAL);

    /* the _or shorthands */
    CU_ASSERT_EQUAL(th_sdk_arg_int_or(&a, "u", 9), 42);
    CU_ASSERT_EQUAL(th_sdk_arg_int_or(&a, "nope", 9), 9);
    CU_ASSERT_EQUAL(th_sdk_arg_int_or(&a, "s", 9), 9);
    CU_ASSERT_DOUBLE_EQUAL(th_sdk_arg_number_or(&a, "f", 2), 1.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(th_sdk_arg_number_or(&a, "s", 2), 2.0, 1e-12);
    CU_ASSERT_TRUE(th_sdk_arg_bool_or(&a, "b", false));
    CU_ASSERT_FALSE(th_sdk_arg_bool_or(&a, "nope", false));
    CU_ASSERT_STRING_EQUAL(th_sdk_arg_cstr_or(&a, "s", "d"), "hello");
    CU_ASSERT_STRING_EQUAL(th_sdk_arg_cstr_or(&a, "nope", "d"), "d");
    CU_ASSERT_PTR_NULL(th_sdk_arg_cstr_or(&a, "u", NULL));

    th_sdk_args_destroy(&a);
    th_buf_destroy(&b);
}

static void test_args_arrays(void)
{
    th_buf b = TH_BUF_INIT;
    pack_args(&b);
    th_sdk_args a;
    CU_ASSERT_EQUAL_FATAL(th_sdk_args_init(&a, b.data, b.len), 0);

    const char *const *ss = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL(th_sdk_arg_strings(&a, "strs", &ss, &n), 0);
    CU_ASSERT_EQUAL_FATAL(n, 2);
    CU_ASSERT_STRING_EQUAL(ss[0], "a");
    CU_ASSERT_STRING_EQUAL(ss[1], "bc");
    CU_ASSERT_EQUAL(th_sdk_arg_strings(&a, "mixed", &ss, &n), TH_SDK_ETYPE);
    CU_ASSERT_EQUAL(th_sdk_arg_strings(&a, "s", &ss, &n), TH_SDK_ETYPE);
    CU_ASSERT_EQUAL(th_sdk_arg_strings(&a, "nope", &ss, &n), TH_SDK_EABSENT);
    CU_ASSERT_EQUAL(th_sdk_arg_strings(&a, "strs", NULL, &n), TH_SDK_EINVAL);
    CU_ASSERT_EQUAL(th_sdk_arg_strings(&a, "empty", &ss, &n), 0);
    CU_ASSERT_EQUAL(n, 0);

    const int64_t *is = NULL;
    CU_ASSERT_EQUAL(th_sdk_arg_ints(&a, "ints", &is, &n), 0);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    CU_ASSERT_EQUAL(is[0], 1);
    CU_ASSERT_EQUAL(is[1], -2);
    CU_ASSERT_EQUAL(is[2], 3);
    CU_ASSERT_EQUAL(th_sdk_arg_ints(&a, "mixed", &is, &n), TH_SDK_ETYPE);
    CU_ASSERT_EQUAL(th_sdk_arg_ints(&a, "strs", &is, &n), TH_SDK_ETYPE);
    CU_ASSERT_EQUAL(th_sdk_arg_ints(&a, "u", &is, &n), TH_SDK_ETYPE);
    CU_ASSERT_EQUAL(th_sdk_arg_ints(&a, "nope", &is, &n), TH_SDK_EABSENT);

    th_sdk_args_destroy(&a);
    th_buf_destroy(&b);
}

static void test_strerror(void)
{
    CU_ASSERT_STRING_EQUAL(th_sdk_strerror(TH_SDK_EABSENT), "absent");
    CU_ASSERT_STRING_EQUAL(th_sdk_strerror(TH_SDK_ETYPE), "wrong type");
    CU_ASSERT_STRING_EQUAL(th_sdk_strerror(12345), "unknown error");
    CU_ASSERT_EQUAL(TH_SDK_ECANCELLED, TOOLHOST_ECANCELLED);
}

/* ---- writers ---------------------------------------------------------------- */

static void test_writers(void)
{
    fake f;
    fake_init(&f);
    toolhost_call *c = &f.call;
    CU_ASSERT_EQUAL(th_sdk_write(c, TOOLHOST_STDOUT, "ab", 2), 0);
    CU_ASSERT_EQUAL(th_sdk_puts(c, "c"), 0);
    CU_ASSERT_EQUAL(th_sdk_printf(c, "-%d-%s", 42, "x"), 0);
    CU_ASSERT_EQUAL(th_sdk_eprintf(c, "warn %u", 7u), 0);
    CU_ASSERT_STRING_EQUAL(text(&f.out), "abc-42-x");
    CU_ASSERT_STRING_EQUAL(text(&f.err), "warn 7");

    /* longer than the stack buffer */
    char big[2000];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    th_buf_reset(&f.out);
    CU_ASSERT_EQUAL(th_sdk_printf(c, "<%s>", big), 0);
    CU_ASSERT_EQUAL(f.out.len, sizeof big + 1);
    CU_ASSERT_EQUAL(f.out.data[0], '<');
    CU_ASSERT_EQUAL(f.out.data[f.out.len - 1], '>');

    th_buf_reset(&f.err);
    CU_ASSERT_EQUAL(th_sdk_fail(c, "no such file: %s", "x"), TOOLHOST_FAILED);
    CU_ASSERT_STRING_EQUAL(text(&f.err), "no such file: x\n");

    CU_ASSERT_EQUAL(th_sdk_write(NULL, 1, "a", 1), TH_SDK_EINVAL);
    CU_ASSERT_EQUAL(th_sdk_write(c, 1, NULL, 1), TH_SDK_EINVAL);
    CU_ASSERT_EQUAL(th_sdk_write(c, 1, NULL, 0), 0);
    CU_ASSERT_EQUAL(th_sdk_puts(c, NULL), TH_SDK_EINVAL);

    f.cancelled = 1; /* the host's answer passes through */
    CU_ASSERT_EQUAL(th_sdk_printf(c, "late"), TH_SDK_ECANCELLED);
    CU_ASSERT_EQUAL(th_sdk_fail(c, "late"), TOOLHOST_FAILED);
    fake_free(&f);
}

static void test_progress_cancel_log(void)
{
    fake f;
    fake_init(&f);
    toolhost_call *c = &f.call;
    CU_ASSERT_EQUAL(th_sdk_progress(c, 0.5, "step %d/%d", 1, 2), 0);
    CU_ASSERT_EQUAL(f.n_progress, 1);
    CU_ASSERT_DOUBLE_EQUAL(f.fraction, 0.5, 1e-12);
    CU_ASSERT_STRING_EQUAL(f.message, "step 1/2");
    CU_ASSERT_EQUAL(th_sdk_progress(c, -1, NULL), 0);
    CU_ASSERT_STRING_EQUAL(f.message, "(null)");
    CU_ASSERT_EQUAL(th_sdk_progress(NULL, 0, NULL), TH_SDK_EINVAL);

    CU_ASSERT_FALSE(th_sdk_cancelled(c));
    CU_ASSERT_EQUAL(th_sdk_sleep_ms(c, 3), 0);
    f.cancelled = 1;
    CU_ASSERT_TRUE(th_sdk_cancelled(c));
    CU_ASSERT_EQUAL(th_sdk_sleep_ms(c, 60000), TH_SDK_ECANCELLED); /* at once */
    CU_ASSERT_FALSE(th_sdk_cancelled(NULL));

    log_target = &f;
    th_sdk_log(&fake_api, TOOLHOST_LOG_WARN, "root is %s", "/x");
    CU_ASSERT_STRING_EQUAL(f.log, "1:root is /x");
    th_sdk_log(NULL, 0, "dropped");
    fake_free(&f);
}

/* ---- meta --------------------------------------------------------------------- */

static void test_meta(void)
{
    th_sdk_meta m;
    th_sdk_meta_init(&m);
    const uint8_t *d;
    size_t n;
    CU_ASSERT_EQUAL(th_sdk_meta_finish(&m, &d, &n), 0);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(d[0], 0x80); /* {} */

    CU_ASSERT_EQUAL(th_sdk_meta_str(&m, "path", "a.txt"), 0);
    CU_ASSERT_EQUAL(th_sdk_meta_strn(&m, "cut", "abcdef", 2), 0);
    CU_ASSERT_EQUAL(th_sdk_meta_int(&m, "lines", -3), 0);
    CU_ASSERT_EQUAL(th_sdk_meta_bool(&m, "more", true), 0);
    CU_ASSERT_EQUAL(th_sdk_meta_double(&m, "ratio", 0.25), 0);
    msgpack_packer *pk = th_sdk_meta_value(&m, "list");
    CU_ASSERT_PTR_NOT_NULL_FATAL(pk);
    msgpack_pack_array(pk, 2);
    msgpack_pack_int(pk, 1);
    msgpack_pack_int(pk, 2);
    CU_ASSERT_EQUAL(m.count, 6);

    fake f;
    fake_init(&f);
    CU_ASSERT_EQUAL(th_sdk_meta_set(&m, &f.call), 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    CU_ASSERT_EQUAL_FATAL(msgpack_unpack_next(&u, (const char *)f.meta,
                                              f.meta_len, &off),
                          MSGPACK_UNPACK_SUCCESS);
    CU_ASSERT_EQUAL(off, f.meta_len);
    CU_ASSERT_EQUAL_FATAL(u.data.type, MSGPACK_OBJECT_MAP);
    CU_ASSERT_EQUAL_FATAL(u.data.via.map.size, 6);
    msgpack_object_kv *kv = u.data.via.map.ptr;
    CU_ASSERT_NSTRING_EQUAL(kv[0].key.via.str.ptr, "path", 4);
    CU_ASSERT_NSTRING_EQUAL(kv[0].val.via.str.ptr, "a.txt", 5);
    CU_ASSERT_EQUAL(kv[1].val.via.str.size, 2);
    CU_ASSERT_EQUAL(kv[2].val.via.i64, -3);
    CU_ASSERT_TRUE(kv[3].val.via.boolean);
    CU_ASSERT_DOUBLE_EQUAL(kv[4].val.via.f64, 0.25, 1e-12);
    CU_ASSERT_EQUAL(kv[5].val.type, MSGPACK_OBJECT_ARRAY);
    CU_ASSERT_EQUAL(kv[5].val.via.array.size, 2);
    msgpack_unpacked_destroy(&u);

    /* errors are sticky */
    CU_ASSERT_EQUAL(th_sdk_meta_int(&m, NULL, 1), TH_SDK_EINVAL);
    CU_ASSERT_EQUAL(th_sdk_meta_int(&m, "ok", 1), TH_SDK_EINVAL);
    CU_ASSERT_PTR_NULL(th_sdk_meta_value(&m, "v"));
    CU_ASSERT_EQUAL(th_sdk_meta_finish(&m, &d, &n), TH_SDK_EINVAL);
    CU_ASSERT_EQUAL(th_sdk_meta_set(&m, &f.call), TH_SDK_EINVAL);
    th_sdk_meta_destroy(&m);

    th_sdk_meta_init(&m);
    CU_ASSERT_EQUAL(th_sdk_meta_str(&m, "k", NULL), TH_SDK_EINVAL);
    th_sdk_meta_destroy(&m);
    fake_free(&f);
}

/* ---- declaration macros ------------------------------------------------------- */

static int noop_exec(void *s, const toolhost_tool *t, toolhost_call *c,
                     const uint8_t *a, size_t n)
{
    (void)s, (void)t, (void)c, (void)a, (void)n;
    return TOOLHOST_OK;
}

static const toolhost_param macro_params[] = {
    TH_SDK_PARAM("text", STRING, "Text.", TH_SDK_REQUIRED),
    TH_SDK_PARAM("mode", STRING, "Mode.", TH_SDK_ENUM("fast", "slow"),
                 TH_SDK_DEFAULT("\"fast\"")),
    TH_SDK_PARAM("tags", ARRAY, "Tags.", TH_SDK_ITEMS(STRING)),
};

static const toolhost_tool macro_tools[] = {
    TH_SDK_TOOL("t1", noop_exec, "Does nothing.", TH_SDK_PARAMS(macro_params),
                TH_SDK_OUTPUT(STATUS, ERROR), .flags = TOOLHOST_TOOL_SERIAL),
};

/* Under another name: the runner must not export a plugin entry point. */
#define toolhost_plugin_v1 test_sdk_macro_entry
TH_SDK_PLUGIN("macro", "0.1", macro_tools, "Macro test.")
#undef toolhost_plugin_v1

static void test_macros(void)
{
    const toolhost_plugin *p = test_sdk_macro_entry();
    CU_ASSERT_EQUAL(p->struct_size, sizeof(toolhost_plugin));
    CU_ASSERT_EQUAL(p->abi_major, TOOLHOST_ABI_MAJOR);
    CU_ASSERT_EQUAL(p->abi_minor, TOOLHOST_ABI_MINOR);
    CU_ASSERT_STRING_EQUAL(p->name, "macro");
    CU_ASSERT_STRING_EQUAL(p->description, "Macro test.");
    CU_ASSERT_EQUAL(p->n_tools, 1);
    CU_ASSERT_EQUAL(p->n_config_params, 0);
    const toolhost_tool *t = &p->tools[0];
    CU_ASSERT_EQUAL(t->struct_size, sizeof(toolhost_tool));
    CU_ASSERT_STRING_EQUAL(t->description, "Does nothing.");
    CU_ASSERT_EQUAL(t->n_params, 3);
    CU_ASSERT_EQUAL(t->stdout_type, TOOLHOST_SEM_STATUS);
    CU_ASSERT_EQUAL(t->stderr_type, TOOLHOST_SEM_ERROR);
    CU_ASSERT_EQUAL(t->flags, TOOLHOST_TOOL_SERIAL);
    CU_ASSERT_PTR_EQUAL(t->execute, noop_exec);
    CU_ASSERT_EQUAL(t->params[0].struct_size, sizeof(toolhost_param));
    CU_ASSERT_EQUAL(t->params[0].type, TOOLHOST_TYPE_STRING);
    CU_ASSERT_TRUE(t->params[0].required);
    CU_ASSERT_FALSE(t->params[1].required);
    CU_ASSERT_STRING_EQUAL(t->params[1].enum_values[1], "slow");
    CU_ASSERT_PTR_NULL(t->params[1].enum_values[2]);
    CU_ASSERT_STRING_EQUAL(t->params[1].default_json, "\"fast\"");
    CU_ASSERT_EQUAL(t->params[2].type, TOOLHOST_TYPE_ARRAY);
    CU_ASSERT_EQUAL(t->params[2].item_type, TOOLHOST_TYPE_STRING);
}

/* ---- paths -------------------------------------------------------------------- */

static char *tmp, *root;

static int resolve(const char *path, unsigned flags, char **out, char *err)
{
    return th_sdk_path_resolve(root, path, flags, out, err, 256);
}

static void path_setup(void)
{
    tmp = th_test_tmpdir();
    char p[4096], *r;
    snprintf(p, sizeof p, "%s/root", tmp);
    mkdir(p, 0755);
    CU_ASSERT_EQUAL_FATAL(th_sdk_root_resolve(p, &r, NULL, 0), 0);
    root = r;
    snprintf(p, sizeof p, "%s/sub", root);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/outside", tmp);
    mkdir(p, 0755);
    free(th_test_write_file(root, "a.txt", "a", (size_t)-1));
    free(th_test_write_file(p, "secret", "s", (size_t)-1));
    snprintf(p, sizeof p, "%s/in", root);
    CU_ASSERT_EQUAL(symlink("sub", p), 0);
    snprintf(p, sizeof p, "%s/out", root);
    CU_ASSERT_EQUAL(symlink("../outside/secret", p), 0);
    snprintf(p, sizeof p, "%s/outdir", root);
    CU_ASSERT_EQUAL(symlink("../outside", p), 0);
    snprintf(p, sizeof p, "%s/dangling", root);
    CU_ASSERT_EQUAL(symlink("../outside/nothing", p), 0);
}

static void path_teardown(void)
{
    th_test_rmtree(tmp);
    free(tmp);
    free(root);
}

static void expect_ok(const char *path, unsigned flags, const char *rel)
{
    char *out = NULL, err[256] = "";
    int rc = resolve(path, flags, &out, err);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc != 0) {
        fprintf(stderr, "\n  %s: %s\n", path, err);
        return;
    }
    CU_ASSERT_STRING_EQUAL(th_sdk_path_relative(root, out), rel);
    free(out);
}

static void expect_fail(const char *path, unsigned flags, int code)
{
    char *out = NULL, err[256] = "";
    CU_ASSERT_EQUAL(resolve(path, flags, &out, err), code);
    CU_ASSERT_PTR_NULL(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, path)); /* names the path */
    if (code == TH_SDK_EPATH)
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "outside"));
    free(out);
}

static void test_paths(void)
{
    path_setup();
    char abs_in[4096], abs_out[4096];
    snprintf(abs_in, sizeof abs_in, "%s/a.txt", root);
    snprintf(abs_out, sizeof abs_out, "%s/outside/secret", tmp);

    expect_ok("a.txt", 0, "a.txt");
    expect_ok("", 0, "");
    expect_ok(".", 0, "");
    expect_ok("./sub/../a.txt", 0, "a.txt");
    expect_ok("sub//", 0, "sub");
    expect_ok(abs_in, 0, "a.txt");       /* absolute inside the root */
    expect_ok("in", 0, "sub");           /* a symlink that stays inside */
    expect_ok("new.txt", TH_SDK_PATH_MAY_NOT_EXIST, "new.txt");
    expect_ok("sub/new.txt", TH_SDK_PATH_MAY_NOT_EXIST, "sub/new.txt");
    expect_ok("a.txt", TH_SDK_PATH_MAY_NOT_EXIST, "a.txt");

    expect_fail("..", 0, TH_SDK_EPATH);
    expect_fail("../outside/secret", 0, TH_SDK_EPATH);
    expect_fail("../../etc/passwd", 0, TH_SDK_EPATH);
    expect_fail("sub/../../x", 0, TH_SDK_EPATH);
    expect_fail("/etc/passwd", 0, TH_SDK_EPATH);
    expect_fail(abs_out, 0, TH_SDK_EPATH);
    expect_fail("out", 0, TH_SDK_EPATH);         /* symlink to a file */
    expect_fail("outdir/secret", 0, TH_SDK_EPATH); /* through a folder link */
    expect_fail("outdir/new", TH_SDK_PATH_MAY_NOT_EXIST, TH_SDK_EPATH);
    expect_fail("dangling", TH_SDK_PATH_MAY_NOT_EXIST, TH_SDK_EPATH);
    expect_fail("missing.txt", 0, TH_SDK_ENOENT);
    expect_fail("nodir/new", TH_SDK_PATH_MAY_NOT_EXIST, TH_SDK_ENOENT);

    char *out = NULL;
    CU_ASSERT_EQUAL(th_sdk_path_resolve(root, NULL, 0, &out, NULL, 0),
                    TH_SDK_EINVAL);
    CU_ASSERT_EQUAL(th_sdk_path_resolve("rel", "a", 0, &out, NULL, 0),
                    TH_SDK_EINVAL);
    CU_ASSERT_STRING_EQUAL(th_sdk_path_relative("/", "/x/y"), "x/y");
    CU_ASSERT_STRING_EQUAL(th_sdk_path_relative("/r", "/rx"), "/rx");
    path_teardown();
}

/* A th_sdk_rooted on `dir` from a config map with `follow`. */
static th_sdk_rooted *rooted(const char *dir, bool follow)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "root", 4);
    msgpack_pack_str_with_body(&pk, dir, strlen(dir));
    msgpack_pack_str_with_body(&pk, "follow_symlinks", 15);
    if (follow)
        msgpack_pack_true(&pk);
    else
        msgpack_pack_false(&pk);
    void *st = NULL;
    char err[256];
    int rc = th_sdk_rooted_init(NULL, b.data, b.len, &st, err, sizeof err);
    th_buf_destroy(&b);
    CU_ASSERT_EQUAL(rc, 0);
    return st;
}

static void open_ok(th_sdk_rooted *st, const char *path, unsigned kinds,
                    const char *rel)
{
    int fd = -1;
    char *r = NULL, err[256] = "";
    struct stat sb;
    int rc = th_sdk_rooted_open(st, path, kinds, &fd, &sb, &r, err,
                                sizeof err);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc != 0) {
        fprintf(stderr, "\n  %s (walk %d): %s\n", path, st->no_openat2, err);
        return;
    }
    CU_ASSERT_STRING_EQUAL(r, rel);
    CU_ASSERT_TRUE(fd >= 0);
    if (kinds & TH_SDK_OPEN_FILE && S_ISREG(sb.st_mode))
        CU_ASSERT_FALSE(fcntl(fd, F_GETFL) & O_NONBLOCK);
    close(fd);
    free(r);
}

static void open_fail(th_sdk_rooted *st, const char *path, unsigned kinds,
                      int code, const char *words)
{
    int fd = -1;
    char *r = NULL, err[256] = "";
    int rc = th_sdk_rooted_open(st, path, kinds, &fd, NULL, &r, err,
                                sizeof err);
    CU_ASSERT_EQUAL(rc, code);
    CU_ASSERT_EQUAL(fd, -1);
    CU_ASSERT_PTR_NULL(r);
    if (!strstr(err, words) || !strstr(err, path)) {
        CU_FAIL("message");
        fprintf(stderr, "\n  %s (walk %d): '%s' lacks '%s'\n", path,
                st->no_openat2, err, words);
    }
}

/* th_sdk_rooted_open() with openat2 and with the openat() walk: the same
 * answers for every case. */
static void test_rooted_open(void)
{
    path_setup();
    char p[4096], abs_in[4096], abs_out[4096];
    snprintf(abs_in, sizeof abs_in, "%s/a.txt", root);
    snprintf(abs_out, sizeof abs_out, "%s/outside/secret", tmp);
    snprintf(p, sizeof p, "%s/fifo", root);
    CU_ASSERT_EQUAL(mkfifo(p, 0644), 0);
    snprintf(p, sizeof p, "%s/loop", root);
    CU_ASSERT_EQUAL(symlink("loop", p), 0);
    snprintf(p, sizeof p, "%s/sub/up", root);
    CU_ASSERT_EQUAL(symlink("../a.txt", p), 0); /* ".." that stays inside */
    snprintf(p, sizeof p, "%s/abs", root);
    CU_ASSERT_EQUAL(symlink(abs_in, p), 0);     /* absolute: refused */

    for (int walk = 0; walk < 2; walk++) {
        th_sdk_rooted *st = rooted(root, true);
        CU_ASSERT_PTR_NOT_NULL_FATAL(st);
        st->no_openat2 = walk;
        const unsigned any = TH_SDK_OPEN_FILE | TH_SDK_OPEN_DIR;
        open_ok(st, "a.txt", TH_SDK_OPEN_FILE, "a.txt");
        open_ok(st, "", TH_SDK_OPEN_DIR, ".");
        open_ok(st, ".", any, ".");
        open_ok(st, "./sub/../a.txt", any, "a.txt");
        open_ok(st, abs_in, any, "a.txt");
        open_ok(st, "in", TH_SDK_OPEN_DIR, "in");
        open_ok(st, "in/up", TH_SDK_OPEN_FILE, "in/up");
        open_ok(st, "sub/up", TH_SDK_OPEN_FILE, "sub/up");
        open_ok(st, "fifo", TH_SDK_OPEN_STAT, "fifo");
        open_fail(st, "..", any, TH_SDK_EPATH, "is outside the allowed root");
        open_fail(st, "../outside/secret", any, TH_SDK_EPATH, "outside");
        open_fail(st, "/etc/passwd", any, TH_SDK_EPATH, "outside");
        open_fail(st, abs_out, any, TH_SDK_EPATH, "outside");
        open_fail(st, "out", any, TH_SDK_EPATH, "through a symbolic link");
        open_fail(st, "outdir/secret", any, TH_SDK_EPATH, "outside");
        open_fail(st, "outdir", TH_SDK_OPEN_STAT, TH_SDK_EPATH, "outside");
        open_fail(st, "dangling", any, TH_SDK_EPATH, "outside");
        open_fail(st, "abs", any, TH_SDK_EPATH, "outside");
        open_fail(st, "missing", any, TH_SDK_ENOENT, "no such file");
        open_fail(st, "a.txt/x", any, TH_SDK_ENOENT, "a.txt/x");
        open_fail(st, "a.txt", TH_SDK_OPEN_DIR, TH_SDK_ETYPE, "not a folder");
        open_fail(st, "sub", TH_SDK_OPEN_FILE, TH_SDK_ETYPE, "is a folder");
        open_fail(st, "fifo", any, TH_SDK_ETYPE, "is a FIFO");
        open_fail(st, "loop", any, TH_SDK_EIO, "loop");
        th_sdk_rooted_fini(st);

        st = rooted(root, false);
        CU_ASSERT_PTR_NOT_NULL_FATAL(st);
        st->no_openat2 = walk;
        open_ok(st, "sub", TH_SDK_OPEN_DIR, "sub");
        open_fail(st, "in", any, TH_SDK_EPATH, "symbolic link");
        open_fail(st, "sub/up", any, TH_SDK_EPATH, "symbolic link");
        open_fail(st, "out", any, TH_SDK_EPATH, "symbolic link");
        th_sdk_rooted_fini(st);
    }
    int fd;
    CU_ASSERT_EQUAL(th_sdk_rooted_open(NULL, "a", TH_SDK_OPEN_FILE, &fd, NULL,
                                       NULL, NULL, 0),
                    TH_SDK_EINVAL);
    path_teardown();
}

/* th_sdk_lines: whole lines, cut lines, a last line without a newline,
 * lines across chunk borders. */
static void test_lines(void)
{
    char *t = th_test_tmpdir();
    char text[300] = "ab\n";
    memset(text + 3, 'x', 100);
    strcpy(text + 103, "\n0123456789abcde\n0123456789abcdef\ncd");
    char *f = th_test_write_file(t, "l", text, (size_t)-1);
    int fd = open(f, O_RDONLY);
    th_sdk_lines r;
    CU_ASSERT_EQUAL_FATAL(th_sdk_lines_init(&r, fd, 16), 0);
    const char *line;
    size_t n;
    bool cut;
    CU_ASSERT_EQUAL(th_sdk_lines_next(&r, NULL, &line, &n, &cut), 1);
    CU_ASSERT_TRUE(n == 3 && !memcmp(line, "ab\n", 3) && !cut);
    CU_ASSERT_EQUAL(th_sdk_lines_next(&r, NULL, &line, &n, &cut), 1);
    CU_ASSERT_TRUE(n == 16 && !memcmp(line, "xxxxxxxxxxxxxxxx", 16) && cut);
    CU_ASSERT_EQUAL(th_sdk_lines_next(&r, NULL, &line, &n, &cut), 1);
    CU_ASSERT_TRUE(n == 16 && !memcmp(line, "0123456789abcde\n", 16) && !cut);
    CU_ASSERT_EQUAL(th_sdk_lines_next(&r, NULL, &line, &n, &cut), 1);
    CU_ASSERT_TRUE(n == 16 && !memcmp(line, "0123456789abcdef", 16) && cut);
    CU_ASSERT_EQUAL(th_sdk_lines_next(&r, NULL, &line, &n, &cut), 1);
    CU_ASSERT_TRUE(n == 2 && !memcmp(line, "cd", 2) && !cut);
    CU_ASSERT_EQUAL(th_sdk_lines_next(&r, NULL, &line, &n, &cut), 0);
    CU_ASSERT_EQUAL(th_sdk_lines_next(&r, NULL, &line, &n, &cut), 0);
    CU_ASSERT_EQUAL(r.bytes, (int64_t)strlen(text));
    th_sdk_lines_destroy(&r);
    close(fd);
    free(f);

    /* 3000 lines of 100 bytes read through 64 KiB chunks */
    static char big[300000];
    for (int i = 0; i < 3000; i++) {
        snprintf(big + i * 100, 101, "%099d", i);
        big[i * 100 + 99] = '\n';
    }
    f = th_test_write_file(t, "big", big, sizeof big);
    fd = open(f, O_RDONLY);
    CU_ASSERT_EQUAL_FATAL(th_sdk_lines_init(&r, fd, 0), 0);
    int count = 0, bad = 0, rc;
    while ((rc = th_sdk_lines_next(&r, NULL, &line, &n, &cut)) == 1) {
        char want[101];
        snprintf(want, sizeof want, "%099d", count);
        if (n != 100 || cut || memcmp(line, want, 99) != 0)
            bad++;
        count++;
    }
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(count, 3000);
    CU_ASSERT_EQUAL(bad, 0);
    th_sdk_lines_destroy(&r);
    close(fd);
    free(f);
    th_test_rmtree(t);
    free(t);
}

static void test_root(void)
{
    char *tmpd = th_test_tmpdir(), *out = NULL, err[256];
    char *file = th_test_write_file(tmpd, "f", "x", (size_t)-1);
    CU_ASSERT_EQUAL(th_sdk_root_resolve(file, &out, err, sizeof err),
                    TH_SDK_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a folder"));
    char missing[4096];
    snprintf(missing, sizeof missing, "%s/nope", tmpd);
    CU_ASSERT_EQUAL(th_sdk_root_resolve(missing, &out, err, sizeof err),
                    TH_SDK_ENOENT);
    CU_ASSERT_EQUAL(th_sdk_root_resolve("", &out, err, sizeof err),
                    TH_SDK_EINVAL);

    /* from a config map */
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "root", 4);
    msgpack_pack_str_with_body(&pk, tmpd, strlen(tmpd));
    CU_ASSERT_EQUAL(th_sdk_root_from_config(b.data, b.len, "root", &out, err,
                                            sizeof err),
                    0);
    char *real = realpath(tmpd, NULL);
    CU_ASSERT_STRING_EQUAL(out, real);
    free(real);
    free(out);
    CU_ASSERT_EQUAL(th_sdk_root_from_config(b.data, b.len, "dir", &out, err,
                                            sizeof err),
                    TH_SDK_EABSENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "'dir'"));
    th_buf_destroy(&b);
    free(file);
    th_test_rmtree(tmpd);
    free(tmpd);
}

/* ---- a tool that finishes on its own thread (AUTHORING.md, section 9) ---- */

typedef struct job {
    toolhost_call *call;
    char *text;
    pthread_t thread;
    atomic_bool done;                         /* run_job is leaving */
    struct job *next;
} job;

typedef struct later_state {                  /* init() makes it */
    pthread_mutex_t mu;
    job *jobs;                                /* threads not joined yet */
} later_state;

static void *run_job(void *p)                 /* your thread owns the call */
{
    job *j = p;
    toolhost_call *call = j->call;
    th_sdk_progress(call, 0.5, "half");
    int ok = th_sdk_printf(call, "%s\n", j->text) == 0;
    call->host->complete(call, ok ? TOOLHOST_OK : TOOLHOST_FAILED);
    /* call is gone after complete: not one more use of it */
    atomic_store(&j->done, true);
    return NULL;
}

/* Joins the threads that are done (all of them when `all`). */
static void reap(later_state *s, bool all)
{
    pthread_mutex_lock(&s->mu);
    for (job **pp = &s->jobs; *pp;) {
        job *j = *pp;
        if (!all && !atomic_load(&j->done)) {
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        pthread_join(j->thread, NULL);        /* it has left our code */
        free(j->text);
        free(j);
    }
    pthread_mutex_unlock(&s->mu);
}

static int later_init(const toolhost_host_api *host, const uint8_t *config,
                      size_t len, void **state, char *err, size_t err_size)
{
    (void)host, (void)config, (void)len;
    later_state *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_size, "out of memory");
        return 1;
    }
    pthread_mutex_init(&s->mu, NULL);
    *state = s;
    return 0;
}

static void later_fini(void *state)           /* after the last call ended */
{
    later_state *s = state;
    reap(s, true);                            /* then no thread of ours runs */
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int later(void *state, const toolhost_tool *tool, toolhost_call *call,
                 const uint8_t *args, size_t len)
{
    (void)tool;
    later_state *s = state;
    reap(s, false);
    th_sdk_args a;
    const char *text = NULL;
    job *j = NULL;
    if (th_sdk_args_init(&a, args, len) == 0 &&
        th_sdk_arg_cstr(&a, "text", &text) == 0 && (j = calloc(1, sizeof *j)))
        j->text = strdup(text);              /* args die when we return */
    th_sdk_args_destroy(&a);
    if (!j || !j->text) {
        free(j);
        return th_sdk_fail(call, "out of memory");
    }
    j->call = call;
    if (call->host->suspend(call) != 0) {
        free(j->text);
        free(j);
        return th_sdk_fail(call, "cannot suspend");
    }
    pthread_mutex_lock(&s->mu);
    if (pthread_create(&j->thread, NULL, run_job, j) != 0) {
        pthread_mutex_unlock(&s->mu);
        th_sdk_eprintf(call, "cannot start a thread\n");
        free(j->text);
        free(j);
        call->host->complete(call, TOOLHOST_FAILED);
        return TOOLHOST_PENDING;
    }
    j->next = s->jobs;                        /* fini() joins it */
    s->jobs = j;
    pthread_mutex_unlock(&s->mu);
    return TOOLHOST_PENDING;                 /* after suspend: always */
}

static const toolhost_param later_params[] = {
    TH_SDK_PARAM("text", STRING, "Text.", TH_SDK_REQUIRED),
};
static const toolhost_tool later_tools[] = {
    TH_SDK_TOOL("later", later, "Writes text from its own thread.",
                TH_SDK_PARAMS(later_params), TH_SDK_OUTPUT(TEXT, ERROR),
                .flags = TOOLHOST_TOOL_ASYNC),
};
#define toolhost_plugin_v1 test_sdk_later_entry
TH_SDK_PLUGIN("later", "0.1", later_tools, "Suspend test.", .init = later_init,
              .fini = later_fini)
#undef toolhost_plugin_v1

static void test_suspend_complete(void)
{
    char err[1024];
    th_harness *h = th_harness_load_desc(test_sdk_later_entry(), NULL, err,
                                         sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    for (int i = 0; i < 20; i++) {
        th_harness_call c;
        CU_ASSERT_EQUAL(th_harness_run(h, "later", "{\"text\": \"bye\"}", 0,
                                       &c),
                        TOOLHOST_OK);
        CU_ASSERT_TRUE(c.suspended);
        CU_ASSERT_TRUE(c.completed);
        CU_ASSERT_EQUAL(c.n_progress, 1);
        CU_ASSERT_STRING_EQUAL(c.out.data ? (char *)c.out.data : "", "bye\n");
        th_harness_call_free(&c);
    }
    th_harness_unload(h);
}

/* ---- the template `toolhost new` copies ------------------------------------ */

/* Instantiates sdk/template/plugin.c.in as "demo", builds it with the cc on
 * PATH against this tree's headers and SDK library, loads it and calls its
 * tool: the template keeps compiling and working. */
static void test_template(void)
{
    char *dir = th_test_tmpdir();
    FILE *in = fopen(th_test_source_path("sdk/template/plugin.c.in"), "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(in);
    th_buf src = TH_BUF_INIT;
    char line[512];
    while (fgets(line, sizeof line, in)) {
        for (char *p = line; *p; p++) {
            if (strncmp(p, "@NAME@", 6) == 0) {
                th_buf_puts(&src, "demo");
                p += 5;
            } else {
                th_buf_append(&src, p, 1);
            }
        }
    }
    fclose(in);
    CU_ASSERT_PTR_NULL(strstr((char *)src.data, "@"));
    char *c_file = th_test_write_file(dir, "demo.c", (char *)src.data,
                                      src.len);
    th_buf_destroy(&src);
    char so[4200], inc1[4200], inc2[4200], lib[4200];
    snprintf(so, sizeof so, "%s/demo.so", dir);
    snprintf(inc1, sizeof inc1, "-I%s", th_test_source_path("plugin-api"));
    snprintf(inc2, sizeof inc2, "-I%s", th_test_source_path("sdk"));
    snprintf(lib, sizeof lib, "%s", th_test_build_path("libtoolhost-sdk.a"));
    /* sanitizer builds put instrumented code in the SDK library */
    const char *san = strstr(TH_BUILD_DIR, "/san-") ? "-fsanitize=address,undefined" : "-O0";
    char *argv[] = {"/bin/sh", "-c", "exec \"${CC:-cc}\" \"$@\"", "sh",
                    "-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC",
                    "-fvisibility=hidden", "-shared", (char *)san, inc1, inc2,
                    "-o", so, c_file, lib, "-lmsgpackc", NULL};
    th_test_run r;
    CU_ASSERT_EQUAL_FATAL(th_test_run_argv(argv, NULL, 60, 0, &r), 0);
    if (r.status != 0)
        fprintf(stderr, "\n%s\n", r.err);
    CU_ASSERT_EQUAL(r.status, 0);
    th_test_run_free(&r);

    char err[1024];
    th_harness *h = th_harness_load(so, NULL, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL(h);
    if (h) {
        CU_ASSERT_STRING_EQUAL(th_harness_plugin(h)->name, "demo");
        th_harness_call c;
        CU_ASSERT_EQUAL(th_harness_run(h, "demo_hello",
                                       "{\"name\": \"you\", \"times\": 2}", 0,
                                       &c),
                        TOOLHOST_OK);
        CU_ASSERT_STRING_EQUAL(c.out.data ? (char *)c.out.data : "",
                               "hello, you\nhello, you\n");
        th_harness_call_free(&c);
        CU_ASSERT_EQUAL(th_harness_run(h, "demo_hello", "{}", 0, &c),
                        TOOLHOST_OK);
        CU_ASSERT_STRING_EQUAL(c.out.data ? (char *)c.out.data : "",
                               "hello, world\n");
        th_harness_call_free(&c);
        th_harness_unload(h);
    }
    free(c_file);
    th_test_rmtree(dir);
    free(dir);
}

/* ---- ABI 1.1: the JSON writer and the host callbacks ---------------------- */

static void test_json_writer(void)
{
    th_sdk_json j;
    th_sdk_json_init(&j);
    th_sdk_json_object(&j);
    th_sdk_json_key(&j, "s");
    th_sdk_json_str(&j, "q\"b\\s\n\t\x01\x7f\xc3\xa9\xff/");
    th_sdk_json_key(&j, "n");
    th_sdk_json_int(&j, -3);
    th_sdk_json_key(&j, "u");
    th_sdk_json_uint(&j, UINT64_MAX);
    th_sdk_json_key(&j, "d");
    th_sdk_json_double(&j, 2);
    th_sdk_json_key(&j, "f");
    th_sdk_json_double(&j, 0.1);
    th_sdk_json_key(&j, "a");
    th_sdk_json_array(&j);
    th_sdk_json_bool(&j, true);
    th_sdk_json_null(&j);
    th_sdk_json_str(&j, NULL);
    th_sdk_json_array(&j);
    th_sdk_json_end(&j);
    th_sdk_json_end(&j);
    th_sdk_json_key(&j, "nul");
    th_sdk_json_strn(&j, "a\0b", 3);
    th_sdk_json_end(&j);
    const char *t;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(th_sdk_json_finish(&j, &t, &n), 0);
    CU_ASSERT_STRING_EQUAL(t, "{\"s\":\"q\\\"b\\\\s\\n\\t\\u0001\x7f\xc3\xa9"
                              "\xef\xbf\xbd/\",\"n\":-3,\"u\":"
                              "18446744073709551615,\"d\":2.0,\"f\":0.1,"
                              "\"a\":[true,"
                              "null,null,[]],\"nul\":\"a\\u0000b\"}");
    CU_ASSERT_EQUAL(n, strlen(t));
    /* What it writes is JSON that a strict parser reads back. */
    json_error_t je;
    json_t *back = json_loadb(t, n, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
    if (!back)
        fprintf(stderr, "\n  %s: %s\n", je.text, t);
    CU_ASSERT_PTR_NOT_NULL_FATAL(back);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(back, "s")),
                           "q\"b\\s\n\t\x01\x7f\xc3\xa9\xef\xbf\xbd/");
    json_decref(back);
    fake f;
    fake_init(&f);
    CU_ASSERT_EQUAL(th_sdk_json_write(&j, &f.call), 0);
    CU_ASSERT_STRING_EQUAL(text(&f.out), t);
    fake_free(&f);
    th_sdk_json_destroy(&j);

    /* Misuse sticks as the first error. */
    th_sdk_json_init(&j);
    th_sdk_json_object(&j);
    CU_ASSERT_EQUAL(th_sdk_json_int(&j, 1), TH_SDK_EINVAL); /* no key */
    CU_ASSERT_EQUAL(th_sdk_json_key(&j, "k"), TH_SDK_EINVAL);
    CU_ASSERT_EQUAL(th_sdk_json_finish(&j, &t, &n), TH_SDK_EINVAL);
    th_sdk_json_destroy(&j);
    th_sdk_json_init(&j);
    th_sdk_json_array(&j);
    CU_ASSERT_EQUAL(th_sdk_json_key(&j, "k"), TH_SDK_EINVAL); /* not object */
    th_sdk_json_destroy(&j);
    th_sdk_json_init(&j);
    th_sdk_json_array(&j);
    CU_ASSERT_EQUAL(th_sdk_json_finish(&j, &t, &n), TH_SDK_EINVAL); /* open */
    th_sdk_json_destroy(&j);
    th_sdk_json_init(&j);
    CU_ASSERT_EQUAL(th_sdk_json_double(&j, 1.0 / 0.0), TH_SDK_EINVAL);
    th_sdk_json_destroy(&j);
    th_sdk_json_init(&j);
    th_sdk_json_int(&j, 1);
    CU_ASSERT_EQUAL(th_sdk_json_int(&j, 2), TH_SDK_EINVAL); /* two tops */
    th_sdk_json_destroy(&j);
    th_sdk_json_init(&j);
    for (int i = 0; i < TH_SDK_JSON_MAX_DEPTH; i++)
        th_sdk_json_array(&j);
    CU_ASSERT_EQUAL(th_sdk_json_array(&j), TH_SDK_EINVAL);
    th_sdk_json_destroy(&j);
}

static int c_caller(const toolhost_call *c, toolhost_caller *out)
{
    (void)c;
    out->uid = 1000;
    out->user = "alice";
    out->front = TOOLHOST_FRONT_CLI;
    return 0;
}

static char lc_line[256];
static void c_log_call(const toolhost_call *c, int level, const char *m)
{
    snprintf(lc_line, sizeof lc_line, "%llu/%d/%s",
             (unsigned long long)c->call_id, level, m);
}

/* ---- ABI 1.3: cages ---- */

static int cg_opened, cg_entered, cg_placed, cg_killed, cg_closed;
static int cg_token; /* the fake cage */

static toolhost_cage *cg_open(const toolhost_host_api *h, const char *label,
                              uint64_t mem, char *why, size_t cap)
{
    (void)h, (void)mem;
    cg_opened++;
    if (label && strcmp(label, "none") == 0) {
        snprintf(why, cap, "cgroups off");
        return NULL;
    }
    return (toolhost_cage *)&cg_token;
}
static int cg_enter(const toolhost_cage *c)
{
    cg_entered += c == (const toolhost_cage *)&cg_token;
    return 0;
}
static void cg_place(toolhost_cage *c)
{
    cg_placed += c == (toolhost_cage *)&cg_token;
}
static int cg_kill(toolhost_cage *c, int64_t ms)
{
    cg_killed += c == (toolhost_cage *)&cg_token && ms == 5000;
    return 0;
}
static void cg_close(toolhost_cage *c)
{
    cg_closed += c == (toolhost_cage *)&cg_token;
}

/* A 1.3 host's cages reach the host through the wrappers; a 1.2 host's
 * api (ending before cage_open, whatever lies there) gives NULL with the
 * reason, and the wrappers on a NULL cage do nothing. */
static void test_host_13_cages(void)
{
    toolhost_host_api api = fake_api;
    api.abi_minor = 3;
    api.cage_open = cg_open;
    api.cage_enter = cg_enter;
    api.cage_placed = cg_place;
    api.cage_kill = cg_kill;
    api.cage_close = cg_close;
    char why[128] = "x";
    toolhost_cage *c = th_sdk_cage_open(&api, "run", 0, why, sizeof why);
    CU_ASSERT_PTR_EQUAL(c, (toolhost_cage *)&cg_token);
    CU_ASSERT_EQUAL(th_sdk_cage_enter(&api, c), 0);
    th_sdk_cage_placed(&api, c);
    CU_ASSERT_EQUAL(th_sdk_cage_kill(&api, c, 5000), 0);
    th_sdk_cage_close(&api, c);
    CU_ASSERT_EQUAL(cg_opened, 1);
    CU_ASSERT(cg_entered == 1 && cg_placed == 1 && cg_killed == 1 &&
              cg_closed == 1);
    /* the host has none to give */
    CU_ASSERT_PTR_NULL(th_sdk_cage_open(&api, "none", 0, why, sizeof why));
    CU_ASSERT_STRING_EQUAL(why, "cgroups off");
    CU_ASSERT_EQUAL(th_sdk_cage_enter(&api, NULL), TH_SDK_EINVAL);
    CU_ASSERT_EQUAL(th_sdk_cage_kill(&api, NULL, 1), TH_SDK_EINVAL);
    th_sdk_cage_placed(&api, NULL);
    th_sdk_cage_close(&api, NULL);
    /* a 1.2 host */
    api.struct_size = (uint32_t)offsetof(toolhost_host_api, cage_open);
    api.abi_minor = 2;
    CU_ASSERT_FALSE(TH_SDK_HOST_HAS(&api, cage_open));
    CU_ASSERT_PTR_NULL(th_sdk_cage_open(&api, "run", 0, why, sizeof why));
    CU_ASSERT_STRING_EQUAL(why, "the host gives no cages (ABI 1.2)");
    CU_ASSERT_EQUAL(cg_opened, 2);
    CU_ASSERT_EQUAL(th_sdk_cage_enter(&api, (toolhost_cage *)&cg_token),
                    TH_SDK_EINVAL);
    CU_ASSERT_EQUAL(th_sdk_cage_kill(&api, (toolhost_cage *)&cg_token, 5000),
                    TH_SDK_EINVAL);
    th_sdk_cage_close(&api, (toolhost_cage *)&cg_token);
    CU_ASSERT(cg_entered == 1 && cg_killed == 1 && cg_closed == 1);
}

static void test_host_11(void)
{
    /* A 1.1 host: the wrappers reach the callbacks. */
    toolhost_host_api api11 = fake_api;
    api11.caller = c_caller;
    api11.log_call = c_log_call;
    fake f;
    fake_init(&f);
    f.call.host = &api11;
    f.call.call_id = 42;
    CU_ASSERT_TRUE(TH_SDK_HOST_HAS(&api11, caller));
    CU_ASSERT_FALSE(TH_SDK_HOST_HAS(&api11, cancel_fd)); /* NULL */
    toolhost_caller who;
    CU_ASSERT_EQUAL(th_sdk_caller(&f.call, &who), 0);
    CU_ASSERT_EQUAL(who.uid, 1000);
    CU_ASSERT_STRING_EQUAL(who.user, "alice");
    th_sdk_log_call(&f.call, TOOLHOST_LOG_INFO, "n=%d", 7);
    CU_ASSERT_STRING_EQUAL(lc_line, "42/2/n=7");
    CU_ASSERT_EQUAL(th_sdk_cancel_fd(&f.call), TH_SDK_ESTATE);
    /* A 1.0 host: its api ends before the 1.1 members, whatever lies
     * there; caller() answers ESTATE, log_call falls back to log(). */
    api11.struct_size = (uint32_t)offsetof(toolhost_host_api, caller);
    CU_ASSERT_FALSE(TH_SDK_HOST_HAS(&api11, caller));
    CU_ASSERT_EQUAL(th_sdk_caller(&f.call, &who), TH_SDK_ESTATE);
    CU_ASSERT_EQUAL(who.uid, -1);
    log_target = &f;
    th_sdk_log_call(&f.call, TOOLHOST_LOG_WARN, "old host");
    CU_ASSERT_STRING_EQUAL(f.log, "1:call 42: old host");
    CU_ASSERT_EQUAL(th_sdk_on_cancel(&f.call, (void (*)(void *))free, NULL),
                    TH_SDK_ESTATE);
    fake_free(&f);
}

static uint64_t ra_seen;
static int c_set_retry_after(toolhost_call *c, uint64_t ms)
{
    (void)c;
    ra_seen = ms;
    return 0;
}

/* ABI 1.5: th_sdk_fail_backend gives a 1.5 host the status and the hint,
 * an older host TOOLHOST_FAILED (it would read 4-6 as a misuse); the
 * message goes to stderr either way. */
static void test_fail_backend(void)
{
    toolhost_host_api api15 = fake_api;
    api15.abi_minor = 5;
    api15.set_retry_after = c_set_retry_after;
    fake f;
    fake_init(&f);
    f.call.host = &api15;
    ra_seen = 0;
    CU_ASSERT_EQUAL(th_sdk_fail_backend(&f.call, TOOLHOST_RATE_LIMITED, 7000,
                                        "HTTP %d", 429),
                    TOOLHOST_RATE_LIMITED);
    CU_ASSERT_EQUAL(ra_seen, 7000);
    CU_ASSERT(f.err.len == 9 && !memcmp(f.err.data, "HTTP 429\n", 9));
    ra_seen = 0;
    CU_ASSERT_EQUAL(th_sdk_fail_backend(&f.call, TOOLHOST_TIMEOUT, 0, "slow"),
                    TOOLHOST_TIMEOUT);
    CU_ASSERT_EQUAL(ra_seen, 0); /* no hint: not asked */
    CU_ASSERT_EQUAL(th_sdk_fail_backend(&f.call, TOOLHOST_UNAVAILABLE, 5,
                                        "down"),
                    TOOLHOST_UNAVAILABLE);
    CU_ASSERT_EQUAL(ra_seen, 5);
    /* not a backend's status: failed */
    CU_ASSERT_EQUAL(th_sdk_fail_backend(&f.call, 42, 5, "x"), TOOLHOST_FAILED);
    CU_ASSERT_EQUAL(th_sdk_set_retry_after(&f.call, 9), 0);
    CU_ASSERT_EQUAL(ra_seen, 9);
    /* a 1.4 host: no set_retry_after member, statuses unknown to it */
    api15.abi_minor = 4;
    api15.struct_size = (uint32_t)offsetof(toolhost_host_api, tools_changed);
    ra_seen = 0;
    CU_ASSERT_EQUAL(th_sdk_fail_backend(&f.call, TOOLHOST_UNAVAILABLE, 5,
                                        "down"),
                    TOOLHOST_FAILED);
    CU_ASSERT_EQUAL(ra_seen, 0);
    CU_ASSERT_EQUAL(th_sdk_set_retry_after(&f.call, 9), TH_SDK_ESTATE);
    fake_free(&f);
}

/* The 1.1 declaration macros fill the new members. */
static const toolhost_param p11[] = {
    TH_SDK_PARAM("limit", INTEGER, "Rows.", TH_SDK_RANGE(1, 1000),
                 TH_SDK_DEFAULT("10")),
    TH_SDK_PARAM("name", STRING, "Name.", TH_SDK_LENGTH(1, 8),
                 TH_SDK_PATTERN("^[a-z]+$")),
    TH_SDK_PARAM("tags", ARRAY, "Tags.", TH_SDK_ITEMS(STRING),
                 TH_SDK_ITEM_COUNT(0, 5)),
    TH_SDK_PARAM("f", OBJECT, "Filter.", TH_SDK_SCHEMA("{\"type\":\"object\"}")),
};

static void test_macros_11(void)
{
    CU_ASSERT_EQUAL(p11[0].bounds,
                    TOOLHOST_BOUND_MINIMUM | TOOLHOST_BOUND_MAXIMUM);
    CU_ASSERT_EQUAL(p11[0].minimum, 1);
    CU_ASSERT_EQUAL(p11[0].maximum, 1000);
    CU_ASSERT_EQUAL(p11[1].max_length, 8);
    CU_ASSERT_STRING_EQUAL(p11[1].pattern, "^[a-z]+$");
    CU_ASSERT_EQUAL(p11[2].max_items, 5);
    CU_ASSERT_STRING_EQUAL(p11[3].schema_json, "{\"type\":\"object\"}");
    th_param *t;
    size_t n;
    th_error e;
    CU_ASSERT_EQUAL(th_params_from_abi("tool 'x'", p11, TH_SDK_COUNT(p11), &t,
                                       &n, &e),
                    0);
    th_params_free(t, n);
}

/* ---- toolhost/testing.h: the in-process harness for plugin authors ---- */

static void *tt_finish(void *arg)
{
    toolhost_call *call = arg;
    th_sdk_printf(call, "later");
    call->host->complete(call, TOOLHOST_OK);
    return NULL;
}

static int tt_run(void *state, const toolhost_tool *tool, toolhost_call *call,
                  const uint8_t *args, size_t len)
{
    (void)state, (void)tool;
    th_sdk_args a;
    th_sdk_args_init(&a, args, len);
    const char *who = th_sdk_arg_cstr_or(&a, "who", "nobody");
    th_sdk_printf(call, "hi %s", who);
    th_sdk_eprintf(call, "note");
    th_sdk_log_call(call, TOOLHOST_LOG_INFO, "ran for %s", who);
    bool later = th_sdk_arg_has(&a, "later");
    th_sdk_args_destroy(&a);
    if (!later)
        return TOOLHOST_OK;
    if (call->host->suspend(call) != 0)
        return TOOLHOST_FAILED;
    pthread_t th;
    pthread_create(&th, NULL, tt_finish, call);
    pthread_detach(th);
    return TOOLHOST_PENDING;
}

static const toolhost_tool tt_tools[] = {
    TH_SDK_TOOL("tt_hi", tt_run, "Says hi.", TH_SDK_OUTPUT(TEXT, ERROR)),
};
static const toolhost_plugin tt_plugin = {
    .struct_size = sizeof(toolhost_plugin), .abi_major = TOOLHOST_ABI_MAJOR,
    .abi_minor = TOOLHOST_ABI_MINOR, .name = "tt", .description = "T",
    .tools = tt_tools, .n_tools = 1};

static void test_testing_h(void)
{
    th_sdk_test t;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(th_sdk_test_load(&t, &tt_plugin, NULL, 0, err,
                                           sizeof err),
                          0);
    th_sdk_test_call c;
    CU_ASSERT_EQUAL(th_sdk_test_run_kv(&t, "tt_hi", &c, "who", "you", NULL),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(c.out, "hi you");
    CU_ASSERT_STRING_EQUAL(c.err, "note");
    CU_ASSERT_PTR_NOT_NULL(strstr(t.log, ": ran for you\n"));
    th_sdk_test_call_free(&c);
    /* A suspended call is waited for until complete(). */
    CU_ASSERT_EQUAL(th_sdk_test_run_kv(&t, "tt_hi", &c, "who", "x", "later",
                                       "1", NULL),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(c.out, "hi xlater");
    th_sdk_test_call_free(&c);
    CU_ASSERT_EQUAL(th_sdk_test_run(&t, "nope", NULL, 0, 100, &c), -1);
    th_sdk_test_call_free(&c);
    th_sdk_test_unload(&t);
}

void th_suite_sdk(void)
{
    CU_pSuite s = CU_add_suite("sdk", NULL, NULL);
    CU_add_test(s, "args_init", test_args_init);
    CU_add_test(s, "args_scalars", test_args_scalars);
    CU_add_test(s, "args_bin_strings", test_args_bin_strings);
    CU_add_test(s, "args_arrays", test_args_arrays);
    CU_add_test(s, "strerror", test_strerror);
    CU_add_test(s, "writers", test_writers);
    CU_add_test(s, "progress_cancel_log", test_progress_cancel_log);
    CU_add_test(s, "meta", test_meta);
    CU_add_test(s, "macros", test_macros);
    CU_add_test(s, "paths", test_paths);
    CU_add_test(s, "root", test_root);
    CU_add_test(s, "rooted_open", test_rooted_open);
    CU_add_test(s, "lines", test_lines);
    CU_add_test(s, "suspend_complete", test_suspend_complete);
    CU_add_test(s, "fail_backend", test_fail_backend);
    CU_add_test(s, "template", test_template);
    CU_add_test(s, "json_writer", test_json_writer);
    CU_add_test(s, "host_11", test_host_11);
    CU_add_test(s, "host_13_cages", test_host_13_cages);
    CU_add_test(s, "macros_11", test_macros_11);
    CU_add_test(s, "testing_h", test_testing_h);
}
