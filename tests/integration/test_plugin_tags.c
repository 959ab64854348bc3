/* test_plugin_tags.c - tags a plugin declares on its tools (ABI 1.5),
 * with the real binary and the fixture tagged_tools.so: a toolset that
 * selects by a plugin tag and by a config tag at once, tools.list's
 * "tags" (absent for an untagged tool), `toolhost disable tag:NAME` of a
 * plugin tag, MCP tools/list's "_meta": {"toolhost/tags": [...]} under
 * --toolset, `config check` telling a declared tag from an undeclared
 * one, the tags of an isolated plugin, and a reload refused for a toolset
 * tag nobody declares; search_tools finding tools by a plugin's tags. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

/* One toolset, "mixed": the plugin tag read-only (tag_read) and the
 * config tag extra (tag_plain); tag_write carries neither. */
static const char rpc_config[] =
    "host:\n"
    "  log_level: debug\n"
    "  shutdown_grace: 1s\n"
    "plugins:\n"
    "  - name: tagged\n"
    "    path: @BUILD@/fixtures/tagged_tools.so\n"
    "tags:\n"
    "  - name: extra\n"
    "    tools: [tag_plain]\n"
    "toolsets:\n"
    "  - name: mixed\n"
    "    tags: [read-only, extra]\n";

static bool says(th_rpc_client *c, const char *tool)
{
    char params[128];
    snprintf(params, sizeof params, "[\"%s\", {}]", tool);
    rpc_res r;
    bool ok = rpc_call(c, "tools.call", params, &r) == 0 && r.res &&
              rpc_stdout_is(r.res, tool);
    rpc_res_free(&r);
    return ok;
}

/* The error message of a tool answer has `needle`. */
static bool refused_with(th_rpc_client *c, const char *tool,
                         const char *code, const char *needle)
{
    char params[128];
    snprintf(params, sizeof params, "[\"%s\", {}]", tool);
    rpc_res r;
    bool ok = rpc_call(c, "tools.call", params, &r) == 0 && r.res &&
              rpc_tool_error_is(r.res, code);
    if (ok && needle) {
        const msgpack_object *m =
            th_rpc_map_get(th_rpc_map_get(r.res, "error"), "message");
        const char *p;
        size_t n;
        char buf[512] = "";
        if (m && th_rpc_obj_str(m, &p, &n))
            snprintf(buf, sizeof buf, "%.*s", (int)n, p);
        ok = strstr(buf, needle) != NULL;
    }
    rpc_res_free(&r);
    return ok;
}

/* The tool's "tags" in tools.list are exactly `want` (NULL: no key). */
static bool tags_are(const msgpack_object *tool, const char *const *want)
{
    const msgpack_object *t = th_rpc_map_get(tool, "tags");
    if (!want)
        return tool && !t;
    size_t n = 0;
    while (want[n])
        n++;
    if (!t || t->type != MSGPACK_OBJECT_ARRAY || t->via.array.size != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!th_rpc_obj_streq(&t->via.array.ptr[i], want[i]))
            return false;
    return true;
}

