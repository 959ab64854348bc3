/* test_code.c - the Lua code runtime against fake tools: many calls, the
 * deadline (in Lua and inside tool calls), the memory cap, errors with
 * tracebacks, sandbox escape attempts, recursion, call and output limits,
 * progress and cancellation. */
#include <CUnit/CUnit.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "th/code.h"
#include "th/config.h"
#include "th/host.h"
#include "th/log.h"
#include "th/projection.h"
#include "common/th_test.h"

/* ---- fake tools ----------------------------------------------------------- */

typedef struct fake {
    int calls;
    th_buf last_args;   /* msgpack of the last call's args */
    char last_tool[64];
    int64_t last_timeout;
    int progress_seen;
    char progress_tool[64];
    int cancel_after;   /* is_cancelled: nonzero after this many polls */
    int polls;
    th_buf sink_out, sink_err;
} fake;

static int64_t map_int(const msgpack_object *m, const char *key, int64_t def)
{
    if (m->type != MSGPACK_OBJECT_MAP)
        return def;
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object_kv *kv = &m->via.map.ptr[i];
        if (kv->key.type == MSGPACK_OBJECT_STR &&
            kv->key.via.str.size == strlen(key) &&
            memcmp(kv->key.via.str.ptr, key, kv->key.via.str.size) == 0) {
            if (kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
                kv->val.type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
                return kv->val.via.i64;
        }
    }
    return def;
}

static const msgpack_object *map_get(const msgpack_object *m, const char *key)
{
    if (m->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object_kv *kv = &m->via.map.ptr[i];
        if (kv->key.type == MSGPACK_OBJECT_STR &&
            kv->key.via.str.size == strlen(key) &&
            memcmp(kv->key.via.str.ptr, key, kv->key.via.str.size) == 0)
            return &kv->val;
    }
    return NULL;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int fake_call(void *ud, const char *tool, const uint8_t *args,
                     size_t len, int64_t timeout_ms, th_proj_progress_fn pf,
                     void *pud, th_proj_result *out)
{
    fake *f = ud;
    f->calls++;
    snprintf(f->last_tool, sizeof f->last_tool, "%s", tool);
    f->last_timeout = timeout_ms;
    th_buf_reset(&f->last_args);
    th_buf_append(&f->last_args, args, len);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CU_ASSERT_EQUAL_FATAL(
        msgpack_unpack_next(&u, (const char *)args, len, NULL),
        MSGPACK_UNPACK_SUCCESS);
    CU_ASSERT_EQUAL(u.data.type, MSGPACK_OBJECT_MAP);
    out->kind = TH_PROJ_DONE;
    out->ok = true;
    int rc = 0;
    if (strcmp(tool, "echo") == 0 || strcmp(tool, "my-tool") == 0) {
        const msgpack_object *t = map_get(&u.data, "text");
        if (t && t->type == MSGPACK_OBJECT_STR)
            th_buf_append(&out->out, t->via.str.ptr, t->via.str.size);
    } else if (strcmp(tool, "add") == 0) {
        int64_t s = map_int(&u.data, "a", 0) + map_int(&u.data, "b", 0);
        th_buf_printf(&out->out, "%lld", (long long)s);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &out->meta, th_buf_msgpack_write);
        msgpack_pack_map(&pk, 2);
        msgpack_pack_str_with_body(&pk, "sum", 3);
        msgpack_pack_int64(&pk, s);
        msgpack_pack_str_with_body(&pk, "tags", 4);
        msgpack_pack_array(&pk, 2);
        msgpack_pack_str_with_body(&pk, "x", 1);
        msgpack_pack_true(&pk);
    } else if (strcmp(tool, "fail") == 0) {
        out->ok = false;
        th_buf_puts(&out->err, "disk on fire");
    } else if (strcmp(tool, "bad") == 0) {
        out->kind = TH_PROJ_ERROR;
        out->error = TH_EARGS;
        out->message = strdup("Error parsing arguments for bad: missing "
                              "required parameter 'x'");
    } else if (strcmp(tool, "sleep") == 0) {
        /* honours its timeout like the manager would */
        int64_t ms = map_int(&u.data, "ms", 0);
        int64_t waited = 0;
        if (ms == -1 && timeout_ms > 0) { /* exactly its timeout, then out */
            sleep_ms((int)timeout_ms);
            ms = timeout_ms + 1;
            waited = timeout_ms;
        }
        while (waited < ms && (timeout_ms <= 0 || waited < timeout_ms)) {
            sleep_ms(5);
            waited += 5;
        }
        if (waited < ms) {
            out->kind = TH_PROJ_ERROR;
            out->error = TH_ETIMEOUT;
        }
    } else if (strcmp(tool, "progress") == 0) {
        for (int i = 1; i <= 3; i++)
            if (pf)
                pf(pud, i / 3.0, "step", NULL, 0);
    } else {
        rc = TH_EUNKNOWN_TOOL;
    }
    msgpack_unpacked_destroy(&u);
    return rc;
}

