/* test_iso_cap.c - the frame cap of an isolated plugin's workers,
 * worker_max_frame (docs/isolation.md, "Frames from a worker"), through
 * the real `toolhost serve` over msgpack-RPC, with the fixture
 * tests/fixtures/iso_cap.c that forges frame lengths on the worker's
 * socket.
 *
 * stall: a header declaring cap + 1 bytes, then nothing: the worker is
 *   killed on the header (the log line names the plugin, the worker, the
 *   size and the cap; the call fails plugin_crashed in those words), not
 *   at a deadline; the next call gets a fresh worker, and echo (in
 *   process) and another isolated plugin serve throughout.
 * stream: a header declaring 200 MiB, then the body, slowly: killed on
 *   the header; the host's peak RSS (VmHWM) grows less than 64 MiB.
 * legitimate: a frame of exactly the cap is taken; one write() of 20 MiB
 *   (more than the cap) and an output of 1,000,000 bytes (at the
 *   toolset's output limit) come back whole or cut as the limit says.
 * lowered: worker_max_frame: 256KiB refuses a frame of 300,000 bytes
 *   (which the default takes); a block past what the worker may send is
 *   refused to the plugin in words (the worker lives), and so is a
 *   set_meta() past it; a resource read is asked for no more than fits in
 *   a frame; a plugin whose descriptor (300,000 bytes) passes it fails to
 *   start in words (it loads under the default cap).
 * big_args: the other way, a call whose arguments make a frame longer
 *   than a worker reads (256 MiB) fails at once with limit_exceeded,
 *   nothing sent, and the worker serves the next call (a host opened in
 *   this process: no front carries that much by default). */
#include <CUnit/CUnit.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"
#include "th/config.h"
#include "th/host.h"
#include "th/iso.h"

#define DEFAULT_CAP ((16u << 20) + (64u << 10)) /* ISO_FRAME_DEFAULT */

static const char *user_line(void)
{
    return geteuid() == 0 ? "    user: auto\n" : "";
}

/* echo in process; cap (iso_cap.so) and bad (iso_content_bad.so)
 * isolated, with `cap_line` (a worker_max_frame line or "") for both. */
static void start(rpc_srv *s, const char *cap_line)
{
    char cfg[3000];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  max_frame: 1MiB\n"
             "  max_outbuf: 64MiB\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "  - name: cap\n"
             "    path: @BUILD@/fixtures/iso_cap.so\n"
             "    isolation: process\n"
             "    crash_loop: 1000\n"
             "%s%s"
             "  - name: bad\n"
             "    path: @BUILD@/fixtures/iso_content_bad.so\n"
             "    isolation: process\n"
             "%s%s"
             "  - name: desc\n"
             "    path: @BUILD@/fixtures/iso_cap_desc.so\n"
             "    isolation: process\n"
             "    optional: true\n"
             "%s%s"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n"
             "    timeout: 10m\n"
             "    limits: {text: 1MiB}\n",
             cap_line, user_line(), cap_line, user_line(), cap_line,
             user_line());
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(s, &o) == 0);
}

static int call(th_rpc_client *c, const char *tool, const char *args,
                rpc_res *r)
{
    char p[512];
    snprintf(p, sizeof p, "[\"%s\", %s]", tool, args ? args : "{}");
    return rpc_call(c, "tools.call", p, r);
}

static bool str_has(const msgpack_object *o, const char *needle)
{
    const char *p;
    size_t n;
    return o && th_rpc_obj_str(o, &p, &n) &&
           memmem(p, n, needle, strlen(needle)) != NULL;
}

static bool crashed_with(const msgpack_object *res, const char *needle)
{
    const msgpack_object *m =
        th_rpc_map_get(th_rpc_map_get(res, "error"), "message");
    bool ok = rpc_tool_error_is(res, "plugin_crashed") && str_has(m, needle);
    if (!ok) {
        const char *p = "";
        size_t n = 0;
        if (m)
            th_rpc_obj_str(m, &p, &n);
        fprintf(stderr, "\n  wanted plugin_crashed with '%s', got '%.*s'\n",
                needle, (int)n, p);
    }
    return ok;
}

