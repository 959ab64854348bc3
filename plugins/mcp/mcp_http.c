/* mcp_http.c - MCP servers over Streamable HTTP (a server with `url:`),
 * through libcurl.
 *
 * Each request is one POST of one JSON-RPC message, made by the thread
 * that needs the answer (the supervisor's handshake, or the call's own
 * worker): the answer is either one JSON message (application/json) or
 * an event stream (text/event-stream) whose events are read as they come
 * (progress for the call handed to the host at once: the worker owns the
 * call) until the response.  `Mcp-Session-Id` from initialize goes with
 * every later request, `MCP-Protocol-Version` too, and the server's
 * `headers:` (their ${NAME}s taken from the host's environment at load),
 * and with `oauth:` the token of mcp_oauth.c (a 401 fetches a new one
 * and the request goes again, once).  Requests a server makes inside a
 * call's stream are not answered.
 *
 * The GET stream (mcpsrc_http_listen): the supervisor's thread, while
 * the session is up, reads the server's own messages through libcurl's
 * multi interface (so stop and mark_down wake it at once through
 * curl_multi_wakeup, s->get_multi set and woken under s->mu); a
 * list_changed there re-lists the tools in that same thread.
 *
 * Budgets: one message (an event or the body) at most max_message bytes,
 * else the transfer ends and that call fails (logged); the call's
 * deadline and the server's `timeout` abort the transfer (libcurl's
 * progress callback, every second at least, sooner on data) and send
 * notifications/cancelled.  A transport failure or a 404 (the session is
 * gone) marks the server down: the supervisor starts a new session after
 * the back-off, and its tools answer 'unavailable' meanwhile. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "mcpsrc.h"
#include "toolhost/sdk.h"

typedef struct http_rx {
    mcp_srv *s;
    int64_t want_id;
    json_t *answer;        /* the response to want_id, owned */
    toolhost_call *call;   /* progress goes there (NULL: none) */
    int64_t deadline;      /* monotonic ms, -1: none */
    bool cancelled, timed_out, too_big;
    uint64_t n_progress;
    char *buf;             /* bytes not parsed yet */
    size_t len, cap;
    size_t scanned;        /* buf[0, scanned) was searched for an event's
                              end already (parse_sse) */
    bool sse;
    char session[160];     /* Mcp-Session-Id seen, "" if none */
    char rm[512];          /* a 401's resource_metadata URL, "" if none */
    bool listen;           /* the GET stream: list_changed is noted */
    bool relist;           /* it said notifications/tools/list_changed */
    char last_id[128];     /* the last event id ("" none) */
    bool auth_failed;      /* no OAuth token could be had (why says) */
    bool unsent;           /* the call ended while its token was fetched:
                              the server never took the request */
} http_rx;

static void dispatch(http_rx *rx, const char *text, size_t len)
{
    mcp_srv *s = rx->s;
    json_t *m = json_loadb(text, len, JSON_ALLOW_NUL, NULL); /* as on_line */
    if (!json_is_object(m)) {
        if (__atomic_add_fetch(&s->n_bad_json, 1, __ATOMIC_RELAXED) == 1)
            th_sdk_log(s->st->host, TOOLHOST_LOG_WARN,
                       "server '%s' sent a message that is not a JSON-RPC "
                       "object: dropped (logged once)",
                       s->name);
        json_decref(m);
        return;
    }
    const json_t *id = json_object_get(m, "id");
    const char *method = json_string_value(json_object_get(m, "method"));
    if (!method && json_is_integer(id) &&
        json_integer_value(id) == rx->want_id && !rx->answer) {
        rx->answer = m;
        return;
    }
    if (method && rx->listen &&
        !strcmp(method, "notifications/tools/list_changed")) {
        rx->relist = true;
        json_decref(m);
        return;
    }
    if (method && !strcmp(method, "notifications/progress") && rx->call) {
        const json_t *pa = json_object_get(m, "params");
        const json_t *tok = json_object_get(pa, "progressToken");
        if (json_is_integer(tok) && json_integer_value(tok) == rx->want_id) {
            const json_t *pr = json_object_get(pa, "progress");
            const json_t *tt = json_object_get(pa, "total");
            double v = json_is_number(pr) ? json_number_value(pr) : 0;
            double t = json_is_number(tt) ? json_number_value(tt) : -1;
            rx->n_progress++;
            rx->call->host->progress(
                rx->call, t > 0 && v >= 0 && v <= t ? v / t : -1,
                json_string_value(json_object_get(pa, "message")), NULL, 0);
        }
    }
    json_decref(m);
}

