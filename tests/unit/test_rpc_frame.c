/* test_rpc_frame.c - msgpack-RPC frames: splitting, limits, shapes,
 * builders; and the server's dispatch in-process (th_rpc_serve in stdio
 * mode on a thread, over socket pairs), which the integration suites test
 * through the real binary. */
#include <CUnit/CUnit.h>
#include <msgpack.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/th_test.h"
#include "th/log.h"
#include "front/rpc.h"

/* Three frames back to back: a request, a notification, a response. */
static void build_stream(th_buf *b)
{
    th_buf p = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &p, th_buf_msgpack_write);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_str_with_body(&pk, "echo", 4);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "text", 4);
    msgpack_pack_str_with_body(&pk, "hi there", 8);
    CU_ASSERT_EQUAL(th_rpc_pack_request(b, 7, "tools.call", p.data, p.len), 0);
    CU_ASSERT_EQUAL(th_rpc_pack_notify(b, "client.hello", NULL, 0), 0);
    CU_ASSERT_EQUAL(th_rpc_pack_error(b, 9, TH_ENOTFOUND, "nope"), 0);
    th_buf_destroy(&p);
}

static int drain(th_rpc_reader *r, msgpack_unpacked *u, int *kinds, int max)
{
    int n = 0;
    th_error e;
    for (;;) {
        int rc = th_rpc_reader_next(r, u, &e);
        CU_ASSERT(rc >= 0);
        if (rc <= 0)
            return n;
        th_rpc_msg m;
        bool has_id;
        CU_ASSERT_EQUAL(th_rpc_msg_parse(&u->data, &m, &has_id, &e), 0);
        if (n < max)
            kinds[n] = m.kind;
        n++;
    }
}

static void test_split_every_boundary(void)
{
    th_buf s = TH_BUF_INIT;
    build_stream(&s);
    for (size_t cut = 0; cut <= s.len; cut++) {
        th_rpc_reader r;
        CU_ASSERT_EQUAL_FATAL(th_rpc_reader_init(&r, 1024), 0);
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        int kinds[4] = {-1, -1, -1, -1};
        int got = 0;
        CU_ASSERT_EQUAL(th_rpc_reader_feed(&r, s.data, cut), 0);
        got += drain(&r, &u, kinds, 4);
        CU_ASSERT_EQUAL(th_rpc_reader_feed(&r, s.data + cut, s.len - cut), 0);
        got += drain(&r, &u, kinds + (got < 4 ? got : 3), 4 - got);
        CU_ASSERT_EQUAL(got, 3);
        CU_ASSERT_EQUAL(th_rpc_reader_pending(&r), 0);
        msgpack_unpacked_destroy(&u);
        th_rpc_reader_destroy(&r);
    }
    /* One byte at a time. */
    th_rpc_reader r;
    th_rpc_reader_init(&r, 1024);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    int kinds[3] = {-1, -1, -1}, got = 0;
    for (size_t i = 0; i < s.len; i++) {
        th_rpc_reader_feed(&r, s.data + i, 1);
        got += drain(&r, &u, kinds + got, 3 - got);
    }
    CU_ASSERT_EQUAL(got, 3);
    CU_ASSERT_EQUAL(kinds[0], TH_RPC_REQUEST);
    CU_ASSERT_EQUAL(kinds[1], TH_RPC_NOTIFY);
    CU_ASSERT_EQUAL(kinds[2], TH_RPC_RESPONSE);
    msgpack_unpacked_destroy(&u);
    th_rpc_reader_destroy(&r);
    th_buf_destroy(&s);
}

static int feed_and_next(size_t max, const void *bytes, size_t n)
{
    th_rpc_reader r;
    th_rpc_reader_init(&r, max);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    th_error e;
    th_rpc_reader_feed(&r, bytes, n);
    int rc = th_rpc_reader_next(&r, &u, &e);
    if (rc < 0) /* and it stays failed */
        CU_ASSERT(th_rpc_reader_next(&r, &u, &e) < 0);
    msgpack_unpacked_destroy(&u);
    th_rpc_reader_destroy(&r);
    return rc;
}

/* th_rpc_reader_next() says where the message's bytes are (a front passes
 * slices of them on), and reuses the zone a caller keeps. */
