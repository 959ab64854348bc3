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
 * negative TH_E code.  The same bytes are also taken as a stream of
 * frames through th_iso_take() under a small cap (fuzz_iso_wire_stream:
 * no frame past the cap is ever handed out).
 *
 * (Fixed, in fuzz/corpus/iso_wire/oom_huge_count: a frame whose array
 * header announced billions of elements made msgpack-c allocate for them
 * before reading one (libFuzzer: out-of-memory); frames are now walked
 * with th_mp_check first, and a worker that sends such a frame is
 * killed.)
 */
#include "fuzz.h"
#include "iso/iso_wire.h"

/* The same bytes as the stream a worker sends (after a first byte that
 * sets the cap, 1 to 4081, so that both sides of it are reached), put in
 * the receive buffer in pieces of 1 to 64 bytes as reads would, each
 * followed by th_iso_take() until it finds no whole frame: every frame
 * taken lies in the buffer and is at most the cap; a refusal names a
 * length past it, and ends the stream (the host kills such a worker). */
static void fuzz_iso_wire_stream(const uint8_t *data, size_t size)
{
    if (size < 2)
        return;
    th_iso_rx rx = {.max = (size_t)data[0] * 16 + 1};
    for (size_t at = 1; at < size;) {
        size_t k = (size_t)(data[at] & 0x3f) + 1;
        if (k > size - at)
            k = size - at;
        if (th_buf_append(&rx.b, data + at, k) != 0)
            break;
        at += k;
        const uint8_t *f;
        size_t n;
        int t;
        while ((t = th_iso_take(&rx, &f, &n)) == 1)
            TH_FUZZ_CHECK(n <= rx.max && f >= rx.b.data &&
                          f + n <= rx.b.data + rx.b.len);
        if (t < 0) {
            TH_FUZZ_CHECK(rx.refused > rx.max);
            break;
        }
        TH_FUZZ_CHECK(t == 0 && rx.off <= rx.b.len);
    }
    th_iso_rx_destroy(&rx);
}

static int fuzz_iso_wire(const uint8_t *data, size_t size)
{
    int rc = th_iso_fuzz_frame(data, size);
    TH_FUZZ_CHECK(rc <= 0);
    fuzz_iso_wire_stream(data, size);
    return 0;
}

#ifndef TH_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_iso_wire(data, size);
}
#endif
