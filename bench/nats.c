/* bench/nats.c - the NATS front (docs/scale.md): a loopback nats-server,
 * `toolhost serve` hosts joined to it, driven with the NATS C client.
 *
 * Figures, each beside a floor measured in the same run:
 *   floor: a request/reply round trip through the same nats-server to a
 *          responder in this process that answers at once;
 *   one `echo` call through one host, sequential (p50/p99);
 *   calls/s with 64 in flight through 1 host, then through 3 hosts of the
 *   same queue group (the floor: the in-process responder, 64 in flight);
 *   calls/s with 64 in flight through 1 host against a bare C responder:
 *   a process of its own with its own connection, as the host has, that
 *   answers each request with its body at once (the NATS C client and
 *   nothing else), alternated with the host in rounds of the same run;
 *   and the same responder answering with the two headers every toolhost
 *   reply carries, to tell what the protocol costs from what the host
 *   adds.  Target (issue 29): the host at least 0.9x the bare responder.
 * Skipped (exit 0, a line saying so) when nats-server is not installed.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <msgpack.h>
#include <nats/nats.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "bench.h"

#define MAXH 3

static char tmpdir[512];
static pid_t gnatsd = -1, hosts[MAXH] = {-1, -1, -1}, responder = -1;
static int port;

static const char *server_bin(void)
{
    static const char *const c[] = {"/usr/sbin/nats-server",
                                    "/usr/bin/nats-server",
                                    "/usr/local/bin/nats-server", NULL};
    for (int i = 0; c[i]; i++)
        if (access(c[i], X_OK) == 0)
            return c[i];
    return NULL;
}

static void stop_pid(pid_t *p)
{
    if (*p <= 0)
        return;
    kill(*p, SIGTERM);
    for (int i = 0; i < 500; i++) {
        if (waitpid(*p, NULL, WNOHANG) == *p) {
            *p = -1;
            return;
        }
        usleep(10000);
    }
    kill(*p, SIGKILL);
    waitpid(*p, NULL, 0);
    *p = -1;
}

static void stop_all(void)
{
    for (int i = 0; i < MAXH; i++)
        stop_pid(&hosts[i]);
    stop_pid(&responder);
    stop_pid(&gnatsd);
    if (tmpdir[0]) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "bench: could not remove %s\n", tmpdir);
    }
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0)
        bench_die("free port: %s", strerror(errno));
    close(fd);
    return ntohs(sa.sin_port);
}

static bool port_answers(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    bool ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

static pid_t spawn(const char *log, char *const argv[])
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        bench_die("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (lfd >= 0) {
            dup2(lfd, 1);
            dup2(lfd, 2);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static void start_gnatsd(void)
{
    char log[600], p[16];
    snprintf(log, sizeof log, "%s/nats.log", tmpdir);
    for (int attempt = 0; attempt < 5; attempt++) {
        port = free_port();
        snprintf(p, sizeof p, "%d", port);
        char *argv[] = {(char *)server_bin(), "-a", "127.0.0.1", "-p", p,
                        NULL};
        gnatsd = spawn(log, argv);
        for (int i = 0; i < 500; i++) {
            if (port_answers())
                return;
            if (waitpid(gnatsd, NULL, WNOHANG) == gnatsd) {
                gnatsd = -1;
                break;
            }
            usleep(10000);
        }
        stop_pid(&gnatsd);
    }
    bench_die("nats-server did not start (log: %s)", log);
}

/* A host; its log line "nats: serving" says it subscribed. */
static void start_host(const char *build, int i)
{
    char cfg[600], log[600];
    snprintf(cfg, sizeof cfg, "%s/host%d.yaml", tmpdir, i);
    snprintf(log, sizeof log, "%s/host%d.log", tmpdir, i);
    FILE *f = fopen(cfg, "w");
    if (!f)
        bench_die("%s: %s", cfg, strerror(errno));
    fprintf(f,
            "host:\n"
            "  log_level: info\n"
            "  listen: [\"unix:%s/h%d.sock\", \"nats://127.0.0.1:%d\"]\n"
            "plugins:\n"
            "  - name: echo\n"
            "    path: %s/plugins/echo.so\n"
            "toolsets:\n"
            "  - name: bench\n"
            "    tools: [echo]\n"
            "    allow_users: [nats]\n"
            "nats:\n"
            "  toolsets: [bench]\n",
            tmpdir, i, port, build);
    fclose(f);
    char exe[4200];
    snprintf(exe, sizeof exe, "%s/toolhost", build);
    char *argv[] = {exe, "serve", "-c", cfg, NULL};
    hosts[i] = spawn(log, argv);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "grep -q 'nats: serving' '%s'", log);
    for (int k = 0; k < 3000; k++) {
        if (system(cmd) == 0)
            return;
        if (waitpid(hosts[i], NULL, WNOHANG) == hosts[i]) {
            hosts[i] = -1;
            bench_die("toolhost serve exited (log: %s)", log);
        }
        usleep(10000);
    }
    bench_die("toolhost serve did not join NATS within 30 s (log: %s)", log);
}

