/* test_check_child.c - `toolhost check` runs the plugin's code in a child
 * process: a crash in a constructor or in init(), or an init() that never
 * returns, is reported with words and exit status 1 instead of ending
 * check (or hanging it); the child runs without root, new privileges or
 * core dumps; a good plugin's report is unchanged; the path is checked
 * before any plugin code runs.  Each case runs the real build/toolhost. */
#include <CUnit/CUnit.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"

#define RUN(r, ...) th_test_toolhost(&(r), __VA_ARGS__, NULL)

static char *fixture(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "fixtures/%s.so", name);
    char *p = strdup(th_test_build_path(rel));
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    return p;
}

/* Runs check on a fixture; expects exit 1 and `want` in the report. */
static void expect_check(const char *name, const char *want)
{
    char *f = fixture(name);
    th_test_run r;
    RUN(r, "check", f);
    CU_ASSERT_EQUAL(r.status, 1);
    char line[1200];
    snprintf(line, sizeof line, "%s: %s\n", f, want);
    if (!strstr(r.out, line))
        fprintf(stderr, "\ncheck %s: status %d, said:\n%s%s\n", name,
                r.status, r.out, r.err);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, line));
    th_test_run_free(&r);
    free(f);
}

/* Every problem in one run, with the count; lint warnings for
 * descriptions and names. */
static void test_every_problem_and_lint(void)
{
    expect_check("bad_table4", "not loadable: 6 problems");
    expect_check("bad_table4", "tool 'lister': parameter 'q': pattern '(' "
                               "does not compile: missing closing "
                               "parenthesis at offset 1");
    char *f = fixture("check_lint");
    th_test_run r;
    RUN(r, "check", f);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "warning: tool 'check_lint_multi' "
                                         "has a description of more than "
                                         "one line"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "warning: tool 'check_lint_long' has "
                                         "a description of 301 characters"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "warning: tool 'other_name' does not "
                                         "start with the plugin's name "
                                         "('check_lint_...')"));
    CU_ASSERT_PTR_NULL(strstr(r.out, "tool 'check_lint' does not"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "5 tools, 0 errors, 3 warnings"));
    CU_ASSERT_PTR_NULL(strstr(r.out, "nothing on stderr"));
    th_test_run_free(&r);
    /* --strict: the read-only tool runs once; a silent failure is a
     * warning, and warnings fail the check. */
    RUN(r, "check", "--strict", f);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "warning: tool 'check_lint_quiet' "
                                         "failed with nothing on stderr"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "5 tools, 0 errors, 4 warnings"));
    th_test_run_free(&r);
    free(f);
}

static void test_init_segfault(void)
{
    expect_check("check_crash_init", "init crashed with SIGSEGV");
}

static void test_constructor_abort(void)
{
    expect_check("check_crash_ctor", "constructor crashed with SIGABRT");
}

static void test_init_hangs(void)
{
    char *f = fixture("check_hang_init");
    th_test_run r;
    time_t t0 = time(NULL);
    RUN(r, "check", "--timeout", "1", f);
    time_t took = time(NULL) - t0;
    CU_ASSERT_EQUAL(r.status, 1);
    char line[1200];
    snprintf(line, sizeof line,
             "%s: init did not return within 1 s (the check killed it)\n", f);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, line));
    CU_ASSERT(took * 1000 <= (time_t)th_test_ms(4000));
    th_test_run_free(&r);
    RUN(r, "check", "--timeout", "0", f);
    CU_ASSERT_EQUAL(r.status, 2);
    th_test_run_free(&r);
    free(f);
}

/* Who runs the plugin's code: never root when a user 'nobody' exists, no
 * new privileges, no core dumps. */
static void test_child_limits(void)
{
    char *f = fixture("check_whoami");
    th_test_run r;
    RUN(r, "check", f);
    CU_ASSERT_EQUAL(r.status, 1);
    struct passwd *pw = getpwnam("nobody");
    char want[1300];
    if (geteuid() == 0 && pw)
        snprintf(want, sizeof want, "%s: init failed: uid %u euid %u nnp 1 "
                 "core 0\n", f, (unsigned)pw->pw_uid, (unsigned)pw->pw_uid);
    else
        snprintf(want, sizeof want, "%s: init failed: uid %u euid %u nnp 1 "
                 "core 0\n", f, (unsigned)getuid(), (unsigned)geteuid());
    if (!strstr(r.out, want))
        fprintf(stderr, "\ncheck whoami said:\n%s%s\n", r.out, r.err);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, want));
    th_test_run_free(&r);
    free(f);
}

