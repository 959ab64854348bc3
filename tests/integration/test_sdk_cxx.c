/* test_sdk_cxx.c - the C++ SDK (sdk/cxx/toolhost.hpp) as an author uses
 * it: its examples (build/examples/cxx_echo.so, cxx_countdown.so,
 * cxx_rect.so) pass `toolhost check --strict` with no warning and answer
 * through a real `toolhost serve` (msgpack-RPC, `call --connect`) and
 * over MCP (`toolhost mcp` on stdio): progress seen, a cancel and a
 * deadline honoured by the async tool (its log line says so), constraint
 * violations answered with a message naming the parameter.  The boundary
 * (sdk/cxx/tests/cxx_boundary.cpp): every kind of exception, a Pending
 * never completed, a handle used after completion become tool errors
 * with their reason on stderr.  The template: `toolhost new --lang cxx`,
 * `make install` into a temporary prefix, the project built against it
 * answers `toolhost call`.
 *
 * Everything built by `make examples` (part of `make all`); a missing
 * example is a skip with its reason, a failure when CI=true.  Under
 * valgrind (TH_VALGRIND) the spawned serve and mcp run under it too and
 * must exit 0 (no leak, no error). */
#include <CUnit/CUnit.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"

static const char *const examples[] = {"examples/cxx_echo.so",
                                       "examples/cxx_countdown.so",
                                       "examples/cxx_rect.so"};

static bool in_ci(void)
{
    const char *ci = getenv("CI");
    return ci && strcmp(ci, "true") == 0;
}

/* NULL when every file is built, else the first missing one. */
static const char *missing(const char *const *rel, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (access(th_test_build_path(rel[i]), R_OK) != 0)
            return rel[i];
    return NULL;
}

/* Skips (a failure in CI) when a file the test needs is not built. */
#define NEED(...)                                                             \
    do {                                                                      \
        static const char *const need_[] = {__VA_ARGS__};                     \
        const char *m_ = missing(need_, sizeof need_ / sizeof need_[0]);      \
        if (m_) {                                                             \
            fprintf(stderr, "\n  build/%s is not built (make examples)\n",   \
                    m_);                                                      \
            if (in_ci())                                                      \
                CU_FAIL("a C++ SDK example is not built (CI=true)");         \
            TH_SKIP("a C++ SDK example is not built (make examples)");       \
        }                                                                     \
    } while (0)

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether the file at `path` comes to contain `needle` within `ms`
 * (scaled): polls the file, the event being the line a process logs. */
static bool file_gets(const char *path, const char *needle, unsigned ms)
{
    int64_t end = mono_ms() + th_test_ms(ms);
    for (;;) {
        char *text = th_test_read_file(path, NULL);
        bool found = text && strstr(text, needle);
        free(text);
        if (found)
            return true;
        if (mono_ms() >= end)
            return false;
        usleep(10 * 1000); /* polls the log, within the deadline */
    }
}

/* A config with the three examples, log level info (the async tool's
 * cancel line is an info line). */
static char *write_config(const char *dir)
{
    char text[4096];
    snprintf(text, sizeof text,
             "host:\n"
             "  log_level: info\n"
             "  shutdown_grace: 2s\n"
             "plugins:\n"
             "  - name: cxx_echo\n"
             "    path: %s\n"
             "  - name: cxx_countdown\n"
             "    path: %s\n"
             "  - name: cxx_rect\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: default\n"
             "    tools: [\"*\"]\n",
             th_test_build_path(examples[0]), th_test_build_path(examples[1]),
             th_test_build_path(examples[2]));
    return th_test_write_file(dir, "c.yaml", text, (size_t)-1);
}

/* Starts toolhost with argv[1..] (NULL-terminated), under $TH_VALGRIND
 * when set; stderr (and stdout when out_fd < 0) to log_path; stdin from
 * in_fd and stdout to out_fd when >= 0 (else /dev/null and the log). */
static pid_t spawn_toolhost(char *const args[], const char *log_path,
                            int in_fd, int out_fd)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int null = open("/dev/null", O_RDONLY);
    if (log < 0 || null < 0)
        _exit(126);
    dup2(in_fd >= 0 ? in_fd : null, 0);
    dup2(out_fd >= 0 ? out_fd : log, 1);
    dup2(log, 2);
    char *argv[32];
    int n = 0;
    argv[n++] = "/bin/sh";
    argv[n++] = "-c";
    argv[n++] = "exec ${TH_VALGRIND:-} \"$@\"";
    argv[n++] = "sh";
    argv[n++] = (char *)th_test_build_path("toolhost");
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    execv("/bin/sh", argv);
    _exit(127);
}

