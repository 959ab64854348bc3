/* http.c - MCP over Streamable HTTP: the transport of front/mcp_http.h on the
 * HTTP layer of th/http.h, feeding the protocol core of mcp.h.
 *
 * No thread waits for a client or for an answer (th/http.h): a POST whose
 * answer is not in yet, an event stream with nothing to send, suspend
 * their connection (th_http_suspend) and return; the core's send() (a
 * worker) only appends to a stream's bounded queue and wakes the stream's
 * connection (th_http_wake), and libmicrohttpd calls the handler or the
 * content callback again on a pool thread.  The keepalive comment and the
 * hang-up grace are the suspensions' deadlines; a hang-up while suspended
 * is seen by the HTTP layer's watchdog.  One mutex (f->mu) guards the
 * session table, the streams and their queues.
 *
 * Resumable streams (mcp.sse_poll, docs/mcp.md "Resumable streams"): a
 * POST's event stream whose events carry ids TAG-SEQ outlives its
 * connection: it parks (listed, no connection, no session reference) and
 * a GET with Last-Event-ID of the same session takes it up, the sent
 * events after SEQ (the last sse_replay_events kept) first; the reaper
 * drops one parked longer than sse_replay_time.
 *
 * Lock order: f->mu, then the HTTP layer's (th_http_wake under f->mu). */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <nettle/base64.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#include "mcp.h"
#include "oauth.h"
#include "front/http.h"
#include "th/log.h"
#include "front/mcp_config.h"
#include "front/mcp_http.h"

#define SID_LEN 64 /* hex characters of a session id (32 random bytes) */
/* How long a POST's handler waits, after its client hung up, for the
 * cancelled request to end before it leaves it behind. */
#define HANGUP_GRACE_MS 2000
/* How long th_mcp_http_stop waits for the closing results of open
 * subscriptions/listen streams to go out before the connections close. */
#define LISTEN_FLUSH_MS 1000
/* Bytes of a string request id at most. */
#define MAX_ID_LEN 128
/* A stream key at most: an id of MAX_ID_LEN bytes, each escaped as
 * \u00XX, in quotes (an integer's key is shorter). */
#define MAX_KEY_LEN (6 * MAX_ID_LEN + 2)

typedef struct chunk {
    struct chunk *next;
    size_t len, off;
    uint64_t seq; /* a resumable stream's event number; 0: none */
    char data[];
} chunk;

typedef struct hsess hsess;

enum { ST_POST = 1, ST_GET };

typedef struct stream {
    struct stream *next; /* in the session's list */
    hsess *s;
    int kind;
    char *key;           /* POST: the request id as compact JSON */
    json_t *id;          /* POST: the id itself (a reference): found
                            without allocating when a message is lost */
    chunk *head, *tail;
    size_t queued;
    bool first_seen, first_is_response, sse;
    bool done;           /* no more messages: end once the queue is sent */
    bool dead;           /* dropped (too slow): end now */
    bool lost;           /* dead: its response could not be built (out
                            of memory, t_lost): answered with an error */
    bool linked;
    th_http_conn *hc;    /* the connection waiting on this stream (a
                            reference), or NULL: woken on every change */
    int64_t ka_due;      /* SSE: a keepalive comment is due then */
    /* Resumable (mcp.sse_poll; docs/mcp.md "Resumable streams"): */
    bool can_resume;     /* POST: its client takes text/event-stream and
                            sse_poll is on: an event stream of it starts
                            with a priming event */
    bool resumable;      /* primed: events carry ids TAG-SEQ and outlive
                            the connection */
    bool parked;         /* resumable, no connection: waits for a GET
                            with Last-Event-ID (holds no session
                            reference, as an orphan) */
    int64_t parked_at;
    int64_t poll_due;    /* resumable: its connection ends then */
    char tag[17];        /* resumable: the stream's part of its event
                            ids, 64 random bits in hex */
    uint64_t seq;        /* resumable: the last event's number */
    chunk *kept, *kept_tail; /* resumable: events sent, the last
                            mcp.sse_replay_events of them (and at most
                            mcp.max_queued bytes), for a replay */
    size_t n_kept, kept_bytes;
    bool orphan;         /* POST: its handler left (the client hung up and
                            the request outlived HANGUP_GRACE_MS); holds no
                            session reference, stays listed so that its id
                            stays taken, freed by request_done() or with
                            the session */
} stream;

/* A request whose response went out and whose request_done() is still to
 * come: that call must not end a newer request reusing the id. */
typedef struct owed {
    struct owed *next;
    char *key;
} owed;

struct hsess {
    hsess *next; /* in the table */
    owed *owed;  /* under f->mu */
    th_mcp_http *f;
    char id[SID_LEN + 1];
    char *user;
    th_mcp_session *m;
    pthread_mutex_t in_mu; /* th_mcp_session_input one at a time */
    int refs;              /* table + handlers + streams; under f->mu */
    bool in_table;
    bool one_request;      /* serves one 2026-07-28 request: listed in
                              f->one_req, not the table (no id names it),
                              counted in f->n_sessions until freed */
    stream *streams;
    bool listens_closed;   /* th_mcp_http_stop: close_listens done */
    unsigned n_get;
    int64_t last_used_ms;
};

/* One http:// entry: its routes' ud.  With mcp.oauth, its resource URL,
 * the URL of its metadata document (RFC 9728) and the document, set once
 * the entry listens (its port known) and published by f->ready. */
typedef struct entry {
    th_mcp_http *f;
    char path[256];        /* the MCP route's path                      */
    char meta_paths[3][300]; /* the metadata document's routes         */
    size_t n_meta;
    char *resource;
    char *meta_url;
    char *meta_doc;
} entry;

/* A session being opened (sess_new): counted for its user meanwhile. */
typedef struct opening {
    struct opening *next;
    const char *user;
} opening;

struct th_mcp_http {
    th_host *h;
    const th_mcp_cfg *mc; /* = &mcfg */
    th_mcp_cfg mcfg;      /* a copy: a reload does not change it */
    th_http_server **srv;
    size_t n_srv;
    entry *ents;        /* one per server */
    th_oauth *oauth;    /* mcp.oauth, or NULL */
    atomic_bool ready;  /* the entries' OAuth fields and f->oauth are set */
    pthread_mutex_t mu;
    pthread_cond_t reaper_cv;
    hsess *sessions;
    hsess *one_req;          /* sessions of one 2026-07-28 request each */
    unsigned n_sessions;     /* both lists' */
    struct opening *opening; /* sessions reserved, not yet listed */
    bool closing;
    pthread_t reaper;
    bool reaper_started;
    atomic_llong refused_logged_ms[4]; /* log_due(): deep, too many, Host,
                                          OAuth token */
};

static int64_t now_ms(void);

/* A refusal that any client can cause is logged at most once a second
 * for each reason (slot). */
