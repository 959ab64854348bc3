/* test_unload.c - a plugin thread still running the plugin's code after
 * fini() (tests/fixtures/detached_a.c: a detached thread that completes
 * its call, sleeps, then runs a few ms of the plugin's code) across a hot
 * reload of the real `toolhost serve`: the old generation's object stays
 * mapped until the thread has left it (host/core/plugins/dl_guard.c), the host
 * does not crash, and the object is unloaded afterwards. */
#include <CUnit/CUnit.h>
#include <sys/stat.h>

#include "integration/test_rpc_harness.h"

static void put_file(const char *src, const char *dst)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.new", dst);
    FILE *f = fopen(src, "rb"), *g = fopen(tmp, "wb");
    CU_ASSERT_FATAL(f && g);
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        CU_ASSERT_FATAL(fwrite(buf, 1, n, g) == n);
    fclose(f);
    fclose(g);
    chmod(tmp, 0755);
    CU_ASSERT_FATAL(rename(tmp, dst) == 0);
}

static bool file_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

/* Waits up to ms for `needle` in the file (the server log: quietly). */
static bool wait_file_has(const char *path, const char *needle, int ms)
{
    int64_t end = rpc_now_ms() + ms;
    while (!file_has(path, needle)) {
        if (rpc_now_ms() > end)
            return false;
        usleep(10000);
    }
    return true;
}

static bool go(th_rpc_client *c, const char *want, int sleep_ms)
{
    char p[128];
    snprintf(p, sizeof p, "[\"dt_go\", {\"sleep_ms\": %d}]", sleep_ms);
    rpc_res r;
    bool ok = rpc_call(c, "tools.call", p, &r) == 0 && r.res &&
              rpc_stdout_is(r.res, want);
    rpc_res_free(&r);
    return ok;
}

static bool reload_ok(th_rpc_client *c)
{
    rpc_res r;
    bool ok = rpc_call(c, "host.reload", "[]", &r) == 0 && r.res &&
              rpc_ok(r.res);
    rpc_res_free(&r);
    return ok;
}

static void test_thread_inside_at_reload(void)
{
    /* valgrind runs the guest's threads on registers of its own: the host
     * cannot look at them and keeps every such object mapped
     * (dl_guard.c), so "unloaded later" never comes. */
    if (rpc_valgrind())
        TH_SKIP("under valgrind the host cannot see a thread's registers");
    char *dir = th_test_tmpdir();
    char so[1024], marker[1100], plugins[2600];
    snprintf(so, sizeof so, "%s/dt.so", dir);
    snprintf(marker, sizeof marker, "%s/marker", dir);
    put_file(th_test_build_path("fixtures/detached_a.so"), so);
    snprintf(plugins, sizeof plugins,
             "  - name: dt\n"
             "    path: %s\n"
             "    config:\n"
             "      marker: %s\n",
             so, marker);
    rpc_opts o = {.plugins_extra = plugins,
                  .public_extra = "  - name: dt\n    tools: [dt_go]\n"};
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(rpc_srv_start(&s, &o), 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);

    /* The call ends at once; its thread sleeps 400 ms inside the plugin. */
    CU_ASSERT(go(c, "A", 400));
    put_file(th_test_build_path("fixtures/detached_b.so"), so);
    CU_ASSERT(reload_ok(c));
    /* Generation 1's last call has ended: it is closed (fini) at once,
     * while its thread still sleeps in its code: not unmapped. */
    CU_ASSERT(wait_file_has(s.log, "is still inside its code after fini()",
                            rpc_wait_ms()));
    CU_ASSERT(go(c, "B", 0));
    /* The thread wakes, runs its few ms of generation 1's code, ends; then
     * the object goes. */
    CU_ASSERT(wait_file_has(marker, "done A", rpc_wait_ms()));
    CU_ASSERT(wait_file_has(s.log, "no thread is inside its code any more",
                            rpc_wait_ms()));
    CU_ASSERT(rpc_alive(&s));

    /* The same again with the thread of generation 2, and a reload back
     * to A while it sleeps; then ten quick rounds. */
    for (int i = 0; i < 10; i++) {
        bool a = i % 2 == 1;
        CU_ASSERT(go(c, a ? "A" : "B", i == 0 ? 300 : 20 + 10 * i));
        put_file(th_test_build_path(a ? "fixtures/detached_b.so"
                                      : "fixtures/detached_a.so"),
                 so);
        CU_ASSERT(reload_ok(c));
    }
    CU_ASSERT(go(c, "B", 0)); /* the 10th reload went back to B */
    CU_ASSERT(wait_file_has(marker, "done B", rpc_wait_ms()));
    /* every thread woke and left: each deferred unload has its "no
     * thread is inside" line (the event, not a 500 ms sleep) */
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    for (;;) {
        int d = rpc_log_count(&s, "its object ("),
            u = rpc_log_count(&s, "no thread is inside its code any");
        if ((d >= 1 && u == d) || rpc_now_ms() >= end)
            break;
        usleep(10000);
    }
    CU_ASSERT(rpc_alive(&s));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    /* The cost: the check at each close (debug lines), the mapped size
     * kept while a thread is inside (warn lines). */
    FILE *f = fopen(s.log, "r");
    char line[1024];
    long n = 0, sum = 0, max = 0, kib = 0, deferred = 0, unloaded = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "(checked in ");
        long us, k;
        if (p && sscanf(p, "(checked in %ld us)", &us) == 1) {
            n++;
            sum += us;
            max = us > max ? us : max;
        }
        p = strstr(line, "its object (");
        if (p && sscanf(p, "its object (%ld KiB)", &k) == 1) {
            deferred++;
            kib = k;
        }
        unloaded += strstr(line, "no thread is inside its code any") != NULL;
    }
    if (f)
        fclose(f);
    fprintf(stderr,
            "\nunload: %ld closes checked at once (mean %ld us, max %ld us); "
            "%ld deferred (%ld KiB mapped each), %ld unloaded later\n",
            n, n ? sum / n : 0, max, deferred, kib, unloaded);
    CU_ASSERT(deferred >= 1);
    CU_ASSERT_EQUAL(unloaded, deferred);
    /* a deferred unload is dl_guard's, not "cannot be unloaded" */
    CU_ASSERT(!file_has(s.log, "cannot be unloaded (nodelete"));
    CU_ASSERT(!file_has(s.log, "AddressSanitizer"));
    CU_ASSERT(!file_has(s.log, "ThreadSanitizer"));
    rpc_srv_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_unload(void)
{
    CU_pSuite s = CU_add_suite("unload", NULL, NULL);
    CU_add_test(s, "thread_inside_at_reload", test_thread_inside_at_reload);
}
