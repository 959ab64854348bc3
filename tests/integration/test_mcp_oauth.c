/* test_mcp_oauth.c - the MCP HTTP front as an OAuth 2.1 resource server, on
 * the real `toolhost serve`: the test is the issuer (its own RSA and P-256
 * keys made by openssl, the JWKS written from them with GnuTLS and nettle,
 * tokens signed with libjwt), and checks over HTTP the metadata document,
 * the 401/403 answers and their WWW-Authenticate, tokens good and bad
 * (expired, not yet valid, wrong audience or issuer, alg none, HS256 keyed
 * with the public key's text, unknown kid, tampered, oversized, garbage),
 * a user no toolset allows, key rotation through the JWKS file and through
 * a JWKS URL the test serves (libmicrohttpd on 127.0.0.1:0), and a JWKS
 * URL gone or oversized: the keys of before keep working. */
#include <CUnit/CUnit.h>
#include <gnutls/abstract.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <jansson.h>
#include <jwt.h>
#include <microhttpd.h>
#include <nettle/base64.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/th_http.h"
#include "integration/test_rpc_harness.h"

#define ISS "https://issuer.test"
#define STAT_ENV "TH_MCP_OAUTH_TEST_STAT"
#define STAT_TOKEN "stat-token-0123456789abcdef"

/* ---- the issuer's keys --------------------------------------------------- */

typedef struct okey {
    char kid[16];
    jwt_alg_t alg;
    char *priv;   /* private key PEM (openssl genpkey) */
    char *pub;    /* public key PEM */
    json_t *jwk;  /* the public key as a JWK */
} okey;

static char *keydir;
static okey k_rsa1, k_ec1, k_rsa2;

static char *b64url(const uint8_t *p, size_t n)
{
    char *s = malloc(BASE64_ENCODE_LENGTH(n) + BASE64_ENCODE_FINAL_LENGTH +
                     1);
    if (!s)
        return NULL;
    struct base64_encode_ctx ctx;
    base64url_encode_init(&ctx);
    size_t l = base64_encode_update(&ctx, s, n, p);
    l += base64_encode_final(&ctx, s + l);
    while (l && s[l - 1] == '=')
        l--;
    s[l] = 0;
    return s;
}

