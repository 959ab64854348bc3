/* manager.c - the async manager's machinery: the worker pool with its
 * bounded two-class queue and concurrency groups, the inline fast path, the
 * deadline thread and the progress notifier thread.
 *
 * mgr->mu guards the queues, the groups and the counters beside them;
 * mgr->tmu the deadline heap; mgr->nmu the notifier queue.  None of them is
 * held while a call's mu is taken (see th/manager.h for the order). */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "th/log.h"
#include "manager.h"

_Thread_local bool th_mgr_tl_worker;
static _Thread_local th_wslot *tl_wslot;   /* this worker's slot */
static _Thread_local bool tl_async;         /* this worker holds an async slot */

bool th_mgr_tl_async_get(void)
{
    return tl_async;
}

void th_mgr_tl_async_set(bool v)
{
    tl_async = v;
}

#define SPIN_NS 30000 /* a worker spins this long before it parks */

static int cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

/* ---- Groups ------------------------------------------------------------------ */

/* The group of (kind, toolset, tool), created on first use; NULL when out
 * of memory (the call then runs without that limit). */
static th_group *group_get(th_mgr *m, th_group_kind kind, int ts_idx,
                           const char *tool, uint32_t limit)
{
    for (th_group *g = m->tool_groups; g; g = g->next)
        if (g->kind == kind && g->ts_idx == ts_idx && strcmp(g->tool, tool) == 0)
            return g;
    th_group *g = calloc(1, sizeof *g);
    if (!g || !(g->tool = strdup(tool))) {
        free(g);
        return NULL;
    }
    g->kind = kind;
    g->ts_idx = ts_idx;
    g->limit = limit;
    g->next = m->tool_groups;
    m->tool_groups = g;
    return g;
}

/* Under m->mu: the groups whose limits the call obeys. */
static void groups_of(th_host *h, th_mcall *c)
{
    th_mgr *m = &h->mgr;
    c->n_groups = 0;
    if (c->ts && c->ts->max_concurrency)
        c->groups[c->n_groups++] = &m->ts_groups[c->ts_idx];
    const th_tool_override *ov = c->ov;
    if (ov && ov->max_concurrency) {
        th_group *g = group_get(m, TH_GROUP_OVERRIDE, c->ts_idx, c->tool->name,
                                ov->max_concurrency);
        if (g)
            c->groups[c->n_groups++] = g;
    }
    if (c->tool->flags & TOOLHOST_TOOL_SERIAL) {
        th_group *g = group_get(m, TH_GROUP_SERIAL, -1, c->tool->name, 1);
        if (g)
            c->groups[c->n_groups++] = g;
    }
    const th_plugin *pl = c->tool->plugin;
    if (pl && (pl->flags & TOOLHOST_PLUGIN_SERIAL)) {
        th_group *g = group_get(m, TH_GROUP_PLUGIN, -1, pl->name, 1);
        if (g)
            c->groups[c->n_groups++] = g;
    }
}

/* Whether groups_of() would give the call any group (without making
 * one): the same tests on the call's config snapshot and its tool. */
static bool needs_groups(const th_mcall *c)
{
    if (c->ts && c->ts->max_concurrency)
        return true;
    const th_tool_override *ov = c->ov;
    if (ov && ov->max_concurrency)
        return true;
    if (c->tool->flags & TOOLHOST_TOOL_SERIAL)
        return true;
    const th_plugin *pl = c->tool->plugin;
    return pl && (pl->flags & TOOLHOST_PLUGIN_SERIAL);
}

static th_group *group_full(th_mcall *c)
{
    for (int i = 0; i < c->n_groups; i++)
        if (c->groups[i]->limit && c->groups[i]->running >= c->groups[i]->limit)
            return c->groups[i];
    return NULL;
}

static void take_slots(th_mcall *c)
{
    for (int i = 0; i < c->n_groups; i++)
        c->groups[i]->running++;
    c->has_slots = true;
}

static void q_push(th_mcall **q, th_mcall *c, th_qwhere w)
{
    c->qnext = NULL;
    c->qprev = q[1];
    c->qwhere = (uint8_t)w;
    if (q[1])
        q[1]->qnext = c;
    else
        q[0] = c;
    q[1] = c;
}

/* Takes c out of list q (it is in it): O(1), the list is doubly linked. */
static void q_unlink(th_mcall **q, th_mcall *c)
{
    if (c->qprev)
        c->qprev->qnext = c->qnext;
    else
        q[0] = c->qnext;
    if (c->qnext)
        c->qnext->qprev = c->qprev;
    else
        q[1] = c->qprev;
    c->qnext = c->qprev = NULL;
    c->qwhere = TH_QW_NONE;
}

static th_mcall *q_pop(th_mcall **q)
{
    th_mcall *c = q[0];
    if (c)
        q_unlink(q, c);
    return c;
}

/* Whether call a came before call b (qseq wraps at 2^32: a difference). */
static bool q_older(const th_mcall *a, const th_mcall *b)
{
    return (int32_t)(a->qseq - b->qseq) < 0;
}

/* Under m->mu: the next call a worker may run, parking the ones a group
 * holds back.  *async tells which class it came from. */
static th_mcall *pick_locked(th_mgr *m, bool *async)
{
    for (;;) {
        th_mcall *s = m->q[0][0];
        th_mcall *a = m->async_running < m->async_cap ? m->q[1][0] : NULL;
        if (!s && !a)
            return NULL;
        int qi = (!s || (a && q_older(a, s))) ? 1 : 0;
        th_mcall *c = q_pop(m->q[qi]);
        atomic_fetch_sub(&m->nqueued, 1);
        *async = qi == 1;
        if (atomic_load(&c->abort_code) != 0 || c->prep) {
            *async = false; /* never runs, or only its hooks: no slot */
            return c;
        }
        th_group *g = group_full(c);
        if (!g)
            return c;
        q_push(g->park[qi], c, qi ? TH_QW_PARK_ASYNC : TH_QW_PARK_SYNC);
    }
}

void th_mgr_release(th_host *h, th_mcall *c)
{
    th_mgr *m = &h->mgr;
    if (!c->has_slots)
        return;
    if (c->n_groups == 0) {
        /* no group: no slot to give back, no one parked behind it */
        c->has_slots = false;
        return;
    }
    pthread_mutex_lock(&m->mu);
    size_t moved = 0;
    for (int i = 0; i < c->n_groups; i++) {
        th_group *g = c->groups[i];
        g->running--;
        for (int qi = 0; qi < 2; qi++) {
            if (!g->park[qi][0])
                continue;
            /* Splice the parked calls back in front of their queue, in
             * order: they are older than anything queued. */
            for (th_mcall *p = g->park[qi][0]; p; p = p->qnext) {
                p->qwhere = qi ? TH_QW_ASYNC : TH_QW_SYNC;
                moved++;
            }
            g->park[qi][1]->qnext = m->q[qi][0];
            if (m->q[qi][0])
                m->q[qi][0]->qprev = g->park[qi][1];
            else
                m->q[qi][1] = g->park[qi][1];
            m->q[qi][0] = g->park[qi][0];
            g->park[qi][0] = g->park[qi][1] = NULL;
        }
    }
    c->has_slots = false;
    if (moved) {
        atomic_fetch_add(&m->nqueued, moved);
        if (m->idle)
            pthread_cond_broadcast(&m->cv);
    }
    pthread_cond_broadcast(&m->slot_cv);
    pthread_mutex_unlock(&m->mu);
}

