/* mcp_json.c - compact JSON text of a jansson value, appended to a th_buf:
 * what json_dumps(JSON_COMPACT) writes, without its per-token callback and
 * printf for every integer (a third of the time of a short tools/call
 * answer went there).  Strings are written as UTF-8 (jansson keeps them
 * valid), with '"', '\\' and the control characters escaped; reals as
 * jansson writes them (%.17g, ".0" added to an integral value, no '+'
 * or leading zeros in the exponent). */
#include <math.h>
#include <msgpack.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "mcp_int.h"
#include "th/mpwalk.h"
#include "th/mpzone.h"
#include "th/utf8.h"

/* 1: the byte needs an escape in a JSON string. */
static const unsigned char esc[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* '"' */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, /* '\\' */
};

static inline int put(th_buf *b, const char *p, size_t n)
{
    if (b->len + n < b->cap) {
        memcpy(b->data + b->len, p, n);
        b->len += n;
        return 0;
    }
    return th_buf_append(b, p, n);
}

static int put_string(th_buf *b, const char *s, size_t n)
{
    /* Room for the common case (nothing to escape) in one go. */
    if (th_buf_reserve(b, n + 2) != 0)
        return -1;
    b->data[b->len++] = '"';
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!esc[c])
            continue;
        if (i > run && put(b, s + run, i - run) != 0)
            return -1;
        char e[8];
        size_t el = 2;
        e[0] = '\\';
        switch (c) {
        case '"': e[1] = '"'; break;
        case '\\': e[1] = '\\'; break;
        case '\b': e[1] = 'b'; break;
        case '\f': e[1] = 'f'; break;
        case '\n': e[1] = 'n'; break;
        case '\r': e[1] = 'r'; break;
        case '\t': e[1] = 't'; break;
        default:
            snprintf(e, sizeof e, "\\u%04X", c);
            el = 6;
        }
        if (put(b, e, el) != 0)
            return -1;
        run = i + 1;
    }
    if (n > run && put(b, s + run, n - run) != 0)
        return -1;
    return put(b, "\"", 1);
}

static int put_int(th_buf *b, json_int_t v)
{
    char t[24], *p = t + sizeof t;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v
                                 : (unsigned long long)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    return put(b, p, (size_t)(t + sizeof t - p));
}

static int put_real(th_buf *b, double v)
{
    if (!isfinite(v))
        return -1; /* jansson refuses these too */
    char t[40];
    int n = snprintf(t, sizeof t, "%.17g", v);
    if (n <= 0 || (size_t)n >= sizeof t - 3)
        return -1;
    char *e = strchr(t, 'e');
    if (!e && !strchr(t, '.')) {
        t[n++] = '.';
        t[n++] = '0';
    }
    if (e) {
        /* as jansson: "1e+300" -> "1e300", "1e-05" -> "1e-5" */
        char *p = e + 1, *q = p;
        if (*q == '-')
            p = ++q;
        else if (*q == '+')
            q++;
        while (*q == '0' && q[1])
            q++;
        memmove(p, q, strlen(q) + 1);
        n = (int)strlen(t);
    }
    return put(b, t, (size_t)n);
}

static int put_value(th_buf *b, const json_t *j, int depth)
{
    if (depth > 2048)
        return -1;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        if (put(b, "{", 1) != 0)
            return -1;
        bool first = true;
        const char *k;
        json_t *v;
        void *it = json_object_iter((json_t *)j);
        for (; it; it = json_object_iter_next((json_t *)j, it)) {
            k = json_object_iter_key(it);
            v = json_object_iter_value(it);
            if ((!first && put(b, ",", 1) != 0) ||
                put_string(b, k, json_object_iter_key_len(it)) != 0 ||
                put(b, ":", 1) != 0 || put_value(b, v, depth + 1) != 0)
                return -1;
            first = false;
        }
        return put(b, "}", 1);
    }
    case JSON_ARRAY: {
        if (put(b, "[", 1) != 0)
            return -1;
        size_t n = json_array_size(j);
        for (size_t i = 0; i < n; i++)
            if ((i && put(b, ",", 1) != 0) ||
                put_value(b, json_array_get(j, i), depth + 1) != 0)
                return -1;
        return put(b, "]", 1);
    }
    case JSON_STRING:
        return put_string(b, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return put_int(b, json_integer_value(j));
    case JSON_REAL:
        return put_real(b, json_real_value(j));
    case JSON_TRUE:
        return put(b, "true", 4);
    case JSON_FALSE:
        return put(b, "false", 5);
    case JSON_NULL:
        return put(b, "null", 4);
    }
    return -1;
}

int mcp_json_append_string(th_buf *b, const char *s, size_t n)
{
    size_t at = b->len;
    if (put_string(b, s, n) != 0) {
        b->len = at;
        return -1;
    }
    return 0;
}

int mcp_json_append(th_buf *b, const json_t *j)
{
    size_t at = b->len;
    if (put_value(b, j, 0) != 0) {
        b->len = at;
        return -1;
    }
    return 0;
}

/* ---- msgpack to JSON text ------------------------------------------------------
 *
 * What th_json_from_msgpack_lossy() then mcp_json_append() write, without
 * the tree.  Anything the tree would treat in its own way (a map key that
 * is not a string or not UTF-8, a key twice, an integer past int64, an
 * ext value) makes it give up (1): the caller builds the tree. */

