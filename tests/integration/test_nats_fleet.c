/* test_nats_fleet.c - the NATS front beyond one server and one config
 * (docs/scale.md): a reload that adds and removes tools (un)subscribes
 * them; finished results in a JetStream key-value bucket answer
 * tasks.result after the task's host has gone; a three-node nats-server
 * cluster with routes survives losing the server a host was connected to;
 * TLS and passwords, a wrong one refused at start; `toolhost call
 * --connect nats://` retries an idempotent tool once on another host and
 * not a tool that is not; reply batching's second connection on a server
 * that allows one connection, and lost alone.  Skipped when nats-server
 * is not installed. */
#include "test_nats_harness.h"

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdatomic.h>

/* One nats-server with JetStream, no auth, for the suite. */
static gnatsd G;
static char G_url[64];
static bool g_up;

static char js_dir[512];

static int suite_init(void)
{
    if (!nats_server_bin())
        return 0;
    gnatsd_files(&G, "max_payload: 1MB\n");
    snprintf(js_dir, sizeof js_dir, "%s/js", G.dir);
    G.extra[0] = "-js";
    G.extra[1] = "-sd";
    G.extra[2] = js_dir;
    g_up = gnatsd_start(&G) == 0;
    snprintf(G_url, sizeof G_url, "nats://127.0.0.1:%d", G.port);
    if (!g_up)
        fprintf(stderr, "test_nats_fleet: nats-server did not come up\n");
    return 0;
}

static void relay_cleanup(void);

static int suite_clean(void)
{
    relay_cleanup();
    if (G.dir)
        gnatsd_free(&G);
    nats_CloseAndWait(2000);
    return 0;
}

#define NEED_SERVER()                                                         \
    do {                                                                      \
        if (!nats_server_bin())                                               \
            TH_SKIP("nats-server is not installed");                          \
        CU_ASSERT_FATAL(g_up);                                                \
    } while (0)

/* The endpoint names of host `id` in its $SRV.INFO, comma-joined. */
static void info_endpoints(natsConnection *nc, const char *name,
                           const char *id, char *out, size_t n)
{
    out[0] = '\0';
    char subj[160];
    snprintf(subj, sizeof subj, "$SRV.INFO.%s.%s", name, id);
    natsMsg *r = NULL;
    if (natsConnection_RequestString(&r, nc, subj, "", th_test_ms(2000)) != NATS_OK)
        return;
    json_t *j = json_loadb(natsMsg_GetData(r),
                           (size_t)natsMsg_GetDataLength(r), 0, NULL);
    natsMsg_Destroy(r);
    size_t k;
    json_t *e;
    json_array_foreach(json_object_get(j, "endpoints"), k, e)
    {
        size_t l = strlen(out);
        snprintf(out + l, n - l, "%s%s", l ? "," : "",
                 json_string_value(json_object_get(e, "name")));
    }
    json_decref(j);
}

/* A host started before its NATS server: `serve` comes up at once (the
 * socket answers), retries in the background, and serves when the server
 * comes. */
static void test_late_server(void)
{
    NEED_SERVER();
    gnatsd s;
    gnatsd_files(&s, "max_payload: 1MB\n");
    s.port = free_port();
    char url[64];
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", s.port);
    rpc_srv h;
    char id[40];
    int64_t t0 = rpc_now_ms();
    CU_ASSERT_FATAL(host_start(&h, id, url, "late", "late", "echo", NULL) ==
                    0);
    CU_ASSERT(rpc_now_ms() - t0 < th_test_ms(10000));
    CU_ASSERT(rpc_log_count(&h, "is not reachable yet") == 1);
    CU_ASSERT_FATAL(gnatsd_start(&s) == 0); /* that port */
    CU_ASSERT(rpc_log_wait(&h, "nats: connected to", rpc_wait_ms()));
    natsConnection *nc = nats_connect(url, NULL, NULL);
    CU_ASSERT_FATAL(nc != NULL);
    bool ok = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!ok && rpc_now_ms() < end) {
        natsMsg *r = NULL;
        ok = request(nc, &r, "late.public.echo", "{\"text\":\"hi\"}", 500) ==
                 NATS_OK &&
             reply_ok(r, "hi");
        natsMsg_Destroy(r);
        if (!ok)
            usleep(50000);
    }
    CU_ASSERT(ok);
    natsConnection_Destroy(nc);
    CU_ASSERT_EQUAL(rpc_srv_stop(&h, SIGTERM), 0);
    rpc_srv_free(&h);
    gnatsd_free(&s);
}

/* An operator's NATS server that lets the hosts' account hold one
 * connection (docs/scale.md: a host with reply batching needs two).  The
 * host starts before the server and the server restarts under it: each
 * time the host's own connection - the one that serves - must be the one
 * that gets in, never the reply batching connection (which would hold the
 * account's only slot while the host serves nothing), and the host says
 * that batching is off.  Callers are in another account that imports the
 * hosts' subjects. */
static void test_reply_batching_conn_limit(void)
{
    NEED_SERVER();
    gnatsd s;
    gnatsd_files(&s,
                 "accounts {\n"
                 "  H: {users: [{user: host, password: hostpw}],\n"
                 "      limits: {max_connections: 1},\n"
                 "      exports: [{service: \"rl.>\", response: stream}]}\n"
                 "  A: {users: [{user: alice, password: alicepw}],\n"
                 "      imports: [{service: {account: H, subject: "
                 "\"rl.>\"}}]}\n"
                 "}\n");
    s.port = free_port();
    char url[64];
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", s.port);
    rpc_srv h;
    char id[40];
    CU_ASSERT_FATAL(host_start(&h, id, url, "rl", "rl", "echo",
                               "  user: host\n  password: hostpw\n") == 0);
    natsConnection *nc = NULL;
    int served = 0;
    enum { ROUNDS = 4 };
    for (int round = 0; round < ROUNDS; round++) {
        CU_ASSERT_FATAL(gnatsd_start(&s) == 0); /* that port */
        if (!nc)
            nc = nats_connect(url, "alice", "alicepw");
        CU_ASSERT_FATAL(nc != NULL);
        bool ok = false;
        int64_t end = rpc_now_ms() + rpc_wait_ms();
        while (!ok && rpc_now_ms() < end) {
            natsMsg *r = NULL;
            ok = request(nc, &r, "rl.public.echo", "{\"text\":\"hi\"}",
                         500) == NATS_OK &&
                 reply_ok(r, "hi");
            natsMsg_Destroy(r);
            if (!ok)
                usleep(50000);
        }
        served += ok;
        if (!ok)
            break;
        gnatsd_kill(&s, SIGTERM);
    }
    fprintf(stderr, "\n  one connection allowed: served after %d of %d "
            "server starts\n", served, ROUNDS);
    CU_ASSERT_EQUAL(served, ROUNDS);
    CU_ASSERT(rpc_log_wait(&h, "reply batching off", rpc_wait_ms()));
    if (nc)
        natsConnection_Destroy(nc);
    CU_ASSERT_EQUAL(rpc_srv_stop(&h, SIGTERM), 0);
    rpc_srv_free(&h);
    gnatsd_free(&s);
}

/* A TCP relay between a host and the suite's server that can break the
 * host's reply batching connection alone (its CONNECT names it
 * toolhost-<id>-replies) and refuse it when it comes back: a server that
 * closes that one connection, its connection limit reached meanwhile. */
typedef struct relay {
    int lfd, port, dport;
    pthread_t th;
    atomic_bool stop, kill_replies, refuse_replies;
    int c[16], s[16];
    int kind[16]; /* 0 not known yet, 1 the host's own, 2 replies */
    int n;
    bool running;
} relay;

/* (static: a failed assertion leaves its thread running until
 * suite_clean) */
static relay RL;

static void relay_drop(relay *r, int i)
{
    close(r->c[i]);
    close(r->s[i]);
    r->n--;
    r->c[i] = r->c[r->n];
    r->s[i] = r->s[r->n];
    r->kind[i] = r->kind[r->n];
}