void th_mgr_async_take(th_host *h)
{
    pthread_mutex_lock(&h->mgr.mu);
    h->mgr.async_running++;
    pthread_mutex_unlock(&h->mgr.mu);
}

/* ---- Workers ------------------------------------------------------------------ */

/* Under m->mu: a worker that was counted lost came back from execute().
 * It serves again if the pool is short of a worker, else (a replacement
 * took its place) it ends.  Returns whether it ends. */
static bool lost_back_locked(th_mgr *m, th_wslot *sl)
{
    sl->lost = false;
    m->lost_now--;
    bool retire = m->active >= m->nworkers || m->stop;
    if (!retire)
        m->active++;
    th_log_info("lost worker back after %lld ms: %s (%u still lost)",
                (long long)((th_now_ns() - sl->cur_since_ns) / 1000000),
                retire ? "it ends, its replacement stays" : "it serves again",
                (unsigned)m->lost_now);
    return retire;
}

static void *worker_main(void *arg)
{
    th_wslot *sl = arg;
    th_host *h = sl->h;
    th_mgr *m = &h->mgr;
    th_mgr_tl_worker = true;
    tl_wslot = sl;
    bool spun = false;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        bool async = false;
        th_mcall *c = pick_locked(m, &async);
        if (c) {
            spun = false;
            m->waiting--;
            if (atomic_load(&c->abort_code) == 0 && !c->prep)
                take_slots(c);
            if (async)
                m->async_running++;
            sl->cur = c;
            sl->cur_since_ns = th_now_ns();
            pthread_mutex_unlock(&m->mu);
            m->ops->ref(c); /* c outlives ops->run: lost_watch below */
            th_mgr_tl_async_set(async);
            m->ops->run(c);
            bool held = th_mgr_tl_async_get();
            th_mgr_tl_async_set(false);
            if (atomic_load_explicit(&c->lost_watch, memory_order_relaxed))
                th_mgr_disarm(h, c); /* execute() is over: no check due */
            m->ops->unref(c);
            pthread_mutex_lock(&m->mu);
            sl->cur = NULL; /* stale until here, but never compared equal
                               to a call the timer holds a reference to */
            if (held) {
                m->async_running--;
                if (m->q[1][0] && m->idle)
                    pthread_cond_signal(&m->cv);
            }
            if (sl->lent) {
                /* back from waiting on its client (th_mgr_lend) */
                sl->lent = false;
                m->lent_now--;
                if (m->active >= m->nworkers || m->stop)
                    break; /* its replacement stays */
                m->active++;
            }
            if (sl->lost && lost_back_locked(m, sl))
                break;
            continue;
        }
        if (m->stop)
            break;
        if (!spun && m->spinning == 0) {
            /* Spin a little before parking: a call that arrives now costs
             * no sleep/wake pair.  An enqueuer that sees us spinning
             * leaves one call to us (spin_claimed) instead of waking a
             * parked worker; we always look at the queue again below. */
            spun = true;
            m->spinning++;
            pthread_mutex_unlock(&m->mu);
            int64_t until = th_now_ns() + SPIN_NS;
            while (atomic_load_explicit(&m->nqueued, memory_order_relaxed) == 0 &&
                   th_now_ns() < until)
                sched_yield(); /* let a runnable caller have the core */
            pthread_mutex_lock(&m->mu);
            m->spinning--;
            if (m->spin_claimed)
                m->spin_claimed--;
            continue;
        }
        spun = false;
        m->idle++;
        pthread_cond_wait(&m->cv, &m->mu);
        m->idle--;
    }
    sl->state = TH_SLOT_EXITED;
    pthread_cond_broadcast(&m->exit_cv);
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* ---- Submit: deadline, inline or queue ------------------------------------ */

static bool has_delays(const th_mock_cfg *mk)
{
    if (!mk)
        return false;
    if (mk->delay_ms || mk->n_progress)
        return true;
    return false;
}

/* Under m->mu: the message of a `busy` answer, or false when a call may
 * be queued. */
static bool busy_locked(th_mgr *m, char *msg, size_t size)
{
    if (!m->stop && m->waiting < m->cap && m->active > 0)
        return false;
    if (m->active == 0 && !m->stop)
        snprintf(msg, size,
                 "the host is busy (all %u workers are stuck in tools that "
                 "ignore cancellation): try again later",
                 (unsigned)m->nworkers);
    else
        snprintf(msg, size, "the host is busy (%zu calls waiting): try again later",
                 m->cap);
    return true;
}

/* Under m->mu: puts c at the end of its class's queue and wakes a worker. */
static void enqueue_locked(th_mgr *m, th_mcall *c, int qi)
{
    c->qseq = ++m->qseq;
    q_push(m->q[qi], c, qi ? TH_QW_ASYNC : TH_QW_SYNC);
    m->waiting++;
    atomic_fetch_add(&m->nqueued, 1);
    if (m->spinning > m->spin_claimed)
        m->spin_claimed++;
    else if (m->idle)
        pthread_cond_signal(&m->cv);
}

/* Under m->mu: takes c out of the list it waits in (c->qwhere), giving
 * its place back; false when it waits in none. */
static bool unqueue_locked(th_mgr *m, th_mcall *c)
{
    switch ((th_qwhere)c->qwhere) {
    case TH_QW_SYNC:
    case TH_QW_ASYNC:
        q_unlink(m->q[c->qwhere == TH_QW_ASYNC], c);
        atomic_fetch_sub(&m->nqueued, 1);
        break;
    case TH_QW_PARK_SYNC:
    case TH_QW_PARK_ASYNC: {
        /* the group whose park it is in: the one whose list ends at it,
         * or for a call in the middle any (only the ends name a list) */
        int qi = c->qwhere == TH_QW_PARK_ASYNC;
        th_mcall **q = c->groups[0]->park[qi];
        for (int i = 0; i < c->n_groups; i++)
            if (c->groups[i]->park[qi][0] == c ||
                c->groups[i]->park[qi][1] == c)
                q = c->groups[i]->park[qi];
        q_unlink(q, c); /* parked calls are not counted in nqueued */
        break;
    }
    case TH_QW_NONE:
        return false;
    }
    m->waiting--;
    return true;
}

/* Ends a call that was answered (aborted) and never ran, with no lock
 * held: as a worker's run of it would (th_mcall_run's skip). */
static void end_unrun(th_mgr *m, th_mcall *c)
{
    th_mgr_disarm(c->h, c);
    m->ops->never_run(c, atomic_load(&c->abort_code), "the call was cancelled");
}

void th_mgr_unqueue(th_mcall *c)
{
    th_mgr *m = &c->h->mgr;
    pthread_mutex_lock(&m->mu);
    bool out = unqueue_locked(m, c);
    pthread_mutex_unlock(&m->mu);
    if (out)
        end_unrun(m, c);
}

