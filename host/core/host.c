/* host.c - one running host: opening (plugins, built-ins, toolset check,
 * workers), closing (grace, cancel, join, unref), toolset lookup and the
 * per-tool numbers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/code.h"
#include "th/log.h"
#include "th/manager.h"
#include "th/out.h"
#include "th/reload.h"

static const char *const reserved[] = {"get_running_tasks", "cancel_task",
                                       "run_code", NULL};

bool th_host_is_task_tool(const char *name)
{
    return strcmp(name, "get_running_tasks") == 0 ||
           strcmp(name, "cancel_task") == 0;
}

/* A reload swaps h->cfg for new calls (reload_host.c, host_config.c):
 * borrowed, valid until the next swap; th_host_config_get() for a
 * reference. */
const th_config *th_host_config(const th_host *h)
{
    return __atomic_load_n(&h->cfg, __ATOMIC_ACQUIRE);
}

th_registry *th_host_registry(th_host *h)
{
    return h->reg;
}

/* ---- Toolsets ------------------------------------------------------------------ */

const th_tool_override *th_host_override(const th_toolset_cfg *ts,
                                         const char *tool)
{
    for (size_t i = 0; i < ts->n_overrides; i++)
        if (strcmp(ts->overrides[i].tool, tool) == 0)
            return &ts->overrides[i];
    return NULL;
}

bool th_host_toolset_has(th_host *h, const th_toolset_cfg *ts,
                         const th_tool *tool)
{
    if (th_host_is_task_tool(tool->name))
        return false;
    for (size_t i = 0; i < h->n_builtins; i++)
        if (h->builtins[i].p == tool->plugin && h->builtins[i].member)
            return h->builtins[i].member(ts, tool->name, h->builtins[i].ud);
    for (size_t i = 0; i < ts->n_tools; i++)
        if (strcmp(ts->tools[i], "*") == 0 || strcmp(ts->tools[i], tool->name) == 0)
            return true;
    return false;
}

int th_host_pick_toolset(th_host *h, th_session *s, const th_tool *tool,
                         bool *any)
{
    *any = false;
    th_config *cfg = th_host_config_get(h);
    int found = -1;
    for (size_t i = 0; i < cfg->n_toolsets && found < 0; i++) {
        if (!th_host_toolset_has(h, &cfg->toolsets[i], tool))
            continue;
        *any = true;
        if (s->usable[i])
            found = (int)i;
    }
    th_config_unref(cfg);
    return found;
}

/* ---- Numbers -------------------------------------------------------------------- */

