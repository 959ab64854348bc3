/* call_fast.c - short calls on a front's own thread: the one policy.
 *
 * A front says only what its thread is (th/host.h): short_inline, an event
 * loop shared by many clients (the RPC server): only a tool declared
 * TOOLHOST_TOOL_SHORT runs there; short_client, a thread that serves one
 * client (the MCP stdio input thread, one HTTP connection's thread): a
 * declared tool, or one measured short on the workers, runs there.  Such a
 * call runs as a caller that waits would (may_block): every stage is the
 * same as on a worker (lookup, policy, validation, permission, the
 * manager's limits - a full group or a stopping manager still queues -,
 * output limits, stats); what the front saves is the hand-off to a worker
 * and back.
 *
 * The state is per tool name, host-wide (th_stat.fast): what one front or
 * session learns, every other uses.  The core times what it runs: the
 * whole inline stretch of th_call_start (hooks, execute, result, the
 * front's callback: what held the front's thread), and a sampled worker
 * run's execute().  Every constant is in call_fast.h, derived from
 * host.short_call_max; 0 turns the path off on every front.
 */
#include "call_fast.h"

#include <sched.h>

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

static bool fast_on(unsigned st, bool declared)
{
    return st == TH_FAST_ON || (st == TH_FAST_NEW && declared);
}

