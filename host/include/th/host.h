/* th/host.h - one running host, its sessions, and the one call path.
 *
 * Every front (CLI, msgpack-RPC, MCP, the Lua code runtime) calls tools
 * through th_call_start() (docs/architecture.md has the layers): registry lookup (pins the plugin generation) ->
 * policy (toolset membership, caller ACL, permission) -> validation (the one
 * place, th_validate_call) -> the async manager (duplicates, queue, worker,
 * deadline, cancel, progress) -> execute -> output limits -> events.
 *
 * Threads: th_host_open/close from one thread.  Sessions and calls from any
 * thread.  Event callbacks run on whatever thread finishes the work (a
 * worker, a plugin's own thread, or the caller's own thread inside
 * th_call_start when a short sync call runs inline); a front that lives on
 * an event loop hands them over to its loop itself.  Events of one call
 * never run concurrently and arrive in order (RESULT, then for a task
 * PROGRESS* and DONE).  An event callback may start and cancel calls but
 * must not close its session or the host.  docs/manager.md has the whole
 * picture (threads, locks, the life of a task).
 *
 * Which toolset a call runs under (its timeout, limits, duplicate policy,
 * scope, concurrency, permission rules): the first toolset in config order
 * that contains the tool and that the session's principal may use.
 */
#ifndef TH_HOST_H
#define TH_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/config.h"
#include "th/err.h"
#include "th/tool.h"

typedef struct th_host th_host;
typedef struct th_session th_session;

/* Loads the plugins of `cfg` (taking ownership of it, even on failure),
 * builds the registry, checks toolsets against the tools, starts the
 * manager's workers.  Plugins marked optional that fail are logged and
 * skipped. */
int th_host_open(th_config *cfg, th_host **out, th_error *err);

/* th_host_open() with built-in plugins registered before the toolsets are
 * checked, so a toolset may name their tools (test fixtures).  Each descriptor is static data of the caller and must
 * outlive the host; init() (if any) is called with an empty config and
 * fini() at close.  A built-in tool belongs to the toolsets that name it or
 * list "*", like any tool, unless `member` says otherwise (below). */
typedef struct th_host_opts {
    const toolhost_plugin *const *builtins;
    size_t n_builtins;
    /* `config check`: when set, opening goes on past a plugin that does
     * not load, reporting each failure here, and then (when every plugin
     * loaded) every toolset, override and mock that names a tool no plugin
     * provides; the open still fails, with the first of them. */
    void (*on_error)(void *ud, const th_error *e);
    void *error_ud;
} th_host_opts;
int th_host_open_ex(th_config *cfg, const th_host_opts *opts, th_host **out,
                    th_error *err);

/* Decides whether built-in tool `tool` belongs to toolset `ts` (e.g.
 * run_code: only where ts->run_code.enabled).  Pure; any thread. */
typedef bool (*th_builtin_member_fn)(const th_toolset_cfg *ts,
                                     const char *tool, void *ud);

/* Registers one more built-in plugin after th_host_open() (from the thread
 * that opened the host, before sessions call its tools).  `desc` is static
 * data that must outlive the host.  `member` may be NULL (membership as for
 * any tool: named in the toolset or "*").  Fails with TH_ELOAD when a tool
 * name is taken.  The names "get_running_tasks", "cancel_task" and
 * "run_code" are reserved: a toolset may name them before they exist. */
int th_host_add_builtin_ex(th_host *h, const toolhost_plugin *desc,
                           th_builtin_member_fn member, void *ud,
                           th_error *err);
int th_host_add_builtin(th_host *h, const toolhost_plugin *desc,
                        th_error *err);
/* Registers fn(ud) to run once at th_host_close(), after every call ended
 * and every plugin was closed (built-ins included), newest first: where a
 * front frees what its built-in descriptors point to.  From the thread that
 * opened the host.  0, or TH_ENOMEM (fn will not run). */
int th_host_at_close(th_host *h, void (*fn)(void *ud), void *ud,
                     th_error *err);

/* Stops accepting calls, cancels what runs after the shutdown grace, waits
 * for every call, closes every plugin, runs the th_host_at_close() hooks,
 * frees everything. */
void th_host_close(th_host *h);

