/* test_manager_fx.h - fixture tools, a hand-built config and an event recorder
 * shared by the manager and host suites (tests/unit/test_manager*.c,
 * test_host.c).  Everything is static: each test file gets its own copy. */
#ifndef TEST_MANAGER_FX_H
#define TEST_MANAGER_FX_H

#include <CUnit/CUnit.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/th_test.h"
#include "th/host.h"
#include "th/log.h"
#include "call/manager.h"

#pragma GCC diagnostic ignored "-Wunused-function" /* each suite uses a part */

/* Hosts set the log level from their config: the suites put it back. */
static int saved_log_level;
static int suite_init(void)
{
    saved_log_level = th_log_get_level();
    return 0;
}
static int suite_cleanup(void)
{
    th_log_set_level(saved_log_level);
    return 0;
}

/* ---- Arguments --------------------------------------------------------------- */

/* A(n, key, 's'|'i'|'b', value, ...): a msgpack map in a th_buf. */
static __attribute__((unused)) th_buf A(int n, ...)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    msgpack_pack_map(&pk, (size_t)n);
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        const char *k = va_arg(ap, const char *);
        int t = va_arg(ap, int);
        msgpack_pack_str_with_body(&pk, k, strlen(k));
        if (t == 's') {
            const char *v = va_arg(ap, const char *);
            msgpack_pack_str_with_body(&pk, v, strlen(v));
        } else if (t == 'i') {
            msgpack_pack_int64(&pk, va_arg(ap, long long));
        } else {
            if (va_arg(ap, int))
                msgpack_pack_true(&pk);
            else
                msgpack_pack_false(&pk);
        }
    }
    va_end(ap);
    return b;
}

static long long arg_int(const uint8_t *args, size_t len, const char *key, long long dflt)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    long long v = dflt;
    if (msgpack_unpack_next(&u, (const char *)args, len, &off) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP)
        for (uint32_t i = 0; i < u.data.via.map.size; i++) {
            msgpack_object_kv *kv = &u.data.via.map.ptr[i];
            if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == strlen(key) &&
                memcmp(kv->key.via.str.ptr, key, strlen(key)) == 0) {
                if (kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                    v = (long long)kv->val.via.u64;
                else if (kv->val.type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
                    v = kv->val.via.i64;
            }
        }
    msgpack_unpacked_destroy(&u);
    return v;
}

/* Copies string arg `key` into buf ("" when absent). */
static void arg_str(const uint8_t *args, size_t len, const char *key, char *buf, size_t n)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    buf[0] = '\0';
    if (msgpack_unpack_next(&u, (const char *)args, len, &off) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP)
        for (uint32_t i = 0; i < u.data.via.map.size; i++) {
            msgpack_object_kv *kv = &u.data.via.map.ptr[i];
            if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == strlen(key) &&
                memcmp(kv->key.via.str.ptr, key, strlen(key)) == 0 &&
                kv->val.type == MSGPACK_OBJECT_STR) {
                size_t l = kv->val.via.str.size < n - 1 ? kv->val.via.str.size : n - 1;
                memcpy(buf, kv->val.via.str.ptr, l);
                buf[l] = '\0';
            }
        }
    msgpack_unpacked_destroy(&u);
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int64_t mono_ms(void)
{
    return th_now_ns() / 1000000;
}

/* ---- Fixture tools --------------------------------------------------------------- */

static atomic_int fx_echo_runs;
static atomic_int fx_conc, fx_conc_max;
static atomic_int fx_cancel_seen;
static atomic_int fx_cancel_deaf_done;

static void conc_enter(void)
{
    int n = atomic_fetch_add(&fx_conc, 1) + 1;
    int m = atomic_load(&fx_conc_max);
    while (n > m && !atomic_compare_exchange_weak(&fx_conc_max, &m, n))
        ;
}

static int fx_echo(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    char text[256];
    arg_str(a, l, "text", text, sizeof text);
    atomic_fetch_add(&fx_echo_runs, 1);
    c->host->write(c, TOOLHOST_STDOUT, text, strlen(text));
    return TOOLHOST_OK;
}

