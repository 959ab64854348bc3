/* tasks.c - the task store (th/host.h, "The task store"): live tasks read
 * from the manager, finished tasks of both scopes kept under one retention
 * policy (host.task_keep and host.result_ttl), and who may see which task.
 * The two built-in task tools are in task_tools.c.
 *
 * Locks (th/manager.h has the order): the store (h->kept, kept_head/tail,
 * waiters) is under host->tmu.  A task's end is recorded by th_dup_remove()
 * with call->mu held and before the call leaves the session's and the
 * host's tables, so a reader that finds a live call answered (under its
 * mu) finds its end in the store.  Readers of finished entries take a
 * reference under tmu and read without it, so a callback may call the
 * call API (which takes tmu) without deadlock.
 */
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "th/codec.h"
#include "th/log.h"
#include "manager.h"

/* A th_task_wait() in progress, on the waiter's stack; under host->tmu. */
typedef struct th_task_waiter {
    struct th_task_waiter *next;
    uint64_t task_id;
    pthread_cond_t cv;
    bool done;
    int rc;
    th_result_copy *out;
} th_task_waiter;

/* ---- Who sees what ----------------------------------------------------------- */

/* The one ownership rule.  (When th_principal gains a user name given by a
 * token, whose uid is (uint32_t)-1 for every such user, compare the names
 * here too.) */
static bool visible(const th_session *s, uint64_t sid, uint32_t uid,
                    th_task_scope scope, int ts_idx)
{
    if (sid == s->id)
        return true;
    if (scope != TH_SCOPE_TOOLSET || ts_idx < 0 || !s->usable[ts_idx])
        return false;
    /* The owner, and admins (th_host_is_admin): they see and cancel
     * every user's toolset-scoped tasks in the toolsets they may use.  A
     * principal without a uid ((uint32_t)-1: a token user with no `uid:`)
     * owns nothing beyond its own session. */
    return s->who.trusted ||
           (uid == s->who.uid && uid != (uint32_t)-1) ||
           th_host_is_admin(s->h, &s->who);
}

static bool live_visible(const th_session *s, const th_mcall *c)
{
    return visible(s, c->s->id, c->s->who.uid, c->scope, c->ts_idx);
}

static bool kept_visible(const th_session *s, const th_kept *k)
{
    return visible(s, k->session_id, k->owner_uid, k->scope, k->ts_idx);
}

/* ---- The finished store (host->tmu) ------------------------------------------ */

static void kept_free(th_kept *k)
{
    free(k->tool);
    free(k->message);
    free(k->args);
    th_result_copy_destroy(&k->res);
    free(k);
}

static void kept_unref_locked(th_kept *k)
{
    if (--k->refs == 0)
        kept_free(k);
}

/* Takes the oldest entry out of the store. */
static void drop_head_locked(th_host *h)
{
    th_kept *k = h->kept_head;
    h->kept_head = k->next;
    if (!h->kept_head)
        h->kept_tail = NULL;
    k->next = NULL;
    th_u64map_del(&h->kept, k->task_id);
    h->n_kept--;
    kept_unref_locked(k);
}

#define DEF_TASK_KEEP 256

static size_t task_keep(th_host *h)
{
    th_config *cfg = th_host_config_get(h);
    uint32_t n = cfg->host.task_keep;
    th_config_unref(cfg);
    return n ? n : DEF_TASK_KEEP;
}

/* Drops what is older than result_ttl and, to make room for `incoming`
 * more, what is beyond task_keep (oldest first; logged). */
static void expire_locked(th_host *h, size_t incoming)
{
    int64_t now = th_now_ns();
    while (h->kept_head && h->kept_head->expires_ns <= now)
        drop_head_locked(h);
    size_t keep = task_keep(h);
    while (h->kept_head && h->n_kept + incoming > keep) {
        if (h->n_dropped++ % 1000 == 0)
            th_log_info("task store full (host.task_keep=%zu): dropping the result of "
                        "finished task %llu before its result_ttl (%llu dropped so far)",
                        keep, (unsigned long long)h->kept_head->task_id,
                        (unsigned long long)h->n_dropped);
        drop_head_locked(h);
    }
}

