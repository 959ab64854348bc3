/* test_nats_id.c - the caller identity on NATS (docs/scale.md "Caller
 * identity"): a nats-server with JetStream and the per-user permission
 * layout the docs give (users alice and bob, a host user, an admin for the
 * test's forgeries, mallory without host permissions), one host with
 * nats.users [alice, bob].  The server refuses bob alice's inbox and
 * subject tree and refuses mallory the queue group; the host refuses a
 * reply subject outside the caller's inbox, another caller's task, result
 * and ask, a user not in nats.users and a forged results-bucket entry;
 * task names are 128 random bits; the audit log names the caller.
 * Skipped when nats-server is not installed. */
#include "test_nats_harness.h"

#include <CUnit/CUnit.h>
#include <pthread.h>

/* The layout of docs/scale.md, prefix "id", results bucket "idb". */
static const char nats_conf[] =
    "authorization {\n"
    "  users = [\n"
    "    {user: host, password: hostpw, permissions: {\n"
    "       subscribe: {allow: [\"id.u.*.public.* toolhost\",\n"
    "                           \"id.u.*.asked.* toolhost\",\n"
    "                           \"id.u.*.tasks.result toolhost\",\n"
    "                           \"id.u.*.host.*.tasks.*\",\n"
    "                           \"id.u.*.host.*.permit.>\",\n"
    "                           \"id.u.*.host.*.answer.>\",\n"
    "                           \"id.u.*.askers.* toolhost\",\n"
    "                           \"id.u.*.host.*.call.>\",\n"
    "                           \"$SRV.>\", \"_INBOX.>\"]}\n"
    "       publish: {allow: [\"_INBOX.>\", \"$JS.API.>\", "
    "\"$KV.idb.>\"]}}}\n"
    "    {user: alice, password: alicepw, permissions: {\n"
    "       publish: {allow: [\"id.u.alice.>\", \"$SRV.>\"]}\n"
    "       subscribe: {allow: [\"_INBOX.alice.>\"]}}}\n"
    "    {user: bob, password: bobpw, permissions: {\n"
    "       publish: {allow: [\"id.u.bob.>\", \"$SRV.>\"]}\n"
    "       subscribe: {allow: [\"_INBOX.bob.>\"]}}}\n"
    "    {user: mallory, password: mallorypw, permissions: {\n"
    "       publish: {allow: [\"id.u.mallory.>\", \"$SRV.>\"]}\n"
    "       subscribe: {allow: [\"_INBOX.mallory.>\"]}}}\n"
    "    {user: admin, password: adminpw}\n"
    "  ]\n"
    "}\n";

static gnatsd G;
static rpc_srv H;
static char H_id[40];
static char G_url[64];
static char key_path[512];
static char js_dir[512];
static bool up;

static int suite_init(void)
{
    if (!nats_server_bin())
        return 0;
    gnatsd_files(&G, nats_conf);
    snprintf(js_dir, sizeof js_dir, "%s/js", G.dir);
    G.extra[0] = "-js";
    G.extra[1] = "-sd";
    G.extra[2] = js_dir;
    if (gnatsd_start(&G) != 0) {
        fprintf(stderr, "test_nats_id: nats-server did not come up\n");
        return 0;
    }
    snprintf(G_url, sizeof G_url, "nats://127.0.0.1:%d", G.port);
    char *k = nats_key_file(G.dir);
    snprintf(key_path, sizeof key_path, "%s", k);
    free(k);
    char cfg[3072];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  permission_timeout: 20s\n"
             "  audit: audit.log\n"
             "  listen: [\"%s\"]\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "  - name: conform_tools\n"
             "    path: @BUILD@/fixtures/conform_tools.so\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [echo, echo_async]\n"
             "    allow_users: [alice, bob]\n"
             "  - name: askers\n"
             "    tools: [test_elicitation, test_sampling]\n"
             "    allow_users: [alice, bob]\n"
             "  - name: asked\n"
             "    tools: [echo]\n"
             "    allow_users: [alice, bob]\n"
             "    permissions:\n"
             "      rules:\n"
             "        - match: echo\n"
             "          action: ask\n"
             "nats:\n"
             "  prefix: id\n"
             "  name: idsvc\n"
             "  toolsets: [public, asked, askers]\n"
             "  users: [alice, bob]\n"
             "  user: host\n"
             "  password: hostpw\n"
             "  results_bucket: idb\n"
             "  results_key_file: %s\n"
             "  reconnect_wait: 100ms\n",
             G_url, key_path);
    rpc_opts o = {.config = cfg};
    if (rpc_srv_start(&H, &o) != 0) {
        fprintf(stderr, "test_nats_id: the host did not start\n");
        return 0;
    }
    host_id_from_log(&H, H_id, sizeof H_id);
    up = H_id[0] && rpc_log_wait(&H, "key-value bucket idb", rpc_wait_ms());
    if (!up)
        rpc_dump_log(&H);
    return 0;
}

static int suite_clean(void)
{
    if (H.dir)
        rpc_srv_free(&H);
    if (G.dir)
        gnatsd_free(&G);
    nats_CloseAndWait(2000);
    return 0;
}

