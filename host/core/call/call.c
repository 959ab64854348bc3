/* call.c - a call's life once it exists: references, answers and event
 * delivery, the end of execution, running it, cancel.  The stages that
 * start a call are in call_start.c, the host callbacks a tool uses in
 * call_cb.c, th_call_sync in call_sync.c, progress coalescing in
 * progress.c.  See docs/manager.md for the picture; th/manager.h for the
 * lock order. */
#include <errno.h>
#include <unistd.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call_int.h"
#include "th/mpwalk.h"
#include "th/content.h"
#include "th/utf8.h"
#include "th/log.h"
#include "manager.h"
#include "rate.h"
#include "th/perm.h"

static _Thread_local th_mcall *tl_cur;      /* the call this thread executes */


th_mcall *th_mcall_current(void)
{
    return tl_cur;
}

/* ---- References ---------------------------------------------------------- */

void th_mcall_ref(th_mcall *c)
{
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

/* Drops a reference the caller knows is not the last (under c->mu). */
static void ref_drop_nonlast(th_mcall *c)
{
    atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel);
}

/* ---- Call records: a per-thread pool ------------------------------------ */

/* The records of calls that may run inline (th_mcall with the room for
 * its th_mcall_x: ~1.3 KiB, above what malloc's own per-thread cache
 * keeps) are reused: a thread keeps up to TH_CALL_POOL freed ones and the
 * next call it records takes one (call_rec_new), instead of a calloc and
 * a free per call.  Smaller blocks (output buffers, the result) already
 * come from malloc's per-thread cache.  A thread's pool is freed when the
 * thread exits (the key's destructor) and, for the thread that closes a
 * host, at th_host_close (th_call_tombs_destroy).
 *
 * A record is often freed on another thread than the one that made it (a
 * front's loop records the call, a plugin's reader thread ends it and
 * drops the last reference): the freeing thread's pool fills while the
 * recording thread's stays empty.  So a full pool hands half its blocks
 * to the process's depot (g_depot, at most TH_CALL_DEPOT blocks, one
 * mutex: a leaf) and an empty one takes up to half a pool from there,
 * each in one turn of the depot's lock for TH_CALL_POOL / 2 calls.  The
 * depot is emptied when a host closes (th_call_tombs_destroy); blocks
 * another host's threads give it later wait for that host's close. */
#define TH_CALL_POOL 8
#define TH_CALL_DEPOT 64
#define CALL_REC_FULL (sizeof(th_mcall) + sizeof(th_mcall_x))

typedef struct call_pool {
    void *blk[TH_CALL_POOL];
    int n;
} call_pool;

static _Thread_local call_pool tl_pool;
static _Thread_local bool tl_pool_keyed;    /* pool_key set for this thread */
static pthread_key_t pool_key;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static bool pool_key_ok;

static struct {
    pthread_mutex_t mu; /* leaf: no other lock is taken under it */
    void *blk[TH_CALL_DEPOT];
    int n;
} g_depot = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* A pooled block keeps its mutex and its x's condition variable set up
 * (an unlocked mutex and a condition variable nobody waits on, reused as
 * they are): they are initialized once when the block is allocated and
 * destroyed when it leaves the pool for free(). */
