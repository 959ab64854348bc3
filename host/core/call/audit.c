/* audit.c - the audit log (th/audit.h): one JSON object a line, built with
 * jansson, written with one write(2) under the log's mutex (O_APPEND: a
 * reader never sees half a line); the journal through sd_journal_send.
 *
 * Lock order: a->mu is a leaf (taken with a call's mu held, takes no
 * other lock). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <msgpack.h>
#include <nettle/base16.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef TH_HAVE_SYSTEMD
#include <systemd/sd-journal.h>
#endif

#include "manager.h"
#include "th/audit.h"
#include "th/clock.h"
#include "th/log.h"

struct th_audit {
    pthread_mutex_t mu;
    char *path;   /* the file, or NULL for the journal */
    int fd;       /* [mu] */
    atomic_ullong lines, write_errors, reopens;
    pthread_mutex_t rmu; /* a leaf lock */
    th_u64map recs;      /* [rmu] call id -> th_audit_rec, from a call's
                            begin to its line */
};

static void rec_free(uint64_t k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    free(v);
}

static int open_file(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY,
                0600);
}

int th_audit_open(const char *target, th_audit **out, th_error *err)
{
    *out = NULL;
    bool journal = strcmp(target, "journald") == 0;
#ifndef TH_HAVE_SYSTEMD
    if (journal)
        return th_error_set(err, TH_ECONFIG,
                            "host.audit: journald: this toolhost was built "
                            "without libsystemd");
#endif
    th_audit *a = calloc(1, sizeof *a);
    if (!a || (!journal && !(a->path = strdup(target)))) {
        free(a);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    a->fd = -1;
    if (!journal && (a->fd = open_file(a->path)) < 0) {
        int e = errno;
        free(a->path);
        free(a);
        return th_error_set(err, TH_EIO, "host.audit: cannot open %s: %s",
                            target, strerror(e));
    }
    pthread_mutex_init(&a->mu, NULL);
    pthread_mutex_init(&a->rmu, NULL);
    th_u64map_init(&a->recs);
    *out = a;
    return 0;
}

void th_audit_close(th_audit *a)
{
    if (!a)
        return;
    if (a->fd >= 0)
        close(a->fd);
    pthread_mutex_destroy(&a->mu);
    /* calls recorded but never answered (a session that failed to take
     * them) */
    th_u64map_each(&a->recs, rec_free, NULL);
    th_u64map_destroy(&a->recs);
    pthread_mutex_destroy(&a->rmu);
    free(a->path);
    free(a);
}

int th_audit_reopen(th_audit *a)
{
    if (!a || !a->path)
        return 0;
    int fd = open_file(a->path);
    if (fd < 0) {
        th_log_error("event=audit.reopen_failed path=%s audit: cannot "
                     "reopen: %s; still writing to the old file",
                     a->path, strerror(errno));
        return TH_EIO;
    }
    pthread_mutex_lock(&a->mu);
    int old = a->fd;
    a->fd = fd;
    pthread_mutex_unlock(&a->mu);
    if (old >= 0)
        close(old);
    atomic_fetch_add(&a->reopens, 1);
    th_log_info("event=audit.reopen path=%s audit: reopened", a->path);
    return 0;
}

const char *th_audit_target(const th_audit *a)
{
    return a->path ? a->path : "journald";
}

void th_audit_get_stats(const th_audit *a, th_audit_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!a)
        return;
    out->lines = atomic_load(&((th_audit *)a)->lines);
    out->write_errors = atomic_load(&((th_audit *)a)->write_errors);
    out->reopens = atomic_load(&((th_audit *)a)->reopens);
}

void th_audit_sha256_hex(const uint8_t *p, size_t len, char hex[65])
{
    struct sha256_ctx ctx;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&ctx);
    sha256_update(&ctx, len, p);
    sha256_digest(&ctx, sizeof d, d);
    base16_encode_update(hex, sizeof d, d);
    hex[64] = '\0';
}

static bool is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static bool all_zero(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != '0')
            return false;
    return true;
}

bool th_audit_traceparent_ok(const char *s)
{
    /* version "-" trace-id "-" parent-id "-" flags: 2+1+32+1+16+1+2 */
    if (!s || strlen(s) != 55 || s[2] != '-' || s[35] != '-' || s[52] != '-')
        return false;
    return is_hex(s, 2) && memcmp(s, "ff", 2) != 0 && is_hex(s + 3, 32) &&
           !all_zero(s + 3, 32) && is_hex(s + 36, 16) &&
           !all_zero(s + 36, 16) && is_hex(s + 53, 2);
}

/* A string member, or null; bytes that are not UTF-8 (a name from a
 * token, a tool's name) make the value "(not utf-8)" rather than the line
 * lost. */
