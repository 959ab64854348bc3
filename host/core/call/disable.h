/* disable.h - tools disabled at run time, with a reason (disable.c).
 *
 * Private to the core: th_call_submit asks th_disabled_check() of every
 * call while anything is disabled (one relaxed load otherwise); the API
 * is th_host_disable()/th_host_enable() in th/host.h. */
#ifndef TH_DISABLE_H
#define TH_DISABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "th/host.h"

typedef struct th_disabled th_disabled;

/* The host's set, empty; NULL when out of memory. */
th_disabled *th_disabled_new(void);
void th_disabled_free(th_disabled *d);
/* Whether anything is disabled: a relaxed read, for the call path. */
bool th_disabled_any(const th_disabled *d);
/* When `tool` is disabled (a "tag:NAME" entry: by the tags of cfg, the
 * call's config, and those its plugin declares): true, with "tool 'x' is
 * disabled: REASON (since DATE, by USER)" in msg (cap bytes). */
bool th_disabled_check(th_disabled *d, const th_config *cfg,
                       const th_tool *tool, char *msg, size_t cap);

#endif
