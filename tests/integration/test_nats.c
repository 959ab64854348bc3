/* test_nats.c - the NATS front (docs/scale.md): a nats-server on loopback
 * (a free port picked by binding port 0 first), three `toolhost serve`
 * hosts serving the toolset "public" on it, driven with the NATS C client:
 * calls spread over the hosts, an async call with progress, a host killed
 * with SIGKILL under load, the NATS server restarted under load, discovery
 * through the official NATS JavaScript client, a user refused by the
 * server's permissions.  Skipped when nats-server is not installed. */
#include "test_nats_harness.h"

#include <CUnit/CUnit.h>
#include <dirent.h>
#include <pthread.h>

#define NHOSTS 3

/* alice may call the toolset "public" and use discovery; bob may not call
 * any toolset; the hosts may do anything. */
static const char nats_conf[] =
    "authorization {\n"
    "  users = [\n"
    "    {user: host, password: hostpw}\n"
    "    {user: alice, password: alicepw, permissions: {\n"
    "       publish: {allow: [\"th.public.>\", \"th.host.*.tasks.*\", "
    "                          \"$SRV.>\", \"_INBOX.>\"]}\n"
    "       subscribe: {allow: [\"_INBOX.>\"]}}}\n"
    "    {user: bob, password: bobpw, permissions: {\n"
    "       publish: {allow: [\"_INBOX.>\"]}\n"
    "       subscribe: {allow: [\"_INBOX.>\"]}}}\n"
    "  ]\n"
    "}\n";

typedef struct cluster {
    gnatsd g;
    rpc_srv h[NHOSTS];
    char id[NHOSTS][40]; /* each host's NATS id, from its log */
    char url[64];
} cluster;

static int cluster_start(cluster *c)
{
    memset(c, 0, sizeof *c);
    gnatsd_files(&c->g, nats_conf);
    if (gnatsd_start(&c->g) != 0)
        return -1;
    snprintf(c->url, sizeof c->url, "nats://127.0.0.1:%d", c->g.port);
    for (int i = 0; i < NHOSTS; i++)
        if (host_start(&c->h[i], c->id[i], c->url, "th", "toolhost",
                       "echo, echo_async",
                       "  user: host\n  password: hostpw\n") != 0)
            return -1;
    return 0;
}

static void cluster_free(cluster *c)
{
    for (int i = 0; i < NHOSTS; i++)
        if (c->h[i].dir)
            rpc_srv_free(&c->h[i]);
    gnatsd_free(&c->g);
}

/* Which host a reply came from (index into c->id, or -1). */
static int reply_host(cluster *c, natsMsg *m)
{
    const char *v = NULL;
    if (natsMsgHeader_Get(m, "Toolhost-Host", &v) != NATS_OK || !v)
        return -1;
    for (int i = 0; i < NHOSTS; i++)
        if (strcmp(c->id[i], v) == 0)
            return i;
    return -1;
}

static cluster C;
static bool up;

static int suite_init(void)
{
    if (!nats_server_bin())
        return 0;
    up = cluster_start(&C) == 0;
    if (!up)
        fprintf(stderr, "test_nats: the cluster did not come up\n");
    return 0;
}

static int suite_clean(void)
{
    if (up || C.g.dir)
        cluster_free(&C);
    nats_CloseAndWait(2000);
    return 0;
}

#define NEED_CLUSTER()                                                        \
    do {                                                                      \
        if (!nats_server_bin())                                               \
            TH_SKIP("nats-server is not installed");                          \
        CU_ASSERT_FATAL(up);                                                  \
    } while (0)

/* Calls on one subject spread over the three hosts of the queue group. */
static void test_spread(void)
{
    NEED_CLUSTER();
    natsConnection *nc = nats_connect(C.url, "alice", "alicepw");
    CU_ASSERT_FATAL(nc != NULL);
    int per[NHOSTS] = {0}, ok = 0;
    for (int i = 0; i < 60; i++) {
        natsMsg *r = NULL;
        if (request(nc, &r, "th.public.echo", "{\"text\":\"hi\"}", 3000) !=
            NATS_OK)
            continue;
        int h = reply_host(&C, r);
        if (h >= 0)
            per[h]++;
        if (reply_ok(r, "hi") && strcmp(reply_kind(r), "result") == 0)
            ok++;
        natsMsg_Destroy(r);
    }
    fprintf(stderr, "\n  spread over hosts: %d %d %d\n", per[0], per[1],
            per[2]);
    CU_ASSERT_EQUAL(ok, 60);
    for (int i = 0; i < NHOSTS; i++)
        CU_ASSERT(per[i] > 0);
    /* a toolset not in nats.toolsets is not served: no responders */
    natsMsg *r = NULL;
    natsConnection *hc = nats_connect(C.url, "host", "hostpw");
    CU_ASSERT_FATAL(hc != NULL);
    CU_ASSERT(request(hc, &r, "th.hidden.echo", "{\"text\":\"x\"}", 500) !=
              NATS_OK);
    natsMsg_Destroy(r);
    /* bad arguments come back as a tool error in the RPC front's form */
    CU_ASSERT_FATAL(request(nc, &r, "th.public.echo", "{\"nope\":1}",
                            3000) == NATS_OK);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CU_ASSERT(msgpack_unpack_next(&u, natsMsg_GetData(r),
                                  (size_t)natsMsg_GetDataLength(r),
                                  NULL) == MSGPACK_UNPACK_SUCCESS &&
              rpc_tool_error_is(&u.data, "invalid_arguments"));
    msgpack_unpacked_destroy(&u);
    natsMsg_Destroy(r);
    natsConnection_Destroy(hc);
    natsConnection_Destroy(nc);
}

/* meta.toolhost exists in a reply of th.public.echo (nothing is cut: only
 * when Toolhost-Output-Info: 1 asked for it). */
static int output_info_reply(natsConnection *nc, const char *hdr)
{
    th_buf b = TH_BUF_INIT;
    rpc_pack_json(&b, "{\"text\":\"hi\"}");
    natsMsg *m = NULL, *r = NULL;
    int has = -1;
    if (natsMsg_Create(&m, "th.public.echo", NULL, (const char *)b.data,
                       (int)b.len) != NATS_OK)
        goto out;
    if (hdr && natsMsgHeader_Set(m, "Toolhost-Output-Info", hdr) != NATS_OK)
        goto out;
    if (natsConnection_RequestMsg(&r, nc, m, th_test_ms(3000)) != NATS_OK)
        goto out;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    if (msgpack_unpack_next(&u, natsMsg_GetData(r),
                            (size_t)natsMsg_GetDataLength(r), NULL) ==
            MSGPACK_UNPACK_SUCCESS &&
        rpc_ok(&u.data) && rpc_stdout_is(&u.data, "hi")) {
        const msgpack_object *meta = th_rpc_map_get(&u.data, "meta");
        has = meta && th_rpc_map_get(th_rpc_map_get(meta, "toolhost"),
                                     "output") != NULL;
    }
    msgpack_unpacked_destroy(&u);
out:
    natsMsg_Destroy(r);
    natsMsg_Destroy(m);
    th_buf_destroy(&b);
    return has;
}

/* Toolhost-Output-Info: 1 is the tools.call option output_info. */
static void test_output_info(void)
{
    NEED_CLUSTER();
    natsConnection *nc = nats_connect(C.url, "alice", "alicepw");
    CU_ASSERT_FATAL(nc != NULL);
    CU_ASSERT_EQUAL(output_info_reply(nc, NULL), 0);
    CU_ASSERT_EQUAL(output_info_reply(nc, "0"), 0);
    CU_ASSERT_EQUAL(output_info_reply(nc, "1"), 1);
    natsConnection_Destroy(nc);
}

/* Publishes an async call with reply subject `inbox`. */
static void publish_async(natsConnection *nc, const char *inbox,
                          const char *json)
{
    th_buf b = TH_BUF_INIT;
    rpc_pack_json(&b, json);
    natsConnection_PublishRequest(nc, "th.public.echo_async", inbox, b.data,
                                  (int)b.len);
    th_buf_destroy(&b);
}

