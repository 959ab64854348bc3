/* mcp_front.c - the MCP front's descriptor (th/front.h): its name, its
 * `mcp:` section (mcp_config.c), the outcomes its HTTP layer counts, and
 * the Streamable HTTP daemons `toolhost serve` opens and closes with the
 * other fronts (http.c).  MCP over stdio is a command of its own
 * (`toolhost mcp`), not opened here. */
#include "front/fronts.h"
#include "front/mcp_config.h"
#include "front/mcp_http.h"
#include "mcp.h"
#include "th/front.h"
#include "toolhost/plugin.h"

static const th_front_event_desc mcp_events[TH_MCP_EV_N] = {
    [TH_MCP_EV_UNAUTHORIZED] = {"unauthorized", TH_FEV_REFUSED},
    [TH_MCP_EV_FORBIDDEN] = {"forbidden", TH_FEV_REFUSED},
    [TH_MCP_EV_TOO_LARGE] = {"body_too_large", TH_FEV_REFUSED},
    [TH_MCP_EV_MAX_STREAMS] = {"max_streams", TH_FEV_REFUSED},
    [TH_MCP_EV_MAX_SESSIONS] = {"max_sessions", TH_FEV_REFUSED},
    [TH_MCP_EV_SHUTDOWN] = {"shutting_down", TH_FEV_REFUSED},
    [TH_MCP_EV_SLOW_READER] = {"slow_reader", TH_FEV_CLOSED},
    [TH_MCP_EV_PROTOCOL] = {"protocol_error", TH_FEV_PROTOCOL},
};

static int mcp_open(th_host *h, void **state, th_error *err)
{
    th_mcp_http *web = NULL;
    int rc = th_mcp_http_start(h, th_host_config(h), &web, err);
    *state = web;
    return rc;
}

static void mcp_close(void *state)
{
    th_mcp_http_stop(state);
}

const th_front th_mcp_front = {
    .name = TOOLHOST_FRONT_MCP,
    .section = &th_mcp_section,
    .events = mcp_events,
    .n_events = TH_MCP_EV_N,
    .open = mcp_open,
    .close = mcp_close,
};
