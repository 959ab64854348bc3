/* mcp_server.c - one MCP server process per declared server: started,
 * handshaken, listed, read, and restarted with back-off when it exits.
 *
 * Threads.  A supervisor per server (supervise()) owns the process: it
 * forks it, starts a reader for it, does initialize, initialized and
 * tools/list through the same pending-request path the calls use, marks
 * the server up, and waits for the reader to end (the server closed its
 * stdout, exited, broke a budget, or was killed).  It then kills what is
 * left of the process tree (its cage where the host gives one, else its
 * process group), reaps it, fails the requests still waiting, and sleeps
 * restart_initial doubled per failure in a row (at most restart_max)
 * before the next start.  While the server is not up its tools answer at
 * once that it is unavailable (mcp_call.c).
 *
 * The reader (reader()) splits the server's stdout into lines of at most
 * max_message bytes (one over it kills the server: its memory stays
 * bounded whatever the server sends), parses each as JSON-RPC and
 * routes it: a response to the request of its id (an unknown id is
 * dropped and counted), notifications/progress to the request whose
 * progress token it names (the latest update kept, never a queue), a ping
 * answered, any other request refused (-32601), any other notification
 * dropped and counted.  The server's stderr goes to the host log, the
 * first lines of each start only.  Log lines about a misbehaving server
 * are rate-limited (the 1st, 2nd, 4th, 8th, ... of each kind).
 *
 * The server's stdin and stdout are socket pairs (a write to a server
 * that is gone is EPIPE, never SIGPIPE in the host); its stdin is written
 * non-blocking, and a server that does not read it for write_timeout is
 * killed. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../shared/write_all.h"
#include "mcpsrc.h"
#include "toolhost/sdk.h"

#define STDERR_LINES 20  /* stderr lines logged per start */
#define MAX_PAGES 100    /* tools/list pages */
#define MAX_TOOLS 4096
#define READ_CHUNK 65536
/* busy polling (mcpsrc_busy_poll): the reader leaves the server's output
 * to callers for PARK_MS after a busy-polled call, looking at it every
 * PARK_LOOK_MS */
#define PARK_MS 200
#define PARK_LOOK_MS 10
#define TERM_GRACE_MS 1000
#define CAGE_KILL_MS 5000

/* true for the 1st, 2nd, 4th, 8th, ... event of a kind */
static bool worth_logging(uint64_t *n)
{
    uint64_t c = ++*n;
    return (c & (c - 1)) == 0;
}

static void abs_deadline(struct timespec *ts, int64_t ms_from_now)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms_from_now / 1000;
    ts->tv_nsec += (ms_from_now % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

void mcpsrc_pend_add(mcp_srv *s, mcp_pend *p)
{
    if (!p->id)
        p->id = s->next_id++;
    p->next = s->pending;
    s->pending = p;
}

void mcpsrc_pend_del(mcp_srv *s, mcp_pend *p)
{
    for (mcp_pend **pp = &s->pending; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            p->next = NULL;
            if (p->unsent) {
                p->unsent = false;
                s->n_unsent--;
            }
            return;
        }
}

static mcp_pend *pend_find_id(mcp_srv *s, int64_t id)
{
    for (mcp_pend *p = s->pending; p; p = p->next)
        if (p->id == id)
            return p;
    return NULL;
}

static mcp_pend *pend_find(mcp_srv *s, const json_t *id)
{
    return json_is_integer(id) ? pend_find_id(s, json_integer_value(id))
                               : NULL;
}

/* Kills the server's process group at once, and ends its reader (s->mu
 * held): a descendant that left the group may hold its stdout open. */
static void kill_group(mcp_srv *s)
{
    if (s->pid > 0)
        kill(-s->pid, SIGKILL);
    if (s->out_fd >= 0)
        shutdown(s->out_fd, SHUT_RDWR);
}

/* Writes n bytes to fd (wmu held), waiting for room until `end`
 * (monotonic ms): 0; -1 the server is going away (EPIPE and the like);
 * -2 it did not read before `end`. */
static int write_wait(int fd, const char *p, size_t n, int64_t end)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = send(fd, p + off, n - off, MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int64_t left = end - mcpsrc_now_ms();
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            if (left > 0 && poll(&pf, 1, (int)left) >= 0)
                continue;
            return -2;
        }
        return -1;
    }
    return 0;
}

/* Writes the rest of a line execute() began (if any), then `text`
 * (may be NULL), waiting at most write_timeout: 0 or -1, and a server
 * that did not read is killed.  The caller holds no lock. */
static int send_bytes(mcp_srv *s, const char *text, size_t n)
{
    pthread_mutex_lock(&s->wmu);
    int fd = s->in_fd;
    int64_t end = mcpsrc_now_ms() + s->st->write_timeout_ms;
    int rc = fd >= 0 ? 0 : -1;
    if (rc == 0 && s->wrest) {
        rc = write_wait(fd, s->wrest + s->wrest_off,
                        s->wrest_len - s->wrest_off, end);
        free(s->wrest);
        s->wrest = NULL;
    }
    if (rc == 0 && text)
        rc = write_wait(fd, text, n, end);
    pthread_mutex_unlock(&s->wmu);
    if (rc == -2) {
        th_sdk_log(s->st->host, TOOLHOST_LOG_WARN,
                   "server '%s' did not read its stdin for %lldms: "
                   "killing it (it restarts)",
                   s->name, (long long)s->st->write_timeout_ms);
        pthread_mutex_lock(&s->mu);
        kill_group(s);
        pthread_mutex_unlock(&s->mu);
    }
    return rc == 0 ? 0 : -1;
}

int mcpsrc_send(mcp_srv *s, json_t *msg)
{
    char *text = json_dumps(msg, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!text)
        return -1;
    size_t n = strlen(text);
    text[n] = '\n'; /* json_dumps' NUL becomes the line's end */
    int rc = send_bytes(s, text, n + 1);
    free(text);
    return rc;
}

/* The fast way of a call (execute() on whatever thread runs it, maybe a
 * front's own): one send() that does not wait, or nothing at all. */
bool mcpsrc_try_send_locked(mcp_srv *s, mcp_pend *p)
{
    if (pthread_mutex_trylock(&s->wmu) != 0)
        return false; /* another writer: the reader writes it */
    bool sent = false;
    if (s->in_fd >= 0 && !s->wrest) {
        ssize_t w = send(s->in_fd, p->line, p->line_len,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w == (ssize_t)p->line_len) {
            free(p->line);
            sent = true;
        } else if (w > 0) {
            /* a part: the rest goes before any other byte (send_bytes) */
            s->wrest = p->line;
            s->wrest_off = (size_t)w;
            s->wrest_len = p->line_len;
            s->flush = true;
            sent = true;
        }
        /* nothing written (full, or the server going away): the reader
         * writes it, waiting at most write_timeout, or fails the call */
    }
    pthread_mutex_unlock(&s->wmu);
    if (sent)
        p->line = NULL;
    return sent;
}

