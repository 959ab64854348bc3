/* tests/runner.c - the one CUnit runner for a kind of suite (unit or
 * integration).  Every tests/<kind>/test_NAME.c defines th_suite_NAME(),
 * which adds its suite; the build generates the list.
 *
 *   unit-tests                 run every suite (except the hidden ones)
 *   unit-tests config loader   run these suites only
 *   unit-tests config:unknown_key   run one test of a suite
 *   unit-tests --list          list suites and tests
 *
 * A name that matches no suite or test is refused (exit 100).  Hidden
 * suites (HIDDEN below) hold fixture tests that hang or crash on purpose:
 * they run only when named, and are not listed.
 *
 * Watchdog.  Every test runs under a deadline: TH_TEST_TIMEOUT seconds
 * (default 60; times 2 in a sanitizer build and times 5 under valgrind,
 * i.e. when TH_VALGRIND is set, unless TH_TEST_TIMEOUT is given).  A test
 * may ask for its own budget with th_test_timeout().  The deadline is kept
 * by a thread, not by a signal, so nothing in CUnit or in a test can
 * disarm it.  When it passes, the hung test cannot be unwound, so the
 * runner prints "TIMEOUT: suite:test after N s" to stderr, the summary so
 * far with that test counted failed, kills its own child processes and
 * exits 101.
 *
 * Crashes.  A fatal signal in a test (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
 * SIGABRT) prints "CRASH: suite:test: signal N (NAME)" to stderr and is
 * re-raised, so the process still dies of it (a sanitizer's handler, when
 * there is one, still runs and reports).  SIGINT/SIGTERM print which test
 * was interrupted.  A sanitizer error names the test the same way.
 *
 * Skips.  TH_SKIP("reason") (common/th_test.h) ends a test as skipped:
 * the summary counts it apart from the tests run, and every skip is listed with its
 * reason at the end.
 *
 * Output follows CUnit's basic runner (TH_TEST_VERBOSE=1: one line per
 * test with its time).  Exit status: 0 when every test passed or was
 * skipped; else the number of failed tests and suites (at most 99); 100
 * for a usage or setup error; 101 after a timeout.
 */
#include <CUnit/CUnit.h>
#include <CUnit/TestRun.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"
#include "front/fronts.h"

#define TH_SUITE(name) void th_suite_##name(void);
#include TH_SUITES_H
#undef TH_SUITE

static const char *const SUITE_NAMES[] = {
#define TH_SUITE(name) #name,
#include TH_SUITES_H
#undef TH_SUITE
    NULL};

/* Suites that run only when named on the command line. */
static const char *const HIDDEN[] = {"watchdog_proof", NULL};

#define EXIT_USAGE 100
#define EXIT_TIMEOUT 101
#define DEFAULT_TIMEOUT_S 60u

/* ---- the test that runs now ------------------------------------------------
 * Written by the main thread in the CUnit handlers; read by the watchdog
 * (under wd_mu) and by the signal handlers (plain loads of pointers that
 * stay valid while the registry lives). */
static const char *volatile cur_suite;
static const char *volatile cur_test;

static int verbose;
/* $TH_TEST_RESULTS: a file that gets one line per test, appended with one
 * write(2) each ("pass suite:test", "fail ...", "skip ...", "timeout ...",
 * "crash ..."), so several runners can share it (make test-stress counts
 * each test's passes from it).  -1 when unset. */
