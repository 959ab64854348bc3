/* test_att36.c - attacks on busy polling: the mcp plugin's callers that
 * read a stdio server's output for a moment (mcpsrc_busy_poll, the reader
 * parked meanwhile) and the MCP stdio front's loop that spins for input
 * (host.busy_poll_us).  The server is tests/mcp/att36_server.mjs; its
 * servers poll for 10 ms (the most), so that most calls are busy-polled.
 *
 * partial_lines: an answer in two writes 30 ms apart (past the poll), in
 *   3-byte writes, ending in CR LF, and an answer behind 5,000 progress
 *   notifications all end right.
 * unasked: with the reader parked, list_changed makes the host list
 *   again, the server's ping, roots/list and sampling are answered, a
 *   flood of 100,000 log notifications with no call in flight is read to
 *   its end, a flood on stderr does not stop the call.
 * stall_holds_no_front: a server that asks the host for pings while it
 *   does not read its stdin must not hold the thread of the front that
 *   sent its call (the RPC loop): another client is served meanwhile.
 * lifecycle: a server that exits or goes over max_message while its
 *   call is busy-polled: the call fails, the server comes back; a call
 *   cancelled (tools.cancel) or past the server's timeout ends, the
 *   server is told; a wrong id answer first.
 * concurrency: max_concurrency 1, a pipelined client and a sequential
 *   one at once (calls wait for the slot, answers out of order): all end.
 * sigterm: the host stopped (SIGTERM) during steady busy-polled calls
 *   exits 0.
 * reload_steady: the plugin loaded again (its server listed a new tool)
 *   while a client calls it one call after another: every call answered.
 * stdio_front: `toolhost mcp` with the att36 server, input from a pipe
 *   and from a regular file, host.busy_poll_us 0, 300 and 10000: every
 *   call answered, exit 0 at the end of input; out-of-range values (and
 *   busy_poll_us on an HTTP server) are config errors naming the key.
 * stdio_paced: a client that sends one message per 250 us: every call
 *   answered; SIGTERM half way: exit 0.
 * stdio_cancel: notifications/cancelled for a call just busy-polled ends
 *   it (the server told), nothing left for the shutdown grace. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/th_test.h"
#include "test_rpc_harness.h"

static bool have_node(void)
{
    return th_test_shell_ok("command -v node >/dev/null 2>&1");
}

#define NEED_NODE()                                                           \
    do {                                                                      \
        if (!have_node())                                                     \
            TH_SKIP("node is not installed: run scripts/install-deps");       \
    } while (0)

#define TOOLS(p)                                                              \
    "[" p "_ok, " p "_half, " p "_tiny, " p "_crlf, " p "_progress, " p      \
    "_pingstall, " p "_changed, " p "_ask, " p "_logflood, " p               \
    "_errflood, " p "_exit, " p "_huge, " p "_silent, " p "_wrongid, " p     \
    "_slow]"

/* Servers a (busy polling 10 ms), b (the same, timeout 300ms) and c
 * (max_concurrency 1, max_waiting 64), all att36_server.mjs. */
static char *state_dir; /* the server's: the file "changed" */

static int att_start(rpc_srv *s, const char *mcp_extra)
{
    static char plugins[4096];
    free(state_dir);
    state_dir = th_test_tmpdir();
    const char *js = th_test_source_path("tests/mcp/att36_server.mjs");
    snprintf(plugins, sizeof plugins,
             "  - name: mcp\n"
             "    path: %s/plugins/mcp.so\n"
             "    config:\n"
             "      restart_initial: 50ms\n"
             "      max_message: 1048576\n"
             "      write_timeout: 60s\n"
             "%s"
             "      servers:\n"
             "        - name: a\n"
             "          command: [node, %s, %s]\n"
             "          busy_poll_us: 10000\n"
             "        - name: b\n"
             "          command: [node, %s, %s]\n"
             "          busy_poll_us: 10000\n"
             "          timeout: 300ms\n"
             "        - name: c\n"
             "          command: [node, %s, %s]\n"
             "          busy_poll_us: 10000\n"
             "          max_concurrency: 1\n"
             "          max_waiting: 64\n",
             TH_BUILD_DIR, mcp_extra ? mcp_extra : "", js, state_dir, js,
             state_dir, js, state_dir);
    rpc_opts o = {.plugins_extra = plugins,
                  .public_extra = "  - name: src\n"
                                  "    tools: [\"*\"]\n"};
    return rpc_srv_start(s, &o);
}

