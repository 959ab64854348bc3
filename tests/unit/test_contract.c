/* test_contract.c - the plugin contract in process (issue 14): every misuse
 * of a call handle is reported (tool, call id, what) and answered
 * TOOLHOST_ESTATE, never a hang or a use after free (run this suite under
 * ASan and `make valgrind SUITES=contract`); a host with a suspended call
 * that is never completed closes in bounded time; a plugin with
 * TOOLHOST_PLUGIN_SERIAL never runs two calls of its tools at once, and a
 * nested call into it from its own call is refused. */
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include "common/th_test.h"
#include "unit/test_manager_fx.h"

static th_host *H;
static th_session *S;

/* ---- Log capture ---------------------------------------------------------------- */

static char *log_dir;
static int log_fd = -1;

static void log_capture(void)
{
    log_dir = th_test_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/log", log_dir);
    log_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    th_log_set_fd(log_fd);
}

/* The captured log so far (malloc'ed). */
static char *log_text(void)
{
    off_t n = lseek(log_fd, 0, SEEK_END);
    char *s = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
    if (s && n > 0)
        (void)!pread(log_fd, s, (size_t)n, 0);
    return s;
}

static bool log_has(const char *needle)
{
    char *s = log_text();
    bool ok = s && strstr(s, needle) != NULL;
    if (!ok)
        fprintf(stderr, "log lacks \"%s\":\n%s\n", needle, s ? s : "");
    free(s);
    return ok;
}

static void log_release(void)
{
    th_log_set_fd(2);
    close(log_fd);
    log_fd = -1;
    th_test_rmtree(log_dir);
    free(log_dir);
    log_dir = NULL;
}

/* ---- Misbehaving tools ---------------------------------------------------------- */

/* What the plugin's threads saw, for the test to check. */
static atomic_int ct_rc_second, ct_rc_write, ct_rc_progress, ct_rc_meta, ct_rc_complete;
static atomic_int ct_thread_done;
static _Atomic(toolhost_call *) ct_kept;

static void *th_complete_twice(void *arg)
{
    toolhost_call *c = arg;
    c->host->write(c, TOOLHOST_STDOUT, "once", 4);
    c->host->complete(c, TOOLHOST_OK);
    atomic_store(&ct_rc_second, c->host->complete(c, TOOLHOST_OK));
    atomic_store(&ct_thread_done, 1);
    return NULL;
}

/* Set by the test once the call's record is freed (a tombstone left). */
static atomic_int ct_go;

static void *th_write_after(void *arg)
{
    toolhost_call *c = arg;
    c->host->write(c, TOOLHOST_STDOUT, "done", 4);
    c->host->complete(c, TOOLHOST_OK);
    /* the test says when the call is freed (bounded: whatever it does) */
    int64_t until = mono_ms() + th_test_ms(20000);
    while (!atomic_load(&ct_go) && mono_ms() < until)
        nap_ms(1);
    atomic_store(&ct_rc_write, c->host->write(c, TOOLHOST_STDOUT, "late", 4));
    atomic_store(&ct_rc_progress, c->host->progress(c, 0.5, "late", NULL, 0));
    static const uint8_t map[] = {0x80};
    atomic_store(&ct_rc_meta, c->host->set_meta(c, map, sizeof map));
    atomic_store(&ct_thread_done, 1);
    return NULL;
}

static void *th_complete_42(void *arg)
{
    toolhost_call *c = arg;
    atomic_store(&ct_rc_complete, c->host->complete(c, 42));
    atomic_store(&ct_thread_done, 1);
    return NULL;
}

static void spawn(void *(*fn)(void *), toolhost_call *c)
{
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, fn, c), 0);
    pthread_detach(th);
}

static int ct_susp_ok(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st, (void)t, (void)a, (void)l;
    if (c->host->suspend(c) != 0)
        return TOOLHOST_FAILED;
    return TOOLHOST_OK; /* misuse: PENDING expected */
}

static int ct_twice(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st, (void)t, (void)a, (void)l;
    if (c->host->suspend(c) != 0)
        return TOOLHOST_FAILED;
    spawn(th_complete_twice, c);
    return TOOLHOST_PENDING;
}

static int ct_late(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st, (void)t, (void)a, (void)l;
    if (c->host->suspend(c) != 0)
        return TOOLHOST_FAILED;
    spawn(th_write_after, c);
    return TOOLHOST_PENDING;
}

static int ct_status42(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st, (void)t, (void)a, (void)l;
    if (c->host->suspend(c) != 0)
        return TOOLHOST_FAILED;
    spawn(th_complete_42, c);
    return TOOLHOST_PENDING;
}

static int ct_ret42(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st, (void)t, (void)c, (void)a, (void)l;
    return 42;
}

/* Suspends and keeps the handle; the test completes it much later. */
static int ct_never(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st, (void)t, (void)a, (void)l;
    if (c->host->suspend(c) != 0)
        return TOOLHOST_FAILED;
    atomic_store(&ct_kept, c);
    return TOOLHOST_PENDING;
}

/* ---- Writes racing the call's end, and each other ------------------------------- */

