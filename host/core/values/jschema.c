/* jschema.c - the JSON Schema subset of tool schemas (th/jschema.h):
 * compiled from JSON once (keywords outside the subset refused by name),
 * checked against msgpack values without converting them.
 *
 * $ref: a reference's target is compiled once, into a node the top node
 * owns (th_jschema.owned), and looked up by its place in the document, so
 * a recursive schema is a graph with cycles through `ref` only; every
 * other child pointer is a tree edge its parent frees. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "th/jschema.h"

#include <math.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/buf.h"
#include "th/json.h"

#define SUBSET "JSON Schema 2020-12 less $dynamicRef, unevaluated*, remote $ref"

#define MAX_DEPTH 32
/* Checking follows $ref without consuming the value; a chain this long is
 * a loop (or a schema no tool needs). */
#define MAX_CHECK_DEPTH 256
/* Schema nodes visited by one check: subschemas shared through $ref under
 * anyOf/oneOf can make the count grow exponentially with the schema's
 * size; a check that would take longer ends as an error instead. */
#define MAX_CHECK_STEPS 2000000ul
/* A pattern's match against a caller's string: PCRE2's backtracking
 * budget (the default is 10 million). */
#define MATCH_LIMIT 1000000u
#define MATCH_DEPTH_LIMIT 10000u

static const char *const annotations[] = {
    "title",    "description", "default",          "examples",
    "$comment", "readOnly",         "writeOnly",
    "deprecated", "format",    "contentMediaType", "contentEncoding",
    "contentSchema", "$anchor", "$defs",           "$dynamicAnchor",
    NULL};

th_jschema *th_jschema_new(void)
{
    th_jschema *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->boolean = -1;
    s->min_len = s->max_len = s->min_items = s->max_items = -1;
    s->min_props = s->max_props = s->min_contains = s->max_contains = -1;
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
    th_jschema *single[] = {s->contains, s->prop_names_s, s->not_s,
                            s->if_s,     s->then_s,       s->else_s};
    for (size_t i = 0; i < sizeof single / sizeof single[0]; i++)
        th_jschema_free(single[i]);
    struct {
        th_jschema **v;
        size_t n;
    } lists[] = {{s->prefix, s->n_prefix}, {s->all_of, s->n_all},
                 {s->any_of, s->n_any},    {s->one_of, s->n_one},
                 {s->pat_s, s->n_pat},     {s->dep_s, s->n_dep},
                 {s->owned, s->n_owned}};
    for (size_t l = 0; l < sizeof lists / sizeof lists[0]; l++) {
        for (size_t i = 0; lists[l].v && i < lists[l].n; i++)
            th_jschema_free(lists[l].v[i]);
        free(lists[l].v);
    }
    for (size_t i = 0; s->pat_re && i < s->n_pat; i++)
        if (s->pat_re[i])
            pcre2_code_free(s->pat_re[i]);
    for (size_t i = 0; s->pat_src && i < s->n_pat; i++)
        free(s->pat_src[i]);
    free(s->pat_re);
    free(s->pat_src);
    for (size_t i = 0; s->dep_names && i < s->n_dep; i++)
        free(s->dep_names[i]);
    free(s->dep_names);
    json_decref(s->dep_required);
    free(s);
}

/* ---- compile ---------------------------------------------------------------- */

typedef struct cctx {
    const char *what;
    th_error *err;
    const json_t *root;     /* the document, for $ref */
    th_jschema *top;        /* its node: owns the $ref targets */
    bool has_ref;           /* the document uses $ref somewhere */
    size_t n_seen, cap_seen;
    const json_t **seen_j;  /* a place in the document ... */
    th_jschema **seen_s;    /* ... and the node compiled from it */
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

static int compile_re(const char *what, const char *pattern, void **out,
                      th_error *err)
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
    *out = re;
    return 0;
}

