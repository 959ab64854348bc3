/* rpc_methods.c - the msgpack-RPC methods: host.ping, host.stats,
 * tools.list/describe/call/cancel, tasks.list/cancel/result, host.reload,
 * the dispatch of resources.*, prompts.* and completion.complete (their
 * code is in rpc_content.c), and the client's answers to permission.request (docs/protocol.md).
 *
 * Threads.  Everything here runs on the loop thread, called from
 * rpc_dispatch() for one parsed frame; the core's callbacks that come from
 * other threads (on_call_event and the front ops) live in server.c.
 *
 * Lifetimes.  m_call creates the call record (rpc_call), gives it its id
 * (th_call_create) and hands it to th_call_submit with on_call_event; from
 * then on server.c's event handling owns it (freed at its final event or
 * the end of the connection), except when the call was answered for good
 * while th_call_submit ran on the loop (the short path, or an error found
 * at once): then m_call frees it through call_started().  A
 * permission.request record (rpc_perm) is freed here when answered, or by
 * server.c with its connection.  Params are parsed into the frame's
 * msgpack objects, which are freed right after rpc_dispatch() returns:
 * nothing here keeps a pointer into them.
 *
 * Who may use host.reload and see the whole host.stats: is_admin().
 */
#include "rpc_int.h"
#include "th/iso.h"
#include "th/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "th/codec.h"
#include "th/json.h"
#include "th/log.h"
#include "th/mpwalk.h"
#include "th/schema.h"

/* One tool as the protocol shows it: the schema module's tools.list entry
 * (docs/protocol.md, "tools.list"). */
static int pack_tool(msgpack_packer *pk, th_buf *out, const th_tool *t)
{
    (void)out;
    return th_codec_pack_tool(pk, t);
}

/* ---- Methods ---------------------------------------------------------------- */

typedef void (*method_fn)(rpc_conn *c, uint64_t msgid,
                          const msgpack_object *params);

static bool param_u64(const msgpack_object *params, uint32_t i, uint64_t *v)
{
    if (params->via.array.size <= i)
        return false;
    const msgpack_object *o = &params->via.array.ptr[i];
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return false;
    *v = o->via.u64;
    return true;
}

static void m_ping(rpc_conn *c, uint64_t msgid, const msgpack_object *params)
{
    (void)params;
    th_buf r = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &r, th_buf_msgpack_write);
    th_pack_cstr(&pk, "pong");
    send_result(c, msgid, &r);
    th_buf_destroy(&r);
}

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, rss = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%lu %lu", &size, &rss) != 2)
        rss = 0;
    fclose(f);
    return (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
}

typedef struct stats_ctx {
    msgpack_packer *pk;
    th_buf *tools;
    uint32_t n;
    int e;
    char **only;                /* not NULL: these tools only (sorted) */
    size_t n_only, cap_only;
} stats_ctx;

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* th_session_tools callback: the names a non-admin's stats may show. */
static int stats_visible(const th_tool *t, void *ud)
{
    stats_ctx *sc = ud;
    if (sc->n_only == sc->cap_only) {
        size_t cap = sc->cap_only ? 2 * sc->cap_only : 16;
        char **v = realloc(sc->only, cap * sizeof *v);
        if (!v)
            return TH_ENOMEM;
        sc->only = v;
        sc->cap_only = cap;
    }
    if (!(sc->only[sc->n_only] = strdup(t->name)))
        return TH_ENOMEM;
    sc->n_only++;
    return 0;
}