void th_mgr_prepare(th_mcall *c)
{
    th_host *h = c->h;
    th_mgr *m = &h->mgr;
    /* The hooks may hang: the deadline answers the caller meanwhile
     * (c->timeout_ms: set when the call was recorded, call_start.c). */
    if (c->timeout_ms > 0) {
        atomic_store(&c->deadline_ns, c->start_ns + c->timeout_ms * 1000000);
        th_mgr_arm(h, c);
    }
    char msg[200];
    pthread_mutex_lock(&m->mu);
    if (busy_locked(m, msg, sizeof msg)) {
        pthread_mutex_unlock(&m->mu);
        th_mgr_disarm(h, c);
        m->ops->never_run(c, TH_EBUSY, msg);
        return;
    }
    if (atomic_load(&c->abort_code) != 0) { /* as in th_mgr_submit */
        pthread_mutex_unlock(&m->mu);
        end_unrun(m, c);
        return;
    }
    c->prep = true;
    enqueue_locked(m, c, 0);
    pthread_mutex_unlock(&m->mu);
}

int th_mgr_own_args(th_mcall *c)
{
    if (!c->args_borrowed)
        return 0;
    uint8_t *copy = malloc(c->args_len ? c->args_len : 1);
    if (!copy)
        return TH_ENOMEM;
    if (c->args_len)
        memcpy(copy, c->args, c->args_len);
    c->args = copy;
    c->args_borrowed = false;
    c->base.pub.args_view = NULL; /* validation's view: of the caller's */
    return 0;
}

/* ---- Inline slots (th_mgr.islot) ------------------------------------------ */

static _Thread_local unsigned tl_islot;     /* this thread's slot + 1; 0: none yet */
static atomic_uint islot_count;

/* An inline call about to run on this thread: published in the thread's
 * slot instead of the deadline heap.  False when the slot is taken (a
 * thread sharing it runs an inline call): arm it as usual. */
/* This thread's slot in th_mgr.islot and th_mgr.cslot, + 1. */
static unsigned thread_slot(void)
{
    unsigned i = tl_islot;
    if (!i)
        tl_islot = i = atomic_fetch_add_explicit(&islot_count, 1,
                                                 memory_order_relaxed) % TH_ISLOTS + 1;
    return i;
}

/* The owner empties its slot: waits while a reader (bit 0) looks at the
 * call in it (a few hundred ns, unless it was preempted there).  Returns
 * what the slot held. */
static uintptr_t slot_empty(_Atomic uintptr_t *sl)
{
    for (unsigned n = 0;; n++) {
        uintptr_t v = atomic_load(sl);
        if (v & 1) {
            if (n > 64)
                sched_yield();
            continue;
        }
        if (atomic_compare_exchange_weak(sl, &v, 0))
            return v;
    }
}

/* Wakes the deadline thread for a call published in a slot (islot_put,
 * or its call slot) unless it scans anyway.  Dekker with the deadline
 * thread (seq_cst both sides): it sets islot_idle, then looks at the
 * slots once more before it sleeps; we filled the slot (a seq_cst
 * compare-and-swap), then read islot_idle.  One of us sees the other. */
static void islot_wake(th_mgr *m, th_mcall *c)
{
    if (atomic_load(&m->islot_idle)) {
        pthread_mutex_lock(&m->tmu);
        atomic_store(&m->islot_idle, false);
        m->islot_quiet = 0;
        atomic_fetch_add_explicit(&m->islot_wakes, 1, memory_order_relaxed);
        int64_t at = c->start_ns + TH_ISLOT_SCAN_NS;
        if (at < m->islot_next_ns)
            m->islot_next_ns = at;
        pthread_cond_signal(&m->tcv);
        pthread_mutex_unlock(&m->tmu);
    }
}

static bool islot_put(th_mgr *m, th_mcall *c)
{
    unsigned i = thread_slot();
    uintptr_t z = 0;
    if (!atomic_compare_exchange_strong(&m->islot[i - 1].v, &z, (uintptr_t)c))
        return false;
    c->islot = (uint8_t)i;
    islot_wake(m, c);
    return true;
}

bool th_mgr_islot_clear(th_host *h, th_mcall *c)
{
    _Atomic uintptr_t *sl = &h->mgr.islot[c->islot - 1].v;
    c->islot = 0;
    return (slot_empty(sl) & 2) != 0; /* bit 0: the deadline thread */
}

/* Deadline thread, no lock held: arms every published inline call that
 * has run TH_ISLOT_SCAN_NS or longer.  True when a slot still holds a
 * call that is not armed. */
static bool islot_scan(th_host *h, int64_t now)
{
    th_mgr *m = &h->mgr;
    bool any = false;
    for (unsigned i = 0; i < TH_ISLOTS; i++) {
        uintptr_t v = atomic_load_explicit(&m->islot[i].v, memory_order_relaxed);
        if (!v || (v & 3))
            continue;
        /* bit 0: the owner cannot take the call out (nor drop its
         * reference) until we let go */
        if (!atomic_compare_exchange_strong(&m->islot[i].v, &v, v | 1)) {
            any = true; /* changed meanwhile: next round */
            continue;
        }
        th_mcall *c = (th_mcall *)v;
        if (now - c->start_ns >= TH_ISLOT_SCAN_NS && th_mgr_arm(h, c) == 0) {
            atomic_fetch_add_explicit(&m->islot_armed, 1, memory_order_relaxed);
            atomic_store(&m->islot[i].v, v | 2);
            continue;
        }
        atomic_store(&m->islot[i].v, v);
        any = true;
    }
    /* The call slots: any call there keeps the scan going (its owner
     * checks islot_idle only once it submits, after the slot's
     * compare-and-swap: see th_mgr_submit); a running inline call of
     * th_mgr_cslot_deadline is armed once it has run long enough. */
    for (unsigned i = 0; i < TH_CSLOTS; i++) {
        _Atomic uintptr_t *sl = &m->cslot[i].v;
        uintptr_t v = atomic_load_explicit(sl, memory_order_relaxed);
        if (!v || (v & TH_CSLOT_ARMED))
            continue;
        /* bit 0: the owner cannot take the call out (nor drop its
         * reference) until we let go */
        if ((v & 1) || !atomic_compare_exchange_strong(sl, &v, v | 1)) {
            any = true; /* a reader holds it, or it changed: next round */
            continue;
        }
        th_mcall *c = (th_mcall *)(v & ~(uintptr_t)7);
        /* RUNNING (the run's start, acquire) orders the owner's inline_run
         * before this read; timeout_ms is set before the slot publishes */
        bool run = atomic_load_explicit(&c->phase, memory_order_acquire) ==
                   TH_PH_RUNNING;
        if (run && th_mgr_cslot_deadline(c, c->inline_run) &&
            atomic_load(&c->deadline_ns) != 0 &&
            now - c->start_ns >= TH_ISLOT_SCAN_NS && th_mgr_arm(h, c) == 0) {
            atomic_fetch_add_explicit(&m->islot_armed, 1, memory_order_relaxed);
            atomic_store(sl, v | TH_CSLOT_ARMED);
            continue;
        }
        atomic_store(sl, v);
        any = true;
    }
    return any;
}

