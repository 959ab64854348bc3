/* http.c - the HTTP server layer of th/http.h over libmicrohttpd.
 *
 * Threads: libmicrohttpd's poll() loop on a pool of opts->threads threads
 * (each with its own connections, all accepting), plus the watchdog.
 * Nothing here blocks a pool thread.  Not its epoll loop: when one
 * epoll_wait() returns its whole array of events (128), libmicrohttpd
 * (0.9.75 and later) calls epoll_wait() again with the same timeout
 * before it handles them, so with 128 connections ready at once a pool
 * thread sat up to the next event or timeout with them unread (seen in
 * bench/mcp_http_sessions.c with 1000 busy connections: 127 connections
 * cut by header_timeout at once).
 *
 * Suspension: a connection's record (hconn) says whether it is suspended
 * (set with MHD_suspend_connection() by its own pool thread, cleared with
 * MHD_resume_connection() by whoever wakes it, both under s->mu).  So a
 * connection is resumed only when it is suspended (libmicrohttpd: anything
 * else is undefined) and only while it exists (a suspended connection is
 * never closed: libmicrohttpd skips it; th_http_stop() resumes every one
 * before it stops the daemon, which would abort on one).  A wake that
 * finds the connection running leaves a token (woken) that its next
 * suspend takes instead of suspending: no wake is lost.
 *
 * Deadlines: each connection has a record (hconn, its socket context) in
 * the server's list, in one of three phases: HEAD (waiting for a request
 * line and headers, since the connection's start or the previous
 * request's end), BODY (since the headers), REPLY (the handler has the
 * whole request: no deadline here; mcp.client_timeout covers a client
 * that takes in nothing).  The watchdog thread shuts down the socket of a
 * connection past its phase's deadline; libmicrohttpd's thread of that
 * connection then sees the end and closes it.  The record leaves the list
 * (NOTIFY_CLOSED) before libmicrohttpd closes the fd, both under s->mu
 * for the watchdog, so it never shuts down a reused fd.
 *
 * Lock order: s->mu is a leaf (nothing is called while it is held but
 * shutdown(2) and the log). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "front/http.h"
#include "th/log.h"

enum { PH_HEAD, PH_BODY, PH_REPLY };

/* th_http_conn: all but `s` under s->mu. */
typedef struct th_http_conn {
    struct th_http_conn *next, *prev; /* in s->conns while open */
    struct th_http_server *s;
    struct MHD_Connection *c; /* NULL once closed */
    int fd;           /* -1: reserved at accept, not started yet */
    int phase;        /* PH_* */
    int64_t since_ms; /* when the phase began */
    bool cut;         /* shut down by the watchdog */
    bool suspended;   /* MHD_suspend_connection() done, no resume yet */
    bool woken;       /* a wake found it running: the next suspend is not */
    bool hup;         /* the client hung up while it was suspended */
    int64_t until_ms; /* suspended: resumed at this time; 0: never */
    int refs;         /* the list's (while open) + th_http_conn_ref()'s */
    struct sockaddr_storage addr;
} hconn;

/* A log line said at most once a second, with the count of events since
 * the last one said; the watchdog says what is left over (rl_take each
 * tick), so no event goes uncounted. */
typedef struct rl_log {
    int64_t last_ms;
    unsigned pending;
} rl_log;

