/* test_mcp_rev0728.c - MCP protocol revision 2026-07-28 (docs/mcp.md,
 * "Protocol revisions"): server/discover, the per-request _meta envelope,
 * the revision's result shapes, over stdio (`toolhost mcp`) and Streamable
 * HTTP (`toolhost serve`).
 *
 * Raw: JSON lines and HTTP requests written by hand: the shape of
 * server/discover and of the results, the refusals (an unknown revision,
 * a request without its envelope, a method the revision does not have,
 * headers that contradict the body), and that a 2025-11-25 or 2024-11-05
 * session sees no change.  Interop: the official v2 client
 * (tests/mcp/v2.mjs, @modelcontextprotocol/client) over both transports. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/th_http.h"
#include "integration/test_rpc_harness.h"

#define TOKEN "rev0728-token-0123456789abcdef"
#define TOKEN_ENV "TH_REV0728_TOKEN"
#define TOKEN_B "rev0728-token-bob-0123456789abcd"
#define TOKEN_B_ENV "TH_REV0728_TOKEN_B"
#define TOKEN_C "rev0728-token-carol-0123456789ab"
#define TOKEN_C_ENV "TH_REV0728_TOKEN_C"

/* The config: echo.so, conform_tools.so (resources, prompts, completion,
 * sampling and forms), abi11_tools.so (structured results) and
 * abi14_calls.so (asks); reload on SIGHUP; `http`: an http:// entry and a
 * token for it. */
static const char *config_text(bool http)
{
    return http ? "host:\n"
                  "  log_level: debug\n"
                  "  shutdown_grace: 1s\n"
                  "  listen: [\"http://127.0.0.1:0/mcp\"]\n"
                  "plugins:\n"
                  "  - name: echo\n"
                  "    path: @BUILD@/plugins/echo.so\n"
                  "  - name: conform_tools\n"
                  "    path: @BUILD@/fixtures/conform_tools.so\n"
                  "  - name: abi11_tools\n"
                  "    path: @BUILD@/fixtures/abi11_tools.so\n"
                  "  - name: abi14_calls\n"
                  "    path: @BUILD@/fixtures/abi14_calls.so\n"
                  "mcp:\n"
                  "  tokens:\n"
                  "    - {user: alice, env: " TOKEN_ENV "}\n"
                  "    - {user: bob, env: " TOKEN_B_ENV "}\n"
                  "    - {user: carol, env: " TOKEN_C_ENV "}\n"
                  "toolsets:\n"
                  "  - name: all\n"
                  "    tools: [\"*\"]\n"
                  "    allow_users: [alice, bob, carol]\n"
                : "host:\n"
                  "  reload: signal\n"
                  "plugins:\n"
                  "  - name: echo\n"
                  "    path: @BUILD@/plugins/echo.so\n"
                  "  - name: conform_tools\n"
                  "    path: @BUILD@/fixtures/conform_tools.so\n"
                  "  - name: abi11_tools\n"
                  "    path: @BUILD@/fixtures/abi11_tools.so\n"
                  "  - name: abi14_calls\n"
                  "    path: @BUILD@/fixtures/abi14_calls.so\n";
}

/* The stdio config in dir (malloc'ed path), `extra` (NULL: none) after
 * it. */
static char *stdio_config_ex(const char *dir, const char *extra)
{
    char all[4096];
    snprintf(all, sizeof all, "%s%s", config_text(false),
             extra ? extra : "");
    const char *t = all;
    const char *b = TH_BUILD_DIR;
    char text[4096];
    size_t n = 0;
    while (*t && n + 1 < sizeof text) {
        if (strncmp(t, "@BUILD@", 7) == 0) {
            n += (size_t)snprintf(text + n, sizeof text - n, "%s", b);
            t += 7;
        } else {
            text[n++] = *t++;
        }
    }
    text[n < sizeof text ? n : sizeof text - 1] = '\0';
    return th_test_write_file(dir, "c.yaml", text, (size_t)-1);
}

static char *stdio_config(const char *dir)
{
    return stdio_config_ex(dir, NULL);
}

/* `toolhost mcp -c cfg` with `input` on stdin, then end of input: the
 * answers by id (an object "ID" -> message), those without an id under
 * "null".  status: the process's. */
static json_t *run_stdio(const char *cfg, const char *input, int *status)
{
    th_test_run r;
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c",
                    (char *)cfg, NULL};
    CU_ASSERT_EQUAL(th_test_run_argv(argv, input, 60, 1, &r), 0);
    *status = r.status;
    json_t *by = json_object();
    char *save = NULL;
    for (char *line = strtok_r(r.out, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(line, 0, NULL);
        CU_ASSERT_PTR_NOT_NULL(j);
        if (!j)
            continue;
        json_t *id = json_object_get(j, "id");
        char key[64];
        if (json_is_integer(id))
            snprintf(key, sizeof key, "%lld",
                     (long long)json_integer_value(id));
        else
            snprintf(key, sizeof key, "%s",
                     json_is_string(id) ? json_string_value(id) : "null");
        const char *method = json_string_value(json_object_get(j, "method"));
        if (method) {
            /* notifications: counted by method, under "#METHOD" */
            char k[128];
            snprintf(k, sizeof k, "#%s", method);
            json_object_set_new(
                by, k,
                json_integer(json_integer_value(json_object_get(by, k)) + 1));
            json_decref(j);
        } else
            json_object_set_new(by, key, j);
    }
    th_test_run_free(&r);
    return by;
}

/* The envelope of a 2026-07-28 request, as the v2 client sends it. */
#define ENV(v)                                                                \
    "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"" v "\","     \
    "\"io.modelcontextprotocol/clientCapabilities\":{},"                     \
    "\"io.modelcontextprotocol/clientInfo\":{\"name\":\"raw\","              \
    "\"version\":\"1\"}}"
#define REQ(id, method, params)                                               \
    "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"" method               \
    "\",\"params\":{" params "}}\n"

/* a equals b, a NULL (a missing field) failing, not crashing. */
static bool str_eq(const char *a, const char *b)
{
    if (!a || strcmp(a, b) != 0)
        fprintf(stderr, "\n'%s' where '%s' was due\n", a ? a : "(none)", b);
    return a && strcmp(a, b) == 0;
}
#define ASSERT_STR(a, b) CU_ASSERT(str_eq((a), (b)))

static int err_code(json_t *by, const char *id)
{
    return (int)json_integer_value(json_object_get(
        json_object_get(json_object_get(by, id), "error"), "code"));
}

