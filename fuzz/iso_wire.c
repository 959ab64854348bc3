/* fuzz/iso_wire.c - libFuzzer target: what an isolated plugin's worker
 * process sends the host (host/core/iso/iso_host.c).  A worker runs code that
 * is not trusted at all, so every frame it sends is outside input: the
 * HELLO descriptor (names, parameters, enum lists, defaults, flags), and
 * WRITE, META, PROGRESS, DONE, LOG, READY, FAIL and ANSWER messages.
 *
 * Input: one frame body (the msgpack array after the length).  It is
 * taken both as a HELLO (the descriptor is built and put through the
 * host's plugin checks, th_plugin_builtin) and as a message routed to a
 * worker with one waiting call.
 * Properties beyond "no crash, no leak, no UB": the result is 0 or a
 * negative TH_E code.
 *
 * (Fixed, in fuzz/corpus/iso_wire/oom_huge_count: a frame whose array
 * header announced billions of elements made msgpack-c allocate for them
 * before reading one (libFuzzer: out-of-memory); frames are now walked
 * with th_mp_check first, and a worker that sends such a frame is
 * killed.)
 */
#include "fuzz.h"
#include "iso/iso_wire.h"

static int fuzz_iso_wire(const uint8_t *data, size_t size)
{
    int rc = th_iso_fuzz_frame(data, size);
    TH_FUZZ_CHECK(rc <= 0);
    return 0;
}

#ifndef TH_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_iso_wire(data, size);
}
#endif
