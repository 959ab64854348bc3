/* tasks.c - tasks seen from outside: the task list (th_tasks_list) and
 * the two built-in task tools get_running_tasks and cancel_task.  Above
 * the call path: it uses the call API only (the duplicate table and the
 * kept results are task_table.c). */
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manager.h"

/* ---- Listing ------------------------------------------------------------------ */

static void collect(uint64_t k, void *v, void *ud)
{
    (void)k;
    th_mcall ***pp = ud;
    th_mcall_ref(v);
    *(*pp)++ = v;
}

static int by_id(const void *a, const void *b)
{
    uint64_t x = (*(th_mcall *const *)a)->base.pub.call_id;
    uint64_t y = (*(th_mcall *const *)b)->base.pub.call_id;
    return x < y ? -1 : x > y;
}

int th_tasks_list(th_session *s, int (*fn)(const th_task_info *t, void *ud), void *ud)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->calls.n;
    th_mcall **v = calloc(n ? n : 1, sizeof *v), **p = v;
    if (v)
        th_u64map_each(&s->calls, collect, &p);
    pthread_mutex_unlock(&s->mu);
    if (!v)
        return TH_ENOMEM;
    n = (size_t)(p - v);
    qsort(v, n, sizeof *v, by_id);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        th_mcall *c = v[i];
        if (rc == 0) {
            pthread_mutex_lock(&c->mu);
            bool live = c->acked && !c->answered;
            th_task_info ti;
            memset(&ti, 0, sizeof ti);
            char *msg = NULL;
            if (live) {
                ti.task_id = c->base.pub.call_id;
                ti.session_id = s->id;
                ti.tool = c->tool->name;
                ti.args = c->args;
                ti.args_len = c->args_len;
                ti.started_ms = c->start_wall_ms;
                ti.last_update_ms = c->last_update_ms;
                msg = c->last_msg ? strdup(c->last_msg) : NULL;
                ti.message = msg;
                ti.fraction = c->last_frac;
                ti.scope = c->scope;
            }
            pthread_mutex_unlock(&c->mu);
            if (live)
                rc = fn(&ti, ud);
            free(msg);
        }
        th_mcall_unref(c);
    }
    free(v);
    return rc;
}

/* ---- The task tools ---------------------------------------------------------- */

static json_t *mp_to_json(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return json_null();
    case MSGPACK_OBJECT_BOOLEAN: return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return json_integer((json_int_t)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return json_integer((json_int_t)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return json_real(o->via.f64);
    case MSGPACK_OBJECT_STR: return json_stringn(o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_ARRAY: {
        json_t *a = json_array();
        for (uint32_t i = 0; a && i < o->via.array.size; i++)
            json_array_append_new(a, mp_to_json(&o->via.array.ptr[i]));
        return a;
    }
    case MSGPACK_OBJECT_MAP: {
        json_t *m = json_object();
        for (uint32_t i = 0; m && i < o->via.map.size; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            if (k->type != MSGPACK_OBJECT_STR)
                continue;
            char key[256];
            size_t kl = k->via.str.size < 255 ? k->via.str.size : 255;
            memcpy(key, k->via.str.ptr, kl);
            key[kl] = '\0';
            json_object_set_new(m, key, mp_to_json(&o->via.map.ptr[i].val));
        }
        return m;
    }
    default: return json_null();
    }
}

static void iso_time(int64_t ms, char *buf, size_t n)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t k = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + k, n - k, ".%03dZ", (int)(ms % 1000));
}

static int list_one(const th_task_info *t, void *ud)
{
    json_t *arr = ud;
    json_t *o = json_object();
    if (!o)
        return TH_ENOMEM;
    char a[40], b[40];
    iso_time(t->started_ms, a, sizeof a);
    iso_time(t->last_update_ms, b, sizeof b);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    json_t *args = msgpack_unpack_next(&u, (const char *)t->args, t->args_len, &off) ==
                           MSGPACK_UNPACK_SUCCESS
                       ? mp_to_json(&u.data)
                       : json_null();
    msgpack_unpacked_destroy(&u);
    json_object_set_new(o, "task_id", json_integer((json_int_t)t->task_id));
    json_object_set_new(o, "tool", json_string(t->tool));
    json_object_set_new(o, "arguments", args);
    json_object_set_new(o, "started_at", json_string(a));
    json_object_set_new(o, "last_update", json_string(b));
    if (t->message)
        json_object_set_new(o, "message", json_string(t->message));
    if (t->fraction >= 0)
        json_object_set_new(o, "progress", json_real(t->fraction));
    json_array_append_new(arr, o);
    return 0;
}