static int stats_one(const th_tool_stats *st, void *ud)
{
    stats_ctx *sc = ud;
    msgpack_packer *pk = sc->pk;
    int e = 0;
    if (sc->only && !bsearch(&st->tool, sc->only, sc->n_only,
                             sizeof *sc->only, cmp_str))
        return 0;
    sc->n++;
    e |= th_pack_cstr(pk, st->tool);
    /* calls, the outcomes (th/host.h TH_OUTCOMES: keyed by their member's
     * name), late_results and the six latencies */
    e |= msgpack_pack_map(pk, 1 + TH_OUTCOMES_N + 1 + 6);
    e |= th_pack_cstr(pk, "calls");
    e |= msgpack_pack_uint64(pk, st->calls);
#define PACK_OUTCOME(label, member)                                           \
    e |= th_pack_cstr(pk, #member);                                           \
    e |= msgpack_pack_uint64(pk, st->member);
    TH_OUTCOMES(PACK_OUTCOME)
#undef PACK_OUTCOME
    e |= th_pack_cstr(pk, "late_results");
    e |= msgpack_pack_uint64(pk, st->late_results);
    e |= th_pack_cstr(pk, "p50_ms");
    e |= msgpack_pack_double(pk, st->p50_ms);
    e |= th_pack_cstr(pk, "p99_ms");
    e |= msgpack_pack_double(pk, st->p99_ms);
    e |= th_pack_cstr(pk, "p50_1m_ms");
    e |= msgpack_pack_double(pk, st->p50_1m_ms);
    e |= th_pack_cstr(pk, "p99_1m_ms");
    e |= msgpack_pack_double(pk, st->p99_1m_ms);
    e |= th_pack_cstr(pk, "p50_5m_ms");
    e |= msgpack_pack_double(pk, st->p50_5m_ms);
    e |= th_pack_cstr(pk, "p99_5m_ms");
    e |= msgpack_pack_double(pk, st->p99_5m_ms);
    sc->e |= e;
    return 0;
}

/* m_stats: "connections": the RPC server's connections and how many
 * each limit closed (docs/config.md, "Connection limits").  Nonzero
 * when packing failed. */
static int pack_conn_stats(msgpack_packer *pk, const th_rpc_server *srv)
{
    int e = 0;
    e |= th_pack_cstr(pk, "connections");
    e |= msgpack_pack_map(pk, 7);
    e |= th_pack_cstr(pk, "current");
    e |= msgpack_pack_uint32(pk, srv->n_conns);
    e |= th_pack_cstr(pk, "total");
    e |= msgpack_pack_uint64(pk, srv->conns_total);
    /* how often each limit bit (docs/config.md, "Connection limits") */
    e |= th_pack_cstr(pk, "refused");
    e |= msgpack_pack_uint64(pk, srv->refused);
    e |= th_pack_cstr(pk, "closed_idle");
    e |= msgpack_pack_uint64(pk, srv->closed_idle);
    e |= th_pack_cstr(pk, "closed_frame_timeout");
    e |= msgpack_pack_uint64(pk, srv->closed_frame);
    e |= th_pack_cstr(pk, "closed_buffer_budget");
    e |= msgpack_pack_uint64(pk, srv->closed_budget);
    e |= th_pack_cstr(pk, "closed_protocol_errors");
    e |= msgpack_pack_uint64(pk, srv->closed_proto);
    return e;
}

/* m_stats: "manager": the async manager's workers, queue and calls. */
static int pack_mgr_stats(msgpack_packer *pk, const th_mgr_stats *ms)
{
    int e = 0;
    e |= th_pack_cstr(pk, "manager");
    e |= msgpack_pack_map(pk, 9);
    e |= th_pack_cstr(pk, "workers");
    e |= msgpack_pack_uint32(pk, ms->workers);
    e |= th_pack_cstr(pk, "async_workers");
    e |= msgpack_pack_uint32(pk, ms->async_workers);
    e |= th_pack_cstr(pk, "queued");
    e |= msgpack_pack_uint64(pk, ms->queued);
    e |= th_pack_cstr(pk, "running");
    e |= msgpack_pack_uint64(pk, ms->running);
    e |= th_pack_cstr(pk, "live_tasks");
    e |= msgpack_pack_uint64(pk, ms->live_tasks);
    e |= th_pack_cstr(pk, "calls_total");
    e |= msgpack_pack_uint64(pk, ms->calls_total);
    e |= th_pack_cstr(pk, "inline_calls");
    e |= msgpack_pack_uint64(pk, ms->inline_calls);
    e |= th_pack_cstr(pk, "lost_workers");
    e |= msgpack_pack_uint64(pk, ms->lost_workers);
    e |= th_pack_cstr(pk, "lost_workers_now");
    e |= msgpack_pack_uint32(pk, ms->lost_workers_now);
    return e;
}

static void m_stats(rpc_conn *c, uint64_t msgid, const msgpack_object *params)
{
    (void)params;
    th_rpc_server *srv = c->srv;
    th_buf r = TH_BUF_INIT, tools = TH_BUF_INIT;
    msgpack_packer pk, tpk;
    msgpack_packer_init(&pk, &r, th_buf_msgpack_write);
    msgpack_packer_init(&tpk, &tools, th_buf_msgpack_write);
    uint32_t inflight = 0;
    for (rpc_conn *k = srv->conns; k; k = k->next)
        inflight += k->inflight;
    /* Not an admin: the tools of the caller's own toolsets, no reload
     * section (it names plugin files and private copies). */
    bool admin = is_admin(c);
    stats_ctx sc = {.pk = &tpk, .tools = &tools};
    int e = 0;
    if (!admin) {
        sc.only = calloc(1, sizeof *sc.only); /* an empty list, not NULL */
        e |= !sc.only || th_session_tools(c->session, stats_visible, &sc);
        if (!e)
            qsort(sc.only, sc.n_only, sizeof *sc.only, cmp_str);
    }
    if (!e)
        th_host_stats_foreach(srv->host, stats_one, &sc);
    for (size_t i = 0; i < sc.n_only; i++)
        free(sc.only[i]);
    free(sc.only);
    th_mgr_stats ms;
    th_host_mgr_stats(srv->host, &ms);
    e |= sc.e;
    th_reloader *rl = admin ? th_host_reloader(srv->host) : NULL;
    e |= msgpack_pack_map(&pk, 7 + (admin ? 1 : 0) + (rl ? 1 : 0));
    if (admin) { /* isolated plugins: workers, restarts, health
                    (docs/isolation.md) */
        e |= th_pack_cstr(&pk, "isolation");
        e |= th_iso_stats_pack(&pk);
    }
    if (rl) {
        e |= th_pack_cstr(&pk, "reload");
        e |= th_reload_stats_pack(rl, &pk);
    }
    e |= th_pack_cstr(&pk, "version");
    e |= th_pack_cstr(&pk, TOOLHOST_VERSION);
    e |= th_pack_cstr(&pk, "uptime_ms");
    e |= msgpack_pack_uint64(&pk, (uv_hrtime() - srv->start) / 1000000u);
    e |= pack_conn_stats(&pk, srv);
    e |= th_pack_cstr(&pk, "calls");
    e |= msgpack_pack_map(&pk, 6);
    e |= th_pack_cstr(&pk, "total");
    e |= msgpack_pack_uint64(&pk, srv->calls_total);
    e |= th_pack_cstr(&pk, "in_flight");
    e |= msgpack_pack_uint32(&pk, inflight);
    e |= th_pack_cstr(&pk, "on_loop");
    e |= msgpack_pack_uint64(&pk, srv->short_calls);
    /* the core's short-call policy, host-wide (every front) */
    e |= th_pack_cstr(&pk, "inline_front");
    e |= msgpack_pack_uint64(&pk, ms.inline_front);
    e |= th_pack_cstr(&pk, "short_demoted");
    e |= msgpack_pack_uint64(&pk, ms.short_demoted);
    e |= th_pack_cstr(&pk, "short_stuck");
    e |= msgpack_pack_uint64(&pk, ms.short_stuck);
    e |= th_pack_cstr(&pk, "memory");
    e |= msgpack_pack_map(&pk, 1);
    e |= th_pack_cstr(&pk, "rss_bytes");
    e |= msgpack_pack_uint64(&pk, rss_bytes());
    e |= pack_mgr_stats(&pk, &ms);
    e |= th_pack_cstr(&pk, "tools");
    e |= msgpack_pack_map(&pk, sc.n);
    e |= th_buf_append(&r, tools.data, tools.len);
    if (e)
        send_error(c, msgid, TH_ENOMEM, "out of memory");
    else
        send_result(c, msgid, &r);
    th_buf_destroy(&r);
    th_buf_destroy(&tools);
}

typedef struct list_ctx {
    msgpack_packer pk;
    th_buf *out;
    uint32_t n;
    int rc;
} list_ctx;

static int list_one(const th_tool *t, void *ud)
{
    list_ctx *lc = ud;
    lc->n++;
    if (pack_tool(&lc->pk, lc->out, t))
        lc->rc = TH_ENOMEM;
    return lc->rc;
}

static int digest_one(const th_tool *t, void *ud)
{
    return th_host_is_task_tool(t->name) ? 0 : list_one(t, ud);
}

uint64_t rpc_tools_digest(th_session *s, void *ud)
{
    (void)ud;
    th_buf tools = TH_BUF_INIT;
    list_ctx lc = {.out = &tools};
    msgpack_packer_init(&lc.pk, &tools, th_buf_msgpack_write);
    int rc = th_session_tools(s, digest_one, &lc);
    uint64_t d = rc == 0 && lc.rc == 0 ? th_view_digest(tools.data, tools.len)
                                       : 0;
    th_buf_destroy(&tools);
    return d;
}

static void m_list(rpc_conn *c, uint64_t msgid, const msgpack_object *params)
{
    (void)params;
    /* Pack the tools first, then the array header in front of them. */
    th_buf tools = TH_BUF_INIT, r = TH_BUF_INIT;
    list_ctx lc = {.out = &tools};
    msgpack_packer_init(&lc.pk, &tools, th_buf_msgpack_write);
    int rc = th_session_tools(c->session, list_one, &lc);
    if (rc == 0)
        rc = lc.rc;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &r, th_buf_msgpack_write);
    if (rc == 0 && (msgpack_pack_array(&pk, lc.n) ||
                    th_buf_append(&r, tools.data, tools.len)))
        rc = TH_ENOMEM;
    if (rc)
        send_error(c, msgid, rc, "listing the tools failed: %s",
                   th_strerror(rc));
    else
        send_result(c, msgid, &r);
    th_buf_destroy(&tools);
    th_buf_destroy(&r);
}

