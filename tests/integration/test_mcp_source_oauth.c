/* test_mcp_source_oauth.c - the mcp plugin toward a Streamable HTTP server
 * that wants OAuth (client credentials), and the server's GET stream.
 *
 * The protected server is toolhost itself (`serve` with mcp.oauth, its
 * JWKS a file the test writes); the authorization server is the test
 * (libmicrohttpd on 127.0.0.1:0: its metadata and a token endpoint that
 * checks the client's id and secret and signs a JWT with the test's RSA
 * key, made by openssl).  An outer toolhost imports the inner one's tools
 * through the plugin.  Covered: the whole flow (401, resource metadata,
 * AS metadata, token, retry), the secret absent from every log, a wrong
 * secret, a token that expires (fetched again before its end) and one
 * the server refuses early (fetched again on its 401), a token endpoint
 * that hangs (oauth.timeout), AS metadata with a foreign issuer or a
 * token endpoint on another origin, and the inner host's list_changed on
 * the GET stream re-listing the outer's tools.  Then the GET stream
 * against a small server of the test's: a stream that ends is opened
 * again with Last-Event-ID, and a server without one (405). */
#include <CUnit/CUnit.h>
#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <jansson.h>
#include <jwt.h>
#include <microhttpd.h>
#include <nettle/base64.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "common/th_http.h"
#include "integration/test_rpc_harness.h"

#define CLIENT "cc-client"
#define SECRET "s3cret-Zq9-never-logged"
#define SECRET_ENV "TH_MCPSRC_OAUTH_SECRET"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the key ---------------------------------------------------------------- */

static char *keydir, *priv_pem, *jwks_path;

static char *b64url(const uint8_t *p, size_t n)
{
    char *s = malloc(BASE64_ENCODE_LENGTH(n) + BASE64_ENCODE_FINAL_LENGTH +
                     1);
    struct base64_encode_ctx ctx;
    base64url_encode_init(&ctx);
    size_t l = base64_encode_update(&ctx, s, n, p);
    l += base64_encode_final(&ctx, s + l);
    while (l && s[l - 1] == '=')
        l--;
    s[l] = 0;
    return s;
}

/* An RSA key (openssl), its JWKS written to keydir/jwks.json. */
static int suite_init(void)
{
    if (!(keydir = th_test_tmpdir()))
        return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/k.pem", keydir);
    char *const argv[] = {"/usr/bin/openssl", "genpkey", "-algorithm", "RSA",
                          "-pkeyopt", "rsa_keygen_bits:2048", "-out", path,
                          NULL};
    th_test_run r;
    if (th_test_run_argv(argv, NULL, 60, 0, &r) != 0 || r.status != 0) {
        th_test_run_free(&r);
        return -1;
    }
    th_test_run_free(&r);
    size_t len;
    if (!(priv_pem = th_test_read_file(path, &len)))
        return -1;
    gnutls_privkey_t pk;
    gnutls_pubkey_t pub;
    gnutls_datum_t d = {(unsigned char *)priv_pem, (unsigned)len};
    gnutls_datum_t n = {NULL, 0}, e = {NULL, 0};
    gnutls_privkey_init(&pk);
    gnutls_pubkey_init(&pub);
    int rc = -1;
    if (gnutls_privkey_import_x509_raw(pk, &d, GNUTLS_X509_FMT_PEM, NULL,
                                       0) == 0 &&
        gnutls_pubkey_import_privkey(pub, pk, 0, 0) == 0 &&
        gnutls_pubkey_export_rsa_raw2(pub, &n, &e,
                                      GNUTLS_EXPORT_FLAG_NO_LZ) == 0) {
        char *sn = b64url(n.data, n.size), *se = b64url(e.data, e.size);
        json_t *doc = json_pack("{s:[{s:s, s:s, s:s, s:s, s:s}]}", "keys",
                                "kty", "RSA", "kid", "k1", "use", "sig", "n",
                                sn, "e", se);
        char *text = json_dumps(doc, 0);
        jwks_path = th_test_write_file(keydir, "jwks.json", text, (size_t)-1);
        rc = jwks_path ? 0 : -1;
        free(text);
        json_decref(doc);
        free(sn);
        free(se);
    }
    gnutls_free(n.data);
    gnutls_free(e.data);
    gnutls_pubkey_deinit(pub);
    gnutls_privkey_deinit(pk);
    return rc;
}

static int suite_clean(void)
{
    free(priv_pem);
    free(jwks_path);
    if (keydir)
        th_test_rmtree(keydir);
    free(keydir);
    keydir = jwks_path = priv_pem = NULL;
    return 0;
}

/* ---- the authorization server ----------------------------------------------- */

typedef struct asrv {
    struct MHD_Daemon *d;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned port;
    char issuer[64];
    /* what it does (under mu) */
    bool stall;            /* the token endpoint answers only when cleared */
    const char *md_issuer; /* the metadata's issuer (NULL: its own) */
    const char *md_token;  /* its token_endpoint (NULL: its own) */
    long exp_s;            /* the token's exp: now + this */
    long expires_in;       /* what it says (0: nothing) */
    bool bad_token;        /* the token holds a line break */
    /* what it saw */
    unsigned asked;        /* token requests come in */
    unsigned tokens;       /* tokens given */
    unsigned refused;      /* token requests refused */
    char resource[256];    /* the last resource= */
    char grant[64];        /* the last grant_type= */
} asrv;

