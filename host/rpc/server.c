/* server.c - the msgpack-RPC server: a libuv loop on a Unix socket or stdio.
 * This file holds the loop, writing, limits, events, connections, listening
 * and shutdown; the methods (rpc_dispatch() and what it calls) are in
 * rpc_methods.c, the structs and helpers both share in rpc_int.h.
 *
 * Threads.  Everything in this file runs on the loop thread except three
 * entry points the core calls from any thread: on_call_event(),
 * front_ask_permission() and front_tools_changed().  They copy what they
 * are given into an rpc_ev, append it to srv->evq under srv->mu and wake
 * the loop with one uv_async_send() (libuv folds many sends into one
 * wake-up; the loop drains the whole queue each time).  th_rpc_server_stop()
 * also only takes srv->mu and sends.  Lock order: srv->mu is a leaf.
 * A final result that comes from a worker is packed into its response
 * frame right there (pack_final), so the loop only appends it.  The short
 * path: a tool declared TOOLHOST_TOOL_SHORT runs on the loop itself inside
 * th_call_submit() (m_call passes short_inline); its result event then
 * comes on the loop thread while the record says `starting`, and is
 * packed into the connection's buffer at once (answer_now) — no copy, no
 * queue; m_call frees the record after th_call_submit() returns
 * (call_started).  Which calls run on the loop, their timing against
 * host.short_call_max and demotion are the core's (call_fast.c).
 * With --stdio and stdin a regular file or /dev/null (epoll refuses them),
 * one more thread (relay_main) copies stdin into a pipe the loop reads; it
 * shares nothing with the loop but two fds and is joined in free_server().
 *
 * Lifetimes.  A connection (rpc_conn) is one session.  It is freed when
 * its stream handles are closed AND its session is closed.
 * th_session_close() may wait (session_grace) for session-scoped tasks, so
 * it runs on the libuv threadpool; its after-work callback, on the loop,
 * first drains the event queue (every event of that session is queued by
 * then: no callback runs after th_session_close() returns) and then frees
 * the calls still recorded (toolset-scoped tasks that go on without us).
 * A call record (rpc_call) lives from tools.call until its final event (the
 * result of a sync call, task.done of a task) or the end of its
 * connection.  Finished tasks, their owners and who may see them are the
 * core's task store (th_task_get/th_task_foreach/th_task_cancel); what is
 * sent is packed by the one codec (th/codec.h).
 *
 * Limits (docs/config.md, "Connection limits").  All on the loop thread:
 * the connection caps are checked at accept (refused with a host.disconnect
 * notification written straight to the socket); the sweep timer closes
 * idle connections and frames that take too long; srv->in_total and
 * srv->out_total count the bytes buffered over every connection (a
 * connection's pending input in c->in_counted, its output in c->outbuf)
 * and check_budget() closes the biggest holder while they exceed
 * max_buffered (a closing connection's input stops counting at once, its
 * writes when libuv hands them back).  A frame's objects are freed right
 * after its dispatch, and the reader's buffer shrinks back between frames
 * (th_rpc_reader_shrink), so an idle connection holds little.  Every limit
 * that closes a connection says why in host.disconnect first (conn_kill).
 * Lines a client can provoke go through conn_log() (at
 * most max_conn_log_lines per connection) or srv_log() (a few a second).
 * Who may use host.reload and see the whole host.stats: is_admin().
 */
#include "rpc_int.h"
#include "th/utf8.h"

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "th/codec.h"
#include "th/json.h"
#include "th/log.h"
#include "front/reload_watch.h"
#include "front/uv_guard.h"
#include "th/schema.h"

#define DEF_MAX_FRAME ((uint64_t)16 << 20)
#define DEF_MAX_INFLIGHT 256
#define DEF_MAX_OUTBUF ((uint64_t)64 << 20)
#define DEF_GRACE_MS 5000
#define HARD_CLOSE_MS 3000 /* after the grace and the cancel */
#define FD_RESERVE 64      /* fds kept for plugins, logs, the listener */
#define RATELOG_PER_SEC 5  /* srv_log() lines of one kind per second */


static void server_begin_stop(th_rpc_server *srv, const char *why);
static void server_check_drained(th_rpc_server *srv);
static void drain_events(th_rpc_server *srv);
static void finish_closed(th_rpc_server *srv);
static void check_budget(th_rpc_server *srv);

static double ms_since(uint64_t t0)
{
    return (double)(uv_hrtime() - t0) / 1e6;
}

/* ---- Writing --------------------------------------------------------------- */

typedef struct rpc_write {
    uv_write_t req;
    rpc_conn *conn;
    uint8_t *data;
    size_t len;
} rpc_write;

static void on_write(uv_write_t *req, int status)
{
    rpc_write *w = (rpc_write *)req;
    rpc_conn *c = w->conn;
    c->outbuf -= w->len;
    c->srv->out_total -= w->len;
    free(w->data);
    free(w);
    if (status < 0 && status != UV_ECANCELED && !c->closing)
        conn_close(c, false, "write failed: %s", uv_strerror(status));
    else if (c->flush_close && c->outbuf == 0 && !c->closing)
        conn_close(c, false, "%s", c->flush_reason ? c->flush_reason : "done");
}

/* Queues the frame in `b` (`b` is left empty).  Frames queued during one
 * turn of the loop leave in one write just before the loop polls again
 * (flush_pending, a prepare handle, so nothing waits in a blocking poll):
 * a burst of responses costs one system call, not one each. */
static void conn_queued(rpc_conn *c, size_t added, bool was_empty);

static void conn_send(rpc_conn *c, th_buf *b)
{
    if (c->closing || b->len == 0) {
        th_buf_destroy(b);
        return;
    }
    bool was_empty = c->pend.len == 0;
    if (th_buf_append(&c->pend, b->data, b->len) != 0) {
        th_buf_destroy(b);
        conn_close(c, false, "out of memory sending a frame");
        return;
    }
    size_t added = b->len;
    th_buf_destroy(b);
    conn_queued(c, added, was_empty);
}

/* Counts `added` bytes just appended to c->pend. */
static void conn_queued(rpc_conn *c, size_t added, bool was_empty)
{
    c->outbuf += added;
    c->srv->out_total += added;
    if (was_empty)
        c->srv->n_pending++;
    if (c->outbuf > c->srv->max_outbuf)
        conn_close(c, false,
                   "outbound buffer over %llu bytes: the client does not read",
                   (unsigned long long)c->srv->max_outbuf);
    else
        check_budget(c->srv);
}

/* Drops what a connection had queued and not written (it is closing). */
static void conn_drop_pending(rpc_conn *c)
{
    if (c->pend.len) {
        c->outbuf -= c->pend.len;
        c->srv->out_total -= c->pend.len;
        c->srv->n_pending--;
    }
    th_buf_destroy(&c->pend);
}

/* Writes the queued frames of one connection with one uv_write. */
static void conn_flush(rpc_conn *c)
{
    if (c->pend.len == 0)
        return;
    if (c->closing) {
        conn_drop_pending(c);
        return;
    }
    uv_stream_t *s = (uv_stream_t *)(c->two_handles ? &c->out : &c->in);
    /* Most turns the socket takes everything at once: then no request,
     * no copy, and the buffer is kept for the next turn.  (libuv refuses
     * a try while earlier writes are queued, so the order holds.) */
    uv_buf_t tb = uv_buf_init((char *)c->pend.data, (unsigned)c->pend.len);
    int n = uv_try_write(s, &tb, 1);
    if (n < 0 && n != UV_EAGAIN) {
        conn_drop_pending(c);
        conn_close(c, false, "write failed: %s", uv_strerror(n));
        return;
    }
    if (n > 0) {
        c->outbuf -= (size_t)n;
        c->srv->out_total -= (size_t)n;
        if ((size_t)n == c->pend.len) {
            c->srv->n_pending--;
            if (c->pend.cap > 256 * 1024)
                th_buf_destroy(&c->pend); /* a burst: give it back */
            else
                th_buf_reset(&c->pend);
            if (c->flush_close && c->outbuf == 0)
                conn_close(c, false, "%s",
                           c->flush_reason ? c->flush_reason : "done");
            return;
        }
        memmove(c->pend.data, c->pend.data + n, c->pend.len - (size_t)n);
        c->pend.len -= (size_t)n;
        c->pend.data[c->pend.len] = 0;
    }
    c->srv->n_pending--;
    rpc_write *w = calloc(1, sizeof *w);
    if (!w) {
        c->outbuf -= c->pend.len;
        c->srv->out_total -= c->pend.len;
        th_buf_destroy(&c->pend);
        conn_close(c, false, "out of memory sending a frame");
        return;
    }
    w->conn = c;
    w->data = th_buf_take(&c->pend, &w->len);
    uv_buf_t ub = uv_buf_init((char *)w->data, (unsigned)w->len);
    int rc = uv_write(&w->req, s, &ub, 1, on_write);
    if (rc < 0) {
        c->outbuf -= w->len;
        c->srv->out_total -= w->len;
        free(w->data);
        free(w);
        conn_close(c, false, "write failed: %s", uv_strerror(rc));
    }
}

static void flush_pending(uv_prepare_t *h)
{
    th_rpc_server *srv = h->data;
    for (rpc_conn *c = srv->conns; c && srv->n_pending > 0;) {
        rpc_conn *next = c->next; /* conn_flush may close, not free, c */
        conn_flush(c);
        c = next;
    }
}

void send_error(rpc_conn *c, uint64_t msgid, int code, const char *fmt,
                       ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    th_buf b = TH_BUF_INIT;
    if (th_rpc_pack_error(&b, msgid, code, msg) == 0)
        conn_send(c, &b);
    else /* the client would wait for this response for good */
        conn_close(c, false, "out of memory packing a response");
    th_buf_destroy(&b);
    conn_log(c, TOOLHOST_LOG_DEBUG, "session=%llu msgid=%llu error %s: %s",
             (unsigned long long)c->id, (unsigned long long)msgid,
             th_err_name(code), msg);
}