static atomic_int wr_ok, wr_rc, wr_done, wr_cstarted;
static atomic_int wr_rc_owner, wr_rc_thread, wr_started;

/* Writes `chunk` (2 bytes) until a write is refused (1 s at most); wr_ok
 * counts the accepted ones, wr_rc keeps the last answer. */
static void write_until_refused(toolhost_call *c, const char *chunk)
{
    int64_t until = mono_ms() + th_test_ms(1000); /* the completer runs first */
    while (!atomic_load(&wr_cstarted) && mono_ms() < until)
        sched_yield();
    int rc = 0, n = 0;
    until = mono_ms() + th_test_ms(1000);
    while ((n % 256 || mono_ms() < until) &&
           (rc = c->host->write(c, TOOLHOST_STDOUT, chunk, 2)) == 0)
        atomic_store(&wr_ok, ++n);
    atomic_store(&wr_rc, rc);
}

/* The call's owner after suspend(): completes it once 20 writes went in,
 * while another thread goes on writing. */
static void *th_complete_soon(void *arg)
{
    toolhost_call *c = arg;
    atomic_store(&wr_cstarted, 1);
    int64_t until = mono_ms() + th_test_ms(1000);
    while (atomic_load(&wr_ok) < 20 && mono_ms() < until)
        sched_yield();
    c->host->complete(c, TOOLHOST_OK);
    atomic_fetch_add(&wr_done, 1);
    return NULL;
}

static void *th_write_on(void *arg)
{
    write_until_refused(arg, "w\n");
    atomic_fetch_add(&wr_done, 1);
    return NULL;
}

/* execute()'s own thread writes on after suspend() (a misuse: the call
 * was handed off) while the plugin thread completes it. */
static int ct_wr_owner_race(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st, (void)t, (void)a, (void)l;
    if (c->host->suspend(c) != 0)
        return TOOLHOST_FAILED;
    spawn(th_complete_soon, c);
    write_until_refused(c, "w\n");
    atomic_fetch_add(&wr_done, 1);
    return TOOLHOST_PENDING;
}

/* An async tool: one plugin thread completes the call while another
 * writes to it. */
static int ct_wr_thread_race(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st, (void)t, (void)a, (void)l;
    if (c->host->suspend(c) != 0)
        return TOOLHOST_FAILED;
    spawn(th_complete_soon, c);
    spawn(th_write_on, c);
    return TOOLHOST_PENDING;
}

typedef struct wr_job {
    toolhost_call *c;
    long long n;
} wr_job;

static void *th_write_b(void *arg)
{
    wr_job *j = arg;
    atomic_store(&wr_started, 1);
    for (long long i = 0; i < j->n; i++)
        if (j->c->host->write(j->c, TOOLHOST_STDOUT, "b\n", 2) != 0)
            atomic_fetch_add(&wr_rc_thread, 1);
    return NULL;
}

/* execute() writes "a\n" n times while a thread of its own writes "b\n"
 * n times into the same call (not suspended: a misuse of the Owner
 * class the host serialises). */
static int ct_wr_two(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st, (void)t;
    wr_job j = {c, arg_int(a, l, "n", 100)};
    pthread_t th;
    atomic_store(&wr_started, 0);
    if (pthread_create(&th, NULL, th_write_b, &j) != 0)
        return TOOLHOST_FAILED;
    int64_t until = mono_ms() + th_test_ms(2000); /* both write at once */
    while (!atomic_load(&wr_started) && mono_ms() < until)
        sched_yield();
    for (long long i = 0; i < j.n; i++)
        if (c->host->write(c, TOOLHOST_STDOUT, "a\n", 2) != 0)
            atomic_fetch_add(&wr_rc_owner, 1);
    pthread_join(th, NULL);
    return TOOLHOST_OK;
}

static void *th_write_once(void *arg)
{
    toolhost_call *c = arg;
    atomic_store(&wr_rc_thread, c->host->write(c, TOOLHOST_STDOUT, "t", 1));
    return NULL;
}

/* Waits (3 s at most) for its cancellation (a timeout), then writes from
 * its own thread and from another one. */
static int ct_wr_cancelled(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st, (void)t, (void)a, (void)l;
    c->host->write(c, TOOLHOST_STDOUT, "before", 6);
    int64_t until = mono_ms() + th_test_ms(3000);
    while (!c->host->is_cancelled(c) && mono_ms() < until)
        nap_ms(1);
    atomic_store(&wr_rc_owner, c->host->write(c, TOOLHOST_STDOUT, "o", 1));
    pthread_t th;
    if (pthread_create(&th, NULL, th_write_once, c) == 0)
        pthread_join(th, NULL);
    return TOOLHOST_OK;
}

/* ---- Polls racing the call's end ----------------------------------------------- */

/* A plugin thread polls is_cancelled() and time_left_ms() (both read
 * `ended` without the call's lock while it is not set: call_cb.c stale)
 * while another thread completes the call.  The interleaving is forced,
 * not hoped for: the poller polls once, then lets the completer go (a
 * handshake) and polls on in a tight loop until a poll finds the call
 * ended; so one poll surely ran before the end and one after it, and the
 * polls in between race complete() (ASan, TSan: `make SANITIZER=thread`
 * runs this suite).  The bound on the loop is a safety net only. */