/* ---- the process ------------------------------------------------------ */

typedef struct spawn_err {
    int stage; /* 1 chdir, 2 user, 3 exec */
    int err;
} spawn_err;

/* (the child, after fork: system calls only) never returns. */
static void child_main(mcp_srv *s, toolhost_cage *cage, int in, int out,
                       int errw, int ep)
{
    if (cage)
        th_sdk_cage_enter(s->st->host, cage); /* else: its group below */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    setsid();
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    dup2(in, 0);
    dup2(out, 1);
    dup2(errw, 2);
    spawn_err e = {1, 0};
    if (chdir(s->cwd ? s->cwd : "/") != 0) {
        e.err = errno;
        write_all(ep, &e, sizeof e);
        _exit(127);
    }
    if (s->has_user &&
        (setgroups(0, NULL) != 0 || setgid(s->gid) != 0 ||
         setuid(s->uid) != 0)) {
        e.stage = 2;
        e.err = errno;
        write_all(ep, &e, sizeof e);
        _exit(127);
    }
    syscall(SYS_close_range, 3u, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */);
    execve(s->argv[0], s->argv, s->envp);
    e.stage = 3;
    e.err = errno;
    write_all(ep, &e, sizeof e);
    _exit(127);
}

/* Starts the server: s->pid and its fds set; 0, or -1 with why. */
static int spawn(mcp_srv *s, char *why, size_t ws)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, er[2] = {-1, -1},
        ep[2] = {-1, -1};
    char cwhy[200] = "";
    toolhost_cage *cage =
        th_sdk_cage_open(s->st->host, s->name, 0, cwhy, sizeof cwhy);
    if (s->generation == 1)
        th_sdk_log(s->st->host, TOOLHOST_LOG_INFO,
                   "server '%s': contained by %s%s", s->name,
                   cage ? "a cgroup of its own (the host's cage)"
                        : "its process group only: ",
                   cage ? "" : (cwhy[0] ? cwhy : "no cage"));
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, out) != 0 ||
        pipe2(er, O_CLOEXEC) != 0 || pipe2(ep, O_CLOEXEC) != 0) {
        snprintf(why, ws, "cannot make its pipes: %s", strerror(errno));
        goto fail;
    }
    pid_t pid = fork();
    if (pid == 0)
        child_main(s, cage, in[1], out[1], er[1], ep[1]);
    th_sdk_cage_placed(s->st->host, cage);
    if (pid < 0) {
        snprintf(why, ws, "cannot fork: %s", strerror(errno));
        goto fail;
    }
    close(in[1]);
    close(out[1]);
    close(er[1]);
    close(ep[1]);
    in[1] = out[1] = er[1] = ep[1] = -1;
    spawn_err e;
    ssize_t r;
    do
        r = read(ep[0], &e, sizeof e);
    while (r < 0 && errno == EINTR);
    close(ep[0]);
    ep[0] = -1;
    if (r == (ssize_t)sizeof e) {
        snprintf(why, ws, "cannot %s: %s",
                 e.stage == 1   ? "enter its working folder"
                 : e.stage == 2 ? "take its user's uid"
                                : "run its command",
                 strerror(e.err));
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        goto fail;
    }
    fcntl(in[0], F_SETFL, O_NONBLOCK);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(er[0], F_SETFL, O_NONBLOCK);
    pthread_mutex_lock(&s->mu);
    s->pid = pid;
    s->pid_fd = (int)syscall(SYS_pidfd_open, pid, 0);
    s->out_fd = out[0];
    s->err_fd = er[0];
    s->cage = cage;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&s->wmu);
    s->in_fd = in[0];
    pthread_mutex_unlock(&s->wmu);
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
        if (er[i] >= 0)
            close(er[i]);
        if (ep[i] >= 0)
            close(ep[i]);
    }
    th_sdk_cage_close(s->st->host, cage);
    return -1;
}

static bool exited_within(pid_t pid, int64_t ms)
{
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    int64_t end = mcpsrc_now_ms() + ms;
    bool gone = false;
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            si.si_pid == pid) {
            gone = true;
            break;
        }
        int64_t left = end - mcpsrc_now_ms();
        if (left <= 0)
            break;
        struct pollfd p = {.fd = pfd, .events = POLLIN};
        if (pfd >= 0)
            poll(&p, 1, (int)(left < 100 ? left : 100));
        else
            poll(NULL, 0, left < 10 ? (int)left : 10);
    }
    if (pfd >= 0)
        close(pfd);
    return gone;
}

/* Ends what is left of the server (SIGTERM first when `gently`), reaps
 * it, closes its fds; its exit in why. */
static void reap(mcp_srv *s, bool gently, char *why, size_t ws)
{
    pthread_mutex_lock(&s->wmu);
    if (s->in_fd >= 0)
        close(s->in_fd); /* a polite server exits at the end of its input */
    s->in_fd = -1;
    free(s->wrest); /* the rest of a line to the process that is gone */
    s->wrest = NULL;
    pthread_mutex_unlock(&s->wmu);
    pid_t pid = s->pid;
    if (pid > 0) {
        if (gently && !exited_within(pid, 200)) {
            kill(-pid, SIGTERM);
            exited_within(pid, TERM_GRACE_MS);
        }
        pthread_mutex_lock(&s->mu);
        kill_group(s); /* the rest of its group too, whatever the leader */
        pthread_mutex_unlock(&s->mu);
    }
    if (s->cage &&
        th_sdk_cage_kill(s->st->host, s->cage, CAGE_KILL_MS) != 0)
        th_sdk_log(s->st->host, TOOLHOST_LOG_WARN,
                   "server '%s': its cgroup could not be emptied within %dms",
                   s->name, CAGE_KILL_MS);
    /* no kill by pid from here on: the zombie is reaped below */
    pthread_mutex_lock(&s->mu);
    s->pid = -1;
    pthread_mutex_unlock(&s->mu);
    int st = 0;
    if (pid > 0)
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
    if (why && pid > 0) {
        if (WIFEXITED(st))
            snprintf(why, ws, "exited with status %d", WEXITSTATUS(st));
        else if (WIFSIGNALED(st))
            snprintf(why, ws, "was killed by signal %d", WTERMSIG(st));
    }
    pthread_mutex_lock(&s->mu);
    toolhost_cage *cage = s->cage;
    s->cage = NULL;
    if (s->out_fd >= 0)
        close(s->out_fd);
    if (s->err_fd >= 0)
        close(s->err_fd);
    if (s->pid_fd >= 0)
        close(s->pid_fd);
    s->out_fd = s->err_fd = s->pid_fd = -1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    th_sdk_cage_close(s->st->host, cage);
}

/* ---- the reader -------------------------------------------------------- */

static void send_cancelled(mcp_srv *s, int64_t id, const char *reason)
{
    json_t *n = json_pack("{s:s, s:s, s:{s:I, s:s}}", "jsonrpc", "2.0",
                          "method", "notifications/cancelled", "params",
                          "requestId", (json_int_t)id, "reason", reason);
    if (n)
        mcpsrc_send(s, n);
    json_decref(n);
}

