/* bench/rpc.c - msgpack-RPC over a Unix socket: `toolhost serve` driven by
 * a C client (raw sockets + msgpack-c), against a socketpair floor.
 *
 * Floor, in this process: the same request and response frames, packed and
 * unpacked with msgpack-c exactly as the client and a server must, bounced
 * over a socketpair between two threads (the echo thread unpacks the
 * request, reads the text, packs the response).  It is what any msgpack
 * RPC over a local socket costs before the host does anything.
 *
 * Figures (each as scheduled, and pinned when scripts/run-bench re-runs
 * the program under `taskset -c 0`; the server inherits the pinning):
 *   - one connection, sequential: round trip p50/p99, against the floor's
 *     sequential round trip (target <= 2x);
 *   - one connection, 64 calls in flight: calls/s (target >= 200,000),
 *     against the floor with 64 in flight;
 *   - 16 connections, one call in flight on each: calls/s.
 *
 * The server runs with log_level warn (the per-call info line would
 * otherwise be a write(2) per call to the log); see bench/README.md.
 */
#include <fcntl.h>
#include <msgpack.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "bench.h"

#define TEXT "hello"

/* ---- frames ----------------------------------------------------------------- */

/* [0, id, "tools.call", ["echo", {"text": TEXT}]] */
static void pack_request(msgpack_sbuffer *sb, uint64_t id)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 4);
    msgpack_pack_int(&pk, 0);
    msgpack_pack_uint64(&pk, id);
    msgpack_pack_str_with_body(&pk, "tools.call", 10);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_str_with_body(&pk, "echo", 4);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "text", 4);
    msgpack_pack_str_with_body(&pk, TEXT, sizeof TEXT - 1);
}

/* [0, id, "host.ping", []]: the front alone, no tool call */
static void pack_ping(msgpack_sbuffer *sb, uint64_t id)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 4);
    msgpack_pack_int(&pk, 0);
    msgpack_pack_uint64(&pk, id);
    msgpack_pack_str_with_body(&pk, "host.ping", 9);
    msgpack_pack_array(&pk, 0);
}

static const msgpack_object *map_get(const msgpack_object *m, const char *key)
{
    if (m->type != MSGPACK_OBJECT_MAP)
        return NULL;
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == kl &&
            memcmp(k->via.str.ptr, key, kl) == 0)
            return &m->via.map.ptr[i].val;
    }
    return NULL;
}

/* Checks a response [1, id, nil, {ok: true, stdout: TEXT...}]; returns its
 * msgid or dies. */
static uint64_t check_response(const msgpack_object *o)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 4 ||
        o->via.array.ptr[0].via.u64 != 1)
        bench_die("not a response");
    const msgpack_object *err = &o->via.array.ptr[2];
    if (err->type != MSGPACK_OBJECT_NIL)
        bench_die("the call failed (error in the response)");
    const msgpack_object *ok = map_get(&o->via.array.ptr[3], "ok");
    if (!ok || ok->type != MSGPACK_OBJECT_BOOLEAN || !ok->via.boolean)
        bench_die("the call did not return ok: true");
    return o->via.array.ptr[1].via.u64;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            bench_die("write: %s", strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
}

/* Reads once into the unpacker (blocking); dies at end of stream.
 * Returns the bytes read. */
static size_t read_some(int fd, msgpack_unpacker *up)
{
    if (!msgpack_unpacker_reserve_buffer(up, 65536))
        bench_die("out of memory");
    ssize_t r;
    do
        r = read(fd, msgpack_unpacker_buffer(up),
                 msgpack_unpacker_buffer_capacity(up));
    while (r < 0 && errno == EINTR);
    if (r <= 0)
        bench_die("connection closed (%s)", r < 0 ? strerror(errno) : "EOF");
    msgpack_unpacker_buffer_consumed(up, (size_t)r);
    return (size_t)r;
}

/* ---- the floor: an echo thread on a socketpair -------------------------------- */

