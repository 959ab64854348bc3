/* oa_http.c - one call of an OpenAPI operation: the request built from
 * the validated arguments and sent through libcurl.
 *
 * One easy handle per call (no state shared between calls), reset before
 * each request of the call (a redirect hop, a retry).  Each request:
 * http and https only, TLS verification on, no proxy from the
 * environment, the API's timeouts bounded by the call's deadline, the
 * answer cut at max_response (CURLOPT_MAXFILESIZE and the write callback),
 * cancellation through the progress callback.
 *
 * Redirects are followed here, not by libcurl, so each hop is checked:
 * at most max_redirects of them (0 by default: a redirect is refused),
 * http(s) only, and the credentials are dropped when a hop leaves the
 * base URL's host.  Every connection's address is checked as it is opened
 * (CURLOPT_OPENSOCKETFUNCTION: the address actually connected, so no DNS
 * answer gets around it): a private, loopback, link-local or otherwise
 * internal address is refused, unless allow_private is set and the
 * connection is to the base URL's own host and port.  An API on a private
 * network can thus be reached, and still cannot send its caller elsewhere
 * on that network.
 *
 * Retries (retries: N) only for idempotent methods (GET, HEAD, PUT,
 * DELETE, OPTIONS), after a failed connection, an empty answer or a 502,
 * 503 or 504, with a back-off of 100 ms doubling, all within the call's
 * timeout.  What is left failing ends the call as the API's fault (ABI
 * 1.5): no connection, an empty answer or HTTP 502/503 unavailable, a
 * timeout or HTTP 504 backend_timeout, HTTP 429 rate_limited, with the
 * answer's Retry-After (seconds or an HTTP date) as the retry-after hint,
 * at most a day.  Secrets (from the environment) are never logged nor shown:
 * messages name the variable, and show the path without the query. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../shared/mp_json.h"
#include "openapi.h"
#include "toolhost/sdk.h"

#define EXCERPT 512

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool oa_addr_private(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
        return (a >> 24) == 0 ||                    /* 0.0.0.0/8 */
               (a >> 24) == 10 ||                   /* 10/8 */
               (a >> 24) == 127 ||                  /* loopback */
               (a >> 16) == 0xa9fe ||               /* 169.254/16 */
               (a >> 20) == 0xac1 ||                /* 172.16/12 */
               (a >> 16) == 0xc0a8 ||               /* 192.168/16 */
               (a >> 22) == (100u << 2 | 1) ||      /* 100.64/10 */
               (a >> 8) == 0xc00000 ||              /* 192.0.0/24 */
               (a >> 17) == (198u << 7 | 9) ||      /* 198.18/15 */
               (a >> 28) >= 0xe;                    /* multicast, 240/4 */
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        const uint8_t *b = a->s6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a) || IN6_IS_ADDR_V4COMPAT(a)) {
            struct sockaddr_in v4 = {.sin_family = AF_INET};
            memcpy(&v4.sin_addr, b + 12, 4);
            return oa_addr_private((const struct sockaddr *)&v4);
        }
        return IN6_IS_ADDR_UNSPECIFIED(a) || IN6_IS_ADDR_LOOPBACK(a) ||
               (b[0] & 0xfe) == 0xfc ||                  /* fc00::/7 */
               (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) || /* fe80::/10 */
               (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) || /* fec0::/10 */
               b[0] == 0xff ||                           /* multicast */
               (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff &&
                b[3] == 0x9b) ||                         /* 64:ff9b::/96 */
               (b[0] == 0x20 && b[1] == 0x02);           /* 6to4 2002::/16 */
    }
    return true; /* anything else is not for us */
}

