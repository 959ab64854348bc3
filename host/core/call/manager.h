/* th/manager.h - internals of the host core: the host, sessions, calls and
 * the async manager (worker pool, deadline thread, progress notifier).
 * Private to the core: it sits beside its sources in host/core/, which
 * the fronts (host/rpc, host/cli, host/front) cannot include (make
 * check-layers); the white-box unit tests may.  docs/manager.md is the
 * picture in words, docs/architecture.md the layers.
 *
 * Lock order (a thread holding one may take those to its right only):
 *
 *   mgr->mu  ->  call->mu  ->  session->mu | host->dmu | host->tmu |
 *                              mgr->tmu | mgr->nmu | host->stmu
 *
 * mgr->mu comes first: th_mgr_submit marks a call it queues (phase
 * QUEUED) under it, and no thread takes mgr->mu while it holds a call's mu
 * (th_mgr_release, which takes it to give a group's slot back, runs with
 * no call's mu held; under one, as the one-turn end of th_mcall_run does,
 * only for a call holding no group's slot: no lock).  No two locks of the
 * right-hand group are ever held together, and no thread takes a call->mu
 * while holding any of them (they collect references, unlock, then lock
 * each call).  Event callbacks and front ops
 * run with no lock held.  th_stat.fast.lk (call_fast.c, a spin flag for a
 * tool's short-call transitions) is a leaf taken with no other lock held.
 */
#ifndef TH_MANAGER_H
#define TH_MANAGER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "th/buf.h"
#include "th/clock.h"
#include "th/config.h"
#include "th/host.h"
#include "out.h"
#include "call_fast.h"
#include "th/progress.h"
#include "th/tool.h"

/* ---- Small maps (mgr_map.c) ------------------------------------------- */

typedef struct th_u64map_node {
    uint64_t key;
    void *val;
    struct th_u64map_node *next;
} th_u64map_node;

/* uint64 -> pointer, chained; not locked (the owner's lock guards it). */
typedef struct th_u64map {
    th_u64map_node **b;
    size_t nb, n;
} th_u64map;

void th_u64map_init(th_u64map *m);
void th_u64map_destroy(th_u64map *m);
/* 0, or TH_ENOMEM. Replaces an existing value. */
int th_u64map_put(th_u64map *m, uint64_t key, void *val);
void *th_u64map_get(const th_u64map *m, uint64_t key);
void *th_u64map_del(th_u64map *m, uint64_t key);
/* Calls fn for every entry (fn must not change the map). */
void th_u64map_each(const th_u64map *m, void (*fn)(uint64_t k, void *v,
                                                    void *ud), void *ud);

/* The same with nodes the caller owns (embedded in what they map to: no
 * allocation per entry).  A map uses one kind or the other.  put_node:
 * 0, TH_ESTATE (the key is there), or TH_ENOMEM; del_node unlinks `n`;
 * destroy_unowned frees the map's own memory, not the nodes. */
int th_u64map_put_node(th_u64map *m, th_u64map_node *n, uint64_t key,
                       void *val);
void th_u64map_del_node(th_u64map *m, th_u64map_node *n);
void th_u64map_destroy_unowned(th_u64map *m);

uint64_t th_hash_bytes(const void *data, size_t len);

/* ---- Numbers (stats.c) --------------------------------------------------- */

#define TH_HIST_BUCKETS 128 /* 4 per power of two of microseconds */

/* One 10-second slice of the windowed latencies: `epoch` is the slice's
 * number (monotonic ns / TH_WIN_SLOT_NS); a slot whose epoch is not the
 * one asked for holds older numbers and is skipped (or reset, by the first
 * call that lands in its new slice). */
#define TH_WIN_SLOTS 30
#define TH_WIN_SLOT_NS 10000000000LL
typedef struct th_stat_slot {
    _Atomic int64_t epoch;
    atomic_uint hist[TH_HIST_BUCKETS];
} th_stat_slot;

/* One thread's part of a stats entry (stats.c): written only by the
 * thread holding shard slot i (plain loads and stores, no lock prefix),
 * summed with the entry's own atomics by every reader.  A slot outlives
 * its thread: the next thread given the slot counts on where it left.
 * The 5-minute window stays on the entry (one atomic add a call): per
 * thread it would cost 15.6 KiB per tool and thread (~1.1 KiB without). */
#define TH_STAT_SHARDS 32
typedef struct th_stat_shard {
    atomic_ulong calls, ok, failed, errors, timeouts, cancels, dup_rejected,
        busy, perm_denied, rate_limited, unavailable, backend_timeouts,
        plugin_crashed;
    atomic_ulong hist[TH_HIST_BUCKETS];
    atomic_ullong sum_ns;
} th_stat_shard;

typedef struct th_stat {
    char *tool;
    atomic_ulong calls, ok, failed, errors, timeouts, cancels, dup_rejected,
        busy, perm_denied, late, perm_asks, rate_limited, unavailable,
        backend_timeouts, plugin_crashed;
    atomic_ulong hist[TH_HIST_BUCKETS];
    atomic_ullong sum_ns;       /* of the latencies in hist */
    th_stat_slot win[TH_WIN_SLOTS]; /* the last 5 minutes, 10 s a slot */
    struct th_stat *next;
    _Atomic(th_stat_shard *) shard[TH_STAT_SHARDS]; /* made on first use */
    th_fast fast;               /* short calls on a front's thread
                                   (call_fast.c) */
} th_stat;

/* The counter of a call that ended with the tool error `code`, in `p` (a
 * th_stat or a th_stat_shard: the same member names).  The one mapping
 * of error codes to counted outcomes (count_error in call.c, OUTCOME in
 * stats.c; the audit log's outcome_of in audit.c says the same in words,
 * and TH_OUTCOMES in th/host.h gives each its /metrics label): a code not
 * named here is an `error`. */
#define TH_STAT_ERR_COUNTER(p, code)                                          \
    ((code) == TH_ETIMEOUT           ? &(p)->timeouts                         \
     : (code) == TH_ECANCELLED       ? &(p)->cancels                          \
     : (code) == TH_EDUPLICATE       ? &(p)->dup_rejected                     \
     : (code) == TH_EBUSY            ? &(p)->busy                             \
     : (code) == TH_EPERM            ? &(p)->perm_denied                      \
     : (code) == TH_ERATE_LIMITED    ? &(p)->rate_limited                     \
     : (code) == TH_EUNAVAILABLE     ? &(p)->unavailable                      \
     : (code) == TH_EBACKEND_TIMEOUT ? &(p)->backend_timeouts                 \
     : (code) == TH_EPLUGIN_CRASHED  ? &(p)->plugin_crashed                   \
                                     : &(p)->errors)

/* Sessions by front: each name in the order first seen (stats.c), then
 * "other": a front that gave no name, or one past the table. */
