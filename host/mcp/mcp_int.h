/* host/mcp/mcp_int.h - internals shared by the files of the MCP core
 * (mcp.c, mcp_tasks.c, mcp_result.c).  Not for transports: they use mcp.h. */
#ifndef TH_MCP_INT_H
#define TH_MCP_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "mcp.h"
#include "th/host.h"

/* JSON-RPC error codes. */
#define MCP_PARSE_ERROR (-32700)
#define MCP_INVALID_REQUEST (-32600)
#define MCP_METHOD_NOT_FOUND (-32601)
#define MCP_INVALID_PARAMS (-32602)
#define MCP_INTERNAL_ERROR (-32603)
#define MCP_RESOURCE_NOT_FOUND (-32002)
/* 2026-07-28: the envelope names a revision this server does not serve
 * (data: {supported, requested}). */
#define MCP_UNSUPPORTED_VERSION (-32022)

/* The keys of the per-request _meta envelope of 2026-07-28, and of the
 * server's identity in a result's _meta. */
#define MCP_META_PROTOCOL "io.modelcontextprotocol/protocolVersion"
#define MCP_META_CLIENT_CAPS "io.modelcontextprotocol/clientCapabilities"
#define MCP_META_CLIENT_INFO "io.modelcontextprotocol/clientInfo"
#define MCP_META_LOG_LEVEL "io.modelcontextprotocol/logLevel"
#define MCP_META_SERVER_INFO "io.modelcontextprotocol/serverInfo"
/* subscriptions/listen (2026-07-28): the listen request's id, on its
 * acknowledgement, its notifications and its closing result. */
#define MCP_META_SUBSCRIPTION "io.modelcontextprotocol/subscriptionId"

typedef enum mcp_task_status {
    MCP_TASK_WORKING = 0,
    MCP_TASK_INPUT_REQUIRED,
    MCP_TASK_COMPLETED,
    MCP_TASK_FAILED,
    MCP_TASK_CANCELLED
} mcp_task_status;

/* A tasks/result waiting for the end of a task: a thread in th_task_wait
 * (mcp_tasks.c).  Under m->mu: the list and `done`. */
typedef struct mcp_waiter {
    struct th_mcp_session *m;
    pthread_t th;
    json_t *id;              /* the request id (owned) */
    uint64_t task_id;
    char *tool;
    uint32_t out_type;
    bool structured;
    bool done;               /* the thread ended: join it */
    struct mcp_waiter *next;
} mcp_waiter;

/* One tools/call in flight (or a task-augmented one until it expires).
 * Under m->mu except where said. */
/* Per call: at most MCP_LOG_PER_SEC log_call() lines a second go to the
 * client; the rest are counted and said in one note (mcp.c, Logging). */
typedef struct mcp_log_gate {
    int64_t win_ms;          /* start of the current one-second window */
    int n;                   /* lines sent in it */
    unsigned dropped;        /* lines dropped since the last note */
    int drop_level;          /* the highest MCP level among them */
} mcp_log_gate;

typedef struct mcp_call {
    struct th_mcp_session *m;
    int refs;
    json_t *id;              /* the request id (owned) */
    json_t *token;           /* _meta.progressToken, or NULL */
    char *tool;              /* tool_buf, or (a long name) its own */
    char tool_buf[64];
    uint32_t out_type;       /* the tool's stdout semantic type */
    bool structured;         /* the tool declares an object output schema:
                                structuredContent */
    uint64_t call_id;        /* 0 until th_call_start returned (or asked) */
    double last_progress;    /* the last progress sent, < 0 none yet */
    mcp_log_gate log;        /* [mu] the tool's log_call() lines */
    bool started;            /* th_call_start returned */
    bool finished;           /* the final event arrived */
    bool client_cancelled;   /* notifications/cancelled: no response */
    bool no_response;        /* the response went out (or never will) */
    /* Task-augmented (2025-11-25 tasks). */
    bool task;
    bool announced;          /* CreateTaskResult sent */
    bool announce_pending;   /* sent at the acknowledgement (the core's
                                store knows a task from then on) */
    bool acked;              /* the core acknowledged it: a core task */
    json_t *result;          /* never acknowledged (it failed first): its
                                CallToolResult, as the core has no task */
    char task_id[32];
    /* 2026-07-28 input_required (mcp.c, "Input required"): */
    bool can_sample, can_elicit; /* the request's clientCapabilities */
    json_t *answers;         /* the inputResponses of the earlier rounds,
                                in the order the tool asked (owned), or
                                NULL: a first round */
    json_t *asked;           /* the methods asked in those rounds */
    size_t n_asked;          /* ask_client() calls of this run */
    uint64_t args_hash;      /* of the request's arguments */
    mcp_task_status status;
    char *status_msg;
    int64_t created_ms, updated_ms, ttl_ms;
    struct mcp_call *next;
} mcp_call;

/* The lists a client is told changed (notifications/<list>/list_changed,
 * mcp.c front_tools_changed). */