static void test_frame_bytes(void)
{
    th_buf b = TH_BUF_INIT;
    build_stream(&b);
    th_rpc_reader r;
    CU_ASSERT_FATAL(th_rpc_reader_init(&r, 1 << 20) == 0);
    CU_ASSERT_FATAL(th_rpc_reader_feed(&r, b.data, b.len) == 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    th_error e;
    size_t off = 0;
    msgpack_zone *z = NULL;
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_FATAL(th_rpc_reader_next(&r, &u, &e) == 1);
        /* the frame is the next bytes of the stream, as they came */
        CU_ASSERT(r.frame_len > 0 && off + r.frame_len <= b.len &&
                  memcmp(r.frame, b.data + off, r.frame_len) == 0);
        size_t one = 0;
        msgpack_unpacked v;
        msgpack_unpacked_init(&v);
        CU_ASSERT(msgpack_unpack_next(&v, (const char *)b.data + off,
                                      b.len - off, &one) ==
                  MSGPACK_UNPACK_SUCCESS);
        CU_ASSERT_EQUAL(one, r.frame_len);
        CU_ASSERT(msgpack_object_equal(v.data, u.data));
        msgpack_unpacked_destroy(&v);
        off += r.frame_len;
        if (i == 0)
            z = u.zone;
        else
            CU_ASSERT(u.zone == z); /* cleared and reused, not made anew */
    }
    CU_ASSERT_EQUAL(off, b.len);
    CU_ASSERT_EQUAL(th_rpc_reader_next(&r, &u, &e), 0);
    msgpack_unpacked_destroy(&u);
    th_rpc_reader_destroy(&r);
    th_buf_destroy(&b);
}

/* A missing key passed on: th_rpc_map_get() -> NULL -> false, no crash. */
static void test_obj_str_null(void)
{
    const char *p = NULL;
    size_t n = 0;
    CU_ASSERT_FALSE(th_rpc_obj_str(NULL, &p, &n));
    CU_ASSERT_FALSE(th_rpc_obj_streq(th_rpc_map_get(NULL, "code"), "x"));
}

static void test_malformed(void)
{
    const uint8_t c1[] = {0x94, 0x00, 0x01, 0xc1};
    CU_ASSERT_EQUAL(feed_and_next(1024, c1, sizeof c1), TH_EPROTO);
    const uint8_t trunc[] = {0x94, 0x00, 0x01, 0xa4, 'e', 'c'};
    CU_ASSERT_EQUAL(feed_and_next(1024, trunc, sizeof trunc), 0);
}

