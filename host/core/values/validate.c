/* validate.c - argument validation, the one place: a msgpack map checked
 * against a parameter table, defaults filled in, then the tool's own
 * validate_args().
 *
 * Speed: this runs on every call.  A map of at most TH_ARGS_VIEW_MAX
 * scalar values is read through the decoded view (argview.c: one walk, no
 * unpacking, nothing allocated).  Any other map is unpacked with msgpack_unpack()
 * into a zone that each thread keeps and clears after use (th/mpzone.h;
 * strings are not
 * copied: objects point into the caller's bytes), so a call whose arguments
 * need no default allocates nothing once its thread has validated before.
 * The zone of a thread is freed when the thread exits (pthread key
 * destructor); the main thread's zone stays reachable until exit.
 *
 * Threads: every function here may be called from any thread at once.
 */
#include <msgpack.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/jschema.h"
#include "th/mpwalk.h"
#include "th/mpzone.h"
#include "th/tool.h"
#include "th/utf8.h"

/* ---- messages ---------------------------------------------------------------- */

static int verr_set(th_verr *err, const char *what, const char *key,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int verr_set(th_verr *err, const char *what, const char *key,
                    const char *fmt, ...)
{
    if (!err)
        return TH_EARGS;
    char reason[sizeof err->e.msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    if (what)
        th_error_set(&err->e, TH_EARGS, "Error parsing arguments for %s: %s",
                     what, reason);
    else
        th_error_set(&err->e, TH_EARGS, "%s", reason);
    snprintf(err->key, sizeof err->key, "%s", key ? key : "");
    return TH_EARGS;
}

/* "a string", "an integer", ... for a parameter type. */
static const char *want_name(uint32_t type)
{
    switch (type) {
    case TOOLHOST_TYPE_STRING:
        return "a string";
    case TOOLHOST_TYPE_INTEGER:
        return "an integer";
    case TOOLHOST_TYPE_NUMBER:
        return "a number";
    case TOOLHOST_TYPE_BOOLEAN:
        return "a boolean";
    case TOOLHOST_TYPE_ARRAY:
        return "an array";
    case TOOLHOST_TYPE_OBJECT:
        return "an object";
    default:
        return "a value";
    }
}

/* Plural, for "an array of strings". */
static const char *items_name(uint32_t type)
{
    switch (type) {
    case TOOLHOST_TYPE_STRING:
        return "strings";
    case TOOLHOST_TYPE_INTEGER:
        return "integers";
    case TOOLHOST_TYPE_NUMBER:
        return "numbers";
    case TOOLHOST_TYPE_BOOLEAN:
        return "booleans";
    case TOOLHOST_TYPE_ARRAY:
        return "arrays";
    case TOOLHOST_TYPE_OBJECT:
        return "objects";
    default:
        return "values";
    }
}

/* What a model sent, in JSON words. */
static const char *got_name(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return "null";
    case MSGPACK_OBJECT_BOOLEAN:
        return "a boolean";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return "an integer";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return "a number with a fraction";
    case MSGPACK_OBJECT_STR:
        return "a string";
    case MSGPACK_OBJECT_BIN:
        return th_utf8_valid(o->via.bin.ptr, o->via.bin.size)
                   ? "binary data"
                   : "binary data that is not UTF-8 text";
    case MSGPACK_OBJECT_ARRAY:
        return "an array";
    case MSGPACK_OBJECT_MAP:
        return "an object";
    default:
        return "an extension value";
    }
}

/* Copies at most 64 bytes of a string for a message, '?' for controls. */
static void quote_bytes(char *dst, size_t cap, const char *p, size_t n)
{
    size_t max = n > 64 ? 64 : n;
    if (max > cap - 4)
        max = cap - 4;
    size_t i;
    for (i = 0; i < max; i++)
        dst[i] = ((unsigned char)p[i] < 0x20 || p[i] == 0x7f) ? '?' : p[i];
    if (max < n) {
        memcpy(dst + i, "...", 3);
        i += 3;
    }
    dst[i] = '\0';
}

/* Joins n strings (each `q`-quoted) with ", " into dst, ending with "..."
 * when they do not fit.  The i-th string is at (char **)((char *)first +
 * i * stride), stride 0 meaning an array of char *. */
static void join_list(char *dst, size_t cap, const char *q,
                      const char *const *first, size_t n, size_t stride)
{
    size_t used = 0;
    dst[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        const char *const *sp =
            stride ? (const char *const *)((const char *)first + i * stride)
                   : first + i;
        if (used + 80 > cap) {
            snprintf(dst + used, cap - used, ", ...");
            return;
        }
        int w = snprintf(dst + used, cap - used - 8, "%s%s%.60s%s",
                         i ? ", " : "", q, *sp, q);
        if (w > 0)
            used += (size_t)w < cap - used - 8 ? (size_t)w : cap - used - 9;
    }
}

/* ---- checks ------------------------------------------------------------------ */

/* The one str/bin rule (the SDK's th_sdk_arg_string applies the same): a
 * string is a msgpack str, or a bin holding valid UTF-8 (clients that pack
 * every byte string as bin); other bin is refused here, with a reason,
 * rather than failing later inside the tool. */
static bool is_string(const msgpack_object *o)
{
    return o->type == MSGPACK_OBJECT_STR ||
           (o->type == MSGPACK_OBJECT_BIN &&
            th_utf8_valid(o->via.bin.ptr, o->via.bin.size));
}

static bool type_ok(uint32_t type, const msgpack_object *o)
{
    switch (type) {
    case 0:
        return true;
    case TOOLHOST_TYPE_STRING:
        return is_string(o);
    case TOOLHOST_TYPE_INTEGER:
        return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
               o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER;
    case TOOLHOST_TYPE_NUMBER:
        return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
               o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ||
               o->type == MSGPACK_OBJECT_FLOAT32 ||
               o->type == MSGPACK_OBJECT_FLOAT64;
    case TOOLHOST_TYPE_BOOLEAN:
        return o->type == MSGPACK_OBJECT_BOOLEAN;
    case TOOLHOST_TYPE_ARRAY:
        return o->type == MSGPACK_OBJECT_ARRAY;
    case TOOLHOST_TYPE_OBJECT:
        return o->type == MSGPACK_OBJECT_MAP;
    default:
        return false;
    }
}

/* The ABI 1.1 constraints (bounds, lengths, pattern, items, schema_json),
 * after the type is known to be right. */
static int check_constraints(const char *what, const th_param *p,
                             const msgpack_object *v, th_verr *err)
{
    if (!p->cons)
        return 0;
    char msg[400];
    int rc = th_jschema_check(p->cons, v, msg, sizeof msg);
    if (rc == 0)
        return 0;
    if (rc < 0)
        return th_error_set(err ? &err->e : NULL, TH_ENOMEM, "out of memory");
    return verr_set(err, what, p->name, "parameter '%s' %s", p->name, msg);
}

static int check_value(const char *what, const th_param *p,
                       const msgpack_object *v, th_verr *err)
{
    if (!type_ok(p->type, v))
        return verr_set(err, what, p->name, "parameter '%s' must be %s, got %s",
                        p->name, want_name(p->type), got_name(v));
    if (p->type == TOOLHOST_TYPE_ARRAY && p->item_type) {
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            const msgpack_object *it = &v->via.array.ptr[i];
            if (!type_ok(p->item_type, it))
                return verr_set(err, what, p->name,
                                "parameter '%s' must be an array of %s; "
                                "%s[%u] is %s",
                                p->name, items_name(p->item_type), p->name, i,
                                got_name(it));
        }
    }
    if (p->n_enum) {
        const char *s = v->via.str.ptr; /* str and bin share the layout */
        uint32_t n = v->type == MSGPACK_OBJECT_STR ? v->via.str.size
                                                   : v->via.bin.size;
        if (v->type == MSGPACK_OBJECT_BIN)
            s = v->via.bin.ptr;
        for (size_t i = 0; i < p->n_enum; i++) {
            if (strlen(p->enum_values[i]) == n &&
                memcmp(p->enum_values[i], s, n) == 0)
                return check_constraints(what, p, v, err);
        }
        char allowed[640];
        join_list(allowed, sizeof allowed, "'", (const char *const *)p->enum_values,
                  p->n_enum, 0);
        char got[80];
        quote_bytes(got, sizeof got, s, n);
        return verr_set(err, what, p->name,
                        "parameter '%s' must be one of %s; got '%s'", p->name,
                        allowed, got);
    }
    return check_constraints(what, p, v, err);
}

