/* test_plugin_text.c - the text plugin through the fake host: text_grep
 * over files and folders, max_matches, bad patterns, refusals; text_count. */
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
    free(th_test_write_file(root, "words.txt", "one two\n  three\t\n",
                            (size_t)-1));
    char cfg[4200], err[1024];
    snprintf(cfg, sizeof cfg, "{\"root\": \"%s\"}", root);
    h = th_harness_load(th_test_build_path("plugins/text.so"), cfg, err,
                        sizeof err);
    if (!h)
        fprintf(stderr, "text.so: %s\n", err);
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


static int grep(const char *pattern, const char *path, const char *extra,
                th_harness_call *c)
{
    json_t *j = json_pack("{s:s}", "pattern", pattern);
    if (path)
        json_object_set_new(j, "path", json_string(path));
    if (extra) {
        json_t *e = json_loads(extra, 0, NULL);
        json_object_update(j, e);
        json_decref(e);
    }
    char *s = json_dumps(j, 0);
    int rc = th_harness_run(h, "text_grep", s, 0, c);
    free(s);
    json_decref(j);
    return rc;
}

static void test_grep_file(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(grep("l[24]", "a.txt", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "a.txt:2:l2\na.txt:4:l4\n");
    int64_t n = 0;
    bool trunc = true;
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "matches", &n), 0);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(th_harness_meta_bool(&c, "truncated", &trunc), 0);
    CU_ASSERT_FALSE(trunc);
    th_harness_call_free(&c);

    /* extended syntax: alternation and intervals */
    CU_ASSERT_EQUAL(grep("^(l1|l5)$", "a.txt", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "a.txt:1:l1\na.txt:5:l5\n");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(grep("L3", "a.txt", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_EQUAL(c.out.len, 0);
    th_harness_call_free(&c);
    CU_ASSERT_EQUAL(grep("L3", "a.txt", "{\"ignore_case\": true}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "a.txt:3:l3\n");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(grep("l", "a.txt", "{\"max_matches\": 2}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "a.txt:1:l1\na.txt:2:l2\n");
    CU_ASSERT_EQUAL(th_harness_meta_bool(&c, "truncated", &trunc), 0);
    CU_ASSERT_TRUE(trunc);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(grep("l", "a.txt", "{\"max_matches\": 0}", &c),
                    TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verr, "max_matches"));
    th_harness_call_free(&c);
}

static void test_grep_tree(void)
{
    th_harness_call c;
    /* the whole root: binary files and links are skipped, so the secret
     * behind link_out / link_dir_out never shows */
    CU_ASSERT_EQUAL(grep("needle|TODO|main", NULL, NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "sub/b.c:1:int main(void) { return 0; }\n"
                                    "sub/c.h:1:#define TODO 1\n");
    CU_ASSERT_PTR_NULL(strstr(th_harness_out(&c), "SECRET"));
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(grep("TODO", "sub", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "sub/c.h:1:#define TODO 1\n");
    th_harness_call_free(&c);

    /* a symlink inside the root, given by name, is searched (and named
     * as given: the file is opened beneath the root, never by its target's
     * name) */
    CU_ASSERT_EQUAL(grep("l5", "link_in", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "link_in:5:l5\n");
    th_harness_call_free(&c);
}

static void test_grep_errors(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(grep("(unclosed", "a.txt", NULL, &c), TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "invalid pattern"));
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(grep("x", "missing", NULL, &c), TOOLHOST_FAILED);
    th_harness_call_free(&c);

    const char *escapes[] = {"..", "../outside", "../../etc/passwd",
                             "/etc/passwd", "link_out", "link_dir_out"};
    for (size_t i = 0; i < sizeof escapes / sizeof escapes[0]; i++) {
        CU_ASSERT_EQUAL(grep("needle", escapes[i], NULL, &c),
                        TOOLHOST_FAILED);
        CU_ASSERT_EQUAL(c.out.len, 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "outside the allowed root"));
        th_harness_call_free(&c);
    }
}

static void test_count(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(h, "text_count", "{\"path\": \"words.txt\"}",
                                   0, &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "lines: 2\nwords: 3\nbytes: 17\n");
    int64_t v = 0;
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "words", &v), 0);
    CU_ASSERT_EQUAL(v, 3);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(th_harness_run(h, "text_count", "{\"path\": \"a.txt\"}", 0,
                                   &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "lines: 5\nwords: 5\nbytes: 15\n");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(th_harness_run(h, "text_count", "{\"path\": \"sub\"}", 0,
                                   &c),
                    TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "folder"));
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(th_harness_run(h, "text_count",
                                   "{\"path\": \"link_out\"}", 0, &c),
                    TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "outside the allowed root"));
    th_harness_call_free(&c);
}

void th_suite_plugin_text(void)
{
    CU_pSuite s = CU_add_suite("plugin_text", setup, teardown);
    CU_add_test(s, "grep_file", test_grep_file);
    CU_add_test(s, "grep_tree", test_grep_tree);
    CU_add_test(s, "grep_errors", test_grep_errors);
    CU_add_test(s, "count", test_count);
}
