/* remote_nats.c - `call` and `list` with --connect nats://HOST:PORT: the
 * hosts behind one NATS server, found through service discovery
 * ($SRV.INFO.<name>, docs/scale.md).  Credentials come from the URL
 * (nats://USER:PASSWORD@HOST:PORT) or from TOOLHOST_NATS_USER /
 * TOOLHOST_NATS_PASSWORD / TOOLHOST_NATS_TOKEN / TOOLHOST_NATS_CREDS; the
 * service name from TOOLHOST_NATS_SERVICE (default "toolhost").  As a
 * NATS user it keeps its replies under _INBOX.<user>. (the only inboxes
 * the per-user layout of docs/scale.md lets it read) and calls hosts that
 * tell callers apart on <prefix>.u.<user>.<toolset>.<tool>.
 * A host must take a call within TOOLHOST_NATS_ACK_MS (default 2000 ms):
 * the request says by when (Toolhost-Start-By), a host answers `took` at
 * once and never starts it later; a call nobody took in time is said to
 * be so, and an idempotent one is retried once on a host that answers
 * $SRV.PING now, addressed to that host alone
 * (<prefix>.host.<id>.call.<toolset>.<tool>). */
#include <jansson.h>
#include <msgpack.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "front/nats.h"
#include "th/codec.h"
#include "th/json.h"
#include "th/tool.h"

bool cli_is_nats(const char *addr)
{
    return addr && (strncmp(addr, "nats://", 7) == 0 ||
                    strncmp(addr, "tls://", 6) == 0);
}

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The NATS user this CLI connects as ("" when none): set by
 * nats_connect_or_say (one connection per process). */
static char cli_user[128];

/* TOOLHOST_NATS_USER, or USER of nats://USER:PASSWORD@HOST (the first
 * URL of a list). */
static void user_of(const char *url, char *out, size_t n)
{
    const char *u = getenv("TOOLHOST_NATS_USER");
    out[0] = '\0';
    if (u && *u) {
        snprintf(out, n, "%s", u);
        return;
    }
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t end = strcspn(p, ",/");
    const char *at = memchr(p, '@', end);
    if (!at)
        return;
    /* USER:PASSWORD@ only: a lone TOKEN@ is a secret, never a subject */
    size_t l = strcspn(p, ":@");
    if (l < n && p + l < at) {
        memcpy(out, p, l);
        out[l] = '\0';
    }
}

/* A fresh inbox subject of ours into out: _INBOX.<user>.<unique> as a
 * NATS user, else the library's _INBOX.<unique>.  0 or -1. */
static int inbox_new(char *out, size_t n)
{
    natsInbox *ib = NULL;
    if (natsInbox_Create(&ib) != NATS_OK)
        return -1;
    if (cli_user[0])
        snprintf(out, n, "_INBOX.%s.%s", cli_user, ib + 7);
    else
        snprintf(out, n, "%s", ib);
    natsInbox_Destroy(ib);
    return 0;
}

static natsConnection *nats_connect_or_say(const char *url)
{
    natsOptions *o = NULL;
    natsConnection *nc = NULL;
    user_of(url, cli_user, sizeof cli_user);
    const char *u = getenv("TOOLHOST_NATS_USER");
    const char *p = getenv("TOOLHOST_NATS_PASSWORD");
    const char *t = getenv("TOOLHOST_NATS_TOKEN");
    const char *cr = getenv("TOOLHOST_NATS_CREDS");
    natsStatus st = natsOptions_Create(&o);
    if (st == NATS_OK)
        st = th_nats_set_urls(o, url);
    if (st == NATS_OK)
        st = natsOptions_SetTimeout(o, 5000);
    if (st == NATS_OK && u && *u)
        st = natsOptions_SetUserInfo(o, u, p ? p : "");
    if (st == NATS_OK && t && *t)
        st = natsOptions_SetToken(o, t);
    if (st == NATS_OK && cr && *cr)
        st = natsOptions_SetUserCredentialsFromFiles(o, cr, NULL);
    char pfx[160];
    snprintf(pfx, sizeof pfx, "_INBOX.%s", cli_user);
    if (st == NATS_OK && cli_user[0]) /* the library's own requests too */
        st = natsOptions_SetCustomInboxPrefix(o, pfx);
    if (st == NATS_OK)
        st = natsConnection_Connect(&nc, o);
    natsOptions_Destroy(o);
    if (st != NATS_OK) {
        cli_error("cannot connect to %s: %s", url, natsStatus_GetText(st));
        return NULL;
    }
    return nc;
}