static json_t *result_of(json_t *by, const char *id)
{
    json_t *res = json_object_get(json_object_get(by, id), "result");
    if (!res) {
        char *t = json_dumps(json_object_get(by, id), JSON_COMPACT);
        fprintf(stderr, "\nno result for id %s: %s\n", id, t ? t : "(none)");
        free(t);
    }
    return res;
}

static bool has_version(json_t *arr, const char *v)
{
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) if (json_is_string(e) &&
                                      strcmp(json_string_value(e), v) == 0)
        return true;
    return false;
}

/* server/discover and the results of the revision, over stdio. */
static void test_stdio_discover(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = stdio_config(dir);
    const char *in =
        REQ(1, "server/discover", ENV("2026-07-28"))
        REQ(2, "tools/list", ENV("2026-07-28"))
        REQ(3, "tools/call", "\"name\":\"echo\",\"arguments\":{\"text\":"
                             "\"hi\"}," ENV("2026-07-28"))
        REQ(4, "resources/read", "\"uri\":\"test://static-text\","
                                 ENV("2026-07-28"))
        REQ(5, "prompts/list", ENV("2026-07-28"))
        REQ(6, "completion/complete",
            "\"ref\":{\"type\":\"ref/prompt\",\"name\":"
            "\"test_prompt_with_arguments\"},\"argument\":{\"name\":"
            "\"arg1\",\"value\":\"par\"}," ENV("2026-07-28"));
    int status;
    json_t *by = run_stdio(cfg, in, &status);
    CU_ASSERT_EQUAL(status, 0);

    json_t *d = result_of(by, "1");
    ASSERT_STR(
        json_string_value(json_object_get(d, "resultType")), "complete");
    json_t *sv = json_object_get(d, "supportedVersions");
    ASSERT_STR(json_string_value(json_array_get(sv, 0)),
                           "2026-07-28");
    CU_ASSERT(has_version(sv, "2025-11-25") && has_version(sv, "2024-11-05"));
    json_t *caps = json_object_get(d, "capabilities");
    CU_ASSERT(json_is_object(json_object_get(caps, "tools")) &&
              json_is_object(json_object_get(caps, "resources")) &&
              json_is_object(json_object_get(caps, "prompts")) &&
              json_is_object(json_object_get(caps, "completions")) &&
              json_is_object(json_object_get(caps, "logging")));
    CU_ASSERT_PTR_NULL(json_object_get(caps, "tasks"));
    CU_ASSERT(json_is_string(json_object_get(d, "instructions")));
    ASSERT_STR(
        json_string_value(json_object_get(
            json_object_get(json_object_get(d, "_meta"),
                            "io.modelcontextprotocol/serverInfo"),
            "name")),
        "toolhost");

    json_t *tl = result_of(by, "2");
    ASSERT_STR(
        json_string_value(json_object_get(tl, "resultType")), "complete");
    CU_ASSERT(json_is_integer(json_object_get(tl, "ttlMs")));
    ASSERT_STR(
        json_string_value(json_object_get(tl, "cacheScope")), "private");
    json_t *tools = json_object_get(tl, "tools");
    CU_ASSERT(json_array_size(tools) > 3);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
        CU_ASSERT_PTR_NULL(json_object_get(t, "execution"));

    json_t *call = result_of(by, "3");
    ASSERT_STR(
        json_string_value(json_object_get(call, "resultType")), "complete");
    ASSERT_STR(
        json_string_value(json_object_get(
            json_array_get(json_object_get(call, "content"), 0), "text")),
        "hi");
    json_t *rd = result_of(by, "4");
    CU_ASSERT(json_is_integer(json_object_get(rd, "ttlMs")) &&
              json_object_get(rd, "cacheScope") &&
              json_array_size(json_object_get(rd, "contents")) == 1);
    CU_ASSERT(json_is_integer(json_object_get(result_of(by, "5"), "ttlMs")));
    json_t *cp = result_of(by, "6");
    ASSERT_STR(
        json_string_value(json_object_get(cp, "resultType")), "complete");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(
                        json_object_get(cp, "completion"), "values")),
                    3);
    json_decref(by);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* What the revision refuses: an unknown revision (-32022 with the
 * supported list), a request without its envelope in a 2026-07-28 session,
 * a bad envelope, methods the revision does not have, tasks. */
