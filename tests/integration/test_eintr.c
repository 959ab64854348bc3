/* test_eintr.c - signal storms against serving hosts: `toolhost serve` with
 * RPC clients and `toolhost mcp` with an MCP stdio client make calls while
 * the test sends each host, at a high rate and a bounded count, stop and
 * continue pairs (SIGSTOP/SIGCONT: after a stop, Linux makes epoll_wait,
 * futex waits with a timeout and the like fail with EINTR even without a
 * handler) and signals whose default is to be ignored (SIGWINCH, SIGCHLD,
 * SIGURG).  Every call must be answered right, and neither host may die:
 * a read/write/poll/accept/waitpid loop that took EINTR for an error would
 * drop a connection, end the stdio session or stop the server. */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdatomic.h>

#include "test_rpc_harness.h"

#define CALLS 200        /* per client */
#define STORM_ROUNDS 20000 /* at most: a bound, not a duration */

typedef struct storm {
    pid_t pids[2];
    int n_pids;
    atomic_bool stop;
    atomic_long rounds;
} storm;

static void *storm_main(void *arg)
{
    storm *st = arg;
    static const int quiet[] = {SIGWINCH, SIGCHLD, SIGURG};
    for (long i = 0; i < STORM_ROUNDS && !atomic_load(&st->stop); i++) {
        for (int k = 0; k < st->n_pids; k++) {
            pid_t p = st->pids[k];
            kill(p, SIGSTOP);
            kill(p, quiet[i % 3]);
            kill(p, SIGCONT);
        }
        atomic_store(&st->rounds, i + 1);
        if (i % 64 == 63)
            sched_yield(); /* let a stopped host run between bursts */
    }
    for (int k = 0; k < st->n_pids; k++)
        kill(st->pids[k], SIGCONT); /* never leave one stopped */
    return NULL;
}

typedef struct rpc_client_job {
    rpc_srv *s;
    int ok, bad;
} rpc_client_job;

/* CALLS calls over one connection, sync and async in turn, then one over a
 * fresh connection each tenth call. */
static void *rpc_client_main(void *arg)
{
    rpc_client_job *j = arg;
    th_rpc_client *c = rpc_connect(j->s);
    for (int i = 0; i < CALLS; i++) {
        if (!c) {
            j->bad++;
            break;
        }
        char json[128], want[32];
        snprintf(want, sizeof want, "r%d", i);
        bool ok = false;
        if (i % 2) { /* async: progress, then the result */
            th_buf args = TH_BUF_INIT;
            snprintf(json, sizeof json,
                     "{\"text\": \"%s\", \"steps\": 2, \"delay_ms\": 1}",
                     want);
            rpc_pack_json(&args, json);
            uint8_t *res = NULL;
            size_t len = 0, off = 0;
            th_error e;
            msgpack_unpacked u;
            msgpack_unpacked_init(&u);
            ok = th_rpc_client_call_tool(c, "echo_async", args.data, args.len,
                                         0, NULL, NULL, &res, &len, &e) == 0 &&
                 res &&
                 msgpack_unpack_next(&u, (const char *)res, len, &off) ==
                     MSGPACK_UNPACK_SUCCESS &&
                 rpc_stdout_is(&u.data, want);
            msgpack_unpacked_destroy(&u);
            free(res);
            th_buf_destroy(&args);
        } else {
            snprintf(json, sizeof json, "[\"echo\", {\"text\": \"%s\"}]",
                     want);
            rpc_res r;
            ok = rpc_call(c, "tools.call", json, &r) == 0 &&
                 rpc_stdout_is(r.res, want);
            rpc_res_free(&r);
        }
        ok ? j->ok++ : j->bad++;
        if (i % 10 == 9) { /* a fresh connection: accept under the storm */
            th_rpc_client_close(c);
            c = rpc_connect(j->s);
        }
    }
    if (c)
        th_rpc_client_close(c);
    return NULL;
}

/* ---- the MCP stdio client --------------------------------------------------------- */

typedef struct mcp_proc {
    pid_t pid;
    int in, out;
    char buf[1 << 16];
    size_t got;
} mcp_proc;

/* `toolhost mcp -c cfg`, its stderr to log. */
static int mcp_start(mcp_proc *m, const char *cfg, const char *log)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
        rpc_die("pipe");
    int logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0)
        rpc_die("open log");
    fflush(NULL);
    m->pid = fork();
    if (m->pid < 0)
        rpc_die("fork");
    if (m->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(logfd, 2);
        execl(th_test_build_path("toolhost"), "toolhost", "mcp", "-c", cfg,
              (char *)NULL);
        _exit(127);
    }
    close(logfd);
    close(in[0]);
    close(out[1]);
    m->in = in[1];
    m->out = out[0];
    m->got = 0;
    return 0;
}

