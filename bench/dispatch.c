/* bench/dispatch.c - the in-process call path for `echo`, against its
 * floors measured in the same process.
 *
 * Full path: th_call_start() on a th_host opened from a config that loads
 * build/plugins/echo.so: registry lookup, policy, validation, manager,
 * execute (the plugin decodes its args with the SDK and writes stdout),
 * output limits, the result event.  Figures:
 *   - inline: may_block = true, so a short sync call runs on the calling
 *     thread (what a blocking front gets), sequential, p50/p99; the
 *     caller's callback checks the answer and raises a flag (the answer
 *     comes on the caller's thread); beside it the same call answered
 *     through the condvar waiter the worker figures use;
 *   - th_call_sync(): the blocking helper the CLI uses;
 *   - via a worker: may_block = false, the caller waits for the event
 *     (a cross-thread hand-off each way);
 *   - all cores: one thread per core, each with its own session, inline;
 *   - echo_async (steps 1, delay 0): time to the acknowledgement (the
 *     RUNNING result) and to the DONE event.
 * Floors:
 *   - a direct call through a function pointer;
 *   - the bare msgpack-c work any host must do for this call: decode the
 *     argument map, read "text", encode the result map {ok, stdout,
 *     stderr, meta} (sequential, and on all cores for the all-core ratio);
 *   - a cross-thread round trip: two threads handing a token back and
 *     forth through a mutex and condition variable (the physical floor of
 *     "a worker runs it and tells the caller").
 * Target: the inline full path at most 2x the msgpack floor.
 */
#include <msgpack.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "bench.h"
#include "th/clock.h"
#include "th/config.h"
#include "th/host.h"
#include "th/log.h"

#define TEXT "hello"

static uint8_t args_mp[64];
static size_t args_len;
static uint8_t async_args_mp[96];
static size_t async_args_len;

static void make_args(void)
{
    args_len = bench_echo_args(args_mp, sizeof args_mp, TEXT);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str_with_body(&pk, "text", 4);
    msgpack_pack_str_with_body(&pk, TEXT, sizeof TEXT - 1);
    msgpack_pack_str_with_body(&pk, "steps", 5);
    msgpack_pack_int(&pk, 1);
    msgpack_pack_str_with_body(&pk, "delay_ms", 8);
    msgpack_pack_int(&pk, 0);
    memcpy(async_args_mp, sb.data, sb.size);
    async_args_len = sb.size;
    msgpack_sbuffer_destroy(&sb);
}

/* ---- floors ----------------------------------------------------------------- */

__attribute__((noinline)) static size_t fp_echo(const uint8_t *a, size_t n)
{
    __asm__ volatile("" ::: "memory");
    return n + a[0];
}
static size_t (*volatile fp)(const uint8_t *, size_t) = fp_echo;

static double floor_fnptr(long n)
{
    size_t acc = 0;
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++)
        acc += fp(args_mp, args_len);
    uint64_t t = bench_now_ns() - t0;
    if (acc == 0)
        bench_die("impossible");
    return (double)t / (double)n;
}

typedef struct mp_floor {
    msgpack_unpacked u;
    msgpack_sbuffer sb;
} mp_floor;

/* One call's worth of msgpack work. */
static void mp_floor_once(mp_floor *f)
{
    size_t off = 0;
    if (msgpack_unpack_next(&f->u, (const char *)args_mp, args_len, &off) !=
        MSGPACK_UNPACK_SUCCESS)
        bench_die("floor: unpack");
    const msgpack_object *m = &f->u.data;
    const msgpack_object *text = NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key;
        if (k->via.str.size == 4 && memcmp(k->via.str.ptr, "text", 4) == 0)
            text = &m->via.map.ptr[i].val;
    }
    if (!text)
        bench_die("floor: no text");
    msgpack_sbuffer_clear(&f->sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &f->sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    msgpack_pack_str_with_body(&pk, "ok", 2);
    msgpack_pack_true(&pk);
    msgpack_pack_str_with_body(&pk, "stdout", 6);
    msgpack_pack_str_with_body(&pk, text->via.str.ptr, text->via.str.size);
    msgpack_pack_str_with_body(&pk, "stderr", 6);
    msgpack_pack_str_with_body(&pk, "", 0);
    msgpack_pack_str_with_body(&pk, "meta", 4);
    msgpack_pack_map(&pk, 0);
}

