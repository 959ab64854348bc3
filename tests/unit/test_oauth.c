/* test_oauth.c - the OAuth resource server's pieces (host/mcp/oauth.h):
 * JWK to PEM against the PEM openssl wrote for the same keys, JWKS
 * documents good and bad (budgets, skipped keys, duplicate kids), the
 * claim checks one rule at a time, and the mcp.oauth config keys. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../host/mcp/oauth.h"
#include "common/th_test.h"
#include "th/config.h"
#include "front/mcp_config.h"

/* A 2048-bit RSA key and a P-256 key: their JWK members and the public
 * key PEM `openssl pkey -pubout` wrote for them. */
#define RSA_N                                                                 \
    "6ZZvlzd2saC5sRrt_Xtc2GToUcA69NK8JgWOFPrGbGy5EmwoQaPmlbjJ2FSCFF1D59Zkt-" \
    "UKoP99Yl0keC-SBy2_g8UQ87tpnLO1EwHPcqeeZFrBst73hmJuNYFUHY0LJZWvtiZcc1qo" \
    "ZTv_a6XLmo4vcpUTGPngXHWtZKrz7IF1w3RVehzE3yjQNm46thcv5HVL5Ty3Cq3gPDyQg2" \
    "ZJ94aG5bEGrbaQlSpX4kxPWYEI_VfC9eNfDs4POFrk6DC7R10EYCXc81gfYWfiguNqerHP" \
    "_VtEKoyk_SjnGLEH7NhSWypj7OXP_CiDcXl7to8HW67DJhMlHBrrQI3XHYehDw"
#define RSA_PEM                                                               \
    "-----BEGIN PUBLIC KEY-----\n"                                           \
    "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA6ZZvlzd2saC5sRrt/Xtc\n"     \
    "2GToUcA69NK8JgWOFPrGbGy5EmwoQaPmlbjJ2FSCFF1D59Zkt+UKoP99Yl0keC+S\n"     \
    "By2/g8UQ87tpnLO1EwHPcqeeZFrBst73hmJuNYFUHY0LJZWvtiZcc1qoZTv/a6XL\n"     \
    "mo4vcpUTGPngXHWtZKrz7IF1w3RVehzE3yjQNm46thcv5HVL5Ty3Cq3gPDyQg2ZJ\n"     \
    "94aG5bEGrbaQlSpX4kxPWYEI/VfC9eNfDs4POFrk6DC7R10EYCXc81gfYWfiguNq\n"     \
    "erHP/VtEKoyk/SjnGLEH7NhSWypj7OXP/CiDcXl7to8HW67DJhMlHBrrQI3XHYeh\n"     \
    "DwIDAQAB\n"                                                              \
    "-----END PUBLIC KEY-----\n"
#define EC_X "VnE9i-iU-xQ8v2skCFWDEBPOwxQ51mYZdyJ_twek_aQ"
#define EC_Y "x10MWqKXURBPYKLgAO4n9OgHpEumGpcNRDCLrsnt8NQ"
#define EC_PEM                                                                \
    "-----BEGIN PUBLIC KEY-----\n"                                           \
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEVnE9i+iU+xQ8v2skCFWDEBPOwxQ5\n"     \
    "1mYZdyJ/twek/aTHXQxaopdREE9gouAA7if06AekS6Yalw1EMIuuye3w1A==\n"         \
    "-----END PUBLIC KEY-----\n"

#define RSA_JWK(kid)                                                          \
    "{\"kty\":\"RSA\",\"kid\":\"" kid "\",\"use\":\"sig\",\"n\":\"" RSA_N   \
    "\",\"e\":\"AQAB\"}"
#define EC_JWK(kid)                                                           \
    "{\"kty\":\"EC\",\"kid\":\"" kid "\",\"crv\":\"P-256\",\"x\":\"" EC_X   \
    "\",\"y\":\"" EC_Y "\"}"