/* Under tmu: whether a slot holds a call not armed. */
static bool islot_any(th_mgr *m)
{
    for (unsigned i = 0; i < TH_ISLOTS; i++) {
        uintptr_t v = atomic_load(&m->islot[i].v);
        if (v && !(v & 2))
            return true;
    }
    for (unsigned i = 0; i < TH_CSLOTS; i++) {
        uintptr_t v = atomic_load(&m->cslot[i].v);
        if (v && !(v & TH_CSLOT_ARMED))
            return true;
    }
    return false;
}

/* ---- Call slots (th_mgr.cslot) ------------------------------------------- */

/* Whether a call runs inline on its caller's thread with nothing of the
 * pool to take (th_mgr_submit's quick path): known when it is recorded.
 * A nested call (made by a running call on its thread: run_code's) is
 * one too when no concurrency limit applies to it: with no group, the
 * nested path's lending of an ancestor's slots has nothing to do. */
static bool quick_call(const th_mcall *c)
{
    return c->may_block && !c->is_async && !has_delays(c->mock) &&
           !needs_groups(c);
}

bool th_mgr_cslot_put(th_host *h, th_mcall *c)
{
    th_mgr *m = &h->mgr;
    if (!quick_call(c) || __atomic_load_n(&m->stop, __ATOMIC_ACQUIRE))
        return false;
    /* a nested call takes its thread's second slot (the first holds the
     * call that makes it, when that one runs inline too) */
    unsigned i = thread_slot() + (c->parent ? TH_ISLOTS : 0);
    uintptr_t z = 0;
    /* seq_cst: the caller reads s->closing next (see th_session_close) */
    if (!atomic_compare_exchange_strong(&m->cslot[i - 1].v, &z, (uintptr_t)c))
        return false;
    c->cslot = (uint8_t)i;
    return true;
}

unsigned th_mgr_cslot_clear(th_host *h, th_mcall *c)
{
    _Atomic uintptr_t *sl = &h->mgr.cslot[c->cslot - 1].v;
    c->cslot = 0;
    /* bit 0: a reader taking a reference (or the deadline thread) */
    return (unsigned)(slot_empty(sl) & (TH_CSLOT_SEEN | TH_CSLOT_ARMED));
}

/* Visits the calls of `s` in the call slots (with `id`, that call only):
 * each claimed (bit 0: its owner cannot let go of it meanwhile, so it is
 * valid), given a reference for the caller when `out` has room, let go.
 * Returns how many matched. */
static size_t cslot_visit(th_host *h, const th_session *s, uint64_t id,
                          th_mcall **out, size_t cap)
{
    th_mgr *m = &h->mgr;
    size_t n = 0;
    for (unsigned i = 0; i < TH_CSLOTS; i++) {
        _Atomic uintptr_t *sl = &m->cslot[i].v;
        uintptr_t v;
        for (unsigned k = 0;; k++) {
            v = atomic_load(sl);
            if (!v)
                break;
            if ((v & 1) == 0 && atomic_compare_exchange_weak(sl, &v, v | 1))
                break;
            if (k > 64)
                sched_yield(); /* another reader holds it */
        }
        if (!v)
            continue;
        th_mcall *c = (th_mcall *)(v & ~(uintptr_t)7);
        if (c->s == s && (id == 0 || c->base.pub.call_id == id)) {
            if (n < cap && out) {
                m->ops->ref(c);
                out[n] = c;
            }
            n++;
        }
        /* let go, with bit 1: the call was seen here (its owner, emptying
         * the slot, learns that another thread may hold it: the final
         * delivery's end takes the call's lock then, call.c) */
        atomic_store(sl, v | TH_CSLOT_SEEN);
    }
    return n;
}

size_t th_mgr_cslot_collect(th_host *h, const th_session *s, th_mcall **out,
                            size_t cap)
{
    size_t n = cslot_visit(h, s, 0, out, cap);
    return n < cap ? n : cap;
}

size_t th_mgr_cslot_running(th_host *h, const th_session *s)
{
    th_mcall *v[TH_CSLOTS];
    size_t n = th_mgr_cslot_collect(h, s, v, TH_CSLOTS), running = 0;
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&v[i]->mu);
        running += v[i]->phase != TH_PH_OVER;
        pthread_mutex_unlock(&v[i]->mu);
        h->mgr.ops->unref(v[i]);
    }
    return running;
}

th_mcall *th_mgr_session_call(th_session *s, uint64_t id)
{
    th_host *h = s->h;
    pthread_mutex_lock(&s->mu);
    th_mcall *c = th_u64map_get(&s->calls, id);
    if (c)
        h->mgr.ops->ref(c);
    pthread_mutex_unlock(&s->mu);
    if (!c && id != 0 && cslot_visit(h, s, id, &c, 1) == 0) {
        /* Not in the map, nor in a slot: it may have moved from its slot
         * to the map between the two looks (it enters the map before its
         * owner clears the slot): the map once more. */
        pthread_mutex_lock(&s->mu);
        c = th_u64map_get(&s->calls, id);
        if (c)
            h->mgr.ops->ref(c);
        pthread_mutex_unlock(&s->mu);
    }
    return c;
}

/* th_mgr_submit: the call runs on this thread now (inline).  Inlined
 * into each caller, as the three lines were before. */
static inline __attribute__((always_inline)) void run_inline(th_mgr *m,
                                                             th_mcall *c)
{
    th_mgr_own_add(m, inl, inline_calls, 1);
    c->inline_run = true;
    m->ops->run(c);
}

/* th_mgr_submit: where the deadline of a call with a timeout is kept.  An
 * inline call with a timeout long enough enters its thread's slot; the
 * deadline thread arms it if it runs past TH_ISLOT_SCAN_NS.  One in its
 * call slot has it there already (th_mgr_cslot_deadline: the deadline
 * thread's scan arms it from the call slot). */
static void submit_deadline(th_host *h, th_mgr *m, th_mcall *c, bool quick)
{
    if (quick && th_mgr_cslot_deadline(c, c->cslot != 0))
        islot_wake(m, c);
    else if (!(quick && c->timeout_ms >= TH_ISLOT_MIN_TIMEOUT_MS &&
               islot_put(m, c)))
        th_mgr_arm(h, c);
}

/* submit_nested_locked: the groups a nested call must take itself (in
 * take[], *n_take of them: those no ancestor holds); the refusal when it
 * would wait for a one-slot group its own ancestor holds, else NULL. */
static const char *nested_groups(th_mcall *c, th_group **take, int *n_take)
{
    *n_take = 0;
    for (int i = 0; i < c->n_groups; i++) {
        th_group *g = c->groups[i];
        bool held = false;
        for (th_mcall *p = c->parent; p && !held; p = p->parent)
            for (int k = 0; p->has_slots && k < p->n_groups; k++)
                held = held || p->groups[k] == g;
        if (!held) {
            take[(*n_take)++] = g;
            continue;
        }
        if (g->limit == 1 && g->kind != TH_GROUP_TOOLSET)
            return g->kind == TH_GROUP_SERIAL
                       ? "serial tool called from its own call: refused"
                   : g->kind == TH_GROUP_PLUGIN
                       ? "tool of a serial plugin called from a call of "
                         "the same plugin: refused"
                       : "tool with max_concurrency 1 called from its "
                         "own call: refused";
    }
    return NULL;
}

