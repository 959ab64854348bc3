/* test_att34.c - attacks on what landed after 06073d6: isolated
 * write_block() (BLOCK frames) and content errors, the openapi plugin's
 * keep_alive pool, cookie parameters and redirects, the mcp plugin's
 * OAuth waits.  Through the real `toolhost serve` over msgpack-RPC (and
 * `toolhost mcp` over stdio); the HTTP servers are libmicrohttpd on
 * 127.0.0.1, port 0.
 *
 * iso_blocks: an isolated plugin (tests/fixtures/att34_blocks.c) floods
 *   blocks far past the call's budget and past the host's per-call queue
 *   (ISO_QUEUE_MAX), forges well-formed BLOCK frames for a call id the
 *   host never gave (small, and 1 MiB; one of 20 MiB passes
 *   worker_max_frame and gets its worker killed), and dies in the middle
 *   of its blocks: the budget holds (logged), the forged blocks reach no
 *   call, the death fails its call plugin_crashed, and the host keeps
 *   serving;
 *   blocks written after a cancel are refused to the plugin (ECANCELLED);
 *   a resource read whose worker forges a call's frames (BLOCK, WRITE,
 *   META, PROGRESS) for its own ask's id is answered, the frames dropped.
 * iso_content_mcp: an isolated plugin's resource read that crashes or
 *   hangs, over MCP stdio: a JSON-RPC error naming plugin_crashed or the
 *   content_timeout.
 * oa_pool_per_api: two APIs on the same host and port, one allowed a
 *   private address and one not: a connection the first keeps is never
 *   used by the second (its calls are still refused).
 * oa_server_restart: the API's server goes away with the kept connection
 *   and comes back on the same port: the next call still succeeds.
 * oa_concurrent: calls from many clients at once with keep_alive 2: all
 *   succeed, and the next calls reuse a kept connection.
 * oa_cookie_values: cookie values that try to add a cookie or a header
 *   (semicolon, CR LF, space, quote, non-ASCII) fail the call naming the
 *   parameter; the server never sees them; a plain value is sent.
 * oa_redirect_scheme: a redirect from the http base URL to https on the
 *   same host and port is another origin (RFC 6454): no credentials or
 *   cookies, and the private-address rule of a foreign hop applies.
 * oauth_fini_hung: the mcp plugin's OAuth token endpoint hangs (oauth
 *   timeout 5 minutes): eight calls waiting for that fetch, cancelled at
 *   once, end cancelled; the host told to stop exits at once. */
#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/petstore.h"
#include "common/th_test.h"
#include "test_rpc_harness.h"

/* ---- isolated write_block() ------------------------------------------- */

static const char *user_line(void)
{
    return geteuid() == 0 ? "    user: auto\n" : "";
}

static const msgpack_object *content_of(const msgpack_object *res)
{
    return th_rpc_map_get(
        th_rpc_map_get(th_rpc_map_get(res, "meta"), "toolhost"), "content");
}

static size_t n_blocks(const msgpack_object *res)
{
    const msgpack_object *c = content_of(res);
    return c && c->type == MSGPACK_OBJECT_ARRAY ? c->via.array.size : 0;
}