static bool log_due(th_mcp_http *f, int slot)
{
    int64_t now = now_ms();
    long long last = atomic_load(&f->refused_logged_ms[slot]);
    return now - last >= 1000 &&
           atomic_compare_exchange_strong(&f->refused_logged_ms[slot], &last,
                                          now);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void cv_wait_on(th_mcp_http *f, pthread_cond_t *cv, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (ms < 1)
        ms = 1;
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(cv, &f->mu, &ts);
}

/* ---- streams ------------------------------------------------------------------ */

/* Wakes the connection waiting on st, if any (f->mu held). */
static void wake(stream *st)
{
    if (st && st->hc)
        th_http_wake(st->hc);
}

static void queue_clear(stream *st)
{
    while (st->head) {
        chunk *c = st->head;
        st->head = c->next;
        free(c);
    }
    st->tail = NULL;
    st->queued = 0;
}

/* Appends text (as an SSE event when sse) to st; f->mu held. */
static void queue_put(stream *st, const char *text, size_t len, bool sse)
{
    th_mcp_http *f = st->s->f;
    if (st->dead || st->done)
        return;
    char idl[64] = "";
    if (sse && st->resumable)
        snprintf(idl, sizeof idl, "id: %s-%" PRIu64 "\n", st->tag,
                 st->seq + 1);
    size_t il = strlen(idl);
    size_t total = len + (sse ? 24 + il : 0);
    if (st->queued + total > f->mc->max_queued) {
        th_log_warn("mcp http: session %.8s: a client reads too slowly (%zu "
                    "bytes waiting, mcp.max_queued); its %s stream is "
                    "dropped",
                    st->s->id, st->queued, st->kind == ST_GET ? "GET"
                                                              : "POST");
        st->dead = true;
        th_stat_front_event(f->h, TOOLHOST_FRONT_MCP, TH_MCP_EV_SLOW_READER);
        queue_clear(st);
        return;
    }
    chunk *c = malloc(sizeof *c + total);
    if (!c) {
        st->dead = true;
        queue_clear(st);
        return;
    }
    c->next = NULL;
    c->off = 0;
    c->seq = 0;
    if (sse) {
        memcpy(c->data, idl, il);
        memcpy(c->data + il, "event: message\ndata: ", 21);
        memcpy(c->data + il + 21, text, len);
        memcpy(c->data + il + 21 + len, "\n\n", 2);
        c->len = il + 21 + len + 2;
        if (st->resumable)
            c->seq = ++st->seq;
    } else {
        memcpy(c->data, text, len);
        c->len = len;
    }
    if (st->tail)
        st->tail->next = c;
    else
        st->head = c;
    st->tail = c;
    st->queued += c->len;
}

/* Makes st resumable (f->mu held): its event stream starts with the
 * priming event, an id (TAG-0), the client's reconnection delay and
 * empty data; the connection ends mcp.sse_poll after it opens. */
static void prime(stream *st)
{
    th_mcp_http *f = st->s->f;
    st->first_seen = true;
    st->first_is_response = false;
    st->sse = st->resumable = true;
    char ev[96];
    int n = snprintf(ev, sizeof ev, "id: %s-0\nretry: %" PRIu64
                     "\ndata: \n\n", st->tag, f->mc->sse_poll_ms);
    chunk *c = malloc(sizeof *c + (size_t)n);
    if (!c) {
        st->dead = true;
        return;
    }
    c->next = st->head;
    c->off = 0;
    c->seq = 0;
    c->len = (size_t)n;
    memcpy(c->data, ev, (size_t)n);
    st->head = c;
    if (!st->tail)
        st->tail = c;
    st->queued += c->len;
}

static void kept_clear(stream *st)
{
    while (st->kept) {
        chunk *c = st->kept;
        st->kept = c->next;
        free(c);
    }
    st->kept_tail = NULL;
    st->n_kept = st->kept_bytes = 0;
}

/* A sent event of a resumable stream kept for a replay, the oldest
 * dropped beyond mcp.sse_replay_events or mcp.max_queued (f->mu held). */
static void kept_put(stream *st, chunk *c)
{
    th_mcp_http *f = st->s->f;
    c->next = NULL;
    c->off = 0;
    if (st->kept_tail)
        st->kept_tail->next = c;
    else
        st->kept = c;
    st->kept_tail = c;
    st->n_kept++;
    st->kept_bytes += c->len;
    while (st->kept && (st->n_kept > f->mc->sse_replay_events ||
                        st->kept_bytes > f->mc->max_queued)) {
        chunk *o = st->kept;
        st->kept = o->next;
        if (!st->kept)
            st->kept_tail = NULL;
        st->n_kept--;
        st->kept_bytes -= o->len;
        free(o);
    }
}

/* cap - 1 random hex digits in out, NUL-terminated (cap odd); -1 when
 * the kernel gives no random bytes. */
static int random_hex(char *out, size_t cap)
{
    uint8_t rnd[SID_LEN / 2];
    size_t want = (cap - 1) / 2, got = 0;
    if (want > sizeof rnd)
        return -1;
    while (got < want) {
        ssize_t n = getrandom(rnd + got, want - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    for (size_t i = 0; i < want; i++)
        snprintf(out + 2 * i, 3, "%02x", rnd[i]);
    return 0;
}

static void sess_unref(hsess *s);

static stream *stream_new(hsess *s, int kind, char *key)
{
    stream *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->s = s;
    st->kind = kind;
    st->key = key;
    /* f->mu held by the caller */
    st->next = s->streams;
    s->streams = st;
    st->linked = true;
    s->refs++;
    if (kind == ST_GET)
        s->n_get++;
    return st;
}

/* Unlinks st from its session and frees it (f->mu held): an orphan POST
 * stream, or any stream through stream_free(). */
static void stream_unlink_free(stream *st)
{
    hsess *s = st->s;
    for (stream **pp = &s->streams; *pp; pp = &(*pp)->next)
        if (*pp == st) {
            *pp = st->next;
            break;
        }
    queue_clear(st);
    kept_clear(st);
    th_http_conn_unref(st->hc);
    free(st->key);
    json_decref(st->id);
    free(st);
}

/* Unlinks and frees st, dropping its session reference. */
static void stream_free(stream *st)
{
    hsess *s = st->s;
    th_mcp_http *f = s->f;
    pthread_mutex_lock(&f->mu);
    if (st->kind == ST_GET && s->n_get)
        s->n_get--;
    s->last_used_ms = now_ms();
    stream_unlink_free(st);
    pthread_cond_broadcast(&f->reaper_cv); /* (flush_listens waits) */
    pthread_mutex_unlock(&f->mu);
    sess_unref(s);
}

/* The connection of st's event stream is over.  A resumable stream with
 * something still to say parks: it stays listed without a connection (nor
 * a session reference) until a GET with Last-Event-ID takes it up again,
 * its request's end, or mcp.sse_replay_time (the reaper); anything else
 * goes. */
static void stream_release(stream *st)
{
    hsess *s = st->s;
    th_mcp_http *f = s->f;
    pthread_mutex_lock(&f->mu);
    if (st->resumable && !st->dead && !f->closing && s->in_table &&
        !(st->done && !st->head)) {
        th_http_conn *drop = st->hc;
        uint64_t sent = st->kept_tail ? st->kept_tail->seq : 0;
        size_t kept = st->n_kept;
        st->hc = NULL;
        st->parked = true;
        st->parked_at = s->last_used_ms = now_ms();
        if (st->head) { /* a partly sent event goes again whole */
            st->queued += st->head->off;
            st->head->off = 0;
        }
        s->refs--; /* the stream's; the session's table holds one */
        pthread_mutex_unlock(&f->mu);
        th_http_conn_unref(drop);
        th_log_debug("mcp http: session %.8s: stream %s parked; sent up to "
                     "event %" PRIu64 ", %zu kept for a replay",
                     s->id, st->tag, sent, kept);
        return;
    }
    pthread_mutex_unlock(&f->mu);
    stream_free(st);
}

/* ---- the core's callbacks ----------------------------------------------------- */

static stream *find_post(hsess *s, const char *key)
{
    for (stream *st = s->streams; st; st = st->next)
        if (st->kind == ST_POST && strcmp(st->key, key) == 0)
            return st;
    return NULL;
}

/* The POST stream of request `req`, compared as a JSON value: no
 * allocation, for when the key text cannot be made (f->mu held). */
static stream *find_post_id(hsess *s, const json_t *req)
{
    for (stream *st = s->streams; st && req; st = st->next)
        if (st->kind == ST_POST && st->id && json_equal(st->id, req))
            return st;
    return NULL;
}

/* A message for `req` is lost (out of memory): a client waiting for the
 * response of that POST would wait for good, so its stream ends (an
 * error answer, or the SSE stream cut).  A lost message of no request
 * (req NULL) is only logged by the core. */
static void t_lost(void *ud, const json_t *req)
{
    hsess *s = ud;
    th_mcp_http *f = s->f;
    pthread_mutex_lock(&f->mu);
    stream *st = find_post_id(s, req);
    if (st && !st->done) {
        th_log_warn("mcp http: session %.8s: a message of a request is "
                    "lost (out of memory); its POST ends with an error",
                    s->id);
        st->dead = st->lost = true;
        queue_clear(st);
    }
    wake(st);
    pthread_mutex_unlock(&f->mu);
}

static void send_text(hsess *s, const char *text, size_t len, bool response,
                      const json_t *req);

static void t_send(void *ud, const json_t *msg, const json_t *req)
{
    hsess *s = ud;
    th_buf b;
    th_buf_init(&b);
    if (mcp_json_append(&b, msg) != 0) {
        th_log_warn("mcp http: session %.8s: out of memory; a message is "
                    "lost", s->id);
        th_buf_destroy(&b);
        if (req && !json_object_get(msg, "method"))
            t_lost(s, req); /* the response */
        return;
    }
    send_text(s, (const char *)b.data, b.len, !json_object_get(msg, "method"),
              req);
    th_buf_destroy(&b);
}

/* A response as text (the core's send_text). */
static void t_send_text(void *ud, const char *text, size_t len,
                        const json_t *req)
{
    send_text(ud, text, len, true, req);
}

static void send_text(hsess *s, const char *text, size_t len, bool response,
                      const json_t *req)
{
    th_mcp_http *f = s->f;
    char *key = req ? json_dumps(req, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    if (req && !key) {
        th_log_warn("mcp http: session %.8s: out of memory; a message is "
                    "lost", s->id);
        if (response)
            t_lost(s, req);
        return;
    }
    owed *ow = NULL;
    if (key && response && (ow = malloc(sizeof *ow)) &&
        !(ow->key = strdup(key))) {
        free(ow);
        ow = NULL;
    }
    pthread_mutex_lock(&f->mu);
    if (ow) {
        ow->next = s->owed;
        s->owed = ow;
    }
    if (key) {
        stream *st = find_post(s, key);
        wake(st);
        if (!st) {
            th_log_debug("mcp http: session %.8s: no stream for request %s "
                         "(the client left); a message is dropped",
                         s->id, key);
        } else if (!st->first_seen) {
            if (!response && st->can_resume)
                prime(st);
            st->first_seen = true;
            st->first_is_response = response;
            st->sse = !st->first_is_response;
            queue_put(st, text, len, st->sse);
        } else if (st->sse && !st->done) {
            queue_put(st, text, len, true);
            if (response)
                st->done = true; /* the stream ends with the response */
        } else {
            th_log_debug("mcp http: session %.8s: a message after the "
                         "response to %s is dropped", s->id, key);
        }
    } else {
        stream *g = NULL;
        for (stream *st = s->streams; st && !g; st = st->next)
            if (st->kind == ST_GET && !st->dead && !st->done)
                g = st;
        wake(g);
        if (g)
            queue_put(g, text, len, true);
        else
            th_log_debug("mcp http: session %.8s: no GET stream open; a "
                         "server message is dropped", s->id);
    }
    pthread_mutex_unlock(&f->mu);
    free(key);
}

static void t_request_done(void *ud, const json_t *req)
{
    hsess *s = ud;
    th_mcp_http *f = s->f;
    char *key = json_dumps(req, JSON_COMPACT | JSON_ENCODE_ANY);
    pthread_mutex_lock(&f->mu);
    bool was_owed = false;
    for (owed **pp = &s->owed; key && *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->key, key) == 0) {
            owed *o = *pp;
            *pp = o->next;
            free(o->key);
            free(o);
            was_owed = true;
            break;
        }
    /* Without a key (out of memory) the request ends all the same: its
     * stream found by its id, unless a response is owed (to it, maybe). */
    stream *st = was_owed ? NULL
                 : key    ? find_post(s, key)
                 : s->owed ? NULL
                          : find_post_id(s, req);
    if (st)
        st->done = true;
    wake(st);
    if (st && st->orphan)
        stream_unlink_free(st);
    pthread_mutex_unlock(&f->mu);
    free(key);
}

/* ---- sessions ------------------------------------------------------------------ */

static void sess_unref(hsess *s)
{
    th_mcp_http *f = s->f;
    pthread_mutex_lock(&f->mu);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&f->mu);
    if (!last)
        return;
    if (s->m)
        th_mcp_session_free(s->m);
    if (s->one_request) {
        pthread_mutex_lock(&f->mu);
        for (hsess **pp = &f->one_req; *pp; pp = &(*pp)->next)
            if (*pp == s) {
                *pp = s->next;
                break;
            }
        f->n_sessions--;
        pthread_mutex_unlock(&f->mu);
    }
    /* Only orphans are left: every other stream holds a reference. */
    while (s->streams)
        stream_unlink_free(s->streams);
    while (s->owed) {
        owed *o = s->owed;
        s->owed = o->next;
        free(o->key);
        free(o);
    }
    pthread_mutex_destroy(&s->in_mu);
    free(s->user);
    free(s);
}

/* Takes s out of the table (f->mu held); its streams end.  The caller
 * drops the table's reference with sess_unref() after unlocking. */
static void sess_unlist(hsess *s)
{
    th_mcp_http *f = s->f;
    for (hsess **pp = &f->sessions; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    s->in_table = false;
    f->n_sessions--;
    for (stream *st = s->streams; st; st = st->next) {
        st->done = true;
        wake(st);
    }
}

/* The session `id` of `user`, with a reference, or NULL. */
static hsess *sess_get(th_mcp_http *f, const char *id, const char *user)
{
    hsess *found = NULL;
    pthread_mutex_lock(&f->mu);
    for (hsess *s = f->sessions; s && !found; s = s->next)
        if (strcmp(s->id, id) == 0 && strcmp(s->user, user) == 0)
            found = s;
    if (found) {
        found->refs++;
        found->last_used_ms = now_ms();
    }
    pthread_mutex_unlock(&f->mu);
    return found;
}

static const th_mcp_transport transport = {.send = t_send,
                                           .request_done = t_request_done,
                                           .send_text = t_send_text,
                                           .lost = t_lost};

/* Sessions of `user` listed or being opened (f->mu held). */
static unsigned user_sessions(th_mcp_http *f, const char *user)
{
    unsigned n = 0;
    for (hsess *s = f->sessions; s; s = s->next)
        if (strcmp(s->user, user) == 0)
            n++;
    for (hsess *s = f->one_req; s; s = s->next)
        if (strcmp(s->user, user) == 0)
            n++;
    for (opening *o = f->opening; o; o = o->next)
        if (strcmp(o->user, user) == 0)
            n++;
    return n;
}

/* A new session for `user` in the table, with a reference for the caller;
 * NULL with *status (503: too many sessions, 500).  `one_request`: it
 * serves one 2026-07-28 request (its opening is logged at debug). */
static hsess *sess_new(th_mcp_http *f, const char *user, unsigned *status,
                       bool one_request)
{
    *status = 500;
    hsess *s = calloc(1, sizeof *s);
    if (!s || !(s->user = strdup(user))) {
        free(s);
        return NULL;
    }
    s->f = f;
    if (random_hex(s->id, sizeof s->id) != 0) {
        free(s->user);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->in_mu, NULL);
    th_principal who;
    memset(&who, 0, sizeof who);
    who.uid = (uint32_t)-1;
    who.gid = (uint32_t)-1;
    /* A token entry with `uid` acts as that local user for task
     * ownership: the same user's RPC sessions see its toolset tasks. */
    for (size_t i = 0; i < f->mc->n_tokens; i++)
        if (f->mc->tokens[i].has_uid &&
            strcmp(f->mc->tokens[i].user, user) == 0) {
            who.uid = f->mc->tokens[i].uid;
            break;
        }
    /* ... and so does a principal of mcp.oauth.users with a uid. */
    if (who.uid == (uint32_t)-1 && f->oauth)
        th_oauth_user_uid(f->oauth, user, &who.uid);
    who.user = s->user;
    th_mcp_opts o;
    memset(&o, 0, sizeof o);
    o.max_message = (size_t)f->mc->max_body;
    o.http = true;
    /* A pool thread feeds the session: a short call (microseconds by
     * its declaration) runs right there, with no hand-off to a worker
     * and back. */
    o.run_short = true;
    pthread_mutex_lock(&f->mu);
    bool full = f->n_sessions >= f->mc->max_sessions;
    bool user_full = !full && user_sessions(f, user) >=
                                  f->mc->max_sessions_per_user;
    opening op = {.next = f->opening, .user = user};
    if (!full && !user_full) {
        f->n_sessions++; /* reserved */
        f->opening = &op;
    }
    pthread_mutex_unlock(&f->mu);
    if (user_full) {
        th_log_warn("mcp http: a new session for '%s' refused: that user "
                    "has %u open (mcp.max_sessions_per_user)",
                    user, f->mc->max_sessions_per_user);
        full = true;
    } else if (full) {
        th_log_warn("mcp http: a new session for '%s' refused: %u sessions "
                    "open (mcp.max_sessions)",
                    user, f->mc->max_sessions);
    }
    if (full) {
        *status = 503;
        th_stat_front_event(f->h, TOOLHOST_FRONT_MCP, TH_MCP_EV_MAX_SESSIONS);
        pthread_mutex_destroy(&s->in_mu);
        free(s->user);
        free(s);
        return NULL;
    }
    th_error err;
    th_error_clear(&err);
    s->m = th_mcp_session_new(f->h, &who, &transport, s, &o, &err);
    pthread_mutex_lock(&f->mu);
    for (opening **pp = &f->opening; *pp; pp = &(*pp)->next)
        if (*pp == &op) {
            *pp = op.next;
            break;
        }
    if (!s->m) {
        f->n_sessions--;
        pthread_mutex_unlock(&f->mu);
        th_log_warn("mcp http: cannot open a session for '%s': %s", user,
                    err.msg);
        *status = err.code == TH_EPERM ? 403 : 500;
        if (err.code == TH_EPERM)
            th_stat_front_event(f->h, TOOLHOST_FRONT_MCP, TH_MCP_EV_FORBIDDEN);
        pthread_mutex_destroy(&s->in_mu);
        free(s->user);
        free(s);
        return NULL;
    }
    s->refs = 2; /* the table's and the caller's */
    s->in_table = true;
    s->last_used_ms = now_ms();
    s->next = f->sessions;
    f->sessions = s;
    pthread_mutex_unlock(&f->mu);
    th_log(one_request ? TOOLHOST_LOG_DEBUG : TOOLHOST_LOG_INFO,
           "mcp http: session %.8s opened for '%s'%s", s->id, user,
           one_request ? " (one 2026-07-28 request)" : "");
    return s;
}

/* Parked streams of s whose client did not come back within
 * mcp.sse_replay_time go (f->mu held): an ended request's at once, a
 * running one's as an orphan (its messages dropped, freed by
 * request_done()). */
static void parked_expire(hsess *s, int64_t now)
{
    th_mcp_http *f = s->f;
    stream **pp = &s->streams;
    while (*pp) {
        stream *st = *pp;
        if (!st->parked ||
            now - st->parked_at < (int64_t)f->mc->sse_replay_ms) {
            pp = &st->next;
            continue;
        }
        th_log_info("mcp http: session %.8s: event stream %s not resumed "
                    "within %" PRIu64 " ms (mcp.sse_replay_time): dropped",
                    s->id, st->tag, f->mc->sse_replay_ms);
        st->parked = false;
        if (st->done) {
            stream_unlink_free(st); /* unlinks *pp */
            continue;
        }
        st->orphan = st->dead = true;
        queue_clear(st);
        kept_clear(st);
        pp = &st->next;
    }
}

/* Ends sessions unused for mcp.session_idle (no stream, no request). */
static void *reaper_main(void *arg)
{
    th_mcp_http *f = arg;
    int64_t idle = (int64_t)f->mc->session_idle_ms;
    int64_t least = idle < (int64_t)f->mc->sse_replay_ms
                        ? idle
                        : (int64_t)f->mc->sse_replay_ms;
    int64_t tick = least / 4 < 1000 ? (least / 4 > 10 ? least / 4 : 10)
                                    : 1000;
    pthread_mutex_lock(&f->mu);
    while (!f->closing) {
        cv_wait_on(f, &f->reaper_cv, tick);
        int64_t now = now_ms();
        for (hsess *s = f->sessions; s; s = s->next)
            parked_expire(s, now);
        for (;;) {
            hsess *victim = NULL;
            for (hsess *s = f->sessions; s && !victim; s = s->next)
                if (s->refs == 1 && now - s->last_used_ms >= idle)
                    victim = s;
            if (!victim || f->closing)
                break;
            sess_unlist(victim);
            pthread_mutex_unlock(&f->mu);
            th_log_info("mcp http: session %.8s of '%s' idle for %" PRId64
                        " ms (mcp.session_idle): closed",
                        victim->id, victim->user, idle);
            sess_unref(victim);
            pthread_mutex_lock(&f->mu);
        }
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* ---- request checks ------------------------------------------------------------- */

static const char *hdr(struct MHD_Connection *c, const char *name)
{
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

/* The n bytes at p are "localhost" (any case) or a dotted 127.x
 * address. */
static bool name_loopback(const char *p, size_t n)
{
    return (n == 9 && strncasecmp(p, "localhost", 9) == 0) ||
           (n >= 9 && strncmp(p, "127.", 4) == 0 &&
            strspn(p, "0123456789.") == n);
}

/* An Origin on a loopback host: http(s)://localhost|127.x|[::1][:port]. */
static bool origin_loopback(const char *o)
{
    const char *p = strncmp(o, "http://", 7) == 0    ? o + 7
                    : strncmp(o, "https://", 8) == 0 ? o + 8
                                                     : NULL;
    if (!p)
        return false;
    size_t hl;
    if (*p == '[') {
        if (strncmp(p, "[::1]", 5) != 0)
            return false;
        hl = 5;
    } else {
        hl = strcspn(p, ":/");
        if (!name_loopback(p, hl))
            return false;
    }
    p += hl;
    if (*p == ':') {
        p++;
        size_t dl = strspn(p, "0123456789");
        if (dl == 0 || dl > 5)
            return false;
        unsigned long port = strtoul(p, NULL, 10);
        if (port == 0 || port > 65535)
            return false;
        p += dl;
    }
    return *p == '\0' || (p[0] == '/' && p[1] == '\0');
}

/* Content-Type application/json, then nothing or parameters: type/subtype
 * compared whole (application/jsonx is not JSON). */
static bool json_media_type(const char *ct)
{
    if (!ct || strncasecmp(ct, "application/json", 16) != 0)
        return false;
    const char *p = ct + 16;
    p += strspn(p, " \t");
    return *p == '\0' || *p == ';';
}

static bool origin_ok(th_mcp_http *f, const char *o)
{
    if (!o)
        return true;
    for (size_t i = 0; i < f->mc->n_allow_origins; i++)
        if (strcmp(f->mc->allow_origins[i], o) == 0)
            return true;
    return origin_loopback(o);
}

/* The name in a Host header value: "name", "name:port", "[v6]" or
 * "[v6]:port" (blanks after it tolerated); false for anything else. */
static bool host_name(const char *v, char *name, size_t cap)
{
    size_t len = strlen(v);
    while (len && (v[len - 1] == ' ' || v[len - 1] == '\t'))
        len--;
    const char *end = v + len, *p, *q;
    if (*v == '[') {
        p = v + 1;
        q = memchr(p, ']', (size_t)(end - p));
        if (!q)
            return false;
    } else {
        p = v;
        q = memchr(p, ':', len);
        if (!q)
            q = end;
    }
    size_t n = (size_t)(q - p);
    if (n == 0 || n >= cap)
        return false;
    memcpy(name, p, n);
    name[n] = '\0';
    if (*v == '[')
        q++;
    if (q == end)
        return true;
    if (*q != ':')
        return false;
    size_t dl = (size_t)(end - q - 1);
    if (dl == 0 || dl > 5 || strspn(q + 1, "0123456789") < dl)
        return false;
    unsigned long port = strtoul(q + 1, NULL, 10);
    return port > 0 && port <= 65535;
}

/* `name` is the address the connection came in on (the listening one;
 * for a wildcard listener the local address the client reached). */
static bool host_is_local(struct MHD_Connection *c, const char *name)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (!ci || getsockname(ci->connect_fd, (struct sockaddr *)&ss, &sl) != 0)
        return false;
    unsigned char want[16];
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        return inet_pton(AF_INET, name, want) == 1 &&
               memcmp(want, &a->sin_addr, 4) == 0;
    }
    if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr))
            return inet_pton(AF_INET, name, want) == 1 &&
                   memcmp(want, a->sin6_addr.s6_addr + 12, 4) == 0;
        return inet_pton(AF_INET6, name, want) == 1 &&
               memcmp(want, &a->sin6_addr, 16) == 0;
    }
    return false;
}

/* `name` is the host of an mcp.allow_origins entry (any case). */
static bool host_allowed_origin(th_mcp_http *f, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < f->mc->n_allow_origins; i++) {
        const char *o = strstr(f->mc->allow_origins[i], "://");
        if (!o)
            continue;
        o += 3;
        bool br = *o == '[';
        o += br;
        size_t ol = br ? strcspn(o, "]") : strcspn(o, ":/");
        if (ol == n && strncasecmp(o, name, n) == 0)
            return true;
    }
    return false;
}