static void nats_done(natsConnection *nc)
{
    natsConnection_Destroy(nc);
    nats_CloseAndWait(1000);
}

/* Discovery waits this long for the first $SRV.INFO answer before it says
 * that no host serves the tool: a host on a loaded machine (or behind a
 * remote NATS server) may take a few seconds to answer, and the wait ends
 * at the first answer, so only a call no host serves pays all of it.  It
 * is not bounded by --timeout, which is the call's deadline on the host. */
#define DISCOVERY_FIRST_MS 5000
/* After the first answer, others are read until none came for
 * DISCOVERY_QUIET_MS, and for DISCOVERY_MORE_MS at most. */
#define DISCOVERY_QUIET_MS 300
#define DISCOVERY_MORE_MS 2000

/* Every host's $SRV.INFO answer (see DISCOVERY_FIRST_MS), as a JSON
 * array. */
static json_t *gather_info(natsConnection *nc)
{
    const char *svc = getenv("TOOLHOST_NATS_SERVICE");
    char subj[160];
    snprintf(subj, sizeof subj, "$SRV.INFO.%s", svc && *svc ? svc : "toolhost");
    json_t *all = json_array();
    char ib[256];
    natsSubscription *sub = NULL;
    if (!all || inbox_new(ib, sizeof ib) != 0 ||
        natsConnection_SubscribeSync(&sub, nc, ib) != NATS_OK ||
        natsConnection_PublishRequest(nc, subj, ib, NULL, 0) != NATS_OK) {
        natsSubscription_Destroy(sub);
        return all;
    }
    int64_t end = now_ms() + DISCOVERY_FIRST_MS;
    bool first = true;
    for (;;) {
        int64_t left = end - now_ms();
        if (left <= 0)
            break;
        natsMsg *m = NULL;
        if (natsSubscription_NextMsg(
                &m, sub,
                first || left < DISCOVERY_QUIET_MS ? left
                                                   : DISCOVERY_QUIET_MS) !=
            NATS_OK)
            break;
        json_t *j = natsMsg_GetDataLength(m) > 0
                        ? json_loadb(natsMsg_GetData(m),
                                     (size_t)natsMsg_GetDataLength(m), 0,
                                     NULL)
                        : NULL;
        if (json_is_object(j))
            json_array_append(all, j);
        json_decref(j);
        natsMsg_Destroy(m);
        if (first)
            end = now_ms() + DISCOVERY_MORE_MS;
        first = false;
    }
    natsSubscription_Destroy(sub);
    return all;
}

static const char *md(json_t *ep, const char *key)
{
    const char *v =
        json_string_value(json_object_get(json_object_get(ep, "metadata"),
                                          key));
    return v ? v : "";
}

