/* test_sdk_go.c - the Go SDK (sdk/go) as an author and an operator meet
 * it: its examples, built by `make examples` (build/examples/go_echo.so:
 * plugin echo, tool echo; go_tools.so: plugin gotools, tools
 * gotools_countdown (async) and gotools_stats (constrained, structured)),
 * pass `toolhost check --strict` with no warning, answer through the real
 * `toolhost serve` (msgpack-RPC) and `toolhost mcp` (stdio); progress and
 * cancel of the async tool; constraint violations answered with the
 * host's error.  The one-Go-runtime rules of the loader (dl_go.h): a
 * second Go plugin in one process is refused while the first goes on
 * serving; a reload of an in-process Go plugin is refused with the old
 * build serving; under isolation: process both plugins run and a reload
 * works.  The host's own signals with a Go runtime loaded: SIGHUP still
 * reloads, SIGTERM still ends the server cleanly, the runtime catches no
 * signal but the synchronous ones, SIGPIPE and SIGURG; crashes are still
 * reported (fixtures/go_crash.so).  And `toolhost new
 * --lang go` built against an installed SDK (make install install-go).
 *
 * Without Go (no build/examples/go_echo.so) every test is skipped with
 * the reason, and fails when CI=true.  The ASan+UBSan build runs every
 * test (the Go runtime runs in an instrumented host); under TSan every
 * test is skipped with the reason (TSAN_REASON).  Under valgrind no
 * toolhost process that loads a Go plugin is wrapped (VALGRIND_REASON),
 * and under_valgrind is skipped with the reason. */
#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <jansson.h>
#include <msgpack.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"
#include "front/rpc.h"
#include "th/buf.h"
#include "th/json.h"

/* ---- when the tests can run ------------------------------------------------ */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *ex(const char *name)
{
    static char buf[4][1024];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "%s", th_test_build_path(name));
    return b;
}

/* Why the Go examples are not there, or NULL. */
static const char *go_missing(void)
{
    if (access(ex("examples/go_echo.so"), R_OK) == 0 &&
        access(ex("examples/go_tools.so"), R_OK) == 0 &&
        access(ex("fixtures/go_crash.so"), R_OK) == 0)
        return NULL;
    return "the Go examples were not built: no Go toolchain (/usr/bin/go "
           "and golang-github-vmihailenco-msgpack.v5-dev, installed by "
           "scripts/install-deps); sdk/go/sdk.mk builds nothing without it";
}

static bool in_ci(void)
{
    const char *v = getenv("CI");
    return v && strcmp(v, "true") == 0;
}

/* ThreadSanitizer and the Go runtime: TSan sees only instrumented code,
 * and the Go runtime (not built with -race here) orders its hand-offs
 * with atomics in its own assembly.  A call the host's worker hands to a
 * goroutine on another thread is ordered, but TSan reports the first
 * host callback from that thread (on_cancel reading the call's record)
 * as a data race with the worker's write.  So under TSan the suite is
 * skipped with this reason (`make test` runs no integration suite under
 * TSan). */
#define TSAN_REASON                                                           \
    "ThreadSanitizer does not see the Go runtime's synchronization (atomics " \
    "in uninstrumented Go assembly): a call handed by a host worker to a "    \
    "goroutine's thread is reported as a data race"

#define NEED_GO()                                                             \
    do {                                                                      \
        const char *why_ = go_missing();                                      \
        if (why_ && in_ci()) {                                                \
            CU_FAIL_FATAL("CI=true and the Go examples are missing");         \
        }                                                                     \
        if (why_)                                                             \
            TH_SKIP(why_);                                                    \
        if (strstr(TH_SANITIZER, "thread"))                                   \
            TH_SKIP(TSAN_REASON);                                             \
    } while (0)

/* Valgrind and the Go runtime: a Go plugin runs under valgrind, but
 * memcheck reports the runtime's own ways as errors (word-wide compares
 * that read past the end of a string within its page, memeqbody; stack
 * copying that reads uninitialised frame words, runtime.adjustframe; the
 * TLS of the runtime's threads, which never exit, "possibly lost"), so
 * every toolhost process of this suite that loads a Go plugin runs
 * without valgrind (never wrapped with TH_VALGRIND): under `make
 * valgrind` the suite checks the client side, and test_under_valgrind
 * is skipped with this reason. */
#define VALGRIND_REASON                                                       \
    "memcheck reports the Go runtime's own ways as errors (memeqbody's "     \
    "word-wide reads past a string's end, runtime.adjustframe reading "      \
    "uninitialised stack words, its never-exiting threads' TLS possibly "    \
    "lost): toolhost processes that load a Go plugin run without valgrind"