static int make_key(okey *k, const char *kid, bool ec)
{
    snprintf(k->kid, sizeof k->kid, "%s", kid);
    k->alg = ec ? JWT_ALG_ES256 : JWT_ALG_RS256;
    char path[512];
    snprintf(path, sizeof path, "%s/%s.pem", keydir, kid);
    char *const argv_rsa[] = {"/usr/bin/openssl", "genpkey", "-algorithm",
                              "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                              "-out", path, NULL};
    char *const argv_ec[] = {"/usr/bin/openssl", "genpkey", "-algorithm",
                             "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                             "-out", path, NULL};
    th_test_run r;
    if (th_test_run_argv(ec ? argv_ec : argv_rsa, NULL, 60, 0, &r) != 0 ||
        r.status != 0) {
        fprintf(stderr, "openssl genpkey: %s\n", r.err ? r.err : "");
        th_test_run_free(&r);
        return -1;
    }
    th_test_run_free(&r);
    size_t len;
    if (!(k->priv = th_test_read_file(path, &len)))
        return -1;
    gnutls_privkey_t pk;
    gnutls_pubkey_t pub;
    gnutls_datum_t d = {(unsigned char *)k->priv, (unsigned)len};
    gnutls_privkey_init(&pk);
    gnutls_pubkey_init(&pub);
    int rc = -1;
    gnutls_datum_t a = {NULL, 0}, b = {NULL, 0}, pem = {NULL, 0};
    gnutls_ecc_curve_t curve;
    if (gnutls_privkey_import_x509_raw(pk, &d, GNUTLS_X509_FMT_PEM, NULL,
                                       0) < 0 ||
        gnutls_pubkey_import_privkey(pub, pk, 0, 0) < 0 ||
        gnutls_pubkey_export2(pub, GNUTLS_X509_FMT_PEM, &pem) < 0)
        goto out;
    k->pub = strndup((const char *)pem.data, pem.size);
    if (ec ? gnutls_pubkey_export_ecc_raw2(pub, &curve, &a, &b,
                                          GNUTLS_EXPORT_FLAG_NO_LZ) < 0
           : gnutls_pubkey_export_rsa_raw2(pub, &a, &b,
                                          GNUTLS_EXPORT_FLAG_NO_LZ) < 0)
        goto out;
    char *sa = b64url(a.data, a.size), *sb = b64url(b.data, b.size);
    if (ec) {
        /* x and y are 32 bytes each, leading zeros kept */
        uint8_t x[32] = {0}, y[32] = {0};
        memcpy(x + 32 - a.size, a.data, a.size);
        memcpy(y + 32 - b.size, b.data, b.size);
        free(sa);
        free(sb);
        sa = b64url(x, 32);
        sb = b64url(y, 32);
        k->jwk = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "kty", "EC",
                           "kid", kid, "crv", "P-256", "alg", "ES256", "x",
                           sa, "y", sb);
    } else {
        k->jwk = json_pack("{s:s, s:s, s:s, s:s, s:s}", "kty", "RSA", "kid",
                           kid, "use", "sig", "n", sa, "e", sb);
    }
    free(sa);
    free(sb);
    rc = k->jwk && k->pub ? 0 : -1;
out:
    gnutls_free(a.data);
    gnutls_free(b.data);
    gnutls_free(pem.data);
    gnutls_pubkey_deinit(pub);
    gnutls_privkey_deinit(pk);
    return rc;
}

static void free_key(okey *k)
{
    free(k->priv);
    free(k->pub);
    json_decref(k->jwk);
    memset(k, 0, sizeof *k);
}

static int suite_init(void)
{
    keydir = th_test_tmpdir();
    if (!keydir || make_key(&k_rsa1, "rsa1", false) < 0 ||
        make_key(&k_ec1, "ec1", true) < 0 ||
        make_key(&k_rsa2, "rsa2", false) < 0)
        return -1;
    return 0;
}

static int suite_clean(void)
{
    free_key(&k_rsa1);
    free_key(&k_ec1);
    free_key(&k_rsa2);
    if (keydir)
        th_test_rmtree(keydir);
    free(keydir);
    keydir = NULL;
    return 0;
}

/* {"keys": [...]} of the keys given (NULL-terminated), malloc'd text;
 * `pad` bytes of an extra member make it large. */
static char *jwks_of(size_t pad, const okey *k, ...)
{
    json_t *arr = json_array();
    va_list ap;
    va_start(ap, k);
    for (; k; k = va_arg(ap, const okey *))
        json_array_append(arr, k->jwk);
    va_end(ap);
    json_t *doc = json_pack("{s:o}", "keys", arr);
    if (pad) {
        char *p = malloc(pad + 1);
        memset(p, 'x', pad);
        p[pad] = 0;
        json_object_set_new(doc, "padding", json_string(p));
        free(p);
    }
    char *s = json_dumps(doc, 0);
    json_decref(doc);
    return s;
}

/* ---- tokens -------------------------------------------------------------- */

/* libjwt 1.10 writes an ES256 signature of 132 bytes (r and s padded to
 * P-521's size); JWS (RFC 7518 3.4) has r and s of 32 bytes each, what
 * issuers send: the token's signature made again that way, with GnuTLS
 * (the DER ECDSA signature split by gnutls_decode_rs_value). */
static char *es256_jws(const okey *k, char *t)
{
    char *dot = strrchr(t, '.');
    gnutls_privkey_t pk;
    gnutls_privkey_init(&pk);
    gnutls_datum_t d = {(unsigned char *)k->priv, (unsigned)strlen(k->priv)};
    gnutls_datum_t data = {(unsigned char *)t, (unsigned)(dot - t)};
    gnutls_datum_t sig = {NULL, 0}, r = {NULL, 0}, s = {NULL, 0};
    char *out = NULL;
    if (gnutls_privkey_import_x509_raw(pk, &d, GNUTLS_X509_FMT_PEM, NULL,
                                       0) == 0 &&
        gnutls_privkey_sign_data(pk, GNUTLS_DIG_SHA256, 0, &data, &sig) ==
            0 &&
        gnutls_decode_rs_value(&sig, &r, &s) == 0) {
        uint8_t rs[64] = {0};
        const gnutls_datum_t *v[2] = {&r, &s};
        for (int i = 0; i < 2; i++) {
            size_t n = v[i]->size, off = 0;
            while (n > 32 && v[i]->data[off] == 0) {
                off++;
                n--;
            }
            memcpy(rs + 32 * i + 32 - n, v[i]->data + off, n);
        }
        char *b = b64url(rs, 64);
        if (b && asprintf(&out, "%.*s.%s", (int)(dot - t), t, b) < 0)
            out = NULL;
        free(b);
    }
    gnutls_free(sig.data);
    gnutls_free(r.data);
    gnutls_free(s.data);
    gnutls_privkey_deinit(pk);
    free(t);
    CU_ASSERT_PTR_NOT_NULL(out);
    return out;
}

/* A token signed by k (kid: k's unless `kid` is given), its claims
 * `claims` (JSON) with exp now+300 and aud `aud` unless they name them. */
static char *sign(const okey *k, const char *kid, jwt_alg_t alg,
                  const char *key, const char *claims)
{
    jwt_t *j = NULL;
    jwt_new(&j);
    if (claims)
        CU_ASSERT_EQUAL(jwt_add_grants_json(j, claims), 0);
    if (!jwt_get_grant(j, "iss"))
        jwt_add_grant(j, "iss", ISS);
    if (jwt_get_grant_int(j, "exp") <= 0) /* -1: none */
        jwt_add_grant_int(j, "exp", (long)time(NULL) + 300);
    jwt_add_header(j, "kid", kid ? kid : k->kid);
    const char *kk = key ? key : k->priv;
    CU_ASSERT_EQUAL(jwt_set_alg(j, alg ? alg : k->alg,
                                (const unsigned char *)kk, (int)strlen(kk)),
                    0);
    char *t = jwt_encode_str(j);
    jwt_free(j);
    CU_ASSERT_PTR_NOT_NULL(t);
    if (t && k->alg == JWT_ALG_ES256 && !key && !alg)
        t = es256_jws(k, t);
    return t;
}

static char *json_b64(const char *json)
{
    return b64url((const uint8_t *)json, strlen(json));
}

/* ---- the host ------------------------------------------------------------ */

typedef struct osrv {
    rpc_srv rs;
    unsigned port;
    char aud[128];   /* the resource URL: the tokens' audience */
} osrv;

/* Starts the host with mcp.oauth (`oauth`: its keys, indented 4) and a
 * static token for "stat"; `users`: the mcp.oauth.users line (NULL: alice
 * and mallory without uid), `pub`: more lines of the toolset "public". */
static int o_start_ex(osrv *o, const char *oauth, const char *users,
                      const char *pub)
{
    memset(o, 0, sizeof *o);
    setenv(STAT_ENV, STAT_TOKEN, 1);
    char mcp[2048];
    snprintf(mcp, sizeof mcp,
             "mcp:\n"
             "  tokens:\n"
             "    - {user: stat, env: " STAT_ENV "}\n"
             "  oauth:\n"
             "    issuer: " ISS "\n"
             "%s\n"
             "%s",
             users ? users
                   : "    users: [{name: alice}, {name: mallory}, {name: bob}]",
             oauth);
    char pubx[256];
    /* the test's own uid too: its msgpack-RPC session (test
     * principal_uid) */
    snprintf(pubx, sizeof pubx,
             "    allow_users: [alice, bob, stat, \"%u\"]\n%s",
             (unsigned)getuid(), pub ? pub : "");
    rpc_opts ro = {.host_extra = "  listen: [\"http://127.0.0.1:0/mcp\"]\n",
                   .plugins_extra = mcp,
                   .public_extra = pubx};
    if (rpc_srv_start(&o->rs, &ro) != 0) {
        rpc_dump_log(&o->rs);
        return -1;
    }
    o->port = th_test_log_port(o->rs.log, "(Streamable HTTP) on http");
    if (!o->port)
        rpc_dump_log(&o->rs);
    snprintf(o->aud, sizeof o->aud, "http://127.0.0.1:%u/mcp", o->port);
    return o->port ? 0 : -1;
}

static int o_start(osrv *o, const char *oauth)
{
    return o_start_ex(o, oauth, NULL, NULL);
}

#define INIT_BODY                                                             \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"  \
    "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"               \
    "\"clientInfo\":{\"name\":\"oauth\",\"version\":\"1\"}}}"

/* POST initialize with `token` (NULL: no Authorization); the status, the
 * answer in *out. */
static int o_init(osrv *o, const char *token, char **out)
{
    char *h = NULL;
    if (token && asprintf(&h, "Authorization: Bearer %s\r\n", token) < 0)
        h = NULL;
    int st = th_test_http(o->port, "POST", "/mcp", h, INIT_BODY,
                          rpc_wait_ms(), out);
    free(h);
    return st;
}

static bool has(const char *text, const char *needle)
{
    bool ok = text && strcasestr(text, needle);
    if (!ok)
        fprintf(stderr, "\nno '%s' in:\n%.1500s\n", needle,
                text ? text : "");
    return ok;
}

/* `token` is refused with 401 invalid_token, the reason containing why. */
static void expect_invalid(osrv *o, const char *token, const char *why)
{
    char *out = NULL;
    int st = o_init(o, token, &out);
    CU_ASSERT_EQUAL(st, 401);
    if (st != 401)
        fprintf(stderr, "\nwant 401 (%s), got:\n%.1500s\n", why, out);
    CU_ASSERT(has(out, "WWW-Authenticate: Bearer error=\"invalid_token\""));
    CU_ASSERT(has(out, why));
    char rm[256];
    snprintf(rm, sizeof rm, "resource_metadata=\"http://127.0.0.1:%u/"
             ".well-known/oauth-protected-resource/mcp\"", o->port);
    CU_ASSERT(has(out, rm));
    free(out);
}

/* `token` opens a session; its id in sid. */
static bool expect_session(osrv *o, const char *token, char sid[80])
{
    char *out = NULL;
    int st = o_init(o, token, &out);
    sid[0] = 0;
    const char *p = out ? strcasestr(out, "Mcp-Session-Id: ") : NULL;
    if (st == 200 && p)
        sscanf(p + 16, "%79[0-9a-f]", sid);
    if (!sid[0])
        fprintf(stderr, "\nwant a session, got:\n%.1500s\n", out);
    free(out);
    return sid[0] != 0;
}

#define CLAIMS(o, sub, extra)                                                 \
    "{\"sub\":\"" sub "\",\"aud\":\"%s\",\"scope\":\"openid mcp:tools\"" extra "}"

/* A token of k for `sub` with the server's audience. */
static char *tok_for(osrv *o, const okey *k, const char *sub)
{
    char c[512];
    snprintf(c, sizeof c, "{\"sub\":\"%s\",\"aud\":\"%s\",\"scope\":"
             "\"openid mcp:tools\"}", sub, o->aud);
    return sign(k, NULL, 0, NULL, c);
}

/* A session of `token` calls echo: true when the answer echoes. */
static bool call_echo(osrv *o, const char *token, const char *sid)
{
    char h[10240];
    snprintf(h, sizeof h, "Authorization: Bearer %s\r\nMcp-Session-Id: %s\r\n"
             "MCP-Protocol-Version: 2025-06-18\r\n", token, sid);
    char *out = NULL;
    int st = th_test_http(o->port, "POST", "/mcp", h,
                          "{\"jsonrpc\":\"2.0\",\"method\":"
                          "\"notifications/initialized\"}",
                          rpc_wait_ms(), &out);
    CU_ASSERT_EQUAL(st, 202);
    free(out);
    st = th_test_http(o->port, "POST", "/mcp", h,
                      "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":"
                      "\"tools/call\",\"params\":{\"name\":\"echo\","
                      "\"arguments\":{\"text\":\"via-oauth\"}}}",
                      rpc_wait_ms(), &out);
    bool ok = st == 200 && has(out, "via-oauth");
    free(out);
    return ok;
}

#define OAUTH_FILE(extra)                                                     \
    "    jwks_file: %s\n"                                                    \
    "    required_scope: mcp:tools\n"                                        \
    "    scopes_supported: [mcp:tools]\n"                                    \
    "    max_token: 2KiB\n"                                                  \
    "    jwks_min_interval: 100ms\n" extra

static char *write_jwks(const char *name, const char *text)
{
    return th_test_write_file(keydir, name, text, (size_t)-1);
}

/* ---- the tests ----------------------------------------------------------- */

static void test_metadata(void)
{
    char *j = jwks_of(0, &k_rsa1, NULL);
    char *path = write_jwks("meta.json", j);
    free(j);
    char oauth[512];
    snprintf(oauth, sizeof oauth, OAUTH_FILE(""), path);
    osrv o;
    CU_ASSERT_FATAL(o_start(&o, oauth) == 0);
    const char *paths[] = {"/.well-known/oauth-protected-resource/mcp",
                           "/.well-known/oauth-protected-resource"};
    for (int i = 0; i < 2; i++) {
        char *out = NULL;
        int st = th_test_http(o.port, "GET", paths[i], NULL, NULL,
                              rpc_wait_ms(), &out);
        CU_ASSERT_EQUAL(st, 200);
        const char *body = out ? strstr(out, "\r\n\r\n") : NULL;
        json_t *doc = body ? json_loads(body + 4, 0, NULL) : NULL;
        CU_ASSERT_PTR_NOT_NULL(doc);
        CU_ASSERT_STRING_EQUAL(
            json_string_value(json_object_get(doc, "resource")), o.aud);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(
                                   json_object_get(doc,
                                                   "authorization_servers"),
                                   0)),
                               ISS);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(
                                   json_object_get(doc,
                                                   "scopes_supported"),
                                   0)),
                               "mcp:tools");
        CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(
                                   json_object_get(doc,
                                                   "bearer_methods_supported"),
                                   0)),
                               "header");
        CU_ASSERT(has(out, "application/json"));
        json_decref(doc);
        free(out);
    }
    /* no token: 401 naming the document, no error code */
    char *out = NULL;
    CU_ASSERT_EQUAL(o_init(&o, NULL, &out), 401);
    char want[256];
    snprintf(want, sizeof want, "WWW-Authenticate: Bearer "
             "resource_metadata=\"http://127.0.0.1:%u/.well-known/"
             "oauth-protected-resource/mcp\"\r\n", o.port);
    CU_ASSERT(has(out, want));
    free(out);
    /* the document takes GET only */
    CU_ASSERT_EQUAL(th_test_http(o.port, "POST", paths[0], NULL, "{}",
                                 rpc_wait_ms(), &out), 405);
    free(out);
    rpc_srv_free(&o.rs);
    free(path);
}