typedef struct areq {
    struct MHD_PostProcessor *pp;
    char grant[64], resource[256];
} areq;

static enum MHD_Result on_field(void *cls, enum MHD_ValueKind kind,
                                const char *key, const char *filename,
                                const char *ctype, const char *enc,
                                const char *data, uint64_t off, size_t size)
{
    (void)kind, (void)filename, (void)ctype, (void)enc;
    areq *q = cls;
    char *dst = !strcmp(key, "grant_type") ? q->grant
                : !strcmp(key, "resource")  ? q->resource
                                            : NULL;
    size_t cap = dst == q->grant ? sizeof q->grant : sizeof q->resource;
    if (dst && off + size < cap) {
        memcpy(dst + off, data, size);
        dst[off + size] = 0;
    }
    return MHD_YES;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status,
                             const char *json)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(json), (void *)json, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static char *mint(asrv *a, const char *aud)
{
    jwt_t *j = NULL;
    jwt_new(&j);
    jwt_add_grant(j, "iss", a->issuer);
    jwt_add_grant(j, "sub", CLIENT);
    jwt_add_grant(j, "aud", aud);
    jwt_add_grant_int(j, "exp", (long)time(NULL) + a->exp_s);
    jwt_add_header(j, "kid", "k1");
    jwt_set_alg(j, JWT_ALG_RS256, (const unsigned char *)priv_pem,
                (int)strlen(priv_pem));
    char *t = jwt_encode_str(j);
    jwt_free(j);
    return t;
}

