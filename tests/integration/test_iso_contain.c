/* test_iso_contain.c - the iso_contain fixture under `isolation: process`
 * in the real `toolhost serve`:
 *
 *   late_record  a plugin thread that uses its call handle after the call
 *                ended gets TOOLHOST_ESTATE and cancelled, while the
 *                worker runs its next call: never that call's output
 *   nonroot_*    a host running as an unprivileged uid (the test, as root,
 *                starts it with setresuid 65534): the processes a plugin
 *                starts die with its worker and with the host, whichever
 *                way they leave (setsid, a process group, a double fork,
 *                killing the worker's parent, a cgroup write, a swarm
 *                of sessions under a subreaper of its own); the log
 *                names the containment that applied.  `nonroot_subreaper`
 *                does the same in a host that may not create user
 *                namespaces (a seccomp filter of the test refuses them,
 *                as a container would): the fallback, a subreaper init.
 *
 *   root_cgroup* a root host on a writable cgroup2 hierarchy: a cgroup per
 *                worker holds what it starts, is gone when the crashed
 *                call answers, cannot be left (cgroup.procs writes, a
 *                sub-cgroup) and beats forks racing its kill; the host's
 *                subtree goes at exit and a dead host's at the next
 *                start; `_reaper`: with PID namespaces refused; `_off`:
 *                $TOOLHOST_CGROUP at a missing mount, the fallback logged.
 *
 * The nonroot tests need root to start the host as another uid, the
 * root_cgroup ones root and a writable cgroup2 hierarchy: skipped
 * otherwise. */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <grp.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "integration/test_rpc_harness.h"

#define NOBODY 65534

static int call(th_rpc_client *c, const char *tool, const char *text,
                rpc_res *r)
{
    char p[256];
    if (text)
        snprintf(p, sizeof p, "[\"%s\", {\"text\": \"%s\"}]", tool, text);
    else
        snprintf(p, sizeof p, "[\"%s\", {}]", tool);
    return rpc_call(c, "tools.call", p, r);
}

/* The call's stdout, copied into buf ("" when none). */
static const char *out_of(const rpc_res *r, char *buf, size_t cap)
{
    const char *p;
    size_t n;
    buf[0] = '\0';
    const msgpack_object *o = r->res ? th_rpc_map_get(r->res, "stdout") : NULL;
    if (o && th_rpc_obj_str(o, &p, &n))
        snprintf(buf, cap, "%.*s", (int)n, p);
    return buf;
}

#define CONTAIN_TOOLS                                                         \
    "[late_keep, late_probe, ct_escape, ct_peek, ct_attack, ct_cgroup, "    \
    "ct_exit, ct_ok]"

/* ---- a call handle used after its call ended ---------------------------------- */

/* 20 rounds: late_keep ends and keeps its handle; late_probe is the
 * worker's next call (the one that would get the ended call's record)
 * and reports what the late write(), progress() and is_cancelled() on
 * the kept handle returned.  Before the fix the late "LATE" landed in
 * the probe's output (w=0) or its progress made the probe a task. */
