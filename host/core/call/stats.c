/* stats.c - the per-tool numbers (counters and a latency histogram per
 * tool, lock-free reads) and the manager's host-wide snapshot.  Reads the
 * host's structures; calls nothing above it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manager.h"
#include "th/front.h"
#include "th/clock.h"

static th_stat *stat_get_in(th_host *h, _Atomic(th_stat *) *table,
                            size_t mask, const char *tool);

/* (A per-thread cache of the last entry looked up stood here: it bought
 * under 5% of an inline call in make bench, docs/fn-shape.md, and went.) */
th_stat *th_stat_get(th_host *h, const char *tool)
{
    return stat_get_in(h, h->stat_b, 255, tool);
}

static th_stat *stat_get_in(th_host *h, _Atomic(th_stat *) *table,
                            size_t mask, const char *tool)
{
    size_t b = th_hash_bytes(tool, strlen(tool)) & mask;
    _Atomic(th_stat *) *slot = &table[b];
    for (th_stat *s = atomic_load_explicit(slot, memory_order_acquire); s; s = s->next)
        if (strcmp(s->tool, tool) == 0)
            return s;
    pthread_mutex_lock(&h->stmu);
    th_stat *s;
    for (s = atomic_load_explicit(slot, memory_order_acquire); s; s = s->next)
        if (strcmp(s->tool, tool) == 0)
            break;
    if (!s && (s = calloc(1, sizeof *s))) {
        if (!(s->tool = strdup(tool))) {
            free(s);
            s = NULL;
        } else {
            s->next = atomic_load_explicit(slot, memory_order_relaxed);
            atomic_store_explicit(slot, s, memory_order_release);
        }
    }
    pthread_mutex_unlock(&h->stmu);
    return s;
}

/* Bucket 0: < 1 us; then 4 buckets per power of two of microseconds. */
static unsigned hist_bucket(int64_t ns)
{
    uint64_t us = ns > 0 ? (uint64_t)ns / 1000 : 0;
    if (us == 0)
        return 0;
    unsigned e = 63u - (unsigned)__builtin_clzll(us);
    unsigned frac = e >= 2 ? (unsigned)(us >> (e - 2)) & 3u : (unsigned)(us << (2 - e)) & 3u;
    unsigned b = 1 + e * 4 + frac;
    return b < TH_HIST_BUCKETS ? b : TH_HIST_BUCKETS - 1;
}

/* The upper bound of a bucket, in ms. */
static double hist_upper_ms(unsigned b)
{
    if (b == 0)
        return 0.001;
    unsigned e = (b - 1) / 4, frac = (b - 1) % 4;
    double lo = (double)(1ull << e) * (1.0 + frac / 4.0);
    double hi = lo + (double)(1ull << e) / 4.0;
    return hi / 1000.0;
}

/* ---- Per-thread shards ------------------------------------------------------
 * The counts of a call's end (th_stat_call_end) go to the calling thread's
 * shard of each entry: plain loads and stores on lines no other thread
 * writes, where an atomic add would take a lock-prefixed read-modify-write
 * on a line every calling thread shares.  A thread takes one of
 * TH_STAT_SHARDS slots on its first count and gives it back when it exits
 * (a key's destructor); the next thread to take the slot counts on in the
 * same shards, so nothing is folded and nothing lost.  Slots are handed
 * over under slot_mu: the new owner sees every store of the old one.  A
 * thread that finds no slot free counts with atomics on the entry itself,
 * and looks again every 4096 counts.  Readers sum the entry and its
 * shards. */
static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t slot_used; /* bit i: slot i held by a live thread */
static pthread_key_t slot_key;
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;
static bool slot_key_ok;
/* 0: no slot yet; i + 1: slot i; below 0: none free, counts up to 0
 * (read by manager.h's inline counters) */
_Thread_local int th_stat_tl_slot;
#define tl_slot th_stat_tl_slot

_Static_assert(TH_STAT_SHARDS <= 32, "slot_used has 32 bits");

