/* test_mcp_http_pool.c - the MCP HTTP front serves its connections on a
 * bounded pool of threads (mcp.http_threads), not a thread each, against
 * the real `toolhost serve` over raw loopback TCP:
 *
 *   idle_conns     300 idle connections, 20 stuck in the middle of their
 *                  request head and 40 open event streams (suspended, with
 *                  nothing to send) leave the host's thread count
 *                  (/proc/PID/status Threads) within a fixed few of what
 *                  it was before them; a real client is answered
 *                  meanwhile, also as an event stream (progress);
 *   hangup_wait    a POST whose client hangs up while its call runs (the
 *                  connection suspended) cancels the call; many such, and
 *                  clients closing right after sending, leave the host
 *                  serving (resume racing the close);
 *   pipelined      two requests sent back to back on one keep-alive
 *                  connection, the first waiting on a slow call, are both
 *                  answered, in order;
 *   sse_close_race event streams closed (or reset) while workers send
 *                  progress to them: each message wakes the connection as
 *                  it closes; the host keeps serving.
 *
 * The crowd connects from 127.0.0.2 (all of 127/8 is loopback). */
#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>

#include "common/th_http.h"
#include "integration/test_rpc_harness.h"

#define TOKEN "pool-token-0123456789abcdef"
#define TOKEN_ENV "TH_MCP_POOL_TOKEN"
#define AUTH "Authorization: Bearer " TOKEN "\r\n"
#define INIT_BODY                                                             \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"  \
    "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"               \
    "\"clientInfo\":{\"name\":\"raw\",\"version\":\"1\"}}}"

typedef struct mp_srv {
    rpc_srv rs;
    unsigned port;
} mp_srv;

static int mp_start(mp_srv *m, const char *mcp)
{
    memset(m, 0, sizeof *m);
    setenv(TOKEN_ENV, TOKEN, 1);
    char mcp_sec[2048];
    snprintf(mcp_sec, sizeof mcp_sec,
             "mcp:\n"
             "  tokens:\n"
             "    - {user: pool, env: " TOKEN_ENV "}\n"
             "%s",
             mcp ? mcp : "");
    rpc_opts o = {.host_extra = "  listen: [\"http://127.0.0.1:0/mcp\"]\n",
                  .plugins_extra = mcp_sec,
                  .public_extra = "    allow_users: [pool]\n"};
    if (rpc_srv_start(&m->rs, &o) != 0)
        return -1;
    m->port = th_test_log_port(m->rs.log, "(Streamable HTTP) on http");
    if (!m->port) {
        rpc_dump_log(&m->rs);
        return -1;
    }
    return 0;
}

static void mp_free(mp_srv *m)
{
    rpc_srv_free(&m->rs);
    unsetenv(TOKEN_ENV);
}


/* A request's text: `hdrs` header lines, `body` (NULL: none). */
static int req_text(char *out, size_t cap, const char *method,
                    const char *hdrs, const char *body, bool keep)
{
    return snprintf(out, cap,
                    "%s /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n%s"
                    "Accept: application/json, text/event-stream\r\n"
                    AUTH "%s%sContent-Length: %zu\r\n\r\n%s",
                    method, keep ? "" : "Connection: close\r\n",
                    hdrs ? hdrs : "",
                    body ? "Content-Type: application/json\r\n" : "",
                    body ? strlen(body) : 0, body ? body : "");
}

/* Reads until `until` appears, EOF or timeout_ms; the text (malloc). */
static char *read_until(int fd, const char *until, int timeout_ms)
{
    size_t cap = 65536, len = 0;
    char *t = calloc(1, cap);
    int64_t end = rpc_now_ms() + timeout_ms;
    while (!(until && strstr(t, until))) {
        int left = (int)(end - rpc_now_ms());
        if (left <= 0)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0)
            break;
        if (len + 4097 > cap)
            t = realloc(t, cap *= 2);
        ssize_t n = read(fd, t + len, 4096);
        if (n <= 0)
            break;
        len += (size_t)n;
        t[len] = '\0';
    }
    return t;
}

/* One request on a connection of its own from 127.0.0.1: the answer's
 * text (malloc, never NULL). */
