/* reload_host.c - the host's side of hot reload: the reloader a th_host
 * owns (h->reloader, a member of the host), and what a reload changes in
 * the host besides the registry (the config new calls read, toolset
 * concurrency limits, the log level, the sessions told that their tool
 * list changed).  Called by host.c only; calls down into the reloader and
 * the sessions.
 *
 * The config a reload replaces is not kept here: the swap drops the
 * host's reference (th_host_config_swap, host_config.c) and each call
 * holds its own until it ends.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "call/call_fast.h"
#include "iso/iso_wire.h"
#include "call/manager.h"
#include "reloader.h"
#include "th/audit.h"
#include "th/log.h"
#include "th/section.h"

/* Set at open, before any other thread sees the host; freed at close. */
th_reloader *th_host_reloader(th_host *h)
{
    return h->reloader;
}

/* ---- the target ----------------------------------------------------------------- */

static bool reserved(void *ud, const char *name)
{
    (void)ud;
    return strcmp(name, "get_running_tasks") == 0 ||
           strcmp(name, "cancel_task") == 0 || strcmp(name, "run_code") == 0 ||
           strcmp(name, TH_SEARCH_TOOL_NAME) == 0;
}

/* Every open session: its tool list changed. */
static void tools_changed(void *ud)
{
    th_host *h = ud;
    /* The search index of the new tools and config, before anyone is
     * told (discover.c); on failure the old one answers. */
    th_error e;
    if (h->discovery && th_discover_rebuild(h, h->cfg, &e) != 0)
        th_log_error("reload: %s; search_tools answers from the tools "
                     "before the reload", e.msg);
    else if (!h->discovery && th_config_defers(h->cfg))
        th_log_warn("reload: the host started with no deferred tool, so "
                    "it has no search_tools: defer and defer_tools take "
                    "effect at the next restart");
    /* The lists kept per view were of the tools before (session.c). */
    th_host_views_reset(h);
    uint64_t c0, s0, c1, s1;
    th_host_views_counts(&c0, &s0);
    pthread_mutex_lock(&h->mu);
    size_t n = 0;
    for (th_session *s = h->sessions; s; s = s->next)
        n++;
    th_session **v = calloc(n ? n : 1, sizeof *v);
    size_t k = 0;
    for (th_session *s = h->sessions; v && s; s = s->next) {
        th_session_ref(s);
        v[k++] = s;
    }
    pthread_mutex_unlock(&h->mu);
    if (!v) {
        th_log_error("reload: out of memory telling the sessions that the "
                     "tool list changed");
        return;
    }
    for (size_t i = 0; i < k; i++) {
        th_session_tools_changed(v[i]);
        th_session_unref(v[i]);
    }
    free(v);
    th_host_views_counts(&c1, &s1);
    th_log_info("reload: %zu sessions told that the tools changed (list "
                "digests made here: %llu computed, %llu shared)",
                k, (unsigned long long)(c1 - c0),
                (unsigned long long)(s1 - s0));
}

