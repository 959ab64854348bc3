/* bench/mcp_load.c - the project's own MCP load driver: JSON lines over
 * pipes (MCP over stdio), written in C so that the driver is not what
 * limits the figure (the official TypeScript client tops out near 36k
 * calls/s, bench/mcp/run.mjs).  It measures what each server can take.
 *
 * Servers, each spawned with its stdin and stdout on pipes, stderr to
 * /dev/null, initialized (initialize + notifications/initialized), then
 * driven with `tools/call` of `echo` {"text": "hello N"}:
 *   c-line     this program re-run as a trivial C JSON-line server (finds
 *              the id and the text, writes the answer): the driver's own
 *              ceiling
 *   line       bench/mcp/line_server.mjs, the trivial Node server (the
 *              official client's ceiling in run.mjs)
 *   sdk        bench/mcp/sdk_server.mjs, the SDK's own stdio McpServer
 *   toolhost   build/toolhost mcp -c configs/default.yaml --log-level warn
 * Figures: sequential round trip p50/p99 (one call at a time) and calls/s
 * with 64 calls in flight (a new request is written for each answer read,
 * all the requests of one read in one write).  Every answer is checked
 * (its id is one in flight, its text is "hello N", isError false).
 * Every server gets the same number of calls (a short run would catch
 * Node's servers before its JIT warms up).  Beside calls/s, each server's
 * own CPU time per call (user + system of the child, from wait4, over all
 * its calls): on a shared machine the calls/s a server reaches depends on
 * the CPU the others leave it, its CPU per call much less.
 * Target (issue 13): toolhost >= 10x the SDK server's calls/s, over stdio
 * and over Streamable HTTP.
 * The Node servers are skipped (a line says why) when node or the SDK
 * (tests/mcp/node_modules) is missing.
 *
 * Usage: build/bench/mcp_load [BUILD_DIR]; TH_BENCH_QUICK=1 for a short
 * run; TH_BENCH_ONLY=NAME runs one server; TH_BENCH_TOOLHOST=PROGRAM runs
 * PROGRAM instead of build/toolhost (a profiler's wrapper).  `build/bench/mcp_load --line-server` is the c-line server. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "bench.h"

extern char **environ;

#define INFLIGHT 64
#define IO_TIMEOUT_MS 20000

/* ---- the c-line server ------------------------------------------------------ */

/* Writes all of p or exits. */
static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                struct pollfd pf = {.fd = fd, .events = POLLOUT};
                if (poll(&pf, 1, IO_TIMEOUT_MS) <= 0)
                    bench_die("write: the other side reads nothing");
                continue;
            }
            bench_die("write: %s", strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
}

/* The value of "KEY": in a line as the raw text (a number, or a string
 * without its quotes); 0 when missing. */
static size_t json_field(const char *line, size_t n, const char *key,
                         const char **val)
{
    char pat[64];
    int pl = snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = memmem(line, n, pat, (size_t)pl);
    if (!p)
        return 0;
    p += pl;
    const char *end = line + n;
    while (p < end && *p == ' ')
        p++;
    if (p < end && *p == '"') {
        const char *q = memchr(p + 1, '"', (size_t)(end - p - 1));
        if (!q)
            return 0;
        *val = p + 1;
        return (size_t)(q - p - 1);
    }
    const char *q = p;
    while (q < end && *q != ',' && *q != '}')
        q++;
    *val = p;
    return (size_t)(q - p);
}

