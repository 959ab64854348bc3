/* th/clock.h - the host core's one clock (host/core/clock.c): every time
 * the core reads comes from here, so a test or a port changes one file. */
#ifndef TH_CLOCK_H
#define TH_CLOCK_H

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
 * the TSC is not sound, or TOOLHOST_CLOCK=monotonic, it is th_now_ns(). */
int64_t th_fast_ns(void);

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