static void test_limits(void)
{
    /* A str32 announcing 4 GiB: refused from its header alone. */
    const uint8_t bigstr[] = {0xdb, 0xff, 0xff, 0xff, 0xff};
    CU_ASSERT_EQUAL(feed_and_next(1 << 20, bigstr, sizeof bigstr), TH_ELIMIT);
    /* An array32 of 4G elements: refused before msgpack-c allocates. */
    const uint8_t bigarr[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    CU_ASSERT_EQUAL(feed_and_next(1 << 20, bigarr, sizeof bigarr), TH_ELIMIT);
    const uint8_t bigmap[] = {0xdf, 0x00, 0x10, 0x00, 0x00};
    CU_ASSERT_EQUAL(feed_and_next(1 << 20, bigmap, sizeof bigmap), TH_ELIMIT);
    /* Exactly at the limit passes; one more byte does not. */
    uint8_t s[10] = {0xa9, 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'};
    CU_ASSERT_EQUAL(feed_and_next(10, s, 10), 1);
    CU_ASSERT_EQUAL(feed_and_next(9, s, 10), TH_ELIMIT);
    /* Many small values in a frame that grows past the limit. */
    th_rpc_reader r;
    th_rpc_reader_init(&r, 100);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    th_error e;
    const uint8_t hdr[] = {0xdc, 0x00, 0x60}; /* array of 96 */
    th_rpc_reader_feed(&r, hdr, 3);
    CU_ASSERT_EQUAL(th_rpc_reader_next(&r, &u, &e), 0);
    uint8_t ones[120];
    memset(ones, 0x01, sizeof ones);
    th_rpc_reader_feed(&r, ones, 96);
    CU_ASSERT_EQUAL(th_rpc_reader_next(&r, &u, &e), 1);
    CU_ASSERT_EQUAL(u.data.via.array.size, 96);
    const uint8_t hdr2[] = {0xdc, 0x00, 0x70}; /* array of 112 > 100 */
    th_rpc_reader_feed(&r, hdr2, 3);
    CU_ASSERT_EQUAL(th_rpc_reader_next(&r, &u, &e), TH_ELIMIT);
    CU_ASSERT(strstr(e.msg, "maximum") != NULL);
    msgpack_unpacked_destroy(&u);
    th_rpc_reader_destroy(&r);
}

static int parse_bytes(const uint8_t *b, size_t n, th_rpc_msg *m,
                       bool *has_id, msgpack_unpacked *u)
{
    size_t off = 0;
    CU_ASSERT_EQUAL_FATAL(msgpack_unpack_next(u, (const char *)b, n, &off),
                          MSGPACK_UNPACK_SUCCESS);
    th_error e;
    return th_rpc_msg_parse(&u->data, m, has_id, &e);
}

/* A frame of many one-byte values is refused before it is built (it
 * would take 24 bytes per value unpacked); a big frame of few values
 * passes, and the reader gives its buffer back once nothing is pending. */
static void test_values_and_shrink(void)
{
    th_rpc_reader r;
    CU_ASSERT_FATAL(th_rpc_reader_init(&r, 4u << 20) == 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    th_error e;
    size_t n = 3u << 20;
    uint8_t *f = malloc(n + 5);
    CU_ASSERT_FATAL(f != NULL);
    f[0] = 0xc6; /* bin 32 of 3 MiB */
    f[1] = (uint8_t)(n >> 24);
    f[2] = (uint8_t)(n >> 16);
    f[3] = (uint8_t)(n >> 8);
    f[4] = (uint8_t)n;
    memset(f + 5, 'x', n);
    CU_ASSERT(th_rpc_reader_feed(&r, f, n + 5) == 0);
    CU_ASSERT(th_rpc_reader_footprint(&r) >= n);
    CU_ASSERT_EQUAL(th_rpc_reader_next(&r, &u, &e), 1);
    msgpack_unpacked_destroy(&u);
    CU_ASSERT_EQUAL(th_rpc_reader_pending(&r), 0);
    CU_ASSERT_EQUAL(th_rpc_reader_shrink(&r), 0);
    CU_ASSERT(th_rpc_reader_footprint(&r) <= 256u * 1024);
    /* still usable */
    const uint8_t ping[] = {0x93, 0x02, 0xa1, 'x', 0x90};
    CU_ASSERT(th_rpc_reader_feed(&r, ping, sizeof ping) == 0);
    CU_ASSERT_EQUAL(th_rpc_reader_next(&r, &u, &e), 1);
    /* [nil x 1,000,000]: 1 MB, over 65536 + 1 MB / 8 values */
    uint32_t k = 1000000;
    f[0] = 0xdd;
    f[1] = (uint8_t)(k >> 24);
    f[2] = (uint8_t)(k >> 16);
    f[3] = (uint8_t)(k >> 8);
    f[4] = (uint8_t)k;
    memset(f + 5, 0xc0, k);
    CU_ASSERT(th_rpc_reader_feed(&r, f, k + 5) == 0);
    CU_ASSERT_EQUAL(th_rpc_reader_next(&r, &u, &e), TH_ELIMIT);
    CU_ASSERT(strstr(e.msg, "values") != NULL);
    th_rpc_reader_destroy(&r);
    /* Under the bound for its bytes: accepted. */
    CU_ASSERT_FATAL(th_rpc_reader_init(&r, 4u << 20) == 0);
    uint32_t ok = 70000; /* 70001 values in 70005 bytes: 74286 allowed */
    f[0] = 0xdd;
    f[1] = (uint8_t)(ok >> 24);
    f[2] = (uint8_t)(ok >> 16);
    f[3] = (uint8_t)(ok >> 8);
    f[4] = (uint8_t)ok;
    memset(f + 5, 0xc0, ok);
    CU_ASSERT(th_rpc_reader_feed(&r, f, ok + 5) == 0);
    CU_ASSERT_EQUAL(th_rpc_reader_next(&r, &u, &e), 1);
    msgpack_unpacked_destroy(&u);
    th_rpc_reader_destroy(&r);
    free(f);
}

static void test_shapes(void)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    th_rpc_msg m;
    bool id;
    /* [0, 5, bin "host.ping", []]: bin accepted for the method. */
    const uint8_t binreq[] = {0x94, 0x00, 0x05, 0xc4, 9, 'h', 'o', 's', 't',
                              '.', 'p', 'i', 'n', 'g', 0x90};
    CU_ASSERT_EQUAL(parse_bytes(binreq, sizeof binreq, &m, &id, &u), 0);
    CU_ASSERT_EQUAL(m.kind, TH_RPC_REQUEST);
    CU_ASSERT_EQUAL(m.msgid, 5);
    CU_ASSERT_EQUAL(m.method_len, 9);
    CU_ASSERT(memcmp(m.method, "host.ping", 9) == 0);
    /* params not an array: an error, but the msgid is known. */
    const uint8_t badparams[] = {0x94, 0x00, 0x06, 0xa1, 'x', 0x80};
    CU_ASSERT_EQUAL(parse_bytes(badparams, sizeof badparams, &m, &id, &u),
                    TH_EPROTO);
    CU_ASSERT(id);
    CU_ASSERT_EQUAL(m.msgid, 6);
    /* method an integer */
    const uint8_t badmethod[] = {0x94, 0x00, 0x07, 0x01, 0x90};
    CU_ASSERT_EQUAL(parse_bytes(badmethod, sizeof badmethod, &m, &id, &u),
                    TH_EPROTO);
    CU_ASSERT(id);
    /* not an array; type 3; negative msgid; wrong lengths */
    const uint8_t notarr[] = {0x81, 0xa1, 'a', 0x01};
    CU_ASSERT_EQUAL(parse_bytes(notarr, sizeof notarr, &m, &id, &u), TH_EPROTO);
    CU_ASSERT(!id);
    const uint8_t type3[] = {0x93, 0x03, 0xa1, 'a', 0x90};
    CU_ASSERT_EQUAL(parse_bytes(type3, sizeof type3, &m, &id, &u), TH_EPROTO);
    const uint8_t negid[] = {0x94, 0x00, 0xff, 0xa1, 'a', 0x90};
    CU_ASSERT_EQUAL(parse_bytes(negid, sizeof negid, &m, &id, &u), TH_EPROTO);
    CU_ASSERT(!id);
    const uint8_t notify4[] = {0x94, 0x02, 0xa1, 'a', 0x90, 0x90};
    CU_ASSERT_EQUAL(parse_bytes(notify4, sizeof notify4, &m, &id, &u),
                    TH_EPROTO);
    /* A request whose msgid can be read is answerable whatever else is
     * wrong, and the message names the problem. */
    static const struct {
        uint8_t b[16];
        size_t n;
        bool id;
        const char *says;
    } wrong[] = {
        /* [0, 5, "p"]: params missing */
        {{0x93, 0x00, 0x05, 0xa1, 'p'}, 5, true, "params are missing"},
        /* [0, 5, "p", [], 1] */
        {{0x95, 0x00, 0x05, 0xa1, 'p', 0x90, 0x01}, 7, true,
         "4 elements, got 5"},
        /* [0, 5, "p", nil] */
        {{0x94, 0x00, 0x05, 0xa1, 'p', 0xc0}, 6, true,
         "params must be an array, got nil"},
        /* [0, 5] */
        {{0x92, 0x00, 0x05}, 3, true, "4 elements, got 2"},
        /* [0] */
        {{0x91, 0x00}, 2, false, "the msgid is missing"},
        /* [0, "x", "p", []] */
        {{0x94, 0x00, 0xa1, 'x', 0xa1, 'p', 0x90}, 7, false,
         "got a string"},
        /* [0, 2^32, "p", []] */
        {{0x94, 0x00, 0xcf, 0, 0, 0, 1, 0, 0, 0, 0, 0xa1, 'p', 0x90}, 14,
         false, "got a larger one"},
        /* [1, 5, nil]: a response is never answered */
        {{0x93, 0x01, 0x05, 0xc0}, 4, false, "a response is"},
        /* [] */
        {{0x90}, 1, false, "(empty)"},
    };
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        size_t off = 0;
        CU_ASSERT_FATAL(msgpack_unpack_next(&u, (const char *)wrong[i].b,
                                            wrong[i].n, &off) ==
                        MSGPACK_UNPACK_SUCCESS);
        th_error e;
        CU_ASSERT_EQUAL(th_rpc_msg_parse(&u.data, &m, &id, &e), TH_EPROTO);
        CU_ASSERT_EQUAL(id, wrong[i].id);
        if (wrong[i].id)
            CU_ASSERT_EQUAL(m.msgid, 5);
        if (!strstr(e.msg, wrong[i].says))
            fprintf(stderr, "shape %zu: %s\n", i, e.msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, wrong[i].says));
    }
    const uint8_t resp[] = {0x94, 0x01, 0x09, 0xc0, 0xc3};
    CU_ASSERT_EQUAL(parse_bytes(resp, sizeof resp, &m, &id, &u), 0);
    CU_ASSERT_EQUAL(m.kind, TH_RPC_RESPONSE);
    CU_ASSERT_EQUAL(m.result->type, MSGPACK_OBJECT_BOOLEAN);
    msgpack_unpacked_destroy(&u);
}

