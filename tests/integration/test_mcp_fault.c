/* test_mcp_fault.c - the adversarial probes of test_rpc_fault.c and
 * test_rpc_limits.c against the MCP front: `toolhost mcp` on stdio and the
 * Streamable HTTP endpoint of `serve`.  Random bytes, truncated and
 * over-long lines, a client that never reads its output, connect and
 * disconnect cycles, a client that vanishes mid-call.  After each the
 * front still answers a normal call (or, on stdio, exits cleanly on end of
 * input); every wait is bounded.  Covered in test_mcp_http.c already: many
 * sessions (session_limits: mcp.max_sessions bites with a log line), a
 * stalled SSE reader beside busy clients (slow_client), max_connections,
 * client_timeout, a vanished SSE stream (vanished_client). */
#include <CUnit/CUnit.h>
#include <sys/ioctl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nettle/sha2.h>

#include "common/th_http.h"
#include "integration/test_rpc_harness.h"

/* ---- toolhost mcp on stdio ------------------------------------------------------- */

typedef struct mproc {
    pid_t pid;
    int in, out; /* our ends: its stdin, its stdout */
    char *dir, *cfg, *log;
    char *buf;
    size_t len, cap;
    bool reaped;
    int status;
} mproc;

#define INIT_LINES                                                             \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"    \
    "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"                 \
    "\"clientInfo\":{\"name\":\"fault\",\"version\":\"1\"}}}\n"                \
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"

static int mp_start(mproc *p, const char *host_extra)
{
    memset(p, 0, sizeof *p);
    signal(SIGPIPE, SIG_IGN);
    p->dir = th_test_tmpdir();
    char text[2048];
    snprintf(text, sizeof text,
             "host:\n"
             "  reload: off\n"
             "  shutdown_grace: 1s\n"
             "%s"
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [\"echo\", \"echo_async\"]\n",
             host_extra ? host_extra : "",
             th_test_build_path("plugins/echo.so"));
    p->cfg = th_test_write_file(p->dir, "c.yaml", text, (size_t)-1);
    p->log = th_test_write_file(p->dir, "stderr.log", "", 0);
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0)
        return -1;
    p->pid = fork();
    if (p->pid < 0)
        return -1;
    if (p->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        int e = open(p->log, O_WRONLY | O_TRUNC);
        if (e >= 0)
            dup2(e, 2);
        for (int fd = 3; fd < 256; fd++)
            close(fd);
        execl(th_test_build_path("toolhost"), "toolhost", "mcp", "-c",
              p->cfg, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->in = in[1];
    p->out = out[0];
    fcntl(p->out, F_SETFL, O_NONBLOCK);
    return 0;
}

/* Writes all of it within timeout_ms; the bytes written. */
static size_t mp_write(mproc *p, const void *data, size_t n, int timeout_ms)
{
    const char *s = data;
    size_t off = 0;
    int64_t end = rpc_now_ms() + timeout_ms;
    while (off < n && p->in >= 0) {
        int left = (int)(end - rpc_now_ms());
        if (left <= 0)
            break;
        struct pollfd pf = {.fd = p->in, .events = POLLOUT};
        if (poll(&pf, 1, left) <= 0)
            break;
        if (pf.revents & (POLLERR | POLLHUP))
            break;
        ssize_t k = write(p->in, s + off, n - off);
        if (k > 0)
            off += (size_t)k;
        else if (k < 0 && errno != EINTR && errno != EAGAIN)
            break;
    }
    return off;
}

static void mp_send(mproc *p, const char *text)
{
    size_t n = strlen(text);
    CU_ASSERT_EQUAL(mp_write(p, text, n, rpc_wait_ms()), n);
}

/* Reads its output until `needle` appears (true) or timeout_ms. */
static bool mp_read_until(mproc *p, const char *needle, int timeout_ms)
{
    int64_t end = rpc_now_ms() + timeout_ms;
    for (;;) {
        if (p->buf && strstr(p->buf, needle))
            return true;
        int left = (int)(end - rpc_now_ms());
        if (left <= 0)
            return false;
        struct pollfd pf = {.fd = p->out, .events = POLLIN};
        if (poll(&pf, 1, left) <= 0)
            return false;
        if (p->len + 65537 > p->cap) {
            p->cap = p->cap ? p->cap * 2 : 1 << 20;
            p->buf = realloc(p->buf, p->cap);
        }
        ssize_t k = read(p->out, p->buf + p->len, 65536);
        if (k == 0)
            return p->buf && strstr(p->buf, needle);
        if (k > 0) {
            p->len += (size_t)k;
            p->buf[p->len] = '\0';
        }
    }
}

/* Waits up to timeout_ms for it to exit (then kills it): its wait status,
 * or -1 when it had to be killed. */
static int mp_wait(mproc *p, int timeout_ms)
{
    int64_t end = rpc_now_ms() + timeout_ms;
    while (!p->reaped) {
        pid_t r = waitpid(p->pid, &p->status, WNOHANG);
        if (r == p->pid) {
            p->reaped = true;
            break;
        }
        if (rpc_now_ms() >= end) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &p->status, 0);
            p->reaped = true;
            return -1;
        }
        usleep(10 * 1000);
    }
    return p->status;
}