/* Copies a str/bin param into `buf`; false when absent, not a string or
 * too long. */
static bool param_str(const msgpack_object *params, uint32_t i, char *buf,
                      size_t cap)
{
    const char *p;
    size_t n;
    if (params->via.array.size <= i ||
        !th_rpc_obj_str(&params->via.array.ptr[i], &p, &n) || n >= cap ||
        memchr(p, '\0', n))
        return false;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return true;
}

/* A tool name param: true with `name` filled, or false after answering
 * what is wrong with it. */
static bool param_name(rpc_conn *c, uint64_t msgid, const char *method,
                       const char *shape, const msgpack_object *params,
                       char *name, size_t cap)
{
    const char *p;
    size_t n;
    const msgpack_object *o = &params->via.array.ptr[0];
    if (!th_rpc_obj_str(o, &p, &n)) {
        send_error(c, msgid, TH_EINVAL, "%s takes %s: name must be a "
                   "string, got %s", method, shape, th_rpc_obj_kind(o));
        return false;
    }
    if (!param_str(params, 0, name, cap)) {
        send_error(c, msgid, TH_EINVAL, "%s: a tool name is at most %zu "
                   "bytes without NUL, got %zu bytes",
                   method, cap - 1, n);
        return false;
    }
    return true;
}

static void m_describe(rpc_conn *c, uint64_t msgid,
                       const msgpack_object *params)
{
    char name[128];
    uint32_t np = params->via.array.size;
    if (np != 1) {
        send_error(c, msgid, TH_EINVAL,
                   "tools.describe takes [name], got %u params",
                   (unsigned)np);
        return;
    }
    if (!param_name(c, msgid, "tools.describe", "[name]", params, name,
                    sizeof name))
        return;
    const th_tool *t = th_session_acquire(c->session, name);
    if (!t) {
        send_error(c, msgid, TH_EUNKNOWN_TOOL, "unknown tool '%s'", name);
        return;
    }
    th_buf r = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &r, th_buf_msgpack_write);
    int rc = pack_tool(&pk, &r, t);
    th_tool_release(t);
    if (rc)
        send_error(c, msgid, TH_ENOMEM, "out of memory");
    else
        send_result(c, msgid, &r);
    th_buf_destroy(&r);
}

/* The end of the msgpack value at p (a frame the reader checked): its
 * length, or 0 when the bytes end first. */
