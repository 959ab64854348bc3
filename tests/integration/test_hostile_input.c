/* test_hostile_input.c - hostile input to the bundled tools, against the
 * real `toolhost serve` (msgpack-RPC over its Unix socket, MCP over
 * Streamable HTTP) and `toolhost call`:
 *
 *   rpc_grep      four concurrent text_grep calls with pathological
 *                 patterns (backreferences after .*, a nested counted
 *                 repeat, a slow pattern over a long file) end as errors
 *                 within their deadline + 1 s; another client's echo calls
 *                 are answered meanwhile; the workers are free right after
 *                 (four plain greps answered at once); the host's peak RSS
 *                 (VmHWM) grows less than 64 MiB;
 *   mcp_thread    over MCP HTTP, a tool not declared short that was quick
 *                 three times, then hangs ignoring cancellation, is
 *                 answered at its deadline (it runs on a worker, never on
 *                 the connection's thread); another session's echo is
 *                 answered meanwhile; a hostile grep is a prompt error;
 *   cli_timeout   `toolhost call -c ... --timeout 2s` of a tool that
 *                 ignores cancellation exits 1 within the timeout + 1 s;
 *   cli_sigterm   SIGTERM to `toolhost call -c` while such a tool runs
 *                 exits 143 at once.
 *
 * Budgets use th_test_ms (sanitizers, valgrind, TH_TEST_SCALE).  A thread
 * watches the server's RSS and kills it past 1 GiB, so a regression cannot
 * take the machine's memory (glibc's regcomp took 3.4 GB on the nested
 * repeat). */
#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "common/th_http.h"
#include "integration/test_rpc_harness.h"

#define TOKEN "hostile-token-0123456789abcdef"
#define TOKEN_ENV "TH_HOSTILE_TEST_TOKEN"
/* The toolset's timeout: 3 s, scaled (under valgrind the backreference
 * pattern's 1,000,000 steps take seconds: it must still end on the limit,
 * not on the deadline). */
static int64_t deadline_ms(void)
{
    return th_test_ms(3000);
}

static const char backref[] = "(.*)(.*)(.*)(.*)(.*)\\5\\4\\3\\2\\1x";
static const char nested[] = "((a{0,100}){0,100}){0,100}";

/* ---- the server ------------------------------------------------------------- */

typedef struct hsrv {
    rpc_srv rs;
    char *root;      /* text's root: the hostile files */
    unsigned port;   /* MCP HTTP */
    pthread_t guard;
    atomic_bool stop;
    atomic_bool killed;
} hsrv;

/* The root: hostile.txt (20 lines of 299 'b' and an 'x': the
 * backreference pattern backtracks past any limit on each), slow.txt
 * (lines of 40 'b' and an 'x': the same pattern takes a few ms on each,
 * under the limit, so a grep of it runs into its deadline). */
static char *make_root(void)
{
    char *root = th_test_tmpdir();
    size_t n = 20 * 301;
    char *t = malloc(n + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    for (int l = 0; l < 20; l++) {
        memset(t + l * 301, 'b', 299);
        t[l * 301 + 299] = 'x';
        t[l * 301 + 300] = '\n';
    }
    t[n] = '\0';
    free(th_test_write_file(root, "hostile.txt", t, n));
    free(t);
    n = 50000 * 42;
    t = malloc(n + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    for (int l = 0; l < 50000; l++) {
        memset(t + l * 42, 'b', 40);
        t[l * 42 + 40] = 'x';
        t[l * 42 + 41] = '\n';
    }
    t[n] = '\0';
    free(th_test_write_file(root, "slow.txt", t, n));
    free(t);
    return root;
}

static long status_kb(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':')
            kb = atol(line + kl + 1);
    if (f)
        fclose(f);
    return kb;
}

/* Not a measurement: a safety net that kills a server past 1 GiB. */
static void *guard_main(void *arg)
{
    hsrv *h = arg;
    while (!atomic_load(&h->stop)) {
        if (status_kb(h->rs.pid, "VmRSS") > (1L << 20)) {
            kill(h->rs.pid, SIGKILL);
            atomic_store(&h->killed, true);
            break;
        }
        usleep(20000);
    }
    return NULL;
}

static int hsrv_start(hsrv *h)
{
    memset(h, 0, sizeof *h);
    h->root = make_root();
    setenv(TOKEN_ENV, TOKEN, 1);
    char cfg[4096];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: info\n"
             "  workers: 4\n"
             "  shutdown_grace: 1s\n"
             "  lost_worker_grace: 5s\n"
             "  listen: [\"http://127.0.0.1:0/mcp\"]\n"
             "mcp:\n"
             "  tokens:\n"
             "    - {user: alice, env: " TOKEN_ENV "}\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "  - name: text\n"
             "    path: @BUILD@/plugins/text.so\n"
             "    config: {root: \"%s\"}\n"
             "  - name: hang\n"
             "    path: @BUILD@/fixtures/hang_nocancel.so\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [echo, text_grep, hang_nocancel]\n"
             "    allow_users: [alice, \"%u\"]\n"
             "    timeout: %lldms\n",
             h->root, (unsigned)getuid(), (long long)deadline_ms());
    rpc_opts o = {.config = cfg};
    if (rpc_srv_start(&h->rs, &o) != 0)
        return -1;
    h->port = th_test_log_port(h->rs.log, "(Streamable HTTP) on http");
    if (!h->port)
        rpc_dump_log(&h->rs);
    if (pthread_create(&h->guard, NULL, guard_main, h) != 0)
        rpc_die("pthread_create");
    return h->port ? 0 : -1;
}

