/* mcp_call.c - one call of an imported tool: a tools/call to its server,
 * the answer mapped back onto the toolhost result.
 *
 * execute() takes a slot of the server (waiting, on its worker, while
 * max_concurrency calls are in flight), then for a stdio server suspends
 * the call (ABI suspend()) and hands it to the server's reader thread
 * (mcp_server.c) before it writes the tools/call line with a progress
 * token: the worker is free at once.  The reader owns the call from then
 * on: it hands progress on, ends the call with the server's answer, or
 * ends it when the on_cancel hook flags it (cancelled, or past the call's
 * deadline), when the server's timeout passes (both also send
 * notifications/cancelled), or when the server goes away
 * (mcpsrc_call_finish()).  A server with url: is called from the worker
 * itself, which waits (mcp_http.c).
 *
 * The result: JSON-RPC error -> a tool failure with the server's message;
 * isError -> a tool failure with the text of its content; else the content
 * blocks in order (the first, when it is text and the tool has no output
 * schema, as stdout; the others through write_block(): text, image,
 * audio, embedded resource, resource link) and, for a tool imported with
 * its output schema, structuredContent as the structured stdout the host
 * checks.  Meta: server, server_pid, request_id, duration_ms, progress
 * and error (unavailable, timeout, server_error, server_exited).  A
 * server that is down or went away ends the call TOOLHOST_UNAVAILABLE
 * (retry-after: the time to its next restart, when known), one that did
 * not answer within its timeout TOOLHOST_TIMEOUT (ABI 1.5). */
#include <errno.h>
#include <nettle/base64.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../shared/mp_json.h"
#include "mcpsrc.h"
#include "toolhost/sdk.h"

#define POLL_SLICE_MS 50 /* without an on_cancel hook */

static void wait_slice(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(cv, mu, &ts);
}

/* The packer's sink for meta_put(): a buffer on the caller's stack,
 * moved to the heap only when a long server name overflows it. */
typedef struct {
    char *data;
    size_t len, cap;
    bool heap, oom;
} meta_buf;

static int meta_write(void *ud, const char *buf, size_t n)
{
    meta_buf *b = ud;
    if (b->oom)
        return -1;
    if (n > b->cap - b->len) {
        size_t cap = b->cap * 2 + n;
        char *d = b->heap ? realloc(b->data, cap) : malloc(cap);
        if (!d) {
            b->oom = true;
            return -1;
        }
        if (!b->heap)
            memcpy(d, b->data, b->len);
        b->data = d;
        b->cap = cap;
        b->heap = true;
    }
    memcpy(b->data + b->len, buf, n);
    b->len += n;
    return 0;
}

/* a key of meta_put(): a string literal, its length known */
#define META_KEY(pk, lit)                                                     \
    msgpack_pack_str_with_body((pk), (lit), sizeof(lit) - 1)

/* The call's meta: the map th_sdk_meta would build (same keys, order and
 * packing), packed at once into a stack buffer: no allocation per call. */
static void meta_put(toolhost_call *call, mcp_srv *s, pid_t pid,
                     int64_t id, int64_t t0, uint64_t n_progress,
                     const char *error)
{
    char stack[256];
    meta_buf b = {.data = stack, .cap = sizeof stack};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, meta_write);
    /* the answer was read by the thread that sent the call (busy
     * polling), not by the reader: said only when so */
    bool polled = mcpsrc_busy_polling == s;
    msgpack_pack_map(&pk, 3 + (pid > 0) + (id > 0) + (error != NULL) +
                              polled);
    META_KEY(&pk, "server");
    msgpack_pack_str_with_body(&pk, s->name, strlen(s->name));
    if (pid > 0) {
        META_KEY(&pk, "server_pid");
        msgpack_pack_int64(&pk, pid);
    }
    if (id > 0) {
        META_KEY(&pk, "request_id");
        msgpack_pack_int64(&pk, id);
    }
    META_KEY(&pk, "duration_ms");
    msgpack_pack_int64(&pk, mcpsrc_now_ms() - t0);
    META_KEY(&pk, "progress_updates");
    msgpack_pack_int64(&pk, (int64_t)n_progress);
    if (error) {
        META_KEY(&pk, "error");
        msgpack_pack_str_with_body(&pk, error, strlen(error));
    }
    if (polled) {
        META_KEY(&pk, "busy_polled");
        msgpack_pack_true(&pk);
    }
    if (!b.oom)
        call->host->set_meta(call, (const uint8_t *)b.data, b.len);
    if (b.heap)
        free(b.data);
}

