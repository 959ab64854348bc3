/* session.c - sessions: who calls (principal and toolset ACLs), which tools
 * they see, their references.  Ending a session cancels its calls, which
 * is the manager's business: th_session_close() is in host.c, above the
 * manager, so this file calls nothing of the call path (call.c calls it). */
#include <grp.h>
#include <nettle/sha2.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/log.h"
#include "manager.h"

/* ---- ACL ---------------------------------------------------------------------- */

static bool parse_id(const char *s, uint32_t *out)
{
    if (!*s)
        return false;
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*end || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

static bool user_is(const char *entry, uint32_t uid)
{
    uint32_t n;
    if (parse_id(entry, &n))
        return n == uid;
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (getpwnam_r(entry, &pw, buf, sizeof buf, &res) != 0 || !res)
        return false;
    return pw.pw_uid == uid;
}

/* Whether uid/gid (primary, or supplementary of the uid's user) is in
 * group `entry` (a name or a number). */
static bool group_has(const char *entry, uint32_t uid, uint32_t gid)
{
    uint32_t g;
    if (!parse_id(entry, &g)) {
        struct group gr, *res = NULL;
        char buf[8192];
        if (getgrnam_r(entry, &gr, buf, sizeof buf, &res) != 0 || !res)
            return false;
        g = gr.gr_gid;
    }
    if (g == gid)
        return true;
    struct passwd pw, *pres = NULL;
    char buf[4096];
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &pres) != 0 || !pres)
        return false;
    gid_t groups[256];
    int n = 256;
    if (getgrouplist(pw.pw_name, pw.pw_gid, groups, &n) < 0)
        n = 256;
    for (int i = 0; i < n; i++)
        if ((uint32_t)groups[i] == g)
            return true;
    return false;
}

static bool acl_allows(const th_toolset_cfg *ts, const th_principal *who)
{
    if (who->toolset && (!ts->name || strcmp(ts->name, who->toolset) != 0))
        return false;
    if (who->trusted)
        return true;
    if (ts->n_allow_users == 0 && ts->n_allow_groups == 0)
        return true;
    if (who->user) {
        /* A named user (token): names match by name only; no groups. */
        for (size_t i = 0; i < ts->n_allow_users; i++)
            if (strcmp(ts->allow_users[i], who->user) == 0)
                return true;
        return false;
    }
    for (size_t i = 0; i < ts->n_allow_users; i++)
        if (user_is(ts->allow_users[i], who->uid))
            return true;
    for (size_t i = 0; i < ts->n_allow_groups; i++)
        if (group_has(ts->allow_groups[i], who->uid, who->gid))
            return true;
    return false;
}

/* ---- Life ----------------------------------------------------------------------- */

th_session *th_session_open(th_host *h, const th_principal *who,
                            const th_front_ops *ops, void *front_ud)
{
    th_session *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    th_config *cfg = th_host_config_get(h);
    size_t n = cfg->n_toolsets;
    s->usable = calloc(n ? n : 1, sizeof *s->usable);
    s->n_usable = n;
    if (!s->usable) {
        th_config_unref(cfg);
        free(s);
        return NULL;
    }
    s->h = h;
    if (who) {
        s->who = *who;
        s->who.toolset = NULL;
        s->who.user = NULL;
        if ((who->toolset && !(s->who.toolset = strdup(who->toolset))) ||
            (who->user && !(s->who.user = strdup(who->user)))) {
            free((char *)s->who.toolset);
            free(s->usable);
            free(s);
            return NULL;
        }
    }
    if (ops)
        s->ops = *ops;
    s->front_ud = front_ud;
    for (size_t i = 0; i < n; i++)
        s->usable[i] = acl_allows(&cfg->toolsets[i], &s->who);
    th_config_unref(cfg);
    atomic_init(&s->refs, 1);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    th_u64map_init(&s->calls);
    s->id = atomic_fetch_add(&h->next_id, 1);
    pthread_mutex_lock(&h->mu);
    if (h->closing) {
        pthread_mutex_unlock(&h->mu);
        s->h = NULL;
        th_session_unref(s);
        return NULL;
    }
    s->next = h->sessions;
    if (h->sessions)
        h->sessions->prev = s;
    h->sessions = s;
    pthread_mutex_unlock(&h->mu);
    th_stat_session_opened(h, s->ops.front); /* stats.c */
    return s;
}

uint64_t th_session_id(const th_session *s)
{
    return s->id;
}

th_host *th_session_host(th_session *s)
{
    return s->h;
}

void th_session_ref(th_session *s)
{
    atomic_fetch_add(&s->refs, 1);
}

void th_session_unref(th_session *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    th_u64map_destroy_unowned(&s->calls); /* empty: every call left it */
    for (size_t i = 0; i < s->found.n; i++)
        free(s->found.names[i]);
    free(s->found.names);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->usable);
    free((char *)s->who.toolset);
    free((char *)s->who.user);
    free(s);
}

