/* th/clock.h - the host core's one clock (host/core/base/clock.c): every time
 * the core reads comes from here, so a test or a port changes one file. */
#ifndef TH_CLOCK_H
#define TH_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

/* Monotonic nanoseconds: durations, deadlines. */
int64_t th_now_ns(void);
/* Unix milliseconds (wall clock): what clients and logs are shown. */
int64_t th_wall_ms(void);
/* Wall-clock nanoseconds, for log timestamps. */
int64_t th_wall_ns(void);
/* The wall-clock time `ms` from now, for pthread_cond_timedwait() on a
 * condition variable with the default (CLOCK_REALTIME) clock. */
void th_deadline_rt(struct timespec *ts, int64_t ms);
/* A monotonic time in ns as a timespec, for condition variables set to
 * CLOCK_MONOTONIC. */
void th_timespec_mono(struct timespec *ts, int64_t mono_ns);

/* CLOCK_MONOTONIC nanoseconds from the TSC, within a few microseconds of
 * th_now_ns() (clock.c says when, and how): only for a call's own start
 * and end.  Not monotone across threads, and a thread's value may step
 * back by a few us: durations computed from it are clamped at 0.  Where
 * the TSC is not sound, or TOOLHOST_CLOCK=monotonic, it is th_now_ns().
 * Inline: its fast path is a dozen instructions (the rest, and the
 * fields' meaning, in clock.c). */
#if defined(__x86_64__) && !defined(TH_CLOCK_NO_TSC)
#define TH_CLOCK_TSC 1
typedef struct th_clock_base {
    uint64_t tsc;  /* a counter reading ... */
    int64_t ns;    /* ... and the monotonic time at it */
    uint64_t mult; /* ns per tick << 32 */
    uint64_t lim;  /* ticks the base is used for (0: never) */
    unsigned gen;  /* th_clock_gen when taken (0: none) */
} th_clock_base;
extern _Thread_local th_clock_base th_clock_tl;
extern _Atomic unsigned th_clock_gen;
int64_t th_fast_ns_slow(void);

static inline int64_t th_fast_ns(void)
{
    if (__builtin_expect(th_clock_tl.gen ==
                             atomic_load_explicit(&th_clock_gen, memory_order_relaxed),
                         1)) {
        uint64_t d = __builtin_ia32_rdtsc() - th_clock_tl.tsc;
        if (__builtin_expect(d < th_clock_tl.lim, 1))
            return th_clock_tl.ns + (int64_t)((d * th_clock_tl.mult) >> 32);
    }
    return th_fast_ns_slow();
}
#else
static inline int64_t th_fast_ns(void)
{
    return th_now_ns();
}
#endif

/* The first calibration's window and a thread's base's life. */
#define TH_CLOCK_WINDOW_NS 50000000LL
#define TH_CLOCK_REFRESH_NS 10000000LL
/* What th_fast_ns() reads: "tsc", "calibrating" (th_now_ns() until the
 * window has passed), "monotonic", or "unset" (before its first call). */
const char *th_clock_source(void);
/* Its ns per tick << 32 once calibrated, else 0. */
uint64_t th_clock_mult(void);
/* Start over (for tests): the calibration forgotten, every thread's base
 * dropped, TOOLHOST_CLOCK read again.  0 for the default window and life;
 * `mult` non-zero: the multiplier used instead of the measured one. */
void th_clock_reset(int64_t window_ns, int64_t refresh_ns, uint64_t mult);

#endif
