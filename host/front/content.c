/* content.c - resources, prompts and completion for the fronts that carry
 * msgpack (front/content.h): msgpack-RPC's methods of the same names and
 * the NATS front's content subjects check their params and pack their
 * results here, once, through the core's session functions (th/content.h).
 *
 * Threads.  The caller's (the RPC loop, a NATS delivery thread); the
 * plugins' read(), get() and complete() run on it.  Params point into a
 * frame or a message the caller frees after return: every string is
 * copied out first. */
#include "front/content.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "front/rpc.h"
#include "th/codec.h"
#include "th/content.h"
#include "th/host.h"

#define MAX_URI 2048  /* a URI or a template, as the core allows         */
#define MAX_NAME 256  /* a prompt's or an argument's name                */
#define MAX_VALUE 4096 /* the value a completion completes               */

const char *const th_fc_names[TH_FC_N] = {
    [TH_FC_RESOURCES_LIST] = "resources.list",
    [TH_FC_RESOURCES_TEMPLATES] = "resources.templates",
    [TH_FC_RESOURCES_READ] = "resources.read",
    [TH_FC_PROMPTS_LIST] = "prompts.list",
    [TH_FC_PROMPTS_GET] = "prompts.get",
    [TH_FC_COMPLETE] = "completion.complete",
};

/* A string (str or bin) of 1..cap-1 bytes without NUL copied into buf: 0,
 * or TH_EINVAL naming `what`. */
static int get_str(const char *method, const char *what,
                   const msgpack_object *o, char *buf, size_t cap,
                   th_error *err)
{
    const char *p;
    size_t n;
    if (!o || !th_rpc_obj_str(o, &p, &n))
        return th_error_set(err, TH_EINVAL, "%s: %s must be a string, got %s",
                            method, what, o ? th_rpc_obj_kind(o) : "nothing");
    if (n == 0 || n >= cap || memchr(p, '\0', n))
        return th_error_set(err, TH_EINVAL, "%s: %s must be 1 to %zu bytes "
                            "without NUL, got %zu bytes%s", method, what,
                            cap - 1, n, n && n < cap ? " with a NUL" : "");
    memcpy(buf, p, n);
    buf[n] = '\0';
    return 0;
}

