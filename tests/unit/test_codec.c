/* test_codec.c - the one codec (th/codec.h): pack -> unpack round trips of
 * every form, non-UTF-8 output as bin, meta passed through byte for byte,
 * error codes by name, and the JSON forms derived from the msgpack ones. */
#include <CUnit/CUnit.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "th/codec.h"
#include "th/json.h"

static const msgpack_object *get(const msgpack_object *m, const char *k)
{
    if (m->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object *key = &m->via.map.ptr[i].key;
        if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == strlen(k) &&
            memcmp(key->via.str.ptr, k, key->via.str.size) == 0)
            return &m->via.map.ptr[i].val;
    }
    return NULL;
}

/* Packs r, unpacks the bytes into *u and the codec's decoder into *back. */
static void round_trip(const th_result_copy *r, th_buf *b, msgpack_unpacked *u,
                       th_result_copy *back)
{
    th_buf_init(b);
    CU_ASSERT_EQUAL_FATAL(th_codec_result_to_buf(b, r), 0);
    msgpack_unpacked_init(u);
    size_t off = 0;
    CU_ASSERT_EQUAL_FATAL(msgpack_unpack_next(u, (const char *)b->data, b->len, &off),
                          MSGPACK_UNPACK_SUCCESS);
    CU_ASSERT_EQUAL(off, b->len);
    CU_ASSERT_EQUAL_FATAL(th_codec_unpack_result(&u->data, back), 0);
}

static void test_result_done(void)
{
    th_result_copy r;
    memset(&r, 0, sizeof r);
    r.kind = TH_RESULT_DONE;
    r.ok = true;
    th_buf_append(&r.out, "héllo", strlen("héllo"));
    th_buf_append(&r.err, "warn", 4);
    /* meta: {"a": [1, "x"], "b": {"c": nil}} packed by hand */
    th_buf meta = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &meta, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 2);
    th_pack_cstr(&pk, "a");
    msgpack_pack_array(&pk, 2);
    msgpack_pack_int(&pk, 1);
    th_pack_cstr(&pk, "x");
    th_pack_cstr(&pk, "b");
    msgpack_pack_map(&pk, 1);
    th_pack_cstr(&pk, "c");
    msgpack_pack_nil(&pk);
    r.meta = meta;

    th_buf b;
    msgpack_unpacked u;
    th_result_copy back;
    round_trip(&r, &b, &u, &back);
    CU_ASSERT_EQUAL(u.data.via.map.size, 4);
    CU_ASSERT_EQUAL(get(&u.data, "stdout")->type, MSGPACK_OBJECT_STR);
    CU_ASSERT_EQUAL(back.kind, TH_RESULT_DONE);
    CU_ASSERT_TRUE(back.ok);
    CU_ASSERT_TRUE(back.out.len == r.out.len && memcmp(back.out.data, r.out.data, r.out.len) == 0);
    CU_ASSERT_TRUE(back.err.len == 4 && memcmp(back.err.data, "warn", 4) == 0);
    /* meta passes through byte for byte */
    CU_ASSERT_TRUE(back.meta.len == meta.len && memcmp(back.meta.data, meta.data, meta.len) == 0);
    th_error e;
    json_t *j = th_codec_result_json(&r, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "stdout")), "héllo");
    CU_ASSERT_TRUE(json_is_null(json_object_get(json_object_get(json_object_get(j, "meta"), "b"), "c")));
    json_decref(j);
    th_result_copy_destroy(&back);
    msgpack_unpacked_destroy(&u);
    th_buf_destroy(&b);

    /* no meta: {} on the wire, none back */
    th_buf_destroy(&r.meta);
    r.ok = false;
    round_trip(&r, &b, &u, &back);
    const msgpack_object *m = get(&u.data, "meta");
    CU_ASSERT_TRUE(m && m->type == MSGPACK_OBJECT_MAP && m->via.map.size == 0);
    CU_ASSERT_FALSE(back.ok);
    CU_ASSERT_EQUAL(back.meta.len, 0);
    CU_ASSERT_EQUAL(th_task_state_of(&back), TH_TASK_FAILED);
    th_result_copy_destroy(&back);
    msgpack_unpacked_destroy(&u);
    th_buf_destroy(&b);
    th_result_copy_destroy(&r);
}

/* Structured output: the result map carries the JSON value of stdout,
 * decoded, under `structured`; not when the text does not decode, not
 * when the call failed. */
