/* mcp_tasks.c - MCP tasks (protocol 2025-11-25): tasks/get, tasks/result,
 * tasks/list, tasks/cancel and notifications/tasks/status, over the task
 * records of the session (one per task-augmented tools/call; the task id
 * is the call id).
 *
 * The records here are the MCP session's own: every task-augmented call
 * of this session (ttl, status messages, waiting tasks/result requests).
 * Tasks the session did not start as MCP tasks - toolset-scoped tasks of
 * the same uid started elsewhere, or after a reconnect - come from the core
 * task store (Interface A: th_task_get / th_task_foreach in th/host.h,
 * ownership checked there) through the ADAPTER section below, compiled in
 * when TH_MCP_CORE_TASKS is 1 (set it once the core store is merged; until
 * then those lookups find nothing).  Cancellation goes through the core
 * (th_call_cancel) either way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mcp_int.h"
#include "th/config.h"

#define TASK_TTL_DEFAULT_MS (10 * 60 * 1000)
#define TASK_TTL_MAX_MS (24 * 60 * 60 * 1000)
#define TASK_POLL_MS 500
#define TASK_PAGE 100

static const char *const status_names[] = {"working", "input_required",
                                           "completed", "failed",
                                           "cancelled"};

static bool terminal(mcp_task_status s)
{
    return s >= MCP_TASK_COMPLETED;
}

int64_t mcp_task_ttl(th_mcp_session *m, const json_t *task)
{
    const th_config *cfg = th_host_config(m->h);
    int64_t max = cfg->host.result_ttl_ms ? (int64_t)cfg->host.result_ttl_ms
                                          : TASK_TTL_DEFAULT_MS;
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

/* ---- ADAPTER: the core task store (Interface A) ----------------------------- */

#ifndef TH_MCP_CORE_TASKS
#define TH_MCP_CORE_TASKS 0
#endif

#if TH_MCP_CORE_TASKS
typedef struct core_ctx {
    th_mcp_session *m;
    json_t *task;       /* the MCP task object */
    json_t *result;     /* the CallToolResult once ended, else NULL */
    bool want_result;
    json_t *arr;        /* foreach: append here */
} core_ctx;

static const char *core_status(th_task_state st)
{
    switch (st) {
    case TH_TASK_COMPLETED:
        return "completed";
    case TH_TASK_FAILED:
        return "failed";
    case TH_TASK_CANCELLED:
        return "cancelled";
    default:
        return "working";
    }
}

static json_t *core_task_json(th_mcp_session *m, const th_task_view *t)
{
    char id[32], created[40], updated[40];
    snprintf(id, sizeof id, "%llu", (unsigned long long)t->task_id);
    iso_time(t->started_ms, created, sizeof created);
    iso_time(t->ended_ms ? t->ended_ms : t->last_update_ms, updated,
             sizeof updated);
    const th_config *cfg = th_host_config(m->h);
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:i}", "taskId", id,
                          "status", core_status(t->state), "createdAt",
                          created, "lastUpdatedAt", updated, "ttl",
                          (json_int_t)cfg->host.result_ttl_ms, "pollInterval",
                          TASK_POLL_MS);
    if (j && t->message)
        json_object_set_new(j, "statusMessage", json_string(t->message));
    return j;
}

static void core_one(const th_task_view *t, void *ud)
{
    core_ctx *x = ud;
    x->task = core_task_json(x->m, t);
    if (x->want_result && t->result) {
        th_result r = {.kind = t->result->kind,
                       .ok = t->result->ok,
                       .out = t->result->out.data,
                       .out_len = t->result->out.len,
                       .err = t->result->err.data,
                       .err_len = t->result->err.len,
                       .meta = t->result->meta.data,
                       .meta_len = t->result->meta.len,
                       .error = t->result->error,
                       .message = t->result->message,
                       .task_id = t->task_id};
        /* The stdout type is not in the view: text (a binary tool's
         * bytes come out as U+FFFD-cleaned text here). */
        x->result = mcp_tool_result(&r, t->tool, t->task_id,
                                    TOOLHOST_SEM_TEXT, false);
    }
}

static int core_each(const th_task_view *t, void *ud)
{
    core_ctx *x = ud;
    char id[32];
    snprintf(id, sizeof id, "%llu", (unsigned long long)t->task_id);
    for (mcp_call *c = x->m->calls; c; c = c->next)
        if (c->task && c->announced && strcmp(c->task_id, id) == 0)
            return 0; /* one of ours: listed from our record */
    json_t *j = core_task_json(x->m, t);
    if (j)
        json_array_append_new(x->arr, j);
    return 0;
}
#endif

