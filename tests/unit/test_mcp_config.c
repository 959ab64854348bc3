/* test_mcp_config.c - host.listen as a list and the `mcp:` section: the
 * HTTP entries, the three forms of a token, the defaults and the errors;
 * the URL parser of th/http.h. */
#include <CUnit/CUnit.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"
#include "th/config.h"
#include "front/rpc_config.h"
#include "front/mcp_config.h"
#include "front/http.h"

static th_config *parse_ok(const char *yaml)
{
    th_config *cfg = NULL;
    th_error err;
    th_error_clear(&err);
    int rc = th_config_parse("t.yaml", "/cfg", yaml, strlen(yaml), &cfg,
                             &err);
    if (rc != 0)
        printf("\n  unexpected error: %s\n", err.msg);
    CU_ASSERT_EQUAL(rc, 0);
    return cfg;
}

/* The error message of `yaml` contains `want`. */
static void expect_err(const char *yaml, const char *want)
{
    th_config *cfg = NULL;
    th_error err;
    th_error_clear(&err);
    int rc = th_config_parse("t.yaml", "/cfg", yaml, strlen(yaml), &cfg,
                             &err);
    CU_ASSERT_EQUAL(rc, TH_ECONFIG);
    if (rc == 0) {
        th_config_free(cfg);
        printf("\n  want an error with: %s\n", want);
        return;
    }
    if (!strstr(err.msg, want))
        printf("\n  want: ...%s...\n  got:  %s\n", want, err.msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
}

#define TOK0                                                                  \
    "  tokens: [{user: a, sha256: "                                          \
    "00000000000000000000000000000000000000000000000000000000000000ff}]\n"

static void test_listen_list(void)
{
    th_config *cfg = parse_ok("host:\n"
                              "  listen:\n"
                              "    - unix:/run/th/th.sock\n"
                              "    - http://127.0.0.1:8765/mcp\n"
                              "    - http://[::1]:0\n"
                              "mcp:\n" TOK0);
    if (!cfg)
        return;
    CU_ASSERT_STRING_EQUAL(th_rpc_config(cfg)->listen, "unix:/run/th/th.sock");
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->n_listen_http, 2);
    CU_ASSERT_STRING_EQUAL(th_mcp_config(cfg)->listen_http[0],
                           "http://127.0.0.1:8765/mcp");
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->tokens[0].sha256[31], 0xff);
    /* The defaults. */
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->max_body, 4u << 20);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->max_sessions, 64);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->max_streams, 2);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->max_sessions_per_user, 16);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->session_idle_ms, 30 * 60 * 1000);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->max_queued, 8u << 20);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->client_timeout_ms, 60000);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->keepalive_ms, 15000);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->header_timeout_ms, 10000);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->body_timeout_ms, 60000);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->max_connections_per_address, 64);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->max_json_depth, 64);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->http_threads, 2);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->sse_poll_ms, 0);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->sse_replay_events, 64);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->sse_replay_ms, 60000);
    CU_ASSERT_EQUAL(th_mcp_config(cfg)->max_json_elements, 100000);
    CU_ASSERT_PTR_NULL(th_mcp_config(cfg)->tls_priorities);
    CU_ASSERT_FALSE(th_mcp_config(cfg)->allow_remote);
    th_config_free(cfg);
    /* A single string stays valid; "unix:" alone is the default socket. */
    cfg = parse_ok("host: {listen: unix:/a.sock}\n");
    if (cfg) {
        CU_ASSERT_STRING_EQUAL(th_rpc_config(cfg)->listen, "unix:/a.sock");
        CU_ASSERT_EQUAL(th_mcp_config(cfg)->n_listen_http, 0);
        th_config_free(cfg);
    }
    cfg = parse_ok("host:\n  listen: [\"unix:\", \"http://localhost:0\"]\n"
                   "mcp:\n" TOK0);
    if (cfg) {
        CU_ASSERT_PTR_NULL(th_rpc_config(cfg)->listen);
        CU_ASSERT_EQUAL(th_mcp_config(cfg)->n_listen_http, 1);
        th_config_free(cfg);
    }
}

