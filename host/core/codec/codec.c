/* codec.c - the one codec of what every front sends (th/codec.h): call
 * results, progress events, task info, tool entries; msgpack first, JSON
 * derived from it through th/json.h. */
#include "th/codec.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "th/json.h"
#include "th/schema.h"
#include "th/utf8.h"

/* ---- Helpers --------------------------------------------------------------------- */

static bool key_is(const msgpack_object *k, const char *s)
{
    size_t n = strlen(s);
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
           memcmp(k->via.str.ptr, s, n) == 0;
}

static const msgpack_object *map_get(const msgpack_object *m, const char *key)
{
    if (m->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++)
        if (key_is(&m->via.map.ptr[i].key, key))
            return &m->via.map.ptr[i].val;
    return NULL;
}

/* Text (str or bin) of o, or false. */
static bool obj_bytes(const msgpack_object *o, const char **p, size_t *n)
{
    if (o && o->type == MSGPACK_OBJECT_STR) {
        *p = o->via.str.ptr;
        *n = o->via.str.size;
        return true;
    }
    if (o && o->type == MSGPACK_OBJECT_BIN) {
        *p = o->via.bin.ptr;
        *n = o->via.bin.size;
        return true;
    }
    return false;
}

/* Text as str when it is UTF-8, as bin otherwise. */
static int pack_text(msgpack_packer *pk, const uint8_t *p, size_t n)
{
    if (!p)
        n = 0;
    if (n == 0 || th_utf8_valid(p, n))
        return msgpack_pack_str_with_body(pk, p ? (const char *)p : "", n);
    return msgpack_pack_bin_with_body(pk, p, n);
}

static json_t *json_of(const th_buf *b, th_error *err)
{
    if (!b->data) {
        th_error_set(err, TH_ENOMEM, "out of memory");
        return NULL;
    }
    return th_json_from_msgpack_lossy(b->data, b->len, err);
}

/* ---- Call results ---------------------------------------------------------------- */

/* The structured value of a result (stdout, one JSON value the host
 * checked), decoded: NULL when there is none or it does not decode. */
static json_t *structured_of(const th_result_copy *r)
{
    if (r->kind != TH_RESULT_DONE || !r->ok || !r->structured || !r->out.len)
        return NULL;
    return json_loadb((const char *)r->out.data, r->out.len,
                      JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
}

int th_codec_pack_result(msgpack_packer *pk, const th_result_copy *r)
{
    int e = 0;
    if (pk->callback == th_buf_msgpack_write &&
        th_buf_reserve(pk->data, 64 + r->out.len + r->err.len + r->meta.len +
                                     (r->message ? strlen(r->message) : 0)) != 0)
        return TH_ENOMEM; /* one reservation: the map's tokens then only
                             copy (a structured value may grow it once) */
    if (r->kind == TH_RESULT_DONE) {
        json_t *sv = structured_of(r);
        e |= msgpack_pack_map(pk, sv ? 5 : 4);
        e |= th_pack_cstr(pk, "ok");
        e |= r->ok ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
        e |= th_pack_cstr(pk, "stdout");
        e |= pack_text(pk, r->out.data, r->out.len);
        e |= th_pack_cstr(pk, "stderr");
        e |= pack_text(pk, r->err.data, r->err.len);
        e |= th_pack_cstr(pk, "meta");
        /* The tool's map, byte for byte. */
        if (r->meta.len)
            e |= pk->callback(pk->data, (const char *)r->meta.data, r->meta.len);
        else
            e |= msgpack_pack_map(pk, 0);
        if (sv) {
            /* The same value as stdout, decoded once here for every
             * front (docs/protocol.md, "Structured output"). */
            e |= th_pack_cstr(pk, "structured");
            e |= th_json_pack(sv, pk) != 0;
            json_decref(sv);
        }
    } else if (r->kind == TH_RESULT_RUNNING) {
        e |= msgpack_pack_map(pk, 3);
        e |= th_pack_cstr(pk, "status");
        e |= th_pack_cstr(pk, "running");
        e |= th_pack_cstr(pk, "task_id");
        e |= msgpack_pack_uint64(pk, r->task_id);
        e |= th_pack_cstr(pk, "message");
        e |= th_pack_cstr(pk, r->message ? r->message : "");
    } else {
        e |= msgpack_pack_map(pk, 2);
        e |= th_pack_cstr(pk, "ok");
        e |= msgpack_pack_false(pk);
        e |= th_pack_cstr(pk, "error");
        e |= msgpack_pack_map(pk, 2 + (r->retry_after_ms != 0));
        e |= th_pack_cstr(pk, "code");
        e |= th_pack_cstr(pk, th_err_name(r->error));
        e |= th_pack_cstr(pk, "message");
        e |= th_pack_cstr(pk, r->message ? r->message : th_strerror(r->error));
        if (r->retry_after_ms) { /* when to try again (ABI 1.5) */
            e |= th_pack_cstr(pk, "retry_after_ms");
            e |= msgpack_pack_uint64(pk, r->retry_after_ms);
        }
    }
    return e ? TH_ENOMEM : 0;
}

int th_codec_result_to_buf(th_buf *out, const th_result_copy *r)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, th_buf_msgpack_write);
    return th_codec_pack_result(&pk, r);
}

