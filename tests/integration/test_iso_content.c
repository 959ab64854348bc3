/* test_iso_content.c - resources, prompts and completion of a plugin run
 * with `isolation: process` (docs/isolation.md, "Resources, prompts and
 * completion"), through the real `toolhost serve` over msgpack-RPC.
 *
 * same_as_in_process: the conformance fixture (tests/fixtures/
 *   conform_tools.c) isolated answers every list, read, template read,
 *   prompt get and completion (and their errors) exactly as in process.
 * hostile: an isolated plugin whose reads crash, hang, add a block past
 *   the budget, or forge answers on the worker's socket (lying sizes,
 *   garbage msgpack, bad UTF-8 and MIME types, answers to ids never sent,
 *   a second answer, a frame that is not msgpack): each read fails with a
 *   clear error, and the host and the plugin keep serving.
 * updates: resource_updated() in the worker reaches the host's check
 *   (a URI of the plugin's own passes; another is ignored). */
#include <CUnit/CUnit.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

/* A sanitizer catches SIGSEGV itself and exits 1: the words differ. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SEGV_WORDS "plugin_crashed ("
#define SEGV_LOG "died (exit 1)"
#else
#define SEGV_WORDS "plugin_crashed (SIGSEGV)"
#define SEGV_LOG "died (SIGSEGV)"
#endif

static const char *user_line(void)
{
    return geteuid() == 0 ? "    user: auto\n" : "";
}

/* conform_tools (isolated when `iso`) and echo, every tool offered. */
static void start_conform(rpc_srv *s, bool iso)
{
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "  - name: conform_tools\n"
             "    path: @BUILD@/fixtures/conform_tools.so\n"
             "%s%s"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             iso ? "    isolation: process\n" : "", iso ? user_line() : "");
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(s, &o) == 0);
}

/* conform_tools in process (in) and isolated (iso), a client of each. */
typedef struct conform_pair {
    rpc_srv in, iso;
    th_rpc_client *ci, *cs;
} conform_pair;

static void pair_start(conform_pair *p)
{
    start_conform(&p->in, false);
    start_conform(&p->iso, true);
    CU_ASSERT(rpc_log_wait(&p->iso, "started (isolation: process)",
                           rpc_wait_ms()));
    p->ci = rpc_connect(&p->in);
    p->cs = rpc_connect(&p->iso);
    CU_ASSERT_FATAL(p->ci && p->cs);
}

static void pair_stop(conform_pair *p)
{
    th_rpc_client_close(p->ci);
    th_rpc_client_close(p->cs);
    CU_ASSERT_EQUAL(rpc_srv_stop(&p->in, SIGTERM), 0);
    CU_ASSERT_EQUAL(rpc_srv_stop(&p->iso, SIGTERM), 0);
    rpc_srv_free(&p->in);
    rpc_srv_free(&p->iso);
}

static bool str_has(const msgpack_object *o, const char *needle)
{
    const char *p;
    size_t n;
    return o && th_rpc_obj_str(o, &p, &n) &&
           memmem(p, n, needle, strlen(needle)) != NULL;
}

static bool err_has(const rpc_res *r, const char *needle)
{
    return r->err && r->err->type == MSGPACK_OBJECT_ARRAY &&
           r->err->via.array.size == 2 &&
           str_has(&r->err->via.array.ptr[1], needle);
}

/* Both answers are the same: the same result, or the same error. */
static bool same_answer(const rpc_res *a, const rpc_res *b)
{
    if (!!a->res != !!b->res || !!a->err != !!b->err)
        return false;
    if (a->res && !msgpack_object_equal(*a->res, *b->res))
        return false;
    return !a->err || msgpack_object_equal(*a->err, *b->err);
}