static char *roundtrip(unsigned port, const char *method, const char *hdrs,
                       const char *body)
{
    char req[4096];
    int fd = th_test_tcp_from(port, 1);
    if (fd < 0)
        return strdup("");
    int n = req_text(req, sizeof req, method, hdrs, body, false);
    char *t = th_test_send_all(fd, req, (size_t)n) == 0
                  ? read_until(fd, NULL, rpc_wait_ms())
                  : strdup("");
    close(fd);
    return t;
}

static bool has(const char *text, const char *needle)
{
    bool ok = text && strstr(text, needle);
    if (!ok)
        fprintf(stderr, "\nno '%s' in:\n%.1500s\n", needle,
                text ? text : "(null)");
    return ok;
}

/* A new session: its "Mcp-Session-Id: ...\r\n" header line in h. */
static int new_session(unsigned port, char *h, size_t cap)
{
    char *t = roundtrip(port, "POST", NULL, INIT_BODY);
    const char *p = strcasestr(t, "Mcp-Session-Id: ");
    int rc = -1;
    if (p) {
        p += 16;
        size_t n = strcspn(p, "\r\n");
        snprintf(h, cap, "Mcp-Session-Id: %.*s\r\n", (int)n, p);
        rc = 0;
    } else {
        fprintf(stderr, "\ninitialize: %.500s\n", t);
    }
    free(t);
    return rc;
}

static long proc_field(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long v = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':')
            v = atol(line + kl + 1);
    if (f)
        fclose(f);
    return v;
}

/* Open fds of the process. */
static int proc_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    int n = 0;
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n - 2;
}

/* Waits until the host holds at least `want` fds (it accepted the
 * crowd): true, or false at the deadline. */
static bool wait_fds(pid_t pid, int want)
{
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (proc_fds(pid) < want) {
        if (rpc_now_ms() >= end)
            return false;
        usleep(20 * 1000);
    }
    return true;
}

#define N_IDLE 300
#define N_HEAD 20
#define N_SSE 40
/* Threads the crowd may add: none is per connection; a worker or two
 * may start for the real client's calls. */
#define SLACK 4

static void test_idle_conns(void)
{
    mp_srv m;
    CU_ASSERT_FATAL(mp_start(&m, "  max_connections: 1000\n"
                                 "  max_connections_per_address: 1000\n"
                                 "  max_streams: 64\n"
                                 "  header_timeout: 10m\n"
                                 "  keepalive: 1h\n") == 0);
    /* A session and a call first: the host's threads that any client
     * starts are there before the count. */
    char h[256];
    CU_ASSERT_FATAL(new_session(m.port, h, sizeof h) == 0);
    const char *call =
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\",\"arguments\":{\"text\":\"warm\"}}}";
    char *t = roundtrip(m.port, "POST", h, call);
    CU_ASSERT(has(t, "warm"));
    free(t);
    long before = proc_field(m.rs.pid, "Threads");
    int fds0 = proc_fds(m.rs.pid);
    CU_ASSERT_FATAL(before > 0);
    static int fd[N_IDLE + N_HEAD + N_SSE];
    int n = 0;
    for (int i = 0; i < N_IDLE; i++)
        if ((fd[n] = th_test_tcp_from(m.port, 2)) >= 0)
            n++;
    for (int i = 0; i < N_HEAD; i++) {
        if ((fd[n] = th_test_tcp_from(m.port, 2)) < 0)
            continue;
        static const char part[] = "POST /mcp HTTP/1.1\r\nHost: 127.0";
        th_test_send_all(fd[n], part, sizeof part - 1);
        n++;
    }
    /* Event streams of the session, each suspended with nothing to say. */
    int n_sse = 0;
    for (int i = 0; i < N_SSE; i++) {
        int s = th_test_tcp_from(m.port, 1);
        if (s < 0)
            continue;
        char req[1024];
        int k = req_text(req, sizeof req, "GET", h, NULL, false);
        th_test_send_all(s, req, (size_t)k);
        char *a = read_until(s, "text/event-stream", rpc_wait_ms());
        if (strstr(a, " 200 ")) {
            fd[n++] = s;
            n_sse++;
        } else {
            fprintf(stderr, "\nGET: %.300s\n", a);
            close(s);
        }
        free(a);
    }
    CU_ASSERT_EQUAL(n, N_IDLE + N_HEAD + N_SSE);
    CU_ASSERT_EQUAL(n_sse, N_SSE);
    /* (fds0 may count a connection of the warm-up still closing) */
    bool all_in = wait_fds(m.rs.pid, fds0 + N_IDLE + N_HEAD + N_SSE - 4);
    if (!all_in)
        fprintf(stderr, "\n  the host holds %d fds, %d before\n",
                proc_fds(m.rs.pid), fds0);
    CU_ASSERT(all_in);
    long during = proc_field(m.rs.pid, "Threads");
    fprintf(stderr, "\n  threads: %ld before, %ld with %d connections open "
            "(mcp.http_threads default)\n", before, during, n);
    CU_ASSERT(during <= before + SLACK);
    /* A real client is answered meanwhile, and still no thread each. */
    t = roundtrip(m.port, "POST", h,
                  "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\","
                  "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":"
                  "\"through the crowd\"}}}");
    CU_ASSERT(has(t, "HTTP/1.1 200"));
    CU_ASSERT(has(t, "through the crowd"));
    free(t);
    CU_ASSERT(proc_field(m.rs.pid, "Threads") <= before + SLACK);
    /* A call's progress as events of its POST's stream: each sent by a
     * worker, which resumes the suspended stream. */
    t = roundtrip(m.port, "POST", h,
                  "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":"
                  "\"tools/call\",\"params\":{\"name\":\"echo_async\","
                  "\"arguments\":{\"text\":\"streamed\",\"steps\":5,"
                  "\"delay_ms\":20},\"_meta\":{\"progressToken\":7}}}");
    CU_ASSERT(has(t, "text/event-stream"));
    CU_ASSERT(has(t, "notifications/progress"));
    CU_ASSERT(has(t, "streamed"));
    free(t);
    CU_ASSERT(proc_field(m.rs.pid, "Threads") <= before + SLACK);
    for (int i = 0; i < n; i++)
        close(fd[i]);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mp_free(&m);
}