static enum MHD_Result as_handler(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls)
{
    (void)version;
    asrv *a = cls;
    if (!strcmp(method, "GET")) {
        if (strcmp(url, "/.well-known/oauth-authorization-server"))
            return reply(c, 404, "{}");
        pthread_mutex_lock(&a->mu);
        json_t *md = json_pack(
            "{s:s, s:s, s:[s], s:[s]}", "issuer",
            a->md_issuer ? a->md_issuer : a->issuer, "token_endpoint", "",
            "grant_types_supported", "client_credentials",
            "token_endpoint_auth_methods_supported", "client_secret_basic");
        char te[128];
        snprintf(te, sizeof te, "%s/token", a->issuer);
        json_object_set_new(md, "token_endpoint",
                            json_string(a->md_token ? a->md_token : te));
        pthread_mutex_unlock(&a->mu);
        char *s = json_dumps(md, 0);
        json_decref(md);
        enum MHD_Result rc = reply(c, 200, s);
        free(s);
        return rc;
    }
    areq *q = *req_cls;
    if (!q) {
        q = calloc(1, sizeof *q);
        q->pp = MHD_create_post_processor(c, 4096, on_field, q);
        *req_cls = q;
        return MHD_YES;
    }
    if (*upload_size) {
        if (q->pp)
            MHD_post_process(q->pp, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    char *pass = NULL;
    char *user = MHD_basic_auth_get_username_password(c, &pass);
    bool ok = user && pass && !strcmp(user, CLIENT) && !strcmp(pass, SECRET);
    MHD_free(user);
    MHD_free(pass);
    pthread_mutex_lock(&a->mu);
    snprintf(a->grant, sizeof a->grant, "%s", q->grant);
    snprintf(a->resource, sizeof a->resource, "%s", q->resource);
    a->asked++;
    pthread_cond_broadcast(&a->cv);
    while (a->stall)
        pthread_cond_wait(&a->cv, &a->mu);
    if (!ok || strcmp(q->grant, "client_credentials")) {
        a->refused++;
        pthread_mutex_unlock(&a->mu);
        return reply(c, 401, "{\"error\":\"invalid_client\","
                             "\"error_description\":\"client "
                             "authentication failed\"}");
    }
    a->tokens++;
    char *t = mint(a, q->resource);
    char *bad = NULL;
    if (a->bad_token && asprintf(&bad, "%s\r\nX-Injected: 1", t) < 0)
        bad = NULL;
    json_t *body = json_pack("{s:s, s:s}", "access_token",
                             bad ? bad : t ? t : "", "token_type", "Bearer");
    free(bad);
    if (a->expires_in)
        json_object_set_new(body, "expires_in",
                            json_integer(a->expires_in));
    pthread_mutex_unlock(&a->mu);
    char *s = json_dumps(body, 0);
    json_decref(body);
    free(t);
    enum MHD_Result rc = reply(c, 200, s);
    free(s);
    return rc;
}

static void as_done(void *cls, struct MHD_Connection *c, void **req_cls,
                    enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    areq *q = *req_cls;
    if (q) {
        if (q->pp)
            MHD_destroy_post_processor(q->pp);
        free(q);
    }
    *req_cls = NULL;
}

static int as_start(asrv *a)
{
    memset(a, 0, sizeof *a);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    a->exp_s = 300;
    a->expires_in = 300;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    a->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
                                MHD_USE_THREAD_PER_CONNECTION |
                                MHD_USE_ERROR_LOG,
                            0, NULL, NULL, as_handler, a,
                            MHD_OPTION_SOCK_ADDR, &sa,
                            MHD_OPTION_NOTIFY_COMPLETED, as_done, a,
                            MHD_OPTION_END);
    const union MHD_DaemonInfo *i =
        a->d ? MHD_get_daemon_info(a->d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    a->port = i ? i->port : 0;
    snprintf(a->issuer, sizeof a->issuer, "http://127.0.0.1:%u", a->port);
    return a->port ? 0 : -1;
}

static void as_stall(asrv *a, bool on)
{
    pthread_mutex_lock(&a->mu);
    a->stall = on;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* Waits until n token requests came in. */
static bool as_wait_asked(asrv *a, unsigned n)
{
    int64_t end = now_ms() + rpc_wait_ms();
    pthread_mutex_lock(&a->mu);
    while (a->asked < n && now_ms() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&a->cv, &a->mu, &ts);
    }
    bool ok = a->asked >= n;
    pthread_mutex_unlock(&a->mu);
    return ok;
}

static unsigned as_tokens(asrv *a)
{
    pthread_mutex_lock(&a->mu);
    unsigned n = a->tokens;
    pthread_mutex_unlock(&a->mu);
    return n;
}

static void as_stop(asrv *a)
{
    as_stall(a, false);
    if (a->d)
        MHD_stop_daemon(a->d);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
}

/* ---- the hosts -------------------------------------------------------------- */

/* The protected host: echo and grow_tools over HTTP, mcp.oauth trusting
 * the test's AS; leeway 0 (a token is refused the second its exp
 * passes). */
static int inner_start(rpc_srv *s, asrv *a, unsigned *port)
{
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  plugin_reload_min_interval: 0s\n"
             "  listen: [\"http://127.0.0.1:0/mcp\"]\n"
             "mcp:\n"
             "  oauth:\n"
             "    issuer: %s\n"
             "    jwks_file: %s\n"
             "    leeway: 0s\n"
             "    users: [{name: " CLIENT "}]\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "  - name: grow\n"
             "    path: @BUILD@/fixtures/grow_tools.so\n"
             "    config:\n"
             "      state: @DIR@/count\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n"
             "    allow_users: [" CLIENT "]\n",
             a->issuer, jwks_path);
    rpc_opts o = {.config = cfg};
    if (rpc_srv_start(s, &o) != 0)
        return -1;
    *port = th_test_log_port(s->log, "(Streamable HTTP) on http");
    return *port ? 0 : -1;
}

/* The outer host's config: the mcp plugin importing the inner host as
 * server 'in', with `oauth` (its lines, indented 12). */
static char *outer_config(char *buf, size_t cap, unsigned port,
                          const char *oauth)
{
    snprintf(buf, cap,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  plugin_reload_min_interval: 0s\n"
             "  workers: 8\n"
             "plugins:\n"
             "  - name: mcp\n"
             "    path: @BUILD@/plugins/mcp.so\n"
             "    config:\n"
             "      start_timeout: 10s\n"
             "      servers:\n"
             "        - name: in\n"
             "          url: http://127.0.0.1:%u/mcp\n"
             "          oauth:\n"
             "            client_id: " CLIENT "\n"
             "            client_secret_env: " SECRET_ENV "\n"
             "%s"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             port, oauth ? oauth : "");
    return buf;
}

static bool listed(th_rpc_client *c, const char *tool)
{
    rpc_res r;
    bool ok = rpc_call(c, "tools.list", "[]", &r) == 0 && r.res &&
              rpc_find_tool(r.res, tool) != NULL;
    rpc_res_free(&r);
    return ok;
}

static bool call_says(th_rpc_client *c, const char *json, const char *out)
{
    rpc_res r;
    bool ok = rpc_call(c, "tools.call", json, &r) == 0 && r.res &&
              rpc_stdout_is(r.res, out);
    rpc_res_free(&r);
    return ok;
}

static bool log_lacks_secret(rpc_srv *s)
{
    size_t n;
    char *t = th_test_read_file(s->log, &n);
    bool ok = t && !strstr(t, SECRET);
    free(t);
    return ok;
}

/* ---- the tests -------------------------------------------------------------- */

/* The whole flow, then the inner host's tools change: its list_changed
 * on the GET stream re-lists the outer's tools. */
static void test_flow(void)
{
    th_test_timeout(120);
    setenv(SECRET_ENV, SECRET, 1);
    asrv a;
    CU_ASSERT_FATAL(as_start(&a) == 0);
    rpc_srv in;
    unsigned port = 0;
    CU_ASSERT_FATAL(inner_start(&in, &a, &port) == 0);
    char cfg[2048];
    rpc_srv out;
    rpc_opts o = {.config = outer_config(cfg, sizeof cfg, port, NULL)};
    int started = rpc_srv_start(&out, &o);
    CU_ASSERT_FATAL(started == 0);
    th_rpc_client *c = rpc_connect(&out);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(listed(c, "in_echo"));
    CU_ASSERT(call_says(c, "[\"in_echo\", {\"text\": \"via-cc\"}]",
                        "via-cc"));
    /* one token for the handshake and the call; its resource the inner
     * host's URL, as its metadata says */
    CU_ASSERT_EQUAL(as_tokens(&a), 1);
    char want[128];
    snprintf(want, sizeof want, "http://127.0.0.1:%u/mcp", port);
    CU_ASSERT_STRING_EQUAL(a.resource, want);
    CU_ASSERT_STRING_EQUAL(a.grant, "client_credentials");
    CU_ASSERT(rpc_log_has(&out, "server 'in': OAuth token from"));

    /* the inner host's tools change (grow_add reloads grow_tools): the
     * outer host hears it on the GET stream and imports the new list */
    CU_ASSERT(!listed(c, "in_grown_1"));
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &out) == 0);
    rpc_raw_request(&w, 1, "tools.list", "[]");
    CU_ASSERT(rpc_raw_response(&w, 1, rpc_wait_ms()) != NULL);
    CU_ASSERT(call_says(c, "[\"in_grow_add\", {}]", "count=1 rc=0"));
    CU_ASSERT(rpc_log_wait(&out, "plugin 'mcp' asked for its tools to be "
                                 "listed again: server 'in': tools/list "
                                 "after its list_changed lists other tools",
                           rpc_wait_ms()));
    bool grown = false;
    for (int64_t end = now_ms() + rpc_wait_ms();
         !grown && now_ms() < end;)
        if (!(grown = listed(c, "in_grown_1")))
            rpc_log_wait(&out, "mcp g2 changed", 100);
    CU_ASSERT(grown);
    CU_ASSERT(call_says(c, "[\"in_grown_1\", {}]", "grown_1"));
    /* the outer host's session was told */
    CU_ASSERT(rpc_raw_notification(&w, "tools.changed", rpc_wait_ms()) !=
              NULL);
    rpc_raw_close(&w);

    CU_ASSERT(log_lacks_secret(&out));
    CU_ASSERT(log_lacks_secret(&in));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&out, SIGTERM), 0);
    rpc_srv_free(&out);
    rpc_srv_stop(&in, SIGTERM);
    rpc_srv_free(&in);
    as_stop(&a);
}

