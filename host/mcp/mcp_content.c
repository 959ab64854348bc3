/* mcp_content.c - resources, prompts and completion over MCP: the methods
 * resources/list, resources/templates/list, resources/read,
 * resources/subscribe, resources/unsubscribe, prompts/list, prompts/get
 * and completion/complete, served from what plugins declare (ABI 1.4,
 * th/content.h).  docs/mcp.md ("Resources, prompts and completion"). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_int.h"
#include "front/mcp_config.h"
#include "th/config.h"
#include "th/content.h"
#include "th/json.h"
#include "th/log.h"
#include "th/utf8.h"

#define PAGE 100 /* list entries per page (nextCursor past it) */

static void set_opt(json_t *o, const char *key, const char *v)
{
    if (v)
        json_object_set_new(o, key, json_string(v));
}

/* ---- Lists ------------------------------------------------------------------ */

typedef struct lister {
    json_t *arr;
    size_t skip, n;     /* entries to skip (the cursor); seen so far */
    bool more;
    bool whole;         /* every entry, no page (a digest) */
} lister;

static bool list_take(lister *l)
{
    if (l->whole)
        return true;
    size_t i = l->n++;
    if (i < l->skip)
        return false;
    if (i >= l->skip + PAGE) {
        l->more = true;
        return false;
    }
    return true;
}

static int list_resource(const th_resource *r, void *ud)
{
    lister *l = ud;
    if (!list_take(l))
        return 0;
    json_t *o = json_pack("{s:s, s:s}", r->is_template ? "uriTemplate" : "uri",
                          r->uri, "name", r->name);
    if (!o)
        return TH_ENOMEM;
    set_opt(o, "title", r->title);
    set_opt(o, "description", r->description);
    set_opt(o, "mimeType", r->mime_type);
    json_array_append_new(l->arr, o);
    return 0;
}

static int list_prompt(const th_prompt *q, void *ud)
{
    lister *l = ud;
    if (!list_take(l))
        return 0;
    json_t *args = json_array();
    json_t *o = json_pack("{s:s, s:s}", "name", q->name, "description",
                          q->description);
    if (!o || !args) {
        json_decref(o);
        json_decref(args);
        return TH_ENOMEM;
    }
    set_opt(o, "title", q->title);
    for (size_t i = 0; i < q->n_args; i++) {
        json_t *a = json_pack("{s:s, s:s, s:b}", "name", q->args[i].name,
                              "description", q->args[i].description,
                              "required", q->args[i].required);
        if (a)
            json_array_append_new(args, a);
    }
    json_object_set_new(o, "arguments", args);
    json_array_append_new(l->arr, o);
    return 0;
}

/* ---- Digests (list_changed) ------------------------------------------------ */

uint64_t mcp_resources_digest(th_session *s, void *ud)
{
    (void)ud;
    lister fixed = {.arr = json_array(), .whole = true};
    lister tmpl = {.arr = json_array(), .whole = true};
    json_t *both = json_array();
    uint64_t d = 0;
    if (fixed.arr && tmpl.arr && both &&
        th_session_resources(s, false, list_resource, &fixed) == 0 &&
        th_session_resources(s, true, list_resource, &tmpl) == 0 &&
        json_array_append(both, fixed.arr) == 0 &&
        json_array_append(both, tmpl.arr) == 0)
        d = mcp_json_digest(both);
    json_decref(fixed.arr);
    json_decref(tmpl.arr);
    json_decref(both);
    return d;
}

uint64_t mcp_prompts_digest(th_session *s, void *ud)
{
    (void)ud;
    lister l = {.arr = json_array(), .whole = true};
    uint64_t d = l.arr && th_session_prompts(s, list_prompt, &l) == 0
                     ? mcp_json_digest(l.arr)
                     : 0;
    json_decref(l.arr);
    return d;
}

/* resources/list, resources/templates/list, prompts/list. */
void mcp_content_list(th_mcp_session *m, const json_t *id,
                      const json_t *params, const char *method)
{
    lister l = {.arr = json_array()};
    if (!mcp_list_cursor(m, id, params, method, &l.skip)) {
        json_decref(l.arr);
        return;
    }
    bool prompts = strcmp(method, "prompts/list") == 0;
    bool templates = strcmp(method, "resources/templates/list") == 0;
    int rc = !l.arr ? TH_ENOMEM
             : prompts ? th_session_prompts(m->s, list_prompt, &l)
                       : th_session_resources(m->s, templates, list_resource,
                                              &l);
    if (rc) {
        json_decref(l.arr);
        mcp_send_error(m, id, MCP_INTERNAL_ERROR, "out of memory");
        return;
    }
    json_t *res = json_object();
    if (res) {
        json_object_set_new(res, prompts     ? "prompts"
                                 : templates ? "resourceTemplates"
                                             : "resources",
                            l.arr);
        if (l.more) {
            char cur[32];
            snprintf(cur, sizeof cur, "%zu", l.skip + PAGE);
            json_object_set_new(res, "nextCursor", json_string(cur));
        }
    } else {
        json_decref(l.arr);
    }
    mcp_send_cacheable(m, id, res);
}

