/* test_rpc_front.c - the RPC front's own per-frame work (issue 17, 64 in
 * flight): the method table (a name matches by length and bytes, nothing
 * shorter, longer or of another case), the order of the answers on one
 * connection when many frames arrive in one read, no answer lost over a
 * long pipelined run, and the outcome line's duration (the clock is read
 * per call only when that line is written). */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

/* Appends [0, id, method, PARAMS] with PARAMS given as JSON. */
static void add_request(th_buf *all, uint64_t id, const char *method,
                        const char *json)
{
    th_buf p = TH_BUF_INIT;
    rpc_pack_json(&p, json);
    CU_ASSERT_FATAL(th_rpc_pack_request(all, id, method, p.data, p.len) ==
                    0);
    th_buf_destroy(&p);
}

/* The error code of a response, 0 when its error is nil. */
static int64_t error_code(const msgpack_object *m)
{
    const msgpack_object *e = &m->via.array.ptr[2];
    if (e->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2)
        return 1; /* not a protocol error: fails any comparison */
    return e->via.array.ptr[0].via.i64;
}

/* Known names in one write among names that differ by a byte, a length
 * or the case: each is answered, in the order sent, the known ones with
 * their result and the others with TH_ENOTFOUND. */
static void test_method_names(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    static const struct {
        const char *method, *params;
        int64_t code;
    } cases[] = {
        {"tools.call", "[\"echo\", {\"text\": \"first\"}]", 0},
        {"tools.cal", "[\"echo\", {\"text\": \"x\"}]", TH_ENOTFOUND},
        {"tools.calls", "[\"echo\", {\"text\": \"x\"}]", TH_ENOTFOUND},
        {"host.ping", "[]", 0},
        {"Tools.call", "[\"echo\", {\"text\": \"x\"}]", TH_ENOTFOUND},
        {"tools.list", "[]", 0},
        {"", "[]", TH_ENOTFOUND},
        {"host.reloa", "[]", TH_ENOTFOUND},
        {"tools.describe", "[\"echo\"]", 0},
        {"tools.call", "[\"echo\", {\"text\": \"last\"}]", 0},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    th_buf all = TH_BUF_INIT;
    for (int i = 0; i < N; i++)
        add_request(&all, (uint64_t)(i + 1), cases[i].method,
                    cases[i].params);
    CU_ASSERT_FATAL(rpc_raw_send(&w, all.data, all.len)); /* one write */
    th_buf_destroy(&all);
    for (int i = 0; i < N; i++) {
        const msgpack_object *m = rpc_raw_next(&w, rpc_wait_ms());
        CU_ASSERT_FATAL(m != NULL);
        CU_ASSERT_EQUAL(m->via.array.ptr[0].via.u64, 1);
        /* nothing here waits on a worker: answered in the order sent */
        CU_ASSERT_EQUAL(m->via.array.ptr[1].via.u64, (uint64_t)(i + 1));
        CU_ASSERT_EQUAL(error_code(m), cases[i].code);
    }
    /* the first and the last call did run */
    rpc_raw_request(&w, 100, "tools.call", "[\"echo\", {\"text\": \"again\"}]");
    const msgpack_object *m = rpc_raw_response(&w, 100, rpc_wait_ms());
    CU_ASSERT(m && rpc_stdout_is(&m->via.array.ptr[3], "again"));
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* What the benchmark does, checked: many calls with 64 in flight on one
 * connection, refilled as answers come, each answered once, in order,
 * with its own text. */
static void test_pipelined_order(void)
{
    rpc_srv s;
    /* a budget no echo overruns, under valgrind or on a loaded machine:
     * every call short, so the answers keep the order of the requests */
    rpc_opts o = {.host_extra = "  short_call_max: 1m\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    const int total = rpc_scale(3000);
    int sent = 0, done = 0;
    bool ok = true;
    while (ok && done < total) {
        th_buf all = TH_BUF_INIT;
        while (sent - done < 64 && sent < total) {
            char args[64];
            snprintf(args, sizeof args, "[\"echo\", {\"text\": \"n%d\"}]",
                     sent);
            add_request(&all, (uint64_t)sent + 1, "tools.call", args);
            sent++;
        }
        if (all.len)
            ok = rpc_raw_send(&w, all.data, all.len);
        th_buf_destroy(&all);
        /* read what is there (at least one), then refill */
        do {
            const msgpack_object *m = rpc_raw_next(&w, rpc_wait_ms());
            if (!m) {
                ok = false;
                break;
            }
            char want[32];
            snprintf(want, sizeof want, "n%d", done);
            if (m->via.array.ptr[1].via.u64 != (uint64_t)done + 1 ||
                error_code(m) != 0 ||
                !rpc_stdout_is(&m->via.array.ptr[3], want)) {
                ok = false;
                break;
            }
            done++;
        } while (done < sent && th_rpc_reader_pending(&w.rd) > 0);
    }
    CU_ASSERT(ok);
    CU_ASSERT_EQUAL(done, total);
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* At log level info and below, each call's outcome line gives how long it
 * took from its request (the clock is read at the request only when that
 * line will be written): text_count is mocked to take 400 ms. */
static void test_outcome_duration(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0); /* log_level: debug */
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call", "[\"text_count\", {\"path\": \"x\"}]");
    const msgpack_object *m = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    FILE *f = fopen(s.log, "r");
    CU_ASSERT_FATAL(f != NULL);
    char line[4096];
    double dur = -1;
    while (fgets(line, sizeof line, f)) {
        const char *t = strstr(line, "tool=text_count call_id=");
        const char *d = t ? strstr(t, " dur_ms=") : NULL;
        if (d && strstr(d, " result ")) {
            dur = atof(d + 8);
            break;
        }
    }
    fclose(f);
    if (dur < 0)
        rpc_dump_log(&s);
    CU_ASSERT(dur >= 390.0);   /* the mock's delay (ms), timer slack */
    CU_ASSERT(dur < 60000.0);  /* not the time since boot */
    rpc_srv_free(&s);
}

void th_suite_rpc_front(void)
{
    CU_pSuite s = CU_add_suite("rpc_front", NULL, NULL);
    CU_add_test(s, "method_names", test_method_names);
    CU_add_test(s, "pipelined_order", test_pipelined_order);
    CU_add_test(s, "outcome_duration", test_outcome_duration);
}
