/* host/mcp/mcp.h - the MCP protocol core, shared by its transports (stdio:
 * host/mcp/stdio.c, Streamable HTTP: host/mcp/http.c).
 *
 * A session speaks MCP (JSON-RPC 2.0, protocol versions 2025-11-25,
 * 2025-06-18, 2025-03-26, 2024-11-05 after initialize; 2026-07-28 per
 * request, with server/discover) for one client over one host session:
 * lifecycle and version negotiation, tools/list, tools/call (progress, cancellation,
 * permission asks through elicitation), tasks/..., logging, list_changed.
 * The transport frames messages and hands each one in with
 * th_mcp_session_input(); the session answers through the transport's
 * send().  docs/mcp.md describes the behaviour on the wire.
 *
 * Threads: th_mcp_session_input() from one thread at a time; send() and
 * request_done() are called from any thread (the caller's, a worker's, the
 * manager's notifier), possibly concurrently: the transport serialises.
 */
#ifndef TH_MCP_H
#define TH_MCP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "th/buf.h"
#include "th/err.h"
#include "th/host.h"

/* The outcomes the Streamable HTTP front counts (th_stat_front_event;
 * their names in th_mcp_front's table, mcp_front.c). */
enum {
    TH_MCP_EV_UNAUTHORIZED, /* refused: "unauthorized", HTTP 401   */
    TH_MCP_EV_FORBIDDEN,    /* refused: "forbidden", HTTP 403      */
    TH_MCP_EV_TOO_LARGE,    /* refused: "body_too_large", HTTP 413 */
    TH_MCP_EV_MAX_STREAMS,  /* refused: "max_streams", HTTP 429    */
    TH_MCP_EV_MAX_SESSIONS, /* refused: "max_sessions", HTTP 503   */
    TH_MCP_EV_SHUTDOWN,     /* refused: "shutting_down", HTTP 503  */
    TH_MCP_EV_SLOW_READER,  /* closed: "slow_reader" (max_queued)  */
    TH_MCP_EV_PROTOCOL,     /* a message that broke the protocol   */
    TH_MCP_EV_N
};

typedef struct th_mcp_session th_mcp_session;

typedef struct th_mcp_transport {
    /* Sends one JSON-RPC message (a JSON object, borrowed for the call).
     * `req` is the id of the client request this message belongs to (its
     * response, or a notification/request sent while serving it:
     * progress, elicitation), or NULL when it belongs to none
     * (list_changed, task status, log messages).  Any thread; calls may be
     * concurrent: the transport serialises them. */
    void (*send)(void *ud, const json_t *msg, const json_t *req);
    /* Request `req` is over: its response went out through send(), or
     * none will (cancelled).  HTTP ends that POST's stream.  May be NULL.
     * Called after the last send() for req, once for every request with
     * a valid id (string or integer), whatever the method or the outcome:
     * from inside th_mcp_session_input() for requests answered at once,
     * later (any thread) for a running tools/call or a waiting
     * tasks/result.  Never for notifications, responses, or messages
     * without a usable id (those errors go out with id null). */
    void (*request_done)(void *ud, const json_t *req);
    /* Optional: sends one response (a message with result or error, no
     * method) given as its compact JSON text (len bytes, no newline,
     * valid UTF-8), the same as send() of that value; the session uses it
     * for answers it writes without building a JSON tree (a plain
     * tools/call result).  NULL: always send(). */
    void (*send_text)(void *ud, const char *text, size_t len,
                      const json_t *req);
    /* Optional: a message for `req` (NULL: none) could not be built (out
     * of memory) and is lost.  A transport whose client would wait for
     * it for good ends the exchange (stdio stops the session).  Any
     * thread.  NULL: only logged. */
    void (*lost)(void *ud, const json_t *req);
} th_mcp_transport;

typedef struct th_mcp_opts {
    const char *toolset; /* NULL: every toolset the principal may use */
    size_t max_message;  /* bytes; 0: 16 MiB */
    bool http;           /* the transport is Streamable HTTP (what the
                            session may tell clients) */
    bool run_short;      /* the thread of th_mcp_session_input() serves
                            this one client only: its calls pass
                            th_call_opts.short_client, so a short sync
                            call (declared TOOLHOST_TOOL_SHORT) runs
                            there, no hand-off to a worker (docs/mcp.md,
                            "Speed") */
} th_mcp_opts;

/* The default of th_mcp_opts.max_message (host key mcp_max_message). */
#define TH_MCP_MAX_MESSAGE_DEFAULT ((size_t)16 << 20)

/* Opens a host session for `who` (copied) and an MCP session on it.
 * `t` is copied; `ud` is passed to its callbacks.  NULL with err set
 * (TH_ENOMEM, TH_EPERM when o->toolset names a toolset `who` may not use,
 * TH_ENOTFOUND when it names none). */
th_mcp_session *th_mcp_session_new(th_host *h, const th_principal *who,
                                   const th_mcp_transport *t, void *ud,
                                   const th_mcp_opts *o, th_error *err);
/* One message from the client: the text of one JSON value (no framing).
 * Parses it; answers -32700 (not JSON), -32600 (batch array or not a
 * request) itself.  A message longer than max_message is answered with an
 * error without being parsed.  From one thread at a time. */
