/* test_mcp_source.c - the mcp plugin: other MCP servers as a tool source.
 *
 * Interop: the official MCP TypeScript SDK client (tests/mcp/source.mjs)
 * drives `toolhost mcp` configured with the mcp plugin importing the
 * pinned reference servers server-everything and server-filesystem (from
 * tests/mcp/node_modules) and toolhost's own MCP front (`toolhost mcp` of
 * a second config with echo.so): schemas, calls, content of every kind,
 * progress, cancel, a killed server answering 'unavailable' and coming
 * back.  tests/mcp/hostile.mjs does the same against a server that
 * floods, lies, never answers and sends a message over max_message.
 * Over Streamable HTTP: toolhost's own HTTP front (source_http.mjs) and a
 * hostile HTTP server (hostile_http.mjs).
 * Skipped when node or the npm packages are not installed.
 *
 * CLI: `toolhost call` through the plugin (these run under valgrind with
 * make valgrind), and config and start errors that name the server.
 *
 * A call of a stdio server never waits in execute(), so its tools are
 * declared short and run on a front's own thread: on the RPC loop
 * (rpc_loop), past max_concurrency in order with the server's reader
 * (queue, tests/mcp/source_queue.mjs), and with a server that stops
 * reading its stdin (deaf); busy polling of a call's answer by the thread
 * that sent it, and the reader's look at what comes unasked meanwhile
 * (busy_poll, busy_poll_off). */
#include <CUnit/CUnit.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/th_test.h"
#include "integration/test_rpc_harness.h"

static bool have_node_modules(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "command -v node >/dev/null 2>&1 && "
             "test -d '%s/node_modules/@modelcontextprotocol/sdk' && "
             "test -x '%s/node_modules/.bin/mcp-server-everything' && "
             "test -x '%s/node_modules/.bin/mcp-server-filesystem'",
             th_test_source_path("tests/mcp"), th_test_source_path("tests/mcp"),
             th_test_source_path("tests/mcp"));
    return th_test_shell_ok(cmd);
}

#define NEED_NODE()                                                           \
    do {                                                                      \
        if (!have_node_modules())                                             \
            TH_SKIP("node or tests/mcp/node_modules (server-everything, "    \
                    "server-filesystem, the SDK) is not installed: run "      \
                    "scripts/install-deps");                                  \
    } while (0)

/* The config of the hostile server (tests/mcp/hostile_server.mjs), with
 * `extra` lines of its server entry. */
static char *hostile_config_x(const char *dir, const char *timeout,
                              const char *extra)
{
    char text[2048];
    snprintf(text, sizeof text,
             "plugins:\n"
             "  - name: mcp\n"
             "    path: %s\n"
             "    config:\n"
             "      restart_initial: 50ms\n"
             "      max_message: 1048576\n"
             "      servers:\n"
             "        - name: h\n"
             "          command: [node, %s]\n"
             "          timeout: %s\n"
             "%s"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [\"*\"]\n",
             th_test_build_path("plugins/mcp.so"),
             th_test_source_path("tests/mcp/hostile_server.mjs"), timeout,
             extra ? extra : "");
    return th_test_write_file(dir, "hostile.yaml", text, (size_t)-1);
}

/* `silent` waits for the server's timeout, and the flood of 40000 lines
 * must be read within it: 4s, scaled by th_test_ms (8s under the
 * sanitizers, 20s under valgrind), since at load a sanitizer build once
 * took more than 2s to read the flood. */
static char *hostile_config(const char *dir)
{
    char t[32];
    snprintf(t, sizeof t, "%ums", th_test_ms(4000));
    return hostile_config_x(dir, t, NULL);
}

static void run_script(const char *script, const char *config,
                       const char *arg)
{
    th_test_timeout(getenv("TH_VALGRIND") ? 600 : 200);
    char cmd[4096];
    /* from the source root: TH_VALGRIND names its suppressions file
     * relative to it (node finds the SDK from the script's folder) */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && exec node 'tests/mcp/%s' '%s' '%s' '%s'",
             th_test_source_path("."), script,
             th_test_build_path("toolhost"), config, arg ? arg : "");
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    th_test_run r;
    int rc = th_test_run_argv(argv, NULL, getenv("TH_VALGRIND") ? 550 : 180,
                              0, &r);
    CU_ASSERT_EQUAL(rc, 0);
    if (r.status != 0)
        fprintf(stderr, "\n%s exited %d\nstdout:\n%s\nstderr (tail):\n%s\n",
                script, r.status, r.out ? r.out : "",
                r.err && r.err_len > 6000 ? r.err + r.err_len - 6000
                                          : r.err ? r.err : "");
    CU_ASSERT_EQUAL(r.status, 0);
    /* under valgrind (TH_VALGRIND), the host's report: "==PID== ..." */
    bool report = false;
    for (const char *e = r.err; e && (e = strstr(e, "==")); e += 2) {
        const char *d = e + 2;
        while (*d >= '0' && *d <= '9')
            d++;
        if (d > e + 2 && d[0] == '=' && d[1] == '=')
            report = true;
    }
    if (report)
        fprintf(stderr, "\nvalgrind reported:\n%s\n", r.err);
    CU_ASSERT_FALSE(report);
    th_test_run_free(&r);
}

