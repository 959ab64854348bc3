/* nats.c - the NATS front: the toolsets of nats.toolsets served on
 * <prefix>.<toolset>.<tool> in the queue group "toolhost", and the service
 * discovery subjects $SRV.{PING,INFO,STATS} (docs/scale.md).
 *
 * Threads: the NATS client library delivers every subscription's messages
 * on its shared delivery threads (UseGlobalMessageDelivery); a request
 * starts a call (th_call_start, never blocking) and the call's events,
 * on the manager's threads, publish the replies.  Publishing is safe from
 * any thread.  `mu` guards `active` (handlers running), `calls` and
 * `live_calls` (calls not yet answered), `subs_open` and `closed`;
 * th_nats_stop() waits for all of them to drain.  `eps_mu` guards the
 * endpoint set, which a reload changes (on_tools_changed, on the
 * reloader's thread).  Also here: `ask` rules answered by the caller
 * (on_ask, on_permit), and finished async results in a JetStream
 * key-value bucket (kv_*), read by <prefix>.tasks.result on any host.
 * Lock order: eps_mu, then mu; start_mu, then mu; kv_mu alone; slow_mu,
 * then eps_mu only tried. */
#include <inttypes.h>
#include <jansson.h>
#include <msgpack.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "front/nats.h"
#include "th/codec.h"
#include "th/log.h"
#include "th/tool.h"

#define QUEUE "toolhost"

typedef struct nt_ts {
    struct th_nats *f;
    const th_toolset_cfg *cfg;
    th_session *s;
} nt_ts;

typedef struct nt_ep {
    struct th_nats *f;
    char *subject;
    char *tool;
    uint32_t flags; /* TOOLHOST_TOOL_* of the tool when subscribed */
    char *param_types; /* {"name": "type", ...} as JSON text, or NULL */
    nt_ts *ts;
    natsSubscription *sub;
    bool live; /* subscribed now (a reload may have removed the tool) */
    atomic_uint_fast64_t requests, errors, proc_ns;
    /* errors by code (index -TH_E*, 0 for any other): $SRV.STATS reports
     * counts only, never an error's text - that is another caller's
     * business and may name a path */
#define NT_ERR_CODES 32
    atomic_uint_fast64_t err_by_code[NT_ERR_CODES];
} nt_ep;

struct th_nats {
    th_host *h;
    th_config *cfg_ref; /* our reference: a reload swaps the host's
                           config, the endpoints keep the one they began
                           with (names, toolsets, credentials) */
    const th_config *cfg;
    const th_nats_cfg *nc_cfg;
    natsOptions *opts;
    natsConnection *nc;
    nt_ts *ts;
    size_t n_ts;
    /* Every endpoint ever served, live or removed by a reload (a call in
     * flight may still count on a removed one; they are freed at stop).
     * eps_mu guards the array and the endpoints' subscriptions, flags and
     * param_types; it is held across a whole resync (start or reload). */
    pthread_mutex_t eps_mu;
    nt_ep **eps;
    size_t n_eps, cap_eps;
    natsSubscription *srv[16];
    size_t n_srv;
    char id[40];
    char started[40];
    /* Finished results of async tasks in a JetStream key-value bucket
     * (nats.results_bucket), keyed HOSTID.TASKID, so that any host answers
     * <prefix>.tasks.result after the task's host has gone.  Opened at
     * the first connect (or lazily); kv_state: 0 not tried yet, 1 open,
     * -1 not available (said once in the log) or off. */
    pthread_mutex_t kv_mu;
    jsCtx *js;
    kvStore *kv;
    int kv_state;
    const char *kv_bucket;
    uint64_t kv_ttl_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;
    bool closed; /* the connection's last callback ran (on_closed) */
    size_t subs_open; /* subscriptions whose on_sub_done has not run */
    size_t active; /* handlers running */
    size_t calls;  /* calls not yet answered */
    struct nt_call *live_calls; /* those calls, for `ask` answers (under mu) */
    pthread_mutex_t start_mu; /* held across th_call_start + its id */
    /* slow consumer lines, at most one a second (slow_note) */
    pthread_mutex_t slow_mu;
    struct timespec slow_last;
    bool slow_logged;
    uint64_t slow_events;      /* callbacks since the last line */
    int64_t slow_dropped_seen; /* the endpoints' drop total at that line */
};

/* The call being started on this thread (th_call_start may ask for
 * permission before it returns the call's id). */
static _Thread_local struct nt_call *tl_starting;

typedef struct nt_call {
    th_nats *f;
    nt_ep *ep;
    char *reply;
    struct timespec t0;
    bool acked;
    /* `ask` rules (docs/scale.md): the caller said it answers asks
     * (Toolhost-Ask: 1); while one is open, `nonce` names it */
    bool can_ask, asking;
    uint64_t id; /* the core's call id, once known (under f->mu) */
    char nonce[17];
    struct nt_call *prev, *next; /* f->live_calls, under f->mu */
} nt_call;

static int64_t ns_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)(t.tv_sec - t0->tv_sec) * 1000000000 +
           (t.tv_nsec - t0->tv_nsec);
}

/* Subject-safe tool names only: a '.', '*', '>' or space would change the
 * subject's meaning. */
static bool token_ok(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s == '.' || *s == '*' || *s == '>' || *s == ' ' ||
            (unsigned char)*s < 0x21 || (unsigned char)*s > 0x7e)
            return false;
    return true;
}

/* ---- Finished results in JetStream KV ----------------------------------- */

static void kv_init_cfg(th_nats *f)
{
    pthread_mutex_init(&f->kv_mu, NULL);
    const char *b = f->nc_cfg->results_bucket;
    f->kv_ttl_ms = f->nc_cfg->results_ttl_ms ? f->nc_cfg->results_ttl_ms
                                             : f->cfg->host.result_ttl_ms;
    if (!b || strcmp(b, "off") == 0 || f->kv_ttl_ms == 0) {
        f->kv_state = -1; /* off: results stay on their host */
        return;
    }
    f->kv_bucket = b;
}

/* Whether the account has JetStream: $JS.API.INFO on an inbox of our own
 * (a late answer to the library's shared request inbox would be leaked
 * by it), within 1 s.  NULL, or why not (into why). */
static const char *js_probe(th_nats *f, char *why, size_t why_n)
{
    natsInbox *ib = NULL;
    natsSubscription *sub = NULL;
    natsMsg *m = NULL;
    const char *res = why;
    snprintf(why, why_n, "no answer to $JS.API.INFO within 1 s");
    if (natsInbox_Create(&ib) != NATS_OK ||
        natsConnection_SubscribeSync(&sub, f->nc, ib) != NATS_OK ||
        natsConnection_PublishRequest(f->nc, "$JS.API.INFO", ib, NULL, 0) !=
            NATS_OK ||
        natsSubscription_NextMsg(&m, sub, 1000) != NATS_OK)
        goto out;
    const char *status = NULL;
    if (natsMsgHeader_Get(m, "Status", &status) == NATS_OK && status) {
        snprintf(why, why_n, "$JS.API.INFO: status %s (no JetStream)",
                 status);
        goto out;
    }
    json_t *j = json_loadb(natsMsg_GetData(m),
                           (size_t)natsMsg_GetDataLength(m), 0, NULL);
    json_t *e = json_object_get(j, "error");
    if (e)
        snprintf(why, why_n, "%s",
                 json_string_value(json_object_get(e, "description"))
                     ? json_string_value(json_object_get(e, "description"))
                     : "JetStream error");
    else if (j)
        res = NULL;
    json_decref(j);
out:
    natsMsg_Destroy(m);
    natsSubscription_Destroy(sub);
    natsInbox_Destroy(ib);
    return res;
}

/* Opens (or creates) the bucket once the connection is up; 1 when it is
 * usable.  Blocks for a JetStream round trip the first time only. */
