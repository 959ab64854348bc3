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

#include <curl/curl.h>
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

static const th_cfkey oauth_user_keys[] = {
    {.name = "name", .set = th_cf_str,
     .off = offsetof(th_mcp_oauth_user, name), .flags = TH_CF_REQUIRED},
    {.name = "uid", .set = th_cf_u32, .off = offsetof(th_mcp_oauth_user, uid),
     .min = 0, .max = 4294967294u},
    {.name = NULL}};

static int oauth_user_check(th_cfctx *c, th_ynode *n, void *el)
{
    th_mcp_oauth_user *u = el;
    if (!u->name || !*u->name)
        return th_cf_err(c, n, "an mcp.oauth.users entry needs a 'name' (a "
                         "value of the tokens' user_claim)");
    u->has_uid = th_ynode_get(n, "uid") != NULL;
    return 0;
}

/* An absolute http(s) URL without a fragment (RFC 9728's resource and
 * authorization server identifiers); with `loopback_http`, http:// only
 * for a loopback host. */
static int url_check(th_cfctx *c, const th_ynode *at, const char *key,
                     const char *url, bool loopback_http)
{
    if (strlen(url) > 255)
        return th_cf_err(c, at, "'%s' is longer than 255 bytes", key);
    for (const char *p = url; *p; p++)
        if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f ||
            *p == '"' || *p == '\\')
            return th_cf_err(c, at, "'%s': '%s' has a character a URL does "
                             "not carry unescaped", key, url);
    CURLU *u = curl_url();
    if (!u)
        return th_cf_nomem(c);
    char *scheme = NULL, *host = NULL, *frag = NULL;
    int rc = 0;
    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        (strcmp(scheme, "https") != 0 && strcmp(scheme, "http") != 0))
        rc = th_cf_err(c, at, "'%s': '%s' is not an absolute http:// or "
                       "https:// URL", key, url);
    else if (curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0) == CURLUE_OK)
        rc = th_cf_err(c, at, "'%s': '%s' has a fragment", key, url);
    else if (loopback_http && strcmp(scheme, "http") == 0 &&
             strcmp(host, "127.0.0.1") != 0 && strcmp(host, "[::1]") != 0 &&
             strcmp(host, "localhost") != 0)
        rc = th_cf_err(c, at, "'%s': '%s' is plain http on a host that is "
                       "not loopback (use https://)", key, url);
    curl_free(scheme);
    curl_free(host);
    curl_free(frag);
    curl_url_cleanup(u);
    return rc;
}

#define O(f) offsetof(th_mcp_oauth_cfg, f)
static const th_cfkey oauth_keys[] = {
    {.name = "issuer", .set = th_cf_str, .off = O(issuer),
     .flags = TH_CF_REQUIRED},
    {.name = "audience", .set = th_cf_str, .off = O(audience)},
    {.name = "resource", .set = th_cf_str, .off = O(resource)},
    {.name = "jwks_file", .set = th_cf_str, .off = O(jwks_file),
     .flags = TH_CF_PATH},
    {.name = "jwks_url", .set = th_cf_str, .off = O(jwks_url)},
    {.name = "authorization_servers", .set = th_cf_strlist,
     .off = O(authorization_servers), .off2 = O(n_authorization_servers)},
    {.name = "scopes_supported", .set = th_cf_strlist,
     .off = O(scopes_supported), .off2 = O(n_scopes_supported)},
    {.name = "user_claim", .set = th_cf_str, .off = O(user_claim)},
    {.name = "required_scope", .set = th_cf_str, .off = O(required_scope)},
    {.name = "jwks_refresh", .set = th_cf_duration, .off = O(jwks_refresh_ms),
     .min = 100, .max = TH_DAY_MS},
    {.name = "jwks_min_interval", .set = th_cf_duration,
     .off = O(jwks_min_interval_ms), .min = 10, .max = TH_DAY_MS},
    {.name = "jwks_timeout", .set = th_cf_duration, .off = O(jwks_timeout_ms),
     .min = 100, .max = 10 * TH_MINUTE_MS},
    {.name = "leeway", .set = th_cf_duration, .off = O(leeway_ms), .min = 0,
     .max = TH_HOUR_MS},
    {.name = "max_token", .set = th_cf_size, .off = O(max_token), .min = 256,
     .max = TH_MIB},
    {.name = "max_jwks", .set = th_cf_size, .off = O(max_jwks), .min = 256,
     .max = 16 * TH_MIB},
    {.name = "max_keys", .set = th_cf_u32, .off = O(max_keys), .min = 1,
     .max = 1000},
    {.name = "users", .set = th_cf_list, .off = O(users), .off2 = O(n_users),
     .sub = oauth_user_keys, .elem_size = sizeof(th_mcp_oauth_user),
     .check = oauth_user_check, .what = "user"},
    {.name = NULL}};