static void test_iso_blocks(void)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "  - name: att34_blocks\n"
             "    path: @BUILD@/fixtures/att34_blocks.so\n"
             "    isolation: process\n"
             "%s"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             user_line());
    rpc_srv s;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;

    /* 2000 blocks of 1000 bytes: the worker's write_block() counts them
     * against the call's budget, as in process (what its stdout may
     * hold, text: 8000 bytes, sent with the call): it takes what fits,
     * refuses the rest to the plugin, logs it; the host keeps the same */
    CU_ASSERT_FATAL(rpc_call(c, "tools.call",
                             "[\"ab_flood\", {\"n\": 2000, \"size\": 1000}]",
                             &r) == 0);
    size_t kept = r.res ? n_blocks(r.res) : 0;
    char want[64];
    snprintf(want, sizeof want, "sent %zu refused %zu", kept, 2000 - kept);
    CU_ASSERT(r.res && rpc_ok(r.res) && rpc_stdout_is(r.res, want));
    CU_ASSERT(kept >= 1 && kept <= 8);
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_wait(&s, "the content passes 8000 bytes",
                           rpc_wait_ms()));

    /* 300 blocks of 64 KiB (19 MiB): every one past the budget,
     * refused in the worker, none sent to the host nor kept */
    CU_ASSERT_FATAL(rpc_call(c, "tools.call",
                             "[\"ab_flood\", {\"n\": 300, \"size\": 65536}]",
                             &r) == 0);
    CU_ASSERT(r.res && rpc_ok(r.res) &&
              rpc_stdout_is(r.res, "sent 0 refused 300"));
    CU_ASSERT(r.res && n_blocks(r.res) == 0);
    rpc_res_free(&r);

    /* the budget is the call's: the next call's blocks are taken */
    CU_ASSERT_FATAL(rpc_call(c, "tools.call",
                             "[\"ab_flood\", {\"n\": 2, \"size\": 16}]",
                             &r) == 0);
    CU_ASSERT(r.res && rpc_ok(r.res) && n_blocks(r.res) == 2);
    rpc_res_free(&r);

    /* a well-formed BLOCK for a call the host never gave: no call gets
     * it (nor this one); a 1 MiB one the same */
    static const char *const forged[] = {
        "[\"ab_forge\", {\"id\": 999999, \"size\": 16}]",
        "[\"ab_forge\", {\"id\": 0, \"size\": 16}]",
        "[\"ab_forge\", {\"id\": 123456789, \"size\": 1048576}]"};
    for (size_t i = 0; i < sizeof forged / sizeof *forged; i++) {
        CU_ASSERT_FATAL(rpc_call(c, "tools.call", forged[i], &r) == 0);
        CU_ASSERT(r.res && rpc_ok(r.res) && rpc_stdout_is(r.res, "forged"));
        CU_ASSERT(r.res && n_blocks(r.res) == 0);
        rpc_res_free(&r);
    }
    /* a 20 MiB one passes worker_max_frame (16 MiB + 64 KiB; a worker's
     * own blocks are at most 16 MiB): killed on its header, before the
     * host reads the body (docs/isolation.md, "Frames from a worker") */
    CU_ASSERT_FATAL(rpc_call(c, "tools.call",
                             "[\"ab_forge\", {\"id\": 123456789, "
                             "\"size\": 20971520}]",
                             &r) == 0);
    CU_ASSERT(r.res && rpc_tool_error_is(r.res, "plugin_crashed"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_wait(&s, "more than worker_max_frame", rpc_wait_ms()));

    /* a worker that dies between its blocks: the call fails
     * plugin_crashed, the next call gets a new worker */
    CU_ASSERT_FATAL(rpc_call(c, "tools.call", "[\"ab_die\", {\"n\": 50}]",
                             &r) == 0);
    CU_ASSERT(r.res && !rpc_ok(r.res) &&
              rpc_tool_error_is(r.res, "plugin_crashed"));
    rpc_res_free(&r);
    CU_ASSERT_FATAL(rpc_call(c, "tools.call",
                             "[\"ab_flood\", {\"n\": 1, \"size\": 16}]",
                             &r) == 0);
    CU_ASSERT(r.res && rpc_ok(r.res) && n_blocks(r.res) == 1);
    rpc_res_free(&r);

    /* blocks written while the call is cancelled: write_block()
     * refuses them in the worker (ECANCELLED), the call ends cancelled */
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call", "[\"ab_until_cancel\", {}]");
    CU_ASSERT(rpc_wait_running(&s, 1));
    rpc_raw_request(&w, 2, "tools.cancel", "[1]");
    const msgpack_object *m1 = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT(m1 && m1->via.array.size == 4 &&
              rpc_tool_error_is(&m1->via.array.ptr[3], "cancelled"));
    rpc_raw_close(&w);
    CU_ASSERT(rpc_log_wait(&s, "blocks refused: -3 after", rpc_wait_ms()));

    /* a resource read (an ask: no call behind it) whose worker forges
     * the frames only a call has (BLOCK, WRITE, META, PROGRESS) for
     * every id, its own among them: dropped, the read answers, the host
     * lives */
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_FATAL(rpc_call(c, "resources.read", "[\"ab://forge\"]",
                                 &r) == 0);
        const msgpack_object *ct =
            r.res ? th_rpc_map_get(r.res, "contents") : NULL;
        const msgpack_object *t =
            ct && ct->type == MSGPACK_OBJECT_ARRAY && ct->via.array.size == 1
                ? th_rpc_map_get(&ct->via.array.ptr[0], "text")
                : NULL;
        const char *tp = NULL;
        size_t tn = 0;
        CU_ASSERT(t && th_rpc_obj_str(t, &tp, &tn) && tn == 4 &&
                  !memcmp(tp, "fine", 4));
        rpc_res_free(&r);
    }
    CU_ASSERT(rpc_log_wait(&s, "sent a call's output for a request that is "
                               "not a call: dropped", rpc_wait_ms()));

    th_rpc_client_close(c);
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- isolated content errors over MCP --------------------------------- */

