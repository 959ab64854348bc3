/* dl_guard.c - dlclose() only when no thread can be inside the object's
 * code (see dl_guard.h for the why and the rule).
 *
 * How a thread is looked at, without stopping it: /proc/self/task/TID/
 * syscall gives the stack and instruction pointers of a thread that is
 * blocked (in a system call or not) and says "running" for one that runs
 * or waits for a CPU; that one gets one sample signal whose handler copies
 * the interrupted registers.  The instruction pointer must not be in the
 * object's executable segments, and the stack, read from the top of its
 * mapping down, must meet a return address into the host program before
 * one into the object (stack_points_in()).  The stack is read with
 * process_vm_readv() so that a thread that exits meanwhile costs an error,
 * not a fault.  Only threads born after the dlopen() are looked at: the
 * host's own threads left the plugin's code when its calls ended, which
 * fini() already waited for.
 *
 * A thread that cannot be looked at counts as inside: the object stays
 * mapped longer (the memory of one object).  So does one whose stack
 * cannot be read (process_vm_readv() refused by a seccomp filter or an
 * LSM: EPERM, ENOSYS; EFAULT; anything else) unless the thread is gone
 * (ESRCH, or no such thread any more): the warning says why.  Under
 * valgrind the registers seen there are valgrind's, so any thread born
 * later counts as inside.
 */
#include "dl_guard.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "th/log.h"

#define MAX_RANGES 8
#define RECHECK_MS 50               /* th-unload looks again this often */
#define RUNNING_TRIES 25            /* at close: a running thread, again */
#define RUNNING_WAIT_US 2000
#define SCAN_MAX ((size_t)16 << 20) /* stack bytes read per thread at most */
#define SCAN_CHUNK ((size_t)64 << 10)

typedef struct range {
    uintptr_t lo, hi;
} range;

/* When the dlopen() began, in the clock ticks of a thread's start time
 * (/proc/.../stat field 22: CLOCK_BOOTTIME in USER_HZ): O(1) to take, so
 * a host loading many plugins pays nothing for it. */
struct th_dl_snap {
    unsigned long long ticks;
};

typedef struct node {
    void *dl;
    th_dl_snap *snap;
    char *name;       /* deferred only */
    int64_t since_ms; /* deferred only */
    struct node *next;
} node;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static node *g_open;      /* handles with their snapshot */
static node *g_deferred;  /* fini() done, not yet dlclose()d */
static unsigned g_n_deferred;
static bool g_unloader;   /* th-unload runs */
static unsigned g_passes; /* th-unload's passes over g_deferred, ended */

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t now_ms(void)
{
    return now_us() / 1000;
}

static int cmp_pid(const void *a, const void *b)
{
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
    return x < y ? -1 : x > y;
}

/* The threads of this process, sorted; -1 when they cannot be listed. */
static int list_tids(pid_t **out, size_t *n)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    size_t cap = 64, k = 0;
    pid_t *a = malloc(cap * sizeof *a);
    struct dirent *e;
    while (a && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        if (k == cap) {
            pid_t *b = realloc(a, 2 * cap * sizeof *a);
            if (!b) {
                free(a);
                a = NULL;
                break;
            }
            a = b;
            cap *= 2;
        }
        a[k++] = (pid_t)atoi(e->d_name);
    }
    closedir(d);
    if (!a)
        return -1;
    qsort(a, k, sizeof *a, cmp_pid);
    *out = a;
    *n = k;
    return 0;
}

static long clk_tck(void)
{
    long hz = sysconf(_SC_CLK_TCK);
    return hz > 0 ? hz : 100;
}

th_dl_snap *th_dl_snap_take(void)
{
    th_dl_snap *s = malloc(sizeof *s);
    struct timespec ts;
    if (!s)
        return NULL;
    if (clock_gettime(CLOCK_BOOTTIME, &ts) != 0) {
        free(s);
        return NULL;
    }
    long hz = clk_tck();
    /* truncated, as the kernel truncates a start time: a thread started
     * in the same tick counts as born later (looked at; never skipped) */
    s->ticks = (unsigned long long)ts.tv_sec * (unsigned long long)hz +
               (unsigned long long)ts.tv_nsec / (1000000000ULL / (unsigned long long)hz);
    return s;
}