int cli_list_nats(const char *url, bool json)
{
    natsConnection *nc = nats_connect_or_say(url);
    if (!nc)
        return CLI_FAILED;
    json_t *info = gather_info(nc);
    /* subject -> {toolset, tool, subject, hosts} */
    json_t *by = json_object();
    size_t i, k;
    json_t *h, *ep;
    json_array_foreach(info, i, h)
    {
        json_array_foreach(json_object_get(h, "endpoints"), k, ep)
        {
            const char *subj = json_string_value(json_object_get(ep,
                                                                 "subject"));
            if (!subj)
                continue;
            json_t *e = json_object_get(by, subj);
            if (!e) {
                e = json_pack("{s:s, s:s, s:s, s:i, s:b}", "toolset",
                              md(ep, "toolset"), "tool", md(ep, "tool"),
                              "subject", subj, "hosts", 0, "idempotent",
                              strcmp(md(ep, "idempotent"), "true") == 0);
                json_object_set_new(by, subj, e);
            }
            json_object_set_new(
                e, "hosts",
                json_integer(json_integer_value(json_object_get(e, "hosts")) +
                             1));
        }
    }
    if (json) {
        json_t *arr = json_array();
        const char *key;
        json_t *e;
        json_object_foreach(by, key, e) json_array_append(arr, e);
        char *s = json_dumps(arr, JSON_INDENT(2));
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(arr);
    } else {
        printf("%zu host(s) answered\n", json_array_size(info));
        printf("%-16s %-22s %5s  %s\n", "TOOLSET", "TOOL", "HOSTS",
               "SUBJECT");
        const char *key;
        json_t *e;
        json_object_foreach(by, key, e)
        {
            printf("%-16s %-22s %5lld  %s\n",
                   json_string_value(json_object_get(e, "toolset")),
                   json_string_value(json_object_get(e, "tool")),
                   (long long)json_integer_value(json_object_get(e, "hosts")),
                   key);
        }
    }
    int rc = json_array_size(info) ? CLI_OK : CLI_FAILED;
    if (rc != CLI_OK)
        cli_error("no host answered $SRV.INFO on %s", url);
    json_decref(by);
    json_decref(info);
    nats_done(nc);
    return rc;
}

/* How long a host has to take a call (TOOLHOST_NATS_ACK_MS). */
#define ACK_MS_DEFAULT 2000
static int64_t ack_ms_get(void)
{
    const char *v = getenv("TOOLHOST_NATS_ACK_MS");
    char *end;
    long long ms = v && *v ? strtoll(v, &end, 10) : 0;
    return v && *v && !*end && ms >= 10 && ms <= 600000 ? ms
                                                        : ACK_MS_DEFAULT;
}

/* What an attempt came to (attempt's return value). */
enum {
    AT_MALFORMED = -1,
    AT_RESULT = 0,
    AT_NO_RESULT = 1, /* taken, then nothing in time */
    AT_LOST = 2,      /* taken, then its host stopped answering */
    AT_NO_ACK = 3,    /* delivered, not taken within the ack bound */
    AT_NO_HOST = 4,   /* no responders */
};

/* One attempt: publishes the request and reads replies until the result.
 * A host must take it (any reply: `took`, ack, progress, ask, result)
 * within ack_ms; `host` gets the id of the host that took it. */