#define NEED_UP()                                                             \
    do {                                                                      \
        if (!nats_server_bin())                                               \
            TH_SKIP("nats-server is not installed");                          \
        CU_ASSERT_FATAL(up);                                                  \
    } while (0)

/* ---- A client that records the server's permission errors ---------------- */

typedef struct client {
    natsConnection *nc;
    char user[32];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int violations; /* NATS_NOT_PERMITTED reports */
    char last[256]; /* the connection's last error text */
} client;

static void on_err(natsConnection *nc, natsSubscription *sub, natsStatus st,
                   void *ud)
{
    (void)sub;
    client *c = ud;
    pthread_mutex_lock(&c->mu);
    if (st == NATS_NOT_PERMITTED) {
        c->violations++;
        const char *t = NULL;
        natsConnection_GetLastError(nc, &t);
        snprintf(c->last, sizeof c->last, "%s", t ? t : "");
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static bool client_open(client *c, const char *user, const char *pw)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    snprintf(c->user, sizeof c->user, "%s", user);
    natsOptions *o = NULL;
    natsOptions_Create(&o);
    natsOptions_SetURL(o, G_url);
    natsOptions_SetUserInfo(o, user, pw);
    natsOptions_SetTimeout(o, th_test_ms(3000));
    natsOptions_SetErrorHandler(o, on_err, c);
    char pfx[64];
    snprintf(pfx, sizeof pfx, "_INBOX.%s", user);
    natsOptions_SetCustomInboxPrefix(o, pfx);
    natsStatus st = natsConnection_Connect(&c->nc, o);
    natsOptions_Destroy(o);
    return st == NATS_OK;
}

static void client_close(client *c)
{
    natsConnection_Destroy(c->nc);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

/* Waits until the server reported a violation whose text has `needle`. */
static bool client_violation(client *c, const char *needle)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    int64_t ms = rpc_wait_ms();
    dl.tv_sec += ms / 1000;
    pthread_mutex_lock(&c->mu);
    bool seen = false;
    while (!(seen = c->violations > 0 && strstr(c->last, needle)) &&
           pthread_cond_timedwait(&c->cv, &c->mu, &dl) == 0)
        ;
    pthread_mutex_unlock(&c->mu);
    if (!seen)
        fprintf(stderr, "\n%s: no violation with '%s' (last: '%s')\n",
                c->user, needle, c->last);
    return seen;
}

/* A fresh inbox of user u: _INBOX.<u>.<unique>. */
static void inbox_of(const char *u, char *out, size_t n)
{
    natsInbox *ib = NULL;
    natsInbox_Create(&ib);
    snprintf(out, n, "_INBOX.%s.%s", u, ib + 7);
    natsInbox_Destroy(ib);
}

/* Publishes a call of `subj` (JSON args) with reply `reply`. */
static void send_call(client *c, const char *subj, const char *reply,
                      const char *json, bool ask)
{
    th_buf b = TH_BUF_INIT;
    rpc_pack_json(&b, json);
    natsMsg *m = NULL;
    natsMsg_Create(&m, subj, reply, (const char *)b.data, (int)b.len);
    if (ask)
        natsMsgHeader_Set(m, "Toolhost-Ask", "1");
    natsConnection_PublishMsg(c->nc, m);
    natsMsg_Destroy(m);
    th_buf_destroy(&b);
}

/* The next message of sub within the test's wait, or NULL. */
static natsMsg *next_msg(natsSubscription *sub)
{
    natsMsg *m = NULL;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!m && rpc_now_ms() < end)
        if (natsSubscription_NextMsg(&m, sub, 200) != NATS_OK)
            m = NULL;
    return m;
}

/* The reply's error message contains `words`. */
static bool error_says(natsMsg *m, const char *code, const char *words)
{
    json_t *j = th_json_from_msgpack((const uint8_t *)natsMsg_GetData(m),
                                     (size_t)natsMsg_GetDataLength(m), NULL);
    json_t *e = json_object_get(j, "error");
    const char *c = json_string_value(json_object_get(e, "code"));
    const char *w = json_string_value(json_object_get(e, "message"));
    bool ok = c && strcmp(c, code) == 0 && w && strstr(w, words);
    if (!ok)
        fprintf(stderr, "\nexpected %s '%s', got %s '%s'\n", code, words,
                c ? c : "(none)", w ? w : "(none)");
    json_decref(j);
    return ok;
}

static natsMsg *req(client *c, const char *subj, const char *body)
{
    natsMsg *r = NULL;
    if (natsConnection_RequestString(&r, c->nc, subj, body,
                                     th_test_ms(3000)) != NATS_OK)
        return NULL;
    return r;
}

/* An async call of alice's that runs until cancelled: its task name
 * (the part of Toolhost-Task after the host id) into tok; the inbox
 * subscription stays open in *sub. */
