/* mcp_oauth.c - OAuth 2.1 client credentials toward a server with url:
 * and `oauth:` (docs/mcp-source.md "OAuth client credentials").
 *
 * The first request of a session goes without a token; the server's 401
 * names its protected resource metadata (RFC 9728) in `WWW-Authenticate:
 * Bearer resource_metadata="..."` (else the well-known URL of the
 * server's URL is read).  That document names the authorization server;
 * its metadata (RFC 8414 `/.well-known/oauth-authorization-server`, else
 * `/.well-known/openid-configuration`) names the token endpoint, whose
 * origin must be the issuer's.  The token endpoint gets
 * `grant_type=client_credentials`, `resource` (RFC 8707) and `scope`,
 * the client authenticated with `client_secret_basic` or
 * `client_secret_post` as the metadata allows.  With `token_url` set no
 * document is read; with `issuer` set, the server's document must name
 * that authorization server (else a hostile server could name its own
 * and be sent the secret).
 *
 * The token is kept until shortly before `expires_in`; a 401 to a request
 * that carried it fetches a new one, once (mcp_http.c retries that
 * request once).  One fetch at a time per server: callers that need a
 * token while one is fetched wait for it, and share its result, success
 * or failure.  Every fetch is bounded by `oauth.timeout` and
 * `oauth.max_response`; every URL is https, or http on a loopback host.
 * The secret is read from the environment at load and never written to
 * a log or an error.
 *
 * Lock: mcp_oauth.mu, a leaf (never held across a transfer); only the
 * one fetcher (fetching set) writes the discovered endpoint and resource. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mcpsrc.h"
#include "toolhost/sdk.h"

struct mcp_oauth {
    /* config (read-only after load) */
    char *client_id;
    char *secret;       /* from the environment; never logged */
    char *secret_env;   /* its variable's name (for errors) */
    char *scope;        /* NULL: none sent */
    char *token_url;    /* NULL: discovered */
    char *issuer;       /* NULL: the one the server names */
    int auth_method;    /* AUTH_*: AUTH_AUTO from the metadata */
    int64_t timeout_ms;
    int64_t max_response;

    pthread_mutex_t mu;
    pthread_cond_t cv;  /* a fetch ended */
    bool fetching;
    uint64_t fetches;   /* fetches ended, good or bad */
    char *token;        /* the current access token, or NULL */
    uint64_t gen;       /* its generation (0: none yet) */
    int64_t fresh_until; /* monotonic ms; INT64_MAX: no expires_in */
    char err[1024];     /* why the last fetch failed */
    bool abandoned;     /* the last fetch ended with its caller's call */
    /* the fetcher's call and deadline (written by it before its fetch;
     * read by its own transfers) */
    toolhost_call *f_call;
    int64_t f_deadline;
    int f_ended;        /* 0, or MCPSRC_OAUTH_CANCELLED/_TIMEDOUT */
    bool f_stopped;     /* f_ended because the plugin stops (s->stop) */
    mcp_srv *srv;       /* the server it is for: its stop ends a fetch */
    /* discovered (under mu; written by the fetcher) */
    char *endpoint;     /* the token endpoint */
    char *resource;     /* the RFC 8707 resource */
    bool post_auth;     /* client_secret_post */
};

enum { AUTH_AUTO = 0, AUTH_BASIC = 1, AUTH_POST = 2 };

#define MAX_TOKEN 16384

/* ---- config ---------------------------------------------------------------- */

static const char *const oauth_keys[] = {
    "client_id",   "client_secret_env", "scope",        "token_url",
    "issuer",      "auth_method",       "timeout",      "max_response",
    NULL};

static bool url_allowed(const char *url, char *why, size_t ws);

