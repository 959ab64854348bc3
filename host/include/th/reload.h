/* th/reload.h - hot reload: plugins and config swapped into a running host
 * without dropping a call.
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
 *   the watcher (reload_watch.c)  triggers on a libuv loop: file events on
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

/* ---- Private copies ---------------------------------------------------- */

/* The identity of a plugin file: an unchanged entry whose file has the
 * same identity is not reloaded.  Times in nanoseconds (as precise as the
 * file system keeps them). */
typedef struct th_file_id {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
} th_file_id;

bool th_file_id_equal(const th_file_id *a, const th_file_id *b);
/* stat()s `path`; 0 or TH_EIO. */
int th_file_id_of(const char *path, th_file_id *out, th_error *err);

typedef struct th_copydir th_copydir;

/* Creates the private folder: with `state_dir` (created 0700 when
 * missing; refused unless it is a folder of ours that only we may write),
 * a fresh "run-PID-XXXXXX" folder inside it, after removing the run-*
 * folders of processes that no longer exist; without it, a mkdtemp()
 * folder "toolhost-XXXXXX" under $TMPDIR (or /tmp).  Mode 0700.  0,
 * TH_EIO or TH_ENOMEM.  Load class (one thread at a time). */
int th_copydir_open(const char *state_dir, th_copydir **out, th_error *err);
/* Removes every copy left and the folder itself (the run-* folder, never
 * state_dir).  NULL is ok. */
void th_copydir_close(th_copydir *d);
const char *th_copydir_path(const th_copydir *d);

/* Copies `src` to a new unique file in the folder ("NAME-gGEN-SEQ.so",
 * mode 0500): written under a temporary name, fsync()ed, then renamed.
 * *id_out is the identity of `src` as read.  *path_out (malloc()ed) is the
 * copy.  Fails when `src` changed while it
 * was copied (TH_ESTATE: still being written, try again later),
 * TH_EIO otherwise.
 * Any thread, but not concurrently for the same `d`. */
int th_copydir_copy(th_copydir *d, const char *src, const char *name,
                    uint64_t generation, char **path_out, th_file_id *id_out,
                    th_error *err);
/* The same from a file already open (read with pread(): the offset is
 * kept; the fd stays the caller's).  `src` names it in messages.  The
 * reloader copies from the fd th_plugin_file_open() checked, so the copy
 * holds the bytes of the file that passed, whatever the path names by
 * now. */
int th_copydir_copy_fd(th_copydir *d, int fd, const char *src,
                       const char *name, uint64_t generation, char **path_out,
                       th_file_id *id_out, th_error *err);

/* For tests only: when set, called by the reloader between the check of a
 * plugin file and its copy (with the configured path), to change what the
 * path names in that window. */
extern void (*th_reload_test_after_check)(const char *path);
/* Removes one copy (a file inside the folder; anything else is refused
 * and logged). */
void th_copydir_remove(th_copydir *d, const char *copy);

/* True when the two files hold the same bytes. */
bool th_file_same_content(const char *a, const char *b);


/* After dlclose(): whether an object loaded from `path` is still mapped
 * (dlopen(RTLD_NOLOAD)).  Needs the file to still exist. */
bool th_dl_still_loaded(const char *path);

/* ---- The reloader ---------------------------------------------------------- */

/* What a reload drives: the running set.  Every callback runs on the
 * thread doing the reload (the reloader's thread, or the caller of
 * th_reload_now()), with no reloader lock held. */
typedef struct th_reload_target {
    th_registry *reg;          /* the running registry (borrowed) */
    /* Names that count as existing tools besides the registry's (built-in
     * tools that are not in the registry); may be NULL. */
    bool (*reserved)(void *ud, const char *name);
    /* Installs `cfg` for new calls (toolsets, limits, host settings); the
     * callee owns it from then on and keeps it alive while the reloader
     * lives (the reloader keeps reading it).  Called after the registry
     * changed, only when the config's content changed.  NULL: the
     * reloader keeps the configs itself (freed by th_reloader_free). */
    void (*swap_config)(void *ud, th_config *cfg);
    /* The tool list changed (generations swapped, plugins added or
     * removed, config changed): tell the sessions.  May be NULL. */
    void (*tools_changed)(void *ud);
    void *ud;
    /* Appended: a last check of the new config before anything changes
     * (e.g. what the running host cannot take without a restart); 0, or a
     * TH_E* code with err, which fails the reload.  May be NULL. */
    int (*check_config)(void *ud, const th_config *cfg, th_error *err);
} th_reload_target;

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
} th_reload_stats;

