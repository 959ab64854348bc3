/* test_sockpath.c - the default socket address, the checks on a socket's
 * folder (th/sockpath.h) and ${VAR} in host.listen. */
#include <CUnit/CUnit.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/th_test.h"
#include "th/config.h"
#include "front/rpc_config.h"
#include "th/log.h"
#include "front/sockpath.h"

/* Saves and restores XDG_RUNTIME_DIR around a test. */
static char *saved_xdg;
static bool had_xdg;

static void xdg_save(void)
{
    const char *x = getenv("XDG_RUNTIME_DIR");
    had_xdg = x != NULL;
    saved_xdg = x ? strdup(x) : NULL;
}

static void xdg_restore(void)
{
    if (had_xdg)
        setenv("XDG_RUNTIME_DIR", saved_xdg, 1);
    else
        unsetenv("XDG_RUNTIME_DIR");
    free(saved_xdg);
    saved_xdg = NULL;
}

static void test_default_addr(void)
{
    xdg_save();
    char buf[128];
    th_error err;
    setenv("XDG_RUNTIME_DIR", "/run/user/1234/", 1);
    CU_ASSERT_EQUAL(th_sock_default_addr(buf, sizeof buf, &err), 0);
    CU_ASSERT_STRING_EQUAL(buf, "unix:/run/user/1234/toolhost/toolhost.sock");

    /* unset, empty or relative: the next rule */
    const char *nots[] = {NULL, "", "run/user/1"};
    for (size_t i = 0; i < 3; i++) {
        if (nots[i])
            setenv("XDG_RUNTIME_DIR", nots[i], 1);
        else
            unsetenv("XDG_RUNTIME_DIR");
        CU_ASSERT_EQUAL(th_sock_default_addr(buf, sizeof buf, &err), 0);
        if (geteuid() == 0) {
            CU_ASSERT_STRING_EQUAL(buf, "unix:/run/toolhost/toolhost.sock");
        } else {
            char want[64];
            snprintf(want, sizeof want, "unix:/tmp/toolhost-%u/toolhost.sock",
                     (unsigned)geteuid());
            CU_ASSERT_STRING_EQUAL(buf, want);
        }
    }

    /* a user who is not root and has no XDG_RUNTIME_DIR: /tmp/toolhost-UID */
    struct passwd *pw = getpwnam("nobody");
    if (geteuid() == 0 && pw) {
        unsetenv("XDG_RUNTIME_DIR");
        fflush(NULL);
        pid_t pid = fork();
        CU_ASSERT_FATAL(pid >= 0);
        if (pid == 0) {
            if (setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0)
                _exit(10);
            char want[64];
            snprintf(want, sizeof want, "unix:/tmp/toolhost-%u/toolhost.sock",
                     (unsigned)pw->pw_uid);
            _exit(th_sock_default_addr(buf, sizeof buf, &err) == 0 &&
                          strcmp(buf, want) == 0
                      ? 0
                      : 1);
        }
        int st = 0;
        CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
        CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }

    /* too long for a socket: an error that says what to do */
    char longdir[200];
    memset(longdir, 'x', sizeof longdir - 1);
    longdir[0] = '/';
    longdir[sizeof longdir - 1] = '\0';
    setenv("XDG_RUNTIME_DIR", longdir, 1);
    CU_ASSERT_EQUAL(th_sock_default_addr(buf, sizeof buf, &err), TH_ECONFIG);
    CU_ASSERT(strstr(err.msg, "set host.listen or --listen") != NULL);
    xdg_restore();
}

