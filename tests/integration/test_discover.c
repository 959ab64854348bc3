/* test_discover.c - deferred tools and search_tools (docs/gateway.md,
 * "Discovery") with the real binary and 1,000 generated tools
 * (tests/fixtures/many_tools.c, `defer: true`): absent from tools.list,
 * found first by search_tools for several queries, callable, the caller's
 * toolset obeyed (a tool it lacks is never returned nor callable), the
 * index rebuilt at reload, bad queries refused with words; over MCP the
 * session gets list_changed and then lists what it found
 * (tests/mcp/discover.mjs). */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

/* The caller (the test's uid) gets "public": echo, search_tools and the
 * tools of tag tracker (jira_*, linear_*, coffee_*); "ops" (every tool)
 * is for another uid. */
static const char discover_config[] =
    "host:\n"
    "  log_level: debug\n"
    "  shutdown_grace: 1s\n"
    "plugins:\n"
    "  - name: many\n"
    "    path: @BUILD@/fixtures/many_tools.so\n"
    "    defer: true\n"
    "    config: {count: 1000}\n"
    "  - name: echo\n"
    "    path: @BUILD@/plugins/echo.so\n"
    "defer_tools: [echo_async]\n"
    "tags:\n"
    "  - name: tracker\n"
    "    tools: [\"jira_*\", \"linear_*\", \"coffee_*\", echo_async]\n"
    "toolsets:\n"
    "  - name: public\n"
    "    tools: [echo]\n"
    "    tags: [tracker]\n"
    "  - name: ops\n"
    "    tools: [\"*\"]\n"
    "    allow_users: [\"4242421\"]\n";

/* search_tools over RPC: the parsed structured answer, or NULL (with the
 * tool error's code in *code when given). */
static json_t *search(th_rpc_client *c, const char *query, int limit,
                      char *code, size_t code_cap)
{
    json_t *args = json_pack("[s, {s:s}]", "search_tools", "query", query);
    if (limit > 0)
        json_object_set_new(json_array_get(args, 1), "limit",
                            json_integer(limit));
    char *txt = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    rpc_res r;
    json_t *out = NULL;
    if (rpc_call(c, "tools.call", txt, &r) == 0 && r.res) {
        const msgpack_object *so = th_rpc_map_get(r.res, "stdout");
        const char *p;
        size_t n;
        if (rpc_ok(r.res) && so && th_rpc_obj_str(so, &p, &n))
            out = json_loadb(p, n, 0, NULL);
        const msgpack_object *e =
            th_rpc_map_get(th_rpc_map_get(r.res, "error"), "code");
        if (code && e && th_rpc_obj_str(e, &p, &n))
            snprintf(code, code_cap, "%.*s", (int)n, p);
    }
    rpc_res_free(&r);
    free(txt);
    return out;
}

static const char *hit_name(json_t *res, size_t i)
{
    return json_string_value(
        json_object_get(json_array_get(json_object_get(res, "tools"), i),
                        "name"));
}

static size_t hits(json_t *res)
{
    return json_array_size(json_object_get(res, "tools"));
}

/* The first hit of query is `want`. */
static bool finds_first(th_rpc_client *c, const char *query, const char *want)
{
    json_t *res = search(c, query, 5, NULL, 0);
    bool ok = res && hits(res) > 0 && strcmp(hit_name(res, 0), want) == 0;
    if (!ok)
        fprintf(stderr, "\nquery '%s': first %s, wanted %s\n", query,
                res && hits(res) ? hit_name(res, 0) : "(none)", want);
    json_decref(res);
    return ok;
}

static size_t list_count(th_rpc_client *c, bool *has_deferred)
{
    rpc_res r;
    size_t n = 0;
    *has_deferred = false;
    if (rpc_call(c, "tools.list", "[]", &r) == 0 && r.res &&
        r.res->type == MSGPACK_OBJECT_ARRAY) {
        n = r.res->via.array.size;
        *has_deferred = rpc_find_tool(r.res, "jira_create_issue") ||
                        rpc_find_tool(r.res, "echo_async");
    }
    rpc_res_free(&r);
    return n;
}

static bool call_ok(th_rpc_client *c, const char *tool, const char *want)
{
    char args[256];
    snprintf(args, sizeof args, "[\"%s\", {\"scope\": \"OPS\"}]", tool);
    rpc_res r;
    bool ok = rpc_call(c, "tools.call", args, &r) == 0 && r.res &&
              rpc_stdout_is(r.res, want);
    rpc_res_free(&r);
    return ok;
}