void th_dl_snap_free(th_dl_snap *s)
{
    free(s);
}

void th_dl_snap_attach(void *dl, th_dl_snap *s)
{
    node *n = s ? calloc(1, sizeof *n) : NULL;
    if (!n) {
        th_dl_snap_free(s); /* then every thread counts as born later */
        return;
    }
    n->dl = dl;
    n->snap = s;
    pthread_mutex_lock(&g_mu);
    n->next = g_open;
    g_open = n;
    pthread_mutex_unlock(&g_mu);
}

#define PF_EXITING_FLAG 0x4u /* the kernel's PF_EXITING: in its exit */

/* The thread started at or after the snapshot's tick (or cannot tell),
 * and is not on its way out.  A thread that exits (a plugin thread that
 * fini() joined: the join returns while the kernel still lists it) runs
 * no more user code, though its stack still names its start routine. */
static bool born_later(const th_dl_snap *s, pid_t tid)
{
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno != ENOENT; /* gone: nothing to look at */
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return true;
    text[n] = '\0';
    /* "pid (comm) state ppid ...": comm may hold spaces and ')'; after the
     * last ')' come fields 3 (state), ..., 9 (flags), ..., 22 (start) */
    char *p = strrchr(text, ')'), *save = NULL, *f[20];
    int k = 0;
    if (!p)
        return true;
    for (char *t = strtok_r(p + 1, " ", &save); t && k < 20;
         t = strtok_r(NULL, " ", &save))
        f[k++] = t;
    if (k < 20)
        return true;
    unsigned long flags = strtoul(f[9 - 3], NULL, 10);
    if (flags & PF_EXITING_FLAG)
        return false;
    if (!s)
        return true;
    return strtoull(f[22 - 3], NULL, 10) >= s->ticks;
}

/* ---- the object's code -------------------------------------------------------------- */

typedef struct rctx {
    uintptr_t base;
    const char *name;
    range *r;
    int n;
    size_t mapped; /* bytes of every PT_LOAD segment */
} rctx;

static int phdr_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    rctx *c = data;
    if (info->dlpi_addr != c->base || !info->dlpi_name ||
        strcmp(info->dlpi_name, c->name) != 0)
        return 0;
    for (int i = 0; i < info->dlpi_phnum && c->n < MAX_RANGES; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD)
            c->mapped += ph->p_memsz;
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        c->r[c->n].lo = c->base + ph->p_vaddr;
        c->r[c->n].hi = c->base + ph->p_vaddr + ph->p_memsz;
        c->n++;
    }
    return 1;
}

/* The executable segments of `dl`: how many, or -1; *mapped: the bytes
 * of all its segments. */
static int ranges_of(void *dl, range *r, size_t *mapped)
{
    struct link_map *lm = NULL;
    *mapped = 0;
    if (dlinfo(dl, RTLD_DI_LINKMAP, &lm) != 0 || !lm)
        return -1;
    rctx c = {(uintptr_t)lm->l_addr, lm->l_name ? lm->l_name : "", r, 0, 0};
    dl_iterate_phdr(phdr_cb, &c);
    *mapped = c.mapped;
    return c.n;
}

static bool in_ranges(uintptr_t v, const range *r, int nr)
{
    for (int i = 0; i < nr; i++)
        if (v >= r[i].lo && v < r[i].hi)
            return true;
    return false;
}

/* ---- threads ------------------------------------------------------------------------ */

/* T_UNREAD: its stack could not be read (the errno in *unread): kept
 * as inside, like T_INSIDE, with that reason in the warning. */
enum { T_CLEAR, T_INSIDE, T_RUNNING, T_UNREAD };