/* Clients that hang up while their call runs: each call is cancelled
 * (logged), and clients that close right after sending (the suspend and
 * the close racing) leave the host serving. */
static void test_hangup_wait(void)
{
    mp_srv m;
    CU_ASSERT_FATAL(mp_start(&m, "  http_threads: 2\n"
                                 "  max_connections_per_address: 1000\n")
                    == 0);
    char h[256];
    CU_ASSERT_FATAL(new_session(m.port, h, sizeof h) == 0);
    /* A long call, its client gone while it runs. */
    char req[2048];
    int fd = th_test_tcp_from(m.port, 1);
    CU_ASSERT_FATAL(fd >= 0);
    int k = req_text(req, sizeof req, "POST", h,
                     "{\"jsonrpc\":\"2.0\",\"id\":\"long\",\"method\":"
                     "\"tools/call\",\"params\":{\"name\":\"echo_async\","
                     "\"arguments\":{\"text\":\"x\",\"steps\":400,"
                     "\"delay_ms\":50}}}",
                     false);
    CU_ASSERT(th_test_send_all(fd, req, (size_t)k) == 0);
    /* The call runs (host.stats manager.running), its handler's
     * connection suspended; then the client hangs up. */
    CU_ASSERT(rpc_wait_running(&m.rs, 1));
    close(fd);
    CU_ASSERT(rpc_log_wait(&m.rs, "the client of request \"long\" hung up: "
                           "cancelled", rpc_wait_ms()));
    CU_ASSERT(rpc_log_wait(&m.rs, "cancelled by the client: the client "
                                  "hung up", rpc_wait_ms()));
    /* Many clients that send a call and close at once. */
    for (int i = 0; i < 200; i++) {
        int c = th_test_tcp_from(m.port, 1);
        if (c < 0)
            continue;
        char body[256];
        snprintf(body, sizeof body,
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\","
                 "\"params\":{\"name\":\"%s\",\"arguments\":{\"text\":\"r\""
                 "%s}}}",
                 100 + i, i % 2 ? "echo" : "echo_async",
                 i % 2 ? "" : ",\"steps\":2,\"delay_ms\":1");
        k = req_text(req, sizeof req, "POST", h, body, i % 3 == 0);
        th_test_send_all(c, req, (size_t)k);
        if (i % 4 == 0)
            shutdown(c, SHUT_WR);
        close(c);
    }
    /* Still serving. */
    char *t = roundtrip(m.port, "POST", h,
                        "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":"
                        "\"tools/call\",\"params\":{\"name\":\"echo\","
                        "\"arguments\":{\"text\":\"after the storm\"}}}");
    if (!has(t, "after the storm"))
        rpc_dump_log(&m.rs);
    free(t);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mp_free(&m);
}