/* ---- one request ----------------------------------------------------- */

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static int put(buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

static int puts_(buf *b, const char *s)
{
    return put(b, s, strlen(s));
}

typedef struct xfer {
    toolhost_call *call;
    const oa_api *api;
    buf body;
    bool too_big;
    bool private_ok;    /* this hop goes to the base URL's host and port */
    char refused[160];  /* why a connection was refused, or "" */
} xfer;

static size_t on_data(char *data, size_t size, size_t n, void *ud)
{
    xfer *x = ud;
    size_t len = size * n;
    if ((int64_t)(x->body.len + len) > x->api->max_response) {
        x->too_big = true;
        return 0; /* CURLE_WRITE_ERROR */
    }
    return put(&x->body, data, len) == 0 ? len : 0;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut,
                       curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    xfer *x = ud;
    return x->call->host->is_cancelled(x->call) ? 1 : 0;
}

static curl_socket_t on_open(void *ud, curlsocktype purpose,
                             struct curl_sockaddr *a)
{
    xfer *x = ud;
    if (purpose == CURLSOCKTYPE_IPCXN && !x->private_ok &&
        oa_addr_private(&a->addr)) {
        char ip[INET6_ADDRSTRLEN] = "?";
        const void *src =
            a->family == AF_INET
                ? (const void *)&((struct sockaddr_in *)&a->addr)->sin_addr
                : (const void *)&((struct sockaddr_in6 *)&a->addr)->sin6_addr;
        inet_ntop(a->family, src, ip, sizeof ip);
        snprintf(x->refused, sizeof x->refused, "%s", ip);
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

/* What one hop needs: the URL, the method and body, the headers. */
typedef struct req {
    const char *method;
    const char *body;          /* NULL: none */
    const char *type;          /* the body's media type */
    struct curl_slist *hdrs;   /* with credentials */
    struct curl_slist *plain;  /* without (a hop to another host) */
    const char *user, *pass;   /* basic auth, or NULL */
} req;

typedef struct hop {
    CURLcode rc;
    long status;
    char *location;  /* a redirect's target (malloc), or NULL */
    uint64_t retry_after_ms; /* the answer's Retry-After (seconds or an
                                HTTP date, parsed by libcurl), bounded;
                                0: none */
    char errbuf[CURL_ERROR_SIZE];
} hop;

/* One request on `e` (reset first: nothing of an earlier hop carries
 * over but libcurl's connection and DNS caches). */
static void one_hop(CURL *e, xfer *x, const req *r, const char *url,
                    bool creds, int64_t timeout_ms, hop *h)
{
    memset(h, 0, sizeof *h);
    curl_easy_reset(e);
    x->body.len = 0;
    x->too_big = false;
    x->refused[0] = '\0';
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    /* a handle kept idle (keep_alive) holds the base URL's connection and
     * at most one more (a redirect's) */
    curl_easy_setopt(e, CURLOPT_MAXCONNECTS, 2L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(x->api->connect_timeout_ms < timeout_ms
                                ? x->api->connect_timeout_ms
                                : timeout_ms));
    curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE,
                     (curl_off_t)x->api->max_response);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_open);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, h->errbuf);
    /* the body's Content-Type goes before the other headers, on this hop
     * only: a hop without a body (none given, or a 303) has none, and an
     * empty "Content-Type:" keeps libcurl from adding its form type to a
     * POST of no fields.  The node lives until the request ends; libcurl
     * only reads the list. */
    char ct[96];
    snprintf(ct, sizeof ct, "Content-Type:%s%s", r->body ? " " : "",
             r->body ? r->type : "");
    struct curl_slist ct_node = {.data = ct,
                                 .next = creds ? r->hdrs : r->plain};
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, &ct_node);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "toolhost-openapi/0.1");
    if (creds && r->user) {
        curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(e, CURLOPT_USERNAME, r->user);
        curl_easy_setopt(e, CURLOPT_PASSWORD, r->pass);
    }
    /* the method by name whenever there is a body: POSTFIELDS alone
     * makes libcurl send a POST, and a GET with a body (a document may
     * give one a requestBody) must not become one */
    if (!strcmp(r->method, "HEAD"))
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    else if (strcmp(r->method, "GET") || r->body)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
    if (r->body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)strlen(r->body));
    } else if (!strcmp(r->method, "POST") || !strcmp(r->method, "PUT") ||
               !strcmp(r->method, "PATCH")) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
    }
    h->rc = curl_easy_perform(e);
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &h->status);
    curl_off_t ra = 0; /* a date in the past, or garbage: 0 */
    if (h->rc == CURLE_OK &&
        curl_easy_getinfo(e, CURLINFO_RETRY_AFTER, &ra) == CURLE_OK && ra > 0)
        h->retry_after_ms = ra < TOOLHOST_MAX_RETRY_AFTER_MS / 1000
                                ? (uint64_t)ra * 1000
                                : TOOLHOST_MAX_RETRY_AFTER_MS;
    char *loc = NULL;
    if (h->rc == CURLE_OK && h->status >= 300 && h->status < 400 &&
        curl_easy_getinfo(e, CURLINFO_REDIRECT_URL, &loc) == CURLE_OK && loc)
        h->location = strdup(loc);
}

/* The scheme (*https), host and port of an absolute URL (host lower
 * case); -1 when it is not an http(s) URL. */
static int url_origin(const char *url, bool *https, char *host, size_t hs,
                      long *port)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *h = NULL, *p = NULL;
    int rc = -1;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        (!strcasecmp(scheme, "http") || !strcasecmp(scheme, "https")) &&
        curl_url_get(u, CURLUPART_HOST, &h, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &p, CURLU_DEFAULT_PORT) == CURLUE_OK) {
        snprintf(host, hs, "%s", h);
        for (char *c = host; *c; c++)
            if (*c >= 'A' && *c <= 'Z')
                *c = (char)(*c - 'A' + 'a');
        *port = strtol(p, NULL, 10);
        *https = !strcasecmp(scheme, "https");
        rc = 0;
    }
    curl_free(scheme);
    curl_free(h);
    curl_free(p);
    curl_url_cleanup(u);
    return rc;
}