static void test_rpc(void)
{
    rpc_srv s;
    rpc_opts o = {.config = discover_config};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    /* listed: echo and search_tools; none of the 1,000 nor echo_async */
    bool deferred = true;
    CU_ASSERT_EQUAL(list_count(c, &deferred), 2);
    CU_ASSERT(!deferred);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.list", "[]", &r) == 0 && r.res &&
              rpc_find_tool(r.res, "search_tools") &&
              rpc_find_tool(r.res, "echo"));
    rpc_res_free(&r);

    /* the right tool first, for several wordings */
    CU_ASSERT(finds_first(c, "create a jira issue", "jira_create_issue"));
    CU_ASSERT(finds_first(c, "assign linear webhook to a person",
                          "linear_assign_webhook"));
    CU_ASSERT(finds_first(c, "Jira: export the reports as CSV",
                          "jira_export_report"));
    CU_ASSERT(finds_first(c, "archiveLinearComment", "linear_archive_comment"));
    CU_ASSERT(finds_first(c, "subscribe to notifications about jira users",
                          "jira_watch_user"));
    CU_ASSERT(finds_first(c, "report progress updates, then text",
                          "echo_async"));
    /* tags are searched: no tool's text says "tracker", its tag does */
    json_t *tg = search(c, "tracker", 5, NULL, 0);
    CU_ASSERT(tg != NULL && hits(tg) == 5);
    json_decref(tg);

    /* the answer: at most limit, best first, with schema and title */
    json_t *res = search(c, "jira issue", 7, NULL, 0);
    CU_ASSERT_FATAL(res != NULL);
    CU_ASSERT_EQUAL(hits(res), 7);
    json_t *first = json_array_get(json_object_get(res, "tools"), 0);
    CU_ASSERT(json_is_object(json_object_get(
        json_object_get(json_object_get(first, "input_schema"),
                        "properties"), "scope")));
    CU_ASSERT(json_is_string(json_object_get(first, "title")));
    CU_ASSERT(json_is_string(json_object_get(first, "description")));
    double prev = 1e9;
    for (size_t i = 0; i < hits(res); i++) {
        double sc = json_number_value(json_object_get(
            json_array_get(json_object_get(res, "tools"), i), "score"));
        CU_ASSERT(sc > 0 && sc <= prev);
        prev = sc;
    }
    json_decref(res);
    res = search(c, "jira", 0, NULL, 0); /* limit's default: 5 */
    CU_ASSERT_EQUAL(hits(res), 5);
    json_decref(res);

    /* the toolset holds: github and stripe tools are the other
     * toolset's, never returned, not callable */
    const char *const qs[] = {"create a github issue", "stripe customer report",
                              "delete a kubernetes user"};
    for (size_t q = 0; q < 3; q++) {
        res = search(c, qs[q], 50, NULL, 0);
        CU_ASSERT_FATAL(res != NULL);
        CU_ASSERT(hits(res) > 0);
        for (size_t i = 0; i < hits(res); i++) {
            const char *n = hit_name(res, i);
            CU_ASSERT(!strncmp(n, "jira_", 5) || !strncmp(n, "linear_", 7) ||
                      !strncmp(n, "echo", 4));
        }
        json_decref(res);
    }
    CU_ASSERT(rpc_call(c, "tools.call",
                       "[\"github_create_issue\", {\"scope\": \"a/b\"}]",
                       &r) == 0 && r.res &&
              (rpc_tool_error_is(r.res, "unknown_tool") ||
               rpc_tool_error_is(r.res, "permission_denied")));
    rpc_res_free(&r);

    /* found or not, a deferred tool of the toolset can be called */
    CU_ASSERT(call_ok(c, "jira_create_issue", "jira_create_issue ran in 'OPS'"));
    CU_ASSERT(call_ok(c, "linear_watch_report",
                      "linear_watch_report ran in 'OPS'"));

    /* bad queries: refused with words, the host goes on */
    char code[64] = "";
    CU_ASSERT(search(c, "  --  ", 3, code, sizeof code) == NULL);
    CU_ASSERT_STRING_EQUAL(code, "invalid_arguments");
    code[0] = '\0';
    CU_ASSERT(search(c, "", 3, code, sizeof code) == NULL);
    CU_ASSERT_STRING_EQUAL(code, "invalid_arguments");
    code[0] = '\0';
    CU_ASSERT(search(c, "jira", 51, code, sizeof code) == NULL);
    CU_ASSERT_STRING_EQUAL(code, "invalid_arguments");
    code[0] = '\0';
    char big[1100];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CU_ASSERT(search(c, big, 3, code, sizeof code) == NULL);
    CU_ASSERT_STRING_EQUAL(code, "invalid_arguments");
    res = search(c, "zzzz qqqq", 3, NULL, 0); /* words no tool has */
    CU_ASSERT(res != NULL && hits(res) == 0);
    json_decref(res);
    /* UTF-8 and stray bytes in a query are just words */
    res = search(c, "\xc3\xa9t\xc3\xa9 jira", 3, NULL, 0);
    CU_ASSERT(res != NULL && hits(res) == 3);
    json_decref(res);

    /* a reload rebuilds the index: coffee_order is found after it */
    res = search(c, "café au lait", 3, NULL, 0);
    CU_ASSERT(res != NULL && hits(res) == 0);
    json_decref(res);
    size_t len = 0;
    char *text = th_test_read_file(s.cfg, &len);
    CU_ASSERT_FATAL(text != NULL);
    char *at = strstr(text, "config: {count: 1000}");
    CU_ASSERT_FATAL(at != NULL);
    char *nt = malloc(len + 64);
    snprintf(nt, len + 64, "%.*sconfig: {count: 1000, extra: coffee_order}%s",
             (int)(at - text), text, at + strlen("config: {count: 1000}"));
    char *written = th_test_write_file(s.dir, "rpc.yaml", nt, (size_t)-1);
    CU_ASSERT_FATAL(written != NULL);
    free(written);
    free(nt);
    free(text);
    CU_ASSERT(rpc_call(c, "host.reload", "[]", &r) == 0 && r.err == NULL);
    rpc_res_free(&r);
    CU_ASSERT(finds_first(c, "café au lait", "coffee_order"));
    CU_ASSERT(finds_first(c, "create a jira issue", "jira_create_issue"));
    /* this session lists what its searches found (and still finds), a
     * new one lists none of it */
    CU_ASSERT(rpc_call(c, "tools.list", "[]", &r) == 0 && r.res &&
              rpc_find_tool(r.res, "jira_create_issue") &&
              rpc_find_tool(r.res, "coffee_order") &&
              !rpc_find_tool(r.res, "github_create_issue"));
    rpc_res_free(&r);
    th_rpc_client *c2 = rpc_connect(&s);
    CU_ASSERT_FATAL(c2 != NULL);
    CU_ASSERT_EQUAL(list_count(c2, &deferred), 2);
    CU_ASSERT(!deferred);
    th_rpc_client_close(c2);

    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* Rewrites the many plugin's config block of s's config to `block`. */
