/* test_schema.c - parameter JSON Schemas, detailed descriptions, exports
 * (checked for shape and validated with python3-jsonschema against the
 * Draft 2020-12 and Draft 7 meta-schemas) and the tools.list entry. */
#include <CUnit/CUnit.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"
#include "th/json.h"
#include "th/schema.h"

/* ---- tools built by hand ------------------------------------------------ */

static uint8_t *mp_default(const char *json, size_t *len)
{
    json_t *j = json_loads(json, JSON_DECODE_ANY, NULL);
    th_buf b = TH_BUF_INIT;
    th_json_to_msgpack(j, &b);
    json_decref(j);
    return th_buf_take(&b, len);
}

static char *enc_vals[] = {"utf-8", "latin-1"};

static th_param fs_params[8];
static th_tool fs_read, echo, rm_tool;

static void build_tools(void)
{
    memset(fs_params, 0, sizeof fs_params);
    th_param *p = fs_params;
    p[0] = (th_param){"path", "The file to read.", TOOLHOST_TYPE_STRING, 0,
                      true, NULL, 0, NULL, 0};
    p[1] = (th_param){"offset", "First line to read (0-based).",
                      TOOLHOST_TYPE_INTEGER, 0, false, NULL, 0, NULL, 0};
    p[1].default_mp = mp_default("0", &p[1].default_len);
    p[2] = (th_param){"encoding", "Text encoding.", TOOLHOST_TYPE_STRING, 0,
                      false, enc_vals, 2, NULL, 0};
    p[2].default_mp = mp_default("\"utf-8\"", &p[2].default_len);
    p[3] = (th_param){"tags", "Labels.", TOOLHOST_TYPE_ARRAY,
                      TOOLHOST_TYPE_STRING, false, NULL, 0, NULL, 0};
    p[4] = (th_param){"opts", "Extra options.", TOOLHOST_TYPE_OBJECT, 0,
                      false, NULL, 0, NULL, 0};
    p[5] = (th_param){"ratio", "A fraction.", TOOLHOST_TYPE_NUMBER, 0, false,
                      NULL, 0, NULL, 0};
    p[5].default_mp = mp_default("0.5", &p[5].default_len);
    p[6] = (th_param){"follow", "Follow symlinks.", TOOLHOST_TYPE_BOOLEAN, 0,
                      false, NULL, 0, NULL, 0};
    p[6].default_mp = mp_default("true", &p[6].default_len);
    p[7] = (th_param){"any", "Anything in a list.", TOOLHOST_TYPE_ARRAY, 0,
                      false, NULL, 0, NULL, 0};

    memset(&fs_read, 0, sizeof fs_read);
    fs_read.name = "fs_read";
    fs_read.description = "Read a text file.";
    fs_read.long_description =
        "\n\nReads lines of a file.   \n"
        "## Important\n"
        "Paths are relative to the workspace.\n\n\n\n"
        "## When to use\r\n"
        "Use it to look at code.\n"
        "## Examples\n"
        "fs_read path=README.md\n\n";
    fs_read.params = fs_params;
    fs_read.n_params = 8;
    fs_read.stdout_type = TOOLHOST_SEM_FILE_CONTENT;
    fs_read.stderr_type = TOOLHOST_SEM_ERROR;
    fs_read.flags = TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT;

    memset(&echo, 0, sizeof echo);
    echo.name = "echo";
    echo.description = "Say it back.";
    echo.stdout_type = TOOLHOST_SEM_TEXT;
    echo.stderr_type = TOOLHOST_SEM_ERROR;

    /* a long description well past OpenAI's 1024 characters */
    static char longd[4000];
    longd[0] = '\0';
    strcat(longd, "Removes files.\n\n## Important\n");
    for (int i = 0; i < 12; i++)
        strcat(longd, "This paragraph is repeated to make the description "
                      "long; \xc3\xa9\xc3\xa9\xc3\xa9 every one of them "
                      "says the same.\n\n");
    strcat(longd, "## Examples\nrm path=x\n");
    memset(&rm_tool, 0, sizeof rm_tool);
    rm_tool.name = "rm";
    rm_tool.description = "Delete a file.";
    rm_tool.long_description = longd;
    rm_tool.params = fs_params; /* path only */
    rm_tool.n_params = 1;
    rm_tool.stdout_type = TOOLHOST_SEM_STATUS;
    rm_tool.stderr_type = TOOLHOST_SEM_ERROR;
    rm_tool.flags = TOOLHOST_TOOL_DESTRUCTIVE;
}

