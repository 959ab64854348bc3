/* test_metrics.c - the Prometheus endpoint on the real `toolhost serve`:
 * a listen entry http://127.0.0.1:0/metrics beside the Unix socket; a
 * scrape parsed by the Prometheus client's own parser (python3
 * prometheus_client), whose per-tool histogram moves after a call; label
 * escaping; no token needed; only GET; `promtool check metrics` clean on a
 * real scrape, with toolhost_build_info and the process_* families; a
 * backend's unavailable and backend_timeout and an isolated plugin's
 * crash counted as outcomes of their own (and in host.stats). */
#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <time.h>

#include "front/metrics.h"
#include "common/th_http.h"
#include "integration/test_rpc_harness.h"

static unsigned metrics_port(rpc_srv *s)
{
    return th_test_log_port(s->log, "serving Prometheus metrics on http");
}

/* One request for `path`; the whole answer (headers and body) into *out
 * (malloc); the status. */
static int http_req(unsigned port, const char *method, const char *path,
                    char **out)
{
    return th_test_http(port, method, path, NULL, NULL, rpc_wait_ms(), out);
}

static int http_get(unsigned port, const char *method, char **out)
{
    return http_req(port, method, "/metrics", out);
}

/* Scrapes, writes the body to DIR/scrape.txt, runs the parser: its exit
 * status (0: parsed, TOOL's histogram has >= need calls, every expectation
 * of `expect` (NULL-terminated, metrics_parse.py's syntax) holds). */
static int parse_scrape_x(rpc_srv *s, unsigned port, const char *tool,
                          int need, const char *const *expect)
{
    char *ans = NULL;
    if (http_get(port, "GET", &ans) != 200) {
        free(ans);
        return -1;
    }
    const char *body = strstr(ans, "\r\n\r\n");
    CU_ASSERT(strstr(ans, "text/plain; version=0.0.4") != NULL);
    char *file = th_test_write_file(s->dir, "scrape.txt",
                                    body ? body + 4 : "", (size_t)-1);
    free(ans);
    char needs[16];
    snprintf(needs, sizeof needs, "%d", need);
    char script[512];
    snprintf(script, sizeof script, "%s/tests/integration/metrics_parse.py",
             TH_SOURCE_DIR);
    char *argv[32] = {"/usr/bin/python3", script, file, (char *)tool, needs};
    for (int i = 0; expect && expect[i] && i < 26; i++)
        argv[5 + i] = (char *)expect[i];
    th_test_run r;
    th_test_run_argv(argv, NULL, 30, 0, &r);
    if (r.status != 0)
        fprintf(stderr, "\nmetrics_parse: %s%s\n", r.out ? r.out : "",
                r.err ? r.err : "");
    int st = r.status;
    th_test_run_free(&r);
    free(file);
    return st;
}

static int parse_scrape(rpc_srv *s, unsigned port, const char *tool, int need)
{
    return parse_scrape_x(s, port, tool, need, NULL);
}

static bool have_parser(void)
{
    return access("/usr/bin/python3", X_OK) == 0 &&
           system("/usr/bin/python3 -c 'import prometheus_client.parser' "
                  "2>/dev/null") == 0;
}

static void test_scrape(void)
{
    if (access("/usr/bin/python3", X_OK) != 0 ||
        system("/usr/bin/python3 -c 'import prometheus_client.parser' "
               "2>/dev/null") != 0) {
        TH_SKIP("needs python3-prometheus-client (scripts/install-deps)");
        return;
    }
    rpc_srv s;
    rpc_opts o = {.host_extra =
                      "  listen: [\"http://127.0.0.1:0/metrics\"]\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    unsigned port = metrics_port(&s);
    CU_ASSERT_FATAL(port != 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"a\"}]", &r) == 0 &&
              !r.err);
    rpc_res_free(&r);
    CU_ASSERT_EQUAL(parse_scrape(&s, port, "echo", 1), 0);
    /* the histogram moves after more calls */
    for (int i = 0; i < 3; i++) {
        CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"b\"}]",
                           &r) == 0 && !r.err);
        rpc_res_free(&r);
    }
    CU_ASSERT_EQUAL(parse_scrape(&s, port, "echo", 4), 0);
    if (geteuid() == 0) { /* the toolset with the ask rule is root's */
        /* no permission handler: the client answers no */
        CU_ASSERT(rpc_call(c, "tools.call", "[\"fs_list\", {\"path\": \".\"}]",
                           &r) == 0);
        rpc_res_free(&r);
        char *ans = NULL;
        CU_ASSERT_EQUAL(http_get(port, "GET", &ans), 200);
        CU_ASSERT(ans && strstr(ans, "toolhost_tool_permission_asks_total"
                                     "{tool=\"fs_list\"} 1\n"));
        CU_ASSERT(ans && strstr(ans, "toolhost_tool_calls_total{tool=\"fs_list\","
                                     "outcome=\"denied\"} 1\n"));
        free(ans);
    }
    th_rpc_client_close(c);
    /* only GET (and HEAD) */
    char *ans = NULL;
    CU_ASSERT_EQUAL(http_get(port, "POST", &ans), 405);
    free(ans);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* A non-loopback metrics entry needs mcp.allow_remote; no MCP token is
 * needed for a metrics-only listen list. */
