/* test_rpc_fault.c - bad clients against the real `toolhost serve`: random
 * bytes, truncated frames, oversized frames, connect/disconnect cycles, a
 * client that never reads, too many calls in flight.  After each, a normal
 * call on a fresh connection must succeed, and the server must still shut
 * down cleanly (under valgrind: with no leak). */
#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

static void test_random_bytes(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    /* 0xc1 is never msgpack: the connection is closed at once. */
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    const uint8_t c1[] = {0x94, 0x00, 0x01, 0xc1};
    rpc_raw_send(&w, c1, sizeof c1);
    CU_ASSERT(rpc_raw_eof(&w, rpc_wait_ms()));
    rpc_raw_close(&w);
    /* Random bytes: whatever they parse as, the host survives them. */
    unsigned seed = 7;
    int rounds = rpc_scale(20);
    for (int r = 0; r < rounds; r++) {
        uint8_t buf[4096];
        for (size_t i = 0; i < sizeof buf; i++) {
            seed = seed * 1103515245u + 12345u;
            buf[i] = (uint8_t)(seed >> 16);
        }
        CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
        rpc_raw_send(&w, buf, sizeof buf);
        rpc_raw_close(&w);
    }
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT(rpc_log_has(&s, "disconnect"));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void test_truncated_frames(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    th_buf f = TH_BUF_INIT, p = TH_BUF_INIT;
    rpc_pack_json(&p, "[\"echo\", {\"text\": \"truncated\"}]");
    th_rpc_pack_request(&f, 1, "tools.call", p.data, p.len);
    /* Half a frame, then hang up. */
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_send(&w, f.data, f.len / 2);
    rpc_raw_close(&w);
    CU_ASSERT(rpc_alive(&s));
    /* Half a frame, a pause, the rest: one answer. */
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_send(&w, f.data, f.len / 2);
    CU_ASSERT(rpc_alive(&s)); /* others are not held up meanwhile */
    rpc_raw_send(&w, f.data + f.len / 2, f.len - f.len / 2);
    const msgpack_object *m = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT(m && rpc_stdout_is(&m->via.array.ptr[3], "truncated"));
    /* Byte by byte. */
    f.data[2] = 2; /* msgid 2 */
    for (size_t i = 0; i < f.len; i++)
        rpc_raw_send(&w, f.data + i, 1);
    m = rpc_raw_response(&w, 2, rpc_wait_ms());
    CU_ASSERT(m && rpc_stdout_is(&m->via.array.ptr[3], "truncated"));
    rpc_raw_close(&w);
    th_buf_destroy(&f);
    th_buf_destroy(&p);
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void test_oversized_frames(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0); /* max_frame: 64KiB */
    /* A header announcing 1 MiB: refused before the bytes come. */
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    const uint8_t hdr[] = {0x94, 0x00, 0x01, 0xa9, 't', 'o', 'o', 'l', 's',
                           '.',  'c',  'a',  'l', 'l', 0x92, 0xa4, 'e', 'c',
                           'h',  'o',  0x81, 0xa4, 't', 'e', 'x', 't',
                           0xdb, 0x00, 0x10, 0x00, 0x00};
    rpc_raw_send(&w, hdr, sizeof hdr);
    CU_ASSERT(rpc_raw_eof(&w, rpc_wait_ms()));
    rpc_raw_close(&w);
    /* An array header announcing 4 G elements. */
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    const uint8_t arr[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    rpc_raw_send(&w, arr, sizeof arr);
    CU_ASSERT(rpc_raw_eof(&w, rpc_wait_ms()));
    rpc_raw_close(&w);
    /* A real 100 KB frame. */
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    size_t big = 100 * 1024;
    char *text = malloc(big + 1);
    CU_ASSERT_FATAL(text != NULL);
    memset(text, 'a', big);
    text[big] = '\0';
    th_buf p = TH_BUF_INIT, f = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &p, th_buf_msgpack_write);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_str_with_body(&pk, "echo", 4);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "text", 4);
    msgpack_pack_str_with_body(&pk, text, big);
    th_rpc_pack_request(&f, 1, "tools.call", p.data, p.len);
    rpc_raw_send(&w, f.data, f.len); /* may fail half way: it is closed */
    CU_ASSERT(rpc_raw_eof(&w, rpc_wait_ms()));
    rpc_raw_close(&w);
    free(text);
    th_buf_destroy(&p);
    th_buf_destroy(&f);
    CU_ASSERT(rpc_log_has(&s, "maximum"));
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void test_connect_cycles(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    int n = rpc_scale(1000);
    th_buf ping = TH_BUF_INIT;
    th_rpc_pack_request(&ping, 1, "host.ping", NULL, 0);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        rpc_raw w;
        if (rpc_raw_open(&w, &s) != 0) {
            failed++;
            continue;
        }
        if (i % 2) /* half of them leave a request behind */
            rpc_raw_send(&w, ping.data, ping.len);
        rpc_raw_close(&w);
    }
    th_buf_destroy(&ping);
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT(rpc_wait_connections(&s, 0, rpc_wait_ms()));
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "host.stats", "[]", &r) == 0);
    const msgpack_object *total =
        th_rpc_map_get(th_rpc_map_get(r.res, "connections"), "total");
    CU_ASSERT(total && total->via.u64 >= (uint64_t)n);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* Writes requests and never reads the answers: once the unsent answers
 * pass max_outbuf (256 KiB here) the host hangs up on that client. */
