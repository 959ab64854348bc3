/* rpc_int.h - private to host/rpc: what server.c (connections, writing,
 * limits, events, listening, shutdown) and rpc_methods.c (the methods) share.
 *
 * Every function declared here runs on the loop thread only, except
 * on_call_event() (any thread; see server.c's banner).  Nothing outside
 * host/rpc includes this header.
 */
#ifndef TH_RPC_INT_H
#define TH_RPC_INT_H

#include "front/rpc.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "front/reload_watch.h"
#include "front/rpc_config.h"

/* The outcomes the RPC front counts (th_stat_front_event; their names in
 * th_rpc_front's table, rpc_front.c). */
enum {
    TH_RPC_EV_FD_LIMIT,        /* refused: "fd_limit"                  */
    TH_RPC_EV_MAX_CONNECTIONS, /* refused: "max_connections"           */
    TH_RPC_EV_MAX_PER_UID,     /* refused: "max_connections_per_uid"   */
    TH_RPC_EV_ACCEPT,          /* refused: "accept_failed" (EMFILE...) */
    TH_RPC_EV_IDLE,            /* closed: "idle_timeout"               */
    TH_RPC_EV_FRAME,           /* closed: "frame_timeout"              */
    TH_RPC_EV_BUDGET,          /* closed: "max_buffered"               */
    TH_RPC_EV_MAX_PROTOCOL,    /* closed: "max_protocol_errors"        */
    TH_RPC_EV_INFLIGHT,        /* closed: "max_inflight"               */
    TH_RPC_EV_PROTOCOL,        /* a frame that broke the protocol      */
    TH_RPC_EV_N
};

typedef struct rpc_conn rpc_conn;
typedef struct rpc_call rpc_call;

/* A tools.call. */
struct rpc_call {
    rpc_call *next, *prev;      /* conn->calls */
    rpc_conn *conn;
    uint64_t msgid;
    uint64_t call_id, task_id;
    char tool[128];             /* as m_call took it (at most 127 bytes) */
    uint64_t t0;                /* uv_hrtime() at the request; 0 when the
                                   log level was below info then */
    bool responded;             /* the response was sent */
    bool starting;              /* (loop thread only) m_call is inside
                                   th_call_submit(): a final result that
                                   comes on the loop meanwhile is answered
                                   at once (answer_now) */
    bool done;                  /* answered for good while th_call_submit()
                                   ran on the loop: m_call frees it */
    uint8_t asks;               /* the tools.call option client_asks: bit
                                   1 << TOOLHOST_ASK_* the client answers */
};

/* A log line of one kind at most RATELOG_PER_SEC times a second. */
typedef struct rpc_ratelog {
    uint64_t t0;                /* uv_hrtime() / 1e6 when the second began
                                   (not uv_now(): the loop may stay in one
                                   accept callback for long) */
    uint32_t n;
    uint64_t suppressed;        /* since the last line written */
    int level;                  /* of the last line */
    char last[96];              /* its start, for the summary */
} rpc_ratelog;

/* A permission.request sent and not yet answered. */
typedef struct rpc_perm {       /* a request the host sent its client */
    struct rpc_perm *next;
    uint64_t msgid, call_id;
    uint64_t ask_id;            /* client.ask: the core's ask; 0: a
                                   permission.request */
} rpc_perm;