/* (s->mu held) why a suspended call ends now (NULL: it goes on); the
 * ms to its deadline lowers *next (at most 100 when it has no cancel
 * hook and is polled). */
static const char *pend_ends(mcp_pend *p, int64_t now, int64_t *next)
{
    if (!p->hooked && !p->cancel && th_sdk_cancelled(p->call))
        p->cancel = true;
    if (p->cancel)
        return "cancelled";
    if (p->fail)
        return "fail";
    if (p->deadline >= 0 && now >= p->deadline)
        return "timeout";
    if (p->deadline >= 0 && (*next < 0 || p->deadline - now < *next))
        *next = p->deadline - now;
    if (!p->hooked && (*next < 0 || *next > 100))
        *next = 100;
    return NULL;
}

/* The reader's look at its suspended calls, in pending and waiting for a
 * slot: those cancelled, past their deadline or not sent are ended (the
 * server told of the first two when it has their request).  Returns the
 * ms until the next deadline (-1: none; at most 100 when a call has no
 * cancel hook and is polled). */
static int sweep(mcp_srv *s)
{
    mcp_pend *ended = NULL;
    int64_t now = mcpsrc_now_ms(), next = -1;
    pthread_mutex_lock(&s->mu);
    for (mcp_pend **pp = &s->pending; *pp;) {
        mcp_pend *p = *pp;
        const char *why = p->call ? pend_ends(p, now, &next) : NULL;
        if (!why) {
            pp = &p->next;
            continue;
        }
        p->gone = why;
        if (p->unsent) {
            p->unsent = false;
            s->n_unsent--;
        }
        *pp = p->next;
        p->next = ended;
        ended = p;
    }
    mcp_pend *last = NULL;
    for (mcp_pend **pp = &s->waitq; *pp;) {
        mcp_pend *p = *pp;
        const char *why = pend_ends(p, now, &next);
        if (!why) {
            last = p;
            pp = &p->next;
            continue;
        }
        /* never sent: no notifications/cancelled */
        p->gone = !strcmp(why, "timeout") ? "noslot" : why;
        s->n_waiting--;
        *pp = p->next;
        p->next = ended;
        ended = p;
    }
    s->waitq_tail = last;
    /* a call handed off from now on wakes this thread if it is due
     * before that (mcp_call.c) */
    s->rd_until = next < 0 ? -1 : now + next;
    pthread_mutex_unlock(&s->mu);
    while (ended) {
        mcp_pend *p = ended;
        ended = p->next;
        if (!strcmp(p->gone, "fail")) {
            mcpsrc_call_finish(p, NULL, "server_exited", p->fail);
            continue;
        }
        if (p->slot && !p->line) /* the server has the request */
            send_cancelled(s, p->id,
                           p->gone[0] == 'c' ? "cancelled by the caller"
                                             : "timed out");
        mcpsrc_call_finish(p, NULL, p->gone, NULL);
    }
    return next > INT32_MAX ? INT32_MAX : (int)next;
}

/* The reader's share of sending, after each sweep: calls waiting for a
 * slot get the slots calls freed (first come, first served), then what
 * execute() could not write without waiting is written here, where a
 * wait (at most write_timeout) holds only this thread.  A request that
 * cannot be written fails its call (p->fail: the next sweep ends it);
 * true then. */
static bool pump(mcp_srv *s)
{
    bool failed = false;
    pthread_mutex_lock(&s->mu);
    while (s->waitq && s->in_flight < s->max_concurrency) {
        mcp_pend *p = s->waitq;
        s->waitq = p->next;
        if (!s->waitq)
            s->waitq_tail = NULL;
        s->n_waiting--;
        p->next = NULL;
        s->in_flight++;
        p->slot = true;
        p->unsent = true;
        s->n_unsent++;
        mcpsrc_pend_add(s, p);
    }
    bool flush = s->flush;
    s->flush = false;
    char *dout = s->dout;
    size_t dout_len = s->dout_len;
    s->dout = NULL;
    s->dout_len = 0;
    pthread_mutex_unlock(&s->mu);
    if (flush)
        send_bytes(s, NULL, 0);
    /* answers to the server's requests a caller read (answer_request) */
    if (dout)
        send_bytes(s, dout, dout_len);
    free(dout);
    for (;;) {
        /* one at a time: the list may change while this thread writes
         * (only this thread takes a call out of it) */
        pthread_mutex_lock(&s->mu);
        mcp_pend *p = NULL;
        if (s->n_unsent)
            for (p = s->pending; p && !(p->call && p->unsent); p = p->next)
                ;
        if (p) {
            p->unsent = false;
            s->n_unsent--;
        }
        pthread_mutex_unlock(&s->mu);
        if (!p)
            break;
        /* p stays in pending and this thread's until it ends it */
        if (send_bytes(s, p->line, p->line_len) != 0) {
            pthread_mutex_lock(&s->mu);
            p->fail = "could not be sent (the server is not reading or "
                      "has exited)";
            pthread_mutex_unlock(&s->mu);
            failed = true;
        }
        free(p->line);
        p->line = NULL;
    }
    return failed;
}

typedef struct reader_ctx {
    mcp_srv *s;
    int out_fd, err_fd, pid_fd;
    char *why;          /* set when the reader ended the server */
    size_t why_size;
} reader_ctx;

/* A request of the server: a ping answered, any other refused.  The
 * reader writes the answer itself (waiting at most write_timeout); a
 * caller reading for a moment (mcpsrc_busy_poll) leaves it in s->dout
 * for the reader, and stops polling: a server that asks and does not
 * read its stdin must not hold the thread of a front. */
static void answer_request(mcp_srv *s, const json_t *id, const char *method)
{
    json_t *r;
    if (strcmp(method, "ping") == 0)
        r = json_pack("{s:s, s:O, s:{}}", "jsonrpc", "2.0", "id", id,
                      "result");
    else
        r = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id,
                      "error", "code", -32601, "message",
                      "toolhost does not serve this request");
    if (r && mcpsrc_busy_polling == s) {
        char *text = json_dumps(r, JSON_COMPACT | JSON_ENSURE_ASCII);
        size_t n = text ? strlen(text) : 0;
        pthread_mutex_lock(&s->mu);
        char *nb = text ? realloc(s->dout, s->dout_len + n + 1) : NULL;
        if (nb) {
            memcpy(nb + s->dout_len, text, n);
            nb[s->dout_len + n] = '\n';
            s->dout = nb;
            s->dout_len += n + 1;
        }
        pthread_mutex_unlock(&s->mu);
        /* out of memory: unanswered, as a server's lost line */
        free(text);
    } else if (r) {
        mcpsrc_send(s, r);
    }
    json_decref(r);
}