int mcpsrc_oauth_parse(mcp_srv *s, const json_t *o, const char *who,
                       char *err, size_t es)
{
    if (!json_is_object(o))
        return th_sdk_errf(err, es,
                           "%s: 'oauth' must be a map (client_id, "
                           "client_secret_env, scope, token_url, issuer, "
                           "auth_method, timeout, max_response)",
                           who);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        bool known = false;
        for (const char *const *kk = oauth_keys; *kk; kk++)
            known = known || !strcmp(*kk, k);
        if (!known)
            return th_sdk_errf(err, es,
                               "%s: oauth: unknown key '%.64s' (known: "
                               "client_id, client_secret_env, scope, "
                               "token_url, issuer, auth_method, timeout, "
                               "max_response)",
                               who, k);
    }
    mcp_oauth *a = calloc(1, sizeof *a);
    if (!a)
        return th_sdk_errf(err, es, "out of memory");
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    a->f_deadline = -1;
    s->oauth = a;
    a->srv = s;
    const char *id = json_string_value(json_object_get(o, "client_id"));
    if (!id || !id[0] || strlen(id) > 255 ||
        strlen(id) != json_string_length(json_object_get(o, "client_id")))
        return th_sdk_errf(err, es,
                           "%s: oauth: 'client_id' is required (a string "
                           "of 1 to 255 bytes)",
                           who);
    const char *env = json_string_value(json_object_get(o,
                                                        "client_secret_env"));
    if (!env || !env[0] || strlen(env) > 255)
        return th_sdk_errf(err, es,
                           "%s: oauth: 'client_secret_env' is required (the "
                           "name of the environment variable holding the "
                           "client secret)",
                           who);
    const char *sec = getenv(env);
    if (!sec || !sec[0])
        return th_sdk_errf(err, es,
                           "%s: oauth: the environment variable %.64s "
                           "(client_secret_env) is not set or empty",
                           who, env);
    const char *scope = json_string_value(json_object_get(o, "scope"));
    if (json_object_get(o, "scope") &&
        (!scope || !scope[0] || strlen(scope) > 1024 ||
         strpbrk(scope, "\r\n\"\\")))
        return th_sdk_errf(err, es,
                           "%s: oauth: 'scope' must be a string of "
                           "space-separated scopes (at most 1024 bytes)",
                           who);
    char w[200];
    /* the token goes to the server with every request */
    if (!url_allowed(s->url, w, sizeof w))
        return th_sdk_errf(err, es, "%s: oauth: the server's url: %s", who,
                           w);
    const char *tu = json_string_value(json_object_get(o, "token_url"));
    if (json_object_get(o, "token_url") && (!tu || !url_allowed(tu, w,
                                                                sizeof w)))
        return th_sdk_errf(err, es, "%s: oauth: 'token_url': %s", who,
                           tu ? w : "must be a URL");
    const char *iss = json_string_value(json_object_get(o, "issuer"));
    if (json_object_get(o, "issuer") && (!iss || !url_allowed(iss, w,
                                                              sizeof w)))
        return th_sdk_errf(err, es, "%s: oauth: 'issuer': %s", who,
                           iss ? w : "must be a URL");
    const char *am = json_string_value(json_object_get(o, "auth_method"));
    if (json_object_get(o, "auth_method") &&
        (!am || (strcmp(am, "client_secret_basic") &&
                 strcmp(am, "client_secret_post"))))
        return th_sdk_errf(err, es,
                           "%s: oauth: 'auth_method' must be "
                           "client_secret_basic or client_secret_post",
                           who);
    a->auth_method = !am                                ? AUTH_AUTO
                     : !strcmp(am, "client_secret_post") ? AUTH_POST
                                                         : AUTH_BASIC;
    a->timeout_ms = 10000;
    const json_t *to = json_object_get(o, "timeout");
    if (to && ((a->timeout_ms = mcpsrc_duration(to)) < 1 ||
               a->timeout_ms > 600000))
        return th_sdk_errf(err, es,
                           "%s: oauth: 'timeout' must be a duration from "
                           "1ms to 10m (\"500ms\", \"10s\")",
                           who);
    a->max_response = 65536;
    const json_t *mr = json_object_get(o, "max_response");
    if (mr && (!json_is_integer(mr) || json_integer_value(mr) < 1024 ||
               json_integer_value(mr) > 16 * 1024 * 1024))
        return th_sdk_errf(err, es,
                           "%s: oauth: 'max_response' must be a number of "
                           "bytes from 1024 to 16777216",
                           who);
    if (mr)
        a->max_response = json_integer_value(mr);
    if (!(a->client_id = strdup(id)) || !(a->secret = strdup(sec)) ||
        !(a->secret_env = strdup(env)) ||
        (scope && !(a->scope = strdup(scope))) ||
        (tu && !(a->token_url = strdup(tu))) ||
        (iss && !(a->issuer = strdup(iss))))
        return th_sdk_errf(err, es, "out of memory");
    return 0;
}

