/* test_audit.c - the audit log's writer (th/audit.h) on its own: the
 * SHA-256 digest, the W3C traceparent check, one JSON line per record with
 * every member, the reopen after a rename, and a write error counted, not
 * lost in silence. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/th_test.h"
#include "th/audit.h"
#include "th/log.h"

static void test_digest(void)
{
    char hex[65];
    th_audit_sha256_hex((const uint8_t *)"abc", 3, hex);
    CU_ASSERT_STRING_EQUAL(hex, "ba7816bf8f01cfea414140de5dae2223b00361a3"
                                "96177a9cb410ff61f20015ad");
    th_audit_sha256_hex((const uint8_t *)"", 0, hex);
    CU_ASSERT_STRING_EQUAL(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4"
                                "649b934ca495991b7852b855");
}

static void test_traceparent(void)
{
    CU_ASSERT_TRUE(th_audit_traceparent_ok(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    CU_ASSERT_TRUE(th_audit_traceparent_ok(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"));
    static const char *const bad[] = {
        NULL, "", "00-zz",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", /* upper */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", /* ff */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01", /* zero */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", /* zero */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CU_ASSERT_FALSE(th_audit_traceparent_ok(bad[i]));
}

static size_t count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t n = 0;
    char line[4096];
    while (f && fgets(line, sizeof line, f))
        n++;
    if (f)
        fclose(f);
    return n;
}

static void test_write_reopen(void)
{
    char *dir = th_test_tmpdir();
    char path[4200], rotated[4300];
    snprintf(path, sizeof path, "%s/audit.log", dir);
    snprintf(rotated, sizeof rotated, "%s.1", path);
    th_audit *a = NULL;
    th_error err;
    th_error_clear(&err);
    CU_ASSERT_EQUAL_FATAL(th_audit_open(path, &a, &err), 0);
    th_principal who = {.uid = (uint32_t)-1, .user = "alice"};
    th_audit_call c = {.wall_ms = 1764355200123, .who = &who, .session = 7,
                       .front = "mcp", .toolset = "public", .tool = "echo",
                       .call_id = 9, .args_sha256 = "ab", .outcome = "timeout",
                       .error = TH_ETIMEOUT, .dur_ms = 1.5, .bytes_out = 3,
                       .traceparent = NULL};
    th_audit_write(a, &c);
    FILE *f = fopen(path, "r");
    char line[4096] = "";
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_PTR_NOT_NULL(fgets(line, sizeof line, f));
    fclose(f);
    json_error_t je;
    json_t *j = json_loads(line, 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "ts")),
                           "2025-11-28T18:40:00.123Z");
    json_t *p = json_object_get(j, "principal");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p, "user")),
                           "alice");
    CU_ASSERT_PTR_NULL(json_object_get(p, "uid"));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "error")),
                           th_err_name(TH_ETIMEOUT));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "outcome")),
                           "timeout");
    CU_ASSERT_DOUBLE_EQUAL(json_number_value(json_object_get(j, "dur_ms")),
                           1.5, 1e-9);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "bytes_out")), 3);
    CU_ASSERT(json_is_null(json_object_get(j, "traceparent")));
    json_decref(j);
    /* logrotate renames; the reopen starts a new file by the name */
    CU_ASSERT_EQUAL(rename(path, rotated), 0);
    CU_ASSERT_EQUAL(th_audit_reopen(a), 0);
    th_audit_write(a, &c);
    th_audit_write(a, &c);
    CU_ASSERT_EQUAL(count_lines(rotated), 1);
    CU_ASSERT_EQUAL(count_lines(path), 2);
    th_audit_stats st;
    th_audit_get_stats(a, &st);
    CU_ASSERT_EQUAL(st.lines, 3);
    CU_ASSERT_EQUAL(st.write_errors, 0);
    CU_ASSERT_EQUAL(st.reopens, 1);
    th_audit_close(a);
    th_test_rmtree(dir);
    free(dir);
}

static void test_write_error(void)
{
    if (access("/dev/full", W_OK) != 0) {
        TH_SKIP("needs /dev/full");
        return;
    }
    th_audit *a = NULL;
    th_error err;
    th_error_clear(&err);
    CU_ASSERT_EQUAL_FATAL(th_audit_open("/dev/full", &a, &err), 0);
    th_audit_call c = {.tool = "echo", .outcome = "ok"};
    int lv = th_log_get_level();
    th_log_set_fd(-1); /* the error line is the integration suite's */
    for (int i = 0; i < 3; i++)
        th_audit_write(a, &c);
    th_log_set_fd(2);
    th_log_set_level(lv);
    th_audit_stats st;
    th_audit_get_stats(a, &st);
    CU_ASSERT_EQUAL(st.write_errors, 3);
    CU_ASSERT_EQUAL(st.lines, 0);
    th_audit_close(a);
    /* a file that cannot be opened: the error names it */
    CU_ASSERT_EQUAL(th_audit_open("/nonexistent/x/audit.log", &a, &err),
                    TH_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "/nonexistent/x/audit.log"));
}

void th_suite_audit(void)
{
    CU_pSuite s = CU_add_suite("audit", NULL, NULL);
    CU_add_test(s, "digest", test_digest);
    CU_add_test(s, "traceparent", test_traceparent);
    CU_add_test(s, "write_reopen", test_write_reopen);
    CU_add_test(s, "write_error", test_write_error);
}
