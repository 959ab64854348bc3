/* call_fast.c - short calls on a front's own thread: the one policy.
 *
 * A front says only what its thread is (th/host.h): short_inline, an event
 * loop shared by many clients (the RPC server), or short_client, a thread
 * that serves one client (the MCP stdio input thread, one HTTP
 * connection's thread).  On either, only a tool declared
 * TOOLHOST_TOOL_SHORT runs there: what a call costs may depend on its
 * arguments (a grep pattern, a path, a command line), so a tool seen fast
 * on earlier calls proves nothing about the next one, and nothing can take
 * a front's thread back from a call running on it (its deadline included).
 * Such a call runs as a caller that waits would (may_block): every stage
 * is the same as on a worker (lookup, policy, validation, permission, the
 * manager's limits - a full group or a stopping manager still queues -,
 * output limits, stats); what the front saves is the hand-off to a worker
 * and back.
 *
 * The state is per tool name, host-wide (th_stat.fast): what one front or
 * session learns, every other uses.  The core times the whole inline
 * stretch of th_call_start (hooks, execute, result, the front's callback:
 * what held the front's thread) and demotes a declared tool that overruns.
 * Every constant is in call_fast.h, derived from host.short_call_max; 0
 * turns the path off on every front.
 */
#include "call_fast.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "manager.h"
#include "th/clock.h"
#include "th/log.h"
#include "toolhost/plugin.h"

static void fast_lock(th_fast *f)
{
    while (atomic_exchange_explicit(&f->lk, true, memory_order_acquire))
        sched_yield();
}

static void fast_unlock(th_fast *f)
{
    atomic_store_explicit(&f->lk, false, memory_order_release);
}

static bool fast_on(unsigned st)
{
    return st != TH_FAST_OFF;
}

bool th_fast_pick(th_fast *f, uint64_t max_ns, int64_t now)
{
    if (!max_ns)
        return false;
    unsigned st = atomic_load_explicit(&f->state, memory_order_relaxed);
    if (fast_on(st))
        return true;
    int64_t at = atomic_load_explicit(&f->retry_ns, memory_order_relaxed);
    if (!at || now < at)
        return false;
    /* one try per back-off: the thread that moves retry_ns on tries */
    fast_lock(f);
    bool mine = atomic_load(&f->state) == TH_FAST_OFF &&
                atomic_load(&f->retry_ns) == at;
    if (mine)
        atomic_store(&f->retry_ns, now + f->backoff_ns);
    fast_unlock(f);
    return mine;
}

/* (lk held) back to workers until a try at now + the back-off. */
static void demote(th_fast *f, uint64_t max_ns, int64_t now)
{
    int64_t base = (int64_t)max_ns * TH_FAST_BACKOFF_MUL;
    int64_t top = base * TH_FAST_BACKOFF_MAX_MUL;
    f->backoff_ns = f->backoff_ns ? f->backoff_ns * 2 : base;
    if (f->backoff_ns > top)
        f->backoff_ns = top;
    f->overruns = 0;
    atomic_store(&f->retry_ns, now + f->backoff_ns);
    atomic_store(&f->state, TH_FAST_OFF);
}

th_fast_outcome th_fast_inline_end(th_fast *f, uint64_t max_ns, int64_t ns,
                                   int64_t now, int64_t *backoff_ns,
                                   unsigned *overruns)
{
    if (!max_ns)
        return TH_FAST_KEPT;
    int64_t limit = (int64_t)max_ns;
    unsigned st = atomic_load_explicit(&f->state, memory_order_relaxed);
    /* the common case, without the lock: in time, nothing to reset */
    if (ns <= limit && fast_on(st))
        return TH_FAST_KEPT;
    th_fast_outcome r = TH_FAST_KEPT;
    fast_lock(f);
    st = atomic_load(&f->state);
    if (st == TH_FAST_OFF) {
        /* the one try after a back-off */
        if (ns <= limit) {
            f->overruns = 0;
            atomic_store(&f->retry_ns, 0);
            atomic_store(&f->state, TH_FAST_ON);
            r = TH_FAST_PROMOTED;
        } else {
            demote(f, max_ns, now);
            r = TH_FAST_DEMOTED;
        }
    } else if (ns > limit) {
        f->overruns++;
        bool out = ns > (int64_t)max_ns * TH_FAST_HARD_MUL ||
                   f->overruns >= TH_FAST_DECLARED_OVERRUNS;
        if (out)
            demote(f, max_ns, now);
        r = out ? TH_FAST_DEMOTED : TH_FAST_OVERRUN;
    }
    if (r == TH_FAST_DEMOTED && backoff_ns)
        *backoff_ns = f->backoff_ns;
    if (overruns)
        *overruns = f->overruns;
    fast_unlock(f);
    return r;
}

