/* call.c - the one call path: policy, validation, the call's host
 * callbacks, answers and event delivery, cancel, permission answers, and
 * th_call_sync.  See docs/manager.md for the picture; th/manager.h for the
 * lock order. */
#include <errno.h>
#include <pwd.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/log.h"
#include "th/manager.h"
#include "th/perm.h"

static __thread th_mcall *tl_cur;      /* the call this thread executes */
static __thread bool tl_async;         /* this worker holds an async slot */


th_mcall *th_mcall_current(void)
{
    return tl_cur;
}

/* ---- References ---------------------------------------------------------- */

void th_mcall_ref(th_mcall *c)
{
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

/* Drops a reference the caller knows is not the last (under c->mu). */
static void ref_drop_nonlast(th_mcall *c)
{
    atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel);
}

static void call_free(th_mcall *c)
{
    th_host *h = c->h;
    th_out_free(&c->out);
    th_out_free(&c->err);
    free(c->args);
    free(c->meta);
    free(c->dupkey);
    free(c->ack_msg);
    free(c->prog_msg);
    free(c->prog_data);
    free(c->last_msg);
    free(c->set_error_msg);
    free(c->caller_user);
    if (c->cancel_efd >= 0)
        close(c->cancel_efd);
    th_result_copy_free(&c->final);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    th_tool_release(c->tool);
    th_session_unref(c->s);
    th_mcall *parent = c->parent;
    free(c);
    if (parent)
        th_mcall_unref(parent);
    /* The last call goes to zero under h->mu, which th_host_close() holds
     * when it reads the count: it cannot free the host before we are
     * done with h->mu. */
    unsigned long v = atomic_load(&h->live_calls);
    while (v > 1 && !atomic_compare_exchange_weak(&h->live_calls, &v, v - 1))
        ;
    if (v <= 1) {
        pthread_mutex_lock(&h->mu);
        if (atomic_fetch_sub(&h->live_calls, 1) == 1)
            pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
    }
}

void th_mcall_unref(th_mcall *c)
{
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
        call_free(c);
}

/* ---- Results -------------------------------------------------------------- */

void th_result_copy_free(th_result_copy *r)
{
    if (!r)
        return;
    th_buf_free(&r->out);
    th_buf_free(&r->err);
    th_buf_free(&r->meta);
    free(r->message);
    r->message = NULL;
}

int th_result_copy_from(th_result_copy *dst, const th_result *src)
{
    memset(dst, 0, sizeof *dst);
    dst->kind = src->kind;
    dst->ok = src->ok;
    dst->error = src->error;
    dst->task_id = src->task_id;
    if ((src->out_len && th_buf_append(&dst->out, src->out, src->out_len)) ||
        (src->err_len && th_buf_append(&dst->err, src->err, src->err_len)) ||
        (src->meta && th_buf_append(&dst->meta, src->meta, src->meta_len)) ||
        (src->message && !(dst->message = strdup(src->message)))) {
        th_result_copy_free(dst);
        return TH_ENOMEM;
    }
    return 0;
}

static void result_view(const th_result_copy *c, th_result *r)
{
    memset(r, 0, sizeof *r);
    r->kind = c->kind;
    r->ok = c->ok;
    r->out = c->out.data;
    r->out_len = c->out.len;
    r->err = c->err.data;
    r->err_len = c->err.len;
    r->meta = c->meta.data;
    r->meta_len = c->meta.len;
    r->error = c->error;
    r->message = c->message ? c->message
                            : (c->kind == TH_RESULT_ERROR ? th_strerror(c->error)
                                                          : NULL);
    r->task_id = c->task_id;
}

/* An error answered before a call object exists (on the caller's thread). */
static void emit_error(th_event_fn fn, void *ud, uint64_t id, int code,
                       const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    th_result r = {.kind = TH_RESULT_ERROR, .error = code, .message = msg};
    th_event ev = {.kind = TH_EV_RESULT, .call_id = id, .result = &r};
    fn(&ev, ud);
}

/* ---- Delivery --------------------------------------------------------------- */

/* With c->mu held: delivers every pending slot (ack, then progress, then
 * the final result) unless another thread is delivering, in which case that
 * thread will pick them up.  Callbacks run with mu released; returns with
 * mu held.  At most one thread delivers a call's events at a time, so they
 * arrive in order and never concurrently. */
static void deliver_locked(th_mcall *c)
{
    if (c->delivering)
        return;
    c->delivering = true;
    c->deliverer = pthread_self();
    for (;;) {
        th_event ev;
        th_result r;
        memset(&ev, 0, sizeof ev);
        memset(&r, 0, sizeof r);
        char *msg = NULL;
        uint8_t *data = NULL;
        th_result_copy fin;
        bool have_fin = false;
        ev.call_id = c->base.pub.call_id;
        if (c->pend_ack) {
            c->pend_ack = false;
            msg = c->ack_msg;
            c->ack_msg = NULL;
            r.kind = TH_RESULT_RUNNING;
            r.message = msg ? msg : "task started";
            r.task_id = c->base.pub.call_id;
            ev.kind = TH_EV_RESULT;
            ev.task_id = r.task_id;
            ev.result = &r;
        } else if (c->pend_prog) {
            c->pend_prog = false;
            msg = c->prog_msg;
            data = c->prog_data;
            c->prog_msg = NULL;
            c->prog_data = NULL;
            ev.kind = TH_EV_PROGRESS;
            ev.task_id = c->base.pub.call_id;
            ev.fraction = c->prog_frac;
            ev.message = msg;
            ev.data = data;
            ev.data_len = c->prog_data_len;
            ev.coalesced = c->prog_coalesced;
            c->prog_coalesced = 0;
        } else if (c->pend_final) {
            c->pend_final = false;
            fin = c->final;
            memset(&c->final, 0, sizeof c->final);
            have_fin = true;
            result_view(&fin, &r);
            ev.kind = c->acked ? TH_EV_DONE : TH_EV_RESULT;
            ev.task_id = c->acked ? c->base.pub.call_id : 0;
            ev.result = &r;
        } else {
            break;
        }
        th_event_fn fn = c->fn;
        void *ud = c->ud;
        pthread_mutex_unlock(&c->mu);
        if (fn)
            fn(&ev, ud);
        free(msg);
        free(data);
        if (have_fin)
            th_result_copy_free(&fin);
        pthread_mutex_lock(&c->mu);
    }
    c->delivering = false;
    pthread_cond_broadcast(&c->cv);
}