/* nats.reply_batching (on by default): 240 calls published at once, so
 * each host has requests waiting behind the one it takes and answers on
 * its batching connection.  Every call's replies still come in order and
 * once each - a sync call one result; an async one its ack, then its
 * progress, then one result, nothing after it - and from one host. */
static void test_reply_batching(void)
{
    NEED_CLUSTER();
    for (int i = 0; i < NHOSTS; i++)
        CU_ASSERT(rpc_log_wait(&C.h[i], "reply batching on", rpc_wait_ms()));
    natsConnection *nc = nats_connect(C.url, "alice", "alicepw");
    CU_ASSERT_FATAL(nc != NULL);
    enum { N = 240 };
    static int state[N], from[N];
    static bool bad[N];
    memset(state, 0, sizeof state);
    memset(bad, 0, sizeof bad);
    natsSubscription *sub = NULL;
    CU_ASSERT_FATAL(natsConnection_SubscribeSync(&sub, nc, "_INBOX.rb.*") ==
                    NATS_OK);
    natsSubscription_SetPendingLimits(sub, -1, -1);
    natsConnection_Flush(nc);
    th_buf sync_args = TH_BUF_INIT, async_args = TH_BUF_INIT;
    rpc_pack_json(&sync_args, "{\"text\":\"b\"}");
    rpc_pack_json(&async_args, "{\"text\":\"a\",\"steps\":2,\"delay_ms\":1}");
    for (int i = 0; i < N; i++) {
        char inbox[64];
        snprintf(inbox, sizeof inbox, "_INBOX.rb.%d", i);
        bool async = i % 4 == 0;
        th_buf *a = async ? &async_args : &sync_args;
        natsConnection_PublishRequest(nc, async ? "th.public.echo_async"
                                                : "th.public.echo",
                                      inbox, a->data, (int)a->len);
        from[i] = -1;
    }
    natsConnection_Flush(nc);
    /* state: 0 nothing yet, 1 acked (async), 2 result */
    int done = 0;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (done < N && rpc_now_ms() < end) {
        natsMsg *m = NULL;
        if (natsSubscription_NextMsg(&m, sub, 200) != NATS_OK)
            continue;
        int i = atoi(natsMsg_GetSubject(m) + strlen("_INBOX.rb."));
        CU_ASSERT_FATAL(i >= 0 && i < N);
        const char *k = reply_kind(m);
        int h = reply_host(&C, m);
        if (from[i] < 0)
            from[i] = h;
        else if (from[i] != h)
            bad[i] = true;
        bool async = i % 4 == 0;
        if (state[i] == 2)
            bad[i] = true; /* anything after the result */
        else if (strcmp(k, "ack") == 0) {
            bad[i] |= !async || state[i] != 0;
            state[i] = 1;
        } else if (strcmp(k, "progress") == 0)
            bad[i] |= !async || state[i] != 1;
        else if (strcmp(k, "result") == 0) {
            bad[i] |= (async && state[i] != 1) || !reply_ok(m, async ? "a"
                                                                     : "b");
            state[i] = 2;
            done++;
        } else
            bad[i] = true;
        natsMsg_Destroy(m);
    }
    /* a short while for a stray reply after a result */
    natsMsg *m = NULL;
    while (natsSubscription_NextMsg(&m, sub, 100) == NATS_OK) {
        int i = atoi(natsMsg_GetSubject(m) + strlen("_INBOX.rb."));
        if (i >= 0 && i < N)
            bad[i] = true;
        natsMsg_Destroy(m);
    }
    int n_bad = 0;
    for (int i = 0; i < N; i++)
        n_bad += bad[i];
    fprintf(stderr, "\n  reply batching: %d of %d calls answered, %d out "
            "of order\n", done, N, n_bad);
    CU_ASSERT_EQUAL(done, N);
    CU_ASSERT_EQUAL(n_bad, 0);
    th_buf_destroy(&sync_args);
    th_buf_destroy(&async_args);
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
}

/* An async call: the ack names its host and task, progress and the final
 * result follow on the caller's inbox. */
static void test_async_progress(void)
{
    NEED_CLUSTER();
    natsConnection *nc = nats_connect(C.url, "alice", "alicepw");
    CU_ASSERT_FATAL(nc != NULL);
    natsInbox *inbox = NULL;
    natsInbox_Create(&inbox);
    natsSubscription *sub = NULL;
    CU_ASSERT_FATAL(natsConnection_SubscribeSync(&sub, nc, inbox) ==
                    NATS_OK);
    publish_async(nc, inbox, "{\"text\":\"done\",\"steps\":3,"
                             "\"delay_ms\":30}");
    int acks = 0, progress = 0, results = 0, host = -1;
    char task_id[40] = "";
    bool task_named = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!results && rpc_now_ms() < end) {
        natsMsg *m = NULL;
        if (natsSubscription_NextMsg(&m, sub, 500) != NATS_OK)
            continue;
        const char *k = reply_kind(m);
        if (strcmp(k, "ack") == 0) {
            acks++;
            host = reply_host(&C, m);
            const char *t = NULL;
            natsMsgHeader_Get(m, "Toolhost-Task", &t);
            task_named = host >= 0 && t &&
                         strncmp(t, C.id[host], strlen(C.id[host])) == 0 &&
                         t[strlen(C.id[host])] == '.';
            if (task_named)
                snprintf(task_id, sizeof task_id, "%s",
                         t + strlen(C.id[host]) + 1);
        } else if (strcmp(k, "progress") == 0) {
            CU_ASSERT(acks == 1);
            progress++;
        } else if (strcmp(k, "result") == 0) {
            results++;
            CU_ASSERT(reply_ok(m, NULL));
            CU_ASSERT(reply_host(&C, m) == host);
        }
        natsMsg_Destroy(m);
    }
    CU_ASSERT_EQUAL(acks, 1);
    CU_ASSERT(task_named);
    CU_ASSERT(progress >= 1);
    CU_ASSERT_EQUAL(results, 1);
    /* the task on its host's own subject: get, result; a second task is
     * cancelled there */
    CU_ASSERT_FATAL(host >= 0 && task_id[0]);
    char subj[160];
    snprintf(subj, sizeof subj, "th.host.%s.tasks.get", C.id[host]);
    natsMsg *r = NULL;
    CU_ASSERT_FATAL(natsConnection_RequestString(&r, nc, subj, task_id,
                                                 th_test_ms(3000)) ==
                    NATS_OK);
    json_t *j = th_json_from_msgpack((const uint8_t *)natsMsg_GetData(r),
                                     (size_t)natsMsg_GetDataLength(r), NULL);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "state")),
                           "completed");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "tool")),
                           "echo_async");
    json_decref(j);
    natsMsg_Destroy(r);
    snprintf(subj, sizeof subj, "th.host.%s.tasks.result", C.id[host]);
    CU_ASSERT_FATAL(natsConnection_RequestString(&r, nc, subj, task_id,
                                                 th_test_ms(3000)) ==
                    NATS_OK);
    CU_ASSERT(reply_ok(r, "done"));
    natsMsg_Destroy(r);
    CU_ASSERT_FATAL(natsConnection_RequestString(&r, nc, subj, "999999",
                                                 th_test_ms(3000)) ==
                    NATS_OK);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CU_ASSERT(msgpack_unpack_next(&u, natsMsg_GetData(r),
                                  (size_t)natsMsg_GetDataLength(r),
                                  NULL) == MSGPACK_UNPACK_SUCCESS &&
              rpc_tool_error_is(&u.data, "not_found"));
    msgpack_unpacked_destroy(&u);
    natsMsg_Destroy(r);
    /* cancel a long one through its host */
    publish_async(nc, inbox, "{\"text\":\"never\",\"steps\":100,"
                             "\"delay_ms\":100}");
    char tid2[40] = "";
    int h2 = -1;
    bool cancelled = false;
    end = rpc_now_ms() + rpc_wait_ms();
    while (!cancelled && rpc_now_ms() < end) {
        natsMsg *m = NULL;
        if (natsSubscription_NextMsg(&m, sub, 200) != NATS_OK)
            continue;
        const char *k = reply_kind(m);
        if (strcmp(k, "ack") == 0) {
            h2 = reply_host(&C, m);
            const char *t = NULL;
            natsMsgHeader_Get(m, "Toolhost-Task", &t);
            const char *dot = t ? strrchr(t, '.') : NULL;
            snprintf(tid2, sizeof tid2, "%s", dot ? dot + 1 : "");
            CU_ASSERT_FATAL(h2 >= 0);
            snprintf(subj, sizeof subj, "th.host.%s.tasks.cancel",
                     C.id[h2]);
            natsMsg *cr = NULL;
            CU_ASSERT(natsConnection_RequestString(&cr, nc, subj, tid2,
                                                   th_test_ms(3000)) ==
                          NATS_OK &&
                      strcmp(reply_kind(cr), "task") == 0);
            natsMsg_Destroy(cr);
        } else if (strcmp(k, "result") == 0) {
            msgpack_unpacked_init(&u);
            cancelled = msgpack_unpack_next(
                            &u, natsMsg_GetData(m),
                            (size_t)natsMsg_GetDataLength(m),
                            NULL) == MSGPACK_UNPACK_SUCCESS &&
                        rpc_tool_error_is(&u.data, "cancelled");
            msgpack_unpacked_destroy(&u);
            CU_ASSERT(cancelled);
            natsMsg_Destroy(m);
            break;
        }
        natsMsg_Destroy(m);
    }
    CU_ASSERT(cancelled);
    natsSubscription_Destroy(sub);
    natsInbox_Destroy(inbox);
    natsConnection_Destroy(nc);
}