/* Waits for pid within `ms` (scaled); its exit status, or -1 after
 * killing it. */
static int reap(pid_t pid, unsigned ms)
{
    int64_t end = mono_ms() + th_test_ms(ms);
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status)
                                     : 128 + WTERMSIG(status);
        if (mono_ms() >= end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        usleep(20 * 1000); /* polls the exit, within the deadline */
    }
}

static void dump_log(const char *what, const char *path)
{
    char *text = th_test_read_file(path, NULL);
    fprintf(stderr, "\n  %s:\n%s\n", what, text ? text : "(none)");
    free(text);
}

/* ---- check --strict ------------------------------------------------------ */

static void test_check_strict(void)
{
    NEED("examples/cxx_echo.so", "examples/cxx_countdown.so",
         "examples/cxx_rect.so", "sdk-cxx/cxx_boundary.so");
    for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++) {
        th_test_run r;
        CU_ASSERT_EQUAL_FATAL(th_test_toolhost(&r, "check", "--strict",
                                               th_test_build_path(examples[i]),
                                               NULL),
                              0);
        if (r.status != 0 || !strstr(r.out, "0 errors, 0 warnings"))
            fprintf(stderr, "\n  check --strict %s:\n%s%s", examples[i], r.out,
                    r.err);
        CU_ASSERT_EQUAL(r.status, 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "0 errors, 0 warnings"));
        CU_ASSERT_PTR_NULL(strstr(r.out, "besides the entry symbol"));
        th_test_run_free(&r);
    }
}

/* ---- through `toolhost serve` --------------------------------------------- */

#define CALL(r, addr, ...)                                                     \
    th_test_toolhost(&(r), "call", "--connect", addr, __VA_ARGS__, NULL)

static void test_serve(void)
{
    NEED("examples/cxx_echo.so", "examples/cxx_countdown.so",
         "examples/cxx_rect.so");
    th_test_timeout(120);
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir);
    char sock[4200], addr[4300], log[4200];
    snprintf(sock, sizeof sock, "%s/th.sock", dir);
    snprintf(addr, sizeof addr, "unix:%s", sock);
    snprintf(log, sizeof log, "%s/serve.log", dir);
    char *args[] = {"serve", "-c", cfg, "--listen", addr, NULL};
    pid_t pid = spawn_toolhost(args, log, -1, -1);
    CU_ASSERT_FATAL(pid > 0);
    struct stat st;
    int64_t end = mono_ms() + th_test_ms(15000);
    while (stat(sock, &st) != 0 && mono_ms() < end)
        usleep(10 * 1000); /* polls the socket, within the deadline */
    CU_ASSERT_EQUAL(stat(sock, &st), 0);

    th_test_run r;
    CALL(r, addr, "echo", "text=hi from C++");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "hi from C++");
    th_test_run_free(&r);

    /* structured output, checked by the host against the schema */
    CALL(r, addr, "cxx_rect_measure", "width=2", "height=3.5", "unit=cm",
         "label=door");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "{\"area\":7.0,\"perimeter\":11.0,"
                                  "\"unit\":\"cm\",\"label\":\"door\"}");
    th_test_run_free(&r);
    CALL(r, addr, "cxx_rect_measure", "width=1", "height=1");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "{\"area\":1.0,\"perimeter\":4.0,"
                                  "\"unit\":\"m\"}");
    th_test_run_free(&r);
    /* each constraint refused before the handler, naming the parameter */
    static const struct {
        const char *arg, *msg;
    } bad[] = {
        {"width=0", "parameter 'width' must be > 0, got 0"},
        {"width=2000000", "parameter 'width' must be <= 1000000"},
        {"unit=km", "parameter 'unit' must be one of 'mm', 'cm', 'm', 'in'"},
        {"label=9lives", "parameter 'label' must match the pattern"},
        {"label=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
         "parameter 'label' must be at most 32 characters"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *w = strncmp(bad[i].arg, "width", 5) == 0 ? bad[i].arg
                                                              : "width=1";
        CALL(r, addr, "cxx_rect_measure", w, "height=1",
             strncmp(bad[i].arg, "width", 5) == 0 ? "unit=m" : bad[i].arg);
        CU_ASSERT_EQUAL(r.status, 2);
        if (!strstr(r.err, bad[i].msg))
            fprintf(stderr, "\n  %s: %s", bad[i].arg, r.err);
        CU_ASSERT_PTR_NOT_NULL(strstr(r.err, bad[i].msg));
        CU_ASSERT_STRING_EQUAL(r.out, "");
        th_test_run_free(&r);
    }
    CALL(r, addr, "cxx_rect_measure", "width=1");
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "missing required parameter "
                                         "'height'"));
    th_test_run_free(&r);

    /* async: progress from the tool's own thread, then its result */
    CALL(r, addr, "cxx_countdown", "steps=3", "delay_ms=1", "text=go");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "go");
    /* the first update acknowledges the call: always shown (later ones
     * may be coalesced when the caller reads slower than they come) */
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "progress: 3 to go"));
    th_test_run_free(&r);

    /* a deadline: the caller gives up, and the tool stops (its log line,
     * written when its sleep is cut short, is the proof) */
    CALL(r, addr, "--timeout", "1s", "cxx_countdown", "steps=1000000",
         "delay_ms=50");
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "timed out"));
    th_test_run_free(&r);
    bool stopped = file_gets(log, "to go", 10000) &&
                   file_gets(log, "cancelled with", 10000);
    CU_ASSERT(stopped);

    kill(pid, SIGTERM);
    int status = reap(pid, 30000);
    if (status != 0 || !stopped)
        dump_log("serve's log", log);
    CU_ASSERT_EQUAL(status, 0);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* ---- over MCP (stdio) -------------------------------------------------------- */

