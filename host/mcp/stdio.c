/* stdio.c - MCP over stdio: newline-delimited JSON-RPC on two fds, one
 * session, on a libuv loop (the input pipe, SIGTERM/SIGINT, the hot
 * reload watcher, a uv_async for "the output broke" from other threads).
 *
 * Output: every message is one line written whole under a mutex, from
 * whatever thread produced it (the loop, a worker, the notifier), with a
 * blocking write (poll() when the fd is non-blocking).  The lines the loop
 * thread produces while it handles one read of input (answers of calls it
 * ran itself: th_mcp_opts.run_short) are gathered and written with one
 * write() at the end of that read (or once 256 KiB are pending); a line
 * from any other thread first writes out what is pending, so lines leave
 * in the order they were made.  A client that
 * stops reading stdout therefore holds back the threads that answer it
 * (and, once one of them holds the session's lock, the loop too): like
 * any stdio server, this one needs a client that reads what it asked for.
 * Input that is a regular file or /dev/null (epoll refuses those) is
 * copied into a pipe by a thread of ours (relay_main).  Input: bytes are split
 * at '\n' ('\r' before it dropped); a line longer than max_message is
 * answered with an error and skipped up to its newline.  End of input or a
 * signal stops reading; calls in flight get shutdown_grace to finish (their
 * answers still go out), then the rest are cancelled. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "mcp.h"
#include "front/mcp_config.h"
#include "th/buf.h"
#include "th/log.h"
#include "front/reload_watch.h"
#include "front/uv_guard.h"
#include "th/reload.h"

typedef struct mcp_stdio {
    uv_loop_t loop;
    uv_pipe_t in;
    int in_fd;              /* what `in` reads (the relay's pipe) */
    /* input that epoll refuses (a file, /dev/null): relay_main copies it
     * into a pipe, `in` reads the other end */
    pthread_t relay;
    bool relay_started;
    int relay_src, relay_dst;
    uv_signal_t sigterm, sigint;
    uv_async_t wake;
    th_reload_watch *reload;
    th_mcp_session *m;
    int out_fd;
    pthread_mutex_t wmu;    /* output lines, broken */
    bool broken;
    bool lost;              /* under wmu: a message was lost (no memory) */
    bool wake_closed;       /* under wmu: no uv_async_send() any more */
    bool stopping;
    const char *why;
    th_buf line;            /* the line being read */
    bool skipping;          /* past max_message: drop until '\n' */
    size_t max;
    int64_t grace_ms;       /* host.shutdown_grace */
    bool input_ended;       /* under wmu */
    th_buf out;             /* under wmu: lines of the loop thread not yet
                               written (see the top of the file) */
    int64_t out_t0;         /* under wmu: when out became non-empty */
    int64_t spin_ns;        /* host.busy_poll_us */
    bool got_input;         /* on_read() read something (run_loop) */
    char rbuf[65536];
} mcp_stdio;

#define OUT_FLUSH_AT ((size_t)256 << 10)
#define OUT_HOLD_NS 1000000 /* pending lines wait at most ~1 ms */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The session whose input the loop thread is handling now: its lines wait
 * in x->out for the end of the read. */
static _Thread_local mcp_stdio *tl_feeding;

/* Whether the client is done sending (end of input seen, or its end of
 * the input pipe or socket closed: seen even while the loop is stuck in a
 * write).  wmu held. */
static bool input_gone_locked(mcp_stdio *x)
{
    if (x->input_ended)
        return true;
    struct pollfd pi = {.fd = x->in_fd, .events = POLLRDHUP};
    return poll(&pi, 1, 0) > 0 && (pi.revents & (POLLHUP | POLLRDHUP));
}

/* Writes the whole line (wmu held).  A client that has closed its input
 * and reads nothing more for host.shutdown_grace is given up on (a log
 * line), so the process ends on end of input even then; while its input
 * is open, a client that does not read holds the host back (it stops
 * reading the input: bounded memory). */
