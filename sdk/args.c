/* args.c - typed getters over a msgpack map of arguments (toolhost/sdk.h). */
#include "toolhost/sdk.h"

#include <string.h>

const char *th_sdk_strerror(int code)
{
    switch (code) {
    case TH_SDK_OK: return "ok";
    case TH_SDK_EINVAL: return "invalid argument";
    case TH_SDK_ENOMEM: return "out of memory";
    case TH_SDK_ECANCELLED: return "cancelled";
    case TH_SDK_ESTATE: return "not allowed now";
    case TH_SDK_EABSENT: return "absent";
    case TH_SDK_ETYPE: return "wrong type";
    case TH_SDK_ERANGE: return "out of range";
    case TH_SDK_EPATH: return "outside the root";
    case TH_SDK_ENOENT: return "no such file or folder";
    case TH_SDK_EIO: return "system error";
    default: return "unknown error";
    }
}

int th_sdk_args_init(th_sdk_args *a, const uint8_t *data, size_t len)
{
    if (!a)
        return TH_SDK_EINVAL;
    msgpack_unpacked_init(&a->unp);
    a->map = NULL;
    a->view = NULL;
    a->data = data;
    a->len = len;
    if (!data || len == 0)
        return TH_SDK_OK;
    size_t off = 0;
    msgpack_unpack_return r =
        msgpack_unpack_next(&a->unp, (const char *)data, len, &off);
    if (r == MSGPACK_UNPACK_NOMEM_ERROR)
        return TH_SDK_ENOMEM;
    if (r != MSGPACK_UNPACK_SUCCESS || off != len ||
        a->unp.data.type != MSGPACK_OBJECT_MAP)
        return TH_SDK_EINVAL;
    a->map = &a->unp.data;
    return TH_SDK_OK;
}

int th_sdk_args_init_call(th_sdk_args *a, const toolhost_call *call,
                          const uint8_t *data, size_t len)
{
    if (!a)
        return TH_SDK_EINVAL;
    const toolhost_args_view *v =
        call && TOOLHOST_HAS_MEMBER(toolhost_call, call, args_view)
            ? call->args_view
            : NULL;
    /* The view is used only when it describes these very bytes and its
     * structs hold every member this SDK reads. */
    if (!v || !data || v->data != data || v->len != len ||
        !TOOLHOST_HAS_MEMBER(toolhost_args_view, v, args) ||
        (v->n_args && (!v->args || v->args[0].struct_size < sizeof(toolhost_arg))))
        return th_sdk_args_init(a, data, len);
    msgpack_unpacked_init(&a->unp);
    a->map = NULL;
    a->view = v;
    a->data = data;
    a->len = len;
    return TH_SDK_OK;
}

void th_sdk_args_destroy(th_sdk_args *a)
{
    if (!a)
        return;
    msgpack_unpacked_destroy(&a->unp);
    a->map = NULL;
    a->view = NULL;
}

/* The view's entry for `key`, or NULL. */
static const toolhost_arg *view_lookup(const toolhost_args_view *v,
                                       const char *key)
{
    const char *p = (const char *)v->args;
    size_t stride = v->n_args ? v->args[0].struct_size : 0;
    for (uint32_t i = 0; i < v->n_args; i++, p += stride) {
        const toolhost_arg *e = (const toolhost_arg *)(const void *)p;
        /* byte by byte, stopping at the key's NUL: names are short, and a
         * strlen and memcmp through the plugin's PLT cost more than the
         * compare */
        size_t n = e->name_len, j = 0;
        while (j < n && key[j] && key[j] == e->name[j])
            j++;
        if (j == n && key[n] == '\0')
            return e;
    }
    return NULL;
}

/* Leaves the view for the parsed map (the getters that need msgpack
 * objects or the zone): parses the bytes as th_sdk_args_init() would.
 * The th_sdk_args is the caller's own, non-const object (the getters'
 * const is the promise not to change what was read). */
static int leave_view(const th_sdk_args *ca)
{
    th_sdk_args *a = (th_sdk_args *)ca;
    if (!a->view)
        return TH_SDK_OK;
    return th_sdk_args_init(a, a->data, a->len);
}

/* The value of `key`, or NULL. */
static const msgpack_object *lookup(const th_sdk_args *a, const char *key)
{
    if (!a || !key || (a->view && leave_view(a) != TH_SDK_OK) || !a->map)
        return NULL;
    size_t klen = strlen(key);
    const msgpack_object_map *m = &a->map->via.map;
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
            memcmp(k->via.str.ptr, key, klen) == 0)
            return &m->ptr[i].val;
    }
    return NULL;
}