/* A string, ill-formed UTF-8 replaced by U+FFFD as the tree does. */
static int put_text_lossy(th_buf *b, const char *s, size_t n)
{
    if (n == 0)
        return put_string(b, "", 0);
    if (th_utf8_valid(s, n))
        return put_string(b, s, n);
    th_buf t;
    th_buf_init(&t);
    size_t i = 0, bad;
    int rc = 0;
    while (rc == 0 && i < n) {
        size_t l = th_utf8_seq((const unsigned char *)s + i, n - i, &bad);
        if (l) {
            rc = th_buf_append(&t, s + i, l);
            i += l;
        } else {
            rc = th_buf_append(&t, "\xEF\xBF\xBD", 3);
            i += bad ? bad : 1;
        }
    }
    if (rc == 0)
        rc = put_string(b, (const char *)t.data, t.len);
    th_buf_destroy(&t);
    return rc;
}

/* 0, 1 (give up), -1 (no memory). */
static int put_object(th_buf *b, const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return put(b, "null", 4);
    case MSGPACK_OBJECT_BOOLEAN:
        return o->via.boolean ? put(b, "true", 4) : put(b, "false", 5);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return 1;
        return put_int(b, (json_int_t)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return put_int(b, (json_int_t)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return isfinite(o->via.f64) ? put_real(b, o->via.f64)
                                    : put(b, "null", 4);
    case MSGPACK_OBJECT_STR:
        return put_text_lossy(b, o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_BIN:
        return put_text_lossy(b, o->via.bin.ptr, o->via.bin.size);
    case MSGPACK_OBJECT_ARRAY:
        if (put(b, "[", 1) != 0)
            return -1;
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (i && put(b, ",", 1) != 0)
                return -1;
            int rc = put_object(b, &o->via.array.ptr[i]);
            if (rc)
                return rc;
        }
        return put(b, "]", 1);
    case MSGPACK_OBJECT_MAP: {
        uint32_t n = o->via.map.size;
        if (n > 64)
            return 1; /* the duplicate check below is quadratic */
        for (uint32_t i = 0; i < n; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            if ((k->type != MSGPACK_OBJECT_STR &&
                 k->type != MSGPACK_OBJECT_BIN) ||
                (k->via.str.size &&
                 !th_utf8_valid(k->via.str.ptr, k->via.str.size)))
                return 1;
            for (uint32_t j = 0; j < i; j++) {
                const msgpack_object *q = &o->via.map.ptr[j].key;
                if (q->via.str.size == k->via.str.size &&
                    (k->via.str.size == 0 ||
                     memcmp(q->via.str.ptr, k->via.str.ptr,
                            k->via.str.size) == 0))
                    return 1;
            }
        }
        if (put(b, "{", 1) != 0)
            return -1;
        for (uint32_t i = 0; i < n; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            if ((i && put(b, ",", 1) != 0) ||
                put_string(b, k->via.str.size ? k->via.str.ptr : "",
                           k->via.str.size) != 0 ||
                put(b, ":", 1) != 0)
                return -1;
            int rc = put_object(b, &o->via.map.ptr[i].val);
            if (rc)
                return rc;
        }
        return put(b, "}", 1);
    }
    default:
        return 1;
    }
}

int mcp_json_append_mpobject(th_buf *b, const msgpack_object *o)
{
    size_t at = b->len;
    int rc = put_object(b, o);
    if (rc)
        b->len = at;
    return rc;
}

int mcp_json_append_msgpack(th_buf *b, const uint8_t *data, size_t len)
{
    if (th_mp_check(data, len, TH_MP_MAX_DEPTH, NULL, NULL) != 0)
        return 1;
    bool cached;
    msgpack_zone *zone = th_mp_zone_get(&cached);
    if (!zone)
        return -1;
    msgpack_object o;
    msgpack_unpack_return ur =
        msgpack_unpack((const char *)data, len, NULL, zone, &o);
    int rc = ur == MSGPACK_UNPACK_SUCCESS || ur == MSGPACK_UNPACK_EXTRA_BYTES
                 ? mcp_json_append_mpobject(b, &o)
                 : 1;
    th_mp_zone_put(zone, cached);
    return rc;
}

/* ---- measuring text ------------------------------------------------------ */

int mcp_json_measure(const char *p, size_t n, uint32_t max_depth,
                     uint32_t max_elems)
{
    uint32_t depth = 0, elems = 0;
    const char *end = p + n;
    while (p < end) {
        switch (*p++) {
        case '"': /* to the closing quote, over escapes */
            for (;;) {
                const char *q = memchr(p, '"', (size_t)(end - p));
                if (!q)
                    return 0;
                size_t bs = 0;
                while (q - bs > p && q[-1 - (ptrdiff_t)bs] == '\\')
                    bs++;
                p = q + 1;
                if (bs % 2 == 0)
                    break;
            }
            break;
        case '[':
        case '{':
            if (++depth > max_depth)
                return MCP_JSON_TOO_DEEP;
            /* fall through */
        case ',':
        case ':':
            if (++elems > max_elems)
                return MCP_JSON_TOO_MANY;
            break;
        case ']':
        case '}':
            if (depth)
                depth--;
            break;
        default:
            break;
        }
    }
    return 0;
}