/* The mappings of the process (/proc/self/maps), read once per pass. */
typedef struct maps {
    range *m;
    size_t n;
    bool read;
} maps;

static void maps_read(maps *mp)
{
    mp->read = true;
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return;
    size_t cap = 0;
    unsigned long a, b;
    while (fscanf(f, "%lx-%lx", &a, &b) == 2) {
        if (mp->n == cap) {
            size_t nc = cap ? 2 * cap : 256;
            range *m = realloc(mp->m, nc * sizeof *m);
            if (!m)
                break;
            mp->m = m;
            cap = nc;
        }
        mp->m[mp->n].lo = a;
        mp->m[mp->n].hi = b;
        mp->n++;
        int ch;
        while ((ch = fgetc(f)) != '\n' && ch != EOF)
            ;
    }
    fclose(f);
}

/* The end of the mapping holding `addr` (0: none). */
static uintptr_t mapping_end(maps *mp, uintptr_t addr)
{
    if (!mp->read)
        maps_read(mp);
    for (size_t i = 0; i < mp->n; i++)
        if (addr >= mp->m[i].lo && addr < mp->m[i].hi)
            return mp->m[i].hi;
    return 0;
}

/* Under TSan a plugin thread's stack showed a return address into the
 * host program 850 KB above its own frames: most likely TSan's per-thread
 * state, which lives in static TLS at the top of the stack mapping and
 * keeps host PCs (its shadow call stack).  There the first return address
 * into the object anywhere on the stack counts.  Stale ones (the reason
 * for the stop) were seen under ASan only. */
#if defined(__SANITIZE_THREAD__)
#define HOST_CODE_STOPS 0
#else
#define HOST_CODE_STOPS 1
#endif

/* The executable segments of the host's own program (computed once). */
static range g_exe[MAX_RANGES];
static int g_n_exe;
static pthread_once_t g_exe_once = PTHREAD_ONCE_INIT;

static int exe_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    /* the first object is the program itself */
    for (int i = 0; i < info->dlpi_phnum && g_n_exe < MAX_RANGES; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            g_exe[g_n_exe].lo = info->dlpi_addr + ph->p_vaddr;
            g_exe[g_n_exe].hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
            g_n_exe++;
        }
    }
    return 1;
}

static void exe_find(void)
{
    dl_iterate_phdr(exe_cb, NULL);
}

/* `v` is a return address: the instruction before it is a call.  On
 * x86-64 the call forms a compiler emits (E8 rel32; FF /2 through a
 * register, [reg], [reg+disp8], [rip+disp32], [reg+disp32], with or
 * without REX); elsewhere every word counts.  A function pointer kept in a
 * frame (a host callback the plugin holds) is not one. */
static bool ret_addr(uintptr_t v)
{
#if defined(__x86_64__)
    uint8_t b[8];
    struct iovec lo = {b, sizeof b}, re = {(void *)(v - sizeof b), sizeof b};
    if (v < sizeof b ||
        process_vm_readv(getpid(), &lo, 1, &re, 1, 0) != (ssize_t)sizeof b)
        return false;
    const uint8_t *e = b + sizeof b; /* e[-1] is the byte before v */
    if (e[-5] == 0xe8)
        return true;
    for (int len = 2; len <= 7; len++) {
        const uint8_t *op = e - len;
        if (op[0] != 0xff || (op[1] & 0x38) != 0x10)
            continue;
        int mod = op[1] >> 6, rm = op[1] & 7;
        int want = 2 + (mod == 1 ? 1 : mod == 2 ? 4 : 0) +
                   (mod != 3 && rm == 4 ? 1 : 0) +
                   (mod == 0 && rm == 5 ? 4 : 0);
        if (want == len)
            return true;
    }
    return false;
#else
    (void)v;
    return true;
#endif
}

