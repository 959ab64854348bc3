/* test_rpc_harness.h - shared by the rpc and rpc_fault suites: start the
 * real `toolhost serve` on a fresh config (socket or stdio, under valgrind
 * when TH_VALGRIND is set), talk to it with the client library or with raw
 * frames, and read its log.  Static helpers for tests only: they abort the
 * run on an internal failure (fork, pipe). */
#ifndef TEST_RPC_HARNESS_H
#define TEST_RPC_HARNESS_H

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <msgpack.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"
#include "front/rpc.h"

#define RPC_H static __attribute__((unused))

RPC_H bool rpc_valgrind(void)
{
    const char *v = getenv("TH_VALGRIND");
    return v && *v;
}

/* Loop counts shrink under valgrind. */
RPC_H int rpc_scale(int n)
{
    return rpc_valgrind() ? (n / 10 > 0 ? n / 10 : 1) : n;
}

/* The deadline for something that must happen (an answer, a log line, a
 * start): 12 s times th_test_ms()'s scale (60 s under valgrind). */
RPC_H int rpc_wait_ms(void)
{
    return (int)th_test_ms(12000);
}

RPC_H int64_t rpc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

RPC_H void rpc_die(const char *what)
{
    perror(what);
    abort();
}

typedef struct rpc_opts {
    const char *socket_mode; /* default "0600" */
    bool stdio;
    const char *sock;        /* listen here instead of DIR/th.sock */
    bool no_wait;            /* do not wait for the socket to answer */
    const char *host_extra;  /* more lines under host: */
    const char *public_extra;/* more lines in the toolset "public" */
    const char *max_frame;   /* default "64KiB" */
    int nofile;              /* > 0: the server's fd limit (soft and hard) */
    const char *plugins_extra; /* more entries under plugins: */
    const char *config;      /* the whole config instead (@DIR@: the test's
                                folder, @BUILD@: the build folder) */
    /* Run in the server's process before exec, with the test's folder
     * (e.g. a private mount namespace); it _exit()s on failure. */
    void (*child_setup)(const char *dir);
} rpc_opts;

typedef struct rpc_srv {
    char *dir, *cfg, *log;
    char sock[108];
    pid_t pid;
    bool reaped;
    int status;
    int in_fd, out_fd; /* stdio mode */
} rpc_srv;

RPC_H void rpc_write_config(rpc_srv *s, const rpc_opts *o)
{
    const char *b = TH_BUILD_DIR;
    char text[4096];
    if (o && o->config) {
        size_t n = 0;
        for (const char *p = o->config; *p && n + 1 < sizeof text;) {
            const char *with = !strncmp(p, "@DIR@", 5)     ? s->dir
                               : !strncmp(p, "@BUILD@", 7) ? b
                                                           : NULL;
            if (!with) {
                text[n++] = *p++;
                continue;
            }
            n += (size_t)snprintf(text + n, sizeof text - n, "%s", with);
            if (n >= sizeof text)
                rpc_die("config too long");
            p += with == b ? 7 : 5;
        }
        text[n] = '\0';
        s->cfg = th_test_write_file(s->dir, "rpc.yaml", text, (size_t)-1);
        return;
    }
    snprintf(text, sizeof text,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  max_frame: %s\n"
             "  max_outbuf: 256KiB\n"
             "  max_inflight: 32\n"
             "  socket_mode: %s\n"
             "%s"
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s/plugins/echo.so\n"
             "  - name: fs\n"
             "    path: %s/plugins/fs.so\n"
             "    config:\n"
             "      root: %s\n"
             "  - name: text\n"
             "    path: %s/plugins/text.so\n"
             "    config:\n"
             "      root: %s\n"
             "%s"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [echo, echo_async, text_count]\n"
             "%s"
             "  - name: private\n"
             "    tools: [fs_stat, fs_list]\n"
             "    allow_users: [root]\n"
             "    permissions:\n"
             "      rules:\n"
             "        - match: fs_list\n"
             "          action: ask\n"
             "mocks:\n"
             "  - tool: text_count\n"
             "    stdout: \"slow\\n\"\n"
             "    delay: 400ms\n",
             o && o->max_frame ? o->max_frame : "64KiB",
             o && o->socket_mode ? o->socket_mode : "0600",
             o && o->host_extra ? o->host_extra : "", b, b, s->dir, b,
             s->dir, o && o->plugins_extra ? o->plugins_extra : "",
             o && o->public_extra ? o->public_extra : "");
    s->cfg = th_test_write_file(s->dir, "rpc.yaml", text, (size_t)-1);
}