static th_projection *make_proj(fake *f)
{
    th_proj_caller c = {fake_call, f};
    th_projection *p = th_projection_new(&th_code_lua_lang, &c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    th_proj_param text = {"text", TOOLHOST_TYPE_STRING, true};
    th_proj_param ab[2] = {{"a", TOOLHOST_TYPE_INTEGER, true},
                           {"b", TOOLHOST_TYPE_INTEGER, true}};
    th_proj_param ms = {"ms", TOOLHOST_TYPE_INTEGER, true};
    th_proj_param list = {"list", TOOLHOST_TYPE_ARRAY, false};
    th_proj_param echo_params[2] = {text, list};
    th_error e;
    CU_ASSERT_EQUAL(th_projection_add_raw(p, NULL, "echo", "Echoes text.",
                                          echo_params, 2, 0, &e), 0);
    CU_ASSERT_EQUAL(
        th_projection_add_raw(p, NULL, "add", "Adds a and b.", ab, 2, 0, &e),
        0);
    CU_ASSERT_EQUAL(
        th_projection_add_raw(p, NULL, "fail", "Fails.", NULL, 0, 0, &e), 0);
    CU_ASSERT_EQUAL(
        th_projection_add_raw(p, NULL, "bad", "Errors.", NULL, 0, 0, &e), 0);
    CU_ASSERT_EQUAL(th_projection_add_raw(p, NULL, "sleep", "Sleeps ms.", &ms,
                                          1, TOOLHOST_TOOL_ASYNC, &e), 0);
    CU_ASSERT_EQUAL(th_projection_add_raw(p, NULL, "progress", "Reports.",
                                          NULL, 0, TOOLHOST_TOOL_ASYNC, &e),
                    0);
    CU_ASSERT_EQUAL(th_projection_add_raw(p, NULL, "my-tool", "Dashed.",
                                          &text, 1, 0, &e), 0);
    return p;
}

/* Runs `code` with the fake tools and the given limits. */
typedef struct ran {
    fake f;
    th_code_result res;
    int rc;
    double secs;
} ran;

static void run_with(ran *r, const char *code, const th_code_limits *lim,
                     const th_code_io *io)
{
    th_projection *p = make_proj(&r->f);
    th_code_result_init(&r->res);
    th_error e;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    r->rc = th_code_run(p, code, strlen(code), lim, io, &r->res, &e);
    clock_gettime(CLOCK_MONOTONIC, &b);
    r->secs = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    th_projection_free(p);
}

static void ran_free(ran *r)
{
    th_code_result_destroy(&r->res);
    th_buf_destroy(&r->f.last_args);
    th_buf_destroy(&r->f.sink_out);
    th_buf_destroy(&r->f.sink_err);
}

static const th_code_limits default_lim = {5000, 32u << 20, 1000, 65536};

static void run_code(ran *r, const char *code)
{
    memset(r, 0, sizeof *r);
    run_with(r, code, &default_lim, NULL);
}

static const char *out_of(const ran *r)
{
    return r->res.out.data ? (const char *)r->res.out.data : "";
}

static const char *err_of(const ran *r)
{
    return r->res.error ? r->res.error : "";
}

/* ---- tests ------------------------------------------------------------------- */

static void test_hundred_calls(void)
{
    ran r;
    run_code(&r, "local sum, n = 0, 0\n"
                 "for i = 1, 100 do\n"
                 "  local res = tools.add{a = i, b = 1}\n"
                 "  assert(res.ok, 'call failed')\n"
                 "  sum = sum + res.meta.sum\n"
                 "  n = n + tonumber(res.stdout) - res.meta.sum + 1\n"
                 "end\n"
                 "print('sum', sum)\n"
                 "return {sum = sum, n = n, tag = tools.add{a=1,b=1}.meta.tags[1]}\n");
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    CU_ASSERT_PTR_NULL(r.res.error);
    CU_ASSERT_EQUAL(r.res.calls, 101);
    CU_ASSERT_EQUAL(r.f.calls, 101);
    CU_ASSERT_STRING_EQUAL(out_of(&r), "sum\t5150\n");
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CU_ASSERT_EQUAL_FATAL(msgpack_unpack_next(&u, (const char *)r.res.value.data,
                                              r.res.value.len, NULL),
                          MSGPACK_UNPACK_SUCCESS);
    CU_ASSERT_EQUAL(map_int(&u.data, "sum", -1), 5150);
    CU_ASSERT_EQUAL(map_int(&u.data, "n", -1), 100);
    const msgpack_object *tag = map_get(&u.data, "tag");
    CU_ASSERT_TRUE(tag && tag->type == MSGPACK_OBJECT_STR &&
                   tag->via.str.size == 1 && tag->via.str.ptr[0] == 'x');
    msgpack_unpacked_destroy(&u);
    ran_free(&r);
}

static void test_output(void)
{
    ran r;
    run_code(&r, "print('a', 1, true, nil)\n"
                 "stdout:write('x', 2, '\\n')\n"
                 "stderr:write('e1', 'e2')\n"
                 "stderr.write('e3')\n");
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    CU_ASSERT_STRING_EQUAL(out_of(&r), "a\t1\ttrue\tnil\nx2\n");
    CU_ASSERT_STRING_EQUAL((char *)r.res.err.data, "e1e2e3");
    CU_ASSERT_EQUAL(r.res.value.len, 0);
    ran_free(&r);
}

static int sink_write(void *ud, int stream, const void *data, size_t len)
{
    fake *f = ud;
    th_buf_append(stream == TOOLHOST_STDOUT ? &f->sink_out : &f->sink_err,
                  data, len);
    return 0;
}

static void test_output_limit_and_sink(void)
{
    ran r;
    memset(&r, 0, sizeof r);
    th_code_limits lim = default_lim;
    lim.output_limit = 100;
    th_code_io io = {sink_write, NULL, NULL, &r.f};
    run_with(&r, "print(string.rep('y', 1000)) stderr:write('oops')", &lim,
             &io);
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    CU_ASSERT_EQUAL(r.res.out.len, 0); /* went to the sink */
    CU_ASSERT_EQUAL(r.res.out_bytes, 1001);
    CU_ASSERT_TRUE(r.f.sink_out.len > 100 && r.f.sink_out.len < 300);
    CU_ASSERT_EQUAL(memcmp(r.f.sink_out.data, "yyyyyyyyyy", 10), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr((char *)r.f.sink_out.data,
                                  "901 more bytes of stdout dropped"));
    CU_ASSERT_STRING_EQUAL((char *)r.f.sink_err.data, "oops");
    ran_free(&r);
}

static void test_return_value(void)
{
    ran r;
    run_code(&r, "return {list = {1, 2.5, 'three'}, flag = false, "
                 "nested = {a = {b = {}}}, f = print}");
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CU_ASSERT_EQUAL_FATAL(msgpack_unpack_next(&u, (const char *)r.res.value.data,
                                              r.res.value.len, NULL),
                          MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *list = map_get(&u.data, "list");
    CU_ASSERT_TRUE_FATAL(list && list->type == MSGPACK_OBJECT_ARRAY);
    CU_ASSERT_EQUAL(list->via.array.size, 3);
    CU_ASSERT_EQUAL(list->via.array.ptr[1].type, MSGPACK_OBJECT_FLOAT64);
    const msgpack_object *f = map_get(&u.data, "f");
    CU_ASSERT_TRUE(f && f->type == MSGPACK_OBJECT_STR); /* tostring'd */
    msgpack_unpacked_destroy(&u);
    ran_free(&r);

    run_code(&r, "local t = {} t.me = t return t");
    CU_ASSERT_EQUAL(r.res.return_code, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "cannot be carried"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "cycle"));
    ran_free(&r);
}

static void test_runtime_error(void)
{
    ran r;
    run_code(&r, "local x = 1\n"
                 "local function f()\n"
                 "  error('boom')\n"
                 "end\n"
                 "print('before')\n"
                 "f()\n");
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT_EQUAL(r.res.return_code, 1);
    CU_ASSERT_FALSE(r.res.timed_out);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "code:3: boom"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "stack traceback:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "code:6:"));
    CU_ASSERT_PTR_NULL(strstr(err_of(&r), "[C]: in ?"));
    CU_ASSERT_STRING_EQUAL(out_of(&r), "before\n"); /* output kept */
    ran_free(&r);

    run_code(&r, "local a = 1\nlocal b = = 2\n");
    CU_ASSERT_EQUAL(r.res.return_code, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "code:2:"));
    ran_free(&r);

    run_code(&r, "error({code = 1})");
    CU_ASSERT_EQUAL(r.res.return_code, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "error object is a table"));
    ran_free(&r);

    run_code(&r, "local n = nil\nreturn n.field");
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "code:2: attempt to index"));
    ran_free(&r);
}

static void test_infinite_loop(void)
{
    const char *scripts[] = {
        "while true do end",
        "local i = 0\nwhile true do i = i + 1 end",
        /* pcall cannot keep a killed script alive */
        "while true do pcall(function() while true do end end) end",
        "local co = coroutine.wrap(function() while true do end end)\nco()",
        "local function f() return f() end\nreturn f()",
        "while true do local ok = pcall(error, 'x') end",
    };
    for (size_t i = 0; i < sizeof scripts / sizeof scripts[0]; i++) {
        ran r;
        memset(&r, 0, sizeof r);
        th_code_limits lim = default_lim;
        lim.timeout_ms = 150;
        run_with(&r, scripts[i], &lim, NULL);
        CU_ASSERT_EQUAL(r.rc, 0);
        CU_ASSERT_EQUAL(r.res.return_code, 1);
        CU_ASSERT_TRUE(r.res.timed_out);
        CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "timed out"));
        CU_ASSERT_TRUE(r.secs < th_test_ms(2000) / 1000.0);
        if (!r.res.timed_out)
            fprintf(stderr, "script %zu: %s\n", i, err_of(&r));
        ran_free(&r);
    }
}

/* ---- runs that might never end: on a thread, waited for with a bound --- */

typedef struct bounded {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    char *code;
    th_code_limits lim;
    th_code_result res;
    int rc;
    double secs;
} bounded;

static void *bounded_main(void *arg)
{
    bounded *b = arg;
    th_error e;
    struct timespec a, z;
    clock_gettime(CLOCK_MONOTONIC, &a);
    b->rc = th_code_run(NULL, b->code, strlen(b->code), &b->lim, NULL,
                        &b->res, &e);
    clock_gettime(CLOCK_MONOTONIC, &z);
    b->secs = (double)(z.tv_sec - a.tv_sec) + (z.tv_nsec - a.tv_nsec) / 1e9;
    pthread_mutex_lock(&b->mu);
    b->done = true;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* Runs `code` on a detached thread and waits at most wait_s seconds.
 * Returns the finished run (free with bounded_free), or NULL when it did
 * not end: the thread is then left running (and its memory with it) so
 * that the suite goes on and reports the failure. */
static bounded *run_bounded(const char *code, int64_t timeout_ms,
                            uint64_t output_limit, int wait_s)
{
    bounded *b = calloc(1, sizeof *b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    pthread_mutex_init(&b->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cv, &ca);
    pthread_condattr_destroy(&ca);
    b->code = strdup(code);
    b->lim = default_lim;
    b->lim.timeout_ms = timeout_ms;
    b->lim.output_limit = output_limit;
    th_code_result_init(&b->res);
    pthread_t t;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, bounded_main, b), 0);
    pthread_detach(t);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += wait_s;
    pthread_mutex_lock(&b->mu);
    while (!b->done &&
           pthread_cond_timedwait(&b->cv, &b->mu, &until) == 0)
        ;
    bool done = b->done;
    pthread_mutex_unlock(&b->mu);
    if (!done) {
        fprintf(stderr, "\n  run did not end within %d s: %s\n", wait_s,
                code);
        return NULL;
    }
    return b;
}

