/* test_jschema.c - the JSON Schema subset (th/jschema.h) proven on the
 * official JSON-Schema-Test-Suite (draft 7 files of the keywords in the
 * subset, as installed by the Debian package json-schema-test-suite), plus
 * our own cases: compile refusals naming the keyword, messages, paths.
 *
 * One CUnit test per test group ("FILE#N description"): a group whose
 * schema uses a keyword outside the subset is skipped with the compiler's
 * reason (TH_SKIP), never counted as passed.  Each case's data is turned
 * into msgpack (the form arguments and output are checked in) first. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"
#include "th/buf.h"
#include "th/jschema.h"
#include "th/json.h"

#define SUITE_DIR "/usr/share/json-schema-test-suite/tests/draft7"

static const char *const files[] = {
    "type",     "enum",      "const",     "minimum",
    "maximum",  "exclusiveMinimum", "exclusiveMaximum", "minLength",
    "maxLength", "pattern",  "items",     "minItems",
    "maxItems", "properties", "required", "additionalProperties",
    "boolean_schema"};
#define N_FILES (sizeof files / sizeof files[0])

typedef struct group {
    char name[200];
    const json_t *g; /* borrowed from roots[] */
} group;

static json_t *roots[N_FILES];
static group *groups;
static size_t n_groups;
static unsigned cases_run, cases_passed;

static int check_json(const th_jschema *s, const json_t *data, char *msg,
                      size_t cap)
{
    th_buf b = TH_BUF_INIT;
    if (th_json_to_msgpack(data, &b)) {
        th_buf_destroy(&b);
        return -2;
    }
    msgpack_zone z;
    msgpack_zone_init(&z, 1024);
    msgpack_object o;
    size_t off = 0;
    int rc = -2;
    if (msgpack_unpack((const char *)b.data, b.len, &off, &z, &o) ==
        MSGPACK_UNPACK_SUCCESS)
        rc = th_jschema_check(s, &o, msg, cap);
    msgpack_zone_destroy(&z);
    th_buf_destroy(&b);
    return rc;
}

static void run_group(void)
{
    CU_pTest t = CU_get_current_test();
    const group *gr = NULL;
    for (size_t i = 0; t && i < n_groups; i++)
        if (strcmp(groups[i].name, t->pName) == 0)
            gr = &groups[i];
    CU_ASSERT_PTR_NOT_NULL_FATAL(gr);
    const json_t *schema = json_object_get(gr->g, "schema");
    th_jschema *s = NULL;
    th_error err;
    int rc = th_jschema_compile_json("schema", schema, &s, &err);
    if (rc) {
        /* Only "outside the subset" is a skip; any other refusal of an
         * official schema is our bug. */
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "outside the JSON Schema "
                                               "subset"));
        if (!strstr(err.msg, "outside the JSON Schema subset"))
            fprintf(stderr, "\n  %s: %s\n", gr->name, err.msg);
        TH_SKIP(err.msg);
    }
    size_t i;
    const json_t *tc;
    json_array_foreach(json_object_get(gr->g, "tests"), i, tc)
    {
        char msg[512];
        bool want = json_is_true(json_object_get(tc, "valid"));
        int r = check_json(s, json_object_get(tc, "data"), msg, sizeof msg);
        cases_run++;
        bool ok = (r == 0) == want && r >= 0;
        if (ok)
            cases_passed++;
        else
            fprintf(stderr, "\n  %s / %s: want %s, got %d (%s)\n", gr->name,
                    json_string_value(json_object_get(tc, "description")),
                    want ? "valid" : "invalid", r, msg);
        CU_ASSERT(ok);
    }
    th_jschema_free(s);
}

static void suite_missing(void)
{
    TH_SKIP("the JSON-Schema-Test-Suite is not installed at " SUITE_DIR
            " (Debian package json-schema-test-suite)");
}

static int suite_clean(void)
{
    if (cases_run)
        fprintf(stderr, "\n  jschema: %u of %u official cases passed\n",
                cases_passed, cases_run);
    for (size_t i = 0; i < N_FILES; i++) {
        json_decref(roots[i]);
        roots[i] = NULL;
    }
    free(groups);
    groups = NULL;
    n_groups = 0;
    return 0;
}

/* ---- our own cases ------------------------------------------------------------ */

static int check_text(const char *schema, const char *data, char *msg,
                      size_t cap)
{
    th_jschema *s;
    th_error err;
    if (th_jschema_compile("t", schema, &s, &err)) {
        snprintf(msg, cap, "compile: %.200s", err.msg);
        return -9;
    }
    int rc = th_jschema_check_text(s, data, strlen(data), msg, cap);
    th_jschema_free(s);
    return rc;
}