static void test_late_record(void)
{
    char plugins[512];
    snprintf(plugins, sizeof plugins,
             "  - name: contain\n"
             "    path: %s/fixtures/iso_contain.so\n"
             "    isolation: process\n"
             "%s",
             TH_BUILD_DIR, geteuid() == 0 ? "    user: nobody\n" : "");
    rpc_opts o = {.plugins_extra = plugins,
                  .public_extra = "  - name: contain\n"
                                  "    tools: " CONTAIN_TOOLS "\n"};
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(rpc_srv_start(&s, &o), 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    int bad = 0;
    for (int i = 0; i < 20; i++) {
        rpc_res r;
        char out[256];
        CU_ASSERT_EQUAL_FATAL(call(c, "late_keep", NULL, &r), 0);
        CU_ASSERT(r.res && rpc_stdout_is(r.res, "kept"));
        rpc_res_free(&r);
        CU_ASSERT_EQUAL_FATAL(call(c, "late_probe", NULL, &r), 0);
        out_of(&r, out, sizeof out);
        bool ok = r.res && rpc_ok(r.res) &&
                  strcmp(out, "probe w=-4 p=-4 c=1") == 0;
        if (!ok && bad++ == 0)
            fprintf(stderr, "\nround %d: late_probe answered \"%s\"%s\n", i,
                    out, r.res && !rpc_ok(r.res) ? " (not ok)" : "");
        rpc_res_free(&r);
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* the misuse is logged under the plugin's name */
    CU_ASSERT(rpc_log_wait(&s, "after the call ended", rpc_wait_ms()));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- a host that is not root --------------------------------------------------- */

static bool nr_can(void)
{
    if (rpc_valgrind()) {
        th_test_skip(__FILE__, __LINE__, "not under valgrind");
        return false;
    }
    if (geteuid() == 0)
        return true;
    th_test_skip(__FILE__, __LINE__,
                 "needs root (to start the host as uid 65534)");
    return false;
}

/* In the host's process before execve: clone3 answers ENOSYS (glibc then
 * uses clone(), whose flags a filter can read), and clone() or unshare()
 * asking for a user namespace EPERM, as in a container that refuses
 * them. */
static void refuse_userns(void)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx ||
        seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) ||
        seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                         SCMP_A0_64(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER,
                                    CLONE_NEWUSER)) ||
        seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 1,
                         SCMP_A0_64(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER,
                                    CLONE_NEWUSER)) ||
        seccomp_load(ctx))
        _exit(125);
    seccomp_release(ctx);
}

/* `toolhost serve` as uid and gid 65534 (no groups), the iso_contain
 * fixture isolated (network: false, one worker, calls time out after
 * th_test_ms(2000)); `no_userns`: in a host that may not create user namespaces.
 * Like rpc_srv_start(). */
static int nr_start(rpc_srv *s, bool no_userns)
{
    memset(s, 0, sizeof *s);
    s->in_fd = s->out_fd = -1;
    s->dir = th_test_tmpdir();
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "plugins:\n"
             "  - name: contain\n"
             "    path: @BUILD@/fixtures/iso_contain.so\n"
             "    isolation: process\n"
             "    kill_grace: 300ms\n"
             "    network: false\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: " CONTAIN_TOOLS "\n"
             "    timeout: %lldms\n",
             (long long)th_test_ms(2000));
    rpc_opts o = {.config = cfg};
    rpc_write_config(s, &o);
    snprintf(s->sock, sizeof s->sock, "%s/th.sock", s->dir);
    size_t ll = strlen(s->dir) + 16;
    s->log = malloc(ll);
    if (!s->log)
        rpc_die("malloc");
    snprintf(s->log, ll, "%s/serve.log", s->dir);
    int logfd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0 || chown(s->dir, NOBODY, NOBODY) != 0 ||
        chown(s->cfg, NOBODY, NOBODY) != 0)
        rpc_die("log or chown");
    char listen[128];
    snprintf(listen, sizeof listen, "unix:%s", s->sock);
    const char *argv[] = {rpc_server_bin(), "serve", "-c", s->cfg,
                          "--listen", listen, NULL};
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        rpc_die("fork");
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        if (no_userns)
            refuse_userns();
        gid_t g = NOBODY;
        if (setgroups(0, &g) != 0 || setresgid(g, g, g) != 0 ||
            setresuid(NOBODY, NOBODY, NOBODY) != 0)
            _exit(126);
        /* (after the uid change, which clears it) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(logfd);
    s->pid = pid;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (rpc_now_ms() < end) {
        if (rpc_sock_answers(s->sock))
            return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->reaped = true;
            s->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            break;
        }
        usleep(10000);
    }
    fprintf(stderr, "\nserver as uid %d did not come up\n", NOBODY);
    rpc_dump_log(s);
    return -1;
}

/* A client of the host that runs as 65534. */
static th_rpc_client *nr_connect(rpc_srv *s)
{
    char addr[128];
    snprintf(addr, sizeof addr, "unix:%s", s->sock);
    th_rpc_client_opts co = {.server_uid_set = true, .server_uid = NOBODY};
    th_rpc_client *c = NULL;
    th_error e;
    if (th_rpc_client_connect_opts(addr, &co, &c, &e) != 0) {
        fprintf(stderr, "connect: %s\n", e.msg);
        return NULL;
    }
    return c;
}

