/* test_reload.c - hot reload of the real `toolhost serve` (under valgrind
 * when TH_VALGRIND is set): SIGHUP, the host.reload method and
 * `toolhost reload --connect`, file watching; a client calling in a tight
 * loop through 100 reloads; an async task finishing on the old code; a
 * plugin removed with a call in flight; failures that change nothing;
 * tools.changed (only to a session whose list differs); the reload stats
 * in host.stats. */
#include <CUnit/CUnit.h>
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"
#include "th/buf.h"
#include "front/rpc.h"

static bool under_valgrind(void)
{
    const char *v = getenv("TH_VALGRIND");
    return v && *v;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A deadline for something that must happen: th_test_ms(12000) (60 s
 * under valgrind). */
static int64_t wait_ms(void)
{
    return th_test_ms(12000);
}

/* ---- files ------------------------------------------------------------------------- */

static void put_file(const char *src, const char *dst)
{
    FILE *f = fopen(src, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    th_buf b = TH_BUF_INIT;
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        th_buf_append(&b, chunk, n);
    fclose(f);
    th_test_replace_file(dst, b.data, b.len, 0755);
    th_buf_destroy(&b);
}

static bool file_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

/* ---- the server ------------------------------------------------------------------------- */

typedef struct srv {
    char *dir;
    char so[1024], cfg[1024], log[1024], marker[1024], gate[1024];
    char addr[200];
    pid_t pid;
} srv;

/* The config: the fixture as plugin fx (unless !with_fx), echo beside it. */
static void write_config(srv *s, const char *reload, bool with_fx,
                         const char *fx_extra)
{
    th_buf b = TH_BUF_INIT;
    th_buf_printf(&b,
                  "host:\n  log_level: debug\n  shutdown_grace: 1s\n"
                  "  listen: %s\n  reload: %s\n  reload_debounce: 50ms\n"
                  "  state_dir: %s/state\n"
                  "plugins:\n  - name: echo\n    path: %s\n",
                  s->addr, reload, s->dir, th_test_build_path("plugins/echo.so"));
    if (with_fx)
        th_buf_printf(&b,
                      "  - name: fx\n    path: %s\n    config:\n      marker: %s\n%s",
                      s->so, s->marker, fx_extra ? fx_extra : "");
    th_test_replace_file(s->cfg, b.data, b.len, 0755);
    th_buf_destroy(&b);
}

static bool sock_answers(srv *s)
{
    th_rpc_client *c = NULL;
    th_error e;
    if (th_rpc_client_connect(s->addr, &c, &e) != 0)
        return false;
    th_rpc_client_close(c);
    return true;
}

static void dump_log(srv *s);
static void srv_free(srv *s);

static int srv_start(srv *s, const char *reload)
{
    memset(s, 0, sizeof *s);
    s->dir = th_test_tmpdir();
    snprintf(s->so, sizeof s->so, "%s/fx.so", s->dir);
    snprintf(s->cfg, sizeof s->cfg, "%s/toolhost.yaml", s->dir);
    snprintf(s->log, sizeof s->log, "%s/serve.log", s->dir);
    snprintf(s->marker, sizeof s->marker, "%s/marker", s->dir);
    snprintf(s->gate, sizeof s->gate, "%s/gate", s->dir);
    snprintf(s->addr, sizeof s->addr, "unix:%s/th.sock", s->dir);
    put_file(th_test_build_path("fixtures/reload_a.so"), s->so);
    write_config(s, reload, true, NULL);
    int logfd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    CU_ASSERT_FATAL(logfd >= 0);
    const char *bin = th_test_build_path("toolhost");
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        if (under_valgrind()) {
            char cmd[4096];
            snprintf(cmd, sizeof cmd, "exec %s '%s' serve -c '%s'",
                     getenv("TH_VALGRIND"), bin, s->cfg);
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        } else {
            execl(bin, bin, "serve", "-c", s->cfg, (char *)NULL);
        }
        _exit(127);
    }
    close(logfd);
    s->pid = pid;
    int64_t end = now_ms() + wait_ms();
    while (now_ms() < end) {
        if (sock_answers(s))
            return 0;
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            s->pid = 0;
            break;
        }
        usleep(10000);
    }
    fprintf(stderr, "\nthe server did not come up\n");
    dump_log(s);
    srv_free(s);
    return -1;
}

