/* fuzz/fuzz.h - shared by the libFuzzer targets and by the unit suite that
 * replays their corpora (tests/unit/test_fuzz_regressions.c).
 *
 * Each target fuzz/NAME.c defines `static int fuzz_NAME(const uint8_t *,
 * size_t)` and, unless TH_FUZZ_NO_ENTRY is defined, the libFuzzer entry
 * point calling it.  The unit suite defines TH_FUZZ_NO_ENTRY, includes
 * every target file and runs each fuzz_NAME over the files of
 * fuzz/corpus/NAME/, so every input ever committed there (seeds and past
 * crashes) is replayed by the normal suite under gcc, ASan and valgrind as
 * well as by `make fuzz-replay` under clang.  Every static name in a target
 * therefore carries the target's prefix.
 *
 * TH_FUZZ_CHECK(cond) states a property the target checks beyond "does not
 * crash" (a round trip, an error code set): in a fuzzer it aborts with the
 * condition, which libFuzzer records as a crash; the unit suite redefines
 * it as a CUnit assertion.
 */
#ifndef TH_FUZZ_H
#define TH_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef TH_FUZZ_CHECK
#define TH_FUZZ_CHECK(cond)                                                   \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__,       \
                    __LINE__, #cond);                                         \
            abort();                                                          \
        }                                                                     \
    } while (0)
#endif

/* Walks the first msgpack value in data[0..len) without allocating and
 * says whether msgpack-c can unpack it with bounded memory: every array or
 * map header announces no more elements than bytes remain (msgpack-c
 * allocates for the announced count up front, so 23 bytes announcing 2^31
 * entries make it ask for gigabytes).  Returns 1 when plausible, 0 when a
 * count is impossible, the value is cut short or nests deeper than 68;
 * *depth_out (may be NULL) gets the nesting depth. */
static inline int th_fuzz_msgpack_walk(const uint8_t *p, size_t len,
                                       int *depth_out)
{
    size_t pos = 0;
    uint64_t stack[70]; /* values left at each open level */
    int depth = 0, max_depth = 0;
    stack[0] = 1;
    for (;;) {
        while (depth >= 0 && stack[depth] == 0)
            depth--;
        if (depth < 0)
            break;
        if (pos >= len)
            return 0;
        uint8_t c = p[pos++];
        uint64_t skip = 0, kids = 0;
        size_t hdr = 0; /* length bytes that follow c */
        stack[depth]--;
        if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
            /* fixint, nil, bool */
        } else if (c >= 0x80 && c <= 0x8f) {
            kids = 2u * (c & 0x0f);
        } else if (c >= 0x90 && c <= 0x9f) {
            kids = c & 0x0f;
        } else if (c >= 0xa0 && c <= 0xbf) {
            skip = c & 0x1f;
        } else {
            switch (c) {
            case 0xc4: case 0xd9: hdr = 1; break;           /* bin8 str8 */
            case 0xc5: case 0xda: hdr = 2; break;           /* bin16 str16 */
            case 0xc6: case 0xdb: hdr = 4; break;           /* bin32 str32 */
            case 0xc7: hdr = 1; skip = 1; break;            /* ext8 + type */
            case 0xc8: hdr = 2; skip = 1; break;
            case 0xc9: hdr = 4; skip = 1; break;
            case 0xca: skip = 4; break;
            case 0xcb: skip = 8; break;
            case 0xcc: case 0xd0: skip = 1; break;
            case 0xcd: case 0xd1: skip = 2; break;
            case 0xce: case 0xd2: skip = 4; break;
            case 0xcf: case 0xd3: skip = 8; break;
            case 0xd4: skip = 2; break;                     /* fixext */
            case 0xd5: skip = 3; break;
            case 0xd6: skip = 5; break;
            case 0xd7: skip = 9; break;
            case 0xd8: skip = 17; break;
            case 0xdc: case 0xde: hdr = 2; break;           /* array/map16 */
            case 0xdd: case 0xdf: hdr = 4; break;           /* array/map32 */
            default: return 0;                              /* 0xc1 */
            }
        }
        if (hdr) {
            if (len - pos < hdr)
                return 0;
            uint64_t n = 0;
            for (size_t i = 0; i < hdr; i++)
                n = (n << 8) | p[pos + i];
            pos += hdr;
            if (c == 0xdc || c == 0xdd)
                kids = n;
            else if (c == 0xde || c == 0xdf)
                kids = 2 * n;
            else
                skip += n;
        }
        if (skip > len - pos)
            return 0;
        pos += (size_t)skip;
        if (kids > len - pos) /* each element takes a byte at least */
            return 0;
        int container = (c >= 0x80 && c <= 0x9f) || (c >= 0xdc && c <= 0xdf);
        if (kids > 0) {
            if (depth + 1 >= (int)(sizeof stack / sizeof stack[0]))
                return 0; /* deeper than anything we accept */
            stack[++depth] = kids;
            if (depth > max_depth)
                max_depth = depth;
        } else if (container && depth + 1 > max_depth) {
            max_depth = depth + 1; /* an empty one is a level too */
        }
    }
    if (depth_out)
        *depth_out = max_depth;
    return 1;
}