static void on_echo(natsConnection *nc, natsSubscription *sub, natsMsg *m,
                    void *ud)
{
    (void)sub;
    (void)ud;
    natsConnection_Publish(nc, natsMsg_GetReply(m), natsMsg_GetData(m),
                           natsMsg_GetDataLength(m));
    natsMsg_Destroy(m);
}

/* The same answer with the two headers every toolhost reply carries
 * (Toolhost-Kind, Toolhost-Host; docs/scale.md): what the wire protocol
 * alone costs a responder, beside what the host adds. */
static void on_echo_hdr(natsConnection *nc, natsSubscription *sub,
                        natsMsg *m, void *ud)
{
    (void)sub;
    (void)ud;
    natsMsg *r = NULL;
    if (natsMsg_Create(&r, natsMsg_GetReply(m), NULL, natsMsg_GetData(m),
                       natsMsg_GetDataLength(m)) == NATS_OK &&
        natsMsgHeader_Set(r, "Toolhost-Kind", "result") == NATS_OK &&
        natsMsgHeader_Set(r, "Toolhost-Host", "0123456789abcdef") == NATS_OK)
        natsConnection_PublishMsg(nc, r);
    natsMsg_Destroy(r);
    natsMsg_Destroy(m);
}

/* The bare responder: a child process (forked before this process used the
 * NATS library) with its own connection, answering on bench.bare. */
static void start_responder(const char *url)
{
    fflush(NULL);
    responder = fork();
    if (responder < 0)
        bench_die("fork: %s", strerror(errno));
    if (responder > 0)
        return;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    natsConnection *nc = NULL;
    natsOptions *o = NULL;
    natsSubscription *sub = NULL, *sub_hdr = NULL;
    if (natsOptions_Create(&o) != NATS_OK ||
        natsOptions_SetURL(o, url) != NATS_OK ||
        natsOptions_SetSendAsap(o, true) != NATS_OK ||
        natsConnection_Connect(&nc, o) != NATS_OK ||
        natsConnection_Subscribe(&sub, nc, "bench.bare", on_echo, NULL) !=
            NATS_OK ||
        natsSubscription_SetPendingLimits(sub, -1, -1) != NATS_OK ||
        natsConnection_Subscribe(&sub_hdr, nc, "bench.bare_hdr", on_echo_hdr,
                                 NULL) != NATS_OK ||
        natsSubscription_SetPendingLimits(sub_hdr, -1, -1) != NATS_OK ||
        natsConnection_Flush(nc) != NATS_OK)
        _exit(1);
    for (;;)
        pause(); /* until the bench's SIGTERM */
}

static void seq(natsConnection *nc, const char *subj, const void *body,
                int len, long n, bench_stats *s)
{
    uint64_t *v = malloc((size_t)n * sizeof *v);
    if (!v)
        bench_die("out of memory");
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t a = bench_now_ns();
        natsMsg *r = NULL;
        if (natsConnection_Request(&r, nc, subj, body, len, 5000) != NATS_OK)
            bench_die("request on %s failed", subj);
        natsMsg_Destroy(r);
        v[i] = bench_now_ns() - a;
    }
    bench_stats_from(s, v, (size_t)n, bench_now_ns() - t0, (size_t)n);
    free(v);
}