static atomic_int pl_polls, pl_cancel_rc, pl_left_rc, pl_done;
static atomic_int pl_ready, pl_first_rc, pl_completed;
static _Atomic int64_t pl_first_left;

static void *th_poll(void *arg)
{
    toolhost_call *c = arg;
    atomic_store(&pl_first_rc, c->host->is_cancelled(c));
    atomic_store(&pl_first_left, c->host->time_left_ms(c));
    int n = 1;
    atomic_store(&pl_ready, 1); /* the completer may end the call now */
    int64_t until = mono_ms() + th_test_ms(20000);
    for (;;) {
        int rc = c->host->is_cancelled(c);
        int64_t left = c->host->time_left_ms(c);
        n++;
        if (rc || mono_ms() > until) {
            atomic_store(&pl_cancel_rc, rc);
            atomic_store(&pl_left_rc, (int)left);
            break;
        }
    }
    atomic_store(&pl_polls, n);
    atomic_store(&pl_done, 1);
    return NULL;
}

static void *th_poll_complete(void *arg)
{
    toolhost_call *c = arg;
    int64_t until = mono_ms() + th_test_ms(20000);
    while (!atomic_load(&pl_ready) && mono_ms() < until)
        sched_yield();
    c->host->write(c, TOOLHOST_STDOUT, "done", 4);
    c->host->complete(c, TOOLHOST_OK);
    atomic_store(&pl_completed, 1);
    return NULL;
}

/* Two plugin threads ask caller() at once while a third completes the
 * call (all misuse but the first: caller() is Owner): each answer is
 * either the caller, the same user name string for both threads, or
 * TOOLHOST_ESTATE once the call ended; the name is looked up once (no
 * leak, no write racing another). */
static atomic_int cr_ok, cr_estate, cr_bad, cr_done;
static const char *_Atomic cr_user;

static void *th_caller(void *arg)
{
    toolhost_call *c = arg;
    for (int i = 0; i < 200; i++) {
        toolhost_caller who;
        memset(&who, 0, sizeof who);
        who.struct_size = sizeof who;
        int rc = c->host->caller(c, &who);
        if (rc == TOOLHOST_ESTATE) {
            atomic_fetch_add(&cr_estate, 1);
            break;
        }
        const char *seen = NULL;
        /* open_trusted's principal: uid 1000, named or not here */
        if (rc == 0 && who.uid == 1000 && who.session &&
            (atomic_compare_exchange_strong(&cr_user, &seen, who.user) ||
             seen == who.user))
            atomic_fetch_add(&cr_ok, 1);
        else
            atomic_fetch_add(&cr_bad, 1);
    }
    atomic_fetch_add(&cr_done, 1);
    return NULL;
}

static void *th_caller_complete(void *arg)
{
    toolhost_call *c = arg;
    nap_ms(1);
    c->host->write(c, TOOLHOST_STDOUT, "done", 4);
    c->host->complete(c, TOOLHOST_OK);
    return NULL;
}

static int ct_caller_race(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st, (void)t, (void)a, (void)l;
    if (c->host->suspend(c) != 0)
        return TOOLHOST_FAILED;
    spawn(th_caller, c);
    spawn(th_caller, c);
    spawn(th_caller_complete, c);
    return TOOLHOST_PENDING;
}

static int ct_poll_race(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st, (void)t, (void)a, (void)l;
    if (c->host->suspend(c) != 0)
        return TOOLHOST_FAILED;
    spawn(th_poll, c);
    spawn(th_poll_complete, c);
    return TOOLHOST_PENDING;
}

static const toolhost_param wr_n[] = {P("n", TOOLHOST_TYPE_INTEGER, 0, "writes")};

static const toolhost_tool ct_tools[] = {
    T("c_susp_ok", NULL, 0, 0, ct_susp_ok),
    T("c_twice", NULL, 0, 0, ct_twice),
    T("c_late", NULL, 0, 0, ct_late),
    T("c_status42", NULL, 0, 0, ct_status42),
    T("c_ret42", NULL, 0, 0, ct_ret42),
    T("c_never", NULL, 0, 0, ct_never),
    T("c_wr_owner_race", NULL, 0, 0, ct_wr_owner_race),
    T("c_wr_thread_race", NULL, 0, 0, ct_wr_thread_race),
    T("c_wr_two", wr_n, 1, 0, ct_wr_two),
    T("c_wr_cancelled", NULL, 0, 0, ct_wr_cancelled),
    T("c_poll_race", NULL, 0, 0, ct_poll_race),
    T("c_caller_race", NULL, 0, 0, ct_caller_race),
};

static const toolhost_plugin ct_plugin = {
    .struct_size = sizeof(toolhost_plugin),
    .abi_major = TOOLHOST_ABI_MAJOR,
    .abi_minor = TOOLHOST_ABI_MINOR,
    .name = "contract",
    .version = "1",
    .description = "contract misuse fixtures",
    .tools = ct_tools,
    .n_tools = sizeof ct_tools / sizeof ct_tools[0],
};

/* ---- A plugin with TOOLHOST_PLUGIN_SERIAL ---------------------------------------- */

