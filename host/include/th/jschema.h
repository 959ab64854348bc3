/* th/jschema.h - the JSON Schema subset tool schemas use, compiled once and
 * checked against msgpack values (arguments, structured output).
 *
 * The subset (JSON Schema 2020-12, proven on the official test suite):
 *   assertions   type (a name or a list), enum, const, minimum, maximum,
 *                exclusiveMinimum, exclusiveMaximum (numbers, draft 6 on),
 *                multipleOf, minLength, maxLength (code points), pattern
 *                (PCRE2, UTF, not anchored), minItems, maxItems,
 *                uniqueItems, minContains, maxContains, minProperties,
 *                maxProperties, required, dependentRequired;
 *   applicators  properties, patternProperties, additionalProperties,
 *                propertyNames, dependentSchemas, items (one schema, for
 *                the items after prefixItems), prefixItems, contains,
 *                allOf, anyOf, oneOf, not, if / then / else;
 *   references   $ref to a place in the same document: "#", a JSON pointer
 *                "#/$defs/name" (percent- and ~-escaped) or an "#anchor"
 *                named by $anchor; $defs holds the targets;
 *   annotations  title, description, default, examples, $schema,
 *                $comment, $id (at the top), $anchor, readOnly, writeOnly,
 *                deprecated, format (an annotation, as 2020-12 says by
 *                default), contentMediaType, contentEncoding,
 *                contentSchema.
 * Any other keyword is refused when the schema is compiled, naming it: a
 * host that silently ignored "unevaluatedProperties" would accept what the
 * author meant to refuse.  So are a $ref to another document and an $id
 * below the top of a document that uses $ref (they change what a
 * reference means).
 *
 * Numbers: an integer and a float compare by value (1 == 1.0), and a float
 * with no fraction is an "integer" (draft 6 and later).  Equality for enum
 * and const is JSON equality (objects unordered, false != 0).
 *
 * Threads: a compiled schema is immutable; th_jschema_check() may run on
 * any number of threads at once (PCRE2 match data is per call).
 */
#ifndef TH_JSCHEMA_H
#define TH_JSCHEMA_H

#include <jansson.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>

#include "th/err.h"

/* Type bits (th_jschema.types; 0 = any type). */
enum {
    TH_JS_NULL = 1 << 0,
    TH_JS_BOOLEAN = 1 << 1,
    TH_JS_INTEGER = 1 << 2,
    TH_JS_NUMBER = 1 << 3, /* includes integers */
    TH_JS_STRING = 1 << 4,
    TH_JS_ARRAY = 1 << 5,
    TH_JS_OBJECT = 1 << 6
};

typedef struct th_jschema th_jschema;

/* A compiled schema node.  Fields are public so the parameter table can
 * build a node from toolhost_param bounds (params.c); treat a compiled
 * schema as read-only. */
struct th_jschema {
    int boolean;       /* -1: an object schema; 0: false; 1: true */
    unsigned types;    /* TH_JS_* bits, 0 = any */
    json_t *enum_vals; /* an array, or NULL */
    json_t *const_val; /* or NULL (has_const tells a const null apart) */
    bool has_const;
    bool has_min, has_max, has_xmin, has_xmax;
    double min, max, xmin, xmax;
    long long min_len, max_len;     /* -1: none */
    long long min_items, max_items; /* -1: none */
    void *re;                       /* pcre2_code *, or NULL */
    char *pattern;                  /* its source, for messages */
    th_jschema *items;              /* or NULL */
    size_t n_props;
    char **prop_names;
    size_t *prop_lens;
    th_jschema **props;
    size_t n_req;
    char **req;
    th_jschema *additional; /* NULL: any other property is allowed */
    /* 2020-12 beyond the first subset (all optional, zero = absent) */
    bool has_multiple_of, unique_items;
    double multiple_of;
    long long min_props, max_props;       /* -1: none */
    long long min_contains, max_contains; /* -1: none */
    th_jschema *contains, *prop_names_s, *not_s, *if_s, *then_s, *else_s;
    size_t n_prefix, n_all, n_any, n_one, n_pat, n_dep;
    th_jschema **prefix, **all_of, **any_of, **one_of;
    void **pat_re;                /* pcre2_code * each */
    char **pat_src;
    th_jschema **pat_s;
    json_t *dep_required;         /* an object: name -> [names], or NULL */
    char **dep_names;             /* dependentSchemas: name -> schema */
    th_jschema **dep_s;
    const th_jschema *ref;        /* $ref's target, not owned */
    size_t n_owned;               /* the top node only: $ref targets */
    th_jschema **owned;
};

/* A node with no constraint (an "{}" schema).  NULL when out of memory. */
th_jschema *th_jschema_new(void);
void th_jschema_free(th_jschema *s);

/* Compiles schema text / a parsed schema.  Errors (TH_ELOAD), with `what`
 * in front ("tool 'x': output_schema"):
 *   WHAT is not valid JSON (...)
 *   WHAT uses the keyword 'K' at /path, outside the JSON Schema subset
 *     toolhost supports (type, enum, ...)
 *   WHAT: 'K' at /path must be ... (a keyword with a value of the wrong
 *     kind: "minimum" not a number, "required" not a list of strings)
 *   WHAT: pattern at /path does not compile: <PCRE2 message> at offset N */
int th_jschema_compile(const char *what, const char *text, th_jschema **out,
                       th_error *err);
int th_jschema_compile_json(const char *what, const json_t *schema,
                            th_jschema **out, th_error *err);

/* Compiles `pattern` into s->re (replacing none).  Errors as above. */
int th_jschema_set_pattern(th_jschema *s, const char *what,
                           const char *pattern, th_error *err);

/* Checks a value.  0 when it matches; otherwise 1 with msg set to
 * "at /a/0: must be ..." (the path part left out when the value itself
 * fails), at most cap bytes.  -1 when out of memory (msg says so). */
int th_jschema_check(const th_jschema *s, const msgpack_object *v, char *msg,
                     size_t cap);

/* Checks a parsed JSON value: as th_jschema_check after converting it;
 * 1 with msg set when it cannot be converted (an integer beyond 64 bits),
 * -1 out of memory. */
int th_jschema_check_json(const th_jschema *s, const json_t *v, char *msg,
                          size_t cap);

/* Checks JSON text (one value) against a schema: 0, 1 (msg says why, "is
 * not valid JSON: ..." included), -1 out of memory. */
int th_jschema_check_text(const th_jschema *s, const char *text, size_t len,
                          char *msg, size_t cap);

#endif
