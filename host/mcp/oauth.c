/* oauth.c - JWT access tokens checked locally against the issuer's JWKS
 * (oauth.h; docs/mcp.md, "Authorization").
 *
 * The keys in use are one counted th_oauth_keyset, swapped whole under
 * o->mu by the refresher thread; a check takes a reference under o->mu
 * and verifies without the lock.  The refresher re-reads the JWKS every
 * jwks_refresh, and sooner when a token named an unknown kid (o->want),
 * but never twice within jwks_min_interval.  A read that fails keeps the
 * keys of before (logged).
 *
 * Lock order: o->mu alone. */
#include "oauth.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <inttypes.h>
#include <jwt.h>
#include <nettle/base64.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "th/log.h"

/* The longest user claim value taken as a principal name. */
#define MAX_USER 255

/* ---- base64url (nettle) -------------------------------------------------- */

/* Decodes unpadded base64url s[0..n) into a new buffer (*out, *outlen;
 * NUL-terminated for JSON text).  0, or -1 (not canonical base64url, out of
 * memory).  nettle's decoder wants the padding, added here. */
static int b64url_decode(const char *s, size_t n, uint8_t **out,
                         size_t *outlen)
{
    *out = NULL;
    if (n % 4 == 1 || memchr(s, '=', n))
        return -1;
    size_t pad = (4 - n % 4) % 4;
    char *in = malloc(n + pad + 1);
    uint8_t *dst = malloc(BASE64_DECODE_LENGTH(n + pad) + 1);
    if (!in || !dst) {
        free(in);
        free(dst);
        return -1;
    }
    memcpy(in, s, n);
    memset(in + n, '=', pad);
    struct base64_decode_ctx ctx;
    base64url_decode_init(&ctx);
    size_t got = BASE64_DECODE_LENGTH(n + pad);
    int ok = base64_decode_update(&ctx, &got, dst, n + pad, in) &&
             base64_decode_final(&ctx);
    free(in);
    if (!ok) {
        free(dst);
        return -1;
    }
    dst[got] = 0;
    *out = dst;
    *outlen = got;
    return 0;
}

/* ---- JWK -> PEM (GnuTLS) ------------------------------------------------- */

void th_oauth_key_clear(th_oauth_key *key)
{
    if (!key)
        return;
    free(key->kid);
    free(key->pem);
    memset(key, 0, sizeof *key);
}

void th_oauth_keys_clear(th_oauth_keys *k)
{
    for (size_t i = 0; i < k->n; i++)
        th_oauth_key_clear(&k->v[i]);
    free(k->v);
    memset(k, 0, sizeof *k);
}

/* The base64url member `name` of jwk, decoded (leading zero bytes of an
 * integer dropped when strip).  0 or TH_EINVAL/TH_ENOMEM. */
static int jwk_bytes(const json_t *jwk, const char *name, bool strip,
                     uint8_t **out, size_t *len, th_error *err)
{
    const json_t *v = json_object_get(jwk, name);
    if (!json_is_string(v))
        return th_error_set(err, TH_EINVAL, "the JWK has no '%s' (a "
                            "base64url string)", name);
    if (b64url_decode(json_string_value(v), json_string_length(v), out,
                      len) < 0)
        return th_error_set(err, TH_EINVAL, "the JWK's '%s' is not "
                            "base64url", name);
    if (strip) {
        size_t z = 0;
        while (z < *len && (*out)[z] == 0)
            z++;
        memmove(*out, *out + z, *len - z);
        *len -= z;
    }
    return 0;
}