static int unknown_key(const char *what, const th_param *params, size_t n,
                       const char *k, uint32_t klen, th_verr *err)
{
    char key[80];
    quote_bytes(key, sizeof key, k, klen);
    if (n == 0)
        return verr_set(err, what, key,
                        "unknown parameter '%s' (this takes no parameters)",
                        key);
    char names[640];
    join_list(names, sizeof names, "", (const char *const *)&params[0].name, n,
              sizeof *params);
    return verr_set(err, what, key,
                    "unknown parameter '%s' (accepted parameters: %s)", key,
                    names);
}

static int fill_defaults(const msgpack_object *map, const th_param *params,
                         size_t n, const uint64_t *seen, th_buf *out)
{
    size_t extra = 0;
    for (size_t i = 0; i < n; i++)
        if (params[i].default_mp && !(seen[i / 64] >> (i % 64) & 1))
            extra++;
    th_buf_reset(out);
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, th_buf_msgpack_write);
    size_t nulls = 0;
    for (uint32_t i = 0; i < map->via.map.size; i++)
        nulls += map->via.map.ptr[i].val.type == MSGPACK_OBJECT_NIL;
    if (msgpack_pack_map(&pk, map->via.map.size - nulls + extra))
        return TH_ENOMEM;
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        /* null for an optional parameter: absent (validate_map refused it
         * for a required one). */
        if (map->via.map.ptr[i].val.type == MSGPACK_OBJECT_NIL)
            continue;
        if (msgpack_pack_object(&pk, map->via.map.ptr[i].key) ||
            msgpack_pack_object(&pk, map->via.map.ptr[i].val))
            return TH_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const th_param *p = &params[i];
        if (!p->default_mp || (seen[i / 64] >> (i % 64) & 1))
            continue;
        if (msgpack_pack_str_with_body(&pk, p->name, strlen(p->name)) ||
            th_buf_append(out, p->default_mp, p->default_len))
            return TH_ENOMEM;
    }
    return 0;
}