static int results_fd = -1;
static unsigned default_timeout_s = DEFAULT_TIMEOUT_S;
static int timeout_explicit; /* TH_TEST_TIMEOUT was set */
static unsigned timeout_scale = 1;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- output ------------------------------------------------------------------
 * stdout is unbuffered (as in CUnit's basic runner) so that what was
 * printed before a timeout or a crash is not lost. */

static void write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* ---- skips ----------------------------------------------------------------------- */

typedef struct skip_rec {
    char *text; /* "suite:test: reason (file:line)" */
    struct skip_rec *next;
} skip_rec;

static skip_rec *skips;
static skip_rec **skips_tail = &skips;
static unsigned n_skipped;

/* The slowest tests of the run, slowest first: the summary names them so
 * a reader of a CI log sees where its minutes went. */
#define N_SLOW 5
static struct {
    char name[112];
    double s;
} slow[N_SLOW];

static void slow_note(const char *suite, const char *test, double s)
{
    int i = N_SLOW;
    while (i > 0 && s > slow[i - 1].s)
        i--;
    if (i == N_SLOW)
        return;
    memmove(&slow[i + 1], &slow[i], (N_SLOW - 1 - (size_t)i) * sizeof slow[0]);
    snprintf(slow[i].name, sizeof slow[i].name, "%s:%s", suite, test);
    slow[i].s = s;
}
static int cur_skipped; /* TH_SKIP was called in the running test */

void th_test_skip(const char *file, int line, const char *reason)
{
    CU_pSuite s = CU_get_current_suite();
    CU_pTest t = CU_get_current_test();
    const char *sn = s ? s->pName : "?", *tn = t ? t->pName : "?";
    if (!reason)
        reason = "no reason given";
    int n = snprintf(NULL, 0, "%s:%s: %s (%s:%d)", sn, tn, reason, file, line);
    skip_rec *r = malloc(sizeof *r);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!r || !text) {
        fprintf(stderr, "test runner: out of memory recording a skip\n");
        abort();
    }
    snprintf(text, (size_t)n + 1, "%s:%s: %s (%s:%d)", sn, tn, reason, file,
             line);
    r->text = text;
    r->next = NULL;
    *skips_tail = r;
    skips_tail = &r->next;
    cur_skipped = 1;
    if (verbose)
        printf("skipped: %s ", reason);
}

static void free_skips(void)
{
    while (skips) {
        skip_rec *n = skips->next;
        free(skips->text);
        free(skips);
        skips = n;
    }
    skips_tail = &skips;
}

/* ---- the summary -------------------------------------------------------------- */

typedef struct counts {
    unsigned suites_total, suites_run, suites_failed, suites_inactive;
    unsigned tests_total, tests_run, tests_failed, tests_skipped,
        tests_inactive;
    unsigned asserts, asserts_ok, asserts_failed;
    double elapsed;
} counts;

static void counts_now(counts *c, double started)
{
    CU_pTestRegistry reg = CU_get_registry();
    c->suites_total = reg ? reg->uiNumberOfSuites : 0;
    c->tests_total = reg ? reg->uiNumberOfTests : 0;
    c->suites_run = CU_get_number_of_suites_run();
    c->suites_failed = CU_get_number_of_suites_failed();
    c->suites_inactive = CU_get_number_of_suites_inactive();
    c->tests_run = CU_get_number_of_tests_run();
    c->tests_failed = CU_get_number_of_tests_failed();
    c->tests_inactive = CU_get_number_of_tests_inactive();
    c->tests_skipped = n_skipped;
    c->asserts = CU_get_number_of_asserts();
    c->asserts_ok = CU_get_number_of_successes();
    c->asserts_failed = CU_get_number_of_failures();
    c->elapsed = now_s() - started;
}

/* CUnit's run summary in CUnit's own columns (a skipped test is not
 * counted as run), then the skips with their reasons, the outcome, and one
 * plain result line "KIND: N passed, N failed, N skipped" that CI reads. */