/* expires_in: a token is fetched again before it ends; a token the server
 * refuses before its expires_in says (its exp sooner): fetched again on
 * the 401, the call sent again and answered. */
static void test_expiry(void)
{
    th_test_timeout(120);
    setenv(SECRET_ENV, SECRET, 1);
    asrv a;
    CU_ASSERT_FATAL(as_start(&a) == 0);
    /* 2s, longer under valgrind (the first call must come within its
     * fresh three quarters) */
    long life = (long)(th_test_ms(2000) / 1000);
    a.exp_s = life;
    a.expires_in = life;
    rpc_srv in;
    unsigned port = 0;
    CU_ASSERT_FATAL(inner_start(&in, &a, &port) == 0);
    char cfg[2048];
    rpc_srv out;
    rpc_opts o = {.config = outer_config(cfg, sizeof cfg, port, NULL)};
    CU_ASSERT_FATAL(rpc_srv_start(&out, &o) == 0);
    th_rpc_client *c = rpc_connect(&out);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(call_says(c, "[\"in_echo\", {\"text\": \"one\"}]", "one"));
    CU_ASSERT_EQUAL(as_tokens(&a), 1);
    /* the token's life less a quarter: past it, the next call fetches a
     * new one first (no 401 on the way) */
    int64_t t0 = now_ms();
    while (now_ms() < t0 + life * 1000 + 100)
        rpc_log_wait(&out, "no such line", 100); /* the clock, bounded */
    int refusals = rpc_log_count(&out, "answered 401 to a request with a "
                                       "token");
    /* four calls at once while the token endpoint is slow: one fetch,
     * which all four wait for */
    as_stall(&a, true);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &out) == 0);
    for (uint64_t id = 1; id <= 4; id++)
        rpc_raw_request(&w, id, "tools.call",
                        "[\"in_echo\", {\"text\": \"two\"}]");
    CU_ASSERT(as_wait_asked(&a, 2));
    CU_ASSERT(rpc_wait_running(&out, 4));
    as_stall(&a, false);
    for (uint64_t id = 1; id <= 4; id++) {
        const msgpack_object *m = rpc_raw_response(&w, id, rpc_wait_ms());
        CU_ASSERT(m && m->via.array.ptr[2].type == MSGPACK_OBJECT_NIL &&
                  rpc_stdout_is(&m->via.array.ptr[3], "two"));
    }
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(a.asked, 2);
    CU_ASSERT_EQUAL(as_tokens(&a), 2);
    CU_ASSERT_EQUAL(rpc_log_count(&out, "answered 401 to a request with a "
                                        "token"),
                    refusals);

    /* now the AS says an hour but the token ends in a second: the
     * server's 401 fetches a new one and the call goes again */
    pthread_mutex_lock(&a.mu);
    a.exp_s = life > 3 ? life / 2 : 1;
    a.expires_in = 3600;
    pthread_mutex_unlock(&a.mu);
    t0 = now_ms();
    while (now_ms() < t0 + life * 1000 + 100)
        rpc_log_wait(&out, "no such line", 100);
    CU_ASSERT(call_says(c, "[\"in_echo\", {\"text\": \"three\"}]", "three"));
    unsigned n3 = as_tokens(&a);
    CU_ASSERT(n3 >= 3);
    /* past that token's exp (minted before this line, exp_s later) */
    time_t minted = time(NULL);
    while (time(NULL) < minted + a.exp_s + 1)
        rpc_log_wait(&out, "no such line", 100);
    CU_ASSERT(call_says(c, "[\"in_echo\", {\"text\": \"four\"}]", "four"));
    CU_ASSERT_EQUAL(as_tokens(&a), n3 + 1);
    CU_ASSERT(rpc_log_has(&out, "answered 401 to a request with a token"));

    /* A token endpoint that hangs holds no call past its end: past that
     * token's exp, call 5 fetches (hung), call 6 waits for its fetch.
     * Cancelling 5 abandons its fetch (6 fetches again, not taking 5's
     * failure); cancelling 8, a waiter, ends it too.  Each ends while
     * the endpoint still hangs (the run is over: `running` drops); 6
     * gets its token once the endpoint answers. */
    minted = time(NULL);
    while (time(NULL) < minted + a.exp_s + 1)
        rpc_log_wait(&out, "no such line", 100);
    pthread_mutex_lock(&a.mu);
    unsigned asked0 = a.asked;
    pthread_mutex_unlock(&a.mu);
    as_stall(&a, true);
    CU_ASSERT_FATAL(rpc_raw_open(&w, &out) == 0);
    rpc_raw_request(&w, 5, "tools.call", "[\"in_echo\", {\"text\": \"five\"}]");
    CU_ASSERT(as_wait_asked(&a, asked0 + 1));
    rpc_raw_request(&w, 6, "tools.call", "[\"in_echo\", {\"text\": \"six\"}]");
    CU_ASSERT(rpc_wait_running(&out, 2));
    rpc_raw_request(&w, 7, "tools.cancel", "[5]");
    const msgpack_object *m5 = rpc_raw_response(&w, 5, rpc_wait_ms());
    CU_ASSERT(m5 && m5->via.array.size == 4 &&
              rpc_tool_error_is(&m5->via.array.ptr[3], "cancelled"));
    CU_ASSERT(as_wait_asked(&a, asked0 + 2)); /* 6 fetches again */
    CU_ASSERT(rpc_wait_running_as(&out, 1, true));
    rpc_raw_request(&w, 8, "tools.call", "[\"in_echo\", {\"text\": \"8\"}]");
    CU_ASSERT(rpc_wait_running(&out, 2));
    rpc_raw_request(&w, 9, "tools.cancel", "[8]");
    const msgpack_object *m8 = rpc_raw_response(&w, 8, rpc_wait_ms());
    CU_ASSERT(m8 && m8->via.array.size == 4 &&
              rpc_tool_error_is(&m8->via.array.ptr[3], "cancelled"));
    CU_ASSERT(rpc_wait_running_as(&out, 1, true));
    as_stall(&a, false);
    const msgpack_object *m6 = rpc_raw_response(&w, 6, rpc_wait_ms());
    CU_ASSERT(m6 && m6->via.array.size == 4 &&
              m6->via.array.ptr[2].type == MSGPACK_OBJECT_NIL &&
              rpc_stdout_is(&m6->via.array.ptr[3], "six"));
    rpc_raw_close(&w);
    CU_ASSERT(log_lacks_secret(&out));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&out, SIGTERM), 0);
    rpc_srv_free(&out);
    rpc_srv_stop(&in, SIGTERM);
    rpc_srv_free(&in);
    as_stop(&a);
}

