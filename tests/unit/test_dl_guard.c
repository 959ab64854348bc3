/* test_dl_guard.c - th_dl_close_guarded() (host/core/plugins/dl_guard.c) when the
 * stacks of threads cannot be read: a child process installs a seccomp
 * filter that makes process_vm_readv() fail with EPERM (as a hardened
 * container may), then closes an object one of its threads blocks in.
 * The object must stay mapped (deferred) while the thread blocks:
 * "cannot read" is not "not inside"; once the thread is gone it is
 * unloaded.  Without the filter the same close is deferred too (the
 * thread is seen inside), then unloaded once the thread has left.  On the
 * old code the EPERM case unmapped the object at once and the child died
 * of SIGSEGV when the thread woke.
 *
 * Nothing here waits for a time to pass: the thread blocks in read() on a
 * pipe until the test writes to it (seen blocked through /proc), "stays
 * mapped" is checked after th-unload's passes looked at it again
 * (th_dl_passes), and every wait is for an event, bounded by th_test_ms. */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <seccomp.h>
#include <stdbool.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"
#include "plugins/dl_guard.h"
#include "th/log.h"

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

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Thread `tid` of this process is blocked in read(2): its
 * /proc/self/task/TID/syscall names the system call it sleeps in. */
static bool blocked_in_read(int tid)
{
    char path[64], text[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return false;
    text[n] = '\0';
    char want[16];
    snprintf(want, sizeof want, "%d ", (int)SYS_read);
    return strncmp(text, want, strlen(want)) == 0;
}

/* Child exit codes. */
enum { C_OK = 0, C_LOAD = 10, C_SECCOMP = 11, C_NOT_DEFERRED = 12,
       C_NOT_UNLOADED = 13, C_STILL_READABLE = 14, C_NOT_BLOCKED = 15,
       C_NO_PASS = 16, C_NOT_EPERM = 17 };

/* In the child: loads dlg_sleeper.so (with its snapshot), starts its
 * thread, waits until it blocks in read() inside the object, optionally
 * forbids process_vm_readv, closes the object, sees it kept over two
 * passes of th-unload, then lets the thread go and waits for the object
 * to be unloaded. */
static int child(bool forbid)
{
    /* the snapshot at least one clock tick (10 ms at USER_HZ 100) after
     * the fork: this (main) thread is older than the load, so only the
     * sleeper is looked at (with EPERM, every thread born later would
     * stay unknown).  A clock requirement, not a scheduling one: any
     * sleep of 30 ms spans a tick. */
    ms_sleep(30);
    FILE *logf = tmpfile();
    if (!logf)
        return C_LOAD;
    th_log_set_fd(fileno(logf));
    th_log_set_level(TOOLHOST_LOG_WARN);
    int pfd[2];
    if (pipe(pfd) != 0)
        return C_LOAD;
    th_dl_snap *snap = th_dl_snap_take();
    void *dl = dlopen(th_test_build_path("fixtures/dlg_sleeper.so"),
                      RTLD_NOW | RTLD_LOCAL);
    if (!dl)
        return C_LOAD;
    th_dl_snap_attach(dl, snap);
    int (*start)(int) = (int (*)(int))dlsym(dl, "dlg_start");
    volatile int *started = dlsym(dl, "dlg_started");
    volatile int *tid = dlsym(dl, "dlg_tid");
    if (!start || !started || !tid || start(pfd[0]) != 0)
        return C_LOAD;
    long long until = mono_ms() + th_test_ms(10000);
    while (!(*started && blocked_in_read(*tid)) && mono_ms() < until)
        ms_sleep(1);
    if (!*started || !blocked_in_read(*tid)) {
        char path[64], text[512] = "";
        snprintf(path, sizeof path, "/proc/self/task/%d/syscall", *tid);
        FILE *f = fopen(path, "re");
        if (f) {
            if (!fgets(text, sizeof text, f))
                text[0] = '\0';
            fclose(f);
        }
        fprintf(stderr, "\ndl_guard child: started %d, thread %d, syscall "
                "\"%s\"\n", *started, *tid, text);
        return C_NOT_BLOCKED;
    }
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
        return C_NOT_DEFERRED; /* unmapped under a blocked thread */
    if (forbid) {
        /* kept for the reason under test: the stack could not be read */
        char want[160];
        snprintf(want, sizeof want, "cannot be read (process_vm_readv: %s)",
                 strerror(EPERM));
        char text[4096];
        ssize_t got = pread(fileno(logf), text, sizeof text - 1, 0);
        text[got > 0 ? got : 0] = '\0';
        if (!strstr(text, want)) {
            fprintf(stderr, "\ndl_guard child log:\n%s\n", text);
            return C_NOT_EPERM;
        }
    }
    /* th-unload looks again every 50 ms: two of its passes, the second
     * begun after the close, find the thread still blocked and keep the
     * object (unknown is not "not inside") */
    unsigned p0 = th_dl_passes();
    until = mono_ms() + th_test_ms(10000);
    while (th_dl_passes() < p0 + 2 && mono_ms() < until)
        ms_sleep(1);
    if (th_dl_passes() < p0 + 2)
        return C_NO_PASS;
    if (th_dl_deferred() != 1)
        return C_NOT_DEFERRED;
    /* the thread wakes, returns through the object and ends (a crash
     * here would be the old behaviour); once it is gone, its stack need
     * not be read: the object is unloaded.  `done` is not read: it lives
     * in the object. */
    if (write(pfd[1], "g", 1) != 1)
        return C_LOAD;
    until = mono_ms() + th_test_ms(10000);
    while (th_dl_deferred() != 0 && mono_ms() < until)
        ms_sleep(1);
    return th_dl_deferred() == 0 ? C_OK : C_NOT_UNLOADED;
}

/* Every other thread of this process sleeps in futex(2) (a condition
 * variable: the runner's watchdog), none is inside malloc.  Why: GCC 12's
 * ASan allocator takes no lock around fork(), so a child forked while
 * another thread holds one of its locks inherits it locked, and the
 * child's new thread hangs in its first calloc (seen: the sleeper never
 * started, its stack in SizeClassAllocator64::GetFromAllocator; the
 * runner's watchdog was still starting, when this test runs first). */
static bool others_in_futex(void)
{
    pid_t self = (pid_t)syscall(SYS_gettid);
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return true; /* cannot tell: go on */
    bool quiet = true;
    struct dirent *e;
    char want[16];
    snprintf(want, sizeof want, "%d ", (int)SYS_futex);
    while (quiet && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || atoi(e->d_name) == self)
            continue;
        char path[300], text[256];
        snprintf(path, sizeof path, "/proc/self/task/%s/syscall", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue; /* gone */
        ssize_t n = read(fd, text, sizeof text - 1);
        close(fd);
        text[n > 0 ? n : 0] = '\0';
        quiet = strncmp(text, want, strlen(want)) == 0;
    }
    closedir(d);
    return quiet;
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
    /* The child counts deferred objects from zero and needs its own
     * th-unload: an object an earlier suite left deferred (its th-unload
     * running, g_unloader set, at the fork) would break both.  Such an
     * object is unloaded once its thread ends. */
    long long until = mono_ms() + th_test_ms(10000);
    while (th_dl_deferred() != 0 && mono_ms() < until)
        ms_sleep(1);
    CU_ASSERT_EQUAL_FATAL(th_dl_deferred(), 0);
    /* no other thread in the allocator at the fork (others_in_futex) */
    until = mono_ms() + th_test_ms(10000);
    while (!others_in_futex() && mono_ms() < until)
        ms_sleep(1);
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        alarm(th_test_ms(20000) / 1000); /* bounded, whatever happens */
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