/* Sleeps `ms` (arg) in 1 ms steps; stops early when cancelled. */
static int fx_sleep(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    long long ms = arg_int(a, l, "ms", 10);
    conc_enter();
    int64_t until = mono_ms() + ms;
    while (mono_ms() < until) {
        if (c->host->is_cancelled(c)) {
            atomic_fetch_add(&fx_cancel_seen, 1);
            atomic_fetch_sub(&fx_conc, 1);
            return TOOLHOST_FAILED;
        }
        nap_ms(1);
    }
    atomic_fetch_sub(&fx_conc, 1);
    c->host->write(c, TOOLHOST_STDOUT, "slept", 5);
    return TOOLHOST_OK;
}

/* Ignores cancellation: sleeps the whole `ms`, then writes.  With ms -1
 * it runs until the test sets fx_cancel_deaf_release (bounded: 20 s), so
 * a test that needs it still running at some event need not race a nap. */
static atomic_int fx_cancel_deaf_release;
static atomic_int fx_cancel_deaf_started;
static int fx_cancel_deaf(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    atomic_fetch_add(&fx_cancel_deaf_started, 1);
    long ms = (long)arg_int(a, l, "ms", 100);
    if (ms >= 0) {
        nap_ms(ms);
    } else {
        int64_t until = mono_ms() + 20000;
        while (!atomic_load(&fx_cancel_deaf_release) && mono_ms() < until)
            nap_ms(1);
    }
    c->host->write(c, TOOLHOST_STDOUT, "late", 4);
    atomic_fetch_add(&fx_cancel_deaf_done, 1);
    return TOOLHOST_OK;
}

/* Async: `steps` progress updates `delay_ms` apart, then writes `text`. */
static int fx_async(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    char text[256];
    arg_str(a, l, "text", text, sizeof text);
    long long steps = arg_int(a, l, "steps", 3), delay = arg_int(a, l, "delay_ms", 10);
    for (long long i = 0; i < steps; i++) {
        char m[64];
        snprintf(m, sizeof m, "step %lld", i + 1);
        c->host->progress(c, (double)(i + 1) / (double)steps, m, NULL, 0);
        for (long long k = 0; k < delay; k++) {
            if (c->host->is_cancelled(c)) {
                atomic_fetch_add(&fx_cancel_seen, 1);
                return TOOLHOST_FAILED;
            }
            nap_ms(1);
        }
        if (c->host->is_cancelled(c)) {
            atomic_fetch_add(&fx_cancel_seen, 1);
            return TOOLHOST_FAILED;
        }
    }
    c->host->write(c, TOOLHOST_STDOUT, text, strlen(text));
    return TOOLHOST_OK;
}

/* Waits at the gate until the test opens it (or the call is cancelled). */
static atomic_int fx_gate_open;
static int fx_gate(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    (void)a;
    (void)l;
    conc_enter();
    while (!atomic_load(&fx_gate_open) && !c->host->is_cancelled(c))
        nap_ms(1);
    atomic_fetch_sub(&fx_conc, 1);
    return TOOLHOST_OK;
}

static int fx_fail(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    (void)a;
    (void)l;
    static const uint8_t meta[] = {0x81, 0xa1, 'x', 0x07}; /* {"x": 7} */
    c->host->write(c, TOOLHOST_STDERR, "broken", 6);
    c->host->set_meta(c, meta, sizeof meta);
    return TOOLHOST_FAILED;
}

/* Sets the meta its `text` names (fx_metas) and writes set_meta()'s
 * return code: the tool's map merged with the host's "toolhost" key
 * (build_meta), and what set_meta() refuses. */
static const uint8_t fx_meta_mix[] = {
    0x83, 0xa1, 'a', 0x92, 0x01, 0x81, 0xa1, 'k', 0xc0,         /* a: [1, {k: nil}] */
    0xd9, 0x08, 't', 'o', 'o', 'l', 'h', 'o', 's', 't', 0x81, 0xa1, 'x', 0x01, /* str8 */
    0xa1, 'b', 0xa2, 'y', 'z'};                                 /* b: "yz" */
static const uint8_t fx_meta_only[] = {0x81, 0xa8, 't', 'o', 'o', 'l', 'h', 'o', 's', 't', 0x01};
static const uint8_t fx_meta_array[] = {0x91, 0x01};
static const uint8_t fx_meta_cut[] = {0x82, 0xa1, 'x', 0x01, 0xa1};
static const uint8_t fx_meta_tail[] = {0x80, 0x00};
static uint8_t fx_meta_deep[3 * 40 + 1]; /* n nested maps: 3 (n - 1) + 1 bytes */