static int validate_map(const char *what, const th_param *params, size_t n,
                        const msgpack_object *map, uint64_t *seen,
                        th_buf *out, bool *filled, th_verr *err)
{
    size_t nulls = 0;
    if (map->type != MSGPACK_OBJECT_MAP)
        return verr_set(err, what, NULL,
                        "the arguments must be an object (a map of parameter "
                        "names to values), got %s",
                        got_name(map));
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object_kv *kv = &map->via.map.ptr[i];
        if (kv->key.type != MSGPACK_OBJECT_STR)
            return verr_set(err, what, NULL,
                            "parameter names must be strings, got %s",
                            got_name(&kv->key));
        const char *k = kv->key.via.str.ptr;
        uint32_t klen = kv->key.via.str.size;
        size_t j;
        for (j = 0; j < n; j++)
            if (strnlen(params[j].name, (size_t)klen + 1) == klen &&
                memcmp(params[j].name, k, klen) == 0)
                break;
        if (j == n)
            return unknown_key(what, params, n, k, klen, err);
        if (seen[j / 64] >> (j % 64) & 1)
            return verr_set(err, what, params[j].name,
                            "parameter '%s' is given twice", params[j].name);
        seen[j / 64] |= (uint64_t)1 << (j % 64);
        /* null: what OpenAI strict mode sends for an optional parameter
         * (every property required, the optional ones nullable).  Absent
         * for an optional one (its default applies), refused for a
         * required one. */
        if (kv->val.type == MSGPACK_OBJECT_NIL) {
            if (params[j].required)
                return verr_set(err, what, params[j].name,
                                "parameter '%s' is required and cannot be "
                                "null; give it a value",
                                params[j].name);
            nulls++;
            continue;
        }
        int rc = check_value(what, &params[j], &kv->val, err);
        if (rc)
            return rc;
    }
    bool need_fill = nulls > 0;
    for (uint32_t i = 0; nulls && i < map->via.map.size; i++) {
        const msgpack_object_kv *kv = &map->via.map.ptr[i];
        if (kv->val.type != MSGPACK_OBJECT_NIL)
            continue;
        for (size_t j = 0; j < n; j++)
            if (strnlen(params[j].name, (size_t)kv->key.via.str.size + 1) ==
                    kv->key.via.str.size &&
                memcmp(params[j].name, kv->key.via.str.ptr,
                       kv->key.via.str.size) == 0)
                seen[j / 64] &= ~((uint64_t)1 << (j % 64));
    }
    for (size_t j = 0; j < n; j++) {
        if (seen[j / 64] >> (j % 64) & 1)
            continue;
        if (params[j].required)
            return verr_set(err, what, params[j].name,
                            "missing required parameter '%s'",
                            params[j].name);
        if (params[j].default_mp)
            need_fill = true;
    }
    if (need_fill) {
        if (!out) {
            if (err)
                th_error_set(&err->e, TH_EINVAL,
                             "internal error: defaults to fill in but no "
                             "output buffer");
            return TH_EINVAL;
        }
        if (fill_defaults(map, params, n, seen, out)) {
            if (err)
                th_error_set(&err->e, TH_ENOMEM,
                             "out of memory filling in defaults");
            return TH_ENOMEM;
        }
        *filled = true;
    }
    return 0;
}

