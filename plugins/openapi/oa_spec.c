/* oa_spec.c - an OpenAPI 3.0/3.1 document's operations turned into tools.
 *
 * Each operation becomes one tool: its name from operationId (or method
 * and path), its input one object schema whose properties are the path,
 * query and header parameters by name and `body` for a JSON request body,
 * its output schema the 2xx application/json response's when that fits
 * the host's output_schema subset (plugin.h).
 *
 * Schemas.  OpenAPI schemas are converted to the JSON Schema 2020-12 the
 * host validates: a `$ref` to #/components/schemas/NAME becomes a `$ref`
 * to #/$defs/NAME of the tool's input schema (each component converted
 * once, so a recursive schema stays a finite graph the host checks
 * through its $ref support); other local refs are inlined.  OpenAPI-only
 * keywords are dropped (example, discriminator, xml, externalDocs, x-*),
 * 3.0's `nullable` becomes a "null" type and its boolean
 * exclusiveMinimum/Maximum the 2020-12 numbers.  Output schemas are
 * inlined whole (the output subset has no $ref): a recursive or
 * composed (allOf, oneOf, ...) response schema gives no output schema.
 *
 * Hostile documents: a chain of $refs that never reaches a schema (A ->
 * B -> A), a remote or dangling $ref, a schema nested deeper than the
 * host's 32 levels, too many operations or parameters: each is a load
 * error naming the API, the operation and the reference. */
#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "openapi.h"

typedef struct cv {
    const json_t *doc;
    json_t *defs;   /* input mode: the $defs being built; NULL: output mode */
    json_t *names;  /* input mode: component pointer -> $defs name */
    const char *inlining[OA_MAX_DEPTH + 2]; /* refs being inlined */
    int n_inlining;
    bool v30;       /* OpenAPI 3.0 (nullable, boolean exclusive bounds) */
    bool unfit;     /* output mode: outside the output_schema subset */
    size_t nodes;   /* schema nodes made for this tool (OA_MAX_NODES) */
    char *err;
    size_t es;
    const char *where;
} cv;

static int bad(cv *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(cv *c, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->es, "%s: %s", c->where, msg);
    return -1;
}

/* ---- references -------------------------------------------------------- */

/* The node a local reference ("#/components/schemas/Pet") points at, or
 * NULL with a message. */
static const json_t *resolve(cv *c, const char *ref)
{
    if (strncmp(ref, "#", 1) != 0) {
        bad(c, "$ref '%.200s' is not local (only '#/...' references are "
               "followed)", ref);
        return NULL;
    }
    const json_t *node = c->doc;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') {
            bad(c, "$ref '%.200s' is not a JSON pointer", ref);
            return NULL;
        }
        p++;
        char seg[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1'))
                ch = *++p == '0' ? '~' : '/';
            if (n + 1 >= sizeof seg) {
                bad(c, "$ref '%.200s': a segment is too long", ref);
                return NULL;
            }
            seg[n++] = ch;
        }
        seg[n] = '\0';
        if (json_is_object(node))
            node = json_object_get(node, seg);
        else if (json_is_array(node) && n && strspn(seg, "0123456789") == n)
            node = json_array_get(node, strtoul(seg, NULL, 10));
        else
            node = NULL;
        if (!node) {
            bad(c, "$ref '%.200s' points at nothing in the document", ref);
            return NULL;
        }
    }
    return node;
}

/* Follows `node`'s chain of $refs to the first node that is not one.
 * A chain that comes back to a reference it passed is a cycle: an error
 * that shows the chain.  *last is the last reference followed. */
static const json_t *follow(cv *c, const json_t *node, const char **last)
{
    const char *seen[OA_MAX_REF_HOPS];
    int n = 0;
    *last = NULL;
    for (;;) {
        const json_t *r = json_object_get(node, "$ref");
        if (!json_is_object(node) || !r)
            return node;
        const char *ref = json_string_value(r);
        if (!ref) {
            bad(c, "$ref is not a string");
            return NULL;
        }
        for (int i = 0; i < n; i++)
            if (!strcmp(seen[i], ref)) {
                char chain[400];
                size_t w = 0;
                for (int k = i; k < n && w < sizeof chain; k++)
                    w += (size_t)snprintf(chain + w, sizeof chain - w,
                                          "%s -> ", seen[k]);
                bad(c, "$ref cycle: %s%s", chain, ref);
                return NULL;
            }
        if (n == OA_MAX_REF_HOPS) {
            bad(c, "more than %d $refs in a chain", OA_MAX_REF_HOPS);
            return NULL;
        }
        seen[n++] = ref;
        *last = ref;
        if (!(node = resolve(c, ref)))
            return NULL;
    }
}

/* ---- schemas ------------------------------------------------------------- */

enum { K_COPY, K_SCHEMA, K_MAP, K_LIST, K_ANNOT, K_EXCL };