static int pem_of(gnutls_pubkey_t pub, th_oauth_key *key, th_error *err)
{
    gnutls_datum_t d = {NULL, 0};
    if (gnutls_pubkey_export2(pub, GNUTLS_X509_FMT_PEM, &d) < 0)
        return th_error_set(err, TH_EINVAL, "the JWK's key cannot be "
                            "exported");
    key->pem = malloc(d.size + 1);
    if (!key->pem) {
        gnutls_free(d.data);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    memcpy(key->pem, d.data, d.size);
    key->pem[d.size] = 0;
    key->pem_len = d.size;
    gnutls_free(d.data);
    return 0;
}

static int rsa_key(const json_t *jwk, th_oauth_key *key, th_error *err)
{
    uint8_t *n = NULL, *e = NULL;
    size_t nl = 0, el = 0;
    int rc = jwk_bytes(jwk, "n", true, &n, &nl, err);
    if (rc == 0)
        rc = jwk_bytes(jwk, "e", true, &e, &el, err);
    if (rc == 0 && (nl < 256 || nl > 1024))
        rc = th_error_set(err, TH_EINVAL, "the JWK's RSA modulus has %zu "
                          "bits (2048 to 8192 are used)", nl * 8);
    if (rc == 0 && (el == 0 || el > 8 || !(e[el - 1] & 1)))
        rc = th_error_set(err, TH_EINVAL, "the JWK's RSA exponent 'e' is "
                          "not a usable public exponent");
    gnutls_pubkey_t pub = NULL;
    if (rc == 0 && gnutls_pubkey_init(&pub) < 0)
        rc = th_error_set(err, TH_ENOMEM, "out of memory");
    if (rc == 0) {
        gnutls_datum_t m = {n, (unsigned)nl}, x = {e, (unsigned)el};
        if (gnutls_pubkey_import_rsa_raw(pub, &m, &x) < 0)
            rc = th_error_set(err, TH_EINVAL, "the JWK's RSA key is not "
                              "valid");
        else
            rc = pem_of(pub, key, err);
    }
    if (pub)
        gnutls_pubkey_deinit(pub);
    free(n);
    free(e);
    key->alg = TH_OAUTH_RS256;
    return rc;
}

static int ec_key(const json_t *jwk, th_oauth_key *key, th_error *err)
{
    const char *crv = json_string_value(json_object_get(jwk, "crv"));
    if (!crv || strcmp(crv, "P-256") != 0)
        return th_error_set(err, TH_EINVAL, "the JWK's 'crv' is %s: only "
                            "P-256 (ES256) is used", crv ? crv : "missing");
    uint8_t *x = NULL, *y = NULL;
    size_t xl = 0, yl = 0;
    int rc = jwk_bytes(jwk, "x", false, &x, &xl, err);
    if (rc == 0)
        rc = jwk_bytes(jwk, "y", false, &y, &yl, err);
    if (rc == 0 && (xl != 32 || yl != 32))
        rc = th_error_set(err, TH_EINVAL, "the JWK's P-256 'x' and 'y' "
                          "must be 32 bytes each");
    gnutls_pubkey_t pub = NULL;
    if (rc == 0 && gnutls_pubkey_init(&pub) < 0)
        rc = th_error_set(err, TH_ENOMEM, "out of memory");
    if (rc == 0) {
        gnutls_datum_t dx = {x, (unsigned)xl}, dy = {y, (unsigned)yl};
        /* GnuTLS checks the point is on the curve when the key is
         * verified with (gnutls_pubkey_verify_params, below). */
        if (gnutls_pubkey_import_ecc_raw(pub, GNUTLS_ECC_CURVE_SECP256R1,
                                         &dx, &dy) < 0 ||
            gnutls_pubkey_verify_params(pub) < 0)
            rc = th_error_set(err, TH_EINVAL, "the JWK's P-256 point is "
                              "not valid");
        else
            rc = pem_of(pub, key, err);
    }
    if (pub)
        gnutls_pubkey_deinit(pub);
    free(x);
    free(y);
    key->alg = TH_OAUTH_ES256;
    return rc;
}

int th_oauth_jwk_key(const json_t *jwk, th_oauth_key *key, th_error *err)
{
    memset(key, 0, sizeof *key);
    if (!json_is_object(jwk))
        return th_error_set(err, TH_EINVAL, "a JWK is not a JSON object");
    const char *kty = json_string_value(json_object_get(jwk, "kty"));
    const char *alg = json_string_value(json_object_get(jwk, "alg"));
    const json_t *kid = json_object_get(jwk, "kid");
    if (kid && (!json_is_string(kid) || json_string_length(kid) == 0 ||
                json_string_length(kid) > 256))
        return th_error_set(err, TH_EINVAL, "the JWK's 'kid' is not a "
                            "string of 1 to 256 bytes");
    int rc;
    if (kty && strcmp(kty, "RSA") == 0) {
        if (alg && strcmp(alg, "RS256") != 0)
            return th_error_set(err, TH_EINVAL, "the RSA JWK's 'alg' is "
                                "%.40s: only RS256 is used", alg);
        rc = rsa_key(jwk, key, err);
    } else if (kty && strcmp(kty, "EC") == 0) {
        if (alg && strcmp(alg, "ES256") != 0)
            return th_error_set(err, TH_EINVAL, "the EC JWK's 'alg' is "
                                "%.40s: only ES256 is used", alg);
        rc = ec_key(jwk, key, err);
    } else {
        return th_error_set(err, TH_EINVAL, "the JWK's 'kty' is %.40s: only "
                            "RSA and EC keys are used", kty ? kty : "missing");
    }
    if (rc == 0 && kid && !(key->kid = strdup(json_string_value(kid))))
        rc = th_error_set(err, TH_ENOMEM, "out of memory");
    if (rc < 0)
        th_oauth_key_clear(key);
    return rc;
}

/* Whether the JWK is meant for something else than RS256/ES256
 * signatures: such a key is skipped, not an error. */
static bool jwk_not_ours(const json_t *jwk)
{
    const char *kty = json_string_value(json_object_get(jwk, "kty"));
    const char *use = json_string_value(json_object_get(jwk, "use"));
    const char *alg = json_string_value(json_object_get(jwk, "alg"));
    const char *crv = json_string_value(json_object_get(jwk, "crv"));
    if (!kty || (strcmp(kty, "RSA") != 0 && strcmp(kty, "EC") != 0))
        return true; /* oct (a shared secret), OKP, ... */
    if (use && strcmp(use, "sig") != 0)
        return true;
    if (alg && strcmp(alg, "RS256") != 0 && strcmp(alg, "ES256") != 0)
        return true;
    return strcmp(kty, "EC") == 0 && crv && strcmp(crv, "P-256") != 0;
}

int th_oauth_jwks_parse(const char *text, size_t len, uint32_t max_keys,
                        th_oauth_keys *out, th_error *err)
{
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!doc)
        return th_error_set(err, TH_EINVAL, "the JWKS is not JSON: %s "
                            "(line %d)", je.text, je.line);
    const json_t *keys = json_object_get(doc, "keys");
    int rc = 0;
    if (!json_is_array(keys))
        rc = th_error_set(err, TH_EINVAL, "the JWKS has no \"keys\" array");
    size_t n = rc ? 0 : json_array_size(keys);
    if (n && !(out->v = calloc(n, sizeof *out->v)))
        rc = th_error_set(err, TH_ENOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const json_t *jwk = json_array_get(keys, i);
        if (json_is_object(jwk) && jwk_not_ours(jwk)) {
            out->skipped++;
            continue;
        }
        if (out->n == max_keys) {
            rc = th_error_set(err, TH_ELIMIT, "the JWKS has more than %u "
                              "signing keys (mcp.oauth.max_keys)", max_keys);
            break;
        }
        rc = th_oauth_jwk_key(jwk, &out->v[out->n], err);
        if (rc < 0) {
            th_error_prefix(err, "key %zu: ", i);
            break;
        }
        const char *kid = out->v[out->n].kid;
        for (size_t j = 0; kid && j < out->n; j++)
            if (out->v[j].kid && strcmp(out->v[j].kid, kid) == 0)
                rc = th_error_set(err, TH_EINVAL, "two keys of the JWKS "
                                  "have the kid '%.100s'", kid);
        out->n++;
    }
    json_decref(doc);
    if (rc < 0)
        th_oauth_keys_clear(out);
    return rc;
}

