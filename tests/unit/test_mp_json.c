/* test_mp_json.c - plugins/shared/mp_json.c: mp_json_dump(), msgpack
 * straight to JSON text, against json_dumps(JSON_COMPACT |
 * JSON_ENSURE_ASCII) of mp_json_parse()'s tree, byte for byte: the same
 * values accepted, the same refused, the same text.  Examples of every
 * kind and every refusal, then thousands of random values (random bytes
 * in strings, twin keys, a bin or an ext here and there), then every
 * input of fuzz/corpus/mp_json/ through the fuzz target's own check.
 *
 * The plugin's source is included (its symbols are hidden in the .so),
 * through the fuzz target (fuzz/mp_json.c) with no libFuzzer entry and
 * its check as a CUnit assertion. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"

#define TH_FUZZ_NO_ENTRY
#define TH_FUZZ_CHECK(cond) CU_ASSERT(cond)
#include "../../fuzz/mp_json.c"

/* Packs one value with a packer into a fresh buffer. */
typedef struct {
    msgpack_sbuffer sb;
    msgpack_packer pk;
} mp;

static void mp_init(mp *m)
{
    msgpack_sbuffer_init(&m->sb);
    msgpack_packer_init(&m->pk, &m->sb, msgpack_sbuffer_write);
}

static void mp_free(mp *m)
{
    msgpack_sbuffer_destroy(&m->sb);
}

/* What both paths make of data (the fuzz target's check): 1 converted
 * alike, 0 both refused, -1 they disagree. */
static int agree(const void *data, size_t len, bool object)
{
    return mp_json_fuzz_one(data, len, object);
}

static int agree_mp(mp *m, bool object)
{
    int r = agree(m->sb.data, m->sb.size, object);
    mp_free(m);
    return r;
}

/* A one-element array holding a string of n raw bytes. */
static int str_case(const char *s, size_t n)
{
    mp m;
    mp_init(&m);
    msgpack_pack_array(&m.pk, 1);
    msgpack_pack_str_with_body(&m.pk, s, n);
    return agree_mp(&m, false);
}

static void test_scalars(void)
{
    mp m;
    mp_init(&m);
    msgpack_pack_array(&m.pk, 14);
    msgpack_pack_nil(&m.pk);
    msgpack_pack_true(&m.pk);
    msgpack_pack_false(&m.pk);
    msgpack_pack_int64(&m.pk, 0);
    msgpack_pack_int64(&m.pk, -1);
    msgpack_pack_int64(&m.pk, INT64_MIN);
    msgpack_pack_int64(&m.pk, INT64_MAX);
    msgpack_pack_uint64(&m.pk, (uint64_t)INT64_MAX + 1); /* a real */
    msgpack_pack_uint64(&m.pk, UINT64_MAX);
    msgpack_pack_double(&m.pk, 0.1);
    msgpack_pack_double(&m.pk, -0.0);
    msgpack_pack_double(&m.pk, 1e300);
    msgpack_pack_float(&m.pk, 0.1f);
    msgpack_pack_double(&m.pk, 12345678.0);
    CU_ASSERT_EQUAL(agree_mp(&m, false), 1);

    /* the text itself, once, to show what is compared */
    mp_init(&m);
    msgpack_pack_map(&m.pk, 2);
    msgpack_pack_str_with_body(&m.pk, "n", 1);
    msgpack_pack_int64(&m.pk, -42);
    msgpack_pack_str_with_body(&m.pk, "s", 1);
    msgpack_pack_str_with_body(&m.pk, "a\"\xc3\xa9", 4);
    mp_json_text t = {0};
    CU_ASSERT_EQUAL(mp_json_dump((const uint8_t *)m.sb.data, m.sb.size,
                                 true, &t),
                    0);
    CU_ASSERT_STRING_EQUAL(t.data, "{\"n\":-42,\"s\":\"a\\\"\\u00E9\"}");
    free(t.data);
    mp_free(&m);

    /* integers in decimal, without printf */
    int64_t ints[] = {0, 7, -7, 10, 99, 100, -100, 1234567890123LL,
                      INT64_MAX, INT64_MIN, INT64_MIN + 1};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        mp_json_text ti = {0};
        char want[32];
        snprintf(want, sizeof want, "%lld", (long long)ints[i]);
        CU_ASSERT_EQUAL(mp_json_put_int(&ti, ints[i]), 0);
        CU_ASSERT_STRING_EQUAL(ti.data, want);
        free(ti.data);
    }
}

/* NaN and the infinities are not JSON: refused, as json_real() refuses
 * them. */