/* A scalar of the decoded view as the msgpack object msgpack-c would
 * have made (strings point into the argument bytes, as there).  false for
 * a container. */
static bool view_object(const toolhost_arg *a, msgpack_object *o)
{
    memset(o, 0, sizeof *o);
    switch (a->type) {
    case TOOLHOST_VALUE_NIL:
        o->type = MSGPACK_OBJECT_NIL;
        return true;
    case TOOLHOST_VALUE_BOOL:
        o->type = MSGPACK_OBJECT_BOOLEAN;
        o->via.boolean = a->i != 0;
        return true;
    case TOOLHOST_VALUE_UINT:
        o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
        o->via.u64 = a->u;
        return true;
    case TOOLHOST_VALUE_INT:
        o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
        o->via.i64 = a->i;
        return true;
    case TOOLHOST_VALUE_FLOAT:
        o->type = a->raw[0] == 0xca ? MSGPACK_OBJECT_FLOAT32
                                    : MSGPACK_OBJECT_FLOAT64;
        o->via.f64 = a->f;
        return true;
    case TOOLHOST_VALUE_STR:
        o->type = MSGPACK_OBJECT_STR;
        o->via.str.ptr = (const char *)a->bytes;
        o->via.str.size = (uint32_t)a->len;
        return true;
    case TOOLHOST_VALUE_BIN:
        o->type = MSGPACK_OBJECT_BIN;
        o->via.bin.ptr = (const char *)a->bytes;
        o->via.bin.size = (uint32_t)a->len;
        return true;
    case TOOLHOST_VALUE_EXT:
        o->type = MSGPACK_OBJECT_EXT;
        o->via.ext.type = (int8_t)a->i;
        o->via.ext.ptr = (const char *)a->bytes;
        o->via.ext.size = (uint32_t)a->len;
        return true;
    default:
        return false;
    }
}

/* validate_view_quick: a scalar of the parameter's type (0: any type
 * but nil and bin); containers are left to the full check. */
static inline bool quick_type_ok(uint32_t ptype, uint32_t atype)
{
    bool ok;
    switch (ptype) {
    case 0:
        ok = atype != TOOLHOST_VALUE_NIL && atype != TOOLHOST_VALUE_BIN;
        break;
    case TOOLHOST_TYPE_STRING:
        ok = atype == TOOLHOST_VALUE_STR;
        break;
    case TOOLHOST_TYPE_INTEGER:
        ok = atype == TOOLHOST_VALUE_UINT || atype == TOOLHOST_VALUE_INT;
        break;
    case TOOLHOST_TYPE_NUMBER:
        ok = atype == TOOLHOST_VALUE_UINT ||
             atype == TOOLHOST_VALUE_INT ||
             atype == TOOLHOST_VALUE_FLOAT;
        break;
    case TOOLHOST_TYPE_BOOLEAN:
        ok = atype == TOOLHOST_VALUE_BOOL;
        break;
    default: /* containers: the full check */
        ok = false;
        break;
    }
    return ok;
}