static void print_summary(const counts *c, const char *extra)
{
    unsigned ran = c->tests_run - c->tests_skipped;
    unsigned passed = ran - c->tests_failed;
    char buf[1024];
    int n = snprintf(
        buf, sizeof buf,
        "\n\nRun Summary:    Type  Total    Ran Passed Failed Inactive\n"
        "              suites %6u %6u    n/a %6u %8u\n"
        "               tests %6u %6u %6u %6u %8u\n"
        "             asserts %6u %6u %6u %6u      n/a\n"
        "\nElapsed time = %8.3f seconds\n",
        c->suites_total, c->suites_run, c->suites_failed, c->suites_inactive,
        c->tests_total, ran, passed, c->tests_failed, c->tests_inactive,
        c->asserts, c->asserts, c->asserts_ok, c->asserts_failed, c->elapsed);
    if (n > 0)
        write_all(1, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    if (slow[0].s > 0) {
        write_all(1, "slowest:", 8);
        for (int i = 0; i < N_SLOW && slow[i].s > 0; i++) {
            n = snprintf(buf, sizeof buf, " %s %.1f s%s", slow[i].name,
                         slow[i].s, i + 1 < N_SLOW && slow[i + 1].s > 0
                                        ? ","
                                        : "\n");
            if (n > 0)
                write_all(1, buf, (size_t)n < sizeof buf ? (size_t)n
                                                         : sizeof buf - 1);
        }
    }
    if (c->tests_skipped > 0) {
        n = snprintf(buf, sizeof buf, "\n%u skipped:\n", c->tests_skipped);
        write_all(1, buf, (size_t)n);
        for (skip_rec *r = skips; r; r = r->next) {
            write_all(1, "  ", 2);
            write_all(1, r->text, strlen(r->text));
            write_all(1, "\n", 1);
        }
    }
    int bad = c->tests_failed > 0 || c->suites_failed > 0;
    n = snprintf(buf, sizeof buf,
                 "\ntoolhost %s tests %s%s%s\n%s: %u passed, %u failed, "
                 "%u skipped\n",
                 TH_RUNNER_KIND, bad ? "FAILED" : "OK", extra ? ": " : "",
                 extra ? extra : "", TH_RUNNER_KIND, passed, c->tests_failed,
                 c->tests_skipped);
    if (n > 0)
        write_all(1, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* ---- watchdog -------------------------------------------------------------------
 * wd_mu guards every wd_* field and snap.  The main thread arms the
 * deadline in the test-start handler and disarms it in the test-complete
 * handler; the watchdog thread sleeps on wd_cv until the deadline. */

static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cv;
static pthread_t wd_thread;
static int wd_armed;
static int wd_stop;
static double wd_deadline;      /* now_s() clock */
static double wd_test_started;
static unsigned wd_budget_s;    /* of the running test */
static counts snap;             /* when the running test started */
static double run_started;

static void ts_at(struct timespec *ts, double t)
{
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* SIGKILL to every process whose parent is this one: servers a hung test
 * started must not outlive the run (they could hold its output pipes). */
static void kill_children(void)
{
    DIR *d = opendir("/proc");
    if (!d)
        return;
    pid_t self = getpid();
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == self)
            continue;
        char path[64], stat[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(stat, 1, sizeof stat - 1, f);
        fclose(f);
        stat[n] = '\0';
        /* "pid (comm) state ppid ...": comm may hold spaces and ')' */
        char *p = strrchr(stat, ')');
        char st;
        long ppid;
        if (p && sscanf(p + 1, " %c %ld", &st, &ppid) == 2 && ppid == self)
            kill((pid_t)pid, SIGKILL);
    }
    closedir(d);
}

static void result_line(const char *what, const char *sn, const char *tn);

/* Called by the watchdog with wd_mu held; does not return. */
static void on_timeout(void)
{
    const char *sn = cur_suite ? cur_suite : "?";
    const char *tn = cur_test ? cur_test : "?";
    double took = now_s() - wd_test_started;
    char buf[1024];
    int n = snprintf(buf, sizeof buf,
                     "\nTIMEOUT: %s:%s after %u s (ran %.1f s; TH_TEST_TIMEOUT"
                     " or th_test_timeout() sets the limit); the run ends"
                     " here\n",
                     sn, tn, wd_budget_s, took);
    if (n > 0)
        write_all(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    n = snprintf(buf, sizeof buf,
                 "\nSuite %s, Test %s had failures:\n"
                 "    1. TIMEOUT - did not finish within %u s\n",
                 sn, tn, wd_budget_s);
    if (n > 0)
        write_all(1, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    counts c = snap;
    c.suites_run++; /* CUnit counts a suite when it ends */
    c.tests_run++;
    c.tests_failed++;
    c.elapsed = now_s() - run_started;
    char extra[600];
    snprintf(extra, sizeof extra, "%s:%s timed out", sn, tn);
    result_line("timeout", sn, tn);
    print_summary(&c, extra);
    kill_children();
    _exit(EXIT_TIMEOUT);
}

static void *watchdog_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&wd_mu);
    while (!wd_stop) {
        if (!wd_armed) {
            pthread_cond_wait(&wd_cv, &wd_mu);
            continue;
        }
        if (now_s() >= wd_deadline)
            on_timeout();
        struct timespec ts;
        ts_at(&ts, wd_deadline);
        pthread_cond_timedwait(&wd_cv, &wd_mu, &ts);
    }
    pthread_mutex_unlock(&wd_mu);
    return NULL;
}

static int watchdog_start(void)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return -1;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&wd_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        return -1;
    /* the watchdog takes no signals: they go to the tests' threads */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&wd_thread, NULL, watchdog_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&wd_cv);
        return -1;
    }
    return 0;
}

