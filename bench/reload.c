/* bench/reload.c - hot reload under load: the time from a plugin file
 * change to the new code answering, the registry swap time, and the calls
 * that failed during 100 reloads while threads call the plugin without
 * pause (target: 0 failed, swap well under 10 ms).
 *
 *   build/bench/reload BUILD_DIR
 *
 * A real host (th_host_open on a config with `reload: watch`,
 * `reload_debounce: 0`), the file watcher on a libuv loop of its own
 * thread, LOAD threads calling `rl_answer` through th_call_sync(), and the
 * main thread replacing the plugin file by copy + rename with the other
 * build of the fixture (tests/fixtures/reload_a.c answers "A", reload_b.c
 * "B"), then calling until the new answer comes.  Prints a table and one
 * JSON line.  TH_BENCH_QUICK=1: 20 reloads.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "th/host.h"
#include "th/log.h"
#include "front/reload_watch.h"

#define LOAD 2
#define MAX_RELOADS 100

static void die(const char *fmt, const char *a)
{
    fprintf(stderr, "bench reload: ");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    exit(1);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *d = malloc((size_t)len + 1);
    if (!d || fread(d, 1, (size_t)len, f) != (size_t)len)
        die("cannot read %s", path);
    fclose(f);
    *n = (size_t)len;
    return d;
}

/* Replaces `dst` by `data` as a build does: temp file, then rename. */
static void put(const char *dst, const char *data, size_t n)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    if (fd < 0 || write(fd, data, n) != (ssize_t)n || close(fd) != 0 ||
        rename(tmp, dst) != 0)
        die("cannot write %s", dst);
}

/* ---- load ------------------------------------------------------------------------ */

static th_session *sess;
static atomic_int stop_load;
static atomic_long calls_ok, calls_failed, answers_a, answers_b, answers_bad;

static int answer(char *out, size_t size)
{
    static const uint8_t empty_map[] = {0x80};
    th_call_opts o = {.may_block = true};
    th_result_copy r;
    memset(&r, 0, sizeof r);
    int rc = th_call_sync(sess, "rl_answer", empty_map, 1, &o, NULL, NULL, NULL, &r);
    int ok = rc == 0 && r.kind == TH_RESULT_DONE && r.ok;
    snprintf(out, size, "%.*s", ok ? (int)r.out.len : 0,
             ok && r.out.data ? (const char *)r.out.data : "");
    if (!ok && r.message)
        snprintf(out, size, "error: %s", r.message);
    th_result_copy_destroy(&r);
    return ok ? 0 : -1;
}

static void *load_main(void *arg)
{
    (void)arg;
    char out[256];
    while (!atomic_load(&stop_load)) {
        if (answer(out, sizeof out) != 0) {
            atomic_fetch_add(&calls_failed, 1);
            fprintf(stderr, "failed call: %s\n", out);
            continue;
        }
        atomic_fetch_add(&calls_ok, 1);
        if (strcmp(out, "A") == 0)
            atomic_fetch_add(&answers_a, 1);
        else if (strcmp(out, "B") == 0)
            atomic_fetch_add(&answers_b, 1);
        else
            atomic_fetch_add(&answers_bad, 1);
    }
    return NULL;
}

/* ---- the watcher's loop ----------------------------------------------------------- */

static uv_loop_t loop;
static uv_async_t stop_async;
static th_reload_watch *watch;
static th_reloader *rl;
static pthread_mutex_t rmu = PTHREAD_MUTEX_INITIALIZER;
static int64_t swap_ns[MAX_RELOADS * 2];
static int n_results, n_failed_reloads;

static void on_result(const th_reload_result *res, void *ud)
{
    (void)ud;
    pthread_mutex_lock(&rmu);
    if (res->rc != 0) {
        n_failed_reloads++;
        fprintf(stderr, "reload failed: %s\n", res->err.msg);
    } else if (res->n_changed && n_results < MAX_RELOADS * 2) {
        swap_ns[n_results++] = res->swap_ns;
    }
    pthread_mutex_unlock(&rmu);
}

