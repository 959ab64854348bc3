/* jschema.c - the JSON Schema subset of tool schemas (th/jschema.h):
 * compiled from JSON once (keywords outside the subset refused by name),
 * checked against msgpack values without converting them. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "th/jschema.h"

#include <math.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/buf.h"
#include "th/json.h"

#define SUBSET                                                                \
    "type, enum, const, minimum, maximum, exclusiveMinimum, "                 \
    "exclusiveMaximum, minLength, maxLength, pattern, items, minItems, "      \
    "maxItems, properties, required, additionalProperties"

#define MAX_DEPTH 32

static const char *const annotations[] = {
    "title",  "description", "default",  "examples",   "$schema",
    "$comment", "$id",       "readOnly", "writeOnly",  "deprecated",
    "format", NULL};

th_jschema *th_jschema_new(void)
{
    th_jschema *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->boolean = -1;
    s->min_len = s->max_len = s->min_items = s->max_items = -1;
    return s;
}

void th_jschema_free(th_jschema *s)
{
    if (!s)
        return;
    json_decref(s->enum_vals);
    json_decref(s->const_val);
    if (s->re)
        pcre2_code_free(s->re);
    free(s->pattern);
    th_jschema_free(s->items);
    for (size_t i = 0; i < s->n_props; i++) {
        free(s->prop_names[i]);
        th_jschema_free(s->props[i]);
    }
    free(s->prop_names);
    free(s->prop_lens);
    free(s->props);
    for (size_t i = 0; i < s->n_req; i++)
        free(s->req[i]);
    free(s->req);
    th_jschema_free(s->additional);
    free(s);
}

/* ---- compile ---------------------------------------------------------------- */

typedef struct cctx {
    const char *what;
    th_error *err;
} cctx;

