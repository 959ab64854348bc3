/* argview.c - the decoded view of a call's arguments (ABI 1.2,
 * toolhost_call.args_view): one walk over the top level of the argument
 * map, each value decoded one level (scalars fully, containers by count
 * and byte range), every pointer into the argument bytes.  Validation
 * decodes the map through it, and the call path hands it to execute(), so
 * a plugin (the SDK's getters) need not decode the map a second time.
 *
 * Nothing here allocates; any thread. */
#include <stdbool.h>
#include <string.h>

#include "th/mpwalk.h"
#include "th/tool.h"

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
 * members): its header read by th_mp_head_read (mpwalk.c), the scalar
 * from the payload the header gives.  0, or -1 when it is not one
 * complete value.
 * fn-shape: one chain over the msgpack type byte, in byte order, on every
 * call's path (complexity ~34 from its range tests): split, the format's
 * table would be scattered over helpers with nothing of their own. */
static int decode_value(const uint8_t *p, size_t n, toolhost_arg *a)
{
    th_mp_head h;
    if (th_mp_head_read(p, n, &h) != 1 || h.payload > n - h.hdr)
        return -1;
    uint8_t b = p[0];
    const uint8_t *pl = p + h.hdr; /* the payload */
    a->raw = p;
    a->raw_len = h.hdr + (size_t)h.payload;
    a->bytes = NULL;
    a->len = 0;
    a->i = 0;
    a->u = 0;
    a->f = 0;
    if (h.container) {
        bool map = (b >= 0x80 && b <= 0x8f) || b >= 0xde;
        a->type = map ? TOOLHOST_VALUE_MAP : TOOLHOST_VALUE_ARRAY;
        a->len = (size_t)(map ? h.kids / 2 : h.kids);
        a->raw_len = skip_value(p, n);
        return a->raw_len ? 0 : -1;
    }
    if (b <= 0x7f) {
        a->type = TOOLHOST_VALUE_UINT;
        a->u = b;
    } else if (b >= 0xe0) {
        a->type = TOOLHOST_VALUE_INT;
        a->i = (int8_t)b;
    } else if ((b >= 0xa0 && b <= 0xbf) || (b >= 0xd9 && b <= 0xdb) ||
               (b >= 0xc4 && b <= 0xc6)) {
        a->type = b >= 0xc4 && b <= 0xc6 ? TOOLHOST_VALUE_BIN
                                         : TOOLHOST_VALUE_STR;
        a->bytes = pl;
        a->len = (size_t)h.payload;
    } else if (b >= 0xcc && b <= 0xcf) {
        a->type = TOOLHOST_VALUE_UINT;
        a->u = th_mp_be(pl, (size_t)h.payload);
    } else if (b >= 0xd0 && b <= 0xd3) {
        uint64_t v = th_mp_be(pl, (size_t)h.payload);
        int64_t s = b == 0xd0   ? (int8_t)v
                    : b == 0xd1 ? (int16_t)v
                    : b == 0xd2 ? (int32_t)v
                                : (int64_t)v;
        /* msgpack-c reads a non-negative signed int as unsigned */
        if (s >= 0) {
            a->type = TOOLHOST_VALUE_UINT;
            a->u = (uint64_t)s;
        } else {
            a->type = TOOLHOST_VALUE_INT;
            a->i = s;
        }
    } else if (b == 0xca) {
        uint32_t v = (uint32_t)th_mp_be(pl, 4);
        float f;
        memcpy(&f, &v, 4);
        a->type = TOOLHOST_VALUE_FLOAT;
        a->f = f;
    } else if (b == 0xcb) {
        uint64_t v = th_mp_be(pl, 8);
        memcpy(&a->f, &v, 8);
        a->type = TOOLHOST_VALUE_FLOAT;
    } else if (b >= 0xd4 && b <= 0xd8) {
        /* fixext: the payload is the ext type, then the data */
        a->type = TOOLHOST_VALUE_EXT;
        a->i = (int8_t)pl[0];
        a->bytes = pl + 1;
        a->len = (size_t)h.payload - 1;
    } else if (b >= 0xc7 && b <= 0xc9) {
        /* ext 8/16/32: the header ends with the ext type */
        a->type = TOOLHOST_VALUE_EXT;
        a->i = (int8_t)p[h.hdr - 1];
        a->bytes = pl;
        a->len = (size_t)h.payload;
    } else if (b == 0xc0) {
        a->type = TOOLHOST_VALUE_NIL;
    } else { /* 0xc2, 0xc3 (0xc1 was refused by th_mp_head_read) */
        a->type = TOOLHOST_VALUE_BOOL;
        a->i = b == 0xc3;
    }
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
    th_mp_head h;
    uint8_t b = data[0];
    if (!((b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf) ||
        th_mp_head_read(data, len, &h) != 1)
        return -1;
    size_t n = (size_t)(h.kids / 2), pos = h.hdr;
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