/* Two requests back to back on one keep-alive connection, the first
 * waiting (suspended) on a slower call: both answered, in order. */
static void test_pipelined(void)
{
    mp_srv m;
    CU_ASSERT_FATAL(mp_start(&m, "  http_threads: 2\n") == 0);
    char h[256];
    CU_ASSERT_FATAL(new_session(m.port, h, sizeof h) == 0);
    char two[4096];
    int a = req_text(two, sizeof two, "POST", h,
                     "{\"jsonrpc\":\"2.0\",\"id\":21,\"method\":"
                     "\"tools/call\",\"params\":{\"name\":\"echo_async\","
                     "\"arguments\":{\"text\":\"first\",\"steps\":3,"
                     "\"delay_ms\":30}}}",
                     true);
    int b = req_text(two + a, sizeof two - (size_t)a, "POST", h,
                     "{\"jsonrpc\":\"2.0\",\"id\":22,\"method\":"
                     "\"tools/call\",\"params\":{\"name\":\"echo\","
                     "\"arguments\":{\"text\":\"second\"}}}",
                     false);
    int fd = th_test_tcp_from(m.port, 1);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT(th_test_send_all(fd, two, (size_t)(a + b)) == 0);
    char *t = read_until(fd, NULL, rpc_wait_ms());
    close(fd);
    const char *p1 = strstr(t, "first"), *p2 = strstr(t, "second");
    CU_ASSERT(has(t, "first") && has(t, "second"));
    CU_ASSERT(p1 && p2 && p1 < p2);
    free(t);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mp_free(&m);
}

/* Event streams whose clients close while workers send to them (each
 * progress message wakes the stream's connection: the wake races the
 * close, the connection record must outlive it): the host keeps serving,
 * and under ASan nothing is used after it is freed. */
#define N_RACE 16

static void test_sse_close_race(void)
{
    mp_srv m;
    CU_ASSERT_FATAL(mp_start(&m, "  max_connections_per_address: 1000\n")
                    == 0);
    char h[256];
    CU_ASSERT_FATAL(new_session(m.port, h, sizeof h) == 0);
    int id = 100;
    for (int round = 0; round < 6; round++) {
        int fd[N_RACE];
        for (int i = 0; i < N_RACE; i++) {
            char body[512], req[2048];
            snprintf(body, sizeof body,
                     "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":"
                     "\"tools/call\",\"params\":{\"name\":\"echo_async\","
                     "\"arguments\":{\"text\":\"race\",\"steps\":40,"
                     "\"delay_ms\":1},\"_meta\":{\"progressToken\":%d}}}",
                     id, id);
            id++;
            fd[i] = th_test_tcp_from(m.port, 1);
            CU_ASSERT_FATAL(fd[i] >= 0);
            int k = req_text(req, sizeof req, "POST", h, body, false);
            CU_ASSERT(th_test_send_all(fd[i], req, (size_t)k) == 0);
        }
        for (int i = 0; i < N_RACE; i++) {
            /* Some leave at the first progress, some before any answer,
             * some with a reset. */
            if (i % 3 != 0) {
                char *a = read_until(fd[i], "notifications/progress",
                                     rpc_wait_ms());
                free(a);
            }
            if (i % 4 == 1) {
                struct linger lg = {.l_onoff = 1, .l_linger = 0};
                setsockopt(fd[i], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            }
            close(fd[i]);
        }
    }
    char *t = roundtrip(m.port, "POST", h,
                        "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":"
                        "\"tools/call\",\"params\":{\"name\":\"echo\","
                        "\"arguments\":{\"text\":\"after the race\"}}}");
    if (!has(t, "after the race"))
        rpc_dump_log(&m.rs);
    free(t);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mp_free(&m);
}

void th_suite_mcp_http_pool(void)
{
    CU_pSuite s = CU_add_suite("mcp_http_pool", NULL, NULL);
    CU_add_test(s, "idle_conns", test_idle_conns);
    CU_add_test(s, "hangup_wait", test_hangup_wait);
    CU_add_test(s, "pipelined", test_pipelined);
    CU_add_test(s, "sse_close_race", test_sse_close_race);
}
