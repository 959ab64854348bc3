/* host/mcp/oauth.h - the MCP HTTP front as an OAuth 2.1 resource server:
 * the issuer's signing keys (a JWKS file or URL, re-read in the
 * background) and the local validation of JWT access tokens (signature,
 * issuer, audience, expiry, not-before, scope) into a principal name
 * (mcp.oauth; docs/mcp.md, "Authorization").
 *
 * Signatures: RS256 and ES256 only, checked by libjwt against a PEM
 * public key made from each JWK by GnuTLS; the token's `alg` must be the
 * algorithm of the key its `kid` names (no `none`, no HS* with a public
 * key's text as the secret).  Base64url by nettle, JSON by jansson.
 *
 * Threads: th_oauth_new() and th_oauth_free() from one thread; the
 * others from any thread, concurrently.  A th_oauth runs one thread of its
 * own, the refresher: no request ever waits on the network (a token whose
 * kid is unknown asks for a re-read, rate-limited, and is refused). */
#ifndef TH_MCP_OAUTH_H
#define TH_MCP_OAUTH_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/err.h"
#include "front/mcp_config.h"

/* ---- keys ---------------------------------------------------------------- */

/* The signature algorithms a key may be used for. */
typedef enum { TH_OAUTH_RS256 = 1, TH_OAUTH_ES256 = 2 } th_oauth_alg;

typedef struct th_oauth_key {
    char *kid;        /* NULL: the JWK has none                     */
    th_oauth_alg alg;
    char *pem;        /* the public key, PEM (SubjectPublicKeyInfo) */
    size_t pem_len;
} th_oauth_key;

typedef struct th_oauth_keys {
    th_oauth_key *v;
    size_t n;
    size_t skipped;   /* JWKs not usable for RS256/ES256 signatures
                         (another kty, use "enc", ...), left out    */
} th_oauth_keys;

/* One JWK (an RSA key of at least 2048 bits, or an EC P-256 key) as a
 * key.  0, or TH_EINVAL with err naming what is wrong ("the JWK has no
 * 'n'", "the JWK's 'crv' is P-384: only P-256 is used", ...), TH_ENOMEM.
 * key: the caller's, filled on success; th_oauth_key_clear() frees it. */
int th_oauth_jwk_key(const json_t *jwk, th_oauth_key *key, th_error *err);
void th_oauth_key_clear(th_oauth_key *key);

/* A JWKS document ({"keys": [...]}, len bytes) as keys: the usable ones,
 * at most max_keys of them (more: TH_ELIMIT), two with one kid refused
 * (TH_EINVAL).  Keys that cannot sign RS256/ES256 are skipped (counted);
 * a key that claims to and is broken refuses the whole document.  0, or
 * an error with err set.  out: the caller's, th_oauth_keys_clear(). */
int th_oauth_jwks_parse(const char *text, size_t len, uint32_t max_keys,
                        th_oauth_keys *out, th_error *err);
void th_oauth_keys_clear(th_oauth_keys *k);

/* ---- claims -------------------------------------------------------------- */

/* The rules a token's claims meet (borrowed strings). */
typedef struct th_oauth_rules {
    const char *issuer;
    const char *const *audiences; /* `aud` holds one of them */
    size_t n_audiences;
    const char *user_claim;
    const char *required_scope;   /* NULL: none */
    int64_t leeway_s;
} th_oauth_rules;

enum {
    TH_OAUTH_OK = 0,
    TH_OAUTH_INVALID = 1, /* 401, error="invalid_token"      */
    TH_OAUTH_SCOPE = 2,   /* 403, error="insufficient_scope" */
};

/* Checks a token's claims (a JSON object) at `now` (seconds since the
 * epoch): iss, aud, exp (required), nbf, the scope (`scope`, a
 * space-separated string, or `scp`, an array) and the user claim (a string
 * of 1 to 255 printable bytes), copied into user[cap].  TH_OAUTH_OK, or
 * TH_OAUTH_INVALID / TH_OAUTH_SCOPE with *why a constant phrase ("the
 * token has expired", "wrong audience", ...). */
int th_oauth_claims_check(const th_oauth_rules *r, const json_t *claims,
                          int64_t now, char *user, size_t cap,
                          const char **why);

/* ---- the validator ------------------------------------------------------- */

typedef struct th_oauth th_oauth;

/* A validator for the config `c` (copied); audiences: the accepted `aud`
 * values when c->audience is NULL (the resource URLs of the front).  The
 * first read of the keys happens here: a jwks_file that cannot be read or
 * used fails (err set); a jwks_url that cannot be fetched is logged and
 * retried in the background (tokens are refused meanwhile).  NULL with
 * err set on failure. */
th_oauth *th_oauth_new(const th_mcp_oauth_cfg *c, const char *const *audiences,
                       size_t n_audiences, th_error *err);
/* Stops the refresher and frees everything. */
void th_oauth_free(th_oauth *o);

/* Validates the bearer token tok[0..len).  TH_OAUTH_OK with the principal
 * in user[cap]; TH_OAUTH_INVALID or TH_OAUTH_SCOPE with *why a constant
 * phrase (safe in a header: no byte of the token).  Any thread; never
 * waits on the network. */
int th_oauth_check(th_oauth *o, const char *tok, size_t len, char *user,
                   size_t cap, const char **why);

/* The local uid mcp.oauth.users gives `user`: true with *uid set. */
bool th_oauth_user_uid(const th_oauth *o, const char *user, uint32_t *uid);

/* Times the keys were read with a change, and the keys in use now. */
uint64_t th_oauth_generation(th_oauth *o);

#endif