static void set_many_config(rpc_srv *s, const char *block)
{
    size_t len = 0;
    char *text = th_test_read_file(s->cfg, &len);
    CU_ASSERT_FATAL(text != NULL);
    char *at = strstr(text, "    config: {count: 1000");
    CU_ASSERT_FATAL(at != NULL);
    char *end = strchr(at, '\n');
    CU_ASSERT_FATAL(end != NULL);
    char *nt = malloc(len + 128);
    snprintf(nt, len + 128, "%.*s    config: %s%s", (int)(at - text), text,
             block, end);
    char *written = th_test_write_file(s->dir, "rpc.yaml", nt, (size_t)-1);
    CU_ASSERT_FATAL(written != NULL);
    free(written);
    free(nt);
    free(text);
}

typedef struct searcher {
    rpc_srv *s;
    int rounds, good;
} searcher;

static void *search_loop(void *ud)
{
    searcher *w = ud;
    th_rpc_client *c = rpc_connect(w->s);
    for (int i = 0; c && i < w->rounds; i++) {
        json_t *res = search(c, "create a jira issue", 3, NULL, 0);
        w->good += res && hits(res) == 3 &&
                   strcmp(hit_name(res, 0), "jira_create_issue") == 0;
        json_decref(res);
    }
    if (c)
        th_rpc_client_close(c);
    return NULL;
}

/* Searches from four connections while reloads swap the index under
 * them: every answer is whole and right (the index is reference
 * counted; ASan and valgrind watch the swaps). */