static void test_tokens(void)
{
    char *j = jwks_of(0, &k_rsa1, &k_ec1, NULL);
    char *path = write_jwks("tokens.json", j);
    free(j);
    char oauth[512];
    snprintf(oauth, sizeof oauth, OAUTH_FILE(""), path);
    osrv o;
    CU_ASSERT_FATAL(o_start(&o, oauth) == 0);
    char sid[80];
    /* RS256 and ES256: sessions of alice that call a tool */
    char *t_rs = tok_for(&o, &k_rsa1, "alice");
    CU_ASSERT(expect_session(&o, t_rs, sid));
    CU_ASSERT(call_echo(&o, t_rs, sid));
    char *t_es = tok_for(&o, &k_ec1, "alice");
    CU_ASSERT(expect_session(&o, t_es, sid));
    CU_ASSERT(call_echo(&o, t_es, sid));
    /* a session belongs to its principal: the same session id with a
     * valid token of another user is not found */
    char *t_mal = tok_for(&o, &k_rsa1, "mallory");
    {
        char h[4096], *out = NULL;
        snprintf(h, sizeof h, "Authorization: Bearer %s\r\n"
                 "Mcp-Session-Id: %s\r\n", t_mal, sid);
        int st = th_test_http(o.port, "POST", "/mcp", h,
                              "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":"
                              "\"tools/list\"}", rpc_wait_ms(), &out);
        CU_ASSERT(st == 403 || st == 404);
        free(out);
    }
    /* a valid token of a user no toolset allows: 403 */
    char *out = NULL;
    CU_ASSERT_EQUAL(o_init(&o, t_mal, &out), 403);
    CU_ASSERT(has(out, "no toolset allows this user"));
    free(out);
    free(t_mal);
    /* the static token still works beside */
    CU_ASSERT(expect_session(&o, STAT_TOKEN, sid));
    CU_ASSERT(call_echo(&o, STAT_TOKEN, sid));
    char c[1024], *t;
    int64_t now = (int64_t)time(NULL);
    /* expired (past the 30 s leeway) */
    snprintf(c, sizeof c, CLAIMS(o, "alice", ",\"exp\":%lld"), o.aud,
             (long long)(now - 120));
    t = sign(&k_rsa1, NULL, 0, NULL, c);
    expect_invalid(&o, t, "expired");
    free(t);
    /* not yet valid */
    snprintf(c, sizeof c, CLAIMS(o, "alice", ",\"nbf\":%lld"), o.aud,
             (long long)(now + 600));
    t = sign(&k_ec1, NULL, 0, NULL, c);
    expect_invalid(&o, t, "not valid yet");
    free(t);
    /* wrong audience: another resource */
    snprintf(c, sizeof c, CLAIMS(o, "alice", ""), "https://other.test/mcp");
    t = sign(&k_rsa1, NULL, 0, NULL, c);
    expect_invalid(&o, t, "wrong audience");
    free(t);
    /* wrong issuer */
    snprintf(c, sizeof c, CLAIMS(o, "alice", ",\"iss\":\"https://evil.test\""),
             o.aud);
    t = sign(&k_rsa1, NULL, 0, NULL, c);
    expect_invalid(&o, t, "wrong issuer");
    free(t);
    /* alg none, without and with a signature part */
    char *h64 = json_b64("{\"alg\":\"none\",\"kid\":\"rsa1\"}");
    snprintf(c, sizeof c, CLAIMS(o, "alice", ",\"iss\":\"" ISS "\","
             "\"exp\":%lld"), o.aud, (long long)(now + 300));
    char *p64 = json_b64(c);
    char none[2048];
    snprintf(none, sizeof none, "%s.%s.", h64, p64);
    expect_invalid(&o, none, "not a signed JWT");
    snprintf(none, sizeof none, "%s.%s.AAAA", h64, p64);
    expect_invalid(&o, none, "not RS256 or ES256");
    free(h64);
    /* HS256 keyed with the public key's PEM (algorithm confusion) */
    snprintf(c, sizeof c, CLAIMS(o, "alice", ""), o.aud);
    t = sign(&k_rsa1, NULL, JWT_ALG_HS256, k_rsa1.pub, c);
    expect_invalid(&o, t, "not RS256 or ES256");
    free(t);
    /* RS256 in the header, the key an EC one */
    t = sign(&k_rsa2, "ec1", 0, NULL, c);
    expect_invalid(&o, t, "alg is not its key");
    free(t);
    /* signed by a key the JWKS does not have, under a known kid */
    t = sign(&k_rsa2, "rsa1", 0, NULL, c);
    expect_invalid(&o, t, "bad signature");
    free(t);
    /* ES256 with r and s padded past 32 bytes (what libjwt 1.10 signs):
     * not the JWS form */
    t = sign(&k_ec1, NULL, JWT_ALG_ES256, NULL, c);
    expect_invalid(&o, t, "bad signature");
    free(t);
    /* unknown kid */
    t = sign(&k_rsa2, NULL, 0, NULL, c);
    expect_invalid(&o, t, "unknown key id");
    free(t);
    /* tampered payload: sub alice -> root under alice's signature */
    t = tok_for(&o, &k_rsa1, "alice");
    {
        char *d1 = strchr(t, '.'), *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
        CU_ASSERT_FATAL(d2 != NULL);
        snprintf(c, sizeof c, CLAIMS(o, "root", ",\"iss\":\"" ISS "\","
                 "\"exp\":%lld"), o.aud, (long long)(now + 300));
        char *np = json_b64(c), forged[4096];
        *d1 = 0;
        snprintf(forged, sizeof forged, "%s.%s%s", t, np, d2);
        expect_invalid(&o, forged, "bad signature");
        free(np);
    }
    free(t);
    free(p64);
    /* oversized (mcp.oauth.max_token: 2KiB), checked before anything */
    char big[3000];
    memset(big, 'A', sizeof big - 1);
    big[sizeof big - 1] = 0;
    char bigc[4096];
    snprintf(bigc, sizeof bigc, "{\"sub\":\"alice\",\"aud\":\"%s\","
             "\"scope\":\"mcp:tools\",\"pad\":\"%.2200s\"}", o.aud, big);
    t = sign(&k_rsa1, NULL, 0, NULL, bigc);
    expect_invalid(&o, t, "too large");
    CU_ASSERT(rpc_log_wait(&o.rs, "mcp.oauth.max_token", rpc_wait_ms()));
    free(t);
    /* garbage */
    expect_invalid(&o, "!!!not-a-token!!!", "not a signed JWT");
    expect_invalid(&o, "a.b.c", "header is not");
    expect_invalid(&o, "eyJhbGciOiJSUzI1NiJ9.e30.sig", "no key id");
    /* the scope: a valid token without mcp:tools gets 403 */
    snprintf(c, sizeof c, "{\"sub\":\"alice\",\"aud\":\"%s\","
             "\"scope\":\"openid\"}", o.aud);
    t = sign(&k_ec1, NULL, 0, NULL, c);
    CU_ASSERT_EQUAL(o_init(&o, t, &out), 403);
    CU_ASSERT(has(out, "WWW-Authenticate: Bearer error=\"insufficient_scope\", "
                       "scope=\"mcp:tools\", resource_metadata="));
    free(out);
    free(t);
    /* the host kept serving: alice still works */
    CU_ASSERT(expect_session(&o, t_rs, sid));
    free(t_rs);
    free(t_es);
    rpc_srv_free(&o.rs);
    unsetenv(STAT_ENV);
    free(path);
}

