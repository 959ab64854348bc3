/* test_mcp.c - `toolhost mcp`: MCP over stdio.
 *
 * Interop: the official MCP TypeScript SDK client (tests/mcp/NAME.mjs, Client
 * + StdioClientTransport) drives the real binary: list, call, a missing
 * parameter, progress, cancel, tasks, list_changed after a reload, a 10 MB
 * output cut by the limits, 200 concurrent calls, Unicode.  Skipped only
 * when node is not installed.
 *
 * Raw: JSON lines written by hand (bad JSON, a batch, an over-long line, an
 * unknown method, requests before initialize), read back line by line;
 * end of input ends the process with status 0. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"

/* ---- helpers ---------------------------------------------------------------- */

static char *write_config(const char *dir, const char *tools,
                          const char *host_extra)
{
    char text[2048];
    snprintf(text, sizeof text,
             "host:\n"
             "  reload: signal\n"
             "%s"
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: %s\n",
             host_extra ? host_extra : "", th_test_build_path("plugins/echo.so"),
             tools);
    return th_test_write_file(dir, "c.yaml", text, (size_t)-1);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool have_node(void)
{
    return th_test_shell_ok("command -v node >/dev/null 2>&1");
}

/* Runs tests/mcp/SCRIPT with node against CONFIG; the script exits 0 or
 * says what failed. */
static void run_script(const char *script, const char *config)
{
    th_test_timeout(150);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && if [ ! -d node_modules/@modelcontextprotocol/sdk ]; "
             "then echo 'tests/mcp/node_modules is missing: run "
             "scripts/install-deps (npm ci in tests/mcp)' >&2; exit 3; fi; "
             "exec node '%s' '%s' '%s'",
             th_test_source_path("tests/mcp"), script,
             th_test_build_path("toolhost"), config);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    th_test_run r;
    int rc = th_test_run_argv(argv, NULL, 120, 0, &r);
    CU_ASSERT_EQUAL(rc, 0);
    if (r.status != 0)
        fprintf(stderr, "\n%s exited %d\nstdout:\n%s\nstderr (tail):\n%s\n",
                script, r.status, r.out ? r.out : "",
                r.err && r.err_len > 4000 ? r.err + r.err_len - 4000
                                          : r.err ? r.err : "");
    CU_ASSERT_EQUAL(r.status, 0);
    th_test_run_free(&r);
}

/* Runs `toolhost mcp -c cfg` with `input` on stdin (then end of input);
 * returns the stdout lines parsed as JSON (an array), status in *status. */
static json_t *run_raw(const char *cfg, const char *input, int *status)
{
    th_test_run r;
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c",
                    (char *)cfg, NULL};
    int rc = th_test_run_argv(argv, input, 30, 1, &r);
    CU_ASSERT_EQUAL(rc, 0);
    *status = r.status;
    json_t *arr = json_array();
    char *save = NULL;
    for (char *line = strtok_r(r.out, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        if (!j) {
            fprintf(stderr, "not JSON on stdout: %.200s\n", line);
            CU_FAIL("a stdout line is not JSON");
            continue;
        }
        json_array_append_new(arr, j);
    }
    th_test_run_free(&r);
    return arr;
}

/* The response with id `id` (an integer), or NULL. */
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

static int err_code(json_t *msg)
{
    return (int)json_integer_value(
        json_object_get(json_object_get(msg, "error"), "code"));
}

#define INIT                                                                   \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"    \
    "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"                 \
    "\"clientInfo\":{\"name\":\"raw\",\"version\":\"1\"}}}\n"                  \
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"

/* ---- interop (the TypeScript SDK) --------------------------------------------- */