#define INIT                                                                   \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"    \
    "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"                 \
    "\"clientInfo\":{\"name\":\"raw\",\"version\":\"1\"}}}\n"                  \
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"

static void test_mcp(void)
{
    NEED("examples/cxx_echo.so", "examples/cxx_countdown.so",
         "examples/cxx_rect.so");
    th_test_timeout(120);
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir);
    const char *input =
        INIT
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\",\"arguments\":{\"text\":\"hi\"}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"cxx_rect_measure\",\"arguments\":{\"width\":2,"
        "\"height\":3.5,\"unit\":\"cm\"}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"cxx_rect_measure\",\"arguments\":{\"width\":-1,"
        "\"height\":1}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"cxx_countdown\",\"arguments\":{\"steps\":3,"
        "\"delay_ms\":1,\"text\":\"go\"},\"_meta\":{\"progressToken\":"
        "\"p6\"}}}\n";
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c", cfg,
                    NULL};
    th_test_run r;
    CU_ASSERT_EQUAL_FATAL(th_test_run_argv(argv, input, 60, 1, &r), 0);
    CU_ASSERT_EQUAL(r.status, 0);
    /* the list: each tool, the constraints in its inputSchema, the output
     * schema */
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"name\":\"cxx_countdown\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"exclusiveMinimum\":0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"pattern\":\"^[A-Za-z]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"outputSchema\""));
    /* the tags of .tag() (ABI 1.5), in the tool's _meta */
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"_meta\":{\"toolhost/tags\":"
                                         "[\"geometry\",\"read-only\"]}"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(r.out, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":"
                      "[{\"type\":\"text\",\"text\":\"hi\"}],\"isError\":"
                      "false"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(r.out, "\"structuredContent\":{\"area\":7.0,\"perimeter\":"
                      "11.0,\"unit\":\"cm\"}"));
    const char *five = strstr(r.out, "\"id\":5,");
    CU_ASSERT_PTR_NOT_NULL(five);
    if (five) {
        CU_ASSERT_PTR_NOT_NULL(strstr(five, "\"isError\":true"));
        CU_ASSERT_PTR_NOT_NULL(
            strstr(five, "parameter 'width' must be > 0, got -1"));
    }
    /* progress (updates may be coalesced: at least one arrives) */
    CU_ASSERT_PTR_NOT_NULL(
        strstr(r.out, "\"method\":\"notifications/progress\",\"params\":{"
                      "\"progressToken\":\"p6\""));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(r.out, "\"id\":6,\"result\":{\"content\":[{\"type\":\"text\","
                      "\"text\":\"go\"}],\"isError\":false"));
    if (r.status != 0)
        fprintf(stderr, "\n  mcp:\n%s\n%s\n", r.out, r.err);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* notifications/cancelled reaches the async tool's thread: it stops at
 * once (its log line), and the session ends without waiting for it. */