static void watchdog_stop(void)
{
    pthread_mutex_lock(&wd_mu);
    wd_stop = 1;
    pthread_cond_signal(&wd_cv);
    pthread_mutex_unlock(&wd_mu);
    pthread_join(wd_thread, NULL);
    pthread_cond_destroy(&wd_cv);
}

static unsigned scaled(unsigned s)
{
    if (timeout_explicit)
        return s;
    return s > 0xFFFFFFFFu / timeout_scale ? 0xFFFFFFFFu : s * timeout_scale;
}

unsigned th_test_scale(void)
{
    return timeout_scale;
}

unsigned th_test_ms(unsigned ms)
{
    return ms > 0xFFFFFFFFu / timeout_scale ? 0xFFFFFFFFu : ms * timeout_scale;
}

void th_test_timeout(unsigned seconds)
{
    if (seconds == 0)
        return;
    pthread_mutex_lock(&wd_mu);
    if (wd_armed) {
        unsigned s = scaled(seconds);
        wd_budget_s = s;
        wd_deadline = now_s() + (double)s;
        pthread_cond_signal(&wd_cv);
    }
    pthread_mutex_unlock(&wd_mu);
}

/* ---- fatal signals ----------------------------------------------------------------- */

static const int FATAL_SIGS[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT,
                                 SIGINT,  SIGTERM};
#define N_FATAL (sizeof FATAL_SIGS / sizeof FATAL_SIGS[0])
static struct sigaction old_fatal[N_FATAL];
static volatile sig_atomic_t in_fatal;
static pid_t runner_pid; /* a forked child that crashes is not the test */

static const char *sig_name(int sig)
{
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "signal";
    }
}

/* Async-signal-safe: only write() and fixed buffers. */
static void put(char *buf, size_t cap, size_t *len, const char *s)
{
    while (*s && *len + 1 < cap)
        buf[(*len)++] = *s++;
}

static void put_uint(char *buf, size_t cap, size_t *len, unsigned v)
{
    char d[16];
    int i = 0;
    do {
        d[i++] = (char)('0' + v % 10);
        v /= 10;
    } while (v && i < 15);
    while (i > 0 && *len + 1 < cap)
        buf[(*len)++] = d[--i];
}

/* Appends "<what> suite:test\n" to $TH_TEST_RESULTS; async-signal-safe. */
static void result_line(const char *what, const char *sn, const char *tn)
{
    if (results_fd < 0 || !sn || !tn)
        return;
    char buf[600];
    size_t len = 0;
    put(buf, sizeof buf, &len, what);
    put(buf, sizeof buf, &len, " ");
    put(buf, sizeof buf, &len, sn);
    put(buf, sizeof buf, &len, ":");
    put(buf, sizeof buf, &len, tn);
    put(buf, sizeof buf, &len, "\n");
    write_all(results_fd, buf, len);
}

