/* mp_json.h - for the bundled plugins that speak JSON to the outside (mcp,
 * openapi): a msgpack value the host handed them (a config block, a call's
 * arguments) as a jansson tree.  Compiled into each of those plugins (not
 * a plugin of its own; the Makefile links plugins/shared/ into every
 * bundled plugin). */
#ifndef TH_PLUGIN_MP_JSON_H
#define TH_PLUGIN_MP_JSON_H

#include <jansson.h>
#include <msgpack.h>
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

#endif