static size_t mp_value_len(const uint8_t *p, size_t n)
{
    size_t pos = 0;
    uint64_t left = 1;
    while (left) {
        th_mp_head h;
        if (pos >= n || th_mp_head_read(p + pos, n - pos, &h) != 1 ||
            h.payload > n - pos - h.hdr)
            return 0;
        pos += h.hdr + (size_t)h.payload;
        left = left - 1 + h.kids;
    }
    return pos;
}

/* The bytes of params[1] (the args) of the request the reader returned
 * last, [0, msgid, method, [name, args, options?]]: true with *p, *n set.
 * The name's string points into the frame (msgpack-c refers to the
 * buffer, it does not copy), the args follow it, and without options they
 * are the frame's last value: no walk at all in the common case. */
static bool frame_args(rpc_conn *c, const msgpack_object *params,
                       const uint8_t **p, size_t *n)
{
    const uint8_t *f = c->rd.frame, *end = f + c->rd.frame_len;
    const char *s;
    size_t sl;
    if (!f || !th_rpc_obj_str(&params->via.array.ptr[0], &s, &sl) || !sl)
        return false;
    const uint8_t *a = (const uint8_t *)s + sl;
    if ((const uint8_t *)s < f || a <= f || a >= end)
        return false;
    size_t len = (size_t)(end - a);
    if (params->via.array.size > 2 && !(len = mp_value_len(a, len)))
        return false;
    if ((a[0] & 0xf0) != 0x80 && a[0] != 0xde && a[0] != 0xdf)
        return false; /* a map (nil was handled before) */
    *p = a;
    *n = len;
    return true;
}

/* m_call: client_asks, what this client answers when the tool asks it
 * (client.ask, docs/protocol.md): an array of "sampling" and "form".
 * False when it is not. */
static bool client_asks_of(const msgpack_object *v, uint8_t *asks)
{
    bool good = v->type == MSGPACK_OBJECT_ARRAY;
    for (uint32_t j = 0; good && j < v->via.array.size; j++) {
        const msgpack_object *e = &v->via.array.ptr[j];
        if (th_rpc_obj_streq(e, "sampling"))
            *asks |= 1u << TOOLHOST_ASK_SAMPLING;
        else if (th_rpc_obj_streq(e, "form"))
            *asks |= 1u << TOOLHOST_ASK_FORM;
        else
            good = false;
    }
    return good;
}

/* m_call: one of tools.call's options (k: v) into opts, asks, or tp (the
 * traceparent, NUL-terminated: opts->traceparent points there).  False
 * when refused (answered). */
static bool call_option(rpc_conn *c, uint64_t msgid, const msgpack_object *k,
                        const msgpack_object *v, th_call_opts *opts,
                        uint8_t *asks, char tp[64])
{
    if (th_rpc_obj_streq(k, "timeout_ms")) {
        if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
            v->via.u64 > INT64_MAX) {
            send_error(c, msgid, TH_EINVAL,
                       "tools.call: timeout_ms must be a positive "
                       "integer");
            return false;
        }
        opts->timeout_ms = (int64_t)v->via.u64;
    } else if (th_rpc_obj_streq(k, "progress")) {
        if (v->type != MSGPACK_OBJECT_BOOLEAN) {
            send_error(c, msgid, TH_EINVAL,
                       "tools.call: progress must be a boolean");
            return false;
        }
        opts->no_progress = !v->via.boolean;
    } else if (th_rpc_obj_streq(k, "output_info")) {
        if (v->type != MSGPACK_OBJECT_BOOLEAN) {
            send_error(c, msgid, TH_EINVAL,
                       "tools.call: output_info must be a boolean");
            return false;
        }
        opts->output_info = v->via.boolean;
    } else if (th_rpc_obj_streq(k, "client_asks")) {
        if (!client_asks_of(v, asks)) {
            send_error(c, msgid, TH_EINVAL,
                       "tools.call: client_asks must be an array "
                       "of \"sampling\" and \"form\"");
            return false;
        }
    } else if (th_rpc_obj_streq(k, "traceparent")) {
        /* W3C trace context, for the audit log (docs/ops.md) */
        const char *tv = NULL;
        size_t tn = 0;
        if (!th_rpc_obj_str(v, &tv, &tn) || tn >= 64) {
            send_error(c, msgid, TH_EINVAL,
                       "tools.call: traceparent must be a string "
                       "(W3C trace context)");
            return false;
        }
        memcpy(tp, tv, tn);
        tp[tn] = '\0';
        opts->traceparent = tp;
    } else {
        const char *kp = "?";
        size_t kn = 1;
        th_rpc_obj_str(k, &kp, &kn);
        send_error(c, msgid, TH_EINVAL,
                   "tools.call: unknown option '%.*s' (known: "
                   "timeout_ms, progress, output_info, "
                   "traceparent, client_asks)",
                   (int)(kn > 64 ? 64 : kn), kp);
        return false;
    }
    return true;
}

/* m_call: the call's record, listed in its connection's calls and
 * counted (name: at most 127 bytes); NULL without memory. */
static rpc_call *call_listed(rpc_conn *c, const char *name, uint64_t msgid,
                             uint8_t asks)
{
    th_rpc_server *srv = c->srv;
    rpc_call *call = call_new(srv);
    if (!call)
        return NULL;
    memcpy(call->tool, name, strlen(name) + 1); /* name[] is 128 bytes */
    call->conn = c;
    call->msgid = msgid;
    call->asks = asks;
    /* only the info line of its outcome reads it (log_outcome) */
    call->t0 = th_log_get_level() >= TOOLHOST_LOG_INFO ? uv_hrtime() : 0;
    call->next = c->calls;
    if (c->calls)
        c->calls->prev = call;
    c->calls = call;
    c->inflight++;
    srv->calls_total++;
    return call;
}