static int jwk(const char *text, th_oauth_key *k, th_error *e)
{
    json_t *j = json_loads(text, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    th_error_clear(e);
    int rc = th_oauth_jwk_key(j, k, e);
    json_decref(j);
    return rc;
}

static void test_jwk_pem(void)
{
    th_oauth_key k;
    th_error e;
    CU_ASSERT_EQUAL(jwk(RSA_JWK("r1"), &k, &e), 0);
    CU_ASSERT_EQUAL(k.alg, TH_OAUTH_RS256);
    CU_ASSERT_STRING_EQUAL(k.kid, "r1");
    CU_ASSERT_STRING_EQUAL(k.pem, RSA_PEM);
    CU_ASSERT_EQUAL(k.pem_len, strlen(RSA_PEM));
    th_oauth_key_clear(&k);
    CU_ASSERT_EQUAL(jwk(EC_JWK("e1"), &k, &e), 0);
    CU_ASSERT_EQUAL(k.alg, TH_OAUTH_ES256);
    CU_ASSERT_STRING_EQUAL(k.pem, EC_PEM);
    th_oauth_key_clear(&k);
    /* a modulus with leading zero bytes (AAAA in base64url) is the same
     * key */
    CU_ASSERT_EQUAL(jwk("{\"kty\":\"RSA\",\"n\":\"AAAA" RSA_N "\",\"e\":"
                        "\"AQAB\"}", &k, &e), 0);
    CU_ASSERT(k.pem && strcmp(k.pem, RSA_PEM) == 0);
    th_oauth_key_clear(&k);
}

#define EXPECT_JWK_ERR(text, want)                                            \
    do {                                                                      \
        th_oauth_key k_;                                                      \
        th_error e_;                                                          \
        CU_ASSERT_EQUAL(jwk(text, &k_, &e_), TH_EINVAL);                      \
        if (!strstr(e_.msg, want))                                            \
            printf("\n  want '%s', got '%s'\n", want, e_.msg);               \
        CU_ASSERT_PTR_NOT_NULL(strstr(e_.msg, want));                         \
        CU_ASSERT_PTR_NULL(k_.pem);                                           \
    } while (0)

static void test_jwk_errors(void)
{
    EXPECT_JWK_ERR("{\"kty\":\"oct\",\"k\":\"c2VjcmV0\"}", "'kty' is oct");
    EXPECT_JWK_ERR("{\"kty\":\"RSA\",\"e\":\"AQAB\"}", "no 'n'");
    EXPECT_JWK_ERR("{\"kty\":\"RSA\",\"n\":\"" RSA_N "\",\"e\":\"AQAB\","
                   "\"alg\":\"RS512\"}", "only RS256");
    /* 1024 bits: too weak */
    EXPECT_JWK_ERR("{\"kty\":\"RSA\",\"n\":\"" "6ZZvlzd2saC5sRrt_Xtc2GToUcA69"
                   "NK8JgWOFPrGbGy5EmwoQaPmlbjJ2FSCFF1D59Zkt-UKoP99Yl0keC-SB"
                   "y2_g8UQ87tpnLO1EwHPcqeeZFrBst73hmJuNYFUHY0LJZWvtiZcc1qoZ"
                   "Tv_a6XLmo4vcpUTGPngXHWtZKrz7IE\",\"e\":\"AQAB\"}",
                   "1024 bits");
    EXPECT_JWK_ERR("{\"kty\":\"RSA\",\"n\":\"" RSA_N "\",\"e\":\"AQ=B\"}",
                   "'e' is not base64url");
    EXPECT_JWK_ERR("{\"kty\":\"RSA\",\"n\":\"" RSA_N "\",\"e\":\"Ag\"}",
                   "exponent");
    EXPECT_JWK_ERR("{\"kty\":\"RSA\",\"n\":\"" RSA_N "!\",\"e\":\"AQAB\"}",
                   "'n' is not base64url");
    EXPECT_JWK_ERR("{\"kty\":\"EC\",\"crv\":\"P-384\",\"x\":\"" EC_X
                   "\",\"y\":\"" EC_Y "\"}", "only P-256");
    EXPECT_JWK_ERR("{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"" EC_X
                   "\",\"y\":\"" EC_X "\"}", "not valid");
    EXPECT_JWK_ERR("{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"" EC_X
                   "\",\"y\":\"AAAA\"}", "32 bytes");
    EXPECT_JWK_ERR("{\"kty\":\"EC\",\"kid\":7,\"crv\":\"P-256\",\"x\":\""
                   EC_X "\",\"y\":\"" EC_Y "\"}", "'kid'");
}

static void test_jwks(void)
{
    th_oauth_keys ks;
    th_error e;
    th_error_clear(&e);
    const char *doc = "{\"keys\":[" RSA_JWK("r1") "," EC_JWK("e1") ","
                      "{\"kty\":\"oct\",\"kid\":\"s\",\"k\":\"c2VjcmV0\"},"
                      "{\"kty\":\"RSA\",\"use\":\"enc\",\"n\":\"x\"},"
                      "{\"kty\":\"EC\",\"crv\":\"P-521\"}]}";
    CU_ASSERT_EQUAL(th_oauth_jwks_parse(doc, strlen(doc), 32, &ks, &e), 0);
    CU_ASSERT_EQUAL(ks.n, 2);
    CU_ASSERT_EQUAL(ks.skipped, 3);
    th_oauth_keys_clear(&ks);
    /* max_keys */
    CU_ASSERT_EQUAL(th_oauth_jwks_parse(doc, strlen(doc), 1, &ks, &e),
                    TH_ELIMIT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "max_keys"));
    CU_ASSERT_EQUAL(ks.n, 0);
    /* one kid twice */
    const char *dup = "{\"keys\":[" RSA_JWK("k") "," EC_JWK("k") "]}";
    CU_ASSERT_EQUAL(th_oauth_jwks_parse(dup, strlen(dup), 32, &ks, &e),
                    TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "kid 'k'"));
    /* a broken key that claims to sign refuses the document */
    const char *bad = "{\"keys\":[" RSA_JWK("r1") ",{\"kty\":\"EC\","
                      "\"crv\":\"P-256\",\"x\":\"AA\",\"y\":\"AA\"}]}";
    CU_ASSERT_EQUAL(th_oauth_jwks_parse(bad, strlen(bad), 32, &ks, &e),
                    TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "key 1: "));
    const char *nokeys = "{\"kys\":[]}";
    CU_ASSERT_EQUAL(th_oauth_jwks_parse(nokeys, strlen(nokeys), 32, &ks, &e),
                    TH_EINVAL);
    CU_ASSERT_EQUAL(th_oauth_jwks_parse("{", 1, 32, &ks, &e), TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "not JSON"));
    /* duplicate members: refused, not the last one wins */
    const char *twice = "{\"keys\":[],\"keys\":[" RSA_JWK("r") "]}";
    CU_ASSERT_EQUAL(th_oauth_jwks_parse(twice, strlen(twice), 32, &ks, &e),
                    TH_EINVAL);
}