static void *floor_echo(void *arg)
{
    int fd = *(int *)arg;
    msgpack_unpacker up;
    msgpack_unpacker_init(&up, 65536);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    for (;;) {
        if (!msgpack_unpacker_reserve_buffer(&up, 65536))
            break;
        ssize_t r = read(fd, msgpack_unpacker_buffer(&up),
                         msgpack_unpacker_buffer_capacity(&up));
        if (r <= 0)
            break;
        msgpack_unpacker_buffer_consumed(&up, (size_t)r);
        msgpack_sbuffer_clear(&out);
        while (msgpack_unpacker_next(&up, &u) == MSGPACK_UNPACK_SUCCESS) {
            /* what a server must do: read the id, method, args, the text */
            const msgpack_object *a = u.data.via.array.ptr;
            uint64_t id = a[1].via.u64;
            const msgpack_object *params = &a[3];
            const msgpack_object *text =
                map_get(&params->via.array.ptr[1], "text");
            msgpack_packer pk;
            msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
            msgpack_pack_array(&pk, 4);
            msgpack_pack_int(&pk, 1);
            msgpack_pack_uint64(&pk, id);
            msgpack_pack_nil(&pk);
            msgpack_pack_map(&pk, 4);
            msgpack_pack_str_with_body(&pk, "ok", 2);
            msgpack_pack_true(&pk);
            msgpack_pack_str_with_body(&pk, "stdout", 6);
            msgpack_pack_str_with_body(&pk, text->via.str.ptr,
                                       text->via.str.size);
            msgpack_pack_str_with_body(&pk, "stderr", 6);
            msgpack_pack_str_with_body(&pk, "", 0);
            msgpack_pack_str_with_body(&pk, "meta", 4);
            msgpack_pack_map(&pk, 0);
        }
        if (out.size)
            write_all(fd, out.data, out.size);
    }
    msgpack_sbuffer_destroy(&out);
    msgpack_unpacked_destroy(&u);
    msgpack_unpacker_destroy(&up);
    return NULL;
}

/* The floor for 16 connections: one thread serves n socketpairs with
 * epoll, as the server's loop serves its connections. */
typedef struct floor_many_arg {
    int *fds;
    int n;
} floor_many_arg;

static void *floor_echo_many(void *arg)
{
    floor_many_arg *a = arg;
    int n = a->n;
    msgpack_unpacker up[64];
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        bench_die("epoll_create1: %s", strerror(errno));
    for (int i = 0; i < n; i++) {
        if (!msgpack_unpacker_init(&up[i], 65536))
            bench_die("out of memory");
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, a->fds[i], &ev) != 0)
            bench_die("epoll_ctl: %s", strerror(errno));
    }
    int open = n;
    struct epoll_event evs[64];
    while (open > 0) {
        int k = epoll_wait(ep, evs, n, 10000);
        if (k <= 0)
            break;
        for (int e = 0; e < k; e++) {
            int i = (int)evs[e].data.u32;
            if (a->fds[i] < 0)
                continue;
            if (!msgpack_unpacker_reserve_buffer(&up[i], 65536))
                bench_die("out of memory");
            ssize_t r = read(a->fds[i], msgpack_unpacker_buffer(&up[i]),
                             msgpack_unpacker_buffer_capacity(&up[i]));
            if (r <= 0) {
                epoll_ctl(ep, EPOLL_CTL_DEL, a->fds[i], NULL);
                a->fds[i] = -1;
                open--;
                continue;
            }
            msgpack_unpacker_buffer_consumed(&up[i], (size_t)r);
            msgpack_sbuffer_clear(&out);
            while (msgpack_unpacker_next(&up[i], &u) ==
                   MSGPACK_UNPACK_SUCCESS) {
                const msgpack_object *o = u.data.via.array.ptr;
                const msgpack_object *text =
                    map_get(&o[3].via.array.ptr[1], "text");
                msgpack_packer pk;
                msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
                msgpack_pack_array(&pk, 4);
                msgpack_pack_int(&pk, 1);
                msgpack_pack_uint64(&pk, o[1].via.u64);
                msgpack_pack_nil(&pk);
                msgpack_pack_map(&pk, 4);
                msgpack_pack_str_with_body(&pk, "ok", 2);
                msgpack_pack_true(&pk);
                msgpack_pack_str_with_body(&pk, "stdout", 6);
                msgpack_pack_str_with_body(&pk, text->via.str.ptr,
                                           text->via.str.size);
                msgpack_pack_str_with_body(&pk, "stderr", 6);
                msgpack_pack_str_with_body(&pk, "", 0);
                msgpack_pack_str_with_body(&pk, "meta", 4);
                msgpack_pack_map(&pk, 0);
            }
            if (out.size)
                write_all(a->fds[i], out.data, out.size);
        }
    }
    close(ep);
    for (int i = 0; i < n; i++)
        msgpack_unpacker_destroy(&up[i]);
    msgpack_sbuffer_destroy(&out);
    msgpack_unpacked_destroy(&u);
    return NULL;
}

/* ---- the client loops ------------------------------------------------------------ */

typedef struct conn {
    int fd;
    msgpack_unpacker up;
    msgpack_unpacked u;
    msgpack_sbuffer sb;
    uint64_t next_id;
    uint64_t sent, done;
    uint64_t t_sent; /* sequential: when the request left */
} conn;

static void conn_init(conn *c, int fd)
{
    memset(c, 0, sizeof *c);
    c->fd = fd;
    if (!msgpack_unpacker_init(&c->up, 65536))
        bench_die("out of memory");
    msgpack_unpacked_init(&c->u);
    msgpack_sbuffer_init(&c->sb);
    c->next_id = 1;
}