/* base64 text to bytes (malloc()ed, *n bytes); NULL when not base64. */
static uint8_t *unbase64(const char *text, size_t len, size_t *n)
{
    uint8_t *out = malloc(BASE64_DECODE_LENGTH(len) + 1);
    if (!out)
        return NULL;
    struct base64_decode_ctx ctx;
    base64_decode_init(&ctx);
    size_t done = 0;
    if (!base64_decode_update(&ctx, &done, out, len, text) ||
        !base64_decode_final(&ctx)) {
        free(out);
        return NULL;
    }
    *n = done;
    return out;
}

/* One content block of the result through write_block(); 0, or a note
 * of why it was not carried in `why`. */
static int put_block(toolhost_call *call, const json_t *b, char *why,
                     size_t ws)
{
    const char *type = json_string_value(json_object_get(b, "type"));
    toolhost_block blk;
    memset(&blk, 0, sizeof blk);
    blk.struct_size = sizeof blk;
    uint8_t *bytes = NULL;
    if (!type) {
        snprintf(why, ws, "a content block without a type");
        return -1;
    }
    if (strcmp(type, "text") == 0) {
        const json_t *t = json_object_get(b, "text");
        if (!json_is_string(t)) {
            snprintf(why, ws, "a text block without text");
            return -1;
        }
        blk.kind = TOOLHOST_BLOCK_TEXT;
        blk.data = json_string_value(t);
        blk.len = json_string_length(t);
    } else if (strcmp(type, "image") == 0 || strcmp(type, "audio") == 0) {
        const json_t *d = json_object_get(b, "data");
        blk.kind = type[0] == 'i' ? TOOLHOST_BLOCK_IMAGE : TOOLHOST_BLOCK_AUDIO;
        blk.mime_type = json_string_value(json_object_get(b, "mimeType"));
        size_t n = 0;
        if (!json_is_string(d) ||
            !(bytes = unbase64(json_string_value(d), json_string_length(d),
                               &n))) {
            snprintf(why, ws, "an %s block whose data is not base64", type);
            return -1;
        }
        blk.data = bytes;
        blk.len = n;
    } else if (strcmp(type, "resource_link") == 0) {
        blk.kind = TOOLHOST_BLOCK_LINK;
        blk.uri = json_string_value(json_object_get(b, "uri"));
        blk.name = json_string_value(json_object_get(b, "name"));
        blk.mime_type = json_string_value(json_object_get(b, "mimeType"));
    } else if (strcmp(type, "resource") == 0) {
        const json_t *r = json_object_get(b, "resource");
        const json_t *text = json_object_get(r, "text");
        const json_t *blob = json_object_get(r, "blob");
        blk.kind = TOOLHOST_BLOCK_RESOURCE;
        blk.uri = json_string_value(json_object_get(r, "uri"));
        blk.mime_type = json_string_value(json_object_get(r, "mimeType"));
        if (json_is_string(text)) {
            blk.data = json_string_value(text);
            blk.len = json_string_length(text);
            if (!blk.mime_type)
                blk.mime_type = "text/plain";
        } else {
            size_t n = 0;
            if (!json_is_string(blob) ||
                !(bytes = unbase64(json_string_value(blob),
                                   json_string_length(blob), &n))) {
                snprintf(why, ws,
                         "an embedded resource with neither text nor a "
                         "base64 blob");
                return -1;
            }
            blk.data = bytes;
            blk.len = n;
        }
    } else {
        snprintf(why, ws, "a content block of type '%.40s', which toolhost "
                 "does not know", type);
        return -1;
    }
    int rc = call->host->write_block(call, &blk);
    free(bytes);
    if (rc != 0) {
        snprintf(why, ws, "a %s block refused by the host (%s)", type,
                 th_sdk_strerror(rc));
        return -1;
    }
    return 0;
}

