/* exec_run.c - one call of a declared command: argv and env built from the
 * arguments (never through a shell), stdout and stderr streamed to the host
 * as they arrive, cancellation and the tool's timeout polled every POLL_MS,
 * and the command ended with SIGTERM, then SIGKILL after the plugin's
 * kill_grace.
 *
 * The command's whole tree is contained by a keeper: a process forked for
 * the call that starts a session of its own (its group), marks itself a
 * child subreaper (PR_SET_CHILD_SUBREAPER) and forks the command.  Every
 * descendant that loses its parent - a daemon that double-forks, a
 * `setsid sleep 300 &` that leaves the group - is re-parented to the
 * keeper, not to init, so at the call's end the keeper kills its children
 * (read from /proc/self/task/TID/children) round after round until none
 * is left, reaps them, and exits.  A call leaves no process behind, even
 * one that left the process group.
 *
 * Where the host gives cages (ABI 1.3, toolhost_host_api.cage_open: a
 * cgroup of the host's subtree per call) the keeper enters the call's
 * cage first thing after fork(), so the command and everything it starts
 * are in that cgroup whatever they do, including killing the keeper
 * (whose orphans would otherwise go to init and outlive the call).  When
 * the keeper is done the host kills the cage whole (cgroup.kill), waits
 * until it is empty and removes it, before the call answers.  Without a
 * cage (an older host, cgroups off or unavailable, an isolated worker
 * whose own cgroup holds the command) the keeper alone contains the tree;
 * the log says which applies each time it changes.
 *
 * The keeper runs only system calls between fork() and its _exit() (the
 * host has threads).  It reports the command's wait status on a pipe; the
 * plugin closes the control pipe to say "end everything now".  The pipes
 * are drained for at most DRAIN_MS after the command exits (a grandchild
 * that holds them cannot keep the call open).
 *
 * Result: exit status 0 is ok; anything else failed.  Meta: exit_code or
 * signal (number) and signal_name, timed_out, cancelled, duration_ms. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>

#include "../shared/write_all.h"
#include "exec.h"
#include "toolhost/sdk.h"

extern char **environ;

#define POLL_MS 20
#define DRAIN_MS 200
#define CHUNK 65536
#define CAGE_KILL_MS 5000 /* the cage empty and removed within this */
#define KEEPER_END_MS 2000 /* the keeper's sweep ends within this */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- arguments to strings ------------------------------------------------- */

/* The argument of parameter `p` as a malloc()ed string; NULL with *absent
 * when the caller left it out (and it has no default). */
static char *arg_text(const toolhost_param *p, th_sdk_args *a, bool *absent,
                      char *err, size_t es)
{
    const msgpack_object *o = NULL;
    *absent = false;
    if (th_sdk_arg_object(a, p->name, &o) != 0 || o->type == MSGPACK_OBJECT_NIL) {
        *absent = true;
        return NULL;
    }
    char buf[64];
    switch (o->type) {
    case MSGPACK_OBJECT_STR:
        if (memchr(o->via.str.ptr, 0, o->via.str.size)) {
            snprintf(err, es,
                     "parameter '%s' holds a NUL byte, which cannot be "
                     "passed to a command",
                     p->name);
            return NULL;
        }
        {
            char *s = malloc(o->via.str.size + 1);
            if (!s) {
                snprintf(err, es, "out of memory");
                return NULL;
            }
            memcpy(s, o->via.str.ptr, o->via.str.size);
            s[o->via.str.size] = '\0';
            return s;
        }
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)o->via.u64);
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        snprintf(buf, sizeof buf, "%lld", (long long)o->via.i64);
        break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        snprintf(buf, sizeof buf, "%.17g", o->via.f64);
        break;
    case MSGPACK_OBJECT_BOOLEAN:
        snprintf(buf, sizeof buf, "%s", o->via.boolean ? "true" : "false");
        break;
    default:
        snprintf(err, es, "parameter '%s' must be a %s", p->name,
                 p->type == TOOLHOST_TYPE_STRING ? "string" : "scalar");
        return NULL;
    }
    char *s = strdup(buf);
    if (!s)
        snprintf(err, es, "out of memory");
    return s;
}