static void refuses_keywords(void)
{
    th_jschema *s;
    th_error err;
    CU_ASSERT_EQUAL(th_jschema_compile("tool 'x': output_schema",
                                       "{\"type\":\"object\",\"properties\":"
                                       "{\"a\":{\"oneOf\":[]}}}",
                                       &s, &err),
                    TH_ELOAD);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "tool 'x': output_schema: uses "
                                           "the keyword 'oneOf'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "at /properties/a"));
    CU_ASSERT_EQUAL(th_jschema_compile("s", "{\"items\":[{}]}", &s, &err),
                    TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "'items' as a list"));
    CU_ASSERT_EQUAL(th_jschema_compile("s", "{\"pattern\":\"(\"}", &s, &err),
                    TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "does not compile"));
    CU_ASSERT_EQUAL(th_jschema_compile("s", "{\"minimum\":\"1\"}", &s, &err),
                    TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "'minimum' must be a number"));
    CU_ASSERT_EQUAL(th_jschema_compile("s", "{nope", &s, &err), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "s is not valid JSON"));
    CU_ASSERT_EQUAL(th_jschema_compile("s", "{\"title\":\"T\",\"description\""
                                            ":\"d\",\"default\":1}",
                                       &s, &err),
                    0);
    th_jschema_free(s);
}

static void messages(void)
{
    char msg[256];
    const char *sc = "{\"type\":\"object\",\"required\":[\"n\"],"
                     "\"properties\":{\"n\":{\"type\":\"integer\","
                     "\"minimum\":1},\"tags\":{\"type\":\"array\",\"items\":"
                     "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}}},"
                     "\"additionalProperties\":false}";
    CU_ASSERT_EQUAL(check_text(sc, "{\"n\":3,\"tags\":[\"ab\"]}", msg,
                               sizeof msg),
                    0);
    CU_ASSERT_EQUAL(check_text(sc, "{\"n\":0}", msg, sizeof msg), 1);
    CU_ASSERT_STRING_EQUAL(msg, "at /n: must be >= 1, got 0");
    CU_ASSERT_EQUAL(check_text(sc, "{}", msg, sizeof msg), 1);
    CU_ASSERT_STRING_EQUAL(msg, "is missing the required property 'n'");
    CU_ASSERT_EQUAL(check_text(sc, "{\"n\":1,\"tags\":[\"ok\",\"NO\"]}", msg,
                               sizeof msg),
                    1);
    CU_ASSERT_STRING_EQUAL(msg, "at /tags/1: must match the pattern "
                                "'^[a-z]+$'");
    CU_ASSERT_EQUAL(check_text(sc, "{\"n\":1,\"x\":2}", msg, sizeof msg), 1);
    CU_ASSERT_STRING_EQUAL(msg, "has the property 'x', which is not allowed");
    CU_ASSERT_EQUAL(check_text(sc, "[1]", msg, sizeof msg), 1);
    CU_ASSERT_STRING_EQUAL(msg, "must be an object, got an array");
    CU_ASSERT_EQUAL(check_text(sc, "{\"n\":", msg, sizeof msg), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "is not valid JSON"));
    /* Code points, not bytes. */
    CU_ASSERT_EQUAL(check_text("{\"maxLength\":2}", "\"\xc3\xa9\xc3\xa9\"",
                               msg, sizeof msg),
                    0);
}

void th_suite_jschema(void)
{
    CU_pSuite s = CU_add_suite("jschema", NULL, suite_clean);
    CU_add_test(s, "refuses_keywords", refuses_keywords);
    CU_add_test(s, "messages", messages);
    size_t cap = 0;
    for (size_t f = 0; f < N_FILES; f++) {
        char path[512];
        snprintf(path, sizeof path, SUITE_DIR "/%s.json", files[f]);
        json_error_t jerr;
        roots[f] = json_load_file(path, JSON_ALLOW_NUL, &jerr);
        if (!roots[f]) {
            CU_add_test(s, "official_suite_missing", suite_missing);
            return;
        }
        size_t i;
        const json_t *g;
        json_array_foreach(roots[f], i, g)
        {
            if (n_groups == cap) {
                cap = cap ? cap * 2 : 64;
                group *ng = realloc(groups, cap * sizeof *ng);
                if (!ng)
                    return;
                groups = ng;
            }
            group *gr = &groups[n_groups++];
            snprintf(gr->name, sizeof gr->name, "%s#%zu %s", files[f], i + 1,
                     json_string_value(json_object_get(g, "description")));
            gr->g = g;
            CU_add_test(s, gr->name, run_group);
        }
    }
}