/* `toolhost call` through the plugin with the config `oauth` lines: the
 * run fails (ok: succeeds) with stderr (ok: stdout) holding `want`, and
 * never the secret. */
static void expect_run(unsigned port, const char *oauth, const char *want,
                       bool ok)
{
    char *dir = th_test_tmpdir();
    char text[2048], cfgtext[4096];
    outer_config(text, sizeof text, port, oauth);
    /* @BUILD@ by hand: this config goes to the CLI */
    size_t n = 0;
    for (const char *p = text; *p && n + 1 < sizeof cfgtext;) {
        if (!strncmp(p, "@BUILD@", 7)) {
            n += (size_t)snprintf(cfgtext + n, sizeof cfgtext - n, "%s",
                                  TH_BUILD_DIR);
            p += 7;
        } else {
            cfgtext[n++] = *p++;
        }
    }
    cfgtext[n] = 0;
    char *cfg = th_test_write_file(dir, "outer.yaml", cfgtext, (size_t)-1);
    th_test_run r;
    CU_ASSERT_EQUAL(th_test_toolhost(&r, "call", "-c", cfg, "in_echo",
                                     "text=x", NULL),
                    0);
    CU_ASSERT_EQUAL(r.status != 0, !ok);
    const char *in = ok ? r.out : r.err;
    bool has = in && strstr(in, want);
    CU_ASSERT(has);
    if (!has)
        fprintf(stderr, "\nwant '%s' in:\n%s\n%s\n", want, r.out, r.err);
    CU_ASSERT(!(r.err && strstr(r.err, SECRET)));
    CU_ASSERT(!(r.out && strstr(r.out, SECRET)));
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

static void expect_fail(unsigned port, const char *oauth, const char *want)
{
    expect_run(port, oauth, want, false);
}

static void test_refusals(void)
{
    th_test_timeout(180);
    asrv a;
    CU_ASSERT_FATAL(as_start(&a) == 0);
    rpc_srv in;
    unsigned port = 0;
    CU_ASSERT_FATAL(inner_start(&in, &a, &port) == 0);
    char want[256];

    /* a wrong secret: the token endpoint's error, named */
    setenv(SECRET_ENV, "wrong-secret", 1);
    snprintf(want, sizeof want,
             "OAuth: token endpoint %s/token refused (HTTP 401): "
             "invalid_client: client authentication failed",
             a.issuer);
    expect_fail(port, NULL, want);
    CU_ASSERT(a.refused >= 1);
    setenv(SECRET_ENV, SECRET, 1);

    /* AS metadata whose issuer is another's */
    a.md_issuer = "http://127.0.0.1:1";
    snprintf(want, sizeof want,
             "authorization server metadata: its issuer "
             "'http://127.0.0.1:1' is not '%s' (the one asked): refused",
             a.issuer);
    expect_fail(port, NULL, want);
    a.md_issuer = NULL;

    /* a token endpoint on another origin: the secret is not sent there */
    a.md_token = "http://127.0.0.1:1/token";
    expect_fail(port, NULL, "its token_endpoint 'http://127.0.0.1:1/token' "
                            "is not on the issuer's origin: refused");
    a.md_token = NULL;

    /* an issuer pinned to another authorization server than the one the
     * server names: nothing is asked of the named one (no token below) */
    expect_fail(port, "            issuer: http://127.0.0.1:1\n",
                "protected resource metadata does not name the configured "
                "oauth.issuer 'http://127.0.0.1:1' among its "
                "authorization_servers: refused");

    /* a token with a line break (header injection): refused */
    a.bad_token = true;
    expect_fail(port, NULL, "the answer holds no Bearer access_token of "
                            "printable characters");
    a.bad_token = false;
    /* nothing above had a token (the one with a line break is not one) */
    a.tokens = 0;
    CU_ASSERT_EQUAL(as_tokens(&a), 0);
    /* pinned to the one the server names: the flow goes on */
    char pin[256];
    snprintf(pin, sizeof pin, "            issuer: %s\n", a.issuer);
    expect_run(port, pin, "x", true);
    /* a token endpoint that hangs: oauth.timeout ends the wait */
    as_stall(&a, true);
    int64_t t0 = now_ms();
    snprintf(want, sizeof want,
             "OAuth: token endpoint: %s/token did not answer within 1000ms "
             "(oauth.timeout)",
             a.issuer);
    expect_fail(port, "            timeout: 1s\n", want);
    CU_ASSERT(now_ms() - t0 < 60000); /* not the harness's kill */
    as_stall(&a, false);

    /* the secret's variable unset: the config says so */
    unsetenv(SECRET_ENV);
    expect_fail(port, NULL, "oauth: the environment variable " SECRET_ENV
                            " (client_secret_env) is not set or empty");
    /* plain http to a host that is not loopback */
    setenv(SECRET_ENV, SECRET, 1);
    expect_fail(port, "            token_url: http://auth.example/token\n",
                "oauth: 'token_url': 'http://auth.example/token' is plain "
                "http to a host that is not loopback (https is required)");
    CU_ASSERT(log_lacks_secret(&in));
    rpc_srv_stop(&in, SIGTERM);
    rpc_srv_free(&in);
    as_stop(&a);
}

/* The server's own url plain http off loopback: the token would cross
 * the network in the clear, refused at load. */
static void test_plain_url(void)
{
    setenv(SECRET_ENV, SECRET, 1);
    char *dir = th_test_tmpdir();
    char text[1024];
    snprintf(text, sizeof text,
             "plugins:\n"
             "  - name: mcp\n"
             "    path: %s/plugins/mcp.so\n"
             "    config:\n"
             "      servers:\n"
             "        - name: in\n"
             "          url: http://tools.example/mcp\n"
             "          oauth: {client_id: " CLIENT ", client_secret_env: "
             SECRET_ENV "}\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             TH_BUILD_DIR);
    char *cfg = th_test_write_file(dir, "plain.yaml", text, (size_t)-1);
    th_test_run r;
    CU_ASSERT_EQUAL(th_test_toolhost(&r, "list", "-c", cfg, NULL), 0);
    CU_ASSERT_NOT_EQUAL(r.status, 0);
    CU_ASSERT(r.err && strstr(r.err, "server 'in': oauth: the server's url: "
                                     "'http://tools.example/mcp' is plain "
                                     "http to a host that is not loopback"));
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* ---- a plain MCP server for the GET stream ----------------------------------- */

/* Speaks just enough Streamable HTTP: initialize (session "s1"),
 * notifications (202), tools/list (t1, and t2 once grown), tools/call
 * ("ok").  Its GET: 405 when `no_get`; else the first GET sends an event
 * with id e1 and ends (the plugin connects again), the second (whose
 * Last-Event-ID is kept) grows the list and sends list_changed (id e2),
 * then stays open until the server stops. */
typedef struct fsrv {
    struct MHD_Daemon *d;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned port;
    bool no_get, grown, stop;
    bool flap;           /* every GET: one event, then the end */
    unsigned gets;
    char last_id[4][64]; /* Last-Event-ID of each GET ("" none) */
} fsrv;

typedef struct freq {
    fsrv *f;
    char *body;
    size_t len;
    unsigned get; /* the GET's number (1-based), 0: a POST */
    int sent;     /* events sent on that GET */
} freq;

static ssize_t get_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    freq *q = cls;
    fsrv *f = q->f;
    const char *ev = NULL;
    pthread_mutex_lock(&f->mu);
    bool flap = f->flap;
    pthread_mutex_unlock(&f->mu);
    if (flap) {
        if (q->sent)
            return MHD_CONTENT_READER_END_OF_STREAM;
        ev = "id: f1\ndata: {\"jsonrpc\":\"2.0\",\"method\":"
             "\"notifications/message\",\"params\":{\"level\":\"info\","
             "\"data\":\"flap\"}}\n\n";
    } else if (q->sent == 0 && q->get == 1)
        ev = "id: e1\ndata: {\"jsonrpc\":\"2.0\",\"method\":"
             "\"notifications/message\",\"params\":{\"level\":\"info\","
             "\"data\":\"hi\"}}\n\n";
    else if (q->sent == 0 && q->get == 2)
        ev = "id: e2\ndata: {\"jsonrpc\":\"2.0\",\"method\":"
             "\"notifications/tools/list_changed\"}\n\n";
    if (ev && strlen(ev) <= max) {
        q->sent++;
        memcpy(buf, ev, strlen(ev));
        return (ssize_t)strlen(ev);
    }
    if (q->get == 1)
        return MHD_CONTENT_READER_END_OF_STREAM;
    /* stay open: wait (bounded) for the stop, then end */
    pthread_mutex_lock(&f->mu);
    if (!f->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    }
    bool stop = f->stop;
    pthread_mutex_unlock(&f->mu);
    if (stop)
        return MHD_CONTENT_READER_END_OF_STREAM;
    memcpy(buf, ": quiet\n\n", 9);
    return 9;
}

static enum MHD_Result f_handler(void *cls, struct MHD_Connection *c,
                                 const char *url, const char *method,
                                 const char *version, const char *upload,
                                 size_t *upload_size, void **req_cls)
{
    (void)url, (void)version;
    fsrv *f = cls;
    freq *q = *req_cls;
    if (!q) {
        q = calloc(1, sizeof *q);
        q->f = f;
        *req_cls = q;
        return MHD_YES;
    }
    if (!strcmp(method, "GET")) {
        pthread_mutex_lock(&f->mu);
        bool no = f->no_get;
        q->get = ++f->gets;
        const char *li = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     "Last-Event-ID");
        if (q->get <= 4)
            snprintf(f->last_id[q->get - 1], 64, "%s", li ? li : "");
        if (q->get == 2)
            f->grown = true;
        pthread_mutex_unlock(&f->mu);
        if (no)
            return reply(c, 405, "");
        struct MHD_Response *r = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, 1024, get_reader, q, NULL);
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        enum MHD_Result rc = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return rc;
    }
    if (*upload_size) {
        char *b = realloc(q->body, q->len + *upload_size + 1);
        if (b) {
            memcpy(b + q->len, upload, *upload_size);
            q->len += *upload_size;
            b[q->len] = 0;
            q->body = b;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    json_t *m = q->body ? json_loads(q->body, 0, NULL) : NULL;
    const char *meth = json_string_value(json_object_get(m, "method"));
    json_t *id = json_object_get(m, "id");
    enum MHD_Result rc;
    if (!meth || !id) {
        rc = reply(c, 202, "");
    } else {
        json_t *res;
        if (!strcmp(meth, "initialize")) {
            res = json_pack("{s:s, s:{s:{}}, s:{s:s, s:s}}",
                            "protocolVersion", "2025-06-18", "capabilities",
                            "tools", "serverInfo", "name", "f", "version",
                            "1");
        } else if (!strcmp(meth, "tools/list")) {
            pthread_mutex_lock(&f->mu);
            bool grown = f->grown;
            pthread_mutex_unlock(&f->mu);
            res = json_pack("{s:[{s:s, s:{s:s}}]}", "tools", "name", "t1",
                            "inputSchema", "type", "object");
            if (grown)
                json_array_append_new(
                    json_object_get(res, "tools"),
                    json_pack("{s:s, s:{s:s}}", "name", "t2", "inputSchema",
                              "type", "object"));
        } else {
            res = json_pack("{s:[{s:s, s:s}]}", "content", "type", "text",
                            "text", "ok");
        }
        json_t *ans = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                                id, "result", res);
        char *text = json_dumps(ans, 0);
        json_decref(ans);
        struct MHD_Response *r = MHD_create_response_from_buffer(
            strlen(text), text, MHD_RESPMEM_MUST_FREE);
        MHD_add_response_header(r, "Content-Type", "application/json");
        MHD_add_response_header(r, "Mcp-Session-Id", "s1");
        rc = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
    }
    json_decref(m);
    return rc;
}

static void f_done(void *cls, struct MHD_Connection *c, void **req_cls,
                   enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    freq *q = *req_cls;
    if (q)
        free(q->body);
    free(q);
    *req_cls = NULL;
}

static int f_start(fsrv *f, bool no_get)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->no_get = no_get;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    f->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
                                MHD_USE_THREAD_PER_CONNECTION |
                                MHD_USE_ERROR_LOG,
                            0, NULL, NULL, f_handler, f,
                            MHD_OPTION_SOCK_ADDR, &sa,
                            MHD_OPTION_NOTIFY_COMPLETED, f_done, f,
                            MHD_OPTION_END);
    const union MHD_DaemonInfo *i =
        f->d ? MHD_get_daemon_info(f->d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    f->port = i ? i->port : 0;
    return f->port ? 0 : -1;
}

