/* test_mcp_log.c - `toolhost mcp` over stdio: a tool's log_call() lines
 * reach the client of the call as notifications/message (logger: the
 * tool's name) at the level it set with logging/setLevel, before the
 * call's result; a tool logging in a loop is bounded per call and second,
 * with a note that counts the lines dropped.  Fixture:
 * tests/fixtures/log_tools.c. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"

static char *write_config(const char *dir)
{
    char text[1024];
    snprintf(text, sizeof text,
             "plugins:\n"
             "  - name: log_tools\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: t\n"
             "    tools: [\"log_tools_levels\", \"log_tools_flood\"]\n",
             th_test_build_path("fixtures/log_tools.so"));
    return th_test_write_file(dir, "c.yaml", text, (size_t)-1);
}

/* `toolhost mcp -c cfg` with `input` on stdin, then end of input (which
 * waits for the calls); the stdout lines as a JSON array. */
static json_t *run_mcp(const char *cfg, const char *input)
{
    th_test_run r;
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c",
                    (char *)cfg, NULL};
    int rc = th_test_run_argv(argv, input, 60, 1, &r);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(r.status, 0);
    json_t *arr = json_array();
    char *save = NULL;
    for (char *line = r.out ? strtok_r(r.out, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(line, 0, NULL);
        if (!j) {
            CU_FAIL("a stdout line is not JSON");
            continue;
        }
        json_array_append_new(arr, j);
    }
    th_test_run_free(&r);
    return arr;
}

/* The index of the response with integer id `id`, or -1. */
static long index_of(json_t *arr, json_int_t id)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        json_t *j = json_object_get(v, "id");
        if (json_is_integer(j) && json_integer_value(j) == id &&
            !json_object_get(v, "method"))
            return (long)i;
    }
    return -1;
}

/* params of notifications/message number i, or NULL. */
static json_t *log_params(json_t *v)
{
    const char *method = json_string_value(json_object_get(v, "method"));
    if (!method || strcmp(method, "notifications/message") != 0)
        return NULL;
    return json_object_get(v, "params");
}

#define INIT                                                                   \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"    \
    "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"                 \
    "\"clientInfo\":{\"name\":\"raw\",\"version\":\"1\"}}}\n"                  \
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"

static void test_levels(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir);
    const char *input =
        INIT
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"logging/setLevel\","
        "\"params\":{\"level\":\"info\"}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"log_tools_levels\",\"arguments\":{}}}\n";
    json_t *out = run_mcp(cfg, input);
    long res = index_of(out, 3);
    CU_ASSERT(res >= 0);
    CU_ASSERT_PTR_NOT_NULL(json_object_get(json_array_get(out, (size_t)res),
                                           "result"));
    /* Each line at or above info, once, before the result. */
    const char *want[][2] = {{"lv-info", "info"},
                             {"lv-warn", "warning"},
                             {"lv-error", "error"}};
    int seen[3] = {0, 0, 0}, debug = 0;
    size_t i;
    json_t *v;
    json_array_foreach(out, i, v)
    {
        json_t *p = log_params(v);
        const char *logger = json_string_value(json_object_get(p, "logger"));
        if (!p || !logger || strcmp(logger, "log_tools_levels") != 0)
            continue;
        const char *data = json_string_value(json_object_get(p, "data"));
        const char *level = json_string_value(json_object_get(p, "level"));
        CU_ASSERT_PTR_NOT_NULL_FATAL(data);
        CU_ASSERT_PTR_NOT_NULL_FATAL(level);
        if (strcmp(data, "lv-debug") == 0)
            debug++;
        for (int k = 0; k < 3; k++)
            if (strcmp(data, want[k][0]) == 0) {
                seen[k]++;
                CU_ASSERT_STRING_EQUAL(level, want[k][1]);
                CU_ASSERT((long)i < res);
            }
    }
    for (int k = 0; k < 3; k++) {
        if (seen[k] != 1)
            fprintf(stderr, "\n%s: seen %d times\n", want[k][0], seen[k]);
        CU_ASSERT_EQUAL(seen[k], 1);
    }
    CU_ASSERT_EQUAL(debug, 0);
    json_decref(out);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* 2000 lines logged in a loop: most are dropped, and the notes count
 * exactly those (each line either sent or counted). */
static void test_flood_bounded(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_config(dir);
    const char *input =
        INIT
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"logging/setLevel\","
        "\"params\":{\"level\":\"debug\"}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"log_tools_flood\",\"arguments\":{\"n\":"
        "2000}}}\n";
    json_t *out = run_mcp(cfg, input);
    long res = index_of(out, 3);
    CU_ASSERT(res >= 0);
    long sent = 0, dropped = 0, notes = 0;
    size_t i;
    json_t *v;
    json_array_foreach(out, i, v)
    {
        json_t *p = log_params(v);
        const char *logger = json_string_value(json_object_get(p, "logger"));
        if (!p || !logger || strcmp(logger, "log_tools_flood") != 0)
            continue;
        const char *data = json_string_value(json_object_get(p, "data"));
        CU_ASSERT_PTR_NOT_NULL_FATAL(data);
        CU_ASSERT((long)i < res);
        unsigned n = 0;
        if (strncmp(data, "flood ", 6) == 0) {
            sent++;
        } else if (sscanf(data, "%u log lines dropped", &n) == 1) {
            dropped += n;
            notes++;
        } else {
            fprintf(stderr, "\nunexpected line: %s\n", data);
            CU_FAIL("an unexpected log line");
        }
    }
    if (sent + dropped != 2000)
        fprintf(stderr, "\nsent %ld, dropped %ld in %ld notes\n", sent,
                dropped, notes);
    CU_ASSERT_EQUAL(sent + dropped, 2000);
    CU_ASSERT(sent < 1000);
    CU_ASSERT(notes >= 1);
    json_decref(out);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_mcp_log(void)
{
    CU_pSuite s = CU_add_suite("mcp_log", NULL, NULL);
    CU_add_test(s, "levels", test_levels);
    CU_add_test(s, "flood_bounded", test_flood_bounded);
}