static void test_builders_and_helpers(void)
{
    th_buf b = TH_BUF_INIT;
    CU_ASSERT_EQUAL(th_rpc_pack_error(&b, 42, TH_EPROTO, "bad"), 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    th_rpc_msg m;
    bool id;
    CU_ASSERT_EQUAL(parse_bytes(b.data, b.len, &m, &id, &u), 0);
    CU_ASSERT_EQUAL(m.msgid, 42);
    CU_ASSERT_EQUAL(m.error->type, MSGPACK_OBJECT_ARRAY);
    CU_ASSERT_EQUAL(m.error->via.array.ptr[0].via.i64, TH_EPROTO);
    CU_ASSERT(th_rpc_obj_streq(&m.error->via.array.ptr[1], "bad"));
    CU_ASSERT_EQUAL(m.result->type, MSGPACK_OBJECT_NIL);
    th_buf_destroy(&b);

    const uint8_t map[] = {0x82, 0xa1, 'a', 0x01, 0xc4, 1, 'b', 0x02};
    size_t off = 0;
    msgpack_unpack_next(&u, (const char *)map, sizeof map, &off);
    const msgpack_object *v = th_rpc_map_get(&u.data, "b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_EQUAL(v->via.u64, 2);
    CU_ASSERT_PTR_NULL(th_rpc_map_get(&u.data, "c"));
    msgpack_unpacked_destroy(&u);

    const char *path;
    th_error e;
    CU_ASSERT_EQUAL(th_rpc_parse_addr("unix:/tmp/x.sock", &path, &e), 0);
    CU_ASSERT_STRING_EQUAL(path, "/tmp/x.sock");
    CU_ASSERT_EQUAL(th_rpc_parse_addr("tcp:1.2.3.4:5", &path, &e), TH_EINVAL);
    CU_ASSERT_EQUAL(th_rpc_parse_addr("unix:", &path, &e), TH_EINVAL);
}

/* Random bytes never crash the reader and never make it loop: it either
 * stops for more input or fails once. */
static void test_random_bytes(void)
{
    unsigned seed = 12345;
    for (int round = 0; round < 200; round++) {
        uint8_t bytes[256];
        for (size_t i = 0; i < sizeof bytes; i++) {
            seed = seed * 1103515245u + 12345u;
            bytes[i] = (uint8_t)(seed >> 16);
        }
        th_rpc_reader r;
        th_rpc_reader_init(&r, 4096);
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        th_error e;
        th_rpc_reader_feed(&r, bytes, sizeof bytes);
        int rc, guard = 0;
        while ((rc = th_rpc_reader_next(&r, &u, &e)) == 1 && guard < 1000) {
            th_rpc_msg m;
            (void)th_rpc_msg_parse(&u.data, &m, NULL, &e);
            guard++;
        }
        CU_ASSERT(guard < 1000);
        msgpack_unpacked_destroy(&u);
        th_rpc_reader_destroy(&r);
    }
}

/* ---- dispatch, in-process ------------------------------------------------ */

typedef struct inproc {
    th_host *host;
    int to_srv, from_srv;      /* our ends */
    int srv_in, srv_out;       /* the server's ends */
    pthread_t th;
    th_rpc_server *_Atomic srv; /* set by on_ready */
    int rc;
    th_error err;
    th_rpc_reader rd;
    msgpack_unpacked msg;
} inproc;

static void on_ready(th_rpc_server *srv, void *ud)
{
    inproc *ip = ud;
    ip->srv = srv;
}

static void *serve_thread(void *arg)
{
    inproc *ip = arg;
    th_rpc_serve_opts o = {.stdio = true, .in_fd = ip->srv_in,
                           .out_fd = ip->srv_out, .no_signals = true,
                           .on_ready = on_ready, .ready_ud = ip};
    ip->rc = th_rpc_serve(ip->host, &o, &ip->err);
    return NULL;
}

static int inproc_start(inproc *ip)
{
    memset(ip, 0, sizeof *ip);
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "host:\n  log_level: error\n  shutdown_grace: 1s\n"
             "plugins:\n  - name: echo\n    path: %s\n",
             th_test_build_path("plugins/echo.so"));
    th_config *cfg;
    th_error err;
    if (th_config_parse("rpc.yaml", NULL, yaml, strlen(yaml), &cfg, &err) ||
        th_host_open(cfg, &ip->host, &err)) {
        fprintf(stderr, "\nhost: %s\n", err.msg);
        return -1;
    }
    int a[2], b[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b))
        return -1;
    ip->to_srv = a[0];
    ip->srv_in = a[1];
    ip->srv_out = b[1];
    ip->from_srv = b[0];
    th_rpc_reader_init(&ip->rd, 1 << 20);
    msgpack_unpacked_init(&ip->msg);
    return pthread_create(&ip->th, NULL, serve_thread, ip);
}