/* ---- The core's side -------------------------------------------------------- */

bool th_call_fast_ok(const th_tool *t)
{
    return t && !(t->flags & TOOLHOST_TOOL_ASYNC) && t->plugin &&
           !t->plugin->iso;
}

/* The rest of th_call_fast_pick, off its hot path: a demoted tool (its
 * retry after the back-off). */
__attribute__((noinline, cold)) static bool pick_rest(th_stat *st,
                                                      uint64_t max_ms)
{
    /* the clock only matters to a demoted tool (its retry) */
    int64_t now = atomic_load_explicit(&st->fast.state,
                                       memory_order_relaxed) == TH_FAST_OFF
                      ? th_now_ns()
                      : 0;
    return th_fast_pick(&st->fast, max_ms * 1000000u, now);
}

bool th_call_fast_pick(th_host *h, uint64_t max_ms, th_stat *st,
                       const th_tool *t, const th_call_opts *o)
{
    (void)h;
    /* Only a tool that declares itself short: what a call costs may
     * depend on its arguments (a pattern, a path, a command), so a tool
     * fast on every call so far proves nothing about the next one, and a
     * front's thread cannot be taken back from a call that runs on it. */
    if (!max_ms || !st || o->may_block || !th_call_fast_ok(t) ||
        !(t->flags & TOOLHOST_TOOL_SHORT))
        return false;
    /* the hot case: a tool that runs inline now */
    if (fast_on(atomic_load_explicit(&st->fast.state, memory_order_relaxed)))
        return true;
    return pick_rest(st, max_ms);
}

/* What an inline run changed, said in the log and counted (cold). */
__attribute__((noinline, cold)) static void
inline_report(th_host *h, uint64_t max_ms, const th_tool *t, uint64_t call_id,
              int64_t ns, th_fast_outcome r, int64_t backoff,
              unsigned overruns)
{
    double ms = (double)ns / 1e6;
    switch (r) {
    case TH_FAST_KEPT:
        break;
    case TH_FAST_OVERRUN:
        th_log_warn("tool=%s is declared short but call=%llu held the "
                    "front's thread %.1f ms (host.short_call_max %llu ms; "
                    "overrun %u of %u before its calls go to workers)",
                    t->name, (unsigned long long)call_id, ms,
                    (unsigned long long)max_ms, overruns,
                    (unsigned)TH_FAST_DECLARED_OVERRUNS);
        break;
    case TH_FAST_DEMOTED:
        atomic_fetch_add(&h->mgr.short_demoted, 1);
        th_log_warn("tool=%s is declared short but call=%llu held the "
                    "front's thread %.1f ms (host.short_call_max %llu ms): "
                    "its calls run on workers from now on (tried on the "
                    "front's thread again in %.1f s)",
                    t->name, (unsigned long long)call_id, ms,
                    (unsigned long long)max_ms, (double)backoff / 1e9);
        break;
    case TH_FAST_PROMOTED:
        th_log_info("tool=%s is declared short: call=%llu took %.3f ms on "
                    "the front's thread after its back-off: it runs there "
                    "again",
                    t->name, (unsigned long long)call_id, ms);
        break;
    }
}

/* (lk held) a call the watchdog found stuck has returned: when it was
 * the last one of its tool, the back-off starts now. */
static void stuck_done(th_fast *f, int64_t now)
{
    if (f->stuck)
        f->stuck--;
    if (!f->stuck && atomic_load(&f->state) == TH_FAST_OFF &&
        atomic_load(&f->retry_ns) == INT64_MAX)
        atomic_store(&f->retry_ns, now + f->backoff_ns);
}

/* A stuck call that returned without its thread seeing the flag (a
 * thread's loads may pass the watchdog's stores: wd_scan), or whose
 * thread moved to another host or exited before the next scan: finished
 * now, so its tool's back-off starts.  g_wd_mu held and the slot's host
 * alive (th_call_fast_host_close clears sl->h under g_wd_mu before the
 * host's stats go): flag_st is valid. */
