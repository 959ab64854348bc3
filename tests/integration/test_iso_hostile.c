/* test_iso_hostile.c - a hostile plugin (tests/fixtures/iso_hostile.c)
 * under `isolation: process` in the real `toolhost serve`: each way out
 * of its worker is refused or contained (docs/security.md, "What an
 * isolated plugin cannot do").  Its neighbour is the iso_crash fixture,
 * another isolated plugin with a uid of its own, which it attacks.
 *
 * The tests need root (user: auto, a PID namespace per worker): they are
 * skipped otherwise.  ISO_HOSTILE_USER (default auto) is the user both
 * plugins run as: `-DISO_HOSTILE_USER='"nobody"'` runs the same tests
 * against a host without user: auto. */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <stdlib.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "integration/test_rpc_harness.h"

#ifndef ISO_HOSTILE_USER
#define ISO_HOSTILE_USER "auto"
#endif

#define HOSTILE_TOOLS                                                         \
    "[h_sock64, h_family, h_x32, h_uring, h_attack, h_whoami, h_env, "        \
    "h_setsid_exit, h_daemon, h_undump, h_ns, h_abstract, h_segv, iso_ok]"

#define TOKEN "th-secret-token-0123456789"

static bool need_root(void)
{
    if (geteuid() == 0)
        return true;
    th_test_skip(__FILE__, __LINE__,
                 "needs root (user: auto, a PID namespace per worker)");
    return false;
}

/* The server: `hostile` (network: false) and its neighbour `victim`,
 * each isolated, one worker each; calls time out after 20 s, so an
 * answer that comes from a timeout shows. */
static int hostile_start(rpc_srv *s)
{
    char plugins[1024];
    snprintf(plugins, sizeof plugins,
             "  - name: hostile\n"
             "    path: %s/fixtures/iso_hostile.so\n"
             "    isolation: process\n"
             "    user: " ISO_HOSTILE_USER "\n"
             "    network: false\n"
             "    kill_grace: 300ms\n"
             "  - name: victim\n"
             "    path: %s/fixtures/iso_crash.so\n"
             "    isolation: process\n"
             "    user: " ISO_HOSTILE_USER "\n",
             TH_BUILD_DIR, TH_BUILD_DIR);
    rpc_opts o = {.plugins_extra = plugins,
                  .public_extra = "  - name: hostile\n"
                                  "    tools: " HOSTILE_TOOLS "\n"
                                  "    timeout: 20s\n"};
    /* What a plugin must never see: the host's secrets. */
    setenv("TOOLHOST_MCP_TOKEN", TOKEN, 1);
    int rc = rpc_srv_start(s, &o);
    unsetenv("TOOLHOST_MCP_TOKEN");
    return rc;
}

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

/* Calls `tool` and checks that it ran and that nothing in its report
 * escaped; `want` (when not NULL) must be in the report too. */
static void refused(th_rpc_client *c, const char *tool, const char *text,
                    const char *want)
{
    rpc_res r;
    char out[4096];
    CU_ASSERT_EQUAL_FATAL(call(c, tool, text, &r), 0);
    out_of(&r, out, sizeof out);
    bool ok = r.res && rpc_ok(r.res) && !strstr(out, "ESCAPED") &&
              (!want || strstr(out, want));
    if (!ok)
        fprintf(stderr, "\n%s %s: %s\n", tool, text ? text : "", out);
    CU_ASSERT(ok);
    rpc_res_free(&r);
}

/* "uid U pid P" of the hostile plugin's worker. */
static void whoami(th_rpc_client *c, unsigned *uid, long *pid)
{
    rpc_res r;
    char out[256];
    *uid = 0;
    *pid = -1;
    CU_ASSERT_EQUAL_FATAL(call(c, "h_whoami", NULL, &r), 0);
    CU_ASSERT(sscanf(out_of(&r, out, sizeof out), "uid %u pid %ld", uid,
                     pid) == 2);
    rpc_res_free(&r);
}

/* /proc/PID/status's Uid (real) and PPid; false when PID is gone. */
static bool proc_ids(long pid, unsigned *uid, long *ppid, char *name,
                     size_t cap)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    *uid = ~0u;
    *ppid = -1;
    name[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "Uid: %u", uid) == 1)
            continue;
        if (sscanf(line, "PPid: %ld", ppid) == 1)
            continue;
        if (strncmp(line, "Name:\t", 6) == 0)
            snprintf(name, cap, "%.*s", (int)strcspn(line + 6, "\n"),
                     line + 6);
    }
    fclose(f);
    return true;
}