static void inproc_send(inproc *ip, const th_buf *b)
{
    CU_ASSERT(write(ip->to_srv, b->data, b->len) == (ssize_t)b->len);
}

/* The next message from the server, or NULL after 10 s / at its end. */
static const msgpack_object *inproc_next(inproc *ip)
{
    th_error e;
    for (;;) {
        int rc = th_rpc_reader_next(&ip->rd, &ip->msg, &e);
        if (rc == 1)
            return &ip->msg.data;
        if (rc < 0)
            return NULL;
        struct pollfd pfd = {.fd = ip->from_srv, .events = POLLIN};
        if (poll(&pfd, 1, 10000) <= 0)
            return NULL;
        char *buf;
        size_t cap;
        th_rpc_reader_space(&ip->rd, 65536, &buf, &cap);
        ssize_t n = read(ip->from_srv, buf, cap);
        if (n <= 0)
            return NULL;
        th_rpc_reader_commit(&ip->rd, (size_t)n);
    }
}

static int inproc_finish(inproc *ip)
{
    pthread_join(ip->th, NULL);
    close(ip->to_srv);
    close(ip->from_srv);
    msgpack_unpacked_destroy(&ip->msg);
    th_rpc_reader_destroy(&ip->rd);
    th_host_close(ip->host);
    return ip->rc;
}