/* Processes whose comm is `tag` (zombies too). */
static int tagged(const char *tag)
{
    int n = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/%s/comm", de->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        if (fgets(comm, sizeof comm, f))
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
        n += strcmp(comm, tag) == 0;
    }
    closedir(d);
    return n;
}

/* Waits (up to `ms`, scaled) until no process named `tag` is left. */
static int tag_gone(const char *tag, int64_t ms)
{
    int64_t end = rpc_now_ms() + th_test_ms(ms);
    int n;
    while ((n = tagged(tag)) > 0 && rpc_now_ms() < end)
        usleep(10 * 1000);
    if (n)
        fprintf(stderr, "\n%d process(es) named %s outlived the worker\n",
                n, tag);
    return n;
}

/* ct_escape MODE: a process named `tag` (unique to this run) that tries
 * to outlive the worker runs; `want` is what it reported. */
static void escape(th_rpc_client *c, const char *mode, char *tag,
                   size_t cap, const char *want)
{
    snprintf(tag, cap, "c%d%.7s", (int)getpid() % 100000, mode);
    char text[64], out[128];
    snprintf(text, sizeof text, "%s %s", mode, tag);
    rpc_res r;
    CU_ASSERT_EQUAL_FATAL(call(c, "ct_escape", text, &r), 0);
    out_of(&r, out, sizeof out);
    bool ok = r.res && rpc_ok(r.res) && strcmp(out, want) == 0;
    if (!ok) {
        const msgpack_object *e =
            r.res ? th_rpc_map_get(r.res, "error") : NULL;
        const msgpack_object *m = e ? th_rpc_map_get(e, "message") : NULL;
        const char *p = "";
        size_t n = 0;
        if (m)
            th_rpc_obj_str(m, &p, &n);
        fprintf(stderr, "\nct_escape %s: \"%s\" %.*s\n", text, out,
                (int)n, p);
    }
    CU_ASSERT(ok);
    rpc_res_free(&r);
    CU_ASSERT(tagged(tag) >= 1);
}

/* The worker exits: the call fails as a crash, and nothing named `tag`
 * is left. */
static void worker_exits(th_rpc_client *c, const char *tag)
{
    rpc_res r;
    CU_ASSERT_EQUAL_FATAL(call(c, "ct_exit", NULL, &r), 0);
    CU_ASSERT(r.res && rpc_tool_error_is(r.res, "plugin_crashed"));
    rpc_res_free(&r);
    CU_ASSERT_EQUAL(tag_gone(tag, 3000), 0);
}

/* The host runs as the plugin's uid: its environment and memory stay
 * out of reach (it is not dumpable). */
static void nr_peek_host(rpc_srv *s, th_rpc_client *c)
{
    char pid[24], out[256];
    snprintf(pid, sizeof pid, "%d", (int)s->pid);
    rpc_res r;
    CU_ASSERT_EQUAL_FATAL(call(c, "ct_peek", pid, &r), 0);
    out_of(&r, out, sizeof out);
    bool ok = r.res && rpc_ok(r.res) &&
              strcmp(out, "environ refused, mem refused") == 0;
    if (!ok)
        fprintf(stderr, "\nct_peek %s: \"%s\"\n", pid, out);
#ifndef __SANITIZE_ADDRESS__ /* (LeakSanitizer needs it dumpable) */
    CU_ASSERT(ok);
#endif
    rpc_res_free(&r);
}

