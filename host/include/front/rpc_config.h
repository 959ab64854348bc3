/* front/rpc_config.h - the msgpack-RPC socket's settings (host/rpc/
 * rpc_config.c): the unix: entry of host.listen and the host.* keys of
 * the socket and its connections (host.max_frame, host.max_connections
 * ...), which the RPC front adds to the `host:` section (th/section.h,
 * host_keys).  docs/config.md lists the keys. */
#ifndef TH_RPC_CONFIG_H
#define TH_RPC_CONFIG_H

#include <stdint.h>

#include "th/config.h"
#include "th/section.h"

typedef struct th_rpc_cfg {
    char *listen;              /* "unix:/path" or NULL (the default
                                  socket): the one unix: entry of listen */
    uint32_t socket_mode;      /* default 0600                           */
    char *socket_group;        /* NULL: the host's group                 */
    uint64_t max_frame;        /* bytes; default 16 MiB                  */
    uint32_t max_inflight;     /* per connection; default 256            */
    uint64_t max_outbuf;       /* per connection; default 64 MiB         */
    uint32_t max_connections;  /* open at once; default 1024             */
    uint32_t max_connections_per_uid; /* default 256                     */
    uint64_t idle_timeout_ms;  /* nothing in flight, nothing read: close;
                                  default 1 h, 0 off                     */
    uint64_t frame_timeout_ms; /* a started frame completes within;
                                  default 30 s, 0 off                    */
    uint64_t max_buffered;     /* input + output buffered over every
                                  connection; default 256 MiB            */
    uint32_t max_protocol_errors; /* per connection; default 8          */
    uint32_t max_conn_log_lines;  /* warnings per connection; default 20 */
    const th_ynode *listen_at; /* the unix: entry, for messages, or NULL */
} th_rpc_cfg;

extern const th_section th_rpc_section;

/* The RPC settings of cfg: its section, or (cfg read without the RPC
 * front registered, or NULL) the defaults. */
const th_rpc_cfg *th_rpc_config(const th_config *cfg);

#endif
