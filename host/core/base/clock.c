/* clock.c - the core's one clock: monotonic time for durations and
 * deadlines, wall time for what people read.  Nothing else in host/core
 * calls clock_gettime().
 *
 * th_fast_ns(), the calls' own clock (the calibrated TSC), is in
 * clock_tsc.c: a file of its own because it logs, and the log reads
 * this clock. */
#include <time.h>

#include "th/clock.h"

int64_t th_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t th_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t th_wall_ms(void)
{
    return th_wall_ns() / 1000000;
}

void th_deadline_rt(struct timespec *ts, int64_t ms)
{
    int64_t at = th_wall_ns() + (ms > 0 ? ms : 0) * 1000000;
    ts->tv_sec = (time_t)(at / 1000000000);
    ts->tv_nsec = (long)(at % 1000000000);
}

void th_timespec_mono(struct timespec *ts, int64_t mono_ns)
{
    ts->tv_sec = (time_t)(mono_ns / 1000000000);
    ts->tv_nsec = (long)(mono_ns % 1000000000);
}