static int attempt(natsConnection *nc, const char *subj, const th_buf *args,
                   int64_t timeout_ms, int64_t ack_ms, th_result_copy *out,
                   char *host, size_t host_n)
{
    char ib[256];
    natsSubscription *sub = NULL;
    natsMsg *req = NULL;
    int rc = AT_NO_RESULT;
    char tmo[32], dl[32], sb[32];
    snprintf(tmo, sizeof tmo, "%lld", (long long)timeout_ms);
    /* our absolute deadline: a host that gets the request only after it
     * (stopped, partitioned, backed up) does not start it */
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    snprintf(dl, sizeof dl, "%lld",
             (long long)rt.tv_sec * 1000 + rt.tv_nsec / 1000000 +
                 (long long)timeout_ms);
    /* by when a host must take it: after that we have moved on (retried
     * elsewhere or given up), and a host that gets it only then (frozen,
     * backed up) does not start it */
    snprintf(sb, sizeof sb, "%lld",
             (long long)rt.tv_sec * 1000 + rt.tv_nsec / 1000000 +
                 (long long)ack_ms);
    if (inbox_new(ib, sizeof ib) != 0 ||
        natsConnection_SubscribeSync(&sub, nc, ib) != NATS_OK ||
        natsMsg_Create(&req, subj, ib, (const char *)args->data,
                       (int)args->len) != NATS_OK ||
        (timeout_ms > 0 &&
         (natsMsgHeader_Set(req, TH_NATS_H_TIMEOUT, tmo) != NATS_OK ||
          natsMsgHeader_Set(req, TH_NATS_H_DEADLINE, dl) != NATS_OK)) ||
        natsMsgHeader_Set(req, TH_NATS_H_ASK, "1") != NATS_OK ||
        natsMsgHeader_Set(req, TH_NATS_H_START_BY, sb) != NATS_OK ||
        natsConnection_PublishMsg(nc, req) != NATS_OK)
        goto out;
    /* the host answers within the call's timeout; a lost host within
     * that plus a margin */
    int64_t t_sent = now_ms();
    int64_t end = t_sent + (timeout_ms > 0 ? timeout_ms : 60000) + 5000;
    /* (a quarter more for the `took` on its way back) */
    int64_t ack_end = t_sent + ack_ms + ack_ms / 4;
    int64_t quiet_since = now_ms();
    bool taken = false;
    int missed_pings = 0;
    while (now_ms() < end && !cli_interrupted) {
        natsMsg *m = NULL;
        if (!taken && now_ms() >= ack_end) {
            rc = AT_NO_ACK;
            break;
        }
        if (natsSubscription_NextMsg(&m, sub, 200) != NATS_OK) {
            /* a host that named itself (an async call's ack) and went
             * quiet: is it still there?  Its own $SRV.PING subject has no
             * responders once it is gone. */
            if (host[0] && now_ms() - quiet_since >= 1000) {
                const char *svc = getenv("TOOLHOST_NATS_SERVICE");
                char ping[200];
                snprintf(ping, sizeof ping, "$SRV.PING.%s.%s",
                         svc && *svc ? svc : "toolhost", host);
                natsMsg *pr = NULL;
                natsStatus ps = natsConnection_RequestString(
                    &pr, nc, ping, "", ack_ms > 1000 ? ack_ms : 1000);
                natsMsg_Destroy(pr);
                /* gone (no responders), or there but not answering twice
                 * in a row (stopped, frozen) */
                missed_pings = ps == NATS_OK ? 0 : missed_pings + 1;
                if (ps == NATS_NO_RESPONDERS || missed_pings >= 2) {
                    rc = AT_LOST; /* lost with the call */
                    break;
                }
                quiet_since = now_ms();
            }
            continue;
        }
        quiet_since = now_ms();
        const char *kind = "", *status = NULL, *hv = NULL;
        natsMsgHeader_Get(m, TH_NATS_H_KIND, &kind);
        natsMsgHeader_Get(m, "Status", &status);
        if (natsMsgHeader_Get(m, TH_NATS_H_HOST, &hv) == NATS_OK && hv)
            snprintf(host, host_n, "%s", hv);
        if (status && strcmp(status, "503") == 0) { /* no responders */
            natsMsg_Destroy(m);
            rc = AT_NO_HOST;
            break;
        }
        taken = true;
        if (kind && strcmp(kind, "ask") == 0) {
            /* an `ask` rule: the host waits for our answer (a y/N prompt
             * on a terminal; no terminal: deny) */
            th_error qe;
            json_t *q = th_json_from_msgpack(
                (const uint8_t *)natsMsg_GetData(m),
                (size_t)natsMsg_GetDataLength(m), &qe);
            const char *tn = json_string_value(json_object_get(q, "tool"));
            const char *why = json_string_value(json_object_get(q,
                                                                "reason"));
            bool yes = cli_ask_terminal(tn ? tn : "?", why ? why : "");
            const char *to = natsMsg_GetReply(m);
            if (to && *to)
                natsConnection_PublishString(nc, to, yes ? "allow" : "deny");
            json_decref(q);
        } else if (kind && strcmp(kind, "progress") == 0) {
            msgpack_unpacked u;
            msgpack_unpacked_init(&u);
            th_progress p;
            if (msgpack_unpack_next(&u, natsMsg_GetData(m),
                                    (size_t)natsMsg_GetDataLength(m),
                                    NULL) == MSGPACK_UNPACK_SUCCESS &&
                th_codec_unpack_progress(&u.data, &p) == 0) {
                char msg[512];
                snprintf(msg, sizeof msg, "%.*s",
                         (int)(p.message_len < 511 ? p.message_len : 511),
                         p.message ? p.message : "");
                cli_show_progress(p.fraction, msg, p.coalesced);
            }
            msgpack_unpacked_destroy(&u);
        } else if (kind && strcmp(kind, "result") == 0) {
            /* an async task's result the host could not put in the
             * results bucket: the caller has it now, tasks.result will
             * not find it later (docs/scale.md, Toolhost-Stored) */
            const char *stored = NULL;
            if (natsMsgHeader_Get(m, TH_NATS_H_STORED, &stored) == NATS_OK &&
                stored && strcmp(stored, "0") == 0) {
                cli_progress_end();
                fprintf(stderr, "toolhost: note: host %s could not store "
                        "this result (Toolhost-Stored: 0): tasks.result "
                        "will not find it later\n", host[0] ? host : "?");
            }
            rc = th_codec_unpack_result_bytes(
                     (const uint8_t *)natsMsg_GetData(m),
                     (size_t)natsMsg_GetDataLength(m), out) == 0
                     ? AT_RESULT
                     : AT_MALFORMED;
            natsMsg_Destroy(m);
            break;
        }
        natsMsg_Destroy(m);
    }
out:
    natsMsg_Destroy(req);
    natsSubscription_Destroy(sub);
    return rc;
}