/* With m->mu held (released here): a call made by a running call on its
 * own thread: run it here so the pool can never deadlock (one worker
 * running code that calls tools).  A group an ancestor holds (its
 * toolset's max_concurrency) lends the ancestor's slot; the tool's own
 * limits (serial, tool_overrides max_concurrency) are waited for, until
 * the call's deadline or cancellation; a tool calling itself through a
 * one-slot group is refused. */
static void submit_nested_locked(th_mgr *m, th_mcall *c)
{
    th_group *take[4];
    int n_take;
    const char *refused = nested_groups(c, take, &n_take);
    if (refused) {
        pthread_mutex_unlock(&m->mu);
        m->ops->never_run(c, TH_EBUSY, refused);
        return;
    }
    for (;;) {
        th_group *full = NULL;
        for (int i = 0; i < n_take && !full; i++)
            if (take[i]->limit && take[i]->running >= take[i]->limit)
                full = take[i];
        if (!full || atomic_load(&c->abort_code) != 0)
            break;
        /* woken by th_mgr_release; the slices notice an abort
         * (deadline, cancel) that releases nothing */
        struct timespec ts;
        th_deadline_rt(&ts, 20);
        pthread_cond_timedwait(&m->slot_cv, &m->mu, &ts);
    }
    c->n_groups = 0;
    if (atomic_load(&c->abort_code) == 0) {
        for (int i = 0; i < n_take; i++)
            c->groups[c->n_groups++] = take[i];
        take_slots(c); /* has_slots: released by th_mgr_release */
    }
    pthread_mutex_unlock(&m->mu);
    run_inline(m, c);
}

/* With m->mu held (released here): the call waits in the pool's queue,
 * or is answered `busy`, or (aborted before it got here) ends unrun. */
static void submit_queue_locked(th_mgr *m, th_mcall *c)
{
    if (c->args_borrowed) {
        /* meant to run inline, but its group is full: it waits queued */
        pthread_mutex_unlock(&m->mu);
        if (th_mgr_own_args(c) != 0) {
            m->ops->never_run(c, TH_ENOMEM, "out of memory");
            return;
        }
        pthread_mutex_lock(&m->mu);
    }
    char msg[200];
    if (busy_locked(m, msg, sizeof msg)) {
        pthread_mutex_unlock(&m->mu);
        m->ops->never_run(c, TH_EBUSY, msg);
        return;
    }
    if (atomic_load(&c->abort_code) != 0) {
        /* cancelled (or past its deadline) before it got here: the abort
         * found it in no queue (th_mgr_unqueue), so it takes no place */
        pthread_mutex_unlock(&m->mu);
        end_unrun(m, c);
        return;
    }
    pthread_mutex_lock(&c->mu);
    if (c->phase == TH_PH_NEW)
        c->phase = TH_PH_QUEUED;
    pthread_mutex_unlock(&c->mu);
    enqueue_locked(m, c, c->is_async ? 1 : 0);
    pthread_mutex_unlock(&m->mu);
}

void th_mgr_submit(th_mcall *c)
{
    th_host *h = c->h;
    th_mgr *m = &h->mgr;
    /* c->timeout_ms: set when the call was recorded (call_start.c).  A
     * release store (a seq_cst one is a locked `xchg`): the deadline
     * thread reads it only after the call is published to it, by
     * islot_put's compare-and-swap or th_mgr_arm's tmu, both after this
     * store; another thread's relaxed read (call_cb.c) needs no order. */
    if (c->timeout_ms > 0)
        atomic_store_explicit(&c->deadline_ns,
                              c->start_ns + c->timeout_ms * 1000000,
                              memory_order_release);

    th_mcall *cur = m->ops->current();
    bool nested = c->may_block && cur != NULL;
    bool try_inline = c->may_block &&
                      (nested || (!c->is_async && !has_delays(c->mock)));
    /* (a call in a call slot was found quick when it was recorded, by
     * the same test on the same call; unless the host stops meanwhile it
     * is: then it is answered `busy` below, on this thread, but a nested
     * one runs all the same, as the nested path below would run it.  A
     * call the front allowed (th_permission_answer) may still be in its
     * owner's slot, but no longer may block: it goes to a worker, and
     * c->cslot, its owner's, is not read from the answering thread) */
    bool quick = c->may_block && (c->cslot || quick_call(c)) &&
                 (nested || !__atomic_load_n(&m->stop, __ATOMIC_ACQUIRE));
    if (c->timeout_ms > 0)
        submit_deadline(h, m, c, quick);
    /* A queued call outlives th_call_start: it needs its own arguments. */
    if (!try_inline && th_mgr_own_args(c) != 0) {
        m->ops->never_run(c, TH_ENOMEM, "out of memory");
        return;
    }
    if (quick) {
        /* No concurrency limit applies: nothing of the pool to take, so
         * not its lock either (the common inline call). */
        c->n_groups = 0;
        c->has_slots = false;
        run_inline(m, c);
        return;
    }
    pthread_mutex_lock(&m->mu);
    groups_of(h, c);
    if (try_inline && nested) {
        submit_nested_locked(m, c);
        return;
    }
    if (try_inline && !group_full(c) && !m->stop) {
        take_slots(c);
        pthread_mutex_unlock(&m->mu);
        run_inline(m, c);
        return;
    }
    submit_queue_locked(m, c);
}

/* ---- Deadline heap ------------------------------------------------------------- */

static bool earlier(th_mcall *a, th_mcall *b)
{
    return a->heap_ns < b->heap_ns;
}

static void heap_set(th_mgr *m, size_t i, th_mcall *c)
{
    m->heap[i] = c;
    c->heap_idx = i;
}

static void sift_up(th_mgr *m, size_t i)
{
    th_mcall *c = m->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!earlier(c, m->heap[p]))
            break;
        heap_set(m, i, m->heap[p]);
        i = p;
    }
    heap_set(m, i, c);
}

static void sift_down(th_mgr *m, size_t i)
{
    th_mcall *c = m->heap[i];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, b = i;
        th_mcall *best = c;
        if (l < m->hn && earlier(m->heap[l], best)) {
            b = l;
            best = m->heap[l];
        }
        if (r < m->hn && earlier(m->heap[r], best)) {
            b = r;
            best = m->heap[r];
        }
        if (b == i)
            break;
        heap_set(m, i, best);
        i = b;
    }
    heap_set(m, i, c);
}

static void heap_remove_at(th_mgr *m, size_t i)
{
    th_mcall *c = m->heap[i];
    c->heap_idx = SIZE_MAX;
    m->hn--;
    if (i < m->hn) {
        heap_set(m, i, m->heap[m->hn]);
        sift_down(m, i);
        sift_up(m, m->heap[i]->heap_idx);
    }
}

/* Under m->tmu: puts c in the heap at `at` (the caller gives the heap its
 * reference).  0 or TH_ENOMEM. */
