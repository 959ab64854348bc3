/* params.c - parameter tables from the ABI (toolhost_param) to host-owned
 * th_params: names, types, enums and JSON defaults checked and converted.
 *
 * Nothing here keeps a pointer into plugin memory: every string is copied,
 * and defaults are parsed from JSON (jansson) and stored as msgpack, so a
 * th_param outlives the plugin that declared it.  Pure functions, safe from
 * any thread. */
#include <jansson.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/jschema.h"
#include "th/json.h"
#include "th/tool.h"

#define MAX_ENUM 1024 /* a guard against a missing NULL terminator */

bool th_tool_name_valid(const char *name)
{
    if (!name)
        return false;
    size_t n = 0;
    for (const char *s = name; *s; s++, n++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '_' || c == '-';
        if (!ok || n >= 64)
            return false;
    }
    return n >= 1;
}

/* ^[a-z0-9][a-z0-9_-]{0,31}$ (a tag a plugin declares, ABI 1.5) */
bool th_tag_name_valid(const char *name)
{
    if (!name || !name[0] || name[0] == '_' || name[0] == '-')
        return false;
    size_t n = 0;
    for (const char *s = name; *s; s++, n++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
        if (!ok || n >= 32)
            return false;
    }
    return true;
}

bool th_tool_has_tag(const th_tool *t, const char *tag)
{
    for (size_t i = 0; i < t->n_tags; i++)
        if (strcmp(t->tags[i], tag) == 0)
            return true;
    return false;
}

/* ^[a-zA-Z_][a-zA-Z0-9_]{0,63}$ */
bool th_param_name_valid(const char *name)
{
    if (!name || !name[0])
        return false;
    if (name[0] >= '0' && name[0] <= '9')
        return false;
    size_t n = 0;
    for (const char *s = name; *s; s++, n++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '_';
        if (!ok || n >= 64)
            return false;
    }
    return true;
}

const char *th_type_name(uint32_t type)
{
    switch (type) {
    case TOOLHOST_TYPE_STRING:
        return "string";
    case TOOLHOST_TYPE_INTEGER:
        return "integer";
    case TOOLHOST_TYPE_NUMBER:
        return "number";
    case TOOLHOST_TYPE_BOOLEAN:
        return "boolean";
    case TOOLHOST_TYPE_ARRAY:
        return "array";
    case TOOLHOST_TYPE_OBJECT:
        return "object";
    default:
        return "unknown";
    }
}

void th_params_free(th_param *params, size_t n)
{
    if (!params)
        return;
    for (size_t i = 0; i < n; i++) {
        th_param *p = &params[i];
        free(p->name);
        free(p->description);
        if (p->enum_values) {
            for (size_t j = 0; j < p->n_enum; j++)
                free(p->enum_values[j]);
            free(p->enum_values);
        }
        free(p->default_mp);
        free(p->pattern);
        free(p->schema_json);
        th_jschema_free(p->cons);
    }
    free(params);
}

/* Does a JSON value have the parameter type `type` (0 = any)? */
static bool json_matches(uint32_t type, const json_t *j)
{
    switch (type) {
    case 0:
        return true;
    case TOOLHOST_TYPE_STRING:
        return json_is_string(j);
    case TOOLHOST_TYPE_INTEGER:
        return json_is_integer(j);
    case TOOLHOST_TYPE_NUMBER:
        return json_is_number(j);
    case TOOLHOST_TYPE_BOOLEAN:
        return json_is_boolean(j);
    case TOOLHOST_TYPE_ARRAY:
        return json_is_array(j);
    case TOOLHOST_TYPE_OBJECT:
        return json_is_object(j);
    default:
        return false;
    }
}