static void rec_release(th_mcall *c)
{
    if (c->x_room)
        pthread_cond_destroy(&((th_mcall_x *)(c + 1))->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static void pool_drain(call_pool *p)
{
    while (p->n > 0)
        rec_release(p->blk[--p->n]);
}

/* An empty pool takes up to half a pool of blocks from the depot. */
static void pool_refill(call_pool *p)
{
    pthread_mutex_lock(&g_depot.mu);
    while (g_depot.n > 0 && p->n < TH_CALL_POOL / 2)
        p->blk[p->n++] = g_depot.blk[--g_depot.n];
    pthread_mutex_unlock(&g_depot.mu);
}

/* A full pool gives half its blocks to the depot, as many as it has room
 * for; false when it had none (the pool is still full). */
static bool pool_spill(call_pool *p)
{
    int moved = 0;
    pthread_mutex_lock(&g_depot.mu);
    while (g_depot.n < TH_CALL_DEPOT && moved < TH_CALL_POOL / 2) {
        g_depot.blk[g_depot.n++] = p->blk[--p->n];
        moved++;
    }
    pthread_mutex_unlock(&g_depot.mu);
    return moved > 0;
}

static void depot_drain(void)
{
    pthread_mutex_lock(&g_depot.mu);
    while (g_depot.n > 0)
        rec_release(g_depot.blk[--g_depot.n]);
    pthread_mutex_unlock(&g_depot.mu);
}

static void pool_exit(void *v)
{
    pool_drain(v);
    tl_pool_keyed = false; /* a block freed after this sets it again */
}

static void pool_key_make(void)
{
    pool_key_ok = pthread_key_create(&pool_key, pool_exit) == 0;
}

/* Whether this thread's pool is freed when the thread exits (the key's
 * value stays set while the thread lives: set once a thread). */
static bool pool_keyed(void)
{
    if (tl_pool_keyed)
        return true;
    pthread_once(&pool_once, pool_key_make);
    if (!pool_key_ok || pthread_setspecific(pool_key, &tl_pool) != 0)
        return false;
    tl_pool_keyed = true;
    return true;
}

/* Zeroes [from, to) of an object: what lies around a kept member. */
static void zero_span(void *base, size_t from, size_t to)
{
    memset((char *)base + from, 0, to - from);
}

th_mcall *th_call_rec_new(bool room)
{
    th_mcall *c;
    th_mcall_x *x;
    if (room && tl_pool.n == 0 && pool_keyed())
        pool_refill(&tl_pool); /* (kept: the thread's exit frees them) */
    if (room && tl_pool.n > 0) {
        /* Everything zeroed but the kept mutex and condition variable
         * and what no code reads before the call writes it whole (so a
         * used block reads as a fresh one to all code; test:
         * manager:rec_reuse_zeroed): the output streams (th_out_init in
         * x_open; read only once c->x_ready or c->ran says so), the
         * final result (written whole by the answer; destroyed only once
         * c->answered) and the tool's name past its first byte (set in
         * x_open; an empty one is not read).  ~430 of 1.1 KiB. */
        c = tl_pool.blk[--tl_pool.n];
        x = (th_mcall_x *)(c + 1);
        zero_span(c, 0, offsetof(th_mcall, mu));
        zero_span(c, offsetof(th_mcall, mu) + sizeof c->mu, sizeof *c);
        zero_span(x, offsetof(th_mcall_x, meta), offsetof(th_mcall_x, tname));
        x->tname[0] = '\0';
        zero_span(x, offsetof(th_mcall_x, cv) + sizeof x->cv,
                  offsetof(th_mcall_x, final));
        zero_span(x, offsetof(th_mcall_x, final) + sizeof x->final, sizeof *x);
    } else {
        c = calloc(1, room ? CALL_REC_FULL : sizeof(th_mcall));
        if (!c)
            return NULL;
        pthread_mutex_init(&c->mu, NULL);
        x = (th_mcall_x *)(c + 1);
        if (room)
            pthread_cond_init(&x->cv, NULL);
    }
    if (room) {
        c->x_room = true;
        c->x = x;
        x->cancel_efd = -1;
        x->last_frac = -1;
    }
    return c;
}

void th_call_x_init(th_mcall_x *x)
{
    pthread_cond_init(&x->cv, NULL);
    x->cancel_efd = -1;
    x->last_frac = -1;
}

/* A call's x made on the heap (a call without the room): NULL when out
 * of memory. */
static th_mcall_x *x_new(void)
{
    th_mcall_x *x = calloc(1, sizeof *x);
    if (x)
        th_call_x_init(x);
    return x;
}

/* An x from x_new() that lost the race to be the call's. */
static void x_free_unused(th_mcall_x *x)
{
    pthread_cond_destroy(&x->cv);
    free(x);
}

void th_call_wait_locked(th_mcall *c)
{
    if (c->x) {
        c->waiters++;
        pthread_cond_wait(&c->x->cv, &c->mu);
        c->waiters--;
        return;
    }
    /* No x (and so no condition variable) yet: only after an answer that
     * found no memory for one; poll. */
    pthread_mutex_unlock(&c->mu);
    usleep(200);
    pthread_mutex_lock(&c->mu);
}

void th_call_wake_locked(th_mcall *c)
{
    if (c->x && c->waiters)
        pthread_cond_broadcast(&c->x->cv);
}

void th_call_rec_free(th_mcall *c)
{
    if (!c->x_room || !pool_keyed() ||
        (tl_pool.n >= TH_CALL_POOL && !pool_spill(&tl_pool))) {
        if (c->x && !c->x_room) {
            pthread_cond_destroy(&c->x->cv);
            free(c->x);
        }
        rec_release(c);
        return;
    }
    tl_pool.blk[tl_pool.n++] = c; /* mu and x->cv stay set up */
}

/* `c` joins the quarantine, without a lock: the slot after the last
 * one taken gets c, and what it held (the tombstone TH_CALL_TOMBS pushes
 * older, or NULL) is returned for the caller to destroy.  The exchange
 * (acq_rel) hands the record's memory from thread to thread. */
static th_mcall *tomb_push(th_host *h, th_mcall *c)
{
    size_t i = atomic_fetch_add_explicit(&h->tomb_at, 1, memory_order_relaxed) %
               TH_CALL_TOMBS;
    return atomic_exchange_explicit(&h->tomb_ring[i], c, memory_order_acq_rel);
}

void th_call_tombs_destroy(th_host *h)
{
    for (size_t i = 0; i < TH_CALL_TOMBS; i++) {
        th_mcall *c = atomic_exchange_explicit(&h->tomb_ring[i], NULL,
                                               memory_order_acq_rel);
        if (c)
            th_call_rec_free(c);
    }
    atomic_store(&h->tomb_at, 0);
    pool_drain(&tl_pool); /* this thread's pool goes with the host */
    depot_drain();        /* and the process's spare blocks */
    th_out_spare_drop();  /* and its spare output buffer */
}

static void call_free(th_mcall *c)
{
    th_host *h = c->h;
    /* A handle plugin code saw may be used again by a misbehaving plugin
     * thread: keep its memory as a tombstone (see th_mcall.tomb). */
    bool tomb = c->ran && !c->mock;
    if (tomb) {
        /* x->tname was set before execute() (x_open), and a call that ran
         * is ended by now (exec_end, under mu; the last reference's
         * release orders that before us): a late callback finds it ended
         * and names the tool from x.  No lock, unless it is not ended. */
        if (!c->ended) {
            pthread_mutex_lock(&c->mu);
            th_mcall_set_ended(c);
            pthread_mutex_unlock(&c->mu);
        }
        c->tomb = true;
    }
    th_mcall_x *x = c->x;
    if (x) {
        if (c->x_ready) { /* streams set up (a zeroed one has spill_fd 0) */
            th_out_destroy(&x->out);
            th_out_destroy(&x->err);
        }
        /* each set by few calls: no free(NULL) calls for the rest */
        if (x->meta || x->set_error_msg || x->caller_user || x->ack_msg ||
            x->last_msg) {
            free(x->meta);
            free(x->set_error_msg);
            free(x->caller_user);
            free(x->ack_msg);
            free(x->last_msg);
        }
        x->meta = NULL;
        x->set_error_msg = x->caller_user = NULL;
        /* only what it owns: a reused block's slot is zeroed by
         * th_call_rec_new, a tombstone's is read by no one */
        if (x->prog.message || x->prog.data)
            th_progress_clear(&x->prog);
        if (x->cancel_efd >= 0)
            close(x->cancel_efd);
        if (x->blocks || x->answers)
            th_call_answers_free(x);
        /* answered: else never written (a reused block's is stale);
         * delivered, it owns nothing any more (the usual case) */
        if (c->answered && (x->final.out.data || x->final.err.data ||
                            x->final.meta.data || x->final.message))
            th_result_copy_destroy(&x->final);
        x->ack_msg = x->last_msg = NULL;
        x->cancel_efd = -1;
    }
    if (!c->args_borrowed && c->args) /* (an inline call's: dropped) */
        free(c->args);
    th_tool_release(c->tool);
    th_config_unref(c->cfg);
    th_session_unref(c->s);
    th_mcall *parent = c->parent;
    if (tomb) {
        /* Only the fields a late callback reads stay meaningful. */
        c->args = NULL;
        c->tool = NULL;
        c->cfg = NULL;
        c->s = NULL;
        /* (read by a callback racing the end without the lock:
         * call_cb.c, cancelled) */
        __atomic_store_n(&c->parent, NULL, __ATOMIC_RELAXED);
        __atomic_store_n(&c->inline_run, false, __ATOMIC_RELAXED);
        th_mcall *old = tomb_push(h, c);
        if (old)
            th_call_rec_free(old);
    } else {
        th_call_rec_free(c);
    }
    if (parent)
        th_mcall_unref(parent);
    /* One call less: the last thing done with h.  While the host is not
     * closing, on this thread's part (a plain release store: the closer's
     * acquire read of it sees all this call did) or the shared word,
     * without a lock; th_host_close() polls the count.  A closing host's
     * count goes down under h->mu, which th_host_close() holds when it
     * reads the count (it cannot free the host before we are done with
     * h->mu), and the closer is woken. */
    if (!__atomic_load_n(&h->closing, __ATOMIC_ACQUIRE)) {
        int t = th_stat_tl_slot;
        if (t > 0) {
            atomic_ulong *lf = &h->mgr.calls_sh[t - 1].lfree;
            atomic_store_explicit(lf, atomic_load_explicit(lf, memory_order_relaxed) + 1,
                                  memory_order_release);
        } else {
            atomic_fetch_sub(&h->live_calls, 1);
        }
        return;
    }
    pthread_mutex_lock(&h->mu);
    atomic_fetch_sub(&h->live_calls, 1);
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

void th_mcall_unref(th_mcall *c)
{
    /* The only reference left (the usual last drop, by the caller of an
     * inline call): no one else holds one, and a reference is only ever
     * taken by a holder of one or from a place that holds one (session
     * map, tasks, heap, a slot its owner empties first; callbacks take
     * none), so the count cannot rise meanwhile: freed without the
     * locked decrement.  The acquire pairs with the other holders'
     * decrements. */
    if (atomic_load_explicit(&c->refs, memory_order_acquire) == 1 ||
        atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
        call_free(c);
}

/* ---- Results -------------------------------------------------------------- */

/* Zeroes a result (112 bytes) in two parts of at most 64: the compiler
 * then stores vectors, where one memset of 112 becomes a `rep stos`
 * (dear to start on this machine, and 26 instructions where this is 8). */
_Static_assert(sizeof(th_result_copy) > 64 && sizeof(th_result_copy) <= 128,
               "zero_result's two parts");
static inline void zero_result(th_result_copy *r)
{
    memset(r, 0, 64);
    memset((char *)r + 64, 0, sizeof *r - 64);
}

static void result_view(const th_result_copy *c, th_result *r)
{
    *r = (th_result){
        .kind = c->kind,
        .ok = c->ok,
        .out = c->out.data,
        .out_len = c->out.len,
        .err = c->err.data,
        .err_len = c->err.len,
        .meta = c->meta.data,
        .meta_len = c->meta.len,
        .error = c->error,
        .message = c->message ? c->message
                              : (c->kind == TH_RESULT_ERROR ? th_strerror(c->error)
                                                            : NULL),
        .task_id = c->task_id,
        .structured = c->structured,
        .retry_after_ms = c->retry_after_ms,
    };
}

/* An error answered before a call object exists (on the caller's thread). */
void th_call_emit_error(th_event_fn fn, void *ud, uint64_t id, int code,
                       const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    th_result r = {.kind = TH_RESULT_ERROR, .error = code, .message = msg};
    th_event ev = {.kind = TH_EV_RESULT, .call_id = id, .result = &r};
    fn(&ev, ud);
}

/* ---- Delivery --------------------------------------------------------------- */

/* A call counted in its session's finals_owed (th_mcall.final_owed) has
 * had its last callback: th_session_close may return (lock order: the
 * call's mu, when held, before s->mu). */
static void owed_paid(th_session *s)
{
    pthread_mutex_lock(&s->mu);
    s->finals_owed--;
    if (s->closing)
        pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* deliver(), with c->mu held: the acknowledgement's event (RUNNING) in
 * ev and r; returns its message, which the caller frees after the
 * callback. */
static char *ack_event(th_mcall *c, th_mcall_x *x, th_event *ev, th_result *r)
{
    memset(r, 0, sizeof *r);
    c->pend_ack = false;
    char *msg = x->ack_msg;
    x->ack_msg = NULL;
    r->kind = TH_RESULT_RUNNING;
    r->message = msg ? msg : "task started";
    r->task_id = c->base.pub.call_id;
    r->ack_has_fraction = x->ack_frac >= 0;
    r->ack_fraction = x->ack_frac;
    ev->kind = TH_EV_RESULT;
    ev->task_id = r->task_id;
    ev->result = r;
    return msg;
}

/* deliver(), with c->mu held: the final event in ev and r; *owed: counted
 * in the session's finals_owed.  Returns x->final when the result is
 * viewed there (its buffers freed after the callback), else NULL. */
static th_result_copy *final_event(th_mcall *c, th_mcall_x *x, th_event *ev,
                                   th_result *r, bool *owed)
{
    th_result_copy *fin = NULL;
    c->pend_final = false;
    *owed = c->final_owed;
    c->final_owed = false;
    if (x) {
        /* Viewed in place: x->final is written once, by the
         * answer (answer_locked, before pend_final was set), and
         * read after that only by this deliverer (at most one at
         * a time, and pend_final is taken once) and by call_free
         * after the last reference, which this thread's caller
         * holds: no copy, and its buffers are freed below
         * without the lock. */
        fin = &x->final;
        result_view(fin, r); /* sets every member of r */
    } else {
        /* answered without memory for its x: the error alone */
        memset(r, 0, sizeof *r);
        r->kind = TH_RESULT_ERROR;
        r->error = c->fin_oom;
        r->message = th_strerror(c->fin_oom);
    }
    ev->kind = c->acked ? TH_EV_DONE : TH_EV_RESULT;
    ev->task_id = c->acked ? c->base.pub.call_id : 0;
    ev->result = r;
    return fin;
}

/* deliver(), without the lock, once an event's callback returned: what
 * the event held (pu: a progress update taken, or NULL). */
static void delivered_free(char *msg, th_progress_update *pu,
                           th_result_copy *fin)
{
    if (msg)
        free(msg);
    if (pu)
        th_progress_update_destroy(pu);
    if (fin) {
        th_out_spare_put(&fin->out); /* the next call's output block */
        if (fin->out.data || fin->err.data || fin->meta.data || fin->message)
            th_result_copy_destroy(fin); /* (usually nothing left) */
    }
}

/* With c->mu held: delivers every pending slot (ack, then progress, then
 * the final result) unless another thread is delivering, in which case that
 * thread will pick them up.  Callbacks run with mu released; returns with
 * mu held.  At most one thread delivers a call's events at a time, so they
 * arrive in order and never concurrently. */
/* `own`: the owner's end of an inline run in its call slot (exec_end
 * from th_mcall_run, c->cslot set).  Then, once the final answer's
 * callback returned, the owner empties its slot (which it would do next
 * anyway, th_call_start) instead of taking mu again: when no reader
 * visited the slot (th_mgr_cslot_clear: false) and, as read under mu
 * before the callback, no progress is queued for the notifier, the call
 * is no task (never in the session's map or the host's tasks) and no
 * thread waits on it, then no other thread holds the call but the
 * deadline thread (which never reads `delivering`) and a plugin's own
 * threads (a late callback, which finds it ended): no one can wait for
 * this delivery, nor deliver, nor ever find the call from now on.  The
 * delivery then ends without the lock and returns false (mu released).
 * True: mu held, as th_call_deliver_locked. */
static bool deliver(th_mcall *c, bool own)
{
    if (c->delivering)
        return true;
    c->delivering = true;
    c->deliverer = pthread_self();
    for (;;) {
        th_mcall_x *x = c->x;
        /* nothing pending (the usual second turn, after the final): out
         * before the event is set up */
        if (!c->pend_ack && !c->pend_final && !(x && x->prog.pending))
            break;
        th_event ev;
        th_result r;
        memset(&ev, 0, sizeof ev);
        char *msg = NULL;
        th_progress_update pu; /* zeroed by th_progress_take */
        bool have_pu = false;
        th_result_copy *fin = NULL; /* x->final, delivered where it lies */
        bool owed = false; /* counted in the session's finals_owed */
        ev.call_id = c->base.pub.call_id;
        if (c->pend_ack) { /* set by a running call: x exists */
            msg = ack_event(c, x, &ev, &r);
        } else if (x && x->prog.pending && th_progress_take(&x->prog, &pu)) {
            have_pu = true;
            th_progress_event(&pu, c->base.pub.call_id, &ev);
        } else if (c->pend_final) {
            fin = final_event(c, x, &ev, &r, &owed);
        } else {
            break;
        }
        th_event_fn fn = c->fn;
        void *ud = c->ud;
        /* the final is the last event: nothing can be pending after it */
        bool solo = own && fin && !c->notify_queued && !c->acked &&
                    c->waiters == 0;
        pthread_mutex_unlock(&c->mu);
        if (fn)
            fn(&ev, ud);
        if (owed)
            owed_paid(c->s); /* the session's last callback for it returned */
        delivered_free(msg, have_pu ? &pu : NULL, fin);
        if (own && fin) {
            /* answered and delivered: out of the call slot now (see
             * above); seen there, the delivery ends under mu.  Armed
             * from the slot: out of the heap (answered). */
            own = false;
            unsigned sl = th_mgr_cslot_clear(c->h, c);
            if (sl & TH_CSLOT_ARMED)
                th_mgr_disarm(c->h, c);
            if (!(sl & TH_CSLOT_SEEN) && solo) {
                c->delivering = false; /* read by no other thread now */
                return false;
            }
        }
        pthread_mutex_lock(&c->mu);
    }
    if (c->final_owed && c->answered && !c->pend_final) {
        /* owed when its call slot was emptied (th_call_slot_leave_locked)
         * while this loop delivered the final: its callback has
         * returned by now */
        c->final_owed = false;
        owed_paid(c->s);
    }
    c->delivering = false;
    th_call_wake_locked(c);
    return true;
}

void th_call_deliver_locked(th_mcall *c)
{
    (void)deliver(c, false);
}

/* The notifier thread's work for one call (manager.c). */
void th_mcall_notified(th_mcall *c)
{
    pthread_mutex_lock(&c->mu);
    c->notify_queued = false;
    th_call_deliver_locked(c);
    pthread_mutex_unlock(&c->mu);
    th_mcall_unref(c);
}

/* With c->mu held, by the owner of an inline call about to empty its call
 * slot (th_call_start) unless the final delivery's end emptied it.  The
 * slot is the last place th_session_close() looks for a call that is not
 * in the session's map; a call that leaves it before its final callback
 * returned - answered by another thread (a cancel by id, the deadline
 * thread) that is still delivering, or not answered yet because the
 * answer of such an aborter is on its way (abort_code set) - is counted
 * in s->finals_owed until that callback has returned (deliver), so that
 * a close that no longer finds it still waits for it: no callback of the
 * session after th_session_close() returns. */
void th_call_slot_leave_locked(th_mcall *c)
{
    if (!c->fn || c->in_session || c->final_owed)
        return; /* no callback, or the map's (answer_locked) */
    if (c->answered && !c->pend_final && !c->delivering)
        return; /* delivered: the callback has returned */
    c->final_owed = true;
    th_session *s = c->s;
    pthread_mutex_lock(&s->mu);
    s->finals_owed++;
    pthread_mutex_unlock(&s->mu);
}

/* Stops event delivery to the front; waits for a callback in progress on
 * another thread to return. */
void th_mcall_detach(th_mcall *c)
{
    pthread_mutex_lock(&c->mu);
    c->fn = NULL;
    while (c->delivering && !pthread_equal(c->deliverer, pthread_self()))
        th_call_wait_locked(c);
    pthread_mutex_unlock(&c->mu);
}

/* ---- Answers ------------------------------------------------------------------ */

/* With c->mu held and the caller holding a reference: makes *res the final
 * answer and takes the call out of every table.  Returns true when the
 * session's tool list changed (the caller calls tools_changed unlocked). */
/* With s->mu held: the call's execution is over (exec_counted).  Only
 * th_session_close waits for exec_live, after setting `closing` under
 * s->mu: no one to wake before that. */
static void exec_over_locked(th_mcall *c, th_session *s)
{
    c->exec_counted = false;
    s->exec_live--;
    if (s->closing)
        pthread_cond_broadcast(&s->cv);
}

int th_call_session_put_locked(th_mcall *c)
{
    th_session *s = c->s;
    if (c->in_session || c->answered)
        return 0;
    if (s->closing)
        return TH_ESTATE;
    if (th_u64map_put_node(&s->calls, &c->snode, c->base.pub.call_id, c) != 0)
        return TH_ENOMEM;
    th_mcall_ref(c);
    c->in_session = true;
    c->exec_counted = true;
    s->exec_live++;
    return 0;
}

int th_call_session_enter_locked(th_mcall *c)
{
    if (c->in_session || c->answered)
        return 0;
    pthread_mutex_lock(&c->s->mu);
    int rc = th_call_session_put_locked(c);
    if (rc == TH_ESTATE && !c->exec_counted) {
        /* closing: not in the map (the close looked there already), but
         * its execution counts, so that the close waits for it (a
         * suspended call's complete(), within session_grace) as for the
         * map's once it has left its call slot; its end (exec_end) takes
         * the count back */
        c->exec_counted = true;
        c->s->exec_live++;
    }
    pthread_mutex_unlock(&c->s->mu);
    return rc;
}

/* `exec_over`: the answer is the end of the call's execution as well
 * (th_mcall_exec_end): both in one turn of the session's lock.  `res`
 * may be c->x->final itself (exec_end built it there, under c->mu since
 * it found the call unanswered): then it is kept where it is. */
static bool answer_locked(th_mcall *c, th_result_copy *res, bool exec_over)
{
    th_host *h = c->h;
    th_session *s = c->s;
    bool changed = false;
    c->answered = true;
    /* Not started yet: it never will be (th_mcall_run's start). */
    uint8_t ph = atomic_load_explicit(&c->phase, memory_order_relaxed);
    while ((ph == TH_PH_NEW || ph == TH_PH_QUEUED) &&
           !atomic_compare_exchange_weak_explicit(&c->phase, &ph, TH_PH_NOT_RUN,
                                                  memory_order_acq_rel,
                                                  memory_order_relaxed))
        ; /* (fails only spuriously, or for RUNNING: the start came first) */
    if (!c->x)
        c->x = x_new(); /* answered before it ran (queued, then cancelled) */
    if (c->x) {
        if (res != &c->x->final) {
            c->x->final = *res;
            zero_result(res);
        }
        c->x->final.task_id = c->acked ? c->base.pub.call_id : 0;
    } else {
        c->fin_oom = res->kind == TH_RESULT_ERROR && res->error ? res->error
                                                                : TH_ENOMEM;
    }
    c->pend_final = true;

    th_dup_remove(c);
    if (!c->no_heap)
        th_mgr_disarm(h, c);
    /* (a call in a call slot that never entered the map has nothing
     * here: not even the lock) */
    if ((exec_over && c->exec_counted) || c->in_session || c->live_counted) {
        pthread_mutex_lock(&s->mu);
        if (exec_over && c->exec_counted)
            exec_over_locked(c, s);
        if (c->in_session) {
            th_u64map_del_node(&s->calls, &c->snode);
            c->in_session = false;
            ref_drop_nonlast(c);
            /* Out of the map th_session_close() detaches from, with its
             * final event still to come (maybe on the notifier thread,
             * right now delivering a progress event): the close waits
             * for that callback instead. */
            if (c->fn && !c->final_owed) {
                c->final_owed = true;
                s->finals_owed++;
            }
        }
        if (c->live_counted) {
            c->live_counted = false;
            s->live_tasks--;
            changed = s->live_tasks == 0 && !c->cfg->host.expose_task_tools;
        }
        pthread_mutex_unlock(&s->mu);
    }
    if (c->in_tasks || (c->acked && c->scope == TH_SCOPE_TOOLSET)) {
        /* One step: a reader sees the task live or its result kept. */
        pthread_mutex_lock(&h->tmu);
        if (c->in_tasks)
            th_u64map_del(&h->tasks, c->base.pub.call_id);
        if (c->acked && c->scope == TH_SCOPE_TOOLSET) /* acked: x exists */
            th_tasks_keep_locked(h, c->base.pub.call_id, c->ts_idx, &c->x->final);
        pthread_mutex_unlock(&h->tmu);
        if (c->in_tasks) {
            c->in_tasks = false;
            ref_drop_nonlast(c);
        }
    }
    th_stat_call_end(c); /* stats.c: per tool, toolset and front */
    if (h->audit)
        th_audit_call_end(c); /* audit.c: the call's line */
    return changed;
}

static void count_error(th_stat *st, int code)
{
    if (!st)
        return;
    atomic_fetch_add(TH_STAT_ERR_COUNTER(st, code), 1); /* manager.h */
}

/* Answers with a tool error unless already answered.  No lock held. */
bool th_call_answer_error(th_mcall *c, int code, const char *msg)
{
    return th_call_answer_error_retry(c, code, msg, 0);
}

bool th_call_answer_error_retry(th_mcall *c, int code, const char *msg,
                                uint64_t retry_after_ms)
{
    th_result_copy res;
    zero_result(&res);
    res.kind = TH_RESULT_ERROR;
    res.error = code;
    res.retry_after_ms = retry_after_ms;
    res.message = strdup(msg); /* NULL: the default message is shown */
    pthread_mutex_lock(&c->mu);
    if (c->answered) {
        pthread_mutex_unlock(&c->mu);
        th_result_copy_destroy(&res);
        return false;
    }
    count_error(c->st, code);
    bool changed = answer_locked(c, &res, false);
    th_call_deliver_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (changed)
        th_session_task_tools_changed(c->s);
    return true;
}

/* A call waiting for permission that got answered meanwhile: the one who
 * moves it out of PERM_WAIT owns its execution reference. */
void th_call_perm_settle(th_mcall *c)
{
    pthread_mutex_lock(&c->mu);
    bool mine = c->phase == TH_PH_PERM_WAIT && c->answered;
    if (mine)
        c->phase = TH_PH_NEW;
    pthread_mutex_unlock(&c->mu);
    if (mine) {
        th_mgr_disarm(c->h, c);
        th_mcall_exec_end(c, TOOLHOST_FAILED, false);
        th_mcall_unref(c);
    }
}

bool th_mcall_abort(th_mcall *c, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (code == TH_ECANCELLED || code == TH_ETIMEOUT) {
        int zero = 0;
        atomic_compare_exchange_strong(&c->abort_code, &zero, code);
        th_call_cancel_hooks_fire(c);
    }
    bool won = th_call_answer_error(c, code, msg);
    th_call_perm_settle(c);
    if (atomic_load(&c->abort_code) != 0)
        th_mgr_unqueue(c); /* waiting in a queue: its place back now */
    return won;
}

void th_mcall_never_run(th_mcall *c, int code, const char *msg)
{
    th_mcall_never_run_retry(c, code, msg, 0);
}

void th_mcall_never_run_retry(th_mcall *c, int code, const char *msg,
                              uint64_t retry_after_ms)
{
    th_call_answer_error_retry(c, code, msg, retry_after_ms);
    th_mcall_exec_end(c, TOOLHOST_FAILED, false);
    th_mcall_unref(c);
}

void th_mcall_set_error(toolhost_call *call, int code, const char *msg)
{
    th_mcall *c = (th_mcall *)call;
    c->x->set_error = code;
    free(c->x->set_error_msg);
    c->x->set_error_msg = msg ? strdup(msg) : NULL;
}

/* The key at p (n bytes, one whole value) is the string "toolhost"
 * (in any of the str encodings: 9 to 13 bytes). */
static bool is_toolhost_key(const uint8_t *p, size_t n)
{
    th_mp_head h;
    bool str = (p[0] >= 0xa0 && p[0] <= 0xbf) || (p[0] >= 0xd9 && p[0] <= 0xdb);
    return str && n >= 9 && n <= 13 && th_mp_head_read(p, n, &h) == 1 &&
           h.payload == 8 && h.hdr + 8 == n &&
           memcmp(p + h.hdr, "toolhost", 8) == 0;
}

/* The length of the value at p (n bytes): a scalar's from its header, a
 * container's by walking it.  -1 when it does not walk. */
static int mp_value_len(const uint8_t *p, size_t n, size_t *len)
{
    th_mp_head h;
    if (th_mp_head_read(p, n, &h) != 1)
        return -1;
    if (h.container)
        return th_mp_check(p, n, TH_MP_MAX_DEPTH, len, NULL) == 0 ? 0 : -1;
    if (h.payload > n - h.hdr)
        return -1;
    *len = h.hdr + (size_t)h.payload;
    return 0;
}

/* Whether a stream's info goes into meta: it was cut or spilled, or the
 * caller asked for sizes (th_call_opts.output_info). */
static bool info_says(const th_mcall *c, const th_out_info *i)
{
    return c->output_info || i->truncated || i->spill_path;
}

/* The most bytes th_out_pack_info writes for one stream (keys, a map
 * header, five uint64, the strings). */
static size_t info_bound(const th_out_info *i)
{
    return 160 + (i->spill_path ? strlen(i->spill_path) : 0) +
           (i->note ? strlen(i->note) : 0);
}

/* build_meta: the tool's meta map (tm, tm_len: one whole map, checked by
 * set_meta) walked entry by entry, not unpacked: no zone, and the kept
 * entries are copied as the tool wrote them.  first: where the entries
 * start (after the map's header); n: entries; keep: those whose key is
 * not "toolhost".  meta_scan: 0, or -1 when the bytes do not walk. */
typedef struct meta_walk {
    size_t first;
    uint32_t n;
    uint32_t keep;
} meta_walk;

/* The entry at *pos: *keep set, *pos moved past its value. */
static int meta_entry(const uint8_t *tm, size_t tm_len, size_t *pos,
                      bool *keep)
{
    size_t kl = 0, vl = 0;
    if (mp_value_len(tm + *pos, tm_len - *pos, &kl) != 0)
        return -1;
    *keep = !is_toolhost_key(tm + *pos, kl);
    if (mp_value_len(tm + *pos + kl, tm_len - *pos - kl, &vl) != 0)
        return -1;
    *pos += kl + vl;
    return 0;
}

static int meta_scan(const uint8_t *tm, size_t tm_len, meta_walk *w)
{
    th_mp_head h;
    if (th_mp_head_read(tm, tm_len, &h) != 1 || !h.container ||
        (tm[0] > 0x8f && tm[0] < 0xde) || h.kids / 2 > UINT32_MAX)
        return -1;
    w->first = h.hdr;
    w->n = (uint32_t)(h.kids / 2);
    w->keep = 0;
    size_t pos = h.hdr;
    for (uint32_t i = 0; i < w->n; i++) {
        bool keep;
        if (meta_entry(tm, tm_len, &pos, &keep) != 0)
            return -1;
        w->keep += keep;
    }
    return 0;
}

/* build_meta: the kept entries of the tool's map, copied. */
static int copy_tool_meta(th_buf *dst, const uint8_t *tm, size_t tm_len,
                          const meta_walk *w)
{
    size_t pos = w->first;
    if (w->keep == w->n) /* (the usual case: no "toolhost" key) */
        return th_buf_append(dst, tm + pos, tm_len - pos);
    for (uint32_t i = 0; i < w->n; i++) {
        size_t at = pos;
        bool keep;
        if (meta_entry(tm, tm_len, &pos, &keep) != 0)
            return TH_EINVAL;
        if (keep && th_buf_append(dst, tm + at, pos - at) != 0)
            return TH_ENOMEM;
    }
    return 0;
}

/* build_meta: "toolhost": {"output": {...}, "content": [...]}, each part
 * present when there is something to say (so/se: the streams' info, bl:
 * the blocks write_block() added, docs/protocol.md). */
static int pack_toolhost_meta(msgpack_packer *pk, const th_out_info *so,
                              const th_out_info *se, const th_content *bl)
{
    int rc = msgpack_pack_str_with_body(pk, "toolhost", 8);
    if (rc == 0)
        rc = msgpack_pack_map(pk, (so || se) + !!bl);
    if (rc == 0 && (so || se)) {
        rc = msgpack_pack_str_with_body(pk, "output", 6);
        if (rc == 0)
            rc = th_out_pack_info(pk, so, se);
    }
    if (rc == 0 && bl) {
        rc = msgpack_pack_str_with_body(pk, "content", 7);
        if (rc == 0)
            rc = th_content_pack(bl, pk);
    }
    return rc;
}

/* meta = the tool's own map (its "toolhost" key dropped) + "toolhost":
 * {"output": {...}} when a stream was cut or spilled or the caller asked
 * (docs/limits.md); nothing at all when there is nothing to say.  The
 * size is bounded before packing: one reservation, no regrowth. */
static int build_meta(th_mcall *c, const th_out_info *oi, const th_out_info *ei,
                      th_buf *dst)
{
    const th_out_info *so = info_says(c, oi) ? oi : NULL;
    const th_out_info *se = info_says(c, ei) ? ei : NULL;
    const uint8_t *tm = c->x->meta;
    size_t tm_len = c->x->meta_len;
    const th_content *bl = c->x->blocks && c->x->blocks->n ? c->x->blocks
                                                            : NULL;
    if (!tm && !so && !se && !bl)
        return 0; /* the common case: no meta */
    meta_walk w = {0};
    bool m = tm && meta_scan(tm, tm_len, &w) == 0;
    uint32_t keep = m ? w.keep : 0;
    bool say = so || se || bl;
    if (!say && keep == 0)
        return 0; /* a tool map that held only "toolhost" (or no map) */
    size_t bound = (tm ? tm_len : 0) + 64 +
                   (so ? info_bound(so) : 0) + (se ? info_bound(se) : 0) +
                   (bl ? bl->bytes : 0);
    if (th_buf_reserve(dst, bound) != 0)
        return TH_ENOMEM;
    msgpack_packer pk;
    msgpack_packer_init(&pk, dst, th_buf_msgpack_write);
    int rc = msgpack_pack_map(&pk, keep + (say ? 1 : 0));
    if (keep && rc == 0)
        rc = copy_tool_meta(dst, tm, tm_len, &w);
    if (say && rc == 0)
        rc = pack_toolhost_meta(&pk, so, se, bl);
    return rc ? TH_ENOMEM : 0;
}

int th_mcall_backend_status(const th_mcall *c, int status)
{
    if (status != TOOLHOST_UNAVAILABLE && status != TOOLHOST_TIMEOUT &&
        status != TOOLHOST_RATE_LIMITED)
        return 0;
    /* a plugin of an older minor did not mean these (an unknown status) */
    if (!c->tool || !c->tool->plugin || c->tool->plugin->abi_minor < 5)
        return 0;
    return status == TOOLHOST_UNAVAILABLE ? TH_EUNAVAILABLE
           : status == TOOLHOST_TIMEOUT   ? TH_EBACKEND_TIMEOUT
                                          : TH_ERATE_LIMITED;
}

/* The longest message of a backend's error: the head of the tool's
 * stderr (its limit by semantic type applies first). */
#define BACKEND_MSG_MAX 2000

/* A backend's error (ABI 1.5): the tool error `code` whose message is
 * the tool's stderr, one line per line, valid UTF-8 (th_utf8_scrub: bad
 * bytes become '?', other control characters spaces, cut at
 * BACKEND_MSG_MAX bytes), or the
 * code's own words when it wrote none; stdout and meta are dropped. */
static int backend_result(th_mcall *c, int code, th_result_copy *res)
{
    th_mcall_x *x = c->x;
    th_buf err = TH_BUF_INIT;
    th_out_info ei;
    if (th_out_finish(&x->err, &err, &ei) != 0) {
        th_buf_destroy(&err);
        res->kind = TH_RESULT_ERROR;
        res->error = TH_ENOMEM;
        return TH_ENOMEM;
    }
    size_t n = err.len;
    while (n && (err.data[n - 1] == '\n' || err.data[n - 1] == '\r' ||
                 err.data[n - 1] == ' '))
        n--;
    char *m = NULL;
    if (n) {
        size_t cap = n < BACKEND_MSG_MAX ? n : BACKEND_MSG_MAX;
        m = malloc(cap + 1);
        if (m)
            th_utf8_scrub(m, cap, err.data, n, true);
    }
    th_buf_destroy(&err);
    res->kind = TH_RESULT_ERROR;
    res->error = code;
    res->message = m; /* NULL: the code's default message */
    /* (written under mu before the call ended, read after: the end was
     * set under mu, which this thread holds or took since) */
    if (code == TH_EUNAVAILABLE || code == TH_ERATE_LIMITED)
        res->retry_after_ms = x->retry_after_ms;
    return 0;
}

static int build_result(th_mcall *c, int status, th_result_copy *res)
{
    zero_result(res);
    th_mcall_x *x = c->x;
    if (x->set_error) {
        res->kind = TH_RESULT_ERROR;
        res->error = x->set_error;
        res->message = x->set_error_msg;
        x->set_error_msg = NULL;
        return 0;
    }
    int bcode = th_mcall_backend_status(c, status);
    if (bcode)
        return backend_result(c, bcode, res);
    res->kind = TH_RESULT_DONE;
    res->ok = status == TOOLHOST_OK;
    th_out_info oi, ei;
    if (th_out_finish(&x->out, &res->out, &oi) != 0 ||
        th_out_finish(&x->err, &res->err, &ei) != 0 ||
        build_meta(c, &oi, &ei, &res->meta) != 0) {
        th_result_copy_destroy(res);
        res->kind = TH_RESULT_ERROR;
        res->error = TH_ENOMEM;
        return TH_ENOMEM;
    }
    /* ABI 1.1: structured stdout is JSON and matches the tool's
     * output_schema, or the call fails as the tool's error.  Only whole
     * output is checked (a cut JSON text is not JSON). */
    th_error oe;
    if (res->ok && !oi.truncated &&
        th_validate_output(c->tool, res->out.data, res->out.len, &oe) != 0) {
        th_result_copy_destroy(res);
        memset(res, 0, sizeof *res);
        res->kind = TH_RESULT_ERROR;
        res->error = oe.code;
        res->message = strdup(oe.msg);
    }
    res->structured = res->kind == TH_RESULT_DONE && res->ok && res->out.len &&
                      !oi.truncated && c->tool &&
                      c->tool->stdout_type == TOOLHOST_SEM_STRUCTURED;
    return 0;
}

/* `held`: the caller holds c->mu and set c->ended in that turn
 * (th_mcall_run, when execute() returns): the result is built and the
 * call answered in the same turn, c->mu released on return. */
static void exec_end(th_mcall *c, int status, bool ran, bool held, bool own)
{
    /* From here on a callback on the handle is a misuse (call_cb.c): no
     * write may race with building the result. */
    bool rate_held = false; /* (a bit beside others under mu) */
    if (!held) {
        pthread_mutex_lock(&c->mu);
        th_mcall_set_ended(c);
        rate_held = c->rate_held;
        c->rate_held = false;
        pthread_mutex_unlock(&c->mu);
    } else {
        rate_held = c->rate_held;
        c->rate_held = false;
    }
    if (c->has_slots) /* (th_mgr_release's own first test) */
        th_mgr_release(c->h, c); /* held: no group slot to give back (no lock) */
    if (rate_held) /* the rate limits' concurrent-call slots */
        th_rate_release(c->h->rate, c->base.pub.call_id);
    th_result_copy res;
    th_result_copy *rp = &res; /* where the result is built */
    bool have = false;
    if (held) {
        /* ABI 1.1: no cancel hook after this.  Waiting for a running
         * hook may release c->mu: first, so that the call's being
         * unanswered, seen below, holds until its answer in this turn. */
        th_call_cancel_hooks_end_locked(c);
        if (!c->answered)
            rp = &c->x->final; /* built where it is delivered from */
    }
    if (ran && atomic_load(&c->abort_code) == 0) {
        build_result(c, status, rp); /* zeroes *rp first */
        have = true;
    }
    if (rp == &res && !have)
        zero_result(&res);
    bool changed = false;
    if (!held) {
        pthread_mutex_lock(&c->mu);
        th_call_cancel_hooks_end_locked(c); /* ABI 1.1: no cancel hook after this */
    }
    /* (the execution's owner: no start can race this store; mu held) */
    bool was_running = atomic_load_explicit(&c->phase, memory_order_relaxed) ==
                       TH_PH_RUNNING;
    atomic_store_explicit(&c->phase, TH_PH_OVER, memory_order_relaxed);
    bool answering = !c->answered && have;
    if (c->exec_counted && !answering) {
        pthread_mutex_lock(&c->s->mu);
        exec_over_locked(c, c->s);
        pthread_mutex_unlock(&c->s->mu);
    }
    if (answering) {
        if (c->st) {
            if (rp->kind == TH_RESULT_ERROR)
                count_error(c->st, rp->error);
            else
                th_stat_count_done(c->st, rp->ok); /* this thread's shard */
        }
        changed = answer_locked(c, rp, true);
    } else if (ran && c->st) {
        atomic_fetch_add(&c->st->late, 1);
    }
    if (c->args_borrowed) {
        /* the call is over: nothing may point into the caller's buffer,
         * which goes when th_call_start returns */
        c->args = NULL;
        c->args_len = 0;
        c->args_borrowed = false;
        c->base.pub.args_view = NULL; /* validation's, of those bytes */
    }
    /* (the owner's final delivery may end without mu: deliver) */
    if (!answering || deliver(c, own))
        pthread_mutex_unlock(&c->mu);
    if (was_running)
        th_mgr_own_add(&c->h->mgr, run, running, -1);
    if (rp == &res) /* (in x->final it is the call's: delivered, freed) */
        th_result_copy_destroy(&res);
    if (changed)
        th_session_task_tools_changed(c->s);
}

void th_mcall_exec_end(th_mcall *c, int status, bool ran)
{
    exec_end(c, status, ran, false, false);
}

/* ---- Running ------------------------------------------------------------------ */

/* A head-only output (file content, file view, knowledge) of a tool with
 * an integer `offset` parameter starts where the call's `offset` says, so
 * its "read on with offset=N" marker counts from there. */
static void set_read_on_base(th_mcall *c)
{
    uint32_t sem = c->x->out.sem;
    if (sem != TOOLHOST_SEM_FILE_CONTENT && sem != TOOLHOST_SEM_FILE_VIEW &&
        sem != TOOLHOST_SEM_KNOWLEDGE)
        return;
    bool has = false;
    for (size_t i = 0; i < c->tool->n_params && !has; i++)
        has = c->tool->params[i].type == TOOLHOST_TYPE_INTEGER &&
              strcmp(c->tool->params[i].name, "offset") == 0;
    if (!has || !c->args)
        return;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    if (msgpack_unpack_next(&u, (const char *)c->args, c->args_len, NULL) ==
            MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP) {
        const msgpack_object_map *m = &u.data.via.map;
        for (uint32_t i = 0; i < m->size; i++)
            if (m->ptr[i].key.type == MSGPACK_OBJECT_STR &&
                m->ptr[i].key.via.str.size == 6 &&
                memcmp(m->ptr[i].key.via.str.ptr, "offset", 6) == 0 &&
                m->ptr[i].val.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                th_out_set_offset_base(&c->x->out, m->ptr[i].val.via.u64);
    }
    msgpack_unpacked_destroy(&u);
}

/* Makes what a running call needs (th_mcall_x): in the room of the call's
 * own allocation when it has one, else on the heap.  The output streams
 * get their limits from the call's config snapshot: the tool's override
 * in its toolset, else the toolset's, else the host's (th_out_limit).
 * 0 or TH_ENOMEM.  Owner, before execute(). */
static int x_open(th_mcall *c)
{
    if (c->x_ready)
        return 0;
    /* With the room, x was set before the call was visible to another
     * thread; else it is set under mu (here or by an answer). */
    th_mcall_x *x = c->x_room ? c->x : NULL;
    if (!x) {
        /* A queued call: its x is made now (or was, by an answer that
         * came first, under mu: then the call does not run). */
        th_mcall_x *nx = x_new();
        if (!nx)
            return TH_ENOMEM;
        pthread_mutex_lock(&c->mu);
        if (!c->x)
            c->x = nx;
        else
            x_free_unused(nx);
        x = c->x;
        pthread_mutex_unlock(&c->mu);
    }
    const th_tool *t = c->tool;
    uint32_t so = t->stdout_type < TH_SEM_COUNT ? t->stdout_type : TOOLHOST_SEM_TEXT;
    uint32_t se = t->stderr_type < TH_SEM_COUNT ? t->stderr_type : TOOLHOST_SEM_TEXT;
    /* th_out_limit's answers, through the override found at the start */
    uint64_t lo = th_call_out_limit(c, so);
    th_out_init(&x->out, so, lo);
    /* the same kind of output (text, usually): the same limit */
    th_out_init(&x->err, se, se == so ? lo : th_call_out_limit(c, se));
    const th_host_cfg *hc = &c->cfg->host;
    if (hc->spill_dir) {
        /* Full outputs that get cut are saved there (no file otherwise);
         * a folder that cannot be used only means no spill. */
        (void)th_out_spill(&x->out, hc->spill_dir, hc->spill_max_bytes);
        (void)th_out_spill(&x->err, hc->spill_dir, hc->spill_max_bytes);
    }
    /* the tool's name as a late callback reports it once the call is a
     * tombstone (its tool released): set before plugin code sees the
     * handle, read-only after */
    size_t tn = strnlen(t->name, sizeof x->tname - 1);
    memcpy(x->tname, t->name, tn);
    x->tname[tn] = '\0';
    c->x_ready = true;
    set_read_on_base(c);
    return 0;
}

/* The run's start (th_mcall_run): the execution's state opened, then the
 * phase swapped to RUNNING.  False when the call does not run: it was
 * answered and its reference dropped here. */
static bool run_begin(th_mcall *c)
{
    if (x_open(c) != 0) {
        if (c->islot)
            (void)th_mgr_islot_clear(c->h, c); /* armed or not: disarmed */
        th_call_answer_error(c, TH_ENOMEM, "out of memory");
        th_mcall_exec_end(c, TOOLHOST_FAILED, false);
        th_mcall_unref(c);
        return false;
    }
    /* The run's start, without the call's lock: one compare-and-swap of
     * the phase, NEW (inline) or QUEUED (a worker's) -> RUNNING.  An
     * answer that came first (a cancel, a timeout, the session's close,
     * a refusal) made it NOT_RUN under mu (answer_locked): the swap fails
     * and the call does not run.  An answer that comes after finds it
     * RUNNING, as the deadline thread's lost-worker check and the
     * session's close (th_mgr_cslot_running) read it.  A cancel or a
     * timeout on its way sets abort_code before it answers. */
    uint8_t ph = atomic_load_explicit(&c->phase, memory_order_relaxed);
    bool skip = atomic_load(&c->abort_code) != 0 ||
                (ph != TH_PH_NEW && ph != TH_PH_QUEUED) ||
                !atomic_compare_exchange_strong_explicit(
                    &c->phase, &ph, TH_PH_RUNNING, memory_order_acq_rel,
                    memory_order_acquire);
    if (skip) {
        /* armed by the deadline thread meanwhile: out of the heap (an
         * answer given before that found nothing to disarm) */
        if (c->islot && th_mgr_islot_clear(c->h, c))
            th_mgr_disarm(c->h, c);
        th_mcall_exec_end(c, TOOLHOST_FAILED, false);
        th_mcall_unref(c);
        return false;
    }
    return true;
}

/* The plugin's execute() (or the mock's), on this thread, with the call
 * as this thread's current one; returns its status.  Inlined: the hot
 * path keeps one frame, as before the split. */
static inline __attribute__((always_inline)) int run_execute(th_mcall *c)
{
    th_mgr_own_add(&c->h->mgr, run, running, 1);
    th_mcall *prev = tl_cur;
    tl_cur = c;
    c->in_execute = true;
    c->ran = true;
    const th_tool *t = c->tool;
    /* ABI 1.2: the arguments decoded one level, so that the plugin need
     * not decode them again (valid until execute() returns, like args) */
    toolhost_arg view_args[TH_ARGS_VIEW_MAX];
    toolhost_args_view view;
    const toolhost_args_view *given = c->base.pub.args_view;
    c->base.pub.args_view = NULL;
    if (c->mock) {
        /* a mock reads no view */
    } else if (given && c->args_borrowed && given->data == c->args &&
               given->len == c->args_len) {
        /* validation's, on the caller's frame (call_start.c prepare) */
        c->base.pub.args_view = given;
    } else if (th_args_view_build(c->args, c->args_len, view_args,
                                  TH_ARGS_VIEW_MAX, &view) == 0) {
        c->base.pub.args_view = &view;
    }
    int st = c->mock ? th_mock_execute(c)
                     : t->desc->execute(t->plugin->state, t->desc, &c->base.pub,
                                        c->args, c->args_len);
    tl_cur = prev;
    return st;
}

/* After execute(), under c->mu: where the call's deadline lives now.
 * Deadline armed from its thread's or its call slot (heapless, slot_dl):
 * a call that lives on (suspended, pending) goes to the heap; any other
 * skips the heap's lock when answered. */
static void run_deadline_locked(th_mcall *c, bool pending)
{
    if (pending) {
        /* it lives on: its deadline goes to the heap now */
        if (!c->answered)
            th_mgr_arm(c->h, c);
    } else {
        c->no_heap = true; /* the answer skips the heap's lock (armed
                              from the call slot: disarmed when the
                              slot is emptied) */
    }
}

/* After execute() and c->mu: the ends other than the usual one (a
 * suspended call, a status execute() may not return). */
static void run_end_unusual(th_mcall *c, int st, bool susp, bool take,
                            bool end_now)
{
    const th_tool *t = c->tool;
    unsigned long long id = (unsigned long long)c->base.pub.call_id;
    if (susp && st == TOOLHOST_PENDING) {
        /* complete() finishes it (or already did). */
    } else if (susp) {
        char m[200];
        snprintf(m, sizeof m, "tool %s returned %d from execute() after suspend() "
                 "(expected pending; contract misuse)", t->name, st);
        th_log_error("tool=%s call=%llu: %s%s", t->name, id, m,
                     take ? ": the call ends as a tool error"
                          : ": complete() had already ended the call");
        if (take) {
            th_mcall_set_error(&c->base.pub, TH_ETOOL, m);
            th_mcall_exec_end(c, TOOLHOST_FAILED, true);
            th_mcall_unref(c); /* the suspend reference */
        }
    } else if (end_now) {
        exec_end(c, st, true, false, false); /* ended already: set again */
    } else {
        char m[200];
        snprintf(m, sizeof m, "tool %s returned %d from execute (expected ok, failed, or pending after suspend)",
                 t->name, st);
        th_log_error("tool=%s call=%llu: %s", t->name, id, m);
        th_mcall_set_error(&c->base.pub, TH_ETOOL, m);
        th_mcall_exec_end(c, TOOLHOST_FAILED, true);
    }
}

void th_mcall_run(th_mcall *c)
{
    if (c->prep) {
        /* A pool worker runs the stages that call plugin code (the
         * plugin's argument check and permission question) for a caller
         * that must not wait for them; they submit the call again. */
        c->prep = false;
        th_call_prepare(c);
        return;
    }
    if (!run_begin(c))
        return;
    int st = run_execute(c);
    /* An inline call in its thread's slot (manager.c): out of it now,
     * before anyone answers it from here; `heapless` when the deadline
     * thread never armed it. */
    bool had_islot = c->islot != 0; /* (th_mgr_islot_clear zeroes it) */
    /* run inline by its owner, in its call slot (c->cslot is the owner's:
     * read only on an inline run) */
    bool own = c->inline_run && c->cslot != 0;
    bool heapless = had_islot && !th_mgr_islot_clear(c->h, c);
    /* its deadline armed from its call slot (th_mgr_cslot_deadline): the
     * deadline thread may arm it until the slot is emptied, which says
     * whether it did (deliver, th_call_start) */
    bool slot_dl = th_mgr_cslot_deadline(c, own);
    pthread_mutex_lock(&c->mu);
    c->in_execute = false;
    c->base.pub.args_view = NULL; /* on this stack frame, or the caller's */
    bool susp = c->suspended;
    bool pending = susp && st == TOOLHOST_PENDING;
    /* suspend() then anything but PENDING: the worker finishes the call
     * unless complete() already did (its suspend reference is ours). */
    bool take = susp && st != TOOLHOST_PENDING && !c->completed;
    if (take)
        c->completed = true;
    /* the usual end (no suspend, ok or failed): ended now, and answered
     * in this same turn of the lock (exec_end) */
    bool end_now = !susp && (st == TOOLHOST_OK || st == TOOLHOST_FAILED ||
                             th_mcall_backend_status(c, st) != 0);
    if (end_now)
        th_mcall_set_ended(c);
    if (heapless || slot_dl)
        run_deadline_locked(c, pending);
    /* Armed by the deadline thread while it ran but answered already (a
     * cancel: its answer found it not yet in the heap): out of the heap
     * now, not at its deadline. */
    bool drop = had_islot && !heapless && c->answered;
    /* Suspended, it outlives its inline run: out of its call slot into
     * the session's map (closing: cancelled below, still in the slot). */
    int enter_rc = pending ? th_call_session_enter_locked(c) : 0;
    if (c->args_borrowed && pending && th_mgr_own_args(c) != 0) {
        /* A suspended task lists its arguments (tasks.list) after the
         * caller's buffer is gone: without memory it lists none.  (Had
         * complete() ended it already, exec_end dropped them.) */
        c->args = NULL;
        c->args_len = 0;
        c->args_borrowed = false;
    }
    if (end_now && (!c->has_slots || c->n_groups == 0)) {
        /* the usual end: result and answer in this turn of the lock
         * (th_mgr_disarm under c->mu: in the lock order; a call holding
         * a group's slot gives it back under mgr->mu, which th_mgr_submit
         * holds while it takes a call's mu: not here, but below) */
        if (drop)
            th_mgr_disarm(c->h, c);
        exec_end(c, st, true, true, own); /* releases c->mu */
        th_mcall_unref(c);
        return;
    }
    pthread_mutex_unlock(&c->mu);
    if (drop)
        th_mgr_disarm(c->h, c);
    if (enter_rc != 0)
        th_mcall_abort(c, enter_rc == TH_ESTATE ? TH_ECANCELLED : TH_ENOMEM,
                       "%s", enter_rc == TH_ESTATE ? "the session ended"
                                                   : "out of memory");
    run_end_unusual(c, st, susp, take, end_now);
    th_mcall_unref(c);
}

int th_call_cancel(th_session *s, uint64_t id)
{
    th_host *h = s->h;
    th_mcall *c = th_mgr_session_call(s, id); /* map or call slot */
    if (!c) {
        /* A toolset-scoped task of a toolset this session may use. */
        pthread_mutex_lock(&h->tmu);
        c = th_u64map_get(&h->tasks, id);
        if (c && c->ts_idx >= 0 && s->usable[c->ts_idx])
            th_mcall_ref(c);
        else
            c = NULL;
        pthread_mutex_unlock(&h->tmu);
    }
    if (!c)
        return TH_ENOTFOUND;
    bool won = th_mcall_abort(c, TH_ECANCELLED, "the call was cancelled (call %llu of %s)",
                              (unsigned long long)id, c->tool->name);
    th_mcall_unref(c);
    return won ? 0 : TH_ESTATE;
}

th_session *th_call_session(const toolhost_call *call)
{
    const th_call_base *b = (const th_call_base *)call;
    if (!call || b->vt != &th_mcall_vtbl)
        return NULL;
    return ((const th_mcall *)call)->s;
}

const th_toolset_cfg *th_call_toolset(const toolhost_call *call)
{
    const th_call_base *b = (const th_call_base *)call;
    if (!call || b->vt != &th_mcall_vtbl)
        return NULL;
    return ((const th_mcall *)call)->ts;
}

uint64_t th_call_blocks_limit(const toolhost_call *call)
{
    const th_call_base *b = (const th_call_base *)call;
    if (!call || b->vt != &th_mcall_vtbl)
        return 0;
    const th_mcall *c = (const th_mcall *)call;
    return c->x ? c->x->out.limit : 0; /* cb_write_block's budget */
}

/* ---- The manager's view of the call layer ------------------------------------ */

static bool abort_msg(th_mcall *c, int code, const char *msg)
{
    return th_mcall_abort(c, code, "%s", msg);
}

const th_mgr_ops th_call_mgr_ops = {
    .run = th_mcall_run,
    .current = th_mcall_current,
    .ref = th_mcall_ref,
    .unref = th_mcall_unref,
    .abort = abort_msg,
    .never_run = th_mcall_never_run,
    .exec_end = th_mcall_exec_end,
    .notified = th_mcall_notified,
    .perm_expired = th_mcall_perm_expired,
    .cancel = th_call_cancel,
};