/* The shipped plugin: exit 0 and the same report as when check ran it in
 * its own process. */
static void test_good_unchanged(void)
{
    const char *echo = th_test_build_path("plugins/echo.so");
    th_test_run r;
    RUN(r, "check", echo);
    CU_ASSERT_EQUAL(r.status, 0);
    char want[4000];
    snprintf(want, sizeof want,
             "%s: note: tool 'echo' has no long description (usage, "
             "warnings, examples help a model use it)\n"
             "%s: note: tool 'echo_async' has no long description (usage, "
             "warnings, examples help a model use it)\n"
             "%s: plugin echo 1.0.0, 2 tools, 0 errors, 0 warnings\n",
             echo, echo, echo);
    CU_ASSERT_STRING_EQUAL(r.out, want);
    /* valgrind does not run seccomp filters: under it, check says so */
    if (!getenv("TH_VALGRIND")) {
        CU_ASSERT_STRING_EQUAL(r.err, "");
    }
    th_test_run_free(&r);
    /* A failing init() is still an ordinary error. */
    char *f = fixture("bad_init_fails");
    RUN(r, "check", f);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "init failed: database unreachable"));
    /* (its tool init_fails_tool draws the missing-prefix warning) */
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "1 error, 1 warning\n"));
    CU_ASSERT_PTR_NULL(strstr(r.out, "failed: 1 problem"));
    th_test_run_free(&r);
    free(f);
    /* A file that is not a plugin: the loader's words, nothing more (and
     * the file named as given, not as the child opened it). */
    char *dir = th_test_tmpdir();
    char *t = th_test_write_file(dir, "text.so",
                                 "not an ELF file, but long enough for the "
                                 "dynamic loader to read a whole ELF "
                                 "header from it and say so\n",
                                 (size_t)-1);
    RUN(r, "check", t);
    CU_ASSERT_EQUAL(r.status, 1);
    snprintf(want, sizeof want,
             "%s: not a shared object: %s: invalid ELF header\n"
             "%s: not loadable: 1 problem\n",
             t, t, t);
    CU_ASSERT_STRING_EQUAL(r.out, want);
    th_test_run_free(&r);
    free(t);
    th_test_rmtree(dir);
    free(dir);
}

/* The path is checked by the parent, before any plugin code: a link in a
 * world-writable folder is refused and nothing runs. */
static void test_path_refused(void)
{
    char *dir0 = th_test_tmpdir();
    char *dir = realpath(dir0, NULL);
    free(dir0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    char open_[1100], link[1200];
    snprintf(open_, sizeof open_, "%s/open", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(open_, 0755), 0);
    chmod(open_, 0777);
    snprintf(link, sizeof link, "%s/plug.so", open_);
    char *f = fixture("check_crash_ctor");
    CU_ASSERT_EQUAL_FATAL(symlink(f, link), 0);
    th_test_run r;
    RUN(r, "check", link);
    CU_ASSERT_EQUAL(r.status, 1);
    char want[3000];
    snprintf(want, sizeof want,
             "%s: refused: the folder %s is writable by others (mode 0777)",
             link, open_);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, want));
    CU_ASSERT_PTR_NULL(strstr(r.out, "crashed"));
    th_test_run_free(&r);
    /* --allow-insecure: checked, and the crash reported. */
    RUN(r, "check", "--allow-insecure", link);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "constructor crashed with SIGABRT"));
    th_test_run_free(&r);
    free(f);
    th_test_rmtree(dir);
    free(dir);
}

/* The child that loads the plugin sees no environment but PATH and LANG
 * (not the caller's TOOLHOST_MCP_TOKEN), opens no internet socket (the
 * isolated workers' seccomp filter, network off), and nothing it started
 * outlives `check`: a double-forked daemon is gone when check returns
 * (check is the subreaper of what the plugin starts, and kills it). */