/* `toolhost mcp` (stdio) with an isolated plugin whose reads crash and
 * hang: each resources/read fails with a JSON-RPC error (-32603, the one
 * MCP code for both) whose message names what happened and whose
 * data.code is toolhost's code (plugin_crashed, timeout). */
static void test_iso_content_mcp(void)
{
    char *dir = th_test_tmpdir();
    char text[2048];
    snprintf(text, sizeof text,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "plugins:\n"
             "  - name: bad\n"
             "    path: %s/fixtures/iso_content_bad.so\n"
             "    isolation: process\n"
             "    crash_loop: 1000\n"
             "    content_timeout: %lldms\n"
             "%s"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             TH_BUILD_DIR, (long long)th_test_ms(1000), user_line());
    char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
    /* the answers come in the order the reads end: told apart by id */
    const char *in =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
        "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"
        "\"clientInfo\":{\"name\":\"att34\",\"version\":\"1\"}}}\n"
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"resources/read\","
        "\"params\":{\"uri\":\"bad://crash\"}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"resources/read\","
        "\"params\":{\"uri\":\"bad://hang\"}}\n";
    th_test_run r;
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c", cfg,
                    NULL};
    CU_ASSERT_EQUAL_FATAL(th_test_run_argv(argv, in, 60, 1, &r), 0);
    CU_ASSERT_EQUAL(r.status, 0);
    int seen = 0;
    char *save = NULL;
    for (char *line = r.out ? strtok_r(r.out, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(line, 0, NULL);
        json_int_t id = json_integer_value(json_object_get(j, "id"));
        json_t *e = json_object_get(j, "error");
        const char *msg = json_string_value(json_object_get(e, "message"));
        json_int_t code = json_integer_value(json_object_get(e, "code"));
        const char *dc = json_string_value(
            json_object_get(json_object_get(e, "data"), "code"));
        if (id == 2) {
            seen++;
            CU_ASSERT(code == -32603 && msg &&
                      strstr(msg, "failed: plugin_crashed ("));
            CU_ASSERT(dc && strcmp(dc, "plugin_crashed") == 0);
        } else if (id == 3) {
            seen++;
            CU_ASSERT(code == -32603 && msg &&
                      strstr(msg, "(content_timeout)"));
            CU_ASSERT(dc && strcmp(dc, "timeout") == 0);
        }
        json_decref(j);
    }
    CU_ASSERT_EQUAL(seen, 2);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* ---- the openapi plugin ----------------------------------------------- */

typedef struct fx {
    petsrv srv;
    rpc_srv s;
    th_rpc_client *c;
} fx;

static int counter(petsrv *p, int *what)
{
    pthread_mutex_lock(&p->mu);
    int n = *what;
    pthread_mutex_unlock(&p->mu);
    return n;
}

static void last_cookie(petsrv *p, char *out, size_t n)
{
    pthread_mutex_lock(&p->mu);
    snprintf(out, n, "%s", p->last_cookie);
    pthread_mutex_unlock(&p->mu);
}

/* The pet store, then the openapi plugin with `apis` (its base URL
 * ${OA_TEST_URL}, the document @SPEC@). */
static int fx_start(fx *f, const char *apis_fmt)
{
    memset(f, 0, sizeof *f);
    if (petsrv_start(&f->srv, 0) != 0)
        return -1;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", f->srv.port);
    setenv("OA_TEST_URL", url, 1);
    setenv("OA_TEST_TOKEN", PETSRV_TOKEN, 1);
    const char *spec = th_test_source_path("tests/openapi/petstore.yaml");
    char apis[3000];
    snprintf(apis, sizeof apis, apis_fmt, spec, spec);
    char cfg[4000];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "plugins:\n"
             "  - name: openapi\n"
             "    path: @BUILD@/plugins/openapi.so\n"
             "    config:\n"
             "      apis:\n"
             "%s"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n"
             "    permissions:\n"
             "      rules:\n"
             "        - {flag: open_world, action: allow}\n",
             apis);
    rpc_opts o = {.config = cfg};
    if (rpc_srv_start(&f->s, &o) != 0)
        return -1;
    f->c = rpc_connect(&f->s);
    return f->c ? 0 : -1;
}