/* ---- files -------------------------------------------------------------------- */

static bool file_has(const char *path, const char *needle)
{
    char *t = th_test_read_file(path, NULL);
    bool found = t && strstr(t, needle);
    free(t);
    return found;
}

/* Waits (th_test_ms(wait)) until the file holds needle. */
static bool wait_file_has(const char *path, const char *needle, unsigned wait)
{
    int64_t end = now_ms() + th_test_ms(wait);
    while (now_ms() < end) {
        if (file_has(path, needle))
            return true;
        usleep(10000);
    }
    return file_has(path, needle);
}

/* Copies src to dst (a new inode), with `extra` bytes appended: the same
 * code, other bytes, so that a reloading host sees a new build. */
static void put_file(const char *src, const char *dst, const char *extra)
{
    size_t n = 0;
    char *t = th_test_read_file(src, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    th_buf b = TH_BUF_INIT;
    th_buf_append(&b, t, n);
    if (extra)
        th_buf_append(&b, extra, strlen(extra));
    th_test_replace_file(dst, b.data, b.len, 0755);
    th_buf_destroy(&b);
    free(t);
}

/* ---- the server ------------------------------------------------------------------ */

typedef struct srv {
    char *dir;
    char cfg[1024], log[1024], addr[256];
    pid_t pid;
} srv;

/* "  - name: N\n    path: P\n" (+ isolation: process, with a uid of its
 * own when the host runs as root). */
static void plug(th_buf *b, const char *name, const char *path, bool iso)
{
    th_buf_printf(b, "  - name: %s\n    path: %s\n%s%s", name, path,
                  iso ? "    isolation: process\n" : "",
                  iso && geteuid() == 0 ? "    user: auto\n" : "");
}

static void srv_config(srv *s, const char *plugins)
{
    th_buf b = TH_BUF_INIT;
    th_buf_printf(&b,
                  "host:\n  log_level: info\n  shutdown_grace: 1s\n"
                  "  listen: %s\n  reload: signal\n  state_dir: %s/state\n"
                  "plugins:\n%s",
                  s->addr, s->dir, plugins);
    th_test_replace_file(s->cfg, b.data, b.len, 0644);
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

static void dump_log(srv *s)
{
    char *t = th_test_read_file(s->log, NULL);
    size_t n = t ? strlen(t) : 0;
    fprintf(stderr, "\nserver log (tail):\n%s\n", t ? t + (n > 4000 ? n - 4000 : 0) : "");
    free(t);
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

/* A new folder for the server (s->dir), not started yet. */
static void srv_init(srv *s)
{
    memset(s, 0, sizeof *s);
    s->dir = th_test_tmpdir();
    snprintf(s->cfg, sizeof s->cfg, "%s/toolhost.yaml", s->dir);
    snprintf(s->log, sizeof s->log, "%s/serve.log", s->dir);
    snprintf(s->addr, sizeof s->addr, "unix:%s/th.sock", s->dir);
}

/* Starts `toolhost serve` on s->cfg; 0 once its socket answers. */
static int srv_start(srv *s)
{
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
        execl(bin, bin, "serve", "-c", s->cfg, (char *)NULL);
        _exit(127);
    }
    close(logfd);
    s->pid = pid;
    int64_t end = now_ms() + th_test_ms(15000);
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
    return -1;
}

/* SIGTERM; the exit status (128 + signal when killed). */
static int srv_stop(srv *s)
{
    int st = -1;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        int64_t end = now_ms() + th_test_ms(15000);
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

/* ---- calls ------------------------------------------------------------------------- */

typedef struct result {
    bool ok;
    char out[4096];
    char code[64];     /* error.code, "" when ok */
    char msg[2048];    /* error.message */
    int progress;      /* progress notifications seen */
    int cancel_at;     /* > 0: raise `cancel` at this many updates */
    volatile sig_atomic_t cancel;
} result;

static int on_progress(const char *method, size_t n, const msgpack_object *p,
                       void *ud)
{
    (void)method, (void)n, (void)p;
    result *r = ud;
    r->progress++;
    if (r->cancel_at > 0 && r->progress >= r->cancel_at)
        r->cancel = 1;
    return 0;
}

static void copy_str(const msgpack_object *o, char *dst, size_t size)
{
    const char *p;
    size_t n;
    if (o && th_rpc_obj_str(o, &p, &n))
        snprintf(dst, size, "%.*s", (int)n, p);
}

/* Calls tool with args (JSON text); 0 when the call got an answer (ok or
 * a tool error, in r), -1 on a protocol failure. */
static int call_tool(th_rpc_client *c, const char *tool, const char *json,
                     result *r)
{
    r->ok = false;
    r->out[0] = r->code[0] = r->msg[0] = '\0';
    r->progress = 0;
    r->cancel = 0;
    json_t *j = json_loads(json, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    th_buf a = TH_BUF_INIT;
    CU_ASSERT_EQUAL_FATAL(th_json_to_msgpack(j, &a), 0);
    json_decref(j);
    th_rpc_client_set_cancel_flag(c, r->cancel_at > 0 ? &r->cancel : NULL);
    uint8_t *res = NULL;
    size_t rl = 0;
    th_error e;
    int rc = th_rpc_client_call_tool(c, tool, a.data, a.len, 0, on_progress,
                                     r, &res, &rl, &e);
    th_rpc_client_set_cancel_flag(c, NULL);
    th_buf_destroy(&a);
    if (rc != 0) {
        fprintf(stderr, "call %s: %s\n", tool, e.msg);
        return -1;
    }
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    if (msgpack_unpack_next(&u, (const char *)res, rl, NULL) ==
        MSGPACK_UNPACK_SUCCESS) {
        const msgpack_object *v = th_rpc_map_get(&u.data, "ok");
        r->ok = v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
        copy_str(th_rpc_map_get(&u.data, "stdout"), r->out, sizeof r->out);
        const msgpack_object *er = th_rpc_map_get(&u.data, "error");
        if (er) {
            copy_str(th_rpc_map_get(er, "code"), r->code, sizeof r->code);
            copy_str(th_rpc_map_get(er, "message"), r->msg, sizeof r->msg);
        }
        if (!r->ok && !r->msg[0])
            copy_str(th_rpc_map_get(&u.data, "stderr"), r->msg, sizeof r->msg);
    }
    msgpack_unpacked_destroy(&u);
    free(res);
    return 0;
}

/* host.reload: true when it succeeded; its error message in why. */
static bool reload_now(th_rpc_client *c, char *why, size_t size)
{
    th_rpc_reply r;
    memset(&r, 0, sizeof r);
    th_error e;
    why[0] = '\0';
    bool ok = false;
    if (th_rpc_client_call(c, "host.reload", NULL, 0, NULL, NULL, &r, &e) ==
            0 &&
        !r.error) {
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        if (msgpack_unpack_next(&u, (const char *)r.result, r.result_len,
                                NULL) == MSGPACK_UNPACK_SUCCESS) {
            const msgpack_object *v = th_rpc_map_get(&u.data, "ok");
            ok = v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
            const msgpack_object *er = th_rpc_map_get(&u.data, "error");
            copy_str(er ? th_rpc_map_get(er, "message") : NULL, why, size);
        }
        msgpack_unpacked_destroy(&u);
    }
    th_rpc_reply_destroy(&r);
    return ok;
}

static bool echo_answers(th_rpc_client *c, const char *text)
{
    char args[512];
    snprintf(args, sizeof args, "{\"text\": \"%s\"}", text);
    result r = {0};
    return call_tool(c, "echo", args, &r) == 0 && r.ok &&
           strcmp(r.out, text) == 0;
}

/* ---- check --strict ------------------------------------------------------------ */

/* `toolhost ARGS...` (never under valgrind: see VALGRIND_REASON). */
static void toolhost_plain(th_test_run *r, char *a1, char *a2, char *a3,
                           char *a4, char *a5)
{
    char *argv[] = {(char *)th_test_build_path("toolhost"), a1, a2, a3, a4,
                    a5, NULL};
    CU_ASSERT_EQUAL(th_test_run_argv(argv, NULL, 60, 0, r), 0);
}

static void check_strict(const char *so, const char *want_tools)
{
    th_test_run r;
    toolhost_plain(&r, "check", "--strict", (char *)so, NULL, NULL);
    if (r.status != 0 || strstr(r.out, "warning:"))
        fprintf(stderr, "\ncheck --strict %s (%d):\n%s\n%s\n", so, r.status,
                r.out, r.err);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NULL(strstr(r.out, "warning:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, want_tools));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "0 errors, 0 warnings"));
    th_test_run_free(&r);
}

static void test_check_strict(void)
{
    NEED_GO();
    check_strict(ex("examples/go_echo.so"), "plugin echo 0.1.0, 1 tool,");
    check_strict(ex("examples/go_tools.so"), "plugin gotools 0.1.0, 2 tools,");
}

/* The entry symbol is the only symbol the object exports (the version
 * script of the SDK), and the loader's test of a Go object finds both
 * examples Go and the C echo not. */
static void test_exports_only_entry(void)
{
    NEED_GO();
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "nm -D --defined-only '%s' | awk '{print $3}'",
             ex("examples/go_echo.so"));
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    th_test_run r;
    th_test_run_argv(argv, NULL, 30, 0, &r);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "toolhost_plugin_v1\n");
    th_test_run_free(&r);
}

/* ---- the real server ----------------------------------------------------------- */

/* gotools in the host's process, the Go echo in a worker process: every
 * example tool over msgpack-RPC; the host's signals still do their work
 * with a Go runtime in its process. */
static void test_serve_rpc(void)
{
    NEED_GO();
    th_test_timeout(120);
    srv s;
    srv_init(&s);
    th_buf p = TH_BUF_INIT;
    plug(&p, "gotools", ex("examples/go_tools.so"), false);
    plug(&p, "echo", ex("examples/go_echo.so"), true);
    srv_config(&s, (const char *)p.data);
    th_buf_destroy(&p);
    CU_ASSERT_EQUAL_FATAL(srv_start(&s), 0);
    th_rpc_client *c = connect_to(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);

    /* echo: the text back, unchanged (Unicode, newlines). */
    CU_ASSERT(echo_answers(c, "hello from Go"));
    result r = {0};
    CU_ASSERT_EQUAL(call_tool(c, "echo", "{\"text\": \"a\\u00e9\\n\"}", &r), 0);
    CU_ASSERT(r.ok);
    CU_ASSERT_STRING_EQUAL(r.out, "a\xc3\xa9\n");
    /* a missing required parameter: the host's error */
    CU_ASSERT_EQUAL(call_tool(c, "echo", "{}", &r), 0);
    CU_ASSERT(!r.ok);
    CU_ASSERT_STRING_EQUAL(r.code, "invalid_arguments");
    CU_ASSERT_PTR_NOT_NULL(strstr(r.msg, "text"));

    /* structured output that matches the schema */
    CU_ASSERT_EQUAL(call_tool(c, "gotools_stats",
                              "{\"values\": [1, 2, 3.5], \"precision\": 1}",
                              &r), 0);
    CU_ASSERT(r.ok);
    CU_ASSERT_STRING_EQUAL(r.out, "{\"label\":\"values\",\"count\":3,\"min\":1,"
                                  "\"max\":3.5,\"mean\":2.2,\"sum\":6.5}");
    /* constraints: a bound, the pattern, the number of items */
    CU_ASSERT_EQUAL(call_tool(c, "gotools_stats",
                              "{\"values\": [1], \"precision\": 9}", &r), 0);
    CU_ASSERT(!r.ok);
    CU_ASSERT_STRING_EQUAL(r.code, "invalid_arguments");
    CU_ASSERT_PTR_NOT_NULL(strstr(r.msg, "parameter 'precision' must be <= 6, got 9"));
    CU_ASSERT_EQUAL(call_tool(c, "gotools_stats",
                              "{\"values\": [1], \"label\": \"Bad Label\"}", &r), 0);
    CU_ASSERT(!r.ok);
    CU_ASSERT_STRING_EQUAL(r.code, "invalid_arguments");
    CU_ASSERT_PTR_NOT_NULL(strstr(r.msg, "parameter 'label' must match the "
                                         "pattern '^[a-z][a-z0-9_]*$'"));
    CU_ASSERT_EQUAL(call_tool(c, "gotools_stats", "{\"values\": []}", &r), 0);
    CU_ASSERT(!r.ok);
    CU_ASSERT_STRING_EQUAL(r.code, "invalid_arguments");
    CU_ASSERT_PTR_NOT_NULL(strstr(r.msg, "parameter 'values' must have at "
                                         "least 1 items, has 0"));

    /* async: acknowledged, progress, the result from the goroutine */
    CU_ASSERT_EQUAL(call_tool(c, "gotools_countdown",
                              "{\"steps\": 4, \"delay_ms\": 5}", &r), 0);
    CU_ASSERT(r.ok);
    CU_ASSERT_STRING_EQUAL(r.out, "done after 4 steps\n");
    CU_ASSERT(r.progress >= 1);
    /* cancel after the second update: the tool stops (its log line) */
    result k = {0};
    k.cancel_at = 2;
    CU_ASSERT_EQUAL(call_tool(c, "gotools_countdown",
                              "{\"steps\": 1000, \"delay_ms\": 100}", &k), 0);
    CU_ASSERT(!k.ok);
    CU_ASSERT_STRING_EQUAL(k.code, "cancelled");
    CU_ASSERT(wait_file_has(s.log, "gotools_countdown: cancelled at step",
                            15000));

    /* SIGHUP still reloads (nothing changed: a reload that succeeds) */
    kill(s.pid, SIGHUP);
    CU_ASSERT(wait_file_has(s.log, "reload: SIGHUP", 15000));
    CU_ASSERT(echo_answers(c, "after SIGHUP"));
    th_rpc_client_close(c);
    /* SIGTERM still ends the server cleanly */
    CU_ASSERT_EQUAL(srv_stop(&s), 0);
    srv_free(&s);
}

/* The signals whose handler is installed (SigCgt of /proc/PID/status). */
static unsigned long long caught_signals(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    char *t = th_test_read_file(path, NULL);
    unsigned long long m = 0;
    const char *l = t ? strstr(t, "SigCgt:") : NULL;
    if (l)
        m = strtoull(l + 7, NULL, 16);
    free(t);
    return m;
}

#define SIGBIT(s) (1ull << ((s) - 1))

/* The Go runtime of an in-process plugin takes only the synchronous
 * signals, SIGPIPE and SIGURG (its preemption signal): the handlers of
 * the host for SIGTERM, SIGINT, SIGHUP and SIGCHLD are the host's alone
 * (same set caught with the C echo and with the Go one). */
static void test_signals_left_to_host(void)
{
    NEED_GO();
    unsigned long long m[2];
    const char *so[2] = {ex("plugins/echo.so"), ex("examples/go_echo.so")};
    for (int i = 0; i < 2; i++) {
        srv s;
        srv_init(&s);
        th_buf p = TH_BUF_INIT;
        plug(&p, "echo", so[i], false);
        srv_config(&s, (const char *)p.data);
        th_buf_destroy(&p);
        CU_ASSERT_EQUAL_FATAL(srv_start(&s), 0);
        th_rpc_client *c = connect_to(&s);
        CU_ASSERT_PTR_NOT_NULL_FATAL(c);
        CU_ASSERT(echo_answers(c, "sig")); /* a call ran: Go threads up */
        m[i] = caught_signals(s.pid);
        th_rpc_client_close(c);
        CU_ASSERT_EQUAL(srv_stop(&s), 0);
        srv_free(&s);
    }
    unsigned long long host = SIGBIT(SIGTERM) | SIGBIT(SIGINT) | SIGBIT(SIGHUP);
    CU_ASSERT_EQUAL(m[0] & host, host);
    CU_ASSERT_EQUAL(m[1] & host, host);
    CU_ASSERT_EQUAL(m[0] & SIGBIT(SIGCHLD), m[1] & SIGBIT(SIGCHLD));
    unsigned long long go_may = SIGBIT(SIGSEGV) | SIGBIT(SIGBUS) |
                                SIGBIT(SIGFPE) | SIGBIT(SIGPIPE) |
                                SIGBIT(SIGURG);
    if ((m[1] & ~m[0] & ~go_may) != 0)
        fprintf(stderr, "\ncaught: C echo %llx, Go echo %llx\n", m[0], m[1]);
    CU_ASSERT_EQUAL(m[1] & ~m[0] & ~go_may, 0);
}

/* Two Go plugins in one process: the second is refused with the reason
 * while the first serves on.  At a reload that adds it, and at a load
 * (`toolhost call -c` of a config that names both). */
static void test_second_go_refused(void)
{
    NEED_GO();
    th_test_timeout(120);
    srv s;
    srv_init(&s);
    th_buf p = TH_BUF_INIT;
    plug(&p, "echo", ex("examples/go_echo.so"), false);
    srv_config(&s, (const char *)p.data);
    CU_ASSERT_EQUAL_FATAL(srv_start(&s), 0);
    th_rpc_client *c = connect_to(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT(echo_answers(c, "first"));

    plug(&p, "gotools", ex("examples/go_tools.so"), false);
    srv_config(&s, (const char *)p.data);
    char why[2048];
    CU_ASSERT(!reload_now(c, why, sizeof why));
    if (!strstr(why, "refused: it holds a Go runtime"))
        fprintf(stderr, "\nreload: %s\n", why);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "plugin 'gotools' (path "));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "go_tools.so): refused: it holds a Go "
                                       "runtime and this process already "
                                       "runs the one of"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "go_echo.so (plugin 'echo')"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "isolation: process"));
    CU_ASSERT(echo_answers(c, "still serving"));
    result r = {0};
    CU_ASSERT_EQUAL(call_tool(c, "gotools_stats", "{\"values\": [1]}", &r), 0);
    CU_ASSERT(!r.ok);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(srv_stop(&s), 0);

    /* both at once: the load stops with the same words */
    th_test_run t;
    toolhost_plain(&t, "call", "-c", s.cfg, "echo", "text=x");
    CU_ASSERT_NOT_EQUAL(t.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(t.err, "refused: it holds a Go runtime"));
    th_test_run_free(&t);
    th_buf_destroy(&p);
    srv_free(&s);
}

/* A new build of an in-process Go plugin: the reload is refused with the
 * reason, the old build goes on serving. */
static void test_reload_in_process_refused(void)
{
    NEED_GO();
    th_test_timeout(120);
    srv s;
    srv_init(&s);
    char so[1100];
    snprintf(so, sizeof so, "%s/echo.so", s.dir);
    put_file(ex("examples/go_echo.so"), so, NULL);
    th_buf p = TH_BUF_INIT;
    plug(&p, "echo", so, false);
    srv_config(&s, (const char *)p.data);
    th_buf_destroy(&p);
    CU_ASSERT_EQUAL_FATAL(srv_start(&s), 0);
    th_rpc_client *c = connect_to(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT(echo_answers(c, "generation 1"));
    put_file(ex("examples/go_echo.so"), so, "rebuilt"); /* other bytes */
    char why[2048];
    CU_ASSERT(!reload_now(c, why, sizeof why));
    if (!strstr(why, "a reload of the in-process Go plugin 'echo'"))
        fprintf(stderr, "\nreload: %s\n", why);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "refused: a reload of the in-process "
                                       "Go plugin 'echo' would load a second "
                                       "Go runtime"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "restart the host"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "isolation: process"));
    CU_ASSERT(echo_answers(c, "old build serving"));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(srv_stop(&s), 0);
    srv_free(&s);
}