static void wake_waiters_locked(th_host *h, uint64_t task_id, const th_result_copy *res)
{
    for (th_task_waiter *w = h->waiters; w; w = w->next)
        if (w->task_id == task_id && !w->done) {
            w->rc = th_result_copy_dup(w->out, res);
            w->done = true;
            pthread_cond_signal(&w->cv);
        }
}

/* A finished task's record, built from the call (c->mu held). */
static th_kept *kept_new(th_mcall *c)
{
    th_kept *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->task_id = c->base.pub.call_id;
    k->session_id = c->s->id;
    k->owner_uid = c->s->who.uid;
    k->ts_idx = c->ts_idx;
    k->scope = c->scope;
    k->as_task = c->as_task;
    k->started_ms = c->x->start_wall_ms;
    k->last_update_ms = c->x->last_update_ms;
    k->ended_ms = th_wall_ms();
    k->fraction = c->x->last_frac;
    k->refs = 1;
    if (!(k->tool = strdup(c->tool->name)) ||
        (c->x->last_msg && !(k->message = strdup(c->x->last_msg))) ||
        (c->args_len && !(k->args = malloc(c->args_len))) ||
        th_result_copy_dup(&k->res, &c->x->final) != 0) {
        kept_free(k);
        return NULL;
    }
    if (c->args_len)
        memcpy(k->args, c->args, c->args_len);
    k->args_len = c->args_len;
    return k;
}

/* Records the end of task c (c->mu held, c->x->final set). */
static void record_end(th_mcall *c)
{
    th_host *h = c->h;
    uint64_t id = c->base.pub.call_id;
    th_kept *k = kept_new(c);
    int64_t ttl_ns = (int64_t)c->cfg->host.result_ttl_ms * 1000000; /* the call's config */
    pthread_mutex_lock(&h->tmu);
    wake_waiters_locked(h, id, &c->x->final);
    if (!k) {
        pthread_mutex_unlock(&h->tmu);
        th_log_error("task=%llu out of memory keeping its result", (unsigned long long)id);
        return;
    }
    k->expires_ns = th_now_ns() + ttl_ns;
    expire_locked(h, 1);
    if (ttl_ns == 0 ||
        th_u64map_put(&h->kept, id, k) != 0) {
        pthread_mutex_unlock(&h->tmu);
        kept_free(k);
        return;
    }
    if (h->kept_tail)
        h->kept_tail->next = k;
    else
        h->kept_head = k;
    h->kept_tail = k;
    h->n_kept++;
    pthread_mutex_unlock(&h->tmu);
}

void th_dup_remove(th_mcall *c)
{
    if (c->acked)
        record_end(c);
    th_dup_leave(c);
}

void th_tasks_keep_locked(th_host *h, uint64_t task_id, int ts_idx,
                          const th_result_copy *res)
{
    (void)h;
    (void)task_id;
    (void)ts_idx;
    (void)res;
}

void th_tasks_destroy(th_host *h)
{
    while (h->kept_head)
        drop_head_locked(h);
    th_u64map_destroy(&h->kept);
    th_u64map_destroy(&h->tasks);
    th_dup_destroy(h);
}

/* ---- Views --------------------------------------------------------------------- */

/* The view of a live task (c->mu held); *msg is a copy of the message the
 * caller frees.  False when c is not a live task. */
static bool live_view_locked(th_mcall *c, th_task_view *v, char **msg)
{
    *msg = NULL;
    if (!c->acked || c->answered)
        return false;
    memset(v, 0, sizeof *v);
    v->task_id = c->base.pub.call_id;
    v->session_id = c->s->id;
    v->owner_uid = c->s->who.uid;
    v->tool = c->tool->name;
    v->scope = c->scope;
    v->as_task = c->as_task;
    v->state = TH_TASK_WORKING;
    v->started_ms = c->x->start_wall_ms;
    v->last_update_ms = c->x->last_update_ms;
    v->fraction = c->x->last_frac;
    v->args = c->args;
    v->args_len = c->args_len;
    if (c->x->last_msg)
        *msg = strdup(c->x->last_msg); /* out of memory: shown without it */
    v->message = *msg;
    return true;
}