static void test_rotation_file(void)
{
    char *j = jwks_of(0, &k_rsa1, NULL);
    char *path = write_jwks("rot.json", j);
    free(j);
    char oauth[512];
    snprintf(oauth, sizeof oauth,
             OAUTH_FILE("    jwks_refresh: 1h\n    max_keys: 2\n"), path);
    osrv o;
    CU_ASSERT_FATAL(o_start(&o, oauth) == 0);
    char sid[80];
    char *t1 = tok_for(&o, &k_rsa1, "alice");
    char *t2 = tok_for(&o, &k_rsa2, "alice");
    CU_ASSERT(expect_session(&o, t1, sid));
    expect_invalid(&o, t2, "unknown key id");
    /* the issuer rotates: rsa2 in, rsa1 out */
    j = jwks_of(0, &k_rsa2, NULL);
    th_test_replace_file(path, j, strlen(j), 0644);
    free(j);
    /* the next unknown kid asks for a re-read (jwks_min_interval 100ms),
     * which lands in the background: that request is refused, the ones
     * after the new keys are in pass */
    char *out = NULL;
    o_init(&o, t2, &out);
    free(out);
    CU_ASSERT(rpc_log_wait(&o.rs, "rsa2 (RS256)", rpc_wait_ms()));
    CU_ASSERT(expect_session(&o, t2, sid));
    /* rsa1 is gone */
    expect_invalid(&o, t1, "unknown key id");
    /* a JWKS that breaks: the keys of before stay */
    th_test_replace_file(path, "{\"keys\": 7}", 11, 0644);
    char *t3 = sign(&k_rsa1, "nope", 0, NULL, NULL);
    expect_invalid(&o, t3, "unknown key id");
    CU_ASSERT(rpc_log_wait(&o.rs, "cannot re-read the JWKS", rpc_wait_ms()));
    CU_ASSERT(expect_session(&o, t2, sid));
    /* more signing keys than mcp.oauth.max_keys: not used either */
    j = jwks_of(0, &k_rsa1, &k_ec1, &k_rsa2, NULL);
    th_test_replace_file(path, j, strlen(j), 0644);
    free(j);
    char *t4 = sign(&k_rsa1, "nope2", 0, NULL, NULL);
    expect_invalid(&o, t4, "unknown key id");
    free(t4);
    CU_ASSERT(rpc_log_wait(&o.rs, "(mcp.oauth.max_keys)", rpc_wait_ms()));
    expect_invalid(&o, t1, "unknown key id");
    CU_ASSERT(expect_session(&o, t2, sid));
    free(t1);
    free(t2);
    free(t3);
    rpc_srv_free(&o.rs);
    free(path);
}