static void fx_stop(fx *f)
{
    if (f->c)
        th_rpc_client_close(f->c);
    if (f->s.pid > 0) {
        CU_ASSERT_EQUAL(rpc_srv_stop(&f->s, SIGTERM), 0);
        rpc_srv_free(&f->s);
    }
    petsrv_stop(&f->srv);
}

static const msgpack_object *call(th_rpc_client *c, const char *tool,
                                  const char *args, rpc_res *r)
{
    char p[4096];
    snprintf(p, sizeof p, "[\"%s\", %s]", tool, args);
    if (rpc_call(c, "tools.call", p, r) != 0)
        return NULL;
    return r->res;
}

static bool stderr_has(const msgpack_object *res, const char *needle)
{
    const msgpack_object *o = th_rpc_map_get(res, "stderr");
    const char *p;
    size_t n;
    return o && th_rpc_obj_str(o, &p, &n) &&
           memmem(p, n, needle, strlen(needle)) != NULL;
}

#define PETS_API                                                           \
    "        - name: pets\n"                                               \
    "          spec: %s\n"                                                 \
    "          base_url: ${OA_TEST_URL}\n"                                 \
    "          allow_private: true\n"                                      \
    "          include: [listPets, getInventory]\n"                        \
    "          auth: {bearer_env: OA_TEST_TOKEN}\n"

static void test_oa_pool_per_api(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, PETS_API
                             "        - name: strict\n"
                             "          spec: %s\n"
                             "          base_url: ${OA_TEST_URL}\n"
                             "          prefix: strict_\n"
                             "          include: [getInventory]\n"
                             "          auth: {bearer_env: OA_TEST_TOKEN}\n")
                    == 0);
    for (int i = 0; i < 3; i++) {
        rpc_res r;
        /* the first API's call leaves a connection to 127.0.0.1 kept */
        const msgpack_object *res = call(f.c, "getInventory", "{}", &r);
        CU_ASSERT(res && rpc_ok(res));
        rpc_res_free(&r);
        /* the second may not use it: refused as ever */
        res = call(f.c, "strict_getInventory", "{}", &r);
        CU_ASSERT(res && !rpc_ok(res) &&
                  stderr_has(res, "refused to connect to 127.0.0.1"));
        rpc_res_free(&r);
    }
    CU_ASSERT_EQUAL(counter(&f.srv, &f.srv.connections), 1);
    fx_stop(&f);
}

