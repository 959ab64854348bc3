/* bench/sdk.c - the per-call overhead of each language SDK's echo over the
 * C echo, measured the same way in the same run.
 *
 * The floor is build/plugins/echo.so's `echo` (C, the C SDK); against it
 * each build/examples/<lang>_echo.so that is built (cxx, rust, go: one
 * tool `echo`, the same contract: `text` to stdout unchanged).  A missing
 * one is skipped with a line saying so.  Each plugin is loaded into a host
 * of its own (the tools share the name `echo`), opened from a config like
 * bench/dispatch.c's, and called in-process with th_call_start() and
 * may_block = true: the call runs on the calling thread (registry lookup,
 * policy, validation, execute, output limits, the result), which is where
 * a plugin's own cost shows most.  The plugins take their turns in ROUNDS
 * alternating rounds, so a phase of the machine falls on all alike; p50
 * and p99 are over all the rounds' samples, the ratio is p50 over the C
 * echo's p50.
 *
 * Targets (issue 34): C++ and Rust at most 1.5x the C echo; Go's cgo
 * crossing reported as measured.
 */
#include <msgpack.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "bench.h"
#include "th/clock.h"
#include "th/config.h"
#include "th/host.h"
#include "th/log.h"

#define TEXT "hello"
#define ROUNDS 5

static uint8_t args_mp[64];
static size_t args_len;

static void make_args(void)
{
    args_len = bench_echo_args(args_mp, sizeof args_mp, TEXT);
}

/* One plugin under test: its host, a session, its samples. */
typedef struct target {
    const char *lang;  /* "c", "cxx", "rust", "go" */
    char path[4200];
    th_host *host;
    th_session *s;
    uint64_t *samples; /* ROUNDS * k */
    double mean_sum;
    bench_stats st;
} target;

typedef struct flag_waiter {
    atomic_int got;
    const char *lang;
} flag_waiter;

static void check_done(const th_result *r, const char *lang)
{
    if (r->kind != TH_RESULT_DONE || !r->ok || r->out_len != sizeof TEXT - 1 ||
        memcmp(r->out, TEXT, r->out_len) != 0)
        bench_die("%s echo did not answer '%s' (kind %d, error %s: %s)", lang,
                  TEXT, (int)r->kind, th_err_name(r->error),
                  r->message ? r->message : "");
}

static void on_event(const th_event *ev, void *ud)
{
    flag_waiter *w = ud;
    if (ev->kind != TH_EV_RESULT)
        bench_die("%s: unexpected event %d", w->lang, (int)ev->kind);
    if (ev->result->kind == TH_RESULT_ERROR)
        bench_die("%s: call failed: %s: %s", w->lang,
                  th_err_name(ev->result->error),
                  ev->result->message ? ev->result->message : "");
    check_done(ev->result, w->lang);
    atomic_store_explicit(&w->got, 1, memory_order_release);
}

/* One inline call (as bench/dispatch.c's call_inline_once). */
static void call_once(target *t, flag_waiter *w)
{
    th_call_opts o = {.may_block = true};
    atomic_store_explicit(&w->got, 0, memory_order_relaxed);
    int rc = th_call_start(t->s, "echo", args_mp, args_len, &o, on_event, w,
                           NULL);
    if (rc < 0)
        bench_die("%s: th_call_start: %s", t->lang, th_strerror(rc));
    if (atomic_load_explicit(&w->got, memory_order_acquire))
        return;
    uint64_t t0 = bench_now_ns();
    while (!atomic_load_explicit(&w->got, memory_order_acquire)) {
        if (bench_now_ns() - t0 > 10ull * 1000000000ull)
            bench_die("%s: no answer in 10 s", t->lang);
        sched_yield();
    }
}

/* k calls into samples[0..k); returns the mean (wall / k). */
static double run_round(target *t, long k, uint64_t *samples)
{
    flag_waiter w = {.lang = t->lang};
    atomic_init(&w.got, 0);
    for (long i = 0; i < k / 10 + 1; i++)
        call_once(t, &w);
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < k; i++) {
        uint64_t a = bench_now_ns();
        call_once(t, &w);
        samples[i] = bench_now_ns() - a;
    }
    return (double)(bench_now_ns() - t0) / (double)k;
}

/* Opens a host with the plugin at t->path; 0, or -1 with the reason in
 * why (the plugin is then skipped). */
static int open_target(target *t, char *why, size_t why_size)
{
    char yaml[4600];
    snprintf(yaml, sizeof yaml,
             "host:\n"
             "  log_level: warn\n"
             "plugins:\n"
             "  - name: %s_echo\n"
             "    path: %s\n",
             t->lang, t->path);
    th_config *cfg = NULL;
    th_error err;
    th_error_clear(&err);
    if (th_config_parse("bench.yaml", "/tmp", yaml, strlen(yaml), &cfg,
                        &err) < 0) {
        snprintf(why, why_size, "config: %s", err.msg);
        return -1;
    }
    if (th_host_open(cfg, &t->host, &err) < 0) {
        snprintf(why, why_size, "th_host_open: %s", err.msg);
        return -1;
    }
    th_principal who = {.uid = getuid(), .gid = getgid(), .trusted = true};
    t->s = th_session_open(t->host, &who, NULL, NULL);
    if (!t->s) {
        th_host_close(t->host);
        t->host = NULL;
        snprintf(why, why_size, "th_session_open failed");
        return -1;
    }
    return 0;
}

static void close_target(target *t)
{
    if (t->s)
        th_session_close(t->s);
    if (t->host)
        th_host_close(t->host);
    free(t->samples);
}