struct th_http_server {
    struct MHD_Daemon *d;
    th_http_route *routes;
    size_t n_routes;
    th_http_url url;
    char url_text[384]; /* with the bound port; set after the start */
    char entry[384];    /* the listen entry as written; set before */
    char *cert, *key; /* PEM text, kept while the daemon runs */
    int sndbuf;
    unsigned max_conn;
    atomic_uint n_conn;
    atomic_llong full_logged_ms; /* when "at the cap" was last logged */
    const char *what;            /* config section in log lines */
    char *priorities;            /* GnuTLS priorities, kept while running */
    unsigned head_ms, body_ms, per_addr;
    pthread_mutex_t mu;
    pthread_cond_t dog_cv;       /* CLOCK_MONOTONIC */
    hconn *conns;
    pthread_t dog;
    bool dog_started, dog_stop;
    bool stopping;               /* th_http_stop(): no more suspends; mu */
    int64_t dog_due;             /* when the watchdog wakes next; mu */
    unsigned threads;
    rl_log log_head, log_body, log_addr, log_nul; /* under mu */
    char addr_last[INET6_ADDRSTRLEN]; /* the last address refused; mu */
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* True when a line is due now for the events counted in l->pending
 * (then *n is how many it covers).  s->mu held. */
static bool rl_take(rl_log *l, int64_t now, unsigned *n)
{
    if (!l->pending || (l->last_ms && now - l->last_ms < 1000))
        return false;
    l->last_ms = now;
    *n = l->pending;
    l->pending = 0;
    return true;
}

static void say_nul(const th_http_server *s, unsigned n)
{
    th_log_info("http: %s: %u request(s) with a NUL byte (or an obs-fold "
                "line) in the head refused",
                s->entry, n);
}

static void say_addr(const th_http_server *s, unsigned n)
{
    th_log_warn("http: %s: %u connection(s) refused, the last from %s: "
                "%u from one address at once (%s.max_connections_per_address)",
                s->entry, n, s->addr_last, s->per_addr, s->what);
}

/* What *req_cls points to while a request is routed. */
typedef struct route_req {
    const th_http_route *r;
    void *cls;
} route_req;

/* ---- URLs ------------------------------------------------------------------ */

int th_http_parse_url(const char *s, th_http_url *u, th_error *err)
{
    memset(u, 0, sizeof *u);
    const char *p;
    if (strncmp(s, "http://", 7) == 0) {
        p = s + 7;
    } else if (strncmp(s, "https://", 8) == 0) {
        p = s + 8;
        u->tls = true;
    } else {
        return th_error_set(err, TH_EINVAL,
                            "'%s' is not an http:// or https:// address", s);
    }
    const char *hs = p, *he;
    if (*p == '[') {
        hs = p + 1;
        he = strchr(hs, ']');
        if (!he)
            return th_error_set(err, TH_EINVAL, "'%s': no ']' after the "
                                "IPv6 address", s);
        p = he + 1;
    } else {
        he = p + strcspn(p, ":/");
        p = he;
    }
    size_t hl = (size_t)(he - hs);
    if (hl == 0 || hl >= sizeof u->host)
        return th_error_set(err, TH_EINVAL, "'%s': no host (write "
                            "http://127.0.0.1:PORT/PATH)", s);
    memcpy(u->host, hs, hl);
    u->host[hl] = '\0';
    if (*p != ':')
        return th_error_set(err, TH_EINVAL, "'%s': no port (write "
                            "http://%s:PORT/PATH; 0 takes a free port)", s,
                            u->host);
    p++;
    unsigned long port = 0;
    const char *ps = p;
    while (*p >= '0' && *p <= '9' && p - ps < 6)
        port = port * 10 + (unsigned long)(*p++ - '0');
    if (p == ps || port > 65535 || (*p && *p != '/'))
        return th_error_set(err, TH_EINVAL, "'%s': the port must be a "
                            "number from 0 to 65535", s);
    u->port = (uint16_t)port;
    const char *path = *p ? p : "/mcp";
    if (strlen(path) >= sizeof u->path || strpbrk(path, "?# \t"))
        return th_error_set(err, TH_EINVAL, "'%s': the path must be plain "
                            "(no query, at most 255 bytes)", s);
    snprintf(u->path, sizeof u->path, "%s", path);
    const char *h = strcmp(u->host, "localhost") == 0 ? "127.0.0.1"
                                                       : u->host;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&u->addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&u->addr;
    if (inet_pton(AF_INET, h, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(u->port);
        u->addr_len = sizeof *a4;
        u->loopback = (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
    } else if (inet_pton(AF_INET6, h, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(u->port);
        u->addr_len = sizeof *a6;
        u->loopback = IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr);
    } else {
        return th_error_set(err, TH_EINVAL, "'%s': the host must be an IP "
                            "address or localhost, got '%s'", s, u->host);
    }
    return 0;
}

/* ---- the daemon -------------------------------------------------------------- */

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    th_log_debug("http: %s", line);
}

enum MHD_Result th_http_reply(struct MHD_Connection *c, unsigned status,
                              const char *content_type, const char *body,
                              const char *hname, const char *hvalue)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    if (content_type)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                content_type);
    if (hname)
        MHD_add_response_header(r, hname, hvalue);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

/* Leaves the URL as sent: routes match the raw path, so /mcp%00 or
 * /mc%70 is not /mcp (no handler reads query arguments). */
static size_t keep_escaped(void *cls, struct MHD_Connection *c, char *uri)
{
    (void)cls;
    (void)c;
    return strlen(uri);
}

static hconn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Moves the connection's record to phase `ph` (from `from`, or from any
 * phase when from < 0). */
