/* test_iso_soak.c - the mixed soak of `isolation: process` against the
 * real `toolhost serve` (docs/isolation.md, "Soak"): 8 clients over the
 * Unix socket make 10,000 good calls (echo in the host, iso_ok in an
 * isolated plugin of its own) with, after every 9th, one call of the
 * iso_mixed fixture, which misbehaves in 18 ways (crashes, hangs past the
 * deadline with cancellation ignored, floods, limits, forks that try to
 * outlive their worker, its own host socket closed or garbled, a write
 * after complete, ...).  Every good call must answer right, every bad
 * call with an error and within its deadline; afterwards the isolated
 * plugins have their configured workers again (host.stats), only those
 * run as the plugins' uids, and after SIGTERM no process of those uids is
 * left.  Full size with `make soak` (TH_SOAK_SCALE=100), a tenth in
 * `make check`.  Needs root (user: auto, a PID namespace per worker). */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>

#include "integration/test_rpc_harness.h"

enum {
    MS_CLIENTS = 8,
    MS_FULL_GOOD = 1250, /* good calls per client at full size */
    MS_EVERY = 9,        /* one bad call after every 9th good one */
    MS_WORKERS = 2,      /* per isolated plugin */
    MS_KINDS = 18,
};

static const char *const kinds[MS_KINDS] = {
    "mx_segv",     "mx_abort",      "mx_exit",     "mx_hang",
    "mx_spin",     "mx_flood",      "mx_leak",     "mx_fds",
    "mx_setsid_exit", "mx_daemon",  "mx_forkbomb", "mx_close_sock",
    "mx_garbage",  "mx_late",       "mx_sleep_segv", "mx_sigblock",
    "mx_stray",    "mx_noterm",
};


/* The plugins' user: `auto` (a uid of their own each), or
 * $TH_ISO_SOAK_USER to run the soak against a host without user: auto
 * (then both plugins share that user's uid). */
static const char *ms_user(void)
{
    const char *e = getenv("TH_ISO_SOAK_USER");
    return e && *e ? e : "auto";
}

static int ms_start(rpc_srv *s)
{
    char plugins[1024], pub[1024], tmo[32], short_tmo[32];
    snprintf(tmo, sizeof tmo, "%lldms", (long long)th_test_ms(10000));
    snprintf(short_tmo, sizeof short_tmo, "%lldms",
             (long long)th_test_ms(1000));
    snprintf(plugins, sizeof plugins,
             "  - name: mixed\n"
             "    path: %s/fixtures/iso_mixed.so\n"
             "    isolation: process\n"
             "    user: %s\n"
             "    workers: %d\n"
             "    kill_grace: 300ms\n"
             "    crash_loop: 1000\n"
             "    process_limits:\n"
             "      memory: 256MiB\n"
             "      open_files: 64\n"
             "      processes: 64\n"
             "      cpu_seconds: 20\n"
             "    network: false\n"
             "  - name: good\n"
             "    path: %s/fixtures/iso_crash.so\n"
             "    isolation: process\n"
             "    user: %s\n"
             "    workers: %d\n"
             "    process_limits:\n"
             "      memory: 2GiB\n"
             "      processes: 256\n"
             "    network: false\n",
             TH_BUILD_DIR, ms_user(), MS_WORKERS, TH_BUILD_DIR, ms_user(),
             MS_WORKERS);
    int k = snprintf(pub, sizeof pub,
                     "  - name: soak\n    tools: [mx_ok, iso_ok");
    for (int i = 0; i < MS_KINDS; i++)
        k += snprintf(pub + k, sizeof pub - (size_t)k, ", %s", kinds[i]);
    snprintf(pub + k, sizeof pub - (size_t)k,
             "]\n"
             "    timeout: %s\n"
             "    tool_overrides:\n"
             "      mx_hang: {timeout: %s}\n"
             "      mx_spin: {timeout: %s}\n"
             "      mx_sigblock: {timeout: %s}\n",
             tmo, short_tmo, short_tmo, short_tmo);
    rpc_opts o = {.plugins_extra = plugins, .public_extra = pub,
                  .max_frame = "1MiB"};
    return rpc_srv_start(s, &o);
}

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

/* The error code of an answer with ok: false ("tool_failed" when the tool
 * failed by itself), NULL for any other answer. */