static void dump_log(srv *s)
{
    th_test_run r = {0};
    char *argv[] = {"/usr/bin/tail", "-n", "30", s->log, NULL};
    th_test_run_argv(argv, NULL, 5, 0, &r);
    fprintf(stderr, "\nserver log tail:\n%s\n", r.out);
    th_test_run_free(&r);
}

/* SIGTERM, then the exit status (99: valgrind found errors). */
static int srv_stop(srv *s)
{
    int st = -1;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        int64_t end = now_ms() + 2 * wait_ms();
        for (;;) {
            int w;
            if (waitpid(s->pid, &w, WNOHANG) == s->pid) {
                st = WIFEXITED(w) ? WEXITSTATUS(w) : 128 + WTERMSIG(w);
                break;
            }
            if (now_ms() > end) {
                kill(s->pid, SIGKILL);
                waitpid(s->pid, NULL, 0);
                break;
            }
            usleep(5000);
        }
        s->pid = 0;
    }
    if (st != 0)
        dump_log(s);
    return st;
}

static void srv_free(srv *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
    if (s->dir)
        th_test_rmtree(s->dir);
    free(s->dir);
    s->dir = NULL;
}

/* ---- calls ------------------------------------------------------------------------------ */

static th_rpc_client *connect_to(srv *s)
{
    th_rpc_client *c = NULL;
    th_error e;
    if (th_rpc_client_connect(s->addr, &c, &e) != 0) {
        fprintf(stderr, "connect: %s\n", e.msg);
        return NULL;
    }
    return c;
}

/* Calls `tool` ({"path": path} or {}); "" + -1 when the call failed
 * (ok false or a protocol error): *out holds the stdout. */
static int call_tool(th_rpc_client *c, const char *tool, const char *path,
                     char *out, size_t size)
{
    th_buf a = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &a, th_buf_msgpack_write);
    msgpack_pack_map(&pk, path ? 1 : 0);
    if (path) {
        msgpack_pack_str_with_body(&pk, "path", 4);
        msgpack_pack_str_with_body(&pk, path, strlen(path));
    }
    uint8_t *res = NULL;
    size_t rl = 0;
    th_error e;
    int rc = th_rpc_client_call_tool(c, tool, a.data, a.len, 0, NULL, NULL, &res,
                                     &rl, &e);
    th_buf_destroy(&a);
    out[0] = '\0';
    if (rc != 0)
        return -1;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    bool ok = false;
    if (msgpack_unpack_next(&u, (const char *)res, rl, NULL) == MSGPACK_UNPACK_SUCCESS) {
        const msgpack_object *v = th_rpc_map_get(&u.data, "ok");
        ok = v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
        const char *p;
        size_t n;
        const msgpack_object *so = th_rpc_map_get(&u.data, "stdout");
        if (ok && so && th_rpc_obj_str(so, &p, &n))
            snprintf(out, size, "%.*s", (int)n, p);
        const msgpack_object *er = th_rpc_map_get(&u.data, "error");
        const msgpack_object *m = er ? th_rpc_map_get(er, "message") : NULL;
        if (!ok && m && th_rpc_obj_str(m, &p, &n))
            snprintf(out, size, "%.*s", (int)n, p);
    }
    msgpack_unpacked_destroy(&u);
    free(res);
    return ok ? 0 : -1;
}

/* host.reload: the result map (packed, malloc()ed) or NULL. */
static uint8_t *reload(th_rpc_client *c, size_t *len)
{
    th_rpc_reply r;
    memset(&r, 0, sizeof r);
    th_error e;
    if (th_rpc_client_call(c, "host.reload", NULL, 0, NULL, NULL, &r, &e) != 0 ||
        r.error) {
        th_rpc_reply_destroy(&r);
        return NULL;
    }
    uint8_t *res = r.result;
    *len = r.result_len;
    r.result = NULL;
    th_rpc_reply_destroy(&r);
    return res;
}

static bool reload_ok(th_rpc_client *c, char *why, size_t size)
{
    size_t n = 0;
    uint8_t *m = reload(c, &n);
    bool ok = false;
    why[0] = '\0';
    if (m) {
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        if (msgpack_unpack_next(&u, (const char *)m, n, NULL) == MSGPACK_UNPACK_SUCCESS) {
            const msgpack_object *v = th_rpc_map_get(&u.data, "ok");
            ok = v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
            const msgpack_object *er = th_rpc_map_get(&u.data, "error");
            const msgpack_object *mm = er ? th_rpc_map_get(er, "message") : NULL;
            const char *p;
            size_t k;
            if (mm && th_rpc_obj_str(mm, &p, &k))
                snprintf(why, size, "%.*s", (int)k, p);
        }
        msgpack_unpacked_destroy(&u);
        free(m);
    }
    return ok;
}