/* Every way out, each followed by the worker's end; then a call that
 * hangs past its deadline (the host kills the worker); then the host
 * ends (`host_kill`: SIGKILL, else SIGTERM) with one more escapee. */
static void nr_escapes(rpc_srv *s, th_rpc_client *c, bool host_kill)
{
    static const char *const modes[][2] = {
        {"setsid", "up"}, {"pgrp", "up"}, {"daemon", "up"},
        {"killinit", "up"}, {"cgroup", "cgroup refused"},
        {"swarm", "up"}};
    char tag[16];
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        escape(c, modes[i][0], tag, sizeof tag, modes[i][1]);
        worker_exits(c, tag);
    }
    /* hang: the deadline and kill_grace pass, the host kills */
    snprintf(tag, sizeof tag, "c%dhang", (int)getpid() % 100000);
    char text[64];
    snprintf(text, sizeof text, "hang %s", tag);
    static const char killed[] = "ignored its deadline); ";
    int died = rpc_log_count(s, killed);
    rpc_res r;
    CU_ASSERT_EQUAL_FATAL(call(c, "ct_escape", text, &r), 0);
    CU_ASSERT(r.res && !rpc_ok(r.res));
    rpc_res_free(&r);
    /* the worker's end is logged once it was reaped */
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (rpc_log_count(s, killed) <= died && rpc_now_ms() < end)
        usleep(10 * 1000);
    CU_ASSERT(rpc_log_count(s, killed) > died);
    CU_ASSERT_EQUAL(tag_gone(tag, 3000), 0);
    /* the host ends */
    escape(c, "daemon", tag, sizeof tag, "up");
    th_rpc_client_close(c);
    if (host_kill) {
        kill(s->pid, SIGKILL);
        rpc_srv_wait(s);
    } else {
        CU_ASSERT_EQUAL(rpc_srv_stop(s, SIGTERM), 0);
    }
    CU_ASSERT_EQUAL(tag_gone(tag, 3000), 0);
}

/* A host as uid 65534 on a kernel that allows user namespaces: a user
 * and a PID namespace per worker.  Before: "its process group only",
 * and the setsid child outlived the worker. */
static void test_nonroot_userns(void)
{
    if (!nr_can())
        return;
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(nr_start(&s, false), 0);
    CU_ASSERT(rpc_log_wait(&s,
                           "workers contained by a user and a PID namespace",
                           rpc_wait_ms()));
    CU_ASSERT(rpc_log_has(&s, "a network and an IPC namespace"));
    th_rpc_client *c = nr_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    rpc_res r;
    CU_ASSERT_EQUAL(call(c, "ct_ok", "hi", &r), 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "hi"));
    rpc_res_free(&r);
    nr_peek_host(&s, c);
    nr_escapes(&s, c, true);
    rpc_srv_free(&s);
}

/* The same where user namespaces are refused: the subreaper init, and
 * the log names what was refused. */
static void test_nonroot_subreaper(void)
{
    if (!nr_can())
        return;
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(nr_start(&s, true), 0);
    CU_ASSERT(rpc_log_wait(&s, "workers contained by a subreaper init",
                           rpc_wait_ms()));
    CU_ASSERT(rpc_log_has(&s, "a user and a PID namespace refused"));
    th_rpc_client *c = nr_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    rpc_res r;
    CU_ASSERT_EQUAL(call(c, "ct_ok", "hi", &r), 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "hi"));
    rpc_res_free(&r);
    nr_peek_host(&s, c);
    /* the worker cannot signal its init or the host */
    char out[1024];
    CU_ASSERT_EQUAL(call(c, "ct_attack", NULL, &r), 0);
    out_of(&r, out, sizeof out);
    bool ok = r.res && rpc_ok(r.res) && strstr(out, "kill(init) refused") &&
              !strstr(out, "ESCAPED");
