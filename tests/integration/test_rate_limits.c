/* test_rate_limits.c - `rate_limits:` against the real `toolhost serve` over the
 * socket front (rate.c, docs/gateway.md "Rate limits"):
 *
 *   burst        rate 1/s, burst 2: two calls pass, the third is refused
 *                rate_limited saying when to retry; another tool is not
 *                limited; the refusal is logged once, and counted by
 *                host.stats;
 *   concurrent   concurrent 1: while an async task runs, a second call
 *                is refused; once the task is cancelled and has ended,
 *                calls pass again;
 *   daily        daily 2: the third call is refused until 00:00 UTC;
 *   bad_config   a rule with no limit, a burst without a rate, a bad
 *                `per`, a rate below 0 each fail `toolhost config check`
 *                at their line.
 *
 * (Per-caller buckets, several callers and rules: tests/unit/test_rate.c
 * drives rate.c with its own clock.) */
#include <CUnit/CUnit.h>

#include "integration/test_rpc_harness.h"

static int rl_start(rpc_srv *s, const char *rules, const char *host_extra)
{
    rpc_opts o = {.plugins_extra = rules, .host_extra = host_extra};
    return rpc_srv_start(s, &o);
}

/* The error code of a tools.call answer with ok: false, "" if ok. */
static void err_code(const rpc_res *r, char *buf, size_t cap, char *msg,
                     size_t mcap)
{
    buf[0] = msg[0] = '\0';
    if (!r->res)
        return;
    const msgpack_object *e = th_rpc_map_get(r->res, "error");
    const msgpack_object *c = e ? th_rpc_map_get(e, "code") : NULL;
    const msgpack_object *m = e ? th_rpc_map_get(e, "message") : NULL;
    const char *p;
    size_t n;
    if (c && th_rpc_obj_str(c, &p, &n))
        snprintf(buf, cap, "%.*s", (int)n, p);
    if (m && th_rpc_obj_str(m, &p, &n))
        snprintf(msg, mcap, "%.*s", (int)n, p);
}

static void call_echo(th_rpc_client *c, const char *tool, char *code,
                      char *msg)
{
    rpc_res r;
    char p[128];
    snprintf(p, sizeof p, "[\"%s\", {\"text\": \"hi\"}]", tool);
    CU_ASSERT_EQUAL_FATAL(rpc_call(c, "tools.call", p, &r), 0);
    err_code(&r, code, 64, msg, 512);
    rpc_res_free(&r);
}

/* Two calls of `tool` pass, the third is refused rate_limited: its
 * message in msg. */
static void two_then_limited(th_rpc_client *c, const char *tool, char *msg)
{
    char code[64];
    call_echo(c, tool, code, msg);
    CU_ASSERT_STRING_EQUAL(code, "");
    call_echo(c, tool, code, msg);
    CU_ASSERT_STRING_EQUAL(code, "");
    call_echo(c, tool, code, msg);
    CU_ASSERT_STRING_EQUAL(code, "rate_limited");
}