static void bounded_free(bounded *b)
{
    if (!b)
        return;
    th_code_result_destroy(&b->res);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b->code);
    free(b);
}

/* Lua runs some code with its hooks off: an xpcall message handler called
 * for the error the hook raised, the __close metamethods of a coroutine
 * that died of it, finalizers.  Every one of these must end by the
 * deadline, with the timeout reported. */
static void test_hookless_paths(void)
{
    static const char *const scripts[] = {
        /* the message handler loops */
        "xpcall(function() error('x') end, function() while true do end end)",
        "xpcall(function() while true do end end, function() while true do "
        "end end)",
        "xpcall(error, function() xpcall(function() while true do end end, "
        "function() while true do end end) end)",
        "xpcall(function() while true do end end, function(e) error(e) end)",
        /* coroutine.wrap, string work, gsub inside a handler */
        "xpcall(function() error('x') end, function() local f = "
        "coroutine.wrap(function() while true do end end) f() end)",
        "xpcall(function() error('x') end, function() while true do local s "
        "= string.rep('x', 100):gsub('x', 'y') end end)",
        "xpcall(function() error('x') end, function(e) local s = "
        "string.rep('ab', 3e5) while true do s = s:gsub('ab', 'ba') end end)",
        "xpcall(function() while true do end end, coroutine.wrap(function() "
        "while true do end end))",
        /* error objects whose __tostring loops */
        "error(setmetatable({}, {__tostring = function() while true do end "
        "end}))",
        "local t = setmetatable({}, {__tostring = function() while true do "
        "end end}) xpcall(function() while true do end end, function(e) "
        "return tostring(t) end)",
        "xpcall(function() error(setmetatable({}, {__tostring = function() "
        "while true do end end})) end, function(e) return tostring(e) end)",
        /* __close that loops, in the main thread and in coroutines */
        "do local x <close> = setmetatable({}, {__close = function() while "
        "true do end end}) while true do end end",
        "do local x <close> = setmetatable({}, {__close = function() while "
        "true do end end}) error('e') end",
        "coroutine.wrap(function() local x <close> = setmetatable({}, "
        "{__close = function() while true do end end}) while true do end "
        "end)()",
        "local co = coroutine.create(function() local x <close> = "
        "setmetatable({}, {__close = function() while true do end end}) "
        "while true do end end) coroutine.resume(co) coroutine.close(co)",
        "local t = {} for i = 1, 4 do t[i] = coroutine.create(function() "
        "local x <close> = setmetatable({}, {__close = function() while true "
        "do end end}) while true do end end) end for i = 1, 4 do "
        "pcall(coroutine.resume, t[i]) pcall(coroutine.close, t[i]) end",
        "local co = coroutine.wrap(function() local x <close> = "
        "setmetatable({}, {__close = function() while true do end end}) "
        "pcall(function() while true do end end) end) co()",
        /* library calls that run long in C, in a loop that catches */
        "local s = string.rep('ab', 1e6) while true do pcall(string.gsub, s, "
        "'ab', 'ba') end",
        "local s = string.rep('ab', 1e6) while true do pcall(string.rep, s, "
        "8) end",
    };
    for (size_t i = 0; i < sizeof scripts / sizeof scripts[0]; i++) {
        bounded *b = run_bounded(scripts[i], 200, 65536, 5);
        CU_ASSERT_PTR_NOT_NULL(b);
        if (!b)
            continue;
        CU_ASSERT_EQUAL(b->rc, 0);
        CU_ASSERT_EQUAL(b->res.return_code, 1);
        CU_ASSERT_TRUE(b->res.timed_out);
        CU_ASSERT_PTR_NOT_NULL(
            strstr(b->res.error ? b->res.error : "", "timed out"));
        CU_ASSERT_TRUE(b->secs < th_test_ms(1000) / 1000.0);
        if (!b->res.timed_out || b->secs >= th_test_ms(1000) / 1000.0)
            fprintf(stderr, "\n  script %zu: %.3f s: %s\n", i, b->secs,
                    b->res.error ? b->res.error : "(no error)");
        bounded_free(b);
    }
    /* __gc finalizers run with hooks off: refused, raw or inherited */
    static const char *const gc[] = {
        "setmetatable({}, {__gc = function() while true do end end})",
        "local mt = setmetatable({}, {__index = {}}) rawset(mt, '__gc', "
        "print) setmetatable({}, mt)",
        "local mt = {} mt.__gc = true setmetatable({}, mt)",
    };
    for (size_t i = 0; i < sizeof gc / sizeof gc[0]; i++) {
        bounded *b = run_bounded(gc[i], 200, 65536, 5);
        CU_ASSERT_PTR_NOT_NULL(b);
        if (!b)
            continue;
        CU_ASSERT_EQUAL(b->res.return_code, 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(b->res.error ? b->res.error : "",
                                      "__gc metamethods are not available"));
        bounded_free(b);
    }
    /* what the wrappers keep working */
    ran r;
    run_code(&r,
             "assert(select(2, xpcall(function() error('e', 0) end, "
             "function(m) return 'handled: ' .. m end)) == 'handled: e')\n"
             "local a, b, c, d = xpcall(function(x, y) return x + y, nil, 3 "
             "end, print, 1, 2)\n"
             "assert(a == true and b == 3 and c == nil and d == 3)\n"
             "local f = coroutine.wrap(function(x) local y = "
             "coroutine.yield(x + 1) error('boom ' .. y) end)\n"
             "assert(f(1) == 2)\n"
             "local ok, m = pcall(f, 5)\n"
             "assert(not ok and m:find('code:4: boom 5', 1, true), m)\n"
             "ok, m = pcall(f)\n"
             "assert(not ok and m:find('dead coroutine'), m)\n"
             "local closed = 0\n"
             "local g = coroutine.wrap(function() local x <close> = "
             "setmetatable({}, {__close = function() closed = closed + 1 "
             "end}) error('inner') end)\n"
             "assert(not pcall(g) and closed == 1)\n"
             "local co = coroutine.create(function() local x <close> = "
             "setmetatable({}, {__close = function() closed = closed + 1 "
             "end}) coroutine.yield() end)\n"
             "coroutine.resume(co)\n"
             "assert(coroutine.close(co) == true and closed == 2)\n"
             "local h = coroutine.wrap(function() for i = 1, 3 do "
             "xpcall(function() coroutine.yield(i) end, print) end end)\n"
             "assert(h() == 1 and h() == 2 and h() == 3)\n"
             "assert(not pcall(xpcall, print))\n"
             "return 'fine'");
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    if (r.res.return_code)
        fprintf(stderr, "\n  %s\n", err_of(&r));
    ran_free(&r);
}

/* The returned value is limited by its packed size while it is packed:
 * N references to one 1 MiB string would cost N MiB. */
