/* fuzz/oauth.c - libFuzzer target: what an OAuth client and an issuer send
 * the MCP HTTP front (host/mcp/oauth.h).
 *
 * The first byte picks the input; the rest is it:
 *   even: a JWKS document -> th_oauth_jwks_parse (at most 4 keys): either
 *         an error with a message, or keys that each have a PEM and a
 *         known algorithm, never more than 4;
 *   odd:  a bearer token -> th_oauth_check against a validator whose
 *         JWKS (a file written once) holds one RS256 and one ES256 key:
 *         never accepted (the fuzzer holds no private key), refused with
 *         a reason, never a user set.
 *
 * needs: host/mcp/oauth.c
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "../host/mcp/oauth.h"

/* The public keys of tests/unit/test_oauth.c. */
#define OA_JWKS                                                               \
    "{\"keys\":[{\"kty\":\"RSA\",\"kid\":\"r1\",\"n\":\"6ZZvlzd2saC5sRrt_"   \
    "Xtc2GToUcA69NK8JgWOFPrGbGy5EmwoQaPmlbjJ2FSCFF1D59Zkt-UKoP99Yl0keC-SBy" \
    "2_g8UQ87tpnLO1EwHPcqeeZFrBst73hmJuNYFUHY0LJZWvtiZcc1qoZTv_a6XLmo4vcpU" \
    "TGPngXHWtZKrz7IF1w3RVehzE3yjQNm46thcv5HVL5Ty3Cq3gPDyQg2ZJ94aG5bEGrbaQ" \
    "lSpX4kxPWYEI_VfC9eNfDs4POFrk6DC7R10EYCXc81gfYWfiguNqerHP_VtEKoyk_Sjn" \
    "GLEH7NhSWypj7OXP_CiDcXl7to8HW67DJhMlHBrrQI3XHYehDw\",\"e\":\"AQAB\"}," \
    "{\"kty\":\"EC\",\"kid\":\"e1\",\"crv\":\"P-256\",\"x\":\"VnE9i-iU-xQ8v" \
    "2skCFWDEBPOwxQ51mYZdyJ_twek_aQ\",\"y\":\"x10MWqKXURBPYKLgAO4n9OgHpEum" \
    "GpcNRDCLrsnt8NQ\"}]}"

static th_oauth *oa_v;
static char oa_path[64];

static void oa_open(void)
{
    snprintf(oa_path, sizeof oa_path, "/tmp/th-fuzz-oauth-%d.json",
             (int)getpid());
    FILE *f = fopen(oa_path, "w");
    TH_FUZZ_CHECK(f != NULL);
    if (!f)
        return;
    fputs(OA_JWKS, f);
    fclose(f);
    th_mcp_oauth_cfg c;
    memset(&c, 0, sizeof c);
    c.issuer = "https://issuer.example";
    c.jwks_file = oa_path;
    c.jwks_refresh_ms = 3600000;
    c.jwks_min_interval_ms = 3600000;
    c.jwks_timeout_ms = 1000;
    c.leeway_ms = 30000;
    c.max_token = 8192;
    c.max_jwks = 65536;
    c.max_keys = 4;
    const char *aud = "https://mcp.example/mcp";
    th_error err;
    th_error_clear(&err);
    oa_v = th_oauth_new(&c, &aud, 1, &err);
    TH_FUZZ_CHECK(oa_v != NULL);
}

__attribute__((unused)) static void oa_close(void)
{
    th_oauth_free(oa_v);
    oa_v = NULL;
    if (oa_path[0])
        unlink(oa_path);
}

static void oa_jwks(const uint8_t *data, size_t size)
{
    th_oauth_keys ks;
    th_error err;
    th_error_clear(&err);
    int rc = th_oauth_jwks_parse((const char *)data, size, 4, &ks, &err);
    if (rc < 0) {
        TH_FUZZ_CHECK(err.msg[0] != 0 && ks.n == 0);
        return;
    }
    TH_FUZZ_CHECK(ks.n <= 4);
    for (size_t i = 0; i < ks.n; i++)
        TH_FUZZ_CHECK(ks.v[i].pem && ks.v[i].pem_len > 0 &&
                      (ks.v[i].alg == TH_OAUTH_RS256 ||
                       ks.v[i].alg == TH_OAUTH_ES256));
    th_oauth_keys_clear(&ks);
}

static void oa_token(const uint8_t *data, size_t size)
{
    if (!oa_v)
        oa_open();
    if (!oa_v)
        return;
    char user[256] = "";
    const char *why = NULL;
    int rc = th_oauth_check(oa_v, (const char *)data, size, user,
                            sizeof user, &why);
    TH_FUZZ_CHECK(rc != TH_OAUTH_OK && why != NULL && user[0] == 0);
}

static int fuzz_oauth(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 16384)
        return 0;
    if (data[0] % 2 == 0)
        oa_jwks(data + 1, size - 1);
    else
        oa_token(data + 1, size - 1);
    return 0;
}

TH_FUZZ_ENTRY(fuzz_oauth)