/* tools.call of `tool` with `args` (JSON): its stdout is `want`. */
static bool call_is(th_rpc_client *c, const char *tool, const char *args,
                    const char *want)
{
    char p[512];
    snprintf(p, sizeof p, "[\"%s\", %s]", tool, args ? args : "{}");
    rpc_res r;
    if (rpc_call(c, "tools.call", p, &r) != 0)
        return false;
    /* a call that reports progress may become a task: its result */
    const msgpack_object *task = r.res ? th_rpc_map_get(r.res, "task_id")
                                       : NULL;
    if (task && task->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        snprintf(p, sizeof p, "[%llu]", (unsigned long long)task->via.u64);
        for (int64_t end = rpc_now_ms() + rpc_wait_ms();
             r.res && th_rpc_map_get(r.res, "task_id") &&
             rpc_now_ms() < end;) {
            rpc_res_free(&r);
            if (rpc_call(c, "tasks.result", p, &r) != 0)
                return false;
            if (r.res && th_rpc_map_get(r.res, "task_id"))
                usleep(10000); /* running: asked again */
        }
    }
    bool ok = r.res && rpc_stdout_is(r.res, want);
    if (!ok) {
        fprintf(stderr, "\n%s: not '%s': ", tool, want);
        if (r.res)
            msgpack_object_print(stderr, *r.res);
        fprintf(stderr, "\n");
    }
    rpc_res_free(&r);
    return ok;
}

/* tools.call of `tool` (no arguments): the pid of the server that
 * answered it ok, or 0. */
static uint64_t call_pid(th_rpc_client *c, const char *tool)
{
    char p[128];
    snprintf(p, sizeof p, "[\"%s\", {}]", tool);
    rpc_res r;
    if (rpc_call(c, "tools.call", p, &r) != 0)
        return 0;
    const msgpack_object *pid =
        r.res && rpc_ok(r.res)
            ? th_rpc_map_get(th_rpc_map_get(r.res, "meta"), "server_pid")
            : NULL;
    uint64_t n = pid && pid->type == MSGPACK_OBJECT_POSITIVE_INTEGER
                     ? pid->via.u64
                     : 0;
    rpc_res_free(&r);
    return n;
}

/* Calls `tool` until it answers ok (the server back after a restart). */
static bool back_up(th_rpc_client *c, const char *tool)
{
    for (int64_t end = rpc_now_ms() + rpc_wait_ms(); rpc_now_ms() < end;) {
        char p[128];
        snprintf(p, sizeof p, "[\"%s\", {}]", tool);
        rpc_res r;
        if (rpc_call(c, "tools.call", p, &r) != 0)
            return false;
        bool ok = r.res && rpc_ok(r.res);
        rpc_res_free(&r);
        if (ok)
            return true;
        usleep(20000); /* the restart's back-off */
    }
    return false;
}

static void att_stop(rpc_srv *s)
{
    CU_ASSERT_EQUAL(rpc_srv_stop(s, SIGTERM), 0);
    rpc_srv_free(s);
    th_test_rmtree(state_dir);
    free(state_dir);
    state_dir = NULL;
}