/* Sends a response whose result is in `res` (a packed value). */
void send_result(rpc_conn *c, uint64_t msgid, th_buf *res)
{
    th_buf b = TH_BUF_INIT;
    if (th_rpc_pack_response(&b, msgid, NULL, 0, res->data, res->len) == 0)
        conn_send(c, &b);
    else
        conn_close(c, false, "out of memory packing a response");
    th_buf_destroy(&b);
}

/* The plain confirmation `true`. */
void send_true(rpc_conn *c, uint64_t msgid)
{
    uint8_t t = 0xc3; /* msgpack true; send_result only reads it */
    th_buf r = {&t, 1, 0};
    send_result(c, msgid, &r);
}

void send_notify(rpc_conn *c, const char *method, th_buf *params)
{
    th_buf b = TH_BUF_INIT;
    if (th_rpc_pack_notify(&b, method, params->data, params->len) == 0)
        conn_send(c, &b);
    th_buf_destroy(&b);
}

/* ---- Limits ------------------------------------------------------------------ */

/* A line of a kind any client can provoke (refusals, accept failures,
 * limits biting): at most RATELOG_PER_SEC a second, then one line saying
 * how many were left out. */
static void srv_log(th_rpc_server *srv, rpc_ratelog *rl, int level,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void srv_log(th_rpc_server *srv, rpc_ratelog *rl, int level,
                    const char *fmt, ...)
{
    (void)srv;
    uint64_t now = uv_hrtime() / 1000000u;
    if (now - rl->t0 >= 1000) {
        rl->t0 = now;
        rl->n = 0;
    }
    if (rl->n >= RATELOG_PER_SEC) {
        rl->suppressed++;
        return;
    }
    rl->n++;
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (rl->suppressed)
        th_log(level, "%s (%llu similar lines suppressed before this one)",
               line, (unsigned long long)rl->suppressed);
    else
        th_log(level, "%s", line);
    rl->suppressed = 0;
    rl->level = level;
    size_t keep = strnlen(line, sizeof rl->last - 1);
    memcpy(rl->last, line, keep);
    rl->last[keep] = '\0';
}

/* From the sweep timer: once a second is over, says how many lines of a
 * kind were left out, so a burst that ends is still counted in the log. */
static void srv_log_flush(th_rpc_server *srv, rpc_ratelog *rl)
{
    (void)srv;
    if (!rl->suppressed || uv_hrtime() / 1000000u - rl->t0 < 1000)
        return;
    th_log(rl->level, "%llu more lines like this one were suppressed: %s",
           (unsigned long long)rl->suppressed, rl->last);
    rl->suppressed = 0;
}

/* A line about one connection that its client can provoke (bad messages,
 * error answers): at most max_conn_log_lines per connection, then one line
 * saying the rest is suppressed; the disconnect line gives the count. */
void conn_log(rpc_conn *c, int level, const char *fmt, ...)
{
    if (level > th_log_get_level())
        return;
    if (c->log_lines >= c->srv->conn_log_lines) {
        c->log_suppressed++;
        return;
    }
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    th_log(level, "%s", line);
    if (++c->log_lines == c->srv->conn_log_lines)
        th_log_warn("session=%llu more log lines of this session are "
                    "suppressed (max_conn_log_lines: %u)",
                    (unsigned long long)c->id,
                    (unsigned)c->srv->conn_log_lines);
}

/* Closes a connection for a limit, telling the client why first: the
 * notification host.disconnect [[code, message]] (best effort: written at
 * once if the socket takes it, dropped otherwise). */
void conn_kill(rpc_conn *c, int code, const char *fmt, ...)
{
    if (c->closing)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    th_buf p = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &p, th_buf_msgpack_write);
    if (!msgpack_pack_array(&pk, 1) && !msgpack_pack_array(&pk, 2) &&
        !msgpack_pack_int(&pk, code) && !th_pack_cstr(&pk, msg))
        send_notify(c, "host.disconnect", &p);
    th_buf_destroy(&p);
    conn_close(c, false, "%s", msg);
}

/* Keeps c's pending input counted in srv->in_total. */
static void conn_count_input(rpc_conn *c)
{
    uint64_t now = c->closing ? 0 : th_rpc_reader_pending(&c->rd);
    c->srv->in_total = c->srv->in_total - c->in_counted + now;
    c->in_counted = now;
}

/* While the bytes buffered over every connection exceed max_buffered,
 * closes the connection holding the most.  Writes still under way on
 * closing connections do not count (they are cancelled or drain), so one
 * offender closes one connection. */
static void check_budget(th_rpc_server *srv)
{
    if (srv->in_total + srv->out_total <= srv->max_buffered ||
        srv->budget_busy)
        return;
    srv->budget_busy = true; /* conn_kill sends: no recursion */
    for (;;) {
        rpc_conn *big = NULL;
        uint64_t most = 0, total = srv->in_total;
        for (rpc_conn *k = srv->conns; k; k = k->next) {
            if (k->closing)
                continue;
            uint64_t held = k->in_counted + k->outbuf;
            total += k->outbuf;
            if (held > most) {
                most = held;
                big = k;
            }
        }
        if (!big || total <= srv->max_buffered)
            break;
        srv->closed_budget++;
        th_stat_front_event(srv->host, TOOLHOST_FRONT_RPC, TH_RPC_EV_BUDGET);
        srv_log(srv, &srv->rl_budget, TOOLHOST_LOG_WARN,
                "max_buffered: %llu bytes buffered over %u connections, "
                "over the budget of %llu: closing session=%llu uid=%u, "
                "which holds %llu",
                (unsigned long long)total, (unsigned)srv->n_conns,
                (unsigned long long)srv->max_buffered,
                (unsigned long long)big->id, (unsigned)big->who.uid,
                (unsigned long long)most);
        conn_kill(big, TH_ELIMIT,
                  "the host's buffers are full (max_buffered %llu bytes) and "
                  "this connection holds the most (%llu bytes)",
                  (unsigned long long)srv->max_buffered,
                  (unsigned long long)most);
    }
    srv->budget_busy = false;
}

/* Whether the peer may administer the host (host.reload, the whole
 * host.stats): the core decides (th_host_is_admin, admin: in the config). */
bool is_admin(const rpc_conn *c)
{
    return th_host_is_admin(c->srv->host, &c->who);
}

/* ---- Packing helpers ----------------------------------------------------- */

int pack_result(th_buf *out, const th_result_copy *r)
{
    return th_codec_result_to_buf(out, r);
}

/* ---- Calls ------------------------------------------------------------------ */

void call_free(rpc_call *call)
{
    rpc_conn *c = call->conn;
    if (call->prev)
        call->prev->next = call->next;
    else
        c->calls = call->next;
    if (call->next)
        call->next->prev = call->prev;
    if (!call->responded && c->inflight)
        c->inflight--;
    th_rpc_server *srv = c->srv;
    if (srv->n_spare < RPC_SPARE_CALLS) {
        call->next = srv->spare;
        srv->spare = call;
        srv->n_spare++;
    } else {
        free(call);
    }
}

rpc_call *call_new(th_rpc_server *srv)
{
    rpc_call *call = srv->spare;
    if (!call)
        return calloc(1, sizeof *call);
    srv->spare = call->next;
    srv->n_spare--;
    memset(call, 0, sizeof *call);
    return call;
}

/* The call's line (debug: one a call; docs/ops.md "Log lines",
 * event call.end, or call.ack for an async task's acknowledgement). */
static void log_outcome(rpc_call *call, const th_result_copy *r,
                        const char *what)
{
    if (th_log_get_level() < TOOLHOST_LOG_DEBUG)
        return; /* not even the formatting */
    const char *outcome = "error";
    char extra[64] = "";
    size_t bytes = 0;
    if (r->kind == TH_RESULT_DONE) {
        outcome = r->ok ? "ok" : "failed";
        bytes = r->out.len + r->err.len;
    } else if (r->kind == TH_RESULT_RUNNING) {
        outcome = "running";
        snprintf(extra, sizeof extra, " task=%llu",
                 (unsigned long long)r->task_id);
    } else {
        snprintf(extra, sizeof extra, " error=%s", th_err_name(r->error));
    }
    const th_principal *who = &call->conn->who;
    char principal[160];
    if (who->user)
        snprintf(principal, sizeof principal, "%s", who->user);
    else
        snprintf(principal, sizeof principal, "uid:%u", (unsigned)who->uid);
    th_log_event(TOOLHOST_LOG_DEBUG,
                 r->kind == TH_RESULT_RUNNING ? "call.ack" : "call.end",
                 "front=rpc session=%llu tool=%s call_id=%llu principal=%s "
                 "dur_ms=%.3f bytes_out=%zu %s outcome=%s%s",
                 (unsigned long long)call->conn->id, call->tool,
                 (unsigned long long)call->call_id, principal,
                 call->t0 ? ms_since(call->t0) : 0.0, bytes, what, outcome,
                 extra);
}

