/* dl_guard.h - private to host/core: dlclose() only when no thread can be
 * inside the object's code (dl_guard.c).
 *
 * A plugin may leave a thread of its own running after fini() (a detached
 * thread that finishes some work after complete()).  Unmapping its code
 * under it crashes the host.  The loader notes when dlopen() began (a
 * clock tick); at close, every thread started since that tick (a plugin
 * thread always is) is checked: its instruction pointer must not be in
 * the object's executable segments, and, reading its stack from the top
 * down, the first return address into the object or the host program
 * must be the host's.  A running thread is sampled with one
 * signal (SIGRTMIN+4); one that cannot be sampled counts as inside until
 * it blocks; one whose stack cannot be read (process_vm_readv refused:
 * EPERM, ENOSYS, EFAULT...) counts as inside until it is gone (ESRCH).
 * When a thread is
 * inside, the object stays mapped and a background thread (th-unload)
 * checks again every 50 ms and dlclose()s it once no thread is.
 * docs/reload.md, "Plugin threads after fini()".
 */
#ifndef TH_CORE_DL_GUARD_H
#define TH_CORE_DL_GUARD_H

#include <stdbool.h>

typedef struct th_dl_snap th_dl_snap;

/* Now, to tell the threads started later; NULL when out of memory (then
 * every thread counts as born later: more checking, never less). */
th_dl_snap *th_dl_snap_take(void);
/* Keeps `s` with handle `dl` (after a successful dlopen()); frees it when
 * out of memory.  th_dl_snap_free() for a failed dlopen(). */
void th_dl_snap_attach(void *dl, th_dl_snap *s);
void th_dl_snap_free(th_dl_snap *s);

/* dlclose(dl) now when no thread born after dlopen() is inside its code,
 * else later (logged; `name` names the plugin in the log).  True: closed
 * now; false: the dlclose() waits (or the object stays mapped). */
bool th_dl_close_guarded(void *dl, const char *name);

/* Objects whose dlclose() is deferred now (tests, stats). */
unsigned th_dl_deferred(void);

/* Passes th-unload ended so far, each a fresh look at every deferred
 * object (for tests: an object still deferred after a pass that began
 * after its close was looked at again and kept, an event to wait for
 * instead of a sleep). */
unsigned th_dl_passes(void);

#endif