/* DNS rebinding: a page of evil.example, re-resolved to this host, sends
 * no Origin on a same-origin GET but its Host names evil.example.  So
 * without an Origin the Host must name a loopback host, the address the
 * connection came in on, or a host of mcp.allow_origins.  The port is
 * not compared (a port forward or a container maps it; the Origin check
 * does not compare it either); no Host at all (HTTP/1.0) passes. */
static bool host_ok(th_mcp_http *f, struct MHD_Connection *c, const char *h)
{
    char name[256];
    if (!h)
        return true;
    if (!host_name(h, name, sizeof name))
        return false;
    return name_loopback(name, strlen(name)) || strcmp(name, "::1") == 0 ||
           host_allowed_origin(f, name) || host_is_local(c, name);
}

/* The user of the request's bearer token, or NULL: a static token of
 * mcp.tokens, else a JWT mcp.oauth accepts (into ubuf[ucap]); *orc
 * says why an OAuth token was refused (TH_OAUTH_*, *why). */
static const char *token_user(th_mcp_http *f, struct MHD_Connection *c,
                              char *ubuf, size_t ucap, bool *given, int *orc,
                              const char **why)
{
    const char *a = hdr(c, MHD_HTTP_HEADER_AUTHORIZATION);
    *given = a != NULL;
    *orc = TH_OAUTH_INVALID;
    *why = "the token is not known";
    if (!a || strncasecmp(a, "Bearer ", 7) != 0)
        return NULL;
    a += 7;
    while (*a == ' ')
        a++;
    size_t len = strlen(a);
    while (len && (a[len - 1] == ' ' || a[len - 1] == '\t'))
        len--;
    if (!len)
        return NULL;
    uint8_t d[SHA256_DIGEST_SIZE];
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, len, (const uint8_t *)a);
    sha256_digest(&ctx, sizeof d, d);
    const char *user = NULL;
    for (size_t i = 0; i < f->mc->n_tokens; i++) {
        unsigned diff = 0;
        for (size_t j = 0; j < sizeof d; j++)
            diff |= d[j] ^ f->mc->tokens[i].sha256[j];
        if (diff == 0 && !user)
            user = f->mc->tokens[i].user;
    }
    if (!user && f->mc->oauth.on) {
        if (!atomic_load(&f->ready)) {
            *why = "the server is starting";
            return NULL;
        }
        *orc = th_oauth_check(f->oauth, a, len, ubuf, ucap, why);
        if (*orc == TH_OAUTH_OK)
            user = ubuf;
    }
    return user;
}

/* The WWW-Authenticate of a refusal (RFC 6750, RFC 9728): the metadata
 * document's URL with mcp.oauth; `why` and the scope are constant or
 * checked text (no byte of the request). */
static void www_auth(th_mcp_http *f, const entry *e, bool given, int orc,
                     const char *why, char *buf, size_t cap)
{
    if (!f->mc->oauth.on || !atomic_load(&f->ready)) {
        snprintf(buf, cap, "%s", given ? "Bearer error=\"invalid_token\""
                                       : "Bearer");
        return;
    }
    if (!given)
        snprintf(buf, cap, "Bearer resource_metadata=\"%s\"", e->meta_url);
    else if (orc == TH_OAUTH_SCOPE)
        snprintf(buf, cap, "Bearer error=\"insufficient_scope\", "
                 "scope=\"%s\", resource_metadata=\"%s\"",
                 f->mc->oauth.required_scope, e->meta_url);
    else
        snprintf(buf, cap, "Bearer error=\"invalid_token\", "
                 "error_description=\"%s\", resource_metadata=\"%s\"",
                 why, e->meta_url);
}