static void test_contained(void)
{
    char *f = fixture("check_hostile");
    setenv("TOOLHOST_MCP_TOKEN", "secret-of-the-caller", 1);
    th_test_run r;
    RUN(r, "check", f);
    unsetenv("TOOLHOST_MCP_TOKEN");
    CU_ASSERT_EQUAL(r.status, 1);
    const char *m = strstr(r.out, "init failed: token ");
    if (!m)
        fprintf(stderr, "\ncheck said:\n%s%s\n", r.out, r.err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char tok[16] = "";
    long daemon = -2;
    CU_ASSERT_EQUAL(sscanf(m, "init failed: token %15s ", tok), 1);
    CU_ASSERT_STRING_EQUAL(tok, "unset");
    /* the socket refused: "inet <strerror>", not "inet ok" (valgrind
     * runs no seccomp filter: the child warns and the socket opens) */
    CU_ASSERT_PTR_NOT_NULL(strstr(m, " inet "));
    if (getenv("TH_VALGRIND")) {
        CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "cannot load the seccomp filter"));
    } else {
        CU_ASSERT_PTR_NULL(strstr(m, " inet ok "));
    }
    const char *d = strstr(m, " daemon ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_EQUAL(sscanf(d, " daemon %ld", &daemon), 1);
    CU_ASSERT(daemon > 0);
    if (daemon > 0) {
        /* gone, not even a zombie: check reaped it */
        char path[64];
        snprintf(path, sizeof path, "/proc/%ld", daemon);
        struct stat st;
        int alive = stat(path, &st) == 0;
        CU_ASSERT_FALSE(alive);
        if (alive)
            kill((pid_t)daemon, SIGKILL);
    }
    th_test_run_free(&r);
    free(f);
}

/* The directory of this process's cgroup v2 (mountinfo's cgroup2 mount +
 * the `0::` line), when root may write there; false otherwise. */
static bool cg_writable(char *dir, size_t cap)
{
    char mnt[512] = "", own[512] = "", line[1200];
    FILE *f = fopen("/proc/self/mountinfo", "re");
    while (f && !mnt[0] && fgets(line, sizeof line, f)) {
        char r[512], m[512];
        const char *dash = strstr(line, " - ");
        if (dash && strncmp(dash + 3, "cgroup2 ", 8) == 0 &&
            sscanf(line, "%*s %*s %*s %511s %511s", r, m) == 2 &&
            strcmp(r, "/") == 0)
            snprintf(mnt, sizeof mnt, "%s", m);
    }
    if (f)
        fclose(f);
    f = fopen("/proc/self/cgroup", "re");
    while (f && !own[0] && fgets(line, sizeof line, f))
        if (strncmp(line, "0::", 3) == 0) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(own, sizeof own, "%.500s", line + 3);
        }
    if (f)
        fclose(f);
    if (!mnt[0] || !own[0] || geteuid() != 0)
        return false;
    snprintf(dir, cap, "%s%s", mnt, strcmp(own, "/") == 0 ? "" : own);
    return access(dir, W_OK) == 0;
}

/* `daemon P cgroup C` from check_daemon's init(); false when absent. */
static bool daemon_report(const th_test_run *r, long *pid, char *cg,
                          size_t cap)
{
    const char *m = strstr(r->out, "init failed: daemon ");
    char fmt[64];
    snprintf(fmt, sizeof fmt, "init failed: daemon %%ld cgroup %%%zus",
             cap - 1);
    if (!m || sscanf(m, fmt, pid, cg) != 2) {
        fprintf(stderr, "\ncheck said:\n%s%s\n", r->out, r->err);
        return false;
    }
    return true;
}

/* The daemon is gone, not even a zombie (check reaped it). */
static void expect_gone(long pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld", pid);
    struct stat st;
    int alive = stat(path, &st) == 0;
    CU_ASSERT_FALSE(alive);
    if (alive)
        kill((pid_t)pid, SIGKILL);
}

/* As root on a writable cgroup2 hierarchy, check forks the plugin's
 * child into a cgroup of its own (<own>/toolhost-<check pid>/check-<check
 * pid>): a double-forked setsid() daemon that closed every fd is in it,
 * is killed with it, and the cgroup and check's subtree are gone when
 * check returns; the log says so.  Before: no cgroup, the subreaper
 * alone (no "contained by a cgroup" line). */