/* ---- the request from the arguments --------------------------------- */

/* A scalar argument as text (JSON text for an object or array), its
 * length in *len: a string's NUL bytes (msgpack carries them) are kept,
 * not where the text ends. */
static char *arg_text(const json_t *v, size_t *len)
{
    char tmp[64];
    char *t;
    switch (json_typeof(v)) {
    case JSON_STRING:
        *len = json_string_length(v);
        t = malloc(*len + 1);
        if (t) {
            memcpy(t, json_string_value(v), *len);
            t[*len] = '\0';
        }
        return t;
    case JSON_INTEGER:
        snprintf(tmp, sizeof tmp, "%" JSON_INTEGER_FORMAT,
                 json_integer_value(v));
        t = strdup(tmp);
        break;
    case JSON_REAL:
        snprintf(tmp, sizeof tmp, "%.17g", json_real_value(v));
        t = strdup(tmp);
        break;
    case JSON_TRUE:
        t = strdup("true");
        break;
    case JSON_FALSE:
        t = strdup("false");
        break;
    case JSON_NULL:
        t = strdup("");
        break;
    default:
        t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        break;
    }
    *len = t ? strlen(t) : 0;
    return t;
}

/* n bytes percent-encoded (NUL as %00), appended to q */
static int put_escaped(CURL *esc, buf *q, const char *s, size_t n)
{
    if (n > INT_MAX)
        return -1;
    char *x = curl_easy_escape(esc, n ? s : "", (int)n);
    int rc = x ? puts_(q, x) : -1;
    curl_free(x);
    return rc;
}

/* name=value (nl and vl bytes), both percent-encoded, after `first`
 * (the first pair) or "&" (the others) */
static int add_pair(CURL *esc, buf *q, const char *first, const char *name,
                    size_t nl, const char *value, size_t vl)
{
    return puts_(q, q->len ? "&" : first) || put_escaped(esc, q, name, nl) ||
                   puts_(q, "=") || put_escaped(esc, q, value, vl)
               ? -1
               : 0;
}

static int add_query(CURL *esc, buf *q, const char *name, const char *value)
{
    return add_pair(esc, q, "?", name, strlen(name), value, strlen(value));
}

/* A value of a query parameter or a form field: one pair, or one per
 * element of an array (the name repeated); null adds nothing.  An
 * object, or an array in an array, goes as its JSON text. */
static int add_value(CURL *esc, buf *q, const char *first, const char *name,
                     size_t nl, const json_t *v)
{
    if (json_is_null(v))
        return 0;
    if (json_is_array(v)) {
        size_t k;
        const json_t *e;
        json_array_foreach(v, k, e)
        {
            size_t tl;
            char *t = arg_text(e, &tl);
            int bad = !t || add_pair(esc, q, first, name, nl, t, tl);
            free(t);
            if (bad)
                return -1;
        }
        return 0;
    }
    size_t tl;
    char *t = arg_text(v, &tl);
    int bad = !t || add_pair(esc, q, first, name, nl, t, tl);
    free(t);
    return bad ? -1 : 0;
}

/* An object's members as an application/x-www-form-urlencoded body
 * (malloc()ed; "" for an object without fields); NULL when out of
 * memory. */
static char *form_body(CURL *esc, const json_t *obj)
{
    buf f = {0};
    const char *k;
    size_t kl;
    const json_t *v;
    json_object_keylen_foreach((json_t *)obj, k, kl, v)
    {
        if (add_value(esc, &f, "", k, kl, v) != 0) {
            free(f.p);
            return NULL;
        }
    }
    return f.p ? f.p : strdup("");
}

typedef struct built {
    buf url;    /* base + path + query */
    buf shown;  /* method + path, no query (may hold secrets) */
    char *body;
    req r;
    char *secret, *secret2;
} built;

static void built_free(built *b)
{
    free(b->url.p);
    free(b->shown.p);
    free(b->body);
    curl_slist_free_all(b->r.hdrs);
    curl_slist_free_all(b->r.plain);
    if (b->secret)
        memset(b->secret, 0, strlen(b->secret));
    free(b->secret);
    if (b->secret2)
        memset(b->secret2, 0, strlen(b->secret2));
    free(b->secret2);
}

/* RFC 6265 cookie-octet: no control character (NUL included), space,
 * DQUOTE, comma, semicolon or backslash (and no byte past ASCII). */
