/* th/reload.h - hot reload: plugins and config swapped into a running host
 * without dropping a call.  This is what the fronts use (host.reload,
 * host.stats, tests): the host's reloader, reloads on demand, results and
 * counters.  The reloader's insides (private copies, the target it drives,
 * the host glue) are host/core/reload/reloader.h; the libuv watcher that triggers
 * reloads is front support (front/reload_watch.h).
 *
 * Three layers (docs/reload.md is the picture in words):
 *
 *   private copies (reload_copy.c)  a 0700 folder the host owns; every
 *       plugin generation is dlopen()ed from its own unique copy there
 *       (the dynamic loader caches objects by path, and a rebuild that
 *       rewrites the original in place must not change code that runs);
 *   the reloader (reload.c)  parses and checks the whole new config,
 *       decides per plugin (unchanged, changed, added, removed), loads and
 *       initialises every new generation before touching the running set,
 *       then swaps them into the registry; replaced and removed generations
 *       drain (calls pinned to them finish) and are closed on the
 *       reloader's own thread, never on a worker mid-call;
 *   the watcher (host/front/reload_watch.c)  triggers on a libuv loop: file events on
 *       every plugin's folder and the config's, debounced; SIGHUP.  A
 *       reload that failed on a file still being written is retried after
 *       the debounce (bounded), not reported as broken.
 *
 * A reload that fails anywhere changes nothing: the old plugins keep
 * serving, the reason is logged, returned, and kept in the stats.
 *
 * Reloads never overlap: they run one at a time on the reloader's thread;
 * requests that arrive during a reload fold into one more reload after it.
 */
#ifndef TH_RELOAD_H
#define TH_RELOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/config.h"
#include "th/err.h"
#include "th/tool.h"

typedef struct th_reloader th_reloader;

/* ---- Reloads and their results ---------------------------------------------- */


/* Per-plugin outcome. */
typedef enum th_reload_action {
    TH_RL_UNCHANGED = 0,
    TH_RL_CHANGED,   /* a new generation replaced the running one */
    TH_RL_ADDED,
    TH_RL_REMOVED,
    TH_RL_SKIPPED    /* optional plugin that failed to load (warning) */
} th_reload_action;

const char *th_reload_action_name(th_reload_action a);

#define TH_RELOAD_MAX_REPORTED 64

typedef struct th_reload_item {
    char name[72];
    th_reload_action action;
    uint64_t generation; /* the generation running after the reload
                            (for REMOVED: the one removed) */
} th_reload_item;

/* What one reload did. */
typedef struct th_reload_result {
    int rc;                    /* 0 or a TH_E* code */
    th_error err;              /* the reason when rc != 0 */
    bool incomplete;           /* failed on a file still being written:
                                  worth retrying after the debounce */
    bool config_changed;       /* the config's content changed */
    bool tools_changed;        /* the tool list changed */
    uint64_t seq;              /* the reload's number (1, 2, ...) */
    unsigned n_unchanged, n_changed, n_added, n_removed, n_skipped;
    th_reload_item items[TH_RELOAD_MAX_REPORTED]; /* every plugin but
                                  unchanged ones, in config order */
    size_t n_items;
    int64_t prepare_ns;        /* parse, plan, copy, load, init */
    int64_t swap_ns;           /* the registry swap */
    int64_t total_ns;
} th_reload_result;

/* The buckets of the reload duration histogram (th_reload_le_s). */
#define TH_RELOAD_LE 10

/* Counters, for host.stats. */
typedef struct th_reload_stats {
    uint64_t reloads;          /* reloads run (ok + failed) */
    uint64_t ok, failed;
    uint64_t requests;         /* triggers received (before folding) */
    uint64_t retries;          /* retries after an incomplete file */
    int last_rc;               /* of the last reload */
    char last_error[1024];     /* "" when the last one succeeded */
    int64_t last_wall_ms;      /* when it ended, ms since the epoch */
    int64_t last_swap_ns, max_swap_ns;
    uint64_t draining;         /* generations out of the registry whose
                                  calls have not all ended */
    uint64_t closed;           /* generations closed (fini, dlclose) */
    uint64_t unloaded;         /* ... whose object left memory */
    uint64_t still_mapped;     /* ... whose object stayed mapped
                                  (RTLD_NOLOAD found it) */
    /* Every reload's total duration (ok or failed): dur_le[i] counts
     * those of at most th_reload_le_s(i) seconds (cumulative). */
    uint64_t dur_le[TH_RELOAD_LE];
    double dur_sum_s;
    /* Reloads plugins asked for (tools_changed(), ABI 1.5): requests
     * (before folding), reloads run for them alone, and the times one
     * waited for host.plugin_reload_min_interval. */
    uint64_t asked_requests, asked_reloads, asked_waits;
} th_reload_stats;