static void slot_release(void *v)
{
    unsigned i = (unsigned)(uintptr_t)v - 1;
    pthread_mutex_lock(&slot_mu);
    slot_used &= ~(1u << i);
    pthread_mutex_unlock(&slot_mu);
    tl_slot = 0; /* a later destructor that counts takes a slot again */
}

static void slot_init(void)
{
    slot_key_ok = pthread_key_create(&slot_key, slot_release) == 0;
}

/* The calling thread's slot + 1, or <= 0 for none. */
static int slot_take(void)
{
    pthread_once(&slot_once, slot_init);
    int got = -1;
    if (slot_key_ok) {
        pthread_mutex_lock(&slot_mu);
        for (unsigned i = 0; i < TH_STAT_SHARDS; i++)
            if (!(slot_used & (1u << i))) {
                slot_used |= 1u << i;
                got = (int)i;
                break;
            }
        pthread_mutex_unlock(&slot_mu);
        if (got >= 0 &&
            pthread_setspecific(slot_key, (void *)(uintptr_t)(got + 1)) != 0) {
            slot_release((void *)(uintptr_t)(got + 1));
            got = -1;
        }
    }
    return tl_slot = got >= 0 ? got + 1 : -4096;
}

/* The calling thread's slot + 1, or <= 0 for none (then the counts go to
 * the entries with atomics). */
static inline int my_slot(void)
{
    int t = tl_slot;
    if (t > 0)
        return t;
    if (t < 0 && ++tl_slot < 0)
        return t;
    return slot_take();
}

static __attribute__((noinline)) th_stat_shard *shard_make(th_stat *st, int t)
{
    th_stat_shard *sh = calloc(1, sizeof *sh);
    if (sh) /* only slot t's owner makes its shard */
        atomic_store_explicit(&st->shard[t - 1], sh, memory_order_release);
    return sh;
}

/* Slot t's shard of `st` (t > 0), or NULL when out of memory. */
static inline th_stat_shard *shard_of(th_stat *st, int t)
{
    th_stat_shard *sh = atomic_load_explicit(&st->shard[t - 1], memory_order_acquire);
    return sh ? sh : shard_make(st, t);
}

void th_stat_free_shards(th_stat *st)
{
    for (unsigned i = 0; i < TH_STAT_SHARDS; i++)
        free(atomic_load_explicit(&st->shard[i], memory_order_relaxed));
}