static int bad(cctx *c, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bad(cctx *c, const char *path, const char *fmt, ...)
{
    char reason[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return th_error_set(c->err, TH_ELOAD, "%s: %s at %s", c->what, reason,
                        path[0] ? path : "the top");
}

static int type_bit(const char *name)
{
    static const struct {
        const char *n;
        int bit;
    } t[] = {{"null", TH_JS_NULL},     {"boolean", TH_JS_BOOLEAN},
             {"integer", TH_JS_INTEGER}, {"number", TH_JS_NUMBER},
             {"string", TH_JS_STRING}, {"array", TH_JS_ARRAY},
             {"object", TH_JS_OBJECT}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(t[i].n, name) == 0)
            return t[i].bit;
    return 0;
}

static int count_of(cctx *c, const char *path, const char *k, const json_t *v,
                    long long *out)
{
    double d;
    if (json_is_integer(v))
        d = (double)json_integer_value(v);
    else if (json_is_real(v))
        d = json_real_value(v);
    else
        return bad(c, path, "'%s' must be a non-negative integer", k);
    if (d < 0 || d != floor(d) || d > 1e15)
        return bad(c, path, "'%s' must be a non-negative integer", k);
    *out = (long long)d;
    return 0;
}

static int number_of(cctx *c, const char *path, const char *k,
                     const json_t *v, double *out)
{
    if (!json_is_number(v))
        return bad(c, path, "'%s' must be a number", k);
    *out = json_number_value(v);
    return 0;
}

int th_jschema_set_pattern(th_jschema *s, const char *what,
                           const char *pattern, th_error *err)
{
    int ecode;
    PCRE2_SIZE eoff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &ecode, &eoff, NULL);
    if (!re) {
        PCRE2_UCHAR buf[160];
        pcre2_get_error_message(ecode, buf, sizeof buf);
        return th_error_set(err, TH_ELOAD,
                            "%s: pattern '%.80s' does not compile: %s at "
                            "offset %zu",
                            what, pattern, (const char *)buf, (size_t)eoff);
    }
    char *src = strdup(pattern);
    if (!src) {
        pcre2_code_free(re);
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", what);
    }
    if (s->re)
        pcre2_code_free(s->re);
    free(s->pattern);
    s->re = re;
    s->pattern = src;
    return 0;
}

static int compile_node(cctx *c, const json_t *j, const char *path, int depth,
                        th_jschema **out);

static int compile_keyword(cctx *c, th_jschema *s, const char *k,
                           const json_t *v, const char *path, int depth)
{
    char sub[512];
    if (strcmp(k, "type") == 0) {
        if (json_is_string(v)) {
            int b = type_bit(json_string_value(v));
            if (!b)
                return bad(c, path, "'type' names an unknown type '%.40s'",
                           json_string_value(v));
            s->types |= (unsigned)b;
            return 0;
        }
        if (!json_is_array(v) || json_array_size(v) == 0)
            return bad(c, path, "'type' must be a type name or a list of them");
        size_t i;
        const json_t *t;
        json_array_foreach(v, i, t)
        {
            int b = json_is_string(t) ? type_bit(json_string_value(t)) : 0;
            if (!b)
                return bad(c, path, "'type' lists an unknown type");
            s->types |= (unsigned)b;
        }
        return 0;
    }
    if (strcmp(k, "enum") == 0) {
        if (!json_is_array(v))
            return bad(c, path, "'enum' must be a list");
        s->enum_vals = json_incref((json_t *)v);
        return 0;
    }
    if (strcmp(k, "const") == 0) {
        s->const_val = json_incref((json_t *)v);
        s->has_const = true;
        return 0;
    }
    if (strcmp(k, "minimum") == 0) {
        s->has_min = true;
        return number_of(c, path, k, v, &s->min);
    }
    if (strcmp(k, "maximum") == 0) {
        s->has_max = true;
        return number_of(c, path, k, v, &s->max);
    }
    if (strcmp(k, "exclusiveMinimum") == 0) {
        if (json_is_boolean(v))
            return bad(c, path,
                       "'exclusiveMinimum' must be a number (the boolean "
                       "form of draft 4 is not supported)");
        s->has_xmin = true;
        return number_of(c, path, k, v, &s->xmin);
    }
    if (strcmp(k, "exclusiveMaximum") == 0) {
        if (json_is_boolean(v))
            return bad(c, path,
                       "'exclusiveMaximum' must be a number (the boolean "
                       "form of draft 4 is not supported)");
        s->has_xmax = true;
        return number_of(c, path, k, v, &s->xmax);
    }
    if (strcmp(k, "minLength") == 0)
        return count_of(c, path, k, v, &s->min_len);
    if (strcmp(k, "maxLength") == 0)
        return count_of(c, path, k, v, &s->max_len);
    if (strcmp(k, "minItems") == 0)
        return count_of(c, path, k, v, &s->min_items);
    if (strcmp(k, "maxItems") == 0)
        return count_of(c, path, k, v, &s->max_items);
    if (strcmp(k, "pattern") == 0) {
        if (!json_is_string(v))
            return bad(c, path, "'pattern' must be a string");
        char what[600];
        snprintf(what, sizeof what, "%s (at %s)", c->what,
                 path[0] ? path : "the top");
        return th_jschema_set_pattern(s, what, json_string_value(v), c->err);
    }
    if (strcmp(k, "items") == 0) {
        if (json_is_array(v))
            return bad(c, path,
                       "uses 'items' as a list (tuples), outside the JSON "
                       "Schema subset toolhost supports (" SUBSET ")");
        snprintf(sub, sizeof sub, "%s/items", path);
        return compile_node(c, v, sub, depth + 1, &s->items);
    }
    if (strcmp(k, "additionalProperties") == 0) {
        snprintf(sub, sizeof sub, "%s/additionalProperties", path);
        return compile_node(c, v, sub, depth + 1, &s->additional);
    }
    if (strcmp(k, "required") == 0) {
        if (!json_is_array(v))
            return bad(c, path, "'required' must be a list of strings");
        size_t n = json_array_size(v);
        if (n && !(s->req = calloc(n, sizeof *s->req)))
            return th_error_set(c->err, TH_ENOMEM, "%s: out of memory",
                                c->what);
        for (size_t i = 0; i < n; i++) {
            const json_t *e = json_array_get(v, i);
            if (!json_is_string(e))
                return bad(c, path, "'required' must be a list of strings");
            if (!(s->req[i] = strdup(json_string_value(e))))
                return th_error_set(c->err, TH_ENOMEM, "%s: out of memory",
                                    c->what);
            s->n_req = i + 1;
        }
        return 0;
    }
    if (strcmp(k, "properties") == 0) {
        if (!json_is_object(v))
            return bad(c, path, "'properties' must be an object");
        size_t n = json_object_size(v);
        if (n && (!(s->prop_names = calloc(n, sizeof *s->prop_names)) ||
                  !(s->prop_lens = calloc(n, sizeof *s->prop_lens)) ||
                  !(s->props = calloc(n, sizeof *s->props))))
            return th_error_set(c->err, TH_ENOMEM, "%s: out of memory",
                                c->what);
        const char *pk;
        size_t pklen;
        json_t *pv;
        void *tmp;
        json_object_keylen_foreach_safe((json_t *)v, tmp, pk, pklen, pv)
        {
            size_t i = s->n_props;
            if (!(s->prop_names[i] = malloc(pklen + 1)))
                return th_error_set(c->err, TH_ENOMEM, "%s: out of memory",
                                    c->what);
            memcpy(s->prop_names[i], pk, pklen);
            s->prop_names[i][pklen] = '\0';
            s->prop_lens[i] = pklen;
            s->n_props = i + 1;
            snprintf(sub, sizeof sub, "%s/properties/%.100s", path, pk);
            int rc = compile_node(c, pv, sub, depth + 1, &s->props[i]);
            if (rc)
                return rc;
        }
        return 0;
    }
    for (size_t i = 0; annotations[i]; i++)
        if (strcmp(k, annotations[i]) == 0)
            return 0;
    return bad(c, path,
               "uses the keyword '%.60s', outside the JSON Schema subset "
               "toolhost supports (" SUBSET ")",
               k);
}

static int compile_node(cctx *c, const json_t *j, const char *path, int depth,
                        th_jschema **out)
{
    *out = NULL;
    if (depth > MAX_DEPTH)
        return bad(c, path, "schema nested deeper than %d levels", MAX_DEPTH);
    th_jschema *s = th_jschema_new();
    if (!s)
        return th_error_set(c->err, TH_ENOMEM, "%s: out of memory", c->what);
    *out = s;
    if (json_is_boolean(j)) {
        s->boolean = json_is_true(j);
        return 0;
    }
    if (!json_is_object(j))
        return bad(c, path, "a schema must be an object or a boolean");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)j, k, v)
    {
        int rc = compile_keyword(c, s, k, v, path, depth);
        if (rc)
            return rc;
    }
    return 0;
}

