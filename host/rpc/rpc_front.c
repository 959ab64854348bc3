/* rpc_front.c - the msgpack-RPC front's descriptor (th/front.h): its name
 * and the outcomes it counts.  `toolhost serve` runs its loop on the main
 * thread itself (th_rpc_serve), so it has no open/close. */
#include "front/fronts.h"
#include "rpc_int.h"
#include "front/rpc_config.h"
#include "th/front.h"
#include "toolhost/plugin.h"

static const th_front_event_desc rpc_events[TH_RPC_EV_N] = {
    [TH_RPC_EV_FD_LIMIT] = {"fd_limit", TH_FEV_REFUSED},
    [TH_RPC_EV_MAX_CONNECTIONS] = {"max_connections", TH_FEV_REFUSED},
    [TH_RPC_EV_MAX_PER_UID] = {"max_connections_per_uid", TH_FEV_REFUSED},
    [TH_RPC_EV_ACCEPT] = {"accept_failed", TH_FEV_REFUSED},
    [TH_RPC_EV_IDLE] = {"idle_timeout", TH_FEV_CLOSED},
    [TH_RPC_EV_FRAME] = {"frame_timeout", TH_FEV_CLOSED},
    [TH_RPC_EV_BUDGET] = {"max_buffered", TH_FEV_CLOSED},
    [TH_RPC_EV_MAX_PROTOCOL] = {"max_protocol_errors", TH_FEV_CLOSED},
    [TH_RPC_EV_INFLIGHT] = {"max_inflight", TH_FEV_CLOSED},
    [TH_RPC_EV_PROTOCOL] = {"protocol_error", TH_FEV_PROTOCOL},
};

const th_front th_rpc_front = {
    .name = TOOLHOST_FRONT_RPC,
    .section = &th_rpc_section,
    .events = rpc_events,
    .n_events = TH_RPC_EV_N,
};
