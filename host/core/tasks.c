/* tasks.c - tasks seen from outside: the duplicate table, the task list,
 * kept results of toolset-scoped tasks, and the two built-in task tools
 * get_running_tasks and cancel_task. */
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/manager.h"

/* ---- Duplicates ------------------------------------------------------------- */

typedef struct dup_node {
    uint64_t hash;
    uint8_t *key;
    size_t len;
    th_mcall *head;
    struct dup_node *next;
} dup_node;

static void policy_of(const th_mcall *c, th_dup_policy *pol, th_dup_scope *scope)
{
    *pol = TH_DUP_ALLOW;
    *scope = TH_DUPSCOPE_NAME_AND_ARGS;
    if (!c->ts)
        return;
    const th_tool_override *ov = th_host_override(c->ts, c->tool->name);
    *pol = ov && ov->on_duplicate_call >= 0 ? (th_dup_policy)ov->on_duplicate_call
                                            : c->ts->on_duplicate_call;
    *scope = ov && ov->duplicate_scope >= 0 ? (th_dup_scope)ov->duplicate_scope
                                            : c->ts->duplicate_scope;
}

/* The domain of a duplicate: toolset, session (for session scope), tool
 * and, for name_and_args, the canonical arguments. */
static int dup_key(th_mcall *c, th_dup_scope scope, th_buf *k)
{
    uint64_t sid = c->scope == TH_SCOPE_TOOLSET ? 0 : c->s->id;
    int32_t ts = c->ts_idx;
    if (th_buf_append(k, &ts, sizeof ts) || th_buf_append(k, &sid, sizeof sid) ||
        th_buf_append(k, c->tool->name, strlen(c->tool->name) + 1))
        return TH_ENOMEM;
    if (scope == TH_DUPSCOPE_NAME_AND_ARGS)
        return th_msgpack_canonical(c->args, c->args_len, k);
    return 0;
}

int th_dup_register(th_mcall *c)
{
    th_host *h = c->h;
    th_dup_policy pol;
    th_dup_scope scope;
    policy_of(c, &pol, &scope);
    if (pol == TH_DUP_ALLOW)
        return 0;
    th_buf k = TH_BUF_INIT;
    if (dup_key(c, scope, &k) != 0) {
        th_buf_free(&k);
        th_mcall_abort(c, TH_ENOMEM, "out of memory checking for duplicates");
        return -1;
    }
    uint64_t hv = th_hash_bytes(k.data, k.len);
    size_t b = hv & (h->dup_nb - 1);
    th_mcall *victims[64];
    size_t nv = 0;
    char msg[1024];
    msg[0] = '\0';
    int refuse = 0;

    pthread_mutex_lock(&h->dmu);
    dup_node *n;
    for (n = h->dup_b[b]; n; n = n->next)
        if (n->hash == hv && n->len == k.len && memcmp(n->key, k.data, k.len) == 0)
            break;
    if (n && n->head) {
        if (pol == TH_DUP_REJECT || (pol == TH_DUP_CONFIRM && !c->confirm)) {
            int off = snprintf(msg, sizeof msg, "a call of %s with %s is still running:",
                               c->tool->name,
                               scope == TH_DUPSCOPE_NAME ? "any arguments" : "the same arguments");
            int64_t now = th_now_ns();
            int shown = 0;
            for (th_mcall *o = n->head; o && off < (int)sizeof msg - 120; o = o->dup_next) {
                if (shown++ == 5) {
                    off += snprintf(msg + off, sizeof msg - off, " ...");
                    break;
                }
                off += snprintf(msg + off, sizeof msg - off, " task_id %llu (running %.1f s)",
                                (unsigned long long)o->base.pub.call_id,
                                (double)(now - o->start_ns) / 1e9);
            }
            snprintf(msg + off, sizeof msg - off,
                     pol == TH_DUP_CONFIRM
                         ? ". Wait for it, cancel it with cancel_task(task_id), or call again with confirm_duplicate=true."
                         : ". Wait for it or cancel it with cancel_task(task_id).");
            refuse = TH_EDUPLICATE;
        } else if (pol == TH_DUP_REPLACE) {
            for (th_mcall *o = n->head; o; o = o->dup_next) {
                /* Another session's call that is not (yet) a shared task
                 * is not ours to cancel. */
                if (o->s != c->s && !atomic_load(&o->is_task)) {
                    snprintf(msg, sizeof msg,
                             "call %llu of %s cannot be replaced: it belongs to another session",
                             (unsigned long long)o->base.pub.call_id, c->tool->name);
                    refuse = TH_EDUPLICATE;
                    break;
                }
                if (nv < 64) {
                    th_mcall_ref(o);
                    victims[nv++] = o;
                }
            }
        }
    }
    if (!refuse) {
        if (!n && (n = calloc(1, sizeof *n))) {
            n->hash = hv;
            n->len = k.len;
            n->key = th_buf_take(&k, &n->len);
            n->next = h->dup_b[b];
            h->dup_b[b] = n;
        }
        if (!n) {
            refuse = TH_ENOMEM;
            snprintf(msg, sizeof msg, "out of memory checking for duplicates");
        } else {
            c->dup_prev = NULL;
            c->dup_next = n->head;
            if (n->head)
                n->head->dup_prev = c;
            n->head = c;
            c->dup_node = n;
            c->in_dup = true;
            th_mcall_ref(c);
        }
    }
    pthread_mutex_unlock(&h->dmu);
    th_buf_free(&k);
    if (refuse) {
        for (size_t i = 0; i < nv; i++)
            th_mcall_unref(victims[i]);
        th_mcall_abort(c, refuse, "%s", msg);
        return -1;
    }
    for (size_t i = 0; i < nv; i++) {
        th_mcall_abort(victims[i], TH_ECANCELLED,
                       "replaced by a newer call of %s (call %llu)", c->tool->name,
                       (unsigned long long)c->base.pub.call_id);
        th_mcall_unref(victims[i]);
    }
    return 0;
}