static bool mcp_send(mcp_proc *m, const char *line)
{
    size_t n = strlen(line);
    while (n) {
        ssize_t w = write(m->in, line, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        line += w;
        n -= (size_t)w;
    }
    return true;
}

/* The next line the host writes (in m->buf, NUL-terminated, moved out of
 * the way by the next call), or NULL at the deadline or end of output. */
static char *mcp_line(mcp_proc *m, int64_t end, size_t *consumed)
{
    if (*consumed) { /* drop the line handed out last time */
        memmove(m->buf, m->buf + *consumed, m->got - *consumed);
        m->got -= *consumed;
        *consumed = 0;
    }
    for (;;) {
        char *nl = memchr(m->buf, '\n', m->got);
        if (nl) {
            *nl = '\0';
            *consumed = (size_t)(nl - m->buf) + 1;
            return m->buf;
        }
        int64_t left = end - rpc_now_ms();
        if (left <= 0 || m->got + 1 >= sizeof m->buf)
            return NULL;
        struct pollfd pf = {.fd = m->out, .events = POLLIN};
        int pr = poll(&pf, 1, (int)left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return NULL;
        ssize_t n = read(m->out, m->buf + m->got, sizeof m->buf - 1 - m->got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return NULL;
        m->got += (size_t)n;
    }
}

/* initialize, then CALLS tools/call of echo, each answered with its own
 * text; the count of right answers. */
static int mcp_session(mcp_proc *m)
{
    int64_t end = rpc_now_ms() + 4 * rpc_wait_ms();
    size_t used = 0;
    if (!mcp_send(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
                     "\"params\":{\"protocolVersion\":\"2025-06-18\","
                     "\"capabilities\":{},\"clientInfo\":{\"name\":\"t\","
                     "\"version\":\"1\"}}}\n"
                     "{\"jsonrpc\":\"2.0\",\"method\":"
                     "\"notifications/initialized\"}\n"))
        return 0;
    char *l = mcp_line(m, end, &used);
    if (!l || !strstr(l, "\"protocolVersion\""))
        return 0;
    int ok = 0;
    for (int i = 0; i < CALLS; i++) {
        char req[256], want[64];
        snprintf(req, sizeof req,
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\","
                 "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":"
                 "\"m%d\"}}}\n", 100 + i, i);
        if (!mcp_send(m, req))
            break;
        snprintf(want, sizeof want, "\"text\":\"m%d", i);
        char idk[32];
        snprintf(idk, sizeof idk, "\"id\":%d", 100 + i);
        while ((l = mcp_line(m, end, &used)) && !strstr(l, idk))
            ; /* notifications */
        if (!l)
            break;
        ok += strstr(l, want) != NULL && !strstr(l, "\"isError\":true");
    }
    return ok;
}

static void test_storm(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    char *mdir = th_test_tmpdir();
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  shutdown_grace: 1s\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [echo]\n",
             th_test_build_path("plugins/echo.so"));
    char *mcfg = th_test_write_file(mdir, "c.yaml", cfg, (size_t)-1);
    mcp_proc *m = calloc(1, sizeof *m);
    CU_ASSERT_FATAL(m != NULL);
    char mlog[600];
    snprintf(mlog, sizeof mlog, "%s/mcp.log", mdir);
    mcp_start(m, mcfg, mlog);

    storm st = {.pids = {s.pid, m->pid}, .n_pids = 2};
    atomic_init(&st.stop, false);
    atomic_init(&st.rounds, 0);
    pthread_t storm_t, rpc_t;
    rpc_client_job j = {.s = &s};
    CU_ASSERT_FATAL(pthread_create(&storm_t, NULL, storm_main, &st) == 0);
    CU_ASSERT_FATAL(pthread_create(&rpc_t, NULL, rpc_client_main, &j) == 0);
    int mcp_ok = mcp_session(m);
    pthread_join(rpc_t, NULL);
    atomic_store(&st.stop, true);
    pthread_join(storm_t, NULL);
    long rounds = atomic_load(&st.rounds);
    fprintf(stderr, "\n  storm: %ld rounds; rpc %d/%d, mcp %d/%d answered\n",
            rounds, j.ok, CALLS, mcp_ok, CALLS);

    CU_ASSERT_EQUAL(j.ok, CALLS);
    CU_ASSERT_EQUAL(j.bad, 0);
    CU_ASSERT_EQUAL(mcp_ok, CALLS);
    CU_ASSERT(rounds > 0);
    /* both hosts alive, and they still answer and stop cleanly */
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    close(m->in); /* end of input: `toolhost mcp` ends with status 0 */
    int status = -1;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    pid_t w = 0;
    while ((w = waitpid(m->pid, &status, WNOHANG)) == 0 && rpc_now_ms() < end) {
        struct pollfd pf = {.fd = m->out, .events = POLLIN};
        char sink[4096];
        if (poll(&pf, 1, 50) > 0 && read(m->out, sink, sizeof sink) < 0 &&
            errno != EINTR)
            break; /* drains what it still writes; waits on its exit */
    }
    if (w != m->pid) {
        kill(m->pid, SIGKILL);
        waitpid(m->pid, &status, 0);
        CU_FAIL("toolhost mcp did not exit at the end of its input");
    }
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(m->out);
    free(m);
    rpc_srv_free(&s);
    th_test_rmtree(mdir);
    free(mdir);
    free(mcfg);
}

void th_suite_eintr(void)
{
    CU_pSuite s = CU_add_suite("eintr", NULL, NULL);
    CU_add_test(s, "storm", test_storm);
}
