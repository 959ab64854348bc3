/* test_rpc_stuck.c - a tool declared TOOLHOST_TOOL_SHORT that hangs on
 * the RPC server's event loop (fixture short_tools: short_nap sleeping
 * 2 s): the core's watchdog (call_fast.c, host.short_call_stuck) logs it
 * while it runs, naming tool and plugin, counts it in
 * calls.short_demoted and demotes the tool at once.  The running call
 * cannot be moved: another client's host.ping is answered only after it
 * returned; afterwards the tool's calls run on workers and no longer
 * stall other clients. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

#define NAP_MS 2000

static uint64_t stat_calls(rpc_raw *w, uint64_t id, const char *key)
{
    rpc_raw_request(w, id, "host.stats", "[]");
    const msgpack_object *m = rpc_raw_response(w, id, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *v =
        th_rpc_map_get(th_rpc_map_get(&m->via.array.ptr[3], "calls"), key);
    CU_ASSERT_FATAL(v != NULL);
    return v->via.u64;
}

static void test_stuck_short_call(void)
{
    rpc_srv s;
    static char plugins[512];
    snprintf(plugins, sizeof plugins,
             "  - name: short_tools\n    path: %s/fixtures/short_tools.so\n",
             TH_BUILD_DIR);
    rpc_opts o = {.plugins_extra = plugins,
                  .host_extra = "  short_call_max: 10ms\n"
                                "  short_call_stuck: 100ms\n",
                  .public_extra = "  - name: short\n"
                                  "    tools: [short_hex, short_nap]\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rpc_raw a, b;
    CU_ASSERT_FATAL(rpc_raw_open(&a, &s) == 0);
    CU_ASSERT_FATAL(rpc_raw_open(&b, &s) == 0);
    CU_ASSERT_EQUAL(stat_calls(&a, 1, "short_demoted"), 0);

    /* a: the nap holds the loop; the watchdog says so while it runs */
    char req[64];
    snprintf(req, sizeof req, "[\"short_nap\", {\"ms\": %d}]", NAP_MS);
    int64_t t0 = rpc_now_ms();
    rpc_raw_request(&a, 2, "tools.call", req);
    bool seen = rpc_log_wait(&s, "tool=short_nap is declared short but call=",
                             NAP_MS);
    int64_t seen_ms = rpc_now_ms() - t0;
    CU_ASSERT(seen);
    /* while it runs (not at its end), under valgrind too */
    CU_ASSERT(seen_ms < NAP_MS);
    CU_ASSERT(rpc_log_has(&s, "has held the front's event loop"));
    CU_ASSERT(rpc_log_has(&s, "; plugin short_tools) for"));
    CU_ASSERT(rpc_log_has(&s, "its calls run on workers from now on"));
    /* b: the loop is held; its ping is answered once the nap returned */
    rpc_raw_request(&b, 3, "host.ping", "[]");
    const msgpack_object *m = rpc_raw_response(&b, 3, rpc_wait_ms());
    int64_t ping_ms = rpc_now_ms() - t0;
    CU_ASSERT(m && m->via.array.ptr[2].type == MSGPACK_OBJECT_NIL);
    CU_ASSERT(ping_ms >= NAP_MS - 50);
    m = rpc_raw_response(&a, 2, rpc_wait_ms());
    CU_ASSERT(m && rpc_ok(&m->via.array.ptr[3]) &&
              rpc_stdout_is(&m->via.array.ptr[3], "awake"));
    fprintf(stderr, "\n  stuck call reported after %lld ms, ping answered "
                    "after %lld ms\n",
            (long long)seen_ms, (long long)ping_ms);
    CU_ASSERT(rpc_log_wait(&s, "returned after holding the front's thread",
                       rpc_wait_ms()));
    /* counted once (the watchdog's demotion, not again at the end) */
    CU_ASSERT_EQUAL(stat_calls(&a, 4, "short_demoted"), 1);
    CU_ASSERT_EQUAL(stat_calls(&a, 41, "short_stuck"), 1);

    /* later naps run on workers: b's echo is not stalled */
    uint64_t on0 = stat_calls(&a, 5, "on_loop");
    /* a nap far longer than the echo's bound (both scaled), running
     * on a worker before the echo is sent (an event, not a sleep) */
    char nap[64];
    snprintf(nap, sizeof nap, "[\"short_nap\", {\"ms\": %u}]",
             th_test_ms(800));
    rpc_raw_request(&a, 6, "tools.call", nap);
    CU_ASSERT(rpc_wait_running(&s, 1));
    int64_t e0 = rpc_now_ms();
    rpc_raw_request(&b, 7, "tools.call", "[\"echo\", {\"text\": \"hi\"}]");
    m = rpc_raw_response(&b, 7, rpc_wait_ms());
    int64_t echo_ms = rpc_now_ms() - e0;
    CU_ASSERT(m && rpc_ok(&m->via.array.ptr[3]) &&
              rpc_stdout_is(&m->via.array.ptr[3], "hi"));
    CU_ASSERT(echo_ms < th_test_ms(500));
    m = rpc_raw_response(&a, 6, rpc_wait_ms());
    CU_ASSERT(m && rpc_ok(&m->via.array.ptr[3]));
    /* the echo ran on the loop, the nap did not; no second report */
    CU_ASSERT_EQUAL(stat_calls(&a, 8, "on_loop"), on0 + 1);
    CU_ASSERT_EQUAL(stat_calls(&a, 9, "short_demoted"), 1);
    CU_ASSERT_EQUAL(stat_calls(&a, 91, "short_stuck"), 1);
    rpc_raw_close(&a);
    rpc_raw_close(&b);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

void th_suite_rpc_stuck(void)
{
    CU_pSuite s = CU_add_suite("rpc_stuck", NULL, NULL);
    CU_add_test(s, "stuck_short_call", test_stuck_short_call);
}
