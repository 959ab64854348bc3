/* test_projection.c - the projection layer: docs from th_tools, Lua naming,
 * collisions and bad names, and a second language reusing the layer. */
#include <CUnit/CUnit.h>
#include <msgpack.h>
#include <string.h>

#include "th/code.h"
#include "th/projection.h"
#include "th/tool.h"

static int no_call(void *ud, const char *tool, const uint8_t *args,
                   size_t len, int64_t timeout_ms, th_proj_progress_fn pf,
                   void *pud, th_proj_result *out)
{
    (void)ud, (void)tool, (void)args, (void)len, (void)timeout_ms, (void)pf,
        (void)pud, (void)out;
    return TH_EINTERNAL;
}

static const th_proj_caller caller = {no_call, NULL};

static th_tool make_tool(const char *name, const char *desc, th_param *params,
                         size_t n)
{
    th_tool t;
    memset(&t, 0, sizeof t);
    t.name = (char *)name;
    t.description = (char *)desc;
    t.params = params;
    t.n_params = n;
    t.stdout_type = TOOLHOST_SEM_TEXT;
    t.stderr_type = TOOLHOST_SEM_ERROR;
    return t;
}

static void test_doc_from_tool(void)
{
    static char *modes[] = {"fast", "slow"};
    uint8_t def[1] = {0x03}; /* msgpack 3 */
    th_param params[3];
    memset(params, 0, sizeof params);
    params[0].name = "text";
    params[0].description = "the text to echo";
    params[0].type = TOOLHOST_TYPE_STRING;
    params[0].required = true;
    params[1].name = "count";
    params[1].description = "how many times";
    params[1].type = TOOLHOST_TYPE_INTEGER;
    params[1].default_mp = def;
    params[1].default_len = 1;
    params[2].name = "mode";
    params[2].description = "how";
    params[2].type = TOOLHOST_TYPE_STRING;
    params[2].enum_values = modes;
    params[2].n_enum = 2;
    th_tool t = make_tool("my-echo", "Echoes text.", params, 3);
    t.flags = TOOLHOST_TOOL_READ_ONLY;

    th_projection *p = th_projection_new(&th_code_lua_lang, &caller);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    th_error e;
    CU_ASSERT_EQUAL(th_projection_add(p, &t, &e), 0);
    CU_ASSERT_EQUAL(th_projection_check(p, &e), 0);
    const th_proj_tool *pt = th_projection_find(p, "my_echo");
    CU_ASSERT_PTR_NOT_NULL_FATAL(pt);
    CU_ASSERT_STRING_EQUAL(pt->name, "my-echo");
    CU_ASSERT_STRING_EQUAL(pt->signature,
                           "my_echo{text: string, count?: integer, "
                           "mode?: string}");
    CU_ASSERT_PTR_NOT_NULL(strstr(pt->doc, "my_echo - Echoes text."));
    CU_ASSERT_PTR_NOT_NULL(strstr(pt->doc, "Host tool name: my-echo"));
    CU_ASSERT_PTR_NOT_NULL(strstr(pt->doc, "Flags: read-only"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(pt->doc, "text (string, required): the text to echo"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(pt->doc, "count (integer, optional, default 3): how many"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(pt->doc, "mode (string, optional, one of \"fast\", \"slow\")"));
    CU_ASSERT_EQUAL(pt->n_params, 3);
    CU_ASSERT_EQUAL(pt->params[1].type, TOOLHOST_TYPE_INTEGER);
    CU_ASSERT_PTR_NULL(th_projection_find(p, "my-echo"));
    th_projection_free(p);
}

static void test_collision(void)
{
    th_tool a = make_tool("read-file", "A.", NULL, 0);
    th_tool b = make_tool("read_file", "B.", NULL, 0);
    th_projection *p = th_projection_new(&th_code_lua_lang, &caller);
    th_error e;
    CU_ASSERT_EQUAL(th_projection_add(p, &a, &e), 0);
    CU_ASSERT_EQUAL(th_projection_add(p, &b, &e), 0);
    CU_ASSERT_EQUAL(th_projection_check(p, &e), TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "'read-file' and 'read_file'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "both become 'read_file' in Lua"));
    th_projection_free(p);

    p = th_projection_new(&th_code_lua_lang, &caller);
    CU_ASSERT_EQUAL(th_projection_add(p, &a, &e), 0);
    CU_ASSERT_EQUAL(th_projection_add(p, &a, &e), 0);
    CU_ASSERT_EQUAL(th_projection_check(p, &e), TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "projected twice"));
    th_projection_free(p);
}

static void test_bad_names(void)
{
    th_error e;
    /* a keyword */
    th_tool kw = make_tool("end", "K.", NULL, 0);
    th_projection *p = th_projection_new(&th_code_lua_lang, &caller);
    CU_ASSERT_EQUAL(th_projection_add(p, &kw, &e), 0);
    CU_ASSERT_EQUAL(th_projection_check(p, &e), TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "'end' is a Lua keyword"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "tool 'end'"));
    th_projection_free(p);

    /* a leading digit is mapped, not refused */
    th_tool dg = make_tool("3d-view", "D.", NULL, 0);
    p = th_projection_new(&th_code_lua_lang, &caller);
    CU_ASSERT_EQUAL(th_projection_add(p, &dg, &e), 0);
    CU_ASSERT_EQUAL(th_projection_check(p, &e), 0);
    CU_ASSERT_PTR_NOT_NULL(th_projection_find(p, "_3d_view"));
    th_projection_free(p);

    /* an explicit key that is not an identifier */
    p = th_projection_new(&th_code_lua_lang, &caller);
    CU_ASSERT_EQUAL(
        th_projection_add_raw(p, "two words", "x", "X.", NULL, 0, 0, &e), 0);
    CU_ASSERT_EQUAL(th_projection_check(p, &e), TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "as 'two words'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "found ' '"));
    th_projection_free(p);

    /* a key that does not match its tool's name */
    th_tool ok = make_tool("echo", "E.", NULL, 0);
    p = th_projection_new(&th_code_lua_lang, &caller);
    CU_ASSERT_EQUAL(th_projection_add(p, &ok, &e), 0);
    free(p->tools[0].key);
    p->tools[0].key = strdup("other");
    CU_ASSERT_EQUAL(th_projection_check(p, &e), TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "keyed 'other'"));
    th_projection_free(p);
}

/* A second language: only lower-case letters, '-' and '_' dropped. */
static int low_map(const char *tool, char *out, size_t size)
{
    size_t o = 0;
    for (const char *c = tool; *c; c++) {
        if (*c == '-' || *c == '_')
            continue;
        if (o + 1 >= size)
            return TH_EINVAL;
        out[o++] = *c;
    }
    out[o] = '\0';
    return o ? 0 : TH_EINVAL;
}

static bool low_valid(const char *s, char *why, size_t n)
{
    for (const char *c = s; *c; c++)
        if (*c < 'a' || *c > 'z') {
            snprintf(why, n, "only a-z");
            return false;
        }
    return true;
}

static const th_proj_lang low_lang = {"Low", low_map, low_valid};

static void test_other_language(void)
{
    th_tool a = make_tool("read-file", "A.", NULL, 0);
    th_tool b = make_tool("readfile", "B.", NULL, 0);
    th_tool c = make_tool("get2", "C.", NULL, 0);
    th_error e;
    th_projection *p = th_projection_new(&low_lang, &caller);
    CU_ASSERT_EQUAL(th_projection_add(p, &a, &e), 0);
    CU_ASSERT_EQUAL(th_projection_check(p, &e), 0);
    CU_ASSERT_PTR_NOT_NULL(th_projection_find(p, "readfile"));
    CU_ASSERT_EQUAL(th_projection_add(p, &b, &e), 0);
    CU_ASSERT_EQUAL(th_projection_check(p, &e), TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "both become 'readfile' in Low"));
    th_projection_free(p);
    p = th_projection_new(&low_lang, &caller);
    CU_ASSERT_EQUAL(th_projection_add(p, &c, &e), 0);
    CU_ASSERT_EQUAL(th_projection_check(p, &e), TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "only a-z"));
    th_projection_free(p);
}