int exec_validate_args(void *state, const toolhost_tool *tool,
                       const uint8_t *args, size_t args_len, char *err,
                       size_t err_size)
{
    (void)state;
    th_sdk_args a;
    int rc = th_sdk_args_init(&a, args, args_len);
    for (uint32_t i = 0; rc == 0 && i < tool->n_params; i++) {
        bool absent;
        char *s = arg_text(&tool->params[i], &a, &absent, err, err_size);
        if (!s && !absent)
            rc = 1;
        free(s);
    }
    th_sdk_args_destroy(&a);
    return rc ? 1 : 0;
}

typedef struct strv {
    char **v;
    size_t n, cap;
} strv;

static int strv_push(strv *s, char *str)
{
    if (!str)
        return -1;
    if (s->n + 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            free(str);
            return -1;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = str;
    s->v[s->n] = NULL;
    return 0;
}

static void strv_free(strv *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
}

static char *env_pair(const char *name, const char *value)
{
    size_t n = strlen(name), m = strlen(value);
    char *s = malloc(n + m + 2);
    if (s) {
        memcpy(s, name, n);
        s[n] = '=';
        memcpy(s + n + 1, value, m + 1);
    }
    return s;
}

/* ---- the keeper and the command ------------------------------------------------ */

typedef struct child {
    pid_t pid;       /* the keeper (its group id is its pid) */
    int fd[2];       /* stdout, stderr read ends; -1 once closed */
    int st_fd;       /* keeper -> plugin: the command's wait status */
    int ctl_fd;      /* plugin -> keeper: closed = end everything */
    bool exited;     /* the command has exited (status known) */
    int status;      /* its wait status */
} child;

/* What the command's process says when it cannot run (before exec). */
typedef struct spawn_err {
    int stage; /* 1: chdir, 2: exec, 3: fork; 4: the keeper could not
                  enter the cage (not fatal: it goes on without) */
    int err;
} spawn_err;

/* (command) becomes the command: never returns. */
static void command_main(const exec_tool *x, char **argv, char **envp,
                         int out_w, int err_w, int err_fd)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0 && nul != 0) {
        dup2(nul, 0);
        close(nul);
    }
    dup2(out_w, 1);
    dup2(err_w, 2);
    spawn_err e = {1, 0};
    if (chdir(x->cwd ? x->cwd : "/") != 0) {
        e.err = errno;
        write_all(err_fd, &e, sizeof e);
        _exit(127);
    }
    /* every other fd closes at exec (err_fd is close-on-exec already) */
    syscall(SYS_close_range, 3u, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */);
    execve(argv[0], argv, envp);
    e.stage = 2;
    e.err = errno;
    write_all(err_fd, &e, sizeof e);
    _exit(127);
}

/* (keeper) SIGKILLs every child (and its group) until none is left, and
 * reaps them; a reaped `cmd` stores its status in *cmd_st. */
static void keeper_sweep(pid_t cmd, int *cmd_st, bool *cmd_done)
{
    char path[64] = "/proc/self/task/", num[16];
    pid_t self = (pid_t)syscall(SYS_gettid);
    int k = 0;
    do
        num[k++] = (char)('0' + self % 10);
    while ((self /= 10) > 0 && k < 15);
    size_t n = strlen(path);
    while (k > 0)
        path[n++] = num[--k];
    memcpy(path + n, "/children", 10);
    for (int round = 0; round < 10000; round++) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        char buf[4096];
        ssize_t r = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0)
            close(fd);
        bool any = false;
        if (r > 0) {
            pid_t p = 0;
            for (ssize_t i = 0; i <= r; i++) {
                if (i < r && buf[i] >= '0' && buf[i] <= '9') {
                    p = p * 10 + (buf[i] - '0');
                    continue;
                }
                if (p > 0) {
                    kill(-p, SIGKILL); /* its group, if it leads one */
                    kill(p, SIGKILL);
                    any = true;
                }
                p = 0;
            }
        } else if (fd < 0 && cmd > 0 && !*cmd_done) {
            /* no /proc: the command and the keeper's group at least */
            kill(cmd, SIGKILL);
            any = true;
        }
        int st;
        pid_t w;
        while ((w = waitpid(-1, &st, any ? 0 : WNOHANG)) > 0) {
            if (w == cmd && !*cmd_done) {
                *cmd_st = st;
                *cmd_done = true;
            }
            any = true;
            break; /* look at the list again: more may have come */
        }
        if (!any && (w < 0 && errno == ECHILD))
            return;
        if (!any)
            poll(NULL, 0, 1);
    }
}

