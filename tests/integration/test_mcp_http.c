/* test_mcp_http.c - MCP over Streamable HTTP on the real `toolhost serve`:
 * the official SDK client (tests/mcp/http_client.mjs) for list, call,
 * progress, cancel and the token checks; raw HTTP over loopback TCP for
 * Origin, protocol version, sessions, the limits and misbehaving clients;
 * the Unix socket answering RPC at the same time. */
#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <nettle/sha2.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/stat.h>

#include "common/th_http.h"
#include "integration/test_rpc_harness.h"

#define ALICE "alice-token-0123456789abcdef"
#define BOB "bob-token-0123456789abcdef"
#define CAROL "carol-token-0123456789abcdef"
#define CAROL_ENV "TH_MCP_HTTP_TEST_CAROL"

typedef struct mh_srv {
    rpc_srv rs;
    char *tokdir;
    unsigned port;
} mh_srv;

/* Starts the host with an http:// entry next to its Unix socket; `mcp`
 * adds lines to the mcp section, `listen` replaces the http entry. */
static int mh_start_ex2(mh_srv *m, const char *mcp, const char *listen,
                        const char *public_extra)
{
    memset(m, 0, sizeof *m);
    m->tokdir = th_test_tmpdir();
    char *tf = th_test_write_file(m->tokdir, "alice.token", ALICE "\n",
                                  (size_t)-1);
    uint8_t d[32];
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(BOB), (const uint8_t *)BOB);
    sha256_digest(&ctx, 32, d);
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    setenv(CAROL_ENV, CAROL, 1);
    char host_extra[256], mcp_sec[1536], pub[256];
    snprintf(host_extra, sizeof host_extra, "  listen: [\"%s\"]\n",
             listen ? listen : "http://127.0.0.1:0/mcp");
    snprintf(mcp_sec, sizeof mcp_sec,
             "mcp:\n"
             "  allow_origins: [\"https://app.example\"]\n"
             "  tokens:\n"
             "    - {user: alice, file: %s}\n"
             "    - {user: bob, sha256: %s}\n"
             "    - {user: carol, env: " CAROL_ENV "}\n"
             "%s",
             tf, hex, mcp ? mcp : "");
    snprintf(pub, sizeof pub, "    allow_users: [alice, carol, \"%u\"]\n%s",
             (unsigned)getuid(), public_extra ? public_extra : "");
    free(tf);
    rpc_opts o = {.host_extra = host_extra, .plugins_extra = mcp_sec,
                  .public_extra = pub};
    if (rpc_srv_start(&m->rs, &o) != 0)
        return -1;
    m->port = th_test_log_port(m->rs.log, "(Streamable HTTP) on http");
    if (!m->port)
        rpc_dump_log(&m->rs);
    return m->port ? 0 : -1;
}

static int mh_start_ex(mh_srv *m, const char *mcp, const char *listen)
{
    return mh_start_ex2(m, mcp, listen, NULL);
}

static int mh_start(mh_srv *m, const char *mcp)
{
    return mh_start_ex(m, mcp, NULL);
}

static void mh_free(mh_srv *m)
{
    rpc_srv_free(&m->rs);
    if (m->tokdir)
        th_test_rmtree(m->tokdir);
    free(m->tokdir);
    unsetenv(CAROL_ENV);
}

/* ---- raw HTTP ------------------------------------------------------------------ */

typedef struct hres {
    int status;
    char *text; /* head and body, NUL-terminated */
} hres;

/* Reads until EOF, `until` appears (NULL: EOF only) or timeout_ms. */
static void http_read(int fd, hres *r, const char *until, int timeout_ms)
{
    r->status = th_test_http_read(fd, until, timeout_ms, &r->text);
}

static int http_do(unsigned port, const char *method, const char *hdrs,
                   const char *body, hres *r)
{
    memset(r, 0, sizeof *r);
    int fd = th_test_tcp_connect(port, 0);
    if (fd < 0 || th_test_http_send(fd, method, "/mcp", hdrs, body) != 0) {
        if (fd >= 0)
            close(fd);
        r->text = strdup("");
        return -1;
    }
    http_read(fd, r, NULL, rpc_wait_ms());
    close(fd);
    return r->status;
}

static bool has(const hres *r, const char *needle)
{
    bool ok = r->text && strcasestr(r->text, needle);
    if (!ok)
        fprintf(stderr, "\nno '%s' in the response:\n%.2000s\n", needle,
                r->text ? r->text : "");
    return ok;
}

#define AUTH(tok) "Authorization: Bearer " tok "\r\n"
#define INIT_BODY                                                             \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"  \
    "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"               \
    "\"clientInfo\":{\"name\":\"raw\",\"version\":\"1\"}}}"

/* Opens a session for `token`; 0 with its id in sid. */
static int mh_session(unsigned port, const char *token, char sid[80])
{
    char h[256];
    snprintf(h, sizeof h, "Authorization: Bearer %s\r\n", token);
    hres r;
    int st = http_do(port, "POST", h, INIT_BODY, &r);
    const char *p = r.text ? strcasestr(r.text, "Mcp-Session-Id: ") : NULL;
    sid[0] = '\0';
    if (st == 200 && p)
        sscanf(p + 16, "%79[0-9a-f]", sid);
    free(r.text);
    if (!sid[0])
        return st ? st : -1;
    char h2[512];
    snprintf(h2, sizeof h2, "%sMcp-Session-Id: %s\r\n", h, sid);
    http_do(port, "POST", h2,
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
            &r);
    st = r.status;
    free(r.text);
    return st == 202 ? 0 : -1;
}

static void sess_hdrs(char *out, size_t n, const char *token,
                      const char *sid)
{
    snprintf(out, n, "Authorization: Bearer %s\r\nMcp-Session-Id: %s\r\n",
             token, sid);
}

#define CALL_ECHO(id, text)                                                   \
    "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"tools/call\","        \
    "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"" text "\"}}}"

/* ---- the SDK client ------------------------------------------------------------ */

static const char *node_bin(void)
{
    static const char *const c[] = {"/usr/bin/node", "/usr/local/bin/node",
                                    NULL};
    for (int i = 0; c[i]; i++)
        if (access(c[i], X_OK) == 0)
            return c[i];
    return NULL;
}

static bool sdk_ready(void)
{
    struct stat st;
    return node_bin() &&
           stat(th_test_source_path("tests/mcp/node_modules/"
                                    "@modelcontextprotocol/sdk/package.json"),
                &st) == 0;
}

#define SDK_SKIP_MSG                                                          \
    "node or the MCP SDK is missing (install nodejs, run npm ci in "        \
    "tests/mcp)"

static void sdk_run(const char *scenario, unsigned port, const char *token,
                    const char *scheme, th_test_run *r)
{
    char url[128];
    snprintf(url, sizeof url, "%s://127.0.0.1:%u/mcp", scheme, port);
    char script[1024];
    snprintf(script, sizeof script, "%s",
             th_test_source_path("tests/mcp/http_client.mjs"));
    char *argv[] = {(char *)node_bin(), script, (char *)scenario, url,
                    (char *)token, NULL};
    memset(r, 0, sizeof *r);
    th_test_run_argv(argv, NULL, 40, 0, r);
}

static bool out_has(const th_test_run *r, const char *needle)
{
    bool ok = r->out && strstr(r->out, needle);
    if (!ok)
        fprintf(stderr, "\nno '%s' in the client's output:\n%s\n%s\n",
                needle, r->out ? r->out : "", r->err ? r->err : "");
    return ok;
}