/* ---- Blocks ------------------------------------------------------------------ */

/* An embedded resource's body: text when its type is textual and its
 * bytes UTF-8, else a blob. */
static json_t *resource_body(const th_block *b, const char *uri)
{
    const char *mime = b->mime_type ? b->mime_type : "application/octet-stream";
    json_t *o = json_pack("{s:s, s:s}", "uri", b->uri ? b->uri : uri,
                          "mimeType", b->kind == TOOLHOST_BLOCK_TEXT && !b->mime_type
                                          ? "text/plain"
                                          : mime);
    if (!o)
        return NULL;
    if (b->kind == TOOLHOST_BLOCK_TEXT ||
        (th_mime_textual(mime) && th_utf8_valid(b->data, b->len))) {
        json_object_set_new(o, "text", json_stringn((const char *)b->data,
                                                    b->len));
    } else {
        char *enc = mcp_base64(b->data, b->len);
        json_object_set_new(o, "blob", enc ? json_string(enc) : NULL);
        free(enc);
    }
    return o;
}

/* A content block of a prompt message, in what the session's protocol
 * version has: before 2025-03-26 no audio block (the clip goes as an
 * embedded resource), before 2025-06-18 no resource_link (a text naming
 * the link). */
static json_t *content_block(const th_mcp_session *m, const th_block *b)
{
    return mcp_block_json(b, mcp_has_audio(m), mcp_has_links(m));
}

json_t *mcp_block_json(const th_block *b, bool audio, bool links)
{
    if (b->kind == TOOLHOST_BLOCK_AUDIO && !audio) {
        json_t *r = resource_body(b, "toolhost://prompt/audio");
        return r ? json_pack("{s:s, s:o}", "type", "resource", "resource", r)
                 : NULL;
    }
    if (b->kind == TOOLHOST_BLOCK_LINK && !links) {
        char t[2400];
        snprintf(t, sizeof t, "%s: %s", b->name, b->uri);
        return json_pack("{s:s, s:s}", "type", "text", "text", t);
    }
    switch (b->kind) {
    case TOOLHOST_BLOCK_TEXT:
        return json_pack("{s:s, s:s%}", "type", "text", "text",
                         (const char *)b->data, b->len);
    case TOOLHOST_BLOCK_IMAGE:
    case TOOLHOST_BLOCK_AUDIO: {
        char *enc = mcp_base64(b->data, b->len);
        json_t *o = enc ? json_pack("{s:s, s:s, s:s}", "type",
                                    b->kind == TOOLHOST_BLOCK_IMAGE ? "image"
                                                                    : "audio",
                                    "data", enc, "mimeType", b->mime_type)
                        : NULL;
        free(enc);
        return o;
    }
    case TOOLHOST_BLOCK_RESOURCE: {
        json_t *r = resource_body(b, b->uri);
        return r ? json_pack("{s:s, s:o}", "type", "resource", "resource", r)
                 : NULL;
    }
    default: { /* LINK */
        json_t *o = json_pack("{s:s, s:s, s:s}", "type", "resource_link",
                              "uri", b->uri, "name", b->name);
        if (o)
            set_opt(o, "mimeType", b->mime_type);
        return o;
    }
    }
}

/* The JSON-RPC error for what th_session_*() said. */
static void send_failure(th_mcp_session *m, const json_t *id, int rc,
                         const th_error *err)
{
    if (rc == TH_ENOTFOUND)
        mcp_send_error(m, id, -32002, "%s", err->msg); /* resource not found */
    else if (rc == TH_ENOMEM)
        mcp_send_error(m, id, MCP_INTERNAL_ERROR, "out of memory");
    else if (rc == TH_EARGS)
        mcp_send_error(m, id, MCP_INVALID_PARAMS, "%s", err->msg);
    else /* -32603, and toolhost's own code in data (plugin_crashed,
          * timeout, tool_failed, tool_error...): what RPC's error.code
          * says, so a client need not read the message */
        mcp_send(m,
                 json_pack("{s:s, s:O, s:{s:i, s:s, s:{s:s}}}", "jsonrpc",
                           "2.0", "id", id ? id : json_null(), "error",
                           "code", MCP_INTERNAL_ERROR, "message", err->msg,
                           "data", "code", th_err_name(rc)),
                 id);
}