/* bob's server permissions do not include th.public.>: his request never
 * reaches a host. */
static void test_user_refused(void)
{
    NEED_CLUSTER();
    natsConnection *nc = nats_connect(C.url, "bob", "bobpw");
    CU_ASSERT_FATAL(nc != NULL);
    natsMsg *r = NULL;
    CU_ASSERT(request(nc, &r, "th.public.echo", "{\"text\":\"x\"}", 700) !=
              NATS_OK);
    CU_ASSERT(r == NULL);
    natsMsg_Destroy(r);
    natsConnection_Destroy(nc);
    /* and the server says why */
    bool said = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!said && rpc_now_ms() < end) {
        th_test_run rr = {0};
        char *argv[] = {"/bin/grep", "-c", "Publish Violation", C.g.log,
                        NULL};
        th_test_run_argv(argv, NULL, 5, 0, &rr);
        said = rr.out && atoi(rr.out) > 0;
        th_test_run_free(&rr);
        if (!said)
            usleep(50000);
    }
    CU_ASSERT(said);
}

/* Discovery through the official NATS JavaScript client's services
 * client: three hosts answer PING, INFO and STATS. */
static void test_discovery_js(void)
{
    NEED_CLUSTER();
    char *argv[] = {"/bin/sh", "-c", "command -v node >/dev/null 2>&1",
                    NULL};
    th_test_run r = {0};
    if (th_test_run_argv(argv, NULL, 5, 0, &r) != 0 || r.status != 0) {
        th_test_run_free(&r);
        TH_SKIP("node is not installed");
    }
    th_test_run_free(&r);
    { /* one call of our own, so that STATS has a request to count when
         this test runs alone */
        natsConnection *nc = nats_connect(C.url, "alice", "alicepw");
        CU_ASSERT_FATAL(nc != NULL);
        natsMsg *m = NULL;
        if (request(nc, &m, "th.public.echo", "{\"text\":\"hi\"}", 3000) ==
            NATS_OK)
            natsMsg_Destroy(m);
        natsConnection_Destroy(nc);
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && if [ ! -d node_modules/nats ]; then echo "
             "'tests/nats/node_modules is missing: run scripts/install-deps'; "
             "exit 3; fi; exec node discover.mjs '%s' alice alicepw toolhost",
             th_test_source_path("tests/nats"), C.url);
    char *argv2[] = {"/bin/sh", "-c", cmd, NULL};
    memset(&r, 0, sizeof r);
    th_test_run_argv(argv2, NULL, 30, 0, &r);
    fprintf(stderr, "\n  discover.mjs: %s", r.out ? r.out : "");
    if (r.status == 3) {
        th_test_run_free(&r);
        TH_SKIP("tests/nats/node_modules is missing (scripts/install-deps)");
    }
    CU_ASSERT_EQUAL(r.status, 0);
    json_t *j = r.out ? json_loads(r.out, 0, NULL) : NULL;
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "pings")),
                    NHOSTS);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "hosts")),
                    NHOSTS);
    json_t *tools = json_object_get(j, "tools");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(tools,
                                                       "th.public.echo")),
                    NHOSTS);
    CU_ASSERT_EQUAL(
        json_integer_value(json_object_get(tools, "th.public.echo_async")),
        NHOSTS);
    CU_ASSERT(json_object_get(tools, "th.hidden.echo") == NULL);
    CU_ASSERT(json_integer_value(json_object_get(j, "requests")) > 0);
    char *types = json_dumps(json_object_get(j, "types"), JSON_COMPACT);
    CU_ASSERT(types && strstr(types, "io.nats.micro.v1.ping_response") &&
              strstr(types, "io.nats.micro.v1.info_response") &&
              strstr(types, "io.nats.micro.v1.stats_response"));
    free(types);
    json_decref(j);
    th_test_run_free(&r);
}

/* The CLI over NATS: list counts the hosts of each tool, call works as
 * with a socket. */
