/* mcp_config.c - the `mcp:` config section (front/mcp_config.h): keys,
 * defaults and checks of the Streamable HTTP front, registered with the
 * core's config reader through th/section.h; and the http:// entries of
 * host.listen.
 *
 * Threads: the config reader's (th/section.h).
 */
#include "front/mcp_config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nettle/base16.h>
#include <nettle/sha2.h>

#include "front/http.h"

static void sha256_of(const char *s, size_t len, uint8_t out[32])
{
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, len, (const uint8_t *)s);
    sha256_digest(&ctx, 32, out);
}

/* A token's text: no surrounding white space, at least 16 bytes, printable
 * ASCII without spaces (what a Bearer header can carry). */
static int token_text(th_cfctx *c, const th_ynode *at, const char *what,
                      const char *s, size_t len, uint8_t out[32])
{
    while (len && (s[len - 1] == '\n' || s[len - 1] == '\r' ||
                   s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    while (len && (*s == ' ' || *s == '\t')) {
        s++;
        len--;
    }
    if (len < 16)
        return th_cf_err(c, at, "the token %s is %s (a token has at least 16 "
                      "characters)", what, len ? "too short" : "empty");
    for (size_t i = 0; i < len; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return th_cf_err(c, at, "the token %s has a character a bearer "
                          "token cannot carry (at byte %zu)", what, i);
    sha256_of(s, len, out);
    return 0;
}

static const th_cfkey token_keys[] = {
    {.name = "user", .set = th_cf_str, .off = offsetof(th_mcp_token_cfg, user),
     .flags = TH_CF_REQUIRED},
    {.name = "sha256", .set = th_cf_str,
     .off = offsetof(th_mcp_token_cfg, sha256_hex)},
    {.name = "file", .set = th_cf_str, .off = offsetof(th_mcp_token_cfg, file),
     .flags = TH_CF_PATH},
    {.name = "env", .set = th_cf_str, .off = offsetof(th_mcp_token_cfg, env)},
    {.name = "uid", .set = th_cf_u32, .off = offsetof(th_mcp_token_cfg, uid),
     .min = 0, .max = 4294967294u},
    {.name = NULL}};

static int token_check(th_cfctx *c, th_ynode *n, void *el)
{
    th_mcp_token_cfg *t = el;
    t->line = n->line;
    t->col = n->col;
    if (!t->user || !*t->user)
        return th_cf_err(c, n, "a token needs a 'user' (the name toolsets' "
                      "allow_users match)");
    t->has_uid = th_ynode_get(n, "uid") != NULL;
    int ways = (t->sha256_hex != NULL) + (t->file != NULL) + (t->env != NULL);
    if (ways != 1)
        return th_cf_err(c, n, "the token of user '%s' needs exactly one of "
                      "'sha256' (the token's SHA-256 in hex), 'file' or "
                      "'env'", t->user);
    int rc = 0;
    if (t->sha256_hex) {
        const th_ynode *v = th_ynode_get(n, "sha256");
        if (strlen(t->sha256_hex) != 64)
            return th_cf_err(c, v, "'sha256' must be 64 hex digits (sha256sum "
                          "of the token), got %zu characters",
                          strlen(t->sha256_hex));
        struct base16_decode_ctx hx;
        size_t got = sizeof t->sha256;
        base16_decode_init(&hx);
        if (!base16_decode_update(&hx, &got, t->sha256, 64,
                                  t->sha256_hex) ||
            !base16_decode_final(&hx) || got != sizeof t->sha256)
            return th_cf_err(c, v, "'sha256' must be 64 hex digits");
    } else if (t->env) {
        const th_ynode *v = th_ynode_get(n, "env");
        const char *val = getenv(t->env);
        if (!val || !*val) {
            /* Fails closed: the entry matches no token; `serve` warns. A
             * config shared by commands that never serve HTTP loads. */
            t->disabled = true;
            return 0;
        }
        char what[300];
        snprintf(what, sizeof what, "in $%.200s", t->env);
        rc = token_text(c, v, what, val, strlen(val), t->sha256);
    } else {
        const th_ynode *v = th_ynode_get(n, "file");
        int fd = open(t->file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        struct stat st;
        if (fd < 0)
            return th_cf_err(c, v, "the token of user '%s': cannot open '%s': "
                          "%s", t->user, t->file, strerror(errno));
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
            st.st_size > 4096) {
            close(fd);
            return th_cf_err(c, v, "the token of user '%s': '%s' is not a "
                          "regular file of at most 4KiB", t->user, t->file);
        }
        char buf[4097];
        ssize_t got = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (got < 0)
            return th_cf_err(c, v, "the token of user '%s': cannot read '%s': "
                          "%s", t->user, t->file, strerror(errno));
        char what[300];
        snprintf(what, sizeof what, "in %.200s", t->file);
        rc = token_text(c, v, what, buf, (size_t)got, t->sha256);
        memset(buf, 0, sizeof buf);
    }
    if (rc < 0)
        return rc;
    const th_mcp_cfg *m = th_mcp_config(th_cf_config(c));
    for (const th_mcp_token_cfg *o = m->tokens; o < t; o++)
        if (!o->disabled && memcmp(o->sha256, t->sha256, 32) == 0)
            return th_cf_err(c, n, "the token of user '%s' is the token of "
                          "user '%s' (line %d) too", t->user, o->user,
                          o->line);
    return 0;
}

#define M(f) offsetof(th_mcp_cfg, f)
static const th_cfkey mcp_keys[] = {
    {.name = "tokens", .set = th_cf_list, .off = M(tokens),
     .off2 = M(n_tokens), .sub = token_keys,
     .elem_size = sizeof(th_mcp_token_cfg), .check = token_check,
     .what = "token"},
    {.name = "allow_origins", .set = th_cf_strlist, .off = M(allow_origins),
     .off2 = M(n_allow_origins)},
    {.name = "allow_remote", .set = th_cf_bool, .off = M(allow_remote)},
    {.name = "tls_cert", .set = th_cf_str, .off = M(tls_cert),
     .flags = TH_CF_PATH},
    {.name = "tls_key", .set = th_cf_str, .off = M(tls_key), .flags = TH_CF_PATH},
    {.name = "max_body", .set = th_cf_size, .off = M(max_body), .min = TH_KIB,
     .max = TH_GIB},
    {.name = "max_sessions", .set = th_cf_u32, .off = M(max_sessions),
     .min = 1, .max = 100000},
    {.name = "max_sessions_per_user", .set = th_cf_u32,
     .off = M(max_sessions_per_user), .min = 1, .max = 100000},
    {.name = "max_streams", .set = th_cf_u32, .off = M(max_streams), .min = 1,
     .max = 64},
    {.name = "max_connections", .set = th_cf_u32, .off = M(max_connections),
     .min = 2, .max = 100000},
    {.name = "session_idle", .set = th_cf_duration, .off = M(session_idle_ms),
     .min = 100, .max = 7 * TH_DAY_MS},
    {.name = "max_queued", .set = th_cf_size, .off = M(max_queued),
     .min = 4 * TH_KIB, .max = TH_GIB},
    {.name = "client_timeout", .set = th_cf_duration,
     .off = M(client_timeout_ms), .min = 0, .max = TH_DAY_MS},
    {.name = "keepalive", .set = th_cf_duration, .off = M(keepalive_ms),
     .min = 100, .max = TH_HOUR_MS},
    {.name = "header_timeout", .set = th_cf_duration,
     .off = M(header_timeout_ms), .min = 100, .max = TH_HOUR_MS},
    {.name = "body_timeout", .set = th_cf_duration, .off = M(body_timeout_ms),
     .min = 100, .max = TH_DAY_MS},
    {.name = "max_connections_per_address", .set = th_cf_u32,
     .off = M(max_connections_per_address), .min = 1, .max = 100000},
    {.name = "http_threads", .set = th_cf_u32, .off = M(http_threads),
     .min = 1, .max = 64},
    {.name = "max_json_depth", .set = th_cf_u32, .off = M(max_json_depth),
     .min = 2, .max = 1000},
    {.name = "max_json_elements", .set = th_cf_u32,
     .off = M(max_json_elements), .min = 16, .max = 100000000},
    {.name = "tls_priorities", .set = th_cf_str, .off = M(tls_priorities)},
    {.name = "sse_poll", .set = th_cf_duration, .off = M(sse_poll_ms),
     .min = 0, .max = TH_HOUR_MS},
    {.name = "sse_replay_events", .set = th_cf_u32,
     .off = M(sse_replay_events), .min = 1, .max = 100000},
    {.name = "sse_replay_time", .set = th_cf_duration,
     .off = M(sse_replay_ms), .min = 100, .max = TH_DAY_MS},
    {.name = "max_subscriptions", .set = th_cf_u32,
     .off = M(max_subscriptions), .min = 1, .max = 1000000},
    {.name = NULL}};
#undef M

static void mcp_init(void *sec)
{
    th_mcp_cfg *m = sec;
    m->max_body = 4 * TH_MIB;
    m->max_sessions = 64;
    m->max_sessions_per_user = 16;
    m->max_streams = 2;
    m->max_connections = 256;
    m->session_idle_ms = 30 * TH_MINUTE_MS;
    m->max_queued = 8 * TH_MIB;
    m->client_timeout_ms = 60 * TH_SEC_MS;
    m->keepalive_ms = 15 * TH_SEC_MS;
    m->header_timeout_ms = 10 * TH_SEC_MS;
    m->body_timeout_ms = 60 * TH_SEC_MS;
    m->max_connections_per_address = 64;
    m->http_threads = 2;
    m->max_json_depth = 64;
    m->max_json_elements = 100000;
    m->sse_poll_ms = 0;
    m->sse_replay_events = 64;
    m->sse_replay_ms = 60 * TH_SEC_MS;
    m->max_subscriptions = 256;
    m->max_message = 16 * TH_MIB;
}

static int mcp_check(th_cfctx *c, th_ynode *n, void *el)
{
    th_mcp_cfg *m = el;
    if (n && n->kind == TH_Y_MAP) {
        m->line = n->line;
        m->col = n->col;
    }
    if ((m->tls_cert != NULL) != (m->tls_key != NULL))
        return th_cf_err(c, n, "'tls_cert' and 'tls_key' go together");
    return 0;
}

/* host.listen: an http:// or https:// entry, MCP or (path /metrics) the
 * Prometheus endpoint. */
static int mcp_listen(th_cfctx *c, const th_ynode *v, void *sec)
{
    th_mcp_cfg *m = sec;
    th_http_url u;
    th_error e;
    th_error_clear(&e);
    if (th_http_parse_url(v->str, &u, &e) < 0)
        return th_cf_err(c, v, "'listen': %s", e.msg);
    /* one daemon per entry: two entries cannot share an address (port 0,
     * a port of the kernel's choosing, may repeat) */
    for (int k = 0; k < 2 && u.port; k++) {
        char **l = k ? m->listen_metrics : m->listen_http;
        size_t ln = k ? m->n_listen_metrics : m->n_listen_http;
        for (size_t i = 0; i < ln; i++) {
            th_http_url o;
            if (th_http_parse_url(l[i], &o, NULL) == 0 && o.port == u.port &&
                strcmp(o.host, u.host) == 0)
                return th_cf_err(c, v, "'listen': %s takes the address of "
                                 "%s (an http:// entry is a server of its "
                                 "own: give each its own port)", v->str,
                                 l[i]);
        }
    }
    bool metrics = strcmp(u.path, "/metrics") == 0;
    char ***list = metrics ? &m->listen_metrics : &m->listen_http;
    size_t *n = metrics ? &m->n_listen_metrics : &m->n_listen_http;
    char **nv = realloc(*list, (*n + 1) * sizeof *nv);
    if (!nv)
        return th_cf_nomem(c);
    *list = nv;
    if (!(nv[*n] = strdup(v->str)))
        return th_cf_nomem(c);
    (*n)++;
    return 0;
}

/* What the listen entries need of the section. */
static int listen_entries_check(th_cfctx *c, const th_mcp_cfg *m,
                                char *const *list, size_t n,
                                const char *what)
{
    const th_config *cfg = th_cf_config(c);
    const th_ynode *hn = th_ynode_get(cfg->root, "host");
    const th_ynode *at = hn ? th_ynode_get(hn, "listen") : NULL;
    for (size_t i = 0; i < n; i++) {
        th_http_url u;
        if (th_http_parse_url(list[i], &u, NULL) < 0)
            continue;
        if (!u.loopback && !m->allow_remote)
            return th_cf_err(c, at, "'listen': %s is not a loopback address; "
                             "set mcp.allow_remote: true to serve %s on it",
                             list[i], what);
        if (u.tls && !m->tls_cert)
            return th_cf_err(c, at, "'listen': %s needs mcp.tls_cert and "
                             "mcp.tls_key", list[i]);
    }
    return 0;
}

static int mcp_finish(th_cfctx *c, const th_ynode *n, void *sec)
{
    (void)n;
    const th_mcp_cfg *m = sec;
    int rc = listen_entries_check(c, m, m->listen_http, m->n_listen_http,
                                  "MCP");
    if (rc == 0)
        rc = listen_entries_check(c, m, m->listen_metrics,
                                  m->n_listen_metrics, "metrics");
    if (rc == 0 && m->n_listen_http && m->n_tokens == 0) {
        const th_ynode *hn = th_ynode_get(th_cf_config(c)->root, "host");
        return th_cf_err(c, hn ? th_ynode_get(hn, "listen") : NULL,
                         "'listen' has an http:// entry but mcp.tokens "
                         "declares no token (every request would be "
                         "refused)");
    }
    return rc;
}

static void mcp_free(void *sec)
{
    th_mcp_cfg *m = sec;
    for (size_t i = 0; i < m->n_tokens; i++) {
        free(m->tokens[i].user);
        free(m->tokens[i].sha256_hex);
        free(m->tokens[i].file);
        free(m->tokens[i].env);
    }
    free(m->tokens);
    th_strv_free(m->allow_origins, m->n_allow_origins);
    free(m->tls_cert);
    free(m->tls_key);
    free(m->tls_priorities);
    th_strv_free(m->listen_http, m->n_listen_http);
    th_strv_free(m->listen_metrics, m->n_listen_metrics);
}

/* Whether `name` is the user of a token under mcp.tokens: such a user
 * exists for the host without an account on the system. */
static bool mcp_names_user(const th_ynode *m, const char *name)
{
    const th_ynode *t = m->kind == TH_Y_MAP ? th_ynode_get(m, "tokens") : NULL;
    if (!t || t->kind != TH_Y_SEQ)
        return false;
    for (size_t i = 0; i < t->n; i++) {
        const th_ynode *e = t->kids[i];
        const th_ynode *u = e->kind == TH_Y_MAP ? th_ynode_get(e, "user") : NULL;
        if (u && u->kind == TH_Y_SCALAR && strcmp(u->str, name) == 0)
            return true;
    }
    return false;
}

static bool same_list(char *const *a, size_t na, char *const *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return false;
    return true;
}

static bool same_str(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* The keys the HTTP front copies at start (http.c, mcfg_copy) besides
 * the listen entries and the tokens; max_subscriptions and max_message
 * are read per session from the current config. */
static bool same_http(const th_mcp_cfg *a, const th_mcp_cfg *b)
{
    return same_list(a->allow_origins, a->n_allow_origins, b->allow_origins,
                     b->n_allow_origins) &&
           a->allow_remote == b->allow_remote &&
           same_str(a->tls_cert, b->tls_cert) &&
           same_str(a->tls_key, b->tls_key) &&
           same_str(a->tls_priorities, b->tls_priorities) &&
           a->max_body == b->max_body && a->max_sessions == b->max_sessions &&
           a->max_sessions_per_user == b->max_sessions_per_user &&
           a->max_streams == b->max_streams &&
           a->max_connections == b->max_connections &&
           a->session_idle_ms == b->session_idle_ms &&
           a->max_queued == b->max_queued &&
           a->client_timeout_ms == b->client_timeout_ms &&
           a->keepalive_ms == b->keepalive_ms &&
           a->header_timeout_ms == b->header_timeout_ms &&
           a->body_timeout_ms == b->body_timeout_ms &&
           a->max_connections_per_address ==
               b->max_connections_per_address &&
           a->http_threads == b->http_threads &&
           a->max_json_depth == b->max_json_depth &&
           a->max_json_elements == b->max_json_elements &&
           a->sse_poll_ms == b->sse_poll_ms &&
           a->sse_replay_events == b->sse_replay_events &&
           a->sse_replay_ms == b->sse_replay_ms;
}

/* The HTTP daemons, their tokens and their settings are made once, at
 * start. */
static const char *mcp_reload_note(const void *old, const void *cur)
{
    const th_mcp_cfg *a = old, *b = cur;
    bool same = same_list(a->listen_http, a->n_listen_http, b->listen_http,
                          b->n_listen_http) &&
                same_list(a->listen_metrics, a->n_listen_metrics,
                          b->listen_metrics, b->n_listen_metrics) &&
                a->n_tokens == b->n_tokens;
    for (size_t i = 0; same && i < a->n_tokens; i++)
        same = strcmp(a->tokens[i].user, b->tokens[i].user) == 0 &&
               memcmp(a->tokens[i].sha256, b->tokens[i].sha256, 32) == 0;
    if (!same)
        return "reload: host.listen's http:// entries and mcp.tokens "
               "change at the next restart";
    if ((a->n_listen_http || b->n_listen_http) && !same_http(a, b))
        return "reload: the MCP HTTP front's mcp: settings (max_body, "
               "max_sessions, allow_origins, ...) change at the next restart";
    return NULL;
}

static const char *const mcp_schemes[] = {"http://", "https://", NULL};

static const th_cfkey mcp_host_keys[] = {
    {.name = "mcp_max_message", .set = th_cf_size,
     .off = offsetof(th_mcp_cfg, max_message), .min = TH_KIB, .max = TH_GIB},
    {.name = NULL}};

const th_section th_mcp_section = {
    .name = "mcp",
    .size = sizeof(th_mcp_cfg),
    .keys = mcp_keys,
    .init = mcp_init,
    .check = mcp_check,
    .finish = mcp_finish,
    .host_keys = mcp_host_keys,
    .free = mcp_free,
    .schemes = mcp_schemes,
    .listen_form = "http://HOST:PORT/PATH (MCP)",
    .listen = mcp_listen,
    .names_user = mcp_names_user,
    .reload_note = mcp_reload_note,
    .user_hint = " an mcp.tokens entry may declare a user;",
};
