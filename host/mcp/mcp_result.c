/* mcp_result.c - a tools/call result (CallToolResult) from a th_result:
 * stdout as a text block (binary: base64 in an image or audio block when
 * meta's mime_type says so, else in an embedded resource), stderr as a
 * second text block when the call failed, meta under _meta with
 * "toolhost/" keys; every tool-level failure is isError: true with a
 * message a model can act on.  An empty stream adds no block: a failed
 * call's content is its stdout and stderr when it wrote them, else a line
 * that says it failed. */
#include <msgpack.h>
#include <nettle/base64.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_int.h"
#include "th/content.h"
#include "th/json.h"
#include "th/mpwalk.h"
#include "th/mpzone.h"
#include "th/utf8.h"
#include "toolhost/plugin.h"

/* Text for JSON: ill-formed UTF-8 becomes U+FFFD.  NULL: no memory. */
static json_t *text_json(const uint8_t *p, size_t n)
{
    if (!p || n == 0)
        return json_string("");
    if (th_utf8_valid(p, n))
        return json_stringn((const char *)p, n);
    th_buf b;
    th_buf_init(&b);
    size_t i = 0;
    while (i < n) {
        size_t bad = 0, k = th_utf8_seq(p + i, n - i, &bad);
        if (k) {
            if (th_buf_append(&b, p + i, k) != 0)
                goto fail;
            i += k;
        } else {
            if (th_buf_append(&b, "\xEF\xBF\xBD", 3) != 0)
                goto fail;
            i += bad ? bad : 1;
        }
    }
    json_t *j = json_stringn(b.len ? (const char *)b.data : "", b.len);
    th_buf_destroy(&b);
    return j;
fail:
    th_buf_destroy(&b);
    return NULL;
}

char *mcp_base64(const uint8_t *p, size_t n)
{
    char *out = malloc(BASE64_ENCODE_RAW_LENGTH(n) + 1);
    if (!out)
        return NULL;
    base64_encode_raw(out, n, p);
    out[BASE64_ENCODE_RAW_LENGTH(n)] = '\0';
    return out;
}

static json_t *text_block(const uint8_t *p, size_t n)
{
    json_t *t = text_json(p, n);
    return t ? json_pack("{s:s, s:o}", "type", "text", "text", t) : NULL;
}

/* What a model can do about a tool error of this code. */
static const char *hint(int code)
{
    switch (code) {
    case TH_EARGS:
        return "Fix the arguments (see the tool's inputSchema) and call "
               "again.";
    case TH_EPERM:
        return "The host's permission policy refused this call; do not "
               "retry it unchanged.";
    case TH_ETIMEOUT:
        return "The call ran out of time; try smaller input or a narrower "
               "request.";
    case TH_EBUSY:
        return "The host is busy; try again in a moment.";
    case TH_EDUPLICATE:
        return "Wait for the running call to finish, or cancel it first.";
    case TH_ECANCELLED:
        return "The call was cancelled before it finished.";
    case TH_EUNKNOWN_TOOL:
        return "Use one of the tools listed by tools/list.";
    case TH_EUNAVAILABLE:
        return "What the tool depends on is down; try again later (after "
               "_meta toolhost/retry_after_ms when given).";
    case TH_EBACKEND_TIMEOUT:
        return "What the tool depends on did not answer in time; try again "
               "later or with a smaller request.";
    case TH_ERATE_LIMITED:
        return "Calls are limited for now; wait before trying again (_meta "
               "toolhost/retry_after_ms when given).";
    default:
        return NULL;
    }
}

json_t *mcp_tool_error(const char *tool, int code, const char *message)
{
    char text[2048];
    const char *h = hint(code);
    snprintf(text, sizeof text, "Tool %s failed (%s): %s%s%s", tool,
             th_err_name(code), message ? message : th_err_name(code),
             h ? "\n" : "", h ? h : "");
    json_t *t = text_json((const uint8_t *)text, strlen(text));
    return json_pack("{s:[{s:s, s:o}], s:b, s:{s:s}}", "content", "type",
                     "text", "text", t, "isError", 1, "_meta",
                     "toolhost/error", th_err_name(code));
}

/* The block of a binary stdout (b: its base64): MCP's image or audio
 * block for an image/ or audio/ media type (audio only for a client whose
 * protocol has it), else an embedded resource. */
