/* test_code_host.c - run_code through a real host: the limits come from the
 * toolset the call runs under (several toolsets enabling run_code with
 * different limits), and progress forwarded from an async tool called by a
 * script reaches the caller both on a worker and inline (th_call_sync). */
#include <CUnit/CUnit.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"
#include "th/code.h"
#include "th/config.h"
#include "th/host.h"
#include "th/log.h"
#include "toolhost/sdk.h"

typedef struct chost {
    int log_level;
    th_host *h;
} chost;

/* Toolset "narrow" (uid 4242 only): run_code with max_calls 2 and a 1 KiB
 * output limit; toolset "wide" (anyone): max_calls 50, 64 KiB.  (The host's
 * command_output limit, 8000 bytes, applies on top.) */
static int chost_up(chost *fx, uint32_t workers)
{
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "host:\n"
             "  workers: %u\n"
             "  async_workers: 1\n"
             "  log_level: error\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: narrow\n"
             "    tools: [echo, echo_async]\n"
             "    allow_users: [\"4242\"]\n"
             "    run_code:\n"
             "      enabled: true\n"
             "      max_calls: 2\n"
             "      timeout: 5s\n"
             "      output_limit: 1KiB\n"
             "  - name: wide\n"
             "    tools: [\"*\"]\n"
             "    run_code:\n"
             "      enabled: true\n"
             "      max_calls: 50\n"
             "      timeout: 5s\n"
             "      output_limit: 64KiB\n",
             workers, th_test_build_path("plugins/echo.so"));
    th_config *cfg = NULL;
    th_error e;
    th_error_clear(&e);
    memset(fx, 0, sizeof *fx);
    fx->log_level = th_log_get_level();
    if (th_config_parse("test.yaml", NULL, yaml, strlen(yaml), &cfg, &e)) {
        fprintf(stderr, "config: %s\n", e.msg);
        return -1;
    }
    if (th_host_open(cfg, &fx->h, &e)) {
        fprintf(stderr, "host: %s\n", e.msg);
        th_log_set_level(fx->log_level);
        return -1;
    }
    if (th_code_attach(fx->h, &e)) { /* the code runtime is a front */
        fprintf(stderr, "run_code: %s\n", e.msg);
        th_host_close(fx->h);
        fx->h = NULL;
        th_log_set_level(fx->log_level);
        return -1;
    }
    return 0;
}

static void chost_down(chost *fx)
{
    th_host_close(fx->h);
    th_log_set_level(fx->log_level);
}

static th_session *open_as(chost *fx, uint32_t uid)
{
    th_principal who = {.uid = uid, .gid = uid, .trusted = false};
    return th_session_open(fx->h, &who, NULL, NULL);
}

static void pack_code(th_buf *args, const char *code)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, args, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "code", 4);
    msgpack_pack_str_with_body(&pk, code, strlen(code));
}

typedef struct seen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int progress;   /* PROGRESS events */
    int running;    /* RUNNING results */
    bool done;
    char last[160];
    pthread_t thread; /* the thread of the last progress event */
    th_result_copy fin;
} seen;

static void seen_init(seen *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
}