/* A host for the retry: one of `cands` (ids of the hosts that serve the
 * tool) other than `not`, that answers $SRV.PING now (within ack_ms): a
 * host that is stopped or frozen cannot.  Its id into out; false when
 * none. */
static bool pick_live_host(natsConnection *nc, json_t *cands,
                           const char *not, int64_t ack_ms, char *out,
                           size_t out_n)
{
    const char *svc = getenv("TOOLHOST_NATS_SERVICE");
    char subj[160], ib[256];
    snprintf(subj, sizeof subj, "$SRV.PING.%s", svc && *svc ? svc : "toolhost");
    natsSubscription *sub = NULL;
    bool found = false;
    if (inbox_new(ib, sizeof ib) != 0 ||
        natsConnection_SubscribeSync(&sub, nc, ib) != NATS_OK ||
        natsConnection_PublishRequest(nc, subj, ib, NULL, 0) != NATS_OK) {
        natsSubscription_Destroy(sub);
        return false;
    }
    int64_t end = now_ms() + ack_ms;
    while (!found && now_ms() < end) {
        natsMsg *m = NULL;
        if (natsSubscription_NextMsg(&m, sub, end - now_ms()) != NATS_OK)
            break;
        json_t *j = json_loadb(natsMsg_GetData(m),
                               (size_t)natsMsg_GetDataLength(m), 0, NULL);
        const char *id = json_string_value(json_object_get(j, "id"));
        size_t k;
        json_t *c;
        json_array_foreach(cands, k, c)
        {
            const char *cid = json_string_value(json_object_get(c, "id"));
            if (!found && id && cid && strcmp(id, cid) == 0 &&
                strcmp(id, not) != 0) {
                snprintf(out, out_n, "%s", id);
                found = true;
            }
        }
        json_decref(j);
        natsMsg_Destroy(m);
    }
    natsSubscription_Destroy(sub);
    return found;
}

/* The parameter types a host published with the endpoint. */
static int param_type(void *ud, const char *name)
{
    const char *t = json_string_value(json_object_get(ud, name));
    if (!t)
        return 0;
    for (uint32_t k = TOOLHOST_TYPE_STRING; k <= TOOLHOST_TYPE_OBJECT; k++)
        if (strcmp(th_type_name(k), t) == 0)
            return (int)k;
    return 0;
}