static json_t *binary_block(const char *b, const char *mime,
                            uint64_t call_id, bool audio)
{
    if (!mime)
        mime = "application/octet-stream";
    if (strncmp(mime, "image/", 6) == 0 ||
        (audio && strncmp(mime, "audio/", 6) == 0))
        return json_pack("{s:s, s:s, s:s}", "type",
                         mime[0] == 'i' ? "image" : "audio", "data", b,
                         "mimeType", mime);
    char uri[64];
    snprintf(uri, sizeof uri, "toolhost://call/%llu/stdout",
             (unsigned long long)call_id);
    return json_pack("{s:s, s:{s:s, s:s, s:s}}", "type", "resource",
                     "resource", "uri", uri, "mimeType", mime, "blob", b);
}

/* The msgpack string o as a C string (copied into buf, at most n - 1
 * bytes), or NULL when o is not a string. */
static const char *mp_str(const msgpack_object *o, char *buf, size_t n)
{
    if (!o || o->type != MSGPACK_OBJECT_STR || o->via.str.size >= n)
        return NULL;
    memcpy(buf, o->via.str.ptr, o->via.str.size);
    buf[o->via.str.size] = '\0';
    return buf;
}

static const msgpack_object *mp_get(const msgpack_object *map, const char *k)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    size_t kl = strlen(k);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *key = &map->via.map.ptr[i].key;
        if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == kl &&
            memcmp(key->via.str.ptr, k, kl) == 0)
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

/* meta.toolhost.content of a result's meta (the blocks a tool wrote with
 * write_block(); th_content_pack's form), or NULL. */
static const msgpack_object *blocks_of(const msgpack_object *meta)
{
    const msgpack_object *c = mp_get(mp_get(meta, "toolhost"), "content");
    return c && c->type == MSGPACK_OBJECT_ARRAY ? c : NULL;
}

/* Appends the blocks to content: 0, or -1 out of memory. */
static int append_blocks(json_t *content, const msgpack_object *arr,
                         bool audio, bool links)
{
    static const char *const kinds[] = {NULL, "text", "image", "audio",
                                        "resource", "resource_link"};
    for (uint32_t i = 0; i < arr->via.array.size; i++) {
        const msgpack_object *o = &arr->via.array.ptr[i];
        char type[16], mime[256], uri[2049], name[256];
        const char *t = mp_str(mp_get(o, "type"), type, sizeof type);
        th_block b;
        memset(&b, 0, sizeof b);
        for (uint32_t k = 1; t && k < sizeof kinds / sizeof kinds[0]; k++)
            if (strcmp(t, kinds[k]) == 0)
                b.kind = k;
        if (!b.kind)
            continue; /* (the core wrote it: not reached) */
        b.mime_type = (char *)mp_str(mp_get(o, "mime_type"), mime,
                                     sizeof mime);
        b.uri = (char *)mp_str(mp_get(o, "uri"), uri, sizeof uri);
        b.name = (char *)mp_str(mp_get(o, "name"), name, sizeof name);
        const msgpack_object *d = mp_get(o, b.kind == TOOLHOST_BLOCK_TEXT
                                                ? "text"
                                                : "data");
        if (d && d->type == MSGPACK_OBJECT_STR) {
            b.data = (uint8_t *)d->via.str.ptr;
            b.len = d->via.str.size;
        } else if (d && d->type == MSGPACK_OBJECT_BIN) {
            b.data = (uint8_t *)d->via.bin.ptr;
            b.len = d->via.bin.size;
        }
        /* a text block's text is a C string for json_pack: copied */
        uint8_t *txt = NULL;
        if (b.kind == TOOLHOST_BLOCK_TEXT) {
            txt = malloc(b.len + 1);
            if (!txt)
                return -1;
            if (b.len)
                memcpy(txt, b.data, b.len);
            txt[b.len] = 0;
            b.data = txt;
        }
        json_t *j = mcp_block_json(&b, audio, links);
        free(txt);
        if (!j || json_array_append_new(content, j) != 0)
            return -1;
    }
    return 0;
}