static void long_task(client *a, natsSubscription **sub, char *tok,
                      size_t n)
{
    char ib[128];
    inbox_of("alice", ib, sizeof ib);
    CU_ASSERT_FATAL(natsConnection_SubscribeSync(sub, a->nc, ib) ==
                    NATS_OK);
    send_call(a, "id.u.alice.public.echo_async", ib,
              "{\"text\":\"x\",\"steps\":600,\"delay_ms\":100}", false);
    tok[0] = '\0';
    for (natsMsg *m; !tok[0] && (m = next_msg(*sub));) {
        const char *t = NULL;
        if (strcmp(reply_kind(m), "ack") == 0 &&
            natsMsgHeader_Get(m, "Toolhost-Task", &t) == NATS_OK && t &&
            strncmp(t, H_id, strlen(H_id)) == 0)
            snprintf(tok, n, "%s", t + strlen(H_id) + 1);
        natsMsg_Destroy(m);
    }
    CU_ASSERT_FATAL(tok[0] != '\0');
}

/* ---- Tests ------------------------------------------------------------------- */

/* The server refuses bob alice's inbox and alice's subject tree. */
static void test_inbox_refused(void)
{
    NEED_UP();
    client b;
    CU_ASSERT_FATAL(client_open(&b, "bob", "bobpw"));
    natsSubscription *sub = NULL;
    natsConnection_SubscribeSync(&sub, b.nc, "_INBOX.alice.>");
    natsConnection_Flush(b.nc);
    CU_ASSERT(client_violation(&b, "Subscription"));
    natsSubscription_Destroy(sub);
    /* and publishing on alice's tree (a call as alice) */
    char ib[128];
    inbox_of("bob", ib, sizeof ib);
    send_call(&b, "id.u.alice.public.echo", ib, "{\"text\":\"x\"}", false);
    natsConnection_Flush(b.nc);
    CU_ASSERT(client_violation(&b, "Publish"));
    client_close(&b);
}

/* A reply subject outside the caller's inbox is not answered: alice
 * names bob's inbox; bob's first message is the answer to his own call. */
static void test_reply_forged(void)
{
    NEED_UP();
    client a, b;
    CU_ASSERT_FATAL(client_open(&a, "alice", "alicepw"));
    CU_ASSERT_FATAL(client_open(&b, "bob", "bobpw"));
    natsSubscription *sub = NULL;
    CU_ASSERT_FATAL(natsConnection_SubscribeSync(&sub, b.nc,
                                                 "_INBOX.bob.>") == NATS_OK);
    natsConnection_Flush(b.nc);
    /* forged: alice's call, bob's inbox; and the library's _INBOX. */
    send_call(&a, "id.u.alice.public.echo", "_INBOX.bob.forged",
              "{\"text\":\"forged\"}", false);
    send_call(&a, "id.u.alice.public.echo", "_INBOX.forged2",
              "{\"text\":\"forged\"}", false);
    natsConnection_Flush(a.nc); /* the server routed them before bob's */
    send_call(&b, "id.u.bob.public.echo", "_INBOX.bob.own",
              "{\"text\":\"own\"}", false);
    natsMsg *m = next_msg(sub);
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT_STRING_EQUAL(natsMsg_GetSubject(m), "_INBOX.bob.own");
    CU_ASSERT(reply_ok(m, "own"));
    natsMsg_Destroy(m);
    CU_ASSERT(rpc_log_wait(&H, "its reply subject is not under",
                           rpc_wait_ms()));
    natsSubscription_Destroy(sub);
    /* wildcards in alice's own reply subject cost nobody else: the host
     * stays connected and answers her next call */
    send_call(&a, "id.u.alice.public.echo", "_INBOX.alice.>",
              "{\"text\":\"w\"}", false);
    send_call(&a, "id.u.alice.public.echo", "_INBOX.alice.*.x",
              "{\"text\":\"w\"}", false);
    natsConnection_Flush(a.nc); /* routed before bob's, on one queue */
    natsMsg *r = NULL;
    th_buf args = TH_BUF_INIT;
    rpc_pack_json(&args, "{\"text\":\"after\"}");
    CU_ASSERT(natsConnection_Request(&r, b.nc, "id.u.bob.public.echo",
                                     args.data, (int)args.len,
                                     th_test_ms(3000)) == NATS_OK &&
              reply_ok(r, "after"));
    natsMsg_Destroy(r);
    th_buf_destroy(&args);
    CU_ASSERT(!rpc_log_has(&H, "nats: disconnected"));
    client_close(&a);
    client_close(&b);
}

/* The host's own call subject and Toolhost-Start-By under nats.users: a
 * `took` goes only to the caller's own inbox (alice naming bob's inbox on
 * her call gets bob nothing: his first message is his own call's `took`);
 * bob cannot publish on alice's call subject of the host (the server
 * refuses it); nor can he send alice a forged `took` (her inbox is not
 * his to publish on). */