static void test_result_structured(void)
{
    th_result_copy r;
    memset(&r, 0, sizeof r);
    r.kind = TH_RESULT_DONE;
    r.ok = true;
    r.structured = true;
    const char *json = "{\"rows\": [1, -2, 2.5, \"x\", null, true]}";
    th_buf_append(&r.out, json, strlen(json));
    th_buf b;
    msgpack_unpacked u;
    th_result_copy back;
    round_trip(&r, &b, &u, &back);
    CU_ASSERT_EQUAL(u.data.via.map.size, 5);
    const msgpack_object *sv = get(&u.data, "structured");
    CU_ASSERT_FATAL(sv && sv->type == MSGPACK_OBJECT_MAP);
    const msgpack_object *rows = get(sv, "rows");
    CU_ASSERT_FATAL(rows && rows->type == MSGPACK_OBJECT_ARRAY &&
                    rows->via.array.size == 6);
    const msgpack_object *a = rows->via.array.ptr;
    CU_ASSERT(a[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER && a[0].via.u64 == 1);
    CU_ASSERT(a[1].type == MSGPACK_OBJECT_NEGATIVE_INTEGER && a[1].via.i64 == -2);
    CU_ASSERT(a[2].type == MSGPACK_OBJECT_FLOAT64 && a[2].via.f64 == 2.5);
    CU_ASSERT(a[3].type == MSGPACK_OBJECT_STR);
    CU_ASSERT(a[4].type == MSGPACK_OBJECT_NIL);
    CU_ASSERT(a[5].type == MSGPACK_OBJECT_BOOLEAN && a[5].via.boolean);
    CU_ASSERT(back.structured);
    th_result_copy_destroy(&back);
    msgpack_unpacked_destroy(&u);
    th_buf_destroy(&b);

    /* a failed call, or text that is not JSON: no `structured` */
    for (int i = 0; i < 2; i++) {
        r.ok = i == 0 ? false : true;
        if (i == 1) {
            th_buf_reset(&r.out);
            th_buf_append(&r.out, "{cut", 4);
        }
        round_trip(&r, &b, &u, &back);
        CU_ASSERT_EQUAL(u.data.via.map.size, 4);
        CU_ASSERT(get(&u.data, "structured") == NULL);
        th_result_copy_destroy(&back);
        msgpack_unpacked_destroy(&u);
        th_buf_destroy(&b);
    }
    th_result_copy_destroy(&r);
}

static void test_result_binary_stdout(void)
{
    static const uint8_t bad[] = {'o', 'k', 0xff, 0xfe, 0x00, 'z'};
    th_result_copy r;
    memset(&r, 0, sizeof r);
    r.kind = TH_RESULT_DONE;
    r.ok = true;
    th_buf_append(&r.out, bad, sizeof bad);
    th_buf b;
    msgpack_unpacked u;
    th_result_copy back;
    round_trip(&r, &b, &u, &back);
    /* not UTF-8: bin on the wire, the same bytes back */
    CU_ASSERT_EQUAL(get(&u.data, "stdout")->type, MSGPACK_OBJECT_BIN);
    CU_ASSERT_EQUAL(get(&u.data, "stderr")->type, MSGPACK_OBJECT_STR);
    CU_ASSERT_TRUE(back.out.len == sizeof bad && memcmp(back.out.data, bad, sizeof bad) == 0);
    /* JSON: U+FFFD for each bad sequence, never refused */
    th_error e;
    json_t *j = th_codec_result_json(&r, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    const char *s = json_string_value(json_object_get(j, "stdout"));
    CU_ASSERT_TRUE(s && strncmp(s, "ok\xef\xbf\xbd", 5) == 0);
    json_decref(j);
    th_result_copy_destroy(&back);
    msgpack_unpacked_destroy(&u);
    th_buf_destroy(&b);
    th_result_copy_destroy(&r);
}

static void test_result_errors_by_name(void)
{
    static const int codes[] = {
#define CODE(name, num, code, msg) TH_E##name,
        TH_ERRNO_MAP(CODE)
#undef CODE
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        th_result_copy r;
        memset(&r, 0, sizeof r);
        r.kind = TH_RESULT_ERROR;
        r.error = codes[i];
        r.message = i % 2 ? strdup("why it failed") : NULL;
        th_buf b;
        msgpack_unpacked u;
        th_result_copy back;
        round_trip(&r, &b, &u, &back);
        const msgpack_object *err = get(&u.data, "error");
        CU_ASSERT_FATAL(err != NULL);
        const msgpack_object *code = get(err, "code");
        CU_ASSERT_TRUE(code && code->via.str.size == strlen(th_err_name(codes[i])) &&
                       memcmp(code->via.str.ptr, th_err_name(codes[i]), code->via.str.size) == 0);
        CU_ASSERT_FALSE(get(&u.data, "ok")->via.boolean);
        CU_ASSERT_EQUAL(back.kind, TH_RESULT_ERROR);
        /* by name: the first code of that name in the table */
        CU_ASSERT_EQUAL(back.error, th_err_from_name(th_err_name(codes[i])));
        CU_ASSERT_STRING_EQUAL(back.message, r.message ? r.message : th_strerror(codes[i]));
        CU_ASSERT_EQUAL(th_task_state_of(&back),
                        codes[i] == TH_ECANCELLED ? TH_TASK_CANCELLED : TH_TASK_FAILED);
        th_result_copy_destroy(&back);
        msgpack_unpacked_destroy(&u);
        th_buf_destroy(&b);
        th_result_copy_destroy(&r);
    }
    /* the Lua front's code lives in the table */
    CU_ASSERT_STRING_EQUAL(th_err_name(TH_EFAILED), "tool_failed");
    CU_ASSERT_EQUAL(th_err_from_name("tool_failed"), TH_EFAILED);
    CU_ASSERT_EQUAL(th_err_from_name("no_such_code"), TH_EINTERNAL);
}

static void test_result_running(void)
{
    th_result_copy r;
    memset(&r, 0, sizeof r);
    r.kind = TH_RESULT_RUNNING;
    r.task_id = 1ULL << 40;
    r.message = strdup("indexing");
    th_buf b;
    msgpack_unpacked u;
    th_result_copy back;
    round_trip(&r, &b, &u, &back);
    CU_ASSERT_EQUAL(u.data.via.map.size, 3);
    CU_ASSERT_EQUAL(back.kind, TH_RESULT_RUNNING);
    CU_ASSERT_EQUAL(back.task_id, 1ULL << 40);
    CU_ASSERT_STRING_EQUAL(back.message, "indexing");
    CU_ASSERT_EQUAL(th_task_state_of(&back), TH_TASK_WORKING);
    th_result_copy_destroy(&back);
    msgpack_unpacked_destroy(&u);
    th_buf_destroy(&b);
    th_result_copy_destroy(&r);

    /* not a result: refused */
    static const uint8_t junk[][3] = {{0x91, 0x01, 0}, {0x81, 0xa1, 'x'}, {0xc1, 0, 0}};
    for (size_t i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(th_codec_unpack_result_bytes(junk[i], 3, &back), TH_EPROTO);
        th_result_copy_destroy(&back);
    }
}

static void test_progress(void)
{
    static const uint8_t data[] = {0x92, 0x01, 0xa1, 'y'}; /* [1, "y"] */
    th_progress in[] = {
        {.task_id = 7, .message = "step 2/3", .fraction = 0.5, .data = data,
         .data_len = sizeof data, .coalesced = 4},
        {.task_id = 8, .message = NULL, .fraction = -1},
    };
    for (size_t i = 0; i < 2; i++) {
        th_buf b = TH_BUF_INIT;
        msgpack_packer pk;
        msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
        CU_ASSERT_EQUAL_FATAL(th_codec_pack_progress(&pk, &in[i]), 0);
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        CU_ASSERT_EQUAL_FATAL(msgpack_unpack_next(&u, (const char *)b.data, b.len, &off),
                              MSGPACK_UNPACK_SUCCESS);
        th_progress p;
        CU_ASSERT_EQUAL_FATAL(th_codec_unpack_progress(&u.data, &p), 0);
        CU_ASSERT_EQUAL(p.task_id, in[i].task_id);
        const char *want = in[i].message ? in[i].message : "";
        CU_ASSERT_TRUE(p.message_len == strlen(want) && memcmp(p.message, want, p.message_len) == 0);
        CU_ASSERT_DOUBLE_EQUAL(p.fraction, in[i].fraction, 1e-9);
        CU_ASSERT_EQUAL(p.coalesced, in[i].coalesced);
        const msgpack_object *info = &u.data.via.array.ptr[1];
        CU_ASSERT_EQUAL(get(info, "progress") != NULL, in[i].fraction >= 0);
        const msgpack_object *d = get(info, "data");
        CU_ASSERT_EQUAL(d != NULL, in[i].data != NULL);
        if (d)
            CU_ASSERT_TRUE(d->type == MSGPACK_OBJECT_ARRAY && d->via.array.size == 2);
        msgpack_unpacked_destroy(&u);
        th_buf_destroy(&b);
    }
    /* not progress params */
    msgpack_object nil = {.type = MSGPACK_OBJECT_NIL};
    th_progress p;
    CU_ASSERT_EQUAL(th_codec_unpack_progress(&nil, &p), TH_EPROTO);
}

static void test_task_forms(void)
{
    static const uint8_t args[] = {0x81, 0xa4, 't', 'e', 'x', 't', 0xa2, 'h', 'i'};
    th_result_copy done;
    memset(&done, 0, sizeof done);
    done.kind = TH_RESULT_ERROR;
    done.error = TH_ECANCELLED;
    th_task_view v[2] = {
        {.task_id = 31, .session_id = 2, .tool = "echo_async", .scope = TH_SCOPE_SESSION,
         .state = TH_TASK_WORKING, .started_ms = 1000, .last_update_ms = 1500,
         .message = "step 3/10", .fraction = 0.3, .args = args, .args_len = sizeof args},
        {.task_id = 32, .session_id = 2, .tool = "echo_async", .scope = TH_SCOPE_TOOLSET,
         .state = TH_TASK_CANCELLED, .started_ms = 1000, .last_update_ms = 1200,
         .ended_ms = 3000, .message = NULL, .fraction = -1, .result = &done},
    };
    static const char *const keys[] = {"task_id", "tool", "status", "state", "scope",
                                       "elapsed_ms", "started_at", "last_update",
                                       "message", "progress", "arguments"};
    for (int i = 0; i < 2; i++) {
        th_buf b = TH_BUF_INIT;
        msgpack_packer pk;
        msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
        CU_ASSERT_EQUAL_FATAL(th_codec_pack_task(&pk, &v[i], 2520), 0);
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        CU_ASSERT_EQUAL_FATAL(msgpack_unpack_next(&u, (const char *)b.data, b.len, &off),
                              MSGPACK_UNPACK_SUCCESS);
        th_error e;
        json_t *j = th_codec_task_json(&v[i], 2520, &e);
        CU_ASSERT_PTR_NOT_NULL_FATAL(j);
        /* the same fields in both forms */
        CU_ASSERT_EQUAL(u.data.via.map.size, sizeof keys / sizeof keys[0]);
        CU_ASSERT_EQUAL(json_object_size(j), sizeof keys / sizeof keys[0]);
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            CU_ASSERT_PTR_NOT_NULL(get(&u.data, keys[k]));
            CU_ASSERT_PTR_NOT_NULL(json_object_get(j, keys[k]));
        }
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "status")),
                               i == 0 ? "running" : "done");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "state")),
                               i == 0 ? "working" : "cancelled");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "scope")),
                               i == 0 ? "session" : "toolset");
        CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(j, "elapsed_ms")),
                               i == 0 ? 1520.0 : 2000.0, 1e-9);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "started_at")),
                               "1970-01-01T00:00:01.000Z");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "message")),
                               i == 0 ? "step 3/10" : "");
        if (i == 0) {
            CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(j, "progress")), 0.3, 1e-9);
            CU_ASSERT_STRING_EQUAL(
                json_string_value(json_object_get(json_object_get(j, "arguments"), "text")), "hi");
        } else {
            CU_ASSERT_TRUE(json_is_null(json_object_get(j, "progress")));
            CU_ASSERT_EQUAL(json_object_size(json_object_get(j, "arguments")), 0);
        }
        json_decref(j);
        msgpack_unpacked_destroy(&u);
        th_buf_destroy(&b);
    }
    CU_ASSERT_STRING_EQUAL(th_task_state_name(TH_TASK_COMPLETED), "completed");
    CU_ASSERT_STRING_EQUAL(th_task_state_name(TH_TASK_FAILED), "failed");
}