/* list, call, progress, cancel, a call after it, close (DELETE). */
static void test_sdk_session(void)
{
    if (!sdk_ready())
        TH_SKIP(SDK_SKIP_MSG);
    mh_srv m;
    CU_ASSERT_FATAL(mh_start(&m, NULL) == 0);
    th_test_run r;
    sdk_run("full", m.port, ALICE, "http", &r);
    CU_ASSERT(out_has(&r, "{\"step\":\"connect\",\"ok\":true,\"session\":true"));
    CU_ASSERT(out_has(&r, "\"tools\":[\"echo\",\"echo_async\",\"text_count\"]"));
    CU_ASSERT(out_has(&r, "{\"step\":\"call\",\"ok\":true,\"text\":\"hello over http\"}"));
    CU_ASSERT(out_has(&r, "{\"step\":\"progress\",\"ok\":true,\"updates_ok\":true,\"text\":\"done\""));
    CU_ASSERT(out_has(&r, "{\"step\":\"cancel\",\"ok\":true"));
    CU_ASSERT(out_has(&r, "{\"step\":\"after\",\"ok\":true,\"text\":\"again\"}"));
    CU_ASSERT(out_has(&r, "{\"step\":\"close\",\"ok\":true}"));
    th_test_run_free(&r);
    CU_ASSERT(rpc_log_has(&m.rs, "cancelled by the client"));
    CU_ASSERT(rpc_log_has(&m.rs, "ended by the client"));
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* A permission that asks: elicitation/create goes out on the call's event
 * stream, the client's answer comes back as a POST (accept runs the call,
 * decline refuses it). */