static void on_progress(mcp_srv *s, const json_t *params)
{
    const json_t *tok = json_object_get(params, "progressToken");
    const json_t *pr = json_object_get(params, "progress");
    const json_t *tt = json_object_get(params, "total");
    const char *m = json_string_value(json_object_get(params, "message"));
    double v = json_is_number(pr) ? json_number_value(pr) : 0;
    double t = json_is_number(tt) ? json_number_value(tt) : -1;
    pthread_mutex_lock(&s->mu);
    mcp_pend *p = pend_find(s, tok);
    toolhost_call *call = NULL;
    if (p) {
        p->n_progress++;
        call = p->call; /* this thread owns it: it stays until we end it */
    }
    bool log = !p && worth_logging(&s->n_unknown_id);
    pthread_mutex_unlock(&s->mu);
    if (call)
        call->host->progress(call, t > 0 && v >= 0 && v <= t ? v / t : -1,
                             m, NULL, 0);
    if (log)
        th_sdk_log(s->st->host, TOOLHOST_LOG_WARN,
                   "server '%s' sent progress for no request of ours "
                   "(%llu so far): dropped",
                   s->name, (unsigned long long)s->n_unknown_id);
}

/* The usual answer, read without a tree (mcp_answer.c) and handed to
 * its call: true when done; false for the tree path (another shape, a
 * tool with an output schema, an id nobody waits on, the handshake's). */
static bool fast_line(mcp_srv *s, const char *line, size_t len,
                      mcpsrc_fast_answer *fa)
{
    if (mcpsrc_read_answer(line, len, fa) != 1)
        return false;
    pthread_mutex_lock(&s->mu);
    mcp_pend *p = pend_find_id(s, fa->id);
    bool mine = p && p->call && !p->mt->structured;
    if (mine)
        mcpsrc_pend_del(s, p);
    pthread_mutex_unlock(&s->mu);
    if (mine)
        mcpsrc_call_finish_as(p, NULL, fa, NULL, NULL);
    return mine;
}

static void on_line(mcp_srv *s, const char *line, size_t len,
                    mcpsrc_fast_answer *fa)
{
    const toolhost_host_api *h = s->st->host;
    if (fast_line(s, line, len, fa))
        return;
    json_error_t je;
    /* a NUL in a string is JSON (\u0000): refused, a call whose answer
     * holds one would wait for its timeout */
    json_t *m = json_loadb(line, len, JSON_ALLOW_NUL, &je);
    if (!json_is_object(m)) {
        if (worth_logging(&s->n_bad_json))
            th_sdk_log(h, TOOLHOST_LOG_WARN,
                       "server '%s' wrote a line that is not a JSON-RPC "
                       "message (%s; %llu so far): dropped",
                       s->name, m ? "not an object" : je.text,
                       (unsigned long long)s->n_bad_json);
        json_decref(m);
        return;
    }
    const char *method = json_string_value(json_object_get(m, "method"));
    const json_t *id = json_object_get(m, "id");
    if (!method && id) { /* a response */
        pthread_mutex_lock(&s->mu);
        mcp_pend *p = pend_find(s, id), *done = NULL;
        if (p && p->call) {
            mcpsrc_pend_del(s, p);
            done = p;
        } else if (p && !p->msg) {
            p->msg = m;
            m = NULL;
            pthread_cond_signal(&p->cv);
        }
        bool log = !p && worth_logging(&s->n_unknown_id);
        pthread_mutex_unlock(&s->mu);
        if (done)
            mcpsrc_call_finish(done, m, NULL, NULL);
        if (log)
            th_sdk_log(h, TOOLHOST_LOG_WARN,
                       "server '%s' answered a request id toolhost is not "
                       "waiting for (%llu so far): dropped",
                       s->name, (unsigned long long)s->n_unknown_id);
    } else if (method && id) {
        answer_request(s, id, method);
    } else if (method && strcmp(method, "notifications/progress") == 0) {
        on_progress(s, json_object_get(m, "params"));
    } else if (method &&
               strcmp(method, "notifications/tools/list_changed") == 0) {
        /* the supervisor lists again (this thread must go on reading
         * the answers); many in a row fold into one listing */
        pthread_mutex_lock(&s->mu);
        s->relist = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        th_sdk_log(h, TOOLHOST_LOG_DEBUG,
                   "server '%s' says its tool list changed: listing it again",
                   s->name);
    } else if (worth_logging(&s->n_dropped)) {
        th_sdk_log(h, TOOLHOST_LOG_DEBUG,
                   "server '%s': %s dropped (%llu messages dropped so far)",
                   s->name, method ? method : "a message without a method",
                   (unsigned long long)s->n_dropped);
    }
    json_decref(m);
}

/* Reads what the server wrote (its stdout, non-blocking) and handles
 * each whole line: up to 16 reads, fewer when a read answers less than
 * it asked.  Under rd_mu: the reader's, or for a moment a caller's
 * (mcpsrc_busy_poll).  DRAIN_KILL with s->rd_kill set when the server
 * must be killed. */
enum { DRAIN_MORE = 0, DRAIN_EOF = 1, DRAIN_KILL = 2 };

static int drain(mcp_srv *s, int out)
{
    size_t max = (size_t)s->st->max_message;
    /* a bounded number of reads per turn: stderr is served too */
    for (int turn = 0; turn < 16; turn++) {
        if (s->rd_cap - s->rd_len < READ_CHUNK && s->rd_cap < max + 1) {
            size_t ncap = s->rd_cap * 2 > max + 1 ? max + 1 : s->rd_cap * 2;
            if (ncap < READ_CHUNK)
                ncap = READ_CHUNK;
            if (ncap < s->rd_len + 1)
                ncap = s->rd_len + 1;
            char *nb = realloc(s->rd_buf, ncap);
            if (!nb) {
                s->rd_kill = "out of memory";
                return DRAIN_KILL;
            }
            s->rd_buf = nb;
            s->rd_cap = ncap;
        }
        char *buf = s->rd_buf;
        size_t room = s->rd_cap - s->rd_len, len = s->rd_len;
        ssize_t r = read(out, buf + len, room);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return DRAIN_MORE;
        if (r <= 0)
            return DRAIN_EOF; /* end of its output: it is going away */
        size_t start = 0, scan = len;
        len += (size_t)r;
        for (size_t i = scan; i < len; i++) {
            if (buf[i] != '\n')
                continue;
            size_t n = i - start;
            if (n && buf[start + n - 1] == '\r')
                n--;
            if (n)
                on_line(s, buf + start, n, &s->rd_fa);
            start = i + 1;
        }
        if (start) {
            memmove(buf, buf + start, len - start);
            len -= start;
        }
        s->rd_len = len;
        if (len > max) {
            s->rd_kill = "sent a message over max_message";
            return DRAIN_KILL;
        }
        /* shrink back after a large message */
        if (len == 0 && s->rd_cap > 4 * READ_CHUNK) {
            char *nb = realloc(s->rd_buf, READ_CHUNK);
            if (nb) {
                s->rd_buf = nb;
                s->rd_cap = READ_CHUNK;
            }
        }
        /* less than asked: nothing more for now (poll says when),
         * without a read() that would only answer EAGAIN */
        if ((size_t)r < room)
            return DRAIN_MORE;
    }
    return DRAIN_MORE;
}