struct rpc_conn {
    rpc_conn *next, *prev;      /* srv->conns */
    th_rpc_server *srv;
    uint64_t id;                /* the session id, for logs */
    uv_pipe_t in, out;          /* socket: only `in` (both ways) */
    bool two_handles;           /* stdio */
    int handles_open;
    th_rpc_reader rd;
    th_principal who;
    th_session *session;
    rpc_call *calls;
    uint32_t inflight;          /* calls not yet answered */
    uint64_t outbuf;            /* bytes in uv_write()s not yet done */
    uint64_t next_msgid;        /* for our requests to the client */
    rpc_perm *perms;
    bool task_tools_listed;     /* what the client was last told (or saw at
                                   connect): get_running_tasks is listed */
    /* The digests of the lists the client was last shown (at connect, or
     * with the last tools.changed, resources.changed, prompts.changed):
     * tools (without the task tools), resources with templates, prompts;
     * 0: unknown (out of memory).  Loop thread. */
    uint64_t list_digest[3];
    bool reading;
    bool closing;               /* no more reads or writes */
    bool flush_close;           /* close once outbuf drains */
    th_buf pend;                /* frames sent during this loop turn, written
                                   together by flush_pending() */
    char *flush_reason;
    bool session_closed;
    /* th_session_close() runs on a thread of its own (closer), which then
     * links the connection into srv->closed and wakes the loop. */
    pthread_t closer;
    bool has_closer;
    rpc_conn *closed_next;      /* srv->closed, under srv->mu */
    bool lost_event;            /* under srv->mu: a result could not be
                                   queued (out of memory): close */
    /* limits (all uv_now() times, ms) */
    uint64_t in_counted;        /* pending input counted in srv->in_total */
    uint64_t last_active;       /* last byte read, or last seen busy */
    uint64_t frame_t0;          /* a partial frame began; 0: none */
    uint32_t proto_errors;
    uint32_t log_lines;         /* conn_log() lines written */
    uint64_t log_suppressed;    /* and suppressed */
    bool quiet;                 /* refused at accept: no disconnect line */
};

typedef enum {
    EV_CALL = 1,
    EV_PERM,
    EV_TOOLS_CHANGED,
    EV_TASK_TOOLS,              /* only the task tools came or went */
    EV_ASK                      /* a tool's ask_client() */
} rpc_ev_type;

typedef struct rpc_ev {
    struct rpc_ev *next;
    rpc_ev_type type;
    rpc_call *call;             /* EV_CALL */
    rpc_conn *conn;             /* EV_PERM, EV_TOOLS_CHANGED, EV_TASK_TOOLS */
    th_event_kind kind;
    uint64_t call_id, task_id;
    uint64_t origin;            /* EV_PERM: th_call_origin() of call_id */
    bool has_result;
    th_result_copy res;         /* for a packed final result (frame set):
                                   kind, ok, error, task_id only */
    th_buf frame;               /* EV_CALL, final result of a call: the
                                   response frame, packed by the thread
                                   that delivered it */
    double fraction;
    char *message;
    uint8_t *data;              /* progress data, permission args */
    size_t data_len;
    uint32_t coalesced;
    char *tool, *reason;        /* EV_PERM */
    uint64_t ask_id;            /* EV_ASK (data: the request's JSON) */
    int ask_kind;               /* EV_ASK: TOOLHOST_ASK_* */
} rpc_ev;

struct th_rpc_server {
    uv_loop_t loop;
    pthread_t loop_tid;         /* the thread that runs the loop */
    th_host *host;
    msgpack_unpacked msg;       /* the frame being dispatched; its zone is
                                   cleared after each frame, kept between */
    const th_rpc_cfg *cfg; /* borrowed: the start's only (NULL after) */
    uint64_t max_frame, max_outbuf, grace_ms;
    uint32_t max_inflight;
    bool stdio;
    uv_pipe_t listener;
    bool listening;
    /* A client libuv accepted while no connection could be made (out of
     * memory): taken into `drop` (uv_accept, so the listener is polled
     * again) and closed; one at a time, the next waits (drop_pending). */
    uv_pipe_t drop;
    bool drop_busy, drop_pending;
    char *sock_path;            /* to unlink at the end */
    bool bound;                 /* sock_path is ours */
    uv_signal_t sigterm, sigint;
    bool signals;
    th_reload_watch *reload;    /* hot reload triggers (th/reload.h) */
    uv_async_t wake;
    uv_prepare_t flush;         /* before each poll: write what is pending */
    uint32_t n_pending;         /* connections with pend.len > 0 */
    uv_timer_t grace, hard;
    pthread_mutex_t mu;         /* guards evq_*, closed, stop_req,
                                   wake_closed */
    rpc_ev *evq_head, *evq_tail;
    rpc_conn *closed;           /* sessions closed, for the loop to finish */
    bool lost_events;           /* some conn has lost_event set */
    bool stop_req;
    bool wake_closed;           /* no uv_async_send() any more */
    bool stopping, cancelled_rest;
    rpc_conn *conns;
    uint32_t n_conns;
    uint64_t conns_total, calls_total;
    uint64_t start;             /* uv_hrtime() */
    th_front_ops ops;
    void (*on_ready)(th_rpc_server *, void *);
    bool has_listen_fd;         /* socket activation (opts) */
    int listen_fd;
    void *ready_ud;
    /* limits (host config; see the banner) */
    uint32_t max_conns, max_conns_uid, max_proto_errors, conn_log_lines;
    uint64_t idle_ms, frame_ms, max_buffered;
    uint64_t fd_limit;          /* RLIMIT_NOFILE at start; 0: none */
    uint64_t in_total, out_total;
    uv_timer_t sweep;
    bool budget_busy;           /* check_budget() is running */
    rpc_ratelog rl_accept, rl_refuse, rl_budget, rl_timeout;
    uint64_t refused, closed_idle, closed_frame, closed_budget,
        closed_proto;
    /* the short path (the core's policy, call_fast.c) */
    uint64_t short_calls;       /* calls answered while they started */
    rpc_call *spare;            /* freed call records kept for reuse */
    uint32_t n_spare;           /* at most RPC_SPARE_CALLS */
    /* stdio input that epoll refuses (a file, /dev/null): start_stdio() */
    pthread_t relay;
    bool relay_started;
    int relay_src, relay_dst;
};