static void test_took_bound(void)
{
    NEED_UP();
    client a, b;
    CU_ASSERT_FATAL(client_open(&a, "alice", "alicepw"));
    CU_ASSERT_FATAL(client_open(&b, "bob", "bobpw"));
    natsSubscription *sub = NULL;
    CU_ASSERT_FATAL(natsConnection_SubscribeSync(&sub, b.nc,
                                                 "_INBOX.bob.>") == NATS_OK);
    natsConnection_Flush(b.nc);
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    char sb[32];
    snprintf(sb, sizeof sb, "%lld",
             (long long)rt.tv_sec * 1000 + rt.tv_nsec / 1000000 + 60000);
    char subj_a[200], subj_b[200];
    snprintf(subj_a, sizeof subj_a, "id.u.alice.host.%s.call.public.echo",
             H_id);
    snprintf(subj_b, sizeof subj_b, "id.u.bob.host.%s.call.public.echo",
             H_id);
    th_buf args = TH_BUF_INIT;
    rpc_pack_json(&args, "{\"text\":\"t\"}");
    const char *who[2][3] = {{subj_a, "_INBOX.bob.forged", NULL},
                             {subj_b, "_INBOX.bob.own", NULL}};
    client *by[2] = {&a, &b};
    for (int i = 0; i < 2; i++) {
        natsMsg *m = NULL;
        natsMsg_Create(&m, who[i][0], who[i][1], (const char *)args.data,
                       (int)args.len);
        natsMsgHeader_Set(m, "Toolhost-Start-By", sb);
        natsConnection_PublishMsg(by[i]->nc, m);
        natsMsg_Destroy(m);
        natsConnection_Flush(by[i]->nc); /* alice's routed first */
    }
    static const char *const kinds[2] = {"took", "result"};
    for (int i = 0; i < 2; i++) {
        natsMsg *m = next_msg(sub);
        CU_ASSERT_FATAL(m != NULL);
        CU_ASSERT_STRING_EQUAL(natsMsg_GetSubject(m), "_INBOX.bob.own");
        CU_ASSERT_STRING_EQUAL(reply_kind(m), kinds[i]);
        const char *hv = NULL;
        CU_ASSERT(natsMsgHeader_Get(m, "Toolhost-Host", &hv) == NATS_OK &&
                  hv && strcmp(hv, H_id) == 0);
        natsMsg_Destroy(m);
    }
    /* bob on alice's call subject of the host */
    natsConnection_Publish(b.nc, subj_a, args.data, (int)args.len);
    natsConnection_Flush(b.nc);
    CU_ASSERT(client_violation(&b, "Publish"));
    client_close(&b);
    CU_ASSERT_FATAL(client_open(&b, "bob", "bobpw"));
    /* a forged `took` into alice's inbox */
    natsMsg *f = NULL;
    natsMsg_Create(&f, "_INBOX.alice.x", NULL, NULL, 0);
    natsMsgHeader_Set(f, "Toolhost-Kind", "took");
    natsConnection_PublishMsg(b.nc, f);
    natsMsg_Destroy(f);
    natsConnection_Flush(b.nc);
    CU_ASSERT(client_violation(&b, "Publish"));
    th_buf_destroy(&args);
    natsSubscription_Destroy(sub);
    client_close(&a);
    client_close(&b);
}

/* Task names are 128 random bits; bob cannot get, cancel or fetch the
 * result of alice's task; a numeric (core) id names nothing. */
static void test_task_bound(void)
{
    NEED_UP();
    client a, b;
    CU_ASSERT_FATAL(client_open(&a, "alice", "alicepw"));
    CU_ASSERT_FATAL(client_open(&b, "bob", "bobpw"));
    natsSubscription *s1 = NULL, *s2 = NULL;
    char t1[64], t2[64];
    long_task(&a, &s1, t1, sizeof t1);
    long_task(&a, &s2, t2, sizeof t2);
    CU_ASSERT_EQUAL(strlen(t1), 32u);
    CU_ASSERT(strspn(t1, "0123456789abcdef") == 32);
    CU_ASSERT(strcmp(t1, t2) != 0);
    char subj[200], key[128];
    snprintf(key, sizeof key, "%s.%s", H_id, t1);
    static const char *const ops[] = {"get", "cancel", "result"};
    for (int i = 0; i < 3; i++) {
        snprintf(subj, sizeof subj, "id.u.bob.host.%s.tasks.%s", H_id,
                 ops[i]);
        natsMsg *r = req(&b, subj, t1);
        CU_ASSERT_FATAL(r != NULL);
        CU_ASSERT(error_says(r, "permission_denied", "not yours"));
        natsMsg_Destroy(r);
    }
    natsMsg *r = req(&b, "id.u.bob.tasks.result", key);
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT(error_says(r, "permission_denied", "not yours"));
    natsMsg_Destroy(r);
    /* the core's numbers are no names: 1..3 find nothing */
    snprintf(subj, sizeof subj, "id.u.alice.host.%s.tasks.get", H_id);
    for (int i = 1; i <= 3; i++) {
        char n[16];
        snprintf(n, sizeof n, "%d", i);
        r = req(&a, subj, n);
        CU_ASSERT_FATAL(r != NULL);
        CU_ASSERT(reply_error_is(r, "not_found"));
        natsMsg_Destroy(r);
    }
    /* alice's own: still running after bob's cancel */
    r = req(&a, subj, t1);
    CU_ASSERT_FATAL(r != NULL);
    json_t *j = th_json_from_msgpack((const uint8_t *)natsMsg_GetData(r),
                                     (size_t)natsMsg_GetDataLength(r), NULL);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "state")),
                           "working");
    json_decref(j);
    natsMsg_Destroy(r);
    /* she cancels both */
    snprintf(subj, sizeof subj, "id.u.alice.host.%s.tasks.cancel", H_id);
    const char *toks[2] = {t1, t2};
    natsSubscription *subs[2] = {s1, s2};
    for (int i = 0; i < 2; i++) {
        r = req(&a, subj, toks[i]);
        CU_ASSERT(r && strcmp(reply_kind(r), "task") == 0 &&
                  reply_ok(r, NULL));
        natsMsg_Destroy(r);
        bool cancelled = false;
        for (natsMsg *m; !cancelled && (m = next_msg(subs[i]));) {
            if (strcmp(reply_kind(m), "result") == 0) {
                CU_ASSERT(reply_error_is(m, "cancelled"));
                cancelled = true;
            }
            natsMsg_Destroy(m);
        }
        CU_ASSERT(cancelled);
        natsSubscription_Destroy(subs[i]);
    }
    /* replayed after its end: still only hers (from the bucket or
     * memory), never bob's */
    r = req(&b, "id.u.bob.tasks.result", key);
    CU_ASSERT(r && reply_error_is(r, "permission_denied"));
    natsMsg_Destroy(r);
    r = req(&a, "id.u.alice.tasks.result", key);
    CU_ASSERT(r && reply_error_is(r, "cancelled"));
    natsMsg_Destroy(r);
    client_close(&a);
    client_close(&b);
}

