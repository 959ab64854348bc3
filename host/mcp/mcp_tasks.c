/* mcp_tasks.c - MCP tasks (protocol 2025-11-25): tasks/get, tasks/result,
 * tasks/list, tasks/cancel and notifications/tasks/status over the core
 * task store (th_task_get, th_task_wait, th_task_foreach, th_task_cancel in
 * th/host.h: state, results, visibility and ownership are the core's).  A
 * task is the same task on every front: one started over MCP shows in
 * tasks.list of the same user over msgpack-RPC, and a toolset-scoped one
 * started there shows here.  The task id is the call id (in decimal).
 *
 * What is MCP's own stays here, in the session's records of its
 * task-augmented calls (mcp_call with task set): the ttl the client asked
 * for, input_required while an elicitation waits, and the status
 * notifications.  A waiting tasks/result is a thread in th_task_wait (at
 * most MCP_WAITERS_MAX per session). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mcp_int.h"
#include "th/codec.h"
#include "th/config.h"
#include "th/log.h"
#include "th/schema.h"
#include "th/tool.h"

#define TASK_TTL_DEFAULT_MS (10 * 60 * 1000)
#define TASK_TTL_MAX_MS (24 * 60 * 60 * 1000)
#define TASK_POLL_MS 500
#define TASK_PAGE 100
#define MCP_WAITERS_MAX 32

static const char *const status_names[] = {"working", "input_required",
                                           "completed", "failed",
                                           "cancelled"};

int64_t mcp_task_ttl(th_mcp_session *m, const json_t *task)
{
    th_config *cfg = th_host_config_get(m->h); /* a reload may swap it */
    int64_t max = cfg->host.result_ttl_ms ? (int64_t)cfg->host.result_ttl_ms
                                          : TASK_TTL_DEFAULT_MS;
    th_config_unref(cfg);
    if (max > TASK_TTL_MAX_MS)
        max = TASK_TTL_MAX_MS;
    json_t *t = json_object_get(task, "ttl");
    int64_t want = json_is_integer(t) ? (int64_t)json_integer_value(t) : max;
    if (want <= 0 || want > max)
        want = max;
    return want;
}

static void iso_time(int64_t ms, char *buf, size_t n)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    char b[32];
    strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, n, "%s.%03dZ", b, (int)(ms % 1000));
}

json_t *mcp_task_json(const mcp_call *c)
{
    char created[40], updated[40];
    iso_time(c->created_ms, created, sizeof created);
    iso_time(c->updated_ms, updated, sizeof updated);
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:i}", "taskId",
                          c->task_id, "status", status_names[c->status],
                          "createdAt", created, "lastUpdatedAt", updated,
                          "ttl", (json_int_t)c->ttl_ms, "pollInterval",
                          TASK_POLL_MS);
    if (j && c->status_msg)
        json_object_set_new(j, "statusMessage", json_string(c->status_msg));
    return j;
}

/* ---- The core's view of a task ------------------------------------------------ */

typedef struct core_task {
    uint64_t id, session_id;
    th_task_state state;
    int64_t created_ms, updated_ms;
    char *message;
    char *tool;
    th_result_copy result; /* with_result and ended */
    bool has_result;
    bool with_result;
    bool oom;
} core_task;

static void core_task_free(core_task *t)
{
    free(t->message);
    free(t->tool);
    if (t->has_result)
        th_result_copy_destroy(&t->result);
    memset(t, 0, sizeof *t);
}

/* Copies the view (the callbacks must not call back into the core or take
 * m->mu: the overlay of our records comes after). */
static void core_copy(const th_task_view *v, core_task *t)
{
    t->id = v->task_id;
    t->session_id = v->session_id;
    t->state = v->state;
    t->created_ms = v->started_ms;
    t->updated_ms = v->ended_ms ? v->ended_ms : v->last_update_ms;
    if (t->updated_ms < t->created_ms)
        t->updated_ms = t->created_ms;
    if (v->message && !(t->message = strdup(v->message)))
        t->oom = true;
    if (v->tool && !(t->tool = strdup(v->tool)))
        t->oom = true;
    if (t->with_result && v->result) {
        if (th_result_copy_dup(&t->result, v->result) == 0)
            t->has_result = true;
        else
            t->oom = true;
    }
}

static void core_one(const th_task_view *v, void *ud)
{
    core_copy(v, ud);
}

