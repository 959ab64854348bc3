/* shim.h - the C side of the toolhost Go SDK: the entry point the host
 * looks up, the execute/validate/init/fini functions the descriptor
 * points to (each calls the Go function exported beside it), and calls
 * through the host api's function pointers (Go cannot call a C function
 * pointer itself).  Only toolhost_plugin_v1 is exported from the plugin:
 * the SDK links with toolhost.map, a version script that makes every
 * other symbol (Go's runtime, cgo's, these) local. */
#ifndef TOOLHOST_GO_SHIM_H
#define TOOLHOST_GO_SHIM_H

#include <stdint.h>
#include <stdlib.h>

#include <toolhost/plugin.h>

/* The functions a descriptor built by the Go side points to. */
int thgo_c_execute(void *state, const toolhost_tool *tool, toolhost_call *call,
                   const uint8_t *args, size_t len);
int thgo_c_validate(void *state, const toolhost_tool *tool,
                    const uint8_t *args, size_t len, char *err,
                    size_t err_size);
int thgo_c_init(const toolhost_host_api *host, const uint8_t *config,
                size_t len, void **state, char *err, size_t err_size);
void thgo_c_fini(void *state);

/* Host api calls: each returns TOOLHOST_EINVAL when the host lacks the
 * member (an older host). */
int thgo_write(toolhost_call *call, int stream, const void *data, size_t len);
int thgo_set_meta(toolhost_call *call, const void *map, size_t len);
int thgo_progress(toolhost_call *call, double fraction, const char *message);
int thgo_is_cancelled(toolhost_call *call);
int64_t thgo_time_left_ms(toolhost_call *call);
int thgo_suspend(toolhost_call *call);
int thgo_complete(toolhost_call *call, int status);
void thgo_log(const toolhost_host_api *host, int level, const char *message);
/* ABI 1.5: what execute() or complete() returns for a backend's failure:
 * `status` (TOOLHOST_UNAVAILABLE, TOOLHOST_TIMEOUT, TOOLHOST_RATE_LIMITED)
 * after set_retry_after(retry_after_ms) when nonzero, on a 1.5 host;
 * TOOLHOST_FAILED on an older one or for another status. */
int thgo_backend(toolhost_call *call, int status, uint64_t retry_after_ms);
void thgo_log_call(toolhost_call *call, int level, const char *message);

/* on_cancel(call, thgo_cancel_cb, id) (ABI 1.1); TOOLHOST_ESTATE when the
 * host lacks it.  thgo_cancel_cb calls the Go side with the id. */
int thgo_on_cancel(toolhost_call *call, uintptr_t id);

/* Stores the tool's index in its user_data (the Go side gets it back as
 * an integer, never as a pointer). */
void thgo_tool_set_index(toolhost_tool *t, uintptr_t index);

/* The i-th argument of a view (the stride is args[0].struct_size), or
 * NULL when the call has no view for these bytes. */
const toolhost_args_view *thgo_view(toolhost_call *call, const uint8_t *args,
                                    size_t len);
const toolhost_arg *thgo_view_arg(const toolhost_args_view *v, uint32_t i);

#endif