static void test_stdio_refusals(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = stdio_config(dir);
    const char *in =
        REQ(1, "server/discover", ENV("2027-01-01"))
        REQ(2, "tools/list", ENV("2026-07-28"))
        REQ(3, "tools/list", "")
        REQ(4, "initialize", "\"protocolVersion\":\"2025-11-25\","
                             "\"capabilities\":{}," ENV("2026-07-28"))
        REQ(5, "logging/setLevel", "\"level\":\"debug\"," ENV("2026-07-28"))
        REQ(6, "tasks/list", ENV("2026-07-28"))
        REQ(7, "tools/call", "\"name\":\"echo_async\",\"arguments\":{"
                             "\"text\":\"x\"},\"task\":{}," ENV("2026-07-28"))
        REQ(8, "resources/read", "\"uri\":\"test://no-such\","
                                 ENV("2026-07-28"))
        REQ(9, "tools/list", "\"_meta\":{\"io.modelcontextprotocol/"
                             "protocolVersion\":\"2026-07-28\"}")
        REQ(10, "tools/list", "\"_meta\":{\"io.modelcontextprotocol/"
                              "protocolVersion\":\"2026-07-28\","
                              "\"io.modelcontextprotocol/clientCapabilities\""
                              ":{},\"io.modelcontextprotocol/logLevel\":"
                              "\"loud\"}")
        REQ(11, "subscriptions/listen", "\"notifications\":{},"
                                        ENV("2026-07-28"))
        "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"x\"}}}\n"
        REQ(13, "ping", ENV("2026-07-28"))
        REQ(14, "tools/list", "\"_meta\":{\"io.modelcontextprotocol/"
                              "protocolVersion\":20260728,"
                              "\"io.modelcontextprotocol/clientCapabilities\""
                              ":{}}")
        REQ(15, "tools/list", ENV("2026-07-28-and-a-long-tail-beyond-"
                                  "any-revision-name"));
    int status;
    json_t *by = run_stdio(cfg, in, &status);
    CU_ASSERT_EQUAL(status, 0);
    CU_ASSERT_EQUAL(err_code(by, "1"), -32022);
    json_t *data =
        json_object_get(json_object_get(json_object_get(by, "1"), "error"),
                        "data");
    CU_ASSERT(has_version(json_object_get(data, "supported"), "2026-07-28"));
    ASSERT_STR(
        json_string_value(json_object_get(data, "requested")), "2027-01-01");
    CU_ASSERT_PTR_NOT_NULL(result_of(by, "2"));
    CU_ASSERT_EQUAL(err_code(by, "3"), -32602);
    CU_ASSERT_EQUAL(err_code(by, "4"), -32601);
    CU_ASSERT_EQUAL(err_code(by, "5"), -32601);
    CU_ASSERT_EQUAL(err_code(by, "6"), -32601);
    CU_ASSERT_EQUAL(err_code(by, "7"), -32602);
    CU_ASSERT_EQUAL(err_code(by, "8"), -32602); /* not -32002 */
    CU_ASSERT_EQUAL(err_code(by, "9"), -32602);
    CU_ASSERT_EQUAL(err_code(by, "10"), -32602);
    /* subscriptions/listen is served: acknowledged, closed at the end */
    CU_ASSERT_PTR_NOT_NULL(json_object_get(
        json_object_get(result_of(by, "11"), "_meta"),
        "io.modelcontextprotocol/subscriptionId"));
    CU_ASSERT_EQUAL(err_code(by, "12"), -32602); /* the plain fast path */
    CU_ASSERT_EQUAL(err_code(by, "13"), -32601);
    /* Not a string, or too long to be a revision: -32022, not echoed. */
    CU_ASSERT_EQUAL(err_code(by, "14"), -32022);
    CU_ASSERT_EQUAL(err_code(by, "15"), -32022);
    json_t *e15 = json_object_get(json_object_get(by, "15"), "error");
    CU_ASSERT_PTR_NULL(
        json_object_get(json_object_get(e15, "data"), "requested"));
    CU_ASSERT(!strstr(json_string_value(json_object_get(e15, "message")),
                      "long-tail"));
    json_decref(by);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* 2025-11-25 and 2024-11-05 sessions see what they saw before: no
 * resultType, no cache hints, execution in the tool entries; and a
 * 2026-07-28 request in such a session is refused. */
static void test_stdio_legacy_unchanged(void)
{
    static const char *const versions[] = {"2025-11-25", "2024-11-05"};
    char *dir = th_test_tmpdir();
    char *cfg = stdio_config(dir);
    for (int k = 0; k < 2; k++) {
        char in[2048];
        snprintf(in, sizeof in,
                 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
                 "\"params\":{\"protocolVersion\":\"%s\",\"capabilities\":"
                 "{},\"clientInfo\":{\"name\":\"old\",\"version\":\"1\"}}}\n"
                 "{\"jsonrpc\":\"2.0\",\"method\":"
                 "\"notifications/initialized\"}\n"
                 REQ(2, "tools/list", "")
                 REQ(3, "tools/call", "\"name\":\"abi11_tools_rows\","
                                      "\"arguments\":{\"limit\":2}")
                 REQ(4, "server/discover", ENV("2026-07-28"))
                 REQ(5, "resources/read", "\"uri\":\"test://no-such\"")
                 REQ(6, "ping", ""),
                 versions[k]);
        int status;
        json_t *by = run_stdio(cfg, in, &status);
        CU_ASSERT_EQUAL(status, 0);
        json_t *init = result_of(by, "1");
        ASSERT_STR(
            json_string_value(json_object_get(init, "protocolVersion")),
            versions[k]);
        CU_ASSERT_PTR_NULL(json_object_get(init, "resultType"));
        /* initialize's words as before 2026-07-28 was served */
        const char *ins =
            json_string_value(json_object_get(init, "instructions"));
        CU_ASSERT(ins && strstr(ins, "long-running tools "
                                     "(execution.taskSupport optional) "
                                     "report progress and may run as "
                                     "tasks."));
        json_t *tl = result_of(by, "2");
        CU_ASSERT_PTR_NULL(json_object_get(tl, "resultType"));
        CU_ASSERT_PTR_NULL(json_object_get(tl, "ttlMs"));
        CU_ASSERT_PTR_NULL(json_object_get(tl, "_meta"));
        CU_ASSERT_PTR_NOT_NULL(json_object_get(
            json_array_get(json_object_get(tl, "tools"), 0), "execution"));
        json_t *call = result_of(by, "3");
        CU_ASSERT_PTR_NULL(json_object_get(call, "resultType"));
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(
                            json_object_get(call, "structuredContent"),
                            "rows")),
                        2);
        CU_ASSERT_EQUAL(err_code(by, "4"), -32600);
        CU_ASSERT_EQUAL(err_code(by, "5"), -32002);
        CU_ASSERT_PTR_NOT_NULL(result_of(by, "6"));
        json_decref(by);
    }
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* Logging in 2026-07-28: the envelope's logLevel asks for the request's
 * log messages; without it there are none. */
static void test_stdio_log_level(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = stdio_config(dir);
    for (int with = 0; with < 2; with++) {
        const char *in =
            with ? REQ(1, "tools/call",
                       "\"name\":\"test_tool_with_logging\",\"arguments\":"
                       "{},\"_meta\":{\"io.modelcontextprotocol/"
                       "protocolVersion\":\"2026-07-28\","
                       "\"io.modelcontextprotocol/clientCapabilities\":{},"
                       "\"io.modelcontextprotocol/logLevel\":\"info\"}")
                 : REQ(1, "tools/call",
                       "\"name\":\"test_tool_with_logging\",\"arguments\":"
                       "{}," ENV("2026-07-28"));
        int status;
        json_t *by = run_stdio(cfg, in, &status);
        CU_ASSERT_EQUAL(status, 0);
        CU_ASSERT_PTR_NOT_NULL(result_of(by, "1"));
        json_int_t n = json_integer_value(
            json_object_get(by, "#notifications/message"));
        CU_ASSERT(with ? n >= 3 : n == 0);
        json_decref(by);
    }
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}


/* The envelope with the client's capabilities `caps` (JSON text). */
#define ENVC(caps)                                                            \
    "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
    "\"io.modelcontextprotocol/clientCapabilities\":" caps ","               \
    "\"io.modelcontextprotocol/clientInfo\":{\"name\":\"raw\","              \
    "\"version\":\"1\"}}"
/* abi14_calls_ask's arguments: one form */
#define ASK_FORM                                                              \
    "\"name\":\"abi14_calls_ask\",\"arguments\":{\"kind\":2,\"request\":"    \
    "\"{\\\"message\\\":\\\"m\\\",\\\"requestedSchema\\\":{\\\"type\\\":"    \
    "\\\"object\\\",\\\"properties\\\":{}}}\"},"

/* subscriptions/listen over stdio: filters of the wrong type are refused
 * (-32602) and the session goes on; at most mcp.max_subscriptions open
 * (one more refused and logged, a slot freed by notifications/cancelled);
 * each acknowledged with what is honoured, and the open ones closed with
 * their result (stamped with their id) at the end of input. */