static void m_call(rpc_conn *c, uint64_t msgid, const msgpack_object *params)
{
    th_rpc_server *srv = c->srv;
    char name[128];
    uint32_t np = params->via.array.size;
    if (np < 1 || np > 3) {
        send_error(c, msgid, TH_EINVAL,
                   "tools.call takes [name, args, options?], got %u params",
                   (unsigned)np);
        return;
    }
    if (!param_name(c, msgid, "tools.call", "[name, args, options?]",
                    params, name, sizeof name))
        return;
    const msgpack_object *args = np >= 2 ? &params->via.array.ptr[1] : NULL;
    if (args && args->type == MSGPACK_OBJECT_NIL)
        args = NULL;
    if (args && args->type != MSGPACK_OBJECT_MAP) {
        send_error(c, msgid, TH_EINVAL,
                   "tools.call: args must be a map (or nil), got %s",
                   th_rpc_obj_kind(args));
        return;
    }
    th_call_opts opts = {0};
    uint8_t asks = 0; /* client_asks */
    char tp[64]; /* the traceparent option, NUL-terminated */
    const msgpack_object *o = np == 3 ? &params->via.array.ptr[2] : NULL;
    if (o && o->type != MSGPACK_OBJECT_NIL) {
        if (o->type != MSGPACK_OBJECT_MAP) {
            send_error(c, msgid, TH_EINVAL,
                       "tools.call: options must be a map (or nil), got %s",
                       th_rpc_obj_kind(o));
            return;
        }
        for (uint32_t i = 0; i < o->via.map.size; i++)
            if (!call_option(c, msgid, &o->via.map.ptr[i].key,
                             &o->via.map.ptr[i].val, &opts, &asks, tp))
                return;
    }
    if (c->inflight >= srv->max_inflight) {
        /* The call is answered, then the client is told why it goes. */
        send_error(c, msgid, TH_ELIMIT, "more than %u calls in flight "
                   "(host.max_inflight): the connection is closed",
                   (unsigned)srv->max_inflight);
        th_stat_front_event(srv->host, TOOLHOST_FRONT_RPC, TH_RPC_EV_INFLIGHT);
        conn_kill(c, TH_ELIMIT, "more than %u calls in flight "
                  "(host.max_inflight)", (unsigned)srv->max_inflight);
        return;
    }
    /* The args as the frame holds them: a slice of its own bytes, not
     * packed again (the core copies what it keeps). */
    static const uint8_t empty_map[1] = {0x80};
    const uint8_t *ap = empty_map;
    size_t alen = 1;
    th_buf ab = TH_BUF_INIT;
    int prc = 0;
    if (args && !frame_args(c, params, &ap, &alen)) {
        /* not found where it must be (cannot happen for a frame the
         * reader returned): pack the object instead */
        msgpack_packer pk;
        msgpack_packer_init(&pk, &ab, th_buf_msgpack_write);
        prc = msgpack_pack_object(&pk, *args);
        ap = ab.data;
        alen = ab.len;
    }
    rpc_call *call = prc ? NULL : call_listed(c, name, msgid, asks);
    if (!call) {
        th_buf_destroy(&ab);
        send_error(c, msgid, TH_ENOMEM, "out of memory");
        return;
    }
    /* The loop is shared by every client: a tool declared short runs
     * right here (the core's policy, call_fast.c: host.short_call_max,
     * demotion); its result is answered from inside th_call_submit
     * (`starting`, on_call_event). */
    opts.short_inline = true;
    th_call_req req;
    call->call_id = th_call_create(&req, c->session, name, ap, alen, &opts,
                                   on_call_event, call);
    call->starting = true;
    int rc = th_call_submit(&req);
    call->starting = false;
    th_buf_destroy(&ab);
    if (rc < 0) {
        send_error(c, msgid, rc, "the call could not start: %s",
                   th_strerror(rc));
        call->responded = true;
        c->inflight--;
        call_free(call);
        return;
    }
    th_log_event(TOOLHOST_LOG_DEBUG, "call.start",
                 "front=rpc session=%llu tool=%s call_id=%llu msgid=%llu "
                 "started",
                 (unsigned long long)c->id, name,
                 (unsigned long long)call->call_id,
                 (unsigned long long)msgid);
    call_started(call);
}

static void m_tools_cancel(rpc_conn *c, uint64_t msgid,
                           const msgpack_object *params, bool reply)
{
    uint64_t target;
    if (!param_u64(params, 0, &target)) {
        if (reply)
            send_error(c, msgid, TH_EINVAL,
                       "tools.cancel takes [msgid of a tools.call]");
        return;
    }
    rpc_call *call = c->calls;
    while (call && !(call->msgid == target && !call->responded))
        call = call->next;
    int rc = call ? th_call_cancel(c->session, call->call_id) : TH_ENOTFOUND;
    if (!reply)
        return;
    if (rc < 0) {
        send_error(c, msgid, rc, "no call in flight with msgid %llu",
                   (unsigned long long)target);
        return;
    }
    send_true(c, msgid);
}

static void m_cancel_req(rpc_conn *c, uint64_t msgid,
                         const msgpack_object *params)
{
    m_tools_cancel(c, msgid, params, true);
}