static atomic_int ser_conc, ser_max, ser_runs;

static int ser_work(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st, (void)t, (void)c;
    int n = atomic_fetch_add(&ser_conc, 1) + 1;
    int m = atomic_load(&ser_max);
    while (n > m && !atomic_compare_exchange_weak(&ser_max, &m, n))
        ;
    nap_ms((long)arg_int(a, l, "ms", 30));
    atomic_fetch_sub(&ser_conc, 1);
    atomic_fetch_add(&ser_runs, 1);
    return TOOLHOST_OK;
}

/* Calls its sibling s_one inline: refused (it would wait for itself). */
static int ser_nested(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st, (void)t, (void)a, (void)l;
    th_buf args = A(1, "ms", 'i', 1LL);
    th_result_copy r;
    int rc = th_call_sync(th_call_session(c), "s_one", args.data, args.len, NULL, NULL,
                          NULL, NULL, &r);
    th_buf_destroy(&args);
    const char *msg = rc == 0 && r.kind == TH_RESULT_ERROR && r.message ? r.message : "no error";
    c->host->write(c, TOOLHOST_STDOUT, msg, strlen(msg));
    if (rc == 0)
        th_result_copy_destroy(&r);
    return TOOLHOST_OK;
}

static const toolhost_param ser_ms[] = {P("ms", TOOLHOST_TYPE_INTEGER, 0, "ms")};

static const toolhost_tool ser_tools[] = {
    T("s_one", ser_ms, 1, 0, ser_work),
    T("s_two", ser_ms, 1, 0, ser_work),
    T("s_nested", NULL, 0, 0, ser_nested),
};

static const toolhost_plugin ser_plugin = {
    .struct_size = sizeof(toolhost_plugin),
    .abi_major = TOOLHOST_ABI_MAJOR,
    .abi_minor = TOOLHOST_ABI_MINOR,
    .name = "serialplug",
    .version = "1",
    .description = "a plugin-wide serial plugin",
    .tools = ser_tools,
    .n_tools = sizeof ser_tools / sizeof ser_tools[0],
    .flags = TOOLHOST_PLUGIN_SERIAL,
};