static void mp_close_in(mproc *p)
{
    if (p->in >= 0)
        close(p->in);
    p->in = -1;
}

/* Waits (at most ms) until the pipe `fd` reads from holds half of what it
 * can take (F_GETPIPE_SZ) unread: its writer's output backs up.  (Not
 * "full": a pipe refuses a write once its page slots are used, with up to
 * a page of bytes still free, so no byte count marks it.) */
static bool wait_pipe_backed_up(int fd, int64_t ms)
{
    int cap = fcntl(fd, F_GETPIPE_SZ);
    int64_t end = rpc_now_ms() + ms;
    for (;;) {
        int n = 0;
        if (cap > 0 && ioctl(fd, FIONREAD, &n) == 0 && n >= cap / 2)
            return true;
        if (rpc_now_ms() >= end) {
            fprintf(stderr, "\npipe: %d of %d bytes unread\n", n, cap);
            return false;
        }
        usleep(2000);
    }
}

static long mp_rss_kb(mproc *p)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)p->pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

/* Whether the log file has a line with `needle` (quietly). */
static bool log_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[2048];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return found;
}

static void mp_free(mproc *p)
{
    mp_close_in(p);
    if (p->out >= 0)
        close(p->out);
    if (!p->reaped)
        mp_wait(p, rpc_wait_ms());
    th_test_rmtree(p->dir);
    free(p->dir);
    free(p->cfg);
    free(p->log);
    free(p->buf);
}

/* The echo answer with id 99 after whatever came before. */
#define CALL99                                                                 \
    "{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"tools/call\",\"params\":{"   \
    "\"name\":\"echo\",\"arguments\":{\"text\":\"still here\"}}}\n"