__thread const mcp_srv *mcpsrc_busy_polling;

void mcpsrc_busy_poll(mcp_srv *s)
{
    int64_t end = mcpsrc_now_us() + s->busy_poll_us;
    bool answered = false, stop = false, wake = false;
    do {
        /* taken by the reader (woken by the same bytes): it reads */
        if (pthread_mutex_trylock(&s->rd_mu) == 0) {
            int d = DRAIN_MORE;
            if (s->rd_fd >= 0 && !s->rd_kill) {
                mcpsrc_busy_polling = s;
                d = drain(s, s->rd_fd);
                mcpsrc_busy_polling = NULL;
            } else
                stop = true;
            pthread_mutex_unlock(&s->rd_mu);
            /* the end of its output, or a reason to kill it: the
             * reader's to act on (a parked one is woken) */
            if (d != DRAIN_MORE) {
                stop = true;
                wake = true;
            }
        }
        pthread_mutex_lock(&s->mu);
        answered = s->in_flight == 0;
        /* answers to the server's requests wait: the reader's to write */
        if (s->dout)
            stop = true;
        pthread_mutex_unlock(&s->mu);
    } while (!answered && !stop && mcpsrc_now_us() < end);
    pthread_mutex_lock(&s->mu);
    /* not answered: the reader reads it (a parked reader is woken) */
    wake = wake || (!answered && s->rd_parked);
    if (answered) {
        s->spin_backoff = 0;
    } else if (!stop) {
        /* it outlasted the poll: the next calls go without, more of
         * them each time in a row (1, 2, 4 ... 64) */
        s->spin_backoff = s->spin_backoff ? s->spin_backoff * 2 : 1;
        if (s->spin_backoff > 64)
            s->spin_backoff = 64;
        s->spin_skip = s->spin_backoff;
    }
    /* a slot this thread freed goes to a waiting call: the reader's */
    wake = wake || s->waitq || s->n_unsent || s->flush || s->dout;
    pthread_mutex_unlock(&s->mu);
    if (wake) {
        uint64_t one = 1;
        if (write(s->wake_fd, &one, sizeof one) < 0) {
            /* the counter is full: the reader is awake already */
        }
    }
}

static void *reader(void *arg)
{
    reader_ctx *rc = arg;
    mcp_srv *s = rc->s;
    const toolhost_host_api *h = s->st->host;
    char ebuf[512];
    size_t elen = 0;
    unsigned elines = 0;
    int out = rc->out_fd, err = rc->err_fd;
    bool leader_gone = false;
    pthread_mutex_lock(&s->rd_mu);
    s->rd_len = 0;
    s->rd_kill = NULL;
    s->rd_fd = out;
    pthread_mutex_unlock(&s->rd_mu);
    while (out >= 0) {
        struct pollfd pf[4] = {{.fd = out, .events = POLLIN},
                               {.fd = rc->pid_fd, .events = POLLIN},
                               {.fd = err, .events = POLLIN},
                               {.fd = s->wake_fd, .events = POLLIN}};
        int wait = sweep(s);
        /* after the sweep: the slots it freed go to waiting calls at
         * once; a request that could not be written is ended by a sweep
         * right away */
        if (pump(s))
            wait = 0;
        /* Parked: while callers busy-poll (a call in the last PARK_MS,
         * none in flight now), this thread leaves the server's output to
         * them, so that an answer wakes no thread; it looks at it every
         * PARK_LOOK_MS for what comes unasked (notifications), and a
         * call that is not busy-polled wakes it (wake_fd). */
        bool park = false;
        if (s->busy_poll_us > 0 && !leader_gone) {
            pthread_mutex_lock(&s->rd_mu);
            pthread_mutex_lock(&s->mu);
            park = s->in_flight == 0 && !s->waitq && !s->n_unsent &&
                   !s->dout && s->rd_len == 0 &&
                   mcpsrc_now_ms() - s->spin_last_ms < PARK_MS;
            s->rd_parked = park;
            if (park && (s->rd_until < 0 ||
                         s->rd_until > mcpsrc_now_ms() + PARK_LOOK_MS))
                s->rd_until = mcpsrc_now_ms() + PARK_LOOK_MS;
            pthread_mutex_unlock(&s->mu);
            pthread_mutex_unlock(&s->rd_mu);
            if (park) {
                pf[0].fd = -1; /* poll() skips it */
                if (wait < 0 || wait > PARK_LOOK_MS)
                    wait = PARK_LOOK_MS;
            }
        }
        /* once the leader is gone: what is buffered, then the end */
        int pr = poll(pf, 4, leader_gone ? 0 : wait);
        if (park) {
            pthread_mutex_lock(&s->mu);
            s->rd_parked = false;
            pthread_mutex_unlock(&s->mu);
            pf[0].revents = POLLIN; /* a look: read() answers EAGAIN */
        }
        if (pr < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[3].revents) {
            uint64_t n;
            if (read(s->wake_fd, &n, sizeof n) < 0) {
                /* EAGAIN: another reader of a past start drained it */
            }
        }
        if (pf[1].revents)
            leader_gone = true;
        if (leader_gone && !pf[0].revents)
            break;
        if (err >= 0 && pf[2].revents) {
            char tmp[4096];
            ssize_t r = read(err, tmp, sizeof tmp);
            if (r <= 0 && !(r < 0 && (errno == EAGAIN || errno == EINTR)))
                err = -1;
            for (ssize_t i = 0; i < r; i++) {
                if (tmp[i] != '\n' && elen < sizeof ebuf - 1) {
                    ebuf[elen++] = tmp[i];
                    continue;
                }
                if (tmp[i] != '\n')
                    continue; /* the rest of a long line */
                ebuf[elen] = '\0';
                if (elines++ < STDERR_LINES)
                    th_sdk_log(h, TOOLHOST_LOG_INFO, "server '%s' stderr: %s",
                               s->name, ebuf);
                else if (elines == STDERR_LINES + 1)
                    th_sdk_log(h, TOOLHOST_LOG_INFO,
                               "server '%s': more stderr lines are not "
                               "logged until it restarts",
                               s->name);
                elen = 0;
            }
        }
        /* a caller that read for a moment (mcpsrc_busy_poll) may have
         * found a reason to kill the server: it woke this thread */
        pthread_mutex_lock(&s->rd_mu);
        int d = s->rd_kill ? DRAIN_KILL
                : pf[0].revents ? drain(s, out) : DRAIN_MORE;
        const char *kill = s->rd_kill;
        pthread_mutex_unlock(&s->rd_mu);
        if (d == DRAIN_EOF)
            out = -1;
        if (d == DRAIN_KILL) {
            if (strcmp(kill, "out of memory") == 0)
                snprintf(rc->why, rc->why_size, "%s", kill);
            else
                snprintf(rc->why, rc->why_size, "%s (%lld bytes)", kill,
                         (long long)s->st->max_message);
            if (strcmp(kill, "out of memory") != 0)
                th_sdk_log(h, TOOLHOST_LOG_WARN,
                           "server '%s' %s: killing it (it restarts)",
                           s->name, rc->why);
            goto kill;
        }
    }
    goto out;
kill:
    pthread_mutex_lock(&s->mu);
    kill_group(s);
    pthread_mutex_unlock(&s->mu);
out:
    /* no caller reads any more: the buffer goes (a start allocates
     * again as it reads) */
    pthread_mutex_lock(&s->rd_mu);
    s->rd_fd = -1;
    free(s->rd_buf);
    s->rd_buf = NULL;
    s->rd_cap = s->rd_len = 0;
    mcpsrc_fast_answer_free(&s->rd_fa);
    memset(&s->rd_fa, 0, sizeof s->rd_fa);
    pthread_mutex_unlock(&s->rd_mu);
    /* nothing more will be answered: fail what waits now (the
     * supervisor's handshake too) rather than at its timeout; the calls
     * this thread owns end here, and no call is handed to it any more */
    pthread_mutex_lock(&s->mu);
    s->reader_done = true;
    free(s->dout); /* answers for the process that is gone */
    s->dout = NULL;
    s->dout_len = 0;
    pthread_cond_broadcast(&s->cv); /* the supervisor's relist wait */
    mcp_pend *calls = s->waitq;
    s->waitq = s->waitq_tail = NULL;
    s->n_waiting = 0;
    s->n_unsent = 0;
    for (mcp_pend **pp = &s->pending; *pp;) {
        mcp_pend *p = *pp;
        if (p->call) {
            *pp = p->next;
            p->next = calls;
            calls = p;
            continue;
        }
        p->gone = "exited";
        pthread_cond_signal(&p->cv);
        pp = &p->next;
    }
    pthread_mutex_unlock(&s->mu);
    while (calls) {
        mcp_pend *p = calls;
        calls = p->next;
        mcpsrc_call_finish(p, NULL, "server_exited",
                           rc->why[0] ? rc->why
                                      : "closed its output or exited");
    }
    return NULL;
}

