/* test_call_fast.c - the one short-call policy of the core (call_fast.c):
 * which calls a front's own thread runs itself.  The pure policy on a fake
 * clock (a declared tool inline from its first call, overruns, demotion,
 * back-off and its retry, short_call_max 0), then through th_call_start on
 * a real host: short_inline (a shared loop) and short_client (one client's
 * thread) run declared tools only, never a tool however fast it was on the
 * workers; the core's own timing demoting a slow declared tool, the
 * counters, and short_call_max: 0 turning the path off for every mode. */
#include <unistd.h>

#include "common/th_test.h"
#include "unit/test_manager_fx.h"

#define MS 1000000LL
#define MAX_NS ((uint64_t)(10 * MS)) /* the default short_call_max */

/* ---- The pure policy ------------------------------------------------------ */

/* A declared tool runs inline from its first call (the pure policy is
 * asked about declared tools only: th_call_fast_pick). */
static void test_declared_first_call(void)
{
    th_fast f;
    memset(&f, 0, sizeof f);
    CU_ASSERT(th_fast_pick(&f, MAX_NS, 0));
    CU_ASSERT_EQUAL(th_fast_inline_end(&f, MAX_NS, MS, 0, NULL, NULL),
                    TH_FAST_KEPT);
    CU_ASSERT(th_fast_pick(&f, MAX_NS, 0));
}

/* A declared tool: three overruns of max (not in a row) demote it; the
 * retry after the back-off (100 x max) is one call; a good one makes it
 * inline again, a bad one demotes it with the back-off doubled. */
static void test_declared_demotion_backoff(void)
{
    th_fast f;
    memset(&f, 0, sizeof f);
    int64_t now = 1000 * MS, bo = 0;
    unsigned ov = 0;
    CU_ASSERT_EQUAL(th_fast_inline_end(&f, MAX_NS, 11 * MS, now, &bo, &ov),
                    TH_FAST_OVERRUN);
    CU_ASSERT_EQUAL(ov, 1);
    CU_ASSERT_EQUAL(th_fast_inline_end(&f, MAX_NS, 1 * MS, now, &bo, NULL),
                    TH_FAST_KEPT);
    CU_ASSERT_EQUAL(th_fast_inline_end(&f, MAX_NS, 10 * MS, now, &bo, NULL),
                    TH_FAST_KEPT); /* max itself is in time */
    CU_ASSERT_EQUAL(th_fast_inline_end(&f, MAX_NS, 12 * MS, now, &bo, &ov),
                    TH_FAST_OVERRUN);
    CU_ASSERT_EQUAL(ov, 2); /* not in a row: counted since promotion */
    CU_ASSERT(th_fast_pick(&f, MAX_NS, now));
    CU_ASSERT_EQUAL(th_fast_inline_end(&f, MAX_NS, 15 * MS, now, &bo, NULL),
                    TH_FAST_DEMOTED);
    CU_ASSERT_EQUAL(bo, 1000 * MS);
    /* on workers until the back-off is over, for every front */
    CU_ASSERT(!th_fast_pick(&f, MAX_NS, now));
    CU_ASSERT(!th_fast_pick(&f, MAX_NS, now + 999 * MS));
    /* then one try (a second caller at the same time goes to a worker) */
    CU_ASSERT(th_fast_pick(&f, MAX_NS, now + 1000 * MS));
    CU_ASSERT(!th_fast_pick(&f, MAX_NS, now + 1000 * MS));
    /* the try is slow again: demoted at once, twice the back-off */
    now += 1000 * MS;
    CU_ASSERT_EQUAL(th_fast_inline_end(&f, MAX_NS, 11 * MS, now, &bo, NULL),
                    TH_FAST_DEMOTED);
    CU_ASSERT_EQUAL(bo, 2000 * MS);
    CU_ASSERT(!th_fast_pick(&f, MAX_NS, now + 1999 * MS));
    CU_ASSERT(th_fast_pick(&f, MAX_NS, now + 2000 * MS));
    /* this try is in time: inline again, without waiting */
    now += 2000 * MS;
    CU_ASSERT_EQUAL(th_fast_inline_end(&f, MAX_NS, 1 * MS, now, &bo, NULL),
                    TH_FAST_PROMOTED);
    CU_ASSERT(th_fast_pick(&f, MAX_NS, now));
    CU_ASSERT(th_fast_pick(&f, MAX_NS, now));
    /* the back-off keeps doubling up to 64 x its base */
    for (int i = 0; i < 10; i++) {
        CU_ASSERT_EQUAL(
            th_fast_inline_end(&f, MAX_NS, 200 * MS, now, &bo, NULL),
            TH_FAST_DEMOTED); /* over 10 x max: at once (a retry too) */
        now += bo;
        CU_ASSERT(th_fast_pick(&f, MAX_NS, now));
    }
    CU_ASSERT_EQUAL(bo, 64000 * MS);
}