static void test_value_cap(void)
{
    /* 50 references: 50 MB if packed whole */
    bounded *b = run_bounded("local s = string.rep('x', 1 << 20) local t = "
                             "{} for i = 1, 50 do t[i] = s end return t",
                             5000, 65536, 10);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(b->res.return_code, 1);
    CU_ASSERT_TRUE(b->res.value_too_large);
    CU_ASSERT_EQUAL(b->res.value.len, 0);
    CU_ASSERT_TRUE(b->res.value.cap <= 65536 + 64);
    CU_ASSERT_PTR_NOT_NULL(strstr(b->res.error ? b->res.error : "",
                                  "the returned value is too large: it passes "
                                  "65536 bytes once serialised"));
    CU_ASSERT_TRUE(b->secs < th_test_ms(1000) / 1000.0);
    bounded_free(b);

    /* no output limit: a fixed cap (64 MiB) still holds */
    b = run_bounded("local s = string.rep('x', 1 << 20) local t = {} for i = "
                    "1, 100 do t[i] = s end return {list = t}",
                    5000, 0, 10);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(b->res.return_code, 1);
    CU_ASSERT_TRUE(b->res.value_too_large);
    CU_ASSERT_EQUAL(b->res.value.len, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(b->res.error ? b->res.error : "",
                                  "67108864 bytes"));
    bounded_free(b);

    /* the limit is on the packed bytes: 1000 bytes fit, 1001 do not */
    b = run_bounded("return string.rep('y', 997)", 5000, 1000, 10);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(b->res.return_code, 0);
    CU_ASSERT_EQUAL(b->res.value.len, 1000); /* 3-byte header + 997 */
    bounded_free(b);
    b = run_bounded("return string.rep('y', 998)", 5000, 1000, 10);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(b->res.return_code, 1);
    CU_ASSERT_TRUE(b->res.value_too_large);
    bounded_free(b);
    b = run_bounded("local t = {} for i = 1, 200 do t[i] = {n = i} end "
                    "return t",
                    5000, 1000, 10);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(b->res.return_code, 0);
    CU_ASSERT_TRUE(b->res.value.len > 500 && b->res.value.len <= 1000);
    bounded_free(b);
}

static void test_long_tool_call(void)
{
    ran r;
    memset(&r, 0, sizeof r);
    th_code_limits lim = default_lim;
    lim.timeout_ms = 200;
    /* one call that would take 10 s */
    run_with(&r, "print('start')\nlocal res = tools.sleep{ms = 10000}\n"
                 "print('not reached')",
             &lim, NULL);
    CU_ASSERT_EQUAL(r.res.return_code, 1);
    CU_ASSERT_TRUE(r.res.timed_out);
    CU_ASSERT_TRUE(r.secs < 5.0); /* the deadline, not the tool's 10 s */
    CU_ASSERT_TRUE(r.f.last_timeout > 0 && r.f.last_timeout <= 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "code:2: timed out"));
    CU_ASSERT_STRING_EQUAL(out_of(&r), "start\n");
    ran_free(&r);

    /* a loop of calls, the time spent in tools counts: at most 200 / 30
     * calls fit (each sleeps 30 ms at least); how many did is up to the
     * machine's load, so no lower bound but one */
    memset(&r, 0, sizeof r);
    run_with(&r, "while true do tools.sleep{ms = 30} end", &lim, NULL);
    CU_ASSERT_EQUAL(r.res.return_code, 1);
    CU_ASSERT_TRUE(r.res.timed_out);
    CU_ASSERT_TRUE(r.secs < 5.0);
    CU_ASSERT_TRUE(r.f.calls >= 1 && r.f.calls <= 10);
    ran_free(&r);

    /* a tool that returns right at its timeout (the deadline less under
     * 1 ms): the check after it kills the run at once, the script goes no
     * further (that check reads the coarse clock when the deadline is far,
     * the precise one this close).  A budget of 1 s, scaled: the first
     * call and the start must fit in it on a loaded machine too, and
     * under the sanitizers and valgrind (unscaled, a start slowed to
     * 1.2 s used it up before the first call). */
    memset(&r, 0, sizeof r);
    lim.timeout_ms = th_test_ms(1000);
    run_with(&r, "print('start')\nlocal x = tools.sleep{ms = 1}\n"
                 "local res = tools.sleep{ms = -1}\nprint('not reached')",
             &lim, NULL);
    CU_ASSERT_EQUAL(r.res.return_code, 1);
    CU_ASSERT_TRUE(r.res.timed_out);
    CU_ASSERT_EQUAL(r.f.calls, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "code:3: timed out"));
    CU_ASSERT_STRING_EQUAL(out_of(&r), "start\n");
    ran_free(&r);
}

static void test_memory_bomb(void)
{
    const char *scripts[] = {
        "local t = {}\nfor i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end",
        "local s = string.rep('x', 1 << 30)",
        "local s = 'x'\nwhile true do s = s .. s end",
        /* catching the error does not get around the cap */
        "local t = {}\nwhile true do pcall(function() t[#t+1] = "
        "string.rep('y', 4096) .. #t end) end",
    };
    for (size_t i = 0; i < sizeof scripts / sizeof scripts[0]; i++) {
        ran r;
        memset(&r, 0, sizeof r);
        th_code_limits lim = default_lim;
        lim.memory = 8u << 20;
        /* a safety net only: the cap ends these scripts, in CPU time a
         * machine under load may stretch past a few seconds */
        lim.timeout_ms = i < 3 ? 30000 : 3000;
        run_with(&r, scripts[i], &lim, NULL);
        CU_ASSERT_EQUAL(r.rc, 0);
        CU_ASSERT_EQUAL(r.res.return_code, 1);
        if (i < 3) {
            CU_ASSERT_TRUE(r.res.out_of_memory);
            CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "memory"));
        } else {
            /* ends by memory or, at worst, by the deadline */
            CU_ASSERT_TRUE(r.res.out_of_memory || r.res.timed_out);
        }
        ran_free(&r);
    }
    /* the host is unharmed: a normal run works */
    ran r;
    run_code(&r, "return #string.rep('z', 1000)");
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    CU_ASSERT_EQUAL(r.res.value.len, 3); /* int16 1000 */
    ran_free(&r);
}

/* Small Lua blocks come from the run's arena first, then from malloc, and
 * freed ones of both kinds are reused: a script churning far more small
 * tables and strings than the arena holds, of every size class, computes
 * the right thing within its cap; one keeping them all still meets the
 * cap; tool results of growing size reuse the run's result buffers. */
static void test_small_block_churn(void)
{
    ran r;
    memset(&r, 0, sizeof r);
    th_code_limits lim = default_lim;
    lim.memory = 4u << 20;
    run_with(&r,
             "local sum = 0\n"
             "for round = 1, 20 do\n"
             "  local keep = {}\n"
             "  for i = 1, 2000 do\n"
             "    local t = {i, tostring(i), {x = i}}\n"
             "    for k = 1, i % 17 do t[#t + 1] = k end\n"
             "    keep[i % 97 + 1] = t\n"
             "    sum = sum + #t + #t[2]\n"
             "  end\n"
             "end\n"
             "local n = 0\n"
             "for i = 1, 300 do\n"
             "  n = n + #tools.echo{text = string.rep('e', i * 7)}.stdout\n"
             "end\n"
             "return {sum = sum, n = n}",
             &lim, NULL);
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    if (r.res.error)
        fprintf(stderr, "churn: %s\n", r.res.error);
    CU_ASSERT_EQUAL(r.f.calls, 300);
    /* sum: per round, sum over i of (3 + i % 17) + #tostring(i) */
    int64_t want = 0;
    for (int i = 1; i <= 2000; i++) {
        char d[16];
        want += 3 + i % 17 + snprintf(d, sizeof d, "%d", i);
    }
    want *= 20;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CU_ASSERT_EQUAL_FATAL(msgpack_unpack_next(&u, (const char *)r.res.value.data,
                                              r.res.value.len, NULL),
                          MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *sum = map_get(&u.data, "sum");
    const msgpack_object *n = map_get(&u.data, "n");
    CU_ASSERT_TRUE(sum && sum->via.i64 == want);
    CU_ASSERT_TRUE(n && n->via.i64 == 7 * 300 * 301 / 2);
    msgpack_unpacked_destroy(&u);
    ran_free(&r);

    memset(&r, 0, sizeof r);
    run_with(&r,
             "local keep = {}\n"
             "for i = 1, 1e8 do keep[i] = {i} end",
             &lim, NULL);
    CU_ASSERT_EQUAL(r.res.return_code, 1);
    CU_ASSERT_TRUE(r.res.out_of_memory);
    ran_free(&r);
}

static void test_tiny_memory(void)
{
    fake f;
    memset(&f, 0, sizeof f);
    th_projection *p = make_proj(&f);
    th_code_result res;
    th_code_result_init(&res);
    th_code_limits lim = {1000, 1024, 10, 100};
    th_error e;
    int rc = th_code_run(p, "return 1", 8, &lim, NULL, &res, &e);
    CU_ASSERT_TRUE(rc < 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "memory"));
    th_code_result_destroy(&res);
    th_projection_free(p);
}