static void test_stdio_listen(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = stdio_config_ex(dir, "mcp:\n  max_subscriptions: 2\n");
    const char *in =
        REQ(1, "subscriptions/listen", "\"notifications\":\"all\","
                                       ENV("2026-07-28"))
        REQ(2, "subscriptions/listen", "\"notifications\":{"
                                       "\"toolsListChanged\":\"yes\"},"
                                       ENV("2026-07-28"))
        REQ(3, "subscriptions/listen", "\"notifications\":{"
                                       "\"resourceSubscriptions\":[1]},"
                                       ENV("2026-07-28"))
        REQ(4, "subscriptions/listen", ENV("2026-07-28"))
        REQ("la", "subscriptions/listen", "\"notifications\":{"
                                          "\"toolsListChanged\":true},"
                                          ENV("2026-07-28"))
        REQ("lb", "subscriptions/listen", "\"notifications\":{"
                                          "\"promptsListChanged\":true,"
                                          "\"x-junk\":[1,2]},"
                                          ENV("2026-07-28"))
        REQ("lc", "subscriptions/listen", "\"notifications\":{},"
                                          ENV("2026-07-28"))
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
        "\"params\":{\"requestId\":\"lb\"," ENV("2026-07-28") "}}\n"
        REQ("ld", "subscriptions/listen", "\"notifications\":{},"
                                          ENV("2026-07-28"))
        REQ(5, "tools/call", "\"name\":\"echo\",\"arguments\":{\"text\":"
                             "\"still\"}," ENV("2026-07-28"));
    int status;
    json_t *by = run_stdio(cfg, in, &status);
    CU_ASSERT_EQUAL(status, 0);
    for (int i = 1; i <= 4; i++) {
        char k[16];
        snprintf(k, sizeof k, "%d", i);
        CU_ASSERT_EQUAL(err_code(by, k), -32602);
    }
    CU_ASSERT_EQUAL(err_code(by, "lc"), -32600);
    const char *lc = json_string_value(json_object_get(
        json_object_get(json_object_get(by, "lc"), "error"), "message"));
    CU_ASSERT(lc && strstr(lc, "mcp.max_subscriptions"));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(
                        by, "#notifications/subscriptions/acknowledged")),
                    3);
    ASSERT_STR(json_string_value(json_object_get(
                   json_object_get(result_of(by, "la"), "_meta"),
                   "io.modelcontextprotocol/subscriptionId")),
               "la");
    ASSERT_STR(json_string_value(json_object_get(result_of(by, "la"),
                                                 "resultType")),
               "complete");
    CU_ASSERT_PTR_NOT_NULL(result_of(by, "ld"));
    CU_ASSERT_PTR_NULL(json_object_get(by, "lb")); /* closed by the client */
    ASSERT_STR(json_string_value(json_object_get(
                   json_array_get(json_object_get(result_of(by, "5"),
                                                  "content"),
                                  0),
                   "text")),
               "still");
    json_decref(by);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* input_required over stdio: a tool's form comes back as the result of
 * its request (inputRequests ask-1, a requestState); a retry with a state
 * nobody made or of the wrong type is refused; a client that declared no
 * sampling is not asked (the tool hears ENOTSUP, -5). */
static void test_stdio_input_required(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = stdio_config(dir);
    const char *in =
        REQ(1, "tools/call", ASK_FORM ENVC("{\"elicitation\":{}}"))
        REQ(2, "tools/call", ASK_FORM
            "\"requestState\":\"00000000000000000000000000000000\","
            "\"inputResponses\":{\"ask-1\":{\"action\":\"accept\"}},"
            ENVC("{\"elicitation\":{}}"))
        REQ(3, "tools/call", ASK_FORM "\"requestState\":5,"
            "\"inputResponses\":[]," ENVC("{\"elicitation\":{}}"))
        REQ(4, "tools/call", "\"name\":\"abi14_calls_ask\",\"arguments\":{"
            "\"kind\":1,\"request\":\"{}\"}," ENVC("{}"));
    int status;
    json_t *by = run_stdio(cfg, in, &status);
    CU_ASSERT_EQUAL(status, 0);
    json_t *r1 = result_of(by, "1");
    ASSERT_STR(json_string_value(json_object_get(r1, "resultType")),
               "input_required");
    json_t *q = json_object_get(json_object_get(r1, "inputRequests"),
                                "ask-1");
    ASSERT_STR(json_string_value(json_object_get(q, "method")),
               "elicitation/create");
    ASSERT_STR(json_string_value(json_object_get(
                   json_object_get(q, "params"), "message")),
               "m");
    const char *st = json_string_value(json_object_get(r1, "requestState"));
    CU_ASSERT(st && strlen(st) == 32);
    CU_ASSERT_PTR_NULL(json_object_get(r1, "content"));
    CU_ASSERT_EQUAL(err_code(by, "2"), -32602);
    CU_ASSERT_EQUAL(err_code(by, "3"), -32602);
    json_t *r4 = result_of(by, "4");
    ASSERT_STR(json_string_value(json_object_get(r4, "resultType")),
               "complete");
    const char *t4 = json_string_value(json_object_get(
        json_array_get(json_object_get(r4, "content"), 0), "text"));
    CU_ASSERT(t4 && strstr(t4, "rc=-5"));
    json_decref(by);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* ---- Streamable HTTP ----------------------------------------------------- */

typedef struct rv_srv {
    rpc_srv rs;
    unsigned port;
} rv_srv;

/* `mcp`: more lines in the mcp: section. */
static int rv_start_ex(rv_srv *v, const char *mcp)
{
    memset(v, 0, sizeof *v);
    setenv(TOKEN_ENV, TOKEN, 1);
    setenv(TOKEN_B_ENV, TOKEN_B, 1);
    setenv(TOKEN_C_ENV, TOKEN_C, 1);
    char text[4096];
    const char *base = config_text(true);
    const char *at = strstr(base, "  tokens:\n");
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base,
             mcp ? mcp : "", at);
    rpc_opts o = {.config = text};
    if (rpc_srv_start(&v->rs, &o) != 0)
        return -1;
    v->port = th_test_log_port(v->rs.log, "(Streamable HTTP) on http");
    if (!v->port)
        rpc_dump_log(&v->rs);
    return v->port ? 0 : -1;
}

static int rv_start(rv_srv *v)
{
    return rv_start_ex(v, NULL);
}