static void test_config(void)
{
    char *dir = th_test_tmpdir();
    char text[1024];
    snprintf(text, sizeof text,
             "host:\n  listen: [\"http://0.0.0.0:0/metrics\"]\n"
             "plugins:\n  - name: echo\n    path: %s/plugins/echo.so\n",
             TH_BUILD_DIR);
    char *cfg = th_test_write_file(dir, "m.yaml", text, (size_t)-1);
    th_test_run r;
    th_test_toolhost(&r, "config", "check", cfg, NULL);
    CU_ASSERT(r.status != 0);
    CU_ASSERT(r.err && strstr(r.err, "mcp.allow_remote"));
    th_test_run_free(&r);
    free(cfg);
    snprintf(text, sizeof text,
             "host:\n  listen: [\"http://127.0.0.1:0/metrics\"]\n"
             "plugins:\n  - name: echo\n    path: %s/plugins/echo.so\n",
             TH_BUILD_DIR);
    cfg = th_test_write_file(dir, "m.yaml", text, (size_t)-1);
    th_test_toolhost(&r, "config", "check", cfg, NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    if (r.status)
        fprintf(stderr, "\n%s\n", r.err ? r.err : "");
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

static void test_label_escaping(void)
{
    th_buf b;
    th_buf_init(&b);
    CU_ASSERT_EQUAL(th_metrics_label(&b, "a\\b\"c\nd"), 0);
    CU_ASSERT_EQUAL(b.len, strlen("a\\\\b\\\"c\\nd"));
    CU_ASSERT(b.len && memcmp(b.data, "a\\\\b\\\"c\\nd", b.len) == 0);
    th_buf_destroy(&b);
}

/* The port of the MCP HTTP front, from the log. */
static unsigned mcp_port(rpc_srv *s)
{
    return th_test_log_port(s->log, "(Streamable HTTP) on http");
}

/* Connections refused and closed by reason, protocol errors, an HTTP 401,
 * a SIGHUP reload and its duration: provoked on the real server, then
 * scraped and checked by the Prometheus parser. */
static void test_connection_events(void)
{
    if (!have_parser()) {
        TH_SKIP("needs python3-prometheus-client (scripts/install-deps)");
        return;
    }
    char *tokdir = th_test_tmpdir();
    char *tf = th_test_write_file(tokdir, "alice.token",
                                  "metrics-test-token-0123456789\n",
                                  (size_t)-1);
    char mcp[512];
    snprintf(mcp, sizeof mcp, "mcp:\n  tokens:\n    - {user: alice, file: %s}\n",
             tf);
    /* idle_timeout: the two connections must stay until the third is
     * refused (with 1 s, a test thread 1.2 s late between the opens saw
     * the first closed idle and the third let in), then close idle */
    char host[256];
    snprintf(host, sizeof host,
             "  listen: [\"http://127.0.0.1:0/metrics\", "
             "\"http://127.0.0.1:0/mcp\"]\n"
             "  max_connections: 2\n"
             "  idle_timeout: %ums\n",
             th_test_ms(3000));
    rpc_srv s;
    rpc_opts o = {.host_extra = host, .plugins_extra = mcp};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    unsigned port = metrics_port(&s), mport = mcp_port(&s);
    CU_ASSERT_FATAL(port != 0 && mport != 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"a\"}]", &r) == 0 &&
              !r.err);
    rpc_res_free(&r);
    th_rpc_client_close(c);

    /* 200 nils: 8 protocol errors (max_protocol_errors), then closed. */
    uint8_t nils[200];
    memset(nils, 0xc0, sizeof nils);
    rpc_raw w[3];
    CU_ASSERT_FATAL(rpc_raw_open(&w[0], &s) == 0);
    rpc_raw_send(&w[0], nils, sizeof nils);
    CU_ASSERT(rpc_raw_eof(&w[0], rpc_wait_ms()));
    rpc_raw_close(&w[0]);

    /* max_connections 2: the third is refused; the two others are closed
     * idle after 3 s (scaled). */
    for (int i = 0; i < 3; i++)
        CU_ASSERT_FATAL(rpc_raw_open(&w[i], &s) == 0);
    CU_ASSERT(rpc_raw_eof(&w[2], rpc_wait_ms()));
    CU_ASSERT(rpc_raw_eof(&w[0], rpc_wait_ms()));
    CU_ASSERT(rpc_raw_eof(&w[1], rpc_wait_ms()));
    for (int i = 0; i < 3; i++)
        rpc_raw_close(&w[i]);

    /* An MCP request without a token: 401. */
    char *ans = NULL;
    CU_ASSERT_EQUAL(http_req(mport, "POST", "/mcp", &ans), 401);
    free(ans);

    /* A reload by SIGHUP. */
    kill(s.pid, SIGHUP);
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!rpc_log_has(&s, "reload #1 ok") && rpc_now_ms() < end)
        usleep(20000);
    CU_ASSERT(rpc_log_has(&s, "reload #1 ok"));

    static const char *const expect[] = {
        "toolhost_connections_refused_total{front=rpc,reason=max_connections}==1",
        "toolhost_connections_refused_total{front=rpc,reason=fd_limit}==0",
        "toolhost_connections_refused_total{front=mcp,reason=unauthorized}==1",
        "toolhost_connections_refused_total{front=mcp,reason=forbidden}==0",
        "toolhost_connections_closed_total{front=rpc,reason=max_protocol_errors}==1",
        "toolhost_connections_closed_total{front=rpc,reason=idle_timeout}==2",
        "toolhost_connections_closed_total{front=rpc,reason=frame_timeout}==0",
        "toolhost_connections_closed_total{front=mcp,reason=slow_reader}==0",
        "toolhost_protocol_errors_total{front=rpc}>=8",
        "toolhost_protocol_errors_total{front=mcp}==0",
        "toolhost_reloads_total{result=ok}==1",
        "toolhost_reloads_total{result=failed}==0",
        "toolhost_reload_duration_seconds_count==1",
        "toolhost_reload_duration_seconds_bucket{le=+Inf}==1",
        "toolhost_reload_duration_seconds_bucket{le=10}==1",
        "toolhost_reload_duration_seconds_sum>=1e-06",
        "toolhost_reload_duration_seconds_sum<=10",
        NULL};
    CU_ASSERT_EQUAL(parse_scrape_x(&s, port, "echo", 1, expect), 0);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
    free(tf);
    th_test_rmtree(tokdir);
    free(tokdir);
}

