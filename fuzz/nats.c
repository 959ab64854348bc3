/* fuzz/nats.c - libFuzzer target: the request handlers of the NATS front
 * (host/nats/nats.c): tool calls on <prefix>.<toolset>.<tool> with their
 * headers (Toolhost-Timeout-Ms, -Progress, -Output-Info, -Ask) and
 * msgpack arguments, the host's task subjects (<prefix>.host.ID.tasks.
 * {get,result,cancel}), <prefix>.tasks.result, answers to `ask`
 * (<prefix>.host.ID.permit.CALL.NONCE) and the discovery subjects $SRV.*.
 *
 * How: the target is the NATS client library's connection.  It defines the
 * natsConnection_* and natsSubscription_* functions the front calls, so
 * th_nats_start() "connects" to nothing and its subscriptions land in a
 * table here; each message of the input is made a real natsMsg (the
 * library's own natsMsg_Create and natsMsgHeader_Set) and handed to the
 * handler of every subscription whose subject matches, as the library's
 * delivery thread would.  What the front publishes (replies, progress,
 * acks, asks) is caught and checked.  The results bucket is off (no
 * JetStream): tasks.result answers from memory or says "no stored result".
 *
 * Input: messages separated by a line "%%"; each is
 *     SUBJECT [R]            (R: any word - the message has a reply
 *                             subject, a fresh inbox)
 *     Name: value            (NATS headers, any number)
 *                            (an empty line)
 *     payload                ("J:" then JSON: sent as its msgpack)
 * "$H" stands for the host's id, "$P" for the permit subject of the last
 * `ask`, "$T" for the last task (HOSTID.TASKID of an ack), "$t" for its
 * TASKID, in the subject, header values and the payload.
 * At the end of each input the tasks it started are cancelled and the
 * asks left open denied (through the same handlers), then the harness
 * waits (at most 5 s) for the final answer of every call.
 *
 * The host is opened once: build/plugins/echo.so, toolsets `public`
 * (echo, echo_async; echo_async asks first), `open` (the same, no ask)
 * and `hidden` (not on NATS),
 * prefix th, max_timeout 1 s, permission_timeout 100 ms.
 * Properties beyond "no crash, no leak, no UB, no hang":
 *   - every tool request with a reply subject gets exactly one final
 *     `result`, and nothing after it;
 *   - every message the front publishes has Toolhost-Kind (result, ack,
 *     progress, task, permit or ask) and Toolhost-Host (this host), and
 *     its body is one whole msgpack map ([TASKID, map] for progress);
 *     $SRV answers are JSON objects.
 *
 * needs: host/nats/nats.c host/core/host/host.c
 */
#define _GNU_SOURCE 1
#include <inttypes.h>
#include <jansson.h>
#include <msgpack.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"
#include "front/fronts.h"
#include "front/nats.h"
#include "th/buf.h"
#include "th/config.h"
#include "th/err.h"
#include "th/host.h"
#include "th/json.h"
#include "th/log.h"

#ifndef TH_BUILD_DIR
#define TH_BUILD_DIR "build"
#endif

#define NF_MAX_SUBS 64
#define NF_MAX_REPLIES 64

static int64_t nf_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the harness's connection ---------------------------------------------- */

struct __natsConnection {
    int unused;
};

struct __natsSubscription {
    char subject[256];
    natsMsgHandler cb;
    void *closure;
    natsOnCompleteCB done;
    void *done_cls;
    bool live;
};

static struct __natsConnection nf_conn;
static bool nf_trace; /* TH_FUZZ_TRACE set: each message in and out */
static pthread_mutex_t nf_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nf_cv = PTHREAD_COND_INITIALIZER;
static natsSubscription *nf_subs[NF_MAX_SUBS];
static size_t nf_n_subs;

natsStatus natsConnection_Connect(natsConnection **nc, natsOptions *o)
{
    (void)o;
    *nc = &nf_conn;
    return NATS_OK;
}

natsConnStatus natsConnection_Status(natsConnection *nc)
{
    (void)nc;
    return NATS_CONN_STATUS_CONNECTED;
}

natsStatus natsConnection_FlushTimeout(natsConnection *nc, int64_t t)
{
    (void)nc, (void)t;
    return NATS_OK;
}

natsStatus natsConnection_GetConnectedUrl(natsConnection *nc, char *buf,
                                          size_t n)
{
    (void)nc;
    snprintf(buf, n, "nats://127.0.0.1:4222");
    return NATS_OK;
}

