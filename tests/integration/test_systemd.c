/* test_systemd.c - `toolhost serve` under a fake service manager: the
 * notifications on $NOTIFY_SOCKET (a datagram socket the test binds):
 * READY=1 once serving, WATCHDOG=1 at half $WATCHDOG_USEC, RELOADING=1 on
 * SIGHUP then READY=1, STOPPING=1 on SIGTERM; socket activation: a Unix
 * socket and a TCP socket the test binds and passes as fds 3 and 4
 * ($LISTEN_FDS, $LISTEN_PID) are served instead of binding; and the same
 * through Debian's systemd-socket-activate. */
#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "integration/test_rpc_harness.h"

/* The next datagram (NUL-terminated into buf), or false after ms. */
static bool recv_note(int fd, char *buf, size_t n, int ms)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, ms) != 1)
        return false;
    ssize_t r = recv(fd, buf, n - 1, 0);
    if (r < 0)
        return false;
    buf[r] = '\0';
    return true;
}

/* Waits for a datagram containing `want`, counting the WATCHDOG=1 pings
 * seen on the way. */
static bool wait_note(int fd, const char *want, int ms, int *pings)
{
    int64_t end = rpc_now_ms() + ms;
    char buf[512];
    while (rpc_now_ms() < end) {
        if (!recv_note(fd, buf, sizeof buf, (int)(end - rpc_now_ms())))
            return false;
        if (strstr(buf, "WATCHDOG=1") && pings)
            (*pings)++;
        if (strstr(buf, want))
            return true;
    }
    return false;
}

static void test_notify(void)
{
#ifndef TH_HAVE_SYSTEMD
    TH_SKIP("built without libsystemd");
    return;
#endif
    char *dir = th_test_tmpdir();
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/notify", dir);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CU_ASSERT_FATAL(fd >= 0 &&
                    bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    setenv("NOTIFY_SOCKET", sa.sun_path, 1);
    setenv("WATCHDOG_USEC", "200000", 1); /* a ping every 100 ms */
    rpc_srv s;
    rpc_opts o = {.host_extra = "  reload: signal\n"};
    int rc = rpc_srv_start(&s, &o);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    CU_ASSERT_FATAL(rc == 0);
    int pings = 0;
    CU_ASSERT(wait_note(fd, "READY=1", rpc_wait_ms(), &pings));
    /* pings go on: 3 more come (each waited for within the whole budget,
     * not within a gap: under valgrind at load one gap took over 300 ms) */
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    int more = 0;
    while (more < 3 && rpc_now_ms() < end &&
           wait_note(fd, "WATCHDOG=1", (int)(end - rpc_now_ms()), NULL))
        more++;
    CU_ASSERT(more >= 3);
    CU_ASSERT(rpc_log_has(&s, "watchdog: pinging the service manager every "
                              "100 ms"));
    kill(s.pid, SIGHUP);
    CU_ASSERT(wait_note(fd, "RELOADING=1", rpc_wait_ms(), NULL));
    CU_ASSERT(wait_note(fd, "READY=1", rpc_wait_ms(), NULL));
    kill(s.pid, SIGTERM);
    CU_ASSERT(wait_note(fd, "STOPPING=1", rpc_wait_ms(), NULL));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, 0), 0); /* 0: no second signal */
    close(fd);
    rpc_srv_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

static bool log_quiet_has(rpc_srv *s, const char *needle)
{
    FILE *f = fopen(s->log, "r");
    char line[4096];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return found;
}

/* The config written, s->log named in s->dir and opened for the server
 * (an fd to hand it as stdout and stderr). */
