/* test_cli_perm.c - permission policies end to end through the CLI (the
 * toolhost binary as a subprocess, stdin a pipe: no terminal to ask): the
 * perm_tools fixture under `default: ask`, a deny rule by name pattern, an
 * allow rule by flag, an ask rule on needs_permission, the deny default;
 * and --meta printing meta that is not UTF-8. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"

#define RUN(r, ...) th_test_toolhost(&(r), __VA_ARGS__, NULL)

/* Writes a config with the fixture and one toolset "main" whose
 * `permissions:` block is `perms` (indented YAML lines, or ""). */
static char *write_cfg(const char *dir, const char *name, const char *perms)
{
    char text[2048];
    snprintf(text, sizeof text,
             "host:\n"
             "  log_level: error\n"
             "plugins:\n"
             "  - name: perm_tools\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: main\n"
             "    tools: [\"*\"]\n"
             "%s",
             th_test_build_path("fixtures/perm_tools.so"), perms);
    return th_test_write_file(dir, name, text, (size_t)-1);
}

static void expect_denied(th_test_run *r, const char *rule_text)
{
    CU_ASSERT_EQUAL(r->status, 1);
    CU_ASSERT_STRING_EQUAL(r->out, "");
    CU_ASSERT_PTR_NOT_NULL(strstr(r->err, "permission_denied"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r->err, rule_text));
    if (!strstr(r->err, rule_text))
        fprintf(stderr, "want '%s' in: %s\n", rule_text, r->err);
}

/* default: ask, with no terminal: denied unless --yes. */
static void test_default_ask(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_cfg(dir, "ask.yaml",
                          "    permissions:\n"
                          "      default: ask\n");
    th_test_run r;
    RUN(r, "call", "-c", cfg, "perm_rm", "target=a");
    expect_denied(&r, "default (ask) of toolset 'main'");
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "no one can be asked"));
    th_test_run_free(&r);

    RUN(r, "call", "-c", cfg, "--yes", "perm_rm", "target=a");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "perm_rm a\n");
    th_test_run_free(&r);

    /* open world asks too; read-only needs nothing */
    RUN(r, "call", "-c", cfg, "perm_fetch", "target=u");
    expect_denied(&r, "default (ask)");
    th_test_run_free(&r);
    RUN(r, "call", "-c", cfg, "perm_read", "target=b");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "perm_read b\n");
    th_test_run_free(&r);

    /* needs_permission decides per call */
    RUN(r, "call", "-c", cfg, "perm_write", "target=c");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "perm_write c\n");
    th_test_run_free(&r);
    RUN(r, "call", "-c", cfg, "perm_write", "target=c", "force=true");
    expect_denied(&r, "default (ask)");
    th_test_run_free(&r);
    RUN(r, "call", "-c", cfg, "perm_write", "target=c", "force=true", "--yes");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "perm_write c (forced)\n");
    th_test_run_free(&r);

    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* ask_fallback, when a rule asks and no one can be asked (no terminal):
 * deny (the default), allow_read_only (a read-only tool runs, others are
 * denied saying why), error (bad_state, naming what to change). */
static void test_ask_fallback(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_cfg(dir, "ro.yaml",
                          "    ask_fallback: allow_read_only\n"
                          "    permissions:\n"
                          "      rules:\n"
                          "        - match: \"*\"\n"
                          "          action: ask\n");
    th_test_run r;
    RUN(r, "call", "-c", cfg, "perm_read", "target=b");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "perm_read b\n");
    th_test_run_free(&r);
    RUN(r, "call", "-c", cfg, "perm_rm", "target=a");
    expect_denied(&r, "ask_fallback allow_read_only: the tool is not "
                      "read-only");
    th_test_run_free(&r);
    free(cfg);

    cfg = write_cfg(dir, "err.yaml",
                    "    ask_fallback: error\n"
                    "    permissions:\n"
                    "      default: ask\n");
    RUN(r, "call", "-c", cfg, "perm_rm", "target=a");
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_STRING_EQUAL(r.out, "");
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "bad_state"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "cannot be asked"));
    th_test_run_free(&r);
    free(cfg);

    /* deny is the default, and a bad value is a located config error */
    cfg = write_cfg(dir, "bad.yaml",
                    "    ask_fallback: maybe\n"
                    "    permissions:\n"
                    "      default: ask\n");
    RUN(r, "call", "-c", cfg, "perm_rm", "target=a");
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "bad.yaml:9:19:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "allow_read_only"));
    if (!strstr(r.err, "bad.yaml:9:19:"))
        fprintf(stderr, "\n%s\n", r.err);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* Ordered rules: deny by name pattern (even with --yes), allow by flag,
 * ask on needs_permission; the default (deny) for the rest. */