void mcpsrc_oauth_free(mcp_oauth *a)
{
    if (!a)
        return;
    free(a->client_id);
    if (a->secret)
        memset(a->secret, 0, strlen(a->secret));
    free(a->secret);
    free(a->secret_env);
    free(a->scope);
    free(a->token_url);
    free(a->issuer);
    free(a->token);
    free(a->endpoint);
    free(a->resource);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* ---- URLs ------------------------------------------------------------------ */

/* scheme://host:port of url (the port filled in), malloc'd; NULL when it
 * is not an http(s) URL. */
static char *origin_of(const char *url)
{
    CURLU *u = curl_url();
    char *sch = NULL, *host = NULL, *port = NULL, *out = NULL;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &sch, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) ==
            CURLUE_OK &&
        (!strcasecmp(sch, "http") || !strcasecmp(sch, "https"))) {
        if (asprintf(&out, "%s://%s:%s", sch, host, port) < 0)
            out = NULL;
        for (char *p = out; p && *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p - 'A' + 'a');
    }
    curl_free(sch);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return out;
}

static bool same_origin(const char *a, const char *b)
{
    char *x = origin_of(a), *y = origin_of(b);
    bool same = x && y && !strcmp(x, y);
    free(x);
    free(y);
    return same;
}

/* Whether host is an IPv4 address in 127.0.0.0/8: the address itself,
 * not a name that merely begins "127." (127.attacker.example resolves
 * wherever its owner likes; a prefix test let such a plain http URL
 * carry the secret or the token across a network). */
static bool is_loopback_v4(const char *host)
{
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) == 1 &&
           (ntohl(a.s_addr) >> 24) == 127;
}

/* https, or http on a loopback host (127.0.0.0/8, ::1, localhost): a
 * secret or a token never crosses a network in the clear. */
static bool url_allowed(const char *url, char *why, size_t ws)
{
    CURLU *u = curl_url();
    char *sch = NULL, *host = NULL;
    bool ok = false;
    if (!u || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &sch, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK)
        snprintf(why, ws, "'%.120s' is not a URL", url);
    else if (!strcasecmp(sch, "https"))
        ok = true;
    else if (strcasecmp(sch, "http"))
        snprintf(why, ws, "'%.120s' is not an https URL", url);
    else if (is_loopback_v4(host) || !strcmp(host, "[::1]") ||
             !strcasecmp(host, "localhost"))
        ok = true;
    else
        snprintf(why, ws,
                 "'%.120s' is plain http to a host that is not loopback "
                 "(https is required)",
                 url);
    curl_free(sch);
    curl_free(host);
    curl_url_cleanup(u);
    return ok;
}

/* url with `suffix` put between its origin and its path ("/.well-known/x"
 * and "/mcp" give "/.well-known/x/mcp"; a path "/" gives no tail). */
static char *well_known(const char *url, const char *suffix, bool with_path)
{
    CURLU *u = curl_url();
    char *path = NULL, *o = origin_of(url), *out = NULL;
    if (u && o && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK) {
        size_t n = strlen(path);
        while (n && path[n - 1] == '/')
            n--;
        if (asprintf(&out, "%s%s%.*s", o, suffix, with_path ? (int)n : 0,
                     path) < 0)
            out = NULL;
    }
    curl_free(path);
    curl_url_cleanup(u);
    free(o);
    return out;
}