/* The host's current config, borrowed: valid until the next reload swaps
 * it (use it on the thread that opened the host before serving, or on the
 * reload thread).  Anything else takes a reference with
 * th_host_config_get() and drops it with th_config_unref(). */
const th_config *th_host_config(const th_host *h);
/* The host's current config with a new reference (never NULL). */
th_config *th_host_config_get(th_host *h);
th_registry *th_host_registry(th_host *h);


/* ---- Sessions ---------------------------------------------------------- */

typedef struct th_principal {
    uint32_t uid, gid;
    bool trusted; /* the in-process CLI: every toolset, no ACL */
    /* Only this toolset is usable (still subject to its ACL), or NULL.
     * Copied by th_session_open(). */
    const char *toolset;
    /* A user name given by a token, or NULL: allow_users entries match it
     * by name; uid is then (uint32_t)-1 and allow_groups never match.
     * Copied by th_session_open(). */
    const char *user;
} th_principal;

/* Whether `who` may administer the host: host.reload, the whole
 * host.stats, other users' tasks.  root and the in-process CLI always;
 * then the config's `admin: {users, groups}`, or without that section the
 * uid the host runs as.  Any thread. */
bool th_host_is_admin(th_host *h, const th_principal *who);
/* Names the rule for a refusal, e.g. "admin.users/admin.groups in
 * FILE:LINE:COL" or "without an admin: section, the uid the host runs as
 * (1000) and root"; into buf (size n), returned. */
const char *th_host_admin_rule(th_host *h, char *buf, size_t n);

/* What a front offers the core; every member may be NULL. */
typedef struct th_front_ops {
    /* Asks whoever drives the session whether call `call_id` of `tool`
     * may run.  The front answers later, from any thread, with
     * th_permission_answer(); until then the call waits (bounded by the
     * host's permission_timeout, then denied).  Returns 0, or nonzero when
     * it cannot ask (the call is then denied).  Called on the thread that
     * started the call, or on a pool worker (a tool with validate_args or
     * needs_permission started by a caller that does not block). */
    int (*ask_permission)(void *front_ud, uint64_t call_id, const char *tool,
                          const uint8_t *args, size_t args_len,
                          const char *reason);
    /* The session's tool list changed (a reload; the task tools too when
     * task_tools_changed is NULL). */
    void (*tools_changed)(void *front_ud);
    /* Only the built-in task tools (get_running_tasks, cancel_task) came
     * or went: the session's first live task was acknowledged or its last
     * one ended.  Any thread, outside every lock; calls may overtake each
     * other, so a front reads the current state (th_session_acquire)
     * rather than counting.  NULL: tools_changed is called instead. */
    void (*task_tools_changed)(void *front_ud);
    /* Appended (ABI 1.1): the front's name for toolhost_caller.front
     * (TOOLHOST_FRONT_CLI, _RPC, _MCP, _CODE); NULL when not said. */
    const char *front;
    /* Appended: a line a tool logged on call `call_id` with log_call()
     * (plugin.h), at `level` (TOOLHOST_LOG_ERROR .. _DEBUG, whatever the
     * host log's level), as one line of at most 2 KiB (control characters
     * made spaces, a long one cut); the host log gets it as before.  On
     * the tool's thread, outside every core lock, until the call ends and
     * never once the session is closing (th_session_close waits for one
     * running).  A line logged from another thread as the call ends may
     * come after its final event.  Keep it short; not into the session's
     * calls.  NULL: not wanted. */
    void (*log_call)(void *front_ud, uint64_t call_id, const char *tool,
                     int level, const char *text);
    /* Appended (ABI 1.4): a tool's ask_client() on call `call_id` (plugin.h:
     * `kind` TOOLHOST_ASK_*, `request` one JSON object, `len` bytes).  The
     * front sends it to its client and answers later, from any thread,
     * with th_call_client_answer(ask_id, ...), once; the tool waits until
     * then (or its call is cancelled or past its deadline: a late answer
     * is dropped).  On the tool's thread, outside every core lock, never
     * once the session is closing.  Returns 0 when sent, nonzero when the
     * front or its client cannot carry this kind (the tool gets
     * TOOLHOST_ENOTSUP).  NULL: none can. */
    int (*ask_client)(void *front_ud, uint64_t call_id, uint64_t ask_id,
                      int kind, const char *request, size_t len);
} th_front_ops;