/* Finds `key`, distinguishing a bad call from an absent key. */
static int find(const th_sdk_args *a, const char *key,
                const msgpack_object **o)
{
    if (!a || !key)
        return TH_SDK_EINVAL;
    int rc = leave_view(a); /* its own error (no memory), not "absent" */
    if (rc != TH_SDK_OK) {
        *o = NULL;
        return rc;
    }
    *o = lookup(a, key);
    return *o ? TH_SDK_OK : TH_SDK_EABSENT;
}

/* Copies a msgpack string into the args' zone as a C string. */
/* Whether s[0..n) is well-formed UTF-8 (no overlong forms, no
 * surrogates, nothing above U+10FFFF). */
static bool utf8_ok(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if (c >= 0xe0 && c <= 0xef) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (n - i < len)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

/* The one str/bin rule (the host's validator applies the same): a string
 * is a msgpack str, or a bin holding valid UTF-8 (clients that pack every
 * byte string as bin).  Other bin is TH_SDK_ETYPE. */
static bool str_of(const msgpack_object *o, const char **p, uint32_t *n)
{
    if (o->type == MSGPACK_OBJECT_STR) {
        *p = o->via.str.ptr;
        *n = o->via.str.size;
        return true;
    }
    if (o->type == MSGPACK_OBJECT_BIN &&
        utf8_ok((const unsigned char *)o->via.bin.ptr, o->via.bin.size)) {
        *p = o->via.bin.ptr;
        *n = o->via.bin.size;
        return true;
    }
    return false;
}

static int zone_cstr(th_sdk_args *a, const msgpack_object *o, const char **s)
{
    const char *p;
    uint32_t n;
    if (!str_of(o, &p, &n))
        return TH_SDK_ETYPE;
    if (n && memchr(p, '\0', n))
        return TH_SDK_EINVAL;
    char *c = msgpack_zone_malloc(a->unp.zone, (size_t)n + 1);
    if (!c)
        return TH_SDK_ENOMEM;
    if (n)
        memcpy(c, p, n);
    c[n] = '\0';
    *s = c;
    return TH_SDK_OK;
}

bool th_sdk_arg_has(const th_sdk_args *a, const char *key)
{
    if (a && key && a->view)
        return view_lookup(a->view, key) != NULL;
    return lookup(a, key) != NULL;
}

/* The view's entry for `key` for the scalar getters: 0 with *e set,
 * TH_SDK_EABSENT, or TH_SDK_EINVAL. */
static int view_find(const th_sdk_args *a, const char *key,
                     const toolhost_arg **e)
{
    if (!key)
        return TH_SDK_EINVAL;
    *e = view_lookup(a->view, key);
    return *e ? TH_SDK_OK : TH_SDK_EABSENT;
}

int th_sdk_arg_object(const th_sdk_args *a, const char *key,
                      const msgpack_object **out)
{
    const msgpack_object *o;
    int rc = find(a, key, &o);
    if (rc == 0 && out)
        *out = o;
    return out ? rc : TH_SDK_EINVAL;
}

int th_sdk_arg_string(const th_sdk_args *a, const char *key, const char **s,
                      size_t *len)
{
    const msgpack_object *o;
    if (!s)
        return TH_SDK_EINVAL;
    if (a && a->view) {
        const toolhost_arg *e;
        int rc = view_find(a, key, &e);
        if (rc)
            return rc;
        if (e->type != TOOLHOST_VALUE_STR &&
            (e->type != TOOLHOST_VALUE_BIN || !utf8_ok(e->bytes, e->len)))
            return TH_SDK_ETYPE;
        *s = (const char *)e->bytes;
        if (len)
            *len = e->len;
        return TH_SDK_OK;
    }
    int rc = find(a, key, &o);
    if (rc)
        return rc;
    const char *p;
    uint32_t n;
    if (!str_of(o, &p, &n))
        return TH_SDK_ETYPE;
    *s = p;
    if (len)
        *len = n;
    return TH_SDK_OK;
}

int th_sdk_arg_cstr(th_sdk_args *a, const char *key, const char **s)
{
    const msgpack_object *o;
    if (!s)
        return TH_SDK_EINVAL;
    int rc = find(a, key, &o);
    if (rc)
        return rc;
    return zone_cstr(a, o, s);
}

/* A msgpack integer as int64_t. */
static int to_int(const msgpack_object *o, int64_t *v)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return TH_SDK_ERANGE;
        *v = (int64_t)o->via.u64;
        return TH_SDK_OK;
    }
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *v = o->via.i64;
        return TH_SDK_OK;
    }
    return TH_SDK_ETYPE;
}

