/* tests/runner.c - the one CUnit runner for a kind of suite (unit or
 * integration).  Every tests/<kind>/test_NAME.c defines th_suite_NAME(),
 * which adds its suite; the build generates the list.
 *
 *   unit-tests                 run every suite
 *   unit-tests config loader   run these suites only
 *   unit-tests config:unknown_key   run one test of a suite
 *   unit-tests --list          list suites and tests
 *
 * Every test runs under a watchdog (TH_TEST_TIMEOUT seconds, default 120):
 * a test that hangs is reported by name and the run fails.  Exit status is
 * the number of failures (capped at 100), so CI sees any failure.
 */
#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TH_SUITE(name) void th_suite_##name(void);
#include TH_SUITES_H
#undef TH_SUITE

static const char *current_test = "?";
static const char *current_suite = "?";
static unsigned timeout_s = 120;

static void on_alarm(int sig)
{
    (void)sig;
    char msg[512];
    int n = snprintf(msg, sizeof msg,
                     "\nTIMEOUT: test %s:%s ran longer than %u s\n",
                     current_suite, current_test, timeout_s);
    if (n > 0)
        (void)!write(2, msg, (size_t)n);
    _exit(101);
}

static void on_test_start(const CU_pTest test, const CU_pSuite suite)
{
    current_test = test->pName;
    current_suite = suite->pName;
    alarm(timeout_s);
}

static void on_test_complete(const CU_pTest test, const CU_pSuite suite,
                             const CU_pFailureRecord failure)
{
    (void)test;
    (void)suite;
    (void)failure;
    alarm(0);
}

__attribute__((unused)) static int wanted(const char *suite, int argc, char **argv)
{
    if (argc <= 1)
        return 1;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-')
            continue;
        size_t n = strcspn(argv[i], ":");
        if (strlen(suite) == n && strncmp(argv[i], suite, n) == 0)
            return 1;
    }
    return 0;
}

/* With "suite:test" arguments, deactivate the other tests of that suite. */
static void select_tests(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *colon = strchr(argv[i], ':');
        if (!colon)
            continue;
        char sname[256];
        size_t n = (size_t)(colon - argv[i]);
        if (n >= sizeof sname)
            continue;
        memcpy(sname, argv[i], n);
        sname[n] = '\0';
        CU_pSuite s = CU_get_suite(sname);
        if (!s)
            continue;
        for (CU_pTest t = s->pTest; t; t = t->pNext)
            if (strcmp(t->pName, colon + 1) != 0)
                CU_set_test_active(t, CU_FALSE);
    }
}

int main(int argc, char **argv)
{
    const char *to = getenv("TH_TEST_TIMEOUT");
    if (to && atoi(to) > 0)
        timeout_s = (unsigned)atoi(to);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGALRM, on_alarm);

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 100;

    int list = argc > 1 && strcmp(argv[1], "--list") == 0;
    int selected = 0;
#define TH_SUITE(name)                                                        \
    if (list || wanted(#name, argc, argv)) {                                  \
        th_suite_##name();                                                    \
        selected++;                                                           \
    }
#include TH_SUITES_H
#undef TH_SUITE

    if (list) {
        for (CU_pSuite s = CU_get_registry()->pSuite; s; s = s->pNext)
            for (CU_pTest t = s->pTest; t; t = t->pNext)
                printf("%s:%s\n", s->pName, t->pName);
        CU_cleanup_registry();
        return 0;
    }
    if (selected == 0) {
        fprintf(stderr, "%s: no suite matches; try --list\n", argv[0]);
        CU_cleanup_registry();
        return 100;
    }
    select_tests(argc, argv);

    CU_set_test_start_handler(on_test_start);
    CU_set_test_complete_handler(on_test_complete);
    CU_basic_set_mode(getenv("TH_TEST_VERBOSE") ? CU_BRM_VERBOSE
                                                : CU_BRM_NORMAL);
    printf("toolhost %s tests\n", TH_RUNNER_KIND);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() +
                      CU_get_number_of_tests_failed();
    unsigned ran = CU_get_number_of_tests_run();
    CU_cleanup_registry();
    printf("\n");
    if (ran == 0) {
        fprintf(stderr, "no test ran\n");
        return 100;
    }
    return failed > 100 ? 100 : (int)failed;
}