static void test_mcp_cancel(void)
{
    NEED("examples/cxx_echo.so", "examples/cxx_countdown.so",
         "examples/cxx_rect.so");
    th_test_timeout(120);
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir);
    char log[4200];
    snprintf(log, sizeof log, "%s/mcp.log", dir);
    int in[2], out[2];
    /* O_CLOEXEC: the child keeps only its dup2()ed ends, so closing
     * ours is its end of input */
    CU_ASSERT_FATAL(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
    char *args[] = {"mcp", "-c", cfg, NULL};
    pid_t pid = spawn_toolhost(args, log, in[0], out[1]);
    CU_ASSERT_FATAL(pid > 0);
    close(in[0]);
    close(out[1]);
    const char *call =
        INIT "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"cxx_countdown\",\"arguments\":{"
             "\"steps\":1000000,\"delay_ms\":50},"
             "\"_meta\":{\"progressToken\":2}}}\n";
    CU_ASSERT(write(in[1], call, strlen(call)) == (ssize_t)strlen(call));
    /* the call runs: its first progress notification */
    char buf[65536];
    size_t got = 0;
    buf[0] = '\0';
    struct pollfd pf = {.fd = out[0], .events = POLLIN};
    int64_t end = mono_ms() + th_test_ms(15000);
    while (!strstr(buf, "notifications/progress") && mono_ms() < end &&
           poll(&pf, 1, (int)(end - mono_ms())) > 0) {
        ssize_t n = read(out[0], buf + got, sizeof buf - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "notifications/progress"));
    const char *cancel =
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
        "\"params\":{\"requestId\":2,\"reason\":\"test\"}}\n";
    CU_ASSERT(write(in[1], cancel, strlen(cancel)) == (ssize_t)strlen(cancel));
    bool stopped = file_gets(log, "cancelled with", 10000);
    CU_ASSERT(stopped);
    close(in[1]); /* end of input: the session stops */
    int status = reap(pid, 30000);
    if (status != 0 || !stopped)
        dump_log("mcp's log", log);
    CU_ASSERT_EQUAL(status, 0);
    close(out[0]);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* ---- the boundary ------------------------------------------------------------ */

static void test_boundary(void)
{
    NEED("sdk-cxx/cxx_boundary.so");
    th_test_timeout(120); /* 16 processes: a minute under valgrind */
    static const struct {
        const char *tool;
        int status;
        const char *out, *err;
    } cases[] = {
        {"cxx_boundary_error", 1, "", "no such thing: x\n"},
        {"cxx_boundary_std", 1, "", "internal error: index 7\n"},
        {"cxx_boundary_unknown", 1, "",
         "internal error: an unknown exception\n"},
        {"cxx_boundary_fail", 1, "partial", "bad input\n"},
        /* ABI 1.5: the backend's codes, with the hint */
        {"cxx_boundary_backend", 1, "",
         "cxx_boundary_backend: slow down (rate_limited; retry after 7000 "
         "ms)\n"},
        {"cxx_boundary_backend_async", 1, "",
         "cxx_boundary_backend_async: down (unavailable)\n"},
        /* a Pending that nobody completed: failed by its destructor */
        {"cxx_boundary_forget", 1, "",
         "the tool ended without completing the call\n"},
        {"cxx_boundary_drop", 1, "",
         "the tool ended without completing the call\n"},
        /* an exception on the spawned thread */
        {"cxx_boundary_spawn_throw", 1, "", "late failure\n"},
        /* a write after complete(): refused, logged, the result stands */
        {"cxx_boundary_after", 0, "done", NULL},
        /* a write on the Call after suspend(): refused, and the call (now
         * the Pending's) fails when the Pending goes */
        {"cxx_boundary_suspended_write", 1, "",
         "the tool ended without completing the call\n"},
        {"cxx_boundary_argtype", 1, "",
         "argument 'text' must be an integer that fits (wrong type)\n"},
        {"cxx_boundary_missing", 1, "", "missing argument 'absent'\n"},
        {"cxx_boundary_stream", 0, "t 42 -7 2.5 true", NULL},
        /* the config block's default, read by a handler */
        {"cxx_boundary_config", 0, "hi", NULL},
        {"cxx_boundary_validate", 0, "valid", NULL},
    };
    const char *so = th_test_build_path("sdk-cxx/cxx_boundary.so");
    char path[4200];
    snprintf(path, sizeof path, "%s", so);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        th_test_run r;
        CU_ASSERT_EQUAL_FATAL(
            th_test_toolhost(&r, "call", path, cases[i].tool, NULL), 0);
        bool ok = r.status == cases[i].status &&
                  strcmp(r.out, cases[i].out) == 0 &&
                  (!cases[i].err || strstr(r.err, cases[i].err));
        if (!ok)
            fprintf(stderr, "\n  %s: status %d\n  stdout: %s\n  stderr: %s\n",
                    cases[i].tool, r.status, r.out, r.err);
        CU_ASSERT(ok);
        th_test_run_free(&r);
    }
    /* validate(): a th::Error is the caller's message, anything else an
     * internal error; both refuse the call before the handler runs */
    static const struct {
        const char *text, *msg;
    } refused[] = {{"text=bad", "text must not be 'bad'"},
                   {"text=worse", "internal error: boom"}};
    for (size_t i = 0; i < 2; i++) {
        th_test_run v;
        CU_ASSERT_EQUAL_FATAL(th_test_toolhost(&v, "call", path,
                                               "cxx_boundary_validate",
                                               refused[i].text, NULL),
                              0);
        CU_ASSERT_EQUAL(v.status, 2);
        CU_ASSERT_STRING_EQUAL(v.out, "");
        if (!strstr(v.err, refused[i].msg))
            fprintf(stderr, "\n  validate %s: %s\n", refused[i].text, v.err);
        CU_ASSERT_PTR_NOT_NULL(strstr(v.err, refused[i].msg));
        th_test_run_free(&v);
    }
    /* a config block from toolhost.yaml reaches call.config() */
    char *dir = th_test_tmpdir();
    char yaml[4600];
    snprintf(yaml, sizeof yaml,
             "plugins:\n"
             "  - name: cxx_boundary\n"
             "    path: %s\n"
             "    config:\n"
             "      greeting: hey\n",
             path);
    char *cfg = th_test_write_file(dir, "c.yaml", yaml, (size_t)-1);
    th_test_run c;
    CU_ASSERT_EQUAL_FATAL(th_test_toolhost(&c, "call", "-c", cfg,
                                           "cxx_boundary_config", NULL),
                          0);
    CU_ASSERT_EQUAL(c.status, 0);
    CU_ASSERT_STRING_EQUAL(c.out, "hey");
    th_test_run_free(&c);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
    /* the logged refusals */
    th_test_run r;
    CU_ASSERT_EQUAL_FATAL(
        th_test_toolhost(&r, "call", path, "cxx_boundary_after", NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "a spawned task threw after its "
                                         "call ended"));
    th_test_run_free(&r);
}