static void test_code_filter(void)
{
    /* run_code and the task tools never enter a code projection */
    th_tool rc = make_tool("run_code", "R.", NULL, 0);
    th_tool gt = make_tool("get_running_tasks", "G.", NULL, 0);
    th_tool ct = make_tool("cancel_task", "C.", NULL, 0);
    th_tool ok = make_tool("echo", "E.", NULL, 0);
    th_error e;
    th_projection *p = th_projection_new(&th_code_lua_lang, &caller);
    CU_ASSERT_EQUAL(th_code_projection_add(p, &rc, &e), 0);
    CU_ASSERT_EQUAL(th_code_projection_add(p, &gt, &e), 0);
    CU_ASSERT_EQUAL(th_code_projection_add(p, &ct, &e), 0);
    CU_ASSERT_EQUAL(th_code_projection_add(p, &ok, &e), 0);
    CU_ASSERT_EQUAL(p->n_tools, 1);
    CU_ASSERT_PTR_NULL(th_projection_find(p, "run_code"));
    CU_ASSERT_PTR_NOT_NULL(th_projection_find(p, "echo"));
    th_projection_free(p);
}

static void test_lua_names(void)
{
    char out[80], why[80];
    CU_ASSERT_EQUAL(th_code_lua_lang.map_name("a-b-c", out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "a_b_c");
    CU_ASSERT_TRUE(th_code_lua_lang.valid_ident("_x9", why, sizeof why));
    CU_ASSERT_FALSE(th_code_lua_lang.valid_ident("9x", why, sizeof why));
    CU_ASSERT_FALSE(th_code_lua_lang.valid_ident("while", why, sizeof why));
    CU_ASSERT_FALSE(th_code_lua_lang.valid_ident("", why, sizeof why));
    CU_ASSERT_NOT_EQUAL(th_code_lua_lang.map_name("", out, sizeof out), 0);
}

void th_suite_projection(void)
{
    CU_pSuite s = CU_add_suite("projection", NULL, NULL);
    CU_add_test(s, "doc_from_tool", test_doc_from_tool);
    CU_add_test(s, "collision", test_collision);
    CU_add_test(s, "bad_names", test_bad_names);
    CU_add_test(s, "other_language", test_other_language);
    CU_add_test(s, "code_filter", test_code_filter);
    CU_add_test(s, "lua_names", test_lua_names);
}
