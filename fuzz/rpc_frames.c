/* fuzz/rpc_frames.c - libFuzzer target: the msgpack-RPC frame stream
 * (th_rpc_reader) and message shapes (th_rpc_msg_parse), with the byte
 * stream split at random points.
 *
 * Input: byte 0 picks max_frame (64 B, 1 KiB or the 16 MiB default),
 * byte 1 seeds the split points, the rest is what a client sends.  The
 * stream is read twice: once fed whole, once fed in random pieces (1 to 64
 * bytes, alternating th_rpc_reader_feed and space+commit as the server's
 * libuv alloc_cb does), draining th_rpc_reader_next after each piece.
 * Properties beyond "no crash, no leak, no UB":
 *   - both reads give the same messages (re-packed byte for byte), the
 *     same final outcome (need more / TH_EPROTO / TH_ELIMIT) and, when
 *     the stream did not fail, the same number of pending bytes;
 *   - an error is TH_EPROTO or TH_ELIMIT with a message (TH_ENOMEM only
 *     for real memory exhaustion: none in inputs this small), and every
 *     later th_rpc_reader_next fails too;
 *   - every message th_rpc_msg_parse accepts has a kind 0..2, a method
 *     for requests and notifications, array params; one it refuses says
 *     why.
 *
 * (Fixed, now in fuzz/corpus/rpc_frames/: a frame nested past 32 levels
 * failed with TH_ENOMEM instead of TH_EPROTO.)
 *
 * needs: host/rpc/frame.c
 */
#include <msgpack.h>
#include <string.h>

#include "fuzz.h"
#include "th/buf.h"
#include "th/err.h"
#include "front/rpc.h"

typedef struct rf_out {
    th_buf msgs;    /* every message, re-packed */
    size_t count;
    int end;        /* 0: waiting for more bytes; else the error code */
    size_t pending;
} rf_out;

static void rf_check_shape(const msgpack_object *o)
{
    th_rpc_msg m;
    bool has_id = false;
    th_error err;
    th_error_clear(&err);
    int rc = th_rpc_msg_parse(o, &m, &has_id, &err);
    if (rc == 0) {
        TH_FUZZ_CHECK(m.kind >= 0 && m.kind <= 2);
        if (m.kind != TH_RPC_RESPONSE) {
            TH_FUZZ_CHECK(m.method != NULL || m.method_len == 0);
            TH_FUZZ_CHECK(m.params && m.params->type == MSGPACK_OBJECT_ARRAY);
        } else {
            TH_FUZZ_CHECK(m.error && m.result);
        }
    } else {
        TH_FUZZ_CHECK(rc == TH_EPROTO && err.msg[0] != '\0');
    }
}

/* Drains every complete message; returns 1 while the stream is usable. */
static int rf_drain(th_rpc_reader *r, rf_out *o, int check_shapes)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    int usable = 1;
    for (;;) {
        th_error err;
        th_error_clear(&err);
        int rc = th_rpc_reader_next(r, &u, &err);
        if (rc == 1) {
            msgpack_packer pk;
            msgpack_packer_init(&pk, &o->msgs, th_buf_msgpack_write);
            TH_FUZZ_CHECK(msgpack_pack_object(&pk, u.data) == 0);
            o->count++;
            if (check_shapes)
                rf_check_shape(&u.data);
            continue;
        }
        if (rc < 0) {
            TH_FUZZ_CHECK(rc == TH_EPROTO || rc == TH_ELIMIT);
            TH_FUZZ_CHECK(err.code == rc && err.msg[0] != '\0');
            o->end = rc;
            /* it stays failed */
            th_error_clear(&err);
            TH_FUZZ_CHECK(th_rpc_reader_next(r, &u, &err) < 0);
            usable = 0;
        } else {
            TH_FUZZ_CHECK(rc == 0);
        }
        break;
    }
    msgpack_unpacked_destroy(&u);
    return usable;
}

static size_t rf_max_frame(uint8_t b)
{
    switch (b % 3) {
    case 0: return 64;
    case 1: return 1024;
    default: return 0; /* the default, 16 MiB */
    }
}

static void rf_read_whole(size_t max_frame, const uint8_t *s, size_t n,
                          rf_out *o)
{
    th_rpc_reader r;
    TH_FUZZ_CHECK(th_rpc_reader_init(&r, max_frame) == 0);
    if (n > 0)
        TH_FUZZ_CHECK(th_rpc_reader_feed(&r, s, n) == 0);
    if (rf_drain(&r, o, 1))
        o->pending = th_rpc_reader_pending(&r);
    th_rpc_reader_destroy(&r);
}

static void rf_read_split(size_t max_frame, uint8_t seed, const uint8_t *s,
                          size_t n, rf_out *o)
{
    th_rpc_reader r;
    TH_FUZZ_CHECK(th_rpc_reader_init(&r, max_frame) == 0);
    uint32_t x = 0x9e3779b9u ^ seed;
    size_t pos = 0;
    int usable = 1, piece = 0;
    while (usable && pos < n) {
        x = x * 1103515245u + 12345u;
        size_t k = 1 + (x >> 16) % 64;
        if (k > n - pos)
            k = n - pos;
        if (piece++ % 2 == 0) {
            TH_FUZZ_CHECK(th_rpc_reader_feed(&r, s + pos, k) == 0);
        } else {
            char *buf;
            size_t cap;
            TH_FUZZ_CHECK(th_rpc_reader_space(&r, k, &buf, &cap) == 0);
            TH_FUZZ_CHECK(cap >= k);
            memcpy(buf, s + pos, k);
            th_rpc_reader_commit(&r, k);
        }
        pos += k;
        usable = rf_drain(&r, o, 0);
    }
    if (usable)
        o->pending = th_rpc_reader_pending(&r);
    th_rpc_reader_destroy(&r);
}

static int fuzz_rpc_frames(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t max_frame = rf_max_frame(data[0]);
    uint8_t seed = data[1];
    const uint8_t *s = data + 2;
    size_t n = size - 2;
    rf_out a = {TH_BUF_INIT, 0, 0, 0}, b = {TH_BUF_INIT, 0, 0, 0};
    rf_read_whole(max_frame, s, n, &a);
    rf_read_split(max_frame, seed, s, n, &b);
    TH_FUZZ_CHECK(a.count == b.count);
    TH_FUZZ_CHECK(a.msgs.len == b.msgs.len &&
                  (a.msgs.len == 0 ||
                   memcmp(a.msgs.data, b.msgs.data, a.msgs.len) == 0));
    TH_FUZZ_CHECK(a.end == b.end);
    if (a.end == 0)
        TH_FUZZ_CHECK(a.pending == b.pending);
    th_buf_destroy(&a.msgs);
    th_buf_destroy(&b.msgs);
    return 0;
}

TH_FUZZ_ENTRY(fuzz_rpc_frames)