#define TH_FRONT_KINDS 13
#define TH_FRONT_EVS 24 /* TH_FRONT_EVENTS_MAX (th/front.h) */
unsigned th_stat_front_kind(const char *front);
/* Counts a session opened (session.c). */
void th_stat_session_opened(th_host *h, const char *front);

/* The entry of `tool`, created on first use; NULL when out of memory. */
th_stat *th_stat_get(th_host *h, const char *tool);
/* This thread's shard slot + 1 (stats.c), <= 0: none (yet). */
extern _Thread_local int th_stat_tl_slot;
/* n more (modulo 2^64) on a counter only this thread writes (its stats
 * shard's, its part of a th_mgr counter): a plain load and store, no lock
 * prefix.  Readers load it relaxed and add the parts. */
static inline void th_own_add(atomic_ulong *a, unsigned long n)
{
    atomic_store_explicit(a, atomic_load_explicit(a, memory_order_relaxed) + n,
                          memory_order_relaxed);
}
/* n more on one of th_mgr's per-thread parts of the shared counter `all`:
 * the calling thread's part when it holds a stats shard slot, else `all`
 * itself (an atomic add). */
#define th_mgr_own_add(m, part, all, n)                                      \
    do {                                                                     \
        int t_ = th_stat_tl_slot;                                            \
        if (t_ > 0)                                                          \
            th_own_add(&(m)->calls_sh[t_ - 1].part, (unsigned long)(n));     \
        else                                                                 \
            atomic_fetch_add(&(m)->all, (unsigned long)(n));                 \
    } while (0)
/* A call started (call_start.c): one more in the host's calls_total and,
 * with `st` (NULL: an unknown tool), in its tool's calls; on the calling
 * thread's shard (no lock-prefixed add).  Any thread. */
static inline void th_stat_call_started(th_host *h, th_stat *st);
/* A call of `st` ended with a result (call.c): ok or failed, on the
 * calling thread's shard.  Any thread. */
static inline void th_stat_count_done(th_stat *st, bool ok);
/* Their slow paths (stats.c): a thread without its slot or shard yet. */
void th_stat_call_started_slow(th_host *h, th_stat *st);
void th_stat_count_done_slow(th_stat *st, bool ok);
static inline void th_stat_count_done(th_stat *st, bool ok)
{
    int t = th_stat_tl_slot;
    th_stat_shard *sh = t > 0 ? atomic_load_explicit(&st->shard[t - 1],
                                                     memory_order_acquire)
                              : NULL;
    if (sh)
        th_own_add(ok ? &sh->ok : &sh->failed, 1);
    else
        th_stat_count_done_slow(st, ok);
}
void th_stat_latency(th_stat *st, int64_t ns);
/* The same at monotonic time `now_ns` (tests: a fake clock). */
void th_stat_latency_at(th_stat *st, int64_t ns, int64_t now_ns);
/* p50 and p99 (ms) of the calls that ended in the last `slots` slices
 * (the current one included) as of `now_ns`; 0 when none. */
void th_stat_window(th_stat *st, int64_t now_ns, unsigned slots,
                    double *p50_ms, double *p99_ms);
/* Frees an entry's shards (host close). */
void th_stat_free_shards(th_stat *st);

/* ---- Calls ------------------------------------------------------------------ */

typedef struct th_mcall th_mcall;

/* Where a call waits for a worker (th_mcall.qwhere, under the manager's
 * mu): nowhere, its class's queue, a group's park (held by a concurrency
 * limit). */
typedef enum th_qwhere {
    TH_QW_NONE,
    TH_QW_SYNC,
    TH_QW_ASYNC,
    TH_QW_PARK_SYNC,
    TH_QW_PARK_ASYNC,
} th_qwhere;

/* What only a call that runs, or is answered, needs (th_mcall.x): its
 * output streams, the tool's meta, a built-in's error, the caller()
 * strings, the tool's name for a tombstone (owner-only), and, under the
 * call's mu, the answer part: the final result, the pending progress, the
 * task's last message and times, the ABI 1.1 cancel hooks, the condition
 * variable.  Made when the call starts running (th_mcall_run), or when it
 * is answered before that (a queued call cancelled or timed out), so that
 * a call waiting in the queue (an async task among thousands) carries
 * none of it; a call that may run inline has it in its own allocation.
 * c->x is set once, under c->mu (or before the call is visible to another
 * thread), and stays until the call is freed (a tombstone keeps it). */
typedef struct th_mcall_x {
    th_out out, err;
    uint8_t *meta;
    size_t meta_len;
    int set_error;              /* built-ins: a tool error instead */
    char *set_error_msg;
    uint64_t retry_after_ms;    /* ABI 1.5 set_retry_after() (under mu) */
    char *caller_user;
    char caller_session[24];
    char tname[72];             /* the tool's name, set before execute()
                                   (x_open): a tombstone's */

    /* Under the call's mu. */
    pthread_cond_t cv;
    char *ack_msg;
    double ack_frac;            /* the acknowledging update's fraction,
                                   < 0 unknown; set with ack_msg */
    th_progress_slot prog;      /* the latest progress not yet delivered */
    th_result_copy final;
    int64_t start_wall_ms;      /* set when acknowledged (a task) */
    int64_t last_update_ms;
    char *last_msg;
    double last_frac;
    /* ABI 1.1 host callbacks (call_cb.c): the on_cancel() registration,
     * the cancel_fd() eventfd (-1 until asked for; closed when the call
     * is freed) */
    void (*cancel_fn)(void *ud);
    void *cancel_ud;
    int cancel_efd;
    /* ABI 1.4 (call_cb.c, under mu): the blocks write_block() added (NULL
     * until the first), the answers ask_client() handed out (kept until
     * the call is freed) */
    struct th_content *blocks;
    struct th_ask_answer *answers;
    uint32_t n_asks;            /* ask_client() calls made */
} th_mcall_x;

/* The audit log (host.audit, audit.c): th_audit_call_begin when the call
 * is recorded (the digest of the arguments as the caller sent them, the
 * traceparent it gave, kept in the audit log's table by call id: a queued
 * call stays as small as without an audit log); th_audit_call_end writes
 * its line when its final answer is decided (answer_locked, c->mu held). */
void th_audit_call_begin(th_mcall *c, const uint8_t *args, size_t len,
                         const char *traceparent);
void th_audit_call_end(th_mcall *c);

/* A call's final answer is decided (answer_locked, c->mu held): its
 * latency per tool, and its outcome and latency per toolset and per
 * front (stats.c). */
void th_stat_call_end(th_mcall *c);
/* Its counts, given: the latency `ns` of a call of `st` that ended at
 * monotonic `now`, and, when `fin` is final, its outcome under its toolset
 * and front (tests count through it from many threads). */