th_session *th_session_open(th_host *h, const th_principal *who,
                            const th_front_ops *ops, void *front_ud);
/* Ends the session: its calls and session-scoped tasks are cancelled (each
 * gets its final event now) and waited for (bounded by session_grace);
 * acknowledged toolset-scoped tasks go on, detached, and keep their result
 * for result_ttl (th_task_result).  No event callback of this session runs
 * after th_session_close() returns.  Not from an event callback or a front
 * op of this session.  Sessions still open at th_host_close() are closed
 * there. */
void th_session_close(th_session *s);
uint64_t th_session_id(const th_session *s);

/* The tools the session may call, in name order, with the task tools while
 * the session has a live task (or always, per config).  Each th_tool is
 * valid during the callback only. */
int th_session_tools(th_session *s, int (*fn)(const th_tool *t, void *ud),
                     void *ud);
/* A tool the session may call, pinned (th_tool_release()), or NULL. */
const th_tool *th_session_acquire(th_session *s, const char *name);

/* Whether `name` is a built-in task tool (get_running_tasks,
 * cancel_task), listed only while the session has a live task. */
bool th_host_is_task_tool(const char *name);

/* A digest of one list session s is shown (its tools, resources or
 * prompts, as a front renders them), for telling a client that the list
 * changed only when it did.  fn(s, ud) computes it from what s sees (the
 * th_session_* listings) and returns nonzero, or 0 when out of memory
 * (then nothing is kept).  The digest is kept for every session that sees
 * the same lists (the same usable toolsets) until the next reload that
 * changes tools or config, so N such sessions cost one computation per
 * reload; a session that found deferred tools with search_tools has lists
 * of its own and is computed alone.  fn runs under the host's view lock:
 * it must depend only on what s's view sees -- never on front state that
 * differs between its sessions, nor on the task tools, which come and go
 * with each session's own tasks (skip th_host_is_task_tool names) -- and
 * must not call back into this function.  Any thread, no lock held. */
typedef uint64_t (*th_view_fn)(th_session *s, void *ud);
uint64_t th_session_view_digest(th_session *s, th_view_fn fn, void *ud);
/* The digest a th_view_fn returns for its rendering p[0..n) of a list
 * (the first 64 bits of its SHA-256, never 0). */
uint64_t th_view_digest(const void *p, size_t n);

/* ---- Calls ---------------------------------------------------------------- */

typedef struct th_call_opts {
    int64_t timeout_ms; /* <= 0: the toolset's, capped by max_timeout */
    bool no_progress;   /* do not deliver progress events */
    bool may_block;     /* the caller may block: a short sync call may run
                           inline on the calling thread */
    bool keep_thread;   /* th_call_sync only: run the call on a worker
                           although the caller waits for it, so the
                           caller's thread stays its own (its deadline and
                           signals are honoured while a tool hangs and
                           ignores cancellation: `toolhost call`) */
    const char *front;  /* toolhost_caller.front of this call (a static
                           string), over the session's; NULL: the
                           session's (th_front_ops.front) */
    bool as_task;       /* the caller asked for a task (an MCP
                           task-augmented tools/call): th_task_view.as_task,
                           so a front can list those only */
    bool output_info;   /* meta.toolhost.output describes both streams on
                           every result; false (default): only a stream
                           that was cut or spilled is described, and a
                           result with nothing to say has no such key */
    bool short_inline;  /* the caller is an event loop shared by many
                           clients (the RPC server) that must not block: a
                           tool declared TOOLHOST_TOOL_SHORT (sync, not
                           isolated) runs inline on it as with may_block;
                           any other call goes to a worker */
    bool short_client;  /* the caller is a thread that serves one client
                           only (the MCP stdio input thread, one HTTP
                           connection's thread): a sync tool declared
                           short runs inline on it; any other call goes to
                           a worker (a tool's cost may depend on its
                           arguments: no number of fast calls makes the
                           next one safe on a front's thread).
                           For both: the core times the inline run, sends a
                           tool that holds the thread too long back to the
                           workers (a log line), retries it after a
                           back-off; host.short_call_max governs it all, 0
                           turns it off (call_fast.c, docs/manager.md
                           "Short calls on a front's thread") */
    const char *traceparent; /* the W3C traceparent the caller sent (MCP
                           _meta.traceparent, an HTTP or NATS header), or
                           NULL: the audit log's line carries it (copied
                           when the call starts; a malformed one is left
                           out) */
} th_call_opts;