/* Events of an event stream: "data:" lines joined, an empty line ends one. */
static void parse_sse(http_rx *rx)
{
    size_t start = 0;
    /* Resume the search where the last one stopped (less the 3 bytes an
     * end split across reads may begin in): scanning the whole pending
     * event again after each read made one event of max_message bytes,
     * sent in small writes, cost its size squared in compares. */
    size_t from = rx->scanned > 3 ? rx->scanned - 3 : 0;
    for (;;) {
        char *end = NULL;
        size_t skip = 0;
        for (size_t i = start > from ? start : from; i + 1 < rx->len; i++) {
            if (rx->buf[i] == '\n' && rx->buf[i + 1] == '\n') {
                end = rx->buf + i;
                skip = 2;
                break;
            }
            if (i + 3 < rx->len && !memcmp(rx->buf + i, "\r\n\r\n", 4)) {
                end = rx->buf + i;
                skip = 4;
                break;
            }
        }
        if (!end)
            break;
        /* the event rx->buf[start, end): gather its data lines in place */
        char *w = rx->buf + start, *r = rx->buf + start;
        char *data = w;
        bool any = false;
        while (r < end) {
            char *nl = memchr(r, '\n', (size_t)(end - r));
            char *le = nl ? nl : end;
            size_t n = (size_t)(le - r);
            if (n && r[n - 1] == '\r')
                n--;
            if (n >= 3 && !memcmp(r, "id:", 3)) {
                size_t off = (n > 3 && r[3] == ' ') ? 4 : 3;
                bool ok = n - off < sizeof rx->last_id;
                for (size_t i = off; ok && i < n; i++)
                    ok = r[i] > 0x20 && r[i] < 0x7f;
                if (ok) {
                    memcpy(rx->last_id, r + off, n - off);
                    rx->last_id[n - off] = '\0';
                }
            } else if (n >= 5 && !memcmp(r, "data:", 5)) {
                size_t off = (n > 5 && r[5] == ' ') ? 6 : 5;
                if (any)
                    *w++ = '\n';
                memmove(w, r + off, n - off);
                w += n - off;
                any = true;
            }
            r = nl ? nl + 1 : end;
        }
        if (any)
            dispatch(rx, data, (size_t)(w - data));
        start = (size_t)(end - rx->buf) + skip;
    }
    rx->scanned = rx->len - start; /* no end in what is left */
    if (start) {
        memmove(rx->buf, rx->buf + start, rx->len - start);
        rx->len -= start;
    }
}

static size_t on_body(char *ptr, size_t size, size_t n, void *ud)
{
    http_rx *rx = ud;
    size_t bytes = size * n;
    size_t max = (size_t)rx->s->st->max_message;
    if (rx->len + bytes > max) {
        rx->too_big = true;
        return 0; /* libcurl: a write error ends the transfer */
    }
    if (rx->len + bytes + 1 > rx->cap) {
        size_t cap = rx->cap ? rx->cap * 2 : 16384;
        while (cap < rx->len + bytes + 1)
            cap *= 2;
        char *b = realloc(rx->buf, cap);
        if (!b)
            return 0;
        rx->buf = b;
        rx->cap = cap;
    }
    memcpy(rx->buf + rx->len, ptr, bytes);
    rx->len += bytes;
    if (rx->sse)
        parse_sse(rx);
    return bytes;
}