static void test_sdk_basic(void)
{
    if (!have_node())
        TH_SKIP("node is not installed");
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir, "[\"echo\", \"echo_async\"]", NULL);
    run_script("basic.mjs", cfg);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* ABI 1.1 over MCP with the SDK client: title, outputSchema,
 * structuredContent (the SDK's own output validation passes), null for
 * optional parameters, front=mcp. */
static void test_sdk_structured(void)
{
    if (!have_node())
        TH_SKIP("node is not installed");
    char *dir = th_test_tmpdir();
    char text[1024];
    snprintf(text, sizeof text,
             "host:\n"
             "  reload: signal\n"
             "plugins:\n"
             "  - name: abi11_tools\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [\"abi11_tools_rows\", \"abi11_tools_who\"]\n",
             th_test_build_path("fixtures/abi11_tools.so"));
    char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
    run_script("structured.mjs", cfg);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* ABI 1.4 over MCP with the SDK client: resources, prompts and
 * completion of the conformance fixture (tests/mcp/content.mjs). */
static void test_sdk_content(void)
{
    if (!have_node())
        TH_SKIP("node is not installed");
    char *dir = th_test_tmpdir();
    char text[1024];
    snprintf(text, sizeof text,
             "host:\n"
             "  reload: off\n"
             "plugins:\n"
             "  - name: conform_tools\n"
             "    path: %s\n",
             th_test_build_path("fixtures/conform_tools.so"));
    char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
    run_script("content.mjs", cfg);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* What a model in OpenAI strict mode sends for `toolhost export --format
 * openai --strict`: every property, null for those it leaves out.  Built
 * from the export itself; the call takes the nulls as absent. */
static void test_strict_export_call(void)
{
    char *dir = th_test_tmpdir();
    char text[1024];
    snprintf(text, sizeof text,
             "host:\n"
             "  reload: off\n"
             "plugins:\n"
             "  - name: abi11_tools\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [\"abi11_tools_rows\"]\n",
             th_test_build_path("fixtures/abi11_tools.so"));
    char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
    th_test_run r;
    CU_ASSERT_FATAL(th_test_toolhost(&r, "export", "-c", cfg, "--format",
                                     "openai", "--strict", NULL) == 0);
    CU_ASSERT_EQUAL(r.status, 0);
    json_t *ex = json_loads(r.out ? r.out : "", 0, NULL);
    th_test_run_free(&r);
    json_t *params = json_object_get(
        json_object_get(json_object_get(json_array_get(ex, 0), "function"),
                        "parameters"),
        "properties");
    CU_ASSERT_FATAL(json_is_object(params));
    json_t *args = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(params, k, v)
        json_object_set_new(args, k, json_null());
    CU_ASSERT_EQUAL(json_object_size(args), 3);
    char *a = json_dumps(args, JSON_COMPACT);
    CU_ASSERT_FATAL(th_test_toolhost(&r, "call", "-c", cfg,
                                     "abi11_tools_rows", "--json", a,
                                     NULL) == 0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT(r.out && strstr(r.out, "\"rows\":10"));
    if (r.status != 0)
        fprintf(stderr, "\n%s\n%s\n", r.out ? r.out : "",
                r.err ? r.err : "");
    th_test_run_free(&r);
    free(a);
    json_decref(args);
    json_decref(ex);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

static void test_sdk_tasks(void)
{
    if (!have_node())
        TH_SKIP("node is not installed");
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir, "[\"echo\", \"echo_async\"]", NULL);
    run_script("tasks.mjs", cfg);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

static void test_sdk_list_changed(void)
{
    if (!have_node())
        TH_SKIP("node is not installed");
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir, "[\"echo\"]", NULL);
    run_script("reload.mjs", cfg);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* Permission `ask`: elicitation when the client declared it, else a tool
 * error naming the rule and how to allow the tool. */
static void test_sdk_permission(void)
{
    if (!have_node())
        TH_SKIP("node is not installed");
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir,
                             "[\"echo\"]\n"
                             "    permissions:\n"
                             "      default: deny\n"
                             "      rules:\n"
                             "        - match: \"echo\"\n"
                             "          action: ask",
                             NULL);
    run_script("permission.mjs", cfg);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* The acceptance config: configs/default.yaml as an MCP server. */
static void test_sdk_default_config(void)
{
    if (!have_node())
        TH_SKIP("node is not installed");
    run_script("basic.mjs", th_test_source_path("configs/default.yaml"));
}

/* ---- raw JSON lines --------------------------------------------------------------- */

static void test_raw_robustness(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir, "[\"echo\"]", NULL);
    const char *input =
        "{\"jsonrpc\":\"2.0\",\"id\":90,\"method\":\"tools/list\"}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":91,\"method\":\"ping\"}\n" INIT
        "this is not json\n"
        "[{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}]\n"
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"no/such\"}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\","
        "\"params\":{\"name\":42}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"nope\",\"arguments\":{}}}\n"
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/whatever\"}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"still "
        "here\"}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"initialize\","
        "\"params\":{\"protocolVersion\":\"1999-01-01\"}}\n";
    int st = -1;
    json_t *out = run_raw(cfg, input, &st);
    CU_ASSERT_EQUAL(st, 0); /* end of input: exit 0 */
    CU_ASSERT_EQUAL(err_code(by_id(out, 90)), -32600); /* before init */
    CU_ASSERT_PTR_NOT_NULL(json_object_get(by_id(out, 91), "result"));
    json_t *init = by_id(out, 1);
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_object_get(init, "result"),
                                          "protocolVersion")),
        "2025-11-25");
    /* Parse error and batch: id null. */
    int parse = 0, batch = 0;
    size_t i;
    json_t *v;
    json_array_foreach(out, i, v)
    {
        if (json_is_null(json_object_get(v, "id"))) {
            if (err_code(v) == -32700)
                parse++;
            else if (err_code(v) == -32600)
                batch++;
        }
    }
    CU_ASSERT_EQUAL(parse, 1);
    CU_ASSERT_EQUAL(batch, 1);
    CU_ASSERT_EQUAL(err_code(by_id(out, 3)), -32601);
    CU_ASSERT_EQUAL(err_code(by_id(out, 4)), -32602);
    CU_ASSERT_EQUAL(err_code(by_id(out, 5)), -32602);
    json_t *r6 = json_object_get(by_id(out, 6), "result");
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(
            json_array_get(json_object_get(r6, "content"), 0), "text")),
        "still here");
    /* A second initialize is refused. */
    CU_ASSERT_EQUAL(err_code(by_id(out, 7)), -32600);
    json_decref(out);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* A line past host.mcp_max_message: an error, and the stream goes on at
 * the next newline. */