#ifdef __SANITIZE_ADDRESS__ /* ptrace and a dumpable init: LeakSanitizer */
    ok = r.res && rpc_ok(r.res) && strstr(out, "kill(init) refused") &&
         strstr(out, "pidfd_send_signal(/proc/init) refused");
#endif
    if (!ok || getenv("TH_ISO_CONTAIN_SHOW"))
        fprintf(stderr, "\nct_attack: %s\n", out);
    CU_ASSERT(ok);
    rpc_res_free(&r);
    nr_escapes(&s, c, false);
    rpc_srv_free(&s);
}

/* ---- a cgroup v2 per worker (a root host) ------------------------------------ */

/* Root, not valgrind (the worker program would be valgrind's), and a
 * cgroup2 hierarchy where this process may make a cgroup. */
static bool cg_can(char *dir, size_t cap)
{
    if (rpc_valgrind()) {
        th_test_skip(__FILE__, __LINE__, "not under valgrind");
        return false;
    }
    if (geteuid() != 0 || !rpc_cg_own_dir(dir, cap) || access(dir, W_OK) != 0) {
        th_test_skip(__FILE__, __LINE__,
                     "needs root and a writable cgroup2 hierarchy");
        return false;
    }
    return true;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* DIR/cgroup.events says populated 1. */
static bool cg_populated(const char *dir)
{
    char path[1200], buf[256] = "";
    snprintf(path, sizeof path, "%s/cgroup.events", dir);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, "populated 1") != NULL;
}

/* The pid of a process whose comm is `tag`, or -1. */
static pid_t pid_of(const char *tag)
{
    pid_t found = -1;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && found < 0 && (de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/%s/comm", de->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        if (fgets(comm, sizeof comm, f))
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
        if (strcmp(comm, tag) == 0)
            found = (pid_t)atol(de->d_name);
    }
    if (d)
        closedir(d);
    return found;
}

/* `pid` is listed in DIR/cgroup.procs. */
static bool cg_has(const char *dir, pid_t pid)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    long p;
    bool has = false;
    while (!has && fscanf(f, "%ld", &p) == 1)
        has = p == (long)pid;
    fclose(f);
    return has;
}

/* The "containment" and "processes" of the one isolated plugin in
 * host.stats. */
static void cg_stats(th_rpc_client *c, char *kind, size_t cap, long *procs)
{
    rpc_res r;
    kind[0] = '\0';
    *procs = -2;
    if (rpc_call(c, "host.stats", "[]", &r) == 0 && r.res) {
        const msgpack_object *iso = th_rpc_map_get(r.res, "isolation");
        if (iso && iso->type == MSGPACK_OBJECT_ARRAY &&
            iso->via.array.size == 1) {
            const msgpack_object *p = &iso->via.array.ptr[0];
            const msgpack_object *k = th_rpc_map_get(p, "containment");
            const msgpack_object *n = th_rpc_map_get(p, "processes");
            const char *t;
            size_t tn;
            if (k && th_rpc_obj_str(k, &t, &tn))
                snprintf(kind, cap, "%.*s", (int)tn, t);
            if (n && n->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                *procs = (long)n->via.u64;
            else if (n && n->type == MSGPACK_OBJECT_NIL)
                *procs = -1;
        }
    }
    rpc_res_free(&r);
}

/* `toolhost serve` as root with the iso_contain fixture (user: nobody,
 * network: false); `env`: $TOOLHOST_CGROUP for the host; `no_pidns`: in
 * a host that may not create PID namespaces (a filter of the test). */
static const char *g_cg_env;
static bool g_cg_no_pidns;

static void cg_env(const char *dir)
{
    (void)dir;
    if (g_cg_env)
        setenv("TOOLHOST_CGROUP", g_cg_env, 1);
    if (!g_cg_no_pidns)
        return;
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx ||
        seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) ||
        seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                         SCMP_A0_64(SCMP_CMP_MASKED_EQ, CLONE_NEWPID,
                                    CLONE_NEWPID)) ||
        seccomp_load(ctx))
        _exit(125);
    seccomp_release(ctx);
}