static void test_reload_race(void)
{
    rpc_srv s;
    rpc_opts o = {.config = discover_config};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    enum { W = 4 };
    searcher w[W];
    pthread_t th[W];
    for (int i = 0; i < W; i++) {
        w[i] = (searcher){&s, rpc_scale(60), 0};
        CU_ASSERT_FATAL(pthread_create(&th[i], NULL, search_loop, &w[i]) ==
                        0);
    }
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    for (int i = 0; i < 6; i++) {
        set_many_config(&s, i % 2 ? "{count: 1000, extra: coffee_a}"
                                  : "{count: 1000, extra: coffee_b}");
        rpc_res r;
        CU_ASSERT(rpc_call(c, "host.reload", "[]", &r) == 0 && r.err == NULL);
        rpc_res_free(&r);
    }
    for (int i = 0; i < W; i++) {
        pthread_join(th[i], NULL);
        CU_ASSERT_EQUAL(w[i].good, w[i].rounds);
    }
    CU_ASSERT(finds_first(c, "café au lait", "coffee_a"));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* A config with nothing deferred: no search_tools at all, and a reload
 * that defers a tool hides nothing until a restart. */
static void test_none_deferred(void)
{
    rpc_srv s;
    rpc_opts o = {0};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.list", "[]", &r) == 0 && r.res &&
              rpc_find_tool(r.res, "echo") &&
              !rpc_find_tool(r.res, "search_tools"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tools.call", "[\"search_tools\", {\"query\": "
                       "\"echo\"}]", &r) == 0 && r.res &&
              rpc_tool_error_is(r.res, "unknown_tool"));
    rpc_res_free(&r);
    /* a reload that defers a tool: no search_tools before a restart, so
     * nothing is hidden, and the log says so */
    size_t len = 0;
    char *text = th_test_read_file(s.cfg, &len);
    CU_ASSERT_FATAL(text != NULL);
    char *nt = malloc(len + 32);
    snprintf(nt, len + 32, "%sdefer_tools: [echo]\n", text);
    char *written = th_test_write_file(s.dir, "rpc.yaml", nt, (size_t)-1);
    CU_ASSERT_FATAL(written != NULL);
    free(written);
    free(nt);
    free(text);
    CU_ASSERT(rpc_call(c, "host.reload", "[]", &r) == 0 && r.err == NULL);
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_wait(&s, "defer and defer_tools take effect at the "
                           "next restart", rpc_wait_ms()));
    CU_ASSERT(rpc_call(c, "tools.list", "[]", &r) == 0 && r.res &&
              rpc_find_tool(r.res, "echo") &&
              !rpc_find_tool(r.res, "search_tools"));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static bool have_node(void)
{
    return th_test_shell_ok("command -v node >/dev/null 2>&1");
}

/* MCP (stdio, the official TypeScript client): tools/list without the
 * deferred tools, search_tools, list_changed, the found tools listed. */
static void test_mcp(void)
{
    if (!have_node())
        TH_SKIP("node is not installed");
    th_test_timeout(150);
    char *dir = th_test_tmpdir();
    char text[1024];
    snprintf(text, sizeof text,
             "plugins:\n"
             "  - name: many\n"
             "    path: %s\n"
             "    defer: true\n"
             "  - name: echo\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [echo, jira_create_issue, jira_get_issue, "
             "jira_list_issue, jira_update_issue, slack_watch_webhook]\n",
             th_test_build_path("fixtures/many_tools.so"),
             th_test_build_path("plugins/echo.so"));
    char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && if [ ! -d node_modules/@modelcontextprotocol/sdk ]; "
             "then echo 'tests/mcp/node_modules is missing' >&2; exit 3; fi; "
             "exec node discover.mjs '%s' '%s'",
             th_test_source_path("tests/mcp"), th_test_build_path("toolhost"),
             cfg);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    th_test_run r;
    CU_ASSERT_EQUAL(th_test_run_argv(argv, NULL, 120, 0, &r), 0);
    if (r.status != 0)
        fprintf(stderr, "\ndiscover.mjs exited %d\nstdout:\n%s\nstderr:\n%s\n",
                r.status, r.out ? r.out : "",
                r.err && r.err_len > 4000 ? r.err + r.err_len - 4000
                                          : r.err ? r.err : "");
    CU_ASSERT_EQUAL(r.status, 0);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_discover(void)
{
    CU_pSuite s = CU_add_suite("discover", NULL, NULL);
    CU_add_test(s, "rpc", test_rpc);
    CU_add_test(s, "reload_race", test_reload_race);
    CU_add_test(s, "none_deferred", test_none_deferred);
    CU_add_test(s, "mcp", test_mcp);
}
