/* test_rpc_client_sec.c - who the client talks to and where serve listens:
 * a host run by another user is refused before anything is sent (unless
 * --server-uid/--any-server says otherwise), the default socket lives in a
 * private folder that serve makes and checks, and `--connect` with no
 * address finds it.  The other user is `nobody` (tests run as root; the
 * user-switching tests are skipped otherwise). */
#include <CUnit/CUnit.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

static struct passwd nobody_pw;

/* root and a `nobody` user, or the test is skipped. */
static bool can_switch_user(void)
{
    struct passwd *pw = getpwnam("nobody");
    if (geteuid() != 0 || !pw || pw->pw_uid == 0) {
        th_test_skip(__FILE__, __LINE__, "needs root and a 'nobody' user");
        return false;
    }
    nobody_pw = *pw;
    return true;
}

/* A config with the echo plugin in dir (readable by anyone). */
static char *write_config(const char *dir)
{
    char text[1024];
    snprintf(text, sizeof text,
             "host:\n  log_level: debug\n  shutdown_grace: 1s\n"
             "plugins:\n  - name: echo\n    path: %s/plugins/echo.so\n"
             "toolsets:\n  - name: all\n    tools: [\"*\"]\n",
             TH_BUILD_DIR);
    char *cfg = th_test_write_file(dir, "sec.yaml", text, (size_t)-1);
    chmod(cfg, 0644);
    return cfg;
}

/* Starts `toolhost serve -c CFG [--listen LISTEN]` as `as` (NULL: this
 * user) with XDG_RUNTIME_DIR=xdg when xdg is given; its log in DIR/serve.log.
 * Waits (bounded) until `sock` answers: 0, or -1 with the log shown. */
static int start_serve(rpc_srv *s, const char *listen, const char *sock,
                       const struct passwd *as, const char *xdg)
{
    memset(s, 0, sizeof *s);
    s->in_fd = s->out_fd = -1;
    s->dir = th_test_tmpdir();
    chmod(s->dir, 0755);
    s->cfg = write_config(s->dir);
    snprintf(s->sock, sizeof s->sock, "%s", sock);
    size_t ll = strlen(s->dir) + 16;
    s->log = malloc(ll);
    if (!s->log)
        rpc_die("malloc");
    snprintf(s->log, ll, "%s/serve.log", s->dir);
    int logfd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0)
        rpc_die("open log");
    const char *argv[] = {rpc_server_bin(), "serve", "-c", s->cfg,
                          listen ? "--listen" : NULL, listen, NULL};
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        rpc_die("fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        if (xdg)
            setenv("XDG_RUNTIME_DIR", xdg, 1);
        if (as && (setgroups(0, NULL) != 0 || setgid(as->pw_gid) != 0 ||
                   setuid(as->pw_uid) != 0))
            _exit(10);
        if (rpc_valgrind()) {
            char cmd[4096];
            size_t n = (size_t)snprintf(cmd, sizeof cmd, "exec %s",
                                        getenv("TH_VALGRIND"));
            for (int i = 0; argv[i] && n < sizeof cmd; i++)
                n += (size_t)snprintf(cmd + n, sizeof cmd - n, " '%s'",
                                      argv[i]);
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        } else {
            execv(argv[0], (char *const *)argv);
        }
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
    fprintf(stderr, "\nserver did not come up\n");
    rpc_dump_log(s);
    return -1;
}

/* A folder DIR/NAME owned by uid/gid with mode; its malloc()ed path. */
static char *make_dir(const char *dir, const char *name, uid_t uid, gid_t gid,
                      mode_t mode)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p)
        rpc_die("malloc");
    snprintf(p, n, "%s/%s", dir, name);
    if (mkdir(p, 0700) != 0 || chown(p, uid, gid) != 0 || chmod(p, mode) != 0)
        rpc_die("make_dir");
    return p;
}