/* isolation: process: both Go plugins in one host, and a reload of a
 * new build works (new worker processes). */
static void test_isolated_both_and_reload(void)
{
    NEED_GO();
    th_test_timeout(120);
    srv s;
    srv_init(&s);
    char so[1100];
    snprintf(so, sizeof so, "%s/echo.so", s.dir);
    put_file(ex("examples/go_echo.so"), so, NULL);
    th_buf p = TH_BUF_INIT;
    plug(&p, "echo", so, true);
    plug(&p, "gotools", ex("examples/go_tools.so"), true);
    srv_config(&s, (const char *)p.data);
    th_buf_destroy(&p);
    CU_ASSERT_EQUAL_FATAL(srv_start(&s), 0);
    th_rpc_client *c = connect_to(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT(echo_answers(c, "isolated"));
    result r = {0};
    CU_ASSERT_EQUAL(call_tool(c, "gotools_stats", "{\"values\": [2, 4]}", &r), 0);
    CU_ASSERT(r.ok);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"mean\":3"));
    CU_ASSERT_EQUAL(call_tool(c, "gotools_countdown",
                              "{\"steps\": 2, \"delay_ms\": 1}", &r), 0);
    CU_ASSERT(r.ok);
    CU_ASSERT_STRING_EQUAL(r.out, "done after 2 steps\n");
    put_file(ex("examples/go_echo.so"), so, "rebuilt");
    char why[2048];
    bool ok = reload_now(c, why, sizeof why);
    if (!ok)
        fprintf(stderr, "\nreload: %s\n", why);
    CU_ASSERT(ok);
    CU_ASSERT(echo_answers(c, "after reload"));
    CU_ASSERT(wait_file_has(s.log, "echo g2", 5000));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(srv_stop(&s), 0);
    srv_free(&s);
}