static int copy_text(th_buf *b, const msgpack_object *o)
{
    const char *p;
    size_t n;
    if (!o)
        return 0;
    if (!obj_bytes(o, &p, &n))
        return TH_EPROTO;
    return n ? th_buf_append(b, p, n) : 0;
}

static int dup_cstr(char **dst, const msgpack_object *o)
{
    const char *p;
    size_t n;
    if (!o || !obj_bytes(o, &p, &n))
        return 0;
    return (*dst = strndup(p, n)) ? 0 : TH_ENOMEM;
}

int th_codec_unpack_result(const msgpack_object *o, th_result_copy *r)
{
    memset(r, 0, sizeof *r);
    if (o->type != MSGPACK_OBJECT_MAP)
        return TH_EPROTO;
    const msgpack_object *status = map_get(o, "status");
    const msgpack_object *error = map_get(o, "error");
    const msgpack_object *ok = map_get(o, "ok");
    if (status && key_is(status, "running")) {
        const msgpack_object *id = map_get(o, "task_id");
        if (!id || id->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return TH_EPROTO;
        r->kind = TH_RESULT_RUNNING;
        r->task_id = id->via.u64;
        return dup_cstr(&r->message, map_get(o, "message"));
    }
    if (error) {
        if (error->type != MSGPACK_OBJECT_MAP)
            return TH_EPROTO;
        r->kind = TH_RESULT_ERROR;
        const msgpack_object *code = map_get(error, "code");
        char name[64] = "internal";
        const char *p;
        size_t n;
        if (code && obj_bytes(code, &p, &n))
            snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), p);
        r->error = th_err_from_name(name);
        const msgpack_object *ra = map_get(error, "retry_after_ms");
        if (ra && ra->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            r->retry_after_ms = ra->via.u64 < TOOLHOST_MAX_RETRY_AFTER_MS
                                    ? ra->via.u64
                                    : TOOLHOST_MAX_RETRY_AFTER_MS;
        return dup_cstr(&r->message, map_get(error, "message"));
    }
    if (!ok || ok->type != MSGPACK_OBJECT_BOOLEAN)
        return TH_EPROTO;
    r->kind = TH_RESULT_DONE;
    r->ok = ok->via.boolean;
    r->structured = map_get(o, "structured") != NULL;
    int rc = copy_text(&r->out, map_get(o, "stdout"));
    if (rc == 0)
        rc = copy_text(&r->err, map_get(o, "stderr"));
    const msgpack_object *meta = map_get(o, "meta");
    if (rc == 0 && meta && meta->type == MSGPACK_OBJECT_MAP && meta->via.map.size) {
        msgpack_packer pk;
        msgpack_packer_init(&pk, &r->meta, th_buf_msgpack_write);
        rc = msgpack_pack_object(&pk, *meta) == 0 ? 0 : TH_ENOMEM;
    }
    if (rc)
        th_result_copy_destroy(r);
    return rc;
}