/* A toolset lets `user` in (the rule of session.c for token users). */
static bool user_has_toolset(th_mcp_http *f, const char *user)
{
    th_config *cfg = th_host_config_get(f->h); /* a reload may swap it */
    bool has = false;
    for (size_t i = 0; i < cfg->n_toolsets && !has; i++) {
        const th_toolset_cfg *ts = &cfg->toolsets[i];
        if (ts->n_allow_users == 0 && ts->n_allow_groups == 0)
            has = true;
        for (size_t j = 0; j < ts->n_allow_users && !has; j++)
            if (strcmp(ts->allow_users[j], user) == 0)
                has = true;
    }
    th_config_unref(cfg);
    return has;
}

static bool version_ok(const char *v)
{
    return !v || mcp_version_served(v);
}

/* v is of the 2026-07-28 era: that revision or a later one (revisions
 * are dates). */
static bool version_modern(const char *v)
{
    return v && strcmp(v, mcp_modern_versions[0]) >= 0;
}

static enum MHD_Result reply_rpc_error(struct MHD_Connection *c,
                                       unsigned status, int code,
                                       const char *msg)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":%d,"
             "\"message\":\"%s\"}}",
             code, msg);
    return th_http_reply(c, status, "application/json", body, NULL, NULL);
}

/* ---- requests ------------------------------------------------------------------- */

typedef struct hreq {
    const char *user;
    entry *e;                /* the http:// entry asked */
    char oauth_user[256];    /* the user of an OAuth token (q->user) */
    char *body;
    size_t len, cap;
    bool too_big;
    bool checked;
    /* A POST waiting for its first message (post_wait): */
    stream *st;     /* its stream (holding the connection's record) */
    hsess *s;       /* its session, with a reference */
    bool is_init;   /* the answer names the new session */
    bool gone;      /* the client hung up: the request was cancelled */
    int64_t gone_at;
    int64_t prime_at; /* can_resume: still unanswered then, the answer
                         becomes a resumable event stream; 0: never */
} hreq;