/* Crash reporting with a Go runtime in the process (the fixture
 * build/fixtures/go_crash.so, sdk/go/testdata/crash): a fault in Go code
 * is a panic the SDK turns into the call's error; a fault on a C thread
 * of the plugin is forwarded by the Go runtime's handler to the handler it
 * found (the default one in `toolhost check`'s child: "crashed with
 * SIGSEGV"; the worker's own in an isolated worker: plugin_crashed with
 * the signal); a fault in C code called from Go ends the worker too; the
 * host goes on serving (here an in-process Go echo beside it). */
static void test_crash_reports(void)
{
    NEED_GO();
    th_test_timeout(120);
    const char *fx = ex("fixtures/go_crash.so");
    th_test_run r;
    toolhost_plain(&r, "check", "--strict", (char *)fx, NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "crashed with SIGSEGV"));
    th_test_run_free(&r);
    toolhost_plain(&r, "call", (char *)fx, "gocrash_go", NULL, NULL);
    CU_ASSERT_NOT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "panic: runtime error: invalid "
                                         "memory address or nil pointer "
                                         "dereference"));
    th_test_run_free(&r);
    /* ABI 1.5: a *BackendError is the backend's code, with the hint */
    toolhost_plain(&r, "call", (char *)fx, "gocrash_backend", NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "gocrash_backend: slow down "
                                         "(rate_limited; retry after 7000 "
                                         "ms)"));
    th_test_run_free(&r);

    srv s;
    srv_init(&s);
    th_buf p = TH_BUF_INIT;
    plug(&p, "gocrash", fx, true);
    plug(&p, "echo", ex("examples/go_echo.so"), false);
    srv_config(&s, (const char *)p.data);
    th_buf_destroy(&p);
    CU_ASSERT_EQUAL_FATAL(srv_start(&s), 0);
    th_rpc_client *c = connect_to(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    result k = {0};
    CU_ASSERT_EQUAL(call_tool(c, "gocrash_thread", "{}", &k), 0);
    CU_ASSERT(!k.ok);
    CU_ASSERT_STRING_EQUAL(k.code, "plugin_crashed");
    CU_ASSERT_PTR_NOT_NULL(strstr(k.msg, "plugin_crashed (SIGSEGV)"));
    CU_ASSERT_EQUAL(call_tool(c, "gocrash_cgo", "{}", &k), 0);
    CU_ASSERT(!k.ok);
    CU_ASSERT_STRING_EQUAL(k.code, "plugin_crashed");
    CU_ASSERT_EQUAL(call_tool(c, "gocrash_go", "{}", &k), 0);
    CU_ASSERT(!k.ok);
    CU_ASSERT_PTR_NOT_NULL(strstr(k.msg, "panic: runtime error"));
    if (!strstr(k.msg, "panic: runtime error"))
        fprintf(stderr, "\ngocrash_go: code %s, %s\n", k.code, k.msg);
    CU_ASSERT(echo_answers(c, "still here"));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(srv_stop(&s), 0);
    srv_free(&s);
}

