/* test_jschema.c - the JSON Schema subset (th/jschema.h) proven on the
 * official JSON-Schema-Test-Suite: every draft 2020-12 file (found at
 * $TH_JSON_SCHEMA_SUITE, else ../shared/json-schema-test-suite/draft2020-12
 * beside the source tree; optional/ left out), and the draft 7 files of the
 * first subset's keywords (the Debian package json-schema-test-suite);
 * plus our own cases: compile refusals naming the keyword, messages, paths.
 * The suite's end prints the passed cases per file and each skipped
 * group's reason is in the runner's skip list.
 *
 * One CUnit test per test group ("FILE#N description"): a group whose
 * schema uses a keyword outside the subset is skipped with the compiler's
 * reason (TH_SKIP), never counted as passed.  Each case's data is turned
 * into msgpack (the form arguments and output are checked in) first. */
#include <CUnit/CUnit.h>
#include <dirent.h>
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
#define SUITE_2020 TH_SOURCE_DIR "/../shared/json-schema-test-suite/draft2020-12"

static const char *const files[] = {
    "type",     "enum",      "const",     "minimum",
    "maximum",  "exclusiveMinimum", "exclusiveMaximum", "minLength",
    "maxLength", "pattern",  "items",     "minItems",
    "maxItems", "properties", "required", "additionalProperties",
    "boolean_schema"};
#define N_FILES (sizeof files / sizeof files[0])
#define MAX_FILES 96

typedef struct group {
    char name[200];
    const json_t *g; /* borrowed from roots[] */
    size_t file;
} group;

typedef struct file_count {
    char name[64];
    unsigned groups, skipped, run, passed;
} file_count;

static json_t *roots[MAX_FILES];
static file_count counts[MAX_FILES];
static size_t n_roots;
static group *groups;
static size_t n_groups;
static unsigned cases_run, cases_passed;

static void run_group(void)
{
    CU_pTest t = CU_get_current_test();
    const group *gr = NULL;
    for (size_t i = 0; t && i < n_groups; i++)
        if (strcmp(groups[i].name, t->pName) == 0)
            gr = &groups[i];
    CU_ASSERT_PTR_NOT_NULL_FATAL(gr);
    file_count *fc = &counts[gr->file];
    fc->groups++;
    const json_t *schema = json_object_get(gr->g, "schema");
    th_jschema *s = NULL;
    th_error err;
    int rc = th_jschema_compile_json("schema", schema, &s, &err);
    if (rc) {
        /* Only "outside the subset" is a skip, and a pattern in a syntax
         * PCRE2 does not read (ECMA-262 and PCRE2 differ, e.g. the long
         * Unicode property names); any other refusal of an official schema
         * is our bug. */
        bool skip = strstr(err.msg, "outside the JSON Schema subset") ||
                    strstr(err.msg, "does not compile");
        CU_ASSERT(skip);
        if (!skip)
            fprintf(stderr, "\n  %s: %s\n", gr->name, err.msg);
        fc->skipped++;
        TH_SKIP(err.msg);
        return;
    }
    size_t i;
    const json_t *tc;
    json_array_foreach(json_object_get(gr->g, "tests"), i, tc)
    {
        char msg[512];
        bool want = json_is_true(json_object_get(tc, "valid"));
        int r = th_jschema_check_json(s, json_object_get(tc, "data"), msg,
                                      sizeof msg);
        cases_run++;
        fc->run++;
        bool ok = (r == 0) == want && r >= 0;
        if (ok) {
            cases_passed++;
            fc->passed++;
        }
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

static void suite_2020_missing(void)
{
    TH_SKIP("the JSON-Schema-Test-Suite's draft2020-12 files are not at "
            "$TH_JSON_SCHEMA_SUITE nor at " SUITE_2020);
}

static int suite_clean(void)
{
    if (cases_run) {
        fprintf(stderr, "\n  jschema: %u of %u official cases passed\n",
                cases_passed, cases_run);
        fprintf(stderr, "  %-40s %6s %6s %8s\n", "file", "groups", "skip",
                "cases");
        for (size_t i = 0; i < n_roots; i++)
            if (counts[i].groups)
                fprintf(stderr, "  %-40s %6u %6u %4u/%-4u\n", counts[i].name,
                        counts[i].groups, counts[i].skipped, counts[i].passed,
                        counts[i].run);
    }
    for (size_t i = 0; i < n_roots; i++) {
        json_decref(roots[i]);
        roots[i] = NULL;
    }
    n_roots = 0;
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
                                       "{\"a\":{\"unevaluatedProperties\":"
                                       "false}}}",
                                       &s, &err),
                    TH_ELOAD);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "tool 'x': output_schema: uses "
                                           "the keyword "
                                           "'unevaluatedProperties'"));
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