/* A task the core knows and this session may see: the MCP task object
 * (and with `result`, its CallToolResult once ended), or NULL. */
static json_t *core_find(th_mcp_session *m, const json_t *params,
                         json_t **result)
{
    if (result)
        *result = NULL;
#if TH_MCP_CORE_TASKS
    const char *s = json_string_value(json_object_get(params, "taskId"));
    char *end = NULL;
    unsigned long long id = s ? strtoull(s, &end, 10) : 0;
    if (!s || !*s || *end || !id)
        return NULL;
    core_ctx x = {.m = m, .want_result = result != NULL};
    if (th_task_get(m->s, (uint64_t)id, core_one, &x) != 0)
        return NULL;
    if (result)
        *result = x.result;
    else
        json_decref(x.result);
    return x.task;
#else
    (void)m;
    (void)params;
    return NULL;
#endif
}

/* Appends the core's tasks this session may see that are not its own MCP
 * tasks (m->mu held). */
static void core_list_locked(th_mcp_session *m, json_t *arr)
{
#if TH_MCP_CORE_TASKS
    core_ctx x = {.m = m, .arr = arr};
    th_task_foreach(m->s, core_each, &x);
#else
    (void)m;
    (void)arr;
#endif
}

/* ---- The session's task records ------------------------------------------------ */

static mcp_call *tasks_find(th_mcp_session *m, const json_t *params)
{
    const char *id = json_string_value(json_object_get(params, "taskId"));
    if (!id)
        return NULL;
    for (mcp_call *c = m->calls; c; c = c->next)
        if (c->task && c->announced && strcmp(c->task_id, id) == 0)
            return c;
    return NULL;
}

static json_t *related(const mcp_call *c, json_t *result)
{
    json_t *r = json_deep_copy(result);
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
    json_t *st = json_object();
    if (st) {
        json_decref(st);
        json_t *msg = json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0",
                                "method", "notifications/tasks/status",
                                "params", mcp_task_json(c));
        mcp_send(m, msg, NULL);
    }
    while (c->waiters) {
        mcp_waiter *w = c->waiters;
        c->waiters = w->next;
        if (c->result)
            mcp_send_result(m, w->id, related(c, c->result));
        else
            mcp_send_error(m, w->id, MCP_INTERNAL_ERROR,
                           "task %s ended without a result (out of memory)",
                           c->task_id);
        mcp_request_done(m, w->id);
        json_decref(w->id);
        free(w);
    }
}

void mcp_tasks_expire_locked(th_mcp_session *m, int64_t now_ms)
{
    for (mcp_call **p = &m->calls; *p;) {
        mcp_call *c = *p;
        if (c->task && c->finished && c->announced && !c->waiters &&
            now_ms - c->created_ms > c->ttl_ms) {
            *p = c->next;
            mcp_call_unref_locked(m, c);
            continue;
        }
        p = &c->next;
    }
}

void mcp_tasks_get(th_mcp_session *m, const json_t *id, const json_t *params)
{
    pthread_mutex_lock(&m->mu);
    mcp_tasks_expire_locked(m, mcp_wall_ms());
    mcp_call *c = tasks_find(m, params);
    json_t *j = c ? mcp_task_json(c) : NULL;
    pthread_mutex_unlock(&m->mu);
    if (!c && (j = core_find(m, params, NULL)) != NULL) {
        mcp_send_result(m, id, j);
        return;
    }
    if (!c) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "unknown taskId (tasks expire after their ttl)");
        return;
    }
    mcp_send_result(m, id, j);
}

void mcp_tasks_result(th_mcp_session *m, const json_t *id,
                      const json_t *params)
{
    pthread_mutex_lock(&m->mu);
    mcp_tasks_expire_locked(m, mcp_wall_ms());
    mcp_call *c = tasks_find(m, params);
    if (!c) {
        pthread_mutex_unlock(&m->mu);
        json_t *res = NULL;
        json_t *t = core_find(m, params, &res);
        if (t && res) {
            json_t *meta = json_object_get(res, "_meta");
            if (meta)
                json_object_set_new(
                    meta, "io.modelcontextprotocol/related-task",
                    json_pack("{s:O}", "taskId",
                              json_object_get(t, "taskId")));
            json_decref(t);
            mcp_send_result(m, id, res);
            return;
        }
        json_decref(t);
        json_decref(res);
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       t ? "task still running: not a task of this "
                           "session, so poll tasks/get until it ends"
                         : "unknown taskId (tasks expire after their ttl)");
        return;
    }
    if (c->finished) {
        json_t *r = c->result ? related(c, c->result) : NULL;
        pthread_mutex_unlock(&m->mu);
        if (r)
            mcp_send_result(m, id, r);
        else
            mcp_send_error(m, id, MCP_INTERNAL_ERROR, "out of memory");
        return;
    }
    /* Waits for the end: answered by mcp_task_ended_locked. */
    mcp_waiter *w = calloc(1, sizeof *w);
    if (!w || !(w->id = json_deep_copy(id))) {
        free(w);
        pthread_mutex_unlock(&m->mu);
        mcp_send_error(m, id, MCP_INTERNAL_ERROR, "out of memory");
        return;
    }
    w->next = c->waiters;
    c->waiters = w;
    pthread_mutex_unlock(&m->mu);
}

