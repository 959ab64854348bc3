/* test_exec_cage.c - the exec plugin's commands in a cgroup per call (the
 * host's cages, ABI 1.3) in the real `toolhost serve` as root:
 *
 *   kill_keeper   a command that SIGKILLs its keeper and leaves a
 *                 `setsid sleep 300 &` daemon: when the call has answered
 *                 the call's cgroup is gone (so nothing of the tree was
 *                 left in it) and the daemon is dead.  Before the cages
 *                 the daemon went to init and lived on (300 s).
 *   attacks       commands that try to get out: a move into the host's
 *                 subtree (cgroup.procs; as root it is allowed where the
 *                 hierarchy lacks nsdelegate: the keeper, still alive,
 *                 kills the daemon), a sub-cgroup of the leaf + killing
 *                 the keeper (cgroup.kill takes the sub-cgroup), a
 *                 SIGSTOPped keeper, a frozen cgroup (the call answers,
 *                 the cage is killed whole).
 *   off           TOOLHOST_CGROUP=off: the keeper alone, as before, and
 *                 the log says so: the keeper still takes a daemon whose
 *                 command left it alive; one that killed its keeper
 *                 outlives the call (the gap the cages close).
 *
 * Root and a writable cgroup2 hierarchy are needed (skipped otherwise). */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/th_test.h"
#include "test_rpc_harness.h"

/* $1 pidfile: a daemon in a session of its own, then SIGKILL to the
 * keeper (the command's parent). */
static const char kill_keeper_sh[] =
    "#!/bin/sh\n"
    "setsid sleep 300 &\n"
    "echo $! > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"\n"
    "kill -9 $PPID\n";

/* $1 pidfile, $2 a cgroup to move into, $3 "kill": the keeper too.
 * Prints whether the move was allowed. */
static const char move_out_sh[] =
    "#!/bin/sh\n"
    "if echo 0 > \"$2/cgroup.procs\" 2>/dev/null; then echo moved;\n"
    "else echo refused; fi\n"
    "setsid sleep 300 &\n"
    "echo $! > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"\n"
    "[ \"$3\" = kill ] && kill -9 $PPID\n"
    "exit 0\n";

/* The leaf of this shell under the host's subtree $2 (inside its cgroup
 * namespace /proc/self/cgroup says only "/"). */
#define FIND_LEAF                                                          \
    "leaf=\n"                                                              \
    "for d in \"$2\"/*/; do\n"                                             \
    "  grep -qx $$ \"$d/cgroup.procs\" 2>/dev/null && leaf=$d\n"           \
    "done\n"                                                               \
    "[ -n \"$leaf\" ] || { echo no leaf; exit 3; }\n"

/* $1 pidfile, $2 the host's subtree: a sub-cgroup of its leaf, the
 * daemon there, the keeper killed. */
static const char sub_cgroup_sh[] =
    "#!/bin/sh\n" FIND_LEAF
    "mkdir \"$leaf/inner\" && echo 0 > \"$leaf/inner/cgroup.procs\" &&\n"
    "  echo inner\n"
    "setsid sleep 300 &\n"
    "echo $! > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"\n"
    "kill -9 $PPID\n";

/* $1 pidfile, $2 the host's subtree: freezes its own leaf (the keeper
 * with it). */
static const char freeze_sh[] =
    "#!/bin/sh\n" FIND_LEAF
    "setsid sleep 300 &\n"
    "echo $! > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"\n"
    "echo 1 > \"$leaf/cgroup.freeze\"\n"
    "sleep 300\n";

/* SIGSTOP to its keeper, then exit. */
static const char stop_keeper_sh[] = "#!/bin/sh\n"
                                     "kill -STOP $PPID\n"
                                     "exit 0\n";

static char *script(const char *dir, const char *name, const char *text)
{
    char *path = th_test_write_file(dir, name, text, (size_t)-1);
    CU_ASSERT_EQUAL(chmod(path, 0755), 0);
    return path;
}

static bool cage_can(char *own, size_t cap)
{
    if (rpc_valgrind()) {
        th_test_skip(__FILE__, __LINE__, "not under valgrind");
        return false;
    }
    if (geteuid() != 0 || !rpc_cg_own_dir(own, cap) ||
        access(own, W_OK) != 0) {
        th_test_skip(__FILE__, __LINE__,
                     "needs root and a writable cgroup2 hierarchy");
        return false;
    }
    return true;
}

static const char *g_env; /* $TOOLHOST_CGROUP for the server, or NULL */

static void cage_env(const char *dir)
{
    (void)dir;
    if (g_env)
        setenv("TOOLHOST_CGROUP", g_env, 1);
}