void natsConnection_Close(natsConnection *nc)
{
    (void)nc;
}

void natsConnection_Destroy(natsConnection *nc)
{
    (void)nc;
}

static natsStatus nf_sub(natsSubscription **sub, const char *subj,
                         natsMsgHandler cb, void *closure)
{
    natsSubscription *s = calloc(1, sizeof *s);
    if (!s || strlen(subj) >= sizeof s->subject) {
        free(s);
        return NATS_NO_MEMORY;
    }
    strcpy(s->subject, subj);
    s->cb = cb;
    s->closure = closure;
    s->live = true;
    pthread_mutex_lock(&nf_mu);
    TH_FUZZ_CHECK(nf_n_subs < NF_MAX_SUBS);
    nf_subs[nf_n_subs++] = s;
    pthread_mutex_unlock(&nf_mu);
    *sub = s;
    return NATS_OK;
}

natsStatus natsConnection_Subscribe(natsSubscription **sub,
                                    natsConnection *nc, const char *subj,
                                    natsMsgHandler cb, void *closure)
{
    (void)nc;
    return nf_sub(sub, subj, cb, closure);
}

natsStatus natsConnection_QueueSubscribe(natsSubscription **sub,
                                         natsConnection *nc,
                                         const char *subj, const char *queue,
                                         natsMsgHandler cb, void *closure)
{
    (void)nc, (void)queue;
    return nf_sub(sub, subj, cb, closure);
}

natsStatus natsSubscription_SetOnCompleteCB(natsSubscription *s,
                                            natsOnCompleteCB cb, void *cls)
{
    s->done = cb;
    s->done_cls = cls;
    return NATS_OK;
}

natsStatus natsSubscription_SetPendingLimits(natsSubscription *s, int m,
                                             int b)
{
    (void)s, (void)m, (void)b;
    return NATS_OK;
}

natsStatus natsSubscription_GetPending(natsSubscription *s, int *m, int *b)
{
    (void)s;
    *m = *b = 0;
    return NATS_OK;
}

natsStatus natsSubscription_Unsubscribe(natsSubscription *s)
{
    pthread_mutex_lock(&nf_mu);
    bool was = s->live;
    s->live = false;
    pthread_mutex_unlock(&nf_mu);
    if (was && s->done)
        s->done(s->done_cls);
    return NATS_OK;
}

void natsSubscription_Destroy(natsSubscription *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&nf_mu);
    for (size_t i = 0; i < nf_n_subs; i++)
        if (nf_subs[i] == s) {
            nf_subs[i] = nf_subs[--nf_n_subs];
            break;
        }
    pthread_mutex_unlock(&nf_mu);
    free(s);
}

/* ---- what the front publishes ------------------------------------------------ */

typedef struct nf_reply {
    char subject[48];
    bool final;
    bool asker; /* sent with Toolhost-Ask: 1 */
    bool asked; /* an ask came */
} nf_reply;

static nf_reply nf_replies[NF_MAX_REPLIES];
static size_t nf_n_replies, nf_n_final;
static char nf_host_id[64];
static char nf_permit[NF_MAX_REPLIES / 4][320]; /* asks not yet answered */
static size_t nf_n_permit;
static char nf_tasks[16][96]; /* HOSTID.TASKID of acks */
static size_t nf_n_tasks;

/* One whole msgpack value of type t: a map, or for progress [ID, map]. */
static bool nf_is_value(const void *data, size_t len, msgpack_object_type t)
{
    if (!th_fuzz_msgpack_plausible(data, len))
        return false;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    bool ok = msgpack_unpack_next(&u, data, len, &off) ==
                  MSGPACK_UNPACK_SUCCESS &&
              off == len && u.data.type == t &&
              (t != MSGPACK_OBJECT_ARRAY ||
               (u.data.via.array.size == 2 &&
                u.data.via.array.ptr[0].type ==
                    MSGPACK_OBJECT_POSITIVE_INTEGER &&
                u.data.via.array.ptr[1].type == MSGPACK_OBJECT_MAP));
    msgpack_unpacked_destroy(&u);
    return ok;
}

