/* test_examples.c - the example plugins in other languages
 * (sdk/examples/, built by `make examples`): the C++ one (a class over the
 * SDK, structured output with an output schema) and the Rust one
 * (#[repr(C)] mirrors of plugin.h, std only) load with the host's own
 * loader, run, and are held to their declared bounds. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/plugin_harness.h"
#include "common/th_test.h"
#include "th/tool.h"

static th_harness *load(const char *rel)
{
    const char *path = th_test_build_path(rel);
    if (access(path, R_OK) != 0)
        return NULL;
    char err[1024];
    th_harness *h = th_harness_load(path, NULL, err, sizeof err);
    if (!h)
        fprintf(stderr, "\n  %s: %s\n", rel, err);
    CU_ASSERT_PTR_NOT_NULL(h);
    return h;
}

static void cxx_stats(void)
{
    if (access(th_test_build_path("examples/cxx_stats.so"), R_OK) != 0)
        TH_SKIP("build/examples/cxx_stats.so is not built (make examples)");
    th_harness *h = load("examples/cxx_stats.so");
    if (!h)
        return;
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(h, "cxx_stats_summary",
                                   "{\"values\":[1,2,3.5]}", 0, &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "{\"count\":3,\"sum\":6.5,"
                                               "\"mean\":2.1666666666666665}");
    /* What it wrote matches its own output schema. */
    const toolhost_plugin *d = th_harness_plugin(h);
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_plugin_builtin(d, &p, &e), 0);
    CU_ASSERT_STRING_EQUAL(p->tools[0].title, "Summary statistics");
    CU_ASSERT_EQUAL(th_validate_output(&p->tools[0], c.out.data, c.out.len,
                                       &e),
                    0);
    th_plugin_unref(p);
    th_harness_call_free(&c);
    /* min_items 1: refused by the host before execute(). */
    CU_ASSERT_EQUAL(th_harness_run(h, "cxx_stats_summary", "{\"values\":[]}",
                                   0, &c),
                    TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verr, "parameter 'values' must have at "
                                          "least 1 items, has 0"));
    th_harness_call_free(&c);
    th_harness_unload(h);
}

/* The C++ example passes its own lint: linked with the SDK's version
 * script (sdk/toolhost-plugin.map) it exports the entry symbol alone, not
 * the std::vector instances it uses, so `check --strict` has no warning. */
static void cxx_strict_check(void)
{
    const char *so = th_test_build_path("examples/cxx_stats.so");
    if (access(so, R_OK) != 0)
        TH_SKIP("build/examples/cxx_stats.so is not built (make examples)");
    th_test_run r;
    CU_ASSERT_EQUAL_FATAL(th_test_toolhost(&r, "check", "--strict", so, NULL),
                          0);
    if (r.status != 0)
        fprintf(stderr, "\n  toolhost check --strict %s:\n%s%s", so, r.out,
                r.err);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "0 errors, 0 warnings"));
    CU_ASSERT_PTR_NULL(strstr(r.out, "besides the entry symbol"));
    th_test_run_free(&r);
}

static void rust_hello(void)
{
    if (access(th_test_build_path("examples/rust_hello.so"), R_OK) != 0)
        TH_SKIP("build/examples/rust_hello.so is not built (make examples "
                "needs rustc on the PATH)");
    th_harness *h = load("examples/rust_hello.so");
    if (!h)
        return;
    const toolhost_plugin *d = th_harness_plugin(h);
    /* Its #[repr(C)] structs have the sizes of plugin.h. */
    CU_ASSERT_EQUAL(d->struct_size, sizeof(toolhost_plugin));
    CU_ASSERT_EQUAL(d->tools[0].struct_size, sizeof(toolhost_tool));
    CU_ASSERT_EQUAL(d->tools[0].params[0].struct_size, sizeof(toolhost_param));
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(h, "rust_hello_greet", "{\"name\":\"you\"}",
                                   0, &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "hello from Rust, you\n");
    th_harness_call_free(&c);
    CU_ASSERT_EQUAL(th_harness_run(h, "rust_hello_greet", NULL, 0, &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "hello from Rust, world\n");
    th_harness_call_free(&c);
    CU_ASSERT_EQUAL(th_harness_run(h, "rust_hello_greet", "{\"name\":\"\"}",
                                   0, &c),
                    TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verr, "at least 1 characters"));
    th_harness_call_free(&c);
    th_harness_unload(h);
}

void th_suite_examples(void)
{
    CU_pSuite s = CU_add_suite("examples", NULL, NULL);
    CU_add_test(s, "cxx_stats", cxx_stats);
    CU_add_test(s, "cxx_strict_check", cxx_strict_check);
    CU_add_test(s, "rust_hello", rust_hello);
}
