/* front/metrics.h - the Prometheus text endpoint (host/front/metrics.c):
 * every http:// entry of host.listen whose path is /metrics
 * (cfg->host.listen_metrics), served beside the RPC socket and the MCP
 * front on the HTTP layer of th/http.h.  No token; loopback only unless
 * mcp.allow_remote.  docs/ops.md lists the metrics. */
#ifndef TH_FRONT_METRICS_H
#define TH_FRONT_METRICS_H

#include "th/buf.h"
#include "th/config.h"
#include "th/err.h"
#include "th/host.h"

typedef struct th_metrics th_metrics;

/* Starts one HTTP daemon per metrics entry (cfg and h outlive it).  With
 * none, *out is NULL and 0 is returned.  0, or a TH_E* code with a
 * sentence in err (nothing left running). */
int th_metrics_start(th_host *h, const th_config *cfg, th_metrics **out,
                     th_error *err);
/* The bound port of the i-th entry (0 when there is none). */
unsigned th_metrics_port(const th_metrics *m, size_t i);
/* Stops the daemons.  NULL is fine. */
void th_metrics_stop(th_metrics *m);

/* Appends the exposition text (Prometheus text format 0.0.4) of `h`'s
 * numbers to `out`.  0 or TH_ENOMEM. */
int th_metrics_render(th_host *h, th_buf *out);
/* Appends `s` escaped as a label value (\\, \", \n). */
int th_metrics_label(th_buf *out, const char *s);

#endif