void th_dup_remove(th_mcall *c)
{
    th_host *h = c->h;
    pthread_mutex_lock(&h->dmu);
    if (!c->in_dup) {
        pthread_mutex_unlock(&h->dmu);
        return;
    }
    dup_node *n = c->dup_node;
    if (c->dup_prev)
        c->dup_prev->dup_next = c->dup_next;
    else
        n->head = c->dup_next;
    if (c->dup_next)
        c->dup_next->dup_prev = c->dup_prev;
    c->in_dup = false;
    c->dup_prev = c->dup_next = NULL;
    if (!n->head) {
        size_t b = n->hash & (h->dup_nb - 1);
        for (dup_node **pp = (dup_node **)&h->dup_b[b]; *pp; pp = &(*pp)->next)
            if (*pp == n) {
                *pp = n->next;
                break;
            }
        free(n->key);
        free(n);
    }
    pthread_mutex_unlock(&h->dmu);
    atomic_fetch_sub(&c->refs, 1); /* never the last: the caller holds one */
}

/* ---- Kept results --------------------------------------------------------- */

static void expire_locked(th_host *h)
{
    int64_t now = th_now_ns();
    while (h->kept_head && h->kept_head->expires_ns <= now) {
        th_kept *k = h->kept_head;
        h->kept_head = k->next;
        if (!h->kept_head)
            h->kept_tail = NULL;
        th_u64map_del(&h->kept, k->task_id);
        th_result_copy_free(&k->res);
        free(k);
    }
}

static int copy_result(th_result_copy *dst, const th_result_copy *src)
{
    th_result r;
    memset(&r, 0, sizeof r);
    r.kind = src->kind;
    r.ok = src->ok;
    r.out = src->out.data;
    r.out_len = src->out.len;
    r.err = src->err.data;
    r.err_len = src->err.len;
    r.meta = src->meta.data;
    r.meta_len = src->meta.len;
    r.error = src->error;
    r.message = src->message;
    r.task_id = src->task_id;
    return th_result_copy_from(dst, &r);
}

void th_tasks_keep_locked(th_host *h, uint64_t task_id, int ts_idx,
                          const th_result_copy *res)
{
    expire_locked(h);
    th_kept *k = calloc(1, sizeof *k);
    if (!k)
        return;
    if (copy_result(&k->res, res) != 0) {
        free(k);
        return;
    }
    k->task_id = task_id;
    k->ts_idx = ts_idx;
    th_config *cfg = th_host_config_get(h);
    k->expires_ns = th_now_ns() + (int64_t)cfg->host.result_ttl_ms * 1000000;
    th_config_unref(cfg);
    if (th_u64map_put(&h->kept, task_id, k) != 0) {
        th_result_copy_free(&k->res);
        free(k);
        return;
    }
    if (h->kept_tail)
        h->kept_tail->next = k;
    else
        h->kept_head = k;
    h->kept_tail = k;
}