/* ---- server.c: writing, logging, limits, calls, events ------------------- */

/* Errors and results to a request of the client; notifications. */
void send_error(rpc_conn *c, uint64_t msgid, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void send_result(rpc_conn *c, uint64_t msgid, th_buf *res);
void send_true(rpc_conn *c, uint64_t msgid);
void send_notify(rpc_conn *c, const char *method, th_buf *params);
/* A line a client can provoke: at most max_conn_log_lines per connection. */
void conn_log(rpc_conn *c, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Closes a connection after telling why in host.disconnect. */
void conn_kill(rpc_conn *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void conn_close(rpc_conn *c, bool graceful, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* May use host.reload and see the whole host.stats. */
bool is_admin(const rpc_conn *c);
/* The result map of a call (th/codec.h, the one encoder). */
int pack_result(th_buf *out, const th_result_copy *r);
/* A zeroed call record (a spare one when there is one), or NULL. */
rpc_call *call_new(th_rpc_server *srv);
/* Unlinks and frees a call record (keeps it as a spare). */
void call_free(rpc_call *call);
#define RPC_SPARE_CALLS 256
/* After th_call_submit(): frees a call answered for good while it ran on
 * the loop (the core timed it, call_fast.c). */
void call_started(rpc_call *call);
/* Any thread: the core's event callback for one call (th_call_submit). */
void on_call_event(const th_event *e, void *ud);

/* ---- rpc_methods.c -------------------------------------------------------- */

/* One parsed frame of the client: a request, a notification or a response
 * to one of our requests (permission.request). */
void rpc_dispatch(rpc_conn *c, const msgpack_object *o);
/* The digest of what session s is shown by tools.list, the task tools
 * left out (they have tools.changed of their own); a th_view_fn, ud
 * unused; 0 when out of memory. */
uint64_t rpc_tools_digest(th_session *s, void *ud);

/* ---- rpc_content.c: resources, prompts, completion ------------------------- */

void rpc_m_resources_list(rpc_conn *c, uint64_t msgid,
                          const msgpack_object *params);
void rpc_m_resources_templates(rpc_conn *c, uint64_t msgid,
                               const msgpack_object *params);
void rpc_m_resources_read(rpc_conn *c, uint64_t msgid,
                          const msgpack_object *params);
void rpc_m_prompts_list(rpc_conn *c, uint64_t msgid,
                        const msgpack_object *params);
void rpc_m_prompts_get(rpc_conn *c, uint64_t msgid,
                       const msgpack_object *params);
void rpc_m_complete(rpc_conn *c, uint64_t msgid, const msgpack_object *params);
/* The digests of what session s is shown by resources.list with
 * resources.templates, and by prompts.list (th_view_fn: ud unused); 0 when
 * out of memory. */
uint64_t rpc_resources_digest(th_session *s, void *ud);
uint64_t rpc_prompts_digest(th_session *s, void *ud);

#endif