static void flag_finish(th_fast_slot *sl, int64_t now)
{
    uint64_t fl = atomic_load(&sl->flagged);
    if (!fl)
        return;
    th_stat *fst = atomic_load(&sl->flag_st);
    fast_lock(&fst->fast);
    if (atomic_load(&sl->flagged) == fl) {
        atomic_store(&sl->flagged, 0);
        stuck_done(&fst->fast, now);
    }
    fast_unlock(&fst->fast);
}

/* The end of an inline run that was slow or flagged: true when the
 * watchdog had demoted this very call while it ran (then nothing more is
 * decided or counted: it was, once). */
__attribute__((noinline, cold)) static bool
stuck_end(th_fast_slot *sl, th_stat *st, const th_tool *t, uint64_t call_id,
          int64_t ns, int64_t now)
{
    th_fast *f = &st->fast;
    fast_lock(f);
    bool mine = atomic_load(&sl->flagged) == call_id &&
                atomic_load(&sl->flag_st) == st;
    if (mine) {
        atomic_store(&sl->flagged, 0);
        stuck_done(f, now);
    }
    int64_t backoff = f->backoff_ns;
    fast_unlock(f);
    if (mine)
        th_log_warn("tool=%s call=%llu returned after holding the front's "
                    "thread %.1f ms (demoted while it ran): its calls run "
                    "on workers, tried on the front's thread again in "
                    "%.1f s",
                    t->name, (unsigned long long)call_id, (double)ns / 1e6,
                    (double)backoff / 1e9);
    return mine;
}

void th_call_fast_inline_end(th_host *h, uint64_t max_ms, th_stat *st,
                             const th_tool *t, uint64_t call_id, int64_t t0,
                             int64_t t1, bool ran)
{
    if (ran)
        atomic_fetch_add_explicit(&h->mgr.inline_front, 1,
                                  memory_order_relaxed);
    /* the watchdog's slot: the run is over */
    th_fast_slot *sl = th_fast_tl;
    if (sl) {
        atomic_store_explicit(&sl->t0, 0, memory_order_release);
        if (__builtin_expect(
                t1 - t0 > (int64_t)(max_ms * 1000000u) ||
                    atomic_load_explicit(&sl->flagged, memory_order_relaxed),
                0) &&
            stuck_end(sl, st, t, call_id, t1 - t0, t1))
            return;
    }
    int64_t backoff = 0;
    unsigned overruns = 0;
    th_fast_outcome r = th_fast_inline_end(&st->fast, max_ms * 1000000u,
                                           t1 - t0, t1, &backoff, &overruns);
    if (r != TH_FAST_KEPT)
        inline_report(h, max_ms, t, call_id, t1 - t0, r, backoff, overruns);
}

/* ---- The watchdog (call_fast.h) -------------------------------------------- */

/* A host's watchdog: the record is made with the host's first slot; the
 * thread runs while the host's config wants it (short_call_max and
 * short_call_stuck both set) or once it has been started. */
typedef struct fast_wd {
    th_host *h;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    bool running;               /* (g_wd_mu) th was started */
    bool failed;                /* (g_wd_mu) a start failed (logged once) */
    struct fast_wd *next;
} fast_wd;

static pthread_mutex_t g_wd_mu = PTHREAD_MUTEX_INITIALIZER;
static fast_wd *g_wds;          /* (g_wd_mu) one per host that has one */
static th_fast_slot *g_slots;   /* (g_wd_mu) every slot, reused */
static pthread_key_t g_slot_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static bool g_key_ok;

_Thread_local th_fast_slot *th_fast_tl;

/* A thread that ran short calls exits: its slot is free for another. */
static void slot_release(void *p)
{
    th_fast_slot *sl = p;
    pthread_mutex_lock(&g_wd_mu);
    if (atomic_load(&sl->h))
        flag_finish(sl, th_now_ns());
    atomic_store(&sl->flagged, 0);
    atomic_store(&sl->h, NULL);
    sl->in_use = false;
    pthread_mutex_unlock(&g_wd_mu);
}

static void key_make(void)
{
    g_key_ok = pthread_key_create(&g_slot_key, slot_release) == 0;
}

/* Reports a call stuck on its thread and demotes its tool (once per
 * call).  g_wd_mu held: the slot stays this host's. */
