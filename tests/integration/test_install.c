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
             /* POSIX is declared in the template's build: strdup with
              * -std=c11 and -Werror compiles */
             "printf '#include <string.h>\\nchar *greeter_dup(const char *);\\n"
             "char *greeter_dup(const char *s) { return strdup(s); }\\n' "
             ">> greeter.c\n"
             "make -s CC='cc -Werror' >/dev/null\n"
             /* the version script for C++ plugins is installed, and the
              * C++ example built with it against the install passes
              * check --strict */
             "test -f \"$(pkg-config --variable=version_script "
             "toolhost-plugin)\"\n"
             "cp -r '%s/sdk/examples/cxx' ../cxx\n"
             "make -s -C ../cxx >/dev/null\n"
             "'%s/prefix/bin/toolhost' check --strict ../cxx/cxx_stats.so\n"
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
             TH_SOURCE_DIR, TH_SANITIZER, dir, dir, dir, dir, TH_SOURCE_DIR,
             dir, dir, dir, dir, dir, dir, dir, dir, dir);
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

/* ---- the operator's install: man pages, docs, units, client library --- */

/* A C agent that links the RPC client via `pkg-config toolhost`, calls
 * echo on a running host and prints the result's stdout. */
static const char agent_c[] =
    "#include <msgpack.h>\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "#include <front/rpc.h>\n"
    "int main(int argc, char **argv)\n"
    "{\n"
    "    if (argc != 3) return 2;\n"
    "    th_rpc_client *c;\n"
    "    th_error err;\n"
    "    if (th_rpc_client_connect(argv[1], &c, &err) != 0) {\n"
    "        fprintf(stderr, \"connect: %s\\n\", err.msg);\n"
    "        return 1;\n"
    "    }\n"
    "    msgpack_sbuffer sb;\n"
    "    msgpack_sbuffer_init(&sb);\n"
    "    msgpack_packer pk;\n"
    "    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);\n"
    "    msgpack_pack_map(&pk, 1);\n"
    "    msgpack_pack_str_with_body(&pk, \"text\", 4);\n"
    "    msgpack_pack_str_with_body(&pk, argv[2], strlen(argv[2]));\n"
    "    uint8_t *res = NULL;\n"
    "    size_t len = 0;\n"
    "    int rc = th_rpc_client_call_tool(c, \"echo\", (const uint8_t *)sb.data,\n"
    "                                     sb.size, 10000, NULL, NULL, &res,\n"
    "                                     &len, &err);\n"
    "    msgpack_sbuffer_destroy(&sb);\n"
    "    th_rpc_client_close(c);\n"
    "    if (rc != 0) {\n"
    "        fprintf(stderr, \"call: %s\\n\", err.msg);\n"
    "        return 1;\n"
    "    }\n"
    "    msgpack_unpacked u;\n"
    "    msgpack_unpacked_init(&u);\n"
    "    int ok = 0;\n"
    "    if (msgpack_unpack_next(&u, (const char *)res, len, NULL) ==\n"
    "            MSGPACK_UNPACK_SUCCESS && u.data.type == MSGPACK_OBJECT_MAP)\n"
    "        for (uint32_t i = 0; i < u.data.via.map.size; i++) {\n"
    "            msgpack_object_kv *kv = &u.data.via.map.ptr[i];\n"
    "            if (kv->key.via.str.size == 6 &&\n"
    "                !memcmp(kv->key.via.str.ptr, \"stdout\", 6)) {\n"
    "                printf(\"agent got: %.*s\\n\", (int)kv->val.via.str.size,\n"
    "                       kv->val.via.str.ptr);\n"
    "                ok = 1;\n"
    "            }\n"
    "        }\n"
    "    msgpack_unpacked_destroy(&u);\n"
    "    free(res);\n"
    "    return ok ? 0 : 1;\n"
    "}\n";

/* Installs into a temp prefix: the layout, the man pages (no warnings),
 * the units; a C agent built with `pkg-config toolhost` talks to the
 * installed host; then uninstall leaves no file behind. */
