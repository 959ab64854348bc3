/* test_abi11.c - ABI 1.1 through the real call path (th_host_open,
 * th_call_sync): bounds refused before execute(), structured output
 * checked against the output schema at the end of the call (a mismatch is
 * the tool's error), caller() and log_call(), and cancellation reaching a
 * helper thread through cancel_fd() and an on_cancel() hook. */
#include <CUnit/CUnit.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/host_session.h"
#include "common/th_test.h"
#include "th/host.h"
#include "th/json.h"
#include "th/log.h"

static th_host *h;
static th_session *s;
static int log_level;

static int suite_init(void)
{
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "plugins:\n"
             "  - name: abi11_tools\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: main\n"
             "    tools: [\"*\"]\n",
             th_test_build_path("fixtures/abi11_tools.so"));
    log_level = th_log_get_level();
    return th_test_host_session_open("abi11.yaml", yaml, &h, &s);
}

static int suite_clean(void)
{
    th_test_host_session_close(h, s);
    th_log_set_level(log_level);
    return 0;
}

static int call_json(const char *tool, const char *json, int64_t timeout_ms,
                     th_result_copy *r)
{
    return th_test_call_json(s, tool, json, timeout_ms, false, r);
}

#define out_of th_test_out

static void bounds_before_execute(void)
{
    th_result_copy r;
    CU_ASSERT_EQUAL(call_json("abi11_tools_rows", "{\"limit\":0}", 5000, &r),
                    0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_ERROR);
    CU_ASSERT_EQUAL(r.error, TH_EARGS);
    CU_ASSERT_STRING_EQUAL(r.message, "Error parsing arguments for "
                                      "abi11_tools_rows: parameter 'limit' "
                                      "must be >= 1, got 0");
    th_result_copy_destroy(&r);
    CU_ASSERT_EQUAL(call_json("abi11_tools_rows", "{\"limit\":1000}", 5000,
                              &r),
                    0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_DONE);
    CU_ASSERT_TRUE(r.ok);
    CU_ASSERT_STRING_EQUAL(out_of(&r), "{\"rows\":1000}");
    th_result_copy_destroy(&r);
}

static void structured_output_checked(void)
{
    th_result_copy r;
    CU_ASSERT_EQUAL(call_json("abi11_tools_rows", "{\"bad\":true}", 5000, &r),
                    0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_ERROR);
    CU_ASSERT_EQUAL(r.error, TH_ETOOL); /* the tool's fault */
    CU_ASSERT_STRING_EQUAL(r.message,
                           "tool abi11_tools_rows wrote structured output "
                           "that does not match its output_schema: at "
                           "/rows: must be an integer, got a string");
    th_result_copy_destroy(&r);
    CU_ASSERT_EQUAL(call_json("abi11_tools_rows", "{\"notjson\":true}", 5000,
                              &r),
                    0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_ERROR);
    CU_ASSERT_EQUAL(r.error, TH_ETOOL);
    CU_ASSERT_PTR_NOT_NULL(r.message && strstr(r.message, "is not valid "
                                                          "JSON"));
    th_result_copy_destroy(&r);
}

static void caller_and_log(void)
{
    th_result_copy r;
    CU_ASSERT_EQUAL(call_json("abi11_tools_who", "{}", 5000, &r), 0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_DONE);
    char want[200];
    snprintf(want, sizeof want, "uid=%lld ", (long long)getuid());
    CU_ASSERT_EQUAL(strncmp(out_of(&r), want, strlen(want)), 0);
    snprintf(want, sizeof want, "session=%llu toolset=main front=rpc",
             (unsigned long long)th_session_id(s));
    CU_ASSERT_PTR_NOT_NULL(strstr(out_of(&r), want));
    CU_ASSERT_PTR_NULL(strstr(out_of(&r), "user=-"));
    if (!strstr(out_of(&r), want))
        fprintf(stderr, "\n  got: %s\n", out_of(&r));
    th_result_copy_destroy(&r);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Cancellation reaches a helper thread waiting on cancel_fd() and an
 * on_cancel() hook at the deadline, not after their own 10 s timeouts. */
static void cancel_reaches_waiters(void)
{
    th_result_copy r;
    int64_t t0 = now_ms();
    CU_ASSERT_EQUAL(call_json("abi11_tools_wait", "{}", 200, &r), 0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_ERROR);
    CU_ASSERT_EQUAL(r.error, TH_ETIMEOUT);
    th_result_copy_destroy(&r);
    CU_ASSERT_EQUAL(call_json("abi11_tools_hook", "{}", 200, &r), 0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_ERROR);
    CU_ASSERT_EQUAL(r.error, TH_ETIMEOUT);
    th_result_copy_destroy(&r);
    bool both = false;
    while (!both && now_ms() - t0 < 5000) {
        CU_ASSERT_EQUAL_FATAL(call_json("abi11_tools_woken", "{}", 5000, &r),
                              0);
        both = strcmp(out_of(&r), "fd=1 hook=1") == 0;
        if (!both && now_ms() - t0 >= 4900)
            fprintf(stderr, "\n  woken: %s\n", out_of(&r));
        th_result_copy_destroy(&r);
        if (!both)
            usleep(20 * 1000);
    }
    CU_ASSERT_TRUE(both);
    CU_ASSERT(now_ms() - t0 < 5000);
}

void th_suite_abi11(void)
{
    CU_pSuite su = CU_add_suite("abi11", suite_init, suite_clean);
    CU_add_test(su, "bounds_before_execute", bounds_before_execute);
    CU_add_test(su, "structured_output_checked", structured_output_checked);
    CU_add_test(su, "caller_and_log", caller_and_log);
    CU_add_test(su, "cancel_reaches_waiters", cancel_reaches_waiters);
}
