/* th/front.h - a front, as the core sees it: a descriptor.
 *
 * A front (msgpack-RPC, MCP over HTTP, NATS, the test tree's line
 * protocol ...) brings one th_front: its name (the th_front_ops.front of
 * its sessions, the `front` label of its counters), its config section
 * (th/section.h), the outcomes it counts (connections refused or closed
 * by a limit, protocol errors: th_stat_front_event with an index into its
 * own table) and, for a front that serves beside the others, open / stop
 * / close, which `toolhost serve` calls for every registered front in
 * registration order (and unwinds in reverse).  The core keeps the table
 * and iterates it; it names no front.
 *
 * Threads: th_front_register is for the main thread, before the first
 * config is read (it registers the front's section too).  The table is
 * read from any thread after that.
 */
#ifndef TH_FRONT_H
#define TH_FRONT_H

#include <stddef.h>

#include "th/err.h"
#include "th/host.h"
#include "th/section.h"

/* One outcome a front counts. */
typedef struct th_front_event_desc {
    const char *reason;        /* the `reason` label: "max_connections" */
    th_front_event_class cls;  /* which counter family it goes to       */
} th_front_event_desc;

#define TH_FRONTS_MAX 12
#define TH_FRONT_EVENTS_MAX 24

typedef struct th_front {
    const char *name;
    const th_section *section;          /* or NULL */
    const th_front_event_desc *events;  /* index = the front's own enum */
    size_t n_events;                    /* at most TH_FRONT_EVENTS_MAX  */
    /* Serving beside the others (NULL: the front is started otherwise,
     * such as the RPC loop `serve` runs on its own thread).  open binds
     * and starts serving what h's config asks of it; *state NULL (and 0)
     * when the config asks nothing.  stop (may be NULL): the host stops,
     * take no new calls (calls in flight go on).  close: stop serving and
     * free (state may be NULL). */
    int (*open)(th_host *h, void **state, th_error *err);
    void (*stop)(void *state);
    void (*close)(void *state);
} th_front;

/* Registers f (and its section).  0 (again for the same descriptor);
 * TH_ESTATE when another front or section has its name; TH_ELIMIT past
 * TH_FRONTS_MAX, when f has more than TH_FRONT_EVENTS_MAX events, or when
 * f has events and the stats have no room left for its counters (sessions
 * gave TH_FRONTS_MAX other front names first). */
int th_front_register(const th_front *f);
/* The registered fronts, in registration order (NULL past the end). */
const th_front *th_front_at(size_t i);

#endif