static void rv_free(rv_srv *v)
{
    rpc_srv_free(&v->rs);
    unsetenv(TOKEN_ENV);
    unsetenv(TOKEN_B_ENV);
    unsetenv(TOKEN_C_ENV);
}

/* One POST; the status, the whole answer in *text (malloc'ed). */
static int post(unsigned port, const char *hdrs, const char *body,
                char **text)
{
    char h[1024];
    snprintf(h, sizeof h, "Authorization: Bearer " TOKEN "\r\n%s",
             hdrs ? hdrs : "");
    return th_test_http(port, "POST", "/mcp", h, body, rpc_wait_ms(), text);
}

static bool has(const char *text, const char *needle)
{
    bool ok = text && strcasestr(text, needle);
    if (!ok)
        fprintf(stderr, "\nno '%s' in:\n%.2000s\n", needle, text ? text : "");
    return ok;
}

#define H_V(v) "MCP-Protocol-Version: " v "\r\n"
#define H_M(m) "Mcp-Method: " m "\r\n"
#define H_N(n) "Mcp-Name: " n "\r\n"
#define B(id, method, params)                                                 \
    "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"" method               \
    "\",\"params\":{" params "}}"

/* A 2026-07-28 request without a session: answered, no session made; the
 * headers checked against the body. */
static void test_http_raw(void)
{
    rv_srv v;
    CU_ASSERT_FATAL(rv_start(&v) == 0);
    char *t = NULL;
    CU_ASSERT_EQUAL(post(v.port, H_V("2026-07-28") H_M("server/discover"),
                         B(1, "server/discover", ENV("2026-07-28")), &t),
                    200);
    CU_ASSERT(has(t, "\"supportedVersions\":[\"2026-07-28\""));
    CU_ASSERT(has(t, "\"resultType\":\"complete\""));
    CU_ASSERT(!strcasestr(t, "Mcp-Session-Id"));
    free(t);
    CU_ASSERT_EQUAL(
        post(v.port, H_V("2026-07-28") H_M("tools/call") H_N("echo"),
             B(2, "tools/call", "\"name\":\"echo\",\"arguments\":{\"text\":"
                                "\"over http\"}," ENV("2026-07-28")),
             &t),
        200);
    CU_ASSERT(has(t, "over http"));
    CU_ASSERT(has(t, "\"resultType\":\"complete\""));
    free(t);
    /* A name that is not printable ASCII goes base64 in its sentinel:
     * "echo" is ZWNobw==. */
    CU_ASSERT_EQUAL(
        post(v.port,
             H_V("2026-07-28") H_M("tools/call") H_N("=?base64?ZWNobw==?="),
             B(3, "tools/call", "\"name\":\"echo\",\"arguments\":{\"text\":"
                                "\"b64\"}," ENV("2026-07-28")),
             &t),
        200);
    CU_ASSERT(has(t, "b64"));
    free(t);
    /* The attacks on the routing headers: each says another thing than
     * the body, or is missing. */
    static const struct {
        const char *hdrs, *body;
        int status;
        const char *code;
    } bad[] = {
        {H_V("2026-07-28") H_M("tools/call") H_N("text_count"),
         B(4, "tools/call", "\"name\":\"echo\",\"arguments\":{\"text\":\"x\"},"
                            ENV("2026-07-28")),
         400, "-32020"},
        {H_V("2026-07-28") H_M("tools/call"),
         B(5, "tools/call", "\"name\":\"echo\",\"arguments\":{\"text\":\"x\"},"
                            ENV("2026-07-28")),
         400, "-32020"},
        {H_V("2026-07-28") H_M("tools/list"),
         B(6, "tools/call", "\"name\":\"echo\",\"arguments\":{\"text\":\"x\"},"
                            ENV("2026-07-28")),
         400, "-32020"},
        {H_V("2026-07-28"), B(7, "tools/list", ENV("2026-07-28")), 400,
         "-32020"},
        {H_M("tools/list"), B(8, "tools/list", ENV("2026-07-28")), 400,
         "-32020"},
        {H_V("2025-11-25") H_M("tools/list"),
         B(9, "tools/list", ENV("2026-07-28")), 400, "-32020"},
        {H_V("2026-07-28") H_M("tools/list"), B(10, "tools/list", ""), 400,
         "-32602"},
        {H_V("2026-07-28") H_M("tools/call") H_N("=?base64?!!!?="),
         B(11, "tools/call", "\"name\":\"echo\",\"arguments\":{\"text\":"
                             "\"x\"}," ENV("2026-07-28")),
         400, "-32020"},
        {H_V("2027-01-01") H_M("tools/list"), B(12, "tools/list", ""), 400,
         "-32602"},
        {H_V("2025-99-99") H_M("tools/list"), B(12, "tools/list", ""), 400,
         "unsupported MCP-Protocol-Version"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL(post(v.port, bad[i].hdrs, bad[i].body, &t),
                        bad[i].status);
        CU_ASSERT(has(t, bad[i].code));
        free(t);
    }
    /* A later revision in the envelope and the header: 400, -32022 and
     * the list, from which the client picks again; an older one in an
     * envelope: the same. */
    CU_ASSERT_EQUAL(post(v.port, H_V("2027-01-01") H_M("server/discover"),
                         B(13, "server/discover", ENV("2027-01-01")), &t),
                    400);
    CU_ASSERT(has(t, "\"code\":-32022"));
    CU_ASSERT(has(t, "\"supported\":[\"2026-07-28\""));
    CU_ASSERT(has(t, "\"requested\":\"2027-01-01\""));
    CU_ASSERT(has(t, "\"id\":13"));
    free(t);
    CU_ASSERT_EQUAL(post(v.port, H_V("2025-11-25") H_M("tools/list"),
                         B(13, "tools/list", ENV("2025-11-25")), &t),
                    400);
    CU_ASSERT(has(t, "\"code\":-32022"));
    free(t);
    CU_ASSERT_EQUAL(post(v.port, H_M("server/discover"),
                         B(14, "server/discover", ENV("2027-01-01")), &t),
                    400);
    CU_ASSERT(has(t, "-32020"));
    free(t);
    /* A notification of the revision: taken, nothing to route it to. */
    CU_ASSERT_EQUAL(post(v.port, NULL,
                         "{\"jsonrpc\":\"2.0\",\"method\":"
                         "\"notifications/cancelled\",\"params\":{"
                         "\"requestId\":1," ENV("2026-07-28") "}}",
                         &t),
                    202);
    free(t);
    /* A 2025-11-25 client on the same server: a session, as before. */
    CU_ASSERT_EQUAL(
        post(v.port, NULL,
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
             "\"params\":{\"protocolVersion\":\"2025-11-25\","
             "\"capabilities\":{},\"clientInfo\":{\"name\":\"old\","
             "\"version\":\"1\"}}}",
             &t),
        200);
    CU_ASSERT(has(t, "Mcp-Session-Id: "));
    CU_ASSERT(has(t, "\"protocolVersion\":\"2025-11-25\""));
    CU_ASSERT(!strstr(t, "resultType"));
    free(t);
    /* DNS rebinding: no Origin, a Host naming another site: refused
     * before any session, for this revision as for the others. */
    {
        static const char body[] = B(16, "server/discover", ENV("2026-07-28"));
        char req[1024];
        int n = snprintf(req, sizeof req,
                         "POST /mcp HTTP/1.1\r\nHost: evil.example\r\n"
                         "Connection: close\r\n"
                         "Authorization: Bearer " TOKEN "\r\n"
                         H_V("2026-07-28") H_M("server/discover")
                         "Content-Type: application/json\r\n"
                         "Accept: application/json, text/event-stream\r\n"
                         "Content-Length: %zu\r\n\r\n%s",
                         strlen(body), body);
        int fd = th_test_tcp_connect(v.port, 0);
        CU_ASSERT_FATAL(fd >= 0);
        CU_ASSERT(th_test_send_all(fd, req, (size_t)n) == 0);
        CU_ASSERT_EQUAL(th_test_http_read(fd, NULL, rpc_wait_ms(), &t), 403);
        CU_ASSERT(!strstr(t, "supportedVersions"));
        free(t);
        close(fd);
    }
    /* Still serving after all that. */
    CU_ASSERT_EQUAL(post(v.port, H_V("2026-07-28") H_M("tools/list"),
                         B(15, "tools/list", ENV("2026-07-28")), &t),
                    200);
    CU_ASSERT(has(t, "\"cacheScope\":\"private\""));
    free(t);
    rv_free(&v);
}

/* A 2026-07-28 request's session counts against mcp.max_sessions while
 * its request runs, and its slot is free again when it ends. */
static void test_http_session_budget(void)
{
    rv_srv v;
    CU_ASSERT_FATAL(rv_start_ex(&v, "  max_sessions: 1\n") == 0);
    /* A long call on a connection of its own, left running. */
    int fd = th_test_tcp_connect(v.port, 0);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT(th_test_http_send(
                  fd, "POST", "/mcp",
                  "Authorization: Bearer " TOKEN "\r\n" H_V("2026-07-28")
                      H_M("tools/call") H_N("echo_async"),
                  B(1, "tools/call",
                    "\"name\":\"echo_async\",\"arguments\":{\"text\":"
                    "\"x\",\"steps\":100000,\"delay_ms\":50},"
                    ENV("2026-07-28"))) == 0);
    CU_ASSERT(rpc_log_wait(&v.rs, "protocol 2026-07-28 (no initialize)",
                           rpc_wait_ms()));
    char *t = NULL;
    CU_ASSERT_EQUAL(post(v.port, H_V("2026-07-28") H_M("server/discover"),
                         B(2, "server/discover", ENV("2026-07-28")), &t),
                    503);
    CU_ASSERT(has(t, "too many sessions"));
    free(t);
    CU_ASSERT(rpc_log_has(&v.rs, "sessions open (mcp.max_sessions)"));
    /* The client hangs up: its call is cancelled, its session ends. */
    close(fd);
    int st = 0;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (st != 200 && rpc_now_ms() < end) {
        st = post(v.port, H_V("2026-07-28") H_M("server/discover"),
                  B(3, "server/discover", ENV("2026-07-28")), &t);
        free(t);
        if (st != 200)
            rpc_log_wait(&v.rs, "echo_async cancelled", 100);
    }
    CU_ASSERT_EQUAL(st, 200);
    rv_free(&v);
}


/* One POST with `token`. */
static int post_tok(unsigned port, const char *token, const char *hdrs,
                    const char *body, char **text)
{
    char h[1024];
    snprintf(h, sizeof h, "Authorization: Bearer %s\r\n%s", token,
             hdrs ? hdrs : "");
    return th_test_http(port, "POST", "/mcp", h, body, rpc_wait_ms(), text);
}

static int post_bob(unsigned port, const char *hdrs, const char *body,
                    char **text)
{
    return post_tok(port, TOKEN_B, hdrs, body, text);
}

/* The requestState of an input_required answer in text, into st[33]. */
static bool state_of(const char *text, char st[33])
{
    const char *p = text ? strstr(text, "\"requestState\":\"") : NULL;
    if (!p || strlen(p + 16) < 33 || p[16 + 32] != '"')
        return false;
    memcpy(st, p + 16, 32);
    st[32] = '\0';
    return true;
}

#define H_ASK H_V("2026-07-28") H_M("tools/call") H_N("abi14_calls_ask")
#define CAPS_FORM ENVC("{\"elicitation\":{}}")

/* A retry of ASK_FORM with `state` and `responses` (JSON text); its
 * answer's text in *t. */
static int retry(unsigned port, bool bob, const char *args,
                 const char *state, const char *responses, char **t)
{
    char body[2048];
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"abi14_calls_ask\",\"arguments\":%s,"
             "\"requestState\":\"%s\",\"inputResponses\":%s," CAPS_FORM "}}",
             args, state, responses);
    return bob ? post_bob(port, H_ASK, body, t) : post(port, H_ASK, body, t);
}

