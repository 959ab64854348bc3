/* test_schema_export.c - the MCP tool entry, strict schemas, the
 * openai-responses and gemini shapes and descriptions fitted to 1,024 characters that
 * still name every tool of a "## Tools" section. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "th/schema.h"
#include "toolhost/plugin.h"

static void test_mcp_tool_entry(void)
{
    th_tool t;
    memset(&t, 0, sizeof t);
    t.name = "w";
    t.description = "Writes.";
    t.flags = TOOLHOST_TOOL_ASYNC | TOOLHOST_TOOL_DESTRUCTIVE;
    json_t *j = th_schema_mcp_tool(&t);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "name")), "w");
    json_t *a = json_object_get(j, "annotations");
    CU_ASSERT(json_is_false(json_object_get(a, "readOnlyHint")));
    CU_ASSERT(json_is_true(json_object_get(a, "destructiveHint")));
    CU_ASSERT(json_is_false(json_object_get(a, "idempotentHint")));
    CU_ASSERT(json_is_false(json_object_get(a, "openWorldHint")));
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_object_get(j, "execution"),
                                          "taskSupport")),
        "optional");
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_object_get(j, "inputSchema"),
                                          "type")),
        "object");
    json_decref(j);
}

static void test_strict(void)
{
    json_error_t e;
    json_t *in = json_loads(
        "{\"type\":\"object\",\"properties\":{"
        "\"a\":{\"type\":\"string\"},"
        "\"b\":{\"type\":\"integer\",\"default\":3,\"description\":\"B.\"},"
        "\"c\":{\"type\":\"string\",\"enum\":[\"x\",\"y\"]},"
        "\"d\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}}},"
        "\"required\":[\"a\"],\"additionalProperties\":false}",
        0, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(in);
    json_t *s = th_schema_strict(in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(s, "required")), 4);
    json_t *p = json_object_get(s, "properties");
    CU_ASSERT(json_is_string(json_object_get(json_object_get(p, "a"), "type")));
    json_t *bt = json_object_get(json_object_get(p, "b"), "type");
    CU_ASSERT(json_is_array(bt) && json_array_size(bt) == 2 &&
              json_is_string(json_array_get(bt, 1)) &&
              strcmp(json_string_value(json_array_get(bt, 1)), "null") == 0);
    CU_ASSERT_PTR_NULL(json_object_get(json_object_get(p, "b"), "default"));
    CU_ASSERT_PTR_NOT_NULL(strstr(
        json_string_value(json_object_get(json_object_get(p, "b"),
                                          "description")),
        "default 3"));
    json_t *ce = json_object_get(json_object_get(p, "c"), "enum");
    CU_ASSERT(json_is_null(json_array_get(ce, 2)));
    json_t *items = json_object_get(json_object_get(p, "d"), "items");
    CU_ASSERT(json_is_false(json_object_get(items, "additionalProperties")));
    CU_ASSERT(json_is_false(json_object_get(s, "additionalProperties")));
    /* the input is untouched */
    CU_ASSERT_EQUAL(json_array_size(json_object_get(in, "required")), 1);
    json_decref(s);
    json_decref(in);
}

static void test_fit_names_every_tool(void)
{
    char ld[8192];
    size_t k = (size_t)snprintf(ld, sizeof ld,
                                "Intro paragraph.\n\n## Tools\n");
    for (int i = 0; i < 12; i++)
        k += (size_t)snprintf(ld + k, sizeof ld - k,
                              "tool_%02d - Does thing %d with a long "
                              "explanation that takes room.\nParameters:\n"
                              "  x (string, required): the x of it, "
                              "described at length.\n\n",
                              i, i);
    snprintf(ld + k, sizeof ld - k,
             "## Limits\nA long paragraph about limits that goes on.");
    th_tool t;
    memset(&t, 0, sizeof t);
    t.name = "run_code";
    t.description = "Run a script.";
    t.long_description = ld;
    char *full = th_schema_description(&t, 0);
    CU_ASSERT(strlen(full) > TH_SCHEMA_OPENAI_DESC_MAX);
    free(full);
    char *d = th_schema_description_fit(&t, TH_SCHEMA_OPENAI_DESC_MAX);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT(strlen(d) <= TH_SCHEMA_OPENAI_DESC_MAX);
    for (int i = 0; i < 12; i++) {
        char n[32];
        snprintf(n, sizeof n, "tool_%02d", i);
        CU_ASSERT_PTR_NOT_NULL(strstr(d, n));
    }
    CU_ASSERT(strncmp(d, "Run a script.", 13) == 0);
    free(d);
    /* A short description is left alone. */
    t.long_description = "Short.";
    d = th_schema_description_fit(&t, TH_SCHEMA_OPENAI_DESC_MAX);
    CU_ASSERT_STRING_EQUAL(d, "Run a script.\n\nShort.");
    free(d);
}

