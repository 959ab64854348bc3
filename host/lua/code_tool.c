/* code_tool.c - the built-in tool run_code: the "builtin-code" plugin that
 * runs a Lua script (code_lua.c) over the projection of the caller's
 * session tools, every call from code going through th_call_sync(). */
#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/code.h"
#include "th/config.h"
#include "th/host.h"
#include "th/tool.h"
#include "th/progress.h"

#ifndef TOOLHOST_VERSION
#define TOOLHOST_VERSION "0"
#endif

static int run_code_execute(void *state, const toolhost_tool *tool,
                            toolhost_call *call, const uint8_t *args,
                            size_t len);

static const toolhost_param run_code_params[] = {
    {sizeof(toolhost_param), "code", TOOLHOST_TYPE_STRING, 1,
     "Lua 5.4 source to run; call tools as tools.NAME{param = value}, print "
     "what you want to see, and optionally return a value",
     NULL, NULL, 0},
    {sizeof(toolhost_param), "timeout_ms", TOOLHOST_TYPE_INTEGER, 0,
     "deadline for the whole script in milliseconds, tool calls included; "
     "capped by the toolset's run_code timeout",
     NULL, NULL, 0},
};

#define RUN_CODE_DESCRIPTION                                                  \
    "Run a Lua script that calls several tools in one request and returns "   \
    "only what matters"

static const char run_code_generic_long[] =
    "Runs a sandboxed Lua 5.4 script. Inside it, tools.NAME{...} calls a "
    "tool of your toolset; help() lists them.";

static const toolhost_tool run_code_static_tool = {
    sizeof(toolhost_tool),
    TH_CODE_TOOL_NAME,
    RUN_CODE_DESCRIPTION,
    run_code_generic_long,
    run_code_params,
    2,
    TOOLHOST_SEM_COMMAND_OUTPUT,
    TOOLHOST_SEM_ERROR,
    0, /* not async: a script waits for its tools; see docs/code-runtime.md */
    run_code_execute,
    NULL,
    NULL,
    NULL,
};

static const toolhost_plugin code_plugin_static = {
    sizeof(toolhost_plugin),
    TOOLHOST_ABI_MAJOR,
    TOOLHOST_ABI_MINOR,
    "builtin-code",
    TOOLHOST_VERSION,
    "The built-in code runtime (run_code)",
    NULL,
    0,
    NULL,
    NULL,
    &run_code_static_tool,
    1,
};

const toolhost_plugin *th_code_plugin_static(void)
{
    return &code_plugin_static;
}

/* ---- The host-owned descriptor with a generated description ------------- */

struct th_code_builtin {
    toolhost_plugin plugin;
    toolhost_tool tool;
    char *long_description;
};

/* The first toolset that enables run_code: whether to register it at all,
 * and the limits the (one, registry-wide) description states.  A call
 * takes its limits from its own toolset (th_call_toolset). */
static const th_toolset_cfg *code_toolset(const th_config *cfg)
{
    for (size_t i = 0; cfg && i < cfg->n_toolsets; i++)
        if (cfg->toolsets[i].run_code.enabled)
            return &cfg->toolsets[i];
    return NULL;
}

/* Whether every toolset that enables run_code gives it the same limits. */
static bool same_limits(const th_config *cfg)
{
    const th_toolset_cfg *f = code_toolset(cfg);
    for (size_t i = 0; f && i < cfg->n_toolsets; i++) {
        const th_run_code_cfg *r = &cfg->toolsets[i].run_code;
        if (r->enabled &&
            (r->timeout_ms != f->run_code.timeout_ms ||
             r->memory != f->run_code.memory ||
             r->max_calls != f->run_code.max_calls ||
             r->output_limit != f->run_code.output_limit))
            return false;
    }
    return true;
}

static bool toolset_has(const th_config *cfg, const char *name)
{
    for (size_t i = 0; cfg && i < cfg->n_toolsets; i++) {
        const th_toolset_cfg *ts = &cfg->toolsets[i];
        if (!ts->run_code.enabled)
            continue;
        for (size_t k = 0; k < ts->n_tools; k++)
            if (strcmp(ts->tools[k], "*") == 0 ||
                strcmp(ts->tools[k], name) == 0)
                return true;
    }
    return false;
}