/* The server program: build/toolhost, or $TH_RPC_SERVE_BIN (a stand-in
 * taking the same `serve` arguments, for developing this suite). */
RPC_H const char *rpc_server_bin(void)
{
    const char *e = getenv("TH_RPC_SERVE_BIN");
    return e && *e ? e : th_test_build_path("toolhost");
}

RPC_H int rpc_srv_wait(rpc_srv *s);

RPC_H bool rpc_sock_answers(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        rpc_die("socket");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    bool ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

/* Starts `toolhost serve -c CFG (--listen unix:SOCK | --stdio)`, stderr to
 * DIR/serve.log; waits until the socket answers.  0, or -1 when the
 * server did not come up (its log is printed). */
RPC_H int rpc_srv_start(rpc_srv *s, const rpc_opts *o)
{
    memset(s, 0, sizeof *s);
    s->in_fd = s->out_fd = -1;
    s->dir = th_test_tmpdir();
    rpc_write_config(s, o);
    snprintf(s->sock, sizeof s->sock, "%s",
             o && o->sock ? o->sock : s->dir);
    if (!(o && o->sock))
        strncat(s->sock, "/th.sock", sizeof s->sock - strlen(s->sock) - 1);
    size_t ll = strlen(s->dir) + 16;
    s->log = malloc(ll);
    if (!s->log)
        rpc_die("malloc");
    snprintf(s->log, ll, "%s/serve.log", s->dir);
    bool stdio = o && o->stdio;
    char listen[128];
    snprintf(listen, sizeof listen, "unix:%s", s->sock);
    const char *argv[] = {rpc_server_bin(), "serve", "-c", s->cfg,
                          stdio ? "--stdio" : "--listen",
                          stdio ? NULL : listen, NULL};
    int pin[2] = {-1, -1}, pout[2] = {-1, -1};
    if (stdio && (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC)))
        rpc_die("pipe");
    int logfd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0)
        rpc_die("open log");
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        rpc_die("fork");
    if (pid == 0) {
        /* If the test run dies, the server goes with it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (o && o->child_setup)
            o->child_setup(s->dir);
        if (o && o->nofile > 0) {
            struct rlimit rl = {(rlim_t)o->nofile, (rlim_t)o->nofile};
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
                _exit(126);
        }
        if (stdio) {
            dup2(pin[0], 0);
            dup2(pout[1], 1);
        } else {
            int nul = open("/dev/null", O_RDWR);
            dup2(nul, 0);
            dup2(logfd, 1);
        }
        dup2(logfd, 2);
        if (rpc_valgrind()) {
            char cmd[4096];
            size_t n = (size_t)snprintf(cmd, sizeof cmd, "exec %s",
                                        getenv("TH_VALGRIND"));
            for (int i = 0; argv[i] && n < sizeof cmd; i++)
                n += (size_t)snprintf(cmd + n, sizeof cmd - n, " '%s'",
                                      argv[i]);
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        } else {
            execv(argv[0], (char *const *)argv);
        }
        _exit(127);
    }
    close(logfd);
    s->pid = pid;
    if (stdio) {
        close(pin[0]);
        close(pout[1]);
        s->in_fd = pin[1];
        s->out_fd = pout[0];
        return 0;
    }
    if (o && o->no_wait)
        return 0;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (rpc_now_ms() < end) {
        if (rpc_sock_answers(s->sock))
            return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->reaped = true;
            s->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            break;
        }
        usleep(10000);
    }
    th_test_run r = {0};
    fprintf(stderr, "\nserver did not come up; its log:\n");
    char *argv2[] = {"/bin/cat", s->log, NULL};
    th_test_run_argv(argv2, NULL, 5, 0, &r);
    fprintf(stderr, "%s\n", r.out);
    th_test_run_free(&r);
    return -1;
}

/* Waits for the server to exit; its exit status (128+N for a signal), or
 * -1 after killing it when it did not exit in time. */
RPC_H int rpc_srv_wait(rpc_srv *s)
{
    if (s->reaped || s->pid <= 0)
        return s->status;
    int64_t end = rpc_now_ms() + 2 * rpc_wait_ms();
    for (;;) {
        int st;
        pid_t r = waitpid(s->pid, &st, WNOHANG);
        if (r == s->pid) {
            s->reaped = true;
            s->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            return s->status;
        }
        if (r < 0 && errno != EINTR)
            return -1;
        if (rpc_now_ms() > end) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
            s->reaped = true;
            s->status = -1;
            return -1;
        }
        usleep(5000);
    }
}