int th_jschema_compile_json(const char *what, const json_t *schema,
                            th_jschema **out, th_error *err)
{
    cctx c = {what, err};
    int rc = compile_node(&c, schema, "", 0, out);
    if (rc) {
        th_jschema_free(*out);
        *out = NULL;
    }
    return rc;
}

int th_jschema_compile(const char *what, const char *text, th_jschema **out,
                       th_error *err)
{
    *out = NULL;
    json_error_t jerr;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &jerr);
    if (!j)
        return th_error_set(err, TH_ELOAD,
                            "%s is not valid JSON (%s, line %d column %d)",
                            what, jerr.text, jerr.line, jerr.column);
    int rc = th_jschema_compile_json(what, j, out, err);
    json_decref(j);
    return rc;
}

/* ---- check ---------------------------------------------------------------------- */

typedef struct vctx {
    char *msg;
    size_t cap;
    char path[256];
    size_t plen;
} vctx;

static int fail(vctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int fail(vctx *c, const char *fmt, ...)
{
    if (!c->msg || !c->cap)
        return 1;
    int n = 0;
    if (c->plen)
        n = snprintf(c->msg, c->cap, "at %s: ", c->path);
    if (n < 0 || (size_t)n >= c->cap)
        return 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg + n, c->cap - (size_t)n, fmt, ap);
    va_end(ap);
    return 1;
}

