/* call_fast.h - private to host/core: the one policy that decides which
 * calls a front's own thread runs itself (th_call_opts.short_inline,
 * th_call_opts.short_client; TOOLHOST_TOOL_SHORT), with the per-tool state
 * it keeps host-wide (in the tool's th_stat: one per tool name, for every
 * front and session, surviving reloads) and the numbers it counts.
 * docs/manager.md, "Short calls on a front's thread". */
#ifndef TH_CALL_FAST_H
#define TH_CALL_FAST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "th/tool.h"

struct th_host;
struct th_stat;
struct th_mcall;
struct th_call_opts;

/* ---- The constants, all of them here, derived from host.short_call_max
 * (`max`, ns; 0 turns the whole path off on every front) ---------------- */

/* An inline run of a declared tool longer than max holds the front's
 * thread too long (an overrun, logged); at its TH_FAST_DECLARED_OVERRUNS-th
 * overrun, or at once after one run over max * TH_FAST_HARD_MUL (100 ms
 * at the default), the tool is demoted (back to workers, one log line). */
#define TH_FAST_DECLARED_OVERRUNS 3
#define TH_FAST_HARD_MUL 10
/* A demoted tool is tried inline once more after a back-off of max *
 * TH_FAST_BACKOFF_MUL (1 s at the default), doubled at each demotion up to
 * TH_FAST_BACKOFF_MAX_MUL times that (64 s): one try per back-off; a try
 * within its limit makes it inline again, one over it demotes it again. */
#define TH_FAST_BACKOFF_MUL 100
#define TH_FAST_BACKOFF_MAX_MUL 64

/* The state of one declared tool (a member of its th_stat, zeroed at
 * creation). */
enum { TH_FAST_NEW = 0, TH_FAST_ON = 1, TH_FAST_OFF = 2 };
typedef struct th_fast {
    atomic_uint state;          /* TH_FAST_*; NEW and ON: inline, OFF:
                                   demoted (workers until its retry) */
    _Atomic int64_t retry_ns;   /* OFF: the next try inline (monotonic) */
    atomic_bool lk;             /* guards the transitions (tiny) */
    uint32_t overruns;          /* (lk) overruns since the last promotion */
    int64_t backoff_ns;         /* (lk) the current back-off */
    uint32_t stuck;             /* (lk) its calls the watchdog found stuck
                                   on a front's thread, not yet returned:
                                   while > 0 no retry (retry_ns max) */
} th_fast;

/* What th_fast_inline_end saw. */
typedef enum th_fast_outcome {
    TH_FAST_KEPT = 0,           /* nothing changed */
    TH_FAST_OVERRUN,            /* slow, not demoted yet */
    TH_FAST_DEMOTED,            /* back to workers (until retry) */
    TH_FAST_PROMOTED            /* a retry in time: inline again */
} th_fast_outcome;

/* ---- The policy itself: pure (a state, a clock), any thread ------------ */

/* Whether a call of a declared tool runs inline on a front's thread at
 * monotonic time `now` (max_ns 0: never).  A tool being retried after its
 * back-off is given one try per back-off. */
bool th_fast_pick(th_fast *f, uint64_t max_ns, int64_t now);
/* An inline run took `ns`; *backoff_ns is set on DEMOTED, *overruns (if
 * not NULL) to the overruns counted since the last promotion. */
th_fast_outcome th_fast_inline_end(th_fast *f, uint64_t max_ns, int64_t ns,
                                   int64_t now, int64_t *backoff_ns,
                                   unsigned *overruns);

/* ---- What th_call_start calls ---------------------------- */

/* Whether the tool may run on a front's thread at all: sync, not isolated
 * (an isolated call waits for another process), not a task tool. */
bool th_call_fast_ok(const th_tool *t);
/* th_call_start: whether this call runs inline on the caller (opts say
 * what the caller's thread is).  Only a tool declared TOOLHOST_TOOL_SHORT
 * ever does: a tool's cost may depend on its arguments, so no number of
 * fast calls makes the next one safe to run on a front's thread. */
bool th_call_fast_pick(struct th_host *h, uint64_t max_ms, struct th_stat *st,
                       const th_tool *t, const struct th_call_opts *o);