static void handle_call_event(th_rpc_server *srv, rpc_ev *ev)
{
    rpc_call *call = ev->call;
    rpc_conn *c = call->conn;
    if (ev->task_id && !call->task_id)
        call->task_id = ev->task_id;
    if (ev->kind == TH_EV_RESULT && ev->has_result) {
        if (ev->res.kind == TH_RESULT_RUNNING && ev->res.task_id) {
            call->task_id = ev->res.task_id;
        }
        log_outcome(call, &ev->res, "result");
        if (!call->responded) {
            th_buf res = TH_BUF_INIT;
            if (ev->frame.len)
                conn_send(c, &ev->frame); /* packed by the worker */
            else if (pack_result(&res, &ev->res) == 0)
                send_result(c, call->msgid, &res);
            else
                send_error(c, call->msgid, TH_ENOMEM, "out of memory");
            th_buf_destroy(&res);
            call->responded = true;
            if (c->inflight)
                c->inflight--;
        }
        if (ev->res.kind != TH_RESULT_RUNNING) {
            call_free(call);
            server_check_drained(srv);
        }
        return;
    }
    if (ev->kind == TH_EV_PROGRESS) {
        th_buf p = TH_BUF_INIT;
        msgpack_packer pk;
        msgpack_packer_init(&pk, &p, th_buf_msgpack_write);
        th_progress pr = {.task_id = call->task_id,
                          .message = ev->message,
                          .fraction = ev->fraction,
                          .data = ev->data,
                          .data_len = ev->data_len,
                          .coalesced = ev->coalesced};
        if (th_codec_pack_progress(&pk, &pr) == 0)
            send_notify(c, "task.progress", &p);
        th_buf_destroy(&p);
        return;
    }
    if (ev->kind == TH_EV_DONE && ev->has_result) {
        /* The core's task store keeps the result (tasks.result). */
        log_outcome(call, &ev->res, "task done");
        th_buf res = TH_BUF_INIT, p = TH_BUF_INIT, f = TH_BUF_INIT;
        msgpack_packer pk;
        msgpack_packer_init(&pk, &p, th_buf_msgpack_write);
        if (pack_result(&res, &ev->res) == 0 &&
            !msgpack_pack_array(&pk, 2) &&
            !msgpack_pack_uint64(&pk, call->task_id) &&
            !th_buf_append(&p, res.data, res.len) &&
            th_rpc_pack_notify(&f, "task.done", p.data, p.len) == 0)
            conn_send(c, &f);
        else /* the client would wait for task.done for good */
            conn_close(c, false, "out of memory packing task.done");
        th_buf_destroy(&f);
        th_buf_destroy(&p);
        th_buf_destroy(&res);
        if (!call->responded) { /* a DONE without an ack: answer now */
            call->responded = true;
            if (c->inflight)
                c->inflight--;
        }
        call_free(call);
        server_check_drained(srv);
    }
}

/* ---- The short path --------------------------------------------------------- */

/* A msgpack writer into a th_buf with room reserved: a copy, no call. */
static int pend_write(void *data, const char *buf, size_t len)
{
    th_buf *b = data;
    if (b->cap > b->len + len) {
        memcpy(b->data + b->len, buf, len);
        b->len += len;
        b->data[b->len] = 0;
        return 0;
    }
    return th_buf_append(b, buf, len) == 0 ? 0 : -1;
}

/* Appends the response [1, msgid, nil, result] to c->pend, packed straight
 * from the result (no intermediate buffers, room reserved once). */
static void send_result_of(rpc_conn *c, uint64_t msgid,
                           const th_result_copy *r)
{
    if (c->closing)
        return;
    size_t mark = c->pend.len;
    size_t want = 96 + r->out.len + r->err.len + r->meta.len +
                  (r->message ? strlen(r->message) : 0);
    if (th_buf_reserve(&c->pend, want) != 0) {
        conn_close(c, false, "out of memory packing a response");
        return;
    }
    msgpack_packer pk;
    msgpack_packer_init(&pk, &c->pend, pend_write);
    if (msgpack_pack_array(&pk, 4) || msgpack_pack_uint64(&pk, 1) ||
        msgpack_pack_uint64(&pk, msgid) || msgpack_pack_nil(&pk) ||
        th_codec_pack_result(&pk, r)) {
        c->pend.len = mark;
        if (c->pend.data)
            c->pend.data[mark] = 0;
        if (mark == 0)
            th_buf_destroy(&c->pend);
        conn_close(c, false, "out of memory packing a response");
        return;
    }
    conn_queued(c, c->pend.len - mark, mark == 0);
}

/* The loop, inside th_call_submit(): the final result of a call that ran
 * (or failed) right there.  Its pointers are the core's, valid during the
 * callback: packed at once, nothing copied. */
static void answer_now(rpc_call *call, const th_result *r)
{
    rpc_conn *c = call->conn;
    th_result_copy v = th_result_view(r);
    log_outcome(call, &v, "result");
    if (!call->responded) {
        send_result_of(c, call->msgid, &v);
        call->responded = true;
        if (c->inflight)
            c->inflight--;
    }
    call->done = true;
    c->srv->short_calls++;
}

void call_started(rpc_call *call)
{
    th_rpc_server *srv = call->conn->srv;
    if (call->done) {
        call_free(call);
        server_check_drained(srv);
    }
}

/* Any thread: packs the response to a call's final result into
 * ev->frame, keeping in ev->res only what the loop logs.  False when out
 * of memory (the caller copies the result instead). */
static bool pack_final(rpc_ev *ev, const rpc_call *call, const th_result *r)
{
    th_result_copy v = th_result_view(r);
    size_t want = 96 + v.out.len + v.err.len + v.meta.len +
                  (v.message ? strlen(v.message) : 0);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &ev->frame, pend_write);
    if (th_buf_reserve(&ev->frame, want) != 0 ||
        msgpack_pack_array(&pk, 4) || msgpack_pack_uint64(&pk, 1) ||
        msgpack_pack_uint64(&pk, call->msgid) || msgpack_pack_nil(&pk) ||
        th_codec_pack_result(&pk, &v)) {
        th_buf_destroy(&ev->frame);
        return false;
    }
    ev->res.kind = r->kind;
    ev->res.ok = r->ok;
    ev->res.error = r->error;
    ev->res.task_id = r->task_id;
    ev->has_result = true; /* its buffers stay empty */
    return true;
}

/* Any thread: the core's event callback for one call. */
void on_call_event(const th_event *e, void *ud)
{
    rpc_call *call = ud;
    th_rpc_server *srv = call->conn->srv;
    /* on the loop inside m_call's th_call_submit (the loop thread alone
     * reads `starting`: a worker's event never mistakes itself for one) */
    if (pthread_equal(pthread_self(), srv->loop_tid) && call->starting &&
        e->kind == TH_EV_RESULT && e->result &&
        e->result->kind != TH_RESULT_RUNNING) {
        answer_now(call, e->result); /* the loop, inside m_call */
        return;
    }
    rpc_ev *ev = calloc(1, sizeof *ev);
    if (!ev)
        goto oom;
    ev->type = EV_CALL;
    ev->call = call;
    ev->kind = e->kind;
    ev->call_id = e->call_id;
    ev->task_id = e->task_id;
    ev->fraction = e->fraction;
    ev->coalesced = e->coalesced;
    if (e->kind == TH_EV_RESULT && e->result &&
        e->result->kind != TH_RESULT_RUNNING && pack_final(ev, call, e->result)) {
        /* the response is packed here, on the delivering thread: the loop
         * only appends it (no copy of the result, no packing there) */
    } else if (e->result) {
        if (th_result_copy_from(&ev->res, e->result) != 0)
            goto oom_ev;
        ev->has_result = true;
    }
    if (e->message && !(ev->message = strdup(e->message)))
        goto oom_ev;
    if (e->data && e->data_len) {
        if (!(ev->data = malloc(e->data_len)))
            goto oom_ev;
        memcpy(ev->data, e->data, e->data_len);
        ev->data_len = e->data_len;
    }
    pthread_mutex_lock(&srv->mu);
    if (srv->evq_tail)
        srv->evq_tail->next = ev;
    else
        srv->evq_head = ev;
    srv->evq_tail = ev;
    pthread_mutex_unlock(&srv->mu);
    uv_async_send(&srv->wake);
    return;
oom_ev:
    if (ev->has_result)
        th_result_copy_destroy(&ev->res);
    th_buf_destroy(&ev->frame);
    free(ev->message);
    free(ev->data);
    free(ev);
oom:
    /* A lost progress update is harmless.  A lost result or task.done
     * would leave the client waiting for good: the connection is closed
     * instead (on the loop, lost_events), so the client sees it end. */
    th_log_error("session=%llu call=%llu out of memory queuing an event",
                 (unsigned long long)call->conn->id,
                 (unsigned long long)e->call_id);
    if (e->kind != TH_EV_PROGRESS) {
        pthread_mutex_lock(&srv->mu);
        call->conn->lost_event = true;
        srv->lost_events = true;
        uv_async_send(&srv->wake);
        pthread_mutex_unlock(&srv->mu);
    }
}

/* On the loop: closes the connections that lost a result (on_call_event
 * could not queue it). */
static void close_lost(th_rpc_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    bool any = srv->lost_events;
    srv->lost_events = false;
    pthread_mutex_unlock(&srv->mu);
    if (!any)
        return;
    for (rpc_conn *c = srv->conns, *n; c; c = n) {
        n = c->next; /* conn_kill closes, never frees, c */
        pthread_mutex_lock(&srv->mu);
        bool lost = c->lost_event;
        c->lost_event = false;
        pthread_mutex_unlock(&srv->mu);
        if (lost && !c->closing)
            conn_kill(c, TH_ENOMEM,
                      "out of memory delivering the result of a call");
    }
}

static void push_ev(th_rpc_server *srv, rpc_ev *ev)
{
    pthread_mutex_lock(&srv->mu);
    if (srv->evq_tail)
        srv->evq_tail->next = ev;
    else
        srv->evq_head = ev;
    srv->evq_tail = ev;
    pthread_mutex_unlock(&srv->mu);
    uv_async_send(&srv->wake);
}

/* Any thread: the core asks whether a call may run. */
static int front_ask_permission(void *front_ud, uint64_t call_id,
                                const char *tool, const uint8_t *args,
                                size_t args_len, const char *reason)
{
    rpc_conn *c = front_ud;
    rpc_ev *ev = calloc(1, sizeof *ev);
    if (!ev)
        return -1;
    ev->type = EV_PERM;
    ev->conn = c;
    ev->call_id = call_id;
    /* Now, while the call exists: which tools.call it belongs to. */
    ev->origin = c->session ? th_call_origin(c->session, call_id) : 0;
    ev->tool = strdup(tool ? tool : "");
    ev->reason = strdup(reason ? reason : "");
    if (args && args_len && (ev->data = malloc(args_len))) {
        memcpy(ev->data, args, args_len);
        ev->data_len = args_len;
    }
    if (!ev->tool || !ev->reason || (args_len && !ev->data)) {
        free(ev->tool);
        free(ev->reason);
        free(ev->data);
        free(ev);
        return -1;
    }
    push_ev(c->srv, ev);
    return 0;
}

