/* call_cb.c - the host callbacks a tool's execute() uses on its call
 * (Owner class, plugin.h): output, meta, progress (into the call's
 * coalescing slot, th/progress.h), cancel and deadline, suspend and
 * complete. */
#include <errno.h>
#include <msgpack.h>
#include <pwd.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "call_int.h"
#include "th/mpwalk.h"
#include "th/clock.h"
#include "th/content.h"
#include "th/log.h"

/* A call nested inline in another (a tool calling tools on its own
 * thread) is also cancelled when an ancestor is (each call holds a
 * reference to its parent).  is_cancelled() reads the chain without the
 * call's lock, maybe while another thread ends the call and makes it a
 * tombstone (call_free zeroes inline_run and parent): relaxed atomic
 * loads there, as call_free's stores. */
static bool cancelled(th_mcall *c)
{
    for (; c; c = __atomic_load_n(&c->inline_run, __ATOMIC_RELAXED)
                      ? __atomic_load_n(&c->parent, __ATOMIC_RELAXED)
                      : NULL)
        if (atomic_load_explicit(&c->abort_code, memory_order_relaxed))
            return true;
    return false;
}

/* ---- Contract safety ---------------------------------------------------------

 * A callback on a call whose execution has ended (after complete(), after
 * execute() returned, a second complete()) is the plugin's misuse: it is
 * answered TOOLHOST_ESTATE and logged once per call (tool, call id, what).
 * The memory is valid: a call plugin code saw ends as a tombstone
 * (call.c).  Takes and releases c->mu. */
static bool misuse_locked(th_mcall *c, const char *what)
{
    if (!c->misuse_logged) {
        c->misuse_logged = true;
        th_log_error("tool=%s call=%llu: %s (contract misuse: the call handle is "
                     "invalid once the call ended; answered TOOLHOST_ESTATE)",
                     c->x && c->x->tname[0] ? c->x->tname : c->tool->name,
                     (unsigned long long)c->base.pub.call_id, what);
    }
    return true;
}

static bool stale(th_mcall *c, const char *fn)
{
    /* c->ended is set under mu by a release store (th_mcall_set_ended): a
     * callback made while the call runs, the usual case, reads it false
     * and takes no lock (a script's is_cancelled() twice per tool call) */
    if (!__atomic_load_n(&c->ended, __ATOMIC_ACQUIRE))
        return false;
    pthread_mutex_lock(&c->mu);
    bool gone = c->ended;
    if (gone) {
        char what[96];
        snprintf(what, sizeof what, "%s() after the call ended", fn);
        misuse_locked(c, what);
    }
    pthread_mutex_unlock(&c->mu);
    return gone;
}

/* ---- ABI 1.1: cancel hooks (on_cancel, cancel_fd) and caller ---------------- */

/* The hook runs outside mu, marked cancel_running so that
 * th_mcall_exec_end() waits for it. */
void th_call_cancel_hooks_fire(th_mcall *c)
{
    pthread_mutex_lock(&c->mu);
    if (c->cancel_fired || c->ended) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->cancel_fired = true;
    if (!c->x) {
        /* never ran: no hook, no eventfd (a tool sets them up) */
        pthread_mutex_unlock(&c->mu);
        return;
    }
    if (c->x->cancel_efd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(c->x->cancel_efd, &one, sizeof one);
        (void)w; /* nonblocking; a full counter is still readable */
    }
    void (*fn)(void *) = c->x->cancel_fn;
    void *ud = c->x->cancel_ud;
    c->x->cancel_fn = NULL;
    if (fn)
        c->cancel_running = true;
    pthread_mutex_unlock(&c->mu);
    if (!fn)
        return;
    fn(ud);
    pthread_mutex_lock(&c->mu);
    c->cancel_running = false;
    th_call_wake_locked(c);
    pthread_mutex_unlock(&c->mu);
}

void th_call_cancel_hooks_end_locked(th_mcall *c)
{
    th_mcall_set_ended(c);
    if (c->x)
        c->x->cancel_fn = NULL;
    while (c->cancel_running)
        th_call_wait_locked(c);
}