static void test_sdk_reference_servers(void)
{
    NEED_NODE();
    char *dir = th_test_tmpdir();
    free(th_test_write_file(dir, "hello.txt", "hello from toolhost\n",
                            (size_t)-1));
    char inner[1024];
    snprintf(inner, sizeof inner,
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [echo]\n",
             th_test_build_path("plugins/echo.so"));
    char *inner_cfg = th_test_write_file(dir, "inner.yaml", inner, (size_t)-1);
    const char *nm = th_test_source_path("tests/mcp/node_modules/.bin");
    char text[4096];
    snprintf(text, sizeof text,
             "plugins:\n"
             "  - name: mcp\n"
             "    path: %s\n"
             "    config:\n"
             "      restart_initial: 1s\n"
             "      servers:\n"
             "        - name: ev\n"
             "          command: [%s/mcp-server-everything, stdio]\n"
             "          env: [HOME]\n"
             "          timeout: 60s\n"
             "        - name: fs\n"
             "          command: [%s/mcp-server-filesystem, %s]\n"
             "          cwd: %s\n"
             "          max_concurrency: 4\n"
             "        - name: th\n"
             "          command: [%s, mcp, -c, %s]\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [\"*\"]\n",
             th_test_build_path("plugins/mcp.so"), nm, nm, dir, dir,
             th_test_build_path("toolhost"), inner_cfg);
    char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
    run_script("source.mjs", cfg, dir);
    free(cfg);
    free(inner_cfg);
    th_test_rmtree(dir);
    free(dir);
}