/* What th_session_*() said, as the error to answer. */
static int failure(int rc, th_error *err)
{
    if (rc == TH_ENOMEM)
        return th_error_set(err, rc, "out of memory");
    if (!err->msg[0])
        return th_error_set(err, rc, "%s", th_strerror(rc));
    err->code = rc;
    return rc;
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
static int list(th_session *s, th_fc_method m, const msgpack_object *params,
                th_buf *r, th_error *err)
{
    if (params->via.array.size != 0)
        return th_error_set(err, TH_EINVAL, "%s takes [], got %u params",
                            th_fc_names[m], (unsigned)params->via.array.size);
    th_buf items = TH_BUF_INIT;
    lister l = {.n = 0};
    msgpack_packer_init(&l.pk, &items, th_buf_msgpack_write);
    int rc = m == TH_FC_PROMPTS_LIST
                 ? th_session_prompts(s, list_prompt, &l)
                 : th_session_resources(s, m == TH_FC_RESOURCES_TEMPLATES,
                                        list_resource, &l);
    msgpack_packer pk;
    msgpack_packer_init(&pk, r, th_buf_msgpack_write);
    if (rc == 0 && (msgpack_pack_array(&pk, l.n) ||
                    th_buf_append(r, items.data, items.len)))
        rc = TH_ENOMEM;
    th_buf_destroy(&items);
    return rc ? th_error_set(err, TH_ENOMEM, "out of memory") : 0;
}

/* ---- resources.read [uri] --------------------------------------------------- */

static int read_resource(th_session *s, const msgpack_object *params,
                         size_t budget, th_buf *r, th_error *err)
{
    static const char m[] = "resources.read";
    char uri[MAX_URI + 1];
    if (params->via.array.size != 1)
        return th_error_set(err, TH_EINVAL, "%s takes [uri], got %u params",
                            m, (unsigned)params->via.array.size);
    int rc = get_str(m, "uri", &params->via.array.ptr[0], uri, sizeof uri,
                     err);
    if (rc)
        return rc;
    th_content out;
    th_content_init(&out, TH_CONTENT_READ, budget);
    rc = th_session_read(s, uri, &out, err);
    msgpack_packer pk;
    msgpack_packer_init(&pk, r, th_buf_msgpack_write);
    if (rc == 0 && (msgpack_pack_map(&pk, 1) ||
                    th_pack_cstr(&pk, "contents") ||
                    th_content_pack(&out, &pk)))
        rc = TH_ENOMEM;
    th_content_free(&out);
    return rc ? failure(rc, err) : 0;
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

static int get_prompt(th_session *s, const msgpack_object *params,
                      size_t budget, th_buf *r, th_error *err)
{
    static const char m[] = "prompts.get";
    uint32_t np = params->via.array.size;
    char name[MAX_NAME + 1];
    if (np < 1 || np > 2)
        return th_error_set(err, TH_EINVAL, "%s takes [name, args?], got %u "
                            "params", m, (unsigned)np);
    int rc = get_str(m, "name", &params->via.array.ptr[0], name, sizeof name,
                     err);
    if (rc)
        return rc;
    const msgpack_object *a = np > 1 ? &params->via.array.ptr[1] : NULL;
    if (a && a->type != MSGPACK_OBJECT_NIL && a->type != MSGPACK_OBJECT_MAP)
        return th_error_set(err, TH_EINVAL, "%s: args must be a map of "
                            "argument names to strings (or nil), got %s", m,
                            th_rpc_obj_kind(a));
    /* the args as msgpack bytes of their own: validation and the plugin
     * read them, not the caller's frame */
    th_buf args = TH_BUF_INIT;
    msgpack_packer apk;
    msgpack_packer_init(&apk, &args, th_buf_msgpack_write);
    if (a && a->type == MSGPACK_OBJECT_MAP && msgpack_pack_object(&apk, *a)) {
        th_buf_destroy(&args);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    prompt_find f = {.name = name};
    th_session_prompts(s, find_prompt, &f);
    th_content out;
    th_content_init(&out, TH_CONTENT_PROMPT, budget);
    rc = f.oom ? TH_ENOMEM
               : th_session_prompt_get(s, name, args.data, args.len, &out,
                                       err);
    th_buf_destroy(&args);
    msgpack_packer pk;
    msgpack_packer_init(&pk, r, th_buf_msgpack_write);
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
            e |= pack_block(r, &out.v[i]);
        }
        if (e)
            rc = TH_ENOMEM;
    }
    th_content_free(&out);
    free(f.description);
    return rc ? failure(rc, err) : 0;
}

/* ---- completion.complete [{ref, argument}] ------------------------------------ */

static int complete(th_session *s, const msgpack_object *params,
                    size_t budget, th_buf *r, th_error *err)
{
    static const char m[] = "completion.complete";
    static const char shape[] = "[{ref: {type: \"prompt\", name} or {type: "
                                "\"resource\", uri}, argument: {name, "
                                "value}}]";
    const msgpack_object *q = params->via.array.size == 1
                                  ? &params->via.array.ptr[0]
                                  : NULL;
    if (!q || q->type != MSGPACK_OBJECT_MAP)
        return th_error_set(err, TH_EINVAL, "%s takes %s, got %s", m, shape,
                            q ? th_rpc_obj_kind(q)
                              : "another number of params");
    const msgpack_object *ref = th_rpc_map_get(q, "ref");
    const msgpack_object *arg = th_rpc_map_get(q, "argument");
    if (!ref || ref->type != MSGPACK_OBJECT_MAP || !arg ||
        arg->type != MSGPACK_OBJECT_MAP)
        return th_error_set(err, TH_EINVAL, "%s takes %s: ref and argument "
                            "must be maps", m, shape);
    const msgpack_object *type = th_rpc_map_get(ref, "type");
    bool is_prompt = th_rpc_obj_streq(type, "prompt");
    if (!is_prompt && !th_rpc_obj_streq(type, "resource"))
        return th_error_set(err, TH_EINVAL, "%s: ref.type must be \"prompt\" "
                            "or \"resource\"", m);
    char target[MAX_URI + 1], an[MAX_NAME + 1], av[MAX_VALUE + 1];
    int rc = get_str(m, is_prompt ? "ref.name" : "ref.uri",
                     th_rpc_map_get(ref, is_prompt ? "name" : "uri"), target,
                     is_prompt ? MAX_NAME + 1 : sizeof target, err);
    if (!rc)
        rc = get_str(m, "argument.name", th_rpc_map_get(arg, "name"), an,
                     sizeof an, err);
    if (rc)
        return rc;
    /* the value may be empty: "complete from nothing typed yet" */
    const msgpack_object *vo = th_rpc_map_get(arg, "value");
    const char *vp;
    size_t vn;
    if (!th_rpc_obj_str(vo, &vp, &vn) || vn > MAX_VALUE ||
        memchr(vp, '\0', vn))
        return th_error_set(err, TH_EINVAL, "%s: argument.value must be a "
                            "string of at most %d bytes without NUL", m,
                            MAX_VALUE);
    memcpy(av, vp, vn);
    av[vn] = '\0';
    th_content out;
    th_content_init(&out, TH_CONTENT_COMPLETE, budget);
    rc = th_session_complete(s, is_prompt, target, an, av, &out, err);
    msgpack_packer pk;
    msgpack_packer_init(&pk, r, th_buf_msgpack_write);
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
            rc = TH_ENOMEM;
    }
    th_content_free(&out);
    return rc ? failure(rc, err) : 0;
}

int th_front_content(th_session *s, th_fc_method m,
                     const msgpack_object *params, size_t budget, th_buf *out,
                     th_error *err)
{
    th_error_clear(err);
    if (!params || params->type != MSGPACK_OBJECT_ARRAY || m >= TH_FC_N)
        return th_error_set(err, TH_EINVAL, "%s takes an array of params",
                            m < TH_FC_N ? th_fc_names[m] : "this method");
    if (budget == 0 || budget > TH_FC_CONTENT_MAX)
        budget = TH_FC_CONTENT_MAX;
    switch (m) {
    case TH_FC_RESOURCES_READ:
        return read_resource(s, params, budget, out, err);
    case TH_FC_PROMPTS_GET:
        return get_prompt(s, params, budget, out, err);
    case TH_FC_COMPLETE:
        return complete(s, params, budget, out, err);
    default:
        return list(s, m, params, out, err);
    }
}
