/* test_nats_content.c - resources, prompts and completion over NATS
 * (docs/scale.md, "Resources, prompts and completion"): a nats-server with
 * the per-user permission layout (users alice, bob, mallory), one host with
 * nats.users [alice, bob] serving the conformance fixture
 * (tests/fixtures/conform_tools.c) and big_resource on
 * <prefix>.u.<user>.<toolset>.<method>.  Lists, reads of fixed URIs and of
 * a template, prompts, completion, what a caller sees of a toolset whose
 * plugins it may not use (nothing: empty lists, not_found), hostile bodies
 * (not msgpack, not an array, trailing bytes, a huge URI, wrong types), a
 * reply subject that is not the caller's, a user not in nats.users; and,
 * on a second server with a small max_payload, answers too big for a
 * message refused with a log line while the host serves on.  Skipped when
 * nats-server is not installed. */
#include "test_nats_harness.h"

#include <CUnit/CUnit.h>

static const char nats_conf[] =
    "authorization {\n"
    "  users = [\n"
    "    {user: host, password: hostpw, permissions: {\n"
    "       subscribe: {allow: [\"nc.u.*.docs.* toolhost\",\n"
    "                           \"nc.u.*.docs.*.* toolhost\",\n"
    "                           \"nc.u.*.other.*.* toolhost\",\n"
    "                           \"nc.u.*.other.* toolhost\",\n"
    "                           \"nc.u.*.big.*.* toolhost\",\n"
    "                           \"nc.u.*.big.* toolhost\",\n"
    "                           \"nc.u.*.tasks.result toolhost\",\n"
    "                           \"nc.u.*.host.>\",\n"
    "                           \"$SRV.>\", \"_INBOX.>\"]}\n"
    "       publish: {allow: [\"_INBOX.>\", \"$JS.API.>\"]}}}\n"
    "    {user: alice, password: alicepw, permissions: {\n"
    "       publish: {allow: [\"nc.u.alice.>\", \"$SRV.>\"]}\n"
    "       subscribe: {allow: [\"_INBOX.alice.>\"]}}}\n"
    "    {user: bob, password: bobpw, permissions: {\n"
    "       publish: {allow: [\"nc.u.bob.>\", \"$SRV.>\"]}\n"
    "       subscribe: {allow: [\"_INBOX.bob.>\"]}}}\n"
    "    {user: mallory, password: mallorypw, permissions: {\n"
    "       publish: {allow: [\"nc.u.mallory.>\", \"$SRV.>\"]}\n"
    "       subscribe: {allow: [\"_INBOX.mallory.>\"]}}}\n"
    "  ]\n"
    "}\n";

static gnatsd G;
static rpc_srv H;
static char H_id[40];
static char G_url[64];
static bool up;