/* ---- claims -------------------------------------------------------------- */

#define NOW 1800000000
static const char *const auds[] = {"https://mcp.example/mcp",
                                   "http://127.0.0.1:8080/mcp"};
static const th_oauth_rules rules = {.issuer = "https://issuer.example",
                                     .audiences = auds,
                                     .n_audiences = 2,
                                     .user_claim = "sub",
                                     .leeway_s = 30};

static int claims(const th_oauth_rules *r, const char *json, char *user,
                  const char **why)
{
    json_error_t je;
    json_t *j = json_loads(json, 0, &je);
    if (!j)
        printf("\n  bad test JSON: %s\n", je.text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    int rc = th_oauth_claims_check(r, j, NOW, user, 256, why);
    json_decref(j);
    return rc;
}

#define BASE "\"iss\":\"https://issuer.example\",\"sub\":\"alice\""
#define AUD "\"aud\":\"https://mcp.example/mcp\""

#define EXPECT_CLAIMS(r, json, want_rc, want_why)                             \
    do {                                                                      \
        char u_[256] = "";                                                    \
        const char *w_ = NULL;                                                \
        int rc_ = claims(r, json, u_, &w_);                                   \
        CU_ASSERT_EQUAL(rc_, want_rc);                                        \
        if (want_why) {                                                       \
            CU_ASSERT(w_ && strstr(w_, want_why));                            \
            if (!w_ || !strstr(w_, want_why))                                 \
                printf("\n  %s: want '%s', got '%s'\n", json,                 \
                       (const char *)(want_why), w_ ? w_ : "(null)");        \
        } else {                                                              \
            CU_ASSERT_STRING_EQUAL(u_, "alice");                              \
        }                                                                     \
    } while (0)

static void test_claims(void)
{
    const char *ok = NULL;
    EXPECT_CLAIMS(&rules, "{" BASE "," AUD ",\"exp\":1800000100}",
                  TH_OAUTH_OK, ok);
    /* aud as an array holding the second resource; nbf in the leeway */
    EXPECT_CLAIMS(&rules, "{" BASE ",\"aud\":[\"x\",\"http://127.0.0.1:"
                  "8080/mcp\"],\"exp\":1800000100,\"nbf\":1800000020}",
                  TH_OAUTH_OK, ok);
    /* exp in the leeway, as a real number */
    EXPECT_CLAIMS(&rules, "{" BASE "," AUD ",\"exp\":1799999980.5}",
                  TH_OAUTH_OK, ok);
    EXPECT_CLAIMS(&rules, "{" BASE "," AUD ",\"exp\":1799999970}",
                  TH_OAUTH_INVALID, "expired");
    EXPECT_CLAIMS(&rules, "{" BASE "," AUD "}", TH_OAUTH_INVALID,
                  "no expiry");
    EXPECT_CLAIMS(&rules, "{" BASE "," AUD ",\"exp\":\"1900000000\"}",
                  TH_OAUTH_INVALID, "no expiry");
    EXPECT_CLAIMS(&rules, "{" BASE "," AUD ",\"exp\":1800000100,"
                  "\"nbf\":1800000031}", TH_OAUTH_INVALID, "not valid yet");
    EXPECT_CLAIMS(&rules, "{" BASE "," AUD ",\"exp\":1800000100,"
                  "\"nbf\":\"soon\"}", TH_OAUTH_INVALID, "nbf");
    EXPECT_CLAIMS(&rules, "{" BASE ",\"aud\":\"https://mcp.example/\","
                  "\"exp\":1800000100}", TH_OAUTH_INVALID, "audience");
    EXPECT_CLAIMS(&rules, "{" BASE ",\"exp\":1800000100}", TH_OAUTH_INVALID,
                  "audience");
    EXPECT_CLAIMS(&rules, "{\"iss\":\"https://issuer.example/\",\"sub\":"
                  "\"alice\"," AUD ",\"exp\":1800000100}", TH_OAUTH_INVALID,
                  "issuer");
    EXPECT_CLAIMS(&rules, "{\"sub\":\"alice\"," AUD ",\"exp\":1800000100}",
                  TH_OAUTH_INVALID, "issuer");
    EXPECT_CLAIMS(&rules, "{\"iss\":\"https://issuer.example\"," AUD
                  ",\"exp\":1800000100}", TH_OAUTH_INVALID, "user claim");
    EXPECT_CLAIMS(&rules, "{\"iss\":\"https://issuer.example\",\"sub\":"
                  "\"a\\nb\"," AUD ",\"exp\":1800000100}", TH_OAUTH_INVALID,
                  "user claim");
    EXPECT_CLAIMS(&rules, "{\"iss\":\"https://issuer.example\",\"sub\":"
                  "\"\"," AUD ",\"exp\":1800000100}", TH_OAUTH_INVALID,
                  "user claim");
    EXPECT_CLAIMS(&rules, "[1]", TH_OAUTH_INVALID, "not a JSON object");
    /* another claim names the user; a scope is required */
    th_oauth_rules r2 = rules;
    r2.user_claim = "email";
    r2.required_scope = "mcp:tools";
    EXPECT_CLAIMS(&r2, "{\"iss\":\"https://issuer.example\",\"email\":"
                  "\"alice\",\"sub\":\"x\"," AUD ",\"exp\":1800000100,"
                  "\"scope\":\"openid mcp:tools\"}", TH_OAUTH_OK, ok);
    EXPECT_CLAIMS(&r2, "{\"iss\":\"https://issuer.example\",\"email\":"
                  "\"alice\"," AUD ",\"exp\":1800000100,"
                  "\"scp\":[\"mcp:tools\"]}", TH_OAUTH_OK, ok);
    EXPECT_CLAIMS(&r2, "{\"iss\":\"https://issuer.example\",\"email\":"
                  "\"alice\"," AUD ",\"exp\":1800000100,"
                  "\"scope\":\"openid mcp:tools:read\"}", TH_OAUTH_SCOPE,
                  "scope");
    EXPECT_CLAIMS(&r2, "{\"iss\":\"https://issuer.example\",\"email\":"
                  "\"alice\"," AUD ",\"exp\":1800000100}", TH_OAUTH_SCOPE,
                  "scope");
    /* an expired token is invalid before its scope is looked at */
    EXPECT_CLAIMS(&r2, "{\"iss\":\"https://issuer.example\",\"email\":"
                  "\"alice\"," AUD ",\"exp\":1}", TH_OAUTH_INVALID,
                  "expired");
}

/* ---- config -------------------------------------------------------------- */

static int parse(const char *yaml, th_config **cfg, th_error *err)
{
    th_error_clear(err);
    *cfg = NULL;
    return th_config_parse("t.yaml", "/cfg", yaml, strlen(yaml), cfg, err);
}

static void expect_cfg_err(const char *yaml, const char *want)
{
    th_config *cfg;
    th_error err;
    int rc = parse(yaml, &cfg, &err);
    CU_ASSERT_EQUAL(rc, TH_ECONFIG);
    if (rc == 0) {
        th_config_free(cfg);
        return;
    }
    if (!strstr(err.msg, want))
        printf("\n  want: ...%s...\n  got:  %s\n", want, err.msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
}

#define LISTEN "host: {listen: [\"http://127.0.0.1:0/mcp\"]}\n"

static void test_config(void)
{
    th_config *cfg;
    th_error err;
    CU_ASSERT_EQUAL_FATAL(
        parse(LISTEN "mcp:\n  oauth:\n"
              "    issuer: https://issuer.example\n"
              "    jwks_file: keys.json\n", &cfg, &err), 0);
    const th_mcp_oauth_cfg *o = &th_mcp_config(cfg)->oauth;
    CU_ASSERT(o->on);
    CU_ASSERT_STRING_EQUAL(o->jwks_file, "/cfg/keys.json");
    CU_ASSERT_EQUAL(o->jwks_refresh_ms, 600000);
    CU_ASSERT_EQUAL(o->jwks_min_interval_ms, 30000);
    CU_ASSERT_EQUAL(o->jwks_timeout_ms, 10000);
    CU_ASSERT_EQUAL(o->leeway_ms, 30000);
    CU_ASSERT_EQUAL(o->max_token, 8192);
    CU_ASSERT_EQUAL(o->max_jwks, 256 * 1024);
    CU_ASSERT_EQUAL(o->max_keys, 32);
    CU_ASSERT_PTR_NULL(o->audience);
    CU_ASSERT_PTR_NULL(o->user_claim);
    th_config_free(cfg);
    /* every key, and an OAuth principal allow_users may name */
    CU_ASSERT_EQUAL_FATAL(
        parse(LISTEN "toolsets:\n  - name: a\n    tools: ['*']\n"
              "    allow_users: [oauth-bob-x1]\n"
              "mcp:\n  oauth:\n"
              "    issuer: https://issuer.example\n"
              "    audience: https://mcp.example/mcp\n"
              "    resource: https://mcp.example/mcp\n"
              "    jwks_url: https://issuer.example/jwks.json\n"
              "    authorization_servers: [https://as.example]\n"
              "    scopes_supported: [mcp:tools]\n"
              "    required_scope: mcp:tools\n"
              "    user_claim: email\n"
              "    jwks_refresh: 1m\n    jwks_min_interval: 5s\n"
              "    jwks_timeout: 2s\n    leeway: 0s\n    max_token: 4KiB\n"
              "    max_jwks: 64KiB\n    max_keys: 4\n"
              "    users: [{name: oauth-bob-x1, uid: 1234}, {name: eve}]\n",
              &cfg, &err), 0);
    if (cfg) {
        o = &th_mcp_config(cfg)->oauth;
        CU_ASSERT_EQUAL(o->n_users, 2);
        CU_ASSERT(o->users[0].has_uid && o->users[0].uid == 1234);
        CU_ASSERT(!o->users[1].has_uid);
        CU_ASSERT_EQUAL(o->max_keys, 4);
        CU_ASSERT_EQUAL(o->leeway_ms, 0);
        CU_ASSERT_STRING_EQUAL(o->required_scope, "mcp:tools");
        th_config_free(cfg);
    }
    expect_cfg_err(LISTEN "mcp:\n  oauth: {jwks_file: k.json}\n",
                   "issuer");
    expect_cfg_err(LISTEN "mcp:\n  oauth: {issuer: https://i.example}\n",
                   "exactly one of 'jwks_file' and 'jwks_url'");
    expect_cfg_err(LISTEN "mcp:\n  oauth: {issuer: https://i.example, "
                   "jwks_file: k, jwks_url: https://i.example/k}\n",
                   "exactly one of");
    expect_cfg_err(LISTEN "mcp:\n  oauth: {issuer: https://i.example, "
                   "jwks_url: http://i.example/k}\n",
                   "not loopback");
    expect_cfg_err(LISTEN "mcp:\n  oauth: {issuer: https://i.example, "
                   "jwks_url: file:///etc/passwd}\n",
                   "not an absolute http");
    expect_cfg_err(LISTEN "mcp:\n  oauth: {issuer: not-a-url, "
                   "jwks_file: k}\n", "'issuer'");
    expect_cfg_err(LISTEN "mcp:\n  oauth: {issuer: https://i.example, "
                   "jwks_file: k, resource: \"https://m.example/a\\\"b\"}\n",
                   "'resource'");
    expect_cfg_err(LISTEN "mcp:\n  oauth: {issuer: https://i.example, "
                   "jwks_file: k, resource: \"https://m.example/#x\"}\n",
                   "fragment");
    {
        char y[1024];
        snprintf(y, sizeof y, LISTEN "mcp:\n  oauth: {issuer: "
                 "https://i.example, jwks_file: k, resource: "
                 "https://m.example/%0300d}\n", 0);
        expect_cfg_err(y, "'resource' is longer than 255 bytes");
    }
    expect_cfg_err(LISTEN "mcp:\n  oauth: {issuer: https://i.example, "
                   "jwks_file: k, required_scope: \"a b\"}\n",
                   "one scope");
    expect_cfg_err(LISTEN "mcp:\n  oauth: {issuer: https://i.example, "
                   "jwks_file: k, max_token: 10}\n", "max_token");
    expect_cfg_err(LISTEN "mcp:\n  oauth: {issuer: https://i.example, "
                   "jwks_file: k, users: [{uid: 3}]}\n", "name");
    expect_cfg_err(LISTEN "mcp:\n  oauth: {issuer: https://i.example, "
                   "jwks_file: k, bogus: 1}\n", "bogus");
    /* without oauth and without tokens, an http:// entry is refused */
    expect_cfg_err(LISTEN, "mcp.tokens declares no token");
}

void th_suite_oauth(void)
{
    CU_pSuite s = CU_add_suite("oauth", NULL, NULL);
    CU_add_test(s, "jwk_pem", test_jwk_pem);
    CU_add_test(s, "jwk_errors", test_jwk_errors);
    CU_add_test(s, "jwks", test_jwks);
    CU_add_test(s, "claims", test_claims);
    CU_add_test(s, "config", test_config);
}
