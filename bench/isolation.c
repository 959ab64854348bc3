/* bench/isolation.c - what `isolation: process` costs: a sequential echo
 * call (th_call_sync, the CLI's path) with echo in-process and with echo
 * in a worker process, against the floor of any process boundary: one
 * small message round trip over a socketpair to another process.
 *
 * The isolated call adds to the in-process path: the call frame packed
 * and written, the worker's reading thread running the call, the write
 * and DONE frames back in one send, read by the calling thread itself.
 * Reported: p50 and p99 per call and the ratio of the isolated p50 to the
 * socketpair floor (target: at most 2x) and to the in-process call.
 *
 * Then 64 calls in flight (th_call_start from one thread, 64 host worker
 * threads, one worker process) against its floor: 64 small messages in
 * flight over a socketpair to a process that answers each.  Per call:
 * wall time / calls.
 */
#include <msgpack.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "bench.h"
#include "th/config.h"
#include "th/host.h"
#include "th/iso.h"
#include "th/log.h"

static uint8_t args_mp[64];
static size_t args_len;

static void make_args(void)
{
    args_len = bench_echo_args(args_mp, sizeof args_mp, "hello");
}

/* Floor: a 32-byte message to a child process and back. */
static void floor_socketpair(long n, uint64_t *samples, bench_stats *st)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        bench_die("socketpair: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        bench_die("fork: %s", strerror(errno));
    char buf[32];
    if (pid == 0) {
        close(sv[0]);
        while (read(sv[1], buf, sizeof buf) == (ssize_t)sizeof buf)
            if (write(sv[1], buf, sizeof buf) != (ssize_t)sizeof buf)
                break;
        _exit(0);
    }
    close(sv[1]);
    memset(buf, 'x', sizeof buf);
    uint64_t t0 = 0;
    for (long i = -(n / 10 + 1); i < n; i++) {
        if (i == 0)
            t0 = bench_now_ns();
        uint64_t a = bench_now_ns();
        if (write(sv[0], buf, sizeof buf) != (ssize_t)sizeof buf ||
            read(sv[0], buf, sizeof buf) != (ssize_t)sizeof buf)
            bench_die("socketpair round trip failed");
        if (i >= 0)
            samples[i] = bench_now_ns() - a;
    }
    bench_stats_from(st, samples, (size_t)n, bench_now_ns() - t0, (size_t)n);
    close(sv[0]);
    waitpid(pid, NULL, 0);
}

/* Floor of 64 in flight: the child answers every 32-byte message; 64
 * are always on their way.  Per message: wall / n. */
static double floor_inflight(long n, int depth)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        bench_die("socketpair: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        bench_die("fork: %s", strerror(errno));
    char buf[32 * 64];
    if (pid == 0) {
        close(sv[0]);
        /* Whole messages back, as many as came in one read. */
        size_t have = 0;
        for (;;) {
            ssize_t r = read(sv[1], buf + have, sizeof buf - have);
            if (r <= 0)
                break;
            have += (size_t)r;
            size_t whole = have / 32 * 32;
            if (whole && write(sv[1], buf, whole) != (ssize_t)whole)
                break;
            memmove(buf, buf + whole, have - whole);
            have -= whole;
        }
        _exit(0);
    }
    close(sv[1]);
    memset(buf, 'x', sizeof buf);
    long sent = 0, got = 0;
    uint64_t t0 = bench_now_ns();
    size_t part = 0;
    while (got < n) {
        while (sent < n && sent - got < depth) {
            if (write(sv[0], buf, 32) != 32)
                bench_die("socketpair write failed");
            sent++;
        }
        ssize_t r = read(sv[0], buf, sizeof buf);
        if (r <= 0)
            bench_die("socketpair read failed");
        part += (size_t)r;
        got += (long)(part / 32);
        part %= 32;
    }
    double per = (double)(bench_now_ns() - t0) / (double)n;
    close(sv[0]);
    waitpid(pid, NULL, 0);
    return per;
}

static th_host *open_host(const char *build, bool isolated)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/plugins/echo.so", build);
    struct stat stt;
    if (stat(path, &stt) != 0)
        bench_die("%s is missing: run make first", path);
    char yaml[4600];
    snprintf(yaml, sizeof yaml,
             "host:\n"
             "  log_level: warn\n"
             "  workers: 64\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n"
             "%s",
             path,
             isolated ? "    isolation: process\n    user: auto\n" : "");
    th_config *cfg = NULL;
    th_error err;
    th_error_clear(&err);
    if (th_config_parse("bench.yaml", "/tmp", yaml, strlen(yaml), &cfg, &err) <
        0)
        bench_die("config: %s", err.msg);
    th_host *h = NULL;
    if (th_host_open(cfg, &h, &err) < 0)
        bench_die("th_host_open: %s", err.msg);
    return h;
}

static void run_sync(th_host *h, long n, uint64_t *samples, bench_stats *st)
{
    th_principal who = {.uid = getuid(), .gid = getgid(), .trusted = true};
    th_session *s = th_session_open(h, &who, NULL, NULL);
    if (!s)
        bench_die("th_session_open failed");
    uint64_t t0 = 0;
    for (long i = -(n / 10 + 1); i < n; i++) {
        th_result_copy r;
        memset(&r, 0, sizeof r);
        if (i == 0)
            t0 = bench_now_ns();
        uint64_t a = bench_now_ns();
        int rc = th_call_sync(s, "echo", args_mp, args_len, NULL, NULL, NULL,
                              NULL, &r);
        uint64_t b = bench_now_ns();
        if (rc < 0 || r.kind != TH_RESULT_DONE || !r.ok)
            bench_die("th_call_sync failed (%d)", rc);
        th_result_copy_destroy(&r);
        if (i >= 0)
            samples[i] = b - a;
    }
    bench_stats_from(st, samples, (size_t)n, bench_now_ns() - t0, (size_t)n);
    th_session_close(s);
}