/* short_call_max scales every threshold; 0 turns the path off. */
static void test_max_scales_and_off(void)
{
    th_fast f;
    memset(&f, 0, sizeof f);
    uint64_t max = 100 * MS; /* an overrun over 100 ms, at once over 1 s */
    int64_t bo = 0;
    CU_ASSERT_EQUAL(th_fast_inline_end(&f, max, 99 * MS, 0, &bo, NULL),
                    TH_FAST_KEPT);
    CU_ASSERT_EQUAL(th_fast_inline_end(&f, max, 101 * MS, 0, &bo, NULL),
                    TH_FAST_OVERRUN);
    CU_ASSERT_EQUAL(th_fast_inline_end(&f, max, 1001 * MS, 0, &bo, NULL),
                    TH_FAST_DEMOTED);
    CU_ASSERT_EQUAL(bo, 10000 * MS);
    th_fast z;
    memset(&z, 0, sizeof z);
    CU_ASSERT(!th_fast_pick(&z, 0, 0));
    CU_ASSERT_EQUAL(th_fast_inline_end(&z, 0, 1000 * MS, 0, &bo, NULL),
                    TH_FAST_KEPT);
}

/* ---- Through th_call_start ----------------------------------------------- */

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done, ok;
    pthread_t thread;
} waiter;

