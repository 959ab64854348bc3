/* clock_tsc.c - the calls' own clock (th/clock.h).
 *
 * th_fast_ns(): CLOCK_MONOTONIC nanoseconds from the CPU's time-stamp
 * counter, for the two reads every call makes (its start, call_start.c,
 * and its end, stats.c).  rdtsc costs ~10 ns where clock_gettime() costs
 * ~24 ns (the vDSO reads the same counter, then scales it under a
 * seqlock).  Everything else (timers, waits, the deadline thread) keeps
 * th_now_ns().
 *
 * When the TSC is used: x86-64, an invariant TSC (cpuid 0x80000007 EDX
 * bit 8: constant rate, runs in every C-state), the kernel's current
 * clocksource is "tsc" (the kernel's own verdict that the CPUs' counters
 * are synchronized; read from sysfs once, when calibrating), and the
 * environment does not say TOOLHOST_CLOCK=monotonic.  Otherwise (another
 * architecture, a VM on another clocksource, sysfs unreadable)
 * th_fast_ns() is th_now_ns().
 *
 * Calibration costs start-up nothing: the first th_fast_ns() takes one
 * (tsc, monotonic) pair and returns th_now_ns(), and so does every call
 * until TH_CLOCK_WINDOW_NS (50 ms) of monotonic time has passed since it;
 * then ns per tick = (mono - mono0) / (tsc - tsc0), as a 32.32 fixed-point
 * multiplier (a pair is good to ~20 ns, so 50 ms gives < 1 ppm).  The
 * multiplier is measured again over a window twice as long each time
 * (100 ms, 200 ms, ... after the first pair), which follows NTP's average
 * rate.  One global record: the mode and the multiplier are atomics, the
 * calibration and its refinements run under a mutex taken by trylock (a
 * thread that finds it busy returns th_now_ns()).
 *
 * Per thread: a base (tsc, mono) taken with clock_gettime() between two
 * rdtsc (the narrowest of up to 3 tries), the multiplier copied, and a
 * tick limit of TH_CLOCK_REFRESH_NS (10 ms).  The fast path is
 *     base_ns + ((rdtsc() - base_tsc) * mult >> 32)
 * while fewer ticks than the limit have passed (and the global generation
 * is the one the base was taken under); past it, or when the counter
 * reads below the base (a CPU whose TSC is a little behind), the base is
 * taken again.  So the error against CLOCK_MONOTONIC is the pair's (<
 * 1 us) plus the multiplier's over 10 ms (NTP slews monotonic by at most
 * 500 ppm: < 5 us; in practice ~10 ns): a few microseconds at most.
 * Consequences, where the values are used:
 * - a thread's value may step back by that much when its base is taken
 *   again, and a call ended on another thread than the one it started on
 *   sees the two bases' difference: a duration computed from th_fast_ns()
 *   must be clamped at 0 (stats.c's histogram and sum are);
 * - a deadline computed from th_fast_ns() and compared with th_now_ns()
 *   (manager.c: c->start_ns + timeout) is off by microseconds, not more.
 * A guard: when a thread takes its base again, the counter's prediction
 * of the monotonic time is compared with clock_gettime(); more than
 * 200 us + 0.1% of the time since the last base apart (the TSC stopped,
 * jumped, or runs at another rate than measured; checked twice, with a
 * fresh pair the second time) and the process goes back to
 * clock_gettime() for good, with a warning in the log.
 *
 * The fast path is inline (th/clock.h: a dozen instructions); the rest is
 * th_fast_ns_slow(), kept out of line.  rdtsc is not fenced: it may be
 * read a few dozen cycles early, nothing next to microseconds, and an
 * lfence before it cost the whole gain.
 *
 * Measured (AMD EPYC VM, TSC at 2.6 GHz, kernel clocksource tsc): a read
 * 9.6-10.3 ns against 24 for clock_gettime(); 1-112 ns off it (0.8 us
 * under TSan); the first read 20 us once (cpuid in a VM), the calibrating
 * one ~70 us once (the sysfs read).  Once calibrated it takes ~30 ns off
 * the inline echo call's p50 (231 -> 200 ns) and 30-40 ns off
 * th_call_sync's (bench/README.md, "Tenth pass, the clock" and "the
 * bench's own window": measured inside the 50 ms calibration, the inline
 * row had shown 0-10 ns).
 *
 * th_clock_reset() starts over (tests: thresholds, a forced multiplier). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "th/clock.h"
#include "th/log.h"

#ifdef TH_CLOCK_TSC /* th/clock.h: x86-64 */
#include <cpuid.h>
#include <x86intrin.h>
#endif