/* `toolhost serve` with exec and the tools above (scripts in `dir`). */
static int cage_serve(rpc_srv *s, const char *dir, const char *env)
{
    char *kk = script(dir, "kill_keeper.sh", kill_keeper_sh);
    char *mo = script(dir, "move_out.sh", move_out_sh);
    char *sc = script(dir, "sub_cgroup.sh", sub_cgroup_sh);
    char *fr = script(dir, "freeze.sh", freeze_sh);
    char *sk = script(dir, "stop_keeper.sh", stop_keeper_sh);
    char cfg[4096];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "plugins:\n"
             "  - name: exec\n"
             "    path: @BUILD@/plugins/exec.so\n"
             "    config:\n"
             "      kill_grace: 300ms\n"
             "      tools:\n"
             "        - {name: kill_keeper, description: k, argv: [\"%s\", "
             "\"{p}\"], params: [{name: p, description: p, required: true}]}\n"
             "        - {name: move_out, description: m, argv: [\"%s\", "
             "\"{p}\", \"{to}\", \"{k}\"], params: [{name: p, description: "
             "p, required: true}, {name: to, description: t, required: "
             "true}, {name: k, description: k}]}\n"
             "        - {name: sub_cgroup, description: s, argv: [\"%s\", "
             "\"{p}\", \"{sub}\"], params: [{name: p, description: p, "
             "required: true}, {name: sub, description: s, required: "
             "true}]}\n"
             "        - {name: freeze, description: f, timeout: 300ms, argv: "
             "[\"%s\", \"{p}\", \"{sub}\"], params: [{name: p, description: "
             "p, required: true}, {name: sub, description: s, required: "
             "true}]}\n"
             "        - {name: stop_keeper, description: s, timeout: 300ms, "
             "argv: [\"%s\"]}\n",
             kk, mo, sc, fr, sk);
    free(kk);
    free(mo);
    free(sc);
    free(fr);
    free(sk);
    g_env = env;
    rpc_opts o = {.config = cfg, .child_setup = cage_env};
    return rpc_srv_start(s, &o);
}

static bool pid_alive(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *r = strrchr(buf, ')');
    char st;
    return r && sscanf(r + 1, " %c", &st) == 1 && st != 'Z' && st != 'X';
}

/* Dead within `ms`: a process leaves its cgroup (populated 0, which the
 * cage's removal waited for) early in its exit, a moment before /proc
 * shows it a zombie. */
static bool dead_within(pid_t pid, int64_t ms)
{
    int64_t end = rpc_now_ms() + ms;
    while (pid_alive(pid)) {
        if (rpc_now_ms() > end)
            return false;
        usleep(10000);
    }
    return true;
}