static void *relay_main(void *ud)
{
    relay *r = ud;
    char buf[65536];
    while (!atomic_load(&r->stop)) {
        if (atomic_exchange(&r->kill_replies, false))
            for (int i = r->n - 1; i >= 0; i--)
                if (r->kind[i] == 2)
                    relay_drop(r, i);
        struct pollfd p[33];
        int np = 0;
        p[np++] = (struct pollfd){.fd = r->lfd, .events = POLLIN};
        for (int i = 0; i < r->n; i++) {
            p[np++] = (struct pollfd){.fd = r->c[i], .events = POLLIN};
            p[np++] = (struct pollfd){.fd = r->s[i], .events = POLLIN};
        }
        if (poll(p, (nfds_t)np, 20) <= 0)
            continue;
        for (int i = r->n - 1; i >= 0; i--) {
            for (int dir = 0; dir < 2; dir++) {
                struct pollfd *q = &p[1 + 2 * i + dir];
                if (!(q->revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                ssize_t k = read(q->fd, buf, sizeof buf);
                bool bad = k <= 0;
                if (!bad && dir == 0 && r->kind[i] == 0) {
                    r->kind[i] = memmem(buf, (size_t)k, "-replies\"", 9)
                                     ? 2
                                     : 1;
                    bad = r->kind[i] == 2 &&
                          atomic_load(&r->refuse_replies);
                }
                if (!bad) {
                    int to = dir == 0 ? r->s[i] : r->c[i];
                    for (ssize_t off = 0; off < k && !bad;) {
                        ssize_t w = write(to, buf + off, (size_t)(k - off));
                        bad = w <= 0;
                        off += w > 0 ? w : 0;
                    }
                }
                if (bad) {
                    relay_drop(r, i);
                    break;
                }
            }
        }
        if ((p[0].revents & POLLIN) && r->n < 16) {
            int c = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
            int sfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            struct sockaddr_in sa = {.sin_family = AF_INET};
            sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            sa.sin_port = htons((uint16_t)r->dport);
            if (c >= 0 && sfd >= 0 &&
                connect(sfd, (struct sockaddr *)&sa, sizeof sa) == 0) {
                r->c[r->n] = c;
                r->s[r->n] = sfd;
                r->kind[r->n] = 0;
                r->n++;
            } else {
                if (c >= 0)
                    close(c);
                if (sfd >= 0)
                    close(sfd);
            }
        }
    }
    while (r->n)
        relay_drop(r, 0);
    return NULL;
}

static int relay_start(relay *r, int dport)
{
    memset(r, 0, sizeof *r);
    r->dport = dport;
    r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(r->lfd, 16) != 0 ||
        getsockname(r->lfd, (struct sockaddr *)&sa, &sl) != 0)
        return -1;
    r->port = ntohs(sa.sin_port);
    r->running = pthread_create(&r->th, NULL, relay_main, r) == 0;
    return r->running ? 0 : -1;
}

static void relay_stop(relay *r)
{
    if (!r->running)
        return;
    atomic_store(&r->stop, true);
    pthread_join(r->th, NULL);
    close(r->lfd);
    r->running = false;
}

static void relay_cleanup(void)
{
    relay_stop(&RL);
}

/* The reply batching connection lost while the host's own stays up, and
 * refused when it comes back: the calls whose replies went on it (they
 * came in a burst) still get their results - on the host's connection -
 * rather than waiting in a buffer that is never sent, and the log says
 * batching is off. */
static void test_reply_batching_conn_lost(void)
{
    NEED_SERVER();
    relay_stop(&RL);
    relay *rl = &RL;
    CU_ASSERT_FATAL(relay_start(rl, G.port) == 0);
    char url[64];
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", rl->port);
    rpc_srv h;
    char id[40];
    CU_ASSERT_FATAL(host_start(&h, id, url, "rk", "rk", "echo, echo_async",
                               NULL) == 0);
    CU_ASSERT(rpc_log_wait(&h, "reply batching on", rpc_wait_ms()));
    natsConnection *nc = nats_connect(G_url, NULL, NULL);
    CU_ASSERT_FATAL(nc != NULL);
    natsSubscription *sub = NULL;
    CU_ASSERT_FATAL(natsConnection_SubscribeSync(&sub, nc, "_INBOX.rk.*") ==
                    NATS_OK);
    natsSubscription_SetPendingLimits(sub, -1, -1);
    natsConnection_Flush(nc);
    enum { N = 6 };
    int state[N] = {0}; /* 1 acked, 2 result */
    th_buf a = TH_BUF_INIT;
    /* each call runs 1 s at least: no result before the break below, at
     * the first ack (the first call had the others waiting behind it: its
     * replies go on the batching connection) */
    rpc_pack_json(&a, "{\"text\":\"k\",\"steps\":2,\"delay_ms\":500}");
    for (int i = 0; i < N; i++) {
        char inbox[64];
        snprintf(inbox, sizeof inbox, "_INBOX.rk.%d", i);
        natsConnection_PublishRequest(nc, "rk.public.echo_async", inbox,
                                      a.data, (int)a.len);
    }
    natsConnection_Flush(nc);
    th_buf_destroy(&a);
    int acked = 0, done = 0, early = 0, bad = 0;
    bool broke = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (done < N && rpc_now_ms() < end) {
        if (!broke && acked > 0) {
            early = done;
            atomic_store(&rl->refuse_replies, true);
            atomic_store(&rl->kill_replies, true);
            broke = true;
        }
        natsMsg *m = NULL;
        if (natsSubscription_NextMsg(&m, sub, 100) != NATS_OK)
            continue;
        int i = atoi(natsMsg_GetSubject(m) + strlen("_INBOX.rk."));
        CU_ASSERT_FATAL(i >= 0 && i < N);
        const char *k = reply_kind(m);
        /* (a reply in flight when the connection broke may be lost - NATS
         * delivers at most once - but none comes after the result) */
        if (strcmp(k, "ack") == 0) {
            bad += state[i] != 0;
            state[i] = 1;
            acked++;
        } else if (strcmp(k, "result") == 0) {
            bad += state[i] == 2 || !reply_ok(m, "k");
            state[i] = 2;
            done++;
        } else if (strcmp(k, "progress") != 0 || state[i] == 2)
            bad++;
        natsMsg_Destroy(m);
    }
    fprintf(stderr, "\n  batching connection lost: %d acked, %d results "
            "(%d before the break), %d out of order\n", acked, done, early,
            bad);
    CU_ASSERT(broke);
    CU_ASSERT_EQUAL(early, 0);
    CU_ASSERT_EQUAL(done, N);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(rpc_log_wait(&h, "reply batching off", rpc_wait_ms()));
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    CU_ASSERT_EQUAL(rpc_srv_stop(&h, SIGTERM), 0);
    rpc_srv_free(&h);
    relay_stop(rl);
}

/* 1. A reload that adds a tool subscribes it (callable, in $SRV.INFO); one
 * that removes it unsubscribes it (no responders at once). */
static void test_reload_endpoints(void)
{
    NEED_SERVER();
    rpc_srv h;
    char id[40];
    CU_ASSERT_FATAL(host_start(&h, id, G_url, "rl", "rl", "echo", NULL) ==
                    0);
    natsConnection *nc = nats_connect(G_url, NULL, NULL);
    CU_ASSERT_FATAL(nc != NULL);
    char eps[512];
    info_endpoints(nc, "rl", id, eps, sizeof eps);
    CU_ASSERT_STRING_EQUAL(eps, "echo");
    natsMsg *r = NULL;
    CU_ASSERT(request(nc, &r, "rl.public.rl_answer", "{}", 1000) ==
              NATS_NO_RESPONDERS);
    natsMsg_Destroy(r);
    r = NULL;
    /* add rl_answer (a tool of another plugin) and echo_async */
    cfg_replace(&h, "tools: [echo]", "tools: [echo, rl_answer, echo_async]");
    kill(h.pid, SIGHUP);
    CU_ASSERT_FATAL(rpc_log_wait(&h, "now serving rl.public.rl_answer", 10000));
    CU_ASSERT(rpc_log_wait(&h, "2 added, 0 removed", 2000));
    CU_ASSERT_FATAL(request(nc, &r, "rl.public.rl_answer", "{}", 3000) ==
                    NATS_OK);
    CU_ASSERT(reply_ok(r, "A"));
    natsMsg_Destroy(r);
    r = NULL;
    info_endpoints(nc, "rl", id, eps, sizeof eps);
    CU_ASSERT(strstr(eps, "rl_answer") && strstr(eps, "echo_async") &&
              strstr(eps, "echo"));
    /* remove it again: the subject has no responders, INFO drops it */
    cfg_replace(&h, "tools: [echo, rl_answer, echo_async]",
                  "tools: [echo_async]");
    kill(h.pid, SIGHUP);
    CU_ASSERT_FATAL(rpc_log_wait(&h, "rl.public.rl_answer is no longer served",
                             10000));
    int64_t t0 = rpc_now_ms();
    CU_ASSERT(request(nc, &r, "rl.public.rl_answer", "{}", 3000) ==
              NATS_NO_RESPONDERS);
    CU_ASSERT(rpc_now_ms() - t0 < 1000); /* at once, not a timeout */
    natsMsg_Destroy(r);
    r = NULL;
    CU_ASSERT(request(nc, &r, "rl.public.echo", "{\"text\":\"x\"}", 3000) ==
              NATS_NO_RESPONDERS);
    natsMsg_Destroy(r);
    r = NULL;
    info_endpoints(nc, "rl", id, eps, sizeof eps);
    CU_ASSERT_STRING_EQUAL(eps, "echo_async");
    /* and back: the same endpoint subscribed again */
    cfg_replace(&h, "tools: [echo_async]", "tools: [echo, echo_async]");
    kill(h.pid, SIGHUP);
    CU_ASSERT_FATAL(rpc_log_wait(&h, "1 added, 0 removed", 10000));
    CU_ASSERT_FATAL(request(nc, &r, "rl.public.echo", "{\"text\":\"back\"}",
                            3000) == NATS_OK);
    CU_ASSERT(reply_ok(r, "back"));
    natsMsg_Destroy(r);
    natsConnection_Destroy(nc);
    CU_ASSERT_EQUAL(rpc_srv_stop(&h, SIGTERM), 0);
    rpc_srv_free(&h);
}

/* The Toolhost-Stored header of async_call's last result ("" when none). */
static char last_stored[8];

/* An async call on whichever host takes it: ack (host, task id), result.
 * Returns the index of the host in ids (or -1) and the task id. */
static int async_call(natsConnection *nc, const char *subj, char ids[][40],
                      int n, char *task, size_t task_n)
{
    natsInbox *ib = NULL;
    natsSubscription *sub = NULL;
    natsInbox_Create(&ib);
    natsConnection_SubscribeSync(&sub, nc, ib);
    th_buf b = TH_BUF_INIT;
    rpc_pack_json(&b, "{\"text\":\"kept\",\"steps\":2,\"delay_ms\":20}");
    natsConnection_PublishRequest(nc, subj, ib, b.data, (int)b.len);
    th_buf_destroy(&b);
    int host = -1;
    bool done = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!done && rpc_now_ms() < end) {
        natsMsg *m = NULL;
        if (natsSubscription_NextMsg(&m, sub, 200) != NATS_OK)
            continue;
        const char *k = reply_kind(m);
        if (strcmp(k, "ack") == 0) {
            const char *t = NULL, *hv = NULL;
            natsMsgHeader_Get(m, "Toolhost-Task", &t);
            natsMsgHeader_Get(m, "Toolhost-Host", &hv);
            snprintf(task, task_n, "%s", t ? t : "");
            for (int i = 0; hv && i < n; i++)
                if (strcmp(ids[i], hv) == 0)
                    host = i;
        } else if (strcmp(k, "result") == 0) {
            done = reply_ok(m, "kept");
            const char *sv = NULL;
            snprintf(last_stored, sizeof last_stored, "%s",
                     natsMsgHeader_Get(m, "Toolhost-Stored", &sv) ==
                                 NATS_OK && sv
                         ? sv
                         : "");
        }
        natsMsg_Destroy(m);
    }
    natsSubscription_Destroy(sub);
    natsInbox_Destroy(ib);
    return done ? host : -1;
}