static void test_addr_path(void)
{
    const char *p;
    th_error err;
    CU_ASSERT_EQUAL(th_sock_addr_path("unix:/a/b.sock", &p, &err), 0);
    CU_ASSERT_STRING_EQUAL(p, "/a/b.sock");
    CU_ASSERT_EQUAL(th_sock_addr_path("/a/b.sock", &p, &err), 0);
    CU_ASSERT_EQUAL(th_sock_addr_path("tcp:1.2.3.4:5", &p, &err), TH_ECONFIG);
    CU_ASSERT(strstr(err.msg, "use unix:PATH") != NULL);
    CU_ASSERT_EQUAL(th_sock_addr_path("unix:", &p, &err), TH_ECONFIG);
    CU_ASSERT(strstr(err.msg, "empty path") != NULL);
    CU_ASSERT_EQUAL(th_sock_addr_path("", &p, &err), TH_ECONFIG);
    char addr[160] = "unix:/";
    memset(addr + 6, 'a', 120);
    addr[126] = '\0';
    CU_ASSERT_EQUAL(th_sock_addr_path(addr, &p, &err), TH_ECONFIG);
    CU_ASSERT(strstr(err.msg, "is 121 bytes long") != NULL &&
              strstr(err.msg, "at most 107") != NULL);
    /* 107 bytes fit */
    addr[5 + 107] = '\0';
    CU_ASSERT_EQUAL(th_sock_addr_path(addr, &p, &err), 0);
}