static int write_all(mcp_stdio *x, const char *p, size_t n)
{
    int fd = x->out_fd;
    int64_t stalled = 0;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                struct pollfd pf = {.fd = fd, .events = POLLOUT};
                if (poll(&pf, 1, 200) > 0)
                    continue;
                stalled = input_gone_locked(x) ? stalled + 200 : 0;
                if (stalled >= x->grace_ms) {
                    th_log_warn("mcp stdio: the client closed its input and "
                                "has read nothing for %lld ms "
                                "(host.shutdown_grace): giving up its output",
                                (long long)stalled);
                    return -1;
                }
                continue;
            }
            return -1;
        }
        stalled = 0;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Writes the pending lines, then p[0..n) (wmu held).  False when the
 * output broke (now or before). */
static bool out_write_locked(mcp_stdio *x, const char *p, size_t n)
{
    if (x->broken)
        return false;
    bool fail = false;
    if (x->out.len) {
        fail = write_all(x, (const char *)x->out.data, x->out.len) != 0;
        th_buf_reset(&x->out);
        if (x->out.cap > OUT_FLUSH_AT * 4) {
            th_buf_destroy(&x->out);
            th_buf_init(&x->out);
        }
    }
    if (!fail && n)
        fail = write_all(x, p, n) != 0;
    if (fail) {
        x->broken = true;
        if (!x->wake_closed)
            uv_async_send(&x->wake);
        th_log_warn("mcp stdio: cannot write to the client: stopping");
    }
    return !fail;
}

/* A message could not be built or written (out of memory): the client
 * would wait for it for good, so the session stops (wmu held), as when
 * the output breaks: the client sees its input end. */
static void lost_locked(mcp_stdio *x)
{
    th_log_error("mcp stdio: out of memory: a message was lost: stopping");
    x->lost = true;
    x->broken = true;
    if (!x->wake_closed)
        uv_async_send(&x->wake);
}

/* Appends msg as one line to b.  0 or -1 (b as it was). */
static int out_dump(th_buf *b, const json_t *msg)
{
    if (mcp_json_append(b, msg) != 0)
        return -1;
    if (th_buf_append(b, "\n", 1) != 0) {
        return -1;
    }
    return 0;
}

/* The loop thread: writes what its lines of the last read left pending
 * (`old_only`: only when they have waited OUT_HOLD_NS: a read of many
 * lines whose calls take a while does not hold the first answers back). */
static void out_flush(mcp_stdio *x, bool old_only)
{
    pthread_mutex_lock(&x->wmu);
    if (x->out.len && (!old_only || now_ns() - x->out_t0 >= OUT_HOLD_NS))
        out_write_locked(x, NULL, 0);
    pthread_mutex_unlock(&x->wmu);
}

/* Appends one line to the pending lines (wmu held): the loop thread
 * handling input leaves it there for the end of the read (or until
 * OUT_FLUSH_AT); any other thread writes everything pending at once. */
static void out_line_locked(mcp_stdio *x, const char *p, size_t n)
{
    if (x->broken)
        return;
    size_t at = x->out.len;
    if (!at)
        x->out_t0 = now_ns();
    if (th_buf_reserve(&x->out, n + 1) != 0) {
        lost_locked(x);
        return;
    }
    memcpy(x->out.data + at, p, n);
    x->out.data[at + n] = '\n';
    x->out.len = at + n + 1;
    if (tl_feeding != x || x->out.len >= OUT_FLUSH_AT)
        out_write_locked(x, NULL, 0);
}

static void tr_send_text(void *ud, const char *text, size_t len,
                         const json_t *req)
{
    (void)req;
    mcp_stdio *x = ud;
    pthread_mutex_lock(&x->wmu);
    out_line_locked(x, text, len);
    pthread_mutex_unlock(&x->wmu);
}