/* 2020-12's applicators and references: what a caller reads, and the
 * bounds a hostile value or schema meets. */
static void keywords_2020(void)
{
    char msg[256];
    const char *sc =
        "{\"$defs\":{\"pos\":{\"type\":\"integer\",\"minimum\":1},"
        "\"node\":{\"type\":\"object\",\"properties\":{\"kids\":"
        "{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
        "\"additionalProperties\":false}},"
        "\"type\":\"object\",\"properties\":{"
        "\"n\":{\"$ref\":\"#/$defs/pos\"},"
        "\"id\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]},"
        "\"one\":{\"oneOf\":[{\"multipleOf\":2},{\"multipleOf\":3}]},"
        "\"tags\":{\"type\":\"array\",\"uniqueItems\":true},"
        "\"tree\":{\"$ref\":\"#/$defs/node\"},"
        "\"t\":{\"prefixItems\":[{\"type\":\"string\"}],\"items\":false}},"
        "\"dependentRequired\":{\"a\":[\"b\"]},"
        "\"not\":{\"required\":[\"forbidden\"]}}";
    CU_ASSERT_EQUAL(check_text(sc, "{\"n\":2,\"id\":\"x\",\"one\":4,"
                                   "\"tags\":[1,\"1\",[1]],\"tree\":{\"kids\":"
                                   "[{\"kids\":[]}]},\"t\":[\"a\"]}",
                               msg, sizeof msg),
                    0);
    CU_ASSERT_EQUAL(check_text(sc, "{\"n\":0}", msg, sizeof msg), 1);
    CU_ASSERT_STRING_EQUAL(msg, "at /n: must be >= 1, got 0");
    CU_ASSERT_EQUAL(check_text(sc, "{\"id\":true}", msg, sizeof msg), 1);
    CU_ASSERT_STRING_EQUAL(msg, "at /id: must match at least one schema of "
                                "anyOf");
    CU_ASSERT_EQUAL(check_text(sc, "{\"one\":6}", msg, sizeof msg), 1);
    CU_ASSERT_STRING_EQUAL(msg, "at /one: must match exactly one schema of "
                                "oneOf, matches 2");
    CU_ASSERT_EQUAL(check_text(sc, "{\"tags\":[1,2,1.0]}", msg, sizeof msg),
                    1);
    CU_ASSERT_STRING_EQUAL(msg, "at /tags: must have unique items (items 0 "
                                "and 2 are equal)");
    CU_ASSERT_EQUAL(check_text(sc, "{\"tree\":{\"kids\":[{\"x\":1}]}}",
                               msg, sizeof msg),
                    1);
    CU_ASSERT_STRING_EQUAL(msg, "at /tree/kids/0: has the property 'x', "
                                "which is not allowed");
    CU_ASSERT_EQUAL(check_text(sc, "{\"t\":[\"a\",1]}", msg, sizeof msg), 1);
    CU_ASSERT_STRING_EQUAL(msg, "at /t/1: is not allowed here (the schema "
                                "is false)");
    CU_ASSERT_EQUAL(check_text(sc, "{\"a\":1}", msg, sizeof msg), 1);
    CU_ASSERT_STRING_EQUAL(msg, "has 'a', so it must have 'b' too");
    CU_ASSERT_EQUAL(check_text(sc, "{\"forbidden\":1}", msg, sizeof msg), 1);
    CU_ASSERT_STRING_EQUAL(msg, "must not match the schema of 'not'");
    /* a reference loop that consumes nothing ends as an error */
    CU_ASSERT_EQUAL(check_text("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},"
                               "\"$ref\":\"#/$defs/a\"}",
                               "1", msg, sizeof msg),
                    1);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "recurses deeper than"));
    /* shared subschemas under anyOf: 2^40 paths, a bounded number of steps */
    char big[4096];
    size_t off = (size_t)snprintf(big, sizeof big,
                                  "{\"$defs\":{\"d0\":{\"type\":\"string\"}");
    for (int i = 1; i <= 40; i++)
        off += (size_t)snprintf(big + off, sizeof big - off,
                                ",\"d%d\":{\"anyOf\":[{\"$ref\":\"#/$defs/d%d\"},"
                                "{\"$ref\":\"#/$defs/d%d\"}]}",
                                i, i - 1, i - 1);
    snprintf(big + off, sizeof big - off, "},\"$ref\":\"#/$defs/d40\"}");
    CU_ASSERT_EQUAL(check_text(big, "1", msg, sizeof msg), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "steps for this value"));
    /* refusals name what is missing */
    CU_ASSERT_EQUAL(check_text("{\"$ref\":\"other.json#/a\"}", "1", msg,
                               sizeof msg),
                    -9);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "another document ('other.json#/a')"));
    CU_ASSERT_EQUAL(check_text("{\"$ref\":\"#/$defs/none\"}", "1", msg,
                               sizeof msg),
                    -9);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "names no place in the schema"));
    CU_ASSERT_EQUAL(check_text("{\"properties\":{\"a\":{\"$id\":\"x\"}},"
                               "\"$ref\":\"#\"}",
                               "1", msg, sizeof msg),
                    -9);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "'$id' below the top"));
    /* a caller's string past the pattern's backtracking budget */
    char val[200];
    memset(val, 'a', 60);
    snprintf(val + 60, sizeof val - 60, "!\"");
    memmove(val + 1, val, strlen(val) + 1);
    val[0] = '"';
    CU_ASSERT_EQUAL(check_text("{\"pattern\":\"^(a|a)*$\"}", val, msg,
                               sizeof msg),
                    1);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "match budget"));
}

