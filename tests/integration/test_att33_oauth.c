/* test_att33_oauth.c - the mcp plugin's OAuth URL rule under attack
 * (review att33): plain http is allowed only toward a loopback host, so
 * that the client secret and the token never cross a network in the
 * clear.  A host name that merely begins "127." (127.attacker.example:
 * its owner's DNS says where it goes) used to pass as loopback; it is
 * refused at load now, for the server's url as for a token_url.  The
 * loopback forms that must stay allowed are checked too. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "integration/test_rpc_harness.h"

#define SECRET_ENV "TH_ATT33_OAUTH_SECRET"

/* `toolhost list` on a config whose server url is `url` (token_url
 * `tu`, NULL: none): its exit status, and whether stderr holds `want`
 * (NULL: nothing asked). */
static int list_with(const char *url, const char *tu, const char *want,
                     bool *said)
{
    setenv(SECRET_ENV, "att33-secret", 1);
    char *dir = th_test_tmpdir();
    char text[1024], tl[256] = "";
    if (tu)
        snprintf(tl, sizeof tl, ", token_url: \"%s\"", tu);
    snprintf(text, sizeof text,
             "plugins:\n"
             "  - name: mcp\n"
             "    path: %s/plugins/mcp.so\n"
             "    config:\n"
             "      start_timeout: 300ms\n"
             "      servers:\n"
             "        - name: in\n"
             "          url: \"%s\"\n"
             "          oauth: {client_id: c1, client_secret_env: "
             SECRET_ENV "%s}\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             TH_BUILD_DIR, url, tl);
    char *cfg = th_test_write_file(dir, "o.yaml", text, (size_t)-1);
    th_test_run r;
    int st = -1;
    if (th_test_toolhost(&r, "list", "-c", cfg, NULL) == 0)
        st = r.status;
    *said = want && r.err && strstr(r.err, want);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
    return st;
}

static void test_name_like_loopback(void)
{
    bool said;
    CU_ASSERT_NOT_EQUAL(
        list_with("http://127.attacker.example/mcp", NULL,
                  "'http://127.attacker.example/mcp' is plain http to a "
                  "host that is not loopback",
                  &said),
        0);
    CU_ASSERT(said);
    CU_ASSERT_NOT_EQUAL(
        list_with("http://127.0.0.1.attacker.example/mcp", NULL,
                  "is plain http to a host that is not loopback", &said),
        0);
    CU_ASSERT(said);
    CU_ASSERT_NOT_EQUAL(
        list_with("https://tools.example/mcp", "http://127.as.example/token",
                  "oauth: 'token_url': 'http://127.as.example/token' is "
                  "plain http",
                  &said),
        0);
    CU_ASSERT(said);
}

/* The loopback forms still pass the URL rule: what stderr says then is
 * about the server not answering (nothing listens), never the rule. */
static void test_loopback_allowed(void)
{
    const char *ok[] = {"http://127.0.0.1:9/mcp", "http://127.3.4.5:9/mcp",
                        "http://localhost:9/mcp", "http://[::1]:9/mcp",
                        NULL};
    for (int i = 0; ok[i]; i++) {
        bool said;
        list_with(ok[i], NULL, "plain http", &said);
        CU_ASSERT(!said);
        if (said)
            fprintf(stderr, "\n%s refused as plain http\n", ok[i]);
    }
}

void th_suite_att33_oauth(void)
{
    CU_pSuite s = CU_add_suite("att33_oauth", NULL, NULL);
    CU_add_test(s, "name_like_loopback", test_name_like_loopback);
    CU_add_test(s, "loopback_allowed", test_loopback_allowed);
}