static void stuck_report(th_host *h, th_fast_slot *sl, th_stat *st,
                         uint64_t id, int64_t t0, int64_t now,
                         uint64_t max_ms, uint64_t stuck_ms)
{
    th_fast *f = &st->fast;
    bool demoted = false;
    fast_lock(f);
    /* still that call (the front clears t0 before it takes lk) */
    bool running = atomic_load(&sl->t0) == t0 && atomic_load(&sl->id) == id;
    if (running) {
        if (atomic_load(&f->state) != TH_FAST_OFF ||
            atomic_load(&f->retry_ns) != INT64_MAX) {
            /* as at the end of a slow run, but no retry until it has
             * returned (stuck_done) */
            demote(f, max_ms * 1000000u, now);
            atomic_store(&f->retry_ns, INT64_MAX);
            demoted = true;
        }
        f->stuck++;
        atomic_store(&sl->flag_st, st);
        atomic_store(&sl->flagged, id);
    }
    fast_unlock(f);
    if (!running)
        return;
    atomic_fetch_add(&h->mgr.short_stuck, 1);
    if (demoted)
        atomic_fetch_add(&h->mgr.short_demoted, 1);
    const th_tool *t = th_registry_acquire(h->reg, st->tool);
    const char *plugin = t && t->plugin && t->plugin->name ? t->plugin->name
                                                           : "?";
    bool shared = atomic_load(&sl->shared);
    th_log_warn("tool=%s is declared short but call=%llu has held %s "
                "(thread %d; plugin %s) "
                "for %lld ms so far (host.short_call_stuck %llu ms, "
                "host.short_call_max %llu ms): %s until it returns (a call "
                "cannot be taken off the thread it runs on); %s",
                st->tool, (unsigned long long)id,
                shared ? "the front's event loop" : "a front's thread",
                sl->tid, plugin, (long long)((now - t0) / 1000000),
                (unsigned long long)stuck_ms, (unsigned long long)max_ms,
                shared ? "every client of that loop waits"
                       : "its client waits",
                !demoted ? "its calls already run on workers"
                         : "its calls run on workers from now on");
    if (t)
        th_tool_release(t);
}

/* g_wd_mu held: one look at the host's slots; without `report` (the
 * watchdog turned off by a reload) only the flags of calls that have
 * returned are finished. */
static void wd_scan(th_host *h, int64_t now, uint64_t max_ms,
                    uint64_t stuck_ms, int64_t limit_ns, bool report)
{
    for (th_fast_slot *sl = g_slots; sl; sl = sl->next) {
        if (atomic_load(&sl->h) != h)
            continue;
        int64_t t0 = atomic_load_explicit(&sl->t0, memory_order_acquire);
        /* acquire: the second look at t0 below stays after these */
        uint64_t id = atomic_load_explicit(&sl->id, memory_order_acquire);
        th_stat *st = atomic_load_explicit(&sl->st, memory_order_acquire);
        /* a stuck call returned and its front missed the flag: finish */
        uint64_t fl = atomic_load(&sl->flagged);
        if (fl && (!t0 || id != fl))
            flag_finish(sl, now);
        if (!report || !t0 || !st || now - t0 < limit_ns || sl->warned == id)
            continue;
        if (atomic_load(&sl->t0) != t0 || atomic_load(&sl->id) != id)
            continue; /* it ended meanwhile */
        sl->warned = id;
        stuck_report(h, sl, st, id, t0, now, max_ms, stuck_ms);
    }
}

static void *wd_main(void *arg)
{
    fast_wd *w = arg;
    pthread_setname_np(pthread_self(), "th-shortwd");
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        pthread_mutex_unlock(&w->mu);
        th_config *cfg = th_host_config_get(w->h);
        uint64_t max_ms = cfg->host.short_call_max_ms;
        uint64_t stuck_ms = cfg->host.short_call_stuck_ms;
        th_config_unref(cfg);
        if (stuck_ms && stuck_ms < max_ms)
            stuck_ms = max_ms;
        int64_t limit = (int64_t)stuck_ms * 1000000;
        /* a quarter of the limit: reported within 1.25x of it */
        int64_t tick = limit ? limit / 4 : 250 * 1000000LL;
        if (tick < 2 * 1000000LL)
            tick = 2 * 1000000LL;
        if (tick > 250 * 1000000LL)
            tick = 250 * 1000000LL;
        pthread_mutex_lock(&g_wd_mu);
        wd_scan(w->h, th_now_ns(), max_ms, stuck_ms, limit,
                max_ms && stuck_ms);
        pthread_mutex_unlock(&g_wd_mu);
        struct timespec ts;
        th_timespec_mono(&ts, th_now_ns() + tick);
        pthread_mutex_lock(&w->mu);
        if (!w->stop)
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* g_wd_mu held: the host's watchdog record, made if need be (NULL when
 * out of memory). */