void th_mcp_session_input(th_mcp_session *m, const char *text, size_t len);
/* The transport's W3C traceparent (an HTTP header) for the messages
 * input until it is set again (NULL: none); params._meta.traceparent
 * wins.  From the input thread; the string lives until then. */
void th_mcp_session_set_traceparent(th_mcp_session *m, const char *tp);
/* The same for a message the transport has parsed already (with
 * JSON_DECODE_ANY | JSON_ALLOW_NUL, within max_message): borrowed, not
 * parsed a second time. */
void th_mcp_session_input_value(th_mcp_session *m, json_t *msg);
/* A tools/call request of the plain shape, {"jsonrpc":"2.0","id":ID,
 * "method":"tools/call","params":{"name":NAME,"arguments":{...}}} (keys in
 * any order), read without a JSON tree (mcp_fast.c: yajl's events, the
 * arguments straight to msgpack, the bytes th_json_to_msgpack() of
 * jansson's tree gives).  args: the caller inits it and destroys it. */
typedef struct th_mcp_plain {
    bool id_is_str;
    int64_t id_int;
    char id_str[64];
    size_t id_len;
    char name[128];
    th_buf args;
} th_mcp_plain;
/* 1: text is such a request (fc filled); 0: not (parse it as usual: every
 * error is the tree path's); -1: no memory.  Any thread. */
int th_mcp_plain_scan(const char *text, size_t len, th_mcp_plain *fc);
/* The request's id as a new JSON value (NULL: no memory). */
json_t *th_mcp_plain_id(const th_mcp_plain *fc);
/* th_mcp_session_input() of a request th_mcp_plain_scan() read; id is
 * th_mcp_plain_id()'s (borrowed).  fc->args is taken.  From one thread at
 * a time, like th_mcp_session_input(). */
void th_mcp_session_input_plain(th_mcp_session *m, th_mcp_plain *fc,
                                const json_t *id);
/* The negotiated protocol version once initialize succeeded, else NULL. */
const char *th_mcp_session_version(const th_mcp_session *m);
/* Calls not yet answered (tasks included).  Any thread. */
size_t th_mcp_session_inflight(th_mcp_session *m);
/* Waits until no call is in flight, at most timeout_ms: true when none
 * is left.  Not from a transport callback. */
bool th_mcp_session_drain(th_mcp_session *m, int64_t timeout_ms);
/* The server stops: each open subscriptions/listen (2026-07-28) gets its
 * closing result and ends (request_done).  Any thread but a callback's. */
void th_mcp_session_close_listens(th_mcp_session *m);
/* Drops every 2026-07-28 input_required state of the process (the
 * front stops). */
void th_mcp_inputs_clear(void);
/* Ends the session: cancels its calls, waits within the host's grace; no
 * transport callback runs after it returns. */
void th_mcp_session_free(th_mcp_session *m);

/* Appends the compact JSON text of j to b (mcp_json.c): the text
 * json_dumps(JSON_COMPACT) makes, faster.  0, or -1 (out of memory, a
 * value JSON cannot hold) with b as it was. */
int mcp_json_append(th_buf *b, const json_t *j);
/* Appends s[0..n) (valid UTF-8) as a JSON string.  0 or -1. */
int mcp_json_append_string(th_buf *b, const char *s, size_t n);

/* The size of the tree JSON text p[0..n) would make, read without making
 * it (mcp_json.c), so that a front can refuse a body before jansson
 * spends memory on it: MCP_JSON_TOO_DEEP when arrays and objects nest
 * deeper than max_depth, MCP_JSON_TOO_MANY when it holds more than
 * max_elems elements (each '[', '{', ',' and ':' outside strings counts
 * one: every value and key but the first of each container), else 0.
 * Not a validator: bad JSON passes and fails in the parser after. */
#define MCP_JSON_TOO_DEEP 1
#define MCP_JSON_TOO_MANY 2
int mcp_json_measure(const char *p, size_t n, uint32_t max_depth,
                     uint32_t max_elems);

/* MCP over stdio (stdio.c): newline-delimited JSON-RPC read from in_fd and
 * written to out_fd, one session for `who`, on a libuv loop with
 * SIGTERM/SIGINT and the hot reload watcher, until end of input or a
 * signal; then the calls in flight get the host's shutdown_grace and the
 * rest are cancelled.  0, or an error with err set. */
int th_mcp_stdio_run(th_host *h, const th_principal *who,
                     const th_mcp_opts *o, int in_fd, int out_fd,
                     th_error *err);

/* The protocol revisions served, newest first, NULL-terminated: what
 * initialize agrees to and what MCP-Protocol-Version may name. */
extern const char *const mcp_versions[];
/* The revisions of the 2026-07-28 era served, newest first,
 * NULL-terminated: no initialize, a _meta envelope on every request,
 * server/discover (docs/mcp.md, "Protocol revisions"). */
extern const char *const mcp_modern_versions[];
/* Whether v is one of mcp_versions or mcp_modern_versions. */
bool mcp_version_served(const char *v);

#endif