/* An unsupported protocol version: the latest is offered; a supported
 * older one is echoed. */
static void test_raw_versions(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir, "[\"echo\"]", NULL);
    const char *vs[][2] = {{"1999-01-01", "2025-11-25"},
                           {"2025-06-18", "2025-06-18"},
                           {"2025-03-26", "2025-03-26"},
                           {"2025-11-25", "2025-11-25"},
                           {"2024-11-05", "2024-11-05"}};
    for (int i = 0; i < 5; i++) {
        char input[512];
        snprintf(input, sizeof input,
                 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
                 "\"params\":{\"protocolVersion\":\"%s\",\"capabilities\":"
                 "{}}}\n",
                 vs[i][0]);
        int st = -1;
        json_t *out = run_raw(cfg, input, &st);
        CU_ASSERT_EQUAL(st, 0);
        const char *v = json_string_value(json_object_get(
            json_object_get(by_id(out, 1), "result"), "protocolVersion"));
        CU_ASSERT(v && strcmp(v, vs[i][1]) == 0);
        json_t *caps = json_object_get(
            json_object_get(by_id(out, 1), "result"), "capabilities");
        CU_ASSERT_EQUAL(json_object_get(caps, "tasks") != NULL,
                        strcmp(vs[i][1], "2025-11-25") == 0);
        json_decref(out);
    }
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

