/* argview.c - the decoded view of a call's arguments (ABI 1.2,
 * toolhost_call.args_view): one walk over the top level of the argument
 * map, each value decoded one level (scalars fully, containers by count
 * and byte range), every pointer into the argument bytes.  Validation
 * decodes the map through it, and the call path hands it to execute(), so
 * a plugin (the SDK's getters) need not decode the map a second time.
 *
 * Nothing here allocates; any thread. */
#include <string.h>

#include "th/mpwalk.h"
#include "th/tool.h"

static uint64_t be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* The length of the one msgpack value at p (containers with all they
 * hold), or 0 when it does not fit in n bytes. */
static size_t skip_value(const uint8_t *p, size_t n)
{
    size_t pos = 0;
    uint64_t left = 1;
    while (left) {
        th_mp_head h;
        if (th_mp_head_read(p + pos, n - pos, &h) != 1 ||
            h.payload > n - pos - h.hdr)
            return 0;
        pos += h.hdr + (size_t)h.payload;
        left = left - 1 + h.kids;
        /* every value takes a byte: more announced than bytes left */
        if (left > n - pos)
            return 0;
    }
    return pos;
}

/* Decodes the value at p (n bytes) into a (type, raw, the decoded
 * members).  0, or -1 when it is not one complete value. */
static int decode_value(const uint8_t *p, size_t n, toolhost_arg *a)
{
    if (n == 0)
        return -1;
    uint8_t b = p[0];
    a->raw = p;
    a->bytes = NULL;
    a->len = 0;
    a->i = 0;
    a->u = 0;
    a->f = 0;
    size_t need = 1;
    if (b <= 0x7f) {
        a->type = TOOLHOST_VALUE_UINT;
        a->u = b;
    } else if (b >= 0xe0) {
        a->type = TOOLHOST_VALUE_INT;
        a->i = (int8_t)b;
    } else if (b >= 0xa0 && b <= 0xbf) {
        a->type = TOOLHOST_VALUE_STR;
        a->len = b & 0x1fu;
        a->bytes = p + 1;
        need = 1 + a->len;
    } else {
        size_t lenb = 0;
        switch (b) {
        case 0xc0: a->type = TOOLHOST_VALUE_NIL; break;
        case 0xc2: case 0xc3:
            a->type = TOOLHOST_VALUE_BOOL;
            a->i = b == 0xc3;
            break;
        case 0xcc: case 0xcd: case 0xce: case 0xcf:
            lenb = (size_t)1 << (b - 0xcc);
            if (n < 1 + lenb)
                return -1;
            a->type = TOOLHOST_VALUE_UINT;
            a->u = be(p + 1, lenb);
            need = 1 + lenb;
            break;
        case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
            lenb = (size_t)1 << (b - 0xd0);
            if (n < 1 + lenb)
                return -1;
            uint64_t v = be(p + 1, lenb);
            int64_t s = lenb == 1   ? (int8_t)v
                        : lenb == 2 ? (int16_t)v
                        : lenb == 4 ? (int32_t)v
                                    : (int64_t)v;
            /* msgpack-c reads a non-negative signed int as unsigned */
            if (s >= 0) {
                a->type = TOOLHOST_VALUE_UINT;
                a->u = (uint64_t)s;
            } else {
                a->type = TOOLHOST_VALUE_INT;
                a->i = s;
            }
            need = 1 + lenb;
            break;
        }
        case 0xca: {
            if (n < 5)
                return -1;
            uint32_t v = (uint32_t)be(p + 1, 4);
            float f;
            memcpy(&f, &v, 4);
            a->type = TOOLHOST_VALUE_FLOAT;
            a->f = f;
            need = 5;
            break;
        }
        case 0xcb: {
            if (n < 9)
                return -1;
            uint64_t v = be(p + 1, 8);
            memcpy(&a->f, &v, 8);
            a->type = TOOLHOST_VALUE_FLOAT;
            need = 9;
            break;
        }
        case 0xd9: case 0xda: case 0xdb:
        case 0xc4: case 0xc5: case 0xc6:
            lenb = b >= 0xd9 ? (size_t)1 << (b - 0xd9) : (size_t)1 << (b - 0xc4);
            if (n < 1 + lenb)
                return -1;
            a->type = b >= 0xd9 ? TOOLHOST_VALUE_STR : TOOLHOST_VALUE_BIN;
            a->len = (size_t)be(p + 1, lenb);
            a->bytes = p + 1 + lenb;
            if (a->len > n - 1 - lenb)
                return -1;
            need = 1 + lenb + a->len;
            break;
        case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
            a->type = TOOLHOST_VALUE_EXT;
            a->len = (size_t)1 << (b - 0xd4);
            if (n < 2 + a->len)
                return -1;
            a->i = (int8_t)p[1];
            a->bytes = p + 2;
            need = 2 + a->len;
            break;
        case 0xc7: case 0xc8: case 0xc9:
            lenb = (size_t)1 << (b - 0xc7);
            if (n < 2 + lenb)
                return -1;
            a->type = TOOLHOST_VALUE_EXT;
            a->len = (size_t)be(p + 1, lenb);
            a->i = (int8_t)p[1 + lenb];
            a->bytes = p + 2 + lenb;
            if (a->len > n - 2 - lenb)
                return -1;
            need = 2 + lenb + a->len;
            break;
        default: {
            /* arrays and maps (0x80-0x9f, 0xdc-0xdf); 0xc1 is refused */
            th_mp_head h;
            if (th_mp_head_read(p, n, &h) != 1 || !h.container)
                return -1;
            bool map = (b >= 0x80 && b <= 0x8f) || b >= 0xde;
            a->type = map ? TOOLHOST_VALUE_MAP : TOOLHOST_VALUE_ARRAY;
            a->len = (size_t)(map ? h.kids / 2 : h.kids);
            need = skip_value(p, n);
            if (need == 0)
                return -1;
            break;
        }
        }
    }
    if (need > n)
        return -1;
    a->raw_len = need;
    return 0;
}

