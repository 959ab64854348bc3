/* front/http.h - a small HTTP server layer over libmicrohttpd: one daemon per
 * http:// (or https://) listen entry, requests routed by exact path to a
 * handler.  The MCP Streamable HTTP front (host/mcp/http.c) mounts on it;
 * other endpoints (metrics) can mount beside it.
 *
 * Threads: libmicrohttpd's poll() loop on a small pool of threads
 * (th_http_opts.threads) serves every connection, so an idle or waiting
 * connection costs memory, not a thread.  A handler or a content callback
 * therefore never blocks: when it has nothing to give yet it suspends its
 * connection (th_http_suspend) and returns (MHD_YES from a handler, 0 from
 * a content callback); another thread wakes it (th_http_wake), or its own
 * deadline does, or its client hanging up, and libmicrohttpd then calls
 * it again on a pool thread.  A watchdog thread per server closes
 * connections past their deadlines (the request head, the body:
 * libmicrohttpd's own timeout restarts with every byte, so it cannot stop
 * a client that trickles), wakes suspended ones whose deadline passed and
 * watches the sockets of suspended ones for a hang-up (libmicrohttpd does
 * not while a connection is suspended).
 *
 * Every request is refused with 400 before any handler sees it when a
 * header name or value holds a NUL byte (the C strings the handlers read
 * would end there: "Bearer <token>\0junk" must not read as the token). */
#ifndef TH_HTTP_H
#define TH_HTTP_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "th/err.h"

/* The default GnuTLS priorities (mcp.tls_priorities): TLS 1.2 and 1.3
 * only, AEAD ciphers only, forward-secret key exchange only (no static
 * RSA, no CBC, no TLS 1.0/1.1). */
#define TH_HTTP_TLS_PRIORITIES                                                 \
    "SECURE128:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:"          \
    "+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:+AES-128-CCM:"          \
    "+AES-256-CCM:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:+DHE-RSA"

/* A parsed listen entry: http://HOST:PORT/PATH or https://... HOST is an
 * IPv4 literal, a bracketed IPv6 literal or "localhost"; PORT 0 takes a
 * free port (the log says which); PATH defaults to "/mcp". */
typedef struct th_http_url {
    bool tls;
    bool loopback;          /* 127.0.0.0/8, ::1 (localhost)          */
    char host[64];          /* as written, without brackets          */
    uint16_t port;
    char path[256];
    struct sockaddr_storage addr;
    socklen_t addr_len;
} th_http_url;

/* 0, or TH_EINVAL with a sentence in err. */
int th_http_parse_url(const char *s, th_http_url *u, th_error *err);

/* A route: `handle` is libmicrohttpd's access handler for requests whose
 * path is `path` exactly; *req_cls starts NULL and is the handler's.
 * `completed` (may be NULL) runs once per request that reached the
 * handler, when the request is over (sent, failed or the client left). */
typedef struct th_http_route {
    const char *path;
    enum MHD_Result (*handle)(void *ud, struct MHD_Connection *c,
                              const char *method, const char *upload,
                              size_t *upload_size, void **req_cls);
    void (*completed)(void *ud, struct MHD_Connection *c, void **req_cls,
                      enum MHD_RequestTerminationCode why);
    void *ud;
} th_http_route;

typedef struct th_http_opts {
    const char *url;           /* the listen entry                       */
    bool allow_remote;         /* a non-loopback address may be bound    */
    const char *tls_cert;      /* PEM files, required for https://       */
    const char *tls_key;
    unsigned max_connections;  /* 0: 256                                 */
    unsigned client_timeout_s; /* idle connection closed after; 0: none  */
    int sndbuf;                /* > 0: each connection's kernel send
                                  buffer (bounds what a slow client holds
                                  in the kernel; no autotuning)          */
    const char *what;          /* the config section named in log lines
                                  ("mcp"); NULL: "mcp"                   */
    unsigned header_timeout_ms; /* a request's line and headers (and the
                                  TLS handshake) must be in within this
                                  of the connection's start or of the
                                  previous request's end; bytes do not
                                  extend it; 0: 10 s                    */
    unsigned body_timeout_ms;  /* the whole body within this of the
                                  headers; 0: 60 s                      */
    unsigned max_per_address;  /* connections from one client address;
                                  past it a new one is closed at once;
                                  0: no cap of its own                  */
    const char *tls_priorities; /* GnuTLS priority string; NULL: the
                                  TH_HTTP_TLS_PRIORITIES              */
    unsigned threads;          /* the pool serving all connections; 0: 2 */
} th_http_opts;

typedef struct th_http_server th_http_server;

/* Starts serving `routes` (copied; the strings and ud must outlive the
 * server) on o->url.  0, or TH_EINVAL (bad entry), TH_EPERM (non-loopback
 * without allow_remote), TH_ECONFIG (TLS files), TH_EIO (bind) with a
 * sentence in err.  Logs "http: serving URL" with the bound port. */
int th_http_start(const th_http_opts *o, const th_http_route *routes,
                  size_t n_routes, th_http_server **out, th_error *err);
/* Listening TCP sockets from the service manager (socket activation):
 * th_http_start() serves an entry on the one bound to its address and
 * port (or the any-address with its port) instead of binding.  Called
 * before the fronts start. */
void th_http_set_listen_fds(const int *fds, size_t n);
/* Closes (with a warning) those no entry took; after the fronts start. */
void th_http_close_unused_listen_fds(void);
/* The bound port, and the URL with it ("http://127.0.0.1:PORT/mcp"). */
uint16_t th_http_port(const th_http_server *s);
const char *th_http_url_of(const th_http_server *s);
/* Stops accepting connections (the listening socket closes); the running
 * ones go on.  Then th_http_stop() waits for them (handlers must end). */
void th_http_quiesce(th_http_server *s);
void th_http_stop(th_http_server *s);

/* ---- waiting without a thread ----------------------------------------------
 *
 * A connection's record, counted: a thread that will wake a connection
 * (a worker with a message for it) holds a reference, taken by the
 * connection's handler; the record outlives the connection (a wake after
 * the close does nothing) and is freed with its last reference.  Every
 * reference is dropped before th_http_stop() returns (a response's free
 * callback runs within it). */
typedef struct th_http_conn th_http_conn;

/* The record of c with a reference for the caller, or NULL (out of
 * memory when it connected: it cannot wait; answer or close it). */
th_http_conn *th_http_conn_ref(struct MHD_Connection *c);
void th_http_conn_unref(th_http_conn *hc);

/* From c's own handler or content callback only: suspends c until
 * th_http_wake(), the monotonic time until_ms (th_http_now_ms(); 0: no
 * deadline) or its client hanging up.  1: suspended (return at once);
 * 0: a wake came since the last suspend (none is lost between the
 * caller's check and this call), nothing is suspended: check again;
 * -1: the server is stopping: end the request now. */
int th_http_suspend(th_http_conn *hc, int64_t until_ms);
/* From any thread: resumes hc if suspended, else makes its next
 * th_http_suspend() return 0.  Nothing once hc's connection closed. */
void th_http_wake(th_http_conn *hc);
/* The client closed or reset the connection (seen while it was
 * suspended). */
bool th_http_hung_up(th_http_conn *hc);
/* CLOCK_MONOTONIC in milliseconds. */
int64_t th_http_now_ms(void);

/* Queues a response of `status` with a small text body (and the header
 * `name: value` when name is not NULL). */
enum MHD_Result th_http_reply(struct MHD_Connection *c, unsigned status,
                              const char *content_type, const char *body,
                              const char *hname, const char *hvalue);

#endif