static int kv_open(th_nats *f)
{
    pthread_mutex_lock(&f->kv_mu);
    if (f->kv_state != 0 ||
        natsConnection_Status(f->nc) != NATS_CONN_STATUS_CONNECTED) {
        int v = f->kv_state;
        pthread_mutex_unlock(&f->kv_mu);
        return v;
    }
    char why[256];
    if (js_probe(f, why, sizeof why)) {
        f->kv_state = -1;
        th_log_warn("nats: JetStream key-value bucket %s is not available "
                    "(%s): finished task results stay on the host that ran "
                    "them (is the NATS server started with JetStream, -js?)",
                    f->kv_bucket, why);
        pthread_mutex_unlock(&f->kv_mu);
        return -1;
    }
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = 2000;
    natsStatus st = natsConnection_JetStream(&f->js, f->nc, &jo);
    if (st == NATS_OK)
        st = js_KeyValue(&f->kv, f->js, f->kv_bucket);
    if (st == NATS_NOT_FOUND) {
        kvConfig kc;
        kvConfig_Init(&kc);
        kc.Bucket = f->kv_bucket;
        kc.Description = "toolhost: finished task results (HOSTID.TASKID)";
        kc.History = 1;
        kc.TTL = (int64_t)f->kv_ttl_ms * 1000000; /* ns, as max_age */
        st = js_CreateKeyValue(&f->kv, f->js, &kc);
        if (st != NATS_OK) /* another host created it meanwhile */
            st = js_KeyValue(&f->kv, f->js, f->kv_bucket);
    }
    kvStatus *ks = NULL;
    if (st == NATS_OK && kvStore_Status(&ks, f->kv) == NATS_OK &&
        kvStatus_TTL(ks) != (int64_t)f->kv_ttl_ms * 1000000)
        th_log_warn("nats: the key-value bucket %s keeps results %" PRId64
                    " s, not the %" PRIu64 " s of this host's config (the "
                    "host that created it set it; give every host the same "
                    "nats.results_ttl)",
                    f->kv_bucket, kvStatus_TTL(ks) / 1000000000,
                    f->kv_ttl_ms / 1000);
    kvStatus_Destroy(ks);
    if (st == NATS_OK) {
        f->kv_state = 1;
        th_log_info("nats: finished task results go to the JetStream "
                    "key-value bucket %s (TTL %" PRIu64 " s)",
                    f->kv_bucket, f->kv_ttl_ms / 1000);
    } else {
        natsStatus ls = st;
        const char *why = nats_GetLastError(&ls);
        f->kv_state = -1;
        th_log_warn("nats: JetStream key-value bucket %s is not available "
                    "(%s%s%s): finished task results stay on the host that "
                    "ran them (is the NATS server started with JetStream, "
                    "-js?)",
                    f->kv_bucket, natsStatus_GetText(st),
                    why && *why ? ": " : "", why && *why ? why : "");
        kvStore_Destroy(f->kv);
        f->kv = NULL;
        jsCtx_Destroy(f->js);
        f->js = NULL;
    }
    pthread_mutex_unlock(&f->kv_mu);
    return f->kv_state;
}

static void kv_close(th_nats *f)
{
    kvStore_Destroy(f->kv);
    jsCtx_Destroy(f->js);
    pthread_mutex_destroy(&f->kv_mu);
}

/* Stores a finished task's result (its reply body) under HOSTID.TASKID
 * before the caller is told, so a caller that has the result can count on
 * the bucket having it.  A failure is logged; the reply still goes. */
static void kv_put(th_nats *f, uint64_t task_id, const void *data,
                   size_t len)
{
    if (kv_open(f) != 1)
        return;
    char key[80];
    snprintf(key, sizeof key, "%s.%" PRIu64, f->id, task_id);
    uint64_t rev = 0;
    natsStatus st = kvStore_Put(&rev, f->kv, key, data, (int)len);
    if (st != NATS_OK)
        th_log_warn("nats: the result of task %s was not stored in %s: %s",
                    key, f->kv_bucket, natsStatus_GetText(st));
}

/* The stored result of task `key` (HOSTID.TASKID) into b: 0, TH_ENOTFOUND,
 * or TH_EIO (no bucket, or JetStream did not answer). */
static int kv_get(th_nats *f, const char *key, th_buf *b)
{
    if (kv_open(f) != 1)
        return TH_ENOTFOUND;
    kvEntry *e = NULL;
    natsStatus st = kvStore_Get(&e, f->kv, key);
    if (st == NATS_NOT_FOUND)
        return TH_ENOTFOUND;
    if (st != NATS_OK) {
        th_log_warn("nats: reading task %s from %s: %s", key, f->kv_bucket,
                    natsStatus_GetText(st));
        return TH_EIO;
    }
    int rc = th_buf_append(b, kvEntry_Value(e), (size_t)kvEntry_ValueLen(e));
    kvEntry_Destroy(e);
    return rc == 0 ? 0 : TH_ENOMEM;
}

/* ---- Replies ------------------------------------------------------------ */

static void publish(th_nats *f, const char *subj, const char *kind,
                    uint64_t task_id, const void *data, size_t len)
{
    natsMsg *m = NULL;
    natsStatus st = natsMsg_Create(&m, subj, NULL, data, (int)len);
    if (st == NATS_OK)
        st = natsMsgHeader_Set(m, TH_NATS_H_KIND, kind);
    if (st == NATS_OK)
        st = natsMsgHeader_Set(m, TH_NATS_H_HOST, f->id);
    if (st == NATS_OK && task_id) {
        char t[80];
        snprintf(t, sizeof t, "%s.%" PRIu64, f->id, task_id);
        st = natsMsgHeader_Set(m, TH_NATS_H_TASK, t);
    }
    if (st == NATS_OK)
        st = natsConnection_PublishMsg(f->nc, m);
    if (st != NATS_OK)
        th_log_warn("nats: reply to %s lost: %s", subj,
                    natsStatus_GetText(st));
    natsMsg_Destroy(m);
}

/* A reply in the RPC front's result form; `store`: a finished async
 * task's result, also written to the results bucket first. */
static void publish_result_ex(th_nats *f, const char *subj, const char *kind,
                              const th_result *res, bool store)
{
    th_result_copy rc;
    memset(&rc, 0, sizeof rc);
    th_buf b = TH_BUF_INIT;
    if (th_result_copy_from(&rc, res) != 0 ||
        th_codec_result_to_buf(&b, &rc) != 0) {
        th_log_error("nats: out of memory packing a reply to %s", subj);
    } else {
        if (store && res->task_id)
            kv_put(f, res->task_id, b.data, b.len);
        publish(f, subj, kind, res->task_id, b.data, b.len);
    }
    th_buf_destroy(&b);
    th_result_copy_destroy(&rc);
}

static void publish_result(th_nats *f, const char *subj, const char *kind,
                           const th_result *res)
{
    publish_result_ex(f, subj, kind, res, false);
}

static void publish_error(th_nats *f, const char *subj, int code,
                          const char *msg)
{
    th_result r;
    memset(&r, 0, sizeof r);
    r.kind = TH_RESULT_ERROR;
    r.error = code;
    r.message = msg;
    publish_result(f, subj, "result", &r);
}

