/* content.c - resources, prompts and completion served to a session
 * (ABI 1.4, th/content.h): which plugins a session is offered, and the
 * read, get and complete of what they declared (plugin_content.c keeps
 * it), each plugin callback run with its generation pinned. */
#include "th/content.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manager.h"
#include "th/clock.h"
#include "th/config.h"
#include "th/log.h"

/* ---- Served to a session ------------------------------------------------------ */

/* The generations that offer resources or prompts, pinned. */
/* The generations a session is offered that declare resources or
 * prompts, pinned; filled under the registry's read lock. */
typedef struct gens {
    th_session *s;
    const th_config *cfg;
    th_plugin **v;
    size_t n, cap;
} gens;

/* Whether a toolset the session may use offers plugin p. */
static bool offered(th_session *s, const th_config *cfg, const th_plugin *p)
{
    for (size_t i = 0; i < cfg->n_toolsets; i++) {
        if (!s->usable[i])
            continue;
        const th_toolset_cfg *ts = &cfg->toolsets[i];
        for (size_t k = 0; k < ts->n_tools; k++)
            if (strcmp(ts->tools[k], "*") == 0)
                return true;
        for (size_t t = 0; t < p->n_tools; t++)
            if (th_host_toolset_has(s->h, ts, &p->tools[t]))
                return true;
    }
    return false;
}

static int gen_one(th_plugin *p, void *ud)
{
    gens *g = ud;
    if ((!p->n_resources && !p->n_prompts) || !offered(g->s, g->cfg, p))
        return 0;
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 8;
        th_plugin **v = realloc(g->v, cap * sizeof *v);
        if (!v)
            return TH_ENOMEM;
        g->v = v;
        g->cap = cap;
    }
    th_plugin_ref(p);
    g->v[g->n++] = p;
    return 0;
}

static void gens_free(gens *g)
{
    for (size_t i = 0; i < g->n; i++)
        th_plugin_unref(g->v[i]);
    free(g->v);
}

/* The generations the session is offered, pinned (gens_free). */
static int offered_gens(th_session *s, gens *g)
{
    th_config *cfg = th_host_config_get(s->h);
    *g = (gens){.s = s, .cfg = cfg};
    int rc = th_registry_foreach_plugin(s->h->reg, gen_one, g);
    th_config_unref(cfg);
    g->cfg = NULL;
    if (rc) {
        gens_free(g);
        memset(g, 0, sizeof *g);
    }
    return rc;
}

int th_session_resources(th_session *s, bool templates,
                         int (*fn)(const th_resource *r, void *ud), void *ud)
{
    gens g;
    int rc = offered_gens(s, &g);
    for (size_t i = 0; rc == 0 && i < g.n; i++)
        for (size_t k = 0; rc == 0 && k < g.v[i]->n_resources; k++)
            if (g.v[i]->resources[k].is_template == templates)
                rc = fn(&g.v[i]->resources[k], ud);
    gens_free(&g);
    return rc;
}

int th_session_prompts(th_session *s, int (*fn)(const th_prompt *p, void *ud),
                       void *ud)
{
    gens g;
    int rc = offered_gens(s, &g);
    for (size_t i = 0; rc == 0 && i < g.n; i++)
        for (size_t k = 0; rc == 0 && k < g.v[i]->n_prompts; k++)
            rc = fn(&g.v[i]->prompts[k], ud);
    gens_free(&g);
    return rc;
}

/* Times a plugin callback as a short call is timed. */
static void timed_end(th_session *s, const th_plugin *p, const char *what,
                      const char *name, int64_t t0)
{
    int64_t ms = (th_now_ns() - t0) / 1000000;
    th_config *cfg = th_host_config_get(s->h);
    uint64_t max = cfg->host.short_call_max_ms;
    th_config_unref(cfg);
    if (max && (uint64_t)ms > max)
        th_log(TOOLHOST_LOG_WARN,
               "plugin %s: %s of '%s' took %lld ms, past host.short_call_max "
               "(%llu ms): it runs on the front's thread and must not block "
               "(offer slow content as a tool)",
               p->name, what, name, (long long)ms, (unsigned long long)max);
}

static int plugin_said(int rc, const char *reason, const th_content *out,
                       const char *what, const char *name, th_error *err)
{
    if (out->bad)
        return th_error_set(err, TH_ETOOL, "%s '%s': the plugin gave bad "
                            "content: %s", what, name, out->why);
    if (rc == TOOLHOST_OK)
        return 0;
    if (rc == TOOLHOST_NOT_FOUND && !out->fail_code)
        return th_error_set(err, TH_ENOTFOUND, "%s '%s': not found", what,
                            name);
    return th_error_set(err, out->fail_code ? out->fail_code : TH_EFAILED, "%s '%s' failed: %s", what, name,
                        reason[0] ? reason : "(no reason given)");
}

/* The resource at uri among the generations g: a fixed URI in any of
 * them first, then the first template that matches; *pp its plugin. */
static const th_resource *find_resource(const gens *g, const char *uri,
                                        th_plugin **pp)
{
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < g->n; i++) {
            const th_resource *r = th_resource_at(g->v[i], uri, pass == 1);
            if (r) {
                *pp = g->v[i];
                return r;
            }
        }
    return NULL;
}

bool th_session_resource_offered(th_session *s, const char *uri)
{
    gens g;
    if (offered_gens(s, &g) != 0)
        return false;
    th_plugin *p;
    bool hit = find_resource(&g, uri, &p) != NULL;
    gens_free(&g);
    return hit;
}