/* The notifier thread's work for one call (manager.c). */
void th_mcall_notified(th_mcall *c)
{
    pthread_mutex_lock(&c->mu);
    c->notify_queued = false;
    deliver_locked(c);
    pthread_mutex_unlock(&c->mu);
    th_mcall_unref(c);
}

/* Stops event delivery to the front; waits for a callback in progress on
 * another thread to return. */
void th_mcall_detach(th_mcall *c)
{
    pthread_mutex_lock(&c->mu);
    c->fn = NULL;
    while (c->delivering && !pthread_equal(c->deliverer, pthread_self()))
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

/* ---- Answers ------------------------------------------------------------------ */

/* With c->mu held and the caller holding a reference: makes *res the final
 * answer and takes the call out of every table.  Returns true when the
 * session's tool list changed (the caller calls tools_changed unlocked). */
static bool answer_locked(th_mcall *c, th_result_copy *res)
{
    th_host *h = c->h;
    th_session *s = c->s;
    bool changed = false;
    c->answered = true;
    c->final = *res;
    memset(res, 0, sizeof *res);
    c->final.task_id = c->acked ? c->base.pub.call_id : 0;
    c->pend_final = true;

    th_dup_remove(c);
    th_mgr_disarm(h, c);
    pthread_mutex_lock(&s->mu);
    if (c->in_session) {
        th_u64map_del(&s->calls, c->base.pub.call_id);
        c->in_session = false;
        ref_drop_nonlast(c);
    }
    if (c->live_counted) {
        c->live_counted = false;
        s->live_tasks--;
        changed = s->live_tasks == 0 && !th_host_config(h)->host.expose_task_tools;
    }
    pthread_mutex_unlock(&s->mu);
    if (c->in_tasks || (c->acked && c->scope == TH_SCOPE_TOOLSET)) {
        /* One step: a reader sees the task live or its result kept. */
        pthread_mutex_lock(&h->tmu);
        if (c->in_tasks)
            th_u64map_del(&h->tasks, c->base.pub.call_id);
        if (c->acked && c->scope == TH_SCOPE_TOOLSET)
            th_tasks_keep_locked(h, c->base.pub.call_id, c->ts_idx, &c->final);
        pthread_mutex_unlock(&h->tmu);
        if (c->in_tasks) {
            c->in_tasks = false;
            ref_drop_nonlast(c);
        }
    }
    if (c->st)
        th_stat_latency(c->st, th_now_ns() - c->start_ns);
    return changed;
}

static void count_error(th_stat *st, int code)
{
    if (!st)
        return;
    switch (code) {
    case TH_ETIMEOUT: atomic_fetch_add(&st->timeouts, 1); break;
    case TH_ECANCELLED: atomic_fetch_add(&st->cancels, 1); break;
    case TH_EDUPLICATE: atomic_fetch_add(&st->dup_rejected, 1); break;
    case TH_EBUSY: atomic_fetch_add(&st->busy, 1); break;
    case TH_EPERM: atomic_fetch_add(&st->perm_denied, 1); break;
    default: atomic_fetch_add(&st->errors, 1); break;
    }
}

/* Answers with a tool error unless already answered.  No lock held. */
static bool answer_error(th_mcall *c, int code, const char *msg)
{
    th_result_copy res;
    memset(&res, 0, sizeof res);
    res.kind = TH_RESULT_ERROR;
    res.error = code;
    res.message = strdup(msg); /* NULL: the default message is shown */
    pthread_mutex_lock(&c->mu);
    if (c->answered) {
        pthread_mutex_unlock(&c->mu);
        th_result_copy_free(&res);
        return false;
    }
    count_error(c->st, code);
    bool changed = answer_locked(c, &res);
    deliver_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (changed)
        th_session_tools_changed(c->s);
    return true;
}

/* A call waiting for permission that got answered meanwhile: the one who
 * moves it out of PERM_WAIT owns its execution reference. */
static void perm_settle(th_mcall *c)
{
    pthread_mutex_lock(&c->mu);
    bool mine = c->phase == TH_PH_PERM_WAIT && c->answered;
    if (mine)
        c->phase = TH_PH_NEW;
    pthread_mutex_unlock(&c->mu);
    if (mine) {
        th_mgr_disarm(c->h, c);
        th_mcall_exec_end(c, TOOLHOST_FAILED, false);
        th_mcall_unref(c);
    }
}

/* ---- ABI 1.1: cancel hooks (on_cancel, cancel_fd) --------------------------- */

static bool cancelled(th_mcall *c);

/* Cancellation reached the call: wake the cancel_fd and run the on_cancel
 * hook once, unless the call has ended.  The hook runs outside mu, marked
 * cancel_running so that th_mcall_exec_end() waits for it. */
static void cancel_hooks_fire(th_mcall *c)
{
    pthread_mutex_lock(&c->mu);
    if (c->cancel_fired || c->ended) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->cancel_fired = true;
    if (c->cancel_efd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(c->cancel_efd, &one, sizeof one);
        (void)w; /* nonblocking; a full counter is still readable */
    }
    void (*fn)(void *) = c->cancel_fn;
    void *ud = c->cancel_ud;
    c->cancel_fn = NULL;
    if (fn)
        c->cancel_running = true;
    pthread_mutex_unlock(&c->mu);
    if (!fn)
        return;
    fn(ud);
    pthread_mutex_lock(&c->mu);
    c->cancel_running = false;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Under mu: the call ends; no hook may run after this returns. */
static void cancel_hooks_end_locked(th_mcall *c)
{
    c->ended = true;
    c->cancel_fn = NULL;
    while (c->cancel_running)
        pthread_cond_wait(&c->cv, &c->mu);
}

static int cb_on_cancel(toolhost_call *call, void (*fn)(void *ud), void *ud)
{
    th_mcall *c = (th_mcall *)call;
    pthread_mutex_lock(&c->mu);
    if (!fn) {
        /* Unregister, and wait for a hook that is running. */
        c->cancel_fn = NULL;
        while (c->cancel_running)
            pthread_cond_wait(&c->cv, &c->mu);
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    if (c->ended) {
        pthread_mutex_unlock(&c->mu);
        return TOOLHOST_ESTATE;
    }
    bool now = c->cancel_fired || cancelled(c);
    if (!now) {
        c->cancel_fn = fn;
        c->cancel_ud = ud;
    }
    pthread_mutex_unlock(&c->mu);
    if (now)
        fn(ud); /* already cancelled: at once, on this thread */
    return 0;
}

static int cb_cancel_fd(toolhost_call *call)
{
    th_mcall *c = (th_mcall *)call;
    pthread_mutex_lock(&c->mu);
    int rc;
    if (c->ended) {
        rc = TOOLHOST_ESTATE;
    } else if (c->cancel_efd >= 0) {
        rc = c->cancel_efd;
    } else if ((c->cancel_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        rc = errno == ENOMEM ? TOOLHOST_ENOMEM : TOOLHOST_ESTATE;
    } else {
        if (c->cancel_fired || cancelled(c)) {
            uint64_t one = 1;
            ssize_t w = write(c->cancel_efd, &one, sizeof one);
            (void)w;
        }
        rc = c->cancel_efd;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Owner.  Who calls: the session's principal, its id, the toolset, the
 * front.  The strings live in the call until it is freed. */
static int cb_caller(const toolhost_call *call, toolhost_caller *out)
{
    th_mcall *c = (th_mcall *)(uintptr_t)call;
    const th_session *s = c->s;
    out->uid = s ? (int64_t)s->who.uid : -1;
    if (s && !c->caller_user) {
        char buf[1024];
        struct passwd pw, *res = NULL;
        if (getpwuid_r((uid_t)s->who.uid, &pw, buf, sizeof buf, &res) == 0 &&
            res)
            c->caller_user = strdup(res->pw_name);
    }
    out->user = c->caller_user;
    if (s) {
        snprintf(c->caller_session, sizeof c->caller_session, "%llu",
                 (unsigned long long)s->id);
        out->session = c->caller_session;
        out->front = s->ops.front;
    }
    out->toolset = c->ts ? c->ts->name : NULL;
    return 0;
}

bool th_mcall_abort(th_mcall *c, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (code == TH_ECANCELLED || code == TH_ETIMEOUT) {
        int zero = 0;
        atomic_compare_exchange_strong(&c->abort_code, &zero, code);
        cancel_hooks_fire(c);
    }
    bool won = answer_error(c, code, msg);
    perm_settle(c);
    return won;
}

/* Answers a call that will never run and drops the execution reference. */
static void never_run(th_mcall *c, int code, const char *msg)
{
    answer_error(c, code, msg);
    th_mcall_exec_end(c, TOOLHOST_FAILED, false);
    th_mcall_unref(c);
}

void th_mcall_never_run(th_mcall *c, int code, const char *msg)
{
    never_run(c, code, msg);
}

void th_mcall_set_error(toolhost_call *call, int code, const char *msg)
{
    th_mcall *c = (th_mcall *)call;
    c->set_error = code;
    free(c->set_error_msg);
    c->set_error_msg = msg ? strdup(msg) : NULL;
}

/* meta = the tool's own map + "toolhost": {"output": {...}}. */
static int build_meta(th_mcall *c, const th_out_info *oi, const th_out_info *ei,
                      th_buf *dst)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, dst, th_buf_msgpack_write);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    const msgpack_object_map *m = NULL;
    uint32_t keep = 0;
    if (c->meta) {
        size_t off = 0;
        if (msgpack_unpack_next(&u, (const char *)c->meta, c->meta_len, &off) ==
                MSGPACK_UNPACK_SUCCESS &&
            u.data.type == MSGPACK_OBJECT_MAP)
            m = &u.data.via.map;
    }
    if (m)
        for (uint32_t i = 0; i < m->size; i++)
            if (!(m->ptr[i].key.type == MSGPACK_OBJECT_STR &&
                  m->ptr[i].key.via.str.size == 8 &&
                  memcmp(m->ptr[i].key.via.str.ptr, "toolhost", 8) == 0))
                keep++;
    int rc = msgpack_pack_map(&pk, keep + 1);
    if (m)
        for (uint32_t i = 0; i < m->size && rc == 0; i++) {
            if (m->ptr[i].key.type == MSGPACK_OBJECT_STR &&
                m->ptr[i].key.via.str.size == 8 &&
                memcmp(m->ptr[i].key.via.str.ptr, "toolhost", 8) == 0)
                continue;
            rc = msgpack_pack_object(&pk, m->ptr[i].key);
            if (rc == 0)
                rc = msgpack_pack_object(&pk, m->ptr[i].val);
        }
    if (rc == 0)
        rc = msgpack_pack_str_with_body(&pk, "toolhost", 8);
    if (rc == 0)
        rc = msgpack_pack_map(&pk, 1);
    if (rc == 0)
        rc = msgpack_pack_str_with_body(&pk, "output", 6);
    if (rc == 0)
        rc = th_out_pack_info(&pk, oi, ei);
    msgpack_unpacked_destroy(&u);
    return rc ? TH_ENOMEM : 0;
}

static int build_result(th_mcall *c, int status, th_result_copy *res)
{
    memset(res, 0, sizeof *res);
    if (c->set_error) {
        res->kind = TH_RESULT_ERROR;
        res->error = c->set_error;
        res->message = c->set_error_msg;
        c->set_error_msg = NULL;
        return 0;
    }
    res->kind = TH_RESULT_DONE;
    res->ok = status == TOOLHOST_OK;
    th_out_info oi, ei;
    if (th_out_finish(&c->out, &res->out, &oi) != 0 ||
        th_out_finish(&c->err, &res->err, &ei) != 0 ||
        build_meta(c, &oi, &ei, &res->meta) != 0) {
        th_result_copy_free(res);
        res->kind = TH_RESULT_ERROR;
        res->error = TH_ENOMEM;
        return TH_ENOMEM;
    }
    /* ABI 1.1: structured stdout is JSON and matches the tool's
     * output_schema, or the call fails as the tool's error.  Only whole
     * output is checked (a cut JSON text is not JSON). */
    th_error oe;
    if (res->ok && !oi.truncated &&
        th_validate_output(c->tool, res->out.data, res->out.len, &oe) != 0) {
        th_result_copy_free(res);
        memset(res, 0, sizeof *res);
        res->kind = TH_RESULT_ERROR;
        res->error = oe.code;
        res->message = strdup(oe.msg);
    }
    return 0;
}

void th_mcall_exec_end(th_mcall *c, int status, bool ran)
{
    th_mgr_release(c->h, c);
    th_result_copy res;
    memset(&res, 0, sizeof res);
    bool have = false;
    if (ran && atomic_load(&c->abort_code) == 0) {
        build_result(c, status, &res);
        have = true;
    }
    bool changed = false;
    pthread_mutex_lock(&c->mu);
    cancel_hooks_end_locked(c); /* ABI 1.1: no cancel hook after this */
    bool was_running = c->phase == TH_PH_RUNNING;
    c->phase = TH_PH_OVER;
    if (c->exec_counted) {
        c->exec_counted = false;
        pthread_mutex_lock(&c->s->mu);
        c->s->exec_live--;
        pthread_cond_broadcast(&c->s->cv);
        pthread_mutex_unlock(&c->s->mu);
    }
    if (!c->answered && have) {
        if (c->st) {
            if (res.kind == TH_RESULT_ERROR)
                count_error(c->st, res.error);
            else
                atomic_fetch_add(res.ok ? &c->st->ok : &c->st->failed, 1);
        }
        changed = answer_locked(c, &res);
        deliver_locked(c);
    } else if (ran && c->st) {
        atomic_fetch_add(&c->st->late, 1);
    }
    pthread_mutex_unlock(&c->mu);
    if (was_running)
        atomic_fetch_sub(&c->h->mgr.running, 1);
    th_result_copy_free(&res);
    if (changed)
        th_session_tools_changed(c->s);
}

/* ---- Running ------------------------------------------------------------------ */

bool th_mgr_tl_async_get(void)
{
    return tl_async;
}

void th_mgr_tl_async_set(bool v)
{
    tl_async = v;
}

void th_mgr_run(th_mcall *c)
{
    pthread_mutex_lock(&c->mu);
    bool skip = c->answered || atomic_load(&c->abort_code) != 0;
    if (!skip)
        c->phase = TH_PH_RUNNING;
    pthread_mutex_unlock(&c->mu);
    if (skip) {
        th_mcall_exec_end(c, TOOLHOST_FAILED, false);
        th_mcall_unref(c);
        return;
    }
    atomic_fetch_add(&c->h->mgr.running, 1);
    th_mcall *prev = tl_cur;
    tl_cur = c;
    c->in_execute = true;
    c->ran = true;
    const th_tool *t = c->tool;
    int st = c->mock ? th_mock_execute(c)
                     : t->desc->execute(t->plugin->state, t->desc, &c->base.pub,
                                        c->args, c->args_len);
    c->in_execute = false;
    tl_cur = prev;
    if (c->suspended) {
        /* complete() finishes it (or already did). */
    } else if (st == TOOLHOST_OK || st == TOOLHOST_FAILED) {
        th_mcall_exec_end(c, st, true);
    } else {
        char m[160];
        snprintf(m, sizeof m, "tool %s returned %d from execute (expected ok, failed, or pending after suspend)",
                 t->name, st);
        th_mcall_set_error(&c->base.pub, TH_ETOOL, m);
        th_mcall_exec_end(c, TOOLHOST_FAILED, true);
    }
    th_mcall_unref(c);
}

/* ---- Host callbacks (Owner class) ----------------------------------------- */

/* A call nested inline in another (a tool calling tools on its own
 * thread) is also cancelled when an ancestor is (each call holds a
 * reference to its parent). */
static bool cancelled(th_mcall *c)
{
    for (; c; c = c->inline_run ? c->parent : NULL)
        if (atomic_load_explicit(&c->abort_code, memory_order_relaxed))
            return true;
    return false;
}

static int cb_write(toolhost_call *call, int stream, const void *data,
                    size_t len)
{
    th_mcall *c = (th_mcall *)call;
    if ((stream != TOOLHOST_STDOUT && stream != TOOLHOST_STDERR) ||
        (!data && len))
        return TOOLHOST_EINVAL;
    if (cancelled(c))
        return TOOLHOST_ECANCELLED;
    if (!len)
        return 0;
    return th_out_write(stream == TOOLHOST_STDOUT ? &c->out : &c->err, data,
                        len) == 0
               ? 0
               : TOOLHOST_ENOMEM;
}

static int cb_set_meta(toolhost_call *call, const uint8_t *map, size_t len)
{
    th_mcall *c = (th_mcall *)call;
    if (!map || !len)
        return TOOLHOST_EINVAL;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    bool ok = msgpack_unpack_next(&u, (const char *)map, len, &off) ==
                  MSGPACK_UNPACK_SUCCESS &&
              u.data.type == MSGPACK_OBJECT_MAP && off == len;
    msgpack_unpacked_destroy(&u);
    if (!ok)
        return TOOLHOST_EINVAL;
    uint8_t *m = malloc(len);
    if (!m)
        return TOOLHOST_ENOMEM;
    memcpy(m, map, len);
    free(c->meta);
    c->meta = m;
    c->meta_len = len;
    return 0;
}

/* True when `c` runs inline on this thread: it is the thread's call, or
 * an ancestor of it through inline calls (run_code forwarding an update of
 * a tool it called).  Its caller then waits on this very thread (inside
 * th_call_start), so an update must be delivered here and now: handed to
 * the notifier it would reach th_call_sync's pending slot, which the
 * caller only reads once the call is over. */
static bool inline_here(const th_mcall *c)
{
    if (!c->inline_run)
        return false;
    for (const th_mcall *p = tl_cur; p; p = p->inline_run ? p->parent : NULL)
        if (p == c)
            return true;
    return false;
}

static int cb_progress(toolhost_call *call, double fraction,
                       const char *message, const uint8_t *data,
                       size_t data_len)
{
    th_mcall *c = (th_mcall *)call;
    th_host *h = c->h;
    th_session *s = c->s;
    if (data_len && !data)
        return TOOLHOST_EINVAL;
    char *msg = message ? strdup(message) : NULL;
    char *last = message ? strdup(message) : NULL;
    uint8_t *d = NULL;
    if (data_len && (d = malloc(data_len)))
        memcpy(d, data, data_len);
    if ((message && (!msg || !last)) || (data_len && !d)) {
        free(msg);
        free(last);
        free(d);
        return TOOLHOST_ENOMEM;
    }
    pthread_mutex_lock(&c->mu);
    if (c->answered) {
        pthread_mutex_unlock(&c->mu);
        free(msg);
        free(last);
        free(d);
        return TOOLHOST_ECANCELLED;
    }
    c->last_update_ms = th_wall_ms();
    free(c->last_msg);
    c->last_msg = last;
    c->last_frac = fraction;
    if (!c->acked) {
        /* The first update acknowledges: the call becomes a task. */
        c->acked = true;
        atomic_store(&c->is_task, true);
        c->pend_ack = true;
        c->ack_msg = msg;
        free(d);
        bool changed = false;
        pthread_mutex_lock(&s->mu);
        s->live_tasks++;
        c->live_counted = true;
        changed = s->live_tasks == 1 && !th_host_config(h)->host.expose_task_tools;
        if (c->scope == TH_SCOPE_TOOLSET && c->exec_counted) {
            c->exec_counted = false;
            s->exec_live--;
            pthread_cond_broadcast(&s->cv);
        }
        pthread_mutex_unlock(&s->mu);
        if (c->scope == TH_SCOPE_TOOLSET) {
            pthread_mutex_lock(&h->tmu);
            if (th_u64map_put(&h->tasks, c->base.pub.call_id, c) == 0) {
                c->in_tasks = true;
                th_mcall_ref(c);
            }
            pthread_mutex_unlock(&h->tmu);
        }
        deliver_locked(c);
        pthread_mutex_unlock(&c->mu);
        /* A task that holds a worker counts against the async cap. */
        if (tl_cur == c && th_mgr_tl_worker && !c->inline_run && !tl_async) {
            tl_async = true;
            th_mgr_async_take(h);
        }
        if (changed)
            th_session_tools_changed(s);
        return 0;
    }
    if (c->no_progress) {
        pthread_mutex_unlock(&c->mu);
        free(msg);
        free(d);
        return 0;
    }
    if (c->pend_prog) {
        c->prog_coalesced++;
        free(c->prog_msg);
        free(c->prog_data);
    }
    c->pend_prog = true;
    c->prog_frac = fraction;
    c->prog_msg = msg;
    c->prog_data = d;
    c->prog_data_len = d ? data_len : 0;
    if (!c->delivering) {
        if (inline_here(c)) {
            deliver_locked(c); /* inline: the caller's own thread */
        } else if (!c->notify_queued) {
            c->notify_queued = true;
            th_mcall_ref(c);
            th_mgr_notify(h, c);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static int cb_is_cancelled(const toolhost_call *call)
{
    return cancelled((th_mcall *)call);
}

static int64_t cb_time_left_ms(const toolhost_call *call)
{
    th_mcall *c = (th_mcall *)call;
    int64_t d = atomic_load_explicit(&c->deadline_ns, memory_order_relaxed);
    if (d == 0)
        return -1;
    int64_t left = (d - th_now_ns()) / 1000000;
    return left > 0 ? left : 0;
}

static int cb_suspend(toolhost_call *call)
{
    th_mcall *c = (th_mcall *)call;
    if (!c->in_execute || c->suspended || tl_cur != c)
        return TOOLHOST_ESTATE;
    th_mcall_ref(c); /* held until complete() */
    c->suspended = true;
    return 0;
}

static void cb_complete(toolhost_call *call, int status)
{
    th_mcall *c = (th_mcall *)call;
    if (status != TOOLHOST_OK)
        status = TOOLHOST_FAILED;
    th_mcall_exec_end(c, status, true);
    th_mcall_unref(c);
}

const th_call_vtbl th_mcall_vtbl = {
    .write = cb_write,
    .set_meta = cb_set_meta,
    .progress = cb_progress,
    .is_cancelled = cb_is_cancelled,
    .time_left_ms = cb_time_left_ms,
    .suspend = cb_suspend,
    .complete = cb_complete,
    .caller = cb_caller,
    .on_cancel = cb_on_cancel,
    .cancel_fd = cb_cancel_fd,
};

/* ---- Starting a call -------------------------------------------------------- */

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

/* A head-only output (file content, file view, knowledge) of a tool with
 * an integer `offset` parameter starts where the call's `offset` says, so
 * its "read on with offset=N" marker counts from there. */
static void set_read_on_base(th_mcall *c)
{
    uint32_t sem = c->out.sem;
    if (sem != TOOLHOST_SEM_FILE_CONTENT && sem != TOOLHOST_SEM_FILE_VIEW &&
        sem != TOOLHOST_SEM_KNOWLEDGE)
        return;
    bool has = false;
    for (size_t i = 0; i < c->tool->n_params && !has; i++)
        has = c->tool->params[i].type == TOOLHOST_TYPE_INTEGER &&
              strcmp(c->tool->params[i].name, "offset") == 0;
    if (!has)
        return;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    if (msgpack_unpack_next(&u, (const char *)c->args, c->args_len, NULL) ==
            MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP) {
        const msgpack_object_map *m = &u.data.via.map;
        for (uint32_t i = 0; i < m->size; i++)
            if (m->ptr[i].key.type == MSGPACK_OBJECT_STR &&
                m->ptr[i].key.via.str.size == 6 &&
                memcmp(m->ptr[i].key.via.str.ptr, "offset", 6) == 0 &&
                m->ptr[i].val.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                th_out_set_offset_base(&c->out, m->ptr[i].val.via.u64);
    }
    msgpack_unpacked_destroy(&u);
}

int th_call_start(th_session *s, const char *name, const uint8_t *args,
                  size_t len, const th_call_opts *opts, th_event_fn fn,
                  void *ud, uint64_t *call_id)
{
    static const uint8_t empty_map[1] = {0x80};
    if (!s || !name || !fn || (!args && len))
        return TH_EINVAL;
    if (!args) {
        args = empty_map;
        len = 1;
    }
    th_host *h = s->h;
    th_call_opts o;
    memset(&o, 0, sizeof o);
    if (opts)
        o = *opts;
    pthread_mutex_lock(&s->mu);
    bool closing = s->closing;
    pthread_mutex_unlock(&s->mu);
    if (closing)
        return TH_ESTATE;
    uint64_t id = atomic_fetch_add(&h->next_id, 1);
    if (call_id)
        *call_id = id;
    atomic_fetch_add(&h->mgr.calls_total, 1);

    /* Lookup: pins the plugin generation until the call is freed. */
    const th_tool *t = th_registry_acquire(h->reg, name);
    if (!t) {
        emit_error(fn, ud, id, TH_EUNKNOWN_TOOL, "unknown tool '%s'", name);
        return 0;
    }
    th_stat *st = th_stat_get(h, t->name);
    if (!st) {
        th_tool_release(t);
        return TH_ENOMEM;
    }
    atomic_fetch_add(&st->calls, 1);

    /* Policy: the toolset it runs under, and the caller's ACL. */
    int ts_idx = -1;
    const th_toolset_cfg *ts = NULL;
    if (!th_host_is_task_tool(t->name)) {
        bool any = false;
        ts_idx = th_host_pick_toolset(h, s, t, &any);
        if (ts_idx < 0) {
            if (any) {
                atomic_fetch_add(&st->perm_denied, 1);
                emit_error(fn, ud, id, TH_EPERM,
                           "permission denied: no toolset that contains tool '%s' allows uid %u",
                           name, (unsigned)s->who.uid);
            } else {
                atomic_fetch_add(&st->errors, 1);
                emit_error(fn, ud, id, TH_EUNKNOWN_TOOL, "unknown tool '%s'", name);
            }
            th_tool_release(t);
            return 0;
        }
        ts = &th_host_config(h)->toolsets[ts_idx];
    }
    const th_tool_override *ov = ts ? th_host_override(ts, t->name) : NULL;
    th_dup_policy pol = TH_DUP_ALLOW;
    if (ts)
        pol = ov && ov->on_duplicate_call >= 0
                  ? (th_dup_policy)ov->on_duplicate_call
                  : ts->on_duplicate_call;

    /* confirm_duplicate is the host's parameter: strip it first. */
    th_buf stripped = TH_BUF_INIT;
    bool confirm = false, found = false;
    const uint8_t *a = args;
    size_t al = len;
    if (pol == TH_DUP_CONFIRM) {
        char e[160];
        int rc = strip_confirm(args, len, &stripped, &confirm, &found, e, sizeof e);
        if (rc != 0) {
            th_buf_free(&stripped);
            atomic_fetch_add(&st->errors, 1);
            if (rc == TH_ENOMEM) {
                th_tool_release(t);
                return TH_ENOMEM;
            }
            emit_error(fn, ud, id, TH_EARGS, "Error parsing arguments for %s: %s",
                       t->name, e);
            th_tool_release(t);
            return 0;
        }
        if (found) {
            a = stripped.data;
            al = stripped.len;
        }
    }

    /* Validation: the one place. */
    th_buf vb = TH_BUF_INIT;
    const uint8_t *va = NULL;
    size_t vl = 0;
    th_error e;
    th_error_clear(&e);
    if (th_validate_call(t, a, al, &vb, &va, &vl, &e) != 0) {
        atomic_fetch_add(&st->errors, 1);
        emit_error(fn, ud, id, e.code ? e.code : TH_EARGS, "%s",
                   e.msg[0] ? e.msg : "invalid arguments");
        th_buf_free(&vb);
        th_buf_free(&stripped);
        th_tool_release(t);
        return 0;
    }

    th_mcall *c = calloc(1, sizeof *c);
    uint8_t *copy = malloc(vl ? vl : 1);
    if (!c || !copy) {
        free(c);
        free(copy);
        th_buf_free(&vb);
        th_buf_free(&stripped);
        th_tool_release(t);
        return TH_ENOMEM;
    }
    memcpy(copy, va, vl);
    th_buf_free(&vb);
    th_buf_free(&stripped);
    c->base.pub.struct_size = sizeof c->base.pub;
    c->base.pub.call_id = id;
    c->base.pub.host = &t->plugin->api;
    c->base.vt = &th_mcall_vtbl;
    c->h = h;
    c->s = s;
    th_session_ref(s);
    c->tool = t;
    c->st = st;
    c->ts = ts;
    c->ts_idx = ts_idx;
    c->mock = th_mock_find(th_host_config(h), t->name);
    c->args = copy;
    c->args_len = vl;
    c->scope = ts ? ts->scope : TH_SCOPE_SESSION;
    c->is_async = (t->flags & TOOLHOST_TOOL_ASYNC) != 0;
    c->no_progress = o.no_progress;
    c->may_block = o.may_block;
    c->opt_timeout_ms = o.timeout_ms;
    c->confirm = confirm;
    c->start_ns = th_now_ns();
    c->start_wall_ms = th_wall_ms();
    c->last_update_ms = c->start_wall_ms;
    c->last_frac = -1;
    c->heap_idx = SIZE_MAX;
    c->parent = tl_cur; /* referenced: read by cancelled() */
    if (c->parent)
        th_mcall_ref(c->parent);
    c->fn = fn;
    c->ud = ud;
    atomic_init(&c->refs, 1); /* the execution reference */
    atomic_init(&c->abort_code, 0);
    atomic_init(&c->is_task, false);
    c->cancel_efd = -1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    /* Limits: the tool's override in its toolset, else the toolset's,
     * else the host's (th_out_limit). */
    const th_limits *hl = &th_host_config(h)->limits;
    uint32_t so = t->stdout_type < TH_SEM_COUNT ? t->stdout_type : TOOLHOST_SEM_TEXT;
    uint32_t se = t->stderr_type < TH_SEM_COUNT ? t->stderr_type : TOOLHOST_SEM_TEXT;
    th_out_init(&c->out, so, th_out_limit(hl, ts, t->name, so));
    th_out_init(&c->err, se, th_out_limit(hl, ts, t->name, se));
    set_read_on_base(c);
    if (th_host_config(h)->host.spill_dir) {
        /* Full outputs that get cut are saved there (no file otherwise);
         * a folder that cannot be used only means no spill. */
        (void)th_out_spill(&c->out, th_host_config(h)->host.spill_dir, th_host_config(h)->host.spill_max_bytes);
        (void)th_out_spill(&c->err, th_host_config(h)->host.spill_dir, th_host_config(h)->host.spill_max_bytes);
    }
    atomic_fetch_add(&h->live_calls, 1);

    pthread_mutex_lock(&s->mu);
    if (s->closing || th_u64map_put(&s->calls, id, c) != 0) {
        int rc = s->closing ? TH_ESTATE : TH_ENOMEM;
        pthread_mutex_unlock(&s->mu);
        c->fn = NULL;
        th_mcall_unref(c);
        return rc;
    }
    th_mcall_ref(c);
    c->in_session = true;
    c->exec_counted = true;
    s->exec_live++;
    pthread_mutex_unlock(&s->mu);

    /* Permission, with the validated arguments. */
    if (ts) {
        uint32_t flags = t->flags;
        char reason[256] = "";
        if (t->desc->needs_permission &&
            t->desc->needs_permission(t->plugin->state, t->desc, c->args,
                                      c->args_len, reason, sizeof reason) == 1)
            flags |= TH_PERM_FLAG_NEEDS;
        reason[sizeof reason - 1] = '\0';
        th_perm_decision d;
        memset(&d, 0, sizeof d);
        th_perm_decide(ts, th_host_config(h)->path, t->name, flags, &d);
        if (d.action == TH_PERM_DENY) {
            th_log_info("session=%llu tool=%s call=%llu permission denied by %s",
                        (unsigned long long)s->id, t->name,
                        (unsigned long long)id, d.rule);
            char m[512];
            snprintf(m, sizeof m, "permission denied for tool %s by %s", t->name,
                     d.rule);
            never_run(c, TH_EPERM, m);
            return 0;
        }
        if (d.action == TH_PERM_ALLOW && (flags & TH_PERM_FLAG_NEEDS))
            th_log_info("session=%llu tool=%s call=%llu permission granted by %s",
                        (unsigned long long)s->id, t->name,
                        (unsigned long long)id, d.rule);
        if (d.action == TH_PERM_ASK) {
            th_log_info("session=%llu tool=%s call=%llu asking permission (%s)",
                        (unsigned long long)s->id, t->name,
                        (unsigned long long)id, d.rule);
            pthread_mutex_lock(&c->mu);
            c->phase = TH_PH_PERM_WAIT;
            pthread_mutex_unlock(&c->mu);
            uint64_t pt = th_host_config(h)->host.permission_timeout_ms;
            atomic_store(&c->deadline_ns, th_now_ns() + (int64_t)(pt ? pt : 60000) * 1000000);
            th_mgr_arm(h, c);
            th_mcall_ref(c);
            int asked = s->ops.ask_permission
                            ? s->ops.ask_permission(s->front_ud, id, t->name,
                                                    c->args, c->args_len,
                                                    reason[0] ? reason : d.rule)
                            : -1;
            if (asked != 0) {
                char m[512];
                snprintf(m, sizeof m,
                         "permission denied for tool %s: %s asks, and no one can be asked",
                         t->name, d.rule);
                answer_error(c, TH_EPERM, m);
            }
            /* Answered meanwhile (cancelled, session closed, refused):
             * whoever leaves PERM_WAIT drops the execution reference. */
            perm_settle(c);
            th_mcall_unref(c);
            return 0;
        }
    }
    th_mgr_submit(c);
    return 0;
}

/* The timer thread's work for a call waiting for permission. */
void th_mcall_perm_expired(th_mcall *c)
{
    char m[256];
    snprintf(m, sizeof m, "permission denied for tool %s: no answer within %llu ms",
             c->tool->name, (unsigned long long)th_host_config(c->h)->host.permission_timeout_ms);
    answer_error(c, TH_EPERM, m);
    perm_settle(c);
}

int th_permission_answer(th_session *s, uint64_t call_id, bool allow)
{
    pthread_mutex_lock(&s->mu);
    th_mcall *c = th_u64map_get(&s->calls, call_id);
    if (c)
        th_mcall_ref(c);
    pthread_mutex_unlock(&s->mu);
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
        never_run(c, TH_EPERM, m);
    } else {
        c->may_block = false;
        th_mgr_submit(c);
    }
    th_mcall_unref(c);
    return 0;
}

int th_call_cancel(th_session *s, uint64_t id)
{
    th_host *h = s->h;
    pthread_mutex_lock(&s->mu);
    th_mcall *c = th_u64map_get(&s->calls, id);
    if (c)
        th_mcall_ref(c);
    pthread_mutex_unlock(&s->mu);
    if (!c) {
        /* A toolset-scoped task of a toolset this session may use. */
        pthread_mutex_lock(&h->tmu);
        c = th_u64map_get(&h->tasks, id);
        if (c && c->ts_idx >= 0 && s->usable[c->ts_idx])
            th_mcall_ref(c);
        else
            c = NULL;
        pthread_mutex_unlock(&h->tmu);
    }
    if (!c)
        return TH_ENOTFOUND;
    bool won = th_mcall_abort(c, TH_ECANCELLED, "the call was cancelled (call %llu of %s)",
                              (unsigned long long)id, c->tool->name);
    th_mcall_unref(c);
    return won ? 0 : TH_ESTATE;
}

th_session *th_call_session(const toolhost_call *call)
{
    const th_call_base *b = (const th_call_base *)call;
    if (!call || b->vt != &th_mcall_vtbl)
        return NULL;
    return ((const th_mcall *)call)->s;
}

const th_toolset_cfg *th_call_toolset(const toolhost_call *call)
{
    const th_call_base *b = (const th_call_base *)call;
    if (!call || b->vt != &th_mcall_vtbl)
        return NULL;
    return ((const th_mcall *)call)->ts;
}

/* ---- th_call_sync ---------------------------------------------------------- */

typedef struct sync_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t self;
    bool done;
    int rc;
    th_result_copy *out;
    th_event_fn progress;
    void *ud;
    bool pend;
    double frac;
    char *msg;
    uint8_t *data;
    size_t data_len;
    uint32_t coalesced;
    uint64_t task_id;
} sync_wait;

static void sync_cb(const th_event *ev, void *ud)
{
    sync_wait *w = ud;
    if (ev->kind == TH_EV_PROGRESS) {
        if (!w->progress)
            return;
        if (pthread_equal(pthread_self(), w->self)) {
            w->progress(ev, w->ud);
            return;
        }
        char *m = ev->message ? strdup(ev->message) : NULL;
        uint8_t *d = ev->data_len ? malloc(ev->data_len) : NULL;
        if (d)
            memcpy(d, ev->data, ev->data_len);
        pthread_mutex_lock(&w->mu);
        if (w->pend)
            w->coalesced += 1;
        free(w->msg);
        free(w->data);
        w->pend = true;
        w->frac = ev->fraction;
        w->msg = m;
        w->data = d;
        w->data_len = d ? ev->data_len : 0;
        w->coalesced += ev->coalesced;
        w->task_id = ev->task_id;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        return;
    }
    if (ev->result->kind == TH_RESULT_RUNNING) {
        /* The acknowledgement is the task's first update: the waiter sees
         * it as progress too (its message; the fraction is not carried). */
        if (w->progress && pthread_equal(pthread_self(), w->self)) {
            /* inline on the waiting thread: in order, right now */
            th_event pe;
            memset(&pe, 0, sizeof pe);
            pe.kind = TH_EV_PROGRESS;
            pe.call_id = ev->call_id;
            pe.task_id = ev->task_id;
            pe.fraction = -1;
            pe.message = ev->result->message;
            pthread_mutex_lock(&w->mu);
            w->task_id = ev->task_id;
            pthread_mutex_unlock(&w->mu);
            w->progress(&pe, w->ud);
            return;
        }
        char *m = ev->result->message ? strdup(ev->result->message) : NULL;
        pthread_mutex_lock(&w->mu);
        w->task_id = ev->task_id;
        if (w->progress && !w->pend) {
            free(w->msg);
            w->msg = m;
            m = NULL;
            w->frac = -1;
            w->pend = true;
            pthread_cond_signal(&w->cv);
        }
        pthread_mutex_unlock(&w->mu);
        free(m);
        return;
    }
    th_result_copy tmp;
    int rc = th_result_copy_from(&tmp, ev->result);
    pthread_mutex_lock(&w->mu);
    *w->out = tmp;
    w->rc = rc;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int th_call_sync(th_session *s, const char *tool, const uint8_t *args,
                 size_t len, const th_call_opts *opts, th_event_fn progress,
                 void *ud, volatile int *cancel_flag, th_result_copy *out)
{
    sync_wait w;
    memset(&w, 0, sizeof w);
    memset(out, 0, sizeof *out);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    w.self = pthread_self();
    w.out = out;
    w.progress = progress;
    w.ud = ud;
    th_call_opts o;
    memset(&o, 0, sizeof o);
    if (opts)
        o = *opts;
    o.may_block = true; /* we wait anyway: a sync tool may run right here */
    uint64_t id = 0;
    int rc = th_call_start(s, tool, args, len, &o, sync_cb, &w, &id);
    bool cancelled = false;
    if (rc == 0) {
        pthread_mutex_lock(&w.mu);
        while (!w.done || w.pend) { /* progress first, then the end */
            if (w.pend) {
                th_event ev;
                memset(&ev, 0, sizeof ev);
                ev.kind = TH_EV_PROGRESS;
                ev.call_id = id;
                ev.task_id = w.task_id;
                ev.fraction = w.frac;
                ev.message = w.msg;
                ev.data = w.data;
                ev.data_len = w.data_len;
                ev.coalesced = w.coalesced;
                char *m = w.msg;
                uint8_t *d = w.data;
                w.msg = NULL;
                w.data = NULL;
                w.pend = false;
                w.coalesced = 0;
                pthread_mutex_unlock(&w.mu);
                progress(&ev, ud);
                free(m);
                free(d);
                pthread_mutex_lock(&w.mu);
                continue;
            }
            if (w.done)
                break;
            if (cancel_flag && !cancelled && *cancel_flag) {
                cancelled = true;
                pthread_mutex_unlock(&w.mu);
                th_call_cancel(s, id);
                pthread_mutex_lock(&w.mu);
                continue;
            }
            if (cancel_flag && !cancelled) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 5 * 1000000;
                if (ts.tv_nsec >= 1000000000) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000;
                }
                pthread_cond_timedwait(&w.cv, &w.mu, &ts);
            } else {
                pthread_cond_wait(&w.cv, &w.mu);
            }
        }
        rc = w.rc;
        pthread_mutex_unlock(&w.mu);
    }
    free(w.msg);
    free(w.data);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return rc;
}