static void test_sdk_permission(void)
{
    if (!sdk_ready())
        TH_SKIP(SDK_SKIP_MSG);
    mh_srv m;
    CU_ASSERT_FATAL(mh_start_ex2(&m, NULL, NULL,
                                 "    permissions:\n"
                                 "      rules:\n"
                                 "        - match: text_count\n"
                                 "          action: ask\n") == 0);
    th_test_run r;
    sdk_run("ask", m.port, ALICE, "http", &r);
    CU_ASSERT(out_has(&r, "{\"step\":\"accept\",\"ok\":true,\"text\":\"slow\\n\"}"));
    CU_ASSERT(out_has(&r, "{\"step\":\"decline\",\"ok\":true}"));
    th_test_run_free(&r);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* No token and a wrong one: 401; a token whose user no toolset allows:
 * 403; the tokens from a file, a hash and an environment variable work. */
static void test_sdk_tokens(void)
{
    th_test_timeout(180); /* node starts five times: 67 s beside a CPU hog */
    if (!sdk_ready())
        TH_SKIP(SDK_SKIP_MSG);
    mh_srv m;
    CU_ASSERT_FATAL(mh_start(&m, NULL) == 0);
    th_test_run r;
    sdk_run("connect", m.port, NULL, "http", &r);
    CU_ASSERT(out_has(&r, "\"ok\":false,\"status\":401"));
    th_test_run_free(&r);
    sdk_run("connect", m.port, "not-the-token-0123456789", "http", &r);
    CU_ASSERT(out_has(&r, "\"ok\":false,\"status\":401"));
    th_test_run_free(&r);
    sdk_run("connect", m.port, BOB, "http", &r);
    CU_ASSERT(out_has(&r, "\"ok\":false,\"status\":403"));
    th_test_run_free(&r);
    sdk_run("connect", m.port, ALICE, "http", &r);
    CU_ASSERT(out_has(&r, "{\"step\":\"connect\",\"ok\":true}"));
    th_test_run_free(&r);
    sdk_run("connect", m.port, CAROL, "http", &r);
    CU_ASSERT(out_has(&r, "{\"step\":\"connect\",\"ok\":true}"));
    th_test_run_free(&r);
    CU_ASSERT(rpc_log_has(&m.rs, "the token of 'bob' refused"));
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* ---- raw checks ----------------------------------------------------------------- */

static void test_refusals(void)
{
    mh_srv m;
    CU_ASSERT_FATAL(mh_start(&m, "  max_body: 1KiB\n") == 0);
    hres r;
    /* No token: 401 with the challenge; a wrong one: 401 invalid_token. */
    CU_ASSERT_EQUAL(http_do(m.port, "POST", NULL, INIT_BODY, &r), 401);
    CU_ASSERT(has(&r, "WWW-Authenticate: Bearer"));
    free(r.text);
    CU_ASSERT_EQUAL(http_do(m.port, "POST", AUTH("x-wrong-token-0123456789"),
                            INIT_BODY, &r),
                    401);
    CU_ASSERT(has(&r, "invalid_token"));
    free(r.text);
    CU_ASSERT_EQUAL(http_do(m.port, "POST", AUTH(BOB), INIT_BODY, &r), 403);
    free(r.text);
    /* Origin: a foreign one 403 (even with a good token); loopback and the
     * configured one pass. */
    CU_ASSERT_EQUAL(http_do(m.port, "POST",
                            AUTH(ALICE) "Origin: http://evil.example\r\n",
                            INIT_BODY, &r),
                    403);
    free(r.text);
    CU_ASSERT_EQUAL(http_do(m.port, "POST",
                            AUTH(ALICE) "Origin: http://127.0.0.1.evil.example\r\n",
                            INIT_BODY, &r),
                    403);
    free(r.text);
    CU_ASSERT_EQUAL(http_do(m.port, "POST",
                            AUTH(ALICE) "Origin: http://localhost:3000\r\n",
                            INIT_BODY, &r),
                    200);
    free(r.text);
    CU_ASSERT_EQUAL(http_do(m.port, "POST",
                            AUTH(ALICE) "Origin: https://app.example\r\n",
                            INIT_BODY, &r),
                    200);
    free(r.text);
    CU_ASSERT(rpc_log_has(&m.rs, "Origin 'http://evil.example' refused"));
    /* An unsupported protocol version: 400. */
    CU_ASSERT_EQUAL(http_do(m.port, "POST",
                            AUTH(ALICE) "MCP-Protocol-Version: 1999-01-01\r\n",
                            INIT_BODY, &r),
                    400);
    free(r.text);
    /* Sessions: none given 400, unknown 404; other methods 405; not JSON
     * 400 -32700. */
    CU_ASSERT_EQUAL(http_do(m.port, "POST", AUTH(ALICE), CALL_ECHO(2, "x"),
                            &r),
                    400);
    free(r.text);
    CU_ASSERT_EQUAL(http_do(m.port, "POST",
                            AUTH(ALICE) "Mcp-Session-Id: 0123abcd\r\n",
                            CALL_ECHO(2, "x"), &r),
                    404);
    free(r.text);
    CU_ASSERT_EQUAL(http_do(m.port, "PUT", AUTH(ALICE), NULL, &r), 405);
    free(r.text);
    CU_ASSERT_EQUAL(http_do(m.port, "POST", AUTH(ALICE), "{nope", &r), 400);
    CU_ASSERT(has(&r, "-32700"));
    free(r.text);
    /* A body over mcp.max_body: 413, logged. */
    char big[2048];
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    big[0] = '{';
    big[sizeof big - 2] = '}';
    CU_ASSERT_EQUAL(http_do(m.port, "POST", AUTH(ALICE), big, &r), 413);
    free(r.text);
    CU_ASSERT(rpc_log_has(&m.rs, "mcp.max_body)"));
    /* The same without Content-Length (chunked): cut while reading. */
    {
        int fd = th_test_tcp_connect(m.port, 0);
        CU_ASSERT_FATAL(fd >= 0);
        char req[4096];
        int n = snprintf(req, sizeof req,
                         "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Connection: close\r\n" AUTH(ALICE)
                         "Content-Type: application/json\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n"
                         "%zx\r\n%s\r\n0\r\n\r\n",
                         strlen(big), big);
        CU_ASSERT(write(fd, req, (size_t)n) == n);
        http_read(fd, &r, NULL, rpc_wait_ms());
        close(fd);
        CU_ASSERT_EQUAL(r.status, 413);
        free(r.text);
        CU_ASSERT(rpc_log_has(&m.rs, "refused (mcp.max_body)"));
    }
    /* A session of alice is not bob's nor carol's; DELETE ends it. */
    char sid[80], h[512];
    CU_ASSERT_FATAL(mh_session(m.port, ALICE, sid) == 0);
    sess_hdrs(h, sizeof h, CAROL, sid);
    CU_ASSERT_EQUAL(http_do(m.port, "POST", h, CALL_ECHO(3, "x"), &r), 404);
    free(r.text);
    sess_hdrs(h, sizeof h, ALICE, sid);
    CU_ASSERT_EQUAL(http_do(m.port, "POST", h, CALL_ECHO(3, "plain"), &r),
                    200);
    CU_ASSERT(has(&r, "Content-Type: application/json"));
    CU_ASSERT(has(&r, "plain"));
    free(r.text);
    /* A string id, read without a tree (plain) and by the tree (a _meta
     * key): each answered with its own id. */
    static const char *const same[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":\"p-1\",\"method\":\"tools/call\","
        "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"same\"}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":\"t-1\",\"method\":\"tools/call\","
        "\"params\":{\"_meta\":{},\"name\":\"echo\",\"arguments\":{\"text\":"
        "\"same\"}}}",
    };
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(http_do(m.port, "POST", h, same[i], &r), 200);
        CU_ASSERT(has(&r, i ? "\"id\":\"t-1\"" : "\"id\":\"p-1\""));
        CU_ASSERT(has(&r, "\"text\":\"same\""));
        CU_ASSERT(has(&r, "\"isError\":false"));
        free(r.text);
    }
    CU_ASSERT_EQUAL(http_do(m.port, "DELETE", h, NULL, &r), 200);
    free(r.text);
    CU_ASSERT_EQUAL(http_do(m.port, "POST", h, CALL_ECHO(4, "x"), &r), 404);
    free(r.text);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* mcp.max_sessions and mcp.session_idle bite, with a log line each. */
static void test_session_limits(void)
{
    /* session_idle long enough that the two sessions outlive the third
     * one's refusal on a busy machine; then their idle end is waited for
     * (the log line of each), not slept for. */
    mh_srv m;
    char mcp[128];
    snprintf(mcp, sizeof mcp, "  max_sessions: 2\n  session_idle: %ums\n",
             th_test_ms(2000));
    CU_ASSERT_FATAL(mh_start(&m, mcp) == 0);
    char a[80], b[80], c[80];
    CU_ASSERT_FATAL(mh_session(m.port, ALICE, a) == 0);
    CU_ASSERT_FATAL(mh_session(m.port, CAROL, b) == 0);
    CU_ASSERT_EQUAL(mh_session(m.port, ALICE, c), 503);
    CU_ASSERT(rpc_log_has(&m.rs, "(mcp.max_sessions)"));
    CU_ASSERT_EQUAL(rpc_log_count(&m.rs, "(mcp.session_idle): closed"), 0);
    /* Unused for longer than session_idle: gone, and room again. */
    int64_t end = rpc_now_ms() + th_test_ms(2000) + rpc_wait_ms();
    while (rpc_log_count(&m.rs, "(mcp.session_idle): closed") < 2 &&
           rpc_now_ms() < end)
        usleep(20 * 1000);
    CU_ASSERT_EQUAL(rpc_log_count(&m.rs, "(mcp.session_idle): closed"), 2);
    char h[512];
    hres r;
    sess_hdrs(h, sizeof h, ALICE, a);
    CU_ASSERT_EQUAL(http_do(m.port, "POST", h, CALL_ECHO(2, "x"), &r), 404);
    free(r.text);
    CU_ASSERT(rpc_log_has(&m.rs, "(mcp.session_idle): closed"));
    CU_ASSERT_EQUAL(mh_session(m.port, ALICE, c), 0);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* An id that is neither a string nor an integer (null too, on a
 * request) is refused at once with -32600, before any session or stream
 * exists: an initialize with id 1.5 used to leave its handler waiting
 * forever on a stream keyed by it, holding a session slot, so that
 * max_sessions of them made every later initialize answer 503. */
static void test_bad_ids(void)
{
    static const char *const ids[] = {"1.5", "true", "false", "[]", "{}",
                                      "1.0", "-0.0", "1e3", "null"};
    mh_srv m;
    CU_ASSERT_FATAL(mh_start(&m, "  max_sessions: 2\n") == 0);
    char sid[80];
    CU_ASSERT_FATAL(mh_session(m.port, ALICE, sid) == 0);
    char h[512];
    sess_hdrs(h, sizeof h, ALICE, sid);
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"initialize\","
                 "\"params\":{\"protocolVersion\":\"2025-06-18\","
                 "\"capabilities\":{},\"clientInfo\":{\"name\":\"raw\","
                 "\"version\":\"1\"}}}",
                 ids[i]);
        hres r;
        int st = http_do(m.port, "POST", AUTH(ALICE), body, &r);
        bool ok = st == 400 && has(&r, "-32600");
        free(r.text);
        snprintf(body, sizeof body,
                 "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"tools/call\","
                 "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":"
                 "\"x\"}}}",
                 ids[i]);
        int st2 = http_do(m.port, "POST", h, body, &r);
        ok = ok && st2 == 400 && has(&r, "-32600");
        free(r.text);
        if (!ok) {
            fprintf(stderr, "\nid %s: initialize %d, tools/call %d\n",
                    ids[i], st, st2);
            CU_FAIL("an invalid id was not refused at once");
            break;
        }
    }
    /* The one free slot is still free, for alice as for carol. */
    char b[80];
    CU_ASSERT_EQUAL(mh_session(m.port, CAROL, b), 0);
    hres r;
    CU_ASSERT_EQUAL(http_do(m.port, "POST", h, CALL_ECHO(7, "still"), &r),
                    200);
    CU_ASSERT(has(&r, "still"));
    free(r.text);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* A string id is at most 128 bytes: a longer one is refused with
 * -32600; one of 128 bytes that each escape to six (\u0001) still cancels
 * its call when the client hangs up (the cancel note used to overflow a
 * 256-byte buffer and was dropped). */
static void test_long_ids(void)
{
    mh_srv m;
    CU_ASSERT_FATAL(mh_start(&m, NULL) == 0);
    char sid[80], h[512];
    CU_ASSERT_FATAL(mh_session(m.port, ALICE, sid) == 0);
    sess_hdrs(h, sizeof h, ALICE, sid);
    char id[129 * 6 + 1], body[2048];
    memset(id, 'a', 129);
    id[129] = '\0';
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"method\":\"tools/call\","
             "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"x\"}}}",
             id);
    hres r;
    CU_ASSERT_EQUAL(http_do(m.port, "POST", h, body, &r), 400);
    CU_ASSERT(has(&r, "-32600"));
    free(r.text);
    id[0] = '\0';
    for (int i = 0; i < 128; i++)
        strcat(id, "\\u0001");
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"method\":\"tools/call\","
             "\"params\":{\"name\":\"echo_async\",\"arguments\":{\"text\":"
             "\"x\",\"steps\":200,\"delay_ms\":20}}}",
             id);
    int fd = th_test_tcp_connect(m.port, 0);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT(th_test_http_send(fd, "POST", "/mcp", h, body) == 0);
    close(fd); /* the handler, waiting for the call's first message, sees
                  the hang-up and cancels the call */
    CU_ASSERT(rpc_log_wait(&m.rs, "hung up: cancelled", rpc_wait_ms()));
    CU_ASSERT(rpc_log_wait(&m.rs, "cancelled by the client: the client "
                                  "hung up", rpc_wait_ms()));
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* One token's user holds at most mcp.max_sessions_per_user sessions (16
 * by default): past it that user gets 503 while another user still opens
 * one (max_sessions was shared by all, so one token could starve the
 * others for session_idle). */
