/* nats_config.c - the `nats:` config section (front/nats_config.h): keys,
 * defaults and checks of the NATS front, registered with the core's config
 * reader through th/section.h; and the nats:// entry of host.listen.
 *
 * Threads: the config reader's (th/section.h).
 */
#include "front/nats_config.h"

#include <stdlib.h>
#include <string.h>

#define N(f) offsetof(th_nats_cfg, f)
static const th_cfkey nats_keys[] = {
    {.name = "prefix", .set = th_cf_str, .off = N(prefix)},
    {.name = "name", .set = th_cf_str, .off = N(name)},
    {.name = "user", .set = th_cf_str, .off = N(user)},
    {.name = "password", .set = th_cf_str, .off = N(password)},
    {.name = "token", .set = th_cf_str, .off = N(token)},
    {.name = "creds", .set = th_cf_str, .off = N(creds), .flags = TH_CF_PATH},
    {.name = "tls_ca", .set = th_cf_str, .off = N(tls_ca), .flags = TH_CF_PATH},
    {.name = "tls_cert", .set = th_cf_str, .off = N(tls_cert),
     .flags = TH_CF_PATH},
    {.name = "tls_key", .set = th_cf_str, .off = N(tls_key), .flags = TH_CF_PATH},
    {.name = "toolsets", .set = th_cf_strlist, .off = N(toolsets),
     .off2 = N(n_toolsets)},
    {.name = "as_user", .set = th_cf_str, .off = N(as_user)},
    {.name = "reconnect_wait", .set = th_cf_duration,
     .off = N(reconnect_wait_ms), .min = 10, .max = TH_MINUTE_MS},
    {.name = "max_pending", .set = th_cf_u32, .off = N(max_pending),
     .min = 16, .max = 10000000},
    {.name = "results_bucket", .set = th_cf_str, .off = N(results_bucket)},
    {.name = "results_ttl", .set = th_cf_duration, .off = N(results_ttl_ms),
     .min = TH_SEC_MS, .max = 7 * TH_DAY_MS},
    {.name = "users", .set = th_cf_strlist, .off = N(users),
     .off2 = N(n_users)},
    {.name = "results_key_file", .set = th_cf_str, .off = N(results_key_file),
     .flags = TH_CF_PATH},
    {.name = "results_replicas", .set = th_cf_u32, .off = N(results_replicas),
     .min = 1, .max = 5},
    {.name = "reply_batching", .set = th_cf_bool, .off = N(no_reply_batching),
     .flags = TH_CF_NOT},
    {.name = NULL}};
#undef N

/* A subject token: letters, digits, '-', '_' (no '.', '*', '>', spaces). */
static bool nats_token_ok(const char *s, bool dots)
{
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' ||
              (dots && *s == '.')))
            return false;
    return true;
}

static int nats_check(th_cfctx *c, th_ynode *n, void *el)
{
    th_nats_cfg *m = el;
    if (n && n->kind == TH_Y_MAP) {
        m->line = n->line;
        m->col = n->col;
    }
    if (m->prefix && !nats_token_ok(m->prefix, true))
        return th_cf_err(c, th_ynode_get(n, "prefix"), "'prefix' must be "
                      "subject tokens (letters, digits, '-', '_', '.'), got "
                      "'%s'", m->prefix);
    if (m->name && !nats_token_ok(m->name, false))
        return th_cf_err(c, th_ynode_get(n, "name"), "'name' must be letters, "
                      "digits, '-' or '_', got '%s'", m->name);
    if ((m->tls_cert != NULL) != (m->tls_key != NULL))
        return th_cf_err(c, n, "'tls_cert' and 'tls_key' go together");
    if ((m->user != NULL) != (m->password != NULL))
        return th_cf_err(c, n, "'user' and 'password' go together");
    if ((m->user != NULL) + (m->token != NULL) + (m->creds != NULL) > 1)
        return th_cf_err(c, n, "give one of 'user'/'password', 'token' or "
                      "'creds'");
    for (size_t i = 0; i < m->n_users; i++) {
        const th_ynode *ul = th_ynode_get(n, "users");
        if (!nats_token_ok(m->users[i], false))
            return th_cf_err(c, ul && ul->kind == TH_Y_SEQ && i < ul->n
                                 ? ul->kids[i] : ul,
                          "nats.users: '%s' cannot be a subject token "
                          "(letters, digits, '-', '_')", m->users[i]);
    }
    if (m->results_bucket && !nats_token_ok(m->results_bucket, false))
        return th_cf_err(c, th_ynode_get(n, "results_bucket"),
                      "'results_bucket' must be a bucket name (letters, "
                      "digits, '-', '_') or off, got '%s'",
                      m->results_bucket);
    return 0;
}

/* After the whole config: defaults, and what a nats:// listen entry
 * needs: the toolsets named in nats.toolsets
 * exist (a host serves on NATS only toolsets the config names). */