/* Reads the stack from its top (`end`) down to sp and takes the first
 * return address into the object's code or into the host program's.
 * The top holds the thread's first frames (and glibc's descriptor with
 * its start routine): a thread the object started (directly, or through a
 * library's trampoline) meets the object there before any host code.  A
 * host thread meets host code first; return addresses into the object
 * further down are stale, left in unwritten parts of live frames by a
 * call it once ran (seen in the reload suite under ASan), and must not
 * keep the object mapped.  1: inside, 0: not, -1: the stack could not be
 * read (*err: process_vm_readv's errno; EFAULT for a short read). */
static int stack_points_in(uintptr_t sp, uintptr_t end, const range *r,
                           int nr, uintptr_t *buf, int *err)
{
    pthread_once(&g_exe_once, exe_find);
    sp &= ~(uintptr_t)(sizeof(uintptr_t) - 1);
    end &= ~(uintptr_t)(sizeof(uintptr_t) - 1);
    size_t len = end > sp ? end - sp : 0;
    if (len > SCAN_MAX)
        len = SCAN_MAX;
    for (size_t done = 0; done < len;) {
        size_t want = len - done < SCAN_CHUNK ? len - done : SCAN_CHUNK;
        uintptr_t from = end - done - want;
        struct iovec lo = {buf, want}, re = {(void *)from, want};
        errno = 0;
        ssize_t got = process_vm_readv(getpid(), &lo, 1, &re, 1, 0);
        if (got != (ssize_t)want) {
            /* not "not inside": unknown (the caller tells a thread that
             * went away from a read that was refused) */
            *err = got < 0 && errno ? errno : EFAULT;
            return -1;
        }
        for (size_t i = want / sizeof(uintptr_t); i-- > 0;) {
            bool mine = in_ranges(buf[i], r, nr);
            if (!mine &&
                (!HOST_CODE_STOPS || !in_ranges(buf[i], g_exe, g_n_exe)))
                continue;
            if (!ret_addr(buf[i]))
                continue;
            return mine;
        }
        done += want;
    }
    return 0;
}

/* Whether thread `tid` of this process still exists. */
static bool thread_alive(pid_t tid)
{
    return syscall(SYS_tgkill, (int)getpid(), (int)tid, 0) == 0 ||
           errno != ESRCH;
}

/* Whether the thread is in the object's code: its instruction pointer, or
 * its stack read from the top (stack_points_in): T_INSIDE, T_CLEAR, or
 * T_UNREAD (*unread: why) when its stack could not be read and the thread
 * is still there (ESRCH, or a thread gone meanwhile: T_CLEAR). */
static int stack_or_pc_in(pid_t tid, uintptr_t sp, uintptr_t pc,
                          const range *r, int nr, uintptr_t *buf, maps *mp,
                          int *unread)
{
    if (in_ranges(pc, r, nr))
        return T_INSIDE;
    uintptr_t end = mapping_end(mp, sp);
    if (!end)
        return T_CLEAR;
    int err = 0;
    int in = stack_points_in(sp, end, r, nr, buf, &err);
    if (in >= 0)
        return in ? T_INSIDE : T_CLEAR;
    if (err == ESRCH || !thread_alive(tid))
        return T_CLEAR;
    *unread = err;
    return T_UNREAD;
}

/* ---- a running thread: one sample of its registers ----------------------------------
 * A thread that runs has no registers in /proc.  It gets SAMPLE_SIG; the
 * handler copies the interrupted stack and instruction pointers and
 * returns (SA_RESTART: most interrupted system calls go on).  One request
 * at a time (g_sample_mu).  When the signal is blocked, taken by someone
 * else, or late, the thread stays unknown: counted as inside. */

#define SAMPLE_SIG (SIGRTMIN + 4)
#define SAMPLE_WAIT_US 20000

static pthread_mutex_t g_sample_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_sample_once = PTHREAD_ONCE_INIT;
static bool g_sample_ok; /* our handler is installed */
static atomic_int g_req_tid;
static atomic_uint g_req_seq, g_got_seq;
static atomic_uintptr_t g_got_sp, g_got_pc;