static const char *fail_code(const rpc_res *r, char *buf, size_t cap)
{
    if (!r->res)
        return NULL;
    const msgpack_object *ok = th_rpc_map_get(r->res, "ok");
    if (!ok || ok->type != MSGPACK_OBJECT_BOOLEAN || ok->via.boolean)
        return NULL;
    const msgpack_object *c =
        th_rpc_map_get(th_rpc_map_get(r->res, "error"), "code");
    const char *p;
    size_t n;
    if (c && th_rpc_obj_str(c, &p, &n))
        snprintf(buf, cap, "%.*s", (int)n, p);
    else
        snprintf(buf, cap, "tool_failed");
    return buf;
}

/* mx_leak in an AddressSanitizer build: the worker's `memory` is the
 * sanitizer's hard_rss_limit_mb (docs/isolation.md), checked by a
 * sanitizer thread every 100 ms or so, which a loaded machine may keep
 * from running before the call's deadline; the leak then ends by the
 * deadline (the worker killed all the same).  RLIMIT_AS in other builds
 * answers it at once. */
static bool leak_may_time_out(int kind)
{
#ifdef __SANITIZE_ADDRESS__
    return strcmp(kinds[kind], "mx_leak") == 0;
#else
    (void)kind;
    return false;
#endif
}

/* The kinds whose worker dies during the call. */
static bool kills_worker(int kind)
{
    static const char *const k[] = {
        "mx_segv",   "mx_abort",    "mx_exit",       "mx_leak",
        "mx_setsid_exit", "mx_daemon", "mx_forkbomb", "mx_sleep_segv",
        "mx_noterm",
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strcmp(kinds[kind], k[i]) == 0)
            return true;
    return false;
}

typedef struct kind_tally {
    atomic_int calls, errors;
    atomic_int crashed, timeout, failed, other;
    atomic_llong max_ms;
} kind_tally;

typedef struct soak {
    rpc_srv *s;
    int good_per_client;
    atomic_int next_client;
    atomic_int good_ok, good_bad, bad_not_error;
    atomic_int probes_ok, probes_err, probes_other;
    atomic_int shown;
    kind_tally k[MS_KINDS];
} soak;

static void show(soak *m, const char *tool, int rc, const rpc_res *r)
{
    if (atomic_fetch_add(&m->shown, 1) >= 8)
        return;
    char buf[1024] = "";
    if (r->res)
        msgpack_object_print_buffer(buf, sizeof buf, *r->res);
    else if (r->err)
        msgpack_object_print_buffer(buf, sizeof buf, *r->err);
    fprintf(stderr, "\nmixed soak: unexpected answer to %s (rc %d): %s\n",
            tool, rc, buf);
}

static void bad_call(soak *m, th_rpc_client *c, int kind)
{
    kind_tally *t = &m->k[kind];
    rpc_res r;
    char code[64];
    int64_t t0 = rpc_now_ms();
    int rc = call(c, kinds[kind], NULL, &r);
    long long ms = rpc_now_ms() - t0;
    atomic_fetch_add(&t->calls, 1);
    const char *e = rc == 0 ? fail_code(&r, code, sizeof code) : NULL;
    if (!e) {
        atomic_fetch_add(&m->bad_not_error, 1);
        show(m, kinds[kind], rc, &r);
    } else {
        atomic_fetch_add(&t->errors, 1);
        atomic_fetch_add(strcmp(e, "plugin_crashed") == 0 ? &t->crashed
                         : strcmp(e, "timeout") == 0      ? &t->timeout
                         : strcmp(e, "tool_failed") == 0  ? &t->failed
                                                          : &t->other,
                         1);
    }
    long long cur = atomic_load(&t->max_ms);
    while (ms > cur && !atomic_compare_exchange_weak(&t->max_ms, &cur, ms))
        ;
    rpc_res_free(&r);
    /* A call to the same plugin that may finish: lets the plugin finish
     * calls between the bad ones (its workers restart at once, not after
     * a growing backoff).  It may meet another client's crash. */
    char want[32];
    snprintf(want, sizeof want, "p%d", kind);
    if (call(c, "mx_ok", want, &r) == 0 && r.res && rpc_stdout_is(r.res, want))
        atomic_fetch_add(&m->probes_ok, 1);
    else if (r.res && fail_code(&r, code, sizeof code))
        atomic_fetch_add(&m->probes_err, 1);
    else /* e.g. "p5late": mx_late's write after complete() lands in the
          * next call on its worker (the record is reused) */
        atomic_fetch_add(&m->probes_other, 1);
    rpc_res_free(&r);
}

