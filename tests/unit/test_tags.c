/* test_tags.c - tags a plugin declares on its tools (ABI 1.5): the
 * loader's checks (names, repeats, how many, an unterminated list, a 1.4
 * struct whose size ends before the member), the copies it keeps, the
 * frozen 1.4 header's plugin still loading, the iso wire carrying them,
 * and a toolset selecting by a plugin tag and by a config tag at once. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"
#include "call/manager.h"
#include "iso/iso_wire.h"
#include "th/buf.h"
#include "th/config.h"
#include "th/schema.h"
#include "th/tool.h"

static int run(void *state, const toolhost_tool *tool, toolhost_call *call,
               const uint8_t *args, size_t len)
{
    (void)state, (void)tool, (void)call, (void)args, (void)len;
    return TOOLHOST_OK;
}

#define TAGGED(tname, taglist)                                                \
    {.struct_size = sizeof(toolhost_tool), .name = (tname),                    \
     .description = "T", .stdout_type = TOOLHOST_SEM_TEXT,                     \
     .stderr_type = TOOLHOST_SEM_ERROR, .execute = run, .tags = (taglist)}

static int load(const toolhost_tool *tools, uint32_t n, th_plugin **p,
                th_error *e)
{
    toolhost_plugin d = {.struct_size = sizeof d,
                         .abi_major = TOOLHOST_ABI_MAJOR,
                         .abi_minor = TOOLHOST_ABI_MINOR,
                         .name = "tg",
                         .version = "1",
                         .description = "Tagged",
                         .tools = tools,
                         .n_tools = n};
    return th_plugin_builtin(&d, p, e);
}

static void expect_refused(const toolhost_tool *tools, const char *want)
{
    th_plugin *p = NULL;
    th_error e;
    CU_ASSERT_EQUAL(load(tools, 1, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    if (strcmp(e.msg, want))
        fprintf(stderr, "\n  got: %s\n  want: %s\n", e.msg, want);
}

static void test_names(void)
{
    CU_ASSERT_TRUE(th_tag_name_valid("files"));
    CU_ASSERT_TRUE(th_tag_name_valid("read-only"));
    CU_ASSERT_TRUE(th_tag_name_valid("0day_x"));
    CU_ASSERT_TRUE(th_tag_name_valid("abcdefghijklmnopqrstuvwxyz012345"));
    CU_ASSERT_FALSE(th_tag_name_valid("abcdefghijklmnopqrstuvwxyz0123456"));
    CU_ASSERT_FALSE(th_tag_name_valid(""));
    CU_ASSERT_FALSE(th_tag_name_valid(NULL));
    CU_ASSERT_FALSE(th_tag_name_valid("Files"));
    CU_ASSERT_FALSE(th_tag_name_valid("-x"));
    CU_ASSERT_FALSE(th_tag_name_valid("_x"));
    CU_ASSERT_FALSE(th_tag_name_valid("a b"));
    CU_ASSERT_FALSE(th_tag_name_valid("a:b"));
    CU_ASSERT_FALSE(th_tag_name_valid("a*"));
    CU_ASSERT_FALSE(th_tag_name_valid("caf\xc3\xa9"));
}

static void test_loaded(void)
{
    static const char *const two[] = {"files", "read-only", NULL};
    static const char *const none[] = {NULL};
    const toolhost_tool tools[] = {TAGGED("a", two), TAGGED("b", none),
                                   TAGGED("c", NULL)};
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(load(tools, 3, &p, &e), 0);
    const th_tool *a = &p->tools[0];
    CU_ASSERT_EQUAL_FATAL(a->n_tags, 2);
    CU_ASSERT_STRING_EQUAL(a->tags[0], "files");
    CU_ASSERT_STRING_EQUAL(a->tags[1], "read-only");
    CU_ASSERT_PTR_NOT_EQUAL(a->tags[0], two[0]); /* copies */
    CU_ASSERT_TRUE(th_tool_has_tag(a, "read-only"));
    CU_ASSERT_FALSE(th_tool_has_tag(a, "read"));
    CU_ASSERT_EQUAL(p->tools[1].n_tags, 0);
    CU_ASSERT_EQUAL(p->tools[2].n_tags, 0);
    /* what clients see: only when declared */
    json_t *j = th_schema_tags(a);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    CU_ASSERT_STRING_EQUAL(s ? s : "", "[\"files\",\"read-only\"]");
    free(s);
    json_decref(j);
    CU_ASSERT_PTR_NULL(th_schema_tags(&p->tools[2]));
    json_t *m = th_schema_mcp_tool(a);
    s = m ? json_dumps(json_object_get(m, "_meta"), JSON_COMPACT) : NULL;
    CU_ASSERT_STRING_EQUAL(s ? s : "",
                           "{\"toolhost/tags\":[\"files\",\"read-only\"]}");
    free(s);
    json_decref(m);
    m = th_schema_mcp_tool(&p->tools[2]);
    CU_ASSERT_PTR_NULL(json_object_get(m, "_meta"));
    json_decref(m);
    char *text = th_schema_describe(a);
    CU_ASSERT_PTR_NOT_NULL(text && strstr(text, "\nTags: files, read-only.\n"));
    free(text);
    text = th_schema_describe(&p->tools[2]);
    CU_ASSERT_PTR_NULL(text && strstr(text, "Tags:"));
    free(text);
    th_plugin_unref(p);
}

