/* test_attack_round.c - attacks on the rate limits (rate.c) and on the MCP
 * front's shared session timer (mcp.c), against the real `toolhost serve`:
 * each test is a way a caller could get past a limit, or lock a caller out
 * for good, or bring the host down, and checks that it cannot.
 *
 *   slot_after_refusal   concurrent 1: calls admitted by the rate limits,
 *                        then refused by the tool's validation, give their
 *                        slot back (else three bad calls lock the caller
 *                        out for good);
 *   slot_after_busy      concurrent 3: calls admitted, then refused busy
 *                        (the queue full) give their slot back;
 *   slot_after_ask       concurrent 1: a call admitted, then waiting for
 *                        the client's permission answer, whose client
 *                        hangs up: its slot comes back;
 *   slot_after_hangup    concurrent 1: a task running when its client
 *                        hangs up is cancelled with the session, and the
 *                        slot comes back;
 *   hangup_flood         concurrent 2: 20 clients each send 30 calls and
 *                        hang up at once (the close racing admissions):
 *                        afterwards exactly two slots are free;
 *   nested_code_counts   calls a run_code script makes count in the
 *                        caller's buckets (no way around a limit by
 *                        calling through Lua); polling tasks.result and
 *                        tasks.list costs nothing;
 *   reload_keeps_holds   a reload that drops a rule while a call holds its
 *                        slot, then brings it back under its name: the
 *                        slot is still held (no fresh slot handed out),
 *                        and comes back when the call ends (no slot lost,
 *                        no count gone below zero);
 *   timer_churn          MCP HTTP sessions opened and closed by several
 *                        clients at once while reloads change the tool
 *                        list every few ms (deferred list_changed pending
 *                        in the shared timer): the host keeps serving and
 *                        exits cleanly (run under ASan for use after free);
 *                        then the same with no session staying, the last
 *                        one out joining the timer thread while others
 *                        start: no thread is left once all are gone.
 */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdatomic.h>

#include "common/th_http.h"
#include "integration/test_rpc_harness.h"

/* ---- rate limits ---------------------------------------------------------- */

#define ONE_AT_A_TIME                                                       \
    "rate_limits:\n"                                                        \
    "  - name: one_at_a_time\n"                                             \
    "    concurrent: 1\n"

/* The error code of the answer to a tools.call (raw message m), "" when
 * it is ok, "?" when there is no answer. */
static void raw_code(const msgpack_object *m, char *buf, size_t cap)
{
    snprintf(buf, cap, "?");
    if (!m || m->type != MSGPACK_OBJECT_ARRAY || m->via.array.size != 4)
        return;
    const msgpack_object *res = &m->via.array.ptr[3];
    if (res->type != MSGPACK_OBJECT_MAP)
        return;
    buf[0] = '\0';
    const msgpack_object *e = th_rpc_map_get(res, "error");
    const msgpack_object *c = e ? th_rpc_map_get(e, "code") : NULL;
    const char *p;
    size_t n;
    if (c && th_rpc_obj_str(c, &p, &n))
        snprintf(buf, cap, "%.*s", (int)n, p);
}

/* One tools.call on a client connection of its own: its error code. */
static void call_code(rpc_srv *s, const char *params, char *code,
                      size_t cap)
{
    rpc_raw w;
    snprintf(code, cap, "?");
    if (rpc_raw_open(&w, s) != 0)
        return;
    rpc_raw_request(&w, 1, "tools.call", params);
    raw_code(rpc_raw_response(&w, 1, rpc_wait_ms()), code, cap);
    rpc_raw_close(&w);
}

/* Calls echo until one passes (the slot came back): true when one did
 * within the budget. */
static bool echo_passes_soon(rpc_srv *s)
{
    char code[64] = "?";
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    do {
        call_code(s, "[\"echo\", {\"text\": \"again\"}]", code, sizeof code);
        if (strcmp(code, "rate_limited") != 0)
            break;
        struct timespec ts = {0, 5 * 1000000};
        nanosleep(&ts, NULL); /* a poll's pace, not a wait for an event */
    } while (rpc_now_ms() < end);
    if (strcmp(code, "") != 0)
        fprintf(stderr, "\n  echo still refused: '%s'\n", code);
    return strcmp(code, "") == 0;
}