static void seen_free(seen *s)
{
    th_result_copy_destroy(&s->fin);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

static void on_event(const th_event *ev, void *ud)
{
    seen *s = ud;
    pthread_mutex_lock(&s->mu);
    if (ev->kind == TH_EV_PROGRESS) {
        s->progress++;
        s->thread = pthread_self();
        snprintf(s->last, sizeof s->last, "%s", ev->message ? ev->message : "");
    } else if (ev->result->kind == TH_RESULT_RUNNING) {
        s->running++;
    } else {
        th_result_copy_from(&s->fin, ev->result);
        s->done = true;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

/* run_code inline on this thread through th_call_sync. */
static int run_sync(th_session *s, const char *code, seen *out)
{
    th_buf args = TH_BUF_INIT;
    pack_code(&args, code);
    th_call_opts o;
    memset(&o, 0, sizeof o);
    o.may_block = true;
    int rc = th_call_sync(s, "run_code", args.data, args.len, &o, on_event,
                          out, NULL, &out->fin);
    th_buf_destroy(&args);
    return rc;
}

/* run_code on a worker (th_call_start without may_block). */
static void run_worker(th_session *s, const char *code, seen *out)
{
    th_buf args = TH_BUF_INIT;
    pack_code(&args, code);
    th_call_opts o;
    memset(&o, 0, sizeof o);
    uint64_t id;
    CU_ASSERT_EQUAL(th_call_start(s, "run_code", args.data, args.len, &o,
                                  on_event, out, &id),
                    0);
    pthread_mutex_lock(&out->mu);
    while (!out->done)
        pthread_cond_wait(&out->cv, &out->mu);
    pthread_mutex_unlock(&out->mu);
    th_buf_destroy(&args);
}

static const char *out_text(const th_result_copy *r)
{
    return r->out.data ? (const char *)r->out.data : "";
}

static const char *err_text(const th_result_copy *r)
{
    return r->err.data ? (const char *)r->err.data : "";
}

/* ---- 1: limits of the call's own toolset ------------------------------ */

static const char five_calls[] =
    "local n = 0\n"
    "for i = 1, 5 do\n"
    "  if tools.echo{text = 'x'}.ok then n = n + 1 end\n"
    "end\n"
    "print(n)\n";

static void test_limits_of_own_toolset(void)
{
    chost fx;
    CU_ASSERT_EQUAL_FATAL(chost_up(&fx, 2), 0);

    /* uid 1: only "wide" applies (max_calls 50): five calls run */
    th_session *wide = open_as(&fx, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(wide);
    seen a;
    seen_init(&a);
    CU_ASSERT_EQUAL(run_sync(wide, five_calls, &a), 0);
    CU_ASSERT_EQUAL(a.fin.kind, TH_RESULT_DONE);
    CU_ASSERT_TRUE(a.fin.ok);
    CU_ASSERT_STRING_EQUAL(out_text(&a.fin), "5\n");
    if (!a.fin.ok)
        fprintf(stderr, "wide: %s\n", err_text(&a.fin));
    seen_free(&a);

    /* 4000 bytes of output fit wide's limit */
    seen b;
    seen_init(&b);
    CU_ASSERT_EQUAL(run_sync(wide, "print(string.rep('y', 4000))", &b), 0);
    CU_ASSERT_TRUE(b.fin.ok);
    CU_ASSERT_EQUAL(b.fin.out.len, 4001);
    seen_free(&b);

    /* the same on a worker */
    seen w;
    seen_init(&w);
    run_worker(wide, five_calls, &w);
    CU_ASSERT_TRUE(w.fin.ok);
    CU_ASSERT_STRING_EQUAL(out_text(&w.fin), "5\n");
    seen_free(&w);
    th_session_close(wide);

    /* uid 4242: "narrow" comes first (max_calls 2): the third call fails */
    th_session *narrow = open_as(&fx, 4242);
    CU_ASSERT_PTR_NOT_NULL_FATAL(narrow);
    seen c;
    seen_init(&c);
    CU_ASSERT_EQUAL(run_sync(narrow, five_calls, &c), 0);
    CU_ASSERT_EQUAL(c.fin.kind, TH_RESULT_DONE);
    CU_ASSERT_STRING_NOT_EQUAL(out_text(&c.fin), "5\n");
    CU_ASSERT_PTR_NOT_NULL(strstr(err_text(&c.fin), "2"));
    seen_free(&c);

    /* and its 1 KiB output limit cuts them */
    seen d;
    seen_init(&d);
    CU_ASSERT_EQUAL(run_sync(narrow, "print(string.rep('y', 4000))", &d), 0);
    CU_ASSERT_TRUE(d.fin.out.len < 1500);
    if (d.fin.out.len >= 1500)
        fprintf(stderr, "narrow: %zu bytes, %d: %s / %s\n", d.fin.out.len, d.fin.kind, err_text(&d.fin), d.fin.message ? d.fin.message : "");
    seen_free(&d);
    th_session_close(narrow);
    chost_down(&fx);
}

/* The one description states each toolset's limits when they differ. */
static void test_description_limits(void)
{
    chost fx;
    CU_ASSERT_EQUAL_FATAL(chost_up(&fx, 1), 0);
    th_session *s = open_as(&fx, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    const th_tool *t = th_session_acquire(s, "run_code");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    const char *ld = t->long_description ? t->long_description : "";
    CU_ASSERT_PTR_NOT_NULL(strstr(ld, "They depend on the toolset"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ld, "- narrow: deadline 5000 ms, 64 MiB of "
                                      "Lua memory, at most 2 tool calls, 1 KiB"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ld, "- wide: deadline 5000 ms, 64 MiB of "
                                      "Lua memory, at most 50 tool calls, 64 KiB"));
    th_tool_release(t);
    th_session_close(s);
    chost_down(&fx);
}

/* th_call_toolset() names the toolset of a call; NULL outside calls. */
static void test_call_toolset_null(void)
{
    CU_ASSERT_PTR_NULL(th_call_toolset(NULL));
}

/* ---- 2: progress through run_code, inline and on a worker ------------- */

static const char async_code[] =
    "print(tools.echo_async{text = 'fin', steps = 4, delay_ms = 20}.stdout)";

static void test_progress_inline(void)
{
    chost fx;
    CU_ASSERT_EQUAL_FATAL(chost_up(&fx, 2), 0);
    th_session *s = open_as(&fx, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);

    seen a;
    seen_init(&a);
    CU_ASSERT_EQUAL(run_sync(s, async_code, &a), 0);
    CU_ASSERT_TRUE(a.fin.ok);
    CU_ASSERT_STRING_EQUAL(out_text(&a.fin), "fin\n");
    /* the acknowledgement and the four steps, each on this thread */
    CU_ASSERT_TRUE(a.progress >= 4);
    if (a.progress < 4)
        fprintf(stderr, "inline: %d progress events\n", a.progress);
    CU_ASSERT_TRUE(pthread_equal(a.thread, pthread_self()));
    CU_ASSERT_PTR_NOT_NULL(strstr(a.last, "echo_async: step 4/4"));
    seen_free(&a);

    seen w;
    seen_init(&w);
    run_worker(s, async_code, &w);
    CU_ASSERT_TRUE(w.fin.ok);
    CU_ASSERT_EQUAL(w.running, 1);
    CU_ASSERT_TRUE(w.progress >= 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(w.last, "echo_async: step"));
    seen_free(&w);

    th_session_close(s);
    chost_down(&fx);
}

/* ---- 3: the toolset's limits hold for calls made from code ---------------- */

/* A built-in tool that counts how many of its calls run at once. */
static atomic_int probe_now, probe_max;

static int probe_exec(void *state, const toolhost_tool *tool,
                      toolhost_call *call, const uint8_t *args, size_t len)
{
    (void)state, (void)tool, (void)args, (void)len;
    int n = atomic_fetch_add(&probe_now, 1) + 1;
    int m = atomic_load(&probe_max);
    while (n > m && !atomic_compare_exchange_weak(&probe_max, &m, n))
        ;
    struct timespec ts = {0, 40 * 1000000L};
    nanosleep(&ts, NULL);
    atomic_fetch_sub(&probe_now, 1);
    return th_sdk_write(call, TOOLHOST_STDOUT, "probed", 6) == 0
               ? TOOLHOST_OK
               : TOOLHOST_FAILED;
}

static const toolhost_tool probe_tools[] = {
    TH_SDK_TOOL("probe", probe_exec, "Counts its concurrent calls.",
                TH_SDK_OUTPUT(TEXT, ERROR)),
};

static const toolhost_plugin probe_plugin = {
    .struct_size = sizeof(toolhost_plugin),
    .abi_major = TOOLHOST_ABI_MAJOR,
    .abi_minor = TOOLHOST_ABI_MINOR,
    .name = "probe",
    .version = "1.0.0",
    .description = "Test probe.",
    .tools = probe_tools,
    .n_tools = 1,
};

/* A host with the echo plugin and the probe; `toolset` is the YAML of the
 * one toolset's extra keys (indented 4). */
static int phost_up(chost *fx, uint32_t workers, const char *toolset)
{
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "host:\n"
             "  workers: %u\n"
             "  async_workers: 2\n"
             "  log_level: error\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: default\n"
             "    tools: [\"*\"]\n"
             "    run_code:\n"
             "      enabled: true\n"
             "      timeout: 5s\n"
             "%s",
             workers, th_test_build_path("plugins/echo.so"), toolset);
    th_config *cfg = NULL;
    th_error e;
    th_error_clear(&e);
    memset(fx, 0, sizeof *fx);
    fx->log_level = th_log_get_level();
    if (th_config_parse("test.yaml", NULL, yaml, strlen(yaml), &cfg, &e)) {
        fprintf(stderr, "config: %s\n", e.msg);
        return -1;
    }
    const toolhost_plugin *b[] = {&probe_plugin};
    th_host_opts o = {b, 1};
    if (th_host_open_ex(cfg, &o, &fx->h, &e)) {
        fprintf(stderr, "host: %s\n", e.msg);
        th_log_set_level(fx->log_level);
        return -1;
    }
    if (th_code_attach(fx->h, &e)) { /* the code runtime is a front */
        fprintf(stderr, "run_code: %s\n", e.msg);
        th_host_close(fx->h);
        fx->h = NULL;
        th_log_set_level(fx->log_level);
        return -1;
    }
    return 0;
}

/* Starts run_code on a worker; the result arrives in *out. */
static void start_worker(th_session *s, const char *code, seen *out)
{
    th_buf args = TH_BUF_INIT;
    pack_code(&args, code);
    th_call_opts o;
    memset(&o, 0, sizeof o);
    uint64_t id;
    CU_ASSERT_EQUAL(th_call_start(s, "run_code", args.data, args.len, &o,
                                  on_event, out, &id),
                    0);
    th_buf_destroy(&args);
}

static bool wait_done(seen *s, int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mu);
    while (!s->done && pthread_cond_timedwait(&s->cv, &s->mu, &until) == 0)
        ;
    bool done = s->done;
    pthread_mutex_unlock(&s->mu);
    return done;
}

static const char probe_code[] =
    "for i = 1, 3 do assert(tools.probe{}.ok) end\nprint('done')";

/* tool_overrides max_concurrency 1: three scripts on three workers call the
 * tool, one call at a time (three ran at once before). */
static void test_nested_max_concurrency(void)
{
    chost fx;
    CU_ASSERT_EQUAL_FATAL(phost_up(&fx, 4,
                                   "    tool_overrides:\n"
                                   "      probe:\n"
                                   "        max_concurrency: 1\n"),
                          0);
    th_session *s = open_as(&fx, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    atomic_store(&probe_now, 0);
    atomic_store(&probe_max, 0);
    seen r[3];
    for (int i = 0; i < 3; i++) {
        seen_init(&r[i]);
        start_worker(s, probe_code, &r[i]);
    }
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_TRUE(wait_done(&r[i], 10000));
        CU_ASSERT_TRUE(r[i].fin.ok);
        CU_ASSERT_STRING_EQUAL(out_text(&r[i].fin), "done\n");
        if (!r[i].fin.ok)
            fprintf(stderr, "probe %d: %s\n", i, err_text(&r[i].fin));
    }
    CU_ASSERT_EQUAL(atomic_load(&probe_max), 1);
    if (atomic_load(&probe_max) != 1)
        fprintf(stderr, "\n  %d probes ran at once\n", atomic_load(&probe_max));
    for (int i = 0; i < 3; i++)
        seen_free(&r[i]);

    /* a direct call waits for the script's probe too, and vice versa */
    atomic_store(&probe_max, 0);
    seen w, d;
    seen_init(&w);
    seen_init(&d);
    start_worker(s, probe_code, &w);
    th_call_opts o;
    memset(&o, 0, sizeof o);
    uint64_t id;
    for (int i = 0; i < 3; i++) {
        seen one;
        seen_init(&one);
        CU_ASSERT_EQUAL(th_call_start(s, "probe", (const uint8_t *)"\x80", 1,
                                      &o, on_event, &one, &id),
                        0);
        CU_ASSERT_TRUE(wait_done(&one, 10000));
        CU_ASSERT_TRUE(one.fin.ok);
        seen_free(&one);
    }
    CU_ASSERT_TRUE(wait_done(&w, 10000));
    CU_ASSERT_TRUE(w.fin.ok);
    CU_ASSERT_EQUAL(atomic_load(&probe_max), 1);
    seen_free(&w);
    seen_free(&d);
    th_session_close(s);
    chost_down(&fx);

    /* the toolset's own max_concurrency: a script holds one slot and its
     * calls run on it (with 1 slot, no deadlock) */
    CU_ASSERT_EQUAL_FATAL(phost_up(&fx, 2, "    max_concurrency: 1\n"), 0);
    s = open_as(&fx, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    seen t;
    seen_init(&t);
    start_worker(s, probe_code, &t);
    CU_ASSERT_TRUE(wait_done(&t, 10000));
    CU_ASSERT_TRUE(t.fin.ok);
    CU_ASSERT_STRING_EQUAL(out_text(&t.fin), "done\n");
    seen_free(&t);
    th_session_close(s);
    chost_down(&fx);
}

/* A nested call waiting for a slot ends with its deadline. */
static void test_nested_slot_wait_deadline(void)
{
    chost fx;
    CU_ASSERT_EQUAL_FATAL(phost_up(&fx, 2,
                                   "    tool_overrides:\n"
                                   "      echo_async:\n"
                                   "        max_concurrency: 1\n"
                                   "        timeout: 1500ms\n"),
                          0);
    th_session *s = open_as(&fx, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    /* a direct call holds the one slot for its 1.5 s (far beyond the
     * script's 100 ms, so that a loaded machine cannot blur the two) */
    th_buf args = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &args, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str_with_body(&pk, "text", 4);
    msgpack_pack_str_with_body(&pk, "x", 1);
    msgpack_pack_str_with_body(&pk, "steps", 5);
    msgpack_pack_int(&pk, 100);
    msgpack_pack_str_with_body(&pk, "delay_ms", 8);
    msgpack_pack_int(&pk, 100);
    th_call_opts o;
    memset(&o, 0, sizeof o);
    seen held;
    seen_init(&held);
    uint64_t id;
    CU_ASSERT_EQUAL(th_call_start(s, "echo_async", args.data, args.len, &o,
                                  on_event, &held, &id),
                    0);
    th_buf_destroy(&args);
    /* the held call runs (its first progress), the slot is taken: an
     * event, not a 50 ms nap */
    struct timespec t0, tn;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        pthread_mutex_lock(&held.mu);
        int np = held.progress;
        pthread_mutex_unlock(&held.mu);
        clock_gettime(CLOCK_MONOTONIC, &tn);
        if (np > 0 || (tn.tv_sec - t0.tv_sec) * 1000 > (long)th_test_ms(5000))
            break;
        struct timespec nap = {0, 1000000L};
        nanosleep(&nap, NULL);
    }
    pthread_mutex_lock(&held.mu);
    CU_ASSERT_TRUE(held.progress > 0);
    pthread_mutex_unlock(&held.mu);
    /* a script with a 100 ms deadline calls the tool: its call waits
     * for the slot and ends with the deadline, long before the slot frees
     * (before, it ran at once beside the holder and printed "true") */
    seen c;
    seen_init(&c);
    th_buf ca = TH_BUF_INIT;
    msgpack_packer_init(&pk, &ca, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "code", 4);
    static const char code[] =
        "local r = tools.echo_async{text = 'y', steps = 1, delay_ms = 1}\n"
        "print(r.ok, r.error and r.error.code)";
    msgpack_pack_str_with_body(&pk, code, sizeof code - 1);
    msgpack_pack_str_with_body(&pk, "timeout_ms", 10);
    msgpack_pack_int(&pk, 100);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    CU_ASSERT_EQUAL(th_call_start(s, "run_code", ca.data, ca.len, &o,
                                  on_event, &c, &id),
                    0);
    th_buf_destroy(&ca);
    CU_ASSERT_TRUE(wait_done(&c, 10000));
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    CU_ASSERT_FALSE(c.fin.ok);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_text(&c.fin), "timed out"));
    CU_ASSERT_STRING_EQUAL(out_text(&c.fin), "");
    if (c.fin.ok)
        fprintf(stderr, "\n  slot wait: %.3f s: %s / %s\n", secs,
                out_text(&c.fin), err_text(&c.fin));
    /* it ended while the slot was still held (the held call runs on):
     * no wait for the slot to free */
    pthread_mutex_lock(&held.mu);
    CU_ASSERT_FALSE(held.done);
    pthread_mutex_unlock(&held.mu);
    CU_ASSERT_TRUE(wait_done(&held, 10000));
    CU_ASSERT_EQUAL(held.fin.kind, TH_RESULT_ERROR);
    seen_free(&c);
    seen_free(&held);
    th_session_close(s);
    chost_down(&fx);
}

/* A call's timeout_ms may lower its toolset's timeout, never raise it: from
 * a client and from run_code (only host.max_timeout capped it before). */
static void test_timeout_capped_by_toolset(void)
{
    chost fx;
    CU_ASSERT_EQUAL_FATAL(phost_up(&fx, 2,
                                   "    tool_overrides:\n"
                                   "      echo_async:\n"
                                   "        timeout: 200ms\n"),
                          0);
    th_session *s = open_as(&fx, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    /* 10 steps of 100 ms: 1 s of work */
    th_buf args = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &args, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str_with_body(&pk, "text", 4);
    msgpack_pack_str_with_body(&pk, "x", 1);
    msgpack_pack_str_with_body(&pk, "steps", 5);
    msgpack_pack_int(&pk, 10);
    msgpack_pack_str_with_body(&pk, "delay_ms", 8);
    msgpack_pack_int(&pk, 100);
    th_call_opts o;
    memset(&o, 0, sizeof o);
    o.timeout_ms = 5000;
    th_result_copy r;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    CU_ASSERT_EQUAL(th_call_sync(s, "echo_async", args.data, args.len, &o,
                                 NULL, NULL, NULL, &r),
                    0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_ERROR);
    CU_ASSERT_EQUAL(r.error, TH_ETIMEOUT);
    /* which timeout ended it, by its message rather than by the time it
     * took (a loaded machine stretches the latter) */
    CU_ASSERT_PTR_NOT_NULL(r.message ? strstr(r.message, "timed out after 200 ms") : NULL);
    (void)secs;
    th_result_copy_destroy(&r);
    /* a lower timeout_ms still lowers it */
    o.timeout_ms = 50;
    clock_gettime(CLOCK_MONOTONIC, &a);
    CU_ASSERT_EQUAL(th_call_sync(s, "echo_async", args.data, args.len, &o,
                                 NULL, NULL, NULL, &r),
                    0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    secs = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    CU_ASSERT_EQUAL(r.error, TH_ETIMEOUT);
    CU_ASSERT_PTR_NOT_NULL(r.message ? strstr(r.message, "timed out after 50 ms") : NULL);
    th_result_copy_destroy(&r);
    th_buf_destroy(&args);

    /* from run_code: the nested call gets the time left of the script
     * (about 5 s) as its timeout_ms, capped to the tool's 200 ms */
    seen c;
    seen_init(&c);
    clock_gettime(CLOCK_MONOTONIC, &a);
    CU_ASSERT_EQUAL(run_sync(s,
                             "local r = tools.echo_async{text = 'x', steps = "
                             "10, delay_ms = 100}\n"
                             "print(r.ok, r.error and r.error.code)",
                             &c),
                    0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    secs = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    CU_ASSERT_TRUE(c.fin.ok);
    CU_ASSERT_STRING_EQUAL(out_text(&c.fin), "false\ttimeout\n");
    if (strcmp(out_text(&c.fin), "false\ttimeout\n") != 0)
        fprintf(stderr, "\n  nested: %s / %s\n", out_text(&c.fin),
                err_text(&c.fin));
    /* "timeout" with 1 s of work and ~5 s left to the script: the 200 ms
     * cap applied (no bound on the time taken: the machine's load) */
    seen_free(&c);
    th_session_close(s);
    chost_down(&fx);
}

/* ---- 4: a result's meta: there when the output was cut, lazy otherwise ---- */

/* A tool result carries a `meta` key only when it has something in it (the
 * host cut a stream: toolhost.output); otherwise `r.meta` is an empty table
 * made on first read and stored in r, so pairs(r) lists no meta until it
 * is read.  The returned value (packed with rawget) has no meta either. */
static void test_result_meta_lazy(void)
{
    chost fx;
    CU_ASSERT_EQUAL_FATAL(chost_up(&fx, 2), 0);
    th_session *s = open_as(&fx, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    static const char script[] =
        "local function keys(t)\n"
        "  local k = {}\n"
        "  for name in pairs(t) do k[#k + 1] = name end\n"
        "  table.sort(k)\n"
        "  return table.concat(k, ',')\n"
        "end\n"
        /* cut by command_output (8000): meta.toolhost.output, a real key */
        "local big = tools.echo{text = string.rep('x', 9000)}\n"
        "assert(rawget(big, 'meta'), 'cut: meta is a key')\n"
        "assert(big.meta.toolhost.output, 'cut: meta.toolhost.output')\n"
        "print(keys(big))\n"
        /* nothing cut, no meta from the tool: no key until read */
        "local r = tools.echo{text = 'hi'}\n"
        "print(keys(r))\n"
        "assert(rawget(r, 'meta') == nil)\n"
        "local m = r.meta\n"
        "assert(type(m) == 'table' and next(m) == nil and m.x == nil)\n"
        "assert(r.meta == m and rawget(r, 'meta') == m)\n"
        "print(keys(r))\n"
        "assert(r.error == nil and r.structured == nil and r.zzz == nil)\n"
        /* each result gets its own, and meta is writable like any table */
        "local a, b = tools.echo{text = 'a'}, tools.echo{text = 'b'}\n"
        "assert(a.meta ~= b.meta)\n"
        "a.meta.note = 'mine'\n"
        "assert(a.meta.note == 'mine' and b.meta.note == nil)\n"
        /* the shared metatable is out of reach; a script's own may replace it */
        "assert(getmetatable(b) == false)\n"
        "local c = tools.echo{text = 'c'}\n"
        "setmetatable(c, {__index = function() return 42 end})\n"
        "assert(c.meta == 42 and c.stdout == 'c')\n"
        "assert(not pcall(setmetatable, b, {__gc = print}))\n"
        "return tools.echo{text = 'v'}\n";
    seen a;
    seen_init(&a);
    CU_ASSERT_EQUAL(run_sync(s, script, &a), 0);
    CU_ASSERT_TRUE(a.fin.ok);
    CU_ASSERT_STRING_EQUAL(out_text(&a.fin),
                           "meta,ok,stderr,stdout\n"
                           "ok,stderr,stdout\n"
                           "meta,ok,stderr,stdout\n");
    if (!a.fin.ok || strncmp(out_text(&a.fin), "meta,ok,stderr", 14) != 0)
        fprintf(stderr, "\n  lazy meta: %s / %s\n", out_text(&a.fin),
                err_text(&a.fin));
    /* the returned value, in the run's meta.value: {ok, stdout, stderr} */
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    bool found = false;
    if (a.fin.meta.len &&
        msgpack_unpack_next(&u, (const char *)a.fin.meta.data, a.fin.meta.len,
                            NULL) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP) {
        for (uint32_t i = 0; i < u.data.via.map.size; i++) {
            const msgpack_object_kv *kv = &u.data.via.map.ptr[i];
            if (kv->key.type == MSGPACK_OBJECT_STR &&
                kv->key.via.str.size == 5 &&
                memcmp(kv->key.via.str.ptr, "value", 5) == 0) {
                found = true;
                CU_ASSERT_EQUAL(kv->val.type, MSGPACK_OBJECT_MAP);
                if (kv->val.type == MSGPACK_OBJECT_MAP)
                    CU_ASSERT_EQUAL(kv->val.via.map.size, 3);
            }
        }
    }
    CU_ASSERT_TRUE(found);
    msgpack_unpacked_destroy(&u);
    seen_free(&a);
    th_session_close(s);
    chost_down(&fx);
}

void th_suite_code_host(void)
{
    CU_pSuite s = CU_add_suite("code_host", NULL, NULL);
    CU_add_test(s, "limits_of_own_toolset", test_limits_of_own_toolset);
    CU_add_test(s, "nested_max_concurrency", test_nested_max_concurrency);
    CU_add_test(s, "nested_slot_wait_deadline",
                test_nested_slot_wait_deadline);
    CU_add_test(s, "timeout_capped_by_toolset",
                test_timeout_capped_by_toolset);
    CU_add_test(s, "call_toolset_null", test_call_toolset_null);
    CU_add_test(s, "description_limits", test_description_limits);
    CU_add_test(s, "progress_inline", test_progress_inline);
    CU_add_test(s, "result_meta_lazy", test_result_meta_lazy);
}
