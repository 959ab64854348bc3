/* mpwalk.c - walking msgpack bytes without unpacking them (th/mpwalk.h). */
#include "th/mpwalk.h"

/* fn-shape: one switch over the msgpack type byte (the format's table:
 * each case a header length and what follows), read for every value of
 * every call's arguments; its complexity is the format's case count. */
int th_mp_head_read(const uint8_t *p, size_t n, th_mp_head *h)
{
    if (n == 0)
        return 0;
    uint8_t b = p[0];
    size_t lenb = 0;   /* bytes of the length field after the type byte */
    int kid_mult = 0;  /* with lenb: 1 for arrays, 2 for maps, 0 payload */
    h->hdr = 1;
    h->payload = 0;
    h->kids = 0;
    h->container = (b >= 0x80 && b <= 0x9f) || (b >= 0xdc && b <= 0xdf);
    if (b <= 0x7f || b >= 0xe0) {
        /* positive or negative fixint */
    } else if (b <= 0x8f) {
        h->kids = 2u * (b & 0x0fu);
    } else if (b <= 0x9f) {
        h->kids = b & 0x0fu;
    } else if (b <= 0xbf) {
        h->payload = b & 0x1fu;
    } else {
        switch (b) {
        case 0xc0: case 0xc2: case 0xc3: break;
        case 0xc1: return TH_EPROTO;
        case 0xc4: case 0xd9: h->hdr = 2; lenb = 1; break;
        case 0xc5: case 0xda: h->hdr = 3; lenb = 2; break;
        case 0xc6: case 0xdb: h->hdr = 5; lenb = 4; break;
        case 0xc7: h->hdr = 3; lenb = 1; break; /* ext 8: len, type */
        case 0xc8: h->hdr = 4; lenb = 2; break;
        case 0xc9: h->hdr = 6; lenb = 4; break;
        case 0xca: h->payload = 4; break;
        case 0xcb: h->payload = 8; break;
        case 0xcc: case 0xd0: h->payload = 1; break;
        case 0xcd: case 0xd1: h->payload = 2; break;
        case 0xce: case 0xd2: h->payload = 4; break;
        case 0xcf: case 0xd3: h->payload = 8; break;
        case 0xd4: h->payload = 2; break; /* fixext: type + data */
        case 0xd5: h->payload = 3; break;
        case 0xd6: h->payload = 5; break;
        case 0xd7: h->payload = 9; break;
        case 0xd8: h->payload = 17; break;
        case 0xdc: h->hdr = 3; lenb = 2; kid_mult = 1; break;
        case 0xdd: h->hdr = 5; lenb = 4; kid_mult = 1; break;
        case 0xde: h->hdr = 3; lenb = 2; kid_mult = 2; break;
        case 0xdf: h->hdr = 5; lenb = 4; kid_mult = 2; break;
        default: break;
        }
    }
    if (n < h->hdr)
        return 0;
    if (lenb) {
        uint64_t v = th_mp_be(p + 1, lenb);
        if (kid_mult)
            h->kids = v * (uint64_t)kid_mult;
        else
            h->payload = v;
    }
    return 1;
}

int th_mp_check(const uint8_t *data, size_t len, unsigned max_depth,
                size_t *value_len, th_error *err)
{
    uint64_t left[TH_MP_MAX_DEPTH + 2]; /* values still to read per level */
    if (max_depth > TH_MP_MAX_DEPTH)
        max_depth = TH_MP_MAX_DEPTH;
    unsigned depth = 0;
    left[0] = 1;
    size_t pos = 0;
    for (;;) {
        while (left[depth] == 0) {
            if (depth == 0) {
                if (value_len)
                    *value_len = pos;
                return 0;
            }
            depth--;
        }
        th_mp_head h;
        int rc = th_mp_head_read(data + pos, len - pos, &h);
        if (rc == 0)
            return th_error_set(err, TH_EINVAL,
                                "truncated msgpack: the value at byte %zu "
                                "needs more bytes than the %zu given",
                                pos, len);
        if (rc < 0)
            return th_error_set(err, TH_EINVAL,
                                "byte 0xc1 at offset %zu is not msgpack", pos);
        left[depth]--;
        size_t rest = len - pos - h.hdr;
        if (h.payload > rest)
            return th_error_set(err, TH_EINVAL,
                                "truncated msgpack: the value at byte %zu "
                                "announces %llu bytes but only %zu follow",
                                pos, (unsigned long long)h.payload, rest);
        pos += h.hdr + (size_t)h.payload;
        if (!h.container)
            continue;
        if (depth + 1 > max_depth)
            return th_error_set(err, TH_EINVAL,
                                "msgpack nested deeper than %u levels",
                                max_depth);
        if (h.kids == 0)
            continue;
        if (h.kids > len - pos)
            return th_error_set(err, TH_EINVAL,
                                "the container at byte %zu announces %llu "
                                "elements but only %zu bytes follow",
                                pos - h.hdr, (unsigned long long)h.kids,
                                len - pos);
        left[++depth] = h.kids;
    }
}
