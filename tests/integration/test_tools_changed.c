/* test_tools_changed.c - a plugin changes its tools at run time (ABI 1.5
 * tools_changed(), fixture grow_tools.so) with the real binary: the host
 * loads it again as a new generation, tools.list shows the new tool and
 * it answers, the session gets tools.changed, a call in flight finishes
 * on the old generation, the limit host.plugin_reload_min_interval bites
 * and says so, a burst of 100 requests is one reload, and a hostile
 * reason (a newline, 300 bytes, NULL) stays one line of the log. */
#include <CUnit/CUnit.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <string.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

static const char *config =
    "host:\n"
    "  log_level: debug\n"
    "  shutdown_grace: 1s\n"
    "  plugin_reload_min_interval: 1s\n"
    "plugins:\n"
    "  - name: grow\n"
    "    path: @BUILD@/fixtures/grow_tools.so\n"
    "    config:\n"
    "      state: @DIR@/count\n"
    "toolsets:\n"
    "  - name: public\n"
    "    tools: [\"*\"]\n";

static bool listed(th_rpc_client *c, const char *tool)
{
    rpc_res r;
    bool ok = rpc_call(c, "tools.list", "[]", &r) == 0 && r.res &&
              rpc_find_tool(r.res, tool) != NULL;
    rpc_res_free(&r);
    return ok;
}

static bool call_says(th_rpc_client *c, const char *json, const char *out)
{
    rpc_res r;
    bool ok = rpc_call(c, "tools.call", json, &r) == 0 && r.res &&
              rpc_stdout_is(r.res, out);
    rpc_res_free(&r);
    return ok;
}

static uint64_t reload_stat(th_rpc_client *c, const char *key)
{
    rpc_res r;
    uint64_t v = UINT64_MAX;
    if (rpc_call(c, "host.stats", "[]", &r) == 0 && r.res) {
        const msgpack_object *o =
            th_rpc_map_get(th_rpc_map_get(r.res, "reload"), key);
        if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            v = o->via.u64;
    }
    rpc_res_free(&r);
    return v;
}

static void test_grow(void)
{
    rpc_srv s;
    rpc_opts o = {.config = config};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(listed(c, "grow_add"));
    CU_ASSERT(!listed(c, "grown_1"));

    /* a call in flight on generation 1, and a session that listens */
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.list", "[]");
    CU_ASSERT(rpc_raw_response(&w, 1, rpc_wait_ms()) != NULL);
    rpc_raw_request(&w, 2, "tools.call", "[\"grow_hold\", {}]");
    CU_ASSERT(rpc_wait_running(&s, 1));

    CU_ASSERT(call_says(c, "[\"grow_add\", {}]", "count=1 rc=0"));
    CU_ASSERT(rpc_log_wait(&s, "plugin 'grow' asked for its tools to be "
                               "listed again: grew", rpc_wait_ms()));
    CU_ASSERT(rpc_log_wait(&s, "grow g2 changed", rpc_wait_ms()));
    CU_ASSERT(rpc_raw_notification(&w, "tools.changed", rpc_wait_ms()) !=
              NULL);
    CU_ASSERT(listed(c, "grown_1"));
    CU_ASSERT(call_says(c, "[\"grown_1\", {}]", "grown_1"));

    /* the call in flight finishes, on the old generation (count 0) */
    char rel[4096];
    snprintf(rel, sizeof rel, "%s/count.release", s.dir);
    free(th_test_write_file(s.dir, "count.release", "", 0));
    const msgpack_object *m = rpc_raw_response(&w, 2, rpc_wait_ms());
    CU_ASSERT(m && m->via.array.size == 4 &&
              rpc_stdout_is(&m->via.array.ptr[3], "released g0"));
    unlink(rel);

    /* at once again: the interval bites, logged; a hostile reason is one
     * line, cut */
    char json[1024];
    char junk[301];
    memset(junk, 'x', 300);
    junk[300] = '\0';
    snprintf(json, sizeof json,
             "[\"grow_add\", {\"reason\": \"evil\\nline %s\"}]", junk);
    CU_ASSERT(call_says(c, json, "count=2 rc=0"));
    CU_ASSERT(rpc_log_wait(&s, "(host.plugin_reload_min_interval)",
                           rpc_wait_ms()));
    CU_ASSERT(rpc_log_wait(&s, "listed again: evil line xxx", rpc_wait_ms()));
    CU_ASSERT(rpc_log_wait(&s, "xxx [cut]", rpc_wait_ms()));
    CU_ASSERT(rpc_log_wait(&s, "grow g3 changed", rpc_wait_ms()));
    CU_ASSERT(listed(c, "grown_2"));

    /* a burst: 100 requests, one reload */
    uint64_t req0 = reload_stat(c, "plugin_requests");
    uint64_t rl0 = reload_stat(c, "plugin_reloads");
    CU_ASSERT(req0 == 2 && rl0 == 2);
    CU_ASSERT(call_says(c, "[\"grow_add\", {\"times\": 100, "
                           "\"null_reason\": true}]", "count=3 rc=0"));
    CU_ASSERT(rpc_log_wait(&s, "grow g4 changed", rpc_wait_ms()));
    CU_ASSERT(rpc_log_wait(&s, "listed again: (no reason given)",
                           rpc_wait_ms()));
    CU_ASSERT(listed(c, "grown_3"));
    CU_ASSERT_EQUAL(reload_stat(c, "plugin_requests"), req0 + 100);
    CU_ASSERT_EQUAL(reload_stat(c, "plugin_reloads"), rl0 + 1);
    CU_ASSERT_EQUAL(rpc_log_count(&s, "listed again: (no reason given)"), 1);
    CU_ASSERT(!rpc_log_has(&s, "grow g5"));
    CU_ASSERT(call_says(c, "[\"grown_3\", {}]", "grown_3"));

    rpc_raw_close(&w);
    th_rpc_client_close(c);
    rpc_srv_stop(&s, SIGTERM);
    rpc_srv_free(&s);
}