static int nats_finish(th_cfctx *c, const th_ynode *nn, void *sec)
{
    th_nats_cfg *m = sec;
    const th_config *cfg = th_cf_config(c);
    if (!m->prefix && !(m->prefix = strdup("toolhost")))
        return th_cf_nomem(c);
    if (!m->name && !(m->name = strdup("toolhost")))
        return th_cf_nomem(c);
    if (!m->as_user && !(m->as_user = strdup("nats")))
        return th_cf_nomem(c);
    if (!m->reconnect_wait_ms)
        m->reconnect_wait_ms = 250;
    if (!m->max_pending)
        m->max_pending = 65536;
    if (!m->results_bucket && !(m->results_bucket = strdup("toolhost_results")))
        return th_cf_nomem(c);
    const th_ynode *tl = nn ? th_ynode_get(nn, "toolsets") : NULL;
    for (size_t i = 0; i < m->n_toolsets; i++) {
        const th_ynode *at = tl && tl->kind == TH_Y_SEQ && i < tl->n
                                 ? tl->kids[i] : tl;
        size_t j;
        for (j = 0; j < cfg->n_toolsets; j++)
            if (strcmp(cfg->toolsets[j].name, m->toolsets[i]) == 0)
                break;
        if (j == cfg->n_toolsets)
            return th_cf_err(c, at, "nats.toolsets: no toolset '%s'",
                          m->toolsets[i]);
        if (!nats_token_ok(m->toolsets[i], false))
            return th_cf_err(c, at, "nats.toolsets: '%s' cannot be a subject "
                          "token (letters, digits, '-', '_')",
                          m->toolsets[i]);
    }
    if (m->listen && m->n_toolsets == 0) {
        const th_ynode *hn = th_ynode_get(cfg->root, "host");
        return th_cf_err(c, hn ? th_ynode_get(hn, "listen") : NULL,
                      "'listen' has a nats:// entry but nats.toolsets names "
                      "no toolset (a host serves on NATS only the toolsets "
                      "listed there)");
    }
    return 0;
}

/* Whether `name` is the user NATS calls run as (nats.as_user, default
 * "nats") or one of nats.users (docs/scale.md): a user of the host, not
 * of the system. */
static bool nats_names_user(const th_ynode *m, const char *name)
{
    const th_ynode *u = m && m->kind == TH_Y_MAP ? th_ynode_get(m, "as_user") : NULL;
    if (u && u->kind == TH_Y_SCALAR && strcmp(u->str, name) == 0)
        return true;
    const th_ynode *us = m && m->kind == TH_Y_MAP ? th_ynode_get(m, "users")
                                                  : NULL;
    for (size_t i = 0; us && us->kind == TH_Y_SEQ && i < us->n; i++)
        if (us->kids[i]->kind == TH_Y_SCALAR &&
            strcmp(us->kids[i]->str, name) == 0)
            return true;
    if (u && u->kind == TH_Y_SCALAR)
        return false;
    return m && strcmp(name, "nats") == 0;
}


/* host.listen: nats://HOST:PORT (or tls://), one entry (more servers of a
 * cluster go comma-separated in it). */
static int nats_listen(th_cfctx *c, const th_ynode *v, void *sec)
{
    th_nats_cfg *m = sec;
    if (m->listen)
        return th_cf_err(c, v, "'listen' has more than one nats:// entry; "
                         "list more servers of one cluster in one entry, "
                         "comma-separated");
    const char *hp = v->str + (v->str[0] == 'n' ? 7 : 6);
    if (!*hp || !strchr(hp, ':'))
        return th_cf_err(c, v, "'listen': '%s' must be nats://HOST:PORT",
                         v->str);
    m->listen = strdup(v->str);
    return m->listen ? 0 : th_cf_nomem(c);
}

static void nats_free(void *sec)
{
    th_nats_cfg *nc = sec;
    free(nc->prefix);
    free(nc->name);
    free(nc->user);
    free(nc->password);
    free(nc->token);
    free(nc->creds);
    free(nc->tls_ca);
    free(nc->tls_cert);
    free(nc->tls_key);
    th_strv_free(nc->toolsets, nc->n_toolsets);
    free(nc->as_user);
    free(nc->results_bucket);
    th_strv_free(nc->users, nc->n_users);
    free(nc->results_key_file);
    free(nc->listen);
}

static bool same_str(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

static bool same_strv(char *const *a, size_t na, char *const *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (!same_str(a[i], b[i]))
            return false;
    return true;
}

/* The NATS front keeps the config it started with (th_nats_start takes a
 * reference): its connection, subjects, users and toolsets are those of
 * the start, so any change to the section, the nats:// entry included,
 * waits for the next restart.  Nothing to say when neither config serves
 * on NATS. */
static const char *nats_reload_note(const void *old, const void *cur)
{
    const th_nats_cfg *a = old, *b = cur;
    if (!a->listen && !b->listen)
        return NULL;
    bool same =
        same_str(a->listen, b->listen) && same_str(a->prefix, b->prefix) &&
        same_str(a->name, b->name) && same_str(a->user, b->user) &&
        same_str(a->password, b->password) && same_str(a->token, b->token) &&
        same_str(a->creds, b->creds) && same_str(a->tls_ca, b->tls_ca) &&
        same_str(a->tls_cert, b->tls_cert) &&
        same_str(a->tls_key, b->tls_key) &&
        same_strv(a->toolsets, a->n_toolsets, b->toolsets, b->n_toolsets) &&
        same_str(a->as_user, b->as_user) &&
        a->reconnect_wait_ms == b->reconnect_wait_ms &&
        a->max_pending == b->max_pending &&
        same_str(a->results_bucket, b->results_bucket) &&
        a->results_ttl_ms == b->results_ttl_ms &&
        same_strv(a->users, a->n_users, b->users, b->n_users) &&
        same_str(a->results_key_file, b->results_key_file) &&
        a->results_replicas == b->results_replicas &&
        a->no_reply_batching == b->no_reply_batching;
    return same ? NULL
                : "reload: host.listen's nats:// entry and the nats: section "
                  "change at the next restart";
}

static const char *const nats_schemes[] = {"nats://", "tls://", NULL};

const th_section th_nats_section = {
    .name = "nats",
    .size = sizeof(th_nats_cfg),
    .keys = nats_keys,
    .check = nats_check,
    .finish = nats_finish,
    .free = nats_free,
    .schemes = nats_schemes,
    .listen_form = "nats://HOST:PORT (NATS)",
    .listen = nats_listen,
    .names_user = nats_names_user,
    .reload_note = nats_reload_note,
};
