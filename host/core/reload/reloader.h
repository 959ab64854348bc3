/* reloader.h - private to host/core: the reloader's insides.  Private
 * copies of plugin files (reload_copy.c), the target a reloader drives and
 * its life (reload.c), and the host glue (reload_host.c, called by host.c
 * only).  docs/reload.md is the picture in words; th/reload.h is what the
 * fronts see.
 */
#ifndef TH_CORE_RELOADER_H
#define TH_CORE_RELOADER_H

#include "th/reload.h"

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
/* The same; with defer_sweep, the removal of stale folders waits for
 * th_copydir_sweep() (the reloader runs it on its own thread, so a host
 * that starts after a crash, or beside hundreds of stale folders, does not
 * wait for it).  th_copydir_sweep() does nothing the second time, or when
 * the open swept already. */
int th_copydir_open_ex(const char *state_dir, bool defer_sweep,
                       th_copydir **out, th_error *err);
void th_copydir_sweep(th_copydir *d);
/* Removes every copy left and the folder itself (the run-* folder, never
 * state_dir).  NULL is ok. */
void th_copydir_close(th_copydir *d);
const char *th_copydir_path(const th_copydir *d);

/* Copies `src` to a new unique file in the folder ("NAME-gGEN-SEQ.so",
 * mode 0500, created O_EXCL under that name): a FICLONE where the file
 * system can, else copy_file_range(), else read/write; not fsync()ed (it
 * lives no longer than the process; reload_copy.c says why).
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

/* Whether the folder's path passed the loader's folder checks when it was
 * made (th_load_opts.private_copy may then be set for its copies). */
bool th_copydir_checked(const th_copydir *d);
/* How many copies `d` made by FICLONE and by copying bytes. */
void th_copydir_counts(th_copydir *d, unsigned long *cloned,
                       unsigned long *copied);

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
/* Stops the reloader's thread only (its generations stay as they are):
 * for a host abandoned at close with calls still running (host.c). */
void th_reloader_stop_thread(th_reloader *r);
void th_reloader_free(th_reloader *r);

/* Loads, checks and initialises the plugin of config entry `pc` of `cfg`
 * from a private copy (generation 1), ready for th_registry_add(): what
 * the host uses at start-up so that even the first generation never runs
 * from a file a rebuild may rewrite.  *out holds one reference.  Load
 * class: not concurrently with a reload. */
int th_reloader_load(th_reloader *r, const th_config *cfg,
                     const th_plugin_cfg *pc, th_plugin **out,
                     th_error *err);

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

#endif
