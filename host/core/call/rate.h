/* rate.h - per-caller rate limits and quotas (`rate_limits:`, rate.c).
 *
 * Private to the core: th_call_start admits each call through
 * th_rate_admit() before it runs, and the call's end (exec_end, call.c)
 * gives back what it holds with th_rate_release(). */
#ifndef TH_RATE_H
#define TH_RATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/config.h"
#include "th/host.h"

typedef struct th_rate th_rate;

/* The host's buckets, empty.  NULL when out of memory. */
th_rate *th_rate_new(void);
/* Frees the buckets.  No call may hold a slot any more. */
void th_rate_free(th_rate *r);

/* Admits call `call_id`, of `tool` by `who`, under the rules of `cfg`
 * (every rule that matches both must have room; then each takes its
 * share at once).  `now_ns` is a monotonic time, `wall_s` the Unix time
 * (for the daily quota's UTC day).  The trusted in-process CLI is never
 * limited.  0: admitted, *held true when it holds concurrent-call slots
 * (then th_rate_release(call_id) must follow its end); TH_ERATE_LIMITED:
 * refused, msg says which limit of which rule and when to retry,
 * *retry_ms how long to wait (0: when a running call ends); TH_ENOMEM. */
int th_rate_admit(th_rate *r, const th_config *cfg, const th_principal *who,
                  const char *tool, uint64_t call_id, int64_t now_ns,
                  int64_t wall_s, bool *held, uint64_t *retry_ms, char *msg,
                  size_t cap);

/* Gives back the slots call `call_id` holds (its execution is over). */
void th_rate_release(th_rate *r, uint64_t call_id);

/* How many calls the rules refused since the host started. */
uint64_t th_rate_refused(const th_rate *r);

#endif