/* ---- transfers ------------------------------------------------------------- */

typedef struct xfer {
    char *buf;
    size_t len, cap, max;
    bool too_big;
    mcp_oauth *a;
} xfer;

/* The plugin stops (fini: mcpsrc_servers_stop() set s->stop). */
static bool srv_stopping(mcp_oauth *a)
{
    pthread_mutex_lock(&a->srv->mu);
    bool stop = a->srv->stop;
    pthread_mutex_unlock(&a->srv->mu);
    return stop;
}

/* The fetcher's call ended (cancelled, or past its deadline), or the
 * plugin stops (a fetch of the GET stream's has no call, and fini must
 * not wait for oauth.timeout): the transfer stops (libcurl calls this
 * at least once a second). */
static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut,
                       curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    mcp_oauth *a = ((xfer *)ud)->a;
    if (srv_stopping(a)) {
        a->f_ended = MCPSRC_OAUTH_CANCELLED;
        a->f_stopped = true;
    } else if (a->f_call && th_sdk_cancelled(a->f_call))
        a->f_ended = MCPSRC_OAUTH_CANCELLED;
    else if (a->f_deadline >= 0 && mcpsrc_now_ms() >= a->f_deadline)
        a->f_ended = MCPSRC_OAUTH_TIMEDOUT;
    return a->f_ended != 0;
}

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    xfer *x = ud;
    size_t bytes = size * n;
    if (x->len + bytes > x->max) {
        x->too_big = true;
        return 0;
    }
    if (x->len + bytes + 1 > x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 4096;
        while (cap < x->len + bytes + 1)
            cap *= 2;
        char *b = realloc(x->buf, cap);
        if (!b)
            return 0;
        x->buf = b;
        x->cap = cap;
    }
    memcpy(x->buf + x->len, p, bytes);
    x->len += bytes;
    x->buf[x->len] = '\0';
    return bytes;
}

/* GET (form NULL) or POST the form to url; the status with *doc (the
 * body as JSON, NULL when it is not), or -1 with why. */
static long transfer(mcp_oauth *a, const char *url, const char *form,
                     bool basic, json_t **doc, char *why, size_t ws)
{
    *doc = NULL;
    if (!url_allowed(url, why, ws))
        return -1;
    CURL *c = curl_easy_init();
    if (!c) {
        snprintf(why, ws, "out of memory");
        return -1;
    }
    xfer x = {.max = (size_t)a->max_response, .a = a};
    struct curl_slist *h = curl_slist_append(NULL, "Accept: application/json");
    char *user = NULL, *pass = NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)a->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)a->timeout_ms);
    if (form)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, form);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    if (basic) {
        /* RFC 6749 2.3.1: id and secret form-encoded, then base64 (by
         * libcurl) */
        user = curl_easy_escape(c, a->client_id, 0);
        pass = curl_easy_escape(c, a->secret, 0);
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(c, CURLOPT_USERNAME, user ? user : "");
        curl_easy_setopt(c, CURLOPT_PASSWORD, pass ? pass : "");
    }
    char ebuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
    CURLcode rc = curl_easy_perform(c);
    long status = -1;
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        if (x.len)
            *doc = json_loadb(x.buf, x.len, 0, NULL);
    } else if (a->f_ended) {
        snprintf(why, ws, "%.120s: %s during the transfer", url,
                 a->f_stopped ? "the plugin stopped" : "the call ended");
    } else if (x.too_big) {
        snprintf(why, ws, "%.120s: the answer is larger than %lld bytes "
                 "(oauth.max_response)", url, (long long)a->max_response);
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        snprintf(why, ws, "%.120s did not answer within %lldms "
                 "(oauth.timeout)", url, (long long)a->timeout_ms);
    } else {
        snprintf(why, ws, "%.120s: %s", url,
                 ebuf[0] ? ebuf : curl_easy_strerror(rc));
    }
    if (pass)
        memset(pass, 0, strlen(pass));
    curl_free(user);
    curl_free(pass);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (x.buf)
        memset(x.buf, 0, x.len); /* it may hold a token */
    free(x.buf);
    return status;
}