#ifndef TH_CLOCK_TSC /* th_fast_ns() is th_now_ns() (th/clock.h) */

const char *th_clock_source(void)
{
    return "monotonic";
}

uint64_t th_clock_mult(void)
{
    return 0;
}

void th_clock_reset(int64_t window_ns, int64_t refresh_ns, uint64_t mult)
{
    (void)window_ns;
    (void)refresh_ns;
    (void)mult;
}

#else

enum {
    CK_UNSET,       /* nothing decided yet (or reset) */
    CK_CHECKING,    /* one thread is deciding */
    CK_PLAIN,       /* th_now_ns(): not eligible, forced, or given up */
    CK_CALIBRATING, /* first pair taken, th_now_ns() until the window */
    CK_TSC          /* the multiplier is published */
};

static _Atomic int g_mode;
static _Atomic uint64_t g_tsc0;    /* the first pair */
static _Atomic int64_t g_ns0;
static _Atomic uint64_t g_mult;       /* ns per tick, 32.32 fixed point */
static _Atomic int64_t g_next_refine; /* monotonic ns of the next one */
static _Atomic int64_t g_window_ns = TH_CLOCK_WINDOW_NS;
static _Atomic int64_t g_refresh_ns = TH_CLOCK_REFRESH_NS;
static _Atomic uint64_t g_forced_mult; /* tests: 0, or the multiplier to use */
static pthread_mutex_t g_cal_mu = PTHREAD_MUTEX_INITIALIZER;

const char *th_clock_source(void)
{
    switch (atomic_load_explicit(&g_mode, memory_order_acquire)) {
    case CK_TSC:
        return "tsc";
    case CK_CALIBRATING:
        return "calibrating";
    case CK_PLAIN:
        return "monotonic";
    default:
        return "unset";
    }
}

uint64_t th_clock_mult(void)
{
    return atomic_load_explicit(&g_mode, memory_order_acquire) == CK_TSC
               ? atomic_load_explicit(&g_mult, memory_order_relaxed)
               : 0;
}

/* A thread's base (th/clock.h), and the generation it is valid for: a
 * reset or giving up adds 1, so every thread takes its base again. */
_Thread_local th_clock_base th_clock_tl;
_Atomic unsigned th_clock_gen = 1;

/* One (tsc, monotonic) pair: clock_gettime() between two counter reads,
 * the narrowest of up to 3 tries (a try preempted in between is wide). */
static void take_pair(uint64_t *tsc, int64_t *ns)
{
    uint64_t best_w = UINT64_MAX;
    for (int i = 0; i < 3; i++) {
        uint64_t a = __rdtsc();
        int64_t n = th_now_ns();
        uint64_t b = __rdtsc();
        uint64_t w = b - a;
        if (w < best_w) {
            best_w = w;
            *tsc = a + w / 2;
            *ns = n;
        }
        if (w < 4000) /* ~1 us at 4 GHz; a clock_gettime() is ~100 ticks */
            break;
    }
}

/* ns per tick << 32 between two pairs; 0 when the counter did not advance
 * or the rate is not a TSC's (50 MHz .. 20 GHz). */