static void test_cgroup(void)
{
    char own[1024];
    if (!cg_writable(own, sizeof own)) {
        TH_SKIP("needs root and a writable cgroup2 hierarchy");
    }
    char *f = fixture("check_daemon");
    th_test_run r;
    RUN(r, "check", "--log-level", "info", f);
    CU_ASSERT_EQUAL(r.status, 1);
    long daemon = -1;
    char cg[1024] = "";
    CU_ASSERT_FATAL(daemon_report(&r, &daemon, cg, sizeof cg));
    CU_ASSERT(daemon > 0);
    const char *l = strstr(r.err, "contained by a cgroup of its own, ");
    if (!l)
        fprintf(stderr, "\ncheck said:\n%s%s\n", r.out, r.err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    char dir[1200] = "";
    CU_ASSERT_EQUAL(sscanf(l, "contained by a cgroup of its own, %1199[^,]",
                           dir), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(l, ", killed whole and removed; and by "
                                     "check as the subreaper of its tree"));
    /* the host's line about workers is not check's */
    CU_ASSERT_PTR_NULL(strstr(r.err, "isolated workers"));
    /* the cage is <own>/toolhost-P/check-P, and the daemon was in it */
    char want[1300];
    snprintf(want, sizeof want, "%s/toolhost-", own);
    CU_ASSERT_EQUAL(strncmp(dir, want, strlen(want)), 0);
    size_t dl = strlen(dir), cl = strlen(cg);
    CU_ASSERT(cl > 1 && dl >= cl && strcmp(dir + dl - cl, cg) == 0);
    if (daemon > 0)
        expect_gone(daemon);
    struct stat st;
    CU_ASSERT_NOT_EQUAL(stat(dir, &st), 0);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    CU_ASSERT_NOT_EQUAL(stat(dir, &st), 0); /* toolhost-P: at exit */
    th_test_run_free(&r);
    free(f);
}

/* No cgroup (TOOLHOST_CGROUP names a mount that does not exist): check
 * says why, and its subreaper still ends the daemon.  Anywhere. */
static void test_cgroup_off(void)
{
    char *f = fixture("check_daemon");
    th_test_run r;
    setenv("TOOLHOST_CGROUP", "/nonexistent/toolhost-test", 1);
    RUN(r, "check", "--log-level", "info", f);
    unsetenv("TOOLHOST_CGROUP");
    CU_ASSERT_EQUAL(r.status, 1);
    long daemon = -1;
    char cg[1024] = "";
    CU_ASSERT_FATAL(daemon_report(&r, &daemon, cg, sizeof cg));
    CU_ASSERT(daemon > 0);
    if (!strstr(r.err, "contained by check as the subreaper of its tree "
                       "(every process it started was killed), no cgroup: "))
        fprintf(stderr, "\ncheck said:\n%s%s\n", r.out, r.err);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "contained by check as the "
                                         "subreaper of its tree"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "no cgroup: /nonexistent/"));
    CU_ASSERT_PTR_NULL(strstr(r.err, "cgroup of its own"));
    if (daemon > 0)
        expect_gone(daemon);
    th_test_run_free(&r);
    /* the default level is warn: nothing of it without --log-level */
    RUN(r, "check", f);
    CU_ASSERT_PTR_NULL(strstr(r.err, "contained by"));
    if (daemon_report(&r, &daemon, cg, sizeof cg) && daemon > 0)
        expect_gone(daemon);
    th_test_run_free(&r);
    free(f);
}

void th_suite_check_child(void)
{
    CU_pSuite s = CU_add_suite("check_child", NULL, NULL);
    CU_add_test(s, "init_segfault", test_init_segfault);
    CU_add_test(s, "constructor_abort", test_constructor_abort);
    CU_add_test(s, "init_hangs", test_init_hangs);
    CU_add_test(s, "child_limits", test_child_limits);
    CU_add_test(s, "good_unchanged", test_good_unchanged);
    CU_add_test(s, "every_problem_and_lint", test_every_problem_and_lint);
    CU_add_test(s, "path_refused", test_path_refused);
    CU_add_test(s, "contained", test_contained);
    CU_add_test(s, "cgroup", test_cgroup);
    CU_add_test(s, "cgroup_off", test_cgroup_off);
}