static void conn_phase(th_http_server *s, struct MHD_Connection *c,
                       int from, int ph)
{
    hconn *hc = conn_of(c);
    if (!hc)
        return;
    pthread_mutex_lock(&s->mu);
    if (from < 0 || hc->phase == from) {
        hc->phase = ph;
        hc->since_ms = mono_ms();
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- a NUL in the head ---------------------------------------------------
 *
 * libmicrohttpd before 1.0 reads a header value, the URL and the method as
 * C strings: "Authorization: Bearer <token>\0junk" reaches a handler as
 * the token alone, "/mcp\0junk" as /mcp.  Its API shows no byte after
 * such a NUL, but it parses the head in place, in one buffer of
 * header_size bytes from the method: every byte of that buffer is either
 * a parsed field (method, URL, version, header names and values, query
 * arguments) or a separator it overwrote with a NUL (the spaces of the
 * request line, each ':' '?' '&' '=', CR and LF) or whitespace it
 * skipped.  So a head in which some byte outside every field is anything
 * else held a NUL that hid it: refused.  A field outside the buffer (an
 * obs-fold continuation line, which it copies; RFC 9112 lets a server
 * refuse those) is refused too.  From 1.0 on the library refuses a NUL in
 * the head itself and this check is off. */

typedef struct span {
    const char *p;
    size_t n;
} span;

typedef struct spans {
    span *v;
    size_t n, cap;
    bool oom;
} spans;

static void span_add(spans *a, const char *p, size_t n)
{
    if (!p || a->oom)
        return;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 32;
        span *v = realloc(a->v, cap * sizeof *v);
        if (!v) {
            a->oom = true;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (span){p, n};
}

static enum MHD_Result span_collect(void *cls, enum MHD_ValueKind kind,
                                    const char *key, size_t key_size,
                                    const char *value, size_t value_size)
{
    (void)kind;
    span_add(cls, key, key_size);
    span_add(cls, value, value_size);
    return MHD_YES;
}

static int span_cmp(const void *a, const void *b)
{
    const char *x = ((const span *)a)->p, *y = ((const span *)b)->p;
    return x < y ? -1 : x > y;
}

static bool gap_ok(const char *p, const char *e)
{
    for (; p < e; p++)
        if (*p != '\0' && *p != ' ' && *p != '\t')
            return false;
    return true;
}

/* True when the library reads the head as C strings (before 1.0). */
static bool head_check_needed(void)
{
    static atomic_int need = -1;
    int v = atomic_load(&need);
    if (v < 0) {
        unsigned major = 1;
        const char *ver = MHD_get_version();
        if (ver)
            sscanf(ver, "%u", &major);
        v = major < 1;
        atomic_store(&need, v);
    }
    return v == 1;
}

/* True when the request's head held a byte no field shows (see above). */
static bool head_hides_bytes(struct MHD_Connection *c, const char *method,
                             const char *url, const char *version)
{
    if (!head_check_needed())
        return false;
    const union MHD_ConnectionInfo *hi =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (!hi || !method)
        return true;
    const char *end = method + hi->header_size;
    spans a = {0};
    span_add(&a, method, strlen(method));
    span_add(&a, url, url ? strlen(url) : 0);
    span_add(&a, version, version ? strlen(version) : 0);
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, span_collect, &a);
    MHD_get_connection_values_n(c, MHD_GET_ARGUMENT_KIND, span_collect, &a);
    bool hidden = a.oom;
    if (!hidden)
        qsort(a.v, a.n, sizeof *a.v, span_cmp);
    const char *cur = method;
    for (size_t i = 0; i < a.n && !hidden; i++) {
        const span *sp = &a.v[i];
        if (sp->p < method || sp->p + sp->n > end ||
            (sp->p > cur && !gap_ok(cur, sp->p)))
            hidden = true;
        else if (sp->p + sp->n > cur)
            cur = sp->p + sp->n;
    }
    if (!hidden && !gap_ok(cur, end))
        hidden = true;
    free(a.v);
    return hidden;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c,
                                 const char *url, const char *method,
                                 const char *version, const char *upload,
                                 size_t *upload_size, void **req_cls)
{
    th_http_server *s = cls;
    route_req *rr = *req_cls;
    /* The head is in: the body's deadline starts.  A later call without
     * bytes is the end of the body: the handler has it all. */
    conn_phase(s, c, PH_HEAD, PH_BODY);
    if (rr && *upload_size == 0)
        conn_phase(s, c, PH_BODY, PH_REPLY);
    if (!rr) {
        if (head_hides_bytes(c, method, url, version)) {
            pthread_mutex_lock(&s->mu);
            unsigned said = 0;
            s->log_nul.pending++;
            if (rl_take(&s->log_nul, mono_ms(), &said))
                say_nul(s, said);
            pthread_mutex_unlock(&s->mu);
            return th_http_reply(c, MHD_HTTP_BAD_REQUEST, "text/plain",
                                 "a NUL byte in the request head\n", NULL, NULL);
        }
        const th_http_route *r = NULL;
        for (size_t i = 0; i < s->n_routes && !r; i++)
            if (strcmp(s->routes[i].path, url) == 0)
                r = &s->routes[i];
        if (!r) {
            if (*upload_size) { /* drain, then answer */
                *upload_size = 0;
                return MHD_YES;
            }
            return th_http_reply(c, MHD_HTTP_NOT_FOUND, "text/plain",
                                 "not found\n", NULL, NULL);
        }
        rr = calloc(1, sizeof *rr);
        if (!rr)
            return MHD_NO;
        rr->r = r;
        *req_cls = rr;
    }
    return rr->r->handle(rr->r->ud, c, method, upload, upload_size,
                         &rr->cls);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode why)
{
    /* The next request's head is due within head_ms from now. */
    conn_phase(cls, c, -1, PH_HEAD);
    route_req *rr = *req_cls;
    if (!rr)
        return;
    if (rr->r->completed)
        rr->r->completed(rr->r->ud, c, &rr->cls, why);
    free(rr);
    *req_cls = NULL;
}

/* The record reserved by on_accept() in this thread for the connection
 * it let in, which NOTIFY_STARTED (next, in the same thread) takes. */
static _Thread_local hconn *accepted;

static void conn_unlink(th_http_server *s, hconn *hc)
{
    if (hc->prev)
        hc->prev->next = hc->next;
    else
        s->conns = hc->next;
    if (hc->next)
        hc->next->prev = hc->prev;
    hc->next = hc->prev = NULL;
}

static void conn_link(th_http_server *s, hconn *hc)
{
    hc->prev = NULL;
    hc->next = s->conns;
    if (s->conns)
        s->conns->prev = hc;
    s->conns = hc;
}

static void on_connection(void *cls, struct MHD_Connection *c,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    th_http_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        hconn *hc = *socket_context;
        if (hc) {
            pthread_mutex_lock(&s->mu);
            conn_unlink(s, hc);
            hc->c = NULL;
            hc->suspended = false;
            bool last = --hc->refs == 0;
            pthread_mutex_unlock(&s->mu);
            if (last)
                free(hc);
            *socket_context = NULL;
        }
        atomic_fetch_sub(&s->n_conn, 1);
        return;
    }
    if (toe != MHD_CONNECTION_NOTIFY_STARTED)
        return;
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    hconn *hc = accepted && accepted->s == s ? accepted : NULL;
    accepted = NULL;
    bool listed = hc != NULL;
    if (!hc)
        hc = calloc(1, sizeof *hc);
    if (hc && fi) {
        pthread_mutex_lock(&s->mu);
        hc->s = s;
        hc->c = c;
        hc->fd = fi->connect_fd;
        hc->phase = PH_HEAD;
        hc->since_ms = mono_ms();
        hc->refs = 1;
        if (!listed && ai && ai->client_addr)
            memcpy(&hc->addr, ai->client_addr,
                   ai->client_addr->sa_family == AF_INET6
                       ? sizeof(struct sockaddr_in6)
                       : sizeof(struct sockaddr_in));
        if (!listed)
            conn_link(s, hc);
        pthread_mutex_unlock(&s->mu);
        *socket_context = hc;
    } else if (hc) {
        if (listed) {
            pthread_mutex_lock(&s->mu);
            conn_unlink(s, hc);
            pthread_mutex_unlock(&s->mu);
        }
        free(hc); /* the connection goes without deadline */
    }
    /* At the cap the daemon stops accepting: new clients wait in the
     * kernel's queue.  Say so, at most once a second. */
    if (atomic_fetch_add(&s->n_conn, 1) + 1 >= s->max_conn) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long long now = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        long long last = atomic_load(&s->full_logged_ms);
        if (now - last >= 1000 &&
            atomic_compare_exchange_strong(&s->full_logged_ms, &last, now))
            th_log_warn("http: %s: %u connections open (%s.max_connections); "
                        "new ones wait until one closes",
                        s->entry, s->max_conn, s->what);
    }
    if (s->sndbuf > 0 && fi)
        setsockopt(fi->connect_fd, SOL_SOCKET, SO_SNDBUF, &s->sndbuf,
                   sizeof s->sndbuf);
}