/* Appends "/seg" to the path; returns the old length to restore. */
static size_t path_push(vctx *c, const char *seg, size_t len)
{
    size_t old = c->plen;
    if (c->plen + 2 + (len > 40 ? 40 : len) < sizeof c->path) {
        c->path[c->plen++] = '/';
        for (size_t i = 0; i < len && i < 40; i++) {
            unsigned char ch = (unsigned char)seg[i];
            c->path[c->plen++] = ch < 0x20 ? '?' : (char)ch;
        }
        c->path[c->plen] = '\0';
    }
    return old;
}

static void path_pop(vctx *c, size_t old)
{
    c->plen = old;
    c->path[old] = '\0';
}

static bool is_num(const msgpack_object *v)
{
    return v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
           v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ||
           v->type == MSGPACK_OBJECT_FLOAT32 ||
           v->type == MSGPACK_OBJECT_FLOAT64;
}

static double num_of(const msgpack_object *v)
{
    switch (v->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return (double)v->via.u64;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return (double)v->via.i64;
    default:
        return v->via.f64;
    }
}

static bool is_integral(const msgpack_object *v)
{
    if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
        v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return true;
    if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64)
        return isfinite(v->via.f64) && v->via.f64 == floor(v->via.f64);
    return false;
}

static unsigned type_of(const msgpack_object *v)
{
    switch (v->type) {
    case MSGPACK_OBJECT_NIL:
        return TH_JS_NULL;
    case MSGPACK_OBJECT_BOOLEAN:
        return TH_JS_BOOLEAN;
    case MSGPACK_OBJECT_STR:
    case MSGPACK_OBJECT_BIN:
        return TH_JS_STRING;
    case MSGPACK_OBJECT_ARRAY:
        return TH_JS_ARRAY;
    case MSGPACK_OBJECT_MAP:
        return TH_JS_OBJECT;
    default:
        if (is_num(v))
            return is_integral(v) ? (TH_JS_INTEGER | TH_JS_NUMBER)
                                  : TH_JS_NUMBER;
        return 0;
    }
}

static const char *type_word(unsigned bits)
{
    if (bits & TH_JS_INTEGER)
        return "an integer";
    if (bits & TH_JS_NUMBER)
        return "a number";
    if (bits & TH_JS_NULL)
        return "null";
    if (bits & TH_JS_BOOLEAN)
        return "a boolean";
    if (bits & TH_JS_STRING)
        return "a string";
    if (bits & TH_JS_ARRAY)
        return "an array";
    if (bits & TH_JS_OBJECT)
        return "an object";
    return "a value of another kind";
}

static void str_of(const msgpack_object *v, const char **p, size_t *n)
{
    if (v->type == MSGPACK_OBJECT_BIN) {
        *p = v->via.bin.ptr;
        *n = v->via.bin.size;
    } else {
        *p = v->via.str.ptr;
        *n = v->via.str.size;
    }
}