static int suite_init(void)
{
    build_tools();
    return 0;
}

static int suite_clean(void)
{
    for (int i = 0; i < 8; i++)
        free(fs_params[i].default_mp);
    return 0;
}

static char *dump(const json_t *j)
{
    return json_dumps(j, JSON_COMPACT);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_params_schema(void)
{
    json_t *s = th_schema_params(&fs_read);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    char *t = dump(s);
    CU_ASSERT_STRING_EQUAL(
        t,
        "{\"type\":\"object\",\"properties\":{"
        "\"path\":{\"type\":\"string\",\"description\":\"The file to read.\"},"
        "\"offset\":{\"type\":\"integer\",\"description\":\"First line to "
        "read (0-based).\",\"default\":0},"
        "\"encoding\":{\"type\":\"string\",\"description\":\"Text encoding.\","
        "\"enum\":[\"utf-8\",\"latin-1\"],\"default\":\"utf-8\"},"
        "\"tags\":{\"type\":\"array\",\"description\":\"Labels.\",\"items\":"
        "{\"type\":\"string\"}},"
        "\"opts\":{\"type\":\"object\",\"description\":\"Extra options.\"},"
        "\"ratio\":{\"type\":\"number\",\"description\":\"A fraction.\","
        "\"default\":0.5},"
        "\"follow\":{\"type\":\"boolean\",\"description\":\"Follow "
        "symlinks.\",\"default\":true},"
        "\"any\":{\"type\":\"array\",\"description\":\"Anything in a "
        "list.\"}},"
        "\"required\":[\"path\"],\"additionalProperties\":false}");
    free(t);
    json_decref(s);

    /* no parameters: no "required" */
    s = th_schema_params(&echo);
    t = dump(s);
    CU_ASSERT_STRING_EQUAL(t, "{\"type\":\"object\",\"properties\":{},"
                              "\"additionalProperties\":false}");
    free(t);
    json_decref(s);
}

static void test_describe(void)
{
    char *d = th_schema_describe(&fs_read);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_STRING_EQUAL(
        d,
        "# fs_read\n\n"
        "Read a text file.\n\n"
        "Reads lines of a file.\n\n"
        "## Important\n"
        "Paths are relative to the workspace.\n\n"
        "## When to use\n"
        "Use it to look at code.\n\n"
        "## Examples\n"
        "fs_read path=README.md\n\n"
        "## Parameters\n\n"
        "- `path` (string, required): The file to read.\n"
        "- `offset` (integer, optional; default 0): First line to read "
        "(0-based).\n"
        "- `encoding` (string, optional; one of \"utf-8\", \"latin-1\"; "
        "default \"utf-8\"): Text encoding.\n"
        "- `tags` (array of string, optional): Labels.\n"
        "- `opts` (object, optional): Extra options.\n"
        "- `ratio` (number, optional; default 0.5): A fraction.\n"
        "- `follow` (boolean, optional; default true): Follow symlinks.\n"
        "- `any` (array, optional): Anything in a list.\n\n"
        "## Output\n\n"
        "stdout: file_content; stderr: error.\n"
        "Flags: read_only, idempotent.\n");
    free(d);

    d = th_schema_describe(&echo);
    CU_ASSERT_STRING_EQUAL(d, "# echo\n\nSay it back.\n\n## Parameters\n\n"
                              "None.\n\n## Output\n\nstdout: text; stderr: "
                              "error.\n");
    free(d);
}

static size_t chars(const char *s)
{
    size_t c = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            c++;
    return c;
}

static void test_description(void)
{
    char *d = th_schema_description(&fs_read, 0);
    CU_ASSERT_STRING_EQUAL(d, "Read a text file.\n\nReads lines of a file.\n\n"
                              "## Important\nPaths are relative to the "
                              "workspace.\n\n## When to use\nUse it to look "
                              "at code.\n\n## Examples\nfs_read "
                              "path=README.md");
    free(d);
    d = th_schema_description(&echo, 5);
    CU_ASSERT_STRING_EQUAL(d, "Say i");
    free(d);

    /* within 1024 characters, whole paragraphs, no dangling heading */
    d = th_schema_description(&rm_tool, TH_SCHEMA_OPENAI_DESC_MAX);
    size_t n = chars(d);
    CU_ASSERT_TRUE(n <= 1024);
    CU_ASSERT_TRUE(n > 800);
    CU_ASSERT_EQUAL(strncmp(d, "Delete a file.\n\nRemoves files.\n\n"
                               "## Important\nThis paragraph",
                            56),
                    0);
    CU_ASSERT_PTR_NULL(strstr(d, "## Examples"));
    CU_ASSERT_EQUAL(strcmp(d + strlen(d) - 6, "same.\n") == 0 ||
                        strcmp(d + strlen(d) - 5, "same.") == 0,
                    1);
    free(d);
    d = th_schema_description(&rm_tool, 0);
    CU_ASSERT_TRUE(chars(d) > 1024);
    CU_ASSERT_PTR_NOT_NULL(strstr(d, "## Examples\nrm path=x"));
    free(d);
}

static void test_export_shapes(void)
{
    const th_tool *tools[] = {&rm_tool, &fs_read, &echo};
    th_error err;
    json_t *oa = th_schema_export(tools, 3, TH_EXPORT_OPENAI, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(oa);
    CU_ASSERT_EQUAL(json_array_size(oa), 3);
    static const char *order[] = {"echo", "fs_read", "rm"};
    for (size_t i = 0; i < 3; i++) {
        json_t *t = json_array_get(oa, i);
        CU_ASSERT_EQUAL(json_object_size(t), 2);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(t, "type")),
                               "function");
        json_t *f = json_object_get(t, "function");
        CU_ASSERT_EQUAL(json_object_size(f), 3);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(f, "name")),
                               order[i]);
        CU_ASSERT_TRUE(json_is_string(json_object_get(f, "description")));
        CU_ASSERT_TRUE(chars(json_string_value(
                           json_object_get(f, "description"))) <= 1024);
        json_t *p = json_object_get(f, "parameters");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "type")),
                               "object");
        CU_ASSERT_TRUE(json_is_false(
            json_object_get(p, "additionalProperties")));
    }
    json_decref(oa);

    json_t *an = th_schema_export(tools, 3, TH_EXPORT_ANTHROPIC, &err);
    CU_ASSERT_EQUAL(json_array_size(an), 3);
    json_t *t1 = json_array_get(an, 1);
    CU_ASSERT_EQUAL(json_object_size(t1), 3);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(t1, "name")),
                           "fs_read");
    json_t *ps = th_schema_params(&fs_read);
    CU_ASSERT_TRUE(json_equal(json_object_get(t1, "input_schema"), ps));
    /* anthropic keeps the whole long description */
    CU_ASSERT_TRUE(chars(json_string_value(json_object_get(
                       json_array_get(an, 2), "description"))) > 1024);
    json_decref(an);

    json_t *js = th_schema_export(tools, 3, TH_EXPORT_JSONSCHEMA, &err);
    CU_ASSERT_EQUAL(json_object_size(js), 3);
    json_t *s = json_object_get(js, "fs_read");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(s, "$schema")),
                           "https://json-schema.org/draft/2020-12/schema");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(s, "title")),
                           "fs_read");
    CU_ASSERT_TRUE(json_equal(json_object_get(s, "properties"),
                              json_object_get(ps, "properties")));
    const char *k;
    json_t *v;
    size_t i = 0;
    json_object_foreach(js, k, v) CU_ASSERT_STRING_EQUAL(k, order[i++]);
    json_decref(js);
    json_decref(ps);

    /* text form: stable, ends in a newline, parses */
    char *a = th_schema_export_text(tools, 3, TH_EXPORT_OPENAI, &err);
    const th_tool *rev[] = {&echo, &fs_read, &rm_tool};
    char *b = th_schema_export_text(rev, 3, TH_EXPORT_OPENAI, &err);
    CU_ASSERT_STRING_EQUAL(a, b);
    CU_ASSERT_EQUAL(a[strlen(a) - 1], '\n');
    json_t *back = json_loads(a, 0, NULL);
    CU_ASSERT_TRUE(json_is_array(back));
    json_decref(back);
    free(a);
    free(b);

    /* empty list, unknown format */
    char *e = th_schema_export_text(NULL, 0, TH_EXPORT_ANTHROPIC, &err);
    CU_ASSERT_STRING_EQUAL(e, "[]\n");
    free(e);
    CU_ASSERT_PTR_NULL(th_schema_export(tools, 3, 99, &err));
    CU_ASSERT_EQUAL(err.code, TH_EINVAL);
    CU_ASSERT_EQUAL(th_export_format_from_name("openai"), TH_EXPORT_OPENAI);
    CU_ASSERT_EQUAL(th_export_format_from_name("anthropic"),
                    TH_EXPORT_ANTHROPIC);
    CU_ASSERT_EQUAL(th_export_format_from_name("jsonschema"),
                    TH_EXPORT_JSONSCHEMA);
    CU_ASSERT_EQUAL(th_export_format_from_name("gemini"), TH_EXPORT_GEMINI);
    CU_ASSERT_EQUAL(th_export_format_from_name("palm"), 0);
    CU_ASSERT_STRING_EQUAL(th_export_format_name(TH_EXPORT_OPENAI), "openai");
}