static void kept_view(const th_kept *k, th_task_view *v)
{
    memset(v, 0, sizeof *v);
    v->task_id = k->task_id;
    v->session_id = k->session_id;
    v->owner_uid = k->owner_uid;
    v->tool = k->tool;
    v->scope = k->scope;
    v->as_task = k->as_task;
    v->state = th_task_state_of(&k->res);
    v->started_ms = k->started_ms;
    v->last_update_ms = k->last_update_ms;
    v->ended_ms = k->ended_ms;
    v->message = k->message;
    v->fraction = k->fraction;
    v->result = &k->res;
    v->args = k->args;
    v->args_len = k->args_len;
}

/* A call of s or a live toolset-scoped task visible to s, referenced. */
static th_mcall *live_ref(th_session *s, uint64_t id)
{
    th_host *h = s->h;
    th_mcall *c = th_mgr_session_call(s, id); /* map or call slot */
    if (c)
        return c;
    pthread_mutex_lock(&h->tmu);
    c = th_u64map_get(&h->tasks, id);
    if (c && live_visible(s, c))
        c->h->mgr.ops->ref(c);
    else
        c = NULL;
    pthread_mutex_unlock(&h->tmu);
    return c;
}

/* A finished task visible to s, referenced (kept_unref under tmu). */
static th_kept *kept_ref(th_session *s, uint64_t id)
{
    th_host *h = s->h;
    pthread_mutex_lock(&h->tmu);
    expire_locked(h, 0);
    th_kept *k = th_u64map_get(&h->kept, id);
    if (k && kept_visible(s, k))
        k->refs++;
    else
        k = NULL;
    pthread_mutex_unlock(&h->tmu);
    return k;
}

static void kept_release(th_host *h, th_kept *k)
{
    pthread_mutex_lock(&h->tmu);
    kept_unref_locked(k);
    pthread_mutex_unlock(&h->tmu);
}

/* 1: a live task (view given to fn), 0: a call that is no task, -1: it
 * ended (look in the store). */
static int try_live(th_mcall *c, void (*fn)(const th_task_view *t, void *ud), void *ud)
{
    th_task_view v;
    char *msg;
    pthread_mutex_lock(&c->mu);
    bool live = live_view_locked(c, &v, &msg);
    bool ended = c->acked && c->answered;
    pthread_mutex_unlock(&c->mu);
    if (live)
        fn(&v, ud);
    free(msg);
    return live ? 1 : ended ? -1 : 0;
}

int th_task_get(th_session *s, uint64_t task_id,
                void (*fn)(const th_task_view *t, void *ud), void *ud)
{
    th_mcall *c = live_ref(s, task_id);
    if (c) {
        int r = try_live(c, fn, ud);
        c->h->mgr.ops->unref(c);
        if (r >= 0)
            return r ? 0 : TH_ENOTFOUND;
    }
    th_kept *k = kept_ref(s, task_id);
    if (!k)
        return TH_ENOTFOUND;
    th_task_view v;
    kept_view(k, &v);
    fn(&v, ud);
    kept_release(s->h, k);
    return 0;
}

/* ---- Listing ------------------------------------------------------------------ */

typedef struct collect_ctx {
    th_session *s;
    th_mcall **v;
    size_t n, cap;
    bool others;    /* host tasks: only those of other sessions */
} collect_ctx;

static void collect(uint64_t k, void *val, void *ud)
{
    (void)k;
    collect_ctx *cc = ud;
    th_mcall *c = val;
    if (cc->n == cc->cap)
        return;
    if (cc->others && (c->s == cc->s || !live_visible(cc->s, c)))
        return;
    c->h->mgr.ops->ref(c);
    cc->v[cc->n++] = c;
}