static void *client_main(void *arg)
{
    soak *m = arg;
    int me = atomic_fetch_add(&m->next_client, 1);
    th_rpc_client *c = rpc_connect(m->s);
    if (!c) {
        atomic_fetch_add(&m->good_bad, m->good_per_client);
        return NULL;
    }
    int kind = (me * 7) % MS_KINDS;
    for (int i = 0; i < m->good_per_client; i++) {
        char want[32];
        snprintf(want, sizeof want, "c%d.%d", me, i);
        const char *tool = i % 2 ? "iso_ok" : "echo";
        rpc_res r;
        int rc = call(c, tool, want, &r);
        if (rc == 0 && r.res && rpc_stdout_is(r.res, want)) {
            atomic_fetch_add(&m->good_ok, 1);
        } else {
            atomic_fetch_add(&m->good_bad, 1);
            show(m, tool, rc, &r);
        }
        rpc_res_free(&r);
        if (i % MS_EVERY == MS_EVERY - 1) {
            bad_call(m, c, kind);
            kind = (kind + 1) % MS_KINDS;
        }
    }
    th_rpc_client_close(c);
    return NULL;
}

/* Uid of /proc/PID (its real uid), or -1. */
static long proc_uid(long pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    long uid = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Uid: %ld", &uid) == 1)
            break;
    if (f)
        fclose(f);
    return uid;
}

/* Adds the uid of pid to uids[] unless it is there or the host's own. */
static void add_uid(long pid, long *uids, int *n, int cap)
{
    long u = proc_uid(pid);
    bool seen = u < 0 || u == (long)geteuid();
    for (int i = 0; i < *n && !seen; i++)
        seen = uids[i] == u;
    if (!seen && *n < cap)
        uids[(*n)++] = u;
}

/* The children of pid (its main thread's and its other threads'). */
static int kids_of(long pid, long *kids, int cap)
{
    char path[128];
    snprintf(path, sizeof path, "/proc/%ld/task", pid);
    DIR *d = opendir(path);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char p2[400];
        snprintf(p2, sizeof p2, "%s/%s/children", path, de->d_name);
        FILE *f = fopen(p2, "r");
        long kid;
        while (f && n < cap && fscanf(f, "%ld", &kid) == 1)
            kids[n++] = kid;
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

/* The uids other than the host's of its children and grandchildren: its
 * workers' (the init of a worker's PID namespace and the worker). */
static int worker_uids(pid_t host, long *uids, int cap)
{
    long kids[64], grand[64];
    int n = 0, k = kids_of(host, kids, 64);
    for (int i = 0; i < k; i++) {
        add_uid(kids[i], uids, &n, cap);
        int g = kids_of(kids[i], grand, 64);
        for (int j = 0; j < g; j++)
            add_uid(grand[j], uids, &n, cap);
    }
    return n;
}

static long proc_ppid(long pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    long pp = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "PPid: %ld", &pp) == 1)
            break;
    if (f)
        fclose(f);
    return pp;
}

/* Processes on the machine whose uid is one of uids[]; with `host`, only
 * those that are not a worker: a worker is the host's child (the init of
 * its PID namespace) or that child's child (the worker proper).  The
 * first few are printed when `say`. */
static int uid_procs(const long *uids, int n, pid_t host, bool say)
{
    DIR *d = opendir("/proc");
    int k = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        long pid = atol(de->d_name), u = proc_uid(pid);
        bool mine = false;
        for (int i = 0; i < n; i++)
            mine = mine || u == uids[i];
        if (!mine)
            continue;
        if (host > 0) {
            long pp = proc_ppid(pid);
            if (pp == host || (pp > 0 && proc_ppid(pp) == host))
                continue;
        }
        if (say && k < 8) {
            char path[64], comm[64] = "";
            snprintf(path, sizeof path, "/proc/%ld/comm", pid);
            FILE *f = fopen(path, "r");
            if (f && fgets(comm, sizeof comm, f))
                comm[strcspn(comm, "\n")] = '\0';
            if (f)
                fclose(f);
            fprintf(stderr, "\nleft: pid %ld uid %ld ppid %ld (%s)\n", pid,
                    u, proc_ppid(pid), comm);
        }
        k++;
    }
    if (d)
        closedir(d);
    return k;
}