static const char validator[] =
    "import json, sys, jsonschema\n"
    "from jsonschema import Draft202012Validator as D12, Draft7Validator as "
    "D7\n"
    "def check(s):\n"
    "    D12.check_schema(s)\n"
    "    D7.check_schema(s)\n"
    "    assert s['type'] == 'object' and s['additionalProperties'] is False\n"
    "    for p, ps in s['properties'].items():\n"
    "        if 'default' in ps:\n"
    "            D12(ps).validate(ps['default'])\n"
    "js = json.load(open(sys.argv[1]))\n"
    "assert list(js) == sorted(js)\n"
    "for name, s in js.items():\n"
    "    assert s['title'] == name\n"
    "    check(s)\n"
    "oa = json.load(open(sys.argv[2]))\n"
    "for t in oa:\n"
    "    assert set(t) == {'type', 'function'} and t['type'] == 'function'\n"
    "    f = t['function']\n"
    "    assert set(f) == {'name', 'description', 'parameters'}\n"
    "    assert len(f['description']) <= 1024\n"
    "    check(f['parameters'])\n"
    "an = json.load(open(sys.argv[3]))\n"
    "for t in an:\n"
    "    assert set(t) == {'name', 'description', 'input_schema'}\n"
    "    check(t['input_schema'])\n"
    "s = js['fs_read']\n"
    "D12(s).validate({'path': 'a', 'offset': 3, 'encoding': 'utf-8',\n"
    "                 'tags': ['x'], 'opts': {}, 'ratio': 1, 'any': [1, 'a']})\n"
    "for bad in ({}, {'path': 1}, {'path': 'a', 'nope': 1},\n"
    "            {'path': 'a', 'encoding': 'ebcdic'}, {'path': 'a', 'tags': "
    "[1]},\n"
    "            {'path': 'a', 'offset': 1.5}, {'path': 'a', 'follow': 'y'}):\n"
    "    for V in (D12, D7):\n"
    "        if V(s).is_valid(bad):\n"
    "            sys.exit('accepted %r' % (bad,))\n"
    "print('OK', len(js), len(oa), len(an))\n";