/* th_call_start, after an inline pick: the caller's thread was held from
 * t0 to t1 (monotonic ns: hooks, execute, the result and the front's
 * callback); `ran`: it ran there (not queued behind a full group).
 * Counts, logs, demotes. */
void th_call_fast_inline_end(struct th_host *h, uint64_t max_ms,
                             struct th_stat *st, const th_tool *t,
                             uint64_t call_id, int64_t t0, int64_t t1,
                             bool ran);

/* ---- The watchdog: a short call that does not return ---------------------
 * A call running on a front's thread cannot be taken off it (nothing
 * preempts a plugin's execute() in-process), and th_call_fast_inline_end
 * only learns how long it took when it returns.  So each thread that runs
 * short calls has a slot where th_call_fast_inline_begin stores the start
 * time (and which call: three plain stores); one thread per host (started
 * with the first such call on the host, joined by
 * th_call_fast_host_close) looks at
 * the slots every quarter of host.short_call_stuck.  A call that has held
 * its thread longer than that (at least short_call_max) is logged once
 * (tool, plugin, call, thread) and its tool demoted at once: its later
 * calls run on workers; the back-off (the retry on the front's thread)
 * starts only when the stuck call has returned.  Counted in
 * calls.short_demoted.  No thread while short_call_stuck or
 * short_call_max is 0 (a reload that sets both starts it). */
typedef struct th_fast_slot {
    _Atomic int64_t t0;             /* the inline run now: its start
                                       (monotonic ns), 0: none */
    _Atomic uint64_t id;            /* its call id */
    _Atomic(struct th_stat *) st;   /* its tool's stats entry */
    atomic_bool shared;             /* short_inline: a loop of many clients */
    _Atomic(struct th_host *) h;    /* the host it serves (g_wd_mu) */
    _Atomic uint64_t flagged;       /* (st->fast.lk) the call the watchdog
                                       demoted while it ran, 0: none */
    _Atomic(struct th_stat *) flag_st;
    uint64_t warned;                /* watchdog only: the call reported */
    int tid;                        /* the thread (its log lines) */
    bool in_use;                    /* (g_wd_mu) a live thread owns it */
    struct th_fast_slot *next;      /* every slot, never freed */
} th_fast_slot;

/* This thread's slot (NULL before its first inline call). */
extern _Thread_local th_fast_slot *th_fast_tl;
/* Cold: this thread's slot for host h (registered, the host's watchdog
 * started); NULL when out of memory (then the call is not watched). */
th_fast_slot *th_fast_slot_get(struct th_host *h);

/* th_call_start, right before an inline run that started at t0. */
static inline void th_call_fast_inline_begin(struct th_host *h,
                                             struct th_stat *st, uint64_t id,
                                             int64_t t0, bool shared)
{
    th_fast_slot *sl = th_fast_tl;
    if (__builtin_expect(!sl || atomic_load_explicit(
                                    &sl->h, memory_order_relaxed) != h,
                         0))
        sl = th_fast_slot_get(h);
    if (!sl)
        return;
    /* release: a watchdog that reads the new id or stats entry also sees
     * the 0 the last run's end stored in t0 (its second look at t0 then
     * tells an old start from this call's); plain stores on x86 */
    atomic_store_explicit(&sl->st, st, memory_order_release);
    atomic_store_explicit(&sl->id, id, memory_order_release);
    atomic_store_explicit(&sl->shared, shared, memory_order_relaxed);
    atomic_store_explicit(&sl->t0, t0, memory_order_release);
}

/* host_free, first: stops and joins the host's watchdog, releases its
 * slots.  Any host (a host without one: nothing). */
void th_call_fast_host_close(struct th_host *h);
/* A reload swapped the host's config: the watchdog starts if the new one
 * wants it and the host's fronts run short calls.  (One that runs stays:
 * turned off, it only finishes the flags of calls that have returned.) */
void th_call_fast_config_changed(struct th_host *h);
/* Whether the host's watchdog thread runs (tests, stats). */
bool th_call_fast_watched(struct th_host *h);

#endif