/* Each escape attempt fails with a clear message. */
static void test_sandbox(void)
{
    static const struct {
        const char *code, *expect;
    } cases[] = {
        {"os.execute('touch /tmp/toolhost-escaped')", "os.execute is not available"},
        {"return os.getenv('HOME')", "os.getenv is not available"},
        {"os.exit(1)", "os.exit is not available"},
        {"io.open('/etc/passwd')", "'io' is not available"},
        {"require('os')", "'require' is not available"},
        {"package.loadlib('libc.so.6', 'system')", "'package' is not available"},
        {"dofile('/etc/passwd')", "'dofile' is not available"},
        {"loadfile('/etc/passwd')", "'loadfile' is not available"},
        {"return string.dump(print)", "string.dump is not available"},
        {"return (''):dump()", "string.dump is not available"},
        {"return assert(load('\\27Lua\\84\\0\\25\\147\\r\\n\\26\\n'))",
         "binary chunk"},
        {"return load('return 1', 'x', 'b')", "mode \"b\" refused"},
        {"return load('return 1', 'x', 'bt')", "mode \"bt\" refused"},
        {"debug.getregistry()", "'debug' is not available"},
        {"debug.sethook()", "'debug' is not available"},
        {"collectgarbage('stop')", "collectgarbage(\"stop\") is not available"},
        {"collectgarbage()", "collectgarbage(\"collect\") is not available"},
        {"collectgarbage('setpause', 1000)", "is not available"},
        {"getmetatable('').__index = {}", "metatable of strings is read-only"},
        {"return getmetatable('').__index == string", NULL},
        {"setmetatable(_G, {})", "cannot change a protected metatable"},
        {"getmetatable(_G).__index = function() end",
         "metatable of the global table is read-only"},
        {"setmetatable(tools, {})", "cannot change a protected metatable"},
        {"tools.echo = nil", "tools is read-only"},
        {"tools.echo.doc = 'x'", "tools.echo is read-only"},
        {"setmetatable(getmetatable(''), nil)", "cannot change a protected"},
        {"setmetatable({}, {__gc = function() while true do end end})",
         "__gc metamethods are not available"},
        {"local mt = {__gc = false} setmetatable({}, mt)",
         "__gc metamethods are not available"},
        {"return load('return os.execute(\"id\")', 'x', 't', {os = os})()",
         "os.execute is not available"},
        {"return load('return io.open', 'x', 't', "
         "setmetatable({}, {__index = _G}))()",
         "'io' is not available"},
        {"return load('return debug', 'x', 't', 42)", "table expected"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ran r;
        run_code(&r, cases[i].code);
        CU_ASSERT_EQUAL(r.rc, 0);
        if (cases[i].expect) {
            CU_ASSERT_EQUAL(r.res.return_code, 1);
            if (!strstr(err_of(&r), cases[i].expect)) {
                fprintf(stderr, "\ncase %zu: %s\n  got: %s\n", i,
                        cases[i].code, err_of(&r));
                CU_FAIL("escape attempt not refused as expected");
            }
        } else {
            CU_ASSERT_EQUAL(r.res.return_code, 0);
        }
        ran_free(&r);
    }
    /* C loops the hook cannot see */
    {
        ran r;
        memset(&r, 0, sizeof r);
        th_code_limits lim = default_lim;
        lim.timeout_ms = 1000;
        run_with(&r, "table.move({}, 1, math.maxinteger - 1, 2)", &lim, NULL);
        CU_ASSERT_EQUAL(r.res.return_code, 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "too many to move"));
        CU_ASSERT_TRUE(r.secs < th_test_ms(1000) / 1000.0);
        ran_free(&r);
        run_code(&r, "local t = table.move({1, 2, 3}, 1, 3, 2) "
                     "assert(#t == 4) warn('careful') "
                     "warn('@on') warn('a', 'b')");
        CU_ASSERT_EQUAL(r.res.return_code, 0);
        CU_ASSERT_STRING_EQUAL(r.res.err.data ? (char *)r.res.err.data : "",
                               "Lua warning: careful\nLua warning: ab\n");
        ran_free(&r);
    }
    /* nothing escaped and the next run starts clean */
    FILE *fp = fopen("/tmp/toolhost-escaped", "r");
    CU_ASSERT_PTR_NULL(fp);
    if (fp)
        fclose(fp);
    ran r;
    run_code(&r, "string.upper = nil rawset(_G, 'leak', 1)");
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    ran_free(&r);
    run_code(&r, "assert(leak == nil) return ('abc'):upper()");
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    CU_ASSERT_PTR_NULL(r.res.error);
    ran_free(&r);
}

/* Pattern matching runs in C, out of the hook's reach: costly patterns are
 * refused up front, ordinary ones run. */
static void test_pattern_guard(void)
{
    static const char *const refused[] = {
        "return string.rep('a', 300):find('.-.-.-.-b')",
        "return string.rep('a', 100000):find('a*b')",
        "return string.rep('a', 100000):match('(a+)+b')",
        "for x in string.rep('(', 50000):gmatch('%b()') do end",
        "return (string.rep('ab', 50000)):gsub('.-.-.-x', '')",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        ran r;
        memset(&r, 0, sizeof r);
        th_code_limits lim = default_lim;
        lim.timeout_ms = 2000;
        run_with(&r, refused[i], &lim, NULL);
        CU_ASSERT_EQUAL(r.res.return_code, 1);
        CU_ASSERT_FALSE(r.res.timed_out);
        CU_ASSERT_TRUE(r.secs < th_test_ms(1500) / 1000.0);
        if (!strstr(err_of(&r), "could take too long")) {
            fprintf(stderr, "\npattern %zu: %s\n", i, err_of(&r));
            CU_FAIL("costly pattern not refused");
        }
        ran_free(&r);
    }
    ran r;
    run_code(&r, "local text = string.rep('hello world  foo=bar\\n', 20000)\n"
                 "local s, n = text:gsub('%s+', ' ')\n"
                 "assert(n == 60000, n)\n"
                 "local lines = 0\n"
                 "for l in text:gmatch('[^\\n]+') do lines = lines + 1 end\n"
                 "assert(lines == 20000)\n"
                 "local k = 0\n"
                 "for a, b in text:gmatch('(%w+)=(%w+)') do k = k + 1 end\n"
                 "assert(k == 20000)\n"
                 "assert(('  x  '):match('^%s*(.-)%s*$') == 'x')\n"
                 "assert(text:find('foo=bar', 1, true) == 14)\n"
                 "assert(('a.b'):find('.', 1, true) == 2)\n"
                 "assert(('key: value'):match('^(%w+):%s*(.*)$') == 'key')\n"
                 "assert(select(2, pcall(string.find, 'x', '[a')):find('malformed'))\n"
                 "return lines");
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    if (r.res.error)
        fprintf(stderr, "%s\n", r.res.error);
    ran_free(&r);
}