RPC_H int rpc_srv_stop(rpc_srv *s, int sig)
{
    if (!s->reaped && s->pid > 0)
        kill(s->pid, sig);
    int st = rpc_srv_wait(s);
    if (st != 0) {
        th_test_run r = {0};
        char *argv[] = {"/usr/bin/tail", "-n", "40", s->log, NULL};
        th_test_run_argv(argv, NULL, 5, 0, &r);
        fprintf(stderr, "\nserver exit status %d; log tail:\n%s\n", st,
                r.out);
        th_test_run_free(&r);
    }
    return st;
}

RPC_H void rpc_srv_free(rpc_srv *s)
{
    if (!s->reaped && s->pid > 0) {
        kill(s->pid, SIGKILL);
        rpc_srv_wait(s);
    }
    if (s->in_fd >= 0)
        close(s->in_fd);
    if (s->out_fd >= 0)
        close(s->out_fd);
    if (s->dir)
        th_test_rmtree(s->dir);
    free(s->dir);
    free(s->cfg);
    free(s->log);
    memset(s, 0, sizeof *s);
}

RPC_H void rpc_dump_log(rpc_srv *s)
{
    th_test_run r = {0};
    char *argv[] = {"/usr/bin/tail", "-n", "40", s->log, NULL};
    th_test_run_argv(argv, NULL, 5, 0, &r);
    fprintf(stderr, "\nserver log tail:\n%s\n", r.out);
    th_test_run_free(&r);
}

/* The directory of this process's cgroup v2 (the host starts in it):
 * the cgroup2 mount in mountinfo plus the `0::` path. */
RPC_H bool rpc_cg_own_dir(char *out, size_t cap)
{
    char line[2048], mnt[2048] = "", root[2048] = "", own[2048] = "";
    FILE *f = fopen("/proc/self/mountinfo", "re");
    while (f && !mnt[0] && fgets(line, sizeof line, f)) {
        const char *dash = strstr(line, " - ");
        if (dash && strncmp(dash + 3, "cgroup2 ", 8) == 0 &&
            sscanf(line, "%*s %*s %*s %2047s %2047s", root, mnt) != 2)
            mnt[0] = '\0';
    }
    if (f)
        fclose(f);
    f = fopen("/proc/self/cgroup", "re");
    while (f && !own[0] && fgets(line, sizeof line, f))
        if (strncmp(line, "0::", 3) == 0) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(own, sizeof own, "%s", line + 3);
        }
    if (f)
        fclose(f);
    if (!mnt[0] || !own[0] || strcmp(root, "/") != 0)
        return false;
    snprintf(out, cap, "%s%s", mnt, strcmp(own, "/") == 0 ? "" : own);
    return true;
}