static void set_str(json_t *o, const char *k, const char *v)
{
    json_t *j = v ? json_string(v) : json_null();
    if (!j)
        j = json_string("(not utf-8)");
    json_object_set_new(o, k, j);
}

static void iso_time(int64_t ms, char out[32])
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03dZ", (int)(ms % 1000));
}

/* The line (malloc'ed, ending in a newline), or NULL. */
static char *render(const th_audit_call *c, size_t *len)
{
    json_t *o = json_object(), *p = json_object();
    if (!o || !p) {
        json_decref(o);
        json_decref(p);
        return NULL;
    }
    char ts[32];
    iso_time(c->wall_ms, ts);
    set_str(o, "ts", ts);
    if (c->who) {
        if (c->who->uid != (uint32_t)-1)
            json_object_set_new(p, "uid", json_integer(c->who->uid));
        if (c->who->user)
            set_str(p, "user", c->who->user);
        if (c->who->trusted)
            json_object_set_new(p, "trusted", json_true());
    }
    json_object_set_new(o, "principal", p);
    set_str(o, "front", c->front);
    json_object_set_new(o, "session", json_integer((json_int_t)c->session));
    set_str(o, "toolset", c->toolset);
    set_str(o, "tool", c->tool);
    json_object_set_new(o, "call_id", json_integer((json_int_t)c->call_id));
    if (c->task_id)
        json_object_set_new(o, "task_id",
                            json_integer((json_int_t)c->task_id));
    set_str(o, "args_sha256", c->args_sha256);
    set_str(o, "outcome", c->outcome);
    set_str(o, "error", c->error ? th_err_name(c->error) : NULL);
    /* to the microsecond: 0.159477, not 0.15947700000000001 */
    json_object_set_new(o, "dur_ms",
                        json_real((double)(int64_t)(c->dur_ms * 1000 + 0.5) /
                                  1000));
    json_object_set_new(o, "bytes_out",
                        json_integer((json_int_t)c->bytes_out));
    set_str(o, "traceparent", c->traceparent);
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                JSON_REAL_PRECISION(12));
    json_decref(o);
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *line = realloc(s, n + 2);
    if (!line) {
        free(s);
        return NULL;
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    *len = n + 1;
    return line;
}

static void write_failed(th_audit *a, const char *why)
{
    unsigned long long n = atomic_fetch_add(&a->write_errors, 1) + 1;
    /* every failure counts; the log says the first and then one in 1000 */
    if (n == 1 || n % 1000 == 0)
        th_log_error("event=audit.write_failed errors=%llu audit: a line "
                     "could not be written to %s: %s (counted in "
                     "toolhost_audit_write_errors_total)",
                     n, th_audit_target(a), why);
}

void th_audit_write(th_audit *a, const th_audit_call *c)
{
    if (!a)
        return;
    size_t len = 0;
    char *line = render(c, &len);
    if (!line) {
        write_failed(a, "out of memory");
        return;
    }
    if (!a->path) {
#ifdef TH_HAVE_SYSTEMD
        int rc = sd_journal_send("MESSAGE=%.*s", (int)(len - 1), line,
                                 "SYSLOG_IDENTIFIER=toolhost-audit",
                                 "TOOLHOST_AUDIT=1", NULL);
        if (rc < 0)
            write_failed(a, strerror(-rc));
        else
            atomic_fetch_add(&a->lines, 1);
#endif
        free(line);
        return;
    }
    pthread_mutex_lock(&a->mu);
    size_t off = 0;
    const char *why = NULL;
    while (off < len) {
        ssize_t w = write(a->fd, line + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            why = w < 0 ? strerror(errno) : "nothing written";
            break;
        }
        off += (size_t)w;
    }
    pthread_mutex_unlock(&a->mu);
    free(line);
    if (why)
        write_failed(a, why);
    else
        atomic_fetch_add(&a->lines, 1);
}

/* ---- the call path's two hooks (manager.h) ----------------------------- */

typedef struct th_audit_rec {
    char sha[65];
    char tp[56]; /* "" when the caller sent none (or a malformed one) */
} th_audit_rec;

static bool is_sensitive(const th_tool_override *ov, const char *k, size_t n)
{
    for (size_t i = 0; ov && i < ov->n_sensitive; i++)
        if (strlen(ov->sensitive[i]) == n && memcmp(ov->sensitive[i], k, n) == 0)
            return true;
    return false;
}

/* The digest of an argument map whose sensitive parameters' values are
 * replaced by nil (the keys stay: the digest still tells which were
 * given): a secret with little entropy cannot be found again by hashing
 * guesses.  false when the map has none (the caller's bytes are digested
 * as they are) or cannot be read. */