static void test_sandbox_has(void)
{
    ran r;
    run_code(&r, "assert(type(os.time()) == 'number')\n"
                 "assert(type(os.clock()) == 'number')\n"
                 "assert(type(os.date('%Y')) == 'string')\n"
                 "assert(math.floor(2.5) == 2)\n"
                 "assert(table.concat({1, 2}, ',') == '1,2')\n"
                 "assert(utf8.len('h\\u{e9}') == 2)\n"
                 "assert(('%d'):format(3) == '3')\n"
                 "assert(load('return 1 + 1')() == 2)\n"
                 "assert(load('return x', 'c', 't', {x = 5})() == 5)\n"
                 "assert(select('#', load('(')) == 2)\n"
                 "assert(collectgarbage('count') > 0)\n"
                 "local co = coroutine.create(function(a) coroutine.yield(a) end)\n"
                 "assert(select(2, coroutine.resume(co, 7)) == 7)\n"
                 "assert(pcall(error, 'x') == false)\n"
                 "local n = 0 for k in pairs(tools) do n = n + 1 end\n"
                 "assert(n == 7, n)\n"
                 "return 'fine'");
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    if (r.res.error)
        fprintf(stderr, "%s\n", r.res.error);
    ran_free(&r);
}

static void test_recursion_refused(void)
{
    ran r;
    run_code(&r, "return tools.run_code{code = 'print(1)'}");
    CU_ASSERT_EQUAL(r.res.return_code, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "run_code cannot call itself"));
    CU_ASSERT_EQUAL(r.f.calls, 0);
    ran_free(&r);

    run_code(&r, "return tools.nope{}");
    CU_ASSERT_EQUAL(r.res.return_code, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "no tool 'nope'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "echo, add"));
    ran_free(&r);
}

static void test_max_calls(void)
{
    ran r;
    memset(&r, 0, sizeof r);
    th_code_limits lim = default_lim;
    lim.max_calls = 5;
    run_with(&r, "for i = 1, 10 do tools.echo{text = 'x'} end", &lim, NULL);
    CU_ASSERT_EQUAL(r.res.return_code, 1);
    CU_ASSERT_EQUAL(r.res.calls, 5);
    CU_ASSERT_EQUAL(r.f.calls, 5);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "tool call limit reached"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "at most 5"));
    ran_free(&r);
}

static void test_tool_results(void)
{
    ran r;
    run_code(&r, "local a = tools.fail{}\n"
                 "assert(a.ok == false and a.stderr == 'disk on fire')\n"
                 "assert(a.error.code == 'tool_failed')\n"
                 "local b = tools.bad{}\n"
                 "assert(b.ok == false and b.stdout == nil)\n"
                 "assert(b.error.code == 'invalid_arguments', b.error.code)\n"
                 "assert(b.error.message:find('missing required'))\n"
                 "local c = tools.echo{text = 'hi'}\n"
                 "assert(c.ok and c.stdout == 'hi' and c.stderr == '')\n"
                 "assert(type(c.meta) == 'table')\n"
                 /* meta: a key when the tool set one, lazy when none */
                 "local s = tools.add{a = 1, b = 2}\n"
                 "assert(rawget(s, 'meta') and s.meta.sum == 3)\n"
                 "local e = tools.echo{text = 'x'}\n"
                 "assert(rawget(e, 'meta') == nil and next(e.meta) == nil)\n"
                 "assert(rawget(e, 'meta') == e.meta)\n"
                 "local d = tools.my_tool{text = 'dash'}\n"
                 "assert(d.stdout == 'dash')\n"
                 "return 1");
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    if (r.res.error)
        fprintf(stderr, "%s\n", r.res.error);
    CU_ASSERT_STRING_EQUAL(r.f.last_tool, "my-tool");
    ran_free(&r);
}

static void test_arguments(void)
{
    ran r;
    run_code(&r, "tools.echo{text = 'a', list = {}, n = 2.0, "
                 "nested = {x = {1, 2}, y = {}}}");
    CU_ASSERT_EQUAL_FATAL(r.res.return_code, 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CU_ASSERT_EQUAL_FATAL(
        msgpack_unpack_next(&u, (const char *)r.f.last_args.data,
                            r.f.last_args.len, NULL),
        MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *list = map_get(&u.data, "list");
    CU_ASSERT_TRUE(list && list->type == MSGPACK_OBJECT_ARRAY); /* by hint */
    const msgpack_object *n = map_get(&u.data, "n");
    CU_ASSERT_TRUE(n && n->type == MSGPACK_OBJECT_FLOAT64);
    const msgpack_object *nested = map_get(&u.data, "nested");
    CU_ASSERT_TRUE_FATAL(nested && nested->type == MSGPACK_OBJECT_MAP);
    const msgpack_object *x = map_get(nested, "x");
    CU_ASSERT_TRUE(x && x->type == MSGPACK_OBJECT_ARRAY);
    const msgpack_object *y = map_get(nested, "y");
    CU_ASSERT_TRUE(y && y->type == MSGPACK_OBJECT_MAP);
    msgpack_unpacked_destroy(&u);
    ran_free(&r);

    run_code(&r, "tools.add{a = 4.0, b = 1}");
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    CU_ASSERT_EQUAL(r.f.last_args.data[0], 0x82);
    ran_free(&r);

    static const struct {
        const char *code, *expect;
    } bad[] = {
        {"local t = {} t.t = t tools.echo{text = t}", "cycle"},
        {"tools.echo{'positional'}", "named arguments"},
        {"tools.echo{text = print}", "function value cannot be passed"},
        {"tools.echo('hi')", "takes a table of named arguments"},
        {"tools.echo({}, {})", "takes one table"},
        {"tools.echo{[{}] = 1}", "keys must be strings or numbers"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_code(&r, bad[i].code);
        CU_ASSERT_EQUAL(r.res.return_code, 1);
        if (!strstr(err_of(&r), bad[i].expect)) {
            fprintf(stderr, "\nargs %zu: got %s\n", i, err_of(&r));
            CU_FAIL("bad arguments not refused as expected");
        }
        CU_ASSERT_EQUAL(r.f.calls, 0);
        ran_free(&r);
    }
}

static void test_doc_and_help(void)
{
    ran r;
    run_code(&r, "assert(tools.echo.doc:find('text %(string, required%)'))\n"
                 "assert(tools.my_tool.tool == 'my-tool')\n"
                 "assert(tools.add.signature == 'add{a: integer, b: integer}')\n"
                 "assert(tostring(tools.add) == 'tool add')\n"
                 "help(tools.add)\n"
                 "help()\n");
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    if (r.res.error)
        fprintf(stderr, "%s\n", r.res.error);
    CU_ASSERT_PTR_NOT_NULL(strstr(out_of(&r), "add - Adds a and b."));
    CU_ASSERT_PTR_NOT_NULL(strstr(out_of(&r), "Tools (call as"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out_of(&r), "  my_tool{text: string}"));
    ran_free(&r);

    run_code(&r, "help(42)");
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "no help for a number"));
    ran_free(&r);
}

static void on_progress(void *ud, const char *tool, double fraction,
                        const char *message, const uint8_t *data,
                        size_t data_len)
{
    (void)fraction, (void)data, (void)data_len;
    fake *f = ud;
    f->progress_seen++;
    snprintf(f->progress_tool, sizeof f->progress_tool, "%s", tool);
    CU_ASSERT_STRING_EQUAL(message, "step");
}

static int cancel_poll(void *ud)
{
    fake *f = ud;
    return ++f->polls > f->cancel_after;
}

static void test_progress_and_cancel(void)
{
    ran r;
    memset(&r, 0, sizeof r);
    th_code_io io = {NULL, on_progress, NULL, &r.f};
    run_with(&r, "tools.progress{} tools.progress{}", &default_lim, &io);
    CU_ASSERT_EQUAL(r.res.return_code, 0);
    CU_ASSERT_EQUAL(r.f.progress_seen, 6);
    CU_ASSERT_STRING_EQUAL(r.f.progress_tool, "progress");
    ran_free(&r);

    memset(&r, 0, sizeof r);
    r.f.cancel_after = 3;
    th_code_io io2 = {NULL, NULL, cancel_poll, &r.f};
    run_with(&r, "while true do end", &default_lim, &io2);
    CU_ASSERT_EQUAL(r.res.return_code, 1);
    CU_ASSERT_TRUE(r.res.cancelled);
    CU_ASSERT_FALSE(r.res.timed_out);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_of(&r), "cancelled"));
    ran_free(&r);
}

