/* test_nats_harness.h - shared by the NATS suites (test_nats.c,
 * test_nats_fleet.c): nats-server on loopback (free ports, retried on a
 * clash), reading a host's NATS id from its log, reply headers and bodies.
 * Static helpers for tests only. */
#ifndef TEST_NATS_HARNESS_H
#define TEST_NATS_HARNESS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <nats/nats.h>

#include "test_rpc_harness.h"
#include "th/buf.h"
#include "th/json.h"

#define NATS_H static __attribute__((unused))

NATS_H const char *nats_server_bin(void)
{
    static const char *const c[] = {"/usr/sbin/nats-server",
                                    "/usr/bin/nats-server",
                                    "/usr/local/bin/nats-server", NULL};
    for (int i = 0; c[i]; i++)
        if (access(c[i], X_OK) == 0)
            return c[i];
    return NULL;
}

NATS_H int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0)
        rpc_die("free port");
    close(fd);
    return ntohs(sa.sin_port);
}

NATS_H bool port_answers(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    bool ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

typedef struct gnatsd {
    char *dir, *conf, *log;
    int port;
    pid_t pid;
    const char *extra[16]; /* more arguments (NULL-terminated) */
} gnatsd;

/* Starts nats-server on g->port (a fresh free port when 0); retries on a
 * clash with another process taking the port meanwhile. */
NATS_H int gnatsd_start(gnatsd *g)
{
    bool fixed = g->port != 0;
    for (int attempt = 0; attempt < (fixed ? 1 : 5); attempt++) {
        if (!fixed)
            g->port = free_port();
        char port[16];
        snprintf(port, sizeof port, "%d", g->port);
        int logfd = open(g->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                         0644);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            dup2(logfd, 1);
            dup2(logfd, 2);
            const char *argv[32] = {"nats-server", "-a", "127.0.0.1", "-p",
                                    port, "-c", g->conf};
            size_t n = 7;
            for (size_t k = 0; g->extra[k] && n < 31; k++)
                argv[n++] = g->extra[k];
            execv(nats_server_bin(), (char *const *)argv);
            _exit(127);
        }
        close(logfd);
        g->pid = pid;
        int64_t end = rpc_now_ms() + 5000;
        while (rpc_now_ms() < end) {
            int st;
            if (waitpid(pid, &st, WNOHANG) == pid) {
                g->pid = 0;
                break;
            }
            if (port_answers(g->port))
                return 0;
            usleep(10000);
        }
        if (g->pid) {
            kill(g->pid, SIGKILL);
            waitpid(g->pid, NULL, 0);
            g->pid = 0;
        }
    }
    return -1;
}

NATS_H void gnatsd_kill(gnatsd *g, int sig)
{
    if (g->pid > 0) {
        kill(g->pid, sig);
        int64_t end = rpc_now_ms() + 5000;
        while (rpc_now_ms() < end && waitpid(g->pid, NULL, WNOHANG) == 0)
            usleep(5000);
        if (kill(g->pid, 0) == 0) {
            kill(g->pid, SIGKILL);
            waitpid(g->pid, NULL, 0);
        }
        g->pid = 0;
    }
}

NATS_H void host_id_from_log(rpc_srv *s, char *out, size_t n)
{
    out[0] = '\0';
    int64_t end = rpc_now_ms() + 5000;
    while (!out[0] && rpc_now_ms() < end) {
        FILE *f = fopen(s->log, "r");
        char line[1024];
        while (f && fgets(line, sizeof line, f)) {
            char *p = strstr(line, " id ");
            if (strstr(line, "nats: serving") && p)
                sscanf(p + 4, "%39[0-9a-f]", out);
        }
        if (f)
            fclose(f);
        (void)n;
        if (!out[0])
            usleep(10000);
    }
}

NATS_H const char *reply_kind(natsMsg *m)
{
    const char *v = NULL;
    return natsMsgHeader_Get(m, "Toolhost-Kind", &v) == NATS_OK ? v : "";
}

/* The reply body as a msgpack object (zone freed by the caller via
 * msgpack_unpacked_destroy). */
NATS_H bool reply_ok(natsMsg *m, const char *want_stdout)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    bool ok = msgpack_unpack_next(&u, natsMsg_GetData(m),
                                  (size_t)natsMsg_GetDataLength(m), NULL) ==
                  MSGPACK_UNPACK_SUCCESS &&
              rpc_ok(&u.data) &&
              (!want_stdout || rpc_stdout_is(&u.data, want_stdout));
    msgpack_unpacked_destroy(&u);
    return ok;
}

NATS_H natsStatus request(natsConnection *nc, natsMsg **reply,
                          const char *subj, const char *json, int64_t ms)
{
    th_buf b = TH_BUF_INIT;
    rpc_pack_json(&b, json);
    natsStatus st = natsConnection_Request(reply, nc, subj, b.data,
                                           (int)b.len, ms);
    th_buf_destroy(&b);
    return st;
}

#endif