static const struct kw {
    const char *name;
    int kind;
    bool output; /* in the output_schema subset */
} keywords[] = {
    {"type", K_COPY, true},          {"enum", K_COPY, true},
    {"const", K_COPY, true},         {"minimum", K_COPY, true},
    {"maximum", K_COPY, true},       {"exclusiveMinimum", K_EXCL, true},
    {"exclusiveMaximum", K_EXCL, true}, {"minLength", K_COPY, true},
    {"maxLength", K_COPY, true},     {"pattern", K_COPY, true},
    {"items", K_SCHEMA, true},       {"minItems", K_COPY, true},
    {"maxItems", K_COPY, true},      {"properties", K_MAP, true},
    {"required", K_COPY, true},      {"additionalProperties", K_SCHEMA, true},
    {"title", K_COPY, true},         {"description", K_COPY, true},
    {"default", K_COPY, true},       {"examples", K_COPY, true},
    {"uniqueItems", K_COPY, false},  {"multipleOf", K_COPY, false},
    {"minProperties", K_COPY, false}, {"maxProperties", K_COPY, false},
    {"dependentRequired", K_COPY, false}, {"minContains", K_COPY, false},
    {"maxContains", K_COPY, false},  {"allOf", K_LIST, false},
    {"anyOf", K_LIST, false},        {"oneOf", K_LIST, false},
    {"prefixItems", K_LIST, false},  {"not", K_SCHEMA, false},
    {"contains", K_SCHEMA, false},   {"propertyNames", K_SCHEMA, false},
    {"if", K_SCHEMA, false},         {"then", K_SCHEMA, false},
    {"else", K_SCHEMA, false},       {"patternProperties", K_MAP, false},
    {"dependentSchemas", K_MAP, false}, {"format", K_ANNOT, false},
    {"readOnly", K_ANNOT, false},    {"writeOnly", K_ANNOT, false},
    {"deprecated", K_ANNOT, false},
};
#define N_KEYWORDS (sizeof keywords / sizeof keywords[0])

static json_t *schema(cv *c, const json_t *s, int depth);

/* A `$defs` name for a component pointer: its last segment, made of
 * [A-Za-z0-9_.-] and unique in this tool's $defs. */
static char *def_name(cv *c, const char *ref)
{
    const char *last = strrchr(ref, '/');
    char base[80];
    size_t n = 0;
    for (const char *p = last ? last + 1 : ref; *p && n < 64; p++)
        base[n++] = (strchr("_.-", *p) || (*p >= 'a' && *p <= 'z') ||
                     (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))
                        ? *p
                        : '_';
    base[n] = '\0';
    if (!n)
        snprintf(base, sizeof base, "def");
    char name[96];
    snprintf(name, sizeof name, "%s", base);
    for (int i = 2; json_object_get(c->defs, name); i++)
        snprintf(name, sizeof name, "%s_%d", base, i);
    return strdup(name);
}

static json_t *schema_ref(cv *c, const json_t *s, const char *ref, int depth)
{
    const char *last;
    if (!follow(c, s, &last)) /* refuses a cycle of bare $refs */
        return NULL;
    const json_t *target = resolve(c, ref);
    if (!target)
        return NULL;
    if (c->defs && !strncmp(ref, "#/components/schemas/", 21) &&
        !strchr(ref + 21, '/')) {
        const char *have = json_string_value(json_object_get(c->names, ref));
        char *name = have ? strdup(have) : def_name(c, ref);
        if (!name) {
            bad(c, "out of memory");
            return NULL;
        }
        if (!have) {
            /* Reserve the name first: a recursive schema meets it again
             * and refers to it instead of converting it again. */
            json_object_set_new(c->names, ref, json_string(name));
            json_object_set_new(c->defs, name, json_true());
            json_t *conv = schema(c, target, depth + 1);
            if (!conv) {
                free(name);
                return NULL;
            }
            json_object_set_new(c->defs, name, conv);
        }
        json_t *out = json_object();
        char *p = malloc(strlen(name) + 9);
        if (!out || !p) {
            free(p);
            free(name);
            json_decref(out);
            bad(c, "out of memory");
            return NULL;
        }
        sprintf(p, "#/$defs/%s", name);
        json_object_set_new(out, "$ref", json_string(p));
        free(p);
        free(name);
        return out;
    }
    /* Inlined: another place in the document, or any ref of an output
     * schema.  A ref met again inside itself is recursion. */
    for (int i = 0; i < c->n_inlining; i++)
        if (!strcmp(c->inlining[i], ref)) {
            if (!c->defs) {
                c->unfit = true;
                return NULL;
            }
            bad(c, "recursive $ref '%.200s' outside #/components/schemas",
                ref);
            return NULL;
        }
    if (c->n_inlining > OA_MAX_DEPTH) {
        c->unfit = true;
        bad(c, "$refs inlined deeper than %d levels", OA_MAX_DEPTH);
        return NULL;
    }
    c->inlining[c->n_inlining++] = ref;
    json_t *out = schema(c, target, depth + 1);
    c->n_inlining--;
    return out;
}

/* 3.0's `nullable: true`: "null" added to the type (and to an enum). */
static void add_null(json_t *out)
{
    json_t *t = json_object_get(out, "type");
    if (json_is_string(t)) {
        json_t *a = json_array();
        json_array_append(a, t);
        json_array_append_new(a, json_string("null"));
        json_object_set_new(out, "type", a);
    } else if (json_is_array(t)) {
        json_array_append_new(t, json_string("null"));
    }
    json_t *e = json_object_get(out, "enum");
    if (json_is_array(e))
        json_array_append_new(e, json_null());
}