static void test_rpc(void)
{
    rpc_srv s;
    rpc_opts o = {.config = rpc_config};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT_FATAL(rpc_call(c, "tools.list", "[]", &r) == 0 && r.res);
    static const char *const read_tags[] = {"files", "read-only", NULL};
    CU_ASSERT(tags_are(rpc_find_tool(r.res, "tag_read"), read_tags));
    /* selected by the config's tag; it declares none: no "tags" key */
    CU_ASSERT(tags_are(rpc_find_tool(r.res, "tag_plain"), NULL));
    CU_ASSERT_PTR_NULL(rpc_find_tool(r.res, "tag_write"));
    rpc_res_free(&r);
    CU_ASSERT(says(c, "tag_read"));
    CU_ASSERT(says(c, "tag_plain"));
    CU_ASSERT(refused_with(c, "tag_write", "unknown_tool", NULL));
    /* disable by a tag only the plugin declares: its tools, no other */
    CU_ASSERT(rpc_call(c, "host.disable", "[\"tag:files\", \"disk swap\"]",
                       &r) == 0 && r.err == NULL);
    rpc_res_free(&r);
    CU_ASSERT(refused_with(c, "tag_read", "tool_disabled",
                           "tool 'tag_read' is disabled (tag 'files'): "
                           "disk swap"));
    CU_ASSERT(says(c, "tag_plain"));
    CU_ASSERT(rpc_call(c, "host.enable", "[\"tag:files\"]", &r) == 0 &&
              r.err == NULL);
    rpc_res_free(&r);
    CU_ASSERT(says(c, "tag_read"));
    /* a config tag still disables as before */
    CU_ASSERT(rpc_call(c, "host.disable", "[\"tag:extra\", \"later\"]",
                       &r) == 0 && r.err == NULL);
    rpc_res_free(&r);
    CU_ASSERT(refused_with(c, "tag_plain", "tool_disabled", "(tag 'extra')"));
    CU_ASSERT(says(c, "tag_read"));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* search_tools ranks by the tags a plugin declares: with the plugin
 * deferred, "files" (a word of no name or description, only of the tags
 * of tag_read and tag_write) finds those two and not tag_plain. */
static void test_search(void)
{
    static const char cfg[] =
        "host:\n"
        "  shutdown_grace: 1s\n"
        "plugins:\n"
        "  - name: tagged\n"
        "    path: @BUILD@/fixtures/tagged_tools.so\n"
        "    defer: true\n";
    rpc_srv s;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT_FATAL(rpc_call(c, "tools.call",
                             "[\"search_tools\", {\"query\": \"files\"}]",
                             &r) == 0 && r.res);
    const msgpack_object *out = th_rpc_map_get(r.res, "stdout");
    const char *p = NULL;
    size_t n = 0;
    char buf[8192] = "";
    if (out && th_rpc_obj_str(out, &p, &n))
        snprintf(buf, sizeof buf, "%.*s", (int)n, p);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "\"tag_read\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "\"tag_write\""));
    CU_ASSERT_PTR_NULL(strstr(buf, "\"tag_plain\""));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

#define INIT                                                                   \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"    \
    "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"                 \
    "\"clientInfo\":{\"name\":\"raw\",\"version\":\"1\"}}}\n"                  \
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"

static char *write_cfg(const char *dir, const char *toolsets)
{
    char text[2048];
    snprintf(text, sizeof text,
             "plugins:\n"
             "  - name: tagged\n"
             "    path: %s\n"
             "toolsets:\n%s",
             th_test_build_path("fixtures/tagged_tools.so"), toolsets);
    return th_test_write_file(dir, "c.yaml", text, (size_t)-1);
}

/* MCP tools/list of the toolset "writers" (tags: [writes]): tag_write
 * alone, its tags in _meta; the untagged entry has no _meta. */
static void test_mcp(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_cfg(dir, "  - name: writers\n"
                               "    tags: [writes]\n"
                               "  - name: all\n"
                               "    tools: [\"*\"]\n");
    const char *input =
        INIT "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n";
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c", cfg,
                    "--toolset", "writers", NULL};
    th_test_run r;
    CU_ASSERT_EQUAL_FATAL(th_test_run_argv(argv, input, 30, 1, &r), 0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"name\":\"tag_write\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"_meta\":{\"toolhost/tags\":"
                                         "[\"files\",\"writes\"]}"));
    CU_ASSERT_PTR_NULL(strstr(r.out, "tag_read"));
    CU_ASSERT_PTR_NULL(strstr(r.out, "tag_plain"));
    th_test_run_free(&r);
    char *argv2[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c", cfg,
                     "--toolset", "all", NULL};
    CU_ASSERT_EQUAL_FATAL(th_test_run_argv(argv2, input, 30, 1, &r), 0);
    const char *plain = strstr(r.out, "\"name\":\"tag_plain\"");
    CU_ASSERT_PTR_NOT_NULL(plain);
    if (plain) { /* the entry ends before the next tool's name */
        const char *next = strstr(plain + 1, "\"name\":\"tag_");
        const char *meta = strstr(plain, "\"_meta\"");
        CU_ASSERT(!meta || (next && meta > next));
    }
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* `config check`: a toolset tag a plugin declares is fine; one that
 * neither the config nor a plugin declares is reported at its place. */
