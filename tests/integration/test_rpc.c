/* test_rpc.c - the msgpack-RPC server end to end: the real `toolhost serve`
 * over a Unix socket and over stdio, every method, pipelining, progress,
 * permissions, access control, disconnects, shutdown, and a Python client.
 * The fault tests (random bytes, truncated and oversized frames, connect
 * cycles, a client that never reads, too many calls in flight) are in
 * test_rpc_fault.c; both share tests/integration/test_rpc_harness.h. */
#include <CUnit/CUnit.h>
#include <grp.h>
#include <signal.h>
#include <time.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

/* ---- every method ------------------------------------------------------- */

static void test_methods(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    struct stat st;
    CU_ASSERT(stat(s.sock, &st) == 0 && S_ISSOCK(st.st_mode) &&
              (st.st_mode & 0777) == 0600);

    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    rpc_res r;

    CU_ASSERT(rpc_call(c, "host.ping", "[]", &r) == 0);
    CU_ASSERT(r.err == NULL && th_rpc_obj_streq(r.res, "pong"));
    rpc_res_free(&r);

    /* tools.list: echo with its schema; fs_stat is in a toolset for root
     * only, and the test runs as root or not: checked in access_control. */
    CU_ASSERT(rpc_call(c, "tools.list", "[]", &r) == 0);
    CU_ASSERT_FATAL(r.res && r.res->type == MSGPACK_OBJECT_ARRAY);
    const msgpack_object *echo = rpc_find_tool(r.res, "echo");
    CU_ASSERT_PTR_NOT_NULL_FATAL(echo);
    CU_ASSERT(th_rpc_obj_streq(th_rpc_map_get(echo, "name"), "echo"));
    CU_ASSERT_PTR_NOT_NULL(th_rpc_map_get(echo, "description"));
    CU_ASSERT_PTR_NOT_NULL(th_rpc_map_get(echo, "long_description"));
    const msgpack_object *params = th_rpc_map_get(echo, "parameters");
    CU_ASSERT(th_rpc_obj_streq(th_rpc_map_get(params, "type"), "object"));
    const msgpack_object *props = th_rpc_map_get(params, "properties");
    CU_ASSERT(th_rpc_obj_streq(
        th_rpc_map_get(th_rpc_map_get(props, "text"), "type"), "string"));
    const msgpack_object *req = th_rpc_map_get(params, "required");
    CU_ASSERT(req && req->type == MSGPACK_OBJECT_ARRAY &&
              req->via.array.size == 1 &&
              th_rpc_obj_streq(&req->via.array.ptr[0], "text"));
    CU_ASSERT(rpc_has_flag(echo, "read_only"));
    CU_ASSERT(!rpc_has_flag(echo, "async"));
    CU_ASSERT_PTR_NOT_NULL(th_rpc_map_get(echo, "stdout_type"));
    CU_ASSERT_PTR_NOT_NULL(th_rpc_map_get(echo, "stderr_type"));
    const msgpack_object *ea = rpc_find_tool(r.res, "echo_async");
    CU_ASSERT(ea && rpc_has_flag(ea, "async"));
    rpc_res_free(&r);

    CU_ASSERT(rpc_call(c, "tools.describe", "[\"echo\"]", &r) == 0);
    CU_ASSERT(r.err == NULL &&
              th_rpc_obj_streq(th_rpc_map_get(r.res, "name"), "echo"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tools.describe", "[\"no_such_tool\"]", &r) == 0);
    CU_ASSERT(rpc_is_error(&r, TH_EUNKNOWN_TOOL));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tools.describe", "[]", &r) == 0);
    CU_ASSERT(rpc_is_error(&r, TH_EINVAL));
    rpc_res_free(&r);

    /* tools.call: a result, and tool errors as results. */
    CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"hi\"}]",
                       &r) == 0);
    CU_ASSERT(r.err == NULL);
    CU_ASSERT(rpc_ok(r.res));
    CU_ASSERT(rpc_stdout_is(r.res, "hi"));
    CU_ASSERT_PTR_NOT_NULL(th_rpc_map_get(r.res, "stderr"));
    CU_ASSERT_PTR_NOT_NULL(th_rpc_map_get(r.res, "meta"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {}]", &r) == 0);
    CU_ASSERT(rpc_tool_error_is(r.res, "invalid_arguments"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tools.call", "[\"nope\", {}]", &r) == 0);
    CU_ASSERT(rpc_tool_error_is(r.res, "unknown_tool"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tools.call",
                       "[\"echo\", {\"text\": \"x\"}, {\"timeout_ms\": 5000, "
                       "\"progress\": false}]",
                       &r) == 0);
    CU_ASSERT(rpc_ok(r.res));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tools.call",
                       "[\"echo\", {\"text\": \"x\"}, {\"bogus\": 1}]",
                       &r) == 0);
    CU_ASSERT(rpc_is_error(&r, TH_EINVAL));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", [1, 2]]", &r) == 0);
    CU_ASSERT(rpc_is_error(&r, TH_EINVAL));
    rpc_res_free(&r);

    /* tasks.*: nothing yet; unknown ids are errors. */
    CU_ASSERT(rpc_call(c, "tasks.list", "[]", &r) == 0);
    CU_ASSERT(r.res && r.res->type == MSGPACK_OBJECT_ARRAY &&
              r.res->via.array.size == 0);
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tasks.result", "[424242]", &r) == 0);
    CU_ASSERT(rpc_is_error(&r, TH_ENOTFOUND));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tasks.cancel", "[424242]", &r) == 0);
    CU_ASSERT(r.err != NULL);
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tasks.cancel", "[\"x\"]", &r) == 0);
    CU_ASSERT(rpc_is_error(&r, TH_EINVAL));
    rpc_res_free(&r);

    /* connections.current is 1 (this client) once the server has seen
     * the start-up probe's connection close: polled, bounded. */
    const msgpack_object *conns = NULL, *cur = NULL;
    for (int i = 0; i < 100; i++) {
        CU_ASSERT_FATAL(rpc_call(c, "host.stats", "[]", &r) == 0);
        conns = th_rpc_map_get(r.res, "connections");
        cur = th_rpc_map_get(conns, "current");
        if (!cur || cur->via.u64 == 1 || i == 99)
            break; /* r stays: read below */
        rpc_res_free(&r);
        usleep(20000);
    }
    CU_ASSERT(cur && cur->via.u64 == 1);
    CU_ASSERT(th_rpc_map_get(r.res, "uptime_ms") != NULL);
    CU_ASSERT(th_rpc_map_get(th_rpc_map_get(r.res, "memory"), "rss_bytes")
                  ->via.u64 > 0);
    const msgpack_object *mgr = th_rpc_map_get(r.res, "manager");
    CU_ASSERT(th_rpc_map_get(mgr, "workers") &&
              th_rpc_map_get(mgr, "workers")->via.u64 > 0);
    const msgpack_object *ts = th_rpc_map_get(r.res, "tools");
    const msgpack_object *ec =
        th_rpc_map_get(th_rpc_map_get(ts, "echo"), "calls");
    CU_ASSERT(ec && ec->via.u64 >= 3);
    CU_ASSERT(th_rpc_map_get(th_rpc_map_get(ts, "echo"), "p99_ms") != NULL);
    rpc_res_free(&r);

    /* Protocol errors: [code, message]. */
    CU_ASSERT(rpc_call(c, "no.such.method", "[]", &r) == 0);
    CU_ASSERT(rpc_is_error(&r, TH_ENOTFOUND));
    rpc_res_free(&r);
    /* host.reload answers with the reload's result (docs/reload.md). */
    CU_ASSERT(rpc_call(c, "host.reload", "[]", &r) == 0);
    CU_ASSERT(r.err == NULL);
    rpc_res_free(&r);
    /* An unknown notification is ignored; the connection goes on. */
    th_error e;
    CU_ASSERT(th_rpc_client_notify(c, "client.hello", NULL, 0, &e) == 0);
    CU_ASSERT(rpc_call(c, "host.ping", "[]", &r) == 0 && r.err == NULL);
    rpc_res_free(&r);
    th_rpc_client_close(c);

    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    CU_ASSERT(access(s.sock, F_OK) != 0); /* the socket file is removed */
    rpc_srv_free(&s);
}