static int keyword(cv *c, const struct kw *k, const json_t *s,
                   const json_t *v, int depth, json_t *out)
{
    if (!c->defs && !k->output) {
        if (k->kind == K_ANNOT)
            return 0; /* annotations the output subset does not list */
        c->unfit = true;
        return -1;
    }
    switch (k->kind) {
    case K_COPY:
    case K_ANNOT:
        return json_object_set(out, k->name, (json_t *)v);
    case K_EXCL:
        if (json_is_boolean(v)) { /* 3.0: a flag on minimum/maximum */
            const char *bound =
                !strcmp(k->name, "exclusiveMinimum") ? "minimum" : "maximum";
            const json_t *b = json_object_get(s, bound);
            if (json_is_true(v) && json_is_number(b)) {
                json_object_set(out, k->name, (json_t *)b);
                json_object_del(out, bound);
            }
            return 0;
        }
        return json_object_set(out, k->name, (json_t *)v);
    case K_SCHEMA: {
        json_t *sub = schema(c, v, depth + 1);
        return sub ? json_object_set_new(out, k->name, sub) : -1;
    }
    case K_LIST: {
        if (!json_is_array(v))
            return bad(c, "%s is not a list of schemas", k->name);
        json_t *a = json_array();
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e)
        {
            json_t *sub = schema(c, e, depth + 1);
            if (!sub || json_array_append_new(a, sub) != 0) {
                json_decref(a);
                return -1;
            }
        }
        return json_object_set_new(out, k->name, a);
    }
    case K_MAP: {
        if (!json_is_object(v))
            return bad(c, "%s is not a map of schemas", k->name);
        json_t *m = json_object();
        const char *name;
        const json_t *e;
        json_object_foreach((json_t *)v, name, e)
        {
            json_t *sub = schema(c, e, depth + 1);
            if (!sub || json_object_set_new(m, name, sub) != 0) {
                json_decref(m);
                return -1;
            }
        }
        return json_object_set_new(out, k->name, m);
    }
    }
    return -1;
}

/* The JSON Schema for the OpenAPI schema `s`; NULL with a message (or,
 * in output mode, with c->unfit set). */