static void test_cli(void)
{
    NEED_CLUSTER();
    char url[128];
    snprintf(url, sizeof url, "nats://alice:alicepw@127.0.0.1:%d", C.g.port);
    th_test_run r = {0};
    /* discovery collects the answers that come before a quiet moment: on
     * a busy machine a host can answer after it, so list again until all
     * three were heard (deadline rpc_wait_ms()) */
    for (int64_t end = rpc_now_ms() + rpc_wait_ms();;) {
        th_test_toolhost(&r, "list", "--connect", url, NULL);
        if ((r.status == 0 && r.out && strstr(r.out, "3 host(s) answered")) ||
            rpc_now_ms() >= end)
            break;
        th_test_run_free(&r);
        memset(&r, 0, sizeof r);
    }
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT(r.out && strstr(r.out, "3 host(s) answered"));
    CU_ASSERT(r.out && strstr(r.out, "echo_async") &&
              strstr(r.out, "    3  th.public.echo\n"));
    if (r.status)
        fprintf(stderr, "\n  list: %s %s\n", r.out, r.err);
    th_test_run_free(&r);
    memset(&r, 0, sizeof r);
    th_test_toolhost(&r, "call", "--connect", url, "echo", "text=over nats",
                     NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT(r.out && strstr(r.out, "over nats"));
    th_test_run_free(&r);
    memset(&r, 0, sizeof r);
    th_test_toolhost(&r, "call", "--connect", url, "public.echo_async",
                     "text=later", "steps=2", NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT(r.out && strstr(r.out, "later"));
    th_test_run_free(&r);
    memset(&r, 0, sizeof r);
    th_test_toolhost(&r, "call", "--connect", url, "nosuch", NULL);
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT(r.err && strstr(r.err, "no host"));
    th_test_run_free(&r);
}

/* A reload (SIGHUP after the config changed) swaps the host's config; the
 * NATS front keeps serving from its own reference (ASan would catch a use
 * of the freed old config). */
static void test_reload(void)
{
    NEED_CLUSTER();
    cfg_replace(&C.h[0], "shutdown_grace: 1s", "shutdown_grace: 2s");
    kill(C.h[0].pid, SIGHUP);
    CU_ASSERT_FATAL(rpc_log_wait(&C.h[0], "reload #1 ok:", rpc_wait_ms()));
    natsConnection *nc = nats_connect(C.url, "alice", "alicepw");
    CU_ASSERT_FATAL(nc != NULL);
    int from0 = 0, ok = 0;
    for (int i = 0; i < 200 && from0 < 3; i++) {
        natsMsg *r = NULL;
        if (request(nc, &r, "th.public.echo", "{\"text\":\"r\"}", 2000) ==
            NATS_OK) {
            ok += reply_ok(r, "r");
            from0 += reply_host(&C, r) == 0;
        }
        natsMsg_Destroy(r);
    }
    CU_ASSERT(from0 >= 3);
    CU_ASSERT(ok > 0);
    CU_ASSERT(rpc_alive(&C.h[0]));
    natsConnection_Destroy(nc);
}

/* The NATS server restarted under load: the hosts reconnect and
 * resubscribe; calls work again within a bounded time. */
static void test_server_restart(void)
{
    NEED_CLUSTER();
    natsConnection *nc = nats_connect(C.url, "alice", "alicepw");
    CU_ASSERT_FATAL(nc != NULL);
    int before = 0;
    for (int i = 0; i < 20; i++) {
        natsMsg *r = NULL;
        if (request(nc, &r, "th.public.echo", "{\"text\":\"a\"}", 2000) ==
            NATS_OK && reply_ok(r, "a"))
            before++;
        natsMsg_Destroy(r);
    }
    CU_ASSERT_EQUAL(before, 20);
    gnatsd_kill(&C.g, SIGTERM);
    int64_t t0 = rpc_now_ms();
    CU_ASSERT_FATAL(gnatsd_start(&C.g) == 0); /* the same port */
    int64_t t_up = rpc_now_ms();
    int64_t back = -1;
    int64_t end = t0 + th_test_ms(15000);
    /* (no responders fail at once: a long deadline costs nothing while
     * the hosts are not back, and a slow answer is not taken for none) */
    while (back < 0 && rpc_now_ms() < end) {
        natsMsg *r = NULL;
        if (request(nc, &r, "th.public.echo", "{\"text\":\"b\"}", 2000) ==
            NATS_OK && reply_ok(r, "b"))
            back = rpc_now_ms() - t_up;
        else
            usleep(20000);
        natsMsg_Destroy(r);
    }
    CU_ASSERT(back >= 0);
    /* every host is back: calls spread over all three again */
    int per[NHOSTS] = {0};
    end = rpc_now_ms() + rpc_wait_ms();
    /* until each host answered once, or rpc_wait_ms() is over (not a
     * count of calls: two quick hosts can take 300 before the third is
     * back) */
    while (rpc_now_ms() < end && !(per[0] && per[1] && per[2])) {
        natsMsg *r = NULL;
        if (request(nc, &r, "th.public.echo", "{\"text\":\"c\"}", 1000) ==
            NATS_OK) {
            int h = reply_host(&C, r);
            if (h >= 0)
                per[h]++;
        }
        natsMsg_Destroy(r);
    }
    fprintf(stderr, "\n  NATS server restart: first call answered %lld ms "
            "after the server was up; hosts serving after: %d %d %d\n",
            (long long)back, per[0], per[1], per[2]);
    for (int i = 0; i < NHOSTS; i++)
        CU_ASSERT(per[i] > 0);
    CU_ASSERT(rpc_log_wait(&C.h[0], "nats: reconnected", rpc_wait_ms()));
    natsConnection_Destroy(nc);
}

/* num_requests of endpoint `tool` in host i's $SRV.STATS, or -1. */
static int64_t stats_requests(natsConnection *nc, int i, const char *tool)
{
    return stats_of(nc, "toolhost", C.id[i], tool);
}

/* Takes what arrived on one call's inbox: the host that acknowledged it,
 * and its end (1 ok, -1 failed). */
static void take_replies(natsSubscription *sub, int *owner, int *done,
                         int64_t *last_msg)
{
    natsMsg *m = NULL;
    while (!*done && natsSubscription_NextMsg(&m, sub, 1) == NATS_OK) {
        *last_msg = rpc_now_ms();
        const char *k = reply_kind(m);
        if (strcmp(k, "ack") == 0)
            *owner = reply_host(&C, m);
        else if (strcmp(k, "result") == 0)
            *done = reply_ok(m, NULL) ? 1 : -1;
        natsMsg_Destroy(m);
    }
}

/* A host killed with SIGKILL under load: only the calls it had taken are
 * lost; every call the others acknowledged completes. */
static void test_host_killed(void)
{
    NEED_CLUSTER();
    natsConnection *nc = nats_connect(C.url, "alice", "alicepw");
    CU_ASSERT_FATAL(nc != NULL);
    enum { N = 30 };
    int64_t base = stats_requests(nc, 0, "echo_async") +
                   stats_requests(nc, 1, "echo_async");
    natsInbox *ib[N];
    natsSubscription *sub[N];
    for (int i = 0; i < N; i++) {
        natsInbox_Create(&ib[i]);
        CU_ASSERT_FATAL(natsConnection_SubscribeSync(&sub[i], nc, ib[i]) ==
                        NATS_OK);
    }
    natsConnection_Flush(nc);
    /* each call runs 5 steps of th_test_ms(100): long enough that the
     * killed host's calls are still running when the kill comes */
    char args[96];
    snprintf(args, sizeof args,
             "{\"text\":\"k\",\"steps\":5,\"delay_ms\":%u}",
             th_test_ms(100));
    for (int i = 0; i < N; i++)
        publish_async(nc, ib[i], args);
    natsConnection_Flush(nc);
    int victim = NHOSTS - 1;
    int owner[N], done[N];
    for (int i = 0; i < N; i++)
        owner[i] = -1, done[i] = 0;
    /* The victim is killed once it has acknowledged a call (the event
     * that shows it took some; not a sleep). */
    int64_t last_msg = rpc_now_ms();
    bool victim_acked = false;
    for (int64_t end = rpc_now_ms() + rpc_wait_ms();
         !victim_acked && rpc_now_ms() < end;) {
        for (int i = 0; i < N; i++)
            take_replies(sub[i], &owner[i], &done[i], &last_msg);
        for (int i = 0; i < N; i++)
            victim_acked |= owner[i] == victim;
    }
    CU_ASSERT_FATAL(victim_acked);
    kill(C.h[victim].pid, SIGKILL);
    rpc_srv_wait(&C.h[victim]);
    /* Rounds over every inbox until each call ended or its host is the
     * killed one; calls the killed host had taken but not acknowledged
     * yet see nothing at all ("unknown").  Those are told apart by the
     * survivors' own counts: once every call the survivors took
     * ($SRV.STATS, counted when a request arrives) has ended and nothing
     * came for a quiet th_test_ms(1000), the rest are the killed host's. */
    int64_t end = rpc_now_ms() + rpc_wait_ms(), quiet_ms = th_test_ms(1000);
    int64_t next_stats = 0;
    for (bool more = true; more && rpc_now_ms() < end;) {
        more = false;
        bool survivors_busy = false;
        for (int i = 0; i < N; i++) {
            if (done[i] || owner[i] == victim)
                continue;
            take_replies(sub[i], &owner[i], &done[i], &last_msg);
            if (!done[i] && owner[i] != victim) {
                more = true;
                survivors_busy |= owner[i] >= 0;
            }
        }
        if (more && !survivors_busy && rpc_now_ms() - last_msg >= quiet_ms &&
            rpc_now_ms() >= next_stats) {
            next_stats = rpc_now_ms() + 200;
            int ended = 0;
            for (int i = 0; i < N; i++)
                ended += done[i] != 0 && owner[i] != victim;
            int64_t taken = stats_requests(nc, 0, "echo_async") +
                            stats_requests(nc, 1, "echo_async") - base;
            if (taken == ended)
                break;
        }
        usleep(20000);
    }
    int lost = 0, ok = 0, bad = 0, unknown = 0;
    for (int i = 0; i < N; i++) {
        if (owner[i] == victim)
            lost += done[i] == 0;
        else if (owner[i] < 0 && !done[i])
            unknown++;
        else if (done[i] == 1)
            ok++;
        else {
            bad++;
            fprintf(stderr, "  call %d: owner %d done %d\n", i, owner[i],
                    done[i]);
        }
        natsSubscription_Destroy(sub[i]);
        natsInbox_Destroy(ib[i]);
    }
    /* The survivors' own counts ($SRV.STATS) prove the unknown calls were
     * not theirs: they took exactly the calls that completed. */
    int64_t took = stats_requests(nc, 0, "echo_async") +
                   stats_requests(nc, 1, "echo_async");
    fprintf(stderr, "\n  host killed under load: %d calls completed on the "
            "other hosts (their $SRV.STATS count %lld since the start), %d "
            "acknowledged by the killed host and lost, %d taken by it before "
            "acknowledging (lost), %d other failures\n",
            ok, (long long)(took - base), lost, unknown, bad);
    CU_ASSERT_EQUAL(took - base, ok);
    CU_ASSERT_EQUAL(ok + lost + unknown, N);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(ok > 0);
    CU_ASSERT(lost > 0);
    /* the survivors take every new call */
    int after = 0;
    for (int i = 0; i < 10; i++) {
        natsMsg *r = NULL;
        if (request(nc, &r, "th.public.echo", "{\"text\":\"z\"}", 2000) ==
            NATS_OK && reply_ok(r, "z"))
            after++;
        natsMsg_Destroy(r);
    }
    CU_ASSERT_EQUAL(after, 10);
    natsConnection_Destroy(nc);
}

/* A host that takes requests slower than they come: past nats.max_pending
 * the NATS client drops the excess and the host logs "slow consumer". */
static void test_slow_consumer(void)
{
    NEED_CLUSTER();
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: info\n"
             "  shutdown_grace: 1s\n"
             "  queue_size: 4\n"
             "  workers: 1\n"
             "  listen: [\"%s\"]\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [echo]\n"
             "    allow_users: [nats]\n"
             "nats:\n"
             "  prefix: slow\n"
             "  user: host\n"
             "  password: hostpw\n"
             "  toolsets: [public]\n"
             "  max_pending: 16\n",
             C.url);
    rpc_srv h;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(&h, &o) == 0);
    char id[40];
    host_id_from_log(&h, id, sizeof id);
    natsConnection *nc = nats_connect(C.url, "host", "hostpw");
    CU_ASSERT_FATAL(nc != NULL);
    th_buf b = TH_BUF_INIT;
    rpc_pack_json(&b, "{\"text\":\"flood\"}");
    bool said = false;
    for (int round = 0; round < 20 && !said; round++) {
        for (int i = 0; i < 5000; i++)
            natsConnection_PublishRequest(nc, "slow.public.echo",
                                          "_INBOX.nobody", b.data,
                                          (int)b.len);
        natsConnection_FlushTimeout(nc, 5000);
        usleep(50000);
        said = rpc_log_has(&h, "nats: slow consumer");
    }
    /* one more burst after the first line: the line comes at most once a
     * second, with the count of what was dropped */
    for (int i = 0; said && i < 5000; i++)
        natsConnection_PublishRequest(nc, "slow.public.echo", "_INBOX.nobody",
                                      b.data, (int)b.len);
    natsConnection_FlushTimeout(nc, 5000);
    th_buf_destroy(&b);
    CU_ASSERT(said);
    int lines = 0;
    int64_t first = -1, last = -1;
    bool counted = true;
    FILE *lf = fopen(h.log, "r");
    char line[2048];
    while (lf && fgets(line, sizeof line, lf)) {
        int hh, mm, ss, ms;
        if (!strstr(line, "nats: slow consumer") ||
            sscanf(line, "%*10cT%d:%d:%d.%dZ", &hh, &mm, &ss, &ms) != 4)
            continue;
        int64_t t = ((int64_t)(hh * 60 + mm) * 60 + ss) * 1000 + ms;
        if (first < 0)
            first = t;
        last = t;
        lines++;
        counted &= strstr(line, "dropped") != NULL;
    }
    if (lf)
        fclose(lf);
    fprintf(stderr, "\n  slow consumer: %d line(s) over %lld ms\n", lines,
            (long long)(last - first));
    CU_ASSERT(lines >= 1);
    CU_ASSERT(lines <= (last - first) / 1000 + 1);
    CU_ASSERT(counted);
    /* and it still answers afterwards */
    natsMsg *r = NULL;
    bool answered = false;
    for (int i = 0; i < 50 && !answered; i++) {
        answered = request(nc, &r, "slow.public.echo", "{\"text\":\"x\"}",
                           500) == NATS_OK && reply_ok(r, "x");
        natsMsg_Destroy(r);
        r = NULL;
    }
    CU_ASSERT(answered);
    natsConnection_Destroy(nc);
    CU_ASSERT_EQUAL(rpc_srv_stop(&h, SIGTERM), 0);
    rpc_srv_free(&h);
}

