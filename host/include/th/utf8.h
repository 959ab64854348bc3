/* th/utf8.h - UTF-8 well-formedness, for every edge that needs text.
 * Pure functions: any thread. */
#ifndef TH_UTF8_H
#define TH_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* The length of the well-formed UTF-8 sequence at s[0..n) (1..4), or 0
 * when it is not one; *bad is then the length of its maximal ill-formed
 * subpart (at least 1).  Overlongs, surrogates and code points past
 * U+10FFFF are not well formed. */
size_t th_utf8_seq(const unsigned char *s, size_t n, size_t *bad);

/* True when s[0..n) is well-formed UTF-8 (n == 0 included). */
bool th_utf8_valid(const void *s, size_t n);

/* Text from untrusted bytes src[0..n), safe to show: into dst, at most
 * cap bytes and a NUL (dst holds cap + 1), each ill-formed subpart
 * becoming '?', each control character (and DEL) a space, or kept when
 * it is '\n' and keep_newlines; cut at a whole sequence, never inside
 * one.  Returns the bytes written (not counting the NUL). */
size_t th_utf8_scrub(char *dst, size_t cap, const void *src, size_t n,
                     bool keep_newlines);

#endif