/* Lines of the server's log holding `needle`. */
RPC_H int rpc_log_count(rpc_srv *s, const char *needle)
{
    FILE *f = fopen(s->log, "r");
    char line[4096];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* Waits (at most `ms`) until the server's log has a line with `needle`. */
RPC_H bool rpc_log_wait(rpc_srv *s, const char *needle, int64_t ms)
{
    int64_t end = rpc_now_ms() + ms;
    for (;;) {
        if (rpc_log_count(s, needle) > 0)
            return true;
        if (rpc_now_ms() >= end)
            return false;
        usleep(10000);
    }
}

/* The server's log has a line containing `needle` (else it is shown). */
RPC_H bool rpc_log_has(rpc_srv *s, const char *needle)
{
    FILE *f = fopen(s->log, "r");
    if (!f)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    if (!found) {
        fprintf(stderr, "\nno '%s' in the server log\n", needle);
        rpc_dump_log(s);
    }
    return found;
}

/* ---- JSON text to msgpack (test inputs read better as JSON) ------------- */

RPC_H int rpc_pack_value(msgpack_packer *pk, json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        msgpack_pack_map(pk, json_object_size(v));
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            msgpack_pack_str_with_body(pk, k, strlen(k));
            rpc_pack_value(pk, x);
        }
        return 0;
    }
    case JSON_ARRAY: {
        msgpack_pack_array(pk, json_array_size(v));
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) rpc_pack_value(pk, x);
        return 0;
    }
    case JSON_STRING:
        return msgpack_pack_str_with_body(pk, json_string_value(v),
                                          json_string_length(v));
    case JSON_INTEGER:
        return msgpack_pack_int64(pk, json_integer_value(v));
    case JSON_REAL:
        return msgpack_pack_double(pk, json_real_value(v));
    case JSON_TRUE:
        return msgpack_pack_true(pk);
    case JSON_FALSE:
        return msgpack_pack_false(pk);
    case JSON_NULL:
        return msgpack_pack_nil(pk);
    }
    return -1;
}

RPC_H void rpc_pack_json(th_buf *out, const char *json)
{
    json_error_t je;
    json_t *v = json_loads(json, JSON_DECODE_ANY, &je);
    if (!v) {
        fprintf(stderr, "bad test JSON %s: %s\n", json, je.text);
        abort();
    }
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, th_buf_msgpack_write);
    rpc_pack_value(&pk, v);
    json_decref(v);
}

/* ---- the client library ---------------------------------------------------- */

RPC_H th_rpc_client *rpc_connect(rpc_srv *s)
{
    char addr[128];
    snprintf(addr, sizeof addr, "unix:%s", s->sock);
    th_rpc_client *c = NULL;
    th_error e;
    if (th_rpc_client_connect(addr, &c, &e) != 0) {
        fprintf(stderr, "connect: %s\n", e.msg);
        return NULL;
    }
    return c;
}

typedef struct rpc_res {
    th_rpc_reply rep;
    msgpack_unpacked ue, ur;
    const msgpack_object *err, *res; /* NULL when nil / absent */
} rpc_res;

RPC_H void rpc_res_free(rpc_res *r)
{
    msgpack_unpacked_destroy(&r->ue);
    msgpack_unpacked_destroy(&r->ur);
    th_rpc_reply_destroy(&r->rep);
    memset(r, 0, sizeof *r);
}