/* Checks and converts one default.  Fills p->default_mp. */
static int convert_default(const char *what, const char *json, th_param *p,
                           th_error *err)
{
    json_error_t jerr;
    json_t *j = json_loads(json, JSON_DECODE_ANY, &jerr);
    if (!j)
        return th_error_set(err, TH_ELOAD,
                            "%s: parameter '%s' has a default that is not "
                            "valid JSON (%s): %s",
                            what, p->name, jerr.text, json);
    int rc = 0;
    if (!json_matches(p->type, j)) {
        rc = th_error_set(err, TH_ELOAD,
                          "%s: parameter '%s' has a default %s that is not "
                          "of its type %s",
                          what, p->name, json, th_type_name(p->type));
        goto out;
    }
    if (p->type == TOOLHOST_TYPE_ARRAY && p->item_type) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v)
        {
            if (!json_matches(p->item_type, v)) {
                rc = th_error_set(err, TH_ELOAD,
                                  "%s: parameter '%s' has a default whose "
                                  "item %zu is not of the item type %s",
                                  what, p->name, i,
                                  th_type_name(p->item_type));
                goto out;
            }
        }
    }
    if (p->n_enum) {
        bool found = false;
        for (size_t i = 0; i < p->n_enum && !found; i++)
            found = strcmp(p->enum_values[i], json_string_value(j)) == 0;
        if (!found) {
            rc = th_error_set(err, TH_ELOAD,
                              "%s: parameter '%s' has a default %s that is "
                              "not one of its enum values",
                              what, p->name, json);
            goto out;
        }
    }
    th_buf b = TH_BUF_INIT;
    if (th_json_to_msgpack(j, &b)) {
        th_buf_destroy(&b);
        rc = th_error_set(err, TH_ELOAD,
                          "%s: parameter '%s' has a default that cannot be "
                          "converted to msgpack (out of memory, or an "
                          "integer beyond 64 bits): %s",
                          what, p->name, json);
        goto out;
    }
    p->default_mp = th_buf_take(&b, &p->default_len);
out:
    json_decref(j);
    return rc;
}

static int copy_enum(const char *what, const char *const *vals, th_param *p,
                     th_error *err)
{
    size_t n = 0;
    while (n < MAX_ENUM && vals[n])
        n++;
    if (n == 0)
        return th_error_set(err, TH_ELOAD,
                            "%s: parameter '%s' has an empty enum (give at "
                            "least one value, or enum_values = NULL)",
                            what, p->name);
    if (n == MAX_ENUM)
        return th_error_set(err, TH_ELOAD,
                            "%s: parameter '%s' has more than %d enum values "
                            "(is the list NULL-terminated?)",
                            what, p->name, MAX_ENUM - 1);
    p->enum_values = calloc(n, sizeof *p->enum_values);
    if (!p->enum_values)
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", what);
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < i; k++)
            if (strcmp(vals[k], vals[i]) == 0)
                return th_error_set(err, TH_ELOAD,
                                    "%s: parameter '%s' lists the enum "
                                    "value '%s' twice",
                                    what, p->name, vals[i]);
        p->enum_values[i] = strdup(vals[i]);
        if (!p->enum_values[i])
            return th_error_set(err, TH_ENOMEM, "%s: out of memory", what);
        p->n_enum = i + 1;
    }
    return 0;
}

/* The ABI 1.1 members: bounds, lengths, pattern, item limits and
 * schema_json, checked against the type and compiled into p->cons. */
