/* iso_cgroup.c - a cgroup v2 per isolated worker (iso_cgroup.h;
 * docs/isolation.md, "Containment").
 *
 * The host finds the cgroup2 mount (/proc/self/mountinfo: fstype
 * cgroup2; /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid system)
 * and its own cgroup (the `0::` line of /proc/self/cgroup), makes
 * toolhost-<pid> there (the test of whether it may: root, or a delegated
 * subtree) and, where cgroup.controllers lists memory or pids, enables
 * them in the subtree so that each leaf gets memory.max and pids.max.
 * A worker's child writes "0" to its leaf's cgroup.procs before execve
 * (iso_host.c, child_exec): nothing of the plugin runs outside it.
 *
 * The same leaves serve th/iso.h's cages (the end of this file): a
 * cgroup for a process tree the host starts itself (`toolhost check`).
 *
 * State: g_cg is written once under g_cg_once, read-only after.
 */
#include "iso_cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "th/iso.h"
#include "th/log.h"

/* pids.max = `processes` + this: the worker's init, its own threads (one
 * reader, one per running call) are tasks of the cgroup too. */
#define CG_OWN_TASKS 64
#define CG_MAX_DEPTH 16 /* sub-cgroups a plugin made: how deep we go */

static struct {
    bool ok;
    bool memory, pids;   /* enabled for the leaves */
    char sub[4096];      /* <host cgroup>/toolhost-<pid> */
    char why[256];       /* !ok: why not */
    char limits[256];    /* th_iso_cg_limits() */
    char note[400];      /* why not both limits, for the log */
} g_cg;
static pthread_once_t g_cg_once = PTHREAD_ONCE_INIT;
static pthread_once_t g_cg_log_once = PTHREAD_ONCE_INIT;

/* snprintf for paths and messages: cut at `cap` (a path that long is
 * refused later by the kernel). */
static void fmt(char *b, size_t cap, const char *f, ...)
    __attribute__((format(printf, 3, 4)));
static void fmt(char *b, size_t cap, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vsnprintf(b, cap, f, ap);
    va_end(ap);
}

static int64_t cg_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int th_iso_write_file(const char *dir, const char *file, const char *text)
{
    char path[4200];
    fmt(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    size_t n = strlen(text);
    ssize_t w = write(fd, text, n);
    int e = w == (ssize_t)n ? 0 : w < 0 ? errno : EIO;
    close(fd);
    return e;
}


/* Reads DIR/FILE into buf (NUL-terminated); bytes read or -1. */
static ssize_t cg_read(const char *dir, const char *file, char *buf,
                       size_t cap)
{
    char path[4200];
    fmt(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return n;
}

/* true when the space-separated `list` holds the word `w`. */
static bool has_word(const char *list, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = list; (p = strstr(p, w)); p += n)
        if ((p == list || p[-1] == ' ') &&
            (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
            return true;
    return false;
}

/* The cgroup2 mount point and the cgroup its root is, from mountinfo. */
static bool find_mount(char *mnt, size_t mcap, char *root, size_t rcap)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE */
        char r[2048], m[2048];
        if (sscanf(line, "%*s %*s %*s %2047s %2047s", r, m) != 2)
            continue;
        const char *dash = strstr(line, " - ");
        if (!dash || strncmp(dash + 3, "cgroup2 ", 8) != 0)
            continue;
        /* octal escapes (\040) in a path: not ours to guess */
        if (strchr(m, '\\') || strchr(r, '\\'))
            continue;
        fmt(mnt, mcap, "%s", m);
        fmt(root, rcap, "%s", r);
        found = true;
    }
    fclose(f);
    return found;
}

/* The host's cgroup in the v2 hierarchy (the `0::` line). */
static bool find_own(char *cg, size_t cap)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        if (strncmp(line, "0::", 3) == 0) {
            line[strcspn(line, "\n")] = '\0';
            fmt(cg, cap, "%s", line + 3);
            found = true;
        }
    fclose(f);
    return found;
}

/* Removes `dir` and the sub-cgroups in it, deepest first (rmdir of a
 * cgroup with no process: its control files go with it). */