static int heap_push_locked(th_mgr *m, th_mcall *c, int64_t at)
{
    if (m->hn == m->hcap) {
        size_t cap = m->hcap ? m->hcap * 2 : 256;
        th_mcall **nh = realloc(m->heap, cap * sizeof *nh);
        if (!nh)
            return TH_ENOMEM;
        m->heap = nh;
        m->hcap = cap;
    }
    c->heap_ns = at;
    heap_set(m, m->hn++, c);
    sift_up(m, c->heap_idx);
    /* Wake the deadline thread only when it sleeps past this deadline
     * (with one timeout for all calls: about once per timeout period). */
    if (c->heap_idx == 0 && at < m->timer_wake_ns)
        pthread_cond_signal(&m->tcv);
    return 0;
}

int th_mgr_arm(th_host *h, th_mcall *c)
{
    th_mgr *m = &h->mgr;
    pthread_mutex_lock(&m->tmu);
    if (c->heap_idx != SIZE_MAX) {
        pthread_mutex_unlock(&m->tmu);
        return 0;
    }
    atomic_store_explicit(&c->lost_watch, false, memory_order_relaxed);
    m->ops->ref(c);
    int rc = heap_push_locked(m, c, atomic_load(&c->deadline_ns));
    pthread_mutex_unlock(&m->tmu);
    if (rc) /* the call runs without a deadline; the caller holds a ref */
        atomic_fetch_sub(&c->refs, 1);
    return rc;
}

void th_mgr_disarm(th_host *h, th_mcall *c)
{
    th_mgr *m = &h->mgr;
    pthread_mutex_lock(&m->tmu);
    bool was = c->heap_idx != SIZE_MAX;
    if (was)
        heap_remove_at(m, c->heap_idx);
    pthread_mutex_unlock(&m->tmu);
    if (was) /* the caller holds a reference: never the last */
        atomic_fetch_sub(&c->refs, 1);
}

/* ---- Lost workers ------------------------------------------------------------ */

/* Under m->mu: a slot for a new worker (joining one whose thread ended),
 * or NULL when all workers + max_lost_workers slots hold a thread. */
static th_wslot *free_slot_locked(th_mgr *m, bool *join)
{
    for (uint32_t i = 0; i < m->nslots; i++)
        if (m->slots[i].state != TH_SLOT_RUN) {
            *join = m->slots[i].state == TH_SLOT_EXITED;
            return &m->slots[i];
        }
    return NULL;
}

/* Starts a worker in `sl` (reserved: state RUN).  0 or TH_EINTERNAL. */
static int spawn_worker(th_host *h, th_wslot *sl)
{
    sl->h = h;
    if (pthread_create(&sl->thread, NULL, worker_main, sl) == 0)
        return 0;
    th_mgr *m = &h->mgr;
    pthread_mutex_lock(&m->mu);
    sl->state = TH_SLOT_FREE;
    m->active--;
    pthread_mutex_unlock(&m->mu);
    return TH_EINTERNAL;
}

/* The deadline thread's check of a call that timed out lost_worker_grace
 * ago: if a worker still runs it, that worker is lost; a replacement
 * starts while there is a free slot.  No lock held; c is referenced. */
static void check_lost(th_host *h, th_mcall *c)
{
    th_mgr *m = &h->mgr;
    pthread_mutex_lock(&c->mu);
    bool running = c->phase == TH_PH_RUNNING;
    pthread_mutex_unlock(&c->mu);
    if (!running)
        return;
    pthread_mutex_lock(&m->mu);
    th_wslot *sl = NULL;
    for (uint32_t i = 0; i < m->nslots && !sl; i++)
        if (m->slots[i].state == TH_SLOT_RUN && m->slots[i].cur == c &&
            !m->slots[i].lost && !m->slots[i].lent)
            sl = &m->slots[i]; /* (a lent one has its replacement) */
    if (!sl || m->stop) {
        pthread_mutex_unlock(&m->mu);
        return;
    }
    sl->lost = true;
    m->lost_now++;
    m->lost_total++;
    m->active--;
    bool join = false;
    th_wslot *ns = free_slot_locked(m, &join);
    pthread_t old;
    memset(&old, 0, sizeof old);
    if (ns) {
        old = ns->thread;
        ns->state = TH_SLOT_RUN;
        ns->cur = NULL;
        ns->lost = false;
        m->active++;
    }
    /* No worker left: what waits in the queue would only wait for its
     * deadline; it gets `busy` now (parked calls wait for a slot of a
     * call that runs, and get their turn when it ends). */
    th_mcall *drop = NULL;
    if (m->active == 0)
        for (int qi = 0; qi < 2; qi++)
            for (th_mcall *x; (x = q_pop(m->q[qi])) != NULL;) {
                atomic_fetch_sub(&m->nqueued, 1);
                m->waiting--;
                x->qnext = drop;
                drop = x;
            }
    uint32_t lost_now = m->lost_now, active = m->active;
    pthread_mutex_unlock(&m->mu);
    long long over = (long long)((th_now_ns() - atomic_load(&c->deadline_ns)) / 1000000);
    if (ns) {
        th_log_warn("lost worker: tool=%s call=%llu still running %lld ms after "
                    "its timeout (it ignores cancellation); starting a "
                    "replacement (%u lost, at most %u replaced)",
                    c->tool->name, (unsigned long long)c->base.pub.call_id, over,
                    (unsigned)lost_now, (unsigned)m->lost_cap);
        if (join)
            pthread_join(old, NULL);
        if (spawn_worker(h, ns) != 0)
            th_log_error("lost worker: cannot start a replacement thread");
    } else {
        th_log_warn("lost worker: tool=%s call=%llu still running %lld ms after "
                    "its timeout (it ignores cancellation); the cap of %u "
                    "replacements (host.max_lost_workers) is reached: the host "
                    "goes on with %u worker%s%s",
                    c->tool->name, (unsigned long long)c->base.pub.call_id, over,
                    (unsigned)m->lost_cap, (unsigned)active, active == 1 ? "" : "s",
                    active ? "" : " (calls that need one get busy)");
    }
    while (drop) {
        th_mcall *x = drop;
        drop = x->qnext;
        x->qnext = NULL;
        char msg[200];
        snprintf(msg, sizeof msg,
                 "the host is busy (all %u workers are stuck in tools that "
                 "ignore cancellation): try again later",
                 (unsigned)m->nworkers);
        m->ops->never_run(x, TH_EBUSY, msg);
    }
}

int th_mgr_lend(th_host *h)
{
    th_mgr *m = &h->mgr;
    th_wslot *sl = tl_wslot;
    if (!th_mgr_tl_worker || !sl || sl->h != h)
        return 0; /* a caller's own thread: no worker to lend */
    pthread_mutex_lock(&m->mu);
    if (sl->lent || sl->lost || m->stop) {
        pthread_mutex_unlock(&m->mu);
        return 0;
    }
    bool join = false;
    th_wslot *ns = free_slot_locked(m, &join);
    if (!ns) {
        pthread_mutex_unlock(&m->mu);
        return TH_EBUSY;
    }
    sl->lent = true;
    m->lent_now++;
    pthread_t old = ns->thread;
    ns->state = TH_SLOT_RUN;
    ns->cur = NULL;
    ns->lost = false;
    ns->lent = false;
    /* m->active unchanged: this thread leaves the count, ns joins it */
    pthread_mutex_unlock(&m->mu);
    if (join)
        pthread_join(old, NULL);
    if (spawn_worker(h, ns) != 0) {
        th_log_error("ask_client: cannot start a worker in place of one "
                     "that waits for its client");
        return 0; /* spawn_worker took ns back; this one still waits */
    }
    return 0;
}