/* ---- Tasks: the core's task store, packed by the codec ------------------- */

typedef struct tasks_ctx {
    th_session *s;
    msgpack_packer pk;
    uint32_t n;
    int64_t now_ms;
    int e;
} tasks_ctx;

static int64_t wall_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* The tasks this session started, live and finished. */
static int list_task(const th_task_view *t, void *ud)
{
    tasks_ctx *tc = ud;
    if (t->session_id != th_session_id(tc->s))
        return 0;
    tc->n++;
    tc->e |= th_codec_pack_task(&tc->pk, t, tc->now_ms);
    return 0;
}

static void m_tasks_list(rpc_conn *c, uint64_t msgid,
                         const msgpack_object *params)
{
    (void)params;
    th_buf items = TH_BUF_INIT, r = TH_BUF_INIT;
    tasks_ctx tc = {.s = c->session, .now_ms = wall_ms()};
    msgpack_packer_init(&tc.pk, &items, th_buf_msgpack_write);
    int rc = th_task_foreach(c->session, list_task, &tc);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &r, th_buf_msgpack_write);
    if (rc == 0 && (tc.e || msgpack_pack_array(&pk, tc.n) ||
                    th_buf_append(&r, items.data, items.len)))
        rc = TH_ENOMEM;
    if (rc)
        send_error(c, msgid, rc, "listing the tasks failed: %s",
                   th_strerror(rc));
    else
        send_result(c, msgid, &r);
    th_buf_destroy(&items);
    th_buf_destroy(&r);
}

static void m_tasks_cancel(rpc_conn *c, uint64_t msgid,
                           const msgpack_object *params)
{
    uint64_t id;
    if (!param_u64(params, 0, &id)) {
        send_error(c, msgid, TH_EINVAL, "tasks.cancel takes [task_id]");
        return;
    }
    /* Another uid's task is answered as if it did not exist. */
    int rc = th_task_cancel(c->session, id);
    if (rc == TH_ESTATE)
        send_error(c, msgid, rc, "task %llu already finished",
                   (unsigned long long)id);
    else if (rc < 0)
        send_error(c, msgid, rc, "no running task %llu",
                   (unsigned long long)id);
    else
        send_true(c, msgid);
}

typedef struct result_ctx {
    th_buf *out;
    int rc;
} result_ctx;

/* The final result, or {status: "running", task_id, message} with the
 * last progress message (the view tasks.list shows). */
static void result_one(const th_task_view *t, void *ud)
{
    result_ctx *rc = ud;
    if (t->result) {
        rc->rc = pack_result(rc->out, t->result);
        return;
    }
    th_result_copy run;
    memset(&run, 0, sizeof run);
    run.kind = TH_RESULT_RUNNING;
    run.task_id = t->task_id;
    run.message = (char *)t->message;
    rc->rc = pack_result(rc->out, &run);
}

static void m_tasks_result(rpc_conn *c, uint64_t msgid,
                           const msgpack_object *params)
{
    uint64_t id;
    if (!param_u64(params, 0, &id)) {
        send_error(c, msgid, TH_EINVAL, "tasks.result takes [task_id]");
        return;
    }
    th_buf r = TH_BUF_INIT;
    result_ctx ctx = {&r, 0};
    int rc = th_task_get(c->session, id, result_one, &ctx);
    if (rc == TH_ENOTFOUND) {
        /* A call of this session that is not (yet) a task. */
        th_result_copy tmp;
        if (th_task_result(c->session, id, &tmp) == TH_ESTATE) {
            th_result_copy run;
            memset(&run, 0, sizeof run);
            run.kind = TH_RESULT_RUNNING;
            run.task_id = id;
            rc = ctx.rc = pack_result(&r, &run);
        }
        th_result_copy_destroy(&tmp);
    }
    if (rc == TH_ENOTFOUND)
        /* Another uid's task (or one unknown here): not even its state. */
        send_error(c, msgid, TH_ENOTFOUND,
                   "no task %llu (unknown, expired, or not yours)",
                   (unsigned long long)id);
    else if (rc || ctx.rc)
        send_error(c, msgid, TH_ENOMEM, "out of memory");
    else
        send_result(c, msgid, &r);
    th_buf_destroy(&r);
}

/* The admin methods (host.reload, host.disable, ...): true for an admin,
 * else the refusal is answered (naming the rule) and logged. */
static bool admin_or_refuse(rpc_conn *c, uint64_t msgid, const char *method)
{
    if (is_admin(c))
        return true;
    char rule[512];
    th_host_admin_rule(c->srv->host, rule, sizeof rule);
    conn_log(c, TOOLHOST_LOG_WARN, "session=%llu uid=%u %s refused: not an "
             "admin", (unsigned long long)c->id, (unsigned)c->who.uid,
             method);
    send_error(c, msgid, TH_EPERM, "%s needs an admin (%s); uid %u is not "
               "one", method, rule, (unsigned)c->who.uid);
    return false;
}

/* host.reload: a reload on the reloader's thread; the answer (the
 * th_reload_result_pack map) goes to the connection if it is still there
 * (looked up by id: it may have closed meanwhile).  tools.changed reaches
 * every session through th_front_ops.tools_changed. */
typedef struct reload_req {
    th_rpc_server *srv;
    uint64_t conn_id, msgid;
} reload_req;

