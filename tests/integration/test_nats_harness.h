/* test_nats_harness.h - shared by the NATS suites (test_nats.c,
 * test_nats_fleet.c): nats-server on loopback (free ports, retried on a
 * clash, its files), a client, a host serving a toolset on NATS and its
 * NATS id, its log (count, wait, time of a line), its config rewritten,
 * $SRV.STATS numbers, reply headers and bodies.
 * Static helpers for tests only. */
#ifndef TEST_NATS_HARNESS_H
#define TEST_NATS_HARNESS_H

#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <jansson.h>
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
        int64_t end = rpc_now_ms() + th_test_ms(5000);
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
        int64_t end = rpc_now_ms() + th_test_ms(5000);
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
    int64_t end = rpc_now_ms() + rpc_wait_ms();
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

/* The reply is {ok: false, error: {code: CODE, ...}}. */
NATS_H bool reply_error_is(natsMsg *m, const char *code)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    bool is = msgpack_unpack_next(&u, natsMsg_GetData(m),
                                  (size_t)natsMsg_GetDataLength(m), NULL) ==
                  MSGPACK_UNPACK_SUCCESS &&
              rpc_tool_error_is(&u.data, code);
    msgpack_unpacked_destroy(&u);
    return is;
}

/* A request with JSON params; `ms` is scaled by th_test_ms() (it is a
 * deadline for the answer, never a wait that shows none comes). */
NATS_H natsStatus request(natsConnection *nc, natsMsg **reply,
                          const char *subj, const char *json, int64_t ms)
{
    th_buf b = TH_BUF_INIT;
    rpc_pack_json(&b, json);
    natsStatus st = natsConnection_Request(reply, nc, subj, b.data,
                                           (int)b.len,
                                           th_test_ms((unsigned)ms));
    th_buf_destroy(&b);
    return st;
}

/* A nats-server's files in a fresh temp dir: `conf` as its config. */
NATS_H void gnatsd_files(gnatsd *g, const char *conf)
{
    memset(g, 0, sizeof *g);
    g->dir = th_test_tmpdir();
    g->conf = th_test_write_file(g->dir, "nats.conf", conf, (size_t)-1);
    size_t ll = strlen(g->dir) + 16;
    g->log = malloc(ll);
    snprintf(g->log, ll, "%s/nats.log", g->dir);
}

/* A results bucket key (nats.results_key_file) in `dir`, mode 0600: its
 * path (malloc'ed). */
NATS_H char *nats_key_file(const char *dir)
{
    char *k = th_test_write_file(dir, "results.key",
                                 "toolhost-test-results-key-0123456789abcdef",
                                 (size_t)-1);
    chmod(k, 0600);
    return k;
}

/* Kills it (if running) and removes its files. */
NATS_H void gnatsd_free(gnatsd *g)
{
    gnatsd_kill(g, SIGKILL);
    if (g->dir)
        th_test_rmtree(g->dir);
    free(g->dir);
    free(g->conf);
    free(g->log);
    memset(g, 0, sizeof *g);
}

/* A client of `url` (user/password when user is not NULL) that
 * reconnects forever every 100 ms; NULL when it cannot connect in
 * th_test_ms(3000). */
NATS_H natsConnection *nats_connect(const char *url, const char *user,
                                    const char *pw)
{
    natsOptions *o = NULL;
    natsConnection *nc = NULL;
    natsOptions_Create(&o);
    natsOptions_SetURL(o, url);
    if (user)
        natsOptions_SetUserInfo(o, user, pw);
    natsOptions_SetMaxReconnect(o, -1);
    natsOptions_SetReconnectWait(o, 100);
    natsOptions_SetTimeout(o, th_test_ms(3000));
    natsStatus st = natsConnection_Connect(&nc, o);
    natsOptions_Destroy(o);
    return st == NATS_OK ? nc : NULL;
}

/* Starts a host on `url` with the toolset "public" of `tools` (plugins
 * echo and reload_fx; the toolset "hidden" [echo] is not served on NATS),
 * subject prefix `prefix`, service `name`, `nats_extra` appended to its
 * nats: block, and its id read from its log. */
NATS_H int host_start(rpc_srv *h, char *id, const char *url,
                      const char *prefix, const char *name,
                      const char *tools, const char *nats_extra)
{
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  listen: [\"%s\"]\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "  - name: reload_fx\n"
             "    path: @BUILD@/fixtures/reload_a.so\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [%s]\n"
             "    allow_users: [nats]\n"
             "  - name: hidden\n"
             "    tools: [echo]\n"
             "nats:\n"
             "  prefix: %s\n"
             "  name: %s\n"
             "  toolsets: [public]\n"
             "  reconnect_wait: 100ms\n"
             "%s",
             url, tools, prefix, name, nats_extra ? nats_extra : "");
    rpc_opts o = {.config = cfg};
    if (rpc_srv_start(h, &o) != 0)
        return -1;
    host_id_from_log(h, id, 40);
    if (!id[0]) {
        rpc_dump_log(h);
        return -1;
    }
    return 0;
}

/* The time of day (ms) of the first log line with `needle`, or -1. */
NATS_H int64_t log_time_ms(rpc_srv *h, const char *needle)
{
    FILE *f = fopen(h->log, "r");
    char line[2048];
    int64_t t = -1;
    while (t < 0 && f && fgets(line, sizeof line, f)) {
        int hh, mm, ss, ms;
        if (strstr(line, needle) &&
            sscanf(line, "%*10cT%d:%d:%d.%dZ", &hh, &mm, &ss, &ms) == 4)
            t = ((int64_t)(hh * 60 + mm) * 60 + ss) * 1000 + ms;
    }
    if (f)
        fclose(f);
    return t;
}

/* num_requests of `tool` in host `id`'s $SRV.STATS, or -1. */
NATS_H int64_t stats_of(natsConnection *nc, const char *name, const char *id,
                        const char *tool)
{
    char subj[160];
    snprintf(subj, sizeof subj, "$SRV.STATS.%s.%s", name, id);
    natsMsg *r = NULL;
    if (natsConnection_RequestString(&r, nc, subj, "", th_test_ms(2000)) !=
        NATS_OK)
        return -1;
    json_t *j = json_loadb(natsMsg_GetData(r),
                           (size_t)natsMsg_GetDataLength(r), 0, NULL);
    natsMsg_Destroy(r);
    int64_t v = -1;
    size_t k;
    json_t *e;
    json_array_foreach(json_object_get(j, "endpoints"), k, e)
        if (strcmp(json_string_value(json_object_get(e, "name")), tool) == 0)
            v = json_integer_value(json_object_get(e, "num_requests"));
    json_decref(j);
    return v;
}

/* Replaces the first `from` in the host's config file by `to`. */
NATS_H void cfg_replace(rpc_srv *h, const char *from, const char *to)
{
    FILE *f = fopen(h->cfg, "r");
    CU_ASSERT_FATAL(f != NULL);
    static char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *p = strstr(text, from);
    CU_ASSERT_FATAL(p != NULL);
    static char out[4096];
    snprintf(out, sizeof out, "%.*s%s%s", (int)(p - text), text, to,
             p + strlen(from));
    f = fopen(h->cfg, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs(out, f);
    fclose(f);
}

#endif
