/* test_contract_serve.c - the real `toolhost serve` against a plugin that
 * breaks the call contract (tests/fixtures/contract_misuse.c): every
 * misuse answers the call (or is refused) and is logged with the tool and
 * the call id; the server stays up; a suspended call that is never
 * completed neither hangs SIGTERM nor is freed under the plugin. */
#include <CUnit/CUnit.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

static int cm_start(rpc_srv *s)
{
    rpc_opts o = {
        .config = "host:\n"
                  "  log_level: info\n"
                  "  workers: 2\n"
                  "  lost_worker_grace: 300ms\n"
                  "  shutdown_grace: 300ms\n"
                  "  session_grace: 200ms\n"
                  "plugins:\n"
                  "  - name: echo\n"
                  "    path: @BUILD@/plugins/echo.so\n"
                  "  - name: cm\n"
                  "    path: @BUILD@/fixtures/contract_misuse.so\n"
                  "toolsets:\n"
                  "  - name: public\n"
                  "    tools: [echo, cm_susp_ok, cm_twice, cm_late, cm_status42, "
                  "cm_never]\n",
    };
    return rpc_srv_start(s, &o);
}

static bool tool_error_has(const msgpack_object *res, const char *text)
{
    const msgpack_object *e = th_rpc_map_get(res, "error");
    const msgpack_object *m = e ? th_rpc_map_get(e, "message") : NULL;
    if (!m || m->type != MSGPACK_OBJECT_STR)
        return false;
    return memmem(m->via.str.ptr, m->via.str.size, text, strlen(text)) != NULL;
}

static bool log_wait(rpc_srv *s, const char *needle, int ms)
{
    int64_t end = rpc_now_ms() + ms;
    while (!rpc_log_has(s, needle) && rpc_now_ms() < end)
        usleep(10000);
    return rpc_log_has(s, needle);
}

/* Each misuse: a reported error or refusal, a log line, the server up. */
static void test_misuse_reported(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(cm_start(&s) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    int64_t t0 = rpc_now_ms();
    CU_ASSERT(rpc_call(c, "tools.call", "[\"cm_susp_ok\", {}]", &r) == 0);
    CU_ASSERT(tool_error_has(r.res, "after suspend()"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_now_ms() - t0 < th_test_ms(3000)); /* before: the 60 s timeout */
    CU_ASSERT(rpc_call(c, "tools.call", "[\"cm_twice\", {}]", &r) == 0);
    CU_ASSERT(rpc_stdout_is(r.res, "once"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tools.call", "[\"cm_late\", {}]", &r) == 0);
    CU_ASSERT(rpc_stdout_is(r.res, "done"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tools.call", "[\"cm_status42\", {}]", &r) == 0);
    CU_ASSERT(tool_error_has(r.res, "unknown status 42"));
    rpc_res_free(&r);
    CU_ASSERT(log_wait(&s, "tool=cm_susp_ok call=", rpc_wait_ms()));
    CU_ASSERT(log_wait(&s, "complete() called twice", rpc_wait_ms()));
    CU_ASSERT(log_wait(&s, "write() after the call ended", rpc_wait_ms()));
    CU_ASSERT(log_wait(&s, "tool=cm_status42 call=", rpc_wait_ms()));
    CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"up\"}]", &r) == 0 &&
              rpc_stdout_is(r.res, "up"));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* A suspended call never completed: it times out, and SIGTERM ends the
 * host in bounded time with a log line (before: "host close: 1 calls
 * still running" for ever, only SIGKILL ended it). */
static void test_never_completed_sigterm(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(cm_start(&s) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.call", "[\"cm_never\", {}, {\"timeout_ms\": 200}]",
                       &r) == 0 &&
              rpc_tool_error_is(r.res, "timeout"));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    int64_t t0 = rpc_now_ms();
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    int64_t took = rpc_now_ms() - t0;
    if (getenv("TH_TEST_VERBOSE"))
        fprintf(stderr, "\nexit after SIGTERM with a call never completed: %lld ms\n",
                (long long)took);
    CU_ASSERT(took < th_test_ms(5000));
    CU_ASSERT(rpc_log_has(&s, "abandoning 1 call still running"));
    rpc_srv_free(&s);
}

void th_suite_contract_serve(void)
{
    CU_pSuite s = CU_add_suite("contract_serve", NULL, NULL);
    CU_add_test(s, "misuse_reported", test_misuse_reported);
    CU_add_test(s, "never_completed_sigterm", test_never_completed_sigterm);
}