static void test_config_check(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_cfg(dir, "  - name: ro\n"
                               "    tags: [read-only]\n");
    th_test_run r;
    th_test_toolhost(&r, "config", "check", cfg, NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    if (r.status != 0)
        fprintf(stderr, "\n  config check:\n%s%s\n", r.out, r.err);
    th_test_run_free(&r);
    free(cfg);
    cfg = write_cfg(dir, "  - name: ro\n"
                         "    tags: [read-only, nosuch]\n");
    th_test_toolhost(&r, "config", "check", cfg, NULL);
    CU_ASSERT_NOT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(r.err && strstr(r.err, ":6:23: toolset 'ro' "
                                                  "selects tag 'nosuch', "
                                                  "which neither an entry of "
                                                  "'tags:' nor a plugin's "
                                                  "tool declares"));
    CU_ASSERT_PTR_NULL(r.err && strstr(r.err, "'read-only'"));
    if (!r.err || !strstr(r.err, "nosuch"))
        fprintf(stderr, "\n  config check:\n%s%s\n", r.out, r.err);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* The plugin under isolation: process: the tags cross the worker's wire
 * and select as in process.  Then a reload to a config whose toolset
 * names a tag nobody declares fails, naming it, and changes nothing. */
static void test_isolated_reload(void)
{
    char plugins[512];
    snprintf(plugins, sizeof plugins,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "plugins:\n"
             "  - name: tagged\n"
             "    path: @BUILD@/fixtures/tagged_tools.so\n"
             "    isolation: process\n"
             "%s"
             "toolsets:\n"
             "  - name: w\n"
             "    tags: [writes]\n",
             geteuid() == 0 ? "    user: nobody\n" : "");
    rpc_srv s;
    rpc_opts o = {.config = plugins};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT_FATAL(rpc_call(c, "tools.list", "[]", &r) == 0 && r.res);
    static const char *const write_tags[] = {"files", "writes", NULL};
    CU_ASSERT(tags_are(rpc_find_tool(r.res, "tag_write"), write_tags));
    CU_ASSERT_PTR_NULL(rpc_find_tool(r.res, "tag_read"));
    rpc_res_free(&r);
    CU_ASSERT(says(c, "tag_write"));
    /* the same file with the toolset's tag misspelt */
    char *text = th_test_read_file(s.cfg, NULL);
    CU_ASSERT_FATAL(text != NULL);
    char *at = strstr(text, "tags: [writes]");
    CU_ASSERT_FATAL(at != NULL);
    memcpy(at, "tags: [wrytes]", 14);
    FILE *f = fopen(s.cfg, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs(text, f);
    fclose(f);
    free(text);
    /* answered {ok: false, error: {code, message}} */
    CU_ASSERT(rpc_call(c, "host.reload", "[]", &r) == 0 && r.res);
    const msgpack_object *ok = r.res ? th_rpc_map_get(r.res, "ok") : NULL;
    CU_ASSERT(ok && ok->type == MSGPACK_OBJECT_BOOLEAN && !ok->via.boolean);
    const msgpack_object *m =
        r.res ? th_rpc_map_get(th_rpc_map_get(r.res, "error"), "message")
              : NULL;
    const char *p = NULL;
    size_t n = 0;
    char msg[512] = "";
    if (m && th_rpc_obj_str(m, &p, &n))
        snprintf(msg, sizeof msg, "%.*s", (int)n, p);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "toolset 'w' selects tag 'wrytes', "
                                       "which neither an entry of 'tags:' "
                                       "nor a plugin's tool declares"));
    if (!strstr(msg, "wrytes"))
        fprintf(stderr, "\n  reload answered: %s\n", msg);
    rpc_res_free(&r);
    CU_ASSERT(says(c, "tag_write")); /* nothing changed */
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

void th_suite_plugin_tags(void)
{
    CU_pSuite s = CU_add_suite("plugin_tags", NULL, NULL);
    CU_add_test(s, "rpc", test_rpc);
    CU_add_test(s, "search", test_search);
    CU_add_test(s, "mcp", test_mcp);
    CU_add_test(s, "config_check", test_config_check);
    CU_add_test(s, "isolated_reload", test_isolated_reload);
}