/* (keeper) never returns. */
static void keeper_main(const exec_tool *x, char **argv, char **envp,
                        int out_w, int err_w, int err_fd, int st_w, int ctl_r)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0); /* all five: it is variadic */
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    setsid(); /* a session and group of its own: no terminal */
    /* the signals meant for the command's group are not for the keeper */
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGTERM, &ign, NULL);
    sigaction(SIGINT, &ign, NULL);
    sigaction(SIGHUP, &ign, NULL);
    sigaction(SIGPIPE, &ign, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    pid_t cmd = fork();
    if (cmd == 0)
        command_main(x, argv, envp, out_w, err_w, err_fd);
    if (cmd < 0) {
        spawn_err e = {3, errno};
        write_all(err_fd, &e, sizeof e);
        _exit(127);
    }
    /* the keeper holds only its two pipes: nothing of the host's (the
     * output pipes must reach EOF when the command's tree is gone) */
    int lo = st_w < ctl_r ? st_w : ctl_r, hi = st_w < ctl_r ? ctl_r : st_w;
    if (lo > 3)
        syscall(SYS_close_range, 3u, (unsigned)lo - 1, 0u);
    if (hi > lo + 1)
        syscall(SYS_close_range, (unsigned)lo + 1, (unsigned)hi - 1, 0u);
    syscall(SYS_close_range, (unsigned)hi + 1, ~0u, 0u);
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
        dup2(nul, 0);
        dup2(nul, 1);
        dup2(nul, 2);
        if (nul > 2)
            close(nul);
    }
    int st = 0;
    bool done = false;
    for (;;) {
        pid_t w;
        while ((w = waitpid(-1, &st, WNOHANG)) > 0)
            if (w == cmd && !done) {
                done = true;
                write_all(st_w, &st, sizeof st);
            }
        struct pollfd pf = {.fd = ctl_r, .events = POLLIN};
        if (poll(&pf, 1, done ? -1 : POLL_MS) > 0)
            break; /* closed (or written): the call is over */
    }
    bool told = done;
    int cst = st;
    keeper_sweep(cmd, &cst, &done);
    if (done && !told)
        write_all(st_w, &cst, sizeof cst);
    _exit(0);
}

/* In a keeper only: its copy of the call's cage, kept reachable (a leak
 * checker looks at the keeper's exit too); the parent closes the cage. */
static toolhost_cage *volatile g_keeper_cage;