int th_jschema_set_pattern(th_jschema *s, const char *what,
                           const char *pattern, th_error *err)
{
    void *re;
    int rc = compile_re(what, pattern, &re, err);
    if (rc)
        return rc;
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
static int compile_ref(cctx *c, th_jschema *s, const json_t *v,
                       const char *path);

static int oom(cctx *c)
{
    return th_error_set(c->err, TH_ENOMEM, "%s: out of memory", c->what);
}

/* A keyword whose value is a non-empty list of schemas. */
static int compile_list(cctx *c, const char *k, const json_t *v,
                        const char *path, int depth, th_jschema ***out,
                        size_t *n)
{
    if (!json_is_array(v) || json_array_size(v) == 0)
        return bad(c, path, "'%s' must be a non-empty list of schemas", k);
    if (!(*out = calloc(json_array_size(v), sizeof **out)))
        return oom(c);
    size_t i;
    const json_t *e;
    json_array_foreach(v, i, e)
    {
        char sub[512];
        snprintf(sub, sizeof sub, "%s/%s/%zu", path, k, i);
        int rc = compile_node(c, e, sub, depth + 1, &(*out)[i]);
        *n = i + 1;
        if (rc)
            return rc;
    }
    return 0;
}

/* A keyword whose value is an object of name -> schema: the names into
 * names[] (when names is not NULL), the schemas into out[]. */
static int compile_map(cctx *c, const char *k, const json_t *v,
                       const char *path, int depth, char ***names,
                       th_jschema ***out, size_t *n)
{
    if (!json_is_object(v))
        return bad(c, path, "'%s' must be an object of schemas", k);
    size_t cap = json_object_size(v);
    if (cap && ((names && !(*names = calloc(cap, sizeof **names))) ||
                !(*out = calloc(cap, sizeof **out))))
        return oom(c);
    const char *name;
    json_t *e;
    json_object_foreach((json_t *)v, name, e)
    {
        char sub[512];
        snprintf(sub, sizeof sub, "%s/%s/%.100s", path, k, name);
        if (names && !((*names)[*n] = strdup(name)))
            return oom(c);
        int rc = compile_node(c, e, sub, depth + 1, &(*out)[*n]);
        (*n)++;
        if (rc)
            return rc;
    }
    return 0;
}

/* The keywords of 2020-12 beyond the first subset; 1: not one of them. */
static int compile_more(cctx *c, th_jschema *s, const char *k,
                        const json_t *v, const char *path, int depth)
{
    char sub[512];
    struct {
        const char *k;
        th_jschema **slot;
    } single[] = {{"contains", &s->contains}, {"propertyNames", &s->prop_names_s},
                  {"not", &s->not_s},         {"if", &s->if_s},
                  {"then", &s->then_s},       {"else", &s->else_s}};
    for (size_t i = 0; i < sizeof single / sizeof single[0]; i++)
        if (strcmp(k, single[i].k) == 0) {
            snprintf(sub, sizeof sub, "%s/%s", path, k);
            return compile_node(c, v, sub, depth + 1, single[i].slot);
        }
    struct {
        const char *k;
        th_jschema ***v;
        size_t *n;
    } lists[] = {{"prefixItems", &s->prefix, &s->n_prefix},
                 {"allOf", &s->all_of, &s->n_all},
                 {"anyOf", &s->any_of, &s->n_any},
                 {"oneOf", &s->one_of, &s->n_one}};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        if (strcmp(k, lists[i].k) == 0)
            return compile_list(c, k, v, path, depth, lists[i].v, lists[i].n);
    struct {
        const char *k;
        long long *slot;
    } counts[] = {{"minContains", &s->min_contains},
                  {"maxContains", &s->max_contains},
                  {"minProperties", &s->min_props},
                  {"maxProperties", &s->max_props}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (strcmp(k, counts[i].k) == 0)
            return count_of(c, path, k, v, counts[i].slot);
    if (strcmp(k, "multipleOf") == 0) {
        if (!json_is_number(v) || json_number_value(v) <= 0)
            return bad(c, path, "'multipleOf' must be a number above 0");
        s->has_multiple_of = true;
        s->multiple_of = json_number_value(v);
        return 0;
    }
    if (strcmp(k, "uniqueItems") == 0) {
        if (!json_is_boolean(v))
            return bad(c, path, "'uniqueItems' must be true or false");
        s->unique_items = json_is_true(v);
        return 0;
    }
    if (strcmp(k, "dependentSchemas") == 0)
        return compile_map(c, k, v, path, depth, &s->dep_names, &s->dep_s,
                           &s->n_dep);
    if (strcmp(k, "patternProperties") == 0) {
        size_t cap = json_is_object(v) ? json_object_size(v) : 0;
        if (cap && !(s->pat_re = calloc(cap, sizeof *s->pat_re)))
            return oom(c); /* pat_src and pat_s: compile_map's */
        int rc = compile_map(c, k, v, path, depth, &s->pat_src, &s->pat_s,
                             &s->n_pat);
        for (size_t i = 0; !rc && i < s->n_pat; i++) {
            char what[600];
            snprintf(what, sizeof what, "%s (at %s/patternProperties)",
                     c->what, path[0] ? path : "");
            rc = compile_re(what, s->pat_src[i], &s->pat_re[i], c->err);
        }
        return rc;
    }
    if (strcmp(k, "dependentRequired") == 0) {
        const char *name;
        json_t *e;
        if (!json_is_object(v))
            return bad(c, path, "'dependentRequired' must be an object of "
                                "lists of names");
        json_object_foreach((json_t *)v, name, e)
        {
            size_t i;
            const json_t *x;
            if (!json_is_array(e))
                return bad(c, path, "'dependentRequired' must be an object "
                                    "of lists of names");
            json_array_foreach(e, i, x) if (!json_is_string(x)) return bad(
                c, path, "'dependentRequired' must be an object of lists of "
                         "names");
        }
        s->dep_required = json_incref((json_t *)v);
        return 0;
    }
    if (strcmp(k, "$ref") == 0)
        return compile_ref(c, s, v, path);
    if (strcmp(k, "$schema") == 0) {
        /* a standard dialect; a custom metaschema may switch vocabularies
         * off, which this validator would not know */
        const char *u = json_string_value(v);
        if (!u)
            return bad(c, path, "'$schema' must be a URI");
        if (strncmp(u, "https://json-schema.org/draft/", 30) != 0 &&
            strncmp(u, "http://json-schema.org/draft-", 29) != 0)
            return bad(c, path,
                       "names the metaschema '%.80s' in '$schema', outside "
                       "the JSON Schema subset toolhost supports (" SUBSET
                       "; a standard dialect only)",
                       u);
        return 0;
    }
    if (strcmp(k, "$id") == 0) {
        if (path[0] && c->has_ref)
            return bad(c, path,
                       "uses '$id' below the top of a schema that uses "
                       "'$ref', outside the JSON Schema subset toolhost "
                       "supports (" SUBSET ")");
        return 0;
    }
    return 1;
}

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
                       "uses 'items' as a list (tuples: prefixItems in "
                       "2020-12), outside the JSON Schema subset toolhost "
                       "supports (" SUBSET ")");
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
    int more = compile_more(c, s, k, v, path, depth);
    if (more != 1)
        return more;
    for (size_t i = 0; annotations[i]; i++)
        if (strcmp(k, annotations[i]) == 0)
            return 0;
    return bad(c, path,
               "uses the keyword '%.60s', outside the JSON Schema subset "
               "toolhost supports (" SUBSET ")",
               k);
}