static bool cookie_value_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c >= 0x7f || c == '"' || c == ',' || c == ';' ||
            c == '\\')
            return false;
    }
    return true;
}

/* n bytes without CR, LF or NUL */
static bool one_line_value(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0')
            return false;
    return true;
}

static int header(struct curl_slist **l, const char *name, const char *value)
{
    size_t n = strlen(name) + strlen(value) + 3;
    char *h = malloc(n);
    if (!h)
        return -1;
    snprintf(h, n, "%s: %s", name, value);
    struct curl_slist *nl = curl_slist_append(*l, h);
    memset(h, 0, n);
    free(h);
    if (!nl)
        return -1;
    *l = nl;
    return 0;
}

/* Fills b from the arguments; 0, or -1 with a message for the caller. */
static int build(CURL *esc, const oa_op *op, const json_t *args, built *b,
                 char *err, size_t es)
{
    const oa_api *api = op->api;
    int rc = -1;
    if (puts_(&b->url, api->base_url) || puts_(&b->shown, op->method) ||
        puts_(&b->shown, " "))
        goto oom;
    /* the path, its {names} replaced by escaped values */
    for (const char *p = op->path; *p;) {
        const char *e = *p == '{' ? strchr(p, '}') : NULL;
        if (!e) {
            if (put(&b->url, p, 1) || put(&b->shown, p, 1))
                goto oom;
            p++;
            continue;
        }
        char name[160];
        snprintf(name, sizeof name, "%.*s", (int)(e - p - 1), p + 1);
        const json_t *v = json_object_get(args, name);
        size_t tl = 0;
        char *text = v ? arg_text(v, &tl) : NULL;
        if (!text || !tl || !strcmp(text, ".") || !strcmp(text, "..")) {
            snprintf(err, es, "path parameter '%s' must be a non-empty "
                              "value other than '.' and '..'", name);
            free(text);
            goto out;
        }
        size_t at = b->url.len;
        int bad = put_escaped(esc, &b->url, text, tl) ||
                  put(&b->shown, b->url.p + at, b->url.len - at);
        free(text);
        if (bad)
            goto oom;
        p = e + 1;
    }
    /* query, header and cookie parameters */
    buf q = {0}, ck = {0};
    for (size_t i = 0; i < op->n_params; i++) {
        const oa_param *pa = &op->params[i];
        const json_t *v = json_object_get(args, pa->name);
        if (!v || pa->in == OA_IN_PATH || json_is_null(v))
            continue;
        if (pa->in == OA_IN_QUERY) {
            if (add_value(esc, &q, "?", pa->name, strlen(pa->name), v) !=
                0) {
                free(q.p);
                goto oom_ck;
            }
            continue;
        }
        size_t tl;
        char *t = arg_text(v, &tl);
        if (!t) {
            free(q.p);
            goto oom_ck;
        }
        int bad;
        if (pa->in == OA_IN_COOKIE) {
            if (!cookie_value_ok(t, tl)) {
                snprintf(err, es, "cookie parameter '%s' must be printable "
                                  "ASCII without spaces, quotes, commas, "
                                  "semicolons or backslashes",
                         pa->name);
                free(t);
                free(q.p);
                goto out_ck;
            }
            bad = puts_(&ck, ck.len ? "; " : "") || puts_(&ck, pa->name) ||
                  puts_(&ck, "=") || puts_(&ck, t);
        } else if (!one_line_value(t, tl)) {
            snprintf(err, es, "header parameter '%s' must be one line (no "
                              "CR, LF or NUL)", pa->name);
            free(t);
            free(q.p);
            goto out_ck;
        } else {
            bad = header(&b->r.hdrs, pa->name, t) ||
                  header(&b->r.plain, pa->name, t);
        }
        free(t);
        if (bad) {
            free(q.p);
            goto oom_ck;
        }
    }
    /* the cookies, one Cookie header, sent to the API's own origin only
     * (as the credentials: a redirect elsewhere gets none) */
    int cbad = ck.len && header(&b->r.hdrs, "Cookie", ck.p);
    free(ck.p);
    ck.p = NULL;
    if (cbad) {
        free(q.p);
        goto oom;
    }
    /* credentials from the environment */
    if (api->auth) {
        const char *s = getenv(api->auth_env);
        const char *s2 = api->auth_env2 ? getenv(api->auth_env2) : "";
        const char *missing = !s ? api->auth_env : !s2 ? api->auth_env2 : NULL;
        if (missing) {
            snprintf(err, es, "api '%s': auth: environment variable %s is "
                              "not set", api->name, missing);
            free(q.p);
            goto out;
        }
        if (!one_line_value(s, strlen(s)) || !one_line_value(s2, strlen(s2))) {
            snprintf(err, es, "api '%s': auth: %s holds a line break",
                     api->name, api->auth_env);
            free(q.p);
            goto out;
        }
        if (!(b->secret = strdup(s)) || !(b->secret2 = strdup(s2))) {
            free(q.p);
            goto oom;
        }
        int bad = 0;
        if (api->auth == OA_AUTH_BEARER) {
            size_t n = strlen(s) + 8;
            char *v = malloc(n);
            bad = !v;
            if (v) {
                snprintf(v, n, "Bearer %s", s);
                bad = header(&b->r.hdrs, "Authorization", v);
                memset(v, 0, n);
                free(v);
            }
        } else if (api->auth == OA_AUTH_BASIC) {
            b->r.user = b->secret;
            b->r.pass = b->secret2;
        } else if (api->key_header) {
            bad = header(&b->r.hdrs, api->key_header, s);
        } else {
            bad = add_query(esc, &q, api->key_query, s);
        }
        if (bad) {
            free(q.p);
            goto oom;
        }
    }
    if (q.len && puts_(&b->url, q.p)) {
        free(q.p);
        goto oom;
    }
    free(q.p);
    /* the config's headers go where the credentials go: to the API's
     * own origin only (an operator may put a key or a cookie there) */
    for (char **h = api->headers; h && *h; h++) {
        struct curl_slist *a = curl_slist_append(b->r.hdrs, *h);
        if (!a)
            goto oom;
        b->r.hdrs = a;
    }
    if (header(&b->r.hdrs, "Accept", "application/json") ||
        header(&b->r.plain, "Accept", "application/json"))
        goto oom;
    const json_t *body = json_object_get(args, "body");
    bool form = op->body == OA_BODY_FORM;
    /* a form is the fields of an object: null is no form (as left out);
     * a document whose schema lets anything else through (oneOf, no
     * type) does not get it sent as an empty form */
    if (form && body && !json_is_null(body) && !json_is_object(body)) {
        snprintf(err, es, "the form body must be an object of fields, not "
                          "%s",
                 json_is_string(body)  ? "a string"
                 : json_is_array(body) ? "an array"
                                       : "a number or boolean");
        goto out;
    }
    if (op->body != OA_BODY_NONE && body && !(form && json_is_null(body))) {
        b->r.type =
            form ? "application/x-www-form-urlencoded" : "application/json";
        b->body = form ? form_body(esc, body)
                       : json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!b->body)
            goto oom;
    }
    b->r.method = op->method;
    b->r.body = b->body;
    rc = 0;
    goto out;