static bool has(const char *text, const char *needle)
{
    bool ok = text && strstr(text, needle) != NULL;
    if (!ok)
        fprintf(stderr, "\nno '%s' in: %s\n", needle, text ? text : "(null)");
    return ok;
}

/* ---- a host run by another user ----------------------------------------- */

static void test_other_user_refused(void)
{
    if (!can_switch_user())
        return;
    /* nobody's host in a folder of nobody's */
    char *base = th_test_tmpdir();
    chmod(base, 0755);
    char *run = make_dir(base, "run", nobody_pw.pw_uid, nobody_pw.pw_gid, 0700);
    char sock[108], addr[128];
    snprintf(sock, sizeof sock, "%s/th.sock", run);
    snprintf(addr, sizeof addr, "unix:%s", sock);
    rpc_srv s;
    CU_ASSERT_FATAL(start_serve(&s, addr, sock, &nobody_pw, NULL) == 0);
    unsigned uid = (unsigned)nobody_pw.pw_uid;
    char want[256];

    /* the library: refused by default, naming the socket and the uid */
    th_rpc_client *c = NULL;
    th_error err;
    th_error_clear(&err);
    CU_ASSERT_EQUAL(th_rpc_client_connect(addr, &c, &err), TH_EPERM);
    CU_ASSERT_PTR_NULL(c);
    th_rpc_client_close(c);
    c = NULL;
    snprintf(want, sizeof want,
             "refusing to talk to %s owned by uid %u (expected root; "
             "--server-uid %u accepts it)",
             addr, uid, uid);
    CU_ASSERT(has(err.msg, want));
    /* ... a wrong --server-uid is refused too */
    th_rpc_client_opts o = {.server_uid_set = true, .server_uid = 0};
    CU_ASSERT_EQUAL(th_rpc_client_connect_opts(addr, &o, &c, &err), TH_EPERM);
    CU_ASSERT(has(err.msg, "(expected uid 0, as --server-uid says)"));
    /* ... the right one, or any server, is accepted and works */
    th_rpc_client_close(c);
    c = NULL;
    o.server_uid = uid;
    CU_ASSERT_EQUAL_FATAL(th_rpc_client_connect_opts(addr, &o, &c, &err), 0);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.list", "[]", &r) == 0);
    CU_ASSERT(rpc_find_tool(r.res, "echo") != NULL);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    th_rpc_client_opts any = {.any_server = true};
    CU_ASSERT_EQUAL_FATAL(th_rpc_client_connect_opts(addr, &any, &c, &err),
                          0);
    th_rpc_client_close(c);

    /* the CLI: call, list and reload refuse, and nothing reaches the host */
    th_test_run t;
    th_test_toolhost(&t, "call", "--connect", addr, "echo", "text=leak",
                     NULL);
    CU_ASSERT_EQUAL(t.status, 1);
    snprintf(want, sizeof want,
             "toolhost: refusing to talk to %s owned by uid %u (expected root",
             addr, uid);
    CU_ASSERT(has(t.err, want));
    CU_ASSERT_EQUAL(t.out_len, 0);
    th_test_run_free(&t);
    th_test_toolhost(&t, "list", "--connect", addr, NULL);
    CU_ASSERT_EQUAL(t.status, 1);
    CU_ASSERT(has(t.err, "refusing to talk to"));
    th_test_run_free(&t);
    th_test_toolhost(&t, "reload", "--connect", addr, NULL);
    CU_ASSERT_EQUAL(t.status, 1);
    CU_ASSERT(has(t.err, "refusing to talk to"));
    th_test_run_free(&t);

    /* ... unless told: --server-uid by name or number, --any-server */
    th_test_toolhost(&t, "call", "--connect", addr, "--server-uid",
                     nobody_pw.pw_name, "echo", "text=ok", NULL);
    CU_ASSERT_EQUAL(t.status, 0);
    CU_ASSERT(has(t.out, "ok"));
    th_test_run_free(&t);
    char uidtxt[16];
    snprintf(uidtxt, sizeof uidtxt, "%u", uid);
    th_test_toolhost(&t, "list", "--connect", addr, "--server-uid", uidtxt,
                     NULL);
    CU_ASSERT_EQUAL(t.status, 0);
    CU_ASSERT(has(t.out, "echo"));
    th_test_run_free(&t);
    th_test_toolhost(&t, "reload", "--any-server", "--connect", addr, NULL);
    CU_ASSERT_EQUAL(t.status, 0);
    th_test_run_free(&t);
    th_test_toolhost(&t, "list", "--connect", addr, "--server-uid", "0",
                     NULL);
    CU_ASSERT_EQUAL(t.status, 1);
    CU_ASSERT(has(t.err, "(expected uid 0, as --server-uid says)"));
    th_test_run_free(&t);

    /* the refused call never ran; the accepted one did */
    CU_ASSERT(rpc_log_has(&s, "tool=echo"));
    FILE *f = fopen(s.log, "r");
    int echo_calls = 0, reloads = 0;
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        echo_calls += strstr(line, "tool=echo ") && strstr(line, " result ");
        reloads += strstr(line, "reload #") != NULL;
    }
    if (f)
        fclose(f);
    CU_ASSERT_EQUAL(echo_calls, 1);
    CU_ASSERT_EQUAL(reloads, 1);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
    th_test_rmtree(base);
    free(base);
    free(run);
}