typedef enum th_result_kind {
    TH_RESULT_DONE = 1,    /* the tool ran: ok, stdout, stderr, meta */
    TH_RESULT_ERROR = 2,   /* a tool error: code + message */
    TH_RESULT_RUNNING = 3  /* an async task was acknowledged */
} th_result_kind;

/* A result; every pointer is valid only during the event callback. */
typedef struct th_result {
    th_result_kind kind;
    bool ok;                  /* DONE */
    const uint8_t *out;       /* DONE: stdout after limits */
    size_t out_len;
    const uint8_t *err;       /* DONE: stderr after limits */
    size_t err_len;
    const uint8_t *meta;      /* DONE: msgpack map, or NULL */
    size_t meta_len;
    int error;                /* ERROR: a TH_E* code (th_err_name) */
    const char *message;      /* ERROR: the message; RUNNING: the ack */
    uint64_t task_id;         /* RUNNING, and the DONE event of a task */
    bool ack_has_fraction;    /* RUNNING: the progress update that
                                 acknowledged the call gave a fraction */
    double ack_fraction;      /* RUNNING, when ack_has_fraction: it, in
                                 [0, 1] */
    bool structured;          /* DONE, ok: stdout is one JSON value the
                                 host checked (TOOLHOST_SEM_STRUCTURED,
                                 output_schema); fronts send it decoded */
    uint64_t retry_after_ms;  /* ERROR: when the caller may try again
                                 (a plugin's set_retry_after(), the host's
                                 rate limits), 0: no hint; fronts carry
                                 it (RPC, NATS error.retry_after_ms; MCP
                                 _meta "toolhost/retry_after_ms") */
} th_result;

typedef enum th_event_kind {
    TH_EV_RESULT = 1,   /* the call's answer: exactly once per call */
    TH_EV_PROGRESS = 2, /* after a RUNNING result: a progress update */
    TH_EV_DONE = 3      /* after a RUNNING result: the final result,
                           exactly once */
} th_event_kind;

typedef struct th_event {
    th_event_kind kind;
    uint64_t call_id;
    uint64_t task_id;         /* 0 before acknowledgement */
    const th_result *result;  /* RESULT and DONE */
    double fraction;          /* PROGRESS: < 0 when unknown */
    const char *message;      /* PROGRESS, may be NULL */
    const uint8_t *data;      /* PROGRESS: msgpack value or NULL */
    size_t data_len;
    uint32_t coalesced;       /* PROGRESS: updates folded into this one */
} th_event;

typedef void (*th_event_fn)(const th_event *ev, void *ud);

/* A call in two steps, for a front: th_call_create() gives the call its
 * id and calls nothing; the front files its own record of the call under
 * that id; th_call_submit() starts it, and from then on every outcome,
 * errors included, arrives through fn - possibly before th_call_submit
 * returns, on the calling thread, and th_front_ops callbacks for the call
 * (ask_permission, log_call) may come from any thread: the front's record
 * is already there to find.  The request lives on the caller's stack;
 * `tool`, `args` and `opts->traceparent` must stay valid until
 * th_call_submit returns (the core copies what outlives it). */
typedef struct th_call_req {
    th_session *s;
    const char *tool;
    const uint8_t *args;
    size_t len;
    th_call_opts opts;
    th_event_fn fn;
    void *ud;
    uint64_t id;
} th_call_req;

/* Fills *r; returns the call's id (never 0), or 0 for a missing session,
 * tool or fn, or args NULL with a length (th_call_submit then returns
 * TH_EINVAL).  No event, no callback.  Any thread. */
uint64_t th_call_create(th_call_req *r, th_session *s, const char *tool,
                         const uint8_t *args, size_t len,
                         const th_call_opts *opts, th_event_fn fn, void *ud);
/* Starts a prepared call.  Returns 0 when fn will be called (exactly one
 * final answer), or a negative code when it never will (out of memory,
 * the session closing, an invalid request). */