/* A real scrape (after a call, with the audit log on so that its
 * families show) passes `promtool check metrics` without a word, and has
 * toolhost_build_info and the process_* families Prometheus users expect. */
static void test_promtool(void)
{
    if (access("/usr/bin/promtool", X_OK) != 0) {
        TH_SKIP("needs promtool (Debian's prometheus, scripts/install-deps)");
        return;
    }
    rpc_srv s;
    char extra[4400];
    char *dir = th_test_tmpdir();
    snprintf(extra, sizeof extra,
             "  listen: [\"http://127.0.0.1:0/metrics\"]\n"
             "  audit: %s/audit.log\n", dir);
    rpc_opts o = {.host_extra = extra};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    unsigned port = metrics_port(&s);
    CU_ASSERT_FATAL(port != 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"a\"}]", &r) == 0 &&
              !r.err);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    char *ans = NULL;
    CU_ASSERT_EQUAL_FATAL(http_get(port, "GET", &ans), 200);
    const char *body = strstr(ans, "\r\n\r\n");
    CU_ASSERT_FATAL(body != NULL);
    body += 4;
    char want[128];
    snprintf(want, sizeof want,
             "toolhost_build_info{version=\"%s\",abi=\"%d.%d\"} 1\n",
             TOOLHOST_VERSION, TOOLHOST_ABI_MAJOR, TOOLHOST_ABI_MINOR);
    CU_ASSERT_PTR_NOT_NULL(strstr(body, want));
    static const char *const fams[] = {
        "\nprocess_start_time_seconds ", "\nprocess_cpu_seconds_total ",
        "\nprocess_resident_memory_bytes ", "\nprocess_open_fds ",
        "\nprocess_max_fds ", "\ntoolhost_audit_lines_total 1\n",
        "\ntoolhost_audit_write_errors_total 0\n"};
    for (size_t i = 0; i < sizeof fams / sizeof *fams; i++) {
        CU_ASSERT_PTR_NOT_NULL(strstr(body, fams[i]));
        if (!strstr(body, fams[i]))
            fprintf(stderr, "\nmissing:%s\n", fams[i]);
    }
    /* the start time is the process's: within the last day, not 0 */
    const char *st = strstr(body, "\nprocess_start_time_seconds ");
    double t0 = st ? strtod(st + 28, NULL) : 0;
    CU_ASSERT(t0 > (double)time(NULL) - 86400 && t0 <= (double)time(NULL) + 1);
    char *argv[] = {"/usr/bin/promtool", "check", "metrics", NULL};
    th_test_run pr;
    th_test_run_argv(argv, body, 30, 0, &pr);
    if (pr.status != 0 || pr.out_len || pr.err_len)
        fprintf(stderr, "\npromtool (%d): %s%s\n", pr.status,
                pr.out ? pr.out : "", pr.err ? pr.err : "");
    CU_ASSERT_EQUAL(pr.status, 0);
    CU_ASSERT_EQUAL(pr.out_len + pr.err_len, 0);
    th_test_run_free(&pr);
    free(ans);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