static void conn_destroy(conn *c)
{
    msgpack_unpacker_destroy(&c->up);
    msgpack_unpacked_destroy(&c->u);
    msgpack_sbuffer_destroy(&c->sb);
    close(c->fd);
}

/* n sequential round trips; samples[i] = ns of each. */
static uint64_t run_sequential(conn *c, long n, uint64_t *samples)
{
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        msgpack_sbuffer_clear(&c->sb);
        uint64_t id = c->next_id++;
        pack_request(&c->sb, id);
        uint64_t a = bench_now_ns();
        write_all(c->fd, c->sb.data, c->sb.size);
        for (;;) {
            int rc = msgpack_unpacker_next(&c->up, &c->u);
            if (rc == MSGPACK_UNPACK_SUCCESS) {
                if (check_response(&c->u.data) != id)
                    bench_die("response to the wrong request");
                break;
            }
            if (rc < 0)
                bench_die("the server sent bytes that are not msgpack");
            read_some(c->fd, &c->up);
        }
        samples[i] = bench_now_ns() - a;
    }
    return bench_now_ns() - t0;
}

/* n requests with `depth` in flight on one connection: tools.call of
 * echo, or host.ping when `ping`; returns wall ns. */
static uint64_t run_pipelined_req(conn *c, long n, int depth, bool ping)
{
    uint64_t t0 = bench_now_ns();
    long sent = 0, done = 0;
    while (done < n) {
        msgpack_sbuffer_clear(&c->sb);
        while (sent - done < depth && sent < n) {
            if (ping)
                pack_ping(&c->sb, c->next_id++);
            else
                pack_request(&c->sb, c->next_id++);
            sent++;
        }
        if (c->sb.size)
            write_all(c->fd, c->sb.data, c->sb.size);
        read_some(c->fd, &c->up);
        int rc;
        while ((rc = msgpack_unpacker_next(&c->up, &c->u)) ==
               MSGPACK_UNPACK_SUCCESS) {
            const msgpack_object *o = &c->u.data;
            if (!ping)
                check_response(o);
            else if (o->type != MSGPACK_OBJECT_ARRAY ||
                     o->via.array.size != 4 ||
                     o->via.array.ptr[2].type != MSGPACK_OBJECT_NIL)
                bench_die("host.ping failed");
            done++;
        }
        if (rc < 0)
            bench_die("the server sent bytes that are not msgpack");
    }
    return bench_now_ns() - t0;
}

static uint64_t run_pipelined(conn *c, long n, int depth)
{
    return run_pipelined_req(c, n, depth, false);
}

/* n calls in total over nc connections, one in flight on each, driven by
 * epoll from this thread (poll() over 16 fds cost the client as much CPU
 * per call as the server's whole call); returns wall ns. */
static uint64_t run_many(conn *cs, int nc, long n)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        bench_die("epoll_create1: %s", strerror(errno));
    for (int i = 0; i < nc; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev) != 0)
            bench_die("epoll_ctl: %s", strerror(errno));
    }
    struct epoll_event evs[64];
    long sent = 0, done = 0;
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < nc && sent < n; i++) {
        msgpack_sbuffer_clear(&cs[i].sb);
        pack_request(&cs[i].sb, cs[i].next_id++);
        write_all(cs[i].fd, cs[i].sb.data, cs[i].sb.size);
        sent++;
    }
    while (done < n) {
        int k = epoll_wait(ep, evs, nc < 64 ? nc : 64, 10000);
        if (k <= 0)
            bench_die("no response within 10 s");
        for (int e = 0; e < k; e++) {
            int i = (int)evs[e].data.u32;
            read_some(cs[i].fd, &cs[i].up);
            int rc;
            while ((rc = msgpack_unpacker_next(&cs[i].up, &cs[i].u)) ==
                   MSGPACK_UNPACK_SUCCESS) {
                check_response(&cs[i].u.data);
                done++;
                if (sent < n) {
                    msgpack_sbuffer_clear(&cs[i].sb);
                    pack_request(&cs[i].sb, cs[i].next_id++);
                    write_all(cs[i].fd, cs[i].sb.data, cs[i].sb.size);
                    sent++;
                }
            }
            if (rc < 0)
                bench_die("the server sent bytes that are not msgpack");
        }
    }
    close(ep);
    return bench_now_ns() - t0;
}

/* ---- the server ---------------------------------------------------------------------- */

static char tmpdir[256];
static char sock_path[300];
static pid_t server_pid = -1;