static void open_ct(uint32_t workers, uint64_t grace_ms)
{
    th_config *c = cfg_new(workers, 1, 64);
    c->host.shutdown_grace_ms = grace_ms;
    c->host.session_grace_ms = grace_ms;
    c->host.lost_worker_grace_ms = grace_ms;
    c->host.log_level = TOOLHOST_LOG_WARN;
    cfg_toolset(c, "default", all_tools);
    static const toolhost_plugin *const b[] = {&ct_plugin, &ser_plugin};
    th_host_opts o = {b, 2};
    th_error e;
    th_error_clear(&e);
    int rc = th_host_open_ex(c, &o, &H, &e);
    if (rc)
        fprintf(stderr, "host open: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    S = open_trusted(H);
}

static void close_ct(void)
{
    if (S)
        th_session_close(S);
    S = NULL;
    if (H)
        th_host_close(H);
    H = NULL;
}

/* Deadlines for what must happen, scaled (th_test_ms). */
static bool wait_flag(atomic_int *f, int ms)
{
    int64_t until = mono_ms() + th_test_ms((unsigned)ms);
    while (!atomic_load(f) && mono_ms() < until)
        nap_ms(1);
    return atomic_load(f) != 0;
}

static bool wait_flag_n(atomic_int *f, int n, int ms)
{
    int64_t until = mono_ms() + th_test_ms((unsigned)ms);
    while (atomic_load(f) < n && mono_ms() < until)
        nap_ms(1);
    return atomic_load(f) >= n;
}

static bool msg_has(const th_result_copy *r, const char *s)
{
    return r->message && strstr(r->message, s) != NULL;
}

/* ---- Tests -------------------------------------------------------------------------- */

/* suspend() then OK: before, the call hung until its timeout and its
 * suspend reference was never dropped (host close waited for ever). */
static void test_suspend_then_ok(void)
{
    log_capture();
    open_ct(2, 300);
    rec r;
    rec_init(&r);
    int64_t t0 = mono_ms();
    uint64_t id = start(S, "c_susp_ok", A(0), NULL, &r);
    CU_ASSERT_TRUE(rec_wait(&r, 3000));
    CU_ASSERT_TRUE(mono_ms() - t0 < 2000); /* not the 20 s timeout */
    CU_ASSERT_EQUAL(r.final.kind, TH_RESULT_ERROR);
    CU_ASSERT_EQUAL(r.final.error, TH_ETOOL);
    CU_ASSERT_TRUE(msg_has(&r.final, "after suspend()"));
    char want[96];
    snprintf(want, sizeof want, "tool=c_susp_ok call=%llu", (unsigned long long)id);
    CU_ASSERT_TRUE(log_has(want));
    rec_free(&r);
    t0 = mono_ms();
    close_ct();
    CU_ASSERT_TRUE(mono_ms() - t0 < 1000); /* nothing left running */
    log_release();
}

/* complete() twice: the second is answered ESTATE and logged (before: a
 * use after free of the call). */
static void test_complete_twice(void)
{
    log_capture();
    open_ct(2, 300);
    for (int i = 0; i < 3; i++) {
        atomic_store(&ct_thread_done, 0);
        atomic_store(&ct_rc_second, 99);
        rec r;
        rec_init(&r);
        uint64_t id = start(S, "c_twice", A(0), NULL, &r);
        CU_ASSERT_TRUE(rec_wait(&r, 3000));
        CU_ASSERT_TRUE(r.final.ok);
        CU_ASSERT_TRUE(out_is(&r.final, "once"));
        CU_ASSERT_TRUE(wait_flag(&ct_thread_done, 3000));
        CU_ASSERT_EQUAL(atomic_load(&ct_rc_second), TOOLHOST_ESTATE);
        char want[128];
        snprintf(want, sizeof want, "tool=c_twice call=%llu: complete() called twice",
                 (unsigned long long)id);
        CU_ASSERT_TRUE(log_has(want));
        rec_free(&r);
    }
    close_ct();
    log_release();
}

/* write/progress/set_meta from a plugin thread after complete(): ESTATE,
 * one log line, the result untouched (before: invalid write in the
 * host's output buffer of a freed call). */
static void test_write_after_end(void)
{
    log_capture();
    open_ct(2, 300);
    atomic_store(&ct_thread_done, 0);
    atomic_store(&ct_go, 0);
    unsigned long live0 = th_host_live_calls(H);
    rec r;
    rec_init(&r);
    uint64_t id = start(S, "c_late", A(0), NULL, &r);
    CU_ASSERT_TRUE(rec_wait(&r, 3000));
    /* the late calls come once the call's record is freed (a tombstone
     * answers them), an event where a 20 ms nap was */
    int64_t until = mono_ms() + th_test_ms(3000);
    while (th_host_live_calls(H) != live0 && mono_ms() < until)
        nap_ms(1);
    CU_ASSERT_EQUAL(th_host_live_calls(H), live0);
    atomic_store(&ct_go, 1);
    CU_ASSERT_TRUE(wait_flag(&ct_thread_done, 3000));
    CU_ASSERT_TRUE(r.final.ok);
    CU_ASSERT_TRUE(out_is(&r.final, "done"));
    CU_ASSERT_EQUAL(atomic_load(&ct_rc_write), TOOLHOST_ESTATE);
    CU_ASSERT_EQUAL(atomic_load(&ct_rc_progress), TOOLHOST_ESTATE);
    CU_ASSERT_EQUAL(atomic_load(&ct_rc_meta), TOOLHOST_ESTATE);
    char want[128];
    snprintf(want, sizeof want, "tool=c_late call=%llu: write() after the call ended",
             (unsigned long long)id);
    CU_ASSERT_TRUE(log_has(want));
    /* one line per call, not one per misuse */
    char *s = log_text();
    CU_ASSERT_PTR_NULL(s ? strstr(s, "progress() after the call ended") : NULL);
    free(s);
    rec_free(&r);
    close_ct();
    log_release();
}

/* complete(call, 42) and execute() returning 42: a reported tool error
 * (before: complete(42) was silently a plain failure). */
static void test_unknown_status(void)
{
    log_capture();
    open_ct(2, 300);
    atomic_store(&ct_thread_done, 0);
    rec r;
    rec_init(&r);
    uint64_t id = start(S, "c_status42", A(0), NULL, &r);
    CU_ASSERT_TRUE(rec_wait(&r, 3000));
    CU_ASSERT_TRUE(wait_flag(&ct_thread_done, 3000));
    CU_ASSERT_EQUAL(atomic_load(&ct_rc_complete), TOOLHOST_EINVAL);
    CU_ASSERT_EQUAL(r.final.kind, TH_RESULT_ERROR);
    CU_ASSERT_EQUAL(r.final.error, TH_ETOOL);
    CU_ASSERT_TRUE(msg_has(&r.final, "unknown status 42"));
    char want[96];
    snprintf(want, sizeof want, "tool=c_status42 call=%llu", (unsigned long long)id);
    CU_ASSERT_TRUE(log_has(want));
    rec_free(&r);

    rec_init(&r);
    id = start(S, "c_ret42", A(0), NULL, &r);
    CU_ASSERT_TRUE(rec_wait(&r, 3000));
    CU_ASSERT_EQUAL(r.final.kind, TH_RESULT_ERROR);
    CU_ASSERT_TRUE(msg_has(&r.final, "returned 42"));
    snprintf(want, sizeof want, "tool=c_ret42 call=%llu", (unsigned long long)id);
    CU_ASSERT_TRUE(log_has(want));
    rec_free(&r);
    close_ct();
    log_release();
}

/* A suspended call never completed: host close waits a bounded time,
 * abandons it with a log line, and a complete() much later is safe (the
 * host's memory was kept). */
static void test_close_suspended_never_completed(void)
{
    log_capture();
    open_ct(2, 200);
    atomic_store(&ct_kept, NULL);
    rec r;
    rec_init(&r);
    th_call_opts o = {.timeout_ms = 100};
    start(S, "c_never", A(0), &o, &r);
    CU_ASSERT_TRUE(rec_wait(&r, 3000)); /* its timeout answers it */
    CU_ASSERT_EQUAL(r.final.error, TH_ETIMEOUT);
    int64_t t0 = mono_ms();
    close_ct();
    int64_t took = mono_ms() - t0;
    CU_ASSERT_TRUE(took < 3000);
    CU_ASSERT_TRUE(log_has("host close: abandoning 1 call still running"));
    toolhost_call *c = atomic_load(&ct_kept);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(c->host->complete(c, TOOLHOST_OK), 0); /* ends it, late */
    CU_ASSERT_EQUAL(c->host->write(c, TOOLHOST_STDOUT, "x", 1), TOOLHOST_ESTATE);
    rec_free(&r);
    log_release();
}

/* TOOLHOST_PLUGIN_SERIAL: two tools of the plugin never overlap (before:
 * the flag was read and ignored: 4 calls ran at once). */
static void test_plugin_serial(void)
{
    open_ct(4, 300);
    atomic_store(&ser_conc, 0);
    atomic_store(&ser_max, 0);
    atomic_store(&ser_runs, 0);
    rec r[6];
    for (int i = 0; i < 6; i++) {
        rec_init(&r[i]);
        start(S, i % 2 ? "s_two" : "s_one", A(1, "ms", 'i', 20LL), NULL, &r[i]);
    }
    for (int i = 0; i < 6; i++) {
        CU_ASSERT_TRUE(rec_wait(&r[i], 5000));
        CU_ASSERT_TRUE(r[i].final.ok);
        rec_free(&r[i]);
    }
    CU_ASSERT_EQUAL(atomic_load(&ser_runs), 6);
    CU_ASSERT_EQUAL(atomic_load(&ser_max), 1);
    close_ct();
}

/* A call of a serial plugin calling another tool of the same plugin on its
 * own thread is refused at once (it would wait for itself). */
static void test_plugin_serial_nested(void)
{
    open_ct(2, 300);
    rec r;
    rec_init(&r);
    int64_t t0 = mono_ms();
    start(S, "s_nested", A(0), NULL, &r);
    CU_ASSERT_TRUE(rec_wait(&r, 5000));
    CU_ASSERT_TRUE(mono_ms() - t0 < 2000);
    CU_ASSERT_TRUE(r.final.ok);
    CU_ASSERT_PTR_NOT_NULL(memmem(r.final.out.data, r.final.out.len, "serial plugin", 13));
    rec_free(&r);
    close_ct();
}

/* The stream's `key` ("total_bytes", "total_lines") in the output record
 * of meta (stdout's comes first), or -1. */
static long long meta_count(const th_result_copy *r, const char *key)
{
    const uint8_t *m = r->meta.data;
    size_t klen = strlen(key);
    const uint8_t *k = m ? memmem(m, r->meta.len, key, klen) : NULL;
    if (!k)
        return -1;
    const uint8_t *v = k + klen, *end = m + r->meta.len;
    if (v >= end)
        return -1;
    if (*v < 0x80)
        return *v;
    int n = *v == 0xcc ? 1 : *v == 0xcd ? 2 : *v == 0xce ? 4 : *v == 0xcf ? 8 : 0;
    if (!n || v + 1 + n > end)
        return -1;
    long long x = 0;
    for (int i = 1; i <= n; i++)
        x = x << 8 | v[i];
    return x;
}

/* Whether what was kept of stdout is whole "w\n" chunks (a cut marker
 * aside). */
static bool out_whole_chunks(const th_result_copy *r)
{
    const uint8_t *d = r->out.data;
    size_t len = r->out.len;
    const uint8_t *mk = d ? memmem(d, len, "... [", 5) : NULL;
    size_t head = mk ? (size_t)(mk - d) : len;
    for (size_t i = 0; i < head; i += 2)
        if (d[i] != 'w' || i + 1 >= head || d[i + 1] != '\n')
            return false;
    return true;
}

/* A write racing the end of the call, from execute()'s own thread after
 * suspend() (round 0: inline, 1: a worker) or from a plugin thread while
 * another completes the call: every write answered 0 is in the result,
 * counted (bytes and lines: the output record of meta), and every later
 * one is refused with TOOLHOST_ESTATE and the misuse line.  It fails when execute()'s thread writes without the
 * lock after suspend() (checked: its writes after complete() were
 * answered 0 and not in the result). */
static void test_write_races_end(void)
{
    log_capture();
    open_ct(2, 300);
    int refused = 0, rounds = 0;
    for (int tool = 0; tool < 2; tool++)
        for (int i = 0; i < 12; i++, rounds++) {
            atomic_store(&wr_ok, 0);
            atomic_store(&wr_rc, 99);
            atomic_store(&wr_done, 0);
            atomic_store(&wr_cstarted, 0);
            rec r;
            rec_init(&r);
            th_call_opts o = {.may_block = i % 2, .output_info = true};
            uint64_t id = start(S, tool ? "c_wr_thread_race" : "c_wr_owner_race", A(0), &o, &r);
            CU_ASSERT_TRUE(rec_wait(&r, 5000));
            CU_ASSERT_TRUE(wait_flag_n(&wr_done, 2, 5000));
            CU_ASSERT_TRUE(r.final.ok);
            int ok = atomic_load(&wr_ok), rc = atomic_load(&wr_rc);
            long long tb = meta_count(&r.final, "total_bytes");
            long long tl = meta_count(&r.final, "total_lines");
            CU_ASSERT_EQUAL(tb, 2LL * ok);
            CU_ASSERT_EQUAL(tl, ok);
            CU_ASSERT_TRUE(out_whole_chunks(&r.final));
            if (tb != 2LL * ok)
                fprintf(stderr, "round %d: %d writes accepted, %lld bytes counted\n", rounds,
                        ok, tb);
            CU_ASSERT_TRUE(rc == TOOLHOST_ESTATE || rc == 0); /* 0: 1 s passed */
            if (rc == TOOLHOST_ESTATE) {
                refused++;
                char want[128];
                snprintf(want, sizeof want, "call=%llu: write() after the call ended",
                         (unsigned long long)id);
                CU_ASSERT_TRUE(log_has(want));
            }
            rec_free(&r);
        }
    CU_ASSERT_TRUE(refused >= rounds / 2); /* the race was run */
    close_ct();
    log_release();
}

/* Counts s[0..n) bytes equal to ch. */
static size_t count_ch(const uint8_t *s, size_t n, char ch)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == (uint8_t)ch;
    return k;
}