/* ---- MCP (stdio) ------------------------------------------------------------------ */

#define MCP_INIT                                                               \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"    \
    "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"                 \
    "\"clientInfo\":{\"name\":\"go-test\",\"version\":\"1\"}}}\n"              \
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"

static json_t *by_id(json_t *arr, json_int_t id)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        json_t *j = json_object_get(v, "id");
        if (json_is_integer(j) && json_integer_value(j) == id)
            return v;
    }
    return NULL;
}

static const char *first_text(json_t *msg)
{
    json_t *c = json_object_get(json_object_get(msg, "result"), "content");
    return json_string_value(json_object_get(json_array_get(c, 0), "text"));
}

static void test_mcp_stdio(void)
{
    NEED_GO();
    th_test_timeout(120);
    char *dir = th_test_tmpdir();
    th_buf p = TH_BUF_INIT;
    th_buf_printf(&p, "plugins:\n");
    plug(&p, "gotools", ex("examples/go_tools.so"), false);
    plug(&p, "echo", ex("examples/go_echo.so"), true);
    th_buf_append(&p, "", 1);
    char *cfg = th_test_write_file(dir, "c.yaml", (const char *)p.data,
                                   (size_t)-1);
    th_buf_destroy(&p);
    const char *input =
        MCP_INIT
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\",\"arguments\":{\"text\":\"over mcp\"}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"gotools_stats\",\"arguments\":{\"values\":[1,3]}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"gotools_stats\",\"arguments\":{\"values\":[1],"
        "\"precision\":-1}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"gotools_countdown\",\"arguments\":{\"steps\":3,"
        "\"delay_ms\":5},\"_meta\":{\"progressToken\":\"p6\"}}}\n";
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c", cfg,
                    NULL};
    th_test_run r;
    CU_ASSERT_EQUAL(th_test_run_argv(argv, input, 60, 0, &r), 0);
    CU_ASSERT_EQUAL(r.status, 0);
    json_t *out = json_array();
    int progress = 0;
    char *save = NULL;
    for (char *line = strtok_r(r.out, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(line, 0, NULL);
        if (!j)
            continue;
        const char *m = json_string_value(json_object_get(j, "method"));
        if (m && strcmp(m, "notifications/progress") == 0)
            progress++;
        json_array_append_new(out, j);
    }
    /* the list carries the schemas: a bound, the output schema */
    char *list = json_dumps(by_id(out, 2), JSON_COMPACT);
    CU_ASSERT_PTR_NOT_NULL(list && strstr(list, "\"name\":\"gotools_stats\""));
    CU_ASSERT_PTR_NOT_NULL(list && strstr(list, "\"maximum\":6"));
    CU_ASSERT_PTR_NOT_NULL(list && strstr(list, "\"outputSchema\""));
    /* Tool.Tags (ABI 1.5), in the tool's _meta */
    CU_ASSERT_PTR_NOT_NULL(list && strstr(list, "\"_meta\":{\"toolhost/tags\":"
                                                "[\"math\",\"read-only\"]}"));
    free(list);
    const char *t = first_text(by_id(out, 3));
    CU_ASSERT_STRING_EQUAL(t ? t : "", "over mcp");
    json_t *st = json_object_get(json_object_get(by_id(out, 4), "result"),
                                 "structuredContent");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(st, "count")), 2);
    CU_ASSERT_EQUAL(json_real_value(json_object_get(st, "mean")) +
                        (double)json_integer_value(json_object_get(st, "mean")),
                    2.0);
    json_t *bad = json_object_get(by_id(out, 5), "result");
    CU_ASSERT(json_is_true(json_object_get(bad, "isError")));
    t = first_text(by_id(out, 5));
    CU_ASSERT_PTR_NOT_NULL(t && strstr(t, "precision"));
    t = first_text(by_id(out, 6));
    CU_ASSERT_STRING_EQUAL(t ? t : "", "done after 3 steps\n");
    CU_ASSERT(progress >= 1);
    if (!t || progress < 1)
        fprintf(stderr, "\nmcp out:\n%s\nerr:\n%s\n", r.out, r.err);
    json_decref(out);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* ---- the template, built against an installed SDK ------------------------------- */