/* Compiles j into the node s (made by the caller). */
static int compile_into(cctx *c, const json_t *j, const char *path,
                        int depth, th_jschema *s)
{
    if (depth > MAX_DEPTH)
        return bad(c, path, "schema nested deeper than %d levels", MAX_DEPTH);
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

static int compile_node(cctx *c, const json_t *j, const char *path, int depth,
                        th_jschema **out)
{
    *out = th_jschema_new();
    if (!*out)
        return oom(c);
    return compile_into(c, j, path, depth, *out);
}

static int remember(cctx *c, const json_t *j, th_jschema *s)
{
    if (c->n_seen == c->cap_seen) {
        size_t cap = c->cap_seen ? 2 * c->cap_seen : 8;
        const json_t **nj = realloc(c->seen_j, cap * sizeof *nj);
        if (nj)
            c->seen_j = nj;
        th_jschema **ns = nj ? realloc(c->seen_s, cap * sizeof *ns) : NULL;
        if (!ns)
            return oom(c);
        c->seen_s = ns;
        c->cap_seen = cap;
    }
    c->seen_j[c->n_seen] = j;
    c->seen_s[c->n_seen++] = s;
    return 0;
}

/* The schema in the document named by an anchor (a $anchor), searched in
 * the places a schema can be (not inside enum, const and the like). */
static const json_t *find_anchor(const json_t *j, const char *name, int depth)
{
    if (depth > MAX_DEPTH * 2)
        return NULL;
    if (json_is_array(j)) {
        size_t i;
        const json_t *e;
        json_array_foreach(j, i, e)
        {
            const json_t *f = find_anchor(e, name, depth + 1);
            if (f)
                return f;
        }
        return NULL;
    }
    if (!json_is_object(j))
        return NULL;
    /* with no $dynamicRef (refused), a $dynamicAnchor is a plain anchor */
    const json_t *a = json_object_get(j, "$anchor");
    const json_t *da = json_object_get(j, "$dynamicAnchor");
    if ((json_is_string(a) && strcmp(json_string_value(a), name) == 0) ||
        (json_is_string(da) && strcmp(json_string_value(da), name) == 0))
        return j;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)j, k, v)
    {
        if (!strcmp(k, "enum") || !strcmp(k, "const") ||
            !strcmp(k, "default") || !strcmp(k, "examples"))
            continue;
        const json_t *f = find_anchor(v, name, depth + 1);
        if (f)
            return f;
    }
    return NULL;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* The place a fragment ("" , "/a/b~1c", "name") names in the document. */
