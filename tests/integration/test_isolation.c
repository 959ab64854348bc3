/* test_isolation.c - plugins with `isolation: process` against the real
 * `toolhost serve`: every way the iso_crash fixture dies fails only its
 * own call with the right words while another client keeps getting echo
 * answers; a crash loop marks the plugin unhealthy; the CLI names the
 * signal; reloads of an isolated plugin under load lose no call; a soak
 * of crashing and good calls from 8 clients (issue 14's at full size with
 * `make soak`) leaves the host alive, every good call answered, its RSS
 * flat and no worker or zombie behind. */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "integration/test_rpc_harness.h"

/* A sanitizer catches SIGSEGV itself and exits 1: the words differ. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SEGV_WORDS "plugin_crashed ("
#define CALL_TIMEOUT "4s" /* a sanitized exit() is slow */
#else
#define CALL_TIMEOUT "1s"
#define SEGV_WORDS "plugin_crashed (SIGSEGV)"
#endif

#define ISO_TOOLS                                                             \
    "[iso_ok, segv_tool, abort_tool, exit_tool, stack_tool, spin_tool, "    \
    "leak_tool, fds_tool, fork_tool, burn_tool, net_tool"

/* A server whose config has the crash fixture isolated (2 workers, small
 * limits: `mem` and `procs` are process_limits.memory and .processes)
 * and, with `fx`, the reload fixture isolated too. */
static int iso_start_lim(rpc_srv *s, const char *fx_so, const char *fx_dir,
                         const char *cpu, const char *mem, const char *procs,
                         const char *extra, const char *timeout)
{
    char plugins[2048], pub[512];
    snprintf(plugins, sizeof plugins,
             "  - name: crash\n"
             "    path: %s/fixtures/iso_crash.so\n"
             "    isolation: process\n"
             "    workers: 2\n"
             "    kill_grace: 300ms\n"
             "%s"
             "    process_limits:\n"
             "      memory: %s\n"
             "      open_files: 64\n"
             "      processes: %s\n"
             "      cpu_seconds: %s\n"
             "    network: false\n"
             "%s"
             "%s%s%s%s%s",
             TH_BUILD_DIR, geteuid() == 0 ? "    user: nobody\n" : "", mem,
             procs, cpu,
             extra ? extra : "",
             fx_so ? "  - name: fx\n    path: " : "", fx_so ? fx_so : "",
             fx_so ? (geteuid() == 0
                          ? "\n    isolation: process\n    workers: 2\n"
                            "    user: auto\n    config:\n      marker: "
                          : "\n    isolation: process\n    workers: 2\n"
                            "    config:\n      marker: ")
                   : "",
             fx_so ? fx_dir : "", fx_so ? "/marker\n" : "");
    snprintf(pub, sizeof pub,
             "  - name: iso\n"
             "    tools: " ISO_TOOLS "%s]\n"
             "    timeout: %s\n"
             "    tool_overrides:\n"
             "      burn_tool: {timeout: 20s}\n"
             /* touching 256 MiB page by page takes over 1 s on a
              * loaded machine (two suites at a time and other builds):
              * the limit, not the timeout, must end it */
             "      leak_tool: {timeout: 20s}\n",
             fx_so ? ", rl_answer" : "", timeout);
    rpc_opts o = {.plugins_extra = plugins, .public_extra = pub,
                  .max_frame = "1MiB"};
    return rpc_srv_start(s, &o);
}

static int iso_start_cpu(rpc_srv *s, const char *fx_so, const char *fx_dir,
                         const char *cpu, const char *extra)
{
    return iso_start_lim(s, fx_so, fx_dir, cpu, "256MiB", "24", extra,
                         CALL_TIMEOUT);
}

static int iso_start(rpc_srv *s, const char *fx_so, const char *fx_dir)
{
    return iso_start_cpu(s, fx_so, fx_dir, "20", NULL);
}