/* ---- the template against an installed SDK --------------------------------------- */

static void test_template(void)
{
    th_test_timeout(360); /* make install and a compile on a busy machine */
    char *dir = th_test_tmpdir();
    char script[8192];
    snprintf(script, sizeof script,
             "set -e\n"
             "P='%s/prefix'\n"
             "cd '%s'\n"
             "make --no-print-directory -s install SANITIZER='%s' "
             "PREFIX=\"$P\" >/dev/null\n"
             "test -f \"$P/include/toolhost/toolhost.hpp\"\n"
             "test -f \"$P/share/doc/toolhost/cxx/README.md\"\n"
             "cd '%s'\n"
             "\"$P/bin/toolhost\" new --lang cxx x >/dev/null\n"
             "cd x\n"
             "export PKG_CONFIG_PATH=\"$P/lib/pkgconfig\"\n"
             "make -s CXX='c++ -Werror' "
             ">/dev/null\n"
             "\"$P/bin/toolhost\" check --strict ./x.so\n"
             "\"$P/bin/toolhost\" call ./x.so x_hello\n"
             "\"$P/bin/toolhost\" call ./x.so x_hello name=you times=2\n"
             "if \"$P/bin/toolhost\" call ./x.so x_hello times=0 "
             "2>../refused.txt; then exit 7; fi\n"
             "cat ../refused.txt\n"
             "cd '%s'\n"
             "make --no-print-directory -s uninstall PREFIX=\"$P\" "
             ">/dev/null 2>&1\n"
             "test ! -e \"$P/include/toolhost/toolhost.hpp\"\n"
             "test ! -e \"$P/share/doc/toolhost/cxx\"\n"
             "echo template-ok\n",
             dir, TH_SOURCE_DIR, TH_SANITIZER, dir, TH_SOURCE_DIR);
    char *argv[] = {"/bin/sh", "-c", script, NULL};
    th_test_run r;
    CU_ASSERT_EQUAL_FATAL(th_test_run_argv(argv, NULL, 300, 0, &r), 0);
    if (r.status != 0)
        fprintf(stderr, "\n  template script failed (%d):\n%s\n%s\n", r.status,
                r.out, r.err);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "0 errors, 0 warnings"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "hello, world\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "hello, you\nhello, you\n"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(r.out, "parameter 'times' must be >= 1, got 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "template-ok\n"));
    th_test_run_free(&r);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_sdk_cxx(void)
{
    CU_pSuite s = CU_add_suite("sdk_cxx", NULL, NULL);
    CU_add_test(s, "check_strict", test_check_strict);
    CU_add_test(s, "serve", test_serve);
    CU_add_test(s, "mcp", test_mcp);
    CU_add_test(s, "mcp_cancel", test_mcp_cancel);
    CU_add_test(s, "boundary", test_boundary);
    CU_add_test(s, "template", test_template);
}