/* Processes whose real uid is `uid` (the zombies too). */
static int procs_of_uid(unsigned uid)
{
    int n = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        unsigned u;
        long pp;
        char name[64];
        if (proc_ids(atol(de->d_name), &u, &pp, name, sizeof name) &&
            u == uid)
            n++;
    }
    closedir(d);
    return n;
}

/* Waits (up to `ms`, scaled) until no process of `uid` is left. */
static int wait_uid_gone(unsigned uid, int64_t ms)
{
    int64_t end = rpc_now_ms() + th_test_ms(ms);
    int n;
    while ((n = procs_of_uid(uid)) > 0 && rpc_now_ms() < end)
        usleep(10 * 1000);
    return n;
}

/* The victim's worker: a descendant of the host that runs the toolhost
 * program (not the init of its namespace), not as root, and is not the
 * hostile worker `not`. */
static long find_victim(pid_t host, long not)
{
    long found = -1;
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    struct dirent *de;
    while (found < 0 && (de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        long pid = atol(de->d_name);
        unsigned uid;
        long pp;
        char name[64];
        if (pid == not || !proc_ids(pid, &uid, &pp, name, sizeof name) ||
            uid == 0 || strcmp(name, "toolhost") != 0)
            continue;
        /* a child of the host, or of a child of the host */
        for (int up = 0; up < 2 && pp > 1; up++) {
            if (pp == host) {
                found = pid;
                break;
            }
            unsigned u2;
            char n2[64];
            if (!proc_ids(pp, &u2, &pp, n2, sizeof n2))
                break;
        }
    }
    closedir(d);
    return found;
}

/* ---- the tests -------------------------------------------------------------------- */

/* socket(): a 64-bit domain is AF_INET to the kernel; AF_INET, AF_INET6,
 * AF_NETLINK, AF_PACKET, AF_VSOCK under network: false; x32 numbers;
 * io_uring (its IORING_OP_SOCKET made sockets past the filter). */
static void test_sockets(void)
{
    if (!need_root())
        return;
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(hostile_start(&s), 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    refused(c, "h_sock64", NULL, "socket(0x100000002): refused");
    static const char *const fams[] = {"2", "10", "16", "17", "40"};
    for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++)
        refused(c, "h_family", fams[i], "refused");
    refused(c, "h_uring", NULL, "io_uring_setup: refused");
    refused(c, "h_ns", NULL, "clone3: refused");
    /* An abstract AF_UNIX socket of the host (no permission check): out
     * of reach from the network namespace of a network: false worker. */
    char name[64];
    snprintf(name, sizeof name, "toolhost-iso-hostile-%d", (int)getpid());
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path + 1, name, strlen(name));
    socklen_t sl =
        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    CU_ASSERT_FATAL(ls >= 0 && bind(ls, (struct sockaddr *)&sa, sl) == 0 &&
                    listen(ls, 4) == 0);
    refused(c, "h_abstract", name, "connect(@name): refused");
    close(ls);
    /* x32: the filter kills the process (another ABI) */
    rpc_res r;
    CU_ASSERT_EQUAL(call(c, "h_x32", NULL, &r), 0);
    char out[256];
    CU_ASSERT(r.res && !strstr(out_of(&r, out, sizeof out), "ESCAPED"));
    rpc_res_free(&r);
    /* AF_UNIX stays open to it */
    CU_ASSERT_EQUAL(call(c, "h_family", "1", &r), 0);
    CU_ASSERT(r.res && strstr(out_of(&r, out, sizeof out),
                              "socket(1, 1): ESCAPED") != NULL);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* Another plugin's worker: no signal, ptrace, /proc/PID/mem or environ,
 * pidfd_getfd or process_vm_readv; and it cannot make itself dumpable. */
static void test_neighbour(void)
{
    if (!need_root())
        return;
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(hostile_start(&s), 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    rpc_res r;
    CU_ASSERT_EQUAL(call(c, "iso_ok", "hi", &r), 0); /* the victim runs */
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "hi"));
    rpc_res_free(&r);
    unsigned uid;
    long me;
    whoami(c, &uid, &me);
    CU_ASSERT(uid != 0);
    long victim = find_victim(s.pid, me);
    CU_ASSERT_FATAL(victim > 1);
    char pid[24];
    snprintf(pid, sizeof pid, "%ld", victim);
    /* (this is no ESCAPED line only when each attempt is refused) */
    refused(c, "h_attack", pid, "pidfd_getfd: refused");
    /* The host itself. */
    snprintf(pid, sizeof pid, "%d", (int)s.pid);
    refused(c, "h_attack", pid, "ptrace: refused");
#ifndef __SANITIZE_ADDRESS__ /* LeakSanitizer needs it (iso_worker.c) */
    refused(c, "h_undump", NULL, "dumpable 0");
#endif
    /* The victim still answers. */
    CU_ASSERT_EQUAL(call(c, "iso_ok", "still", &r), 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "still"));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* The worker's environment: not the host's (TOOLHOST_MCP_TOKEN). */
