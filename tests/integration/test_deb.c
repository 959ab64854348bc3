/* test_deb.c - `make deb`: the Debian package is built with debhelper
 * (configs/debian/, scripts/deb), holds what an install needs (binary,
 * plugins, headers, pkg-config files, libtoolhost, man pages, the systemd
 * units, the version script), creates the toolhost system user in its
 * postinst, and unpacked into a scratch root (dpkg -x) its binary runs and
 * calls a tool of its own plugins.  Lintian, when installed, reports no
 * error.  Without debhelper the test is a skip that says so, except under
 * CI (CI set in the environment), where it fails.  Skipped under valgrind
 * (the package would be the plain build's, checked by the plain run). */
#include <CUnit/CUnit.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/th_test.h"

static int sh(const char *script, th_test_run *r)
{
    char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
    return th_test_run_argv(argv, NULL, 330, 0, r);
}

static bool have(const char *tool)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", tool);
    th_test_run r;
    sh(cmd, &r);
    bool ok = r.status == 0;
    th_test_run_free(&r);
    return ok;
}

static void test_deb_build_and_unpack(void)
{
    /* a packaging run (objects already built are reused) plus lintian */
    th_test_timeout(360);
    /* Under valgrind the package would be the plain build's again, which
     * the plain stage built and checked, and nothing in it runs under
     * valgrind: 75 s of the valgrind stage for nothing new. */
    if (getenv("TH_VALGRIND"))
        TH_SKIP("under valgrind: the package is the plain build's, built "
                "and checked by the plain run of this suite");
    static const char *const tools[] = {"dh", "dpkg-buildpackage",
                                        "fakeroot", "dpkg-deb"};
    for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++)
        if (!have(tools[i])) {
            if (getenv("CI")) {
                fprintf(stderr, "\n  %s is missing (scripts/install-deps "
                                "installs debhelper, dpkg-dev, fakeroot)\n",
                        tools[i]);
                CU_FAIL("the packaging tools are missing under CI");
                return;
            }
            TH_SKIP("debhelper, dpkg-dev or fakeroot is not installed "
                    "(scripts/install-deps installs them)");
        }
    char *dir = th_test_tmpdir();
    char script[8192];
    snprintf(script, sizeof script,
             "set -e\n"
             "cd '%s'\n"
             "make --no-print-directory -s deb SANITIZER='%s' > '%s/make.out' 2>&1 "
             "|| { cat '%s/make.out'; exit 3; }\n"
             "deb=$(sed -n 's/^deb: //p' '%s/make.out')\n"
             "test -f \"$deb\"\n"
             "dpkg-deb -c \"$deb\" | awk '{print $6}' > '%s/list'\n"
             "for f in ./usr/bin/toolhost ./usr/lib/toolhost/plugins/echo.so "
             "./usr/lib/toolhost/plugins/fs.so ./usr/include/toolhost/plugin.h "
             "./usr/include/toolhost/sdk.h ./usr/lib/libtoolhost.a "
             "./usr/lib/libtoolhost-sdk.a ./usr/share/man/man1/toolhost.1.gz "
             "./usr/share/man/man5/toolhost.yaml.5.gz "
             "./lib/systemd/system/toolhost.service "
             "./lib/systemd/system/toolhost.socket "
             "./usr/share/toolhost/toolhost-plugin.map; do\n"
             "  grep -qx \"$f\" '%s/list' || { echo \"missing: $f\"; exit 4; }\n"
             "done\n"
             "grep -q '/pkgconfig/toolhost-plugin.pc$' '%s/list' || "
             "{ echo 'missing: toolhost-plugin.pc'; exit 4; }\n"
             "grep -q '/pkgconfig/toolhost.pc$' '%s/list' || "
             "{ echo 'missing: toolhost.pc'; exit 4; }\n"
             /* the unit runs the packaged binary as the user postinst makes */
             "dpkg-deb --ctrl-tarfile \"$deb\" | tar -xOf - ./postinst > '%s/postinst'\n"
             "grep -q 'adduser --system' '%s/postinst'\n"
             "dpkg-deb --fsys-tarfile \"$deb\" | tar -xOf - "
             "./lib/systemd/system/toolhost.service > '%s/unit'\n"
             "grep -q '^ExecStart=/usr/bin/toolhost serve' '%s/unit'\n"
             "grep -q '^User=toolhost' '%s/unit'\n"
             /* unpacked into a scratch root: it runs */
             "dpkg -x \"$deb\" '%s/root'\n"
             "'%s/root/usr/bin/toolhost' --version\n"
             "'%s/root/usr/bin/toolhost' call "
             "'%s/root/usr/lib/toolhost/plugins/echo.so' echo text=from-deb\n"
             "echo\n"
             "if command -v lintian >/dev/null 2>&1; then\n"
             "  lintian --tag-display-limit 0 \"$deb\" > '%s/lintian' 2>&1 || true\n"
             "  if grep -q '^E:' '%s/lintian'; then cat '%s/lintian'; exit 5; fi\n"
             "  echo lintian-clean\n"
             "fi\n",
             TH_SOURCE_DIR, TH_SANITIZER, dir, dir, dir, dir, dir, dir, dir,
             dir, dir, dir, dir, dir, dir, dir, dir, dir, dir, dir, dir);
    th_test_run r;
    sh(script, &r);
    if (r.status != 0)
        fprintf(stderr, "\n  make deb / dpkg-deb failed (%d):\n%s\n%s\n",
                r.status, r.out, r.err);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "toolhost " TOOLHOST_VERSION));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "from-deb"));
    th_test_run_free(&r);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_deb(void)
{
    CU_pSuite s = CU_add_suite("deb", NULL, NULL);
    CU_add_test(s, "build_and_unpack", test_deb_build_and_unpack);
}