/* A forge of `how` with `size`: the worker is killed for it. */
static void forge_killed(rpc_srv *s, th_rpc_client *c, const char *how,
                         unsigned long size, unsigned long cap)
{
    char args[128], words[160], line[200];
    snprintf(args, sizeof args, "{\"how\": \"%s\", \"size\": %lu}", how,
             size);
    snprintf(words, sizeof words, "plugin_crashed (a frame of %lu bytes "
             "passes worker_max_frame ", size);
    snprintf(line, sizeof line, "declared a frame of %lu bytes, more than "
             "worker_max_frame (%lu bytes): killed", size, cap);
    rpc_res r;
    CU_ASSERT(call(c, "cap_forge", args, &r) == 0);
    CU_ASSERT(r.res && crashed_with(r.res, words));
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_wait(s, line, rpc_wait_ms()));
    CU_ASSERT(rpc_log_wait(s, "died (a frame of", rpc_wait_ms()));
}

/* echo, the other isolated plugin, and this one (a fresh worker) serve. */
static void still_serves(th_rpc_client *c)
{
    rpc_res r;
    CU_ASSERT(call(c, "echo", "{\"text\": \"hi\"}", &r) == 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "hi"));
    rpc_res_free(&r);
    CU_ASSERT(call(c, "bad_ping", NULL, &r) == 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "pong"));
    rpc_res_free(&r);
    CU_ASSERT(call(c, "cap_ping", NULL, &r) == 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "pong"));
    rpc_res_free(&r);
}

static void test_stall(void)
{
    rpc_srv s;
    start(&s, "");
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    still_serves(c);
    /* the toolset's timeout is 10 minutes: only the header can end it */
    forge_killed(&s, c, "stall", DEFAULT_CAP + 1, DEFAULT_CAP);
    still_serves(c);
    /* the largest length a header can say */
    forge_killed(&s, c, "stall", 0xffffffffUL, DEFAULT_CAP);
    still_serves(c);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static long status_kb(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':')
            kb = atol(line + kl + 1);
    if (f)
        fclose(f);
    return kb;
}