static void reload_answered(const th_reload_result *res, void *ud)
{
    reload_req *q = ud;
    rpc_conn *c = q->srv->conns;
    while (c && c->id != q->conn_id)
        c = c->next;
    if (c && !c->closing) {
        th_buf r = TH_BUF_INIT;
        msgpack_packer pk;
        msgpack_packer_init(&pk, &r, th_buf_msgpack_write);
        if (th_reload_result_pack(res, &pk) != 0)
            send_error(c, q->msgid, TH_ENOMEM, "out of memory");
        else
            send_result(c, q->msgid, &r);
        th_buf_destroy(&r);
    }
    free(q);
}

static void m_reload(rpc_conn *c, uint64_t msgid, const msgpack_object *params)
{
    (void)params;
    th_rpc_server *srv = c->srv;
    if (!admin_or_refuse(c, msgid, "host.reload"))
        return;
    if (!srv->reload) {
        send_error(c, msgid, TH_ESTATE,
                   "reloads are off on this host (host.reload: off)");
        return;
    }
    reload_req *q = malloc(sizeof *q);
    if (!q) {
        send_error(c, msgid, TH_ENOMEM, "out of memory");
        return;
    }
    *q = (reload_req){srv, c->id, msgid};
    int rc = th_reload_watch_request(srv->reload, reload_answered, q);
    if (rc) {
        free(q);
        send_error(c, msgid, rc, "%s", rc == TH_ESTATE ? "the host is stopping"
                                                      : "out of memory");
    }
}

/* host.disable [pattern, reason], host.enable [pattern], host.disabled []:
 * tools taken out of service at run time (th/host.h th_host_disable),
 * admins only; the entry records the caller as "uid N". */

static void m_disable(rpc_conn *c, uint64_t msgid,
                      const msgpack_object *params)
{
    char pattern[257], reason[513], by[64];
    if (!admin_or_refuse(c, msgid, "host.disable"))
        return;
    if (params->via.array.size != 2 ||
        !param_str(params, 0, pattern, sizeof pattern) ||
        !param_str(params, 1, reason, sizeof reason)) {
        send_error(c, msgid, TH_EINVAL, "host.disable takes [pattern, "
                   "reason]: a tool name or fnmatch pattern (at most 256 "
                   "bytes) and the reason callers are told (at most 512)");
        return;
    }
    snprintf(by, sizeof by, "uid %u", (unsigned)c->who.uid);
    th_error e;
    th_error_clear(&e);
    int rc = th_host_disable(c->srv->host, pattern, reason, by, &e);
    if (rc) {
        send_error(c, msgid, rc, "%s", e.msg);
        return;
    }
    send_true(c, msgid);
}

static void m_enable(rpc_conn *c, uint64_t msgid,
                     const msgpack_object *params)
{
    char pattern[257];
    if (!admin_or_refuse(c, msgid, "host.enable"))
        return;
    if (params->via.array.size != 1 ||
        !param_str(params, 0, pattern, sizeof pattern)) {
        send_error(c, msgid, TH_EINVAL, "host.enable takes [pattern]: the "
                   "pattern as host.disable was given it");
        return;
    }
    if (th_host_enable(c->srv->host, pattern) != 0) {
        send_error(c, msgid, TH_ENOTFOUND, "nothing is disabled under '%s' "
                   "(host.disabled lists what is)", pattern);
        return;
    }
    send_true(c, msgid);
}

typedef struct disabled_walk {
    msgpack_packer pk; /* into the entries' bytes */
    uint32_t n;
} disabled_walk;

static int pack_disabled(const th_disabled_view *v, void *ud)
{
    disabled_walk *w = ud;
    msgpack_packer *pk = &w->pk;
    int e = msgpack_pack_map(pk, 4);
    e |= th_pack_cstr(pk, "pattern");
    e |= th_pack_cstr(pk, v->pattern);
    e |= th_pack_cstr(pk, "reason");
    e |= th_pack_cstr(pk, v->reason);
    e |= th_pack_cstr(pk, "by");
    e |= th_pack_cstr(pk, v->by);
    e |= th_pack_cstr(pk, "since_ms");
    e |= msgpack_pack_int64(pk, v->since_ms);
    w->n++;
    return e ? -1 : 0;
}

/* host.disabled: [{pattern, reason, by, since_ms}, ...], in the order
 * they were disabled (one walk under the set's lock). */
static void m_disabled(rpc_conn *c, uint64_t msgid,
                       const msgpack_object *params)
{
    (void)params;
    if (!admin_or_refuse(c, msgid, "host.disabled"))
        return;
    th_buf items = TH_BUF_INIT, r = TH_BUF_INIT;
    disabled_walk w = {.n = 0};
    msgpack_packer_init(&w.pk, &items, th_buf_msgpack_write);
    int rc = th_host_disabled_foreach(c->srv->host, pack_disabled, &w);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &r, th_buf_msgpack_write);
    if (rc == 0)
        rc = msgpack_pack_array(&pk, w.n);
    if (rc == 0 && items.len)
        rc = th_buf_append(&r, items.data, items.len);
    if (rc)
        send_error(c, msgid, TH_ENOMEM, "out of memory");
    else
        send_result(c, msgid, &r);
    th_buf_destroy(&items);
    th_buf_destroy(&r);
}

/* The methods, tools.call first (nearly every frame is one); the name's
 * length is compared before its bytes. */