/* Bob cannot answer the ask sent to alice: the server refuses her
 * subject, and on his own tree the host refuses him. */
static void test_ask_bound(void)
{
    NEED_UP();
    client a, b;
    CU_ASSERT_FATAL(client_open(&a, "alice", "alicepw"));
    CU_ASSERT_FATAL(client_open(&b, "bob", "bobpw"));
    char ib[128];
    inbox_of("alice", ib, sizeof ib);
    natsSubscription *sub = NULL;
    CU_ASSERT_FATAL(natsConnection_SubscribeSync(&sub, a.nc, ib) == NATS_OK);
    send_call(&a, "id.u.alice.asked.echo", ib, "{\"text\":\"asked\"}", true);
    natsMsg *m = next_msg(sub);
    CU_ASSERT_FATAL(m != NULL && strcmp(reply_kind(m), "ask") == 0);
    char to[256];
    snprintf(to, sizeof to, "%s", natsMsg_GetReply(m));
    natsMsg_Destroy(m);
    char want[160];
    snprintf(want, sizeof want, "id.u.alice.host.%s.permit.", H_id);
    CU_ASSERT(strncmp(to, want, strlen(want)) == 0);
    /* bob on alice's subject: the server refuses */
    natsConnection_PublishString(b.nc, to, "allow");
    natsConnection_Flush(b.nc);
    CU_ASSERT(client_violation(&b, "Publish"));
    /* bob on his own tree, with the nonce: the host refuses */
    char forged[256];
    snprintf(forged, sizeof forged, "id.u.bob.%s", to + strlen("id.u.alice."));
    natsMsg *r = req(&b, forged, "allow");
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT(error_says(r, "permission_denied", "another caller"));
    natsMsg_Destroy(r);
    /* alice's answer still counts */
    r = req(&a, to, "deny");
    CU_ASSERT(r && strcmp(reply_kind(r), "permit") == 0);
    natsMsg_Destroy(r);
    m = next_msg(sub);
    CU_ASSERT(m && reply_error_is(m, "permission_denied"));
    natsMsg_Destroy(m);
    natsSubscription_Destroy(sub);
    client_close(&a);
    client_close(&b);
}

/* A tool's ask_client() over NATS: a client_ask on the caller's inbox,
 * answered on the subject it names (in the caller's own tree: the server
 * refuses bob there, the host refuses his forgery in his tree); a call
 * without Toolhost-Client-Asks: the tool is told it cannot ask. */
