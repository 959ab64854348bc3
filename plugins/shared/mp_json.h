/* mp_json.h - for the bundled plugins that speak JSON to the outside (mcp,
 * openapi): a msgpack value the host handed them (a config block, a call's
 * arguments) as a jansson tree (mp_json_parse), or straight as JSON text
 * (mp_json_dump: no tree, for a call's hot path).  Both accept and refuse
 * the same values, and the text is what json_dumps(JSON_COMPACT |
 * JSON_ENSURE_ASCII) prints of the tree, byte for byte (tests/unit/
 * test_mp_json.c and fuzz/mp_json.c hold them to it).  Compiled into each
 * of those plugins (not a plugin of its own; the Makefile links
 * plugins/shared/ into every bundled plugin). */
#ifndef TH_PLUGIN_MP_JSON_H
#define TH_PLUGIN_MP_JSON_H

#include <jansson.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Deepest nesting converted; deeper is refused (NULL). */
#define MP_JSON_MAX_DEPTH 64

/* The first msgpack value of data[0..len) as a new JSON tree, or NULL
 * when there is none or it is not JSON (a bin or ext value, a map key
 * that is not a string, a string that is not UTF-8, nesting past
 * MP_JSON_MAX_DEPTH) or memory ran out.  An integer over INT64_MAX
 * becomes a real. */
json_t *mp_json_parse(const uint8_t *data, size_t len);

/* Whether s[0..n) is UTF-8 as jansson reads it: no overlong form, no
 * surrogate, nothing past U+10FFFF (NUL and control bytes are not its
 * concern). */
bool mp_json_utf8_valid(const char *s, size_t n);

/* JSON text being built: data[0..len) (NUL-terminated once anything was
 * put), malloc()ed, the caller's to free(); zero it to start. */
typedef struct mp_json_text {
    char *data;
    size_t len, cap;
} mp_json_text;

/* Room for n more bytes (and the NUL): 0, or -1 when memory ran out. */
int mp_json_reserve(mp_json_text *t, size_t n);
/* Appends n raw bytes (JSON the caller vouches for): 0 or -1. */
int mp_json_put(mp_json_text *t, const char *s, size_t n);
/* Appends s[0..n) as a JSON string, escaped as JSON_ENSURE_ASCII does
 * (\" \\ \b \f \n \r \t, other controls and every non-ASCII code point as
 * a \u escape of four hex digits, a surrogate pair past U+FFFF): 0, or -1 when s is not UTF-8
 * (or memory ran out), with t as it was. */
int mp_json_put_str(mp_json_text *t, const char *s, size_t n);
/* Appends v in decimal: 0 or -1. */
int mp_json_put_int(mp_json_text *t, int64_t v);

/* Appends the JSON text of the first msgpack value of data[0..len) to t:
 * 0, or -1 with t as it was when there is none, it is not JSON (the
 * refusals of mp_json_parse), `object` is set and it is not a map, or
 * memory ran out.  Text only (no jansson tree), apart from a real, which
 * jansson formats so that the digits are the ones json_dumps prints. */
int mp_json_dump(const uint8_t *data, size_t len, bool object,
                 mp_json_text *t);

#endif
