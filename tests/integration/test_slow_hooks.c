/* test_slow_hooks.c - a plugin hook that takes its time (validate_args or
 * needs_permission sleeping 1 s, fixture slow_hooks) must not stall the
 * RPC server's event loop: a second client's echo answers meanwhile, and
 * the slow call still answers once its hook returns. */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

/* Whether a thread of process `pid` is inside clock_nanosleep() or
 * nanosleep() (/proc/PID/task/TID/syscall starts with its number). */
static bool thread_sleeping(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    bool found = false;
    struct dirent *e;
    while (d && !found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char p[320], line[256];
        snprintf(p, sizeof p, "/proc/%d/task/%s/syscall", (int)pid, e->d_name);
        FILE *f = fopen(p, "r");
        long nr = -1;
        if (f && fgets(line, sizeof line, f))
            nr = strtol(line, NULL, 10);
        if (f)
            fclose(f);
        found = nr == SYS_clock_nanosleep
#ifdef SYS_nanosleep
                || nr == SYS_nanosleep
#endif
            ;
    }
    if (d)
        closedir(d);
    return found;
}

/* Waits (at most ms) until a thread of `pid` sleeps in nanosleep. */
static bool wait_thread_sleeping(pid_t pid, int64_t ms)
{
    int64_t end = rpc_now_ms() + ms;
    while (!thread_sleeping(pid)) {
        if (rpc_now_ms() >= end)
            return false;
        usleep(2000);
    }
    return true;
}

static void slow_hook_does_not_stall(const char *tool)
{
    rpc_srv s;
    char plugins[512];
    snprintf(plugins, sizeof plugins,
             "  - name: slow_hooks\n    path: %s/fixtures/slow_hooks.so\n",
             TH_BUILD_DIR);
    rpc_opts o = {.plugins_extra = plugins,
                  .public_extra = "  - name: slow\n"
                                  "    tools: [slow_validate, slow_permission]\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rpc_raw a, b;
    CU_ASSERT_FATAL(rpc_raw_open(&a, &s) == 0);
    CU_ASSERT_FATAL(rpc_raw_open(&b, &s) == 0);

    char req[128];
    /* the hook's sleep far longer than the echo's bound (both scaled) */
    snprintf(req, sizeof req, "[\"%s\", {\"ms\": %u}]", tool,
             th_test_ms(1000));
    int64_t t0 = rpc_now_ms();
    rpc_raw_request(&a, 1, "tools.call", req);
    /* the hook sleeps now: a thread of the server is in nanosleep (an
     * event seen in /proc, not a sleep of ours) */
    CU_ASSERT(wait_thread_sleeping(s.pid, rpc_wait_ms()));

    int64_t t1 = rpc_now_ms();
    rpc_raw_request(&b, 7, "tools.call", "[\"echo\", {\"text\": \"hi\"}]");
    const msgpack_object *m = rpc_raw_response(&b, 7, rpc_wait_ms());
    int64_t echo_ms = rpc_now_ms() - t1;
    CU_ASSERT(m && m->via.array.ptr[2].type == MSGPACK_OBJECT_NIL &&
              rpc_ok(&m->via.array.ptr[3]) &&
              rpc_stdout_is(&m->via.array.ptr[3], "hi"));
    CU_ASSERT(echo_ms < th_test_ms(500));

    m = rpc_raw_response(&a, 1, rpc_wait_ms());
    int64_t slow_ms = rpc_now_ms() - t0;
    CU_ASSERT(m && m->via.array.ptr[2].type == MSGPACK_OBJECT_NIL &&
              rpc_ok(&m->via.array.ptr[3]) &&
              rpc_stdout_is(&m->via.array.ptr[3], tool));
    CU_ASSERT(slow_ms >= 900);
    if (getenv("TH_TEST_VERBOSE"))
        fprintf(stderr, "\n%s: echo answered in %lld ms while the hook slept; "
                        "the slow call in %lld ms\n",
                tool, (long long)echo_ms, (long long)slow_ms);
    rpc_raw_close(&a);
    rpc_raw_close(&b);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void test_slow_validate_args(void)
{
    slow_hook_does_not_stall("slow_validate");
}

static void test_slow_needs_permission(void)
{
    slow_hook_does_not_stall("slow_permission");
}

/* Bit sig of the process's ignored signals (/proc/PID/status SigIgn). */
static bool sig_ignored(pid_t pid, int sig)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    bool ign = false;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "SigIgn:", 7) == 0)
            ign = (strtoull(line + 7, NULL, 16) >> (sig - 1)) & 1;
    if (f)
        fclose(f);
    return ign;
}

/* A SIGHUP while the host still starts (a plugin's init takes 1.5 s) does
 * not kill it: it serves, and SIGTERM ends it with status 0. */
static void test_sighup_while_starting(void)
{
    rpc_srv s;
    char plugins[512];
    snprintf(plugins, sizeof plugins,
             "  - name: check_slow_init\n"
             "    path: %s/fixtures/check_slow_init.so\n",
             TH_BUILD_DIR);
    rpc_opts o = {.plugins_extra = plugins, .no_wait = true};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    /* once the config is read, SIGHUP is ignored until the reloader
     * takes it: send it then, while init() sleeps */
    bool ign = false;
    int64_t end0 = rpc_now_ms() + rpc_wait_ms();
    while (!ign && rpc_now_ms() < end0) {
        ign = sig_ignored(s.pid, SIGHUP);
        if (!ign)
            usleep(2000);
    }
    CU_ASSERT(ign);
    kill(s.pid, SIGHUP);
    rpc_raw a;
    bool up = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!up && rpc_now_ms() < end) {
        up = rpc_raw_open(&a, &s) == 0;
        if (!up)
            usleep(50 * 1000);
    }
    CU_ASSERT_FATAL(up);
    rpc_raw_request(&a, 1, "tools.call", "[\"echo\", {\"text\": \"up\"}]");
    const msgpack_object *m = rpc_raw_response(&a, 1, rpc_wait_ms());
    CU_ASSERT(m && rpc_ok(&m->via.array.ptr[3]) &&
              rpc_stdout_is(&m->via.array.ptr[3], "up"));
    rpc_raw_close(&a);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

void th_suite_slow_hooks(void)
{
    CU_pSuite s = CU_add_suite("slow_hooks", NULL, NULL);
    CU_add_test(s, "slow_validate_args", test_slow_validate_args);
    CU_add_test(s, "slow_needs_permission", test_slow_needs_permission);
    CU_add_test(s, "sighup_while_starting", test_sighup_while_starting);
}