static void f_stop(fsrv *f)
{
    pthread_mutex_lock(&f->mu);
    f->stop = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    if (f->d)
        MHD_stop_daemon(f->d);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
}

static int f_outer(rpc_srv *out, fsrv *f)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  plugin_reload_min_interval: 0s\n"
             "plugins:\n"
             "  - name: mcp\n"
             "    path: @BUILD@/plugins/mcp.so\n"
             "    config:\n"
             "      restart_initial: 50ms\n"
             "      servers:\n"
             "        - name: f\n"
             "          url: http://127.0.0.1:%u/mcp\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             f->port);
    rpc_opts o = {.config = cfg};
    return rpc_srv_start(out, &o);
}

/* A GET stream that ends is opened again with Last-Event-ID; its
 * list_changed re-lists the tools. */
static void test_get_stream(void)
{
    th_test_timeout(120);
    fsrv f;
    CU_ASSERT_FATAL(f_start(&f, false) == 0);
    rpc_srv out;
    CU_ASSERT_FATAL(f_outer(&out, &f) == 0);
    th_rpc_client *c = rpc_connect(&out);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(rpc_log_wait(&out, "server 'f': its GET stream ended (HTTP "
                                 "status 200): again in 50ms (from its last "
                                 "event id)",
                           rpc_wait_ms()));
    CU_ASSERT(rpc_log_wait(&out, "plugin 'mcp' asked for its tools to be "
                                 "listed again: server 'f': tools/list "
                                 "after its list_changed lists other tools",
                           rpc_wait_ms()));
    bool grown = false;
    for (int64_t end = now_ms() + rpc_wait_ms(); !grown && now_ms() < end;)
        if (!(grown = listed(c, "f_t2")))
            rpc_log_wait(&out, "mcp g2 changed", 100);
    CU_ASSERT(grown);
    pthread_mutex_lock(&f.mu);
    CU_ASSERT_STRING_EQUAL(f.last_id[0], "");
    CU_ASSERT_STRING_EQUAL(f.last_id[1], "e1");
    if (strcmp(f.last_id[1], "e1")) {
        fprintf(stderr, "\nGETs %u, Last-Event-IDs '%s' '%s'\n", f.gets,
                f.last_id[0], f.last_id[1]);
        rpc_dump_log(&out);
    }
    pthread_mutex_unlock(&f.mu);
    th_rpc_client_close(c);
    /* fini closes the open stream: the host stops in time */
    CU_ASSERT_EQUAL(rpc_srv_stop(&out, SIGTERM), 0);
    rpc_srv_free(&out);
    f_stop(&f);
}