oom_ck:
    free(ck.p);
oom:
    snprintf(err, es, "out of memory");
out:
    return rc;
out_ck:
    free(ck.p);
    return rc;
}

/* ---- execute ---------------------------------------------------------- */

static bool transient(const hop *h)
{
    return (h->rc == CURLE_COULDNT_CONNECT || h->rc == CURLE_GOT_NOTHING ||
            h->rc == CURLE_RECV_ERROR || h->rc == CURLE_SEND_ERROR) ||
           (h->rc == CURLE_OK &&
            (h->status == 502 || h->status == 503 || h->status == 504));
}

/* A bounded, printable excerpt of an answer's body, valid UTF-8 (the
 * message goes into msgpack strings and JSON): a control byte is a
 * space, a byte that does not begin a whole UTF-8 character within the
 * bound is '?'. */
static void excerpt(const buf *b, char *out, size_t size)
{
    size_t n = b->len < size - 1 ? b->len : size - 1;
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)b->p[i];
        size_t w = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2
                              : c >= 0xe0 && c <= 0xef   ? 3
                              : c >= 0xf0 && c <= 0xf4   ? 4
                                                         : 0;
        if (w == 1) {
            out[i++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
        } else if (w && i + w <= n && mp_json_utf8_valid(b->p + i, w)) {
            memcpy(out + i, b->p + i, w);
            i += w;
        } else {
            out[i++] = '?';
        }
    }
    out[n] = '\0';
}