static void on_sample(int sig, siginfo_t *si, void *ucv)
{
    (void)sig;
    (void)si;
    int saved = errno;
    ucontext_t *uc = ucv;
    if (uc && (pid_t)syscall(SYS_gettid) == atomic_load(&g_req_tid)) {
        uintptr_t sp = 0, pc = 0;
#if defined(__x86_64__)
        sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
        pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
        sp = (uintptr_t)uc->uc_mcontext.sp;
        pc = (uintptr_t)uc->uc_mcontext.pc;
#endif
        atomic_store(&g_got_sp, sp);
        atomic_store(&g_got_pc, pc);
        atomic_store(&g_got_seq, atomic_load(&g_req_seq));
    }
    errno = saved;
}

static void sample_install(void)
{
    struct sigaction old;
    if (sigaction(SAMPLE_SIG, NULL, &old) != 0)
        return;
    bool taken = (old.sa_flags & SA_SIGINFO)
                     ? old.sa_sigaction != NULL
                     : old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN;
    if (taken) /* the plugin's or the embedder's: leave it alone */
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sample;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    g_sample_ok = sigaction(SAMPLE_SIG, &sa, NULL) == 0;
}

/* 0 with *sp, *pc; 1 when the thread is gone; -1 when unknown. */
static int sample(pid_t tid, uintptr_t *sp, uintptr_t *pc)
{
    pthread_once(&g_sample_once, sample_install);
    if (!g_sample_ok)
        return -1;
    pthread_mutex_lock(&g_sample_mu);
    unsigned seq = atomic_fetch_add(&g_req_seq, 1) + 1;
    atomic_store(&g_req_tid, (int)tid);
    int rc = -1;
    if (syscall(SYS_tgkill, (int)getpid(), (int)tid, SAMPLE_SIG) != 0) {
        rc = errno == ESRCH ? 1 : -1;
    } else {
        for (int waited = 0; waited < SAMPLE_WAIT_US; waited += 100) {
            if (atomic_load(&g_got_seq) == seq) {
                *sp = atomic_load(&g_got_sp);
                *pc = atomic_load(&g_got_pc);
                rc = *sp ? 0 : -1;
                break;
            }
            usleep(100);
        }
    }
    atomic_store(&g_req_tid, 0);
    pthread_mutex_unlock(&g_sample_mu);
    return rc;
}

static int look_at(pid_t tid, const range *r, int nr, uintptr_t *buf,
                   maps *mp, int *unread)
{
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? T_CLEAR : T_RUNNING; /* gone; unknown */
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return errno == ESRCH ? T_CLEAR : T_RUNNING;
    text[n] = '\0';
    uintptr_t sp, pc;
    if (strncmp(text, "running", 7) == 0) {
        int got = sample(tid, &sp, &pc);
        if (got != 0)
            return got == 1 ? T_CLEAR : T_RUNNING;
        return stack_or_pc_in(tid, sp, pc, r, nr, buf, mp, unread);
    }
    /* "NR ARG1..ARG6 SP PC" in a system call, "-1 SP PC" blocked outside */
    char *tok[12], *save = NULL;
    int k = 0;
    for (char *t = strtok_r(text, " \n", &save); t && k < 12;
         t = strtok_r(NULL, " \n", &save))
        tok[k++] = t;
    if (k < 3)
        return T_RUNNING;
    sp = (uintptr_t)strtoull(tok[k - 2], NULL, 0);
    pc = (uintptr_t)strtoull(tok[k - 1], NULL, 0);
    return stack_or_pc_in(tid, sp, pc, r, nr, buf, mp, unread);
}

static bool under_valgrind(void)
{
    const char *p = getenv("LD_PRELOAD");
    return p && strstr(p, "vgpreload");
}

/* True when no thread born after the snapshot is inside the ranges; a
 * running thread is looked at again up to `tries` times.  *tid_out: a
 * thread that is (or may be) inside; *unread: the errno when its stack
 * could not be read (0 otherwise). */