int th_codec_unpack_result_bytes(const uint8_t *data, size_t len, th_result_copy *r)
{
    memset(r, 0, sizeof *r);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = TH_EPROTO;
    if (data && msgpack_unpack_next(&u, (const char *)data, len, &off) == MSGPACK_UNPACK_SUCCESS)
        rc = th_codec_unpack_result(&u.data, r);
    msgpack_unpacked_destroy(&u);
    return rc;
}

json_t *th_codec_result_json(const th_result_copy *r, th_error *err)
{
    th_buf b = TH_BUF_INIT;
    json_t *j = NULL;
    if (th_codec_result_to_buf(&b, r) != 0)
        th_error_set(err, TH_ENOMEM, "out of memory");
    else
        j = json_of(&b, err);
    th_buf_destroy(&b);
    return j;
}

int th_result_copy_dup(th_result_copy *dst, const th_result_copy *src)
{
    memset(dst, 0, sizeof *dst);
    dst->kind = src->kind;
    dst->ok = src->ok;
    dst->error = src->error;
    dst->task_id = src->task_id;
    dst->structured = src->structured;
    dst->retry_after_ms = src->retry_after_ms;
    if ((src->out.len && th_buf_append(&dst->out, src->out.data, src->out.len)) ||
        (src->err.len && th_buf_append(&dst->err, src->err.data, src->err.len)) ||
        (src->meta.len && th_buf_append(&dst->meta, src->meta.data, src->meta.len)) ||
        (src->message && !(dst->message = strdup(src->message)))) {
        th_result_copy_destroy(dst);
        memset(dst, 0, sizeof *dst);
        return TH_ENOMEM;
    }
    return 0;
}

/* ---- Progress ---------------------------------------------------------------------- */

int th_codec_pack_progress(msgpack_packer *pk, const th_progress *p)
{
    int e = msgpack_pack_array(pk, 2);
    e |= msgpack_pack_uint64(pk, p->task_id);
    e |= msgpack_pack_map(pk, 2 + (p->fraction >= 0) + (p->data != NULL));
    e |= th_pack_cstr(pk, "message");
    e |= th_pack_cstr(pk, p->message ? p->message : "");
    if (p->fraction >= 0) {
        e |= th_pack_cstr(pk, "progress");
        e |= msgpack_pack_double(pk, p->fraction);
    }
    if (p->data) {
        e |= th_pack_cstr(pk, "data");
        e |= pk->callback(pk->data, (const char *)p->data, p->data_len);
    }
    e |= th_pack_cstr(pk, "coalesced");
    e |= msgpack_pack_uint32(pk, p->coalesced);
    return e ? TH_ENOMEM : 0;
}