/* What a running host cannot take without a restart. */
static int check_config(void *ud, const th_config *nc, th_error *err)
{
    th_host *h = ud;
    const th_config *oc = h->cfg; /* only the reload thread writes it */
    /* Every reload (SIGHUP) reopens the audit log: logrotate renamed it */
    th_audit_reopen(h->audit);
    if ((oc->host.audit || nc->host.audit) &&
        (!oc->host.audit || !nc->host.audit ||
         strcmp(oc->host.audit, nc->host.audit) != 0))
        th_log_warn("reload: host.audit changes at the next restart");
    bool same = nc->n_toolsets == oc->n_toolsets;
    size_t i = 0; /* the first toolset that differs */
    for (; i < nc->n_toolsets && i < oc->n_toolsets; i++)
        if (strcmp(nc->toolsets[i].name, oc->toolsets[i].name) != 0)
            break;
    same = same && i == nc->n_toolsets;
    if (!same && i < nc->n_toolsets) /* at the entry that is new here */
        return th_error_set(err, TH_ECONFIG,
                            "%s:%d:%d: toolset '%s' was %s by a reload; "
                            "adding, removing, renaming or reordering "
                            "toolsets needs a restart of the host (changes "
                            "inside a toolset reload)",
                            nc->path, nc->toolsets[i].line,
                            nc->toolsets[i].col, nc->toolsets[i].name,
                            th_config_toolset(oc, nc->toolsets[i].name)
                                ? "moved"
                                : "added (or renamed)");
    if (!same)
        return th_error_set(err, TH_ECONFIG,
                            "%s: toolset '%s' was removed by a reload; "
                            "adding, removing, renaming or reordering "
                            "toolsets needs a restart of the host (changes "
                            "inside a toolset reload)",
                            nc->path, oc->toolsets[i].name);
    const th_host_cfg *a = &oc->host, *b = &nc->host;
    if (a->workers != b->workers || a->async_workers != b->async_workers ||
        a->queue_size != b->queue_size)
        th_log_warn("reload: host.workers, async_workers and queue_size keep "
                    "their values until the host restarts");
    /* What a module's section says only changes at the next restart. */
    for (size_t i = 0; i < nc->n_sec; i++) {
        const th_section *sd = nc->sec_desc[i];
        const void *old = th_config_section(oc, sd);
        const char *note = old && sd->reload_note
                               ? sd->reload_note(old, nc->sec[i])
                               : NULL;
        if (note)
            th_log_warn("%s", note);
    }
    if ((a->state_dir || b->state_dir) &&
        (!a->state_dir || !b->state_dir || strcmp(a->state_dir, b->state_dir) != 0))
        th_log_warn("reload: host.state_dir changes at the next restart");
    return 0;
}

static void swap_config(void *ud, th_config *nc)
{
    th_host *h = ud;
    /* Toolset concurrency limits for new calls (same toolsets, checked). */
    th_mgr *m = &h->mgr;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; m->ts_groups && i < nc->n_toolsets; i++)
        m->ts_groups[i].limit = nc->toolsets[i].max_concurrency;
    pthread_mutex_unlock(&m->mu);
    if (nc->host.log_level >= TOOLHOST_LOG_ERROR &&
        nc->host.log_level <= TOOLHOST_LOG_DEBUG)
        th_log_set_level(nc->host.log_level);
    th_host_config_swap(h, nc);
    th_call_fast_config_changed(h); /* the short-call watchdog */
}

/* ---- life ------------------------------------------------------------------------- */

int th_reload_host_open(th_host *h, th_error *err)
{
    if (h->cfg->host.reload == TH_RELOAD_OFF)
        return 0;
    th_reload_target t = {.reg = h->reg,
                          .reserved = reserved,
                          .swap_config = swap_config,
                          .tools_changed = tools_changed,
                          .ud = h,
                          .check_config = check_config};
    return th_reloader_new(&t, h->cfg, &h->reloader, err);
}

int th_reload_host_load(th_host *h, const th_plugin_cfg *pc, th_plugin **out,
                        th_error *err)
{
    th_reloader *r = h->reloader;
    if (!r) {
        th_load_opts lo;
        memset(&lo, 0, sizeof lo);
        lo.name = pc->name;
        lo.allow_insecure = pc->allow_insecure;
        int rc = th_iso_plugin_open(pc, &lo, out, err); /* isolation */
        if (rc)
            return rc;
        th_buf block = TH_BUF_INIT;
        rc = th_config_plugin_block(h->cfg, pc, (*out)->config_params,
                                    (*out)->n_config_params, &block, err);
        if (rc == 0)
            rc = th_plugin_init(*out, block.data, block.len, err);
        th_buf_destroy(&block);
        if (rc) {
            th_plugin_unref(*out);
            *out = NULL;
        }
        return rc;
    }
    return th_reloader_load(r, h->cfg, pc, out, err);
}

void th_reload_host_close(th_host *h)
{
    th_reloader_free(h->reloader);
    h->reloader = NULL;
}
