/* th/json.h - JSON <-> msgpack at the edges (jansson and msgpack-c).
 *
 * Fronts that speak JSON (the CLI, MCP, exports) convert once at the edge:
 * arguments become msgpack before they enter the call path, and results,
 * meta and schemas become JSON only when a JSON front prints them.
 *
 * Mapping: null <-> nil, true/false <-> bool, integer <-> int (JSON
 * integers beyond int64 are refused), real <-> float64, string <-> str,
 * array <-> array, object <-> map.  msgpack -> JSON: bin becomes a string
 * when it is valid UTF-8 and is refused otherwise; map keys must be
 * strings; ext is refused.
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

#endif