static void test_rules(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_cfg(dir, "rules.yaml",
                          "    permissions:\n"
                          "      rules:\n"
                          "        - match: \"perm_r?\"\n"
                          "          action: deny\n"
                          "        - flag: open_world\n"
                          "          action: allow\n"
                          "        - flags: [needs_permission]\n"
                          "          action: ask\n");
    th_test_run r;
    RUN(r, "call", "-c", cfg, "--yes", "perm_rm", "target=a");
    expect_denied(&r, "rule 1 (match 'perm_r?', action deny) of toolset "
                      "'main' at ");
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "rules.yaml:11:"));
    th_test_run_free(&r);

    /* allowed by the flag rule, no terminal needed */
    RUN(r, "call", "-c", cfg, "perm_fetch", "target=u");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "perm_fetch u\n");
    th_test_run_free(&r);

    /* the pattern does not catch perm_read (needs nothing anyway) */
    RUN(r, "call", "-c", cfg, "perm_read", "target=b");
    CU_ASSERT_EQUAL(r.status, 0);
    th_test_run_free(&r);

    RUN(r, "call", "-c", cfg, "perm_write", "target=c", "force=true");
    expect_denied(&r, "rule 3 (flags needs_permission, action ask)");
    th_test_run_free(&r);
    RUN(r, "call", "-c", cfg, "--yes", "perm_write", "target=c",
        "force=true");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "perm_write c (forced)\n");
    th_test_run_free(&r);
    RUN(r, "call", "-c", cfg, "perm_write", "target=c");
    CU_ASSERT_EQUAL(r.status, 0);
    th_test_run_free(&r);

    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* No permissions block: the default is deny, and --yes does not override
 * a deny. */
static void test_default_deny(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = write_cfg(dir, "deny.yaml", "");
    th_test_run r;
    RUN(r, "call", "-c", cfg, "--yes", "perm_rm", "target=a");
    expect_denied(&r, "default (deny) of toolset 'main'");
    th_test_run_free(&r);
    RUN(r, "call", "-c", cfg, "perm_fetch", "target=u");
    expect_denied(&r, "default (deny)");
    th_test_run_free(&r);
    RUN(r, "call", "-c", cfg, "perm_read", "target=b");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "perm_read b\n");
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* --meta prints meta holding bytes that are not UTF-8 (here a run_code
 * value built with a Lua escape), with U+FFFD in their place. */
static void test_meta_not_utf8(void)
{
    char *dir = th_test_tmpdir();
    char text[1024];
    snprintf(text, sizeof text,
             "host:\n"
             "  log_level: error\n"
             "plugins:\n"
             "  - name: perm_tools\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: main\n"
             "    tools: [perm_read]\n"
             "    run_code: {enabled: true}\n",
             th_test_build_path("fixtures/perm_tools.so"));
    char *cfg = th_test_write_file(dir, "code.yaml", text, (size_t)-1);
    th_test_run r;
    RUN(r, "call", "-c", cfg, "--meta", "run_code",
        "code=return 'a\\255b'");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "\"value\": \"a\xEF\xBF\xBD" "b\""));
    CU_ASSERT_PTR_NULL(strstr(r.err, "not printable"));
    if (!strstr(r.err, "\"value\""))
        fprintf(stderr, "meta: %s\n", r.err);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_cli_perm(void)
{
    CU_pSuite s = CU_add_suite("cli_perm", NULL, NULL);
    CU_add_test(s, "default_ask", test_default_ask);
    CU_add_test(s, "rules", test_rules);
    CU_add_test(s, "ask_fallback", test_ask_fallback);
    CU_add_test(s, "default_deny", test_default_deny);
    CU_add_test(s, "meta_not_utf8", test_meta_not_utf8);
}