static void test_dispatch_inproc(void)
{
    int level = th_log_get_level();
    th_log_set_level(TOOLHOST_LOG_ERROR);
    inproc ip;
    CU_ASSERT_FATAL(inproc_start(&ip) == 0);
    th_buf b = TH_BUF_INIT, p = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &p, th_buf_msgpack_write);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_str_with_body(&pk, "echo", 4);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "text", 4);
    msgpack_pack_str_with_body(&pk, "in", 2);
    th_rpc_pack_request(&b, 1, "host.ping", NULL, 0);
    th_rpc_pack_request(&b, 2, "tools.call", p.data, p.len);
    th_rpc_pack_request(&b, 3, "no.such", NULL, 0);
    th_rpc_pack_notify(&b, "ignored", NULL, 0);
    th_rpc_pack_request(&b, 4, "tools.describe", NULL, 0); /* no name */
    inproc_send(&ip, &b);
    bool seen[5] = {0};
    for (int i = 0; i < 4; i++) {
        const msgpack_object *m = inproc_next(&ip);
        CU_ASSERT_FATAL(m != NULL && m->via.array.size == 4);
        uint64_t id = m->via.array.ptr[1].via.u64;
        CU_ASSERT_FATAL(id >= 1 && id <= 4);
        seen[id] = true;
        const msgpack_object *err = &m->via.array.ptr[2];
        const msgpack_object *res = &m->via.array.ptr[3];
        if (id == 1)
            CU_ASSERT(th_rpc_obj_streq(res, "pong"));
        if (id == 2) {
            const msgpack_object *so = th_rpc_map_get(res, "stdout");
            CU_ASSERT(so && th_rpc_obj_streq(so, "in"));
        }
        if (id == 3)
            CU_ASSERT(err->type == MSGPACK_OBJECT_ARRAY &&
                      err->via.array.ptr[0].via.i64 == TH_ENOTFOUND);
        if (id == 4)
            CU_ASSERT(err->type == MSGPACK_OBJECT_ARRAY &&
                      err->via.array.ptr[0].via.i64 == TH_EINVAL);
    }
    CU_ASSERT(seen[1] && seen[2] && seen[3] && seen[4]);
    /* End of input: the server stops and returns 0. */
    shutdown(ip.to_srv, SHUT_WR);
    CU_ASSERT(inproc_next(&ip) == NULL);
    CU_ASSERT_EQUAL(inproc_finish(&ip), 0);
    th_buf_destroy(&b);
    th_buf_destroy(&p);
    th_log_set_level(level);
}