/* A request with JSON params; 0 when a response arrived. */
RPC_H int rpc_call(th_rpc_client *c, const char *method, const char *json,
                   rpc_res *r)
{
    memset(r, 0, sizeof *r);
    msgpack_unpacked_init(&r->ue);
    msgpack_unpacked_init(&r->ur);
    th_buf p = TH_BUF_INIT;
    rpc_pack_json(&p, json);
    th_error e;
    int rc = th_rpc_client_call(c, method, p.data, p.len, NULL, NULL, &r->rep,
                                &e);
    th_buf_destroy(&p);
    if (rc) {
        fprintf(stderr, "%s: %s\n", method, e.msg);
        return rc;
    }
    size_t off = 0;
    if (r->rep.error &&
        msgpack_unpack_next(&r->ue, (const char *)r->rep.error,
                            r->rep.error_len, &off) == MSGPACK_UNPACK_SUCCESS)
        r->err = &r->ue.data;
    off = 0;
    if (r->rep.result &&
        msgpack_unpack_next(&r->ur, (const char *)r->rep.result,
                            r->rep.result_len, &off) ==
            MSGPACK_UNPACK_SUCCESS &&
        r->ur.data.type != MSGPACK_OBJECT_NIL)
        r->res = &r->ur.data;
    return 0;
}

/* The response carries the protocol error [code, message]. */
RPC_H bool rpc_is_error(const rpc_res *r, int code)
{
    const char *p;
    size_t n;
    return r->err && !r->res && r->err->type == MSGPACK_OBJECT_ARRAY &&
           r->err->via.array.size == 2 &&
           r->err->via.array.ptr[0].type == MSGPACK_OBJECT_NEGATIVE_INTEGER &&
           r->err->via.array.ptr[0].via.i64 == code &&
           th_rpc_obj_str(&r->err->via.array.ptr[1], &p, &n) && n > 0;
}

RPC_H bool rpc_ok(const msgpack_object *res)
{
    const msgpack_object *ok = th_rpc_map_get(res, "ok");
    return ok && ok->type == MSGPACK_OBJECT_BOOLEAN && ok->via.boolean;
}

/* stdout equals `text`, give or take one trailing newline. */
RPC_H bool rpc_stdout_is(const msgpack_object *res, const char *text)
{
    const msgpack_object *o = th_rpc_map_get(res, "stdout");
    const char *p;
    size_t n;
    if (!o || !th_rpc_obj_str(o, &p, &n))
        return false;
    if (n && p[n - 1] == '\n')
        n--;
    return n == strlen(text) && memcmp(p, text, n) == 0;
}

/* {ok: false, error: {code: CODE, message}}.  False (not a crash) for an
 * answer without them, e.g. a tool that failed by itself ({ok: false,
 * stderr}): th_rpc_obj_streq() does not take NULL. */
RPC_H bool rpc_tool_error_is(const msgpack_object *res, const char *code)
{
    const msgpack_object *ok = th_rpc_map_get(res, "ok");
    const msgpack_object *e = th_rpc_map_get(res, "error");
    const msgpack_object *c = th_rpc_map_get(e, "code");
    return ok && ok->type == MSGPACK_OBJECT_BOOLEAN && !ok->via.boolean &&
           c && th_rpc_obj_streq(c, code) && th_rpc_map_get(e, "message");
}

RPC_H const msgpack_object *rpc_find_tool(const msgpack_object *list,
                                          const char *name)
{
    if (!list || list->type != MSGPACK_OBJECT_ARRAY)
        return NULL;
    for (uint32_t i = 0; i < list->via.array.size; i++)
        if (th_rpc_obj_streq(th_rpc_map_get(&list->via.array.ptr[i], "name"),
                             name))
            return &list->via.array.ptr[i];
    return NULL;
}

/* The tool map's flags list has `flag`. */
RPC_H bool rpc_has_flag(const msgpack_object *tool, const char *flag)
{
    const msgpack_object *f = th_rpc_map_get(tool, "flags");
    if (!f || f->type != MSGPACK_OBJECT_ARRAY)
        return false;
    for (uint32_t i = 0; i < f->via.array.size; i++)
        if (th_rpc_obj_streq(&f->via.array.ptr[i], flag))
            return true;
    return false;
}

/* A fresh connection makes a normal call. */
RPC_H bool rpc_alive(rpc_srv *s)
{
    th_rpc_client *c = rpc_connect(s);
    if (!c)
        return false;
    rpc_res r;
    bool ok = rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"alive\"}]",
                       &r) == 0 &&
              rpc_stdout_is(r.res, "alive");
    rpc_res_free(&r);
    th_rpc_client_close(c);
    return ok;
}