/* Runs a floor: a warm-up, then n timed rounds of `once`. */
static void floor_run(mp_floor *f, void (*once)(mp_floor *), long n,
                      uint64_t *samples, bench_stats *st)
{
    for (long i = 0; i < n / 10; i++)
        once(f);
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t a = bench_now_ns();
        once(f);
        samples[i] = bench_now_ns() - a;
    }
    bench_stats_from(st, samples, (size_t)n, bench_now_ns() - t0, (size_t)n);
}

static void floor_msgpack(long n, uint64_t *samples, bench_stats *st)
{
    mp_floor f;
    msgpack_unpacked_init(&f.u);
    msgpack_sbuffer_init(&f.sb);
    floor_run(&f, mp_floor_once, n, samples, st);
    /* the mean without the clock reads, which cost as much as the work */
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++)
        mp_floor_once(&f);
    st->mean_ns = (double)(bench_now_ns() - t0) / (double)n;
    msgpack_unpacked_destroy(&f.u);
    msgpack_sbuffer_destroy(&f.sb);
}

/* The least any host that keeps this call's guarantees adds to the
 * msgpack work (a measure of the room a ratio leaves, not a target):
 *   - two clock reads, the call's start and end (its latency in the
 *     stats, its deadline);
 *   - six atomic read-modify-writes on three counters, each on a cache
 *     line of its own: the plugin pinned and released (a reload may unload it meanwhile), the
 *     config snapshot taken and dropped (a reload may swap it), the call
 *     published where another thread can cancel it or time it out, and
 *     taken out again.
 * Left out, though a call needs them: validation, the output limits, the
 * stats' counters, the answer handed to the caller. */
typedef struct req_lines {
    _Alignas(64) atomic_long v[8];
} req_lines;
static req_lines req_line[3];
static uint64_t req_sink;

static void req_floor_once(mp_floor *f)
{
    uint64_t t0 = bench_now_ns();
    atomic_fetch_add(&req_line[0].v[0], 1); /* pin the plugin */
    atomic_fetch_add(&req_line[1].v[0], 1); /* the config snapshot */
    long z = 0;                             /* publish the call */
    atomic_compare_exchange_strong(&req_line[2].v[0], &z, 1);
    mp_floor_once(f);
    z = 1;                                  /* take it out */
    atomic_compare_exchange_strong(&req_line[2].v[0], &z, 0);
    atomic_fetch_sub(&req_line[1].v[0], 1);
    atomic_fetch_sub(&req_line[0].v[0], 1);
    req_sink += bench_now_ns() - t0;
}

static void floor_required(long n, uint64_t *samples, bench_stats *st)
{
    mp_floor f;
    msgpack_unpacked_init(&f.u);
    msgpack_sbuffer_init(&f.sb);
    floor_run(&f, req_floor_once, n, samples, st);
    msgpack_unpacked_destroy(&f.u);
    msgpack_sbuffer_destroy(&f.sb);
}

/* cross-thread ping-pong through a mutex + condvar */
typedef struct pingpong {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long turn; /* even: main's turn, odd: the other's */
    long n;
} pingpong;

static void *pp_thread(void *arg)
{
    pingpong *p = arg;
    pthread_mutex_lock(&p->mu);
    for (long i = 0; i < p->n; i++) {
        while (p->turn % 2 == 0)
            pthread_cond_wait(&p->cv, &p->mu);
        p->turn++;
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void floor_xthread(long n, uint64_t *samples, bench_stats *st)
{
    pingpong p = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, n};
    pthread_t t;
    if (pthread_create(&t, NULL, pp_thread, &p) != 0)
        bench_die("pthread_create");
    uint64_t t0 = bench_now_ns();
    pthread_mutex_lock(&p.mu);
    for (long i = 0; i < n; i++) {
        uint64_t a = bench_now_ns();
        p.turn++; /* odd: theirs */
        pthread_cond_signal(&p.cv);
        while (p.turn % 2 == 1)
            pthread_cond_wait(&p.cv, &p.mu);
        samples[i] = bench_now_ns() - a;
    }
    pthread_mutex_unlock(&p.mu);
    uint64_t wall = bench_now_ns() - t0;
    pthread_join(t, NULL);
    bench_stats_from(st, samples, (size_t)n, wall, (size_t)n);
}

/* ---- the full path ----------------------------------------------------------------- */

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int got_result, got_done;
    th_result_kind kind;
    bool ok;
    int error;
    uint64_t t_result, t_done;
} waiter;