/* A JSON object from url (200), or NULL with why. */
static json_t *get_doc(mcp_oauth *a, const char *url, const char *what,
                       char *why, size_t ws)
{
    json_t *doc;
    char w[240];
    long st = transfer(a, url, NULL, false, &doc, w, sizeof w);
    if (st == 200 && json_is_object(doc))
        return doc;
    if (st < 0)
        snprintf(why, ws, "%s: %s", what, w);
    else
        snprintf(why, ws, "%s: %.120s answered HTTP %ld%s", what, url, st,
                 st == 200 ? " without a JSON object" : "");
    json_decref(doc);
    return NULL;
}

/* A string of the peer's made safe for a log line: printable ASCII,
 * at most 160 bytes. */
static void clean(char *out, size_t cap, const char *in)
{
    size_t n = 0;
    for (; in && *in && n + 1 < cap && n < 160; in++)
        out[n++] = (*in >= 0x20 && *in < 0x7f) ? *in : '?';
    out[n] = '\0';
}

/* ---- discovery ------------------------------------------------------------- */

/* The token endpoint, the resource and the client auth method of server
 * s: from the config, or from the documents.  `rm`: the resource
 * metadata URL the 401 named ("" none).  a->mu not held; only the
 * fetcher writes these. */
static int discover(mcp_srv *s, mcp_oauth *a, const char *rm, char *why,
                    size_t ws)
{
    if (a->token_url) {
        if (!a->endpoint && !(a->endpoint = strdup(a->token_url)))
            goto oom;
        if (!a->resource && !(a->resource = strdup(s->url)))
            goto oom;
        a->post_auth = a->auth_method == AUTH_POST;
        return 0;
    }
    if (a->endpoint)
        return 0;
    /* 1. the protected resource metadata (RFC 9728) */
    json_t *prm = NULL;
    char w[300] = "";
    if (rm && rm[0]) {
        if (!same_origin(rm, s->url)) {
            snprintf(why, ws,
                     "the server's 401 names resource metadata at "
                     "'%.120s', not on its own origin: refused",
                     rm);
            return -1;
        }
        prm = get_doc(a, rm, "protected resource metadata", why, ws);
    } else {
        char *u1 = well_known(s->url, "/.well-known/oauth-protected-resource",
                              true);
        char *u2 = well_known(s->url, "/.well-known/oauth-protected-resource",
                              false);
        if (u1)
            prm = get_doc(a, u1, "protected resource metadata", why, ws);
        if (!prm && u2 && strcmp(u1 ? u1 : "", u2))
            prm = get_doc(a, u2, "protected resource metadata", why, ws);
        free(u1);
        free(u2);
    }
    if (!prm)
        return -1;
    const char *res = json_string_value(json_object_get(prm, "resource"));
    /* the first authorization server named, or the configured one */
    const json_t *ases = json_object_get(prm, "authorization_servers");
    const char *as = json_string_value(json_array_get(ases, 0));
    for (size_t i = 0; a->issuer && i < json_array_size(ases); i++) {
        as = json_string_value(json_array_get(ases, i));
        if (as && !strcmp(as, a->issuer))
            break;
        as = NULL;
    }
    if (!res || !same_origin(res, s->url)) {
        char c[170];
        clean(c, sizeof c, res ? res : "(none)");
        snprintf(why, ws,
                 "protected resource metadata: its resource '%s' is not on "
                 "the server's origin",
                 c);
        json_decref(prm);
        return -1;
    }
    if (!as && a->issuer) {
        char c[170];
        clean(c, sizeof c, a->issuer);
        snprintf(why, ws,
                 "protected resource metadata does not name the "
                 "configured oauth.issuer '%s' among its "
                 "authorization_servers: refused",
                 c);
        json_decref(prm);
        return -1;
    }
    if (!as) {
        snprintf(why, ws, "protected resource metadata names no "
                 "authorization_servers");
        json_decref(prm);
        return -1;
    }
    char *issuer = strdup(as), *resource = strdup(res);
    json_decref(prm);
    if (!issuer || !resource) {
        free(issuer);
        free(resource);
        goto oom;
    }
    if (!url_allowed(issuer, w, sizeof w)) {
        snprintf(why, ws, "authorization server: %s", w);
        goto fail;
    }
    /* 2. the authorization server's metadata (RFC 8414, else OpenID) */
    json_t *md = NULL;
    char *tries[3] = {
        well_known(issuer, "/.well-known/oauth-authorization-server", true),
        well_known(issuer, "/.well-known/openid-configuration", true), NULL};
    if (tries[1] && asprintf(&tries[2], "%s%s.well-known/openid-configuration",
                             issuer,
                             issuer[strlen(issuer) - 1] == '/' ? "" : "/") < 0)
        tries[2] = NULL;
    for (int i = 0; i < 3 && !md; i++)
        if (tries[i] && (i < 2 || strcmp(tries[i], tries[1])))
            md = get_doc(a, tries[i], "authorization server metadata", why,
                         ws);
    for (int i = 0; i < 3; i++)
        free(tries[i]);
    if (!md)
        goto fail;
    const char *mi = json_string_value(json_object_get(md, "issuer"));
    const char *te = json_string_value(json_object_get(md, "token_endpoint"));
    if (!mi || strcmp(mi, issuer)) {
        char c[170];
        clean(c, sizeof c, mi ? mi : "(none)");
        snprintf(why, ws,
                 "authorization server metadata: its issuer '%s' is not "
                 "'%.100s' (the one asked): refused",
                 c, issuer);
        json_decref(md);
        goto fail;
    }
    if (!te || !url_allowed(te, w, sizeof w) || !same_origin(te, issuer)) {
        char c[170];
        clean(c, sizeof c, te ? te : "(none)");
        snprintf(why, ws,
                 "authorization server metadata: its token_endpoint '%s' "
                 "%s",
                 c,
                 !te ? "is missing"
                 : !url_allowed(te, w, sizeof w)
                     ? "is not https (nor http on loopback)"
                     : "is not on the issuer's origin: refused");
        json_decref(md);
        goto fail;
    }
    /* client_secret_basic is RFC 8414's default */
    const json_t *ms = json_object_get(md,
                                       "token_endpoint_auth_methods_supported");
    bool basic = !json_is_array(ms), post = false;
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m)
    {
        const char *v = json_string_value(m);
        basic = basic || (v && !strcmp(v, "client_secret_basic"));
        post = post || (v && !strcmp(v, "client_secret_post"));
    }
    bool use_post = a->auth_method == AUTH_POST ||
                    (a->auth_method == AUTH_AUTO && !basic && post);
    if (a->auth_method == AUTH_AUTO && !basic && !post) {
        snprintf(why, ws,
                 "authorization server metadata: its token endpoint takes "
                 "neither client_secret_basic nor client_secret_post");
        json_decref(md);
        goto fail;
    }
    a->endpoint = strdup(te);
    json_decref(md);
    free(issuer);
    a->resource = resource;
    a->post_auth = use_post;
    if (!a->endpoint)
        goto oom;
    return 0;