json_t *mcp_tool_result(const th_result *r, const char *tool,
                        uint64_t call_id, uint32_t out_type, bool structured,
                        bool elicitation, bool audio, bool links)
{
    if (r->kind == TH_RESULT_ERROR) {
        if (r->error == TH_EPERM && !elicitation &&
            r->message && strstr(r->message, "no one can be asked")) {
            char m[1400];
            snprintf(m, sizeof m,
                     "%s. This MCP client did not declare elicitation, so "
                     "the host cannot ask; to allow the tool, add a rule "
                     "`- match: \"%s\"\\n  action: allow` to the toolset's "
                     "permissions in the host config (or `ask_fallback: "
                     "allow_read_only` for read-only tools), or use a client "
                     "that supports elicitation",
                     r->message, tool);
            return mcp_tool_error(tool, r->error, m);
        }
        json_t *res = mcp_tool_error(tool, r->error, r->message);
        /* when to try again (ABI 1.5: a backend's, or the rate limits') */
        json_t *meta = json_object_get(res, "_meta");
        if (res && r->retry_after_ms &&
            json_object_set_new(meta, "toolhost/retry_after_ms",
                                json_integer((json_int_t)r->retry_after_ms)) != 0) {
            json_decref(res);
            return NULL;
        }
        return res;
    }
    json_t *content = json_array();
    json_t *res = json_object();
    if (!content || !res)
        goto fail;
    bool binary = out_type == TOOLHOST_SEM_BINARY;
    th_error err;
    json_t *meta = r->meta ? th_json_from_msgpack_lossy(r->meta, r->meta_len,
                                                        &err)
                           : NULL;
    if (binary && r->out_len) {
        char *b = mcp_base64(r->out, r->out_len);
        const char *mime = json_string_value(json_object_get(meta,
                                                             "mime_type"));
        json_t *blk = b ? binary_block(b, mime, call_id, audio) : NULL;
        free(b);
        if (!blk || json_array_append_new(content, blk) != 0)
            goto fail_meta;
    } else if (r->out_len) {
        json_t *blk = text_block(r->out, r->out_len);
        if (!blk || json_array_append_new(content, blk) != 0)
            goto fail_meta;
    }
    if (!r->ok && r->err_len) {
        json_t *blk = text_block(r->err, r->err_len);
        if (!blk || json_array_append_new(content, blk) != 0)
            goto fail_meta;
    }
    if (r->meta) { /* the tool's blocks, after its streams */
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        int brc = 0;
        if (msgpack_unpack_next(&u, (const char *)r->meta, r->meta_len,
                                NULL) == MSGPACK_UNPACK_SUCCESS) {
            const msgpack_object *arr = blocks_of(&u.data);
            if (arr)
                brc = append_blocks(content, arr, audio, links);
        }
        msgpack_unpacked_destroy(&u);
        if (brc != 0)
            goto fail_meta;
        /* not twice: _meta keeps the rest */
        json_t *thm = json_object_get(meta, "toolhost");
        if (json_object_get(thm, "content")) {
            json_object_del(thm, "content");
            if (json_object_size(thm) == 0)
                json_object_del(meta, "toolhost");
            if (json_object_size(meta) == 0) { /* nothing else to say */
                json_decref(meta);
                meta = NULL;
            }
        }
    }
    if (!r->ok && json_array_size(content) == 0) {
        char m[300];
        snprintf(m, sizeof m, "Tool %.200s failed and wrote no output.", tool);
        json_t *blk = text_block((const uint8_t *)m, strlen(m));
        if (!blk || json_array_append_new(content, blk) != 0)
            goto fail_meta;
    }
    json_t *mm = json_object();
    if (!mm)
        goto fail_meta;
    json_object_set_new(mm, "toolhost/call_id", json_integer((json_int_t)call_id));
    if (meta)
        json_object_set_new(mm, "toolhost/meta", meta);
    meta = NULL;
    /* structuredContent: a tool with an (object) output schema; its
     * stdout, validated against the schema by the host at the end of the
     * call, is the JSON; the text block above carries the same JSON, as
     * the spec asks for clients that do not read structuredContent. */
    if (structured && r->ok && !binary && r->out_len) {
        json_t *sc = json_loadb((const char *)r->out, r->out_len,
                                JSON_DECODE_ANY, NULL);
        if (json_is_object(sc))
            json_object_set_new(res, "structuredContent", sc);
        else
            json_decref(sc);
    }
    if (json_object_set_new(res, "content", content) != 0)
        goto fail_nocontent;
    content = NULL;
    json_object_set_new(res, "isError", json_boolean(!r->ok));
    json_object_set_new(res, "_meta", mm);
    return res;
fail_meta:
    json_decref(meta);
fail:
    json_decref(content);
    json_decref(res);
    return NULL;
fail_nocontent:
    json_decref(res);
    return NULL;
}