th_stat *th_stat_get(th_host *h, const char *tool)
{
    size_t b = th_hash_bytes(tool, strlen(tool)) & 255;
    _Atomic(th_stat *) *slot = &h->stat_b[b];
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

void th_stat_latency(th_stat *st, int64_t ns)
{
    atomic_fetch_add_explicit(&st->hist[hist_bucket(ns)], 1, memory_order_relaxed);
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

int th_host_stats_foreach(th_host *h, int (*fn)(const th_tool_stats *st, void *ud),
                          void *ud)
{
    for (size_t b = 0; b < 256; b++) {
        _Atomic(th_stat *) *slot = &h->stat_b[b];
        for (th_stat *s = atomic_load_explicit(slot, memory_order_acquire); s; s = s->next) {
            th_tool_stats t;
            memset(&t, 0, sizeof t);
            t.tool = s->tool;
            t.calls = atomic_load(&s->calls);
            t.ok = atomic_load(&s->ok);
            t.failed = atomic_load(&s->failed);
            t.errors = atomic_load(&s->errors);
            t.timeouts = atomic_load(&s->timeouts);
            t.cancels = atomic_load(&s->cancels);
            t.duplicates_rejected = atomic_load(&s->dup_rejected);
            t.busy = atomic_load(&s->busy);
            t.permission_denied = atomic_load(&s->perm_denied);
            t.late_results = atomic_load(&s->late);
            uint64_t hist[TH_HIST_BUCKETS], total = 0;
            for (unsigned i = 0; i < TH_HIST_BUCKETS; i++)
                total += hist[i] = atomic_load_explicit(&s->hist[i], memory_order_relaxed);
            t.p50_ms = percentile(hist, total, 0.50);
            t.p99_ms = percentile(hist, total, 0.99);
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
    out->running = atomic_load(&m->running);
    out->calls_total = atomic_load(&m->calls_total);
    out->inline_calls = atomic_load(&m->inline_calls);
    pthread_mutex_lock(&h->mu);
    for (th_session *s = h->sessions; s; s = s->next) {
        pthread_mutex_lock(&s->mu);
        out->live_tasks += s->live_tasks;
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&h->mu);
}

/* ---- Built-ins ---------------------------------------------------------------- */

int th_host_add_builtin_ex(th_host *h, const toolhost_plugin *desc,
                           th_builtin_member_fn member, void *ud, th_error *err)
{
    th_plugin *p = NULL;
    int rc = th_plugin_builtin(desc, &p, err);
    if (rc)
        return rc;
    if (desc->init && (rc = th_plugin_init(p, NULL, 0, err)) != 0) {
        th_plugin_unref(p);
        return rc;
    }
    th_builtin *nb = realloc(h->builtins, (h->n_builtins + 1) * sizeof *nb);
    if (!nb) {
        th_plugin_unref(p);
        return th_error_set(err, TH_ENOMEM, "out of memory adding built-in %s", desc->name);
    }
    h->builtins = nb;
    if ((rc = th_registry_add(h->reg, p, err)) != 0) {
        th_plugin_unref(p);
        return rc;
    }
    /* The registry took our reference and keeps it until it is freed. */
    h->builtins[h->n_builtins++] = (th_builtin){p, member, ud};
    return 0;
}

int th_host_add_builtin(th_host *h, const toolhost_plugin *desc, th_error *err)
{
    return th_host_add_builtin_ex(h, desc, NULL, NULL, err);
}

/* ---- Open and close ---------------------------------------------------------- */

static bool has_tool(void *ud, const char *name)
{
    th_host *h = ud;
    for (size_t i = 0; reserved[i]; i++)
        if (strcmp(reserved[i], name) == 0)
            return true;
    const th_tool *t = th_registry_acquire(h->reg, name);
    if (t)
        th_tool_release(t);
    return t != NULL;
}

/* From a private copy when the host reloads (th/reload.h). */
static int load_plugin(th_host *h, const th_plugin_cfg *pc, th_error *err)
{
    th_plugin *p = NULL;
    int rc = th_reload_host_load(h, pc, &p, err);
    if (rc)
        return rc;
    rc = th_registry_add(h->reg, p, err);
    if (rc) /* on success the registry took over our reference */
        th_plugin_unref(p);
    return rc;
}

/* Hosts left behind by a shutdown that abandoned lost workers: kept
 * reachable (their threads may still use them) until the process exits. */
static th_host *abandoned_hosts[8];
static atomic_uint n_abandoned;

static void host_free(th_host *h)
{
    if (!th_mgr_fini(h)) {
        unsigned i = atomic_fetch_add(&n_abandoned, 1);
        if (i < sizeof abandoned_hosts / sizeof abandoned_hosts[0])
            abandoned_hosts[i] = h;
        return;
    }
    th_tasks_free(h);
    for (size_t b = 0; b < 256; b++) {
        th_stat *s = atomic_load(&h->stat_b[b]);
        while (s) {
            th_stat *n = s->next;
            free(s->tool);
            free(s);
            s = n;
        }
    }
    free(h->builtins); /* their plugins belong to the registry */
    if (h->reg)
        th_registry_free(h->reg);
    th_reload_host_close(h); /* closes what the registry released */
    th_code_builtin_free(h->code); /* its plugin is gone with the registry */
    free(h->dup_b);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->dmu);
    pthread_mutex_destroy(&h->tmu);
    pthread_mutex_destroy(&h->stmu);
    th_config_unref(h->cfg); /* the host's reference */
    free(h);
}

int th_host_open_ex(th_config *cfg, const th_host_opts *opts, th_host **out,
                    th_error *err)
{
    *out = NULL;
    th_host *h = calloc(1, sizeof *h);
    if (!h) {
        th_config_free(cfg);
        return th_error_set(err, TH_ENOMEM, "out of memory opening the host");
    }
    h->cfg = cfg;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    pthread_mutex_init(&h->dmu, NULL);
    pthread_mutex_init(&h->tmu, NULL);
    pthread_mutex_init(&h->stmu, NULL);
    th_u64map_init(&h->tasks);
    th_u64map_init(&h->kept);
    atomic_init(&h->next_id, 1);
    h->dup_nb = 1024;
    h->dup_b = calloc(h->dup_nb, sizeof *h->dup_b);
    h->reg = th_registry_new();
    if (!h->dup_b || !h->reg) {
        host_free(h);
        return th_error_set(err, TH_ENOMEM, "out of memory opening the host");
    }
    if (cfg->host.log_level >= TOOLHOST_LOG_ERROR &&
        cfg->host.log_level <= TOOLHOST_LOG_DEBUG)
        th_log_set_level(cfg->host.log_level);

    int rc;
    if ((rc = th_reload_host_open(h, err)) != 0) {
        host_free(h);
        return rc;
    }
    for (size_t i = 0; i < cfg->n_plugins; i++) {
        const th_plugin_cfg *pc = &cfg->plugins[i];
        th_error e;
        th_error_clear(&e);
        rc = load_plugin(h, pc, &e);
        if (rc == 0)
            continue;
        if (pc->optional) {
            th_log_warn("optional plugin %s skipped: %s", pc->name, e.msg);
            continue;
        }
        if (err)
            *err = e;
        host_free(h);
        return rc;
    }
    if ((rc = th_plugin_builtin(&th_task_tools_plugin, &h->task_plugin, err)) != 0) {
        host_free(h);
        return rc;
    }
    if ((rc = th_registry_add(h->reg, h->task_plugin, err)) != 0) {
        th_plugin_unref(h->task_plugin);
        h->task_plugin = NULL;
        host_free(h);
        return rc;
    }
    if (opts)
        for (size_t i = 0; i < opts->n_builtins; i++)
            if ((rc = th_host_add_builtin(h, opts->builtins[i], err)) != 0) {
                host_free(h);
                return rc;
            }
    /* run_code, for the toolsets that enable it: its description lists
     * the tools it may call, so it comes after every plugin. */
    if ((rc = th_code_register(h, &h->code, err)) != 0) {
        host_free(h);
        return rc;
    }
    if ((rc = th_config_check_tools(cfg, has_tool, h, err)) != 0) {
        host_free(h);
        return rc;
    }
    if (cfg->host.spill_dir) /* old spill files of an earlier run */
        (void)th_out_spill_gc(cfg->host.spill_dir, cfg->host.spill_max_age_ms, 0);
    if ((rc = th_mgr_init(h, err)) != 0) {
        host_free(h);
        return rc;
    }
    *out = h;
    return 0;
}

int th_host_open(th_config *cfg, th_host **out, th_error *err)
{
    return th_host_open_ex(cfg, NULL, out, err);
}

static void collect_task(uint64_t k, void *v, void *ud)
{
    (void)k;
    th_mcall *c = v;
    th_mcall ***pp = ud;
    th_mcall_ref(c);
    *(*pp)++ = c;
}

/* Waits until `pred` or the monotonic deadline; with h->mu held. */
static bool wait_calls(th_host *h, int64_t until_ns)
{
    pthread_mutex_lock(&h->mu);
    while (atomic_load(&h->live_calls) > 0) {
        if (until_ns && th_now_ns() >= until_ns)
            break;
        struct timespec ts;
        th_deadline_rt(&ts, 10);
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    }
    bool done = atomic_load(&h->live_calls) == 0;
    pthread_mutex_unlock(&h->mu);
    return done;
}

void th_host_close(th_host *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->closing = true;
    pthread_mutex_unlock(&h->mu);
    /* Sessions the fronts left open. */
    for (;;) {
        pthread_mutex_lock(&h->mu);
        th_session *s = h->sessions;
        pthread_mutex_unlock(&h->mu);
        if (!s)
            break;
        th_session_close(s);
    }
    /* Toolset-scoped tasks get the shutdown grace, then are cancelled. */
    uint64_t grace = h->cfg->host.shutdown_grace_ms;
    if (!wait_calls(h, th_now_ns() + (int64_t)grace * 1000000)) {
        pthread_mutex_lock(&h->tmu);
        size_t n = h->tasks.n;
        th_mcall **v = calloc(n ? n : 1, sizeof *v), **p = v;
        if (v)
            th_u64map_each(&h->tasks, collect_task, &p);
        pthread_mutex_unlock(&h->tmu);
        for (size_t i = 0; v && i < (size_t)(p - v); i++) {
            th_mcall_abort(v[i], TH_ECANCELLED, "the host is shutting down");
            th_mcall_unref(v[i]);
        }
        free(v);
        /* Tools that ignore cancellation are not waited for longer than
         * the lost-worker grace: their workers are abandoned. */
        if (!wait_calls(h, th_now_ns() + h->mgr.lost_grace_ns))
            th_log_warn("host close: %lu calls still running (tools that ignore "
                        "cancellation): not waiting for them",
                        (unsigned long)atomic_load(&h->live_calls));
    }
    host_free(h);
}
