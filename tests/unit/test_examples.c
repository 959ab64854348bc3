/* test_examples.c - the example plugins in other languages
 * (sdk/examples/, built by `make examples`): the C++ one (a class over the
 * SDK, structured output with an output schema) and the Rust SDK's echo
 * (sdk/rust) load with the host's own loader, run, and are held to their
 * declared bounds. */
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

/* The Rust SDK's echo (sdk/rust/examples/echo): its descriptors are
 * static data of the structs toolhost-sys generates from plugin.h with
 * bindgen, so they have the sizes of plugin.h. */
static void rust_echo(void)
{
    if (access(th_test_build_path("examples/rust_echo.so"), R_OK) != 0)
        TH_SKIP("build/examples/rust_echo.so is not built (make examples "
                "needs Debian's cargo, rustc, bindgen and Rust crates: "
                "scripts/install-deps; build/examples/rust.missing says "
                "which is missing)");
    th_harness *h = load("examples/rust_echo.so");
    if (!h)
        return;
    const toolhost_plugin *d = th_harness_plugin(h);
    CU_ASSERT_EQUAL(d->struct_size, sizeof(toolhost_plugin));
    CU_ASSERT_EQUAL(d->tools[0].struct_size, sizeof(toolhost_tool));
    CU_ASSERT_EQUAL(d->tools[0].params[0].struct_size, sizeof(toolhost_param));
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(h, "echo", "{\"text\":\"from Rust\"}", 0,
                                   &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "from Rust");
    th_harness_call_free(&c);
    /* text is required: refused by the host before execute(). */
    CU_ASSERT_EQUAL(th_harness_run(h, "echo", "{}", 0, &c), TH_EARGS);
    th_harness_call_free(&c);
    th_harness_unload(h);
}

void th_suite_examples(void)
{
    CU_pSuite s = CU_add_suite("examples", NULL, NULL);
    CU_add_test(s, "cxx_stats", cxx_stats);
    CU_add_test(s, "cxx_strict_check", cxx_strict_check);
    CU_add_test(s, "rust_echo", rust_echo);
}