static void test_stdio_random_bytes(void)
{
    mproc p;
    CU_ASSERT_FATAL(mp_start(&p, NULL) == 0);
    mp_send(&p, INIT_LINES);
    CU_ASSERT(mp_read_until(&p, "\"id\":1", rpc_wait_ms()));
    unsigned seed = 11;
    int rounds = rpc_scale(16);
    for (int r = 0; r < rounds; r++) {
        uint8_t b[4096];
        for (size_t i = 0; i < sizeof b; i++) {
            seed = seed * 1103515245u + 12345u;
            b[i] = (uint8_t)(seed >> 16);
        }
        CU_ASSERT_EQUAL(mp_write(&p, b, sizeof b, rpc_wait_ms()), sizeof b);
        /* drain the parse errors meanwhile */
        mp_read_until(&p, "\x01never", 10);
    }
    mp_send(&p, "\n" CALL99);
    CU_ASSERT(mp_read_until(&p, "still here", rpc_wait_ms()));
    CU_ASSERT(strstr(p.buf, "-32700") != NULL);
    mp_close_in(&p);
    int st = mp_wait(&p, rpc_wait_ms());
    CU_ASSERT(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    mp_free(&p);
}

/* A line past host.mcp_max_message is answered with an error and skipped
 * (its memory is not kept); a truncated line then end of input: a clean
 * exit. */
static void test_stdio_long_and_truncated(void)
{
    mproc p;
    CU_ASSERT_FATAL(mp_start(&p, "  mcp_max_message: 4KiB\n") == 0);
    mp_send(&p, INIT_LINES);
    CU_ASSERT(mp_read_until(&p, "\"id\":1", rpc_wait_ms()));
    size_t n = (size_t)rpc_scale(8) << 20; /* 8 MiB in one line */
    char *big = malloc(n + 1);
    CU_ASSERT_FATAL(big != NULL);
    memcpy(big, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"x\",\"params\":\"", 47);
    memset(big + 47, 'a', n - 47);
    big[n - 1] = '\n';
    size_t w = 0;
    int64_t end = rpc_now_ms() + 2 * rpc_wait_ms();
    while (w < n && rpc_now_ms() < end) {
        w += mp_write(&p, big + w, n - w, 100);
        mp_read_until(&p, "\x01never", 1);
    }
    CU_ASSERT_EQUAL(w, n);
    free(big);
    long rss = mp_rss_kb(&p);
    mp_send(&p, CALL99);
    CU_ASSERT(mp_read_until(&p, "still here", rpc_wait_ms()));
    CU_ASSERT(strstr(p.buf, "mcp_max_message") != NULL);
    fprintf(stderr, " [RSS %ld KiB after an 8 MiB line] ", rss);
    CU_ASSERT(rss > 0 && rss < 64 * 1024);
    /* Half a request, then end of input. */
    mp_send(&p, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/ca");
    mp_close_in(&p);
    int st = mp_wait(&p, rpc_wait_ms());
    CU_ASSERT(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    mp_free(&p);
}

/* Requests written, answers never read: the host stops reading once its
 * output blocks (its memory stays bounded), and it exits on end of input
 * even though its output is still stuck. */
static void test_stdio_never_reads(void)
{
    mproc p;
    CU_ASSERT_FATAL(mp_start(&p, NULL) == 0);
    mp_send(&p, INIT_LINES);
    CU_ASSERT(mp_read_until(&p, "\"id\":1", rpc_wait_ms()));
    const char req[] =
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}\n";
    /* Not scaled down under valgrind: ~1 MB must outrun what the host
     * takes before its output blocks, however slowly it runs. */
    size_t sent = 0, want = (size_t)20000 * (sizeof req - 1);
    int64_t end = rpc_now_ms() + th_test_ms(3000);
    while (sent < want && rpc_now_ms() < end) {
        size_t k = mp_write(&p, req, sizeof req - 1, 200);
        if (k < sizeof req - 1)
            break; /* it stopped reading us */
        sent += k;
    }
    /* Its output is stuck: the pipe to us backs up (what makes it stop
     * reading), then its memory is measured. */
    CU_ASSERT(wait_pipe_backed_up(p.out, rpc_wait_ms()));
    long rss = mp_rss_kb(&p);
    fprintf(stderr, " [%zu KiB of requests taken, RSS %ld KiB] ",
            sent >> 10, rss);
    CU_ASSERT(sent < want); /* backpressure: it stopped reading */
    CU_ASSERT(rss > 0 && rss < 64 * 1024);
    /* End of input, its output still open and unread: it gives the
     * output up after shutdown_grace (1s) and exits. */
    mp_close_in(&p);
    int64_t t0 = rpc_now_ms();
    int st = mp_wait(&p, rpc_wait_ms());
    fprintf(stderr, "[exited %lld ms after end of input] ",
            (long long)(rpc_now_ms() - t0));
    CU_ASSERT(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CU_ASSERT(log_has(p.log, "(host.shutdown_grace): giving up its output"));
    mp_free(&p);
}

/* End of input while a call runs and the client never reads the answer:
 * shutdown_grace (1s here), then the call is cancelled and the process
 * exits. */
static void test_stdio_vanishes_mid_call(void)
{
    mproc p;
    CU_ASSERT_FATAL(mp_start(&p, NULL) == 0);
    mp_send(&p, INIT_LINES);
    CU_ASSERT(mp_read_until(&p, "\"id\":1", rpc_wait_ms()));
    mp_send(&p, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\","
                "\"params\":{\"name\":\"echo_async\",\"arguments\":{"
                "\"text\":\"x\",\"steps\":1000,\"delay_ms\":20},"
                "\"_meta\":{\"progressToken\":4}}}\n");
    /* the call runs: its first progress notification, not a sleep */
    CU_ASSERT(mp_read_until(&p, "notifications/progress", rpc_wait_ms()));
    mp_close_in(&p);
    close(p.out);
    p.out = -1;
    int64_t t0 = rpc_now_ms();
    int st = mp_wait(&p, rpc_wait_ms());
    int64_t ms = rpc_now_ms() - t0;
    fprintf(stderr, " [exited %lld ms after its client left] ",
            (long long)ms);
    CU_ASSERT(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CU_ASSERT(ms < 1000 + rpc_wait_ms() / 2);
    CU_ASSERT(log_has(p.log, "cancel") || log_has(p.log, "stopping"));
    mp_free(&p);
}

/* ---- the Streamable HTTP endpoint --------------------------------------------------- */

#define TOKEN "fault-token-0123456789abcdef"

typedef struct hsrv {
    rpc_srv rs;
    unsigned port;
} hsrv;

static int hs_start(hsrv *h, const char *mcp_extra)
{
    memset(h, 0, sizeof *h);
    uint8_t d[32];
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(TOKEN), (const uint8_t *)TOKEN);
    sha256_digest(&ctx, 32, d);
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    char mcp[1024];
    snprintf(mcp, sizeof mcp,
             "mcp:\n"
             "  tokens:\n"
             "    - {user: fault, sha256: %s}\n"
             "%s",
             hex, mcp_extra ? mcp_extra : "");
    char pub[128];
    snprintf(pub, sizeof pub, "    allow_users: [fault, \"%u\"]\n",
             (unsigned)getuid());
    rpc_opts o = {.host_extra = "  listen: [\"http://127.0.0.1:0/mcp\"]\n",
                  .plugins_extra = mcp,
                  .public_extra = pub};
    if (rpc_srv_start(&h->rs, &o) != 0)
        return -1;
    h->port = th_test_log_port(h->rs.log, "(Streamable HTTP) on http");
    if (!h->port)
        rpc_dump_log(&h->rs);
    return h->port ? 0 : -1;
}

/* One request on its own connection: the status (0: none within the
 * wait), the text in *out (caller frees) when out is not NULL. */
static int post(unsigned port, const char *sid, const char *body, char **out)
{
    int fd = th_test_tcp_connect(port, 0);
    if (fd < 0)
        return -1;
    char hdrs[256];
    snprintf(hdrs, sizeof hdrs,
             "Authorization: Bearer " TOKEN "\r\n"
             "%s%s%s"
             "MCP-Protocol-Version: 2025-11-25\r\n",
             sid ? "Mcp-Session-Id: " : "", sid ? sid : "", sid ? "\r\n" : "");
    /* The host may answer (413) and close before the body is all sent:
     * a body cut short is read on all the same. */
    if (th_test_http_send(fd, "POST", "/mcp", hdrs, body) < 0) {
        close(fd);
        return -1;
    }
    char *t = NULL;
    int st = th_test_http_read(fd, NULL, rpc_wait_ms(), &t);
    close(fd);
    if (out)
        *out = t;
    else
        free(t);
    return st;
}

static int hs_session(hsrv *h, char sid[80])
{
    char *t = NULL;
    int st = post(h->port, NULL,
                  "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
                  "\"params\":{\"protocolVersion\":\"2025-11-25\","
                  "\"capabilities\":{},\"clientInfo\":{\"name\":\"f\","
                  "\"version\":\"1\"}}}",
                  &t);
    sid[0] = '\0';
    const char *p = t ? strcasestr(t, "Mcp-Session-Id: ") : NULL;
    if (st == 200 && p)
        sscanf(p + 16, "%79[0-9a-f]", sid);
    free(t);
    if (!sid[0])
        return -1;
    post(h->port, sid,
         "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
         NULL);
    return 0;
}

/* A normal call on a fresh session answers. */
static bool hs_healthy(hsrv *h)
{
    char sid[80];
    if (hs_session(h, sid) != 0)
        return false;
    char *t = NULL;
    int st = post(h->port, sid,
                  "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\","
                  "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":"
                  "\"healthy\"}}}",
                  &t);
    bool ok = st == 200 && t && strstr(t, "healthy");
    if (!ok)
        fprintf(stderr, "\nnot healthy: %d %.1000s\n", st, t ? t : "");
    free(t);
    return ok;
}

static void test_http_random_bytes(void)
{
    hsrv h;
    CU_ASSERT_FATAL(hs_start(&h, NULL) == 0);
    unsigned seed = 5;
    int rounds = rpc_scale(20);
    for (int r = 0; r < rounds; r++) {
        uint8_t b[4096];
        for (size_t i = 0; i < sizeof b; i++) {
            seed = seed * 1103515245u + 12345u;
            b[i] = (uint8_t)(seed >> 16);
        }
        int fd = th_test_tcp_connect(h.port, 0);
        CU_ASSERT_FATAL(fd >= 0);
        if (r % 2) /* half of them after a valid request line */
            send(fd, "POST /mcp HTTP/1.1\r\n", 20, MSG_NOSIGNAL);
        send(fd, b, sizeof b, MSG_NOSIGNAL);
        close(fd);
    }
    /* A random JSON-RPC body on a session: a parse error, not a crash. */
    char sid[80];
    CU_ASSERT_FATAL(hs_session(&h, sid) == 0);
    char *t = NULL;
    int st = post(h.port, sid, "{\"jsonrpc\":\"2.0\",\"id\":3,\x01\xff", &t);
    CU_ASSERT(st == 400 || st == 200);
    free(t);
    CU_ASSERT(hs_healthy(&h));
    CU_ASSERT(rpc_alive(&h.rs));
    CU_ASSERT_EQUAL(rpc_srv_stop(&h.rs, SIGTERM), 0);
    rpc_srv_free(&h.rs);
}

/* An over-long body (413 at mcp.max_body), a truncated one (the client
 * hangs up): the endpoint still serves. */
static void test_http_long_and_truncated(void)
{
    hsrv h;
    CU_ASSERT_FATAL(hs_start(&h, "  max_body: 16KiB\n") == 0);
    char sid[80];
    CU_ASSERT_FATAL(hs_session(&h, sid) == 0);
    size_t n = 1 << 20;
    char *big = malloc(n + 1);
    CU_ASSERT_FATAL(big != NULL);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    big[n] = '\0';
    CU_ASSERT_EQUAL(post(h.port, sid, big, NULL), 413);
    free(big);
    /* Content-Length says more than comes. */
    int fd = th_test_tcp_connect(h.port, 0);
    CU_ASSERT_FATAL(fd >= 0);
    char head[512];
    int k = snprintf(head, sizeof head,
                     "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                     TOKEN "\r\nMcp-Session-Id: %s\r\nContent-Type: "
                     "application/json\r\nContent-Length: 4000\r\n\r\n"
                     "{\"jsonrpc\":\"2.0\",\"id\":",
                     sid);
    CU_ASSERT(send(fd, head, (size_t)k, MSG_NOSIGNAL) == k);
    close(fd);
    CU_ASSERT(hs_healthy(&h));
    CU_ASSERT_EQUAL(rpc_srv_stop(&h.rs, SIGTERM), 0);
    rpc_srv_free(&h.rs);
}

/* 200 connect/disconnect cycles, half leaving a request behind. */
static void test_http_connect_cycles(void)
{
    hsrv h;
    CU_ASSERT_FATAL(hs_start(&h, NULL) == 0);
    int n = rpc_scale(200), failed = 0;
    for (int i = 0; i < n; i++) {
        int fd = th_test_tcp_connect(h.port, 0);
        if (fd < 0) {
            failed++;
            continue;
        }
        if (i % 2)
            send(fd, "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                     "\r\n{}", 51, MSG_NOSIGNAL);
        close(fd);
    }
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT(hs_healthy(&h));
    CU_ASSERT(rpc_alive(&h.rs));
    CU_ASSERT_EQUAL(rpc_srv_stop(&h.rs, SIGTERM), 0);
    rpc_srv_free(&h.rs);
}

/* A client that hangs up while its call runs: the call is cancelled (a
 * log line), nothing waits on it, the endpoint serves the next. */
static void test_http_vanishes_mid_call(void)
{
    hsrv h;
    CU_ASSERT_FATAL(hs_start(&h, NULL) == 0);
    char sid[80];
    CU_ASSERT_FATAL(hs_session(&h, sid) == 0);
    int fd = th_test_tcp_connect(h.port, 0);
    CU_ASSERT_FATAL(fd >= 0);
    const char body[] =
        "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo_async\",\"arguments\":{\"text\":\"x\",\"steps\":"
        "1000,\"delay_ms\":20}}}";
    char head[1024];
    int k = snprintf(head, sizeof head,
                     "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                     TOKEN "\r\nMcp-Session-Id: %s\r\nContent-Type: "
                     "application/json\r\nAccept: application/json, "
                     "text/event-stream\r\nContent-Length: %zu\r\n\r\n%s",
                     sid, sizeof body - 1, body);
    CU_ASSERT(send(fd, head, (size_t)k, MSG_NOSIGNAL) == k);
    /* the call runs (host.stats manager.running), then the client hangs
     * up: an event, not a 300 ms sleep */
    CU_ASSERT(rpc_wait_running(&h.rs, 1));
    close(fd);
    bool cancelled = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!cancelled && rpc_now_ms() < end) {
        cancelled = log_has(h.rs.log, "hung up: cancelled") &&
                    log_has(h.rs.log, "echo_async cancelled");
        if (!cancelled)
            usleep(50 * 1000);
    }
    CU_ASSERT(cancelled);
    if (!cancelled)
        rpc_dump_log(&h.rs);
    CU_ASSERT(hs_healthy(&h));
    CU_ASSERT_EQUAL(rpc_srv_stop(&h.rs, SIGTERM), 0);
    rpc_srv_free(&h.rs);
}

void th_suite_mcp_fault(void)
{
    CU_pSuite s = CU_add_suite("mcp_fault", NULL, NULL);
    CU_add_test(s, "stdio_random_bytes", test_stdio_random_bytes);
    CU_add_test(s, "stdio_long_and_truncated", test_stdio_long_and_truncated);
    CU_add_test(s, "stdio_never_reads", test_stdio_never_reads);
    CU_add_test(s, "stdio_vanishes_mid_call", test_stdio_vanishes_mid_call);
    CU_add_test(s, "http_random_bytes", test_http_random_bytes);
    CU_add_test(s, "http_long_and_truncated", test_http_long_and_truncated);
    CU_add_test(s, "http_connect_cycles", test_http_connect_cycles);
    CU_add_test(s, "http_vanishes_mid_call", test_http_vanishes_mid_call);
}