void th_mgr_lost(th_host *h, uint64_t *total, uint32_t *now)
{
    th_mgr *m = &h->mgr;
    pthread_mutex_lock(&m->mu);
    *total = m->lost_total;
    *now = m->lost_now;
    pthread_mutex_unlock(&m->mu);
}

/* The deadline thread also cleans host.spill_dir (age limit) once per
 * gc_every_ns, outside every lock. */
static void *timer_main(void *arg)
{
    th_host *h = arg;
    th_mgr *m = &h->mgr;
    /* Whether there is a spill_dir to clean (a reload may change the
     * folder, not add one: the config is read again at each round). */
    th_config *cfg0 = th_host_config_get(h);
    bool spill = cfg0->host.spill_dir != NULL;
    th_config_unref(cfg0);
    pthread_mutex_lock(&m->tmu);
    while (!m->tstop) {
        int64_t now = th_now_ns();
        if (spill && m->gc_every_ns > 0 && now >= m->gc_next_ns) {
            m->gc_next_ns = now + m->gc_every_ns;
            pthread_mutex_unlock(&m->tmu);
            th_config *cfg = th_host_config_get(h);
            const char *dir = cfg->host.spill_dir;
            int n = dir ? th_out_spill_gc(dir, cfg->host.spill_max_age_ms, 0) : 0;
            if (n > 0)
                th_log_debug("removed %d old spill file%s from %s", n,
                             n == 1 ? "" : "s", dir);
            th_config_unref(cfg);
            pthread_mutex_lock(&m->tmu);
            continue;
        }
        if (now >= m->islot_next_ns) {
            pthread_mutex_unlock(&m->tmu);
            bool any = islot_scan(h, now);
            atomic_fetch_add_explicit(&m->islot_scans, 1, memory_order_relaxed);
            pthread_mutex_lock(&m->tmu);
            if (any) {
                m->islot_quiet = 0;
            } else if (++m->islot_quiet < TH_ISLOT_LINGER) {
                any = true; /* scans on a while: no wake-up to pay */
            } else {
                /* sleep unless a call came meanwhile (see islot_put) */
                atomic_store(&m->islot_idle, true);
                if ((any = islot_any(m))) {
                    atomic_store(&m->islot_idle, false);
                    m->islot_quiet = 0;
                }
            }
            m->islot_next_ns = any ? now + TH_ISLOT_SCAN_NS : INT64_MAX;
            continue;
        }
        int64_t wake = spill && m->gc_every_ns > 0 ? m->gc_next_ns : INT64_MAX;
        if (m->islot_next_ns < wake)
            wake = m->islot_next_ns;
        th_mcall *c = m->hn ? m->heap[0] : NULL;
        int64_t d = c ? c->heap_ns : INT64_MAX;
        if (!c || d > now) {
            int64_t w = d < wake ? d : wake;
            m->timer_wake_ns = w;
            if (w == INT64_MAX) {
                pthread_cond_wait(&m->tcv, &m->tmu);
            } else {
                struct timespec ts;
                th_timespec_mono(&ts, w);
                pthread_cond_timedwait(&m->tcv, &m->tmu, &ts);
            }
            continue;
        }
        heap_remove_at(m, 0);
        bool watch = atomic_load_explicit(&c->lost_watch, memory_order_relaxed);
        pthread_mutex_unlock(&m->tmu);
        if (watch) {
            check_lost(h, c);
            m->ops->unref(c);
            pthread_mutex_lock(&m->tmu);
            continue;
        }
        pthread_mutex_lock(&c->mu);
        bool perm = c->phase == TH_PH_PERM_WAIT;
        pthread_mutex_unlock(&c->mu);
        if (perm) {
            m->ops->perm_expired(c);
        } else {
            char msg[1024];
            snprintf(msg, sizeof msg, "the call of %s timed out after %lld ms",
                     c->tool->name, (long long)c->timeout_ms);
            m->ops->abort(c, TH_ETIMEOUT, msg);
        }
        pthread_mutex_lock(&c->mu);
        bool running = !perm && c->phase == TH_PH_RUNNING;
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_lock(&m->tmu);
        /* Still running: look again after the grace, with the heap's
         * reference (a worker whose execute() returns takes it out). */
        if (running && !m->tstop && c->heap_idx == SIZE_MAX) {
            atomic_store_explicit(&c->lost_watch, true, memory_order_relaxed);
            if (heap_push_locked(m, c, th_now_ns() + m->lost_grace_ns) == 0)
                continue;
            atomic_store_explicit(&c->lost_watch, false, memory_order_relaxed);
        }
        pthread_mutex_unlock(&m->tmu);
        m->ops->unref(c);
        pthread_mutex_lock(&m->tmu);
    }
    pthread_mutex_unlock(&m->tmu);
    return NULL;
}

void th_mgr_set_spill_gc_every(th_host *h, int64_t ms)
{
    th_mgr *m = &h->mgr;
    pthread_mutex_lock(&m->tmu);
    m->gc_every_ns = ms > 0 ? ms * 1000000 : 0;
    m->gc_next_ns = th_now_ns() + m->gc_every_ns;
    pthread_cond_signal(&m->tcv);
    pthread_mutex_unlock(&m->tmu);
}

/* ---- Notifier -------------------------------------------------------------------- */

void th_mgr_notify(th_host *h, th_mcall *c)
{
    th_mgr *m = &h->mgr;
    pthread_mutex_lock(&m->nmu);
    c->nnext = NULL;
    if (m->nq_tail)
        m->nq_tail->nnext = c;
    else
        m->nq_head = c;
    m->nq_tail = c;
    pthread_cond_signal(&m->ncv);
    pthread_mutex_unlock(&m->nmu);
}

static void *notifier_main(void *arg)
{
    th_host *h = arg;
    th_mgr *m = &h->mgr;
    pthread_mutex_lock(&m->nmu);
    for (;;) {
        th_mcall *c = m->nq_head;
        if (!c) {
            if (m->nstop)
                break;
            pthread_cond_wait(&m->ncv, &m->nmu);
            continue;
        }
        m->nq_head = c->nnext;
        if (!m->nq_head)
            m->nq_tail = NULL;
        pthread_mutex_unlock(&m->nmu);
        m->ops->notified(c);
        pthread_mutex_lock(&m->nmu);
    }
    pthread_mutex_unlock(&m->nmu);
    return NULL;
}

/* ---- Start and stop ------------------------------------------------------------- */