/* For the tests under load (8 clients, several calls at once on one
 * worker).  The worker runs each concurrent call on a thread of its own,
 * and `memory` is RLIMIT_AS: every call thread reserves an 8 MiB stack and
 * its first malloc() a glibc arena of up to 64 MiB of address space, so at
 * 256MiB a worker with 3-4 calls at once cannot start another thread and
 * the call fails ("cannot start a thread for this call").  How many calls
 * meet on one worker depends on timing: on a loaded machine (a full test
 * run, other builds) more do.  `processes` (RLIMIT_NPROC) counts every
 * thread of the workers' user on the machine, other test runs' workers
 * too.  Under load, give the workers room; each_crash keeps the small
 * limits to see them bite.  And time: 8 clients' calls queue behind the
 * crashes' worker restarts, and on a loaded machine (two suites at a time
 * in `make test`, other builds) a good call can wait past 1 s; a call that
 * is lost still shows, as a timeout, 10 s later. */
static int iso_start_roomy(rpc_srv *s, const char *fx_so, const char *fx_dir)
{
    return iso_start_lim(s, fx_so, fx_dir, "20", "2GiB", "256", NULL, "10s");
}

static int call(th_rpc_client *c, const char *tool, const char *args,
                rpc_res *r)
{
    char p[512];
    snprintf(p, sizeof p, "[\"%s\", %s]", tool, args ? args : "{}");
    return rpc_call(c, "tools.call", p, r);
}

/* The workers' stderr is in the server log: a sanitizer report of a
 * worker (a race, a leak at its exit) shows there. */
static void no_worker_reports(rpc_srv *s)
{
    CU_ASSERT(!rpc_log_has(s, "ThreadSanitizer"));
    CU_ASSERT(!rpc_log_has(s, "LeakSanitizer"));
}

static bool str_has(const msgpack_object *o, const char *needle)
{
    const char *p;
    size_t n;
    if (!o || !th_rpc_obj_str(o, &p, &n))
        return false;
    char buf[2048];
    snprintf(buf, sizeof buf, "%.*s", (int)(n < 2000 ? n : 2000), p);
    return strstr(buf, needle) != NULL;
}

static bool err_has(const msgpack_object *res, const char *code,
                    const char *needle)
{
    const msgpack_object *e = th_rpc_map_get(res, "error");
    bool ok = rpc_tool_error_is(res, code) &&
              str_has(th_rpc_map_get(e, "message"), needle);
    if (!ok) {
        const char *p = "";
        size_t n = 0;
        const msgpack_object *m = th_rpc_map_get(e, "message");
        if (m)
            th_rpc_obj_str(m, &p, &n);
        fprintf(stderr, "\nwanted %s/%s, got '%.*s'\n", code, needle, (int)n,
                p);
    }
    return ok;
}

/* ---- a client that keeps calling echo ------------------------------------------------ */

typedef struct pinger {
    rpc_srv *s;
    atomic_int stop;
    atomic_int ok, bad;
} pinger;

static void *ping_main(void *arg)
{
    pinger *p = arg;
    th_rpc_client *c = rpc_connect(p->s);
    if (!c) {
        atomic_fetch_add(&p->bad, 1);
        return NULL;
    }
    while (!atomic_load(&p->stop)) {
        rpc_res r;
        if (call(c, "echo", "{\"text\": \"ping\"}", &r) == 0 && r.res &&
            rpc_stdout_is(r.res, "ping"))
            atomic_fetch_add(&p->ok, 1);
        else
            atomic_fetch_add(&p->bad, 1);
        rpc_res_free(&r);
    }
    th_rpc_client_close(c);
    return NULL;
}

/* ---- each way to die ------------------------------------------------------------------ */