/* validate_view_quick: a string among the parameter's enum values. */
static inline bool quick_enum_has(const th_param *p, const toolhost_arg *a)
{
    if (a->type != TOOLHOST_VALUE_STR)
        return false;
    for (size_t e = 0; e < p->n_enum; e++)
        if (strlen(p->enum_values[e]) == a->len &&
            memcmp(p->enum_values[e], a->bytes, a->len) == 0)
            return true;
    return false;
}

/* The usual valid call in one pass over the decoded view, without the
 * msgpack objects validate_map() reads: every key a parameter (once),
 * every value a non-nil scalar of the parameter's type (an enum's value
 * among its values), no constraints to check, nothing missing that is
 * required or has a default.  0: valid, nothing to fill in; 1: anything
 * else, which validate_flat's full check decides (with its messages). */
static int validate_view_quick(const th_param *params, size_t n,
                               const toolhost_args_view *v)
{
    if (n > 64)
        return 1;
    uint64_t seen = 0;
    for (uint32_t i = 0; i < v->n_args; i++) {
        const toolhost_arg *a = &v->args[i];
        size_t kl = a->name_len;
        size_t j;
        for (j = 0; j < n; j++) {
            /* byte by byte: names are short; stops at the name's end */
            const char *pn = params[j].name;
            size_t t = 0;
            while (t < kl && pn[t] && pn[t] == a->name[t])
                t++;
            if (kl && t == kl && pn[kl] == '\0')
                break;
        }
        if (j == n || (seen >> j & 1))
            return 1;
        seen |= (uint64_t)1 << j;
        const th_param *p = &params[j];
        if (p->cons)
            return 1;
        bool ok = quick_type_ok(p->type, a->type);
        if (!ok || a->type == TOOLHOST_VALUE_ARRAY ||
            a->type == TOOLHOST_VALUE_MAP)
            return 1;
        if (p->n_enum && !quick_enum_has(p, a))
            return 1;
    }
    for (size_t j = 0; j < n; j++)
        if (!(seen >> j & 1) && (params[j].required || params[j].default_mp))
            return 1;
    return 0;
}

/* The common case without unpacking: a map of at most TH_ARGS_VIEW_MAX
 * entries whose values are all scalars, read through the decoded view
 * (argview.c), the same objects msgpack_unpack() would build.  1 when it
 * does not apply (then the full path decides, with its messages). */
static int validate_flat(const char *what, const th_param *params, size_t n,
                         const uint8_t *args, size_t len, uint64_t *seen,
                         th_buf *out, bool *filled, toolhost_arg *items,
                         toolhost_args_view *vp, int built, th_verr *err)
{
    msgpack_object_kv kv[TH_ARGS_VIEW_MAX];
    if (built < 0 ||
        (built == 0 &&
         th_args_view_build(args, len, items, TH_ARGS_VIEW_MAX, vp) != 0)) {
        vp->data = NULL;
        return 1;
    }
    const toolhost_args_view v = *vp;
    if (built == 0 && validate_view_quick(params, n, &v) == 0)
        return 0;
    for (uint32_t i = 0; i < v.n_args; i++) {
        if (!view_object(&items[i], &kv[i].val))
            return 1;
        kv[i].key.type = MSGPACK_OBJECT_STR;
        kv[i].key.via.str.ptr = items[i].name;
        kv[i].key.via.str.size = (uint32_t)items[i].name_len;
    }
    msgpack_object map;
    memset(&map, 0, sizeof map);
    map.type = MSGPACK_OBJECT_MAP;
    map.via.map.size = v.n_args;
    map.via.map.ptr = kv;
    return validate_map(what, params, n, &map, seen, out, filled, err);
}