/* ---- claims -------------------------------------------------------------- */

static bool aud_ok(const th_oauth_rules *r, const json_t *aud)
{
    for (size_t i = 0; i < r->n_audiences; i++) {
        const char *want = r->audiences[i];
        if (json_is_string(aud) && strcmp(json_string_value(aud), want) == 0)
            return true;
        size_t k;
        const json_t *v;
        if (json_is_array(aud))
            json_array_foreach(aud, k, v) if (json_is_string(v) &&
                                              strcmp(json_string_value(v),
                                                     want) == 0) return true;
    }
    return false;
}

static bool scope_ok(const json_t *claims, const char *want)
{
    size_t wl = strlen(want);
    const char *s = json_string_value(json_object_get(claims, "scope"));
    while (s && *s) {
        while (*s == ' ')
            s++;
        size_t l = strcspn(s, " ");
        if (l == wl && memcmp(s, want, wl) == 0)
            return true;
        s += l;
    }
    const json_t *scp = json_object_get(claims, "scp");
    size_t k;
    const json_t *v;
    if (json_is_array(scp))
        json_array_foreach(scp, k, v) if (json_is_string(v) &&
                                          strcmp(json_string_value(v),
                                                 want) == 0) return true;
    return false;
}

/* A NumericDate claim: true with *t set when it is a number. */
static bool num_date(const json_t *claims, const char *name, int64_t *t)
{
    const json_t *v = json_object_get(claims, name);
    if (json_is_integer(v)) {
        *t = (int64_t)json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!(d > -9e15 && d < 9e15))
            return false;
        *t = (int64_t)d;
        return true;
    }
    return false;
}