static void test_raw_long_line(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir, "[\"echo\"]", "  mcp_max_message: 1KiB\n");
    size_t n = 20000;
    char *input = malloc(2 * n + 2048);
    CU_ASSERT_PTR_NOT_NULL_FATAL(input);
    strcpy(input, INIT);
    size_t k = strlen(input);
    k += (size_t)sprintf(input + k,
                         "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/"
                         "call\",\"params\":{\"name\":\"echo\",\"arguments\":"
                         "{\"text\":\"");
    memset(input + k, 'a', n);
    k += n;
    k += (size_t)sprintf(input + k,
                         "\"}}}\n{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":"
                         "\"ping\"}\n"
                         "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":"
                         "\"logging/setLevel\",\"params\":{\"level\":"
                         "\"loud\"}}\n"
                         "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":"
                         "\"logging/setLevel\",\"params\":{\"level\":"
                         "\"error\"}}\n");
    /* a second long line: an error again, but no log message now */
    memset(input + k, 'b', n);
    k += n;
    input[k++] = '\n';
    input[k] = '\0';
    int st = -1;
    json_t *out = run_raw(cfg, input, &st);
    CU_ASSERT_EQUAL(st, 0);
    int too_long = 0;
    size_t i;
    json_t *v;
    json_array_foreach(out, i, v)
    {
        const char *m = json_string_value(
            json_object_get(json_object_get(v, "error"), "message"));
        if (m && strstr(m, "too long"))
            too_long++;
    }
    CU_ASSERT_EQUAL(too_long, 2);
    CU_ASSERT_PTR_NULL(by_id(out, 2)); /* never parsed */
    CU_ASSERT_PTR_NOT_NULL(json_object_get(by_id(out, 3), "result"));
    CU_ASSERT_EQUAL(err_code(by_id(out, 4)), -32602);
    CU_ASSERT_PTR_NOT_NULL(json_object_get(by_id(out, 5), "result"));
    /* The session's own log line went to the client (level warning, the
     * default) for the first long line only (setLevel error after it). */
    int logs = 0;
    json_array_foreach(out, i, v)
    {
        const char *m = json_string_value(json_object_get(v, "method"));
        if (m && strcmp(m, "notifications/message") == 0) {
            logs++;
            CU_ASSERT_STRING_EQUAL(
                json_string_value(json_object_get(
                    json_object_get(v, "params"), "level")),
                "warning");
        }
    }
    CU_ASSERT_EQUAL(logs, 1);
    json_decref(out);
    free(input);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* Deep nesting is refused as a parse error, not a crash. */
static void test_raw_deep_nesting(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir, "[\"echo\"]", NULL);
    size_t depth = 100000;
    char *input = malloc(2 * depth + 1024);
    CU_ASSERT_PTR_NOT_NULL_FATAL(input);
    strcpy(input, INIT);
    size_t k = strlen(input);
    memset(input + k, '[', depth);
    k += depth;
    memset(input + k, ']', depth);
    k += depth;
    strcpy(input + k, "\n{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n");
    int st = -1;
    json_t *out = run_raw(cfg, input, &st);
    CU_ASSERT_EQUAL(st, 0);
    CU_ASSERT_PTR_NOT_NULL(json_object_get(by_id(out, 3), "result"));
    json_decref(out);
    free(input);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* End of input while a call runs: the call finishes within the grace,
 * its answer goes out, the process exits 0. */
static void test_raw_eof_drains(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir, "[\"echo\", \"echo_async\"]", NULL);
    const char *input =
        INIT "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"echo_async\",\"arguments\":{\"text\":"
             "\"drained\",\"steps\":5,\"delay_ms\":40}}}\n";
    int st = -1;
    json_t *out = run_raw(cfg, input, &st);
    CU_ASSERT_EQUAL(st, 0);
    json_t *r = json_object_get(by_id(out, 2), "result");
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(
            json_array_get(json_object_get(r, "content"), 0), "text")),
        "drained");
    json_decref(out);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* Two calls with the same id in flight: the second is refused with
 * -32600, the first still answers. */