static int spawn(const exec_tool *x, char **argv, char **envp, child *c,
                 const toolhost_host_api *host, toolhost_cage *cage,
                 int *cage_err, char *err, size_t es)
{
    int out[2] = {-1, -1}, er[2] = {-1, -1}, ep[2] = {-1, -1},
        sp[2] = {-1, -1}, cp[2] = {-1, -1};
    c->pid = -1;
    c->fd[0] = c->fd[1] = c->st_fd = c->ctl_fd = -1;
    /* Look first, for a clear message before anything is forked. */
    if (access(argv[0], X_OK) != 0) {
        snprintf(err, es, "cannot run %s: %s", argv[0], strerror(errno));
        return -1;
    }
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(er, O_CLOEXEC) != 0 ||
        pipe2(ep, O_CLOEXEC) != 0 || pipe2(sp, O_CLOEXEC) != 0 ||
        pipe2(cp, O_CLOEXEC) != 0) {
        snprintf(err, es, "cannot make a pipe: %s", strerror(errno));
        goto fail;
    }
    pid_t k = fork();
    if (k == 0) {
        /* into the call's cgroup before anything else (async-signal-safe) */
        g_keeper_cage = cage;
        if (cage && th_sdk_cage_enter(host, cage) != 0) {
            spawn_err e = {4, errno};
            write_all(ep[1], &e, sizeof e);
        }
        keeper_main(x, argv, envp, out[1], er[1], ep[1], sp[1], cp[0]);
    }
    th_sdk_cage_placed(host, cage);
    if (k < 0) {
        snprintf(err, es, "cannot fork: %s", strerror(errno));
        goto fail;
    }
    c->pid = k;
    close(out[1]);
    close(er[1]);
    close(ep[1]);
    close(sp[1]);
    close(cp[0]);
    out[1] = er[1] = ep[1] = sp[1] = cp[0] = -1;
    c->fd[0] = out[0];
    c->fd[1] = er[0];
    c->st_fd = sp[0];
    c->ctl_fd = cp[1];
    out[0] = er[0] = sp[0] = cp[1] = -1;
    fcntl(c->fd[0], F_SETFL, O_NONBLOCK);
    fcntl(c->fd[1], F_SETFL, O_NONBLOCK);
    fcntl(c->st_fd, F_SETFL, O_NONBLOCK);
    /* EOF: the command runs (its copy closed at exec, the keeper's too);
     * a record: it could not */
    spawn_err e;
    ssize_t r;
    for (;;) {
        do
            r = read(ep[0], &e, sizeof e);
        while (r < 0 && errno == EINTR);
        if (r != (ssize_t)sizeof e || e.stage != 4)
            break;
        *cage_err = e.err ? e.err : EIO; /* and read on: EOF or a failure */
    }
    close(ep[0]);
    ep[0] = -1;
    if (r == (ssize_t)sizeof e) {
        if (e.stage == 1)
            snprintf(err, es, "cannot enter the working folder %s: %s",
                     x->cwd ? x->cwd : "/", strerror(e.err));
        else if (e.stage == 2)
            snprintf(err, es, "cannot run %s: %s", argv[0], strerror(e.err));
        else
            snprintf(err, es, "cannot fork: %s", strerror(e.err));
        return -1; /* the caller ends the keeper (c->pid) */
    }
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        int *v[] = {out, er, ep, sp, cp};
        for (int j = 0; j < 5; j++)
            if (v[j][i] >= 0)
                close(v[j][i]);
    }
    return -1;
}

/* Waits at most `ms` for the keeper to exit (a pidfd where the kernel
 * has them, else short polls); true when it has (not reaped yet). */
static bool keeper_gone_within(pid_t pid, int64_t ms)
{
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    int64_t end = now_ms() + ms;
    bool gone = false;
    int nap = 1; /* without a pidfd: 1, 2, 4, 8, then 10 ms */
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            si.si_pid == pid) {
            gone = true;
            break;
        }
        int64_t left = end - now_ms();
        if (left <= 0)
            break;
        if (pfd >= 0) {
            struct pollfd p = {.fd = pfd, .events = POLLIN};
            poll(&p, 1, (int)(left < 100 ? left : 100));
        } else {
            poll(NULL, 0, left < nap ? (int)left : nap);
            nap = nap < 8 ? nap * 2 : 10;
        }
    }
    if (pfd >= 0)
        close(pfd);
    return gone;
}

/* Ends the keeper: closing the control pipe makes it kill the command's
 * whole tree, report the status if it had not, and exit; reaped here.  A
 * keeper that does not exit within KEEPER_END_MS (the command stopped it
 * with SIGSTOP, or froze its cgroup) is killed: with the call's cage, the
 * whole cage at once (a frozen or stopped process dies of it too), else
 * the keeper alone (its tree is then left to init). */