/* Two hosts on the shared server, prefix and id `pfx`, serving echo and
 * echo_async, whose finished results go to `bucket`, signed with one key
 * (both sign and check its entries with it); 0 once the first has the
 * bucket. */
static int kv_hosts(rpc_srv h[2], char ids[2][40], const char *pfx,
                    const char *bucket)
{
    char *key = nats_key_file(G.dir);
    char extra[1024], want[128];
    snprintf(extra, sizeof extra,
             "  results_ttl: 1m\n"
             "  results_bucket: %s\n"
             "  results_key_file: %s\n", bucket, key);
    free(key);
    for (int i = 0; i < 2; i++)
        if (host_start(&h[i], ids[i], G_url, pfx, pfx, "echo, echo_async",
                       extra) != 0)
            return -1;
    snprintf(want, sizeof want, "key-value bucket %s", bucket);
    return rpc_log_wait(&h[0], want, rpc_wait_ms()) ? 0 : -1;
}

/* 2. Finished results go to the JetStream bucket: after the host that ran
 * a task is killed, <prefix>.tasks.result through another host answers. */
static void test_result_after_host_gone(void)
{
    NEED_SERVER();
    rpc_srv h[2];
    char ids[2][40];
    CU_ASSERT_FATAL(kv_hosts(h, ids, "kv", "kvtest") == 0);
    natsConnection *nc = nats_connect(G_url, NULL, NULL);
    CU_ASSERT_FATAL(nc != NULL);
    char task[96] = "";
    int owner = async_call(nc, "kv.public.echo_async", ids, 2, task,
                           sizeof task);
    CU_ASSERT_FATAL(owner >= 0 && task[0]);
    int other = 1 - owner;
    /* the bucket's TTL is nats.results_ttl */
    natsMsg *r = NULL;
    CU_ASSERT_FATAL(natsConnection_RequestString(
                        &r, nc, "$JS.API.STREAM.INFO.KV_kvtest", "",
                        th_test_ms(3000)) == NATS_OK);
    json_t *j = json_loadb(natsMsg_GetData(r),
                           (size_t)natsMsg_GetDataLength(r), 0, NULL);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(
                        json_object_get(j, "config"), "max_age")),
                    60000000000LL);
    json_decref(j);
    natsMsg_Destroy(r);
    r = NULL;
    kill(h[owner].pid, SIGKILL);
    rpc_srv_wait(&h[owner]);
    /* its own subject is gone with it ... */
    char subj[160];
    const char *dot = strrchr(task, '.');
    CU_ASSERT_FATAL(dot != NULL);
    snprintf(subj, sizeof subj, "kv.host.%s.tasks.result", ids[owner]);
    /* (once the server has seen the connection drop: until then a
     * request still goes to it and times out) */
    natsStatus gone = NATS_OK;
    for (int64_t e = rpc_now_ms() + rpc_wait_ms();
         gone != NATS_NO_RESPONDERS && rpc_now_ms() < e;) {
        gone = natsConnection_RequestString(&r, nc, subj, dot + 1,
                                            th_test_ms(1000));
        natsMsg_Destroy(r);
        r = NULL;
    }
    CU_ASSERT_EQUAL(gone, NATS_NO_RESPONDERS);
    /* ... the shared one answers from the bucket, through the survivor */
    CU_ASSERT_FATAL(natsConnection_RequestString(&r, nc, "kv.tasks.result",
                                                 task, th_test_ms(3000)) == NATS_OK);
    CU_ASSERT(reply_ok(r, "kept"));
    CU_ASSERT_STRING_EQUAL(reply_kind(r), "task");
    const char *hv = NULL;
    natsMsgHeader_Get(r, "Toolhost-Host", &hv);
    CU_ASSERT(hv && strcmp(hv, ids[other]) == 0);
    natsMsg_Destroy(r);
    r = NULL;
    /* an unknown task: not_found, said plainly */
    CU_ASSERT_FATAL(natsConnection_RequestString(&r, nc, "kv.tasks.result",
                                                 "0123456789abcdef.99",
                                                 th_test_ms(3000)) == NATS_OK);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CU_ASSERT(msgpack_unpack_next(&u, natsMsg_GetData(r),
                                  (size_t)natsMsg_GetDataLength(r),
                                  NULL) == MSGPACK_UNPACK_SUCCESS &&
              rpc_tool_error_is(&u.data, "not_found"));
    msgpack_unpacked_destroy(&u);
    natsMsg_Destroy(r);
    r = NULL;
    /* the survivor's own task, from memory */
    char task2[96] = "";
    int o2 = async_call(nc, "kv.public.echo_async", ids, 2, task2,
                        sizeof task2);
    CU_ASSERT_EQUAL(o2, other);
    CU_ASSERT_FATAL(natsConnection_RequestString(&r, nc, "kv.tasks.result",
                                                 task2, th_test_ms(3000)) == NATS_OK);
    CU_ASSERT(reply_ok(r, "kept"));
    natsMsg_Destroy(r);
    natsConnection_Destroy(nc);
    CU_ASSERT_EQUAL(rpc_srv_stop(&h[other], SIGTERM), 0);
    for (int i = 0; i < 2; i++)
        rpc_srv_free(&h[i]);
}

/* A JetStream API request with a JSON body; its answer as JSON (NULL when
 * none came). */
static json_t *js_api(natsConnection *nc, const char *subj, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    natsMsg *r = NULL;
    json_t *j = NULL;
    if (natsConnection_RequestString(&r, nc, subj, text ? text : "",
                                     th_test_ms(3000)) == NATS_OK)
        j = json_loadb(natsMsg_GetData(r), (size_t)natsMsg_GetDataLength(r),
                       0, NULL);
    natsMsg_Destroy(r);
    free(text);
    return j;
}

/* 2b. A result is said to be stored (Toolhost-Stored: 1) only when the
 * bucket took it: once the bucket refuses puts (its streams's largest
 * message made too small for a result), the reply says Toolhost-Stored:
 * 0, the log says why, and <prefix>.tasks.result after the host has gone
 * answers not_found - no claim of a result that is not there.  On one
 * server the bucket has 1 replica, and the log says how many it asked. */
static void test_result_not_stored(void)
{
    NEED_SERVER();
    rpc_srv h[2];
    char ids[2][40];
    CU_ASSERT_FATAL(kv_hosts(h, ids, "ks", "kvst") == 0);
    /* one server, no cluster: one replica, as many as asked */
    CU_ASSERT(rpc_log_count(&h[0], "1 replica(s); 1 asked, 1 server(s)") ==
              1);
    natsConnection *nc = nats_connect(G_url, NULL, NULL);
    CU_ASSERT_FATAL(nc != NULL);
    json_t *si = js_api(nc, "$JS.API.STREAM.INFO.KV_kvst", NULL);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(
                        json_object_get(si, "config"), "num_replicas")),
                    1);
    char task[96] = "";
    CU_ASSERT_FATAL(async_call(nc, "ks.public.echo_async", ids, 2, task,
                               sizeof task) >= 0);
    CU_ASSERT_STRING_EQUAL(last_stored, "1");
    /* the bucket now refuses every put */
    json_t *cfg = json_deep_copy(json_object_get(si, "config"));
    json_object_set_new(cfg, "max_msg_size", json_integer(8));
    json_t *up = js_api(nc, "$JS.API.STREAM.UPDATE.KV_kvst", cfg);
    CU_ASSERT(up && !json_object_get(up, "error"));
    json_decref(up);
    json_decref(cfg);
    json_decref(si);
    task[0] = '\0';
    int owner = async_call(nc, "ks.public.echo_async", ids, 2, task,
                           sizeof task);
    CU_ASSERT_FATAL(owner >= 0 && task[0]);
    CU_ASSERT_STRING_EQUAL(last_stored, "0");
    CU_ASSERT(rpc_log_wait(&h[owner], "was not stored in kvst",
                           rpc_wait_ms()));
    CU_ASSERT(rpc_log_count(&h[owner], "was not stored in kvst") == 1);
    /* the CLI tells its user too */
    th_test_run cr = {0};
    setenv("TOOLHOST_NATS_SERVICE", "ks", 1); /* host_start's service */
    th_test_toolhost(&cr, "call", "--connect", G_url, "public.echo_async",
                     "text=x", "steps=1", "delay_ms=1", NULL);
    unsetenv("TOOLHOST_NATS_SERVICE");
    CU_ASSERT_EQUAL(cr.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(cr.err ? cr.err : "",
                                  "could not store this result "
                                  "(Toolhost-Stored: 0)"));
    if (cr.status != 0 || !strstr(cr.err ? cr.err : "", "Toolhost-Stored"))
        fprintf(stderr, "\n  CLI: %s", cr.err ? cr.err : "");
    th_test_run_free(&cr);
    kill(h[owner].pid, SIGKILL);
    rpc_srv_wait(&h[owner]);
    /* through the other host (its own subject gone with the owner) */
    natsMsg *r = NULL;
    bool answered = false;
    for (int64_t e = rpc_now_ms() + rpc_wait_ms(); !answered &&
                                                 rpc_now_ms() < e;) {
        natsMsg_Destroy(r);
        r = NULL;
        answered = natsConnection_RequestString(&r, nc, "ks.tasks.result",
                                                task, th_test_ms(3000)) ==
                   NATS_OK;
    }
    CU_ASSERT_FATAL(answered);
    const char *hv = NULL;
    natsMsgHeader_Get(r, "Toolhost-Host", &hv);
    CU_ASSERT(hv && strcmp(hv, ids[1 - owner]) == 0);
    CU_ASSERT(reply_error_is(r, "not_found"));
    natsMsg_Destroy(r);
    natsConnection_Destroy(nc);
    CU_ASSERT_EQUAL(rpc_srv_stop(&h[1 - owner], SIGTERM), 0);
    for (int i = 0; i < 2; i++)
        rpc_srv_free(&h[i]);
}