/* A GET stream that gives one event and drops, again and again, backs
 * off as one that gives none: restart_initial doubled each time (an
 * event is no sign that it works), the session still serving calls. */
static void test_get_flap(void)
{
    th_test_timeout(60);
    fsrv f;
    CU_ASSERT_FATAL(f_start(&f, false) == 0);
    pthread_mutex_lock(&f.mu);
    f.flap = true;
    pthread_mutex_unlock(&f.mu);
    rpc_srv out;
    CU_ASSERT_FATAL(f_outer(&out, &f) == 0);
    th_rpc_client *c = rpc_connect(&out);
    CU_ASSERT_FATAL(c != NULL);
    static const char *const waits[] = {"50ms", "100ms", "200ms", "400ms"};
    for (size_t i = 0; i < sizeof waits / sizeof *waits; i++) {
        char want[160];
        snprintf(want, sizeof want, "server 'f': its GET stream ended (HTTP "
                 "status 200): again in %s", waits[i]);
        bool seen = rpc_log_wait(&out, want, rpc_wait_ms());
        CU_ASSERT(seen);
        if (!seen)
            rpc_dump_log(&out);
    }
    CU_ASSERT(call_says(c, "[\"f_t1\", {}]", "ok"));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&out, SIGTERM), 0);
    rpc_srv_free(&out);
    f_stop(&f);
}

