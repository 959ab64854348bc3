/* test_oom.c - allocation failures in the real `toolhost serve`: the
 * failure is injected by the LD_PRELOAD shim tests/oom/failmalloc.c
 * (built by tests/oom/oom.mk), aimed at one place with its
 * FAILMALLOC_ONLY / FAILMALLOC_IN / FAILMALLOC_ARM_SIGNAL knobs; the host
 * must end in a clean error or go on serving, never abort, hang or stop
 * answering.  Also the fd limit below which serve refuses to start.
 * The sweep over every allocation point is tests/oom/run-oom. */
#include <CUnit/CUnit.h>

#include "test_rpc_harness.h"

static const char *shim_path(void)
{
    return th_test_build_path("tests/oom/failmalloc.so");
}

/* Whether the shim can run here: not under valgrind or a sanitizer (they
 * bring their own allocator); the reason in *why. */
static bool shim_usable(const char **why)
{
    if (rpc_valgrind()) {
        *why = "valgrind replaces the allocator the shim wraps";
        return false;
    }
    if (TH_SANITIZER[0]) {
        *why = "a sanitizer build brings its own allocator";
        return false;
    }
    return true;
}

/* The shim's variables for the next server started (the test process
 * itself never loads the shim: LD_PRELOAD takes effect at exec), given as
 * "NAME=VALUE" strings, NULL-terminated; oom_env_clear() removes them. */
static const char *const oom_vars[] = {
    "LD_PRELOAD", "FAILMALLOC_PROG", "FAILMALLOC_NTH", "FAILMALLOC_FROM",
    "FAILMALLOC_ONLY", "FAILMALLOC_IN", "FAILMALLOC_ARM_SIGNAL",
    "FAILMALLOC_FIRE", "FAILMALLOC_REPORT", NULL};

static void oom_env_clear(void)
{
    for (int i = 0; oom_vars[i]; i++)
        unsetenv(oom_vars[i]);
}

static void oom_env(const char *fire, const char *const kv[])
{
    oom_env_clear();
    CU_ASSERT_FATAL(access(shim_path(), R_OK) == 0);
    setenv("LD_PRELOAD", shim_path(), 1);
    setenv("FAILMALLOC_PROG", "toolhost", 1);
    if (fire)
        setenv("FAILMALLOC_FIRE", fire, 1);
    for (int i = 0; kv[i]; i++) {
        char name[64];
        const char *eq = strchr(kv[i], '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - kv[i]), kv[i]);
        setenv(name, eq + 1, 1);
    }
}

/* Waits until file `path` holds `needle` (the shim writes it). */
static bool file_wait(const char *path, const char *needle, int ms)
{
    int64_t end = rpc_now_ms() + ms;
    for (;;) {
        char *t = th_test_read_file(path, NULL);
        bool found = t && strstr(t, needle);
        free(t);
        if (found)
            return true;
        if (rpc_now_ms() >= end)
            return false;
        usleep(5000);
    }
}

/* host.ping on a fresh connection is answered. */
static bool fresh_client_answered(rpc_srv *s)
{
    rpc_raw w;
    if (rpc_raw_open(&w, s) != 0)
        return false;
    rpc_raw_request(&w, 1, "host.ping", "[]");
    const msgpack_object *m = rpc_raw_response(&w, 1, (int)th_test_ms(10000));
    bool ok = m && th_rpc_obj_streq(&m->via.array.ptr[3], "pong");
    rpc_raw_close(&w);
    return ok;
}

/* The first allocation of a new connection (conn_new's calloc) fails.
 * That client's connection is closed, and the socket front goes on: a
 * fresh client is answered.  Before the fix libuv, which had accepted the
 * client, stopped polling the listener until uv_accept(): that client and
 * every later one waited forever. */
static void test_accept_fails(void)
{
    const char *why;
    if (!shim_usable(&why))
        TH_SKIP(why);
    char *dir = th_test_tmpdir();
    char fire[512];
    snprintf(fire, sizeof fire, "%s/fire", dir);
    static const char *const kv[] = {
        "FAILMALLOC_ARM_SIGNAL=12", "FAILMALLOC_NTH=1",
        "FAILMALLOC_ONLY=calloc", "FAILMALLOC_IN=uv_run", NULL};
    oom_env(fire, kv);
    rpc_srv s;
    int rc = rpc_srv_start(&s, NULL);
    oom_env_clear();
    CU_ASSERT_FATAL(rc == 0);
    /* Every connection so far (the harness's probe) is accepted once a
     * later one is answered. */
    CU_ASSERT_FATAL(fresh_client_answered(&s));
    /* Armed: the next calloc on the loop thread (uv_run on the stack)
     * fails, and on an idle loop that is the new connection's. */
    CU_ASSERT_FATAL(kill(s.pid, SIGUSR2) == 0);
    CU_ASSERT_FATAL(file_wait(fire, "armed", (int)th_test_ms(10000)));
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    CU_ASSERT(rpc_raw_eof(&w, (int)th_test_ms(10000)));
    rpc_raw_close(&w);
    CU_ASSERT(file_wait(fire, "fired=1", (int)th_test_ms(1000)));
    CU_ASSERT(rpc_log_has(&s, "out of memory: connection dropped"));
    CU_ASSERT(fresh_client_answered(&s));
    CU_ASSERT(fresh_client_answered(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_oom(void)
{
    CU_pSuite s = CU_add_suite("oom", NULL, NULL);
    CU_add_test(s, "accept_fails", test_accept_fails);
}