static bool digest_redacted(const th_tool_override *ov, const uint8_t *args,
                            size_t len, char hex[65])
{
    if (!ov || !ov->n_sensitive || !args)
        return false;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    bool done = false;
    if (msgpack_unpack_next(&u, (const char *)args, len, &off) ==
            MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP) {
        const msgpack_object_map *m = &u.data.via.map;
        bool any = false;
        for (uint32_t i = 0; i < m->size && !any; i++)
            any = m->ptr[i].key.type == MSGPACK_OBJECT_STR &&
                  is_sensitive(ov, m->ptr[i].key.via.str.ptr,
                               m->ptr[i].key.via.str.size);
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        int e = any ? msgpack_pack_map(&pk, m->size) : -1;
        for (uint32_t i = 0; i < m->size && !e; i++) {
            const msgpack_object *k = &m->ptr[i].key;
            e = msgpack_pack_object(&pk, *k);
            if (!e && k->type == MSGPACK_OBJECT_STR &&
                is_sensitive(ov, k->via.str.ptr, k->via.str.size))
                e = msgpack_pack_nil(&pk);
            else if (!e)
                e = msgpack_pack_object(&pk, m->ptr[i].val);
        }
        if (any && !e) {
            th_audit_sha256_hex((const uint8_t *)sb.data, sb.size, hex);
            done = true;
        }
        msgpack_sbuffer_destroy(&sb);
    }
    msgpack_unpacked_destroy(&u);
    return done;
}

void th_audit_call_begin(th_mcall *c, const uint8_t *args, size_t len,
                         const char *traceparent)
{
    th_audit_rec *r = malloc(sizeof *r);
    if (!r)
        return; /* the line is still written, without a digest */
    if (!digest_redacted(c->ov, args, len, r->sha))
        th_audit_sha256_hex(args ? args : (const uint8_t *)"",
                            args ? len : 0, r->sha);
    r->tp[0] = '\0';
    if (th_audit_traceparent_ok(traceparent))
        memcpy(r->tp, traceparent, 56);
    th_audit *a = c->h->audit;
    pthread_mutex_lock(&a->rmu);
    int rc = th_u64map_put(&a->recs, c->base.pub.call_id, r);
    pthread_mutex_unlock(&a->rmu);
    if (rc != 0)
        free(r); /* the line is written without a digest */
}

/* The outcome in words: the labels of /metrics (TH_OUTCOMES, th/host.h),
 * for the codes TH_STAT_ERR_COUNTER (manager.h) counts apart. */
static const char *outcome_of(const th_result_copy *f)
{
    if (f->kind == TH_RESULT_DONE)
        return f->ok ? "ok" : "failed";
    switch (f->error) {
    case TH_ETIMEOUT: return "timeout";
    case TH_ECANCELLED: return "cancelled";
    case TH_EDUPLICATE: return "duplicate";
    case TH_EBUSY: return "busy";
    case TH_EPERM: return "denied";
    case TH_ERATE_LIMITED: return "rate_limited";
    case TH_EUNAVAILABLE: return "unavailable";         /* a backend's (1.5) */
    case TH_EBACKEND_TIMEOUT: return "backend_timeout"; /* a backend's (1.5) */
    case TH_EPLUGIN_CRASHED: return "plugin_crashed";   /* isolation's */
    default: return "error";
    }
}

void th_audit_call_end(th_mcall *c)
{
    th_audit *au = c->h->audit;
    pthread_mutex_lock(&au->rmu);
    th_audit_rec *r = th_u64map_del(&au->recs, c->base.pub.call_id);
    pthread_mutex_unlock(&au->rmu);
    th_result_copy oom;
    const th_result_copy *f = &oom;
    if (c->x) {
        f = &c->x->final;
    } else {
        memset(&oom, 0, sizeof oom);
        oom.kind = TH_RESULT_ERROR;
        oom.error = c->fin_oom;
    }
    int64_t now = th_fast_ns();
    th_audit_call a = {
        .wall_ms = th_wall_ms(),
        .who = c->s ? &c->s->who : NULL,
        .session = c->s ? c->s->id : 0,
        .front = c->front ? c->front : c->s ? c->s->ops.front : NULL,
        .toolset = c->ts ? c->ts->name : NULL,
        .tool = c->tool ? c->tool->name : NULL,
        .call_id = c->base.pub.call_id,
        .args_sha256 = r ? r->sha : NULL,
        .outcome = outcome_of(f),
        .error = f->kind == TH_RESULT_ERROR ? f->error : 0,
        .dur_ms = now > c->start_ns ? (double)(now - c->start_ns) / 1e6 : 0,
        .bytes_out = f->kind == TH_RESULT_DONE ? f->out.len + f->err.len : 0,
        .task_id = c->acked ? c->base.pub.call_id : 0,
        .traceparent = r && r->tp[0] ? r->tp : NULL,
    };
    if (!a.front)
        a.front = "other";
    th_audit_write(c->h->audit, &a);
    free(r);
}

th_audit *th_host_audit(th_host *h)
{
    return h ? h->audit : NULL;
}