static int convert_constraints(const char *what, const toolhost_param *a,
                               th_param *p, th_error *err)
{
    bool num = a->type == TOOLHOST_TYPE_INTEGER ||
               a->type == TOOLHOST_TYPE_NUMBER;
    const char *misplaced = NULL;
    if (a->bounds && !num)
        misplaced = "minimum/maximum (only for integers and numbers)";
    else if ((a->min_length || a->max_length || a->pattern) &&
             a->type != TOOLHOST_TYPE_STRING)
        misplaced = "min_length/max_length/pattern (only for strings)";
    else if ((a->min_items || a->max_items) && a->type != TOOLHOST_TYPE_ARRAY)
        misplaced = "min_items/max_items (only for arrays)";
    else if (a->schema_json && a->type != TOOLHOST_TYPE_OBJECT &&
             a->type != TOOLHOST_TYPE_ARRAY)
        misplaced = "schema_json (only for objects and arrays)";
    if (misplaced)
        return th_error_set(err, TH_ELOAD,
                            "%s: parameter '%s' of type %s has %s", what,
                            p->name, th_type_name(a->type), misplaced);
    if (a->bounds & ~(uint32_t)0xf)
        return th_error_set(err, TH_ELOAD,
                            "%s: parameter '%s' has unknown bounds bits 0x%x",
                            what, p->name, a->bounds & ~(uint32_t)0xf);
    uint32_t b = a->bounds;
    bool has_lo = b & (TOOLHOST_BOUND_MINIMUM |
                       TOOLHOST_BOUND_EXCLUSIVE_MINIMUM),
         has_hi = b & (TOOLHOST_BOUND_MAXIMUM |
                       TOOLHOST_BOUND_EXCLUSIVE_MAXIMUM);
    if ((has_lo && a->minimum != a->minimum) ||
        (has_hi && a->maximum != a->maximum) ||
        (has_lo && has_hi && a->minimum > a->maximum))
        return th_error_set(err, TH_ELOAD,
                            "%s: parameter '%s' has bounds that no value "
                            "meets (minimum %g, maximum %g)",
                            what, p->name, a->minimum, a->maximum);
    if ((a->max_length && a->min_length > a->max_length) ||
        (a->max_items && a->min_items > a->max_items))
        return th_error_set(err, TH_ELOAD,
                            "%s: parameter '%s' has a minimum length or item "
                            "count above its maximum",
                            what, p->name);
    p->minimum = a->minimum;
    p->maximum = a->maximum;
    p->bounds = b;
    p->min_length = a->min_length;
    p->max_length = a->max_length;
    p->min_items = a->min_items;
    p->max_items = a->max_items;
    if (!b && !a->min_length && !a->max_length && !a->pattern &&
        !a->min_items && !a->max_items && !a->schema_json)
        return 0;
    char swhat[160];
    snprintf(swhat, sizeof swhat, "%s: parameter '%s'", what, p->name);
    if (a->schema_json) {
        if (!(p->schema_json = strdup(a->schema_json)))
            return th_error_set(err, TH_ENOMEM, "%s: out of memory", what);
        char sw[200];
        snprintf(sw, sizeof sw, "%s: schema_json", swhat);
        int rc = th_jschema_compile(sw, a->schema_json, &p->cons, err);
        if (rc)
            return rc;
    } else if (!(p->cons = th_jschema_new())) {
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", what);
    }
    th_jschema *c = p->cons;
    if (b & TOOLHOST_BOUND_MINIMUM) {
        c->has_min = true;
        c->min = a->minimum;
    }
    if (b & TOOLHOST_BOUND_EXCLUSIVE_MINIMUM) {
        c->has_xmin = true;
        c->xmin = a->minimum;
    }
    if (b & TOOLHOST_BOUND_MAXIMUM) {
        c->has_max = true;
        c->max = a->maximum;
    }
    if (b & TOOLHOST_BOUND_EXCLUSIVE_MAXIMUM) {
        c->has_xmax = true;
        c->xmax = a->maximum;
    }
    if (a->min_length)
        c->min_len = a->min_length;
    if (a->max_length)
        c->max_len = a->max_length;
    if (a->min_items)
        c->min_items = a->min_items;
    if (a->max_items)
        c->max_items = a->max_items;
    if (a->pattern) {
        if (!(p->pattern = strdup(a->pattern)))
            return th_error_set(err, TH_ENOMEM, "%s: out of memory", what);
        int rc = th_jschema_set_pattern(c, swhat, a->pattern, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int convert_one(const char *what, const toolhost_param *a, size_t idx,
                       th_param *p, th_error *err)
{
    if (!th_param_name_valid(a->name)) {
        if (!a->name)
            return th_error_set(err, TH_ELOAD,
                                "%s: parameter #%zu has no name", what,
                                idx + 1);
        return th_error_set(err, TH_ELOAD,
                            "%s: parameter '%.80s' has an invalid name "
                            "(allowed: a letter or _, then letters, digits "
                            "or _, at most 64)",
                            what, a->name);
    }
    if (!(p->name = strdup(a->name)))
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", what);
    if (a->type < TOOLHOST_TYPE_STRING || a->type > TOOLHOST_TYPE_OBJECT)
        return th_error_set(err, TH_ELOAD,
                            "%s: parameter '%s' has an unknown type %u "
                            "(known: 1 string, 2 integer, 3 number, 4 "
                            "boolean, 5 array, 6 object)",
                            what, p->name, a->type);
    p->type = (toolhost_type)a->type;
    if (a->item_type) {
        if (a->type != TOOLHOST_TYPE_ARRAY)
            return th_error_set(err, TH_ELOAD,
                                "%s: parameter '%s' has an item_type but is "
                                "of type %s (item_type is only for arrays)",
                                what, p->name, th_type_name(a->type));
        if (a->item_type > TOOLHOST_TYPE_OBJECT)
            return th_error_set(err, TH_ELOAD,
                                "%s: parameter '%s' has an unknown item "
                                "type %u",
                                what, p->name, a->item_type);
    }
    p->item_type = a->item_type;
    p->required = a->required != 0;
    if (!a->description || !a->description[0])
        return th_error_set(err, TH_ELOAD,
                            "%s: parameter '%s' has no description (a model "
                            "needs one line saying what it is)",
                            what, p->name);
    if (!(p->description = strdup(a->description)))
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", what);
    if (a->enum_values) {
        if (a->type != TOOLHOST_TYPE_STRING)
            return th_error_set(err, TH_ELOAD,
                                "%s: parameter '%s' has enum values but is "
                                "of type %s (enums are only for strings)",
                                what, p->name, th_type_name(a->type));
        int rc = copy_enum(what, a->enum_values, p, err);
        if (rc)
            return rc;
    }
    if (TOOLHOST_HAS_MEMBER(toolhost_param, a, schema_json)) {
        int rc = convert_constraints(what, a, p, err);
        if (rc)
            return rc;
    }
    if (a->default_json) {
        if (p->required)
            return th_error_set(err, TH_ELOAD,
                                "%s: parameter '%s' is required and has a "
                                "default (a default is only for optional "
                                "parameters)",
                                what, p->name);
        int rc = convert_default(what, a->default_json, p, err);
        if (rc || !p->cons)
            return rc;
        /* The default must satisfy the constraints it comes with. */
        msgpack_zone z;
        if (!msgpack_zone_init(&z, 512))
            return th_error_set(err, TH_ENOMEM, "%s: out of memory", what);
        msgpack_object o;
        size_t off = 0;
        char msg[300];
        if (msgpack_unpack((const char *)p->default_mp, p->default_len, &off,
                           &z, &o) == MSGPACK_UNPACK_SUCCESS &&
            th_jschema_check(p->cons, &o, msg, sizeof msg) != 0)
            rc = th_error_set(err, TH_ELOAD,
                              "%s: parameter '%s' has a default %s that "
                              "breaks its own constraints: %s",
                              what, p->name, a->default_json, msg);
        msgpack_zone_destroy(&z);
        return rc;
    }
    return 0;
}

int th_params_from_abi(const char *what, const toolhost_param *params,
                       uint32_t n, th_param **out, size_t *n_out,
                       th_error *err)
{
    return th_params_from_abi_r(what, params, n, NULL, NULL, out, n_out,
                                err);
}

int th_params_from_abi_r(const char *what, const toolhost_param *params,
                         uint32_t n, th_problem_fn report, void *ud,
                         th_param **out, size_t *n_out, th_error *err)
{
    *out = NULL;
    *n_out = 0;
    if (n == 0)
        return 0;
    if (!params)
        return th_error_set(err, TH_ELOAD,
                            "%s: n_params is %u but params is NULL", what, n);
    uint32_t stride = params[0].struct_size;
    if (stride < TH_ABI10_PARAM_SIZE)
        return th_error_set(err, TH_ELOAD,
                            "%s: toolhost_param struct_size %u is smaller "
                            "than the %zu bytes of ABI 1.0",
                            what, stride, TH_ABI10_PARAM_SIZE);
    if (stride % alignof(toolhost_param))
        return th_error_set(err, TH_ELOAD,
                            "%s: toolhost_param struct_size %u is not a "
                            "multiple of its alignment %zu",
                            what, stride, alignof(toolhost_param));
    th_param *ps = calloc(n, sizeof *ps);
    if (!ps)
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", what);
    int rc = 0;
    for (uint32_t i = 0; i < n; i++) {
        const toolhost_param *a =
            (const toolhost_param *)((const char *)params +
                                     (size_t)i * stride);
        if (a->struct_size != stride) {
            rc = th_error_set(err, TH_ELOAD,
                              "%s: parameter #%u has struct_size %u, the "
                              "first has %u (all must be the same)",
                              what, i + 1, a->struct_size, stride);
            break;
        }
        /* A bad parameter is reported and the next one checked when
         * report() says to go on (`toolhost check`: every problem). */
        if ((rc = convert_one(what, a, i, &ps[i], err))) {
            if (report && (rc = report(ud, err, rc)) == 0)
                continue;
            break;
        }
        for (uint32_t k = 0; k < i; k++) {
            if (ps[k].name && strcmp(ps[k].name, ps[i].name) == 0) {
                rc = th_error_set(err, TH_ELOAD,
                                  "%s: parameter '%s' appears twice", what,
                                  ps[i].name);
                break;
            }
        }
        if (rc && report && (rc = report(ud, err, rc)) == 0)
            continue;
        if (rc)
            break;
    }
    if (rc) {
        th_params_free(ps, n);
        return rc;
    }
    *out = ps;
    *n_out = n;
    return 0;
}
