/* test_install.c - `make install` into a temporary prefix, then what a
 * plugin author does with it: `toolhost new`, build against the installed
 * SDK with pkg-config, `toolhost check`, and a call through a config.
 * In a sanitizer build it installs that build (make install SANITIZER=...),
 * so the installed toolhost and SDK run instrumented: the plugin built
 * against them is checked and called under the sanitizers too. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"

static int sh(const char *script, th_test_run *r)
{
    char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
    return th_test_run_argv(argv, NULL, 300, 0, r);
}

static void test_install_and_build_out_of_tree(void)
{
    /* a build and a compile: slower than the default watchdog allows on a
     * busy machine */
    th_test_timeout(360);
    char *dir = th_test_tmpdir();
    char script[16384];
    snprintf(script, sizeof script,
             "set -e\n"
             "cd '%s'\n"
             "make --no-print-directory -s install SANITIZER='%s' PREFIX='%s/prefix' "
             ">/dev/null\n"
             "export PKG_CONFIG_PATH='%s/prefix/lib/pkgconfig'\n"
             "pkg-config --cflags --libs toolhost-plugin\n"
             "cd '%s'\n"
             "'%s/prefix/bin/toolhost' new greeter >/dev/null\n"
             "cd greeter\n"
             "make -s >/dev/null\n"
             "'%s/prefix/bin/toolhost' check ./greeter.so\n"
             "cat > '%s/cfg.yaml' <<EOF\n"
             "plugins:\n"
             "  - name: greeter\n"
             "    path: greeter/greeter.so\n"
             "EOF\n"
             "'%s/prefix/bin/toolhost' call -c '%s/cfg.yaml' greeter_hello "
             "name=installer times=2\n"
             /* ABI 1.1 dev loop: the .so straight, no config */
             "'%s/prefix/bin/toolhost' call ./greeter.so greeter_hello "
             "name=direct\n"
             /* the host refuses times=0 (TH_SDK_RANGE(1, 100)) */
             "if '%s/prefix/bin/toolhost' call ./greeter.so greeter_hello "
             "times=0 2>../refused.txt; then exit 7; fi\n"
             "cat ../refused.txt\n"
             "test -f toolhost.yaml && grep -q 'reload: watch' toolhost.yaml\n"
             "grep -q -- '-Wl,--no-undefined' Makefile\n"
             /* installed: the guide, the template, the test harness */
             "test -f '%s/prefix/share/doc/toolhost/AUTHORING.md'\n"
             "test -f '%s/prefix/share/doc/toolhost/template/plugin.c.in'\n"
             "cat > t.c <<EOF\n"
             "#include <string.h>\n"
             "#include <toolhost/testing.h>\n"
             "const toolhost_plugin *toolhost_plugin_v1(void);\n"
             "int main(void) {\n"
             "    th_sdk_test t; th_sdk_test_call c; char e[256];\n"
             "    if (th_sdk_test_load(&t, toolhost_plugin_v1(), 0, 0, e, 256)) return 1;\n"
             "    int st = th_sdk_test_run_kv(&t, \"greeter_hello\", &c, \"name\", \"unit\", (char *)0);\n"
             "    int ok = st == TOOLHOST_OK && strcmp(c.out, \"hello, unit\\\\n\") == 0;\n"
             "    th_sdk_test_call_free(&c); th_sdk_test_unload(&t);\n"
             "    return ok ? 0 : 2;\n"
             "}\n"
             "EOF\n"
             "cc -o t t.c greeter.c $(pkg-config --cflags --libs toolhost-testing)\n"
             "./t && echo harness-ok\n",
             TH_SOURCE_DIR, TH_SANITIZER, dir, dir, dir, dir, dir, dir, dir, dir,
             dir, dir, dir, dir);
    th_test_run r;
    sh(script, &r);
    if (r.status != 0)
        fprintf(stderr, "install script failed (%d):\n%s\n%s\n", r.status,
                r.out, r.err);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "-ltoolhost-sdk"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "0 errors"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "hello, installer\nhello, installer\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "hello, direct\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "parameter 'times' must be >= 1, got 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "harness-ok\n"));
    th_test_run_free(&r);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_install(void)
{
    CU_pSuite s = CU_add_suite("install", NULL, NULL);
    CU_add_test(s, "install_and_build_out_of_tree",
                test_install_and_build_out_of_tree);
}
