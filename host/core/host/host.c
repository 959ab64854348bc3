/* host.c - the top of the core: opening a host (plugins, task tools,
 * built-ins, toolset check, workers), closing it (grace, cancel, join,
 * unref, the fronts' at-close work), and ending a session (its calls
 * cancelled or detached).  Only the fronts call into this file (the code
 * runtime's code_tool.c among them, for th_host_add_builtin_ex); it calls
 * down into the manager, the sessions and the reloader (make
 * layers-graph shows it).  The fronts plug their built-in tools
 * in after th_host_open() (th_host_add_builtin_ex, th_code_attach): the
 * core names no front. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hazard.h"
#include "call/manager.h"
#include "call/disable.h"
#include "call/rate.h"
#include "call/out.h"
#include "reload/reloader.h"
#include "th/audit.h"
#include "th/log.h"

/* Names a toolset may list before their tool exists: the task tools (added
 * below) and the built-in a front may add after open (run_code). */
static const char *const reserved[] = {"get_running_tasks", "cancel_task",
                                       "run_code", "search_tools", NULL};

typedef struct th_at_close {
    void (*fn)(void *ud);
    void *ud;
    struct th_at_close *next;
} th_at_close;

int th_host_at_close(th_host *h, void (*fn)(void *ud), void *ud, th_error *err)
{
    th_at_close *a = malloc(sizeof *a);
    if (!a)
        return th_error_set(err, TH_ENOMEM, "out of memory registering a close hook");
    a->fn = fn;
    a->ud = ud;
    a->next = h->at_close;
    h->at_close = a;
    return 0;
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

/* ---- Ending a session ----------------------------------------------------------- */

static void collect_call(uint64_t k, void *v, void *ud)
{
    (void)k;
    th_mcall ***pp = ud;
    th_mcall_ref(v);
    *(*pp)++ = v;
}

void th_session_close(th_session *s)
{
    if (!s)
        return;
    th_host *h = s->h;
    pthread_mutex_lock(&s->mu);
    /* th_call_start reads it unlocked; seq_cst: a call recorded in a call
     * slot reads it after filling its slot, we look at the slots after
     * this (th_mgr_cslot_put) */
    __atomic_store_n(&s->closing, true, __ATOMIC_SEQ_CST);
    size_t n = s->calls.n;
    th_mcall **v = calloc(n + TH_CSLOTS, sizeof *v), **p = v;
    if (v)
        th_u64map_each(&s->calls, collect_call, &p);
    pthread_mutex_unlock(&s->mu);
    /* and the calls running inline in their threads' call slots */
    if (v)
        p += th_mgr_cslot_collect(h, s, p, TH_CSLOTS);
    /* Cancel what is the session's; toolset-scoped tasks go on, detached
     * from the front.  (Out of memory here: the calls end on their own.) */
    for (size_t i = 0; v && i < (size_t)(p - v); i++) {
        th_mcall *c = v[i];
        pthread_mutex_lock(&c->mu);
        bool keep = c->acked && c->scope == TH_SCOPE_TOOLSET;
        pthread_mutex_unlock(&c->mu);
        if (!keep)
            th_mcall_abort(c, TH_ECANCELLED, "the session ended");
        th_mcall_detach(c);
        th_mcall_unref(c);
    }
    free(v);
    /* A bounded grace for the cancelled calls to stop; tools_changed
     * callbacks in flight always finish before we return. */
    th_config *cfg = th_host_config_get(h);
    int64_t until = th_now_ns() + (int64_t)cfg->host.session_grace_ms * 1000000;
    th_config_unref(cfg);
    /* The calls in call slots are counted with no lock held (each one's
     * mu comes before s->mu); their owners wake s->cv as they leave the
     * slots, and the 5 ms slices bound a wake-up missed in between. */
    size_t in_slots = th_mgr_cslot_running(h, s);
    pthread_mutex_lock(&s->mu);
    /* (finals_owed: calls answered just before the close, out of the
     * map, whose final callback has not returned yet: no callback may run
     * after we return) */
    while (s->ops_inflight > 0 || s->finals_owed > 0 ||
           ((s->exec_live > 0 || in_slots > 0) && th_now_ns() < until)) {
        struct timespec ts;
        th_deadline_rt(&ts, 5);
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        if (in_slots > 0) {
            pthread_mutex_unlock(&s->mu);
            in_slots = th_mgr_cslot_running(h, s);
            pthread_mutex_lock(&s->mu);
        }
    }
    size_t stuck = s->exec_live + in_slots;
    if (stuck > 0)
        th_log_warn("session=%llu closed with %zu calls still stopping",
                    (unsigned long long)s->id, stuck);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&h->mu);
    if (s->prev)
        s->prev->next = s->next;
    else if (h->sessions == s)
        h->sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
    pthread_mutex_unlock(&h->mu);
    th_session_unref(s);
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

static int tag_hit(const th_tool *t, void *ud)
{
    return th_tool_has_tag(t, ud);
}

/* Whether a loaded tool declares `tag` (ABI 1.5). */
static bool has_tag(void *ud, const char *tag)
{
    th_host *h = ud;
    return th_registry_foreach(h->reg, tag_hit, (void *)tag) != 0;
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
static th_host *volatile abandoned_hosts[8]; /* volatile: stores are kept */
static atomic_uint n_abandoned;

static void host_free(th_host *h)
{
    th_call_fast_host_close(h); /* its short-call watchdog (call_fast.c) */
    if (!th_mgr_destroy(h)) {
        unsigned i = atomic_fetch_add(&n_abandoned, 1);
        if (i < sizeof abandoned_hosts / sizeof abandoned_hosts[0])
            abandoned_hosts[i] = h;
        return;
    }
    th_tasks_destroy(h);
    th_call_tombs_destroy(h);
    for (size_t b = 0; b < 256; b++) {
        th_stat *s = atomic_load(&h->stat_b[b]);
        while (s) {
            th_stat *n = s->next;
            th_stat_free_shards(s);
            free(s->tool);
            free(s);
            s = n;
        }
    }
    free(h->builtins); /* their plugins belong to the registry */
    if (h->reg)
        th_registry_free(h->reg);
    th_reload_host_close(h); /* closes what the registry released */
    while (h->at_close) { /* their built-ins are gone with the registry */
        th_at_close *a = h->at_close;
        h->at_close = a->next;
        a->fn(a->ud);
        free(a);
    }
    free(h->dup_b);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->dmu);
    pthread_mutex_destroy(&h->tmu);
    pthread_mutex_destroy(&h->stmu);
    th_discover_close(h);
    pthread_mutex_destroy(&h->discmu);
    th_host_views_reset(h);
    pthread_mutex_destroy(&h->viewmu);
    th_audit_close(h->audit); /* after the last call's line */
    th_rate_free(h->rate);    /* after the last call's end */
    th_disabled_free(h->disabled);
    th_config_unref(h->cfg); /* the host's reference */
    free(h);
}

int th_host_open_ex(th_config *cfg, const th_host_opts *opts, th_host **out,
                    th_error *err)
{
    *out = NULL;
    th_hz_init(); /* while the process may still have one thread */
    th_host *h = calloc(1, sizeof *h);
    if (!h) {
        th_config_free(cfg);
        return th_error_set(err, TH_ENOMEM, "out of memory opening the host");
    }
    h->cfg = cfg;
    atomic_init(&h->live_calls, 1); /* the open host's own count */
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    pthread_mutex_init(&h->dmu, NULL);
    pthread_mutex_init(&h->tmu, NULL);
    pthread_mutex_init(&h->stmu, NULL);
    pthread_mutex_init(&h->discmu, NULL);
    pthread_mutex_init(&h->viewmu, NULL);
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
    if (!(h->rate = th_rate_new()) || !(h->disabled = th_disabled_new())) {
        host_free(h);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    if (cfg->host.audit &&
        (rc = th_audit_open(cfg->host.audit, &h->audit, err)) != 0) {
        host_free(h);
        return rc;
    }
    if ((rc = th_reload_host_open(h, err)) != 0) {
        host_free(h);
        return rc;
    }
    bool go_on = opts && opts->on_error;
    th_error first;
    th_error_clear(&first);
    for (size_t i = 0; i < cfg->n_plugins; i++) {
        const th_plugin_cfg *pc = &cfg->plugins[i];
        th_error e;
        th_error_clear(&e);
        rc = load_plugin(h, pc, &e);
        if (rc == 0)
            continue;
        th_plugin_load_error(cfg, pc, &e);
        if (pc->optional) {
            th_log_warn("optional plugin %s skipped: %s", pc->name, e.msg);
            continue;
        }
        if (first.code == 0)
            first = e;
        if (go_on) {
            opts->on_error(opts->error_ud, &e);
            continue;
        }
        break;
    }
    if (first.code != 0) {
        if (err)
            *err = first;
        host_free(h);
        return first.code;
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
    /* search_tools (discover.c) when the config defers a tool, unless a
     * plugin took the name: then nothing is deferred (a tool no search
     * could find would be lost) */
    const th_tool *taken = th_registry_acquire(h->reg, TH_SEARCH_TOOL_NAME);
    if (taken && th_config_defers(cfg)) {
        th_tool_release(taken);
        th_log_warn("a plugin provides a tool named search_tools: the "
                    "built-in search is off and no tool is deferred");
    } else if (taken) {
        th_tool_release(taken);
    } else if (th_config_defers(cfg) &&
               ((rc = th_host_add_builtin_ex(h, &th_search_tools_plugin,
                                             th_search_tools_member, h,
                                             err)) != 0 ||
                (rc = th_discover_rebuild(h, cfg, err)) != 0)) {
        host_free(h);
        return rc;
    }
    h->discovery = h->disc != NULL;
    rc = th_config_check_tools_all(cfg, has_tool, h,
                                   go_on ? opts->on_error : NULL,
                                   go_on ? opts->error_ud : NULL, err);
    if (rc == 0 || go_on) {
        int rt = th_config_check_tags(cfg, has_tag, h,
                                      go_on ? opts->on_error : NULL,
                                      go_on ? opts->error_ud : NULL,
                                      rc ? NULL : err);
        rc = rc ? rc : rt;
    }
    if (rc != 0) {
        host_free(h);
        return rc;
    }
    if (cfg->host.spill_dir) /* old spill files of an earlier run */
        (void)th_out_spill_gc(cfg->host.spill_dir, cfg->host.spill_max_age_ms, 0);
    if ((rc = th_mgr_init(h, &th_call_mgr_ops, err)) != 0) {
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

/* Calls not yet freed (plus 1 while the host is open): the shared word
 * plus every thread part's lstart - lfree (manager.h), modulo 2^64.  The
 * parts are collected twice around the shared word's read: a free seen
 * (acquire) in the first collect has its start (made before it, on any
 * thread) seen in the second, so two equal collects are one moment's
 * counts.  Not settled after 64 tries (calls starting and ending all the
 * while): the last sum, at least 1. */
unsigned long th_host_live_calls(th_host *h)
{
    enum { N = 2 * TH_STAT_SHARDS };
    unsigned long a[N], b[N], v = 0, sum = 0;
    th_mgr *m = &h->mgr;
    for (unsigned try = 0; try < 64; try++) {
        unsigned long *x = try % 2 ? b : a, *y = try % 2 ? a : b;
        if (try == 0)
            for (unsigned i = 0; i < TH_STAT_SHARDS; i++) {
                a[2 * i] = atomic_load_explicit(&m->calls_sh[i].lstart,
                                                memory_order_acquire);
                a[2 * i + 1] = atomic_load_explicit(&m->calls_sh[i].lfree,
                                                    memory_order_acquire);
            }
        v = atomic_load(&h->live_calls);
        for (unsigned i = 0; i < TH_STAT_SHARDS; i++) {
            y[2 * i] = atomic_load_explicit(&m->calls_sh[i].lstart,
                                            memory_order_acquire);
            y[2 * i + 1] = atomic_load_explicit(&m->calls_sh[i].lfree,
                                                memory_order_acquire);
        }
        sum = v;
        for (unsigned i = 0; i < TH_STAT_SHARDS; i++)
            sum += y[2 * i] - y[2 * i + 1];
        if (memcmp(x, y, sizeof a) == 0)
            return sum;
    }
    return sum ? sum : 1;
}

/* Waits until every call is freed or the monotonic deadline. */
static bool wait_calls(th_host *h, int64_t until_ns)
{
    pthread_mutex_lock(&h->mu);
    while (th_host_live_calls(h) > 0) {
        if (until_ns && th_now_ns() >= until_ns)
            break;
        struct timespec ts;
        th_deadline_rt(&ts, 10);
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    }
    bool done = th_host_live_calls(h) == 0;
    pthread_mutex_unlock(&h->mu);
    return done;
}

void th_host_close(th_host *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    /* From here a call freed wakes wait_calls under mu (call_free) */
    __atomic_store_n(&h->closing, true, __ATOMIC_SEQ_CST);
    atomic_fetch_sub(&h->live_calls, 1);
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
        if (!wait_calls(h, th_now_ns() + h->mgr.lost_grace_ns)) {
            /* Suspended calls whose plugin never calls complete(), or
             * workers inside tools that ignore cancellation: a plugin
             * thread may still use them (and the host), so the host's
             * memory is kept, not freed under them. */
            unsigned long n = th_host_live_calls(h);
            th_log_warn("host close: abandoning %lu call%s still running (suspended "
                        "calls never completed, or tools that ignore cancellation): "
                        "not waiting for them; the host's memory is kept",
                        n, n == 1 ? "" : "s");
            unsigned i = atomic_fetch_add(&n_abandoned, 1);
            if (i < sizeof abandoned_hosts / sizeof abandoned_hosts[0])
                abandoned_hosts[i] = h;
            th_mgr_stop_threads(h); /* idle workers, timer, notifier */
            th_reloader_stop_thread(h->reloader);
            return;
        }
    }
    host_free(h);
}