static void on_ev(const th_event *e, void *ud)
{
    waiter *w = ud;
    if (e->kind != TH_EV_RESULT)
        return;
    pthread_mutex_lock(&w->mu);
    w->done = true;
    w->ok = e->result->kind == TH_RESULT_DONE && e->result->ok;
    w->thread = pthread_self();
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Calls `tool` (args {ms}, ms -1: {text: "x"}, -2: {}) from a shared
 * loop or a client's thread; true when its final result came on this thread
 * inside th_call_start (it ran inline).  Waits 10 s at most. */
static bool call_inline(th_session *s, const char *tool, long long ms,
                        bool loop, bool client)
{
    waiter w = {.done = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    th_buf a = ms >= 0 ? A(1, "ms", 'i', ms)
               : ms == -1 ? A(1, "text", 's', "x") : A(0);
    th_call_opts o = {.short_inline = loop, .short_client = client};
    int rc = th_call_start(s, tool, a.data, a.len, &o, on_ev, &w, NULL);
    CU_ASSERT_EQUAL(rc, 0);
    pthread_mutex_lock(&w.mu);
    bool here = w.done && pthread_equal(w.thread, pthread_self());
    struct timespec ts;
    th_deadline_rt(&ts, 10000);
    while (!w.done && rc == 0)
        if (pthread_cond_timedwait(&w.cv, &w.mu, &ts) != 0)
            break;
    CU_ASSERT(w.done && w.ok);
    pthread_mutex_unlock(&w.mu);
    th_buf_destroy(&a);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return here;
}

/* A host with host.short_call_max `max` and host.short_call_stuck
 * `stuck` (the watchdog). */
static th_config *stuck_cfg(const char *max, const char *stuck)
{
    char text[2048];
    snprintf(text, sizeof text,
             "host: {workers: 2, log_level: error, short_call_max: %s, "
             "short_call_stuck: %s}\n"
             "plugins:\n"
             "  - name: echo\n    path: %s\n"
             "  - name: short_tools\n    path: %s\n",
             max, stuck, th_test_build_path("plugins/echo.so"),
             th_test_build_path("fixtures/short_tools.so"));
    th_config *cfg = NULL;
    th_error e;
    th_error_clear(&e);
    int rc = th_config_parse("fast-test.yaml", "/tmp", text, strlen(text),
                             &cfg, &e);
    if (rc)
        fprintf(stderr, "config: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return cfg;
}

static th_host *open_host_stuck(const char *max, const char *stuck)
{
    return host_new(stuck_cfg(max, stuck));
}

/* The tests of the end-of-run policy: the watchdog far away (a nap of
 * 60 ms under valgrind must not reach it). */
static th_host *open_host(const char *max)
{
    return open_host_stuck(max, "1m");
}

static void mgr(th_host *h, uint64_t *inline_front, uint64_t *demoted)
{
    th_mgr_stats ms;
    th_host_mgr_stats(h, &ms);
    *inline_front = ms.inline_front;
    *demoted = ms.short_demoted;
}

/* short_inline and short_client run declared tools only: a tool that is
 * fast on the workers call after call is still never run inline (its
 * next call's cost may depend on its arguments); nothing else is inline. */
static void test_modes(void)
{
    th_host *h = open_host("10ms");
    th_session *s = open_trusted(h);
    uint64_t inl, dem;
    CU_ASSERT(call_inline(s, "echo", -1, true, false));     /* declared */
    CU_ASSERT(call_inline(s, "echo", -1, false, true));
    CU_ASSERT(!call_inline(s, "echo", -1, false, false));   /* no mode */
    mgr(h, &inl, &dem);
    CU_ASSERT_EQUAL(inl, 2);
    /* t_echo is not declared: never on a shared loop, never on a
     * client's thread, however many fast runs it had */
    for (int i = 0; i < 10; i++) {
        CU_ASSERT(!call_inline(s, "t_echo", -1, true, false));
        CU_ASSERT(!call_inline(s, "t_echo", -1, false, true));
    }
    mgr(h, &inl, &dem);
    CU_ASSERT_EQUAL(inl, 2);
    CU_ASSERT_EQUAL(dem, 0);
    th_session_close(s);
    th_host_close(h);
}

/* The core times a declared tool that sleeps past short_call_max: the
 * third overrun sends it to workers (counted, for every front). */
static void test_core_times_and_demotes(void)
{
    /* 60 ms naps against 50 ms: overruns, far from 10 x (at once) */
    th_host *h = open_host("50ms");
    th_session *s = open_trusted(h);
    uint64_t inl, dem;
    for (int i = 0; i < 3; i++) {
        CU_ASSERT(call_inline(s, "short_nap", 60, true, false));
        mgr(h, &inl, &dem);
        CU_ASSERT_EQUAL(dem, i < 2 ? 0 : 1);
    }
    /* now on a worker, whichever front asks (the state is per tool) */
    CU_ASSERT(!call_inline(s, "short_nap", 0, true, false));
    CU_ASSERT(!call_inline(s, "short_nap", 0, false, true));
    /* another declared tool is not affected */
    CU_ASSERT(call_inline(s, "short_hex", -2, true, false));
    th_session_close(s);
    th_host_close(h);
}

typedef struct nap_job {
    th_session *s;
    atomic_bool done;
    bool inline_run;
} nap_job;

static void *nap_main(void *arg)
{
    nap_job *j = arg;
    j->inline_run = call_inline(j->s, "short_nap", 600, true, false);
    atomic_store(&j->done, true);
    return NULL;
}

/* The watchdog (host.short_call_stuck 50 ms): a declared tool that
 * sleeps 600 ms on a shared loop is demoted while it still runs (counted
 * once, not again when it returns); its next call goes to a worker; the
 * back-off starts only once it has returned. */
static void test_watchdog_demotes_while_running(void)
{
    th_host *h = open_host_stuck("10ms", "50ms");
    th_session *s = open_trusted(h);
    nap_job j = {.s = s};
    pthread_t th;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, nap_main, &j) == 0);
    uint64_t inl, dem = 0;
    int64_t t0 = th_now_ns();
    while (!atomic_load(&j.done) && th_now_ns() - t0 < (int64_t)th_test_ms(5000) * MS) {
        mgr(h, &inl, &dem);
        if (dem)
            break;
        usleep(2000);
    }
    bool running = !atomic_load(&j.done);
    th_stat *st = th_stat_get(h, "short_nap");
    CU_ASSERT_FATAL(st != NULL);
    int64_t retry_during = atomic_load(&st->fast.retry_ns);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(dem, 1);
    CU_ASSERT(running); /* seen while the nap still ran */
    CU_ASSERT(j.inline_run);
    CU_ASSERT_EQUAL(retry_during, INT64_MAX); /* no retry while stuck */
    int64_t retry = atomic_load(&st->fast.retry_ns);
    CU_ASSERT(retry > 0 && retry != INT64_MAX); /* back-off from the end */
    mgr(h, &inl, &dem);
    CU_ASSERT_EQUAL(dem, 1); /* not counted again at its end */
    CU_ASSERT(!call_inline(s, "short_nap", 0, true, false));
    CU_ASSERT(call_inline(s, "short_hex", -2, true, false));
    th_session_close(s);
    th_host_close(h);
}

/* As if the watchdog had flagged a call of `st` on this thread's slot
 * and demoted the tool, and the call had returned without its thread
 * seeing the flag (a thread's load may pass the watchdog's store). */
static void missed_flag(th_stat *st, uint64_t id)
{
    th_fast_slot *sl = th_fast_tl;
    CU_ASSERT_FATAL(sl != NULL);
    atomic_store(&st->fast.state, TH_FAST_OFF);
    atomic_store(&st->fast.retry_ns, INT64_MAX);
    st->fast.backoff_ns = 1000 * MS;
    st->fast.stuck = 1;
    atomic_store(&sl->t0, 0);
    atomic_store(&sl->flag_st, st);
    atomic_store(&sl->flagged, id);
}

/* The missed flag is finished: the tool's back-off has started. */
static bool back_off_started(th_stat *st)
{
    int64_t r = atomic_load(&st->fast.retry_ns);
    return r > 0 && r != INT64_MAX;
}

/* host.short_call_stuck 0: no watchdog thread; a reload that sets it
 * starts one (for a host whose fronts run short calls). */
static void test_watchdog_off_until_reload(void)
{
    th_host *h = open_host_stuck("10ms", "0");
    th_session *s = open_trusted(h);
    CU_ASSERT(call_inline(s, "short_hex", -2, true, false));
    CU_ASSERT(!th_call_fast_watched(h));
    th_host_config_swap(h, stuck_cfg("10ms", "50ms"));
    th_call_fast_config_changed(h);
    CU_ASSERT(th_call_fast_watched(h));
    CU_ASSERT(call_inline(s, "short_hex", -2, true, false));
    th_session_close(s);
    th_host_close(h);
}

/* A thread whose stuck call's flag was missed moves to another host:
 * the flag is finished on the first (its tool would otherwise stay on
 * the workers with no retry, for good). */
static void test_watchdog_flag_host_switch(void)
{
    /* no watchdog on the first host: only the switch can finish it */
    th_host *h1 = open_host_stuck("10ms", "0");
    th_session *s1 = open_trusted(h1);
    CU_ASSERT(call_inline(s1, "short_hex", -2, true, false));
    th_stat *st = th_stat_get(h1, "short_hex");
    CU_ASSERT_FATAL(st != NULL);
    missed_flag(st, 424242);
    th_host *h2 = open_host_stuck("10ms", "0");
    th_session *s2 = open_trusted(h2);
    CU_ASSERT(call_inline(s2, "short_hex", -2, true, false));
    CU_ASSERT(back_off_started(st));
    CU_ASSERT_EQUAL(st->fast.stuck, 0);
    th_session_close(s2);
    th_host_close(h2);
    th_session_close(s1);
    th_host_close(h1);
}

typedef struct flag_job {
    th_session *s;
    th_stat *st;
} flag_job;

static void *flag_exit_main(void *arg)
{
    flag_job *j = arg;
    CU_ASSERT(call_inline(j->s, "short_hex", -2, true, false));
    missed_flag(j->st, 434343);
    return NULL; /* the thread's slot is released: the flag finished */
}

/* ... or exits. */
static void test_watchdog_flag_thread_exit(void)
{
    th_host *h = open_host_stuck("10ms", "0");
    th_session *s = open_trusted(h);
    flag_job j = {.s = s, .st = th_stat_get(h, "short_hex")};
    CU_ASSERT_FATAL(j.st != NULL);
    pthread_t th;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, flag_exit_main, &j) == 0);
    pthread_join(th, NULL);
    CU_ASSERT(back_off_started(j.st));
    CU_ASSERT_EQUAL(j.st->fast.stuck, 0);
    th_session_close(s);
    th_host_close(h);
}