void th_stat_end_counts(th_host *h, th_stat *st, const char *toolset,
                        const char *front, const th_result_copy *fin,
                        int64_t ns, int64_t now);

/* What a concurrency limit belongs to. */
typedef enum th_group_kind {
    TH_GROUP_TOOLSET = 0, /* a toolset's max_concurrency (mgr->ts_groups) */
    TH_GROUP_OVERRIDE,    /* a tool override's max_concurrency in a toolset */
    TH_GROUP_SERIAL,      /* a TOOLHOST_TOOL_SERIAL tool: one at a time */
    TH_GROUP_PLUGIN       /* a TOOLHOST_PLUGIN_SERIAL plugin: one call of
                             any of its tools at a time (keyed by the
                             plugin's name, across generations) */
} th_group_kind;

/* A concurrency limit shared by calls (toolset, tool override, serial). */
typedef struct th_group {
    uint32_t limit;      /* 0: unlimited */
    uint32_t running;    /* calls holding a slot; under mgr->mu */
    th_mcall *park[2][2];/* [sync|async][head|tail] waiting for a slot */
    th_group_kind kind;
    int ts_idx;          /* OVERRIDE: its toolset; else unused */
    char *tool;          /* OVERRIDE, SERIAL: the tool; PLUGIN: the
                            plugin (owned) */
    struct th_group *next;
} th_group;

typedef enum th_phase {
    TH_PH_NEW = 0,
    TH_PH_PERM_WAIT,  /* waiting for a permission answer */
    TH_PH_QUEUED,     /* in the pool's queue or parked on a group */
    TH_PH_RUNNING,    /* execute() or suspended */
    TH_PH_OVER,       /* execution over (or never ran) */
    TH_PH_NOT_RUN     /* answered while NEW or QUEUED (answer_locked): it
                         never runs (th_mcall_run's start finds it so);
                         its end makes it OVER */
} th_phase;

/* The fields are ordered by size (pointers and 64-bit numbers, then
 * 32-bit ones, then the flags together) so that a queued call has no
 * padding: with the answer part in x (th_mcall_x) that keeps a queued
 * async task under 512 bytes in all (bench/startup.c).  Which lock
 * guards a field is said beside it: [mgr] mgr->mu, [dmu] host->dmu,
 * [tmu] mgr->tmu, [nmu] mgr->nmu, [owner] the thread running execute(),
 * then the plugin's, [mu] the call's mu. */
struct th_mcall {
    th_call_base base;          /* first: toolhost_call* is a th_mcall* */
    th_host *h;
    th_session *s;              /* a reference */
    th_config *cfg;             /* a reference: the config snapshot the call
                                   started under; every config read of the
                                   call path (toolset, timeout, limits,
                                   permission, duplicates) reads this one */
    th_mcall *parent;           /* (a reference) the call running on the thread that
                                   started this one inline, or NULL */
    const th_tool *tool;        /* pinned until the call is freed */
    th_stat *st;
    const th_toolset_cfg *ts;   /* in cfg; NULL for the task tools */
    const th_mock_cfg *mock;
    uint8_t *args;              /* validated arguments: owned, or (while
                                   args_borrowed) the caller's own bytes */
    size_t args_len;
    int64_t timeout_ms;         /* 0: none; set when the call is recorded
                                   (call_start.c, from its snapshot and
                                   its own timeout_ms option) */
    int64_t start_ns;           /* monotonic */
    _Atomic int64_t deadline_ns;/* 0: none */
    const th_tool_override *ov; /* in cfg: the tool's override in ts, or
                                   NULL; every reader of the override
                                   (timeout, concurrency, duplicates,
                                   output limits) reads this, no name
                                   lookup */

    th_u64map_node snode;       /* its node in s->calls (session->mu);
                                   a call in a call slot (cslot) enters
                                   only if it outlives its inline run */
    void *dup_link;             /* [dmu] its entry in the duplicate
                                   table (dup.c), or NULL */

    /* Pool [mgr]. */
    th_mcall *qnext, *qprev;    /* the list it waits in (qwhere): doubly
                                   linked, so a cancel takes it out in O(1) */
    uint32_t qseq;              /* its place in the arrival order (wraps:
                                   compared as a difference) */
    int n_groups;               /* of groups[] */
    th_group *groups[4];

    /* Deadline heap [tmu]. */
    size_t heap_idx;            /* SIZE_MAX: not in the heap */
    int64_t heap_ns;            /* its key: the deadline, or for a lost
                                   watch deadline + lost_worker_grace */

    /* Notifier queue [nmu]. */
    th_mcall *nnext;

    th_mcall_x *x;              /* [mu] NULL until the call runs or is
                                   answered; set once; kept by a tombstone */

    pthread_mutex_t mu;
    pthread_t deliverer;        /* [mu] */
    th_event_fn fn;             /* [mu] NULL once detached */
    void *ud;                   /* [mu] */
    const char *front;          /* th_call_opts.front, or NULL */

    int ts_idx;
    th_task_scope scope;
    atomic_int refs;
    atomic_int abort_code;      /* the cancel flag: 0, TH_ECANCELLED or
                                   TH_ETIMEOUT */
    int fin_oom;                /* [mu] answered with this error code while
                                   no x could be made: delivered without a
                                   stored result (out of memory) */

    uint16_t waiters;           /* [mu] threads in th_call_wait_locked */
    _Atomic uint8_t phase;      /* a th_phase (one byte: a queued call
                                   stays within 400 bytes); written under
                                   mu, except the run's start: one
                                   compare-and-swap NEW|QUEUED -> RUNNING
                                   by the thread that runs it, racing only
                                   an answer's NEW|QUEUED -> NOT_RUN (under
                                   mu): whichever comes first wins, as the
                                   two turns of mu did */
    bool args_borrowed;         /* args point into the buffer given to
                                   th_call_start: valid while that call
                                   runs on the caller's thread; copied
                                   (th_mgr_own_args) before the call is
                                   queued, waits for permission, or lives
                                   on after execute() (suspend) */
    bool is_async;              /* TOOLHOST_TOOL_ASYNC */
    bool no_progress, may_block, as_task;
    atomic_bool args_ok;        /* validated: its end counts in the latency
                                   numbers (atomic: the owner sets it
                                   unlocked while a canceller's answer may
                                   read it, relaxed both sides) */
    bool output_info;           /* th_call_opts.output_info */
    atomic_bool is_task;        /* acknowledged (readable without mu) */
    atomic_bool lost_watch;     /* [tmu] in the heap for the lost-worker
                                   check */
    bool confirm;               /* [dmu] confirm_duplicate: true */
    bool prep;                  /* [mgr] queued for a worker to run the
                                   stages that call plugin code
                                   (call_start.c) */
    bool has_slots;             /* [mgr] holds a slot in each group */