static bool nobody_inside(const range *r, int nr, const th_dl_snap *s,
                          int tries, pid_t *tid_out, bool *running,
                          int *unread)
{
    pid_t self = (pid_t)syscall(SYS_gettid);
    pid_t *tids = NULL;
    size_t n = 0;
    *tid_out = 0;
    *running = false;
    *unread = 0;
    if (list_tids(&tids, &n) != 0)
        return false;
    bool *done = calloc(n ? n : 1, sizeof *done);
    uintptr_t *buf = malloc(SCAN_CHUNK);
    bool vg = under_valgrind(), ok = false;
    if (!done || !buf)
        goto out;
    for (int t = 0; t < tries; t++) {
        bool pending = false;
        maps mp = {0};
        for (size_t i = 0; i < n; i++) {
            if (done[i])
                continue;
            if (tids[i] == self || !born_later(s, tids[i])) {
                done[i] = true;
                continue;
            }
            int st = vg ? T_INSIDE
                        : look_at(tids[i], r, nr, buf, &mp, unread);
            if (st == T_INSIDE || st == T_UNREAD) {
                *tid_out = tids[i];
                *running = false;
                free(mp.m);
                goto out;
            }
            if (st == T_CLEAR)
                done[i] = true;
            else {
                pending = true;
                *tid_out = tids[i];
                *running = true;
            }
        }
        free(mp.m);
        if (!pending) {
            ok = true;
            goto out;
        }
        if (t + 1 < tries)
            usleep(RUNNING_WAIT_US);
    }
out:
    free(buf);
    free(done);
    free(tids);
    return ok;
}

/* ---- closing ----------------------------------------------------------------------- */

static th_dl_snap *take_snap(void *dl)
{
    pthread_mutex_lock(&g_mu);
    th_dl_snap *s = NULL;
    for (node **pp = &g_open; *pp; pp = &(*pp)->next) {
        if ((*pp)->dl != dl)
            continue;
        node *n = *pp;
        *pp = n->next;
        s = n->snap;
        free(n);
        break;
    }
    pthread_mutex_unlock(&g_mu);
    return s;
}

/* 1: closed (or nothing to wait for), 0: someone is still inside. */
static int try_close(void *dl, const th_dl_snap *s, int tries, pid_t *tid,
                     bool *running, size_t *mapped, int *unread)
{
    range r[MAX_RANGES];
    int nr = ranges_of(dl, r, mapped);
    *unread = 0;
    if (nr > 0 && !nobody_inside(r, nr, s, tries, tid, running, unread))
        return 0;
    dlclose(dl);
    return 1;
}

static void *unloader_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "th-unload");
    for (;;) {
        usleep(RECHECK_MS * 1000);
        pthread_mutex_lock(&g_mu);
        node *list = g_deferred, *keep = NULL;
        g_deferred = NULL;
        pthread_mutex_unlock(&g_mu);
        unsigned closed = 0;
        while (list) {
            node *n = list;
            list = n->next;
            pid_t tid = 0;
            bool running;
            size_t mapped;
            int unread;
            if (try_close(n->dl, n->snap, 3, &tid, &running, &mapped,
                          &unread)) {
                th_log_info("unload: plugin %s: no thread is inside its code "
                            "any more: unloaded %lld ms after its fini()",
                            n->name, (long long)(now_ms() - n->since_ms));
                th_dl_snap_free(n->snap);
                free(n->name);
                free(n);
                closed++;
            } else {
                n->next = keep;
                keep = n;
            }
        }
        pthread_mutex_lock(&g_mu);
        g_n_deferred -= closed;
        g_passes++;
        while (keep) {
            node *n = keep;
            keep = n->next;
            n->next = g_deferred;
            g_deferred = n;
        }
        if (!g_deferred) {
            g_unloader = false;
            pthread_mutex_unlock(&g_mu);
            return NULL;
        }
        pthread_mutex_unlock(&g_mu);
    }
}