static size_t on_header(char *ptr, size_t size, size_t n, void *ud)
{
    http_rx *rx = ud;
    size_t len = size * n;
    static const char sid[] = "mcp-session-id:", ct[] = "content-type:",
                      wa[] = "www-authenticate:";
    if (len > sizeof wa - 1 && !strncasecmp(ptr, wa, sizeof wa - 1)) {
        /* resource_metadata="URL" (RFC 9728 5.1) */
        const char *p = memmem(ptr, len, "resource_metadata=\"", 19);
        const char *e = p ? memchr(p + 19, '"', len - (size_t)(p + 19 - ptr))
                          : NULL;
        if (e && (size_t)(e - p - 19) < sizeof rx->rm) {
            memcpy(rx->rm, p + 19, (size_t)(e - p - 19));
            rx->rm[e - p - 19] = '\0';
        }
    } else if (len > sizeof sid - 1 && !strncasecmp(ptr, sid, sizeof sid - 1)) {
        const char *v = ptr + sizeof sid - 1;
        size_t vl = len - (sizeof sid - 1);
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' ||
                      v[vl - 1] == ' '))
            vl--;
        if (vl < sizeof rx->session) {
            memcpy(rx->session, v, vl);
            rx->session[vl] = '\0';
        }
    } else if (len > sizeof ct - 1 && !strncasecmp(ptr, ct, sizeof ct - 1)) {
        rx->sse = memmem(ptr, len, "text/event-stream", 17) != NULL;
    }
    return len;
}

static int on_xfer(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut,
                   curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    http_rx *rx = ud;
    if (rx->call && th_sdk_cancelled(rx->call)) {
        rx->cancelled = true;
        return 1;
    }
    if (rx->deadline >= 0 && mcpsrc_now_ms() >= rx->deadline) {
        rx->timed_out = true;
        return 1;
    }
    return 0;
}

/* The request's headers: Content-Type for a POST, `accept`, the
 * session's, the server's `headers:`, the OAuth token line `auth` and
 * `extra` (NULL: none). */
static struct curl_slist *headers_for(mcp_srv *s, bool post_,
                                      const char *accept, const char *auth,
                                      const char *extra)
{
    char line[256];
    struct curl_slist *h = NULL;
    if (post_)
        h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, accept);
    pthread_mutex_lock(&s->mu);
    if (s->session[0]) {
        snprintf(line, sizeof line, "Mcp-Session-Id: %s", s->session);
        h = curl_slist_append(h, line);
        h = curl_slist_append(h, "MCP-Protocol-Version: " MCPSRC_PROTOCOL);
    }
    pthread_mutex_unlock(&s->mu);
    for (struct curl_slist *e = s->headers; e; e = e->next)
        h = curl_slist_append(h, e->data);
    if (auth)
        h = curl_slist_append(h, auth);
    if (extra)
        h = curl_slist_append(h, extra);
    return h;
}

/* The answer of a try that got 401 is forgotten before the next. */
static void rx_reset(http_rx *rx)
{
    json_decref(rx->answer);
    rx->answer = NULL;
    rx->len = 0;
    rx->scanned = 0;
    rx->sse = false;
}

/* What every request to server s sets: its URL, the answer into rx (body
 * and headers), http and https only, no redirect followed, no signals,
 * the connect timeout of a start, curl's error text into ebuf. */
static void easy_common(CURL *c, mcp_srv *s, http_rx *rx, char *ebuf)
{
    curl_easy_setopt(c, CURLOPT_URL, s->url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, rx);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, rx);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)s->st->start_timeout_ms);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
}

/* The token line for a request of rx (its call's life bounds the wait):
 * true, or false with rx flagged (no token, or the call ended: a 401, or
 * no request, so the server never took it). */
static bool auth_for(mcp_srv *s, http_rx *rx, bool refused, uint64_t *gen,
                     const char *rm, char **auth, char *why, size_t ws)
{
    int rc = mcpsrc_oauth_auth(s, refused, gen, rm, rx->call, rx->deadline,
                               auth, why, ws);
    rx->cancelled = rc == MCPSRC_OAUTH_CANCELLED;
    rx->timed_out = rc == MCPSRC_OAUTH_TIMEDOUT;
    rx->unsent = rx->cancelled || rx->timed_out;
    rx->auth_failed = rc != 0 && !rx->unsent;
    return rc == 0;
}