/* Waits until the server counts `others` connections besides ours. */
RPC_H bool rpc_wait_connections(rpc_srv *s, uint64_t others, int timeout_ms)
{
    th_rpc_client *c = rpc_connect(s);
    if (!c)
        return false;
    int64_t end = rpc_now_ms() + timeout_ms;
    bool ok = false;
    while (!ok && rpc_now_ms() < end) {
        rpc_res r;
        if (rpc_call(c, "host.stats", "[]", &r) != 0)
            break;
        const msgpack_object *cur =
            th_rpc_map_get(th_rpc_map_get(r.res, "connections"), "current");
        ok = cur && cur->via.u64 == others + 1;
        rpc_res_free(&r);
        if (!ok)
            usleep(20000);
    }
    th_rpc_client_close(c);
    return ok;
}

/* A number of host.stats' "manager" map (UINT64_MAX when missing). */
RPC_H uint64_t rpc_mgr_stat(th_rpc_client *c, const char *key)
{
    rpc_res r;
    uint64_t v = UINT64_MAX;
    if (rpc_call(c, "host.stats", "[]", &r) == 0) {
        const msgpack_object *o =
            th_rpc_map_get(th_rpc_map_get(r.res, "manager"), key);
        if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            v = o->via.u64;
    }
    rpc_res_free(&r);
    return v;
}

/* Waits until `n` calls run in a tool (host.stats manager.running, counted
 * as the tool's run begins): the event a test waits on instead of a sleep
 * "to let the call start"; `exactly`: until n and no more run (the others
 * let go).  False after rpc_wait_ms(). */
RPC_H bool rpc_wait_running_as(rpc_srv *s, uint64_t n, bool exactly)
{
    th_rpc_client *c = rpc_connect(s);
    if (!c)
        return false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    uint64_t v;
    while (((v = rpc_mgr_stat(c, "running")) == UINT64_MAX ||
            (exactly ? v != n : v < n)) &&
           rpc_now_ms() < end)
        usleep(5000);
    th_rpc_client_close(c);
    return v != UINT64_MAX && (exactly ? v == n : v >= n);
}

RPC_H bool rpc_wait_running(rpc_srv *s, uint64_t n)
{
    return rpc_wait_running_as(s, n, false);
}

/* ---- raw frames -------------------------------------------------------------- */

#define RPC_STASH 256

typedef struct rpc_raw {
    int fd;
    th_rpc_reader rd;
    msgpack_unpacked msg;
    th_buf stash[RPC_STASH]; /* messages read while looking for another */
    int n_stash;
    th_buf cur;              /* the bytes of the last message taken from
                                the stash (its object points into them) */
} rpc_raw;

