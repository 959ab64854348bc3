/* th/json.h - JSON <-> msgpack at the edges (jansson and msgpack-c).
 *
 * Fronts that speak JSON (the CLI, MCP, exports) convert once at the edge:
 * arguments become msgpack before they enter the call path, and results,
 * meta and schemas become JSON only when a JSON front prints them.
 *
 * Mapping: null <-> nil, true/false <-> bool, integer <-> int (JSON
 * integers beyond int64 are refused), real <-> float64, string <-> str,
 * array <-> array, object <-> map.  msgpack -> JSON: str and bin become
 * strings when they are well-formed UTF-8 (jansson holds nothing else) and
 * are refused otherwise; map keys must be strings; ext is refused.  The
 * _lossy variants, for printing results and meta (tool output may hold any
 * bytes), replace each maximal ill-formed subsequence with U+FFFD instead.
 */
#ifndef TH_JSON_H
#define TH_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "th/buf.h"
#include "th/err.h"

struct msgpack_packer;
struct msgpack_object;

/* Packs a JSON value as msgpack.  0 or TH_ENOMEM/TH_EINVAL. */
int th_json_pack(const json_t *j, struct msgpack_packer *pk);
/* The same into a buffer (appended). */
int th_json_to_msgpack(const json_t *j, th_buf *out);

/* A new JSON value (caller json_decref()s) for a msgpack object or for
 * the first value in bytes; NULL with err set when it cannot be said in
 * JSON. */
json_t *th_json_from_object(const struct msgpack_object *o, th_error *err);
json_t *th_json_from_msgpack(const uint8_t *data, size_t len, th_error *err);
/* The same, never refusing text for its bytes: invalid UTF-8 in strings,
 * bin and map keys becomes U+FFFD (two keys may then coincide: the later
 * one wins).  For printing, never for arguments. */
json_t *th_json_from_object_lossy(const struct msgpack_object *o,
                                  th_error *err);
json_t *th_json_from_msgpack_lossy(const uint8_t *data, size_t len,
                                   th_error *err);

#endif