static bool same_host(const struct sockaddr_storage *a, const struct sockaddr *b)
{
    if (a->ss_family != b->sa_family)
        return false;
    if (b->sa_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)(const void *)b)->sin_addr.s_addr;
    if (b->sa_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)(const void *)b)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    return false;
}

/* The per-address cap, at accept.  Each pool thread accepts, so two may
 * let in connections from one address at once: the one let in is listed
 * here at once (its record reserved, fd -1), under the lock that counts,
 * and NOTIFY_STARTED, next in the same thread, takes the record.  A
 * reservation whose connection never started (libmicrohttpd failed it) is
 * dropped by the thread's next accept. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr,
                                 socklen_t addrlen)
{
    th_http_server *s = cls;
    (void)addrlen;
    if (accepted && accepted->s == s) { /* stale: never started */
        pthread_mutex_lock(&s->mu);
        conn_unlink(s, accepted);
        pthread_mutex_unlock(&s->mu);
        free(accepted);
    }
    accepted = NULL;
    if (!s->per_addr || !addr)
        return MHD_YES;
    unsigned n = 0, said = 0;
    hconn *res = calloc(1, sizeof *res);
    pthread_mutex_lock(&s->mu);
    for (hconn *hc = s->conns; hc; hc = hc->next)
        if (same_host(&hc->addr, addr))
            n++;
    bool refuse = n >= s->per_addr;
    if (!refuse && res) {
        res->s = s;
        res->fd = -1;
        memcpy(&res->addr, addr,
               addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                           : sizeof(struct sockaddr_in));
        conn_link(s, res);
        accepted = res;
        res = NULL;
    }
    if (refuse) {
        const void *ia =
            addr->sa_family == AF_INET6
                ? (const void *)&((const struct sockaddr_in6 *)(const void *)addr)->sin6_addr
                : (const void *)&((const struct sockaddr_in *)(const void *)addr)->sin_addr;
        if (!inet_ntop(addr->sa_family, ia, s->addr_last,
                       sizeof s->addr_last))
            snprintf(s->addr_last, sizeof s->addr_last, "?");
        s->log_addr.pending++;
        if (rl_take(&s->log_addr, mono_ms(), &said))
            say_addr(s, said);
    }
    pthread_mutex_unlock(&s->mu);
    free(res);
    return refuse ? MHD_NO : MHD_YES;
}