static const json_t *resolve(const json_t *root, const char *frag)
{
    if (!*frag)
        return root;
    if (*frag != '/')
        return find_anchor(root, frag, 0);
    const json_t *cur = root;
    const char *p = frag;
    while (cur && *p == '/') {
        char tok[256];
        size_t n = 0;
        p++;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '%' && hexval(p[0]) >= 0 && hexval(p[1]) >= 0) {
                ch = (char)(hexval(p[0]) * 16 + hexval(p[1]));
                p += 2;
            }
            if (n + 1 >= sizeof tok)
                return NULL;
            tok[n++] = ch;
        }
        /* ~1 is '/', ~0 is '~' (after the percent escapes) */
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (tok[i] == '~' && i + 1 < n && (tok[i + 1] == '0' || tok[i + 1] == '1')) {
                tok[m++] = tok[i + 1] == '0' ? '~' : '/';
                i++;
            } else {
                tok[m++] = tok[i];
            }
        }
        tok[m] = '\0';
        if (json_is_object(cur)) {
            cur = json_object_getn(cur, tok, m);
        } else if (json_is_array(cur)) {
            char *end;
            unsigned long idx = strtoul(tok, &end, 10);
            cur = (m && *end == '\0' && (tok[0] != '0' || m == 1))
                      ? json_array_get(cur, idx)
                      : NULL;
        } else {
            cur = NULL;
        }
    }
    return cur;
}

static int compile_ref(cctx *c, th_jschema *s, const json_t *v,
                       const char *path)
{
    if (!json_is_string(v))
        return bad(c, path, "'$ref' must be a string");
    const char *ref = json_string_value(v);
    const json_t *id = json_is_object(c->root)
                           ? json_object_get(c->root, "$id")
                           : NULL;
    size_t idl = json_is_string(id) ? strlen(json_string_value(id)) : 0;
    if (idl && strncmp(ref, json_string_value(id), idl) == 0 &&
        (ref[idl] == '#' || ref[idl] == '\0'))
        ref += idl; /* the document's own $id */
    if (*ref && *ref != '#')
        return bad(c, path,
                   "uses a '$ref' to another document ('%.80s'), outside "
                   "the JSON Schema subset toolhost supports (" SUBSET ")",
                   ref);
    const json_t *target = resolve(c->root, *ref ? ref + 1 : ref);
    if (!target)
        return bad(c, path, "'$ref' '%.80s' names no place in the schema",
                   json_string_value(v));
    for (size_t i = 0; i < c->n_seen; i++)
        if (c->seen_j[i] == target) {
            s->ref = c->seen_s[i];
            return 0;
        }
    /* compiled once, owned by the top node, known before it is compiled
     * so that a reference back into it ends the recursion */
    th_jschema **no = realloc(c->top->owned,
                              (c->top->n_owned + 1) * sizeof *no);
    if (!no)
        return oom(c);
    c->top->owned = no;
    th_jschema *t = th_jschema_new();
    if (!t)
        return oom(c);
    no[c->top->n_owned++] = t;
    int rc = remember(c, target, t);
    if (rc)
        return rc;
    s->ref = t;
    char where[300];
    snprintf(where, sizeof where, "%.200s (the target of $ref)",
             json_string_value(v));
    return compile_into(c, target, where, 0, t);
}

/* Whether the document uses $ref anywhere (an $id below the top changes
 * what a reference means, so it is refused then). */
static bool uses_ref(const json_t *j, int depth)
{
    if (depth > MAX_DEPTH * 2)
        return false;
    const char *k;
    json_t *v;
    size_t i;
    if (json_is_object(j)) {
        json_object_foreach((json_t *)j, k, v) if (!strcmp(k, "$ref") ||
                                                    uses_ref(v, depth + 1))
            return true;
    } else if (json_is_array(j)) {
        json_array_foreach(j, i, v) if (uses_ref(v, depth + 1)) return true;
    }
    return false;
}

