/* test_mpwalk.c - walking msgpack before unpacking it: counts bounded by
 * the bytes, nesting bounded as msgpack-c bounds it, and the callers
 * (validation, JSON, the RPC frame reader) answering with clear errors
 * instead of "out of memory". */
#include <CUnit/CUnit.h>
#include <msgpack.h>
#include <string.h>

#include "th/json.h"
#include "th/mpwalk.h"
#include "th/mpzone.h"
#include "front/rpc.h"
#include "th/tool.h"

/* `depth` nested one-element arrays around an empty array (or an int). */
static size_t nested(uint8_t *buf, unsigned depth, int innermost_empty)
{
    size_t n = 0;
    for (unsigned i = 0; i < depth; i++)
        buf[n++] = 0x91;
    buf[n++] = innermost_empty ? 0x90 : 0x01;
    return n;
}

static int unpacks(const uint8_t *p, size_t n)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int ok = msgpack_unpack_next(&u, (const char *)p, n, &off) ==
             MSGPACK_UNPACK_SUCCESS;
    msgpack_unpacked_destroy(&u);
    return ok;
}

static void test_depth_matches_msgpack_c(void)
{
    uint8_t buf[128];
    th_error e;
    for (unsigned d = 28; d <= 36; d++) {
        for (int empty = 0; empty <= 1; empty++) {
            size_t n = nested(buf, d, empty);
            int ours = th_mp_check(buf, n, TH_MP_MAX_DEPTH, NULL, &e) == 0;
            /* whatever we accept, msgpack-c unpacks */
            if (ours)
                CU_ASSERT_TRUE(unpacks(buf, n));
            if (!ours)
                CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "nested deeper"));
        }
    }
    size_t n = nested(buf, 20, 1);
    size_t vlen = 0;
    CU_ASSERT_EQUAL(th_mp_check(buf, n, TH_MP_MAX_DEPTH, &vlen, &e), 0);
    CU_ASSERT_EQUAL(vlen, n);
}

static void test_counts_bounded(void)
{
    /* a map32 announcing 2^31 entries in 23 bytes */
    uint8_t big[23] = {0xdf, 0x80, 0x00, 0x00, 0x00};
    th_error e;
    CU_ASSERT_EQUAL(th_mp_check(big, sizeof big, 32, NULL, &e), TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "announces 4294967296 elements"));
    const uint8_t str[] = {0xdb, 0xff, 0xff, 0xff, 0xff, 'a'};
    CU_ASSERT_EQUAL(th_mp_check(str, sizeof str, 32, NULL, &e), TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "truncated"));
    const uint8_t c1[] = {0x91, 0xc1};
    CU_ASSERT_EQUAL(th_mp_check(c1, sizeof c1, 32, NULL, &e), TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "0xc1"));
    const uint8_t ok[] = {0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x92, 0xc3, 0xc0, 0xff};
    size_t vlen;
    CU_ASSERT_EQUAL(th_mp_check(ok, sizeof ok, 32, &vlen, &e), 0);
    CU_ASSERT_EQUAL(vlen, sizeof ok - 1); /* the trailing byte is not in it */
}

static void test_callers(void)
{
    uint8_t buf[128];
    size_t n = nested(buf, 60, 0);
    /* validation: a tool error about the arguments, not "out of memory" */
    th_verr ve;
    CU_ASSERT_EQUAL(th_validate_params("t", NULL, 0, buf, n, NULL, NULL, &ve),
                    TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(ve.e.msg, "nested deeper"));
    uint8_t big[23] = {0xdf, 0x80, 0x00, 0x00, 0x00};
    CU_ASSERT_EQUAL(th_validate_params("t", NULL, 0, big, sizeof big, NULL,
                                       NULL, &ve),
                    TH_EARGS);
    /* JSON at the edge */
    th_error e;
    CU_ASSERT_PTR_NULL(th_json_from_msgpack(big, sizeof big, &e));
    CU_ASSERT_EQUAL(e.code, TH_EINVAL);
    CU_ASSERT_PTR_NULL(th_json_from_msgpack(buf, n, &e));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "nested deeper"));
    /* the RPC frame reader: a protocol error */
    uint8_t frame[128];
    size_t fn = 0;
    frame[fn++] = 0x94;
    frame[fn++] = 0x00;
    frame[fn++] = 0x01;
    frame[fn++] = 0xa4;
    memcpy(frame + fn, "ping", 4);
    fn += 4;
    fn += nested(frame + fn, 50, 0);
    th_rpc_reader r;
    CU_ASSERT_EQUAL_FATAL(th_rpc_reader_init(&r, 1 << 20), 0);
    CU_ASSERT_EQUAL(th_rpc_reader_feed(&r, frame, fn), 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    int rc = th_rpc_reader_next(&r, &u, &e);
    CU_ASSERT_EQUAL(rc, TH_EPROTO);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "nested deeper"));
    msgpack_unpacked_destroy(&u);
    th_rpc_reader_destroy(&r);
}

/* th_mp_zone_get: this thread's zone, kept and cleared between uses; a
 * nested use gets a zone of its own. */
static void test_zone_reused(void)
{
    bool c1, c2, c3;
    msgpack_zone *z1 = th_mp_zone_get(&c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(z1);
    CU_ASSERT_TRUE(c1);
    msgpack_object o;
    static const char map[] = "\x81\xa1k\x92\x01\xa2hi";
    CU_ASSERT_EQUAL(msgpack_unpack(map, sizeof map - 1, NULL, z1, &o),
                    MSGPACK_UNPACK_SUCCESS);
    CU_ASSERT_EQUAL(o.type, MSGPACK_OBJECT_MAP);
    msgpack_zone *z2 = th_mp_zone_get(&c2); /* z1 is taken */
    CU_ASSERT_PTR_NOT_NULL_FATAL(z2);
    CU_ASSERT_FALSE(c2);
    CU_ASSERT_PTR_NOT_EQUAL(z1, z2);
    th_mp_zone_put(z2, c2);
    th_mp_zone_put(z1, c1);
    msgpack_zone *z3 = th_mp_zone_get(&c3);
    CU_ASSERT_PTR_EQUAL(z3, z1); /* kept, not made again */
    CU_ASSERT_TRUE(c3);
    th_mp_zone_put(z3, c3);
}

void th_suite_mpwalk(void)
{
    CU_pSuite s = CU_add_suite("mpwalk", NULL, NULL);
    CU_add_test(s, "depth_matches_msgpack_c", test_depth_matches_msgpack_c);
    CU_add_test(s, "counts_bounded", test_counts_bounded);
    CU_add_test(s, "zone_reused", test_zone_reused);
    CU_add_test(s, "callers", test_callers);
}