/* The watchdog: closes connections past their phase's deadline. */
static void *dog_main(void *arg)
{
    th_http_server *s = arg;
    unsigned least = s->head_ms < s->body_ms ? s->head_ms : s->body_ms;
    int64_t tick = least / 8;
    if (tick < 20)
        tick = 20;
    if (tick > 250)
        tick = 250;
    struct pollfd *pf = NULL;
    hconn **pc = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&s->mu);
    while (!s->dog_stop) {
        /* The next tick, or a suspended connection's deadline if sooner
         * (th_http_suspend signals dog_cv when it sets one). */
        int64_t due = mono_ms() + tick;
        for (hconn *hc = s->conns; hc; hc = hc->next)
            if (hc->suspended && hc->until_ms && hc->until_ms < due)
                due = hc->until_ms;
        struct timespec ts = {.tv_sec = due / 1000,
                              .tv_nsec = (due % 1000) * 1000000};
        s->dog_due = due;
        pthread_cond_timedwait(&s->dog_cv, &s->mu, &ts);
        s->dog_due = 0;
        if (s->dog_stop)
            break;
        int64_t now = mono_ms();
        unsigned said_head = 0, said_body = 0, said = 0;
        size_t np = 0;
        for (hconn *hc = s->conns; hc; hc = hc->next) {
            if (hc->suspended && hc->until_ms && now >= hc->until_ms) {
                hc->suspended = false;
                MHD_resume_connection(hc->c);
                continue;
            }
            if (hc->suspended && !hc->hup) { /* watched for a hang-up */
                if (np == cap) {
                    size_t nc = cap ? 2 * cap : 64;
                    struct pollfd *a = realloc(pf, nc * sizeof *a);
                    hconn **b = a ? realloc(pc, nc * sizeof *b) : NULL;
                    if (a)
                        pf = a;
                    if (!b)
                        continue; /* out of memory: watched next tick */
                    pc = b;
                    cap = nc;
                }
                pf[np] = (struct pollfd){.fd = hc->fd, .events = POLLRDHUP};
                pc[np++] = hc;
                continue;
            }
            if (hc->cut || hc->phase == PH_REPLY || hc->fd < 0)
                continue;
            bool head = hc->phase == PH_HEAD;
            if (now - hc->since_ms < (head ? s->head_ms : s->body_ms))
                continue;
            hc->cut = true;
            shutdown(hc->fd, SHUT_RDWR);
            (head ? &s->log_head : &s->log_body)->pending++;
        }
        /* A hang-up of a suspended connection: libmicrohttpd does not
         * look at its socket, so its waiter learns it from here. */
        if (np && poll(pf, (nfds_t)np, 0) > 0)
            for (size_t i = 0; i < np; i++)
                if ((pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) &&
                    pc[i]->suspended) {
                    pc[i]->hup = true;
                    pc[i]->suspended = false;
                    MHD_resume_connection(pc[i]->c);
                }
        rl_take(&s->log_head, now, &said_head);
        rl_take(&s->log_body, now, &said_body);
        if (rl_take(&s->log_addr, now, &said))
            say_addr(s, said);
        if (rl_take(&s->log_nul, now, &said))
            say_nul(s, said);
        if (said_head)
            th_log_warn("http: %s: %u connection(s) closed: no whole request "
                        "head within %u ms (%s.header_timeout)",
                        s->entry, said_head, s->head_ms, s->what);
        if (said_body)
            th_log_warn("http: %s: %u connection(s) closed: no whole request "
                        "body within %u ms of its head (%s.body_timeout)",
                        s->entry, said_body, s->body_ms, s->what);
    }
    pthread_mutex_unlock(&s->mu);
    free(pf);
    free(pc);
    return NULL;
}