/* JSON equality of a msgpack value and a JSON value. */
static bool equal(const msgpack_object *v, const json_t *j)
{
    if (is_num(v)) {
        if (!json_is_number(j))
            return false;
        if (json_is_integer(j)) {
            json_int_t ji = json_integer_value(j);
            if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                return ji >= 0 && (uint64_t)ji == v->via.u64;
            if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
                return ji == v->via.i64;
        }
        return num_of(v) == json_number_value(j);
    }
    switch (v->type) {
    case MSGPACK_OBJECT_NIL:
        return json_is_null(j);
    case MSGPACK_OBJECT_BOOLEAN:
        return json_is_boolean(j) && (v->via.boolean ? json_is_true(j)
                                                     : json_is_false(j));
    case MSGPACK_OBJECT_STR:
    case MSGPACK_OBJECT_BIN: {
        if (!json_is_string(j))
            return false;
        const char *p;
        size_t n;
        str_of(v, &p, &n);
        return json_string_length(j) == n &&
               memcmp(json_string_value(j), p, n) == 0;
    }
    case MSGPACK_OBJECT_ARRAY:
        if (!json_is_array(j) || json_array_size(j) != v->via.array.size)
            return false;
        for (uint32_t i = 0; i < v->via.array.size; i++)
            if (!equal(&v->via.array.ptr[i], json_array_get(j, i)))
                return false;
        return true;
    case MSGPACK_OBJECT_MAP:
        if (!json_is_object(j) || json_object_size(j) != v->via.map.size)
            return false;
        for (uint32_t i = 0; i < v->via.map.size; i++) {
            const msgpack_object_kv *kv = &v->via.map.ptr[i];
            if (kv->key.type != MSGPACK_OBJECT_STR)
                return false;
            const json_t *jv = json_object_getn(j, kv->key.via.str.ptr,
                                                kv->key.via.str.size);
            if (!jv || !equal(&kv->val, jv))
                return false;
        }
        return true;
    default:
        return false;
    }
}

static size_t code_points(const char *p, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)p[i] & 0xc0) != 0x80)
            c++;
    return c;
}

static int check(vctx *c, const th_jschema *s, const msgpack_object *v);

static int check_object(vctx *c, const th_jschema *s, const msgpack_object *v)
{
    for (size_t r = 0; r < s->n_req; r++) {
        size_t rl = strlen(s->req[r]);
        bool found = false;
        for (uint32_t i = 0; i < v->via.map.size && !found; i++) {
            const msgpack_object *k = &v->via.map.ptr[i].key;
            found = k->type == MSGPACK_OBJECT_STR && k->via.str.size == rl &&
                    memcmp(k->via.str.ptr, s->req[r], rl) == 0;
        }
        if (!found)
            return fail(c, "is missing the required property '%.60s'",
                        s->req[r]);
    }
    for (uint32_t i = 0; i < v->via.map.size; i++) {
        const msgpack_object_kv *kv = &v->via.map.ptr[i];
        const char *kp = "";
        size_t kn = 0;
        if (kv->key.type == MSGPACK_OBJECT_STR)
            str_of(&kv->key, &kp, &kn);
        const th_jschema *sub = NULL;
        bool named = false;
        for (size_t p = 0; p < s->n_props && kv->key.type == MSGPACK_OBJECT_STR;
             p++) {
            if (s->prop_lens[p] == kn && memcmp(s->prop_names[p], kp, kn) == 0) {
                sub = s->props[p];
                named = true;
                break;
            }
        }
        if (!named)
            sub = s->additional;
        if (!sub)
            continue;
        size_t old = path_push(c, kp, kn);
        if (!named && sub->boolean == 0) {
            path_pop(c, old);
            return fail(c, "has the property '%.*s', which is not allowed",
                        (int)(kn > 60 ? 60 : kn), kp);
        }
        int rc = check(c, sub, &kv->val);
        path_pop(c, old);
        if (rc)
            return rc;
    }
    return 0;
}