/* th_validate_params; with `items`, the view validation decoded `args`
 * into is kept in *view (view->data NULL: none).  `built`: 0, the view is
 * to be built here; 1, *view describes `args` already and the quick check
 * failed on it; -1, it could not be built. */
static int validate_params(const char *what, const th_param *params,
                           size_t n, const uint8_t *args, size_t len,
                           th_buf *out, bool *filled, toolhost_arg *items,
                           toolhost_args_view *view, int built, th_verr *err)
{
    toolhost_arg own_items[TH_ARGS_VIEW_MAX];
    toolhost_args_view own_view;
    if (!items) {
        items = own_items;
        view = &own_view;
        built = 0;
    }
    if (built <= 0)
        view->data = NULL;
    bool dummy;
    if (!filled)
        filled = &dummy;
    *filled = false;
    if (err) {
        th_error_clear(&err->e);
        err->key[0] = '\0';
    }
    if (!args || len == 0)
        return verr_set(err, what, NULL,
                        "the arguments are empty; send an object (a map of "
                        "parameter names to values), {} when there are none");

    uint64_t seen_stack[4] = {0, 0, 0, 0};
    uint64_t *seen = seen_stack;
    if (n <= 4 * 64) {
        int frc = validate_flat(what, params, n, args, len, seen, out,
                                filled, items, view, built, err);
        if (frc != 1)
            return frc;
        memset(seen_stack, 0, sizeof seen_stack);
    }

    /* Counts and nesting first: the unpacker allocates for what a header
     * announces and calls a nesting past its stack "out of memory". */
    th_error werr;
    if (th_mp_check(args, len, TH_MP_MAX_DEPTH, NULL, &werr) != 0)
        return verr_set(err, what, NULL, "the arguments are not valid: %s",
                        werr.msg);

    if (n > 4 * 64) {
        seen = calloc((n + 63) / 64, sizeof *seen);
        if (!seen)
            return th_error_set(err ? &err->e : NULL, TH_ENOMEM,
                                "out of memory");
    }
    bool cached;
    msgpack_zone *zone = th_mp_zone_get(&cached);
    int rc;
    if (!zone) {
        rc = th_error_set(err ? &err->e : NULL, TH_ENOMEM, "out of memory");
        goto out;
    }
    msgpack_object obj;
    size_t off = 0;
    msgpack_unpack_return ur =
        msgpack_unpack((const char *)args, len, &off, zone, &obj);
    switch (ur) {
    case MSGPACK_UNPACK_SUCCESS:
        rc = validate_map(what, params, n, &obj, seen, out, filled, err);
        break;
    case MSGPACK_UNPACK_EXTRA_BYTES:
        rc = verr_set(err, what, NULL,
                      "the arguments are followed by %zu extra bytes; send "
                      "exactly one object",
                      len - off);
        break;
    case MSGPACK_UNPACK_NOMEM_ERROR:
        rc = th_error_set(err ? &err->e : NULL, TH_ENOMEM, "out of memory");
        break;
    default:
        rc = verr_set(err, what, NULL,
                      "the arguments are not valid msgpack (truncated, "
                      "malformed, or nested too deeply)");
        break;
    }
    th_mp_zone_put(zone, cached);
out:
    if (seen != seen_stack)
        free(seen);
    return rc;
}

int th_validate_params(const char *what, const th_param *params, size_t n,
                       const uint8_t *args, size_t len, th_buf *out,
                       bool *filled, th_verr *err)
{
    return validate_params(what, params, n, args, len, out, filled, NULL,
                           NULL, 0, err);
}

/* A tool's whole input schema (ABI 1.4) against the arguments: 0, or
 * TH_EARGS with the validator's message (TH_ENOMEM). */