static void test_client_ask(void)
{
    NEED_UP();
    client a, b;
    CU_ASSERT_FATAL(client_open(&a, "alice", "alicepw"));
    CU_ASSERT_FATAL(client_open(&b, "bob", "bobpw"));
    char ib[128];
    inbox_of("alice", ib, sizeof ib);
    natsSubscription *sub = NULL;
    CU_ASSERT_FATAL(natsConnection_SubscribeSync(&sub, a.nc, ib) == NATS_OK);
    th_buf args = TH_BUF_INIT;
    rpc_pack_json(&args, "{\"message\":\"Name?\"}");
    natsMsg *q = NULL;
    natsMsg_Create(&q, "id.u.alice.askers.test_elicitation", ib,
                   (const char *)args.data, (int)args.len);
    natsMsgHeader_Set(q, "Toolhost-Client-Asks", "form");
    natsConnection_PublishMsg(a.nc, q);
    natsMsg_Destroy(q);
    natsMsg *m = next_msg(sub);
    CU_ASSERT_FATAL(m != NULL && strcmp(reply_kind(m), "client_ask") == 0);
    const char *k = NULL;
    CU_ASSERT(natsMsgHeader_Get(m, "Toolhost-Ask-Kind", &k) == NATS_OK && k &&
              strcmp(k, "form") == 0);
    json_t *body = th_json_from_msgpack((const uint8_t *)natsMsg_GetData(m),
                                        (size_t)natsMsg_GetDataLength(m),
                                        NULL);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(body,
                                                             "message")),
                           "Name?");
    CU_ASSERT(json_is_object(json_object_get(body, "requestedSchema")));
    json_decref(body);
    char to[256];
    snprintf(to, sizeof to, "%s", natsMsg_GetReply(m));
    natsMsg_Destroy(m);
    char want[160];
    snprintf(want, sizeof want, "id.u.alice.host.%s.answer.", H_id);
    CU_ASSERT(strncmp(to, want, strlen(want)) == 0);
    th_buf ans = TH_BUF_INIT;
    rpc_pack_json(&ans, "{\"action\":\"accept\",\"content\":"
                        "{\"username\":\"ada\"}}");
    /* bob on alice's subject: the server refuses */
    natsConnection_Publish(b.nc, to, ans.data, (int)ans.len);
    natsConnection_Flush(b.nc);
    CU_ASSERT(client_violation(&b, "Publish"));
    /* bob on his own tree, with the nonce: the host refuses */
    char forged[256];
    snprintf(forged, sizeof forged, "id.u.bob.%s", to + strlen("id.u.alice."));
    natsMsg *r = NULL;
    CU_ASSERT_FATAL(natsConnection_Request(&r, b.nc, forged, ans.data,
                                           (int)ans.len,
                                           th_test_ms(3000)) == NATS_OK);
    CU_ASSERT(error_says(r, "permission_denied", "another caller"));
    natsMsg_Destroy(r);
    /* alice's answer reaches the tool */
    r = NULL;
    CU_ASSERT_FATAL(natsConnection_Request(&r, a.nc, to, ans.data,
                                           (int)ans.len,
                                           th_test_ms(3000)) == NATS_OK);
    CU_ASSERT(strcmp(reply_kind(r), "answer") == 0);
    natsMsg_Destroy(r);
    m = next_msg(sub);
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT(strcmp(reply_kind(m), "result") == 0 &&
              reply_ok(m, NULL) &&
              memmem(natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m),
                     "\"username\":\"ada\"", 16) != NULL);
    natsMsg_Destroy(m);
    /* answered already: the same answer again finds no tool */
    r = NULL;
    CU_ASSERT_FATAL(natsConnection_Request(&r, a.nc, to, ans.data,
                                           (int)ans.len,
                                           th_test_ms(3000)) == NATS_OK);
    CU_ASSERT(error_says(r, "not_found", "no tool waits"));
    natsMsg_Destroy(r);
    /* without Toolhost-Client-Asks: the tool cannot ask */
    send_call(&a, "id.u.alice.askers.test_sampling", ib,
              "{\"prompt\":\"p\"}", false);
    m = next_msg(sub);
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT(strcmp(reply_kind(m), "result") == 0 && !reply_ok(m, NULL) &&
              memmem(natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m),
                     "cannot answer sampling", 22) != NULL);
    natsMsg_Destroy(m);
    th_buf_destroy(&args);
    th_buf_destroy(&ans);
    natsSubscription_Destroy(sub);
    client_close(&a);
    client_close(&b);
}

/* Entries of the results bucket that a host with the key did not write
 * (written here by the admin, who may publish anywhere) are refused. */
static void test_forged_result(void)
{
    NEED_UP();
    client a, adm;
    CU_ASSERT_FATAL(client_open(&a, "alice", "alicepw"));
    CU_ASSERT_FATAL(client_open(&adm, "admin", "adminpw"));
    /* a genuine entry: alice's finished task */
    natsSubscription *sub = NULL;
    char tok[64];
    long_task(&a, &sub, tok, sizeof tok);
    char subj[200], key[128];
    snprintf(subj, sizeof subj, "id.u.alice.host.%s.tasks.cancel", H_id);
    natsMsg *r = req(&a, subj, tok);
    natsMsg_Destroy(r);
    for (natsMsg *m; (m = next_msg(sub));) {
        bool end = strcmp(reply_kind(m), "result") == 0;
        natsMsg_Destroy(m);
        if (end)
            break;
    }
    natsSubscription_Destroy(sub);
    snprintf(key, sizeof key, "%s.%s", H_id, tok);
    jsCtx *js = NULL;
    kvStore *kv = NULL;
    CU_ASSERT_FATAL(natsConnection_JetStream(&js, adm.nc, NULL) == NATS_OK);
    CU_ASSERT_FATAL(js_KeyValue(&kv, js, "idb") == NATS_OK);
    kvEntry *e = NULL;
    CU_ASSERT_FATAL(kvStore_Get(&e, kv, key) == NATS_OK);
    /* 1. the genuine entry copied under another name (another host's) */
    char k1[128], k2[128], k3[128];
    snprintf(k1, sizeof k1, "0000000000000001.%s", tok);
    CU_ASSERT(kvStore_Put(NULL, kv, k1, kvEntry_Value(e),
                          kvEntry_ValueLen(e)) == NATS_OK);
    /* 2. a bare result, as the bucket held before entries were signed */
    th_buf ok = TH_BUF_INIT;
    rpc_pack_json(&ok, "{\"ok\":true,\"stdout\":\"forged\"}");
    snprintf(k2, sizeof k2, "0000000000000002.%s", tok);
    CU_ASSERT(kvStore_Put(NULL, kv, k2, ok.data, (int)ok.len) == NATS_OK);
    /* 3. the genuine layout with a MAC of another key: the genuine entry
     * with its first byte flipped */
    uint8_t *v = malloc((size_t)kvEntry_ValueLen(e));
    memcpy(v, kvEntry_Value(e), (size_t)kvEntry_ValueLen(e));
    v[0] ^= 1;
    snprintf(k3, sizeof k3, "%s.%s", H_id,
             "ffffffffffffffffffffffffffffffff");
    CU_ASSERT(kvStore_Put(NULL, kv, k3, v, kvEntry_ValueLen(e)) == NATS_OK);
    free(v);
    kvEntry_Destroy(e);
    th_buf_destroy(&ok);
    const char *keys[3] = {k1, k2, k3};
    for (int i = 0; i < 3; i++) {
        r = req(&a, "id.u.alice.tasks.result", keys[i]);
        CU_ASSERT_FATAL(r != NULL);
        CU_ASSERT(error_says(r, "permission_denied", "not written by a host"));
        natsMsg_Destroy(r);
    }
    CU_ASSERT(rpc_log_wait(&H, "fails its check", rpc_wait_ms()));
    /* the genuine one still answers its caller */
    r = req(&a, "id.u.alice.tasks.result", key);
    CU_ASSERT(r && reply_error_is(r, "cancelled"));
    natsMsg_Destroy(r);
    kvStore_Destroy(kv);
    jsCtx_Destroy(js);
    client_close(&a);
    client_close(&adm);
}