static int fail_hop(toolhost_call *call, const oa_api *api, const built *b,
                    const xfer *x, const hop *h, int64_t timeout_ms)
{
    if (x->refused[0]) {
        th_sdk_log_call(call, TOOLHOST_LOG_WARN,
                        "api '%s': %s: connection to %s refused (a private "
                        "address)", api->name, b->shown.p, x->refused);
        return th_sdk_fail(call, "refused to connect to %s for %s: a "
                                 "private, loopback or link-local address "
                                 "(only the base URL's own host may be one, "
                                 "with allow_private: true)",
                           x->refused, b->shown.p);
    }
    if (x->too_big || h->rc == CURLE_FILESIZE_EXCEEDED) {
        th_sdk_log_call(call, TOOLHOST_LOG_WARN,
                        "api '%s': %s: answer larger than max_response (%lld "
                        "bytes), cut off", api->name, b->shown.p,
                        (long long)api->max_response);
        return th_sdk_fail(call, "the answer to %s is larger than "
                                 "max_response (%lld bytes)",
                           b->shown.p, (long long)api->max_response);
    }
    if (h->rc == CURLE_OPERATION_TIMEDOUT) {
        th_sdk_log_call(call, TOOLHOST_LOG_WARN,
                        "api '%s': %s: no answer within %lld ms", api->name,
                        b->shown.p, (long long)timeout_ms);
        return th_sdk_fail_backend(call, TOOLHOST_TIMEOUT, 0,
                                   "%s: no answer within %lld ms (timeout)",
                                   b->shown.p, (long long)timeout_ms);
    }
    if (h->rc == CURLE_ABORTED_BY_CALLBACK)
        return th_sdk_fail(call, "%s: cancelled", b->shown.p);
    /* the API could not be reached or hung up: unavailable (ABI 1.5) */
    bool down = h->rc == CURLE_COULDNT_CONNECT ||
                h->rc == CURLE_COULDNT_RESOLVE_HOST ||
                h->rc == CURLE_GOT_NOTHING || h->rc == CURLE_RECV_ERROR ||
                h->rc == CURLE_SEND_ERROR;
    return th_sdk_fail_backend(call, down ? TOOLHOST_UNAVAILABLE
                                          : TOOLHOST_FAILED,
                               0, "%s: %s%s%s", b->shown.p,
                               curl_easy_strerror(h->rc),
                               h->errbuf[0] ? ": " : "", h->errbuf);
}

/* A handle for a call of api: an idle one of its pool (its connections
 * open), else a new one. */
static CURL *handle_take(const oa_api *api)
{
    oa_pool *p = api->pool;
    CURL *e = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->n > 0)
        e = p->idle[--p->n];
    pthread_mutex_unlock(&p->mu);
    return e ? e : curl_easy_init();
}

/* The call is over: its handle back to the pool while fewer than
 * keep_alive are idle (the connections it opened stay open for the next
 * calls), else closed (logged the 1st, 2nd, 4th, 8th... time). */
static void handle_give(const oa_api *api, CURL *e,
                        const toolhost_host_api *host)
{
    if (!e)
        return;
    /* its options point into the call that ends (the headers, the body,
     * the error buffer and callback data on its stack): cleared, so an
     * idle handle, and the cleanup of one at fini, holds none of them
     * (its connections stay) */
    curl_easy_reset(e);
    oa_pool *p = api->pool;
    pthread_mutex_lock(&p->mu);
    bool kept = p->n < api->keep_alive;
    uint64_t dropped = 0;
    if (kept)
        p->idle[p->n++] = e;
    else
        dropped = ++p->dropped;
    pthread_mutex_unlock(&p->mu);
    if (kept)
        return;
    curl_easy_cleanup(e);
    if (api->keep_alive > 0 && (dropped & (dropped - 1)) == 0)
        th_sdk_log(host, TOOLHOST_LOG_DEBUG,
                   "api '%s': %ld connections idle already (keep_alive): "
                   "one more closed (%llu so far)",
                   api->name, api->keep_alive,
                   (unsigned long long)dropped);
}