static void say_test(const char *what, const char *detail, int sig)
{
    char buf[700];
    size_t len = 0;
    const char *sn = cur_suite, *tn = cur_test;
    put(buf, sizeof buf, &len, "\n");
    put(buf, sizeof buf, &len, what);
    put(buf, sizeof buf, &len, ": ");
    if (sn && tn) {
        put(buf, sizeof buf, &len, sn);
        put(buf, sizeof buf, &len, ":");
        put(buf, sizeof buf, &len, tn);
    } else {
        put(buf, sizeof buf, &len, "(no test running)");
    }
    put(buf, sizeof buf, &len, ": ");
    put(buf, sizeof buf, &len, detail);
    if (sig > 0) {
        put(buf, sizeof buf, &len, " ");
        put_uint(buf, sizeof buf, &len, (unsigned)sig);
        put(buf, sizeof buf, &len, " (");
        put(buf, sizeof buf, &len, sig_name(sig));
        put(buf, sizeof buf, &len, ")");
    }
    put(buf, sizeof buf, &len, "\n");
    write_all(2, buf, len);
    result_line(strcmp(what, "CRASH") == 0 ? "crash" : "interrupted", sn, tn);
}

static void on_fatal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    size_t i = 0;
    while (i < N_FATAL && FATAL_SIGS[i] != sig)
        i++;
    /* One report: two threads that fault at once (the same bad answer
     * reaching two client threads) must not both print.  The exchange is
     * lock-free, so async-signal-safe. */
    if (getpid() == runner_pid && !__atomic_exchange_n(&in_fatal, 1,
                                                       __ATOMIC_SEQ_CST)) {
        int interrupt = sig == SIGINT || sig == SIGTERM;
        say_test(interrupt ? "INTERRUPTED" : "CRASH",
                 interrupt ? "stopped by signal" : "signal", sig);
    }
    /* Hand the signal to whoever had it before (the default action, or a
     * sanitizer's handler).  A fault raised by the CPU recurs when this
     * handler returns; one sent by kill() or raise() is sent again. */
    if (i < N_FATAL)
        sigaction(sig, &old_fatal[i], NULL);
    else
        signal(sig, SIG_DFL);
    int hw = si && si->si_code > 0 &&
             (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL);
    if (!hw)
        raise(sig);
}

static void install_fatal_handlers(void)
{
    runner_pid = getpid();
    /* a stack overflow still gets its message: an alternate stack, unless
     * something (a sanitizer) set one up already */
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && (cur.ss_flags & SS_DISABLE)) {
        size_t sz = 256 * 1024;
        void *mem = mmap(NULL, sz, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem != MAP_FAILED) {
            stack_t ss = {.ss_sp = mem, .ss_size = sz, .ss_flags = 0};
            if (sigaltstack(&ss, NULL) != 0)
                munmap(mem, sz);
        }
    }
    for (size_t i = 0; i < N_FATAL; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fatal;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        if (sigaction(FATAL_SIGS[i], &sa, &old_fatal[i]) != 0)
            old_fatal[i].sa_handler = SIG_DFL;
    }
}

/* A sanitizer that ends the process calls this first (weak: absent in
 * plain builds). */
extern void __sanitizer_set_death_callback(void (*callback)(void))
    __attribute__((weak));

static void on_sanitizer_death(void)
{
    /* not when on_fatal named the test already */
    if (cur_test && !in_fatal && getpid() == runner_pid)
        say_test("CRASH", "sanitizer error (report above)", 0);
}

/* ---- CUnit handlers ----------------------------------------------------------------- */

static void on_suite_start(const CU_pSuite suite)
{
    if (verbose)
        printf("\nSuite: %s", suite->pName);
}

static void on_test_start(const CU_pTest test, const CU_pSuite suite)
{
    cur_skipped = 0;
    pthread_mutex_lock(&wd_mu);
    cur_suite = suite->pName;
    cur_test = test->pName;
    wd_test_started = now_s();
    wd_budget_s = scaled(default_timeout_s);
    wd_deadline = wd_test_started + (double)wd_budget_s;
    wd_armed = 1;
    counts_now(&snap, run_started);
    pthread_cond_signal(&wd_cv);
    pthread_mutex_unlock(&wd_mu);
    if (verbose)
        printf("\n  Test: %s ...", test->pName);
}