/* $SRV.STATS is open to anyone who may use discovery: it counts errors
 * by code and never shows an error's text (another caller's arguments,
 * paths of the host). */
static void test_stats_counts(void)
{
    NEED_CLUSTER();
    natsConnection *nc = nats_connect(C.url, "alice", "alicepw");
    CU_ASSERT_FATAL(nc != NULL);
    /* the validator names the unknown parameter in its message */
    for (int i = 0; i < 6; i++) {
        natsMsg *r = NULL;
        CU_ASSERT(request(nc, &r, "th.public.echo",
                          "{\"text\":\"x\",\"secret_zq9\":1}", 2000) ==
                  NATS_OK);
        CU_ASSERT(r && reply_error_is(r, "invalid_arguments"));
        natsMsg_Destroy(r);
    }
    int64_t counted = 0;
    for (int i = 0; i < NHOSTS; i++) {
        if (C.h[i].reaped) /* host_killed ended it */
            continue;
        char subj[160];
        snprintf(subj, sizeof subj, "$SRV.STATS.toolhost.%s", C.id[i]);
        natsMsg *r = NULL;
        CU_ASSERT_FATAL(natsConnection_RequestString(&r, nc, subj, "",
                                                     th_test_ms(2000)) ==
                        NATS_OK);
        const char *text = natsMsg_GetData(r);
        int len = natsMsg_GetDataLength(r);
        bool leaks = memmem(text, (size_t)len, "secret_zq9", 10) ||
                     memmem(text, (size_t)len, C.h[i].cfg,
                            strlen(C.h[i].cfg));
        if (leaks)
            fprintf(stderr, "\n  host %d: %.*s\n", i, len, text);
        CU_ASSERT(!leaks);
        json_t *j = json_loadb(text, (size_t)len, 0, NULL);
        size_t k;
        json_t *e;
        json_array_foreach(json_object_get(j, "endpoints"), k, e)
            if (strcmp(json_string_value(json_object_get(e, "name")),
                       "echo") == 0)
                counted += json_integer_value(json_object_get(
                    json_object_get(json_object_get(e, "data"), "errors"),
                    "invalid_arguments"));
        json_decref(j);
        natsMsg_Destroy(r);
    }
    CU_ASSERT(counted >= 6);
    natsConnection_Destroy(nc);
}

/* A host serving `prefix` (echo, echo_async) for the tests that stop or
 * freeze it; `extra` is added to its host: block. */
static int solo_start(rpc_srv *h, const char *prefix, const char *extra)
{
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: info\n"
             "  shutdown_grace: 1s\n"
             "  listen: [\"%s\"]\n"
             "%s"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [echo, echo_async]\n"
             "    allow_users: [nats]\n"
             "nats:\n"
             "  prefix: %s\n"
             "  user: host\n"
             "  password: hostpw\n"
             "  toolsets: [public]\n"
             "  max_pending: 100000\n",
             C.url, extra ? extra : "", prefix);
    rpc_opts o = {.config = cfg};
    if (rpc_srv_start(h, &o) != 0)
        return -1;
    char id[40];
    host_id_from_log(h, id, sizeof id);
    return id[0] ? 0 : -1;
}