int th_call_submit(th_call_req *r);

/* th_call_create() and th_call_submit() in one, for callers that keep no
 * record the callbacks need to find (the CLI, tests, tools calling tools):
 * *call_id is assigned before any event. */
int th_call_start(th_session *s, const char *tool, const uint8_t *args,
                  size_t len, const th_call_opts *opts, th_event_fn fn,
                  void *ud, uint64_t *call_id);

/* Cancels a call or task (by call id = task id) of this session, or a
 * toolset-scoped task of a toolset the session may use: its caller gets
 * `cancelled` at once, the tool sees is_cancelled(), a call not yet started
 * never runs.  0, TH_ENOTFOUND (unknown or already answered) or TH_ESTATE
 * (answered meanwhile).  Any thread. */
int th_call_cancel(th_session *s, uint64_t id);

/* For built-in tools (task tools, run_code): the session a call runs in,
 * and its host.  Only for calls the manager made. */
th_session *th_call_session(const toolhost_call *call);
th_host *th_session_host(th_session *s);
/* The toolset a call runs under (see the top of this file): its section of
 * the host's config, valid while the host is open.  NULL for calls the
 * manager did not make and for the task tools (they run under none).  Pure;
 * any thread. */
const th_toolset_cfg *th_call_toolset(const toolhost_call *call);
/* What a call's content blocks (write_block()) may hold together: what
 * its stdout may (0: no limit, the sink's own 16 MiB); 0 for calls the
 * manager did not make.  An isolated plugin's worker counts its blocks
 * against it, as the host does.  Pure; any thread while the call runs. */
uint64_t th_call_blocks_limit(const toolhost_call *call);

/* The call a front started that call `call_id` runs under: call_id
 * itself, or for a call a tool made (run_code calling tools, nested any
 * depth) the outermost call of that chain.  0 when the session has no such
 * call.  For ask_permission: tells the front which of its requests an ask
 * belongs to.  Any thread. */
uint64_t th_call_origin(th_session *s, uint64_t call_id);

/* Answers an ask_permission. */
int th_permission_answer(th_session *s, uint64_t call_id, bool allow);

/* Answers the ask `ask_id` of th_front_ops.ask_client: rc 0 with the
 * client's answer (JSON text, copied), TOOLHOST_FAILED with the error the
 * client sent, TOOLHOST_ECANCELLED when it will not come (the client went
 * away).  An ask nobody waits for any more is ignored.  Any thread. */
void th_call_client_answer(uint64_t ask_id, int rc, const char *json,
                           size_t len);

/* A result copied into owned memory, for callers that wait. */
typedef struct th_result_copy {
    th_result_kind kind;
    bool ok;
    th_buf out, err, meta;
    int error;
    char *message;
    uint64_t task_id;
    bool structured;          /* as in th_result */
    uint64_t retry_after_ms;  /* as in th_result */
} th_result_copy;
void th_result_copy_destroy(th_result_copy *r);
int th_result_copy_from(th_result_copy *dst, const th_result *src);

/* A th_result_copy that borrows src's pointers, for packing a result at
 * once (th_codec_pack_result) without copying it: valid while src is (an
 * event's result: during the callback), never th_result_copy_destroy()ed. */
static inline th_result_copy th_result_view(const th_result *src)
{
    return (th_result_copy){
        .kind = src->kind,
        .ok = src->ok,
        .out = {(uint8_t *)src->out, src->out_len, 0},
        .err = {(uint8_t *)src->err, src->err_len, 0},
        .meta = {(uint8_t *)src->meta, src->meta ? src->meta_len : 0, 0},
        .error = src->error,
        .message = (char *)src->message,
        .task_id = src->task_id,
        .structured = src->structured,
        .retry_after_ms = src->retry_after_ms,
    };
}

/* Runs a call to its end on the calling thread's behalf (waiting through an
 * async task's acknowledgement to its DONE), calling `progress` (may be
 * NULL) for progress events, always on the calling thread.  `cancel_flag`,
 * when not NULL, is polled every 5 ms: once it reads nonzero the call is
 * cancelled.  Fills *out with the final result (DONE or ERROR; task_id set
 * when the call was acknowledged); returns 0, or what th_call_start
 * returned.  Sets may_block: a sync tool runs on this thread.  From inside
 * a running call (a tool calling tools), the call always runs inline on
 * this thread, async tools too, so a pool of one worker cannot deadlock;
 * it then ignores the queue and toolset limits (it uses its parent's slot)
 * and waits only for a serial tool (a serial tool calling itself is
 * refused with `busy`). */