    /* [owner] */
    bool x_room;                /* x is in this allocation (c + 1) */
    bool x_ready;               /* x's output streams are set up */
    bool in_execute, suspended;
    bool completed;             /* complete() was called (once only) */
    bool ran;                   /* execute() was entered */
    bool inline_run;            /* runs on the caller's thread */
    bool on_front;              /* a short call running on a front's own
                                   thread (call_fast.c): it may not wait
                                   for that front's client (ask_client) */
    uint8_t islot;              /* its inline slot + 1 (th_mgr.islot), 0:
                                   none; the owner clears it when
                                   execute() returns */
    uint8_t cslot;              /* its call slot + 1 (th_mgr.cslot), 0:
                                   none; th_call_start clears it */
    uint8_t qwhere;             /* [mgr] the list it waits in: a th_qwhere */

    /* [mu] */
    bool answered;              /* the final answer is decided */
    bool no_heap;               /* never in the deadline heap from here
                                   on (an inline call whose slot the
                                   deadline thread never armed, or one
                                   of th_mgr_cslot_deadline until its
                                   slot is emptied armed: see
                                   armed_answered in call_start.c): the
                                   answer skips the heap's lock */
    bool acked;                 /* a task: RUNNING was (or is) sent */
    bool live_counted;          /* counted in the session's live tasks */
    bool in_session;            /* in s->calls */
    bool in_tasks;              /* in host->tasks */
    bool exec_counted;          /* counted in s->exec_live */
    bool delivering;
    bool notify_queued;
    bool pend_ack;
    /* [mu] final_owed: answered in its session's map with a callback
     * set (answer_locked), or out of its call slot with its final
     * callback still to return (th_call_slot_leave_locked): counted in
     * s->finals_owed until its final event's callback has returned
     * (deliver), for th_session_close, which no longer finds it.  Bits of one byte, both under mu: the record stays
     * within its 400 bytes (manager:queued_call_is_small). */
    bool pend_final : 1;
    bool final_owed : 1;
    bool rate_held : 1;         /* holds concurrent-call slots of the
                                   rate limits (rate.c, by call id),
                                   given back when the execution ends;
                                   set by th_call_start before it runs */

    /* ABI 1.1 host callbacks (call_cb.c), [mu]: whether cancellation
     * fired, a hook running (th_mcall_exec_end waits for it: no hook
     * after the call ended); the hook itself and the eventfd are in x. */
    bool cancel_fired, cancel_running, ended;

    /* Contract safety (call_cb.c, call.c), [mu].  `ended` above is set
     * when execution ends (before the result is built): from then on a
     * callback on the handle is a plugin's misuse, answered
     * TOOLHOST_ESTATE with one log line (`misuse_logged`).  A call whose
     * handle reached plugin code is not freed at its last reference but
     * becomes a tombstone (`tomb`: its contents freed, mu and the tool's
     * name kept) in the host's quarantine (TH_CALL_TOMBS newest), so that
     * a late callback finds valid memory that says "ended".  `ended` is
     * written under mu by th_mcall_set_ended (a release store), so that a
     * callback may read it without mu first (call_cb.c, stale). */
    bool misuse_logged;
    bool tomb;
};

/* Under c->mu: execution ended (see th_mcall.ended). */
static inline void th_mcall_set_ended(th_mcall *c)
{
    __atomic_store_n(&c->ended, true, __ATOMIC_RELEASE);
}

/* The call's duplicate policy and scope, from its snapshot (c->ts,
 * c->ov): the override's when it sets one, else the toolset's; a task
 * tool (no toolset) is `allow`. */
static inline th_dup_policy th_call_dup_policy(const th_mcall *c)
{
    if (!c->ts)
        return TH_DUP_ALLOW;
    return c->ov && c->ov->on_duplicate_call >= 0
               ? (th_dup_policy)c->ov->on_duplicate_call
               : c->ts->on_duplicate_call;
}
static inline th_dup_scope th_call_dup_scope(const th_mcall *c)
{
    if (!c->ts)
        return TH_DUPSCOPE_NAME_AND_ARGS;
    return c->ov && c->ov->duplicate_scope >= 0
               ? (th_dup_scope)c->ov->duplicate_scope
               : c->ts->duplicate_scope;
}
/* The byte limit of the call's `sem` stream (th_out_limit_ov's rule),
 * read through c->ov: no name lookup. */
static inline uint64_t th_call_out_limit(const th_mcall *c, uint32_t sem)
{
    return th_out_limit_ov(&c->cfg->limits, c->ts, c->ov, sem);
}

/* How many ended calls the host keeps as tombstones (see th_mcall.tomb):
 * a callback on a handle older than that is undefined behaviour again. */
#define TH_CALL_TOMBS 1024

/* The thread's running call (worker or inline), or NULL. */
th_mcall *th_mcall_current(void);

void th_mcall_ref(th_mcall *c);
void th_mcall_unref(th_mcall *c);

/* Answers the call with a tool error (code, message) unless it is already
 * answered; with TH_ECANCELLED or TH_ETIMEOUT also sets the cancel flag.
 * Returns true when this answer won.  Any thread, no lock held. */