typedef enum mcp_list_kind {
    MCP_LIST_TOOLS,
    MCP_LIST_RESOURCES,     /* resources and resource templates */
    MCP_LIST_PROMPTS,
    MCP_LISTS
} mcp_list_kind;

typedef struct mcp_list_state {
    uint64_t hash;           /* the digest of the list the client was last
                                shown (th_session_view_digest); 0: unknown
                                (out of memory) */
    bool pending;            /* a list_changed waits for its second */
    int64_t sent_ms;         /* when the last one went out */
} mcp_list_state;

struct th_mcp_session {
    th_host *h;
    th_session *s;
    th_mcp_transport t;
    void *ud;
    size_t max_message;
    bool http;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char version[16];
    bool initialized;        /* initialize answered, or a 2026-07-28
                                request served */
    atomic_bool modern;      /* the session speaks 2026-07-28 (set once,
                                by its first enveloped request; never
                                cleared): results carry resultType and
                                serverInfo, lists their cache hints */
    bool elicitation;        /* the client declared elicitation */
    bool sampling;           /* the client declared sampling */
    int log_level;           /* syslog-ish: 0 debug .. 7 emergency; -1 off */
    mcp_log_gate log_unknown; /* [mu] log_call() lines of a call not yet
                                 known here (before th_call_start returned) */
    th_buf txt;              /* under mu: the text of a plain answer
                                (on_event), kept from call to call */
    mcp_call *calls;
    size_t inflight;         /* calls not yet finished */
    uint64_t next_out_id;    /* ids of our requests (elicitation) */
    struct mcp_ask *asks;
    /* list_changed, per list (mcp.c) */
    mcp_list_state lists[MCP_LISTS];
    /* in the timer's list (deferred list_changed, task expiry: one
     * thread for every session of the process, mcp.c) */
    struct th_mcp_session *tprev, *tnext;
    bool timed;
    uint64_t task_seq;
    /* tasks/result requests waiting in th_task_wait (mcp_tasks.c) */
    mcp_waiter *waiters;
    size_t n_waiters;
    volatile int wait_stop;  /* the session closes: the waits end */
    bool own_tasks_only;     /* no uid (a token without `uid`): only the
                                tasks this session started are visible */
    bool deferred;           /* input thread: the request being dispatched
                                is answered later (request_done then) */
    const char *traceparent; /* input thread: the HTTP request's
                                traceparent header while it is
                                dispatched (th_mcp_session_set_traceparent),
                                or NULL */
    bool run_short;          /* th_mcp_opts.run_short: calls pass
                                th_call_opts.short_client */
    struct mcp_listen *listens; /* [mu] open subscriptions/listen */
    size_t n_listens;
    char *owner;             /* the principal, as text: an input_required
                                state is answered by its owner only */
    struct mcp_sub *subs;    /* [mu] resources/subscribe URIs */
    size_t n_subs;
    bool subs_pending;       /* [mu] one of them has an update to send */
    int drain_waiters;       /* threads in th_mcp_session_drain (the end
                                of a call wakes cv only for them, not the
                                timer on every call) */
};

/* An open subscriptions/listen (2026-07-28): its request, answered only
 * when the server closes it. */
typedef struct mcp_listen {
    json_t *id;              /* the listen request's id (a reference) */
    bool tools;              /* toolsListChanged honoured */
    struct mcp_listen *next;
} mcp_listen;

typedef struct mcp_ask {     /* a request we sent the client */
    char id[32];
    uint64_t call_id;
    uint64_t client_ask;     /* a tool's ask_client() (its ask id), or 0:
                                a permission ask */
    struct mcp_ask *next;
} mcp_ask;

int64_t mcp_wall_ms(void);
void mcp_send(struct th_mcp_session *m, json_t *msg, const json_t *req);
void mcp_send_result(struct th_mcp_session *m, const json_t *id,
                     json_t *result);