static void tr_send(void *ud, const json_t *msg, const json_t *req)
{
    mcp_stdio *x = ud;
    if (tl_feeding == x) {
        /* The loop thread, handling input: encoded straight into the
         * pending lines. */
        pthread_mutex_lock(&x->wmu);
        size_t at = x->out.len;
        if (!at)
            x->out_t0 = now_ns();
        if (!x->broken && out_dump(&x->out, msg) != 0) {
            x->out.len = at;
            lost_locked(x);
        }
        if (x->out.len >= OUT_FLUSH_AT)
            out_write_locked(x, NULL, 0);
        pthread_mutex_unlock(&x->wmu);
        return;
    }
    /* Another thread: encoded outside the lock. */
    th_buf b;
    th_buf_init(&b);
    if (mcp_json_append(&b, msg) != 0) {
        th_buf_destroy(&b);
        pthread_mutex_lock(&x->wmu);
        lost_locked(x);
        pthread_mutex_unlock(&x->wmu);
        return;
    }
    tr_send_text(x, (const char *)b.data, b.len, req);
    th_buf_destroy(&b);
}

static void tr_lost(void *ud, const json_t *req)
{
    (void)req;
    mcp_stdio *x = ud;
    pthread_mutex_lock(&x->wmu);
    lost_locked(x);
    pthread_mutex_unlock(&x->wmu);
}

static void begin_stop(mcp_stdio *x, const char *why)
{
    if (x->stopping)
        return;
    x->stopping = true;
    x->why = why;
    th_log_info("mcp stdio: %s: stopping", why);
    if (!uv_is_closing((uv_handle_t *)&x->in))
        uv_close((uv_handle_t *)&x->in, NULL);
    if (x->reload) {
        th_reload_watch_stop(x->reload);
        x->reload = NULL;
    }
    uv_close((uv_handle_t *)&x->sigterm, NULL);
    uv_close((uv_handle_t *)&x->sigint, NULL);
    pthread_mutex_lock(&x->wmu);
    x->wake_closed = true;
    x->input_ended = true;
    pthread_mutex_unlock(&x->wmu);
    uv_close((uv_handle_t *)&x->wake, NULL);
}

static void on_wake(uv_async_t *a)
{
    mcp_stdio *x = a->data;
    pthread_mutex_lock(&x->wmu);
    bool broken = x->broken, lost = x->lost;
    pthread_mutex_unlock(&x->wmu);
    if (broken)
        begin_stop(x, lost ? "out of memory" : "output closed");
}

static void on_signal(uv_signal_t *s, int sig)
{
    begin_stop(s->data, sig == SIGINT ? "SIGINT" : "SIGTERM");
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    mcp_stdio *x = h->data;
    buf->base = x->rbuf;
    buf->len = sizeof x->rbuf;
}

/* One whole line (its '\n' and any '\r' before it dropped). */
static void line_in(mcp_stdio *x, const char *p, size_t len)
{
    /* Blank lines are ignored. */
    size_t i = 0;
    while (i < len && (p[i] == ' ' || p[i] == '\t'))
        i++;
    if (i < len) {
        th_mcp_session_input(x->m, p, len);
        out_flush(x, true);
    }
}