fail:
    free(issuer);
    free(resource);
    return -1;
oom:
    snprintf(why, ws, "out of memory");
    return -1;
}

/* ---- the token ------------------------------------------------------------- */

static char *enc(const char *v)
{
    return curl_easy_escape(NULL, v, 0);
}

/* One fetch (a->mu not held; a->fetching ours): 0 with a->token set. */
static int fetch(mcp_srv *s, mcp_oauth *a, const char *rm, char *why,
                 size_t ws)
{
    const toolhost_host_api *host = s->st->host;
    if (discover(s, a, rm, why, ws) != 0)
        return -1;
    char *form = NULL, *r = enc(a->resource), *sc = a->scope ? enc(a->scope)
                                                            : NULL;
    char *id = a->post_auth ? enc(a->client_id) : NULL;
    char *sec = a->post_auth ? enc(a->secret) : NULL;
    int n = r && (!a->scope || sc) && (!a->post_auth || (id && sec))
                ? asprintf(&form,
                           "grant_type=client_credentials&resource=%s%s%s%s%s"
                           "%s%s",
                           r, sc ? "&scope=" : "", sc ? sc : "",
                           id ? "&client_id=" : "", id ? id : "",
                           sec ? "&client_secret=" : "", sec ? sec : "")
                : -1;
    if (sec)
        memset(sec, 0, strlen(sec));
    curl_free(r);
    curl_free(sc);
    curl_free(id);
    curl_free(sec);
    if (n < 0) {
        snprintf(why, ws, "out of memory");
        return -1;
    }
    json_t *doc;
    char w[240];
    long st = transfer(a, a->endpoint, form, !a->post_auth, &doc, w,
                       sizeof w);
    memset(form, 0, (size_t)n);
    free(form);
    if (st < 0) {
        snprintf(why, ws, "token endpoint: %s", w);
        return -1;
    }
    if (st != 200) {
        char e[170], d[170];
        clean(e, sizeof e,
              json_string_value(json_object_get(doc, "error")));
        clean(d, sizeof d,
              json_string_value(json_object_get(doc, "error_description")));
        snprintf(why, ws, "token endpoint %.120s refused (HTTP %ld)%s%s%s%s",
                 a->endpoint, st, e[0] ? ": " : "", e, d[0] ? ": " : "", d);
        json_decref(doc);
        return -1;
    }
    const char *tok = json_string_value(json_object_get(doc, "access_token"));
    const char *tt = json_string_value(json_object_get(doc, "token_type"));
    const json_t *ei = json_object_get(doc, "expires_in");
    bool ok = tok && tok[0] && strlen(tok) < MAX_TOKEN;
    for (const char *p = tok; ok && *p; p++)
        ok = *p > 0x20 && *p < 0x7f; /* no header injection */
    if (!ok || !tt || strcasecmp(tt, "bearer")) {
        snprintf(why, ws, "token endpoint %.120s: the answer holds no "
                 "Bearer access_token of printable characters (under %d "
                 "bytes)", a->endpoint, MAX_TOKEN);
        json_decref(doc);
        return -1;
    }
    int64_t life = json_is_integer(ei) && json_integer_value(ei) > 0 &&
                           json_integer_value(ei) < 86400 * 365
                       ? (int64_t)json_integer_value(ei) * 1000
                       : -1;
    char *t = strdup(tok);
    json_decref(doc);
    if (!t) {
        snprintf(why, ws, "out of memory");
        return -1;
    }
    /* kept until shortly before it expires: a quarter of its life, at
     * most 30s, earlier */
    int64_t margin = life < 0 ? 0 : life / 4 < 30000 ? life / 4 : 30000;
    pthread_mutex_lock(&a->mu);
    if (a->token)
        memset(a->token, 0, strlen(a->token));
    free(a->token);
    a->token = t;
    a->gen++;
    a->fresh_until = life < 0 ? INT64_MAX
                              : mcpsrc_now_ms() + life - margin;
    pthread_mutex_unlock(&a->mu);
    if (life < 0)
        th_sdk_log(host, TOOLHOST_LOG_INFO,
                   "server '%s': OAuth token from %s (no expires_in: kept "
                   "until the server refuses it)",
                   s->name, a->endpoint);
    else
        th_sdk_log(host, TOOLHOST_LOG_INFO,
                   "server '%s': OAuth token from %s (expires in %llds)",
                   s->name, a->endpoint, (long long)(life / 1000));
    return 0;
}

