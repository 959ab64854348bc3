/* mcp_tasks.c - MCP tasks (protocol 2025-11-25): tasks/get, tasks/result,
 * tasks/list, tasks/cancel and notifications/tasks/status, over the task
 * records of the session (one per task-augmented tools/call; the task id
 * is the call id).
 *
 * ADAPTER: the records here are the MCP session's own.  The core task
 * store (Interface A of wave 2: th_task_get / th_task_foreach /
 * th_task_wait in th/host.h) is being built in parallel; once it lands,
 * tasks_find()/tasks/list should ask it for acknowledged tasks (that adds
 * toolset-scoped tasks of the same uid started by other sessions, with the
 * core's ownership checks), and this file keeps only what MCP adds (ttl,
 * status messages, waiting tasks/result requests).  Cancellation already
 * goes through the core (th_call_cancel). */
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
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "unknown taskId (tasks expire after their ttl)");
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
    for (size_t i = off; arr && v && i < n && i < off + TASK_PAGE; i++)
        json_array_append_new(arr, mcp_task_json(v[i]));
    pthread_mutex_unlock(&m->mu);
    free(v);
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
        mcp_send_error(m, id, MCP_INVALID_PARAMS, "unknown taskId");
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