int th_jschema_compile_json(const char *what, const json_t *schema,
                            th_jschema **out, th_error *err)
{
    cctx c = {.what = what, .err = err, .root = schema};
    c.has_ref = uses_ref(schema, 0);
    int rc;
    if (!(*out = c.top = th_jschema_new()))
        rc = oom(&c);
    else if (!(rc = remember(&c, schema, c.top)))
        rc = compile_into(&c, schema, "", 0, c.top);
    free(c.seen_j);
    free(c.seen_s);
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
    char *msg; /* NULL: a quiet check (inside anyOf, not, if ...) */
    size_t cap;
    char path[256];
    size_t plen;
    int depth; /* check() calls deep, $ref included */
    unsigned long *steps; /* check() calls so far, quiet ones included */
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

/* check()'s answer when a bound above ends it: not "does not match" (an
 * anyOf or not around it must not turn it into a match), an error the
 * check as a whole reports. */
#define TOO_COSTLY 2

static int too_costly(vctx *c)
{
    if (*c->steps > MAX_CHECK_STEPS)
        fail(c, "cannot be checked: the schema takes more than %lu steps "
                "for this value",
             MAX_CHECK_STEPS);
    else
        fail(c, "cannot be checked: the schema recurses deeper than %d "
                "levels",
             MAX_CHECK_DEPTH);
    return TOO_COSTLY;
}

/* A check whose failure is an answer, not an error to report (anyOf,
 * oneOf, not, if, contains): 0 matches, 1 does not, -1 out of memory. */
static int quiet(vctx *c, const th_jschema *s, const msgpack_object *v)
{
    vctx q = {NULL, 0, "", 0, c->depth, c->steps};
    int rc = check(&q, s, v);
    if (rc < 0)
        fail(c, "out of memory");
    else if (rc == TOO_COSTLY)
        too_costly(c);
    return rc;
}

/* JSON equality of two msgpack values (1 == 1.0, maps unordered). */
static bool mp_equal(const msgpack_object *a, const msgpack_object *b)
{
    if (is_num(a) || is_num(b)) {
        if (!is_num(a) || !is_num(b))
            return false;
        bool ia = a->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
                  a->type == MSGPACK_OBJECT_NEGATIVE_INTEGER;
        bool ib = b->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
                  b->type == MSGPACK_OBJECT_NEGATIVE_INTEGER;
        if (ia && ib)
            return a->type == b->type && a->via.u64 == b->via.u64;
        return num_of(a) == num_of(b);
    }
    unsigned ta = type_of(a), tb = type_of(b);
    if (ta != tb)
        return false;
    switch (ta) {
    case TH_JS_NULL:
        return true;
    case TH_JS_BOOLEAN:
        return a->via.boolean == b->via.boolean;
    case TH_JS_STRING: {
        const char *pa, *pb;
        size_t na, nb;
        str_of(a, &pa, &na);
        str_of(b, &pb, &nb);
        return na == nb && memcmp(pa, pb, na) == 0;
    }
    case TH_JS_ARRAY:
        if (a->via.array.size != b->via.array.size)
            return false;
        for (uint32_t i = 0; i < a->via.array.size; i++)
            if (!mp_equal(&a->via.array.ptr[i], &b->via.array.ptr[i]))
                return false;
        return true;
    case TH_JS_OBJECT:
        if (a->via.map.size != b->via.map.size)
            return false;
        for (uint32_t i = 0; i < a->via.map.size; i++) {
            const msgpack_object_kv *kv = &a->via.map.ptr[i];
            bool found = false;
            for (uint32_t j = 0; j < b->via.map.size && !found; j++)
                if (mp_equal(&kv->key, &b->via.map.ptr[j].key)) {
                    if (!mp_equal(&kv->val, &b->via.map.ptr[j].val))
                        return false;
                    found = true;
                }
            if (!found)
                return false;
        }
        return true;
    default:
        return false;
    }
}

/* A hash that agrees with mp_equal (equal values, equal hashes). */
static uint64_t mp_hash(const msgpack_object *v)
{
    uint64_t h = 1469598103934665603ull;
    if (is_num(v)) {
        double d = num_of(v);
        if (d == 0)
            d = 0; /* -0.0 == 0 */
        uint64_t bits;
        memcpy(&bits, &d, sizeof bits);
        return (bits ^ h) * 1099511628211ull;
    }
    unsigned t = type_of(v);
    h = (h ^ t) * 1099511628211ull;
    switch (t) {
    case TH_JS_BOOLEAN:
        return (h ^ v->via.boolean) * 1099511628211ull;
    case TH_JS_STRING: {
        const char *p;
        size_t n;
        str_of(v, &p, &n);
        for (size_t i = 0; i < n; i++)
            h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
        return h;
    }
    case TH_JS_ARRAY:
        for (uint32_t i = 0; i < v->via.array.size; i++)
            h = (h ^ mp_hash(&v->via.array.ptr[i])) * 1099511628211ull;
        return h;
    case TH_JS_OBJECT: {
        uint64_t sum = 0; /* order does not matter */
        for (uint32_t i = 0; i < v->via.map.size; i++)
            sum += mp_hash(&v->via.map.ptr[i].key) * 31 +
                   mp_hash(&v->via.map.ptr[i].val);
        return h ^ sum;
    }
    default:
        return h;
    }
}

typedef struct hashed {
    uint64_t h;
    uint32_t i;
} hashed;

static int by_hash(const void *a, const void *b)
{
    const hashed *x = a, *y = b;
    return x->h < y->h ? -1 : x->h > y->h;
}

/* uniqueItems in n log n: sorted by hash, equal hashes compared. */
static int check_unique(vctx *c, const msgpack_object *v)
{
    uint32_t n = v->via.array.size;
    if (n < 2)
        return 0;
    hashed *hs = malloc(n * sizeof *hs);
    if (!hs) {
        fail(c, "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        hs[i] = (hashed){mp_hash(&v->via.array.ptr[i]), i};
    qsort(hs, n, sizeof *hs, by_hash);
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++)
        for (uint32_t j = i + 1; j < n && hs[j].h == hs[i].h && !rc; j++)
            if (mp_equal(&v->via.array.ptr[hs[i].i],
                         &v->via.array.ptr[hs[j].i]))
                rc = fail(c, "must have unique items (items %u and %u are "
                             "equal)",
                          hs[i].i < hs[j].i ? hs[i].i : hs[j].i,
                          hs[i].i < hs[j].i ? hs[j].i : hs[i].i);
    free(hs);
    return rc;
}

static bool has_key(const msgpack_object *v, const char *k, size_t kl)
{
    for (uint32_t i = 0; i < v->via.map.size; i++) {
        const msgpack_object *key = &v->via.map.ptr[i].key;
        if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == kl &&
            memcmp(key->via.str.ptr, k, kl) == 0)
            return true;
    }
    return false;
}

static pcre2_match_context *g_mctx; /* read-only once made */
static pthread_once_t g_mctx_once = PTHREAD_ONCE_INIT;

static void make_mctx(void)
{
    g_mctx = pcre2_match_context_create(NULL);
    if (g_mctx) {
        pcre2_set_match_limit(g_mctx, MATCH_LIMIT);
        pcre2_set_depth_limit(g_mctx, MATCH_DEPTH_LIMIT);
    }
}

/* Whether a caller's string matches a schema's pattern; *err 1 when it
 * cannot be matched (not UTF-8, or past the backtracking budget), -1 out
 * of memory. */
static bool re_matches(void *re, const char *p, size_t n, int *err)
{
    pthread_once(&g_mctx_once, make_mctx);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md || !g_mctx) {
        pcre2_match_data_free(md);
        *err = -1;
        return false;
    }
    int rc = pcre2_match(re, (PCRE2_SPTR)p, n, 0, 0, md, g_mctx);
    pcre2_match_data_free(md);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
        *err = 1;
    return rc >= 0;
}