static void test_sessions_per_user(void)
{
    mh_srv m;
    CU_ASSERT_FATAL(mh_start(&m, "  max_sessions: 24\n") == 0);
    char sid[80];
    for (int i = 0; i < 16; i++)
        CU_ASSERT_EQUAL_FATAL(mh_session(m.port, ALICE, sid), 0);
    CU_ASSERT_EQUAL(mh_session(m.port, ALICE, sid), 503);
    CU_ASSERT(rpc_log_has(&m.rs, "(mcp.max_sessions_per_user)"));
    CU_ASSERT_EQUAL(mh_session(m.port, CAROL, sid), 0);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
    /* The key sets it. */
    CU_ASSERT_FATAL(mh_start(&m, "  max_sessions_per_user: 2\n") == 0);
    CU_ASSERT_EQUAL(mh_session(m.port, ALICE, sid), 0);
    CU_ASSERT_EQUAL(mh_session(m.port, ALICE, sid), 0);
    CU_ASSERT_EQUAL(mh_session(m.port, ALICE, sid), 503);
    CU_ASSERT_EQUAL(mh_session(m.port, CAROL, sid), 0);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* Sends `head` (request line and headers, without the blank line) and
 * `body` as they are; the status, 0 without one. */
static int raw_do(unsigned port, const char *head, const char *body)
{
    int fd = th_test_tcp_connect(port, 0);
    if (fd < 0)
        return -1;
    char req[4096];
    int n = snprintf(req, sizeof req, "%sContent-Length: %zu\r\n\r\n%s",
                     head, strlen(body), body);
    hres r;
    memset(&r, 0, sizeof r);
    if (write(fd, req, (size_t)n) == n)
        http_read(fd, &r, "\r\n\r\n", rpc_wait_ms());
    close(fd);
    free(r.text);
    return r.status;
}

#define RAW_HEAD(ct)                                                          \
    "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"        \
    "Accept: application/json, text/event-stream\r\n" AUTH(ALICE)           \
    "Content-Type: " ct "\r\n"

/* The media type is compared whole (type/subtype, then parameters only),
 * and an Origin's port is a number 1..65535. */
static void test_strict_headers(void)
{
    mh_srv m;
    CU_ASSERT_FATAL(mh_start(&m, NULL) == 0);
    CU_ASSERT_EQUAL(raw_do(m.port, RAW_HEAD("application/jsonxyz"),
                           INIT_BODY), 415);
    CU_ASSERT_EQUAL(raw_do(m.port, RAW_HEAD("application/json-seq"),
                           INIT_BODY), 415);
    CU_ASSERT_EQUAL(raw_do(m.port, RAW_HEAD("application/json ; charset=utf-8"),
                           INIT_BODY), 200);
    CU_ASSERT_EQUAL(raw_do(m.port, RAW_HEAD("Application/JSON"), INIT_BODY),
                    200);
    CU_ASSERT_EQUAL(raw_do(m.port, RAW_HEAD("application/json")
                           "Origin: http://localhost:99999\r\n", INIT_BODY),
                    403);
    CU_ASSERT_EQUAL(raw_do(m.port, RAW_HEAD("application/json")
                           "Origin: http://127.0.0.1:0\r\n", INIT_BODY),
                    403);
    CU_ASSERT_EQUAL(raw_do(m.port, RAW_HEAD("application/json")
                           "Origin: http://[::1]:65535\r\n", INIT_BODY),
                    200);
    /* An unknown session is answered before the body is parsed. */
    {
        hres r;
        CU_ASSERT_EQUAL(http_do(m.port, "POST",
                                AUTH(ALICE) "Mcp-Session-Id: 0123abcd\r\n",
                                "[[[[{nope", &r),
                        404);
        free(r.text);
    }
    /* The path is matched as sent: /mcp%00 and /mc%70 are not /mcp. */
    CU_ASSERT_EQUAL(raw_do(m.port,
                           "POST /mcp%00 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           "Connection: close\r\n" AUTH(ALICE)
                           "Content-Type: application/json\r\n",
                           INIT_BODY),
                    404);
    CU_ASSERT_EQUAL(raw_do(m.port,
                           "POST /mc%70 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           "Connection: close\r\n" AUTH(ALICE)
                           "Content-Type: application/json\r\n",
                           INIT_BODY),
                    404);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* The RPC socket answers while an HTTP call runs (the text_count mock
 * takes 400 ms): both fronts on one host at once. */
static void test_rpc_meanwhile(void)
{
    mh_srv m;
    CU_ASSERT_FATAL(mh_start(&m, NULL) == 0);
    char sid[80], h[512];
    CU_ASSERT_FATAL(mh_session(m.port, ALICE, sid) == 0);
    sess_hdrs(h, sizeof h, ALICE, sid);
    int fd = th_test_tcp_connect(m.port, 0);
    CU_ASSERT_FATAL(fd >= 0);
    int64_t t0 = rpc_now_ms();
    CU_ASSERT(th_test_http_send(fd, "POST", "/mcp", h,
                        "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":"
                        "\"tools/call\",\"params\":{\"name\":\"text_count\","
                        "\"arguments\":{\"path\":\"rpc.yaml\"}}}") == 0);
    th_rpc_client *cl = rpc_connect(&m.rs);
    CU_ASSERT_FATAL(cl != NULL);
    rpc_res rr;
    CU_ASSERT(rpc_call(cl, "host.ping", "[]", &rr) == 0);
    CU_ASSERT(rr.err == NULL);
    int64_t ping_ms = rpc_now_ms() - t0;
    rpc_res_free(&rr);
    th_rpc_client_close(cl);
    hres r;
    http_read(fd, &r, NULL, rpc_wait_ms());
    close(fd);
    int64_t call_ms = rpc_now_ms() - t0;
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT(has(&r, "slow"));
    free(r.text);
    fprintf(stderr, " [ping %lld ms while the HTTP call took %lld ms] ",
            (long long)ping_ms, (long long)call_ms);
    if (!rpc_valgrind())
        CU_ASSERT(ping_ms < call_ms);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* An SSE client that vanishes is noticed (keepalive) and its stream slot
 * freed; mcp.max_streams bites meanwhile. */
/* ---- resumable event streams (mcp.sse_poll) ------------------------------------- */

#define SSE_ACCEPT "Accept: application/json, text/event-stream\r\n"
#define CALL_STEPS(id, steps, delay)                                          \
    "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"tools/call\","        \
    "\"params\":{\"name\":\"echo_async\",\"arguments\":{\"text\":\"r" #id   \
    "\",\"steps\":" #steps ",\"delay_ms\":" #delay "},"                     \
    "\"_meta\":{\"progressToken\":" #id "}}}"

/* The stream tag and the highest event number of the complete events
 * (ended by a blank line) in text; -1 when there is none. */
static long last_event(const char *text, char tag[17])
{
    long best = -1;
    for (const char *p = text; (p = strstr(p, "\nid: ")); p++) {
        char t[17];
        long n;
        if (sscanf(p + 5, "%16[0-9a-f]-%ld", t, &n) == 2 &&
            strstr(p, "\n\n") && n > best) {
            best = n;
            memcpy(tag, t, sizeof t);
        }
    }
    return best;
}

/* The last event sent on stream `tag` before it parked, from the log
 * line of the parking; -1 when there is none. */
static long parked_sent(rpc_srv *rs, const char *tag)
{
    FILE *f = fopen(rs->log, "r");
    char line[1024], pat[64];
    long sent = -1;
    snprintf(pat, sizeof pat, "stream %s parked; sent up to event ", tag);
    while (f && fgets(line, sizeof line, f)) {
        char *p = strstr(line, pat);
        if (p)
            sent = strtol(p + strlen(pat), NULL, 10);
    }
    if (f)
        fclose(f);
    return sent;
}

/* Opens a POST of `body` on a new connection; the socket. */
static int post_open(unsigned port, const char *h, const char *body)
{
    int fd = th_test_tcp_connect(port, 0);
    if (fd >= 0 && th_test_http_send(fd, "POST", "/mcp", h, body) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* A GET with Last-Event-ID TAG-N of session headers h; its status, the
 * text read (until `until` or EOF) in r. */
static int resume(unsigned port, const char *h, const char *tag, long n,
                  const char *until, hres *r)
{
    char hh[1024];
    snprintf(hh, sizeof hh, "%sAccept: text/event-stream\r\n"
             "Last-Event-ID: %s-%ld\r\n", h, tag, n);
    memset(r, 0, sizeof *r);
    int fd = th_test_tcp_connect(port, 0);
    if (fd < 0 || th_test_http_send(fd, "GET", "/mcp", hh, NULL) != 0) {
        if (fd >= 0)
            close(fd);
        r->text = strdup("");
        return -1;
    }
    http_read(fd, r, until, rpc_wait_ms());
    close(fd);
    return r->status;
}

/* A POST's event stream dropped by its client resumes on a GET with
 * Last-Event-ID: every event after that id once, in order, then the
 * response; the ids name the stream, so a resumption on another session
 * (of the same or another user) finds nothing and replays nothing; events
 * sent before the last mcp.sse_replay_events are gone (410); a stream
 * nobody resumes goes after mcp.sse_replay_time. */
static void test_sse_resume(void)
{
    mh_srv m;
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "  sse_poll: %lldms\n  sse_replay_events: 4\n"
             "  sse_replay_time: %lldms\n",
             (long long)th_test_ms(5000), (long long)th_test_ms(3000));
    CU_ASSERT_FATAL(mh_start(&m, cfg) == 0);
    char sid[80], sid2[80], sidb[80], h[512], h2[512], hb[512], hp[600];
    CU_ASSERT_FATAL(mh_session(m.port, ALICE, sid) == 0);
    CU_ASSERT_FATAL(mh_session(m.port, ALICE, sid2) == 0);
    CU_ASSERT_FATAL(mh_session(m.port, CAROL, sidb) == 0);
    sess_hdrs(h, sizeof h, ALICE, sid);
    sess_hdrs(h2, sizeof h2, ALICE, sid2);
    sess_hdrs(hb, sizeof hb, CAROL, sidb);
    snprintf(hp, sizeof hp, "%s" SSE_ACCEPT, h);

    int st;
    /* 1. Dropped after its first progress; resumed from it. */
    int p = post_open(m.port, hp, CALL_STEPS(21, 6, 60));
    CU_ASSERT_FATAL(p >= 0);
    hres r;
    http_read(p, &r, "notifications/progress", rpc_wait_ms());
    char tag[17] = "";
    CU_ASSERT(has(&r, "retry: "));
    long n = last_event(r.text, tag);
    CU_ASSERT(n >= 1);
    CU_ASSERT(strstr(r.text, "data: \n\n") != NULL); /* the priming one */
    free(r.text);
    close(p); /* the client drops the stream */
    char parked[80];
    snprintf(parked, sizeof parked, "stream %s parked", tag);
    CU_ASSERT_FATAL(rpc_log_wait(&m.rs, parked, rpc_wait_ms()));
    /* Another session's, another user's: nothing replayed. */
    CU_ASSERT_EQUAL(resume(m.port, h2, tag, n, NULL, &r), 404);
    CU_ASSERT(!strstr(r.text, "progress") && !strstr(r.text, "r21"));
    free(r.text);
    CU_ASSERT_EQUAL(resume(m.port, hb, tag, n, NULL, &r), 404);
    CU_ASSERT(!strstr(r.text, "progress") && !strstr(r.text, "r21"));
    free(r.text);
    char hx[600];
    snprintf(hx, sizeof hx,
             "Authorization: Bearer " CAROL "\r\nMcp-Session-Id: %s\r\n", sid);
    CU_ASSERT_EQUAL(resume(m.port, hx, tag, n, NULL, &r), 404);
    CU_ASSERT(!strstr(r.text, "progress"));
    free(r.text);
    /* Not an event id of this server. */
    CU_ASSERT_EQUAL(resume(m.port, h, "zz", 1, NULL, &r), 400);
    free(r.text);
    /* Its own session: the rest, from the event after n. */
    CU_ASSERT_EQUAL(resume(m.port, h, tag, n, "\"r21\"", &r), 200);
    CU_ASSERT(has(&r, "\"r21\""));
    char idl[64];
    snprintf(idl, sizeof idl, "id: %s-%ld\n", tag, n);
    CU_ASSERT(strstr(r.text, idl) == NULL); /* not again */
    long last = last_event(r.text, tag);
    for (long i = n + 1; i <= last; i++) {
        snprintf(idl, sizeof idl, "id: %s-%ld\n", tag, i);
        char *a = strstr(r.text, idl);
        CU_ASSERT(a && !strstr(a + 1, idl)); /* each once */
    }
    CU_ASSERT(last >= 7); /* 6 progress events and the response */
    free(r.text);
    /* Delivered: the stream is gone (once its connection's end is seen:
     * until then it is open elsewhere, 409). */
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while ((st = resume(m.port, h, tag, last, NULL, &r)) == 409 &&
           rpc_now_ms() < end) {
        free(r.text);
        usleep(20 * 1000);
    }
    CU_ASSERT_EQUAL(st, 404);
    free(r.text);

    /* 2. Bounds: six events read, then dropped; of the events sent only
     * the last 4 (sse_replay_events) are kept, so a resumption needing
     * an older one is refused (410) and one from the oldest kept goes
     * on. */
    p = post_open(m.port, hp, CALL_STEPS(22, 12, 100));
    CU_ASSERT_FATAL(p >= 0);
    http_read(p, &r, "step 6/12", rpc_wait_ms());
    CU_ASSERT(last_event(r.text, tag) >= 6);
    free(r.text);
    close(p);
    snprintf(parked, sizeof parked, "stream %s parked", tag);
    CU_ASSERT_FATAL(rpc_log_wait(&m.rs, parked, rpc_wait_ms()));
    long sent = parked_sent(&m.rs, tag);
    CU_ASSERT_FATAL(sent >= 6);
    CU_ASSERT_EQUAL(resume(m.port, h, tag, sent - 5, NULL, &r), 410);
    CU_ASSERT(has(&r, "mcp.sse_replay_events"));
    CU_ASSERT(!strstr(r.text, "progress\""));
    free(r.text);
    CU_ASSERT_EQUAL(resume(m.port, h, tag, sent - 4, "\"r22\"", &r), 200);
    CU_ASSERT(has(&r, "\"r22\""));
    for (long i = sent - 3; i <= sent + 1; i++) {
        snprintf(idl, sizeof idl, "id: %s-%ld\n", tag, i);
        CU_ASSERT(strstr(r.text, idl) != NULL);
    }
    snprintf(idl, sizeof idl, "id: %s-%ld\n", tag, sent - 4);
    CU_ASSERT(strstr(r.text, idl) == NULL);
    free(r.text);

    /* 3. Not resumed within sse_replay_time: dropped, then 404.  The
     * call's second step comes th_test_ms(1000) after its first progress,
     * so the client hangs up mid-call (a stream whose call ended and was
     * all sent does not park); sse_replay_time may pass before or after
     * the call's end: 404 either way. */
    char body23[400];
    snprintf(body23, sizeof body23, CALL_STEPS(23, 2, %u), th_test_ms(1000));
    p = post_open(m.port, hp, body23);
    CU_ASSERT_FATAL(p >= 0);
    http_read(p, &r, "notifications/progress", rpc_wait_ms());
    n = last_event(r.text, tag);
    free(r.text);
    close(p);
    /* 4. Beside it, a call that runs on (th_test_ms(6000)) after its
     * stream is dropped at sse_replay_time: gone for its client too, 404
     * (once 409, "open on another connection", which it was not). */
    char body24[400], tag4[17] = "", parked4[96];
    snprintf(body24, sizeof body24, CALL_STEPS(24, 1, %u), th_test_ms(6000));
    int p4 = post_open(m.port, hp, body24);
    CU_ASSERT_FATAL(p4 >= 0);
    http_read(p4, &r, "notifications/progress", rpc_wait_ms());
    long n4 = last_event(r.text, tag4);
    free(r.text);
    close(p4);
    snprintf(parked, sizeof parked, "event stream %s not resumed", tag);
    CU_ASSERT(rpc_log_wait(&m.rs, parked, rpc_wait_ms() + th_test_ms(3000)));
    CU_ASSERT_EQUAL(resume(m.port, h, tag, n, NULL, &r), 404);
    free(r.text);
    snprintf(parked4, sizeof parked4, "event stream %s not resumed", tag4);
    CU_ASSERT(rpc_log_wait(&m.rs, parked4, rpc_wait_ms() + th_test_ms(3000)));
    CU_ASSERT_EQUAL(resume(m.port, h, tag4, n4, NULL, &r), 404);
    free(r.text);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

static void test_vanished_client(void)
{
    mh_srv m;
    CU_ASSERT_FATAL(mh_start(&m, "  max_streams: 1\n"
                                 "  keepalive: 200ms\n") == 0);
    char sid[80], h[512];
    CU_ASSERT_FATAL(mh_session(m.port, ALICE, sid) == 0);
    sess_hdrs(h, sizeof h, ALICE, sid);
    int g = th_test_tcp_connect(m.port, 0);
    CU_ASSERT_FATAL(g >= 0);
    CU_ASSERT(th_test_http_send(g, "GET", "/mcp", h, NULL) == 0);
    hres r;
    http_read(g, &r, "text/event-stream", rpc_wait_ms());
    CU_ASSERT_EQUAL(r.status, 200);
    free(r.text);
    CU_ASSERT_EQUAL(http_do(m.port, "GET", h, NULL, &r), 429);
    free(r.text);
    CU_ASSERT(rpc_log_has(&m.rs, "(mcp.max_streams)"));
    /* A POST stream whose client leaves after the first progress. */
    int p = th_test_tcp_connect(m.port, 0);
    CU_ASSERT_FATAL(p >= 0);
    CU_ASSERT(th_test_http_send(p, "POST", "/mcp", h,
                        "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":"
                        "\"tools/call\",\"params\":{\"name\":\"echo_async\","
                        "\"arguments\":{\"text\":\"x\",\"steps\":20,"
                        "\"delay_ms\":20},\"_meta\":{\"progressToken\":1}}}")
              == 0);
    http_read(p, &r, "notifications/progress", rpc_wait_ms());
    CU_ASSERT(has(&r, "text/event-stream"));
    free(r.text);
    close(p);
    close(g); /* vanish */
    /* The session still answers, and the GET slot comes back. */
    CU_ASSERT_EQUAL(http_do(m.port, "POST", h, CALL_ECHO(10, "still"), &r),
                    200);
    CU_ASSERT(has(&r, "still"));
    free(r.text);
    int st = 0;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (rpc_now_ms() < end) {
        int fd = th_test_tcp_connect(m.port, 0);
        th_test_http_send(fd, "GET", "/mcp", h, NULL);
        http_read(fd, &r, "\r\n\r\n", 2000);
        st = r.status;
        free(r.text);
        close(fd); /* this one vanishes as well */
        if (st == 200)
            break;
        usleep(100 * 1000);
    }
    CU_ASSERT_EQUAL(st, 200);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

typedef struct busy {
    unsigned port;
    char h[512];
    int ok, n;
    int64_t worst_ms;
} busy;

static void *busy_main(void *arg)
{
    busy *b = arg;
    for (int i = 0; i < b->n; i++) {
        hres r;
        int64_t t0 = rpc_now_ms();
        if (http_do(b->port, "POST", b->h, CALL_ECHO(100, "quick"), &r) ==
                200 &&
            strstr(r.text, "quick"))
            b->ok++;
        else
            fprintf(stderr, "\nbusy call: %.500s\n", r.text);
        int64_t ms = rpc_now_ms() - t0;
        if (ms > b->worst_ms)
            b->worst_ms = ms;
        free(r.text);
    }
    return NULL;
}

/* A client that stops reading its SSE stream: the others' calls still
 * answer; its queue reaches mcp.max_queued and the stream is dropped. */
static void test_slow_client(void)
{
    mh_srv m;
    CU_ASSERT_FATAL(mh_start(&m, "  max_queued: 16KiB\n") == 0);
    char a[80], b[80], ha[512];
    CU_ASSERT_FATAL(mh_session(m.port, ALICE, a) == 0);
    CU_ASSERT_FATAL(mh_session(m.port, CAROL, b) == 0);
    sess_hdrs(ha, sizeof ha, ALICE, a);
    int s = th_test_tcp_connect(m.port, 1024);
    CU_ASSERT_FATAL(s >= 0);
    CU_ASSERT(th_test_http_send(s, "POST", "/mcp", ha,
                        "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":"
                        "\"tools/call\",\"params\":{\"name\":\"echo_async\","
                        "\"arguments\":{\"text\":\"x\",\"steps\":1000000,"
                        "\"delay_ms\":1},\"_meta\":{\"progressToken\":1}}}")
              == 0);
    /* ... and never reads.  (Progress that piles up is folded, and the
     * kernel takes some 130 KiB first: the call goes on until the drop,
     * whatever the machine's speed, and SIGTERM cancels it.)  Meanwhile
     * carol's calls answer. */
    busy bz = {.port = m.port, .n = rpc_scale(20)};
    sess_hdrs(bz.h, sizeof bz.h, CAROL, b);
    pthread_t t;
    CU_ASSERT_FATAL(pthread_create(&t, NULL, busy_main, &bz) == 0);
    pthread_join(t, NULL);
    CU_ASSERT_EQUAL(bz.ok, bz.n);
    fprintf(stderr, " [%d calls beside a stalled client, slowest %lld ms] ",
            bz.ok, (long long)bz.worst_ms);
    bool dropped = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!dropped && rpc_now_ms() < end) {
        FILE *f = fopen(m.rs.log, "r");
        char line[1024];
        while (f && !dropped && fgets(line, sizeof line, f))
            dropped = strstr(line, "mcp.max_queued") != NULL;
        if (f)
            fclose(f);
        if (!dropped)
            usleep(50 * 1000);
    }
    CU_ASSERT(dropped);
    if (!dropped)
        rpc_dump_log(&m.rs);
    close(s);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* A client that reads nothing for mcp.client_timeout is disconnected. */
static void test_client_timeout(void)
{
    mh_srv m;
    CU_ASSERT_FATAL(mh_start(&m, "  client_timeout: 1s\n") == 0);
    int fd = th_test_tcp_connect(m.port, 0);
    CU_ASSERT_FATAL(fd >= 0);
    /* Half a request, then silence. */
    CU_ASSERT(write(fd, "POST /mcp HTTP/1.1\r\nHost: x\r\n", 29) == 29);
    int64_t t0 = rpc_now_ms();
    hres r;
    http_read(fd, &r, NULL, rpc_wait_ms());
    int64_t ms = rpc_now_ms() - t0;
    free(r.text);
    close(fd);
    fprintf(stderr, " [closed after %lld ms] ", (long long)ms);
    CU_ASSERT(ms >= 900 && ms < rpc_wait_ms() - 100);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* mcp.max_connections: past the cap new clients wait (logged) until a
 * connection closes; then they are served. */
static void test_max_connections(void)
{
    mh_srv m;
    CU_ASSERT_FATAL(mh_start(&m, "  max_connections: 2\n") == 0);
    int a = th_test_tcp_connect(m.port, 0), b = th_test_tcp_connect(m.port, 0);
    CU_ASSERT_FATAL(a >= 0 && b >= 0);
    /* a and b hold both slots (a request begun, not finished): the host
     * says so once it has taken the second (the event waited for). */
    CU_ASSERT(write(a, "POST /mcp HTTP/1.1\r\n", 20) == 20);
    CU_ASSERT(write(b, "POST /mcp HTTP/1.1\r\n", 20) == 20);
    CU_ASSERT(rpc_log_wait(&m.rs, "(mcp.max_connections)", rpc_wait_ms()));
    int c = th_test_tcp_connect(m.port, 0);
    CU_ASSERT_FATAL(c >= 0);
    CU_ASSERT(th_test_http_send(c, "POST", "/mcp", AUTH(ALICE), INIT_BODY) == 0);
    /* c waits in the kernel's queue: nothing for it so far */
    struct pollfd pc = {.fd = c, .events = POLLIN};
    CU_ASSERT_EQUAL(poll(&pc, 1, 0), 0);
    hres r;
    close(a);
    http_read(c, &r, NULL, rpc_wait_ms());
    CU_ASSERT_EQUAL(r.status, 200);
    free(r.text);
    close(c);
    close(b);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* SIGTERM while an HTTP call runs and a GET stream is open: the host
 * cancels the call, ends the streams and exits 0 within the grace. */
static void test_shutdown_busy(void)
{
    mh_srv m;
    CU_ASSERT_FATAL(mh_start(&m, NULL) == 0);
    char sid[80], h[512];
    CU_ASSERT_FATAL(mh_session(m.port, ALICE, sid) == 0);
    sess_hdrs(h, sizeof h, ALICE, sid);
    int g = th_test_tcp_connect(m.port, 0), p = th_test_tcp_connect(m.port, 0);
    CU_ASSERT_FATAL(g >= 0 && p >= 0);
    CU_ASSERT(th_test_http_send(g, "GET", "/mcp", h, NULL) == 0);
    CU_ASSERT(th_test_http_send(p, "POST", "/mcp", h,
                        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":"
                        "\"tools/call\",\"params\":{\"name\":\"echo_async\","
                        "\"arguments\":{\"text\":\"x\",\"steps\":1000,"
                        "\"delay_ms\":50}}}") == 0);
    /* the stream open and the call running (events, not a sleep) */
    hres r;
    http_read(g, &r, "text/event-stream", rpc_wait_ms());
    CU_ASSERT_EQUAL(r.status, 200);
    free(r.text);
    CU_ASSERT(rpc_wait_running(&m.rs, 1));
    int64_t t0 = rpc_now_ms();
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    int64_t ms = rpc_now_ms() - t0;
    fprintf(stderr, " [stopped in %lld ms] ", (long long)ms);
    /* the 1 s grace, then the cancel: far below the 50 s the call takes */
    CU_ASSERT(ms < th_test_ms(5000));
    http_read(p, &r, NULL, 2000);
    free(r.text);
    close(g);
    close(p);
    mh_free(&m);
}

/* A reload (SIGHUP) that changes a token: logged; the running front keeps
 * the tokens it started with until the restart. */
static void test_reload_keeps_tokens(void)
{
    mh_srv m;
    CU_ASSERT_FATAL(mh_start(&m, NULL) == 0);
    char *tf = th_test_write_file(m.tokdir, "alice.token",
                                  "alice-new-token-0123456789\n", (size_t)-1);
    free(tf);
    /* SIGHUP until the reload is seen: one sent while the host still
     * starts (the HTTP port answers before the reload watcher takes the
     * signal) is ignored. */
    bool seen = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    int64_t next_hup = 0;
    while (!seen && rpc_now_ms() < end) {
        if (rpc_now_ms() >= next_hup) {
            kill(m.rs.pid, SIGHUP);
            next_hup = rpc_now_ms() + 1000;
        }
        FILE *f = fopen(m.rs.log, "r");
        char line[1024];
        while (f && !seen && fgets(line, sizeof line, f))
            seen = strstr(line, "mcp.tokens change at the next restart");
        if (f)
            fclose(f);
        if (!seen)
            usleep(50 * 1000);
    }
    CU_ASSERT(seen);
    hres r;
    CU_ASSERT_EQUAL(http_do(m.port, "POST", AUTH(ALICE), INIT_BODY, &r), 200);
    free(r.text);
    CU_ASSERT_EQUAL(http_do(m.port, "POST",
                            AUTH("alice-new-token-0123456789"), INIT_BODY,
                            &r),
                    401);
    free(r.text);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* https:// with a self-signed certificate made here by the openssl CLI. */
static void test_tls(void)
{
    if (access("/usr/bin/openssl", X_OK) != 0)
        TH_SKIP("no openssl CLI to make a test certificate");
    char *dir = th_test_tmpdir();
    char key[512], crt[512];
    snprintf(key, sizeof key, "%s/key.pem", dir);
    snprintf(crt, sizeof crt, "%s/cert.pem", dir);
    char *argv[] = {"/usr/bin/openssl", "req", "-x509", "-newkey",
                    "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                    "-days", "1", "-subj", "/CN=127.0.0.1", NULL};
    th_test_run gen;
    th_test_run_argv(argv, NULL, 30, 0, &gen);
    int gst = gen.status;
    th_test_run_free(&gen);
    CU_ASSERT_FATAL(gst == 0);
    char extra[1200];
    snprintf(extra, sizeof extra, "  tls_cert: %s\n  tls_key: %s\n", crt,
             key);
    mh_srv m;
    memset(&m, 0, sizeof m);
    int rc = mh_start_ex(&m, extra, "https://127.0.0.1:0/mcp");
    CU_ASSERT_FATAL(rc == 0 || (m.port = 0, false));
    th_test_run r;
    char url[128];
    snprintf(url, sizeof url, "https://127.0.0.1:%u/mcp", m.port);
    char *cargv[] = {"/usr/bin/curl", "-sk", "-o", "/dev/null", "-w",
                     "%{http_code}", "-X", "POST", "-H",
                     "Content-Type: application/json", "-H",
                     "Authorization: Bearer " ALICE, "-d", INIT_BODY, url,
                     NULL};
    if (access("/usr/bin/curl", X_OK) == 0) {
        th_test_run_argv(cargv, NULL, 20, 0, &r);
        CU_ASSERT(r.out && strcmp(r.out, "200") == 0);
        th_test_run_free(&r);
    }
    if (sdk_ready()) {
        setenv("NODE_TLS_REJECT_UNAUTHORIZED", "0", 1);
        sdk_run("connect", m.port, ALICE, "https", &r);
        unsetenv("NODE_TLS_REJECT_UNAUTHORIZED");
        CU_ASSERT(out_has(&r, "{\"step\":\"connect\",\"ok\":true}"));
        th_test_run_free(&r);
    }
    /* Plain HTTP on the TLS port gets nothing useful. */
    hres h;
    CU_ASSERT(http_do(m.port, "POST", AUTH(ALICE), INIT_BODY, &h) != 200);
    free(h.text);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
    th_test_rmtree(dir);
    free(dir);
}

/* Config errors: an http entry without tokens, a non-loopback address
 * without allow_remote. */
static void test_config_refusals(void)
{
    char *dir = th_test_tmpdir();
    char *cfg = th_test_write_file(
        dir, "a.yaml",
        "host:\n  listen: [\"http://127.0.0.1:0/mcp\"]\n", (size_t)-1);
    th_test_run r;
    th_test_toolhost(&r, "serve", "-c", cfg, NULL);
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT(r.err && strstr(r.err, "mcp.tokens declares no token"));
    th_test_run_free(&r);
    free(cfg);
    cfg = th_test_write_file(
        dir, "b.yaml",
        "host:\n  listen: [\"http://0.0.0.0:0/mcp\"]\n"
        "mcp:\n  tokens: [{user: a, sha256: "
        "0000000000000000000000000000000000000000000000000000000000000000}]\n",
        (size_t)-1);
    th_test_toolhost(&r, "serve", "-c", cfg, NULL);
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT(r.err && strstr(r.err, "mcp.allow_remote"));
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* A task started over MCP (HTTP) is a task of the core store: another MCP
 * session of the same user lists it, tasks/result over MCP waits for it
 * (th_task_wait), and the same user over msgpack-RPC (a token with `uid`)
 * reads its result with tasks.result; carol does not see it. */
#define DAVE "dave-token-0123456789abcdef"
static void test_task_cross_front(void)
{
    uint8_t d[32];
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(DAVE), (const uint8_t *)DAVE);
    sha256_digest(&ctx, 32, d);
    char tok[256];
    int k = snprintf(tok, sizeof tok, "    - {user: alice, uid: %u, sha256: ",
                     (unsigned)getuid());
    for (int i = 0; i < 32; i++)
        k += snprintf(tok + k, sizeof tok - (size_t)k, "%02x", d[i]);
    snprintf(tok + k, sizeof tok - (size_t)k, "}\n");
    mh_srv m;
    CU_ASSERT_FATAL(mh_start_ex2(&m, tok, NULL, "    scope: toolset\n") == 0);
    char h[512];
    snprintf(h, sizeof h, AUTH(DAVE));
    hres r;
    http_do(m.port, "POST", h,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
            "\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":"
            "{},\"clientInfo\":{\"name\":\"raw\",\"version\":\"1\"}}}",
            &r);
    char sid[80] = "";
    const char *p = r.text ? strcasestr(r.text, "Mcp-Session-Id: ") : NULL;
    if (p)
        sscanf(p + 16, "%79[0-9a-f]", sid);
    free(r.text);
    CU_ASSERT_FATAL(sid[0] != '\0');
    sess_hdrs(h, sizeof h, DAVE, sid);
    http_do(m.port, "POST", h,
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
            &r);
    free(r.text);
    http_do(m.port, "POST", h,
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
            "\"params\":{\"name\":\"echo_async\",\"arguments\":{\"text\":"
            "\"crossed\",\"steps\":10,\"delay_ms\":100},\"task\":{\"ttl\":"
            "60000}}}",
            &r);
    CU_ASSERT_EQUAL(r.status, 200);
    unsigned long long task = 0;
    p = r.text ? strstr(r.text, "\"taskId\":\"") : NULL;
    if (p)
        task = strtoull(p + 10, NULL, 10);
    if (!task)
        fprintf(stderr, "\nno taskId:\n%.2000s\n", r.text ? r.text : "");
    free(r.text);
    CU_ASSERT_FATAL(task != 0);

    /* Another MCP session of the same user lists it (tasks/list reads
     * the core store; RPC's tasks.list lists only the tasks of its own
     * session, docs/protocol.md). */
    char sid2[80] = "";
    char h2[512];
    snprintf(h2, sizeof h2, AUTH(DAVE));
    http_do(m.port, "POST", h2,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
            "\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":"
            "{},\"clientInfo\":{\"name\":\"raw2\",\"version\":\"1\"}}}",
            &r);
    p = r.text ? strcasestr(r.text, "Mcp-Session-Id: ") : NULL;
    if (p)
        sscanf(p + 16, "%79[0-9a-f]", sid2);
    free(r.text);
    CU_ASSERT_FATAL(sid2[0] != '\0');
    sess_hdrs(h2, sizeof h2, DAVE, sid2);
    http_do(m.port, "POST", h2,
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tasks/list\"}",
            &r);
    char want[64];
    snprintf(want, sizeof want, "\"taskId\":\"%llu\"", task);
    CU_ASSERT(has(&r, want));
    free(r.text);
    th_rpc_client *cl = rpc_connect(&m.rs);
    CU_ASSERT_FATAL(cl != NULL);
    rpc_res rr;

    /* tasks/result over MCP waits for the end (th_task_wait). */
    char body[256];
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tasks/result\","
             "\"params\":{\"taskId\":\"%llu\"}}",
             task);
    http_do(m.port, "POST", h, body, &r);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT(has(&r, "crossed") && has(&r, "related-task"));
    free(r.text);

    /* ... and RPC reads the same result. */
    char pp[64];
    snprintf(pp, sizeof pp, "[%llu]", task);
    CU_ASSERT(rpc_call(cl, "tasks.result", pp, &rr) == 0);
    CU_ASSERT(rr.res && rpc_ok(rr.res) && rpc_stdout_is(rr.res, "crossed"));
    rpc_res_free(&rr);
    th_rpc_client_close(cl);
    /* Another user (carol) does not see it. */
    char sid3[80];
    CU_ASSERT_FATAL(mh_session(m.port, CAROL, sid3) == 0);
    sess_hdrs(h2, sizeof h2, CAROL, sid3);
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tasks/get\","
             "\"params\":{\"taskId\":\"%llu\"}}",
             task);
    http_do(m.port, "POST", h2, body, &r);
    CU_ASSERT(has(&r, "unknown taskId"));
    free(r.text);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

/* Token users without `uid` have no uid: the core cannot tell them apart
 * by uid, so over MCP each sees only its own session's tasks (alice's
 * toolset-scoped task is unknown to carol). */
static void test_task_no_uid_private(void)
{
    mh_srv m;
    CU_ASSERT_FATAL(mh_start_ex2(&m, NULL, NULL, "    scope: toolset\n") == 0);
    char a[80], c[80], h[512];
    CU_ASSERT_FATAL(mh_session(m.port, ALICE, a) == 0);
    CU_ASSERT_FATAL(mh_session(m.port, CAROL, c) == 0);
    sess_hdrs(h, sizeof h, ALICE, a);
    hres r;
    http_do(m.port, "POST", h,
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
            "\"params\":{\"name\":\"echo_async\",\"arguments\":{\"text\":"
            "\"mine\",\"steps\":5,\"delay_ms\":100},\"task\":{\"ttl\":"
            "60000}}}",
            &r);
    unsigned long long task = 0;
    const char *p = r.text ? strstr(r.text, "\"taskId\":\"") : NULL;
    if (p)
        task = strtoull(p + 10, NULL, 10);
    free(r.text);
    CU_ASSERT_FATAL(task != 0);
    char body[256], want[64];
    snprintf(want, sizeof want, "\"taskId\":\"%llu\"", task);
    /* alice sees it */
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tasks/get\","
             "\"params\":{\"taskId\":\"%llu\"}}",
             task);
    http_do(m.port, "POST", h, body, &r);
    CU_ASSERT(has(&r, want));
    free(r.text);
    /* carol does not: not by tasks/get, tasks/list, tasks/cancel */
    sess_hdrs(h, sizeof h, CAROL, c);
    http_do(m.port, "POST", h, body, &r);
    CU_ASSERT(has(&r, "unknown taskId"));
    free(r.text);
    http_do(m.port, "POST", h,
            "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tasks/list\"}", &r);
    CU_ASSERT(r.text && !strstr(r.text, want));
    free(r.text);
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tasks/cancel\","
             "\"params\":{\"taskId\":\"%llu\"}}",
             task);
    http_do(m.port, "POST", h, body, &r);
    CU_ASSERT(has(&r, "unknown taskId"));
    free(r.text);
    CU_ASSERT_EQUAL(rpc_srv_stop(&m.rs, SIGTERM), 0);
    mh_free(&m);
}

void th_suite_mcp_http(void)
{
    CU_pSuite s = CU_add_suite("mcp_http", NULL, NULL);
    CU_add_test(s, "sdk_session", test_sdk_session);
    CU_add_test(s, "sdk_tokens", test_sdk_tokens);
    CU_add_test(s, "sdk_permission", test_sdk_permission);
    CU_add_test(s, "refusals", test_refusals);
    CU_add_test(s, "session_limits", test_session_limits);
    CU_add_test(s, "bad_ids", test_bad_ids);
    CU_add_test(s, "long_ids", test_long_ids);
    CU_add_test(s, "sessions_per_user", test_sessions_per_user);
    CU_add_test(s, "strict_headers", test_strict_headers);
    CU_add_test(s, "rpc_meanwhile", test_rpc_meanwhile);
    CU_add_test(s, "task_cross_front", test_task_cross_front);
    CU_add_test(s, "task_no_uid_private", test_task_no_uid_private);
    CU_add_test(s, "vanished_client", test_vanished_client);
    CU_add_test(s, "sse_resume", test_sse_resume);
    CU_add_test(s, "slow_client", test_slow_client);
    CU_add_test(s, "client_timeout", test_client_timeout);
    CU_add_test(s, "max_connections", test_max_connections);
    CU_add_test(s, "shutdown_busy", test_shutdown_busy);
    CU_add_test(s, "reload_keeps_tokens", test_reload_keeps_tokens);
    CU_add_test(s, "tls", test_tls);
    CU_add_test(s, "config_refusals", test_config_refusals);
}