static size_t budget(th_mcp_session *m)
{
    return m->max_message ? m->max_message : TH_MCP_MAX_MESSAGE_DEFAULT;
}

/* ---- resources/read --------------------------------------------------------- */

void mcp_resources_read(th_mcp_session *m, const json_t *id,
                        const json_t *params)
{
    const char *uri = json_string_value(json_object_get(params, "uri"));
    if (!uri || !uri[0] || strlen(uri) > 2048) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "resources/read needs params.uri (a string of 1 to "
                       "2048 bytes)");
        return;
    }
    th_content out;
    th_content_init(&out, TH_CONTENT_READ, budget(m));
    th_error err = {0};
    int rc = th_session_read(m->s, uri, &out, &err);
    if (rc) {
        send_failure(m, id, rc, &err);
        th_content_free(&out);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < out.n; i++) {
        json_t *o = resource_body(&out.v[i], uri);
        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    th_content_free(&out);
    mcp_send_cacheable(m, id, arr ? json_pack("{s:o}", "contents", arr) : NULL);
}

/* ---- resources/subscribe, resources/unsubscribe ------------------------------ */

/* Subscriptions held by every session of the process. */
static atomic_size_t n_subs_all;

bool mcp_subs_any(void)
{
    return atomic_load_explicit(&n_subs_all, memory_order_relaxed) != 0;
}

void mcp_resources_subscribe(th_mcp_session *m, const json_t *id,
                             const json_t *params, bool on)
{
    const char *uri = json_string_value(json_object_get(params, "uri"));
    if (!uri || !uri[0] || strlen(uri) > 2048) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "resources/%ssubscribe needs params.uri (a string of "
                       "1 to 2048 bytes)",
                       on ? "" : "un");
        return;
    }
    /* only what the session may read: another toolset's resources are
     * not there for it, not even as "it changed" */
    if (on && !th_session_resource_offered(m->s, uri)) {
        mcp_send_error(m, id, -32002, "resource '%.300s': not found (%s)",
                       uri, "resources/list and resources/templates/list "
                            "have the resources of this server");
        return;
    }
    th_config *cfg = th_host_config_get(m->h);
    const th_mcp_cfg *mc = th_mcp_config(cfg);
    size_t max = mc ? mc->max_subscriptions : 256; /* the section's default */
    th_config_unref(cfg);
    pthread_mutex_lock(&m->mu);
    size_t at = m->n_subs;
    for (size_t i = 0; i < m->n_subs; i++)
        if (strcmp(m->subs[i].uri, uri) == 0)
            at = i;
    int code = 0;
    if (!on && at < m->n_subs) {
        free(m->subs[at].uri);
        m->subs[at] = m->subs[--m->n_subs];
        atomic_fetch_sub(&n_subs_all, 1);
    } else if (on && at == m->n_subs) {
        mcp_sub *v = m->n_subs < max ? realloc(m->subs, (m->n_subs + 1) *
                                                            sizeof *v)
                                     : NULL;
        char *d = v ? strdup(uri) : NULL;
        if (v)
            m->subs = v;
        if (d) {
            m->subs[m->n_subs++] = (mcp_sub){.uri = d};
            atomic_fetch_add(&n_subs_all, 1);
        } else {
            code = m->n_subs < max ? MCP_INTERNAL_ERROR : MCP_INVALID_REQUEST;
        }
    }
    size_t n = m->n_subs;
    pthread_mutex_unlock(&m->mu);
    if (code == MCP_INVALID_REQUEST) {
        th_log_warn("mcp session=%llu: a subscription refused: %zu at once "
                    "(mcp.max_subscriptions)",
                    (unsigned long long)th_session_id(m->s), n);
        mcp_send_error(m, id, code,
                       "this session has %zu subscriptions, the most it may "
                       "hold (mcp.max_subscriptions): unsubscribe first",
                       n);
    } else if (code) {
        mcp_send_error(m, id, code, "out of memory");
    } else {
        mcp_send_result(m, id, json_object());
    }
}

bool mcp_subs_mark_locked(th_mcp_session *m, const char *uri)
{
    for (size_t i = 0; i < m->n_subs; i++)
        if (strcmp(m->subs[i].uri, uri) == 0) {
            m->subs[i].pending = true;
            m->subs_pending = true;
            return true;
        }
    return false;
}

void mcp_subs_send_locked(th_mcp_session *m)
{
    if (!m->subs_pending)
        return;
    m->subs_pending = false;
    for (size_t i = 0; i < m->n_subs; i++) {
        if (!m->subs[i].pending)
            continue;
        m->subs[i].pending = false;
        json_t *msg = json_pack("{s:s, s:s, s:{s:s}}", "jsonrpc", "2.0",
                                "method", "notifications/resources/updated",
                                "params", "uri", m->subs[i].uri);
        mcp_send(m, msg, NULL);
    }
}

