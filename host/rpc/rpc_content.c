/* rpc_content.c - resources, prompts and completion over msgpack-RPC:
 * resources.list, resources.templates, resources.read, prompts.list,
 * prompts.get and completion.complete (docs/protocol.md, "Resources,
 * prompts and completion"), served from what plugins declare (ABI 1.4,
 * th/content.h) through the core's session functions, so a caller sees
 * what its toolsets offer and nothing else.
 *
 * Threads.  The loop thread, from rpc_dispatch(); the plugins' read(),
 * get() and complete() run here too (plugin.h: they never block), as they
 * do on the MCP front's thread.  Params point into the frame, which is
 * freed after rpc_dispatch() returns: every string is copied out first.
 */
#include "rpc_int.h"

#include <stdlib.h>
#include <string.h>

#include "th/codec.h"
#include "th/content.h"

#define MAX_URI 2048  /* a URI or a template, as the core allows         */
#define MAX_NAME 256  /* a prompt's or an argument's name                */
#define MAX_VALUE 4096 /* the value a completion completes               */
#define CONTENT_MAX (16u << 20) /* what one answer's blocks may hold     */

/* The bytes one answer's blocks may hold: 16 MiB, or half of
 * host.max_outbuf when that is less (the answer must fit the client's
 * output budget with room to spare).  Past it the plugin's content_add()
 * is refused and the request fails (the core logs it). */
static size_t budget(const rpc_conn *c)
{
    uint64_t half = c->srv->max_outbuf / 2;
    return half && half < CONTENT_MAX ? (size_t)half : CONTENT_MAX;
}

/* A string (str or bin) of 1..cap-1 bytes without NUL copied into buf;
 * false after answering invalid_request naming `what`. */
static bool get_str(rpc_conn *c, uint64_t msgid, const char *method,
                    const char *what, const msgpack_object *o, char *buf,
                    size_t cap)
{
    const char *p;
    size_t n;
    if (!o || !th_rpc_obj_str(o, &p, &n)) {
        send_error(c, msgid, TH_EINVAL, "%s: %s must be a string, got %s",
                   method, what, o ? th_rpc_obj_kind(o) : "nothing");
        return false;
    }
    if (n == 0 || n >= cap || memchr(p, '\0', n)) {
        send_error(c, msgid, TH_EINVAL, "%s: %s must be 1 to %zu bytes "
                   "without NUL, got %zu bytes%s", method, what, cap - 1, n,
                   n && n < cap ? " with a NUL" : "");
        return false;
    }
    memcpy(buf, p, n);
    buf[n] = '\0';
    return true;
}

/* No params: true, or false after answering invalid_request. */
static bool no_params(rpc_conn *c, uint64_t msgid, const char *method,
                      const msgpack_object *params)
{
    if (params->via.array.size == 0)
        return true;
    send_error(c, msgid, TH_EINVAL, "%s takes [], got %u params", method,
               (unsigned)params->via.array.size);
    return false;
}

/* What th_session_*() said, as the protocol error [code, message]. */
static void send_failure(rpc_conn *c, uint64_t msgid, int rc,
                         const th_error *err)
{
    if (rc == TH_ENOMEM)
        send_error(c, msgid, rc, "out of memory");
    else
        send_error(c, msgid, rc, "%s", err->msg[0] ? err->msg
                                                   : th_strerror(rc));
}

static int pack_opt(msgpack_packer *pk, const char *k, const char *v)
{
    return v ? th_pack_cstr(pk, k) | th_pack_cstr(pk, v) : 0;
}

/* ---- Lists ---------------------------------------------------------------- */

typedef struct lister {
    msgpack_packer pk;          /* into the entries' bytes */
    uint32_t n;
} lister;

static int list_resource(const th_resource *r, void *ud)
{
    lister *l = ud;
    msgpack_packer *pk = &l->pk;
    int e = msgpack_pack_map(pk, 2 + !!r->title + !!r->description +
                                     !!r->mime_type);
    e |= th_pack_cstr(pk, r->is_template ? "uri_template" : "uri");
    e |= th_pack_cstr(pk, r->uri);
    e |= th_pack_cstr(pk, "name");
    e |= th_pack_cstr(pk, r->name);
    e |= pack_opt(pk, "title", r->title);
    e |= pack_opt(pk, "description", r->description);
    e |= pack_opt(pk, "mime_type", r->mime_type);
    l->n++;
    return e ? TH_ENOMEM : 0;
}