static void hsrv_free(hsrv *h)
{
    atomic_store(&h->stop, true);
    pthread_join(h->guard, NULL);
    CU_ASSERT_FALSE(atomic_load(&h->killed));
    if (!atomic_load(&h->killed))
        CU_ASSERT_EQUAL(rpc_srv_stop(&h->rs, SIGTERM), 0);
    rpc_srv_free(&h->rs);
    th_test_rmtree(h->root);
    free(h->root);
    unsetenv(TOKEN_ENV);
}

/* ---- RPC ---------------------------------------------------------------------- */

typedef struct gcall {
    hsrv *h;
    const char *pattern, *path;
    int64_t ms;          /* how long the answer took */
    bool answered, ok;
    char text[512];      /* stderr, or the error's code and message */
} gcall;

/* tools.call text_grep on a connection of its own; the answer read. */
static void *grep_main(void *arg)
{
    gcall *g = arg;
    th_rpc_client *c = rpc_connect(&g->h->rs);
    if (!c)
        return NULL;
    json_t *j = json_pack("[s, {s:s, s:s, s:i}, {s:I}]", "text_grep",
                          "pattern", g->pattern, "path", g->path,
                          "max_matches", 1000000, "timeout_ms",
                          (json_int_t)deadline_ms());
    char *params = json_dumps(j, 0);
    json_decref(j);
    int64_t t0 = rpc_now_ms();
    rpc_res r;
    if (rpc_call(c, "tools.call", params, &r) == 0 && r.res) {
        g->answered = true;
        g->ok = rpc_ok(r.res);
        const msgpack_object *e = th_rpc_map_get(r.res, "error");
        const msgpack_object *m = e ? th_rpc_map_get(e, "message")
                                    : th_rpc_map_get(r.res, "stderr");
        const char *p;
        size_t n;
        if (m && th_rpc_obj_str(m, &p, &n))
            snprintf(g->text, sizeof g->text, "%.*s", (int)n, p);
    }
    g->ms = rpc_now_ms() - t0;
    rpc_res_free(&r);
    free(params);
    th_rpc_client_close(c);
    return NULL;
}

