/* test_runner.c - the test runner itself (tests/runner.c): its watchdog
 * ends a hanging test and names it, a crash is named, a skip is reported
 * as a skip, a failure fails the run.  Each case runs this very binary on
 * one test of the hidden watchdog_proof suite (test_watchdog_proof.c). */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/th_test.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs `unit-tests <args>` with TH_TEST_TIMEOUT=<timeout> (and no core
 * file); returns the seconds it took. */
static double run_self(const char *timeout, const char *args, th_test_run *r)
{
    char script[8192];
    snprintf(script, sizeof script,
             "ulimit -c 0; unset TH_TEST_VERBOSE; TH_TEST_TIMEOUT=%s "
             "exec '%s' %s",
             timeout, th_test_build_path("tests/unit-tests"), args);
    char *argv[] = {"/bin/sh", "-c", script, NULL};
    double t0 = now_s();
    th_test_run_argv(argv, NULL, 30, 0, r);
    double took = now_s() - t0;
    if (r->status == 128 + 9)
        fprintf(stderr, "unit-tests %s did not end in 30 s\n", args);
    return took;
}

static void test_watchdog_ends_hang(void)
{
    th_test_run r;
    double took = run_self("2", "watchdog_proof:hang", &r);
    /* killed by the watchdog after 2 s, not by run_self's 30 s */
    CU_ASSERT_EQUAL(r.status, 101);
    CU_ASSERT(took >= 1.9);
    CU_ASSERT(took < 4.0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "TIMEOUT: watchdog_proof:hang after 2 s"));
    /* the summary counts it failed, by name */
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "Run Summary"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "Suite watchdog_proof, Test hang had failures"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "tests FAILED"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "unit: 0 passed, 1 failed"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "watchdog_proof:hang timed out"));
    th_test_run_free(&r);
}

static void test_watchdog_per_test_budget(void)
{
    /* the test asks th_test_timeout(30) and takes 1.5 s: the 1 s default
     * does not end it */
    th_test_run r;
    run_self("1", "watchdog_proof:slow", &r);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NULL(strstr(r.err, "TIMEOUT"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "tests OK"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "unit: 1 passed, 0 failed"));
    th_test_run_free(&r);
}

static void test_crash_is_named(void)
{
    th_test_run r;
    run_self("10", "watchdog_proof:crash", &r);
    /* dies of the signal (or, under a sanitizer, of its report) */
    CU_ASSERT_NOT_EQUAL(r.status, 0);
    CU_ASSERT_NOT_EQUAL(r.status, 128 + 9);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "CRASH: watchdog_proof:crash"));
    if (!strstr(TH_BUILD_DIR, "/san-")) {
        CU_ASSERT_EQUAL(r.status, 128 + 11);
        CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "signal 11 (SIGSEGV)"));
    }
    th_test_run_free(&r);
}

static void test_skip_is_not_a_pass(void)
{
    th_test_run r;
    run_self("10", "watchdog_proof:skip", &r);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "tests OK"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "unit: 0 passed, 0 failed, 1 skipped"));
    CU_ASSERT_PTR_NOT_NULL(strstr(
        r.out, "1 skipped:\n  watchdog_proof:skip: fixture: skips on purpose"));
    th_test_run_free(&r);
}

static void test_failure_fails_the_run(void)
{
    th_test_run r;
    run_self("10", "watchdog_proof:fail", &r);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "Suite watchdog_proof, Test fail had failures"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "tests FAILED"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "unit: 0 passed, 1 failed"));
    th_test_run_free(&r);
}

static void test_hidden_and_unknown_names(void)
{
    th_test_run r;
    /* the hidden suite is not listed */
    run_self("10", "--list", &r);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "runner:watchdog_ends_hang\n"));
    CU_ASSERT_PTR_NULL(strstr(r.out, "watchdog_proof"));
    th_test_run_free(&r);
    /* a typo is refused, not silently ignored */
    run_self("10", "runner no_such_suite", &r);
    CU_ASSERT_EQUAL(r.status, 100);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "no suite named 'no_such_suite'"));
    th_test_run_free(&r);
    run_self("10", "watchdog_proof:no_such_test", &r);
    CU_ASSERT_EQUAL(r.status, 100);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "has no test 'no_such_test'"));
    th_test_run_free(&r);
}

void th_suite_runner(void)
{
    CU_pSuite s = CU_add_suite("runner", NULL, NULL);
    CU_add_test(s, "watchdog_ends_hang", test_watchdog_ends_hang);
    CU_add_test(s, "watchdog_per_test_budget", test_watchdog_per_test_budget);
    CU_add_test(s, "crash_is_named", test_crash_is_named);
    CU_add_test(s, "skip_is_not_a_pass", test_skip_is_not_a_pass);
    CU_add_test(s, "failure_fails_the_run", test_failure_fails_the_run);
    CU_add_test(s, "hidden_and_unknown_names", test_hidden_and_unknown_names);
}