#undef O

static int oauth_check(th_cfctx *c, th_ynode *n, void *el)
{
    th_mcp_oauth_cfg *o = el;
    o->on = true;
    o->line = n->line;
    o->col = n->col;
    if ((o->jwks_file != NULL) == (o->jwks_url != NULL))
        return th_cf_err(c, n, "mcp.oauth needs exactly one of 'jwks_file' "
                         "and 'jwks_url' (the issuer's signing keys)");
    int rc = url_check(c, th_ynode_get(n, "issuer"), "issuer", o->issuer,
                       false);
    if (rc == 0 && o->jwks_url)
        rc = url_check(c, th_ynode_get(n, "jwks_url"), "jwks_url",
                       o->jwks_url, true);
    if (rc == 0 && o->resource)
        rc = url_check(c, th_ynode_get(n, "resource"), "resource",
                       o->resource, false);
    for (size_t i = 0; rc == 0 && i < o->n_authorization_servers; i++)
        rc = url_check(c, th_ynode_get(n, "authorization_servers"),
                       "authorization_servers",
                       o->authorization_servers[i], false);
    if (rc == 0 && o->user_claim && !*o->user_claim)
        rc = th_cf_err(c, th_ynode_get(n, "user_claim"), "'user_claim' is "
                       "empty");
    for (const char *p = o->required_scope; rc == 0 && p && *p; p++)
        if (*p <= ' ' || *p == '"' || *p == '\\' || *p >= 0x7f)
            rc = th_cf_err(c, th_ynode_get(n, "required_scope"), "'"
                           "required_scope' is one scope: printable ASCII "
                           "without spaces, quotes or backslashes");
    if (rc == 0 && o->required_scope && !*o->required_scope)
        rc = th_cf_err(c, th_ynode_get(n, "required_scope"), "'"
                       "required_scope' is empty");
    if (rc == 0 && o->audience && !*o->audience)
        rc = th_cf_err(c, th_ynode_get(n, "audience"), "'audience' is "
                       "empty");
    return rc;
}