void mcp_tasks_list(th_mcp_session *m, const json_t *id,
                    const json_t *params)
{
    size_t off = 0;
    json_t *cur = json_object_get(params, "cursor");
    if (cur) {
        const char *s = json_string_value(cur);
        char *end = NULL;
        unsigned long long v = s ? strtoull(s, &end, 10) : 0;
        if (!s || !*s || *end) {
            mcp_send_error(m, id, MCP_INVALID_PARAMS, "invalid cursor");
            return;
        }
        off = (size_t)v;
    }
    json_t *arr = json_array();
    pthread_mutex_lock(&m->mu);
    mcp_tasks_expire_locked(m, mcp_wall_ms());
    /* m->calls is newest first: list oldest first. */
    size_t n = 0;
    for (mcp_call *c = m->calls; c; c = c->next)
        if (c->task && c->announced)
            n++;
    mcp_call **v = n ? calloc(n, sizeof *v) : NULL;
    size_t k = 0;
    for (mcp_call *c = m->calls; v && c; c = c->next)
        if (c->task && c->announced)
            v[n - 1 - k++] = c;
    json_t *all = json_array();
    for (size_t i = 0; all && v && i < n; i++)
        json_array_append_new(all, mcp_task_json(v[i]));
    if (all)
        core_list_locked(m, all);
    pthread_mutex_unlock(&m->mu);
    free(v);
    n = json_array_size(all);
    for (size_t i = off; arr && i < n && i < off + TASK_PAGE; i++)
        json_array_append(arr, json_array_get(all, i));
    json_decref(all);
    json_t *res = json_pack("{s:o}", "tasks", arr);
    if (res && off + TASK_PAGE < n) {
        char next[32];
        snprintf(next, sizeof next, "%zu", off + TASK_PAGE);
        json_object_set_new(res, "nextCursor", json_string(next));
    }
    mcp_send_result(m, id, res);
}

void mcp_tasks_cancel(th_mcp_session *m, const json_t *id,
                      const json_t *params)
{
    pthread_mutex_lock(&m->mu);
    mcp_call *c = tasks_find(m, params);
    if (!c) {
        pthread_mutex_unlock(&m->mu);
        json_t *t = core_find(m, params, NULL);
        const char *st = json_string_value(json_object_get(t, "status"));
        if (t && st && strcmp(st, "working") == 0) {
            th_call_cancel(m->s, strtoull(json_string_value(json_object_get(
                                              t, "taskId")),
                                          NULL, 10));
            json_decref(t);
            t = core_find(m, params, NULL);
            if (t)
                json_object_set_new(t, "status", json_string("cancelled"));
            mcp_send_result(m, id, t);
            return;
        }
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       t ? "task already ended: it cannot be cancelled"
                         : "unknown taskId");
        json_decref(t);
        return;
    }
    if (terminal(c->status) || c->finished) {
        char st[16];
        snprintf(st, sizeof st, "%s", status_names[c->status]);
        pthread_mutex_unlock(&m->mu);
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "task already ended (%s): it cannot be cancelled", st);
        return;
    }
    uint64_t cid = c->call_id;
    pthread_mutex_unlock(&m->mu);
    th_call_cancel(m->s, cid);
    /* The core answers a cancelled call at once: its status is final. */
    pthread_mutex_lock(&m->mu);
    c = tasks_find(m, params);
    json_t *j = NULL;
    if (c) {
        if (!c->finished) {
            c->status = MCP_TASK_CANCELLED;
            c->updated_ms = mcp_wall_ms();
        }
        j = mcp_task_json(c);
    }
    pthread_mutex_unlock(&m->mu);
    if (j)
        mcp_send_result(m, id, j);
    else
        mcp_send_error(m, id, MCP_INVALID_PARAMS, "unknown taskId");
}