static int no_call(void *ud, const char *tool, const uint8_t *args,
                   size_t len, int64_t timeout_ms, th_proj_progress_fn pf,
                   void *pud, th_proj_result *out)
{
    (void)ud, (void)tool, (void)args, (void)len, (void)timeout_ms, (void)pf,
        (void)pud, (void)out;
    return TH_ESTATE;
}

typedef struct collect_ctx {
    th_projection *proj;
    const th_config *cfg;
    th_error *err;
    int rc;
} collect_ctx;

static int collect_tool(const th_tool *t, void *ud)
{
    collect_ctx *c = ud;
    if (c->cfg && !toolset_has(c->cfg, t->name))
        return 0;
    c->rc = th_code_projection_add(c->proj, t, c->err);
    return c->rc;
}

/* A literal for an example argument of type `type`. */
static const char *example_value(uint32_t type)
{
    switch (type) {
    case TOOLHOST_TYPE_STRING:
        return "\"...\"";
    case TOOLHOST_TYPE_INTEGER:
        return "1";
    case TOOLHOST_TYPE_NUMBER:
        return "1.5";
    case TOOLHOST_TYPE_BOOLEAN:
        return "true";
    default:
        return "{}";
    }
}

/* The long description: what code can do, every tool with its
 * parameters, an example, the sandbox and the limits. */
static int describe(th_buf *b, const th_projection *p,
                    const th_config *cfg)
{
    const th_toolset_cfg *ts = code_toolset(cfg);
    int rc = th_buf_puts(
        b, "Runs a sandboxed Lua 5.4 script that calls the tools below as "
           "functions, so that many tool calls cost one request: loop, "
           "filter, aggregate, and print only what matters.\n\n"
           "## How to call tools\n"
           "tools.NAME{param = value, ...} returns a table {ok = true, "
           "stdout = \"...\", stderr = \"...\", meta = {...}} or, when the "
           "call fails, {ok = false, error = {code = \"...\", message = "
           "\"...\"}}. print(...) writes to stdout and stderr:write(...) to "
           "stderr; a value the script returns is carried as structured "
           "data in meta.value (up to the output limit once serialised). "
           "help() lists the tools; help(tools.NAME) "
           "prints one with its parameters. Tool names with '-' are "
           "written with '_' (tools.read_file for read-file).\n\n"
           "## Tools\n");
    for (size_t i = 0; !rc && i < p->n_tools; i++) {
        const th_proj_tool *t = &p->tools[i];
        rc = th_buf_printf(b, "%s\n", t->doc);
    }
    if (!rc && p->n_tools == 0)
        rc = th_buf_puts(b, "(no tool can be called from code)\n\n");
    if (!rc && p->n_tools > 0) {
        const th_proj_tool *t = &p->tools[0];
        rc = th_buf_printf(b,
                           "## Example\n"
                           "local found = {}\n"
                           "for i = 1, 3 do\n"
                           "  local r = tools.%s{",
                           t->key);
        bool first = true;
        for (size_t k = 0; !rc && k < t->n_params; k++) {
            if (!t->params[k].required)
                continue;
            rc = th_buf_printf(b, "%s%s = %s", first ? "" : ", ",
                               t->params[k].name,
                               example_value(t->params[k].type));
            first = false;
        }
        if (!rc)
            rc = th_buf_puts(
                b, "}\n"
                   "  if r.ok then found[#found + 1] = r.stdout\n"
                   "  else stderr:write(r.error.message, \"\\n\") end\n"
                   "end\n"
                   "print(table.concat(found, \"\\n\"))\n"
                   "return {count = #found}\n\n");
    }
    if (!rc)
        rc = th_buf_puts(
            b, "## Sandbox\n"
               "Available: the base library (pcall, error, pairs, tostring, "
               "load of text chunks, ...), string, table, math, utf8, "
               "coroutine, os.time, os.clock, os.date. Not available: io, "
               "the rest of os, require, package, debug, dofile, loadfile, "
               "string.dump, binary chunks, collectgarbage other than "
               "\"count\". run_code cannot call itself.\n");
    if (!rc && ts && same_limits(cfg))
        rc = th_buf_printf(
            b,
            "\n## Limits\n"
            "Deadline %llu ms for the whole script, tool calls included "
            "(timeout_ms may lower it); %llu MiB of Lua memory; at most %u "
            "tool calls; %llu KiB of output per stream. The result's meta "
            "holds return_code (0 or 1), error (with the line and a "
            "traceback), timed_out and value.\n",
            (unsigned long long)ts->run_code.timeout_ms,
            (unsigned long long)(ts->run_code.memory >> 20),
            (unsigned)ts->run_code.max_calls,
            (unsigned long long)(ts->run_code.output_limit >> 10));
    else if (!rc && ts) {
        /* Toolsets differ: each call gets those of its own toolset. */
        rc = th_buf_puts(b, "\n## Limits\n"
                            "They depend on the toolset (timeout_ms may lower "
                            "the deadline):\n");
        for (size_t i = 0; !rc && i < cfg->n_toolsets; i++) {
            const th_toolset_cfg *t = &cfg->toolsets[i];
            if (!t->run_code.enabled)
                continue;
            rc = th_buf_printf(
                b,
                "- %s: deadline %llu ms, %llu MiB of Lua memory, at most %u "
                "tool calls, %llu KiB of output per stream\n",
                t->name, (unsigned long long)t->run_code.timeout_ms,
                (unsigned long long)(t->run_code.memory >> 20),
                (unsigned)t->run_code.max_calls,
                (unsigned long long)(t->run_code.output_limit >> 10));
        }
        if (!rc)
            rc = th_buf_puts(b, "The result's meta holds return_code (0 or "
                                "1), error (with the line and a traceback), "
                                "timed_out and value.\n");
    }
    return rc;
}

