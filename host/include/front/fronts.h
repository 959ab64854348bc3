/* front/fronts.h - the fronts built into toolhost, as descriptors
 * (th/front.h), and the one call that registers them all.
 *
 * A program that reads configs with their sections or serves them calls
 * th_fronts_register_builtin() once, on its main thread, before the first
 * config: `toolhost` in main(), the test runner, the fuzz targets of the
 * fronts.  The order is the order `toolhost serve` opens them in (after
 * the RPC socket is prepared, before its loop runs) and the order of
 * their counters in /metrics. */
#ifndef TH_FRONT_FRONTS_H
#define TH_FRONT_FRONTS_H

#include "th/front.h"

extern const th_front th_rpc_front;     /* host/rpc: the loop of serve   */
extern const th_front th_mcp_front;     /* host/mcp: Streamable HTTP     */
extern const th_front th_metrics_front; /* host/front: /metrics          */
extern const th_front th_nats_front;    /* host/nats                     */

/* Registers the fronts above; 0 or the first failure's TH_E* code (a
 * program that registered a front of the same name first). */
int th_fronts_register_builtin(void);

#endif