/* ---- outcomes of their own: unavailable, backend_timeout, plugin_crashed */

/* The errcodes fixture (ABI 1.5: a backend's unavailable or timeout)
 * in process, and the crash fixture isolated: one toolset "public", the
 * socket the one front. */
static const char *outcomes_config(void)
{
    static char text[2048];
    snprintf(text, sizeof text,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  listen: [\"http://127.0.0.1:0/metrics\"]\n"
             "  audit: @DIR@/audit.log\n"
             "plugins:\n"
             "  - name: errcodes\n"
             "    path: @BUILD@/fixtures/errcodes.so\n"
             "  - name: crash\n"
             "    path: @BUILD@/fixtures/iso_crash.so\n"
             "    isolation: process\n"
             "    workers: 1\n"
             "    kill_grace: 300ms\n"
             "%s"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [ec_status, segv_tool]\n",
             geteuid() == 0 ? "    user: nobody\n" : "");
    return text;
}

/* tools.call of `tool` with `args` (JSON): the call answered a tool
 * error `code` (NULL: ok true; "failed": ok false). */
static bool call_ends(th_rpc_client *c, const char *tool, const char *args,
                      const char *code)
{
    char p[512];
    snprintf(p, sizeof p, "[\"%s\", %s]", tool, args);
    rpc_res r;
    bool ok = false;
    if (rpc_call(c, "tools.call", p, &r) == 0 && r.res && !r.err) {
        const msgpack_object *okv = th_rpc_map_get(r.res, "ok");
        if (!code)
            ok = okv && okv->type == MSGPACK_OBJECT_BOOLEAN && okv->via.boolean;
        else if (!strcmp(code, "failed"))
            ok = okv && okv->type == MSGPACK_OBJECT_BOOLEAN &&
                 !okv->via.boolean && !th_rpc_map_get(r.res, "error");
        else
            ok = rpc_tool_error_is(r.res, code);
    }
    if (!ok)
        fprintf(stderr, "\n%s %s: not %s\n", tool, args, code ? code : "ok");
    rpc_res_free(&r);
    return ok;
}

/* host.stats tools.TOOL.KEY, or -1 when absent. */
static int64_t stat_of(const msgpack_object *stats, const char *tool,
                       const char *key)
{
    const msgpack_object *v = th_rpc_map_get(
        th_rpc_map_get(th_rpc_map_get(stats, "tools"), tool), key);
    return v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (int64_t)v->via.u64
                                                           : -1;
}

/* A backend unavailable (twice: from execute() and through suspend() +
 * complete()), a backend timeout and an isolated worker's death each
 * count under their own outcome per tool, per toolset and per front,
 * and `error` counts none of them (only the call refused for its
 * arguments, per tool); `timeout` stays the host's own deadline.  The
 * same numbers in host.stats, the same words in the audit log; the
 * labels in TH_OUTCOMES' order. */
static void test_backend_outcomes(void)
{
    if (!have_parser()) {
        TH_SKIP("needs python3-prometheus-client (scripts/install-deps)");
        return;
    }
    rpc_srv s;
    rpc_opts o = {.config = outcomes_config()};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    unsigned port = metrics_port(&s);
    CU_ASSERT_FATAL(port != 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(call_ends(c, "ec_status", "{\"status\": \"ok\"}", NULL));
    CU_ASSERT(call_ends(c, "ec_status", "{\"status\": \"failed\"}", "failed"));
    CU_ASSERT(call_ends(c, "ec_status", "{\"status\": \"unavailable\"}",
                        "unavailable"));
    CU_ASSERT(call_ends(c, "ec_status",
                        "{\"status\": \"unavailable\", \"suspended\": true}",
                        "unavailable"));
    CU_ASSERT(call_ends(c, "ec_status", "{\"status\": \"timeout\"}",
                        "backend_timeout"));
    CU_ASSERT(call_ends(c, "ec_status", "{\"status\": \"no such status\"}",
                        "invalid_arguments"));
    CU_ASSERT(call_ends(c, "segv_tool", "{}", "plugin_crashed"));

    static const char *const expect[] = {
        "toolhost_tool_calls_total{tool=ec_status,outcome=unavailable}==2",
        "toolhost_tool_calls_total{tool=ec_status,outcome=backend_timeout}==1",
        "toolhost_tool_calls_total{tool=ec_status,outcome=timeout}==0",
        "toolhost_tool_calls_total{tool=ec_status,outcome=error}==1",
        "toolhost_tool_calls_total{tool=ec_status,outcome=failed}==1",
        "toolhost_tool_calls_total{tool=ec_status,outcome=plugin_crashed}==0",
        "toolhost_tool_calls_total{tool=segv_tool,outcome=plugin_crashed}==1",
        "toolhost_tool_calls_total{tool=segv_tool,outcome=error}==0",
        "toolhost_toolset_calls_total{toolset=public,outcome=unavailable}==2",
        "toolhost_toolset_calls_total{toolset=public,outcome=backend_timeout}==1",
        "toolhost_toolset_calls_total{toolset=public,outcome=plugin_crashed}==1",
        "toolhost_toolset_calls_total{toolset=public,outcome=timeout}==0",
        "toolhost_toolset_calls_total{toolset=public,outcome=error}==0",
        "toolhost_toolset_calls_total{toolset=public,outcome=ok}==1",
        "toolhost_front_calls_total{front=rpc,outcome=unavailable}==2",
        "toolhost_front_calls_total{front=rpc,outcome=backend_timeout}==1",
        "toolhost_front_calls_total{front=rpc,outcome=plugin_crashed}==1",
        "toolhost_front_calls_total{front=rpc,outcome=error}==0",
        "toolhost_front_calls_total{front=rpc,outcome=failed}==1",
        NULL};
    CU_ASSERT_EQUAL(parse_scrape_x(&s, port, "ec_status", 1, expect), 0);

    /* the labels in their documented order, each family's HELP naming
     * the new ones */
    char *ans = NULL;
    CU_ASSERT_EQUAL(http_get(port, "GET", &ans), 200);
    static const char *const order[] = {
        "ok", "failed", "error", "timeout", "cancelled", "duplicate", "busy",
        "denied", "rate_limited", "unavailable", "backend_timeout",
        "plugin_crashed"};
    const char *at = ans;
    for (size_t i = 0; at && i < sizeof order / sizeof *order; i++) {
        char line[128];
        snprintf(line, sizeof line,
                 "toolhost_tool_calls_total{tool=\"ec_status\",outcome=\"%s\"}",
                 order[i]);
        at = strstr(at, line);
        if (!at)
            fprintf(stderr, "\nnot in order: %s\n", line);
    }
    CU_ASSERT_PTR_NOT_NULL(at);
    static const char *const helps[] = {
        "# HELP toolhost_tool_calls_total Calls ended, per tool and outcome "
        "(ok, failed, error, timeout, cancelled, duplicate, busy, denied, "
        "rate_limited, unavailable, backend_timeout, plugin_crashed).\n",
        "# HELP toolhost_toolset_calls_total Calls ended, per toolset and "
        "outcome (ok, failed, error, timeout, cancelled, duplicate, busy, "
        "denied, rate_limited, unavailable, backend_timeout, plugin_crashed).\n",
        "# HELP toolhost_front_calls_total Calls ended, per front and outcome "
        "(ok, failed, error, timeout, cancelled, duplicate, busy, denied, "
        "rate_limited, unavailable, backend_timeout, plugin_crashed).\n"};
    for (size_t i = 0; i < sizeof helps / sizeof *helps; i++) {
        CU_ASSERT_PTR_NOT_NULL(ans ? strstr(ans, helps[i]) : NULL);
        if (ans && !strstr(ans, helps[i]))
            fprintf(stderr, "\nno HELP line: %s", helps[i]);
    }
    free(ans);

    /* host.stats: the same numbers under the members' names */
    rpc_res r;
    CU_ASSERT_FATAL(rpc_call(c, "host.stats", "[]", &r) == 0 && r.res);
    CU_ASSERT_EQUAL(stat_of(r.res, "ec_status", "unavailable"), 2);
    CU_ASSERT_EQUAL(stat_of(r.res, "ec_status", "backend_timeouts"), 1);
    CU_ASSERT_EQUAL(stat_of(r.res, "ec_status", "plugin_crashed"), 0);
    CU_ASSERT_EQUAL(stat_of(r.res, "ec_status", "errors"), 1);
    CU_ASSERT_EQUAL(stat_of(r.res, "ec_status", "timeouts"), 0);
    CU_ASSERT_EQUAL(stat_of(r.res, "ec_status", "ok"), 1);
    CU_ASSERT_EQUAL(stat_of(r.res, "ec_status", "failed"), 1);
    CU_ASSERT_EQUAL(stat_of(r.res, "ec_status", "calls"), 6);
    CU_ASSERT_EQUAL(stat_of(r.res, "segv_tool", "plugin_crashed"), 1);
    CU_ASSERT_EQUAL(stat_of(r.res, "segv_tool", "errors"), 0);
    CU_ASSERT_EQUAL(stat_of(r.res, "segv_tool", "unavailable"), 0);
    CU_ASSERT_EQUAL(stat_of(r.res, "segv_tool", "backend_timeouts"), 0);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    /* the audit log names the outcomes the same way (read once the host
     * is gone: every line written) */
    char path[1024];
    snprintf(path, sizeof path, "%s/audit.log", s.dir);
    size_t n = 0;
    char *log = th_test_read_file(path, &n);
    CU_ASSERT(log && strstr(log, "\"outcome\":\"plugin_crashed\","
                                 "\"error\":\"plugin_crashed\""));
    CU_ASSERT(log && strstr(log, "\"outcome\":\"unavailable\","
                                 "\"error\":\"unavailable\""));
    CU_ASSERT(log && strstr(log, "\"outcome\":\"backend_timeout\","
                                 "\"error\":\"backend_timeout\""));
    free(log);
    rpc_srv_free(&s);
}

void th_suite_metrics(void)
{
    CU_pSuite s = CU_add_suite("metrics", NULL, NULL);
    CU_add_test(s, "scrape", test_scrape);
    CU_add_test(s, "config", test_config);
    CU_add_test(s, "label_escaping", test_label_escaping);
    CU_add_test(s, "connection_events", test_connection_events);
    CU_add_test(s, "promtool", test_promtool);
    CU_add_test(s, "backend_outcomes", test_backend_outcomes);
}
