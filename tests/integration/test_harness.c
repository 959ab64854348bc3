/* test_harness.c - the shared RPC test helpers (test_rpc_harness.h) on
 * answers they do not expect: a helper that crashes takes the whole
 * integration run down with it ("CRASH: isolation:soak: signal 11"). */
#include <CUnit/CUnit.h>

#include "integration/test_rpc_harness.h"

/* msgpack of a JSON text, unpacked into `u`. */
static const msgpack_object *unpack_json(const char *json, th_buf *b,
                                         msgpack_unpacked *u)
{
    rpc_pack_json(b, json);
    msgpack_unpacked_init(u);
    size_t off = 0;
    if (msgpack_unpack_next(u, (const char *)b->data, b->len, &off) !=
        MSGPACK_UNPACK_SUCCESS)
        return NULL;
    return &u->data;
}

/* A tool that failed by itself answers {ok: false, stdout, stderr}: no
 * `error` map.  The isolated worker answers so when it cannot start a
 * call thread (its user's RLIMIT_NPROC, shared with every other process
 * of that user on the machine); rpc_tool_error_is() read the missing
 * code through NULL and the soak's client threads died of SIGSEGV. */
static void test_tool_error_without_error_map(void)
{
    static const char *const answers[] = {
        "{\"ok\": false, \"stdout\": \"\", \"stderr\": \"the plugin's worker "
        "process cannot start a thread for this call (processes limit?)\"}",
        "{\"ok\": false, \"error\": {\"message\": \"no code\"}}",
        "{\"ok\": false, \"error\": \"not a map\"}",
        "{\"ok\": false, \"error\": {\"code\": 7, \"message\": \"x\"}}",
        "{\"ok\": true}",
        "[]",
    };
    for (size_t i = 0; i < sizeof answers / sizeof answers[0]; i++) {
        th_buf b = TH_BUF_INIT;
        msgpack_unpacked u;
        const msgpack_object *o = unpack_json(answers[i], &b, &u);
        CU_ASSERT_PTR_NOT_NULL_FATAL(o);
        CU_ASSERT(!rpc_tool_error_is(o, "plugin_crashed"));
        CU_ASSERT(!rpc_stdout_is(o, "x"));
        msgpack_unpacked_destroy(&u);
        th_buf_destroy(&b);
    }
    /* and the one it is for */
    th_buf b = TH_BUF_INIT;
    msgpack_unpacked u;
    const msgpack_object *o = unpack_json(
        "{\"ok\": false, \"error\": {\"code\": \"plugin_crashed\", "
        "\"message\": \"plugin_crashed (SIGSEGV)\"}}",
        &b, &u);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT(rpc_tool_error_is(o, "plugin_crashed"));
    CU_ASSERT(!rpc_tool_error_is(o, "timeout"));
    msgpack_unpacked_destroy(&u);
    th_buf_destroy(&b);
}

void th_suite_harness(void)
{
    CU_pSuite s = CU_add_suite("harness", NULL, NULL);
    CU_add_test(s, "tool_error_without_error_map",
                test_tool_error_without_error_map);
}