/* ... or a reload turns the watchdog off: it still finishes the flags of
 * calls that have returned. */
static void test_watchdog_flag_after_off(void)
{
    th_host *h = open_host_stuck("10ms", "50ms");
    th_session *s = open_trusted(h);
    CU_ASSERT(call_inline(s, "short_hex", -2, true, false));
    CU_ASSERT(th_call_fast_watched(h));
    th_host_config_swap(h, stuck_cfg("10ms", "0"));
    th_call_fast_config_changed(h);
    th_stat *st = th_stat_get(h, "short_hex");
    CU_ASSERT_FATAL(st != NULL);
    missed_flag(st, 444444);
    /* the idle watchdog looks every 250 ms */
    int64_t t0 = th_now_ns();
    while (!back_off_started(st) && th_now_ns() - t0 < (int64_t)th_test_ms(5000) * MS)
        usleep(5000);
    CU_ASSERT(back_off_started(st));
    th_session_close(s);
    th_host_close(h);
}

/* short_call_max: 0: no call runs on a front's thread, in any mode. */
static void test_off_everywhere(void)
{
    th_host *h = open_host("0");
    th_session *s = open_trusted(h);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT(!call_inline(s, "echo", -1, true, false));
        CU_ASSERT(!call_inline(s, "echo", -1, false, true));
        CU_ASSERT(!call_inline(s, "t_echo", -1, false, true));
    }
    uint64_t inl, dem;
    mgr(h, &inl, &dem);
    CU_ASSERT_EQUAL(inl, 0);
    CU_ASSERT_EQUAL(dem, 0);
    th_session_close(s);
    th_host_close(h);
}

void th_suite_call_fast(void)
{
    CU_pSuite s = CU_add_suite("call_fast", suite_init, suite_cleanup);
    CU_add_test(s, "declared_first_call", test_declared_first_call);
    CU_add_test(s, "declared_demotion_backoff",
                test_declared_demotion_backoff);
    CU_add_test(s, "max_scales_and_off", test_max_scales_and_off);
    CU_add_test(s, "modes", test_modes);
    CU_add_test(s, "core_times_and_demotes", test_core_times_and_demotes);
    CU_add_test(s, "off_everywhere", test_off_everywhere);
    CU_add_test(s, "watchdog_demotes_while_running",
                test_watchdog_demotes_while_running);
    CU_add_test(s, "watchdog_off_until_reload", test_watchdog_off_until_reload);
    CU_add_test(s, "watchdog_flag_host_switch", test_watchdog_flag_host_switch);
    CU_add_test(s, "watchdog_flag_thread_exit", test_watchdog_flag_thread_exit);
    CU_add_test(s, "watchdog_flag_after_off", test_watchdog_flag_after_off);
}