/* mallory, without the hosts' permissions, cannot join the queue group
 * of a tool (nor read the tool subjects at all). */
static void test_impostor_queue(void)
{
    NEED_UP();
    client m;
    CU_ASSERT_FATAL(client_open(&m, "mallory", "mallorypw"));
    natsSubscription *sub = NULL;
    natsConnection_QueueSubscribeSync(&sub, m.nc, "id.u.*.public.echo",
                                      "toolhost");
    natsConnection_Flush(m.nc);
    CU_ASSERT(client_violation(&m, "Subscription"));
    natsSubscription_Destroy(sub);
    client_close(&m);
}

/* A user the host does not know (an admin on mallory's tree: mallory is
 * not in nats.users) is refused; the subjects without a user are not
 * served at all. */
static void test_unknown_user(void)
{
    NEED_UP();
    client adm;
    CU_ASSERT_FATAL(client_open(&adm, "admin", "adminpw"));
    char ib[128];
    inbox_of("mallory", ib, sizeof ib);
    natsSubscription *sub = NULL;
    CU_ASSERT_FATAL(natsConnection_SubscribeSync(&sub, adm.nc, ib) ==
                    NATS_OK);
    send_call(&adm, "id.u.mallory.public.echo", ib, "{\"text\":\"x\"}",
              false);
    natsMsg *m = next_msg(sub);
    CU_ASSERT(m && error_says(m, "permission_denied", "not in nats.users"));
    natsMsg_Destroy(m);
    natsSubscription_Destroy(sub);
    natsMsg *r = NULL;
    CU_ASSERT_EQUAL(natsConnection_RequestString(&r, adm.nc,
                                                 "id.public.echo", "",
                                                 th_test_ms(3000)),
                    NATS_NO_RESPONDERS);
    natsMsg_Destroy(r);
    client_close(&adm);
}

/* alice's principal reaches the audit log (and bob's his). */
static void test_audit_principal(void)
{
    NEED_UP();
    client a, b;
    CU_ASSERT_FATAL(client_open(&a, "alice", "alicepw"));
    CU_ASSERT_FATAL(client_open(&b, "bob", "bobpw"));
    th_buf args = TH_BUF_INIT;
    rpc_pack_json(&args, "{\"text\":\"audited-a\"}");
    natsMsg *r = NULL;
    CU_ASSERT(natsConnection_Request(&r, a.nc, "id.u.alice.public.echo",
                                     args.data, (int)args.len,
                                     th_test_ms(3000)) == NATS_OK &&
              reply_ok(r, "audited-a"));
    natsMsg_Destroy(r);
    r = NULL;
    th_buf_reset(&args);
    rpc_pack_json(&args, "{\"text\":\"audited-b\"}");
    CU_ASSERT(natsConnection_Request(&r, b.nc, "id.u.bob.public.echo",
                                     args.data, (int)args.len,
                                     th_test_ms(3000)) == NATS_OK &&
              reply_ok(r, "audited-b"));
    natsMsg_Destroy(r);
    th_buf_destroy(&args);
    char path[600];
    snprintf(path, sizeof path, "%s/audit.log", H.dir);
    int seen_a = 0, seen_b = 0;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!(seen_a && seen_b) && rpc_now_ms() < end) {
        FILE *f = fopen(path, "r");
        char line[4096];
        seen_a = seen_b = 0;
        while (f && fgets(line, sizeof line, f)) {
            json_t *j = json_loads(line, 0, NULL);
            const char *u = json_string_value(
                json_object_get(json_object_get(j, "principal"), "user"));
            const char *fr = json_string_value(json_object_get(j, "front"));
            const char *tool = json_string_value(json_object_get(j, "tool"));
            if (u && fr && tool && strcmp(fr, "nats") == 0 &&
                strcmp(tool, "echo") == 0) {
                seen_a += strcmp(u, "alice") == 0;
                seen_b += strcmp(u, "bob") == 0;
            }
            json_decref(j);
        }
        if (f)
            fclose(f);
        if (!(seen_a && seen_b))
            usleep(20000);
    }
    CU_ASSERT(seen_a >= 1);
    CU_ASSERT(seen_b >= 1);
    client_close(&a);
    client_close(&b);
}