/* The log line of content blocks not carried (the first one's why). */
static void log_refused(toolhost_call *call, const mcp_tool *mt,
                        size_t refused, const char *why)
{
    if (refused)
        th_sdk_log_call(call, TOOLHOST_LOG_WARN,
                        "server '%s': %zu content block%s of the result of "
                        "'%s' not carried; the first: %s",
                        mt->srv->name, refused, refused == 1 ? "" : "s",
                        mt->remote, why);
}

/* map_result() of an answer of text blocks only (mcp_answer.c) for a
 * tool without an output schema: the first text as stdout, the others
 * as TEXT blocks. */
static int map_texts(toolhost_call *call, const mcp_tool *mt,
                     const mcpsrc_fast_answer *a)
{
    size_t refused = 0;
    char why[160] = "";
    for (size_t i = 0; i < a->n; i++) {
        const char *t = a->buf + a->off[i];
        if (i == 0) {
            th_sdk_write(call, TOOLHOST_STDOUT, t, a->len[i]);
            continue;
        }
        toolhost_block blk = {.struct_size = sizeof blk,
                              .kind = TOOLHOST_BLOCK_TEXT,
                              .data = t,
                              .len = a->len[i]};
        int rc = call->host->write_block(call, &blk);
        if (rc != 0 && refused++ == 0)
            snprintf(why, sizeof why, "a text block refused by the host (%s)",
                     th_sdk_strerror(rc));
    }
    log_refused(call, mt, refused, why);
    return TOOLHOST_OK;
}

/* Maps a tools/call answer onto the call. */
static int map_result(toolhost_call *call, const toolhost_tool *tool,
                      const mcp_tool *mt, const json_t *msg)
{
    mcp_srv *s = mt->srv;
    const json_t *e = json_object_get(msg, "error");
    const json_t *r = json_object_get(msg, "result");
    if (e || !json_is_object(r)) {
        const char *m = json_string_value(json_object_get(e, "message"));
        const json_t *code = json_object_get(e, "code");
        return th_sdk_fail(call, "mcp: server '%s' refused the call of "
                           "'%s'%s%.2000s (JSON-RPC error %lld)",
                           s->name, mt->remote, m ? ": " : "",
                           m ? m : "",
                           (long long)(json_is_integer(code)
                                           ? json_integer_value(code)
                                           : 0));
    }
    const json_t *content = json_object_get(r, "content");
    size_t i;
    const json_t *b;
    if (json_is_true(json_object_get(r, "isError"))) {
        size_t n = 0;
        json_array_foreach(content, i, b)
        {
            const json_t *t = json_object_get(b, "text");
            if (json_is_string(t)) {
                th_sdk_write(call, TOOLHOST_STDERR, json_string_value(t),
                             json_string_length(t));
                n++;
            }
        }
        if (!n)
            th_sdk_eprintf(call, "mcp: %s failed on server '%s' without "
                           "saying why", mt->remote, s->name);
        (void)tool;
        return TOOLHOST_FAILED;
    }
    if (mt->structured) {
        const json_t *sc = json_object_get(r, "structuredContent");
        if (!json_is_object(sc))
            return th_sdk_fail(call, "mcp: server '%s': '%s' declares an "
                               "outputSchema but its result has no "
                               "structuredContent object",
                               s->name, mt->remote);
        char *text = json_dumps(sc, JSON_COMPACT);
        if (!text)
            return th_sdk_fail(call, "mcp: out of memory");
        th_sdk_write(call, TOOLHOST_STDOUT, text, strlen(text));
        free(text);
    }
    size_t refused = 0;
    char why[160] = "";
    json_array_foreach(content, i, b)
    {
        const char *type = json_string_value(json_object_get(b, "type"));
        const json_t *t = json_object_get(b, "text");
        if (i == 0 && !mt->structured && type && !strcmp(type, "text") &&
            json_is_string(t)) {
            th_sdk_write(call, TOOLHOST_STDOUT, json_string_value(t),
                         json_string_length(t));
            continue;
        }
        char w[160];
        if (put_block(call, b, w, sizeof w) != 0 && refused++ == 0)
            snprintf(why, sizeof why, "%s", w);
    }
    log_refused(call, mt, refused, why);
    return TOOLHOST_OK;
}