static int call_by_id(const void *a, const void *b)
{
    uint64_t x = (*(th_mcall *const *)a)->base.pub.call_id;
    uint64_t y = (*(th_mcall *const *)b)->base.pub.call_id;
    return x < y ? -1 : x > y;
}

static int kept_by_id(const void *a, const void *b)
{
    uint64_t x = (*(th_kept *const *)a)->task_id;
    uint64_t y = (*(th_kept *const *)b)->task_id;
    return x < y ? -1 : x > y;
}

static bool grow(collect_ctx *cc, size_t more)
{
    th_mcall **v = realloc(cc->v, (cc->cap + more + 1) * sizeof *v);
    if (!v)
        return false;
    cc->v = v;
    cc->cap += more;
    return true;
}

int th_task_foreach(th_session *s, int (*fn)(const th_task_view *t, void *ud), void *ud)
{
    th_host *h = s->h;
    collect_ctx cc = {.s = s};
    /* Live: the session's calls, then other sessions' toolset tasks. */
    pthread_mutex_lock(&s->mu);
    bool ok = grow(&cc, s->calls.n);
    if (ok)
        th_u64map_each(&s->calls, collect, &cc);
    pthread_mutex_unlock(&s->mu);
    if (ok) {
        pthread_mutex_lock(&h->tmu);
        ok = grow(&cc, h->tasks.n);
        cc.others = true;
        if (ok)
            th_u64map_each(&h->tasks, collect, &cc);
        pthread_mutex_unlock(&h->tmu);
    }
    int rc = ok ? 0 : TH_ENOMEM;
    qsort(cc.v, cc.n, sizeof *cc.v, call_by_id);
    uint64_t *shown = calloc(cc.n + 1, sizeof *shown);
    size_t n_shown = 0;
    if (!shown && rc == 0)
        rc = TH_ENOMEM;
    for (size_t i = 0; i < cc.n; i++) {
        th_mcall *c = cc.v[i];
        if (rc == 0) {
            th_task_view v;
            char *msg;
            pthread_mutex_lock(&c->mu);
            bool live = live_view_locked(c, &v, &msg);
            pthread_mutex_unlock(&c->mu);
            if (live) {
                shown[n_shown++] = v.task_id;
                rc = fn(&v, ud);
            }
            free(msg);
        }
        c->h->mgr.ops->unref(c);
    }
    free(cc.v);
    if (rc != 0) {
        free(shown);
        return rc;
    }
    /* Finished, minus those just shown live (they ended meanwhile). */
    pthread_mutex_lock(&h->tmu);
    expire_locked(h, 0);
    th_kept **kv = calloc(h->n_kept + 1, sizeof *kv);
    size_t nk = 0;
    if (kv)
        for (th_kept *k = h->kept_head; k; k = k->next)
            if (kept_visible(s, k)) {
                k->refs++;
                kv[nk++] = k;
            }
    pthread_mutex_unlock(&h->tmu);
    if (!kv) {
        free(shown);
        return TH_ENOMEM;
    }
    qsort(kv, nk, sizeof *kv, kept_by_id);
    for (size_t i = 0; i < nk && rc == 0; i++) {
        bool dup = false;
        for (size_t j = 0; j < n_shown && !dup; j++)
            dup = shown[j] == kv[i]->task_id;
        if (dup)
            continue;
        th_task_view v;
        kept_view(kv[i], &v);
        rc = fn(&v, ud);
    }
    pthread_mutex_lock(&h->tmu);
    for (size_t i = 0; i < nk; i++)
        kept_unref_locked(kv[i]);
    pthread_mutex_unlock(&h->tmu);
    free(kv);
    free(shown);
    return rc;
}

/* ---- Waiting, cancelling, results ---------------------------------------------- */