static int check_object(vctx *c, const th_jschema *s, const msgpack_object *v)
{
    uint32_t np = v->via.map.size;
    if (s->min_props >= 0 && np < (unsigned long long)s->min_props)
        return fail(c, "must have at least %lld properties, has %u",
                    s->min_props, np);
    if (s->max_props >= 0 && np > (unsigned long long)s->max_props)
        return fail(c, "must have at most %lld properties, has %u",
                    s->max_props, np);
    for (size_t r = 0; r < s->n_req; r++)
        if (!has_key(v, s->req[r], strlen(s->req[r])))
            return fail(c, "is missing the required property '%.60s'",
                        s->req[r]);
    if (s->dep_required) {
        const char *name;
        size_t nl;
        json_t *list;
        void *tmp;
        json_object_keylen_foreach_safe(s->dep_required, tmp, name, nl, list)
        {
            if (!has_key(v, name, nl))
                continue;
            size_t i;
            const json_t *e;
            json_array_foreach(list, i, e) if (!has_key(v, json_string_value(e),
                                                        json_string_length(e)))
                return fail(c, "has '%.60s', so it must have '%.60s' too", name,
                            json_string_value(e));
        }
    }
    for (size_t d = 0; d < s->n_dep; d++)
        if (has_key(v, s->dep_names[d], strlen(s->dep_names[d]))) {
            int rc = check(c, s->dep_s[d], v);
            if (rc)
                return rc;
        }
    for (uint32_t i = 0; i < np; i++) {
        const msgpack_object_kv *kv = &v->via.map.ptr[i];
        const char *kp = "";
        size_t kn = 0;
        if (kv->key.type == MSGPACK_OBJECT_STR)
            str_of(&kv->key, &kp, &kn);
        if (s->prop_names_s) {
            size_t old = path_push(c, kp, kn);
            int rc = check(c, s->prop_names_s, &kv->key);
            path_pop(c, old);
            if (rc)
                return rc;
        }
        bool named = false;
        for (size_t p = 0; p < s->n_props && kv->key.type == MSGPACK_OBJECT_STR;
             p++) {
            if (s->prop_lens[p] == kn && memcmp(s->prop_names[p], kp, kn) == 0) {
                size_t old = path_push(c, kp, kn);
                int rc = check(c, s->props[p], &kv->val);
                path_pop(c, old);
                if (rc)
                    return rc;
                named = true;
                break;
            }
        }
        for (size_t p = 0; p < s->n_pat; p++) {
            int err = 0;
            if (!re_matches(s->pat_re[p], kp, kn, &err)) {
                if (err < 0) {
                    fail(c, "out of memory");
                    return -1;
                }
                if (err)
                    return fail(c, "has the property '%.*s', which cannot be "
                                   "matched against the pattern '%.80s'",
                                (int)(kn > 60 ? 60 : kn), kp, s->pat_src[p]);
                continue;
            }
            named = true;
            size_t old = path_push(c, kp, kn);
            int rc = check(c, s->pat_s[p], &kv->val);
            path_pop(c, old);
            if (rc)
                return rc;
        }
        if (named || !s->additional)
            continue;
        if (s->additional->boolean == 0)
            return fail(c, "has the property '%.*s', which is not allowed",
                        (int)(kn > 60 ? 60 : kn), kp);
        size_t old = path_push(c, kp, kn);
        int rc = check(c, s->additional, &kv->val);
        path_pop(c, old);
        if (rc)
            return rc;
    }
    return 0;
}