static pid_t pid_in(const char *path)
{
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (f) {
        if (fscanf(f, "%d", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    return pid;
}

/* Sub-cgroups (directories) in `dir`; -1 when it cannot be read. */
static int subdirs(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_type == DT_DIR && strcmp(e->d_name, ".") != 0 &&
             strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The cgroup of the server's last cage (its debug line "plugin exec: cage
 * DIR"); "" when none. */
static void last_cage(rpc_srv *s, char *dir, size_t cap)
{
    FILE *f = fopen(s->log, "r");
    char line[4096];
    dir[0] = '\0';
    while (f && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "plugin exec: cage ");
        if (p) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(dir, cap, "%s", p + 18);
        }
    }
    if (f)
        fclose(f);
}

/* `toolhost call --connect` of `tool` with key=value arguments. */
static int run(rpc_srv *s, th_test_run *r, const char *tool, const char *a1,
               const char *a2, const char *a3)
{
    char addr[200];
    snprintf(addr, sizeof addr, "unix:%s", s->sock);
    return th_test_toolhost(r, "call", "--connect", addr, tool, a1, a2, a3,
                            NULL);
}

static void test_kill_keeper(void)
{
    char own[1024];
    if (!cage_can(own, sizeof own))
        return;
    char *dir = th_test_tmpdir();
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(cage_serve(&s, dir, NULL), 0);
    char sub[1100], pidf[1024], arg[1100], cage[1200];
    snprintf(sub, sizeof sub, "%s/toolhost-%d", own, (int)s.pid);
    for (int i = 0; i < 3; i++) {
        snprintf(pidf, sizeof pidf, "%s/kk%d", dir, i);
        snprintf(arg, sizeof arg, "p=%s", pidf);
        th_test_run r;
        run(&s, &r, "kill_keeper", arg, NULL, NULL);
        /* the command died with its keeper: SIGKILL */
        CU_ASSERT_EQUAL(r.status, 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "killed by SIGKILL"));
        th_test_run_free(&r);
        /* answered: the call's cgroup was emptied and removed first */
        last_cage(&s, cage, sizeof cage);
        CU_ASSERT(strncmp(cage, sub, strlen(sub)) == 0);
        CU_ASSERT(cage[0] && !is_dir(cage));
        CU_ASSERT_EQUAL(subdirs(sub), 0);
        pid_t d = pid_in(pidf); /* written before the keeper was killed */
        CU_ASSERT(d > 0);
        bool dead = d > 0 && dead_within(d, th_test_ms(2000));
        CU_ASSERT(dead);
        if (d > 0 && !dead)
            kill(d, SIGKILL); /* this test's own leftover */
    }
    CU_ASSERT(rpc_log_has(&s, "commands contained by a cgroup per call"));
    CU_ASSERT_EQUAL(rpc_log_count(&s, "contained by the call's keeper only"),
                    0);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    CU_ASSERT(!is_dir(sub));
    rpc_srv_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

static void test_attacks(void)
{
    char own[1024];
    if (!cage_can(own, sizeof own))
        return;
    char *dir = th_test_tmpdir();
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(cage_serve(&s, dir, NULL), 0);
    char sub[1100], pidf[1024], arg[1100], arg2[1200], cage[1200];
    snprintf(sub, sizeof sub, "%s/toolhost-%d", own, (int)s.pid);
    th_test_run r;
    /* 1. out of the leaf into the host's subtree, keeper alive */
    snprintf(pidf, sizeof pidf, "%s/mo", dir);
    snprintf(arg, sizeof arg, "p=%s", pidf);
    snprintf(arg2, sizeof arg2, "to=%s", sub);
    run(&s, &r, "move_out", arg, arg2, NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    if (getenv("TH_EXEC_CAGE_SHOW"))
        fprintf(stderr, "\nmove_out: %s", r.out);
    th_test_run_free(&r);
    pid_t d = pid_in(pidf);
    CU_ASSERT(d > 0 && dead_within(d, th_test_ms(2000)));
    CU_ASSERT_EQUAL(subdirs(sub), 0);
    /* 2. a sub-cgroup of its own leaf, the keeper killed */
    snprintf(pidf, sizeof pidf, "%s/sc", dir);
    snprintf(arg, sizeof arg, "p=%s", pidf);
    snprintf(arg2, sizeof arg2, "sub=%s", sub);
    run(&s, &r, "sub_cgroup", arg, arg2, NULL);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "inner"));
    th_test_run_free(&r);
    last_cage(&s, cage, sizeof cage);
    CU_ASSERT(cage[0] && !is_dir(cage));
    CU_ASSERT_EQUAL(subdirs(sub), 0);
    d = pid_in(pidf);
    CU_ASSERT(d > 0 && dead_within(d, th_test_ms(2000)));
    /* 3. the keeper stopped: the call still answers (timeout) */
    int64_t t0 = rpc_now_ms();
    run(&s, &r, "stop_keeper", NULL, NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "timed out"));
    CU_ASSERT(rpc_now_ms() - t0 < th_test_ms(10000));
    th_test_run_free(&r);
    CU_ASSERT_EQUAL(subdirs(sub), 0);
    CU_ASSERT(rpc_log_has(&s, "the keeper did not end within"));
    /* 4. its own cgroup frozen, keeper and all */
    snprintf(pidf, sizeof pidf, "%s/fr", dir);
    snprintf(arg, sizeof arg, "p=%s", pidf);
    t0 = rpc_now_ms();
    run(&s, &r, "freeze", arg, arg2, NULL);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT(rpc_now_ms() - t0 < th_test_ms(10000));
    th_test_run_free(&r);
    CU_ASSERT_EQUAL(subdirs(sub), 0);
    d = pid_in(pidf);
    CU_ASSERT(d > 0 && dead_within(d, th_test_ms(2000)));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    CU_ASSERT(!is_dir(sub));
    rpc_srv_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

static void test_off(void)
{
    char own[1024];
    if (!cage_can(own, sizeof own))
        return;
    char *dir = th_test_tmpdir();
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(cage_serve(&s, dir, "off"), 0);
    char sub[1100], pidf[1024], arg[1100];
    snprintf(sub, sizeof sub, "%s/toolhost-%d", own, (int)s.pid);
    th_test_run r;
    /* the keeper alive: it kills the daemon at the call's end */
    snprintf(pidf, sizeof pidf, "%s/mo", dir);
    snprintf(arg, sizeof arg, "p=%s", pidf);
    run(&s, &r, "move_out", arg, "to=/nonexistent", NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "refused"));
    th_test_run_free(&r);
    pid_t d = pid_in(pidf);
    CU_ASSERT(d > 0 && dead_within(d, th_test_ms(2000)));
    CU_ASSERT(rpc_log_has(&s, "commands contained by the call's keeper only"));
    CU_ASSERT(rpc_log_has(&s, "no cgroup: cgroups off ($TOOLHOST_CGROUP)"));
    CU_ASSERT_EQUAL(rpc_log_count(&s, "plugin exec: cage "), 0);
    CU_ASSERT(!is_dir(sub));
    /* the keeper killed: without a cgroup its orphan lives on */
    snprintf(pidf, sizeof pidf, "%s/kk", dir);
    snprintf(arg, sizeof arg, "p=%s", pidf);
    run(&s, &r, "kill_keeper", arg, NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 1);
    th_test_run_free(&r);
    d = pid_in(pidf);
    CU_ASSERT(d > 0 && pid_alive(d));
    if (d > 0)
        kill(d, SIGKILL);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_exec_cage(void);
void th_suite_exec_cage(void)
{
    CU_pSuite s = CU_add_suite("exec_cage", NULL, NULL);
    CU_add_test(s, "kill_keeper", test_kill_keeper);
    CU_add_test(s, "attacks", test_attacks);
    CU_add_test(s, "off", test_off);
}