static void on_stop(uv_async_t *a)
{
    th_reload_watch_stop(watch);
    uv_close((uv_handle_t *)a, NULL);
}

static void *loop_main(void *arg)
{
    (void)arg;
    uv_run(&loop, UV_RUN_DEFAULT);
    return NULL;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_ms(int64_t *v, int n, double p)
{
    if (n == 0)
        return 0;
    int i = (int)(p * (n - 1) + 0.5);
    return (double)v[i] / 1e6;
}

int main(int argc, char **argv)
{
    const char *build = argc > 1 ? argv[argc - 1] : "build";
    char abs_build[4096];
    if (!realpath(build, abs_build))
        die("build folder %s not found", build);
    const char *q = getenv("TH_BENCH_QUICK");
    int reloads = q && *q && strcmp(q, "0") ? 20 : MAX_RELOADS;

    char so_path[2][4200];
    size_t so_len[2];
    char *so[2];
    snprintf(so_path[0], sizeof so_path[0], "%s/fixtures/reload_a.so", abs_build);
    snprintf(so_path[1], sizeof so_path[1], "%s/fixtures/reload_b.so", abs_build);
    so[0] = slurp(so_path[0], &so_len[0]);
    so[1] = slurp(so_path[1], &so_len[1]);

    const char *t = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/toolhost-bench-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir))
        die("mkdtemp: %s", strerror(errno));
    char plugin[4200], cfgp[4200], text[16384];
    snprintf(plugin, sizeof plugin, "%s/fx.so", dir);
    snprintf(cfgp, sizeof cfgp, "%s/bench.yaml", dir);
    put(plugin, so[0], so_len[0]);
    snprintf(text, sizeof text,
             "host:\n  workers: 4\n  log_level: debug\n  reload: watch\n"
             "  reload_debounce: 0\n"
             "plugins:\n  - name: fx\n    path: %s\n", plugin);
    put(cfgp, text, strlen(text));

    th_config *cfg = NULL;
    th_host *h = NULL;
    th_error e;
    if (th_config_load(cfgp, &cfg, &e) != 0 || th_host_open(cfg, &h, &e) != 0)
        die("%s", e.msg);
    if (getenv("TH_BENCH_DEBUG") == NULL) th_log_set_level(TOOLHOST_LOG_WARN);
    rl = th_host_reloader(h);
    if (!rl)
        die("%s", "the host has no reloader");
    th_principal who = {.uid = (uint32_t)getuid(), .gid = (uint32_t)getgid(), .trusted = true};
    sess = th_session_open(h, &who, NULL, NULL);
    if (!sess)
        die("%s", "cannot open a session");

    uv_loop_init(&loop);
    uv_async_init(&loop, &stop_async, on_stop);
    th_reload_watch_opts wo = {.mode = TH_RELOAD_WATCH, .debounce_ms = 0,
                               .no_sighup = true, .on_result = on_result};
    if (th_reload_watch_start(rl, &loop, &wo, &watch, &e) != 0)
        die("%s", e.msg);
    pthread_t lt, load[LOAD];
    pthread_create(&lt, NULL, loop_main, NULL);
    for (int i = 0; i < LOAD; i++)
        pthread_create(&load[i], NULL, load_main, NULL);

    int64_t lat[MAX_RELOADS];
    int timeouts = 0;
    char out[256];
    int64_t t_start = now_ns();
    for (int i = 0; i < reloads; i++) {
        int v = (i + 1) % 2; /* B, A, B, ... */
        const char *want = v ? "B" : "A";
        int64_t t0 = now_ns();
        put(plugin, so[v], so_len[v]);
        for (;;) {
            if (answer(out, sizeof out) == 0 && strcmp(out, want) == 0)
                break;
            if (now_ns() - t0 > 10 * 1000000000ll) {
                timeouts++;
                break;
            }
        }
        lat[i] = now_ns() - t0;
    }
    int64_t t_total = now_ns() - t_start;
    atomic_store(&stop_load, 1);
    for (int i = 0; i < LOAD; i++)
        pthread_join(load[i], NULL);
    uv_async_send(&stop_async);
    pthread_join(lt, NULL);
    uv_loop_close(&loop);
    th_reload_quiesce(rl, 5000);
    th_reload_stats st;
    th_reload_get_stats(rl, &st);
    th_session_close(sess);
    th_host_close(h);

    qsort(lat, (size_t)reloads, sizeof lat[0], cmp64);
    pthread_mutex_lock(&rmu);
    int ns = n_results;
    qsort(swap_ns, (size_t)ns, sizeof swap_ns[0], cmp64);
    pthread_mutex_unlock(&rmu);
    long ok = atomic_load(&calls_ok), failed = atomic_load(&calls_failed);

    printf("== reload ==\n");
    printf("machine: %ld cores online; %d load threads calling rl_answer; "
           "watcher with debounce 0 ms\n",
           sysconf(_SC_NPROCESSORS_ONLN), LOAD);
    printf("%-44s %12s\n", "figure", "value");
    printf("%-44s %12d\n", "reloads (file replaced, new code answering)", reloads);
    printf("%-44s %12d\n", "reloads that applied a new generation", ns);
    printf("%-44s %12d\n", "reloads failed", n_failed_reloads);
    printf("%-44s %12d\n", "new code not answering within 10 s", timeouts);
    printf("%-44s %12.3f\n", "change -> new code answers, p50 (ms)", pct_ms(lat, reloads, 0.5));
    printf("%-44s %12.3f\n", "change -> new code answers, p90 (ms)", pct_ms(lat, reloads, 0.9));
    printf("%-44s %12.3f\n", "change -> new code answers, max (ms)", pct_ms(lat, reloads, 1.0));
    printf("%-44s %12.4f\n", "registry swap, p50 (ms)", pct_ms(swap_ns, ns, 0.5));
    printf("%-44s %12.4f\n", "registry swap, max (ms)", pct_ms(swap_ns, ns, 1.0));
    printf("%-44s %12ld\n", "calls answered during the reloads", ok);
    printf("%-44s %12ld\n", "calls failed (target 0)", failed);
    printf("%-44s %12ld\n", "answers neither A nor B", atomic_load(&answers_bad));
    printf("%-44s %12.0f\n", "calls per second under reloads",
           (double)ok / ((double)t_total / 1e9));
    printf("%-44s %12llu\n", "old generations closed",
           (unsigned long long)st.closed);
    printf("%-44s %12llu\n", "... of which left memory (RTLD_NOLOAD)",
           (unsigned long long)st.unloaded);
    printf("{\"bench\":\"reload\",\"reloads\":%d,\"applied\":%d,\"failed_reloads\":%d,"
           "\"timeouts\":%d,\"change_to_answer_ms\":{\"p50\":%.3f,\"p90\":%.3f,"
           "\"max\":%.3f},\"swap_ms\":{\"p50\":%.4f,\"max\":%.4f},\"calls_ok\":%ld,"
           "\"calls_failed\":%ld,\"bad_answers\":%ld,\"closed\":%llu,\"unloaded\":%llu,"
           "\"load_threads\":%d}\n",
           reloads, ns, n_failed_reloads, timeouts, pct_ms(lat, reloads, 0.5),
           pct_ms(lat, reloads, 0.9), pct_ms(lat, reloads, 1.0),
           pct_ms(swap_ns, ns, 0.5), pct_ms(swap_ns, ns, 1.0), ok, failed,
           atomic_load(&answers_bad), (unsigned long long)st.closed,
           (unsigned long long)st.unloaded, LOAD);
    free(so[0]);
    free(so[1]);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    return failed || timeouts || n_failed_reloads ? 1 : 0;
}