/* ---- requests from the supervisor ----------------------------------------- */

/* Sends `method` with `params` (stolen) and waits at most timeout_ms for
 * its result (*res, owned by the caller); 0, or -1 with why. */
static int request(mcp_srv *s, const char *method, json_t *params,
                   int64_t timeout_ms, json_t **res, char *why, size_t ws)
{
    mcp_pend p;
    memset(&p, 0, sizeof p);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&s->mu);
    mcpsrc_pend_add(s, &p);
    pthread_mutex_unlock(&s->mu);
    json_t *msg = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id",
                            (json_int_t)p.id, "method", method, "params",
                            params ? params : json_object());
    int rc = msg ? mcpsrc_send(s, msg) : -1;
    json_decref(msg);
    struct timespec dl;
    abs_deadline(&dl, timeout_ms);
    pthread_mutex_lock(&s->mu);
    while (rc == 0 && !p.msg && !p.gone && !s->stop)
        if (pthread_cond_timedwait(&p.cv, &s->mu, &dl) == ETIMEDOUT)
            break;
    mcpsrc_pend_del(s, &p);
    json_t *m = p.msg;
    bool stop = s->stop, gone = p.gone != NULL;
    pthread_mutex_unlock(&s->mu);
    pthread_cond_destroy(&p.cv);
    *res = NULL;
    if (rc != 0) {
        snprintf(why, ws, "could not send %s (it is not reading)", method);
        return -1;
    }
    if (!m) {
        snprintf(why, ws, "%s",
                 stop   ? "stopped"
                 : gone ? "it exited (or closed its output) before it "
                          "answered"
                        : "did not answer in time");
        return -1;
    }
    const json_t *e = json_object_get(m, "error");
    json_t *r = json_object_get(m, "result");
    if (e || !json_is_object(r)) {
        const char *em = json_string_value(json_object_get(e, "message"));
        snprintf(why, ws, "answered %s with %s%.200s", method,
                 e ? "an error: " : "no result object",
                 e ? (em ? em : "(no message)") : "");
        json_decref(m);
        return -1;
    }
    *res = json_incref(r);
    json_decref(m);
    return 0;
}

static void tools_update(mcp_srv *s, json_t *all);
static int list_tools(mcp_srv *s, bool has_tools, int64_t end, json_t **out,
                      char *why, size_t ws);

/* initialize, initialized, tools/list (every page). */
static int handshake(mcp_srv *s, char *why, size_t ws)
{
    int64_t end = mcpsrc_now_ms() + s->st->start_timeout_ms;
    json_t *res = NULL;
    json_t *params = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion",
                               MCPSRC_PROTOCOL, "capabilities", "clientInfo",
                               "name", "toolhost", "version", "0.1.0");
    char w[200];
    if (request(s, "initialize", params, s->st->start_timeout_ms, &res, w,
                sizeof w) != 0) {
        snprintf(why, ws, "initialize: %s", w);
        return -1;
    }
    if (!json_is_string(json_object_get(res, "protocolVersion"))) {
        json_decref(res);
        snprintf(why, ws, "its initialize result has no protocolVersion");
        return -1;
    }
    bool has_tools = json_object_get(json_object_get(res, "capabilities"),
                                     "tools") != NULL;
    json_decref(res);
    json_t *note = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method",
                             "notifications/initialized");
    int rc = note ? mcpsrc_send(s, note) : -1;
    json_decref(note);
    if (rc != 0) {
        snprintf(why, ws, "could not send notifications/initialized");
        return -1;
    }
    json_t *all = NULL;
    if (list_tools(s, has_tools, end, &all, why, ws) != 0)
        return -1;
    tools_update(s, all);
    return 0;
}

/* tools/list, every page (none when !has_tools), before `end`
 * (monotonic ms): 0 with *out (an array, owned), or -1 with why. */
static int list_tools(mcp_srv *s, bool has_tools, int64_t end, json_t **out,
                      char *why, size_t ws)
{
    json_t *res = NULL;
    char w[200];
    *out = NULL;
    json_t *all = json_array();
    if (!all) {
        snprintf(why, ws, "out of memory");
        return -1;
    }
    char *cursor = NULL;
    for (int page = 0; has_tools && page < MAX_PAGES; page++) {
        json_t *p = cursor ? json_pack("{s:s}", "cursor", cursor)
                           : json_object();
        free(cursor);
        cursor = NULL;
        int64_t left = end - mcpsrc_now_ms();
        if (left < 1 || request(s, "tools/list", p, left, &res, w,
                                sizeof w) != 0) {
            snprintf(why, ws, "tools/list: %s",
                     left < 1 ? "did not answer in time" : w);
            json_decref(all);
            return -1;
        }
        const json_t *tools = json_object_get(res, "tools");
        if (!json_is_array(tools) ||
            json_array_size(all) + json_array_size(tools) > MAX_TOOLS) {
            snprintf(why, ws, "tools/list: %s",
                     json_is_array(tools) ? "more than 4096 tools"
                                          : "no 'tools' list in the result");
            json_decref(res);
            json_decref(all);
            return -1;
        }
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) if (json_is_object(t))
            json_array_append(all, t);
        const char *next = json_string_value(json_object_get(res,
                                                             "nextCursor"));
        if (next && next[0] && !(cursor = strdup(next))) {
            json_decref(res);
            json_decref(all);
            snprintf(why, ws, "out of memory");
            return -1;
        }
        json_decref(res);
        if (!cursor)
            break;
    }
    if (cursor) {
        th_sdk_log(s->st->host, TOOLHOST_LOG_WARN,
                   "server '%s': tools/list has more than %d pages: the "
                   "rest is not imported",
                   s->name, MAX_PAGES);
        free(cursor);
    }
    *out = all;
    return 0;
}