/* 3. Three nats-servers in a cluster with routes; three hosts, each given
 * the full server list; the server host 0 is connected to is killed under
 * load: the calls go on, host 0 reconnects to another server. */
static void test_cluster_failover(void)
{
    NEED_SERVER();
    enum { NS = 3 };
    gnatsd s[NS];
    int cport[NS];
    char cl[NS][64], routes[NS][160];
    for (int i = 0; i < NS; i++)
        cport[i] = free_port();
    for (int i = 0; i < NS; i++) {
        gnatsd_files(&s[i], "max_payload: 1MB\n");
        snprintf(cl[i], sizeof cl[i], "nats://127.0.0.1:%d", cport[i]);
        snprintf(routes[i], sizeof routes[i],
                 "nats://127.0.0.1:%d,nats://127.0.0.1:%d",
                 cport[(i + 1) % NS], cport[(i + 2) % NS]);
        s[i].extra[0] = "--cluster_name";
        s[i].extra[1] = "thc";
        s[i].extra[2] = "--cluster";
        s[i].extra[3] = cl[i];
        s[i].extra[4] = "--routes";
        s[i].extra[5] = routes[i];
        CU_ASSERT_FATAL(gnatsd_start(&s[i]) == 0);
    }
    char urls[NS][256];
    for (int i = 0; i < NS; i++)
        snprintf(urls[i], sizeof urls[i],
                 "nats://127.0.0.1:%d,nats://127.0.0.1:%d,nats://127.0.0.1:%d",
                 s[i].port, s[(i + 1) % NS].port, s[(i + 2) % NS].port);
    /* two hosts under valgrind (each start costs seconds there): host 0
     * on the server that dies, one elsewhere */
    int nh = rpc_valgrind() ? 2 : NS;
    rpc_srv h[NS];
    char ids[NS][40];
    for (int i = 0; i < nh; i++)
        CU_ASSERT_FATAL(host_start(&h[i], ids[i], urls[i], "fo", "fo",
                                   "echo", NULL) == 0);
    /* the server host 0 is on (the client library shuffles the list) */
    int victim = -1;
    CU_ASSERT_FATAL(rpc_log_wait(&h[0], "nats: connected to", rpc_wait_ms()));
    for (int i = 0; i < NS; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "connected to nats://127.0.0.1:%d",
                 s[i].port);
        if (rpc_log_count(&h[0], needle) > 0)
            victim = i;
    }
    CU_ASSERT_FATAL(victim >= 0);
    /* the caller on another server, with that server only */
    char curl[64];
    snprintf(curl, sizeof curl, "nats://127.0.0.1:%d",
             s[(victim + 1) % NS].port);
    natsConnection *nc = nats_connect(curl, NULL, NULL);
    CU_ASSERT_FATAL(nc != NULL);
    char ping0[160];
    snprintf(ping0, sizeof ping0, "$SRV.PING.fo.%s", ids[0]);
    /* routes up: host 0 answers through the caller's server */
    bool routed = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!routed && rpc_now_ms() < end) {
        natsMsg *r = NULL;
        routed = natsConnection_RequestString(&r, nc, ping0, "", th_test_ms(300)) ==
                 NATS_OK;
        natsMsg_Destroy(r);
        if (!routed)
            usleep(50000);
    }
    CU_ASSERT_FATAL(routed);
    /* fewer calls under valgrind (each is slow there): what is proved
     * is that calls go on, not how many */
    int n_before = rpc_scale(20), n_during = rpc_scale(100),
        n_after = rpc_scale(30);
    int ok_before = 0;
    for (int i = 0; i < n_before; i++) {
        natsMsg *r = NULL;
        ok_before += request(nc, &r, "fo.public.echo", "{\"text\":\"a\"}",
                             2000) == NATS_OK && reply_ok(r, "a");
        natsMsg_Destroy(r);
    }
    CU_ASSERT_EQUAL(ok_before, n_before);
    /* kill it under load: calls every few ms; host 0 pinged meanwhile */
    gnatsd_kill(&s[victim], SIGKILL);
    int64_t t0 = rpc_now_ms();
    int calls = 0, failed = 0;
    int64_t host0_back = -1, last_fail = -1;
    end = t0 + th_test_ms(15000);
    /* at least 1 s of calls: under valgrind the hosts take tens of ms to
     * move, and a short run would be mostly that moment */
    while (rpc_now_ms() < end && (host0_back < 0 || calls < n_during ||
                                  rpc_now_ms() - t0 < 1000)) {
        natsMsg *r = NULL;
        if (host0_back < 0 &&
            natsConnection_RequestString(&r, nc, ping0, "", th_test_ms(100)) == NATS_OK)
            host0_back = rpc_now_ms() - t0;
        natsMsg_Destroy(r);
        r = NULL;
        calls++;
        /* (no responders fail at once; a slow answer on a busy machine
         * is not a failover failure) */
        if (!(request(nc, &r, "fo.public.echo", "{\"text\":\"b\"}", 2000) ==
                  NATS_OK &&
              reply_ok(r, "b"))) {
            failed++;
            last_fail = rpc_now_ms() - t0;
        }
        natsMsg_Destroy(r);
    }
    CU_ASSERT(rpc_log_wait(&h[0], "nats: reconnected to", rpc_wait_ms()));
    int64_t gap = log_time_ms(&h[0], "nats: reconnected to") -
                  log_time_ms(&h[0], "nats: disconnected");
    fprintf(stderr, "\n  cluster: server %d (host 0's) killed: host 0 "
            "reconnected to another server %lld ms after it saw the loss "
            "(its log), answered $SRV.PING again %lld ms after the kill; %d "
            "of %d calls failed meanwhile (last failure at %lld ms)\n",
            victim, (long long)gap, (long long)host0_back, failed, calls,
            (long long)last_fail);
    CU_ASSERT(host0_back >= 0);
    CU_ASSERT(gap >= 0 && gap < th_test_ms(5000));
    /* the calls that fail are those sent while every host of the tool was
     * between servers ("no responders", a few ms); none after */
    CU_ASSERT(last_fail < th_test_ms(2000));
    CU_ASSERT(failed < calls / 2);
    /* every call answered afterwards */
    int ok_after = 0;
    for (int i = 0; i < n_after; i++) {
        natsMsg *r = NULL;
        ok_after += request(nc, &r, "fo.public.echo", "{\"text\":\"c\"}",
                            2000) == NATS_OK && reply_ok(r, "c");
        natsMsg_Destroy(r);
    }
    CU_ASSERT_EQUAL(ok_after, n_after);
    natsConnection_Destroy(nc);
    for (int i = 0; i < nh; i++) {
        CU_ASSERT_EQUAL(rpc_srv_stop(&h[i], SIGTERM), 0);
        rpc_srv_free(&h[i]);
    }
    for (int i = 0; i < NS; i++)
        gnatsd_free(&s[i]);
}

/* 3b. Three nats-servers with JetStream in one cluster: a host given the
 * three creates the results bucket with 3 replicas (min(3, the cluster's
 * size)); a bucket made earlier with 1 replica is used as it is and the
 * log says it keeps fewer copies than asked. */
static void test_cluster_replicas(void)
{
    NEED_SERVER();
    enum { NS = 3 };
    gnatsd s[NS];
    int cport[NS];
    char cl[NS][64], routes[NS][160], sd[NS][600], name[NS][16];
    for (int i = 0; i < NS; i++)
        cport[i] = free_port();
    for (int i = 0; i < NS; i++) {
        gnatsd_files(&s[i], "max_payload: 1MB\n");
        snprintf(cl[i], sizeof cl[i], "nats://127.0.0.1:%d", cport[i]);
        snprintf(routes[i], sizeof routes[i],
                 "nats://127.0.0.1:%d,nats://127.0.0.1:%d",
                 cport[(i + 1) % NS], cport[(i + 2) % NS]);
        snprintf(sd[i], sizeof sd[i], "%s/js", s[i].dir);
        snprintf(name[i], sizeof name[i], "jr%d", i);
        const char *x[] = {"-js", "-sd", sd[i], "--server_name", name[i],
                           "--cluster_name", "thr", "--cluster", cl[i],
                           "--routes", routes[i], NULL};
        for (int k = 0; x[k]; k++)
            s[i].extra[k] = x[k];
        CU_ASSERT_FATAL(gnatsd_start(&s[i]) == 0);
    }
    char urls[256];
    snprintf(urls, sizeof urls,
             "nats://127.0.0.1:%d,nats://127.0.0.1:%d,nats://127.0.0.1:%d",
             s[0].port, s[1].port, s[2].port);
    char u0[64];
    snprintf(u0, sizeof u0, "nats://127.0.0.1:%d", s[0].port);
    natsConnection *nc = nats_connect(u0, NULL, NULL);
    CU_ASSERT_FATAL(nc != NULL);
    /* JetStream up: the cluster elected its meta leader */
    bool up = false;
    for (int64_t e = rpc_now_ms() + th_test_ms(20000); !up &&
                                                     rpc_now_ms() < e;) {
        json_t *j = js_api(nc, "$JS.API.INFO", NULL);
        up = j && !json_object_get(j, "error");
        json_decref(j);
        if (!up)
            usleep(100000);
    }
    CU_ASSERT_FATAL(up);
    /* a bucket made with 1 replica beforehand */
    jsCtx *js = NULL;
    kvStore *kv = NULL;
    kvConfig kc;
    kvConfig_Init(&kc);
    kc.Bucket = "kvone";
    kc.Replicas = 1;
    CU_ASSERT_FATAL(natsConnection_JetStream(&js, nc, NULL) == NATS_OK);
    CU_ASSERT_FATAL(js_CreateKeyValue(&kv, js, &kc) == NATS_OK);
    kvStore_Destroy(kv);
    /* every peer current: a meta leader can be elected before the third
     * server may hold a replica, and a host that asks for 3 then (rightly)
     * settles for 2.  The cluster is ready when a 3-replica bucket can be
     * made. */
    bool three = false;
    for (int64_t e = rpc_now_ms() + th_test_ms(20000); !three &&
                                                     rpc_now_ms() < e;) {
        kvConfig probe;
        kvConfig_Init(&probe);
        probe.Bucket = "probe3";
        probe.Replicas = 3;
        kv = NULL;
        three = js_CreateKeyValue(&kv, js, &probe) == NATS_OK;
        kvStore_Destroy(kv);
        if (!three)
            usleep(100000);
    }
    CU_ASSERT_FATAL(three);
    CU_ASSERT_FATAL(js_DeleteKeyValue(js, "probe3") == NATS_OK);
    jsCtx_Destroy(js);
    char *key = nats_key_file(s[0].dir);
    rpc_srv h[2];
    char ids[2][40];
    static const char *const buckets[2] = {"kvthree", "kvone"};
    for (int i = 0; i < 2; i++) {
        char extra[1024];
        snprintf(extra, sizeof extra,
                 "  results_ttl: 1m\n"
                 "  results_bucket: %s\n"
                 "  results_key_file: %s\n", buckets[i], key);
        CU_ASSERT_FATAL(host_start(&h[i], ids[i], urls, "kr", "kr", "echo",
                                   extra) == 0);
        char needle[64];
        snprintf(needle, sizeof needle, "key-value bucket %s", buckets[i]);
        CU_ASSERT(rpc_log_wait(&h[i], needle, rpc_wait_ms()));
    }
    free(key);
    json_t *j = js_api(nc, "$JS.API.STREAM.INFO.KV_kvthree", NULL);
    json_int_t r3 = json_integer_value(json_object_get(
        json_object_get(j, "config"), "num_replicas"));
    size_t peers = json_array_size(json_object_get(
        json_object_get(j, "cluster"), "replicas"));
    json_decref(j);
    fprintf(stderr, "\n  3-server cluster: KV_kvthree has %lld replicas "
            "(leader + %zu peers)\n", (long long)r3, peers);
    CU_ASSERT_EQUAL(r3, 3);
    CU_ASSERT_EQUAL(peers, 2);
    CU_ASSERT(rpc_log_count(&h[0], "3 replica(s); 3 asked, 3 server(s)") ==
              1);
    CU_ASSERT(rpc_log_count(&h[1], "keeps 1 copy(ies) of each result, "
                                   "fewer than the 3 asked") == 1);
    natsConnection_Destroy(nc);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(rpc_srv_stop(&h[i], SIGTERM), 0);
        rpc_srv_free(&h[i]);
    }
    for (int i = 0; i < NS; i++)
        gnatsd_free(&s[i]);
}