/* calls/s with `depth` requests in flight. */
static double pipelined(natsConnection *nc, const char *subj,
                        const void *body, int len, long n, int depth)
{
    natsInbox *ib = NULL;
    natsSubscription *sub = NULL;
    natsInbox_Create(&ib);
    natsConnection_SubscribeSync(&sub, nc, ib);
    natsSubscription_SetPendingLimits(sub, -1, -1);
    long sent = 0, got = 0;
    uint64_t t0 = bench_now_ns();
    while (got < n) {
        while (sent < n && sent - got < depth) {
            natsConnection_PublishRequest(nc, subj, ib, body, len);
            sent++;
        }
        natsMsg *m = NULL;
        natsStatus st = natsSubscription_NextMsg(&m, sub, 5000);
        if (st != NATS_OK)
            bench_die("no reply on %s within 5 s (%ld of %ld)", subj, got, n);
        natsMsg_Destroy(m);
        got++;
    }
    uint64_t ns = bench_now_ns() - t0;
    natsSubscription_Destroy(sub);
    natsInbox_Destroy(ib);
    return (double)n * 1e9 / (double)ns;
}

/* The median over n rounds of a[r] / b[r]. */
static double median_ratio(const double *a, const double *b, int n)
{
    double v[16];
    if (n > 16)
        n = 16;
    for (int r = 0; r < n; r++)
        v[r] = a[r] / b[r];
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && v[k - 1] > v[k]; k--) {
            double t = v[k];
            v[k] = v[k - 1];
            v[k - 1] = t;
        }
    return v[n / 2];
}