/* ---- the supervisor -------------------------------------------------------- */

/* After a start that failed or a server that went down (s->mu held):
 * the next wait, doubled per failure in a row. */
static int64_t backoff(mcp_srv *s, bool was_up, int64_t started)
{
    mcp_state *st = s->st;
    if (was_up && mcpsrc_now_ms() - started > st->restart_max_ms)
        s->attempt = 0;
    s->attempt++;
    int64_t delay = st->restart_initial_ms;
    for (unsigned i = 1; i < s->attempt && delay < st->restart_max_ms; i++)
        delay *= 2;
    if (delay > st->restart_max_ms)
        delay = st->restart_max_ms;
    s->next_try = mcpsrc_now_ms() + delay;
    return delay;
}

/* Keeps the list (`all`, stolen) as the server's latest; when it
 * differs from what this generation serves (names, descriptions,
 * schemas: the whole entries), asks the host to load the plugin again
 * (ABI 1.5 tools_changed(), once per generation), whose init_tools()
 * imports the new list.  `what` says where the list came from.  Before
 * init_tools() built the tools (no `served` yet) the build takes the
 * handshake's list: nothing to ask. */
static void tools_update_ex(mcp_srv *s, json_t *all, const char *what,
                            bool start)
{
    const toolhost_host_api *h = s->st->host;
    pthread_mutex_lock(&s->mu);
    if (!s->served) {
        /* init_tools() not built yet: a start's list is the one it
         * builds from; a relisting leaves it alone (init() reads it) */
        if (start) {
            json_decref(s->tools);
            s->tools = all;
        } else {
            json_decref(all);
        }
        pthread_mutex_unlock(&s->mu);
        return;
    }
    bool differs = !json_equal(s->served, all);
    bool ask = differs && !s->asked;
    if (ask)
        s->asked = true;
    json_decref(s->tools);
    s->tools = all;
    pthread_mutex_unlock(&s->mu);
    if (!differs) {
        th_sdk_log(h, TOOLHOST_LOG_DEBUG,
                   "server '%s': %s lists the tools toolhost serves: nothing "
                   "to import", s->name, what);
        return;
    }
    if (!ask)
        return; /* asked already: the next generation lists again */
    char reason[200];
    snprintf(reason, sizeof reason, "server '%s': %s lists other tools",
             s->name, what);
    int rc = TH_SDK_HOST_HAS(h, tools_changed) ? h->tools_changed(h, reason)
                                               : TOOLHOST_ENOTSUP;
    if (rc != 0) {
        th_sdk_log(h, TOOLHOST_LOG_WARN,
                   "server '%s': its tool list changed and this host cannot "
                   "load the plugin again (tools_changed() returned %d): "
                   "toolhost keeps serving the tools it imported (a reload "
                   "of the config imports the new list)",
                   s->name, rc);
        pthread_mutex_lock(&s->mu);
        s->asked = rc != TOOLHOST_ESTATE; /* not now: a later change asks */
        pthread_mutex_unlock(&s->mu);
    }
}

static void tools_update(mcp_srv *s, json_t *all)
{
    tools_update_ex(s, all, "its new start", true);
}

/* While a stdio server's reader runs: each list_changed it reported
 * (s->relist) is one tools/list (every page) by this thread, the
 * supervisor, compared with what the generation serves. */
static void relist_while_up(mcp_srv *s)
{
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && !s->reader_done && !s->relist)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stop || s->reader_done)
            break;
        s->relist = false;
        pthread_mutex_unlock(&s->mu);
        json_t *all = NULL;
        char why[256];
        if (list_tools(s, true, mcpsrc_now_ms() + s->st->start_timeout_ms,
                       &all, why, sizeof why) == 0)
            tools_update_ex(s, all, "tools/list after its list_changed",
                            false);
        else
            th_sdk_log(s->st->host, TOOLHOST_LOG_WARN,
                       "server '%s' said its tool list changed; listing it "
                       "again failed: %s", s->name, why);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

/* An HTTP server said list_changed on its GET stream: every page of
 * tools/list, compared with what the generation serves. */
static void relist_http(mcp_srv *s)
{
    json_t *all = NULL;
    char why[256];
    if (mcpsrc_http_list(s, &all, why, sizeof why) == 0)
        tools_update_ex(s, all, "tools/list after its list_changed", false);
    else
        th_sdk_log(s->st->host, TOOLHOST_LOG_WARN,
                   "server '%s' said its tool list changed; listing it "
                   "again failed: %s", s->name, why);
}

/* A server with url: a session (initialize, tools/list), kept until a
 * call finds it gone (http_down), then a new one after the back-off. */
static void *supervise_http(mcp_srv *s)
{
    const toolhost_host_api *h = s->st->host;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        if (s->stop) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        s->state = SRV_STARTING;
        s->generation++;
        s->http_down = false;
        pthread_mutex_unlock(&s->mu);
        char why[256] = "";
        json_t *tools = NULL;
        int64_t started = mcpsrc_now_ms();
        bool up = mcpsrc_http_handshake(s, &tools, why, sizeof why) == 0;
        if (up) {
            tools_update(s, tools);
            th_sdk_log(h, TOOLHOST_LOG_INFO,
                       "server '%s' is up (%s, session #%llu, %zu tool%s "
                       "listed)",
                       s->name, s->url, (unsigned long long)s->generation,
                       json_array_size(tools),
                       json_array_size(tools) == 1 ? "" : "s");
            pthread_mutex_lock(&s->mu);
            s->state = SRV_UP;
            s->first_done = true;
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
            /* the server's own messages, until stop or a call finds the
             * session gone */
            mcpsrc_http_listen(s, relist_http);
            pthread_mutex_lock(&s->mu);
            while (!s->stop && !s->http_down)
                pthread_cond_wait(&s->cv, &s->mu);
            snprintf(why, sizeof why, "%s", s->why);
            pthread_mutex_unlock(&s->mu);
        }
        pthread_mutex_lock(&s->mu);
        s->state = SRV_DOWN;
        snprintf(s->why, sizeof s->why, "%s", why);
        int64_t delay = backoff(s, up, started);
        bool first = !s->first_done;
        s->first_done = true;
        pthread_cond_broadcast(&s->cv);
        bool stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop || first)
            break;
        th_sdk_log(h, TOOLHOST_LOG_WARN,
                   "server '%s' %s %s; its tools answer 'unavailable' until "
                   "it is back: new session #%u in %lldms",
                   s->name, up ? "went away:" : "did not start:", why,
                   s->attempt, (long long)delay);
        struct timespec dl;
        abs_deadline(&dl, delay);
        pthread_mutex_lock(&s->mu);
        while (!s->stop)
            if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT)
                break;
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

