/* test_dl_guard.c - th_dl_close_guarded() (host/core/dl_guard.c) when the
 * stacks of threads cannot be read: a child process installs a seccomp
 * filter that makes process_vm_readv() fail with EPERM (as a hardened
 * container may), then closes an object one of its threads sleeps in.
 * The object must stay mapped (deferred) while the thread sleeps:
 * "cannot read" is not "not inside"; once the thread is gone it is
 * unloaded.  Without the filter the same close is deferred too (the
 * thread is seen inside), then unloaded once the thread has left.  On the
 * old code the EPERM case unmapped the object at once and the child died
 * of SIGSEGV when the thread woke. */
#include <CUnit/CUnit.h>
#include <dlfcn.h>
#include <errno.h>
#include <seccomp.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"
#include "dl_guard.h"

#define SLEEP_MS 300

/* Under valgrind dl_guard counts every later thread as inside (its
 * registers are valgrind's): nothing to tell apart there. */
static bool under_valgrind(void)
{
    const char *p = getenv("LD_PRELOAD");
    return p && strstr(p, "vgpreload");
}

static void ms_sleep(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Child exit codes. */
enum { C_OK = 0, C_LOAD = 10, C_SECCOMP = 11, C_NOT_DEFERRED = 12,
       C_NOT_UNLOADED = 13, C_STILL_READABLE = 14 };

/* In the child: loads dlg_sleeper.so (with its snapshot), starts its
 * thread, optionally forbids process_vm_readv, closes the object while
 * the thread sleeps in it, then waits for the thread to leave. */
static int child(bool forbid)
{
    /* the snapshot a few clock ticks after the fork: this (main) thread
     * is older than the load, so only the sleeper is looked at (with
     * EPERM, every thread born later would stay unknown) */
    ms_sleep(30);
    th_dl_snap *snap = th_dl_snap_take();
    void *dl = dlopen(th_test_build_path("fixtures/dlg_sleeper.so"),
                      RTLD_NOW | RTLD_LOCAL);
    if (!dl)
        return C_LOAD;
    th_dl_snap_attach(dl, snap);
    int (*start)(long) = (int (*)(long))dlsym(dl, "dlg_start");
    volatile int *started = dlsym(dl, "dlg_started");
    if (!start || !started || start(SLEEP_MS) != 0)
        return C_LOAD;
    for (int i = 0; i < 500 && !*started; i++)
        ms_sleep(2);
    ms_sleep(20); /* most likely in nanosleep() now (else sampled) */
    if (forbid) {
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (!ctx ||
            seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM),
                             SCMP_SYS(process_vm_readv), 0) != 0 ||
            seccomp_load(ctx) != 0) {
            if (ctx)
                seccomp_release(ctx);
            return C_SECCOMP;
        }
        seccomp_release(ctx);
        char b[8];
        struct iovec lo = {b, sizeof b}, re = {b, sizeof b};
        errno = 0;
        if (process_vm_readv(getpid(), &lo, 1, &re, 1, 0) >= 0 ||
            errno != EPERM)
            return C_STILL_READABLE;
    }
    if (th_dl_close_guarded(dl, "dlg")) /* true: closed at once */
        return C_NOT_DEFERRED;
    if (th_dl_deferred() != 1)
        return C_NOT_DEFERRED; /* unmapped under a sleeping thread */
    /* th-unload looks again every 50 ms: while the thread sleeps the
     * object stays (unknown is not "not inside") */
    ms_sleep(SLEEP_MS / 2);
    if (th_dl_deferred() != 1)
        return C_NOT_DEFERRED;
    /* the thread wakes, returns through the object and ends (a crash
     * here would be the old behaviour); once it is gone, its stack need
     * not be read: the object is unloaded.  `done` is not read: it lives
     * in the object. */
    for (int i = 0; i < 300 && th_dl_deferred() != 0; i++)
        ms_sleep(10);
    return th_dl_deferred() == 0 ? C_OK : C_NOT_UNLOADED;
}

/* TSan cannot start threads in a child forked from a threaded process
 * (the runner's watchdog): the child's sleeper thread, th-unload. */
#if defined(__SANITIZE_THREAD__)
#define FORK_THREADS_OK false
#else
#define FORK_THREADS_OK true
#endif

static int run_child(bool forbid)
{
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        alarm(20); /* bounded, whatever happens */
        _exit(child(forbid));
    }
    int st = 0;
    CU_ASSERT_FATAL(waitpid(pid, &st, 0) == pid);
    if (WIFSIGNALED(st)) {
        fprintf(stderr, "\ndl_guard child died of signal %d\n",
                WTERMSIG(st));
        return -WTERMSIG(st);
    }
    return WEXITSTATUS(st);
}

/* process_vm_readv() refused (EPERM): the object stays mapped. */
static void test_readv_eperm_keeps_mapped(void)
{
    if (under_valgrind())
        TH_SKIP("under valgrind every later thread counts as inside");
    if (!FORK_THREADS_OK)
        TH_SKIP("TSan: no threads in a child of a threaded process");
    int rc = run_child(true);
    if (rc == C_SECCOMP)
        TH_SKIP("no seccomp filter can be installed here");
    if (rc != C_OK)
        fprintf(stderr, "\ndl_guard child: %d\n", rc);
    CU_ASSERT_EQUAL(rc, C_OK);
}

/* The control: stacks readable, the object is deferred while the thread
 * sleeps in it, then unloaded. */
static void test_readable_unloads_later(void)
{
    if (under_valgrind())
        TH_SKIP("under valgrind every later thread counts as inside");
    if (!FORK_THREADS_OK)
        TH_SKIP("TSan: no threads in a child of a threaded process");
    CU_ASSERT_EQUAL(run_child(false), C_OK);
}

void th_suite_dl_guard(void)
{
    CU_pSuite s = CU_add_suite("dl_guard", NULL, NULL);
    CU_add_test(s, "readv_eperm_keeps_mapped", test_readv_eperm_keeps_mapped);
    CU_add_test(s, "readable_unloads_later", test_readable_unloads_later);
}