/* The event stream's content: what is queued, else a keepalive comment
 * when one is due, else nothing yet: the connection is suspended until a
 * message (wake), the keepalive's time or a hang-up. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream *st = cls;
    th_mcp_http *f = st->s->f;
    ssize_t n = 0;
    int64_t ka = (int64_t)f->mc->keepalive_ms;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        if (st->dead) {
            n = MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
        if (st->head) {
            chunk *c = st->head;
            size_t k = c->len - c->off;
            if (k > max)
                k = max;
            memcpy(buf, c->data + c->off, k);
            c->off += k;
            st->queued -= k;
            if (c->off == c->len) {
                st->head = c->next;
                if (!st->head) {
                    st->tail = NULL;
                    if (st->done) /* (flush_listens may wait for it) */
                        pthread_cond_broadcast(&f->reaper_cv);
                }
                if (c->seq)
                    kept_put(st, c);
                else
                    free(c);
            }
            n = (ssize_t)k;
            st->ka_due = now_ms() + ka;
            break;
        }
        if (st->done || f->closing) {
            n = MHD_CONTENT_READER_END_OF_STREAM;
            break;
        }
        if (!st->hc || th_http_hung_up(st->hc)) {
            n = MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
        int64_t now = now_ms();
        if (st->resumable && now >= st->poll_due) {
            /* Polling: the client comes back with Last-Event-ID. */
            n = MHD_CONTENT_READER_END_OF_STREAM;
            break;
        }
        if (now >= st->ka_due) {
            static const char ping[] = ": keepalive\n\n";
            n = (ssize_t)(sizeof ping - 1 < max ? sizeof ping - 1 : max);
            memcpy(buf, ping, (size_t)n);
            st->ka_due = now + ka;
            break;
        }
        int64_t due = st->resumable && st->poll_due < st->ka_due
                          ? st->poll_due
                          : st->ka_due;
        th_http_conn *hc = st->hc;
        pthread_mutex_unlock(&f->mu);
        int r = th_http_suspend(hc, due);
        pthread_mutex_lock(&f->mu);
        if (r > 0) {
            n = 0; /* nothing yet; called again once resumed */
            break;
        }
        if (r < 0) {
            n = MHD_CONTENT_READER_END_OF_STREAM;
            break;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return n;
}

static void sse_free(void *cls)
{
    stream_release(cls);
}

/* st's event stream on c.  The POST's own stream of a resumable request
 * ends mcp.sse_poll after it opens (poll); a resumed one stays until
 * the response. */
static enum MHD_Result reply_sse(struct MHD_Connection *c, stream *st,
                                 const char *sid, bool poll)
{
    th_mcp_http *f = st->s->f;
    th_http_conn *hc = st->hc ? NULL : th_http_conn_ref(c);
    pthread_mutex_lock(&f->mu);
    if (hc)
        st->hc = hc;
    st->ka_due = now_ms() + (int64_t)f->mc->keepalive_ms;
    st->poll_due = poll ? now_ms() + (int64_t)f->mc->sse_poll_ms
                        : INT64_MAX;
    bool ok = st->hc != NULL;
    pthread_mutex_unlock(&f->mu);
    if (!ok) {
        stream_free(st);
        return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 16384, sse_read, st, sse_free);
    if (!r) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    if (sid)
        MHD_add_response_header(r, "Mcp-Session-Id", sid);
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

static void input(hsess *s, const char *text, size_t len)
{
    pthread_mutex_lock(&s->in_mu);
    th_mcp_session_input(s->m, text, len);
    pthread_mutex_unlock(&s->in_mu);
}

/* The POST's message, parsed once (do_post). */
static void input_value(hsess *s, json_t *msg)
{
    pthread_mutex_lock(&s->in_mu);
    th_mcp_session_input_value(s->m, msg);
    pthread_mutex_unlock(&s->in_mu);
}

static enum MHD_Result do_post_msg(th_mcp_http *f, struct MHD_Connection *c,
                                   hreq *q, th_mcp_plain *fc);
static enum MHD_Result post_wait(th_mcp_http *f, struct MHD_Connection *c,
                                 hreq *q);

/* A JSON-RPC id this front takes: an integer, or a string of at most
 * MAX_ID_LEN bytes (its stream key, quoted and escaped, then fits the
 * hang-up note of do_post_msg). */
static bool rpc_id_ok(const json_t *id)
{
    return json_is_integer(id) ||
           (json_is_string(id) && json_string_length(id) <= MAX_ID_LEN);
}

/* A plain tools/call read without a tree (th_mcp_plain_scan): the parts
 * of it do_post() looks at, {"id": ID, "method": "tools/call"}; NULL when
 * the body is not such a request. */
static json_t *plain_msg(const hreq *q, th_mcp_plain *fc)
{
    if (!q->body || th_mcp_plain_scan(q->body, q->len, fc) != 1)
        return NULL;
    json_t *msg = json_object();
    if (msg && (json_object_set_new(msg, "id", th_mcp_plain_id(fc)) != 0 ||
                json_object_set_new(msg, "method",
                                    json_string("tools/call")) != 0)) {
        json_decref(msg);
        msg = NULL;
    }
    return msg;
}

/* The POST's message to its session: a plain call as read, else the
 * parsed message. */
static void input_post(hsess *s, json_t *msg, th_mcp_plain *fc, bool plain,
                       const char *traceparent)
{
    pthread_mutex_lock(&s->in_mu);
    th_mcp_session_set_traceparent(s->m, traceparent);
    if (plain)
        th_mcp_session_input_plain(s->m, fc, json_object_get(msg, "id"));
    else
        th_mcp_session_input_value(s->m, msg);
    th_mcp_session_set_traceparent(s->m, NULL);
    pthread_mutex_unlock(&s->in_mu);
}

/* A whole POST body: one JSON-RPC message. */
static enum MHD_Result do_post(th_mcp_http *f, struct MHD_Connection *c,
                               hreq *q)
{
    th_mcp_plain fc;
    th_buf_init(&fc.args);
    enum MHD_Result rc = do_post_msg(f, c, q, &fc);
    th_buf_destroy(&fc.args);
    return rc;
}

/* do_post_msg: the body's shape before any tree is made of it: a body of
 * 4 MiB of empty arrays would cost jansson some 180 MB.  True when it is
 * refused (answered in *rc). */
static bool post_refuse_shape(th_mcp_http *f, struct MHD_Connection *c,
                              const hreq *q, enum MHD_Result *rc)
{
    int shape = mcp_json_measure(q->body ? q->body : "", q->len,
                                 f->mc->max_json_depth,
                                 f->mc->max_json_elements);
    if (!shape)
        return false;
    bool deep = shape == MCP_JSON_TOO_DEEP;
    char m[160];
    snprintf(m, sizeof m,
             deep ? "Invalid Request: the body nests deeper than %u "
                    "(mcp.max_json_depth)"
                  : "Invalid Request: the body holds more than %u "
                    "elements (mcp.max_json_elements)",
             deep ? f->mc->max_json_depth : f->mc->max_json_elements);
    if (log_due(f, deep ? 0 : 1))
        th_log_warn("mcp http: a POST body of %zu bytes of '%s' "
                    "refused: %s",
                    q->len, q->user, m + 17);
    th_stat_front_event(f->h, TOOLHOST_FRONT_MCP, TH_MCP_EV_TOO_LARGE);
    *rc = reply_rpc_error(c, 400, -32600, m);
    return true;
}

/* do_post_msg: the body as one JSON-RPC object (a plain call read without
 * a tree: *plain); NULL when refused (answered in *rc). */
static json_t *post_parse(th_mcp_http *f, struct MHD_Connection *c,
                          const hreq *q, th_mcp_plain *fc, bool *plain,
                          enum MHD_Result *rc)
{
    json_error_t je;
    json_t *msg = plain_msg(q, fc);
    *plain = msg != NULL;
    if (!msg)
        msg = json_loadb(q->body ? q->body : "", q->len, JSON_ALLOW_NUL,
                         &je);
    if (!msg || !json_is_object(msg))
        th_stat_front_event(f->h, TOOLHOST_FRONT_MCP, TH_MCP_EV_PROTOCOL);
    if (!msg) {
        *rc = reply_rpc_error(c, 400, -32700, "Parse error: not JSON");
        return NULL;
    }
    if (!json_is_object(msg)) {
        json_decref(msg);
        *rc = reply_rpc_error(c, 400, -32600,
                              "Invalid Request: one JSON-RPC message per "
                              "POST (batches are not supported)");
        return NULL;
    }
    return msg;
}

/* do_post_msg: what the message is (*is_request: a request, with an id;
 * *is_init: initialize).  False when refused (answered in *rc; msg kept:
 * the caller's). */
static bool post_classify(th_mcp_http *f, struct MHD_Connection *c,
                          json_t *msg, bool *is_request, bool *is_init,
                          enum MHD_Result *rc)
{
    json_t *method = json_object_get(msg, "method");
    json_t *id = json_object_get(msg, "id");
    *is_request = json_is_string(method) && id && !json_is_null(id);
    *is_init = *is_request &&
               strcmp(json_string_value(method), "initialize") == 0;
    bool is_reply = !method && id &&
                    (json_object_get(msg, "result") ||
                     json_object_get(msg, "error"));
    if (!method && !is_reply) {
        *rc = reply_rpc_error(c, 400, -32600,
                              "Invalid Request: not a request, a "
                              "notification or a response");
        return false;
    }
    /* An id is a string or an integer (MCP: never null), checked before
     * any session or stream exists: the core answers another id with id
     * null and never ends the request, which would leave this handler
     * waiting on a stream keyed by it. */
    if (id && !rpc_id_ok(id)) {
        th_stat_front_event(f->h, TOOLHOST_FRONT_MCP, TH_MCP_EV_PROTOCOL);
        *rc = reply_rpc_error(c, 400, -32600,
                              "Invalid Request: id must be an integer "
                              "or a string of at most 128 bytes");
        return false;
    }
    return true;
}

/* do_post_msg: the POST's session, opened by initialize or named by its
 * header (a reference); NULL when refused (answered in *rc). */
static hsess *post_session(th_mcp_http *f, struct MHD_Connection *c,
                           const hreq *q, bool is_init, enum MHD_Result *rc)
{
    const char *sid = hdr(c, "Mcp-Session-Id");
    hsess *s = NULL;
    if (is_init) {
        if (sid) {
            *rc = reply_rpc_error(c, 400, -32600,
                                  "Bad Request: initialize starts a "
                                  "session; send it without "
                                  "Mcp-Session-Id");
            return NULL;
        }
        unsigned status;
        s = sess_new(f, q->user, &status, false);
        if (!s)
            *rc = reply_rpc_error(c, status, -32603,
                                  status == 503
                                      ? "Server busy: too many sessions"
                                      : "Cannot open a session");
        return s;
    }
    if (!sid) {
        *rc = reply_rpc_error(c, 400, -32600,
                              "Bad Request: Mcp-Session-Id header is "
                              "required");
        return NULL;
    }
    s = sess_get(f, sid, q->user);
    if (!s)
        *rc = reply_rpc_error(c, 404, -32001, "Session not found");
    return s;
}

/* do_post_msg: a request (msg, its id; the session's reference s and msg
 * are taken): its stream keyed by the id, the message to the session,
 * then the wait for its first message (post_wait). */
static enum MHD_Result post_request(th_mcp_http *f, struct MHD_Connection *c,
                                    hreq *q, hsess *s, json_t *msg,
                                    th_mcp_plain *fc, bool plain, bool is_init)
{
    json_t *id = json_object_get(msg, "id");
    char *key = json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY);
    pthread_mutex_lock(&f->mu);
    stream *st = key && !find_post(s, key) ? stream_new(s, ST_POST, key)
                                           : NULL;
    if (st)
        st->id = json_incref(id);
    /* A 2026-07-28 request's session is no one's to come back to: its
     * stream cannot be resumed. */
    bool listed = s->in_table;
    pthread_mutex_unlock(&f->mu);
    if (!st) {
        bool dup = key != NULL;
        free(key);
        json_decref(msg);
        sess_unref(s);
        return dup ? reply_rpc_error(c, 409, -32600,
                                     "Invalid Request: a request with this "
                                     "id is in flight")
                   : MHD_NO;
    }
    const char *acc = hdr(c, MHD_HTTP_HEADER_ACCEPT);
    char tag[sizeof st->tag] = "";
    if (f->mc->sse_poll_ms && acc && strstr(acc, "text/event-stream") &&
        !is_init && listed && random_hex(tag, sizeof tag) == 0)
        q->prime_at = now_ms() + (int64_t)f->mc->sse_poll_ms;
    th_http_conn *hc = th_http_conn_ref(c);
    pthread_mutex_lock(&f->mu);
    st->hc = hc; /* woken by every message from here on */
    if (q->prime_at) {
        st->can_resume = true;
        memcpy(st->tag, tag, sizeof tag);
    }
    pthread_mutex_unlock(&f->mu);
    q->st = st;
    q->s = s;
    q->is_init = is_init;
    input_post(s, msg, fc, plain,
               MHD_lookup_connection_value(c, MHD_HEADER_KIND, "traceparent"));
    json_decref(msg);
    return post_wait(f, c, q);
}

/* ---- 2026-07-28: a request without a session ---------------------------- */

/* The revision a message's _meta envelope names (params._meta
 * ["io.modelcontextprotocol/protocolVersion"]), or NULL. */
static const char *envelope_version(const json_t *msg)
{
    json_t *meta = json_object_get(json_object_get(msg, "params"), "_meta");
    return json_string_value(
        json_object_get(meta, "io.modelcontextprotocol/protocolVersion"));
}

/* A 2026-07-28-era request whose envelope names a revision not served:
 * 400 with -32022 and what is served, from which the client picks
 * (the core says the same on stdio). */
static enum MHD_Result reply_unsupported(struct MHD_Connection *c,
                                         const json_t *msg, const char *ev)
{
    json_t *sv = json_array();
    for (size_t i = 0; sv && mcp_modern_versions[i]; i++)
        json_array_append_new(sv, json_string(mcp_modern_versions[i]));
    for (size_t i = 0; sv && mcp_versions[i]; i++)
        json_array_append_new(sv, json_string(mcp_versions[i]));
    json_t *id = json_object_get(msg, "id");
    json_t *e = json_pack(
        "{s:s, s:O, s:{s:i, s:s, s:{s:o*, s:s*}}}", "jsonrpc", "2.0", "id",
        id ? id : json_null(), "error", "code", -32022, "message",
        "Unsupported protocol version: see error.data.supported",
        "data", "supported", sv, "requested",
        strlen(ev) <= 32 ? ev : NULL);
    char *body = e ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    if (!body)
        return MHD_NO;
    enum MHD_Result rc =
        th_http_reply(c, 400, "application/json", body, NULL, NULL);
    free(body);
    return rc;
}

/* Whether the Mcp-Name header h names `want`: as it is, or as
 * =?base64?...?= (what a client sends for a value that is not printable
 * ASCII without spaces at its ends). */
static bool name_header_is(const char *h, const char *want)
{
    size_t n = strlen(h);
    if (n < 11 || strncmp(h, "=?base64?", 9) != 0 ||
        strcmp(h + n - 2, "?=") != 0)
        return strcmp(h, want) == 0;
    size_t in = n - 11, cap = BASE64_DECODE_LENGTH(in) + 1, out = 0;
    uint8_t *d = malloc(cap);
    struct base64_decode_ctx ctx;
    base64_decode_init(&ctx);
    bool ok = d && base64_decode_update(&ctx, &out, d, in, h + 9) &&
              base64_decode_final(&ctx) && out == strlen(want) &&
              memcmp(d, want, out) == 0;
    free(d);
    return ok;
}

/* The headers of a 2026-07-28 request against its body (the revision's
 * HTTP binding: MCP-Protocol-Version and Mcp-Method on every request,
 * Mcp-Name for tools/call, prompts/get, resources/read): a proxy routes
 * on them, so a header that says something else than the body is
 * refused, 400 with -32020.  True when refused (answered in *rc). */
static bool refuse_modern_headers(th_mcp_http *f, struct MHD_Connection *c,
                                  const json_t *msg, enum MHD_Result *rc)
{
    const char *ev = envelope_version(msg);
    const char *hv = hdr(c, "MCP-Protocol-Version");
    const char *method = json_string_value(json_object_get(msg, "method"));
    const char *hm = hdr(c, "Mcp-Method");
    json_t *params = json_object_get(msg, "params");
    const char *field = strcmp(method, "tools/call") == 0 ||
                                strcmp(method, "prompts/get") == 0
                            ? "name"
                        : strcmp(method, "resources/read") == 0 ? "uri"
                                                                : NULL;
    const char *want =
        field ? json_string_value(json_object_get(params, field)) : NULL;
    const char *hn = hdr(c, "Mcp-Name");
    const char *why = NULL;
    int code = -32020;
    if (!ev) {
        why = "Invalid params: MCP-Protocol-Version names a 2026-07-28 "
              "revision but params._meta has no "
              "io.modelcontextprotocol/protocolVersion";
        code = -32602;
    } else if (!hv) {
        why = "Header mismatch: a 2026-07-28 request needs the "
              "MCP-Protocol-Version header";
    } else if (strcmp(hv, ev) != 0) {
        why = "Header mismatch: MCP-Protocol-Version differs from "
              "params._meta's io.modelcontextprotocol/protocolVersion";
    } else if (!hm || strcmp(hm, method) != 0) {
        why = hm ? "Header mismatch: Mcp-Method differs from the body's "
                   "method"
                 : "Header mismatch: a 2026-07-28 request needs the "
                   "Mcp-Method header";
    } else if (want && (!hn || !name_header_is(hn, want))) {
        why = hn ? "Header mismatch: Mcp-Name differs from the body's "
                   "params.name or params.uri"
                 : "Header mismatch: this request needs the Mcp-Name "
                   "header";
    }
    if (!why)
        return false;
    th_stat_front_event(f->h, TOOLHOST_FRONT_MCP, TH_MCP_EV_PROTOCOL);
    th_log_info("mcp http: a 2026-07-28 request refused: %s", why);
    *rc = reply_rpc_error(c, 400, code, why);
    return true;
}

/* A session for one 2026-07-28 request (a reference): opened under the
 * same budgets as any (mcp.max_sessions, max_sessions_per_user, counted
 * until it ends), then moved from the table to f->one_req at once: no id
 * names it, the request's stream holds it, and it ends with the request.
 * NULL when refused (answered in *rc). */
static hsess *sess_for_request(th_mcp_http *f, struct MHD_Connection *c,
                               const hreq *q, enum MHD_Result *rc)
{
    unsigned status;
    hsess *s = sess_new(f, q->user, &status, true);
    if (!s) {
        *rc = reply_rpc_error(c, status, -32603,
                              status == 503
                                  ? "Server busy: too many sessions"
                                  : "Cannot open a session");
        return NULL;
    }
    pthread_mutex_lock(&f->mu);
    for (hsess **pp = &f->sessions; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    s->in_table = false;
    s->one_request = true;
    s->refs--; /* the table's (the caller's is left) */
    s->next = f->one_req;
    f->one_req = s;
    pthread_mutex_unlock(&f->mu);
    return s;
}

static enum MHD_Result do_post_msg(th_mcp_http *f, struct MHD_Connection *c,
                                   hreq *q, th_mcp_plain *fc)
{
    /* A session named in the header is looked up before the body is
     * parsed: a client without one of its own pays no parse. */
    const char *sid0 = hdr(c, "Mcp-Session-Id");
    if (sid0) {
        hsess *s0 = sess_get(f, sid0, q->user);
        if (!s0)
            return reply_rpc_error(c, 404, -32001, "Session not found");
        sess_unref(s0);
    }
    enum MHD_Result rc;
    if (post_refuse_shape(f, c, q, &rc))
        return rc;
    bool plain, is_request, is_init;
    json_t *msg = post_parse(f, c, q, fc, &plain, &rc);
    if (!msg)
        return rc;
    hsess *s = NULL;
    if (!post_classify(f, c, msg, &is_request, &is_init, &rc)) {
        json_decref(msg);
        return rc;
    }
    /* 2026-07-28 (docs/mcp.md, "Protocol revisions"): a message without
     * Mcp-Session-Id whose envelope (or header) names that era is served
     * on a session of its own. */
    bool modern = !sid0 && (envelope_version(msg) ||
                            version_modern(hdr(c, "MCP-Protocol-Version")));
    if (modern && !is_request) {
        /* Nothing to tell: no session, no call of its (a hang-up
         * cancels a 2026-07-28 call). */
        json_decref(msg);
        return th_http_reply(c, MHD_HTTP_ACCEPTED, NULL, "", NULL, NULL);
    }
    if (modern && !refuse_modern_headers(f, c, msg, &rc)) {
        const char *ev = envelope_version(msg); /* there: checked */
        if (!version_modern(ev) || !mcp_version_served(ev))
            rc = reply_unsupported(c, msg, ev);
        else
            s = sess_for_request(f, c, q, &rc);
    } else if (!modern) {
        s = post_session(f, c, q, is_init, &rc);
    }
    if (!s) {
        json_decref(msg);
        return rc;
    }
    if (!is_request) {
        input_value(s, msg);
        json_decref(msg);
        rc = th_http_reply(c, MHD_HTTP_ACCEPTED, NULL, "", NULL, NULL);
        sess_unref(s);
        return rc;
    }
    return post_request(f, c, q, s, msg, fc, plain, is_init);
}

/* The notifications/cancelled of a POST's request whose client hung up,
 * in note (its length, or 0); logged.  f->mu held. */
static int hangup_note(hsess *s, stream *st, char *note, size_t cap)
{
    int k = snprintf(note, cap,
                     "{\"jsonrpc\":\"2.0\",\"method\":"
                     "\"notifications/cancelled\",\"params\":{"
                     "\"requestId\":%s,\"reason\":\"the client "
                     "hung up\"}}",
                     st->key);
    th_log_info("mcp http: session %.8s: the client of request %s hung up: "
                "cancelled",
                s->id, st->key);
    return k > 0 && (size_t)k < cap ? k : 0;
}

/* post_wait: the response as application/json (*body handed to
 * libmicrohttpd: NULL then). */
static enum MHD_Result reply_json(struct MHD_Connection *c, char **body,
                                  size_t blen, const char *sid_out)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        blen, *body, MHD_RESPMEM_MUST_FREE);
    if (!r)
        return MHD_NO;
    *body = NULL;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/json");
    if (sid_out)
        MHD_add_response_header(r, "Mcp-Session-Id", sid_out);
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

/* post_wait: a POST whose request is over without a response to send
 * (lost without memory, the front stopping, or cancelled). */
static enum MHD_Result reply_unanswered(th_mcp_http *f,
                                        struct MHD_Connection *c, bool lost,
                                        bool stopping)
{
    if (lost)
        return reply_rpc_error(c, 500, -32603, "Internal error: out of "
                               "memory; the response is lost");
    if (f->closing || stopping) {
        th_stat_front_event(f->h, TOOLHOST_FRONT_MCP, TH_MCP_EV_SHUTDOWN);
        return reply_rpc_error(c, 503, -32603, "Server shutting down");
    }
    /* Over without a response (cancelled). */
    return th_http_reply(c, MHD_HTTP_ACCEPTED, NULL, "", NULL, NULL);
}

/* post_wait, f->mu held: a copy of the stream's first message (the
 * response, sent as JSON), NULL without memory. */
static char *first_copy(const stream *st, size_t *blen)
{
    const chunk *ch = st->head;
    char *body = malloc(ch->len + 1);
    if (body) {
        memcpy(body, ch->data, ch->len);
        *blen = ch->len;
    }
    return body;
}

/* A POST's wait for its first message (JSON when it is the response, SSE
 * when something comes first): its connection suspends until a message,
 * the request's end, a hang-up or the front closing wakes it, and
 * libmicrohttpd then calls on_request() again, which comes back here.  A
 * client that hangs up meanwhile (a long call without progress) cancels
 * its request, as notifications/cancelled would: nothing runs for no
 * one; if the request does not end within HANGUP_GRACE_MS it is left
 * behind (orphan). */
static enum MHD_Result post_wait(th_mcp_http *f, struct MHD_Connection *c,
                                 hreq *q)
{
    stream *st = q->st;
    hsess *s = q->s;
    bool left = false, stopping = false;
    enum MHD_Result rc;
    pthread_mutex_lock(&f->mu);
    while (!st->first_seen && !st->done && !st->dead && !f->closing) {
        int64_t now = now_ms();
        if (q->gone && now - q->gone_at >= HANGUP_GRACE_MS) {
            st->orphan = st->dead = true;
            left = true;
            break;
        }
        if (st->hc && !q->gone && th_http_hung_up(st->hc)) {
            q->gone = true;
            q->gone_at = now;
            char note[160 + MAX_KEY_LEN];
            int k = hangup_note(s, st, note, sizeof note);
            pthread_mutex_unlock(&f->mu);
            if (k > 0)
                input(s, note, (size_t)k);
            pthread_mutex_lock(&f->mu);
            continue;
        }
        if (q->prime_at && !q->gone && now >= q->prime_at) {
            prime(st); /* ends the wait: answered as an event stream */
            continue;
        }
        th_http_conn *hc = st->hc;
        int64_t until = q->gone ? q->gone_at + HANGUP_GRACE_MS : q->prime_at;
        pthread_mutex_unlock(&f->mu);
        int r = hc ? th_http_suspend(hc, until) : -1;
        if (r > 0)
            return MHD_YES; /* called again once resumed */
        pthread_mutex_lock(&f->mu);
        if (r < 0) {
            stopping = true;
            break;
        }
    }
    q->st = NULL;
    q->s = NULL;
    bool json = st->first_seen && st->first_is_response && st->head;
    bool lost = st->lost && !json;
    bool sse = st->first_seen && st->sse && !st->dead;
    size_t blen = 0;
    char *body = json ? first_copy(st, &blen) : NULL;
    th_http_conn *drop = NULL;
    if (left) {
        /* Logged under f->mu: request_done() may free the orphan. */
        th_log_warn("mcp http: session %.8s: request %s still runs %d ms "
                    "after its client hung up; its handler leaves it",
                    s->id, st->key, HANGUP_GRACE_MS);
        s->refs--; /* the orphan's; the handler's is still held */
        drop = st->hc;
        st->hc = NULL;
    }
    pthread_mutex_unlock(&f->mu);
    if (left) {
        th_http_conn_unref(drop);
        sess_unref(s);
        return MHD_NO;
    }
    const char *sid_out = q->is_init ? s->id : NULL;
    if (sse) {
        rc = reply_sse(c, st, sid_out, true);
    } else {
        if (json && body)
            rc = reply_json(c, &body, blen, sid_out);
        else
            rc = reply_unanswered(f, c, lost, stopping);
        free(body);
        stream_free(st);
    }
    sess_unref(s);
    return rc;
}

/* A GET with Last-Event-ID TAG-SEQ: the parked stream TAG of this
 * session (found by the session id and the token's user, so another
 * session's or user's id names nothing here) goes on on this connection,
 * from the event after SEQ: the kept ones again, then the new ones. */
static enum MHD_Result do_resume(th_mcp_http *f, struct MHD_Connection *c,
                                 hsess *s, const char *last)
{
    char tag[sizeof ((stream *)0)->tag];
    size_t tl = strspn(last, "0123456789abcdef");
    char *end = NULL;
    errno = 0;
    unsigned long long seq =
        tl == sizeof tag - 1 && last[tl] == '-' &&
                last[tl + 1] >= '0' && last[tl + 1] <= '9'
            ? strtoull(last + tl + 1, &end, 10)
            : 0;
    if (!end || *end || errno) {
        th_stat_front_event(f->h, TOOLHOST_FRONT_MCP, TH_MCP_EV_PROTOCOL);
        return reply_rpc_error(c, 400, -32600,
                               "Bad Request: Last-Event-ID is not an event "
                               "id of this server");
    }
    memcpy(tag, last, tl);
    tag[tl] = '\0';
    pthread_mutex_lock(&f->mu);
    stream *st = NULL;
    /* an orphan (dropped at sse_replay_time while its call runs on) is
     * gone for its client: 404, as once its call ends */
    for (stream *x = s->streams; x && !st; x = x->next)
        if (x->resumable && !x->orphan && strcmp(x->tag, tag) == 0)
            st = x;
    unsigned status = 0;
    const char *why = NULL;
    if (!st || seq > st->seq) {
        status = 404; /* none of this session's, or never sent */
        why = "Not Found: no event stream of this session has that "
              "Last-Event-ID (ended, or mcp.sse_replay_time passed)";
    } else if (!st->parked) {
        status = 409;
        why = "Conflict: that event stream is open on another connection";
    } else {
        /* Events after seq: the kept ones past it, then the queue.  A
         * gap (older ones dropped at mcp.sse_replay_events) cannot be
         * replayed. */
        while (st->kept && st->kept->seq <= seq) {
            chunk *o = st->kept;
            st->kept = o->next;
            st->n_kept--;
            st->kept_bytes -= o->len;
            free(o);
        }
        if (!st->kept)
            st->kept_tail = NULL;
        chunk *first = st->kept ? st->kept : st->head;
        while (first && !first->seq)
            first = first->next;
        uint64_t next = first ? first->seq : st->seq + 1;
        if (st->dead || next != seq + 1) {
            status = 410;
            why = "Gone: events after that Last-Event-ID are no longer kept "
                  "(mcp.sse_replay_events, mcp.max_queued)";
        }
    }
    if (status) {
        pthread_mutex_unlock(&f->mu);
        th_log_info("mcp http: session %.8s: a resumption refused (%u)",
                    s->id, status);
        return reply_rpc_error(c, status, -32600, why);
    }
    if (st->kept) {
        st->kept_tail->next = st->head;
        if (!st->head)
            st->tail = st->kept_tail;
        st->head = st->kept;
        st->queued += st->kept_bytes;
        st->kept = st->kept_tail = NULL;
        st->n_kept = st->kept_bytes = 0;
    }
    st->parked = false;
    s->refs++; /* the stream's again */
    pthread_mutex_unlock(&f->mu);
    th_log_debug("mcp http: session %.8s: stream %s resumed after event "
                 "%llu", s->id, st->tag, seq);
    return reply_sse(c, st, NULL, false);
}

static enum MHD_Result do_get(th_mcp_http *f, struct MHD_Connection *c,
                              hreq *q)
{
    const char *acc = hdr(c, MHD_HTTP_HEADER_ACCEPT);
    if (acc && !strstr(acc, "text/event-stream") && !strstr(acc, "*/*"))
        return th_http_reply(c, MHD_HTTP_NOT_ACCEPTABLE, "text/plain",
                             "GET opens an event stream: accept "
                             "text/event-stream\n",
                             NULL, NULL);
    const char *sid = hdr(c, "Mcp-Session-Id");
    if (!sid)
        return reply_rpc_error(c, 400, -32600,
                               "Bad Request: Mcp-Session-Id header is "
                               "required");
    hsess *s = sess_get(f, sid, q->user);
    if (!s)
        return reply_rpc_error(c, 404, -32001, "Session not found");
    const char *last = hdr(c, "Last-Event-ID");
    if (last) {
        enum MHD_Result rc = do_resume(f, c, s, last);
        sess_unref(s);
        return rc;
    }
    pthread_mutex_lock(&f->mu);
    stream *st = NULL;
    bool full = s->n_get >= f->mc->max_streams;
    if (!full)
        st = stream_new(s, ST_GET, NULL);
    pthread_mutex_unlock(&f->mu);
    enum MHD_Result rc;
    if (full) {
        th_log_warn("mcp http: session %.8s: a GET stream refused: %u open "
                    "(mcp.max_streams)",
                    s->id, f->mc->max_streams);
        th_stat_front_event(f->h, TOOLHOST_FRONT_MCP, TH_MCP_EV_MAX_STREAMS);
        rc = th_http_reply(c, 429, "text/plain",
                           "too many event streams on this session\n", NULL,
                           NULL);
    } else if (!st) {
        rc = MHD_NO;
    } else {
        rc = reply_sse(c, st, NULL, false);
    }
    sess_unref(s);
    return rc;
}

static enum MHD_Result do_delete(th_mcp_http *f, struct MHD_Connection *c,
                                 hreq *q)
{
    const char *sid = hdr(c, "Mcp-Session-Id");
    if (!sid)
        return reply_rpc_error(c, 400, -32600,
                               "Bad Request: Mcp-Session-Id header is "
                               "required");
    hsess *s = sess_get(f, sid, q->user);
    if (!s)
        return reply_rpc_error(c, 404, -32001, "Session not found");
    pthread_mutex_lock(&f->mu);
    bool listed = s->in_table;
    if (listed)
        sess_unlist(s);
    pthread_mutex_unlock(&f->mu);
    if (listed) {
        th_log_info("mcp http: session %.8s of '%s' ended by the client",
                    s->id, s->user);
        sess_unref(s); /* the table's */
    }
    enum MHD_Result rc = th_http_reply(c, MHD_HTTP_OK, NULL, "", NULL, NULL);
    sess_unref(s);
    return rc;
}

/* on_request, a request's first call: who may ask (Origin, Host, the
 * bearer token and its toolsets; q->user set).  True when refused
 * (answered in *rc). */
static bool refuse_access(th_mcp_http *f, struct MHD_Connection *c, hreq *q,
                          enum MHD_Result *rc)
{
    const char *origin = hdr(c, "Origin");
    if (!origin_ok(f, origin)) {
        th_log_info("mcp http: a request from Origin '%.100s' refused "
                    "(not loopback, not in mcp.allow_origins)",
                    origin);
        th_stat_front_event(f->h, TOOLHOST_FRONT_MCP, TH_MCP_EV_FORBIDDEN);
        *rc = th_http_reply(c, MHD_HTTP_FORBIDDEN, "text/plain",
                            "origin not allowed\n", NULL, NULL);
        return true;
    }
    const char *host = hdr(c, MHD_HTTP_HEADER_HOST);
    if (!origin && !host_ok(f, c, host)) {
        if (log_due(f, 2))
            th_log_warn("mcp http: a request with Host '%.100s' and no "
                        "Origin refused (not loopback, not the "
                        "listening address, not a host of "
                        "mcp.allow_origins; DNS rebinding?)",
                        host);
        th_stat_front_event(f->h, TOOLHOST_FRONT_MCP,
                            TH_MCP_EV_FORBIDDEN);
        *rc = reply_rpc_error(c, 403, -32600,
                              "Forbidden: the Host header names "
                              "neither this server nor a host of "
                              "mcp.allow_origins");
        return true;
    }
    bool given;
    int orc;
    const char *why;
    q->user = token_user(f, c, q->oauth_user, sizeof q->oauth_user, &given,
                         &orc, &why);
    if (!q->user) {
        char wa[1400], body[160];
        www_auth(f, q->e, given, orc, why, wa, sizeof wa);
        if (given && f->mc->oauth.on) {
            if (log_due(f, 3))
                th_log_info("mcp http: a bearer token refused: %s", why);
            snprintf(body, sizeof body, "%s: %s\n",
                     orc == TH_OAUTH_SCOPE ? "insufficient scope"
                                           : "invalid token", why);
        } else {
            th_log_debug("mcp http: a request %s bearer token refused",
                         given ? "with an unknown" : "without a");
            snprintf(body, sizeof body, "%s",
                     given ? "invalid token\n"
                           : "a bearer token is required\n");
        }
        bool scope = given && orc == TH_OAUTH_SCOPE;
        th_stat_front_event(f->h, TOOLHOST_FRONT_MCP,
                            scope ? TH_MCP_EV_FORBIDDEN
                                  : TH_MCP_EV_UNAUTHORIZED);
        *rc = th_http_reply(c, scope ? MHD_HTTP_FORBIDDEN
                                     : MHD_HTTP_UNAUTHORIZED,
                            "text/plain", body,
                            MHD_HTTP_HEADER_WWW_AUTHENTICATE, wa);
        return true;
    }
    if (!user_has_toolset(f, q->user)) {
        th_log_info("mcp http: the token of '%s' refused: no toolset "
                    "allows that user",
                    q->user);
        th_stat_front_event(f->h, TOOLHOST_FRONT_MCP, TH_MCP_EV_FORBIDDEN);
        *rc = th_http_reply(c, MHD_HTTP_FORBIDDEN, "text/plain",
                            "no toolset allows this user\n", NULL,
                            NULL);
        return true;
    }
    return false;
}

/* on_request, a POST's first call: its media type and declared length,
 * before any body is read.  True when refused (answered in *rc). */
static bool refuse_post_headers(th_mcp_http *f, struct MHD_Connection *c,
                                enum MHD_Result *rc)
{
    const char *ct = hdr(c, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!json_media_type(ct)) {
        *rc = th_http_reply(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                            "text/plain",
                            "POST a JSON-RPC message as "
                            "application/json\n",
                            NULL, NULL);
        return true;
    }
    const char *cl = hdr(c, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > f->mc->max_body) {
        /* Answered before the body is read (the connection then
         * closes). */
        th_log_warn("mcp http: a POST body of %s bytes refused "
                    "(over %" PRIu64 ", mcp.max_body)",
                    cl, f->mc->max_body);
        th_stat_front_event(f->h, TOOLHOST_FRONT_MCP, TH_MCP_EV_TOO_LARGE);
        *rc = reply_rpc_error(c, 413, -32600,
                              "Request too large (mcp.max_body)");
        return true;
    }
    return false;
}

/* on_request: a piece of a POST's body (n bytes at upload) appended; past
 * mcp.max_body only remembered as too big. */
static enum MHD_Result take_upload(th_mcp_http *f, struct MHD_Connection *c,
                                   hreq *q, const char *upload, size_t n)
{
    if (q->too_big || q->len + n > f->mc->max_body) {
        q->too_big = true;
        return MHD_YES;
    }
    if (q->len + n + 1 > q->cap) {
        /* The declared length at once (it was checked against
         * max_body), else doubling. */
        const char *cl = hdr(c, MHD_HTTP_HEADER_CONTENT_LENGTH);
        size_t want = cl && !q->cap ? (size_t)strtoull(cl, NULL, 10) + 1
                                    : 0;
        size_t cap = want > q->len + n ? want : q->cap ? q->cap : 4096;
        while (cap < q->len + n + 1)
            cap *= 2;
        char *b = realloc(q->body, cap);
        if (!b)
            return MHD_NO;
        q->body = b;
        q->cap = cap;
    }
    memcpy(q->body + q->len, upload, n);
    q->len += n;
    return MHD_YES;
}

static enum MHD_Result on_request(void *ud, struct MHD_Connection *c,
                                  const char *method, const char *upload,
                                  size_t *upload_size, void **req_cls)
{
    entry *e = ud;
    th_mcp_http *f = e->f;
    hreq *q = *req_cls;
    if (!q) {
        q = calloc(1, sizeof *q);
        if (!q)
            return MHD_NO;
        q->e = e;
        *req_cls = q;
        /* The checks, in order, before any body is read. */
        bool post = strcmp(method, "POST") == 0;
        if (!post && strcmp(method, "GET") != 0 &&
            strcmp(method, "DELETE") != 0)
            return th_http_reply(c, MHD_HTTP_METHOD_NOT_ALLOWED,
                                 "text/plain", "use POST, GET or DELETE\n",
                                 MHD_HTTP_HEADER_ALLOW, "GET, POST, DELETE");
        enum MHD_Result rc;
        if (refuse_access(f, c, q, &rc))
            return rc;
        /* A later revision than those served is the envelope's to say
         * (-32022 with the list, do_post_msg): a client picks again. */
        const char *pv = hdr(c, "MCP-Protocol-Version");
        if (!version_ok(pv) && !version_modern(pv))
            return reply_rpc_error(c, 400, -32600,
                                   "Bad Request: unsupported "
                                   "MCP-Protocol-Version");
        if (post && refuse_post_headers(f, c, &rc))
            return rc;
        q->checked = true;
        return MHD_YES;
    }
    if (q->st) /* a POST resumed: its answer may be in */
        return post_wait(f, c, q);
    if (!q->checked) { /* answered: drop the body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        return take_upload(f, c, q, upload, n);
    }
    q->checked = false; /* answered once */
    if (strcmp(method, "POST") == 0) {
        if (q->too_big) {
            th_log_warn("mcp http: a POST body over %" PRIu64
                        " bytes refused (mcp.max_body)",
                        f->mc->max_body);
            th_stat_front_event(f->h, TOOLHOST_FRONT_MCP, TH_MCP_EV_TOO_LARGE);
            return reply_rpc_error(c, 413, -32600,
                                   "Request too large (mcp.max_body)");
        }
        return do_post(f, c, q);
    }
    if (strcmp(method, "GET") == 0)
        return do_get(f, c, q);
    return do_delete(f, c, q);
}

static void on_completed(void *ud, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode why)
{
    th_mcp_http *f = ((entry *)ud)->f;
    (void)c;
    if (why == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED)
        th_log_warn("mcp http: a client took in nothing for %" PRIu64
                    " ms (mcp.client_timeout): its connection is closed",
                    f->mc->client_timeout_ms);
    hreq *q = *req_cls;
    if (q && q->st) {
        /* Over while its POST waited: the client left (libmicrohttpd saw
         * the end before the handler could suspend) or the server stops.
         * The stream goes, or stays as an orphan while its request runs;
         * a request left by its client is cancelled, as in post_wait(). */
        stream *st = q->st;
        hsess *s = q->s;
        th_http_conn *drop = NULL;
        char note[160 + MAX_KEY_LEN];
        int k = 0;
        pthread_mutex_lock(&f->mu);
        bool orphan = !st->done;
        if (orphan) {
            if (!q->gone && !f->closing &&
                why != MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN)
                k = hangup_note(s, st, note, sizeof note);
            st->orphan = st->dead = true;
            s->refs--; /* the stream's; q's is still held */
            drop = st->hc;
            st->hc = NULL;
        }
        pthread_mutex_unlock(&f->mu);
        th_http_conn_unref(drop);
        if (k > 0)
            input(s, note, (size_t)k);
        if (!orphan)
            stream_free(st);
        sess_unref(s);
    }
    if (q) {
        free(q->body);
        free(q);
        *req_cls = NULL;
    }
}

/* ---- the front --------------------------------------------------------------------- */

static void mcfg_free(th_mcp_cfg *m)
{
    for (size_t i = 0; i < m->n_tokens; i++)
        free(m->tokens[i].user);
    free(m->tokens);
    for (size_t i = 0; i < m->n_allow_origins; i++)
        free(m->allow_origins[i]);
    free(m->allow_origins);
    free(m->tls_cert);
    free(m->tls_key);
    free(m->tls_priorities);
    free(m->oauth.required_scope);
    memset(m, 0, sizeof *m);
}

/* The settings and tokens, copied out of the config. */
static int mcfg_copy(th_mcp_cfg *d, const th_mcp_cfg *s)
{
    *d = *s;
    d->tokens = NULL;
    d->n_tokens = 0;
    d->allow_origins = NULL;
    d->n_allow_origins = 0;
    d->tls_cert = d->tls_key = d->tls_priorities = NULL;
    d->listen_http = d->listen_metrics = NULL; /* the config's, at start */
    memset(&d->oauth, 0, sizeof d->oauth); /* th_oauth_new copies it */
    d->oauth.on = s->oauth.on;
    if (s->oauth.required_scope &&
        !(d->oauth.required_scope = strdup(s->oauth.required_scope)))
        return -1;
    d->n_listen_http = d->n_listen_metrics = 0;
    if (s->n_tokens &&
        !(d->tokens = calloc(s->n_tokens, sizeof *d->tokens)))
        return -1;
    for (size_t i = 0; i < s->n_tokens; i++) {
        const th_mcp_token_cfg *st = &s->tokens[i];
        if (st->disabled) {
            th_log_warn("mcp http: the token of user '%s' is off: "
                        "environment variable '%s' is not set",
                        st->user, st->env);
            continue;
        }
        th_mcp_token_cfg *t = &d->tokens[d->n_tokens];
        memcpy(t->sha256, st->sha256, sizeof t->sha256);
        t->uid = st->uid;
        t->has_uid = st->has_uid;
        if (!(t->user = strdup(st->user)))
            return -1;
        d->n_tokens++;
    }
    if (s->n_allow_origins &&
        !(d->allow_origins =
              calloc(s->n_allow_origins, sizeof *d->allow_origins)))
        return -1;
    for (; d->n_allow_origins < s->n_allow_origins; d->n_allow_origins++)
        if (!(d->allow_origins[d->n_allow_origins] =
                  strdup(s->allow_origins[d->n_allow_origins])))
            return -1;
    if ((s->tls_cert && !(d->tls_cert = strdup(s->tls_cert))) ||
        (s->tls_key && !(d->tls_key = strdup(s->tls_key))) ||
        (s->tls_priorities &&
         !(d->tls_priorities = strdup(s->tls_priorities))))
        return -1;
    return 0;
}

/* ---- OAuth: the protected resource's metadata (RFC 9728) ------------------- */

#define WELL_KNOWN "/.well-known/oauth-protected-resource"

/* GET of an entry's metadata document: public, no token. */
static enum MHD_Result on_metadata(void *ud, struct MHD_Connection *c,
                                   const char *method, const char *upload,
                                   size_t *upload_size, void **req_cls)
{
    entry *e = ud;
    (void)upload;
    (void)upload_size;
    (void)req_cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return th_http_reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain",
                             "use GET\n", MHD_HTTP_HEADER_ALLOW, "GET");
    if (!atomic_load(&e->f->ready))
        return th_http_reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
                             "starting\n", NULL, NULL);
    /* Public metadata: a browser-based client may read it from anywhere. */
    return th_http_reply(c, MHD_HTTP_OK, "application/json", e->meta_doc,
                         "Access-Control-Allow-Origin", "*");
}