static void call_end(nt_call *c)
{
    th_nats *f = c->f;
    pthread_mutex_lock(&f->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        f->live_calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    f->calls--;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    free(c->reply);
    free(c);
}

static void count_error(nt_ep *ep, int code)
{
    atomic_fetch_add(&ep->errors, 1);
    int k = code < 0 && code > -NT_ERR_CODES ? -code : 0;
    atomic_fetch_add(&ep->err_by_code[k], 1);
}

static void count(nt_call *c, const th_result *r)
{
    nt_ep *ep = c->ep;
    atomic_fetch_add(&ep->proc_ns, (uint64_t)ns_since(&c->t0));
    if (r->kind == TH_RESULT_ERROR) {
        count_error(ep, r->error);
    }
}

static void on_event(const th_event *ev, void *ud)
{
    nt_call *c = ud;
    th_nats *f = c->f;
    switch (ev->kind) {
    case TH_EV_RESULT:
        if (ev->result->kind == TH_RESULT_RUNNING) {
            c->acked = true;
            publish_result(f, c->reply, "ack", ev->result);
            return;
        }
        count(c, ev->result);
        publish_result_ex(f, c->reply, "result", ev->result, c->acked);
        call_end(c);
        return;
    case TH_EV_PROGRESS: {
        th_progress p;
        memset(&p, 0, sizeof p);
        p.task_id = ev->task_id;
        p.message = ev->message;
        p.fraction = ev->fraction;
        p.data = ev->data;
        p.data_len = ev->data_len;
        p.coalesced = ev->coalesced;
        th_buf b = TH_BUF_INIT;
        msgpack_packer pk;
        msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
        if (th_codec_pack_progress(&pk, &p) == 0)
            publish(f, c->reply, "progress", ev->task_id, b.data, b.len);
        th_buf_destroy(&b);
        return;
    }
    case TH_EV_DONE:
        count(c, ev->result);
        publish_result_ex(f, c->reply, "result", ev->result, c->acked);
        call_end(c);
        return;
    }
}

/* ---- Requests ----------------------------------------------------------- */

static bool handler_enter(th_nats *f)
{
    pthread_mutex_lock(&f->mu);
    bool ok = !f->stopping;
    if (ok)
        f->active++;
    pthread_mutex_unlock(&f->mu);
    return ok;
}

static void handler_leave(th_nats *f)
{
    pthread_mutex_lock(&f->mu);
    f->active--;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void on_request(natsConnection *nc, natsSubscription *sub,
                       natsMsg *msg, void *closure)
{
    (void)nc;
    (void)sub;
    nt_ep *ep = closure;
    th_nats *f = ep->f;
    const char *reply = natsMsg_GetReply(msg);
    if (!reply || !*reply) {
        th_log_debug("nats: a request on %s without a reply subject: "
                     "ignored", ep->subject);
        natsMsg_Destroy(msg);
        return;
    }
    if (!handler_enter(f)) {
        /* stopping: a request the server delivered before it saw our
         * unsubscribe (th_nats_stop drains) is answered, never dropped */
        publish_error(f, reply, TH_ECANCELLED,
                      "the host is stopping: the call was not started");
        natsMsg_Destroy(msg);
        return;
    }
    atomic_fetch_add(&ep->requests, 1);
    th_call_opts o;
    memset(&o, 0, sizeof o);
    const char *v = NULL;
    /* the caller's absolute deadline (Unix ms): a request that waited past
     * it (in the server, the socket, a stopped or busy host) is not
     * started - its caller has given up - and the rest of the time left
     * bounds the call, its wait for a worker included */
    int64_t left_ms = 0;
    if (natsMsgHeader_Get(msg, TH_NATS_H_DEADLINE, &v) == NATS_OK && v) {
        char *end;
        long long dl = strtoll(v, &end, 10);
        if (*end || dl <= 0 || end == v) {
            publish_error(f, reply, TH_EINVAL, "Toolhost-Deadline must be a "
                          "Unix time in milliseconds");
            count_error(ep, TH_EINVAL);
            goto out;
        }
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        left_ms = dl - ((int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000);
        if (left_ms <= 0) {
            char why[160];
            snprintf(why, sizeof why, "the caller's deadline had passed "
                     "(%lld ms ago) when this host took the call: not "
                     "started", (long long)-left_ms);
            publish_error(f, reply, TH_ETIMEOUT, why);
            count_error(ep, TH_ETIMEOUT);
            th_log_info("nats: %s: a request past its caller's deadline "
                        "(%lld ms): not started", ep->subject,
                        (long long)-left_ms);
            goto out;
        }
    }
    if (natsMsgHeader_Get(msg, TH_NATS_H_TIMEOUT, &v) == NATS_OK && v) {
        char *end;
        long long ms = strtoll(v, &end, 10);
        if (*end || ms < 0) {
            publish_error(f, reply, TH_EINVAL, "Toolhost-Timeout-Ms must "
                          "be a number of milliseconds");
            count_error(ep, TH_EINVAL);
            goto out;
        }
        o.timeout_ms = ms;
    }
    if (left_ms > 0 && (o.timeout_ms <= 0 || o.timeout_ms > left_ms))
        o.timeout_ms = left_ms;
    if (natsMsgHeader_Get(msg, TH_NATS_H_PROGRESS, &v) == NATS_OK && v &&
        strcmp(v, "0") == 0)
        o.no_progress = true;
    if (natsMsgHeader_Get(msg, TH_NATS_H_OUTPUT_INFO, &v) == NATS_OK && v &&
        strcmp(v, "1") == 0)
        o.output_info = true;
    /* W3C trace context for the audit log; msg outlives th_call_start */
    if (natsMsgHeader_Get(msg, "traceparent", &v) == NATS_OK && v)
        o.traceparent = v;
    bool can_ask = natsMsgHeader_Get(msg, TH_NATS_H_ASK, &v) == NATS_OK &&
                   v && strcmp(v, "1") == 0;
    nt_call *c = calloc(1, sizeof *c);
    if (!c || !(c->reply = strdup(reply))) {
        free(c);
        publish_error(f, reply, TH_ENOMEM, "out of memory");
        goto out;
    }
    c->f = f;
    c->ep = ep;
    c->can_ask = can_ask;
    clock_gettime(CLOCK_MONOTONIC, &c->t0);
    pthread_mutex_lock(&f->mu);
    f->calls++;
    c->next = f->live_calls;
    if (c->next)
        c->next->prev = c;
    f->live_calls = c;
    pthread_mutex_unlock(&f->mu);
    const uint8_t *data = (const uint8_t *)natsMsg_GetData(msg);
    size_t len = (size_t)natsMsg_GetDataLength(msg);
    static const uint8_t empty_map = 0x80;
    if (!len) { /* no body: no arguments */
        data = &empty_map;
        len = 1;
    }
    uint64_t id = 0;
    /* an ask from a pool worker waits on start_mu until the id is known;
     * one from this thread finds the call through tl_starting */
    pthread_mutex_lock(&f->start_mu);
    tl_starting = c;
    int started = th_call_start(ep->ts->s, ep->tool, data, len, &o, on_event,
                                c, &id);
    tl_starting = NULL;
    if (started == 0) {
        pthread_mutex_lock(&f->mu);
        /* c may have ended already (a quick call answered inline): reach
         * it only through the list */
        for (nt_call *x = f->live_calls; x; x = x->next)
            if (x == c) { /* at the head, but for a concurrent start */
                x->id = id;
                break;
            }
        pthread_mutex_unlock(&f->mu);
    }
    pthread_mutex_unlock(&f->start_mu);
    if (started != 0) {
        publish_error(f, reply, TH_EBUSY, "the host is stopping");
        call_end(c);
    }
out:
    natsMsg_Destroy(msg);
    handler_leave(f);
}

/* ---- `ask` rules ------------------------------------------------------- */

/* th_front_ops.ask_permission of a toolset's session.  A caller that sent
 * Toolhost-Ask: 1 gets an `ask` message on its reply subject - body
 * {call_id, tool, reason, arguments}, NATS reply subject
 * <prefix>.host.<id>.permit.<call_id>.<nonce> - and answers there with
 * "allow" or "deny" (host.permission_timeout: deny).  Any other caller
 * cannot answer: the call is denied, as before. */
static int on_ask(void *ud, uint64_t call_id, const char *tool,
                  const uint8_t *args, size_t args_len, const char *reason)
{
    nt_ts *ts = ud;
    th_nats *f = ts->f;
    nt_call *c = tl_starting;
    if (c && c->f != f)
        c = NULL;
    if (!c) { /* a pool worker: wait until the call's id is known */
        pthread_mutex_lock(&f->start_mu);
        pthread_mutex_unlock(&f->start_mu);
    }
    pthread_mutex_lock(&f->mu);
    if (c) {
        c->id = call_id;
    } else {
        for (c = f->live_calls; c && c->id != call_id; c = c->next)
            ;
    }
    bool can = c && c->can_ask && !c->asking;
    char reply[256] = "", permit[300] = "";
    if (can) {
        uint8_t rnd[8];
        FILE *u = fopen("/dev/urandom", "rb");
        if (!u || fread(rnd, 1, sizeof rnd, u) != sizeof rnd)
            can = false; /* no unguessable name: do not ask */
        if (u)
            fclose(u);
        for (size_t i = 0; can && i < sizeof rnd; i++)
            snprintf(c->nonce + 2 * i, 3, "%02x", rnd[i]);
        c->asking = can;
        snprintf(reply, sizeof reply, "%s", c->reply);
        snprintf(permit, sizeof permit, "%s.host.%s.permit.%" PRIu64 ".%s",
                 f->nc_cfg->prefix, f->id, call_id, c->nonce);
    }
    pthread_mutex_unlock(&f->mu);
    if (!can) {
        th_log_info("nats: %s (call %" PRIu64 ") needs an answer to `ask`; "
                    "the caller did not offer one (header %s: 1): denied",
                    tool, call_id, TH_NATS_H_ASK);
        return 1;
    }
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    int e = msgpack_pack_map(&pk, 4);
    e |= th_pack_cstr(&pk, "call_id");
    e |= msgpack_pack_uint64(&pk, call_id);
    e |= th_pack_cstr(&pk, "tool");
    e |= th_pack_cstr(&pk, tool);
    e |= th_pack_cstr(&pk, "reason");
    e |= th_pack_cstr(&pk, reason ? reason : "");
    e |= th_pack_cstr(&pk, "arguments");
    if (args && args_len)
        e |= th_buf_append(&b, args, args_len);
    else
        e |= msgpack_pack_map(&pk, 0);
    natsMsg *m = NULL;
    natsStatus st = e ? NATS_NO_MEMORY
                      : natsMsg_Create(&m, reply, permit, (const char *)b.data,
                                       (int)b.len);
    if (st == NATS_OK)
        st = natsMsgHeader_Set(m, TH_NATS_H_KIND, "ask");
    if (st == NATS_OK)
        st = natsMsgHeader_Set(m, TH_NATS_H_HOST, f->id);
    if (st == NATS_OK)
        st = natsConnection_PublishMsg(f->nc, m);
    natsMsg_Destroy(m);
    th_buf_destroy(&b);
    if (st != NATS_OK) {
        th_log_warn("nats: asking the caller about %s failed: %s", tool,
                    natsStatus_GetText(st));
        return 1;
    }
    return 0;
}

/* <prefix>.host.<id>.permit.<call_id>.<nonce>: a caller's answer. */
static void on_permit(natsConnection *nc, natsSubscription *sub,
                      natsMsg *msg, void *closure)
{
    (void)nc;
    (void)sub;
    th_nats *f = closure;
    if (!handler_enter(f)) {
        natsMsg_Destroy(msg);
        return;
    }
    const char *subj = natsMsg_GetSubject(msg);
    const char *reply = natsMsg_GetReply(msg);
    const char *nonce = strrchr(subj, '.');
    const char *p = nonce;
    while (p && p > subj && p[-1] != '.')
        p--;
    uint64_t id = p ? strtoull(p, NULL, 10) : 0;
    char body[16] = "";
    int len = natsMsg_GetDataLength(msg);
    if (len > 0 && len < (int)sizeof body)
        memcpy(body, natsMsg_GetData(msg), (size_t)len);
    bool allow = strcmp(body, "allow") == 0;
    bool valid = allow || strcmp(body, "deny") == 0;
    th_session *s = NULL;
    pthread_mutex_lock(&f->mu);
    nt_call *c = f->live_calls;
    for (; c && !(c->id == id && c->asking && nonce &&
                  strcmp(c->nonce, nonce + 1) == 0);
         c = c->next)
        ;
    if (c && valid) {
        c->asking = false;
        s = c->ep->ts->s;
    }
    pthread_mutex_unlock(&f->mu);
    int rc = !valid ? TH_EINVAL
             : !s   ? TH_ENOTFOUND
                    : th_permission_answer(s, id, allow);
    if (reply && *reply) {
        if (rc == 0) {
            static const uint8_t ok[] = {0x81, 0xa2, 'o', 'k', 0xc3};
            publish(f, reply, "permit", 0, ok, sizeof ok);
        } else {
            publish_error(f, reply, rc,
                          rc == TH_EINVAL ? "the body must be allow or deny"
                                          : "no call waits for this answer "
                                            "(answered, timed out or ended)");
        }
    }
    natsMsg_Destroy(msg);
    handler_leave(f);
}

/* ---- Discovery ($SRV) --------------------------------------------------- */

static json_t *srv_base(th_nats *f, const char *type)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "name", json_string(f->nc_cfg->name));
    json_object_set_new(o, "id", json_string(f->id));
    json_object_set_new(o, "version", json_string(TOOLHOST_VERSION));
    json_t *md = json_object();
    json_object_set_new(md, "prefix", json_string(f->nc_cfg->prefix));
    json_object_set_new(o, "metadata", md);
    return o;
}

static json_t *srv_endpoint(nt_ep *ep, bool stats)
{
    json_t *e = json_object();
    if (!e)
        return NULL;
    json_object_set_new(e, "name", json_string(ep->tool));
    json_object_set_new(e, "subject", json_string(ep->subject));
    json_object_set_new(e, "queue_group", json_string(QUEUE));
    if (!stats) {
        json_t *md = json_object();
        json_object_set_new(md, "toolset", json_string(ep->ts->cfg->name));
        json_object_set_new(md, "tool", json_string(ep->tool));
        json_object_set_new(
            md, "idempotent",
            json_string(ep->flags & (TOOLHOST_TOOL_IDEMPOTENT |
                                     TOOLHOST_TOOL_READ_ONLY)
                            ? "true"
                            : "false"));
        if (ep->param_types)
            json_object_set_new(md, "param_types",
                                json_string(ep->param_types));
        json_object_set_new(md, "async",
                            json_string(ep->flags & TOOLHOST_TOOL_ASYNC
                                            ? "true"
                                            : "false"));
        json_object_set_new(e, "metadata", md);
        return e;
    }
    uint64_t n = atomic_load(&ep->requests), ne = atomic_load(&ep->errors);
    uint64_t ns = atomic_load(&ep->proc_ns);
    json_object_set_new(e, "num_requests", json_integer((json_int_t)n));
    json_object_set_new(e, "num_errors", json_integer((json_int_t)ne));
    /* the micro protocol's last_error stays empty: other callers' error
     * texts are not ours to show; data.errors counts them by code */
    json_object_set_new(e, "last_error", json_string(""));
    json_t *by = json_object();
    for (int k = 0; by && k < NT_ERR_CODES; k++) {
        uint64_t v = atomic_load(&ep->err_by_code[k]);
        const char *name = k ? th_err_name(-k) : "other";
        if (v) /* codes sharing a name add up */
            json_object_set_new(
                by, name,
                json_integer(json_integer_value(json_object_get(by, name)) +
                             (json_int_t)v));
    }
    json_t *data = json_object();
    if (data && by)
        json_object_set_new(data, "errors", by);
    else
        json_decref(by);
    json_object_set_new(e, "data", data);
    json_object_set_new(e, "processing_time", json_integer((json_int_t)ns));
    json_object_set_new(e, "average_processing_time",
                        json_integer(n ? (json_int_t)(ns / n) : 0));
    return e;
}

static void on_srv(natsConnection *nc, natsSubscription *sub, natsMsg *msg,
                   void *closure)
{
    (void)sub;
    th_nats *f = closure;
    const char *subj = natsMsg_GetSubject(msg);
    const char *reply = natsMsg_GetReply(msg);
    if (!reply || !*reply || !handler_enter(f)) {
        natsMsg_Destroy(msg);
        return;
    }
    json_t *o = NULL;
    if (strncmp(subj, "$SRV.PING", 9) == 0) {
        o = srv_base(f, "io.nats.micro.v1.ping_response");
    } else {
        bool stats = strncmp(subj, "$SRV.STATS", 10) == 0;
        o = srv_base(f, stats ? "io.nats.micro.v1.stats_response"
                              : "io.nats.micro.v1.info_response");
        json_t *eps = json_array();
        pthread_mutex_lock(&f->eps_mu);
        for (size_t i = 0; o && eps && i < f->n_eps; i++)
            if (f->eps[i]->live)
                json_array_append_new(eps, srv_endpoint(f->eps[i], stats));
        pthread_mutex_unlock(&f->eps_mu);
        if (o) {
            json_object_set_new(o, "endpoints", eps);
            if (stats)
                json_object_set_new(o, "started", json_string(f->started));
            else
                json_object_set_new(o, "description",
                                    json_string("toolhost: tools of the "
                                                "toolsets in nats.toolsets"));
        }
    }
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (text)
        natsConnection_PublishString(nc, reply, text);
    else
        th_log_error("nats: out of memory answering %s", subj);
    free(text);
    json_decref(o);
    natsMsg_Destroy(msg);
    handler_leave(f);
}

/* ---- Tasks on the host's own subject ------------------------------------ */

/* <prefix>.host.<id>.tasks.{get,result,cancel}, body: the task id in
 * decimal (the part after the dot of Toolhost-Task).  Replies: get, the
 * task map of tasks.list; result, the final result (bad_state while it
 * runs); cancel, {ok: true}; errors as {ok: false, error}. */

typedef struct task_pack {
    th_buf *b;
    int rc;
} task_pack;

static void pack_task_cb(const th_task_view *t, void *ud)
{
    task_pack *x = ud;
    msgpack_packer pk;
    msgpack_packer_init(&pk, x->b, th_buf_msgpack_write);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    x->rc = th_codec_pack_task(&pk, t, (int64_t)now.tv_sec * 1000 +
                                           now.tv_nsec / 1000000);
}

static void on_task(natsConnection *nc, natsSubscription *sub, natsMsg *msg,
                    void *closure)
{
    (void)nc;
    (void)sub;
    th_nats *f = closure;
    const char *reply = natsMsg_GetReply(msg);
    if (!reply || !*reply || !handler_enter(f)) {
        natsMsg_Destroy(msg);
        return;
    }
    const char *subj = natsMsg_GetSubject(msg);
    const char *op = strrchr(subj, '.');
    op = op ? op + 1 : "";
    char idt[32] = "";
    int len = natsMsg_GetDataLength(msg);
    if (len > 0 && len < (int)sizeof idt)
        memcpy(idt, natsMsg_GetData(msg), (size_t)len);
    char *end;
    unsigned long long id = strtoull(idt, &end, 10);
    if (!idt[0] || *end) {
        publish_error(f, reply, TH_EINVAL, "the body must be a task id "
                      "(the number after the host id in Toolhost-Task)");
        goto out;
    }
    int rc = TH_ENOTFOUND;
    th_buf b = TH_BUF_INIT;
    for (size_t i = 0; i < f->n_ts && rc == TH_ENOTFOUND; i++) {
        th_session *s = f->ts[i].s;
        if (strcmp(op, "get") == 0) {
            task_pack x = {&b, 0};
            rc = th_task_get(s, id, pack_task_cb, &x);
            if (rc == 0)
                rc = x.rc;
        } else if (strcmp(op, "cancel") == 0) {
            rc = th_task_cancel(s, id);
            if (rc == 0) {
                msgpack_packer pk;
                msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
                msgpack_pack_map(&pk, 1);
                th_pack_cstr(&pk, "ok");
                msgpack_pack_true(&pk);
            }
        } else if (strcmp(op, "result") == 0) {
            th_result_copy r;
            memset(&r, 0, sizeof r);
            rc = th_task_result(s, id, &r);
            if (rc == 0)
                rc = th_codec_result_to_buf(&b, &r);
            th_result_copy_destroy(&r);
        } else {
            rc = TH_EINVAL;
        }
    }
    if (rc == TH_ENOTFOUND && strcmp(op, "result") == 0) {
        /* dropped here already (host.task_keep): the bucket may have it */
        char key[80];
        snprintf(key, sizeof key, "%s.%llu", f->id, id);
        th_buf_reset(&b);
        rc = kv_get(f, key, &b) == 0 ? 0 : TH_ENOTFOUND;
    }
    if (rc == 0)
        publish(f, reply, "task", id, b.data, b.len);
    else
        publish_error(f, reply, rc,
                      rc == TH_ENOTFOUND ? "no such task on this host"
                      : rc == TH_ESTATE  ? "the task is still running, or "
                                           "already ended"
                      : rc == TH_EINVAL  ? "unknown operation (get, result, "
                                           "cancel)"
                                         : th_strerror(rc));
    th_buf_destroy(&b);
out:
    natsMsg_Destroy(msg);
    handler_leave(f);
}

/* <prefix>.tasks.result in the queue group: any host answers the result of
 * a finished task, body HOSTID.TASKID (the Toolhost-Task header of the
 * ack): its own from memory, every other from the results bucket - so the
 * answer comes even when the task's host has gone. */
static void on_any_result(natsConnection *nc, natsSubscription *sub,
                          natsMsg *msg, void *closure)
{
    (void)nc;
    (void)sub;
    th_nats *f = closure;
    const char *reply = natsMsg_GetReply(msg);
    if (!reply || !*reply || !handler_enter(f)) {
        natsMsg_Destroy(msg);
        return;
    }
    char key[96] = "";
    int len = natsMsg_GetDataLength(msg);
    if (len > 0 && len < (int)sizeof key)
        memcpy(key, natsMsg_GetData(msg), (size_t)len);
    const char *dot = strrchr(key, '.');
    char *end = NULL;
    unsigned long long id = dot ? strtoull(dot + 1, &end, 10) : 0;
    if (!dot || dot == key || !dot[1] || *end) {
        publish_error(f, reply, TH_EINVAL, "the body must be a task id "
                      "HOSTID.TASKID (the Toolhost-Task header of the ack)");
        goto out;
    }
    th_buf b = TH_BUF_INIT;
    int rc = TH_ENOTFOUND;
    if ((size_t)(dot - key) == strlen(f->id) &&
        strncmp(key, f->id, (size_t)(dot - key)) == 0) {
        for (size_t i = 0; i < f->n_ts && rc == TH_ENOTFOUND; i++) {
            th_result_copy r;
            memset(&r, 0, sizeof r);
            rc = th_task_result(f->ts[i].s, id, &r);
            if (rc == 0)
                rc = th_codec_result_to_buf(&b, &r);
            th_result_copy_destroy(&r);
        }
    }
    if (rc == TH_ENOTFOUND) {
        th_buf_reset(&b);
        rc = kv_get(f, key, &b);
    }
    if (rc == 0)
        publish(f, reply, "task", id, b.data, b.len);
    else if (rc == TH_ESTATE)
        publish_error(f, reply, rc, "the task is still running");
    else if (rc == TH_ENOTFOUND)
        publish_error(f, reply, rc,
                      f->kv_state == 1
                          ? "no stored result for this task: it is still "
                            "running on its host, or unknown, or older than "
                            "nats.results_ttl"
                          : "no stored result for this task (no results "
                            "bucket: ask its host, "
                            "<prefix>.host.HOSTID.tasks.result)");
    else
        publish_error(f, reply, rc, th_strerror(rc));
    th_buf_destroy(&b);
out:
    natsMsg_Destroy(msg);
    handler_leave(f);
}

/* ---- Connection events -------------------------------------------------- */

static void on_disconnected(natsConnection *nc, void *ud)
{
    (void)nc;
    th_nats *f = ud;
    pthread_mutex_lock(&f->mu);
    bool stopping = f->stopping;
    pthread_mutex_unlock(&f->mu);
    if (!stopping)
        th_log_warn("nats: disconnected from the server; reconnecting");
}

/* The connection's last callback: after it the library's callback thread
 * no longer touches f, so th_nats_stop() may free it. */
static void on_closed(natsConnection *nc, void *ud)
{
    (void)nc;
    th_nats *f = ud;
    pthread_mutex_lock(&f->mu);
    f->closed = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void on_reconnected(natsConnection *nc, void *ud)
{
    (void)ud;
    char url[256] = "";
    natsConnection_GetConnectedUrl(nc, url, sizeof url);
    th_log_info("nats: reconnected to %s; subscriptions restored", url);
}

/* The first connect, made in the background (the server was not up when
 * the host started); the subscriptions made meanwhile are sent now. */
static void on_late_connect(natsConnection *nc, void *ud)
{
    (void)ud;
    char url[256] = "";
    natsConnection_GetConnectedUrl(nc, url, sizeof url);
    th_log_info("nats: connected to %s", url);
}

/* The NATS client says "slow consumer" each time a subscription starts
 * dropping (under a flood, thousands of times a second): one line a
 * second at most, with what was dropped since the last line.  eps_mu is
 * only tried (stop and reloads hold it across network round trips): a
 * busy one puts the line off to the next report. */
#define NT_SLOW_LOG_NS 1000000000LL
static void slow_note(th_nats *f, natsSubscription *sub)
{
    pthread_mutex_lock(&f->slow_mu);
    f->slow_events++;
    if ((f->slow_logged && ns_since(&f->slow_last) < NT_SLOW_LOG_NS) ||
        pthread_mutex_trylock(&f->eps_mu) != 0) {
        pthread_mutex_unlock(&f->slow_mu);
        return;
    }
    int64_t total = 0;
    for (size_t i = 0; i < f->n_eps; i++) {
        int64_t d = 0;
        if (f->eps[i]->sub &&
            natsSubscription_GetDropped(f->eps[i]->sub, &d) == NATS_OK)
            total += d;
    }
    pthread_mutex_unlock(&f->eps_mu);
    /* a reload's new subscription starts from 0 again */
    int64_t dropped = total >= f->slow_dropped_seen
                          ? total - f->slow_dropped_seen
                          : total;
    uint64_t events = f->slow_events;
    f->slow_dropped_seen = total;
    f->slow_events = 0;
    f->slow_logged = true;
    clock_gettime(CLOCK_MONOTONIC, &f->slow_last);
    pthread_mutex_unlock(&f->slow_mu);
    int msgs = 0, bytes = 0;
    if (sub)
        natsSubscription_GetPending(sub, &msgs, &bytes);
    th_log_warn("nats: slow consumer: requests arrive faster than this host "
                "takes them; the NATS client dropped %" PRId64 " request(s) "
                "since the last such line (%" PRIu64 " report(s), %d "
                "pending now; at most one line a second) - raise "
                "nats.max_pending or add hosts",
                dropped, events, msgs);
}

static void on_async_error(natsConnection *nc, natsSubscription *sub,
                           natsStatus err, void *ud)
{
    (void)nc;
    th_nats *f = ud;
    if (err == NATS_SLOW_CONSUMER) {
        slow_note(f, sub);
        return;
    }
    th_log_warn("nats: %s", natsStatus_GetText(err));
}

/* ---- Start and stop ----------------------------------------------------- */

/* What a toolset offers NATS now: its tools (th_session_tools), less the
 * host's task tools and names that cannot be a subject token. */
typedef struct nt_want {
    char *tool;
    uint32_t flags;
    char *param_types; /* {"name": "type", ...} as JSON text, or NULL */
} nt_want;

typedef struct want_list {
    nt_want *v;
    size_t n, cap;
    const char *toolset;
    bool nomem;
} want_list;

static void want_list_destroy(want_list *w)
{
    for (size_t i = 0; i < w->n; i++) {
        free(w->v[i].tool);
        free(w->v[i].param_types);
    }
    free(w->v);
}

static int want_cb(const th_tool *t, void *ud)
{
    want_list *w = ud;
    /* The task tools are the host's, not the toolset's: tasks are reached
     * through the host's own subjects (docs/scale.md). */
    if (strcmp(t->name, "get_running_tasks") == 0 ||
        strcmp(t->name, "cancel_task") == 0)
        return 0;
    if (!token_ok(t->name)) {
        th_log_warn("nats: toolset %s: tool '%s' is not served on NATS (its "
                    "name cannot be a subject token)", w->toolset, t->name);
        return 0;
    }
    if (w->n == w->cap) {
        size_t n = w->cap ? 2 * w->cap : 16;
        nt_want *v = realloc(w->v, n * sizeof *v);
        if (!v) {
            w->nomem = true;
            return 1;
        }
        w->v = v;
        w->cap = n;
    }
    nt_want *e = &w->v[w->n];
    e->flags = t->flags;
    e->tool = strdup(t->name);
    /* the types of the parameters, for callers that type key=value words
     * (toolhost call --connect nats://) */
    json_t *pt = json_object();
    for (size_t i = 0; pt && i < t->n_params; i++)
        json_object_set_new(pt, t->params[i].name,
                            json_string(th_type_name(t->params[i].type)));
    e->param_types = pt ? json_dumps(pt, JSON_COMPACT) : NULL;
    json_decref(pt);
    if (!e->tool || !e->param_types) {
        free(e->tool);
        free(e->param_types);
        w->nomem = true;
        return 1;
    }
    w->n++;
    return 0;
}

static nt_ep *ep_new(th_nats *f, nt_ts *ts, const char *tool)
{
    if (f->n_eps == f->cap_eps) {
        size_t n = f->cap_eps ? 2 * f->cap_eps : 16;
        nt_ep **v = realloc(f->eps, n * sizeof *v);
        if (!v)
            return NULL;
        f->eps = v;
        f->cap_eps = n;
    }
    nt_ep *ep = calloc(1, sizeof *ep);
    if (!ep)
        return NULL;
    ep->f = f;
    ep->ts = ts;
    size_t n = strlen(f->nc_cfg->prefix) + strlen(ts->cfg->name) +
               strlen(tool) + 3;
    ep->subject = malloc(n);
    ep->tool = strdup(tool);
    if (!ep->subject || !ep->tool) {
        free(ep->subject);
        free(ep->tool);
        free(ep);
        return NULL;
    }
    snprintf(ep->subject, n, "%s.%s.%s", f->nc_cfg->prefix, ts->cfg->name,
             tool);
    f->eps[f->n_eps++] = ep;
    return ep;
}

static void ep_free(nt_ep *ep)
{
    natsSubscription_Destroy(ep->sub);
    free(ep->subject);
    free(ep->tool);
    free(ep->param_types);
    free(ep);
}

/* A subscription's last callback (natsSubscription_SetOnCompleteCB): its
 * delivery thread is done with it.  th_nats_stop() waits for all of them
 * before the library is closed (what the delivery thread had not yet
 * processed would otherwise be leaked by the library). */
static void on_sub_done(void *ud)
{
    th_nats *f = ud;
    pthread_mutex_lock(&f->mu);
    f->subs_open--;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void sub_track(th_nats *f, natsSubscription *sub)
{
    if (natsSubscription_SetOnCompleteCB(sub, on_sub_done, f) == NATS_OK) {
        pthread_mutex_lock(&f->mu);
        f->subs_open++;
        pthread_mutex_unlock(&f->mu);
    }
}

/* Stops a subscription's deliveries at the server while what it already
 * sent is still handled (an unsubscribe when draining is not possible,
 * e.g. while disconnected). */
static void sub_drain(natsSubscription *sub)
{
    if (natsSubscription_Drain(sub) != NATS_OK)
        natsSubscription_Unsubscribe(sub);
}

static bool is_stopping(th_nats *f)
{
    pthread_mutex_lock(&f->mu);
    bool v = f->stopping;
    pthread_mutex_unlock(&f->mu);
    return v;
}

static const char *tf(natsStatus st);

/* Sends what the client buffered (a SUB or UNSUB) and waits for the
 * server's PONG, bounded: after it, the server routes by the new set. */
static void flush_now(th_nats *f)
{
    if (natsConnection_Status(f->nc) == NATS_CONN_STATUS_CONNECTED)
        natsConnection_FlushTimeout(f->nc, 1000);
}

/* Makes the endpoints of toolset `ts` those it offers now: subscribes the
 * tools that came (or came back), unsubscribes those that went.  At start
 * and after every reload (the session's tools_changed).  0, or a TH_E*
 * code with a sentence in err.  Call with eps_mu held. */
static int resync_locked(th_nats *f, nt_ts *ts, bool reload, th_error *err)
{
    want_list w;
    memset(&w, 0, sizeof w);
    w.toolset = ts->cfg->name;
    if (th_session_tools(ts->s, want_cb, &w) != 0 && w.nomem) {
        want_list_destroy(&w);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    size_t added = 0, removed = 0, live = 0;
    for (size_t i = 0; i < f->n_eps; i++) {
        nt_ep *ep = f->eps[i];
        if (ep->ts != ts || !ep->live)
            continue;
        bool still = false;
        for (size_t k = 0; k < w.n && !still; k++)
            still = strcmp(w.v[k].tool, ep->tool) == 0;
        if (still)
            continue;
        /* gone: no new calls reach this host for it (calls in flight
         * finish and are answered) */
        natsSubscription_Unsubscribe(ep->sub);
        ep->live = false;
        removed++;
        flush_now(f); /* the server knows before the log says so */
        th_log_info("nats: %s is no longer served (a reload removed the "
                    "tool)", ep->subject);
    }
    int rc = 0;
    for (size_t k = 0; k < w.n && rc == 0; k++) {
        nt_ep *ep = NULL;
        for (size_t i = 0; i < f->n_eps && !ep; i++)
            if (f->eps[i]->ts == ts && strcmp(f->eps[i]->tool,
                                              w.v[k].tool) == 0)
                ep = f->eps[i];
        if (!ep && !(ep = ep_new(f, ts, w.v[k].tool))) {
            rc = th_error_set(err, TH_ENOMEM, "out of memory");
            break;
        }
        ep->flags = w.v[k].flags;
        free(ep->param_types);
        ep->param_types = w.v[k].param_types;
        w.v[k].param_types = NULL;
        live++;
        if (ep->live)
            continue;
        natsSubscription_Destroy(ep->sub); /* of an earlier life */
        ep->sub = NULL;
        natsStatus st = natsConnection_QueueSubscribe(&ep->sub, f->nc,
                                                      ep->subject, QUEUE,
                                                      on_request, ep);
        if (st == NATS_OK) {
            sub_track(f, ep->sub);
            st = natsSubscription_SetPendingLimits(
                ep->sub, (int)f->nc_cfg->max_pending, -1);
        }
        if (st != NATS_OK) {
            rc = th_error_set(err, TH_EIO, "nats: cannot subscribe to %s: "
                              "%s", ep->subject, tf(st));
            break;
        }
        ep->live = true;
        added++;
        if (reload)
            flush_now(f);
        if (reload)
            th_log_info("nats: now serving %s (a reload added the tool)",
                        ep->subject);
    }
    want_list_destroy(&w);
    if (rc == 0 && live == 0 && !reload)
        th_log_warn("nats: toolset %s serves no tool on NATS (is "
                    "nats.as_user '%s' in its allow_users?)",
                    ts->cfg->name, f->nc_cfg->as_user);
    if (rc == 0 && reload && (added || removed))
        th_log_info("nats: toolset %s: %zu tool(s) on NATS after the "
                    "reload (%zu added, %zu removed)",
                    ts->cfg->name, live, added, removed);
    return rc;
}

/* th_front_ops.tools_changed of a toolset's session: a reload changed the
 * tools (on the reloader's thread, outside the core's locks). */
static void on_tools_changed(void *ud)
{
    nt_ts *ts = ud;
    th_nats *f = ts->f;
    pthread_mutex_lock(&f->eps_mu);
    /* before the start's own sync (no connection yet) it sees the new
     * list itself; after stop began nothing is subscribed again */
    if (f->nc && !is_stopping(f)) {
        th_error err = {0};
        if (resync_locked(f, ts, true, &err) != 0)
            th_log_error("nats: after a reload: %s", err.msg);
    }
    pthread_mutex_unlock(&f->eps_mu);
}

static const char *tf(natsStatus st)
{
    return natsStatus_GetText(st);
}

const char *th_nats_id(const th_nats *f)
{
    return f ? f->id : "";
}

static void nats_free(th_nats *f)
{
    for (size_t i = 0; i < f->n_eps; i++)
        ep_free(f->eps[i]);
    for (size_t i = 0; i < f->n_srv; i++)
        natsSubscription_Destroy(f->srv[i]);
    if (f->nc)
        natsConnection_Destroy(f->nc);
    natsOptions_Destroy(f->opts);
    kv_close(f);
    if (f->cfg_ref)
        th_config_unref(f->cfg_ref);
    free(f->eps);
    free(f->ts);
    pthread_mutex_destroy(&f->mu);
    pthread_mutex_destroy(&f->eps_mu);
    pthread_mutex_destroy(&f->start_mu);
    pthread_mutex_destroy(&f->slow_mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}

static void make_id(th_nats *f)
{
    uint8_t rnd[8] = {0};
    FILE *u = fopen("/dev/urandom", "rb");
    if (!u || fread(rnd, 1, sizeof rnd, u) != sizeof rnd) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        uint64_t x = (uint64_t)t.tv_nsec ^ ((uint64_t)getpid() << 32);
        memcpy(rnd, &x, sizeof x);
    }
    if (u)
        fclose(u);
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(f->id + 2 * i, 3, "%02x", rnd[i]);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(f->started, sizeof f->started, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

natsStatus th_nats_set_urls(natsOptions *o, const char *list)
{
    if (!strchr(list, ','))
        return natsOptions_SetURL(o, list);
    /* the servers of one cluster, comma-separated: the client library
     * takes a list only as an array */
    char *copy = strdup(list);
    size_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    const char **v = calloc(n, sizeof *v);
    if (!copy || !v) {
        free(copy);
        free(v);
        return NATS_NO_MEMORY;
    }
    size_t k = 0;
    char *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ')
            t++;
        size_t l = strlen(t);
        while (l && t[l - 1] == ' ')
            t[--l] = '\0';
        if (*t)
            v[k++] = t;
    }
    natsStatus st = k ? natsOptions_SetServers(o, v, (int)k)
                      : NATS_INVALID_ARG;
    free(v);
    free(copy);
    return st;
}

static natsStatus set_options(th_nats *f, natsOptions *o)
{
    const th_nats_cfg *m = f->nc_cfg;
    natsStatus st = th_nats_set_urls(o, f->cfg->host.listen_nats);
    char name[96];
    snprintf(name, sizeof name, "toolhost-%s", f->id);
    if (st == NATS_OK)
        st = natsOptions_SetName(o, name);
    if (st == NATS_OK && m->user)
        st = natsOptions_SetUserInfo(o, m->user, m->password);
    if (st == NATS_OK && m->token)
        st = natsOptions_SetToken(o, m->token);
    if (st == NATS_OK && m->creds)
        st = natsOptions_SetUserCredentialsFromFiles(o, m->creds, NULL);
    if (st == NATS_OK && (m->tls_ca || m->tls_cert ||
                          strncmp(f->cfg->host.listen_nats, "tls://", 6) == 0))
        st = natsOptions_SetSecure(o, true);
    if (st == NATS_OK && m->tls_ca)
        st = natsOptions_LoadCATrustedCertificates(o, m->tls_ca);
    if (st == NATS_OK && m->tls_cert)
        st = natsOptions_LoadCertificatesChain(o, m->tls_cert, m->tls_key);
    if (st == NATS_OK)
        st = natsOptions_SetMaxReconnect(o, -1); /* forever */
    if (st == NATS_OK)
        st = natsOptions_SetReconnectWait(o, (int64_t)m->reconnect_wait_ms);
    if (st == NATS_OK)
        st = natsOptions_SetMaxPendingMsgs(o, (int)m->max_pending);
    if (st == NATS_OK)
        st = natsOptions_UseGlobalMessageDelivery(o, true);
    /* replies leave at once rather than with the client's next flush
     * (about 1 ms later: that would be most of a quick call's time) */
    if (st == NATS_OK)
        st = natsOptions_SetSendAsap(o, true);
    if (st == NATS_OK)
        st = natsOptions_SetDisconnectedCB(o, on_disconnected, f);
    if (st == NATS_OK)
        st = natsOptions_SetReconnectedCB(o, on_reconnected, f);
    if (st == NATS_OK)
        st = natsOptions_SetClosedCB(o, on_closed, f);
    if (st == NATS_OK)
        st = natsOptions_SetErrorHandler(o, on_async_error, f);
    return st;
}

/* A plain (or queue group) subscription of the host's own: $SRV, tasks. */
static int sub_plain(th_nats *f, const char *subj, const char *queue,
                     natsMsgHandler cb, th_error *err)
{
    if (f->n_srv == sizeof f->srv / sizeof f->srv[0])
        return th_error_set(err, TH_EINVAL, "nats: too many subscriptions");
    natsStatus st =
        queue ? natsConnection_QueueSubscribe(&f->srv[f->n_srv], f->nc, subj,
                                              queue, cb, f)
              : natsConnection_Subscribe(&f->srv[f->n_srv], f->nc, subj, cb,
                                         f);
    if (st != NATS_OK)
        return th_error_set(err, TH_EIO, "nats: cannot subscribe to %s: %s",
                            subj, tf(st));
    sub_track(f, f->srv[f->n_srv]);
    f->n_srv++;
    return 0;
}

/* Whether a failed first connect is the config's fault (credentials,
 * TLS), not a server that is not up yet: then the host does not start. */
static bool fatal_connect(natsStatus st)
{
    return st == NATS_CONNECTION_AUTH_FAILED || st == NATS_NOT_PERMITTED ||
           st == NATS_SSL_ERROR || st == NATS_SECURE_CONNECTION_REQUIRED ||
           st == NATS_SECURE_CONNECTION_WANTED;
}

/* Joins the server: a first attempt that fails on credentials or TLS is an
 * error at start; a server that is not up yet is retried in the
 * background (the subscriptions are made now and sent when it comes). */
static int connect_first(th_nats *f, natsConnection **nc, th_error *err)
{
    const char *url = f->cfg->host.listen_nats;
    natsStatus st = natsConnection_Connect(nc, f->opts);
    if (st == NATS_OK)
        return 0;
    if (fatal_connect(st)) {
        const char *why = nats_GetLastError(NULL);
        return th_error_set(
            err, TH_ECONFIG, "nats: cannot connect to %s: %s%s%s (%s)", url,
            tf(st), why && *why ? ": " : "", why && *why ? why : "",
            st == NATS_CONNECTION_AUTH_FAILED || st == NATS_NOT_PERMITTED
                ? "check nats.user/password, token or creds"
                : "check nats.tls_ca, tls_cert/tls_key and the tls:// "
                  "scheme");
    }
    /* with a callback the library connects in the background (without one
     * it would block here, retrying forever) */
    natsStatus s2 = natsOptions_SetRetryOnFailedConnect(
        f->opts, true, on_late_connect, f);
    if (s2 == NATS_OK)
        s2 = natsConnection_Connect(nc, f->opts);
    if (s2 == NATS_OK)
        return 0;
    if (s2 == NATS_NOT_YET_CONNECTED) {
        th_log_warn("nats: %s is not reachable yet (%s); retrying every "
                    "%" PRIu64 " ms",
                    url, tf(st), f->nc_cfg->reconnect_wait_ms);
        return 0;
    }
    return th_error_set(err, TH_EIO, "nats: cannot connect to %s: %s", url,
                        tf(s2));
}

int th_nats_start(th_host *h, const th_config *cfg, th_nats **out,
                  th_error *err)
{
    *out = NULL;
    if (!cfg->host.listen_nats)
        return 0;
    th_nats *f = calloc(1, sizeof *f);
    if (!f)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    f->h = h;
    /* the host's current config, referenced: it outlives reloads (the
     * credentials, names and toolsets are those of the start) */
    f->cfg_ref = th_host_config_get(h);
    cfg = f->cfg_ref;
    f->cfg = cfg;
    f->nc_cfg = &cfg->nats;
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_init(&f->eps_mu, NULL);
    pthread_mutex_init(&f->start_mu, NULL);
    pthread_mutex_init(&f->slow_mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    make_id(f);
    kv_init_cfg(f);
    f->ts = calloc(cfg->nats.n_toolsets, sizeof *f->ts);
    if (!f->ts) {
        nats_free(f);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    int rc = 0;
    for (size_t i = 0; i < cfg->nats.n_toolsets && rc == 0; i++) {
        const th_toolset_cfg *tc = NULL;
        for (size_t j = 0; j < cfg->n_toolsets; j++)
            if (strcmp(cfg->toolsets[j].name, cfg->nats.toolsets[i]) == 0)
                tc = &cfg->toolsets[j];
        if (!tc)
            continue; /* the config check names it */
        nt_ts *ts = &f->ts[f->n_ts++];
        ts->f = f;
        ts->cfg = tc;
        th_principal who;
        memset(&who, 0, sizeof who);
        who.uid = (uint32_t)-1;
        who.gid = (uint32_t)-1;
        who.user = cfg->nats.as_user;
        who.toolset = tc->name;
        th_front_ops ops;
        memset(&ops, 0, sizeof ops);
        ops.front = "nats";
        /* a reload that adds or removes tools (un)subscribes them */
        ops.tools_changed = on_tools_changed;
        ops.ask_permission = on_ask;
        ts->s = th_session_open(h, &who, &ops, ts);
        if (!ts->s)
            rc = th_error_set(err, TH_ENOMEM, "out of memory");
    }
    natsStatus st = NATS_OK;
    if (rc == 0) {
        st = natsOptions_Create(&f->opts);
        if (st == NATS_OK)
            st = set_options(f, f->opts);
        if (st != NATS_OK)
            rc = th_error_set(err, TH_ECONFIG, "nats: %s: %s",
                              cfg->host.listen_nats, tf(st));
    }
    natsConnection *nc = NULL;
    if (rc == 0)
        rc = connect_first(f, &nc, err);
    pthread_mutex_lock(&f->eps_mu);
    f->nc = nc;
    for (size_t i = 0; rc == 0 && i < f->n_ts; i++)
        rc = resync_locked(f, &f->ts[i], false, err);
    pthread_mutex_unlock(&f->eps_mu);
    static const char *const verbs[] = {"PING", "INFO", "STATS"};
    for (size_t v = 0; rc == 0 && v < 3; v++) {
        char subj[3][200];
        snprintf(subj[0], sizeof subj[0], "$SRV.%s", verbs[v]);
        snprintf(subj[1], sizeof subj[1], "$SRV.%s.%s", verbs[v],
                 cfg->nats.name);
        snprintf(subj[2], sizeof subj[2], "$SRV.%s.%s.%s", verbs[v],
                 cfg->nats.name, f->id);
        for (size_t k = 0; rc == 0 && k < 3; k++)
            rc = sub_plain(f, subj[k], NULL, on_srv, err);
    }
    for (size_t k = 0; rc == 0 && k < 3; k++) {
        static const char *const ops[] = {"get", "result", "cancel"};
        char subj[256];
        snprintf(subj, sizeof subj, "%s.host.%s.tasks.%s", cfg->nats.prefix,
                 f->id, ops[k]);
        rc = sub_plain(f, subj, NULL, on_task, err);
    }
    if (rc == 0) { /* callers' answers to `ask` */
        char subj[256];
        snprintf(subj, sizeof subj, "%s.host.%s.permit.>", cfg->nats.prefix,
                 f->id);
        rc = sub_plain(f, subj, NULL, on_permit, err);
    }
    if (rc == 0) { /* any host answers a finished task's result */
        char subj[256];
        snprintf(subj, sizeof subj, "%s.tasks.result", cfg->nats.prefix);
        rc = sub_plain(f, subj, QUEUE, on_any_result, err);
    }
    if (rc == 0 && natsConnection_Status(f->nc) ==
                       NATS_CONN_STATUS_CONNECTED) {
        natsConnection_FlushTimeout(f->nc, 2000);
        char url[256] = "";
        natsConnection_GetConnectedUrl(f->nc, url, sizeof url);
        th_log_info("nats: connected to %s", url);
        kv_open(f);
    }
    if (rc != 0) {
        th_nats_stop(f);
        return rc;
    }
    size_t n_live = 0;
    pthread_mutex_lock(&f->eps_mu);
    for (size_t i = 0; i < f->n_eps; i++)
        n_live += f->eps[i]->live;
    pthread_mutex_unlock(&f->eps_mu);
    th_log_info("nats: serving %zu tool(s) of %zu toolset(s) on %s as "
                "service %s id %s (subjects %s.<toolset>.<tool>)",
                n_live, f->n_ts, cfg->host.listen_nats, cfg->nats.name,
                f->id, cfg->nats.prefix);
    *out = f;
    return 0;
}

void th_nats_stop(th_nats *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    f->stopping = true;
    pthread_mutex_unlock(&f->mu);
    /* 1. No new deliveries: drain every subscription - the server stops
     * routing to us, and what it had already sent (in the socket, in the
     * client's queues) is still handed to on_request, which answers it
     * `cancelled` (an unsubscribe would drop those silently). */
    pthread_mutex_lock(&f->eps_mu);
    for (size_t i = 0; i < f->n_eps; i++)
        if (f->eps[i]->live)
            sub_drain(f->eps[i]->sub);
    for (size_t i = 0; i < f->n_srv; i++)
        sub_drain(f->srv[i]);
    pthread_mutex_unlock(&f->eps_mu);
    flush_now(f);
    /* the drains end once the server confirmed the unsubscribes and every
     * message before that was handled (bounded: a lost server) */
    int64_t drain_ms = 5000;
    struct timespec d0;
    clock_gettime(CLOCK_MONOTONIC, &d0);
    /* without eps_mu (a $SRV handler that waits for it would hold a
     * delivery thread the drains need): once stopping, nothing changes
     * the endpoint set or frees a subscription before nats_free() */
    pthread_mutex_lock(&f->eps_mu);
    size_t n_eps = f->n_eps;
    pthread_mutex_unlock(&f->eps_mu);
    for (size_t i = 0; i < n_eps; i++) {
        int64_t left = drain_ms - ns_since(&d0) / 1000000;
        if (f->eps[i]->live && left > 0)
            natsSubscription_WaitForDrainCompletion(f->eps[i]->sub, left);
    }
    pthread_mutex_lock(&f->mu);
    while (f->active)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
    /* 2. Cancel what runs; 3. flush the replies; 4. close (below). */
    /* Closing the sessions cancels their calls: each caller gets its
     * final `cancelled` reply before the connection closes. */
    for (size_t i = 0; i < f->n_ts; i++)
        if (f->ts[i].s)
            th_session_close(f->ts[i].s);
    pthread_mutex_lock(&f->mu);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 5;
    while (f->calls && pthread_cond_timedwait(&f->cv, &f->mu, &dl) == 0)
        ;
    pthread_mutex_unlock(&f->mu);
    if (f->nc) {
        if (natsConnection_Status(f->nc) == NATS_CONN_STATUS_CONNECTED)
            natsConnection_FlushTimeout(f->nc, 1000);
        natsConnection_Close(f->nc);
        /* the disconnected and closed callbacks run on the library's own
         * thread after Close returns: wait for the last one (bounded) */
        pthread_mutex_lock(&f->mu);
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 5;
        while (!f->closed &&
               pthread_cond_timedwait(&f->cv, &f->mu, &dl) == 0)
            ;
        /* and for every subscription's last callback */
        while (f->subs_open &&
               pthread_cond_timedwait(&f->cv, &f->mu, &dl) == 0)
            ;
        bool closed = f->closed && !f->subs_open;
        pthread_mutex_unlock(&f->mu);
        if (!closed) {
            /* never free what a late callback may still use */
            th_log_error("nats: the connection or a subscription did not "
                         "report closed within 5 s; their state is left "
                         "allocated");
            return;
        }
    }
    nats_free(f);
    /* The library's own threads (timers, delivery pools) end only when it
     * is closed; one NATS front per process, so it is ours to close. */
    nats_CloseAndWait(2000);
}