static void test_nonfinite(void)
{
    double bad[] = {NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < 3; i++) {
        mp m;
        mp_init(&m);
        msgpack_pack_map(&m.pk, 1);
        msgpack_pack_str_with_body(&m.pk, "x", 1);
        msgpack_pack_double(&m.pk, bad[i]);
        CU_ASSERT_EQUAL(agree_mp(&m, true), 0);
        mp_init(&m);
        msgpack_pack_array(&m.pk, 1);
        msgpack_pack_float(&m.pk, (float)bad[i]);
        CU_ASSERT_EQUAL(agree_mp(&m, false), 0);
    }
}

static void test_strings(void)
{
    char all[128];
    for (int c = 0; c < 128; c++)
        all[c] = (char)c; /* every control, 0x7f, quote, backslash, '/' */
    CU_ASSERT_EQUAL(str_case(all, sizeof all), 1);
    CU_ASSERT_EQUAL(str_case("", 0), 1);
    CU_ASSERT_EQUAL(str_case("a\0b", 3), 1);
    CU_ASSERT_EQUAL(str_case("\xc2\x80\xdf\xbf", 4), 1);        /* 2 bytes */
    CU_ASSERT_EQUAL(str_case("\xe0\xa0\x80\xef\xbf\xbf", 6), 1); /* 3 */
    CU_ASSERT_EQUAL(str_case("\xed\x9f\xbf\xee\x80\x80", 6), 1); /* around
                                                                   D800 */
    CU_ASSERT_EQUAL(str_case("\xf0\x9f\x98\x80", 4), 1);  /* a pair */
    CU_ASSERT_EQUAL(str_case("\xf4\x8f\xbf\xbf", 4), 1);  /* U+10FFFF */
    CU_ASSERT_EQUAL(str_case("x\xf0\x90\x80\x80y", 6), 1); /* U+10000 */
    /* not UTF-8: refused */
    const char *bad[] = {
        "\x80",             /* a lone continuation byte */
        "\xc0\xaf",         /* overlong '/' */
        "\xc1\xbf",         /* overlong */
        "\xe0\x80\x80",     /* overlong */
        "\xe0\x9f\xbf",     /* overlong */
        "\xf0\x8f\xbf\xbf", /* overlong */
        "\xed\xa0\x80",     /* a surrogate */
        "\xed\xbf\xbf",     /* a surrogate */
        "\xf4\x90\x80\x80", /* past U+10FFFF */
        "\xf5\x80\x80\x80", /* F5 */
        "\xff",             /* FF */
        "\xc3",             /* cut */
        "\xe2\x82",         /* cut */
        "\xf0\x9f\x98",     /* cut */
        "\xc3(",            /* not a continuation */
        "ok\xe2\x28\xa1",   /* not a continuation, after text */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CU_ASSERT_EQUAL(str_case(bad[i], strlen(bad[i])), 0);
    /* a key that is not UTF-8 */
    mp m;
    mp_init(&m);
    msgpack_pack_map(&m.pk, 1);
    msgpack_pack_str_with_body(&m.pk, "\xff", 1);
    msgpack_pack_nil(&m.pk);
    CU_ASSERT_EQUAL(agree_mp(&m, true), 0);
    /* an empty key and an empty value (msgpack-c gives them no pointer) */
    mp_init(&m);
    msgpack_pack_map(&m.pk, 1);
    msgpack_pack_str_with_body(&m.pk, "", 0);
    msgpack_pack_str_with_body(&m.pk, "", 0);
    CU_ASSERT_EQUAL(agree_mp(&m, true), 1);
}

/* Every refusal of a value that is not JSON, and of what is not one
 * value. */
static void test_refusals(void)
{
    mp m;
    mp_init(&m); /* bin */
    msgpack_pack_map(&m.pk, 1);
    msgpack_pack_str_with_body(&m.pk, "b", 1);
    msgpack_pack_bin_with_body(&m.pk, "xy", 2);
    CU_ASSERT_EQUAL(agree_mp(&m, true), 0);
    mp_init(&m); /* ext */
    msgpack_pack_array(&m.pk, 1);
    msgpack_pack_ext_with_body(&m.pk, "xy", 2, 5);
    CU_ASSERT_EQUAL(agree_mp(&m, false), 0);
    mp_init(&m); /* a key that is not a string */
    msgpack_pack_map(&m.pk, 2);
    msgpack_pack_str_with_body(&m.pk, "a", 1);
    msgpack_pack_int64(&m.pk, 1);
    msgpack_pack_int64(&m.pk, 2);
    msgpack_pack_int64(&m.pk, 3);
    CU_ASSERT_EQUAL(agree_mp(&m, true), 0);
    mp_init(&m); /* a bin key */
    msgpack_pack_map(&m.pk, 1);
    msgpack_pack_bin_with_body(&m.pk, "a", 1);
    msgpack_pack_nil(&m.pk);
    CU_ASSERT_EQUAL(agree_mp(&m, true), 0);
    /* not an object where one is asked for */
    mp_init(&m);
    msgpack_pack_array(&m.pk, 0);
    CU_ASSERT_EQUAL(agree_mp(&m, true), 0);
    mp_init(&m);
    msgpack_pack_array(&m.pk, 0);
    CU_ASSERT_EQUAL(agree_mp(&m, false), 1);
    mp_init(&m);
    msgpack_pack_str_with_body(&m.pk, "s", 1);
    CU_ASSERT_EQUAL(agree_mp(&m, true), 0);
    /* nothing, cut, garbage */
    CU_ASSERT_EQUAL(agree("", 0, false), 0);
    CU_ASSERT_EQUAL(agree("\x82\xa1" "a", 3, true), 0);
    CU_ASSERT_EQUAL(agree("\xc1", 1, false), 0); /* never used */
    CU_ASSERT_EQUAL(agree("\x92\x01", 2, false), 0);
    /* trailing bytes after the first value are not read (as before) */
    CU_ASSERT_EQUAL(agree("\x80\xc1\xc1", 3, true), 1);
}

/* Nesting: msgpack-c's unpacker stops at 32 levels, below
 * MP_JSON_MAX_DEPTH; both paths agree either side of the limit. */
static void test_depth(void)
{
    for (int d = 28; d <= MP_JSON_MAX_DEPTH + 2; d++) {
        mp m;
        mp_init(&m);
        for (int i = 0; i < d; i++) {
            if (i % 2) {
                msgpack_pack_array(&m.pk, 1);
            } else {
                msgpack_pack_map(&m.pk, 1);
                msgpack_pack_str_with_body(&m.pk, "k", 1);
            }
        }
        msgpack_pack_nil(&m.pk);
        int r = agree_mp(&m, true);
        CU_ASSERT_EQUAL(r, d <= 32 ? 1 : 0);
    }
}

/* A key given twice keeps its first place and takes its last value, in
 * a small map (pairs compared) and a large one (keys sorted); a value
 * overwritten by its twin must still be JSON. */
static void test_twins(void)
{
    for (uint32_t n = 2; n <= 40; n += 19) {
        mp m;
        mp_init(&m);
        msgpack_pack_map(&m.pk, n);
        for (uint32_t i = 0; i < n; i++) {
            char k[16];
            int kl = snprintf(k, sizeof k, "k%u", i % 3 ? i : 0);
            msgpack_pack_str_with_body(&m.pk, k, (size_t)kl);
            msgpack_pack_int64(&m.pk, i);
        }
        CU_ASSERT_EQUAL(agree_mp(&m, true), 1);
        /* the overwritten value a bin: refused */
        mp_init(&m);
        msgpack_pack_map(&m.pk, n);
        for (uint32_t i = 0; i < n; i++) {
            char k[16];
            int kl = snprintf(k, sizeof k, "k%u", i == 1 ? 0 : i);
            msgpack_pack_str_with_body(&m.pk, k, (size_t)kl);
            if (i == 0)
                msgpack_pack_bin_with_body(&m.pk, "x", 1);
            else
                msgpack_pack_int64(&m.pk, i);
        }
        CU_ASSERT_EQUAL(agree_mp(&m, true), 0);
    }
    /* three of a kind, an empty key twice */
    mp m;
    mp_init(&m);
    msgpack_pack_map(&m.pk, 5);
    const char *ks[] = {"a", "", "a", "", "a"};
    for (int i = 0; i < 5; i++) {
        msgpack_pack_str_with_body(&m.pk, ks[i], strlen(ks[i]));
        msgpack_pack_int64(&m.pk, i);
    }
    CU_ASSERT_EQUAL(agree_mp(&m, true), 1);
}

/* ---- random values ----------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* A string: mostly valid text of every width, sometimes random bytes. */
static void rand_str(msgpack_packer *pk, bool key)
{
    char s[64];
    size_t n = 0, want = rnd(key ? 4 : 24);
    static const char *pieces[] = {"a", "Z", "\"", "\\", "/", "\n", "\x01",
                                   "\x7f", "\xc3\xa9", "\xe2\x82\xac",
                                   "\xf0\x9f\x98\x80", " ", "\t", "\0"};
    bool raw = rnd(10) == 0;
    while (n < want && n + 4 < sizeof s) {
        if (raw) {
            s[n++] = (char)rnd(256);
        } else {
            const char *p = pieces[rnd(sizeof pieces / sizeof pieces[0])];
            size_t pl = p[0] ? strlen(p) : 1;
            memcpy(s + n, p, pl);
            n += pl;
        }
    }
    msgpack_pack_str_with_body(pk, s, n);
}

static void rand_value(msgpack_packer *pk, int depth)
{
    uint32_t kind = rnd(depth < 4 ? 13 : 10);
    switch (kind) {
    case 0: msgpack_pack_nil(pk); break;
    case 1: rnd(2) ? msgpack_pack_true(pk) : msgpack_pack_false(pk); break;
    case 2: msgpack_pack_int64(pk, (int64_t)rnd(1000) - 500); break;
    case 3: msgpack_pack_uint64(pk, ((uint64_t)rnd(UINT32_MAX) << 32) |
                                        rnd(UINT32_MAX)); break;
    case 4: msgpack_pack_int64(pk, -(int64_t)(((uint64_t)rnd(1u << 31) << 32)
                                              | rnd(UINT32_MAX))); break;
    case 5: msgpack_pack_double(pk, (double)rnd(1000000) / (rnd(999) + 1) *
                                        (rnd(2) ? 1e-9 : 1e12)); break;
    case 6: msgpack_pack_float(pk, (float)rnd(100000) / 7.0f); break;
    case 7:
    case 8: rand_str(pk, false); break;
    case 9:
        if (rnd(20) == 0)
            msgpack_pack_bin_with_body(pk, "b", 1);
        else if (rnd(20) == 0)
            msgpack_pack_ext_with_body(pk, "e", 1, 1);
        else if (rnd(50) == 0)
            msgpack_pack_double(pk, NAN);
        else
            msgpack_pack_int64(pk, INT64_MIN);
        break;
    case 10: {
        uint32_t n = rnd(6);
        msgpack_pack_array(pk, n);
        for (uint32_t i = 0; i < n; i++)
            rand_value(pk, depth + 1);
        break;
    }
    default: {
        /* maps, sometimes past SMALL_MAP, keys often twins */
        uint32_t n = rnd(4) == 0 ? SMALL_MAP + rnd(20) : rnd(8);
        msgpack_pack_map(pk, n);
        for (uint32_t i = 0; i < n; i++) {
            if (rnd(40) == 0)
                msgpack_pack_int64(pk, i); /* not a string key */
            else
                rand_str(pk, true);
            rand_value(pk, depth + 1);
        }
        break;
    }
    }
}

static void test_random(void)
{
    int ok = 0, refused = 0, bad = 0;
    for (int round = 0; round < 4000; round++) {
        mp m;
        mp_init(&m);
        rand_value(&m.pk, 0);
        int r = agree(m.sb.data, m.sb.size, false);
        /* and every prefix of a small one: cut msgpack */
        if (r >= 0 && m.sb.size < 24)
            for (size_t cut = 0; cut < m.sb.size && r >= 0; cut++)
                r = agree(m.sb.data, cut, false) < 0 ? -1 : r;
        mp_free(&m);
        if (r > 0)
            ok++;
        else if (r == 0)
            refused++;
        else
            bad++;
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* both kinds were seen in earnest */
    CU_ASSERT_TRUE(ok > 1000);
    CU_ASSERT_TRUE(refused > 100);
}

/* The fuzz target's seeds and past findings, replayed. */
static void corpus_one(const char *data, size_t len, void *ud)
{
    (void)ud;
    fuzz_mp_json((const uint8_t *)data, len);
}

static void test_corpus(void)
{
    CU_ASSERT(th_test_each_file("fuzz/corpus/mp_json", corpus_one, NULL) >= 5);
}

void th_suite_mp_json(void)
{
    CU_pSuite s = CU_add_suite("mp_json", NULL, NULL);
    CU_add_test(s, "scalars", test_scalars);
    CU_add_test(s, "nonfinite", test_nonfinite);
    CU_add_test(s, "strings", test_strings);
    CU_add_test(s, "refusals", test_refusals);
    CU_add_test(s, "depth", test_depth);
    CU_add_test(s, "twins", test_twins);
    CU_add_test(s, "random", test_random);
    CU_add_test(s, "corpus", test_corpus);
}