static uint64_t mult_of(uint64_t tsc0, int64_t ns0, uint64_t tsc1, int64_t ns1)
{
    if (tsc1 <= tsc0 || ns1 <= ns0)
        return 0;
    unsigned __int128 m = ((unsigned __int128)(uint64_t)(ns1 - ns0) << 32) / (tsc1 - tsc0);
    if (m < ((unsigned __int128)1 << 32) / 20 || m > ((unsigned __int128)20 << 32))
        return 0;
    return (uint64_t)m;
}

static int invariant_tsc(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
        return 0;
    if (!__get_cpuid(0x80000007u, &a, &b, &c, &d))
        return 0;
    return (d >> 8) & 1;
}

/* The kernel's clocksource is "tsc": it judged the CPUs' counters
 * synchronized (and watches them: it moves off "tsc" when they drift). */
static int kernel_uses_tsc(void)
{
    int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                  O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[32];
    ssize_t n;
    do
        n = read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    return strcmp(buf, "tsc\n") == 0 || strcmp(buf, "tsc") == 0;
}

static void give_up(const char *why, int64_t off_ns)
{
    atomic_store_explicit(&g_mode, CK_PLAIN, memory_order_release);
    atomic_fetch_add_explicit(&th_clock_gen, 1, memory_order_relaxed);
    if (off_ns)
        th_log_warn("clock: the TSC %s (%lld us off CLOCK_MONOTONIC); call "
                    "timings from clock_gettime() from now on",
                    why, (long long)(off_ns / 1000));
    else
        th_log_debug("clock: call timings from clock_gettime(): %s", why);
}

/* The first call: decide, and take the first pair. */
static void decide(void)
{
    int expect = CK_UNSET;
    if (!atomic_compare_exchange_strong(&g_mode, &expect, CK_CHECKING))
        return;
    const char *env = getenv("TOOLHOST_CLOCK");
    if (env && strcmp(env, "monotonic") == 0) {
        give_up("TOOLHOST_CLOCK=monotonic", 0);
        return;
    }
    if (env && *env && strcmp(env, "auto") != 0)
        th_log_warn("clock: TOOLHOST_CLOCK=%s not known (auto or monotonic); "
                    "taken as auto", env);
    if (!invariant_tsc()) {
        give_up("no invariant TSC", 0);
        return;
    }
    uint64_t t;
    int64_t n;
    take_pair(&t, &n);
    atomic_store_explicit(&g_tsc0, t, memory_order_relaxed);
    atomic_store_explicit(&g_ns0, n, memory_order_relaxed);
    atomic_store_explicit(&g_mode, CK_CALIBRATING, memory_order_release);
}

/* Under g_cal_mu: the multiplier from the first pair to (t, n). */
static void calibrate(uint64_t t, int64_t n)
{
    uint64_t tsc0 = atomic_load_explicit(&g_tsc0, memory_order_relaxed);
    int64_t ns0 = atomic_load_explicit(&g_ns0, memory_order_relaxed);
    int mode = atomic_load_explicit(&g_mode, memory_order_acquire);
    if (mode == CK_CALIBRATING) {
        if (n - ns0 < atomic_load_explicit(&g_window_ns, memory_order_relaxed))
            return;
        if (!kernel_uses_tsc()) {
            give_up("the kernel's clocksource is not tsc", 0);
            return;
        }
    } else if (mode != CK_TSC ||
               n < atomic_load_explicit(&g_next_refine, memory_order_relaxed)) {
        return;
    }
    uint64_t m = mult_of(tsc0, ns0, t, n);
    uint64_t forced = atomic_load_explicit(&g_forced_mult, memory_order_relaxed);
    if (forced)
        m = forced;
    if (!m) {
        give_up("runs at no plausible rate", n - ns0);
        return;
    }
    atomic_store_explicit(&g_mult, m, memory_order_relaxed);
    /* the next one over a window twice as long */
    atomic_store_explicit(&g_next_refine, n + (n - ns0), memory_order_relaxed);
    if (mode == CK_CALIBRATING) {
        atomic_store_explicit(&g_mode, CK_TSC, memory_order_release);
        th_log_debug("clock: call timings from the TSC (%.6f ns per tick)",
                     (double)m / 4294967296.0);
    }
}