#define METHOD(name, fn) {name, sizeof name - 1, fn}
static const struct {
    const char *name;
    size_t len;
    method_fn fn;
} methods[] = {
    METHOD("tools.call", m_call),
    METHOD("tools.list", m_list),
    METHOD("tools.describe", m_describe),
    METHOD("tools.cancel", m_cancel_req),
    METHOD("tasks.list", m_tasks_list),
    METHOD("tasks.cancel", m_tasks_cancel),
    METHOD("tasks.result", m_tasks_result),
    METHOD("host.ping", m_ping),
    METHOD("host.stats", m_stats),
    METHOD("host.reload", m_reload),
    METHOD("host.disable", m_disable),
    METHOD("host.enable", m_enable),
    METHOD("host.disabled", m_disabled),
    METHOD("resources.list", rpc_m_resources_list),
    METHOD("resources.templates", rpc_m_resources_templates),
    METHOD("resources.read", rpc_m_resources_read),
    METHOD("prompts.list", rpc_m_prompts_list),
    METHOD("prompts.get", rpc_m_prompts_get),
    METHOD("completion.complete", rpc_m_complete),
};
#undef METHOD

/* Counts a protocol error; past max_protocol_errors the client is not
 * speaking the protocol and is disconnected. */
static void conn_protocol_error(rpc_conn *c, const char *what)
{
    th_rpc_server *srv = c->srv;
    th_stat_front_event(srv->host, TOOLHOST_FRONT_RPC, TH_RPC_EV_PROTOCOL);
    if (++c->proto_errors < srv->max_proto_errors)
        return;
    srv->closed_proto++;
    th_stat_front_event(srv->host, TOOLHOST_FRONT_RPC, TH_RPC_EV_MAX_PROTOCOL);
    conn_kill(c, TH_EPROTO,
              "%u protocol errors (max_protocol_errors), the last: %s",
              (unsigned)c->proto_errors, what);
}

static void on_response(rpc_conn *c, const th_rpc_msg *m)
{
    rpc_perm **pp = &c->perms;
    while (*pp && (*pp)->msgid != m->msgid)
        pp = &(*pp)->next;
    if (!*pp) {
        conn_log(c, TOOLHOST_LOG_DEBUG,
                 "session=%llu response to unknown msgid %llu ignored",
                 (unsigned long long)c->id, (unsigned long long)m->msgid);
        conn_protocol_error(c, "responses to requests never sent");
        return;
    }
    rpc_perm *p = *pp;
    *pp = p->next;
    if (p->ask_id) { /* a client.ask: its answer, or its error, as JSON */
        bool ok = m->error->type == MSGPACK_OBJECT_NIL;
        th_buf b = TH_BUF_INIT;
        msgpack_packer pk;
        msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
        th_error err;
        json_t *j = msgpack_pack_object(&pk, ok ? *m->result : *m->error)
                        ? NULL
                        : th_json_from_msgpack_lossy(b.data, b.len, &err);
        th_buf_destroy(&b);
        char *txt = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        json_decref(j);
        th_call_client_answer(p->ask_id,
                              !txt ? TOOLHOST_ENOMEM
                              : ok ? 0
                                   : TOOLHOST_FAILED,
                              txt, txt ? strlen(txt) : 0);
        free(txt);
        free(p);
        return;
    }
    bool allow = m->error->type == MSGPACK_OBJECT_NIL &&
                 m->result->type == MSGPACK_OBJECT_BOOLEAN &&
                 m->result->via.boolean;
    th_permission_answer(c->session, p->call_id, allow);
    free(p);
}

void rpc_dispatch(rpc_conn *c, const msgpack_object *o)
{
    th_rpc_msg m;
    bool has_id;
    th_error err;
    if (th_rpc_msg_parse(o, &m, &has_id, &err) != 0) {
        conn_log(c, TOOLHOST_LOG_WARN, "session=%llu bad message: %s",
                 (unsigned long long)c->id, err.msg);
        if (has_id) {
            send_error(c, m.msgid, TH_EPROTO, "%s", err.msg);
        } else {
            /* Without a msgid there is no response to send: say it in a
             * notification the client may ignore. */
            th_buf p = TH_BUF_INIT;
            msgpack_packer pk;
            msgpack_packer_init(&pk, &p, th_buf_msgpack_write);
            msgpack_pack_array(&pk, 1);
            msgpack_pack_array(&pk, 2);
            msgpack_pack_int(&pk, TH_EPROTO);
            th_pack_cstr(&pk, err.msg);
            send_notify(c, "host.protocol_error", &p);
            th_buf_destroy(&p);
        }
        conn_protocol_error(c, err.msg);
        return;
    }
    if (m.kind == TH_RPC_RESPONSE) {
        on_response(c, &m);
        return;
    }
    if (m.kind == TH_RPC_REQUEST && c->srv->stopping) {
        send_error(c, m.msgid, TH_ESTATE, "the host is shutting down");
        return;
    }
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        if (methods[i].len != m.method_len ||
            memcmp(methods[i].name, m.method, m.method_len) != 0)
            continue;
        if (m.kind == TH_RPC_NOTIFY) {
            /* Only cancellation makes sense without an answer. */
            if (methods[i].fn == m_cancel_req)
                m_tools_cancel(c, 0, m.params, false);
            return;
        }
        methods[i].fn(c, m.msgid, m.params);
        return;
    }
    if (m.kind == TH_RPC_NOTIFY) {
        conn_log(c, TOOLHOST_LOG_DEBUG,
                 "session=%llu notification '%.*s' ignored",
                 (unsigned long long)c->id,
                 (int)(m.method_len > 64 ? 64 : m.method_len), m.method);
        return;
    }
    send_error(c, m.msgid, TH_ENOTFOUND, "unknown method '%.*s'",
               (int)(m.method_len > 64 ? 64 : m.method_len), m.method);
}