static int cb_on_cancel(toolhost_call *call, void (*fn)(void *ud), void *ud)
{
    th_mcall *c = (th_mcall *)call;
    pthread_mutex_lock(&c->mu);
    if (!fn) {
        /* Unregister, and wait for a hook that is running. */
        c->x->cancel_fn = NULL;
        while (c->cancel_running)
            th_call_wait_locked(c);
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    if (c->ended) {
        pthread_mutex_unlock(&c->mu);
        return TOOLHOST_ESTATE;
    }
    bool now = c->cancel_fired || cancelled(c);
    if (!now) {
        c->x->cancel_fn = fn;
        c->x->cancel_ud = ud;
    }
    pthread_mutex_unlock(&c->mu);
    if (now)
        fn(ud); /* already cancelled: at once, on this thread */
    return 0;
}

static int cb_cancel_fd(toolhost_call *call)
{
    th_mcall *c = (th_mcall *)call;
    pthread_mutex_lock(&c->mu);
    int rc;
    if (c->ended) {
        rc = TOOLHOST_ESTATE;
    } else if (c->x->cancel_efd >= 0) {
        rc = c->x->cancel_efd;
    } else if ((c->x->cancel_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        rc = errno == ENOMEM ? TOOLHOST_ENOMEM : TOOLHOST_ESTATE;
    } else {
        if (c->cancel_fired || cancelled(c)) {
            uint64_t one = 1;
            ssize_t w = write(c->x->cancel_efd, &one, sizeof one);
            (void)w;
        }
        rc = c->x->cancel_efd;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Owner.  Who calls: the session's principal, its id, the toolset, the
 * front.  The strings live in the call until it is freed. */
static int cb_caller(const toolhost_call *call, toolhost_caller *out)
{
    th_mcall *c = (th_mcall *)(uintptr_t)call;
    /* Under mu throughout but for the user name's lookup: a plugin thread
     * that asks while another ends the call (a misuse) must not read x
     * after call_free let it go, and while mu is held with `ended` unset
     * the call cannot end.  The name is looked up once per call. */
    pthread_mutex_lock(&c->mu);
    if (c->ended)
        goto ended;
    const th_session *s = c->s;
    th_mcall_x *x = c->x;
    if (s && !x->caller_user) {
        char *name = NULL;
        uid_t uid = (uid_t)s->who.uid;
        if (s->who.user) { /* a user named by a token (MCP over HTTP) */
            name = strdup(s->who.user);
        } else {
            pthread_mutex_unlock(&c->mu); /* NSS may be slow (a directory) */
            char buf[1024];
            struct passwd pw, *res = NULL;
            if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res)
                name = strdup(res->pw_name);
            pthread_mutex_lock(&c->mu);
            if (c->ended) {
                free(name);
                goto ended;
            }
        }
        if (!x->caller_user)
            x->caller_user = name;
        else
            free(name); /* another thread of the plugin asked meanwhile */
    }
    out->uid = s ? (int64_t)s->who.uid : -1;
    out->user = x->caller_user;
    if (s) {
        snprintf(x->caller_session, sizeof x->caller_session, "%llu",
                 (unsigned long long)s->id);
        out->session = x->caller_session;
        out->front = c->front ? c->front : s->ops.front;
    }
    out->toolset = c->ts ? c->ts->name : NULL;
    pthread_mutex_unlock(&c->mu);
    return 0;
ended:
    misuse_locked(c, "caller() after the call ended");
    pthread_mutex_unlock(&c->mu);
    return TOOLHOST_ESTATE;
}

/* A write under the call's lock: the ended check and the write in one
 * turn, never concurrently with the end of the call (which sets `ended`
 * under the lock before the streams are finished). */
static __attribute__((noinline)) int write_locked(th_mcall *c, int stream,
                                                  const void *data, size_t len)
{
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    if (c->ended) {
        misuse_locked(c, "write() after the call ended");
        rc = TOOLHOST_ESTATE;
    } else if (cancelled(c)) {
        rc = TOOLHOST_ECANCELLED;
    } else if (len) {
        th_out *o = stream == TOOLHOST_STDOUT ? &c->x->out : &c->x->err;
        th_out_claim(o); /* the running thread may be writing unlocked */
        rc = th_out_write(o, data, len) == 0 ? 0 : TOOLHOST_ENOMEM;
        th_out_unclaim(o);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Owner.  The thread running execute() of the call (not suspended) needs
 * no lock: nothing can end the call under it (only this thread ends it,
 * once execute() returns; complete() needs suspend(), after which writes
 * take the lock), and a write from another thread (a plugin thread
 * misusing the Owner class) claims the stream too (th_out_try_claim),
 * so two writes never overlap.  Any other writer takes the call's lock
 * (write_locked): TOOLHOST_ESTATE and the misuse log once the call ended
 * (a plugin thread racing its own complete()). */
static int cb_write(toolhost_call *call, int stream, const void *data,
                    size_t len)
{
    th_mcall *c = (th_mcall *)call;
    if ((stream != TOOLHOST_STDOUT && stream != TOOLHOST_STDERR) ||
        (!data && len))
        return TOOLHOST_EINVAL;
    if (th_mcall_current() != c || c->suspended)
        return write_locked(c, stream, data, len);
    if (cancelled(c))
        return TOOLHOST_ECANCELLED;
    if (!len)
        return 0;
    th_out *o = stream == TOOLHOST_STDOUT ? &c->x->out : &c->x->err;
    if (!th_out_try_claim(o))
        return write_locked(c, stream, data, len); /* after the other writer */
    int rc = th_out_write(o, data, len);
    th_out_unclaim(o);
    return rc == 0 ? 0 : TOOLHOST_ENOMEM;
}

static int cb_set_meta(toolhost_call *call, const uint8_t *map, size_t len)
{
    th_mcall *c = (th_mcall *)call;
    if (!map || !len)
        return TOOLHOST_EINVAL;
    /* One whole map that msgpack-c's unpacker can build (build_meta and
     * the fronts unpack it), checked by walking the bytes: no zone. */
    th_mp_head h;
    size_t vlen = 0;
    if (th_mp_head_read(map, len, &h) != 1 || !h.container ||
        !(map[0] <= 0x8f || map[0] >= 0xde) ||
        th_mp_check(map, len, TH_MP_MAX_DEPTH, &vlen, NULL) != 0 ||
        vlen != len)
        return TOOLHOST_EINVAL;
    uint8_t *m = malloc(len);
    if (!m)
        return TOOLHOST_ENOMEM;
    memcpy(m, map, len);
    pthread_mutex_lock(&c->mu);
    if (c->ended) {
        misuse_locked(c, "set_meta() after the call ended");
        pthread_mutex_unlock(&c->mu);
        free(m);
        return TOOLHOST_ESTATE;
    }
    free(c->x->meta);
    c->x->meta = m;
    c->x->meta_len = len;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* ABI 1.5: the retry-after hint of a call that ends as a backend's
 * error (build_result, call.c, reads it). */
static int cb_set_retry_after(toolhost_call *call, uint64_t ms)
{
    th_mcall *c = (th_mcall *)call;
    if (ms > TOOLHOST_MAX_RETRY_AFTER_MS)
        ms = TOOLHOST_MAX_RETRY_AFTER_MS;
    pthread_mutex_lock(&c->mu);
    if (c->ended) {
        misuse_locked(c, "set_retry_after() after the call ended");
        pthread_mutex_unlock(&c->mu);
        return TOOLHOST_ESTATE;
    }
    c->x->retry_after_ms = ms;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* True when `c` runs inline on this thread: it is the thread's call, or
 * an ancestor of it through inline calls (run_code forwarding an update of
 * a tool it called).  Its caller then waits on this very thread (inside
 * th_call_start), so an update must be delivered here and now: handed to
 * the notifier it would reach th_call_sync's pending slot, which the
 * caller only reads once the call is over. */
static bool inline_here(const th_mcall *c)
{
    if (!c->inline_run)
        return false;
    for (const th_mcall *p = th_mcall_current(); p; p = p->inline_run ? p->parent : NULL)
        if (p == c)
            return true;
    return false;
}

static int cb_progress(toolhost_call *call, double fraction,
                       const char *message, const uint8_t *data,
                       size_t data_len)
{
    th_mcall *c = (th_mcall *)call;
    if (stale(c, "progress"))
        return TOOLHOST_ESTATE;
    th_host *h = c->h;
    th_session *s = c->s;
    if (data_len && !data)
        return TOOLHOST_EINVAL;
    th_progress_update u;
    char *last = message ? strdup(message) : NULL;
    if ((message && !last) ||
        th_progress_copy(&u, c->base.pub.call_id, fraction, message, data,
                         data_len, 0) != 0) {
        free(last);
        return TOOLHOST_ENOMEM;
    }
    pthread_mutex_lock(&c->mu);
    if (c->answered || c->ended) {
        int rc = c->ended ? (misuse_locked(c, "progress() after the call ended"),
                             TOOLHOST_ESTATE)
                          : TOOLHOST_ECANCELLED;
        pthread_mutex_unlock(&c->mu);
        th_progress_update_destroy(&u);
        free(last);
        return rc;
    }
    int64_t wall = th_wall_ms();
    c->x->last_update_ms = wall;
    free(c->x->last_msg);
    c->x->last_msg = last;
    c->x->last_frac = fraction;
    if (!c->acked) {
        /* The first update acknowledges: the call becomes a task. */
        c->acked = true;
        atomic_store(&c->is_task, true);
        /* the wall-clock start, read only for tasks (tasks.list) */
        c->x->start_wall_ms = wall - (th_now_ns() - c->start_ns) / 1000000;
        c->pend_ack = true;
        c->x->ack_msg = u.message;
        c->x->ack_frac = fraction;
        u.message = NULL;
        th_progress_update_destroy(&u);
        bool changed = false;
        pthread_mutex_lock(&s->mu);
        /* a task is listed from the session's map: a call in its call
         * slot enters it (closing: the close finds it in the slot) */
        (void)th_call_session_put_locked(c);
        s->live_tasks++;
        c->live_counted = true;
        changed = s->live_tasks == 1 && !c->cfg->host.expose_task_tools;
        if (c->scope == TH_SCOPE_TOOLSET && c->exec_counted) {
            c->exec_counted = false;
            s->exec_live--;
            pthread_cond_broadcast(&s->cv);
        }
        pthread_mutex_unlock(&s->mu);
        if (c->scope == TH_SCOPE_TOOLSET) {
            pthread_mutex_lock(&h->tmu);
            if (th_u64map_put(&h->tasks, c->base.pub.call_id, c) == 0) {
                c->in_tasks = true;
                th_mcall_ref(c);
            }
            pthread_mutex_unlock(&h->tmu);
        }
        th_call_deliver_locked(c);
        pthread_mutex_unlock(&c->mu);
        /* A task that holds a worker counts against the async cap. */
        if (th_mcall_current() == c && th_mgr_tl_worker && !c->inline_run &&
            !th_mgr_tl_async_get()) {
            th_mgr_tl_async_set(true);
            th_mgr_async_take(h);
        }
        if (changed)
            th_session_task_tools_changed(s);
        return 0;
    }
    if (c->no_progress) {
        pthread_mutex_unlock(&c->mu);
        th_progress_update_destroy(&u);
        return 0;
    }
    th_progress_put(&c->x->prog, &u);
    if (!c->delivering) {
        if (inline_here(c)) {
            th_call_deliver_locked(c); /* inline: the caller's own thread */
        } else if (!c->notify_queued) {
            c->notify_queued = true;
            th_mcall_ref(c);
            th_mgr_notify(h, c);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static int cb_is_cancelled(const toolhost_call *call)
{
    th_mcall *c = (th_mcall *)(uintptr_t)call;
    if (stale(c, "is_cancelled"))
        return 1; /* an ended call is as good as cancelled: stop */
    return cancelled(c);
}

static int64_t cb_time_left_ms(const toolhost_call *call)
{
    th_mcall *c = (th_mcall *)(uintptr_t)call;
    if (stale(c, "time_left_ms"))
        return 0;
    int64_t d = atomic_load_explicit(&c->deadline_ns, memory_order_relaxed);
    if (d == 0)
        return -1;
    int64_t left = (d - th_now_ns()) / 1000000;
    return left > 0 ? left : 0;
}

static int cb_suspend(toolhost_call *call)
{
    th_mcall *c = (th_mcall *)call;
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    if (c->ended) {
        misuse_locked(c, "suspend() after the call ended");
        rc = TOOLHOST_ESTATE;
    } else if (!c->in_execute || c->suspended || th_mcall_current() != c) {
        rc = TOOLHOST_ESTATE; /* twice, or not from execute(): nothing changes */
    } else {
        th_mcall_ref(c); /* held until complete() */
        c->suspended = true;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Only the owner of a suspended call may finish it: without suspend() the
 * worker still owns the call (and its reference), so finishing here would
 * answer it twice and free it under the worker's feet.  A second or late
 * complete() finds the call ended (its memory is a tombstone at worst):
 * TOOLHOST_ESTATE and a log line.  An unknown status ends the call as a
 * tool error, logged, and returns TOOLHOST_EINVAL. */
static int cb_complete(toolhost_call *call, int status)
{
    th_mcall *c = (th_mcall *)call;
    pthread_mutex_lock(&c->mu);
    if (c->ended || c->completed) {
        misuse_locked(c, "complete() called twice or after the call ended");
        pthread_mutex_unlock(&c->mu);
        return TOOLHOST_ESTATE;
    }
    if (!c->suspended) {
        if (!c->misuse_logged) {
            c->misuse_logged = true;
            th_log_error("tool=%s call=%llu: complete() without suspend() (contract "
                         "misuse: ignored, answered TOOLHOST_ESTATE; execute() still "
                         "returns the result)",
                         c->tool->name, (unsigned long long)c->base.pub.call_id);
        }
        pthread_mutex_unlock(&c->mu);
        return TOOLHOST_ESTATE;
    }
    c->completed = true;
    pthread_mutex_unlock(&c->mu);
    int rc = 0;
    if (status != TOOLHOST_OK && status != TOOLHOST_FAILED &&
        !th_mcall_backend_status(c, status)) {
        char m[200];
        snprintf(m, sizeof m, "tool %s completed its call with unknown status %d "
                 "(expected ok or failed; contract misuse)", c->tool->name, status);
        th_log_error("tool=%s call=%llu: %s", c->tool->name,
                     (unsigned long long)c->base.pub.call_id, m);
        th_mcall_set_error(call, TH_ETOOL, m);
        status = TOOLHOST_FAILED;
        rc = TOOLHOST_EINVAL;
    }
    th_mcall_exec_end(c, status, true);
    th_mcall_unref(c);
    return rc;
}

/* ---- log_call() lines to the front (th_front_ops.log_call) ------------------ */

/* Any.  Not after the call ended, nor once its session is closing: the
 * front op runs counted in s->ops_inflight (as tools_changed does), which
 * th_session_close waits for, so the front is still there.  Lock order:
 * c->mu, then s->mu. */
static void cb_log(const toolhost_call *call, int level, const char *line)
{
    th_mcall *c = (th_mcall *)(uintptr_t)call;
    /* c->s and its ops are fixed for the call's life: a front that wants
     * no lines costs no lock */
    if (__atomic_load_n(&c->ended, __ATOMIC_ACQUIRE) || !c->s ||
        !c->s->ops.log_call)
        return;
    pthread_mutex_lock(&c->mu);
    th_session *s = c->s;
    if (c->ended) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    /* copied under c->mu: another thread may end the call (and free its
     * running part) while the front op runs */
    char tool[128];
    snprintf(tool, sizeof tool, "%s",
             c->x && c->x->tname[0] ? c->x->tname : c->tool->name);
    uint64_t id = c->base.pub.call_id;
    pthread_mutex_lock(&s->mu);
    bool go = !s->closing;
    if (go)
        s->ops_inflight++;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&c->mu);
    if (!go)
        return;
    s->ops.log_call(s->front_ud, id, tool, level, line);
    pthread_mutex_lock(&s->mu);
    s->ops_inflight--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ---- ABI 1.4: blocks and asks ------------------------------------------------ */

static int cb_write_block(toolhost_call *call, const toolhost_block *block)
{
    th_mcall *c = (th_mcall *)call;
    if (cancelled(c))
        return TOOLHOST_ECANCELLED;
    pthread_mutex_lock(&c->mu);
    if (c->ended || !c->x) {
        misuse_locked(c, "write_block() after the call ended");
        pthread_mutex_unlock(&c->mu);
        return TOOLHOST_ESTATE;
    }
    th_mcall_x *x = c->x;
    if (!x->blocks) {
        if (!(x->blocks = malloc(sizeof *x->blocks))) {
            pthread_mutex_unlock(&c->mu);
            return TOOLHOST_ENOMEM;
        }
        /* the blocks together hold what stdout may (0: no limit, the
         * sink's own 16 MiB) */
        th_content_init(x->blocks, TH_CONTENT_RESULT, x->out.limit);
        x->blocks->plugin = x->tname;
    }
    x->blocks->bad = false; /* one refused block does not fail the call */
    int rc = th_content_add(x->blocks, block);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* One ask_client() in flight: its waiter, found by id by the answer. */
typedef struct ask_wait {
    uint64_t id;
    bool done;
    int rc;
    char *json;
    size_t len;
    pthread_cond_t cv;
    struct ask_wait *next;
} ask_wait;

static pthread_mutex_t g_ask_mu = PTHREAD_MUTEX_INITIALIZER;
static ask_wait *g_asks;
static uint64_t g_ask_next;

/* The answers a call handed out stay until it is freed (plugin.h). */
typedef struct th_ask_answer {
    struct th_ask_answer *next;
    char json[];
} th_ask_answer;

void th_call_answers_free(th_mcall_x *x)
{
    while (x->answers) {
        th_ask_answer *a = x->answers;
        x->answers = a->next;
        free(a);
    }
    if (x->blocks) {
        th_content_free(x->blocks);
        free(x->blocks);
        x->blocks = NULL;
    }
}

void th_call_client_answer(uint64_t ask_id, int rc, const char *json,
                           size_t len)
{
    char *copy = NULL;
    if (json && (copy = malloc(len + 1))) {
        memcpy(copy, json, len);
        copy[len] = '\0';
    }
    pthread_mutex_lock(&g_ask_mu);
    ask_wait *w = g_asks;
    while (w && w->id != ask_id)
        w = w->next;
    if (w && !w->done) {
        w->done = true;
        w->rc = copy || !json ? rc : TOOLHOST_ENOMEM;
        w->json = copy;
        w->len = copy ? len : 0;
        copy = NULL;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&g_ask_mu);
    free(copy); /* nobody waits for it any more */
}

/* cb_ask_client: a short call on a front's own thread (it, or the inline
 * ancestor it runs under): that thread is the one the answer would come
 * in on (the stdio reader, the RPC loop), so it may not wait for it. */
static bool ask_on_front(th_mcall *c)
{
    for (th_mcall *k = c; k;
         k = __atomic_load_n(&k->inline_run, __ATOMIC_RELAXED)
                 ? __atomic_load_n(&k->parent, __ATOMIC_RELAXED)
                 : NULL)
        if (__atomic_load_n(&k->on_front, __ATOMIC_RELAXED)) {
            th_log_warn("tool=%s call=%llu: ask_client() refused: a short "
                        "tool (TOOLHOST_TOOL_SHORT) runs on the front's own "
                        "thread and cannot wait for its client; do not "
                        "declare a tool that asks short",
                        c->x ? c->x->tname : "?",
                        (unsigned long long)c->base.pub.call_id);
            return true;
        }
    return false;
}

/* cb_ask_client: one more ask counted; true when the call made its
 * host.max_client_asks already (each answer is kept until the call ends:
 * a bounded number). */
static bool ask_over(th_mcall *c)
{
    pthread_mutex_lock(&c->mu);
    uint32_t max = c->cfg ? c->cfg->host.max_client_asks : 32;
    bool over = c->x && c->x->n_asks >= max;
    bool first_over = over && c->x->n_asks == max; /* logged once */
    if (c->x && c->x->n_asks <= max)
        c->x->n_asks++;
    pthread_mutex_unlock(&c->mu);
    if (first_over)
        th_log_warn("tool=%s call=%llu: ask_client() refused: the call "
                    "made its %u asks (host.max_client_asks; later ones "
                    "are refused without a line)",
                    c->x->tname, (unsigned long long)c->base.pub.call_id,
                    max);
    return over;
}

/* cb_ask_client: the question sent through the session's front (w
 * listed in g_asks, taken out here), then the wait until it is answered
 * or the call cancelled.  The front's result (0: sent). */
static int ask_send_wait(th_mcall *c, th_session *s, ask_wait *w, int kind,
                         const char *request, size_t len)
{
    pthread_cond_init(&w->cv, NULL);
    pthread_mutex_lock(&g_ask_mu);
    w->id = ++g_ask_next;
    w->next = g_asks;
    g_asks = w;
    pthread_mutex_unlock(&g_ask_mu);
    /* the front op, as log_call's: not once the session is closing */
    pthread_mutex_lock(&s->mu);
    bool go = !s->closing;
    if (go)
        s->ops_inflight++;
    pthread_mutex_unlock(&s->mu);
    int sent = go ? s->ops.ask_client(s->front_ud, c->base.pub.call_id, w->id,
                                      kind, request, len)
                  : -1;
    if (go) {
        pthread_mutex_lock(&s->mu);
        s->ops_inflight--;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    /* until answered or cancelled (the deadline's timer cancels the call
     * as timed out); cancellation is looked at every 50 ms (it sets a
     * flag and wakes no one) */
    pthread_mutex_lock(&g_ask_mu);
    while (sent == 0 && !w->done && !cancelled(c)) {
        int64_t step = 50000000;
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += step;
        t.tv_sec += t.tv_nsec / 1000000000;
        t.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&w->cv, &g_ask_mu, &t);
    }
    for (ask_wait **p = &g_asks; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    pthread_mutex_unlock(&g_ask_mu);
    pthread_cond_destroy(&w->cv);
    return sent;
}

/* cb_ask_client: the answer's text (w->json, taken) kept with the call
 * until it ends, where *answer points. */
static int ask_keep(th_mcall *c, ask_wait *w, const char **answer,
                    size_t *answer_len)
{
    th_ask_answer *a = malloc(sizeof *a + w->len + 1);
    if (!a) {
        free(w->json);
        return TOOLHOST_ENOMEM;
    }
    memcpy(a->json, w->json, w->len + 1);
    free(w->json);
    pthread_mutex_lock(&c->mu);
    if (c->ended || !c->x) {
        pthread_mutex_unlock(&c->mu);
        free(a);
        return TOOLHOST_ESTATE;
    }
    a->next = c->x->answers;
    c->x->answers = a;
    pthread_mutex_unlock(&c->mu);
    *answer = a->json;
    *answer_len = w->len;
    return w->rc;
}

static int cb_ask_client(toolhost_call *call, int kind, const char *request,
                         size_t len, const char **answer, size_t *answer_len)
{
    th_mcall *c = (th_mcall *)call;
    if ((kind != TOOLHOST_ASK_SAMPLING && kind != TOOLHOST_ASK_FORM) ||
        !request || !answer || !answer_len)
        return TOOLHOST_EINVAL;
    json_t *j = json_loadb(request, len, 0, NULL);
    bool obj = json_is_object(j);
    json_decref(j);
    if (!obj)
        return TOOLHOST_EINVAL;
    if (stale(c, "ask_client"))
        return TOOLHOST_ESTATE;
    th_session *s = c->s;
    if (!s || !s->ops.ask_client)
        return TOOLHOST_ENOTSUP;
    if (cancelled(c))
        return TOOLHOST_ECANCELLED;
    if (ask_on_front(c) || ask_over(c))
        return TOOLHOST_ESTATE;
    /* The wait lasts as long as the client takes (a person filling a
     * form: minutes): a worker waiting for it is lent and a replacement
     * serves meanwhile, else a few callers that never answer would hold
     * every worker of the host, every session's calls queued behind. */
    if (th_mgr_lend(c->h) != 0) {
        th_log_warn("tool=%s call=%llu: ask_client() refused: every "
                    "spare worker slot (host.max_lost_workers) is taken "
                    "by calls waiting for their clients or lost workers",
                    c->x ? c->x->tname : "?",
                    (unsigned long long)c->base.pub.call_id);
        return TOOLHOST_ESTATE;
    }
    ask_wait w = {.rc = TOOLHOST_ECANCELLED};
    if (ask_send_wait(c, s, &w, kind, request, len) != 0)
        return TOOLHOST_ENOTSUP;
    if (!w.done)
        return TOOLHOST_ECANCELLED;
    if (!w.json)
        return w.rc == 0 ? TOOLHOST_ENOMEM : w.rc;
    return ask_keep(c, &w, answer, answer_len);
}

const th_call_vtbl th_mcall_vtbl = {
    .write = cb_write,
    .set_meta = cb_set_meta,
    .progress = cb_progress,
    .is_cancelled = cb_is_cancelled,
    .time_left_ms = cb_time_left_ms,
    .suspend = cb_suspend,
    .complete = cb_complete,
    .caller = cb_caller,
    .on_cancel = cb_on_cancel,
    .cancel_fd = cb_cancel_fd,
    .log = cb_log,
    .write_block = cb_write_block,
    .ask_client = cb_ask_client,
    .set_retry_after = cb_set_retry_after,
};