/* POSTs `msg`; the HTTP status, or -1 with why (a transport failure, a
 * budget, the call's end, no OAuth token).  rx->answer holds the
 * response to want_id.  With oauth: a 401 fetches a new token and the
 * request is sent again, once. */
static long post(mcp_srv *s, json_t *msg, http_rx *rx, char *why, size_t ws)
{
    char *body = json_dumps(msg, JSON_COMPACT);
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    char *auth = NULL;
    uint64_t gen = 0;
    long status = -1;
    if (!body || !c) {
        snprintf(why, ws, "out of memory");
        goto out;
    }
    if (s->oauth && !auth_for(s, rx, false, &gen, NULL, &auth, why, ws))
        goto out;
    char ebuf[CURL_ERROR_SIZE] = "";
    easy_common(c, s, rx, ebuf);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, rx);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    for (int attempt = 0;; attempt++) {
        h = headers_for(s, true,
                        "Accept: application/json, text/event-stream", auth,
                        NULL);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        CURLcode rc = curl_easy_perform(c);
        if (rc != CURLE_OK) {
            snprintf(why, ws, "%s",
                     rx->too_big     ? "sent a message over max_message"
                     : rx->cancelled ? "cancelled"
                     : rx->timed_out ? "did not answer in time"
                     : ebuf[0]       ? ebuf
                                     : curl_easy_strerror(rc));
            goto out;
        }
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        if (status != 401 || !s->oauth || attempt > 0)
            break;
        /* the token (or its absence) refused: a new one, then once more */
        th_sdk_log(s->st->host, TOOLHOST_LOG_DEBUG,
                   "server '%s' answered 401 to a request %s: fetching a "
                   "token", s->name, auth ? "with a token" : "without one");
        rx_reset(rx);
        curl_slist_free_all(h);
        h = NULL;
        free(auth);
        auth = NULL;
        if (!auth_for(s, rx, true, &gen, rx->rm, &auth, why, ws)) {
            status = -1;
            goto out;
        }
        status = -1;
    }
    if (!rx->sse && rx->len)
        dispatch(rx, rx->buf, rx->len);
    else if (rx->sse && rx->len) {
        /* a stream that ends without an empty line: its last event */
        char *b = realloc(rx->buf, rx->len + 3);
        if (b) {
            rx->buf = b;
            rx->cap = rx->len + 3;
            memcpy(b + rx->len, "\n\n", 2);
            rx->len += 2;
            parse_sse(rx);
        }
    }
out:
    curl_slist_free_all(h);
    if (c)
        curl_easy_cleanup(c);
    free(auth);
    free(body);
    free(rx->buf);
    rx->buf = NULL;
    rx->len = rx->cap = rx->scanned = 0;
    return status;
}

/* The server cannot be reached or its session is gone: its supervisor
 * starts again (after the back-off). */
static void mark_down(mcp_srv *s, const char *why)
{
    pthread_mutex_lock(&s->mu);
    if (!s->http_down) {
        s->http_down = true;
        snprintf(s->why, sizeof s->why, "%.200s", why);
        pthread_cond_broadcast(&s->cv);
        mcpsrc_http_wake(s);
    }
    pthread_mutex_unlock(&s->mu);
}

/* One request of the handshake: 0 with *res (the result), or -1. */
static int hs_request(mcp_srv *s, const char *method, json_t *params,
                      json_t **res, char *why, size_t ws)
{
    pthread_mutex_lock(&s->mu);
    int64_t id = s->next_id++;
    pthread_mutex_unlock(&s->mu);
    json_t *msg = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id",
                            (json_int_t)id, "method", method, "params",
                            params ? params : json_object());
    http_rx rx = {.s = s, .want_id = id,
                  .deadline = mcpsrc_now_ms() + s->st->start_timeout_ms};
    char w[200] = "";
    long st = msg ? post(s, msg, &rx, w, sizeof w) : -1;
    json_decref(msg);
    *res = NULL;
    if (st < 0 || st != 200 || !rx.answer) {
        if (st >= 0)
            snprintf(w, sizeof w, "HTTP status %ld%s", st,
                     st == 401 && s->oauth
                         ? " (the server refused a fresh OAuth token too)"
                     : rx.answer ? ""
                                 : " without a response");
        snprintf(why, ws, "%s: %s", method, w);
        json_decref(rx.answer);
        return -1;
    }
    if (!strcmp(method, "initialize")) {
        pthread_mutex_lock(&s->mu);
        snprintf(s->session, sizeof s->session, "%s", rx.session);
        pthread_mutex_unlock(&s->mu);
    }
    json_t *r = json_object_get(rx.answer, "result");
    if (!json_is_object(r)) {
        const char *em = json_string_value(
            json_object_get(json_object_get(rx.answer, "error"), "message"));
        snprintf(why, ws, "%s: answered with an error: %.200s", method,
                 em ? em : "(no message)");
        json_decref(rx.answer);
        return -1;
    }
    *res = json_incref(r);
    json_decref(rx.answer);
    return 0;
}

