/* front/mcp_http.h - MCP over Streamable HTTP (host/mcp/http.c): every
 * http:// and https:// entry of host.listen, served next to the msgpack-RPC
 * socket by the same host.  docs/mcp.md ("Streamable HTTP") describes the
 * behaviour on the wire: POST, GET and DELETE on the entry's path,
 * Mcp-Session-Id sessions, bearer tokens, Origin checks and the limits of
 * the `mcp:` config section. */
#ifndef TH_MCP_HTTP_H
#define TH_MCP_HTTP_H

#include "th/config.h"
#include "th/err.h"
#include "th/host.h"

typedef struct th_mcp_http th_mcp_http;

/* Starts one HTTP daemon per http(s):// entry of cfg->host.listen_http
 * (cfg is the host's config; it and h must outlive the front).  With no
 * entry, *out is NULL and 0 is returned.  0, or a TH_E* code with a
 * sentence in err (nothing is left running then). */
int th_mcp_http_start(th_host *h, const th_config *cfg, th_mcp_http **out,
                      th_error *err);
/* The bound port of the i-th entry (0 when there is none). */
unsigned th_mcp_http_port(const th_mcp_http *f, size_t i);
/* Stops accepting, ends every stream and session (their calls are
 * cancelled within the host's grace), stops the daemons.  NULL is fine. */
void th_mcp_http_stop(th_mcp_http *f);

#endif