static void test_partial_lines(void)
{
    NEED_NODE();
    rpc_srv s;
    CU_ASSERT_FATAL(att_start(&s, NULL) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    for (int i = 0; i < 5; i++) {
        CU_ASSERT(call_is(c, "a_half", NULL, "half"));
        CU_ASSERT(call_is(c, "a_tiny", NULL, "tiny"));
        CU_ASSERT(call_is(c, "a_crlf", NULL, "crlf"));
        CU_ASSERT(call_is(c, "a_progress", NULL, "progressed"));
        rpc_res r;
        CU_ASSERT_FATAL(rpc_call(c, "tools.call", "[\"a_ok\", {}]", &r) == 0);
        CU_ASSERT(r.res && rpc_ok(r.res));
        rpc_res_free(&r);
    }
    th_rpc_client_close(c);
    att_stop(&s);
}

/* Whether tools.list has `name`. */
static bool listed(th_rpc_client *c, const char *name)
{
    rpc_res r;
    if (rpc_call(c, "tools.list", "[]", &r) != 0)
        return false;
    bool has = r.res && rpc_find_tool(r.res, name) != NULL;
    rpc_res_free(&r);
    return has;
}

static void test_unasked(void)
{
    NEED_NODE();
    rpc_srv s;
    CU_ASSERT_FATAL(att_start(&s, NULL) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    /* a call just busy-polled: the reader parks */
    CU_ASSERT(call_is(c, "a_changed", NULL, "changed"));
    bool added = false;
    for (int64_t end = rpc_now_ms() + rpc_wait_ms();
         !added && rpc_now_ms() < end;) {
        added = listed(c, "a_added");
        if (!added)
            usleep(20000); /* the re-listing and the reload it asks */
    }
    CU_ASSERT(added);
    CU_ASSERT(call_is(c, "a_added", NULL, "added"));
    /* (the reload the new list asked for started the server anew) */
    uint64_t pid = call_pid(c, "a_ok");
    CU_ASSERT(pid > 0);
    CU_ASSERT(call_is(c, "a_ask", NULL, "ask"));
    CU_ASSERT(rpc_log_wait(&s, "answer ask-ping ok", rpc_wait_ms()));
    CU_ASSERT(rpc_log_wait(&s, "answer ask-roots error", rpc_wait_ms()));
    CU_ASSERT(rpc_log_wait(&s, "answer ask-sampling error", rpc_wait_ms()));
    /* 100,000 notifications, none in flight: read to the end (the
     * server logs "logflood done" once the last write drained) */
    CU_ASSERT(call_is(c, "a_logflood", NULL, "flooding"));
    CU_ASSERT(rpc_log_wait(&s, "logflood done", rpc_wait_ms()));
    CU_ASSERT(call_is(c, "a_errflood", NULL, "errflooded"));
    /* the same process: not killed for the floods */
    CU_ASSERT_EQUAL(call_pid(c, "a_ok"), pid);
    th_rpc_client_close(c);
    att_stop(&s);
}

static void test_stall_holds_no_front(void)
{
    NEED_NODE();
    rpc_srv s;
    CU_ASSERT_FATAL(att_start(&s, NULL) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(call_is(c, "a_ok", NULL, "ok 1"));
    char flag[600], args[800];
    snprintf(flag, sizeof flag, "%s/go", s.dir);
    snprintf(args, sizeof args, "[\"a_pingstall\", {\"flag\": \"%s\"}]",
             flag);
    rpc_raw a, b;
    CU_ASSERT_FATAL(rpc_raw_open(&a, &s) == 0);
    CU_ASSERT_FATAL(rpc_raw_open(&b, &s) == 0);
    rpc_raw_request(&a, 1, "tools.call", args);
    /* the host's pongs fill the server's stdin: the thread answering its
     * pings waits (write_timeout, 60s); the RPC front serves b meanwhile */
    char pinged[620];
    snprintf(pinged, sizeof pinged, "%s.pinged", flag);
    for (int64_t end = rpc_now_ms() + rpc_wait_ms();
         access(pinged, F_OK) != 0 && rpc_now_ms() < end;)
        usleep(5000); /* polls the server's mark (pings written) */
    for (uint64_t id = 1; id <= 3; id++) {
        rpc_raw_request(&b, id, "tools.call", "[\"echo\", {\"text\": \"b\"}]");
        const msgpack_object *m = rpc_raw_response(&b, id, rpc_wait_ms());
        CU_ASSERT(m && m->via.array.size == 4 &&
                  rpc_stdout_is(&m->via.array.ptr[3], "b"));
        if (!m)
            break;
    }
    /* the call is still waiting */
    CU_ASSERT(rpc_raw_response(&a, 1, 0) == NULL);
    free(th_test_write_file(s.dir, "go", "", 0));
    const msgpack_object *m = rpc_raw_response(&a, 1, rpc_wait_ms());
    const msgpack_object *out =
        m && m->via.array.size == 4 ? th_rpc_map_get(&m->via.array.ptr[3],
                                                     "stdout")
                                    : NULL;
    CU_ASSERT(out && out->type == MSGPACK_OBJECT_STR &&
              out->via.str.size > 8 &&
              !memcmp(out->via.str.ptr, "stalled ", 8));
    rpc_raw_close(&a);
    rpc_raw_close(&b);
    CU_ASSERT(call_is(c, "a_ok", NULL, "ok 3"));
    th_rpc_client_close(c);
    att_stop(&s);
}

static void test_lifecycle(void)
{
    NEED_NODE();
    rpc_srv s;
    CU_ASSERT_FATAL(att_start(&s, NULL) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT(call_is(c, "a_half", NULL, "half"));
        rpc_res r;
        CU_ASSERT_FATAL(rpc_call(c, "tools.call", "[\"a_exit\", {}]", &r) ==
                        0);
        CU_ASSERT(r.res && rpc_tool_error_is(r.res, "unavailable"));
        rpc_res_free(&r);
        CU_ASSERT(back_up(c, "a_ok"));
        CU_ASSERT_FATAL(rpc_call(c, "tools.call", "[\"a_huge\", {}]", &r) ==
                        0);
        CU_ASSERT(r.res && !rpc_ok(r.res));
        rpc_res_free(&r);
        CU_ASSERT(back_up(c, "a_ok"));
    }
    CU_ASSERT(rpc_log_count(&s, "over max_message") >= 1);
    /* cancelled while busy-polled (tools.cancel): the server is told */
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call", "[\"a_silent\", {}]");
    CU_ASSERT(rpc_wait_running(&s, 1));
    rpc_raw_request(&w, 2, "tools.cancel", "[1]");
    const msgpack_object *m = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT(m && m->via.array.size == 4 &&
              rpc_tool_error_is(&m->via.array.ptr[3], "cancelled"));
    rpc_raw_close(&w);
    CU_ASSERT(rpc_log_wait(&s, "stderr: cancelled", rpc_wait_ms()));
    /* past the server's timeout (300 ms) */
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call", "[\"b_silent\", {}]");
    m = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT(m && m->via.array.size == 4 &&
              rpc_tool_error_is(&m->via.array.ptr[3], "backend_timeout"));
    rpc_raw_close(&w);
    CU_ASSERT(call_is(c, "b_wrongid", NULL, "right id"));
    CU_ASSERT(call_is(c, "a_wrongid", NULL, "right id"));
    CU_ASSERT(call_is(c, "a_half", NULL, "half"));
    th_rpc_client_close(c);
    att_stop(&s);
}

static void test_concurrency(void)
{
    NEED_NODE();
    rpc_srv s;
    CU_ASSERT_FATAL(att_start(&s, NULL) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(call_is(c, "c_ok", NULL, "ok 1"));
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    enum { N = 24 };
    for (uint64_t id = 1; id <= N; id++)
        rpc_raw_request(&w, id, "tools.call",
                        id % 3 == 0   ? "[\"c_slow\", {}]"
                        : id % 3 == 1 ? "[\"c_half\", {}]"
                                      : "[\"c_ok\", {}]");
    /* the sequential one meanwhile, on the same server and on a */
    for (int i = 0; i < 10; i++) {
        CU_ASSERT(call_is(c, "c_tiny", NULL, "tiny"));
        CU_ASSERT(call_is(c, "a_half", NULL, "half"));
    }
    int got = 0;
    for (uint64_t id = 1; id <= N; id++) {
        const msgpack_object *m = rpc_raw_response(&w, id, rpc_wait_ms());
        if (m && m->via.array.size == 4 && rpc_ok(&m->via.array.ptr[3]))
            got++;
    }
    CU_ASSERT_EQUAL(got, N);
    rpc_raw_close(&w);
    /* pipelined on a: answers out of order (slow, then ok) */
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    for (uint64_t id = 1; id <= 10; id++)
        rpc_raw_request(&w, id, "tools.call",
                        id % 2 ? "[\"a_slow\", {}]" : "[\"a_ok\", {}]");
    got = 0;
    for (uint64_t id = 1; id <= 10; id++) {
        const msgpack_object *m = rpc_raw_response(&w, id, rpc_wait_ms());
        if (m && m->via.array.size == 4 && rpc_ok(&m->via.array.ptr[3]))
            got++;
    }
    CU_ASSERT_EQUAL(got, 10);
    rpc_raw_close(&w);
    th_rpc_client_close(c);
    att_stop(&s);
}

static void test_sigterm(void)
{
    NEED_NODE();
    rpc_srv s;
    CU_ASSERT_FATAL(att_start(&s, NULL) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    /* one at a time, each sent when the last answered; SIGTERM after 20 */
    for (uint64_t id = 1; id <= 20; id++) {
        rpc_raw_request(&w, id, "tools.call", "[\"a_half\", {}]");
        if (id < 20)
            CU_ASSERT(rpc_raw_response(&w, id, rpc_wait_ms()) != NULL);
    }
    rpc_raw_close(&w);
    att_stop(&s);
}

typedef struct steady {
    rpc_srv *s;
    volatile int stop;
    int calls, ok, answered;
    char last[64];
} steady;

/* One call after another (a_ok, busy-polled) until told to stop. */
static void *steady_main(void *arg)
{
    steady *st = arg;
    th_rpc_client *c = rpc_connect(st->s);
    if (!c)
        return NULL;
    while (!__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE)) {
        rpc_res r;
        st->calls++;
        if (rpc_call(c, "tools.call", "[\"a_ok\", {}]", &r) != 0)
            break;
        __atomic_add_fetch(&st->answered, 1, __ATOMIC_RELEASE);
        bool ok = r.res && rpc_ok(r.res);
        st->ok += ok;
        const msgpack_object *e =
            r.res ? th_rpc_map_get(r.res, "error") : NULL;
        snprintf(st->last, sizeof st->last, "%s",
                 ok ? "ok" : e && e->type == MSGPACK_OBJECT_STR ? "error"
                                                                : "?");
        rpc_res_free(&r);
    }
    th_rpc_client_close(c);
    return NULL;
}

/* The mcp plugin loaded again (its server listed a new tool) while a
 * client calls it one call after another: every call is answered, and
 * the calls after the reload are fine. */
static void test_reload_steady(void)
{
    NEED_NODE();
    rpc_srv s;
    CU_ASSERT_FATAL(att_start(&s, NULL) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    steady st = {.s = &s};
    pthread_t t;
    CU_ASSERT_FATAL(pthread_create(&t, NULL, steady_main, &st) == 0);
    CU_ASSERT(call_is(c, "a_changed", NULL, "changed"));
    bool added = false;
    for (int64_t end = rpc_now_ms() + rpc_wait_ms();
         !added && rpc_now_ms() < end;) {
        added = listed(c, "a_added");
        if (!added)
            usleep(20000); /* the re-listing and the reload it asks */
    }
    CU_ASSERT(added);
    /* 20 more calls of the thread after the reload */
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    int after = __atomic_load_n(&st.answered, __ATOMIC_ACQUIRE);
    while (__atomic_load_n(&st.answered, __ATOMIC_ACQUIRE) < after + 20 &&
           rpc_now_ms() < end)
        usleep(10000); /* polls the thread's count, within the budget */
    __atomic_store_n(&st.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    CU_ASSERT(st.answered >= after + 20);
    CU_ASSERT_EQUAL(st.answered, st.calls);
    CU_ASSERT_STRING_EQUAL(st.last, "ok");
    fprintf(stderr, "\n(reload_steady: %d calls, %d ok)\n", st.calls, st.ok);
    CU_ASSERT(call_is(c, "a_added", NULL, "added"));
    th_rpc_client_close(c);
    att_stop(&s);
}

/* ---- the MCP stdio front --------------------------------------------- */

static char *stdio_config(const char *dir, const char *host_bp,
                          const char *srv_bp)
{
    char text[2048];
    snprintf(text, sizeof text,
             "host:\n"
             "  shutdown_grace: 2s\n"
             "%s%s%s"
             "plugins:\n"
             "  - name: mcp\n"
             "    path: %s\n"
             "    config:\n"
             "      servers:\n"
             "        - name: a\n"
             "          command: [node, %s]\n"
             "%s%s%s"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: " TOOLS("a") "\n",
             host_bp ? "  busy_poll_us: " : "", host_bp ? host_bp : "",
             host_bp ? "\n" : "", th_test_build_path("plugins/mcp.so"),
             th_test_source_path("tests/mcp/att36_server.mjs"),
             srv_bp ? "          busy_poll_us: " : "", srv_bp ? srv_bp : "",
             srv_bp ? "\n" : "");
    return th_test_write_file(dir, "c.yaml", text, (size_t)-1);
}

#define INIT                                                                  \
    "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"   \
    "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"                \
    "\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n"                  \
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"

/* The input: INIT and n calls (ids 1..n) of the tools in turn. */
static char *stdio_input(int n)
{
    static const char *const tools[] = {"a_ok", "a_half", "a_tiny",
                                        "a_crlf", "a_wrongid"};
    size_t cap = 1024 + (size_t)n * 200, len = 0;
    char *in = malloc(cap);
    len += (size_t)snprintf(in, cap, "%s", INIT);
    for (int i = 1; i <= n; i++)
        len += (size_t)snprintf(
            in + len, cap - len,
            "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\","
            "\"params\":{\"name\":\"%s\",\"arguments\":{}}}\n",
            i, tools[i % 5]);
    return in;
}

/* Every id 1..n answered without error in `out` (lines of JSON). */
static int answered(const char *out, int n)
{
    int ok = 0;
    char *copy = strdup(out ? out : ""), *save = NULL;
    for (char *l = strtok_r(copy, "\n", &save); l;
         l = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(l, 0, NULL);
        json_t *id = json_object_get(j, "id");
        json_t *r = json_object_get(j, "result");
        if (json_is_integer(id) && json_integer_value(id) >= 1 &&
            json_integer_value(id) <= n && r &&
            !json_is_true(json_object_get(r, "isError")))
            ok++;
        json_decref(j);
    }
    free(copy);
    return ok;
}

static void test_stdio_front(void)
{
    NEED_NODE();
    th_test_timeout(getenv("TH_VALGRIND") ? 600 : 200);
    char *dir = th_test_tmpdir();
    enum { N = 40 };
    char *in = stdio_input(N);
    char *file = th_test_write_file(dir, "in.txt", in, (size_t)-1);
    const char *bps[] = {"0", NULL, "10000"};
    for (int i = 0; i < 3; i++) {
        char *cfg = stdio_config(dir, bps[i], i == 0 ? "0" : "10000");
        /* from a pipe (all at once, then the end of input) */
        th_test_run r;
        char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c",
                        cfg, NULL};
        CU_ASSERT_EQUAL(th_test_run_argv(argv, in, 60, 1, &r), 0);
        CU_ASSERT_EQUAL(r.status, 0);
        CU_ASSERT_EQUAL(answered(r.out, N), N);
        th_test_run_free(&r);
        /* from a regular file (the relay) */
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "exec '%s' mcp -c '%s' < '%s'",
                 th_test_build_path("toolhost"), cfg, file);
        char *sh[] = {"/bin/sh", "-c", cmd, NULL};
        CU_ASSERT_EQUAL(th_test_run_argv(sh, NULL, 60, 1, &r), 0);
        CU_ASSERT_EQUAL(r.status, 0);
        CU_ASSERT_EQUAL(answered(r.out, N), N);
        th_test_run_free(&r);
        free(cfg);
    }
    /* out of range: config errors naming the key */
    const char *bad[][2] = {{"10001", NULL}, {"-1", NULL}, {"x", NULL},
                            {NULL, "10001"}, {NULL, "-1"}, {NULL, "\"x\""}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *cfg = stdio_config(dir, bad[i][0], bad[i][1]);
        th_test_run r;
        char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c",
                        cfg, NULL};
        CU_ASSERT_EQUAL(th_test_run_argv(argv, in, 60, 1, &r), 0);
        CU_ASSERT_NOT_EQUAL(r.status, 0);
        CU_ASSERT_PTR_NOT_NULL(r.err ? strstr(r.err, "busy_poll_us") : NULL);
        if (!r.err || !strstr(r.err, "busy_poll_us"))
            fprintf(stderr, "\nbad %zu: %s\n", i, r.err ? r.err : "");
        th_test_run_free(&r);
        free(cfg);
    }
    /* busy_poll_us on an HTTP server: refused, named */
    char text[1024];
    snprintf(text, sizeof text,
             "plugins:\n"
             "  - name: mcp\n"
             "    path: %s\n"
             "    config:\n"
             "      servers:\n"
             "        - name: h\n"
             "          url: http://127.0.0.1:9/mcp\n"
             "          busy_poll_us: 300\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [\"*\"]\n",
             th_test_build_path("plugins/mcp.so"));
    char *cfg = th_test_write_file(dir, "h.yaml", text, (size_t)-1);
    th_test_run r;
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c", cfg,
                    NULL};
    CU_ASSERT_EQUAL(th_test_run_argv(argv, in, 60, 1, &r), 0);
    CU_ASSERT_NOT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(r.err ? strstr(r.err, "busy_poll_us") : NULL);
    th_test_run_free(&r);
    free(cfg);
    free(file);
    free(in);
    th_test_rmtree(dir);
    free(dir);
}

/* `toolhost mcp` fed one message per 250 us (the spin catches the next
 * one, or backs off): n calls; with `term`, SIGTERM after half of them.
 * Its output is read all along.  Returns the calls answered; *status the
 * exit status. */
static int paced(const char *cfg, int n, bool term, int *status)
{
    int in[2], out[2];
    CU_ASSERT_FATAL(pipe(in) == 0 && pipe(out) == 0);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        execl(th_test_build_path("toolhost"), "toolhost", "mcp", "-c", cfg,
              (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    size_t cap = 1 << 20, got = 0;
    char *buf = malloc(cap);
    char line[512];
    int sent = -1; /* -1: INIT next */
    size_t loff = 0, llen = 0;
    int64_t end = rpc_now_ms() + rpc_wait_ms() * 2;
    bool in_open = true, termed = false;
    for (;;) {
        /* the calls once initialize is answered (the host serving) */
        bool ready = sent < 0 || (got && memchr(buf, '\n', got));
        if (in_open && llen == loff && ready) {
            if (sent < 0)
                llen = (size_t)snprintf(line, sizeof line, "%s", INIT);
            else if (sent < n)
                llen = (size_t)snprintf(
                    line, sizeof line,
                    "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":"
                    "\"tools/call\",\"params\":{\"name\":\"%s\","
                    "\"arguments\":{}}}\n",
                    sent + 1, sent % 2 ? "a_ok" : "a_crlf");
            loff = 0;
            if (sent >= n) {
                close(in[1]);
                in_open = false;
            }
            sent++;
            if (term && !termed && sent == n / 2) {
                kill(pid, SIGTERM);
                termed = true;
            }
        }
        if (in_open && loff < llen) {
            ssize_t w = write(in[1], line + loff, llen - loff);
            if (w > 0)
                loff += (size_t)w;
            else if (w < 0 && errno == EPIPE) {
                close(in[1]);
                in_open = false;
            }
            if (loff == llen)
                usleep(250); /* the pace of this client */
        }
        struct pollfd pf = {.fd = out[0], .events = POLLIN};
        if (poll(&pf, 1, in_open ? 0 : 100) > 0) {
            if (got + 65536 > cap)
                buf = realloc(buf, cap *= 2);
            ssize_t r = read(out[0], buf + got, 65536);
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        if (rpc_now_ms() > end)
            break;
    }
    buf[got] = '\0';
    if (in_open)
        close(in[1]);
    close(out[0]);
    int st = -1;
    bool gone = false;
    for (int64_t e = rpc_now_ms() + rpc_wait_ms(); rpc_now_ms() < e;) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            gone = true;
            break;
        }
        usleep(10000); /* polls the exit, within the budget */
    }
    if (!gone) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    *status = st;
    int ok = answered(buf, n);
    free(buf);
    return ok;
}

static void test_stdio_paced(void)
{
    NEED_NODE();
    th_test_timeout(getenv("TH_VALGRIND") ? 600 : 200);
    signal(SIGPIPE, SIG_IGN);
    char *dir = th_test_tmpdir();
    const char *bps[] = {"0", "300", "10000"};
    for (int i = 0; i < 3; i++) {
        char *cfg = stdio_config(dir, bps[i], i ? "300" : "0");
        int st = -1;
        CU_ASSERT_EQUAL(paced(cfg, 200, false, &st), 200);
        CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        /* SIGTERM half way: a clean exit; what was answered is whole */
        paced(cfg, 200, true, &st);
        CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fprintf(stderr, "\nSIGTERM, busy_poll_us %s: status %#x\n",
                    bps[i], st);
        free(cfg);
    }
    th_test_rmtree(dir);
    free(dir);
}

/* MCP notifications/cancelled for a call that the front's thread has
 * just busy-polled (a_silent, no answer): it ends at once, the server is
 * told, the next call is answered, and the end of input finds no call
 * left for the shutdown grace. */
static void test_stdio_cancel(void)
{
    NEED_NODE();
    char *dir = th_test_tmpdir();
    char *cfg = stdio_config(dir, "10000", "10000");
    const char *in =
        INIT "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"a_silent\",\"arguments\":{}}}\n"
             "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
             "\"params\":{\"requestId\":1}}\n"
             "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"a_ok\",\"arguments\":{}}}\n";
    th_test_run r;
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c", cfg,
                    NULL};
    CU_ASSERT_EQUAL(th_test_run_argv(argv, in, 60, 1, &r), 0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(r.out ? strstr(r.out, "\"text\":\"ok 2\"") : NULL);
    CU_ASSERT_PTR_NOT_NULL(r.err ? strstr(r.err, "stderr: cancelled") : NULL);
    CU_ASSERT_PTR_NULL(r.err ? strstr(r.err, "shutdown grace over") : NULL);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_att36(void)
{
    CU_pSuite s = CU_add_suite("att36", NULL, NULL);
    CU_add_test(s, "partial_lines", test_partial_lines);
    CU_add_test(s, "unasked", test_unasked);
    CU_add_test(s, "stall_holds_no_front", test_stall_holds_no_front);
    CU_add_test(s, "lifecycle", test_lifecycle);
    CU_add_test(s, "concurrency", test_concurrency);
    CU_add_test(s, "sigterm", test_sigterm);
    CU_add_test(s, "reload_steady", test_reload_steady);
    CU_add_test(s, "stdio_front", test_stdio_front);
    CU_add_test(s, "stdio_paced", test_stdio_paced);
    CU_add_test(s, "stdio_cancel", test_stdio_cancel);
}
