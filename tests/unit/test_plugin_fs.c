/* test_plugin_fs.c - the fs plugin through the fake host: fs_read with
 * offset/limit, fs_list with glob, fs_stat, and every path-escape refusal. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/plugin_harness.h"
#include "common/th_test.h"

static th_harness *h;
static char *tmp, *root;

static int setup(void)
{
    tmp = th_harness_sandbox(&root);
    char cfg[4200], err[1024];
    snprintf(cfg, sizeof cfg, "{\"root\": \"%s\"}", root);
    h = th_harness_load(th_test_build_path("plugins/fs.so"), cfg, err,
                        sizeof err);
    if (!h)
        fprintf(stderr, "fs.so: %s\n", err);
    return h ? 0 : -1;
}

static int teardown(void)
{
    th_harness_unload(h);
    th_test_rmtree(tmp);
    free(tmp);
    free(root);
    return 0;
}


/* Runs a tool with {"path": path} plus `extra` JSON members. */
static int run(const char *tool, const char *path, const char *extra,
               th_harness_call *c)
{
    json_t *j = json_pack("{s:s}", "path", path);
    if (extra) {
        json_t *e = json_loads(extra, 0, NULL);
        json_object_update(j, e);
        json_decref(e);
    }
    char *s = json_dumps(j, 0);
    int rc = th_harness_run(h, tool, s, 0, c);
    free(s);
    json_decref(j);
    return rc;
}

static void test_config(void)
{
    char err_[1024];
    th_harness *x = th_harness_load(th_test_build_path("plugins/fs.so"), "{}",
                                    err_, sizeof err_);
    CU_ASSERT_PTR_NULL(x);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_, "'root'"));
    x = th_harness_load(th_test_build_path("plugins/fs.so"),
                        "{\"root\": \"/nonexistent/toolhost\"}", err_,
                        sizeof err_);
    CU_ASSERT_PTR_NULL(x);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_, "/nonexistent/toolhost"));
    const toolhost_plugin *p = th_harness_plugin(h);
    CU_ASSERT_EQUAL(p->n_config_params, 4);
    CU_ASSERT_TRUE(p->config_params[0].required);
    CU_ASSERT_EQUAL(th_harness_tool(h, "fs_read")->stdout_type,
                    TOOLHOST_SEM_FILE_CONTENT);
    CU_ASSERT_TRUE(th_harness_tool(h, "fs_read")->flags &
                   TOOLHOST_TOOL_READ_ONLY);
}

static void test_read(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(run("fs_read", "a.txt", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "l1\nl2\nl3\nl4\nl5\n");
    int64_t v = -1;
    bool more = true;
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "lines", &v), 0);
    CU_ASSERT_EQUAL(v, 5);
    CU_ASSERT_EQUAL(th_harness_meta_bool(&c, "more", &more), 0);
    CU_ASSERT_FALSE(more);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_read", "a.txt", "{\"offset\": 1, \"limit\": 2}",
                        &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "l2\nl3\n");
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "lines", &v), 0);
    CU_ASSERT_EQUAL(v, 2);
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "offset", &v), 0);
    CU_ASSERT_EQUAL(v, 1);
    CU_ASSERT_EQUAL(th_harness_meta_bool(&c, "more", &more), 0);
    CU_ASSERT_TRUE(more);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_read", "a.txt", "{\"offset\": 3}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "l4\nl5\n");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_read", "a.txt", "{\"offset\": 10}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_EQUAL(c.out.len, 0);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_read", "a.txt", "{\"limit\": 0}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_EQUAL(c.out.len, 0);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_read", "a.txt", "{\"offset\": -1}", &c),
                    TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verr, "'offset'"));
    th_harness_call_free(&c);

    /* a symlink that stays inside the root is followed */
    CU_ASSERT_EQUAL(run("fs_read", "link_in", "{\"limit\": 1}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "l1\n");
    th_harness_call_free(&c);

    /* an absolute path inside the root is fine */
    char abs[4200];
    snprintf(abs, sizeof abs, "%s/sub/b.c", root);
    CU_ASSERT_EQUAL(run("fs_read", abs, NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "int main(void) { return 0; }\n");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_read", "sub", NULL, &c), TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "is a folder"));
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_read", "missing.txt", NULL, &c), TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "no such file"));
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(th_harness_run(h, "fs_read", "{}", 0, &c), TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verr, "missing required parameter "
                                          "'path'"));
    th_harness_call_free(&c);
}

static void expect_refused(const char *tool, const char *path)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(run(tool, path, NULL, &c), TOOLHOST_FAILED);
    CU_ASSERT_EQUAL(c.out.len, 0);
    if (!strstr(th_harness_err(&c), "outside the allowed root")) {
        CU_FAIL("not refused as outside the root");
        fprintf(stderr, "\n  %s %s: %s\n", tool, path, th_harness_err(&c));
    }
    th_harness_call_free(&c);
}

