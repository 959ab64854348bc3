/* utf8.c - UTF-8 well-formedness (th/utf8.h). */
#include "th/utf8.h"

#include <string.h>

/* The length of the well-formed UTF-8 sequence at s[0..n) (1..4), or 0
 * when it is not one; *bad is then the length of its maximal subpart (the
 * bytes that a replacement character stands for, at least 1).  Overlongs,
 * surrogates and code points past U+10FFFF are not well formed. */
size_t th_utf8_seq(const unsigned char *s, size_t n, size_t *bad)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
    *bad = 1;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    for (size_t k = 1; k < len; k++) {
        if (k >= n)
            return 0;
        unsigned char b = s[k];
        if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80)
            return 0;
        *bad = k + 1;
    }
    return len;
}

bool th_utf8_valid(const void *p, size_t n)
{
    const unsigned char *s = p;
    size_t i = 0, bad;
    while (i < n) {
        size_t l = th_utf8_seq(s + i, n - i, &bad);
        if (!l)
            return false;
        i += l;
    }
    return true;
}

size_t th_utf8_scrub(char *dst, size_t cap, const void *src, size_t n,
                     bool keep_newlines)
{
    const unsigned char *s = src;
    size_t k = 0;
    for (size_t i = 0; i < n && k < cap;) {
        size_t bad = 1;
        size_t sl = th_utf8_seq(s + i, n - i, &bad);
        if (sl == 0) { /* the ill-formed bytes, at least 1 */
            dst[k++] = '?';
            i += bad;
        } else if (sl == 1 && (s[i] < 0x20 || s[i] == 0x7f)) {
            dst[k++] = keep_newlines && s[i] == '\n' ? '\n' : ' ';
            i++;
        } else if (k + sl <= cap) {
            memcpy(dst + k, s + i, sl);
            k += sl;
            i += sl;
        } else {
            break;
        }
    }
    dst[k] = '\0';
    return k;
}