/* th_own_add (manager.h) for the 64-bit sum. */
static inline void own_add_ull(atomic_ullong *a, unsigned long long n)
{
    atomic_store_explicit(a, atomic_load_explicit(a, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

static void win_count(th_stat *st, unsigned b, int64_t now_ns);

/* ---- A call's start and its outcome, on this thread's shard --------------- */

void th_stat_call_started_slow(th_host *h, th_stat *st)
{
    int t = my_slot();
    if (t <= 0) {
        atomic_fetch_add(&h->mgr.calls_total, 1);
        if (st)
            atomic_fetch_add(&st->calls, 1);
        return;
    }
    th_own_add(&h->mgr.calls_sh[t - 1].n, 1);
    th_stat_shard *sh = st ? shard_of(st, t) : NULL;
    if (sh)
        th_own_add(&sh->calls, 1);
    else if (st) /* out of memory for the shard */
        atomic_fetch_add(&st->calls, 1);
}

void th_stat_count_done_slow(th_stat *st, bool ok)
{
    int t = my_slot();
    th_stat_shard *sh = t > 0 ? shard_of(st, t) : NULL;
    if (sh)
        th_own_add(ok ? &sh->ok : &sh->failed, 1);
    else
        atomic_fetch_add(ok ? &st->ok : &st->failed, 1);
}

/* latency_b on this thread's shard (the window on the entry). */
static inline __attribute__((always_inline)) void
shard_latency(th_stat *st, th_stat_shard *sh, unsigned b, int64_t ns,
              int64_t now_ns)
{
    th_own_add(&sh->hist[b], 1);
    own_add_ull(&sh->sum_ns, ns > 0 ? (unsigned long long)ns : 0);
    win_count(st, b, now_ns);
}

/* An entry's numbers: its own atomics plus every shard's. */
typedef struct stat_sum {
    uint64_t calls, ok, failed, errors, timeouts, cancels, dup_rejected, busy,
        perm_denied, late, perm_asks, rate_limited, unavailable,
        backend_timeouts, plugin_crashed, sum_ns;
    uint64_t hist[TH_HIST_BUCKETS];
} stat_sum;

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)
static void stat_read(th_stat *s, stat_sum *o)
{
    o->calls = LD(s->calls);
    o->ok = LD(s->ok);
    o->failed = LD(s->failed);
    o->errors = LD(s->errors);
    o->timeouts = LD(s->timeouts);
    o->cancels = LD(s->cancels);
    o->dup_rejected = LD(s->dup_rejected);
    o->busy = LD(s->busy);
    o->perm_denied = LD(s->perm_denied);
    o->rate_limited = LD(s->rate_limited);
    o->unavailable = LD(s->unavailable);
    o->backend_timeouts = LD(s->backend_timeouts);
    o->plugin_crashed = LD(s->plugin_crashed);
    o->late = LD(s->late);
    o->perm_asks = LD(s->perm_asks);
    o->sum_ns = LD(s->sum_ns);
    for (unsigned i = 0; i < TH_HIST_BUCKETS; i++)
        o->hist[i] = LD(s->hist[i]);
    for (unsigned k = 0; k < TH_STAT_SHARDS; k++) {
        th_stat_shard *sh = atomic_load_explicit(&s->shard[k], memory_order_acquire);
        if (!sh)
            continue;
        o->calls += LD(sh->calls);
        o->ok += LD(sh->ok);
        o->failed += LD(sh->failed);
        o->errors += LD(sh->errors);
        o->timeouts += LD(sh->timeouts);
        o->cancels += LD(sh->cancels);
        o->dup_rejected += LD(sh->dup_rejected);
        o->busy += LD(sh->busy);
        o->perm_denied += LD(sh->perm_denied);
        o->rate_limited += LD(sh->rate_limited);
        o->unavailable += LD(sh->unavailable);
        o->backend_timeouts += LD(sh->backend_timeouts);
        o->plugin_crashed += LD(sh->plugin_crashed);
        o->sum_ns += LD(sh->sum_ns);
        for (unsigned i = 0; i < TH_HIST_BUCKETS; i++)
            o->hist[i] += LD(sh->hist[i]);
    }
}

/* The outcome counts of a sum into a tool's or a group's public numbers
 * (th_tool_stats, th_group_stats: the same member names). */
#define SUM_OUTCOMES(d, v)                                                    \
    do {                                                                      \
        (d).calls = (v).calls;                                                \
        (d).ok = (v).ok;                                                      \
        (d).failed = (v).failed;                                              \
        (d).errors = (v).errors;                                              \
        (d).timeouts = (v).timeouts;                                          \
        (d).cancels = (v).cancels;                                            \
        (d).duplicates_rejected = (v).dup_rejected;                           \
        (d).busy = (v).busy;                                                  \
        (d).permission_denied = (v).perm_denied;                              \
        (d).rate_limited = (v).rate_limited;                                  \
        (d).unavailable = (v).unavailable;                                    \
        (d).backend_timeouts = (v).backend_timeouts;                          \
        (d).plugin_crashed = (v).plugin_crashed;                              \
    } while (0)

/* Adds the window slots of the last `slots` slices as of epoch `ep`. */
static uint64_t win_add(const th_stat_slot *win, int64_t ep, unsigned slots,
                        uint64_t *hist)
{
    uint64_t total = 0;
    for (unsigned k = 0; k < slots && ep - (int64_t)k > 0; k++) {
        int64_t e = ep - (int64_t)k;
        const th_stat_slot *sl = &win[e % TH_WIN_SLOTS];
        if (atomic_load_explicit(&sl->epoch, memory_order_acquire) != e)
            continue;
        for (unsigned i = 0; i < TH_HIST_BUCKETS; i++) {
            uint64_t v = atomic_load_explicit(&sl->hist[i], memory_order_relaxed);
            hist[i] += v;
            total += v;
        }
    }
    return total;
}

/* The window: the first call of a new slice takes the slot over and
 * clears it.  A call racing with that clear may go uncounted; the
 * windowed numbers are an estimate, the totals are exact. */
static void win_count(th_stat *st, unsigned b, int64_t now_ns)
{
    int64_t ep = (now_ns > 0 ? now_ns : 0) / TH_WIN_SLOT_NS + 1;
    th_stat_slot *sl = &st->win[ep % TH_WIN_SLOTS];
    int64_t old = atomic_load_explicit(&sl->epoch, memory_order_acquire);
    if (old != ep && old < ep &&
        atomic_compare_exchange_strong(&sl->epoch, &old, ep)) {
        for (unsigned i = 0; i < TH_HIST_BUCKETS; i++)
            atomic_store_explicit(&sl->hist[i], 0, memory_order_relaxed);
    }
    if (atomic_load_explicit(&sl->epoch, memory_order_acquire) == ep)
        atomic_fetch_add_explicit(&sl->hist[b], 1, memory_order_relaxed);
}

/* th_stat_latency_at with the bucket of `ns` already known. */
static void latency_b(th_stat *st, unsigned b, int64_t ns, int64_t now_ns)
{
    atomic_fetch_add_explicit(&st->hist[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->sum_ns, ns > 0 ? (unsigned long long)ns : 0,
                              memory_order_relaxed);
    win_count(st, b, now_ns);
}

void th_stat_latency_at(th_stat *st, int64_t ns, int64_t now_ns)
{
    latency_b(st, hist_bucket(ns), ns, now_ns);
}

void th_stat_latency(th_stat *st, int64_t ns)
{
    th_stat_latency_at(st, ns, th_now_ns());
}

static double percentile(const uint64_t *hist, uint64_t total, double p)
{
    if (!total)
        return 0;
    uint64_t want = (uint64_t)((double)total * p);
    if (want >= total)
        want = total - 1;
    uint64_t seen = 0;
    for (unsigned b = 0; b < TH_HIST_BUCKETS; b++) {
        seen += hist[b];
        if (seen > want)
            return hist_upper_ms(b);
    }
    return hist_upper_ms(TH_HIST_BUCKETS - 1);
}

void th_stat_window(th_stat *st, int64_t now_ns, unsigned slots,
                    double *p50_ms, double *p99_ms)
{
    uint64_t hist[TH_HIST_BUCKETS], total = 0;
    memset(hist, 0, sizeof hist);
    if (slots > TH_WIN_SLOTS)
        slots = TH_WIN_SLOTS;
    int64_t ep = (now_ns > 0 ? now_ns : 0) / TH_WIN_SLOT_NS + 1;
    total += win_add(st->win, ep, slots, hist);
    *p50_ms = percentile(hist, total, 0.50);
    *p99_ms = percentile(hist, total, 0.99);
}

/* Bucket i of th_tool_stats.lat_le ends at 2^(i+4) us: exactly where the
 * histogram's bucket 4(i+4) ends (its buckets 0..4k hold the calls under
 * 2^k us), so the cumulative counts are exact. */
double th_stats_le_s(unsigned i)
{
    return (double)(1ull << (i + 4)) / 1e6;
}

static void fill_le(const uint64_t *hist, uint64_t *le)
{
    uint64_t cum = 0;
    unsigned b = 0;
    for (unsigned i = 0; i < TH_STATS_LE; i++) {
        unsigned last = 4 * (i + 4); /* buckets 0..last */
        for (; b <= last && b < TH_HIST_BUCKETS; b++)
            cum += hist[b];
        le[i] = cum;
    }
}

int th_host_stats_foreach(th_host *h, int (*fn)(const th_tool_stats *st, void *ud),
                          void *ud)
{
    for (size_t b = 0; b < 256; b++) {
        _Atomic(th_stat *) *slot = &h->stat_b[b];
        for (th_stat *s = atomic_load_explicit(slot, memory_order_acquire); s; s = s->next) {
            if (s->tool[0] == '\001') /* a toolset's or a front's */
                continue;
            th_tool_stats t;
            memset(&t, 0, sizeof t);
            t.tool = s->tool;
            stat_sum v;
            stat_read(s, &v);
            SUM_OUTCOMES(t, v);
            t.late_results = v.late;
            t.permission_asks = v.perm_asks;
            const uint64_t *hist = v.hist;
            uint64_t total = 0;
            for (unsigned i = 0; i < TH_HIST_BUCKETS; i++)
                total += hist[i];
            t.p50_ms = percentile(hist, total, 0.50);
            t.p99_ms = percentile(hist, total, 0.99);
            int64_t now = th_now_ns();
            th_stat_window(s, now, 6, &t.p50_1m_ms, &t.p99_1m_ms);
            th_stat_window(s, now, TH_WIN_SLOTS, &t.p50_5m_ms, &t.p99_5m_ms);
            t.lat_count = total;
            t.lat_sum_s = (double)v.sum_ns / 1e9;
            fill_le(hist, t.lat_le);
            int rc = fn(&t, ud);
            if (rc)
                return rc;
        }
    }
    return 0;
}

void th_host_mgr_stats(th_host *h, th_mgr_stats *out)
{
    memset(out, 0, sizeof *out);
    th_mgr *m = &h->mgr;
    pthread_mutex_lock(&m->mu);
    out->workers = m->nworkers;
    out->async_workers = m->async_cap;
    out->queued = m->waiting;
    out->lost_workers = m->lost_total;
    out->lost_workers_now = m->lost_now;
    pthread_mutex_unlock(&m->mu);
    out->calls_total = atomic_load(&m->calls_total);
    unsigned long run = atomic_load(&m->running);
    out->inline_calls = atomic_load(&m->inline_calls);
    for (unsigned i = 0; i < TH_STAT_SHARDS; i++) {
        out->calls_total += atomic_load_explicit(&m->calls_sh[i].n,
                                                 memory_order_relaxed);
        run += atomic_load_explicit(&m->calls_sh[i].run, memory_order_relaxed);
        out->inline_calls += atomic_load_explicit(&m->calls_sh[i].inl,
                                                  memory_order_relaxed);
    }
    /* (parts read one after the other: a run that started on one thread
     * and ended on another may be seen ended and not started) */
    out->running = (long)run < 0 ? 0 : run;
    out->inline_front = atomic_load(&m->inline_front);
    out->short_demoted = atomic_load(&m->short_demoted);
    out->short_stuck = atomic_load(&m->short_stuck);
    pthread_mutex_lock(&h->mu);
    for (th_session *s = h->sessions; s; s = s->next) {
        pthread_mutex_lock(&s->mu);
        out->live_tasks += s->live_tasks;
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&h->mu);
}

/* ---- Sessions per front -------------------------------------------------- */

/* The front names seen, in that order: a name is added once (under
 * kinds_mu) and never removed; readers load the count (acquire) and read
 * the names below it without a lock.  The last kind is "other".  Each
 * name is a copy in kind_text: the table outlives the sessions and hosts
 * that gave the names (th_front_ops.front need only live as long as its
 * session); a name of KIND_NAME_MAX bytes or more counts as "other". */
#define KIND_NAME_MAX 64
static char kind_text[TH_FRONT_KINDS - 1][KIND_NAME_MAX];
static _Atomic(const char *) kind_names[TH_FRONT_KINDS - 1];
static atomic_uint n_kinds;
static pthread_mutex_t kinds_mu = PTHREAD_MUTEX_INITIALIZER;

static unsigned kind_find(const char *front, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (strcmp(front, atomic_load_explicit(&kind_names[i],
                                               memory_order_relaxed)) == 0)
            return i;
    return TH_FRONT_KINDS;
}

unsigned th_stat_front_kind(const char *front)
{
    if (!front)
        return TH_FRONT_KINDS - 1;
    unsigned n = atomic_load_explicit(&n_kinds, memory_order_acquire);
    unsigned k = kind_find(front, n);
    if (k < TH_FRONT_KINDS)
        return k;
    pthread_mutex_lock(&kinds_mu);
    n = atomic_load_explicit(&n_kinds, memory_order_relaxed);
    k = kind_find(front, n);
    size_t len = strnlen(front, KIND_NAME_MAX);
    if (k == TH_FRONT_KINDS && n < TH_FRONT_KINDS - 1 &&
        len < KIND_NAME_MAX) {
        memcpy(kind_text[n], front, len + 1);
        atomic_store_explicit(&kind_names[n], kind_text[n],
                              memory_order_relaxed);
        atomic_store_explicit(&n_kinds, n + 1, memory_order_release);
        k = n;
    }
    pthread_mutex_unlock(&kinds_mu);
    return k < TH_FRONT_KINDS ? k : TH_FRONT_KINDS - 1;
}

void th_stat_session_opened(th_host *h, const char *front)
{
    atomic_fetch_add_explicit(&h->sess_opened[th_stat_front_kind(front)], 1,
                              memory_order_relaxed);
}

size_t th_host_front_stats(th_host *h, th_front_stats *out, size_t max)
{
    uint64_t open[TH_FRONT_KINDS] = {0};
    pthread_mutex_lock(&h->mu);
    for (th_session *s = h->sessions; s; s = s->next)
        open[th_stat_front_kind(s->ops.front)]++;
    pthread_mutex_unlock(&h->mu);
    size_t n = 0;
    unsigned nk = atomic_load_explicit(&n_kinds, memory_order_acquire);
    for (unsigned i = 0; i < TH_FRONT_KINDS && n < max; i++) {
        if (i >= nk && i != TH_FRONT_KINDS - 1)
            continue;
        out[n].front = i == TH_FRONT_KINDS - 1
                           ? "other"
                           : atomic_load_explicit(&kind_names[i],
                                                  memory_order_relaxed);
        out[n].opened = atomic_load(&h->sess_opened[i]);
        out[n].open = open[i];
        n++;
    }
    return n;
}

/* ---- Connection events per front ------------------------------------------ */

_Static_assert(TH_FRONT_EVS == TH_FRONT_EVENTS_MAX, "one bound");
_Static_assert(TH_FRONT_KINDS == TH_FRONTS_MAX + 1, "the fronts and other");

void th_stat_front_event(th_host *h, const char *front, unsigned ev)
{
    if (h && ev < TH_FRONT_EVS)
        atomic_fetch_add_explicit(&h->front_ev[th_stat_front_kind(front)][ev],
                                  1, memory_order_relaxed);
}

int th_host_front_events_foreach(th_host *h,
                                 int (*fn)(const char *front,
                                           const char *reason,
                                           th_front_event_class cls,
                                           uint64_t n, void *ud),
                                 void *ud)
{
    const th_front *f;
    for (size_t i = 0; (f = th_front_at(i)) != NULL; i++) {
        unsigned k = th_stat_front_kind(f->name);
        for (size_t e = 0; e < f->n_events && e < TH_FRONT_EVS; e++) {
            uint64_t n = atomic_load_explicit(&h->front_ev[k][e],
                                              memory_order_relaxed);
            int rc = fn(f->name, f->events[e].reason, f->events[e].cls, n,
                        ud);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* ---- The table of fronts (th/front.h) ------------------------------------- */

static _Atomic(const th_front *) g_fronts[TH_FRONTS_MAX];
static atomic_size_t g_n_fronts;

int th_front_register(const th_front *f)
{
    size_t n = atomic_load(&g_n_fronts);
    for (size_t i = 0; i < n; i++) {
        const th_front *o = atomic_load(&g_fronts[i]);
        if (o == f)
            return 0;
        if (strcmp(o->name, f->name) == 0)
            return TH_ESTATE;
    }
    if (n == TH_FRONTS_MAX || f->n_events > TH_FRONT_EVENTS_MAX)
        return TH_ELIMIT;
    /* Its counters, in registration order; none left (the table is full
     * of names sessions gave before it): its events would be counted under
     * "other" with those of every other such front, and reported as its. */
    if (f->n_events && th_stat_front_kind(f->name) == TH_FRONT_KINDS - 1)
        return TH_ELIMIT;
    if (f->section) {
        int rc = th_section_register(f->section);
        if (rc < 0)
            return rc;
    }
    atomic_store(&g_fronts[n], f);
    atomic_store(&g_n_fronts, n + 1);
    return 0;
}

const th_front *th_front_at(size_t i)
{
    return i < atomic_load(&g_n_fronts) ? atomic_load(&g_fronts[i]) : NULL;
}

/* ---- Per toolset and per front ------------------------------------------- */

/* Group entries live in the tools' table (freed with it at close) under
 * keys no tool name can have: "\001t:NAME" (toolset), "\001f:NAME"
 * (front). */
/* The group entry a thread used last, per kind: a thread finishing calls
 * of one toolset and one front finds both without hashing.  Keyed by the
 * host's serial (entries live until their host closes; serials are never
 * reused) and the name, checked against the entry's own key. */
typedef struct grp_cache {
    uint64_t serial;
    /* A key that names the entry without its name, for a call's end
     * (th_stat_call_end): toolset, the call's config serial and toolset
     * index + 1 (0: the task tools); front, the session's id.  Config
     * serials and session ids are never reused (in a host), so the key
     * stands for one name for good.  k1 0: none. */
    uint64_t k1, k2;
    th_stat *g;
} grp_cache;
static _Thread_local grp_cache tl_grp[2];

static __attribute__((noinline)) th_stat *group_find(th_host *h, char kind,
                                                     const char *name,
                                                     grp_cache *e)
{
    /* the key built by hand: snprintf cost ~800 instructions a call */
    char key[160];
    size_t n = strnlen(name, sizeof key - 4);
    key[0] = '\001';
    key[1] = kind;
    key[2] = ':';
    memcpy(key + 3, name, n);
    key[3 + n] = '\0';
    th_stat *g = th_stat_get(h, key);
    if (g && n < sizeof key - 4) { /* a cut name is not cached */
        e->serial = h->mgr.serial;
        e->g = g;
        e->k1 = e->k2 = 0; /* the caller keys it */
    }
    return g;
}

static inline th_stat *group_get(th_host *h, char kind, const char *name)
{
    grp_cache *e = &tl_grp[kind == 't' ? 0 : 1];
    if (e->g && e->serial == h->mgr.serial && strcmp(e->g->tool + 3, name) == 0)
        return e->g;
    return group_find(h, kind, name, e);
}

/* The counter of a final result's outcome in `p` (an entry or a shard). */
#define OUTCOME(p, r)                                                          \
    ((r)->kind != TH_RESULT_ERROR ? ((r)->ok ? &(p)->ok : &(p)->failed)       \
                                  : TH_STAT_ERR_COUNTER(p, (r)->error))

/* group_get for a caller that has a key for the name (k1 != 0, see
 * grp_cache): the thread's entry with that key is the name's entry, no
 * compare of names. */
static inline th_stat *group_get_keyed(th_host *h, char kind, const char *name,
                                       uint64_t k1, uint64_t k2)
{
    grp_cache *e = &tl_grp[kind == 't' ? 0 : 1];
    if (k1 && e->g && e->k1 == k1 && e->k2 == k2 && e->serial == h->mgr.serial)
        return e->g;
    th_stat *g = group_get(h, kind, name);
    if (g && e->g == g) { /* the entry holds it (a cut name's does not) */
        e->k1 = k1;
        e->k2 = k2;
    }
    return g;
}

static inline __attribute__((always_inline)) void
group_count(th_host *h, char kind, const char *name, uint64_t k1, uint64_t k2,
            const th_result_copy *r, unsigned b, int64_t ns, int t)
{
    th_stat *g = group_get_keyed(h, kind, name, k1, k2);
    if (!g)
        return;
    th_stat_shard *sh = t > 0 ? shard_of(g, t) : NULL;
    if (sh) {
        th_own_add(&sh->calls, 1);
        th_own_add(OUTCOME(sh, r), 1);
        th_own_add(&sh->hist[b], 1);
        own_add_ull(&sh->sum_ns, ns > 0 ? (unsigned long long)ns : 0);
        return;
    }
    atomic_fetch_add(&g->calls, 1);
    atomic_fetch_add(OUTCOME(g, r), 1);
    atomic_fetch_add_explicit(&g->hist[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->sum_ns, ns > 0 ? (unsigned long long)ns : 0,
                              memory_order_relaxed);
}

/* keys: (tk1, tk2) for the toolset's name, (fk1, 0) for the front's (0:
 * none; see grp_cache). */
static inline __attribute__((always_inline)) void
end_counts(th_host *h, th_stat *st, const char *toolset, const char *front,
           const th_result_copy *fin, int64_t ns, int64_t now, uint64_t tk1,
           uint64_t tk2, uint64_t fk1)
{
    unsigned b = hist_bucket(ns); /* one bucket for the three histograms */
    int t = my_slot();
    th_stat_shard *sh = t > 0 ? shard_of(st, t) : NULL;
    if (sh)
        shard_latency(st, sh, b, ns, now);
    else
        latency_b(st, b, ns, now);
    /* the final result is an ERROR or a DONE; an acknowledgement is not
     * final */
    if (fin->kind == TH_RESULT_RUNNING)
        return;
    group_count(h, 't', toolset, tk1, tk2, fin, b, ns, t);
    group_count(h, 'f', front, fk1, 0, fin, b, ns, t);
}

void th_stat_end_counts(th_host *h, th_stat *st, const char *toolset,
                        const char *front, const th_result_copy *fin,
                        int64_t ns, int64_t now)
{
    end_counts(h, st, toolset, front, fin, ns, now, 0, 0, 0);
}

void th_stat_call_end(th_mcall *c)
{
    if (!c->st || !atomic_load_explicit(&c->args_ok, memory_order_relaxed))
        return;
    int64_t now = th_fast_ns(); /* one read for both (clamped at 0 below) */
    th_result_copy oom; /* no x: out of memory (filled only then) */
    const th_result_copy *fin = &oom;
    if (c->x) {
        fin = &c->x->final;
    } else {
        memset(&oom, 0, sizeof oom);
        oom.kind = TH_RESULT_ERROR;
        oom.error = c->fin_oom;
    }
    const char *front = c->s ? c->s->ops.front : NULL;
    /* the keys: the config's serial (given when the call started,
     * call_start.c) and the toolset's index; the session's id */
    uint64_t cs = __atomic_load_n(&c->cfg->serial, __ATOMIC_RELAXED);
    end_counts(c->h, c->st, c->ts ? c->ts->name : "(tasks)",
               front ? front : "other", fin, now - c->start_ns, now, cs,
               c->ts ? (uint64_t)c->ts_idx + 1 : 0, c->s ? c->s->id : 0);
}

int th_host_group_stats_foreach(th_host *h,
                                int (*fn)(const th_group_stats *g, void *ud),
                                void *ud)
{
    for (size_t b = 0; b < 256; b++) {
        for (th_stat *s = atomic_load_explicit(&h->stat_b[b], memory_order_acquire);
             s; s = s->next) {
            if (s->tool[0] != '\001')
                continue;
            th_group_stats g;
            memset(&g, 0, sizeof g);
            g.kind = s->tool[1] == 't' ? "toolset" : "front";
            g.name = s->tool + 3;
            stat_sum v;
            stat_read(s, &v);
            SUM_OUTCOMES(g, v);
            const uint64_t *hist = v.hist;
            uint64_t total = 0;
            for (unsigned i = 0; i < TH_HIST_BUCKETS; i++)
                total += hist[i];
            g.lat_count = total;
            g.lat_sum_s = (double)v.sum_ns / 1e9;
            fill_le(hist, g.lat_le);
            int rc = fn(&g, ud);
            if (rc)
                return rc;
        }
    }
    return 0;
}