static void stop_server(void)
{
    if (server_pid > 0) {
        kill(server_pid, SIGTERM);
        int st;
        for (int i = 0; i < 500; i++) { /* 5 s, then SIGKILL */
            if (waitpid(server_pid, &st, WNOHANG) == server_pid) {
                server_pid = -1;
                break;
            }
            usleep(10000);
        }
        if (server_pid > 0) {
            kill(server_pid, SIGKILL);
            waitpid(server_pid, &st, 0);
            server_pid = -1;
        }
    }
    if (tmpdir[0]) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "bench: could not remove %s\n", tmpdir);
        tmpdir[0] = '\0';
    }
}

static int connect_unix(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        bench_die("socket: %s", strerror(errno));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path)
        bench_die("socket path too long: %s", path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Starts `build`/toolhost serve.  `old`: a build from before the short
 * path (TH_BENCH_BASELINE), whose config knows no short_call_max. */
static const char *smax_over; /* short_call_max for the next server */

static void start_server_as(const char *build, bool old)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/th-bench-rpc-XXXXXX", base);
    if (!mkdtemp(tmpdir))
        bench_die("mkdtemp: %s", strerror(errno));
    atexit(stop_server);
    char cfg[400], log[400];
    snprintf(cfg, sizeof cfg, "%s/bench.yaml", tmpdir);
    snprintf(log, sizeof log, "%s/server.log", tmpdir);
    snprintf(sock_path, sizeof sock_path, "%s/s.sock", tmpdir);
    FILE *f = fopen(cfg, "w");
    if (!f)
        bench_die("%s: %s", cfg, strerror(errno));
    /* TH_BENCH_SHORT_MAX=1m: under valgrind a short tool's call takes
     * milliseconds and would be sent to workers (host.short_call_max) */
    const char *smax = smax_over ? smax_over : getenv("TH_BENCH_SHORT_MAX");
    char smax_line[80] = "";
    if (!old)
        snprintf(smax_line, sizeof smax_line, "  short_call_max: %s\n",
                 smax && *smax ? smax : "10ms");
    fprintf(f,
            "host:\n"
            "  log_level: warn\n"
            "%s"
            "plugins:\n"
            "  - name: echo\n"
            "    path: %s/plugins/echo.so\n"
            "toolsets:\n"
            "  - name: default\n"
            "    tools: [\"*\"]\n"
            "    run_code:\n"
            "      enabled: true\n",
            smax_line, build);
    fclose(f);
    char exe[4200], listen[400];
    snprintf(exe, sizeof exe, "%s/toolhost", build);
    snprintf(listen, sizeof listen, "unix:%s", sock_path);
    server_pid = fork();
    if (server_pid < 0)
        bench_die("fork: %s", strerror(errno));
    if (server_pid == 0) {
        int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (lfd >= 0) {
            dup2(lfd, 1);
            dup2(lfd, 2);
        }
        /* TH_BENCH_SERVER_WRAP="valgrind --tool=callgrind" (say) runs
         * the server under a profiler */
        const char *wrap = getenv("TH_BENCH_SERVER_WRAP");
        if (wrap && *wrap) {
            char cmd[9000];
            snprintf(cmd, sizeof cmd, "exec %s '%s' serve -c '%s' --listen '%s'",
                     wrap, exe, cfg, listen);
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        } else {
            execl(exe, exe, "serve", "-c", cfg, "--listen", listen,
                  (char *)NULL);
        }
        _exit(127);
    }
    for (int i = 0; i < 6000; i++) { /* 60 s (a profiler starts slowly) */
        int fd = connect_unix(sock_path);
        if (fd >= 0) {
            close(fd);
            return;
        }
        int st;
        if (waitpid(server_pid, &st, WNOHANG) == server_pid) {
            server_pid = -1;
            char cmd[500];
            snprintf(cmd, sizeof cmd, "cat '%s' >&2", log);
            if (system(cmd) != 0)
                fprintf(stderr, "(no log)\n");
            bench_die("toolhost serve exited before listening (log above)");
        }
        usleep(10000);
    }
    bench_die("toolhost serve did not listen on %s within 60 s", sock_path);
}

/* ---- programmatic tool calling: 100 calls in one run_code ------------------- */

#define CODE_CALLS 100
static void start_server(const char *build)
{
    start_server_as(build, false);
}

static const char code_script[] =
    "local n = 0\n"
    "for i = 1, 100 do n = n + #tools.echo{text = \"" TEXT "\"}.stdout end\n"
    "return n\n";

/* [0, id, "tools.call", ["run_code", {"code": code_script}]] */
static void pack_code_request(msgpack_sbuffer *sb, uint64_t id)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 4);
    msgpack_pack_int(&pk, 0);
    msgpack_pack_uint64(&pk, id);
    msgpack_pack_str_with_body(&pk, "tools.call", 10);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_str_with_body(&pk, "run_code", 8);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "code", 4);
    msgpack_pack_str_with_body(&pk, code_script, sizeof code_script - 1);
}