static void test_same_as_in_process(void)
{
    static const char *const req[][2] = {
        {"resources.list", "[]"},
        {"resources.templates", "[]"},
        {"prompts.list", "[]"},
        {"resources.read", "[\"test://static-text\"]"},
        {"resources.read", "[\"test://static-binary\"]"},
        {"resources.read", "[\"test://template/42/data\"]"},
        {"resources.read", "[\"test://template/missing/data\"]"},
        {"resources.read", "[\"test://nothing\"]"},
        {"resources.read", "[\"test://template/"
                           "0000000000000000000000000000000000000000000000000"
                           "00000000000000000000007/data\"]"},
        {"prompts.get", "[\"test_prompt_with_arguments\", "
                        "{\"arg1\": \"x\", \"arg2\": \"y\"}]"},
        {"prompts.get", "[\"test_simple_prompt\"]"},
        {"prompts.get", "[\"test_prompt_with_image\"]"},
        {"prompts.get", "[\"test_prompt_with_embedded_resource\", "
                        "{\"resourceUri\": \"test://static-text\"}]"},
        {"prompts.get", "[\"test_prompt_with_arguments\", {\"arg1\": \"x\"}]"},
        {"completion.complete",
         "[{\"ref\": {\"type\": \"prompt\", \"name\": "
         "\"test_prompt_with_arguments\"}, \"argument\": "
         "{\"name\": \"arg1\", \"value\": \"par\"}}]"},
        {"completion.complete",
         "[{\"ref\": {\"type\": \"resource\", \"uri\": "
         "\"test://template/{id}/data\"}, \"argument\": "
         "{\"name\": \"id\", \"value\": \"12\"}}]"},
        {"completion.complete",
         "[{\"ref\": {\"type\": \"resource\", \"uri\": "
         "\"test://template/{id}/data\"}, \"argument\": "
         "{\"name\": \"id\", \"value\": \"\"}}]"},
        {"completion.complete",
         "[{\"ref\": {\"type\": \"prompt\", \"name\": "
         "\"test_prompt_with_embedded_resource\"}, \"argument\": "
         "{\"name\": \"resourceUri\", \"value\": \"x\"}}]"},
    };
    conform_pair pr;
    pair_start(&pr);
    th_rpc_client *ci = pr.ci, *cs = pr.cs;
    size_t nres = 0;
    for (size_t i = 0; i < sizeof req / sizeof *req; i++) {
        rpc_res a, b;
        CU_ASSERT_FATAL(rpc_call(ci, req[i][0], req[i][1], &a) == 0);
        CU_ASSERT_FATAL(rpc_call(cs, req[i][0], req[i][1], &b) == 0);
        bool same = same_answer(&a, &b);
        if (!same)
            fprintf(stderr, "iso_content: %s %s differs\n", req[i][0],
                    req[i][1]);
        CU_ASSERT(same);
        nres += a.res != NULL;
        rpc_res_free(&a);
        rpc_res_free(&b);
    }
    CU_ASSERT(nres >= 14); /* most of them are answers, not errors */
    pair_stop(&pr);
}

/* iso_content_bad isolated (content_timeout `ms`), echo in process. */
static void start_bad(rpc_srv *s, int64_t timeout_ms)
{
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  max_outbuf: 64KiB\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "  - name: bad\n"
             "    path: @BUILD@/fixtures/iso_content_bad.so\n"
             "    isolation: process\n"
             "    crash_loop: 1000\n"
             "    content_timeout: %lldms\n"
             "%s"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             (long long)timeout_ms, user_line());
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(s, &o) == 0);
}

static bool read_is_fine(th_rpc_client *c)
{
    rpc_res r;
    bool ok = rpc_call(c, "resources.read", "[\"bad://fine\"]", &r) == 0 &&
              r.res &&
              str_has(th_rpc_map_get(&th_rpc_map_get(r.res, "contents")
                                          ->via.array.ptr[0],
                                     "text"),
                      "fine");
    rpc_res_free(&r);
    return ok;
}

/* The host and the plugin serve again: echo answers, and a read of
 * bad://fine does once its worker is back (a bounded wait for it). */
static void still_serves(th_rpc_client *c)
{
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"hi\"}]",
                       &r) == 0 &&
              r.res && rpc_stdout_is(r.res, "hi"));
    rpc_res_free(&r);
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    bool fine = false;
    while (!(fine = read_is_fine(c)) && rpc_now_ms() < end)
        ;
    CU_ASSERT(fine);
}