/* ---- waiting without a thread ------------------------------------------- */

int64_t th_http_now_ms(void)
{
    return mono_ms();
}

th_http_conn *th_http_conn_ref(struct MHD_Connection *c)
{
    hconn *hc = conn_of(c);
    if (!hc)
        return NULL;
    pthread_mutex_lock(&hc->s->mu);
    hc->refs++;
    pthread_mutex_unlock(&hc->s->mu);
    return hc;
}

void th_http_conn_unref(th_http_conn *hc)
{
    if (!hc)
        return;
    th_http_server *s = hc->s;
    pthread_mutex_lock(&s->mu);
    bool last = --hc->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (last)
        free(hc);
}

int th_http_suspend(th_http_conn *hc, int64_t until_ms)
{
    th_http_server *s = hc->s;
    int rc = 1;
    pthread_mutex_lock(&s->mu);
    if (s->stopping || !hc->c) {
        rc = -1;
    } else if (hc->woken) {
        hc->woken = false;
        rc = 0;
    } else {
        MHD_suspend_connection(hc->c);
        hc->suspended = true;
        hc->until_ms = until_ms;
        if (until_ms && s->dog_due && until_ms < s->dog_due)
            pthread_cond_signal(&s->dog_cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void th_http_wake(th_http_conn *hc)
{
    if (!hc)
        return;
    th_http_server *s = hc->s;
    pthread_mutex_lock(&s->mu);
    if (hc->suspended) {
        hc->suspended = false;
        MHD_resume_connection(hc->c);
    } else if (hc->c) {
        hc->woken = true;
    }
    pthread_mutex_unlock(&s->mu);
}

bool th_http_hung_up(th_http_conn *hc)
{
    pthread_mutex_lock(&hc->s->mu);
    bool h = hc->hup;
    pthread_mutex_unlock(&hc->s->mu);
    return h;
}

/* A PEM file, whole (at most 1 MiB). */
static char *read_pem(const char *path, const char *what, th_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        th_error_set(err, TH_ECONFIG, "mcp.%s: cannot open '%s': %s", what,
                     path, strerror(errno));
        return NULL;
    }
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size > (1 << 20)) {
        th_error_set(err, TH_ECONFIG, "mcp.%s: '%s' is not a PEM file of "
                     "at most 1MiB", what, path);
    } else if (!(buf = malloc((size_t)st.st_size + 1))) {
        th_error_set(err, TH_ENOMEM, "out of memory");
    } else {
        size_t got = 0;
        while (got < (size_t)st.st_size) {
            ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        buf[got] = '\0';
        if (got == 0) {
            th_error_set(err, TH_ECONFIG, "mcp.%s: '%s' is empty", what,
                         path);
            free(buf);
            buf = NULL;
        }
    }
    close(fd);
    return buf;
}

/* ---- Socket activation ----------------------------------------------------- */

/* Listening TCP sockets handed over by the service manager, each taken by
 * the first entry whose address matches (family, port, address or any). */
static pthread_mutex_t act_mu = PTHREAD_MUTEX_INITIALIZER;
static int act_fd[16];
static size_t n_act;

void th_http_set_listen_fds(const int *fds, size_t n)
{
    pthread_mutex_lock(&act_mu);
    n_act = 0;
    for (size_t i = 0; i < n && n_act < sizeof act_fd / sizeof *act_fd; i++)
        act_fd[n_act++] = fds[i];
    pthread_mutex_unlock(&act_mu);
}

static bool addr_match(const struct sockaddr_storage *want,
                       const struct sockaddr_storage *got)
{
    if (want->ss_family != got->ss_family)
        return false;
    if (want->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)want, *b = (const void *)got;
        return a->sin_port == b->sin_port &&
               (a->sin_addr.s_addr == b->sin_addr.s_addr ||
                b->sin_addr.s_addr == htonl(INADDR_ANY));
    }
    const struct sockaddr_in6 *a = (const void *)want, *b = (const void *)got;
    return a->sin6_port == b->sin6_port &&
           (!memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) ||
            !memcmp(&b->sin6_addr, &in6addr_any, sizeof b->sin6_addr));
}