/* tools_changed() from init() is refused (the generation is not serving
 * yet) and the plugin loads all the same. */
static void test_early(void)
{
    rpc_srv s;
    rpc_opts o = {.config = "host:\n"
                            "  log_level: debug\n"
                            "  shutdown_grace: 1s\n"
                            "plugins:\n"
                            "  - name: grow\n"
                            "    path: @BUILD@/fixtures/grow_tools.so\n"
                            "    config:\n"
                            "      state: @DIR@/count\n"
                            "      early: true\n"
                            "toolsets:\n"
                            "  - name: public\n"
                            "    tools: [\"*\"]\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    CU_ASSERT(rpc_log_wait(&s, "tools_changed() from init: -4",
                           rpc_wait_ms()));
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(listed(c, "grow_add"));
    th_rpc_client_close(c);
    rpc_srv_stop(&s, SIGTERM);
    rpc_srv_free(&s);
}

/* The mcp source: a server's list_changed makes the plugin list again;
 * a different list asks for a new generation, which imports the new tool
 * (callable); the same list (the server's list_changed at start, or
 * `same`) asks nothing. */
static void test_mcp_source(void)
{
    if (access("/usr/bin/node", X_OK) != 0)
        TH_SKIP("node is not installed");
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  plugin_reload_min_interval: 0s\n"
             "plugins:\n"
             "  - name: mcp\n"
             "    path: @BUILD@/plugins/mcp.so\n"
             "    config:\n"
             "      servers:\n"
             "        - name: g\n"
             "          command: [node, %s, @DIR@/srvcount]\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             th_test_source_path("tests/mcp/grow_server.mjs"));
    rpc_srv s;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(listed(c, "g_grow"));
    /* list_changed with the same list: listed again, nothing asked (the
     * server's list_changed at its start asks nothing either: counted
     * below) */
    CU_ASSERT(call_says(c, "[\"g_same\", {}]", "same"));
    CU_ASSERT(rpc_log_wait(&s, "tools/list after its list_changed lists "
                               "the tools toolhost serves", rpc_wait_ms()));
    CU_ASSERT(!listed(c, "g_grown_1"));

    CU_ASSERT(call_says(c, "[\"g_grow\", {}]", "grew 1"));
    CU_ASSERT(rpc_log_wait(&s, "plugin 'mcp' asked for its tools to be "
                               "listed again: server 'g': tools/list after "
                               "its list_changed lists other tools",
                           rpc_wait_ms()));
    CU_ASSERT(rpc_log_wait(&s, "mcp g2 changed", rpc_wait_ms()));
    CU_ASSERT(listed(c, "g_grown_1"));
    CU_ASSERT(call_says(c, "[\"g_grown_1\", {}]", "grown 1"));
    /* the new generation's server says list_changed at its start too:
     * the same list, so no third generation */
    CU_ASSERT(call_says(c, "[\"g_same\", {}]", "same"));
    /* "... closed", or under valgrind "... is closed; its object ..." */
    bool closed = rpc_log_wait(&s, "reload: plugin mcp generation 1 ",
                               rpc_wait_ms());
    CU_ASSERT(closed);
    if (!closed)
        rpc_dump_log(&s);
    CU_ASSERT_EQUAL(reload_stat(c, "plugin_reloads"), 1);
    CU_ASSERT_EQUAL(rpc_log_count(&s, "plugin 'mcp' asked for its tools"),
                    1);
    th_rpc_client_close(c);
    rpc_srv_stop(&s, SIGTERM);
    rpc_srv_free(&s);
}