static void test_refused(void)
{
    static const char *const upper[] = {"files", "Read", NULL};
    const toolhost_tool t1[] = {TAGGED("a", upper)};
    expect_refused(t1, "built-in plugin 'tg': tool 'a' has an invalid tag "
                       "'Read' (allowed: ^[a-z0-9][a-z0-9_-]{0,31}$)");
    static const char *const empty[] = {"", NULL};
    const toolhost_tool t2[] = {TAGGED("a", empty)};
    expect_refused(t2, "built-in plugin 'tg': tool 'a' has an invalid tag "
                       "'' (allowed: ^[a-z0-9][a-z0-9_-]{0,31}$)");
    static const char *const twice[] = {"x", "y", "x", NULL};
    const toolhost_tool t3[] = {TAGGED("a", twice)};
    expect_refused(t3, "built-in plugin 'tg': tool 'a' declares the tag 'x' "
                       "twice");
    /* 16 is the most; 17 (or a list without its NULL: the walk stops at
     * the 17th entry) is refused */
    static const char *const sixteen[] = {"t0", "t1", "t2", "t3", "t4", "t5",
                                          "t6", "t7", "t8", "t9", "ta", "tb",
                                          "tc", "td", "te", "tf", NULL};
    const toolhost_tool t4[] = {TAGGED("a", sixteen)};
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL(load(t4, 1, &p, &e), 0);
    if (p) {
        CU_ASSERT_EQUAL(p->tools[0].n_tags, 16);
        th_plugin_unref(p);
    }
    static const char *const unterminated[17] = {
        "t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8",
        "t9", "ta", "tb", "tc", "td", "te", "tf", "tg"};
    const toolhost_tool t5[] = {TAGGED("a", unterminated)};
    expect_refused(t5, "built-in plugin 'tg': tool 'a' declares more than 16 "
                       "tags (or its tags list is not NULL-terminated)");
    /* a line break (or any control byte) does not reach the log as is */
    static const char *const nl[] = {"ok\nfake log line", NULL};
    const toolhost_tool t7[] = {TAGGED("a", nl)};
    expect_refused(t7, "built-in plugin 'tg': tool 'a' has an invalid tag "
                       "'ok?fake log line' (allowed: "
                       "^[a-z0-9][a-z0-9_-]{0,31}$)");
    /* a long bad tag is cut in the message */
    static const char *const longtag[] = {
        "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz", NULL};
    const toolhost_tool t6[] = {TAGGED("a", longtag)};
    expect_refused(t6, "built-in plugin 'tg': tool 'a' has an invalid tag "
                       "'abcdefghijklmnopqrstuvwxyz0123456789abcd' (allowed: "
                       "^[a-z0-9][a-z0-9_-]{0,31}$)");
}

/* A plugin of 1.4 (its toolhost_tool ends before `tags`) has none, and
 * the host reads nothing past its struct_size: here the member holds a
 * bad pointer the host must not follow. */
static void test_older_struct(void)
{
    toolhost_tool t[1] = {TAGGED("a", (const char *const *)(uintptr_t)8)};
    size_t old = offsetof(toolhost_tool, tags);
    /* the stride must stay aligned: a 1.4 tool is a whole number of
     * pointers long */
    CU_ASSERT_EQUAL(old % alignof(toolhost_tool), 0);
    t[0].struct_size = (uint32_t)old;
    toolhost_plugin d = {.struct_size = sizeof d,
                         .abi_major = TOOLHOST_ABI_MAJOR,
                         .abi_minor = 4,
                         .name = "old",
                         .version = "1",
                         .description = "Older",
                         .tools = t,
                         .n_tools = 1};
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_plugin_builtin(&d, &p, &e), 0);
    CU_ASSERT_EQUAL(p->tools[0].n_tags, 0);
    th_plugin_unref(p);
}