int th_session_read(th_session *s, const char *uri, th_content *out,
                    th_error *err)
{
    gens g;
    if (offered_gens(s, &g) != 0)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    th_plugin *hp = NULL;
    const th_resource *hit = find_resource(&g, uri, &hp);
    int rc;
    if (!hit) {
        rc = th_error_set(err, TH_ENOTFOUND, "resource '%.300s': not found",
                          uri);
    } else {
        char reason[512] = "";
        out->plugin = hp->name;
        out->pub.host = &hp->api;
        int64_t t0 = th_now_ns();
        th_content_enter(out);
        int prc = hit->desc->read(hp->state, hit->desc, uri, &out->pub, reason,
                                  sizeof reason);
        th_content_leave();
        reason[sizeof reason - 1] = 0;
        timed_end(s, hp, "read", uri, t0);
        rc = plugin_said(prc, reason, out, "resource", uri, err);
        /* each item names its URI and type */
        for (size_t i = 0; rc == 0 && i < out->n; i++) {
            th_block *b = &out->v[i];
            if (!b->uri && !(b->uri = strdup(uri)))
                rc = th_error_set(err, TH_ENOMEM, "out of memory");
            if (rc == 0 && !b->mime_type && hit->mime_type &&
                !(b->mime_type = strdup(hit->mime_type)))
                rc = th_error_set(err, TH_ENOMEM, "out of memory");
        }
    }
    gens_free(&g);
    return rc;
}

static const th_prompt *find_prompt(const gens *g, const char *name,
                                    th_plugin **pp)
{
    for (size_t i = 0; i < g->n; i++)
        for (size_t k = 0; k < g->v[i]->n_prompts; k++)
            if (strcmp(g->v[i]->prompts[k].name, name) == 0) {
                *pp = g->v[i];
                return &g->v[i]->prompts[k];
            }
    return NULL;
}

int th_session_prompt_get(th_session *s, const char *name, const uint8_t *args,
                          size_t len, th_content *out, th_error *err)
{
    static const uint8_t empty_map = 0x80;
    if (!args || !len) {
        args = &empty_map;
        len = 1;
    }
    gens g;
    if (offered_gens(s, &g) != 0)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    th_plugin *p = NULL;
    const th_prompt *q = find_prompt(&g, name, &p);
    int rc;
    th_verr ve;
    th_buf filled;
    th_buf_init(&filled);
    bool did_fill = false;
    if (!q) {
        rc = th_error_set(err, TH_ENOTFOUND, "prompt '%.200s': not found",
                          name);
    } else if ((rc = th_validate_params(q->name, q->args, q->n_args, args, len,
                                        &filled, &did_fill, &ve)) != 0) {
        *err = ve.e;
    } else {
        if (did_fill) {
            args = filled.data;
            len = filled.len;
        }
        char reason[512] = "";
        out->plugin = p->name;
        out->pub.host = &p->api;
        int64_t t0 = th_now_ns();
        th_content_enter(out);
        int prc = q->desc->get(p->state, q->desc, args, len, &out->pub, reason,
                               sizeof reason);
        th_content_leave();
        reason[sizeof reason - 1] = 0;
        timed_end(s, p, "get", name, t0);
        rc = plugin_said(prc, reason, out, "prompt", name, err);
    }
    th_buf_destroy(&filled);
    gens_free(&g);
    return rc;
}

int th_session_complete(th_session *s, bool is_prompt, const char *ref,
                        const char *arg, const char *value, th_content *out,
                        th_error *err)
{
    gens g;
    if (offered_gens(s, &g) != 0)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    th_plugin *p = NULL;
    int rc = 0;
    int prc = TOOLHOST_OK;
    int64_t t0 = th_now_ns();
    out->plugin = NULL;
    if (is_prompt) {
        const th_prompt *q = find_prompt(&g, ref, &p);
        bool has = false;
        for (size_t i = 0; q && i < q->n_args; i++)
            has |= strcmp(q->args[i].name, arg) == 0;
        if (!q || !has)
            rc = th_error_set(err, TH_ENOTFOUND, q ? "prompt '%.200s' has no "
                              "argument '%.100s'" : "prompt '%.200s': not "
                              "found%.0s", ref, arg);
        else if (q->desc->complete) {
            out->plugin = p->name;
            out->pub.host = &p->api;
            th_content_enter(out);
            prc = q->desc->complete(p->state, q->desc, arg, value, &out->pub);
            th_content_leave();
        }
    } else {
        const th_resource *hit = NULL;
        for (size_t i = 0; i < g.n && !hit; i++)
            for (size_t k = 0; k < g.v[i]->n_resources && !hit; k++)
                if (g.v[i]->resources[k].is_template &&
                    strcmp(g.v[i]->resources[k].uri, ref) == 0) {
                    hit = &g.v[i]->resources[k];
                    p = g.v[i];
                }
        char var[80];
        int vn = snprintf(var, sizeof var, "{%s}", arg);
        if (!hit || vn < 0 || (size_t)vn >= sizeof var ||
            !strstr(hit->uri, var))
            rc = th_error_set(err, TH_ENOTFOUND, hit ? "resource template "
                              "'%.200s' has no variable '%.60s'" :
                              "resource template '%.200s': not found%.0s",
                              ref, arg);
        else if (hit->desc->complete) {
            out->plugin = p->name;
            out->pub.host = &p->api;
            th_content_enter(out);
            prc = hit->desc->complete(p->state, hit->desc, arg, value,
                                      &out->pub);
            th_content_leave();
        }
    }
    if (rc == 0 && out->plugin) {
        timed_end(s, p, "complete", ref, t0);
        rc = plugin_said(prc, "", out, "completion of", ref, err);
    }
    gens_free(&g);
    return rc;
}