static void test_rpc_grep(void)
{
    th_test_timeout(120);
    hsrv h;
    CU_ASSERT_FATAL(hsrv_start(&h) == 0);
    long hwm0 = status_kb(h.rs.pid, "VmHWM");
    gcall g[4] = {
        {.h = &h, .pattern = backref, .path = "hostile.txt"},
        {.h = &h, .pattern = nested, .path = "hostile.txt"},
        {.h = &h, .pattern = backref, .path = "slow.txt"},
        {.h = &h, .pattern = backref, .path = "hostile.txt"},
    };
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        CU_ASSERT_FATAL(pthread_create(&th[i], NULL, grep_main, &g[i]) == 0);
    /* Meanwhile another client's echo calls are answered promptly. */
    th_rpc_client *c = rpc_connect(&h.rs);
    CU_ASSERT_FATAL(c != NULL);
    int64_t worst = 0, end = rpc_now_ms() + deadline_ms() + 500;
    int n_echo = 0;
    while (rpc_now_ms() < end) {
        int64_t t0 = rpc_now_ms();
        rpc_res r;
        bool ok = rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"hi\"}]",
                           &r) == 0 &&
                  rpc_stdout_is(r.res, "hi");
        rpc_res_free(&r);
        CU_ASSERT(ok);
        int64_t d = rpc_now_ms() - t0;
        worst = d > worst ? d : worst;
        n_echo++;
        usleep(50000); /* pacing only: each answer is checked */
    }
    th_rpc_client_close(c);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    fprintf(stderr, "\n  echo: %d calls, slowest %lld ms", n_echo,
            (long long)worst);
    /* Valgrind runs one thread of a process at a time: four CPU-bound
     * greps hold the echo's thread off for their time slices (4.8 s seen),
     * whatever the host does; the bound is shown by the plain and
     * sanitizer builds, valgrind checks the memory side only. */
    if (!rpc_valgrind())
        CU_ASSERT(worst < (int64_t)th_test_ms(500));
    for (int i = 0; i < 4; i++) {
        fprintf(stderr, "\n  %s on %s: %lld ms, %s: %.160s", g[i].pattern,
                g[i].path, (long long)g[i].ms,
                g[i].answered ? (g[i].ok ? "ok" : "error") : "no answer",
                g[i].text);
        CU_ASSERT(g[i].answered && !g[i].ok);
        /* Under valgrind the four greps and the manager's timer share one
         * running thread at a time: how late the timer gets its turn is
         * valgrind's scheduler (4.1 s past the deadline seen with the
         * other suites beside it), not the host; the bound is shown by the
         * plain and sanitizer builds. */
        if (!rpc_valgrind())
            CU_ASSERT(g[i].ms < deadline_ms() + (int64_t)th_test_ms(1000));
    }
    /* which error: the step limit (under valgrind, busy, its 1,000,000
     * steps may take as long as the deadline: then a timeout) */
    if (!rpc_valgrind())
        CU_ASSERT_PTR_NOT_NULL(strstr(g[0].text, "pattern too costly"));
    CU_ASSERT_PTR_NOT_NULL(strstr(g[1].text, "invalid pattern"));
    /* The workers are free: four plain greps at once, answered at once
     * (before, they waited for the workers held in regexec). */
    gcall p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = (gcall){.h = &h, .pattern = "x$", .path = "hostile.txt"};
        CU_ASSERT_FATAL(pthread_create(&th[i], NULL, grep_main, &p[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CU_ASSERT(p[i].answered && p[i].ok);
        CU_ASSERT(p[i].ms < (int64_t)th_test_ms(1000));
    }
    fprintf(stderr, "\n  plain greps after: %lld %lld %lld %lld ms",
            (long long)p[0].ms, (long long)p[1].ms, (long long)p[2].ms,
            (long long)p[3].ms);
    long hwm1 = status_kb(h.rs.pid, "VmHWM");
    fprintf(stderr, "\n  VmHWM %ld -> %ld KiB ", hwm0, hwm1);
    CU_ASSERT(hwm0 > 0 && hwm1 > 0 && hwm1 - hwm0 < 64 * 1024);
    hsrv_free(&h);
}

/* ---- MCP over HTTP ---------------------------------------------------------------- */

/* One POST (Connection: close) with the token and session `sid` (NULL:
 * none); the whole response, read until EOF or timeout_ms (malloc()ed),
 * and how long it took in *ms. */
static char *mcp_post(unsigned port, const char *sid, const char *body,
                      int timeout_ms, int64_t *ms)
{
    int64_t t0 = rpc_now_ms();
    int fd = th_test_tcp_connect(port, 0);
    if (fd < 0)
        return strdup("");
    char hdrs[256];
    snprintf(hdrs, sizeof hdrs, "Authorization: Bearer " TOKEN "\r\n%s%s%s",
             sid ? "Mcp-Session-Id: " : "", sid ? sid : "", sid ? "\r\n" : "");
    char *r = NULL;
    if (th_test_http_send(fd, "POST", "/mcp", hdrs, body) == 0)
        th_test_http_read(fd, NULL, timeout_ms, &r);
    close(fd);
    if (ms)
        *ms = rpc_now_ms() - t0;
    return r ? r : strdup("");
}

static int mcp_open(unsigned port, char sid[80])
{
    char *r = mcp_post(port, NULL,
                       "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
                       "\"params\":{\"protocolVersion\":\"2025-06-18\","
                       "\"capabilities\":{},\"clientInfo\":{\"name\":\"h\","
                       "\"version\":\"1\"}}}",
                       rpc_wait_ms(), NULL);
    const char *p = strcasestr(r, "Mcp-Session-Id: ");
    sid[0] = '\0';
    if (p)
        sscanf(p + 16, "%79[0-9a-f]", sid);
    free(r);
    if (!sid[0])
        return -1;
    free(mcp_post(port, sid,
                  "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/"
                  "initialized\"}",
                  rpc_wait_ms(), NULL));
    return 0;
}

typedef struct mcall {
    unsigned port;
    const char *sid;
    char body[512];
    int timeout_ms;
    int64_t ms;
    char *resp;
} mcall;

static void *mcall_main(void *arg)
{
    mcall *m = arg;
    m->resp = mcp_post(m->port, m->sid, m->body, m->timeout_ms, &m->ms);
    return NULL;
}

static void test_mcp_thread(void)
{
    th_test_timeout(120);
    hsrv h;
    CU_ASSERT_FATAL(hsrv_start(&h) == 0);
    char sid[80], sid2[80];
    CU_ASSERT_FATAL(mcp_open(h.port, sid) == 0);
    CU_ASSERT_FATAL(mcp_open(h.port, sid2) == 0);
    /* Three quick calls (before, two under 1 ms on the workers made the
     * tool "measured short": the connection's thread ran it)... */
    for (int i = 0; i < 3; i++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\","
                 "\"params\":{\"name\":\"hang_nocancel\",\"arguments\":"
                 "{\"ms\":0}}}",
                 10 + i);
        char *r = mcp_post(h.port, sid, body, rpc_wait_ms(), NULL);
        CU_ASSERT_PTR_NOT_NULL(strstr(r, "finally"));
        free(r);
    }
    /* ...then one that ignores its deadline: answered at the deadline. */
    mcall m = {.port = h.port, .sid = sid,
               .timeout_ms = deadline_ms() + 20000};
    snprintf(m.body, sizeof m.body,
             "{\"jsonrpc\":\"2.0\",\"id\":20,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"hang_nocancel\",\"arguments\":"
             "{\"ms\":%lld}}}",
             (long long)(deadline_ms() + th_test_ms(1000) + 1500));
    pthread_t th;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, mcall_main, &m) == 0);
    /* another session's echo meanwhile */
    int64_t echo_ms = 0;
    char *e = mcp_post(h.port, sid2,
                       "{\"jsonrpc\":\"2.0\",\"id\":30,\"method\":"
                       "\"tools/call\",\"params\":{\"name\":\"echo\","
                       "\"arguments\":{\"text\":\"still here\"}}}",
                       rpc_wait_ms(), &echo_ms);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, "still here"));
    CU_ASSERT(echo_ms < (int64_t)th_test_ms(500));
    free(e);
    /* and a hostile grep: a prompt error */
    int64_t grep_ms = 0;
    char body[512];
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":31,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"text_grep\",\"arguments\":"
             "{\"pattern\":\"%s\",\"path\":\"hostile.txt\"}}}",
             "(.*)(.*)(.*)(.*)(.*)\\\\5\\\\4\\\\3\\\\2\\\\1x");
    char *g = mcp_post(h.port, sid2, body, deadline_ms() + 20000, &grep_ms);
    CU_ASSERT_PTR_NOT_NULL(strstr(g, "\"isError\":true"));
    CU_ASSERT_PTR_NOT_NULL(strstr(g, "pattern too costly"));
    CU_ASSERT(grep_ms < deadline_ms() + (int64_t)th_test_ms(1000));
    free(g);
    pthread_join(th, NULL);
    fprintf(stderr, "\n  hang over MCP HTTP answered after %lld ms, echo "
            "meanwhile %lld ms, hostile grep %lld ms ",
            (long long)m.ms, (long long)echo_ms, (long long)grep_ms);
    CU_ASSERT_PTR_NOT_NULL(strstr(m.resp, "\"isError\":true"));
    CU_ASSERT_PTR_NOT_NULL(strstr(m.resp, "timed out"));
    CU_ASSERT(m.ms < deadline_ms() + (int64_t)th_test_ms(1000));
    free(m.resp);
    hsrv_free(&h);
}