/* Whether this session may see the task the core showed it: a session
 * without a uid (a token user without `uid`) only its own, as the core's
 * rule compares uids and every such user has none. */
static bool may_see(th_mcp_session *m, const core_task *t)
{
    return !m->own_tasks_only || t->session_id == th_session_id(m->s);
}

/* th_task_get through may_see: 0 or TH_ENOTFOUND. */
static int task_get(th_mcp_session *m, uint64_t id, core_task *t)
{
    if (th_task_get(m->s, id, core_one, t) != 0)
        return TH_ENOTFOUND;
    if (!may_see(m, t)) {
        core_task_free(t);
        return TH_ENOTFOUND;
    }
    return 0;
}

static bool parse_id(const json_t *params, uint64_t *id)
{
    const char *s = json_string_value(json_object_get(params, "taskId"));
    char *end = NULL;
    if (!s || *s < '1' || *s > '9')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || !v)
        return false;
    *id = (uint64_t)v;
    return true;
}

/* Our record of task id, or NULL (m->mu held).  Expired records are gone
 * (mcp_tasks_expire_locked). */
static mcp_call *record_locked(th_mcp_session *m, uint64_t id)
{
    for (mcp_call *c = m->calls; c; c = c->next)
        if (c->task && c->announced && c->call_id == id)
            return c;
    return NULL;
}

/* The MCP task object: the core's state with our record's ttl and
 * input_required over it (m->mu held). */
static json_t *task_json_locked(th_mcp_session *m, const core_task *t)
{
    const char *st;
    switch (t->state) {
    case TH_TASK_COMPLETED:
        st = "completed";
        break;
    case TH_TASK_FAILED:
        st = "failed";
        break;
    case TH_TASK_CANCELLED:
        st = "cancelled";
        break;
    default:
        st = "working";
        break;
    }
    int64_t ttl = mcp_task_ttl(m, NULL);
    const char *msg = t->message;
    mcp_call *c = record_locked(m, t->id);
    if (c) {
        ttl = c->ttl_ms;
        if (t->state == TH_TASK_WORKING &&
            c->status == MCP_TASK_INPUT_REQUIRED)
            st = "input_required";
        if (c->status_msg)
            msg = c->status_msg;
    }
    char id[32], created[40], updated[40];
    snprintf(id, sizeof id, "%llu", (unsigned long long)t->id);
    iso_time(t->created_ms, created, sizeof created);
    iso_time(t->updated_ms, updated, sizeof updated);
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:i}", "taskId", id,
                          "status", st, "createdAt", created,
                          "lastUpdatedAt", updated, "ttl", (json_int_t)ttl,
                          "pollInterval", TASK_POLL_MS);
    if (j && msg)
        json_object_set_new(j, "statusMessage", json_string(msg));
    return j;
}

/* How the result of `tool` is rendered: from our record, else from the
 * tool (a task started elsewhere). */
static void render_kind(th_mcp_session *m, uint64_t id, const char *tool,
                        uint32_t *out_type, bool *structured)
{
    *out_type = TOOLHOST_SEM_TEXT;
    *structured = false;
    pthread_mutex_lock(&m->mu);
    mcp_call *c = record_locked(m, id);
    bool known = c != NULL;
    if (c) {
        *out_type = c->out_type;
        *structured = c->structured;
    }
    pthread_mutex_unlock(&m->mu);
    if (known || !tool)
        return;
    const th_tool *t = th_session_acquire(m->s, tool);
    if (!t)
        return;
    *out_type = t->stdout_type;
    *structured = th_schema_tool_output_object(t);
    th_tool_release(t);
}

/* The CallToolResult of an ended task, related-task in _meta. */
static json_t *task_result_json(th_mcp_session *m, uint64_t id,
                                const char *tool, uint32_t out_type,
                                bool structured, const th_result_copy *rc)
{
    th_result r = {.kind = rc->kind,
                   .ok = rc->ok,
                   .out = rc->out.data,
                   .out_len = rc->out.len,
                   .err = rc->err.data,
                   .err_len = rc->err.len,
                   .meta = rc->meta.data,
                   .meta_len = rc->meta.len,
                   .error = rc->error,
                   .message = rc->message,
                   .task_id = id,
                   .retry_after_ms = rc->retry_after_ms};
    json_t *res = mcp_tool_result(&r, tool ? tool : "?", id, out_type,
                                  structured, m->elicitation,
                                  mcp_has_audio(m), mcp_has_links(m));
    if (!res)
        return NULL;
    json_t *meta = json_object_get(res, "_meta");
    if (!meta) {
        meta = json_object();
        json_object_set_new(res, "_meta", meta);
    }
    char tid[32];
    snprintf(tid, sizeof tid, "%llu", (unsigned long long)id);
    json_object_set_new(meta, "io.modelcontextprotocol/related-task",
                        json_pack("{s:s}", "taskId", tid));
    return res;
}