/* The on_cancel hook of a suspended call: flags it and wakes the reader
 * (a host thread that must not block: one lock, one write). */
static void async_cancel_hook(void *ud)
{
    mcp_pend *p = ud;
    mcp_srv *s = p->mt->srv;
    pthread_mutex_lock(&s->mu);
    p->cancel = true;
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) {
        /* the counter is full: the reader is awake already */
    }
    pthread_mutex_unlock(&s->mu);
}

void mcpsrc_call_finish(mcp_pend *p, json_t *answer, const char *error,
                        const char *why)
{
    mcpsrc_call_finish_as(p, answer, NULL, error, why);
}

void mcpsrc_call_finish_as(mcp_pend *p, json_t *answer,
                           const mcpsrc_fast_answer *texts, const char *error,
                           const char *why)
{
    toolhost_call *call = p->call;
    const mcp_tool *mt = p->mt;
    mcp_srv *s = mt->srv;
    if (p->hooked)
        th_sdk_on_cancel(call, NULL, NULL); /* waits for a running hook */
    int rc;
    if (texts) {
        rc = map_texts(call, mt, texts);
        error = NULL;
    } else if (answer) {
        rc = map_result(call, p->tool, mt, answer);
        error = json_object_get(answer, "error") ? "server_error" : NULL;
    } else if (error && !strcmp(error, "cancelled")) {
        rc = TOOLHOST_FAILED; /* dropped by the host */
    } else if (error && !strcmp(error, "noslot")) {
        rc = th_sdk_fail_backend(call, TOOLHOST_TIMEOUT, 0,
                         "mcp: server '%s' had no free slot "
                         "(max_concurrency %lld) within its timeout "
                         "of %lldms",
                         s->name, (long long)s->max_concurrency,
                         (long long)s->timeout_ms);
        error = "timeout";
    } else if (error && !strcmp(error, "timeout")) {
        th_sdk_log_call(call, TOOLHOST_LOG_WARN,
                        "server '%s': '%s' did not answer within %lldms: "
                        "cancelled on the server",
                        s->name, mt->remote, (long long)s->timeout_ms);
        rc = th_sdk_fail_backend(call, TOOLHOST_TIMEOUT, 0,
                                 "mcp: server '%s' did not answer '%s' "
                                 "within its timeout of %lldms; the call is "
                                 "cancelled on the server",
                                 s->name, mt->remote, (long long)s->timeout_ms);
    } else {
        /* unavailable: when it is back is not known yet (the supervisor
         * has not seen the end): no retry-after */
        rc = th_sdk_fail_backend(call, TOOLHOST_UNAVAILABLE, 0,
                         "mcp: server '%s' went away during the call "
                         "of '%s'%s%s; it restarts",
                         s->name, mt->remote, why && why[0] ? ": it " : "",
                         why ? why : "");
    }
    meta_put(call, s, p->pid, p->id, p->t0, p->n_progress, error);
    if (p->slot) {
        /* the reader gives it to a waiting call (pump): nobody waits on
         * s->cv for a slot of a stdio server */
        pthread_mutex_lock(&s->mu);
        s->in_flight--;
        pthread_mutex_unlock(&s->mu);
    }
    call->host->complete(call, rc);
    free(p->line);
    free(p);
}

/* "unavailable": the call fails with the server's state in words. */
static int fail_unavailable(toolhost_call *call, mcp_srv *s)
{
    pthread_mutex_lock(&s->mu);
    char why[256];
    snprintf(why, sizeof why, "%s", s->why);
    int64_t next_try = s->next_try;
    unsigned attempt = s->attempt;
    pthread_mutex_unlock(&s->mu);
    int64_t in = next_try - mcpsrc_now_ms();
    /* retry after the next restart (none when it is under way) */
    return th_sdk_fail_backend(call, TOOLHOST_UNAVAILABLE,
                       in > 0 ? (uint64_t)in : 0,
                       "mcp: server '%s' is unavailable: %s%s; "
                       "%s #%u %s%lldms",
                       s->name, why[0] ? "it " : "",
                       why[0] ? why : "it is starting",
                       s->url ? "new session" : "restart", attempt,
                       in > 0 ? "in " : "under way, started ",
                       (long long)(in > 0 ? in : -in));
}