static json_t *schema(cv *c, const json_t *s, int depth)
{
    if (depth > OA_MAX_DEPTH) {
        if (!c->defs) {
            c->unfit = true;
            return NULL;
        }
        bad(c, "a schema nested deeper than %d levels (the host's bound)",
            OA_MAX_DEPTH);
        return NULL;
    }
    if (++c->nodes > OA_MAX_NODES) {
        /* inlining a schema that uses another twice, that one another
         * twice, ... doubles at each level */
        if (!c->defs) {
            c->unfit = true;
            return NULL;
        }
        bad(c, "a schema of more than %d nodes once its references are "
               "inlined", OA_MAX_NODES);
        return NULL;
    }
    if (json_is_boolean(s))
        return json_incref((json_t *)s);
    if (!json_is_object(s)) {
        bad(c, "a schema is not a map");
        return NULL;
    }
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (ref)
        return schema_ref(c, s, ref, depth);
    if (json_object_get(s, "$ref")) {
        bad(c, "$ref is not a string");
        return NULL;
    }
    json_t *out = json_object();
    if (!out) {
        bad(c, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < N_KEYWORDS; i++) {
        const json_t *v = json_object_get(s, keywords[i].name);
        if (v && keyword(c, &keywords[i], s, v, depth, out) != 0) {
            json_decref(out);
            return NULL;
        }
    }
    if (c->v30 && json_is_true(json_object_get(s, "nullable")))
        add_null(out);
    return out;
}

/* ---- operations ---------------------------------------------------------- */

static const char *const methods[] = {"get",  "put",     "post",
                                      "delete", "options", "head",
                                      "patch", "trace",  NULL};

static char *sanitize_name(const char *prefix, const char *base)
{
    size_t n = strlen(prefix) + strlen(base);
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    size_t w = 0;
    for (const char *p = prefix; *p; p++)
        s[w++] = *p;
    for (const char *p = base; *p; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
        if (!ok)
            ch = '_';
        if (ch == '_' && w > strlen(prefix) && s[w - 1] == '_')
            continue; /* one '_' for a run of others */
        s[w++] = ch;
    }
    while (w > strlen(prefix) && s[w - 1] == '_')
        w--;
    s[w] = '\0';
    return s;
}

/* "get_pets_petId" for GET /pets/{petId}. */
static char *generated_name(const char *method, const char *path)
{
    size_t n = strlen(method) + strlen(path) + 2;
    char *s = malloc(n);
    if (!s)
        return NULL;
    snprintf(s, n, "%s_%s", method, path);
    return s;
}

static bool listed(char *const *list, const char *id, const json_t *tags)
{
    if (!list)
        return false;
    for (char *const *p = list; *p; p++) {
        if (!strncmp(*p, "tag:", 4)) {
            size_t i;
            const json_t *t;
            json_array_foreach(tags, i, t)
            {
                const char *tag = json_string_value(t);
                if (tag && !strcmp(tag, *p + 4))
                    return true;
            }
        } else if (!strcmp(*p, id)) {
            return true;
        }
    }
    return false;
}

/* One line of at most `max` bytes (cut at a UTF-8 boundary), newlines and
 * tabs as spaces. */
static char *one_line(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n > max) {
        n = max;
        while (n && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--;
    }
    char *o = malloc(n + 1);
    if (!o)
        return NULL;
    for (size_t i = 0; i < n; i++)
        o[i] = (unsigned char)s[i] < 0x20 ? ' ' : s[i];
    o[n] = '\0';
    while (n && o[n - 1] == ' ')
        o[--n] = '\0';
    return o;
}

/* The content's media type of `len` bytes (before any parameters) is
 * `want` (case-insensitive). */
static bool media_is(const char *type, size_t len, const char *want)
{
    return len == strlen(want) && !strncasecmp(type, want, len);
}

static const char *media_schema_json(const json_t *content, const json_t **schema)
{
    const char *type;
    const json_t *m;
    *schema = NULL;
    json_object_foreach((json_t *)content, type, m)
    {
        size_t n = strlen(type);
        const char *semi = strchr(type, ';');
        if (semi)
            n = (size_t)(semi - type);
        if (media_is(type, n, "application/json") ||
            (n > 5 && !strncasecmp(type + n - 5, "+json", 5))) {
            *schema = json_object_get(m, "schema");
            return type;
        }
    }
    return NULL;
}

/* A request body of the form media type: its schema in *schema (NULL
 * when it has none); NULL when the content has no such type. */
static const char *media_schema_form(const json_t *content,
                                     const json_t **schema)
{
    const char *type;
    const json_t *m;
    *schema = NULL;
    json_object_foreach((json_t *)content, type, m)
    {
        const char *semi = strchr(type, ';');
        size_t n = semi ? (size_t)(semi - type) : strlen(type);
        if (media_is(type, n, "application/x-www-form-urlencoded")) {
            *schema = json_object_get(m, "schema");
            return type;
        }
    }
    return NULL;
}

typedef struct opctx {
    oa_state *st;
    oa_api *api;
    cv c;
    const char *method; /* lower case */
    const char *path;
    const json_t *item, *op;
    char where[400];
} opctx;

static bool header_reserved(const char *name)
{
    return !strcasecmp(name, "accept") || !strcasecmp(name, "content-type") ||
           !strcasecmp(name, "authorization") || !strcasecmp(name, "host") ||
           !strcasecmp(name, "content-length") || !strcasecmp(name, "cookie");
}

/* A cookie's name is an RFC 6265 token: visible ASCII but separators. */
static bool cookie_name_ok(const char *name)
{
    for (const char *q = name; *q; q++)
        if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7f ||
            strchr("()<>@,;:\\\"/[]?={}", *q))
            return false;
    return true;
}

/* A parameter schema whose values are one scalar (a string, a number, a
 * boolean): what a cookie can carry as name=value. */
static bool scalar_schema(const json_t *s)
{
    const json_t *t = json_object_get(s, "type");
    const char *ts = json_string_value(t);
    if (!t)
        return !json_object_get(s, "properties") &&
               !json_object_get(s, "items");
    return ts && (!strcmp(ts, "string") || !strcmp(ts, "integer") ||
                  !strcmp(ts, "number") || !strcmp(ts, "boolean"));
}