void mcp_send_error(struct th_mcp_session *m, const json_t *id, int code,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void mcp_request_done(struct th_mcp_session *m, const json_t *id);
/* The index that a list request's "cursor" (a nextCursor handed out by an
 * earlier `method`) names, in *off; 0 without a cursor.  false, with the
 * invalid-params error sent, when it is not one. */
/* A result of a list or a read: under 2026-07-28 it carries the cache
 * hints (ttlMs 0: a reload may change it at once; cacheScope private: it
 * is the principal's), then goes as mcp_send_result(). */
void mcp_send_cacheable(struct th_mcp_session *m, const json_t *id,
                        json_t *result);
bool mcp_list_cursor(struct th_mcp_session *m, const json_t *id,
                     const json_t *params, const char *method, size_t *off);

/* mcp_result.c: a CallToolResult for a final result.  `audio`: the
 * client's protocol has audio blocks (mcp_has_audio).  NULL: no memory. */
/* A content block as MCP has it, in what the session's protocol has:
 * without audio (before 2025-03-26) an audio clip goes as an embedded
 * resource, without resource_link (before 2025-06-18) a link as a text
 * naming it.  NULL: no memory. */
struct th_block;
json_t *mcp_block_json(const struct th_block *b, bool audio, bool links);

json_t *mcp_tool_result(const th_result *r, const char *tool,
                        uint64_t call_id, uint32_t out_type,
                        bool structured, bool elicitation, bool audio,
                        bool links);
/* Whether the session's protocol version has audio content blocks (from
 * 2025-03-26; the versions are dates, which compare as strings). */
static inline bool mcp_has_audio(const th_mcp_session *m)
{
    return strcmp(m->version, "2025-03-26") >= 0;
}
/* Whether the session's protocol version has resource_link blocks
 * (2025-06-18 on; the versions are dates, so they compare as strings). */
static inline bool mcp_has_links(const th_mcp_session *m)
{
    return strcmp(m->version, "2025-06-18") >= 0;
}
json_t *mcp_tool_error(const char *tool, int code, const char *message);
/* p[0..n) in base64 (nettle's), NUL-terminated, malloc'ed; NULL: no
 * memory. */
char *mcp_base64(const uint8_t *p, size_t n);

/* mcp_content.c: resources, prompts and completion (ABI 1.4).  `method`:
 * resources/list, resources/templates/list or prompts/list. */
void mcp_content_list(struct th_mcp_session *m, const json_t *id,
                      const json_t *params, const char *method);
void mcp_resources_read(struct th_mcp_session *m, const json_t *id,
                        const json_t *params);
void mcp_resources_subscribe(struct th_mcp_session *m, const json_t *id,
                             const json_t *params, bool on);
void mcp_prompts_get(struct th_mcp_session *m, const json_t *id,
                     const json_t *params);
void mcp_complete(struct th_mcp_session *m, const json_t *id,
                  const json_t *params);
/* The digests of the resources (with the templates) and of the prompts
 * session s is shown, as resources/list, resources/templates/list and
 * prompts/list render them whole (th_view_fn: ud unused); 0 when out of
 * memory. */
uint64_t mcp_resources_digest(th_session *s, void *ud);
uint64_t mcp_prompts_digest(th_session *s, void *ud);
/* mcp.c: the digest of a JSON value's compact text, keys sorted (nonzero), 0 when out
 * of memory. */
uint64_t mcp_json_digest(const json_t *v);
/* A subscription: its URI, and whether an update waits to be sent. */
typedef struct mcp_sub {
    char *uri;
    bool pending;
} mcp_sub;
/* Whether any session of the process holds a subscription (one atomic
 * load: a resource update nobody asked for costs no lock). */
bool mcp_subs_any(void);
/* m->mu held: marks the subscription to uri as updated; true when the
 * session has one. */
bool mcp_subs_mark_locked(struct th_mcp_session *m, const char *uri);
/* m->mu held (the timer thread): sends the marked updates. */
void mcp_subs_send_locked(struct th_mcp_session *m);
/* Frees the subscriptions (the session ends). */
void mcp_subs_free(struct th_mcp_session *m);
/* The whole response to a tools/call as text when the result is plain
 * (done, text stdout, no structuredContent): 0; 1 not plain; -1 no
 * memory. */
int mcp_tool_result_text(th_buf *b, const json_t *id, const th_result *r,
                         uint64_t call_id, uint32_t out_type,
                         bool structured);

/* mcp_json.c: appends the JSON text of msgpack value data[0..len), as
 * th_json_from_msgpack_lossy() then mcp_json_append() would write it.
 * 0; 1: a value the tree treats in its own way (use the tree); -1: no
 * memory.  b is as it was unless 0. */
int mcp_json_append_msgpack(th_buf *b, const uint8_t *data, size_t len);
/* The same for a value already unpacked (from bytes th_mp_check passed). */
struct msgpack_object;
int mcp_json_append_mpobject(th_buf *b, const struct msgpack_object *o);

/* mcp_tasks.c: the tasks/... methods over the session's task records. */
json_t *mcp_task_json(const mcp_call *c);
void mcp_tasks_get(struct th_mcp_session *m, const json_t *id,
                   const json_t *params);
void mcp_tasks_result(struct th_mcp_session *m, const json_t *id,
                      const json_t *params);
void mcp_tasks_list(struct th_mcp_session *m, const json_t *id,
                    const json_t *params);
void mcp_tasks_cancel(struct th_mcp_session *m, const json_t *id,
                      const json_t *params);
/* Sends the CreateTaskResult of task call c (m->mu held); `deferred`:
 * the request waited for it (then it ends the request). */
void mcp_task_announce_locked(struct th_mcp_session *m, mcp_call *c,
                              bool deferred);
/* A task ended (m->mu held): sends notifications/tasks/status. */
void mcp_task_ended_locked(struct th_mcp_session *m, mcp_call *c);
/* Ends the waiting tasks/result requests (session close, m->mu not
 * held): they get no answer. */
void mcp_tasks_stop_waiters(struct th_mcp_session *m);
/* Drops expired finished task records (m->mu held). */
void mcp_tasks_expire_locked(struct th_mcp_session *m, int64_t now_ms);
void mcp_call_unref_locked(struct th_mcp_session *m, mcp_call *c);
int64_t mcp_task_ttl(struct th_mcp_session *m, const json_t *task);

#endif