/* host.stats isolation: plugins whose live workers are not `workers`
 * (configured), or -1 when host.stats does not answer. */
static int short_plugins(rpc_srv *s, bool say)
{
    th_rpc_client *c = rpc_connect(s);
    if (!c)
        return -1;
    rpc_res r;
    int bad = -1;
    if (rpc_call(c, "host.stats", "[]", &r) == 0 && r.res) {
        const msgpack_object *iso = th_rpc_map_get(r.res, "isolation");
        if (iso && iso->type == MSGPACK_OBJECT_ARRAY) {
            bad = 0;
            for (uint32_t i = 0; i < iso->via.array.size; i++) {
                const msgpack_object *p = &iso->via.array.ptr[i];
                const msgpack_object *w = th_rpc_map_get(p, "workers");
                const msgpack_object *l = th_rpc_map_get(p, "live");
                bool same = w && l && w->via.u64 == MS_WORKERS &&
                            l->via.u64 == MS_WORKERS;
                if (!same) {
                    bad++;
                    if (say) {
                        char buf[512];
                        msgpack_object_print_buffer(buf, sizeof buf, *p);
                        fprintf(stderr, "\nworkers: %s\n", buf);
                    }
                }
            }
            if (iso->via.array.size != 2)
                bad++;
        }
    }
    rpc_res_free(&r);
    th_rpc_client_close(c);
    return bad;
}

/* Calls mx_ok a few times (one of the settle threads). */
static void *settle_main(void *arg)
{
    rpc_srv *s = arg;
    th_rpc_client *c = rpc_connect(s);
    for (int i = 0; c && i < 10; i++) {
        rpc_res r;
        call(c, "mx_ok", "settle", &r);
        rpc_res_free(&r);
    }
    if (c)
        th_rpc_client_close(c);
    return NULL;
}

/* A dead worker's slot is filled by the next call that finds the live
 * workers busy (docs/isolation.md, "Crashes"), so calls from 4 clients at
 * once until host.stats shows every slot live again; the plugins that
 * are still short then (-1: no answer). */
static int settle(rpc_srv *s)
{
    int shortp;
    int64_t end = rpc_now_ms() + th_test_ms(20000);
    while ((shortp = short_plugins(s, false)) != 0 && rpc_now_ms() < end) {
        pthread_t th[4];
        int k = 0;
        for (int i = 0; i < 4; i++)
            k += pthread_create(&th[k], NULL, settle_main, s) == 0;
        for (int i = 0; i < k; i++)
            pthread_join(th[i], NULL);
    }
    if (shortp != 0)
        short_plugins(s, true);
    return shortp;
}

/* TH_SOAK_SCALE as for isolation:soak: percent of the full size (1..1000),
 * by default 10 (3 in a sanitizer build). */
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