static void on_test_complete(const CU_pTest test, const CU_pSuite suite,
                             const CU_pFailureRecord failure)
{
    pthread_mutex_lock(&wd_mu);
    wd_armed = 0;
    double took = now_s() - wd_test_started;
    if (cur_skipped && !failure)
        n_skipped++;
    cur_suite = NULL;
    cur_test = NULL;
    pthread_mutex_unlock(&wd_mu);
    slow_note(suite->pName, test->pName, took);
    result_line(failure ? "fail" : cur_skipped ? "skip" : "pass",
                suite->pName, test->pName);

    if (failure) {
        if (verbose)
            printf("FAILED (%.2f s)", took);
        else
            printf("\nSuite %s, Test %s had failures:", suite->pName,
                   test->pName);
        int i = 1;
        for (CU_pFailureRecord f = failure; f; f = f->pNext, i++)
            printf("\n    %d. %s:%u  - %s", i,
                   f->strFileName ? f->strFileName : "",
                   f->uiLineNumber, f->strCondition ? f->strCondition : "");
    } else if (verbose) {
        printf("%s (%.2f s)", cur_skipped ? "" : "passed", took);
    }
}

static void on_suite_init_failure(const CU_pSuite suite)
{
    printf("\nWARNING - Suite initialization failed for '%s'.", suite->pName);
}

static void on_suite_cleanup_failure(const CU_pSuite suite)
{
    printf("\nWARNING - Suite cleanup failed for '%s'.", suite->pName);
}

/* ---- selection ---------------------------------------------------------------------- */

static int is_hidden(const char *suite)
{
    for (const char *const *h = HIDDEN; *h; h++)
        if (strcmp(*h, suite) == 0)
            return 1;
    return 0;
}

static int n_names(int argc, char **argv)
{
    int n = 0;
    for (int i = 1; i < argc; i++)
        n += argv[i][0] != '-';
    return n;
}

static int same_suite(const char *arg, const char *suite)
{
    size_t n = strcspn(arg, ":");
    return strlen(suite) == n && strncmp(arg, suite, n) == 0;
}

static int wanted(const char *suite, int list, int argc, char **argv)
{
    if (list || n_names(argc, argv) == 0)
        return !is_hidden(suite);
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-' && same_suite(argv[i], suite))
            return 1;
    return 0;
}

/* Every name on the command line must be a suite, or suite:test. */
static int check_names(int argc, char **argv)
{
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-')
            continue;
        int found = 0;
        for (const char *const *s = SUITE_NAMES; *s && !found; s++)
            found = same_suite(argv[i], *s);
        if (!found) {
            fprintf(stderr, "%s: no suite named '%.*s'; try --list\n",
                    argv[0], (int)strcspn(argv[i], ":"), argv[i]);
            bad = 1;
        }
    }
    return bad ? -1 : 0;
}

/* With "suite:test" arguments, deactivate the other tests of that suite
 * (unless the whole suite is named too). */
static int select_tests(int argc, char **argv)
{
    int bad = 0;
    for (CU_pSuite s = CU_get_registry()->pSuite; s; s = s->pNext) {
        int whole = 0, some = 0;
        for (int i = 1; i < argc; i++) {
            if (argv[i][0] == '-' || !same_suite(argv[i], s->pName))
                continue;
            if (strchr(argv[i], ':'))
                some = 1;
            else
                whole = 1;
        }
        if (whole || !some)
            continue;
        for (CU_pTest t = s->pTest; t; t = t->pNext) {
            int keep = 0;
            for (int i = 1; i < argc && !keep; i++) {
                const char *colon = strchr(argv[i], ':');
                keep = argv[i][0] != '-' && colon &&
                       same_suite(argv[i], s->pName) &&
                       strcmp(t->pName, colon + 1) == 0;
            }
            if (!keep)
                CU_set_test_active(t, CU_FALSE);
        }
        for (int i = 1; i < argc; i++) {
            const char *colon = strchr(argv[i], ':');
            if (argv[i][0] == '-' || !colon || !same_suite(argv[i], s->pName))
                continue;
            if (!CU_get_test(s, colon + 1)) {
                fprintf(stderr, "%s: suite '%s' has no test '%s'; try --list\n",
                        argv[0], s->pName, colon + 1);
                bad = 1;
            }
        }
    }
    return bad ? -1 : 0;
}