static void test_oa_server_restart(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, PETS_API) == 0);
    rpc_res r;
    const msgpack_object *res = call(f.c, "getInventory", "{}", &r);
    CU_ASSERT(res && rpc_ok(res));
    rpc_res_free(&r);
    /* the server goes, closing the kept connection, and comes back on
     * the same port */
    int port = f.srv.port;
    petsrv_stop(&f.srv);
    CU_ASSERT_FATAL(petsrv_start(&f.srv, port) == 0);
    for (int i = 0; i < 3; i++) {
        res = call(f.c, "getInventory", "{}", &r);
        CU_ASSERT(res && rpc_ok(res));
        rpc_res_free(&r);
    }
    CU_ASSERT_EQUAL(counter(&f.srv, &f.srv.connections), 1);
    fx_stop(&f);
}

typedef struct conc {
    rpc_srv *s;
    int ok;
} conc;

static void *conc_main(void *arg)
{
    conc *k = arg;
    th_rpc_client *c = rpc_connect(k->s);
    for (int i = 0; c && i < 4; i++) {
        rpc_res r;
        const msgpack_object *res = call(c, "listPets", "{}", &r);
        if (res && rpc_ok(res))
            k->ok++;
        rpc_res_free(&r);
    }
    if (c)
        th_rpc_client_close(c);
    return NULL;
}

static void test_oa_concurrent(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, PETS_API "          keep_alive: 2\n") == 0);
    enum { N = 8 };
    conc k[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        k[i] = (conc){.s = &f.s};
        CU_ASSERT_FATAL(pthread_create(&t[i], NULL, conc_main, &k[i]) == 0);
    }
    int ok = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        ok += k[i].ok;
    }
    CU_ASSERT_EQUAL(ok, N * 4);
    /* no call opened more than one connection */
    int conns = counter(&f.srv, &f.srv.connections);
    CU_ASSERT(conns >= 1 && conns <= N * 4);
    /* and the pool still serves, from a kept handle: no new connection */
    for (int i = 0; i < 2; i++) {
        rpc_res r;
        const msgpack_object *res = call(f.c, "listPets", "{}", &r);
        CU_ASSERT(res && rpc_ok(res));
        rpc_res_free(&r);
    }
    CU_ASSERT_EQUAL(counter(&f.srv, &f.srv.connections), conns);
    fx_stop(&f);
}

static void test_oa_cookie_values(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, PETS_API) == 0);
    static const char *const bad[] = {
        "a;admin=1", "a\\r\\nX-Evil: 1", "a b", "\\\"q\\\"", "caf\\u00e9",
        "a,b", "a\\\\b"};
    rpc_res r;
    const msgpack_object *res = call(f.c, "listPets", "{\"view\": \"dark\"}",
                                     &r);
    CU_ASSERT(res && rpc_ok(res));
    rpc_res_free(&r);
    char ck[256];
    last_cookie(&f.srv, ck, sizeof ck);
    CU_ASSERT_STRING_EQUAL(ck, "view=dark");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char args[128];
        snprintf(args, sizeof args, "{\"view\": \"%s\"}", bad[i]);
        res = call(f.c, "listPets", args, &r);
        /* refused by the plugin, naming the parameter */
        CU_ASSERT(res && !rpc_ok(res));
        if (res)
            CU_ASSERT(stderr_has(res, "cookie parameter 'view' must be "
                                      "printable ASCII"));
        rpc_res_free(&r);
        last_cookie(&f.srv, ck, sizeof ck);
        CU_ASSERT_STRING_EQUAL(ck, "view=dark");
    }
    /* the cookie parameters the document could not offer are not there */
    res = call(f.c, "listPets", "{\"list;all\": \"x\"}", &r);
    CU_ASSERT(!res || !rpc_ok(res));
    rpc_res_free(&r);
    fx_stop(&f);
}