static int check_input_schema(const th_tool *tool, const uint8_t *args,
                              size_t len, th_error *err)
{
    static const uint8_t empty_map = 0x80;
    if (!args || !len) {
        args = &empty_map;
        len = 1;
    }
    bool cached;
    msgpack_zone *zone = th_mp_zone_get(&cached);
    if (!zone)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    msgpack_object obj;
    size_t off = 0;
    char msg[512] = "";
    int rc = 0;
    msgpack_unpack_return ur =
        msgpack_unpack((const char *)args, len, &off, zone, &obj);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
        rc = th_error_set(err, TH_ENOMEM, "out of memory");
    else if (ur != MSGPACK_UNPACK_SUCCESS)
        rc = th_error_set(err, TH_EARGS,
                          "Error parsing arguments for %s: the arguments are "
                          "not one valid msgpack object",
                          tool->name);
    else if ((rc = th_jschema_check(tool->in_schema, &obj, msg, sizeof msg)))
        rc = th_error_set(err, rc < 0 ? TH_ENOMEM : TH_EARGS,
                          "Error parsing arguments for %s: the arguments %s",
                          tool->name, msg);
    th_mp_zone_put(zone, cached);
    return rc;
}

int th_validate_call(const th_tool *tool, const uint8_t *args, size_t len,
                     th_buf *out, const uint8_t **args_out, size_t *len_out,
                     th_error *err)
{
    return th_validate_call_view(tool, args, len, out, args_out, len_out,
                                 NULL, NULL, err);
}

int th_validate_call_view(const th_tool *tool, const uint8_t *args,
                          size_t len, th_buf *out, const uint8_t **args_out,
                          size_t *len_out, toolhost_arg *items,
                          toolhost_args_view *view, th_error *err)
{
    bool filled = false;
    int built = 0;
    if (tool->in_schema) {
        /* the whole input is one schema: no params, nothing to fill in */
        int rc = check_input_schema(tool, args, len, err);
        if (rc)
            return rc;
        built = 2;
        if (items && (!args || !len ||
                      th_args_view_build(args, len, items, TH_ARGS_VIEW_MAX,
                                         view) != 0))
            view->data = NULL;
    }
    if (items && args && len && built == 0) {
        /* the usual valid call: the view and one pass over it, before the
         * full check's frame is set up */
        built = th_args_view_build(args, len, items, TH_ARGS_VIEW_MAX,
                                   view) == 0 ? 1 : -1;
        if (built > 0 &&
            validate_view_quick(tool->params, tool->n_params, view) != 0)
            built = 1;
        else if (built > 0)
            built = 2; /* valid, nothing to fill in */
    }
    if (built != 2) {
        th_verr ve;
        int rc = validate_params(tool->name, tool->params, tool->n_params,
                                 args, len, out, &filled, items, view,
                                 built, &ve);
        if (rc) {
            if (err)
                *err = ve.e;
            return rc;
        }
    }
    const uint8_t *a = filled ? out->data : args;
    size_t n = filled ? out->len : len;
    if (filled && items)
        view->data = NULL; /* it described the bytes before the defaults */
    if (tool->desc && tool->desc->validate_args) {
        char msg[512];
        msg[0] = '\0';
        void *state = tool->plugin ? tool->plugin->state : NULL;
        if (tool->desc->validate_args(state, tool->desc, a, n, msg,
                                      sizeof msg) != 0) {
            msg[sizeof msg - 1] = '\0';
            return th_error_set(err, TH_EARGS,
                                "Error parsing arguments for %s: %s",
                                tool->name,
                                msg[0] ? msg
                                       : "the tool rejected the arguments "
                                         "without saying why");
        }
    }
    *args_out = a;
    *len_out = n;
    return 0;
}

/* ---- structured output (ABI 1.1) --------------------------------------------- */

int th_validate_output(const th_tool *tool, const void *data, size_t len,
                       th_error *err)
{
    if (!tool || tool->stdout_type != TOOLHOST_SEM_STRUCTURED)
        return 0;
    if (len == 0 && !tool->out_schema)
        return 0;
    static const th_jschema any = {.boolean = 1};
    const th_jschema *s = tool->out_schema ? tool->out_schema : &any;
    char msg[400];
    int rc = th_jschema_check_text(s, data ? data : "", len, msg, sizeof msg);
    if (rc == 0)
        return 0;
    if (rc < 0)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    return th_error_set(err, TH_ETOOL,
                        "tool %s wrote structured output that %s: %s",
                        tool->name,
                        tool->out_schema ? "does not match its output_schema"
                                         : "is not JSON",
                        msg);
}