int th_code_builtin_new(th_registry *reg, const th_config *cfg,
                        th_code_builtin **out, th_error *err)
{
    *out = NULL;
    th_code_builtin *b = calloc(1, sizeof *b);
    if (!b)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    b->plugin = code_plugin_static;
    b->tool = run_code_static_tool;
    b->plugin.tools = &b->tool;

    th_proj_caller none = {no_call, NULL};
    th_projection *p = th_projection_new(&th_code_lua_lang, &none);
    if (!p) {
        free(b);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    collect_ctx c = {p, cfg, err, 0};
    int rc = reg ? th_registry_foreach(reg, collect_tool, &c) : 0;
    if (!rc && c.rc)
        rc = c.rc;
    th_buf text = TH_BUF_INIT;
    if (!rc && describe(&text, p, cfg) != 0)
        rc = th_error_set(err, TH_ENOMEM, "out of memory");
    th_projection_free(p);
    if (rc) {
        th_buf_destroy(&text);
        free(b);
        return rc < 0 ? rc : TH_EINTERNAL;
    }
    b->long_description = (char *)th_buf_take(&text, NULL);
    b->tool.long_description = b->long_description;
    *out = b;
    return 0;
}

/* run_code belongs to the toolsets that enable it, and to no other. */
static bool code_member(const th_toolset_cfg *ts, const char *tool, void *ud)
{
    (void)tool, (void)ud;
    return ts->run_code.enabled;
}

int th_code_register(th_host *h, th_code_builtin **out, th_error *err)
{
    *out = NULL;
    const th_config *cfg = th_host_config(h);
    if (!code_toolset(cfg))
        return 0;
    th_code_builtin *b;
    int rc = th_code_builtin_new(th_host_registry(h), cfg, &b, err);
    if (rc)
        return rc;
    rc = th_host_add_builtin_ex(h, th_code_builtin_plugin(b), code_member,
                                NULL, err);
    if (rc) {
        th_code_builtin_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

const toolhost_plugin *th_code_builtin_plugin(const th_code_builtin *b)
{
    return b ? &b->plugin : NULL;
}

void th_code_builtin_free(th_code_builtin *b)
{
    if (!b)
        return;
    free(b->long_description);
    free(b);
}

/* ---- execute ---------------------------------------------------------------- */

struct code_wait;

/* One run_code call: what the tool caller and the io callbacks need. */
typedef struct exec_ctx {
    struct code_wait *wait;  /* code_call's, initialised once per run */
    toolhost_call *call;
    th_session *session;
    pthread_t owner;         /* the thread running execute() */
    pthread_mutex_t mu;      /* guards prog */
    th_progress_slot prog;        /* the latest update from another thread */
    atomic_bool queued;      /* prog may hold an update (set under mu) */
} exec_ctx;

/* Forwards a progress update of a tool called from code as progress of the
 * run_code call.  Host callbacks are Owner-class: on the owner thread the
 * update goes out at once; from another thread the latest is kept
 * (coalesced) and sent by the owner when the tool call returns. */
static void forward_progress(void *ud, const char *tool, double fraction,
                             const char *message, const uint8_t *data,
                             size_t data_len)
{
    (void)data, (void)data_len;
    exec_ctx *x = ud;
    char msg[256];
    snprintf(msg, sizeof msg, "%s: %s", tool, message ? message : "working");
    if (pthread_equal(pthread_self(), x->owner)) {
        (void)x->call->host->progress(x->call, fraction, msg, NULL, 0);
        return;
    }
    th_progress_update u;
    if (th_progress_copy(&u, 0, fraction, msg, NULL, 0, 0) != 0)
        return; /* out of memory: this update is lost, the next comes */
    pthread_mutex_lock(&x->mu);
    th_progress_put(&x->prog, &u);
    atomic_store(&x->queued, true);
    pthread_mutex_unlock(&x->mu);
}

static void flush_progress(exec_ctx *x)
{
    /* The common case, no update from another thread: no lock.  One set
     * after this read is taken by the next flush (after the next call). */
    if (!atomic_load(&x->queued))
        return;
    th_progress_update u;
    pthread_mutex_lock(&x->mu);
    atomic_store(&x->queued, false);
    bool send = th_progress_take(&x->prog, &u);
    pthread_mutex_unlock(&x->mu);
    if (send)
        (void)x->call->host->progress(x->call, u.fraction, u.message, NULL, 0);
    th_progress_update_destroy(&u);
}

/* The wait of one call from code: th_call_sync()'s (progress from other
 * threads coalesced and handed over on this thread, in order, before the
 * end), with the final result copied straight from the result event into
 * the runtime's th_proj_result, whose buffers the runtime keeps from call
 * to call: no th_result_copy (three allocations) to move out of and free.
 * A call from code runs on this thread (a call inside a running call
 * always does), so the end usually arrives before th_call_start()
 * returns and no lock is taken; an async tool may end on another thread,
 * which is waited for as th_call_sync() does. */
typedef struct code_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t self;
    bool done_here;          /* the end came on this thread (only it writes) */
    bool done;               /* the end came on another thread (under mu) */
    int rc;
    th_proj_result *out;
    th_proj_progress_fn pf;
    void *pud;
    th_progress_slot prog;   /* under mu */
    atomic_bool used;        /* another thread took mu (prog or done) */
} code_wait;

/* Makes a waiter ready for one call. */
static void code_wait_reset(code_wait *w, th_proj_result *out,
                            th_proj_progress_fn pf, void *pud)
{
    w->self = pthread_self();
    w->done_here = w->done = false;
    w->rc = 0;
    w->out = out;
    w->pf = pf;
    w->pud = pud;
    memset(&w->prog, 0, sizeof w->prog);
    atomic_store_explicit(&w->used, false, memory_order_relaxed);
}

/* The final result into *o (its buffers reused); 0 or TH_ENOMEM. */
static int take_result(th_proj_result *o, const th_result *r)
{
    if (r->kind == TH_RESULT_ERROR) {
        o->kind = TH_PROJ_ERROR;
        o->error = r->error;
        if (r->message && !(o->message = strdup(r->message)))
            return TH_ENOMEM;
        return 0;
    }
    o->kind = TH_PROJ_DONE;
    o->ok = r->ok;
    o->structured = r->structured;
    th_buf_reset(&o->out);
    th_buf_reset(&o->err);
    th_buf_reset(&o->meta);
    if ((r->out_len && th_buf_append(&o->out, r->out, r->out_len)) ||
        (r->err_len && th_buf_append(&o->err, r->err, r->err_len)) ||
        (r->meta && r->meta_len &&
         th_buf_append(&o->meta, r->meta, r->meta_len)))
        return TH_ENOMEM;
    return 0;
}

static void code_wait_cb(const th_event *ev, void *ud)
{
    code_wait *w = ud;
    bool here = pthread_equal(pthread_self(), w->self);
    th_progress_update u;
    if (ev->kind == TH_EV_PROGRESS) {
        if (!w->pf)
            return;
        if (here) {
            w->pf(w->pud, ev->fraction, ev->message, ev->data, ev->data_len);
            return;
        }
        if (th_progress_copy_event(&u, ev) != 0)
            return; /* out of memory: this update is lost, the next comes */
        pthread_mutex_lock(&w->mu);
        th_progress_put(&w->prog, &u);
        atomic_store(&w->used, true);
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        return;
    }
    if (ev->result->kind == TH_RESULT_RUNNING) {
        /* the acknowledgement is the task's first update (its message) */
        if (!w->pf)
            return;
        if (here) {
            w->pf(w->pud, -1, ev->result->message, NULL, 0);
            return;
        }
        if (th_progress_copy(&u, ev->task_id, -1, ev->result->message, NULL,
                             0, 0) != 0)
            return;
        pthread_mutex_lock(&w->mu);
        if (!w->prog.pending) /* an update already waiting says more */
            th_progress_put(&w->prog, &u);
        atomic_store(&w->used, true);
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        th_progress_update_destroy(&u);
        return;
    }
    if (here) {
        w->rc = take_result(w->out, ev->result);
        w->done_here = true;
        return;
    }
    pthread_mutex_lock(&w->mu);
    w->rc = take_result(w->out, ev->result);
    w->done = true;
    atomic_store(&w->used, true);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* The tool caller: one call per call from code, waited for here. */
static int code_call(void *ud, const char *tool, const uint8_t *args,
                     size_t len, int64_t timeout_ms, th_proj_progress_fn pf,
                     void *pud, th_proj_result *out)
{
    exec_ctx *x = ud;
    th_call_opts o;
    memset(&o, 0, sizeof o);
    o.timeout_ms = timeout_ms;
    o.no_progress = pf == NULL;
    o.may_block = true; /* we wait anyway: a sync tool runs right here */
    o.front = TOOLHOST_FRONT_CODE;
    /* The run's waiter (its lock and condition made once per run): no
     * event of the previous call comes after its end, so it is free. */
    code_wait *w = x->wait;
    code_wait_reset(w, out, pf, pud);
    uint64_t id = 0;
    int rc = th_call_start(x->session, tool, args, len, &o, code_wait_cb, w,
                           &id);
    /* Ended on this thread with no other thread involved: nothing to take
     * (events of a call come in order, none after its end). */
    if (rc == 0 && !(w->done_here && !atomic_load(&w->used))) {
        pthread_mutex_lock(&w->mu);
        for (;;) { /* progress first, then the end */
            th_progress_update u;
            if (th_progress_take(&w->prog, &u)) {
                pthread_mutex_unlock(&w->mu);
                if (pf)
                    pf(pud, u.fraction, u.message, u.data, u.data_len);
                th_progress_update_destroy(&u);
                pthread_mutex_lock(&w->mu);
                continue;
            }
            if (w->done || w->done_here)
                break;
            pthread_cond_wait(&w->cv, &w->mu);
        }
        pthread_mutex_unlock(&w->mu);
    }
    if (rc == 0)
        rc = w->rc;
    th_progress_clear(&w->prog);
    flush_progress(x);
    return rc;
}

static int io_write(void *ud, int stream, const void *data, size_t len)
{
    exec_ctx *x = ud;
    return x->call->host->write(x->call, stream, data, len) ==
                   TOOLHOST_ECANCELLED
               ? 1
               : 0;
}

static int io_cancelled(void *ud)
{
    exec_ctx *x = ud;
    return x->call->host->is_cancelled(x->call);
}

typedef struct session_ctx {
    th_projection *proj;
    th_error *err;
    int rc;
} session_ctx;

static int add_session_tool(const th_tool *t, void *ud)
{
    session_ctx *s = ud;
    s->rc = th_code_projection_add(s->proj, t, s->err);
    return s->rc;
}

/* Writes a message to stderr and returns TOOLHOST_FAILED. */
static int fail(toolhost_call *call, const char *msg)
{
    (void)call->host->write(call, TOOLHOST_STDERR, msg, strlen(msg));
    return TOOLHOST_FAILED;
}

/* Reads code and timeout_ms from the validated args. */
static int parse_args(const uint8_t *args, size_t len, char **code,
                      size_t *code_len, int64_t *timeout_ms)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    int rc = TH_EARGS;
    *code = NULL;
    *timeout_ms = 0;
    if (msgpack_unpack_next(&u, (const char *)args, len, NULL) ==
            MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP) {
        for (uint32_t i = 0; i < u.data.via.map.size; i++) {
            const msgpack_object_kv *kv = &u.data.via.map.ptr[i];
            if (kv->key.type != MSGPACK_OBJECT_STR)
                continue;
            const msgpack_object_str *k = &kv->key.via.str;
            if (k->size == 4 && memcmp(k->ptr, "code", 4) == 0 &&
                kv->val.type == MSGPACK_OBJECT_STR) {
                free(*code);
                *code = malloc(kv->val.via.str.size + 1);
                if (!*code) {
                    rc = TH_ENOMEM;
                    break;
                }
                memcpy(*code, kv->val.via.str.ptr, kv->val.via.str.size);
                (*code)[kv->val.via.str.size] = '\0';
                *code_len = kv->val.via.str.size;
                rc = 0;
            } else if (k->size == 10 && memcmp(k->ptr, "timeout_ms", 10) == 0) {
                if (kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                    *timeout_ms = kv->val.via.u64 > INT64_MAX
                                      ? INT64_MAX
                                      : (int64_t)kv->val.via.u64;
                else if (kv->val.type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
                    *timeout_ms = 0;
            }
        }
    }
    msgpack_unpacked_destroy(&u);
    if (rc) {
        free(*code);
        *code = NULL;
    }
    return rc;
}

static int pack_meta(th_buf *meta, const th_code_result *res)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, meta, th_buf_msgpack_write);
    int n = 6 + (res->error ? 1 : 0) + (res->value.len ? 1 : 0);
    int rc = msgpack_pack_map(&pk, (size_t)n);
    rc |= th_pack_cstr(&pk, "return_code");
    rc |= msgpack_pack_int(&pk, res->return_code);
    rc |= th_pack_cstr(&pk, "timed_out");
    rc |= res->timed_out ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
    rc |= th_pack_cstr(&pk, "out_of_memory");
    rc |= res->out_of_memory ? msgpack_pack_true(&pk)
                             : msgpack_pack_false(&pk);
    rc |= th_pack_cstr(&pk, "cancelled");
    rc |= res->cancelled ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
    rc |= th_pack_cstr(&pk, "tool_calls");
    rc |= msgpack_pack_uint32(&pk, res->calls);
    rc |= th_pack_cstr(&pk, "language");
    rc |= th_pack_cstr(&pk, "lua");
    if (res->error) {
        rc |= th_pack_cstr(&pk, "error");
        rc |= msgpack_pack_str_with_body(&pk, res->error, strlen(res->error));
    }
    if (res->value.len) {
        rc |= th_pack_cstr(&pk, "value");
        rc |= th_buf_append(meta, res->value.data, res->value.len);
    }
    return rc ? TH_ENOMEM : 0;
}

static int run_code_execute(void *state, const toolhost_tool *tool,
                            toolhost_call *call, const uint8_t *args,
                            size_t len)
{
    (void)state, (void)tool;
    th_session *s = th_call_session(call);
    if (!s)
        return fail(call, "run_code: no session for this call (internal)");
    /* The limits of the toolset this call runs under (several toolsets
     * may enable run_code with different limits). */
    const th_toolset_cfg *ts = th_call_toolset(call);
    if (!ts || !ts->run_code.enabled)
        return fail(call, "run_code is not enabled in this toolset "
                          "(toolsets.NAME.run_code.enabled)");

    char *code = NULL;
    size_t code_len = 0;
    int64_t want_ms = 0;
    if (parse_args(args, len, &code, &code_len, &want_ms) != 0)
        return fail(call, "run_code: the argument 'code' (a string) is "
                          "required");

    th_code_limits lim;
    lim.timeout_ms = (int64_t)ts->run_code.timeout_ms;
    if (want_ms > 0 && (lim.timeout_ms <= 0 || want_ms < lim.timeout_ms))
        lim.timeout_ms = want_ms;
    int64_t left = call->host->time_left_ms(call);
    if (left >= 0 && (lim.timeout_ms <= 0 || left < lim.timeout_ms))
        lim.timeout_ms = left > 0 ? left : 1;
    lim.memory = ts->run_code.memory;
    lim.max_calls = ts->run_code.max_calls;
    lim.output_limit = ts->run_code.output_limit;

    exec_ctx x;
    memset(&x, 0, sizeof x);
    x.call = call;
    x.session = s;
    x.owner = pthread_self();
    pthread_mutex_init(&x.mu, NULL);
    atomic_init(&x.queued, false);
    code_wait wait;
    memset(&wait, 0, sizeof wait);
    pthread_mutex_init(&wait.mu, NULL);
    pthread_cond_init(&wait.cv, NULL);
    atomic_init(&wait.used, false);
    x.wait = &wait;

    th_proj_caller caller = {code_call, &x};
    th_projection *proj = th_projection_new(&th_code_lua_lang, &caller);
    th_error err;
    th_error_clear(&err);
    int status = TOOLHOST_FAILED;
    if (!proj) {
        fail(call, "run_code: out of memory");
        goto out;
    }
    session_ctx sc = {proj, &err, 0};
    int rc = th_session_tools(s, add_session_tool, &sc);
    if (rc == 0 && sc.rc)
        rc = sc.rc;
    if (rc != 0) {
        char msg[1200];
        snprintf(msg, sizeof msg, "run_code: cannot project the tools: %s",
                 err.msg[0] ? err.msg : th_strerror(rc));
        fail(call, msg);
        goto out;
    }

    th_code_io io = {io_write, forward_progress, io_cancelled, &x};
    th_code_result res;
    th_code_result_init(&res);
    rc = th_code_run(proj, code, code_len, &lim, &io, &res, &err);
    if (rc != 0) {
        char msg[1200];
        snprintf(msg, sizeof msg, "run_code: %s", err.msg);
        fail(call, msg);
        th_code_result_destroy(&res);
        goto out;
    }
    if (res.error) {
        static const char pre[] = "\n[run_code error] ";
        (void)call->host->write(call, TOOLHOST_STDERR, pre, sizeof pre - 1);
        (void)call->host->write(call, TOOLHOST_STDERR, res.error,
                                strlen(res.error));
        (void)call->host->write(call, TOOLHOST_STDERR, "\n", 1);
    }
    th_buf meta = TH_BUF_INIT;
    if (pack_meta(&meta, &res) == 0)
        (void)call->host->set_meta(call, meta.data, meta.len);
    th_buf_destroy(&meta);
    status = res.return_code == 0 ? TOOLHOST_OK : TOOLHOST_FAILED;
    th_code_result_destroy(&res);
out:
    th_projection_free(proj);
    th_progress_clear(&x.prog);
    pthread_mutex_destroy(&x.mu);
    pthread_mutex_destroy(&wait.mu);
    pthread_cond_destroy(&wait.cv);
    free(code);
    return status;
}