int main(int argc, char **argv)
{
    const char *build = bench_build_dir(argc > 1 ? argv[1] : TH_BUILD_DIR);
    bench_machine m;
    bench_machine_get(&m);
    bench_machine_print("sdk: per-call overhead of each SDK's echo over the "
                        "C echo",
                        &m);
    th_log_set_level(TOOLHOST_LOG_WARN);
    make_args();

    long n = bench_iters(200000, 20, 5000);
    long k = n / ROUNDS;
    static const char *const langs[] = {"c", "cxx", "rust", "go"};
    target ts[4];
    int nt = 0;
    struct stat st;
    for (size_t i = 0; i < sizeof langs / sizeof langs[0]; i++) {
        target *t = &ts[nt];
        memset(t, 0, sizeof *t);
        t->lang = langs[i];
        if (i == 0)
            snprintf(t->path, sizeof t->path, "%s/plugins/echo.so", build);
        else
            snprintf(t->path, sizeof t->path, "%s/examples/%s_echo.so", build,
                     langs[i]);
        if (stat(t->path, &st) != 0) {
            if (i == 0)
                bench_die("%s is missing: run make first", t->path);
            printf("skip: %s: %s is not built (make examples)\n", t->lang,
                   t->path);
            continue;
        }
        char why[1024];
        if (open_target(t, why, sizeof why) != 0) {
            if (i == 0)
                bench_die("the C echo: %s", why);
            printf("skip: %s: %s\n", t->lang, why);
            continue;
        }
        t->samples = malloc(sizeof(uint64_t) * (size_t)(k * ROUNDS));
        if (!t->samples)
            bench_die("out of memory");
        nt++;
    }

    /* A host's steady state: the call clock calibrates for its first
     * 50 ms (2 s at most), as in bench/dispatch.c. */
    {
        flag_waiter w = {.lang = "c"};
        atomic_init(&w.got, 0);
        uint64_t until = bench_now_ns() + 2000000000ull;
        while ((strcmp(th_clock_source(), "calibrating") == 0 ||
                strcmp(th_clock_source(), "unset") == 0) &&
               bench_now_ns() < until)
            call_once(&ts[0], &w);
    }
    for (int r = 0; r < ROUNDS; r++)
        for (int i = 0; i < nt; i++)
            ts[i].mean_sum += run_round(&ts[i], k, ts[i].samples + r * k);
    for (int i = 0; i < nt; i++) {
        bench_stats_from(&ts[i].st, ts[i].samples, (size_t)(k * ROUNDS), 0,
                         0);
        ts[i].st.mean_ns = ts[i].mean_sum / ROUNDS;
    }

    double c50 = (double)ts[0].st.p50_ns;
    printf("\n");
    bench_row_head();
    for (int i = 0; i < nt; i++) {
        char label[64];
        snprintf(label, sizeof label, "%s echo, inline (may_block), 1 thread",
                 ts[i].lang);
        bench_row_ns(label, &ts[i].st, i ? c50 : 0, i ? "the C echo" : NULL);
    }
    printf("(ratios: p50 / the C echo's p50; %d alternating rounds of %ld "
           "calls each)\n",
           ROUNDS, k);
    for (int i = 1; i < nt; i++)
        printf("%s: %+.0f ns per call over the C echo (p50)\n", ts[i].lang,
               (double)ts[i].st.p50_ns - c50);

    bench_json j;
    bench_json_begin(&j, "sdk", &m);
    bench_json_str(&j, "call_clock", th_clock_source());
    bench_json_num(&j, "c_echo_mean_ns", ts[0].st.mean_ns);
    bench_json_num(&j, "c_echo_p50_ns", c50);
    bench_json_num(&j, "c_echo_p99_ns", (double)ts[0].st.p99_ns);
    for (int i = 1; i < nt; i++) {
        const target *t = &ts[i];
        double ratio = (double)t->st.p50_ns / c50;
        char key[64], what[128];
        if (strcmp(t->lang, "go") != 0) {
            snprintf(key, sizeof key, "%s_echo", t->lang);
            snprintf(what, sizeof what, "%s SDK echo <= 1.5x the C echo",
                     strcmp(t->lang, "cxx") == 0 ? "C++" : "Rust");
            bench_target(&j, key, what, ratio, 1.5, 1);
        } else {
            printf("go SDK echo: %.2fx the C echo (reported as measured: the "
                   "cgo crossing)\n",
                   ratio);
        }
        snprintf(key, sizeof key, "%s_echo_mean_ns", t->lang);
        bench_json_num(&j, key, t->st.mean_ns);
        snprintf(key, sizeof key, "%s_echo_p50_ns", t->lang);
        bench_json_num(&j, key, (double)t->st.p50_ns);
        snprintf(key, sizeof key, "%s_echo_p99_ns", t->lang);
        bench_json_num(&j, key, (double)t->st.p99_ns);
        snprintf(key, sizeof key, "%s_echo_ratio", t->lang);
        bench_json_num(&j, key, ratio);
    }
    for (size_t i = 1; i < sizeof langs / sizeof langs[0]; i++) {
        bool have = false;
        for (int k2 = 1; k2 < nt; k2++)
            have |= strcmp(ts[k2].lang, langs[i]) == 0;
        if (!have) {
            char key[64];
            snprintf(key, sizeof key, "%s_echo", langs[i]);
            bench_json_str(&j, key, "skipped");
        }
    }
    bench_json_end(&j);
    for (int i = 0; i < nt; i++)
        close_target(&ts[i]);
    return 0;
}
