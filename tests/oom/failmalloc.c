/* failmalloc.c - an LD_PRELOAD shim that makes the Nth allocation fail, for
 * the allocation-failure sweep (tests/oom/run-oom, `make test-oom`) and the
 * oom integration suite.
 *
 *   LD_PRELOAD=build/tests/oom/failmalloc.so FAILMALLOC_NTH=N toolhost ...
 *
 * Environment, read once when the shim is loaded:
 *   FAILMALLOC_NTH=N      the Nth allocation (1-based) fails, and only it
 *   FAILMALLOC_FROM=N     every allocation from the Nth on fails
 *   FAILMALLOC_REPORT=F   at exit, append one line to file F:
 *                         "allocs=A failed=K pid=P" (A allocations counted,
 *                         K of them failed), written with write(2) only
 *   FAILMALLOC_PROG=NAME  arm only in a program whose executable is named
 *                         NAME (e.g. toolhost): a wrapper that runs it
 *                         (timeout, env, a shell) loads the shim unarmed
 *                         and leaves the variables for the program
 *   FAILMALLOC_FIRE=F     when the first injected failure happens, append
 *                         "fired=N pid=P" to file F (a test learns that the
 *                         failure was injected, and where)
 *   FAILMALLOC_ONLY=FN    count (and fail) only the calls of FN (malloc,
 *                         calloc, realloc, ...): aims a failure at one
 *                         allocation site, e.g. calloc for a struct
 *   FAILMALLOC_IN=SYM     count (and fail) only allocations made while the
 *                         exported function SYM is on the stack (found with
 *                         backtrace() and dladdr(), e.g. uv_loop_init or
 *                         uv_queue_work): aims failures inside a library
 *   FAILMALLOC_ARM_SIGNAL=S
 *                         count nothing until signal S (a number, e.g. 12
 *                         for SIGUSR2) arrives; from then on count from 0.
 *                         The shim's handler appends "armed pid=P" to the
 *                         FIRE file first, so a test knows when to act.
 * When armed, a crash (SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE) writes the
 * stack to stderr before the signal's default action (unless the program
 * installs handlers of its own).
 * With neither NTH nor FROM the shim only counts (the sweep's first run,
 * which learns how many allocation points a session has).
 *
 * Only the process that loaded the shim with these variables counts: the
 * variables are removed from the environment at load (a program it execs
 * loads the shim unarmed), and a child made by fork() without exec is
 * disarmed by an atfork handler and allocates normally.
 *
 * What counts: malloc, calloc, realloc (a realloc to size 0 is a free and
 * is not counted), reallocarray, posix_memalign, aligned_alloc, memalign,
 * valloc, pvalloc.  The C library's own allocating functions (strdup,
 * asprintf, getline, fopen, dlopen, ...) call malloc through its public,
 * interposable symbol, so they count and fail too.  The real allocator is
 * glibc's __libc_* entry points: no dlsym() (which itself allocates) is
 * needed.  Counting is one atomic increment: any thread may allocate.
 */
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

static atomic_ullong n_allocs;  /* allocations counted so far */
static atomic_ullong n_failed;  /* of which failed */
static unsigned long long nth;  /* 0: none */
static unsigned long long from; /* 0: none */
static pid_t armed_pid;         /* 0: not counting at all */
static atomic_bool armed;       /* false in a forked child */
static char report_path[512];
static char fire_path[512];
static atomic_bool fired;
static char only_fn[16];        /* "": every function counts */
static char in_sym[64];         /* "": wherever the allocation comes from */
static __thread bool in_check;  /* inside the FAILMALLOC_IN check */
static int arm_signal;          /* 0: counting from the start */

/* Formats "KEY=V" pairs without stdio (which allocates). */
static size_t put_num(char *p, unsigned long long v)
{
    char t[24];
    size_t n = 0;
    do {
        t[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        p[i] = t[n - 1 - i];
    return n;
}

static size_t put_str(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n);
    return n;
}

static void append_line(const char *path, const char *line, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, len);
    (void)w;
    close(fd);
}

static unsigned long long env_num(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    unsigned long long n = 0;
    for (; *v >= '0' && *v <= '9'; v++)
        n = n * 10 + (unsigned long long)(*v - '0');
    return n;
}

static void env_path(const char *name, char *dst, size_t cap)
{
    const char *v = getenv(name);
    if (v && strlen(v) < cap)
        memcpy(dst, v, strlen(v) + 1);
}

/* FAILMALLOC_ARM_SIGNAL: counting starts now. */
static void on_arm_signal(int sig)
{
    (void)sig;
    int saved = errno;
    if (fire_path[0]) {
        char line[64];
        size_t n = put_str(line, "armed pid=");
        n += put_num(line + n, (unsigned long long)getpid());
        line[n++] = '\n';
        append_line(fire_path, line, n);
    }
    atomic_store(&n_allocs, 0);
    atomic_store(&armed, true);
    errno = saved;
}

/* A crash of the armed process: its stack on stderr (what the sweep's log
 * shows), then the signal's default action. */