/* Tool thread: a tool's ask_client() (th_front_ops.ask_client); the loop
 * sends it, or answers ENOTSUP when the tools.call did not say the client
 * answers that kind (handle_ask_event). */
static int front_ask_client(void *front_ud, uint64_t call_id, uint64_t ask_id,
                            int kind, const char *request, size_t len)
{
    rpc_conn *c = front_ud;
    rpc_ev *ev = calloc(1, sizeof *ev);
    if (!ev || !(ev->data = malloc(len + 1))) {
        free(ev);
        return -1;
    }
    memcpy(ev->data, request, len);
    ev->data[len] = 0;
    ev->data_len = len;
    ev->type = EV_ASK;
    ev->conn = c;
    ev->call_id = call_id;
    ev->origin = c->session ? th_call_origin(c->session, call_id) : 0;
    ev->ask_id = ask_id;
    ev->ask_kind = kind;
    push_ev(c->srv, ev);
    return 0;
}

static void push_conn_ev(rpc_conn *c, rpc_ev_type type)
{
    rpc_ev *ev = calloc(1, sizeof *ev);
    if (!ev) {
        th_log_error("session=%llu out of memory: a tools.changed "
                     "notification is lost",
                     (unsigned long long)c->id);
        return;
    }
    ev->type = type;
    ev->conn = c;
    push_ev(c->srv, ev);
}

/* Any thread: the session's tool list changed (a reload). */
static void front_tools_changed(void *front_ud)
{
    push_conn_ev(front_ud, EV_TOOLS_CHANGED);
}

/* Any thread: only the task tools came or went (the first live task of
 * the session, or its last one ended). */
static void front_task_tools_changed(void *front_ud)
{
    push_conn_ev(front_ud, EV_TASK_TOOLS);
}

/* Whether the session lists the task tools now (the core's rule). */
static bool task_tools_listed(rpc_conn *c)
{
    const th_tool *t = th_session_acquire(c->session, "get_running_tasks");
    if (t)
        th_tool_release(t);
    return t != NULL;
}

/* The lists a client is told changed, and the notification of each. */
static const struct {
    th_view_fn digest;
    const char *method;
} rpc_lists[3] = {
    {rpc_tools_digest, "tools.changed"},
    {rpc_resources_digest, "resources.changed"},
    {rpc_prompts_digest, "prompts.changed"},
};

/* The digests of the session's lists now (th_session_view_digest: shared
 * by the sessions that see the same lists). */
static void list_digests(rpc_conn *c, uint64_t d[3])
{
    for (int k = 0; k < 3; k++)
        d[k] = th_session_view_digest(c->session, rpc_lists[k].digest, NULL);
}

/* After a reload (or a tool search_tools found): tools.changed [],
 * resources.changed [] and prompts.changed [] for each list the client
 * sees that differs from the one it was last shown (an unknown digest,
 * out of memory, counts as changed). */
static void handle_lists_event(rpc_conn *c)
{
    uint64_t d[3];
    list_digests(c, d);
    for (int k = 0; k < 3; k++) {
        if (d[k] && d[k] == c->list_digest[k])
            continue;
        c->list_digest[k] = d[k];
        if (k == 0)
            c->task_tools_listed = task_tools_listed(c);
        th_buf p = TH_BUF_INIT;
        send_notify(c, rpc_lists[k].method, &p);
        th_buf_destroy(&p);
    }
}

/* tools.changed: [] when the tool list changed (handle_lists_event); for
 * the task tools alone [{task_tools_only: true, task_tools: LISTED}], sent
 * only when LISTED differs from what the client was last told, so a task
 * that ends before its events are handled costs nothing (docs/protocol.md,
 * notifications). */
static void handle_tools_event(rpc_ev *ev)
{
    rpc_conn *c = ev->conn;
    if (c->closing || !c->session)
        return;
    if (ev->type == EV_TOOLS_CHANGED) {
        handle_lists_event(c);
        return;
    }
    bool listed = task_tools_listed(c);
    if (listed == c->task_tools_listed)
        return;
    c->task_tools_listed = listed;
    th_buf p = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &p, th_buf_msgpack_write);
    if (msgpack_pack_array(&pk, 1) || msgpack_pack_map(&pk, 2) ||
        th_pack_cstr(&pk, "task_tools_only") || msgpack_pack_true(&pk) ||
        th_pack_cstr(&pk, "task_tools") ||
        (listed ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk))) {
        th_buf_destroy(&p);
        conn_log(c, TOOLHOST_LOG_ERROR,
                 "session=%llu out of memory: tools.changed lost",
                 (unsigned long long)c->id);
        return;
    }
    send_notify(c, "tools.changed", &p);
    th_buf_destroy(&p);
}

/* The origin of a host request (permission.request, client.ask): the
 * tools.call of this connection it belongs to, {msgid, tool, task_id?},
 * or {} when unknown.  Nonzero when out of memory. */
static int pack_origin(msgpack_packer *pk, const rpc_call *origin)
{
    if (!origin)
        return msgpack_pack_map(pk, 0);
    int e = msgpack_pack_map(pk, origin->task_id ? 3 : 2);
    e |= th_pack_cstr(pk, "msgid");
    e |= msgpack_pack_uint64(pk, origin->msgid);
    e |= th_pack_cstr(pk, "tool");
    e |= th_pack_cstr(pk, origin->tool);
    if (origin->task_id) {
        e |= th_pack_cstr(pk, "task_id");
        e |= msgpack_pack_uint64(pk, origin->task_id);
    }
    return e;
}

static void handle_perm_event(rpc_ev *ev)
{
    rpc_conn *c = ev->conn;
    /* A closing session denies its pending asks itself. */
    if (c->session_closed || c->closing)
        return;
    rpc_perm *p = calloc(1, sizeof *p);
    th_buf params = TH_BUF_INIT, frame = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &params, th_buf_msgpack_write);
    /* The tools.call of this connection the ask belongs to (the call
     * itself, or the one whose tool made this call: run_code). */
    rpc_call *origin = NULL;
    for (rpc_call *k = c->calls; k && ev->origin; k = k->next)
        if (k->call_id == ev->origin) {
            origin = k;
            break;
        }
    int e = !p;
    if (!e) {
        /* [call_id, tool, args, reason, {msgid, tool, task_id?}] */
        e |= msgpack_pack_array(&pk, 5);
        e |= msgpack_pack_uint64(&pk, ev->call_id);
        e |= th_pack_cstr(&pk, ev->tool);
        if (ev->data)
            e |= th_buf_append(&params, ev->data, ev->data_len);
        else
            e |= msgpack_pack_map(&pk, 0);
        e |= th_pack_cstr(&pk, ev->reason);
        e |= pack_origin(&pk, origin);
    }
    if (!e) {
        p->msgid = c->next_msgid++ & 0xffffffffu;
        p->call_id = ev->call_id;
        e |= th_rpc_pack_request(&frame, p->msgid, "permission.request",
                                 params.data, params.len);
    }
    th_buf_destroy(&params);
    if (e) {
        free(p);
        th_buf_destroy(&frame);
        th_permission_answer(c->session, ev->call_id, false);
        return;
    }
    p->next = c->perms;
    c->perms = p;
    /* The core logged the ask (call_start.c); here only the msgid. */
    conn_log(c, TOOLHOST_LOG_DEBUG, "session=%llu call=%llu permission.request "
             "msgid=%llu for msgid=%lld", (unsigned long long)c->id,
             (unsigned long long)ev->call_id, (unsigned long long)p->msgid,
             origin ? (long long)origin->msgid : -1LL);
    conn_send(c, &frame);
}

/* client.ask [call_id, kind, request, origin] to the client whose
 * tools.call allowed that kind (option client_asks); else the tool hears
 * TOOLHOST_ENOTSUP at once.  The answer: on_response (rpc_methods.c). */
static void handle_ask_event(rpc_ev *ev)
{
    rpc_conn *c = ev->conn;
    if (c->session_closed || c->closing) {
        th_call_client_answer(ev->ask_id, TOOLHOST_ECANCELLED, NULL, 0);
        return;
    }
    rpc_call *origin = NULL;
    for (rpc_call *k = c->calls; k && ev->origin; k = k->next)
        if (k->call_id == ev->origin) {
            origin = k;
            break;
        }
    if (!origin || !(origin->asks & (1u << ev->ask_kind))) {
        th_call_client_answer(ev->ask_id, TOOLHOST_ENOTSUP, NULL, 0);
        return;
    }
    rpc_perm *p = calloc(1, sizeof *p);
    th_buf params = TH_BUF_INIT, frame = TH_BUF_INIT;
    json_t *req = json_loadb((const char *)ev->data, ev->data_len, 0, NULL);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &params, th_buf_msgpack_write);
    int e = !p || !req;
    if (!e) {
        e |= msgpack_pack_array(&pk, 4);
        e |= msgpack_pack_uint64(&pk, ev->call_id);
        e |= th_pack_cstr(&pk, ev->ask_kind == TOOLHOST_ASK_SAMPLING
                                   ? "sampling"
                                   : "form");
        e |= th_json_pack(req, &pk) != 0;
        e |= pack_origin(&pk, origin);
    }
    json_decref(req);
    if (!e) {
        p->msgid = c->next_msgid++ & 0xffffffffu;
        p->call_id = ev->call_id;
        p->ask_id = ev->ask_id;
        e |= th_rpc_pack_request(&frame, p->msgid, "client.ask",
                                 params.data, params.len);
    }
    th_buf_destroy(&params);
    if (e) {
        free(p);
        th_buf_destroy(&frame);
        th_call_client_answer(ev->ask_id, TOOLHOST_ENOMEM, NULL, 0);
        return;
    }
    p->next = c->perms;
    c->perms = p;
    conn_log(c, TOOLHOST_LOG_DEBUG, "session=%llu call=%llu client.ask "
             "msgid=%llu for msgid=%llu", (unsigned long long)c->id,
             (unsigned long long)ev->call_id, (unsigned long long)p->msgid,
             (unsigned long long)origin->msgid);
    conn_send(c, &frame);
}