static void test_sdk_hostile(void)
{
    NEED_NODE();
    char *dir = th_test_tmpdir();
    char *cfg = hostile_config(dir);
    run_script("hostile.mjs", cfg, NULL);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* max_concurrency 1: a call waits for the slot with the server's reader
 * and is sent when the one before it ends (cancelled by its client); one
 * cancelled while it waits never reaches the server; past max_waiting (2)
 * a call is refused at once. */
static void test_queue(void)
{
    NEED_NODE();
    char *dir = th_test_tmpdir();
    char *cfg = hostile_config_x(dir, "10m",
                                 "          max_concurrency: 1\n"
                                 "          max_waiting: 2\n");
    run_script("source_queue.mjs", cfg, "queue");
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* A server that stops reading its stdin while 2 MB of requests are on
 * their way to it: the front answers a ping before any of those calls
 * ends (nothing waits on its thread), write_timeout kills the server, its
 * calls fail, and it comes back. */
static void test_deaf(void)
{
    NEED_NODE();
    char *dir = th_test_tmpdir();
    char text[2048];
    snprintf(text, sizeof text,
             "plugins:\n"
             "  - name: mcp\n"
             "    path: %s\n"
             "    config:\n"
             "      restart_initial: 50ms\n"
             "      write_timeout: %s\n"
             "      servers:\n"
             "        - name: h\n"
             "          command: [node, %s]\n"
             "          timeout: 10m\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [\"*\"]\n",
             th_test_build_path("plugins/mcp.so"),
             getenv("TH_VALGRIND") ? "30s" : "3s",
             th_test_source_path("tests/mcp/hostile_server.mjs"));
    char *cfg = th_test_write_file(dir, "deaf.yaml", text, (size_t)-1);
    run_script("source_queue.mjs", cfg, "deaf");
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* manager.inline_calls of host.stats */
static uint64_t inline_calls(rpc_raw *w, uint64_t id)
{
    rpc_raw_request(w, id, "host.stats", "[]");
    const msgpack_object *m = rpc_raw_response(w, id, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *i = th_rpc_map_get(
        th_rpc_map_get(&m->via.array.ptr[3], "manager"), "inline_calls");
    CU_ASSERT_FATAL(i != NULL);
    return i->via.u64;
}

/* The RPC server's loop runs the calls of a stdio server itself (they
 * are declared short): 24 pipelined calls, 16 of them past
 * max_concurrency, each answered once, by the server's 1st to 24th call,
 * and every one counted as run on the loop. */
static void test_rpc_loop(void)
{
    NEED_NODE();
    enum { N = 24 };
    char plugins[1024];
    snprintf(plugins, sizeof plugins,
             "  - name: mcp\n"
             "    path: %s/plugins/mcp.so\n"
             "    config:\n"
             "      servers:\n"
             "        - name: h\n"
             "          command: [node, %s]\n"
             "          max_concurrency: 8\n",
             TH_BUILD_DIR,
             th_test_source_path("tests/mcp/hostile_server.mjs"));
    rpc_opts o = {.plugins_extra = plugins,
                  .host_extra = "  short_call_max: 1m\n",
                  .public_extra = "  - name: src\n"
                                  "    tools: [h_ok]\n"};
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    uint64_t inl0 = inline_calls(&w, 1000);
    th_buf all = TH_BUF_INIT;
    for (int i = 0; i < N; i++) {
        th_buf p = TH_BUF_INIT;
        rpc_pack_json(&p, "[\"h_ok\", {}]");
        th_rpc_pack_request(&all, (uint64_t)(i + 1), "tools.call", p.data,
                            p.len);
        th_buf_destroy(&p);
    }
    CU_ASSERT(rpc_raw_send(&w, all.data, all.len)); /* one write */
    th_buf_destroy(&all);
    bool seen_id[N] = {false}, seen_n[N] = {false};
    int got = 0;
    for (int k = 0; k < N; k++) {
        const msgpack_object *m = rpc_raw_next(&w, rpc_wait_ms());
        if (!m)
            break;
        uint64_t id = m->via.array.ptr[1].via.u64;
        CU_ASSERT_FATAL(id >= 1 && id <= N && !seen_id[id - 1]);
        seen_id[id - 1] = true;
        const msgpack_object *res = &m->via.array.ptr[3];
        CU_ASSERT_FATAL(m->via.array.ptr[2].type == MSGPACK_OBJECT_NIL &&
                        rpc_ok(res));
        const msgpack_object *out = th_rpc_map_get(res, "stdout");
        CU_ASSERT_FATAL(out && out->type == MSGPACK_OBJECT_STR);
        char text[64];
        snprintf(text, sizeof text, "%.*s", (int)out->via.str.size,
                 out->via.str.ptr);
        unsigned n = 0;
        CU_ASSERT_FATAL(sscanf(text, "ok %u cancelled 0 open 0", &n) == 1);
        CU_ASSERT_FATAL(n >= 1 && n <= N && !seen_n[n - 1]);
        seen_n[n - 1] = true;
        got++;
    }
    CU_ASSERT_EQUAL(got, N);
    CU_ASSERT(inline_calls(&w, 1001) - inl0 >= N);
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* The hostile server behind the RPC front, with `busy_poll_us`. */
static int hostile_rpc_start(rpc_srv *s, const char *busy_poll_us)
{
    static char plugins[1024];
    snprintf(plugins, sizeof plugins,
             "  - name: mcp\n"
             "    path: %s/plugins/mcp.so\n"
             "    config:\n"
             "      restart_initial: 50ms\n"
             "      max_message: 1048576\n"
             "      servers:\n"
             "        - name: h\n"
             "          command: [node, %s]\n"
             "          busy_poll_us: %s\n",
             TH_BUILD_DIR,
             th_test_source_path("tests/mcp/hostile_server.mjs"),
             busy_poll_us);
    rpc_opts o = {.plugins_extra = plugins,
                  .public_extra = "  - name: src\n"
                                  "    tools: [h_ok, h_later, h_huge]\n"};
    return rpc_srv_start(s, &o);
}

/* The call's meta says its answer was read by the thread that sent it. */
static bool busy_polled(const msgpack_object *res)
{
    const msgpack_object *b =
        th_rpc_map_get(th_rpc_map_get(res, "meta"), "busy_polled");
    return b && b->type == MSGPACK_OBJECT_BOOLEAN && b->via.boolean;
}

/* Calls h_ok up to `n` times, until one is busy-polled (want) or n are
 * done; how many were busy-polled. */
static int ok_calls(th_rpc_client *c, int n, bool until_polled)
{
    int polled = 0;
    for (int i = 0; i < n && !(until_polled && polled); i++) {
        rpc_res r;
        CU_ASSERT_FATAL(rpc_call(c, "tools.call", "[\"h_ok\", {}]", &r) == 0);
        CU_ASSERT_FATAL(r.res && rpc_ok(r.res));
        polled += busy_polled(r.res);
        rpc_res_free(&r);
    }
    return polled;
}

/* h_later's unasked ping, 20 ms after its answer with no call in
 * flight, is read and answered (the server logs the pong). */
static void unasked_is_read(rpc_srv *s, th_rpc_client *c)
{
    rpc_res r;
    CU_ASSERT_FATAL(rpc_call(c, "tools.call", "[\"h_later\", {}]", &r) == 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "later"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_wait(s, "pong late", rpc_wait_ms()));
}

/* Busy polling (docs/mcp-source.md): a call alone in flight is answered
 * on the thread that sent it (meta busy_polled; 5 ms of polling, so that
 * one of up to 200 calls is caught however loaded the machine).  The
 * reader then leaves the server's output to callers, and must still read
 * what comes unasked: h_later asks the host for a ping 20 ms after its
 * answer, with no call in flight, and the host's answer makes the server
 * log a pong.  A message over max_message read while busy polling kills
 * the server (the reader's to do) and fails the call; it comes back. */
static void test_busy_poll(void)
{
    NEED_NODE();
    rpc_srv s;
    CU_ASSERT_FATAL(hostile_rpc_start(&s, "5000") == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(ok_calls(c, 200, true) == 1);
    unasked_is_read(&s, c);

    rpc_res r;
    CU_ASSERT_FATAL(rpc_call(c, "tools.call", "[\"h_huge\", {}]", &r) == 0);
    CU_ASSERT(r.res && !rpc_ok(r.res));
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_wait(&s, "over max_message", rpc_wait_ms()));
    /* back after its restart (50 ms; unavailable meanwhile) */
    bool back = false;
    for (int64_t end = rpc_now_ms() + rpc_wait_ms();
         !back && rpc_now_ms() < end;) {
        CU_ASSERT_FATAL(rpc_call(c, "tools.call", "[\"h_ok\", {}]", &r) ==
                        0);
        back = r.res && rpc_ok(r.res);
        rpc_res_free(&r);
        if (!back)
            usleep(20000);
    }
    CU_ASSERT(back);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* busy_poll_us: 0: every answer is the reader's (none busy_polled), and
 * what comes unasked is read as before. */
static void test_busy_poll_off(void)
{
    NEED_NODE();
    rpc_srv s;
    CU_ASSERT_FATAL(hostile_rpc_start(&s, "0") == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT_EQUAL(ok_calls(c, 20, false), 0);
    unasked_is_read(&s, c);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* A server over Streamable HTTP: toolhost's own HTTP front, killed and
 * started again (tests/mcp/source_http.mjs). */
static void test_sdk_http(void)
{
    NEED_NODE();
    run_script("source_http.mjs", "-", NULL);
}

/* A hostile Streamable HTTP server (tests/mcp/hostile_http.mjs serves
 * it): an event-stream flood, a body over max_message, no answer, a lost
 * session. */
static void test_sdk_hostile_http(void)
{
    NEED_NODE();
    run_script("hostile_http.mjs", "-", NULL);
}

/* `toolhost call` through the plugin: load, one call, unload (the whole
 * plugin's life, under valgrind with make valgrind). */
static void test_cli_call(void)
{
    NEED_NODE();
    th_test_timeout(120);
    char *dir = th_test_tmpdir();
    char *cfg = hostile_config_x(dir, "60s", NULL);
    th_test_run r;
    CU_ASSERT_EQUAL(th_test_toolhost(&r, "call", "-c", cfg, "h_ok", NULL), 0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(r.out && strstr(r.out, "ok 1"));
    if (r.status != 0)
        fprintf(stderr, "\nstdout: %s\nstderr: %s\n", r.out, r.err);
    /* the log names what was left out and renamed */
    CU_ASSERT_PTR_NOT_NULL(r.err && strstr(r.err, "'badschema'") &&
                           strstr(r.err, "frobnicate"));
    CU_ASSERT_PTR_NOT_NULL(r.err && strstr(r.err, "named 'h_bad_name_'"));
    th_test_run_free(&r);
    /* a flood of notifications: memory stays bounded, the call answers */
    CU_ASSERT_EQUAL(th_test_toolhost(&r, "call", "-c", cfg, "h_flood", NULL),
                    0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(r.out && strstr(r.out, "flooded"));
    th_test_run_free(&r);
    /* over max_message: the call fails naming it, the server is killed */
    CU_ASSERT_EQUAL(th_test_toolhost(&r, "call", "-c", cfg, "h_huge", NULL),
                    0);
    CU_ASSERT_NOT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(r.err && strstr(r.err, "over max_message"));
    CU_ASSERT_PTR_NOT_NULL((r.out && strstr(r.out, "went away")) ||
                           (r.err && strstr(r.err, "went away")));
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* What a server gets: the environment of `env` and PATH only (not the
 * host's), its cwd, and, when the host runs as root, the uid of `user`. */
static void test_containment(void)
{
    NEED_NODE();
    th_test_timeout(60);
    char *dir = th_test_tmpdir();
    bool root = geteuid() == 0;
    char extra[256];
    snprintf(extra, sizeof extra,
             "          env: {FIXED: \"1\"}\n"
             "          cwd: /tmp\n"
             "%s",
             root ? "          user: nobody\n" : "");
    char *cfg = hostile_config_x(dir, "60s", extra);
    setenv("MCPSRC_SECRET", "must-not-leak", 1);
    th_test_run r;
    CU_ASSERT_EQUAL(th_test_toolhost(&r, "call", "-c", cfg, "h_whoami", NULL),
                    0);
    unsetenv("MCPSRC_SECRET");
    CU_ASSERT_EQUAL(r.status, 0);
    if (r.status != 0)
        fprintf(stderr, "\nstdout: %s\nstderr: %s\n", r.out, r.err);
    CU_ASSERT_PTR_NOT_NULL(r.out && strstr(r.out, "env FIXED,PATH"));
    CU_ASSERT_PTR_NOT_NULL(r.out && strstr(r.out, "cwd /tmp "));
    if (root)
        CU_ASSERT_PTR_NOT_NULL(r.out && strstr(r.out, "uid 65534 "));
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* Config and start errors name the server and the key. */
static void test_config_errors(void)
{
    th_test_timeout(60);
    char *dir = th_test_tmpdir();
    static const struct {
        const char *servers;
        const char *want;
    } cases[] = {
        {"        - name: a\n", "server 'a'"},
        {"        - name: a\n          command: [/bin/true]\n"
         "          colour: red\n",
         "unknown key 'colour'"},
        {"        - name: 'bad name'\n          command: [/bin/true]\n",
         "must be 1 to 32 letters"},
        {"        - name: a\n          command: [no-such-program-here]\n",
         "is not found in path"},
        {"        - name: a\n          command: [/bin/true]\n"
         "          max_waiting: -1\n",
         "'max_waiting' must be an integer from 0 to 65536"},
        {"        - name: a\n          command: [/bin/true]\n"
         "          timeout: soon\n",
         "'timeout' must be a duration"},
        {"        - name: a\n          command: [/bin/true]\n"
         "          max_concurrency: 0\n",
         "'max_concurrency' must be an integer"},
        {"        - name: a\n          command: [/bin/true]\n"
         "          env: [\"A-B\"]\n",
         "env[0] must be a variable name"},
        {"        - name: a\n          command: [/bin/true]\n"
         "        - name: a\n          command: [/bin/true]\n",
         "is taken"},
        {"        - name: a\n          command: [/bin/true]\n"
         "          user: root\n",
         "server 'a': 'user: root'"},
        /* exits at once: the start fails, naming the server */
        {"        - name: quits\n          command: [/bin/true]\n",
         "server 'quits' (/bin/true) did not start"},
        /* never answers initialize */
        {"        - name: mute\n          command: [/bin/sleep, '30']\n",
         "initialize: did not answer in time"},
        {"        - name: a\n          command: [/bin/true]\n"
         "          cwd: /no/such/folder\n",
         "cannot enter its working folder"},
        /* Streamable HTTP */
        {"        - name: w\n          url: ftp://127.0.0.1/mcp\n",
         "server 'w': 'url' must be an http:// or https:// URL"},
        {"        - name: w\n          url: http://127.0.0.1:9/mcp\n"
         "          command: [/bin/true]\n",
         "'command' is for a stdio server"},
        {"        - name: w\n          url: http://127.0.0.1:9/mcp\n"
         "          headers: {Authorization: \"Bearer ${MCPSRC_UNSET_VAR}\"}\n",
         "environment variable 'MCPSRC_UNSET_VAR' is not set"},
        {"        - name: w\n          url: http://127.0.0.1:9/mcp\n"
         "          headers: {X-A: \"a\\nInjected: b\"}\n",
         "headers: X-A: its value holds a line break"},
        {"        - name: w\n          command: [/bin/true]\n"
         "          headers: {X-A: b}\n",
         "'headers' is for a server with url:"},
        /* nothing listens there (port 9, discard): the start fails */
        {"        - name: w\n          url: http://127.0.0.1:9/mcp\n",
         "server 'w' (http://127.0.0.1:9/mcp) did not start: initialize:"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2048];
        snprintf(text, sizeof text,
                 "plugins:\n"
                 "  - name: mcp\n"
                 "    path: %s\n"
                 "    config:\n"
                 "      start_timeout: 300ms\n"
                 "      servers:\n"
                 "%s"
                 "toolsets:\n"
                 "  - name: t\n"
                 "    tools: [\"*\"]\n",
                 th_test_build_path("plugins/mcp.so"), cases[i].servers);
        char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
        th_test_run r;
        CU_ASSERT_EQUAL(th_test_toolhost(&r, "list", "-c", cfg, NULL), 0);
        CU_ASSERT_NOT_EQUAL(r.status, 0);
        bool found = r.err && strstr(r.err, cases[i].want);
        if (!found)
            fprintf(stderr, "\ncase %zu: want '%s' in:\n%s\n", i,
                    cases[i].want, r.err ? r.err : "");
        CU_ASSERT(found);
        th_test_run_free(&r);
        free(cfg);
    }
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_mcp_source(void)
{
    CU_pSuite s = CU_add_suite("mcp_source", NULL, NULL);
    CU_add_test(s, "config_errors", test_config_errors);
    CU_add_test(s, "cli_call", test_cli_call);
    CU_add_test(s, "containment", test_containment);
    CU_add_test(s, "sdk_reference_servers", test_sdk_reference_servers);
    CU_add_test(s, "sdk_hostile", test_sdk_hostile);
    CU_add_test(s, "sdk_http", test_sdk_http);
    CU_add_test(s, "sdk_hostile_http", test_sdk_hostile_http);
    CU_add_test(s, "queue", test_queue);
    CU_add_test(s, "deaf", test_deaf);
    CU_add_test(s, "rpc_loop", test_rpc_loop);
    CU_add_test(s, "busy_poll", test_busy_poll);
    CU_add_test(s, "busy_poll_off", test_busy_poll_off);
}
