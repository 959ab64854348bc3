/* mp_json.c - msgpack to jansson, and msgpack straight to JSON text, for
 * the bundled plugins (mp_json.h). */
#include "mp_json.h"

#include <stdlib.h>
#include <string.h>

static json_t *of(const msgpack_object *o, int depth);

static json_t *array_of(const msgpack_object *o, int depth)
{
    json_t *a = json_array();
    for (uint32_t i = 0; a && i < o->via.array.size; i++) {
        json_t *v = of(&o->via.array.ptr[i], depth + 1);
        if (!v || json_array_append_new(a, v) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *map_of(const msgpack_object *o, int depth)
{
    json_t *m = json_object();
    for (uint32_t i = 0; m && i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key;
        json_t *v = k->type == MSGPACK_OBJECT_STR
                        ? of(&o->via.map.ptr[i].val, depth + 1)
                        : NULL;
        if (!v ||
            json_object_setn_new(m, k->via.str.size ? k->via.str.ptr : "",
                                 k->via.str.size, v) != 0) {
            json_decref(m);
            return NULL;
        }
    }
    return m;
}

static json_t *of(const msgpack_object *o, int depth)
{
    if (depth > MP_JSON_MAX_DEPTH)
        return NULL;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return json_null();
    case MSGPACK_OBJECT_BOOLEAN:
        return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return json_real((double)o->via.u64);
        return json_integer((json_int_t)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return json_integer((json_int_t)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return json_real(o->via.f64);
    case MSGPACK_OBJECT_STR:
        /* msgpack-c gives an empty str a NULL ptr, which jansson refuses */
        return json_stringn(o->via.str.size ? o->via.str.ptr : "",
                            o->via.str.size);
    case MSGPACK_OBJECT_ARRAY:
        return array_of(o, depth);
    case MSGPACK_OBJECT_MAP:
        return map_of(o, depth);
    default:
        return NULL; /* bin, ext: not JSON */
    }
}

json_t *mp_json_parse(const uint8_t *data, size_t len)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    json_t *j = NULL;
    if (msgpack_unpack_next(&u, (const char *)data, len, &off) ==
        MSGPACK_UNPACK_SUCCESS)
        j = of(&u.data, 0);
    msgpack_unpacked_destroy(&u);
    return j;
}

/* ---- straight to text ---------------------------------------------------- */

int mp_json_reserve(mp_json_text *t, size_t n)
{
    if (n < t->cap - t->len)
        return 0;
    if (n > SIZE_MAX / 2 - t->len)
        return -1;
    size_t cap = t->cap ? t->cap : 256;
    while (cap <= t->len + n)
        cap *= 2;
    char *d = realloc(t->data, cap);
    if (!d)
        return -1;
    t->data = d;
    t->cap = cap;
    return 0;
}

int mp_json_put(mp_json_text *t, const char *s, size_t n)
{
    if (mp_json_reserve(t, n) != 0)
        return -1;
    if (n)
        memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
    return 0;
}

int mp_json_put_int(mp_json_text *t, int64_t v)
{
    char tmp[24];
    char *e = tmp + sizeof tmp, *p = e;
    /* the magnitude as unsigned: INT64_MIN has no positive twin */
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    return mp_json_put(t, p, (size_t)(e - p));
}

/* The code point of the UTF-8 sequence at s[0..n) (as jansson's
 * utf8_iterate checks it: no overlong form, no surrogate, at most
 * U+10FFFF) and its length in *len, or -1. */
static int32_t utf8_next(const unsigned char *s, size_t n, size_t *len)
{
    unsigned c = s[0];
    size_t k;
    int32_t v, min;
    if (c >= 0xc2 && c <= 0xdf) {
        k = 2;
        v = c & 0x1f;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        k = 3;
        v = c & 0x0f;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        k = 4;
        v = c & 0x07;
        min = 0x10000;
    } else {
        return -1; /* a continuation byte, C0/C1, F5 and above */
    }
    if (k > n)
        return -1;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return -1;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return -1;
    *len = k;
    return v;
}

bool mp_json_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = 1;
        if (u[i] >= 0x80 && utf8_next(u + i, n - i, &k) < 0)
            return false;
        i += k;
    }
    return true;
}

static const char hex[] = "0123456789ABCDEF";

static char *put_u(char *o, unsigned v)
{
    o[0] = '\\';
    o[1] = 'u';
    o[2] = hex[(v >> 12) & 15];
    o[3] = hex[(v >> 8) & 15];
    o[4] = hex[(v >> 4) & 15];
    o[5] = hex[v & 15];
    return o + 6;
}

int mp_json_put_str(mp_json_text *t, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t start = t->len, i = 0;
    if (mp_json_put(t, "\"", 1) != 0)
        return -1;
    while (i < n) {
        /* a run that needs no escape, copied at once */
        size_t j = i;
        while (j < n && s[j] >= 0x20 && s[j] < 0x80 && s[j] != '"' &&
               s[j] != '\\')
            j++;
        if (j > i && mp_json_put(t, (const char *)s + i, j - i) != 0)
            goto fail;
        i = j;
        if (i == n)
            break;
        /* one escape: at most 12 bytes (a surrogate pair) */
        if (mp_json_reserve(t, 12) != 0)
            goto fail;
        char *o = t->data + t->len, *o0 = o;
        unsigned c = s[i];
        if (c >= 0x80) {
            size_t k;
            int32_t cp = utf8_next(s + i, n - i, &k);
            if (cp < 0)
                goto fail;
            i += k;
            if (cp < 0x10000) {
                o = put_u(o, (unsigned)cp);
            } else {
                cp -= 0x10000;
                o = put_u(o, 0xd800 | (((unsigned)cp >> 10) & 0x3ff));
                o = put_u(o, 0xdc00 | ((unsigned)cp & 0x3ff));
            }
        } else {
            i++;
            char e = c == '"' ? '"' : c == '\\' ? '\\' : c == '\b' ? 'b'
                   : c == '\f' ? 'f' : c == '\n' ? 'n' : c == '\r' ? 'r'
                   : c == '\t' ? 't' : 0;
            if (e) {
                *o++ = '\\';
                *o++ = e;
            } else {
                o = put_u(o, c);
            }
        }
        t->len += (size_t)(o - o0);
        t->data[t->len] = '\0';
    }
    if (mp_json_put(t, "\"", 1) == 0)
        return 0;
fail:
    t->len = start;
    if (t->data)
        t->data[start] = '\0';
    return -1;
}

static int dump_of(const msgpack_object *o, int depth, mp_json_text *t);

/* A real as json_dumps prints it (jansson's own formatting: the same
 * digits whatever its version); a NaN or an infinity is refused, as
 * json_real() refuses it. */
static int dump_real(double d, mp_json_text *t)
{
    json_t *r = json_real(d);
    if (!r)
        return -1;
    char tmp[100];
    size_t n = json_dumpb(r, tmp, sizeof tmp, JSON_ENCODE_ANY | JSON_COMPACT);
    json_decref(r);
    if (n == 0 || n > sizeof tmp)
        return -1;
    return mp_json_put(t, tmp, n);
}

static int dump_array(const msgpack_object *o, int depth, mp_json_text *t)
{
    if (mp_json_put(t, "[", 1) != 0)
        return -1;
    for (uint32_t i = 0; i < o->via.array.size; i++)
        if ((i && mp_json_put(t, ",", 1) != 0) ||
            dump_of(&o->via.array.ptr[i], depth + 1, t) != 0)
            return -1;
    return mp_json_put(t, "]", 1);
}

/* A key for sorting: its bytes, then its place. */
typedef struct {
    const char *p;
    uint32_t len, at;
} map_key;

static int key_cmp(const void *a, const void *b)
{
    const map_key *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    int c = x->len ? memcmp(x->p, y->p, x->len) : 0;
    if (c)
        return c;
    return x->at < y->at ? -1 : x->at > y->at;
}

#define SKIP UINT32_MAX
#define SMALL_MAP 16

static bool same_key(const msgpack_object *a, const msgpack_object *b)
{
    return a->via.str.size == b->via.str.size &&
           (!a->via.str.size ||
            memcmp(a->via.str.ptr, b->via.str.ptr, a->via.str.size) == 0);
}

/* A map, as a jansson object built from it prints: a key given twice
 * keeps its first place and takes its last value (every value must still
 * be JSON, as each one is converted there).  Twins are found by pairs in
 * a small map, by sorting the keys in a large one. */
static int dump_map(const msgpack_object *o, int depth, mp_json_text *t)
{
    uint32_t n = o->via.map.size;
    const msgpack_object_kv *kv = o->via.map.ptr;
    for (uint32_t i = 0; i < n; i++)
        if (kv[i].key.type != MSGPACK_OBJECT_STR)
            return -1;
    /* pick[i]: the entry whose value is written at key i's place, SKIP
     * for a key seen before; lost[i]: value i is overwritten by a twin's */
    uint32_t small_pick[SMALL_MAP], *pick = small_pick;
    unsigned char small_lost[SMALL_MAP], *lost = small_lost;
    bool dups = false;
    if (n <= SMALL_MAP) {
        for (uint32_t i = 0; i < n; i++) {
            pick[i] = i;
            lost[i] = 0;
            for (uint32_t j = 0; j < i; j++)
                if (pick[j] != SKIP && same_key(&kv[j].key, &kv[i].key)) {
                    lost[pick[j]] = 1;
                    pick[j] = i;
                    pick[i] = SKIP;
                    dups = true;
                    break;
                }
        }
    } else {
        map_key *keys = malloc((size_t)n * sizeof *keys);
        pick = malloc((size_t)n * sizeof *pick);
        lost = calloc(n, 1);
        if (!keys || !pick || !lost) {
            free(keys);
            free(pick);
            free(lost);
            return -1;
        }
        for (uint32_t i = 0; i < n; i++)
            keys[i] = (map_key){kv[i].key.via.str.ptr, kv[i].key.via.str.size,
                                i};
        qsort(keys, n, sizeof *keys, key_cmp);
        for (uint32_t a = 0; a < n;) {
            uint32_t b = a;
            while (b + 1 < n && keys[b + 1].len == keys[a].len &&
                   (!keys[a].len ||
                    memcmp(keys[b + 1].p, keys[a].p, keys[a].len) == 0))
                b++;
            pick[keys[a].at] = keys[b].at;
            for (uint32_t k = a + 1; k <= b; k++) {
                pick[keys[k].at] = SKIP;
                lost[keys[k - 1].at] = 1;
                dups = true;
            }
            a = b + 1;
        }
        free(keys);
    }
    int rc = mp_json_put(t, "{", 1);
    bool first = true;
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        if (pick[i] == SKIP)
            continue;
        if ((!first && mp_json_put(t, ",", 1) != 0) ||
            mp_json_put_str(t, kv[i].key.via.str.ptr, kv[i].key.via.str.size)
                != 0 ||
            mp_json_put(t, ":", 1) != 0 ||
            dump_of(&kv[pick[i]].val, depth + 1, t) != 0)
            rc = -1;
        first = false;
    }
    /* a value overwritten by a twin's must be JSON too: written and
     * taken back */
    for (uint32_t i = 0; dups && rc == 0 && i < n; i++) {
        size_t mark = t->len;
        if (lost[i] && dump_of(&kv[i].val, depth + 1, t) != 0)
            rc = -1;
        t->len = mark;
    }
    if (pick != small_pick) {
        free(pick);
        free(lost);
    }
    return rc == 0 ? mp_json_put(t, "}", 1) : -1;
}