static fast_wd *wd_record(th_host *h)
{
    for (fast_wd *w = g_wds; w; w = w->next)
        if (w->h == h)
            return w;
    fast_wd *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    pthread_condattr_t ca;
    bool ok = pthread_condattr_init(&ca) == 0;
    if (ok) {
        ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
             pthread_cond_init(&w->cv, &ca) == 0;
        pthread_condattr_destroy(&ca);
    }
    if (!ok) {
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    w->h = h;
    w->next = g_wds;
    g_wds = w;
    return w;
}

/* g_wd_mu held: starts the host's watchdog thread when its config wants
 * one and it is not running.  A start that fails is logged once per host
 * and tried again at the next slot or reload (not on every call: the
 * slot is this host's either way, only not watched). */
static void wd_start(th_host *h)
{
    th_config *cfg = th_host_config_get(h);
    bool want = cfg->host.short_call_max_ms && cfg->host.short_call_stuck_ms;
    th_config_unref(cfg);
    fast_wd *w = want ? wd_record(h) : NULL;
    if (!w || w->running)
        return;
    w->stop = false;
    int rc = pthread_create(&w->th, NULL, wd_main, w);
    if (rc == 0) {
        w->running = true;
        if (w->failed)
            th_log_info("short calls: the watchdog thread started");
        w->failed = false;
        return;
    }
    if (!w->failed)
        th_log_warn("short calls: cannot start the watchdog thread (%s): "
                    "a short call stuck on a front's thread is not "
                    "reported until it returns (tried again when another "
                    "thread runs short calls, or at a reload)",
                    strerror(rc));
    w->failed = true;
}

void th_call_fast_config_changed(th_host *h)
{
    pthread_mutex_lock(&g_wd_mu);
    /* only a host whose fronts ran short calls: it has slots */
    bool any = false;
    for (th_fast_slot *sl = g_slots; sl && !any; sl = sl->next)
        any = atomic_load(&sl->h) == h;
    if (any)
        wd_start(h);
    pthread_mutex_unlock(&g_wd_mu);
}

bool th_call_fast_watched(th_host *h)
{
    pthread_mutex_lock(&g_wd_mu);
    bool on = false;
    for (fast_wd *w = g_wds; w && !on; w = w->next)
        on = w->h == h && w->running;
    pthread_mutex_unlock(&g_wd_mu);
    return on;
}

th_fast_slot *th_fast_slot_get(th_host *h)
{
    pthread_once(&g_key_once, key_make);
    if (!g_key_ok)
        return NULL;
    pthread_mutex_lock(&g_wd_mu);
    th_fast_slot *sl = th_fast_tl;
    if (!sl) {
        for (th_fast_slot *k = g_slots; k; k = k->next)
            if (!k->in_use) {
                sl = k;
                break;
            }
        if (!sl && (sl = calloc(1, sizeof *sl)) != NULL) {
            sl->next = g_slots;
            g_slots = sl;
        }
        if (sl) {
            sl->in_use = true;
            sl->tid = (int)syscall(SYS_gettid);
            if (pthread_setspecific(g_slot_key, sl) != 0) {
                sl->in_use = false;
                sl = NULL;
            }
        }
        th_fast_tl = sl;
    }
    if (sl) {
        /* the thread moves from another host (still open: its flag is
         * finished there) or comes back to this one */
        th_host *was = atomic_load(&sl->h);
        if (was && was != h)
            flag_finish(sl, th_now_ns());
        atomic_store(&sl->t0, 0);
        if (was != h)
            atomic_store(&sl->flagged, 0);
        sl->warned = 0;
        atomic_store(&sl->h, h);
        wd_start(h);
    }
    pthread_mutex_unlock(&g_wd_mu);
    return sl;
}

void th_call_fast_host_close(th_host *h)
{
    pthread_mutex_lock(&g_wd_mu);
    fast_wd *w = NULL;
    for (fast_wd **pp = &g_wds; *pp; pp = &(*pp)->next)
        if ((*pp)->h == h) {
            w = *pp;
            *pp = w->next;
            break;
        }
    for (th_fast_slot *sl = g_slots; sl; sl = sl->next)
        if (atomic_load(&sl->h) == h)
            atomic_store(&sl->h, NULL);
    pthread_mutex_unlock(&g_wd_mu);
    if (!w)
        return;
    if (w->running) {
        pthread_mutex_lock(&w->mu);
        w->stop = true;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