int mcpsrc_http_handshake(mcp_srv *s, json_t **tools, char *why, size_t ws)
{
    json_t *res;
    pthread_mutex_lock(&s->mu);
    s->session[0] = '\0';
    pthread_mutex_unlock(&s->mu);
    json_t *params = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion",
                               MCPSRC_PROTOCOL, "capabilities", "clientInfo",
                               "name", "toolhost", "version", "0.1.0");
    if (hs_request(s, "initialize", params, &res, why, ws) != 0)
        return -1;
    bool has_tools = json_object_get(json_object_get(res, "capabilities"),
                                     "tools") != NULL;
    json_decref(res);
    json_t *note = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method",
                             "notifications/initialized");
    http_rx rx = {.s = s, .want_id = -1,
                  .deadline = mcpsrc_now_ms() + s->st->start_timeout_ms};
    char w[200] = "";
    long st = note ? post(s, note, &rx, w, sizeof w) : -1;
    json_decref(note);
    json_decref(rx.answer);
    if (st != 202 && st != 200) {
        snprintf(why, ws, "notifications/initialized: %s",
                 st < 0 ? w : "refused");
        return -1;
    }
    return has_tools ? mcpsrc_http_list(s, tools, why, ws)
                     : (*tools = json_array()) ? 0 : -1;
}

int mcpsrc_http_list(mcp_srv *s, json_t **tools, char *why, size_t ws)
{
    json_t *res;
    json_t *all = json_array();
    char *cursor = NULL;
    for (int page = 0; all && page < 100; page++) {
        json_t *p = cursor ? json_pack("{s:s}", "cursor", cursor)
                           : json_object();
        free(cursor);
        cursor = NULL;
        if (hs_request(s, "tools/list", p, &res, why, ws) != 0) {
            json_decref(all);
            return -1;
        }
        const json_t *list = json_object_get(res, "tools");
        size_t i;
        json_t *t;
        json_array_foreach(list, i, t) if (json_is_object(t) &&
                                           json_array_size(all) < 4096)
            json_array_append(all, t);
        const char *next = json_string_value(json_object_get(res,
                                                             "nextCursor"));
        if (next && next[0])
            cursor = strdup(next);
        json_decref(res);
        if (!cursor)
            break;
    }
    free(cursor);
    if (!all) {
        snprintf(why, ws, "out of memory");
        return -1;
    }
    *tools = all;
    return 0;
}

