/* test_task_store.c - the core's task store (th/host.h, "The task store"):
 * both scopes kept, retention by count (host.task_keep) and by age
 * (host.result_ttl), who may see and cancel which task, th_task_wait with
 * a timeout and a cancel flag, and readers racing task ends (for TSan). */
#include <fcntl.h>
#include <unistd.h>

#include "test_manager_fx.h"

static th_host *H;

static th_host *store_host(th_task_scope scope, uint32_t keep, uint64_t ttl_ms)
{
    th_config *c = cfg_new(4, 3, 64);
    c->host.task_keep = keep;
    c->host.result_ttl_ms = ttl_ms;
    th_toolset_cfg *ts = cfg_toolset(c, "default", all_tools);
    ts->scope = scope;
    H = host_new(c);
    return H;
}

static th_session *open_uid(uint32_t uid)
{
    th_principal p = {.uid = uid, .gid = uid, .trusted = false};
    th_session *s = th_session_open(H, &p, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    return s;
}

/* Runs a quick async task to its end; returns its task id. */
static uint64_t run_task(th_session *s, const char *text)
{
    rec r;
    rec_init(&r);
    uint64_t id = start(s, "t_async", A(3, "text", 's', text, "steps", 'i', 1LL, "delay_ms", 'i', 0LL),
                        NULL, &r);
    CU_ASSERT_TRUE(rec_wait(&r, 5000));
    CU_ASSERT_EQUAL(r.running, 1);
    rec_free(&r);
    return id;
}

/* A long task (steps of 5 s), acknowledged; *r must be freed after it ended. */
static uint64_t start_long(th_session *s, rec *r)
{
    rec_init(r);
    uint64_t id = start(s, "t_async", A(3, "text", 's', "long", "steps", 'i', 3LL, "delay_ms", 'i', 5000LL),
                        NULL, r);
    CU_ASSERT_TRUE(rec_wait_running(r, 5000));
    return id;
}

typedef struct seen {
    th_task_view v;
    char message[64];
    bool has_result;
    bool result_ok;
    char out[64];
} seen;

static void copy_view(const th_task_view *t, void *ud)
{
    seen *s = ud;
    s->v = *t;
    snprintf(s->message, sizeof s->message, "%s", t->message ? t->message : "");
    s->v.message = NULL;
    s->v.tool = NULL;
    s->v.args = NULL;
    s->has_result = t->result != NULL;
    s->v.result = NULL;
    if (t->result) {
        s->result_ok = t->result->kind == TH_RESULT_DONE && t->result->ok;
        snprintf(s->out, sizeof s->out, "%.*s", (int)t->result->out.len,
                 t->result->out.data ? (const char *)t->result->out.data : "");
    }
}

typedef struct listing {
    uint64_t ids[64];
    th_task_state states[64];
    int n;
} listing;

static int list_into(const th_task_view *t, void *ud)
{
    listing *l = ud;
    if (l->n < 64) {
        l->ids[l->n] = t->task_id;
        l->states[l->n++] = t->state;
    }
    return 0;
}

static void test_both_scopes_kept(void)
{
    for (int sc = 0; sc < 2; sc++) {
        th_task_scope scope = sc ? TH_SCOPE_TOOLSET : TH_SCOPE_SESSION;
        store_host(scope, 16, 60000);
        th_session *a = open_uid(1000), *b = open_uid(1000);
        uint64_t id = run_task(a, "done");
        seen v;
        memset(&v, 0, sizeof v);
        CU_ASSERT_EQUAL(th_task_get(a, id, copy_view, &v), 0);
        CU_ASSERT_EQUAL(v.v.task_id, id);
        CU_ASSERT_EQUAL(v.v.state, TH_TASK_COMPLETED);
        CU_ASSERT_EQUAL(v.v.scope, scope);
        CU_ASSERT_TRUE(v.v.ended_ms >= v.v.started_ms && v.v.ended_ms > 0);
        CU_ASSERT_TRUE(v.has_result && v.result_ok);
        CU_ASSERT_STRING_EQUAL(v.out, "done");
        CU_ASSERT_STRING_EQUAL(v.message, "step 1");
        th_result_copy res;
        CU_ASSERT_EQUAL(th_task_result(a, id, &res), 0);
        CU_ASSERT_TRUE(out_is(&res, "done"));
        th_result_copy_destroy(&res);
        /* another session of the same uid: a session-scoped task is not
         * its own; a toolset-scoped one is shared */
        int want = scope == TH_SCOPE_TOOLSET ? 0 : TH_ENOTFOUND;
        memset(&v, 0, sizeof v);
        CU_ASSERT_EQUAL(th_task_get(b, id, copy_view, &v), want);
        CU_ASSERT_EQUAL(th_task_result(b, id, &res), want);
        th_result_copy_destroy(&res);
        listing l = {0};
        CU_ASSERT_EQUAL(th_task_foreach(b, list_into, &l), 0);
        CU_ASSERT_EQUAL(l.n, scope == TH_SCOPE_TOOLSET ? 1 : 0);
        th_session_close(b);
        th_session_close(a);
        /* the session is gone; a toolset-scoped result is still there */
        th_session *c = open_uid(1000);
        CU_ASSERT_EQUAL(th_task_result(c, id, &res), want);
        th_result_copy_destroy(&res);
        th_session_close(c);
        th_host_close(H);
        H = NULL;
    }
}

static void test_retention_by_count(void)
{
    th_config *c = cfg_new(4, 3, 64);
    c->host.task_keep = 3;
    c->host.result_ttl_ms = 60000;
    c->host.log_level = TOOLHOST_LOG_INFO;
    cfg_toolset(c, "default", all_tools);
    /* the log line when the count bites goes to a pipe */
    int fds[2];
    CU_ASSERT_FATAL(pipe(fds) == 0);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    th_log_set_fd(fds[1]);
    H = host_new(c);
    th_session *s = open_uid(1000);
    uint64_t ids[5];
    for (int i = 0; i < 5; i++)
        ids[i] = run_task(s, "x");
    th_log_set_fd(2);
    char logbuf[8192];
    ssize_t got = read(fds[0], logbuf, sizeof logbuf - 1);
    logbuf[got > 0 ? got : 0] = '\0';
    close(fds[0]);
    close(fds[1]);
    CU_ASSERT_PTR_NOT_NULL(strstr(logbuf, "task store full (host.task_keep=3)"));
    listing l = {0};
    CU_ASSERT_EQUAL(th_task_foreach(s, list_into, &l), 0);
    CU_ASSERT_EQUAL(l.n, 3);
    /* the three newest, in start order */
    for (int i = 0; i < 3 && i < l.n; i++)
        CU_ASSERT_EQUAL(l.ids[i], ids[i + 2]);
    seen v;
    CU_ASSERT_EQUAL(th_task_get(s, ids[0], copy_view, &v), TH_ENOTFOUND);
    CU_ASSERT_EQUAL(th_task_get(s, ids[1], copy_view, &v), TH_ENOTFOUND);
    CU_ASSERT_EQUAL(th_task_get(s, ids[4], copy_view, &v), 0);
    th_session_close(s);
    th_host_close(H);
    H = NULL;
}

/* A result is kept result_ttl after its task ended, then dropped (on the
 * next look: the store expires lazily, by the clock).  The look before
 * the ttl must find it only if it really came before the ttl: this thread
 * may get its core back late on a loaded machine, and a result older than
 * the ttl is rightly gone (the first look once failed so with a 150 ms
 * ttl).  t0, taken before the task started, bounds the result's age. */
static void test_retention_by_age(void)
{
    const int64_t ttl = th_test_ms(300);
    store_host(TH_SCOPE_TOOLSET, 100, (uint64_t)ttl);
    th_session *s = open_uid(1000);
    int64_t t0 = mono_ms();
    uint64_t id = run_task(s, "x");
    int64_t t1 = mono_ms(); /* after the end: it expires by t1 + ttl + 1 */
    seen v;
    int rc = th_task_get(s, id, copy_view, &v);
    if (mono_ms() - t0 < ttl) {
        CU_ASSERT_EQUAL(rc, 0); /* younger than the ttl: kept */
    } else {
        CU_ASSERT_TRUE(rc == 0 || rc == TH_ENOTFOUND);
    }
    /* a wait for the clock, not for another thread */
    while (mono_ms() <= t1 + ttl + 1)
        nap_ms(5);
    CU_ASSERT_EQUAL(th_task_get(s, id, copy_view, &v), TH_ENOTFOUND);
    th_result_copy res;
    CU_ASSERT_EQUAL(th_task_wait(s, id, 10, NULL, &res), TH_ENOTFOUND);
    listing l = {0};
    CU_ASSERT_EQUAL(th_task_foreach(s, list_into, &l), 0);
    CU_ASSERT_EQUAL(l.n, 0);
    th_session_close(s);
    th_host_close(H);
    H = NULL;
}

static void test_owner_checks(void)
{
    store_host(TH_SCOPE_TOOLSET, 16, 60000);
    th_session *a = open_uid(1000), *same = open_uid(1000), *other = open_uid(1001);
    rec r;
    uint64_t id = start_long(a, &r);
    seen v;
    memset(&v, 0, sizeof v);
    /* a live task: its owner's other session sees it with the last
     * progress message (the view tasks.list and tasks.result share) */
    CU_ASSERT_EQUAL(th_task_get(same, id, copy_view, &v), 0);
    CU_ASSERT_EQUAL(v.v.state, TH_TASK_WORKING);
    CU_ASSERT_EQUAL(v.v.owner_uid, 1000);
    CU_ASSERT_EQUAL(v.v.ended_ms, 0);
    CU_ASSERT_FALSE(v.has_result);
    CU_ASSERT_STRING_EQUAL(v.message, "step 1");
    th_result_copy res;
    CU_ASSERT_EQUAL(th_task_result(same, id, &res), TH_ESTATE);
    /* another uid: as if it did not exist */
    CU_ASSERT_EQUAL(th_task_get(other, id, copy_view, &v), TH_ENOTFOUND);
    CU_ASSERT_EQUAL(th_task_result(other, id, &res), TH_ENOTFOUND);
    CU_ASSERT_EQUAL(th_task_wait(other, id, 1000, NULL, &res), TH_ENOTFOUND);
    CU_ASSERT_EQUAL(th_task_cancel(other, id), TH_ENOTFOUND);
    listing l = {0};
    CU_ASSERT_EQUAL(th_task_foreach(other, list_into, &l), 0);
    CU_ASSERT_EQUAL(l.n, 0);
    CU_ASSERT_EQUAL(r.finals, 0); /* untouched */
    /* the owner (another session) may cancel it */
    CU_ASSERT_EQUAL(th_task_cancel(same, id), 0);
    CU_ASSERT_TRUE(rec_wait(&r, 5000));
    CU_ASSERT_EQUAL(r.final.error, TH_ECANCELLED);
    memset(&v, 0, sizeof v);
    CU_ASSERT_EQUAL(th_task_get(a, id, copy_view, &v), 0);
    CU_ASSERT_EQUAL(v.v.state, TH_TASK_CANCELLED);
    CU_ASSERT_EQUAL(th_task_cancel(same, id), TH_ESTATE);
    CU_ASSERT_EQUAL(th_task_cancel(other, id), TH_ENOTFOUND);
    CU_ASSERT_EQUAL(th_task_get(other, id, copy_view, &v), TH_ENOTFOUND);
    rec_free(&r);
    th_session_close(other);
    th_session_close(same);
    th_session_close(a);
    th_host_close(H);
    H = NULL;
}

static void test_wait(void)
{
    store_host(TH_SCOPE_SESSION, 16, 60000);
    th_session *s = open_uid(1000);
    rec r;
    uint64_t id = start_long(s, &r);
    th_result_copy res;
    /* timeout */
    int64_t t0 = mono_ms();
    CU_ASSERT_EQUAL(th_task_wait(s, id, 60, NULL, &res), TH_ETIMEOUT);
    int64_t took = mono_ms() - t0;
    CU_ASSERT_TRUE(took >= 55 && took < 2000);
    /* the cancel flag */
    volatile int flag = 1;
    t0 = mono_ms();
    CU_ASSERT_EQUAL(th_task_wait(s, id, -1, &flag, &res), TH_ETIMEOUT);
    CU_ASSERT_TRUE(mono_ms() - t0 < 2000);
    /* unknown */
    CU_ASSERT_EQUAL(th_task_wait(s, id + 1000, 10, NULL, &res), TH_ENOTFOUND);
    th_session *other = open_uid(1000);
    CU_ASSERT_EQUAL(th_task_wait(other, id, 10, NULL, &res), TH_ENOTFOUND); /* session scope */
    th_session_close(other);
    /* woken by the end: cancel it from the side while waiting */
    CU_ASSERT_EQUAL(th_task_cancel(s, id), 0);
    CU_ASSERT_EQUAL(th_task_wait(s, id, 5000, NULL, &res), 0);
    CU_ASSERT_EQUAL(res.kind, TH_RESULT_ERROR);
    CU_ASSERT_EQUAL(res.error, TH_ECANCELLED);
    th_result_copy_destroy(&res);
    CU_ASSERT_TRUE(rec_wait(&r, 5000));
    rec_free(&r);
    /* already ended: at once */
    uint64_t id2 = run_task(s, "fin");
    CU_ASSERT_EQUAL(th_task_wait(s, id2, 0, NULL, &res), 0);
    CU_ASSERT_TRUE(out_is(&res, "fin"));
    th_result_copy_destroy(&res);
    th_session_close(s);
    th_host_close(H);
    H = NULL;
}

/* A waiter on another thread is woken by the task's end. */
typedef struct waiter_arg {
    th_session *s;
    uint64_t id;
    int rc;
    th_result_copy res;
} waiter_arg;

static void *waiter_main(void *p)
{
    waiter_arg *w = p;
    w->rc = th_task_wait(w->s, w->id, 10000, NULL, &w->res);
    return NULL;
}

static void test_wait_woken(void)
{
    store_host(TH_SCOPE_TOOLSET, 16, 60000);
    th_session *s = open_uid(1000);
    rec r;
    rec_init(&r);
    uint64_t id = start(s, "t_async", A(3, "text", 's', "woke", "steps", 'i', 2LL, "delay_ms", 'i', 100LL),
                        NULL, &r);
    CU_ASSERT_TRUE(rec_wait_running(&r, 5000));
    th_session *s2 = open_uid(1000);
    waiter_arg w[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].s = i ? s2 : s;
        w[i].id = id;
        pthread_create(&t[i], NULL, waiter_main, &w[i]);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CU_ASSERT_EQUAL(w[i].rc, 0);
        CU_ASSERT_TRUE(out_is(&w[i].res, "woke"));
        th_result_copy_destroy(&w[i].res);
    }
    CU_ASSERT_TRUE(rec_wait(&r, 5000));
    rec_free(&r);
    th_session_close(s2);
    th_session_close(s);
    th_host_close(H);
    H = NULL;
}

