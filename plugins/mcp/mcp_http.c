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
 * `headers:` (their ${NAME}s taken from the host's environment at load).
 * No GET stream is opened: the server's unsolicited messages are not
 * read; requests a server makes inside a call's stream are not answered.
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
    bool sse;
    char session[160];     /* Mcp-Session-Id seen, "" if none */
} http_rx;

static void dispatch(http_rx *rx, const char *text, size_t len)
{
    mcp_srv *s = rx->s;
    json_t *m = json_loadb(text, len, 0, NULL);
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
    for (;;) {
        char *end = NULL;
        size_t skip = 0;
        for (size_t i = start; i + 1 < rx->len; i++) {
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
            if (n >= 5 && !memcmp(r, "data:", 5)) {
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
    static const char sid[] = "mcp-session-id:", ct[] = "content-type:";
    if (len > sizeof sid - 1 && !strncasecmp(ptr, sid, sizeof sid - 1)) {
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

/* POSTs `msg`; the HTTP status, or -1 with why (a transport failure, a
 * budget, the call's end).  rx->answer holds the response to want_id. */
static long post(mcp_srv *s, json_t *msg, http_rx *rx, char *why, size_t ws)
{
    char *body = json_dumps(msg, JSON_COMPACT);
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    long status = -1;
    if (!body || !c) {
        snprintf(why, ws, "out of memory");
        goto out;
    }
    char line[256];
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, "Accept: application/json, text/event-stream");
    pthread_mutex_lock(&s->mu);
    if (s->session[0]) {
        snprintf(line, sizeof line, "Mcp-Session-Id: %s", s->session);
        h = curl_slist_append(h, line);
        h = curl_slist_append(h, "MCP-Protocol-Version: " MCPSRC_PROTOCOL);
    }
    pthread_mutex_unlock(&s->mu);
    for (struct curl_slist *e = s->headers; e; e = e->next)
        h = curl_slist_append(h, e->data);
    curl_easy_setopt(c, CURLOPT_URL, s->url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, rx);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, rx);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, rx);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)s->st->start_timeout_ms);
    char ebuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
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
    free(body);
    free(rx->buf);
    rx->buf = NULL;
    rx->len = rx->cap = 0;
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
                     rx.answer ? "" : " without a response");
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
    json_t *all = json_array();
    char *cursor = NULL;
    for (int page = 0; all && has_tools && page < 100; page++) {
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
        snprintf(why, ws, "HTTP status %ld without a response", st);
    return -1;
}

int mcpsrc_http_global(bool init)
{
    if (init)
        return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
    curl_global_cleanup();
    return 0;
}
