/* call_start.c - starting a call, as named stages:
 *
 *   1. lookup and policy  the tool (pinned), the toolset it runs under and
 *                         the caller's ACL, read from ONE config snapshot
 *   2. record             the call object: it holds the snapshot (a
 *                         reference), the tool, the session; from here on
 *                         every outcome is an answer of the call
 *   3. arguments          confirm_duplicate stripped, validation (the one
 *                         place: the parameter table, then the plugin's
 *                         validate_args)
 *   4. permission         the plugin's needs_permission, the toolset's
 *                         rules: deny, ask the front, or go on
 *   then the manager      duplicates, deadline, inline or queue (manager.c)
 *
 * Stages 1 and 2 run on the caller's thread and call no plugin code.
 * Stages 3 and 4 call plugin code (validate_args, needs_permission): a
 * caller that waits for the call anyway (may_block: th_call_sync, a tool
 * calling tools) runs them itself; for any other caller (a front's event
 * loop) a pool worker runs them, so that a slow hook never stalls the
 * loop and the other clients it serves.
 *
 * The config snapshot travels with the call: its timeout, limits,
 * duplicate policy, permission rules and output limits all come from the
 * config the call started under, whatever a reload does meanwhile. */
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call_fast.h"
#include "call_int.h"
#include "disable.h"
#include "rate.h"
#include "th/audit.h"
#include "th/log.h"
#include "th/perm.h"