static int rm_tree(const char *dir, int depth)
{
    if (rmdir(dir) == 0 || errno == ENOENT)
        return 0;
    if ((errno != EBUSY && errno != ENOTEMPTY) || depth >= CG_MAX_DEPTH)
        return -1;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *de;
    char path[4200];
    while ((de = readdir(d))) {
        if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 ||
            strcmp(de->d_name, "..") == 0)
            continue;
        fmt(path, sizeof path, "%s/%s", dir, de->d_name);
        rm_tree(path, depth + 1);
    }
    closedir(d);
    return rmdir(dir) == 0 || errno == ENOENT ? 0 : -1;
}

/* Calls fn(pid) for each pid in cgroup.procs of `dir` and its
 * sub-cgroups; how many. */
static int each_pid(const char *dir, int depth, void (*fn)(pid_t))
{
    char path[4200];
    fmt(path, sizeof path, "%s/cgroup.procs", dir);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int n = 0;
    long pid;
    while (fscanf(f, "%ld", &pid) == 1) {
        if (fn && pid > 0)
            fn((pid_t)pid);
        n++;
    }
    fclose(f);
    if (depth >= CG_MAX_DEPTH)
        return n;
    DIR *d = opendir(dir);
    if (!d)
        return n;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 ||
            strcmp(de->d_name, "..") == 0)
            continue;
        fmt(path, sizeof path, "%s/%s", dir, de->d_name);
        int k = each_pid(path, depth + 1, fn);
        if (k > 0)
            n += k;
    }
    closedir(d);
    return n;
}

static void kill9(pid_t pid)
{
    kill(pid, SIGKILL);
}

/* One pass of the kill: cgroup.kill (5.14+), else freeze (a frozen
 * process cannot fork; SIGKILL still ends it) and SIGKILL to each. */
static void kill_dir(const char *dir)
{
    if (th_iso_write_file(dir, "cgroup.kill", "1") == 0)
        return;
    th_iso_write_file(dir, "cgroup.freeze", "1");
    each_pid(dir, 0, kill9);
}

/* 1: populated, 0: empty, -1: unreadable (gone). */
static int populated_fd(int fd)
{
    char buf[256];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    const char *p = strstr(buf, "populated ");
    return p ? p[10] == '1' : -1;
}

bool th_iso_cg_populated(const char *dir)
{
    char buf[256];
    if (cg_read(dir, "cgroup.events", buf, sizeof buf) <= 0)
        return false;
    const char *p = strstr(buf, "populated ");
    return p && p[10] == '1';
}

/* Kills what is left in the subtree and removes it (at exit). */
static void cg_atexit(void)
{
    if (!g_cg.ok)
        return;
    if (rm_tree(g_cg.sub, 0) == 0)
        return;
    kill_dir(g_cg.sub);
    char evp[4200];
    fmt(evp, sizeof evp, "%s/cgroup.events", g_cg.sub);
    int fd = open(evp, O_RDONLY | O_CLOEXEC);
    int64_t end = cg_now_ms() + 2000;
    while (fd >= 0 && populated_fd(fd) == 1 && cg_now_ms() < end) {
        struct pollfd p = {fd, POLLPRI, 0};
        poll(&p, 1, 50);
        kill_dir(g_cg.sub);
    }
    if (fd >= 0)
        close(fd);
    rm_tree(g_cg.sub, 0);
}

/* Enables `ctl` in DIR/cgroup.subtree_control unless it is there. */
static int enable(const char *dir, const char *ctl)
{
    char buf[512];
    if (cg_read(dir, "cgroup.subtree_control", buf, sizeof buf) >= 0 &&
        has_word(buf, ctl))
        return 0;
    char w[32];
    fmt(w, sizeof w, "+%s", ctl);
    return th_iso_write_file(dir, "cgroup.subtree_control", w);
}

/* Subtrees of hosts that died by SIGKILL (no atexit): toolhost-PID with
 * no process PID and nothing in them.  (A host in another PID namespace
 * sharing this cgroup would look dead too: only empty ones go.) */