/* One request/response on `c` (nothing else in flight); adds the bytes
 * each way to *out / *in. */
static void round_trip(conn *c, uint64_t *out, uint64_t *in)
{
    write_all(c->fd, c->sb.data, c->sb.size);
    *out += c->sb.size;
    for (;;) {
        int rc = msgpack_unpacker_next(&c->up, &c->u);
        if (rc == MSGPACK_UNPACK_SUCCESS) {
            check_response(&c->u.data);
            break;
        }
        if (rc < 0)
            bench_die("the server sent bytes that are not msgpack");
        *in += read_some(c->fd, &c->up);
    }
}

typedef struct code_figures {
    double calls_ns, code_ns;        /* best of the rounds */
    uint64_t calls_bytes, code_bytes; /* both directions, one round */
} code_figures;

static void run_code_bench(conn *c, int rounds, code_figures *f)
{
    memset(f, 0, sizeof *f);
    f->calls_ns = f->code_ns = 1e30;
    for (int r = 0; r < rounds; r++) {
        uint64_t out = 0, in = 0;
        uint64_t t0 = bench_now_ns();
        for (int i = 0; i < CODE_CALLS; i++) {
            msgpack_sbuffer_clear(&c->sb);
            pack_request(&c->sb, c->next_id++);
            round_trip(c, &out, &in);
        }
        double ns = (double)(bench_now_ns() - t0);
        if (ns < f->calls_ns)
            f->calls_ns = ns;
        f->calls_bytes = out + in;
        out = in = 0;
        msgpack_sbuffer_clear(&c->sb);
        pack_code_request(&c->sb, c->next_id++);
        t0 = bench_now_ns();
        round_trip(c, &out, &in);
        ns = (double)(bench_now_ns() - t0);
        if (ns < f->code_ns)
            f->code_ns = ns;
        f->code_bytes = out + in;
    }
}

/* CPU seconds this thread (the client) has used so far. */
static double client_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        return -1;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

/* CPU seconds the server has used so far (all its threads), from
 * /proc/PID/stat; -1 when unknown. */
static double server_cpu_s(void)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)server_pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                     &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The figures measured against one server. */
typedef struct srv_figures {
    bench_stats seq;
    double pipe_cps, ping_cps, many_cps;
    double seq_cpu_us, pipe_cpu_us, many_cpu_us; /* server CPU per call */
} srv_figures;

enum { NCONN = 16 };

static void measure_server(srv_figures *f, long n_seq, long n_pipe,
                           long n_many, uint64_t *samples, bool ping,
                           code_figures *cf)
{
    conn c1;
    int fd = connect_unix(sock_path);
    if (fd < 0)
        bench_die("connect: %s", strerror(errno));
    conn_init(&c1, fd);
    run_sequential(&c1, n_seq / 10, samples); /* warm-up */
    double cpu = server_cpu_s();
    uint64_t wall = run_sequential(&c1, n_seq, samples);
    f->seq_cpu_us = (server_cpu_s() - cpu) * 1e6 / (double)n_seq;
    bench_stats_from(&f->seq, samples, (size_t)n_seq, wall, (size_t)n_seq);
    run_pipelined(&c1, n_pipe / 10, 64); /* warm-up */
    cpu = server_cpu_s();
    uint64_t ns = run_pipelined(&c1, n_pipe, 64);
    f->pipe_cpu_us = (server_cpu_s() - cpu) * 1e6 / (double)n_pipe;
    f->pipe_cps = (double)n_pipe * 1e9 / (double)ns;
    f->ping_cps = 0;
    if (ping) {
        ns = run_pipelined_req(&c1, n_pipe, 64, true);
        f->ping_cps = (double)n_pipe * 1e9 / (double)ns;
    }
    if (cf)
        run_code_bench(&c1, bench_quick() ? 2 : 10, cf);
    conn_destroy(&c1);
    conn cs[NCONN];
    for (int i = 0; i < NCONN; i++) {
        fd = connect_unix(sock_path);
        if (fd < 0)
            bench_die("connect: %s", strerror(errno));
        conn_init(&cs[i], fd);
    }
    cpu = server_cpu_s();
    ns = run_many(cs, NCONN, n_many);
    f->many_cpu_us = (server_cpu_s() - cpu) * 1e6 / (double)n_many;
    f->many_cps = (double)n_many * 1e9 / (double)ns;
    for (int i = 0; i < NCONN; i++)
        conn_destroy(&cs[i]);
}