void th_tasks_free(th_host *h)
{
    while (h->kept_head) {
        th_kept *k = h->kept_head;
        h->kept_head = k->next;
        th_result_copy_free(&k->res);
        free(k);
    }
    h->kept_tail = NULL;
    th_u64map_free(&h->kept);
    th_u64map_free(&h->tasks);
    if (h->dup_b)
        for (size_t b = 0; b < h->dup_nb; b++) {
            dup_node *n = h->dup_b[b];
            while (n) {
                dup_node *next = n->next;
                free(n->key);
                free(n);
                n = next;
            }
            h->dup_b[b] = NULL;
        }
}

int th_task_result(th_session *s, uint64_t task_id, th_result_copy *out)
{
    th_host *h = s->h;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&h->tmu);
    expire_locked(h);
    th_kept *k = th_u64map_get(&h->kept, task_id);
    int rc = TH_ENOTFOUND;
    if (k && k->ts_idx >= 0 && s->usable[k->ts_idx])
        rc = copy_result(out, &k->res);
    else if (th_u64map_get(&h->tasks, task_id))
        rc = TH_ESTATE;
    pthread_mutex_unlock(&h->tmu);
    if (rc == TH_ENOTFOUND) {
        pthread_mutex_lock(&s->mu);
        if (th_u64map_get(&s->calls, task_id))
            rc = TH_ESTATE;
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

/* ---- Listing ------------------------------------------------------------------ */

static void collect(uint64_t k, void *v, void *ud)
{
    (void)k;
    th_mcall ***pp = ud;
    th_mcall_ref(v);
    *(*pp)++ = v;
}

static int by_id(const void *a, const void *b)
{
    uint64_t x = (*(th_mcall *const *)a)->base.pub.call_id;
    uint64_t y = (*(th_mcall *const *)b)->base.pub.call_id;
    return x < y ? -1 : x > y;
}

int th_tasks_list(th_session *s, int (*fn)(const th_task_info *t, void *ud), void *ud)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->calls.n;
    th_mcall **v = calloc(n ? n : 1, sizeof *v), **p = v;
    if (v)
        th_u64map_each(&s->calls, collect, &p);
    pthread_mutex_unlock(&s->mu);
    if (!v)
        return TH_ENOMEM;
    n = (size_t)(p - v);
    qsort(v, n, sizeof *v, by_id);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        th_mcall *c = v[i];
        if (rc == 0) {
            pthread_mutex_lock(&c->mu);
            bool live = c->acked && !c->answered;
            th_task_info ti;
            memset(&ti, 0, sizeof ti);
            char *msg = NULL;
            if (live) {
                ti.task_id = c->base.pub.call_id;
                ti.session_id = s->id;
                ti.tool = c->tool->name;
                ti.args = c->args;
                ti.args_len = c->args_len;
                ti.started_ms = c->start_wall_ms;
                ti.last_update_ms = c->last_update_ms;
                msg = c->last_msg ? strdup(c->last_msg) : NULL;
                ti.message = msg;
                ti.fraction = c->last_frac;
                ti.scope = c->scope;
            }
            pthread_mutex_unlock(&c->mu);
            if (live)
                rc = fn(&ti, ud);
            free(msg);
        }
        th_mcall_unref(c);
    }
    free(v);
    return rc;
}

/* ---- The task tools ---------------------------------------------------------- */

static json_t *mp_to_json(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return json_null();
    case MSGPACK_OBJECT_BOOLEAN: return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return json_integer((json_int_t)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return json_integer((json_int_t)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return json_real(o->via.f64);
    case MSGPACK_OBJECT_STR: return json_stringn(o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_ARRAY: {
        json_t *a = json_array();
        for (uint32_t i = 0; a && i < o->via.array.size; i++)
            json_array_append_new(a, mp_to_json(&o->via.array.ptr[i]));
        return a;
    }
    case MSGPACK_OBJECT_MAP: {
        json_t *m = json_object();
        for (uint32_t i = 0; m && i < o->via.map.size; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            if (k->type != MSGPACK_OBJECT_STR)
                continue;
            char key[256];
            size_t kl = k->via.str.size < 255 ? k->via.str.size : 255;
            memcpy(key, k->via.str.ptr, kl);
            key[kl] = '\0';
            json_object_set_new(m, key, mp_to_json(&o->via.map.ptr[i].val));
        }
        return m;
    }
    default: return json_null();
    }
}

static void iso_time(int64_t ms, char *buf, size_t n)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t k = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + k, n - k, ".%03dZ", (int)(ms % 1000));
}

