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

#endif