static int suite_init(void)
{
    if (!nats_server_bin())
        return 0;
    gnatsd_files(&G, nats_conf);
    if (gnatsd_start(&G) != 0) {
        fprintf(stderr, "test_nats_content: nats-server did not come up\n");
        return 0;
    }
    snprintf(G_url, sizeof G_url, "nats://127.0.0.1:%d", G.port);
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  listen: [\"%s\"]\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "  - name: conform_tools\n"
             "    path: @BUILD@/fixtures/conform_tools.so\n"
             "  - name: big_resource\n"
             "    path: @BUILD@/fixtures/big_resource.so\n"
             "toolsets:\n"
             "  - name: docs\n"
             "    tools: [test_simple_text]\n"
             "    allow_users: [alice, bob]\n"
             "  - name: other\n"
             "    tools: [echo]\n"
             "    allow_users: [alice, bob]\n"
             "  - name: big\n"
             "    tools: [size_ping]\n"
             "    allow_users: [alice]\n"
             "nats:\n"
             "  prefix: nc\n"
             "  name: ncsvc\n"
             "  toolsets: [docs, other, big]\n"
             "  users: [alice, bob]\n"
             "  user: host\n"
             "  password: hostpw\n"
             "  results_bucket: off\n"
             "  reconnect_wait: 100ms\n",
             G_url);
    rpc_opts o = {.config = cfg};
    if (rpc_srv_start(&H, &o) != 0) {
        fprintf(stderr, "test_nats_content: the host did not start\n");
        return 0;
    }
    host_id_from_log(&H, H_id, sizeof H_id);
    up = H_id[0] != '\0';
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

/* A client of `url` as `user` with its inbox under _INBOX.<user>. */
static natsConnection *client(const char *url, const char *user,
                              const char *pw)
{
    natsOptions *o = NULL;
    natsConnection *nc = NULL;
    natsOptions_Create(&o);
    natsOptions_SetURL(o, url);
    if (user) {
        natsOptions_SetUserInfo(o, user, pw);
        char pfx[64];
        snprintf(pfx, sizeof pfx, "_INBOX.%s", user);
        natsOptions_SetCustomInboxPrefix(o, pfx);
    }
    natsOptions_SetTimeout(o, th_test_ms(3000));
    natsStatus st = natsConnection_Connect(&nc, o);
    natsOptions_Destroy(o);
    return st == NATS_OK ? nc : NULL;
}

/* One reply, unpacked. */
typedef struct answer {
    natsMsg *m;
    msgpack_unpacked u;
    const msgpack_object *res; /* the body, or NULL */
    char kind[32];             /* Toolhost-Kind */
} answer;

static void answer_free(answer *a)
{
    msgpack_unpacked_destroy(&a->u);
    natsMsg_Destroy(a->m);
    memset(a, 0, sizeof *a);
}

/* A request on `subj` with `body` of `len` bytes (raw); 0 and *a filled
 * when a reply came. */
static int ask_raw(natsConnection *nc, const char *subj, const void *body,
                   size_t len, answer *a)
{
    memset(a, 0, sizeof *a);
    msgpack_unpacked_init(&a->u);
    if (natsConnection_Request(&a->m, nc, subj, body, (int)len,
                               th_test_ms(3000)) != NATS_OK)
        return -1;
    snprintf(a->kind, sizeof a->kind, "%s", reply_kind(a->m));
    if (msgpack_unpack_next(&a->u, natsMsg_GetData(a->m),
                            (size_t)natsMsg_GetDataLength(a->m), NULL) ==
        MSGPACK_UNPACK_SUCCESS)
        a->res = &a->u.data;
    return 0;
}

/* `method` of `toolset` as `user` (its subject tree), params as JSON
 * packed to msgpack (NULL: an empty body). */
static int ask(natsConnection *nc, const char *user, const char *toolset,
               const char *method, const char *json, answer *a)
{
    char subj[256];
    snprintf(subj, sizeof subj, "nc.u.%s.%s.%s", user, toolset, method);
    th_buf b = TH_BUF_INIT;
    if (json)
        rpc_pack_json(&b, json);
    int rc = ask_raw(nc, subj, b.data, b.len, a);
    th_buf_destroy(&b);
    return rc;
}

static bool is_content(const answer *a)
{
    return a->res && strcmp(a->kind, "content") == 0;
}

static bool is_str(const msgpack_object *o, const char *s)
{
    return o && th_rpc_obj_streq(o, s);
}

static bool str_has(const msgpack_object *o, const char *needle)
{
    const char *p;
    size_t n;
    return o && th_rpc_obj_str(o, &p, &n) &&
           memmem(p, n, needle, strlen(needle)) != NULL;
}

/* The reply is {ok: false, error: {code, message}} with Toolhost-Kind:
 * result, and message contains `says` (NULL: anything). */
static bool is_error(const answer *a, const char *code, const char *says)
{
    const msgpack_object *e = th_rpc_map_get(a->res, "error");
    bool ok = a->res && strcmp(a->kind, "result") == 0 &&
              rpc_tool_error_is(a->res, code) &&
              (!says || str_has(th_rpc_map_get(e, "message"), says));
    if (!ok) {
        const char *p = "";
        size_t n = 0;
        th_rpc_obj_str(th_rpc_map_get(e, "message"), &p, &n);
        fprintf(stderr, "\nwanted %s '%s', got kind %s: %.*s\n", code,
                says ? says : "", a->kind, (int)n, p);
    }
    return ok;
}

static const msgpack_object *find_by(const msgpack_object *list,
                                     const char *key, const char *val)
{
    if (!list || list->type != MSGPACK_OBJECT_ARRAY)
        return NULL;
    for (uint32_t i = 0; i < list->via.array.size; i++)
        if (is_str(th_rpc_map_get(&list->via.array.ptr[i], key), val))
            return &list->via.array.ptr[i];
    return NULL;
}

static bool empty_list(const answer *a)
{
    return is_content(a) && a->res->type == MSGPACK_OBJECT_ARRAY &&
           a->res->via.array.size == 0;
}

/* The first block of {contents: [...]} of a read. */
static const msgpack_object *first_block(const answer *a)
{
    const msgpack_object *ct = th_rpc_map_get(a->res, "contents");
    return ct && ct->type == MSGPACK_OBJECT_ARRAY && ct->via.array.size >= 1
               ? &ct->via.array.ptr[0]
               : NULL;
}

static void test_lists(void)
{
    NEED_UP();
    natsConnection *nc = client(G_url, "alice", "alicepw");
    CU_ASSERT_FATAL(nc != NULL);
    answer a;
    CU_ASSERT_FATAL(ask(nc, "alice", "docs", "resources.list", NULL, &a) ==
                    0);
    CU_ASSERT(is_content(&a) && a.res->type == MSGPACK_OBJECT_ARRAY);
    const msgpack_object *e = find_by(a.res, "uri", "test://static-text");
    CU_ASSERT(e && is_str(th_rpc_map_get(e, "name"), "static-text") &&
              is_str(th_rpc_map_get(e, "mime_type"), "text/plain"));
    CU_ASSERT(find_by(a.res, "uri", "test://static-binary") != NULL);
    /* docs has no tool of big_resource: its template is not offered */
    answer_free(&a);
    CU_ASSERT_FATAL(ask(nc, "alice", "docs", "resources.templates", "[]",
                        &a) == 0);
    CU_ASSERT(is_content(&a) &&
              find_by(a.res, "uri_template", "test://template/{id}/data") &&
              !find_by(a.res, "uri_template", "size://{n}"));
    answer_free(&a);
    CU_ASSERT_FATAL(ask(nc, "alice", "docs", "prompts.list", NULL, &a) == 0);
    CU_ASSERT(is_content(&a) && a.res->type == MSGPACK_OBJECT_ARRAY &&
              a.res->via.array.size == 4);
    const msgpack_object *p =
        find_by(a.res, "name", "test_prompt_with_arguments");
    const msgpack_object *args = th_rpc_map_get(p, "arguments");
    CU_ASSERT(args && args->type == MSGPACK_OBJECT_ARRAY &&
              args->via.array.size == 2);
    answer_free(&a);
    /* the other toolset of alice's: big_resource's template only */
    CU_ASSERT_FATAL(ask(nc, "alice", "big", "resources.templates", NULL,
                        &a) == 0);
    CU_ASSERT(is_content(&a) && a.res->via.array.size == 1 &&
              find_by(a.res, "uri_template", "size://{n}"));
    answer_free(&a);
    natsConnection_Destroy(nc);
}

static void test_read(void)
{
    NEED_UP();
    natsConnection *nc = client(G_url, "alice", "alicepw");
    CU_ASSERT_FATAL(nc != NULL);
    answer a;
    CU_ASSERT_FATAL(ask(nc, "alice", "docs", "resources.read",
                        "[\"test://static-text\"]", &a) == 0);
    const msgpack_object *b = first_block(&a);
    CU_ASSERT(is_content(&a) && b &&
              is_str(th_rpc_map_get(b, "type"), "text") &&
              is_str(th_rpc_map_get(b, "text"), "This is the content of the "
                                                "static text resource.") &&
              is_str(th_rpc_map_get(b, "uri"), "test://static-text"));
    answer_free(&a);
    /* bytes travel as msgpack bin */
    CU_ASSERT_FATAL(ask(nc, "alice", "docs", "resources.read",
                        "[\"test://static-binary\"]", &a) == 0);
    b = first_block(&a);
    const msgpack_object *d = th_rpc_map_get(b, "data");
    CU_ASSERT(is_content(&a) && d && d->type == MSGPACK_OBJECT_BIN &&
              d->via.bin.size > 8 &&
              memcmp(d->via.bin.ptr, "\x89PNG", 4) == 0);
    answer_free(&a);
    /* a template */
    CU_ASSERT_FATAL(ask(nc, "alice", "docs", "resources.read",
                        "[\"test://template/42/data\"]", &a) == 0);
    b = first_block(&a);
    CU_ASSERT(is_content(&a) &&
              str_has(th_rpc_map_get(b, "text"), "Data for ID: 42") &&
              is_str(th_rpc_map_get(b, "mime_type"), "application/json"));
    answer_free(&a);
    /* not found; the plugin's own refusal with its reason */
    CU_ASSERT_FATAL(ask(nc, "alice", "docs", "resources.read",
                        "[\"test://nothing\"]", &a) == 0);
    CU_ASSERT(is_error(&a, "not_found", "not found"));
    answer_free(&a);
    char big[256];
    snprintf(big, sizeof big, "[\"test://template/%070d/data\"]", 7);
    CU_ASSERT_FATAL(ask(nc, "alice", "docs", "resources.read", big, &a) ==
                    0);
    CU_ASSERT(is_error(&a, "tool_failed", "an id of at most 64 characters"));
    answer_free(&a);
    natsConnection_Destroy(nc);
}

static void test_prompts(void)
{
    NEED_UP();
    natsConnection *nc = client(G_url, "bob", "bobpw");
    CU_ASSERT_FATAL(nc != NULL);
    answer a;
    CU_ASSERT_FATAL(ask(nc, "bob", "docs", "prompts.get",
                        "[\"test_prompt_with_arguments\", {\"arg1\": "
                        "\"alpha\", \"arg2\": \"beta\"}]",
                        &a) == 0);
    const msgpack_object *ms = th_rpc_map_get(a.res, "messages");
    CU_ASSERT_FATAL(is_content(&a) && ms &&
                    ms->type == MSGPACK_OBJECT_ARRAY &&
                    ms->via.array.size == 1);
    const msgpack_object *m0 = &ms->via.array.ptr[0];
    const msgpack_object *c = th_rpc_map_get(m0, "content");
    CU_ASSERT(is_str(th_rpc_map_get(m0, "role"), "user") &&
              is_str(th_rpc_map_get(c, "type"), "text") &&
              str_has(th_rpc_map_get(c, "text"), "alpha") &&
              str_has(th_rpc_map_get(c, "text"), "beta"));
    CU_ASSERT(is_str(th_rpc_map_get(a.res, "description"),
                     "A prompt with two required arguments."));
    answer_free(&a);
    /* a required argument missing: invalid_arguments naming it */
    CU_ASSERT_FATAL(ask(nc, "bob", "docs", "prompts.get",
                        "[\"test_prompt_with_arguments\", {\"arg1\": "
                        "\"alpha\"}]",
                        &a) == 0);
    CU_ASSERT(is_error(&a, "invalid_arguments", "arg2"));
    answer_free(&a);
    CU_ASSERT_FATAL(ask(nc, "bob", "docs", "prompts.get", "[\"no_such\"]",
                        &a) == 0);
    CU_ASSERT(is_error(&a, "not_found", NULL));
    answer_free(&a);
    natsConnection_Destroy(nc);
}

/* The values of a completion joined with ','. */
static bool values(const answer *a, char *out, size_t n)
{
    const msgpack_object *v = th_rpc_map_get(a->res, "values");
    if (!is_content(a) || !v || v->type != MSGPACK_OBJECT_ARRAY)
        return false;
    out[0] = '\0';
    for (uint32_t i = 0; i < v->via.array.size; i++) {
        const char *p;
        size_t l;
        if (!th_rpc_obj_str(&v->via.array.ptr[i], &p, &l))
            return false;
        size_t have = strlen(out);
        snprintf(out + have, n - have, "%s%.*s", i ? "," : "", (int)l, p);
    }
    return true;
}

static void test_complete(void)
{
    NEED_UP();
    natsConnection *nc = client(G_url, "alice", "alicepw");
    CU_ASSERT_FATAL(nc != NULL);
    answer a;
    char got[256];
    CU_ASSERT_FATAL(ask(nc, "alice", "docs", "completion.complete",
                        "[{\"ref\": {\"type\": \"prompt\", \"name\": "
                        "\"test_prompt_with_arguments\"}, \"argument\": "
                        "{\"name\": \"arg1\", \"value\": \"par\"}}]",
                        &a) == 0);
    CU_ASSERT(values(&a, got, sizeof got) &&
              strcmp(got, "paris,park,party") == 0);
    answer_free(&a);
    CU_ASSERT_FATAL(ask(nc, "alice", "docs", "completion.complete",
                        "[{\"ref\": {\"type\": \"resource\", \"uri\": "
                        "\"test://template/{id}/data\"}, \"argument\": "
                        "{\"name\": \"id\", \"value\": \"12\"}}]",
                        &a) == 0);
    CU_ASSERT(values(&a, got, sizeof got) && strcmp(got, "123,124") == 0);
    answer_free(&a);
    natsConnection_Destroy(nc);
}

/* What a caller sees of a toolset that does not offer a plugin (other:
 * echo only), and of one it may not use (bob in big): nothing. */
static void test_acl(void)
{
    NEED_UP();
    natsConnection *nc = client(G_url, "alice", "alicepw");
    natsConnection *nb = client(G_url, "bob", "bobpw");
    CU_ASSERT_FATAL(nc != NULL && nb != NULL);
    static const char *const lists[] = {"resources.list",
                                        "resources.templates",
                                        "prompts.list"};
    answer a;
    for (size_t i = 0; i < 3; i++) {
        CU_ASSERT(ask(nc, "alice", "other", lists[i], NULL, &a) == 0 &&
                  empty_list(&a));
        answer_free(&a);
        CU_ASSERT(ask(nb, "bob", "big", lists[i], NULL, &a) == 0 &&
                  empty_list(&a));
        answer_free(&a);
    }
    static const struct {
        const char *user, *toolset, *method, *params;
    } hidden[] = {
        {"alice", "other", "resources.read", "[\"test://static-text\"]"},
        {"alice", "other", "resources.read", "[\"test://template/1/data\"]"},
        {"alice", "other", "prompts.get", "[\"test_simple_prompt\"]"},
        {"alice", "other", "completion.complete",
         "[{\"ref\": {\"type\": \"prompt\", \"name\": "
         "\"test_prompt_with_arguments\"}, \"argument\": {\"name\": "
         "\"arg1\", \"value\": \"p\"}}]"},
        {"alice", "docs", "resources.read", "[\"size://10\"]"},
        {"bob", "big", "resources.read", "[\"size://10\"]"},
        {"bob", "docs", "resources.read", "[\"size://10\"]"},
    };
    for (size_t i = 0; i < sizeof hidden / sizeof *hidden; i++) {
        natsConnection *c = hidden[i].user[0] == 'a' ? nc : nb;
        CU_ASSERT(ask(c, hidden[i].user, hidden[i].toolset, hidden[i].method,
                      hidden[i].params, &a) == 0 &&
                  is_error(&a, "not_found", NULL));
        answer_free(&a);
    }
    /* and alice, whom big allows, reads it */
    CU_ASSERT(ask(nc, "alice", "big", "resources.read", "[\"size://10\"]",
                  &a) == 0 &&
              str_has(th_rpc_map_get(first_block(&a), "text"),
                      "xxxxxxxxxx"));
    answer_free(&a);
    natsConnection_Destroy(nc);
    natsConnection_Destroy(nb);
}

static void test_hostile(void)
{
    NEED_UP();
    natsConnection *nc = client(G_url, "alice", "alicepw");
    CU_ASSERT_FATAL(nc != NULL);
    answer a;
    static const char subj[] = "nc.u.alice.docs.resources.read";
    /* not msgpack (a JSON text), two values, a map for the array */
    static const char json_body[] = "[\"test://static-text\"]";
    CU_ASSERT(ask_raw(nc, subj, json_body, strlen(json_body), &a) == 0 &&
              is_error(&a, "invalid_request", "the body must be one "
                                              "msgpack value"));
    answer_free(&a);
    static const uint8_t two[] = {0x90, 0x90};
    CU_ASSERT(ask_raw(nc, subj, two, sizeof two, &a) == 0 &&
              is_error(&a, "invalid_request", "one msgpack value"));
    answer_free(&a);
    static const uint8_t cut[] = {0x91, 0xd9, 0x40, 'x'};
    CU_ASSERT(ask_raw(nc, subj, cut, sizeof cut, &a) == 0 &&
              is_error(&a, "invalid_request", "one msgpack value"));
    answer_free(&a);
    CU_ASSERT(ask(nc, "alice", "docs", "resources.read",
                  "{\"uri\": \"test://static-text\"}", &a) == 0 &&
              is_error(&a, "invalid_request", "params array"));
    answer_free(&a);
    /* a URI of 100,000 bytes */
    size_t n = 100000;
    char *huge = malloc(n + 8);
    CU_ASSERT_FATAL(huge != NULL);
    memset(huge, 'u', n + 8);
    memcpy(huge, "[\"", 2);
    memcpy(huge + n, "\"]", 3);
    CU_ASSERT(ask(nc, "alice", "docs", "resources.read", huge, &a) == 0 &&
              is_error(&a, "invalid_request", "1 to 2048 bytes"));
    answer_free(&a);
    free(huge);
    static const struct {
        const char *method, *params, *says;
    } bad[] = {
        {"resources.list", "[1]", "takes []"},
        {"prompts.list", "[{}]", "takes []"},
        {"resources.read", "[]", "takes [uri]"},
        {"resources.read", "[1]", "uri must be a string, got an integer"},
        {"resources.read", "[null]", "uri must be a string, got nil"},
        {"resources.read", "[\"\"]", "1 to 2048 bytes"},
        {"prompts.get", "[{}]", "name must be a string, got a map"},
        {"prompts.get", "[\"test_simple_prompt\", [1]]", "args must be a map"},
        {"completion.complete", "[1]", "got an integer"},
        {"completion.complete", "[{}]", "ref and argument must be maps"},
        {"completion.complete",
         "[{\"ref\": {\"type\": \"tool\", \"name\": \"echo\"}, "
         "\"argument\": {\"name\": \"a\", \"value\": \"\"}}]",
         "ref.type must be"},
        {"completion.complete",
         "[{\"ref\": {\"type\": \"prompt\", \"name\": \"p\"}, "
         "\"argument\": {\"name\": \"a\", \"value\": 1.5}}]",
         "argument.value must be a string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        bool ok = ask(nc, "alice", "docs", bad[i].method, bad[i].params,
                      &a) == 0 &&
                  is_error(&a, "invalid_request", bad[i].says);
        if (!ok)
            fprintf(stderr, "bad params %zu (%s) not refused as '%s'\n", i,
                    bad[i].method, bad[i].says);
        CU_ASSERT(ok);
        answer_free(&a);
    }
    /* a NUL inside the URI (msgpack carries it) */
    static const uint8_t nul[] = {0x91, 0xa3, 'a', 0, 'b'};
    CU_ASSERT(ask_raw(nc, subj, nul, sizeof nul, &a) == 0 &&
              is_error(&a, "invalid_request", "with a NUL"));
    answer_free(&a);
    /* the same connection is served after all that */
    CU_ASSERT(ask(nc, "alice", "docs", "resources.read",
                  "[\"test://static-text\"]", &a) == 0 && is_content(&a));
    answer_free(&a);
    natsConnection_Destroy(nc);
}

/* A reply subject that is not the caller's inbox is not answered (answering
 * is what a forger wants), and logged; a user not in nats.users is
 * refused. */
static void test_identity(void)
{
    NEED_UP();
    natsConnection *na = client(G_url, "alice", "alicepw");
    natsConnection *nb = client(G_url, "bob", "bobpw");
    natsConnection *nm = client(G_url, "mallory", "mallorypw");
    CU_ASSERT_FATAL(na && nb && nm);
    natsSubscription *sub = NULL;
    CU_ASSERT_FATAL(natsConnection_SubscribeSync(&sub, nb, "_INBOX.bob.>") ==
                    NATS_OK);
    natsConnection_Flush(nb);
    th_buf b = TH_BUF_INIT;
    rpc_pack_json(&b, "[\"test://static-text\"]");
    /* alice's request with bob's inbox for the reply, then bob's own on
     * the same queue subscription: bob's inbox sees his answer first */
    CU_ASSERT(natsConnection_PublishRequest(
                  na, "nc.u.alice.docs.resources.read", "_INBOX.bob.forged",
                  b.data, (int)b.len) == NATS_OK);
    natsConnection_Flush(na);
    CU_ASSERT(natsConnection_PublishRequest(
                  nb, "nc.u.bob.docs.resources.read", "_INBOX.bob.own",
                  b.data, (int)b.len) == NATS_OK);
    natsMsg *m = NULL;
    CU_ASSERT_FATAL(natsSubscription_NextMsg(&m, sub, th_test_ms(3000)) ==
                    NATS_OK);
    CU_ASSERT_STRING_EQUAL(natsMsg_GetSubject(m), "_INBOX.bob.own");
    CU_ASSERT_STRING_EQUAL(reply_kind(m), "content");
    natsMsg_Destroy(m);
    natsSubscription_Destroy(sub);
    CU_ASSERT(rpc_log_wait(&H, "alice refused: its reply subject is not "
                           "under", rpc_wait_ms()));
    /* mallory may publish in her tree, but is no caller of this host */
    answer a;
    CU_ASSERT(ask(nm, "mallory", "docs", "resources.list", NULL, &a) == 0 &&
              is_error(&a, "permission_denied", "not in nats.users"));
    answer_free(&a);
    th_buf_destroy(&b);
    natsConnection_Destroy(na);
    natsConnection_Destroy(nb);
    natsConnection_Destroy(nm);
}

/* A second server whose max_payload is 600 bytes, and a host without
 * nats.users: the blocks of an answer may fill half a message (300
 * bytes: past it the read fails, as the core says and logs); a list past
 * the message's size is refused with a log line; the host serves on. */
static void test_max_payload(void)
{
    if (!nats_server_bin())
        TH_SKIP("nats-server is not installed");
    gnatsd g;
    gnatsd_files(&g, "max_payload: 600\n");
    CU_ASSERT_FATAL(gnatsd_start(&g) == 0);
    char url[64];
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", g.port);
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  listen: [\"%s\"]\n"
             "plugins:\n"
             "  - name: conform_tools\n"
             "    path: @BUILD@/fixtures/conform_tools.so\n"
             "  - name: big_resource\n"
             "    path: @BUILD@/fixtures/big_resource.so\n"
             "toolsets:\n"
             "  - name: docs\n"
             "    tools: [\"*\"]\n"
             "    allow_users: [nats]\n"
             "nats:\n"
             "  prefix: mp\n"
             "  toolsets: [docs]\n"
             "  results_bucket: off\n"
             "  reconnect_wait: 100ms\n",
             url);
    rpc_srv h;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(&h, &o) == 0);
    char id[40];
    host_id_from_log(&h, id, sizeof id);
    CU_ASSERT_FATAL(id[0] != '\0');
    natsConnection *nc = client(url, NULL, NULL);
    CU_ASSERT_FATAL(nc != NULL);
    answer a;
    th_buf b = TH_BUF_INIT;
    rpc_pack_json(&b, "[\"size://100\"]");
    const msgpack_object *t = NULL;
    CU_ASSERT(ask_raw(nc, "mp.docs.resources.read", b.data, b.len, &a) ==
                  0 &&
              is_content(&a) &&
              (t = th_rpc_map_get(first_block(&a), "text")) &&
              t->type == MSGPACK_OBJECT_STR && t->via.str.size == 100);
    if (!is_content(&a))
        is_error(&a, "", NULL); /* says what came */
    answer_free(&a);
    th_buf_reset(&b);
    rpc_pack_json(&b, "[\"size://600\"]");
    CU_ASSERT(ask_raw(nc, "mp.docs.resources.read", b.data, b.len, &a) ==
                  0 &&
              is_error(&a, "tool_error", "the content passes 300 bytes"));
    answer_free(&a);
    CU_ASSERT(rpc_log_wait(&h, "the content passes 300 bytes",
                           rpc_wait_ms()));
    /* the prompts' list (4 prompts with their descriptions and arguments)
     * does not fit 600 bytes less the headers */
    CU_ASSERT(ask_raw(nc, "mp.docs.prompts.list", NULL, 0, &a) == 0 &&
              is_error(&a, "limit_exceeded", "past the NATS server's "
                                             "max_payload (600 bytes)"));
    answer_free(&a);
    CU_ASSERT(rpc_log_wait(&h, "its answer to prompts.list on toolset docs",
                           rpc_wait_ms()));
    /* and the host answers on */
    th_buf_reset(&b);
    rpc_pack_json(&b, "[\"size://10\"]");
    CU_ASSERT(ask_raw(nc, "mp.docs.resources.read", b.data, b.len, &a) ==
                  0 && is_content(&a));
    answer_free(&a);
    th_buf_destroy(&b);
    natsConnection_Destroy(nc);
    CU_ASSERT(!rpc_log_has(&h, "nats: disconnected"));
    /* a clean exit: no leak (valgrind, LeakSanitizer) nor error */
    CU_ASSERT_EQUAL(rpc_srv_stop(&h, SIGTERM), 0);
    rpc_srv_free(&h);
    gnatsd_free(&g);
}

/* The suite's host ends cleanly after all of the above. */
static void test_clean_exit(void)
{
    NEED_UP();
    natsConnection *nc = client(G_url, "alice", "alicepw");
    CU_ASSERT_FATAL(nc != NULL);
    answer a;
    CU_ASSERT(ask(nc, "alice", "docs", "resources.list", NULL, &a) == 0 &&
              is_content(&a));
    answer_free(&a);
    natsConnection_Destroy(nc);
    CU_ASSERT_EQUAL(rpc_srv_stop(&H, SIGTERM), 0);
}

void th_suite_nats_content(void)
{
    CU_pSuite s = CU_add_suite("nats_content", suite_init, suite_clean);
    CU_add_test(s, "lists", test_lists);
    CU_add_test(s, "read", test_read);
    CU_add_test(s, "prompts", test_prompts);
    CU_add_test(s, "complete", test_complete);
    CU_add_test(s, "acl", test_acl);
    CU_add_test(s, "hostile", test_hostile);
    CU_add_test(s, "identity", test_identity);
    CU_add_test(s, "max_payload", test_max_payload);
    CU_add_test(s, "clean_exit", test_clean_exit);
}