size_t th_session_live_tasks(th_session *s)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->live_tasks;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void notify_tools(th_session *s, void (*fn)(void *front_ud))
{
    if (!fn)
        return;
    pthread_mutex_lock(&s->mu);
    if (s->closing) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    s->ops_inflight++;
    pthread_mutex_unlock(&s->mu);
    fn(s->front_ud);
    pthread_mutex_lock(&s->mu);
    s->ops_inflight--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void th_session_tools_changed(th_session *s)
{
    notify_tools(s, s->ops.tools_changed);
}

void th_session_task_tools_changed(th_session *s)
{
    notify_tools(s, s->ops.task_tools_changed ? s->ops.task_tools_changed
                                              : s->ops.tools_changed);
}

/* ---- Tools ------------------------------------------------------------------------ */

/* Whether s sees t under the config snapshot cfg (the caller's
 * reference), and the toolset it would run in. */
static bool visible(th_session *s, const th_config *cfg, const th_tool *t,
                    int *ts_idx)
{
    th_host *h = s->h;
    *ts_idx = -1;
    if (th_host_is_task_tool(t->name)) {
        if (cfg->host.expose_task_tools)
            return true;
        pthread_mutex_lock(&s->mu);
        bool v = s->live_tasks > 0;
        pthread_mutex_unlock(&s->mu);
        return v;
    }
    bool any;
    *ts_idx = th_host_pick_toolset(h, cfg, s, t, &any);
    return *ts_idx >= 0;
}

typedef struct pinned {
    const th_tool **v;
    size_t n, cap;
    bool oom;
} pinned;

static int pin_one(const th_tool *t, void *ud)
{
    pinned *p = ud;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 32;
        const th_tool **nv = realloc(p->v, cap * sizeof *nv);
        if (!nv) {
            p->oom = true;
            return 1;
        }
        p->v = nv;
        p->cap = cap;
    }
    th_plugin_ref(t->plugin);
    p->v[p->n++] = t;
    return 0;
}

static char confirm_name[] = "confirm_duplicate";
static char confirm_desc[] =
    "Set to true to run this call even though the same call is still running "
    "(otherwise it is refused as a duplicate).";

int th_session_tools(th_session *s, int (*fn)(const th_tool *t, void *ud),
                     void *ud)
{
    th_host *h = s->h;
    pinned p;
    memset(&p, 0, sizeof p);
    th_registry_foreach(h->reg, pin_one, &p);
    int rc = p.oom ? TH_ENOMEM : 0;
    th_config *cfg = th_host_config_get(h);
    for (size_t i = 0; i < p.n && rc == 0; i++) {
        const th_tool *t = p.v[i];
        int ts_idx;
        if (!visible(s, cfg, t, &ts_idx) ||
            !th_session_tool_listed(s, cfg, t)) /* deferred, not found */
            continue;
        const th_toolset_cfg *ts = ts_idx >= 0 ? &cfg->toolsets[ts_idx] : NULL;
        const th_tool_override *ov = ts ? th_host_override(ts, t->name) : NULL;
        int pol = ts ? (ov && ov->on_duplicate_call >= 0 ? ov->on_duplicate_call
                                                         : (int)ts->on_duplicate_call)
                     : TH_DUP_ALLOW;
        if (pol != TH_DUP_CONFIRM) {
            rc = fn(t, ud);
            continue;
        }
        /* confirm tools publish the host's confirm_duplicate parameter. */
        th_param *params = calloc(t->n_params + 1, sizeof *params);
        if (!params) {
            rc = TH_ENOMEM;
            break;
        }
        if (t->n_params)
            memcpy(params, t->params, t->n_params * sizeof *params);
        params[t->n_params].name = confirm_name;
        params[t->n_params].description = confirm_desc;
        params[t->n_params].type = TOOLHOST_TYPE_BOOLEAN;
        th_tool copy = *t;
        copy.params = params;
        copy.n_params = t->n_params + 1;
        rc = fn(&copy, ud);
        free(params);
    }
    th_config_unref(cfg);
    for (size_t i = 0; i < p.n; i++)
        th_tool_release(p.v[i]);
    free(p.v);
    return rc;
}

/* ---- Found deferred tools (discover.c) ------------------------------------------- */

static bool found_has_locked(const th_session *s, const char *name)
{
    for (size_t i = 0; i < s->found.n; i++)
        if (strcmp(s->found.names[i], name) == 0)
            return true;
    return false;
}

bool th_session_tool_listed(th_session *s, const th_config *cfg,
                            const th_tool *t)
{
    if (!th_host_tool_deferred(s->h, cfg, t))
        return true;
    pthread_mutex_lock(&s->mu);
    bool v = found_has_locked(s, t->name);
    pthread_mutex_unlock(&s->mu);
    return v;
}