static void test_burst(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rl_start(&s,
                             "rate_limits:\n"
                             "  - name: slow_echo\n"
                             "    tools: [echo]\n"
                             "    rate: 0.001\n"
                             "    burst: 2\n",
                             NULL) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    char code[64], msg[512];
    two_then_limited(c, "echo", msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "rate limit 'slow_echo'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "retry after"));
    {
        /* the wait also as a number: error.retry_after_ms (1 token at
         * 0.001/s: about 1000 s) */
        rpc_res rr;
        CU_ASSERT_EQUAL_FATAL(rpc_call(c, "tools.call",
                                       "[\"echo\", {\"text\": \"hi\"}]",
                                       &rr), 0);
        const msgpack_object *ra = rr.res ? th_rpc_map_get(th_rpc_map_get(
                                                rr.res, "error"),
                                                "retry_after_ms")
                                          : NULL;
        CU_ASSERT(ra && ra->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
                  ra->via.u64 > 900000 && ra->via.u64 <= 1000000);
        rpc_res_free(&rr);
    }
    /* another tool: no rule matches it */
    call_echo(c, "echo_async", code, msg);
    CU_ASSERT_STRING_EQUAL(code, "");
    /* logged once, whatever the refusals that follow within 10 s */
    for (int i = 0; i < 5; i++)
        call_echo(c, "echo", code, msg);
    CU_ASSERT(rpc_log_has(&s, "rate_limit: refused a call of echo: rate "
                              "limit 'slow_echo'"));
    /* counted */
    rpc_res r;
    CU_ASSERT_EQUAL(rpc_call(c, "host.stats", "[]", &r), 0);
    const msgpack_object *tools = r.res ? th_rpc_map_get(r.res, "tools") : NULL;
    const msgpack_object *echo = tools ? th_rpc_map_get(tools, "echo") : NULL;
    const msgpack_object *rl = echo ? th_rpc_map_get(echo, "rate_limited") : NULL;
    /* the third call, the one that read retry_after_ms, and five more */
    CU_ASSERT(rl && rl->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
              rl->via.u64 == 7);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static bool field_is(const msgpack_object *map, const char *key,
                     const char *want)
{
    const msgpack_object *v = th_rpc_map_get(map, key);
    return v && th_rpc_obj_streq(v, want);
}

static void test_concurrent(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rl_start(&s,
                             "rate_limits:\n"
                             "  - name: one_at_a_time\n"
                             "    concurrent: 1\n",
                             NULL) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call",
                    "[\"echo_async\", {\"text\": \"x\", \"steps\": 2, "
                    "\"delay_ms\": 60000}]");
    const msgpack_object *m = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *ack = &m->via.array.ptr[3];
    CU_ASSERT_FATAL(field_is(ack, "status", "running"));
    uint64_t task = th_rpc_map_get(ack, "task_id")->via.u64;
    /* the task holds the one slot */
    rpc_raw_request(&w, 2, "tools.call", "[\"echo\", {\"text\": \"y\"}]");
    m = rpc_raw_response(&w, 2, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *err =
        th_rpc_map_get(th_rpc_map_get(&m->via.array.ptr[3], "error"), "code");
    CU_ASSERT(err && th_rpc_obj_streq(err, "rate_limited"));
    char p[64];
    snprintf(p, sizeof p, "[%llu]", (unsigned long long)task);
    rpc_raw_request(&w, 3, "tasks.cancel", p);
    CU_ASSERT(rpc_raw_response(&w, 3, rpc_wait_ms()) != NULL);
    CU_ASSERT(rpc_raw_notification(&w, "task.done", rpc_wait_ms()) != NULL);
    /* its execution ends just after its answer: the slot is back then */
    bool passed = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    for (uint64_t id = 4; !passed && rpc_now_ms() < end; id++) {
        rpc_raw_request(&w, id, "tools.call", "[\"echo\", {\"text\": \"z\"}]");
        m = rpc_raw_response(&w, id, rpc_wait_ms());
        passed = m && rpc_stdout_is(&m->via.array.ptr[3], "z");
    }
    CU_ASSERT(passed);
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void test_daily(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rl_start(&s,
                             "rate_limits:\n"
                             "  - tools: [\"echo*\"]\n"
                             "    per: caller_tool\n"
                             "    daily: 2\n",
                             NULL) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    char code[64], msg[512];
    two_then_limited(c, "echo", msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "rate limit 'rate_limits[0]': the "
                                       "daily quota of 2 calls is used"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "(00:00 UTC)"));
    /* per caller and tool: echo_async has its own quota */
    call_echo(c, "echo_async", code, msg);
    CU_ASSERT_STRING_EQUAL(code, "");
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* `toolhost config check` of a config: its exit status, its output. */
static int check_config(const char *dir, const char *text, char *out,
                        size_t cap)
{
    char *cfg = th_test_write_file(dir, "rl.yaml", text, (size_t)-1);
    th_test_run r;
    int st = th_test_toolhost(&r, "config", "check", cfg, NULL) == 0 ? r.status
                                                                  : -1;
    snprintf(out, cap, "%s%s", r.err ? r.err : "", r.out ? r.out : "");
    th_test_run_free(&r);
    free(cfg);
    return st;
}

static void test_bad_config(void)
{
    char *dir = th_test_tmpdir();
    char out[4096];
    CU_ASSERT_NOT_EQUAL(check_config(dir,
                                     "rate_limits:\n"
                                     "  - name: nothing\n"
                                     "    tools: [echo]\n",
                                     out, sizeof out),
                        0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "rl.yaml:2:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "needs at least one of 'rate'"));
    CU_ASSERT_NOT_EQUAL(check_config(dir,
                                     "rate_limits:\n"
                                     "  - burst: 3\n",
                                     out, sizeof out),
                        0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "'burst' is the size of the 'rate' "
                                       "bucket"));
    CU_ASSERT_NOT_EQUAL(check_config(dir,
                                     "rate_limits:\n"
                                     "  - rate: 2\n"
                                     "    per: everyone\n",
                                     out, sizeof out),
                        0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "rl.yaml:3:"));
    CU_ASSERT_NOT_EQUAL(check_config(dir,
                                     "rate_limits:\n"
                                     "  - rate: -1\n",
                                     out, sizeof out),
                        0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "calls per second above 0"));
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_rate_limits(void)
{
    CU_pSuite s = CU_add_suite("rate_limits", NULL, NULL);
    CU_add_test(s, "burst", test_burst);
    CU_add_test(s, "concurrent", test_concurrent);
    CU_add_test(s, "daily", test_daily);
    CU_add_test(s, "bad_config", test_bad_config);
}
