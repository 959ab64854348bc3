/* task_tools.c - the host's two built-in task tools, get_running_tasks and
 * cancel_task: a plugin of the host that runs through the call layer like
 * any other, on top of the task store (tasks.c), so the store itself calls
 * nothing of the call layer's (docs/architecture.md: no call cycle).
 */
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/codec.h"
#include "manager.h"

/* ---- The task tools ---------------------------------------------------------- */

typedef struct list_ctx {
    th_session *s;
    json_t *arr;
    int64_t now_ms;
} list_ctx;

/* get_running_tasks: this session's live tasks, in tasks.list's form. */
static int list_one(const th_task_view *t, void *ud)
{
    list_ctx *lc = ud;
    if (t->state != TH_TASK_WORKING || t->session_id != lc->s->id)
        return 0;
    th_error err;
    json_t *o = th_codec_task_json(t, lc->now_ms, &err);
    if (!o || json_array_append_new(lc->arr, o) != 0)
        return TH_ENOMEM;
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
    list_ctx lc = {s, json_array(), th_wall_ms()};
    if (!s || !lc.arr || th_task_foreach(s, list_one, &lc) != 0) {
        json_decref(lc.arr);
        th_mcall_set_error(call, TH_ENOMEM, "out of memory listing the tasks");
        return TOOLHOST_FAILED;
    }
    char *text = json_dumps(lc.arr, JSON_COMPACT);
    json_decref(lc.arr);
    if (!text) {
        th_mcall_set_error(call, TH_ENOMEM, "out of memory listing the tasks");
        return TOOLHOST_FAILED;
    }
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
            if (kv->key.type == MSGPACK_OBJECT_STR &&
                kv->key.via.str.size == strlen("task_id") &&
                memcmp(kv->key.via.str.ptr, "task_id", kv->key.via.str.size) == 0) {
                if (kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                    id = (int64_t)kv->val.via.u64;
            }
        }
    msgpack_unpacked_destroy(&u);
    char msg[256];
    int rc = s && id > 0 ? th_task_cancel(s, (uint64_t)id) : TH_ENOTFOUND;
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
                    "arguments, started_at, last_update, message, progress).",
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