int th_mgr_init(th_host *h, const th_mgr_ops *ops, th_error *err)
{
    static atomic_ullong serials;
    th_mgr *m = &h->mgr;
    m->ops = ops;
    m->serial = (uint64_t)atomic_fetch_add(&serials, 1) + 1;
    const th_host_cfg *hc = &th_host_config(h)->host;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1)
        ncpu = 1;
    m->nworkers = hc->workers ? hc->workers : (uint32_t)(2 * ncpu);
    m->async_cap = hc->async_workers ? hc->async_workers : m->nworkers / 2;
    if (m->async_cap < 1)
        m->async_cap = 1;
    if (m->async_cap > m->nworkers)
        m->async_cap = m->nworkers;
    m->cap = hc->queue_size ? hc->queue_size : 1024;
    m->lost_cap = hc->max_lost_workers ? hc->max_lost_workers : m->nworkers;
    m->lost_grace_ns = (int64_t)(hc->lost_worker_grace_ms ? hc->lost_worker_grace_ms : 3000) *
                       1000000;
    pthread_mutex_init(&m->mu, NULL);
    cond_init_mono(&m->exit_cv);
    pthread_cond_init(&m->cv, NULL);
    pthread_cond_init(&m->slot_cv, NULL);
    pthread_mutex_init(&m->tmu, NULL);
    cond_init_mono(&m->tcv);
    m->timer_wake_ns = INT64_MAX;
    m->islot_next_ns = INT64_MAX;
    atomic_store(&m->islot_idle, true);
    m->gc_every_ns = (int64_t)60 * 1000000000; /* host open cleaned once */
    m->gc_next_ns = th_now_ns() + m->gc_every_ns;
    pthread_mutex_init(&m->nmu, NULL);
    pthread_cond_init(&m->ncv, NULL);
    size_t nts = th_host_config(h)->n_toolsets;
    m->ts_groups = calloc(nts ? nts : 1, sizeof *m->ts_groups);
    m->slots = calloc((size_t)m->nworkers + m->lost_cap, sizeof *m->slots);
    if (!m->ts_groups || !m->slots)
        return th_error_set(err, TH_ENOMEM, "out of memory starting the manager");
    m->nslots = m->nworkers + m->lost_cap;
    for (size_t i = 0; i < nts; i++)
        m->ts_groups[i].limit = th_host_config(h)->toolsets[i].max_concurrency;
    if (pthread_create(&m->timer, NULL, timer_main, h) != 0)
        return th_error_set(err, TH_EINTERNAL, "cannot start the deadline thread");
    m->timer_started = true;
    if (pthread_create(&m->notifier, NULL, notifier_main, h) != 0)
        return th_error_set(err, TH_EINTERNAL, "cannot start the notifier thread");
    m->notifier_started = true;
    for (uint32_t i = 0; i < m->nworkers; i++) {
        th_wslot *sl = &m->slots[i];
        sl->h = h;
        sl->state = TH_SLOT_RUN;
        if (pthread_create(&sl->thread, NULL, worker_main, sl) != 0) {
            sl->state = TH_SLOT_FREE;
            return th_error_set(err, TH_EINTERNAL, "cannot start worker %u", i);
        }
        pthread_mutex_lock(&m->mu);
        m->active++;
        pthread_mutex_unlock(&m->mu);
    }
    return 0;
}

/* Waits until every worker but the lost ones returned, or until
 * `until_ns`; joins those that did.  Returns the number still running
 * (lost or not). */
static uint32_t join_workers(th_mgr *m, int64_t until_ns)
{
    uint32_t left = 0;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        uint32_t serving = 0;
        left = 0;
        for (uint32_t i = 0; i < m->nslots; i++)
            if (m->slots[i].state == TH_SLOT_RUN) {
                left++;
                serving += !m->slots[i].lost;
            }
        if (!serving || th_now_ns() >= until_ns)
            break;
        struct timespec ts;
        th_timespec_mono(&ts, until_ns);
        pthread_cond_timedwait(&m->exit_cv, &m->mu, &ts);
    }
    pthread_mutex_unlock(&m->mu);
    for (uint32_t i = 0; i < m->nslots; i++) {
        pthread_mutex_lock(&m->mu);
        bool done = m->slots[i].state == TH_SLOT_EXITED;
        if (done)
            m->slots[i].state = TH_SLOT_FREE;
        pthread_mutex_unlock(&m->mu);
        if (done)
            pthread_join(m->slots[i].thread, NULL);
    }
    return left;
}

/* The threads' part of th_mgr_destroy(): false when workers were abandoned
 * (detached, still inside tools). */
static bool stop_threads(th_mgr *m)
{
    pthread_mutex_lock(&m->mu);
    __atomic_store_n(&m->stop, true, __ATOMIC_RELEASE); /* read unlocked
                                                          by th_mgr_submit */
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    /* The deadline thread first: it starts no replacement from now on. */
    if (m->timer_started) {
        pthread_mutex_lock(&m->tmu);
        m->tstop = true;
        pthread_cond_signal(&m->tcv);
        pthread_mutex_unlock(&m->tmu);
        pthread_join(m->timer, NULL);
        m->timer_started = false;
    }
    /* Idle workers return at once; a lost one is not waited for, one
     * still running a call gets the lost-worker grace. */
    uint32_t left = join_workers(m, th_now_ns() + m->lost_grace_ns);
    if (left) {
        /* Nobody will join them: they free their own resources when (if)
         * their tools return. */
        pthread_mutex_lock(&m->mu);
        for (uint32_t i = 0; i < m->nslots; i++)
            if (m->slots[i].state != TH_SLOT_FREE) {
                pthread_detach(m->slots[i].thread);
                m->slots[i].state = TH_SLOT_FREE;
            }
        pthread_mutex_unlock(&m->mu);
        th_log_warn("shutdown: abandoning %u worker%s still inside tools that "
                    "ignore cancellation (not joined; the host's memory is kept "
                    "for them)",
                    (unsigned)left, left == 1 ? "" : "s");
        return false;
    }
    if (m->timer_started) {
        pthread_mutex_lock(&m->tmu);
        m->tstop = true;
        pthread_cond_signal(&m->tcv);
        pthread_mutex_unlock(&m->tmu);
        pthread_join(m->timer, NULL);
    }
    if (m->notifier_started) {
        pthread_mutex_lock(&m->nmu);
        m->nstop = true;
        pthread_cond_signal(&m->ncv);
        pthread_mutex_unlock(&m->nmu);
        pthread_join(m->notifier, NULL);
        m->notifier_started = false;
    }
    return true;
}

bool th_mgr_stop_threads(th_host *h)
{
    th_mgr *m = &h->mgr;
    if (!m->slots && !m->ts_groups)
        return true;
    return stop_threads(m);
}

bool th_mgr_destroy(th_host *h)
{
    th_mgr *m = &h->mgr;
    if (!m->slots && !m->ts_groups)
        return true;
    if (!stop_threads(m))
        return false;
    /* Calls still armed (none when every call ended) lose their entry. */
    for (size_t i = 0; i < m->hn; i++) {
        m->heap[i]->heap_idx = SIZE_MAX;
        m->ops->unref(m->heap[i]);
    }
    free(m->heap);
    while (m->tool_groups) {
        th_group *g = m->tool_groups;
        m->tool_groups = g->next;
        free(g->tool);
        free(g);
    }
    free(m->ts_groups);
    free(m->slots);
    pthread_cond_destroy(&m->exit_cv);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    pthread_cond_destroy(&m->slot_cv);
    pthread_mutex_destroy(&m->tmu);
    pthread_cond_destroy(&m->tcv);
    pthread_mutex_destroy(&m->nmu);
    pthread_cond_destroy(&m->ncv);
    memset(m, 0, sizeof *m);
    return true;
}