static void test_responses_shape(void)
{
    th_tool t;
    memset(&t, 0, sizeof t);
    t.name = "w";
    t.description = "Writes.";
    const th_tool *tools[] = {&t};
    th_export_opts o = {.strict = true};
    th_error err;
    json_t *j = th_schema_export_ex(tools, 1, TH_EXPORT_OPENAI_RESPONSES, &o,
                                    &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    json_t *e = json_array_get(j, 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(e, "type")),
                           "function");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(e, "name")), "w");
    CU_ASSERT(json_is_true(json_object_get(e, "strict")));
    CU_ASSERT_PTR_NULL(json_object_get(e, "function"));
    json_decref(j);
    j = th_schema_export_ex(tools, 1, TH_EXPORT_OPENAI, &o, &err);
    CU_ASSERT(json_is_true(json_object_get(
        json_object_get(json_array_get(j, 0), "function"), "strict")));
    json_decref(j);
    CU_ASSERT_PTR_NULL(
        th_schema_export_ex(tools, 1, TH_EXPORT_ANTHROPIC, &o, &err));
    CU_ASSERT_EQUAL(err.code, TH_EINVAL);
    CU_ASSERT_EQUAL(th_export_format_from_name("openai-responses"),
                    TH_EXPORT_OPENAI_RESPONSES);
}

/* Gemini's OpenAPI subset: what it can say is kept or rewritten, what it
 * refuses is left out, recursively; the export is one Tool object. */
static void test_gemini(void)
{
    json_error_t e;
    json_t *in = json_loads(
        "{\"type\":\"object\",\"additionalProperties\":false,"
        "\"$defs\":{\"x\":{}},\"properties\":{"
        "\"a\":{\"type\":[\"string\",\"null\"],\"pattern\":\"^a\","
        "\"examples\":[\"ab\"]},"
        "\"b\":{\"type\":[\"integer\",\"string\"],\"exclusiveMinimum\":0},"
        "\"c\":{\"const\":\"only\"},"
        "\"d\":{\"enum\":[1,2]},"
        "\"e\":{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"array\","
        "\"items\":{\"type\":\"object\",\"additionalProperties\":{}}}]},"
        "\"f\":{\"enum\":[\"x\",null],\"default\":\"x\"}},"
        "\"required\":[\"a\"]}",
        0, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(in);
    json_t *g = th_schema_gemini(in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    char *txt = json_dumps(g, JSON_COMPACT | JSON_SORT_KEYS);
    CU_ASSERT_STRING_EQUAL(
        txt,
        "{\"properties\":{"
        "\"a\":{\"example\":\"ab\",\"nullable\":true,\"pattern\":\"^a\","
        "\"type\":\"string\"},"
        "\"b\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]},"
        "\"c\":{\"enum\":[\"only\"]},"
        "\"d\":{},"
        "\"e\":{\"anyOf\":[{\"type\":\"string\"},{\"items\":{\"type\":"
        "\"object\"},\"type\":\"array\"}]},"
        "\"f\":{\"default\":\"x\",\"enum\":[\"x\"],\"nullable\":true}},"
        "\"required\":[\"a\"],\"type\":\"object\"}");
    free(txt);
    json_decref(g);
    json_decref(in);
    th_tool t;
    memset(&t, 0, sizeof t);
    t.name = "w";
    t.description = "Writes.";
    const th_tool *tools[] = {&t};
    th_error err;
    json_t *j = th_schema_export(tools, 1, TH_EXPORT_GEMINI, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    json_t *fd = json_array_get(json_object_get(j, "functionDeclarations"), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(fd, "name")), "w");
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_object_get(fd, "parameters"),
                                          "type")),
        "object");
    json_decref(j);
    CU_ASSERT_EQUAL(th_export_format_from_name("gemini"), TH_EXPORT_GEMINI);
    CU_ASSERT_STRING_EQUAL(th_export_format_name(TH_EXPORT_GEMINI), "gemini");
}

void th_suite_schema_export(void)
{
    CU_pSuite s = CU_add_suite("schema_export", NULL, NULL);
    CU_add_test(s, "mcp_tool_entry", test_mcp_tool_entry);
    CU_add_test(s, "strict", test_strict);
    CU_add_test(s, "fit_names_every_tool", test_fit_names_every_tool);
    CU_add_test(s, "responses_shape", test_responses_shape);
    CU_add_test(s, "gemini", test_gemini);
}