/* ---- main ---------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    const char *build = bench_build_dir(argc > 1 ? argv[1] : TH_BUILD_DIR);
    signal(SIGPIPE, SIG_IGN);
    bench_machine m;
    bench_machine_get(&m);
    bench_machine_print("rpc: msgpack-RPC over a Unix socket", &m);

    long n_seq = bench_iters(20000, 10, 500);
    long n_pipe = bench_iters(200000, 10, 5000);
    long n_many = bench_iters(100000, 10, 2000);
    uint64_t *samples = malloc(sizeof(uint64_t) * (size_t)n_seq);
    if (!samples)
        bench_die("out of memory");

    /* TH_BENCH_PROFILE=1 (or pipe): only the server, 64 in flight, no
     * table (for TH_BENCH_SERVER_WRAP); =seq: sequential; =many: 16
     * connections.  TH_BENCH_PROFILE_PAUSE=N: wait N seconds before the
     * calls (time to attach `strace -c -f -p`) */
    const char *prof = getenv("TH_BENCH_PROFILE");
    if (prof) {
        /* TH_BENCH_OLD=1: `build` is from before the short path */
        start_server_as(build, getenv("TH_BENCH_OLD") != NULL);
        const char *pause = getenv("TH_BENCH_PROFILE_PAUSE");
        if (pause)
            sleep((unsigned)atoi(pause));
        enum { NPC = 64 };
        conn pc[NPC];
        /* TH_BENCH_CONNS: connections for =many (16; at most 64) */
        const char *pcs = getenv("TH_BENCH_CONNS");
        int nmany = pcs && atoi(pcs) > 0 && atoi(pcs) <= NPC ? atoi(pcs) : 16;
        int npc = strcmp(prof, "many") == 0 ? nmany : 1;
        for (int i = 0; i < npc; i++) {
            int pfd = connect_unix(sock_path);
            if (pfd < 0)
                bench_die("connect: %s", strerror(errno));
            conn_init(&pc[i], pfd);
        }
        uint64_t ns;
        long n;
        double cpu0 = server_cpu_s(), ccpu0 = client_cpu_s();
        /* TH_BENCH_N: this many calls (two runs of different N give the
         * instructions a call costs, without the start-up) */
        const char *pn = getenv("TH_BENCH_N");
        if (pn && atol(pn) > 0) {
            n_seq = n_pipe = n_many = atol(pn);
            /* one sample per sequential call: room for N of them */
            uint64_t *more = realloc(samples, sizeof(uint64_t) * (size_t)n_seq);
            if (!more)
                bench_die("out of memory");
            samples = more;
        }
        if (strcmp(prof, "seq") == 0)
            ns = run_sequential(&pc[0], n = n_seq, samples);
        else if (strcmp(prof, "many") == 0)
            ns = run_many(pc, npc, n = n_many);
        else
            ns = run_pipelined(&pc[0], n = n_pipe, 64);
        double cpu = server_cpu_s() - cpu0, ccpu = client_cpu_s() - ccpu0;
        printf("profile %s: %ld calls: %.0f calls/s; server CPU %.2f us a "
               "call, client CPU %.2f us a call\n", prof, n,
               (double)n * 1e9 / (double)ns,
               cpu0 < 0 ? -1.0 : cpu * 1e6 / (double)n,
               ccpu * 1e6 / (double)n);
        for (int i = 0; i < npc; i++)
            conn_destroy(&pc[i]);
        stop_server();
        free(samples);
        return 0;
    }

    /* the floor */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        bench_die("socketpair: %s", strerror(errno));
    pthread_t echo;
    if (pthread_create(&echo, NULL, floor_echo, &sv[1]) != 0)
        bench_die("pthread_create");
    conn fc;
    conn_init(&fc, sv[0]);
    run_sequential(&fc, n_seq / 10, samples); /* warm-up */
    uint64_t wall = run_sequential(&fc, n_seq, samples);
    bench_stats floor_seq;
    bench_stats_from(&floor_seq, samples, (size_t)n_seq, wall, (size_t)n_seq);
    uint64_t floor_pipe_ns = run_pipelined(&fc, n_pipe, 64);
    double floor_pipe_cps = (double)n_pipe * 1e9 / (double)floor_pipe_ns;
    conn_destroy(&fc); /* closes sv[0]: the echo thread ends */
    pthread_join(echo, NULL);
    close(sv[1]);

    /* the floor for 16 connections: 16 socketpairs, one polling thread */
    int ffd[NCONN], fsrv[NCONN];
    conn fcs[NCONN];
    for (int i = 0; i < NCONN; i++) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
            bench_die("socketpair: %s", strerror(errno));
        conn_init(&fcs[i], sv[0]);
        ffd[i] = fsrv[i] = sv[1];
    }
    floor_many_arg fma = {ffd, NCONN};
    if (pthread_create(&echo, NULL, floor_echo_many, &fma) != 0)
        bench_die("pthread_create");
    uint64_t floor_many_ns = run_many(fcs, NCONN, n_many);
    double floor_many_cps = (double)n_many * 1e9 / (double)floor_many_ns;
    for (int i = 0; i < NCONN; i++)
        conn_destroy(&fcs[i]);
    pthread_join(echo, NULL);
    for (int i = 0; i < NCONN; i++)
        close(fsrv[i]);

    /* the server */
    start_server(build);
    srv_figures sf;
    code_figures cf;
    measure_server(&sf, n_seq, n_pipe, n_many, samples, true, &cf);
    stop_server();
    bench_stats seq = sf.seq;
    double pipe_cps = sf.pipe_cps, many_cps = sf.many_cps;

    /* the same server with short_call_max: 0: echo goes to a worker and
     * back, as every call did before the short path (the two hops) */
    smax_over = "0";
    start_server(build);
    smax_over = NULL;
    bench_stats wseq;
    double wpipe_cps;
    {
        conn cw;
        int wfd = connect_unix(sock_path);
        if (wfd < 0)
            bench_die("connect: %s", strerror(errno));
        conn_init(&cw, wfd);
        run_sequential(&cw, n_seq / 10, samples); /* warm-up */
        uint64_t w = run_sequential(&cw, n_seq, samples);
        bench_stats_from(&wseq, samples, (size_t)n_seq, w, (size_t)n_seq);
        w = run_pipelined(&cw, n_pipe, 64);
        wpipe_cps = (double)n_pipe * 1e9 / (double)w;
        conn_destroy(&cw);
    }
    stop_server();

    /* TH_BENCH_BASELINE=DIR: the same figures against DIR/toolhost, a
     * build of the code before this change, in this same run */
    const char *base = getenv("TH_BENCH_BASELINE");
    srv_figures bf;
    memset(&bf, 0, sizeof bf);
    if (base && *base) {
        start_server_as(base, true);
        measure_server(&bf, n_seq, n_pipe, n_many, samples, false, NULL);
        stop_server();
    }

    printf("\n");
    bench_row_head();
    bench_row_ns("floor: socketpair frame round trip", &floor_seq, 0, NULL);
    bench_row_ns("1 connection, sequential round trip", &seq,
                 (double)floor_seq.p50_ns, "socketpair round trip");
    bench_row_ns("  the same via a worker (short_call_max 0)", &wseq,
                 (double)floor_seq.p50_ns, "socketpair round trip");
    if (base && *base)
        bench_row_ns("  the same, baseline build", &bf.seq,
                     (double)floor_seq.p50_ns, "socketpair round trip");
    printf("\n%-44s %14s %8s  %s\n", "figure", "calls/s", "ratio", "floor");
    printf("%-44s %14.0f %8s  %s\n", "floor: socketpair, 64 in flight",
           floor_pipe_cps, "", "");
    printf("%-44s %14.0f %7.2fx  %s\n", "1 connection, 64 in flight", pipe_cps,
           pipe_cps / floor_pipe_cps, "socketpair, 64 in flight");
    printf("%-44s %14.0f %7.2fx  %s\n", "  64 in flight via a worker",
           wpipe_cps, wpipe_cps / floor_pipe_cps, "socketpair, 64 in flight");
    printf("%-44s %14.0f %7.2fx  %s\n", "host.ping, 64 in flight (no tool)",
           sf.ping_cps, sf.ping_cps / floor_pipe_cps,
           "socketpair, 64 in flight");
    if (base && *base)
        printf("%-44s %14.0f %7.2fx  %s\n", "  64 in flight, baseline build",
               bf.pipe_cps, bf.pipe_cps / floor_pipe_cps,
               "socketpair, 64 in flight");
    printf("%-44s %14.0f %8s  %s\n", "floor: socketpair, 16 connections",
           floor_many_cps, "", "one thread polls 16 socketpairs");
    printf("%-44s %14.0f %7.2fx  %s\n", "16 connections, 1 in flight each",
           many_cps, many_cps / floor_many_cps, "socketpair, 16 connections");
    if (base && *base)
        printf("%-44s %14.0f %7.2fx  %s\n", "  16 connections, baseline build",
               bf.many_cps, bf.many_cps / floor_many_cps,
               "socketpair, 16 connections");
    printf("\n%-44s %10s %10s %10s\n",
           "server CPU per call (all threads, /proc)", "sequential",
           "64 in fl.", "16 conns");
    printf("%-44s %8.2fus %8.2fus %8.2fus\n", "this build", sf.seq_cpu_us,
           sf.pipe_cpu_us, sf.many_cpu_us);
    if (base && *base)
        printf("%-44s %8.2fus %8.2fus %8.2fus\n", "baseline build",
               bf.seq_cpu_us, bf.pipe_cpu_us, bf.many_cpu_us);
    printf("\n%-44s %12s %12s\n", "100 echo calls (best of rounds)", "time",
           "bytes");
    printf("%-44s %10.0fus %12llu\n", "100 tools.call over the socket",
           cf.calls_ns / 1e3, (unsigned long long)cf.calls_bytes);
    printf("%-44s %10.0fus %12llu\n", "one run_code making the 100 calls",
           cf.code_ns / 1e3, (unsigned long long)cf.code_bytes);
    printf("%-44s %11.2fx %11.2fx\n", "run_code / separate calls",
           cf.code_ns / cf.calls_ns,
           (double)cf.code_bytes / (double)cf.calls_bytes);
    printf("\n");

    bench_json j;
    bench_json_begin(&j, "rpc", &m);
    bench_json_num(&j, "floor_rtt_mean_ns", floor_seq.mean_ns);
    bench_json_num(&j, "floor_rtt_p50_ns", (double)floor_seq.p50_ns);
    bench_json_num(&j, "floor_rtt_p99_ns", (double)floor_seq.p99_ns);
    bench_json_num(&j, "seq_rtt_mean_ns", seq.mean_ns);
    bench_json_num(&j, "calls100_ns", cf.calls_ns);
    bench_json_num(&j, "calls100_bytes", (double)cf.calls_bytes);
    bench_json_num(&j, "run_code100_ns", cf.code_ns);
    bench_json_num(&j, "run_code100_bytes", (double)cf.code_bytes);
    bench_json_num(&j, "seq_rtt_p50_ns", (double)seq.p50_ns);
    bench_json_num(&j, "seq_rtt_p99_ns", (double)seq.p99_ns);
    bench_json_num(&j, "seq_ratio", (double)seq.p50_ns / (double)floor_seq.p50_ns);
    bench_json_num(&j, "floor_pipe64_cps", floor_pipe_cps);
    bench_json_num(&j, "pipe64_cps", pipe_cps);
    bench_json_num(&j, "pipe64_ratio", pipe_cps / floor_pipe_cps);
    bench_json_num(&j, "conn16_cps", many_cps);
    bench_json_num(&j, "floor_conn16_cps", floor_many_cps);
    bench_json_num(&j, "conn16_ratio", many_cps / floor_many_cps);
    bench_json_num(&j, "ping64_cps", sf.ping_cps);
    bench_json_num(&j, "seq_cpu_us", sf.seq_cpu_us);
    bench_json_num(&j, "pipe64_cpu_us", sf.pipe_cpu_us);
    bench_json_num(&j, "conn16_cpu_us", sf.many_cpu_us);
    bench_json_num(&j, "worker_seq_rtt_p50_ns", (double)wseq.p50_ns);
    bench_json_num(&j, "worker_pipe64_cps", wpipe_cps);
    if (base && *base) {
        bench_json_num(&j, "base_seq_rtt_p50_ns", (double)bf.seq.p50_ns);
        bench_json_num(&j, "base_pipe64_cps", bf.pipe_cps);
        bench_json_num(&j, "base_conn16_cps", bf.many_cps);
        bench_json_num(&j, "base_seq_cpu_us", bf.seq_cpu_us);
        bench_json_num(&j, "base_pipe64_cpu_us", bf.pipe_cpu_us);
        bench_json_num(&j, "base_conn16_cpu_us", bf.many_cpu_us);
    }
    /* issue 17's targets */
    bench_target(&j, "rpc_seq", "RPC 1 connection, sequential round trip "
                 "p50 / socketpair floor", (double)seq.p50_ns /
                 (double)floor_seq.p50_ns, 2, 1);
    bench_target(&j, "rpc_pipe64", "RPC 1 connection, 64 in flight: "
                 "calls/s / 500,000", pipe_cps / 500000.0, 1, 0);
    /* "2x today": against the baseline build measured in this run when
     * there is one (TH_BENCH_BASELINE), else against issue 17's figure */
    if (base && *base && bf.many_cps > 0)
        bench_target(&j, "rpc_conn16", "RPC 16 connections, 1 in flight "
                     "each: calls/s / the baseline build's in this run",
                     many_cps / bf.many_cps, 2, 0);
    else
        bench_target(&j, "rpc_conn16", "RPC 16 connections, 1 in flight "
                     "each: calls/s / 80,000 (issue 17's figure before)",
                     many_cps / 80000.0, 2, 0);
    if (base && *base)
        printf("same run, against the baseline build: sequential p50 %.2fx "
               "faster, 64 in flight %.2fx, 16 connections %.2fx\n",
               (double)bf.seq.p50_ns / (double)seq.p50_ns,
               pipe_cps / bf.pipe_cps, many_cps / bf.many_cps);
    bench_json_end(&j);
    free(samples);
    return 0;
}
