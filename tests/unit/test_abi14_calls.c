/* test_abi14_calls.c - write_block() and ask_client() (ABI 1.4) through
 * the real call path, with the fixture abi14_calls.so: blocks kept in the
 * result's meta.toolhost.content in order, bad blocks and a block past the
 * budget refused (the call goes on), a block after the call ended
 * refused; ask_client() without a front that carries it (ENOTSUP), with
 * one that answers (before the tool waits, and later from another
 * thread), with one that answers an error, a bad request, and a call
 * whose deadline passes while it waits. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/host_session.h"
#include "common/th_test.h"
#include "th/buf.h"
#include "th/host.h"
#include "th/json.h"
#include "toolhost/plugin.h"

static th_host *h;
static th_session *s;      /* no ask_client op (the RPC front's) */
static th_session *asker;  /* a front whose ask_client answers */

/* What the fake front does with an ask: answer at once (in the op, before
 * the tool waits), from a thread of its own a little later, with an
 * error, or never. */
enum { ANSWER_NOW, ANSWER_LATER, ANSWER_ERROR, ANSWER_NEVER, ANSWER_HOLD };
static int how;
/* ANSWER_HOLD: the asks kept (answered by the test when it is done) */
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t held_cv = PTHREAD_COND_INITIALIZER;
static uint64_t held[8];
static int n_held;
static char last_request[512];
static int last_kind;

typedef struct later {
    uint64_t id;
} later;

static void *answer_later(void *arg)
{
    later *l = arg;
    usleep(20 * 1000); /* (the tool waits on its condition meanwhile) */
    static const char a[] = "{\"action\":\"accept\",\"content\":{\"n\":2}}";
    th_call_client_answer(l->id, 0, a, sizeof a - 1);
    free(l);
    return NULL;
}

static int front_ask(void *ud, uint64_t call_id, uint64_t ask_id, int kind,
                     const char *request, size_t len)
{
    (void)ud, (void)call_id;
    last_kind = kind;
    snprintf(last_request, sizeof last_request, "%.*s", (int)len, request);
    if (how == ANSWER_NOW) {
        static const char a[] = "{\"action\":\"accept\",\"content\":{\"n\":1}}";
        th_call_client_answer(ask_id, 0, a, sizeof a - 1);
    } else if (how == ANSWER_LATER) {
        later *l = malloc(sizeof *l);
        pthread_t t;
        if (!l)
            return -1;
        l->id = ask_id;
        if (pthread_create(&t, NULL, answer_later, l) != 0) {
            free(l);
            return -1;
        }
        pthread_detach(t);
    } else if (how == ANSWER_HOLD) {
        pthread_mutex_lock(&held_mu);
        if (n_held < 8)
            held[n_held++] = ask_id;
        pthread_cond_broadcast(&held_cv);
        pthread_mutex_unlock(&held_mu);
    } else if (how == ANSWER_ERROR) {
        static const char e[] = "{\"code\":-1,\"message\":\"no model\"}";
        th_call_client_answer(ask_id, TOOLHOST_FAILED, e, sizeof e - 1);
    }
    return 0;
}

static int suite_init(void)
{
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "host:\n"
             "  max_client_asks: 3\n"
             "  workers: 2\n"
             "  max_lost_workers: 2\n"
             "plugins:\n"
             "  - name: abi14_calls\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: main\n"
             "    tools: [\"*\"]\n",
             th_test_build_path("fixtures/abi14_calls.so"));
    if (th_test_host_session_open("abi14.yaml", yaml, &h, &s) != 0)
        return -1;
    static const th_front_ops ops = {.front = "test",
                                     .ask_client = front_ask};
    th_principal who = {(uint32_t)getuid(), (uint32_t)getgid(), true};
    asker = th_session_open(h, &who, &ops, NULL);
    return asker ? 0 : -1;
}

static int suite_clean(void)
{
    if (asker)
        th_session_close(asker);
    th_test_host_session_close(h, s);
    return 0;
}

