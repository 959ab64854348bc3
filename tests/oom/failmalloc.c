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
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
    bool any = nth || from || report_path[0];
    unsetenv("FAILMALLOC_NTH");
    unsetenv("FAILMALLOC_FROM");
    unsetenv("FAILMALLOC_REPORT");
    unsetenv("FAILMALLOC_FIRE");
    unsetenv("FAILMALLOC_PROG");
    /* Counting starts here: the allocations above are not counted. */
    atomic_store(&n_allocs, 0);
    if (any) {
        armed_pid = getpid();
        pthread_atfork(NULL, NULL, failmalloc_child);
        atomic_store(&armed, true);
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

/* Whether this allocation fails. */
static bool fail_now(void)
{
    if (!atomic_load_explicit(&armed, memory_order_relaxed))
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
    return fail_now() ? NULL : __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    return fail_now() ? NULL : __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    if (p && n == 0)
        return __libc_realloc(p, n);
    return fail_now() ? NULL : __libc_realloc(p, n);
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
    if (fail_now())
        return ENOMEM;
    void *p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
    return fail_now() ? NULL : __libc_memalign(align, n);
}

void *memalign(size_t align, size_t n)
{
    return fail_now() ? NULL : __libc_memalign(align, n);
}

void *valloc(size_t n)
{
    return fail_now() ? NULL : __libc_valloc(n);
}

void *pvalloc(size_t n)
{
    return fail_now() ? NULL : __libc_pvalloc(n);
}