/* Removes "confirm_duplicate" from an argument map (confirm tools). */
static int strip_confirm(const uint8_t *args, size_t len, th_buf *out,
                         bool *confirm, bool *found, char *err, size_t errsz)
{
    *confirm = *found = false;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    if (msgpack_unpack_next(&u, (const char *)args, len, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        u.data.type != MSGPACK_OBJECT_MAP) {
        msgpack_unpacked_destroy(&u);
        return 0; /* validation says what is wrong */
    }
    const msgpack_object_map *m = &u.data.via.map;
    int at = -1;
    for (uint32_t i = 0; i < m->size; i++)
        if (m->ptr[i].key.type == MSGPACK_OBJECT_STR &&
            m->ptr[i].key.via.str.size == 17 &&
            memcmp(m->ptr[i].key.via.str.ptr, "confirm_duplicate", 17) == 0)
            at = (int)i;
    int rc = 0;
    if (at >= 0) {
        *found = true;
        if (m->ptr[at].val.type != MSGPACK_OBJECT_BOOLEAN) {
            snprintf(err, errsz, "parameter 'confirm_duplicate' must be a boolean");
            rc = TH_EARGS;
        } else {
            *confirm = m->ptr[at].val.via.boolean;
            msgpack_packer pk;
            msgpack_packer_init(&pk, out, th_buf_msgpack_write);
            rc = msgpack_pack_map(&pk, m->size - 1);
            for (uint32_t i = 0; i < m->size && rc == 0; i++) {
                if ((int)i == at)
                    continue;
                rc = msgpack_pack_object(&pk, m->ptr[i].key);
                if (rc == 0)
                    rc = msgpack_pack_object(&pk, m->ptr[i].val);
            }
            if (rc)
                rc = TH_ENOMEM;
        }
    }
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* ---- 1. Lookup and policy ---------------------------------------------------- */

/* What stage 1 decided. */
typedef struct call_plan {
    th_config *cfg;             /* the call's snapshot (a reference) */
    const th_tool *tool;        /* pinned */
    th_stat *st;
    int ts_idx;                 /* -1: a task tool (no toolset) */
    const th_toolset_cfg *ts;   /* in cfg */
    const th_tool_override *ov; /* in cfg: the tool's override in ts */
    const th_mock_cfg *mock;    /* in cfg */
    int64_t timeout_ms;         /* the call's timeout unless it asks for
                                   a lower one (timeout_of) */
    bool perm_free;             /* the tool has no needs_permission hook
                                   and ts's rules allow it without asking:
                                   stage 4 has nothing to decide */
    int refused;                /* the TH_E* code a refusal answered with
                                   before any call record (for the audit) */
} call_plan;

/* The decision cache.  What stage 1 decides depends on the config
 * snapshot, the tool and the session (its principal's usable toolsets,
 * fixed when it opened) alone: each thread keeps its last decisions, so
 * that a call of the same tool in the same session under the same config
 * costs a compare instead of the toolset scan, the override and mock
 * lookups, the stats entry's lookup and the permission rules.
 *
 * An entry is keyed by
 *   - the host's serial (th_mgr.serial) and the session's id: neither is
 *     ever reused, so a closed session's or host's entry never matches;
 *   - the config's pointer and serial (th_config.serial), the tool's
 *     pointer and its plugin generation's serial (th_plugin.serial):
 *     serials are never reused, so a config or a plugin freed by a reload
 *     and another made at the same address never match (no ABA).
 * A thread compares the key against the snapshot and the pinned tool of
 * the call it starts (which it holds), and reads the entry's pointers
 * (toolset, override, mock: in that config; the stats entry: in that
 * host) only after the key matched: an entry whose config is gone is
 * never dereferenced, and holds no reference (a reload frees what it
 * replaced as before).  Per thread: no lock, no atomics; several threads
 * calling on one session each decide once.  Only plain outcomes are kept:
 * a refusal (no toolset, denied) is decided again each time, and a tool
 * with a needs_permission hook is asked on every call (stage 4). */
typedef struct plan_entry {
    uint64_t host, sid, cfg_serial, plugin_serial;
    const th_config *cfg;       /* compared only */
    const th_tool *tool;        /* compared only */
    th_stat *st;
    const th_toolset_cfg *ts;
    const th_tool_override *ov;
    const th_mock_cfg *mock;
    int64_t timeout_ms;
    int ts_idx;
    bool perm_free;
} plan_entry;

#define PLAN_WAYS 8 /* a power of two */
static _Thread_local plan_entry tl_plan[PLAN_WAYS];

static _Atomic uint64_t serial_next;

/* Gives *slot a serial unless another thread did first. */
static __attribute__((noinline)) uint64_t serial_give(uint64_t *slot)
{
    uint64_t n = atomic_fetch_add(&serial_next, 1) + 1, z = 0;
    if (__atomic_compare_exchange_n(slot, &z, n, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        return n;
    return z; /* the other thread's */
}

/* The serial of a config or plugin generation the caller holds. */
static inline uint64_t serial_of(uint64_t *slot)
{
    uint64_t v = __atomic_load_n(slot, __ATOMIC_RELAXED);
    return v ? v : serial_give(slot);
}

static inline plan_entry *plan_slot(const th_tool *t, uint64_t sid)
{
    uint64_t k = ((uint64_t)(uintptr_t)t ^ (sid * 0x9E3779B97F4A7C15ull)) *
                 0x9E3779B97F4A7C15ull;
    return &tl_plan[k >> 61 & (PLAN_WAYS - 1)];
}

/* The call's timeout from its snapshot: the tool's override in its
 * toolset, else the toolset's, else the host's default; a call's own
 * timeout_ms (opt, > 0) may lower it; host.max_timeout caps it.  `c`
 * (for the log line) may be NULL when opt is 0. */
static int64_t timeout_of(const th_config *cfg, const th_toolset_cfg *ts,
                          const th_tool_override *ov, int64_t opt,
                          const th_mcall *c)
{
    const th_host_cfg *hc = &cfg->host;
    uint64_t max = hc->max_timeout_ms;
    uint64_t t = ov && ov->timeout_ms ? ov->timeout_ms
                 : ts && ts->timeout_ms ? ts->timeout_ms
                                        : hc->default_timeout_ms;
    /* A call's own timeout_ms may lower its toolset's timeout, not raise
     * it (whatever the front: RPC, CLI, run_code's nested calls). */
    if (opt > 0) {
        if (t && (uint64_t)opt > t)
            th_log_info("session=%llu tool=%s call=%llu timeout_ms %lld is above "
                        "the toolset's timeout: %llu ms used",
                        (unsigned long long)(c->s ? c->s->id : 0), c->tool->name,
                        (unsigned long long)c->base.pub.call_id,
                        (long long)opt, (unsigned long long)t);
        else
            t = (uint64_t)opt;
    }
    if (max && t > max)
        t = max;
    if (t > (uint64_t)INT64_MAX / 4000000) /* no overflow in ns (~73 days) */
        t = (uint64_t)INT64_MAX / 4000000;
    return (int64_t)t;
}

/* Stage 1 without the cache (p->st found): 0 with p filled, or 1
 * (answered through fn, the tool released). */
static int plan_decide(th_session *s, const char *name, uint64_t id,
                       th_event_fn fn, void *ud, call_plan *p)
{
    th_host *h = s->h;
    const th_tool *t = p->tool;
    p->ts_idx = -1;
    p->ts = NULL;
    p->ov = NULL;
    p->mock = th_mock_find(p->cfg, t->name);
    p->perm_free = true; /* a task tool: no toolset, no rules */
    p->timeout_ms = timeout_of(p->cfg, NULL, NULL, 0, NULL);
    if (th_host_is_task_tool(t->name))
        return 0;
    /* The first toolset in config order that contains the tool and that
     * the session may use. */
    bool any = false;
    for (size_t i = 0; i < p->cfg->n_toolsets && p->ts_idx < 0; i++) {
        if (!th_host_toolset_has(h, &p->cfg->toolsets[i], t))
            continue;
        any = true;
        if (s->usable[i])
            p->ts_idx = (int)i;
    }
    if (p->ts_idx >= 0) {
        p->ts = &p->cfg->toolsets[p->ts_idx];
        p->ov = th_host_override(p->ts, t->name);
        p->perm_free = false;
        if (t->desc && !t->desc->needs_permission) {
            /* the decision of stage 4 for this tool's own flags */
            th_perm_decision d;
            th_perm_decide(p->ts, p->cfg->path, t->name, t->flags, &d);
            p->perm_free = d.action == TH_PERM_ALLOW;
        }
        p->timeout_ms = timeout_of(p->cfg, p->ts, p->ov, 0, NULL);
        return 0;
    }
    p->refused = any ? TH_EPERM : TH_EUNKNOWN_TOOL;
    if (any) {
        atomic_fetch_add(&p->st->perm_denied, 1);
        th_call_emit_error(fn, ud, id, TH_EPERM,
                           "permission denied: no toolset that contains tool '%s' allows uid %u",
                           name, (unsigned)s->who.uid);
    } else {
        atomic_fetch_add(&p->st->errors, 1);
        th_call_emit_error(fn, ud, id, TH_EUNKNOWN_TOOL, "unknown tool '%s'", name);
    }
    th_tool_release(t);
    return 1;
}

/* 0: go on; 1: answered through fn (nothing held); < 0: fn will never be
 * called.  p->cfg is the caller's; on 0 p->tool is pinned. */
static int stage_lookup(th_session *s, const char *name, uint64_t id,
                        th_event_fn fn, void *ud, call_plan *p)
{
    th_host *h = s->h;
    p->tool = th_registry_acquire(h->reg, name);
    if (!p->tool) {
        th_stat_call_started(h, NULL);
        p->refused = TH_EUNKNOWN_TOOL;
        th_call_emit_error(fn, ud, id, TH_EUNKNOWN_TOOL, "unknown tool '%s'", name);
        return 1;
    }
    const th_tool *t = p->tool;
    uint64_t hs = h->mgr.serial;
    uint64_t cs = serial_of(&p->cfg->serial);
    uint64_t ps = serial_of(&t->plugin->serial);
    plan_entry *e = plan_slot(t, s->id);
    if (e->tool == t && e->cfg == p->cfg && e->sid == s->id &&
        e->host == hs && e->cfg_serial == cs && e->plugin_serial == ps &&
        hs != 0) {
        p->st = e->st;
        p->ts_idx = e->ts_idx;
        p->ts = e->ts;
        p->ov = e->ov;
        p->mock = e->mock;
        p->timeout_ms = e->timeout_ms;
        p->perm_free = e->perm_free;
        th_stat_call_started(h, p->st);
        return 0;
    }
    p->st = th_stat_get(h, t->name);
    if (!p->st) {
        th_stat_call_started(h, NULL);
        th_tool_release(t);
        return TH_ENOMEM;
    }
    th_stat_call_started(h, p->st);
    int rc = plan_decide(s, name, id, fn, ud, p);
    if (rc != 0 || hs == 0) /* serial 0: a manager not set up */
        return rc;
    *e = (plan_entry){.host = hs, .sid = s->id, .cfg_serial = cs,
                      .plugin_serial = ps, .cfg = p->cfg, .tool = t,
                      .st = p->st, .ts = p->ts, .ov = p->ov,
                      .mock = p->mock, .timeout_ms = p->timeout_ms,
                      .ts_idx = p->ts_idx,
                      .perm_free = p->perm_free};
    return 0;
}

/* ---- 2. The call record ---------------------------------------------------- */

/* stage_record: the new call published where others find it.  A call
 * that runs inline here with nothing of the pool to take is published in
 * this thread's call slot, not the session's map (no lock); th_call_start
 * takes it out.  Closing: the seq_cst pair with th_session_close (it sets
 * closing, then looks at the slots; we filled the slot, then read
 * closing) means one of us sees the other.  Returns as stage_record. */
static int record_publish(th_host *h, th_session *s, th_mcall *c,
                          th_mcall **out)
{
    /* The slot's reference (dropped when it is cleared) counted before
     * the slot's compare-and-swap publishes c: no one else sees c yet,
     * so plain stores, no locked increment. */
    atomic_store_explicit(&c->refs, 2, memory_order_relaxed);
    if (th_mgr_cslot_put(h, c)) {
        *out = c;
        if (__atomic_load_n(&s->closing, __ATOMIC_SEQ_CST)) {
            /* The close may have found it in the slot already: answered
             * as the close answers its calls (fn gets one answer,
             * whoever gives it). */
            th_mcall_never_run(c, TH_ECANCELLED, "the session ended");
            return 1;
        }
        return 0;
    }
    atomic_store_explicit(&c->refs, 1, memory_order_relaxed); /* not published */
    pthread_mutex_lock(&s->mu);
    int rc = th_call_session_put_locked(c);
    pthread_mutex_unlock(&s->mu);
    if (rc != 0) {
        c->fn = NULL;
        th_mcall_unref(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* Makes the call object from the plan (whose references it takes, also on
 * failure) and registers it in its session (its map, or this thread's
 * call slot: then *out keeps the slot's reference, and 1 says the call
 * is answered already: its session closes).  With `args` the call keeps a
 * copy of the arguments as given (for a worker to validate later); with
 * NULL the caller validates them right away (c->args stays NULL until
 * then).  0 with *out holding the execution reference, or TH_ENOMEM /
 * TH_ESTATE (fn will never be called). */
static int stage_record(th_session *s, call_plan *p, const uint8_t *args,
                        size_t len, const uint8_t *raw,
                        const th_call_opts *o, th_event_fn fn, void *ud,
                        uint64_t id, th_mcall **out)
{
    th_host *h = s->h;
    const th_tool *t = p->tool;
    /* A call that may run inline on the caller's thread gets the room
     * for its running part (th_mcall_x) in the same allocation; a call
     * that will wait in the queue (an async task) stays small until a
     * worker runs it. */
    bool room = o->may_block;
    th_mcall *c = th_call_rec_new(room);
    uint8_t *copy = args ? malloc(len ? len : 1) : NULL;
    if (!c || (args && !copy)) {
        if (c)
            th_call_rec_free(c);
        free(copy);
        th_tool_release(t);
        th_config_unref(p->cfg);
        return TH_ENOMEM;
    }
    if (copy)
        memcpy(copy, args, len);
    c->base.pub.struct_size = sizeof c->base.pub;
    c->base.pub.call_id = id;
    c->base.pub.host = &t->plugin->api;
    c->base.vt = &th_mcall_vtbl;
    c->h = h;
    c->s = s;
    th_session_ref(s);
    c->cfg = p->cfg;
    c->tool = t;
    c->st = p->st;
    c->ts = p->ts;
    c->ts_idx = p->ts_idx;
    c->ov = p->ov;
    c->mock = p->mock;
    c->args = copy;
    c->args_len = copy ? len : 0;
    c->scope = c->ts ? c->ts->scope : TH_SCOPE_SESSION;
    c->is_async = (t->flags & TOOLHOST_TOOL_ASYNC) != 0;
    c->no_progress = o->no_progress;
    c->as_task = o->as_task;
    c->may_block = o->may_block;
    c->front = o->front;
    if (h->audit)
        th_audit_call_begin(c, raw, len, o->traceparent);
    c->output_info = o->output_info;
    c->timeout_ms = o->timeout_ms > 0
                        ? timeout_of(c->cfg, c->ts, c->ov, o->timeout_ms, c)
                        : p->timeout_ms;
    c->start_ns = th_fast_ns(); /* the TSC clock: clock.c */
    /* start_wall_ms and last_update_ms: set when the call becomes a task
     * (call_cb.c), the only calls that show them; a clock read saved on
     * every other call */
    c->heap_idx = SIZE_MAX;
    c->parent = th_mcall_current(); /* referenced: read by cancelled() */
    if (c->parent)
        th_mcall_ref(c->parent);
    c->fn = fn;
    c->ud = ud;
    atomic_init(&c->refs, 1); /* the execution reference */
    atomic_init(&c->abort_code, 0);
    atomic_init(&c->is_task, false);
    /* counted on this thread's part (no lock prefix), else the shared word */
    if (th_stat_tl_slot > 0)
        th_own_add(&h->mgr.calls_sh[th_stat_tl_slot - 1].lstart, 1);
    else
        atomic_fetch_add(&h->live_calls, 1);

    return record_publish(h, s, c, out);
}

/* ---- 3. Arguments ------------------------------------------------------------ */

/* stage_args, a tool whose duplicates are confirmed: the host's own
 * parameter confirm_duplicate taken out of (*a, *al) into stripped
 * (then *a, *al point there) and into c->confirm.  0, or the call is
 * answered and its execution reference dropped (nonzero). */
static int args_strip_confirm(th_mcall *c, th_buf *stripped,
                              const uint8_t **a, size_t *al)
{
    char e[160];
    bool confirm = false, found = false;
    int rc = strip_confirm(*a, *al, stripped, &confirm, &found, e, sizeof e);
    if (rc != 0) {
        th_buf_destroy(stripped);
        char m[400];
        snprintf(m, sizeof m, "Error parsing arguments for %s: %s",
                 c->tool->name, e);
        th_mcall_never_run(c, rc, rc == TH_ENOMEM ? "out of memory" : m);
        return -1;
    }
    c->confirm = confirm;
    if (found) {
        *a = stripped->data;
        *al = stripped->len;
    }
    return 0;
}

/* Validates (raw, raw_len) — c->args, or the caller's buffer — into
 * c->args.  With `borrow` (raw is the caller's buffer, and the caller is
 * inside th_call_start until the call runs or is queued) arguments that
 * validation left as they were are borrowed, not copied
 * (th_mcall.args_borrowed).  0, or the call is answered and its execution
 * reference dropped (nonzero). */
static int stage_args(th_mcall *c, const uint8_t *raw, size_t raw_len,
                      bool borrow, toolhost_arg *vitems,
                      toolhost_args_view *view)
{
    const th_tool *t = c->tool;
    th_dup_policy pol = th_call_dup_policy(c);
    /* confirm_duplicate is the host's parameter: strip it first. */
    th_buf stripped = TH_BUF_INIT;
    const uint8_t *a = raw;
    size_t al = raw_len;
    if (pol == TH_DUP_CONFIRM && args_strip_confirm(c, &stripped, &a, &al) != 0)
        return -1;

    /* Validation: the one place. */
    th_buf vb = TH_BUF_INIT;
    const uint8_t *va = NULL;
    size_t vl = 0;
    th_error e;
    th_error_clear(&e);
    uint8_t *copy = NULL;
    int rc = th_validate_call_view(t, a, al, &vb, &va, &vl, vitems, view, &e);
    /* Where the validated bytes live decides what the call keeps: the
     * caller's own buffer is borrowed, the validator's rewrite or the
     * call's own copy is kept as is, anything else is copied once. */
    bool lend = rc == 0 && borrow && va == raw && vl == raw_len;
    bool same = rc == 0 && !borrow && raw == c->args && va == raw &&
                vl == raw_len;
    bool take = rc == 0 && !lend && !same && vb.data && va == vb.data;
    if (rc == 0 && !lend && !same && !take && !(copy = malloc(vl ? vl : 1)))
        rc = TH_ENOMEM;
    if (rc != 0) {
        th_buf_destroy(&vb);
        th_buf_destroy(&stripped);
        th_mcall_never_run(c, rc == TH_ENOMEM ? TH_ENOMEM : e.code ? e.code : TH_EARGS,
                           rc == TH_ENOMEM ? "out of memory"
                           : e.msg[0]      ? e.msg
                                           : "invalid arguments");
        return -1;
    }
    if (lend) {
        c->args = (uint8_t *)va;
        c->args_borrowed = true;
        /* validation's view of these bytes, for execute() (th_mcall_run
         * takes it while the arguments stay borrowed) */
        if (view && view->data == va)
            c->base.pub.args_view = view;
    } else if (!same) {
        if (take)
            copy = th_buf_take(&vb, NULL);
        else
            memcpy(copy, va, vl);
        free(c->args);
        c->args = copy;
    }
    th_buf_destroy(&vb);
    th_buf_destroy(&stripped);
    c->args_len = vl;
    atomic_store_explicit(&c->args_ok, true, memory_order_relaxed);
    return 0;
}

/* ---- 4. Permission ----------------------------------------------------------- */


/* Registers the call in the duplicate table, answering a refusal, and
 * submits it to the manager.  Consumes the caller's reference. */
static void ask_fallback(th_session *s, th_mcall *c, const th_tool *t,
                         uint64_t id, const char *rule);

static void submit(th_mcall *c)
{
    if (th_call_dup_policy(c) == TH_DUP_ALLOW) {
        th_mgr_submit(c); /* allow: nothing to join (th_dup_register) */
        return;
    }
    char msg[1024];
    int rc = th_dup_register(c, msg, sizeof msg);
    if (rc != 0) {
        th_mcall_abort(c, rc, "%s", msg);
        th_mcall_exec_end(c, TOOLHOST_FAILED, false);
        th_mcall_unref(c);
        return;
    }
    th_mgr_submit(c);
}
/* Asks the plugin and the toolset's rules; submits the call, answers it
 * (denied), or asks the front.  `perm_free`: stage 1 found that the tool
 * has no needs_permission hook and that the rules allow it without
 * asking (call_plan.perm_free).  Consumes the execution reference. */
static void stage_permission(th_mcall *c, bool perm_free)
{
    const th_tool *t = c->tool;
    th_session *s = c->s;
    th_host *h = c->h;
    uint64_t id = c->base.pub.call_id;
    if (!c->ts || perm_free) {
        submit(c);
        return;
    }
    uint32_t flags = t->flags;
    char reason[256];
    reason[0] = '\0';
    if (t->desc->needs_permission &&
        memset(reason, 0, sizeof reason) &&
        t->desc->needs_permission(t->plugin->state, t->desc, c->args,
                                  c->args_len, reason, sizeof reason) == 1)
        flags |= TH_PERM_FLAG_NEEDS;
    reason[sizeof reason - 1] = '\0';
    th_perm_decision d; /* th_perm_decide sets action and rule on every
                           path: not zeroed (256 bytes a call) */
    d.action = TH_PERM_DENY;
    d.rule[0] = '\0';
    th_perm_decide(c->ts, c->cfg->path, t->name, flags, &d);
    if (d.action == TH_PERM_DENY) {
        th_log_info("session=%llu tool=%s call=%llu permission denied by %s",
                    (unsigned long long)s->id, t->name, (unsigned long long)id,
                    d.rule);
        char m[512];
        snprintf(m, sizeof m, "permission denied for tool %s by %s", t->name, d.rule);
        th_mcall_never_run(c, TH_EPERM, m);
        return;
    }
    if (d.action == TH_PERM_ALLOW && (flags & TH_PERM_FLAG_NEEDS))
        th_log_info("session=%llu tool=%s call=%llu permission granted by %s",
                    (unsigned long long)s->id, t->name, (unsigned long long)id,
                    d.rule);
    if (d.action != TH_PERM_ASK) {
        submit(c);
        return;
    }
    th_log_info("session=%llu tool=%s call=%llu asking permission (%s)",
                (unsigned long long)s->id, t->name, (unsigned long long)id, d.rule);
    if (c->st) atomic_fetch_add(&c->st->perm_asks, 1); /* stats.c */
    /* The answer comes later, after th_call_start returned. */
    if (th_mgr_own_args(c) != 0) {
        th_mcall_never_run(c, TH_ENOMEM, "out of memory");
        return;
    }
    pthread_mutex_lock(&c->mu);
    /* it outlives th_call_start: out of its call slot, into the map */
    int erc = th_call_session_enter_locked(c);
    if (erc == 0)
        c->phase = TH_PH_PERM_WAIT;
    pthread_mutex_unlock(&c->mu);
    if (erc != 0) {
        th_mcall_never_run(c, erc == TH_ESTATE ? TH_ECANCELLED : TH_ENOMEM,
                           erc == TH_ESTATE ? "the session ended"
                                            : "out of memory");
        return;
    }
    uint64_t pt = c->cfg->host.permission_timeout_ms;
    atomic_store(&c->deadline_ns, th_now_ns() + (int64_t)(pt ? pt : 60000) * 1000000);
    th_mgr_arm(h, c);
    th_mcall_ref(c);
    int asked = s->ops.ask_permission
                    ? s->ops.ask_permission(s->front_ud, id, t->name, c->args,
                                            c->args_len, reason[0] ? reason : d.rule)
                    : -1;
    if (asked != 0)
        ask_fallback(s, c, t, id, d.rule);
    /* Answered meanwhile (cancelled, session closed, refused): whoever
     * leaves PERM_WAIT drops the execution reference. */
    th_call_perm_settle(c);
    th_mcall_unref(c);
}

/* ---- The stages in order ------------------------------------------------------- */

static bool answered(th_mcall *c)
{
    pthread_mutex_lock(&c->mu);
    bool a = c->answered;
    pthread_mutex_unlock(&c->mu);
    return a;
}

/* A call the deadline thread armed from its call slot, out of the slot
 * now: true when it is answered (the caller takes it out of the heap).
 * Not answered yet (a cancel that set abort_code, so that the tool
 * stopped, but has not answered yet): its answer takes it out, so the
 * no_heap that th_mcall_run set (before it knew of the arm) goes, in
 * the same turn of mu as the answer's test. */
static bool armed_answered(th_mcall *c)
{
    pthread_mutex_lock(&c->mu);
    bool a = c->answered;
    if (!a)
        c->no_heap = false;
    pthread_mutex_unlock(&c->mu);
    return a;
}

/* Stages 3 and 4 with the raw arguments (c->args, or with `borrow` the
 * caller's).  A call with borrowed arguments runs inline within this
 * frame, if it runs on this thread at all: validation's view of them
 * lives here. */
static void prepare(th_mcall *c, const uint8_t *raw, size_t raw_len,
                    bool borrow, bool perm_free)
{
    toolhost_arg vitems[TH_ARGS_VIEW_MAX];
    toolhost_args_view view;
    if (stage_args(c, raw, raw_len, borrow, borrow ? vitems : NULL,
                   borrow ? &view : NULL) != 0)
        return;
    /* The deadline armed while a worker ran the hooks is set again by the
     * manager, or replaced by the permission question's. */
    if (atomic_load(&c->deadline_ns) != 0)
        th_mgr_disarm(c->h, c);
    /* Answered meanwhile (cancelled while a worker ran the hooks)?  On
     * the caller's own thread (borrow) the question costs a lock for a
     * window of a few hundred nanoseconds: such a call is skipped where
     * it would run (th_mcall_run), or settled if it asks permission. */
    if (!borrow && answered(c)) {
        th_mcall_never_run(c, TH_ECANCELLED, "cancelled");
        return;
    }
    stage_permission(c, perm_free);
}

void th_call_prepare(th_mcall *c)
{
    /* Cancelled (or timed out) while it waited for a worker: the hooks
     * have nothing to decide any more. */
    if (answered(c)) {
        th_mcall_never_run(c, TH_ECANCELLED, "cancelled");
        return;
    }
    prepare(c, c->args, c->args_len, false, false);
}

/* Whether stages 3 and 4 call plugin code. */
static bool has_hooks(const call_plan *p)
{
    const toolhost_tool *d = p->tool->desc;
    return d && (d->validate_args || (p->ts && d->needs_permission));
}

/* The audit line of a call refused before it had a record (an unknown
 * tool, no toolset the principal may use): its arguments hashed as given
 * (no toolset says which are sensitive), no toolset. */
static void audit_refused(th_session *s, const char *name,
                          const uint8_t *args, size_t len,
                          const th_call_opts *o, uint64_t id, int code)
{
    char hex[65];
    th_audit_sha256_hex(args, len, hex);
    th_audit_call a = {
        .wall_ms = th_wall_ms(),
        .who = &s->who,
        .session = s->id,
        .front = o->front ? o->front : s->ops.front,
        .tool = name,
        .call_id = id,
        .args_sha256 = hex,
        .outcome = code == TH_EPERM ? "denied" : "error",
        .error = code,
        .traceparent = th_audit_traceparent_ok(o->traceparent)
                           ? o->traceparent
                           : NULL};
    th_audit_write(s->h->audit, &a);
}

/* A tool an operator disabled (disable.c): answered tool_disabled with
 * the reason; true when it was. */
static bool disabled_refused(th_session *s, th_mcall *c)
{
    char m[1024];
    if (!th_disabled_check(s->h->disabled, c->cfg, c->tool, m,
                           sizeof m))
        return false;
    th_mcall_never_run(c, TH_EDISABLED, m);
    return true;
}

/* The rate limits (rate.c) admit the call, or answer it rate_limited:
 * true when they did (the execution reference is gone with the answer).
 * Admitted, the call holds its concurrent-call slots until exec_end. */
static bool rate_refused(th_session *s, th_mcall *c)
{
    uint64_t retry_ms;
    char m[512];
    bool held;
    int rc = th_rate_admit(s->h->rate, c->cfg, &s->who, c->tool->name,
                           c->base.pub.call_id, th_now_ns(),
                           th_wall_ms() / 1000, &held, &retry_ms, m,
                           sizeof m);
    if (rc == 0) {
        if (held) { /* (a bit beside others under mu) */
            pthread_mutex_lock(&c->mu);
            c->rate_held = true;
            pthread_mutex_unlock(&c->mu);
        }
        return false;
    }
    /* the wait the limit asks for reaches the caller as a hint too
     * (RPC error.retry_after_ms, MCP _meta toolhost/retry_after_ms) */
    th_mcall_never_run_retry(c, rc, rc == TH_ENOMEM ? "out of memory" : m,
                             rc != TH_ERATE_LIMITED ? 0
                             : retry_ms < TOOLHOST_MAX_RETRY_AFTER_MS
                                 ? retry_ms
                                 : TOOLHOST_MAX_RETRY_AFTER_MS);
    return true;
}

uint64_t th_call_create(th_call_req *r, th_session *s, const char *tool,
                         const uint8_t *args, size_t len,
                         const th_call_opts *opts, th_event_fn fn, void *ud)
{
    static const uint8_t empty_map[1] = {0x80};
    memset(r, 0, sizeof *r);
    if (!s || !tool || !fn || (!args && len))
        return 0; /* th_call_submit answers TH_EINVAL */
    r->s = s;
    r->tool = tool;
    r->args = args ? args : empty_map;
    r->len = args ? len : 1;
    if (opts)
        r->opts = *opts;
    r->fn = fn;
    r->ud = ud;
    r->id = atomic_fetch_add(&s->h->next_id, 1);
    return r->id;
}

int th_call_start(th_session *s, const char *name, const uint8_t *args,
                  size_t len, const th_call_opts *opts, th_event_fn fn,
                  void *ud, uint64_t *call_id)
{
    th_call_req r;
    uint64_t id = th_call_create(&r, s, name, args, len, opts, fn, ud);
    if (call_id && id)
        *call_id = id;
    return th_call_submit(&r);
}

int th_call_submit(th_call_req *r)
{
    if (r->id == 0)
        return TH_EINVAL;
    th_session *s = r->s;
    const char *name = r->tool;
    const uint8_t *args = r->args;
    size_t len = r->len;
    th_event_fn fn = r->fn;
    void *ud = r->ud;
    uint64_t id = r->id;
    th_host *h = s->h;
    th_call_opts o = r->opts;
    /* an early answer only: stage_record checks again under s->mu */
    if (__atomic_load_n(&s->closing, __ATOMIC_ACQUIRE))
        return TH_ESTATE;
    /* calls_total: counted by stage_lookup (stats.c, this thread's shard) */

    call_plan p; /* stage_lookup fills what it returns 0 with */
    p.cfg = th_host_config_get(h); /* the call's one snapshot */
    p.refused = 0;
    int rc = stage_lookup(s, name, id, fn, ud, &p);
    if (rc != 0) {
        th_config_unref(p.cfg);
        if (rc > 0 && p.refused && h->audit)
            audit_refused(s, name, args, len, &o, id, p.refused);
        return rc > 0 ? 0 : rc;
    }
    /* A front's own thread runs a short call itself (call_fast.c). */
    bool fast = (o.short_inline || o.short_client) &&
        p.ts && /* not a task tool (tasks.result waits) */
        th_call_fast_pick(h, p.cfg->host.short_call_max_ms, p.st, p.tool,
                          &o);
    if (fast)
        o.may_block = true;
    /* Plugin hooks never run on a caller that must not block (a front's
     * event loop): a worker runs stages 3 and 4 on a copy of the args. */
    bool on_worker = has_hooks(&p) && !o.may_block;
    th_mcall *c = NULL;
    rc = stage_record(s, &p, on_worker ? args : NULL, len, args, &o, fn, ud,
                      id, &c);
    if (rc < 0)
        return rc;
    bool slot = c->cslot != 0; /* c stays valid: the slot's reference */
    if (rc > 0) {
        /* answered by stage_record */
    } else if (th_disabled_any(h->disabled) && disabled_refused(s, c)) {
        /* answered tool_disabled (never ran) */
    } else if (p.cfg->n_rate_limits && rate_refused(s, c)) {
        /* answered rate_limited (never ran) */
    } else if (on_worker) {
        th_mgr_prepare(c);
    } else if (fast) {
        /* the core times what held the front's thread (the reference
         * keeps c, its tool, stats entry and config past its end) */
        th_mcall_ref(c);
        int64_t t0 = th_now_ns();
        th_call_fast_inline_begin(h, c->st, id, t0, o.short_inline);
        __atomic_store_n(&c->on_front, true, __ATOMIC_RELAXED);
        prepare(c, args, len, true, p.perm_free);
        __atomic_store_n(&c->on_front, false, __ATOMIC_RELAXED);
        int64_t t1 = th_now_ns();
        th_call_fast_inline_end(h, c->cfg->host.short_call_max_ms, c->st,
                                c->tool, id, t0, t1, c->inline_run);
        th_mcall_unref(c);
    } else {
        prepare(c, args, len, true, p.perm_free);
    }
    if (slot) {
        /* Answered by now, or in the session's map (it lives on: asks
         * permission, suspended, a task): out of the call slot.  A session
         * closing meanwhile waits for its calls to leave the slots. */
        /* (emptied already by the final delivery's end, call.c) */
        if (c->cslot) {
            /* its final callback still to return (answered or about to
             * be by another thread): the close waits for it once the
             * call is in no slot (th_call_slot_leave_locked) */
            pthread_mutex_lock(&c->mu);
            th_call_slot_leave_locked(c);
            pthread_mutex_unlock(&c->mu);
        }
        if (c->cslot &&
            (th_mgr_cslot_clear(h, c) & TH_CSLOT_ARMED) && armed_answered(c))
            th_mgr_disarm(h, c); /* armed from the slot, answered: out */
        if (__atomic_load_n(&s->closing, __ATOMIC_SEQ_CST)) {
            pthread_mutex_lock(&s->mu);
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
        }
        th_mcall_unref(c);
    }
    return 0;
}

/* The timer thread's work for a call waiting for permission. */
void th_mcall_perm_expired(th_mcall *c)
{
    char m[256];
    snprintf(m, sizeof m, "permission denied for tool %s: no answer within %llu ms",
             c->tool->name, (unsigned long long)c->cfg->host.permission_timeout_ms);
    th_log_info("session=%llu tool=%s call=%llu %s", (unsigned long long)c->s->id, c->tool->name, (unsigned long long)c->base.pub.call_id, m);
    th_call_answer_error(c, TH_EPERM, m);
    th_call_perm_settle(c);
}

/* No one can be asked (the front has no asks, or its client cannot take
 * them): the toolset's ask_fallback decides.  The call is in PERM_WAIT. */
static void ask_fallback(th_session *s, th_mcall *c, const th_tool *t,
                         uint64_t id, const char *rule)
{
    th_ask_fallback fb = c->ts ? c->ts->ask_fallback : TH_ASKFB_DENY;
    char m[512];
    if (fb == TH_ASKFB_ALLOW_READ_ONLY &&
        (t->desc->flags & TOOLHOST_TOOL_READ_ONLY)) {
        pthread_mutex_lock(&c->mu);
        bool mine = c->phase == TH_PH_PERM_WAIT && !c->answered;
        if (mine)
            c->phase = TH_PH_NEW;
        pthread_mutex_unlock(&c->mu);
        if (!mine)
            return; /* answered meanwhile (cancelled, session closed) */
        th_mgr_disarm(s->h, c);
        atomic_store(&c->deadline_ns, 0);
        th_log_info("session=%llu tool=%s call=%llu permission granted by "
                    "ask_fallback allow_read_only (%s asks, no one can be "
                    "asked; the tool is read-only)",
                    (unsigned long long)s->id, t->name,
                    (unsigned long long)id, rule);
        submit(c);
        return;
    }
    if (fb == TH_ASKFB_ERROR) {
        snprintf(m, sizeof m,
                 "tool %s needs the user's permission (%s asks) and this "
                 "client cannot be asked: use a client that answers "
                 "permission asks (elicitation), or change the "
                 "toolset's ask_fallback",
                 t->name, rule);
        th_call_answer_error(c, TH_ESTATE, m);
        return;
    }
    snprintf(m, sizeof m,
             "permission denied for tool %s: %s asks, and no one can be "
             "asked%s",
             t->name, rule,
             fb == TH_ASKFB_ALLOW_READ_ONLY
                 ? " (ask_fallback allow_read_only: the tool is not "
                   "read-only)"
                 : "");
    th_call_answer_error(c, TH_EPERM, m);
}

int th_permission_answer(th_session *s, uint64_t call_id, bool allow)
{
    th_mcall *c = th_mgr_session_call(s, call_id); /* map or call slot */
    if (!c)
        return TH_ENOTFOUND;
    pthread_mutex_lock(&c->mu);
    bool mine = c->phase == TH_PH_PERM_WAIT && !c->answered;
    if (mine)
        c->phase = TH_PH_NEW;
    pthread_mutex_unlock(&c->mu);
    if (!mine) {
        th_mcall_unref(c);
        return TH_ESTATE;
    }
    th_mgr_disarm(s->h, c);
    atomic_store(&c->deadline_ns, 0);
    th_log_info("session=%llu tool=%s call=%llu permission %s by the front",
                (unsigned long long)s->id, c->tool->name,
                (unsigned long long)call_id, allow ? "granted" : "refused");
    if (!allow) {
        char m[256];
        snprintf(m, sizeof m, "permission denied for tool %s: refused when asked",
                 c->tool->name);
        th_mcall_never_run(c, TH_EPERM, m);
    } else {
        c->may_block = false;
        submit(c);
    }
    th_mcall_unref(c);
    return 0;
}