natsStatus natsConnection_PublishMsg(natsConnection *nc, natsMsg *m)
{
    (void)nc;
    const char *subj = natsMsg_GetSubject(m);
    const char *kind = NULL, *host = NULL, *task = NULL;
    natsMsgHeader_Get(m, TH_NATS_H_KIND, &kind);
    natsMsgHeader_Get(m, TH_NATS_H_HOST, &host);
    natsMsgHeader_Get(m, TH_NATS_H_TASK, &task);
    if (nf_trace) /* what a seed does, for its author */
        fprintf(stderr, "nats: %" PRId64 " -> %s kind %s task %s (%d bytes)\n", nf_ms(), subj,
                kind ? kind : "-", task ? task : "-",
                natsMsg_GetDataLength(m));
    TH_FUZZ_CHECK(kind && (strcmp(kind, "result") == 0 ||
                           strcmp(kind, "ack") == 0 ||
                           strcmp(kind, "progress") == 0 ||
                           strcmp(kind, "task") == 0 ||
                           strcmp(kind, "permit") == 0 ||
                           strcmp(kind, "ask") == 0));
    TH_FUZZ_CHECK(host && strcmp(host, nf_host_id) == 0);
    bool progress = kind && strcmp(kind, "progress") == 0;
    TH_FUZZ_CHECK(nf_is_value(natsMsg_GetData(m),
                              (size_t)natsMsg_GetDataLength(m),
                              progress ? MSGPACK_OBJECT_ARRAY
                                       : MSGPACK_OBJECT_MAP));
    if (!kind)
        return NATS_OK;
    pthread_mutex_lock(&nf_mu);
    for (size_t i = 0; i < nf_n_replies; i++) {
        nf_reply *r = &nf_replies[i];
        if (strcmp(r->subject, subj) != 0)
            continue;
        /* nothing after a call's final result */
        TH_FUZZ_CHECK(!r->final);
        if (strcmp(kind, "ask") == 0)
            r->asked = true;
        if (strcmp(kind, "result") == 0) {
            r->final = true;
            nf_n_final++;
            pthread_cond_broadcast(&nf_cv);
        }
    }
    if (strcmp(kind, "ask") == 0 && natsMsg_GetReply(m) &&
        nf_n_permit < sizeof nf_permit / sizeof nf_permit[0])
        snprintf(nf_permit[nf_n_permit++], sizeof nf_permit[0], "%s",
                 natsMsg_GetReply(m));
    if (strcmp(kind, "ask") == 0)
        pthread_cond_broadcast(&nf_cv);
    if (strcmp(kind, "ack") == 0 && task &&
        nf_n_tasks < sizeof nf_tasks / sizeof nf_tasks[0])
        snprintf(nf_tasks[nf_n_tasks++], sizeof nf_tasks[0], "%s", task);
    if (strcmp(kind, "ack") == 0)
        pthread_cond_broadcast(&nf_cv);
    pthread_mutex_unlock(&nf_mu);
    return NATS_OK;
}

natsStatus natsConnection_PublishString(natsConnection *nc,
                                        const char *subj, const char *str)
{
    (void)nc, (void)subj;
    json_t *j = json_loads(str, 0, NULL);
    TH_FUZZ_CHECK(json_is_object(j));
    json_decref(j);
    return NATS_OK;
}

/* ---- the host ----------------------------------------------------------------- */

static th_host *nf_host;
static th_nats *nf_front;

static void nf_open_host(void)
{
#ifndef TH_FUZZ_NO_ENTRY
    th_log_set_level(TOOLHOST_LOG_ERROR);
    th_log_set_fd(-1);
#endif
    const char *echo = TH_BUILD_DIR "/plugins/echo.so";
    int have_echo = access(echo, R_OK) == 0;
    char yaml[4000];
    snprintf(yaml, sizeof yaml,
             "host:\n  log_level: error\n  shutdown_grace: 50ms\n"
             "  session_grace: 50ms\n  max_timeout: 1s\n"
             "  default_timeout: 1s\n  permission_timeout: 100ms\n"
             "  listen: [\"nats://127.0.0.1:4222\"]\n"
             "%s%s%s"
             "toolsets:\n"
             "  - name: public\n    tools: [\"*\"]\n"
             "    allow_users: [nats]\n"
             "    permissions:\n      default: allow\n"
             "      rules:\n        - {match: echo_async, action: ask}\n"
             "  - name: open\n    tools: [\"*\"]\n"
             "    allow_users: [nats]\n    permissions: {default: allow}\n"
             "  - name: hidden\n    tools: [\"*\"]\n"
             "    allow_users: [nats]\n"
             "nats:\n  prefix: th\n  toolsets: [public, open]\n"
             "  as_user: nats\n  results_bucket: \"off\"\n",
             have_echo ? "plugins:\n  - name: echo\n    path: " : "",
             have_echo ? echo : "", have_echo ? "\n" : "");
    th_config *cfg = NULL;
    th_error err;
    th_error_clear(&err);
    th_fronts_register_builtin(); /* the fronts' config sections */
    if (th_config_parse("fuzz.yaml", "/", yaml, strlen(yaml), &cfg, &err) <
            0 ||
        th_host_open(cfg, &nf_host, &err) < 0 ||
        th_nats_start(nf_host, cfg, &nf_front, &err) < 0 || !nf_front) {
        fprintf(stderr, "nats: cannot start: %s\n", err.msg);
        abort();
    }
    snprintf(nf_host_id, sizeof nf_host_id, "%s", th_nats_id(nf_front));
}