int mcpsrc_http_call(mcp_srv *s, const char *remote, toolhost_call *call,
                     int64_t id, json_t *args, int64_t deadline,
                     json_t **answer, uint64_t *n_progress,
                     const char **error, char *why, size_t ws)
{
    json_t *msg = json_pack("{s:s, s:I, s:s, s:{s:s, s:O, s:{s:I}}}",
                            "jsonrpc", "2.0", "id", (json_int_t)id,
                            "method", "tools/call", "params", "name",
                            remote, "arguments", args, "_meta",
                            "progressToken", (json_int_t)id);
    http_rx rx = {.s = s, .want_id = id, .call = call, .deadline = deadline};
    long st = msg ? post(s, msg, &rx, why, ws) : -1;
    json_decref(msg);
    *answer = rx.answer;
    *n_progress = rx.n_progress;
    if (rx.answer && st == 200)
        return 0;
    if (rx.unsent) {
        *error = rx.cancelled ? "cancelled" : "token_timeout";
        return -1;
    }
    if (rx.cancelled || rx.timed_out) {
        *error = rx.cancelled ? "cancelled" : "timeout";
        json_t *n = json_pack("{s:s, s:s, s:{s:I, s:s}}", "jsonrpc", "2.0",
                              "method", "notifications/cancelled", "params",
                              "requestId", (json_int_t)id, "reason",
                              rx.cancelled ? "cancelled by the caller"
                                           : "timed out");
        http_rx nrx = {.s = s, .want_id = -1,
                       .deadline = mcpsrc_now_ms() + 2000};
        char w[200];
        if (n)
            post(s, n, &nrx, w, sizeof w);
        json_decref(n);
        json_decref(nrx.answer);
        return -1;
    }
    if (rx.too_big) { /* this answer only: the session is fine */
        snprintf(why, ws, "sent a message over max_message (%lld bytes)",
                 (long long)s->st->max_message);
        th_sdk_log_call(call, TOOLHOST_LOG_WARN, "server '%s' %s: the call "
                        "fails", s->name, why);
        *error = "server_error";
        return -1;
    }
    if (rx.auth_failed) { /* the session is fine; no token now */
        *error = "server_error";
        return -1;
    }
    if (st < 0 || st == 404) {
        char down[300];
        if (st == 404)
            snprintf(why, ws, "its session is gone (HTTP 404)");
        snprintf(down, sizeof down, "could not be reached: %s", why);
        *error = "server_exited";
        mark_down(s, down);
        return -1;
    }
    *error = "server_error";
    if (!rx.answer)
        snprintf(why, ws, "HTTP status %ld without a response%s", st,
                 st == 401 && s->oauth
                     ? " (the server refused a fresh OAuth token too)"
                     : "");
    return -1;
}

/* ---- the GET stream -------------------------------------------------------- */

void mcpsrc_http_wake(mcp_srv *s)
{
    if (s->get_multi)
        curl_multi_wakeup(s->get_multi);
}

static bool listen_over(mcp_srv *s)
{
    pthread_mutex_lock(&s->mu);
    bool over = s->stop || s->http_down;
    pthread_mutex_unlock(&s->mu);
    return over;
}