static void test_stream(void)
{
    rpc_srv s;
    start(&s, "");
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    still_serves(c);
    long hwm0 = status_kb(s.pid, "VmHWM");
    CU_ASSERT(hwm0 > 0);
    forge_killed(&s, c, "stream", 200ul << 20, DEFAULT_CAP);
    long hwm1 = status_kb(s.pid, "VmHWM");
    fprintf(stderr, "\n  VmHWM %ld -> %ld KiB ", hwm0, hwm1);
    CU_ASSERT(hwm1 - hwm0 < 64 * 1024);
    still_serves(c);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* stdout of r: its bytes (NULL when none). */
static const char *out_of(const rpc_res *r, size_t *n)
{
    const char *p = NULL;
    *n = 0;
    const msgpack_object *o = r->res ? th_rpc_map_get(r->res, "stdout") : NULL;
    if (!o || !th_rpc_obj_str(o, &p, n))
        return NULL;
    return p;
}

static void test_legitimate(void)
{
    rpc_srv s;
    start(&s, "");
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    size_t n;
    const char *p;
    /* a frame of exactly the cap: taken (its bytes reach stdout, cut at
     * the text limit of 1 MiB, head and tail) */
    char args[128];
    snprintf(args, sizeof args, "{\"how\": \"exact\", \"size\": %u}",
             DEFAULT_CAP);
    CU_ASSERT(call(c, "cap_forge", args, &r) == 0);
    CU_ASSERT(r.res && rpc_ok(r.res));
    p = out_of(&r, &n);
    CU_ASSERT(p && n > 1000 && p[0] == 'x' && memmem(p, n, "exact", 5));
    rpc_res_free(&r);
    /* one write() of 20 MiB, more than the cap: it goes in pieces, and
     * the output limit cuts it as in process (head, marker, tail) */
    CU_ASSERT(call(c, "cap_write", "{\"size\": 20971520}", &r) == 0);
    CU_ASSERT(r.res && rpc_ok(r.res));
    p = out_of(&r, &n);
    CU_ASSERT(p && n > 1000000 && n < 1100000 && memcmp(p, "abcdef", 6) == 0 &&
              memcmp(p + n - 3, "END", 3) == 0 && memmem(p, n, "cut", 3));
    rpc_res_free(&r);
    /* output at the toolset's limit (1 MiB of text): whole */
    CU_ASSERT(call(c, "cap_write", "{\"size\": 1048576}", &r) == 0);
    CU_ASSERT(r.res && rpc_ok(r.res));
    p = out_of(&r, &n);
    CU_ASSERT(p && n == 1048576 && memcmp(p, "abcdef", 6) == 0 &&
              memcmp(p + n - 3, "END", 3) == 0);
    rpc_res_free(&r);
    /* 300,000 bytes in one frame: under the default cap */
    CU_ASSERT(call(c, "cap_forge", "{\"how\": \"exact\", \"size\": 300000}",
                   &r) == 0);
    CU_ASSERT(r.res && rpc_ok(r.res));
    rpc_res_free(&r);
    /* a descriptor of 300,000 bytes: under the default cap */
    CU_ASSERT(call(c, "desc_ping", NULL, &r) == 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "pong"));
    rpc_res_free(&r);
    CU_ASSERT_EQUAL(rpc_log_count(&s, "declared a frame of"), 0);
    CU_ASSERT_EQUAL(rpc_log_count(&s, "died ("), 0);
    still_serves(c);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void test_lowered(void)
{
    rpc_srv s;
    start(&s, "    worker_max_frame: 256KiB\n");
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    size_t n;
    const char *p;
    /* exactly the lowered cap: taken */
    CU_ASSERT(call(c, "cap_forge", "{\"how\": \"exact\", \"size\": 262144}",
                   &r) == 0);
    CU_ASSERT(r.res && rpc_ok(r.res));
    rpc_res_free(&r);
    CU_ASSERT_EQUAL(rpc_log_count(&s, "declared a frame of"), 0);
    /* 300,000 bytes, which the default takes: refused, killed */
    forge_killed(&s, c, "exact", 300000, 262144);
    still_serves(c);
    /* writes still go in pieces: 1 MiB at once comes back whole */
    CU_ASSERT(call(c, "cap_write", "{\"size\": 1048576}", &r) == 0);
    p = out_of(&r, &n);
    CU_ASSERT(r.res && rpc_ok(r.res) && p && n == 1048576 &&
              memcmp(p + n - 3, "END", 3) == 0);
    rpc_res_free(&r);
    /* a block within what a frame holds: taken; past it: the worker's
     * own sink refuses it to the plugin (TOOLHOST_ENOMEM), and the
     * worker lives */
    CU_ASSERT(call(c, "cap_block", "{\"size\": 150000}", &r) == 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "write_block: 0"));
    const msgpack_object *ct = th_rpc_map_get(
        th_rpc_map_get(th_rpc_map_get(r.res, "meta"), "toolhost"), "content");
    CU_ASSERT(ct && ct->type == MSGPACK_OBJECT_ARRAY && ct->via.array.size == 1);
    rpc_res_free(&r);
    CU_ASSERT(call(c, "cap_block", "{\"size\": 300000}", &r) == 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "write_block: -2"));
    rpc_res_free(&r);
    /* set_meta() within a frame: taken; past it: TOOLHOST_EINVAL */
    CU_ASSERT(call(c, "cap_meta", "{\"size\": 150000}", &r) == 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "set_meta: 0"));
    rpc_res_free(&r);
    CU_ASSERT(call(c, "cap_meta", "{\"size\": 300000}", &r) == 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "set_meta: -1"));
    rpc_res_free(&r);
    /* the descriptor past the cap: not sent, the start fails in words */
    CU_ASSERT(rpc_log_wait(&s, "descriptor takes ", rpc_wait_ms()));
    CU_ASSERT(rpc_log_has(&s, "more than the host reads in one frame "
                              "(worker_max_frame 262144 bytes)"));
    /* a read is asked for no more than a frame holds (256 KiB less
     * 64 KiB): the worker's sink refuses the 4 MiB block in words */
    CU_ASSERT(rpc_call(c, "resources.read", "[\"bad://huge\"]", &r) == 0);
    CU_ASSERT(rpc_is_error(&r, TH_ETOOL));
    CU_ASSERT(r.err && r.err->via.array.size == 2 &&
              str_has(&r.err->via.array.ptr[1],
                      "the content passes 196608 bytes"));
    rpc_res_free(&r);
    CU_ASSERT_EQUAL(rpc_log_count(&s, "declared a frame of"), 1);
    CU_ASSERT_EQUAL(rpc_log_count(&s, "died (a frame of"), 1);
    still_serves(c);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* {"blob": n bytes of 'a'} as msgpack (str32), into *out (malloc). */