static void test_result_dup(void)
{
    th_result_copy r;
    memset(&r, 0, sizeof r);
    r.kind = TH_RESULT_DONE;
    r.ok = true;
    r.task_id = 9;
    r.structured = true;
    th_buf_append(&r.out, "o", 1);
    th_buf_append(&r.meta, "\x80", 1);
    th_result_copy d;
    CU_ASSERT_EQUAL_FATAL(th_result_copy_dup(&d, &r), 0);
    CU_ASSERT_TRUE(d.out.data != r.out.data && d.out.len == 1 && d.meta.len == 1 &&
                   d.task_id == 9 && d.ok && !d.message && d.structured);
    th_result_copy_destroy(&d);
    th_result_copy_destroy(&r);
}

void th_suite_codec(void)
{
    CU_pSuite s = CU_add_suite("codec", NULL, NULL);
    CU_add_test(s, "result_done", test_result_done);
    CU_add_test(s, "result_binary_stdout", test_result_binary_stdout);
    CU_add_test(s, "result_structured", test_result_structured);
    CU_add_test(s, "result_errors_by_name", test_result_errors_by_name);
    CU_add_test(s, "result_running", test_result_running);
    CU_add_test(s, "progress", test_progress);
    CU_add_test(s, "task_forms", test_task_forms);
    CU_add_test(s, "result_dup", test_result_dup);
}