static void sweep_dead(const char *host)
{
    DIR *d = opendir(host);
    if (!d)
        return;
    struct dirent *de;
    char path[4200];
    int n = 0;
    while ((de = readdir(d)) && n < 64) {
        int pid;
        char end;
        if (de->d_type != DT_DIR ||
            sscanf(de->d_name, "toolhost-%d%c", &pid, &end) != 1 ||
            pid <= 0 || pid == (int)getpid() ||
            kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        fmt(path, sizeof path, "%s/%s", host, de->d_name);
        if (!th_iso_cg_populated(path) && rm_tree(path, 0) == 0)
            n++;
    }
    closedir(d);
    if (n)
        th_log_info("host: removed %d cgroup subtree%s of hosts no longer "
                    "running under %s",
                    n, n == 1 ? "" : "s", host);
}

static void setup_once(void)
{
    const char *env = getenv("TOOLHOST_CGROUP");
    char mnt[2048] = "", root[2048] = "/", own[2048] = "";
    if (env && strcmp(env, "off") == 0) {
        fmt(g_cg.why, sizeof g_cg.why, "cgroups off ($TOOLHOST_CGROUP)");
        return;
    }
    if (env && env[0])
        fmt(mnt, sizeof mnt, "%s", env);
    else if (!find_mount(mnt, sizeof mnt, root, sizeof root)) {
        fmt(g_cg.why, sizeof g_cg.why, "no cgroup2 mount");
        return;
    }
    if (!find_own(own, sizeof own)) {
        fmt(g_cg.why, sizeof g_cg.why,
                 "no cgroup v2 line in /proc/self/cgroup");
        return;
    }
    /* The host's cgroup relative to the mount's root. */
    const char *rel = own;
    size_t rl = strlen(root);
    if (strcmp(root, "/") != 0) {
        if (strncmp(own, root, rl) != 0 || (own[rl] && own[rl] != '/')) {
            fmt(g_cg.why, sizeof g_cg.why,
                     "the host's cgroup %.100s is not under the mount %.100s",
                     own, mnt);
            return;
        }
        rel = own + rl;
    }
    char host[4096];
    fmt(host, sizeof host, "%s%s%s", mnt, rel[0] == '/' ? "" : "/",
             strcmp(rel, "/") == 0 ? "" : rel);
    struct stat st;
    char probe[4200];
    fmt(probe, sizeof probe, "%s/cgroup.procs", host);
    if (stat(probe, &st) != 0) {
        fmt(g_cg.why, sizeof g_cg.why, "%.200s: %s", host,
                 strerror(errno));
        return;
    }
    sweep_dead(host);
    fmt(g_cg.sub, sizeof g_cg.sub, "%s/toolhost-%d", host,
             (int)getpid());
    if (mkdir(g_cg.sub, 0755) != 0 && errno != EEXIST) {
        fmt(g_cg.why, sizeof g_cg.why,
                 "cannot create a cgroup in %.180s: %s (not root, no "
                 "delegated subtree)",
                 host, strerror(errno));
        return;
    }
    g_cg.ok = true;
    atexit(cg_atexit);
    /* Controllers: the host's cgroup must pass them down (a cgroup with
     * processes of its own may not, except the root: EBUSY), then the
     * subtree to its leaves. */
    char ctl[512] = "", not_why[160] = "";
    cg_read(host, "cgroup.controllers", ctl, sizeof ctl);
    ctl[strcspn(ctl, "\n")] = '\0';
    static const char *const want[] = {"memory", "pids"};
    bool *got[] = {&g_cg.memory, &g_cg.pids};
    for (int i = 0; i < 2; i++) {
        if (!has_word(ctl, want[i]))
            continue;
        int e = enable(host, want[i]);
        if (!e)
            e = enable(g_cg.sub, want[i]);
        if (!e)
            *got[i] = true;
        else if (!not_why[0])
            fmt(not_why, sizeof not_why, "%s: %s", want[i],
                     strerror(e));
    }
    if (g_cg.memory || g_cg.pids)
        fmt(g_cg.limits, sizeof g_cg.limits, "%s%s%s",
            g_cg.memory ? "memory.max" : "",
            g_cg.memory && g_cg.pids ? ", " : "",
            g_cg.pids ? "pids.max" : "");
    else
        fmt(g_cg.limits, sizeof g_cg.limits, "none");
    if (!(g_cg.memory && g_cg.pids))
        fmt(g_cg.note, sizeof g_cg.note,
            " (cgroup.controllers: \"%s\"%s%s)", ctl,
            not_why[0] ? "; not enabled: " : "", not_why);
}

/* What the workers get, logged once by the first th_iso_cg_setup() (not
 * by a cage alone: `toolhost check` says what applied itself). */
static void log_once(void)
{
    if (!g_cg.ok)
        return;
    th_log_info("host: isolated workers get a cgroup each under %s; "
                "limits by cgroup: %s%s",
                g_cg.sub, g_cg.limits, g_cg.note);
    if (!(g_cg.memory && g_cg.pids))
        th_log_info("host: %s%s%sprocess_limits stay rlimits in the worker",
                    g_cg.memory ? "" : "no memory controller for the "
                                       "workers' cgroups (memory.max); ",
                    g_cg.pids ? "" : "no pids controller (pids.max); ",
                    "");
}

/* setup_once, and what it gave when it failed. */
static bool setup(char *why, size_t cap)
{
    pthread_once(&g_cg_once, setup_once);
    if (!g_cg.ok && why && cap)
        fmt(why, cap, "%s", g_cg.why);
    return g_cg.ok;
}

bool th_iso_cg_setup(char *why, size_t cap)
{
    bool ok = setup(why, cap);
    pthread_once(&g_cg_log_once, log_once);
    return ok;
}

const char *th_iso_cg_limits(void)
{
    return g_cg.limits;
}

int th_iso_cg_make(const char *name, uint64_t memory, uint32_t processes,
                   th_iso_cg *cg)
{
    cg->dir = NULL;
    cg->procs_fd = cg->dir_fd = -1;
    cg->removed = false;
    if (!g_cg.ok)
        return ENOENT;
    char leaf[128];
    size_t k = 0;
    for (const char *p = name; *p && k < sizeof leaf - 1; p++) {
        bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' ||
                  (*p == '.' && k > 0);
        leaf[k++] = ok ? *p : '_';
    }
    leaf[k] = '\0';
    size_t n = strlen(g_cg.sub) + 1 + k + 1;
    char *dir = malloc(n);
    if (!dir)
        return ENOMEM;
    fmt(dir, n, "%s/%s", g_cg.sub, leaf);
    /* one left by a worker of an earlier host with this pid: empty it */
    if (mkdir(dir, 0755) != 0) {
        int e = errno;
        if (e != EEXIST) {
            free(dir);
            return e;
        }
        kill_dir(dir);
        rm_tree(dir, 0);
        if (mkdir(dir, 0755) != 0) {
            e = errno;
            free(dir);
            return e;
        }
    }
    char num[32];
    if (g_cg.memory && memory) {
        fmt(num, sizeof num, "%llu", (unsigned long long)memory);
        int e = th_iso_write_file(dir, "memory.max", num);
        if (e)
            th_log_warn("cgroup %s: memory.max %s: %s", dir, num, strerror(e));
        th_iso_write_file(dir, "memory.swap.max", "0");
    }
    if (g_cg.pids && processes) {
        fmt(num, sizeof num, "%u", processes + CG_OWN_TASKS);
        int e = th_iso_write_file(dir, "pids.max", num);
        if (e)
            th_log_warn("cgroup %s: pids.max %s: %s", dir, num, strerror(e));
    }
    char path[4200];
    fmt(path, sizeof path, "%s/cgroup.procs", dir);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    int dfd = fd >= 0 ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        rmdir(dir);
        free(dir);
        return e;
    }
    cg->dir = dir;
    cg->procs_fd = fd;
    cg->dir_fd = dfd;
    return 0;
}

