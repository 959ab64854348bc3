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

/* Whether the server process has not ended (reaps it when it has). */
static bool running(rpc_srv *s)
{
    if (s->reaped)
        return false;
    int st;
    if (waitpid(s->pid, &st, WNOHANG) != s->pid)
        return true;
    s->reaped = true;
    s->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return false;
}

/* Waits until w is the server's only connection (host.stats on w). */
static bool only_connection(rpc_raw *w)
{
    int64_t end = rpc_now_ms() + th_test_ms(10000);
    for (uint64_t id = 100; rpc_now_ms() < end; id++) {
        rpc_raw_request(w, id, "host.stats", "[]");
        const msgpack_object *m = rpc_raw_response(w, id, th_test_ms(10000));
        if (!m)
            return false;
        const msgpack_object *cur = th_rpc_map_get(
            th_rpc_map_get(&m->via.array.ptr[3], "connections"), "current");
        if (cur && cur->via.u64 == 1)
            return true;
        usleep(5000);
    }
    return false;
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
    /* Once w0 is the only connection, every earlier one (the harness's
     * probe) is closed and freed: nothing of theirs allocates any more.
     * w0 stays open meanwhile, so that no close is in flight either. */
    rpc_raw w0;
    CU_ASSERT_FATAL(rpc_raw_open(&w0, &s) == 0);
    CU_ASSERT_FATAL(only_connection(&w0));
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
    rpc_raw_close(&w0);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

/* Starts serve with the shim failing allocations made inside libuv's
 * `sym` (FAILMALLOC_IN) as `how` says ("FAILMALLOC_NTH=2"); the host
 * must not abort: it serves (the failure absorbed) or ends with a
 * message.  libuv abort()s when its watcher array cannot grow
 * (uv__io_start, from uv_loop_init and the first uv_signal_init). */
static void start_with_libuv_failing(const char *sym, const char *how)
{
    char *dir = th_test_tmpdir();
    char fire[512], in[96];
    snprintf(fire, sizeof fire, "%s/fire", dir);
    snprintf(in, sizeof in, "FAILMALLOC_IN=%s", sym);
    const char *const kv[] = {in, how, NULL};
    oom_env(fire, kv);
    rpc_srv s;
    rpc_opts o = {.no_wait = true};
    int rc = rpc_srv_start(&s, &o);
    oom_env_clear();
    CU_ASSERT_FATAL(rc == 0);
    /* up (the socket answers) or ended */
    int64_t end = rpc_now_ms() + th_test_ms(10000);
    bool up = false;
    while (!up && running(&s) && rpc_now_ms() < end) {
        up = rpc_sock_answers(s.sock);
        if (!up)
            usleep(5000);
    }
    char *f = th_test_read_file(fire, NULL);
    CU_ASSERT(f && strstr(f, "fired="));
    if (!f || !strstr(f, "fired="))
        fprintf(stderr, "\nno failure was injected in %s\n", sym);
    free(f);
    if (up) {
        CU_ASSERT(fresh_client_answered(&s));
        CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    } else {
        int st = rpc_srv_wait(&s);
        CU_ASSERT(st > 0 && st < 128); /* an error exit, not a signal */
        if (!(st > 0 && st < 128))
            fprintf(stderr, "\n%s, %s: serve ended with status %d\n", sym,
                    how, st);
        CU_ASSERT(rpc_log_count(&s, "serve:") > 0);
    }
    rpc_srv_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

static void test_start_libuv_fails(void)
{
    const char *why;
    if (!shim_usable(&why))
        TH_SKIP(why);
    start_with_libuv_failing("uv_loop_init", "FAILMALLOC_NTH=1");
    start_with_libuv_failing("uv_loop_init", "FAILMALLOC_NTH=2");
    start_with_libuv_failing("uv_signal_init", "FAILMALLOC_NTH=1");
    start_with_libuv_failing("uv_signal_init", "FAILMALLOC_FROM=1");
}

/* A session that ends needs a thread to close on (th_session_close may
 * wait for its calls).  With every allocation inside pthread_create()
 * failing from a signal on, a client calls and leaves: the host must not
 * abort (libuv's thread pool, started lazily at the first disconnect,
 * abort()ed when it could not make its threads) and a fresh client is
 * answered. */
static void test_disconnect_no_thread(void)
{
    const char *why;
    if (!shim_usable(&why))
        TH_SKIP(why);
    char *dir = th_test_tmpdir();
    char fire[512];
    snprintf(fire, sizeof fire, "%s/fire", dir);
    static const char *const kv[] = {"FAILMALLOC_ARM_SIGNAL=12",
                                     "FAILMALLOC_FROM=1",
                                     "FAILMALLOC_IN=pthread_create", NULL};
    oom_env(fire, kv);
    rpc_srv s;
    /* No connection before the failures are armed: the first session to
     * close is one of the clients below. */
    rpc_opts o = {.no_wait = true};
    int rc = rpc_srv_start(&s, &o);
    oom_env_clear();
    CU_ASSERT_FATAL(rc == 0);
    CU_ASSERT_FATAL(rpc_log_wait(&s, "listening on", th_test_ms(10000)));
    CU_ASSERT_FATAL(kill(s.pid, SIGUSR2) == 0);
    CU_ASSERT_FATAL(file_wait(fire, "armed", (int)th_test_ms(10000)));
    for (int i = 0; i < 3; i++) {
        rpc_raw w;
        CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
        rpc_raw_request(&w, 1, "tools.call", "[\"echo\", {\"text\": \"x\"}]");
        CU_ASSERT(rpc_raw_response(&w, 1, (int)th_test_ms(10000)) != NULL);
        rpc_raw_close(&w);
    }
    CU_ASSERT(fresh_client_answered(&s));
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

/* ulimit -n 32: no room for a single connection next to the fds the host
 * holds and the reserve it keeps: serve refuses to start and says so
 * (it used to start and refuse every client). */
static void test_fd_limit_too_low(void)
{
    if (rpc_valgrind())
        TH_SKIP("valgrind keeps fds of its own");
    rpc_srv s;
    rpc_opts o = {.nofile = 32, .no_wait = true};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    int st = rpc_srv_wait(&s);
    CU_ASSERT(st > 0 && st < 128);
    CU_ASSERT(rpc_log_has(&s, "the fd limit (ulimit -n) is 32"));
    CU_ASSERT(!rpc_sock_answers(s.sock));
    rpc_srv_free(&s);
}

/* ulimit -n 64: serve runs, answers a few clients and refuses the rest
 * with a reason and a log line. */
static void test_fd_limit_small(void)
{
    if (rpc_valgrind())
        TH_SKIP("valgrind keeps fds of its own");
    rpc_srv s;
    rpc_opts o = {.nofile = 64};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    enum { N = 40 };
    rpc_raw w[N];
    int served = 0, refused = 0;
    for (int i = 0; i < N; i++) {
        CU_ASSERT_FATAL(rpc_raw_open(&w[i], &s) == 0);
        rpc_raw_request(&w[i], 1, "host.ping", "[]");
        const msgpack_object *m =
            rpc_raw_response(&w[i], 1, (int)th_test_ms(10000));
        if (m && th_rpc_obj_streq(&m->via.array.ptr[3], "pong"))
            served++;
        else
            refused++;
    }
    CU_ASSERT(served >= 8);
    CU_ASSERT(refused >= 1);
    CU_ASSERT(rpc_log_has(&s, "refused"));
    for (int i = 0; i < N; i++)
        rpc_raw_close(&w[i]);
    /* once the host has seen those close, a client is served again */
    int64_t end = rpc_now_ms() + th_test_ms(10000);
    bool again = false;
    while (!again && rpc_now_ms() < end)
        if (!(again = fresh_client_answered(&s)))
            usleep(10000);
    CU_ASSERT(again);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* The JSON cut of a structured result over its limit (out.c,
 * finish_json) reads the head with yajl, which uses what its allocator
 * returns without a check.  Here the first allocation made inside
 * yajl_parse fails: the call ends (an answer, not a crash) and the host
 * goes on serving.  Before the fix serve died of SIGSEGV in yajl. */
static void test_json_cut_yajl_fails(void)
{
    const char *why;
    if (!shim_usable(&why))
        TH_SKIP(why);
    char *dir = th_test_tmpdir();
    char fire[512];
    snprintf(fire, sizeof fire, "%s/fire", dir);
    static const char *const kv[] = {"FAILMALLOC_IN=yajl_parse",
                                     "FAILMALLOC_NTH=1", NULL};
    oom_env(fire, kv);
    rpc_srv s;
    rpc_opts o = {.config = "host:\n"
                            "  log_level: debug\n"
                            "plugins:\n"
                            "  - name: flood\n"
                            "    path: @BUILD@/fixtures/flood.so\n"
                            "toolsets:\n"
                            "  - name: public\n"
                            "    tools: [\"*\"]\n"};
    int rc = rpc_srv_start(&s, &o);
    oom_env_clear();
    CU_ASSERT_FATAL(rc == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    /* 200,000 bytes of JSON against structured's 60,000 */
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.call",
                       "[\"flood_json\", {\"size\": 200000, "
                       "\"pattern\": \"json\"}]",
                       &r) == 0);
    /* the call failed with out of memory: a tool error */
    CU_ASSERT(r.res && rpc_tool_error_is(r.res, "internal"));
    rpc_res_free(&r);
    CU_ASSERT(file_wait(fire, "fired=1", (int)th_test_ms(1000)));
    CU_ASSERT(running(&s));
    CU_ASSERT(fresh_client_answered(&s));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_oom(void)
{
    CU_pSuite s = CU_add_suite("oom", NULL, NULL);
    CU_add_test(s, "accept_fails", test_accept_fails);
    CU_add_test(s, "start_libuv_fails", test_start_libuv_fails);
    CU_add_test(s, "disconnect_no_thread", test_disconnect_no_thread);
    CU_add_test(s, "fd_limit_too_low", test_fd_limit_too_low);
    CU_add_test(s, "fd_limit_small", test_fd_limit_small);
    CU_add_test(s, "json_cut_yajl_fails", test_json_cut_yajl_fails);
}