/* "1,234" at s: its value; *end after it. */
static unsigned long long num_commas(const char *s, const char **end)
{
    unsigned long long v = 0;
    for (; (*s >= '0' && *s <= '9') || *s == ','; s++)
        if (*s != ',')
            v = v * 10 + (unsigned)(*s - '0');
    *end = s;
    return v;
}

/* execute()'s thread and a thread of the plugin write into one call at
 * once (inline and on a worker): every write whole, none lost; past the
 * limit, the cut marker's bytes and lines plus what was kept are exactly
 * what was written.  It fails when execute()'s thread writes without
 * claiming the stream (checked: bytes lost or torn, and TSan reports the
 * race). */
static void test_write_two_threads(void)
{
    open_ct(2, 300);
    for (int round = 0; round < 8; round++) {
        long long n = round < 4 ? 1500 : 6000; /* 6,000 bytes, or 24,000 (cut) */
        atomic_store(&wr_rc_owner, 0);
        atomic_store(&wr_rc_thread, 0);
        rec r;
        rec_init(&r);
        th_call_opts o = {.may_block = round % 2};
        start(S, "c_wr_two", A(1, "n", 'i', n), &o, &r);
        CU_ASSERT_TRUE(rec_wait(&r, 5000));
        CU_ASSERT_TRUE(r.final.ok);
        CU_ASSERT_EQUAL(atomic_load(&wr_rc_owner), 0);
        CU_ASSERT_EQUAL(atomic_load(&wr_rc_thread), 0);
        const uint8_t *d = r.final.out.data;
        size_t len = r.final.out.len;
        if (n == 1500) {
            CU_ASSERT_EQUAL(len, (size_t)n * 4);
            bool whole = true;
            for (size_t i = 0; i + 1 < len && whole; i += 2)
                whole = (d[i] == 'a' || d[i] == 'b') && d[i + 1] == '\n';
            CU_ASSERT_TRUE(whole);
            CU_ASSERT_EQUAL(count_ch(d, len, 'a'), (size_t)n);
            CU_ASSERT_EQUAL(count_ch(d, len, 'b'), (size_t)n);
        } else {
            const char *m = d ? memmem(d, len, "... [", 5) : NULL;
            CU_ASSERT_PTR_NOT_NULL_FATAL(m);
            const char *e;
            unsigned long long cut_b = num_commas(m + 5, &e);
            CU_ASSERT_EQUAL(strncmp(e, " bytes, ", 8), 0);
            unsigned long long cut_l = num_commas(e + 8, &e);
            CU_ASSERT_EQUAL(strncmp(e, " lines cut] ...\n", 16), 0);
            size_t mlen = (size_t)(e + 16 - m);
            size_t kept = len - mlen;
            CU_ASSERT_EQUAL(kept + cut_b, (unsigned long long)n * 4);
            size_t kept_nl = count_ch(d, len, '\n') - 1; /* the marker's */
            CU_ASSERT_EQUAL(kept_nl + cut_l, (unsigned long long)n * 2);
            CU_ASSERT_TRUE(kept <= 8000);
        }
        rec_free(&r);
    }
    close_ct();
}