/* A listener of nobody's that counts the bytes it is sent: the refused
 * client sends none, not even its first request. */
static void test_nothing_sent(void)
{
    if (!can_switch_user())
        return;
    char *base = th_test_tmpdir();
    chmod(base, 0755);
    char *run = make_dir(base, "run", nobody_pw.pw_uid, nobody_pw.pw_gid, 0700);
    char sock[108], addr[128];
    snprintf(sock, sizeof sock, "%s/fake.sock", run);
    snprintf(addr, sizeof addr, "unix:%s", sock);
    int p[2], rdy[2]; /* rdy: the fake server listens (an event to wait on) */
    CU_ASSERT_FATAL(pipe(p) == 0);
    CU_ASSERT_FATAL(pipe(rdy) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(p[0]);
        close(rdy[0]);
        if (setgroups(0, NULL) != 0 || setgid(nobody_pw.pw_gid) != 0 ||
            setuid(nobody_pw.pw_uid) != 0)
            _exit(10);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
            chmod(sock, 0666) != 0 || listen(fd, 4) != 0 ||
            write(rdy[1], "r", 1) != 1)
            _exit(11);
        close(rdy[1]);
        long total = 0;
        for (int conn = 0; conn < 2; conn++) {
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            if (poll(&pf, 1, 10000) != 1)
                _exit(12);
            int c = accept(fd, NULL, NULL);
            if (c < 0)
                _exit(13);
            char buf[4096];
            for (;;) { /* until the client hangs up (bounded) */
                struct pollfd pc = {.fd = c, .events = POLLIN};
                if (poll(&pc, 1, 10000) != 1)
                    _exit(14);
                ssize_t n = read(c, buf, sizeof buf);
                if (n <= 0)
                    break;
                total += n;
            }
            close(c);
        }
        if (write(p[1], &total, sizeof total) != (ssize_t)sizeof total)
            _exit(15);
        _exit(0);
    }
    close(p[1]);
    close(rdy[1]);
    /* bound, chmod()ed and listening: the child says so */
    struct pollfd pr = {.fd = rdy[0], .events = POLLIN};
    char r1 = 0;
    CU_ASSERT_FATAL(poll(&pr, 1, rpc_wait_ms()) == 1 &&
                    read(rdy[0], &r1, 1) == 1 && r1 == 'r');
    close(rdy[0]);
    th_rpc_client *c = NULL;
    th_error err;
    CU_ASSERT_EQUAL(th_rpc_client_connect(addr, &c, &err), TH_EPERM);
    th_rpc_client_close(c); /* NULL unless the check failed */
    th_test_run t;
    th_test_toolhost(&t, "call", "--connect", addr, "echo", "text=secret",
                     NULL);
    CU_ASSERT_EQUAL(t.status, 1);
    CU_ASSERT(has(t.err, "refusing to talk to"));
    th_test_run_free(&t);
    long total = -1;
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    if (poll(&pf, 1, 15000) == 1 &&
        read(p[0], &total, sizeof total) != (ssize_t)sizeof total)
        total = -1;
    CU_ASSERT_EQUAL(total, 0);
    close(p[0]);
    int st = 0;
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    th_test_rmtree(base);
    free(base);
    free(run);
}

