/* th/kvargs.h - tool arguments from words a human types: `key=value`
 * and an optional JSON object, typed by the tool's parameter table.
 *
 * The one place this typing lives: the CLI (`toolhost call`, local and
 * --connect), the tests and the fuzz targets call it.  The result is
 * JSON; the caller converts it to msgpack once (th_json_to_msgpack)
 * before it enters the call path, where validation decides.
 */
#ifndef TH_KVARGS_H
#define TH_KVARGS_H

#include <jansson.h>

#include "th/err.h"

/* The toolhost_type of parameter `name` as the caller knows it (from the
 * tool's table), or 0 when unknown. */
typedef int (*th_kv_type_fn)(void *ud, const char *name);

/* Builds the argument object from `n_kv` words `key=value` and, when
 * `json_text` is not NULL, a JSON object the words add to or override.
 *
 * Typing: a value is converted to the type of its parameter when the text
 * is one (an integer parameter gets an integer for "42"; boolean takes
 * true/yes/1 and false/no/0; array and object parameters take JSON text);
 * text that does not convert stays a string so that validation reports
 * it in its own words.  `key=@path` reads a string value from a file;
 * `key=@@x` gives the string "@x".
 *
 * Returns a new object (the caller json_decref()s it), or NULL with `err`
 * set to one of:
 *   TH_EARGS  "--json: <reason> (at character N)"
 *   TH_EARGS  "--json: the arguments must be a JSON object"
 *   TH_EARGS  "'<word>' is not key=value"
 *   TH_EARGS  "parameter name too long in '<word>'"
 *   TH_EARGS  "'<key>': the parameter name is not UTF-8 text"
 *   TH_EARGS  "<key>=...: the value is not UTF-8 text"
 *   TH_EIO    "<key>=@<path>: cannot read the file: <strerror>"
 *   TH_EARGS  "<key>=@<path>: the file is not UTF-8 text"
 *   TH_ENOMEM "out of memory"
 */
json_t *th_kv_args(char *const *kv, int n_kv, const char *json_text,
                   th_kv_type_fn type_of, void *ud, th_error *err);

#endif