/* A write after the call was cancelled (here: timed out) is refused with
 * TOOLHOST_ECANCELLED, from execute()'s thread (no lock) as from another
 * thread (under the lock), inline and on a worker. */
static void test_write_cancelled(void)
{
    open_ct(2, 300);
    for (int inl = 0; inl < 2; inl++) {
        atomic_store(&wr_rc_owner, 99);
        atomic_store(&wr_rc_thread, 99);
        rec r;
        rec_init(&r);
        th_call_opts o = {.may_block = inl, .timeout_ms = 50};
        start(S, "c_wr_cancelled", A(0), &o, &r);
        CU_ASSERT_TRUE(rec_wait(&r, 3000));
        CU_ASSERT_EQUAL(r.final.error, TH_ETIMEOUT);
        int64_t until = mono_ms() + th_test_ms(3000);
        while (atomic_load(&wr_rc_thread) == 99 && mono_ms() < until)
            nap_ms(1);
        CU_ASSERT_EQUAL(atomic_load(&wr_rc_owner), TOOLHOST_ECANCELLED);
        CU_ASSERT_EQUAL(atomic_load(&wr_rc_thread), TOOLHOST_ECANCELLED);
        rec_free(&r);
    }
    close_ct();
}

/* Polls from a plugin thread racing complete() from another: before the
 * end they read "not cancelled" with time left (no lock taken), the first
 * one after it reads the call ended (is_cancelled 1, time_left_ms 0) and
 * the misuse is logged once.  Nothing here depends on how the threads are
 * scheduled: the poller's first poll comes before complete() by the
 * handshake, and it stops only at a poll that saw the end. */
