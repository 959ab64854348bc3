/* th/iso.h - process isolation of plugins (docs/isolation.md): the parts
 * the fronts use.  A plugin entry with `isolation: process` is served by
 * worker processes (`toolhost worker`, the host's own binary) that load
 * the .so and speak msgpack with the host over a socketpair; the host
 * side is a proxy plugin, so the registry, validation, permissions and
 * the manager treat it like any other plugin.
 */
#ifndef TH_ISO_H
#define TH_ISO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct msgpack_packer;

/* Loads the workers' seccomp filter (an allow-list, iso_worker.c;
 * docs/security.md, "The worker's seccomp filter") into the calling
 * process, after PR_SET_NO_NEW_PRIVS; `network` false: no socket but
 * AF_UNIX.  0, or nonzero when libseccomp could not build or load it.
 * Also what `toolhost check` puts on the child that loads a plugin. */
int th_iso_filter_load(bool network);

/* Before th_iso_filter_load(): the loaded filter also refuses (EPERM) to
 * signal, or open a pidfd of, `init` and `host` (when > 1) and their
 * process groups, and kill(-1); pidfd_send_signal and tkill are refused
 * whole (a pidfd may be an open /proc/PID, a tid any thread's).  For a worker under a subreaper init
 * (no PID namespace), whose plugin runs as the init's and maybe the
 * host's user. */
void th_iso_filter_guard(pid_t init, pid_t host);

/* The hidden `toolhost worker` command: never run by hand.  Expects the
 * fds the host set up (socket 3, plugin file 4, note pipe 5); returns the
 * process's exit status. */
int th_iso_worker_main(int argc, char **argv);

/* The program started as a worker; default the host's own binary (the
 * path of /proc/self/exe, or the link when that file was replaced).  For hosts linked into another program (tests, benches).
 * Call before any isolated plugin loads; `path` is copied. */
void th_iso_set_worker_exe(const char *path);

/* Packs the isolated plugins' state for host.stats: an array of maps
 * {containment, processes, plugin, generation, healthy, workers, live,
 * restarts, crashes, last_crash, unhealthy_reason}, one per generation
 * still open.  containment: "cgroup", "pid namespace", "user namespace",
 * "subreaper" or "subreaper (no pidfd)" (docs/isolation.md,
 * "Containment"); processes: the processes in the live workers' cgroups
 * (nil without cgroups).  0 or nonzero when packing failed.  Any
 * thread. */
int th_iso_stats_pack(struct msgpack_packer *pk);

/* How many isolated generations are open and worker processes alive
 * (for tests and stats). */
void th_iso_counts(unsigned *pools, unsigned *live_workers);

/* ---- Cages: a cgroup for a process tree the host starts itself ----
 *
 * The isolated workers' cgroups (docs/isolation.md, "Containment") for
 * other code of the host that runs plugin code in a child: `toolhost
 * check`.  A cage is a leaf of the host's cgroup subtree
 * (<host cgroup>/toolhost-<pid>/<name>), made where the host may make one
 * (root, or a delegated subtree); a child that enters it, and everything
 * it starts whatever session or group it makes, is counted and killed
 * there.  The subtree is removed at the process's exit.
 *
 * Order: open, fork, enter (in the child), placed (in the parent),
 * kill_wait, close.  Any thread; one cage is used by one thread. */
typedef struct th_iso_cage th_iso_cage;

/* Makes the cage `name` (sanitized) with memory.max `memory` bytes where
 * the memory controller is enabled (0: none).  NULL when the host may not
 * make one (cgroups off, no cgroup2 mount, not root and no delegated
 * subtree, ...): `why` (at most `cap` bytes) says why.  Logs nothing:
 * the caller says which containment applied. */
th_iso_cage *th_iso_cage_open(const char *name, uint64_t memory, char *why,
                              size_t cap);

/* In a child after fork(), before it runs anything else: moves the
 * calling process into the cage (one write(2) to an fd opened by
 * th_iso_cage_open: async-signal-safe).  0, or an errno (the child is
 * then where it was); EPERM in the process that opened the cage. */
int th_iso_cage_enter(const th_iso_cage *c);

/* In the parent once the child is forked (entered or not): closes the
 * fds th_iso_cage_enter() needed. */
void th_iso_cage_placed(th_iso_cage *c);

/* The cage's cgroup directory (owned by the cage), or NULL. */
const char *th_iso_cage_dir(const th_iso_cage *c);

/* Kills every process in the cage and its sub-cgroups (cgroup.kill, else
 * cgroup.freeze and SIGKILL to each), waits until it is empty (at most
 * `ms`) and removes it.  0, or -1 when it could not be emptied or removed
 * in time (logged).  Reaps nothing: the caller reaps its own children. */
int th_iso_cage_kill_wait(th_iso_cage *c, int64_t ms);

/* Frees the cage, removing it first when th_iso_cage_kill_wait() did not
 * (1 s).  NULL is a no-op. */
void th_iso_cage_close(th_iso_cage *c);

/* A forked child's copy of the cage, once it has entered it: frees the
 * memory and the fds of this process's copy and touches nothing else (the
 * cgroup is its parent's to kill and remove).  NULL is a no-op. */
void th_iso_cage_forget(th_iso_cage *c);

/* ---- The cages of the plugin ABI (1.3, toolhost_host_api.cage_*) ----
 *
 * iso_cage_api.c hands the cages above to plugins for the trees they
 * start themselves (the exec plugin's commands). */

struct toolhost_host_api;

/* Sets the cage members of a host api table (th_host_api_fill). */
void th_iso_cage_api_fill(struct toolhost_host_api *api);

/* From now on this process gives plugins no cage: cage_open answers NULL
 * with `why` (static storage).  For processes whose own cgroup already
 * holds what a plugin starts: an isolated worker, `toolhost check`'s
 * child.  Call before any plugin code runs. */
void th_iso_cage_api_off(const char *why);

#endif