int th_session_found_add(th_session *s, uint64_t gen,
                         bool (*keep)(void *ud, const char *name), void *ud,
                         const char *const *names, size_t n, bool *added)
{
    *added = false;
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    if (s->found.gen != gen) { /* drop what the new index no longer defers */
        size_t k = 0;
        for (size_t i = 0; i < s->found.n; i++) {
            if (keep(ud, s->found.names[i]))
                s->found.names[k++] = s->found.names[i];
            else
                free(s->found.names[i]);
        }
        s->found.n = k;
        s->found.gen = gen;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (found_has_locked(s, names[i]))
            continue;
        if (s->found.n == s->found.cap) {
            size_t cap = s->found.cap ? s->found.cap * 2 : 8;
            char **v = realloc(s->found.names, cap * sizeof *v);
            if (!v) {
                rc = TH_ENOMEM;
                break;
            }
            s->found.names = v;
            s->found.cap = cap;
        }
        if (!(s->found.names[s->found.n] = strdup(names[i]))) {
            rc = TH_ENOMEM;
            break;
        }
        s->found.n++;
        *added = true;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

const th_tool *th_session_acquire(th_session *s, const char *name)
{
    const th_tool *t = th_registry_acquire(s->h->reg, name);
    if (!t)
        return NULL;
    int ts_idx;
    th_config *cfg = th_host_config_get(s->h); /* a reload may swap it */
    bool v = visible(s, cfg, t, &ts_idx);
    th_config_unref(cfg);
    if (!v) {
        th_tool_release(t);
        return NULL;
    }
    return t;
}

/* ---- Views: digests shared by the sessions that see the same lists --------- */

/* One kept digest: fn's over the sessions whose usable toolsets are
 * `usable` (as many as the config has toolsets, which a reload cannot
 * change). */
typedef struct th_view {
    struct th_view *next;
    th_view_fn fn;
    uint64_t digest;
    bool usable[];
} th_view;

/* What th_session_view_digest did on this thread (th_host_views_counts):
 * a reload's telling counts its own work, not the fronts' threads'. */
static _Thread_local uint64_t views_computed, views_shared;

/* Whether s sees lists of its own, which no other session of its view
 * shares: deferred tools it found, or the task tools while it has live
 * tasks (visible()). */
static bool own_lists(th_session *s)
{
    pthread_mutex_lock(&s->mu);
    bool v = s->found.n > 0 || s->live_tasks > 0;
    pthread_mutex_unlock(&s->mu);
    return v;
}

uint64_t th_session_view_digest(th_session *s, th_view_fn fn, void *ud)
{
    th_host *h = s->h;
    if (own_lists(s)) {
        views_computed++;
        return fn(s, ud);
    }
    size_t n = s->n_usable;
    pthread_mutex_lock(&h->viewmu);
    for (th_view *v = h->views; v; v = v->next)
        if (v->fn == fn && memcmp(v->usable, s->usable, n) == 0) {
            uint64_t d = v->digest;
            views_shared++;
            pthread_mutex_unlock(&h->viewmu);
            return d;
        }
    uint64_t d = fn(s, ud);
    views_computed++;
    /* Kept only when s still has no list of its own (search_tools may
     * have found a tool for it meanwhile). */
    th_view *v = d && !own_lists(s) ? malloc(sizeof *v + (n ? n : 1)) : NULL;
    if (v) {
        v->fn = fn;
        v->digest = d;
        if (n)
            memcpy(v->usable, s->usable, n);
        v->next = h->views;
        h->views = v;
    }
    pthread_mutex_unlock(&h->viewmu);
    return d;
}

uint64_t th_view_digest(const void *p, size_t n)
{
    struct sha256_ctx c;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&c);
    sha256_update(&c, n, p);
    sha256_digest(&c, sizeof d, d);
    uint64_t v;
    memcpy(&v, d, sizeof v);
    return v | 1;
}

void th_host_views_reset(th_host *h)
{
    pthread_mutex_lock(&h->viewmu);
    th_view *v = h->views;
    h->views = NULL;
    pthread_mutex_unlock(&h->viewmu);
    while (v) {
        th_view *next = v->next;
        free(v);
        v = next;
    }
}

void th_host_views_counts(uint64_t *computed, uint64_t *shared)
{
    *computed = views_computed;
    *shared = views_shared;
}

/* ---- Calls' origin ------------------------------------------------------------------ */

uint64_t th_call_origin(th_session *s, uint64_t call_id)
{
    uint64_t root = 0;
    th_mcall *c0 = th_mgr_session_call(s, call_id); /* map or call slot */
    /* c->parent is fixed at creation and referenced by c, which our
     * reference keeps */
    for (const th_mcall *c = c0; c; c = c->parent) {
        if (c->s != s)
            break;
        root = c->base.pub.call_id;
    }
    if (c0)
        s->h->mgr.ops->unref(c0);
    return root;
}

bool th_acl_allows(const th_toolset_cfg *ts, const th_principal *who)
{
    return acl_allows(ts, who);
}

bool th_principal_is(const th_principal *who, const char *entry)
{
    return who->user ? strcmp(who->user, entry) == 0
                     : user_is(entry, who->uid);
}