static int open_log(rpc_srv *s)
{
    size_t ll = strlen(s->dir) + 16;
    s->log = malloc(ll);
    CU_ASSERT_FATAL(s->log != NULL);
    snprintf(s->log, ll, "%s/serve.log", s->dir);
    return open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static int high_dup(int fd)
{
    int h = fcntl(fd, F_DUPFD, 10);
    close(fd);
    return h;
}

static void test_activation(void)
{
#ifndef TH_HAVE_SYSTEMD
    TH_SKIP("built without libsystemd");
    return;
#endif
    rpc_srv s;
    memset(&s, 0, sizeof s);
    s.in_fd = s.out_fd = -1;
    s.dir = th_test_tmpdir();
    /* the sockets, bound by "the service manager" */
    snprintf(s.sock, sizeof s.sock, "%s/act.sock", s.dir);
    int ufd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un ua = {.sun_family = AF_UNIX};
    snprintf(ua.sun_path, sizeof ua.sun_path, "%s", s.sock);
    CU_ASSERT_FATAL(ufd >= 0 && bind(ufd, (struct sockaddr *)&ua, sizeof ua) == 0 &&
                    listen(ufd, 16) == 0);
    chmod(s.sock, 0600);
    int tfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in ta = {.sin_family = AF_INET};
    ta.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t tl = sizeof ta;
    CU_ASSERT_FATAL(tfd >= 0 && bind(tfd, (struct sockaddr *)&ta, sizeof ta) == 0 &&
                    listen(tfd, 16) == 0 &&
                    getsockname(tfd, (struct sockaddr *)&ta, &tl) == 0);
    unsigned port = ntohs(ta.sin_port);
    ufd = high_dup(ufd);
    tfd = high_dup(tfd);
    char extra[256];
    snprintf(extra, sizeof extra,
             "  listen: [\"unix:%s\", \"http://127.0.0.1:%u/metrics\"]\n",
             s.sock, port);
    rpc_opts o = {.host_extra = extra};
    rpc_write_config(&s, &o);
    int logfd = open_log(&s);
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(logfd, 2);
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        dup2(logfd, 1);
        if (dup2(ufd, 3) != 3 || dup2(tfd, 4) != 4)
            _exit(126);
        char p[32];
        snprintf(p, sizeof p, "%d", (int)getpid());
        setenv("LISTEN_PID", p, 1);
        setenv("LISTEN_FDS", "2", 1);
        execl(rpc_server_bin(), rpc_server_bin(), "serve", "-c", s.cfg,
              (char *)NULL);
        _exit(127);
    }
    s.pid = pid;
    close(logfd);
    close(ufd); /* the server's copy serves; ours is not needed */
    close(tfd);
    th_rpc_client *c = NULL;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (rpc_now_ms() < end && !log_quiet_has(&s, "serving Prometheus"))
        usleep(20000);
    c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"a\"}]", &r) == 0 &&
              !r.err);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_log_has(&s, "socket from the service manager"));
    CU_ASSERT(rpc_log_has(&s, "the socket from the service manager (fd 4)"));
    /* the activated TCP socket answers /metrics */
    int hfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CU_ASSERT_FATAL(hfd >= 0 && connect(hfd, (struct sockaddr *)&ta, sizeof ta) == 0);
    const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    CU_ASSERT(write(hfd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1));
    char buf[256] = "";
    struct pollfd pf = {.fd = hfd, .events = POLLIN};
    if (poll(&pf, 1, rpc_wait_ms()) == 1 && read(hfd, buf, sizeof buf - 1) < 0)
        buf[0] = '\0';
    close(hfd);
    CU_ASSERT(strncmp(buf, "HTTP/1.1 200", 12) == 0);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    /* the socket file is the service manager's: left in place */
    struct stat st;
    CU_ASSERT(stat(s.sock, &st) == 0);
    rpc_srv_free(&s);
}

/* The real tool: Debian's systemd-socket-activate binds the socket, waits
 * for the first client, then execs `toolhost serve` with $LISTEN_FDS;
 * the client that woke it is answered on the socket it handed over. */
static void test_socket_activate(void)
{
#ifndef TH_HAVE_SYSTEMD
    TH_SKIP("built without libsystemd");
    return;
#endif
    const char *tool = "/usr/bin/systemd-socket-activate";
    if (access(tool, X_OK) != 0) {
        TH_SKIP("no systemd-socket-activate (Debian's systemd package)");
        return;
    }
    rpc_srv s;
    memset(&s, 0, sizeof s);
    s.in_fd = s.out_fd = -1;
    s.dir = th_test_tmpdir();
    snprintf(s.sock, sizeof s.sock, "%s/sa.sock", s.dir);
    char extra[256];
    snprintf(extra, sizeof extra, "  listen: [\"unix:%s\"]\n", s.sock);
    rpc_opts o = {.host_extra = extra};
    rpc_write_config(&s, &o);
    int logfd = open_log(&s);
    CU_ASSERT_FATAL(logfd >= 0);
    char listen_arg[sizeof s.sock + 4];
    snprintf(listen_arg, sizeof listen_arg, "%s", s.sock);
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(logfd, 2);
        dup2(logfd, 1);
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        execl(tool, tool, "-l", listen_arg, "--", rpc_server_bin(), "serve",
              "-c", s.cfg, (char *)NULL);
        _exit(127);
    }
    s.pid = pid; /* systemd-socket-activate execs toolhost in place */
    close(logfd);
    /* the socket exists once the tool says it listens */
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (rpc_now_ms() < end && !log_quiet_has(&s, "Listening on"))
        usleep(20000);
    CU_ASSERT_FATAL(log_quiet_has(&s, "Listening on"));
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"woke\"}]",
                       &r) == 0 &&
              !r.err);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_log_has(&s, "socket from the service manager"));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

void th_suite_systemd(void)
{
    CU_pSuite s = CU_add_suite("systemd", NULL, NULL);
    CU_add_test(s, "notify", test_notify);
    CU_add_test(s, "activation", test_activation);
    CU_add_test(s, "socket_activate", test_socket_activate);
}