static size_t fx_meta_nest(int n)
{
    size_t k = 0;
    for (int i = 0; i < n - 1; i++) {
        fx_meta_deep[k++] = 0x81;
        fx_meta_deep[k++] = 0xa1;
        fx_meta_deep[k++] = 'a';
    }
    fx_meta_deep[k++] = 0x80;
    return k;
}

static int fx_meta(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    char text[32];
    arg_str(a, l, "text", text, sizeof text);
    const uint8_t *m = NULL;
    size_t n = 0;
#define FX_META(name, arr) else if (strcmp(text, name) == 0) m = arr, n = sizeof arr
    if (strcmp(text, "deep32") == 0 || strcmp(text, "deep33") == 0)
        m = fx_meta_deep, n = fx_meta_nest(text[5] == '2' ? 32 : 33);
    FX_META("mix", fx_meta_mix);
    FX_META("only", fx_meta_only);
    FX_META("array", fx_meta_array);
    FX_META("cut", fx_meta_cut);
    FX_META("tail", fx_meta_tail);
#undef FX_META
    char out[16];
    int k = snprintf(out, sizeof out, "%d", c->host->set_meta(c, m, n));
    c->host->write(c, TOOLHOST_STDOUT, out, (size_t)k);
    return TOOLHOST_OK;
}

/* t_suspend's thread: complete() calls begun.  Counted before the call,
 * since the execution ends inside it: whoever waited for that end (a
 * session close) sees the count; counted after, it might not yet. */
static atomic_int fx_susp_completing;
/* ... and complete() calls returned: the thread touches the call no more. */
static atomic_int fx_susp_completed;
typedef struct fx_susp {
    toolhost_call *c;
    long ms;
} fx_susp;

static void *fx_susp_thread(void *arg)
{
    fx_susp *s = arg;
    if (s->ms >= 0) {
        nap_ms(s->ms);
    } else { /* until the test opens the gate (bounded) */
        int64_t until = mono_ms() + 20000;
        while (!atomic_load(&fx_gate_open) && mono_ms() < until)
            nap_ms(1);
    }
    s->c->host->write(s->c, TOOLHOST_STDOUT, "from thread", 11);
    atomic_fetch_add(&fx_susp_completing, 1);
    s->c->host->complete(s->c, TOOLHOST_OK);
    atomic_fetch_add(&fx_susp_completed, 1); /* done with the call */
    free(s);
    return NULL;
}

/* Suspends and completes from a thread of its own after `ms` (-1: once
 * fx_gate_open is set); fx_suspended counts the executions that returned
 * TOOLHOST_PENDING (counted just before: the event "it is suspended"). */
static atomic_int fx_suspended;
static int fx_suspend(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    if (c->host->suspend(c) != 0)
        return TOOLHOST_FAILED;
    CU_ASSERT_EQUAL(c->host->suspend(c), TOOLHOST_ESTATE);
    fx_susp *s = malloc(sizeof *s);
    s->c = c;
    s->ms = (long)arg_int(a, l, "ms", 20);
    pthread_t th;
    pthread_create(&th, NULL, fx_susp_thread, s);
    pthread_detach(th);
    atomic_fetch_add(&fx_suspended, 1);
    return TOOLHOST_PENDING;
}

/* Misuse: calls complete() without suspend() (records what it answered),
 * then returns its own result as if nothing happened. */
static atomic_int fx_nosusp_rc;
static int fx_nosusp(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    (void)a;
    (void)l;
    atomic_store(&fx_nosusp_rc, c->host->complete(c, TOOLHOST_FAILED));
    c->host->write(c, TOOLHOST_STDOUT, "still mine", 10);
    return TOOLHOST_OK;
}

/* Ignores cancellation: spins (yielding) until the test lets it go. */
static atomic_int fx_spin_release, fx_spin_running;
static int fx_spin(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    (void)a;
    (void)l;
    atomic_fetch_add(&fx_spin_running, 1);
    int64_t until = mono_ms() + 20000; /* bounded, whatever the test does */
    while (!atomic_load(&fx_spin_release) && mono_ms() < until)
        nap_ms(1);
    atomic_fetch_sub(&fx_spin_running, 1);
    c->host->write(c, TOOLHOST_STDOUT, "spun", 4);
    return TOOLHOST_OK;
}