static int dump_of(const msgpack_object *o, int depth, mp_json_text *t)
{
    if (depth > MP_JSON_MAX_DEPTH)
        return -1;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return mp_json_put(t, "null", 4);
    case MSGPACK_OBJECT_BOOLEAN:
        return o->via.boolean ? mp_json_put(t, "true", 4)
                              : mp_json_put(t, "false", 5);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return dump_real((double)o->via.u64, t);
        return mp_json_put_int(t, (int64_t)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return mp_json_put_int(t, o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return dump_real(o->via.f64, t);
    case MSGPACK_OBJECT_STR:
        return mp_json_put_str(t, o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_ARRAY:
        return dump_array(o, depth, t);
    case MSGPACK_OBJECT_MAP:
        return dump_map(o, depth, t);
    default:
        return -1; /* bin, ext: not JSON */
    }
}

int mp_json_dump(const uint8_t *data, size_t len, bool object,
                 mp_json_text *t)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0, mark = t->len;
    int rc = -1;
    if (msgpack_unpack_next(&u, (const char *)data, len, &off) ==
            MSGPACK_UNPACK_SUCCESS &&
        (!object || u.data.type == MSGPACK_OBJECT_MAP))
        rc = dump_of(&u.data, 0, t);
    msgpack_unpacked_destroy(&u);
    if (rc != 0) {
        t->len = mark;
        if (t->data)
            t->data[mark] = '\0';
    }
    return rc;
}