static inline int th_fuzz_msgpack_plausible(const uint8_t *p, size_t len)
{
    return th_fuzz_msgpack_walk(p, len, NULL);
}

/* Nesting depth of the first value (a scalar is 0, [1] is 1), or -1 when
 * it is not plausible (see above) or deeper than 68. */
static inline int th_fuzz_msgpack_depth(const uint8_t *p, size_t len)
{
    int d = 0;
    return th_fuzz_msgpack_walk(p, len, &d) ? d : -1;
}

/* Settling for targets whose host finishes work on its own threads after
 * an input's last answer (a call's record and reply freed on a manager
 * thread a moment later).  libFuzzer counts mallocs and frees during each
 * input and, when frees fall short, runs the input again and then a full
 * leak scan - tens of milliseconds, each input.  th_fuzz_settle_begin() at
 * the start of an input and th_fuzz_settle_end(ms) at its end wait (at most
 * ms, yielding) until this input's frees have caught up with its mallocs,
 * counted by allocator hooks of our own beside libFuzzer's.  A real leak
 * never catches up: the wait ends at ms and libFuzzer's check runs as
 * before.  No-ops outside a clang sanitizer build. */
#if defined(__clang__) && !defined(TH_FUZZ_NO_ENTRY)
#include <sanitizer/allocator_interface.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

static inline atomic_ulong *th_fuzz_alloc_counts(void)
{
    static atomic_ulong counts[2]; /* mallocs, frees */
    return counts;
}

static inline void th_fuzz_malloc_hook(const volatile void *p, size_t n)
{
    (void)p, (void)n;
    atomic_fetch_add_explicit(&th_fuzz_alloc_counts()[0], 1,
                              memory_order_relaxed);
}

static inline void th_fuzz_free_hook(const volatile void *p)
{
    (void)p;
    atomic_fetch_add_explicit(&th_fuzz_alloc_counts()[1], 1,
                              memory_order_relaxed);
}

typedef struct th_fuzz_settle {
    unsigned long mallocs, frees;
} th_fuzz_settle;

static inline th_fuzz_settle th_fuzz_settle_begin(void)
{
    static int installed;
    if (!installed) {
        installed = 1;
        __sanitizer_install_malloc_and_free_hooks(th_fuzz_malloc_hook,
                                                  th_fuzz_free_hook);
    }
    th_fuzz_settle s = {atomic_load(&th_fuzz_alloc_counts()[0]),
                        atomic_load(&th_fuzz_alloc_counts()[1])};
    return s;
}

static inline void th_fuzz_settle_end(th_fuzz_settle s, long ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        unsigned long m = atomic_load(&th_fuzz_alloc_counts()[0]) - s.mallocs;
        unsigned long f = atomic_load(&th_fuzz_alloc_counts()[1]) - s.frees;
        if (f >= m)
            return;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 +
                (t.tv_nsec - t0.tv_nsec) / 1000000 >= ms) {
            if (getenv("TH_FUZZ_SETTLE_DEBUG"))
                fprintf(stderr, "settle: %lu mallocs, %lu frees\n", m, f);
            return;
        }
        sched_yield();
    }
}
#else
typedef struct th_fuzz_settle {
    int unused;
} th_fuzz_settle;
static inline th_fuzz_settle th_fuzz_settle_begin(void)
{
    th_fuzz_settle s = {0};
    return s;
}
static inline void th_fuzz_settle_end(th_fuzz_settle s, long ms)
{
    (void)s, (void)ms;
}
#endif

#ifdef TH_FUZZ_NO_ENTRY
#define TH_FUZZ_ENTRY(fn)
#else
#define TH_FUZZ_ENTRY(fn)                                                     \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);             \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)              \
    {                                                                         \
        return fn(data, size);                                                \
    }
#endif

#endif