#define M(f) offsetof(th_mcp_cfg, f)
static const th_cfkey mcp_keys[] = {
    {.name = "oauth", .set = th_cf_section, .off = M(oauth),
     .sub = oauth_keys, .check = oauth_check, .what = "mcp.oauth"},
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
    {.name = "input_ttl", .set = th_cf_duration, .off = M(input_ttl_ms),
     .min = 100, .max = TH_DAY_MS},
    {.name = "max_pending_inputs", .set = th_cf_u32,
     .off = M(max_pending_inputs), .min = 1, .max = 1000000},
    {.name = "max_pending_inputs_per_user", .set = th_cf_u32,
     .off = M(max_pending_inputs_per_user), .min = 1, .max = 1000000},
    {.name = "max_pending_input_bytes", .set = th_cf_size,
     .off = M(max_pending_input_bytes), .min = 4096, .max = 1ull << 40},
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
    m->input_ttl_ms = 10 * TH_MINUTE_MS;
    m->max_pending_inputs = 1024;
    m->max_pending_inputs_per_user = 64;
    m->max_pending_input_bytes = 64 * TH_MIB;
    m->max_message = 16 * TH_MIB;
    m->oauth.jwks_refresh_ms = 10 * TH_MINUTE_MS;
    m->oauth.jwks_min_interval_ms = 30 * TH_SEC_MS;
    m->oauth.jwks_timeout_ms = 10 * TH_SEC_MS;
    m->oauth.leeway_ms = 30 * TH_SEC_MS;
    m->oauth.max_token = 8 * TH_KIB;
    m->oauth.max_jwks = 256 * TH_KIB;
    m->oauth.max_keys = 32;
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
    if (rc == 0 && m->n_listen_http && m->n_tokens == 0 && !m->oauth.on) {
        const th_ynode *hn = th_ynode_get(th_cf_config(c)->root, "host");
        return th_cf_err(c, hn ? th_ynode_get(hn, "listen") : NULL,
                         "'listen' has an http:// entry but mcp.tokens "
                         "declares no token and there is no mcp.oauth "
                         "(every request would be refused)");
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
    th_mcp_oauth_cfg *o = &m->oauth;
    free(o->issuer);
    free(o->audience);
    free(o->resource);
    free(o->jwks_file);
    free(o->jwks_url);
    th_strv_free(o->authorization_servers, o->n_authorization_servers);
    th_strv_free(o->scopes_supported, o->n_scopes_supported);
    free(o->user_claim);
    free(o->required_scope);
    for (size_t i = 0; i < o->n_users; i++)
        free(o->users[i].name);
    free(o->users);
}

/* Whether the list `t` has a map whose `key` is name. */
static bool list_names(const th_ynode *t, const char *key, const char *name)
{
    if (!t || t->kind != TH_Y_SEQ)
        return false;
    for (size_t i = 0; i < t->n; i++) {
        const th_ynode *e = t->kids[i];
        const th_ynode *u = e->kind == TH_Y_MAP ? th_ynode_get(e, key) : NULL;
        if (u && u->kind == TH_Y_SCALAR && strcmp(u->str, name) == 0)
            return true;
    }
    return false;
}

/* Whether `name` is the user of a token under mcp.tokens or a principal
 * of mcp.oauth.users: such a user exists for the host without an account
 * on the system. */
static bool mcp_names_user(const th_ynode *m, const char *name)
{
    if (m->kind != TH_Y_MAP)
        return false;
    const th_ynode *o = th_ynode_get(m, "oauth");
    return list_names(th_ynode_get(m, "tokens"), "user", name) ||
           (o && o->kind == TH_Y_MAP &&
            list_names(th_ynode_get(o, "users"), "name", name));
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
 * the listen entries and the tokens; max_subscriptions, input_ttl,
 * max_pending_inputs(_per_user) and max_message are read per session
 * from the current config. */
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

static bool same_oauth(const th_mcp_oauth_cfg *a, const th_mcp_oauth_cfg *b)
{
    bool same = a->on == b->on && same_str(a->issuer, b->issuer) &&
                same_str(a->audience, b->audience) &&
                same_str(a->resource, b->resource) &&
                same_str(a->jwks_file, b->jwks_file) &&
                same_str(a->jwks_url, b->jwks_url) &&
                same_list(a->authorization_servers,
                          a->n_authorization_servers,
                          b->authorization_servers,
                          b->n_authorization_servers) &&
                same_list(a->scopes_supported, a->n_scopes_supported,
                          b->scopes_supported, b->n_scopes_supported) &&
                same_str(a->user_claim, b->user_claim) &&
                same_str(a->required_scope, b->required_scope) &&
                a->jwks_refresh_ms == b->jwks_refresh_ms &&
                a->jwks_min_interval_ms == b->jwks_min_interval_ms &&
                a->jwks_timeout_ms == b->jwks_timeout_ms &&
                a->leeway_ms == b->leeway_ms &&
                a->max_token == b->max_token && a->max_jwks == b->max_jwks &&
                a->max_keys == b->max_keys && a->n_users == b->n_users;
    for (size_t i = 0; same && i < a->n_users; i++)
        same = strcmp(a->users[i].name, b->users[i].name) == 0 &&
               a->users[i].has_uid == b->users[i].has_uid &&
               a->users[i].uid == b->users[i].uid;
    return same;
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
    if ((a->oauth.on || b->oauth.on) && !same_oauth(&a->oauth, &b->oauth))
        return "reload: mcp.oauth changes at the next restart";
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
    .user_hint = " an mcp.tokens entry or mcp.oauth.users may declare a "
                 "user;",
};
