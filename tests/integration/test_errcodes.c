/* test_errcodes.c - a tool's backend failing (ABI 1.5): a plugin ends a
 * call TOOLHOST_UNAVAILABLE, TOOLHOST_TIMEOUT or TOOLHOST_RATE_LIMITED,
 * with a retry-after hint, and every front says so with the host's error
 * code, against the real binary (fixture tests/fixtures/errcodes.c).
 *
 * RPC (in process and isolated): {ok: false, error: {code, message,
 * retry_after_ms}}, the message cleaned of control characters and bytes
 * that are not UTF-8, the hint dropped for backend_timeout and cut at a
 * day, complete() of a suspended call carrying the same, a late
 * set_retry_after() refused and logged, the audit outcome.  MCP (stdio):
 * isError with the code in its text, _meta toolhost/error and
 * toolhost/retry_after_ms.  A plugin built against the frozen 1.4 header
 * returning 4, 5 or 6 still gets a tool error (tool_error, logged). */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"
#include "test_rpc_harness.h"

static char *config(bool isolated, bool audit)
{
    static char text[2048];
    snprintf(text, sizeof text,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "%s"
             "plugins:\n"
             "  - name: errcodes\n"
             "    path: @BUILD@/fixtures/errcodes.so\n"
             "%s"
             "  - name: abi14f_status\n"
             "    path: @BUILD@/fixtures/abi14f_status.so\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [ec_status, a14_status]\n",
             audit ? "  audit: @DIR@/audit.log\n" : "",
             isolated ? (geteuid() == 0 ? "    isolation: process\n"
                                          "    workers: 1\n"
                                          "    user: nobody\n"
                                        : "    isolation: process\n"
                                          "    workers: 1\n")
                      : "");
    return text;
}

/* tools.call of ec_status with `args` (JSON); the result map or NULL. */
static const msgpack_object *ec(th_rpc_client *c, const char *tool,
                                const char *args, rpc_res *r)
{
    char p[1024];
    snprintf(p, sizeof p, "[\"%s\", %s]", tool, args);
    if (rpc_call(c, "tools.call", p, r) != 0 || !r->res)
        return NULL;
    return r->res;
}

static const msgpack_object *err_key(const msgpack_object *res,
                                     const char *key)
{
    return th_rpc_map_get(th_rpc_map_get(res, "error"), key);
}

static bool message_is(const msgpack_object *res, const char *want)
{
    const char *p;
    size_t n;
    const msgpack_object *m = err_key(res, "message");
    if (!th_rpc_obj_str(m, &p, &n)) {
        fprintf(stderr, "\nno message\n");
        return false;
    }
    bool ok = n == strlen(want) && memcmp(p, want, n) == 0;
    if (!ok)
        fprintf(stderr, "\nmessage: '%.*s', want '%s'\n", (int)n, p, want);
    return ok;
}

/* error.retry_after_ms, or -1 when absent. */
static int64_t retry_of(const msgpack_object *res)
{
    const msgpack_object *v = err_key(res, "retry_after_ms");
    if (!v)
        return -1;
    return v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (int64_t)v->via.u64
                                                      : -2;
}