static void test_env(void)
{
    if (!need_root())
        return;
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(hostile_start(&s), 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    rpc_res r;
    char out[512];
    CU_ASSERT_EQUAL(call(c, "h_env", NULL, &r), 0);
    out_of(&r, out, sizeof out);
    CU_ASSERT(strstr(out, "token (unset)") != NULL);
    CU_ASSERT(strstr(out, TOKEN) == NULL);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* A child that leaves the session keeping the worker's socket, then the
 * worker exits: the call answers plugin_crashed at once (not the timeout
 * of 20 s), nothing of the plugin's uid is left, the next call works. */
static void test_setsid_escape(void)
{
    if (!need_root())
        return;
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(hostile_start(&s), 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    unsigned uid;
    long me;
    whoami(c, &uid, &me);
    rpc_res r;
    int64_t t0 = rpc_now_ms();
    CU_ASSERT_EQUAL(call(c, "h_setsid_exit", NULL, &r), 0);
    int64_t took = rpc_now_ms() - t0;
    CU_ASSERT(r.res && rpc_tool_error_is(r.res, "plugin_crashed"));
    CU_ASSERT(took < th_test_ms(3000));
    if (took >= th_test_ms(3000))
        fprintf(stderr, "\nh_setsid_exit answered after %lld ms\n",
                (long long)took);
    rpc_res_free(&r);
    CU_ASSERT_EQUAL(wait_uid_gone(uid, 3000), 0);
    refused(c, "h_sock64", NULL, NULL); /* a new worker serves */
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* A double-forked daemon dies with the worker that started it; after the
 * host exits nothing of the plugin's uid is left either. */
static void test_daemon(void)
{
    if (!need_root())
        return;
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(hostile_start(&s), 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    unsigned uid;
    long me;
    whoami(c, &uid, &me);
    rpc_res r;
    char out[256];
    long daemon = -1;
    CU_ASSERT_EQUAL(call(c, "h_daemon", NULL, &r), 0);
    CU_ASSERT(sscanf(out_of(&r, out, sizeof out), "daemon %ld", &daemon) ==
              1);
    rpc_res_free(&r);
    CU_ASSERT(daemon > 1);
    CU_ASSERT_EQUAL(call(c, "h_segv", NULL, &r), 0);
    CU_ASSERT(r.res && rpc_tool_error_is(r.res, "plugin_crashed"));
    rpc_res_free(&r);
    CU_ASSERT_EQUAL(wait_uid_gone(uid, 3000), 0);
    unsigned du;
    long dp;
    char dn[64];
    CU_ASSERT(!proc_ids(daemon, &du, &dp, dn, sizeof dn) || du != uid);
    /* Again, and then the host ends: the daemon goes with it. */
    whoami(c, &uid, &me);
    CU_ASSERT_EQUAL(call(c, "h_daemon", NULL, &r), 0);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    kill(s.pid, SIGKILL); /* no shutdown: the workers see the host go */
    rpc_srv_wait(&s);
    CU_ASSERT_EQUAL(wait_uid_gone(uid, 3000), 0);
    rpc_srv_free(&s);
}

/* The host refuses an isolated plugin without a user when it runs as
 * root, at the plugin's line in the config. */
static void test_root_needs_user(void)
{
    if (!need_root())
        return;
    char *dir = th_test_tmpdir();
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "plugins:\n"
             "  - name: hostile\n"
             "    path: %s/fixtures/iso_hostile.so\n"
             "    isolation: process\n",
             TH_BUILD_DIR);
    char *cfg = th_test_write_file(dir, "root.yaml", yaml, (size_t)-1);
    th_test_run r;
    th_test_toolhost(&r, "config", "check", cfg, NULL);
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT(strstr(r.err, "root.yaml:2:5: plugin 'hostile'") != NULL);
    CU_ASSERT(strstr(r.err, "needs 'user:'") != NULL);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_iso_hostile(void);
void th_suite_iso_hostile(void)
{
    CU_pSuite s = CU_add_suite("iso_hostile", NULL, NULL);
    CU_add_test(s, "sockets", test_sockets);
    CU_add_test(s, "neighbour", test_neighbour);
    CU_add_test(s, "env", test_env);
    CU_add_test(s, "setsid_escape", test_setsid_escape);
    CU_add_test(s, "daemon", test_daemon);
    CU_add_test(s, "root_needs_user", test_root_needs_user);
}