/* Publishes request i of a batch: reply subject _INBOX.<tag>.<i>. */
static void publish_nth(natsConnection *nc, const char *subj,
                        const char *tag, int i, const th_buf *b,
                        const char *hname, const char *hval)
{
    char reply[64];
    snprintf(reply, sizeof reply, "_INBOX.%s.%d", tag, i);
    natsMsg *m = NULL;
    natsMsg_Create(&m, subj, reply, (const char *)b->data, (int)b->len);
    if (hname)
        natsMsgHeader_Set(m, hname, hval);
    natsConnection_PublishMsg(nc, m);
    natsMsg_Destroy(m);
}

/* Final answers on a batch's inboxes, gathered by a subscription's
 * callback: fin[i] 1 ok, 2 cancelled, 3 other error, 4 no responders
 * (the server had nobody to deliver it to); 0 not yet.  The client turns
 * a "no responders" status into an error of NextMsg, so the answers are
 * taken in a callback, where the message itself is seen. */
typedef struct finals {
    pthread_mutex_t mu;
    int *fin, n, done;
} finals;

static void on_final(natsConnection *nc, natsSubscription *sub, natsMsg *m,
                     void *ud)
{
    (void)nc, (void)sub;
    finals *x = ud;
    const char *dot = strrchr(natsMsg_GetSubject(m), '.');
    int i = dot ? atoi(dot + 1) : -1;
    int v = natsMsg_IsNoResponders(m) ? 4
            : strcmp(reply_kind(m), "result") != 0 ? 0
            : reply_ok(m, NULL)                    ? 1
            : reply_error_is(m, "cancelled")       ? 2
                                                   : 3;
    pthread_mutex_lock(&x->mu);
    if (v && i >= 0 && i < x->n && !x->fin[i]) {
        x->fin[i] = v;
        x->done++;
    }
    pthread_mutex_unlock(&x->mu);
    natsMsg_Destroy(m);
}

static int finals_done(finals *x)
{
    pthread_mutex_lock(&x->mu);
    int d = x->done;
    pthread_mutex_unlock(&x->mu);
    return d;
}

/* SIGTERM with calls streaming in: every call the server delivered to the
 * host is answered - its result or `cancelled` - and every other one gets
 * the server's "no responders"; no caller is left without an answer. */
static void test_drain(void)
{
    NEED_CLUSTER();
    rpc_srv h;
    CU_ASSERT_FATAL(solo_start(&h, "drain", NULL) == 0);
    natsConnection *nc = nats_connect(C.url, "host", "hostpw");
    CU_ASSERT_FATAL(nc != NULL);
    enum { N1 = 1000, N = 3000 };
    static int fin[N];
    memset(fin, 0, sizeof fin);
    /* static: a callback under way when it is unsubscribed outlives us */
    static finals x = {.mu = PTHREAD_MUTEX_INITIALIZER};
    x.fin = fin;
    x.n = N;
    x.done = 0;
    natsSubscription *sub = NULL;
    CU_ASSERT_FATAL(natsConnection_Subscribe(&sub, nc, "_INBOX.drain.>",
                                             on_final, &x) == NATS_OK);
    natsSubscription_SetPendingLimits(sub, -1, -1);
    natsConnection_Flush(nc);
    th_buf b = TH_BUF_INIT;
    char args[96];
    snprintf(args, sizeof args,
             "{\"text\":\"d\",\"steps\":1,\"delay_ms\":%u}", th_test_ms(20));
    rpc_pack_json(&b, args);
    for (int i = 0; i < N1; i++)
        publish_nth(nc, "drain.public.echo_async", "drain", i, &b, NULL,
                    NULL);
    natsConnection_Flush(nc);
    /* the host is answering (an event, not a sleep) */
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (finals_done(&x) == 0 && rpc_now_ms() < end)
        usleep(1000);
    kill(h.pid, SIGTERM);
    for (int i = N1; i < N; i++)
        publish_nth(nc, "drain.public.echo_async", "drain", i, &b, NULL,
                    NULL);
    natsConnection_Flush(nc);
    int st = rpc_srv_wait(&h);
    CU_ASSERT_EQUAL(st, 0);
    end = rpc_now_ms() + rpc_wait_ms();
    while (finals_done(&x) < N && rpc_now_ms() < end)
        usleep(10000);
    natsSubscription_Unsubscribe(sub);
    int c[5] = {0};
    pthread_mutex_lock(&x.mu);
    for (int i = 0; i < N; i++)
        c[fin[i]]++;
    pthread_mutex_unlock(&x.mu);
    fprintf(stderr, "\n  SIGTERM with %d calls streaming in: %d ok, %d "
            "cancelled, %d other errors, %d no responders (after the host "
            "left), %d without any answer\n",
            N, c[1], c[2], c[3], c[4], c[0]);
    if (c[0])
        rpc_dump_log(&h);
    CU_ASSERT_EQUAL(c[0], 0);
    CU_ASSERT(c[1] > 0);
    th_buf_destroy(&b);
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    rpc_srv_free(&h);
}

/* SIGTERM stops new NATS calls at once: while the host lets a socket
 * call finish (host.shutdown_grace), a NATS request finds the tool
 * subjects drained (no responders, or `cancelled`) instead of starting
 * work on a host that is going away. */
static void test_sigterm_no_new_calls(void)
{
    NEED_CLUSTER();
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: info\n"
             "  shutdown_grace: 600s\n"
             "  listen: [\"%s\"]\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "  - name: hang_mark\n"
             "    path: @BUILD@/fixtures/hang_mark.so\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [echo]\n"
             "    allow_users: [nats]\n"
             "  - name: local\n"
             "    tools: [hang_mark]\n"
             "nats:\n"
             "  prefix: qt\n"
             "  user: host\n"
             "  password: hostpw\n"
             "  toolsets: [public]\n",
             C.url);
    rpc_srv h;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(&h, &o) == 0);
    natsConnection *nc = nats_connect(C.url, "host", "hostpw");
    CU_ASSERT_FATAL(nc != NULL);
    natsMsg *r = NULL;
    CU_ASSERT_FATAL(request(nc, &r, "qt.public.echo", "{\"text\":\"up\"}",
                            3000) == NATS_OK);
    CU_ASSERT(reply_ok(r, "up"));
    natsMsg_Destroy(r);
    r = NULL;
    /* a socket call that holds the server in its grace */
    char mark[600], args[800];
    snprintf(mark, sizeof mark, "%s/mark", h.dir);
    /* (it outlasts the test: a second SIGTERM ends the host below) */
    snprintf(args, sizeof args, "[\"hang_mark\", {\"ms\": 600000, "
             "\"mark\": \"%s\"}]", mark);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &h) == 0);
    rpc_raw_request(&w, 1, "tools.call", args);
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (access(mark, F_OK) != 0 && rpc_now_ms() < end)
        usleep(5000);
    CU_ASSERT_FATAL(access(mark, F_OK) == 0);
    kill(h.pid, SIGTERM);
    CU_ASSERT(rpc_log_wait(&h, "nats: stopping: no new calls",
                           rpc_wait_ms()));
    /* the socket call still runs (the host waits for it); a new NATS
     * call is not taken */
    natsStatus st = request(nc, &r, "qt.public.echo", "{\"text\":\"late\"}",
                            3000);
    CU_ASSERT(st == NATS_NO_RESPONDERS ||
              (st == NATS_OK && reply_error_is(r, "cancelled")));
    if (st == NATS_OK && !reply_error_is(r, "cancelled"))
        fprintf(stderr, "\n  a NATS call after SIGTERM was taken and "
                "answered (%s)\n", reply_ok(r, "late") ? "ok" : "?");
    natsMsg_Destroy(r);
    CU_ASSERT(waitpid(h.pid, NULL, WNOHANG) == 0); /* still in its grace */
    /* a second signal: the host exits at once (status 1; valgrind's 99
     * there, as it counts what an immediate exit leaves allocated) */
    kill(h.pid, SIGTERM);
    int st2 = rpc_srv_wait(&h);
    CU_ASSERT(st2 == 1 || (rpc_valgrind() && st2 == 99));
    rpc_raw_close(&w);
    natsConnection_Destroy(nc);
    rpc_srv_free(&h);
}