static void keeper_end(child *c, const toolhost_host_api *host,
                       toolhost_cage *cage, const toolhost_call *call)
{
    if (c->pid < 0)
        return;
    if (c->ctl_fd >= 0) {
        close(c->ctl_fd);
        c->ctl_fd = -1;
    }
    if (!keeper_gone_within(c->pid, KEEPER_END_MS)) {
        th_sdk_log_call(call, TOOLHOST_LOG_WARN,
                        "the keeper did not end within %dms (stopped or "
                        "frozen by the command?): killing %s",
                        KEEPER_END_MS,
                        cage ? "the call's cgroup" : "the keeper");
        if (cage)
            th_sdk_cage_kill(host, cage, CAGE_KILL_MS);
        /* the keeper itself whatever the cage did: one that never
         * entered it (enter may fail) would block the waitpid below */
        kill(c->pid, SIGKILL);
    }
    int st;
    while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!c->exited && c->st_fd >= 0) {
        int cs;
        ssize_t r = read(c->st_fd, &cs, sizeof cs);
        if (r == (ssize_t)sizeof cs) {
            c->status = cs;
            c->exited = true;
        }
    }
    if (!c->exited) { /* the keeper died before it could say */
        c->status = SIGKILL;
        c->exited = true;
    }
    if (c->st_fd >= 0)
        close(c->st_fd);
    c->st_fd = -1;
    c->pid = -1;
}

/* Has the command exited?  Its status comes from the keeper. */
static bool leader_exited(child *c)
{
    if (c->exited)
        return true;
    int st;
    ssize_t r = read(c->st_fd, &st, sizeof st);
    if (r == (ssize_t)sizeof st) {
        c->status = st;
        c->exited = true;
    } else if (r == 0) {
        c->status = SIGKILL; /* the keeper is gone */
        c->exited = true;
    }
    return c->exited;
}

/* Reads what is there from each open pipe and hands it to the host.
 * Returns 1 when the host refused (cancelled), 0 otherwise. */
static int pump(child *c, toolhost_call *call, char *buf, int wait_ms,
                bool *host_refused)
{
    struct pollfd pf[2];
    int n = 0, map[2];
    for (int i = 0; i < 2; i++)
        if (c->fd[i] >= 0) {
            pf[n].fd = c->fd[i];
            pf[n].events = POLLIN;
            pf[n].revents = 0;
            map[n++] = i;
        }
    if (n == 0) {
        if (wait_ms > 0)
            poll(NULL, 0, wait_ms);
        return 0;
    }
    if (poll(pf, (nfds_t)n, wait_ms) <= 0)
        return 0;
    for (int k = 0; k < n; k++) {
        if (!pf[k].revents)
            continue;
        int i = map[k];
        /* A bounded number of reads per turn so that cancellation is seen
         * even while the child floods. */
        for (int turn = 0; turn < 16; turn++) {
            ssize_t r = read(c->fd[i], buf, CHUNK);
            if (r > 0) {
                int w = th_sdk_write(call, i == 0 ? TOOLHOST_STDOUT
                                                  : TOOLHOST_STDERR,
                                     buf, (size_t)r);
                if (w == TH_SDK_ECANCELLED)
                    *host_refused = true;
                if (*host_refused)
                    return 1;
                continue;
            }
            if (r < 0 && (errno == EINTR))
                continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            close(c->fd[i]); /* EOF or error */
            c->fd[i] = -1;
            break;
        }
    }
    return 0;
}

static const char *sig_name(int sig)
{
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGKILL: return "SIGKILL";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGPIPE: return "SIGPIPE";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGQUIT: return "SIGQUIT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGALRM: return "SIGALRM";
    default: return "signal";
    }
}

/* ---- execute ------------------------------------------------------------------------ */

/* Logs which containment a call has when it differs from the last
 * call's (once at the first call, again on each change). */
static void contain_note(exec_state *st, const toolhost_call *call, int mode,
                         const char *why)
{
    if (__atomic_exchange_n(&st->contain, mode, __ATOMIC_RELAXED) == mode)
        return;
    if (mode == EXEC_CONTAIN_CGROUP)
        th_sdk_log(call->host, TOOLHOST_LOG_INFO,
                   "commands contained by a cgroup per call (the host's "
                   "cage, killed whole and removed before the call answers) "
                   "and by the call's keeper (a subreaper)");
    else
        th_sdk_log(call->host, TOOLHOST_LOG_INFO,
                   "commands contained by the call's keeper only (a "
                   "subreaper that kills the tree it still holds; the "
                   "orphans of a command that kills its keeper outlive the "
                   "call): no cgroup: %s",
                   why && why[0] ? why : "unknown");
}