int th_call_sync(th_session *s, const char *tool, const uint8_t *args,
                 size_t len, const th_call_opts *opts, th_event_fn progress,
                 void *ud, volatile int *cancel_flag, th_result_copy *out);

/* ---- Tasks ------------------------------------------------------------------ */

/* The task store (tasks.c).  A task is an async call after its
 * acknowledgement; its task id is its call id.  Live tasks are read from
 * the manager; finished ones (both scopes) are kept in one store under one
 * retention policy: at most host.task_keep of them (the oldest go first)
 * and none older than host.result_ttl after its end.  Visible to session s:
 * the tasks s started, and toolset-scoped tasks of toolsets s may use
 * started by the same uid (trusted sessions: any uid).  A task that is not
 * visible is answered as unknown (TH_ENOTFOUND): its state is never
 * shown. */
typedef enum th_task_state {
    TH_TASK_WORKING = 1,
    TH_TASK_COMPLETED,
    TH_TASK_FAILED,     /* ok=false or a tool error other than cancelled */
    TH_TASK_CANCELLED
} th_task_state;

typedef struct th_task_view {     /* valid during the callback only */
    uint64_t task_id, session_id;
    uint32_t owner_uid;
    const char *tool;
    th_task_scope scope;
    th_task_state state;
    int64_t started_ms, last_update_ms, ended_ms; /* Unix ms; ended 0 while
                                                     working */
    const char *message;          /* last progress message, may be NULL */
    double fraction;              /* last progress fraction, < 0 unknown */
    const th_result_copy *result; /* the final result once ended, else
                                     NULL */
    const uint8_t *args;          /* validated arguments (msgpack map) */
    size_t args_len;
    bool as_task;                 /* started with th_call_opts.as_task */
} th_task_view;

/* Calls fn with the task's view under the store's protection.  0 or
 * TH_ENOTFOUND (unknown, expired, or not visible).  fn must not call into
 * the task store or the call API.  Any thread. */
int th_task_get(th_session *s, uint64_t task_id,
                void (*fn)(const th_task_view *t, void *ud), void *ud);
/* Calls fn for every task visible to s: live ones then finished ones, each
 * in start order (task id).  Stops when fn returns nonzero and returns
 * that; else 0 (TH_ENOMEM when the list could not be made).  fn may call
 * the call API but must not close the session.  Any thread. */
int th_task_foreach(th_session *s, int (*fn)(const th_task_view *t, void *ud),
                    void *ud);
/* Blocks until the task ended (or timeout_ms passed, < 0: no limit; or
 * *cancel_flag became nonzero), then fills caller storage *out with its
 * final result (th_result_copy_destroy).  0, TH_ETIMEOUT (also for the cancel
 * flag), TH_ENOTFOUND (unknown, expired or not visible), TH_ENOMEM.  Any
 * thread except an event callback. */
int th_task_wait(th_session *s, uint64_t task_id, int64_t timeout_ms,
                 volatile int *cancel_flag, th_result_copy *out);
/* Cancels a task visible to s (th_call_cancel with the store's owner
 * check).  0, TH_ENOTFOUND (unknown or not visible), TH_ESTATE (it already
 * ended).  Any thread. */
int th_task_cancel(th_session *s, uint64_t task_id);

/* The final result of a finished task visible to s: 0 and caller storage
 * *out filled (th_result_copy_destroy), TH_ESTATE while the task still runs,
 * TH_ENOTFOUND when unknown, expired or not visible.  A wrapper of
 * th_task_get. */
int th_task_result(th_session *s, uint64_t task_id, th_result_copy *out);

/* Number of live tasks the session started. */
size_t th_session_live_tasks(th_session *s);

/* ---- Numbers ------------------------------------------------------------------ */

/* Per tool, since the host opened.  Latency is from th_call_start to the
 * final result (DONE for tasks), read from a log-scale histogram (each
 * bucket 19% wide), so p50/p99 are upper bounds within that precision. */
