/* test_dl_go.c - the loader's one-Go-runtime rules (host/core/plugins/dl_go.c),
 * white-box and without running Go code: a Go object is told from its
 * file (the Go build-id note, kept when the section table is gone; the
 * .go.buildinfo section), a C object is not; the claim lets one object in
 * (and the same file again), refuses another with the words of a reload
 * or of a second plugin, and is given back when dlopen() failed. */
#include <CUnit/CUnit.h>
#include <elf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/th_test.h"
#include "plugins/dl_go.h"

static const char *go_so(void)
{
    return th_test_build_path("examples/go_echo.so");
}

static int open_ro(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CU_ASSERT_FATAL(fd >= 0);
    return fd;
}

static void test_detect(void)
{
    if (access(go_so(), R_OK) != 0)
        TH_SKIP("build/examples/go_echo.so is not built (no Go toolchain: "
                "sdk/go/sdk.mk)");
    int fd = open_ro(go_so());
    CU_ASSERT(th_dl_go_fd(fd));
    /* Without its section table (as an object stripped to the bone): the
     * note in the PT_NOTE segment still tells. */
    size_t n = 0;
    char *bytes = th_test_read_file(go_so(), &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bytes);
    Elf64_Ehdr eh;
    memcpy(&eh, bytes, sizeof eh);
    eh.e_shoff = 0;
    eh.e_shnum = 0;
    eh.e_shstrndx = 0;
    memcpy(bytes, &eh, sizeof eh);
    char *dir = th_test_tmpdir();
    char *noshdr = th_test_write_file(dir, "noshdr.so", bytes, n);
    int fd2 = open_ro(noshdr);
    CU_ASSERT(th_dl_go_fd(fd2));
    close(fd2);
    th_test_rmtree(dir);
    free(dir);
    free(noshdr);
    free(bytes);
    /* Without the note (its owner renamed): the section still tells. */
    bytes = th_test_read_file(go_so(), &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bytes);
    char *p = memmem(bytes, n > 4096 ? 4096 : n, "Go\0\0", 4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    p[0] = 'X';
    dir = th_test_tmpdir();
    char *nonote = th_test_write_file(dir, "nonote.so", bytes, n);
    fd2 = open_ro(nonote);
    CU_ASSERT(th_dl_go_fd(fd2));
    close(fd2);
    th_test_rmtree(dir);
    free(dir);
    free(nonote);
    free(bytes);
    close(fd);
    /* C objects and other files are not Go. */
    fd = open_ro(th_test_build_path("plugins/echo.so"));
    CU_ASSERT(!th_dl_go_fd(fd));
    close(fd);
    fd = open_ro(th_test_source_path("README.md"));
    CU_ASSERT(!th_dl_go_fd(fd));
    close(fd);
}

static void test_claim(void)
{
    /* Any two files do: the claim looks at identity, not content. */
    int a = open_ro(th_test_build_path("plugins/echo.so"));
    int a2 = open_ro(th_test_build_path("plugins/echo.so"));
    int b = open_ro(th_test_source_path("README.md"));
    th_error e;
    bool fresh = false;
    CU_ASSERT_EQUAL(th_dl_go_claim(a, "/x/a.so", "echo", 1, &fresh, &e), 0);
    CU_ASSERT(fresh);
    /* the same file again: the same object */
    CU_ASSERT_EQUAL(th_dl_go_claim(a2, "/x/a.so", "other", 1, &fresh, &e), 0);
    CU_ASSERT(!fresh);
    /* a new build of the same plugin: a reload */
    CU_ASSERT_EQUAL(th_dl_go_claim(b, "/x/a.so", "echo", 2, &fresh, &e),
                    TH_ELOAD);
    CU_ASSERT(!fresh);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "/x/a.so: refused: a reload of the "
                                         "in-process Go plugin 'echo' would "
                                         "load a second Go runtime"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "isolation: process"));
    /* another plugin */
    CU_ASSERT_EQUAL(th_dl_go_claim(b, "/x/b.so", "tools", 1, &fresh, &e),
                    TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "/x/b.so: refused: it holds a Go "
                                         "runtime and this process already "
                                         "runs the one of /x/a.so (plugin "
                                         "'echo')"));
    /* dlopen() of the first failed: the claim goes, b may come in */
    th_dl_go_unclaim();
    CU_ASSERT_EQUAL(th_dl_go_claim(b, "/x/b.so", "tools", 1, &fresh, &e), 0);
    CU_ASSERT(fresh);
    /* and gone again: this runner process holds no claim after the test
     * (that a claim stays once its object is opened is shown by the
     * integration suite sdk_go: a reload after the first load) */
    th_dl_go_unclaim();
    CU_ASSERT_EQUAL(th_dl_go_claim(a, "/x/a.so", "echo", 1, &fresh, &e), 0);
    CU_ASSERT(fresh);
    th_dl_go_unclaim();
    close(a);
    close(a2);
    close(b);
}

void th_suite_dl_go(void)
{
    CU_pSuite s = CU_add_suite("dl_go", NULL, NULL);
    CU_add_test(s, "detect", test_detect);
    CU_add_test(s, "claim", test_claim);
}