/* A server without a GET stream (405): logged once, the session lives. */
static void test_get_405(void)
{
    th_test_timeout(60);
    fsrv f;
    CU_ASSERT_FATAL(f_start(&f, true) == 0);
    rpc_srv out;
    CU_ASSERT_FATAL(f_outer(&out, &f) == 0);
    th_rpc_client *c = rpc_connect(&out);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(rpc_log_wait(&out, "server 'f' offers no GET stream (HTTP "
                                 "405)",
                           rpc_wait_ms()));
    CU_ASSERT(call_says(c, "[\"f_t1\", {}]", "ok"));
    CU_ASSERT_EQUAL(rpc_log_count(&out, "offers no GET stream"), 1);
    pthread_mutex_lock(&f.mu);
    CU_ASSERT_EQUAL(f.gets, 1);
    pthread_mutex_unlock(&f.mu);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&out, SIGTERM), 0);
    rpc_srv_free(&out);
    f_stop(&f);
}

void th_suite_mcp_source_oauth(void)
{
    CU_pSuite s = CU_add_suite("mcp_source_oauth", suite_init, suite_clean);
    CU_add_test(s, "flow", test_flow);
    CU_add_test(s, "get_flap", test_get_flap);
    CU_add_test(s, "expiry", test_expiry);
    CU_add_test(s, "refusals", test_refusals);
    CU_add_test(s, "plain_url", test_plain_url);
    CU_add_test(s, "get_stream", test_get_stream);
    CU_add_test(s, "get_405", test_get_405);
}