#define ARGS_FORM                                                             \
    "{\"kind\":2,\"request\":\"{\\\"message\\\":\\\"m\\\",\\\"requested"     \
    "Schema\\\":{\\\"type\\\":\\\"object\\\",\\\"properties\\\":{}}}\"}"
#define ANSWER "{\"ask-1\":{\"action\":\"accept\",\"content\":{\"who\":\"al\"}}}"

/* input_required over HTTP, where each request is a session of its own:
 * the state outlives the first request's session; a retry by another
 * user, for other arguments, or answering a question not asked is
 * refused and leaves the state; the owner's retry runs the tool again with
 * the answer; the state answers once.  The caps, while alice's state
 * waits: mcp.max_pending_inputs_per_user 1 refuses alice's second ask
 * (the tool hears ENOTSUP) but not bob's; mcp.max_pending_inputs 2 then
 * refuses carol's; each logged. */
static void test_http_input_required(void)
{
    rv_srv v;
    CU_ASSERT_FATAL(rv_start_ex(&v, "  max_pending_inputs: 2\n"
                                    "  max_pending_inputs_per_user: 1\n") ==
                    0);
    char *t = NULL;
    CU_ASSERT_EQUAL(post(v.port, H_ASK, B(1, "tools/call", ASK_FORM CAPS_FORM),
                         &t), 200);
    char st[33] = "";
    CU_ASSERT(has(t, "\"resultType\":\"input_required\"") &&
              has(t, "\"ask-1\":{\"method\":\"elicitation/create\""));
    CU_ASSERT_FATAL(state_of(t, st));
    free(t);
    /* the caps: alice has one state waiting already */
    CU_ASSERT_EQUAL(post(v.port, H_ASK, B(2, "tools/call", ASK_FORM CAPS_FORM),
                         &t), 200);
    CU_ASSERT(has(t, "rc=-5") && has(t, "\"resultType\":\"complete\""));
    free(t);
    CU_ASSERT(rpc_log_wait(&v.rs, "(mcp.max_pending_inputs_per_user)",
                           rpc_wait_ms()));
    CU_ASSERT_EQUAL(post_bob(v.port, H_ASK,
                             B(3, "tools/call", ASK_FORM CAPS_FORM), &t),
                    200);
    CU_ASSERT(has(t, "\"resultType\":\"input_required\""));
    free(t);
    CU_ASSERT_EQUAL(post_tok(v.port, TOKEN_C, H_ASK,
                             B(4, "tools/call", ASK_FORM CAPS_FORM), &t),
                    200);
    CU_ASSERT(has(t, "rc=-5"));
    free(t);
    CU_ASSERT(rpc_log_wait(&v.rs, "(mcp.max_pending_inputs)", rpc_wait_ms()));
    /* another user's retry */
    CU_ASSERT_EQUAL(retry(v.port, true, ARGS_FORM, st, ANSWER, &t), 200);
    CU_ASSERT(has(t, "-32602") && has(t, "belongs to another request"));
    free(t);
    /* other arguments */
    CU_ASSERT_EQUAL(retry(v.port, false, "{\"kind\":2,\"request\":\"{}\"}",
                          st, ANSWER, &t), 200);
    CU_ASSERT(has(t, "belongs to another request"));
    free(t);
    /* an answer to a question not asked; no answer */
    CU_ASSERT_EQUAL(retry(v.port, false, ARGS_FORM, st,
                          "{\"ask-1\":{\"action\":\"accept\"},\"ask-7\":{}}",
                          &t), 200);
    CU_ASSERT(has(t, "was not asked"));
    free(t);
    CU_ASSERT_EQUAL(retry(v.port, false, ARGS_FORM, st, "{}", &t), 200);
    CU_ASSERT(has(t, "lacks the answer"));
    free(t);
    /* the owner's retry: the tool runs again and gets the answer */
    CU_ASSERT_EQUAL(retry(v.port, false, ARGS_FORM, st, ANSWER, &t), 200);
    CU_ASSERT(has(t, "\"resultType\":\"complete\"") && has(t, "rc=0") &&
              has(t, "\\\"who\\\":\\\"al\\\""));
    free(t);
    /* answered once */
    CU_ASSERT_EQUAL(retry(v.port, false, ARGS_FORM, st, ANSWER, &t), 200);
    CU_ASSERT(has(t, "-32602") && has(t, "answered already"));
    free(t);
    rv_free(&v);
}

