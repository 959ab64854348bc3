/* test_watchdog_proof.c - fixture tests that misbehave on purpose, for the
 * runner's own tests (tests/unit/test_runner.c).  The suite is hidden: it
 * runs only when named (`unit-tests watchdog_proof:hang`), never in a
 * plain `unit-tests` or `make check`.
 *
 *   hang    sleeps forever: the watchdog must end the run and name it
 *   crash   writes to a page it may not touch: SIGSEGV, named by the runner
 *   skip    TH_SKIP: reported as skipped, not passed
 *   slow    asks th_test_timeout() for 30 s, then takes 1.5 s: passes
 *           under TH_TEST_TIMEOUT=1
 *   fail    one failed assert: exit status 1
 */
#include <CUnit/CUnit.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"

static void test_hang(void)
{
    /* bounded only by the runner's watchdog, which is the point */
    for (;;)
        pause();
}

static void test_crash(void)
{
    long page = sysconf(_SC_PAGESIZE);
    volatile char *p = mmap(NULL, (size_t)page, PROT_NONE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CU_ASSERT_FATAL(p != MAP_FAILED);
    p[0] = 1; /* SIGSEGV */
    CU_FAIL("the write to a PROT_NONE page did not fault");
}

static void test_skip(void)
{
    TH_SKIP("fixture: skips on purpose");
    CU_FAIL("TH_SKIP did not return");
}

static void test_slow(void)
{
    th_test_timeout(30);
    struct timespec ts = {1, 500000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
    CU_PASS("slept 1.5 s under its own budget");
}

static void test_fail(void)
{
    CU_ASSERT_EQUAL(1, 2);
}

void th_suite_watchdog_proof(void)
{
    CU_pSuite s = CU_add_suite("watchdog_proof", NULL, NULL);
    CU_add_test(s, "hang", test_hang);
    CU_add_test(s, "crash", test_crash);
    CU_add_test(s, "skip", test_skip);
    CU_add_test(s, "slow", test_slow);
    CU_add_test(s, "fail", test_fail);
}