static void test_listen_errors(void)
{
    expect_err("host:\n  listen: [unix:/a, unix:/b]\n",
               "more than one unix: entry");
    expect_err("host:\n  listen: [\"http://127.0.0.1:0/mcp\"]\n",
               "mcp.tokens declares no token");
    expect_err("host:\n  listen: [\"http://10.1.2.3:80/mcp\"]\nmcp:\n" TOK0,
               "set mcp.allow_remote: true");
    expect_err("host:\n  listen: [\"https://127.0.0.1:0/mcp\"]\nmcp:\n" TOK0,
               "needs mcp.tls_cert and mcp.tls_key");
    expect_err("host:\n  listen: [\"http://127.0.0.1/mcp\"]\n", "no port");
    expect_err("host:\n  listen: [\"http://example.com:80/\"]\n",
               "must be an IP address or localhost");
    expect_err("host:\n  listen: [\"http://127.0.0.1:99999/\"]\n",
               "from 0 to 65535");
    expect_err("host:\n  listen: [[1]]\n",
               "each item of 'listen' must be an address");
    /* each http:// entry is a daemon of its own: one address each */
    expect_err("host:\n  listen: [\"http://127.0.0.1:8080/mcp\", "
               "\"http://127.0.0.1:8080/metrics\"]\nmcp:\n" TOK0,
               "t.yaml:2:41: 'listen': http://127.0.0.1:8080/metrics takes "
               "the address of http://127.0.0.1:8080/mcp");
    /* port 0 twice: two ports of the kernel's choosing, fine */
    th_config_free(parse_ok("host:\n  listen: [\"http://127.0.0.1:0/mcp\", "
                            "\"http://127.0.0.1:0/metrics\"]\nmcp:\n" TOK0));
    /* Non-loopback with the key: fine. */
    th_config *cfg = parse_ok("host:\n  listen: [\"http://0.0.0.0:0/mcp\"]\n"
                              "mcp:\n  allow_remote: true\n" TOK0);
    th_config_free(cfg);
}

static void test_tokens(void)
{
    char *dir = th_test_tmpdir();
    char *tf = th_test_write_file(dir, "t", "  file-token-0123456789  \n",
                                  (size_t)-1);
    char *bad = th_test_write_file(dir, "short", "tiny\n", (size_t)-1);
    setenv("TH_TEST_MCP_TOKEN", "env-token-0123456789", 1);
    char y[2048];
    snprintf(y, sizeof y,
             "mcp:\n  tokens:\n"
             "    - {user: f, file: %s}\n"
             "    - {user: e, env: TH_TEST_MCP_TOKEN}\n",
             tf);
    th_config *cfg = parse_ok(y);
    if (cfg) {
        CU_ASSERT_EQUAL(th_mcp_config(cfg)->n_tokens, 2);
        uint8_t d[32];
        struct sha256_ctx ctx;
        sha256_init(&ctx);
        sha256_update(&ctx, 21, (const uint8_t *)"file-token-0123456789");
        sha256_digest(&ctx, 32, d);
        CU_ASSERT(memcmp(d, th_mcp_config(cfg)->tokens[0].sha256, 32) == 0);
        sha256_init(&ctx);
        sha256_update(&ctx, 20, (const uint8_t *)"env-token-0123456789");
        sha256_digest(&ctx, 32, d);
        CU_ASSERT(memcmp(d, th_mcp_config(cfg)->tokens[1].sha256, 32) == 0);
        CU_ASSERT_STRING_EQUAL(th_mcp_config(cfg)->tokens[1].user, "e");
        th_config_free(cfg);
    }
    snprintf(y, sizeof y, "mcp:\n  tokens: [{user: f, file: %s}]\n", bad);
    expect_err(y, "is too short");
    expect_err("mcp:\n  tokens: [{user: f, file: /nonexistent/x}]\n",
               "cannot open '/nonexistent/x'");
    /* An unset variable: the token is off (matches nothing). */
    cfg = parse_ok("mcp:\n  tokens: [{user: e, env: TH_TEST_MCP_UNSET_X}]\n");
    if (cfg) {
        CU_ASSERT_TRUE(th_mcp_config(cfg)->tokens[0].disabled);
        th_config_free(cfg);
    }
    expect_err("mcp:\n  tokens: [{user: e, sha256: abc}]\n",
               "must be 64 hex digits");
    /* 64 characters, but not 64 hex digits: a letter past f, a space */
    expect_err("mcp:\n  tokens: [{user: e, sha256: \""
               "g123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
               "\"}]\n",
               "must be 64 hex digits");
    expect_err("mcp:\n  tokens: [{user: e, sha256: \""
               "0 23456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
               "\"}]\n",
               "must be 64 hex digits");
    expect_err("mcp:\n  tokens: [{user: e}]\n", "needs exactly one of");
    expect_err("mcp:\n  tokens: [{sha256: abc}]\n", "user");
    expect_err("mcp:\n  tokens:\n"
               "    - {user: a, env: TH_TEST_MCP_TOKEN}\n"
               "    - {user: b, env: TH_TEST_MCP_TOKEN}\n",
               "is the token of user 'a'");
    expect_err("mcp:\n  max_streams: 0\n", "'max_streams' is out of range");
    expect_err("mcp:\n  max_body: 10\n", "'max_body' is out of range");
    expect_err("mcp:\n  max_json_depth: 1\n", "'max_json_depth' is out of range");
    expect_err("mcp:\n  http_threads: 0\n", "'http_threads' is out of range");
    expect_err("mcp:\n  http_threads: 65\n", "'http_threads' is out of range");
    cfg = parse_ok("mcp:\n  http_threads: 4\n");
    if (cfg) {
        CU_ASSERT_EQUAL(th_mcp_config(cfg)->http_threads, 4);
        th_config_free(cfg);
    }
    expect_err("mcp:\n  header_timeout: 10ms\n",
               "'header_timeout' is out of range");
    expect_err("mcp:\n  max_sessions_per_user: 0\n",
               "t.yaml:2:26: 'max_sessions_per_user' is out of range");
    expect_err("mcp:\n  tls_cert: /a.pem\n", "go together");
    expect_err("mcp:\n  bogus: 1\n", "unknown key 'bogus' in mcp");
    unsetenv("TH_TEST_MCP_TOKEN");
    free(tf);
    free(bad);
    th_test_rmtree(dir);
    free(dir);
}