/* Waits up to ms for stop or http_down: true when one came. */
static bool listen_wait(mcp_srv *s, int64_t ms)
{
    int64_t end = ms < 0 ? -1 : mcpsrc_now_ms() + ms;
    pthread_mutex_lock(&s->mu);
    while (!s->stop && !s->http_down) {
        if (end < 0) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        int64_t left = end - mcpsrc_now_ms();
        if (left <= 0)
            break;
        struct timespec ts; /* s->cv runs on CLOCK_MONOTONIC */
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += left / 1000;
        ts.tv_nsec += (left % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    bool over = s->stop || s->http_down;
    pthread_mutex_unlock(&s->mu);
    return over;
}

/* One GET stream until it ends, stop or http_down: its HTTP status (-1:
 * a transport failure, why says).  Each list_changed calls relist(). */
static long listen_once(mcp_srv *s, http_rx *rx, const char *auth,
                        void (*relist)(mcp_srv *), char *why, size_t ws)
{
    CURL *c = curl_easy_init();
    CURLM *m = curl_multi_init();
    char last[160] = "";
    if (rx->last_id[0])
        snprintf(last, sizeof last, "Last-Event-ID: %s", rx->last_id);
    struct curl_slist *h = headers_for(s, false, "Accept: text/event-stream",
                                       auth, last[0] ? last : NULL);
    long status = -1;
    if (!c || !m) {
        snprintf(why, ws, "out of memory");
        goto out;
    }
    char ebuf[CURL_ERROR_SIZE] = "";
    easy_common(c, s, rx, ebuf);
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_multi_add_handle(m, c);
    pthread_mutex_lock(&s->mu);
    s->get_multi = m;
    pthread_mutex_unlock(&s->mu);
    CURLcode res = CURLE_OK;
    bool done = false;
    while (!done && !listen_over(s)) {
        int running = 0;
        if (curl_multi_perform(m, &running) != CURLM_OK)
            break;
        int q;
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(m, &q)))
            if (msg->msg == CURLMSG_DONE) {
                res = msg->data.result;
                done = true;
            }
        if (rx->relist) {
            rx->relist = false;
            relist(s);
        }
        if (!done && !running)
            done = true;
        if (!done)
            curl_multi_poll(m, NULL, 0, 1000, NULL);
    }
    pthread_mutex_lock(&s->mu);
    s->get_multi = NULL;
    pthread_mutex_unlock(&s->mu);
    if (done && res == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    else if (done)
        snprintf(why, ws, "%s",
                 rx->too_big ? "an event over max_message"
                 : ebuf[0]   ? ebuf
                             : curl_easy_strerror(res));
    else
        snprintf(why, ws, "closed");
    curl_multi_remove_handle(m, c);
out:
    curl_slist_free_all(h);
    if (c)
        curl_easy_cleanup(c);
    if (m)
        curl_multi_cleanup(m);
    free(rx->buf);
    rx->buf = NULL;
    rx->len = rx->cap = rx->scanned = 0;
    return status;
}

void mcpsrc_http_listen(mcp_srv *s, void (*relist)(mcp_srv *s))
{
    const toolhost_host_api *host = s->st->host;
    int64_t delay = s->st->restart_initial_ms;
    char *auth = NULL;
    uint64_t gen = 0;
    bool refused = false;
    char rm[512] = "", last_id[128] = "";
    while (!listen_over(s)) {
        char why[256] = "";
        free(auth);
        auth = NULL;
        if (s->oauth && mcpsrc_oauth_auth(s, refused, &gen, rm, NULL, -1,
                                          &auth, why, sizeof why) != 0) {
            /* logged by mcp_oauth.c; the next try after the back-off */
            if (listen_wait(s, delay))
                break;
            delay = delay * 2 < s->st->restart_max_ms ? delay * 2
                                                      : s->st->restart_max_ms;
            continue;
        }
        http_rx rx = {.s = s, .want_id = -1, .deadline = -1, .listen = true};
        snprintf(rx.last_id, sizeof rx.last_id, "%s", last_id);
        int64_t t0 = mcpsrc_now_ms();
        long st = listen_once(s, &rx, auth, relist, why, sizeof why);
        snprintf(last_id, sizeof last_id, "%s", rx.last_id);
        json_decref(rx.answer);
        if (listen_over(s))
            break;
        refused = st == 401 && s->oauth && !refused;
        if (refused) {
            snprintf(rm, sizeof rm, "%s", rx.rm);
            continue; /* a new token, at once, once */
        }
        if (st == 405) {
            th_sdk_log(host, TOOLHOST_LOG_INFO,
                       "server '%s' offers no GET stream (HTTP 405): its "
                       "list_changed is not seen (a reload of the config "
                       "lists its tools again)",
                       s->name);
            listen_wait(s, -1);
            break;
        }
        if (st == 404) {
            mark_down(s, "its session is gone (HTTP 404 on the GET stream)");
            break;
        }
        /* it worked for a while: from the start again.  Events alone do
         * not say so: a stream that gives one and drops, again and again,
         * backs off as any other */
        if (mcpsrc_now_ms() - t0 > s->st->restart_max_ms)
            delay = s->st->restart_initial_ms;
        if (st >= 0)
            snprintf(why, sizeof why, "HTTP status %ld", st);
        th_sdk_log(host, TOOLHOST_LOG_INFO,
                   "server '%s': its GET stream ended (%s): again in %lldms%s",
                   s->name, why, (long long)delay,
                   last_id[0] ? " (from its last event id)" : "");
        if (listen_wait(s, delay))
            break;
        delay = delay * 2 < s->st->restart_max_ms ? delay * 2
                                                  : s->st->restart_max_ms;
    }
    free(auth);
}

int mcpsrc_http_global(bool init)
{
    if (init)
        return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
    curl_global_cleanup();
    return 0;
}