static int list_prompt(const th_prompt *q, void *ud)
{
    lister *l = ud;
    msgpack_packer *pk = &l->pk;
    int e = msgpack_pack_map(pk, 3 + !!q->title);
    e |= th_pack_cstr(pk, "name");
    e |= th_pack_cstr(pk, q->name);
    e |= pack_opt(pk, "title", q->title);
    e |= th_pack_cstr(pk, "description");
    e |= th_pack_cstr(pk, q->description ? q->description : "");
    e |= th_pack_cstr(pk, "arguments");
    e |= msgpack_pack_array(pk, (uint32_t)q->n_args);
    for (size_t i = 0; i < q->n_args; i++) {
        const th_param *a = &q->args[i];
        e |= msgpack_pack_map(pk, 3);
        e |= th_pack_cstr(pk, "name");
        e |= th_pack_cstr(pk, a->name);
        e |= th_pack_cstr(pk, "description");
        e |= th_pack_cstr(pk, a->description ? a->description : "");
        e |= th_pack_cstr(pk, "required");
        e |= a->required ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    }
    l->n++;
    return e ? TH_ENOMEM : 0;
}

/* resources.list [], resources.templates [], prompts.list []: an array of
 * maps, packed after the walk (its length is known then). */
static void list(rpc_conn *c, uint64_t msgid, const msgpack_object *params,
                 const char *method, int what)
{
    if (!no_params(c, msgid, method, params))
        return;
    th_buf items = TH_BUF_INIT, r = TH_BUF_INIT;
    lister l = {.n = 0};
    msgpack_packer_init(&l.pk, &items, th_buf_msgpack_write);
    int rc = what == 2 ? th_session_prompts(c->session, list_prompt, &l)
                       : th_session_resources(c->session, what == 1,
                                              list_resource, &l);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &r, th_buf_msgpack_write);
    if (rc == 0 && (msgpack_pack_array(&pk, l.n) ||
                    th_buf_append(&r, items.data, items.len)))
        rc = TH_ENOMEM;
    if (rc)
        send_error(c, msgid, TH_ENOMEM, "out of memory");
    else
        send_result(c, msgid, &r);
    th_buf_destroy(&items);
    th_buf_destroy(&r);
}

/* ---- Digests (resources.changed, prompts.changed) ------------------------- */

uint64_t rpc_resources_digest(th_session *s, void *ud)
{
    (void)ud;
    th_buf items = TH_BUF_INIT;
    lister l = {.n = 0};
    msgpack_packer_init(&l.pk, &items, th_buf_msgpack_write);
    int rc = th_session_resources(s, false, list_resource, &l);
    if (rc == 0)
        rc = th_session_resources(s, true, list_resource, &l);
    uint64_t d = rc == 0 ? th_view_digest(items.data, items.len) : 0;
    th_buf_destroy(&items);
    return d;
}

uint64_t rpc_prompts_digest(th_session *s, void *ud)
{
    (void)ud;
    th_buf items = TH_BUF_INIT;
    lister l = {.n = 0};
    msgpack_packer_init(&l.pk, &items, th_buf_msgpack_write);
    int rc = th_session_prompts(s, list_prompt, &l);
    uint64_t d = rc == 0 ? th_view_digest(items.data, items.len) : 0;
    th_buf_destroy(&items);
    return d;
}

void rpc_m_resources_list(rpc_conn *c, uint64_t msgid,
                          const msgpack_object *params)
{
    list(c, msgid, params, "resources.list", 0);
}

void rpc_m_resources_templates(rpc_conn *c, uint64_t msgid,
                               const msgpack_object *params)
{
    list(c, msgid, params, "resources.templates", 1);
}

void rpc_m_prompts_list(rpc_conn *c, uint64_t msgid,
                        const msgpack_object *params)
{
    list(c, msgid, params, "prompts.list", 2);
}

/* ---- resources.read [uri] --------------------------------------------------- */

