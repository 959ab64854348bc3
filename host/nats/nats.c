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
 * Caller identity (nats.users, docs/scale.md "Caller identity"): callers
 * publish on <prefix>.u.<user>.…, which the NATS server's permissions let
 * only that user publish on; the host takes the principal from that token
 * (caller_of), answers only to reply subjects under _INBOX.<user>., runs
 * the call in that user's session of the toolset (user_session), names
 * async tasks by 128 random bits bound to their caller (the task map,
 * task_*), and signs what it writes to the results bucket with the HMAC
 * key of nats.results_key_file (kv_seal, kv_unseal); the put's outcome
 * goes to the caller (Toolhost-Stored).  A request with
 * Toolhost-Start-By is answered `took` at once, or not started when it
 * came too late (handle_request); <prefix>.host.<id>.call.> takes calls
 * addressed to this host alone (on_direct: a caller's retry).  Reply
 * batching (nats.reply_batching): a second connection, nc_bulk, carries
 * the replies of calls that arrived with others waiting behind them
 * (reply_conn), written together by the client's flusher; each call's
 * replies stay on the connection it got (nt_call.nc), in order.
 * What the toolsets' plugins offer besides tools (resources, prompts,
 * completion) is answered on <prefix>[.u.<user>].<toolset>.<method>
 * (on_content), by th_front_content() as on the RPC front.
 * Lock order: eps_mu, then mu; kv_mu alone; slow_mu,
 * then eps_mu only tried; sess_mu alone; tasks_mu alone; note_mu alone. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <msgpack.h>
#include <nats/nats.h>
#include <nettle/base16.h>
#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "front/content.h"
#include "front/nats.h"
#include "front/nats_config.h"
#include "front/rpc.h"
#include "th/codec.h"
#include "th/json.h"
#include "th/log.h"
#include "th/tool.h"

#define QUEUE "toolhost"

typedef struct nt_ts nt_ts;

/* One content subject of a toolset: <prefix>[.u.*].<toolset>.<method>
 * (on_content). */
typedef struct nt_cref {
    nt_ts *ts;
    th_fc_method m;
} nt_cref;

struct nt_ts {
    struct th_nats *f;
    const th_toolset_cfg *cfg;
    th_session *s; /* lists the tools; the calls' session when no
                      nats.users (every call as nats.as_user) */
    nt_cref cref[TH_FC_N];
    natsSubscription *csub[TH_FC_N]; /* NULL: not subscribed */
};

/* A NATS user's session in one toolset (nats.users), opened at its first
 * call and closed at stop; under sess_mu. */
typedef struct nt_sess {
    struct nt_sess *next;
    nt_ts *ts;
    const char *user; /* the config's string (nats.users) */
    th_session *s;
} nt_sess;

/* An async task as NATS names it: 128 random bits (hex), bound to the
 * caller that started it; tasks_mu guards the table. */
#define NT_TOK_LEN 32
#define NT_TASK_BUCKETS 1024
typedef struct nt_task {
    struct nt_task *next;
    char tok[NT_TOK_LEN + 1];
    uint64_t id;      /* the core's task id */
    th_session *s;    /* the session that started it */
    const char *user; /* its caller (the config's string) */
    int64_t ended_ms; /* monotonic ms at its end, 0 while it runs */
} nt_task;

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
    /* Reply batching (nats.reply_batching): a second connection, replies
     * only, without the first's send-at-once.  A call that arrives while
     * more requests wait behind it (its subscription's pending count) has
     * every reply of its own go there, and the library writes them out
     * together within about a millisecond: under load one write carries
     * many replies; a call alone is answered at once on nc.  NULL: off,
     * or it could not connect (said in the log).  It is made only while
     * nc is up and never reconnects by itself: it is made again when nc
     * reconnects (bulk_open), so that it never takes the place of nc on a
     * server that allows the host's user one connection, and a call's
     * replies never wait in the buffer of one that is down (call_nc). */
    natsOptions *opts_bulk;
    _Atomic(natsConnection *) nc_bulk;
    pthread_mutex_t bulk_mu; /* making one; bulk_all */
    natsConnection **bulk_all; /* every one made: destroyed at free (a
                                  call may still name a closed one) */
    size_t n_bulk_all;
    atomic_bool bulk_stopped;
    int bulk_open; /* (mu) made, their closed callback still to come */
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
    struct nt_ask *client_asks; /* (mu) tools' asks sent to their callers,
                                   waiting for an answer (on_answer) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* quiesced: no new calls (th_nats_quiesce, at SIGTERM: the tool
     * subjects are drained, what they still deliver is answered
     * `cancelled`); stopping: no handler at all (th_nats_stop) */
    atomic_bool quiesced;
    bool stopping;
    bool closed; /* the connection's last callback ran (on_closed) */
    size_t subs_open; /* subscriptions whose on_sub_done has not run */
    size_t active; /* handlers running */
    size_t calls;  /* calls not yet answered */
    struct nt_call *live_calls; /* those calls, for `ask` answers (under mu) */
    /* slow consumer lines, at most one a second (slow_note) */
    pthread_mutex_t slow_mu;
    struct timespec slow_last;
    bool slow_logged;
    uint64_t slow_events;      /* callbacks since the last line */
    int64_t slow_dropped_seen; /* the endpoints' drop total at that line */
    /* Caller identity (nats.users): per_user when the list is not empty */
    bool per_user;
    pthread_mutex_t sess_mu;
    nt_sess *sess;
    pthread_mutex_t tasks_mu;
    nt_task *tasks[NT_TASK_BUCKETS];
    /* the results bucket's HMAC-SHA256 key (nats.results_key_file) */
    uint8_t rkey[256];
    size_t rkey_len;
    /* refused requests, logged at most once a second (note_refusal) */
    pthread_mutex_t note_mu;
    struct timespec note_last;
    bool noted;
    uint64_t note_quiet; /* refusals not logged since the last line */
};

static int on_ask(void *ud, uint64_t call_id, const char *tool,
                  const uint8_t *args, size_t args_len, const char *reason);
static int on_ask_client(void *ud, uint64_t call_id, uint64_t ask_id,
                         int kind, const char *request, size_t len);

typedef struct nt_call {
    th_nats *f;
    nt_ep *ep;
    th_session *s;    /* the caller's session in ep's toolset */
    const char *user; /* the caller (the config's string) */
    char tok[NT_TOK_LEN + 1]; /* its task's name on NATS, once acked */
    struct timespec t0;
    bool acked;
    /* where each of its replies goes, in order (call_nc) */
    _Atomic(natsConnection *) nc;
    /* `ask` rules (docs/scale.md): the caller said it answers asks
     * (Toolhost-Ask: 1); while one is open, `nonce` names it */
    bool can_ask, asking;
    uint8_t asks; /* Toolhost-Client-Asks: 1 << TOOLHOST_ASK_* */
    uint64_t id; /* the core's call id, once known (under f->mu) */
    char nonce[17];
    struct nt_call *prev, *next; /* f->live_calls, under f->mu */
    char reply[];                /* the caller's reply subject */
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
    if (!f->rkey_len) {
        /* an entry nobody can check could be anyone's forgery */
        f->kv_state = -1;
        th_log_warn("nats: no nats.results_key_file: finished task results "
                    "stay on the host that ran them (the results bucket %s "
                    "is used only with a key to sign its entries)", b);
        return;
    }
    f->kv_bucket = b;
}

/* Reads the results bucket's HMAC key (nats.results_key_file): a file of
 * 32 to 256 bytes that only its owner may read.  0, or TH_ECONFIG with
 * the reason in err. */
static int rkey_load(th_nats *f, th_error *err)
{
    const char *path = f->nc_cfg->results_key_file;
    if (!path)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return th_error_set(err, TH_ECONFIG, "nats.results_key_file %s: %s",
                            path, strerror(e));
    }
    ssize_t n = -1;
    if (S_ISREG(st.st_mode) && !(st.st_mode & 077))
        n = read(fd, f->rkey, sizeof f->rkey);
    close(fd);
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077))
        return th_error_set(err, TH_ECONFIG, "nats.results_key_file %s: "
                            "must be a regular file that only its owner may "
                            "read (chmod 600)", path);
    if (n < 32 || (size_t)n >= sizeof f->rkey)
        return th_error_set(err, TH_ECONFIG, "nats.results_key_file %s: "
                            "the key must be 32 to %zu bytes (e.g. head -c "
                            "32 /dev/urandom)", path, sizeof f->rkey - 1);
    f->rkey_len = (size_t)n;
    return 0;
}

/* An entry of the results bucket: HMAC-SHA256(key, payload) || payload,
 * payload the msgpack array ["toolhost.result.v1", KEY, USER, RESULT]
 * (RESULT the reply body, bin): the MAC proves a host with the key wrote
 * it, KEY that it was written under this name, USER whose it is. */
#define NT_KV_TAG "toolhost.result.v1"
static void kv_mac(th_nats *f, const uint8_t *p, size_t n,
                   uint8_t out[SHA256_DIGEST_SIZE])
{
    struct hmac_sha256_ctx h;
    hmac_sha256_set_key(&h, f->rkey_len, f->rkey);
    hmac_sha256_update(&h, n, p);
    hmac_sha256_digest(&h, SHA256_DIGEST_SIZE, out);
}

static int kv_seal(th_nats *f, const char *key, const char *user,
                   const void *data, size_t len, th_buf *out)
{
    uint8_t mac[SHA256_DIGEST_SIZE] = {0};
    if (th_buf_append(out, mac, sizeof mac) != 0)
        return TH_ENOMEM;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, th_buf_msgpack_write);
    int e = msgpack_pack_array(&pk, 4);
    e |= th_pack_cstr(&pk, NT_KV_TAG);
    e |= th_pack_cstr(&pk, key);
    e |= th_pack_cstr(&pk, user);
    e |= msgpack_pack_bin(&pk, len);
    e |= msgpack_pack_bin_body(&pk, data, len);
    if (e)
        return TH_ENOMEM;
    kv_mac(f, out->data + sizeof mac, out->len - sizeof mac, mac);
    memcpy(out->data, mac, sizeof mac);
    return 0;
}