static int nested_collect(const th_event *ev, void *ud)
{
    (void)ev;
    (void)ud;
    return 0;
}

/* Calls t_echo (and t_async) through the manager from inside a call. */
static int fx_nested(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    (void)a;
    (void)l;
    th_session *s = th_call_session(c);
    if (!s)
        return TOOLHOST_FAILED;
    th_buf args = A(1, "text", 's', "inner");
    th_result_copy r;
    int rc = th_call_sync(s, "t_echo", args.data, args.len, NULL, NULL, NULL, NULL, &r);
    th_buf_destroy(&args);
    if (rc || r.kind != TH_RESULT_DONE) {
        th_result_copy_destroy(&r);
        return TOOLHOST_FAILED;
    }
    c->host->write(c, TOOLHOST_STDOUT, r.out.data, r.out.len);
    th_result_copy_destroy(&r);
    args = A(3, "text", 's', "+async", "steps", 'i', 2LL, "delay_ms", 'i', 1LL);
    rc = th_call_sync(s, "t_async", args.data, args.len, NULL, NULL, NULL, NULL, &r);
    th_buf_destroy(&args);
    (void)nested_collect;
    if (rc || r.kind != TH_RESULT_DONE) {
        th_result_copy_destroy(&r);
        return TOOLHOST_FAILED;
    }
    c->host->write(c, TOOLHOST_STDOUT, r.out.data, r.out.len);
    th_result_copy_destroy(&r);
    return TOOLHOST_OK;
}

/* Calls t_sleep (long) from inside itself: it runs inline, and must see
 * this call's cancellation. */
static atomic_int fx_nested_long_done;
static int fx_nested_long(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    (void)a;
    (void)l;
    th_buf args = A(1, "ms", 'i', 5000LL);
    th_result_copy r;
    th_call_sync(th_call_session(c), "t_sleep", args.data, args.len, NULL, NULL, NULL, NULL, &r);
    th_buf_destroy(&args);
    th_result_copy_destroy(&r);
    atomic_store(&fx_nested_long_done, 1);
    return TOOLHOST_OK;
}

/* Calls t_nested_long from inside itself: three calls nested on one
 * thread (this one, t_nested_long, its t_sleep). */
static atomic_int fx_nested2_done;
static int fx_nested2(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    (void)a;
    (void)l;
    th_result_copy r;
    int rc = th_call_sync(th_call_session(c), "t_nested_long", NULL, 0, NULL, NULL,
                          NULL, NULL, &r);
    bool ok = rc == 0 && r.kind == TH_RESULT_DONE && r.ok;
    th_result_copy_destroy(&r);
    atomic_store(&fx_nested2_done, 1);
    return ok ? TOOLHOST_OK : TOOLHOST_FAILED;
}

/* Calls t_where (it needs permission) from inside itself. */
static int fx_nested_where(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    (void)a;
    (void)l;
    th_result_copy r;
    int rc = th_call_sync(th_call_session(c), "t_where", NULL, 0, NULL, NULL,
                          NULL, NULL, &r);
    bool ok = rc == 0 && r.kind == TH_RESULT_DONE && r.ok;
    th_result_copy_destroy(&r);
    return ok ? TOOLHOST_OK : TOOLHOST_FAILED;
}

static int fx_needs(void *st, const toolhost_tool *t, const uint8_t *a, size_t l,
                    char *reason, size_t n)
{
    (void)st;
    (void)t;
    (void)a;
    (void)l;
    snprintf(reason, n, "it writes");
    return 1;
}

/* Records the thread it runs on (fx_where_tid, then fx_where_set). */
static pthread_t fx_where_tid;
static atomic_int fx_where_set;
static int fx_where(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    (void)a;
    (void)l;
    fx_where_tid = pthread_self();
    atomic_store(&fx_where_set, 1);
    c->host->write(c, TOOLHOST_STDOUT, "here", 4);
    return TOOLHOST_OK;
}

/* Waits for the gate (fx_gate_open; fx_conc counts it meanwhile), then
 * suspends like t_suspend (completed from a thread after `ms`). */
static int fx_gate_suspend(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    conc_enter();
    while (!atomic_load(&fx_gate_open) && !c->host->is_cancelled(c))
        nap_ms(1);
    atomic_fetch_sub(&fx_conc, 1);
    return fx_suspend(st, t, c, a, l);
}