void th_suite_jschema(void)
{
    CU_pSuite s = CU_add_suite("jschema", NULL, suite_clean);
    CU_add_test(s, "refuses_keywords", refuses_keywords);
    CU_add_test(s, "messages", messages);
    CU_add_test(s, "keywords_2020", keywords_2020);
    char paths[MAX_FILES][512];
    char names[MAX_FILES][64];
    size_t n = 0;
    for (size_t f = 0; f < N_FILES; f++, n++) {
        snprintf(paths[n], sizeof paths[n], SUITE_DIR "/%s.json", files[f]);
        snprintf(names[n], sizeof names[n], "draft7/%s", files[f]);
    }
    const char *d2020 = getenv("TH_JSON_SCHEMA_SUITE");
    if (!d2020 || !*d2020)
        d2020 = SUITE_2020;
    DIR *dir = opendir(d2020);
    if (!dir) {
        CU_add_test(s, "official_2020_12_missing", suite_2020_missing);
    } else {
        /* sorted, for a stable order of tests */
        struct dirent **ents = NULL;
        int ne = scandir(d2020, &ents, NULL, alphasort);
        for (int i = 0; i < ne; i++) {
            size_t l = strlen(ents[i]->d_name);
            if (n < MAX_FILES && l > 5 &&
                strcmp(ents[i]->d_name + l - 5, ".json") == 0) {
                snprintf(paths[n], sizeof paths[n], "%s/%s", d2020,
                         ents[i]->d_name);
                snprintf(names[n], sizeof names[n], "2020-12/%.*s",
                         (int)(l - 5), ents[i]->d_name);
                n++;
            }
            free(ents[i]);
        }
        free(ents);
        closedir(dir);
    }
    size_t cap = 0;
    for (size_t f = 0; f < n; f++) {
        json_error_t jerr;
        json_t *root = json_load_file(paths[f], JSON_ALLOW_NUL, &jerr);
        if (!root) {
            if (f < N_FILES) {
                CU_add_test(s, "official_suite_missing", suite_missing);
                f = N_FILES - 1; /* the draft 7 files: all or none */
            }
            continue;
        }
        size_t fi = n_roots++;
        roots[fi] = root;
        snprintf(counts[fi].name, sizeof counts[fi].name, "%s", names[f]);
        size_t i;
        const json_t *g;
        json_array_foreach(root, i, g)
        {
            if (n_groups == cap) {
                cap = cap ? cap * 2 : 64;
                group *ng = realloc(groups, cap * sizeof *ng);
                if (!ng)
                    return;
                groups = ng;
            }
            group *gr = &groups[n_groups++];
            snprintf(gr->name, sizeof gr->name, "%s#%zu %s", names[f], i + 1,
                     json_string_value(json_object_get(g, "description")));
            gr->g = g;
            gr->file = fi;
            CU_add_test(s, gr->name, run_group);
        }
    }
}