/* Creates a reloader for a running set built from `cfg` (borrowed: the
 * caller, or swap_config's owner, keeps it alive while the reloader uses
 * it), with its private copy folder (cfg->host.state_dir) and its thread.
 * Plugins already in the registry under a name of cfg->plugins are
 * adopted: their file identity is taken now and their last unref is routed
 * to the reloader's thread (call it before the plugins serve calls).  0 or
 * TH_E* with err. */
int th_reloader_new(const th_reload_target *target, const th_config *cfg,
                    th_reloader **out, th_error *err);

/* Stops the thread after the work queued (closing drained generations),
 * removes the copy folder and frees.  Call it after the registry is freed
 * and every call has ended: generations released later would have nowhere
 * to go.  NULL is ok. */
void th_reloader_free(th_reloader *r);

/* Loads, checks and initialises the plugin of config entry `pc` of `cfg`
 * from a private copy (generation 1), ready for th_registry_add(): what
 * the host uses at start-up so that even the first generation never runs
 * from a file a rebuild may rewrite.  *out holds one reference.  Load
 * class: not concurrently with a reload. */
int th_reloader_load(th_reloader *r, const th_config *cfg,
                     const th_plugin_cfg *pc, th_plugin **out,
                     th_error *err);

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
 *   stats:  {reloads, ok, failed, requests, retries, last_ok, last_error,
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

/* Host glue (reload_host.c), called by host.c only.  th_reload_host_open:
 * after the registry exists and before plugins load, makes the host's
 * reloader unless host.reload is off.  th_reload_host_load: loads, checks
 * and initialises one configured plugin (from a private copy when the host
 * has a reloader), *out holding one reference for th_registry_add().
 * th_reload_host_close: after the registry is freed and every call ended,
 * closes what drained, frees the reloader and the configs reloads
 * replaced. */
int th_reload_host_open(struct th_host *h, th_error *err);
int th_reload_host_load(struct th_host *h, const th_plugin_cfg *pc,
                        th_plugin **out, th_error *err);
void th_reload_host_close(struct th_host *h);

/* ---- The watcher (libuv) ------------------------------------------------------ */

struct uv_loop_s;
typedef struct th_reload_watch th_reload_watch;

typedef struct th_reload_watch_opts {
    th_reload_mode mode;        /* WATCH: files + SIGHUP; SIGNAL: SIGHUP
                                   only; OFF: nothing (start succeeds) */
    uint64_t debounce_ms;       /* quiet time after the last file event */
    unsigned max_retries;       /* retries of an incomplete file; 0: 10 */
    bool no_sighup;             /* do not install the SIGHUP handler */
    /* Called on the loop's thread after every reload the watcher
     * triggered (file events, SIGHUP, retries); may be NULL.  A result
     * with `incomplete` set that will be retried is not reported until the
     * retry is over. */
    void (*on_result)(const th_reload_result *res, void *ud);
    void *ud;
} th_reload_watch_opts;

/* Starts watching on `loop` (call on the loop's thread).  The reloader
 * must outlive the watcher.  0 or TH_E* with err. */
int th_reload_watch_start(th_reloader *r, struct uv_loop_s *loop,
                          const th_reload_watch_opts *opts,
                          th_reload_watch **out, th_error *err);
/* Stops and closes every handle (loop thread); the memory is freed once
 * the loop has run the close callbacks (uv_run after this, as for any
 * handle).  A reload running on the reloader's thread is waited for. */
void th_reload_watch_stop(th_reload_watch *w);
/* A reload as SIGHUP would trigger it (loop thread); the result comes
 * through opts->on_result. */
void th_reload_watch_trigger(th_reload_watch *w);
/* A reload whose result goes to fn(res, ud) on the loop's thread (the RPC
 * method): not retried, not passed to opts->on_result.  Call on the loop
 * thread.  0, or TH_ENOMEM / TH_ESTATE (stopping: fn is not called). */
int th_reload_watch_request(th_reload_watch *w,
                            void (*fn)(const th_reload_result *res, void *ud),
                            void *ud);

#endif