static void rpc_round(bool isolated)
{
    rpc_srv s;
    rpc_opts o = {.config = config(isolated, !isolated)};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    const msgpack_object *res;
    for (int susp = 0; susp < 2; susp++) {
        char a[512];
        const char *sp = susp ? ", \"suspended\": true" : "";
        snprintf(a, sizeof a,
                 "{\"status\": \"unavailable\", \"retry_ms\": 1500, "
                 "\"message\": \"db is restarting\\n\"%s}", sp);
        res = ec(c, "ec_status", a, &r);
        CU_ASSERT(res && rpc_tool_error_is(res, "unavailable"));
        CU_ASSERT(res && message_is(res, "db is restarting"));
        CU_ASSERT(res && retry_of(res) == 1500);
        /* stdout is not part of a backend's error */
        CU_ASSERT(res && th_rpc_map_get(res, "stdout") == NULL);
        rpc_res_free(&r);

        snprintf(a, sizeof a,
                 "{\"status\": \"rate_limited\", \"retry_ms\": 7000, "
                 "\"message\": \"429 from upstream\"%s}", sp);
        res = ec(c, "ec_status", a, &r);
        CU_ASSERT(res && rpc_tool_error_is(res, "rate_limited"));
        CU_ASSERT(res && message_is(res, "429 from upstream"));
        CU_ASSERT(res && retry_of(res) == 7000);
        rpc_res_free(&r);

        /* a timeout carries no hint, even when one was set */
        snprintf(a, sizeof a,
                 "{\"status\": \"timeout\", \"retry_ms\": 100, "
                 "\"message\": \"no answer in 2s\"%s}", sp);
        res = ec(c, "ec_status", a, &r);
        CU_ASSERT(res && rpc_tool_error_is(res, "backend_timeout"));
        CU_ASSERT(res && message_is(res, "no answer in 2s"));
        CU_ASSERT(res && retry_of(res) == -1);
        rpc_res_free(&r);

        /* failed stays the tool's own failure: stdout, stderr */
        snprintf(a, sizeof a,
                 "{\"status\": \"failed\", \"retry_ms\": 100, "
                 "\"message\": \"bad input\"%s}", sp);
        res = ec(c, "ec_status", a, &r);
        CU_ASSERT(res && !rpc_ok(res) && th_rpc_map_get(res, "error") == NULL);
        CU_ASSERT(res && th_rpc_obj_streq(th_rpc_map_get(res, "stderr"),
                                          "bad input"));
        rpc_res_free(&r);
    }
    /* no stderr: the code's own words; no hint: no key */
    res = ec(c, "ec_status", "{\"status\": \"unavailable\"}", &r);
    CU_ASSERT(res && rpc_tool_error_is(res, "unavailable"));
    CU_ASSERT(res && message_is(res, "the tool's backend is unavailable, "
                                     "try again later"));
    CU_ASSERT(res && retry_of(res) == -1);
    rpc_res_free(&r);
    /* a hint past a day is cut to a day */
    res = ec(c, "ec_status", "{\"status\": \"rate_limited\", \"retry_ms\": "
                             "999999999999}", &r);
    CU_ASSERT(res && retry_of(res) == 86400000);
    rpc_res_free(&r);
    /* control characters and bad UTF-8 become '?' or spaces */
    res = ec(c, "ec_status", "{\"status\": \"unavailable\", \"message\": "
                             "\"down\", \"raw\": true}", &r);
    CU_ASSERT(res && message_is(res, "down tail?"));
    rpc_res_free(&r);
    /* a long stderr: the message is its first 2000 bytes */
    {
        char *a = malloc(6000);
        int w = snprintf(a, 6000, "{\"status\": \"unavailable\", "
                                  "\"message\": \"");
        memset(a + w, 'x', 5000);
        snprintf(a + w + 5000, 6000 - (size_t)w - 5000, "\"}");
        char p[6100];
        snprintf(p, sizeof p, "[\"ec_status\", %s]", a);
        free(a);
        CU_ASSERT(rpc_call(c, "tools.call", p, &r) == 0 && r.res);
        const char *m;
        size_t n = 0;
        CU_ASSERT(r.res && rpc_tool_error_is(r.res, "unavailable") &&
                  th_rpc_obj_str(err_key(r.res, "message"), &m, &n) &&
                  n == 2000 && m[0] == 'x' && m[1999] == 'x');
        rpc_res_free(&r);
    }
    /* set_retry_after() after complete(): refused, logged */
    res = ec(c, "ec_status", "{\"status\": \"unavailable\", \"suspended\": "
                             "true, \"late\": true}", &r);
    CU_ASSERT(res && rpc_tool_error_is(res, "unavailable"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_wait(&s, "set_retry_after", rpc_wait_ms()));
    /* a 1.4 plugin's 4, 5, 6: unknown statuses, as before */
    for (int st = 4; st <= 6; st++) {
        char a[64];
        snprintf(a, sizeof a, "{\"status\": %d}", st);
        res = ec(c, "a14_status", a, &r);
        CU_ASSERT(res && rpc_tool_error_is(res, "tool_error"));
        CU_ASSERT(res && retry_of(res) == -1);
        rpc_res_free(&r);
    }
    CU_ASSERT(rpc_log_has(&s, "tool a14_status returned 6 from execute"));
    /* the host keeps serving */
    res = ec(c, "ec_status", "{\"status\": \"ok\"}", &r);
    CU_ASSERT(res && rpc_ok(res));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_srv_stop(&s, SIGTERM) == 0);
    if (!isolated) {
        /* the audit line's outcome names the backend's code */
        char path[1024];
        snprintf(path, sizeof path, "%s/audit.log", s.dir);
        size_t n = 0;
        char *log = th_test_read_file(path, &n);
        CU_ASSERT(log && strstr(log, "\"outcome\":\"unavailable\""));
        CU_ASSERT(log && strstr(log, "\"outcome\":\"backend_timeout\""));
        CU_ASSERT(log && strstr(log, "\"outcome\":\"rate_limited\""));
        free(log);
    }
    rpc_srv_free(&s);
}

