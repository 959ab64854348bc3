/* test_iso_ask.c - ask_client() (ABI 1.4) from a plugin run with
 * `isolation: process`: the worker sends the ask to the host
 * (ISO_CLIENT_ASK), the host asks the call's client on the call's own
 * thread and sends the answer back (docs/isolation.md).  The fixture
 * tests/fixtures/iso_ask_bad.c also forges the frame onto its worker's
 * socket, as a hostile plugin would: a second ask while one waits, a
 * request that is not bytes, a frame too short (each kills the worker,
 * whose call fails plugin_crashed, and the next call gets a fresh one),
 * and an ask for a call id never given (ignored). */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "integration/test_rpc_harness.h"

static int start(rpc_srv *s)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "plugins:\n"
             "  - name: askbad\n"
             "    path: @BUILD@/fixtures/iso_ask_bad.so\n"
             "    isolation: process\n"
             "%s"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             geteuid() == 0 ? "    user: auto\n" : "");
    rpc_opts o = {.config = cfg};
    return rpc_srv_start(s, &o);
}

/* The answer to the next client.ask on w: `json`. */
static void answer_ask(rpc_raw *w, const char *json)
{
    const msgpack_object *m = rpc_raw_host_request(w, "client.ask",
                                                   rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    rpc_raw_answer(w, m, json);
}

static bool stdout_has(const msgpack_object *res, const char *needle)
{
    const msgpack_object *o = th_rpc_map_get(res, "stdout");
    bool has = o && o->type == MSGPACK_OBJECT_STR &&
               memmem(o->via.str.ptr, o->via.str.size, needle,
                      strlen(needle)) != NULL;
    if (!has)
        fprintf(stderr, "\nstdout is [%.*s], wanted [%s]\n",
                o && o->type == MSGPACK_OBJECT_STR ? (int)o->via.str.size : 0,
                o && o->type == MSGPACK_OBJECT_STR ? o->via.str.ptr : "",
                needle);
    return has;
}

/* A real ask, answered: the answer reaches the plugin in its worker;
 * without client_asks the worker's ask_client() hears ENOTSUP at once. */
static void test_asked(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(start(&s) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call",
                    "[\"askbad_ask\", {\"text\": \"Name?\"}, "
                    "{\"client_asks\": [\"form\"]}]");
    answer_ask(&w, "{\"action\": \"accept\", \"content\": {\"n\": 1}}");
    const msgpack_object *m = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT(rpc_ok(&m->via.array.ptr[3]) &&
              stdout_has(&m->via.array.ptr[3], "rc=0 answer="));
    CU_ASSERT(stdout_has(&m->via.array.ptr[3], "\"accept\""));
    rpc_raw_request(&w, 2, "tools.call",
                    "[\"askbad_ask\", {\"text\": \"Name?\"}]");
    m = rpc_raw_response(&w, 2, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    char want[32];
    snprintf(want, sizeof want, "rc=%d answer=", TOOLHOST_ENOTSUP);
    CU_ASSERT(stdout_has(&m->via.array.ptr[3], want));
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* A cancelled call ends the ask it waits on, in the host and in the
 * worker: the plugin hears ECANCELLED, and the worker serves on. */
static void test_cancelled(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(start(&s) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call",
                    "[\"askbad_ask\", {\"text\": \"Wait\"}, "
                    "{\"client_asks\": [\"form\"]}]");
    const msgpack_object *m = rpc_raw_host_request(&w, "client.ask",
                                                   rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    rpc_raw_request(&w, 9, "tools.cancel", "[1]");
    m = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT(rpc_tool_error_is(&m->via.array.ptr[3], "cancelled"));
    rpc_raw_request(&w, 2, "tools.call",
                    "[\"askbad_ask\", {\"text\": \"Again\"}, "
                    "{\"client_asks\": [\"form\"]}]");
    answer_ask(&w, "{\"action\": \"decline\"}");
    m = rpc_raw_response(&w, 2, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT(stdout_has(&m->via.array.ptr[3], "decline"));
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* Forged frames: each malformed one kills the worker (its call fails
 * plugin_crashed, logged once), an ask for an id never given is
 * ignored, and the plugin's next call works on a fresh worker. */
static void test_forged(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(start(&s) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    static const char *const bad[] = {"twice", "notbin", "short"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char p[200];
        snprintf(p, sizeof p,
                 "[\"askbad_forge\", {\"how\": \"%s\"}, "
                 "{\"client_asks\": [\"form\"]}]",
                 bad[i]);
        rpc_res r;
        CU_ASSERT_FATAL(rpc_call(c, "tools.call", p, &r) == 0);
        if (!(r.res && rpc_tool_error_is(r.res, "plugin_crashed")))
            fprintf(stderr, "\nforged '%s' was not refused\n", bad[i]);
        CU_ASSERT(r.res && rpc_tool_error_is(r.res, "plugin_crashed"));
        rpc_res_free(&r);
    }
    CU_ASSERT(rpc_log_wait(&s, "sent a malformed ask_client()",
                           rpc_wait_ms()));
    rpc_res r;
    CU_ASSERT_FATAL(rpc_call(c, "tools.call",
                             "[\"askbad_forge\", {\"how\": \"other\"}]",
                             &r) == 0);
    CU_ASSERT(r.res && rpc_ok(r.res) && rpc_stdout_is(r.res, "forged"));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

void th_suite_iso_ask(void)
{
    CU_pSuite s = CU_add_suite("iso_ask", NULL, NULL);
    CU_add_test(s, "asked", test_asked);
    CU_add_test(s, "cancelled", test_cancelled);
    CU_add_test(s, "forged", test_forged);
}