static int cg_start(rpc_srv *s, const char *env, bool no_pidns)
{
    g_cg_env = env;
    g_cg_no_pidns = no_pidns;
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "plugins:\n"
             "  - name: contain\n"
             "    path: @BUILD@/fixtures/iso_contain.so\n"
             "    isolation: process\n"
             "    user: nobody\n"
             "    kill_grace: 300ms\n"
             "    network: false\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: " CONTAIN_TOOLS "\n"
             "    timeout: %lldms\n",
             (long long)th_test_ms(2000));
    rpc_opts o = {.config = cfg, .child_setup = cg_env};
    return rpc_srv_start(s, &o);
}

/* ct_cgroup DIR: `want` is what it reported. */
static void cg_attack(th_rpc_client *c, const char *dir, const char *want)
{
    rpc_res r;
    char out[256];
    CU_ASSERT_EQUAL_FATAL(call(c, "ct_cgroup", dir, &r), 0);
    out_of(&r, out, sizeof out);
    bool ok = r.res && rpc_ok(r.res) && strcmp(out, want) == 0;
    if (!ok || getenv("TH_ISO_CONTAIN_SHOW"))
        fprintf(stderr, "\nct_cgroup %s: \"%s\"\n", dir, out);
    CU_ASSERT(ok);
    rpc_res_free(&r);
}

/* A root host on a writable cgroup2 hierarchy: each worker in a cgroup
 * of its own (<own>/toolhost-<host pid>/contain-1-<n>), with what it
 * starts (a double-forked daemon with every fd closed, a setsid child);
 * the worker's death empties and removes it before the call hears of
 * it; the plugin cannot leave it (cgroup.procs of the host's subtree or
 * cgroup, a sub-cgroup) and forks racing the kill leave nothing; the
 * host's subtree is gone after it exits.  Before: no cgroup was made,
 * the log named a PID namespace only. */