/* ---- the default address ---------------------------------------------------- */

/* Sets XDG_RUNTIME_DIR for the commands this test runs; restores it. */
static char *saved_xdg;
static bool had_xdg;
static void xdg_set(const char *v)
{
    const char *x = getenv("XDG_RUNTIME_DIR");
    had_xdg = x != NULL;
    saved_xdg = x ? strdup(x) : NULL;
    setenv("XDG_RUNTIME_DIR", v, 1);
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

static void test_default_socket(void)
{
    char *base = th_test_tmpdir();
    char *xdg = make_dir(base, "xdg", geteuid(), getegid(), 0700);
    char sock[108];
    snprintf(sock, sizeof sock, "%s/toolhost/toolhost.sock", xdg);
    CU_ASSERT_FATAL(strlen(xdg) + 23 < sizeof sock);
    xdg_set(xdg);
    rpc_srv s;
    CU_ASSERT_FATAL(start_serve(&s, NULL, sock, NULL, xdg) == 0);
    /* the folder: made by serve, ours, 0700 */
    char folder[108];
    snprintf(folder, sizeof folder, "%s/toolhost", xdg);
    struct stat st;
    CU_ASSERT(lstat(folder, &st) == 0 && S_ISDIR(st.st_mode) &&
              st.st_uid == geteuid() && (st.st_mode & 07777) == 0700);
    CU_ASSERT(stat(sock, &st) == 0 && (st.st_mode & 0777) == 0600);
    CU_ASSERT(rpc_log_has(&s, "created socket folder"));

    /* --connect with no address: the same default, our own host works */
    th_test_run t;
    th_test_toolhost(&t, "call", "--connect", "echo", "text=hi", NULL);
    CU_ASSERT_EQUAL(t.status, 0);
    CU_ASSERT(has(t.out, "hi"));
    th_test_run_free(&t);
    th_test_toolhost(&t, "list", "--json", "--connect", NULL);
    CU_ASSERT_EQUAL(t.status, 0);
    CU_ASSERT(has(t.out, "\"echo\""));
    th_test_run_free(&t);
    th_test_toolhost(&t, "reload", "--connect", NULL);
    CU_ASSERT_EQUAL(t.status, 0);
    th_test_run_free(&t);
    /* the library too (NULL address) */
    th_rpc_client *c = NULL;
    th_error err;
    CU_ASSERT_EQUAL_FATAL(th_rpc_client_connect(NULL, &c, &err), 0);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);

    /* nobody there: the message names the default address */
    th_test_toolhost(&t, "call", "--connect", "echo", "text=hi", NULL);
    CU_ASSERT_EQUAL(t.status, 1);
    CU_ASSERT(has(t.err, "(the default address)") &&
              has(t.err, "is `toolhost serve` running there?"));
    th_test_run_free(&t);
    xdg_restore();
    th_test_rmtree(base);
    free(base);
    free(xdg);
}

/* serve refuses a default folder someone else made or anyone can write,
 * and says plainly when a path is too long or its parent is missing. */