/* Blocks a tool writes during its call (write_block(), ABI 1.4) reach
 * the caller from an isolated plugin as from one in process: the same
 * result, meta.toolhost.content included, for the conformance fixture's
 * tool that writes an image and an embedded resource after its stdout,
 * and for those that give a typed stdout (an image, an audio clip, an
 * embedded resource). */
static void test_call_blocks(void)
{
    static const char *const tools[] = {
        "test_image_content", "test_audio_content", "test_embedded_resource",
        "test_multiple_content_types"};
    conform_pair pr;
    pair_start(&pr);
    th_rpc_client *ci = pr.ci, *cs = pr.cs;
    for (size_t i = 0; i < sizeof tools / sizeof *tools; i++) {
        char p[200];
        snprintf(p, sizeof p, "[\"%s\", {}]", tools[i]);
        rpc_res a, b;
        CU_ASSERT_FATAL(rpc_call(ci, "tools.call", p, &a) == 0);
        CU_ASSERT_FATAL(rpc_call(cs, "tools.call", p, &b) == 0);
        const msgpack_object *ca = th_rpc_map_get(
            th_rpc_map_get(th_rpc_map_get(a.res, "meta"), "toolhost"),
            "content");
        const msgpack_object *cb = th_rpc_map_get(
            th_rpc_map_get(th_rpc_map_get(b.res, "meta"), "toolhost"),
            "content");
        const msgpack_object *oa = th_rpc_map_get(a.res, "stdout");
        const msgpack_object *ob = th_rpc_map_get(b.res, "stdout");
        /* the last writes its blocks; the others a typed stdout */
        bool blocks = i == sizeof tools / sizeof *tools - 1;
        bool same = a.res && b.res && rpc_ok(a.res) && rpc_ok(b.res) &&
                    msgpack_object_equal(*a.res, *b.res) && !!ca == !!cb &&
                    (!blocks || (ca && ca->type == MSGPACK_OBJECT_ARRAY &&
                                 ca->via.array.size == 2)) &&
                    !!oa == !!ob;
        if (!same) {
            char ta[600] = "", tb[600] = "";
            if (a.res)
                msgpack_object_print_buffer(ta, sizeof ta, *a.res);
            if (b.res)
                msgpack_object_print_buffer(tb, sizeof tb, *b.res);
            fprintf(stderr, "iso_content: %s differs:\n in process %s\n "
                    "isolated   %s\n", tools[i], ta, tb);
        }
        CU_ASSERT(same);
        rpc_res_free(&a);
        rpc_res_free(&b);
    }
    pair_stop(&pr);
}

static void read_fails(th_rpc_client *c, const char *uri, int code,
                       const char *needle)
{
    char p[300];
    snprintf(p, sizeof p, "[\"%s\"]", uri);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "resources.read", p, &r) == 0);
    bool ok = rpc_is_error(&r, code) && err_has(&r, needle);
    if (!ok) {
        const char *m = "";
        size_t n = 0;
        if (r.err && r.err->type == MSGPACK_OBJECT_ARRAY &&
            r.err->via.array.size == 2)
            th_rpc_obj_str(&r.err->via.array.ptr[1], &m, &n);
        fprintf(stderr, "iso_content: %s: not an error %d with '%s': "
                "%.*s (%s)\n", uri, code, needle, (int)n, m,
                r.res ? "an answer" : r.err ? "an error" : "nothing");
    }
    CU_ASSERT(ok);
    rpc_res_free(&r);
}