bool th_dl_close_guarded(void *dl, const char *name)
{
    if (!dl)
        return true;
    th_dl_snap *s = take_snap(dl);
    pid_t tid = 0;
    bool running = false;
    size_t mapped = 0;
    int unread = 0;
    int64_t t0 = now_us();
    if (try_close(dl, s, RUNNING_TRIES, &tid, &running, &mapped, &unread)) {
        th_log_debug("unload: plugin %s: no thread inside its code (checked "
                     "in %lld us): unmapped",
                     name ? name : "?", (long long)(now_us() - t0));
        th_dl_snap_free(s);
        return true;
    }
    if (!name)
        name = "?";
    node *n = calloc(1, sizeof *n);
    char *nm = n ? strdup(name) : NULL;
    if (!n || !nm) {
        free(n);
        th_dl_snap_free(s);
        th_log_warn("unload: plugin %s: thread %d may still be inside its "
                    "code after fini(); out of memory to wait for it: its "
                    "object stays mapped",
                    name, (int)tid);
        return false;
    }
    n->dl = dl;
    n->snap = s;
    n->name = nm;
    n->since_ms = now_ms();
    bool vg = under_valgrind();
    char comm[64] = "?", cpath[64];
    snprintf(cpath, sizeof cpath, "/proc/self/task/%d/comm", (int)tid);
    FILE *cf = fopen(cpath, "re");
    if (cf) {
        if (fgets(comm, sizeof comm, cf))
            comm[strcspn(comm, "\n")] = '\0';
        fclose(cf);
    }
    if (vg)
        th_log_debug("unload: plugin %s stays mapped: under valgrind threads "
                     "cannot be looked at",
                     name);
    else if (unread)
        th_log_warn("unload: plugin %s: the stack of thread %d (%s) cannot "
                    "be read (process_vm_readv: %s) after fini(): whether "
                    "it is inside the plugin's code is unknown, so its "
                    "object (%zu KiB) stays mapped (the safe choice); "
                    "checked again every %d ms",
                    name, (int)tid, comm, strerror(unread),
                    (mapped + 1023) / 1024, RECHECK_MS);
    else
        th_log_warn("unload: plugin %s: thread %d (%s) %s after fini(): "
                    "its object (%zu KiB) stays mapped until no thread is "
                    "inside its code; checked every %d ms",
                    name, (int)tid, comm,
                    running ? "kept running (it could not be looked at)"
                            : "is still inside its code",
                    (mapped + 1023) / 1024, RECHECK_MS);
    /* Under valgrind no thread can be looked at, so no later check would
     * end differently: the object stays mapped to the end, and no
     * th-unload thread is left running at exit (valgrind counts its
     * thread-local block as possibly lost). */
    pthread_mutex_lock(&g_mu);
    n->next = g_deferred;
    g_deferred = n;
    g_n_deferred++;
    bool start = !g_unloader && !vg;
    if (start)
        g_unloader = true;
    pthread_mutex_unlock(&g_mu);
    if (!start)
        return false;
    pthread_t th;
    pthread_attr_t at;
    int rc = pthread_attr_init(&at);
    if (rc == 0) {
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&th, &at, unloader_main, NULL);
        pthread_attr_destroy(&at);
    }
    if (rc != 0) {
        /* stays mapped: the next close that defers tries again */
        pthread_mutex_lock(&g_mu);
        g_unloader = false;
        pthread_mutex_unlock(&g_mu);
        th_log_warn("unload: cannot start th-unload (%s): plugin %s stays "
                    "mapped",
                    strerror(rc), name);
    }
    return false;
}

unsigned th_dl_deferred(void)
{
    pthread_mutex_lock(&g_mu);
    unsigned n = g_n_deferred;
    pthread_mutex_unlock(&g_mu);
    return n;
}

unsigned th_dl_passes(void)
{
    pthread_mutex_lock(&g_mu);
    unsigned n = g_passes;
    pthread_mutex_unlock(&g_mu);
    return n;
}