static void test_install_layout_client_uninstall(void)
{
    th_test_timeout(360);
    char *dir = th_test_tmpdir();
    char *agent = th_test_write_file(dir, "agent.c", agent_c, (size_t)-1);
    free(agent);
    const char *san = TH_SANITIZER;
    char sanflags[128] = "";
    if (san[0])
        snprintf(sanflags, sizeof sanflags, "-fsanitize=%s", san);
    char script[16384];
    snprintf(script, sizeof script,
             "set -e\n"
             "P='%s/prefix'\n"
             "cd '%s'\n"
             "make --no-print-directory -s install SANITIZER='%s' PREFIX=\"$P\" "
             ">/dev/null\n"
             "for f in bin/toolhost lib/libtoolhost.a lib/libtoolhost-sdk.a "
             "lib/pkgconfig/toolhost.pc lib/pkgconfig/toolhost-plugin.pc "
             "include/toolhost/host/front/rpc.h include/toolhost/plugin.h "
             "lib/toolhost/plugins/exec.so lib/toolhost/plugins/fs.so "
             "share/man/man1/toolhost.1 share/man/man5/toolhost.yaml.5 "
             "share/doc/toolhost/README.md share/doc/toolhost/ops.md "
             "share/doc/toolhost/AUTHORING.md share/doc/toolhost/example.yaml "
             "share/toolhost/systemd/toolhost.service "
             "share/toolhost/systemd/toolhost.socket; do\n"
             "  test -f \"$P/$f\" || { echo \"missing $f\"; exit 1; }\n"
             "done\n"
             "grep -q \"^ExecStart=$P/bin/toolhost serve\" "
             "\"$P/share/toolhost/systemd/toolhost.service\"\n"
             "for m in man1/toolhost.1 man5/toolhost.yaml.5; do\n"
             "  w=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l \"$P/share/man/$m\" "
             "2>&1 >/dev/null)\n"
             "  test -z \"$w\" || { echo \"man $m: $w\"; exit 1; }\n"
             "  LC_ALL=C.UTF-8 MANWIDTH=80 man -l \"$P/share/man/$m\" | grep -q "
             "'^NAME'\n"
             "done\n"
             "echo man pages ok\n"
             "export PKG_CONFIG_PATH=\"$P/lib/pkgconfig\"\n"
             "cd '%s'\n"
             "cc -std=c11 %s -o agent agent.c $(pkg-config --cflags --libs "
             "toolhost)\n"
             "cat > cfg.yaml <<EOF\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: $P/lib/toolhost/plugins/echo.so\n"
             "EOF\n"
             "\"$P/bin/toolhost\" serve -c cfg.yaml --listen unix:'%s/s.sock' "
             "2>serve.log &\n"
             "host=$!\n"
             "i=0; while [ ! -S s.sock ] && [ $i -lt 200 ]; do sleep 0.05; "
             "i=$((i+1)); done\n"
             "rc=0; ./agent unix:'%s/s.sock' 'hello from an agent' || rc=$?\n"
             "kill $host; wait $host || true\n"
             "test $rc -eq 0\n"
             "cd '%s'\n"
             "make --no-print-directory -s uninstall SANITIZER='%s' "
             "PREFIX=\"$P\" >/dev/null\n"
             "left=$(find \"$P\" -type f -o -type l)\n"
             "test -z \"$left\" || { echo \"left after uninstall: $left\"; "
             "exit 1; }\n"
             "for d in include/toolhost lib/toolhost share/doc/toolhost "
             "share/toolhost; do\n"
             "  test ! -e \"$P/$d\" || { echo \"left folder $d\"; exit 1; }\n"
             "done\n"
             "echo uninstall ok\n",
             dir, TH_SOURCE_DIR, TH_SANITIZER, dir, sanflags, dir, dir,
             TH_SOURCE_DIR, TH_SANITIZER);
    th_test_run r;
    sh(script, &r);
    if (r.status != 0)
        fprintf(stderr, "install script failed (%d):\n%s\n%s\n", r.status,
                r.out, r.err);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "man pages ok\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "agent got: hello from an agent\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "uninstall ok\n"));
    th_test_run_free(&r);
    th_test_rmtree(dir);
    free(dir);
}

/* The shipped unit rates 2.5 or better in `systemd-analyze security`
 * (offline: no running systemd needed).  Skipped where the tool is
 * missing or too old for --offline. */
static void test_systemd_unit_security(void)
{
    th_test_timeout(60);
    char script[4096];
    snprintf(script, sizeof script,
             "command -v systemd-analyze >/dev/null || { echo NO-TOOL; "
             "exit 0; }\n"
             "systemd-analyze security --offline=yes '%s' 2>&1\n",
             th_test_source_path("configs/systemd/toolhost.service"));
    th_test_run r;
    sh(script, &r);
    if (strstr(r.out, "NO-TOOL") ||
        (r.status != 0 && strstr(r.out, "offline"))) {
        th_test_run_free(&r);
        TH_SKIP("systemd-analyze security --offline is not available here");
    }
    CU_ASSERT_EQUAL(r.status, 0);
    const char *p = strstr(r.out, "Overall exposure level for toolhost.service: ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    double score = strtod(p + strlen("Overall exposure level for "
                                     "toolhost.service: "),
                          NULL);
    printf("\n  systemd-analyze security: toolhost.service %.1f\n", score);
    CU_ASSERT(score <= 2.5);
    th_test_run_free(&r);
}

void th_suite_install(void)
{
    CU_pSuite s = CU_add_suite("install", NULL, NULL);
    CU_add_test(s, "install_and_build_out_of_tree",
                test_install_and_build_out_of_tree);
    CU_add_test(s, "install_layout_client_uninstall",
                test_install_layout_client_uninstall);
    CU_add_test(s, "systemd_unit_security", test_systemd_unit_security);
}