void th_http_close_unused_listen_fds(void)
{
    pthread_mutex_lock(&act_mu);
    for (size_t i = 0; i < n_act; i++) {
        th_log_warn("socket activation: TCP socket fd %d matches no http:// "
                    "listen entry; closed", act_fd[i]);
        close(act_fd[i]);
    }
    n_act = 0;
    pthread_mutex_unlock(&act_mu);
}

/* An activated socket for `u` (removed from the table), or -1. */
static int take_activated(const th_http_url *u)
{
    int fd = -1;
    if (u->port == 0)
        return -1;
    pthread_mutex_lock(&act_mu);
    for (size_t i = 0; i < n_act && fd < 0; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        if (getsockname(act_fd[i], (struct sockaddr *)&ss, &len) != 0 ||
            !addr_match(&u->addr, &ss))
            continue;
        fd = act_fd[i];
        act_fd[i] = act_fd[--n_act];
    }
    pthread_mutex_unlock(&act_mu);
    return fd;
}

int th_http_start(const th_http_opts *o, const th_http_route *routes,
                  size_t n_routes, th_http_server **out, th_error *err)
{
    *out = NULL;
    th_http_server *s = calloc(1, sizeof *s);
    if (!s)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    int rc = th_http_parse_url(o->url, &s->url, err);
    if (rc < 0)
        goto fail;
    if (!s->url.loopback && !o->allow_remote) {
        rc = th_error_set(err, TH_EPERM,
                          "'%s' is not a loopback address; serving MCP on "
                          "it needs mcp.allow_remote: true",
                          o->url);
        goto fail;
    }
    s->routes = calloc(n_routes ? n_routes : 1, sizeof *s->routes);
    if (!s->routes) {
        rc = th_error_set(err, TH_ENOMEM, "out of memory");
        goto fail;
    }
    memcpy(s->routes, routes, n_routes * sizeof *routes);
    s->sndbuf = o->sndbuf;
    snprintf(s->entry, sizeof s->entry, "%s", o->url);
    s->max_conn = o->max_connections ? o->max_connections : 256;
    s->what = o->what ? o->what : "mcp";
    s->head_ms = o->header_timeout_ms ? o->header_timeout_ms : 10000;
    s->body_ms = o->body_timeout_ms ? o->body_timeout_ms : 60000;
    s->per_addr = o->max_per_address;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->dog_cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&s->n_conn, 0);
    atomic_init(&s->full_logged_ms, -1000000);
    s->n_routes = n_routes;
    s->threads = o->threads ? o->threads : 2;
    unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (s->url.addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if (s->url.tls) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            rc = th_error_set(err, TH_ECONFIG,
                              "'%s': this libmicrohttpd has no TLS support; "
                              "use http:// behind a TLS proxy",
                              o->url);
            goto fail;
        }
        if (!o->tls_cert || !o->tls_key) {
            rc = th_error_set(err, TH_ECONFIG,
                              "'%s' needs mcp.tls_cert and mcp.tls_key",
                              o->url);
            goto fail;
        }
        if (!(s->cert = read_pem(o->tls_cert, "tls_cert", err)) ||
            !(s->key = read_pem(o->tls_key, "tls_key", err))) {
            rc = err ? err->code : TH_ECONFIG;
            goto fail;
        }
        if (!(s->priorities = strdup(o->tls_priorities
                                         ? o->tls_priorities
                                         : TH_HTTP_TLS_PRIORITIES))) {
            rc = th_error_set(err, TH_ENOMEM, "out of memory");
            goto fail;
        }
        flags |= MHD_USE_TLS;
    }
    struct MHD_OptionItem opts[16];
    size_t n = 0;
    int act = take_activated(&s->url);
    if (act >= 0) {
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, act,
                                            NULL};
        th_log_info("http: %s: the socket from the service manager (fd %d)",
                    o->url, act);
    } else {
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0,
                                            &s->url.addr};
    }
    opts[n++] = (struct MHD_OptionItem){
        MHD_OPTION_CONNECTION_LIMIT, (intptr_t)s->max_conn, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT,
                                        (intptr_t)o->client_timeout_s, NULL};
    if (s->threads > 1)
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE,
                                            (intptr_t)s->threads, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_COMPLETED,
                                        (intptr_t)on_completed, s};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_CONNECTION,
                                        (intptr_t)on_connection, s};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_UNESCAPE_CALLBACK,
                                        (intptr_t)keep_escaped, NULL};
    if (s->url.tls) {
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0,
                                            s->cert};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0,
                                            s->key};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
                                            s->priorities};
    }
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    s->d = MHD_start_daemon(flags, s->url.port, on_accept, s, on_access, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
    if (!s->d) {
        rc = th_error_set(err, TH_EIO,
                          "cannot serve HTTP on '%s' (address in use, not "
                          "local, a bad TLS key/certificate or a bad "
                          "%s.tls_priorities; see the debug log)",
                          o->url, s->what);
        goto fail;
    }
    if (pthread_create(&s->dog, NULL, dog_main, s) != 0) {
        MHD_stop_daemon(s->d);
        rc = th_error_set(err, TH_EIO, "cannot start a thread");
        goto fail;
    }
    s->dog_started = true;
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    if (di)
        s->url.port = di->port;
    bool v6 = s->url.addr.ss_family == AF_INET6;
    snprintf(s->url_text, sizeof s->url_text, "%s://%s%s%s:%u%s",
             s->url.tls ? "https" : "http", v6 ? "[" : "", s->url.host,
             v6 ? "]" : "", (unsigned)s->url.port, s->url.path);
    *out = s;
    return 0;
fail:
    free(s->routes);
    free(s->cert);
    free(s->key);
    free(s->priorities);
    if (s->what) { /* the lock was made */
        pthread_cond_destroy(&s->dog_cv);
        pthread_mutex_destroy(&s->mu);
    }
    free(s);
    return rc;
}