#define TH_STATS_LE 22 /* 16 us to 33.5 s, doubling */
typedef struct th_tool_stats {
    const char *tool;
    uint64_t calls;               /* every th_call_start that named it */
    uint64_t ok, failed;          /* the tool ran: ok / reported failure */
    uint64_t errors;              /* other tool errors (arguments, ...):
                                     every code without an outcome of
                                     its own in TH_OUTCOMES */
    uint64_t timeouts, cancels;
    uint64_t duplicates_rejected;
    uint64_t busy;                /* refused: queue full */
    uint64_t permission_denied;
    uint64_t late_results;        /* results discarded after timeout or
                                     cancel */
    uint64_t rate_limited;        /* refused by rate_limits (rate.c), or
                                     a backend said slow down (ABI 1.5) */
    uint64_t unavailable;         /* a backend was unavailable (ABI 1.5) */
    uint64_t backend_timeouts;    /* a backend did not answer in time
                                     (ABI 1.5; `timeouts` are the host's
                                     own deadlines) */
    uint64_t plugin_crashed;      /* an isolated plugin's worker died, or
                                     its plugin was unhealthy */
    double p50_ms, p99_ms;        /* 0 when no call finished */
    /* The same over the last minute and the last 5 minutes (10-second
     * slices: the window is 50-60 s and 290-300 s long). */
    double p50_1m_ms, p99_1m_ms, p50_5m_ms, p99_5m_ms;
    /* The latency histogram, Prometheus style: lat_le[i] calls took at
     * most th_stats_le_s(i) seconds (cumulative); lat_count in all. */
    uint64_t lat_count;
    double lat_sum_s;
    uint64_t lat_le[TH_STATS_LE];
    uint64_t permission_asks;     /* `ask` rules that sent a request */
} th_tool_stats;

/* The outcomes a call ends with, in the order /metrics lists them
 * (toolhost_{tool,toolset,front}_calls_total): XX(label, member), the
 * label value `outcome` and the member of th_tool_stats and
 * th_group_stats that counts it (also its key in host.stats).  Append
 * only: dashboards and alert rules name these labels. */
#define TH_OUTCOMES(XX)                                                       \
    XX("ok", ok)                                                              \
    XX("failed", failed)                                                      \
    XX("error", errors)                                                       \
    XX("timeout", timeouts)                                                   \
    XX("cancelled", cancels)                                                  \
    XX("duplicate", duplicates_rejected)                                      \
    XX("busy", busy)                                                          \
    XX("denied", permission_denied)                                           \
    XX("rate_limited", rate_limited)                                          \
    XX("unavailable", unavailable)                                            \
    XX("backend_timeout", backend_timeouts)                                   \
    XX("plugin_crashed", plugin_crashed)
#define TH_OUTCOME_COUNT_(label, member) +1
enum { TH_OUTCOMES_N = 0 TH_OUTCOMES(TH_OUTCOME_COUNT_) };
#undef TH_OUTCOME_COUNT_

/* The upper bound, in seconds, of the i-th bucket of lat_le. */
double th_stats_le_s(unsigned i);

/* Calls fn for every tool that has numbers, in no particular order; stops
 * when fn returns nonzero and returns that.  Any thread. */
int th_host_stats_foreach(th_host *h,
                          int (*fn)(const th_tool_stats *st, void *ud),
                          void *ud);

/* Host-wide numbers of the manager, a snapshot. */
typedef struct th_mgr_stats {
    uint32_t workers, async_workers;
    uint64_t queued;      /* waiting for a worker (incl. held by limits) */
    uint64_t running;     /* executing now (workers + inline + suspended) */
    uint64_t live_tasks;  /* acknowledged async tasks not yet done */
    uint64_t calls_total;
    uint64_t inline_calls;/* ran on the caller's thread */
    uint64_t lost_workers;/* workers ever counted lost (a tool still in
                             execute() lost_worker_grace after its
                             deadline) */
    uint32_t lost_workers_now; /* of those, still stuck now */
    uint64_t inline_front;/* ran on a front's own thread (short_inline,
                             short_client: call_fast.c) */
    uint64_t short_demoted;/* short tools sent back to the workers for
                             holding a front's thread too long (each
                             demotion, retries included) */
    uint64_t short_stuck;  /* short calls the watchdog found still holding
                             a front's thread past host.short_call_stuck
                             (each call once) */
} th_mgr_stats;
void th_host_mgr_stats(th_host *h, th_mgr_stats *out);