static void feed(mcp_stdio *x, const char *p, size_t n)
{
    while (n > 0 && !x->stopping) {
        const char *nl = memchr(p, '\n', n);
        size_t k = nl ? (size_t)(nl - p) : n;
        if (nl && !x->skipping && !x->line.len && k <= x->max) {
            /* The whole line is in this read: read in place. */
            line_in(x, p, k && p[k - 1] == '\r' ? k - 1 : k);
            p += k + 1;
            n -= k + 1;
            continue;
        }
        if (!x->skipping) {
            if (x->line.len + k > x->max) {
                /* Too long: the core answers with an error; skip the
                 * rest of the line. */
                th_log_warn("mcp stdio: a line passed mcp_max_message (%zu "
                            "bytes): answered with an error, skipped to "
                            "its end",
                            x->max);
                th_buf_append(&x->line, p, x->max + 1 - x->line.len);
                th_mcp_session_input(x->m, (const char *)x->line.data,
                                     x->line.len);
                th_buf_destroy(&x->line);
                th_buf_init(&x->line);
                x->skipping = true;
            } else if (th_buf_append(&x->line, p, k) != 0) {
                th_log_error("mcp stdio: out of memory reading a line");
                th_buf_destroy(&x->line);
                th_buf_init(&x->line);
                x->skipping = true;
            }
        }
        if (!nl)
            return;
        p += k + 1;
        n -= k + 1;
        if (x->skipping) {
            x->skipping = false;
            continue;
        }
        size_t len = x->line.len;
        if (len && x->line.data[len - 1] == '\r')
            len--;
        line_in(x, (const char *)x->line.data, len);
        th_buf_reset(&x->line);
        if (x->line.cap > ((size_t)1 << 20)) {
            th_buf_destroy(&x->line);
            th_buf_init(&x->line);
        }
    }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    mcp_stdio *x = s->data;
    if (nread > 0) {
        x->got_input = true;
        tl_feeding = x;
        feed(x, buf->base, (size_t)nread);
        tl_feeding = NULL;
        out_flush(x, false);
        return;
    }
    if (nread == UV_EOF) {
        if (x->line.len && !x->skipping)
            th_mcp_session_input(x->m, (const char *)x->line.data,
                                 x->line.len);
        begin_stop(x, "end of input");
    } else if (nread < 0) {
        th_log_warn("mcp stdio: reading input: %s", uv_strerror((int)nread));
        begin_stop(x, "input error");
    }
}

/* The loop, busy polling (host.busy_poll_us): after input it keeps
 * looking for more, without sleeping, for spin_ns, so that a client that
 * sends its next message that soon (or a worker that ends a call) wakes
 * no thread.  Only for a client that has had at most one call in flight
 * for ALONE_NS: one with more keeps the loop busy anyway, and a spinning
 * loop would take a CPU from the threads that answer them.  A look that
 * finds nothing makes the next ones rarer: 1, 2, 4 ... 64 inputs go
 * without, until a look finds input again. */
#define ALONE_NS (100 * 1000000LL)
static void run_loop(mcp_stdio *x)
{
    unsigned skip = 0, backoff = 0;
    int64_t concurrent = 0; /* when more than one call was last in flight */
    x->got_input = false;
    for (;;) {
        if (x->spin_ns > 0 && x->got_input && !x->stopping) {
            x->got_input = false;
            int64_t now = now_ns();
            if (th_mcp_session_inflight(x->m) > 1)
                concurrent = now;
            if (now - concurrent < ALONE_NS) {
                /* calls overlap: the loop is busy anyway */
            } else if (skip) {
                skip--;
            } else {
                int64_t end = now_ns() + x->spin_ns;
                do {
                    if (!uv_run(&x->loop, UV_RUN_NOWAIT))
                        return;
                } while (!x->got_input && !x->stopping && now_ns() < end);
                if (x->got_input) {
                    backoff = 0;
                } else {
                    backoff = backoff ? backoff * 2 : 1;
                    if (backoff > 64)
                        backoff = 64;
                    skip = backoff;
                }
                continue;
            }
        }
        if (!uv_run(&x->loop, UV_RUN_ONCE))
            return;
    }
}

/* Input from a regular file or /dev/null (epoll refuses them): this
 * thread copies it into a pipe whose other end is `in`, so reading stays
 * that of a pipe (not libuv's thread pool, whose creation aborts the
 * process when it fails).  It ends at the end of the input or when the
 * read end is gone (EPIPE; SIGPIPE is ignored); reading a file never
 * blocks, so th_mcp_stdio_run() joins it once the loop is over. */
static void *relay_main(void *arg)
{
    mcp_stdio *x = arg;
    th_fd_relay(x->relay_src, x->relay_dst);
    return NULL;
}

/* Starts the relay for in_fd; the fd to read instead, or -1. */
static int relay_start(mcp_stdio *x, int in_fd)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    x->relay_src = in_fd;
    x->relay_dst = p[1];
    if (pthread_create(&x->relay, NULL, relay_main, x) != 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    x->relay_started = true;
    return p[0];
}

static bool pollable(int fd)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        return true;
    struct epoll_event ev = {.events = EPOLLIN};
    bool ok = epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0;
    close(ep);
    return ok;
}