/* The plugin built against the frozen 1.4 header loads and runs. */
static void test_frozen14(void)
{
    th_plugin *p;
    th_error e;
    static const th_load_opts insecure = {.allow_insecure = true};
    CU_ASSERT_EQUAL_FATAL(
        th_plugin_open(th_test_build_path("fixtures/abi14f_basic.so"),
                       &insecure, &p, &e), 0);
    CU_ASSERT_EQUAL(p->abi_minor, 4);
    CU_ASSERT_EQUAL_FATAL(p->n_tools, 1);
    CU_ASSERT_STRING_EQUAL(p->tools[0].name, "a14_hello");
    CU_ASSERT_EQUAL(p->tools[0].n_tags, 0);
    CU_ASSERT(p->desc->tools[0].struct_size <= offsetof(toolhost_tool, tags));
    th_plugin_unref(p);
}

/* An isolated plugin's tools cross the worker's wire: the tags too. */
static void test_wire(void)
{
    static const char *const two[] = {"files", "writes", NULL};
    const toolhost_tool tools[] = {TAGGED("w", two), TAGGED("n", NULL)};
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(load(tools, 2, &p, &e), 0);
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    CU_ASSERT_EQUAL(th_iso_pack_tools(&pk, p, 0), 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    CU_ASSERT_EQUAL_FATAL(msgpack_unpack_next(&u, (const char *)b.data, b.len,
                                              &off), MSGPACK_UNPACK_SUCCESS);
    CU_ASSERT_EQUAL_FATAL(u.data.via.array.size, 2);
    const msgpack_object_array *w = &u.data.via.array.ptr[0].via.array;
    CU_ASSERT_EQUAL_FATAL(w->size, 13);
    CU_ASSERT_EQUAL_FATAL(w->ptr[12].type, MSGPACK_OBJECT_ARRAY);
    CU_ASSERT_EQUAL(w->ptr[12].via.array.size, 2);
    const msgpack_object_array *n = &u.data.via.array.ptr[1].via.array;
    CU_ASSERT_EQUAL(n->ptr[12].type, MSGPACK_OBJECT_NIL);
    msgpack_unpacked_destroy(&u);
    th_buf_destroy(&b);
    th_plugin_unref(p);
}

/* A toolset's `tags:` select by the plugin's tags and the config's. */
static void test_toolset(void)
{
    static const char *const ro[] = {"files", "read-only", NULL};
    static const char *const wr[] = {"files", "writes", NULL};
    const toolhost_tool tools[] = {TAGGED("t_read", ro), TAGGED("t_write", wr),
                                   TAGGED("t_plain", NULL),
                                   TAGGED("t_other", NULL)};
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(load(tools, 4, &p, &e), 0);
    const char *yaml = "tags:\n"
                       "  - name: extra\n"
                       "    tools: [t_plain]\n"
                       "toolsets:\n"
                       "  - name: mixed\n"
                       "    tags: [read-only, extra]\n"
                       "  - name: files\n"
                       "    tags: [files]\n";
    th_config *cfg;
    CU_ASSERT_EQUAL_FATAL(th_config_parse("t.yaml", "/", yaml, strlen(yaml),
                                          &cfg, &e), 0);
    static th_host h; /* no built-ins: membership by name and tag only */
    const th_toolset_cfg *mixed = &cfg->toolsets[0], *files = &cfg->toolsets[1];
    CU_ASSERT_TRUE(th_host_toolset_has(&h, mixed, &p->tools[0]));
    CU_ASSERT_FALSE(th_host_toolset_has(&h, mixed, &p->tools[1]));
    CU_ASSERT_TRUE(th_host_toolset_has(&h, mixed, &p->tools[2]));
    CU_ASSERT_FALSE(th_host_toolset_has(&h, mixed, &p->tools[3]));
    CU_ASSERT_TRUE(th_host_toolset_has(&h, files, &p->tools[0]));
    CU_ASSERT_TRUE(th_host_toolset_has(&h, files, &p->tools[1]));
    CU_ASSERT_FALSE(th_host_toolset_has(&h, files, &p->tools[2]));
    th_config_free(cfg);
    th_plugin_unref(p);
}

void th_suite_tags(void)
{
    CU_pSuite s = CU_add_suite("tags", NULL, NULL);
    CU_add_test(s, "names", test_names);
    CU_add_test(s, "loaded", test_loaded);
    CU_add_test(s, "refused", test_refused);
    CU_add_test(s, "older_struct", test_older_struct);
    CU_add_test(s, "frozen14", test_frozen14);
    CU_add_test(s, "wire", test_wire);
    CU_add_test(s, "toolset", test_toolset);
}