int main(int argc, char **argv)
{
    const char *build = bench_build_dir(argc > 1 ? argv[1] : "build");
    bench_machine m;
    bench_machine_get(&m);
    bench_machine_print("nats", &m);
    if (!server_bin()) {
        printf("skipped: nats-server is not installed\n");
        return 0;
    }
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/th-bench-nats-XXXXXX", base);
    if (!mkdtemp(tmpdir))
        bench_die("mkdtemp: %s", strerror(errno));
    atexit(stop_all);
    start_gnatsd();
    start_host(build, 0);

    char url[64];
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", port);
    start_responder(url);
    natsConnection *nc = NULL;
    natsOptions *o = NULL;
    if (natsOptions_Create(&o) != NATS_OK ||
        natsOptions_SetURL(o, url) != NATS_OK ||
        natsOptions_SetSendAsap(o, true) != NATS_OK ||
        natsConnection_Connect(&nc, o) != NATS_OK)
        bench_die("cannot connect to %s", url);
    natsOptions_Destroy(o);
    natsSubscription *floor_sub = NULL;
    natsConnection_Subscribe(&floor_sub, nc, "bench.floor", on_echo, NULL);
    natsConnection_Flush(nc);

    static const uint8_t body[] = {0x81, 0xa4, 't', 'e', 'x', 't', 0xa2,
                                   'h', 'i'}; /* {"text": "hi"} */
    long n_seq = bench_iters(2000, 10, 50);
    long n_pipe = bench_iters(20000, 10, 500);
    bench_stats floor_seq, host_seq;
    seq(nc, "bench.floor", body, sizeof body, n_seq, &floor_seq);
    seq(nc, "toolhost.bench.echo", body, sizeof body, n_seq, &host_seq);
    double floor_cps = pipelined(nc, "bench.floor", body, sizeof body,
                                 n_pipe, 64);
    /* the bare responder up (a request answered), then it and the host in
     * alternating rounds: a phase of the machine falls on both */
    natsMsg *pr = NULL;
    for (int i = 0; i < 500 && natsConnection_Request(&pr, nc, "bench.bare",
                                                      body, sizeof body,
                                                      100) != NATS_OK;
         i++)
        ;
    if (!pr)
        bench_die("the bare responder did not answer");
    natsMsg_Destroy(pr);
    enum { ROUNDS = 9 };
    double bare_r[ROUNDS], hdr_r[ROUNDS], host_r[ROUNDS], bare_cps = 0,
           hdr_cps = 0, one_cps = 0;
    for (int r = 0; r < ROUNDS; r++) {
        /* the order turns each round: none of the three always runs
         * first after a pause, or always right after another */
        static const char *const subj[3] = {"bench.bare",
                                            "toolhost.bench.echo",
                                            "bench.bare_hdr"};
        double *into[3] = {&bare_r[r], &host_r[r], &hdr_r[r]};
        for (int k = 0; k < 3; k++) {
            int w = (r + k) % 3;
            *into[w] = pipelined(nc, subj[w], body, sizeof body, n_pipe, 64);
        }
        bare_cps += bare_r[r] / ROUNDS;
        hdr_cps += hdr_r[r] / ROUNDS;
        one_cps += host_r[r] / ROUNDS;
    }
    /* the median of the rounds' ratios: one round the machine's other
     * work fell on moves a mean of five by tens of percent */
    double ratio_med = median_ratio(host_r, bare_r, ROUNDS);
    double ratio_hdr = median_ratio(host_r, hdr_r, ROUNDS);
    for (int i = 1; i < MAXH; i++)
        start_host(build, i);
    usleep(200000);
    double three_cps = pipelined(nc, "toolhost.bench.echo", body,
                                 sizeof body, n_pipe, 64);
    natsSubscription_Destroy(floor_sub);
    natsConnection_Destroy(nc);

    printf("\n");
    bench_row_head();
    bench_row_ns("floor: NATS round trip, in-process responder", &floor_seq,
                 0, NULL);
    bench_row_ns("echo through 1 host, sequential", &host_seq,
                 (double)floor_seq.p50_ns, "NATS round trip");
    printf("\n%-44s %14s %8s  %s\n", "figure", "calls/s", "ratio", "floor");
    printf("%-44s %14.0f %8s  %s\n", "floor: in-process responder, 64 in flight",
           floor_cps, "", "");
    printf("%-44s %14.0f %7.2fx  %s\n", "echo, 1 host, 64 in flight", one_cps,
           one_cps / floor_cps, "responder, 64 in flight");
    printf("%-44s %14.0f %7.2fx  %s\n", "echo, 3 hosts (one queue group)",
           three_cps, three_cps / floor_cps, "responder, 64 in flight");
    printf("%-44s %14.0f %8s  %s\n", "bare C responder process, 64 in flight",
           bare_cps, "", "");
    printf("%-44s %14.0f %8s  %s\n",
           "bare responder with the 2 reply headers", hdr_cps, "", "");
    printf("%-44s %14.0f %7.2fx  %s\n", "echo, 1 host, 64 in flight (rounds)",
           one_cps, ratio_med, "bare responder process (median "
           "of the rounds' ratios)");
    printf("%-44s %14.0f %7.2fx  %s\n", "echo, 1 host, 64 in flight (rounds)",
           one_cps, ratio_hdr, "bare responder with the reply headers");
    for (int r = 0; r < ROUNDS; r++)
        printf("  round %d: bare %.0f, with headers %.0f, host %.0f calls/s "
               "(%.2fx, %.2fx)\n", r + 1, bare_r[r], hdr_r[r], host_r[r],
               host_r[r] / bare_r[r], host_r[r] / hdr_r[r]);
    printf("(all on one machine of %d cores: 3 hosts share its CPUs, so the "
           "3-host figure shows the spread works, not a 3x gain)\n",
           m.cores);

    bench_json j;
    bench_json_begin(&j, "nats", &m);
    bench_json_num(&j, "floor_rtt_p50_ns", (double)floor_seq.p50_ns);
    bench_json_num(&j, "floor_rtt_p99_ns", (double)floor_seq.p99_ns);
    bench_json_num(&j, "seq_rtt_p50_ns", (double)host_seq.p50_ns);
    bench_json_num(&j, "seq_rtt_p99_ns", (double)host_seq.p99_ns);
    bench_json_num(&j, "seq_ratio",
                   (double)host_seq.p50_ns / (double)floor_seq.p50_ns);
    bench_json_num(&j, "floor_pipe64_cps", floor_cps);
    bench_json_num(&j, "host1_pipe64_cps", one_cps);
    bench_json_num(&j, "host3_pipe64_cps", three_cps);
    bench_json_num(&j, "bare_pipe64_cps", bare_cps);
    bench_json_num(&j, "host1_rounds_pipe64_cps", one_cps);
    bench_json_num(&j, "host1_vs_bare_ratio", ratio_med);
    bench_json_num(&j, "bare_hdr_pipe64_cps", hdr_cps);
    bench_json_num(&j, "host1_vs_bare_hdr_ratio", ratio_hdr);
    bench_target(&j, "nats_pipe64", "NATS 1 host, 64 in flight: calls/s "
                 "against a bare C responder process (median of 9 rounds)",
                 ratio_med, 0.9, 0);
    bench_json_end(&j);
    nats_CloseAndWait(2000);
    return 0;
}