/* th_rpc_server_stop() from another thread, with a task running: it is
 * cancelled after the grace and still answered (task.done). */
static void test_stop_inproc(void)
{
    int level = th_log_get_level();
    th_log_set_level(TOOLHOST_LOG_ERROR);
    inproc ip;
    CU_ASSERT_FATAL(inproc_start(&ip) == 0);
    th_buf b = TH_BUF_INIT, p = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &p, th_buf_msgpack_write);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_str_with_body(&pk, "echo_async", 10);
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str_with_body(&pk, "text", 4);
    msgpack_pack_str_with_body(&pk, "x", 1);
    msgpack_pack_str_with_body(&pk, "steps", 5);
    msgpack_pack_int(&pk, 1000);
    msgpack_pack_str_with_body(&pk, "delay_ms", 8);
    msgpack_pack_int(&pk, 20);
    th_rpc_pack_request(&b, 1, "tools.call", p.data, p.len);
    inproc_send(&ip, &b);
    const msgpack_object *m = inproc_next(&ip);
    CU_ASSERT_FATAL(m != NULL && m->via.array.ptr[0].via.u64 == 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ip.srv);
    th_rpc_server_stop(ip.srv);
    bool done = false;
    while ((m = inproc_next(&ip)) != NULL)
        if (m->via.array.size == 3 &&
            th_rpc_obj_streq(&m->via.array.ptr[1], "task.done"))
            done = true;
    CU_ASSERT(done);
    CU_ASSERT_EQUAL(inproc_finish(&ip), 0);
    th_buf_destroy(&b);
    th_buf_destroy(&p);
    th_log_set_level(level);
}

void th_suite_rpc_frame(void)
{
    CU_pSuite s = CU_add_suite("rpc_frame", NULL, NULL);
    CU_add_test(s, "split_every_boundary", test_split_every_boundary);
    CU_add_test(s, "frame_bytes", test_frame_bytes);
    CU_add_test(s, "malformed", test_malformed);
    CU_add_test(s, "obj_str_null", test_obj_str_null);
    CU_add_test(s, "limits", test_limits);
    CU_add_test(s, "values_and_shrink", test_values_and_shrink);
    CU_add_test(s, "shapes", test_shapes);
    CU_add_test(s, "builders_and_helpers", test_builders_and_helpers);
    CU_add_test(s, "random_bytes", test_random_bytes);
    CU_add_test(s, "dispatch_inproc", test_dispatch_inproc);
    CU_add_test(s, "stop_inproc", test_stop_inproc);
}
