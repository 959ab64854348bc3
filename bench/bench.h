/* bench/bench.h - helpers shared by the benchmarks (header only: the build
 * makes one program of each bench/NAME.c).
 *
 * Every benchmark prints a readable table and exactly one JSON line
 * starting with {"bench": ...}.  The machine is stated first (cores online,
 * the CPUs this process may run on, CPU model from /proc/cpuinfo), and
 * every figure stands beside a floor measured in the same run, as a ratio,
 * since absolute times on a shared virtual machine drift.  A run pinned to
 * one CPU (scripts/run-bench re-runs each program under `taskset -c 0`)
 * says "pinned": cross-thread figures are compared only like with like.
 *
 * TH_BENCH_QUICK=1 in the environment shortens every loop (a smoke run).
 */
#ifndef TH_BENCH_H
#define TH_BENCH_H

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>

#include "th/buf.h"

/* The arguments {"text": TEXT} of an echo call, packed as msgpack into
 * buf (cap bytes); their length (dies when they do not fit). */
static inline size_t bench_echo_args(uint8_t *buf, size_t cap,
                                     const char *text)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "text", 4);
    msgpack_pack_str_with_body(&pk, text, strlen(text));
    size_t n = sb.size;
    if (n <= cap)
        memcpy(buf, sb.data, n);
    msgpack_sbuffer_destroy(&sb);
    if (n > cap) {
        fprintf(stderr, "bench: echo arguments of %zu bytes do not fit\n", n);
        exit(1);
    }
    return n;
}

static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline int bench_quick(void)
{
    const char *q = getenv("TH_BENCH_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

/* n, or n/div (at least `min`) in a quick run. */
static inline long bench_iters(long n, long div, long min)
{
    if (!bench_quick())
        return n;
    long q = n / div;
    return q < min ? min : q;
}

static inline void bench_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* The build folder as an absolute path (configs resolve plugin paths
 * against their own folder).  Static storage. */
static inline const char *bench_build_dir(const char *dir)
{
    static char abs[4096];
    if (!realpath(dir, abs))
        bench_die("build folder %s: %s", dir, strerror(errno));
    return abs;
}

/* ---- the machine --------------------------------------------------------- */

typedef struct bench_machine {
    int cores;        /* online */
    int cpus_allowed; /* in this process's affinity mask */
    char model[128];
    int pinned;       /* cpus_allowed == 1 */
    double load1;     /* load average over the last minute at the start */
} bench_machine;

static inline void bench_machine_get(bench_machine *m)
{
    memset(m, 0, sizeof *m);
    m->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        m->cpus_allowed = CPU_COUNT(&set);
    else
        m->cpus_allowed = m->cores;
    m->pinned = m->cpus_allowed == 1;
    double la[1];
    m->load1 = getloadavg(la, 1) == 1 ? la[0] : -1;
    snprintf(m->model, sizeof m->model, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) == 0) {
                char *p = strchr(line, ':');
                if (p) {
                    p++;
                    while (*p == ' ' || *p == '\t')
                        p++;
                    p[strcspn(p, "\n")] = '\0';
                    snprintf(m->model, sizeof m->model, "%s", p);
                }
                break;
            }
        }
        fclose(f);
    }
}

static inline void bench_machine_print(const char *bench,
                                       const bench_machine *m)
{
    printf("== %s ==\n", bench);
    printf("machine: %d cores online, %d allowed%s, CPU \"%s\", load %.2f\n",
           m->cores, m->cpus_allowed,
           m->pinned ? " (pinned: taskset -c 0)" : "", m->model, m->load1);
}

/* ---- samples --------------------------------------------------------------- */

static int bench_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v and returns the q-th quantile (0..1). */
static inline uint64_t bench_quantile(uint64_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof v[0], bench_cmp_u64);
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

typedef struct bench_stats {
    double mean_ns; /* wall / count */
    uint64_t p50_ns, p99_ns;
} bench_stats;

static inline void bench_stats_from(bench_stats *s, uint64_t *samples,
                                    size_t n, uint64_t wall_ns, size_t count)
{
    s->mean_ns = count ? (double)wall_ns / (double)count : 0;
    s->p50_ns = bench_quantile(samples, n, 0.50);
    s->p99_ns = bench_quantile(samples, n, 0.99);
}

/* Runs `one` n / 10 + 1 times to warm up, then n times: each measured
 * round's time (what `one` returns: the span it timed itself) into
 * samples[0..n), the figures into *st (mean: the measured rounds' wall
 * time / n). */