/* The bytes the waiting states keep (mcp.max_pending_input_bytes, one
 * caller a quarter of it): with 4 KiB, alice's states fill her 1 KiB
 * after a few asks and her next is refused, logged naming the key, while
 * bob's ask still gets its state. */
static void test_http_input_bytes(void)
{
    rv_srv v;
    CU_ASSERT_FATAL(rv_start_ex(&v, "  max_pending_input_bytes: 4096\n") ==
                    0);
    char *t = NULL;
    int kept = 0;
    bool refused = false;
    for (int i = 0; i < 100 && !refused; i++) {
        CU_ASSERT_EQUAL(post(v.port, H_ASK,
                             B(1, "tools/call", ASK_FORM CAPS_FORM), &t),
                        200);
        if (has(t, "\"resultType\":\"input_required\""))
            kept++;
        else
            refused = has(t, "rc=-5");
        free(t);
    }
    CU_ASSERT(refused);
    CU_ASSERT(kept >= 1 && kept < 100);
    CU_ASSERT(rpc_log_wait(&v.rs, "(mcp.max_pending_input_bytes (a quarter "
                                  "of it for one caller))",
                           rpc_wait_ms()));
    CU_ASSERT_EQUAL(post_bob(v.port, H_ASK,
                             B(2, "tools/call", ASK_FORM CAPS_FORM), &t),
                    200);
    CU_ASSERT(has(t, "\"resultType\":\"input_required\""));
    free(t);
    rv_free(&v);
}

/* A state past mcp.input_ttl is dropped: the owner's retry is refused,
 * and the expiry is logged.  The wait is for the state to go (a retry
 * for other arguments, which leaves a live state alone, is refused as
 * unknown from then on). */
static void test_http_input_expiry(void)
{
    rv_srv v;
    CU_ASSERT_FATAL(rv_start_ex(&v, "  input_ttl: 100ms\n") == 0);
    char *t = NULL;
    CU_ASSERT_EQUAL(post(v.port, H_ASK, B(1, "tools/call", ASK_FORM CAPS_FORM),
                         &t), 200);
    char st[33] = "";
    CU_ASSERT_FATAL(state_of(t, st));
    free(t);
    bool gone = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!gone && rpc_now_ms() < end) {
        CU_ASSERT_EQUAL(retry(v.port, false, "{\"kind\":2,\"request\":\"x\"}",
                              st, ANSWER, &t), 200);
        gone = t && strstr(t, "expired") != NULL;
        free(t);
        if (!gone)
            rpc_log_wait(&v.rs, "expired unanswered", 50);
    }
    CU_ASSERT(gone);
    CU_ASSERT_EQUAL(retry(v.port, false, ARGS_FORM, st, ANSWER, &t), 200);
    CU_ASSERT(has(t, "-32602") && has(t, "expired"));
    free(t);
    CU_ASSERT(rpc_log_has(&v.rs, "expired unanswered (mcp.input_ttl)"));
    rv_free(&v);
}

/* subscriptions/listen over HTTP: each listen is a session of its own
 * (mcp.max_sessions: 2, the third refused 503); a reload that changes the
 * tools reaches both as notifications/tools/list_changed stamped with
 * their ids; SIGTERM closes them with their result and the host exits 0. */