/* A byte of an RFC 9110 token (tchar) */
static bool tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The answer's media type (libcurl's Content-Type of the last hop), lower
 * case, without parameters or spaces, into out ("" when it has none or
 * an odd one: not type/subtype of tokens (a control byte, "image/",
 * "a/b/c"), over the ABI's 255 bytes). */
static void media_type(CURL *e, CURLcode rc, char *out, size_t size)
{
    const char *ct = NULL;
    out[0] = '\0';
    if (rc != CURLE_OK ||
        curl_easy_getinfo(e, CURLINFO_CONTENT_TYPE, &ct) != CURLE_OK || !ct)
        return;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    size_t n = strcspn(ct, "; \t");
    if (!n || n >= size || n > 255)
        return;
    size_t slash = 0; /* where the one '/' is */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)ct[i];
        if (c == '/' && !slash && i > 0 && i + 1 < n)
            slash = i;
        else if (!tchar(c))
            return (void)(out[0] = '\0');
        out[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    out[slash ? n : 0] = '\0';
}

/* How a 2xx body without an output schema is carried: 0 as stdout's
 * text (UTF-8 of any type but image and audio, and an image in XML, such
 * as image/svg+xml: a document, with any script it holds, not a picture
 * for a client to render), else the content block kind of an image, an
 * audio clip or other bytes. */
static uint32_t binary_kind(const char *mt, const buf *body)
{
    bool utf8 = mp_json_utf8_valid(body->p, body->len);
    size_t n = strlen(mt);
    bool xml = n > 4 && !strcmp(mt + n - 4, "+xml");
    if (!strncmp(mt, "image/", 6) && !(xml && utf8))
        return xml ? TOOLHOST_BLOCK_RESOURCE : TOOLHOST_BLOCK_IMAGE;
    if (!strncmp(mt, "audio/", 6))
        return TOOLHOST_BLOCK_AUDIO;
    return utf8 ? 0 : TOOLHOST_BLOCK_RESOURCE;
}

/* The URI of an answer's embedded resource: the URL that answered
 * without what may be secret in it (user info, the query, the
 * fragment); malloc()ed, NULL when out of memory. */
static char *resource_uri(const char *url)
{
    CURLU *u = curl_url();
    char *s = NULL, *r = NULL;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_set(u, CURLUPART_USER, NULL, 0) == CURLUE_OK &&
        curl_url_set(u, CURLUPART_PASSWORD, NULL, 0) == CURLUE_OK &&
        curl_url_set(u, CURLUPART_OPTIONS, NULL, 0) == CURLUE_OK &&
        curl_url_set(u, CURLUPART_QUERY, NULL, 0) == CURLUE_OK &&
        curl_url_set(u, CURLUPART_FRAGMENT, NULL, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_URL, &s, 0) == CURLUE_OK)
        r = strdup(s);
    else if (u) /* every URL here went through libcurl: not reached */
        r = strdup("");
    curl_free(s);
    curl_url_cleanup(u);
    return r;
}

/* A body that is not text: one content block (an image, an audio clip,
 * or an embedded resource of other bytes whose URI is the URL answered,
 * its user info and query left out: they may hold a secret), and one
 * line on stdout naming it for a caller that reads text only. */
static int binary_answer(toolhost_call *call, const built *b, const char *url,
                         const char *mt, const buf *body)
{
    uint32_t kind = binary_kind(mt, body);
    const char *type = mt[0] ? mt : "application/octet-stream";
    char *uri = NULL;
    if (kind == TOOLHOST_BLOCK_RESOURCE && !(uri = resource_uri(url)))
        return th_sdk_fail(call, "out of memory");
    toolhost_block blk = {.struct_size = sizeof blk,
                          .kind = kind,
                          .mime_type = type,
                          .data = body->p,
                          .len = body->len,
                          .uri = uri};
    int wr = call->host->write_block(call, &blk);
    free(uri);
    if (wr != 0)
        return th_sdk_fail(call, "%s: the answer (%s, %zu bytes) is not "
                                 "text and cannot be carried as a content "
                                 "block: %s",
                           b->shown.p, type, body->len, th_sdk_strerror(wr));
    th_sdk_printf(call, "%s, %zu bytes (a content block)", type, body->len);
    return TOOLHOST_OK;
}

