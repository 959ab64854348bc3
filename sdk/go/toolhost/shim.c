/* shim.c - the C side of the toolhost Go SDK (see shim.h). */
#include <stddef.h>
#include <string.h>

#include "shim.h"
#include "_cgo_export.h"

/* The one exported symbol.  The descriptor is built once by the Go side
 * from the plugin the program registered (in C memory that lives as long
 * as the process: a Go plugin is never unloaded). */
TOOLHOST_EXPORT const toolhost_plugin *toolhost_plugin_v1(void)
{
    return (const toolhost_plugin *)thgoDescribe();
}

int thgo_c_execute(void *state, const toolhost_tool *tool, toolhost_call *call,
                   const uint8_t *args, size_t len)
{
    (void)state;
    return thgoExecute((uintptr_t)tool->user_data, call, (void *)args, len);
}

int thgo_c_validate(void *state, const toolhost_tool *tool,
                    const uint8_t *args, size_t len, char *err,
                    size_t err_size)
{
    (void)state;
    return thgoValidate((uintptr_t)tool->user_data, (void *)args, len, err,
                        err_size);
}

int thgo_c_init(const toolhost_host_api *host, const uint8_t *config,
                size_t len, void **state, char *err, size_t err_size)
{
    *state = NULL;
    return thgoInit((void *)host, (void *)config, len, err, err_size);
}

void thgo_c_fini(void *state)
{
    (void)state;
    thgoFini();
}

void thgo_tool_set_index(toolhost_tool *t, uintptr_t index)
{
    t->user_data = (const void *)index;
}

int thgo_write(toolhost_call *call, int stream, const void *data, size_t len)
{
    return call->host->write(call, stream, data, len);
}

int thgo_set_meta(toolhost_call *call, const void *map, size_t len)
{
    return call->host->set_meta(call, map, len);
}

int thgo_progress(toolhost_call *call, double fraction, const char *message)
{
    return call->host->progress(call, fraction, message, NULL, 0);
}

int thgo_is_cancelled(toolhost_call *call)
{
    return call->host->is_cancelled(call);
}

int64_t thgo_time_left_ms(toolhost_call *call)
{
    return call->host->time_left_ms(call);
}

int thgo_suspend(toolhost_call *call)
{
    return call->host->suspend(call);
}

int thgo_complete(toolhost_call *call, int status)
{
    return call->host->complete(call, status);
}

int thgo_backend(toolhost_call *call, int status, uint64_t retry_after_ms)
{
    const toolhost_host_api *h = call->host;
    if ((status != TOOLHOST_UNAVAILABLE && status != TOOLHOST_TIMEOUT &&
         status != TOOLHOST_RATE_LIMITED) ||
        h->abi_minor < 5)
        return TOOLHOST_FAILED;
    if (retry_after_ms &&
        TOOLHOST_HAS_MEMBER(toolhost_host_api, h, set_retry_after) &&
        h->set_retry_after)
        h->set_retry_after(call, retry_after_ms);
    return status;
}

void thgo_log(const toolhost_host_api *host, int level, const char *message)
{
    if (host && host->log)
        host->log(host, level, message);
}

void thgo_log_call(toolhost_call *call, int level, const char *message)
{
    const toolhost_host_api *h = call->host;
    if (TOOLHOST_HAS_MEMBER(toolhost_host_api, h, log_call) && h->log_call)
        h->log_call(call, level, message);
    else
        thgo_log(h, level, message);
}

static void thgo_cancel_cb(void *ud)
{
    thgoCancelled((uintptr_t)ud);
}

int thgo_on_cancel(toolhost_call *call, uintptr_t id)
{
    const toolhost_host_api *h = call->host;
    if (!TOOLHOST_HAS_MEMBER(toolhost_host_api, h, on_cancel) || !h->on_cancel)
        return TOOLHOST_ESTATE;
    return h->on_cancel(call, thgo_cancel_cb, (void *)id);
}

const toolhost_args_view *thgo_view(toolhost_call *call, const uint8_t *args,
                                    size_t len)
{
    if (!TOOLHOST_HAS_MEMBER(toolhost_call, call, args_view))
        return NULL;
    const toolhost_args_view *v = call->args_view;
    if (!v || v->data != args || v->len != len ||
        v->struct_size < sizeof *v || (v->n_args && !v->args) ||
        (v->n_args && v->args[0].struct_size < sizeof(toolhost_arg)))
        return NULL;
    return v;
}

const toolhost_arg *thgo_view_arg(const toolhost_args_view *v, uint32_t i)
{
    return (const toolhost_arg *)((const char *)v->args +
                                  (size_t)i * v->args[0].struct_size);
}