static void test_serve_refuses(void)
{
    char *base = th_test_tmpdir();
    char *cfg = write_config(base);
    char *xdg = make_dir(base, "xdg", geteuid(), getegid(), 0700);
    char *folder = make_dir(xdg, "toolhost", geteuid(), getegid(), 0777);
    xdg_set(xdg);
    th_test_run t;
    char want[300];
    th_test_toolhost(&t, "serve", "-c", cfg, NULL);
    CU_ASSERT_EQUAL(t.status, 2);
    snprintf(want, sizeof want,
             "toolhost: serve: refusing to use socket folder %s: it is "
             "writable by everyone (mode 0777)",
             folder);
    CU_ASSERT(has(t.err, want));
    th_test_run_free(&t);
    if (geteuid() == 0 && getpwnam("nobody")) {
        struct passwd *pw = getpwnam("nobody");
        CU_ASSERT_FATAL(chmod(folder, 0700) == 0 &&
                        chown(folder, pw->pw_uid, pw->pw_gid) == 0);
        th_test_toolhost(&t, "serve", "-c", cfg, NULL);
        CU_ASSERT_EQUAL(t.status, 2);
        snprintf(want, sizeof want,
                 "refusing to use socket folder %s: it is owned by uid %u, "
                 "not by this host's uid 0",
                 folder, (unsigned)pw->pw_uid);
        CU_ASSERT(has(t.err, want));
        th_test_run_free(&t);
    }
    xdg_restore();

    /* a path too long for a socket */
    char addr[200];
    int n = snprintf(addr, sizeof addr, "unix:%s/", base);
    memset(addr + n, 'x', 120);
    addr[n + 120] = '\0';
    th_test_toolhost(&t, "serve", "-c", cfg, "--listen", addr, NULL);
    CU_ASSERT_EQUAL(t.status, 2);
    CU_ASSERT(has(t.err, "bytes long; a Unix socket path holds at most 107 "
                         "bytes"));
    th_test_run_free(&t);
    /* a missing parent folder */
    snprintf(addr, sizeof addr, "unix:%s/no/such/th.sock", base);
    th_test_toolhost(&t, "serve", "-c", cfg, "--listen", addr, NULL);
    CU_ASSERT_EQUAL(t.status, 2);
    snprintf(want, sizeof want,
             "socket folder %s/no/such does not exist and cannot be created: "
             "its parent %s/no is missing",
             base, base);
    CU_ASSERT(has(t.err, want));
    th_test_run_free(&t);
    /* usage errors of the new options */
    th_test_toolhost(&t, "call", "-c", cfg, "--any-server", "echo", "text=x",
                     NULL);
    CU_ASSERT_EQUAL(t.status, 2);
    CU_ASSERT(has(t.err, "--server-uid and --any-server go with --connect"));
    th_test_run_free(&t);
    /* the word after a bare --connect is its address when it looks like
     * one, and a wrong one is said so (not taken as a tool name) */
    th_test_toolhost(&t, "call", "--connect", "tcp:127.0.0.1:1", "echo",
                     "text=x", NULL);
    CU_ASSERT_EQUAL(t.status, 1);
    CU_ASSERT(has(t.err, "address 'tcp:127.0.0.1:1': use unix:PATH"));
    th_test_run_free(&t);
    th_test_toolhost(&t, "list", "--connect", "--server-uid",
                     "no-such-user-x", NULL);
    CU_ASSERT_EQUAL(t.status, 2);
    CU_ASSERT(has(t.err, "'no-such-user-x' is neither a uid nor a user"));
    th_test_run_free(&t);
    th_test_rmtree(base);
    free(base);
    free(cfg);
    free(xdg);
    free(folder);
}

void th_suite_rpc_client_sec(void)
{
    CU_pSuite s = CU_add_suite("rpc_client_sec", NULL, NULL);
    CU_add_test(s, "other_user_refused", test_other_user_refused);
    CU_add_test(s, "nothing_sent", test_nothing_sent);
    CU_add_test(s, "default_socket", test_default_socket);
    CU_add_test(s, "serve_refuses", test_serve_refuses);
}
