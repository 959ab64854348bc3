/* rpc_config.c - the msgpack-RPC socket's settings (front/rpc_config.h):
 * the unix: entry of host.listen and the keys the RPC front adds to the
 * `host:` section, registered with the core's config reader through
 * th/section.h.
 *
 * Threads: the config reader's (th/section.h); th_rpc_config any.
 */
#include "front/rpc_config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define R(f) offsetof(th_rpc_cfg, f)
static const th_cfkey rpc_host_keys[] = {
    {.name = "socket_mode", .set = th_cf_mode, .off = R(socket_mode)},
    {.name = "socket_group", .set = th_cf_str, .off = R(socket_group)},
    {.name = "max_frame", .set = th_cf_size, .off = R(max_frame),
     .min = TH_KIB, .max = TH_GIB},
    {.name = "max_inflight", .set = th_cf_u32, .off = R(max_inflight),
     .min = 1, .max = 65536},
    {.name = "max_outbuf", .set = th_cf_size, .off = R(max_outbuf),
     .min = 64 * TH_KIB, .max = 64 * TH_GIB},
    {.name = "max_connections", .set = th_cf_u32, .off = R(max_connections),
     .min = 1, .max = 1000000},
    {.name = "max_connections_per_uid", .set = th_cf_u32,
     .off = R(max_connections_per_uid), .min = 1, .max = 1000000},
    {.name = "idle_timeout", .set = th_cf_duration, .off = R(idle_timeout_ms),
     .min = 0, .max = 30 * TH_DAY_MS},
    {.name = "frame_timeout", .set = th_cf_duration,
     .off = R(frame_timeout_ms), .min = 0, .max = TH_DAY_MS},
    {.name = "max_buffered", .set = th_cf_size, .off = R(max_buffered),
     .min = 64 * TH_KIB, .max = 1024 * TH_GIB},
    {.name = "max_protocol_errors", .set = th_cf_u32,
     .off = R(max_protocol_errors), .min = 1, .max = 1000000},
    {.name = "max_conn_log_lines", .set = th_cf_u32,
     .off = R(max_conn_log_lines), .min = 1, .max = 1000000},
    {.name = NULL}};
#undef R

static const th_rpc_cfg rpc_defaults = {
    .socket_mode = 0600,
    .max_frame = 16 * TH_MIB,
    .max_inflight = 256,
    .max_outbuf = 64 * TH_MIB,
    .max_connections = 1024,
    .max_connections_per_uid = 256,
    .idle_timeout_ms = TH_HOUR_MS,
    .frame_timeout_ms = 30 * TH_SEC_MS,
    .max_buffered = 256 * TH_MIB,
    .max_protocol_errors = 8,
    .max_conn_log_lines = 20,
};

static void rpc_init(void *sec)
{
    *(th_rpc_cfg *)sec = rpc_defaults;
}

/* host.listen's unix: entry: at most one; "unix:" alone is the default
 * socket (front/sockpath.h); a relative path is the config folder's. */
static int rpc_listen(th_cfctx *c, const th_ynode *v, void *sec)
{
    th_rpc_cfg *r = sec;
    if (r->listen_at)
        return th_cf_err(c, v, "'listen' has more than one unix: entry; the "
                               "host serves one socket");
    r->listen_at = v;
    if (!v->str[5])
        return 0; /* the default socket */
    const char *path = v->str + 5;
    char *abs = th_cf_resolve_path(c, path);
    if (!abs)
        return th_cf_nomem(c);
    size_t len = strlen(abs);
    if (len > 107) {
        free(abs);
        return th_cf_err(c, v, "'listen': the socket path is %zu bytes long; "
                               "a Unix socket path holds at most 107", len);
    }
    r->listen = malloc(len + 6);
    if (r->listen) {
        memcpy(r->listen, "unix:", 5);
        memcpy(r->listen + 5, abs, len + 1);
    }
    free(abs);
    return r->listen ? 0 : th_cf_nomem(c);
}

static void rpc_free(void *sec)
{
    th_rpc_cfg *r = sec;
    free(r->listen);
    free(r->socket_group);
}

/* The socket is bound, and its limits set, once when the server starts
 * (th_rpc_serve): every key of the section waits for the next restart. */
static const char *rpc_reload_note(const void *old, const void *cur)
{
    const th_rpc_cfg *a = old, *b = cur;
    bool listen = (a->listen || b->listen) &&
                  (!a->listen || !b->listen ||
                   strcmp(a->listen, b->listen) != 0);
    bool group = (a->socket_group || b->socket_group) &&
                 (!a->socket_group || !b->socket_group ||
                  strcmp(a->socket_group, b->socket_group) != 0);
    bool limits =
        group || a->socket_mode != b->socket_mode ||
        a->max_frame != b->max_frame || a->max_inflight != b->max_inflight ||
        a->max_outbuf != b->max_outbuf ||
        a->max_connections != b->max_connections ||
        a->max_connections_per_uid != b->max_connections_per_uid ||
        a->idle_timeout_ms != b->idle_timeout_ms ||
        a->frame_timeout_ms != b->frame_timeout_ms ||
        a->max_buffered != b->max_buffered ||
        a->max_protocol_errors != b->max_protocol_errors ||
        a->max_conn_log_lines != b->max_conn_log_lines;
    if (listen && limits)
        return "reload: host.listen and the RPC socket's host.socket_* and "
               "limits (max_frame, max_connections, ...) change at the next "
               "restart";
    if (listen)
        return "reload: host.listen changes at the next restart";
    if (limits)
        return "reload: the RPC socket's host.socket_* and limits "
               "(max_frame, max_connections, ...) change at the next restart";
    return NULL;
}

static const char *const rpc_schemes[] = {"unix:", NULL};

const th_section th_rpc_section = {
    .name = "rpc", /* no `rpc:` key: its keys are under host: */
    .size = sizeof(th_rpc_cfg),
    .init = rpc_init,
    .host_keys = rpc_host_keys,
    .free = rpc_free,
    .schemes = rpc_schemes,
    .listen = rpc_listen,
    .listen_form = "unix:PATH (a Unix socket)",
    .reload_note = rpc_reload_note,
};

const th_rpc_cfg *th_rpc_config(const th_config *cfg)
{
    const th_rpc_cfg *r = cfg ? th_config_section(cfg, &th_rpc_section)
                              : NULL;
    return r ? r : &rpc_defaults;
}
