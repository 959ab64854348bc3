/* th/mpzone.h - a msgpack-c zone per thread, reused.
 *
 * msgpack-c unpacks into a zone; msgpack_unpack_next() makes one per call
 * (a malloc of its first chunk, a free at the end).  Code that unpacks on
 * every call (argument validation, a front turning a result's meta into
 * JSON) takes this thread's zone instead: cleared after use, its first
 * chunk kept.  Any thread; a nested use (the thread's zone is taken) gets
 * a zone of its own. */
#ifndef TH_MPZONE_H
#define TH_MPZONE_H

#include <stdbool.h>

#include <msgpack.h>

/* A cleared zone for this thread (*cached = true), or a new one when the
 * thread's zone is in use or cannot be kept.  NULL when out of memory.
 * Give it back with th_mp_zone_put (what was unpacked into it goes). */
msgpack_zone *th_mp_zone_get(bool *cached);
void th_mp_zone_put(msgpack_zone *z, bool cached);

#endif