/* ---- main --------------------------------------------------------------------------- */

static void read_settings(void)
{
    const char *to = getenv("TH_TEST_TIMEOUT");
    if (to && *to) {
        char *end;
        long v = strtol(to, &end, 10);
        if (*end == '\0' && v > 0 && v <= 1000000) {
            default_timeout_s = (unsigned)v;
            timeout_explicit = 1;
        } else {
            fprintf(stderr, "TH_TEST_TIMEOUT='%s' is not a number of seconds "
                            "(1..1000000); using %u\n",
                    to, default_timeout_s);
        }
    }
    if (strstr(TH_BUILD_DIR, "/san-"))
        timeout_scale = 2;
    const char *vg = getenv("TH_VALGRIND");
    if (vg && *vg)
        timeout_scale = 5;
    /* TH_TEST_SCALE=N multiplies every budget once more (a slow or busy
     * machine; make test-stress sets it). */
    const char *sc = getenv("TH_TEST_SCALE");
    if (sc && *sc) {
        char *end;
        long v = strtol(sc, &end, 10);
        if (*end == '\0' && v >= 1 && v <= 100)
            timeout_scale *= (unsigned)v;
        else
            fprintf(stderr, "TH_TEST_SCALE='%s' is not a factor (1..100); "
                            "ignored\n", sc);
    }
    verbose = getenv("TH_TEST_VERBOSE") != NULL;
    const char *rf = getenv("TH_TEST_RESULTS");
    if (rf && *rf) {
        results_fd = open(rf, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (results_fd < 0)
            fprintf(stderr, "TH_TEST_RESULTS='%s': %s; no results file\n",
                    rf, strerror(errno));
    }
}

int main(int argc, char **argv)
{
    read_settings();
    th_fronts_register_builtin(); /* the fronts' config sections */
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IONBF, 0);

    int list = argc > 1 && strcmp(argv[1], "--list") == 0;
    if (!list && check_names(argc, argv) != 0)
        return EXIT_USAGE;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return EXIT_USAGE;

#define TH_SUITE(name)                                                        \
    if (wanted(#name, list, argc, argv))                                      \
        th_suite_##name();
#include TH_SUITES_H
#undef TH_SUITE

    if (CU_get_error() != CUE_SUCCESS) {
        fprintf(stderr, "%s: registering the tests failed: %s\n", argv[0],
                CU_get_error_msg());
        CU_cleanup_registry();
        return EXIT_USAGE;
    }
    if (list) {
        for (CU_pSuite s = CU_get_registry()->pSuite; s; s = s->pNext)
            for (CU_pTest t = s->pTest; t; t = t->pNext)
                printf("%s:%s\n", s->pName, t->pName);
        CU_cleanup_registry();
        return 0;
    }
    if (select_tests(argc, argv) != 0) {
        CU_cleanup_registry();
        return EXIT_USAGE;
    }
    if (watchdog_start() != 0) {
        fprintf(stderr, "%s: cannot start the watchdog thread\n", argv[0]);
        CU_cleanup_registry();
        return EXIT_USAGE;
    }
    install_fatal_handlers();
    if (__sanitizer_set_death_callback)
        __sanitizer_set_death_callback(on_sanitizer_death);

    CU_set_suite_start_handler(on_suite_start);
    CU_set_test_start_handler(on_test_start);
    CU_set_test_complete_handler(on_test_complete);
    CU_set_suite_init_failure_handler(on_suite_init_failure);
    CU_set_suite_cleanup_failure_handler(on_suite_cleanup_failure);

    printf("toolhost %s tests (watchdog %u s per test)\n", TH_RUNNER_KIND,
           scaled(default_timeout_s));
    run_started = now_s();
    CU_run_all_tests();
    watchdog_stop();

    counts c;
    counts_now(&c, run_started);
    print_summary(&c, NULL);
    free_skips();
    CU_cleanup_registry();
    if (c.tests_run == 0) {
        fprintf(stderr, "no test ran\n");
        return EXIT_USAGE;
    }
    unsigned failed = c.tests_failed + c.suites_failed;
    return failed > 99 ? 99 : (int)failed;
}