static void ev_free(rpc_ev *ev)
{
    th_buf_destroy(&ev->frame);
    if (ev->has_result)
        th_result_copy_destroy(&ev->res);
    free(ev->message);
    free(ev->data);
    free(ev->tool);
    free(ev->reason);
    free(ev);
}

static void drain_events(th_rpc_server *srv)
{
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        rpc_ev *ev = srv->evq_head;
        srv->evq_head = srv->evq_tail = NULL;
        pthread_mutex_unlock(&srv->mu);
        if (!ev)
            return;
        while (ev) {
            rpc_ev *next = ev->next;
            if (ev->type == EV_CALL)
                handle_call_event(srv, ev);
            else if (ev->type == EV_PERM)
                handle_perm_event(ev);
            else if (ev->type == EV_ASK)
                handle_ask_event(ev);
            else if (ev->type == EV_TOOLS_CHANGED ||
                     ev->type == EV_TASK_TOOLS)
                handle_tools_event(ev);
            ev_free(ev);
            ev = next;
        }
    }
}

static void on_wake(uv_async_t *a)
{
    th_rpc_server *srv = a->data;
    pthread_mutex_lock(&srv->mu);
    bool stop = srv->stop_req;
    srv->stop_req = false;
    pthread_mutex_unlock(&srv->mu);
    drain_events(srv);
    close_lost(srv);
    finish_closed(srv);
    if (stop)
        server_begin_stop(srv, "stop requested");
}

/* ---- Connections ---------------------------------------------------------- */

static void conn_maybe_free(rpc_conn *c)
{
    if (c->handles_open > 0 || !c->session_closed)
        return;
    th_rpc_server *srv = c->srv;
    while (c->calls)
        call_free(c->calls);
    while (c->perms) {
        rpc_perm *p = c->perms;
        c->perms = p->next;
        if (p->ask_id) /* (its call was cancelled with the session) */
            th_call_client_answer(p->ask_id, TOOLHOST_ECANCELLED, NULL, 0);
        free(p);
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    srv->n_conns--;
    conn_drop_pending(c);
    th_rpc_reader_destroy(&c->rd);
    free(c->flush_reason);
    free(c);
    server_check_drained(srv);
}

static void on_handle_closed(uv_handle_t *h)
{
    rpc_conn *c = h->data;
    c->handles_open--;
    conn_maybe_free(c);
}

/* After th_session_close(): every event of the session is queued by now:
 * handle them (the connection is closing, so nothing is written) before
 * freeing.  On the loop. */
static void session_close_after(rpc_conn *c)
{
    drain_events(c->srv);
    c->session = NULL;
    c->session_closed = true;
    conn_maybe_free(c);
}

/* Hands a connection whose session is closed to the loop (any thread):
 * on_wake finishes it.  The server's wake handle is open while any
 * connection is (server_check_drained). */
static void session_closed(rpc_conn *c)
{
    th_rpc_server *srv = c->srv;
    pthread_mutex_lock(&srv->mu);
    c->closed_next = srv->closed;
    srv->closed = c;
    uv_async_send(&srv->wake);
    pthread_mutex_unlock(&srv->mu);
}

static void *closer_main(void *arg)
{
    rpc_conn *c = arg;
    th_session_close(c->session);
    session_closed(c);
    return NULL;
}

/* On the loop: the sessions closed since the last wake-up. */
static void finish_closed(th_rpc_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    rpc_conn *c = srv->closed;
    srv->closed = NULL;
    pthread_mutex_unlock(&srv->mu);
    while (c) {
        rpc_conn *next = c->closed_next;
        if (c->has_closer) /* it has handed c over: it ends at once */
            pthread_join(c->closer, NULL);
        session_close_after(c);
        c = next;
    }
}

/* th_session_close() may wait (session_grace) for the session's calls
 * to stop: on a thread of its own (not libuv's pool, whose creation
 * aborts the process when it fails).  Without a thread (out of memory,
 * no threads left) it runs here, and the loop waits with it. */
static void session_close_start(rpc_conn *c)
{
    c->has_closer = pthread_create(&c->closer, NULL, closer_main, c) == 0;
    if (c->has_closer)
        return;
    th_log_warn("session=%llu: no thread to close the session on: closed "
                "on the loop",
                (unsigned long long)c->id);
    th_session_close(c->session);
    session_closed(c);
}

void conn_close(rpc_conn *c, bool graceful, const char *fmt, ...)
{
    if (c->closing)
        return;
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->in);
        c->reading = false;
    }
    /* What was answered before the fault still leaves (as it would have
     * without batching: libuv writes at once when it can). */
    conn_flush(c);
    if (c->closing)
        return;
    if (graceful && c->outbuf > 0) {
        /* Let the writes drain first (on_write comes back here). */
        if (!c->flush_close) {
            c->flush_close = true;
            c->flush_reason = strdup(reason);
        }
        return;
    }
    c->closing = true;
    conn_count_input(c); /* its input no longer counts */
    if (c->log_suppressed)
        th_log_event(TOOLHOST_LOG_INFO, "session.close",
                    "session=%llu disconnect: %s (%u calls in flight; %llu "
                    "log lines suppressed)",
                    (unsigned long long)c->id, reason, (unsigned)c->inflight,
                    (unsigned long long)c->log_suppressed);
    else if (!c->quiet) /* info only when it cut calls short */
        th_log_event(c->inflight ? TOOLHOST_LOG_INFO : TOOLHOST_LOG_DEBUG,
                     "session.close",
                     "session=%llu disconnect: %s (%u calls in flight)",
                     (unsigned long long)c->id, reason,
                     (unsigned)c->inflight);
    /* In stdio mode the one session is the whole server. */
    if (c->srv->stdio && !c->srv->stopping)
        server_begin_stop(c->srv, reason);
    uv_close((uv_handle_t *)&c->in, on_handle_closed);
    if (c->two_handles)
        uv_close((uv_handle_t *)&c->out, on_handle_closed);
    if (c->session) {
        session_close_start(c);
    } else {
        c->session_closed = true;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    rpc_conn *c = h->data;
    char *p;
    size_t cap;
    if (th_rpc_reader_space(&c->rd, 64 * 1024, &p, &cap) != 0) {
        buf->base = NULL;
        buf->len = 0;
        return;
    }
    buf->base = p;
    buf->len = cap > (1u << 30) ? (1u << 30) : cap;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    rpc_conn *c = s->data;
    th_rpc_server *srv = c->srv;
    if (nread == UV_ENOBUFS) {
        conn_close(c, false, "out of memory reading");
        return;
    }
    if (nread < 0) {
        if (nread == UV_EOF) {
            if (srv->stdio) {
                uv_read_stop(s);
                c->reading = false;
                server_begin_stop(srv, "end of input");
            } else {
                conn_close(c, false, "the client closed the connection");
            }
        } else {
            conn_close(c, false, "read failed: %s", uv_strerror((int)nread));
        }
        return;
    }
    if (nread == 0)
        return;
    uint64_t now = uv_now(&srv->loop);
    c->last_active = now;
    th_rpc_reader_commit(&c->rd, (size_t)nread);
    bool framed = false;
    for (;;) {
        th_error err;
        int rc = th_rpc_reader_next(&c->rd, &srv->msg, &err);
        if (rc == 0)
            break;
        if (rc < 0) {
            if (rc == TH_ELIMIT)
                conn_kill(c, rc, "%s", err.msg);
            else
                conn_close(c, false, "%s", err.msg);
            return;
        }
        framed = true;
        rpc_dispatch(c, &srv->msg.data);
        /* The frame's objects go now, not when the next frame comes (the
         * zone keeps its first chunk for the next frame). */
        msgpack_zone_clear(srv->msg.zone);
        if (c->closing || !c->reading)
            return;
    }
    if (th_rpc_reader_pending(&c->rd) == 0) {
        c->frame_t0 = 0;
        if (th_rpc_reader_shrink(&c->rd) != 0) {
            conn_close(c, false, "out of memory reading");
            return;
        }
    } else if (framed || c->frame_t0 == 0) {
        c->frame_t0 = now; /* a new frame began in these bytes */
    }
    conn_count_input(c);
    check_budget(srv);
}

/* A new connection, linked into srv->conns.  Its handles are not
 * initialised yet: the caller does that and counts them in handles_open.
 * Until a session is opened, session_closed stays true so that closing
 * the handles frees it. */
static rpc_conn *conn_new(th_rpc_server *srv)
{
    rpc_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    if (th_rpc_reader_init(&c->rd, (size_t)srv->max_frame) != 0) {
        free(c);
        return NULL;
    }
    c->srv = srv;
    c->next_msgid = 1;
    c->in.data = c;
    c->out.data = c;
    c->session_closed = true;
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    srv->n_conns++;
    return c;
}

/* Opens the session, starts reading.  On failure closes the connection. */
static void conn_start(rpc_conn *c)
{
    th_rpc_server *srv = c->srv;
    srv->conns_total++;
    c->session = th_session_open(srv->host, &c->who, &srv->ops, c);
    if (!c->session) {
        conn_close(c, false, "the host refused a new session");
        return;
    }
    c->session_closed = false;
    c->id = th_session_id(c->session);
    c->task_tools_listed = task_tools_listed(c); /* expose_task_tools */
    list_digests(c, c->list_digest);
    th_log_event(TOOLHOST_LOG_DEBUG, "session.open",
                 "session=%llu connect uid=%u gid=%u",
                (unsigned long long)c->id, (unsigned)c->who.uid,
                (unsigned)c->who.gid);
    int rc = uv_read_start((uv_stream_t *)&c->in, on_alloc, on_read);
    if (rc < 0) {
        conn_close(c, false, "cannot read: %s", uv_strerror(rc));
        return;
    }
    c->reading = true;
}