static void unlink_waiter_locked(th_host *h, th_task_waiter *w)
{
    for (th_task_waiter **pp = &h->waiters; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
}

int th_task_wait(th_session *s, uint64_t task_id, int64_t timeout_ms,
                 volatile int *cancel_flag, th_result_copy *out)
{
    th_host *h = s->h;
    memset(out, 0, sizeof *out);
    int64_t deadline = timeout_ms >= 0 ? th_now_ns() + timeout_ms * 1000000 : -1;
    th_task_waiter w;
    memset(&w, 0, sizeof w);
    w.task_id = task_id;
    w.out = out;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&w.cv, &ca) ? TH_ENOMEM : 0;
    pthread_condattr_destroy(&ca);
    if (rc)
        return rc;

    /* Ended already, or register (one step: record_end() takes tmu). */
    pthread_mutex_lock(&h->tmu);
    expire_locked(h, 0);
    th_kept *k = th_u64map_get(&h->kept, task_id);
    if (k && kept_visible(s, k)) {
        rc = th_result_copy_dup(out, &k->res);
        pthread_mutex_unlock(&h->tmu);
        pthread_cond_destroy(&w.cv);
        return rc;
    }
    w.next = h->waiters;
    h->waiters = &w;
    pthread_mutex_unlock(&h->tmu);

    /* Only a live task visible to s is worth waiting for. */
    th_mcall *c = live_ref(s, task_id);
    bool wait = false;
    if (c) {
        pthread_mutex_lock(&c->mu);
        /* Answered: record_end() ran, before we registered (then the
         * store had it, or keeps nothing) or after (then w.done is set). */
        wait = c->acked && !c->answered;
        pthread_mutex_unlock(&c->mu);
        c->h->mgr.ops->unref(c);
    }
    pthread_mutex_lock(&h->tmu);
    rc = TH_ENOTFOUND;
    while (wait && !w.done) {
        rc = TH_ETIMEOUT;
        if (cancel_flag && *cancel_flag)
            break;
        int64_t now = th_now_ns();
        if (deadline >= 0 && now >= deadline)
            break;
        int64_t until = deadline >= 0 ? deadline : INT64_MAX;
        if (cancel_flag && until - now > 5000000)
            until = now + 5000000;
        if (until == INT64_MAX) {
            pthread_cond_wait(&w.cv, &h->tmu);
        } else {
            struct timespec ts = {.tv_sec = until / 1000000000,
                                  .tv_nsec = until % 1000000000};
            pthread_cond_timedwait(&w.cv, &h->tmu, &ts);
        }
    }
    if (w.done)
        rc = w.rc;
    unlink_waiter_locked(h, &w);
    pthread_mutex_unlock(&h->tmu);
    pthread_cond_destroy(&w.cv);
    if (rc != 0)
        th_result_copy_destroy(out);
    return rc;
}

int th_task_cancel(th_session *s, uint64_t task_id)
{
    th_mcall *c = live_ref(s, task_id);
    int rc = TH_ENOTFOUND;
    if (c) {
        const th_mgr_ops *ops = c->h->mgr.ops;
        ops->unref(c);
        rc = ops->cancel(s, task_id);
    }
    if (rc == TH_ENOTFOUND) {
        th_kept *k = kept_ref(s, task_id);
        if (k) {
            kept_release(s->h, k);
            rc = TH_ESTATE;
        }
    }
    return rc;
}

typedef struct result_ctx {
    th_result_copy *out;
    int rc;
} result_ctx;

static void result_one(const th_task_view *t, void *ud)
{
    result_ctx *rc = ud;
    rc->rc = t->result ? th_result_copy_dup(rc->out, t->result) : TH_ESTATE;
}

int th_task_result(th_session *s, uint64_t task_id, th_result_copy *out)
{
    memset(out, 0, sizeof *out);
    result_ctx ctx = {out, TH_ENOTFOUND};
    if (th_task_get(s, task_id, result_one, &ctx) == 0)
        return ctx.rc;
    /* A call of this session that is not (yet) a task. */
    th_mcall *c = th_mgr_session_call(s, task_id); /* map or call slot */
    if (c)
        s->h->mgr.ops->unref(c);
    return c ? TH_ESTATE : TH_ENOTFOUND;
}