static bool run_sh(const char *cmd)
{
    char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
    th_test_run r = {0};
    int rc = th_test_run_argv(argv, NULL, 30, 0, &r);
    bool ok = rc == 0 && r.status == 0;
    if (!ok)
        fprintf(stderr, "\n  %s: %s\n", cmd, r.err ? r.err : "");
    th_test_run_free(&r);
    return ok;
}

/* `toolhost serve` of the toolset "public" [echo] on NATS at `url`, the
 * nats: block's other lines `nats_lines` (its credentials): it should
 * exit at once; its status and stderr. */
static void serve_expect_fail(const char *dir, const char *url,
                              const char *nats_lines, th_test_run *r)
{
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n  listen: [\"%s\"]\n"
             "plugins:\n  - name: echo\n    path: %s/plugins/echo.so\n"
             "toolsets:\n  - name: public\n    tools: [echo]\n"
             "    allow_users: [nats]\n"
             "nats:\n  toolsets: [public]\n%s",
             url, TH_BUILD_DIR, nats_lines);
    char *p = th_test_write_file(dir, "bad.yaml", cfg, (size_t)-1);
    char listen[600];
    snprintf(listen, sizeof listen, "unix:%s/bad.sock", dir);
    char *argv[] = {(char *)rpc_server_bin(), "serve", "-c", p, "--listen",
                    listen, NULL};
    th_test_run_argv(argv, NULL, 15, 0, r);
    free(p);
}

/* 4. TLS (a throwaway CA and server certificate) and passwords: a host
 * with the CA and the right password serves; a wrong password, or no CA,
 * stops `serve` at start with a clear error. */
static void test_tls_auth(void)
{
    NEED_SERVER();
    {
        char *argv[] = {"/bin/sh", "-c", "command -v openssl", NULL};
        th_test_run r = {0};
        bool have = th_test_run_argv(argv, NULL, 5, 0, &r) == 0 &&
                    r.status == 0;
        th_test_run_free(&r);
        if (!have)
            TH_SKIP("openssl is not installed (needed for a test CA)");
    }
    char *dir = th_test_tmpdir();
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
             " -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=th-test-ca "
             "2>/dev/null && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
             "-nodes -keyout srv.key -out srv.csr -subj /CN=127.0.0.1 "
             "2>/dev/null && "
             "printf 'subjectAltName=IP:127.0.0.1\\n' > ext && "
             "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key "
             "-CAcreateserial -out srv.pem -days 2 -extfile ext 2>/dev/null",
             dir);
    CU_ASSERT_FATAL(run_sh(cmd));
    char conf[2048];
    /* the server's TLS handshake timeout (0.5 s by default) scaled as the
     * test's budgets are: under valgrind a handshake takes longer */
    snprintf(conf, sizeof conf,
             "tls {\n  cert_file: \"%s/srv.pem\"\n  key_file: \"%s/srv.key\"\n"
             "  timeout: %.1f\n}\n"
             "authorization {\n  users = [\n"
             "    {user: host, password: hostpw}\n"
             "    {user: alice, password: alicepw}\n  ]\n}\n",
             dir, dir, th_test_ms(2000) / 1000.0);
    gnatsd s;
    gnatsd_files(&s, conf);
    CU_ASSERT_FATAL(gnatsd_start(&s) == 0);
    char url[64];
    snprintf(url, sizeof url, "tls://127.0.0.1:%d", s.port);
    char extra[1024];
    char *key = nats_key_file(dir); /* so that it asks for JetStream */
    snprintf(extra, sizeof extra,
             "  user: host\n  password: hostpw\n  tls_ca: %s/ca.pem\n"
             "  results_key_file: %s\n", dir, key);
    free(key);
    rpc_srv h;
    char id[40];
    CU_ASSERT_FATAL(host_start(&h, id, url, "tl", "tl", "echo", extra) == 0);
    /* a client over TLS with the CA, as alice */
    natsOptions *o = NULL;
    natsConnection *nc = NULL;
    char cafile[600];
    snprintf(cafile, sizeof cafile, "%s/ca.pem", dir);
    natsOptions_Create(&o);
    natsOptions_SetURL(o, url);
    natsOptions_SetSecure(o, true);
    natsOptions_LoadCATrustedCertificates(o, cafile);
    natsOptions_SetUserInfo(o, "alice", "alicepw");
    natsOptions_SetTimeout(o, th_test_ms(3000));
    natsStatus cs = natsConnection_Connect(&nc, o);
    if (cs != NATS_OK)
        fprintf(stderr, "\n  TLS client connect: %s (%s)\n",
                natsStatus_GetText(cs), nats_GetLastError(NULL));
    natsOptions_Destroy(o);
    CU_ASSERT_FATAL(cs == NATS_OK);
    natsMsg *r = NULL;
    CU_ASSERT_FATAL(request(nc, &r, "tl.public.echo",
                            "{\"text\":\"sealed\"}", 3000) == NATS_OK);
    CU_ASSERT(reply_ok(r, "sealed"));
    natsMsg_Destroy(r);
    natsConnection_Destroy(nc);
    /* no JetStream on this server: said once, and the host goes on */
    CU_ASSERT_EQUAL(rpc_log_count(&h, "is not available"), 1);
    CU_ASSERT_EQUAL(rpc_srv_stop(&h, SIGTERM), 0);
    rpc_srv_free(&h);
    /* a wrong password: serve stops at start and says why */
    char lines[1024];
    snprintf(lines, sizeof lines,
             "  user: host\n  password: wrong\n  tls_ca: %s/ca.pem\n", dir);
    th_test_run rr = {0};
    int64_t t0 = rpc_now_ms();
    serve_expect_fail(dir, url, lines, &rr);
    fprintf(stderr, "\n  wrong password: exit %d after %lld ms: %s", rr.status,
            (long long)(rpc_now_ms() - t0), rr.err ? rr.err : "");
    CU_ASSERT(rr.status != 0 && rr.status < 128);
    CU_ASSERT(rr.err && strstr(rr.err, "nats: cannot connect to") &&
              strstr(rr.err, "nats.user/password"));
    th_test_run_free(&rr);
    /* no CA for the server's certificate: the same, naming TLS */
    memset(&rr, 0, sizeof rr);
    serve_expect_fail(dir, url, "  user: host\n  password: hostpw\n", &rr);
    fprintf(stderr, "  no CA: exit %d: %s", rr.status, rr.err ? rr.err : "");
    CU_ASSERT(rr.status != 0 && rr.status < 128);
    CU_ASSERT(rr.err && strstr(rr.err, "nats.tls_ca"));
    th_test_run_free(&rr);
    gnatsd_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

/* 4b. Token auth (nats.token): a server that wants a token; a host with
 * it serves and a client with it calls; a wrong token ends `serve` at
 * start with the reason, and a client with a wrong one is refused.
 * (creds, a JWT + NKey file, needs an operator setup made with nsc, which
 * is not here: not covered.) */