static void test_polls_race_end(void)
{
    log_capture();
    open_ct(2, 300);
    for (int round = 0; round < 20; round++) {
        atomic_store(&pl_done, 0);
        atomic_store(&pl_ready, 0);
        atomic_store(&pl_completed, 0);
        atomic_store(&pl_polls, 0);
        atomic_store(&pl_first_rc, -1);
        atomic_store(&pl_first_left, -1);
        atomic_store(&pl_cancel_rc, -1);
        rec r;
        rec_init(&r);
        th_call_opts o = {.timeout_ms = 60000}; /* never reached */
        uint64_t id = start(S, "c_poll_race", A(0), &o, &r);
        CU_ASSERT_TRUE(rec_wait(&r, 3000));
        CU_ASSERT_TRUE(wait_flag(&pl_done, 3000));
        CU_ASSERT_TRUE(r.final.ok);
        /* the completer marks pl_completed after complete() returned: the
         * final and the poller can both be seen before that store */
        CU_ASSERT_TRUE(wait_flag(&pl_completed, 3000));
        /* before the end: not cancelled, time left */
        CU_ASSERT_EQUAL(atomic_load(&pl_first_rc), 0);
        CU_ASSERT_TRUE(atomic_load(&pl_first_left) > 0);
        /* after it: ended */
        CU_ASSERT_EQUAL(atomic_load(&pl_cancel_rc), 1);
        CU_ASSERT_EQUAL(atomic_load(&pl_left_rc), 0);
        CU_ASSERT_TRUE(atomic_load(&pl_polls) >= 2);
        /* the first poll after the end logs (either of the two) */
        char want[128];
        snprintf(want, sizeof want, "tool=c_poll_race call=%llu: ",
                 (unsigned long long)id);
        char *txt = log_text();
        const char *at = txt ? strstr(txt, want) : NULL;
        CU_ASSERT_TRUE(at && (strncmp(at + strlen(want), "is_cancelled() after", 20) == 0 ||
                              strncmp(at + strlen(want), "time_left_ms() after", 20) == 0));
        if (at)
            CU_ASSERT_PTR_NULL(strstr(at + 1, want)); /* once */
        free(txt);
        rec_free(&r);
    }
    close_ct();
    log_release();
}

static void test_caller_race_end(void)
{
    log_capture();
    open_ct(2, 300);
    for (int round = 0; round < 20; round++) {
        atomic_store(&cr_ok, 0);
        atomic_store(&cr_estate, 0);
        atomic_store(&cr_bad, 0);
        atomic_store(&cr_done, 0);
        atomic_store(&cr_user, NULL);
        rec r;
        rec_init(&r);
        th_call_opts o = {.timeout_ms = 5000};
        start(S, "c_caller_race", A(0), &o, &r);
        CU_ASSERT_TRUE(rec_wait(&r, 3000));
        CU_ASSERT_TRUE(wait_flag_n(&cr_done, 2, 3000));
        CU_ASSERT_TRUE(r.final.ok);
        CU_ASSERT_EQUAL(atomic_load(&cr_bad), 0);
        CU_ASSERT_TRUE(atomic_load(&cr_ok) + atomic_load(&cr_estate) > 0);
        rec_free(&r);
    }
    close_ct();
    log_release();
}

void th_suite_contract(void)
{
    CU_pSuite s = CU_add_suite("contract", suite_init, suite_cleanup);
    CU_add_test(s, "suspend_then_ok", test_suspend_then_ok);
    CU_add_test(s, "complete_twice", test_complete_twice);
    CU_add_test(s, "write_after_end", test_write_after_end);
    CU_add_test(s, "unknown_status", test_unknown_status);
    CU_add_test(s, "close_suspended_never_completed", test_close_suspended_never_completed);
    CU_add_test(s, "plugin_serial", test_plugin_serial);
    CU_add_test(s, "plugin_serial_nested", test_plugin_serial_nested);
    CU_add_test(s, "write_races_end", test_write_races_end);
    CU_add_test(s, "write_two_threads", test_write_two_threads);
    CU_add_test(s, "write_cancelled", test_write_cancelled);
    CU_add_test(s, "polls_race_end", test_polls_race_end);
    CU_add_test(s, "caller_race_end", test_caller_race_end);
}