static void test_raw_dup_id(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir, "[\"echo\", \"echo_async\"]", NULL);
    const char *input =
        INIT "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"echo_async\",\"arguments\":{\"text\":"
             "\"first\",\"steps\":50,\"delay_ms\":40}}}\n"
             "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"echo_async\",\"arguments\":{\"text\":"
             "\"second\",\"steps\":5,\"delay_ms\":40}}}\n";
    int st = -1;
    json_t *out = run_raw(cfg, input, &st);
    CU_ASSERT_EQUAL(st, 0);
    int results = 0, refused = 0;
    size_t i;
    json_t *v;
    json_array_foreach(out, i, v)
    {
        if (json_integer_value(json_object_get(v, "id")) != 2)
            continue;
        if (json_object_get(v, "result"))
            results++;
        if (json_integer_value(json_object_get(
                json_object_get(v, "error"), "code")) == -32600)
            refused++;
    }
    CU_ASSERT_EQUAL(results, 1);
    CU_ASSERT_EQUAL(refused, 1);
    json_decref(out);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* SIGTERM while a long call runs: the grace passes, the call is cancelled
 * (its answer, a cancelled tool error, goes out), exit 0, no child left. */
static void test_sigterm(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir, "[\"echo\", \"echo_async\"]",
                             "  shutdown_grace: 200ms\n");
    int in[2], out[2];
    CU_ASSERT_FATAL(pipe(in) == 0 && pipe(out) == 0);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        execl(th_test_build_path("toolhost"), "toolhost", "mcp", "-c", cfg,
              (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    const char *input =
        INIT "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"echo_async\",\"arguments\":{\"text\":"
             "\"x\",\"steps\":100000,\"delay_ms\":50},"
             "\"_meta\":{\"progressToken\":2}}}\n";
    CU_ASSERT(write(in[1], input, strlen(input)) == (ssize_t)strlen(input));
    /* Wait for the call to run: its first progress notification. */
    char buf[65536];
    size_t got = 0;
    buf[0] = '\0';
    struct pollfd pf = {.fd = out[0], .events = POLLIN};
    int64_t end = mono_ms() + th_test_ms(10000);
    while (!strstr(buf, "notifications/progress") && mono_ms() < end &&
           poll(&pf, 1, (int)(end - mono_ms())) > 0) {
        ssize_t n = read(out[0], buf + got, sizeof buf - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "notifications/progress"));
    kill(pid, SIGTERM);
    int status = -1;
    end = mono_ms() + th_test_ms(10000);
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (mono_ms() >= end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            CU_FAIL("toolhost mcp did not exit in time after SIGTERM");
            break;
        }
        usleep(20 * 1000); /* polls the exit, within the deadline */
    }
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (;;) {
        ssize_t n = read(out[0], buf + got, sizeof buf - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "\"id\":2"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "cancelled"));
    close(in[1]);
    close(out[0]);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* A binary stdout becomes a base64 resource blob; ill-formed UTF-8 in a
 * text stdout becomes U+FFFD (the line stays valid JSON). */
static void test_raw_binary_and_bad_utf8(void)
{
    char *dir = th_test_tmpdir();
    char text[1024];
    snprintf(text, sizeof text,
             "plugins:\n"
             "  - name: flood\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [\"*\"]\n",
             th_test_build_path("fixtures/flood.so"));
    char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
    const char *input =
        INIT "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"flood_binary\",\"arguments\":{\"size\":"
             "100,\"pattern\":\"binary\"}}}\n"
             "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"flood_command\",\"arguments\":{\"size\":"
             "1000,\"pattern\":\"invalid_utf8\"}}}\n";
    int st = -1;
    json_t *out = run_raw(cfg, input, &st);
    CU_ASSERT_EQUAL(st, 0);
    json_t *b0 = json_array_get(
        json_object_get(json_object_get(by_id(out, 2), "result"), "content"),
        0);
    const char *type = json_string_value(json_object_get(b0, "type"));
    CU_ASSERT(type && strcmp(type, "resource") == 0);
    json_t *res = json_object_get(b0, "resource");
    const char *blob = json_string_value(json_object_get(res, "blob"));
    CU_ASSERT(blob && strlen(blob) == 136); /* 100 bytes in base64 */
    CU_ASSERT_PTR_NOT_NULL(json_string_value(json_object_get(res, "mimeType")));
    json_t *t0 = json_array_get(
        json_object_get(json_object_get(by_id(out, 3), "result"), "content"),
        0);
    const char *t = json_string_value(json_object_get(t0, "text"));
    CU_ASSERT(t && strstr(t, "\xEF\xBF\xBD") != NULL);
    json_decref(out);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* An empty stream adds no block: a failed call that wrote only stderr is
 * that one block, isError; a successful call with an empty stdout has an
 * empty content list (once answered with an empty result object, then
 * with an empty text block a model read as an answer). */
static void test_raw_failure_blocks(void)
{
    const char *input =
        INIT "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"text_count\",\"arguments\":{\"path\":"
             "\"no/such/file\"}}}\n"
             "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"\"}}}\n";
    int st = -1;
    json_t *out = run_raw(th_test_source_path("configs/default.yaml"), input,
                          &st);
    CU_ASSERT_EQUAL(st, 0);
    json_t *r2 = json_object_get(by_id(out, 2), "result");
    CU_ASSERT(json_is_true(json_object_get(r2, "isError")));
    json_t *c2 = json_object_get(r2, "content");
    CU_ASSERT_EQUAL(json_array_size(c2), 1);
    const char *e = json_string_value(
        json_object_get(json_array_get(c2, 0), "text"));
    CU_ASSERT(e && strstr(e, "no/such/file") != NULL);
    json_t *r3 = json_object_get(by_id(out, 3), "result");
    CU_ASSERT(json_is_false(json_object_get(r3, "isError")));
    json_t *c3 = json_object_get(r3, "content");
    CU_ASSERT(json_is_array(c3) && json_array_size(c3) == 0);
    CU_ASSERT(json_integer_value(json_object_get(
                  json_object_get(r3, "_meta"), "toolhost/call_id")) > 0);
    json_decref(out);
}

/* ABI 1.4 blocks and asks over stdio (fixture abi14_calls.so):
 *  - a tool declared TOOLHOST_TOOL_SHORT runs on the input thread, the
 *    one that would read the client's answer: its ask_client() is refused
 *    at once (TOOLHOST_ESTATE, -4), never a wait that could only end at
 *    the call's deadline with the session frozen;
 *  - a tool that writes blocks past its budget in a loop gets each one
 *    refused (ENOMEM, -2) but the host log has one line of it, not one a
 *    block. */
static void test_raw_abi14_short_ask_and_refusals(void)
{
    char *dir = th_test_tmpdir();
    char text[1024];
    snprintf(text, sizeof text,
             "host:\n"
             "  reload: off\n"
             "  default_timeout: 3s\n"
             "plugins:\n"
             "  - name: abi14_calls\n"
             "    path: %s\n",
             th_test_build_path("fixtures/abi14_calls.so"));
    char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
    const char *input =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
        "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{\"sampling\":{}},"
        "\"clientInfo\":{\"name\":\"raw\",\"version\":\"1\"}}}\n"
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"abi14_calls_short\",\"arguments\":{\"kind\":1,"
        "\"request\":\"{\\\"messages\\\":[],\\\"maxTokens\\\":5}\"}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"abi14_calls_many\",\"arguments\":{\"n\":500,"
        "\"size\":0}}}\n";
    th_test_run r;
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c", cfg,
                    NULL};
    CU_ASSERT_EQUAL_FATAL(th_test_run_argv(argv, input, 30, 1, &r), 0);
    CU_ASSERT_EQUAL(r.status, 0);
    json_t *out = json_array();
    char *save = NULL;
    for (char *line = strtok_r(r.out, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(line, 0, NULL);
        if (j)
            json_array_append_new(out, j);
    }
    json_t *r2 = json_object_get(by_id(out, 2), "result");
    const char *t2 = json_string_value(json_object_get(
        json_array_get(json_object_get(r2, "content"), 0), "text"));
    CU_ASSERT_PTR_NOT_NULL(t2);
    if (t2 && strcmp(t2, "rc=-4 answer=") != 0)
        fprintf(stderr, "the short tool's ask: %s\n", t2);
    CU_ASSERT(t2 && strcmp(t2, "rc=-4 answer=") == 0);
    CU_ASSERT(json_is_false(json_object_get(r2, "isError")));
    CU_ASSERT(strstr(r.err, "ask_client() refused: a short tool") != NULL);
    /* the budget (text: 8,000 bytes) holds some empty blocks, not 500 */
    json_t *r3 = json_object_get(by_id(out, 3), "result");
    const char *t3 = json_string_value(json_object_get(
        json_array_get(json_object_get(r3, "content"), 0), "text"));
    CU_ASSERT(t3 && strstr(t3, " last=-2") != NULL);
    int lines = 0;
    for (const char *p = r.err; (p = strstr(p, "write_block: the content "
                                               "passes")) != NULL;
         p++)
        lines++;
    CU_ASSERT_EQUAL(lines, 1);
    json_decref(out);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* A plugin printing to stdout (init and execute, printf and write(1)):
 * nothing of it reaches the protocol stream (run_raw fails on any line
 * that is not JSON), it lands on stderr. */
static void test_raw_stray_printf(void)
{
    char *dir = th_test_tmpdir();
    char text[1024];
    snprintf(text, sizeof text,
             "plugins:\n"
             "  - name: stray\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [\"*\"]\n",
             th_test_build_path("fixtures/stray_printf.so"));
    char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
    const char *input =
        INIT "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"stray_printf\",\"arguments\":{}}}\n";
    th_test_run r;
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c", cfg,
                    NULL};
    CU_ASSERT_EQUAL(th_test_run_argv(argv, input, 30, 1, &r), 0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NULL(strstr(r.out, "stray"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"clean\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "stray printf from init"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "stray write"));
    th_test_run_free(&r);
    int st = -1;
    json_t *out = run_raw(cfg, input, &st);
    CU_ASSERT_EQUAL(json_array_size(out), 2);
    json_decref(out);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* stdin a regular file or /dev/null (not pollable: libuv's epoll refuses
 * them; this once aborted the process): read through the thread pool,
 * answered, exit 0. */
static void test_raw_file_stdin(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir, "[\"echo\"]", NULL);
    char *req = th_test_write_file(
        dir, "req.jsonl",
        INIT "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":"
             "\"from a file\"}}}",
        (size_t)-1); /* no final newline: the last line still counts */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' mcp -c '%s' < '%s'",
             th_test_build_path("toolhost"), cfg, req);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    th_test_run r;
    CU_ASSERT_EQUAL(th_test_run_argv(argv, NULL, 30, 0, &r), 0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "from a file"));
    th_test_run_free(&r);
    snprintf(cmd, sizeof cmd, "'%s' mcp -c '%s' < /dev/null",
             th_test_build_path("toolhost"), cfg);
    CU_ASSERT_EQUAL(th_test_run_argv(argv, NULL, 30, 0, &r), 0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_EQUAL(r.out_len, 0);
    th_test_run_free(&r);
    free(req);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* --toolset names a toolset that does not exist: a usage error. */
static void test_bad_toolset(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir, "[\"echo\"]", NULL);
    th_test_run r;
    CU_ASSERT_EQUAL(th_test_toolhost(&r, "mcp", "-c", cfg, "--toolset",
                                     "nope", NULL),
                    0);
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "nope"));
    CU_ASSERT_EQUAL(r.out_len, 0);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* `toolhost export --format openai --strict` and openai-responses on the
 * default config: run_code's description within 1,024 characters, naming
 * every tool it can call; strict schemas. */
static void test_export_strict(void)
{
    const char *cfg = th_test_source_path("configs/default.yaml");
    const char *fmts[] = {"openai", "openai-responses"};
    for (int f = 0; f < 2; f++) {
        th_test_run r;
        CU_ASSERT_EQUAL(th_test_toolhost(&r, "export", "-c", cfg, "--format",
                                         fmts[f], "--strict", NULL),
                        0);
        CU_ASSERT_EQUAL(r.status, 0);
        json_error_t e;
        json_t *j = json_loads(r.out ? r.out : "", 0, &e);
        CU_ASSERT_FATAL(json_is_array(j));
        json_t *run = NULL;
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v)
        {
            json_t *fn = f == 0 ? json_object_get(v, "function") : v;
            CU_ASSERT(json_is_true(json_object_get(fn, "strict")));
            json_t *p = json_object_get(fn, "parameters");
            CU_ASSERT(json_is_false(json_object_get(p, "additionalProperties")));
            CU_ASSERT_EQUAL(json_array_size(json_object_get(p, "required")),
                            json_object_size(json_object_get(p, "properties")));
            if (strcmp(json_string_value(json_object_get(fn, "name")),
                       "run_code") == 0)
                run = fn;
        }
        CU_ASSERT_PTR_NOT_NULL_FATAL(run);
        const char *d = json_string_value(json_object_get(run, "description"));
        CU_ASSERT(d && strlen(d) <= 1024);
        json_array_foreach(j, i, v)
        {
            json_t *fn = f == 0 ? json_object_get(v, "function") : v;
            const char *n = json_string_value(json_object_get(fn, "name"));
            if (strcmp(n, "run_code") != 0)
                CU_ASSERT_PTR_NOT_NULL(strstr(d, n));
        }
        json_decref(j);
        th_test_run_free(&r);
    }
}

/* --toolset: only that toolset's tools; a toolset the user may not use
 * (allow_users) is refused with status 2. */
static void test_toolset_option(void)
{
    char *dir = th_test_tmpdir();
    char text[1024];
    snprintf(text, sizeof text,
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: a\n"
             "    tools: [\"echo\"]\n"
             "  - name: b\n"
             "    tools: [\"echo\", \"echo_async\"]\n"
             "  - name: other\n"
             "    tools: [\"echo_async\"]\n"
             "    allow_users: [\"%u\"]\n",
             th_test_build_path("plugins/echo.so"), (unsigned)getuid() + 4242);
    char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
    const char *input =
        INIT "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n";
    th_test_run r;
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c", cfg,
                    "--toolset", "a", NULL};
    CU_ASSERT_EQUAL(th_test_run_argv(argv, input, 30, 1, &r), 0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"name\":\"echo\""));
    CU_ASSERT_PTR_NULL(strstr(r.out, "echo_async"));
    th_test_run_free(&r);
    char *argv2[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c", cfg,
                     "--toolset", "other", NULL};
    CU_ASSERT_EQUAL(th_test_run_argv(argv2, input, 30, 1, &r), 0);
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "not usable"));
    CU_ASSERT_EQUAL(r.out_len, 0);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_mcp(void)
{
    CU_pSuite s = CU_add_suite("mcp", NULL, NULL);
    CU_add_test(s, "raw_robustness", test_raw_robustness);
    CU_add_test(s, "raw_versions", test_raw_versions);
    CU_add_test(s, "raw_long_line", test_raw_long_line);
    CU_add_test(s, "raw_deep_nesting", test_raw_deep_nesting);
    CU_add_test(s, "raw_eof_drains", test_raw_eof_drains);
    CU_add_test(s, "raw_dup_id", test_raw_dup_id);
    CU_add_test(s, "raw_binary_and_bad_utf8", test_raw_binary_and_bad_utf8);
    CU_add_test(s, "raw_failure_blocks", test_raw_failure_blocks);
    CU_add_test(s, "raw_abi14_short_ask_and_refusals",
                test_raw_abi14_short_ask_and_refusals);
    CU_add_test(s, "raw_stray_printf", test_raw_stray_printf);
    CU_add_test(s, "raw_file_stdin", test_raw_file_stdin);
    CU_add_test(s, "sigterm", test_sigterm);
    CU_add_test(s, "export_strict", test_export_strict);
    CU_add_test(s, "bad_toolset", test_bad_toolset);
    CU_add_test(s, "toolset_option", test_toolset_option);
    CU_add_test(s, "sdk_permission", test_sdk_permission);
    CU_add_test(s, "sdk_basic", test_sdk_basic);
    CU_add_test(s, "sdk_structured", test_sdk_structured);
    CU_add_test(s, "sdk_content", test_sdk_content);
    CU_add_test(s, "strict_export_call", test_strict_export_call);
    CU_add_test(s, "sdk_tasks", test_sdk_tasks);
    CU_add_test(s, "sdk_list_changed", test_sdk_list_changed);
    CU_add_test(s, "sdk_default_config", test_sdk_default_config);
}