static int line_server(void)
{
    static char in[1 << 16];
    th_buf line, out;
    th_buf_init(&line);
    th_buf_init(&out);
    for (;;) {
        ssize_t r = read(0, in, sizeof in);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        const char *p = in, *end = in + r;
        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t k = nl ? (size_t)(nl - p) : (size_t)(end - p);
            if (th_buf_append(&line, p, k) != 0)
                bench_die("out of memory");
            if (!nl)
                break;
            p = nl + 1;
            const char *l = (const char *)line.data, *id = NULL, *m = NULL,
                       *t = NULL;
            size_t idn = json_field(l, line.len, "id", &id);
            size_t mn = json_field(l, line.len, "method", &m);
            int e = 0;
            if (idn && mn == 10 && memcmp(m, "tools/call", 10) == 0) {
                size_t tn = json_field(l, line.len, "text", &t);
                e = th_buf_printf(&out,
                                  "{\"jsonrpc\":\"2.0\",\"id\":%.*s,\"result\":"
                                  "{\"content\":[{\"type\":\"text\",\"text\":"
                                  "\"%.*s\"}],\"isError\":false}}\n",
                                  (int)idn, id, (int)tn, t ? t : "");
            } else if (idn && mn == 10 && memcmp(m, "initialize", 10) == 0) {
                e = th_buf_printf(&out,
                                  "{\"jsonrpc\":\"2.0\",\"id\":%.*s,\"result\":"
                                  "{\"protocolVersion\":\"2025-06-18\","
                                  "\"capabilities\":{\"tools\":{}},"
                                  "\"serverInfo\":{\"name\":\"c-line\","
                                  "\"version\":\"1\"}}}\n",
                                  (int)idn, id);
            } else if (idn) {
                e = th_buf_printf(&out,
                                  "{\"jsonrpc\":\"2.0\",\"id\":%.*s,"
                                  "\"result\":{}}\n",
                                  (int)idn, id);
            }
            if (e < 0)
                bench_die("out of memory");
            th_buf_reset(&line);
        }
        if (out.len) {
            write_all(1, (const char *)out.data, out.len);
            th_buf_reset(&out);
        }
    }
    th_buf_destroy(&line);
    th_buf_destroy(&out);
    return 0;
}

/* ---- the driver --------------------------------------------------------------- */

typedef struct server {
    const char *name;
    char *argv[8];
    pid_t pid;
    int to, from;       /* its stdin (we write), its stdout (we read) */
    th_buf in;          /* bytes read, not yet a whole line */
    double cpu_s;       /* its user + system time, at its end */
} server;

/* Reaps pid (WNOHANG when `nohang`), adding its CPU time to *cpu_s.
 * True when it was reaped. */
