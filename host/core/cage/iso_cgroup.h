/* iso_cgroup.h - a cgroup v2 per isolated worker (docs/isolation.md,
 * "Containment"): the host's own subtree, a leaf per worker, one-write
 * kill, removal.  Used by iso_host.c only.
 *
 * Layout: <the host's cgroup>/toolhost-<host pid>/<leaf>, the leaf named
 * by the caller (<plugin>-<generation>-<start>).  The subtree is made
 * once per process (th_iso_cg_setup) and removed at exit (atexit), with
 * whatever is still in it killed.
 *
 * Threads: th_iso_cg_setup() may be called from any thread (once); the
 * other functions touch only the leaf they are given and are safe from
 * any thread for different leaves.
 */
#ifndef TH_ISO_CGROUP_H
#define TH_ISO_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One worker's cgroup.  `dir` is owned (freed by th_iso_cg_destroy). */
typedef struct th_iso_cg {
    char *dir;    /* the leaf's path; NULL: none */
    bool removed; /* th_iso_cg_remove() emptied and removed it */
    int procs_fd; /* its cgroup.procs, open for writing until the child
                     moved itself in (-1 after th_iso_cg_placed) */
    int dir_fd;   /* the leaf itself (O_DIRECTORY), for clone3's
                     CLONE_INTO_CGROUP; -1 after th_iso_cg_placed */
} th_iso_cg;

/* Finds the cgroup2 mount and the host's cgroup, makes the host's
 * subtree and enables the memory and pids controllers for it where the
 * hierarchy has them; logs once what the workers get (a th/iso.h cage
 * alone does not).  Runs once per process
 * (later calls return the first answer).  true: workers may get cgroups;
 * false: `why` (at most `cap` bytes) says why not.
 *
 * $TOOLHOST_CGROUP: "off" turns cgroups off; a path names the cgroup2
 * mount to use instead of the one in /proc/self/mountinfo (tests point it
 * at a directory that does not exist to see the fallback). */
bool th_iso_cg_setup(char *why, size_t cap);

/* Writes `text` to DIR/FILE in one write(2) (a cgroup or /proc control
 * file); 0 or an errno. */
int th_iso_write_file(const char *dir, const char *file, const char *text);

/* Which limits the leaves get, as set up ("memory.max, pids.max",
 * "pids.max", "none").  Static storage. */
const char *th_iso_cg_limits(void);

/* Makes the leaf `name` (sanitized) under the host's subtree, sets
 * memory.max to `memory` (0: none) and pids.max to `processes` plus the
 * worker's own tasks (0: none) where those controllers are enabled, and
 * opens the leaf (for clone3) and its cgroup.procs (for a child of
 * clone() to write "0" to).  0, or an errno (`cg` then holds nothing). */
int th_iso_cg_make(const char *name, uint64_t memory, uint32_t processes,
                   th_iso_cg *cg);

/* The child is in: closes the two fds. */
void th_iso_cg_placed(th_iso_cg *cg);

/* Kills every process in the leaf and its sub-cgroups: cgroup.kill where
 * the kernel has it, else cgroup.freeze and SIGKILL to each pid listed.
 * Does not wait. */
void th_iso_cg_kill(const th_iso_cg *cg);

/* Kills, waits until cgroup.events says `populated 0` (polled, at most
 * `ms`), removes the leaf and any sub-cgroup made in it (`removed`).
 * 0, or -1 when it could not be emptied or removed in time (logged; the
 * host's exit tries again).  One thread (the worker's reader) calls it;
 * th_iso_cg_kill() and th_iso_cg_count() may run beside it from others
 * (after `removed` they touch nothing). */
int th_iso_cg_remove(th_iso_cg *cg, int64_t ms);

/* Frees `dir` (after th_iso_cg_remove, or when the leaf was never used). */
void th_iso_cg_destroy(th_iso_cg *cg);

/* Processes (not threads) in the leaf and its sub-cgroups now; -1 when
 * it cannot be read. */
int th_iso_cg_count(const th_iso_cg *cg);

/* true when `dir` exists and cgroup.events says populated 1. */
bool th_iso_cg_populated(const char *dir);

#endif
