/* test_rpc_code.c - run_code through the real `toolhost serve`: a hostile
 * script whose message handler loops (Lua runs it with hooks off after the
 * deadline fires) ends by its deadline and frees its worker, so normal
 * calls still run with one or two workers, and shutdown ends in bounded
 * time. */
#include <CUnit/CUnit.h>

#include "test_rpc_harness.h"

static const char *const hostile[] = {
    "xpcall(function() error('x') end, function() while true do end end)",
    "xpcall(function() while true do end end, function() while true do end "
    "end)",
    "coroutine.wrap(function() local x <close> = setmetatable({}, {__close "
    "= function() while true do end end}) while true do end end)()",
    "error(setmetatable({}, {__tostring = function() while true do end "
    "end}))",
};

static void run_with_workers(unsigned workers)
{
    char host_extra[128];
    snprintf(host_extra, sizeof host_extra,
             "  workers: %u\n  async_workers: 1\n", workers);
    /* the call's own deadline (2 s, scaled) answers a stuck script:
     * before the fix the answer was "timeout" and the worker stayed busy */
    char public_extra[160];
    snprintf(public_extra, sizeof public_extra,
             "    timeout: %ums\n"
             "    run_code:\n"
             "      enabled: true\n"
             "      timeout: 300ms\n",
             th_test_ms(2000));
    rpc_opts o = {.host_extra = host_extra, .public_extra = public_extra};
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    rpc_res r;
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        char params[512];
        snprintf(params, sizeof params, "[\"run_code\", {\"code\": \"%s\"}]",
                 hostile[i]);
        int64_t t0 = rpc_now_ms();
        CU_ASSERT(rpc_call(c, "tools.call", params, &r) == 0);
        int64_t took = rpc_now_ms() - t0;
        CU_ASSERT(r.err == NULL);
        CU_ASSERT(!rpc_ok(r.res));
        /* ended by the script's deadline, not by the call's */
        const msgpack_object *meta = th_rpc_map_get(r.res, "meta");
        const msgpack_object *to =
            meta ? th_rpc_map_get(meta, "timed_out") : NULL;
        CU_ASSERT(to && to->type == MSGPACK_OBJECT_BOOLEAN && to->via.boolean);
        /* well before the call's own deadline (scaled as it is) */
        CU_ASSERT(took < th_test_ms(1500));
        if (!to || took >= th_test_ms(1500))
            fprintf(stderr, "\n  workers %u, script %zu: %lld ms\n", workers,
                    i, (long long)took);
        rpc_res_free(&r);
    }
    /* every worker is free again: four normal calls run (a stuck worker
     * would hold them queued to their deadline).  Plain echo calls, not
     * run_code scripts: a script must end within run_code's 300 ms, which
     * a normal one slowed to 400 ms (valgrind on a loaded machine) did
     * not; the short deadline is for the hostile scripts above. */
    for (int i = 0; i < 4; i++) {
        CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"hi\"}]",
                           &r) == 0);
        CU_ASSERT(r.err == NULL && rpc_ok(r.res));
        CU_ASSERT(r.res && rpc_stdout_is(r.res, "hi"));
        rpc_res_free(&r);
    }
    th_rpc_client_close(c);
    /* shutdown does not wait for a spinning worker */
    int64_t t0 = rpc_now_ms();
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    CU_ASSERT(rpc_now_ms() - t0 < 5000);
    rpc_srv_free(&s);
}

static void test_hostile_frees_worker(void)
{
    run_with_workers(1);
    run_with_workers(2);
}

/* stdout of a result as a C string (static buffer), "" when none. */
static const char *stdout_of(const msgpack_object *res)
{
    static char buf[512];
    const msgpack_object *o = res ? th_rpc_map_get(res, "stdout") : NULL;
    const char *p;
    size_t n;
    buf[0] = '\0';
    if (o && th_rpc_obj_str(o, &p, &n))
        snprintf(buf, sizeof buf, "%.*s", (int)n, p);
    return buf;
}