/* ---- toolhost call ------------------------------------------------------------------ */

typedef struct cli_proc {
    pid_t pid;
    int status;     /* its wait status */
    int64_t ms;     /* from start to exit */
    int64_t t0;
} cli_proc;

/* Starts `toolhost call ARGS...` with stdout and stderr to DIR/cli.out
 * (not th_test_toolhost: the test signals it while it runs, and times
 * the CLI itself, so never under valgrind). */
static void cli_start(cli_proc *p, const char *dir, char *const args[])
{
    char out[4200];
    snprintf(out, sizeof out, "%s/cli.out", dir);
    const char *argv[16];
    int n = 0;
    argv[n++] = th_test_build_path("toolhost");
    argv[n++] = "call";
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    p->t0 = rpc_now_ms();
    p->pid = fork();
    if (p->pid < 0)
        rpc_die("fork");
    if (p->pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
}

/* Waits at most `ms` for the exit; false (and the process killed) when
 * it did not come. */
static bool cli_wait(cli_proc *p, int64_t ms)
{
    int64_t end = rpc_now_ms() + ms;
    for (;;) {
        pid_t r = waitpid(p->pid, &p->status, WNOHANG);
        if (r == p->pid) {
            p->ms = rpc_now_ms() - p->t0;
            return true;
        }
        if (rpc_now_ms() > end) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &p->status, 0);
            p->ms = rpc_now_ms() - p->t0;
            return false;
        }
        usleep(10000);
    }
}