/* ---- Our records ------------------------------------------------------------------ */

void mcp_task_announce_locked(th_mcp_session *m, mcp_call *c, bool deferred)
{
    c->announce_pending = false;
    c->announced = true;
    mcp_send_result(m, c->id, json_pack("{s:o}", "task", mcp_task_json(c)));
    if (deferred)
        mcp_request_done(m, c->id);
    if (c->finished) {
        mcp_task_ended_locked(m, c);
    } else {
        json_t *msg = json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0",
                                "method", "notifications/tasks/status",
                                "params", mcp_task_json(c));
        if (msg)
            mcp_send(m, msg, NULL);
    }
}

/* A task the core never knew (it ended before its acknowledgement): our
 * record, or NULL (m->mu held). */
static mcp_call *unacked_locked(th_mcp_session *m, const json_t *params)
{
    uint64_t id;
    if (!parse_id(params, &id))
        return NULL;
    mcp_call *c = record_locked(m, id);
    return c && !c->acked && c->finished ? c : NULL;
}

static json_t *related(const mcp_call *c)
{
    json_t *r = json_deep_copy(c->result);
    if (!r)
        return NULL;
    json_t *meta = json_object_get(r, "_meta");
    if (!meta) {
        meta = json_object();
        json_object_set_new(r, "_meta", meta);
    }
    json_object_set_new(meta, "io.modelcontextprotocol/related-task",
                        json_pack("{s:s}", "taskId", c->task_id));
    return r;
}

void mcp_task_ended_locked(th_mcp_session *m, mcp_call *c)
{
    json_t *msg = json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method",
                            "notifications/tasks/status", "params",
                            mcp_task_json(c));
    if (msg)
        mcp_send(m, msg, NULL);
}

void mcp_tasks_expire_locked(th_mcp_session *m, int64_t now_ms)
{
    for (mcp_call **p = &m->calls; *p;) {
        mcp_call *c = *p;
        if (c->task && c->finished && c->announced &&
            now_ms - c->created_ms > c->ttl_ms) {
            *p = c->next;
            mcp_call_unref_locked(m, c);
            continue;
        }
        p = &c->next;
    }
}

/* ---- tasks/get ---------------------------------------------------------------- */

static const char unknown_msg[] =
    "unknown taskId (tasks expire after their ttl; results are kept "
    "host.result_ttl)";

void mcp_tasks_get(th_mcp_session *m, const json_t *id, const json_t *params)
{
    uint64_t tid;
    core_task t = {0};
    if (!parse_id(params, &tid) || task_get(m, tid, &t) != 0) {
        pthread_mutex_lock(&m->mu);
        mcp_call *c = unacked_locked(m, params);
        json_t *j = c ? mcp_task_json(c) : NULL;
        pthread_mutex_unlock(&m->mu);
        if (j)
            mcp_send_result(m, id, j);
        else
            mcp_send_error(m, id, MCP_INVALID_PARAMS, "%s", unknown_msg);
        return;
    }
    pthread_mutex_lock(&m->mu);
    mcp_tasks_expire_locked(m, mcp_wall_ms());
    json_t *j = task_json_locked(m, &t);
    pthread_mutex_unlock(&m->mu);
    core_task_free(&t);
    mcp_send_result(m, id, j);
}

/* ---- tasks/result ----------------------------------------------------------------- */