/* 64 calls in flight from one thread: each answer lets the next go. */
typedef struct inflight {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long running, done, failed;
} inflight;

static void on_event(const th_event *ev, void *ud)
{
    inflight *f = ud;
    if (ev->kind != TH_EV_RESULT)
        return;
    pthread_mutex_lock(&f->mu);
    if (ev->result->kind != TH_RESULT_DONE || !ev->result->ok)
        f->failed++;
    f->running--;
    f->done++;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static double run_inflight(th_host *h, long n, int depth)
{
    th_principal who = {.uid = getuid(), .gid = getgid(), .trusted = true};
    th_session *s = th_session_open(h, &who, NULL, NULL);
    if (!s)
        bench_die("th_session_open failed");
    inflight f = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0,
                  0};
    uint64_t t0 = bench_now_ns();
    pthread_mutex_lock(&f.mu);
    for (long started = 0; started < n;) {
        while (f.running >= depth)
            pthread_cond_wait(&f.cv, &f.mu);
        f.running++;
        started++;
        pthread_mutex_unlock(&f.mu);
        uint64_t id;
        if (th_call_start(s, "echo", args_mp, args_len, NULL, on_event, &f,
                          &id) < 0)
            bench_die("th_call_start failed");
        pthread_mutex_lock(&f.mu);
    }
    while (f.done < n)
        pthread_cond_wait(&f.cv, &f.mu);
    pthread_mutex_unlock(&f.mu);
    double per = (double)(bench_now_ns() - t0) / (double)n;
    if (f.failed)
        bench_die("%ld of %ld calls in flight failed", f.failed, n);
    th_session_close(s);
    return per;
}

int main(int argc, char **argv)
{
    const char *build = bench_build_dir(argc > 1 ? argv[1] : TH_BUILD_DIR);
    bench_machine m;
    bench_machine_get(&m);
    bench_machine_print("isolation: echo in-process vs in a worker process",
                        &m);
    th_log_set_level(TOOLHOST_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);
    make_args();
    char exe[4200];
    snprintf(exe, sizeof exe, "%s/toolhost", build);
    th_iso_set_worker_exe(exe);

    long n = bench_iters(20000, 20, 500);
    uint64_t *samples = malloc(sizeof(uint64_t) * (size_t)n);
    if (!samples)
        bench_die("out of memory");
    bench_stats sp, inp, iso;
    floor_socketpair(n, samples, &sp);
    th_host *h = open_host(build, false);
    run_sync(h, n, samples, &inp);
    th_host_close(h);
    uint64_t t_open = bench_now_ns();
    h = open_host(build, true);
    double start_ms = (double)(bench_now_ns() - t_open) / 1e6;
    run_sync(h, n, samples, &iso);
    /* TH_BENCH_ISO_SEQ=1: the sequential figures only (for strace -c or
     * perf of one sequential call). */
    long nf = bench_iters(100000, 20, 2000);
    bool seq_only = getenv("TH_BENCH_ISO_SEQ") != NULL;
    double fl64 = seq_only ? 1 : floor_inflight(nf, 64);
    double iso64 = seq_only ? 1 : run_inflight(h, nf, 64);
    th_host_close(h);
    free(samples);

    printf("\n");
    bench_row_head();
    bench_row_ns("floor: socketpair round trip to a process", &sp, 0, NULL);
    bench_row_ns("echo, in-process, th_call_sync", &inp, (double)sp.p50_ns,
                 "socketpair");
    bench_row_ns("echo, isolation: process, th_call_sync", &iso,
                 (double)sp.p50_ns, "socketpair");
    printf("isolated / in-process (p50): %.2fx; host open with 1 worker: "
           "%.1f ms\n",
           (double)iso.p50_ns / (double)(inp.p50_ns ? inp.p50_ns : 1),
           start_ms);
    printf("64 in flight, per call: floor (socketpair) %.0f ns, isolated "
           "echo %.0f ns (%.2fx, %.0f calls/s)\n",
           fl64, iso64, iso64 / fl64, 1e9 / iso64);

    bench_json j;
    bench_json_begin(&j, "isolation", &m);
    bench_json_num(&j, "calls", (double)n);
    bench_json_num(&j, "socketpair_p50_ns", (double)sp.p50_ns);
    bench_json_num(&j, "inprocess_p50_ns", (double)inp.p50_ns);
    bench_json_num(&j, "inprocess_p99_ns", (double)inp.p99_ns);
    bench_json_num(&j, "isolated_p50_ns", (double)iso.p50_ns);
    bench_json_num(&j, "isolated_p99_ns", (double)iso.p99_ns);
    bench_json_num(&j, "isolated_vs_socketpair",
                   (double)iso.p50_ns / (double)(sp.p50_ns ? sp.p50_ns : 1));
    bench_json_num(&j, "isolated_vs_inprocess",
                   (double)iso.p50_ns / (double)(inp.p50_ns ? inp.p50_ns : 1));
    bench_json_num(&j, "open_ms", start_ms);
    bench_json_num(&j, "inflight64_floor_ns", fl64);
    bench_json_num(&j, "inflight64_isolated_ns", iso64);
    bench_json_num(&j, "inflight64_vs_floor", iso64 / fl64);
    bench_target(&j, "isolated_seq",
                 "sequential isolated call p50 / socketpair floor p50",
                 (double)iso.p50_ns / (double)(sp.p50_ns ? sp.p50_ns : 1), 2.0,
                 1);
    bench_json_end(&j);
    return 0;
}