static void test_validate_with_jsonschema(void)
{
    const th_tool *tools[] = {&rm_tool, &fs_read, &echo};
    th_error err;
    char *dir = th_test_tmpdir();
    char *js = th_schema_export_text(tools, 3, TH_EXPORT_JSONSCHEMA, &err);
    char *oa = th_schema_export_text(tools, 3, TH_EXPORT_OPENAI, &err);
    char *an = th_schema_export_text(tools, 3, TH_EXPORT_ANTHROPIC, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(js);
    CU_ASSERT_PTR_NOT_NULL_FATAL(oa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(an);
    char *f1 = th_test_write_file(dir, "js.json", js, (size_t)-1);
    char *f2 = th_test_write_file(dir, "oa.json", oa, (size_t)-1);
    char *f3 = th_test_write_file(dir, "an.json", an, (size_t)-1);
    char *argv[] = {"/usr/bin/python3", "-c", (char *)validator, f1, f2, f3,
                    NULL};
    th_test_run r;
    CU_ASSERT_EQUAL_FATAL(th_test_run_argv(argv, NULL, 60, 0, &r), 0);
    if (r.status != 0 || strcmp(r.out, "OK 3 3 3\n") != 0)
        fprintf(stderr, "\nvalidator: status %d\n%s%s\n", r.status, r.out,
                r.err);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "OK 3 3 3\n");
    th_test_run_free(&r);

    /* the validator can fail: a schema that is not one */
    char *broken = th_test_write_file(
        dir, "bad.json", "{\"x\": {\"type\": \"object\", \"properties\": 5, "
                         "\"additionalProperties\": false, \"title\": \"x\"}}",
        (size_t)-1);
    char *argv2[] = {"/usr/bin/python3", "-c", (char *)validator, broken, f2,
                     f3, NULL};
    CU_ASSERT_EQUAL_FATAL(th_test_run_argv(argv2, NULL, 60, 0, &r), 0);
    CU_ASSERT_NOT_EQUAL(r.status, 0);
    th_test_run_free(&r);

    free(js);
    free(oa);
    free(an);
    free(f1);
    free(f2);
    free(f3);
    free(broken);
    th_test_rmtree(dir);
    free(dir);
}

static void test_pack_tool(void)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    CU_ASSERT_EQUAL(th_schema_pack_tool(&pk, &fs_read), 0);
    CU_ASSERT_EQUAL(th_schema_pack_tool(&pk, &echo), 0);
    size_t off = 0;
    json_t *t = th_json_from_msgpack(b.data, b.len, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    char *s = json_dumps(t, JSON_COMPACT);
    CU_ASSERT_EQUAL(strncmp(s, "{\"name\":\"fs_read\",\"description\":\"Read "
                               "a text file.\",\"long_description\":\"",
                            68),
                    0);
    free(s);
    json_t *ps = th_schema_params(&fs_read);
    CU_ASSERT_TRUE(json_equal(json_object_get(t, "parameters"), ps));
    json_decref(ps);
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(t, "stdout_type")), "file_content");
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(t, "stderr_type")), "error");
    s = json_dumps(json_object_get(t, "flags"), JSON_COMPACT);
    CU_ASSERT_STRING_EQUAL(s, "[\"read_only\",\"idempotent\"]");
    free(s);
    json_decref(t);

    /* the second entry: no long description (nil), no flags */
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    CU_ASSERT_EQUAL(msgpack_unpack_next(&up, (char *)b.data, b.len, &off),
                    MSGPACK_UNPACK_SUCCESS);
    CU_ASSERT_EQUAL(msgpack_unpack_next(&up, (char *)b.data, b.len, &off),
                    MSGPACK_UNPACK_SUCCESS);
    CU_ASSERT_EQUAL(off, b.len);
    t = th_json_from_object(&up.data, NULL);
    s = json_dumps(t, JSON_COMPACT);
    CU_ASSERT_STRING_EQUAL(
        s, "{\"name\":\"echo\",\"description\":\"Say it back.\","
           "\"long_description\":null,\"parameters\":{\"type\":\"object\","
           "\"properties\":{},\"additionalProperties\":false},"
           "\"stdout_type\":\"text\",\"stderr_type\":\"error\",\"flags\":[]}");
    free(s);
    json_decref(t);
    msgpack_unpacked_destroy(&up);
    th_buf_destroy(&b);
}