/* meta.toolhost.content of r as JSON (the caller decrefs), or NULL. */
static json_t *blocks_of(const th_result_copy *r)
{
    th_error err;
    json_t *m = r->meta.len ? th_json_from_msgpack_lossy(r->meta.data,
                                                         r->meta.len, &err)
                            : NULL;
    json_t *c = json_incref(json_object_get(json_object_get(m, "toolhost"),
                                            "content"));
    json_decref(m);
    return c;
}

static void blocks_kept_bad_refused(void)
{
    th_result_copy r;
    CU_ASSERT_EQUAL_FATAL(th_test_call_json(s, "abi14_calls_blocks", "{}",
                                            5000, false, &r),
                          0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_DONE);
    CU_ASSERT_TRUE(r.ok);
    /* three written; a missing mime_type, bad UTF-8 and an unknown kind
     * are EINVAL; the big one is past the budget: ENOMEM */
    CU_ASSERT_STRING_EQUAL(th_test_out(&r), "0 0 0 -1 -1 -1 -2");
    json_t *c = blocks_of(&r);
    CU_ASSERT_EQUAL_FATAL(json_array_size(c), 3);
    json_t *b0 = json_array_get(c, 0), *b1 = json_array_get(c, 1),
           *b2 = json_array_get(c, 2);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(b0, "type")),
                           "text");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(b0, "text")),
                           "first");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(b1, "type")),
                           "resource_link");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(b1, "name")),
                           "x.txt");
    CU_ASSERT_PTR_NULL(json_object_get(b1, "data"));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(b2, "type")),
                           "resource");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(b2, "uri")),
                           "test://r");
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(b2, "mime_type")),
        "application/json");
    CU_ASSERT_PTR_NOT_NULL(json_object_get(b2, "data"));
    json_decref(c);
    th_result_copy_destroy(&r);
}

static void block_after_end_refused(void)
{
    th_result_copy r;
    CU_ASSERT_EQUAL_FATAL(th_test_call_json(s, "abi14_calls_after", "{}",
                                            5000, false, &r),
                          0);
    CU_ASSERT_STRING_EQUAL(th_test_out(&r), "done");
    json_t *c = blocks_of(&r);
    CU_ASSERT_PTR_NULL(c);
    json_decref(c);
    th_result_copy_destroy(&r);
    /* the helper thread's write after complete(): refused (ESTATE) */
    bool seen = false;
    for (int i = 0; i < 500 && !seen; i++) {
        CU_ASSERT_EQUAL_FATAL(th_test_call_json(s, "abi14_calls_flag", "{}",
                                                5000, false, &r),
                              0);
        seen = strcmp(th_test_out(&r), "1") != 0;
        if (seen)
            CU_ASSERT_STRING_EQUAL(th_test_out(&r), "-4");
        th_result_copy_destroy(&r);
        if (!seen)
            usleep(10 * 1000);
    }
    CU_ASSERT_TRUE(seen);
}

static void ask_without_front(void)
{
    th_result_copy r;
    CU_ASSERT_EQUAL_FATAL(
        th_test_call_json(s, "abi14_calls_ask",
                          "{\"kind\":2,\"request\":\"{\\\"message\\\":\\\"m\\\"}\"}",
                          5000, false, &r),
        0);
    CU_ASSERT_STRING_EQUAL(th_test_out(&r), "rc=-5 answer=");
    th_result_copy_destroy(&r);
}

