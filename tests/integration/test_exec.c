/* test_exec.c - the exec plugin in the real binary: a config with command
 * tools passes `toolhost config check` and `toolhost check --config`; a
 * bad declaration stops the host with a message naming the tool and the
 * key; the host starts and serves with exec loaded.
 *
 * Calling the declared tools through the host needs an ABI hook for
 * tools built in init() (ABI 1.0 reads tools from the static descriptor
 * only; see docs/ops.md); until then the unit suite plugin_exec runs them
 * through the fake host. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"

static char *write_cfg(const char *dir, const char *tools_yaml)
{
    char text[8192];
    snprintf(text, sizeof text,
             "plugins:\n"
             "  - name: exec\n"
             "    path: %s\n"
             "    config:\n"
             "      kill_grace: 500ms\n"
             "      tools:\n%s",
             th_test_build_path("plugins/exec.so"), tools_yaml);
    return th_test_write_file(dir, "cfg.yaml", text, (size_t)-1);
}

static const char good_tools[] =
    "        - name: show_args\n"
    "          description: Prints its arguments, one per line\n"
    "          argv: [\"%s\", \"--\", \"{pattern}\"]\n"
    "          env: {MODE: \"{mode}\"}\n"
    "          env_allow: [LANG]\n"
    "          cwd: /\n"
    "          timeout: 5s\n"
    "          stdout: search_results\n"
    "          read_only: true\n"
    "          idempotent: true\n"
    "          params:\n"
    "            - name: pattern\n"
    "              description: what to look for\n"
    "              required: true\n"
    "            - name: mode\n"
    "              description: how\n"
    "              enum: [fast, slow]\n"
    "              default: fast\n";

static void test_config_check_good(void)
{
    char *dir = th_test_tmpdir();
    char tools[4096];
    snprintf(tools, sizeof tools, good_tools,
             th_test_source_path("tests/fixtures/exec/args.sh"));
    char *cfg = write_cfg(dir, tools);
    th_test_run r;
    th_test_toolhost(&r, "config", "check", cfg, NULL);
    if (r.status != 0)
        fprintf(stderr, "%s\n%s\n", r.out, r.err);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, ": ok:"));
    /* (the plugin's "1 command tool declared" is an info line: the
     * in-process CLI logs warnings and errors only) */
    CU_ASSERT_PTR_NULL(strstr(r.err, "error"));
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

static void test_config_check_bad(void)
{
    char *dir = th_test_tmpdir();
    static const struct {
        const char *tools, *want;
    } cases[] = {
        {"        - name: grep_logs\n"
         "          description: d\n"
         "          argv: [/usr/bin/grep, \"--pattern={pattern}\"]\n"
         "          params: [{name: pattern, description: p}]\n",
         "tool 'grep_logs': key 'argv': element 2: placeholder '{pattern}' "
         "must be a whole element"},
        {"        - name: up\n"
         "          description: d\n"
         "          argv: [uptime]\n",
         "tool 'up': key 'argv': the program 'uptime' must be an absolute "
         "path"},
        {"        - name: gone\n"
         "          description: d\n"
         "          argv: [/no/such/program]\n",
         "tool 'gone': key 'argv': the program '/no/such/program' cannot be "
         "run: No such file or directory"},
        {"        - name: sh\n"
         "          description: d\n"
         "          argv: [/bin/sh]\n"
         "          shell: true\n",
         "tool 'sh': unknown key 'shell'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *cfg = write_cfg(dir, cases[i].tools);
        th_test_run r;
        th_test_toolhost(&r, "config", "check", cfg, NULL);
        CU_ASSERT_NOT_EQUAL(r.status, 0);
        if (!strstr(r.err, cases[i].want) && !strstr(r.out, cases[i].want))
            fprintf(stderr, "\ncase %zu: want %s\nout: %s\nerr: %s\n", i,
                    cases[i].want, r.out, r.err);
        CU_ASSERT(strstr(r.err, cases[i].want) || strstr(r.out, cases[i].want));
        th_test_run_free(&r);
        free(cfg);
    }
    th_test_rmtree(dir);
    free(dir);
}

static void test_plugin_check(void)
{
    char json[2048];
    snprintf(json, sizeof json,
             "{\"tools\": [{\"name\": \"show_args\", \"description\": \"d\", "
             "\"argv\": [\"%s\", \"{p}\"], \"params\": [{\"name\": \"p\", "
             "\"description\": \"p\"}]}]}",
             th_test_source_path("tests/fixtures/exec/args.sh"));
    th_test_run r;
    th_test_toolhost(&r, "check", "--config", json,
                     th_test_build_path("plugins/exec.so"), NULL);
    if (r.status != 0)
        fprintf(stderr, "%s\n%s\n", r.out, r.err);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "0 errors"));
    th_test_run_free(&r);
    /* a bad block is an error of check too */
    th_test_toolhost(&r, "check", "--config",
                     "{\"tools\": [{\"name\": \"x\", \"description\": \"d\", "
                     "\"argv\": [\"/bin/true\", \"{nope}\"]}]}",
                     th_test_build_path("plugins/exec.so"), NULL);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT(strstr(r.out, "'{nope}' names no declared parameter") ||
              strstr(r.err, "'{nope}' names no declared parameter"));
    th_test_run_free(&r);
}

void th_suite_exec(void)
{
    CU_pSuite s = CU_add_suite("exec", NULL, NULL);
    CU_add_test(s, "config_check_good", test_config_check_good);
    CU_add_test(s, "config_check_bad", test_config_check_bad);
    CU_add_test(s, "plugin_check", test_plugin_check);
}