static void test_rpc(void)
{
    rpc_round(false);
}

static void test_rpc_isolated(void)
{
    rpc_round(true);
}

#define INIT                                                                   \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"    \
    "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"                 \
    "\"clientInfo\":{\"name\":\"raw\",\"version\":\"1\"}}}\n"                  \
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"

#define CALL(id, args)                                                         \
    "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"tools/call\","        \
    "\"params\":{\"name\":\"ec_status\",\"arguments\":" args "}}\n"

static json_t *result_of(json_t *lines, json_int_t id)
{
    size_t i;
    json_t *v;
    json_array_foreach(lines, i, v)
    {
        json_t *j = json_object_get(v, "id");
        if (json_is_integer(j) && json_integer_value(j) == id)
            return json_object_get(v, "result");
    }
    return NULL;
}

static const char *text_of(json_t *res)
{
    return json_string_value(
        json_object_get(json_array_get(json_object_get(res, "content"), 0),
                        "text"));
}

static void test_mcp(void)
{
    char *dir = th_test_tmpdir();
    char cfg_text[2048];
    snprintf(cfg_text, sizeof cfg_text, "%s", config(false, false));
    /* @BUILD@ for the file written here */
    char text[4096];
    size_t n = 0;
    for (const char *p = cfg_text; *p && n + 1 < sizeof text;) {
        if (!strncmp(p, "@BUILD@", 7)) {
            n += (size_t)snprintf(text + n, sizeof text - n, "%s",
                                  TH_BUILD_DIR);
            p += 7;
        } else {
            text[n++] = *p++;
        }
    }
    text[n] = '\0';
    char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
    const char *input =
        INIT
        CALL(2, "{\"status\":\"unavailable\",\"retry_ms\":2500,"
                "\"message\":\"db is restarting\"}")
        CALL(3, "{\"status\":\"timeout\",\"message\":\"no answer\"}")
        CALL(4, "{\"status\":\"rate_limited\",\"retry_ms\":60000}")
        CALL(5, "{\"status\":\"ok\"}");
    th_test_run r;
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c", cfg,
                    NULL};
    int rc = th_test_run_argv(argv, input, 60, 1, &r);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(r.status, 0);
    json_t *lines = json_array();
    char *save = NULL;
    for (char *l = r.out ? strtok_r(r.out, "\n", &save) : NULL; l;
         l = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(l, 0, NULL);
        if (j)
            json_array_append_new(lines, j);
    }
    th_test_run_free(&r);

    json_t *res = result_of(lines, 2);
    json_t *meta = json_object_get(res, "_meta");
    CU_ASSERT(json_is_true(json_object_get(res, "isError")));
    CU_ASSERT(text_of(res) && strstr(text_of(res), "(unavailable): db is "
                                                   "restarting"));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(
                               meta, "toolhost/error")) ?: "",
                           "unavailable");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(
                        meta, "toolhost/retry_after_ms")), 2500);

    res = result_of(lines, 3);
    meta = json_object_get(res, "_meta");
    CU_ASSERT(json_is_true(json_object_get(res, "isError")));
    CU_ASSERT(text_of(res) && strstr(text_of(res), "(backend_timeout): no "
                                                   "answer"));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(
                               meta, "toolhost/error")) ?: "",
                           "backend_timeout");
    CU_ASSERT_PTR_NULL(json_object_get(meta, "toolhost/retry_after_ms"));

    res = result_of(lines, 4);
    meta = json_object_get(res, "_meta");
    CU_ASSERT(text_of(res) && strstr(text_of(res), "(rate_limited)"));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(
                        meta, "toolhost/retry_after_ms")), 60000);

    res = result_of(lines, 5);
    CU_ASSERT(res && json_is_false(json_object_get(res, "isError")));
    json_decref(lines);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_errcodes(void)
{
    CU_pSuite s = CU_add_suite("errcodes", NULL, NULL);
    CU_add_test(s, "rpc", test_rpc);
    CU_add_test(s, "rpc_isolated", test_rpc_isolated);
    CU_add_test(s, "mcp", test_mcp);
}