static void test_never_reads(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    int small = 4096;
    setsockopt(w.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    fcntl(w.fd, F_SETFL, O_NONBLOCK);
    /* tools.list is answered on the loop itself (no call in flight),
     * a few KB each time. */
    bool closed = false;
    int64_t end = rpc_now_ms() + 2 * rpc_wait_ms();
    for (uint64_t id = 1; !closed && rpc_now_ms() < end; id++) {
        th_buf f = TH_BUF_INIT;
        th_rpc_pack_request(&f, id, "tools.list", NULL, 0);
        size_t off = 0;
        while (off < f.len && !closed && rpc_now_ms() < end) {
            ssize_t k = send(w.fd, f.data + off, f.len - off, MSG_NOSIGNAL);
            if (k > 0) {
                off += (size_t)k;
            } else if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
                /* the host stopped reading us, or it is busy: is it
                 * gone? */
                struct pollfd pfd = {.fd = w.fd, .events = POLLOUT};
                poll(&pfd, 1, 50);
                if (pfd.revents & (POLLHUP | POLLERR))
                    closed = true;
            } else {
                closed = true;
            }
        }
        th_buf_destroy(&f);
    }
    CU_ASSERT(closed);
    rpc_raw_close(&w);
    CU_ASSERT(rpc_log_has(&s, "does not read"));
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* More than max_inflight (32) calls at once disconnects that client. */
static void test_too_many_in_flight(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    th_buf all = TH_BUF_INIT, p = TH_BUF_INIT;
    rpc_pack_json(&p, "[\"text_count\", {\"path\": \"x\"}]");
    for (uint64_t id = 1; id <= 40; id++)
        th_rpc_pack_request(&all, id, "tools.call", p.data, p.len);
    rpc_raw_send(&w, all.data, all.len);
    th_buf_destroy(&all);
    th_buf_destroy(&p);
    /* the 33rd call is answered with the reason, then host.disconnect */
    const msgpack_object *m = rpc_raw_response(&w, 33, rpc_wait_ms());
    CU_ASSERT(m && m->via.array.ptr[2].type == MSGPACK_OBJECT_ARRAY &&
              m->via.array.ptr[2].via.array.ptr[0].via.i64 == TH_ELIMIT);
    CU_ASSERT(rpc_raw_notification(&w, "host.disconnect", rpc_wait_ms()) != NULL);
    CU_ASSERT(rpc_raw_eof(&w, rpc_wait_ms()));
    rpc_raw_close(&w);
    CU_ASSERT(rpc_log_has(&s, "in flight"));
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* Many clients at once, interleaved. */
static void test_many_clients(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    enum { K = 20 };
    rpc_raw w[K];
    for (int i = 0; i < K; i++)
        CU_ASSERT_FATAL(rpc_raw_open(&w[i], &s) == 0);
    int rounds = rpc_scale(20);
    int good = 0;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < K; i++) {
            char js[64];
            snprintf(js, sizeof js, "[\"echo\", {\"text\": \"c%d-%d\"}]", i, r);
            rpc_raw_request(&w[i], (uint64_t)r + 1, "tools.call", js);
        }
        for (int i = 0; i < K; i++) {
            const msgpack_object *m =
                rpc_raw_response(&w[i], (uint64_t)r + 1, rpc_wait_ms());
            char want[32];
            snprintf(want, sizeof want, "c%d-%d", i, r);
            good += m && rpc_stdout_is(&m->via.array.ptr[3], want);
        }
    }
    CU_ASSERT_EQUAL(good, rounds * K);
    for (int i = 0; i < K; i++)
        rpc_raw_close(&w[i]);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

void th_suite_rpc_fault(void)
{
    CU_pSuite s = CU_add_suite("rpc_fault", NULL, NULL);
    CU_add_test(s, "random_bytes", test_random_bytes);
    CU_add_test(s, "truncated_frames", test_truncated_frames);
    CU_add_test(s, "oversized_frames", test_oversized_frames);
    CU_add_test(s, "connect_cycles", test_connect_cycles);
    CU_add_test(s, "never_reads", test_never_reads);
    CU_add_test(s, "too_many_in_flight", test_too_many_in_flight);
    CU_add_test(s, "many_clients", test_many_clients);
}