/* `toolhost call --connect nats://alice:…@…` calls as alice: her subject
 * tree and her inbox. */
static void test_cli_user(void)
{
    NEED_UP();
    char url[128];
    snprintf(url, sizeof url, "nats://alice:alicepw@127.0.0.1:%d", G.port);
    th_test_run r = {0};
    char *argv[] = {(char *)rpc_server_bin(), "call", "--connect", url,
                    "public.echo", "text=from-cli", NULL};
    setenv("TOOLHOST_NATS_SERVICE", "idsvc", 1);
    th_test_run_argv(argv, NULL, 20, 0, &r);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT(r.out && strstr(r.out, "from-cli"));
    if (r.status != 0)
        fprintf(stderr, "\ncli: %s\n", r.err ? r.err : "");
    th_test_run_free(&r);
    /* without a user it says what is missing */
    char *argv2[] = {(char *)rpc_server_bin(), "call", "--connect", G_url,
                     "public.echo", "text=x", NULL};
    memset(&r, 0, sizeof r);
    setenv("TOOLHOST_NATS_USER", "admin", 1);
    setenv("TOOLHOST_NATS_PASSWORD", "adminpw", 1);
    th_test_run_argv(argv2, NULL, 20, 0, &r);
    unsetenv("TOOLHOST_NATS_USER");
    unsetenv("TOOLHOST_NATS_PASSWORD");
    unsetenv("TOOLHOST_NATS_SERVICE");
    /* admin is not in nats.users: refused by the host */
    CU_ASSERT(r.status != 0);
    CU_ASSERT(r.err && strstr(r.err, "not in nats.users"));
    if (!(r.err && strstr(r.err, "not in nats.users")))
        fprintf(stderr, "\ncli as admin: out '%s' err '%s'\n",
                r.out ? r.out : "", r.err ? r.err : "");
    th_test_run_free(&r);
}

/* nats.results_key_file must be the owner's alone and long enough: else
 * serve stops at start and says why. */
static void test_key_file_checked(void)
{
    NEED_UP();
    char *k = th_test_write_file(G.dir, "open.key",
                                 "0123456789abcdef0123456789abcdef",
                                 (size_t)-1);
    chmod(k, 0644);
    char *s = th_test_write_file(G.dir, "short.key", "short", (size_t)-1);
    chmod(s, 0600);
    const char *keys[2] = {k, s};
    const char *says[2] = {"only its owner may read", "32 to 255 bytes"};
    for (int i = 0; i < 2; i++) {
        char cfg[1024];
        snprintf(cfg, sizeof cfg,
                 "host:\n  listen: [\"%s\"]\n"
                 "plugins:\n  - name: echo\n    path: %s/plugins/echo.so\n"
                 "toolsets:\n  - name: public\n    tools: [echo]\n"
                 "    allow_users: [alice]\n"
                 "nats:\n  toolsets: [public]\n  users: [alice]\n"
                 "  user: host\n  password: hostpw\n"
                 "  results_key_file: %s\n",
                 G_url, TH_BUILD_DIR, keys[i]);
        char *path = th_test_write_file(G.dir, "bad-key.yaml", cfg,
                                        (size_t)-1);
        th_test_run r = {0};
        char sock[600];
        snprintf(sock, sizeof sock, "unix:%s/bad-key.sock", G.dir);
        th_test_toolhost(&r, "serve", "-c", path, "--listen", sock, NULL);
        CU_ASSERT_EQUAL(r.status, 2);
        CU_ASSERT(r.err && strstr(r.err, says[i]));
        if (!(r.err && strstr(r.err, says[i])))
            fprintf(stderr, "\nserve with key %d: %s\n", i,
                    r.err ? r.err : "");
        th_test_run_free(&r);
        free(path);
    }
    free(k);
    free(s);
}

void th_suite_nats_id(void)
{
    CU_pSuite s = CU_add_suite("nats_id", suite_init, suite_clean);
    CU_add_test(s, "inbox_refused", test_inbox_refused);
    CU_add_test(s, "reply_forged", test_reply_forged);
    CU_add_test(s, "took_bound", test_took_bound);
    CU_add_test(s, "task_bound", test_task_bound);
    CU_add_test(s, "ask_bound", test_ask_bound);
    CU_add_test(s, "client_ask", test_client_ask);
    CU_add_test(s, "forged_result", test_forged_result);
    CU_add_test(s, "impostor_queue", test_impostor_queue);
    CU_add_test(s, "unknown_user", test_unknown_user);
    CU_add_test(s, "audit_principal", test_audit_principal);
    CU_add_test(s, "cli_user", test_cli_user);
    CU_add_test(s, "key_file_checked", test_key_file_checked);
}