int th_codec_unpack_progress(const msgpack_object *params, th_progress *p)
{
    memset(p, 0, sizeof *p);
    p->fraction = -1;
    if (params->type != MSGPACK_OBJECT_ARRAY || params->via.array.size < 2 ||
        params->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        params->via.array.ptr[1].type != MSGPACK_OBJECT_MAP)
        return TH_EPROTO;
    const msgpack_object *info = &params->via.array.ptr[1];
    p->task_id = params->via.array.ptr[0].via.u64;
    const msgpack_object *m = map_get(info, "message");
    const msgpack_object *f = map_get(info, "progress");
    const msgpack_object *co = map_get(info, "coalesced");
    if (m && m->type == MSGPACK_OBJECT_STR) {
        p->message = m->via.str.ptr;
        p->message_len = m->via.str.size;
    }
    if (f && (f->type == MSGPACK_OBJECT_FLOAT64 || f->type == MSGPACK_OBJECT_FLOAT32))
        p->fraction = f->via.f64;
    else if (f && f->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        p->fraction = (double)f->via.u64;
    if (co && co->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        p->coalesced = co->via.u64 > UINT32_MAX ? UINT32_MAX : (uint32_t)co->via.u64;
    return 0;
}

/* ---- Task info ------------------------------------------------------------------------ */

const char *th_task_state_name(th_task_state st)
{
    switch (st) {
    case TH_TASK_WORKING: return "working";
    case TH_TASK_COMPLETED: return "completed";
    case TH_TASK_FAILED: return "failed";
    case TH_TASK_CANCELLED: return "cancelled";
    }
    return "failed";
}

th_task_state th_task_state_of(const th_result_copy *r)
{
    if (r->kind == TH_RESULT_RUNNING)
        return TH_TASK_WORKING;
    if (r->kind == TH_RESULT_DONE)
        return r->ok ? TH_TASK_COMPLETED : TH_TASK_FAILED;
    return r->error == TH_ECANCELLED ? TH_TASK_CANCELLED : TH_TASK_FAILED;
}

static int pack_iso(msgpack_packer *pk, int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    char buf[48];
    if (ms < 0 || !gmtime_r(&t, &tm))
        return msgpack_pack_nil(pk);
    size_t k = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + k, sizeof buf - k, ".%03dZ", (int)(ms % 1000));
    return th_pack_cstr(pk, buf);
}

int th_codec_pack_task(msgpack_packer *pk, const th_task_view *t, int64_t now_ms)
{
    bool live = t->state == TH_TASK_WORKING;
    int64_t end = live ? now_ms : t->ended_ms;
    int e = msgpack_pack_map(pk, 11);
    e |= th_pack_cstr(pk, "task_id");
    e |= msgpack_pack_uint64(pk, t->task_id);
    e |= th_pack_cstr(pk, "tool");
    e |= th_pack_cstr(pk, t->tool ? t->tool : "");
    e |= th_pack_cstr(pk, "status");
    e |= th_pack_cstr(pk, live ? "running" : "done");
    e |= th_pack_cstr(pk, "state");
    e |= th_pack_cstr(pk, th_task_state_name(t->state));
    e |= th_pack_cstr(pk, "scope");
    e |= th_pack_cstr(pk, t->scope == TH_SCOPE_TOOLSET ? "toolset" : "session");
    e |= th_pack_cstr(pk, "elapsed_ms");
    e |= msgpack_pack_double(pk, (double)(end > t->started_ms ? end - t->started_ms : 0));
    e |= th_pack_cstr(pk, "started_at");
    e |= pack_iso(pk, t->started_ms);
    e |= th_pack_cstr(pk, "last_update");
    e |= pack_iso(pk, t->last_update_ms);
    e |= th_pack_cstr(pk, "message");
    e |= th_pack_cstr(pk, t->message ? t->message : "");
    e |= th_pack_cstr(pk, "progress");
    e |= t->fraction >= 0 ? msgpack_pack_double(pk, t->fraction) : msgpack_pack_nil(pk);
    e |= th_pack_cstr(pk, "arguments");
    if (t->args && t->args_len)
        e |= pk->callback(pk->data, (const char *)t->args, t->args_len);
    else
        e |= msgpack_pack_map(pk, 0);
    return e ? TH_ENOMEM : 0;
}

json_t *th_codec_task_json(const th_task_view *t, int64_t now_ms, th_error *err)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    json_t *j = NULL;
    if (th_codec_pack_task(&pk, t, now_ms) != 0)
        th_error_set(err, TH_ENOMEM, "out of memory");
    else
        j = json_of(&b, err);
    th_buf_destroy(&b);
    return j;
}

/* ---- Tool entries ------------------------------------------------------------------------ */

int th_codec_pack_tool(msgpack_packer *pk, const th_tool *t)
{
    return th_schema_pack_tool(pk, t);
}

json_t *th_codec_tool_json(const th_tool *t, th_error *err)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    json_t *j = NULL;
    if (th_codec_pack_tool(&pk, t) != 0)
        th_error_set(err, TH_ENOMEM, "out of memory");
    else
        j = json_of(&b, err);
    th_buf_destroy(&b);
    return j;
}