static bool reap(pid_t pid, bool nohang, double *cpu_s)
{
    int st;
    struct rusage ru;
    if (wait4(pid, &st, nohang ? WNOHANG : 0, &ru) != pid)
        return false;
    *cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
             (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    return true;
}

static void server_start(server *s)
{
    int a[2], b[2];
    if (pipe2(a, O_CLOEXEC) != 0 || pipe2(b, O_CLOEXEC) != 0)
        bench_die("pipe: %s", strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, a[0], 0);
    posix_spawn_file_actions_adddup2(&fa, b[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawn(&s->pid, s->argv[0], &fa, NULL, s->argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        bench_die("spawn %s: %s", s->argv[0], strerror(rc));
    close(a[0]);
    close(b[1]);
    s->to = a[1];
    s->from = b[0];
    fcntl(s->from, F_SETFL, fcntl(s->from, F_GETFL) | O_NONBLOCK);
    th_buf_init(&s->in);
}

static void server_stop(server *s)
{
    close(s->to); /* end of input: the server exits */
    for (int i = 0; i < 500; i++) {
        if (reap(s->pid, true, &s->cpu_s)) {
            s->pid = 0;
            break;
        }
        usleep(10000);
    }
    if (s->pid) {
        kill(s->pid, SIGKILL);
        reap(s->pid, false, &s->cpu_s);
    }
    close(s->from);
    th_buf_destroy(&s->in);
}

/* Reads what is there (waiting up to the timeout for something). */
static void server_read(server *s)
{
    struct pollfd pf = {.fd = s->from, .events = POLLIN};
    int pr = poll(&pf, 1, IO_TIMEOUT_MS);
    if (pr <= 0)
        bench_die("%s: no answer within %d ms", s->name, IO_TIMEOUT_MS);
    for (;;) {
        if (th_buf_reserve(&s->in, 65536) != 0)
            bench_die("out of memory");
        ssize_t r = read(s->from, s->in.data + s->in.len,
                         s->in.cap - s->in.len);
        if (r > 0) {
            s->in.len += (size_t)r;
            if (s->in.cap - s->in.len > 0)
                break;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            break;
        bench_die("%s: its output ended", s->name);
    }
}

/* Checks one answer line; returns its id. */
static long check_answer(const server *s, const char *l, size_t n)
{
    const char *v = NULL;
    size_t vn = json_field(l, n, "id", &v);
    if (!vn)
        bench_die("%s: an answer without an id: %.*s", s->name, (int)n, l);
    long id = strtol(v, NULL, 10);
    if (memmem(l, n, "\"isError\":true", 14))
        bench_die("%s: the call failed: %.*s", s->name, (int)n, l);
    char want[48];
    int wl = snprintf(want, sizeof want, "\"text\":\"hello %ld\"", id);
    if (!memmem(l, n, want, (size_t)wl))
        bench_die("%s: a wrong answer: %.*s", s->name, (int)(n > 300 ? 300 : n), l);
    return id;
}

static int request(th_buf *b, long id)
{
    return th_buf_printf(b,
                         "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":"
                         "\"tools/call\",\"params\":{\"name\":\"echo\","
                         "\"arguments\":{\"text\":\"hello %ld\"}}}\n",
                         id, id);
}

/* Takes whole lines out of s->in: calls fn for each answer with an id
 * (notifications are skipped); returns how many. */
static int take_lines(server *s, th_buf *next, long *next_id, long limit,
                      int *inflight)
{
    int got = 0;
    size_t off = 0;
    const char *d = (const char *)s->in.data;
    for (;;) {
        const char *nl = memchr(d + off, '\n', s->in.len - off);
        if (!nl)
            break;
        size_t n = (size_t)(nl - (d + off));
        if (memmem(d + off, n, "\"id\":", 5)) {
            check_answer(s, d + off, n);
            got++;
            (*inflight)--;
            if (next && *next_id < limit) {
                if (request(next, (*next_id)++) < 0)
                    bench_die("out of memory");
                (*inflight)++;
            }
        }
        off += n + 1;
    }
    memmove(s->in.data, s->in.data + off, s->in.len - off);
    s->in.len -= off;
    return got;
}

static void initialize(server *s)
{
    static const char init[] =
        "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":"
        "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"
        "\"clientInfo\":{\"name\":\"mcp_load\",\"version\":\"1\"}}}\n";
    static const char done[] =
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";
    write_all(s->to, init, sizeof init - 1);
    while (!memchr(s->in.data ? (const char *)s->in.data : "", '\n',
                   s->in.len))
        server_read(s);
    th_buf_reset(&s->in);
    write_all(s->to, done, sizeof done - 1);
}

typedef struct result {
    const char *name;
    bool ran;
    uint64_t p50_ns, p99_ns;
    double calls_s;
    double cpu_us;      /* the server's CPU time per call (all calls) */
} result;

static void drive(server *s, long seq, long par, result *res)
{
    server_start(s);
    initialize(s);
    th_buf req;
    th_buf_init(&req);
    long id = 1;
    int inflight = 0;
    /* warm up + sequential */
    long warm = seq / 10 + 10;
    uint64_t *lat = calloc((size_t)seq, sizeof *lat);
    if (!lat)
        bench_die("out of memory");
    for (long i = 0; i < warm + seq; i++) {
        th_buf_reset(&req);
        if (request(&req, id++) < 0)
            bench_die("out of memory");
        uint64_t t0 = bench_now_ns();
        write_all(s->to, (const char *)req.data, req.len);
        inflight = 1;
        while (inflight) {
            server_read(s);
            take_lines(s, NULL, NULL, 0, &inflight);
        }
        if (i >= warm)
            lat[i - warm] = bench_now_ns() - t0;
    }
    res->p50_ns = bench_quantile(lat, (size_t)seq, 0.5);
    res->p99_ns = bench_quantile(lat, (size_t)seq, 0.99);
    free(lat);
    /* INFLIGHT in flight */
    long end = id + par;
    th_buf_reset(&req);
    uint64_t t0 = bench_now_ns();
    while (inflight < INFLIGHT && id < end) {
        if (request(&req, id++) < 0)
            bench_die("out of memory");
        inflight++;
    }
    write_all(s->to, (const char *)req.data, req.len);
    while (inflight > 0) {
        server_read(s);
        th_buf_reset(&req);
        take_lines(s, &req, &id, end, &inflight);
        if (req.len)
            write_all(s->to, (const char *)req.data, req.len);
    }
    uint64_t wall = bench_now_ns() - t0;
    res->calls_s = (double)par / ((double)wall / 1e9);
    res->ran = true;
    th_buf_destroy(&req);
    server_stop(s);
    res->cpu_us = s->cpu_s * 1e6 / (double)(warm + seq + par);
}


/* ---- Streamable HTTP ------------------------------------------------------------ */

/* One keep-alive connection with at most one request in flight. */
typedef struct hconn {
    int fd;
    th_buf in;
    long id;            /* in flight, or 0 */
    uint64_t t0;
} hconn;

typedef struct hserver {
    const char *name;
    char *argv[10];
    pid_t pid;
    unsigned port;
    char sid[128];
    const char *token;  /* or NULL */
    double cpu_s;
} hserver;

static unsigned free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0)
        bench_die("free port: %s", strerror(errno));
    close(fd);
    return ntohs(a.sin_port);
}

static int tcp_open(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void hserver_start(hserver *s)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawn(&s->pid, s->argv[0], &fa, NULL, s->argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        bench_die("spawn %s: %s", s->argv[0], strerror(rc));
    for (int i = 0; i < 1000; i++) { /* up to 10 s */
        int fd = tcp_open(s->port);
        if (fd >= 0) {
            close(fd);
            return;
        }
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid)
            bench_die("%s: exited before listening", s->name);
        usleep(10000);
    }
    bench_die("%s: not listening on port %u", s->name, s->port);
}

static void hserver_stop(hserver *s)
{
    kill(s->pid, SIGTERM);
    for (int i = 0; i < 500; i++) {
        if (reap(s->pid, true, &s->cpu_s))
            return;
        usleep(10000);
    }
    kill(s->pid, SIGKILL);
    reap(s->pid, false, &s->cpu_s);
}

static void hpost(hserver *s, hconn *c, const char *body, size_t n)
{
    char head[768];
    int hl = snprintf(head, sizeof head,
                      "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n"
                      "Content-Type: application/json\r\n"
                      "Accept: application/json, text/event-stream\r\n"
                      "MCP-Protocol-Version: 2025-06-18\r\n"
                      "%s%s%s%s%s%s"
                      "Content-Length: %zu\r\n\r\n",
                      s->port, s->token ? "Authorization: Bearer " : "",
                      s->token ? s->token : "", s->token ? "\r\n" : "",
                      s->sid[0] ? "Mcp-Session-Id: " : "", s->sid,
                      s->sid[0] ? "\r\n" : "", n);
    th_buf b;
    th_buf_init(&b);
    if (th_buf_append(&b, head, (size_t)hl) != 0 ||
        th_buf_append(&b, body, n) != 0)
        bench_die("out of memory");
    write_all(c->fd, (const char *)b.data, b.len);
    th_buf_destroy(&b);
}

/* Whether c->in holds a whole response; then its status, the body (an
 * SSE stream's data lines or the JSON) in *body, and the bytes it took. */
static bool hresponse(hconn *c, int *status, th_buf *body, size_t *used,
                      char *sid, size_t sidsz)
{
    const char *d = (const char *)c->in.data;
    size_t n = c->in.len;
    const char *he = n ? memmem(d, n, "\r\n\r\n", 4) : NULL;
    if (!he)
        return false;
    size_t hlen = (size_t)(he - d) + 4;
    *status = atoi(d + 9);
    long clen = -1;
    bool chunked = false;
    for (const char *l = d; l < he;) {
        const char *e = memmem(l, (size_t)(he + 2 - l), "\r\n", 2);
        if (!e)
            break;
        if (strncasecmp(l, "content-length:", 15) == 0)
            clen = strtol(l + 15, NULL, 10);
        else if (strncasecmp(l, "transfer-encoding:", 18) == 0 &&
                 memmem(l, (size_t)(e - l), "chunked", 7))
            chunked = true;
        else if (sid && strncasecmp(l, "mcp-session-id:", 15) == 0) {
            const char *v = l + 15;
            while (*v == ' ')
                v++;
            snprintf(sid, sidsz, "%.*s", (int)(e - v), v);
        }
        l = e + 2;
    }
    th_buf_reset(body);
    if (!chunked) {
        if (clen < 0)
            clen = 0;
        if (n < hlen + (size_t)clen)
            return false;
        if (th_buf_append(body, d + hlen, (size_t)clen) != 0)
            bench_die("out of memory");
        *used = hlen + (size_t)clen;
        return true;
    }
    size_t off = hlen;
    for (;;) {
        const char *e = memmem(d + off, n - off, "\r\n", 2);
        if (!e)
            return false;
        long k = strtol(d + off, NULL, 16);
        size_t start = (size_t)(e - d) + 2;
        if (n < start + (size_t)k + 2)
            return false;
        if (k == 0) {
            *used = start + 2;
            return true;
        }
        if (th_buf_append(body, d + start, (size_t)k) != 0)
            bench_die("out of memory");
        off = start + (size_t)k + 2;
    }
}

/* Reads what c has (blocking up to the timeout). */
static void hread(const char *name, hconn *c)
{
    struct pollfd pf = {.fd = c->fd, .events = POLLIN};
    if (poll(&pf, 1, IO_TIMEOUT_MS) <= 0)
        bench_die("%s: no answer within %d ms", name, IO_TIMEOUT_MS);
    if (th_buf_reserve(&c->in, 65536) != 0)
        bench_die("out of memory");
    ssize_t r = read(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len);
    if (r <= 0)
        bench_die("%s: the connection closed", name);
    c->in.len += (size_t)r;
}

/* Sends body on c and waits for the answer; returns its status. */
static int hcall(hserver *s, hconn *c, const char *body, th_buf *out,
                 bool want_sid)
{
    hpost(s, c, body, strlen(body));
    int st;
    size_t used;
    while (!hresponse(c, &st, out, &used, want_sid ? s->sid : NULL,
                      sizeof s->sid))
        hread(s->name, c);
    memmove(c->in.data, c->in.data + used, c->in.len - used);
    c->in.len -= used;
    return st;
}

static void hcheck(const char *name, int status, const th_buf *body)
{
    if (status != 200)
        bench_die("%s: HTTP status %d: %.*s", name, status,
                  (int)(body->len > 300 ? 300 : body->len),
                  body->len ? (const char *)body->data : "");
    server fake = {.name = name};
    check_answer(&fake, (const char *)body->data, body->len);
}

static void hdrive(hserver *s, long seq, long par, int nconn, result *res)
{
    hserver_start(s);
    hconn *cs = calloc((size_t)nconn, sizeof *cs);
    if (!cs)
        bench_die("out of memory");
    for (int i = 0; i < nconn; i++) {
        cs[i].fd = tcp_open(s->port);
        if (cs[i].fd < 0)
            bench_die("%s: connect: %s", s->name, strerror(errno));
        th_buf_init(&cs[i].in);
    }
    th_buf body, req;
    th_buf_init(&body);
    th_buf_init(&req);
    s->sid[0] = '\0';
    int st = hcall(s, &cs[0],
                   "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\","
                   "\"params\":{\"protocolVersion\":\"2025-06-18\","
                   "\"capabilities\":{},\"clientInfo\":{\"name\":"
                   "\"mcp_load\",\"version\":\"1\"}}}",
                   &body, true);
    if (st != 200 || !s->sid[0])
        bench_die("%s: initialize: status %d, session id '%s'", s->name, st,
                  s->sid);
    hcall(s, &cs[0],
          "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
          &body, false);
    long id = 1, warm = seq / 10 + 10;
    uint64_t *lat = calloc((size_t)seq, sizeof *lat);
    if (!lat)
        bench_die("out of memory");
    for (long i = 0; i < warm + seq; i++) {
        th_buf_reset(&req);
        if (request(&req, id++) < 0)
            bench_die("out of memory");
        req.len--; /* no newline */
        req.data[req.len] = '\0';
        uint64_t t0 = bench_now_ns();
        st = hcall(s, &cs[0], (const char *)req.data, &body, false);
        uint64_t t = bench_now_ns() - t0;
        hcheck(s->name, st, &body);
        if (i >= warm)
            lat[i - warm] = t;
    }
    res->p50_ns = bench_quantile(lat, (size_t)seq, 0.5);
    res->p99_ns = bench_quantile(lat, (size_t)seq, 0.99);
    free(lat);
    /* nconn connections, one request in flight on each */
    struct pollfd *pf = calloc((size_t)nconn, sizeof *pf);
    if (!pf)
        bench_die("out of memory");
    long end = id + par, done = 0;
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < nconn && id < end; i++) {
        th_buf_reset(&req);
        if (request(&req, id) < 0)
            bench_die("out of memory");
        cs[i].id = id++;
        hpost(s, &cs[i], (const char *)req.data, req.len - 1);
    }
    while (done < par) {
        for (int i = 0; i < nconn; i++)
            pf[i] = (struct pollfd){.fd = cs[i].id ? cs[i].fd : -1,
                                    .events = POLLIN};
        int pr = poll(pf, (nfds_t)nconn, IO_TIMEOUT_MS);
        if (pr <= 0)
            bench_die("%s: no answer within %d ms", s->name, IO_TIMEOUT_MS);
        for (int i = 0; i < nconn; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            hconn *c = &cs[i];
            if (th_buf_reserve(&c->in, 65536) != 0)
                bench_die("out of memory");
            ssize_t r = read(c->fd, c->in.data + c->in.len,
                             c->in.cap - c->in.len);
            if (r <= 0)
                bench_die("%s: the connection closed", s->name);
            c->in.len += (size_t)r;
            size_t used;
            if (!hresponse(c, &st, &body, &used, NULL, 0))
                continue;
            memmove(c->in.data, c->in.data + used, c->in.len - used);
            c->in.len -= used;
            hcheck(s->name, st, &body);
            done++;
            c->id = 0;
            if (id < end) {
                th_buf_reset(&req);
                if (request(&req, id) < 0)
                    bench_die("out of memory");
                c->id = id++;
                hpost(s, c, (const char *)req.data, req.len - 1);
            }
        }
    }
    uint64_t wall = bench_now_ns() - t0;
    res->calls_s = (double)par / ((double)wall / 1e9);
    res->ran = true;
    free(pf);
    for (int i = 0; i < nconn; i++) {
        close(cs[i].fd);
        th_buf_destroy(&cs[i].in);
    }
    free(cs);
    th_buf_destroy(&body);
    th_buf_destroy(&req);
    hserver_stop(s);
    res->cpu_us = s->cpu_s * 1e6 / (double)(warm + seq + par);
}

static bool have_node(char *node, size_t n)
{
    const char *path = getenv("PATH");
    if (!path)
        return false;
    char *dup = strdup(path), *save = NULL;
    bool ok = false;
    for (char *d = dup ? strtok_r(dup, ":", &save) : NULL; d && !ok;
         d = strtok_r(NULL, ":", &save)) {
        snprintf(node, n, "%s/node", d);
        ok = access(node, X_OK) == 0;
    }
    free(dup);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--line-server") == 0)
        return line_server();
    signal(SIGPIPE, SIG_IGN);
    const char *build = bench_build_dir(argc > 1 ? argv[1] : "build");
    const char *src = TH_SOURCE_DIR;
    long seq = bench_iters(5000, 10, 300);
    long par = bench_iters(200000, 10, 20000);
    bench_machine mach;
    bench_machine_get(&mach);
    bench_machine_print("mcp_load", &mach);
    printf("MCP over stdio (JSON lines on pipes), C driver: sequential %ld "
           "calls; %ld calls with %d in flight\n",
           seq, par, INFLIGHT);

    static char self[4096], node[4096], toolhost[4200], cfg[4096],
        line_js[4096], sdk_js[4096], sdk_dir[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        bench_die("readlink /proc/self/exe: %s", strerror(errno));
    self[sl] = '\0';
    const char *wrap = getenv("TH_BENCH_TOOLHOST"); /* e.g. a perf wrapper */
    snprintf(toolhost, sizeof toolhost, "%s", wrap && *wrap ? wrap : "");
    if (!*toolhost)
        snprintf(toolhost, sizeof toolhost, "%s/toolhost", build);
    snprintf(cfg, sizeof cfg, "%s/configs/default.yaml", src);
    snprintf(line_js, sizeof line_js, "%s/bench/mcp/line_server.mjs", src);
    snprintf(sdk_js, sizeof sdk_js, "%s/bench/mcp/sdk_server.mjs", src);
    snprintf(sdk_dir, sizeof sdk_dir,
             "%s/tests/mcp/node_modules/@modelcontextprotocol/sdk", src);
    bool node_ok = have_node(node, sizeof node);
    struct stat st;
    bool sdk_ok = node_ok && stat(sdk_dir, &st) == 0;
    if (!node_ok)
        printf("line, sdk: skipped: node is not installed\n");
    else if (!sdk_ok)
        printf("sdk: skipped: tests/mcp/node_modules is missing (npm ci in "
               "tests/mcp)\n");

    server sv[4] = {
        {.name = "c-line", .argv = {self, "--line-server", NULL}},
        {.name = "line", .argv = {node, line_js, NULL}},
        {.name = "sdk", .argv = {node, sdk_js, NULL}},
        {.name = "toolhost",
         .argv = {toolhost, "mcp", "-c", cfg, "--log-level", "warn", NULL}},
    };
    result res[4] = {{0}};
    for (int i = 0; i < 4; i++) {
        res[i].name = sv[i].name;
        if ((i == 1 && !node_ok) || (i == 2 && !sdk_ok))
            continue;
        const char *only = getenv("TH_BENCH_ONLY"); /* one server */
        if (only && *only && strcmp(only, sv[i].name) != 0)
            continue;
        /* The same count for every server: a short run would catch
         * Node's servers before its JIT has warmed up. */
        drive(&sv[i], seq, par, &res[i]);
    }

    printf("%-10s %10s %10s %12s %14s %14s %12s %14s\n", "server",
           "p50 us", "p99 us", "calls/s", "x c-line p50", "calls/s / sdk",
           "cpu us/call", "sdk cpu / cpu");
    for (int i = 0; i < 4; i++) {
        if (!res[i].ran)
            continue;
        char vs[32] = "";
        if (res[2].ran)
            snprintf(vs, sizeof vs, "%.2fx", res[i].calls_s / res[2].calls_s);
        char vc[32] = "-";
        if (res[0].ran)
            snprintf(vc, sizeof vc, "%.2fx",
                     (double)res[i].p50_ns / (double)res[0].p50_ns);
        char vu[32] = "";
        if (res[2].ran)
            snprintf(vu, sizeof vu, "%.2fx", res[2].cpu_us / res[i].cpu_us);
        printf("%-10s %10.1f %10.1f %12.0f %14s %14s %12.2f %14s\n",
               res[i].name, (double)res[i].p50_ns / 1e3,
               (double)res[i].p99_ns / 1e3, res[i].calls_s, vc, vs,
               res[i].cpu_us, vu);
    }
    /* Streamable HTTP: NCONN keep-alive connections, one call in flight
     * on each (HTTP/1.1 without pipelining), one session. */
    printf("\nMCP over Streamable HTTP, C driver: sequential %ld calls on "
           "one connection; %ld calls on %d connections, one in flight "
           "on each\n",
           seq / 2, par / 4, INFLIGHT);
    static char dir[] = "/tmp/th-mcp-load-XXXXXX", hcfg[4200], ports[3][16];
    if (!mkdtemp(dir))
        bench_die("mkdtemp: %s", strerror(errno));
    snprintf(hcfg, sizeof hcfg, "%s/bench.yaml", dir);
    unsigned hport[3];
    for (int i = 0; i < 3; i++) {
        hport[i] = free_port();
        snprintf(ports[i], sizeof ports[i], "%u", hport[i]);
    }
    FILE *cf = fopen(hcfg, "w");
    if (!cf)
        bench_die("%s: %s", hcfg, strerror(errno));
    fprintf(cf,
            "host:\n"
            "  log_level: warn\n"
            "  listen: [\"unix:%s/th.sock\", "
            "\"http://127.0.0.1:%u/mcp\"]\n"
            "plugins:\n"
            "  - name: echo\n"
            "    path: %s/plugins/echo.so\n"
            /* INFLIGHT (64) connections is the default per-address cap
             * itself: one more from 127.0.0.1 (the readiness probe, should
             * the server not have seen its close yet) and the last is
             * closed at accept */
            "mcp:\n"
            "  max_connections_per_address: 256\n"
            "  tokens:\n"
            "    - {user: bench, env: TH_BENCH_MCP_TOKEN}\n"
            "toolsets:\n"
            "  - name: default\n"
            "    tools: [\"*\"]\n",
            dir, hport[2], build);
    fclose(cf);
    setenv("TH_BENCH_MCP_TOKEN", "mcp-load-bench-token", 1);
    static char line_http_js[4200], sdk_http_js[4200];
    snprintf(line_http_js, sizeof line_http_js,
             "%s/bench/mcp/http_line_server.mjs", src);
    snprintf(sdk_http_js, sizeof sdk_http_js,
             "%s/bench/mcp/sdk_http_server.mjs", src);
    hserver hs[3] = {
        {.name = "line-http", .argv = {node, line_http_js, ports[0], NULL},
         .port = hport[0]},
        {.name = "sdk-http", .argv = {node, sdk_http_js, ports[1], NULL},
         .port = hport[1]},
        {.name = "toolhost-http",
         .argv = {toolhost, "serve", "-c", hcfg, "--log-level", "warn",
                  NULL},
         .port = hport[2], .token = "mcp-load-bench-token"},
    };
    result hres[3] = {{0}};
    for (int i = 0; i < 3; i++) {
        hres[i].name = hs[i].name;
        if ((i == 0 && !node_ok) || (i == 1 && !sdk_ok))
            continue;
        const char *only = getenv("TH_BENCH_ONLY");
        if (only && *only && strcmp(only, hs[i].name) != 0)
            continue;
        hdrive(&hs[i], seq / 2, par / 4, INFLIGHT, &hres[i]);
    }
    unlink(hcfg);
    rmdir(dir);
    printf("%-14s %10s %10s %12s %14s %14s %12s %14s\n", "server",
           "p50 us", "p99 us", "calls/s", "x line p50", "calls/s / sdk",
           "cpu us/call", "sdk cpu / cpu");
    for (int i = 0; i < 3; i++) {
        if (!hres[i].ran)
            continue;
        char vs[32] = "", vc[32] = "-";
        if (hres[1].ran)
            snprintf(vs, sizeof vs, "%.2fx", hres[i].calls_s / hres[1].calls_s);
        if (hres[0].ran)
            snprintf(vc, sizeof vc, "%.2fx",
                     (double)hres[i].p50_ns / (double)hres[0].p50_ns);
        char vu[32] = "";
        if (hres[1].ran)
            snprintf(vu, sizeof vu, "%.2fx",
                     hres[1].cpu_us / hres[i].cpu_us);
        printf("%-14s %10.1f %10.1f %12.0f %14s %14s %12.2f %14s\n",
               hres[i].name, (double)hres[i].p50_ns / 1e3,
               (double)hres[i].p99_ns / 1e3, hres[i].calls_s, vc, vs,
               hres[i].cpu_us, vu);
    }

    bench_json j;
    bench_json_begin(&j, "mcp_load", &mach);
    bench_json_num(&j, "seq", (double)seq);
    bench_json_num(&j, "par", (double)par);
    bench_json_num(&j, "inflight", INFLIGHT);
    for (int i = 0; i < 4; i++) {
        if (!res[i].ran)
            continue;
        char k[64];
        snprintf(k, sizeof k, "%s_p50_ns", res[i].name);
        bench_json_num(&j, k, (double)res[i].p50_ns);
        snprintf(k, sizeof k, "%s_p99_ns", res[i].name);
        bench_json_num(&j, k, (double)res[i].p99_ns);
        snprintf(k, sizeof k, "%s_calls_s", res[i].name);
        bench_json_num(&j, k, res[i].calls_s);
        snprintf(k, sizeof k, "%s_cpu_us", res[i].name);
        bench_json_num(&j, k, res[i].cpu_us);
    }
    for (int i = 0; i < 3; i++) {
        if (!hres[i].ran)
            continue;
        char k[64];
        snprintf(k, sizeof k, "%s_p50_ns", hres[i].name);
        bench_json_num(&j, k, (double)hres[i].p50_ns);
        snprintf(k, sizeof k, "%s_calls_s", hres[i].name);
        bench_json_num(&j, k, hres[i].calls_s);
        snprintf(k, sizeof k, "%s_cpu_us", hres[i].name);
        bench_json_num(&j, k, hres[i].cpu_us);
    }
    if (hres[1].ran && hres[2].ran)
        bench_target(&j, "http_vs_sdk",
                     "mcp http, C driver, 64 connections: toolhost calls/s "
                     "over the SDK HTTP server's",
                     hres[2].calls_s / hres[1].calls_s, 10, 0);
    if (res[2].ran && res[3].ran)
        bench_target(&j, "stdio_vs_sdk",
                     "mcp stdio, C driver, 64 in flight: toolhost calls/s "
                     "over the SDK server's",
                     res[3].calls_s / res[2].calls_s, 10, 0);
    else
        printf("mcp_load: the target against the SDK server is skipped (no "
               "SDK)\n");
    bench_json_end(&j);
    return 0;
}