static int check_array(vctx *c, const th_jschema *s, const msgpack_object *v)
{
    uint32_t n = v->via.array.size;
    if (s->min_items >= 0 && n < (unsigned long long)s->min_items)
        return fail(c, "must have at least %lld items, has %u", s->min_items,
                    n);
    if (s->max_items >= 0 && n > (unsigned long long)s->max_items)
        return fail(c, "must have at most %lld items, has %u", s->max_items,
                    n);
    for (uint32_t i = 0; i < n; i++) {
        const th_jschema *sub = i < s->n_prefix ? s->prefix[i] : s->items;
        if (!sub)
            continue;
        char idx[16];
        int il = snprintf(idx, sizeof idx, "%u", i);
        size_t old = path_push(c, idx, (size_t)il);
        int rc = check(c, sub, &v->via.array.ptr[i]);
        path_pop(c, old);
        if (rc)
            return rc;
    }
    if (s->contains) {
        unsigned long long found = 0;
        for (uint32_t i = 0; i < n; i++) {
            int rc = quiet(c, s->contains, &v->via.array.ptr[i]);
            if (rc < 0)
                return rc;
            found += rc == 0;
        }
        long long min = s->min_contains >= 0 ? s->min_contains : 1;
        if (found < (unsigned long long)min)
            return fail(c, "must contain at least %lld matching item%s, has "
                           "%llu",
                        min, min == 1 ? "" : "s", found);
        if (s->max_contains >= 0 && found > (unsigned long long)s->max_contains)
            return fail(c, "must contain at most %lld matching items, has %llu",
                        s->max_contains, found);
    }
    return s->unique_items ? check_unique(c, v) : 0;
}

static bool multiple_of(double d, double m)
{
    if (d == floor(d) && m == floor(m) && fabs(d) < 9e15 && m < 9e15)
        return fmod(d, m) == 0;
    double q = d / m;
    return isfinite(q) && fabs(q - nearbyint(q)) <= 1e-9 * fmax(1.0, fabs(q));
}

/* allOf, anyOf, oneOf, not, if / then / else: on values of any type. */
static int check_logic(vctx *c, const th_jschema *s, const msgpack_object *v)
{
    for (size_t i = 0; i < s->n_all; i++) {
        int rc = check(c, s->all_of[i], v);
        if (rc)
            return rc;
    }
    if (s->n_any) {
        int rc = 1;
        for (size_t i = 0; i < s->n_any && rc == 1; i++)
            rc = quiet(c, s->any_of[i], v);
        if (rc)
            return rc != 1 ? rc : fail(c, "must match at least one schema of "
                                          "anyOf");
    }
    if (s->n_one) {
        size_t hits = 0;
        for (size_t i = 0; i < s->n_one; i++) {
            int rc = quiet(c, s->one_of[i], v);
            if (rc < 0 || rc == TOO_COSTLY)
                return rc;
            hits += rc == 0;
        }
        if (hits != 1)
            return fail(c, "must match exactly one schema of oneOf, matches "
                           "%zu",
                        hits);
    }
    if (s->not_s) {
        int rc = quiet(c, s->not_s, v);
        if (rc < 0 || rc == TOO_COSTLY)
            return rc;
        if (rc == 0)
            return fail(c, "must not match the schema of 'not'");
    }
    if (s->if_s) {
        int rc = quiet(c, s->if_s, v);
        if (rc < 0 || rc == TOO_COSTLY)
            return rc;
        const th_jschema *next = rc == 0 ? s->then_s : s->else_s;
        if (next)
            return check(c, next, v);
    }
    return 0;
}