/* A call of a stdio server, which never waits (so that a front's own
 * thread may run it: TOOLHOST_TOOL_SHORT): the call is suspended and
 * handed to the server's reader at once.  With a slot free and room in
 * the server's stdin, its line is written here with one send(); else the
 * call waits for a slot in s->waitq, or its line for room, and the
 * reader sends it (pump).  The reader ends it (answer, progress, cancel,
 * timeout, the server's end). */
static int stdio_call(mcp_srv *s, const toolhost_tool *tool,
                      const mcp_tool *mt, toolhost_call *call,
                      const uint8_t *args, size_t args_len, int64_t t0,
                      int64_t deadline)
{
    pthread_mutex_lock(&s->mu);
    bool up = s->state == SRV_UP && !s->reader_done;
    int64_t id = up ? s->next_id++ : 0;
    pid_t pid = s->pid;
    pthread_mutex_unlock(&s->mu);
    /* the tools/call line, written straight into one buffer (no JSON
     * tree): the arguments converted from msgpack as they are read */
    mp_json_text t = {0};
    static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":";
    static const char method[] =
        ",\"method\":\"tools/call\",\"params\":{\"name\":";
    static const char arguments[] = ",\"arguments\":";
    static const char meta[] = ",\"_meta\":{\"progressToken\":";
    static const char tail[] = "}}}\n";
    bool oom = mp_json_reserve(&t, 192 + args_len + args_len / 2 +
                                       6 * strlen(mt->remote)) != 0 ||
               mp_json_put(&t, head, sizeof head - 1) != 0 ||
               mp_json_put_int(&t, id) != 0 ||
               mp_json_put(&t, method, sizeof method - 1) != 0 ||
               mp_json_put_str(&t, mt->remote, strlen(mt->remote)) != 0 ||
               mp_json_put(&t, arguments, sizeof arguments - 1) != 0;
    if (!oom && mp_json_dump(args, args_len, true, &t) != 0) {
        free(t.data);
        return th_sdk_fail(call, "mcp: the arguments are not a JSON object");
    }
    oom = oom || mp_json_put(&t, meta, sizeof meta - 1) != 0 ||
          mp_json_put_int(&t, id) != 0 ||
          mp_json_put(&t, tail, sizeof tail - 1) != 0;
    if (!up) {
        free(t.data);
        int rc = fail_unavailable(call, s);
        meta_put(call, s, pid, 0, t0, 0, "unavailable");
        return rc;
    }
    char *text = oom ? NULL : t.data;
    if (oom)
        free(t.data);
    mcp_pend *p = text ? calloc(1, sizeof *p) : NULL;
    if (!p || call->host->suspend(call) != 0) {
        free(text);
        free(p);
        int rc = th_sdk_fail(call, "mcp: out of memory");
        meta_put(call, s, pid, id, t0, 0, NULL);
        return rc;
    }
    p->line = text;
    p->line_len = t.len;
    p->id = id;
    p->call = call;
    p->tool = tool;
    p->mt = mt;
    p->t0 = t0;
    p->deadline = deadline;
    p->pid = pid;
    p->hooked = th_sdk_on_cancel(call, async_cancel_hook, p) == 0;
    pthread_mutex_lock(&s->mu);
    bool gone = s->state != SRV_UP || s->reader_done;
    bool slot = !s->waitq && s->in_flight < s->max_concurrency;
    bool full = !gone && !slot && s->n_waiting >= s->max_waiting;
    uint64_t refused = full ? ++s->n_refused : 0;
    bool log = full && (refused & (refused - 1)) == 0;
    if (gone || full) {
        /* not handed off: this thread still owns the call */
        pthread_mutex_unlock(&s->mu);
        if (p->hooked)
            th_sdk_on_cancel(call, NULL, NULL);
        free(p->line);
        free(p);
        int rc;
        if (full) {
            if (log) /* the 1st, 2nd, 4th, 8th, ... */
                th_sdk_log(s->st->host, TOOLHOST_LOG_WARN,
                           "server '%s': a call of '%s' refused: "
                           "max_concurrency (%lld) calls in flight and "
                           "max_waiting (%lld) waiting for a slot (%llu "
                           "refused so far)",
                           s->name, mt->remote,
                           (long long)s->max_concurrency,
                           (long long)s->max_waiting,
                           (unsigned long long)refused);
            rc = th_sdk_fail(call, "mcp: server '%s' is busy: "
                             "max_concurrency (%lld) calls in flight and "
                             "max_waiting (%lld) waiting for a slot; try "
                             "again later",
                             s->name, (long long)s->max_concurrency,
                             (long long)s->max_waiting);
            meta_put(call, s, pid, 0, t0, 0, "busy");
        } else {
            rc = th_sdk_fail_backend(call, TOOLHOST_UNAVAILABLE, 0,
                             "mcp: server '%s' went away before the "
                             "call of '%s' was sent; it restarts",
                             s->name, mt->remote);
            meta_put(call, s, pid, id, t0, 0, "server_exited");
        }
        call->host->complete(call, rc);
        return TOOLHOST_PENDING;
    }
    /* the hand-off: p and the call are the reader's from here on (s->mu
     * held until the end, so the reader cannot end it under our feet) */
    bool wake, spin = false;
    if (slot) {
        s->in_flight++;
        p->slot = true;
        mcpsrc_pend_add(s, p);
        wake = !mcpsrc_try_send_locked(s, p) || s->flush;
        if (p->line) {
            p->unsent = true;
            s->n_unsent++;
        }
        /* alone in flight and sent: this thread may wait for the answer
         * a moment (mcpsrc_busy_poll), unless calls of this server were
         * lately sent while others were in flight: then more are on
         * their way, to be read and sent by this very thread, and a
         * spinning thread takes a CPU from those that answer them; nor
         * while answers a poll read wait for the reader (s->dout: what
         * waits stays within one poll's reading) */
        if (s->in_flight > 1)
            s->concurrent_ms = t0;
        if (!wake && s->in_flight == 1 && s->busy_poll_us > 0 &&
            !s->dout && t0 - s->concurrent_ms >= MCPSRC_ALONE_MS) {
            if (s->spin_skip)
                s->spin_skip--;
            else
                spin = true;
        }
        if (spin)
            s->spin_last_ms = t0;
        else if (s->rd_parked)
            wake = true; /* not busy-polled: the reader reads it */
        /* its deadline (or, without a cancel hook, its next look at
         * whether it was cancelled: 100 ms) is the reader's to keep: a
         * reader that would sleep past it is woken to sweep (a request
         * sent here, the reader may have gone to sleep with no call) */
        int64_t due = p->deadline;
        if (!p->hooked && (due < 0 || due > t0 + 100))
            due = t0 + 100;
        if (due >= 0 && (s->rd_until < 0 || s->rd_until > due))
            wake = true;
    } else {
        /* max_concurrency calls are in flight: it waits for a slot */
        if (s->waitq_tail)
            s->waitq_tail->next = p;
        else
            s->waitq = p;
        s->waitq_tail = p;
        s->n_waiting++;
        wake = true;
    }
    if (wake) {
        uint64_t one = 1;
        if (write(s->wake_fd, &one, sizeof one) < 0) {
            /* the counter is full: the reader is awake already */
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (spin)
        mcpsrc_busy_poll(s);
    return TOOLHOST_PENDING;
}

int mcpsrc_execute(void *state, const toolhost_tool *tool,
                   toolhost_call *call, const uint8_t *args, size_t args_len)
{
    (void)state;
    const mcp_tool *mt = tool->user_data;
    mcp_srv *s = mt->srv;
    int64_t t0 = mcpsrc_now_ms();
    int64_t deadline = s->timeout_ms > 0 ? t0 + s->timeout_ms : -1;

    /* the arguments as JSON (the host checked them against the schema) */
    if (!s->url)
        return stdio_call(s, tool, mt, call, args, args_len, t0, deadline);
    json_t *jargs = mp_json_parse(args, args_len);
    if (!json_is_object(jargs)) {
        json_decref(jargs);
        return th_sdk_fail(call, "mcp: the arguments are not a JSON object");
    }

    /* HTTP: this thread makes the request and reads its answer */
    const char *error = NULL;
    int rc = TOOLHOST_FAILED;
    bool slot = false;
    int64_t id = 0;

    /* a slot of the server's max_concurrency, while it is up (this wait
     * holds the worker: max_concurrency calls are in flight already) */
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->state != SRV_UP) {
            error = "unavailable";
            break;
        }
        if (s->in_flight < s->max_concurrency) {
            s->in_flight++;
            slot = true;
            id = s->next_id++;
            break;
        }
        if (th_sdk_cancelled(call)) {
            error = "cancelled";
            break;
        }
        if (deadline >= 0 && mcpsrc_now_ms() >= deadline) {
            error = "timeout";
            break;
        }
        wait_slice(&s->cv, &s->mu, POLL_SLICE_MS);
    }
    pthread_mutex_unlock(&s->mu);

    if (error && !strcmp(error, "unavailable")) {
        rc = fail_unavailable(call, s);
        goto out;
    }
    if (error) {
        if (!strcmp(error, "timeout"))
            rc = th_sdk_fail_backend(call, TOOLHOST_TIMEOUT, 0,
                             "mcp: server '%s' had no free slot "
                             "(max_concurrency %lld) within its timeout "
                             "of %lldms",
                             s->name, (long long)s->max_concurrency,
                             (long long)s->timeout_ms);
        goto out;
    }

    json_t *answer = NULL;
    char hwhy[256] = "";
    uint64_t np = 0;
    int hrc = mcpsrc_http_call(s, mt->remote, call, id, jargs, deadline,
                               &answer, &np, &error, hwhy, sizeof hwhy);
    if (answer && (hrc == 0 || json_object_get(answer, "error"))) {
        rc = map_result(call, tool, mt, answer);
        error = json_object_get(answer, "error") ? "server_error" : NULL;
    } else if (error && !strcmp(error, "timeout")) {
        rc = th_sdk_fail_backend(call, TOOLHOST_TIMEOUT, 0,
                                 "mcp: server '%s' did not answer '%s' "
                                 "within its timeout of %lldms; the call is "
                                 "cancelled on the server",
                                 s->name, mt->remote,
                                 (long long)s->timeout_ms);
    } else if (error && !strcmp(error, "token_timeout")) {
        rc = th_sdk_fail_backend(call, TOOLHOST_TIMEOUT, 0,
                                 "mcp: server '%s': no OAuth token for '%s' "
                                 "within its timeout of %lldms (the token "
                                 "endpoint did not answer); the request was "
                                 "not sent",
                                 s->name, mt->remote,
                                 (long long)s->timeout_ms);
        error = "timeout";
    } else if (error && !strcmp(error, "cancelled")) {
        rc = TOOLHOST_FAILED; /* dropped by the host */
    } else {
        /* not reached (or its session gone): unavailable; a bad answer
         * stays the tool's failure */
        rc = th_sdk_fail_backend(call,
                                 error && !strcmp(error, "server_exited")
                                     ? TOOLHOST_UNAVAILABLE
                                     : TOOLHOST_FAILED,
                                 0,
                                 "mcp: server '%s' (%s) failed the call of "
                                 "'%s': %s",
                                 s->name, s->url, mt->remote, hwhy);
    }
    json_decref(answer);
    meta_put(call, s, -1, id, t0, np, error);
    goto done;
out:
    meta_put(call, s, -1, 0, t0, 0, error);
done:
    if (slot) {
        pthread_mutex_lock(&s->mu);
        s->in_flight--;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    json_decref(jargs);
    return rc;
}