typedef uint64_t (*bench_round_fn)(void *ud);
static inline void bench_rounds(long n, bench_round_fn one, void *ud,
                                uint64_t *samples, bench_stats *st)
{
    uint64_t t0 = bench_now_ns();
    for (long i = -(n / 10 + 1); i < n; i++) {
        uint64_t d = one(ud);
        if (i == -1)
            t0 = bench_now_ns();
        if (i >= 0)
            samples[i] = d;
    }
    bench_stats_from(st, samples, (size_t)n, bench_now_ns() - t0, (size_t)n);
}

/* ---- the JSON line ----------------------------------------------------------- */

/* Builds {"bench":NAME,"machine":{...},...}: bench_json_num/str add
 * members, bench_json_end prints the line. */
typedef struct bench_json {
    th_buf b;
} bench_json;

static inline void bench_json_begin(bench_json *j, const char *bench,
                                    const bench_machine *m)
{
    th_buf_init(&j->b);
    char date[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (th_buf_printf(&j->b,
                      "{\"bench\":\"%s\",\"date\":\"%s\",\"machine\":{"
                      "\"cores\":%d,\"cpus_allowed\":%d,\"pinned\":%s,"
                      "\"cpu\":\"%s\",\"load1\":%.2f}",
                      bench, date, m->cores, m->cpus_allowed,
                      m->pinned ? "true" : "false", m->model, m->load1) < 0)
        bench_die("out of memory");
}

static inline void bench_json_num(bench_json *j, const char *key, double v)
{
    if (th_buf_printf(&j->b, ",\"%s\":%.6g", key, v) < 0)
        bench_die("out of memory");
}

static inline void bench_json_str(bench_json *j, const char *key,
                                  const char *v)
{
    if (th_buf_printf(&j->b, ",\"%s\":\"%s\"", key, v) < 0)
        bench_die("out of memory");
}

static inline void bench_json_end(bench_json *j)
{
    if (th_buf_puts(&j->b, "}") < 0)
        bench_die("out of memory");
    printf("%s\n", (const char *)j->b.data);
    fflush(stdout);
    th_buf_destroy(&j->b);
}

/* ---- targets ------------------------------------------------------------------ */

/* One target of the issue that set it: prints
 *   "target: WHAT: met (ratio 1.42x, target <= 2x)"
 * (scripts/run-bench gathers these lines into its summary) and adds
 * "target_KEY":{"ratio":R,"limit":L,"met":true} to the JSON line.  `at_most`
 * 1: met when ratio <= limit (a slowdown against a floor); 0: met when
 * ratio >= limit (a speed-up or a throughput against a peer).  Returns 1 when
 * met.  `j` may be NULL. */
static inline int bench_target(bench_json *j, const char *key, const char *what,
                               double ratio, double limit, int at_most)
{
    int met = at_most ? ratio <= limit : ratio >= limit;
    printf("target: %s: %s (ratio %.2fx, target %s %gx)\n", what,
           met ? "met" : "NOT met", ratio, at_most ? "<=" : ">=", limit);
    if (j && th_buf_printf(&j->b,
                           ",\"target_%s\":{\"ratio\":%.4g,\"limit\":%g,"
                           "\"met\":%s}",
                           key, ratio, limit, met ? "true" : "false") < 0)
        bench_die("out of memory");
    return met;
}

/* ---- the table --------------------------------------------------------------- */

static inline void bench_row_head(void)
{
    printf("%-44s %12s %10s %10s %8s  %s\n", "figure", "mean", "p50", "p99",
           "ratio", "floor");
}

/* One row: figure, mean/p50/p99 in ns, and the ratio of the p50 to the
 * floor's p50 (floor_p50 0: no floor).  Medians, because on a shared
 * machine a few preempted samples move a mean by tens of percent. */
static inline void bench_row_ns(const char *name, const bench_stats *s,
                                double floor_p50, const char *floor_name)
{
    char ratio[32] = "";
    if (floor_p50 > 0)
        snprintf(ratio, sizeof ratio, "%.2fx", (double)s->p50_ns / floor_p50);
    printf("%-44s %10.0fns %8lluns %8lluns %8s  %s\n", name, s->mean_ns,
           (unsigned long long)s->p50_ns, (unsigned long long)s->p99_ns,
           ratio, floor_name ? floor_name : "");
}

/* Resident memory of this process in KiB (VmRSS), or 0. */
static inline long bench_rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

#endif