static bool mp_str_is(const msgpack_object *o, const char *s)
{
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
           memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

/* The result in entry v (n bytes) stored under `key`, for `user`: 0 and
 * the reply body appended to b; TH_EPERM when the entry fails its HMAC
 * (not written by a host with our key: logged) or is another user's;
 * TH_ENOMEM. */
static int kv_unseal(th_nats *f, const char *key, const char *user,
                     const uint8_t *v, size_t n, th_buf *b)
{
    uint8_t mac[SHA256_DIGEST_SIZE];
    if (n <= sizeof mac)
        goto forged;
    kv_mac(f, v + sizeof mac, n - sizeof mac, mac);
    if (!memeql_sec(mac, v, sizeof mac))
        goto forged;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    int rc = TH_EPERM;
    if (msgpack_unpack_next(&u, (const char *)v + sizeof mac,
                            n - sizeof mac, NULL) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 4) {
        const msgpack_object *a = u.data.via.array.ptr;
        if (mp_str_is(&a[0], NT_KV_TAG) && mp_str_is(&a[1], key) &&
            a[3].type == MSGPACK_OBJECT_BIN)
            rc = !mp_str_is(&a[2], user)
                     ? TH_EPERM
                     : th_buf_append(b, a[3].via.bin.ptr, a[3].via.bin.size)
                           == 0 ? 0 : TH_ENOMEM;
        else
            rc = 1; /* signed by us, but not for this key: a copy */
    }
    msgpack_unpacked_destroy(&u);
    if (rc != 1)
        return rc;
forged:
    th_log_warn("nats: the results bucket entry %s fails its check (not "
                "written under this name by a host with this "
                "nats.results_key_file): refused", key);
    return TH_EPERM;
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

/* The replicas to create the results bucket with: nats.results_replicas,
 * else min(3, the servers of the cluster as the server tells the client:
 * the URLs given and those of its INFO connect_urls, i.e. every server
 * with a route to ours).  A server that cannot place that many (not
 * clustered, fewer JetStream peers) says so when the bucket is created,
 * and kv_open asks for fewer. */
static int kv_want_replicas(th_nats *f, int *cluster)
{
    char **v = NULL;
    int n = 0;
    if (natsConnection_GetServers(f->nc, &v, &n) != NATS_OK)
        n = 1;
    for (int i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
    *cluster = n < 1 ? 1 : n;
    if (f->nc_cfg->results_replicas)
        return (int)f->nc_cfg->results_replicas;
    return *cluster > 3 ? 3 : *cluster;
}

/* Whether a failed create is the server refusing the replicas (the text
 * of its JetStream API error). */
static bool replicas_refused(void)
{
    const char *why = nats_GetLastError(NULL);
    return why && (strstr(why, "replica") || strstr(why, "insufficient "
                                                          "resources") ||
                   strstr(why, "peers"));
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
    kvStatus *ks = NULL;
    natsStatus st = natsConnection_JetStream(&f->js, f->nc, &jo);
    int cluster = 1, want = kv_want_replicas(f, &cluster), r = want;
    if (st == NATS_OK)
        st = js_KeyValue(&f->kv, f->js, f->kv_bucket);
    if (st == NATS_NOT_FOUND) {
        kvConfig kc;
        kvConfig_Init(&kc);
        kc.Bucket = f->kv_bucket;
        kc.Description = "toolhost: finished task results (HOSTID.TASKID)";
        kc.History = 1;
        kc.TTL = (int64_t)f->kv_ttl_ms * 1000000; /* ns, as max_age */
        for (;;) {
            kc.Replicas = r;
            st = js_CreateKeyValue(&f->kv, f->js, &kc);
            if (st == NATS_OK)
                break;
            if (r > 1 && replicas_refused()) {
                th_log_warn("nats: the server cannot keep the key-value "
                            "bucket %s in %d copies (%s): asking for %d",
                            f->kv_bucket, r, nats_GetLastError(NULL),
                            r - 1);
                r--;
                continue;
            }
            /* another host created it meanwhile */
            st = js_KeyValue(&f->kv, f->js, f->kv_bucket);
            break;
        }
    }
    int64_t have = 0;
    if (st == NATS_OK && kvStore_Status(&ks, f->kv) == NATS_OK) {
        have = kvStatus_Replicas(ks);
        if (have < want)
            th_log_warn("nats: the key-value bucket %s keeps %" PRId64
                        " copy(ies) of each result, fewer than the %d asked "
                        "(%s): a server lost may lose results (raise its "
                        "replicas on the server, or recreate it)",
                        f->kv_bucket, have, want,
                        f->nc_cfg->results_replicas
                            ? "nats.results_replicas"
                            : "min(3, the servers of the cluster)");
    }
    if (ks && kvStatus_TTL(ks) != (int64_t)f->kv_ttl_ms * 1000000)
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
                    "key-value bucket %s (TTL %" PRIu64 " s, %" PRId64
                    " replica(s); %d asked, %d server(s) in the cluster)",
                    f->kv_bucket, f->kv_ttl_ms / 1000, have, want, cluster);
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
 * before the caller is told: true when the bucket acknowledged the put,
 * and only then does the reply say so (Toolhost-Stored: 1).  A failure is
 * logged; the reply still goes, with Toolhost-Stored: 0. */
static bool kv_put(th_nats *f, const char *tok, const char *user,
                   const void *data, size_t len)
{
    if (!tok[0] || kv_open(f) != 1)
        return false;
    char key[80];
    snprintf(key, sizeof key, "%s.%s", f->id, tok);
    th_buf e = TH_BUF_INIT;
    natsStatus st = NATS_NO_MEMORY;
    uint64_t rev = 0;
    if (kv_seal(f, key, user, data, len, &e) == 0)
        st = kvStore_Put(&rev, f->kv, key, e.data, (int)e.len);
    th_buf_destroy(&e);
    if (st != NATS_OK)
        th_log_warn("nats: the result of task %s was not stored in %s: %s "
                    "(its caller is told: Toolhost-Stored: 0)",
                    key, f->kv_bucket, natsStatus_GetText(st));
    return st == NATS_OK;
}

/* The stored result of task `key` (HOSTID.TASKID) of `user` into b: 0,
 * TH_ENOTFOUND, TH_EPERM (another user's, or an entry that fails its
 * check), or TH_EIO (JetStream did not answer). */
static int kv_get(th_nats *f, const char *key, const char *user, th_buf *b)
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
    int rc = kv_unseal(f, key, user, kvEntry_Value(e),
                       (size_t)kvEntry_ValueLen(e), b);
    kvEntry_Destroy(e);
    return rc;
}

/* ---- Replies ------------------------------------------------------------ */

/* `tok`: the task's name (Toolhost-Task: HOSTID.TOK), or NULL/"";
 * `stored`: Toolhost-Stored 0 or 1, or -1 for none. */
static void publish_st(th_nats *f, natsConnection *nc, const char *subj,
                       const char *kind, const char *tok, int stored,
                       const void *data, size_t len)
{
    natsMsg *m = NULL;
    natsStatus st = natsMsg_Create(&m, subj, NULL, data, (int)len);
    if (st == NATS_OK)
        st = natsMsgHeader_Set(m, TH_NATS_H_KIND, kind);
    if (st == NATS_OK)
        st = natsMsgHeader_Set(m, TH_NATS_H_HOST, f->id);
    if (st == NATS_OK && tok && tok[0]) {
        char t[80];
        snprintf(t, sizeof t, "%s.%s", f->id, tok);
        st = natsMsgHeader_Set(m, TH_NATS_H_TASK, t);
    }
    if (st == NATS_OK && stored >= 0)
        st = natsMsgHeader_Set(m, TH_NATS_H_STORED, stored ? "1" : "0");
    if (st == NATS_OK) {
        st = natsConnection_PublishMsg(nc, m);
        if (st != NATS_OK && nc != f->nc) /* the batching one, just lost */
            st = natsConnection_PublishMsg(f->nc, m);
    }
    if (st != NATS_OK)
        th_log_warn("nats: reply to %s lost: %s", subj,
                    natsStatus_GetText(st));
    natsMsg_Destroy(m);
}

static void publish(th_nats *f, natsConnection *nc, const char *subj,
                    const char *kind, const char *tok, const void *data,
                    size_t len)
{
    publish_st(f, nc, subj, kind, tok, -1, data, len);
}

/* A reply in the RPC front's result form; `c`: a finished async task's
 * call, whose result is also written to the results bucket first. */
static void publish_result_ex(th_nats *f, natsConnection *nc,
                              const char *subj, const char *kind,
                              const th_result *res, const char *tok,
                              const struct nt_call *c)
{
    th_result_copy rc = th_result_view(res); /* packed at once */
    th_buf b = TH_BUF_INIT;
    if (th_codec_result_to_buf(&b, &rc) != 0) {
        th_log_error("nats: out of memory packing a reply to %s", subj);
    } else {
        int stored = -1;
        if (c && tok && tok[0])
            stored = kv_put(f, tok, c->user, b.data, b.len);
        publish_st(f, nc, subj, kind, tok, stored, b.data, b.len);
    }
    th_buf_destroy(&b);
}

static void publish_result(th_nats *f, natsConnection *nc,
                           const char *subj, const char *kind,
                           const th_result *res)
{
    publish_result_ex(f, nc, subj, kind, res, NULL, NULL);
}

static void publish_error(th_nats *f, natsConnection *nc,
                          const char *subj, int code, const char *msg)
{
    th_result r;
    memset(&r, 0, sizeof r);
    r.kind = TH_RESULT_ERROR;
    r.error = code;
    r.message = msg;
    publish_result(f, nc, subj, "result", &r);
}

/* ---- Caller identity ---------------------------------------------------- */

/* A refused request, logged at most once a second (a caller may send
 * thousands): `user` is a subject token, shown only when printable. */
static void note_refusal(th_nats *f, const char *user, const char *why)
{
    pthread_mutex_lock(&f->note_mu);
    if (f->noted && ns_since(&f->note_last) < 1000000000LL) {
        f->note_quiet++;
        pthread_mutex_unlock(&f->note_mu);
        return;
    }
    uint64_t quiet = f->note_quiet;
    f->note_quiet = 0;
    f->noted = true;
    clock_gettime(CLOCK_MONOTONIC, &f->note_last);
    pthread_mutex_unlock(&f->note_mu);
    bool shown = user && strlen(user) <= 64 && token_ok(user);
    th_log_warn("nats: a request from NATS user %s refused: %s (%" PRIu64
                " more refusal(s) not logged since the last such line; at "
                "most one line a second)",
                shown ? user : "(unprintable)", why, quiet);
}

/* The user token of a per-user subject <prefix>.u.<user>.… into out. */
static bool subject_user(th_nats *f, const char *subj, char *out, size_t n)
{
    size_t pl = strlen(f->nc_cfg->prefix);
    if (strncmp(subj, f->nc_cfg->prefix, pl) != 0 ||
        strncmp(subj + pl, ".u.", 3) != 0)
        return false;
    const char *u = subj + pl + 3, *e = strchr(u, '.');
    if (!e || e == u || (size_t)(e - u) >= n)
        return false;
    memcpy(out, u, (size_t)(e - u));
    out[e - u] = '\0';
    return true;
}

/* Whether `reply` is under the caller's inbox prefix _INBOX.<user>. (the
 * only replies the NATS server lets that user read). */
static bool reply_is_users(const char *reply, const char *user)
{
    size_t ul = strlen(user);
    return strncmp(reply, "_INBOX.", 7) == 0 &&
           strncmp(reply + 7, user, ul) == 0 && reply[7 + ul] == '.' &&
           reply[8 + ul] != '\0';
}

/* Who sent msg: the principal's name (a string of the config: one of
 * nats.users, or nats.as_user without them), or NULL when the request is
 * refused - a subject without a user, a reply subject outside the user's
 * inbox (not answered: answering it is what a forger wants), a user not
 * in nats.users (answered permission_denied).  `need_reply`: a request
 * without a reply subject is refused too. */
static const char *caller_of(th_nats *f, natsMsg *msg, bool need_reply)
{
    const char *reply = natsMsg_GetReply(msg);
    bool has_reply = reply && *reply;
    if (!f->per_user)
        return has_reply || !need_reply ? f->nc_cfg->as_user : NULL;
    char u[128];
    if (!subject_user(f, natsMsg_GetSubject(msg), u, sizeof u)) {
        note_refusal(f, NULL, "no user token in the subject");
        return NULL;
    }
    if (has_reply ? !reply_is_users(reply, u) : need_reply) {
        note_refusal(f, u, has_reply ? "its reply subject is not under "
                                       "its own inbox prefix _INBOX.<user>."
                                     : "no reply subject");
        return NULL;
    }
    for (size_t i = 0; i < f->nc_cfg->n_users; i++)
        if (strcmp(f->nc_cfg->users[i], u) == 0)
            return f->nc_cfg->users[i];
    note_refusal(f, u, "not in nats.users");
    if (has_reply)
        publish_error(f, f->nc, reply, TH_EPERM, "this NATS user is not in "
                      "nats.users of the host");
    return NULL;
}

/* The session that runs `user`'s calls in toolset ts: with nats.users one
 * per user and toolset (so tasks, toolsets, ACLs and the audit log see
 * the user), opened at its first call; else the toolset's one. */
static th_session *user_session(th_nats *f, nt_ts *ts, const char *user)
{
    if (!f->per_user)
        return ts->s;
    pthread_mutex_lock(&f->sess_mu);
    nt_sess *x = f->sess;
    while (x && !(x->ts == ts && x->user == user))
        x = x->next;
    if (!x && (x = calloc(1, sizeof *x))) {
        th_principal who;
        memset(&who, 0, sizeof who);
        who.uid = (uint32_t)-1;
        who.gid = (uint32_t)-1;
        who.user = user;
        who.toolset = ts->cfg->name;
        th_front_ops ops;
        memset(&ops, 0, sizeof ops);
        ops.front = "nats";
        ops.ask_permission = on_ask;
        ops.ask_client = on_ask_client;
        x->ts = ts;
        x->user = user;
        x->s = th_session_open(f->h, &who, &ops, ts);
        if (x->s) {
            x->next = f->sess;
            f->sess = x;
        } else {
            free(x);
            x = NULL;
        }
    }
    pthread_mutex_unlock(&f->sess_mu);
    return x ? x->s : NULL;
}

static size_t tok_bucket(const char *tok)
{
    size_t h = 0;
    for (int i = 0; i < 4 && tok[i]; i++)
        h = h * 16 + (size_t)(tok[i] <= '9' ? tok[i] - '0' : tok[i] - 'a');
    return h % NT_TASK_BUCKETS;
}

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Names c's task (core id `id`) with 128 random bits into c->tok and
 * records it for c's caller.  Entries whose task ended more than
 * host.result_ttl ago (the core has forgotten it by then) are dropped on
 * the way.  On failure c->tok stays empty: the task has no NATS name. */
static void task_add(th_nats *f, struct nt_call *c, uint64_t id)
{
    uint8_t rnd[NT_TOK_LEN / 2];
    size_t got = 0;
    while (got < sizeof rnd) {
        ssize_t r = getrandom(rnd + got, sizeof rnd - got, 0);
        if (r < 0 && errno != EINTR)
            return;
        got += r > 0 ? (size_t)r : 0;
    }
    nt_task *t = calloc(1, sizeof *t);
    if (!t)
        return;
    base16_encode_update(t->tok, sizeof rnd, rnd);
    t->id = id;
    t->s = c->s;
    t->user = c->user;
    int64_t ttl = (int64_t)f->cfg->host.result_ttl_ms, now = mono_ms();
    size_t k = tok_bucket(t->tok);
    pthread_mutex_lock(&f->tasks_mu);
    for (nt_task **pp = &f->tasks[k]; *pp;) {
        nt_task *x = *pp;
        if (x->ended_ms && now - x->ended_ms > ttl) {
            *pp = x->next;
            free(x);
        } else {
            pp = &x->next;
        }
    }
    t->next = f->tasks[k];
    f->tasks[k] = t;
    pthread_mutex_unlock(&f->tasks_mu);
    memcpy(c->tok, t->tok, sizeof c->tok);
}

static void task_ended(th_nats *f, const char *tok)
{
    if (!tok[0])
        return;
    pthread_mutex_lock(&f->tasks_mu);
    for (nt_task *x = f->tasks[tok_bucket(tok)]; x; x = x->next)
        if (strcmp(x->tok, tok) == 0)
            x->ended_ms = mono_ms();
    pthread_mutex_unlock(&f->tasks_mu);
}

/* The task named `tok`, for `user`: 0 with its session and core id,
 * TH_ENOTFOUND (no such name on this host), TH_EPERM (another caller's). */
static int task_find(th_nats *f, const char *tok, const char *user,
                     th_session **s, uint64_t *id)
{
    if (strlen(tok) != NT_TOK_LEN)
        return TH_ENOTFOUND;
    int rc = TH_ENOTFOUND;
    pthread_mutex_lock(&f->tasks_mu);
    for (nt_task *x = f->tasks[tok_bucket(tok)]; x; x = x->next)
        if (strcmp(x->tok, tok) == 0) {
            rc = strcmp(x->user, user) != 0 ? TH_EPERM : 0;
            *s = x->s;
            *id = x->id;
            break;
        }
    pthread_mutex_unlock(&f->tasks_mu);
    return rc;
}

static void tasks_free(th_nats *f)
{
    for (size_t k = 0; k < NT_TASK_BUCKETS; k++)
        while (f->tasks[k]) {
            nt_task *x = f->tasks[k];
            f->tasks[k] = x->next;
            free(x);
        }
}

/* A tool's ask_client() sent to its caller (client_ask), until answered
 * or its call ends. */
typedef struct nt_ask {
    uint64_t ask_id, call_id;
    const char *user;   /* the caller (the config's string) */
    char nonce[17];
    struct nt_ask *next;
} nt_ask;

/* (mu held) Drops the asks of call `call_id` (0: all, answering each
 * `cancelled`: the front is stopping). */
static void asks_drop_locked(th_nats *f, uint64_t call_id)
{
    for (nt_ask **p = &f->client_asks; *p;) {
        nt_ask *a = *p;
        if (call_id && a->call_id != call_id) {
            p = &a->next;
            continue;
        }
        *p = a->next;
        if (!call_id)
            th_call_client_answer(a->ask_id, TOOLHOST_ECANCELLED, NULL, 0);
        free(a);
    }
}

static void call_end(nt_call *c)
{
    th_nats *f = c->f;
    pthread_mutex_lock(&f->mu);
    if (f->client_asks)
        asks_drop_locked(f, c->id);
    if (c->prev)
        c->prev->next = c->next;
    else
        f->live_calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    f->calls--;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
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

/* The connection for a call's next reply: the one it got, unless that is
 * a reply batching connection that is no longer up (it closes when lost):
 * then the host's own, for this reply and the rest of the call's. */
static natsConnection *call_nc(nt_call *c)
{
    natsConnection *nc = atomic_load(&c->nc);
    if (nc != c->f->nc &&
        natsConnection_Status(nc) != NATS_CONN_STATUS_CONNECTED) {
        nc = c->f->nc;
        atomic_store(&c->nc, nc);
    }
    return nc;
}

static void on_event(const th_event *ev, void *ud)
{
    nt_call *c = ud;
    th_nats *f = c->f;
    switch (ev->kind) {
    case TH_EV_RESULT:
        if (ev->result->kind == TH_RESULT_RUNNING) {
            c->acked = true;
            if (ev->result->task_id && !c->tok[0])
                task_add(f, c, ev->result->task_id);
            publish_result_ex(f, call_nc(c), c->reply, "ack", ev->result,
                              c->tok, NULL);
            return;
        }
        count(c, ev->result);
        publish_result_ex(f, call_nc(c), c->reply, "result", ev->result,
                          c->tok, c->acked ? c : NULL);
        task_ended(f, c->tok);
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
            publish(f, call_nc(c), c->reply, "progress", c->tok, b.data,
                    b.len);
        th_buf_destroy(&b);
        return;
    }
    case TH_EV_DONE:
        count(c, ev->result);
        publish_result_ex(f, call_nc(c), c->reply, "result", ev->result,
                          c->tok, c->acked ? c : NULL);
        task_ended(f, c->tok);
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

/* handle_request: Toolhost-Start-By (Unix ms): the caller waits that long
 * for a host to take the call (the `took` below) and then retries
 * elsewhere or gives up - so a host that gets it later (it was stopped,
 * frozen, backed up) never starts it, and one that gets it in time says
 * so at once, before the call runs.  -1: answered, not started. */
static int req_start_by(th_nats *f, nt_ep *ep, natsMsg *msg,
                        natsConnection *rnc, const char *reply)
{
    const char *v = NULL;
    if (natsMsgHeader_Get(msg, TH_NATS_H_START_BY, &v) != NATS_OK || !v)
        return 0;
    char *end;
    long long sb = strtoll(v, &end, 10);
    if (*end || sb <= 0 || end == v) {
        publish_error(f, rnc, reply, TH_EINVAL, "Toolhost-Start-By must be "
                      "a Unix time in milliseconds");
        count_error(ep, TH_EINVAL);
        return -1;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long late = (long long)now.tv_sec * 1000 +
                     now.tv_nsec / 1000000 - sb;
    if (late > 0) {
        char why[200];
        snprintf(why, sizeof why, "this host got the call %lld ms after "
                 "its Toolhost-Start-By (the caller has moved on): not "
                 "started", late);
        publish_error(f, rnc, reply, TH_ETIMEOUT, why);
        count_error(ep, TH_ETIMEOUT);
        th_log_info("nats: %s: a request %lld ms past its "
                    "Toolhost-Start-By: not started", ep->subject, late);
        return -1;
    }
    publish(f, rnc, reply, "took", NULL, NULL, 0);
    return 0;
}

/* handle_request: the caller's absolute deadline (Unix ms) as the time
 * left in *left_ms (0: none): a request that waited past it (in the
 * server, the socket, a stopped or busy host) is not started - its
 * caller has given up - and the rest of the time left bounds the call,
 * its wait for a worker included.  -1: answered, not started. */
static int req_deadline(th_nats *f, nt_ep *ep, natsMsg *msg,
                        natsConnection *rnc, const char *reply,
                        int64_t *left_ms)
{
    const char *v = NULL;
    *left_ms = 0;
    if (natsMsgHeader_Get(msg, TH_NATS_H_DEADLINE, &v) != NATS_OK || !v)
        return 0;
    char *end;
    long long dl = strtoll(v, &end, 10);
    if (*end || dl <= 0 || end == v) {
        publish_error(f, rnc, reply, TH_EINVAL, "Toolhost-Deadline must be a "
                      "Unix time in milliseconds");
        count_error(ep, TH_EINVAL);
        return -1;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    *left_ms = dl - ((int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000);
    if (*left_ms <= 0) {
        char why[160];
        snprintf(why, sizeof why, "the caller's deadline had passed "
                 "(%lld ms ago) when this host took the call: not "
                 "started", (long long)-*left_ms);
        publish_error(f, rnc, reply, TH_ETIMEOUT, why);
        count_error(ep, TH_ETIMEOUT);
        th_log_info("nats: %s: a request past its caller's deadline "
                    "(%lld ms): not started", ep->subject,
                    (long long)-*left_ms);
        return -1;
    }
    return 0;
}

/* handle_request: the call's options from the request's headers (its
 * timeout, bounded by the caller's deadline: left_ms; progress, output
 * info, trace context; *can_ask and *asks: what the caller answers when
 * the tool asks it).  -1: answered, not started. */
static int req_opts(th_nats *f, nt_ep *ep, natsMsg *msg, natsConnection *rnc,
                    const char *reply, int64_t left_ms, th_call_opts *o,
                    bool *can_ask, uint8_t *asks)
{
    const char *v = NULL;
    if (natsMsgHeader_Get(msg, TH_NATS_H_TIMEOUT, &v) == NATS_OK && v) {
        char *end;
        long long ms = strtoll(v, &end, 10);
        if (*end || ms < 0) {
            publish_error(f, rnc, reply, TH_EINVAL, "Toolhost-Timeout-Ms must "
                          "be a number of milliseconds");
            count_error(ep, TH_EINVAL);
            return -1;
        }
        o->timeout_ms = ms;
    }
    if (left_ms > 0 && (o->timeout_ms <= 0 || o->timeout_ms > left_ms))
        o->timeout_ms = left_ms;
    /* the delivery threads are shared by every caller, as the RPC
     * server's loop is by its clients: a tool declared short runs inline
     * here (the core times it and sends one that holds the thread too
     * long to the workers), any other goes to a worker */
    o->short_inline = true;
    if (natsMsgHeader_Get(msg, TH_NATS_H_PROGRESS, &v) == NATS_OK && v &&
        strcmp(v, "0") == 0)
        o->no_progress = true;
    if (natsMsgHeader_Get(msg, TH_NATS_H_OUTPUT_INFO, &v) == NATS_OK && v &&
        strcmp(v, "1") == 0)
        o->output_info = true;
    /* W3C trace context for the audit log; msg outlives th_call_start */
    if (natsMsgHeader_Get(msg, "traceparent", &v) == NATS_OK && v)
        o->traceparent = v;
    *can_ask = natsMsgHeader_Get(msg, TH_NATS_H_ASK, &v) == NATS_OK &&
               v && strcmp(v, "1") == 0;
    /* what the caller answers when the tool asks it (client_ask) */
    *asks = 0;
    if (natsMsgHeader_Get(msg, TH_NATS_H_CLIENT_ASKS, &v) == NATS_OK && v) {
        *asks |= strstr(v, "sampling") ? 1u << TOOLHOST_ASK_SAMPLING : 0;
        *asks |= strstr(v, "form") ? 1u << TOOLHOST_ASK_FORM : 0;
    }
    return 0;
}

/* handle_request: the call started (c: its record, not yet listed; the
 * request's body its arguments), or answered on rnc to reply and ended. */
static void req_start(th_nats *f, nt_call *c, natsMsg *msg,
                      natsConnection *rnc, const char *reply,
                      const th_call_opts *o)
{
    nt_ep *ep = c->ep;
    const uint8_t *data = (const uint8_t *)natsMsg_GetData(msg);
    size_t len = (size_t)natsMsg_GetDataLength(msg);
    static const uint8_t empty_map = 0x80;
    if (!len) { /* no body: no arguments */
        data = &empty_map;
        len = 1;
    }
    c->s = user_session(f, ep->ts, c->user);
    /* the call's id before it starts, and the call in live_calls under
     * it: an ask (on_ask, from this thread or a pool worker) finds it */
    th_call_req req;
    if (c->s)
        c->id = th_call_create(&req, c->s, ep->tool, data, len, o,
                               on_event, c);
    pthread_mutex_lock(&f->mu);
    f->calls++;
    c->next = f->live_calls;
    if (c->next)
        c->next->prev = c;
    f->live_calls = c;
    pthread_mutex_unlock(&f->mu);
    if (!c->s) {
        publish_error(f, rnc, reply, TH_ENOMEM, "out of memory");
        call_end(c);
        return;
    }
    int started = th_call_submit(&req);
    if (started != 0) { /* the session closing: the host is stopping */
        publish_error(f, rnc, reply, TH_EBUSY, "the host is stopping");
        call_end(c);
    }
}

/* A request for endpoint ep: on its queue subject (on_request) or on the
 * host's own call subject (on_direct).  Takes msg. */
static void handle_request(th_nats *f, nt_ep *ep, natsMsg *msg,
                           natsConnection *rnc)
{
    const char *reply = natsMsg_GetReply(msg);
    if (!reply || !*reply) {
        th_log_debug("nats: a request on %s without a reply subject: "
                     "ignored", ep->subject);
        natsMsg_Destroy(msg);
        return;
    }
    /* who calls (the user token of the subject, which the NATS server
     * lets only that user publish on), and a reply subject of theirs */
    const char *user = caller_of(f, msg, true);
    if (!user) {
        count_error(ep, TH_EPERM);
        natsMsg_Destroy(msg);
        return;
    }
    bool entered = handler_enter(f);
    if (!entered || atomic_load(&f->quiesced)) {
        /* stopping: a request the server delivered before it saw our
         * unsubscribe (th_nats_quiesce drains) is answered, never
         * dropped */
        if (entered)
            handler_leave(f);
        publish_error(f, rnc, reply, TH_ECANCELLED,
                      "the host is stopping: the call was not started");
        natsMsg_Destroy(msg);
        return;
    }
    atomic_fetch_add(&ep->requests, 1);
    th_call_opts o;
    memset(&o, 0, sizeof o);
    int64_t left_ms = 0;
    bool can_ask = false;
    uint8_t asks = 0;
    if (req_start_by(f, ep, msg, rnc, reply) != 0 ||
        req_deadline(f, ep, msg, rnc, reply, &left_ms) != 0 ||
        req_opts(f, ep, msg, rnc, reply, left_ms, &o, &can_ask, &asks) != 0)
        goto out;
    size_t rlen = strlen(reply);
    nt_call *c = malloc(sizeof *c + rlen + 1);
    if (!c) {
        publish_error(f, rnc, reply, TH_ENOMEM, "out of memory");
        goto out;
    }
    memset(c, 0, sizeof *c);
    memcpy(c->reply, reply, rlen + 1);
    c->f = f;
    c->nc = rnc;
    c->ep = ep;
    c->user = user;
    c->can_ask = can_ask;
    c->asks = asks;
    clock_gettime(CLOCK_MONOTONIC, &c->t0);
    req_start(f, c, msg, rnc, reply, &o);
out:
    natsMsg_Destroy(msg);
    handler_leave(f);
}

/* Where the replies of a call that sub delivers now go (nats.reply_batching,
 * nc_bulk): the batching connection while more requests wait on sub - the
 * library writes what they send together - and it is up, else the
 * connection that sends at once. */
static natsConnection *reply_conn(th_nats *f, natsSubscription *sub)
{
    int msgs = 0, bytes = 0;
    natsConnection *b = atomic_load(&f->nc_bulk);
    if (b && natsSubscription_GetPending(sub, &msgs, &bytes) == NATS_OK &&
        msgs > 0 && natsConnection_Status(b) == NATS_CONN_STATUS_CONNECTED)
        return b;
    return f->nc;
}

static void on_request(natsConnection *nc, natsSubscription *sub,
                       natsMsg *msg, void *closure)
{
    (void)nc;
    nt_ep *ep = closure;
    handle_request(ep->f, ep, msg, reply_conn(ep->f, sub));
}

/* <prefix>[.u.<user>].host.<id>.call.<toolset>.<tool>: a call addressed
 * to this host (a caller's retry that must not reach the host that did
 * not take the call in time).  The endpoint must be served now. */
static void on_direct(natsConnection *nc, natsSubscription *sub,
                      natsMsg *msg, void *closure)
{
    (void)nc;
    th_nats *f = closure;
    const char *subj = natsMsg_GetSubject(msg);
    const char *p = strstr(subj, ".call.");
    const char *ts = p ? p + 6 : NULL;
    const char *dot = ts ? strchr(ts, '.') : NULL;
    nt_ep *ep = NULL;
    if (dot && !strchr(dot + 1, '.')) {
        pthread_mutex_lock(&f->eps_mu);
        for (size_t i = 0; i < f->n_eps && !ep; i++) {
            nt_ep *e = f->eps[i];
            const char *tn = e->ts->cfg->name;
            if (e->live && strlen(tn) == (size_t)(dot - ts) &&
                strncmp(tn, ts, (size_t)(dot - ts)) == 0 &&
                strcmp(e->tool, dot + 1) == 0)
                ep = e;
        }
        pthread_mutex_unlock(&f->eps_mu);
    }
    if (ep) { /* (endpoints are freed only at stop, after the handlers) */
        handle_request(f, ep, msg, reply_conn(f, sub));
        return;
    }
    const char *reply = natsMsg_GetReply(msg);
    if (reply && *reply && caller_of(f, msg, true))
        publish_error(f, f->nc, reply, TH_ENOTFOUND, "this host serves no "
                      "such tool (<prefix>.host.<id>.call.<toolset>.<tool>)");
    natsMsg_Destroy(msg);
}

/* ---- Resources, prompts and completion --------------------------------- */

/* <prefix>[.u.<user>].<toolset>.{resources.list, resources.templates,
 * resources.read, prompts.list, prompts.get, completion.complete} in the
 * queue group: what the plugins of the toolset offer besides tools
 * (docs/scale.md, "Resources, prompts and completion").  The body is the
 * msgpack-RPC method's params array (empty: []); the reply, on the
 * caller's inbox, is its result with Toolhost-Kind: content, or
 * {ok: false, error: {code, message}} with Toolhost-Kind: result, as a
 * refused call's.  Served in the caller's session of the toolset
 * (user_session), so it sees the plugins of the toolsets it may use and
 * nothing else; the plugin's read(), get() or complete() runs on this
 * delivery thread (plugin.h: they never block).  An answer past the
 * server's max_payload could not be delivered: it is refused
 * (limit_exceeded) and logged instead. */

static void sub_track(th_nats *f, natsSubscription *sub);
static const char *tf(natsStatus st);

/* Room left in a message for its headers and the error form's keys. */
#define NT_CONTENT_HEADROOM 256

static void on_content(natsConnection *nc, natsSubscription *sub,
                       natsMsg *msg, void *closure)
{
    (void)sub;
    nt_cref *cr = closure;
    nt_ts *ts = cr->ts;
    th_nats *f = ts->f;
    const char *method = th_fc_names[cr->m];
    const char *reply = natsMsg_GetReply(msg);
    if (!reply || !*reply) { /* nowhere to answer: nothing to do */
        natsMsg_Destroy(msg);
        return;
    }
    /* who asks (the user token, which only that user may publish on),
     * and a reply subject of theirs: else not answered (caller_of) */
    const char *user = caller_of(f, msg, true);
    if (!user) {
        natsMsg_Destroy(msg);
        return;
    }
    bool entered = handler_enter(f);
    if (!entered || atomic_load(&f->quiesced)) {
        if (entered)
            handler_leave(f);
        publish_error(f, nc, reply, TH_ECANCELLED,
                      "the host is stopping: the request was not served");
        natsMsg_Destroy(msg);
        return;
    }
    const char *data = natsMsg_GetData(msg);
    size_t len = (size_t)natsMsg_GetDataLength(msg);
    int64_t maxp = natsConnection_GetMaxPayload(nc);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    static const char empty_array = (char)0x90;
    if (!len) { /* no body: no params */
        data = &empty_array;
        len = 1;
    }
    size_t off = 0;
    th_buf r = TH_BUF_INIT;
    th_error err;
    th_error_clear(&err);
    int rc;
    if (msgpack_unpack_next(&up, data, len, &off) != MSGPACK_UNPACK_SUCCESS ||
        off != len) {
        rc = th_error_set(&err, TH_EINVAL, "%s: the body must be one msgpack "
                          "value, the params array (%zu bytes that are not)",
                          method, len);
    } else if (up.data.type != MSGPACK_OBJECT_ARRAY) {
        rc = th_error_set(&err, TH_EINVAL, "%s: the body must be the params "
                          "array (as msgpack-RPC's), got %s", method,
                          th_rpc_obj_kind(&up.data));
    } else {
        th_session *s = user_session(f, ts, user);
        /* the blocks may fill half a message, as on the RPC front half
         * of a client's output budget */
        size_t budget = maxp > 1 ? (size_t)maxp / 2 : 0;
        rc = s ? th_front_content(s, cr->m, &up.data, budget, &r, &err)
               : th_error_set(&err, TH_ENOMEM, "out of memory");
    }
    msgpack_unpacked_destroy(&up);
    if (rc == 0 && maxp > 0 &&
        r.len + NT_CONTENT_HEADROOM > (uint64_t)maxp) {
        char why[200];
        snprintf(why, sizeof why, "its answer to %s on toolset %s (%zu "
                 "bytes) is past the NATS server's max_payload (%lld "
                 "bytes)", method, ts->cfg->name, r.len, (long long)maxp);
        note_refusal(f, user, why);
        rc = th_error_set(&err, TH_ELIMIT, "the answer (%zu bytes) is past "
                          "the NATS server's max_payload (%lld bytes): "
                          "refused", r.len, (long long)maxp);
    }
    if (rc == 0)
        publish(f, nc, reply, "content", NULL, r.data, r.len);
    else
        publish_error(f, nc, reply, rc, err.msg);
    th_buf_destroy(&r);
    natsMsg_Destroy(msg);
    handler_leave(f);
}

/* th_nats_start: the content subjects of toolset ts.  0, or the error
 * set. */
static int subscribe_content(th_nats *f, nt_ts *ts, th_error *err)
{
    for (int m = 0; m < TH_FC_N; m++) {
        char subj[512];
        int n = snprintf(subj, sizeof subj, "%s%s.%s.%s", f->nc_cfg->prefix,
                         f->per_user ? ".u.*" : "", ts->cfg->name,
                         th_fc_names[m]);
        if (n < 0 || (size_t)n >= sizeof subj)
            return th_error_set(err, TH_ECONFIG, "nats: the subject of "
                                "toolset %s is too long", ts->cfg->name);
        ts->cref[m] = (nt_cref){.ts = ts, .m = (th_fc_method)m};
        natsStatus st = natsConnection_QueueSubscribe(
            &ts->csub[m], f->nc, subj, QUEUE, on_content, &ts->cref[m]);
        if (st != NATS_OK) {
            ts->csub[m] = NULL;
            return th_error_set(err, TH_EIO, "nats: cannot subscribe to %s: "
                                "%s", subj, tf(st));
        }
        sub_track(f, ts->csub[m]);
    }
    return 0;
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
    nt_call *c;
    pthread_mutex_lock(&f->mu);
    for (c = f->live_calls; c && c->id != call_id; c = c->next)
        ;
    bool can = c && c->can_ask && !c->asking;
    char reply[256] = "", permit[300] = "";
    natsConnection *cnc = c ? call_nc(c) : f->nc; /* after its `took` */
    if (can) {
        uint8_t rnd[8];
        if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
            can = false; /* no unguessable name: do not ask */
        else
            base16_encode_update(c->nonce, sizeof rnd, rnd);
        c->nonce[2 * sizeof rnd] = '\0';
        c->asking = can;
        snprintf(reply, sizeof reply, "%s", c->reply);
        if (f->per_user) /* the caller's own tree: only it may answer */
            snprintf(permit, sizeof permit,
                     "%s.u.%s.host.%s.permit.%" PRIu64 ".%s",
                     f->nc_cfg->prefix, c->user, f->id, call_id, c->nonce);
        else
            snprintf(permit, sizeof permit,
                     "%s.host.%s.permit.%" PRIu64 ".%s", f->nc_cfg->prefix,
                     f->id, call_id, c->nonce);
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
        st = natsConnection_PublishMsg(cnc, m);
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
/* th_front_ops.ask_client: a tool's sampling or form, to a caller that
 * said it answers that kind (Toolhost-Client-Asks): a `client_ask`
 * message on its reply subject (header Toolhost-Ask-Kind, body the
 * request as msgpack), NATS reply subject
 * <prefix>[.u.<user>].host.<id>.answer.<ask_id>.<nonce>, where the caller
 * publishes its answer (on_answer).  Any other caller: the tool hears it
 * cannot ask (nonzero). */
static int on_ask_client(void *ud, uint64_t call_id, uint64_t ask_id,
                         int kind, const char *request, size_t len)
{
    nt_ts *ts = ud;
    th_nats *f = ts->f;
    json_t *j = json_loadb(request, len, 0, NULL);
    th_buf b = TH_BUF_INIT;
    int bad = !j || th_json_to_msgpack(j, &b) != 0;
    json_decref(j);
    nt_ask *a = bad ? NULL : calloc(1, sizeof *a);
    uint8_t rnd[8];
    if (!a || getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        free(a);
        th_buf_destroy(&b);
        return -1;
    }
    base16_encode_update(a->nonce, sizeof rnd, rnd);
    a->nonce[2 * sizeof rnd] = '\0';
    a->ask_id = ask_id;
    char reply[256] = "", answer[320] = "";
    natsConnection *cnc = NULL;
    pthread_mutex_lock(&f->mu);
    nt_call *c = f->live_calls;
    uint64_t root = 0;
    for (; c && c->id != call_id; c = c->next)
        ;
    if (!c) { /* a call a tool made: its outermost call's caller */
        pthread_mutex_unlock(&f->mu);
        root = ts->s ? th_call_origin(ts->s, call_id) : 0;
        pthread_mutex_lock(&f->mu);
        for (c = f->live_calls; c && root && c->id != root; c = c->next)
            ;
        if (!root)
            c = NULL;
    }
    bool can = c && (c->asks & (1u << kind));
    if (can) {
        a->call_id = c->id;
        a->user = c->user;
        a->next = f->client_asks;
        f->client_asks = a;
        snprintf(reply, sizeof reply, "%s", c->reply);
        cnc = atomic_load(&c->nc);
        if (f->per_user)
            snprintf(answer, sizeof answer,
                     "%s.u.%s.host.%s.answer.%" PRIu64 ".%s",
                     f->nc_cfg->prefix, c->user, f->id, ask_id, a->nonce);
        else
            snprintf(answer, sizeof answer,
                     "%s.host.%s.answer.%" PRIu64 ".%s", f->nc_cfg->prefix,
                     f->id, ask_id, a->nonce);
    }
    pthread_mutex_unlock(&f->mu);
    if (!can) {
        free(a);
        th_buf_destroy(&b);
        return -1;
    }
    /* (as call_nc, without the call: it may end meanwhile) */
    if (cnc != f->nc &&
        natsConnection_Status(cnc) != NATS_CONN_STATUS_CONNECTED)
        cnc = f->nc;
    natsMsg *m = NULL;
    natsStatus st = natsMsg_Create(&m, reply, answer, (const char *)b.data,
                                   (int)b.len);
    if (st == NATS_OK)
        st = natsMsgHeader_Set(m, TH_NATS_H_KIND, "client_ask");
    if (st == NATS_OK)
        st = natsMsgHeader_Set(m, TH_NATS_H_HOST, f->id);
    if (st == NATS_OK)
        st = natsMsgHeader_Set(m, TH_NATS_H_ASK_KIND,
                               kind == TOOLHOST_ASK_SAMPLING ? "sampling"
                                                             : "form");
    if (st == NATS_OK)
        st = natsConnection_PublishMsg(cnc, m);
    natsMsg_Destroy(m);
    th_buf_destroy(&b);
    if (st != NATS_OK) {
        th_log_warn("nats: a tool's ask to its caller was lost: %s",
                    natsStatus_GetText(st));
        /* (the entry goes with its call; the tool hears nothing: fail
         * it now) */
        th_call_client_answer(ask_id, TOOLHOST_ECANCELLED, NULL, 0);
    }
    return 0;
}

/* The last two tokens of an answer subject (...permit.<call_id>.<nonce>,
 * ...answer.<ask_id>.<nonce>): the number, and *nonce at the '.' before
 * the nonce (NULL when there is none). */
static uint64_t subject_id_nonce(const char *subj, const char **nonce)
{
    *nonce = strrchr(subj, '.');
    const char *p = *nonce;
    while (p && p > subj && p[-1] != '.')
        p--;
    return p ? strtoull(p, NULL, 10) : 0;
}

/* The end of an answer handler (on_answer, on_permit): {ok: true} with
 * Toolhost-Kind `kind` to a request's reply subject, or the error of rc
 * (`bad`: TH_EINVAL's text, `gone`: TH_ENOTFOUND's); then msg is freed
 * and the handler left. */
static void answered(th_nats *f, natsMsg *msg, int rc, const char *kind,
                     const char *bad, const char *gone)
{
    const char *reply = natsMsg_GetReply(msg);
    if (reply && *reply) {
        if (rc == 0) {
            static const uint8_t ok[] = {0x81, 0xa2, 'o', 'k', 0xc3};
            publish(f, f->nc, reply, kind, NULL, ok, sizeof ok);
        } else {
            publish_error(f, f->nc, reply, rc,
                          rc == TH_EINVAL  ? bad
                          : rc == TH_EPERM ? "this ask was sent to another "
                                             "caller: only its caller may "
                                             "answer it"
                                           : gone);
        }
    }
    natsMsg_Destroy(msg);
    handler_leave(f);
}

/* <prefix>[.u.<user>].host.<id>.answer.<ask_id>.<nonce>: a caller's
 * answer to a client_ask (body: the answer as msgpack; header
 * Toolhost-Error: 1 for an error).  Only the caller that was asked. */
static void on_answer(natsConnection *nc, natsSubscription *sub,
                      natsMsg *msg, void *closure)
{
    (void)nc;
    (void)sub;
    th_nats *f = closure;
    const char *user = caller_of(f, msg, false);
    if (!user || !handler_enter(f)) {
        natsMsg_Destroy(msg);
        return;
    }
    const char *nonce = NULL;
    uint64_t id = subject_id_nonce(natsMsg_GetSubject(msg), &nonce);
    pthread_mutex_lock(&f->mu);
    nt_ask **pp = &f->client_asks;
    while (*pp && !((*pp)->ask_id == id && nonce &&
                    strcmp((*pp)->nonce, nonce + 1) == 0))
        pp = &(*pp)->next;
    nt_ask *a = *pp;
    bool theirs = a && strcmp(a->user, user) != 0;
    if (a && !theirs)
        *pp = a->next;
    else
        a = NULL;
    pthread_mutex_unlock(&f->mu);
    int rc = theirs ? TH_EPERM : !a ? TH_ENOTFOUND : 0;
    if (a) {
        const char *ev = NULL;
        bool error = natsMsgHeader_Get(msg, TH_NATS_H_ERROR, &ev) ==
                         NATS_OK && ev && strcmp(ev, "1") == 0;
        th_error err;
        json_t *j = th_json_from_msgpack_lossy(
            (const uint8_t *)natsMsg_GetData(msg),
            (size_t)natsMsg_GetDataLength(msg), &err);
        char *txt = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        json_decref(j);
        if (!txt)
            rc = TH_EINVAL;
        th_call_client_answer(a->ask_id,
                              !txt    ? TOOLHOST_FAILED
                              : error ? TOOLHOST_FAILED
                                      : 0,
                              txt ? txt : "\"the answer was not msgpack\"",
                              txt ? strlen(txt) : 27);
        free(txt);
        free(a);
    }
    if (theirs)
        note_refusal(f, user, "it answered an ask sent to another user");
    answered(f, msg, rc, "answer", "the answer must be msgpack",
             "no tool waits for this answer (answered, or its call ended)");
}

static void on_permit(natsConnection *nc, natsSubscription *sub,
                      natsMsg *msg, void *closure)
{
    (void)nc;
    (void)sub;
    th_nats *f = closure;
    const char *user = caller_of(f, msg, false);
    if (!user || !handler_enter(f)) {
        natsMsg_Destroy(msg);
        return;
    }
    const char *nonce = NULL;
    uint64_t id = subject_id_nonce(natsMsg_GetSubject(msg), &nonce);
    char body[16] = "";
    int len = natsMsg_GetDataLength(msg);
    if (len > 0 && len < (int)sizeof body)
        memcpy(body, natsMsg_GetData(msg), (size_t)len);
    bool allow = strcmp(body, "allow") == 0;
    bool valid = allow || strcmp(body, "deny") == 0;
    th_session *s = NULL;
    bool theirs = false;
    pthread_mutex_lock(&f->mu);
    nt_call *c = f->live_calls;
    for (; c && !(c->id == id && c->asking && nonce &&
                  strcmp(c->nonce, nonce + 1) == 0);
         c = c->next)
        ;
    /* only the caller that was asked answers (its subject tree) */
    theirs = c && strcmp(c->user, user) != 0;
    if (c && valid && !theirs) {
        c->asking = false;
        s = c->s;
    }
    pthread_mutex_unlock(&f->mu);
    int rc = !valid   ? TH_EINVAL
             : theirs ? TH_EPERM
             : !s     ? TH_ENOTFOUND
                      : th_permission_answer(s, id, allow);
    if (theirs)
        note_refusal(f, user, "it answered an ask sent to another user");
    answered(f, msg, rc, "permit", "the body must be allow or deny",
             "no call waits for this answer (answered, timed out or ended)");
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


/* A finished task's result, encoded as the wire's result map into b. */
static int task_result_buf(th_session *s, uint64_t id, th_buf *b)
{
    th_result_copy r;
    memset(&r, 0, sizeof r);
    int rc = th_task_result(s, id, &r);
    if (rc == 0)
        rc = th_codec_result_to_buf(b, &r);
    th_result_copy_destroy(&r);
    return rc;
}

static void on_task(natsConnection *nc, natsSubscription *sub, natsMsg *msg,
                    void *closure)
{
    (void)nc;
    (void)sub;
    th_nats *f = closure;
    const char *reply = natsMsg_GetReply(msg);
    const char *user = caller_of(f, msg, true);
    if (!user || !handler_enter(f)) {
        natsMsg_Destroy(msg);
        return;
    }
    const char *subj = natsMsg_GetSubject(msg);
    const char *op = strrchr(subj, '.');
    op = op ? op + 1 : "";
    char tok[NT_TOK_LEN + 8] = "";
    int len = natsMsg_GetDataLength(msg);
    if (len > 0 && len < (int)sizeof tok)
        memcpy(tok, natsMsg_GetData(msg), (size_t)len);
    if (!tok[0]) {
        publish_error(f, f->nc, reply, TH_EINVAL, "the body must be a task id "
                      "(the part after the host id in Toolhost-Task)");
        goto out;
    }
    th_session *s = NULL;
    uint64_t id = 0;
    int rc = strcmp(op, "get") != 0 && strcmp(op, "cancel") != 0 &&
                     strcmp(op, "result") != 0
                 ? TH_EINVAL
                 : task_find(f, tok, user, &s, &id);
    th_buf b = TH_BUF_INIT;
    if (rc == 0 && strcmp(op, "get") == 0) {
        task_pack x = {&b, 0};
        rc = th_task_get(s, id, pack_task_cb, &x);
        if (rc == 0)
            rc = x.rc;
    } else if (rc == 0 && strcmp(op, "cancel") == 0) {
        rc = th_task_cancel(s, id);
        if (rc == 0) {
            msgpack_packer pk;
            msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
            msgpack_pack_map(&pk, 1);
            th_pack_cstr(&pk, "ok");
            msgpack_pack_true(&pk);
        }
    } else if (rc == 0) {
        rc = task_result_buf(s, id, &b);
    }
    if (rc == TH_ENOTFOUND && strcmp(op, "result") == 0) {
        /* dropped here already (host.task_keep): the bucket may have it */
        char key[96];
        snprintf(key, sizeof key, "%s.%s", f->id, tok);
        th_buf_reset(&b);
        rc = kv_get(f, key, user, &b);
        if (rc != TH_EPERM)
            rc = rc == 0 ? 0 : TH_ENOTFOUND;
    }
    if (rc == TH_EPERM)
        note_refusal(f, user, "it asked for another caller's task");
    if (rc == 0)
        publish(f, f->nc, reply, "task", tok, b.data, b.len);
    else
        publish_error(f, f->nc, reply, rc,
                      rc == TH_ENOTFOUND ? "no such task on this host"
                      : rc == TH_EPERM   ? "this task is not yours: only "
                                           "the caller that started it may "
                                           "use it"
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
 * answer comes even when the task's host has gone.  Only to the caller
 * that started it (the task map, or the entry's signed user). */
static void on_any_result(natsConnection *nc, natsSubscription *sub,
                          natsMsg *msg, void *closure)
{
    (void)nc;
    (void)sub;
    th_nats *f = closure;
    const char *reply = natsMsg_GetReply(msg);
    const char *user = caller_of(f, msg, true);
    if (!user || !handler_enter(f)) {
        natsMsg_Destroy(msg);
        return;
    }
    char key[96] = "";
    int len = natsMsg_GetDataLength(msg);
    if (len > 0 && len < (int)sizeof key)
        memcpy(key, natsMsg_GetData(msg), (size_t)len);
    const char *dot = strchr(key, '.');
    bool shape = dot && dot != key && dot[1] && !strchr(dot + 1, '.');
    for (const char *p = key; shape && *p; p++)
        shape = (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
                (*p >= 'A' && *p <= 'Z') || *p == '-' || *p == '_' ||
                *p == '.';
    if (!shape) {
        publish_error(f, f->nc, reply, TH_EINVAL, "the body must be a task id "
                      "HOSTID.TASKID (the Toolhost-Task header of the ack)");
        goto out;
    }
    th_buf b = TH_BUF_INIT;
    int rc = TH_ENOTFOUND;
    const char *tok = dot + 1;
    if ((size_t)(dot - key) == strlen(f->id) &&
        strncmp(key, f->id, (size_t)(dot - key)) == 0) {
        th_session *s = NULL;
        uint64_t id = 0;
        rc = task_find(f, tok, user, &s, &id);
        if (rc == 0)
            rc = task_result_buf(s, id, &b);
    }
    if (rc == TH_ENOTFOUND) {
        th_buf_reset(&b);
        rc = kv_get(f, key, user, &b);
    }
    if (rc == TH_EPERM)
        note_refusal(f, user, "it asked for a result that is not its own "
                     "(another caller's, or an entry that fails its check)");
    if (rc == 0)
        publish(f, f->nc, reply, "task", tok, b.data, b.len);
    else if (rc == TH_ESTATE)
        publish_error(f, f->nc, reply, rc, "the task is still running");
    else if (rc == TH_EPERM)
        publish_error(f, f->nc, reply, rc, "this result is not yours, or its "
                      "stored entry was not written by a host: refused");
    else if (rc == TH_ENOTFOUND)
        publish_error(f, f->nc, reply, rc,
                      f->kv_state == 1
                          ? "no stored result for this task: it is still "
                            "running on its host, or unknown, or older than "
                            "nats.results_ttl"
                          : "no stored result for this task (no results "
                            "bucket: ask its host, "
                            "<prefix>.host.HOSTID.tasks.result)");
    else
        publish_error(f, f->nc, reply, rc, th_strerror(rc));
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

/* A reply batching connection's last callback: lost (it does not
 * reconnect by itself: bulk_open makes another when nc reconnects), refused
 * by the server after it connected (its connection limit), or closed at
 * stop. */
static void on_bulk_closed(natsConnection *nc, void *ud)
{
    th_nats *f = ud;
    const char *why = NULL;
    natsStatus st = natsConnection_GetLastError(nc, &why);
    pthread_mutex_lock(&f->mu);
    bool stopping = f->stopping;
    f->bulk_open--;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    if (!stopping)
        th_log_warn("nats: reply batching off: its connection closed (%s); "
                    "every reply goes on the host's connection until that "
                    "one reconnects",
                    st != NATS_OK && why && *why ? why : "disconnected");
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

static void bulk_open(th_nats *f, bool say);

static void on_reconnected(natsConnection *nc, void *ud)
{
    char url[256] = "";
    natsConnection_GetConnectedUrl(nc, url, sizeof url);
    th_log_info("nats: reconnected to %s; subscriptions restored", url);
    bulk_open(ud, true); /* after nc: never in its place */
}

/* The first connect, made in the background (the server was not up when
 * the host started); the subscriptions made meanwhile are sent now. */
static void on_late_connect(natsConnection *nc, void *ud)
{
    char url[256] = "";
    natsConnection_GetConnectedUrl(nc, url, sizeof url);
    th_log_info("nats: connected to %s", url);
    bulk_open(ud, true);
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
    n += 4; /* per user: <prefix>.u.*.<toolset>.<tool> */
    ep->subject = malloc(n);
    ep->tool = strdup(tool);
    if (!ep->subject || !ep->tool) {
        free(ep->subject);
        free(ep->tool);
        free(ep);
        return NULL;
    }
    snprintf(ep->subject, n, "%s%s.%s.%s", f->nc_cfg->prefix,
             f->per_user ? ".u.*" : "", ts->cfg->name, tool);
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
    bool v = f->stopping || atomic_load(&f->quiesced);
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
                    ts->cfg->name, f->per_user ? "-" : f->nc_cfg->as_user);
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
    for (size_t i = 0; f->ts && i < f->n_ts; i++)
        for (int m = 0; m < TH_FC_N; m++)
            if (f->ts[i].csub[m])
                natsSubscription_Destroy(f->ts[i].csub[m]);
    while (f->sess) {
        nt_sess *x = f->sess;
        f->sess = x->next;
        free(x);
    }
    pthread_mutex_lock(&f->mu);
    asks_drop_locked(f, 0);
    pthread_mutex_unlock(&f->mu);
    tasks_free(f);
    memset(f->rkey, 0, sizeof f->rkey);
    for (size_t i = 0; i < f->n_bulk_all; i++)
        natsConnection_Destroy(f->bulk_all[i]);
    free(f->bulk_all);
    natsOptions_Destroy(f->opts_bulk);
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
    pthread_mutex_destroy(&f->slow_mu);
    pthread_mutex_destroy(&f->sess_mu);
    pthread_mutex_destroy(&f->tasks_mu);
    pthread_mutex_destroy(&f->note_mu);
    pthread_mutex_destroy(&f->bulk_mu);
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

/* The options of the host's connection, or with `replies` of its reply
 * batching connection (nc_bulk): the same server and credentials, replies
 * written by the library's flusher, callbacks of its own. */
static natsStatus set_options(th_nats *f, natsOptions *o, bool replies)
{
    const th_nats_cfg *m = f->nc_cfg;
    natsStatus st = th_nats_set_urls(o, f->nc_cfg->listen);
    char name[96];
    snprintf(name, sizeof name, "toolhost-%s%s", f->id,
             replies ? "-replies" : "");
    if (st == NATS_OK)
        st = natsOptions_SetName(o, name);
    if (st == NATS_OK && m->user)
        st = natsOptions_SetUserInfo(o, m->user, m->password);
    if (st == NATS_OK && m->token)
        st = natsOptions_SetToken(o, m->token);
    if (st == NATS_OK && m->creds)
        st = natsOptions_SetUserCredentialsFromFiles(o, m->creds, NULL);
    if (st == NATS_OK && (m->tls_ca || m->tls_cert ||
                          strncmp(f->nc_cfg->listen, "tls://", 6) == 0))
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
    if (replies) {
        /* written within about 1 ms by the library's flusher, together
         * with whatever else was published meanwhile */
        if (st == NATS_OK)
            st = natsOptions_SetSendAsap(o, false);
        if (st == NATS_OK) /* lost: closed; made again after nc */
            st = natsOptions_SetAllowReconnect(o, false);
        if (st == NATS_OK)
            st = natsOptions_SetClosedCB(o, on_bulk_closed, f);
        return st;
    }
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

/* The reply batching connection (nats.reply_batching): made while the
 * host's own connection is up - at start, and again each time that one
 * (re)connects after this one was lost - never before it (a server that
 * allows the host's user one connection gives it to nc).  One that cannot
 * be made, or that the server closes, leaves batching off until then: every
 * reply on the host's connection (said in the log).  `say`: log when it is
 * on (the serving line says so at start). */
static void bulk_open(th_nats *f, bool say)
{
    if (f->nc_cfg->no_reply_batching)
        return;
    pthread_mutex_lock(&f->bulk_mu);
    natsConnection *cur = atomic_load(&f->nc_bulk);
    if (atomic_load(&f->bulk_stopped) ||
        (cur && !natsConnection_IsClosed(cur))) {
        pthread_mutex_unlock(&f->bulk_mu);
        return;
    }
    natsStatus st = NATS_OK;
    natsConnection **all =
        realloc(f->bulk_all, (f->n_bulk_all + 1) * sizeof *all);
    if (!all)
        st = NATS_NO_MEMORY;
    else
        f->bulk_all = all;
    if (st == NATS_OK && !f->opts_bulk) {
        st = natsOptions_Create(&f->opts_bulk);
        if (st == NATS_OK)
            st = set_options(f, f->opts_bulk, true);
    }
    natsConnection *nc = NULL;
    if (st == NATS_OK)
        st = natsConnection_Connect(&nc, f->opts_bulk);
    if (st != NATS_OK) {
        const char *why = nats_GetLastError(NULL);
        th_log_warn("nats: reply batching off: its second connection "
                    "failed (%s%s%s); every reply goes on the host's "
                    "connection until that one reconnects",
                    tf(st), why && *why ? ": " : "", why ? why : "");
    } else {
        pthread_mutex_lock(&f->mu);
        f->bulk_open++;
        pthread_mutex_unlock(&f->mu);
        f->bulk_all[f->n_bulk_all++] = nc;
        atomic_store(&f->nc_bulk, nc);
        if (say)
            th_log_info("nats: reply batching on");
    }
    pthread_mutex_unlock(&f->bulk_mu);
}

/* Flushes and closes nc_bulk: after every reply of th_nats_stop() was
 * published.  Waits (bounded) for the closed callback of every batching
 * connection made: false when one did not come (f must not be freed). */
static bool bulk_close(th_nats *f)
{
    atomic_store(&f->bulk_stopped, true); /* none made any more */
    /* bounded: one being made (bulk_open, on the library's callback
     * thread) against a server that never answers its handshake */
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 5;
    if (pthread_mutex_timedlock(&f->bulk_mu, &dl) != 0) {
        th_log_error("nats: stopping: the reply batching connection is "
                     "still being made after 5 s (the server does not "
                     "answer it)");
        return false;
    }
    natsConnection *b = atomic_load(&f->nc_bulk);
    pthread_mutex_unlock(&f->bulk_mu);
    if (b) {
        natsStatus st = NATS_OK;
        if (natsConnection_Status(b) == NATS_CONN_STATUS_CONNECTED)
            st = natsConnection_FlushTimeout(b, 1000);
        if (st != NATS_OK)
            th_log_warn("nats: stopping: the reply batching connection did "
                        "not flush (%s): replies still in its buffer are "
                        "lost", tf(st));
        natsConnection_Close(b);
    }
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 5;
    pthread_mutex_lock(&f->mu);
    while (f->bulk_open > 0 &&
           pthread_cond_timedwait(&f->cv, &f->mu, &dl) == 0)
        ;
    bool closed = f->bulk_open <= 0;
    pthread_mutex_unlock(&f->mu);
    return closed;
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
    const char *url = f->nc_cfg->listen;
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

/* th_nats_start: a session per toolset of nats.toolsets (one the config
 * does not define is skipped: the config check names it).  0, or the
 * error set. */
static int open_sessions(th_nats *f, th_host *h, const th_config *cfg,
                         th_error *err)
{
    int rc = 0;
    for (size_t i = 0; i < f->nc_cfg->n_toolsets && rc == 0; i++) {
        const th_toolset_cfg *tc = NULL;
        for (size_t j = 0; j < cfg->n_toolsets; j++)
            if (strcmp(cfg->toolsets[j].name, f->nc_cfg->toolsets[i]) == 0)
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
        who.user = f->nc_cfg->as_user;
        who.toolset = tc->name;
        /* with nats.users this session only lists the toolset's tools
         * (each user's calls run in a session of its own, which the
         * toolset's allow_users and ACL judge) */
        if (f->per_user) {
            who.user = NULL;
            who.trusted = true;
        }
        th_front_ops ops;
        memset(&ops, 0, sizeof ops);
        ops.front = "nats";
        /* a reload that adds or removes tools (un)subscribes them */
        ops.tools_changed = on_tools_changed;
        ops.ask_permission = on_ask;
        ops.ask_client = on_ask_client;
        ts->s = th_session_open(h, &who, &ops, ts);
        if (!ts->s)
            rc = th_error_set(err, TH_ENOMEM, "out of memory");
    }
    return rc;
}

/* th_nats_start: the host's own subjects ($SRV verbs, its tasks, the
 * answers to its asks, calls addressed to it, finished tasks' results).
 * 0, or the error set. */
static int subscribe_host(th_nats *f, th_error *err)
{
    int rc = 0;
    static const char *const verbs[] = {"PING", "INFO", "STATS"};
    for (size_t v = 0; rc == 0 && v < 3; v++) {
        char subj[3][200];
        snprintf(subj[0], sizeof subj[0], "$SRV.%s", verbs[v]);
        snprintf(subj[1], sizeof subj[1], "$SRV.%s.%s", verbs[v],
                 f->nc_cfg->name);
        snprintf(subj[2], sizeof subj[2], "$SRV.%s.%s.%s", verbs[v],
                 f->nc_cfg->name, f->id);
        for (size_t k = 0; rc == 0 && k < 3; k++)
            rc = sub_plain(f, subj[k], NULL, on_srv, err);
    }
    for (size_t k = 0; rc == 0 && k < 3; k++) {
        static const char *const ops[] = {"get", "result", "cancel"};
        char subj[256];
        snprintf(subj, sizeof subj, "%s%s.host.%s.tasks.%s",
                 f->nc_cfg->prefix, f->per_user ? ".u.*" : "", f->id, ops[k]);
        rc = sub_plain(f, subj, NULL, on_task, err);
    }
    if (rc == 0) { /* callers' answers to `ask` */
        char subj[256];
        snprintf(subj, sizeof subj, "%s%s.host.%s.permit.>",
                 f->nc_cfg->prefix, f->per_user ? ".u.*" : "", f->id);
        rc = sub_plain(f, subj, NULL, on_permit, err);
    }
    if (rc == 0) { /* callers' answers to a tool's ask_client() */
        char subj[256];
        snprintf(subj, sizeof subj, "%s%s.host.%s.answer.>",
                 f->nc_cfg->prefix, f->per_user ? ".u.*" : "", f->id);
        rc = sub_plain(f, subj, NULL, on_answer, err);
    }
    if (rc == 0) { /* calls addressed to this host (a caller's retry) */
        char subj[256];
        snprintf(subj, sizeof subj, "%s%s.host.%s.call.>", f->nc_cfg->prefix,
                 f->per_user ? ".u.*" : "", f->id);
        rc = sub_plain(f, subj, NULL, on_direct, err);
    }
    if (rc == 0) { /* any host answers a finished task's result */
        char subj[256];
        snprintf(subj, sizeof subj, "%s%s.tasks.result", f->nc_cfg->prefix,
                 f->per_user ? ".u.*" : "");
        rc = sub_plain(f, subj, QUEUE, on_any_result, err);
    }
    return rc;
}

int th_nats_start(th_host *h, const th_config *cfg, th_nats **out,
                  th_error *err)
{
    *out = NULL;
    const th_nats_cfg *ncfg = th_nats_config(cfg);
    if (!ncfg || !ncfg->listen)
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
    f->nc_cfg = th_nats_config(cfg);
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_init(&f->eps_mu, NULL);
    pthread_mutex_init(&f->slow_mu, NULL);
    pthread_mutex_init(&f->sess_mu, NULL);
    pthread_mutex_init(&f->tasks_mu, NULL);
    pthread_mutex_init(&f->note_mu, NULL);
    pthread_mutex_init(&f->bulk_mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->per_user = f->nc_cfg->n_users > 0;
    make_id(f);
    int krc = rkey_load(f, err);
    if (krc != 0) {
        pthread_mutex_init(&f->kv_mu, NULL); /* kv_close destroys it */
        nats_free(f);
        return krc;
    }
    kv_init_cfg(f);
    f->ts = calloc(f->nc_cfg->n_toolsets, sizeof *f->ts);
    if (!f->ts) {
        nats_free(f);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    int rc = open_sessions(f, h, cfg, err);
    natsStatus st = NATS_OK;
    if (rc == 0) {
        st = natsOptions_Create(&f->opts);
        if (st == NATS_OK)
            st = set_options(f, f->opts, false);
        if (st != NATS_OK)
            rc = th_error_set(err, TH_ECONFIG, "nats: %s: %s",
                              f->nc_cfg->listen, tf(st));
    }
    natsConnection *nc = NULL;
    if (rc == 0)
        rc = connect_first(f, &nc, err);
    if (rc == 0 && nc &&
        natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED)
        bulk_open(f, false); /* else once nc is (on_late_connect) */
    pthread_mutex_lock(&f->eps_mu);
    f->nc = nc;
    for (size_t i = 0; rc == 0 && i < f->n_ts; i++)
        rc = resync_locked(f, &f->ts[i], false, err);
    pthread_mutex_unlock(&f->eps_mu);
    for (size_t i = 0; rc == 0 && i < f->n_ts; i++)
        rc = subscribe_content(f, &f->ts[i], err);
    if (rc == 0)
        rc = subscribe_host(f, err);
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
                "service %s id %s (subjects %s%s.<toolset>.<tool>%s; "
                "reply batching %s)",
                n_live, f->n_ts, f->nc_cfg->listen, f->nc_cfg->name,
                f->id, f->nc_cfg->prefix, f->per_user ? ".u.<user>" : "",
                f->per_user ? ", callers told apart by nats.users"
                            : "; no nats.users: every caller runs as "
                              "nats.as_user",
                atomic_load(&f->nc_bulk) ? "on" : "off");
    *out = f;
    return 0;
}

void th_nats_quiesce(th_nats *f)
{
    if (!f || atomic_exchange(&f->quiesced, true))
        return;
    /* No new calls: drain the tool subjects - the server stops routing
     * them to us, and what it had already sent (in the socket, in the
     * client's queues) is still handed to on_request, which answers it
     * `cancelled` (an unsubscribe would drop those silently).  Tasks,
     * `ask` answers and discovery go on until th_nats_stop. */
    pthread_mutex_lock(&f->eps_mu);
    for (size_t i = 0; i < f->n_eps; i++)
        if (f->eps[i]->live)
            sub_drain(f->eps[i]->sub);
    for (size_t i = 0; i < f->n_ts; i++) /* and the content subjects */
        for (int m = 0; m < TH_FC_N; m++)
            if (f->ts[i].csub[m])
                sub_drain(f->ts[i].csub[m]);
    pthread_mutex_unlock(&f->eps_mu);
    flush_now(f);
    if (f->nc) /* (not for a start that failed) */
        th_log_info("nats: stopping: no new calls are taken (the tool "
                    "subjects are drained; calls in flight go on)");
}

void th_nats_stop(th_nats *f)
{
    if (!f)
        return;
    th_nats_quiesce(f); /* 1. no new calls */
    pthread_mutex_lock(&f->mu);
    f->stopping = true;
    pthread_mutex_unlock(&f->mu);
    /* and no more deliveries on the host's own subjects either */
    pthread_mutex_lock(&f->eps_mu);
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
    /* the users' sessions (no handler runs any more: none is added) */
    for (nt_sess *x = f->sess; x; x = x->next)
        th_session_close(x->s);
    /* No event callback of a closed session runs any more: a call still
     * listed here will never hear its end (an acknowledged toolset-scoped
     * task goes on detached from its session; a call the core gave up
     * on).  Its caller is told now, never left without an answer, and its
     * record freed. */
    pthread_mutex_lock(&f->mu);
    nt_call *left = f->live_calls;
    f->live_calls = NULL;
    size_t n_left = f->calls;
    f->calls = 0;
    pthread_mutex_unlock(&f->mu);
    for (nt_call *c = left, *next; c; c = next) {
        next = c->next;
        publish_error(f, call_nc(c), c->reply, TH_ECANCELLED,
                      "the host is stopping: the call was cancelled");
        free(c);
    }
    if (n_left)
        th_log_info("nats: %zu call(s) without an end when their sessions "
                    "closed (tasks that outlive their session) were "
                    "answered `cancelled`", n_left);
    bool bulk_ok = bulk_close(f); /* every reply above written out */
    struct timespec dl;
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
        bool closed = f->closed && !f->subs_open && bulk_ok;
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