static void on_crash(int sig)
{
    void *f[64];
    int n = backtrace(f, 64);
    static const char head[] = "failmalloc: crashed; stack:\n";
    ssize_t w = write(2, head, sizeof head - 1);
    (void)w;
    backtrace_symbols_fd(f, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* A child made by fork() allocates normally. */
static void failmalloc_child(void)
{
    atomic_store(&armed, false);
}

__attribute__((constructor)) static void failmalloc_init(void)
{
    const char *prog = getenv("FAILMALLOC_PROG");
    if (prog && *prog) {
        char exe[512];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0)
            return;
        exe[n] = '\0';
        const char *base = strrchr(exe, '/');
        base = base ? base + 1 : exe;
        if (strcmp(base, prog) != 0)
            return; /* not the program: the variables stay for it */
    }
    nth = env_num("FAILMALLOC_NTH");
    from = env_num("FAILMALLOC_FROM");
    env_path("FAILMALLOC_REPORT", report_path, sizeof report_path);
    env_path("FAILMALLOC_FIRE", fire_path, sizeof fire_path);
    env_path("FAILMALLOC_ONLY", only_fn, sizeof only_fn);
    env_path("FAILMALLOC_IN", in_sym, sizeof in_sym);
    if (in_sym[0]) { /* the first backtrace() loads the unwinder: now */
        void *f[4];
        (void)backtrace(f, 4);
    }
    arm_signal = (int)env_num("FAILMALLOC_ARM_SIGNAL");
    bool any = nth || from || report_path[0];
    unsetenv("FAILMALLOC_NTH");
    unsetenv("FAILMALLOC_FROM");
    unsetenv("FAILMALLOC_REPORT");
    unsetenv("FAILMALLOC_FIRE");
    unsetenv("FAILMALLOC_PROG");
    unsetenv("FAILMALLOC_ONLY");
    unsetenv("FAILMALLOC_IN");
    unsetenv("FAILMALLOC_ARM_SIGNAL");
    /* Counting starts here: the allocations above are not counted. */
    atomic_store(&n_allocs, 0);
    if (any) {
        armed_pid = getpid();
        pthread_atfork(NULL, NULL, failmalloc_child);
        void *f[4];
        (void)backtrace(f, 4); /* loads the unwinder now */
        static const int deadly[] = {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE};
        for (size_t i = 0; i < sizeof deadly / sizeof deadly[0]; i++)
            signal(deadly[i], on_crash);
        if (arm_signal > 0) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_arm_signal;
            sigemptyset(&sa.sa_mask);
            sa.sa_flags = SA_RESTART;
            sigaction(arm_signal, &sa, NULL);
        } else {
            atomic_store(&armed, true);
        }
    }
}

__attribute__((destructor)) static void failmalloc_fini(void)
{
    if (!armed_pid || getpid() != armed_pid || !report_path[0])
        return;
    char line[128];
    size_t n = put_str(line, "allocs=");
    n += put_num(line + n, atomic_load(&n_allocs));
    n += put_str(line + n, " failed=");
    n += put_num(line + n, atomic_load(&n_failed));
    n += put_str(line + n, " pid=");
    n += put_num(line + n, (unsigned long long)getpid());
    line[n++] = '\n';
    append_line(report_path, line, n);
}

/* Whether the function named by FAILMALLOC_IN is on the stack. */
static bool on_stack(void)
{
    if (in_check)
        return false;
    in_check = true;
    void *f[48];
    int n = backtrace(f, 48);
    bool found = false;
    for (int i = 1; i < n && !found; i++) {
        Dl_info di;
        if (dladdr(f[i], &di) && di.dli_sname &&
            strcmp(di.dli_sname, in_sym) == 0)
            found = true;
    }
    in_check = false;
    return found;
}

/* Whether this allocation, by function fn, fails. */
static bool fail_now_fn(const char *fn)
{
    if (!atomic_load_explicit(&armed, memory_order_relaxed))
        return false;
    if (only_fn[0] && strcmp(fn, only_fn) != 0)
        return false;
    if (in_sym[0] && !on_stack())
        return false;
    unsigned long long k = atomic_fetch_add(&n_allocs, 1) + 1;
    bool fail = (nth && k == nth) || (from && k >= from);
    if (!fail)
        return false;
    atomic_fetch_add(&n_failed, 1);
    if (fire_path[0] && !atomic_exchange(&fired, true)) {
        char line[64];
        size_t n = put_str(line, "fired=");
        n += put_num(line + n, k);
        n += put_str(line + n, " pid=");
        n += put_num(line + n, (unsigned long long)getpid());
        line[n++] = '\n';
        append_line(fire_path, line, n);
    }
    errno = ENOMEM;
    return true;
}

void *malloc(size_t n)
{
    return fail_now_fn("malloc") ? NULL : __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    return fail_now_fn("calloc") ? NULL : __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    if (p && n == 0)
        return __libc_realloc(p, n);
    return fail_now_fn("realloc") ? NULL : __libc_realloc(p, n);
}

void *reallocarray(void *p, size_t n, size_t m)
{
    if (m && n > SIZE_MAX / m) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, n * m);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    if (align < sizeof(void *) || (align & (align - 1)))
        return EINVAL;
    if (fail_now_fn("posix_memalign"))
        return ENOMEM;
    void *p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
    return fail_now_fn("aligned_alloc") ? NULL : __libc_memalign(align, n);
}

void *memalign(size_t align, size_t n)
{
    return fail_now_fn("memalign") ? NULL : __libc_memalign(align, n);
}

void *valloc(size_t n)
{
    return fail_now_fn("valloc") ? NULL : __libc_valloc(n);
}

void *pvalloc(size_t n)
{
    return fail_now_fn("pvalloc") ? NULL : __libc_pvalloc(n);
}