/* ---- a JWKS URL the test serves ------------------------------------------ */

typedef struct jsrv {
    struct MHD_Daemon *d;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stall;     /* answers wait until it is cleared (a slow issuer) */
    char *doc;
    unsigned hits;
    unsigned port;
} jsrv;

static enum MHD_Result jwks_handler(void *cls, struct MHD_Connection *c,
                                    const char *url, const char *method,
                                    const char *version, const char *upload,
                                    size_t *upload_size, void **req_cls)
{
    (void)url;
    (void)method;
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)req_cls;
    jsrv *s = cls;
    pthread_mutex_lock(&s->mu);
    s->hits++;
    while (s->stall)
        pthread_cond_wait(&s->cv, &s->mu);
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(s->doc), s->doc, MHD_RESPMEM_MUST_COPY);
    pthread_mutex_unlock(&s->mu);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return rc;
}

/* Serves doc (taken) on 127.0.0.1:port (0: a port of the kernel's). */
static int jsrv_start_at(jsrv *s, char *doc, unsigned port)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->doc = doc;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
                                MHD_USE_ERROR_LOG,
                            0, NULL, NULL, jwks_handler, s,
                            MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_END);
    if (!s->d)
        return -1;
    const union MHD_DaemonInfo *i =
        MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = i ? i->port : 0;
    return s->port ? 0 : -1;
}