/* ---- a redirect to https on the base URL's host and port -------------- */

typedef struct rsrv {
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    int secure_hits;
} rsrv;

static enum MHD_Result rs_req(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)method, (void)version, (void)upload, (void)upload_size,
        (void)con_cls;
    rsrv *s = cls;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(2, (void *)"{}", MHD_RESPMEM_PERSISTENT);
    unsigned code = 200;
    if (!strcmp(url, "/v1/up")) {
        char loc[128];
        snprintf(loc, sizeof loc, "https://127.0.0.1:%d/v1/secure", s->port);
        MHD_add_response_header(r, "Location", loc);
        code = 302;
    } else {
        pthread_mutex_lock(&s->mu);
        s->secure_hits++;
        pthread_mutex_unlock(&s->mu);
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result rc = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return rc;
}

static void test_oa_redirect_scheme(void)
{
    rsrv s = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    s.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
                           rs_req, &s, MHD_OPTION_SOCK_ADDR, &sa,
                           MHD_OPTION_END);
    CU_ASSERT_FATAL(s.d != NULL);
    s.port = MHD_get_daemon_info(s.d, MHD_DAEMON_INFO_BIND_PORT)->port;
    char *dir = th_test_tmpdir();
    char *spec = th_test_write_file(dir, "up.yaml",
                                    "openapi: 3.0.3\n"
                                    "info: {title: up, version: '1'}\n"
                                    "paths:\n"
                                    "  /up:\n"
                                    "    get:\n"
                                    "      operationId: goUp\n"
                                    "      responses:\n"
                                    "        '200': {description: ok}\n",
                                    (size_t)-1);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", s.port);
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "plugins:\n"
             "  - name: openapi\n"
             "    path: @BUILD@/plugins/openapi.so\n"
             "    config:\n"
             "      apis:\n"
             "        - name: up\n"
             "          spec: %s\n"
             "          base_url: %s\n"
             "          allow_private: true\n"
             "          max_redirects: 2\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n"
             "    permissions:\n"
             "      rules:\n"
             "        - {flag: open_world, action: allow}\n",
             spec, url);
    rpc_srv srv;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(&srv, &o) == 0);
    th_rpc_client *c = rpc_connect(&srv);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    const msgpack_object *res = call(c, "goUp", "{}", &r);
    /* another origin on a private address: refused before connecting
     * (not a TLS handshake with the base URL's server) */
    CU_ASSERT(res && !rpc_ok(res) &&
              stderr_has(res, "refused to connect to 127.0.0.1"));
    rpc_res_free(&r);
    pthread_mutex_lock(&s.mu);
    CU_ASSERT_EQUAL(s.secure_hits, 0);
    pthread_mutex_unlock(&s.mu);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&srv, SIGTERM), 0);
    rpc_srv_free(&srv);
    MHD_stop_daemon(s.d);
    free(spec);
    th_test_rmtree(dir);
    free(dir);
}

/* ---- the mcp plugin: shutdown while its token endpoint hangs ---------- */

/* A Streamable HTTP MCP server wanting the bearer token "t1" (one tool,
 * t, whose calls it refuses with 401; list_changed offered, its GET
 * stream always 401), and the token endpoint: the first ask gets t1,
 * every later one hangs. */
typedef struct hsrv {
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int token_asks;  /* requests that reached the token endpoint */
    int get_asks;    /* GET /mcp */
    int calls_refused; /* tools/call answered 401 */
    bool released;   /* the hung token asks may end */
} hsrv;

typedef struct hbody {
    char b[8192];
    size_t n;
} hbody;