/* The path of the metadata document of a resource whose path is `path`
 * (RFC 9728 section 3.1: the well-known prefix, then the resource's
 * path unless it is "/"). */
static void meta_path(const char *path, char *out, size_t cap)
{
    snprintf(out, cap, WELL_KNOWN "%s",
             !path[0] || strcmp(path, "/") == 0 ? "" : path);
}

/* The path of URL `url` (curl's parser), or -1. */
static int url_path(const char *url, char *out, size_t cap)
{
    CURLU *u = curl_url();
    char *p = NULL;
    int rc = -1;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PATH, &p, 0) == CURLUE_OK &&
        strlen(p) < cap) {
        snprintf(out, cap, "%s", p);
        rc = 0;
    }
    curl_free(p);
    curl_url_cleanup(u);
    return rc;
}

/* The metadata routes of entry e, whose MCP path is e->path: the
 * path-suffixed document of the listen path and of mcp.oauth.resource's
 * path, and the bare well-known path. */
static void meta_routes(entry *e, const th_mcp_oauth_cfg *oc)
{
    char p[300];
    const char *cand[3] = {e->path, NULL, "/"};
    char rp[256];
    if (oc->resource && url_path(oc->resource, rp, sizeof rp) == 0)
        cand[1] = rp;
    for (int i = 0; i < 3; i++) {
        if (!cand[i])
            continue;
        meta_path(cand[i], p, sizeof p);
        bool dup = false;
        for (size_t j = 0; j < e->n_meta; j++)
            dup |= strcmp(e->meta_paths[j], p) == 0;
        if (!dup)
            snprintf(e->meta_paths[e->n_meta++], sizeof e->meta_paths[0],
                     "%s", p);
    }
}