static int list_one(const th_task_info *t, void *ud)
{
    json_t *arr = ud;
    json_t *o = json_object();
    if (!o)
        return TH_ENOMEM;
    char a[40], b[40];
    iso_time(t->started_ms, a, sizeof a);
    iso_time(t->last_update_ms, b, sizeof b);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    json_t *args = msgpack_unpack_next(&u, (const char *)t->args, t->args_len, &off) ==
                           MSGPACK_UNPACK_SUCCESS
                       ? mp_to_json(&u.data)
                       : json_null();
    msgpack_unpacked_destroy(&u);
    json_object_set_new(o, "task_id", json_integer((json_int_t)t->task_id));
    json_object_set_new(o, "tool", json_string(t->tool));
    json_object_set_new(o, "arguments", args);
    json_object_set_new(o, "started_at", json_string(a));
    json_object_set_new(o, "last_update", json_string(b));
    if (t->message)
        json_object_set_new(o, "message", json_string(t->message));
    if (t->fraction >= 0)
        json_object_set_new(o, "progress", json_real(t->fraction));
    json_array_append_new(arr, o);
    return 0;
}

static int exec_list(void *state, const toolhost_tool *tool, toolhost_call *call,
                     const uint8_t *args, size_t len)
{
    (void)state;
    (void)tool;
    (void)args;
    (void)len;
    th_session *s = th_call_session(call);
    json_t *arr = json_array();
    if (!s || !arr) {
        json_decref(arr);
        return TOOLHOST_FAILED;
    }
    th_tasks_list(s, list_one, arr);
    char *text = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    if (!text)
        return TOOLHOST_FAILED;
    call->host->write(call, TOOLHOST_STDOUT, text, strlen(text));
    free(text);
    return TOOLHOST_OK;
}

static int exec_cancel(void *state, const toolhost_tool *tool, toolhost_call *call,
                       const uint8_t *args, size_t len)
{
    (void)state;
    (void)tool;
    th_session *s = th_call_session(call);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int64_t id = -1;
    if (msgpack_unpack_next(&u, (const char *)args, len, &off) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP)
        for (uint32_t i = 0; i < u.data.via.map.size; i++) {
            const msgpack_object_kv *kv = &u.data.via.map.ptr[i];
            if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == 7 &&
                memcmp(kv->key.via.str.ptr, "task_id", 7) == 0) {
                if (kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                    id = (int64_t)kv->val.via.u64;
            }
        }
    msgpack_unpacked_destroy(&u);
    char msg[256];
    int rc = s && id > 0 ? th_call_cancel(s, (uint64_t)id) : TH_ENOTFOUND;
    if (rc != 0) {
        snprintf(msg, sizeof msg,
                 "no running task %lld: it is unknown or already finished (get_running_tasks lists the running ones)",
                 (long long)id);
        th_mcall_set_error(call, TH_ENOTFOUND, msg);
        return TOOLHOST_FAILED;
    }
    int n = snprintf(msg, sizeof msg, "task %lld cancelled", (long long)id);
    call->host->write(call, TOOLHOST_STDOUT, msg, (size_t)n);
    return TOOLHOST_OK;
}

static const toolhost_param cancel_params[] = {
    {.struct_size = sizeof(toolhost_param),
     .name = "task_id",
     .type = TOOLHOST_TYPE_INTEGER,
     .required = 1,
     .description = "The task_id of a running task (from get_running_tasks or the call's answer)."},
};

static const toolhost_tool task_tools[] = {
    {.struct_size = sizeof(toolhost_tool),
     .name = "cancel_task",
     .description = "Cancel a running background task by its task_id.",
     .long_description = "Cancels a task that a long-running tool started. The task stops "
                         "soon after; its final answer says it was cancelled.",
     .params = cancel_params,
     .n_params = 1,
     .stdout_type = TOOLHOST_SEM_STATUS,
     .stderr_type = TOOLHOST_SEM_ERROR,
     .flags = TOOLHOST_TOOL_IDEMPOTENT,
     .execute = exec_cancel},
    {.struct_size = sizeof(toolhost_tool),
     .name = "get_running_tasks",
     .description = "List this session's running background tasks (task_id, tool, "
                    "arguments, started_at, last_update).",
     .stdout_type = TOOLHOST_SEM_STRUCTURED,
     .stderr_type = TOOLHOST_SEM_ERROR,
     .flags = TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT,
     .execute = exec_list},
};

const toolhost_plugin th_task_tools_plugin = {
    .struct_size = sizeof(toolhost_plugin),
    .abi_major = TOOLHOST_ABI_MAJOR,
    .abi_minor = TOOLHOST_ABI_MINOR,
    .name = "toolhost-tasks",
    .version = TOOLHOST_VERSION,
    .description = "The host's task tools.",
    .tools = task_tools,
    .n_tools = 2,
};