static void nf_message(const uint8_t *p, size_t n, unsigned *seq);

/* The host keeps the records of its last 1024 calls (tombstones, for late
 * plugin callbacks): until that ring is full each call leaves two blocks
 * behind, and libFuzzer would scan for leaks after every input.  Filled
 * at the start, with echo calls, before the first input. */
static void nf_warm_up(void)
{
    static const char req[] = "th.open.echo R\n\nJ:{\"text\":\"w\"}";
    unsigned seq = 0;
    for (int i = 0; i < 1100; i++) {
        nf_message((const uint8_t *)req, sizeof req - 1, &seq);
        if (seq >= NF_MAX_REPLIES) {
            pthread_mutex_lock(&nf_mu);
            while (nf_n_final < nf_n_replies)
                pthread_cond_wait(&nf_cv, &nf_mu);
            nf_n_final = nf_n_replies = 0;
            pthread_mutex_unlock(&nf_mu);
            seq = 0;
        }
    }
    pthread_mutex_lock(&nf_mu);
    while (nf_n_final < nf_n_replies)
        pthread_cond_wait(&nf_cv, &nf_mu);
    nf_n_final = nf_n_replies = 0;
    pthread_mutex_unlock(&nf_mu);
}

/* ---- one input ------------------------------------------------------------------- */

/* NATS subject matching: '*' one token, '>' the rest. */
static bool nf_match(const char *pat, const char *subj)
{
    for (;;) {
        size_t pl = strcspn(pat, "."), sl = strcspn(subj, ".");
        if (pl == 1 && pat[0] == '>')
            return sl > 0;
        if (!(pl == 1 && pat[0] == '*') &&
            (pl != sl || memcmp(pat, subj, pl) != 0))
            return false;
        pat += pl;
        subj += sl;
        if (!*pat || !*subj)
            return !*pat && !*subj;
        pat++;
        subj++;
    }
}

/* A subject a client may publish to: tokens not empty, no wildcard, no
 * white space or control character. */
static bool nf_subject_ok(const char *s)
{
    if (!*s || strlen(s) > 250)
        return false;
    size_t tl = 0;
    for (const char *p = s;; p++) {
        if (*p == '.' || !*p) {
            if (tl == 0)
                return false;
            if (!*p)
                return true;
            tl = 0;
            continue;
        }
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return false;
        if ((*p == '*' || *p == '>') && tl == 0 &&
            (p[1] == '.' || !p[1]))
            return false;
        tl++;
    }
}

/* text[0..n) with the harness's names replaced, into b. */
static int nf_subst(th_buf *b, const char *text, size_t n)
{
    char last_task[96] = "";
    char permit[320] = "";
    pthread_mutex_lock(&nf_mu);
    if (!nf_n_permit && memmem(text, n, "$P", 2)) {
        /* an ask comes from the call's thread: while a call that offered
         * to answer one has not had it, give it 200 ms */
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += 200 * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        for (;;) {
            bool waiting = false;
            for (size_t i = 0; i < nf_n_replies && !waiting; i++)
                waiting = nf_replies[i].asker && !nf_replies[i].asked &&
                          !nf_replies[i].final;
            if (nf_n_permit || !waiting ||
                pthread_cond_timedwait(&nf_cv, &nf_mu, &dl) != 0)
                break;
        }
    }
    if (nf_n_tasks)
        snprintf(last_task, sizeof last_task, "%s", nf_tasks[nf_n_tasks - 1]);
    if (nf_n_permit)
        snprintf(permit, sizeof permit, "%s", nf_permit[nf_n_permit - 1]);
    pthread_mutex_unlock(&nf_mu);
    const char *dot = strrchr(last_task, '.');
    for (size_t i = 0; i < n; i++) {
        char c = i + 1 < n && text[i] == '$' ? text[i + 1] : 0;
        const char *rep = c == 'H'   ? nf_host_id
                          : c == 'P' ? permit
                          : c == 'T' ? last_task
                          : c == 't' ? (dot ? dot + 1 : "")
                                     : NULL;
        int rc = rep ? th_buf_append(b, rep, strlen(rep))
                     : th_buf_append(b, text + i, 1);
        if (rc != 0)
            return -1;
        if (rep)
            i++;
    }
    return 0;
}