/* An MCP session over stdio (`toolhost mcp`): grow_add's reload reaches
 * it as notifications/tools/list_changed, and tools/list then has the
 * new tool. */
static bool read_until(int fd, char *buf, size_t cap, size_t *len,
                       const char *needle)
{
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!strstr(buf, needle)) {
        int64_t left = end - rpc_now_ms();
        struct pollfd pf = {fd, POLLIN, 0};
        if (left <= 0 || poll(&pf, 1, (int)left) != 1 || *len + 1 >= cap)
            return false;
        ssize_t n = read(fd, buf + *len, cap - 1 - *len);
        if (n <= 0)
            return false;
        *len += (size_t)n;
        buf[*len] = '\0';
    }
    return true;
}

static void test_mcp_session(void)
{
    char *dir = th_test_tmpdir();
    char text[1024];
    snprintf(text, sizeof text,
             "host:\n"
             "  reload: signal\n"
             "plugins:\n"
             "  - name: grow\n"
             "    path: %s\n"
             "    config:\n"
             "      state: %s/count\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [\"*\"]\n",
             th_test_build_path("fixtures/grow_tools.so"), dir);
    char *cfg = th_test_write_file(dir, "m.yaml", text, (size_t)-1);
    int in[2], out[2];
    CU_ASSERT_FATAL(pipe(in) == 0 && pipe(out) == 0);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execl(th_test_build_path("toolhost"), "toolhost", "mcp", "-c", cfg,
              (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    static const char req[] =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
        "\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":"
        "{},\"clientInfo\":{\"name\":\"raw\",\"version\":\"1\"}}}\n"
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"grow_add\",\"arguments\":{}}}\n";
    CU_ASSERT(write(in[1], req, sizeof req - 1) == (ssize_t)(sizeof req - 1));
    static char buf[1 << 16];
    size_t len = 0;
    buf[0] = '\0';
    CU_ASSERT(read_until(out[0], buf, sizeof buf, &len,
                         "notifications/tools/list_changed"));
    static const char list[] =
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}\n";
    CU_ASSERT(write(in[1], list, sizeof list - 1) == (ssize_t)(sizeof list - 1));
    CU_ASSERT(read_until(out[0], buf, sizeof buf, &len, "\"grown_1\""));
    close(in[1]); /* end of input: the host drains and exits */
    int st = 0;
    CU_ASSERT(waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
              WEXITSTATUS(st) == 0);
    close(out[0]);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* isolation: process: the worker does not carry the request, so the
 * plugin hears TOOLHOST_ENOTSUP and nothing reloads. */
static void test_isolated(void)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "plugins:\n"
             "  - name: grow\n"
             "    path: @BUILD@/fixtures/grow_tools.so\n"
             "    isolation: process\n"
             "%s"
             "    config:\n"
             "      state: @DIR@/count\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             geteuid() == 0 ? "    user: auto\n" : "");
    rpc_srv s;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.call", "[\"grow_add\", {}]", &r) == 0);
    /* count=0 where the worker's own user may not write the folder */
    bool ok = r.res && (rpc_stdout_is(r.res, "count=1 rc=-5") ||
                        rpc_stdout_is(r.res, "count=0 rc=-5"));
    CU_ASSERT(ok);
    if (!ok)
        rpc_dump_log(&s);
    rpc_res_free(&r);
    CU_ASSERT_EQUAL(reload_stat(c, "plugin_requests"), 0);
    CU_ASSERT(!listed(c, "grown_1"));
    th_rpc_client_close(c);
    rpc_srv_stop(&s, SIGTERM);
    rpc_srv_free(&s);
}

void th_suite_tools_changed(void)
{
    CU_pSuite s = CU_add_suite("tools_changed", NULL, NULL);
    CU_add_test(s, "grow", test_grow);
    CU_add_test(s, "early", test_early);
    CU_add_test(s, "mcp_source", test_mcp_source);
    CU_add_test(s, "mcp_session", test_mcp_session);
    CU_add_test(s, "isolated", test_isolated);
}