/* How far this thread's base predicts the pair (t, n) off, when more than
 * 200 us + 0.1% of the base's age; else 0. */
static int64_t base_off(uint64_t t, int64_t n)
{
    int64_t since = n - th_clock_tl.ns;
    if (since < 0 || since >= 1000000000)
        return 0;
    __int128 ticks = (__int128)(int64_t)(t - th_clock_tl.tsc);
    __int128 pred = (__int128)th_clock_tl.ns + ((ticks * (__int128)th_clock_tl.mult) >> 32);
    int64_t off = (int64_t)(pred - n);
    int64_t allow = 200000 + since / 1000;
    return off > allow || off < -allow ? off : 0;
}

/* Past the fast path: decide, calibrate, or take this thread's base again. */
__attribute__((noinline, cold)) int64_t th_fast_ns_slow(void)
{
    int mode = atomic_load_explicit(&g_mode, memory_order_acquire);
    if (mode == CK_UNSET) {
        decide();
        mode = atomic_load_explicit(&g_mode, memory_order_acquire);
    }
    if (mode != CK_CALIBRATING && mode != CK_TSC)
        return th_now_ns();
    if (mode == CK_CALIBRATING) {
        int64_t n = th_now_ns();
        if (n - atomic_load_explicit(&g_ns0, memory_order_relaxed) <
            atomic_load_explicit(&g_window_ns, memory_order_relaxed))
            return n;
    }
    unsigned gen = atomic_load_explicit(&th_clock_gen, memory_order_relaxed);
    uint64_t t;
    int64_t n;
    take_pair(&t, &n);
    if (mode == CK_TSC && th_clock_tl.gen == gen && th_clock_tl.mult) {
        /* the guard: what the counter says against what the kernel says
         * (only over a base at most 1 s old: a thread idle longer is not
         * checked, its base is just taken again); a pair preempted in
         * each of its tries is taken again before giving up */
        int64_t off = base_off(t, n);
        if (off && (take_pair(&t, &n), off = base_off(t, n)) != 0) {
            give_up("disagrees with the kernel", off);
            return n;
        }
    }
    if (pthread_mutex_trylock(&g_cal_mu) == 0) {
        calibrate(t, n);
        pthread_mutex_unlock(&g_cal_mu);
    }
    if (atomic_load_explicit(&g_mode, memory_order_acquire) != CK_TSC)
        return n;
    uint64_t m = atomic_load_explicit(&g_mult, memory_order_relaxed);
    if (!m) /* a reset meanwhile */
        return n;
    int64_t r = atomic_load_explicit(&g_refresh_ns, memory_order_relaxed);
    th_clock_tl.tsc = t;
    th_clock_tl.ns = n;
    th_clock_tl.mult = m;
    th_clock_tl.lim = (uint64_t)(((unsigned __int128)(uint64_t)r << 32) / m);
    th_clock_tl.gen = gen;
    return n;
}

void th_clock_reset(int64_t window_ns, int64_t refresh_ns, uint64_t mult)
{
    pthread_mutex_lock(&g_cal_mu);
    atomic_store(&g_window_ns, window_ns > 0 ? window_ns : TH_CLOCK_WINDOW_NS);
    if (refresh_ns <= 0)
        refresh_ns = TH_CLOCK_REFRESH_NS;
    atomic_store(&g_refresh_ns, refresh_ns < 1000000000 ? refresh_ns : 1000000000);
    atomic_store(&g_forced_mult, mult);
    atomic_store(&g_mult, 0);
    atomic_store(&g_next_refine, 0);
    atomic_store(&g_mode, CK_UNSET);
    atomic_fetch_add(&th_clock_gen, 1);
    pthread_mutex_unlock(&g_cal_mu);
}

#endif