void rpc_m_resources_read(rpc_conn *c, uint64_t msgid,
                          const msgpack_object *params)
{
    static const char m[] = "resources.read";
    char uri[MAX_URI + 1];
    if (params->via.array.size != 1) {
        send_error(c, msgid, TH_EINVAL, "%s takes [uri], got %u params", m,
                   (unsigned)params->via.array.size);
        return;
    }
    if (!get_str(c, msgid, m, "uri", &params->via.array.ptr[0], uri,
                 sizeof uri))
        return;
    th_content out;
    th_content_init(&out, TH_CONTENT_READ, budget(c));
    th_error err;
    th_error_clear(&err);
    int rc = th_session_read(c->session, uri, &out, &err);
    th_buf r = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &r, th_buf_msgpack_write);
    if (rc == 0 && (msgpack_pack_map(&pk, 1) ||
                    th_pack_cstr(&pk, "contents") ||
                    th_content_pack(&out, &pk)))
        rc = th_error_set(&err, TH_ENOMEM, "out of memory");
    th_content_free(&out);
    if (rc)
        send_failure(c, msgid, rc, &err);
    else
        send_result(c, msgid, &r);
    th_buf_destroy(&r);
}

/* ---- prompts.get [name, args?] ---------------------------------------------- */

typedef struct prompt_find {
    const char *name;
    char *description;          /* a copy, or NULL */
    bool found, oom;
} prompt_find;

static int find_prompt(const th_prompt *q, void *ud)
{
    prompt_find *f = ud;
    if (strcmp(q->name, f->name) != 0)
        return 0;
    f->found = true;
    if (q->description && !(f->description = strdup(q->description)))
        f->oom = true;
    return 1; /* stop: the first of that name is the one served */
}

/* One block of a TH_CONTENT_PROMPT sink as th_content_pack() packs it:
 * the one-block array it makes, without its one-byte header (a fixarray
 * of 1 is always 0x91). */
static int pack_block(th_buf *r, const th_block *b)
{
    th_content one = {.v = (th_block *)b, .n = 1};
    th_buf tmp = TH_BUF_INIT;
    msgpack_packer tpk;
    msgpack_packer_init(&tpk, &tmp, th_buf_msgpack_write);
    int e = th_content_pack(&one, &tpk);
    if (!e && (tmp.len < 2 || tmp.data[0] != 0x91))
        e = TH_EINTERNAL;
    if (!e)
        e = th_buf_append(r, tmp.data + 1, tmp.len - 1);
    th_buf_destroy(&tmp);
    return e;
}

void rpc_m_prompts_get(rpc_conn *c, uint64_t msgid,
                       const msgpack_object *params)
{
    static const char m[] = "prompts.get";
    uint32_t np = params->via.array.size;
    char name[MAX_NAME + 1];
    if (np < 1 || np > 2) {
        send_error(c, msgid, TH_EINVAL, "%s takes [name, args?], got %u "
                   "params", m, (unsigned)np);
        return;
    }
    if (!get_str(c, msgid, m, "name", &params->via.array.ptr[0], name,
                 sizeof name))
        return;
    const msgpack_object *a = np > 1 ? &params->via.array.ptr[1] : NULL;
    if (a && a->type != MSGPACK_OBJECT_NIL && a->type != MSGPACK_OBJECT_MAP) {
        send_error(c, msgid, TH_EINVAL, "%s: args must be a map of "
                   "argument names to strings (or nil), got %s", m,
                   th_rpc_obj_kind(a));
        return;
    }
    /* the args as msgpack bytes of their own: validation and the plugin
     * read them after this frame's objects are gone */
    th_buf args = TH_BUF_INIT;
    msgpack_packer apk;
    msgpack_packer_init(&apk, &args, th_buf_msgpack_write);
    if (a && a->type == MSGPACK_OBJECT_MAP && msgpack_pack_object(&apk, *a)) {
        th_buf_destroy(&args);
        send_error(c, msgid, TH_ENOMEM, "out of memory");
        return;
    }
    prompt_find f = {.name = name};
    th_session_prompts(c->session, find_prompt, &f);
    th_content out;
    th_content_init(&out, TH_CONTENT_PROMPT, budget(c));
    th_error err;
    th_error_clear(&err);
    int rc = f.oom ? th_error_set(&err, TH_ENOMEM, "out of memory")
                   : th_session_prompt_get(c->session, name, args.data,
                                           args.len, &out, &err);
    th_buf_destroy(&args);
    th_buf r = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &r, th_buf_msgpack_write);
    if (rc == 0) {
        int e = msgpack_pack_map(&pk, 2);
        e |= th_pack_cstr(&pk, "description");
        e |= th_pack_cstr(&pk, f.description ? f.description : "");
        e |= th_pack_cstr(&pk, "messages");
        e |= msgpack_pack_array(&pk, (uint32_t)out.n);
        for (size_t i = 0; i < out.n && !e; i++) {
            e |= msgpack_pack_map(&pk, 2);
            e |= th_pack_cstr(&pk, "role");
            e |= th_pack_cstr(&pk, out.v[i].role ? out.v[i].role : "user");
            e |= th_pack_cstr(&pk, "content");
            e |= pack_block(&r, &out.v[i]);
        }
        if (e)
            rc = th_error_set(&err, TH_ENOMEM, "out of memory");
    }
    th_content_free(&out);
    free(f.description);
    if (rc)
        send_failure(c, msgid, rc, &err);
    else
        send_result(c, msgid, &r);
    th_buf_destroy(&r);
}

