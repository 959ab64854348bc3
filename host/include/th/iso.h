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

#endif