static void test_root_cgroup(void)
{
    char own[1024];
    if (!cg_can(own, sizeof own))
        return;
    /* the subtree of a host that died by SIGKILL (its pid is gone) */
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    CU_ASSERT_FATAL(dead > 0 && waitpid(dead, NULL, 0) == dead);
    char stale[1100], stale_leaf[1200];
    snprintf(stale, sizeof stale, "%s/toolhost-%d", own, (int)dead);
    snprintf(stale_leaf, sizeof stale_leaf, "%s/contain-1-1", stale);
    CU_ASSERT(mkdir(stale, 0755) == 0 && mkdir(stale_leaf, 0755) == 0);
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(cg_start(&s, NULL, false), 0);
    CU_ASSERT(rpc_log_wait(&s, "workers contained by a cgroup each",
                           rpc_wait_ms()));
    CU_ASSERT(rpc_log_has(&s, "and a PID namespace of its own"));
    CU_ASSERT(!is_dir(stale)); /* swept at the host's start */
    rmdir(stale_leaf);
    rmdir(stale);
    CU_ASSERT(rpc_log_has(&s, "host: isolated workers get a cgroup each"));
    char sub[1100], leaf[1200], tag[16], tag2[16];
    snprintf(sub, sizeof sub, "%s/toolhost-%d", own, (int)s.pid);
    snprintf(leaf, sizeof leaf, "%s/contain-1-1", sub);
    CU_ASSERT(is_dir(sub));
    CU_ASSERT(is_dir(leaf));
    CU_ASSERT(cg_populated(leaf));
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    /* what the plugin starts is in the worker's cgroup */
    escape(c, "daemon", tag, sizeof tag, "up");
    escape(c, "setsid", tag2, sizeof tag2, "up");
    pid_t d = pid_of(tag), k = pid_of(tag2);
    CU_ASSERT(d > 0 && cg_has(leaf, d));
    CU_ASSERT(k > 0 && cg_has(leaf, k));
    /* in a cgroup namespace rooted at its leaf, not the host's */
    char p1[64], ns1[64] = "", ns2[64] = "";
    snprintf(p1, sizeof p1, "/proc/%d/ns/cgroup", (int)d);
    CU_ASSERT(readlink(p1, ns1, sizeof ns1 - 1) > 0 &&
              readlink("/proc/self/ns/cgroup", ns2, sizeof ns2 - 1) > 0 &&
              strcmp(ns1, ns2) != 0);
    char kind[32];
    long procs;
    cg_stats(c, kind, sizeof kind, &procs);
    CU_ASSERT_STRING_EQUAL(kind, "cgroup");
    CU_ASSERT(procs >= 4); /* init, worker, daemon, setsid child */
    if (procs < 4)
        fprintf(stderr, "\nhost.stats processes: %ld\n", procs);
    /* the worker dies: its cgroup is empty and gone when the call fails */
    rpc_res r;
    CU_ASSERT_EQUAL_FATAL(call(c, "ct_exit", NULL, &r), 0);
    CU_ASSERT(r.res && rpc_tool_error_is(r.res, "plugin_crashed"));
    rpc_res_free(&r);
    CU_ASSERT(!is_dir(leaf));
    CU_ASSERT_EQUAL(tag_gone(tag, 3000), 0);
    CU_ASSERT_EQUAL(tag_gone(tag2, 3000), 0);
    /* the next worker: a new cgroup; the plugin attacks the tree */
    CU_ASSERT_EQUAL(call(c, "ct_ok", "hi", &r), 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "hi"));
    rpc_res_free(&r);
    snprintf(leaf, sizeof leaf, "%s/contain-1-2", sub);
    CU_ASSERT(is_dir(leaf) && cg_populated(leaf));
    cg_attack(c, sub, "procs refused, mkdir refused");
    cg_attack(c, own, "procs refused, mkdir refused");
    cg_attack(c, leaf, "procs refused, mkdir refused");
    CU_ASSERT(tagged("ctfork") >= 1);
    CU_ASSERT_EQUAL(call(c, "ct_exit", NULL, &r), 0);
    CU_ASSERT(r.res && rpc_tool_error_is(r.res, "plugin_crashed"));
    rpc_res_free(&r);
    CU_ASSERT(!is_dir(leaf));
    CU_ASSERT_EQUAL(tag_gone("ctfork", 3000), 0);
    /* a third worker, then the host ends: its subtree goes with it */
    CU_ASSERT_EQUAL(call(c, "ct_ok", "hi", &r), 0);
    rpc_res_free(&r);
    escape(c, "daemon", tag, sizeof tag, "up");
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    CU_ASSERT_EQUAL(tag_gone(tag, 3000), 0);
    CU_ASSERT(!is_dir(sub));
    if (is_dir(sub) || getenv("TH_ISO_CONTAIN_SHOW"))
        rpc_dump_log(&s);
    rpc_srv_free(&s);
}

/* The same host with cgroups unavailable ($TOOLHOST_CGROUP names a
 * mount that does not exist): the fallback is logged, and what the
 * plugin starts still dies with the worker. */