/* Entry e's resource URL, metadata URL and document, once it listens. */
static int meta_fill(entry *e, const th_http_server *srv,
                     const th_mcp_oauth_cfg *oc)
{
    const char *res = oc->resource ? oc->resource : th_http_url_of(srv);
    char path[256], mp[300];
    if (!(e->resource = strdup(res)) || url_path(res, path, sizeof path) < 0)
        return -1;
    meta_path(path, mp, sizeof mp);
    CURLU *u = curl_url();
    char *url = NULL;
    if (u && curl_url_set(u, CURLUPART_URL, res, 0) == CURLUE_OK &&
        curl_url_set(u, CURLUPART_PATH, mp, 0) == CURLUE_OK &&
        curl_url_set(u, CURLUPART_QUERY, NULL, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_URL, &url, 0) == CURLUE_OK)
        e->meta_url = strdup(url);
    curl_free(url);
    curl_url_cleanup(u);
    json_t *as = json_array(), *sc = json_array();
    for (size_t i = 0; as && i < oc->n_authorization_servers; i++)
        json_array_append_new(as, json_string(oc->authorization_servers[i]));
    if (as && !oc->n_authorization_servers)
        json_array_append_new(as, json_string(oc->issuer));
    for (size_t i = 0; sc && i < oc->n_scopes_supported; i++)
        json_array_append_new(sc, json_string(oc->scopes_supported[i]));
    json_t *doc = json_pack("{s:s, s:o, s:[s]}", "resource", e->resource,
                            "authorization_servers", as,
                            "bearer_methods_supported", "header");
    if (doc && oc->n_scopes_supported)
        json_object_set(doc, "scopes_supported", sc);
    json_decref(sc);
    e->meta_doc = doc ? json_dumps(doc, JSON_INDENT(2)) : NULL;
    json_decref(doc);
    return e->meta_url && e->meta_doc ? 0 : -1;
}