/* Hands a copy of msg's contents to every live subscription matching;
 * 1 when a tool endpoint (a queue subscription of a tool) took it. */
static void nf_deliver(const char *subj, const char *reply,
                       const char (*hn)[64], const char (*hv)[256],
                       size_t n_h, const void *data, size_t len)
{
    natsSubscription *to[NF_MAX_SUBS];
    size_t n_to = 0;
    pthread_mutex_lock(&nf_mu);
    for (size_t i = 0; i < nf_n_subs; i++)
        if (nf_subs[i]->live && nf_match(nf_subs[i]->subject, subj))
            to[n_to++] = nf_subs[i];
    pthread_mutex_unlock(&nf_mu);
    if (nf_trace)
        fprintf(stderr, "nats: %" PRId64 " <- %s reply %s (%zu bytes, %zu handlers)\n", nf_ms(),
                subj, reply ? reply : "-", len, n_to);
    for (size_t k = 0; k < n_to; k++) {
        natsMsg *m = NULL;
        if (natsMsg_Create(&m, subj, reply, data, (int)len) != NATS_OK)
            return;
        for (size_t i = 0; i < n_h; i++)
            if (natsMsgHeader_Add(m, hn[i], hv[i]) != NATS_OK)
                break;
        to[k]->cb(&nf_conn, to[k], m, to[k]->closure);
    }
}

/* Whether subj is a tool endpoint of this host (th.public.TOOL). */
static bool nf_is_tool_subject(const char *subj)
{
    pthread_mutex_lock(&nf_mu);
    bool tool = false;
    for (size_t i = 0; i < nf_n_subs && !tool; i++)
        tool = nf_subs[i]->live && (strncmp(subj, "th.public.", 10) == 0 ||
                                          strncmp(subj, "th.open.", 8) == 0) &&
               strcmp(nf_subs[i]->subject, subj) == 0;
    pthread_mutex_unlock(&nf_mu);
    return tool;
}