/* Refuses a connection over a cap: the reason goes to the client as
 * host.disconnect, written straight to the fresh socket, and to the log
 * (rate-limited); the connection closes without a session. */
static void conn_refuse(rpc_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void conn_refuse(rpc_conn *c, const char *fmt, ...)
{
    th_rpc_server *srv = c->srv;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    th_buf p = TH_BUF_INIT, f = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &p, th_buf_msgpack_write);
    uv_os_fd_t fd;
    if (!msgpack_pack_array(&pk, 1) && !msgpack_pack_array(&pk, 2) &&
        !msgpack_pack_int(&pk, TH_ELIMIT) && !th_pack_cstr(&pk, msg) &&
        th_rpc_pack_notify(&f, "host.disconnect", p.data, p.len) == 0 &&
        uv_fileno((uv_handle_t *)&c->in, &fd) == 0) {
        ssize_t k = send(fd, f.data, f.len, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)k; /* best effort: a fresh socket has room for it */
    }
    th_buf_destroy(&p);
    th_buf_destroy(&f);
    srv->refused++;
    srv_log(srv, &srv->rl_refuse, TOOLHOST_LOG_WARN,
            "connection of uid=%u refused: %s", (unsigned)c->who.uid, msg);
    c->quiet = true;
    conn_close(c, false, "%s", msg);
}

/* Whether the client of c hung up (its end of input is waiting to be
 * read: the connection closes on the next turn). */
static bool peer_gone(rpc_conn *c)
{
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&c->in, &fd) != 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP));
}

/* The connections open besides c, and those of c's uid.  With `exact`,
 * those whose client already hung up do not count (a client that connects
 * and disconnects quickly is not refused for connections the loop has
 * not seen close yet). */
static void count_open(th_rpc_server *srv, rpc_conn *c, bool exact,
                       uint32_t *open, uint32_t *mine)
{
    *open = *mine = 0;
    for (rpc_conn *k = srv->conns; k; k = k->next) {
        if (k == c || k->closing || (exact && peer_gone(k)))
            continue;
        (*open)++;
        *mine += k->who.uid == c->who.uid;
    }
}

static void on_connection(uv_stream_t *server, int status);

static void on_drop_closed(uv_handle_t *h)
{
    th_rpc_server *srv = h->data;
    srv->drop_busy = false;
    if (srv->drop_pending && srv->listening) {
        srv->drop_pending = false;
        on_connection((uv_stream_t *)&srv->listener, 0);
    }
}

/* No memory for a new connection.  libuv has accepted the client already
 * and polls the listener again only once uv_accept() takes it: take it
 * into srv->drop (no allocation) and close it, so the client sees its
 * connection end and the next one is served.  While drop closes, a client
 * that comes waits in libuv (drop_pending) and is taken when it has
 * closed. */
static void conn_drop(th_rpc_server *srv)
{
    srv_log(srv, &srv->rl_accept, TOOLHOST_LOG_ERROR,
            "out of memory: connection dropped");
    if (srv->drop_busy) {
        srv->drop_pending = true;
        return;
    }
    srv->drop_busy = true;
    uv_pipe_init(&srv->loop, &srv->drop, 0);
    srv->drop.data = srv;
    (void)uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)&srv->drop);
    uv_close((uv_handle_t *)&srv->drop, on_drop_closed);
}

static void on_connection(uv_stream_t *server, int status)
{
    th_rpc_server *srv = server->data;
    if (status < 0) {
        /* EMFILE/ENFILE: libuv accepted and closed the client with its
         * spare fd; say so (not once per client) and go on serving. */
        srv->refused++;
        th_stat_front_event(srv->host, TOOLHOST_FRONT_RPC, TH_RPC_EV_ACCEPT);
        srv_log(srv, &srv->rl_accept, TOOLHOST_LOG_WARN,
                "accept failed: %s (%u connections open, max_connections "
                "%u): the new client was dropped",
                uv_strerror(status), (unsigned)srv->n_conns,
                (unsigned)srv->max_conns);
        return;
    }
    rpc_conn *c = conn_new(srv);
    if (!c) {
        conn_drop(srv);
        return;
    }
    uv_pipe_init(&srv->loop, &c->in, 0);
    c->handles_open = 1;
    int rc = uv_accept(server, (uv_stream_t *)&c->in);
    if (rc < 0) {
        conn_close(c, false, "accept failed: %s", uv_strerror(rc));
        return;
    }
    uv_os_fd_t fd;
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (uv_fileno((uv_handle_t *)&c->in, &fd) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0) {
        c->who.uid = cr.uid;
        c->who.gid = cr.gid;
    } else {
        c->who.uid = c->who.gid = (uint32_t)-1; /* nobody we know */
    }
    c->who.trusted = false;
    /* The lowest free fd is the one given: a high one means the fds are
     * running out (plugins hold some too).  Refuse while a few are left,
     * so that accept() itself never fails (libuv would then drop clients
     * without a word). */
    if (srv->fd_limit && uv_fileno((uv_handle_t *)&c->in, &fd) == 0 &&
        (uint64_t)fd + FD_RESERVE / 2 >= srv->fd_limit) {
        th_stat_front_event(srv->host, TOOLHOST_FRONT_RPC, TH_RPC_EV_FD_LIMIT);
        conn_refuse(c, "the host is near its fd limit (%llu): fd %d",
                    (unsigned long long)srv->fd_limit, (int)fd);
        return;
    }
    uint32_t open, mine;
    count_open(srv, c, false, &open, &mine);
    if (open >= srv->max_conns || mine >= srv->max_conns_uid)
        count_open(srv, c, true, &open, &mine);
    if (open >= srv->max_conns) {
        th_stat_front_event(srv->host, TOOLHOST_FRONT_RPC, TH_RPC_EV_MAX_CONNECTIONS);
        conn_refuse(c, "too many connections: %u open, max_connections is "
                       "%u",
                    (unsigned)open, (unsigned)srv->max_conns);
        return;
    }
    if (mine >= srv->max_conns_uid) {
        th_stat_front_event(srv->host, TOOLHOST_FRONT_RPC, TH_RPC_EV_MAX_PER_UID);
        conn_refuse(c, "too many connections of uid %u: %u open, "
                       "max_connections_per_uid is %u",
                    (unsigned)c->who.uid, (unsigned)mine,
                    (unsigned)srv->max_conns_uid);
        return;
    }
    c->last_active = uv_now(&srv->loop);
    conn_start(c);
}

/* The sweep timer: closes connections idle for idle_timeout and those
 * whose partial frame is older than frame_timeout; counts the log lines
 * srv_log() left out. */
static void on_sweep(uv_timer_t *t)
{
    th_rpc_server *srv = t->data;
    uint64_t now = uv_now(&srv->loop);
    srv_log_flush(srv, &srv->rl_accept);
    srv_log_flush(srv, &srv->rl_refuse);
    srv_log_flush(srv, &srv->rl_budget);
    srv_log_flush(srv, &srv->rl_timeout);
    for (rpc_conn *c = srv->conns, *n; c; c = n) {
        n = c->next; /* conn_kill closes, never frees, c */
        if (c->closing || !c->session)
            continue;
        if (srv->frame_ms && c->frame_t0 &&
            now - c->frame_t0 >= srv->frame_ms) {
            srv->closed_frame++;
            th_stat_front_event(srv->host, TOOLHOST_FRONT_RPC, TH_RPC_EV_FRAME);
            srv_log(srv, &srv->rl_timeout, TOOLHOST_LOG_WARN,
                    "frame_timeout: session=%llu uid=%u holds %zu bytes of "
                    "a frame begun %llu ms ago",
                    (unsigned long long)c->id, (unsigned)c->who.uid,
                    th_rpc_reader_pending(&c->rd),
                    (unsigned long long)(now - c->frame_t0));
            conn_kill(c, TH_ETIMEOUT,
                      "a frame must complete within %llu ms (frame_timeout)",
                      (unsigned long long)srv->frame_ms);
            continue;
        }
        bool busy = c->inflight || c->perms || c->outbuf || c->frame_t0 ||
                    th_session_live_tasks(c->session) > 0;
        if (busy) {
            c->last_active = now;
        } else if (srv->idle_ms && now - c->last_active >= srv->idle_ms) {
            srv->closed_idle++;
            th_stat_front_event(srv->host, TOOLHOST_FRONT_RPC, TH_RPC_EV_IDLE);
            srv_log(srv, &srv->rl_timeout, TOOLHOST_LOG_INFO,
                    "idle_timeout: session=%llu uid=%u idle for %llu ms",
                    (unsigned long long)c->id, (unsigned)c->who.uid,
                    (unsigned long long)(now - c->last_active));
            conn_kill(c, TH_ETIMEOUT,
                      "idle for %llu ms with nothing in flight (idle_timeout)",
                      (unsigned long long)srv->idle_ms);
        }
    }
}

/* Starts the sweep timer at a quarter of the shorter timeout (20 ms ..
 * 1 s).  Not in stdio mode: the one session is the whole server. */
static void sweep_start(th_rpc_server *srv)
{
    uint64_t t = 4000;
    if (srv->idle_ms && srv->idle_ms < t)
        t = srv->idle_ms;
    if (srv->frame_ms && srv->frame_ms < t)
        t = srv->frame_ms;
    if (srv->stdio)
        return;
    t /= 4;
    t = t < 20 ? 20 : t > 1000 ? 1000 : t;
    uv_timer_start(&srv->sweep, on_sweep, t, t);
}

/* Connections the fd limit must leave room for, besides the fds open at
 * start and the FD_RESERVE / 2 that on_connection() keeps free: below
 * that the host would refuse every client, so serve does not start. */
#define FD_MIN_CONNS 8