/* The JSON-RPC response of a plain result straight as text, the same text
 * that mcp_send_result() of mcp_tool_result() writes, without building a
 * JSON tree: done, text stdout (valid UTF-8), no structuredContent.
 * 0; 1: not plain (build the tree); -1: out of memory. */
/* Valid UTF-8: ASCII bytes looked at eight at a time first. */
static bool text_ok(const void *p, size_t n)
{
    const unsigned char *s = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, s + i, 8);
        if (v & 0x8080808080808080ull)
            return th_utf8_valid(s + i, n - i);
    }
    for (; i < n; i++)
        if (s[i] & 0x80)
            return th_utf8_valid(s + i, n - i);
    return true;
}

int mcp_tool_result_text(th_buf *b, const json_t *id, const th_result *r,
                         uint64_t call_id, uint32_t out_type,
                         bool structured)
{
    if (r->kind != TH_RESULT_DONE || out_type == TOOLHOST_SEM_BINARY ||
        (structured && r->ok && r->out_len) || (!r->ok && !r->out_len))
        return 1; /* a failure without stdout: the tree's way */
    /* The meta checked and unpacked once, into this thread's zone: for
     * its blocks (then the tree's way) and for its JSON below. */
    bool cached = false;
    msgpack_zone *zone = NULL;
    msgpack_object mo;
    bool meta_ok = false;
    if (r->meta &&
        th_mp_check(r->meta, r->meta_len, TH_MP_MAX_DEPTH, NULL, NULL) == 0) {
        if (!(zone = th_mp_zone_get(&cached)))
            return -1;
        msgpack_unpack_return ur = msgpack_unpack(
            (const char *)r->meta, r->meta_len, NULL, zone, &mo);
        meta_ok = ur == MSGPACK_UNPACK_SUCCESS ||
                  ur == MSGPACK_UNPACK_EXTRA_BYTES; /* (as unpack_next) */
    }
    bool err_block = !r->ok && r->err_len;
    int rc = 0;
    if ((meta_ok && blocks_of(&mo)) ||
        (r->out_len && !text_ok(r->out, r->out_len)) ||
        (err_block && !text_ok(r->err, r->err_len)))
        rc = 1;
    else if (th_buf_reserve(b, 160 + r->out_len + r->err_len) != 0)
        rc = -1;
    if (rc) {
        if (zone)
            th_mp_zone_put(zone, cached);
        return rc;
    }
    rc = th_buf_puts(b, "{\"jsonrpc\":\"2.0\",\"id\":");
    rc |= mcp_json_append(b, id ? id : json_null());
    rc |= th_buf_puts(b, ",\"result\":{\"content\":[");
    if (r->out_len) {
        rc |= th_buf_puts(b, "{\"type\":\"text\",\"text\":");
        rc |= mcp_json_append_string(b, (const char *)r->out, r->out_len);
        rc |= th_buf_puts(b, err_block ? "}," : "}");
    }
    if (err_block) {
        rc |= th_buf_puts(b, "{\"type\":\"text\",\"text\":");
        rc |= mcp_json_append_string(b, (const char *)r->err, r->err_len);
        rc |= th_buf_puts(b, "}");
    }
    rc |= th_buf_puts(b, r->ok ? "],\"isError\":false,\"_meta\":{"
                                 "\"toolhost/call_id\":"
                               : "],\"isError\":true,\"_meta\":{"
                                 "\"toolhost/call_id\":");
    char num[24];
    size_t nl = sizeof num;
    uint64_t v = call_id;
    do {
        num[--nl] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    rc |= th_buf_append(b, num + nl, sizeof num - nl);
    if (r->meta) {
        size_t at = b->len;
        rc |= th_buf_puts(b, ",\"toolhost/meta\":");
        int m = rc ? -1 : meta_ok ? mcp_json_append_mpobject(b, &mo) : 1;
        if (m < 0)
            rc = -1;
        if (m == 1) { /* the tree's own way */
            b->len = at;
            th_error err;
            json_t *meta = th_json_from_msgpack_lossy(r->meta, r->meta_len,
                                                      &err);
            if (meta) {
                rc |= th_buf_puts(b, ",\"toolhost/meta\":");
                rc |= mcp_json_append(b, meta);
                json_decref(meta);
            }
        }
    }
    if (zone)
        th_mp_zone_put(zone, cached);
    rc |= th_buf_puts(b, "}}}");
    return rc ? -1 : 0;
}
