/* exec_run.c - one call of a declared command: argv and env built from the
 * arguments (never through a shell), the child spawned in its own session
 * (so its process group id is its pid) with a clean environment, stdout and
 * stderr streamed to the host as they arrive, cancellation and the tool's
 * timeout polled every POLL_MS, and the group ended with SIGTERM, then
 * SIGKILL after the plugin's kill_grace.
 *
 * When the command exits, whatever it left running in its group is killed
 * (a call leaves no process behind), and the pipes are drained for at most
 * DRAIN_MS more (a grandchild that escaped the group and holds them cannot
 * keep the call open).
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>

#include "exec.h"
#include "toolhost/sdk.h"

extern char **environ;

#define POLL_MS 20
#define DRAIN_MS 200
#define CHUNK 65536

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

/* ---- the child ------------------------------------------------------------------- */

typedef struct child {
    pid_t pid;
    int fd[2];       /* stdout, stderr read ends; -1 once closed */
    bool exited;     /* the leader is a zombie (not reaped yet) */
    int status;      /* its wait status, once reaped */
} child;

static int spawn(const exec_tool *x, char **argv, char **envp, child *c,
                 char *err, size_t es)
{
    int out[2] = {-1, -1}, er[2] = {-1, -1};
    c->pid = -1;
    c->fd[0] = c->fd[1] = -1;
    /* posix_spawn() reports a failed exec as its return value with glibc,
     * but not everywhere (e.g. under valgrind the child exits 127): look
     * first, for a clear message in every case. */
    if (access(argv[0], X_OK) != 0) {
        snprintf(err, es, "cannot run %s: %s", argv[0], strerror(errno));
        return -1;
    }
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(er, O_CLOEXEC) != 0) {
        snprintf(err, es, "cannot make a pipe: %s", strerror(errno));
        goto fail;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    /* A session of its own: its group id is its pid, and no terminal. */
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    int rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (!rc)
        rc = posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    if (!rc)
        rc = posix_spawn_file_actions_adddup2(&fa, er[1], 2);
    if (!rc)
        rc = posix_spawn_file_actions_addchdir_np(&fa, x->cwd ? x->cwd : "/");
    if (!rc)
        rc = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    if (!rc)
        rc = posix_spawn(&c->pid, argv[0], &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc) {
        c->pid = -1;
        if (x->cwd && access(x->cwd, X_OK) != 0)
            snprintf(err, es, "cannot enter the working folder %s: %s",
                     x->cwd, strerror(errno));
        else
            snprintf(err, es, "cannot run %s: %s", argv[0], strerror(rc));
        goto fail;
    }
    close(out[1]);
    close(er[1]);
    c->fd[0] = out[0];
    c->fd[1] = er[0];
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(er[0], F_SETFL, O_NONBLOCK);
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (er[i] >= 0)
            close(er[i]);
    }
    return -1;
}

/* Has the leader exited?  Peeks without reaping, so its pid (the group id)
 * cannot be reused while we still signal the group. */
static bool leader_exited(child *c)
{
    if (c->exited)
        return true;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        si.si_pid == c->pid)
        c->exited = true;
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

int exec_execute(void *state, const toolhost_tool *tool, toolhost_call *call,
                 const uint8_t *args, size_t args_len)
{
    exec_state *st = state;
    const exec_tool *x = tool->user_data;
    char err[512] = "";
    strv argv = {0}, envp = {0};
    char *buf = NULL;
    child c = {.pid = -1, .fd = {-1, -1}};
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
    if (spawn(x, argv.v, envp.v, &c, err, sizeof err) != 0)
        goto fail;

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
        kill(-c.pid, SIGTERM);
        int64_t until = now_ms() + x->grace_ms;
        while (!leader_exited(&c) && now_ms() < until)
            pump(&c, call, buf, 10, &refused);
        if (!c.exited)
            th_sdk_log(call->host, TOOLHOST_LOG_WARN,
                       "%s: call %llu: the command did not end within %lldms "
                       "of SIGTERM; sending SIGKILL to its process group",
                       tool->name, (unsigned long long)call->call_id,
                       (long long)x->grace_ms);
    }
    /* Nothing of the call stays behind: the rest of the group goes too. */
    kill(-c.pid, SIGKILL);
    while (waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR)
        ;
    c.exited = true;
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
    for (int i = 0; i < 2; i++)
        if (c.fd[i] >= 0)
            close(c.fd[i]);
    free(buf);
    strv_free(&argv);
    strv_free(&envp);
    th_sdk_args_destroy(&a);
    return rc;
}