/* Starts a long echo_async task on w (msgid id): true when it runs. */
static bool start_task(rpc_raw *w, uint64_t id, uint64_t *task)
{
    rpc_raw_request(w, id, "tools.call",
                    "[\"echo_async\", {\"text\": \"x\", \"steps\": 2, "
                    "\"delay_ms\": 600000}]");
    const msgpack_object *m = rpc_raw_response(w, id, rpc_wait_ms());
    if (!m)
        return false;
    const msgpack_object *ack = &m->via.array.ptr[3];
    const msgpack_object *st = th_rpc_map_get(ack, "status");
    const msgpack_object *t = th_rpc_map_get(ack, "task_id");
    if (!st || !th_rpc_obj_streq(st, "running") || !t)
        return false;
    *task = t->via.u64;
    return true;
}

static void test_slot_after_refusal(void)
{
    rpc_srv s;
    rpc_opts o = {.plugins_extra = ONE_AT_A_TIME};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    char code[64];
    /* echo_async's validate hook refuses a negative delay: after the
     * rate limits admitted the call */
    for (int i = 0; i < 3; i++) {
        call_code(&s,
                  "[\"echo_async\", {\"text\": \"x\", \"delay_ms\": -1}]",
                  code, sizeof code);
        CU_ASSERT(strcmp(code, "") != 0 && strcmp(code, "?") != 0 &&
                  strcmp(code, "rate_limited") != 0);
    }
    /* a call of a tool with arguments its schema refuses */
    for (int i = 0; i < 3; i++) {
        call_code(&s, "[\"echo\", {\"text\": 12}]", code, sizeof code);
        CU_ASSERT(strcmp(code, "") != 0 && strcmp(code, "?") != 0 &&
                  strcmp(code, "rate_limited") != 0);
    }
    CU_ASSERT(echo_passes_soon(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* Waits until host.stats says `n` calls wait in the queue. */
static bool wait_queued(rpc_srv *s, uint64_t n)
{
    th_rpc_client *c = rpc_connect(s);
    if (!c)
        return false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    uint64_t v;
    while (((v = rpc_mgr_stat(c, "queued")) == UINT64_MAX || v < n) &&
           rpc_now_ms() < end) {
        struct timespec ts = {0, 5 * 1000000};
        nanosleep(&ts, NULL); /* a poll's pace */
    }
    th_rpc_client_close(c);
    return v != UINT64_MAX && v >= n;
}

static void test_slot_after_busy(void)
{
    rpc_srv s;
    rpc_opts o = {.plugins_extra = "rate_limits:\n"
                                   "  - name: three\n"
                                   "    tools: [echo_async]\n"
                                   "    concurrent: 3\n",
                  .host_extra = "  async_workers: 1\n  queue_size: 1\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rpc_raw w, q;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    CU_ASSERT_FATAL(rpc_raw_open(&q, &s) == 0);
    uint64_t task;
    CU_ASSERT_FATAL(start_task(&w, 1, &task)); /* slot 1, the async worker */
    rpc_raw_request(&q, 1, "tools.call",
                    "[\"echo_async\", {\"text\": \"x\", \"steps\": 2, "
                    "\"delay_ms\": 600000}]"); /* slot 2, the queue */
    CU_ASSERT_FATAL(wait_queued(&s, 1));
    /* each further call is admitted (slot 3), then refused busy: the slot
     * comes back each time, so none is ever refused rate_limited */
    char code[64];
    for (int i = 0; i < 6; i++) {
        call_code(&s, "[\"echo_async\", {\"text\": \"x\"}]", code,
                  sizeof code);
        CU_ASSERT_STRING_EQUAL(code, "busy");
    }
    rpc_raw_close(&q);
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void test_slot_after_ask(void)
{
    char host[96];
    snprintf(host, sizeof host, "  permission_timeout: %ums\n",
             th_test_ms(600000));
    rpc_srv s;
    rpc_opts o = {.plugins_extra = "rate_limits:\n"
                                   "  - name: one_at_a_time\n"
                                   "    concurrent: 1\n",
                  .host_extra = host,
                  .public_extra = "    permissions:\n"
                                  "      rules:\n"
                                  "        - match: echo_async\n"
                                  "          action: ask\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call",
                    "[\"echo_async\", {\"text\": \"x\", \"steps\": 0}]");
    CU_ASSERT_FATAL(rpc_raw_host_request(&w, "permission.request",
                                         rpc_wait_ms()) != NULL);
    /* asked, holding the slot: another caller's call is refused */
    char code[64];
    call_code(&s, "[\"echo\", {\"text\": \"y\"}]", code, sizeof code);
    CU_ASSERT_STRING_EQUAL(code, "rate_limited");
    /* the asked client leaves without an answer */
    rpc_raw_close(&w);
    CU_ASSERT(echo_passes_soon(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void test_slot_after_hangup(void)
{
    rpc_srv s;
    rpc_opts o = {.plugins_extra = ONE_AT_A_TIME};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    for (int round = 0; round < 3; round++) {
        rpc_raw w;
        CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
        uint64_t task;
        CU_ASSERT_FATAL(start_task(&w, 1, &task));
        char code[64];
        call_code(&s, "[\"echo\", {\"text\": \"y\"}]", code, sizeof code);
        CU_ASSERT_STRING_EQUAL(code, "rate_limited");
        rpc_raw_close(&w); /* the task goes with the session */
        CU_ASSERT(echo_passes_soon(&s));
    }
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void test_hangup_flood(void)
{
    rpc_srv s;
    rpc_opts o = {.plugins_extra = "rate_limits:\n"
                                   "  - name: two_at_a_time\n"
                                   "    concurrent: 2\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    /* clients that send a burst of calls and hang up at once: their
     * session's close races the admission of calls still coming in */
    for (int round = 0; round < 20; round++) {
        rpc_raw w;
        CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
        for (uint64_t id = 1; id <= 30; id++)
            rpc_raw_request(&w, id, "tools.call",
                            id % 3 ? "[\"echo_async\", {\"text\": \"x\", "
                                     "\"steps\": 2, \"delay_ms\": 600000}]"
                                   : "[\"echo\", {\"text\": \"x\"}]");
        rpc_raw_close(&w);
    }
    CU_ASSERT(echo_passes_soon(&s));
    /* exactly two slots are free again: two tasks hold them, the next
     * call is refused (wait until the flood's sessions are all gone) */
    CU_ASSERT(rpc_wait_connections(&s, 0, rpc_wait_ms()));
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    uint64_t t1, t2;
    bool both = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    for (uint64_t id = 1; !both && rpc_now_ms() < end; id += 2) {
        if (!start_task(&w, id, &t1))
            continue; /* a flood call still ending: try again */
        both = start_task(&w, id + 1, &t2);
        if (!both) {
            char p[64];
            snprintf(p, sizeof p, "[%llu]", (unsigned long long)t1);
            rpc_raw_request(&w, 1000000 + id, "tasks.cancel", p);
            rpc_raw_response(&w, 1000000 + id, rpc_wait_ms());
            rpc_raw_notification(&w, "task.done", rpc_wait_ms());
        }
    }
    CU_ASSERT_FATAL(both);
    char code[64];
    call_code(&s, "[\"echo\", {\"text\": \"y\"}]", code, sizeof code);
    CU_ASSERT_STRING_EQUAL(code, "rate_limited");
    rpc_raw_close(&w);
    CU_ASSERT(echo_passes_soon(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void test_nested_code_counts(void)
{
    rpc_srv s;
    rpc_opts o = {.plugins_extra = "rate_limits:\n"
                                   "  - name: two_echoes\n"
                                   "    tools: [echo]\n"
                                   "    rate: 0.001\n"
                                   "    burst: 2\n",
                  .public_extra = "    run_code:\n"
                                  "      enabled: true\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    /* a task: polled many times, it costs no echo token (and no other) */
    uint64_t task;
    CU_ASSERT_FATAL(start_task(&w, 1, &task));
    char p[64];
    snprintf(p, sizeof p, "[%llu]", (unsigned long long)task);
    for (uint64_t id = 2; id < 12; id++) {
        rpc_raw_request(&w, id, id % 2 ? "tasks.list" : "tasks.result",
                        id % 2 ? "[]" : p);
        CU_ASSERT(rpc_raw_response(&w, id, rpc_wait_ms()) != NULL);
    }
    /* the script's two calls of echo take the burst */
    rpc_raw_request(&w, 20, "tools.call",
                    "[\"run_code\", {\"code\": \"print(tools.echo{text = "
                    "'a'}.stdout .. tools.echo{text = 'b'}.stdout)\"}]");
    const msgpack_object *m = rpc_raw_response(&w, 20, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT(rpc_stdout_is(&m->via.array.ptr[3], "ab\n") ||
              rpc_stdout_is(&m->via.array.ptr[3], "ab"));
    /* so the caller's own next call of echo is refused */
    char code[64];
    call_code(&s, "[\"echo\", {\"text\": \"c\"}]", code, sizeof code);
    CU_ASSERT_STRING_EQUAL(code, "rate_limited");
    /* and a script's third call is too: its error, not a call past it */
    rpc_raw_request(&w, 21, "tools.call",
                    "[\"run_code\", {\"code\": \"local r = tools.echo{text "
                    "= 'd'}; print(r.stdout or 'refused')\"}]");
    m = rpc_raw_response(&w, 21, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT(!rpc_stdout_is(&m->via.array.ptr[3], "d\n") &&
              !rpc_stdout_is(&m->via.array.ptr[3], "d"));
    rpc_raw_request(&w, 22, "tasks.cancel", p);
    CU_ASSERT(rpc_raw_response(&w, 22, rpc_wait_ms()) != NULL);
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* host.reload over a connection of its own: true when it took (else
 * its message on stderr). */
static bool reload_now(rpc_srv *s)
{
    th_rpc_client *c = rpc_connect(s);
    if (!c)
        return false;
    rpc_res r;
    bool ok = rpc_call(c, "host.reload", "[]", &r) == 0 && r.err == NULL &&
              r.res;
    const msgpack_object *v = ok ? th_rpc_map_get(r.res, "ok") : NULL;
    ok = v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
    if (!ok) {
        const msgpack_object *e = r.res ? th_rpc_map_get(r.res, "error")
                                        : NULL;
        const msgpack_object *m = e ? th_rpc_map_get(e, "message") : NULL;
        const char *p = "";
        size_t n = 0;
        if (m)
            th_rpc_obj_str(m, &p, &n);
        fprintf(stderr, "\n  reload failed: %.*s\n", (int)n, p);
    }
    rpc_res_free(&r);
    th_rpc_client_close(c);
    return ok;
}

/* Rewrites the server's config with the options o and reloads it. */
static bool reload_opts(rpc_srv *s, const rpc_opts *o)
{
    char *old = s->cfg;
    rpc_write_config(s, o);
    free(old);
    return reload_now(s);
}

/* The same with `rules` under plugins: (the rate limits). */
static bool reload_with(rpc_srv *s, const char *rules)
{
    rpc_opts o = {.plugins_extra = rules};
    return reload_opts(s, &o);
}

static void test_reload_keeps_holds(void)
{
    rpc_srv s;
    rpc_opts o = {.plugins_extra = ONE_AT_A_TIME};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    uint64_t task;
    CU_ASSERT_FATAL(start_task(&w, 1, &task));
    char code[64];
    /* the rule gone: nothing limits */
    CU_ASSERT_FATAL(reload_with(&s, ""));
    call_code(&s, "[\"echo\", {\"text\": \"y\"}]", code, sizeof code);
    CU_ASSERT_STRING_EQUAL(code, "");
    /* back under its name: the task still holds its slot */
    CU_ASSERT_FATAL(reload_with(&s, ONE_AT_A_TIME));
    call_code(&s, "[\"echo\", {\"text\": \"y\"}]", code, sizeof code);
    CU_ASSERT_STRING_EQUAL(code, "rate_limited");
    /* raised to 2 meanwhile: one more passes, and only one */
    CU_ASSERT_FATAL(reload_with(&s, "rate_limits:\n"
                                     "  - name: one_at_a_time\n"
                                     "    concurrent: 2\n"));
    uint64_t task2;
    CU_ASSERT_FATAL(start_task(&w, 2, &task2));
    call_code(&s, "[\"echo\", {\"text\": \"y\"}]", code, sizeof code);
    CU_ASSERT_STRING_EQUAL(code, "rate_limited");
    /* back to 1; both tasks end: the slots come back, none lost */
    CU_ASSERT_FATAL(reload_with(&s, ONE_AT_A_TIME));
    char p[64];
    uint64_t ids[2] = {task, task2};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "[%llu]", (unsigned long long)ids[i]);
        rpc_raw_request(&w, 10 + (uint64_t)i, "tasks.cancel", p);
        CU_ASSERT(rpc_raw_response(&w, 10 + (uint64_t)i, rpc_wait_ms()) !=
                  NULL);
    }
    CU_ASSERT(echo_passes_soon(&s));
    /* and exactly one slot: a task holds it, the next call is refused */
    uint64_t task3;
    CU_ASSERT_FATAL(start_task(&w, 20, &task3));
    call_code(&s, "[\"echo\", {\"text\": \"y\"}]", code, sizeof code);
    CU_ASSERT_STRING_EQUAL(code, "rate_limited");
    rpc_raw_close(&w);
    CU_ASSERT(echo_passes_soon(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- the MCP session timer ------------------------------------------------- */

#define TOKEN "attack-token-0123456789abcdef"
#define TOKEN_ENV "TH_ATTACK_TOKEN"
#define AUTH "Authorization: Bearer " TOKEN "\r\n"
#define INIT_BODY                                                             \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"  \
    "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"               \
    "\"clientInfo\":{\"name\":\"raw\",\"version\":\"1\"}}}"
#define MCP_SEC                                                               \
    "mcp:\n"                                                                  \
    "  tokens:\n"                                                             \
    "    - {user: attack, env: " TOKEN_ENV "}\n"

static atomic_int g_churning; /* client threads still at work */

typedef struct churn {
    unsigned port;
    int rounds;
    int opened; /* sessions that initialized */
    int failed; /* requests with no answer */
} churn;

/* A session: initialize, initialized, tools/list, DELETE; false when a
 * request got no answer (a 4xx/5xx is an answer: the host lives). */
static bool one_session(unsigned port, bool *opened)
{
    char *out = NULL;
    *opened = false;
    int st = th_test_http(port, "POST", "/mcp", AUTH, INIT_BODY,
                          rpc_wait_ms(), &out);
    char hdr[256] = "";
    const char *p = out ? strcasestr(out, "Mcp-Session-Id: ") : NULL;
    if (p) {
        p += 16;
        snprintf(hdr, sizeof hdr, AUTH "Mcp-Protocol-Version: 2025-06-18\r\n"
                 "Mcp-Session-Id: %.*s\r\n", (int)strcspn(p, "\r\n"), p);
    }
    free(out);
    if (st <= 0)
        return false;
    if (!hdr[0])
        return true;
    *opened = true;
    st = th_test_http(port, "POST", "/mcp", hdr,
                      "{\"jsonrpc\":\"2.0\",\"method\":"
                      "\"notifications/initialized\"}",
                      rpc_wait_ms(), &out);
    free(out);
    if (st <= 0)
        return false;
    st = th_test_http(port, "POST", "/mcp", hdr,
                      "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":"
                      "\"tools/list\"}",
                      rpc_wait_ms(), &out);
    free(out);
    if (st <= 0)
        return false;
    st = th_test_http(port, "DELETE", "/mcp", hdr, NULL, rpc_wait_ms(),
                      &out);
    free(out);
    return st > 0;
}

static void *churn_main(void *arg)
{
    churn *c = arg;
    for (int i = 0; i < c->rounds; i++) {
        bool opened;
        if (!one_session(c->port, &opened))
            c->failed++;
        c->opened += opened;
    }
    atomic_fetch_sub(&g_churning, 1);
    return NULL;
}

/* The timer test's config: the toolset's tools are `tools`. */
static void churn_opts(rpc_opts *o, char *buf, size_t cap, const char *tools)
{
    snprintf(buf, cap,
             "host:\n"
             "  log_level: info\n"
             "  shutdown_grace: 1s\n"
             "  listen: [\"http://127.0.0.1:0/mcp\"]\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             MCP_SEC
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [%s]\n"
             "    allow_users: [attack]\n",
             tools);
    memset(o, 0, sizeof *o);
    o->config = buf;
}

/* CLIENTS clients open and close sessions while reloads change the tool
 * list (echo_async comes and goes): the reloads done, all of them ok, no
 * request left unanswered and some sessions opened. */
static void churn_with_reloads(rpc_srv *s, unsigned port, char *text,
                               size_t cap)
{
    enum { CLIENTS = 3 };
    churn ch[CLIENTS];
    pthread_t th[CLIENTS];
    atomic_store(&g_churning, CLIENTS);
    for (int i = 0; i < CLIENTS; i++) {
        ch[i] = (churn){.port = port, .rounds = rpc_valgrind() ? 10 : 150};
        CU_ASSERT_FATAL(pthread_create(&th[i], NULL, churn_main, &ch[i]) ==
                        0);
    }
    int reloads = 0, i;
    for (i = 0; i < 40 || (atomic_load(&g_churning) && i < 5000); i++) {
        rpc_opts r;
        churn_opts(&r, text, cap, i % 2 ? "echo, echo_async" : "echo");
        reloads += reload_opts(s, &r);
    }
    int opened = 0, failed = 0;
    for (int k = 0; k < CLIENTS; k++) {
        pthread_join(th[k], NULL);
        opened += ch[k].opened;
        failed += ch[k].failed;
    }
    CU_ASSERT_EQUAL(reloads, i);
    if (getenv("TH_ATTACK_VERBOSE"))
        fprintf(stderr, "\n  %d reloads, %d sessions\n", reloads, opened);
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT(opened > 0);
    if (failed)
        rpc_dump_log(s);
}

/* The server's thread count (/proc/PID/status Threads), -1 if unknown. */
static long threads_of(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long n = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "Threads:", 8) == 0)
            n = strtol(line + 8, NULL, 10);
    if (f)
        fclose(f);
    return n;
}

/* Waits until the server has at most `n` threads. */
static bool wait_threads_at_most(pid_t pid, long n)
{
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    long t;
    while ((t = threads_of(pid)) > n && rpc_now_ms() < end) {
        struct timespec ts = {0, 5 * 1000000};
        nanosleep(&ts, NULL); /* a poll's pace */
    }
    if (t > n)
        fprintf(stderr, "\n  %ld threads, want at most %ld\n", t, n);
    return t >= 0 && t <= n;
}

static void test_timer_churn(void)
{
    setenv(TOKEN_ENV, TOKEN, 1);
    rpc_srv s;
    rpc_opts o;
    char text[1024];
    churn_opts(&o, text, sizeof text, "echo, echo_async");
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    unsigned port = th_test_log_port(s.log, "(Streamable HTTP) on http");
    CU_ASSERT_FATAL(port != 0);
    long before = threads_of(s.pid); /* no MCP session: no timer thread */
    /* a few sessions that stay, with list_changed pending all along */
    char keep[4][256];
    int n_keep = 0;
    for (int i = 0; i < 4; i++) {
        char *out = NULL;
        th_test_http(port, "POST", "/mcp", AUTH, INIT_BODY, rpc_wait_ms(),
                     &out);
        const char *p = strcasestr(out, "Mcp-Session-Id: ");
        if (p) {
            p += 16;
            snprintf(keep[n_keep], sizeof keep[n_keep],
                     AUTH "Mcp-Protocol-Version: 2025-06-18\r\n"
                     "Mcp-Session-Id: %.*s\r\n", (int)strcspn(p, "\r\n"), p);
            free(out);
            th_test_http(port, "POST", "/mcp", keep[n_keep],
                         "{\"jsonrpc\":\"2.0\",\"method\":"
                         "\"notifications/initialized\"}",
                         rpc_wait_ms(), &out);
            n_keep++;
        }
        free(out);
    }
    CU_ASSERT_EQUAL(n_keep, 4);
    churn_with_reloads(&s, port, text, sizeof text);
    /* the deferred list_changed went out (the timer ran) */
    bool sent = rpc_log_wait(&s, "tools changed: list_changed",
                             rpc_wait_ms());
    CU_ASSERT(sent);
    /* the kept sessions go: then the clients' sessions come and go alone,
     * the last one out joining the timer thread as the next starts one */
    for (int i = 0; i < n_keep; i++) {
        char *out = NULL;
        th_test_http(port, "DELETE", "/mcp", keep[i], NULL, rpc_wait_ms(),
                     &out);
        free(out);
    }
    churn_with_reloads(&s, port, text, sizeof text);
    /* every session gone: so is the timer thread (none left behind) */
    CU_ASSERT(before > 0 && wait_threads_at_most(s.pid, before));
    bool op;
    CU_ASSERT(one_session(port, &op) && op);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    if (!sent)
        rpc_dump_log(&s);
    rpc_srv_free(&s);
    unsetenv(TOKEN_ENV);
}

void th_suite_attack_round(void)
{
    CU_pSuite s = CU_add_suite("attack_round", NULL, NULL);
    CU_add_test(s, "slot_after_refusal", test_slot_after_refusal);
    CU_add_test(s, "slot_after_busy", test_slot_after_busy);
    CU_add_test(s, "slot_after_ask", test_slot_after_ask);
    CU_add_test(s, "slot_after_hangup", test_slot_after_hangup);
    CU_add_test(s, "hangup_flood", test_hangup_flood);
    CU_add_test(s, "nested_code_counts", test_nested_code_counts);
    CU_add_test(s, "reload_keeps_holds", test_reload_keeps_holds);
    CU_add_test(s, "timer_churn", test_timer_churn);
}