/* A waiter's slice: the fetch's end, or 50 ms (its call is looked at
 * between slices). */
static void wait_fetch(mcp_oauth *a)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&a->cv, &a->mu, &ts);
}

/* `end` (MCPSRC_OAUTH_*) with its words in why. */
static int ended(int end, char *why, size_t ws)
{
    snprintf(why, ws, "%s", end == MCPSRC_OAUTH_CANCELLED
                                ? "cancelled while an OAuth token was fetched"
                                : "no OAuth token before the call's deadline");
    return end;
}

/* 0, or how the caller's call ended (MCPSRC_OAUTH_*, with why). */
static int call_ended(toolhost_call *call, int64_t deadline, char *why,
                      size_t ws)
{
    if (call && th_sdk_cancelled(call))
        return ended(MCPSRC_OAUTH_CANCELLED, why, ws);
    if (deadline >= 0 && mcpsrc_now_ms() >= deadline)
        return ended(MCPSRC_OAUTH_TIMEDOUT, why, ws);
    return 0;
}

int mcpsrc_oauth_auth(mcp_srv *s, bool refused, uint64_t *gen,
                      const char *rm, toolhost_call *call, int64_t deadline,
                      char **line, char *why, size_t ws)
{
    mcp_oauth *a = s->oauth;
    *line = NULL;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        bool usable = a->token && mcpsrc_now_ms() < a->fresh_until &&
                      (!refused || a->gen != *gen);
        if (usable) {
            if (asprintf(line, "Authorization: Bearer %s", a->token) < 0) {
                *line = NULL;
                pthread_mutex_unlock(&a->mu);
                snprintf(why, ws, "out of memory");
                return -1;
            }
            *gen = a->gen;
            pthread_mutex_unlock(&a->mu);
            return 0;
        }
        /* none yet, and the server has not asked: go without (its 401
         * names the resource metadata), unless the token URL is known */
        if (!refused && !a->token && !a->fetches && !a->token_url) {
            pthread_mutex_unlock(&a->mu);
            return 0;
        }
        if (!a->fetching)
            break;
        /* one fetch at a time: wait for it and take its result, while
         * this call lives */
        uint64_t seen = a->fetches;
        int end = 0;
        while (a->fetching && !(end = call_ended(call, deadline, why, ws)))
            wait_fetch(a);
        if (end) {
            pthread_mutex_unlock(&a->mu);
            return end;
        }
        if (a->fetches != seen && !a->abandoned &&
            !(a->token && mcpsrc_now_ms() < a->fresh_until)) {
            snprintf(why, ws, "OAuth: %s", a->err);
            pthread_mutex_unlock(&a->mu);
            return -1;
        }
        /* a fresh token came: take it; its fetcher's call ended: the
         * same question again (a fetch of our own) */
        if (!a->abandoned)
            refused = false;
    }
    int end = call_ended(call, deadline, why, ws);
    if (end) {
        pthread_mutex_unlock(&a->mu);
        return end;
    }
    a->fetching = true;
    a->f_call = call;
    a->f_deadline = deadline;
    a->f_ended = 0;
    a->f_stopped = false;
    pthread_mutex_unlock(&a->mu);
    char w[1024] = "";
    int rc = fetch(s, a, rm, w, sizeof w);
    pthread_mutex_lock(&a->mu);
    end = rc != 0 ? a->f_ended : 0;
    a->fetching = false;
    a->f_call = NULL;
    a->f_deadline = -1;
    a->fetches++;
    a->abandoned = end != 0;
    if (rc != 0 && !end)
        snprintf(a->err, sizeof a->err, "%s", w);
    pthread_cond_broadcast(&a->cv);
    if (rc == 0 && asprintf(line, "Authorization: Bearer %s", a->token) < 0) {
        *line = NULL;
        snprintf(w, sizeof w, "out of memory");
        rc = -1;
    }
    if (rc == 0)
        *gen = a->gen;
    pthread_mutex_unlock(&a->mu);
    if (end)
        return ended(end, why, ws);
    if (rc != 0) {
        th_sdk_log(s->st->host, TOOLHOST_LOG_WARN,
                   "server '%s': OAuth: %s", s->name, w);
        snprintf(why, ws, "OAuth: %s", w);
    }
    return rc;
}