static void *waiter_main(void *arg)
{
    mcp_waiter *w = arg;
    th_mcp_session *m = w->m;
    th_result_copy r;
    int rc = th_task_wait(m->s, w->task_id, -1, &m->wait_stop, &r);
    if (rc == 0) {
        json_t *res = task_result_json(m, w->task_id, w->tool, w->out_type,
                                       w->structured, &r);
        th_result_copy_destroy(&r);
        if (res)
            mcp_send_result(m, w->id, res);
        else
            mcp_send_error(m, w->id, MCP_INTERNAL_ERROR, "out of memory");
    } else if (!m->wait_stop) {
        mcp_send_error(m, w->id, MCP_INVALID_PARAMS, "%s",
                       rc == TH_ENOMEM ? "out of memory" : unknown_msg);
    }
    mcp_request_done(m, w->id);
    pthread_mutex_lock(&m->mu);
    w->done = true;
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

static void waiter_free(mcp_waiter *w)
{
    json_decref(w->id);
    free(w->tool);
    free(w);
}

/* Joins the waiters that ended (m->mu held; they no longer take it). */
static void reap_locked(th_mcp_session *m)
{
    for (mcp_waiter **p = &m->waiters; *p;) {
        mcp_waiter *w = *p;
        if (w->done) {
            *p = w->next;
            m->n_waiters--;
            pthread_join(w->th, NULL);
            waiter_free(w);
            continue;
        }
        p = &w->next;
    }
}

void mcp_tasks_stop_waiters(th_mcp_session *m)
{
    m->wait_stop = 1;
    pthread_mutex_lock(&m->mu);
    mcp_waiter *list = m->waiters;
    m->waiters = NULL;
    m->n_waiters = 0;
    pthread_mutex_unlock(&m->mu);
    while (list) {
        mcp_waiter *w = list;
        list = w->next;
        pthread_join(w->th, NULL);
        waiter_free(w);
    }
}

void mcp_tasks_result(th_mcp_session *m, const json_t *id,
                      const json_t *params)
{
    uint64_t tid;
    core_task t = {.with_result = true};
    if (!parse_id(params, &tid) || task_get(m, tid, &t) != 0) {
        pthread_mutex_lock(&m->mu);
        mcp_call *c = unacked_locked(m, params);
        json_t *r = c && c->result ? related(c) : NULL;
        pthread_mutex_unlock(&m->mu);
        if (r)
            mcp_send_result(m, id, r);
        else
            mcp_send_error(m, id, MCP_INVALID_PARAMS, "%s", unknown_msg);
        return;
    }
    if (t.oom) {
        core_task_free(&t);
        mcp_send_error(m, id, MCP_INTERNAL_ERROR, "out of memory");
        return;
    }
    uint32_t out_type;
    bool structured;
    render_kind(m, tid, t.tool, &out_type, &structured);
    if (t.has_result) {
        json_t *res = task_result_json(m, tid, t.tool, out_type, structured,
                                       &t.result);
        core_task_free(&t);
        if (res)
            mcp_send_result(m, id, res);
        else
            mcp_send_error(m, id, MCP_INTERNAL_ERROR, "out of memory");
        return;
    }
    /* Still working: a thread waits for the end (th_task_wait) and
     * answers then. */
    mcp_waiter *w = calloc(1, sizeof *w);
    pthread_mutex_lock(&m->mu);
    reap_locked(m);
    if (w && m->n_waiters >= MCP_WAITERS_MAX) {
        pthread_mutex_unlock(&m->mu);
        free(w);
        core_task_free(&t);
        th_log_warn("mcp session=%llu: %d tasks/result requests already "
                    "wait; refused one (poll tasks/get)",
                    (unsigned long long)th_session_id(m->s), MCP_WAITERS_MAX);
        mcp_send_error(m, id, MCP_INVALID_REQUEST,
                       "%d tasks/result requests of this session already "
                       "wait: poll tasks/get until the task ends, then ask "
                       "tasks/result",
                       MCP_WAITERS_MAX);
        return;
    }
    if (!w || !(w->id = json_deep_copy(id))) {
        pthread_mutex_unlock(&m->mu);
        free(w);
        core_task_free(&t);
        mcp_send_error(m, id, MCP_INTERNAL_ERROR, "out of memory");
        return;
    }
    w->m = m;
    w->task_id = tid;
    w->tool = t.tool;
    t.tool = NULL;
    w->out_type = out_type;
    w->structured = structured;
    core_task_free(&t);
    if (pthread_create(&w->th, NULL, waiter_main, w) != 0) {
        pthread_mutex_unlock(&m->mu);
        waiter_free(w);
        mcp_send_error(m, id, MCP_INTERNAL_ERROR,
                       "cannot start a thread to wait for the task");
        return;
    }
    w->next = m->waiters;
    m->waiters = w;
    m->n_waiters++;
    m->deferred = true; /* waiter_main answers and ends the request */
    pthread_mutex_unlock(&m->mu);
}

/* ---- tasks/list ------------------------------------------------------------------ */

typedef struct list_ctx {
    th_mcp_session *m;
    core_task *v;
    size_t n, cap;
    bool oom;
} list_ctx;

static int list_each(const th_task_view *tv, void *ud)
{
    list_ctx *x = ud;
    if (x->n == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 16;
        core_task *v = realloc(x->v, cap * sizeof *v);
        if (!v) {
            x->oom = true;
            return 1;
        }
        x->v = v;
        x->cap = cap;
    }
    if (x->m->own_tasks_only && tv->session_id != th_session_id(x->m->s))
        return 0;
    if (!tv->as_task)
        return 0; /* an async call not started as a task: not MCP's task */
    core_task *t = &x->v[x->n++];
    memset(t, 0, sizeof *t);
    core_copy(tv, t);
    return 0;
}

void mcp_tasks_list(th_mcp_session *m, const json_t *id,
                    const json_t *params)
{
    size_t off;
    if (!mcp_list_cursor(m, id, params, "tasks/list", &off))
        return;
    list_ctx x = {.m = m};
    int rc = th_task_foreach(m->s, list_each, &x);
    if (rc != 0 || x.oom) {
        for (size_t i = 0; i < x.n; i++)
            core_task_free(&x.v[i]);
        free(x.v);
        mcp_send_error(m, id, MCP_INTERNAL_ERROR, "out of memory");
        return;
    }
    json_t *all = json_array();
    pthread_mutex_lock(&m->mu);
    mcp_tasks_expire_locked(m, mcp_wall_ms());
    for (size_t i = 0; all && i < x.n; i++)
        json_array_append_new(all, task_json_locked(m, &x.v[i]));
    /* and ours the core never knew (ended before their acknowledgement) */
    for (mcp_call *c = m->calls; all && c; c = c->next)
        if (c->task && c->announced && !c->acked && c->finished)
            json_array_append_new(all, mcp_task_json(c));
    pthread_mutex_unlock(&m->mu);
    size_t n = json_array_size(all);
    json_t *arr = json_array();
    for (size_t i = off; arr && i < n && i < off + TASK_PAGE; i++)
        json_array_append(arr, json_array_get(all, i));
    json_decref(all);
    for (size_t i = 0; i < x.n; i++)
        core_task_free(&x.v[i]);
    free(x.v);
    json_t *res = json_pack("{s:o}", "tasks", arr);
    if (res && off + TASK_PAGE < n) {
        char next[32];
        snprintf(next, sizeof next, "%zu", off + TASK_PAGE);
        json_object_set_new(res, "nextCursor", json_string(next));
    }
    mcp_send_result(m, id, res);
}

/* ---- tasks/cancel -------------------------------------------------------------- */

void mcp_tasks_cancel(th_mcp_session *m, const json_t *id,
                      const json_t *params)
{
    uint64_t tid;
    if (!parse_id(params, &tid)) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS, "unknown taskId");
        return;
    }
    core_task t = {0};
    if (task_get(m, tid, &t) != 0) {
        pthread_mutex_lock(&m->mu);
        bool ended = unacked_locked(m, params) != NULL;
        pthread_mutex_unlock(&m->mu);
        if (ended)
            mcp_send_error(m, id, MCP_INVALID_PARAMS,
                           "task already ended (failed): it cannot be "
                           "cancelled");
        else
            mcp_send_error(m, id, MCP_INVALID_PARAMS, "unknown taskId");
        return;
    }
    core_task_free(&t);
    int rc = th_task_cancel(m->s, tid);
    if (rc == TH_ENOTFOUND) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS, "unknown taskId");
        return;
    }
    if (task_get(m, tid, &t) != 0) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS, "unknown taskId");
        return;
    }
    if (rc == TH_ESTATE) {
        const char *st = t.state == TH_TASK_COMPLETED ? "completed"
                         : t.state == TH_TASK_FAILED  ? "failed"
                                                      : "cancelled";
        core_task_free(&t);
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "task already ended (%s): it cannot be cancelled", st);
        return;
    }
    /* The core answers a cancelled call at once: its status is final. */
    t.state = TH_TASK_CANCELLED;
    pthread_mutex_lock(&m->mu);
    mcp_call *c = record_locked(m, tid);
    if (c && !c->finished) {
        c->status = MCP_TASK_CANCELLED;
        c->updated_ms = mcp_wall_ms();
    }
    json_t *j = task_json_locked(m, &t);
    pthread_mutex_unlock(&m->mu);
    core_task_free(&t);
    mcp_send_result(m, id, j);
}