static void test_template(void)
{
    NEED_GO();
    th_test_timeout(420);
    char *dir = th_test_tmpdir();
    char script[8192];
    snprintf(script, sizeof script,
             "set -e\n"
             "P='%s/prefix'\n"
             "cd '%s'\n"
             "make --no-print-directory -s install install-go SANITIZER='%s' "
             "PREFIX=\"$P\" >/dev/null\n"
             "test -f \"$P/share/toolhost/go/src/toolhost/toolhost.go\"\n"
             "export PKG_CONFIG_PATH=\"$P/lib/pkgconfig\"\n"
             "cd '%s'\n"
             "\"$P/bin/toolhost\" new --lang go x >/dev/null\n"
             "cd x\n"
             /* the build's go cache (make examples filled it) */
             "make -s GO=/usr/bin/go GOCACHE='%s/go-cache' >/dev/null\n"
             "test -z \"$(find x.so -perm /022)\"\n"
             "\"$P/bin/toolhost\" check --strict ./x.so\n"
             "\"$P/bin/toolhost\" call ./x.so x_hello\n"
             "\"$P/bin/toolhost\" call ./x.so x_hello name=go times=2\n"
             "if \"$P/bin/toolhost\" call ./x.so x_hello times=0 2>../refused.txt; then "
             "exit 7; fi\n"
             "cat ../refused.txt\n"
             "grep -q 'isolation: process' toolhost.yaml\n"
             "cd '%s'\n"
             "make --no-print-directory -s uninstall-go PREFIX=\"$P\"\n"
             "test ! -e \"$P/share/toolhost/go\"\n"
             "echo template ok\n",
             dir, TH_SOURCE_DIR, TH_SANITIZER, dir, TH_SDK_CACHE,
             TH_SOURCE_DIR);
    char *argv[] = {"/bin/sh", "-c", script, NULL};
    th_test_run r;
    th_test_run_argv(argv, NULL, 400, 0, &r);
    if (r.status != 0)
        fprintf(stderr, "\ntemplate script failed (%d):\n%s\n%s\n", r.status,
                r.out, r.err);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "plugin x 0.1.0, 1 tool, 0 errors, 0 warnings"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "hello, world\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "hello, go\nhello, go\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "parameter 'times' must be >= 1, got 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "template ok\n"));
    th_test_run_free(&r);
    th_test_rmtree(dir);
    free(dir);
}