#define P(nm, ty, req, d) \
    {.struct_size = sizeof(toolhost_param), .name = nm, .type = ty, .required = req, .description = d}

static const toolhost_param p_text[] = {P("text", TOOLHOST_TYPE_STRING, 1, "text")};
static const toolhost_param p_ms[] = {P("ms", TOOLHOST_TYPE_INTEGER, 0, "ms"),
                                      P("tag", TOOLHOST_TYPE_STRING, 0, "tag")};
static const toolhost_param p_async[] = {P("text", TOOLHOST_TYPE_STRING, 0, "text"),
                                         P("steps", TOOLHOST_TYPE_INTEGER, 0, "steps"),
                                         P("delay_ms", TOOLHOST_TYPE_INTEGER, 0, "delay")};

#define T(nm, prm, np, fl, fn) \
    {.struct_size = sizeof(toolhost_tool), .name = nm, .description = nm " fixture", \
     .params = prm, .n_params = np, .stdout_type = TOOLHOST_SEM_TEXT,               \
     .stderr_type = TOOLHOST_SEM_ERROR, .flags = fl, .execute = fn}

static const toolhost_tool fx_tools[] = {
    T("t_echo", p_text, 1, 0, fx_echo),
    T("t_sleep", p_ms, 2, 0, fx_sleep),
    T("t_conc", p_ms, 2, 0, fx_gate),
    T("t_gate", p_ms, 2, 0, fx_gate),
    T("t_dup", p_ms, 2, 0, fx_sleep),
    T("t_serial", p_ms, 2, TOOLHOST_TOOL_SERIAL, fx_gate),
    T("t_cancel_deaf", p_ms, 2, 0, fx_cancel_deaf),
    T("t_async", p_async, 3, TOOLHOST_TOOL_ASYNC, fx_async),
    T("t_fail", NULL, 0, 0, fx_fail),
    T("t_suspend", p_ms, 2, 0, fx_suspend),
    T("t_nested", NULL, 0, 0, fx_nested),
    T("t_nosusp", NULL, 0, 0, fx_nosusp),
    T("t_spin", p_ms, 2, 0, fx_spin),
    T("t_nested_long", NULL, 0, 0, fx_nested_long),
    T("t_nested2", NULL, 0, 0, fx_nested2),
    T("t_nested_where", NULL, 0, 0, fx_nested_where),
    {.struct_size = sizeof(toolhost_tool), .name = "t_guarded", .description = "needs permission",
     .params = p_text, .n_params = 1, .stdout_type = TOOLHOST_SEM_TEXT,
     .stderr_type = TOOLHOST_SEM_ERROR, .execute = fx_echo, .needs_permission = fx_needs},
    {.struct_size = sizeof(toolhost_tool), .name = "t_where", .description = "needs permission",
     .stdout_type = TOOLHOST_SEM_TEXT, .stderr_type = TOOLHOST_SEM_ERROR,
     .execute = fx_where, .needs_permission = fx_needs},
    T("t_gate_susp", p_ms, 2, 0, fx_gate_suspend),
    T("t_meta", p_text, 1, 0, fx_meta),
};

static const toolhost_plugin fx_plugin = {
    .struct_size = sizeof(toolhost_plugin),
    .abi_major = TOOLHOST_ABI_MAJOR,
    .abi_minor = TOOLHOST_ABI_MINOR,
    .name = "fixtures",
    .version = "1",
    .description = "manager test fixtures",
    .tools = fx_tools,
    .n_tools = sizeof fx_tools / sizeof fx_tools[0],
};

/* ---- Config ------------------------------------------------------------------------ */

static th_config *cfg_new(uint32_t workers, uint32_t async_workers, uint32_t queue)
{
    th_config *c = calloc(1, sizeof *c);
    c->path = strdup("test.yaml");
    c->dir = strdup("/tmp");
    c->host.workers = workers;
    c->host.async_workers = async_workers;
    c->host.queue_size = queue;
    c->host.log_level = TOOLHOST_LOG_ERROR;
    c->host.default_timeout_ms = 20000;
    c->host.max_timeout_ms = 60000;
    c->host.session_grace_ms = 2000;
    c->host.shutdown_grace_ms = 2000;
    c->host.result_ttl_ms = 60000;
    c->host.permission_timeout_ms = 100;
    th_limits_defaults(&c->limits);
    return c;
}