bool th_fast_pick(th_fast *f, bool declared, bool client, uint64_t max_ns,
                  int64_t now)
{
    if (!max_ns || (!declared && !client))
        return false;
    unsigned st = atomic_load_explicit(&f->state, memory_order_relaxed);
    if (fast_on(st, declared))
        return true;
    if (st != TH_FAST_OFF)
        return false;
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

bool th_fast_samples(const th_fast *f, bool declared)
{
    return !declared && atomic_load_explicit(&((th_fast *)f)->state,
                                             memory_order_relaxed) ==
                            TH_FAST_NEW;
}

/* (lk held) back to workers until a try at now + the back-off. */
static void demote(th_fast *f, uint64_t max_ns, int64_t now)
{
    int64_t base = (int64_t)max_ns * TH_FAST_BACKOFF_MUL;
    int64_t top = base * TH_FAST_BACKOFF_MAX_MUL;
    f->backoff_ns = f->backoff_ns ? f->backoff_ns * 2 : base;
    if (f->backoff_ns > top)
        f->backoff_ns = top;
    f->fast = 0;
    f->overruns = 0;
    atomic_store(&f->slow, 0);
    atomic_store(&f->retry_ns, now + f->backoff_ns);
    atomic_store(&f->state, TH_FAST_OFF);
}

th_fast_outcome th_fast_inline_end(th_fast *f, bool declared,
                                   uint64_t max_ns, int64_t ns, int64_t now,
                                   int64_t *backoff_ns, unsigned *overruns)
{
    if (!max_ns)
        return TH_FAST_KEPT;
    int64_t limit = declared ? (int64_t)max_ns
                             : (int64_t)max_ns / TH_FAST_MEASURED_SLOW_DIV;
    unsigned st = atomic_load_explicit(&f->state, memory_order_relaxed);
    /* the common case, without the lock: in time, nothing to reset */
    if (ns <= limit && fast_on(st, declared) &&
        atomic_load_explicit(&f->slow, memory_order_relaxed) == 0)
        return TH_FAST_KEPT;
    th_fast_outcome r = TH_FAST_KEPT;
    fast_lock(f);
    st = atomic_load(&f->state);
    if (st == TH_FAST_OFF) {
        /* the one try after a back-off */
        if (ns <= limit) {
            f->overruns = 0;
            atomic_store(&f->slow, 0);
            atomic_store(&f->retry_ns, 0);
            atomic_store(&f->state, TH_FAST_ON);
            r = TH_FAST_PROMOTED;
        } else {
            demote(f, max_ns, now);
            r = TH_FAST_DEMOTED;
        }
    } else if (ns <= limit) {
        atomic_store(&f->slow, 0);
    } else {
        atomic_fetch_add(&f->slow, 1);
        f->overruns++;
        bool out = ns > (int64_t)max_ns * TH_FAST_HARD_MUL ||
                   (declared ? f->overruns >= TH_FAST_DECLARED_OVERRUNS
                             : atomic_load(&f->slow) >=
                                   TH_FAST_MEASURED_SLOW_RUNS);
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

th_fast_outcome th_fast_worker_end(th_fast *f, uint64_t max_ns, int64_t ns)
{
    if (!max_ns || atomic_load(&f->state) != TH_FAST_NEW)
        return TH_FAST_KEPT;
    th_fast_outcome r = TH_FAST_KEPT;
    fast_lock(f);
    if (atomic_load(&f->state) == TH_FAST_NEW) {
        if (ns >= (int64_t)max_ns / TH_FAST_PROMOTE_DIV) {
            f->fast = 0;
        } else if (++f->fast >= TH_FAST_PROMOTE_RUNS) {
            f->fast = 0;
            atomic_store(&f->state, TH_FAST_ON);
            r = TH_FAST_PROMOTED;
        }
    }
    fast_unlock(f);
    return r;
}

/* ---- The core's side -------------------------------------------------------- */

bool th_call_fast_ok(const th_tool *t)
{
    return t && !(t->flags & TOOLHOST_TOOL_ASYNC) && t->plugin &&
           !t->plugin->iso;
}

/* The rest of th_call_fast_pick, off its hot path: a measured tool not
 * promoted (sampled on a worker), or a demoted one (its retry). */
__attribute__((noinline, cold)) static bool
pick_rest(th_stat *st, bool declared, bool client, uint64_t max_ms,
          bool *sample)
{
    /* the clock only matters to a demoted tool (its retry) */
    int64_t now = atomic_load_explicit(&st->fast.state,
                                       memory_order_relaxed) == TH_FAST_OFF
                      ? th_now_ns()
                      : 0;
    if (th_fast_pick(&st->fast, declared, client, max_ms * 1000000u, now))
        return true;
    *sample = client && th_fast_samples(&st->fast, declared);
    return false;
}

bool th_call_fast_pick(th_host *h, uint64_t max_ms, th_stat *st,
                       const th_tool *t, const th_call_opts *o, bool *sample)
{
    (void)h;
    *sample = false;
    if (!max_ms || !st || o->may_block || !th_call_fast_ok(t))
        return false;
    bool declared = t->flags & TOOLHOST_TOOL_SHORT;
    bool client = o->short_client;
    if (!declared && !client)
        return false;
    /* the hot case: a tool that runs inline now */
    if (fast_on(atomic_load_explicit(&st->fast.state, memory_order_relaxed),
                declared))
        return true;
    return pick_rest(st, declared, client, max_ms, sample);
}

/* What an inline run changed, said in the log and counted (cold). */
__attribute__((noinline, cold)) static void
inline_report(th_host *h, uint64_t max_ms, const th_tool *t, bool declared,
              uint64_t call_id, int64_t ns, th_fast_outcome r,
              int64_t backoff, unsigned overruns)
{
    double ms = (double)ns / 1e6;
    const char *kind = declared ? "is declared short but" : "(measured short)";
    switch (r) {
    case TH_FAST_KEPT:
        break;
    case TH_FAST_OVERRUN:
        if (declared)
            th_log_warn("tool=%s is declared short but call=%llu held the "
                        "front's thread %.1f ms (host.short_call_max %llu "
                        "ms; overrun %u of %u before its calls go to "
                        "workers)",
                        t->name, (unsigned long long)call_id, ms,
                        (unsigned long long)max_ms, overruns,
                        (unsigned)TH_FAST_DECLARED_OVERRUNS);
        break;
    case TH_FAST_DEMOTED:
        atomic_fetch_add(&h->mgr.short_demoted, 1);
        th_log_warn("tool=%s %s call=%llu held the front's thread %.1f ms "
                    "(host.short_call_max %llu ms): %s (tried on the "
                    "front's thread again in %.1f s)",
                    t->name, kind, (unsigned long long)call_id, ms,
                    (unsigned long long)max_ms,
                    declared ? "its calls run on workers from now on"
                             : "it runs on the workers again",
                    (double)backoff / 1e9);
        break;
    case TH_FAST_PROMOTED:
        th_log_info("tool=%s %s call=%llu took %.3f ms on the front's "
                    "thread after its back-off: it runs there again",
                    t->name, kind, (unsigned long long)call_id, ms);
        break;
    }
}

void th_call_fast_inline_end(th_host *h, uint64_t max_ms, th_stat *st,
                             const th_tool *t, uint64_t call_id, int64_t t0,
                             int64_t t1, bool ran)
{
    if (ran)
        atomic_fetch_add_explicit(&h->mgr.inline_front, 1,
                                  memory_order_relaxed);
    bool declared = t->flags & TOOLHOST_TOOL_SHORT;
    int64_t backoff = 0;
    unsigned overruns = 0;
    th_fast_outcome r =
        th_fast_inline_end(&st->fast, declared, max_ms * 1000000u, t1 - t0,
                           t1, &backoff, &overruns);
    if (r != TH_FAST_KEPT)
        inline_report(h, max_ms, t, declared, call_id, t1 - t0, r, backoff,
                      overruns);
}

void th_call_fast_worker_end(th_mcall *c, int64_t ns)
{
    uint64_t max_ms = c->cfg->host.short_call_max_ms;
    if (th_fast_worker_end(&c->st->fast, max_ms * 1000000u, ns) ==
        TH_FAST_PROMOTED)
        th_log_debug("tool=%s is short (execute %.3f ms on a worker, %d runs "
                     "in a row under %.1f ms): a front's own thread runs it",
                     c->tool->name, (double)ns / 1e6, TH_FAST_PROMOTE_RUNS,
                     (double)max_ms / TH_FAST_PROMOTE_DIV);
}