static void nf_message(const uint8_t *p, size_t n, unsigned *seq)
{
    const uint8_t *end = p + n;
    const uint8_t *nl = memchr(p, '\n', n);
    const uint8_t *le = nl ? nl : end;
    th_buf first = TH_BUF_INIT, body = TH_BUF_INIT;
    char hn[16][64], hv[16][256];
    size_t n_h = 0;
    if (nf_subst(&first, (const char *)p, (size_t)(le - p)) != 0 ||
        th_buf_append(&first, "", 1) != 0)
        goto out;
    char *subj = (char *)first.data;
    char *sp = strchr(subj, ' ');
    bool has_reply = sp != NULL;
    if (sp)
        *sp = '\0';
    if (!nf_subject_ok(subj))
        goto out;
    p = nl ? nl + 1 : end;
    while (p < end) {
        nl = memchr(p, '\n', (size_t)(end - p));
        le = nl ? nl : end;
        size_t ll = (size_t)(le - p);
        const uint8_t *next = nl ? nl + 1 : end;
        if (ll == 0) {
            p = next;
            break;
        }
        const uint8_t *colon = memchr(p, ':', ll);
        size_t nn = colon ? (size_t)(colon - p) : 0;
        if (!colon || nn == 0 || nn >= sizeof hn[0] || n_h == 16 ||
            memchr(p, 0, ll) || memchr(p, '\r', ll) || memchr(p, ' ', nn))
            goto out;
        th_buf v = TH_BUF_INIT;
        const char *vs = (const char *)colon + 1;
        size_t vl = ll - nn - 1;
        while (vl && *vs == ' ')
            vs++, vl--;
        int rc = nf_subst(&v, vs, vl);
        if (rc == 0 && v.len < sizeof hv[0]) {
            memcpy(hn[n_h], p, nn);
            hn[n_h][nn] = '\0';
            memcpy(hv[n_h], v.data ? (const char *)v.data : "", v.len);
            hv[n_h][v.len] = '\0';
            n_h++;
        }
        th_buf_destroy(&v);
        p = next;
    }
    size_t bl = (size_t)(end - p);
    if (bl >= 2 && p[0] == 'J' && p[1] == ':') {
        th_buf t = TH_BUF_INIT;
        json_t *j = NULL;
        if (nf_subst(&t, (const char *)p + 2, bl - 2) == 0)
            j = json_loadb(t.data ? (const char *)t.data : "", t.len,
                           JSON_DECODE_ANY, NULL);
        th_buf_destroy(&t);
        if (!j || th_json_to_msgpack(j, &body) != 0) {
            json_decref(j);
            goto out;
        }
        json_decref(j);
    } else if (nf_subst(&body, (const char *)p, bl) != 0) {
        goto out;
    }
    char reply[48] = "";
    if (has_reply) {
        snprintf(reply, sizeof reply, "_INBOX.fz.%u", (*seq)++);
        if (nf_is_tool_subject(subj)) {
            pthread_mutex_lock(&nf_mu);
            bool room = nf_n_replies < NF_MAX_REPLIES;
            if (room) {
                nf_reply *r = &nf_replies[nf_n_replies++];
                snprintf(r->subject, sizeof r->subject, "%s", reply);
                r->final = r->asked = false;
                r->asker = false;
                for (size_t i = 0; i < n_h; i++)
                    r->asker |= strcmp(hn[i], TH_NATS_H_ASK) == 0 &&
                                strcmp(hv[i], "1") == 0;
            }
            pthread_mutex_unlock(&nf_mu);
            if (!room)
                goto out;
        }
    }
    nf_deliver(subj, has_reply ? reply : NULL, (const char(*)[64])hn,
               (const char(*)[256])hv, n_h, body.data, body.len);
out:
    th_buf_destroy(&first);
    th_buf_destroy(&body);
}

static int fuzz_nats(const uint8_t *data, size_t size)
{
    if (size > 32000)
        return 0;
    if (!nf_host) {
        nf_open_host();
        nf_warm_up();
        nf_trace = getenv("TH_FUZZ_TRACE") != NULL;
    }
    th_fuzz_settle settle = th_fuzz_settle_begin();
    unsigned seq = 0;
    size_t off = 0;
    while (off < size) {
        const uint8_t *sep = memmem(data + off, size - off, "\n%%\n", 4);
        size_t k = sep ? (size_t)(sep - (data + off)) : size - off;
        nf_message(data + off, k, &seq);
        off += k + (sep ? 4 : 0);
    }
    /* the client goes: its tasks cancelled, its asks denied, and every
     * call answered */
    char subj[256];
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 5;
    pthread_mutex_lock(&nf_mu);
    size_t denied = 0, cancelled = 0;
    for (;;) {
        while (denied < nf_n_permit || cancelled < nf_n_tasks) {
            char task[96] = "";
            if (denied < nf_n_permit)
                snprintf(subj, sizeof subj, "%s", nf_permit[denied++]);
            else
                snprintf(task, sizeof task, "%s", nf_tasks[cancelled++]);
            pthread_mutex_unlock(&nf_mu);
            const char *dot = strrchr(task, '.');
            if (!task[0]) {
                nf_deliver(subj, NULL, NULL, NULL, 0, "deny", 4);
            } else if (dot) {
                snprintf(subj, sizeof subj, "th.host.%s.tasks.cancel",
                         nf_host_id);
                nf_deliver(subj, "_INBOX.fz.end", NULL, NULL, 0, dot + 1,
                           strlen(dot + 1));
            }
            pthread_mutex_lock(&nf_mu);
        }
        if (nf_n_final >= nf_n_replies ||
            pthread_cond_timedwait(&nf_cv, &nf_mu, &dl) != 0)
            break;
    }
    /* every call gets its final answer */
    TH_FUZZ_CHECK(nf_n_final == nf_n_replies);
    nf_n_final = nf_n_replies = nf_n_permit = nf_n_tasks = 0;
    pthread_mutex_unlock(&nf_mu);
    /* the calls' last frees run on the manager's threads just after */
    th_fuzz_settle_end(settle, 10);
    return 0;
}

TH_FUZZ_ENTRY(fuzz_nats)