bool th_mcall_abort(th_mcall *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Built-in tools: finish with a tool error instead of a result. */
void th_mcall_set_error(toolhost_call *call, int code, const char *msg);
/* The TH_E* code of a backend's status (ABI 1.5: TOOLHOST_UNAVAILABLE,
 * TOOLHOST_TIMEOUT, TOOLHOST_RATE_LIMITED) returned by `c`'s tool, or 0:
 * any other status, or a plugin built against a minor older than 1.5
 * (for which they are unknown statuses). */
int th_mcall_backend_status(const th_mcall *c, int status);

/* Submits a policy-checked call, already in the duplicate table
 * (th_dup_register), to the manager (deadline, inline or queue).
 * Consumes the caller's reference. */
void th_mgr_submit(th_mcall *c);

/* Borrowed arguments (th_mcall.args_borrowed) become the call's own copy;
 * nothing when they are already owned.  0 or TH_ENOMEM (the args stay
 * borrowed).  The caller makes sure no other thread reads c->args
 * meanwhile (c->mu held, or the call not yet visible as a task). */
int th_mgr_own_args(th_mcall *c);

/* Queues a recorded call for a pool worker to run its argument and
 * permission stages (th_call_prepare), which submit it; arms its deadline
 * meanwhile.  Answers `busy` when the queue is full.  Consumes the
 * caller's reference. */
void th_mgr_prepare(th_mcall *c);
/* An aborted call (abort_code set, answered) that still waits in a queue
 * or a group's park leaves it and is ended here, on the caller's thread
 * (it never runs: no plugin code), so that its place and its memory come
 * back now; left there, a full async class or group held it until a slot
 * freed, counted in `waiting` (`busy` for everyone else).  Nothing when it
 * waits nowhere (running, or never queued: an aborted call is not queued,
 * see th_mgr_submit).  Call with no lock held. */
void th_mgr_unqueue(th_mcall *c);

/* The host's current config with a reference for the caller (drop it with
 * th_config_unref): what a call, or anything that reads the config after
 * a reload may have happened, must use.  Any thread. */
/* (declared in th/host.h: th_host_config_get) */

/* A reload's swap: makes `nc` (whose reference the host takes) the
 * current config and drops the host's reference to the old one, which is
 * freed once the last call that started under it ends.  Reload thread. */
void th_host_config_swap(th_host *h, th_config *nc);

/* Runs the call on this thread (a worker, or inline): the call layer's
 * th_mgr_ops.run. */
void th_mcall_run(th_mcall *c);

/* What the manager, the task store and the duplicate table need of the
 * call layer (call*.c), which sits above them: the call layer hands its
 * table to th_mgr_init (th_call_mgr_ops), so none of them calls a symbol
 * of call*.c and the core's call graph has no cycle
 * (docs/architecture.md).  Each entry is the call layer's function of the
 * same name (th_mcall_run, th_mcall_ref, ...). */
typedef struct th_mgr_ops {
    void (*run)(th_mcall *c);
    th_mcall *(*current)(void);
    void (*ref)(th_mcall *c);
    void (*unref)(th_mcall *c);
    /* th_mcall_abort with a formatted message */
    bool (*abort)(th_mcall *c, int code, const char *msg);
    void (*never_run)(th_mcall *c, int code, const char *msg);
    void (*exec_end)(th_mcall *c, int status, bool ran);
    void (*notified)(th_mcall *c);
    void (*perm_expired)(th_mcall *c);
    int (*cancel)(th_session *s, uint64_t id);
} th_mgr_ops;

/* call.c: the call layer's table, given to th_mgr_init. */
extern const th_mgr_ops th_call_mgr_ops;

/* ---- The manager (manager.c) ------------------------------------------------ */

typedef enum th_slot_state {
    TH_SLOT_FREE = 0,   /* no thread */
    TH_SLOT_RUN,        /* a thread that has not returned */
    TH_SLOT_EXITED      /* returned; to be joined */
} th_slot_state;

/* A worker thread.  A worker is "lost" when the call it runs is still in
 * execute() lost_worker_grace after its deadline: it no longer counts in
 * the pool and a replacement starts in a free slot (there are workers +
 * max_lost_workers slots).  Under mgr->mu, except `thread`. */
typedef struct th_wslot {
    th_host *h;
    pthread_t thread;
    th_slot_state state;
    th_mcall *cur;              /* the call it runs; compared only */
    int64_t cur_since_ns;       /* when it took cur */
    bool lost;
    bool lent;                  /* its call waits for its client
                                   (th_mgr_lend): a replacement serves */
} th_wslot;

/* Inline call slots (th_mgr.islot): how many, how often the deadline
 * thread looks at them, and the shortest timeout that uses one (a shorter
 * one enters the heap at once, so its deadline is kept to the ms). */
#define TH_ISLOTS 64
/* Call slots (th_mgr.cslot): a thread's first slot for its call, its
 * second (TH_ISLOTS on) for a call that call makes (run_code's) */
#define TH_CSLOTS (2 * TH_ISLOTS)
#define TH_ISLOT_SCAN_NS 10000000LL
#define TH_ISLOT_MIN_TIMEOUT_MS 100
/* Scans in a row that find no call before the deadline thread stops
 * scanning (and a publisher must wake it): a steady stream of quick calls,
 * which a scan mostly finds between two calls, then costs the callers no
 * wake-up; an idle host, TH_ISLOT_LINGER more ticks. */
#define TH_ISLOT_LINGER 10

/* One slot a cache line (64 bytes apart: no two threads' slots share
 * one, whatever the host's alignment). */
typedef struct th_islot {
    _Atomic uintptr_t v;
    char pad[64 - sizeof(uintptr_t)];
} th_islot;

typedef struct th_mgr {
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* workers wait here */
    pthread_cond_t slot_cv;     /* nested inline calls wait for a slot */
    th_mcall *q[2][2];          /* [sync|async][head|tail] */
    uint32_t qseq;
    size_t waiting;             /* queued + parked */
    size_t cap;
    uint32_t nworkers, async_cap, async_running;
    int idle;
    int spinning;               /* workers spinning before they park */
    int spin_claimed;           /* queued calls left to the spinner */
    atomic_size_t nqueued;
    bool stop;
    th_wslot *slots;            /* nworkers + lost_cap */
    uint32_t nslots;
    uint32_t active;            /* serving workers (not lost, not gone) */
    uint64_t serial;            /* unique per host in this process (never
                                   reused): keys per-thread caches */
    uint32_t lost_cap;          /* host.max_lost_workers */
    uint32_t lost_now;          /* lost workers still in execute() */
    uint32_t lent_now;          /* workers whose call waits for its
                                   client (th_mgr_lend) */
    uint64_t lost_total;        /* workers ever counted lost */
    int64_t lost_grace_ns;      /* host.lost_worker_grace */
    pthread_cond_t exit_cv;     /* a worker returned (th_mgr_destroy) */
    th_group *ts_groups;        /* one per toolset */
    th_group *tool_groups;      /* overrides and serial tools, by key */
    atomic_ulong running, inline_calls, calls_total;
    /* calls_total's per-thread parts (stats.c, th_stat_call_started):
     * part i is written only by the thread holding stats shard slot i;
     * readers add them to calls_total. */
    struct {
        atomic_ulong n;
        /* running and inline_calls' parts, the same way (th_mgr_own_add):
         * a run's end may be counted by another thread than its start, so
         * a part of `run` may wrap below 0; readers add them modulo 2^64 */
        atomic_ulong run, inl;
        /* h->live_calls' parts: calls recorded and freed by this thread
         * (both only grow; th_host_live_calls reads them) */
        atomic_ulong lstart, lfree;
        char pad[64 - 5 * sizeof(atomic_ulong)];
    } calls_sh[TH_STAT_SHARDS];
    atomic_ulong inline_front, short_demoted, short_stuck; /* call_fast.c */

    /* Deadline heap. */
    pthread_mutex_t tmu;
    pthread_cond_t tcv;
    th_mcall **heap;
    size_t hn, hcap;
    int64_t timer_wake_ns;      /* when the deadline thread wakes next */
    int64_t gc_every_ns;        /* spill_dir cleaning period (0: off) */
    int64_t gc_next_ns;         /* next cleaning (monotonic) */
    bool tstop, timer_started;
    pthread_t timer;

    /* Inline calls not in the heap (islot_put, manager.c): a call running
     * inline on its caller's thread publishes itself in its thread's slot
     * (one compare-and-swap) instead of entering the heap; every
     * TH_ISLOT_SCAN_NS the deadline thread arms the calls that have run
     * that long.  A slot holds the call's pointer, with bit 0 while the
     * deadline thread looks at the call (the owner waits for it to go)
     * and bit 1 once it is armed.  islot_idle (set under tmu) says the
     * deadline thread sleeps without a scan due: a publisher then wakes
     * it.  islot_next_ns [tmu]: the next scan; islot_quiet [tmu]: the
     * scans in a row that found no call (TH_ISLOT_LINGER). */
    th_islot islot[TH_ISLOTS];
    atomic_bool islot_idle;
    int64_t islot_next_ns;
    unsigned islot_quiet;
    atomic_ulong islot_armed;   /* inline calls the deadline thread armed */
    atomic_ulong islot_scans;   /* its scans of the slots */
    atomic_ulong islot_wakes;   /* times a publisher woke it (islot_wake) */

    /* Call slots (th_mgr_cslot_put): an inline call that nothing of the
     * pool limits is published in its thread's slot from its record to
     * the end of its inline run instead of its session's call map; those
     * who look calls up by id (cancel, session close, tasks) look here
     * too.  A slot holds the call's pointer, with bit 0 while a reader
     * (or the deadline thread) looks at the call (the owner waits for it
     * to go), bit 1 (TH_CSLOT_SEEN) once a reader did (the owner's final
     * delivery then ends under the call's lock: th_mgr_cslot_clear) and
     * bit 2 (TH_CSLOT_ARMED) once the deadline thread armed it.  The
     * slot is the call's inline slot as well (one compare-and-swap in,
     * one out): the deadline thread's scan arms the running calls of
     * th_mgr_cslot_deadline from here, as it does the islot's. */
    th_islot cslot[TH_CSLOTS];

    /* Progress notifier. */
    pthread_mutex_t nmu;
    pthread_cond_t ncv;
    th_mcall *nq_head, *nq_tail;
    bool nstop, notifier_started;
    pthread_t notifier;

    const th_mgr_ops *ops;      /* the call layer's (th_mgr_init) */
} th_mgr;

int th_mgr_init(th_host *h, const th_mgr_ops *ops, th_error *err);
/* Stops and joins the threads.  A worker still in execute() after
 * lost_worker_grace (a tool that ignores cancellation) is not joined:
 * then returns false and frees nothing (the caller must leave the host's
 * memory alone too: the abandoned thread may still touch it).  True when
 * every thread was joined and everything freed. */
bool th_mgr_destroy(th_host *h);
/* Only the threads of th_mgr_destroy() (workers, deadline, notifier), the
 * structures stay: for a host abandoned with calls still running (a late
 * complete() still finds its groups and locks).  False as th_mgr_destroy. */
bool th_mgr_stop_threads(th_host *h);

/* Lost workers (see th_wslot): counted so far, and still stuck now. */
void th_mgr_lost(th_host *h, uint64_t *total, uint32_t *now);

/* Deadline heap: (re)arms the call at c->deadline_ns, or disarms it. */
int th_mgr_arm(th_host *h, th_mcall *c);
void th_mgr_disarm(th_host *h, th_mcall *c);
/* Owner of an inline call that holds a slot (c->islot), when execute()
 * returned (or the call does not run): takes it out of its slot (waiting
 * for the deadline thread to let go of it) and clears c->islot.  True
 * when the deadline thread armed it meanwhile (the heap has it: the
 * answer disarms it); false: it never was and never will be in the heap
 * unless armed again.  No lock held. */
bool th_mgr_islot_clear(th_host *h, th_mcall *c);

/* Call slots (th_mgr.cslot).  A call that will run inline on this thread
 * with nothing of the pool to take (the quick path of th_mgr_submit: it
 * may block, is not async, a delayed mock, nor under a concurrency
 * limit) takes its thread's slot when it is recorded (a nested call, its
 * thread's second slot: TH_CSLOTS),
 * instead of entering its session's call map: true, c->cslot set (its
 * owner's, the recording thread's).  False: not such a call, the host
 * stops, or the slot is taken (a call of a thread sharing it, or one
 * whose owner has not let go yet): the map as before.
 *
 * The invariant that makes the slot as good as the map for whoever looks
 * a call up: from its record until its owner clears the slot, the call
 * is in the slot (and valid: the slot holds a reference); the owner
 * clears it only once the call is answered (its answer delivered on the
 * owner's thread, or by a thread that took it from the slot) or has
 * entered the map (th_call_session_put_locked: it asks permission, is
 * suspended, or became a task).  No lock; any thread. */
bool th_mgr_cslot_put(th_host *h, th_mcall *c);
/* Owner: takes c out of its slot (waiting for a reader to let go).
 * Returns what the slot said of c: TH_CSLOT_SEEN when a reader visited
 * the slot while c was in it (so another thread may hold c, or have
 * taken its lock; without it no thread found c through the slot, and
 * none can from now on), TH_CSLOT_ARMED when the deadline thread armed
 * c from the slot (the heap holds it: an answered call is disarmed by
 * the caller). */
#define TH_CSLOT_SEEN 2u
#define TH_CSLOT_ARMED 4u
unsigned th_mgr_cslot_clear(th_host *h, th_mcall *c);
/* Whether the deadline thread arms `c` from its call slot (instead of
 * the heap or an inline slot: th_mgr_submit): a call run inline by its
 * owner in its call slot (`own`) with a timeout of
 * TH_ISLOT_MIN_TIMEOUT_MS or more. */
static inline bool th_mgr_cslot_deadline(const th_mcall *c, bool own)
{
    return own && c->timeout_ms >= TH_ISLOT_MIN_TIMEOUT_MS;
}
/* The calls of `s` in the slots, each with a reference for the caller:
 * up to cap of them.  No lock held. */
size_t th_mgr_cslot_collect(th_host *h, const th_session *s, th_mcall **out,
                            size_t cap);
/* How many calls of `s` in the slots are still executing (phase not
 * over: what s->exec_live counts for a call in the map).  No lock held
 * (it takes each call's mu). */
size_t th_mgr_cslot_running(th_host *h, const th_session *s);
/* The call `id` of s with a reference for the caller: in its call map
 * (s->mu) or a call slot (the map again when both missed: the call may
 * have moved from its slot to the map in between); NULL when neither has
 * it. */
th_mcall *th_mgr_session_call(th_session *s, uint64_t id);

/* Sets the period of the deadline thread's spill_dir cleaning (default
 * 60 s; the first one is at host open) and starts it over from now.  For
 * tests.  Any thread. */
void th_mgr_set_spill_gc_every(th_host *h, int64_t ms);

/* Hands a call with pending progress to the notifier thread. */
void th_mgr_notify(th_host *h, th_mcall *c);

/* Releases the call's group slots (wakes parked calls). */
void th_mgr_release(th_host *h, th_mcall *c);

/* th_now_ns(), th_wall_ms(): th/clock.h */

/* ---- Host, sessions --------------------------------------------------------- */

typedef struct th_builtin {
    th_plugin *p;
    th_builtin_member_fn member;
    void *ud;
} th_builtin;

/* A finished task in the task store (tasks.c), both scopes; under
 * host->tmu.  Readers take a reference (refs) and read it unlocked; it is
 * freed when it has left the store and its last reader is done. */
typedef struct th_kept {
    uint64_t task_id, session_id;
    uint32_t owner_uid;
    int ts_idx;
    th_task_scope scope;
    bool as_task;               /* th_call_opts.as_task */
    char *tool;
    int64_t started_ms, last_update_ms, ended_ms; /* Unix ms */
    int64_t expires_ns;         /* monotonic: ended + result_ttl */
    char *message;
    double fraction;
    uint8_t *args;
    size_t args_len;
    th_result_copy res;
    int refs;                   /* the store's one + readers' */
    struct th_kept *next;       /* store list, oldest end first */
} th_kept;

struct th_task_waiter;

/* discover.c: the search_tools index of one registry generation. */
typedef struct th_discovery th_discovery;

struct th_host {
    th_config *cfg;
    struct th_audit *audit;     /* host.audit, or NULL (audit.c) */
    struct th_rate *rate;       /* the rate limits' buckets (rate.c) */
    struct th_disabled *disabled; /* tools disabled at run time
                                   (disable.c) */
    th_registry *reg;
    th_plugin *task_plugin;
    th_builtin *builtins;
    size_t n_builtins;
    atomic_ulong next_id;
    th_mgr mgr;

    pthread_mutex_t mu;         /* sessions list */
    pthread_cond_t cv;
    th_session *sessions;
    bool closing;

    pthread_mutex_t dmu;        /* duplicate table */
    void **dup_b;
    size_t dup_nb, dup_n;

    pthread_mutex_t tmu;        /* toolset-scoped tasks, the task store */
    th_u64map tasks;            /* live toolset-scoped tasks -> call (ref) */
    th_u64map kept;             /* finished tasks (both scopes) -> th_kept */
    th_kept *kept_head, *kept_tail;
    size_t n_kept;
    uint64_t n_dropped;         /* finished tasks dropped by task_keep */
    struct th_task_waiter *waiters; /* th_task_wait()s in progress */

    pthread_mutex_t stmu;       /* stats table (insert only) */
    _Atomic(th_stat *) stat_b[256]; /* lock-free reads */
    atomic_ulong live_calls;    /* calls not yet freed, plus 1 while the
                                   host is open (th_host_close drops it),
                                   with mgr.calls_sh's lstart - lfree
                                   (a thread with a stats shard slot counts
                                   there): th_host_live_calls.  call_free
                                   of a closing host takes mu */
    /* The quarantine of ended calls (call.c): a ring that a tombstone
     * enters with one atomic exchange, taking out the one TH_CALL_TOMBS
     * tombstones older (destroyed by whoever took it out); no lock. */
    _Atomic(th_mcall *) tomb_ring[TH_CALL_TOMBS];
    atomic_size_t tomb_at;
    atomic_ulong sess_opened[TH_FRONT_KINDS]; /* per front (stats.c) */
    atomic_ulong front_ev[TH_FRONT_KINDS][TH_FRONT_EVS]; /* per front, reason
                                                  (stats.c) */

    /* Hot reload (reload_host.c).  `reloader` is set at open (NULL with
     * host.reload off) and freed at close.  A config a reload replaced
     * lives as long as a call holds a reference to it (host_config.c). */
    struct th_reloader *reloader;

    /* What the fronts asked to run at close, after every plugin is
     * closed (th_host_at_close), newest first. */
    struct th_at_close *at_close;

    /* Discovery (discover.c): the current search index, swapped whole by
     * th_discover_rebuild; discmu is a leaf lock.  `discovery` false for
     * good when the host opened without search_tools (its config
     * deferred nothing, or a plugin has a tool of that name): nothing is
     * deferred then.
     * any_deferred: the index holds a deferred tool (search_tools is
     * listed then). */
    pthread_mutex_t discmu;
    th_discovery *disc;
    atomic_bool any_deferred;
    bool discovery;             /* disc is set: written at open only */

    /* Views (session.c, th_session_view_digest): the digest of a list a
     * front renders, kept once for every session that sees the same
     * lists (the same usable toolsets), until the next reload that
     * changes tools (th_host_views_reset, reload_host.c).  The digest is
     * computed under viewmu, so viewmu comes before the registry's lock,
     * the config's and every session's mu; nothing takes it while holding
     * one of those.  At most one entry per (digest function, view): the
     * views are the sets of toolsets the configured principals may use,
     * and a reload drops them all. */
    pthread_mutex_t viewmu;
    struct th_view *views;
};

struct th_session {
    th_host *h;
    uint64_t id;
    th_principal who;
    th_front_ops ops;
    void *front_ud;
    bool *usable;               /* per toolset */
    size_t n_usable;            /* its length: the toolsets of the config
                                   at open (a reload cannot change it) */
    atomic_int refs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool closing;
    th_u64map calls;            /* in-flight calls and live tasks (refs);
                                   nodes embedded in the calls (snode) */
    size_t live_tasks;
    size_t exec_live;           /* session-scoped calls still executing */
    int ops_inflight;           /* tools_changed, log_call running */
    int finals_owed;            /* calls out of `calls` and of the call
                                   slots whose final event's callback has
                                   not returned yet (th_mcall.final_owed):
                                   th_session_close waits for them */
    th_session *prev, *next;
    /* The deferred tools search_tools found for this session (listed
     * from then on), under mu; gen: the index they were checked against
     * (discover.c). */
    struct {
        char **names;
        size_t n, cap;
        uint64_t gen;
    } found;
};

static inline void th_stat_call_started(th_host *h, th_stat *st)
{
    int t = th_stat_tl_slot;
    th_stat_shard *sh = t > 0 && st ? atomic_load_explicit(&st->shard[t - 1],
                                                           memory_order_acquire)
                                    : NULL;
    if (sh) {
        th_own_add(&h->mgr.calls_sh[t - 1].n, 1);
        th_own_add(&sh->calls, 1);
    } else {
        th_stat_call_started_slow(h, st);
    }
}

/* host.c: calls not yet freed, plus 1 while the host is open (see
 * th_host.live_calls). */
unsigned long th_host_live_calls(th_host *h);

void th_session_ref(th_session *s);
void th_session_unref(th_session *s);
/* Calls tools_changed outside every lock, unless the session closes. */
void th_session_tools_changed(th_session *s);
/* The same for a change of the task tools only (task_tools_changed, or
 * tools_changed when the front has none). */
void th_session_task_tools_changed(th_session *s);

/* toolsets.c: which toolset a call runs under. */

/* The toolset a session's call of `tool` runs under in the config `cfg`
 * (the caller's reference; first in config order that contains it and
 * that the session may use): its index, or -1 with *any set when some
 * toolset contains it. */
int th_host_pick_toolset(th_host *h, const th_config *cfg, th_session *s,
                         const th_tool *tool, bool *any);
bool th_host_toolset_has(th_host *h, const th_toolset_cfg *ts,
                         const th_tool *tool);
const th_tool_override *th_host_override(const th_toolset_cfg *ts,
                                         const char *tool);

/* task_tools.c: the task tools (get_running_tasks, cancel_task). */
extern const toolhost_plugin th_task_tools_plugin;

/* discover.c: deferred tools and search_tools (docs/gateway.md). */
#define TH_SEARCH_TOOL_NAME "search_tools"
extern const toolhost_plugin th_search_tools_plugin;
bool th_search_tools_member(const th_toolset_cfg *ts, const char *tool,
                            void *ud);
/* Builds the index of the registry's plugin tools under cfg and makes it
 * the current one.  From the thread that opens the host or reloads it.
 * 0 or TH_ENOMEM (the previous index stays). */
int th_discover_rebuild(th_host *h, const th_config *cfg, th_error *err);
/* Drops the index; at host_free. */
void th_discover_close(th_host *h);
/* toolsets.c: whether t is a built-in (task tools, search_tools,
 * run_code), and whether it is deferred under cfg (never a built-in). */
bool th_host_is_builtin(const th_host *h, const th_tool *t);
bool th_host_tool_deferred(const th_host *h, const th_config *cfg,
                           const th_tool *t);
/* session.c: drops every kept view (th_session_view_digest): a reload
 * changed the tools or the config.  Called after the swap, before the
 * sessions are told. */
void th_host_views_reset(th_host *h);
/* session.c: what th_session_view_digest did so far on the calling
 * thread: digests computed, digests shared. */
void th_host_views_counts(uint64_t *computed, uint64_t *shared);

/* session.c: whether session s lists t (not deferred, or found by its
 * search); any thread. */
bool th_session_tool_listed(th_session *s, const th_config *cfg,
                            const th_tool *t);
/* session.c: adds names (deferred tools search_tools found) to the
 * session's list; *added when one was new.  When gen differs from the
 * generation of the names it holds, those keep() refuses are dropped
 * first.  0 or TH_ENOMEM (what was added stays). */
int th_session_found_add(th_session *s, uint64_t gen,
                         bool (*keep)(void *ud, const char *name), void *ud,
                         const char *const *names, size_t n, bool *added);
/* tasks.c: the task store. */
/* Kept for call.c (it calls it for toolset-scoped tasks with host->tmu
 * held): a no-op now, the store records every task in th_dup_remove(). */
void th_tasks_keep_locked(th_host *h, uint64_t task_id, int ts_idx,
                          const th_result_copy *res);
/* Frees the store and the duplicate table (host close). */
void th_tasks_destroy(th_host *h);
/* The answer hook: call.c's answer_locked() calls it once per call when
 * the call's answer is decided (c->mu held, c->final and c->answered set,
 * before the call leaves the session's and the host's tables).  For a task
 * (c->acked) it records the end in the task store and wakes
 * th_task_wait()ers; then it leaves the duplicate table (th_dup_leave).
 * (The name predates the store.) */
void th_dup_remove(th_mcall *c);

/* Duplicates (dup.c): checks and registers atomically.  0, or the
 * refusal's error code with its message in msg (msg_size bytes), which the
 * caller answers to the call (th_mcall_abort). */
int th_dup_register(th_mcall *c, char *msg, size_t msg_size);
/* Takes the call out of the duplicate table (host->dmu); drops its ref.
 * A call of policy `allow` never joined it: nothing to do, no call. */
void th_dup_leave_table(th_mcall *c);
static inline void th_dup_leave(th_mcall *c)
{
    if (th_call_dup_policy(c) != TH_DUP_ALLOW)
        th_dup_leave_table(c);
}
void th_dup_destroy(th_host *h);

/* mocks.c */
const th_mock_cfg *th_mock_find(const th_config *cfg, const char *tool);
int th_mock_execute(th_mcall *c);

/* call.c */
extern const th_call_vtbl th_mcall_vtbl;
extern _Thread_local bool th_mgr_tl_worker; /* manager.c: a pool worker */
/* A call on this thread is about to wait for its client (ask_client):
 * when the thread is one of h's workers, it leaves the pool's count and a
 * replacement starts in a free slot (the workers + host.max_lost_workers
 * slots lost workers use), so callers that wait on their clients cannot
 * take every worker; the thread serves again, or ends when the pool is
 * full, once its call returns.  0 (lent, or not a worker: nothing to
 * lend), TH_EBUSY (no free slot: the wait would take a worker for good;
 * the caller refuses it). */
int th_mgr_lend(struct th_host *h);
/* manager.c: whether this worker holds an async slot for the call it runs. */
bool th_mgr_tl_async_get(void);
void th_mgr_tl_async_set(bool v);
/* Takes one async slot for a worker whose call became a task. */
void th_mgr_async_take(th_host *h);
/* The notifier's delivery of a call's pending progress (drops the ref). */
void th_mcall_notified(th_mcall *c);
/* Stops events to the front; waits for a callback running elsewhere. */
void th_mcall_detach(th_mcall *c);
/* The timer's work for a call whose permission question expired. */
void th_mcall_perm_expired(th_mcall *c);
/* Answers a call that never runs and drops the execution reference. */
void th_mcall_never_run(th_mcall *c, int code, const char *msg);
/* The same with a retry-after hint in the answer (th_result.retry_after_ms;
 * the rate limits' wait). */
void th_mcall_never_run_retry(th_mcall *c, int code, const char *msg,
                              uint64_t retry_after_ms);
/* Finishes execution with `status` (TOOLHOST_OK / FAILED), answering the
 * call unless it is already answered.  Owner thread. */
void th_mcall_exec_end(th_mcall *c, int status, bool ran);

/* Frees the host's quarantine of ended calls (host close). */
void th_call_tombs_destroy(th_host *h);

/* The toolset ACL of session.c (allow_users/allow_groups, both empty:
 * everyone), for the admin list (admin.c). */
bool th_acl_allows(const th_toolset_cfg *ts, const th_principal *who);

/* Whether `entry` (a user name or a numeric uid, as allow_users lists
 * them) names `who`: a named caller (a token's or NATS user) by its name
 * only, any other by its uid. */
bool th_principal_is(const th_principal *who, const char *entry);

#endif