RPC_H int rpc_raw_open(rpc_raw *w, rpc_srv *s)
{
    memset(w, 0, sizeof *w);
    w->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (w->fd < 0)
        rpc_die("socket");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", s->sock);
    if (connect(w->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(w->fd);
        return -1;
    }
    th_rpc_reader_init(&w->rd, 64 << 20);
    msgpack_unpacked_init(&w->msg);
    return 0;
}

RPC_H void rpc_raw_close(rpc_raw *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    for (int i = 0; i < w->n_stash; i++)
        th_buf_destroy(&w->stash[i]);
    w->n_stash = 0;
    th_buf_destroy(&w->cur);
    msgpack_unpacked_destroy(&w->msg);
    th_rpc_reader_destroy(&w->rd);
}

/* Sends everything; false when the peer is gone. */
RPC_H bool rpc_raw_send(rpc_raw *w, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t k = send(w->fd, b, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        b += k;
        n -= (size_t)k;
    }
    return true;
}

RPC_H void rpc_raw_request(rpc_raw *w, uint64_t id, const char *method,
                           const char *json)
{
    th_buf p = TH_BUF_INIT, f = TH_BUF_INIT;
    rpc_pack_json(&p, json);
    th_rpc_pack_request(&f, id, method, p.data, p.len);
    rpc_raw_send(w, f.data, f.len);
    th_buf_destroy(&p);
    th_buf_destroy(&f);
}

/* The next message read from the wire (stash ignored); NULL on timeout,
 * end of stream or garbage. */
RPC_H const msgpack_object *rpc_raw_read(rpc_raw *w, int timeout_ms)
{
    int64_t end = rpc_now_ms() + timeout_ms;
    for (;;) {
        th_error e;
        int rc = th_rpc_reader_next(&w->rd, &w->msg, &e);
        if (rc < 0)
            return NULL;
        if (rc == 1)
            return &w->msg.data;
        int left = (int)(end - rpc_now_ms());
        if (left <= 0)
            return NULL;
        struct pollfd pfd = {.fd = w->fd, .events = POLLIN};
        if (poll(&pfd, 1, left) <= 0)
            continue;
        char *buf;
        size_t cap;
        th_rpc_reader_space(&w->rd, 65536, &buf, &cap);
        ssize_t n = read(w->fd, buf, cap);
        if (n <= 0)
            return NULL;
        th_rpc_reader_commit(&w->rd, (size_t)n);
    }
}

/* The next message: stashed ones first. */
RPC_H const msgpack_object *rpc_raw_next(rpc_raw *w, int timeout_ms)
{
    if (w->n_stash > 0) {
        th_buf b = w->stash[0];
        memmove(&w->stash[0], &w->stash[1],
                (size_t)(w->n_stash - 1) * sizeof w->stash[0]);
        w->n_stash--;
        size_t off = 0;
        msgpack_unpacked_destroy(&w->msg);
        msgpack_unpacked_init(&w->msg);
        /* msgpack_unpack_next() points into the bytes: keep them */
        th_buf_destroy(&w->cur);
        w->cur = b;
        msgpack_unpack_next(&w->msg, (const char *)b.data, b.len, &off);
        return &w->msg.data;
    }
    return rpc_raw_read(w, timeout_ms);
}

RPC_H void rpc_raw_stash(rpc_raw *w, const msgpack_object *m)
{
    /* progress notifications are not kept */
    if (m->type == MSGPACK_OBJECT_ARRAY && m->via.array.size == 3 &&
        th_rpc_obj_streq(&m->via.array.ptr[1], "task.progress"))
        return;
    if (w->n_stash >= RPC_STASH)
        return;
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    msgpack_pack_object(&pk, *m);
    w->stash[w->n_stash++] = b;
}

/* Reads until the response to `id`; other messages are stashed. */
RPC_H const msgpack_object *rpc_raw_response(rpc_raw *w, uint64_t id,
                                             int timeout_ms)
{
    for (int i = 0; i < w->n_stash; i++) {
        /* a stashed one? move it to the front */
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        msgpack_unpack_next(&u, (const char *)w->stash[i].data,
                            w->stash[i].len, &off);
        bool hit = u.data.type == MSGPACK_OBJECT_ARRAY &&
                   u.data.via.array.size == 4 &&
                   u.data.via.array.ptr[0].via.u64 == 1 &&
                   u.data.via.array.ptr[1].via.u64 == id;
        msgpack_unpacked_destroy(&u);
        if (hit) {
            th_buf b = w->stash[i];
            memmove(&w->stash[1], &w->stash[0], (size_t)i * sizeof b);
            w->stash[0] = b;
            return rpc_raw_next(w, 0);
        }
    }
    const msgpack_object *m;
    while ((m = rpc_raw_read(w, timeout_ms)) != NULL) {
        if (m->type == MSGPACK_OBJECT_ARRAY && m->via.array.size == 4 &&
            m->via.array.ptr[0].via.u64 == 1 &&
            m->via.array.ptr[1].via.u64 == id)
            return m;
        rpc_raw_stash(w, m);
    }
    return NULL;
}

/* Reads until a notification `method`; other messages are stashed. */
RPC_H const msgpack_object *rpc_raw_notification(rpc_raw *w,
                                                 const char *method,
                                                 int timeout_ms)
{
    for (int i = 0; i < w->n_stash; i++) {
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        msgpack_unpack_next(&u, (const char *)w->stash[i].data,
                            w->stash[i].len, &off);
        bool hit = u.data.type == MSGPACK_OBJECT_ARRAY &&
                   u.data.via.array.size == 3 &&
                   th_rpc_obj_streq(&u.data.via.array.ptr[1], method);
        msgpack_unpacked_destroy(&u);
        if (hit) {
            th_buf b = w->stash[i];
            memmove(&w->stash[1], &w->stash[0], (size_t)i * sizeof b);
            w->stash[0] = b;
            return rpc_raw_next(w, 0);
        }
    }
    const msgpack_object *m;
    while ((m = rpc_raw_read(w, timeout_ms)) != NULL) {
        if (m->type == MSGPACK_OBJECT_ARRAY && m->via.array.size == 3 &&
            th_rpc_obj_streq(&m->via.array.ptr[1], method))
            return m;
        rpc_raw_stash(w, m);
    }
    return NULL;
}

/* Reads until a request `method` from the host ([0, msgid, method,
 * params], e.g. permission.request); other messages are stashed. */
RPC_H const msgpack_object *rpc_raw_host_request(rpc_raw *w,
                                                 const char *method,
                                                 int timeout_ms)
{
    for (int i = 0; i < w->n_stash; i++) {
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        msgpack_unpack_next(&u, (const char *)w->stash[i].data,
                            w->stash[i].len, &off);
        bool hit = u.data.type == MSGPACK_OBJECT_ARRAY &&
                   u.data.via.array.size == 4 &&
                   u.data.via.array.ptr[0].via.u64 == 0 &&
                   th_rpc_obj_streq(&u.data.via.array.ptr[2], method);
        msgpack_unpacked_destroy(&u);
        if (hit) {
            th_buf b = w->stash[i];
            memmove(&w->stash[1], &w->stash[0], (size_t)i * sizeof b);
            w->stash[0] = b;
            return rpc_raw_next(w, 0);
        }
    }
    const msgpack_object *m;
    while ((m = rpc_raw_read(w, timeout_ms)) != NULL) {
        if (m->type == MSGPACK_OBJECT_ARRAY && m->via.array.size == 4 &&
            m->via.array.ptr[0].via.u64 == 0 &&
            th_rpc_obj_streq(&m->via.array.ptr[2], method))
            return m;
        rpc_raw_stash(w, m);
    }
    return NULL;
}

/* Answers the host's request `req` (from rpc_raw_host_request, e.g. a
 * client.ask) with the result `json`. */
RPC_H void rpc_raw_answer(rpc_raw *w, const msgpack_object *req,
                          const char *json)
{
    th_buf ans = TH_BUF_INIT, f = TH_BUF_INIT;
    rpc_pack_json(&ans, json);
    th_rpc_pack_response(&f, req->via.array.ptr[1].via.u64, NULL, 0,
                         ans.data, ans.len);
    rpc_raw_send(w, f.data, f.len);
    th_buf_destroy(&f);
    th_buf_destroy(&ans);
}

/* True when the server closes the connection within timeout_ms (whatever
 * it sends before is read and dropped). */
RPC_H bool rpc_raw_eof(rpc_raw *w, int timeout_ms)
{
    int64_t end = rpc_now_ms() + timeout_ms;
    for (;;) {
        int left = (int)(end - rpc_now_ms());
        if (left <= 0)
            return false;
        struct pollfd pfd = {.fd = w->fd, .events = POLLIN};
        if (poll(&pfd, 1, left) <= 0)
            continue;
        char buf[65536];
        ssize_t n = read(w->fd, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return true;
        if (n < 0 && errno != EINTR && errno != EAGAIN)
            return true;
    }
}

#endif