int cli_call_nats(const char *url, const char *tool, char **kv, int n_kv,
                  const char *json_text, int64_t timeout_ms, bool show_meta)
{
    natsConnection *nc = nats_connect_or_say(url);
    if (!nc)
        return CLI_FAILED;
    /* TOOL or TOOLSET.TOOL: its subject and flags from discovery */
    const char *dot = strchr(tool, '.');
    json_t *info = gather_info(nc);
    char subj[512] = "";
    bool idem = false;
    json_t *types = NULL;
    json_t *cands = json_array(); /* {id, prefix, toolset, tool} */
    int matches = 0;
    size_t i, k;
    json_t *h, *ep;
    json_array_foreach(info, i, h)
    {
        json_array_foreach(json_object_get(h, "endpoints"), k, ep)
        {
            const char *ts = md(ep, "toolset"), *tn = md(ep, "tool");
            bool hit = dot ? (strlen(ts) == (size_t)(dot - tool) &&
                              strncmp(ts, tool, (size_t)(dot - tool)) == 0 &&
                              strcmp(tn, dot + 1) == 0)
                           : strcmp(tn, tool) == 0;
            const char *s = json_string_value(json_object_get(ep, "subject"));
            if (!hit || !s)
                continue;
            if (subj[0] && strcmp(subj, s) != 0) {
                matches = 2;
                continue;
            }
            snprintf(subj, sizeof subj, "%s", s);
            matches = matches ? matches : 1;
            idem = strcmp(md(ep, "idempotent"), "true") == 0;
            if (!types)
                types = json_loads(md(ep, "param_types"), 0, NULL);
            const char *hid = json_string_value(json_object_get(h, "id"));
            const char *pfx = json_string_value(json_object_get(
                json_object_get(h, "metadata"), "prefix"));
            if (hid && pfx)
                json_array_append_new(cands,
                                      json_pack("{s:s, s:s, s:s, s:s}", "id",
                                                hid, "prefix", pfx, "toolset",
                                                ts, "tool", tn));
        }
    }
    json_decref(info);
    int rc = CLI_OK;
    if (!subj[0] || matches > 1)
        json_decref(types);
    if (!subj[0]) {
        cli_error("%s: no host on %s serves this tool", tool, url);
        json_decref(cands);
        nats_done(nc);
        return CLI_USAGE;
    }
    /* hosts that tell callers apart: <prefix>.u.*.<toolset>.<tool>, the
     * caller's own user in place of the * */
    char *star = strstr(subj, ".u.*.");
    if (star && matches == 1) {
        if (!cli_user[0]) {
            json_decref(types);
            cli_error("%s: the hosts tell callers apart (nats.users): "
                      "connect as a NATS user (nats://USER:PASSWORD@HOST:"
                      "PORT or TOOLHOST_NATS_USER)", tool);
            json_decref(cands);
            nats_done(nc);
            return CLI_USAGE;
        }
        char rest[512];
        snprintf(rest, sizeof rest, "%s", star + 4);
        snprintf(star, sizeof subj - (size_t)(star - subj), ".u.%s%s",
                 cli_user, rest);
    }
    if (matches > 1) {
        cli_error("%s: more than one toolset serves it; name one as "
                  "TOOLSET.%s",
                  tool, tool);
        json_decref(cands);
        nats_done(nc);
        return CLI_USAGE;
    }
    json_t *args = cli_build_args(kv, n_kv, json_text, param_type, types);
    json_decref(types);
    types = NULL;
    th_buf mp = TH_BUF_INIT;
    if (!args || th_json_to_msgpack(args, &mp) != 0) {
        json_decref(args);
        th_buf_destroy(&mp);
        json_decref(cands);
        nats_done(nc);
        return CLI_USAGE;
    }
    json_decref(args);
    cli_catch_sigint();
    th_result_copy r;
    memset(&r, 0, sizeof r);
    char host[64] = "";
    int64_t ack_ms = ack_ms_get();
    long long wait_s = (long long)((timeout_ms > 0 ? timeout_ms : 60000) +
                                   5000) / 1000;
    int a = attempt(nc, subj, &mp, timeout_ms, ack_ms, &r, host,
                    sizeof host);
    const char *to = subj; /* the subject of the last attempt */
    char direct[600] = "", rhost[64] = "";
    if ((a == AT_NO_RESULT || a == AT_LOST || a == AT_NO_ACK) && idem &&
        !cli_interrupted) {
        /* retried on a host that answers now, addressed to it alone: the
         * one that did not answer (when known) is left out, and one that
         * did not take the call in time will not start it later */
        bool have = pick_live_host(nc, cands, a == AT_NO_ACK ? "" : host,
                                   ack_ms, rhost, sizeof rhost);
        size_t k;
        json_t *c;
        json_array_foreach(cands, k, c)
        {
            if (!have || direct[0] ||
                strcmp(json_string_value(json_object_get(c, "id")), rhost))
                continue;
            if (cli_user[0] && star)
                snprintf(direct, sizeof direct, "%s.u.%s.host.%s.call.%s.%s",
                         json_string_value(json_object_get(c, "prefix")),
                         cli_user, rhost,
                         json_string_value(json_object_get(c, "toolset")),
                         json_string_value(json_object_get(c, "tool")));
            else
                snprintf(direct, sizeof direct, "%s.host.%s.call.%s.%s",
                         json_string_value(json_object_get(c, "prefix")),
                         rhost,
                         json_string_value(json_object_get(c, "toolset")),
                         json_string_value(json_object_get(c, "tool")));
        }
        if (a == AT_NO_ACK)
            fprintf(stderr, "%s: a host took the call and did not "
                    "acknowledge it within %lld ms", tool,
                    (long long)ack_ms);
        else
            fprintf(stderr, "%s: no answer from host %s", tool,
                    host[0] ? host : "(unknown)");
        if (direct[0]) {
            fprintf(stderr, "; the tool is idempotent: retrying once on "
                    "host %s (it answers $SRV.PING now)\n", rhost);
            th_result_copy_destroy(&r);
            memset(&r, 0, sizeof r);
            host[0] = '\0';
            to = direct;
            a = attempt(nc, direct, &mp, timeout_ms, ack_ms, &r, host,
                        sizeof host);
            if (a == AT_NO_ACK)
                snprintf(host, sizeof host, "%s", rhost);
        } else {
            fprintf(stderr, "; the tool is idempotent, but no other host "
                    "answers $SRV.PING now: not retried\n");
        }
    }
    cli_progress_end();
    if (a == AT_LOST) {
        cli_error("%s: the host took the call and was lost (no answer; "
                  "host %s no longer answers $SRV.PING)",
                  to, host);
        rc = CLI_FAILED;
    } else if (a == AT_NO_ACK && host[0]) {
        cli_error("%s: host %s took the call and did not acknowledge it "
                  "within %lld ms (stopped, frozen or overloaded; it will "
                  "not start it later: Toolhost-Start-By)",
                  to, host, (long long)ack_ms);
        rc = CLI_FAILED;
    } else if (a == AT_NO_ACK) {
        cli_error("%s: a host took the call and did not acknowledge it "
                  "within %lld ms (NATS delivered it to one of the hosts "
                  "and does not say which: one that is stopped, frozen or "
                  "overloaded; it will not start it later: "
                  "Toolhost-Start-By)",
                  to, (long long)ack_ms);
        rc = CLI_FAILED;
    } else if (a == AT_NO_HOST) {
        cli_error("%s: no host took the call (no responders: no host "
                  "subscribes to it now)", to);
        rc = CLI_FAILED;
    } else if (a == AT_NO_RESULT && host[0]) {
        /* (the URL may carry a password: not repeated here) */
        cli_error("%s: the host took the call but did not answer within "
                  "%lld s (no answer from host %s: lost, stopped or "
                  "overloaded)",
                  to, wait_s, host);
        rc = CLI_FAILED;
    } else if (a == AT_NO_RESULT) {
        cli_error("%s: no host took the call within %lld s (nothing came "
                  "back: no host got it, or its host was lost before it "
                  "acknowledged; a host that gets it after the deadline "
                  "does not start it)",
                  to, wait_s);
        rc = CLI_FAILED;
    } else if (a < 0) {
        cli_error("the host sent a result of the wrong shape");
        rc = CLI_FAILED;
    } else {
        rc = cli_print_result(&r, show_meta, tool);
    }
    json_decref(cands);
    th_result_copy_destroy(&r);
    th_buf_destroy(&mp);
    nats_done(nc);
    return rc;
}