static void test_each_crash(void)
{
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(iso_start(&s, NULL, NULL), 0);
    pinger pg = {.s = &s};
    pthread_t th;
    pthread_create(&th, NULL, ping_main, &pg);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    rpc_res r;

    CU_ASSERT(call(c, "iso_ok", "{\"text\": \"hi\"}", &r) == 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "hi"));
    /* set_meta crossed the process boundary. */
    const msgpack_object *iso =
        r.res ? th_rpc_map_get(th_rpc_map_get(r.res, "meta"), "iso") : NULL;
    CU_ASSERT(iso && iso->type == MSGPACK_OBJECT_BOOLEAN && iso->via.boolean);
    rpc_res_free(&r);

    static const struct {
        const char *tool, *code, *words;
    } cases[] = {
        {"segv_tool", "plugin_crashed", SEGV_WORDS},
        {"abort_tool", "plugin_crashed", "(SIGABRT)"},
        {"exit_tool", "plugin_crashed", "(exit 0)"},
        {"stack_tool", "plugin_crashed", SEGV_WORDS},
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
        /* (no memory limit in a sanitizer build: see iso_worker.c) */
        {"leak_tool", "plugin_crashed", "memory limit 256MiB exceeded"},
#endif
        {"spin_tool", "timeout", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CU_ASSERT(call(c, cases[i].tool, NULL, &r) == 0);
        CU_ASSERT(r.res && err_has(r.res, cases[i].code, cases[i].words));
        rpc_res_free(&r);
        /* The plugin serves again at once. */
        CU_ASSERT(call(c, "iso_ok", "{\"text\": \"again\"}", &r) == 0);
        CU_ASSERT(r.res && rpc_stdout_is(r.res, "again"));
        rpc_res_free(&r);
    }
    /* Limits that a tool meets without dying: its own error. */
    CU_ASSERT(call(c, "fds_tool", NULL, &r) == 0);
    CU_ASSERT(r.res && !rpc_ok(r.res) &&
              str_has(th_rpc_map_get(r.res, "stderr"), "Too many open files"));
    rpc_res_free(&r);
    CU_ASSERT(call(c, "fork_tool", NULL, &r) == 0);
    CU_ASSERT(r.res && !rpc_ok(r.res) &&
              str_has(th_rpc_map_get(r.res, "stderr"),
                      "Resource temporarily unavailable"));
    rpc_res_free(&r);

    /* network: false: the seccomp filter refuses AF_INET. */
    CU_ASSERT(call(c, "net_tool", NULL, &r) == 0);
    CU_ASSERT(r.res && !rpc_ok(r.res) &&
              str_has(th_rpc_map_get(r.res, "stderr"),
                      "socket: Permission denied"));
    rpc_res_free(&r);

    /* The worker's stderr and log() reach the host's log under the
     * plugin's name; its stdout goes nowhere. */
    CU_ASSERT(call(c, "iso_ok", "{\"text\": \"log\"}", &r) == 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "log"));
    rpc_res_free(&r);

    /* The acceptance line: the CLI on the same config names the signal
     * and exits 1 while the server goes on. */
    th_test_run run;
    CU_ASSERT_EQUAL(th_test_toolhost(&run, "call", "-c", s.cfg, "segv_tool",
                                     NULL),
                    0);
    CU_ASSERT_EQUAL(run.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(run.err, SEGV_WORDS));
    th_test_run_free(&run);

    atomic_store(&pg.stop, 1);
    pthread_join(th, NULL);
    CU_ASSERT(atomic_load(&pg.ok) > 0);
    CU_ASSERT_EQUAL(atomic_load(&pg.bad), 0);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    CU_ASSERT(rpc_log_has(&s, "plugin crash: iso_ok was asked to log"));
    CU_ASSERT(rpc_log_has(&s, "iso_ok wrote to its stderr"));
    CU_ASSERT(!rpc_log_has(&s, "iso_ok wrote to its stdout"));
    CU_ASSERT(rpc_log_has(&s, "ignored its cancellation or deadline"));
    no_worker_reports(&s);
    rpc_srv_free(&s);
}