/* Readers race task ends and the retention (for TSan and ASan). */
typedef struct race_arg {
    th_session *s;
    atomic_int *stop;
    atomic_int reads; /* rounds that saw a task */
} race_arg;

static int race_count(const th_task_view *t, void *ud)
{
    int *n = ud;
    (*n) += t->task_id > 0;
    return 0;
}

static void race_get(const th_task_view *t, void *ud)
{
    (void)t;
    (*(int *)ud)++;
}

static void *race_reader(void *p)
{
    race_arg *a = p;
    while (!atomic_load(a->stop)) {
        int n = 0;
        th_task_foreach(a->s, race_count, &n);
        for (uint64_t id = 1; id < 80; id++)
            th_task_get(a->s, id, race_get, &n);
        if (n > 0)
            atomic_fetch_add(&a->reads, 1);
    }
    return NULL;
}

static void test_race_readers(void)
{
    store_host(TH_SCOPE_TOOLSET, 8, 60000);
    th_session *s = open_uid(1000), *reader = open_uid(1000);
    atomic_int stop = 0;
    race_arg a = {.s = reader, .stop = &stop};
    atomic_init(&a.reads, 0);
    pthread_t t;
    pthread_create(&t, NULL, race_reader, &a);
    rec r[20];
    for (int i = 0; i < 20; i++) {
        rec_init(&r[i]);
        start(s, "t_async", A(3, "text", 's', "r", "steps", 'i', 2LL, "delay_ms", 'i', 2LL), NULL, &r[i]);
    }
    for (int i = 0; i < 20; i++) {
        CU_ASSERT_TRUE(rec_wait(&r[i], 10000));
        rec_free(&r[i]);
    }
    /* On a loaded machine the reader may not have run while the tasks
     * did: the finished ones stay listed (retention 8), so it sees them
     * once it runs. */
    for (int i = 0; i < 5000 && atomic_load(&a.reads) == 0; i++)
        usleep(1000);
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    CU_ASSERT_TRUE(atomic_load(&a.reads) > 0);
    listing l = {0};
    CU_ASSERT_EQUAL(th_task_foreach(s, list_into, &l), 0);
    CU_ASSERT_EQUAL(l.n, 8);
    th_session_close(reader);
    th_session_close(s);
    th_host_close(H);
    H = NULL;
}

void th_suite_task_store(void)
{
    CU_pSuite s = CU_add_suite("task_store", suite_init, suite_cleanup);
    CU_add_test(s, "both_scopes_kept", test_both_scopes_kept);
    CU_add_test(s, "retention_by_count", test_retention_by_count);
    CU_add_test(s, "retention_by_age", test_retention_by_age);
    CU_add_test(s, "owner_checks", test_owner_checks);
    CU_add_test(s, "wait", test_wait);
    CU_add_test(s, "wait_woken", test_wait_woken);
    CU_add_test(s, "race_readers", test_race_readers);
}