/* A well-formed message of the wrong shape gets an error response; the
 * method may be bin. */
static void test_shapes_raw(void)
{
    rpc_srv s;
    rpc_opts o = {.host_extra = "  max_protocol_errors: 100\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    /* [0, 5, bin "host.ping", []] */
    const uint8_t binreq[] = {0x94, 0x00, 0x05, 0xc4, 9,   'h', 'o', 's',
                              't',  '.',  'p',  'i',  'n', 'g', 0x90};
    rpc_raw_send(&w, binreq, sizeof binreq);
    const msgpack_object *m = rpc_raw_next(&w, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT(m->via.array.ptr[1].via.u64 == 5 &&
              th_rpc_obj_streq(&m->via.array.ptr[3], "pong"));
    /* [0, 6, "tools.list", {}]: params not an array */
    const uint8_t bad[] = {0x94, 0x00, 0x06, 0xaa, 't', 'o', 'o', 'l',
                           's',  '.',  'l',  'i',  's', 't', 0x80};
    rpc_raw_send(&w, bad, sizeof bad);
    m = rpc_raw_next(&w, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT(m->via.array.ptr[1].via.u64 == 6);
    CU_ASSERT(m->via.array.ptr[2].type == MSGPACK_OBJECT_ARRAY &&
              m->via.array.ptr[2].via.array.ptr[0].via.i64 == TH_EPROTO);
    /* Wrong shapes with a readable msgid: an error response to that msgid
     * naming the problem, never a notification. */
    static const struct {
        const char *json, *says;
    } shapes[] = {
        {"[0, 21, \"host.ping\"]", "params are missing"},
        {"[0, 22, \"host.ping\", [], 7]", "4 elements, got 5"},
        {"[0, 23, \"host.ping\", {}]", "params must be an array, got a map"},
        {"[0, 24, \"host.ping\", null]", "params must be an array, got nil"},
        {"[0, 25, 7, []]", "method must be a string, got an integer"},
        {"[0, 26]", "4 elements, got 2"},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        th_buf f = TH_BUF_INIT;
        rpc_pack_json(&f, shapes[i].json);
        rpc_raw_send(&w, f.data, f.len);
        th_buf_destroy(&f);
        m = rpc_raw_next(&w, rpc_wait_ms());
        CU_ASSERT_FATAL(m != NULL);
        bool ok = m->via.array.size == 4 && m->via.array.ptr[0].via.u64 == 1 &&
                  m->via.array.ptr[1].via.u64 == 21 + i &&
                  m->via.array.ptr[2].type == MSGPACK_OBJECT_ARRAY &&
                  m->via.array.ptr[2].via.array.ptr[0].via.i64 == TH_EPROTO;
        const char *txt = "";
        size_t tn = 0;
        if (ok)
            th_rpc_obj_str(&m->via.array.ptr[2].via.array.ptr[1], &txt, &tn);
        char msg[256];
        snprintf(msg, sizeof msg, "%.*s", (int)tn, txt);
        if (!ok || !strstr(msg, shapes[i].says))
            fprintf(stderr, "shape %s: got '%s'\n", shapes[i].json, msg);
        CU_ASSERT(ok && strstr(msg, shapes[i].says) != NULL);
    }
    /* Params of the wrong count or type for the method: invalid_request
     * saying which. */
    static const struct {
        const char *method, *params, *says;
    } bad_params[] = {
        {"tools.call", "[\"echo\", {}, {}, 1]",
         "tools.call takes [name, args, options?], got 4 params"},
        {"tools.call", "[]",
         "tools.call takes [name, args, options?], got 0 params"},
        {"tools.call", "[7, {}]", "name must be a string, got an integer"},
        {"tools.call", "[\"echo\", [1]]", "args must be a map (or nil), got an array"},
        {"tools.call", "[\"echo\", {}, 5]", "options must be a map (or nil), got an integer"},
        {"tools.describe", "[\"echo\", 1]", "tools.describe takes [name], got 2 params"},
    };
    for (size_t i = 0; i < sizeof bad_params / sizeof bad_params[0]; i++) {
        rpc_raw_request(&w, 40 + i, bad_params[i].method,
                        bad_params[i].params);
        m = rpc_raw_response(&w, 40 + i, rpc_wait_ms());
        CU_ASSERT_FATAL(m != NULL);
        const msgpack_object *er = &m->via.array.ptr[2];
        const char *txt = "";
        size_t tn = 0;
        bool ok = er->type == MSGPACK_OBJECT_ARRAY &&
                  er->via.array.ptr[0].via.i64 == TH_EINVAL &&
                  th_rpc_obj_str(&er->via.array.ptr[1], &txt, &tn);
        char msg[256];
        snprintf(msg, sizeof msg, "%.*s", (int)tn, txt);
        if (!ok || !strstr(msg, bad_params[i].says))
            fprintf(stderr, "%s %s: got '%s'\n", bad_params[i].method,
                    bad_params[i].params, msg);
        CU_ASSERT(ok && strstr(msg, bad_params[i].says) != NULL);
    }
    /* A bare integer: no msgid to answer; the connection stays. */
    const uint8_t one[] = {0x01};
    rpc_raw_send(&w, one, 1);
    m = rpc_raw_next(&w, rpc_wait_ms());
    CU_ASSERT(m && th_rpc_obj_streq(&m->via.array.ptr[1],
                                    "host.protocol_error"));
    rpc_raw_send(&w, binreq, sizeof binreq);
    m = rpc_raw_next(&w, rpc_wait_ms());
    CU_ASSERT(m && m->via.array.ptr[1].via.u64 == 5);
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- async tasks, progress, tasks.* ------------------------------------ */

/* The params of tools.changed for the task tools alone:
 * [{task_tools_only: true, task_tools: listed}]. */
static bool task_tools_note_is(const msgpack_object *p, bool listed)
{
    if (p->type != MSGPACK_OBJECT_ARRAY || p->via.array.size != 1)
        return false;
    const msgpack_object *only = th_rpc_map_get(&p->via.array.ptr[0],
                                                "task_tools_only");
    const msgpack_object *l = th_rpc_map_get(&p->via.array.ptr[0],
                                             "task_tools");
    return only && only->type == MSGPACK_OBJECT_BOOLEAN &&
           only->via.boolean && l && l->type == MSGPACK_OBJECT_BOOLEAN &&
           l->via.boolean == listed;
}

static int count_progress(const char *method, size_t len,
                          const msgpack_object *params, void *ud)
{
    (void)method;
    (void)len;
    int *n = ud;
    const msgpack_object *info = &params->via.array.ptr[1];
    if (th_rpc_map_get(info, "message") && th_rpc_map_get(info, "coalesced"))
        (*n)++;
    return 0;
}

static void test_async_progress(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    th_buf args = TH_BUF_INIT;
    rpc_pack_json(&args, "{\"text\": \"later\", \"steps\": 3, "
                         "\"delay_ms\": 30}");
    int progress = 0;
    uint8_t *res = NULL;
    size_t len = 0;
    th_error e;
    CU_ASSERT(th_rpc_client_call_tool(c, "echo_async", args.data, args.len, 0,
                                      count_progress, &progress, &res, &len,
                                      &e) == 0);
    CU_ASSERT(progress >= 1);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    CU_ASSERT_FATAL(res && msgpack_unpack_next(&u, (const char *)res, len,
                                               &off) ==
                               MSGPACK_UNPACK_SUCCESS);
    CU_ASSERT(rpc_ok(&u.data));
    CU_ASSERT(rpc_stdout_is(&u.data, "later"));
    msgpack_unpacked_destroy(&u);
    free(res);

    /* The finished task is listed and its result can be fetched again. */
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tasks.list", "[]", &r) == 0);
    CU_ASSERT_FATAL(r.res && r.res->type == MSGPACK_OBJECT_ARRAY &&
                    r.res->via.array.size == 1);
    const msgpack_object *t = &r.res->via.array.ptr[0];
    CU_ASSERT(th_rpc_obj_streq(th_rpc_map_get(t, "status"), "done"));
    CU_ASSERT(th_rpc_obj_streq(th_rpc_map_get(t, "tool"), "echo_async"));
    uint64_t task = th_rpc_map_get(t, "task_id")->via.u64;
    rpc_res_free(&r);
    char p[64];
    snprintf(p, sizeof p, "[%llu]", (unsigned long long)task);
    CU_ASSERT(rpc_call(c, "tasks.result", p, &r) == 0);
    CU_ASSERT(rpc_ok(r.res) && rpc_stdout_is(r.res, "later"));
    rpc_res_free(&r);

    /* A long task cancelled with tasks.cancel ends with task.done. */
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call",
                    "[\"echo_async\", {\"text\": \"x\", \"steps\": 200, "
                    "\"delay_ms\": 50}]");
    const msgpack_object *m = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *ack = &m->via.array.ptr[3];
    CU_ASSERT(th_rpc_obj_streq(th_rpc_map_get(ack, "status"), "running"));
    task = th_rpc_map_get(ack, "task_id")->via.u64;
    /* A live task brings the task tools: tools.changed saying that only
     * the task tools changed (listed now), and they are listed. */
    m = rpc_raw_notification(&w, "tools.changed", rpc_wait_ms());
    CU_ASSERT(m && task_tools_note_is(&m->via.array.ptr[2], true));
    rpc_raw_request(&w, 5, "tools.list", "[]");
    m = rpc_raw_response(&w, 5, rpc_wait_ms());
    CU_ASSERT(m && rpc_find_tool(&m->via.array.ptr[3], "get_running_tasks") &&
              rpc_find_tool(&m->via.array.ptr[3], "cancel_task"));
    rpc_raw_request(&w, 2, "tasks.list", "[]");
    m = rpc_raw_response(&w, 2, rpc_wait_ms());
    CU_ASSERT_FATAL(m && m->via.array.ptr[3].type == MSGPACK_OBJECT_ARRAY);
    /* the running one (from the manager) and the finished one */
    const msgpack_object *running = NULL;
    for (uint32_t i = 0; i < m->via.array.ptr[3].via.array.size; i++) {
        const msgpack_object *ti = &m->via.array.ptr[3].via.array.ptr[i];
        if (th_rpc_map_get(ti, "task_id")->via.u64 == task)
            running = ti;
    }
    CU_ASSERT_EQUAL(m->via.array.ptr[3].via.array.size, 1);
    CU_ASSERT(running &&
              th_rpc_obj_streq(th_rpc_map_get(running, "status"), "running") &&
              th_rpc_obj_streq(th_rpc_map_get(running, "scope"), "session"));
    snprintf(p, sizeof p, "[%llu]", (unsigned long long)task);
    rpc_raw_request(&w, 3, "tasks.result", p);
    m = rpc_raw_response(&w, 3, rpc_wait_ms());
    CU_ASSERT(m && th_rpc_obj_streq(th_rpc_map_get(&m->via.array.ptr[3],
                                                   "status"),
                                    "running"));
    rpc_raw_request(&w, 4, "tasks.cancel", p);
    m = rpc_raw_response(&w, 4, rpc_wait_ms());
    CU_ASSERT(m && m->via.array.ptr[2].type == MSGPACK_OBJECT_NIL);
    m = rpc_raw_notification(&w, "task.done", rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *dp = &m->via.array.ptr[2];
    CU_ASSERT(dp->via.array.ptr[0].via.u64 == task);
    CU_ASSERT(rpc_tool_error_is(&dp->via.array.ptr[1], "cancelled"));
    /* ... and they go again with the last task. */
    m = rpc_raw_notification(&w, "tools.changed", rpc_wait_ms());
    CU_ASSERT(m && task_tools_note_is(&m->via.array.ptr[2], false));
    rpc_raw_request(&w, 6, "tools.list", "[]");
    m = rpc_raw_response(&w, 6, rpc_wait_ms());
    CU_ASSERT(m && !rpc_find_tool(&m->via.array.ptr[3], "get_running_tasks"));
    rpc_raw_close(&w);

    th_buf_destroy(&args);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* A toolset-scoped task outlives the session that started it; another
 * session reads its result with tasks.result. */
static void test_toolset_task_result(void)
{
    rpc_srv s;
    rpc_opts o = {.public_extra = "    scope: toolset\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call",
                    "[\"echo_async\", {\"text\": \"kept\", \"steps\": 4, "
                    "\"delay_ms\": 50}]");
    const msgpack_object *m = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *tid =
        th_rpc_map_get(&m->via.array.ptr[3], "task_id");
    CU_ASSERT_FATAL(tid != NULL);
    uint64_t task = tid->via.u64;
    rpc_raw_close(&w); /* the task goes on without its session */

    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    char p[64];
    snprintf(p, sizeof p, "[%llu]", (unsigned long long)task);
    bool done = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!done && rpc_now_ms() < end) {
        rpc_res r;
        CU_ASSERT_FATAL(rpc_call(c, "tasks.result", p, &r) == 0);
        if (r.res && th_rpc_map_get(r.res, "ok")) {
            CU_ASSERT(rpc_ok(r.res) && rpc_stdout_is(r.res, "kept"));
            done = true;
        } else {
            /* still running: {status: running} */
            CU_ASSERT(r.res && th_rpc_obj_streq(th_rpc_map_get(r.res,
                                                               "status"),
                                                "running"));
            usleep(20000);
        }
        rpc_res_free(&r);
    }
    CU_ASSERT(done);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tasks.result", "[987654]", &r) == 0);
    CU_ASSERT(rpc_is_error(&r, TH_ENOTFOUND));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- the client's cancel flag ------------------------------------------- */

/* The flag is set by a signal handler, as the CLI's Ctrl-C handler does:
 * a POSIX timer sends SIGUSR1 after a while. */
static volatile sig_atomic_t cancel_flag;

static void on_usr1(int sig)
{
    (void)sig;
    cancel_flag = 1;
}

/* Runs `tool` with the cancel flag set after `after_ms`; true when the
 * final result is the `cancelled` tool error. */
static bool cancelled_call(rpc_srv *s, const char *tool, const char *json,
                           int after_ms)
{
    th_rpc_client *c = rpc_connect(s);
    if (!c)
        return false;
    cancel_flag = 0;
    th_rpc_client_set_cancel_flag(c, &cancel_flag);
    struct sigaction sa = {.sa_handler = on_usr1}, old_sa;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &old_sa);
    struct sigevent sev = {.sigev_notify = SIGEV_SIGNAL,
                           .sigev_signo = SIGUSR1};
    timer_t timer;
    timer_create(CLOCK_MONOTONIC, &sev, &timer);
    struct itimerspec its = {.it_value = {after_ms / 1000,
                                          (after_ms % 1000) * 1000000L}};
    timer_settime(timer, 0, &its, NULL);
    th_buf args = TH_BUF_INIT;
    rpc_pack_json(&args, json);
    uint8_t *res = NULL;
    size_t len = 0;
    th_error e;
    int rc = th_rpc_client_call_tool(c, tool, args.data, args.len, 0, NULL,
                                     NULL, &res, &len, &e);
    timer_delete(timer);
    sigaction(SIGUSR1, &old_sa, NULL);
    bool ok = cancel_flag == 1;
    if (rc != 0)
        ok = false;
    if (rc == 0) {
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        if (msgpack_unpack_next(&u, (const char *)res, len, &off) ==
            MSGPACK_UNPACK_SUCCESS)
            ok = ok && rpc_tool_error_is(&u.data, "cancelled");
        msgpack_unpacked_destroy(&u);
    }
    free(res);
    th_buf_destroy(&args);
    th_rpc_client_close(c);
    return ok;
}

static void test_client_cancel(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    /* After the acknowledgement: tasks.cancel. */
    int64_t t0 = rpc_now_ms();
    CU_ASSERT(cancelled_call(&s, "echo_async",
                             "{\"text\": \"x\", \"steps\": 400, "
                             "\"delay_ms\": 50}",
                             300));
    CU_ASSERT(rpc_now_ms() - t0 < 10000); /* not the 20 s it would take */
    /* Before an answer (a sync call): tools.cancel by msgid. */
    CU_ASSERT(cancelled_call(&s, "text_count", "{\"path\": \"x\"}", 100));
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- pipelining ---------------------------------------------------------- */

static void test_pipelining(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    /* text_count is mocked to take 400 ms; echo answers at once. */
    rpc_raw_request(&w, 1, "tools.call", "[\"text_count\", {\"path\": \"x\"}]");
    rpc_raw_request(&w, 2, "tools.call", "[\"echo\", {\"text\": \"fast\"}]");
    const msgpack_object *m = rpc_raw_next(&w, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT_EQUAL(m->via.array.ptr[0].via.u64, 1);
    CU_ASSERT_EQUAL(m->via.array.ptr[1].via.u64, 2); /* the later one first */
    CU_ASSERT(rpc_stdout_is(&m->via.array.ptr[3], "fast"));
    m = rpc_raw_next(&w, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT_EQUAL(m->via.array.ptr[1].via.u64, 1);
    CU_ASSERT(rpc_ok(&m->via.array.ptr[3]));

    /* Many requests in one write, every one answered once. */
    enum { N = 30 }; /* max_inflight is 32 */
    th_buf all = TH_BUF_INIT;
    for (int i = 0; i < N; i++) {
        char js[64];
        snprintf(js, sizeof js, "[\"echo\", {\"text\": \"m%d\"}]", i);
        th_buf p = TH_BUF_INIT;
        rpc_pack_json(&p, js);
        th_rpc_pack_request(&all, 100 + (uint64_t)i, "tools.call", p.data,
                            p.len);
        th_buf_destroy(&p);
    }
    rpc_raw_send(&w, all.data, all.len);
    th_buf_destroy(&all);
    int seen[N] = {0};
    for (int i = 0; i < N; i++) {
        m = rpc_raw_next(&w, rpc_wait_ms());
        CU_ASSERT_FATAL(m != NULL);
        uint64_t id = m->via.array.ptr[1].via.u64;
        CU_ASSERT_FATAL(id >= 100 && id < 100 + N);
        char want[16];
        snprintf(want, sizeof want, "m%d", (int)(id - 100));
        CU_ASSERT(rpc_stdout_is(&m->via.array.ptr[3], want));
        seen[id - 100]++;
    }
    for (int i = 0; i < N; i++)
        CU_ASSERT_EQUAL(seen[i], 1);
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- permission.request -------------------------------------------------- */

static bool answer(const msgpack_object *req, void *ud)
{
    int *mode = ud;
    /* [call_id, tool, args, reason, {msgid, tool}] */
    if (req->type != MSGPACK_OBJECT_ARRAY || req->via.array.size != 5 ||
        !th_rpc_obj_streq(&req->via.array.ptr[1], "fs_list") ||
        !th_rpc_obj_streq(th_rpc_map_get(&req->via.array.ptr[4], "tool"),
                          "fs_list") ||
        !th_rpc_map_get(&req->via.array.ptr[4], "msgid"))
        return false;
    mode[1]++;
    return mode[0] == 1;
}

static void test_permission(void)
{
    if (geteuid() != 0) {
        /* The toolset with the `ask` rule allows root only. */
        TH_SKIP("needs root");
    }
    /* The answered asks run on a host whose permission_timeout is far
     * beyond any answer's round trip (a busy machine, valgrind); the
     * unanswered one on a second host with a short one, so that the
     * timeout fires soon without racing the answers. */
    char patient[64];
    snprintf(patient, sizeof patient, "  permission_timeout: %ums\n",
             th_test_ms(60000));
    rpc_srv s;
    rpc_opts o = {.host_extra = patient};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    int mode[2] = {1, 0};
    th_rpc_client_on_permission(c, answer, mode);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.call", "[\"fs_list\", {\"path\": \".\"}]",
                       &r) == 0);
    CU_ASSERT(rpc_ok(r.res));
    CU_ASSERT_EQUAL(mode[1], 1);
    rpc_res_free(&r);
    mode[0] = 0;
    CU_ASSERT(rpc_call(c, "tools.call", "[\"fs_list\", {\"path\": \".\"}]",
                       &r) == 0);
    CU_ASSERT(rpc_tool_error_is(r.res, "permission_denied"));
    CU_ASSERT_EQUAL(mode[1], 2);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    rpc_raw w;
    const msgpack_object *m;
    /* Two identical calls ask at the same time: each ask names the msgid
     * of its tools.call, so the client answers each its own way (yes to
     * msgid 12, no to msgid 11). */
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 11, "tools.call", "[\"fs_list\", {\"path\": \".\"}]");
    rpc_raw_request(&w, 12, "tools.call", "[\"fs_list\", {\"path\": \".\"}]");
    int asked = 0;
    for (int i = 0; i < 2; i++) {
        m = rpc_raw_host_request(&w, "permission.request",
                                 rpc_wait_ms());
        CU_ASSERT_FATAL(m != NULL);
        const msgpack_object *pa = &m->via.array.ptr[3];
        CU_ASSERT_FATAL(pa->type == MSGPACK_OBJECT_ARRAY &&
                        pa->via.array.size == 5);
        const msgpack_object *mid = th_rpc_map_get(&pa->via.array.ptr[4],
                                                   "msgid");
        CU_ASSERT_FATAL(mid && mid->type == MSGPACK_OBJECT_POSITIVE_INTEGER);
        CU_ASSERT(th_rpc_obj_streq(th_rpc_map_get(&pa->via.array.ptr[4],
                                                  "tool"),
                                   "fs_list"));
        asked |= mid->via.u64 == 11 ? 1 : mid->via.u64 == 12 ? 2 : 4;
        th_buf f = TH_BUF_INIT;
        const uint8_t yes = 0xc3, no = 0xc2;
        th_rpc_pack_response(&f, m->via.array.ptr[1].via.u64, NULL, 0,
                             mid->via.u64 == 12 ? &yes : &no, 1);
        rpc_raw_send(&w, f.data, f.len);
        th_buf_destroy(&f);
    }
    CU_ASSERT_EQUAL(asked, 3);
    m = rpc_raw_response(&w, 11, rpc_wait_ms());
    CU_ASSERT(m && rpc_tool_error_is(&m->via.array.ptr[3],
                                     "permission_denied"));
    m = rpc_raw_response(&w, 12, rpc_wait_ms());
    CU_ASSERT(m && rpc_ok(&m->via.array.ptr[3]));
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    /* Each decision is logged once: 4 asks, 4 answers, no timeout. */
    CU_ASSERT_EQUAL(rpc_log_count(&s, "asking permission"), 4);
    CU_ASSERT_EQUAL(rpc_log_count(&s, "permission asked"), 0);
    CU_ASSERT_EQUAL(rpc_log_count(&s, "permission granted by the front") +
                        rpc_log_count(&s, "permission refused by the front"), 4);
    CU_ASSERT_EQUAL(rpc_log_count(&s, "by the client"), 0);
    CU_ASSERT_EQUAL(rpc_log_count(&s, "no answer within"), 0);
    rpc_srv_free(&s);

    o.host_extra = "  permission_timeout: 300ms\n";
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    /* Not answered at all: denied after host.permission_timeout. */
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call", "[\"fs_list\", {\"path\": \".\"}]");
    m = rpc_raw_next(&w, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT(m->via.array.ptr[0].via.u64 == 0 &&
              th_rpc_obj_streq(&m->via.array.ptr[2], "permission.request") &&
              m->via.array.ptr[3].via.array.size == 5);
    m = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT(m && rpc_tool_error_is(&m->via.array.ptr[3],
                                     "permission_denied"));
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    /* 1 ask, no answer, 1 timeout denial. */
    CU_ASSERT_EQUAL(rpc_log_count(&s, "asking permission"), 1);
    CU_ASSERT_EQUAL(rpc_log_count(&s, "permission granted by the front") +
                        rpc_log_count(&s, "permission refused by the front"), 0);
    CU_ASSERT_EQUAL(rpc_log_count(&s, "no answer within 300 ms"), 1);
    rpc_srv_free(&s);
}

/* ---- client.ask ------------------------------------------------------------ */

/* A tool's ask_client() over msgpack-RPC (docs/protocol.md, client.ask):
 * sent only for a tools.call whose client_asks names the kind, with the
 * call's origin; the client's answer (or error) reaches the tool; any
 * other call's tool hears it cannot ask; a result's blocks come in
 * meta.toolhost.content. */
static void client_ask_run(bool isolated)
{
    rpc_srv s;
    char cfg[1024], iso[128] = "";
    if (isolated)
        snprintf(iso, sizeof iso, "    isolation: process\n%s",
                 geteuid() == 0 ? "    user: auto\n" : "");
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "plugins:\n"
             "  - name: conform_tools\n"
             "    path: @BUILD@/fixtures/conform_tools.so\n"
             "%s"
             "  - name: abi14_calls\n"
             "    path: @BUILD@/fixtures/abi14_calls.so\n"
             "%s"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             iso, iso);
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    /* a form, accepted */
    rpc_raw_request(&w, 1, "tools.call",
                    "[\"test_elicitation\", {\"message\": \"Name?\"}, "
                    "{\"client_asks\": [\"form\"]}]");
    const msgpack_object *m = rpc_raw_host_request(&w, "client.ask",
                                                   rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *pa = &m->via.array.ptr[3];
    CU_ASSERT_FATAL(pa->type == MSGPACK_OBJECT_ARRAY &&
                    pa->via.array.size == 4);
    CU_ASSERT(th_rpc_obj_streq(&pa->via.array.ptr[1], "form"));
    CU_ASSERT(th_rpc_obj_streq(th_rpc_map_get(&pa->via.array.ptr[2],
                                              "message"),
                               "Name?"));
    CU_ASSERT_PTR_NOT_NULL(th_rpc_map_get(&pa->via.array.ptr[2],
                                          "requestedSchema"));
    const msgpack_object *mid = th_rpc_map_get(&pa->via.array.ptr[3],
                                               "msgid");
    CU_ASSERT(mid && mid->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
              mid->via.u64 == 1);
    rpc_raw_answer(&w, m, "{\"action\": \"accept\", \"content\": "
                          "{\"username\": \"ada\", \"email\": \"a@b\"}}");
    m = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *out = th_rpc_map_get(&m->via.array.ptr[3],
                                               "stdout");
    CU_ASSERT(rpc_ok(&m->via.array.ptr[3]) && out &&
              out->type == MSGPACK_OBJECT_STR &&
              memmem(out->via.str.ptr, out->via.str.size,
                     "\"username\":\"ada\"", 16) != NULL);
    /* sampling without client_asks: the tool is told at once */
    rpc_raw_request(&w, 2, "tools.call",
                    "[\"test_sampling\", {\"prompt\": \"p\"}, "
                    "{\"client_asks\": [\"form\"]}]");
    m = rpc_raw_response(&w, 2, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *err = th_rpc_map_get(&m->via.array.ptr[3],
                                               "stderr");
    CU_ASSERT(!rpc_ok(&m->via.array.ptr[3]) && err &&
              err->type == MSGPACK_OBJECT_STR &&
              memmem(err->via.str.ptr, err->via.str.size,
                     "cannot answer sampling", 22) != NULL);
    /* sampling allowed, answered with an error */
    rpc_raw_request(&w, 3, "tools.call",
                    "[\"test_sampling\", {\"prompt\": \"p\"}, "
                    "{\"client_asks\": [\"sampling\", \"form\"]}]");
    m = rpc_raw_host_request(&w, "client.ask", rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    pa = &m->via.array.ptr[3];
    CU_ASSERT(th_rpc_obj_streq(&pa->via.array.ptr[1], "sampling"));
    th_buf e = TH_BUF_INIT, f = TH_BUF_INIT;
    rpc_pack_json(&e, "\"no model here\"");
    th_rpc_pack_response(&f, m->via.array.ptr[1].via.u64, e.data, e.len,
                         NULL, 0);
    rpc_raw_send(&w, f.data, f.len);
    th_buf_destroy(&f);
    th_buf_destroy(&e);
    m = rpc_raw_response(&w, 3, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    err = th_rpc_map_get(&m->via.array.ptr[3], "stderr");
    CU_ASSERT(!rpc_ok(&m->via.array.ptr[3]) && err &&
              err->type == MSGPACK_OBJECT_STR &&
              memmem(err->via.str.ptr, err->via.str.size, "no model here",
                     13) != NULL);
    /* a bad option */
    rpc_raw_request(&w, 4, "tools.call",
                    "[\"test_sampling\", {\"prompt\": \"p\"}, "
                    "{\"client_asks\": [\"mind-reading\"]}]");
    m = rpc_raw_response(&w, 4, rpc_wait_ms());
    CU_ASSERT(m && m->via.array.ptr[2].type != MSGPACK_OBJECT_NIL);
    /* blocks in meta.toolhost.content */
    rpc_raw_request(&w, 5, "tools.call",
                    "[\"test_multiple_content_types\", {}]");
    m = rpc_raw_response(&w, 5, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *meta = th_rpc_map_get(&m->via.array.ptr[3],
                                                "meta");
    const msgpack_object *content =
        th_rpc_map_get(th_rpc_map_get(meta, "toolhost"), "content");
    CU_ASSERT_FATAL(content && content->type == MSGPACK_OBJECT_ARRAY &&
                    content->via.array.size == 2);
    CU_ASSERT(th_rpc_obj_streq(th_rpc_map_get(&content->via.array.ptr[0],
                                              "type"),
                               "image"));
    const msgpack_object *d = th_rpc_map_get(&content->via.array.ptr[0],
                                             "data");
    CU_ASSERT(d && d->type == MSGPACK_OBJECT_BIN && d->via.bin.size == 69);
    CU_ASSERT(th_rpc_obj_streq(th_rpc_map_get(&content->via.array.ptr[1],
                                              "uri"),
                               "test://mixed-content-resource"));
    if (isolated) {
        /* from a worker: the ask crosses its socket both ways; a call
         * that asks twice gets both answers */
        rpc_raw_request(&w, 7, "tools.call",
                        "[\"abi14_calls_ask\", {\"kind\": 2, \"request\": "
                        "\"{\\\"message\\\": \\\"Twice?\\\", "
                        "\\\"requestedSchema\\\": {\\\"type\\\": "
                        "\\\"object\\\", \\\"properties\\\": {}}}\", "
                        "\"times\": 2}, {\"client_asks\": [\"form\"]}]");
        for (int i = 0; i < 2; i++) {
            m = rpc_raw_host_request(&w, "client.ask", rpc_wait_ms());
            CU_ASSERT_FATAL(m != NULL);
            rpc_raw_answer(&w, m, i ? "{\"action\": \"decline\"}"
                                    : "{\"action\": \"cancel\"}");
        }
        m = rpc_raw_response(&w, 7, rpc_wait_ms());
        CU_ASSERT_FATAL(m != NULL);
        out = th_rpc_map_get(&m->via.array.ptr[3], "stdout");
        /* "ok=2 rc=0 answer=" and the last answer */
        bool both = out && out->type == MSGPACK_OBJECT_STR &&
                    memmem(out->via.str.ptr, out->via.str.size,
                           "ok=2 rc=0 answer=", 17) &&
                    memmem(out->via.str.ptr, out->via.str.size, "decline",
                           7);
        if (!both)
            fprintf(stderr, "\nclient_ask_isolated: %.*s\n",
                    out && out->type == MSGPACK_OBJECT_STR
                        ? (int)out->via.str.size : 0,
                    out && out->type == MSGPACK_OBJECT_STR ? out->via.str.ptr
                                                           : "");
        CU_ASSERT(rpc_ok(&m->via.array.ptr[3]) && both);
        rpc_raw_close(&w);
        CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
        rpc_srv_free(&s);
        return;
    }
    /* a short tool runs on the loop, which cannot wait for the client:
     * its ask is refused at once (ESTATE), logged */
    rpc_raw_request(&w, 6, "tools.call",
                    "[\"abi14_calls_short\", {\"kind\": 2, \"request\": "
                    "\"{}\"}, {\"client_asks\": [\"form\"]}]");
    m = rpc_raw_response(&w, 6, rpc_wait_ms());
    CU_ASSERT(m && rpc_stdout_is(&m->via.array.ptr[3], "rc=-4 answer="));
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    CU_ASSERT(rpc_log_has(&s, "runs on the front's own thread"));
    rpc_srv_free(&s);
}

static void test_client_ask(void)
{
    client_ask_run(false);
}

/* The same asks from plugins run with isolation: process: a worker's
 * ask_client() goes to the host, which asks the client on the call's
 * own thread and sends the answer back (docs/isolation.md). */
static void test_client_ask_isolated(void)
{
    client_ask_run(true);
}

/* ---- access control: two users' views --------------------------------- */

/* What a session of uid/gid sees: the Python client's --view run as that
 * user (a child that execs, so that nothing of this process is left in it
 * under valgrind).  The JSON it printed, or NULL. */
static json_t *view_as(rpc_srv *s, uid_t uid, gid_t gid, const char *tool,
                       const char *args)
{
    int p[2];
    if (pipe(p) != 0)
        return NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return NULL;
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
            _exit(10);
        char *argv[] = {"/usr/bin/python3",
                        (char *)th_test_source_path(
                            "tests/integration/rpc_interop.py"),
                        "--view", s->sock, (char *)tool, (char *)args, NULL};
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    char buf[65536];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof buf - 1 &&
           (n = read(p[0], buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "\nview as uid %u: status %d: %s\n", (unsigned)uid,
                status, buf);
        return NULL;
    }
    return json_loads(buf, 0, NULL);
}

static bool view_has_tool(json_t *v, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(v, "tools"), i, t) if (
        strcmp(json_string_value(t), name) == 0) return true;
    return false;
}

static void test_access_control(void)
{
    struct passwd *pw = getpwnam("nobody");
    if (geteuid() != 0 || !pw) {
        TH_SKIP("needs root and a 'nobody' user");
    }
    rpc_srv s;
    rpc_opts o = {.socket_mode = "0666"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    chmod(s.dir, 0755);
    struct stat st;
    CU_ASSERT(stat(s.sock, &st) == 0 && (st.st_mode & 0777) == 0666);

    /* root's view */
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.list", "[]", &r) == 0);
    CU_ASSERT(rpc_find_tool(r.res, "echo") && rpc_find_tool(r.res, "fs_stat"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tools.call", "[\"fs_stat\", {\"path\": \".\"}]",
                       &r) == 0);
    CU_ASSERT(rpc_ok(r.res));
    rpc_res_free(&r);

    /* nobody's view: no fs_* tools, fs_stat cannot be described or
     * called; echo works. */
    json_t *v = view_as(&s, pw->pw_uid, pw->pw_gid, "fs_stat",
                        "{\"path\": \".\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT(view_has_tool(v, "echo"));
    CU_ASSERT(!view_has_tool(v, "fs_stat") && !view_has_tool(v, "fs_list"));
    CU_ASSERT(json_is_array(json_object_get(v, "describe_error")));
    json_t *call = json_object_get(v, "call");
    CU_ASSERT(json_is_false(json_object_get(call, "ok")));
    json_decref(v);
    v = view_as(&s, pw->pw_uid, pw->pw_gid, "echo", "{\"text\": \"n\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    const char *so =
        json_string_value(json_object_get(json_object_get(v, "call"),
                                          "stdout"));
    CU_ASSERT(so && strcmp(so, "n") == 0);
    json_decref(v);
    /* and root's view is the same as before */
    json_t *rv = view_as(&s, 0, 0, "fs_stat", "{\"path\": \".\"}");
    CU_ASSERT(rv && view_has_tool(rv, "fs_stat") &&
              json_is_true(json_object_get(json_object_get(rv, "call"), "ok")));
    json_decref(rv);
    /* root still sees its own after the other session */
    CU_ASSERT(rpc_call(c, "tools.describe", "[\"fs_stat\"]", &r) == 0);
    CU_ASSERT(r.err == NULL);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_log_has(&s, "uid=65534") || pw->pw_uid != 65534);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- disconnect mid-call; SIGTERM with calls in flight ------------------- */

static void test_disconnect_mid_call(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    for (int round = 0; round < 3; round++) {
        rpc_raw w;
        CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
        rpc_raw_request(&w, 1, "tools.call",
                        "[\"echo_async\", {\"text\": \"x\", \"steps\": 100, "
                        "\"delay_ms\": 50}]");
        rpc_raw_request(&w, 2, "tools.call",
                        "[\"text_count\", {\"path\": \"x\"}]");
        CU_ASSERT(rpc_raw_response(&w, 1, rpc_wait_ms()) != NULL);
        /* text_count is still running: hang up. */
        rpc_raw_close(&w);
    }
    /* The sessions end; the host goes on. */
    CU_ASSERT(rpc_wait_connections(&s, 0, rpc_wait_ms()));
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void test_sigterm_in_flight(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0); /* shutdown_grace 1s */
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call",
                    "[\"echo_async\", {\"text\": \"x\", \"steps\": 400, "
                    "\"delay_ms\": 50}]");
    CU_ASSERT_FATAL(rpc_raw_response(&w, 1, rpc_wait_ms()) != NULL);
    rpc_raw_request(&w, 2, "tools.call", "[\"text_count\", {\"path\": \"x\"}]");
    rpc_raw_request(&w, 3, "host.ping", "[]");
    CU_ASSERT(rpc_raw_response(&w, 3, rpc_wait_ms()) != NULL);
    kill(s.pid, SIGTERM);
    /* Stopping: the socket file goes first; new requests are refused. */
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (access(s.sock, F_OK) == 0 && rpc_now_ms() < end)
        usleep(2000);
    CU_ASSERT(access(s.sock, F_OK) != 0);
    rpc_raw_request(&w, 4, "host.ping", "[]");
    const msgpack_object *m4 = rpc_raw_response(&w, 4, rpc_wait_ms());
    CU_ASSERT(m4 && m4->via.array.ptr[2].type == MSGPACK_OBJECT_ARRAY &&
              m4->via.array.ptr[2].via.array.ptr[0].via.i64 == TH_ESTATE);
    /* The short call finishes within the grace; the long task is
     * cancelled after it; then the server hangs up and exits 0. */
    const msgpack_object *m = rpc_raw_response(&w, 2, rpc_wait_ms());
    CU_ASSERT(m && rpc_ok(&m->via.array.ptr[3]));
    m = rpc_raw_notification(&w, "task.done", rpc_wait_ms());
    CU_ASSERT(m && rpc_tool_error_is(&m->via.array.ptr[2].via.array.ptr[1],
                                     "cancelled"));
    CU_ASSERT(rpc_raw_eof(&w, rpc_wait_ms()));
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_wait(&s), 0);
    CU_ASSERT(access(s.sock, F_OK) != 0);
    CU_ASSERT(rpc_log_has(&s, "shutdown"));
    rpc_srv_free(&s);
}

/* The one str/bin rule: a string argument sent as msgpack bin works when
 * it is UTF-8 (validator and SDK agree), and is refused by validation with
 * a reason when it is not -- never {ok: false} with an empty stderr. */
static void bin_call(th_rpc_client *c, const char *tool, const char *bytes,
                     size_t n, rpc_res *r)
{
    th_buf p = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &p, th_buf_msgpack_write);
    msgpack_pack_array(&pk, 2);
    th_pack_cstr(&pk, tool);
    msgpack_pack_map(&pk, 1);
    th_pack_cstr(&pk, "text");
    msgpack_pack_bin_with_body(&pk, bytes, n);
    memset(r, 0, sizeof *r);
    msgpack_unpacked_init(&r->ue);
    msgpack_unpacked_init(&r->ur);
    th_error e;
    int rc = th_rpc_client_call(c, "tools.call", p.data, p.len, NULL, NULL,
                                &r->rep, &e);
    th_buf_destroy(&p);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    size_t off = 0;
    if (r->rep.result &&
        msgpack_unpack_next(&r->ur, (const char *)r->rep.result,
                            r->rep.result_len, &off) == MSGPACK_UNPACK_SUCCESS)
        r->res = &r->ur.data;
}

static void test_bin_strings(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const char *tools[] = {"echo", "echo_async"};
    for (int i = 0; i < 2; i++) {
        rpc_res r;
        bin_call(c, tools[i], "h\xc3\xa9", 3, &r);
        CU_ASSERT(r.res != NULL);
        if (i == 0) {
            CU_ASSERT(rpc_ok(r.res) && rpc_stdout_is(r.res, "h\xc3\xa9"));
        } else { /* acknowledged as a task */
            const msgpack_object *st = th_rpc_map_get(r.res, "status");
            CU_ASSERT(st && th_rpc_obj_streq(st, "running"));
        }
        rpc_res_free(&r);

        bin_call(c, tools[i], "\xff\xfe", 2, &r);
        CU_ASSERT(r.res && !rpc_ok(r.res));
        const msgpack_object *er = r.res ? th_rpc_map_get(r.res, "error")
                                         : NULL;
        const msgpack_object *code = er ? th_rpc_map_get(er, "code") : NULL;
        const msgpack_object *msg = er ? th_rpc_map_get(er, "message") : NULL;
        CU_ASSERT(code && th_rpc_obj_streq(code, "invalid_arguments"));
        const char *p = NULL;
        size_t n = 0;
        CU_ASSERT(msg && th_rpc_obj_str(msg, &p, &n) &&
                  memmem(p, n, "not UTF-8", 9) != NULL);
        rpc_res_free(&r);
    }
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- stdio ------------------------------------------------------------- */

static void test_stdio(void)
{
    rpc_srv s;
    rpc_opts o = {.stdio = true};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_buf in = TH_BUF_INIT, p = TH_BUF_INIT;
    th_rpc_pack_notify(&in, "client.hello", NULL, 0);
    th_rpc_pack_request(&in, 1, "host.ping", NULL, 0);
    rpc_pack_json(&p, "[\"echo\", {\"text\": \"over stdio\"}]");
    th_rpc_pack_request(&in, 2, "tools.call", p.data, p.len);
    th_buf_reset(&p);
    rpc_pack_json(&p, "[\"echo_async\", {\"text\": \"bg\", \"steps\": 2, "
                      "\"delay_ms\": 20}]");
    th_rpc_pack_request(&in, 3, "tools.call", p.data, p.len);
    th_rpc_pack_request(&in, 4, "tools.list", NULL, 0);
    th_buf_destroy(&p);
    CU_ASSERT(write(s.in_fd, in.data, in.len) == (ssize_t)in.len);
    th_buf_destroy(&in);
    /* End of input: answer what is in flight, then exit 0. */
    close(s.in_fd);
    s.in_fd = -1;
    rpc_raw w = {.fd = s.out_fd};
    th_rpc_reader_init(&w.rd, 64 << 20);
    msgpack_unpacked_init(&w.msg);
    bool got[5] = {0};
    bool done = false;
    const msgpack_object *m;
    while ((m = rpc_raw_next(&w, rpc_wait_ms())) != NULL) {
        uint64_t kind = m->via.array.ptr[0].via.u64;
        if (kind == 1 && m->via.array.ptr[1].via.u64 <= 4) {
            uint64_t id = m->via.array.ptr[1].via.u64;
            got[id] = true;
            CU_ASSERT(m->via.array.ptr[2].type == MSGPACK_OBJECT_NIL);
            if (id == 2)
                CU_ASSERT(rpc_stdout_is(&m->via.array.ptr[3], "over stdio"));
        } else if (kind == 2 &&
                   th_rpc_obj_streq(&m->via.array.ptr[1], "task.done")) {
            done = rpc_stdout_is(&m->via.array.ptr[2].via.array.ptr[1], "bg");
        }
    }
    /* Every byte on stdout was a frame (the reader did not fail). */
    CU_ASSERT(!w.rd.failed && th_rpc_reader_pending(&w.rd) == 0);
    CU_ASSERT(got[1] && got[2] && got[3] && got[4]);
    CU_ASSERT(done);
    msgpack_unpacked_destroy(&w.msg);
    th_rpc_reader_destroy(&w.rd);
    CU_ASSERT_EQUAL(rpc_srv_wait(&s), 0);
    CU_ASSERT(rpc_log_has(&s, "end of input"));
    rpc_srv_free(&s);
}

/* Garbage on stdin ends the one session, and with it the server. */
static void test_stdio_bad_input(void)
{
    rpc_srv s;
    rpc_opts o = {.stdio = true};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_buf in = TH_BUF_INIT;
    th_rpc_pack_request(&in, 1, "host.ping", NULL, 0);
    const uint8_t bad[] = {0x94, 0x00, 0x02, 0xc1};
    th_buf_append(&in, bad, sizeof bad);
    CU_ASSERT(write(s.in_fd, in.data, in.len) == (ssize_t)in.len);
    th_buf_destroy(&in);
    rpc_raw w = {.fd = s.out_fd};
    th_rpc_reader_init(&w.rd, 1 << 20);
    msgpack_unpacked_init(&w.msg);
    const msgpack_object *m = rpc_raw_next(&w, rpc_wait_ms());
    CU_ASSERT(m && m->via.array.ptr[1].via.u64 == 1);
    CU_ASSERT(rpc_raw_next(&w, rpc_wait_ms()) == NULL); /* then EOF */
    CU_ASSERT(!w.rd.failed && th_rpc_reader_pending(&w.rd) == 0);
    msgpack_unpacked_destroy(&w.msg);
    th_rpc_reader_destroy(&w.rd);
    CU_ASSERT_EQUAL(rpc_srv_wait(&s), 0);
    CU_ASSERT(rpc_log_has(&s, "not msgpack"));
    rpc_srv_free(&s);
}

/* stdin a regular file or /dev/null (epoll refuses both): read all the
 * same, no abort (it used to end in SIGABRT, status 134). */
static void stdio_from(const char *dir, const char *cfg, const char *in_path,
                       th_test_run *r)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "exec '%s' serve --stdio -c '%s' < '%s' 2>>'%s/serve.log'",
             rpc_server_bin(), cfg, in_path, dir);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    CU_ASSERT_EQUAL(th_test_run_argv(argv, NULL, 30, 0, r), 0);
}

static void test_stdio_file_input(void)
{
    rpc_srv s;
    memset(&s, 0, sizeof s);
    s.in_fd = s.out_fd = -1;
    s.dir = th_test_tmpdir();
    rpc_write_config(&s, NULL);
    th_test_run r;
    stdio_from(s.dir, s.cfg, "/dev/null", &r);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_EQUAL(r.out_len, 0);
    th_test_run_free(&r);

    th_buf in = TH_BUF_INIT, p = TH_BUF_INIT;
    th_rpc_pack_request(&in, 1, "host.ping", NULL, 0);
    rpc_pack_json(&p, "[\"echo\", {\"text\": \"from a file\"}]");
    th_rpc_pack_request(&in, 2, "tools.call", p.data, p.len);
    th_buf_destroy(&p);
    char *path = th_test_write_file(s.dir, "in.bin", (const char *)in.data,
                                    in.len);
    th_buf_destroy(&in);
    stdio_from(s.dir, s.cfg, path, &r);
    CU_ASSERT_EQUAL(r.status, 0);
    th_rpc_reader rd;
    th_rpc_reader_init(&rd, 1 << 20);
    msgpack_unpacked msg;
    msgpack_unpacked_init(&msg);
    th_rpc_reader_feed(&rd, r.out, r.out_len);
    bool got[3] = {0};
    th_error err;
    while (th_rpc_reader_next(&rd, &msg, &err) > 0) {
        const msgpack_object *m = &msg.data;
        if (m->via.array.ptr[0].via.u64 == 1 &&
            m->via.array.ptr[1].via.u64 <= 2) {
            uint64_t id = m->via.array.ptr[1].via.u64;
            got[id] = m->via.array.ptr[2].type == MSGPACK_OBJECT_NIL;
            if (id == 2)
                CU_ASSERT(rpc_stdout_is(&m->via.array.ptr[3], "from a file"));
        }
    }
    CU_ASSERT(got[1] && got[2]);
    msgpack_unpacked_destroy(&msg);
    th_rpc_reader_destroy(&rd);
    th_test_run_free(&r);
    free(path);
    s.reaped = true;
    rpc_srv_free(&s);
}

/* ---- a client not written in C ---------------------------------------- */

static void test_python_interop(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    char *argv[] = {"/usr/bin/python3",
                    (char *)th_test_source_path(
                        "tests/integration/rpc_interop.py"),
                    s.sock, NULL};
    th_test_run run;
    th_test_run_argv(argv, NULL, 60, 0, &run);
    CU_ASSERT_EQUAL(run.status, 0);
    CU_ASSERT(strstr(run.out, "interop: ok") != NULL);
    if (run.status != 0)
        fprintf(stderr, "\n%s%s\n", run.out, run.err);
    th_test_run_free(&run);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- the listen address --------------------------------------------------- */

static void test_socket_file(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    /* A second host on the same live socket is refused. */
    rpc_srv s2;
    rpc_opts o = {.sock = s.sock, .no_wait = true};
    CU_ASSERT_FATAL(rpc_srv_start(&s2, &o) == 0);
    CU_ASSERT(rpc_srv_wait(&s2) != 0);
    CU_ASSERT(rpc_log_has(&s2, "another host"));
    rpc_srv_free(&s2);
    CU_ASSERT(rpc_alive(&s));
    /* SIGKILL leaves a stale socket file: the next host replaces it. */
    kill(s.pid, SIGKILL);
    rpc_srv_wait(&s);
    CU_ASSERT(access(s.sock, F_OK) == 0);
    o.no_wait = false;
    /* ... with the configured group and mode */
    struct group *gr = getgrnam("nogroup");
    char extra[128];
    snprintf(extra, sizeof extra, "  socket_group: \"%s\"\n",
             gr ? "nogroup" : "0");
    o.host_extra = extra;
    o.socket_mode = "0660";
    CU_ASSERT_FATAL(rpc_srv_start(&s2, &o) == 0);
    struct stat st;
    CU_ASSERT(stat(s2.sock, &st) == 0 && (st.st_mode & 0777) == 0660 &&
              st.st_gid == (gr ? gr->gr_gid : 0));
    CU_ASSERT(rpc_alive(&s2));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s2, SIGINT), 0);
    rpc_srv_free(&s2);
    rpc_srv_free(&s);
}

void th_suite_rpc(void)
{
    CU_pSuite s = CU_add_suite("rpc", NULL, NULL);
    CU_add_test(s, "methods", test_methods);
    CU_add_test(s, "shapes_raw", test_shapes_raw);
    CU_add_test(s, "async_progress", test_async_progress);
    CU_add_test(s, "toolset_task_result", test_toolset_task_result);
    CU_add_test(s, "client_cancel", test_client_cancel);
    CU_add_test(s, "pipelining", test_pipelining);
    CU_add_test(s, "permission", test_permission);
    CU_add_test(s, "client_ask", test_client_ask);
    CU_add_test(s, "client_ask_isolated", test_client_ask_isolated);
    CU_add_test(s, "access_control", test_access_control);
    CU_add_test(s, "disconnect_mid_call", test_disconnect_mid_call);
    CU_add_test(s, "sigterm_in_flight", test_sigterm_in_flight);
    CU_add_test(s, "bin_strings", test_bin_strings);
    CU_add_test(s, "stdio", test_stdio);
    CU_add_test(s, "stdio_bad_input", test_stdio_bad_input);
    CU_add_test(s, "stdio_file_input", test_stdio_file_input);
    CU_add_test(s, "python_interop", test_python_interop);
    CU_add_test(s, "socket_file", test_socket_file);
}