static size_t blob_args(size_t n, uint8_t **out)
{
    size_t k = 1 + 5 + 5 + n;
    uint8_t *b = malloc(k);
    *out = b;
    if (!b)
        return 0;
    memcpy(b, "\x81\xa4" "blob\xdb", 7);
    b[7] = (uint8_t)(n >> 24);
    b[8] = (uint8_t)(n >> 16);
    b[9] = (uint8_t)(n >> 8);
    b[10] = (uint8_t)n;
    memset(b + 11, 'a', n);
    return k;
}

/* One call of cap_args with a blob of n bytes. */
static int call_blob(th_session *s, size_t n, th_result_copy *r)
{
    uint8_t *args;
    size_t len = blob_args(n, &args);
    memset(r, 0, sizeof *r);
    if (!len)
        return -1;
    th_call_opts o = {.timeout_ms = 600000};
    int rc = th_call_sync(s, "cap_args", args, len, &o, NULL, NULL, NULL, r);
    free(args);
    return rc;
}

static bool out_is(const th_result_copy *r, const char *want)
{
    size_t n = r->out.len;
    if (n && r->out.data[n - 1] == '\n')
        n--;
    return n == strlen(want) && memcmp(r->out.data, want, n) == 0;
}

static void test_big_args(void)
{
    th_test_timeout(240); /* 256 MiB through the validator (valgrind) */
    char *dir = th_test_tmpdir();
    CU_ASSERT_FATAL(dir != NULL);
    th_iso_set_worker_exe(th_test_build_path("toolhost"));
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "host:\n"
             "  log_level: warn\n"
             "  state_dir: %s/state\n"
             "plugins:\n"
             "  - name: cap\n"
             "    path: %s\n"
             "    isolation: process\n"
             "%s",
             dir, th_test_build_path("fixtures/iso_cap.so"), user_line());
    th_config *cfg = NULL;
    th_host *h = NULL;
    th_error err;
    th_error_clear(&err);
    if (th_config_parse("iso_cap.yaml", dir, yaml, strlen(yaml), &cfg,
                        &err) < 0 ||
        th_host_open(cfg, &h, &err) < 0)
        fprintf(stderr, "iso_cap: %s\n", err.msg);
    CU_ASSERT_FATAL(h != NULL);
    th_principal who = {.uid = getuid(), .gid = getgid(), .trusted = true};
    th_session *s = th_session_open(h, &who, NULL, NULL);
    CU_ASSERT_FATAL(s != NULL);
    th_result_copy r;
    CU_ASSERT(call_blob(s, 100, &r) == 0 && r.ok && out_is(&r, "blob: 100"));
    th_result_copy_destroy(&r);
    /* the args alone are more than 256 MiB with their frame */
    CU_ASSERT(call_blob(s, 256u << 20, &r) == 0);
    CU_ASSERT(!r.ok && r.error == TH_ELIMIT && r.message &&
              strstr(r.message, "are more than a worker of plugin 'cap' "
                                "reads in one frame (256MiB)"));
    if (r.message && r.error != TH_ELIMIT)
        fprintf(stderr, "\n  big args: %d %s\n", r.error, r.message);
    th_result_copy_destroy(&r);
    /* the same worker serves on */
    CU_ASSERT(call_blob(s, 100, &r) == 0 && r.ok && out_is(&r, "blob: 100"));
    th_result_copy_destroy(&r);
    th_session_close(s);
    th_host_close(h);
    th_iso_set_worker_exe(NULL);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_iso_cap(void)
{
    CU_pSuite s = CU_add_suite("iso_cap", NULL, NULL);
    CU_add_test(s, "stall", test_stall);
    CU_add_test(s, "stream", test_stream);
    CU_add_test(s, "legitimate", test_legitimate);
    CU_add_test(s, "lowered", test_lowered);
    CU_add_test(s, "big_args", test_big_args);
}
