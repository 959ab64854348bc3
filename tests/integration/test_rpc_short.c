/* test_rpc_short.c - the short path of the RPC server (issue 17): a tool
 * declared TOOLHOST_TOOL_SHORT runs on the event loop and is answered from
 * there; its arguments reach the plugin as the frame's own bytes; a tool
 * that breaks the promise (fixture short_tools: short_nap sleeps) is
 * logged and sent to workers after host.short_call_max is overrun a few
 * times; short_call_max: 0 turns the path off. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

static void start(rpc_srv *s, const char *host_extra)
{
    static char plugins[512];
    snprintf(plugins, sizeof plugins,
             "  - name: short_tools\n    path: %s/fixtures/short_tools.so\n",
             TH_BUILD_DIR);
    rpc_opts o = {.plugins_extra = plugins,
                  .host_extra = host_extra,
                  .public_extra = "  - name: short\n"
                                  "    tools: [short_hex, short_nap]\n"};
    CU_ASSERT_FATAL(rpc_srv_start(s, &o) == 0);
}

/* host.stats: calls.on_loop, calls.short_demoted, manager.inline_calls */
static void stats(rpc_raw *w, uint64_t id, uint64_t *on_loop,
                  uint64_t *demoted, uint64_t *inl)
{
    *on_loop = *demoted = *inl = (uint64_t)-1;
    rpc_raw_request(w, id, "host.stats", "[]");
    const msgpack_object *m = rpc_raw_response(w, id, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *r = &m->via.array.ptr[3];
    const msgpack_object *calls = th_rpc_map_get(r, "calls");
    const msgpack_object *o = th_rpc_map_get(calls, "on_loop");
    const msgpack_object *d = th_rpc_map_get(calls, "short_demoted");
    const msgpack_object *i =
        th_rpc_map_get(th_rpc_map_get(r, "manager"), "inline_calls");
    CU_ASSERT_FATAL(o && d && i);
    *on_loop = o->via.u64;
    *demoted = d->via.u64;
    *inl = i->via.u64;
}

/* 64 pipelined echo calls are all answered, each with its own text, on
 * the loop (no worker hop); a non-short tool is not. */
static void test_short_on_loop(void)
{
    rpc_srv s;
    /* a budget no echo overruns, under valgrind or on a loaded machine */
    start(&s, "  short_call_max: 1m\n");
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    uint64_t on0, dem, inl0;
    stats(&w, 1000, &on0, &dem, &inl0);
    enum { N = 64 };
    th_buf all = TH_BUF_INIT;
    for (int i = 0; i < N; i++) {
        char args[96];
        snprintf(args, sizeof args, "[\"echo\", {\"text\": \"call %d\"}]", i);
        th_buf p = TH_BUF_INIT;
        rpc_pack_json(&p, args);
        th_rpc_pack_request(&all, (uint64_t)(i + 1), "tools.call", p.data,
                            p.len);
        th_buf_destroy(&p);
    }
    CU_ASSERT(rpc_raw_send(&w, all.data, all.len)); /* one write */
    th_buf_destroy(&all);
    bool seen[N] = {false};
    int got = 0;
    for (int k = 0; k < N; k++) {
        const msgpack_object *m = rpc_raw_next(&w, rpc_wait_ms());
        if (!m)
            break;
        uint64_t id = m->via.array.ptr[1].via.u64;
        CU_ASSERT_FATAL(id >= 1 && id <= N && !seen[id - 1]);
        seen[id - 1] = true;
        char want[32];
        snprintf(want, sizeof want, "call %d", (int)id - 1);
        CU_ASSERT(m->via.array.ptr[2].type == MSGPACK_OBJECT_NIL &&
                  rpc_ok(&m->via.array.ptr[3]) &&
                  rpc_stdout_is(&m->via.array.ptr[3], want));
        got++;
    }
    CU_ASSERT_EQUAL(got, N);
    uint64_t on1, inl1;
    stats(&w, 1001, &on1, &dem, &inl1);
    CU_ASSERT(on1 - on0 >= N);
    CU_ASSERT(inl1 - inl0 >= N);
    CU_ASSERT_EQUAL(dem, 0);
    /* echo_async is not short: acknowledged from a worker */
    rpc_raw_request(&w, 2000, "tools.call",
                    "[\"echo_async\", {\"text\": \"x\", \"steps\": 1, "
                    "\"delay_ms\": 0}]");
    const msgpack_object *m = rpc_raw_response(&w, 2000, rpc_wait_ms());
    CU_ASSERT(m && m->via.array.ptr[2].type == MSGPACK_OBJECT_NIL);
    uint64_t on2, inl2;
    stats(&w, 1002, &on2, &dem, &inl2);
    CU_ASSERT_EQUAL(on2, on1);
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void hexstr(const uint8_t *p, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[p[i] >> 4];
        out[2 * i + 1] = d[p[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Sends [0, id, "tools.call", PARAMS] with PARAMS given as raw bytes and
 * checks that short_hex saw exactly `args` (hex of what it received). */
static void args_case(rpc_raw *w, uint64_t id, const uint8_t *params,
                      size_t plen, const uint8_t *args, size_t alen)
{
    th_buf f = TH_BUF_INIT;
    CU_ASSERT_FATAL(th_rpc_pack_request(&f, id, "tools.call", params, plen) ==
                    0);
    CU_ASSERT(rpc_raw_send(w, f.data, f.len));
    th_buf_destroy(&f);
    const msgpack_object *m = rpc_raw_response(w, id, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT(m->via.array.ptr[2].type == MSGPACK_OBJECT_NIL);
    char want[1024];
    hexstr(args, alen, want);
    CU_ASSERT(rpc_ok(&m->via.array.ptr[3]));
    if (!rpc_stdout_is(&m->via.array.ptr[3], want)) {
        CU_FAIL("short_hex did not see the bytes that were sent");
        fprintf(stderr, "\ncase %llu: want %s\n", (unsigned long long)id,
                want);
    }
}

/* The args are passed as the frame holds them, whatever their encoding,
 * with or without options after them. */
static void test_args_bytes(void)
{
    rpc_srv s;
    start(&s, "  short_call_max: 1m\n");
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    /* ["short_hex", {"p0": "a"}] */
    const uint8_t a1[] = {0x81, 0xa2, 'p', '0', 0xa1, 'a'};
    uint8_t p1[64] = {0x92, 0xa9, 's', 'h', 'o', 'r', 't', '_', 'h', 'e', 'x'};
    memcpy(p1 + 11, a1, sizeof a1);
    args_case(&w, 1, p1, 11 + sizeof a1, a1, sizeof a1);
    /* the same with str8 encodings (not what a packer would choose) and
     * options after the args */
    const uint8_t a2[] = {0x81, 0xd9, 2, 'p', '1', 0xd9, 3, 'x', 'y', 'z'};
    uint8_t p2[96] = {0x93, 0xd9, 9, 's', 'h', 'o', 'r', 't', '_', 'h', 'e',
                      'x'};
    memcpy(p2 + 12, a2, sizeof a2);
    const uint8_t opt[] = {0x81, 0xaa, 't', 'i', 'm', 'e', 'o', 'u', 't',
                           '_',  'm',  's', 0xcd, 0x13, 0x88};
    memcpy(p2 + 12 + sizeof a2, opt, sizeof opt);
    args_case(&w, 2, p2, 12 + sizeof a2 + sizeof opt, a2, sizeof a2);
    /* a map16 of 16 entries (p0..p15), name as bin */
    uint8_t a3[256];
    size_t n3 = 0;
    a3[n3++] = 0xde;
    a3[n3++] = 0;
    a3[n3++] = 16;
    for (int i = 0; i < 16; i++) {
        char k[4];
        int kl = snprintf(k, sizeof k, "p%d", i);
        a3[n3++] = (uint8_t)(0xa0 | kl);
        memcpy(a3 + n3, k, (size_t)kl);
        n3 += (size_t)kl;
        a3[n3++] = 0xa1;
        a3[n3++] = (uint8_t)('a' + i);
    }
    uint8_t p3[320] = {0x92, 0xc4, 9, 's', 'h', 'o', 'r', 't', '_', 'h', 'e',
                       'x'};
    memcpy(p3 + 12, a3, n3);
    args_case(&w, 3, p3, 12 + n3, a3, n3);
    /* nil args: an empty map */
    const uint8_t a4[] = {0x80};
    const uint8_t p4[] = {0x92, 0xa9, 's', 'h', 'o', 'r', 't', '_', 'h', 'e',
                          'x', 0xc0};
    args_case(&w, 4, p4, sizeof p4, a4, sizeof a4);
    /* no args at all */
    const uint8_t p5[] = {0x91, 0xa9, 's', 'h', 'o', 'r', 't', '_', 'h', 'e',
                          'x'};
    args_case(&w, 5, p5, sizeof p5, a4, sizeof a4);
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* A tool declared short that sleeps past host.short_call_max: each overrun
 * is logged; after the third (or one 10x over) its calls run on workers,
 * so a slow call of it no longer stalls another client's echo.  (The watchdog far away: a
 * 60 ms nap held past its default 100 ms under valgrind would be demoted
 * while it runs, at the first overrun; rpc_stuck tests that.) */
static void test_overrun_demotes(void)
{
    rpc_srv s;
    start(&s, "  short_call_max: 20ms\n  short_call_stuck: 1m\n");
    rpc_raw a, b;
    CU_ASSERT_FATAL(rpc_raw_open(&a, &s) == 0);
    CU_ASSERT_FATAL(rpc_raw_open(&b, &s) == 0);
    uint64_t on, dem, inl;
    for (uint64_t i = 1; i <= 3; i++) {
        rpc_raw_request(&a, i, "tools.call", "[\"short_nap\", {\"ms\": 60}]");
        const msgpack_object *m = rpc_raw_response(&a, i, rpc_wait_ms());
        CU_ASSERT(m && rpc_ok(&m->via.array.ptr[3]) &&
                  rpc_stdout_is(&m->via.array.ptr[3], "awake"));
        stats(&a, 100 + i, &on, &dem, &inl);
        /* the third overrun demotes it (tests/unit/test_call_fast.c
         * counts them); one held 10x the limit demotes it at once, which
         * a loaded machine can make of a 60 ms nap: then it is on
         * workers for the rest, and demoted once all the same */
        CU_ASSERT(dem <= 1);
    }
    CU_ASSERT_EQUAL(dem, 1);
    CU_ASSERT(rpc_log_has(&s, "tool=short_nap is declared short but"));
    CU_ASSERT(rpc_log_has(&s, "its calls run on workers from now on"));
    /* now on a worker: echo on another connection answers meanwhile */
    uint64_t on0 = on;
    /* a nap far longer than the echo's bound (both scaled), running
     * on a worker before the echo is sent (an event, not a sleep) */
    char nap[64];
    snprintf(nap, sizeof nap, "[\"short_nap\", {\"ms\": %u}]",
             th_test_ms(800));
    rpc_raw_request(&a, 10, "tools.call", nap);
    CU_ASSERT(rpc_wait_running(&s, 1));
    int64_t t0 = rpc_now_ms();
    rpc_raw_request(&b, 11, "tools.call", "[\"echo\", {\"text\": \"hi\"}]");
    const msgpack_object *m = rpc_raw_response(&b, 11, rpc_wait_ms());
    int64_t echo_ms = rpc_now_ms() - t0;
    CU_ASSERT(m && rpc_ok(&m->via.array.ptr[3]) &&
              rpc_stdout_is(&m->via.array.ptr[3], "hi"));
    CU_ASSERT(echo_ms < th_test_ms(500));
    m = rpc_raw_response(&a, 10, rpc_wait_ms());
    CU_ASSERT(m && rpc_ok(&m->via.array.ptr[3]));
    stats(&a, 200, &on, &dem, &inl);
    CU_ASSERT_EQUAL(on, on0 + 1); /* the echo, not the nap */
    rpc_raw_close(&a);
    rpc_raw_close(&b);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* short_call_max: 0: every call goes to a worker, and is still answered. */
static void test_short_off(void)
{
    rpc_srv s;
    start(&s, "  short_call_max: 0\n");
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    for (uint64_t i = 1; i <= 5; i++) {
        rpc_raw_request(&w, i, "tools.call", "[\"echo\", {\"text\": \"x\"}]");
        const msgpack_object *m = rpc_raw_response(&w, i, rpc_wait_ms());
        CU_ASSERT(m && rpc_ok(&m->via.array.ptr[3]) &&
                  rpc_stdout_is(&m->via.array.ptr[3], "x"));
    }
    uint64_t on, dem, inl;
    stats(&w, 100, &on, &dem, &inl);
    CU_ASSERT_EQUAL(on, 0);
    CU_ASSERT_EQUAL(inl, 0);
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

void th_suite_rpc_short(void)
{
    CU_pSuite s = CU_add_suite("rpc_short", NULL, NULL);
    CU_add_test(s, "short_on_loop", test_short_on_loop);
    CU_add_test(s, "args_bytes", test_args_bytes);
    CU_add_test(s, "overrun_demotes", test_overrun_demotes);
    CU_add_test(s, "short_off", test_short_off);
}