static int check(vctx *c, const th_jschema *s, const msgpack_object *v)
{
    if (s->boolean == 1)
        return 0;
    if (s->boolean == 0)
        return fail(c, "is not allowed here (the schema is false)");
    unsigned t = type_of(v);
    if (s->types && !(s->types & t)) {
        unsigned want = s->types;
        return fail(c, "must be %s%s, got %s", type_word(want),
                    (want & (want - 1)) ? " (or another listed type)" : "",
                    type_word(t & TH_JS_INTEGER ? TH_JS_INTEGER : t));
    }
    if (s->enum_vals) {
        bool ok = false;
        size_t i;
        const json_t *e;
        json_array_foreach(s->enum_vals, i, e) if (!ok && equal(v, e)) ok =
            true;
        if (!ok)
            return fail(c, "must be one of the enum values");
    }
    if (s->has_const && !equal(v, s->const_val))
        return fail(c, "must be the constant value of the schema");
    if (is_num(v)) {
        double d = num_of(v);
        if (s->has_min && d < s->min)
            return fail(c, "must be >= %.17g, got %.17g", s->min, d);
        if (s->has_max && d > s->max)
            return fail(c, "must be <= %.17g, got %.17g", s->max, d);
        if (s->has_xmin && d <= s->xmin)
            return fail(c, "must be > %.17g, got %.17g", s->xmin, d);
        if (s->has_xmax && d >= s->xmax)
            return fail(c, "must be < %.17g, got %.17g", s->xmax, d);
    } else if (t == TH_JS_STRING) {
        const char *p;
        size_t n;
        str_of(v, &p, &n);
        if (s->min_len >= 0 || s->max_len >= 0) {
            size_t cp = code_points(p, n);
            if (s->min_len >= 0 && cp < (size_t)s->min_len)
                return fail(c, "must be at least %lld characters long, is %zu",
                            s->min_len, cp);
            if (s->max_len >= 0 && cp > (size_t)s->max_len)
                return fail(c, "must be at most %lld characters long, is %zu",
                            s->max_len, cp);
        }
        if (s->re) {
            pcre2_match_data *md =
                pcre2_match_data_create_from_pattern(s->re, NULL);
            if (!md) {
                fail(c, "out of memory");
                return -1;
            }
            int rc = pcre2_match(s->re, (PCRE2_SPTR)p, n, 0, 0, md, NULL);
            pcre2_match_data_free(md);
            if (rc == PCRE2_ERROR_NOMATCH)
                return fail(c, "must match the pattern '%.80s'", s->pattern);
            if (rc < 0)
                return fail(c, "cannot be matched against the pattern "
                               "'%.80s' (not valid UTF-8?)",
                            s->pattern);
        }
    } else if (t == TH_JS_ARRAY) {
        uint32_t n = v->via.array.size;
        if (s->min_items >= 0 && n < (unsigned long long)s->min_items)
            return fail(c, "must have at least %lld items, has %u",
                        s->min_items, n);
        if (s->max_items >= 0 && n > (unsigned long long)s->max_items)
            return fail(c, "must have at most %lld items, has %u",
                        s->max_items, n);
        if (s->items) {
            for (uint32_t i = 0; i < n; i++) {
                char idx[16];
                int il = snprintf(idx, sizeof idx, "%u", i);
                size_t old = path_push(c, idx, (size_t)il);
                int rc = check(c, s->items, &v->via.array.ptr[i]);
                path_pop(c, old);
                if (rc)
                    return rc;
            }
        }
    } else if (t == TH_JS_OBJECT) {
        return check_object(c, s, v);
    }
    return 0;
}

int th_jschema_check(const th_jschema *s, const msgpack_object *v, char *msg,
                     size_t cap)
{
    vctx c = {msg, cap, "", 0};
    if (msg && cap)
        msg[0] = '\0';
    return check(&c, s, v);
}

int th_jschema_check_text(const th_jschema *s, const char *text, size_t len,
                          char *msg, size_t cap)
{
    json_error_t jerr;
    json_t *j = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!j) {
        snprintf(msg, cap, "is not valid JSON (%s, line %d column %d)",
                 jerr.text, jerr.line, jerr.column);
        return 1;
    }
    th_buf b = TH_BUF_INIT;
    int rc = -1;
    msgpack_zone zone;
    if (th_json_to_msgpack(j, &b) != 0) {
        snprintf(msg, cap, "cannot be converted (out of memory, or an "
                           "integer beyond 64 bits)");
        rc = 1;
    } else if (!msgpack_zone_init(&zone, 2048)) {
        snprintf(msg, cap, "out of memory");
    } else {
        msgpack_object o;
        size_t off = 0;
        if (msgpack_unpack((const char *)b.data, b.len, &off, &zone, &o) ==
            MSGPACK_UNPACK_SUCCESS)
            rc = th_jschema_check(s, &o, msg, cap);
        else
            snprintf(msg, cap, "out of memory");
        msgpack_zone_destroy(&zone);
    }
    th_buf_destroy(&b);
    json_decref(j);
    return rc;
}