static void test_root_cgroup_off(void)
{
    char own[1024];
    if (!cg_can(own, sizeof own))
        return;
    char missing[512], *tmp = th_test_tmpdir();
    snprintf(missing, sizeof missing, "%s/no-cgroup2-here", tmp);
    free(tmp);
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(cg_start(&s, missing, false), 0);
    CU_ASSERT(rpc_log_wait(&s, "workers contained by a PID namespace",
                           rpc_wait_ms()));
    CU_ASSERT(rpc_log_has(&s, "no cgroup ("));
    CU_ASSERT_EQUAL(rpc_log_count(&s, "a cgroup each"), 0);
    char sub[1100], tag[16], tag2[16];
    snprintf(sub, sizeof sub, "%s/toolhost-%d", own, (int)s.pid);
    CU_ASSERT(!is_dir(sub));
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    char kind[32];
    long procs;
    cg_stats(c, kind, sizeof kind, &procs);
    CU_ASSERT_STRING_EQUAL(kind, "pid namespace");
    CU_ASSERT_EQUAL(procs, -1);
    escape(c, "daemon", tag, sizeof tag, "up");
    escape(c, "setsid", tag2, sizeof tag2, "up");
    worker_exits(c, tag);
    CU_ASSERT_EQUAL(tag_gone(tag2, 3000), 0);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* A root host that may make no PID namespace: the cgroup, and a
 * subreaper init under it.  Every way out (a setsid child, a process
 * group, a double-forked daemon, one that kills the init, a swarm of
 * sessions racing the kill) leaves nothing once the worker died, and the
 * leaf is gone by the time the call fails. */
static void test_root_cgroup_reaper(void)
{
    char own[1024];
    if (!cg_can(own, sizeof own))
        return;
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(cg_start(&s, NULL, true), 0);
    CU_ASSERT(rpc_log_wait(&s, "workers contained by a cgroup each",
                           rpc_wait_ms()));
    CU_ASSERT(rpc_log_has(&s, "and a subreaper init of its own"));
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    static const char *const modes[] = {"setsid", "pgrp", "daemon",
                                        "killinit", "swarm"};
    char sub[1100], leaf[1200], tag[16];
    snprintf(sub, sizeof sub, "%s/toolhost-%d", own, (int)s.pid);
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        snprintf(leaf, sizeof leaf, "%s/contain-1-%zu", sub, i + 1);
        escape(c, modes[i], tag, sizeof tag, "up");
        pid_t p = pid_of(tag);
        CU_ASSERT(p > 0 && cg_has(leaf, p));
        rpc_res r;
        CU_ASSERT_EQUAL_FATAL(call(c, "ct_exit", NULL, &r), 0);
        CU_ASSERT(r.res && rpc_tool_error_is(r.res, "plugin_crashed"));
        rpc_res_free(&r);
        CU_ASSERT(!is_dir(leaf));
        CU_ASSERT_EQUAL(tag_gone(tag, 3000), 0);
    }
    /* 400 processes forking as fast as they can, no PID namespace to
     * take them: the cgroup's kill does */
    rpc_res r;
    CU_ASSERT_EQUAL(call(c, "ct_ok", "hi", &r), 0);
    rpc_res_free(&r);
    snprintf(leaf, sizeof leaf, "%s/contain-1-6", sub);
    cg_attack(c, leaf, "procs refused, mkdir refused");
    CU_ASSERT(tagged("ctfork") >= 1);
    CU_ASSERT_EQUAL(call(c, "ct_exit", NULL, &r), 0);
    CU_ASSERT(r.res && rpc_tool_error_is(r.res, "plugin_crashed"));
    rpc_res_free(&r);
    CU_ASSERT(!is_dir(leaf));
    CU_ASSERT_EQUAL(tag_gone("ctfork", 3000), 0);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    CU_ASSERT(!is_dir(sub));
    if (getenv("TH_ISO_CONTAIN_SHOW"))
        rpc_dump_log(&s);
    rpc_srv_free(&s);
}

void th_suite_iso_contain(void);
void th_suite_iso_contain(void)
{
    CU_pSuite s = CU_add_suite("iso_contain", NULL, NULL);
    CU_add_test(s, "late_record", test_late_record);
    CU_add_test(s, "nonroot_userns", test_nonroot_userns);
    CU_add_test(s, "nonroot_subreaper", test_nonroot_subreaper);
    CU_add_test(s, "root_cgroup", test_root_cgroup);
    CU_add_test(s, "root_cgroup_off", test_root_cgroup_off);
    CU_add_test(s, "root_cgroup_reaper", test_root_cgroup_reaper);
}