/* Keeps max_connections below the fd limit (raising the soft limit when
 * the hard one allows), so the cap bites before accept() fails.  0, or
 * TH_ELIMIT when the limit leaves room for fewer than FD_MIN_CONNS
 * connections. */
static int fit_fd_limit(th_rpc_server *srv, th_error *err)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    rlim_t need = (rlim_t)srv->max_conns + FD_RESERVE;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        struct rlimit up = rl;
        up.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need
                          ? need
                          : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl = up;
    }
    srv->fd_limit = rl.rlim_cur == RLIM_INFINITY ? 0 : (uint64_t)rl.rlim_cur;
    if (!srv->fd_limit)
        return 0;
    /* The lowest free fd: the listener takes it, clients come above. */
    int low = fcntl(uv_backend_fd(&srv->loop), F_DUPFD_CLOEXEC, 0);
    if (low >= 0)
        close(low);
    uint64_t first = low >= 0 ? (uint64_t)low + 1 : 0;
    uint64_t room = srv->fd_limit > first + FD_RESERVE / 2
                        ? srv->fd_limit - first - FD_RESERVE / 2
                        : 0;
    if (room < FD_MIN_CONNS)
        return th_error_set(
            err, TH_ELIMIT,
            "the fd limit (ulimit -n) is %llu: with %llu fds in use and %d "
            "kept in reserve it leaves room for %llu connections; serve "
            "needs room for %d (a limit of %llu or more)",
            (unsigned long long)srv->fd_limit, (unsigned long long)first,
            FD_RESERVE / 2, (unsigned long long)room, FD_MIN_CONNS,
            (unsigned long long)(first + FD_RESERVE / 2 + FD_MIN_CONNS));
    if (rl.rlim_cur < need) {
        uint32_t fit = rl.rlim_cur > 2 * FD_RESERVE
                           ? (uint32_t)(rl.rlim_cur - FD_RESERVE)
                           : (uint32_t)(rl.rlim_cur / 2 + 1);
        if (fit > room)
            fit = (uint32_t)room;
        th_log_warn("max_connections lowered from %u to %u: the fd limit "
                    "is %llu",
                    (unsigned)srv->max_conns, (unsigned)fit,
                    (unsigned long long)rl.rlim_cur);
        srv->max_conns = fit;
    }
    return 0;
}

/* ---- Shutdown -------------------------------------------------------------- */

static void on_hard(uv_timer_t *t)
{
    th_rpc_server *srv = t->data;
    for (rpc_conn *c = srv->conns, *n; c; c = n) {
        n = c->next;
        conn_close(c, false, "shutdown: calls did not end after cancel");
    }
}

static void on_grace(uv_timer_t *t)
{
    th_rpc_server *srv = t->data;
    srv->cancelled_rest = true;
    uint32_t n = 0;
    for (rpc_conn *c = srv->conns; c; c = c->next) {
        if (c->closing || !c->session)
            continue;
        for (rpc_call *k = c->calls; k; k = k->next) {
            th_call_cancel(c->session, k->task_id ? k->task_id : k->call_id);
            n++;
        }
    }
    th_log_info("shutdown: grace of %llu ms over, %u calls cancelled",
                (unsigned long long)srv->grace_ms, (unsigned)n);
    uv_timer_start(&srv->hard, on_hard, HARD_CLOSE_MS, 0);
    server_check_drained(srv);
}