/* Calls until the answer is `want` (at most the wait). */
static bool answers(th_rpc_client *c, const char *want)
{
    char out[256];
    int64_t end = now_ms() + wait_ms();
    while (now_ms() < end) {
        if (call_tool(c, "rl_answer", NULL, out, sizeof out) == 0 &&
            strcmp(out, want) == 0)
            return true;
        usleep(5000);
    }
    fprintf(stderr, "\nlast answer: %s (want %s)\n", out, want);
    return false;
}

static int on_changed(const char *method, size_t n, const msgpack_object *p,
                      void *ud)
{
    (void)p;
    if (n == 13 && memcmp(method, "tools.changed", 13) == 0) {
        (*(int *)ud)++;
        return 1;
    }
    return 0;
}

/* ---- tests --------------------------------------------------------------------------------- */

static void test_sighup_method_cli(void)
{
    srv s;
    CU_ASSERT_EQUAL_FATAL(srv_start(&s, "signal"), 0);
    th_rpc_client *c = connect_to(&s), *watcher = connect_to(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(watcher);
    char out[256], why[1024];
    CU_ASSERT_EQUAL(call_tool(c, "rl_answer", NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "A");

    /* SIGHUP. */
    put_file(th_test_build_path("fixtures/reload_b.so"), s.so);
    kill(s.pid, SIGHUP);
    CU_ASSERT(answers(c, "B"));
    /* The other session was asked, and not told: B lists the same tools
     * as A (tools.changed goes to a session whose list differs: suites
     * tools_changed and list_changed).  The reload's last line comes
     * after every session was asked; what the watcher would be told is
     * out by the answer to its ping, or soon after. */
    int64_t end = now_ms() + wait_ms();
    while (!file_has(s.log, "sessions told that the tools changed") &&
           now_ms() < end)
        usleep(5000);
    CU_ASSERT(file_has(s.log, "sessions told that the tools changed"));
    int changed = 0;
    th_error e;
    th_rpc_reply pr;
    memset(&pr, 0, sizeof pr);
    CU_ASSERT_EQUAL(th_rpc_client_call(watcher, "host.ping", NULL, 0,
                                       on_changed, &changed, &pr, &e), 0);
    th_rpc_reply_destroy(&pr);
    CU_ASSERT_EQUAL(changed, 0);

    /* The method. */
    put_file(th_test_build_path("fixtures/reload_a.so"), s.so);
    CU_ASSERT(reload_ok(c, why, sizeof why));
    CU_ASSERT_EQUAL(call_tool(c, "rl_answer", NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "A");

    /* A broken .so: nothing changes, the reason comes back. */
    th_test_replace_file(s.so, "this is no shared object, it is text long enough\n", 49, 0755);
    CU_ASSERT(!reload_ok(c, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "not a shared object"));
    CU_ASSERT_EQUAL(call_tool(c, "rl_answer", NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "A");

    /* A config with a syntax error. */
    put_file(th_test_build_path("fixtures/reload_a.so"), s.so);
    th_test_replace_file(s.cfg, "plugins: [unclosed\n", 19, 0755);
    CU_ASSERT(!reload_ok(c, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "toolhost.yaml:"));
    CU_ASSERT_EQUAL(call_tool(c, "rl_answer", NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "A");

    /* A plugin whose init fails. */
    write_config(&s, "signal", true, "      fail_init: true\n");
    CU_ASSERT(!reload_ok(c, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "init failed on purpose"));
    CU_ASSERT_EQUAL(call_tool(c, "rl_answer", NULL, out, sizeof out), 0);

    /* The CLI: the failure, then a success. */
    th_test_run r = {0};
    th_test_toolhost(&r, "reload", "--connect", s.addr, NULL);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "load_error"));
    th_test_run_free(&r);
    write_config(&s, "signal", true, NULL);
    memset(&r, 0, sizeof r);
    th_test_toolhost(&r, "reload", "--connect", s.addr, NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"ok\": true"));
    th_test_run_free(&r);

    /* host.stats. */
    th_rpc_reply rep;
    memset(&rep, 0, sizeof rep);
    CU_ASSERT_EQUAL(th_rpc_client_call(c, "host.stats", NULL, 0, NULL, NULL, &rep, &e), 0);
    CU_ASSERT_PTR_NULL(rep.error);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CU_ASSERT_EQUAL(msgpack_unpack_next(&u, (const char *)rep.result, rep.result_len,
                                        NULL),
                    MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *rl = th_rpc_map_get(&u.data, "reload");
    CU_ASSERT_PTR_NOT_NULL_FATAL(rl);
    const msgpack_object *v = th_rpc_map_get(rl, "reloads");
    CU_ASSERT(v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && v->via.u64 == 7);
    v = th_rpc_map_get(rl, "failed");
    CU_ASSERT(v && v->via.u64 == 4);
    const msgpack_object *pl = th_rpc_map_get(rl, "plugins");
    const msgpack_object *fx = pl ? th_rpc_map_get(pl, "fx") : NULL;
    v = fx ? th_rpc_map_get(fx, "generation") : NULL;
    CU_ASSERT(v && v->via.u64 == 3);
    msgpack_unpacked_destroy(&u);
    th_rpc_reply_destroy(&rep);

    th_rpc_client_close(c);
    th_rpc_client_close(watcher);
    CU_ASSERT_EQUAL(srv_stop(&s), 0);
    srv_free(&s);
}

/* A client calls in a tight loop through 100 reloads. */
typedef struct loop_ud {
    srv *s;
    atomic_int stop;
    atomic_long calls, failed, bad;
} loop_ud;

static void *caller(void *arg)
{
    loop_ud *u = arg;
    th_rpc_client *c = connect_to(u->s);
    if (!c) {
        atomic_fetch_add(&u->failed, 1);
        return NULL;
    }
    char out[256];
    while (!atomic_load(&u->stop)) {
        atomic_fetch_add(&u->calls, 1);
        if (call_tool(c, "rl_answer", NULL, out, sizeof out) != 0) {
            atomic_fetch_add(&u->failed, 1);
            fprintf(stderr, "failed call: %s\n", out);
        } else if (strcmp(out, "A") != 0 && strcmp(out, "B") != 0) {
            atomic_fetch_add(&u->bad, 1);
        }
    }
    th_rpc_client_close(c);
    return NULL;
}

static void test_hundred_reloads_under_calls(void)
{
    srv s;
    CU_ASSERT_EQUAL_FATAL(srv_start(&s, "signal"), 0);
    loop_ud u;
    memset(&u, 0, sizeof u);
    u.s = &s;
    pthread_t th;
    pthread_create(&th, NULL, caller, &u);
    th_rpc_client *c = connect_to(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    int n = under_valgrind() ? 10 : 100, failed_reloads = 0, wrong = 0;
    char why[1024], out[256];
    for (int i = 0; i < n; i++) {
        bool b = i % 2 == 0;
        put_file(th_test_build_path(b ? "fixtures/reload_b.so" : "fixtures/reload_a.so"),
                 s.so);
        if (!reload_ok(c, why, sizeof why)) {
            failed_reloads++;
            fprintf(stderr, "reload %d: %s\n", i, why);
        }
        /* After the reload only the new code answers. */
        if (call_tool(c, "rl_answer", NULL, out, sizeof out) != 0 ||
            strcmp(out, b ? "B" : "A") != 0)
            wrong++;
    }
    atomic_store(&u.stop, 1);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(failed_reloads, 0);
    CU_ASSERT_EQUAL(wrong, 0);
    CU_ASSERT_EQUAL(atomic_load(&u.failed), 0);
    CU_ASSERT_EQUAL(atomic_load(&u.bad), 0);
    CU_ASSERT(atomic_load(&u.calls) > n);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(srv_stop(&s), 0);
    srv_free(&s);
}

/* A long call started on the old code finishes on it after the swap. */
typedef struct bg {
    srv *s;
    const char *tool;
    int rc;
    char out[256];
} bg;

static void *bg_call(void *arg)
{
    bg *b = arg;
    th_rpc_client *c = connect_to(b->s);
    b->rc = c ? call_tool(c, b->tool, b->s->gate, b->out, sizeof b->out) : -1;
    if (c)
        th_rpc_client_close(c);
    return NULL;
}

/* Waits until the fixture's marker file has `needle` ("start rl_task A"
 * when the tool began). */
static bool marker_has(srv *s, const char *needle)
{
    int64_t end = now_ms() + wait_ms();
    while (now_ms() < end) {
        if (file_has(s->marker, needle))
            return true;
        usleep(5000);
    }
    dump_log(s);
    return false;
}

static void old_code_finishes(const char *tool, const char *started_log)
{
    srv s;
    CU_ASSERT_EQUAL_FATAL(srv_start(&s, "signal"), 0);
    bg b = {&s, tool, -2, ""};
    pthread_t th;
    pthread_create(&th, NULL, bg_call, &b);
    CU_ASSERT(marker_has(&s, started_log));
    th_rpc_client *c = connect_to(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    put_file(th_test_build_path("fixtures/reload_b.so"), s.so);
    char why[1024], out[256];
    CU_ASSERT(reload_ok(c, why, sizeof why));
    CU_ASSERT_EQUAL(call_tool(c, "rl_answer", NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "B");
    CU_ASSERT(!file_has(s.marker, "fini A"));
    th_test_replace_file(s.gate, "go", 2, 0755);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(b.rc, 0);
    CU_ASSERT_STRING_EQUAL(b.out, "A");
    /* Then the old generation is closed, on the reloader's thread. */
    int64_t end = now_ms() + wait_ms();
    while (!file_has(s.marker, "fini A th-reload") && now_ms() < end)
        usleep(5000);
    CU_ASSERT(file_has(s.marker, "fini A th-reload"));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(srv_stop(&s), 0);
    srv_free(&s);
}

static void test_async_task_old_code(void)
{
    old_code_finishes("rl_task", "start rl_task A");
}

static void test_suspended_call_old_code(void)
{
    old_code_finishes("rl_hold", "start rl_hold A");
}

static void test_removed_in_flight(void)
{
    srv s;
    CU_ASSERT_EQUAL_FATAL(srv_start(&s, "signal"), 0);
    bg b = {&s, "rl_hold", -2, ""};
    pthread_t th;
    pthread_create(&th, NULL, bg_call, &b);
    th_rpc_client *c = connect_to(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    bool running = marker_has(&s, "start rl_hold A");
    CU_ASSERT(running);
    write_config(&s, "signal", false, NULL);
    char why[1024], out[256];
    CU_ASSERT(reload_ok(c, why, sizeof why));
    CU_ASSERT_NOT_EQUAL(call_tool(c, "rl_answer", NULL, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "rl_answer"));
    CU_ASSERT(!file_has(s.marker, "fini"));
    th_test_replace_file(s.gate, "go", 2, 0755);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(b.rc, 0);
    CU_ASSERT_STRING_EQUAL(b.out, "A");
    int64_t end = now_ms() + wait_ms();
    while (!file_has(s.marker, "fini A th-reload") && now_ms() < end)
        usleep(5000);
    CU_ASSERT(file_has(s.marker, "fini A th-reload"));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(srv_stop(&s), 0);
    srv_free(&s);
}

static void test_watch(void)
{
    srv s;
    CU_ASSERT_EQUAL_FATAL(srv_start(&s, "watch"), 0);
    th_rpc_client *c = connect_to(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    char out[256];
    CU_ASSERT_EQUAL(call_tool(c, "rl_answer", NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "A");
    /* A rebuild, nothing else: the host sees it. */
    put_file(th_test_build_path("fixtures/reload_b.so"), s.so);
    CU_ASSERT(answers(c, "B"));
    /* A config edit: the plugin goes away. */
    write_config(&s, "watch", false, NULL);
    int64_t end = now_ms() + wait_ms();
    bool gone = false;
    while (!gone && now_ms() < end) {
        gone = call_tool(c, "rl_answer", NULL, out, sizeof out) != 0;
        if (!gone)
            usleep(10000);
    }
    CU_ASSERT(gone);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(srv_stop(&s), 0);
    srv_free(&s);
}

void th_suite_reload(void)
{
    CU_pSuite s = CU_add_suite("reload", NULL, NULL);
    CU_add_test(s, "sighup_method_cli", test_sighup_method_cli);
    CU_add_test(s, "hundred_reloads_under_calls", test_hundred_reloads_under_calls);
    CU_add_test(s, "async_task_old_code", test_async_task_old_code);
    CU_add_test(s, "long_call_old_code", test_suspended_call_old_code);
    CU_add_test(s, "removed_in_flight", test_removed_in_flight);
    CU_add_test(s, "watch", test_watch);
}