static void test_no_tools(void)
{
    th_code_result res;
    th_code_result_init(&res);
    th_error e;
    CU_ASSERT_EQUAL(th_code_run(NULL, "print(1+1)", 10, NULL, NULL, &res, &e),
                    0);
    CU_ASSERT_EQUAL(res.return_code, 0);
    CU_ASSERT_STRING_EQUAL((char *)res.out.data, "2\n");
    th_code_result_destroy(&res);

    /* a projection that fails its check is refused before running */
    fake f;
    memset(&f, 0, sizeof f);
    th_proj_caller c = {fake_call, &f};
    th_projection *p = th_projection_new(&th_code_lua_lang, &c);
    th_projection_add_raw(p, NULL, "a-b", "x", NULL, 0, 0, &e);
    th_projection_add_raw(p, NULL, "a_b", "y", NULL, 0, 0, &e);
    th_code_result_init(&res);
    CU_ASSERT_EQUAL(th_code_run(p, "return 1", 8, NULL, NULL, &res, &e),
                    TH_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "both become 'a_b'"));
    th_code_result_destroy(&res);
    th_projection_free(p);
}

/* ---- Through a real host (th_host_open + th_call_sync) ------------------- */

typedef struct host_fx {
    int log_level; /* restored at host_down: the host sets the global level */
    th_host *h;
    th_session *s;
} host_fx;

static int host_up(host_fx *fx, uint32_t workers, bool enabled)
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
             "  - name: default\n"
             "    tools: [\"*\"]\n"
             "    run_code:\n"
             "      enabled: %s\n"
             "      timeout: 5s\n"
             "      max_calls: 500\n",
             workers, th_test_build_path("plugins/echo.so"),
             enabled ? "true" : "false");
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
    th_principal who = {.uid = 0, .gid = 0, .trusted = true};
    fx->s = th_session_open(fx->h, &who, NULL, NULL);
    return fx->s ? 0 : -1;
}

static void host_down(host_fx *fx)
{
    if (fx->s)
        th_session_close(fx->s);
    th_host_close(fx->h);
    th_log_set_level(fx->log_level);
}

/* Runs code through run_code; fills *out. */
static int host_run(host_fx *fx, const char *code, int64_t timeout_ms,
                    th_result_copy *out)
{
    th_buf args = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &args, th_buf_msgpack_write);
    msgpack_pack_map(&pk, timeout_ms > 0 ? 2 : 1);
    msgpack_pack_str_with_body(&pk, "code", 4);
    msgpack_pack_str_with_body(&pk, code, strlen(code));
    if (timeout_ms > 0) {
        msgpack_pack_str_with_body(&pk, "timeout_ms", 10);
        msgpack_pack_int64(&pk, timeout_ms);
    }
    th_call_opts o;
    memset(&o, 0, sizeof o);
    o.may_block = true;
    memset(out, 0, sizeof *out);
    int rc = th_call_sync(fx->s, "run_code", args.data, args.len, &o, NULL,
                          NULL, NULL, out);
    th_buf_destroy(&args);
    return rc;
}

/* meta[key] as an object of the unpacked result (valid while u lives). */
static const msgpack_object *meta_get(msgpack_unpacked *u,
                                      const th_result_copy *r,
                                      const char *key)
{
    msgpack_unpacked_init(u);
    if (!r->meta.len ||
        msgpack_unpack_next(u, (const char *)r->meta.data, r->meta.len,
                            NULL) != MSGPACK_UNPACK_SUCCESS)
        return NULL;
    return map_get(&u->data, key);
}

static void test_host_acceptance(void)
{
    host_fx fx;
    CU_ASSERT_EQUAL_FATAL(host_up(&fx, 2, true), 0);
    th_result_copy r;
    CU_ASSERT_EQUAL(host_run(&fx, "for i=1,3 do print(tools.echo{text=\"n\"..i}.stdout) end", 0, &r), 0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_DONE);
    CU_ASSERT_TRUE(r.ok);
    CU_ASSERT_STRING_EQUAL(r.out.data ? (char *)r.out.data : "", "n1\nn2\nn3\n");
    msgpack_unpacked u;
    const msgpack_object *rc = meta_get(&u, &r, "return_code");
    CU_ASSERT_TRUE(rc && rc->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
                   rc->via.u64 == 0);
    msgpack_unpacked_destroy(&u);
    const msgpack_object *calls = meta_get(&u, &r, "tool_calls");
    CU_ASSERT_TRUE(calls && calls->via.u64 == 3);
    msgpack_unpacked_destroy(&u);
    th_result_copy_destroy(&r);

    /* the returned value travels in meta.value */
    CU_ASSERT_EQUAL(host_run(&fx, "return {n = 7, list = {'a'}}", 0, &r), 0);
    const msgpack_object *v = meta_get(&u, &r, "value");
    CU_ASSERT_TRUE(v && map_int(v, "n", -1) == 7);
    msgpack_unpacked_destroy(&u);
    th_result_copy_destroy(&r);
    host_down(&fx);
}

typedef struct prog_seen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
    bool running, done;
    char last[128];
    th_result_copy fin;
} prog_seen;