/* A Go plugin called by a toolhost process under valgrind: skipped there
 * (VALGRIND_REASON); elsewhere the plain call. */
static void test_under_valgrind(void)
{
    NEED_GO();
    const char *vg = getenv("TH_VALGRIND");
    if (vg && *vg)
        TH_SKIP(VALGRIND_REASON);
    th_test_run r;
    toolhost_plain(&r, "call", (char *)ex("examples/go_echo.so"), "echo",
                   "text=plain", NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "plain");
    th_test_run_free(&r);
}

void th_suite_sdk_go(void)
{
    CU_pSuite s = CU_add_suite("sdk_go", NULL, NULL);
    CU_add_test(s, "check_strict", test_check_strict);
    CU_add_test(s, "exports_only_entry", test_exports_only_entry);
    CU_add_test(s, "serve_rpc", test_serve_rpc);
    CU_add_test(s, "signals_left_to_host", test_signals_left_to_host);
    CU_add_test(s, "second_go_refused", test_second_go_refused);
    CU_add_test(s, "reload_in_process_refused", test_reload_in_process_refused);
    CU_add_test(s, "isolated_both_and_reload", test_isolated_both_and_reload);
    CU_add_test(s, "crash_reports", test_crash_reports);
    CU_add_test(s, "mcp_stdio", test_mcp_stdio);
    CU_add_test(s, "template", test_template);
    CU_add_test(s, "under_valgrind", test_under_valgrind);
}