int exec_execute(void *state, const toolhost_tool *tool, toolhost_call *call,
                 const uint8_t *args, size_t args_len)
{
    exec_state *st = state;
    const exec_tool *x = tool->user_data;
    char err[512] = "";
    strv argv = {0}, envp = {0};
    char *buf = NULL;
    child c = {.pid = -1, .fd = {-1, -1}, .st_fd = -1, .ctl_fd = -1};
    toolhost_cage *cage = NULL;
    th_sdk_args a;
    int rc = TOOLHOST_FAILED;
    int64_t start = now_ms();

    if (th_sdk_args_init(&a, args, args_len) != 0) {
        th_sdk_args_destroy(&a);
        return th_sdk_fail(call, "exec: the arguments are not a msgpack map");
    }
    /* argv: literals, and each placeholder as one element (left out when
     * the argument is absent and has no default). */
    for (size_t i = 0; i < x->argc; i++) {
        const exec_slot *s = &x->argv[i];
        char *v;
        if (s->param < 0) {
            if (!(v = strdup(s->text)))
                goto oom;
        } else {
            bool absent;
            v = arg_text(&tool->params[s->param], &a, &absent, err, sizeof err);
            if (absent)
                continue;
            if (!v)
                goto fail;
        }
        if (strv_push(&argv, v))
            goto oom;
    }
    /* env: PATH, the allowed names from the host's environment, then the
     * tool's own (which win). */
    if (strv_push(&envp, strdup(st->path_env)))
        goto oom;
    for (size_t i = 0; i < x->n_env_allow; i++) {
        const char *v = getenv(x->env_allow[i]);
        bool set_by_tool = false;
        for (size_t k = 0; k < x->n_env; k++)
            set_by_tool = set_by_tool || !strcmp(x->env[k].name, x->env_allow[i]);
        if (v && !set_by_tool && strv_push(&envp, env_pair(x->env_allow[i], v)))
            goto oom;
    }
    for (size_t i = 0; i < x->n_env; i++) {
        const exec_slot *s = &x->env[i].value;
        char *pair;
        if (s->param < 0) {
            pair = env_pair(x->env[i].name, s->text);
        } else {
            bool absent;
            char *v = arg_text(&tool->params[s->param], &a, &absent, err,
                               sizeof err);
            if (absent)
                continue;
            if (!v)
                goto fail;
            pair = env_pair(x->env[i].name, v);
            free(v);
        }
        if (strv_push(&envp, pair))
            goto oom;
    }
    if (!(buf = malloc(CHUNK)))
        goto oom;
    /* A cgroup for the call's whole tree, where the host gives one. */
    char why[256] = "";
    cage = th_sdk_cage_open(call->host, tool->name, 0, why, sizeof why);
    contain_note(st, call, cage ? EXEC_CONTAIN_CGROUP : EXEC_CONTAIN_KEEPER,
                 why);
    int cage_err = 0;
    if (spawn(x, argv.v, envp.v, &c, call->host, cage, &cage_err, err,
              sizeof err) != 0) {
        keeper_end(&c, call->host, cage, call);
        goto fail;
    }
    if (cage_err)
        th_sdk_log_call(call, TOOLHOST_LOG_WARN,
                        "%s: the keeper could not enter the call's cgroup "
                        "(%s): the keeper alone contains this command",
                        tool->name, strerror(cage_err));

    /* Run: stream output, watch the leader, the call and the timeout. */
    int64_t deadline = x->timeout_ms > 0 ? start + x->timeout_ms : -1;
    bool timed_out = false, cancelled = false, refused = false;
    int64_t exited_at = -1;
    for (;;) {
        pump(&c, call, buf, POLL_MS, &refused);
        if (leader_exited(&c)) {
            if (exited_at < 0)
                exited_at = now_ms();
            if ((c.fd[0] < 0 && c.fd[1] < 0) || now_ms() - exited_at > DRAIN_MS)
                break;
            continue;
        }
        if (refused || th_sdk_cancelled(call)) {
            cancelled = true;
            break;
        }
        if (deadline >= 0 && now_ms() >= deadline) {
            timed_out = true;
            break;
        }
    }
    if (cancelled || timed_out) {
        kill(-c.pid, SIGTERM); /* the keeper's group: the keeper ignores it */
        int64_t until = now_ms() + x->grace_ms;
        while (!leader_exited(&c) && now_ms() < until)
            pump(&c, call, buf, 10, &refused);
        if (!c.exited)
            th_sdk_log(call->host, TOOLHOST_LOG_WARN,
                       "%s: call %llu: the command did not end within %lldms "
                       "of SIGTERM; killing its process tree",
                       tool->name, (unsigned long long)call->call_id,
                       (long long)x->grace_ms);
    }
    /* Nothing of the call stays behind: the keeper kills the command's
     * whole tree (those that left its group too) and exits. */
    keeper_end(&c, call->host, cage, call);
    /* And what left the keeper's reach (its orphans, if the command killed
     * it): the cage dies whole and is removed before the call answers. */
    if (cage && th_sdk_cage_kill(call->host, cage, CAGE_KILL_MS) != 0)
        th_sdk_log_call(call, TOOLHOST_LOG_WARN,
                        "%s: the call's cgroup could not be emptied and "
                        "removed within %dms", tool->name, CAGE_KILL_MS);
    /* Whatever is still buffered in the pipes. */
    for (int turn = 0; turn < 64 && !refused && (c.fd[0] >= 0 || c.fd[1] >= 0);
         turn++)
        pump(&c, call, buf, 0, &refused);

    th_sdk_meta m;
    th_sdk_meta_init(&m);
    if (WIFEXITED(c.status)) {
        th_sdk_meta_int(&m, "exit_code", WEXITSTATUS(c.status));
    } else if (WIFSIGNALED(c.status)) {
        th_sdk_meta_int(&m, "signal", WTERMSIG(c.status));
        th_sdk_meta_str(&m, "signal_name", sig_name(WTERMSIG(c.status)));
    }
    th_sdk_meta_bool(&m, "timed_out", timed_out);
    th_sdk_meta_bool(&m, "cancelled", cancelled);
    th_sdk_meta_int(&m, "duration_ms", now_ms() - start);
    th_sdk_meta_set(&m, call);
    th_sdk_meta_destroy(&m);

    if (timed_out) {
        th_sdk_log(call->host, TOOLHOST_LOG_WARN,
                   "%s: call %llu: timed out after %lldms; the command's "
                   "process group was stopped",
                   tool->name, (unsigned long long)call->call_id,
                   (long long)x->timeout_ms);
        th_sdk_eprintf(call, "\nexec: %s timed out after %lldms and was "
                       "stopped\n", tool->name, (long long)x->timeout_ms);
        rc = TOOLHOST_FAILED;
    } else if (cancelled) {
        rc = TOOLHOST_FAILED; /* dropped by the host anyway */
    } else if (WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) {
        rc = TOOLHOST_OK;
    } else if (WIFEXITED(c.status)) {
        th_sdk_eprintf(call, "\nexec: %s exited with status %d\n", argv.v[0],
                       WEXITSTATUS(c.status));
        rc = TOOLHOST_FAILED;
    } else {
        th_sdk_eprintf(call, "\nexec: %s was killed by %s\n", argv.v[0],
                       sig_name(WTERMSIG(c.status)));
        rc = TOOLHOST_FAILED;
    }
    goto out;
oom:
    snprintf(err, sizeof err, "out of memory");
fail:
    rc = th_sdk_fail(call, "exec: %s: %s", tool->name, err);
out:
    th_sdk_cage_close(call->host, cage); /* removed already, or now */
    for (int i = 0; i < 2; i++)
        if (c.fd[i] >= 0)
            close(c.fd[i]);
    free(buf);
    strv_free(&argv);
    strv_free(&envp);
    th_sdk_args_destroy(&a);
    return rc;
}