static void test_http_listen(void)
{
    rv_srv v;
    CU_ASSERT_FATAL(rv_start_ex(&v, "  max_sessions: 2\n") == 0);
    int fd[2];
    char *t = NULL;
    for (int i = 0; i < 2; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"jsonrpc\":\"2.0\",\"id\":\"l%d\",\"method\":"
                 "\"subscriptions/listen\",\"params\":{\"notifications\":"
                 "{\"toolsListChanged\":true}," ENV("2026-07-28") "}}",
                 i);
        fd[i] = th_test_tcp_connect(v.port, 0);
        CU_ASSERT_FATAL(fd[i] >= 0);
        CU_ASSERT(th_test_http_send(fd[i], "POST", "/mcp",
                                    "Authorization: Bearer " TOKEN "\r\n"
                                    H_V("2026-07-28")
                                    H_M("subscriptions/listen"),
                                    body) == 0);
        CU_ASSERT_EQUAL(th_test_http_read(fd[i], "acknowledged",
                                          rpc_wait_ms(), &t), 200);
        CU_ASSERT(has(t, "text/event-stream") &&
                  has(t, "\"toolsListChanged\":true"));
        free(t);
    }
    CU_ASSERT_EQUAL(post(v.port, H_V("2026-07-28") H_M("subscriptions/listen"),
                         B(3, "subscriptions/listen",
                           "\"notifications\":{}," ENV("2026-07-28")),
                         &t), 503);
    free(t);
    /* the change: abi11_tools leaves the config, and the host reloads */
    FILE *f = fopen(v.rs.cfg, "r");
    CU_ASSERT_FATAL(f != NULL);
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *cut = strstr(text, "  - name: abi11_tools\n");
    CU_ASSERT_FATAL(cut != NULL);
    char *nl = strchr(strchr(cut, '\n') + 1, '\n');
    memmove(cut, nl + 1, strlen(nl + 1) + 1);
    f = fopen(v.rs.cfg, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs(text, f);
    fclose(f);
    kill(v.rs.pid, SIGHUP);
    for (int i = 0; i < 2; i++) {
        char want[96];
        snprintf(want, sizeof want,
                 "\"io.modelcontextprotocol/subscriptionId\":\"l%d\"}}", i);
        th_test_http_read(fd[i], want, rpc_wait_ms(), &t);
        CU_ASSERT(has(t, "notifications/tools/list_changed"));
        CU_ASSERT(has(t, want));
        free(t);
    }
    /* the server stops: each listen gets its closing result */
    kill(v.rs.pid, SIGTERM);
    for (int i = 0; i < 2; i++) {
        char want[64];
        snprintf(want, sizeof want, "\"id\":\"l%d\",\"result\"", i);
        th_test_http_read(fd[i], NULL, rpc_wait_ms(), &t);
        CU_ASSERT(has(t, want));
        free(t);
        close(fd[i]);
    }
    CU_ASSERT_EQUAL(rpc_srv_wait(&v.rs), 0);
    CU_ASSERT(rpc_log_has(&v.rs, "subscriptions/listen closed: the server "
                                 "stops"));
    rv_free(&v);
}

/* ---- the v2 client -------------------------------------------------------- */

/* Node (the client needs 20 or later: Debian's). */
static const char *node_bin(void)
{
    static const char *const c[] = {"/usr/bin/node", "/usr/local/bin/node",
                                    NULL};
    for (int i = 0; c[i]; i++)
        if (access(c[i], X_OK) == 0)
            return c[i];
    return NULL;
}

static bool client_ready(void)
{
    struct stat st;
    return node_bin() &&
           stat(th_test_source_path("tests/mcp/node_modules/"
                                    "@modelcontextprotocol/client/"
                                    "package.json"),
                &st) == 0;
}

static void run_v2(const char *mode, const char *a, const char *b,
                   const char *c, const char *d)
{
    char script[1024];
    snprintf(script, sizeof script, "%s",
             th_test_source_path("tests/mcp/v2.mjs"));
    char *argv[] = {(char *)node_bin(), script, (char *)mode, (char *)a,
                    (char *)b, (char *)c, (char *)d, NULL};
    th_test_run r;
    CU_ASSERT_EQUAL(th_test_run_argv(argv, NULL, 120, 0, &r), 0);
    if (r.status != 0)
        fprintf(stderr, "\nv2.mjs %s exited %d\nstdout:\n%s\nstderr:\n%s\n",
                mode, r.status, r.out ? r.out : "",
                r.err && r.err_len > 4000 ? r.err + r.err_len - 4000
                : r.err                   ? r.err
                                          : "");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT(r.out && strstr(r.out, "ok"));
    th_test_run_free(&r);
}

static void test_sdk_v2_stdio(void)
{
    if (!client_ready())
        TH_SKIP("node or @modelcontextprotocol/client is missing (npm ci "
                "in tests/mcp)");
    th_test_timeout(150);
    char *dir = th_test_tmpdir();
    char *cfg = stdio_config(dir);
    run_v2("stdio", th_test_build_path("toolhost"), cfg, NULL, NULL);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

static void test_sdk_v2_http(void)
{
    if (!client_ready())
        TH_SKIP("node or @modelcontextprotocol/client is missing (npm ci "
                "in tests/mcp)");
    th_test_timeout(150);
    rv_srv v;
    CU_ASSERT_FATAL(rv_start(&v) == 0);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/mcp", v.port);
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)v.rs.pid);
    run_v2("http", url, TOKEN, v.rs.cfg, pid);
    /* Every request was a session of its own, closed with it. */
    CU_ASSERT(rpc_log_has(&v.rs, "protocol 2026-07-28 (no initialize)"));
    rv_free(&v);
}

void th_suite_mcp_rev0728(void)
{
    CU_pSuite s = CU_add_suite("mcp_rev0728", NULL, NULL);
    CU_add_test(s, "stdio_discover", test_stdio_discover);
    CU_add_test(s, "stdio_refusals", test_stdio_refusals);
    CU_add_test(s, "stdio_legacy_unchanged", test_stdio_legacy_unchanged);
    CU_add_test(s, "stdio_log_level", test_stdio_log_level);
    CU_add_test(s, "http_raw", test_http_raw);
    CU_add_test(s, "http_session_budget", test_http_session_budget);
    CU_add_test(s, "stdio_listen", test_stdio_listen);
    CU_add_test(s, "stdio_input_required", test_stdio_input_required);
    CU_add_test(s, "http_input_required", test_http_input_required);
    CU_add_test(s, "http_input_bytes", test_http_input_bytes);
    CU_add_test(s, "http_input_expiry", test_http_input_expiry);
    CU_add_test(s, "http_listen", test_http_listen);
    CU_add_test(s, "sdk_v2_stdio", test_sdk_v2_stdio);
    CU_add_test(s, "sdk_v2_http", test_sdk_v2_http);
}