static void on_host_event(const th_event *ev, void *ud)
{
    prog_seen *p = ud;
    pthread_mutex_lock(&p->mu);
    if (ev->kind == TH_EV_PROGRESS) {
        p->n++;
        snprintf(p->last, sizeof p->last, "%s",
                 ev->message ? ev->message : "");
    } else if (ev->result->kind == TH_RESULT_RUNNING) {
        p->running = true;
    } else {
        th_result_copy_from(&p->fin, ev->result);
        p->done = true;
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

/* Starts run_code without may_block, so that it runs on a worker (as a
 * front's call does), and waits for its final result in seen->fin. */
static void host_run_on_worker(host_fx *fx, const char *code, prog_seen *seen)
{
    th_buf args = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &args, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "code", 4);
    msgpack_pack_str_with_body(&pk, code, strlen(code));
    th_call_opts o;
    memset(&o, 0, sizeof o);
    memset(seen, 0, sizeof *seen);
    pthread_mutex_init(&seen->mu, NULL);
    pthread_cond_init(&seen->cv, NULL);
    uint64_t id;
    CU_ASSERT_EQUAL(th_call_start(fx->s, "run_code", args.data, args.len, &o,
                                  on_host_event, seen, &id),
                    0);
    pthread_mutex_lock(&seen->mu);
    while (!seen->done)
        pthread_cond_wait(&seen->cv, &seen->mu);
    pthread_mutex_unlock(&seen->mu);
    pthread_mutex_destroy(&seen->mu);
    pthread_cond_destroy(&seen->cv);
    th_buf_destroy(&args);
}

/* A pool of one worker: run_code occupies it, and the tools it calls (sync
 * ones inline on that worker, an async one on the async slot) still run. */
static void test_host_one_worker(void)
{
    host_fx fx;
    CU_ASSERT_EQUAL_FATAL(host_up(&fx, 1, true), 0);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    prog_seen seen;
    host_run_on_worker(&fx,
                       "local n = 0\n"
                       "for i = 1, 100 do\n"
                       "  local r = tools.echo{text = tostring(i)}\n"
                       "  n = n + tonumber(r.stdout)\n"
                       "end\n"
                       "local a = tools.echo_async{text = 'done', steps = 2, delay_ms = 1}\n"
                       "print(n, a.ok, a.stdout)\n",
                       &seen);
    clock_gettime(CLOCK_MONOTONIC, &b);
    CU_ASSERT_EQUAL(seen.fin.kind, TH_RESULT_DONE);
    CU_ASSERT_TRUE(seen.fin.ok);
    CU_ASSERT_STRING_EQUAL(seen.fin.out.data ? (char *)seen.fin.out.data : "",
                           "5050\ttrue\tdone\n");
    if (!seen.fin.ok)
        fprintf(stderr, "one worker: %s %s\n",
                seen.fin.err.data ? (char *)seen.fin.err.data : "",
                seen.fin.message ? seen.fin.message : "");
    CU_ASSERT_TRUE((b.tv_sec - a.tv_sec) < 4); /* no deadlock to the deadline */
    th_result_copy_destroy(&seen.fin);

    /* the same inline on the caller's thread (th_call_sync) */
    th_result_copy r;
    CU_ASSERT_EQUAL(host_run(&fx, "print(tools.echo{text = 'x'}.stdout)", 0,
                             &r),
                    0);
    CU_ASSERT_TRUE(r.ok);
    th_result_copy_destroy(&r);
    host_down(&fx);
}

static void test_host_errors(void)
{
    host_fx fx;
    CU_ASSERT_EQUAL_FATAL(host_up(&fx, 1, true), 0);
    th_result_copy r;
    msgpack_unpacked u;
    /* validation happens in the one place, for calls from code too */
    CU_ASSERT_EQUAL(host_run(&fx,
                             "local r = tools.echo{}\n"
                             "assert(not r.ok)\n"
                             "print(r.error.code)\n"
                             "local r2 = tools.echo{text = 'x', nope = 1}\n"
                             "print(r2.error.code)\n",
                             0, &r),
                    0);
    CU_ASSERT_TRUE(r.ok);
    CU_ASSERT_STRING_EQUAL(r.out.data ? (char *)r.out.data : "",
                           "invalid_arguments\ninvalid_arguments\n");
    th_result_copy_destroy(&r);

    /* a runtime error: ok false, the line in meta.error and in stderr */
    CU_ASSERT_EQUAL(host_run(&fx, "print('a')\nerror('boom')\n", 0, &r), 0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_DONE);
    CU_ASSERT_FALSE(r.ok);
    const msgpack_object *e = meta_get(&u, &r, "error");
    CU_ASSERT_TRUE(e && e->type == MSGPACK_OBJECT_STR &&
                   memmem(e->via.str.ptr, e->via.str.size, "code:2: boom", 12));
    msgpack_unpacked_destroy(&u);
    CU_ASSERT_PTR_NOT_NULL(r.err.data && strstr((char *)r.err.data, "code:2: boom"));
    th_result_copy_destroy(&r);

    /* recursion: run_code is not projected */
    CU_ASSERT_EQUAL(host_run(&fx,
                             "for k in pairs(tools) do print(k) end\n"
                             "tools.run_code{code = 'print(1)'}\n",
                             0, &r),
                    0);
    CU_ASSERT_FALSE(r.ok);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out.data ? (char *)r.out.data : "", "echo"));
    CU_ASSERT_PTR_NULL(strstr(r.out.data ? (char *)r.out.data : "", "run_code"));
    CU_ASSERT_PTR_NOT_NULL(r.err.data && strstr((char *)r.err.data, "cannot call itself"));
    th_result_copy_destroy(&r);

    /* a long tool call ended by the deadline (timeout_ms argument) */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    CU_ASSERT_EQUAL(host_run(&fx,
                             "while true do tools.echo_async{text = 'x', steps = 100, delay_ms = 100} end",
                             300, &r),
                    0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    CU_ASSERT_FALSE(r.ok);
    const msgpack_object *to = meta_get(&u, &r, "timed_out");
    CU_ASSERT_TRUE(to && to->type == MSGPACK_OBJECT_BOOLEAN && to->via.boolean);
    msgpack_unpacked_destroy(&u);
    CU_ASSERT_TRUE((b.tv_sec - a.tv_sec) < 3);
    th_result_copy_destroy(&r);

    /* an infinite loop */
    CU_ASSERT_EQUAL(host_run(&fx, "while true do end", 200, &r), 0);
    CU_ASSERT_FALSE(r.ok);
    to = meta_get(&u, &r, "timed_out");
    CU_ASSERT_TRUE(to && to->via.boolean);
    msgpack_unpacked_destroy(&u);
    th_result_copy_destroy(&r);

    /* the host is unharmed */
    CU_ASSERT_EQUAL(host_run(&fx, "print(tools.echo{text = 'still'}.stdout)", 0, &r), 0);
    CU_ASSERT_TRUE(r.ok);
    CU_ASSERT_STRING_EQUAL(r.out.data ? (char *)r.out.data : "", "still\n");
    th_result_copy_destroy(&r);
    host_down(&fx);
}

static void test_host_description(void)
{
    host_fx fx;
    CU_ASSERT_EQUAL_FATAL(host_up(&fx, 1, true), 0);
    const th_tool *t = th_session_acquire(fx.s, "run_code");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    const char *ld = t->long_description ? t->long_description : "";
    CU_ASSERT_PTR_NOT_NULL(strstr(ld, "## Tools"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ld, "echo - Writes `text` to stdout"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ld, "text (string, required)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ld, "echo_async - "));
    CU_ASSERT_PTR_NOT_NULL(strstr(ld, "tools.echo{text = \"...\"}"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ld, "## Limits"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ld, "Deadline 5000 ms"));
    CU_ASSERT_PTR_NULL(strstr(ld, "run_code - "));
    CU_ASSERT_EQUAL(t->n_params, 2);
    CU_ASSERT_EQUAL(t->stdout_type, TOOLHOST_SEM_COMMAND_OUTPUT);
    th_tool_release(t);
    host_down(&fx);

    /* not enabled: not registered, not callable */
    CU_ASSERT_EQUAL_FATAL(host_up(&fx, 1, false), 0);
    CU_ASSERT_PTR_NULL(th_session_acquire(fx.s, "run_code"));
    host_down(&fx);
}

/* run_code on a worker (as a front calls it): an async tool's updates
 * become updates of run_code, which turns into a task at the first one. */
static void test_host_progress(void)
{
    host_fx fx;
    CU_ASSERT_EQUAL_FATAL(host_up(&fx, 2, true), 0);
    prog_seen seen;
    host_run_on_worker(&fx,
                       "print(tools.echo_async{text = 'fin', steps = 4, "
                       "delay_ms = 30}.stdout)",
                       &seen);
    CU_ASSERT_TRUE(seen.fin.ok);
    CU_ASSERT_STRING_EQUAL(seen.fin.out.data ? (char *)seen.fin.out.data : "",
                           "fin\n");
    CU_ASSERT_TRUE(seen.running);
    CU_ASSERT_TRUE(seen.n >= 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(seen.last, "echo_async: step"));
    th_result_copy_destroy(&seen.fin);
    host_down(&fx);
}

void th_suite_code(void)
{
    CU_pSuite s = CU_add_suite("code", NULL, NULL);
    CU_add_test(s, "hundred_calls", test_hundred_calls);
    CU_add_test(s, "output", test_output);
    CU_add_test(s, "output_limit_and_sink", test_output_limit_and_sink);
    CU_add_test(s, "return_value", test_return_value);
    CU_add_test(s, "runtime_error", test_runtime_error);
    CU_add_test(s, "infinite_loop", test_infinite_loop);
    CU_add_test(s, "hookless_paths", test_hookless_paths);
    CU_add_test(s, "value_cap", test_value_cap);
    CU_add_test(s, "long_tool_call", test_long_tool_call);
    CU_add_test(s, "memory_bomb", test_memory_bomb);
    CU_add_test(s, "tiny_memory", test_tiny_memory);
    CU_add_test(s, "small_block_churn", test_small_block_churn);
    CU_add_test(s, "sandbox", test_sandbox);
    CU_add_test(s, "sandbox_has", test_sandbox_has);
    CU_add_test(s, "pattern_guard", test_pattern_guard);
    CU_add_test(s, "recursion_refused", test_recursion_refused);
    CU_add_test(s, "max_calls", test_max_calls);
    CU_add_test(s, "tool_results", test_tool_results);
    CU_add_test(s, "arguments", test_arguments);
    CU_add_test(s, "doc_and_help", test_doc_and_help);
    CU_add_test(s, "progress_and_cancel", test_progress_and_cancel);
    CU_add_test(s, "no_tools", test_no_tools);
    CU_add_test(s, "host_acceptance", test_host_acceptance);
    CU_add_test(s, "host_one_worker", test_host_one_worker);
    CU_add_test(s, "host_errors", test_host_errors);
    CU_add_test(s, "host_description", test_host_description);
    CU_add_test(s, "host_progress", test_host_progress);
}
