/* th/mpwalk.h - walking msgpack bytes without unpacking them.
 *
 * msgpack-c's unpackers allocate for the element count a container header
 * announces before they read the elements, and report running out of their
 * fixed nesting stack (32 levels) as "out of memory".  Input from outside
 * (arguments, frames, JSON fronts) is therefore walked first: every count
 * must fit in the bytes that follow (each value takes at least one byte)
 * and the nesting must stay within a bound, so the unpacker is only ever
 * given what it can build.  Nothing here allocates; any thread.
 */
#ifndef TH_MPWALK_H
#define TH_MPWALK_H

#include <stddef.h>
#include <stdint.h>

#include "th/err.h"

/* The nesting the unpackers of msgpack-c accept (MSGPACK_EMBED_STACK_SIZE). */
#define TH_MP_MAX_DEPTH 32

/* The header of the value at p[0]: `hdr` bytes of type and length fields,
 * then `payload` bytes of data, then `kids` values (2 per map entry). */
typedef struct th_mp_head {
    size_t hdr;
    uint64_t payload;
    uint64_t kids;
    int container; /* an array or a map, even an empty one */
} th_mp_head;

/* The big-endian unsigned integer in the n bytes at p (n <= 8): every
 * length and number msgpack writes after its type byte. */
static inline uint64_t th_mp_be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Decodes the header of the value starting at p (n bytes available).
 * 1 when decoded, 0 when more bytes are needed, TH_EPROTO for the byte
 * 0xc1 (never used by msgpack). */
int th_mp_head_read(const uint8_t *p, size_t n, th_mp_head *h);

/* Checks that `data` starts with one complete msgpack value whose
 * containers announce no more elements than the bytes that follow can
 * hold and nest at most `max_depth` levels (every array or map, empty
 * ones included, is one level, as msgpack-c counts them).  0 with *value_len set, or
 * TH_EINVAL with a sentence in err ("truncated", "announces N elements
 * but only M bytes follow", "nested deeper than N levels", "byte 0xc1"). */
int th_mp_check(const uint8_t *data, size_t len, unsigned max_depth,
                size_t *value_len, th_error *err);

#endif
