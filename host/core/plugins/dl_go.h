/* dl_go.h - private to host/core: the one Go runtime a process may hold
 * (dl_go.c).
 *
 * A shared object built by Go (-buildmode=c-shared) carries the whole Go
 * runtime, which starts threads and installs signal handlers from its
 * constructor.  Two of them in one process are two runtimes fighting
 * over the same signals and thread state: the process crashes or hangs.
 * And a Go runtime cannot stop: dlclose() of a Go object unmaps code its
 * threads still run.  So the loader (loader.c):
 *   - tells a Go object before dlopen() (th_dl_go_fd), from the file;
 *   - lets the first one in (th_dl_go_claim) and opens it with
 *     RTLD_NODELETE, so it is never unmapped; the same file again is the
 *     same object (the dynamic linker knows it by device and inode);
 *   - refuses any other Go object for the life of the process, naming
 *     the one that holds the runtime: a second Go plugin, or a new build
 *     of the same plugin (a hot reload), with what to do instead
 *     (`isolation: process`: each worker is a process of its own);
 *   - closes a Go plugin without the unload guard (dl_guard.h): the
 *     runtime's threads live in its code for good, and nothing is
 *     unmapped anyway.
 * sdk/go/README.md says it for plugin authors.
 */
#ifndef TH_CORE_DL_GO_H
#define TH_CORE_DL_GO_H

#include <stdbool.h>
#include <stdint.h>

#include "th/err.h"

/* Whether the ELF file open at `fd` holds a Go runtime: it has a note
 * "Go" of type 4 (the Go build id, which the Go linker writes into every
 * object, in a PT_NOTE segment that stripping keeps) or a section named
 * .go.buildinfo.  Reads with pread() (the offset is kept); false for a
 * file that cannot be read or is not a 64-bit ELF.  Any thread. */
bool th_dl_go_fd(int fd);

/* Before dlopen() of the Go object open at `fd` (`path` as configured,
 * `name` the plugin's config name or NULL, `generation` its generation):
 * 0 when this process holds no Go runtime yet (the object takes it:
 * *fresh is true) or holds this very file's (*fresh false); else
 * TH_ELOAD with one of
 *   PATH: refused: a reload of the in-process Go plugin 'NAME' would
 *     load a second Go runtime ... ('isolation: process' ...)
 *   PATH: refused: it holds a Go runtime and this process already runs
 *     the one of OTHER (plugin 'N') ... ('isolation: process' ...)
 * Load class (serialized inside). */
int th_dl_go_claim(int fd, const char *path, const char *name,
                   uint64_t generation, bool *fresh, th_error *err);
/* dlopen() of a fresh claim failed: nothing runs, the claim goes. */
void th_dl_go_unclaim(void);
/* dlopen() of a claimed object succeeded: its handle (for th_dl_go_is). */
void th_dl_go_opened(void *dl);
/* Whether `dl` is the handle of the process's Go object.  Any thread. */
bool th_dl_go_is(const void *dl);

#endif