static int jsrv_start(jsrv *s, char *doc)
{
    return jsrv_start_at(s, doc, 0);
}

static void jsrv_set(jsrv *s, char *doc)
{
    pthread_mutex_lock(&s->mu);
    free(s->doc);
    s->doc = doc;
    pthread_mutex_unlock(&s->mu);
}

static unsigned jsrv_hits(jsrv *s)
{
    pthread_mutex_lock(&s->mu);
    unsigned n = s->hits;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void jsrv_stall(jsrv *s, bool on)
{
    pthread_mutex_lock(&s->mu);
    s->stall = on;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void jsrv_stop(jsrv *s)
{
    if (s->d)
        MHD_stop_daemon(s->d);
    s->d = NULL;
}

static void jsrv_free(jsrv *s)
{
    jsrv_stop(s);
    free(s->doc);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
}

static void test_rotation_url(void)
{
    jsrv js;
    CU_ASSERT_FATAL(jsrv_start(&js, jwks_of(0, &k_rsa1, &k_ec1, NULL)) == 0);
    char oauth[512];
    snprintf(oauth, sizeof oauth,
             "    jwks_url: http://127.0.0.1:%u/jwks.json\n"
             "    jwks_refresh: 200ms\n"
             "    jwks_min_interval: 100ms\n"
             "    jwks_timeout: 1s\n"
             "    max_jwks: 4KiB\n",
             js.port);
    osrv o;
    if (o_start(&o, oauth) != 0) {
        jsrv_free(&js);
        CU_FAIL_FATAL("the host did not start");
    }
    char sid[80];
    char *t1 = tok_for(&o, &k_rsa1, "alice");
    char *t2 = tok_for(&o, &k_rsa2, "alice");
    CU_ASSERT(expect_session(&o, t1, sid));
    /* rotation: the URL serves rsa2 alone; the next refresh takes it */
    jsrv_set(&js, jwks_of(0, &k_rsa2, NULL));
    CU_ASSERT(rpc_log_wait(&o.rs, "rsa2 (RS256)", rpc_wait_ms()));
    CU_ASSERT(expect_session(&o, t2, sid));
    expect_invalid(&o, t1, "unknown key id");
    /* an answer over mcp.oauth.max_jwks: refused, the keys stay */
    jsrv_set(&js, jwks_of(5000, &k_rsa1, NULL));
    CU_ASSERT(rpc_log_wait(&o.rs, "mcp.oauth.max_jwks", rpc_wait_ms()));
    CU_ASSERT(expect_session(&o, t2, sid));
    /* an issuer that does not answer within mcp.oauth.jwks_timeout: the
     * fetch gives up, the keys stay, requests never wait for it */
    jsrv_stall(&js, true);
    CU_ASSERT(rpc_log_wait(&o.rs, "timed out", rpc_wait_ms()));
    CU_ASSERT(expect_session(&o, t2, sid));
    jsrv_stall(&js, false);
    /* the issuer's server goes away: logged, the keys stay */
    jsrv_stop(&js);
    CU_ASSERT(rpc_log_wait(&o.rs, "cannot re-read the JWKS from http://",
                           rpc_wait_ms()));
    CU_ASSERT(expect_session(&o, t2, sid));
    CU_ASSERT(call_echo(&o, t2, sid));
    free(t1);
    free(t2);
    rpc_srv_free(&o.rs);
    jsrv_free(&js);
}

/* Tokens of unknown kids ask for re-reads; jwks_min_interval bounds how
 * many reach the issuer. */
static void test_refetch_budget(void)
{
    jsrv js;
    CU_ASSERT_FATAL(jsrv_start(&js, jwks_of(0, &k_rsa1, NULL)) == 0);
    char oauth[512];
    snprintf(oauth, sizeof oauth,
             "    jwks_url: http://127.0.0.1:%u/jwks.json\n"
             "    jwks_refresh: 1h\n"
             "    jwks_min_interval: 1h\n",
             js.port);
    osrv o;
    if (o_start(&o, oauth) != 0) {
        jsrv_free(&js);
        CU_FAIL_FATAL("the host did not start");
    }
    CU_ASSERT_EQUAL(jsrv_hits(&js), 1); /* the fetch at start */
    for (int i = 0; i < 20; i++) {
        char kid[16];
        snprintf(kid, sizeof kid, "k%d", i);
        char *t = sign(&k_rsa2, kid, 0, NULL, NULL);
        char *out = NULL;
        CU_ASSERT_EQUAL(o_init(&o, t, &out), 401);
        free(out);
        free(t);
    }
    CU_ASSERT(rpc_log_wait(&o.rs, "re-reading it (at most every 3600000 ms",
                           rpc_wait_ms()));
    /* the host answered every one at once: none waited for the issuer,
     * and the issuer saw no second fetch */
    CU_ASSERT_EQUAL(jsrv_hits(&js), 1);
    rpc_srv_free(&o.rs);
    jsrv_free(&js);
}

/* The issuer is down when the host starts: logged, OAuth tokens refused;
 * the host tries again every jwks_min_interval and takes the keys once
 * the issuer answers. */
static void test_issuer_late(void)
{
    jsrv js;
    CU_ASSERT_FATAL(jsrv_start(&js, jwks_of(0, &k_ec1, NULL)) == 0);
    unsigned port = js.port;
    jsrv_free(&js);
    char oauth[512];
    snprintf(oauth, sizeof oauth,
             "    jwks_url: http://127.0.0.1:%u/jwks.json\n"
             "    jwks_refresh: 1h\n"
             "    jwks_min_interval: 100ms\n",
             port);
    osrv o;
    CU_ASSERT_FATAL(o_start(&o, oauth) == 0);
    CU_ASSERT(rpc_log_has(&o.rs, "cannot fetch the JWKS from http://"));
    char *t = tok_for(&o, &k_ec1, "alice");
    expect_invalid(&o, t, "unknown key id");
    if (jsrv_start_at(&js, jwks_of(0, &k_ec1, NULL), port) != 0) {
        rpc_srv_free(&o.rs);
        free(t);
        CU_FAIL_FATAL("the port was taken meanwhile");
    }
    CU_ASSERT(rpc_log_wait(&o.rs, "ec1 (ES256)", rpc_wait_ms()));
    char sid[80];
    CU_ASSERT(expect_session(&o, t, sid));
    free(t);
    rpc_srv_free(&o.rs);
    jsrv_free(&js);
}

/* The official MCP TypeScript SDK client (tests/mcp/http_client.mjs)
 * with an OAuth access token: list, call, progress, cancel, close. */
static void test_sdk_client(void)
{
    static const char *const nodes[] = {"/usr/bin/node",
                                        "/usr/local/bin/node", NULL};
    const char *node = NULL;
    for (int i = 0; nodes[i] && !node; i++)
        if (access(nodes[i], X_OK) == 0)
            node = nodes[i];
    struct stat st;
    if (!node ||
        stat(th_test_source_path("tests/mcp/node_modules/"
                                 "@modelcontextprotocol/sdk/package.json"),
             &st) != 0)
        TH_SKIP("node or the MCP SDK is missing (install nodejs, run npm "
                "ci in tests/mcp)");
    char *j = jwks_of(0, &k_rsa1, &k_ec1, NULL);
    char *path = write_jwks("sdk.json", j);
    free(j);
    char oauth[512];
    snprintf(oauth, sizeof oauth, OAUTH_FILE(""), path);
    osrv o;
    CU_ASSERT_FATAL(o_start(&o, oauth) == 0);
    char *t = tok_for(&o, &k_ec1, "alice");
    char script[1024];
    snprintf(script, sizeof script, "%s",
             th_test_source_path("tests/mcp/http_client.mjs"));
    char *argv[] = {(char *)node, script, "full", o.aud, t, NULL};
    th_test_run r;
    memset(&r, 0, sizeof r);
    th_test_run_argv(argv, NULL, 40, 0, &r);
    CU_ASSERT(has(r.out, "{\"step\":\"connect\",\"ok\":true,"
                         "\"session\":true"));
    CU_ASSERT(has(r.out, "{\"step\":\"call\",\"ok\":true,\"text\":"
                         "\"hello over http\"}"));
    CU_ASSERT(has(r.out, "{\"step\":\"progress\",\"ok\":true"));
    CU_ASSERT(has(r.out, "{\"step\":\"close\",\"ok\":true}"));
    th_test_run_free(&r);
    free(t);
    rpc_srv_free(&o.rs);
    free(path);
}

/* Opens an MCP session (protocol 2025-11-25) for token t: its request
 * headers in h. */
static bool uid_session(osrv *o, const char *t, char *h, size_t cap)
{
    char *out = NULL;
    snprintf(h, cap, "Authorization: Bearer %s\r\n", t);
    int st = th_test_http(o->port, "POST", "/mcp", h,
                          "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":"
                          "\"initialize\",\"params\":{\"protocolVersion\":"
                          "\"2025-11-25\",\"capabilities\":{},\"clientInfo\":"
                          "{\"name\":\"raw\",\"version\":\"1\"}}}",
                          rpc_wait_ms(), &out);
    char sid[80] = "";
    const char *p = out ? strcasestr(out, "Mcp-Session-Id: ") : NULL;
    if (st == 200 && p)
        sscanf(p + 16, "%79[0-9a-f]", sid);
    free(out);
    if (!sid[0])
        return false;
    snprintf(h, cap, "Authorization: Bearer %s\r\nMcp-Session-Id: %s\r\n"
             "MCP-Protocol-Version: 2025-11-25\r\n", t, sid);
    th_test_http(o->port, "POST", "/mcp", h,
                 "{\"jsonrpc\":\"2.0\",\"method\":"
                 "\"notifications/initialized\"}", rpc_wait_ms(), &out);
    free(out);
    return true;
}

/* Starts echo_async as a task in the session of headers h: its id. */
static unsigned long long uid_task(osrv *o, const char *h)
{
    char *out = NULL;
    th_test_http(o->port, "POST", "/mcp", h,
                 "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":"
                 "\"tools/call\",\"params\":{\"name\":\"echo_async\","
                 "\"arguments\":{\"text\":\"as-uid\",\"steps\":3,"
                 "\"delay_ms\":50},\"task\":{\"ttl\":60000}}}",
                 rpc_wait_ms(), &out);
    const char *p = out ? strstr(out, "\"taskId\":\"") : NULL;
    unsigned long long t = p ? strtoull(p + 10, NULL, 10) : 0;
    if (!t)
        fprintf(stderr, "\nno taskId:\n%.2000s\n", out ? out : "");
    free(out);
    return t;
}

/* An OAuth principal with a uid in mcp.oauth.users acts as that local
 * user, as a static token's `uid` does (docs/mcp.md "Tokens"): alice (uid
 * 4242) reads, from a second session, the toolset task her first one
 * started; bob (no uid) cannot: without a uid the core tells its
 * sessions apart by session only. */
static void test_principal_uid(void)
{
    char *j = jwks_of(0, &k_rsa1, NULL);
    char *path = write_jwks("uid.json", j);
    free(j);
    char oauth[512];
    snprintf(oauth, sizeof oauth, OAUTH_FILE(""), path);
    osrv o;
    CU_ASSERT_FATAL(o_start_ex(&o, oauth,
                               "    users: [{name: alice, uid: 4242}, "
                               "{name: bob}]",
                               "    scope: toolset\n") == 0);
    const char *who[2] = {"alice", "bob"};
    for (int i = 0; i < 2; i++) {
        char *t = tok_for(&o, &k_rsa1, who[i]);
        char h1[4096], h2[4096];
        CU_ASSERT_FATAL(uid_session(&o, t, h1, sizeof h1));
        CU_ASSERT_FATAL(uid_session(&o, t, h2, sizeof h2));
        unsigned long long task = uid_task(&o, h1);
        CU_ASSERT_FATAL(task != 0);
        char body[256], *out = NULL;
        snprintf(body, sizeof body, "{\"jsonrpc\":\"2.0\",\"id\":3,"
                 "\"method\":\"tasks/result\",\"params\":{\"taskId\":"
                 "\"%llu\"}}", task);
        int st = th_test_http(o.port, "POST", "/mcp", h2, body,
                              rpc_wait_ms(), &out);
        if (i == 0) {
            CU_ASSERT(st == 200 && has(out, "as-uid"));
        } else {
            CU_ASSERT(has(out, "unknown taskId"));
        }
        free(out);
        free(t);
    }
    rpc_srv_free(&o.rs);
    free(path);
}

void th_suite_mcp_oauth(void)
{
    CU_pSuite s = CU_add_suite("mcp_oauth", suite_init, suite_clean);
    CU_add_test(s, "metadata", test_metadata);
    CU_add_test(s, "tokens", test_tokens);
    CU_add_test(s, "rotation_file", test_rotation_file);
    CU_add_test(s, "rotation_url", test_rotation_url);
    CU_add_test(s, "refetch_budget", test_refetch_budget);
    CU_add_test(s, "issuer_late", test_issuer_late);
    CU_add_test(s, "sdk_client", test_sdk_client);
    CU_add_test(s, "principal_uid", test_principal_uid);
}