static void test_hostile(void)
{
    rpc_srv s;
    start_bad(&s, th_test_ms(1000));
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(read_is_fine(c));
    /* a crash fails that read; the worker restarts */
    read_fails(c, "bad://crash", TH_EPLUGIN_CRASHED, SEGV_WORDS);
    CU_ASSERT(rpc_log_wait(&s, SEGV_LOG, rpc_wait_ms()));
    still_serves(c);
    /* a read that never returns: killed at content_timeout */
    read_fails(c, "bad://hang", TH_ETIMEOUT, "content_timeout");
    CU_ASSERT(rpc_log_wait(&s, "read of 'bad://hang' did not answer within",
                           rpc_wait_ms()));
    still_serves(c);
    /* a block past the budget: the worker's own sink refuses it */
    read_fails(c, "bad://huge", TH_ETOOL, "the content passes 32768 bytes");
    still_serves(c);
    /* forged answers: refused by the host, whatever the worker says */
    read_fails(c, "bad://forge/garbage", TH_ETOOL, "malformed");
    read_fails(c, "bad://forge/utf8", TH_ETOOL, "not UTF-8");
    read_fails(c, "bad://forge/mime", TH_ETOOL, "longer than 255 bytes");
    read_fails(c, "bad://forge/nul", TH_ETOOL, "malformed");
    /* the answers to ids never sent, and the worker's own second answer */
    CU_ASSERT(rpc_log_wait(&s, "which it was not running: ignored",
                           rpc_wait_ms()));
    still_serves(c);
    /* an answer that passes the budget: refused unread */
    read_fails(c, "bad://forge/over", TH_ETOOL,
               "the content passes 32768 bytes");
    CU_ASSERT(rpc_log_wait(&s, "passes the content budget", rpc_wait_ms()));
    still_serves(c);
    /* a frame that is not msgpack: the worker is killed */
    read_fails(c, "bad://forge/frame", TH_EPLUGIN_CRASHED,
               "plugin_crashed (SIGKILL)");
    CU_ASSERT(rpc_log_wait(&s, "sent a malformed frame: killed",
                           rpc_wait_ms()));
    still_serves(c);
    /* a write_block() frame of the wrong shape: the same */
    read_fails(c, "bad://forge/block", TH_EPLUGIN_CRASHED,
               "plugin_crashed (SIGKILL)");
    CU_ASSERT(rpc_log_wait(&s, "sent a malformed block: killed",
                           rpc_wait_ms()));
    still_serves(c);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* resource_updated() in the worker reaches an MCP client that
 * subscribed (tests/mcp/iso_updates.mjs, the official SDK client); the
 * host checks the URI against the plugin's own resources (the same check
 * as in process), so a worker cannot announce another plugin's. */
static void test_updates(void)
{
    th_test_timeout(90); /* the script gives up after 30 s */
    char *argv0[] = {"/bin/sh", "-c", "command -v node >/dev/null 2>&1",
                     NULL};
    th_test_run r;
    int rc = th_test_run_argv(argv0, NULL, 20, 0, &r);
    bool node = rc == 0 && r.status == 0;
    th_test_run_free(&r);
    if (!node)
        TH_SKIP("node is not installed");
    char *dir = th_test_tmpdir();
    char text[1024];
    snprintf(text, sizeof text,
             "host:\n"
             "  reload: off\n"
             "  log_level: debug\n"
             "plugins:\n"
             "  - name: bad\n"
             "    path: %s\n"
             "    isolation: process\n"
             "%s",
             th_test_build_path("fixtures/iso_content_bad.so"), user_line());
    char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && exec node iso_updates.mjs '%s' '%s'",
             th_test_source_path("tests/mcp"), th_test_build_path("toolhost"),
             cfg);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    rc = th_test_run_argv(argv, NULL, 120, 0, &r);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT(r.out && strstr(r.out, "ok"));
    CU_ASSERT(r.err && strstr(r.err, "plugin bad: resource_updated() of a "
                                     "URI that is none of its resources: "
                                     "ignored"));
    if (r.status != 0)
        fprintf(stderr, "iso_updates.mjs exited %d\nstdout:\n%s\nstderr "
                "(tail):\n%s\n", r.status, r.out ? r.out : "",
                r.err && r.err_len > 4000 ? r.err + r.err_len - 4000
                : r.err ? r.err : "");
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_iso_content(void)
{
    CU_pSuite s = CU_add_suite("iso_content", NULL, NULL);
    CU_add_test(s, "same_as_in_process", test_same_as_in_process);
    CU_add_test(s, "call_blocks", test_call_blocks);
    CU_add_test(s, "hostile", test_hostile);
    CU_add_test(s, "updates", test_updates);
}