/* mcp.oauth once every entry listens: the entries' documents and the
 * validator, whose audiences are the entries' resource URLs unless
 * mcp.oauth.audience names one. */
static int oauth_start(th_mcp_http *f, const th_mcp_cfg *mc, th_error *err)
{
    const char **aud = calloc(f->n_srv ? f->n_srv : 1, sizeof *aud);
    if (!aud)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    for (size_t i = 0; i < f->n_srv; i++) {
        if (meta_fill(&f->ents[i], f->srv[i], &mc->oauth) < 0) {
            free(aud);
            return th_error_set(err, TH_ENOMEM, "out of memory");
        }
        aud[i] = f->ents[i].resource;
    }
    f->oauth = th_oauth_new(&mc->oauth, aud, f->n_srv, err);
    free(aud);
    if (!f->oauth)
        return err ? err->code : TH_EINVAL;
    for (size_t i = 0; i < f->n_srv; i++)
        th_log_info("mcp http: OAuth resource %s (issuer %s), metadata at "
                    "%s", f->ents[i].resource, mc->oauth.issuer,
                    f->ents[i].meta_url);
    return 0;
}

int th_mcp_http_start(th_host *h, const th_config *cfg, th_mcp_http **out,
                      th_error *err)
{
    *out = NULL;
    const th_mcp_cfg *mc = th_mcp_config(cfg);
    if (!mc || mc->n_listen_http == 0)
        return 0;
    th_mcp_http *f = calloc(1, sizeof *f);
    if (!f)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    f->h = h;
    atomic_init(&f->refused_logged_ms[0], -1000000);
    atomic_init(&f->refused_logged_ms[1], -1000000);
    atomic_init(&f->refused_logged_ms[2], -1000000);
    atomic_init(&f->refused_logged_ms[3], -1000000);
    atomic_init(&f->ready, false);
    f->mc = &f->mcfg;
    pthread_mutex_init(&f->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->reaper_cv, &ca);
    pthread_condattr_destroy(&ca);
    f->srv = calloc(mc->n_listen_http, sizeof *f->srv);
    f->ents = calloc(mc->n_listen_http, sizeof *f->ents);
    if (!f->srv || !f->ents || mcfg_copy(&f->mcfg, mc) < 0) {
        th_mcp_http_stop(f);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    if (pthread_create(&f->reaper, NULL, reaper_main, f) != 0) {
        th_mcp_http_stop(f);
        return th_error_set(err, TH_EIO, "cannot start a thread");
    }
    f->reaper_started = true;
    for (size_t i = 0; i < mc->n_listen_http; i++) {
        th_http_url u;
        int rc = th_http_parse_url(mc->listen_http[i], &u, err);
        if (rc < 0) {
            th_mcp_http_stop(f);
            return rc;
        }
        entry *e = &f->ents[i];
        e->f = f;
        memcpy(e->path, u.path, sizeof u.path);
        th_http_route r[4] = {{.path = e->path, .handle = on_request,
                               .completed = on_completed, .ud = e}};
        size_t nr = 1;
        if (mc->oauth.on)
            meta_routes(e, &mc->oauth);
        for (size_t j = 0; j < e->n_meta; j++)
            if (strcmp(e->meta_paths[j], e->path) != 0)
                r[nr++] = (th_http_route){.path = e->meta_paths[j],
                                          .handle = on_metadata, .ud = e};
        th_http_opts o;
        memset(&o, 0, sizeof o);
        o.url = mc->listen_http[i];
        o.allow_remote = f->mc->allow_remote;
        o.tls_cert = f->mc->tls_cert;
        o.tls_key = f->mc->tls_key;
        o.max_connections = f->mc->max_connections;
        o.sndbuf = 64 * 1024;
        o.client_timeout_s =
            (unsigned)((f->mc->client_timeout_ms + 999) / 1000);
        o.header_timeout_ms = (unsigned)f->mc->header_timeout_ms;
        o.body_timeout_ms = (unsigned)f->mc->body_timeout_ms;
        o.max_per_address = f->mc->max_connections_per_address;
        o.tls_priorities = f->mc->tls_priorities;
        o.threads = f->mc->http_threads;
        rc = th_http_start(&o, r, nr, &f->srv[i], err);
        if (rc < 0) {
            th_mcp_http_stop(f);
            return rc;
        }
        f->n_srv = i + 1;
        th_log_info("mcp http: serving MCP (Streamable HTTP) on %s",
                    th_http_url_of(f->srv[i]));
    }
    if (mc->oauth.on) {
        int rc = oauth_start(f, mc, err);
        if (rc < 0) {
            th_mcp_http_stop(f);
            return rc;
        }
    }
    atomic_store(&f->ready, true);
    *out = f;
    return 0;
}

unsigned th_mcp_http_port(const th_mcp_http *f, size_t i)
{
    return f && i < f->n_srv ? th_http_port(f->srv[i]) : 0;
}

/* th_mcp_http_stop: every session's open subscriptions/listen gets its
 * closing result (queued on its stream, which then ends), before the
 * streams are told to end. */
static void close_listens(th_mcp_http *f)
{
    for (;;) {
        hsess *s = NULL;
        pthread_mutex_lock(&f->mu);
        for (int l = 0; l < 2 && !s; l++)
            for (hsess *t = l ? f->one_req : f->sessions; t && !s;
                 t = t->next)
                if (t->m && t->refs > 0 && !t->listens_closed) {
                    /* (refs 0: sess_unref is freeing it) */
                    t->listens_closed = true;
                    t->refs++;
                    s = t;
                }
        pthread_mutex_unlock(&f->mu);
        if (!s)
            return;
        th_mcp_session_close_listens(s->m);
        sess_unref(s);
    }
}

/* f->mu held: POST streams that ended but whose connection has not yet
 * taken all (the closing results of close_listens). */
static size_t unflushed_locked(th_mcp_http *f)
{
    size_t n = 0;
    for (int l = 0; l < 2; l++)
        for (hsess *s = l ? f->one_req : f->sessions; s; s = s->next)
            for (stream *st = s->streams; st; st = st->next)
                n += st->kind == ST_POST && st->done && st->hc &&
                     !st->dead && !st->orphan;
    return n;
}

/* th_mcp_http_stop: up to LISTEN_FLUSH_MS for those streams to end (each
 * stream's end wakes this wait). */
static void flush_listens(th_mcp_http *f)
{
    int64_t end = now_ms() + LISTEN_FLUSH_MS;
    pthread_mutex_lock(&f->mu);
    size_t n;
    while ((n = unflushed_locked(f)) > 0 && now_ms() < end)
        cv_wait_on(f, &f->reaper_cv, 50);
    pthread_mutex_unlock(&f->mu);
    if (n)
        th_log_warn("mcp http: %zu closing subscriptions/listen results not "
                    "sent within %d ms: their connections close",
                    n, LISTEN_FLUSH_MS);
}

void th_mcp_http_stop(th_mcp_http *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_srv; i++)
        th_http_quiesce(f->srv[i]);
    close_listens(f);
    flush_listens(f);
    pthread_mutex_lock(&f->mu);
    f->closing = true;
    for (int l = 0; l < 2; l++)
        for (hsess *s = l ? f->one_req : f->sessions; s; s = s->next)
            for (stream *st = s->streams; st; st = st->next) {
                st->done = true;
                wake(st);
            }
    pthread_cond_broadcast(&f->reaper_cv);
    pthread_mutex_unlock(&f->mu);
    if (f->reaper_started)
        pthread_join(f->reaper, NULL);
    /* The sessions end first (their calls cancelled, their last messages
     * sent or dropped), then the connections. */
    for (;;) {
        pthread_mutex_lock(&f->mu);
        hsess *s = f->sessions;
        if (s)
            sess_unlist(s);
        pthread_mutex_unlock(&f->mu);
        if (!s)
            break;
        sess_unref(s);
    }
    for (size_t i = 0; i < f->n_srv; i++)
        th_http_stop(f->srv[i]);
    th_mcp_inputs_clear();
    free(f->srv);
    th_oauth_free(f->oauth);
    for (size_t i = 0; f->ents && i < f->n_srv; i++) {
        free(f->ents[i].resource);
        free(f->ents[i].meta_url);
        free(f->ents[i].meta_doc);
    }
    free(f->ents);
    mcfg_free(&f->mcfg);
    pthread_cond_destroy(&f->reaper_cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}