static int check(vctx *c, const th_jschema *s, const msgpack_object *v)
{
    if (s->boolean == 1)
        return 0;
    if (s->boolean == 0)
        return fail(c, "is not allowed here (the schema is false)");
    if (c->depth >= MAX_CHECK_DEPTH || ++*c->steps > MAX_CHECK_STEPS)
        return too_costly(c);
    c->depth++;
    int rc = 0;
    if (s->ref)
        rc = check(c, s->ref, v);
    unsigned t = type_of(v);
    if (!rc && s->types && !(s->types & t)) {
        unsigned want = s->types;
        rc = fail(c, "must be %s%s, got %s", type_word(want),
                  (want & (want - 1)) ? " (or another listed type)" : "",
                  type_word(t & TH_JS_INTEGER ? TH_JS_INTEGER : t));
    }
    if (!rc && s->enum_vals) {
        bool ok = false;
        size_t i;
        const json_t *e;
        json_array_foreach(s->enum_vals, i, e) if (!ok && equal(v, e)) ok =
            true;
        if (!ok)
            rc = fail(c, "must be one of the enum values");
    }
    if (!rc && s->has_const && !equal(v, s->const_val))
        rc = fail(c, "must be the constant value of the schema");
    if (rc) {
    } else if (is_num(v)) {
        double d = num_of(v);
        if (s->has_min && d < s->min)
            rc = fail(c, "must be >= %.17g, got %.17g", s->min, d);
        else if (s->has_max && d > s->max)
            rc = fail(c, "must be <= %.17g, got %.17g", s->max, d);
        else if (s->has_xmin && d <= s->xmin)
            rc = fail(c, "must be > %.17g, got %.17g", s->xmin, d);
        else if (s->has_xmax && d >= s->xmax)
            rc = fail(c, "must be < %.17g, got %.17g", s->xmax, d);
        else if (s->has_multiple_of && !multiple_of(d, s->multiple_of))
            rc = fail(c, "must be a multiple of %.17g, got %.17g",
                      s->multiple_of, d);
    } else if (t == TH_JS_STRING) {
        const char *p;
        size_t n;
        str_of(v, &p, &n);
        size_t cp = s->min_len >= 0 || s->max_len >= 0 ? code_points(p, n) : 0;
        int err = 0;
        if (s->min_len >= 0 && cp < (size_t)s->min_len)
            rc = fail(c, "must be at least %lld characters long, is %zu",
                      s->min_len, cp);
        else if (s->max_len >= 0 && cp > (size_t)s->max_len)
            rc = fail(c, "must be at most %lld characters long, is %zu",
                      s->max_len, cp);
        else if (s->re && !re_matches(s->re, p, n, &err)) {
            if (err < 0) {
                fail(c, "out of memory");
                rc = -1;
            } else if (err) {
                rc = fail(c, "cannot be matched against the pattern "
                             "'%.80s' (not valid UTF-8, or past the "
                             "pattern's match budget)",
                          s->pattern);
            } else {
                rc = fail(c, "must match the pattern '%.80s'", s->pattern);
            }
        }
    } else if (t == TH_JS_ARRAY) {
        rc = check_array(c, s, v);
    } else if (t == TH_JS_OBJECT) {
        rc = check_object(c, s, v);
    }
    if (!rc)
        rc = check_logic(c, s, v);
    c->depth--;
    return rc;
}

int th_jschema_check(const th_jschema *s, const msgpack_object *v, char *msg,
                     size_t cap)
{
    unsigned long steps = 0;
    vctx c = {msg, cap, "", 0, 0, &steps};
    if (msg && cap)
        msg[0] = '\0';
    int rc = check(&c, s, v);
    return rc == TOO_COSTLY ? 1 : rc;
}

int th_jschema_check_json(const th_jschema *s, const json_t *v, char *msg,
                          size_t cap)
{
    th_buf b = TH_BUF_INIT;
    int rc = -1;
    msgpack_zone zone;
    if (th_json_to_msgpack(v, &b) != 0) {
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
    return rc;
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
    int rc = th_jschema_check_json(s, j, msg, cap);
    json_decref(j);
    return rc;
}