int th_oauth_claims_check(const th_oauth_rules *r, const json_t *claims,
                          int64_t now, char *user, size_t cap,
                          const char **why)
{
    if (!json_is_object(claims)) {
        *why = "the token's payload is not a JSON object";
        return TH_OAUTH_INVALID;
    }
    const char *iss = json_string_value(json_object_get(claims, "iss"));
    if (!iss || strcmp(iss, r->issuer) != 0) {
        *why = "wrong issuer";
        return TH_OAUTH_INVALID;
    }
    if (!aud_ok(r, json_object_get(claims, "aud"))) {
        *why = "wrong audience";
        return TH_OAUTH_INVALID;
    }
    int64_t exp, nbf;
    if (!num_date(claims, "exp", &exp)) {
        *why = "the token has no expiry";
        return TH_OAUTH_INVALID;
    }
    if (exp <= INT64_MAX - r->leeway_s && now >= exp + r->leeway_s) {
        *why = "the token has expired";
        return TH_OAUTH_INVALID;
    }
    if (json_object_get(claims, "nbf")) {
        if (!num_date(claims, "nbf", &nbf)) {
            *why = "the token's nbf is not a number";
            return TH_OAUTH_INVALID;
        }
        if (nbf >= INT64_MIN + r->leeway_s && now < nbf - r->leeway_s) {
            *why = "the token is not valid yet";
            return TH_OAUTH_INVALID;
        }
    }
    const json_t *u = json_object_get(claims, r->user_claim);
    size_t ul = json_is_string(u) ? json_string_length(u) : 0;
    const char *us = ul ? json_string_value(u) : NULL;
    bool printable = us && ul <= MAX_USER && ul < cap;
    for (size_t i = 0; printable && i < ul; i++)
        if ((unsigned char)us[i] < 0x20 || us[i] == 0x7f)
            printable = false;
    if (!printable) {
        *why = "the token's user claim is missing or not a short "
               "printable string";
        return TH_OAUTH_INVALID;
    }
    if (r->required_scope && !scope_ok(claims, r->required_scope)) {
        *why = "the token lacks the required scope";
        return TH_OAUTH_SCOPE;
    }
    memcpy(user, us, ul);
    user[ul] = 0;
    *why = NULL;
    return TH_OAUTH_OK;
}

/* ---- the validator ------------------------------------------------------- */

typedef struct keyset {
    th_oauth_keys k;
    int refs; /* under o->mu */
} keyset;

struct th_oauth {
    /* the config, copied */
    char *issuer, *user_claim, *required_scope, *jwks_file, *jwks_url;
    char **aud;
    size_t n_aud;
    th_mcp_oauth_user *users;
    size_t n_users;
    int64_t leeway_s;
    uint64_t refresh_ms, min_interval_ms, timeout_ms, max_token, max_jwks;
    uint32_t max_keys;
    /* the keys and the refresher */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    keyset *keys;           /* under mu; never NULL after new */
    uint8_t digest[32];     /* of the document the keys came from */
    bool have_digest;
    bool want, stop;        /* under mu */
    int64_t last_read_ms;   /* under mu: the last attempt */
    uint64_t generation;    /* under mu */
    pthread_t th;
    bool started;
    atomic_llong logged_ms[2]; /* refused tokens; re-read asked */
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* At most one line a second of each kind. */
static bool log_due(th_oauth *o, int slot)
{
    int64_t now = mono_ms();
    long long last = atomic_load(&o->logged_ms[slot]);
    return now - last >= 1000 &&
           atomic_compare_exchange_strong(&o->logged_ms[slot], &last, now);
}

static void keyset_unref(th_oauth *o, keyset *ks)
{
    if (!ks)
        return;
    pthread_mutex_lock(&o->mu);
    bool last = --ks->refs == 0;
    pthread_mutex_unlock(&o->mu);
    if (last) {
        th_oauth_keys_clear(&ks->k);
        free(ks);
    }
}

typedef struct fetch_buf {
    char *p;
    size_t len, max;
    bool over;
} fetch_buf;

static size_t fetch_write(char *d, size_t sz, size_t nm, void *ud)
{
    fetch_buf *b = ud;
    size_t n = sz * nm;
    if (b->len + n > b->max) {
        b->over = true;
        return 0;
    }
    char *np = realloc(b->p, b->len + n + 1);
    if (!np)
        return 0;
    memcpy(np + b->len, d, n);
    b->p = np;
    b->len += n;
    return n;
}

/* The JWKS document from jwks_url: libcurl, TLS verified, no redirect,
 * at most max_jwks bytes within timeout_ms. */
static int fetch_url(th_oauth *o, fetch_buf *b, th_error *err)
{
    CURL *h = curl_easy_init();
    if (!h)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, o->jwks_url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)o->timeout_ms);
    curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE,
                     (curl_off_t)o->max_jwks);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fetch_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "toolhost");
    CURLcode cc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    if (b->over || cc == CURLE_FILESIZE_EXCEEDED)
        return th_error_set(err, TH_ELIMIT, "the JWKS is larger than %" PRIu64
                            " bytes (mcp.oauth.max_jwks)", o->max_jwks);
    if (cc != CURLE_OK)
        return th_error_set(err, TH_EIO, "%s", cerr[0] ? cerr
                            : curl_easy_strerror(cc));
    if (status != 200)
        return th_error_set(err, TH_EIO, "HTTP status %ld", status);
    return 0;
}