static void ask_answered(void)
{
    th_result_copy r;
    how = ANSWER_NOW;
    CU_ASSERT_EQUAL_FATAL(
        th_test_call_json(asker, "abi14_calls_ask",
                          "{\"kind\":2,\"request\":\"{\\\"message\\\":\\\"m\\\"}\"}",
                          5000, false, &r),
        0);
    CU_ASSERT_STRING_EQUAL(th_test_out(&r),
                           "rc=0 answer={\"action\":\"accept\",\"content\":"
                           "{\"n\":1}}");
    CU_ASSERT_EQUAL(last_kind, TOOLHOST_ASK_FORM);
    CU_ASSERT_STRING_EQUAL(last_request, "{\"message\":\"m\"}");
    th_result_copy_destroy(&r);

    how = ANSWER_LATER;
    CU_ASSERT_EQUAL_FATAL(
        th_test_call_json(asker, "abi14_calls_ask",
                          "{\"kind\":1,\"request\":\"{\\\"maxTokens\\\":5}\"}",
                          5000, false, &r),
        0);
    CU_ASSERT_STRING_EQUAL(th_test_out(&r),
                           "rc=0 answer={\"action\":\"accept\",\"content\":"
                           "{\"n\":2}}");
    CU_ASSERT_EQUAL(last_kind, TOOLHOST_ASK_SAMPLING);
    th_result_copy_destroy(&r);

    how = ANSWER_ERROR;
    CU_ASSERT_EQUAL_FATAL(
        th_test_call_json(asker, "abi14_calls_ask",
                          "{\"kind\":1,\"request\":\"{}\"}", 5000, false, &r),
        0);
    CU_ASSERT_STRING_EQUAL(th_test_out(&r),
                           "rc=1 answer={\"code\":-1,\"message\":\"no model\"}");
    th_result_copy_destroy(&r);
}

static void ask_bad_requests(void)
{
    th_result_copy r;
    how = ANSWER_NOW;
    static const char *const bad[] = {
        "{\"kind\":2,\"request\":\"not json\"}",
        "{\"kind\":2,\"request\":\"[1,2]\"}",
        "{\"kind\":7,\"request\":\"{}\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL_FATAL(th_test_call_json(asker, "abi14_calls_ask",
                                                bad[i], 5000, false, &r),
                              0);
        CU_ASSERT_STRING_EQUAL(th_test_out(&r), "rc=-1 answer=");
        th_result_copy_destroy(&r);
    }
}

/* host.max_client_asks (3 here): the fourth ask of a call is refused
 * (TOOLHOST_ESTATE), once logged; the next call may ask again. */
static void asks_bounded_per_call(void)
{
    th_result_copy r;
    how = ANSWER_NOW;
    CU_ASSERT_EQUAL_FATAL(
        th_test_call_json(asker, "abi14_calls_ask",
                          "{\"kind\":2,\"request\":\"{}\",\"times\":5}",
                          5000, false, &r),
        0);
    CU_ASSERT_STRING_EQUAL(th_test_out(&r), "ok=3 rc=-4 answer=");
    th_result_copy_destroy(&r);
    CU_ASSERT_EQUAL_FATAL(
        th_test_call_json(asker, "abi14_calls_ask",
                          "{\"kind\":2,\"request\":\"{}\",\"times\":3}",
                          5000, false, &r),
        0);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_test_out(&r), "ok=3 rc=0 "));
    th_result_copy_destroy(&r);
}

/* No answer: the call's deadline ends the wait (the tool's ask returns
 * ECANCELLED and the call ends as timed out). */
static void ask_unanswered_times_out(void)
{
    th_result_copy r;
    how = ANSWER_NEVER;
    CU_ASSERT_EQUAL_FATAL(
        th_test_call_json(asker, "abi14_calls_ask",
                          "{\"kind\":2,\"request\":\"{}\"}", 200, false, &r),
        0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_ERROR);
    CU_ASSERT_EQUAL(r.error, TH_ETIMEOUT);
    th_result_copy_destroy(&r);
}

/* th_test_call_json, but the call runs on a worker as a front's does
 * (keep_thread: not on the waiting thread). */
static int call_on_worker(th_session *se, const char *tool, const char *json,
                          int64_t timeout_ms, th_result_copy *r)
{
    th_call_opts o;
    memset(&o, 0, sizeof o);
    o.timeout_ms = timeout_ms;
    o.keep_thread = true;
    return th_test_call_json_opts(se, tool, json, &o, r);
}