void mcp_subs_free(th_mcp_session *m)
{
    for (size_t i = 0; i < m->n_subs; i++)
        free(m->subs[i].uri);
    if (m->n_subs)
        atomic_fetch_sub(&n_subs_all, m->n_subs);
    free(m->subs);
    m->subs = NULL;
    m->n_subs = 0;
}

/* ---- prompts/get ------------------------------------------------------------- */

/* params.arguments as a msgpack map of strings, in *mp; false when it is
 * not an object of strings (the error was sent). */
static bool prompt_args(th_mcp_session *m, const json_t *id, const json_t *a,
                        th_buf *mp)
{
    if (!a || json_is_null(a))
        return true;
    const char *k;
    json_t *v;
    bool ok = json_is_object(a);
    json_object_foreach((json_t *)a, k, v) ok = ok && json_is_string(v);
    if (!ok) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "params.arguments must be an object of strings");
        return false;
    }
    if (th_json_to_msgpack(a, mp) != 0) {
        mcp_send_error(m, id, MCP_INTERNAL_ERROR, "out of memory");
        return false;
    }
    return true;
}

void mcp_prompts_get(th_mcp_session *m, const json_t *id, const json_t *params)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    if (!name) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "prompts/get needs params.name (a string)");
        return;
    }
    th_buf mp;
    th_buf_init(&mp);
    if (!prompt_args(m, id, json_object_get(params, "arguments"), &mp)) {
        th_buf_destroy(&mp);
        return;
    }
    th_content out;
    th_content_init(&out, TH_CONTENT_PROMPT, budget(m));
    th_error err = {0};
    int rc = th_session_prompt_get(m->s, name, mp.data, mp.len, &out, &err);
    th_buf_destroy(&mp);
    if (rc) {
        if (rc == TH_ENOTFOUND)
            mcp_send_error(m, id, MCP_INVALID_PARAMS, "%s (prompts/list has "
                           "the prompts of this server)", err.msg);
        else
            send_failure(m, id, rc, &err);
        th_content_free(&out);
        return;
    }
    json_t *msgs = json_array();
    for (size_t i = 0; msgs && i < out.n; i++) {
        json_t *c = content_block(m, &out.v[i]);
        json_t *msg = c ? json_pack("{s:s, s:o}", "role",
                                    out.v[i].role ? out.v[i].role : "user",
                                    "content", c)
                        : NULL;
        if (!msg || json_array_append_new(msgs, msg) != 0) {
            json_decref(msgs);
            msgs = NULL;
        }
    }
    th_content_free(&out);
    mcp_send_result(m, id, msgs ? json_pack("{s:o}", "messages", msgs) : NULL);
}

/* ---- completion/complete ----------------------------------------------------- */

void mcp_complete(th_mcp_session *m, const json_t *id, const json_t *params)
{
    const json_t *ref = json_object_get(params, "ref");
    const json_t *arg = json_object_get(params, "argument");
    const char *type = json_string_value(json_object_get(ref, "type"));
    bool is_prompt = type && strcmp(type, "ref/prompt") == 0;
    const char *name = json_string_value(
        json_object_get(ref, is_prompt ? "name" : "uri"));
    const char *an = json_string_value(json_object_get(arg, "name"));
    const char *av = json_string_value(json_object_get(arg, "value"));
    if (!type || (!is_prompt && strcmp(type, "ref/resource") != 0) || !name ||
        !an || !av) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "completion/complete needs params.ref ({type: "
                       "\"ref/prompt\", name} or {type: \"ref/resource\", "
                       "uri}) and params.argument {name, value}");
        return;
    }
    th_content out;
    th_content_init(&out, TH_CONTENT_COMPLETE, budget(m));
    th_error err = {0};
    int rc = th_session_complete(m->s, is_prompt, name, an, av, &out, &err);
    if (rc) {
        if (rc == TH_ENOTFOUND)
            mcp_send_error(m, id, MCP_INVALID_PARAMS, "%s", err.msg);
        else
            send_failure(m, id, rc, &err);
        th_content_free(&out);
        return;
    }
    json_t *vals = json_array();
    for (size_t i = 0; vals && i < out.n; i++)
        json_array_append_new(vals, json_stringn((const char *)out.v[i].data,
                                                 out.v[i].len));
    size_t total = out.n + out.dropped;
    bool more = out.dropped > 0;
    th_content_free(&out);
    mcp_send_result(m, id,
                    vals ? json_pack("{s:{s:o, s:I, s:b}}", "completion",
                                     "values", vals, "total",
                                     (json_int_t)total, "hasMore", more)
                         : NULL);
}