static int read_file(th_oauth *o, fetch_buf *b, th_error *err)
{
    int fd = open(o->jwks_file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return th_error_set(err, TH_EIO, "cannot open it: %s",
                            strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        rc = th_error_set(err, TH_EIO, "not a regular file");
    else if ((uint64_t)st.st_size > o->max_jwks)
        rc = th_error_set(err, TH_ELIMIT, "the JWKS is larger than %" PRIu64
                          " bytes (mcp.oauth.max_jwks)", o->max_jwks);
    else if (!(b->p = malloc((size_t)st.st_size + 1)))
        rc = th_error_set(err, TH_ENOMEM, "out of memory");
    while (rc == 0 && b->len < (size_t)st.st_size) {
        ssize_t got = read(fd, b->p + b->len, (size_t)st.st_size - b->len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            rc = got < 0 ? th_error_set(err, TH_EIO, "cannot read it: %s",
                                        strerror(errno))
                         : 0;
            break;
        }
        b->len += (size_t)got;
    }
    close(fd);
    return rc;
}

static const char *source(const th_oauth *o)
{
    return o->jwks_file ? o->jwks_file : o->jwks_url;
}

/* Reads the JWKS and swaps the keys in when it changed.  0, or an error
 * (the keys of before stay). */
static int reload_keys(th_oauth *o, th_error *err)
{
    fetch_buf b = {.max = o->max_jwks};
    int rc = o->jwks_file ? read_file(o, &b, err) : fetch_url(o, &b, err);
    keyset *ks = NULL;
    uint8_t d[32];
    if (rc == 0) {
        struct sha256_ctx c;
        sha256_init(&c);
        sha256_update(&c, b.len, (const uint8_t *)(b.p ? b.p : ""));
        sha256_digest(&c, sizeof d, d);
        pthread_mutex_lock(&o->mu);
        bool same = o->have_digest && memcmp(d, o->digest, 32) == 0;
        pthread_mutex_unlock(&o->mu);
        if (same) {
            free(b.p);
            return 0;
        }
        if (!(ks = calloc(1, sizeof *ks)))
            rc = th_error_set(err, TH_ENOMEM, "out of memory");
    }
    if (rc == 0)
        rc = th_oauth_jwks_parse(b.p ? b.p : "", b.len, o->max_keys, &ks->k,
                                 err);
    free(b.p);
    if (rc < 0) {
        free(ks);
        return rc;
    }
    ks->refs = 1;
    char kids[512];
    size_t used = 0;
    kids[0] = 0;
    for (size_t i = 0; i < ks->k.n && used < sizeof kids; i++) {
        int w = snprintf(kids + used, sizeof kids - used, "%s%.60s (%s)",
                         i ? ", " : "", ks->k.v[i].kid ? ks->k.v[i].kid
                                                      : "no kid",
                         ks->k.v[i].alg == TH_OAUTH_RS256 ? "RS256"
                                                          : "ES256");
        if (w < 0)
            break;
        used += (size_t)w;
    }
    pthread_mutex_lock(&o->mu);
    keyset *old = o->keys;
    o->keys = ks;
    memcpy(o->digest, d, 32);
    o->have_digest = true;
    o->generation++;
    pthread_mutex_unlock(&o->mu);
    th_log_info("mcp oauth: %zu signing key(s) from %s: %s%s (%zu other "
                "key(s) skipped)",
                ks->k.n, source(o), ks->k.n ? kids : "none",
                used >= sizeof kids ? "..." : "", ks->k.skipped);
    keyset_unref(o, old);
    return 0;
}

static void *refresher(void *arg)
{
    th_oauth *o = arg;
    pthread_mutex_lock(&o->mu);
    while (!o->stop) {
        int64_t now = mono_ms();
        int64_t due = o->last_read_ms + (int64_t)o->refresh_ms;
        int64_t soon = o->last_read_ms + (int64_t)o->min_interval_ms;
        if (o->want && soon < due)
            due = soon;
        if (now < due) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            int64_t ns = ts.tv_nsec + ((due - now) % 1000) * 1000000;
            ts.tv_sec += (due - now) / 1000 + ns / 1000000000;
            ts.tv_nsec = ns % 1000000000;
            pthread_cond_timedwait(&o->cv, &o->mu, &ts);
            continue;
        }
        o->want = false;
        o->last_read_ms = now;
        size_t had = o->keys->k.n;
        pthread_mutex_unlock(&o->mu);
        th_error e;
        th_error_clear(&e);
        int rc = reload_keys(o, &e);
        if (rc < 0)
            th_log_warn("mcp oauth: cannot re-read the JWKS from %s: %s; "
                        "the %zu key(s) of before stay in use",
                        source(o), e.msg, had);
        pthread_mutex_lock(&o->mu);
        /* No document read yet (the issuer was down at start): try again
         * after jwks_min_interval, not jwks_refresh. */
        if (rc < 0 && !o->have_digest)
            o->want = true;
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

static char *dup_or_null(const char *s, bool *bad)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *bad = true;
    return d;
}

th_oauth *th_oauth_new(const th_mcp_oauth_cfg *c, const char *const *audiences,
                       size_t n_audiences, th_error *err)
{
    th_oauth *o = calloc(1, sizeof *o);
    if (!o) {
        th_error_set(err, TH_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&o->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&o->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&o->logged_ms[0], -1000000);
    atomic_init(&o->logged_ms[1], -1000000);
    bool bad = false;
    o->issuer = dup_or_null(c->issuer, &bad);
    o->user_claim = dup_or_null(c->user_claim ? c->user_claim : "sub", &bad);
    o->required_scope = dup_or_null(c->required_scope, &bad);
    o->jwks_file = dup_or_null(c->jwks_file, &bad);
    o->jwks_url = dup_or_null(c->jwks_url, &bad);
    const char *const *aud = c->audience ? (const char *const *)&c->audience
                                         : audiences;
    size_t na = c->audience ? 1 : n_audiences;
    if (na && !(o->aud = calloc(na, sizeof *o->aud)))
        bad = true;
    for (; !bad && o->n_aud < na; o->n_aud++)
        o->aud[o->n_aud] = dup_or_null(aud[o->n_aud], &bad);
    if (c->n_users && !(o->users = calloc(c->n_users, sizeof *o->users)))
        bad = true;
    for (; !bad && o->n_users < c->n_users; o->n_users++) {
        o->users[o->n_users] = c->users[o->n_users];
        o->users[o->n_users].name = dup_or_null(c->users[o->n_users].name,
                                                &bad);
    }
    o->leeway_s = (int64_t)(c->leeway_ms / 1000);
    o->refresh_ms = c->jwks_refresh_ms;
    o->min_interval_ms = c->jwks_min_interval_ms;
    o->timeout_ms = c->jwks_timeout_ms;
    o->max_token = c->max_token;
    o->max_jwks = c->max_jwks;
    o->max_keys = c->max_keys;
    o->keys = calloc(1, sizeof *o->keys);
    if (bad || !o->keys || !o->issuer) {
        th_error_set(err, TH_ENOMEM, "out of memory");
        th_oauth_free(o);
        return NULL;
    }
    o->keys->refs = 1;
    if (o->jwks_url)
        curl_global_init(CURL_GLOBAL_DEFAULT);
    th_error e;
    th_error_clear(&e);
    o->last_read_ms = mono_ms();
    if (reload_keys(o, &e) < 0) {
        if (o->jwks_file) {
            th_error_set(err, e.code, "mcp.oauth.jwks_file %s: %s",
                         o->jwks_file, e.msg);
            th_oauth_free(o);
            return NULL;
        }
        th_log_warn("mcp oauth: cannot fetch the JWKS from %s: %s; tokens "
                    "are refused until a fetch succeeds (retried every "
                    "%" PRIu64 " ms, mcp.oauth.jwks_min_interval)",
                    o->jwks_url, e.msg, o->min_interval_ms);
        o->want = true;
    }
    if (pthread_create(&o->th, NULL, refresher, o) != 0) {
        th_error_set(err, TH_EIO, "cannot start a thread");
        th_oauth_free(o);
        return NULL;
    }
    o->started = true;
    return o;
}

void th_oauth_free(th_oauth *o)
{
    if (!o)
        return;
    if (o->started) {
        pthread_mutex_lock(&o->mu);
        o->stop = true;
        pthread_cond_broadcast(&o->cv);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->th, NULL);
    }
    if (o->keys)
        keyset_unref(o, o->keys);
    if (o->jwks_url)
        curl_global_cleanup();
    free(o->issuer);
    free(o->user_claim);
    free(o->required_scope);
    free(o->jwks_file);
    free(o->jwks_url);
    for (size_t i = 0; i < o->n_aud; i++)
        free(o->aud[i]);
    free(o->aud);
    for (size_t i = 0; i < o->n_users; i++)
        free(o->users[i].name);
    free(o->users);
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    free(o);
}

bool th_oauth_user_uid(const th_oauth *o, const char *user, uint32_t *uid)
{
    for (size_t i = 0; o && i < o->n_users; i++)
        if (o->users[i].has_uid && strcmp(o->users[i].name, user) == 0) {
            *uid = o->users[i].uid;
            return true;
        }
    return false;
}

uint64_t th_oauth_generation(th_oauth *o)
{
    pthread_mutex_lock(&o->mu);
    uint64_t g = o->generation;
    pthread_mutex_unlock(&o->mu);
    return g;
}

/* A token of an unknown kid: the refresher re-reads the keys (at most once
 * per jwks_min_interval). */
static void ask_reread(th_oauth *o)
{
    pthread_mutex_lock(&o->mu);
    bool asked = !o->want;
    o->want = true;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
    if (asked && log_due(o, 1))
        th_log_info("mcp oauth: a token names a key id the JWKS of %s does "
                    "not have: re-reading it (at most every %" PRIu64
                    " ms, mcp.oauth.jwks_min_interval)",
                    source(o), o->min_interval_ms);
}

/* The JOSE header's alg, kid and crit, from the token's first part. */
static int read_header(const char *tok, size_t hl, th_oauth_alg *alg,
                       char *kid, size_t kcap, bool *has_kid,
                       const char **why)
{
    uint8_t *raw;
    size_t rl;
    if (b64url_decode(tok, hl, &raw, &rl) < 0) {
        *why = "the token's header is not base64url";
        return TH_OAUTH_INVALID;
    }
    json_t *h = json_loadb((const char *)raw, rl, JSON_REJECT_DUPLICATES, NULL);
    free(raw);
    int rc = TH_OAUTH_INVALID;
    const char *a = json_string_value(json_object_get(h, "alg"));
    const json_t *k = json_object_get(h, "kid");
    if (!json_is_object(h))
        *why = "the token's header is not a JSON object";
    else if (!a)
        *why = "the token's header has no alg";
    else if (strcmp(a, "RS256") != 0 && strcmp(a, "ES256") != 0)
        *why = "the token's alg is not RS256 or ES256";
    else if (json_object_get(h, "crit"))
        *why = "the token's header has crit extensions";
    else if (k && (!json_is_string(k) || json_string_length(k) >= kcap))
        *why = "the token's kid is not a short string";
    else {
        *alg = strcmp(a, "RS256") == 0 ? TH_OAUTH_RS256 : TH_OAUTH_ES256;
        *has_kid = k != NULL;
        if (k)
            memcpy(kid, json_string_value(k), json_string_length(k) + 1);
        rc = TH_OAUTH_OK;
    }
    json_decref(h);
    return rc;
}

/* The key of the token's kid (or the only key when it names none) in ks:
 * NULL when none. */
static const th_oauth_key *find_key(const keyset *ks, const char *kid,
                                    bool has_kid)
{
    if (!has_kid)
        return ks->k.n == 1 ? &ks->k.v[0] : NULL;
    for (size_t i = 0; i < ks->k.n; i++)
        if (ks->k.v[i].kid && strcmp(ks->k.v[i].kid, kid) == 0)
            return &ks->k.v[i];
    return NULL;
}

/* The token's signature under `key` (libjwt), then its claims.  An ES256
 * signature is r and s of 32 bytes each (RFC 7518 3.4): libjwt 1.10 would
 * also take other lengths, refused here first. */
static int verify(th_oauth *o, const th_oauth_key *key, const char *tok,
                  size_t len, char *user, size_t cap, const char **why)
{
    const char *sig = memrchr(tok, '.', len) + 1;
    if (key->alg == TH_OAUTH_ES256 && (size_t)(tok + len - sig) != 86) {
        *why = "bad signature";
        return TH_OAUTH_INVALID;
    }
    char *t = malloc(len + 1);
    if (!t) {
        *why = "out of memory";
        return TH_OAUTH_INVALID;
    }
    memcpy(t, tok, len);
    t[len] = 0;
    jwt_t *jwt = NULL;
    int rc = TH_OAUTH_INVALID;
    jwt_alg_t want = key->alg == TH_OAUTH_RS256 ? JWT_ALG_RS256
                                                : JWT_ALG_ES256;
    if (jwt_decode(&jwt, t, (const unsigned char *)key->pem,
                   (int)key->pem_len) != 0 || !jwt) {
        *why = "bad signature";
    } else if (jwt_get_alg(jwt) != want) {
        *why = "the token's alg is not its key's";
    } else {
        char *js = jwt_get_grants_json(jwt, NULL);
        json_t *claims = js ? json_loads(js, JSON_REJECT_DUPLICATES, NULL)
                            : NULL;
        free(js);
        th_oauth_rules r = {.issuer = o->issuer,
                            .audiences = (const char *const *)o->aud,
                            .n_audiences = o->n_aud,
                            .user_claim = o->user_claim,
                            .required_scope = o->required_scope,
                            .leeway_s = o->leeway_s};
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        rc = th_oauth_claims_check(&r, claims, (int64_t)now.tv_sec, user,
                                   cap, why);
        json_decref(claims);
    }
    if (jwt)
        jwt_free(jwt);
    free(t);
    return rc;
}

int th_oauth_check(th_oauth *o, const char *tok, size_t len, char *user,
                   size_t cap, const char **why)
{
    if (len > o->max_token) {
        *why = "the token is too large";
        if (log_due(o, 0))
            th_log_warn("mcp oauth: a bearer token of %zu bytes refused "
                        "(over %" PRIu64 ", mcp.oauth.max_token)",
                        len, o->max_token);
        return TH_OAUTH_INVALID;
    }
    /* header.payload.signature, base64url each, nothing else */
    size_t dots[2], nd = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = tok[i];
        if (ch == '.') {
            if (nd == 2) {
                nd = 3;
                break;
            }
            dots[nd++] = i;
        } else if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                     (ch >= '0' && ch <= '9') || ch == '-' || ch == '_')) {
            nd = 3;
            break;
        }
    }
    if (nd != 2 || dots[0] == 0 || dots[1] == dots[0] + 1 ||
        dots[1] + 1 == len) {
        *why = "the token is not a signed JWT";
        return TH_OAUTH_INVALID;
    }
    th_oauth_alg alg = 0;
    char kid[257];
    bool has_kid = false;
    int rc = read_header(tok, dots[0], &alg, kid, sizeof kid, &has_kid, why);
    if (rc != TH_OAUTH_OK)
        return rc;
    pthread_mutex_lock(&o->mu);
    keyset *ks = o->keys;
    ks->refs++;
    pthread_mutex_unlock(&o->mu);
    const th_oauth_key *key = find_key(ks, kid, has_kid);
    if (!key) {
        *why = has_kid ? "unknown key id" : "the token names no key id";
        rc = TH_OAUTH_INVALID;
        if (has_kid)
            ask_reread(o);
    } else if (key->alg != alg) {
        *why = "the token's alg is not its key's";
        rc = TH_OAUTH_INVALID;
    } else {
        rc = verify(o, key, tok, len, user, cap, why);
    }
    keyset_unref(o, ks);
    return rc;
}