static void check_done(const th_result *r)
{
    if (r->kind != TH_RESULT_DONE || !r->ok || r->out_len != sizeof TEXT - 1 ||
        memcmp(r->out, TEXT, r->out_len) != 0)
        bench_die("echo did not answer '%s' (kind %d, error %s: %s)", TEXT,
                  (int)r->kind, th_err_name(r->error),
                  r->message ? r->message : "");
}

static void on_event(const th_event *ev, void *ud)
{
    waiter *w = ud;
    uint64_t now = bench_now_ns();
    pthread_mutex_lock(&w->mu);
    if (ev->kind == TH_EV_RESULT) {
        w->got_result = 1;
        w->t_result = now;
        w->kind = ev->result->kind;
        w->ok = ev->result->ok;
        w->error = ev->result->error;
        if (ev->result->kind == TH_RESULT_DONE)
            check_done(ev->result);
        else if (ev->result->kind == TH_RESULT_ERROR)
            bench_die("call failed: %s: %s", th_err_name(ev->result->error),
                      ev->result->message ? ev->result->message : "");
    } else if (ev->kind == TH_EV_DONE) {
        w->got_done = 1;
        w->t_done = now;
        check_done(ev->result);
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void waiter_init(waiter *w)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

static void waiter_reset(waiter *w)
{
    pthread_mutex_lock(&w->mu);
    w->got_result = w->got_done = 0;
    pthread_mutex_unlock(&w->mu);
}

static void waiter_wait(waiter *w, int want_done)
{
    pthread_mutex_lock(&w->mu);
    while (!w->got_result || (want_done && !w->got_done))
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static th_host *host;

static th_session *session_new(void)
{
    th_principal who = {.uid = getuid(), .gid = getgid(), .trusted = true};
    th_session *s = th_session_open(host, &who, NULL, NULL);
    if (!s)
        bench_die("th_session_open failed");
    return s;
}

/* A blocking caller (may_block): its call normally runs and answers on
 * this thread before th_call_start returns, so the callback only checks
 * the answer and raises a flag: no clock read, lock or condition of the
 * caller's own in the figure (those are the waiter's below, ~50 ns: a
 * clock read of 23 ns and three lock pairs of ~7 ns here).  A call the
 * manager queued after all (a full group, a stopping manager) answers on
 * another thread: the caller then waits for the flag. */
typedef struct flag_waiter {
    atomic_int got;
} flag_waiter;

static void on_event_flag(const th_event *ev, void *ud)
{
    flag_waiter *w = ud;
    if (ev->kind != TH_EV_RESULT)
        bench_die("inline call: unexpected event %d", (int)ev->kind);
    if (ev->result->kind == TH_RESULT_ERROR)
        bench_die("call failed: %s: %s", th_err_name(ev->result->error),
                  ev->result->message ? ev->result->message : "");
    check_done(ev->result);
    atomic_store_explicit(&w->got, 1, memory_order_release);
}

static void call_inline_once(th_session *s, flag_waiter *w)
{
    th_call_opts o = {.may_block = true};
    atomic_store_explicit(&w->got, 0, memory_order_relaxed);
    int rc = th_call_start(s, "echo", args_mp, args_len, &o, on_event_flag,
                           w, NULL);
    if (rc < 0)
        bench_die("th_call_start: %s", th_strerror(rc));
    if (atomic_load_explicit(&w->got, memory_order_acquire))
        return;
    uint64_t t0 = bench_now_ns();
    while (!atomic_load_explicit(&w->got, memory_order_acquire)) {
        if (bench_now_ns() - t0 > 10ull * 1000000000ull)
            bench_die("inline call: no answer in 10 s");
        sched_yield();
    }
}

static void run_inline(th_session *s, long n, uint64_t *samples,
                       bench_stats *st)
{
    flag_waiter w;
    atomic_init(&w.got, 0);
    for (long i = 0; i < n / 10 + 1; i++)
        call_inline_once(s, &w);
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t a = bench_now_ns();
        call_inline_once(s, &w);
        samples[i] = bench_now_ns() - a;
    }
    bench_stats_from(st, samples, (size_t)n, bench_now_ns() - t0, (size_t)n);
}

/* The msgpack floor and the inline call in ROUNDS alternating rounds, the
 * host open for both: a phase of the machine (another process waking, a
 * virtual CPU halted and woken, the host's own threads) then falls on
 * both rows alike instead of on one of them, which made a single run's
 * ratio move by 1.5x (bench/README.md).  p50 and p99 are over all the
 * rounds' samples; the means are the rounds' average (the floor's without
 * its clock reads, as before). */
#define ROUNDS 5
static void inline_vs_floor(th_session *s, long n, uint64_t *fs,
                            uint64_t *is, bench_stats *mpf, bench_stats *inl)
{
    /* A host's steady state: a call's clock (th/clock.h) reads
     * clock_gettime() through its slow path for its first 50 ms while it
     * calibrates; calls until it has decided (2 s at most). */
    flag_waiter w;
    atomic_init(&w.got, 0);
    uint64_t until = bench_now_ns() + 2000000000ull;
    while ((strcmp(th_clock_source(), "calibrating") == 0 ||
            strcmp(th_clock_source(), "unset") == 0) &&
           bench_now_ns() < until)
        call_inline_once(s, &w);
    long k = n / ROUNDS;
    double fmean = 0, imean = 0;
    for (int r = 0; r < ROUNDS; r++) {
        bench_stats a, b;
        floor_msgpack(k, fs + r * k, &a);
        run_inline(s, k, is + r * k, &b);
        fmean += a.mean_ns / ROUNDS;
        imean += b.mean_ns / ROUNDS;
    }
    bench_stats_from(mpf, fs, (size_t)(k * ROUNDS), 0, 0);
    mpf->mean_ns = fmean;
    bench_stats_from(inl, is, (size_t)(k * ROUNDS), 0, 0);
    inl->mean_ns = imean;
}

/* One call; inline or via a worker, answered through the waiter. */
static void call_once(th_session *s, waiter *w, bool may_block)
{
    th_call_opts o = {.may_block = may_block};
    uint64_t id;
    waiter_reset(w);
    int rc = th_call_start(s, "echo", args_mp, args_len, &o, on_event, w, &id);
    if (rc < 0)
        bench_die("th_call_start: %s", th_strerror(rc));
    waiter_wait(w, 0);
}

static void run_calls(th_session *s, long n, bool may_block,
                      uint64_t *samples, bench_stats *st)
{
    waiter w;
    waiter_init(&w);
    for (long i = 0; i < n / 10 + 1; i++)
        call_once(s, &w, may_block);
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t a = bench_now_ns();
        call_once(s, &w, may_block);
        samples[i] = bench_now_ns() - a;
    }
    bench_stats_from(st, samples, (size_t)n, bench_now_ns() - t0, (size_t)n);
}

static void run_sync(th_session *s, long n, uint64_t *samples, bench_stats *st)
{
    uint64_t t0 = bench_now_ns();
    for (long i = -(n / 10 + 1); i < n; i++) {
        th_result_copy r;
        memset(&r, 0, sizeof r);
        uint64_t a = bench_now_ns();
        int rc = th_call_sync(s, "echo", args_mp, args_len, NULL, NULL, NULL,
                              NULL, &r);
        uint64_t b = bench_now_ns();
        if (rc < 0 || r.kind != TH_RESULT_DONE || !r.ok)
            bench_die("th_call_sync failed (%d)", rc);
        th_result_copy_destroy(&r);
        if (i == -1)
            t0 = bench_now_ns();
        if (i >= 0)
            samples[i] = b - a;
    }
    bench_stats_from(st, samples, (size_t)n, bench_now_ns() - t0, (size_t)n);
}

static void run_async(th_session *s, long n, uint64_t *ack, uint64_t *done,
                      bench_stats *st_ack, bench_stats *st_done)
{
    waiter w;
    waiter_init(&w);
    uint64_t t0 = 0;
    for (long i = -(n / 10 + 1); i < n; i++) {
        th_call_opts o = {.may_block = false};
        uint64_t id;
        waiter_reset(&w);
        uint64_t a = bench_now_ns();
        int rc = th_call_start(s, "echo_async", async_args_mp, async_args_len,
                               &o, on_event, &w, &id);
        if (rc < 0)
            bench_die("th_call_start(echo_async): %s", th_strerror(rc));
        waiter_wait(&w, 0);
        pthread_mutex_lock(&w.mu);
        int running = w.kind == TH_RESULT_RUNNING;
        pthread_mutex_unlock(&w.mu);
        if (running)
            waiter_wait(&w, 1);
        else
            w.t_done = w.t_result; /* finished before the ack */
        if (i == -1)
            t0 = bench_now_ns();
        if (i >= 0) {
            ack[i] = w.t_result - a;
            done[i] = w.t_done - a;
        }
    }
    uint64_t wall = bench_now_ns() - t0;
    bench_stats_from(st_ack, ack, (size_t)n, wall, (size_t)n);
    bench_stats_from(st_done, done, (size_t)n, wall, (size_t)n);
    /* means from the samples, not the wall (which holds both) */
    double sa = 0, sd = 0;
    for (long i = 0; i < n; i++) {
        sa += (double)ack[i];
        sd += (double)done[i];
    }
    st_ack->mean_ns = sa / (double)n;
    st_done->mean_ns = sd / (double)n;
}

/* all cores: one thread per core, inline calls (or the msgpack floor) */
typedef struct mt_arg {
    long n;
    int floor; /* 1: the msgpack floor instead of calls */
    uint64_t *samples;
    pthread_barrier_t *bar;
    uint64_t t_start, t_end;
} mt_arg;

static void *mt_thread(void *arg)
{
    mt_arg *a = arg;
    th_session *s = a->floor ? NULL : session_new();
    flag_waiter w;
    atomic_init(&w.got, 0);
    mp_floor f;
    msgpack_unpacked_init(&f.u);
    msgpack_sbuffer_init(&f.sb);
    pthread_barrier_wait(a->bar);
    a->t_start = bench_now_ns();
    for (long i = 0; i < a->n; i++) {
        uint64_t t = bench_now_ns();
        if (a->floor)
            mp_floor_once(&f);
        else
            call_inline_once(s, &w);
        a->samples[i] = bench_now_ns() - t;
    }
    a->t_end = bench_now_ns();
    msgpack_unpacked_destroy(&f.u);
    msgpack_sbuffer_destroy(&f.sb);
    if (s)
        th_session_close(s);
    return NULL;
}

/* Returns aggregate ns per call (wall / total calls); fills p50/p99 over
 * every call's latency. */
static void run_all_cores(int nt, long n, int floor, bench_stats *st)
{
    pthread_t *ts = calloc((size_t)nt, sizeof *ts);
    mt_arg *as = calloc((size_t)nt, sizeof *as);
    uint64_t *all = malloc(sizeof(uint64_t) * (size_t)(n * nt));
    if (!ts || !as || !all)
        bench_die("out of memory");
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nt + 1);
    for (int i = 0; i < nt; i++) {
        as[i] = (mt_arg){.n = n, .floor = floor, .samples = all + i * n,
                         .bar = &bar};
        if (pthread_create(&ts[i], NULL, mt_thread, &as[i]) != 0)
            bench_die("pthread_create");
    }
    pthread_barrier_wait(&bar);
    uint64_t t0 = UINT64_MAX, t_end = 0;
    for (int i = 0; i < nt; i++) {
        pthread_join(ts[i], NULL);
        if (as[i].t_start < t0)
            t0 = as[i].t_start;
        if (as[i].t_end > t_end)
            t_end = as[i].t_end;
    }
    bench_stats_from(st, all, (size_t)(n * nt), t_end - t0, (size_t)(n * nt));
    pthread_barrier_destroy(&bar);
    free(all);
    free(as);
    free(ts);
}