int th_mcp_stdio_run(th_host *h, const th_principal *who,
                     const th_mcp_opts *o, int in_fd, int out_fd,
                     th_error *err)
{
    mcp_stdio *x = calloc(1, sizeof *x);
    if (!x)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    x->out_fd = out_fd;
    /* Non-blocking output (a pipe or a socket: ours alone since fd 1 is
     * stderr now), so a stuck client can be noticed (write_all). */
    struct stat ost;
    if (fstat(out_fd, &ost) == 0 &&
        (S_ISFIFO(ost.st_mode) || S_ISSOCK(ost.st_mode))) {
        int fl = fcntl(out_fd, F_GETFL);
        if (fl >= 0)
            fcntl(out_fd, F_SETFL, fl | O_NONBLOCK);
    }
    th_buf_init(&x->line);
    pthread_mutex_init(&x->wmu, NULL);
    th_uv_guard_init(); /* libuv's own allocations: no abort() */
    int rc = uv_loop_init(&x->loop);
    if (rc < 0) {
        pthread_mutex_destroy(&x->wmu);
        free(x);
        return th_error_set(err, TH_EIO, "event loop: %s", uv_strerror(rc));
    }
    signal(SIGPIPE, SIG_IGN);
    th_mcp_transport t = {.send = tr_send, .request_done = NULL,
                          .send_text = tr_send_text, .lost = tr_lost};
    /* One client, and its input is read on this loop only: a short sync
     * call runs right here (th_mcp_opts.run_short). */
    th_mcp_opts so = o ? *o : (th_mcp_opts){0};
    so.run_short = true;
    th_buf_init(&x->out);
    x->m = th_mcp_session_new(h, who, &t, x, &so, err);
    if (!x->m) {
        rc = err ? err->code : TH_ENOMEM;
        th_buf_destroy(&x->out);
        uv_loop_close(&x->loop);
        pthread_mutex_destroy(&x->wmu);
        free(x);
        return rc ? rc : TH_ENOMEM;
    }
    const th_config *cfg = th_host_config(h);
    x->spin_ns = (int64_t)cfg->host.busy_poll_us * 1000;
    x->grace_ms = cfg->host.shutdown_grace_ms
                      ? (int64_t)cfg->host.shutdown_grace_ms
                      : 5000;
    x->max = o && o->max_message ? o->max_message
             : th_mcp_config(cfg) && th_mcp_config(cfg)->max_message
                 ? (size_t)th_mcp_config(cfg)->max_message
                 : TH_MCP_MAX_MESSAGE_DEFAULT;
    /* begin_stop() closes these handles: all of them are made (none of
     * these inits allocates but the first signal's, which the guard
     * covers), and a failure to start one stops the session at once. */
    const char *what = "event loop";
    if ((rc = uv_async_init(&x->loop, &x->wake, on_wake)) < 0) {
        th_mcp_session_free(x->m);
        th_buf_destroy(&x->out);
        uv_loop_close(&x->loop);
        pthread_mutex_destroy(&x->wmu);
        free(x);
        return th_error_set(err, TH_EIO, "mcp stdio: event loop: %s",
                            uv_strerror(rc));
    }
    x->wake.data = x;
    uv_pipe_init(&x->loop, &x->in, 0);
    x->in.data = x;
    int r1 = uv_signal_init(&x->loop, &x->sigterm);
    int r2 = uv_signal_init(&x->loop, &x->sigint);
    x->sigterm.data = x->sigint.data = x;
    if (r1 < 0 || r2 < 0) {
        /* an uninitialised handle must not reach begin_stop's uv_close */
        if (r1 == 0)
            uv_close((uv_handle_t *)&x->sigterm, NULL);
        if (r2 == 0)
            uv_close((uv_handle_t *)&x->sigint, NULL);
        uv_close((uv_handle_t *)&x->wake, NULL);
        uv_close((uv_handle_t *)&x->in, NULL);
        uv_run(&x->loop, UV_RUN_DEFAULT);
        th_mcp_session_free(x->m);
        th_buf_destroy(&x->out);
        uv_loop_close(&x->loop);
        pthread_mutex_destroy(&x->wmu);
        free(x);
        return th_error_set(err, TH_EIO, "mcp stdio: signal handlers: %s",
                            uv_strerror(r1 < 0 ? r1 : r2));
    }
    if ((rc = uv_signal_start(&x->sigterm, on_signal, SIGTERM)) == 0)
        rc = uv_signal_start(&x->sigint, on_signal, SIGINT);
    if (rc < 0)
        what = "signal handlers";
    x->in_fd = in_fd;
    if (rc == 0 && !pollable(in_fd)) {
        x->in_fd = relay_start(x, in_fd);
        if (x->in_fd < 0) {
            rc = UV_ENOMEM;
            what = "stdin: cannot start the thread that reads a file";
        }
        th_log_debug("mcp stdio: input is not a pipe or socket: relayed");
    }
    if (rc == 0) {
        what = "stdin";
        rc = uv_pipe_open(&x->in, x->in_fd);
        if (rc < 0 && x->relay_started)
            close(x->in_fd);
        if (rc == 0)
            rc = uv_read_start((uv_stream_t *)&x->in, on_alloc, on_read);
    }
    if (rc < 0) {
        bool in = strcmp(what, "stdin") == 0;
        th_error_set(err, TH_EIO, "%s: %s%s", what, uv_strerror(rc),
                     in ? " (MCP over stdio needs a pipe, a socket, a "
                          "terminal or a file)"
                        : "");
        begin_stop(x, "no input");
        uv_run(&x->loop, UV_RUN_DEFAULT);
        uv_loop_close(&x->loop);
        if (x->relay_started)
            pthread_join(x->relay, NULL);
        th_mcp_session_free(x->m);
        th_buf_destroy(&x->line);
        th_buf_destroy(&x->out);
        pthread_mutex_destroy(&x->wmu);
        free(x);
        return TH_EIO;
    }
    th_reloader *rl = th_host_reloader(h);
    if (rl) {
        th_reload_watch_opts wo = {.mode = cfg->host.reload,
                                   .debounce_ms = cfg->host.reload_debounce_ms};
        th_error we;
        if (th_reload_watch_start(rl, &x->loop, &wo, &x->reload, &we) != 0)
            th_log_warn("hot reload triggers are off: %s", we.msg);
    }
    th_log_info("mcp: serving on stdio (uid %u%s%s)", (unsigned)who->uid,
                o && o->toolset ? ", toolset " : "",
                o && o->toolset ? o->toolset : "");
    run_loop(x);
    /* Open subscriptions/listen requests get their closing result. */
    th_mcp_session_close_listens(x->m);
    /* Calls in flight finish within the grace (their answers go out),
     * then the rest are cancelled by th_mcp_session_free. */
    int64_t grace = cfg->host.shutdown_grace_ms
                        ? (int64_t)cfg->host.shutdown_grace_ms
                        : 5000;
    size_t left = th_mcp_session_inflight(x->m);
    if (left) {
        th_log_info("mcp stdio: waiting up to %lld ms for %zu calls",
                    (long long)grace, left);
        if (!th_mcp_session_drain(x->m, grace))
            th_log_info("mcp stdio: shutdown grace over: cancelling %zu "
                        "calls",
                        th_mcp_session_inflight(x->m));
    }
    th_mcp_session_free(x->m);
    th_mcp_inputs_clear();
    rc = uv_loop_close(&x->loop);
    if (x->relay_started)
        pthread_join(x->relay, NULL);
    if (rc != 0)
        th_log_warn("mcp stdio: event loop closed with handles open: %s",
                    uv_strerror(rc));
    th_buf_destroy(&x->line);
    th_buf_destroy(&x->out);
    bool lost = x->lost;
    pthread_mutex_destroy(&x->wmu);
    free(x);
    if (lost)
        return th_error_set(err, TH_ENOMEM,
                            "out of memory: a message to the client was lost");
    return 0;
}