/* ---- completion.complete [{ref, argument}] ------------------------------------ */

void rpc_m_complete(rpc_conn *c, uint64_t msgid, const msgpack_object *params)
{
    static const char m[] = "completion.complete";
    static const char shape[] = "[{ref: {type: \"prompt\", name} or {type: "
                                "\"resource\", uri}, argument: {name, "
                                "value}}]";
    const msgpack_object *q = params->via.array.size == 1
                                  ? &params->via.array.ptr[0]
                                  : NULL;
    if (!q || q->type != MSGPACK_OBJECT_MAP) {
        send_error(c, msgid, TH_EINVAL, "%s takes %s, got %s", m, shape,
                   q ? th_rpc_obj_kind(q) : "another number of params");
        return;
    }
    const msgpack_object *ref = th_rpc_map_get(q, "ref");
    const msgpack_object *arg = th_rpc_map_get(q, "argument");
    if (!ref || ref->type != MSGPACK_OBJECT_MAP || !arg ||
        arg->type != MSGPACK_OBJECT_MAP) {
        send_error(c, msgid, TH_EINVAL, "%s takes %s: ref and argument "
                   "must be maps", m, shape);
        return;
    }
    const msgpack_object *type = th_rpc_map_get(ref, "type");
    bool is_prompt = th_rpc_obj_streq(type, "prompt");
    if (!is_prompt && !th_rpc_obj_streq(type, "resource")) {
        send_error(c, msgid, TH_EINVAL, "%s: ref.type must be \"prompt\" or "
                   "\"resource\"", m);
        return;
    }
    char target[MAX_URI + 1], an[MAX_NAME + 1], av[MAX_VALUE + 1];
    if (!get_str(c, msgid, m, is_prompt ? "ref.name" : "ref.uri",
                 th_rpc_map_get(ref, is_prompt ? "name" : "uri"), target,
                 is_prompt ? MAX_NAME + 1 : sizeof target) ||
        !get_str(c, msgid, m, "argument.name", th_rpc_map_get(arg, "name"),
                 an, sizeof an))
        return;
    /* the value may be empty: "complete from nothing typed yet" */
    const msgpack_object *vo = th_rpc_map_get(arg, "value");
    const char *vp;
    size_t vn;
    if (!th_rpc_obj_str(vo, &vp, &vn) || vn > MAX_VALUE ||
        memchr(vp, '\0', vn)) {
        send_error(c, msgid, TH_EINVAL, "%s: argument.value must be a "
                   "string of at most %d bytes without NUL", m, MAX_VALUE);
        return;
    }
    memcpy(av, vp, vn);
    av[vn] = '\0';
    th_content out;
    th_content_init(&out, TH_CONTENT_COMPLETE, budget(c));
    th_error err;
    th_error_clear(&err);
    int rc = th_session_complete(c->session, is_prompt, target, an, av, &out,
                                 &err);
    th_buf r = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &r, th_buf_msgpack_write);
    if (rc == 0) {
        int e = msgpack_pack_map(&pk, 3);
        e |= th_pack_cstr(&pk, "values");
        e |= msgpack_pack_array(&pk, (uint32_t)out.n);
        for (size_t i = 0; i < out.n; i++)
            e |= msgpack_pack_str_with_body(&pk, out.v[i].data, out.v[i].len);
        e |= th_pack_cstr(&pk, "total");
        e |= msgpack_pack_uint64(&pk, out.n + out.dropped);
        e |= th_pack_cstr(&pk, "has_more");
        e |= out.dropped ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
        if (e)
            rc = th_error_set(&err, TH_ENOMEM, "out of memory");
    }
    th_content_free(&out);
    if (rc)
        send_failure(c, msgid, rc, &err);
    else
        send_result(c, msgid, &r);
    th_buf_destroy(&r);
}