/* A toolset-scoped task outlives its session; at stop the NATS front's
 * sessions close and the task no longer reports to them: its caller is
 * still answered (`cancelled`), not left waiting, and the host exits 0. */
static void test_stop_toolset_task(void)
{
    NEED_CLUSTER();
    rpc_srv h;
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: info\n"
             "  shutdown_grace: 1s\n"
             "  listen: [\"%s\"]\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [echo_async]\n"
             "    allow_users: [nats]\n"
             "    scope: toolset\n"
             "nats:\n"
             "  prefix: tsk\n"
             "  user: host\n"
             "  password: hostpw\n"
             "  toolsets: [public]\n",
             C.url);
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(&h, &o) == 0);
    natsConnection *nc = nats_connect(C.url, "host", "hostpw");
    CU_ASSERT_FATAL(nc != NULL);
    natsSubscription *sub = NULL;
    CU_ASSERT_FATAL(natsConnection_SubscribeSync(&sub, nc, "_INBOX.tsk.1") ==
                    NATS_OK);
    natsConnection_Flush(nc);
    th_buf b = TH_BUF_INIT;
    rpc_pack_json(&b, "{\"text\":\"x\",\"steps\":6000,\"delay_ms\":100}");
    natsConnection_PublishRequest(nc, "tsk.public.echo_async",
                                  "_INBOX.tsk.1", b.data, (int)b.len);
    th_buf_destroy(&b);
    bool acked = false, ended = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!ended && rpc_now_ms() < end) {
        natsMsg *m = NULL;
        if (natsSubscription_NextMsg(&m, sub, 200) != NATS_OK)
            continue;
        const char *k = reply_kind(m);
        if (strcmp(k, "ack") == 0 && !acked) {
            acked = true;
            kill(h.pid, SIGTERM);
        } else if (strcmp(k, "result") == 0) {
            ended = true;
            CU_ASSERT(reply_error_is(m, "cancelled"));
        }
        natsMsg_Destroy(m);
    }
    CU_ASSERT(acked);
    CU_ASSERT(ended);
    CU_ASSERT_EQUAL(rpc_srv_wait(&h), 0);
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    rpc_srv_free(&h);
}

/* Whether every thread of `pid` is stopped (SIGSTOP takes effect only
 * once the thread that takes the signal runs: under load, later). */
static bool all_threads_stopped(pid_t pid)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool all = true;
    struct dirent *e;
    while (all && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[384], buf[512] = "";
        snprintf(p, sizeof p, "%s/%s/stat", dir, e->d_name);
        FILE *f = fopen(p, "r");
        if (!f)
            continue; /* a thread that ended meanwhile */
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *q = strrchr(buf, ')');
        all = q && (q[2] == 'T' || q[2] == 't');
    }
    closedir(d);
    return all;
}

/* Toolhost-Deadline: a host frozen (SIGSTOP) while requests with a
 * deadline wait for it, resumed after the deadline, does not start them:
 * they are answered `timeout` and their tool never runs (hang_mark makes
 * a file when it starts); a later request without a deadline runs. */
static void test_deadline(void)
{
    NEED_CLUSTER();
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: info\n"
             "  shutdown_grace: 1s\n"
             "  workers: 1\n"
             "  listen: [\"%s\"]\n"
             "plugins:\n"
             "  - name: hang_mark\n"
             "    path: @BUILD@/fixtures/hang_mark.so\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [hang_mark]\n"
             "    allow_users: [nats]\n"
             "nats:\n"
             "  prefix: dl\n"
             "  user: host\n"
             "  password: hostpw\n"
             "  toolsets: [public]\n",
             C.url);
    rpc_srv h;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(&h, &o) == 0);
    char id[40];
    host_id_from_log(&h, id, sizeof id);
    CU_ASSERT_FATAL(id[0]);
    natsConnection *nc = nats_connect(C.url, "host", "hostpw");
    CU_ASSERT_FATAL(nc != NULL);
    natsSubscription *sub = NULL;
    CU_ASSERT_FATAL(natsConnection_SubscribeSync(&sub, nc, "_INBOX.dl.>") ==
                    NATS_OK);
    natsConnection_Flush(nc);
    enum { N = 5 };
    kill(h.pid, SIGSTOP);
    for (int64_t end = rpc_now_ms() + rpc_wait_ms();
         !all_threads_stopped(h.pid) && rpc_now_ms() < end;)
        usleep(2000);
    CU_ASSERT_FATAL(all_threads_stopped(h.pid));
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    int64_t deadline = (int64_t)rt.tv_sec * 1000 + rt.tv_nsec / 1000000 +
                       th_test_ms(300);
    char dls[32];
    snprintf(dls, sizeof dls, "%lld", (long long)deadline);
    for (int i = 0; i < N; i++) {
        char args[512];
        snprintf(args, sizeof args, "{\"ms\":0,\"mark\":\"%s/late%d\"}",
                 h.dir, i);
        th_buf b = TH_BUF_INIT;
        rpc_pack_json(&b, args);
        publish_nth(nc, "dl.public.hang_mark", "dl", i, &b,
                    "Toolhost-Deadline", dls);
        th_buf_destroy(&b);
    }
    natsConnection_Flush(nc);
    /* the deadline itself is the event: wait until it has passed */
    for (;;) {
        clock_gettime(CLOCK_REALTIME, &rt);
        if ((int64_t)rt.tv_sec * 1000 + rt.tv_nsec / 1000000 > deadline)
            break;
        usleep(10000);
    }
    kill(h.pid, SIGCONT);
    int timeouts = 0;
    for (int got = 0; got < N;) {
        natsMsg *m = NULL;
        if (natsSubscription_NextMsg(&m, sub, rpc_wait_ms()) != NATS_OK)
            break;
        if (strcmp(reply_kind(m), "result") == 0) {
            got++;
            timeouts += reply_error_is(m, "timeout");
        }
        natsMsg_Destroy(m);
    }
    /* a request after them, without a deadline, runs: the host works */
    char args[512];
    snprintf(args, sizeof args, "{\"ms\":0,\"mark\":\"%s/after\"}", h.dir);
    natsMsg *r = NULL;
    CU_ASSERT(request(nc, &r, "dl.public.hang_mark", args, 5000) ==
              NATS_OK);
    CU_ASSERT(r && reply_ok(r, NULL));
    natsMsg_Destroy(r);
    char p[600];
    snprintf(p, sizeof p, "%s/after", h.dir);
    CU_ASSERT(access(p, F_OK) == 0);
    int ran = 0;
    for (int i = 0; i < N; i++) {
        snprintf(p, sizeof p, "%s/late%d", h.dir, i);
        ran += access(p, F_OK) == 0;
    }
    fprintf(stderr, "\n  %d requests reached a frozen host before their "
            "deadline, resumed after it: %d answered timeout, %d ran\n",
            N, timeouts, ran);
    CU_ASSERT_EQUAL(timeouts, N);
    CU_ASSERT_EQUAL(ran, 0);
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    CU_ASSERT_EQUAL(rpc_srv_stop(&h, SIGTERM), 0);
    rpc_srv_free(&h);
}

/* A stand-in host for the CLI's messages: it answers $SRV.INFO with
 * one tool (fk.public.slow) and its own $SRV.PING, takes the request and
 * never answers it - after an ack (`acks`) or silently. */
typedef struct fake_host {
    pthread_mutex_t mu;
    bool acks;
    int64_t deadline; /* Toolhost-Deadline of the last request, or -1 */
    int64_t sent_at;  /* when it came (Unix ms) */
} fake_host;

static int64_t unix_ms(void)
{
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    return (int64_t)rt.tv_sec * 1000 + rt.tv_nsec / 1000000;
}