static void close_if_open(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* While stopping: once no call is in flight (or after the cancel), close
 * the connections; once none is left, close the loop's own handles. */
static void server_check_drained(th_rpc_server *srv)
{
    if (!srv->stopping)
        return;
    bool busy = false;
    for (rpc_conn *c = srv->conns; c; c = c->next)
        if (c->calls)
            busy = true;
    if (!busy) {
        for (rpc_conn *c = srv->conns, *n; c; c = n) {
            n = c->next;
            conn_close(c, true, "shutdown");
        }
    }
    if (srv->conns)
        return;
    if (srv->reload) {
        th_reload_watch_stop(srv->reload);
        srv->reload = NULL;
    }
    if (srv->signals) {
        close_if_open((uv_handle_t *)&srv->sigterm);
        close_if_open((uv_handle_t *)&srv->sigint);
    }
    close_if_open((uv_handle_t *)&srv->grace);
    close_if_open((uv_handle_t *)&srv->hard);
    close_if_open((uv_handle_t *)&srv->sweep);
    close_if_open((uv_handle_t *)&srv->flush);
    pthread_mutex_lock(&srv->mu);
    srv->wake_closed = true;
    pthread_mutex_unlock(&srv->mu);
    close_if_open((uv_handle_t *)&srv->wake);
}

static void server_begin_stop(th_rpc_server *srv, const char *why)
{
    if (srv->stopping) {
        /* A second signal: do not wait out the grace. */
        if (!srv->cancelled_rest) {
            uv_timer_stop(&srv->grace);
            on_grace(&srv->grace);
        }
        return;
    }
    srv->stopping = true;
    th_log_info("shutdown: %s", why);
    if (srv->listening) {
        uv_close((uv_handle_t *)&srv->listener, NULL);
        srv->listening = false;
        if (srv->bound)
            unlink(srv->sock_path);
    }
    /* Connections stay open and read on: answers to permission requests
     * and cancels still count; new requests are refused (dispatch). */
    uv_timer_start(&srv->grace, on_grace, srv->grace_ms, 0);
    server_check_drained(srv);
}

static void on_signal(uv_signal_t *s, int signum)
{
    th_rpc_server *srv = s->data;
    server_begin_stop(srv, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

void th_rpc_server_stop(th_rpc_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    srv->stop_req = true;
    if (!srv->wake_closed)
        uv_async_send(&srv->wake);
    pthread_mutex_unlock(&srv->mu);
}

/* ---- Listening ------------------------------------------------------------ */

/* A socket file at `path`: a live host is an error, a stale file is
 * removed, anything else that is not a socket is an error. */
static int check_socket_path(const char *path, th_error *err)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0
                               : th_error_set(err, TH_EIO, "%s: %s", path,
                                              strerror(errno));
    if (!S_ISSOCK(st.st_mode))
        return th_error_set(err, TH_EIO,
                            "%s exists and is not a socket; not replacing it",
                            path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return th_error_set(err, TH_EIO, "socket: %s", strerror(errno));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    close(fd);
    if (rc == 0)
        return th_error_set(err, TH_ESTATE,
                            "another host is listening on %s", path);
    if (e != ECONNREFUSED && e != ENOENT)
        return th_error_set(err, TH_EIO, "%s: %s", path, strerror(e));
    th_log_info("removing stale socket %s", path);
    if (unlink(path) != 0 && errno != ENOENT)
        return th_error_set(err, TH_EIO, "cannot remove stale socket %s: %s",
                            path, strerror(errno));
    return 0;
}

static int start_listen(th_rpc_server *srv, const char *addr, th_error *err)
{
    const char *path;
    int rc = th_rpc_parse_addr(addr, &path, err);
    if (rc) {
        if (err) /* the message is already there: only the code changes */
            err->code = TH_ECONFIG;
        return TH_ECONFIG;
    }
    if (srv->has_listen_fd) { /* socket activation: bound already */
        if (!(srv->sock_path = strdup(path)))
            return th_error_set(err, TH_ENOMEM, "out of memory");
        if ((rc = uv_pipe_init(&srv->loop, &srv->listener, 0)) < 0 ||
            (rc = uv_pipe_open(&srv->listener, srv->listen_fd)) < 0)
            return th_error_set(err, TH_EIO, "pipe: %s", uv_strerror(rc));
        srv->listener.data = srv;
        srv->listening = true;
        if ((rc = uv_listen((uv_stream_t *)&srv->listener, 128,
                            on_connection)) < 0)
            return th_error_set(err, TH_EIO, "listen %s: %s", path,
                                uv_strerror(rc));
        th_log_info("listening on unix:%s (socket from the service manager)",
                    path);
        return 0;
    }
    if ((rc = check_socket_path(path, err)))
        return rc;
    if (!(srv->sock_path = strdup(path)))
        return th_error_set(err, TH_ENOMEM, "out of memory");
    if ((rc = uv_pipe_init(&srv->loop, &srv->listener, 0)) < 0)
        return th_error_set(err, TH_EIO, "pipe: %s", uv_strerror(rc));
    srv->listener.data = srv;
    srv->listening = true;
    /* Nobody may connect between bind and chmod: bind with no access. */
    mode_t old = umask(0777);
    rc = uv_pipe_bind(&srv->listener, path);
    umask(old);
    if (rc < 0)
        return th_error_set(err, TH_EIO, "bind %s: %s", path, uv_strerror(rc));
    srv->bound = true;
    uint32_t mode = srv->cfg->socket_mode ? srv->cfg->socket_mode : 0600;
    if (srv->cfg->socket_group) {
        struct group gr, *res = NULL;
        char buf[4096];
        char *end;
        unsigned long gid = strtoul(srv->cfg->socket_group, &end, 10);
        if (*end != '\0' || end == srv->cfg->socket_group) {
            if (getgrnam_r(srv->cfg->socket_group, &gr, buf, sizeof buf,
                           &res) != 0 || !res)
                return th_error_set(err, TH_ECONFIG,
                                    "socket_group '%s': no such group",
                                    srv->cfg->socket_group);
            gid = res->gr_gid;
        }
        if (chown(path, (uid_t)-1, (gid_t)gid) != 0)
            return th_error_set(err, TH_EIO, "chown %s: %s", path,
                                strerror(errno));
    }
    if (chmod(path, (mode_t)mode) != 0)
        return th_error_set(err, TH_EIO, "chmod %s: %s", path,
                            strerror(errno));
    if ((rc = uv_listen((uv_stream_t *)&srv->listener, 128, on_connection)) <
        0)
        return th_error_set(err, TH_EIO, "listen %s: %s", path,
                            uv_strerror(rc));
    th_log_info("listening on unix:%s mode %04o", path, (unsigned)mode);
    return 0;
}

/* Whether epoll takes fd (a regular file or /dev/null it refuses, and
 * libuv aborts on a read handle it cannot poll). */
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

/* Input that is a regular file or /dev/null: a thread copies it into a
 * pipe whose other end is the connection's `in`, so reading, limits and
 * end of input stay those of a pipe.  The thread ends at the end of the
 * input or when the read end is gone (EPIPE; SIGPIPE is ignored); reading
 * a regular file never blocks, so free_server() can join it once the
 * handles are closed. */
static void *relay_main(void *arg)
{
    th_rpc_server *srv = arg;
    th_fd_relay(srv->relay_src, srv->relay_dst);
    return NULL;
}

static int start_stdio(th_rpc_server *srv, const th_rpc_serve_opts *o,
                       th_error *err)
{
    int in = o->in_fd, out = o->out_fd;
    if (in == 0 && out == 0)
        out = 1;
    rpc_conn *c = conn_new(srv);
    if (!c)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    c->two_handles = true;
    uv_pipe_init(&srv->loop, &c->in, 0);
    uv_pipe_init(&srv->loop, &c->out, 0);
    c->handles_open = 2;
    if (!pollable(in)) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0)
            return th_error_set(err, TH_EIO, "stdin: pipe: %s",
                                strerror(errno));
        srv->relay_src = in;
        srv->relay_dst = p[1];
        if (pthread_create(&srv->relay, NULL, relay_main, srv) != 0) {
            close(p[0]);
            close(p[1]);
            return th_error_set(err, TH_EIO, "stdin: cannot start a thread");
        }
        srv->relay_started = true;
        th_log_debug("stdio: input is not a pipe or socket: relayed");
        in = p[0];
    }
    int rc = uv_pipe_open(&c->in, in);
    if (rc < 0) {
        if (srv->relay_started)
            close(in);
        return th_error_set(err, TH_EIO, "stdin: %s", uv_strerror(rc));
    }
    if ((rc = uv_pipe_open(&c->out, out)) < 0)
        return th_error_set(err, TH_EIO, "stdout: %s", uv_strerror(rc));
    c->who.uid = (uint32_t)getuid();
    c->who.gid = (uint32_t)getgid();
    c->who.trusted = false;
    conn_start(c);
    return 0;
}

/* ---- The loop ---------------------------------------------------------------- */

static void free_server(th_rpc_server *srv)
{
    drain_events(srv);
    if (srv->relay_started)
        pthread_join(srv->relay, NULL);
    msgpack_unpacked_destroy(&srv->msg);
    while (srv->spare) {
        rpc_call *k = srv->spare;
        srv->spare = k->next;
        free(k);
    }
    free(srv->sock_path);
    pthread_mutex_destroy(&srv->mu);
    free(srv);
}

/* Closes what is open after a failed start and runs the loop until the
 * handles are gone. */
static void abort_start(th_rpc_server *srv)
{
    srv->stopping = true;
    srv->cancelled_rest = true;
    if (srv->listening) {
        uv_close((uv_handle_t *)&srv->listener, NULL);
        srv->listening = false;
        if (srv->bound)
            unlink(srv->sock_path);
    }
    for (rpc_conn *c = srv->conns, *n; c; c = n) {
        n = c->next;
        conn_close(c, false, "startup failed");
    }
    server_check_drained(srv);
    uv_run(&srv->loop, UV_RUN_DEFAULT);
}

/* th_rpc_serve: the server's settings from the host's config (hcfg) and
 * the RPC section (cfg), and the options (limits: a zeroed config, an
 * embedding program's, gets the defaults of rpc_config.c). */
static void server_settings(th_rpc_server *srv, th_host *h,
                            const th_host_cfg *hcfg, const th_rpc_cfg *cfg,
                            const th_rpc_serve_opts *o)
{
    srv->host = h;
    msgpack_unpacked_init(&srv->msg);
    srv->cfg = cfg;
    srv->stdio = o->stdio;
    srv->max_frame = cfg->max_frame ? cfg->max_frame : DEF_MAX_FRAME;
    srv->max_inflight = cfg->max_inflight ? cfg->max_inflight
                                          : DEF_MAX_INFLIGHT;
    srv->max_outbuf = cfg->max_outbuf ? cfg->max_outbuf : DEF_MAX_OUTBUF;
    srv->grace_ms = hcfg->shutdown_grace_ms ? hcfg->shutdown_grace_ms
                                            : DEF_GRACE_MS;
    srv->max_conns = cfg->max_connections ? cfg->max_connections : 1024;
    srv->max_conns_uid = cfg->max_connections_per_uid
                             ? cfg->max_connections_per_uid
                             : 256;
    srv->idle_ms = cfg->idle_timeout_ms;
    srv->frame_ms = cfg->frame_timeout_ms;
    srv->max_buffered = cfg->max_buffered ? cfg->max_buffered
                                          : (uint64_t)256 << 20;
    srv->max_proto_errors = cfg->max_protocol_errors
                                ? cfg->max_protocol_errors
                                : 8;
    srv->conn_log_lines = cfg->max_conn_log_lines ? cfg->max_conn_log_lines
                                                  : 20;
    srv->ops.ask_permission = front_ask_permission;
    srv->ops.ask_client = front_ask_client;
    srv->ops.tools_changed = front_tools_changed;
    srv->ops.task_tools_changed = front_task_tools_changed;
    srv->ops.front = TOOLHOST_FRONT_RPC;
    srv->on_ready = o->on_ready;
    srv->has_listen_fd = o->has_listen_fd;
    srv->listen_fd = o->listen_fd;
    srv->ready_ud = o->ready_ud;
    srv->start = uv_hrtime();
}

/* th_rpc_serve: SIGTERM and SIGINT handled on the loop.  0, or the
 * error set. */
static int server_signals(th_rpc_server *srv, th_error *err)
{
    int rc;
    /* sigterm and sigint close together (server_check_drained) */
    if ((rc = uv_signal_init(&srv->loop, &srv->sigterm)) == 0 &&
        (rc = uv_signal_init(&srv->loop, &srv->sigint)) != 0)
        uv_close((uv_handle_t *)&srv->sigterm, NULL);
    if (rc == 0) {
        srv->signals = true;
        srv->sigterm.data = srv->sigint.data = srv;
        if ((rc = uv_signal_start(&srv->sigterm, on_signal, SIGTERM)) ==
            0)
            rc = uv_signal_start(&srv->sigint, on_signal, SIGINT);
    }
    if (rc != 0)
        rc = th_error_set(err, TH_EIO, "signal handlers: %s",
                          uv_strerror(rc));
    return rc;
}

int th_rpc_serve(th_host *h, const th_rpc_serve_opts *o, th_error *err)
{
    th_rpc_serve_opts def = {0};
    if (!o)
        o = &def;
    th_error_clear(err);
    const th_host_cfg *hcfg = &th_host_config(h)->host;
    const th_rpc_cfg *cfg = th_rpc_config(th_host_config(h));
    const char *addr = o->listen ? o->listen : cfg->listen;
    if (!o->stdio && !addr)
        return th_error_set(err, TH_ECONFIG,
                            "no listen address: give --listen unix:PATH or "
                            "set host.listen in the config");
    th_rpc_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    server_settings(srv, h, hcfg, cfg, o);
    if (pthread_mutex_init(&srv->mu, NULL) != 0) {
        free(srv);
        return th_error_set(err, TH_ENOMEM, "mutex");
    }
    th_uv_guard_init(); /* libuv's own allocations: no abort() */
    int rc = uv_loop_init(&srv->loop);
    if (rc < 0) {
        pthread_mutex_destroy(&srv->mu);
        free(srv);
        return th_error_set(err, TH_EIO, "event loop: %s", uv_strerror(rc));
    }
    if ((rc = uv_async_init(&srv->loop, &srv->wake, on_wake)) < 0) {
        uv_loop_close(&srv->loop);
        pthread_mutex_destroy(&srv->mu);
        free(srv);
        return th_error_set(err, TH_EIO, "event loop: %s", uv_strerror(rc));
    }
    srv->wake.data = srv;
    uv_timer_init(&srv->loop, &srv->grace);
    uv_timer_init(&srv->loop, &srv->hard);
    uv_timer_init(&srv->loop, &srv->sweep);
    srv->grace.data = srv->hard.data = srv->sweep.data = srv;
    sweep_start(srv);
    uv_prepare_init(&srv->loop, &srv->flush);
    srv->flush.data = srv;
    uv_prepare_start(&srv->flush, flush_pending);
    uv_unref((uv_handle_t *)&srv->flush); /* never keeps the loop alive */
    rc = o->no_signals ? 0 : server_signals(srv, err);
    /* A client that goes away must not kill the host. */
    signal(SIGPIPE, SIG_IGN);

    if (rc == 0 && !o->stdio)
        rc = fit_fd_limit(srv, err);
    if (rc == 0)
        rc = o->stdio ? start_stdio(srv, o, err)
                      : start_listen(srv, addr, err);
    if (rc) {
        abort_start(srv);
        uv_loop_close(&srv->loop);
        free_server(srv);
        return rc;
    }
    /* the config is borrowed (th/host.h): the first reload may free it */
    srv->cfg = NULL;
    th_reloader *rl = th_host_reloader(h);
    if (rl) {
        th_reload_watch_opts wo = {.mode = hcfg->reload,
                                   .debounce_ms = hcfg->reload_debounce_ms,
                                   .no_sighup = o->no_signals};
        th_error we;
        if (th_reload_watch_start(rl, &srv->loop, &wo, &srv->reload, &we) != 0)
            th_log_warn("hot reload triggers are off: %s", we.msg);
    }
    if (srv->on_ready)
        srv->on_ready(srv, srv->ready_ud);
    srv->loop_tid = pthread_self();
    uv_run(&srv->loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(&srv->loop);
    if (rc != 0)
        th_log_warn("event loop closed with handles open: %s",
                    uv_strerror(rc));
    th_log_info("shutdown complete");
    free_server(srv);
    return 0;
}