/* Adds a toolset; `tools` is a NULL-terminated list. */
static th_toolset_cfg *cfg_toolset(th_config *c, const char *name, const char *const *tools)
{
    c->toolsets = realloc(c->toolsets, (c->n_toolsets + 1) * sizeof *c->toolsets);
    th_toolset_cfg *ts = &c->toolsets[c->n_toolsets++];
    memset(ts, 0, sizeof *ts);
    ts->name = strdup(name);
    size_t n = 0;
    while (tools[n])
        n++;
    ts->tools = calloc(n, sizeof *ts->tools);
    for (size_t i = 0; i < n; i++)
        ts->tools[i] = strdup(tools[i]);
    ts->n_tools = n;
    ts->perm_default = TH_PERM_ALLOW;
    return ts;
}

static const char *const all_tools[] = {"*", NULL};

static th_host *host_new(th_config *c)
{
    static const toolhost_plugin *const b[] = {&fx_plugin};
    th_host_opts o = {b, 1};
    th_host *h = NULL;
    th_error e;
    th_error_clear(&e);
    int rc = th_host_open_ex(c, &o, &h, &e);
    if (rc)
        fprintf(stderr, "host open: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return h;
}

/* ---- Recorder ----------------------------------------------------------------------- */

typedef struct rec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, progress, finals, dones;
    uint32_t coalesced;
    uint64_t task_id;
    th_result_copy final;
    int slow_ms;             /* sleep in each progress callback */
    char last_progress[64];
    bool order_bad;          /* an event after the final, or progress first */
} rec;

static void rec_init(rec *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
}

static void rec_free(rec *r)
{
    th_result_copy_destroy(&r->final);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
}

static void rec_cb(const th_event *ev, void *ud)
{
    rec *r = ud;
    if (ev->kind == TH_EV_PROGRESS && r->slow_ms)
        nap_ms(r->slow_ms);
    pthread_mutex_lock(&r->mu);
    if (r->finals)
        r->order_bad = true;
    if (ev->kind == TH_EV_PROGRESS) {
        if (!r->running)
            r->order_bad = true;
        r->progress++;
        r->coalesced += ev->coalesced;
        snprintf(r->last_progress, sizeof r->last_progress, "%s", ev->message ? ev->message : "");
    } else if (ev->result->kind == TH_RESULT_RUNNING) {
        r->running++;
        r->task_id = ev->task_id;
    } else {
        r->finals++;
        if (ev->kind == TH_EV_DONE)
            r->dones++;
        th_result_copy_destroy(&r->final);
        th_result_copy_from(&r->final, ev->result);
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Waits until the final event (or `ms`, scaled by th_test_ms: a deadline
 * for something that must happen); returns whether it came. */
static bool rec_wait(rec *r, int ms)
{
    int64_t until = mono_ms() + th_test_ms((unsigned)ms);
    pthread_mutex_lock(&r->mu);
    while (!r->finals && mono_ms() < until) {
        pthread_mutex_unlock(&r->mu);
        nap_ms(1);
        pthread_mutex_lock(&r->mu);
    }
    bool ok = r->finals > 0;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

static bool rec_wait_running(rec *r, int ms)
{
    int64_t until = mono_ms() + th_test_ms((unsigned)ms);
    pthread_mutex_lock(&r->mu);
    while (!r->running && !r->finals && mono_ms() < until) {
        pthread_mutex_unlock(&r->mu);
        nap_ms(1);
        pthread_mutex_lock(&r->mu);
    }
    bool ok = r->running > 0;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

static uint64_t start(th_session *s, const char *tool, th_buf args, const th_call_opts *o, rec *r)
{
    uint64_t id = 0;
    int rc = th_call_start(s, tool, args.data, args.len, o, rec_cb, r, &id);
    CU_ASSERT_EQUAL(rc, 0);
    th_buf_destroy(&args);
    return id;
}

static bool out_is(const th_result_copy *r, const char *s)
{
    return r->out.len == strlen(s) && memcmp(r->out.data, s, r->out.len) == 0;
}

static th_session *open_trusted(th_host *h)
{
    th_principal p = {.uid = 1000, .gid = 1000, .trusted = true};
    th_session *s = th_session_open(h, &p, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    return s;
}

#endif