static void test_parse_url(void)
{
    th_http_url u;
    th_error e;
    CU_ASSERT_EQUAL(th_http_parse_url("http://127.0.0.1:8765/mcp", &u, &e),
                    0);
    CU_ASSERT(u.loopback && !u.tls && u.port == 8765);
    CU_ASSERT_STRING_EQUAL(u.path, "/mcp");
    CU_ASSERT_EQUAL(th_http_parse_url("https://[::1]:443", &u, &e), 0);
    CU_ASSERT(u.loopback && u.tls && u.port == 443);
    CU_ASSERT_STRING_EQUAL(u.path, "/mcp");
    CU_ASSERT_EQUAL(th_http_parse_url("http://192.168.1.2:80/x", &u, &e), 0);
    CU_ASSERT_FALSE(u.loopback);
    CU_ASSERT_EQUAL(th_http_parse_url("http://localhost:1/a/b", &u, &e), 0);
    CU_ASSERT(u.loopback);
    CU_ASSERT_EQUAL(th_http_parse_url("http://127.0.0.1:1/a?b", &u, &e),
                    TH_EINVAL);
    CU_ASSERT_EQUAL(th_http_parse_url("ftp://127.0.0.1:1/", &u, &e),
                    TH_EINVAL);
    CU_ASSERT_EQUAL(th_http_parse_url("http://[::1:1/", &u, &e), TH_EINVAL);
    CU_ASSERT_EQUAL(th_http_parse_url("http://:80/", &u, &e), TH_EINVAL);
}

/* The HTTP front copies its mcp: settings at start (max_body,
 * max_sessions, allow_origins, ...): a reload that changes one says that
 * it waits for the next restart, as one that changes the listen entries
 * or the tokens does; nothing without an http:// entry. */
static void test_reload_note(void)
{
    static const char base[] =
        "host: {listen: \"http://127.0.0.1:8080/mcp\"}\n"
        "mcp:\n  tokens: [{user: a, sha256: \"%064d\"}]\n%s";
    char y[6][512];
    snprintf(y[0], sizeof y[0], base, 1, "");
    snprintf(y[1], sizeof y[1], base, 1, "");
    snprintf(y[2], sizeof y[2], base, 1, "  max_body: 1MiB\n");
    snprintf(y[3], sizeof y[3], base, 1, "  allow_origins: [a]\n");
    snprintf(y[4], sizeof y[4], base, 2, "");
    th_config *c[5];
    for (int i = 0; i < 5; i++)
        c[i] = parse_ok(y[i]);
    th_config *off1 = parse_ok("mcp: {max_body: 1MiB}\n");
    th_config *off2 = parse_ok("mcp: {max_body: 2MiB}\n");
    CU_ASSERT_FATAL(c[0] && c[1] && c[2] && c[3] && c[4] && off1 && off2);
    const th_section *s = &th_mcp_section;
    const th_mcp_cfg *m[5];
    for (int i = 0; i < 5; i++)
        m[i] = th_mcp_config(c[i]);
    CU_ASSERT_PTR_NULL(s->reload_note(m[0], m[1]));
    const char *n = s->reload_note(m[0], m[2]);
    CU_ASSERT(n && strstr(n, "max_body"));
    n = s->reload_note(m[0], m[3]);
    CU_ASSERT(n && strstr(n, "next restart"));
    n = s->reload_note(m[0], m[4]);
    CU_ASSERT(n && strstr(n, "mcp.tokens"));
    CU_ASSERT_PTR_NULL(
        s->reload_note(th_mcp_config(off1), th_mcp_config(off2)));
    for (int i = 0; i < 5; i++)
        th_config_free(c[i]);
    th_config_free(off1);
    th_config_free(off2);
}

void th_suite_mcp_config(void)
{
    CU_pSuite s = CU_add_suite("mcp_config", NULL, NULL);
    CU_add_test(s, "listen_list", test_listen_list);
    CU_add_test(s, "listen_errors", test_listen_errors);
    CU_add_test(s, "tokens", test_tokens);
    CU_add_test(s, "parse_url", test_parse_url);
    CU_add_test(s, "reload_note", test_reload_note);
}