static void on_fake(natsConnection *nc, natsSubscription *sub, natsMsg *m,
                    void *ud)
{
    (void)sub;
    fake_host *x = ud;
    const char *subj = natsMsg_GetSubject(m), *reply = natsMsg_GetReply(m);
    if (strncmp(subj, "$SRV.INFO", 9) == 0 && reply) {
        natsConnection_PublishString(
            nc, reply,
            "{\"type\":\"io.nats.micro.v1.info_response\",\"name\":"
            "\"toolhost\",\"id\":\"fake0001\",\"endpoints\":[{\"name\":"
            "\"slow\",\"subject\":\"fk.public.slow\",\"metadata\":{"
            "\"toolset\":\"public\",\"tool\":\"slow\",\"idempotent\":"
            "\"false\",\"param_types\":\"{}\",\"async\":\"true\"}}]}");
    } else if (strncmp(subj, "$SRV.PING", 9) == 0 && reply) {
        natsConnection_PublishString(nc, reply, "{}");
    } else if (reply) {
        const char *v = NULL;
        pthread_mutex_lock(&x->mu);
        x->sent_at = unix_ms();
        x->deadline = natsMsgHeader_Get(m, "Toolhost-Deadline", &v) ==
                              NATS_OK && v
                          ? atoll(v)
                          : -1;
        bool acks = x->acks;
        pthread_mutex_unlock(&x->mu);
        if (acks) {
            natsMsg *a = NULL;
            natsMsg_Create(&a, reply, NULL, "\x80", 1);
            natsMsgHeader_Set(a, "Toolhost-Kind", "ack");
            natsMsgHeader_Set(a, "Toolhost-Host", "fake0001");
            natsConnection_PublishMsg(nc, a);
            natsMsg_Destroy(a);
        }
    }
    natsMsg_Destroy(m);
}

/* The CLI sends its deadline (now + --timeout) and says which of the two
 * happened: a host got the call and did not take it (no `took` or other
 * reply within the ack bound), or one took it and did not answer. */
static void test_cli_deadline(void)
{
    NEED_CLUSTER();
    natsConnection *nc = nats_connect(C.url, "host", "hostpw");
    CU_ASSERT_FATAL(nc != NULL);
    static fake_host x = {.mu = PTHREAD_MUTEX_INITIALIZER};
    natsSubscription *s1 = NULL, *s2 = NULL, *s3 = NULL;
    CU_ASSERT_FATAL(natsConnection_Subscribe(&s1, nc, "$SRV.INFO.toolhost",
                                             on_fake, &x) == NATS_OK);
    CU_ASSERT_FATAL(natsConnection_Subscribe(
                        &s2, nc, "$SRV.PING.toolhost.fake0001", on_fake,
                        &x) == NATS_OK);
    CU_ASSERT_FATAL(natsConnection_Subscribe(&s3, nc, "fk.public.slow",
                                             on_fake, &x) == NATS_OK);
    natsConnection_Flush(nc);
    char url[128];
    snprintf(url, sizeof url, "nats://host:hostpw@127.0.0.1:%d", C.g.port);
    for (int acks = 0; acks < 2; acks++) {
        pthread_mutex_lock(&x.mu);
        x.acks = acks;
        x.deadline = 0;
        pthread_mutex_unlock(&x.mu);
        int64_t t0 = unix_ms();
        th_test_run r = {0};
        th_test_toolhost(&r, "call", "--connect", url, "--timeout", "1s",
                         "public.slow", NULL);
        pthread_mutex_lock(&x.mu);
        int64_t dl = x.deadline, at = x.sent_at;
        pthread_mutex_unlock(&x.mu);
        fprintf(stderr, "\n  CLI, host %s: deadline now+%lld ms; %s",
                acks ? "acks" : "silent", (long long)(dl - at),
                r.err ? r.err : "");
        CU_ASSERT_EQUAL(r.status, 1);
        /* now + 1 s, as the CLI's clock saw it when it sent */
        CU_ASSERT(dl >= t0 + 1000 && dl <= at + 1000);
        /* silent: it did not take the call within the CLI's ack bound
         * (TOOLHOST_NATS_ACK_MS, 2 s by default), said then, not after the
         * timeout + 5 s */
        CU_ASSERT(r.err && strstr(r.err, acks ? "the host took the call "
                                                "but did not answer within "
                                                "6 s"
                                              : "a host took the call and "
                                                "did not acknowledge it "
                                                "within 2000 ms"));
        if (!acks) /* the CLI's own start scales (valgrind, sanitizers) */
            CU_ASSERT(unix_ms() - t0 < th_test_ms(6000));
        th_test_run_free(&r);
    }
    natsSubscription_Unsubscribe(s1);
    natsSubscription_Unsubscribe(s2);
    natsSubscription_Unsubscribe(s3);
    natsConnection_Destroy(nc);
    natsSubscription_Destroy(s1);
    natsSubscription_Destroy(s2);
    natsSubscription_Destroy(s3);
}

/* SIGTERM: the hosts stop cleanly (exit 0) with the NATS front running. */
static void test_clean_stop(void)
{
    NEED_CLUSTER();
    for (int i = 0; i < NHOSTS - 1; i++)
        CU_ASSERT_EQUAL(rpc_srv_stop(&C.h[i], SIGTERM), 0);
}

/* Config errors name file:line:col. */
static void test_config_errors(void)
{
    static const struct {
        const char *yaml, *want;
    } cases[] = {
        {"host:\n  listen: [\"nats://127.0.0.1:4222\"]\n",
         "nats.toolsets names no toolset"},
        {"host:\n  listen: [\"nats://127.0.0.1:4222\"]\nnats:\n  toolsets: "
         "[nope]\n",
         "4:14: nats.toolsets: no toolset 'nope'"},
        {"nats:\n  prefix: \"a b\"\n", "2:11: 'prefix' must be"},
        {"nats:\n  user: u\n", "'user' and 'password' go together"},
        {"nats:\n  colour: red\n", "unknown key 'colour' in nats"},
        {"host:\n  listen: [\"nats://\"]\n", "must be nats://HOST:PORT"},
        {"nats:\n  results_bucket: a.b\n",
         "2:19: 'results_bucket' must be a bucket name"},
        {"nats:\n  results_ttl: 10ms\n", "results_ttl"},
        {"nats:\n  users: [alice, \"a.b\"]\n",
         "nats.users: 'a.b' cannot be a subject token"},
    };
    char *dir = th_test_tmpdir();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = th_test_write_file(dir, "c.yaml", cases[i].yaml,
                                     (size_t)-1);
        th_test_run r = {0};
        th_test_toolhost(&r, "config", "check", p, NULL);
        bool has = r.err && strstr(r.err, cases[i].want);
        if (!has)
            fprintf(stderr, "\n  case %zu: %s\n", i, r.err ? r.err : "");
        CU_ASSERT(has);
        CU_ASSERT(r.status != 0);
        th_test_run_free(&r);
        free(p);
    }
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_nats(void)
{
    CU_pSuite s = CU_add_suite("nats", suite_init, suite_clean);
    CU_add_test(s, "config_errors", test_config_errors);
    CU_add_test(s, "spread", test_spread);
    CU_add_test(s, "output_info", test_output_info);
    CU_add_test(s, "async_progress", test_async_progress);
    CU_add_test(s, "reply_batching", test_reply_batching);
    CU_add_test(s, "user_refused", test_user_refused);
    CU_add_test(s, "discovery_js", test_discovery_js);
    CU_add_test(s, "cli", test_cli);
    CU_add_test(s, "reload", test_reload);
    CU_add_test(s, "server_restart", test_server_restart);
    CU_add_test(s, "host_killed", test_host_killed);
    CU_add_test(s, "slow_consumer", test_slow_consumer);
    CU_add_test(s, "stats_counts", test_stats_counts);
    CU_add_test(s, "drain", test_drain);
    CU_add_test(s, "sigterm_no_new_calls", test_sigterm_no_new_calls);
    CU_add_test(s, "stop_toolset_task", test_stop_toolset_task);
    CU_add_test(s, "deadline", test_deadline);
    CU_add_test(s, "cli_deadline", test_cli_deadline);
    CU_add_test(s, "clean_stop", test_clean_stop);
}