void th_iso_cg_placed(th_iso_cg *cg)
{
    if (cg->dir && cg->procs_fd >= 0)
        close(cg->procs_fd);
    if (cg->dir && cg->dir_fd >= 0)
        close(cg->dir_fd);
    cg->procs_fd = cg->dir_fd = -1;
}

void th_iso_cg_kill(const th_iso_cg *cg)
{
    if (cg->dir && !__atomic_load_n(&cg->removed, __ATOMIC_ACQUIRE))
        kill_dir(cg->dir);
}

int th_iso_cg_remove(th_iso_cg *cg, int64_t ms)
{
    th_iso_cg_placed(cg);
    if (!cg->dir || __atomic_load_n(&cg->removed, __ATOMIC_ACQUIRE))
        return 0;
    char path[4200];
    fmt(path, sizeof path, "%s/cgroup.events", cg->dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int64_t end = cg_now_ms() + ms;
    int pop = fd >= 0 ? populated_fd(fd) : -1;
    if (pop == 1)
        kill_dir(cg->dir);
    /* cgroup.events changes wake poll() with POLLPRI; the kill is
     * repeated on each wake (without cgroup.kill a fork may have slipped
     * between the listing and the signals). */
    while (pop == 1) {
        int64_t left = end - cg_now_ms();
        if (left <= 0)
            break;
        struct pollfd p = {fd, POLLPRI, 0};
        if (poll(&p, 1, left < 100 ? (int)left : 100) < 0 && errno != EINTR)
            break;
        if ((pop = populated_fd(fd)) == 1)
            kill_dir(cg->dir);
    }
    if (fd >= 0)
        close(fd);
    int rc = pop == 1 ? -1 : rm_tree(cg->dir, 0);
    if (rc)
        th_log_warn("cgroup %s: %s", cg->dir,
                    pop == 1 ? "processes left in it after the kill"
                             : "cannot be removed");
    else
        __atomic_store_n(&cg->removed, true, __ATOMIC_RELEASE);
    return rc;
}

void th_iso_cg_destroy(th_iso_cg *cg)
{
    th_iso_cg_placed(cg);
    free(cg->dir);
    cg->dir = NULL;
}

int th_iso_cg_count(const th_iso_cg *cg)
{
    return cg->dir && !__atomic_load_n(&cg->removed, __ATOMIC_ACQUIRE) ? each_pid(cg->dir, 0, NULL) : -1;
}

/* ---- cages: th/iso.h's cgroup for a tree the host starts itself ------ */

struct th_iso_cage {
    th_iso_cg cg;
    pid_t opener;   /* the process that opened it: it stays outside */
};

th_iso_cage *th_iso_cage_open(const char *name, uint64_t memory, char *why,
                              size_t cap)
{
    if (!setup(why, cap))
        return NULL;
    th_iso_cage *c = calloc(1, sizeof *c);
    if (!c) {
        fmt(why, cap, "out of memory");
        return NULL;
    }
    int e = th_iso_cg_make(name, memory, 0, &c->cg);
    if (e) {
        fmt(why, cap, "cannot create a cgroup in %.200s: %s", g_cg.sub,
            strerror(e));
        free(c);
        return NULL;
    }
    c->opener = getpid();
    return c;
}

int th_iso_cage_enter(const th_iso_cage *c)
{
    if (!c || c->cg.procs_fd < 0)
        return EBADF;
    /* only a child the opener forked: the opener itself (the host, for a
     * plugin's cage) would move into the cage its own kill empties */
    if (getpid() == c->opener)
        return EPERM;
    ssize_t w = write(c->cg.procs_fd, "0", 1);
    return w == 1 ? 0 : w < 0 ? errno : EIO;
}

void th_iso_cage_placed(th_iso_cage *c)
{
    if (c)
        th_iso_cg_placed(&c->cg);
}

const char *th_iso_cage_dir(const th_iso_cage *c)
{
    return c ? c->cg.dir : NULL;
}

int th_iso_cage_kill_wait(th_iso_cage *c, int64_t ms)
{
    return c ? th_iso_cg_remove(&c->cg, ms) : 0;
}

void th_iso_cage_forget(th_iso_cage *c)
{
    if (!c)
        return;
    th_iso_cg_destroy(&c->cg); /* closes this copy's fds, frees dir */
    free(c);
}

void th_iso_cage_close(th_iso_cage *c)
{
    if (!c)
        return;
    if (c->cg.dir && !c->cg.removed)
        th_iso_cg_remove(&c->cg, 1000);
    th_iso_cg_destroy(&c->cg);
    free(c);
}