static void *ask_thread(void *arg)
{
    th_result_copy *r = arg;
    if (call_on_worker(asker, "abi14_calls_ask",
                       "{\"kind\":2,\"request\":\"{}\"}",
                       th_test_ms(20000), r) != 0)
        r->kind = TH_RESULT_ERROR;
    return NULL;
}

/* Callers that never answer cannot take every worker: a call waiting for
 * its client lends its worker and a replacement serves (workers 2 here),
 * so another session's call runs at once; once the spare slots
 * (max_lost_workers 2) are all taken, a further ask is refused
 * (TOOLHOST_ESTATE) rather than holding a worker. */
static void asks_do_not_take_every_worker(void)
{
    how = ANSWER_HOLD;
    n_held = 0;
    th_result_copy ra[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        memset(&ra[i], 0, sizeof ra[i]);
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, ask_thread, &ra[i]),
                              0);
    }
    /* both asks out: each of the two workers waits for its client */
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += th_test_ms(10000) / 1000;
    pthread_mutex_lock(&held_mu);
    while (n_held < 2 &&
           pthread_cond_timedwait(&held_cv, &held_mu, &dl) == 0)
        ;
    int asked = n_held;
    pthread_mutex_unlock(&held_mu);
    CU_ASSERT_EQUAL(asked, 2);
    /* another session's plain call gets a worker (before: it waited in
     * the queue until its own deadline) */
    th_result_copy r;
    CU_ASSERT_EQUAL_FATAL(call_on_worker(s, "abi14_calls_flag", "{}",
                                         th_test_ms(2000), &r),
                          0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_DONE);
    th_result_copy_destroy(&r);
    /* the spare slots are taken: a third ask is refused at once */
    CU_ASSERT_EQUAL_FATAL(
        call_on_worker(asker, "abi14_calls_ask",
                       "{\"kind\":2,\"request\":\"{}\"}",
                       th_test_ms(2000), &r),
        0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_DONE);
    if (r.kind == TH_RESULT_DONE)
        CU_ASSERT_STRING_EQUAL(th_test_out(&r), "rc=-4 answer=");
    th_result_copy_destroy(&r);
    /* answered: the waiting calls end, their workers go back */
    pthread_mutex_lock(&held_mu);
    for (int i = 0; i < n_held; i++) {
        static const char a[] = "{\"action\":\"decline\"}";
        th_call_client_answer(held[i], 0, a, sizeof a - 1);
    }
    pthread_mutex_unlock(&held_mu);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        CU_ASSERT_EQUAL(ra[i].kind, TH_RESULT_DONE);
        if (ra[i].kind == TH_RESULT_DONE)
            CU_ASSERT_STRING_EQUAL(th_test_out(&ra[i]),
                                   "rc=0 answer={\"action\":\"decline\"}");
        th_result_copy_destroy(&ra[i]);
    }
    /* and the pool serves as before */
    CU_ASSERT_EQUAL_FATAL(call_on_worker(s, "abi14_calls_flag", "{}",
                                         th_test_ms(5000), &r),
                          0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_DONE);
    th_result_copy_destroy(&r);
}

void th_suite_abi14_calls(void)
{
    CU_pSuite su = CU_add_suite("abi14_calls", suite_init, suite_clean);
    CU_add_test(su, "blocks_kept_bad_refused", blocks_kept_bad_refused);
    CU_add_test(su, "block_after_end_refused", block_after_end_refused);
    CU_add_test(su, "ask_without_front", ask_without_front);
    CU_add_test(su, "ask_answered", ask_answered);
    CU_add_test(su, "ask_bad_requests", ask_bad_requests);
    CU_add_test(su, "asks_bounded_per_call", asks_bounded_per_call);
    CU_add_test(su, "ask_unanswered_times_out", ask_unanswered_times_out);
    CU_add_test(su, "asks_do_not_take_every_worker",
                asks_do_not_take_every_worker);
}