static th_host *open_host(const char *build, char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/plugins/echo.so", build);
    struct stat stt;
    if (stat(path, &stt) != 0)
        bench_die("%s is missing: run make first", path);
    char yaml[4400];
    snprintf(yaml, sizeof yaml,
             "host:\n"
             "  log_level: warn\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n",
             path);
    th_config *cfg = NULL;
    th_error err;
    th_error_clear(&err);
    if (th_config_parse("bench.yaml", dir, yaml, strlen(yaml), &cfg, &err) < 0)
        bench_die("config: %s", err.msg);
    th_host *h = NULL;
    if (th_host_open(cfg, &h, &err) < 0)
        bench_die("th_host_open: %s", err.msg);
    return h;
}

int main(int argc, char **argv)
{
    const char *build = bench_build_dir(argc > 1 ? argv[1] : TH_BUILD_DIR);
    bench_machine m;
    bench_machine_get(&m);
    bench_machine_print("dispatch: the in-process call path of echo", &m);
    th_log_set_level(TOOLHOST_LOG_WARN);
    make_args();

    long n = bench_iters(200000, 20, 5000);
    long n_x = bench_iters(50000, 20, 1000);   /* cross-thread */
    long n_async = bench_iters(20000, 20, 500);
    int nt = m.cpus_allowed > 0 ? m.cpus_allowed : 1;
    if (nt < 2)
        nt = 2; /* pinned: still two threads, sharing the one CPU */
    uint64_t *samples = malloc(sizeof(uint64_t) * (size_t)n);
    uint64_t *s2 = malloc(sizeof(uint64_t) * (size_t)n);
    if (!samples || !s2)
        bench_die("out of memory");

    /* TH_BENCH_PROFILE=1: only the inline full path and the msgpack floor,
     * once each, for a profiler (valgrind --tool=callgrind); no table. */
    if (getenv("TH_BENCH_PROFILE")) {
        bench_stats st;
        floor_msgpack(n, samples, &st);
        host = open_host(build, "/tmp");
        th_session *ps = session_new();
        run_inline(ps, n, samples, &st);
        th_session_close(ps);
        th_host_close(host);
        free(samples);
        free(s2);
        return 0;
    }

    double fnptr = floor_fnptr(n * 10);
    bench_stats mpf, mpf_mt, xf, rqf;
    floor_required(n, samples, &rqf);
    run_all_cores(nt, n / nt, 1, &mpf_mt);
    floor_xthread(n_x, samples, &xf);

    host = open_host(build, "/tmp");
    th_session *s = session_new();
    bench_stats inl, inw, syn, wrk, mt, ack, done;
    inline_vs_floor(s, n, samples, s2, &mpf, &inl);
    run_calls(s, n, true, samples, &inw);
    run_sync(s, n, samples, &syn);
    run_calls(s, n_x, false, samples, &wrk);
    run_all_cores(nt, n / nt, 0, &mt);
    run_async(s, n_async, samples, s2, &ack, &done);
    th_session_close(s);
    th_host_close(host);

    bench_stats fp_st = {fnptr, 0, 0};
    printf("\n");
    bench_row_head();
    bench_row_ns("floor: call through a function pointer", &fp_st, 0, NULL);
    bench_row_ns("floor: msgpack decode args + encode result", &mpf, 0, NULL);
    bench_row_ns("floor: msgpack + 2 clock reads + 6 atomics", &rqf,
                 (double)mpf.p50_ns, "msgpack");
    bench_row_ns("floor: same, all cores (wall/calls)", &mpf_mt, 0, NULL);
    bench_row_ns("floor: cross-thread round trip (condvar)", &xf, 0, NULL);
    double mp50 = (double)mpf.p50_ns, x50 = (double)xf.p50_ns;
    bench_row_ns("echo, inline (may_block), 1 thread", &inl, mp50, "msgpack");
    bench_row_ns("echo, inline, a condvar waiter", &inw,
                 mp50, "msgpack");
    bench_row_ns("echo, inline, against the guarantees' floor", &inl,
                 (double)rqf.p50_ns, "msgpack + clocks + atomics");
    bench_row_ns("echo, th_call_sync, 1 thread", &syn, mp50, "msgpack");
    bench_row_ns("echo, via a worker, 1 thread", &wrk, x50,
                 "cross-thread round trip");
    char label[64];
    snprintf(label, sizeof label, "echo, inline, %d threads (wall/calls)", nt);
    bench_row_ns(label, &mt, (double)mpf_mt.p50_ns, "msgpack, all cores");
    bench_row_ns("echo_async: acknowledgement", &ack, x50,
                 "cross-thread round trip");
    bench_row_ns("echo_async: done event", &done, x50,
                 "cross-thread round trip");
    printf("(ratios: p50 / the floor's p50; both include two clock reads)\n");
    printf("all cores, throughput: %.0f ns/call wall vs floor %.0f ns/call: "
           "%.2fx\n", mt.mean_ns, mpf_mt.mean_ns, mt.mean_ns / mpf_mt.mean_ns);
    printf("full path vs function pointer: %.0fx (p50)\n",
           (double)inl.p50_ns / fnptr);
    bench_json j;
    bench_json_begin(&j, "dispatch", &m);
    bench_target(&j, "inline_echo", "in-process echo inline <= 2x msgpack floor",
                 (double)inl.p50_ns / mp50, 2.0, 1);
    bench_json_num(&j, "threads", nt);
    bench_json_str(&j, "call_clock", th_clock_source());
    bench_json_num(&j, "floor_fnptr_ns", fnptr);
    bench_json_num(&j, "floor_msgpack_ns", mpf.mean_ns);
    bench_json_num(&j, "floor_msgpack_allcores_ns", mpf_mt.mean_ns);
    bench_json_num(&j, "floor_xthread_rtt_ns", xf.mean_ns);
    bench_json_num(&j, "inline_mean_ns", inl.mean_ns);
    bench_json_num(&j, "inline_p50_ns", (double)inl.p50_ns);
    bench_json_num(&j, "inline_p99_ns", (double)inl.p99_ns);
    bench_json_num(&j, "floor_msgpack_p50_ns", mp50);
    bench_json_num(&j, "floor_xthread_p50_ns", x50);
    bench_json_num(&j, "inline_ratio_msgpack", (double)inl.p50_ns / mp50);
    bench_json_num(&j, "inline_waiter_p50_ns", (double)inw.p50_ns);
    bench_json_num(&j, "floor_required_p50_ns", (double)rqf.p50_ns);
    bench_json_num(&j, "inline_ratio_required",
                   (double)inl.p50_ns / (double)rqf.p50_ns);
    bench_json_num(&j, "sync_mean_ns", syn.mean_ns);
    bench_json_num(&j, "sync_p50_ns", (double)syn.p50_ns);
    bench_json_num(&j, "sync_p99_ns", (double)syn.p99_ns);
    bench_json_num(&j, "worker_mean_ns", wrk.mean_ns);
    bench_json_num(&j, "worker_p50_ns", (double)wrk.p50_ns);
    bench_json_num(&j, "worker_p99_ns", (double)wrk.p99_ns);
    bench_json_num(&j, "worker_ratio_xthread", (double)wrk.p50_ns / x50);
    bench_json_num(&j, "allcores_ns_per_call", mt.mean_ns);
    bench_json_num(&j, "allcores_p50_ns", (double)mt.p50_ns);
    bench_json_num(&j, "allcores_p99_ns", (double)mt.p99_ns);
    bench_json_num(&j, "allcores_ratio_msgpack", mt.mean_ns / mpf_mt.mean_ns);
    bench_json_num(&j, "async_ack_ratio_xthread", (double)ack.p50_ns / x50);
    bench_json_num(&j, "async_ack_mean_ns", ack.mean_ns);
    bench_json_num(&j, "async_ack_p50_ns", (double)ack.p50_ns);
    bench_json_num(&j, "async_ack_p99_ns", (double)ack.p99_ns);
    bench_json_num(&j, "async_done_mean_ns", done.mean_ns);
    bench_json_num(&j, "async_done_p50_ns", (double)done.p50_ns);
    bench_json_num(&j, "async_done_p99_ns", (double)done.p99_ns);
    bench_json_end(&j);
    free(samples);
    free(s2);
    return req_sink == 0; /* (keeps the floor's clock reads) */
}