static char *cli_cfg(const char *dir)
{
    char text[2048];
    snprintf(text, sizeof text,
             "plugins:\n"
             "  - name: hang\n"
             "    path: %s\n"
             "  - name: mark\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [\"*\"]\n",
             th_test_build_path("fixtures/hang_nocancel.so"),
             th_test_build_path("fixtures/hang_mark.so"));
    return th_test_write_file(dir, "cli.yaml", text, (size_t)-1);
}

static bool file_has(const char *dir, const char *name, const char *needle)
{
    char path[4200], buf[8192];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    bool ok = strstr(buf, needle) != NULL;
    if (!ok)
        fprintf(stderr, "\nno '%s' in %s:\n%s\n", needle, name, buf);
    return ok;
}

static void test_cli_timeout(void)
{
    th_test_timeout(120);
    char *dir = th_test_tmpdir();
    char *cfg = cli_cfg(dir);
    cli_proc p;
    /* The tool ignores cancellation for 120 s: a CLI that waited for it
     * would take that long.  The budget leaves room for a loaded machine
     * (starting the host and its plugin under ASan at load 20 took 4 s)
     * and stays far below the tool's own end, so it shows the deadline,
     * not the tool, ended the call. */
    char *args[] = {"-c", cfg, "hang_nocancel", "ms=120000", "--timeout",
                    "2s", NULL};
    cli_start(&p, dir, args);
    int64_t budget = 2000 + th_test_ms(10000);
    bool ended = cli_wait(&p, budget + th_test_ms(5000));
    fprintf(stderr, "\n  toolhost call --timeout 2s: exit after %lld ms ",
            (long long)p.ms);
    CU_ASSERT(ended);
    CU_ASSERT(p.ms < budget);
    CU_ASSERT(WIFEXITED(p.status) && WEXITSTATUS(p.status) == 1);
    CU_ASSERT(file_has(dir, "cli.out", "timed out"));
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

static void test_cli_sigterm(void)
{
    th_test_timeout(120);
    char *dir = th_test_tmpdir();
    char *cfg = cli_cfg(dir);
    char mark[4200], marg[4300];
    snprintf(mark, sizeof mark, "%s/started", dir);
    snprintf(marg, sizeof marg, "mark=%s", mark);
    cli_proc p;
    char *args[] = {"-c", cfg, "hang_mark", marg, "ms=30000", NULL};
    cli_start(&p, dir, args);
    /* the tool runs (and ignores cancellation) once the mark exists */
    struct stat sb;
    int64_t end = rpc_now_ms() + th_test_ms(10000);
    while (stat(mark, &sb) != 0 && rpc_now_ms() < end)
        usleep(10000);
    CU_ASSERT_FATAL(stat(mark, &sb) == 0);
    int64_t t0 = rpc_now_ms();
    kill(p.pid, SIGTERM);
    bool ended = cli_wait(&p, th_test_ms(1000) + th_test_ms(20000));
    int64_t took = rpc_now_ms() - t0;
    fprintf(stderr, "\n  SIGTERM during a hanging tool: exit after %lld ms ",
            (long long)took);
    CU_ASSERT(ended);
    CU_ASSERT(took < (int64_t)th_test_ms(1000));
    CU_ASSERT(WIFEXITED(p.status) && WEXITSTATUS(p.status) == 143);
    CU_ASSERT(file_has(dir, "cli.out", "cancelled"));
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_hostile_input(void)
{
    CU_pSuite s = CU_add_suite("hostile_input", NULL, NULL);
    CU_add_test(s, "rpc_grep", test_rpc_grep);
    CU_add_test(s, "mcp_thread", test_mcp_thread);
    CU_add_test(s, "cli_timeout", test_cli_timeout);
    CU_add_test(s, "cli_sigterm", test_cli_sigterm);
}