uint16_t th_http_port(const th_http_server *s)
{
    return s->url.port;
}

const char *th_http_url_of(const th_http_server *s)
{
    return s->url_text;
}

void th_http_quiesce(th_http_server *s)
{
    if (!s || !s->d)
        return;
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

void th_http_stop(th_http_server *s)
{
    if (!s)
        return;
    /* libmicrohttpd aborts when stopped with a suspended connection:
     * every one is resumed, and none suspends again. */
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (hconn *hc = s->conns; hc; hc = hc->next)
        if (hc->suspended) {
            hc->suspended = false;
            MHD_resume_connection(hc->c);
        }
    pthread_mutex_unlock(&s->mu);
    if (s->d)
        MHD_stop_daemon(s->d);
    if (s->dog_started) {
        pthread_mutex_lock(&s->mu);
        s->dog_stop = true;
        pthread_cond_signal(&s->dog_cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->dog, NULL);
    }
    /* Left: records reserved at accept for connections that never
     * started. */
    while (s->conns) {
        hconn *hc = s->conns;
        conn_unlink(s, hc);
        free(hc);
    }
    pthread_cond_destroy(&s->dog_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->priorities);
    free(s->routes);
    if (s->key) {
        memset(s->key, 0, strlen(s->key));
        free(s->key);
    }
    free(s->cert);
    free(s);
}