/* The real loader's th_tools (flood fixture): parameters with defaults
 * and enums normalized by th_params_from_abi, then exported. */
static void test_from_loader(void)
{
    th_plugin *p = NULL;
    th_error err;
    th_load_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.allow_insecure = true; /* build dirs may be group-writable */
    int rc = th_plugin_open(th_test_build_path("fixtures/flood.so"), &opts,
                            &p, &err);
    if (rc != 0)
        fprintf(stderr, "\n%s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    const th_tool **tools = calloc(p->n_tools, sizeof *tools);
    for (size_t i = 0; i < p->n_tools; i++)
        tools[i] = &p->tools[i];
    json_t *js = th_schema_export(tools, p->n_tools, TH_EXPORT_JSONSCHEMA,
                                  &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(js);
    CU_ASSERT_EQUAL(json_object_size(js), p->n_tools);
    json_t *props =
        json_object_get(json_object_get(js, "flood_json"), "properties");
    char *t = json_dumps(props, JSON_COMPACT);
    CU_ASSERT_STRING_EQUAL(
        t, "{\"size\":{\"type\":\"integer\",\"description\":\"Bytes to write "
           "in all.\",\"default\":1048576},\"chunk\":{\"type\":\"integer\","
           "\"description\":\"Bytes per write call (1 for one byte at a "
           "time).\",\"default\":4096},\"pattern\":{\"type\":\"string\","
           "\"description\":\"What to write.\",\"enum\":[\"ascii\",\"lines\","
           "\"utf8\",\"invalid_utf8\",\"json\",\"binary\"],\"default\":"
           "\"lines\"},\"stream\":{\"type\":\"string\",\"description\":"
           "\"Which output stream to flood.\",\"enum\":[\"stdout\","
           "\"stderr\"],\"default\":\"stdout\"}}");
    free(t);
    const char *k;
    json_t *v;
    int n = 0;
    json_object_foreach(js, k, v)
    {
        CU_ASSERT_EQUAL(strncmp(k, "flood_", 6), 0);
        CU_ASSERT_PTR_NULL(json_object_get(v, "required"));
        n++;
    }
    CU_ASSERT_EQUAL(n, 6);
    json_decref(js);
    char *d = th_schema_describe(tools[0]);
    CU_ASSERT_PTR_NOT_NULL(strstr(d, "- `pattern` (string, optional; one of "
                                     "\"ascii\", \"lines\", \"utf8\", "
                                     "\"invalid_utf8\", \"json\", \"binary\"; "
                                     "default \"lines\"): What to write.\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(d, "Flags: read_only.\n"));
    free(d);
    free(tools);
    th_plugin_unref(p);
}

/* ABI 1.1: bounds and the other constraints, title and output_schema
 * reach the exports and the tools.list entry. */
static int rows_run(void *state, const toolhost_tool *tool,
                    toolhost_call *call, const uint8_t *args, size_t len)
{
    (void)state, (void)tool, (void)call, (void)args, (void)len;
    return TOOLHOST_OK;
}

static void test_abi11_export(void)
{
    static toolhost_param ps[3];
    memset(ps, 0, sizeof ps);
    for (int i = 0; i < 3; i++)
        ps[i].struct_size = sizeof ps[i];
    ps[0].name = "limit";
    ps[0].type = TOOLHOST_TYPE_INTEGER;
    ps[0].description = "Rows to return.";
    ps[0].bounds = TOOLHOST_BOUND_MINIMUM | TOOLHOST_BOUND_MAXIMUM;
    ps[0].minimum = 1;
    ps[0].maximum = 1000;
    ps[1].name = "name";
    ps[1].type = TOOLHOST_TYPE_STRING;
    ps[1].description = "A name.";
    ps[1].max_length = 8;
    ps[1].pattern = "^[a-z]";
    ps[2].name = "filter";
    ps[2].type = TOOLHOST_TYPE_OBJECT;
    ps[2].description = "Filter.";
    ps[2].schema_json = "{\"type\":\"object\",\"properties\":{\"since\":"
                        "{\"type\":\"integer\"}},\"required\":[\"since\"]}";
    static toolhost_tool tools[1];
    memset(tools, 0, sizeof tools);
    tools[0].struct_size = sizeof tools[0];
    tools[0].name = "rows_list";
    tools[0].description = "List rows.";
    tools[0].params = ps;
    tools[0].n_params = 3;
    tools[0].stdout_type = TOOLHOST_SEM_STRUCTURED;
    tools[0].stderr_type = TOOLHOST_SEM_ERROR;
    tools[0].execute = rows_run;
    tools[0].title = "List rows";
    tools[0].output_schema = "{\"type\":\"object\",\"properties\":{\"rows\":"
                             "{\"type\":\"array\"}}}";
    static toolhost_plugin d;
    memset(&d, 0, sizeof d);
    d = (toolhost_plugin){sizeof d, TOOLHOST_ABI_MAJOR, TOOLHOST_ABI_MINOR,
                          "rows", "1", "Rows", NULL, 0, NULL, NULL, tools, 1};
    th_plugin *p;
    th_error err;
    CU_ASSERT_EQUAL_FATAL(th_plugin_builtin(&d, &p, &err), 0);
    const th_tool *t = &p->tools[0];
    json_t *js = th_schema_export(&t, 1, TH_EXPORT_JSONSCHEMA, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(js);
    json_t *one = json_object_get(js, "rows_list");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(one, "title")),
                           "List rows");
    char *txt = json_dumps(json_object_get(one, "properties"), JSON_COMPACT);
    CU_ASSERT_STRING_EQUAL(
        txt, "{\"limit\":{\"type\":\"integer\",\"description\":\"Rows to "
             "return.\",\"minimum\":1,\"maximum\":1000},\"name\":{\"type\":"
             "\"string\",\"description\":\"A name.\",\"maxLength\":8,"
             "\"pattern\":\"^[a-z]\"},\"filter\":{\"type\":\"object\","
             "\"properties\":{\"since\":{\"type\":\"integer\"}},\"required\":"
             "[\"since\"],\"description\":\"Filter.\"}}");
    free(txt);
    txt = json_dumps(json_object_get(one, "outputSchema"), JSON_COMPACT);
    CU_ASSERT_STRING_EQUAL(txt, "{\"type\":\"object\",\"properties\":{"
                                "\"rows\":{\"type\":\"array\"}}}");
    free(txt);
    json_decref(js);
    /* OpenAI and Anthropic carry the bounds in the parameters too. */
    js = th_schema_export(&t, 1, TH_EXPORT_OPENAI, &err);
    json_t *lim = json_object_get(
        json_object_get(json_object_get(json_object_get(json_array_get(js, 0),
                                                        "function"),
                                        "parameters"),
                        "properties"),
        "limit");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(lim, "minimum")), 1);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(lim, "maximum")), 1000);
    json_decref(js);
    /* tools.list: title and output_schema keys. */
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    CU_ASSERT_EQUAL(th_schema_pack_tool(&pk, t), 0);
    json_t *entry = th_json_from_msgpack(b.data, b.len, NULL);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(entry, "title")),
                           "List rows");
    CU_ASSERT_TRUE(json_is_object(json_object_get(entry, "output_schema")));
    json_decref(entry);
    th_buf_destroy(&b);
    th_plugin_unref(p);
}

void th_suite_schema(void)
{
    CU_pSuite s = CU_add_suite("schema", suite_init, suite_clean);
    CU_add_test(s, "params_schema", test_params_schema);
    CU_add_test(s, "describe", test_describe);
    CU_add_test(s, "description", test_description);
    CU_add_test(s, "export_shapes", test_export_shapes);
    CU_add_test(s, "validate_with_jsonschema", test_validate_with_jsonschema);
    CU_add_test(s, "pack_tool", test_pack_tool);
    CU_add_test(s, "from_loader", test_from_loader);
    CU_add_test(s, "abi11_export", test_abi11_export);
}