static enum MHD_Result hs_answer(struct MHD_Connection *c, unsigned code,
                                 const char *body, bool bearer)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (body[0])
        MHD_add_response_header(r, "Content-Type", "application/json");
    if (bearer)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result rc = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result hs_req(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)version;
    hsrv *s = cls;
    if (!*con_cls) { /* the headers: the body comes next */
        if (!(*con_cls = calloc(1, sizeof(hbody))))
            return MHD_NO;
        return MHD_YES;
    }
    hbody *hb = *con_cls;
    if (*upload_size) {
        size_t k = *upload_size < sizeof hb->b - 1 - hb->n
                       ? *upload_size
                       : sizeof hb->b - 1 - hb->n;
        memcpy(hb->b + hb->n, upload, k);
        hb->n += k;
        *upload_size = 0;
        return MHD_YES;
    }
    if (!strcmp(url, "/token")) {
        pthread_mutex_lock(&s->mu);
        int n = ++s->token_asks;
        pthread_cond_broadcast(&s->cv);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 120;
        while (n > 1 && !s->released &&
               pthread_cond_timedwait(&s->cv, &s->mu, &ts) == 0)
            ;
        pthread_mutex_unlock(&s->mu);
        return hs_answer(c, n > 1 ? 503 : 200,
                         n > 1 ? "{}"
                               : "{\"access_token\": \"t1\", \"token_type\": "
                                 "\"Bearer\", \"expires_in\": 3600}",
                         false);
    }
    const char *au =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!strcmp(method, "GET")) {
        pthread_mutex_lock(&s->mu);
        s->get_asks++;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        return hs_answer(c, 401, "", true);
    }
    if (!au || strcmp(au, "Bearer t1"))
        return hs_answer(c, 401, "", true);
    json_t *m = json_loadb(hb->b, hb->n, 0, NULL);
    const char *meth = json_string_value(json_object_get(m, "method"));
    json_t *id = json_object_get(m, "id");
    char out[1024] = "";
    if (id && meth && !strcmp(meth, "initialize"))
        snprintf(out, sizeof out,
                 "{\"jsonrpc\": \"2.0\", \"id\": %lld, \"result\": "
                 "{\"protocolVersion\": \"2025-06-18\", \"capabilities\": "
                 "{\"tools\": {\"listChanged\": true}}, \"serverInfo\": "
                 "{\"name\": \"hung\", \"version\": \"1\"}}}",
                 (long long)json_integer_value(id));
    else if (id && meth && !strcmp(meth, "tools/call")) {
        /* the token is refused: the call fetches a new one */
        pthread_mutex_lock(&s->mu);
        s->calls_refused++;
        pthread_mutex_unlock(&s->mu);
        json_decref(m);
        return hs_answer(c, 401, "", true);
    } else if (id)
        snprintf(out, sizeof out,
                 "{\"jsonrpc\": \"2.0\", \"id\": %lld, \"result\": "
                 "{\"tools\": [{\"name\": \"t\", \"description\": "
                 "\"waits\", \"inputSchema\": {\"type\": \"object\"}}]}}",
                 (long long)json_integer_value(id));
    json_decref(m);
    return hs_answer(c, out[0] ? 200 : 202, out, false);
}

static void hs_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    free(*con_cls);
    *con_cls = NULL;
}

/* host.stats manager.running is n (within rpc_wait_ms()). */
static bool running_is(rpc_srv *s, uint64_t n)
{
    th_rpc_client *c = rpc_connect(s);
    if (!c)
        return false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    uint64_t v;
    while ((v = rpc_mgr_stat(c, "running")) != n && rpc_now_ms() < end)
        rpc_log_wait(s, "no such line", 5); /* the clock, bounded */
    th_rpc_client_close(c);
    return v == n;
}