int th_sdk_arg_int(const th_sdk_args *a, const char *key, int64_t *v)
{
    const msgpack_object *o;
    if (!v)
        return TH_SDK_EINVAL;
    if (a && a->view) {
        const toolhost_arg *e;
        int rc = view_find(a, key, &e);
        if (rc)
            return rc;
        if (e->type == TOOLHOST_VALUE_UINT) {
            if (e->u > (uint64_t)INT64_MAX)
                return TH_SDK_ERANGE;
            *v = (int64_t)e->u;
            return TH_SDK_OK;
        }
        if (e->type != TOOLHOST_VALUE_INT)
            return TH_SDK_ETYPE;
        *v = e->i;
        return TH_SDK_OK;
    }
    int rc = find(a, key, &o);
    if (rc)
        return rc;
    int64_t x;
    rc = to_int(o, &x);
    if (rc == 0)
        *v = x;
    return rc;
}

int th_sdk_arg_number(const th_sdk_args *a, const char *key, double *v)
{
    const msgpack_object *o;
    if (!v)
        return TH_SDK_EINVAL;
    if (a && a->view) {
        const toolhost_arg *e;
        int rc = view_find(a, key, &e);
        if (rc)
            return rc;
        switch (e->type) {
        case TOOLHOST_VALUE_FLOAT: *v = e->f; return TH_SDK_OK;
        case TOOLHOST_VALUE_UINT: *v = (double)e->u; return TH_SDK_OK;
        case TOOLHOST_VALUE_INT: *v = (double)e->i; return TH_SDK_OK;
        default: return TH_SDK_ETYPE;
        }
    }
    int rc = find(a, key, &o);
    if (rc)
        return rc;
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        *v = o->via.f64;
        return TH_SDK_OK;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        *v = (double)o->via.u64;
        return TH_SDK_OK;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        *v = (double)o->via.i64;
        return TH_SDK_OK;
    default:
        return TH_SDK_ETYPE;
    }
}

int th_sdk_arg_bool(const th_sdk_args *a, const char *key, bool *v)
{
    const msgpack_object *o;
    if (!v)
        return TH_SDK_EINVAL;
    if (a && a->view) {
        const toolhost_arg *e;
        int rc = view_find(a, key, &e);
        if (rc)
            return rc;
        if (e->type != TOOLHOST_VALUE_BOOL)
            return TH_SDK_ETYPE;
        *v = e->i != 0;
        return TH_SDK_OK;
    }
    int rc = find(a, key, &o);
    if (rc)
        return rc;
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return TH_SDK_ETYPE;
    *v = o->via.boolean;
    return TH_SDK_OK;
}

int th_sdk_arg_strings(th_sdk_args *a, const char *key,
                       const char *const **out, size_t *n)
{
    const msgpack_object *o;
    if (!out || !n)
        return TH_SDK_EINVAL;
    int rc = find(a, key, &o);
    if (rc)
        return rc;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return TH_SDK_ETYPE;
    uint32_t size = o->via.array.size;
    for (uint32_t i = 0; i < size; i++) {
        const char *p;
        uint32_t len;
        if (!str_of(&o->via.array.ptr[i], &p, &len))
            return TH_SDK_ETYPE;
    }
    const char **v = msgpack_zone_malloc(a->unp.zone,
                                         sizeof *v * (size ? size : 1));
    if (!v)
        return TH_SDK_ENOMEM;
    for (uint32_t i = 0; i < size; i++) {
        rc = zone_cstr(a, &o->via.array.ptr[i], &v[i]);
        if (rc)
            return rc;
    }
    *out = v;
    *n = size;
    return TH_SDK_OK;
}

int th_sdk_arg_ints(th_sdk_args *a, const char *key, const int64_t **out,
                    size_t *n)
{
    const msgpack_object *o;
    if (!out || !n)
        return TH_SDK_EINVAL;
    int rc = find(a, key, &o);
    if (rc)
        return rc;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return TH_SDK_ETYPE;
    uint32_t size = o->via.array.size;
    int64_t *v = msgpack_zone_malloc(a->unp.zone,
                                     sizeof *v * (size ? size : 1));
    if (!v)
        return TH_SDK_ENOMEM;
    for (uint32_t i = 0; i < size; i++) {
        rc = to_int(&o->via.array.ptr[i], &v[i]);
        if (rc)
            return rc;
    }
    *out = v;
    *n = size;
    return TH_SDK_OK;
}

int64_t th_sdk_arg_int_or(const th_sdk_args *a, const char *key, int64_t def)
{
    int64_t v;
    return th_sdk_arg_int(a, key, &v) == 0 ? v : def;
}

double th_sdk_arg_number_or(const th_sdk_args *a, const char *key, double def)
{
    double v;
    return th_sdk_arg_number(a, key, &v) == 0 ? v : def;
}

bool th_sdk_arg_bool_or(const th_sdk_args *a, const char *key, bool def)
{
    bool v;
    return th_sdk_arg_bool(a, key, &v) == 0 ? v : def;
}

const char *th_sdk_arg_cstr_or(th_sdk_args *a, const char *key,
                               const char *def)
{
    const char *v;
    return th_sdk_arg_cstr(a, key, &v) == 0 ? v : def;
}