/* A worker past cpu_seconds dies of SIGXCPU: said as the limit. */
static void test_cpu_limit(void)
{
    rpc_srv s;
    /* One CPU second takes far longer than 1 s of wall time on a loaded
     * machine (4 busy processes on 2 cores, sanitizers): the call's own
     * timeout is long, so only the CPU limit can end the call. */
    CU_ASSERT_EQUAL_FATAL(iso_start_lim(&s, NULL, NULL, "1", "256MiB", "24",
                                        NULL, "600s"),
                          0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    rpc_res r;
    CU_ASSERT(call(c, "burn_tool", NULL, &r) == 0);
    CU_ASSERT(r.res &&
              err_has(r.res, "plugin_crashed", "cpu limit 1s exceeded"));
    rpc_res_free(&r);
    CU_ASSERT(call(c, "iso_ok", "{\"text\": \"after\"}", &r) == 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "after"));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- crash loop ------------------------------------------------------------------------- */

static void test_crash_loop_unhealthy(void)
{
    rpc_srv s;
    /* The three calls after the fifth crash must all land inside the
     * unhealthy window: long enough for a loaded machine (the window
     * scales with th_test_ms; 1.5 s was missed at load 15). */
    unsigned retry_ms = th_test_ms(5000);
    char extra[128];
    snprintf(extra, sizeof extra,
             "    crash_loop: 5\n    unhealthy_retry: %ums\n", retry_ms);
    /* A long call timeout: a crash that comes late on a loaded machine
     * must still count as a crash, not turn into a timeout. */
    CU_ASSERT_EQUAL_FATAL(iso_start_lim(&s, NULL, NULL, "20", "256MiB", "24",
                                        extra, "120s"),
                          0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    rpc_res r;
    int crashed = 0, unhealthy = 0;
    for (int i = 0; i < 8; i++) {
        int64_t t0 = rpc_now_ms();
        CU_ASSERT(call(c, "segv_tool", NULL, &r) == 0);
        if (r.res && rpc_tool_error_is(r.res, "plugin_crashed")) {
            const msgpack_object *m =
                th_rpc_map_get(th_rpc_map_get(r.res, "error"), "message");
            if (str_has(m, "unhealthy")) {
                unhealthy++;
                /* fails fast: no worker start, no wait for the timeout */
                CU_ASSERT(rpc_now_ms() - t0 < th_test_ms(5000));
            } else {
                crashed++;
            }
        }
        rpc_res_free(&r);
    }
    CU_ASSERT_EQUAL(crashed, 5);
    CU_ASSERT_EQUAL(unhealthy, 3);
    /* After unhealthy_retry one start is tried; a call that finishes makes
     * the plugin healthy again. */
    int64_t end = rpc_now_ms() + retry_ms + th_test_ms(10000);
    bool back = false;
    while (!back && rpc_now_ms() < end) {
        usleep(100000);
        CU_ASSERT(call(c, "iso_ok", "{\"text\": \"back\"}", &r) == 0);
        back = r.res && rpc_stdout_is(r.res, "back");
        rpc_res_free(&r);
    }
    CU_ASSERT(back);
    /* Other plugins do not notice. */
    CU_ASSERT(call(c, "echo", "{\"text\": \"still\"}", &r) == 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "still"));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    CU_ASSERT(rpc_log_has(&s, "plugin crash: unhealthy"));
    CU_ASSERT(rpc_log_has(&s, "plugin crash: healthy again"));
    rpc_srv_free(&s);
}

/* ---- reload under load --------------------------------------------------------------------- */

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

typedef struct loader {
    rpc_srv *s;
    atomic_int stop, calls, failed;
} loader;

static void *load_main(void *arg)
{
    loader *l = arg;
    th_rpc_client *c = rpc_connect(l->s);
    if (!c) {
        atomic_fetch_add(&l->failed, 1);
        return NULL;
    }
    while (!atomic_load(&l->stop)) {
        rpc_res r;
        if (call(c, "rl_answer", NULL, &r) == 0 && r.res && rpc_ok(r.res))
            atomic_fetch_add(&l->calls, 1);
        else
            atomic_fetch_add(&l->failed, 1);
        rpc_res_free(&r);
    }
    th_rpc_client_close(c);
    return NULL;
}

static bool reload_ok(th_rpc_client *c)
{
    rpc_res r;
    bool ok = rpc_call(c, "host.reload", "[]", &r) == 0 && r.res &&
              rpc_ok(r.res);
    rpc_res_free(&r);
    return ok;
}

static int children(pid_t pid, int *zombies);

static void test_reload_under_load(void)
{
    char *dir = th_test_tmpdir();
    char so[1024];
    snprintf(so, sizeof so, "%s/fx.so", dir);
    put_file(th_test_build_path("fixtures/reload_a.so"), so);
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(iso_start_roomy(&s, so, dir), 0);
    loader l = {.s = &s};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, load_main, &l);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    int n = rpc_scale(20), bad_reloads = 0, wrong = 0;
    for (int i = 0; i < n; i++) {
        bool b = i % 2 == 0;
        put_file(th_test_build_path(b ? "fixtures/reload_b.so"
                                      : "fixtures/reload_a.so"),
                 so);
        if (!reload_ok(c))
            bad_reloads++;
        rpc_res r;
        if (call(c, "rl_answer", NULL, &r) != 0 || !r.res ||
            !rpc_stdout_is(r.res, b ? "B" : "A"))
            wrong++;
        rpc_res_free(&r);
    }
    atomic_store(&l.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CU_ASSERT_EQUAL(bad_reloads, 0);
    CU_ASSERT_EQUAL(wrong, 0);
    CU_ASSERT_EQUAL(atomic_load(&l.failed), 0);
    CU_ASSERT(atomic_load(&l.calls) > n);
    /* The old generations' workers drained and exited: 2 for crash, 2
     * for the current fx. */
    int z = 0, kids = 0;
    int64_t end = rpc_now_ms() + th_test_ms(5000);
    while ((kids = children(s.pid, &z)) > 4 && rpc_now_ms() < end)
        usleep(20000);
    CU_ASSERT(kids <= 4);
    CU_ASSERT_EQUAL(z, 0);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

/* ---- soak ------------------------------------------------------------------------------------- */

static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

/* Children of pid (all its threads), and how many are zombies; the first
 * `cap` pids go to pids[] when given. */
static int child_pids(pid_t pid, int *zombies, pid_t *pids, int cap)
{
    char path[128];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    int n = 0;
    *zombies = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char p2[400];
        snprintf(p2, sizeof p2, "%s/%s/children", path, de->d_name);
        FILE *f = fopen(p2, "r");
        int kid;
        while (f && fscanf(f, "%d", &kid) == 1) {
            if (pids && n < cap)
                pids[n] = (pid_t)kid;
            n++;
            char p3[64], st[512];
            snprintf(p3, sizeof p3, "/proc/%d/stat", kid);
            FILE *g = fopen(p3, "r");
            if (g && fgets(st, sizeof st, g)) {
                char *rp = strrchr(st, ')');
                if (rp && rp[1] == ' ' && rp[2] == 'Z')
                    (*zombies)++;
            }
            if (g)
                fclose(g);
        }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

static int children(pid_t pid, int *zombies)
{
    return child_pids(pid, zombies, NULL, 0);
}

/* pid still runs this build's toolhost binary (a worker left behind; a
 * pid reused by another program does not count). */
static bool runs_toolhost(pid_t pid)
{
    char path[64], exe[4096], want[4096];
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, exe, sizeof exe - 1);
    if (n <= 0 || !realpath(rpc_server_bin(), want))
        return false;
    exe[n] = '\0';
    return strcmp(exe, want) == 0;
}

/* The soak of issue 14: crashing calls (segv_tool, every 11th call of a
 * client) interleaved with good ones (echo in the host, iso_ok in the
 * crashing plugin's workers) from SOAK_CLIENTS clients.  Its full size is
 * 10,000 crashing and 100,000 good calls (`make soak`, TH_SOAK_SCALE=100);
 * `make check` runs a tenth of it (the default TH_SOAK_SCALE=10). */
enum { SOAK_CLIENTS = 8, SOAK_FULL_ROUNDS = 13750 /* per client */ };

typedef struct soaker {
    rpc_srv *s;
    int rounds;
    atomic_int good, bad, crashed, wrong_crash;
    atomic_int iso_lost; /* iso_ok calls that shared a worker with a crash */
    atomic_int done;     /* calls answered so far */
    atomic_int finished; /* clients that ended */
    atomic_int shown;    /* unexpected answers printed so far */
} soaker;

/* Prints the first few unexpected answers: a count alone says nothing. */
static void soak_show(soaker *k, const char *tool, int i, int rc,
                      const rpc_res *r)
{
    if (atomic_fetch_add(&k->shown, 1) >= 5)
        return;
    char buf[1024] = "";
    if (r->res)
        msgpack_object_print_buffer(buf, sizeof buf, *r->res);
    else if (r->err)
        msgpack_object_print_buffer(buf, sizeof buf, *r->err);
    fprintf(stderr, "\nsoak: unexpected answer to %s (round %d, rc %d): %s\n",
            tool, i, rc, buf);
}

static void *soak_main(void *arg)
{
    soaker *k = arg;
    th_rpc_client *c = rpc_connect(k->s);
    if (!c) {
        atomic_fetch_add(&k->bad, 1);
        atomic_fetch_add(&k->finished, 1);
        return NULL;
    }
    for (int i = 0; i < k->rounds; i++) {
        rpc_res r;
        int rc;
        if (i % 11 == 10) {
            if ((rc = call(c, "segv_tool", NULL, &r)) == 0 && r.res &&
                rpc_tool_error_is(r.res, "plugin_crashed")) {
                atomic_fetch_add(&k->crashed, 1);
            } else {
                atomic_fetch_add(&k->wrong_crash, 1);
                soak_show(k, "segv_tool", i, rc, &r);
            }
        } else {
            char args[64], want[32];
            snprintf(want, sizeof want, "g%d", i);
            snprintf(args, sizeof args, "{\"text\": \"%s\"}", want);
            /* In-process echo must always answer; iso_ok may meet a
             * crash of its worker (then plugin_crashed, nothing else). */
            bool iso = i % 2;
            if ((rc = call(c, iso ? "iso_ok" : "echo", args, &r)) == 0 &&
                r.res && rpc_stdout_is(r.res, want)) {
                atomic_fetch_add(&k->good, 1);
            } else if (iso && r.res &&
                       rpc_tool_error_is(r.res, "plugin_crashed")) {
                atomic_fetch_add(&k->iso_lost, 1);
            } else {
                atomic_fetch_add(&k->bad, 1);
                soak_show(k, iso ? "iso_ok" : "echo", i, rc, &r);
            }
        }
        rpc_res_free(&r);
        atomic_fetch_add(&k->done, 1);
    }
    th_rpc_client_close(c);
    atomic_fetch_add(&k->finished, 1);
    return NULL;
}

/* TH_SOAK_SCALE: the soak's size in percent of issue 14's (1..1000).  By
 * default 10, and 3 in a sanitizer build: there a crashing worker's exit
 * (the sanitizer's report) takes seconds on a loaded machine and 8
 * clients' crashes queue behind each other up to the 4 s call timeout. */
static int soak_scale(void)
{
    const char *e = getenv("TH_SOAK_SCALE");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    int v = e && *e ? atoi(e) : 3;
#else
    int v = e && *e ? atoi(e) : 10;
#endif
    return v < 1 ? 1 : v > 1000 ? 1000 : v;
}

/* Runs `k` with SOAK_CLIENTS threads; samples the host's RSS every 250 ms
 * while they run: the largest sample, and the one nearest half-way. */
static void soak_run(soaker *k, long *rss_max, long *rss_half)
{
    pthread_t th[SOAK_CLIENTS];
    int started = 0;
    for (int i = 0; i < SOAK_CLIENTS; i++)
        if (pthread_create(&th[i], NULL, soak_main, k) == 0)
            started++;
    CU_ASSERT_EQUAL(started, SOAK_CLIENTS);
    int total = started * k->rounds;
    *rss_max = *rss_half = 0;
    while (atomic_load(&k->finished) < started) {
        usleep(250000);
        long kb = rss_kb(k->s->pid);
        if (kb > *rss_max)
            *rss_max = kb;
        if (!*rss_half && atomic_load(&k->done) >= total / 2)
            *rss_half = kb;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
}

static void test_soak(void)
{
    int scale = soak_scale();
    int rounds = rpc_scale(SOAK_FULL_ROUNDS * scale / 100);
    /* ~1 ms a call on a quiet machine; 6 s per 1 % leaves room for a
     * loaded one and for the sanitizers (scaled by the runner) */
    th_test_timeout(120 + 20 * (unsigned)scale); /* a watchdog, not a bound */
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(iso_start_roomy(&s, NULL, NULL), 0);
    int64_t t0 = rpc_now_ms();
    /* Warm up with every client (the host's pools, buffers and connection
     * records reach their working size), then measure. */
    soaker w = {.s = &s, .rounds = 110};
    long rss_max, rss_half;
    soak_run(&w, &rss_max, &rss_half);
    CU_ASSERT_EQUAL(atomic_load(&w.bad), 0);
    long rss0 = rss_kb(s.pid);
    int64_t t1 = rpc_now_ms();
    soaker k = {.s = &s, .rounds = rounds};
    soak_run(&k, &rss_max, &rss_half);
    long rss1 = rss_kb(s.pid);
    int64_t t2 = rpc_now_ms();
    int crashes = SOAK_CLIENTS * (rounds / 11);
    int good = SOAK_CLIENTS * rounds - crashes;
    fprintf(stderr,
            "\nsoak (TH_SOAK_SCALE=%d, %d clients): %d crashing + %d good "
            "calls in %.1f s (warm-up %.1f s): %d good answers, %d "
            "plugin_crashed for iso_ok, %d crashed, %d bad, %d wrong crash; "
            "host RSS %ld kB after warm-up, %ld kB half-way, %ld kB max, "
            "%ld kB at the end\n",
            scale, SOAK_CLIENTS, crashes, good, (double)(t2 - t1) / 1000,
            (double)(t1 - t0) / 1000, atomic_load(&k.good),
            atomic_load(&k.iso_lost), atomic_load(&k.crashed),
            atomic_load(&k.bad), atomic_load(&k.wrong_crash), rss0, rss_half,
            rss_max, rss1);
    CU_ASSERT_EQUAL(atomic_load(&k.bad), 0);
    CU_ASSERT_EQUAL(atomic_load(&k.wrong_crash), 0);
    CU_ASSERT_EQUAL(atomic_load(&k.crashed), crashes);
    CU_ASSERT_EQUAL(atomic_load(&k.good) + atomic_load(&k.iso_lost), good);
    CU_ASSERT(rpc_alive(&s));
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* Flat: the end within 16 MiB of the warm-up, and the second half
     * grew by at most 4 MiB (a leak of a few hundred bytes a call shows
     * at full size). (ASan keeps freed memory in quarantine: no RSS figure
     * there.) */
    if (!rpc_valgrind()) {
        CU_ASSERT(rss1 < rss0 + 16 * 1024);
        CU_ASSERT(rss_half == 0 || rss1 < rss_half + 4 * 1024);
    }
#endif
    /* Only the live workers are children; no zombie. */
    pid_t kids[16];
    int z = 0, n = child_pids(s.pid, &z, kids, 16);
    CU_ASSERT(n <= 2);
    CU_ASSERT_EQUAL(z, 0);
    pid_t pid = s.pid;
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    /* After the host exits nothing of it or its workers is left. */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d", (int)pid);
    CU_ASSERT(access(path, F_OK) != 0);
    int left = 0;
    int64_t end = rpc_now_ms() + th_test_ms(5000);
    do {
        left = 0;
        for (int i = 0; i < n && i < 16; i++)
            left += runs_toolhost(kids[i]);
    } while (left > 0 && rpc_now_ms() < end && usleep(20000) == 0);
    CU_ASSERT_EQUAL(left, 0);
    no_worker_reports(&s);
    rpc_srv_free(&s);
}

void th_suite_isolation(void)
{
    CU_pSuite s = CU_add_suite("isolation", NULL, NULL);
    CU_add_test(s, "each_crash", test_each_crash);
    CU_add_test(s, "cpu_limit", test_cpu_limit);
    CU_add_test(s, "crash_loop_unhealthy", test_crash_loop_unhealthy);
    CU_add_test(s, "reload_under_load", test_reload_under_load);
    CU_add_test(s, "soak", test_soak);
}