static bool hs_wait_asked(hsrv *s, int n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += rpc_wait_ms() / 1000 + 1;
    pthread_mutex_lock(&s->mu);
    while (s->token_asks < n &&
           pthread_cond_timedwait(&s->cv, &s->mu, &ts) == 0)
        ;
    bool ok = s->token_asks >= n;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* The server's GET stream is refused (401): the plugin's listener
 * fetches a token again, and the token endpoint hangs (oauth.timeout 5
 * minutes).  The host told to stop then exits at once, not when that
 * fetch's timeout ends it (rpc_srv_stop kills it after 24 s: -1). */
static void test_oauth_fini_hung(void)
{
    hsrv s = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    s.d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
        NULL, NULL, hs_req, &s, MHD_OPTION_SOCK_ADDR, &sa,
        MHD_OPTION_NOTIFY_COMPLETED, hs_done, NULL, MHD_OPTION_END);
    CU_ASSERT_FATAL(s.d != NULL);
    s.port = MHD_get_daemon_info(s.d, MHD_DAEMON_INFO_BIND_PORT)->port;
    setenv("ATT34_SECRET", "att34-secret", 1);
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  workers: 16\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "  - name: mcp\n"
             "    path: @BUILD@/plugins/mcp.so\n"
             "    config:\n"
             "      servers:\n"
             "        - name: hung\n"
             "          url: http://127.0.0.1:%d/mcp\n"
             "          oauth:\n"
             "            client_id: att34\n"
             "            client_secret_env: ATT34_SECRET\n"
             "            token_url: http://127.0.0.1:%d/token\n"
             "            timeout: 5m\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             s.port, s.port);
    rpc_srv srv;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(&srv, &o) == 0);
    /* the listener's fetch is in the token endpoint */
    CU_ASSERT(hs_wait_asked(&s, 2));
    CU_ASSERT(rpc_alive(&srv));
    /* eight calls refused 401 wait for that fetch (one at a time per
     * server); all cancelled at once, each ends cancelled while the
     * endpoint still hangs, no new fetch started for them */
    enum { N = 8 };
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &srv) == 0);
    for (uint64_t id = 1; id <= N; id++)
        rpc_raw_request(&w, id, "tools.call", "[\"hung_t\", {}]");
    CU_ASSERT(rpc_wait_running(&srv, N));
    for (uint64_t id = 1; id <= N; id++) {
        char p[32];
        snprintf(p, sizeof p, "[%llu]", (unsigned long long)id);
        rpc_raw_request(&w, 100 + id, "tools.cancel", p);
    }
    for (uint64_t id = 1; id <= N; id++) {
        const msgpack_object *m = rpc_raw_response(&w, id, rpc_wait_ms());
        CU_ASSERT(m && m->via.array.size == 4 &&
                  rpc_tool_error_is(&m->via.array.ptr[3], "cancelled"));
    }
    rpc_raw_close(&w);
    /* the plugin gave every call back (its run is over), the endpoint
     * still hanging */
    CU_ASSERT(running_is(&srv, 0));
    pthread_mutex_lock(&s.mu);
    CU_ASSERT_EQUAL(s.calls_refused, N);
    CU_ASSERT_EQUAL(s.token_asks, 2);
    pthread_mutex_unlock(&s.mu);
    CU_ASSERT(rpc_alive(&srv));
    CU_ASSERT_EQUAL(rpc_srv_stop(&srv, SIGTERM), 0);
    rpc_srv_free(&srv);
    pthread_mutex_lock(&s.mu);
    s.released = true;
    pthread_cond_broadcast(&s.cv);
    pthread_mutex_unlock(&s.mu);
    MHD_stop_daemon(s.d);
}

void th_suite_att34(void)
{
    CU_pSuite s = CU_add_suite("att34", NULL, NULL);
    CU_add_test(s, "iso_blocks", test_iso_blocks);
    CU_add_test(s, "iso_content_mcp", test_iso_content_mcp);
    CU_add_test(s, "oa_pool_per_api", test_oa_pool_per_api);
    CU_add_test(s, "oa_server_restart", test_oa_server_restart);
    CU_add_test(s, "oa_concurrent", test_oa_concurrent);
    CU_add_test(s, "oa_cookie_values", test_oa_cookie_values);
    CU_add_test(s, "oa_redirect_scheme", test_oa_redirect_scheme);
    CU_add_test(s, "oauth_fini_hung", test_oauth_fini_hung);
}