/* The upper bound, in seconds, of the i-th bucket of dur_le. */
double th_reload_le_s(unsigned i);
/* Counts a reload of total_ns into st's histogram (its lock held). */
void th_reload_stats_duration(th_reload_stats *st, int64_t total_ns);

/* Runs one reload now, on the calling thread (not the reloader's thread,
 * and not from a target callback): waits for a reload in progress, then
 * reloads `r`'s config file and applies it.  Returns res->rc. */
int th_reload_now(th_reloader *r, th_reload_result *res);

/* Called on the reloader's thread when a requested reload is over. */
typedef void (*th_reload_done_fn)(const th_reload_result *res, void *ud);

/* Asks for a reload without waiting (any thread, signal-safe it is not).
 * The reload runs on the reloader's thread; every request that arrives
 * while a reload runs folds into one more reload after it, whose result
 * goes to all of them.  `done` may be NULL.  0, or TH_ENOMEM / TH_ESTATE
 * (the reloader is stopping) when `done` will not be called. */
int th_reload_request(th_reloader *r, th_reload_done_fn done, void *ud);

/* A request that waits for its result (any thread but the reloader's). */
int th_reload_run(th_reloader *r, th_reload_result *res);

/* Counts a retry after an incomplete file (the watcher's).  Any thread. */
void th_reload_note_retry(th_reloader *r);

/* Copies the counters.  Any thread. */
void th_reload_get_stats(th_reloader *r, th_reload_stats *out);

/* The running generations, one call per plugin the reloader tracks, in
 * name order: name, generation, configured path, file loaded.  Strings
 * valid during the call.  Stops on nonzero and returns it.  Any thread. */
int th_reload_foreach(th_reloader *r,
                      int (*fn)(const char *name, uint64_t generation,
                                const char *path, const char *load_path,
                                void *ud),
                      void *ud);

/* The config file the reloader reads, and the folders of every plugin it
 * tracks plus the config's folder, each once (for watching).  *out is a
 * malloc()ed array of malloc()ed strings (th_reload_paths_free).  Any
 * thread. */
int th_reload_watch_paths(th_reloader *r, char ***out, size_t *n);
void th_reload_paths_free(char **v, size_t n);
/* True when a file named `base` in folder `dir` is one a reload reads
 * (a plugin file or the config). */
bool th_reload_is_watched(th_reloader *r, const char *dir, const char *base);

/* Blocks until every generation out of the registry whose last call ended
 * has been closed (the reloader's queue is empty), at most timeout_ms.
 * True when it is.  For tests and for clean shutdown. */
bool th_reload_quiesce(th_reloader *r, int64_t timeout_ms);

/* msgpack forms, for host.reload and host.stats (docs/reload.md):
 *   result: {ok, seq, error: {code, message} (when not ok), incomplete,
 *            config_changed, tools_changed, plugins: [{name, action,
 *            generation}], unchanged, prepare_ms, swap_ms, total_ms}
 *   stats:  {reloads, ok, failed, requests, retries, plugin_requests,
 *            plugin_reloads, plugin_waits, last_ok, last_error,
 *            last_at_ms, last_swap_ms, max_swap_ms, draining, closed,
 *            unloaded, still_mapped, plugins: {NAME: {generation, path,
 *            loaded_from}}}
 * 0, or nonzero when the packer failed. */
struct msgpack_packer;
int th_reload_result_pack(const th_reload_result *res,
                          struct msgpack_packer *pk);
int th_reload_stats_pack(th_reloader *r, struct msgpack_packer *pk);

/* The reloader's config path (borrowed; valid while the reloader lives). */
const char *th_reload_config_path(th_reloader *r);

/* ---- The host's reloader ------------------------------------------------------ */

struct th_host;
/* The reloader of a host opened with host.reload other than off (made by
 * th_host_open, freed by th_host_close), or NULL.  Any thread. */
th_reloader *th_host_reloader(struct th_host *h);

#endif