/* The common values (fixstr, positive fixint) without the call. */
static inline int decode_fast(const uint8_t *p, size_t n, toolhost_arg *a)
{
    uint8_t b = n ? p[0] : 0xc1;
    if (b >= 0xa0 && b <= 0xbf && (size_t)(b & 0x1fu) < n) {
        a->type = TOOLHOST_VALUE_STR;
        a->raw = p;
        a->raw_len = 1 + (size_t)(b & 0x1fu);
        a->bytes = p + 1;
        a->len = b & 0x1fu;
        a->i = 0;
        a->u = 0;
        a->f = 0;
        return 0;
    }
    return decode_value(p, n, a);
}

int th_args_view_build(const uint8_t *data, size_t len, toolhost_arg *items,
                       size_t cap, toolhost_args_view *v)
{
    if (!data || len == 0)
        return -1;
    size_t n, pos;
    if (data[0] >= 0x80 && data[0] <= 0x8f) {
        n = data[0] & 0x0fu;
        pos = 1;
    } else {
        th_mp_head h;
        if ((data[0] != 0xde && data[0] != 0xdf) ||
            th_mp_head_read(data, len, &h) != 1)
            return -1;
        n = (size_t)(h.kids / 2);
        pos = h.hdr;
    }
    if (n > cap)
        return -1;
    for (size_t k = 0; k < n; k++) {
        toolhost_arg *a = &items[k];
        /* the key: a string (fixstr in practice) */
        size_t kl;
        const char *name;
        if (pos < len && data[pos] >= 0xa0 && data[pos] <= 0xbf) {
            kl = data[pos] & 0x1fu;
            name = (const char *)data + pos + 1;
            pos += 1 + kl;
            if (pos > len)
                return -1;
        } else {
            if (decode_value(data + pos, len - pos, a) != 0 ||
                a->type != TOOLHOST_VALUE_STR)
                return -1;
            kl = a->len;
            name = (const char *)a->bytes;
            pos += a->raw_len;
        }
        if (decode_fast(data + pos, len - pos, a) != 0)
            return -1;
        pos += a->raw_len;
        a->struct_size = sizeof *a;
        a->name = name;
        a->name_len = kl;
    }
    if (pos != len)
        return -1;
    v->struct_size = sizeof *v;
    v->n_args = (uint32_t)n;
    v->data = data;
    v->len = len;
    v->args = items;
    return 0;
}