/* Calls per toolset ("toolset", name; the task tools count under
 * "(tasks)") and per front ("front", th_front_ops.front or "other"),
 * counted when their final answer is decided, after the arguments
 * validated (calls refused before that count per tool only).  Outcome
 * fields as in th_tool_stats; `calls` is the sum of the outcomes. */
typedef struct th_group_stats {
    const char *kind;             /* "toolset" or "front" */
    const char *name;
    uint64_t calls, ok, failed, errors, timeouts, cancels,
        duplicates_rejected, busy, permission_denied, rate_limited,
        unavailable, backend_timeouts, plugin_crashed;
    uint64_t lat_count;
    double lat_sum_s;
    uint64_t lat_le[TH_STATS_LE];
} th_group_stats;
int th_host_group_stats_foreach(th_host *h,
                                int (*fn)(const th_group_stats *g, void *ud),
                                void *ud);

/* Sessions (connections) per front: the front's name (th_front_ops.front;
 * "other" for a front that gave none), opened since the start, open now.
 * Fills at most max entries, one per front seen so far (in the order
 * first seen) and "other"; returns how many. */
typedef struct th_front_stats {
    const char *front;
    uint64_t opened, open;
} th_front_stats;
size_t th_host_front_stats(th_host *h, th_front_stats *out, size_t max);

/* ---- Tools disabled at run time ------------------------------------------- */

/* An operator takes tools out of service without a reload: a call of a
 * tool that an entry matches (its name, an fnmatch pattern over tool
 * names, or "tag:NAME": the tools of that tag in `tags:` or that their plugin declares) is answered TH_EDISABLED ("tool_disabled") with "tool 'x' is
 * disabled: REASON (since DATE, by WHO)" and never runs (nor counts
 * against a rate limit).  The entries belong to the running host (reloads keep them,
 * a restart does not); at most TH_DISABLED_MAX.  Any thread. */
#define TH_DISABLED_MAX 64
typedef struct th_disabled_view {
    const char *pattern, *reason, *by;
    int64_t since_ms; /* wall clock */
} th_disabled_view;
/* Adds an entry, or gives an existing pattern its new reason.  `reason`
 * and `pattern` are one line of printable text (at most 512 and 256
 * bytes); `by` names who (a user name, "uid 1000").  0, TH_EINVAL,
 * TH_ELIMIT or TH_ENOMEM with a sentence in err. */
int th_host_disable(th_host *h, const char *pattern, const char *reason,
                    const char *by, th_error *err);
/* Removes the entry of exactly this pattern: 0 or TH_ENOTFOUND. */
int th_host_enable(th_host *h, const char *pattern);
/* Calls fn for each entry, in order (under the set's lock: fn must not
 * call th_host_disable/enable); stops at fn's nonzero and returns it. */
int th_host_disabled_foreach(th_host *h,
                             int (*fn)(const th_disabled_view *v, void *ud),
                             void *ud);

/* Connections refused, connections closed by a limit and protocol errors,
 * per front and reason: each front lists the outcomes it counts in its
 * descriptor (th/front.h) and counts them with th_stat_front_event (any
 * thread, lock-free), `ev` an index into that list; read by /metrics. */
typedef enum th_front_event_class {
    TH_FEV_REFUSED,  /* refused before a session opened   */
    TH_FEV_CLOSED,   /* an open connection closed by a limit */
    TH_FEV_PROTOCOL  /* a message that broke the protocol */
} th_front_event_class;

void th_stat_front_event(th_host *h, const char *front, unsigned ev);
/* Calls fn for every event of every registered front (zeros included, so
 * the series exist) in registration order; stops when fn returns nonzero
 * and returns that. */
int th_host_front_events_foreach(th_host *h,
                                 int (*fn)(const char *front,
                                           const char *reason,
                                           th_front_event_class cls,
                                           uint64_t n, void *ud),
                                 void *ud);

#endif