int oa_execute(void *state, const toolhost_tool *tool, toolhost_call *call,
               const uint8_t *args, size_t args_len)
{
    (void)state;
    const oa_op *op = tool->user_data;
    const oa_api *api = op->api;
    char err[512];
    json_t *a = mp_json_parse(args, args_len);
    if (!json_is_object(a)) {
        json_decref(a);
        return th_sdk_fail(call, "the arguments are not a map");
    }
    built b = {0};
    CURL *e = handle_take(api);
    int rc = e ? build(e, op, a, &b, err, sizeof err) : -1;
    json_decref(a);
    if (rc != 0) {
        built_free(&b);
        handle_give(api, e, call->host);
        return th_sdk_fail(call, "%s", e ? err : "out of memory");
    }
    int64_t start = now_ms();
    int64_t left = call->host->time_left_ms(call);
    int64_t budget = left >= 0 && left < api->timeout_ms ? left
                                                         : api->timeout_ms;
    int64_t deadline = start + budget;
    xfer x = {.call = call, .api = api};
    hop h = {0};
    long tries = op->idempotent ? api->retries + 1 : 1;
    long attempt = 0;
    char *url = NULL;
    for (attempt = 1; attempt <= tries; attempt++) {
        req r = b.r;
        free(url);
        url = strdup(b.url.p);
        bool creds = true;
        for (long hops = 0; url; hops++) {
            char host[256];
            long port = 0;
            bool https = false;
            if (url_origin(url, &https, host, sizeof host, &port) != 0) {
                rc = th_sdk_fail(call, "%s: redirected to a URL that is not "
                                       "http(s)", b.shown.p);
                goto done;
            }
            /* the same origin (RFC 6454): scheme, host and port; an
             * https base redirected to http on its own port is another
             * (the credentials and cookies are not sent in clear) */
            bool same = https == api->base_https &&
                        !strcmp(host, api->base_host) && port == api->base_port;
            creds = creds && same;
            x.private_ok = same && api->allow_private;
            int64_t t = deadline - now_ms();
            if (t <= 0) {
                h.rc = CURLE_OPERATION_TIMEDOUT;
                break;
            }
            free(h.location);
            one_hop(e, &x, &r, url, creds, t, &h);
            if (!h.location)
                break;
            if (hops >= api->max_redirects) {
                th_sdk_log_call(call, TOOLHOST_LOG_WARN,
                                "api '%s': %s: redirect (HTTP %ld) refused "
                                "(max_redirects %ld)", api->name, b.shown.p,
                                h.status, api->max_redirects);
                rc = th_sdk_fail(call, "%s: the API redirected (HTTP %ld); "
                                       "redirects are refused past "
                                       "max_redirects (%ld)",
                                 b.shown.p, h.status, api->max_redirects);
                goto done;
            }
            free(url);
            url = h.location;
            h.location = NULL;
            if (h.status == 303 ||
                ((h.status == 301 || h.status == 302) &&
                 strcmp(r.method, "GET") && strcmp(r.method, "HEAD"))) {
                r.method = "GET";
                r.body = NULL;
            }
        }
        if (!url) {
            rc = th_sdk_fail(call, "out of memory");
            goto done;
        }
        if (attempt == tries || !transient(&h) || x.refused[0] ||
            call->host->is_cancelled(call))
            break;
        int64_t pause = 100ll << (attempt - 1 < 5 ? attempt - 1 : 5);
        if (now_ms() + pause >= deadline)
            break;
        th_sdk_log_call(call, TOOLHOST_LOG_INFO,
                        "api '%s': %s: try %ld failed (%s), retrying",
                        api->name, b.shown.p, attempt,
                        h.rc ? curl_easy_strerror(h.rc) : "HTTP 5xx");
        if (th_sdk_sleep_ms(call, pause) != 0)
            break;
    }
    if (attempt > tries)
        attempt = tries;
    char mt[256];
    media_type(e, h.rc, mt, sizeof mt);
    th_sdk_meta m;
    th_sdk_meta_init(&m);
    th_sdk_meta_int(&m, "http_status", h.status);
    th_sdk_meta_int(&m, "attempts", attempt);
    if (mt[0])
        th_sdk_meta_str(&m, "content_type", mt);
    th_sdk_meta_set(&m, call);
    th_sdk_meta_destroy(&m);
    if (h.rc != CURLE_OK) {
        rc = fail_hop(call, api, &b, &x, &h, budget);
        goto done;
    }
    if (h.status < 200 || h.status > 299) {
        char ex[EXCERPT + 1];
        excerpt(&x.body, ex, sizeof ex);
        /* ABI 1.5: 429 rate_limited, 502 and 503 unavailable, 504
         * backend_timeout (a Retry-After kept for the first two);
         * any other status is the API's answer: failed */
        int st = h.status == 429   ? TOOLHOST_RATE_LIMITED
                 : h.status == 502 ? TOOLHOST_UNAVAILABLE
                 : h.status == 503 ? TOOLHOST_UNAVAILABLE
                 : h.status == 504 ? TOOLHOST_TIMEOUT
                                   : TOOLHOST_FAILED;
        rc = th_sdk_fail_backend(call, st, h.retry_after_ms,
                                 "HTTP %ld from %s%s%s%s", h.status,
                                 b.shown.p, ex[0] ? ": " : "", ex,
                                 x.body.len > EXCERPT ? " [...]" : "");
        goto done;
    }
    if (op->structured) {
        json_error_t je;
        json_t *j = x.body.len ? json_loadb(x.body.p, x.body.len,
                                            JSON_DECODE_ANY, &je)
                               : NULL;
        json_decref(j);
        if (!j) {
            rc = th_sdk_fail(call, "HTTP %ld from %s: the answer is not "
                                   "JSON", h.status, b.shown.p);
            goto done;
        }
    }
    if (x.body.len && !op->structured && binary_kind(mt, &x.body)) {
        rc = binary_answer(call, &b, url, mt, &x.body);
        goto done;
    }
    if (x.body.len)
        rc = th_sdk_write(call, TOOLHOST_STDOUT, x.body.p, x.body.len);
    else
        rc = th_sdk_printf(call, "{\"status\": %ld}", h.status);
    rc = rc == 0 ? TOOLHOST_OK : TOOLHOST_FAILED;
done:
    handle_give(api, e, call->host);
    free(url);
    free(h.location);
    free(x.body.p);
    built_free(&b);
    return rc;
}