static void *supervise(void *arg)
{
    mcp_srv *s = arg;
    mcp_state *st = s->st;
    const toolhost_host_api *h = st->host;
    if (s->url)
        return supervise_http(s);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        if (s->stop) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        s->state = SRV_STARTING;
        s->generation++;
        s->n_stderr = 0;
        pthread_mutex_unlock(&s->mu);
        char why[400] = "", rwhy[160] = "";
        int64_t started = mcpsrc_now_ms();
        bool was_up = false;
        if (spawn(s, why, sizeof why) == 0) {
            reader_ctx rc = {s, s->out_fd, s->err_fd, s->pid_fd, rwhy,
                             sizeof rwhy};
            pthread_t rt;
            pthread_mutex_lock(&s->mu);
            s->reader_done = false;
            pthread_mutex_unlock(&s->mu);
            bool reading = pthread_create(&rt, NULL, reader, &rc) == 0;
            if (!reading) {
                pthread_mutex_lock(&s->mu);
                s->reader_done = true;
                pthread_mutex_unlock(&s->mu);
            }
            if (!reading)
                snprintf(why, sizeof why, "cannot start its reader thread");
            else if (handshake(s, why, sizeof why) == 0) {
                pthread_mutex_lock(&s->mu);
                was_up = !s->stop;
                if (was_up)
                    s->state = SRV_UP;
                s->first_done = true;
                pthread_cond_broadcast(&s->cv);
                size_t n = json_array_size(s->tools);
                pid_t pid = s->pid;
                pthread_mutex_unlock(&s->mu);
                th_sdk_log(h, TOOLHOST_LOG_INFO,
                           "server '%s' is up (pid %d, start #%llu, %zu "
                           "tool%s listed)",
                           s->name, (int)pid,
                           (unsigned long long)s->generation, n,
                           n == 1 ? "" : "s");
                why[0] = '\0';
            }
            if (!was_up) {
                pthread_mutex_lock(&s->mu);
                kill_group(s);
                pthread_mutex_unlock(&s->mu);
            }
            if (reading && was_up)
                relist_while_up(s);
            if (reading)
                pthread_join(rt, NULL);
            char ewhy[96] = "";
            pthread_mutex_lock(&s->mu);
            bool stopping = s->stop;
            pthread_mutex_unlock(&s->mu);
            reap(s, stopping, ewhy, sizeof ewhy);
            if (!why[0])
                snprintf(why, sizeof why, "%s%s%s", rwhy[0] ? rwhy : ewhy,
                         rwhy[0] && ewhy[0] ? ", then " : "",
                         rwhy[0] ? ewhy : "");
            else if (ewhy[0]) {
                size_t n = strlen(why);
                snprintf(why + n, sizeof why - n, " (it %s)", ewhy);
            }
        }
        pthread_mutex_lock(&s->mu);
        s->state = SRV_DOWN;
        snprintf(s->why, sizeof s->why, "%.255s", why);
        for (mcp_pend *p = s->pending; p; p = p->next) {
            p->gone = "exited";
            pthread_cond_signal(&p->cv);
        }
        int64_t delay = backoff(s, was_up, started);
        bool first = !s->first_done;
        s->first_done = true;
        pthread_cond_broadcast(&s->cv);
        if (s->stop) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        pthread_mutex_unlock(&s->mu);
        if (!first)
            th_sdk_log(h, TOOLHOST_LOG_WARN,
                       "server '%s' %s %s; its tools answer 'unavailable' "
                       "until it is back: restart #%u in %lldms",
                       s->name, was_up ? "stopped:" : "did not start:", why,
                       s->attempt, (long long)delay);
        else
            break; /* init() says why and stops */
        struct timespec dl;
        abs_deadline(&dl, delay);
        pthread_mutex_lock(&s->mu);
        while (!s->stop)
            if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT)
                break;
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

int mcpsrc_servers_start(mcp_state *st, char *err, size_t es)
{
    for (size_t i = 0; i < st->n_srv; i++) {
        mcp_srv *s = &st->srv[i];
        if (pthread_create(&s->sup, NULL, supervise, s) != 0) {
            snprintf(err, es, "server '%s': cannot start its thread",
                     s->name);
            return -1;
        }
        s->sup_started = true;
    }
    for (size_t i = 0; i < st->n_srv; i++) {
        mcp_srv *s = &st->srv[i];
        pthread_mutex_lock(&s->mu);
        while (!s->first_done)
            pthread_cond_wait(&s->cv, &s->mu);
        bool up = s->state == SRV_UP;
        pthread_mutex_unlock(&s->mu);
        if (!up) {
            snprintf(err, es, "server '%s' (%s) did not start: %s", s->name,
                     s->url ? s->url : s->argv[0], s->why);
            return -1;
        }
    }
    return 0;
}

void mcpsrc_servers_stop(mcp_state *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n_srv; i++) {
        mcp_srv *s = &st->srv[i];
        if (!s->sup_started)
            continue;
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->cv);
        mcpsrc_http_wake(s);
        for (mcp_pend *p = s->pending; p; p = p->next)
            pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&s->mu);
        /* close its stdin: the supervisor's reap() sees it exit, else
         * ends it */
        pthread_mutex_lock(&s->wmu);
        if (s->in_fd >= 0)
            shutdown(s->in_fd, SHUT_WR);
        pthread_mutex_unlock(&s->wmu);
    }
    /* a server that does not exit at the end of its input: SIGTERM after
     * a grace, SIGKILL after another (its reader then ends) */
    for (size_t i = 0; i < st->n_srv; i++) {
        mcp_srv *s = &st->srv[i];
        if (!s->sup_started)
            continue;
        pthread_mutex_lock(&s->mu);
        for (int round = 0; round < 3 && s->pid > 0; round++) {
            if (round == 1)
                kill(-s->pid, SIGTERM);
            else if (round == 2)
                kill_group(s);
            struct timespec dl;
            abs_deadline(&dl, TERM_GRACE_MS);
            while (s->pid > 0)
                if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT)
                    break;
        }
        pthread_mutex_unlock(&s->mu);
    }
    for (size_t i = 0; i < st->n_srv; i++) {
        mcp_srv *s = &st->srv[i];
        if (!s->sup_started)
            continue;
        pthread_join(s->sup, NULL);
        s->sup_started = false;
    }
}