static char *addr_in(const char *dir, const char *rel)
{
    size_t n = strlen(dir) + strlen(rel) + 8;
    char *s = malloc(n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    snprintf(s, n, "unix:%s/%s", dir, rel);
    return s;
}

static unsigned mode_of(const char *dir, const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    struct stat st;
    return lstat(p, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0xffff;
}

static void test_prepare(void)
{
    int level = th_log_get_level();
    th_log_set_level(TOOLHOST_LOG_ERROR);
    char *d = th_test_tmpdir();
    th_error err;

    /* a missing folder is created 0700 (0711 when the socket is shared) */
    char *a = addr_in(d, "run/th.sock");
    CU_ASSERT_EQUAL(th_sock_prepare(a, true, 0600, &err), 0);
    CU_ASSERT_EQUAL(mode_of(d, "run"), 0700);
    /* ... and is fine the second time */
    CU_ASSERT_EQUAL(th_sock_prepare(a, true, 0600, &err), 0);
    free(a);
    a = addr_in(d, "shared/th.sock");
    CU_ASSERT_EQUAL(th_sock_prepare(a, false, 0660, &err), 0);
    CU_ASSERT_EQUAL(mode_of(d, "shared"), 0711);
    free(a);

    /* a missing parent: said plainly */
    a = addr_in(d, "no/such/th.sock");
    CU_ASSERT_EQUAL(th_sock_prepare(a, false, 0600, &err), TH_ECONFIG);
    CU_ASSERT(strstr(err.msg, "/no/such does not exist") != NULL &&
              strstr(err.msg, "/no is missing") != NULL);
    free(a);

    /* writable by others: refused, strict or not */
    char p[512];
    snprintf(p, sizeof p, "%s/open", d);
    CU_ASSERT_EQUAL_FATAL(mkdir(p, 0700), 0);
    chmod(p, 0777);
    a = addr_in(d, "open/th.sock");
    CU_ASSERT_EQUAL(th_sock_prepare(a, true, 0600, &err), TH_ECONFIG);
    CU_ASSERT(strstr(err.msg, "refusing to use socket folder") != NULL &&
              strstr(err.msg, "writable by everyone (mode 0777)") != NULL);
    CU_ASSERT_EQUAL(th_sock_prepare(a, false, 0600, &err), TH_ECONFIG);
    chmod(p, 0770);
    CU_ASSERT_EQUAL(th_sock_prepare(a, false, 0600, &err), TH_ECONFIG);
    CU_ASSERT(strstr(err.msg, "writable by its group") != NULL);
    /* sticky and shared (like /tmp): allowed for an explicit address with
     * a warning, never for the default folder */
    chmod(p, 01777);
    CU_ASSERT_EQUAL(th_sock_prepare(a, false, 0600, &err), 0);
    CU_ASSERT_EQUAL(th_sock_prepare(a, true, 0600, &err), TH_ECONFIG);
    free(a);

    /* a symbolic link in place of the default folder */
    snprintf(p, sizeof p, "%s/link", d);
    char target[512];
    snprintf(target, sizeof target, "%s/run", d);
    CU_ASSERT_EQUAL_FATAL(symlink(target, p), 0);
    a = addr_in(d, "link/th.sock");
    CU_ASSERT_EQUAL(th_sock_prepare(a, true, 0600, &err), TH_ECONFIG);
    CU_ASSERT(strstr(err.msg, "symbolic link") != NULL);
    CU_ASSERT_EQUAL(th_sock_prepare(a, false, 0600, &err), 0);
    free(a);

    /* a file where the folder should be */
    free(th_test_write_file(d, "file", "x", (size_t)-1));
    a = addr_in(d, "file/th.sock");
    CU_ASSERT_EQUAL(th_sock_prepare(a, false, 0600, &err), TH_ECONFIG);
    CU_ASSERT(strstr(err.msg, "is not a folder") != NULL);
    free(a);

    /* owned by another user: refused (root only can make one) */
    struct passwd *pw = getpwnam("nobody");
    if (geteuid() == 0 && pw) {
        snprintf(p, sizeof p, "%s/theirs", d);
        CU_ASSERT_EQUAL_FATAL(mkdir(p, 0700), 0);
        CU_ASSERT_EQUAL_FATAL(chown(p, pw->pw_uid, pw->pw_gid), 0);
        a = addr_in(d, "theirs/th.sock");
        char want[64];
        snprintf(want, sizeof want, "owned by uid %u, not by this host's uid 0",
                 (unsigned)pw->pw_uid);
        CU_ASSERT_EQUAL(th_sock_prepare(a, true, 0600, &err), TH_ECONFIG);
        CU_ASSERT(strstr(err.msg, want) != NULL);
        CU_ASSERT_EQUAL(th_sock_prepare(a, false, 0600, &err), TH_ECONFIG);
        free(a);
    }
    th_test_rmtree(d);
    free(d);
    th_log_set_level(level);
}

/* host.listen: ${VAR} expanded with the config's expander, relative paths
 * resolved, a path too long for a socket refused at load time. */
static void test_config_listen(void)
{
    th_config *cfg = NULL;
    th_error err;
    setenv("TH_TEST_SOCKDIR", "/run/user/77", 1);
    const char *y = "host:\n  listen: unix:${TH_TEST_SOCKDIR}/toolhost/th.sock\n";
    CU_ASSERT_EQUAL_FATAL(
        th_config_parse("t.yaml", "/cfg", y, strlen(y), &cfg, &err), 0);
    CU_ASSERT_STRING_EQUAL(th_rpc_config(cfg)->listen,
                           "unix:/run/user/77/toolhost/th.sock");
    th_config_free(cfg);
    cfg = NULL;
    y = "host:\n  listen: unix:${TH_TEST_NO_SUCH_VAR_X:-run}/th.sock\n";
    CU_ASSERT_EQUAL_FATAL(
        th_config_parse("t.yaml", "/cfg", y, strlen(y), &cfg, &err), 0);
    CU_ASSERT_STRING_EQUAL(th_rpc_config(cfg)->listen, "unix:/cfg/run/th.sock");
    th_config_free(cfg);
    cfg = NULL;
    y = "host:\n  listen: unix:${TH_TEST_NO_SUCH_VAR_X}/th.sock\n";
    CU_ASSERT_NOT_EQUAL(
        th_config_parse("t.yaml", "/cfg", y, strlen(y), &cfg, &err), 0);
    CU_ASSERT(strstr(err.msg, "t.yaml:2:") != NULL &&
              strstr(err.msg, "'TH_TEST_NO_SUCH_VAR_X' is not set") != NULL);
    char text[300];
    char longp[121];
    memset(longp, 'p', 120);
    longp[120] = '\0';
    snprintf(text, sizeof text, "host:\n  listen: unix:/%s\n", longp);
    CU_ASSERT_NOT_EQUAL(
        th_config_parse("t.yaml", "/cfg", text, strlen(text), &cfg, &err), 0);
    CU_ASSERT(strstr(err.msg, "t.yaml:2:11: 'listen': the socket path is 121 "
                              "bytes long") != NULL);
    unsetenv("TH_TEST_SOCKDIR");
}

void th_suite_sockpath(void)
{
    CU_pSuite s = CU_add_suite("sockpath", NULL, NULL);
    CU_add_test(s, "default_addr", test_default_addr);
    CU_add_test(s, "addr_path", test_addr_path);
    CU_add_test(s, "prepare", test_prepare);
    CU_add_test(s, "config_listen", test_config_listen);
}