static int exec_list(void *state, const toolhost_tool *tool, toolhost_call *call,
                     const uint8_t *args, size_t len)
{
    (void)state;
    (void)tool;
    (void)args;
    (void)len;
    th_session *s = th_call_session(call);
    json_t *arr = json_array();
    if (!s || !arr) {
        json_decref(arr);
        return TOOLHOST_FAILED;
    }
    th_tasks_list(s, list_one, arr);
    char *text = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    if (!text)
        return TOOLHOST_FAILED;
    call->host->write(call, TOOLHOST_STDOUT, text, strlen(text));
    free(text);
    return TOOLHOST_OK;
}

static int exec_cancel(void *state, const toolhost_tool *tool, toolhost_call *call,
                       const uint8_t *args, size_t len)
{
    (void)state;
    (void)tool;
    th_session *s = th_call_session(call);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int64_t id = -1;
    if (msgpack_unpack_next(&u, (const char *)args, len, &off) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP)
        for (uint32_t i = 0; i < u.data.via.map.size; i++) {
            const msgpack_object_kv *kv = &u.data.via.map.ptr[i];
            if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == 7 &&
                memcmp(kv->key.via.str.ptr, "task_id", 7) == 0) {
                if (kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                    id = (int64_t)kv->val.via.u64;
            }
        }
    msgpack_unpacked_destroy(&u);
    char msg[256];
    int rc = s && id > 0 ? th_call_cancel(s, (uint64_t)id) : TH_ENOTFOUND;
    if (rc != 0) {
        snprintf(msg, sizeof msg,
                 "no running task %lld: it is unknown or already finished (get_running_tasks lists the running ones)",
                 (long long)id);
        th_mcall_set_error(call, TH_ENOTFOUND, msg);
        return TOOLHOST_FAILED;
    }
    int n = snprintf(msg, sizeof msg, "task %lld cancelled", (long long)id);
    call->host->write(call, TOOLHOST_STDOUT, msg, (size_t)n);
    return TOOLHOST_OK;
}

static const toolhost_param cancel_params[] = {
    {.struct_size = sizeof(toolhost_param),
     .name = "task_id",
     .type = TOOLHOST_TYPE_INTEGER,
     .required = 1,
     .description = "The task_id of a running task (from get_running_tasks or the call's answer)."},
};

static const toolhost_tool task_tools[] = {
    {.struct_size = sizeof(toolhost_tool),
     .name = "cancel_task",
     .description = "Cancel a running background task by its task_id.",
     .long_description = "Cancels a task that a long-running tool started. The task stops "
                         "soon after; its final answer says it was cancelled.",
     .params = cancel_params,
     .n_params = 1,
     .stdout_type = TOOLHOST_SEM_STATUS,
     .stderr_type = TOOLHOST_SEM_ERROR,
     .flags = TOOLHOST_TOOL_IDEMPOTENT,
     .execute = exec_cancel},
    {.struct_size = sizeof(toolhost_tool),
     .name = "get_running_tasks",
     .description = "List this session's running background tasks (task_id, tool, "
                    "arguments, started_at, last_update).",
     .stdout_type = TOOLHOST_SEM_STRUCTURED,
     .stderr_type = TOOLHOST_SEM_ERROR,
     .flags = TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT,
     .execute = exec_list},
};

const toolhost_plugin th_task_tools_plugin = {
    .struct_size = sizeof(toolhost_plugin),
    .abi_major = TOOLHOST_ABI_MAJOR,
    .abi_minor = TOOLHOST_ABI_MINOR,
    .name = "toolhost-tasks",
    .version = TOOLHOST_VERSION,
    .description = "The host's task tools.",
    .tools = task_tools,
    .n_tools = 2,
};