static const char *stderr_of(const msgpack_object *res)
{
    static char buf[512];
    const msgpack_object *o = res ? th_rpc_map_get(res, "stderr") : NULL;
    const char *p;
    size_t n;
    buf[0] = '\0';
    if (o && th_rpc_obj_str(o, &p, &n))
        snprintf(buf, sizeof buf, "%.*s", (int)n, p);
    return buf;
}

/* ABI 1.1 over the real server: toolhost_caller.front says "rpc" for a
 * call over msgpack-RPC and "code" for one a run_code script makes; a tool
 * with structured output gives the decoded value in the result's
 * `structured` (RPC) and as a Lua table r.structured (run_code). */
static void test_front_and_structured(void)
{
    rpc_opts o = {
        .config = "host:\n"
                  "  log_level: debug\n"
                  "  shutdown_grace: 1s\n"
                  "plugins:\n"
                  "  - name: abi11_tools\n"
                  "    path: @BUILD@/fixtures/abi11_tools.so\n"
                  "toolsets:\n"
                  "  - name: public\n"
                  "    tools: [abi11_tools_who, abi11_tools_rows]\n"
                  "    run_code:\n"
                  "      enabled: true\n"
                  "      timeout: 5s\n"};
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    rpc_res r;

    CU_ASSERT(rpc_call(c, "tools.call", "[\"abi11_tools_who\", {}]", &r) == 0);
    CU_ASSERT(r.err == NULL && rpc_ok(r.res));
    const char *out = stdout_of(r.res);
    CU_ASSERT(strstr(out, "front=rpc") != NULL);
    CU_ASSERT(strstr(out, "toolset=public") != NULL);
    CU_ASSERT(strstr(out, "user=-") == NULL);
    if (!strstr(out, "front=rpc"))
        fprintf(stderr, "\n  over rpc: %s\n", out);
    /* a tool without structured output has no `structured` */
    CU_ASSERT(r.res && th_rpc_map_get(r.res, "structured") == NULL);
    rpc_res_free(&r);

    CU_ASSERT(rpc_call(c, "tools.call",
                       "[\"run_code\", {\"code\": \"print("
                       "tools.abi11_tools_who{}.stdout)\"}]",
                       &r) == 0);
    CU_ASSERT(r.err == NULL && rpc_ok(r.res));
    out = stdout_of(r.res);
    CU_ASSERT(strstr(out, "front=code") != NULL);
    CU_ASSERT(strstr(out, "toolset=public") != NULL);
    if (!strstr(out, "front=code"))
        fprintf(stderr, "\n  from run_code: %s %s\n", out, stderr_of(r.res));
    rpc_res_free(&r);

    CU_ASSERT(rpc_call(c, "tools.call",
                       "[\"abi11_tools_rows\", {\"limit\": 7}]", &r) == 0);
    CU_ASSERT(r.err == NULL && rpc_ok(r.res));
    const msgpack_object *sv = r.res ? th_rpc_map_get(r.res, "structured")
                                     : NULL;
    CU_ASSERT(sv && sv->type == MSGPACK_OBJECT_MAP);
    const msgpack_object *rows = sv ? th_rpc_map_get(sv, "rows") : NULL;
    CU_ASSERT(rows && rows->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
              rows->via.u64 == 7);
    rpc_res_free(&r);

    CU_ASSERT(rpc_call(c, "tools.call",
                       "[\"run_code\", {\"code\": \"local r = "
                       "tools.abi11_tools_rows{limit = 5}; print(type("
                       "r.structured) .. ' ' .. r.structured.rows * 2)\"}]",
                       &r) == 0);
    CU_ASSERT(r.err == NULL && rpc_ok(r.res));
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "table 10"));
    if (r.res && !rpc_stdout_is(r.res, "table 10"))
        fprintf(stderr, "\n  structured in Lua: %s\n", stdout_of(r.res));
    rpc_res_free(&r);

    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

void th_suite_rpc_code(void)
{
    CU_pSuite s = CU_add_suite("rpc_code", NULL, NULL);
    CU_add_test(s, "hostile_frees_worker", test_hostile_frees_worker);
    CU_add_test(s, "front_and_structured", test_front_and_structured);
}