static void test_mixed(void)
{
    if (geteuid() != 0) {
        th_test_skip(__FILE__, __LINE__,
                     "needs root (user: auto, a PID namespace per worker)");
        return;
    }
    int scale = soak_scale();
    int per = rpc_scale(MS_FULL_GOOD * scale / 100);
    if (per < MS_EVERY * 3)
        per = MS_EVERY * 3;
    th_test_timeout(120 + 8 * (unsigned)scale);
    rpc_srv s;
    CU_ASSERT_EQUAL_FATAL(ms_start(&s), 0);
    /* Both plugins answer: their workers run, and their uids show. */
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    rpc_res r;
    CU_ASSERT(call(c, "mx_ok", "a", &r) == 0 && r.res &&
              rpc_stdout_is(r.res, "a"));
    rpc_res_free(&r);
    CU_ASSERT(call(c, "iso_ok", "b", &r) == 0 && r.res &&
              rpc_stdout_is(r.res, "b"));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    long uids[8];
    int nu = 0;
    int64_t end = rpc_now_ms() + th_test_ms(10000);
    int want_uids = strcmp(ms_user(), "auto") == 0 ? 2 : 1;
    while ((nu = worker_uids(s.pid, uids, 8)) < want_uids &&
           rpc_now_ms() < end)
        usleep(20000);
    CU_ASSERT_EQUAL_FATAL(nu, want_uids);

    soak *m = calloc(1, sizeof *m);
    m->s = &s;
    m->good_per_client = per;
    pthread_t th[MS_CLIENTS];
    int started = 0;
    int64_t t0 = rpc_now_ms();
    for (int i = 0; i < MS_CLIENTS; i++)
        if (pthread_create(&th[i], NULL, client_main, m) == 0)
            started++;
    CU_ASSERT_EQUAL(started, MS_CLIENTS);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    int64_t t1 = rpc_now_ms();

    int bad_total = 0, err_total = 0;
    long long worst = 0;
    fprintf(stderr,
            "\nmixed soak (TH_SOAK_SCALE=%d, %d clients): %d good calls "
            "in %.1f s: %d right, %d wrong; probes %d ok, %d error, %d other\n",
            scale, MS_CLIENTS, MS_CLIENTS * per, (double)(t1 - t0) / 1000,
            atomic_load(&m->good_ok), atomic_load(&m->good_bad),
            atomic_load(&m->probes_ok), atomic_load(&m->probes_err),
            atomic_load(&m->probes_other));
    for (int i = 0; i < MS_KINDS; i++) {
        kind_tally *t = &m->k[i];
        bad_total += atomic_load(&t->calls);
        err_total += atomic_load(&t->errors);
        if (atomic_load(&t->max_ms) > worst)
            worst = atomic_load(&t->max_ms);
        fprintf(stderr,
                "  %-15s %3d calls: %3d plugin_crashed, %3d timeout, %3d "
                "failed, %3d other; slowest %lld ms\n",
                kinds[i], atomic_load(&t->calls), atomic_load(&t->crashed),
                atomic_load(&t->timeout), atomic_load(&t->failed),
                atomic_load(&t->other), atomic_load(&t->max_ms));
        CU_ASSERT(atomic_load(&t->calls) > 0);
        /* The tools that kill their worker are answered by its death,
         * never by the deadline: a forked child that keeps the socket
         * (mx_setsid_exit, mx_daemon) or a child that ignores SIGTERM
         * (mx_noterm) does not hold the answer back. */
        if (kills_worker(i) && !leak_may_time_out(i))
            CU_ASSERT_EQUAL(atomic_load(&t->timeout), 0);
    }
    fprintf(stderr, "  %d bad calls, %d answered with an error, slowest "
            "%lld ms\n", bad_total, err_total, worst);
    CU_ASSERT_EQUAL(atomic_load(&m->good_ok), MS_CLIENTS * per);
    CU_ASSERT_EQUAL(atomic_load(&m->good_bad), 0);
    CU_ASSERT_EQUAL(atomic_load(&m->bad_not_error), 0);
    CU_ASSERT_EQUAL(err_total, bad_total);
    /* Never a hang: a bad call ends by its deadline (10 s, counted from
     * when it was queued) plus kill_grace, with room for a loaded
     * machine. */
    CU_ASSERT(worst < th_test_ms(15000));
    CU_ASSERT(rpc_alive(&s));

    /* The workers come back to the configured count (a restart may wait
     * out a backoff of up to 5 s; it happens for a call), and then only
     * they run as the plugins' uids: nothing a bad call forked is left. */
    int procs = 0;
    CU_ASSERT_EQUAL(settle(&s), 0);
    end = rpc_now_ms() + th_test_ms(10000);
    while ((procs = uid_procs(uids, nu, s.pid, false)) != 0 &&
           rpc_now_ms() < end)
        usleep(50000);
    if (procs != 0)
        uid_procs(uids, nu, s.pid, true);
    CU_ASSERT_EQUAL(procs, 0);
    int all = uid_procs(uids, nu, 0, false);

    /* After SIGTERM no process of the plugins' uids remains. */
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    end = rpc_now_ms() + th_test_ms(10000);
    while ((procs = uid_procs(uids, nu, 0, false)) != 0 &&
           rpc_now_ms() < end)
        usleep(50000);
    if (procs != 0)
        uid_procs(uids, nu, 0, true);
    CU_ASSERT_EQUAL(procs, 0);
    fprintf(stderr,
            "  uids %ld and %ld: %d processes (the workers) before the stop, "
            "%d after\n",
            uids[0], nu > 1 ? uids[1] : uids[0], all, procs);
    free(m);
    rpc_srv_free(&s);
}

void th_suite_iso_soak(void);
void th_suite_iso_soak(void)
{
    CU_pSuite s = CU_add_suite("iso_soak", NULL, NULL);
    CU_add_test(s, "mixed", test_mixed);
}