static void test_token_auth(void)
{
    NEED_SERVER();
    gnatsd s;
    gnatsd_files(&s, "authorization {\n  token: \"t0ken-good\"\n}\n");
    CU_ASSERT_FATAL(gnatsd_start(&s) == 0);
    char url[64];
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", s.port);
    rpc_srv h;
    char id[40];
    CU_ASSERT_FATAL(host_start(&h, id, url, "tk", "tk", "echo",
                               "  token: t0ken-good\n") == 0);
    natsOptions *o = NULL;
    natsConnection *nc = NULL;
    natsOptions_Create(&o);
    natsOptions_SetURL(o, url);
    natsOptions_SetToken(o, "t0ken-good");
    natsOptions_SetTimeout(o, th_test_ms(3000));
    CU_ASSERT_FATAL(natsConnection_Connect(&nc, o) == NATS_OK);
    natsMsg *r = NULL;
    CU_ASSERT(request(nc, &r, "tk.public.echo", "{\"text\":\"tok\"}",
                      3000) == NATS_OK &&
              reply_ok(r, "tok"));
    natsMsg_Destroy(r);
    natsConnection_Destroy(nc);
    /* a client with a wrong token is refused by the server */
    nc = NULL;
    natsOptions_SetToken(o, "t0ken-bad");
    natsOptions_SetMaxReconnect(o, 0);
    CU_ASSERT(natsConnection_Connect(&nc, o) != NATS_OK);
    natsConnection_Destroy(nc);
    natsOptions_Destroy(o);
    CU_ASSERT_EQUAL(rpc_srv_stop(&h, SIGTERM), 0);
    rpc_srv_free(&h);
    /* a host with a wrong token: serve stops at start and says why */
    char *dir = th_test_tmpdir();
    th_test_run rr = {0};
    serve_expect_fail(dir, url, "  token: t0ken-bad\n", &rr);
    fprintf(stderr, "\n  wrong token: exit %d: %s", rr.status,
            rr.err ? rr.err : "");
    CU_ASSERT(rr.status != 0 && rr.status < 128);
    CU_ASSERT(rr.err && strstr(rr.err, "nats: cannot connect to") &&
              strstr(rr.err, "token"));
    th_test_run_free(&rr);
    gnatsd_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

/* Runs `toolhost call --connect URL ARGS...` in the background (service
 * name `svc`), stdout and stderr to files in dir. */
static pid_t cli_spawn(const char *dir, const char *svc, char *const args[])
{
    char out[600], err[600];
    snprintf(out, sizeof out, "%s/cli.out", dir);
    snprintf(err, sizeof err, "%s/cli.err", dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        dup2(o, 1);
        dup2(e, 2);
        setenv("TOOLHOST_NATS_SERVICE", svc, 1);
        /* the CLI's bound for a host to take the call or answer a ping
         * (2 s), scaled as every wait here (under valgrind the CLI and
         * the hosts are ~20x slower); a test that sets its own keeps it */
        char ack[24];
        snprintf(ack, sizeof ack, "%u", th_test_ms(2000));
        setenv("TOOLHOST_NATS_ACK_MS", ack, 0);
        const char *argv[16] = {rpc_server_bin(), "call", "--connect",
                                G_url};
        int n = 4;
        for (int i = 0; args[i] && n < 15; i++)
            argv[n++] = args[i];
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static int cli_wait(pid_t pid, int64_t ms)
{
    int64_t end = rpc_now_ms() + ms;
    int st = 0;
    while (rpc_now_ms() < end) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static char *slurp(const char *dir, const char *name)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r");
    static char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    return buf;
}

/* Which of the hosts took a call of `tool` (by their $SRV.STATS), waiting
 * up to rpc_wait_ms(); -1 when none. */
static int who_took(natsConnection *nc, char ids[][40], int n,
                    const char *tool)
{
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (rpc_now_ms() < end) {
        for (int i = 0; i < n; i++)
            if (ids[i][0] && stats_of(nc, "rt", ids[i], tool) > 0)
                return i;
        usleep(20000);
    }
    return -1;
}

/* 5. `toolhost call --connect nats://`: the host that took an idempotent
 * call dies mid-call; the CLI retries once on the other host and says so.
 * A tool that is not idempotent is not retried.  Both calls are async
 * (acknowledged: the CLI knows their host and pings it once it goes
 * quiet), so the loss is seen within about a second, not after the
 * call's timeout + 5 s (a sync call's fallback: not what is tested). */
static void test_cli_retry(void)
{
    NEED_SERVER();
    rpc_srv h[2];
    char ids[2][40] = {"", ""};
    for (int i = 0; i < 2; i++)
        CU_ASSERT_FATAL(host_start(&h[i], ids[i], G_url, "rt", "rt",
                                   "echo_async, rl_task", NULL) == 0);
    natsConnection *nc = nats_connect(G_url, NULL, NULL);
    CU_ASSERT_FATAL(nc != NULL);
    char *dir = th_test_tmpdir();
    /* echo_async is read-only: idempotent for the CLI.  The kill waits
     * until the CLI shows a progress update (so it has the ack and knows
     * the host: under valgrind the host is slow to send it). */
    /* the call's timeout T, scaled; a sync call's fallback would take
     * T + 5 s, the ping of a quiet async call's host far less (the bound
     * below is T + 4 s) */
    unsigned tmo_ms = th_test_ms(10000);
    char tmo[32];
    snprintf(tmo, sizeof tmo, "%ums", tmo_ms);
    char *a1[] = {"--timeout", tmo, "echo_async", "text=again", "steps=8",
                  "delay_ms=100", NULL};
    int64_t t0 = rpc_now_ms();
    pid_t cli = cli_spawn(dir, "rt", a1);
    int took = who_took(nc, ids, 2, "echo_async");
    CU_ASSERT_FATAL(took >= 0);
    for (int64_t e = rpc_now_ms() + rpc_wait_ms();
         rpc_now_ms() < e && !strstr(slurp(dir, "cli.err"), "progress:");)
        usleep(10000);
    kill(h[took].pid, SIGKILL);
    rpc_srv_wait(&h[took]);
    int st = cli_wait(cli, th_test_ms(20000));
    int64_t took_ms = rpc_now_ms() - t0;
    const char *err = slurp(dir, "cli.err");
    fprintf(stderr, "\n  idempotent: exit %d after %lld ms; stderr: %s", st,
            (long long)took_ms, err);
    /* the async call's host was pinged: no wait for timeout + 5 s */
    CU_ASSERT(took_ms < tmo_ms + 4000);
    CU_ASSERT_EQUAL(st, 0);
    CU_ASSERT(strstr(err, "retrying once") != NULL);
    CU_ASSERT(strstr(slurp(dir, "cli.out"), "again") != NULL);
    int other = 1 - took;
    CU_ASSERT_EQUAL(stats_of(nc, "rt", ids[other], "echo_async"), 1);
    /* a second survivor, then a tool that is not idempotent (rl_task:
     * async, acknowledged by its first progress, then waits for a file
     * that never comes) */
    rpc_srv_free(&h[took]);
    CU_ASSERT_FATAL(host_start(&h[took], ids[took], G_url, "rt", "rt",
                               "echo_async, rl_task", NULL) == 0);
    char never[600];
    snprintf(never, sizeof never, "path=%s/never", dir);
    char *a2[] = {"--timeout", "5s", "rl_task", never, NULL};
    /* every inbox's messages seen here too: the ack on its way to the CLI
     * is the event the kill waits for (the CLI prints nothing for it) */
    natsSubscription *all = NULL;
    CU_ASSERT_FATAL(natsConnection_SubscribeSync(&all, nc, "_INBOX.>") ==
                    NATS_OK);
    natsConnection_Flush(nc);
    t0 = rpc_now_ms();
    cli = cli_spawn(dir, "rt", a2);
    took = who_took(nc, ids, 2, "rl_task");
    CU_ASSERT_FATAL(took >= 0);
    other = 1 - took;
    bool acked = false;
    for (int64_t e = rpc_now_ms() + rpc_wait_ms();
         !acked && rpc_now_ms() < e;) {
        natsMsg *m = NULL;
        if (natsSubscription_NextMsg(&m, all, 100) != NATS_OK)
            continue;
        const char *hv = NULL;
        acked = strcmp(reply_kind(m), "ack") == 0 &&
                natsMsgHeader_Get(m, "Toolhost-Host", &hv) == NATS_OK &&
                hv && strcmp(hv, ids[took]) == 0;
        natsMsg_Destroy(m);
    }
    natsSubscription_Destroy(all);
    CU_ASSERT_FATAL(acked);
    kill(h[took].pid, SIGKILL);
    rpc_srv_wait(&h[took]);
    st = cli_wait(cli, th_test_ms(20000));
    took_ms = rpc_now_ms() - t0;
    err = slurp(dir, "cli.err");
    fprintf(stderr, "  not idempotent: exit %d after %lld ms; stderr: %s",
            st, (long long)took_ms, err);
    CU_ASSERT(st != 0 && st != -1);
    CU_ASSERT(strstr(err, "retrying") == NULL);
    CU_ASSERT(strstr(err, "no answer") != NULL);
    CU_ASSERT_EQUAL(stats_of(nc, "rt", ids[other], "rl_task"), 0);
    natsConnection_Destroy(nc);
    CU_ASSERT_EQUAL(rpc_srv_stop(&h[other], SIGTERM), 0);
    for (int i = 0; i < 2; i++)
        rpc_srv_free(&h[i]);
    th_test_rmtree(dir);
    free(dir);
}

/* Arrival times (ms) of the requests on the subjects of one test, seen by a
 * plain subscription of the test's own: which subject, when. */
typedef struct seen_reqs {
    pthread_mutex_t mu;
    int n;
    int64_t at[64];
    bool direct[64]; /* on a host's own call subject (a retry) */
} seen_reqs;

static void on_seen(natsConnection *nc, natsSubscription *sub, natsMsg *m,
                    void *ud)
{
    (void)nc;
    (void)sub;
    seen_reqs *s = ud;
    pthread_mutex_lock(&s->mu);
    if (s->n < 64) {
        s->at[s->n] = rpc_now_ms();
        s->direct[s->n] = strstr(natsMsg_GetSubject(m), ".call.") != NULL;
        s->n++;
    }
    pthread_mutex_unlock(&s->mu);
    natsMsg_Destroy(m);
}

static int lines_with(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* 6. An unresponsive host: two hosts, one stopped (SIGSTOP), calls from
 * `toolhost call --connect nats://` with a bound of ACK ms for a host to
 * take the call (TOOLHOST_NATS_ACK_MS).  The calls NATS delivers to the
 * stopped host are reported as not acknowledged within ACK ms; an
 * idempotent one (rl_answer) is retried once on the other host, addressed
 * to it alone, and succeeds; one that is not (rl_hold) is not retried.
 * After SIGCONT the stopped host gets those requests past their
 * Toolhost-Start-By and runs none of them (the fixture's marker file
 * records every run). */
static void test_frozen_host(void)
{
    NEED_SERVER();
    /* (each CLI call is a process that discovers the hosts first; before
     * the ack bound, each call the stopped host got took timeout + 5 s) */
    th_test_timeout(120);
    char *dir = th_test_tmpdir();
    rpc_srv h[2];
    char ids[2][40], marker[2][600], gate[600];
    snprintf(gate, sizeof gate, "%s/gate", dir);
    free(th_test_write_file(dir, "gate", "", 0)); /* rl_hold: at once */
    for (int i = 0; i < 2; i++) {
        snprintf(marker[i], sizeof marker[i], "%s/marker%d", dir, i);
        char cfg[2048];
        snprintf(cfg, sizeof cfg,
                 "host:\n"
                 "  log_level: debug\n"
                 "  shutdown_grace: 1s\n"
                 "  listen: [\"%s\"]\n"
                 "plugins:\n"
                 "  - name: reload_fx\n"
                 "    path: @BUILD@/fixtures/reload_a.so\n"
                 "    config:\n"
                 "      marker: %s\n"
                 "toolsets:\n"
                 "  - name: public\n"
                 "    tools: [rl_answer, rl_hold]\n"
                 "    allow_users: [nats]\n"
                 "nats:\n"
                 "  prefix: fz\n"
                 "  name: fz\n"
                 "  toolsets: [public]\n",
                 G_url, marker[i]);
        rpc_opts o = {.config = cfg};
        CU_ASSERT_FATAL(rpc_srv_start(&h[i], &o) == 0);
        host_id_from_log(&h[i], ids[i], sizeof ids[i]);
        CU_ASSERT_FATAL(ids[i][0]);
    }
    natsConnection *nc = nats_connect(G_url, NULL, NULL);
    CU_ASSERT_FATAL(nc != NULL);
    seen_reqs seen;
    memset(&seen, 0, sizeof seen);
    pthread_mutex_init(&seen.mu, NULL);
    natsSubscription *spy = NULL;
    CU_ASSERT_FATAL(natsConnection_Subscribe(&spy, nc, "fz.>", on_seen,
                                             &seen) == NATS_OK);
    natsConnection_Flush(nc);
    kill(h[1].pid, SIGSTOP);
    unsigned ack = th_test_ms(1500);
    char ackv[32];
    snprintf(ackv, sizeof ackv, "%u", ack);
    setenv("TOOLHOST_NATS_ACK_MS", ackv, 1);
    char retry_on[128];
    snprintf(retry_on, sizeof retry_on, "retrying once on host %s", ids[0]);
    /* idempotent: until two calls reached the stopped host (NATS picks a
     * queue member at random: bounded) */
    int reached = 0, idem_calls = 0;
    int64_t worst_gap = 0;
    while (reached < 2 && idem_calls < 24) {
        idem_calls++;
        pthread_mutex_lock(&seen.mu);
        int n0 = seen.n;
        pthread_mutex_unlock(&seen.mu);
        char *a[] = {"rl_answer", NULL};
        pid_t cli = cli_spawn(dir, "fz", a);
        int st = cli_wait(cli, th_test_ms(30000));
        CU_ASSERT_EQUAL(st, 0);
        CU_ASSERT(strstr(slurp(dir, "cli.out"), "A") != NULL);
        const char *err = slurp(dir, "cli.err"); /* (slurp's buffer) */
        if (!strstr(err, "did not acknowledge it within"))
            continue;
        reached++;
        fprintf(stderr, "\n  idempotent, reached the stopped host: %s", err);
        CU_ASSERT(strstr(err, retry_on) != NULL);
        /* the retry went to host 0's own subject, ACK ms (and a ping)
         * after the call */
        /* the spy's own delivery of the retry may come after the CLI's
         * answer: wait for it (bounded) */
        pthread_mutex_lock(&seen.mu);
        for (int64_t e = rpc_now_ms() + th_test_ms(3000);
             seen.n < n0 + 2 && rpc_now_ms() < e;) {
            pthread_mutex_unlock(&seen.mu);
            usleep(2000);
            pthread_mutex_lock(&seen.mu);
        }
        CU_ASSERT_EQUAL(seen.n, n0 + 2);
        if (seen.n == n0 + 2) {
            CU_ASSERT(!seen.direct[n0] && seen.direct[n0 + 1]);
            int64_t gap = seen.at[n0 + 1] - seen.at[n0];
            worst_gap = gap > worst_gap ? gap : worst_gap;
            CU_ASSERT(gap >= (int64_t)ack);
            CU_ASSERT(gap < (int64_t)ack * 2 + th_test_ms(500));
        }
        pthread_mutex_unlock(&seen.mu);
    }
    CU_ASSERT_EQUAL(reached, 2);
    /* not idempotent: until one reached it */
    int reached_hold = 0, hold_calls = 0, hold_ok = 0;
    char path[700];
    snprintf(path, sizeof path, "path=%s", gate);
    while (reached_hold < 1 && hold_calls < 24) {
        hold_calls++;
        char *a[] = {"rl_hold", path, NULL};
        pid_t cli = cli_spawn(dir, "fz", a);
        int st = cli_wait(cli, th_test_ms(30000));
        const char *err = slurp(dir, "cli.err");
        if (!strstr(err, "did not acknowledge it within")) {
            CU_ASSERT_EQUAL(st, 0);
            hold_ok += st == 0;
            continue;
        }
        reached_hold++;
        fprintf(stderr, "  not idempotent, reached the stopped host: %s",
                err);
        CU_ASSERT(st != 0 && st != -1);
        CU_ASSERT(strstr(err, "retrying") == NULL);
        CU_ASSERT(strstr(err, "a host took the call and did not "
                              "acknowledge it within") != NULL);
    }
    CU_ASSERT_EQUAL(reached_hold, 1);
    unsetenv("TOOLHOST_NATS_ACK_MS");
    fprintf(stderr, "  %d idempotent call(s), %d not; %d reached the "
            "stopped host; the slowest retry left %lld ms after its call "
            "(bound %u ms)\n", idem_calls, hold_calls, reached + reached_hold,
            (long long)worst_gap, ack);
    /* woken: it gets those requests past their Toolhost-Start-By */
    kill(h[1].pid, SIGCONT);
    int want = reached + reached_hold;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (rpc_log_count(&h[1], "past its Toolhost-Start-By: not started") <
               want && rpc_now_ms() < end)
        usleep(20000);
    CU_ASSERT_EQUAL(rpc_log_count(&h[1], "past its Toolhost-Start-By: not "
                                         "started"), want);
    /* ... and ran none of them; host 0 ran each call once */
    CU_ASSERT_EQUAL(lines_with(marker[1], "start rl_"), 0);
    CU_ASSERT_EQUAL(lines_with(marker[0], "start rl_answer"), idem_calls);
    CU_ASSERT_EQUAL(lines_with(marker[0], "start rl_hold"), hold_ok);
    natsSubscription_Destroy(spy);
    natsConnection_Destroy(nc);
    pthread_mutex_destroy(&seen.mu);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(rpc_srv_stop(&h[i], SIGTERM), 0);
        rpc_srv_free(&h[i]);
    }
    th_test_rmtree(dir);
    free(dir);
}

/* A request on `subj` with header `h: v` (none when h is NULL); the kinds
 * of its replies, space-separated, into kinds, and the last one kept. */
static natsMsg *req_kinds(natsConnection *nc, const char *subj,
                          const char *h, const char *v, char *kinds,
                          size_t kn)
{
    natsInbox *ib = NULL;
    natsSubscription *sub = NULL;
    natsInbox_Create(&ib);
    natsConnection_SubscribeSync(&sub, nc, ib);
    th_buf b = TH_BUF_INIT;
    rpc_pack_json(&b, "{\"text\":\"sb\"}");
    natsMsg *req = NULL;
    natsMsg_Create(&req, subj, ib, (const char *)b.data, (int)b.len);
    if (h)
        natsMsgHeader_Set(req, h, v);
    natsConnection_PublishMsg(nc, req);
    natsMsg_Destroy(req);
    th_buf_destroy(&b);
    kinds[0] = '\0';
    natsMsg *last = NULL;
    for (int64_t end = rpc_now_ms() + rpc_wait_ms(); rpc_now_ms() < end;) {
        natsMsg *m = NULL;
        natsStatus ns = natsSubscription_NextMsg(&m, sub, 200);
        if (ns == NATS_NO_RESPONDERS) { /* (the library's form of a 503) */
            snprintf(kinds, kn, "503");
            break;
        }
        if (ns != NATS_OK)
            continue;
        size_t l = strlen(kinds);
        const char *st = NULL;
        natsMsgHeader_Get(m, "Status", &st);
        snprintf(kinds + l, kn - l, "%s%s", l ? " " : "",
                 st ? st : reply_kind(m));
        natsMsg_Destroy(last);
        last = m;
        if (st || strcmp(reply_kind(m), "result") == 0)
            break;
    }
    natsSubscription_Destroy(sub);
    natsInbox_Destroy(ib);
    return last;
}

/* Toolhost-Start-By and the host's own call subject, attacked: a request
 * past its start-by (a late delivery, or an old request replayed) is not
 * started; a malformed one is refused; one in time gets `took` first,
 * naming its host; a call addressed to the host for a tool it does not
 * serve on NATS (another toolset, an unknown tool) is not_found. */
static void test_start_by(void)
{
    NEED_SERVER();
    rpc_srv h;
    char id[40];
    CU_ASSERT_FATAL(host_start(&h, id, G_url, "sb", "sb", "echo", NULL) ==
                    0);
    natsConnection *nc = nats_connect(G_url, NULL, NULL);
    CU_ASSERT_FATAL(nc != NULL);
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    long long now = (long long)rt.tv_sec * 1000 + rt.tv_nsec / 1000000;
    char v[32], kinds[128];
    snprintf(v, sizeof v, "%lld", now - 1);
    natsMsg *m = req_kinds(nc, "sb.public.echo", "Toolhost-Start-By", v,
                           kinds, sizeof kinds);
    CU_ASSERT_STRING_EQUAL(kinds, "result");
    CU_ASSERT(m && reply_error_is(m, "timeout"));
    natsMsg_Destroy(m);
    /* (the line may follow the reply) */
    CU_ASSERT(rpc_log_wait(&h, "past its Toolhost-Start-By: not started",
                           rpc_wait_ms()));
    CU_ASSERT(rpc_log_count(&h, "past its Toolhost-Start-By: not started") ==
              1);
    m = req_kinds(nc, "sb.public.echo", "Toolhost-Start-By", "12abc", kinds,
                  sizeof kinds);
    CU_ASSERT_STRING_EQUAL(kinds, "result");
    CU_ASSERT(m && reply_error_is(m, "invalid_request"));
    natsMsg_Destroy(m);
    snprintf(v, sizeof v, "%lld", now + 60000);
    m = req_kinds(nc, "sb.public.echo", "Toolhost-Start-By", v, kinds,
                  sizeof kinds);
    CU_ASSERT_STRING_EQUAL(kinds, "took result");
    CU_ASSERT(m && reply_ok(m, "sb"));
    natsMsg_Destroy(m);
    /* without the header: no `took` (callers that do not ask pay nothing) */
    m = req_kinds(nc, "sb.public.echo", NULL, NULL, kinds, sizeof kinds);
    CU_ASSERT_STRING_EQUAL(kinds, "result");
    natsMsg_Destroy(m);
    /* addressed to the host: its tool, with start-by */
    char subj[200];
    snprintf(subj, sizeof subj, "sb.host.%s.call.public.echo", id);
    m = req_kinds(nc, subj, "Toolhost-Start-By", v, kinds, sizeof kinds);
    CU_ASSERT_STRING_EQUAL(kinds, "took result");
    CU_ASSERT(m && reply_ok(m, "sb"));
    natsMsg_Destroy(m);
    static const char *const bad[] = {"hidden.echo", "public.nope",
                                      "public.echo.x", "public"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(subj, sizeof subj, "sb.host.%s.call.%s", id, bad[i]);
        m = req_kinds(nc, subj, NULL, NULL, kinds, sizeof kinds);
        CU_ASSERT_STRING_EQUAL(kinds, "result");
        CU_ASSERT(m && reply_error_is(m, "not_found"));
        natsMsg_Destroy(m);
    }
    /* another host's subject: nobody */
    m = req_kinds(nc, "sb.host.0123456789abcdef.call.public.echo", NULL,
                  NULL, kinds, sizeof kinds);
    CU_ASSERT_STRING_EQUAL(kinds, "503");
    natsMsg_Destroy(m);
    natsConnection_Destroy(nc);
    CU_ASSERT_EQUAL(rpc_srv_stop(&h, SIGTERM), 0);
    rpc_srv_free(&h);
}

/* The kind of a reply and its body as JSON. */
static json_t *reply_json(natsMsg *m)
{
    th_error e;
    return th_json_from_msgpack((const uint8_t *)natsMsg_GetData(m),
                                (size_t)natsMsg_GetDataLength(m), &e);
}

/* One call of `subj` that may be asked about: with Toolhost-Ask: 1 when
 * `offer`; answers `answer` ("allow", "deny", or NULL: none) to the ask.
 * Returns the final reply's error code name ("" when ok) and whether an
 * ask came. */
static void ask_call(natsConnection *nc, const char *subj, bool offer,
                     const char *answer, char *code, size_t code_n,
                     bool *asked)
{
    natsInbox *ib = NULL;
    natsSubscription *sub = NULL;
    natsInbox_Create(&ib);
    natsConnection_SubscribeSync(&sub, nc, ib);
    th_buf b = TH_BUF_INIT;
    rpc_pack_json(&b, "{\"text\":\"asked\"}");
    natsMsg *req = NULL;
    natsMsg_Create(&req, subj, ib, (const char *)b.data, (int)b.len);
    if (offer)
        natsMsgHeader_Set(req, "Toolhost-Ask", "1");
    natsConnection_PublishMsg(nc, req);
    natsMsg_Destroy(req);
    th_buf_destroy(&b);
    *asked = false;
    snprintf(code, code_n, "(no result)");
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    for (bool done = false; !done && rpc_now_ms() < end;) {
        natsMsg *m = NULL;
        if (natsSubscription_NextMsg(&m, sub, 200) != NATS_OK)
            continue;
        const char *k = reply_kind(m);
        json_t *j = reply_json(m);
        if (strcmp(k, "ask") == 0) {
            *asked = true;
            CU_ASSERT_STRING_EQUAL(
                json_string_value(json_object_get(j, "tool")), "echo");
            CU_ASSERT_STRING_EQUAL(
                json_string_value(json_object_get(
                    json_object_get(j, "arguments"), "text")),
                "asked");
            const char *to = natsMsg_GetReply(m);
            CU_ASSERT(to && strstr(to, ".permit."));
            if (answer && to) {
                natsMsg *r = NULL;
                CU_ASSERT(natsConnection_RequestString(&r, nc, to, answer,
                                                       th_test_ms(3000)) == NATS_OK &&
                          strcmp(reply_kind(r), "permit") == 0);
                natsMsg_Destroy(r);
                /* a second answer finds nothing waiting */
                r = NULL;
                CU_ASSERT(natsConnection_RequestString(&r, nc, to, answer,
                                                       th_test_ms(3000)) == NATS_OK &&
                          strcmp(reply_kind(r), "result") == 0);
                natsMsg_Destroy(r);
            }
        } else if (strcmp(k, "result") == 0) {
            json_t *err = json_object_get(j, "error");
            snprintf(code, code_n, "%s",
                     err ? json_string_value(json_object_get(err, "code"))
                         : "");
            if (!err)
                CU_ASSERT(reply_ok(m, "asked"));
            done = true;
        }
        json_decref(j);
        natsMsg_Destroy(m);
    }
    natsSubscription_Destroy(sub);
    natsInbox_Destroy(ib);
}

/* `ask` rules over NATS: a caller that offers answers (Toolhost-Ask: 1)
 * is asked and its allow or deny decides; one that does not is denied. */
static void test_ask(void)
{
    NEED_SERVER();
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  permission_timeout: 2s\n"
             "  listen: [\"%s\"]\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [echo]\n"
             "    allow_users: [nats]\n"
             "    permissions:\n"
             "      rules:\n"
             "        - match: echo\n"
             "          action: ask\n"
             "nats:\n"
             "  prefix: ak\n"
             "  name: ak\n"
             "  toolsets: [public]\n",
             G_url);
    rpc_srv h;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(&h, &o) == 0);
    char id[40];
    host_id_from_log(&h, id, sizeof id);
    natsConnection *nc = nats_connect(G_url, NULL, NULL);
    CU_ASSERT_FATAL(nc != NULL);
    char code[64];
    bool asked;
    ask_call(nc, "ak.public.echo", true, "allow", code, sizeof code, &asked);
    CU_ASSERT(asked);
    CU_ASSERT_STRING_EQUAL(code, "");
    ask_call(nc, "ak.public.echo", true, "deny", code, sizeof code, &asked);
    CU_ASSERT(asked);
    CU_ASSERT_STRING_EQUAL(code, "permission_denied");
    ask_call(nc, "ak.public.echo", false, NULL, code, sizeof code, &asked);
    CU_ASSERT(!asked);
    CU_ASSERT_STRING_EQUAL(code, "permission_denied");
    CU_ASSERT(rpc_log_count(&h, "did not offer one") == 1);
    /* asked, never answered: host.permission_timeout denies */
    int64_t t0 = rpc_now_ms();
    ask_call(nc, "ak.public.echo", true, NULL, code, sizeof code, &asked);
    CU_ASSERT(asked);
    CU_ASSERT_STRING_EQUAL(code, "permission_denied");
    CU_ASSERT(rpc_now_ms() - t0 >= 1500);
    /* the CLI offers answers; without a terminal it answers deny */
    th_test_run r = {0};
    char *argv[] = {(char *)rpc_server_bin(), "call", "--connect", G_url,
                    "echo", "text=asked", NULL};
    setenv("TOOLHOST_NATS_SERVICE", "ak", 1);
    th_test_run_argv(argv, NULL, 20, 0, &r);
    unsetenv("TOOLHOST_NATS_SERVICE");
    CU_ASSERT(r.status != 0);
    CU_ASSERT(r.err && strstr(r.err, "permission"));
    th_test_run_free(&r);
    CU_ASSERT(rpc_log_count(&h, "did not offer one") == 1);
    natsConnection_Destroy(nc);
    CU_ASSERT_EQUAL(rpc_srv_stop(&h, SIGTERM), 0);
    rpc_srv_free(&h);
}

void th_suite_nats_fleet(void)
{
    CU_pSuite s = CU_add_suite("nats_fleet", suite_init, suite_clean);
    CU_add_test(s, "late_server", test_late_server);
    CU_add_test(s, "reply_batching_conn_limit",
                test_reply_batching_conn_limit);
    CU_add_test(s, "reply_batching_conn_lost",
                test_reply_batching_conn_lost);
    CU_add_test(s, "reload_endpoints", test_reload_endpoints);
    CU_add_test(s, "result_after_host_gone", test_result_after_host_gone);
    CU_add_test(s, "result_not_stored", test_result_not_stored);
    CU_add_test(s, "cluster_failover", test_cluster_failover);
    CU_add_test(s, "cluster_replicas", test_cluster_replicas);
    CU_add_test(s, "tls_auth", test_tls_auth);
    CU_add_test(s, "token_auth", test_token_auth);
    CU_add_test(s, "cli_retry", test_cli_retry);
    CU_add_test(s, "frozen_host", test_frozen_host);
    CU_add_test(s, "start_by", test_start_by);
    CU_add_test(s, "ask", test_ask);
}