static void test_escapes(void)
{
    char abs[4200];
    snprintf(abs, sizeof abs, "%s/outside/secret.txt", tmp);
    const char *paths[] = {"..", "../outside/secret.txt", "../../etc/passwd",
                           "sub/../../outside/secret.txt", "/etc/passwd", abs,
                           "link_out", "link_dir_out/secret.txt",
                           "link_dir_out"};
    const char *tools[] = {"fs_read", "fs_list", "fs_stat"};
    for (size_t t = 0; t < 3; t++)
        for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
            expect_refused(tools[t], paths[i]);
}

static void test_list(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(h, "fs_list", "{}", 0, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c),
                           "a.txt\nlink_dir_out\nlink_in\nlink_out\nsub/\n");
    int64_t n = 0;
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "entries", &n), 0);
    CU_ASSERT_EQUAL(n, 5);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_list", "sub", "{\"glob\": \"*.[ch]\"}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "b.c\nc.h\n");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_list", ".", "{\"glob\": \"link_*\"}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "link_dir_out\nlink_in\nlink_out\n");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_list", "sub", "{\"glob\": \"*.zip\"}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_EQUAL(c.out.len, 0);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_list", "a.txt", NULL, &c), TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "not a folder"));
    th_harness_call_free(&c);
}

static void test_stat(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(run("fs_stat", "a.txt", NULL, &c), TOOLHOST_OK);
    json_t *j = json_loads(th_harness_out(&c), 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "path")),
                           "a.txt");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "type")),
                           "file");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "size")), 15);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "mode")),
                           "0644");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "mtime")),
                           "2001-09-09T01:46:40Z");
    json_decref(j);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_stat", "sub", NULL, &c), TOOLHOST_OK);
    j = json_loads(th_harness_out(&c), 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "type")),
                           "directory");
    json_decref(j);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_stat", ".", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_out(&c), "\"path\":\".\""));
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_stat", "nope", NULL, &c), TOOLHOST_FAILED);
    th_harness_call_free(&c);
}

/* As configs/default.yaml sets it up: the project root. */
static void test_project_root(void)
{
    char cfg[4200], e[1024];
    snprintf(cfg, sizeof cfg, "{\"root\": \"%s\"}", th_test_source_path("."));
    th_harness *p = th_harness_load(th_test_build_path("plugins/fs.so"), cfg,
                                    e, sizeof e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(p, "fs_read",
                                   "{\"path\": \"README.md\", \"limit\": 1}",
                                   0, &c),
                    TOOLHOST_OK);
    CU_ASSERT_TRUE(c.out.len > 0);
    th_harness_call_free(&c);
    CU_ASSERT_EQUAL(th_harness_run(p, "fs_read",
                                   "{\"path\": \"../../etc/passwd\"}", 0, &c),
                    TOOLHOST_FAILED);
    CU_ASSERT_EQUAL(c.out.len, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "outside the allowed root"));
    th_harness_call_free(&c);
    th_harness_unload(p);
}

void th_suite_plugin_fs(void)
{
    CU_pSuite s = CU_add_suite("plugin_fs", setup, teardown);
    CU_add_test(s, "config", test_config);
    CU_add_test(s, "read", test_read);
    CU_add_test(s, "escapes", test_escapes);
    CU_add_test(s, "list", test_list);
    CU_add_test(s, "stat", test_stat);
    CU_add_test(s, "project_root", test_project_root);
}