static int add_param(opctx *o, const json_t *pnode, oa_op *op,
                     json_t *props, json_t *required)
{
    const char *last;
    const json_t *p = follow(&o->c, pnode, &last);
    if (!p)
        return -1;
    const char *name = json_string_value(json_object_get(p, "name"));
    const char *in = json_string_value(json_object_get(p, "in"));
    if (!name || !*name || strlen(name) > 128 || !in)
        return bad(&o->c, "a parameter without a name or `in`");
    for (const char *q = name; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            return bad(&o->c, "parameter name with a control character");
    int where = !strcmp(in, "path")     ? OA_IN_PATH
                : !strcmp(in, "query")  ? OA_IN_QUERY
                : !strcmp(in, "header") ? OA_IN_HEADER
                : !strcmp(in, "cookie") ? OA_IN_COOKIE
                                        : -1;
    if (where < 0)
        return bad(&o->c, "parameter '%s': unknown `in` '%.40s'", name, in);
    bool req = where == OA_IN_PATH || json_is_true(json_object_get(p, "required"));
    /* a cookie is offered when its name is a token and its value one
     * scalar (no style/explode forms of arrays and objects) */
    const json_t *cs = where == OA_IN_COOKIE ? json_object_get(p, "schema")
                                             : NULL;
    if (cs && !(cs = follow(&o->c, cs, &last)))
        return -1;
    bool cookie_bad = where == OA_IN_COOKIE &&
                      (!cookie_name_ok(name) || (cs && !scalar_schema(cs)) ||
                       json_object_get(p, "content"));
    if (cookie_bad || (where == OA_IN_HEADER && header_reserved(name))) {
        if (req)
            return bad(&o->c, "required %s parameter '%s' cannot be given "
                              "through toolhost (exclude the operation)",
                       in, name);
        return 0;
    }
    if (json_object_get(props, name))
        return bad(&o->c, "parameter '%s' is declared twice (in different "
                          "places: toolhost names inputs by name alone; "
                          "exclude the operation)", name);
    const json_t *s = json_object_get(p, "schema");
    if (!s) {
        const json_t *content = json_object_get(p, "content");
        if (json_is_object(content))
            media_schema_json(content, &s);
    }
    json_t *conv = s ? schema(&o->c, s, 1) : json_pack("{s:s}", "type", "string");
    if (!conv)
        return -1;
    const char *desc = json_string_value(json_object_get(p, "description"));
    if (desc && json_is_object(conv) && !json_object_get(conv, "description")) {
        char *d = one_line(desc, 1024);
        json_object_set_new(conv, "description", json_string(d ? d : ""));
        free(d);
    }
    json_object_set_new(props, name, conv);
    if (req)
        json_array_append_new(required, json_string(name));
    if (op->n_params == OA_MAX_PARAMS)
        return bad(&o->c, "more than %d parameters", OA_MAX_PARAMS);
    oa_param *np = &op->params[op->n_params];
    if (!(np->name = strdup(name)))
        return bad(&o->c, "out of memory");
    np->in = where;
    op->n_params++;
    return 0;
}

/* Path parameters and the path's {names} agree. */
static int check_path(opctx *o, const oa_op *op)
{
    for (const char *p = o->path; (p = strchr(p, '{'));) {
        const char *e = strchr(p, '}');
        if (!e)
            return bad(&o->c, "unbalanced '{' in the path");
        bool found = false;
        for (size_t i = 0; i < op->n_params; i++)
            found |= op->params[i].in == OA_IN_PATH &&
                     strlen(op->params[i].name) == (size_t)(e - p - 1) &&
                     !strncmp(op->params[i].name, p + 1, (size_t)(e - p - 1));
        if (!found)
            return bad(&o->c, "the path's {%.*s} has no path parameter",
                       (int)(e - p - 1 > 64 ? 64 : e - p - 1), p + 1);
        p = e;
    }
    for (size_t i = 0; i < op->n_params; i++) {
        if (op->params[i].in != OA_IN_PATH)
            continue;
        char want[140];
        snprintf(want, sizeof want, "{%s}", op->params[i].name);
        if (!strstr(o->path, want))
            return bad(&o->c, "path parameter '%s' is not in the path",
                       op->params[i].name);
    }
    return 0;
}

static int add_body(opctx *o, oa_op *op, json_t *props, json_t *required)
{
    const json_t *rb = json_object_get(o->op, "requestBody");
    if (!rb)
        return 0;
    const char *last;
    if (!(rb = follow(&o->c, rb, &last)))
        return -1;
    bool req = json_is_true(json_object_get(rb, "required"));
    const json_t *content = json_object_get(rb, "content");
    const json_t *s = NULL;
    const char *mt =
        json_is_object(content) ? media_schema_json(content, &s) : NULL;
    int kind = OA_BODY_JSON;
    if (!mt && json_is_object(content) &&
        (mt = media_schema_form(content, &s))) {
        /* a form: the fields of one object (its schema's own type, when
         * it says one, must be that) */
        kind = OA_BODY_FORM;
        const json_t *fs = s ? follow(&o->c, s, &last) : NULL;
        if (s && !fs)
            return -1;
        const json_t *ty = fs ? json_object_get(fs, "type") : NULL;
        if (ty && !(json_is_string(ty) &&
                    !strcmp(json_string_value(ty), "object")))
            return bad(&o->c, "the form request body's schema is not an "
                              "object (exclude the operation)");
    }
    if (!mt) {
        if (req)
            return bad(&o->c, "the request body has no JSON or form media "
                              "type (application/json, +json, "
                              "application/x-www-form-urlencoded; exclude "
                              "the operation)");
        return 0;
    }
    if (json_object_get(props, "body"))
        return bad(&o->c, "a parameter named 'body' and a request body "
                          "(exclude the operation)");
    json_t *conv = s ? schema(&o->c, s, 1)
                     : kind == OA_BODY_FORM ? json_pack("{s:s}", "type", "object")
                                            : json_true();
    if (!conv)
        return -1;
    const char *desc = json_string_value(json_object_get(rb, "description"));
    if (desc && json_is_object(conv) && !json_object_get(conv, "description")) {
        char *d = one_line(desc, 1024);
        json_object_set_new(conv, "description", json_string(d ? d : ""));
        free(d);
    }
    json_object_set_new(props, "body", conv);
    if (req)
        json_array_append_new(required, json_string("body"));
    op->body = kind;
    return 0;
}

/* The output schema (JSON text) of the first 2xx JSON response, or NULL
 * (none, or not expressible in the output subset); -1 on a hard error. */
static int output_schema(opctx *o, char **out)
{
    *out = NULL;
    const json_t *responses = json_object_get(o->op, "responses");
    if (!json_is_object(responses))
        return 0;
    const json_t *r = NULL;
    char code[16];
    for (int i = 200; i < 300 && !r; i++) {
        snprintf(code, sizeof code, "%d", i);
        r = json_object_get(responses, code);
    }
    if (!r && !(r = json_object_get(responses, "2XX")))
        return 0;
    const char *last;
    if (!(r = follow(&o->c, r, &last)))
        return -1;
    const json_t *s = NULL;
    const json_t *content = json_object_get(r, "content");
    if (!json_is_object(content) || !media_schema_json(content, &s) || !s)
        return 0;
    cv oc = o->c;
    oc.defs = oc.names = NULL;
    oc.n_inlining = 0;
    oc.unfit = false;
    oc.nodes = 0;
    json_t *conv = schema(&oc, s, 0);
    if (!conv) {
        if (oc.unfit)
            return 0;
        return -1;
    }
    *out = json_dumps(conv, JSON_COMPACT);
    json_decref(conv);
    return *out ? 0 : bad(&o->c, "out of memory");
}

static int grow(oa_state *st)
{
    if (st->n_tools < st->cap_tools)
        return 0;
    uint32_t cap = st->cap_tools ? st->cap_tools * 2 : 16;
    toolhost_tool *t = realloc(st->tools_rw, cap * sizeof *t);
    if (!t)
        return -1;
    st->tools_rw = t;
    oa_op *o = realloc(st->ops, cap * sizeof *o);
    if (!o)
        return -1;
    st->ops = o;
    st->cap_tools = cap;
    return 0;
}

static int build_op(opctx *o)
{
    oa_api *api = o->api;
    oa_state *st = o->st;
    const char *id = json_string_value(json_object_get(o->op, "operationId"));
    char *gen = generated_name(o->method, o->path);
    if (!gen)
        return bad(&o->c, "out of memory");
    char *gen_clean = sanitize_name("", gen);
    free(gen);
    gen = gen_clean;
    if (!gen)
        return bad(&o->c, "out of memory");
    const char *key = id ? id : gen;
    snprintf(o->where, sizeof o->where, "api '%s': %s %.200s (%.100s)",
             api->name, o->method, o->path, key);
    o->c.where = o->where;
    const json_t *tags = json_object_get(o->op, "tags");
    if ((api->include && !listed(api->include, key, tags)) ||
        listed(api->exclude, key, tags)) {
        free(gen);
        return 0;
    }
    char *name = sanitize_name(api->prefix ? api->prefix : "", key);
    free(gen);
    if (!name)
        return bad(&o->c, "out of memory");
    size_t nl = strlen(name);
    if (nl == 0 || nl > 64 || strspn(name, "_-") == nl) {
        int rc = bad(&o->c, "tool name '%.100s' is empty or longer than 64 "
                            "characters (shorten the prefix or exclude the "
                            "operation)", name);
        free(name);
        return rc;
    }
    for (uint32_t i = 0; i < st->n_tools; i++)
        if (!strcmp(st->tools_rw[i].name, name)) {
            int rc = bad(&o->c, "tool name '%s' is already taken (two "
                                "operations, or two APIs: set a prefix)",
                         name);
            free(name);
            return rc;
        }
    if (st->n_tools >= OA_MAX_OPS * 4 || grow(st) != 0) {
        free(name);
        return bad(&o->c, "too many tools (or out of memory)");
    }
    toolhost_tool *t = &st->tools_rw[st->n_tools];
    oa_op *op = &st->ops[st->n_tools];
    memset(t, 0, sizeof *t);
    memset(op, 0, sizeof *op);
    st->n_tools++; /* from here oa_state_free() frees what is set */
    t->struct_size = sizeof *t;
    t->name = name;
    op->api = api;
    op->params = calloc(OA_MAX_PARAMS, sizeof *op->params);
    op->method = strdup(o->method);
    op->path = strdup(o->path);
    if (!op->params || !op->method || !op->path)
        return bad(&o->c, "out of memory");
    for (char *m = op->method; *m; m++)
        *m = (char)(*m - 'a' + 'A');
    op->idempotent = strcmp(o->method, "post") && strcmp(o->method, "patch");

    /* input */
    json_t *props = json_object(), *required = json_array();
    o->c.defs = json_object();
    o->c.names = json_object();
    o->c.n_inlining = 0;
    o->c.nodes = 0;
    int rc = -1;
    const json_t *lists[2] = {json_object_get(o->op, "parameters"),
                              json_object_get(o->item, "parameters")};
    /* operation parameters first: they override the path item's */
    for (int l = 0; l < 2; l++) {
        size_t i;
        const json_t *pn;
        if (lists[l] && !json_is_array(lists[l])) {
            bad(&o->c, "parameters is not a list");
            goto done;
        }
        json_array_foreach(lists[l], i, pn)
        {
            if (l == 1) { /* skip path-level ones the operation redefines */
                const char *last;
                const json_t *p = follow(&o->c, pn, &last);
                if (!p)
                    goto done;
                const char *pname = json_string_value(json_object_get(p, "name"));
                bool dup = false;
                for (size_t k = 0; pname && k < op->n_params; k++)
                    dup |= !strcmp(op->params[k].name, pname);
                if (dup)
                    continue;
            }
            if (add_param(o, pn, op, props, required) != 0)
                goto done;
        }
    }
    if (check_path(o, op) != 0 || add_body(o, op, props, required) != 0)
        goto done;
    json_t *in = json_pack("{s:s, s:O, s:b}", "type", "object", "properties",
                           props, "additionalProperties", 0);
    if (json_array_size(required))
        json_object_set(in, "required", required);
    if (json_object_size(o->c.defs))
        json_object_set(in, "$defs", o->c.defs);
    t->input_schema = in ? json_dumps(in, JSON_COMPACT) : NULL;
    json_decref(in);
    if (!t->input_schema) {
        bad(&o->c, "out of memory");
        goto done;
    }
    char *os = NULL;
    if (output_schema(o, &os) != 0)
        goto done;
    t->output_schema = os;
    op->structured = os != NULL;
    t->stdout_type = os ? TOOLHOST_SEM_STRUCTURED : TOOLHOST_SEM_TEXT;
    t->stderr_type = TOOLHOST_SEM_ERROR;

    /* words */
    const char *summary = json_string_value(json_object_get(o->op, "summary"));
    const char *desc = json_string_value(json_object_get(o->op, "description"));
    char line[300];
    snprintf(line, sizeof line, "%s %s", op->method, o->path);
    t->description = one_line(summary && *summary ? summary
                              : desc && *desc     ? desc
                                                  : line,
                              256);
    size_t ll = strlen(line) + (desc ? strlen(desc) : 0) + 32;
    char *lng = malloc(ll);
    if (lng)
        snprintf(lng, ll, "HTTP: %s%s%.8000s", line, desc ? "\n\n" : "",
                 desc ? desc : "");
    t->long_description = lng;
    if (!t->description || !lng) {
        bad(&o->c, "out of memory");
        goto done;
    }
    /* The API's name as the tool's tag (ABI 1.5), so that a toolset can
     * take a whole API by `tags: [NAME]`.  The document's own tags serve
     * include/exclude only: a vendor's document does not choose which
     * toolsets its operations join. */
    if (api->tags[0])
        t->tags = (const char *const *)api->tags;
    t->flags = TOOLHOST_TOOL_OPEN_WORLD;
    if (!strcmp(o->method, "get") || !strcmp(o->method, "head") ||
        !strcmp(o->method, "options"))
        t->flags |= TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT;
    else if (!strcmp(o->method, "put"))
        t->flags |= TOOLHOST_TOOL_IDEMPOTENT;
    else if (!strcmp(o->method, "delete"))
        t->flags |= TOOLHOST_TOOL_DESTRUCTIVE | TOOLHOST_TOOL_IDEMPOTENT;
    t->execute = oa_execute;
    rc = 0;
done:
    json_decref(props);
    json_decref(required);
    json_decref(o->c.defs);
    json_decref(o->c.names);
    o->c.defs = o->c.names = NULL;
    return rc;
}

/* The base URL: the config's, or the document's first server's (its
 * {variables} replaced by their defaults); host and port kept for the
 * private-address rule. */
static int base_url(oa_api *api, const json_t *doc, char *err, size_t es)
{
    if (!api->base_url) {
        const json_t *srv = json_array_get(json_object_get(doc, "servers"), 0);
        const char *url = json_string_value(json_object_get(srv, "url"));
        if (!url) {
            snprintf(err, es, "api '%s': the document has no servers[0].url: "
                              "set base_url", api->name);
            return -1;
        }
        const json_t *vars = json_object_get(srv, "variables");
        char buf[2048];
        size_t w = 0;
        for (const char *p = url; *p && w + 1 < sizeof buf;) {
            const char *e = *p == '{' ? strchr(p, '}') : NULL;
            if (!e) {
                buf[w++] = *p++;
                continue;
            }
            char var[128];
            snprintf(var, sizeof var, "%.*s", (int)(e - p - 1), p + 1);
            const char *def = json_string_value(
                json_object_get(json_object_get(vars, var), "default"));
            if (!def) {
                snprintf(err, es, "api '%s': server variable {%s} has no "
                                  "default: set base_url", api->name, var);
                return -1;
            }
            w += (size_t)snprintf(buf + w, sizeof buf - w, "%s", def);
            p = e + 1;
        }
        buf[w < sizeof buf ? w : sizeof buf - 1] = '\0';
        if (!(api->base_url = strdup(buf))) {
            snprintf(err, es, "out of memory");
            return -1;
        }
    }
    size_t n = strlen(api->base_url);
    while (n && api->base_url[n - 1] == '/')
        api->base_url[--n] = '\0';
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL, *query = NULL;
    int rc = -1;
    if (u && curl_url_set(u, CURLUPART_URL, api->base_url,
                          CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        strcasecmp(scheme, "http") && strcasecmp(scheme, "https")) {
        snprintf(err, es, "api '%s': base URL '%.200s': only http and https",
                 api->name, api->base_url);
        goto out;
    }
    if (!u || curl_url_set(u, CURLUPART_URL, api->base_url, 0) != CURLUE_OK ||
        (!scheme &&
         curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK) ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) !=
            CURLUE_OK) {
        snprintf(err, es, "api '%s': base URL '%.200s' is not an absolute "
                          "http(s) URL (a relative server URL needs base_url)",
                 api->name, api->base_url);
        goto out;
    }
    if (strcasecmp(scheme, "http") && strcasecmp(scheme, "https")) {
        snprintf(err, es, "api '%s': base URL '%.200s': only http and https",
                 api->name, api->base_url);
        goto out;
    }
    /* a secret in the URL would be logged (the load's info line), sent
     * by libcurl and shown in resource URIs: credentials go in auth:,
     * from the environment.  The URL is not shown: it holds one. */
    char *user = NULL;
    bool has_user = curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK;
    curl_free(user);
    if (has_user) {
        snprintf(err, es, "api '%s': the base URL has user info "
                          "(user:password@); credentials go in auth:, read "
                          "from the environment", api->name);
        goto out;
    }
    if (curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_OK) {
        snprintf(err, es, "api '%s': base URL '%.200s' has a query",
                 api->name, api->base_url);
        goto out;
    }
    for (char *h = host; *h; h++)
        if (*h >= 'A' && *h <= 'Z')
            *h = (char)(*h - 'A' + 'a');
    if (!(api->base_host = strdup(host))) {
        snprintf(err, es, "out of memory");
        goto out;
    }
    api->base_port = strtol(port, NULL, 10);
    api->base_https = !strcasecmp(scheme, "https");
    rc = 0;
out:
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(query);
    curl_url_cleanup(u);
    return rc;
}

/* The API's name as a tag: lower case, [a-z0-9_-], '-' for anything
 * else, at most 32 characters, starting with a letter or digit. */
static char *api_tag(const char *name)
{
    char t[33];
    size_t n = 0;
    for (const char *p = name; *p && n < 32; p++) {
        char c = *p >= 'A' && *p <= 'Z' ? (char)(*p - 'A' + 'a') : *p;
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-'))
            c = '-';
        if (n == 0 && (c == '-' || c == '_'))
            continue;
        t[n++] = c;
    }
    t[n] = '\0';
    return n ? strdup(t) : NULL;
}

int oa_spec_tools(oa_state *st, oa_api *api, const json_t *doc, char *err,
                  size_t err_size)
{
    api->tags[0] = api_tag(api->name);
    /* (an unquoted `openapi: 3.1` in YAML is a number) */
    const json_t *vj = json_object_get(doc, "openapi");
    char vbuf[32];
    if (json_is_real(vj))
        snprintf(vbuf, sizeof vbuf, "%g", json_real_value(vj));
    const char *ver = json_is_real(vj) ? vbuf : json_string_value(vj);
    if (!ver) {
        if (json_object_get(doc, "swagger"))
            snprintf(err, err_size, "api '%s': %s is Swagger 2.0; convert it "
                                    "to OpenAPI 3", api->name, api->spec);
        else
            snprintf(err, err_size, "api '%s': %s has no `openapi` version: "
                                    "not an OpenAPI document", api->name,
                     api->spec);
        return -1;
    }
    bool v30 = !strncmp(ver, "3.0.", 4) || !strcmp(ver, "3.0");
    if (!v30 && strncmp(ver, "3.1.", 4) && strcmp(ver, "3.1")) {
        snprintf(err, err_size, "api '%s': %s: OpenAPI version '%.40s' is "
                                "not supported (3.0.x and 3.1.x are)",
                 api->name, api->spec, ver);
        return -1;
    }
    if (base_url(api, doc, err, err_size) != 0)
        return -1;
    const json_t *paths = json_object_get(doc, "paths");
    if (paths && !json_is_object(paths)) {
        snprintf(err, err_size, "api '%s': paths is not a map", api->name);
        return -1;
    }
    opctx o = {.st = st, .api = api};
    o.c.doc = doc;
    o.c.v30 = v30;
    o.c.err = err;
    o.c.es = err_size;
    o.c.where = api->name;
    size_t count = 0;
    const char *path;
    const json_t *item;
    json_object_foreach((json_t *)paths, path, item)
    {
        o.path = path;
        snprintf(o.where, sizeof o.where, "api '%s': path %.200s", api->name,
                 path);
        o.c.where = o.where;
        if (path[0] != '/' || strpbrk(path, "?#") ||
            strspn(path, "\t\r\n ") || strcspn(path, "\r\n\t ") != strlen(path))
            return bad(&o.c, "a path must start with '/' and hold no "
                             "spaces, '?' or '#'");
        const char *last;
        if (!(item = follow(&o.c, item, &last)))
            return -1;
        for (int m = 0; methods[m]; m++) {
            const json_t *op = json_object_get(item, methods[m]);
            if (!op)
                continue;
            if (!json_is_object(op))
                return bad(&o.c, "%s is not an operation", methods[m]);
            if (++count > OA_MAX_OPS)
                return bad(&o.c, "more than %d operations", OA_MAX_OPS);
            o.method = methods[m];
            o.item = item;
            o.op = op;
            if (build_op(&o) != 0)
                return -1;
        }
    }
    for (uint32_t i = 0; i < st->n_tools; i++)
        st->tools_rw[i].user_data = &st->ops[i];
    return 0;
}
