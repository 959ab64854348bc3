/* schema.c - JSON Schemas, detailed descriptions, function-calling exports
 * and the tools.list entry, from one builder (th/schema.h). */
#include "th/schema.h"

#include <ctype.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "th/buf.h"
#include "th/json.h"
#include "th/config.h"
#include "th/perm.h"
#include "toolhost/plugin.h"

/* ---- names --------------------------------------------------------------- */

th_export_format th_export_format_from_name(const char *name)
{
    if (!name)
        return 0;
    if (strcmp(name, "openai") == 0)
        return TH_EXPORT_OPENAI;
    if (strcmp(name, "anthropic") == 0)
        return TH_EXPORT_ANTHROPIC;
    if (strcmp(name, "jsonschema") == 0)
        return TH_EXPORT_JSONSCHEMA;
    if (strcmp(name, "openai-responses") == 0)
        return TH_EXPORT_OPENAI_RESPONSES;
    if (strcmp(name, "gemini") == 0)
        return TH_EXPORT_GEMINI;
    return 0;
}

const char *th_export_format_name(th_export_format f)
{
    switch (f) {
    case TH_EXPORT_OPENAI:
        return "openai";
    case TH_EXPORT_ANTHROPIC:
        return "anthropic";
    case TH_EXPORT_JSONSCHEMA:
        return "jsonschema";
    case TH_EXPORT_OPENAI_RESPONSES:
        return "openai-responses";
    case TH_EXPORT_GEMINI:
        return "gemini";
    }
    return NULL;
}

/* ---- the parameters schema -------------------------------------------- */

/* The ABI 1.1 constraints of a parameter as JSON Schema keywords. */
static int param_constraints(json_t *s, const th_param *p)
{
    int rc = 0;
    uint32_t b = p->bounds;
    if (b & TOOLHOST_BOUND_MINIMUM)
        rc |= json_object_set_new(s, "minimum", th_schema_number(p->type,
                                                                 p->minimum));
    if (b & TOOLHOST_BOUND_EXCLUSIVE_MINIMUM)
        rc |= json_object_set_new(s, "exclusiveMinimum",
                                  th_schema_number(p->type, p->minimum));
    if (b & TOOLHOST_BOUND_MAXIMUM)
        rc |= json_object_set_new(s, "maximum", th_schema_number(p->type,
                                                                 p->maximum));
    if (b & TOOLHOST_BOUND_EXCLUSIVE_MAXIMUM)
        rc |= json_object_set_new(s, "exclusiveMaximum",
                                  th_schema_number(p->type, p->maximum));
    if (p->min_length)
        rc |= json_object_set_new(s, "minLength",
                                  json_integer(p->min_length));
    if (p->max_length)
        rc |= json_object_set_new(s, "maxLength",
                                  json_integer(p->max_length));
    if (p->pattern)
        rc |= json_object_set_new(s, "pattern", json_string(p->pattern));
    if (p->min_items)
        rc |= json_object_set_new(s, "minItems", json_integer(p->min_items));
    if (p->max_items)
        rc |= json_object_set_new(s, "maxItems", json_integer(p->max_items));
    return rc;
}

json_t *th_schema_number(uint32_t type, double v)
{
    if (type == TOOLHOST_TYPE_INTEGER && v >= -9007199254740992.0 &&
        v <= 9007199254740992.0 && v == (double)(json_int_t)v)
        return json_integer((json_int_t)v);
    return json_real(v);
}

json_t *th_schema_output(const th_tool *tool)
{
    if (!tool->output_schema)
        return NULL;
    return json_loads(tool->output_schema, JSON_DECODE_ANY, NULL);
}

json_t *th_schema_tags(const th_tool *tool)
{
    if (!tool->n_tags)
        return NULL;
    json_t *a = json_array();
    for (size_t i = 0; a && i < tool->n_tags; i++)
        if (json_array_append_new(a, json_string(tool->tags[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

bool th_schema_output_is_object(const json_t *schema)
{
    const char *t = json_string_value(json_object_get(schema, "type"));
    return json_is_object(schema) && t && strcmp(t, "object") == 0;
}

bool th_schema_tool_output_object(const th_tool *tool)
{
    if (!tool->output_schema)
        return false;
    /* the cache is the one member of a shared, read-only th_tool written
     * after it is built: an atomic, and the same value from any thread */
    _Atomic int *k = (_Atomic int *)&tool->output_object;
    int v = atomic_load_explicit(k, memory_order_relaxed);
    if (!v) {
        json_t *os = th_schema_output(tool);
        /* the schema was checked at load: one that does not parse now
         * is memory short for this call, not the tool's answer */
        if (!os)
            return false;
        v = th_schema_output_is_object(os) ? 1 : 2;
        json_decref(os);
        atomic_store_explicit(k, v, memory_order_relaxed);
    }
    return v == 1;
}

static json_t *param_schema(const th_param *p)
{
    /* schema_json (ABI 1.1) is exported as is, with the parameter's own
     * type, description, default and bounds put over it. */
    json_t *s = p->schema_json ? json_loads(p->schema_json, 0, NULL)
                               : json_object();
    if (s && !json_is_object(s)) {
        json_decref(s);
        s = json_object();
    }
    if (!s)
        return NULL;
    int rc = 0;
    const char *t = th_type_name(p->type);
    if (t)
        rc |= json_object_set_new(s, "type", json_string(t));
    if (p->description)
        rc |= json_object_set_new(s, "description",
                                  json_string(p->description));
    if (p->n_enum) {
        json_t *e = json_array();
        rc |= json_object_set_new(s, "enum", e);
        for (size_t i = 0; e && i < p->n_enum; i++)
            rc |= json_array_append_new(e, json_string(p->enum_values[i]));
    }
    if (p->type == TOOLHOST_TYPE_ARRAY && p->item_type &&
        !json_object_get(s, "items")) {
        const char *it = th_type_name(p->item_type);
        if (it)
            rc |= json_object_set_new(s, "items", json_pack("{s:s}", "type",
                                                            it));
    }
    rc |= param_constraints(s, p);
    rc |= param_constraints(s, p);
    if (p->default_mp) {
        json_t *d = th_json_from_msgpack(p->default_mp, p->default_len, NULL);
        if (d)
            rc |= json_object_set_new(s, "default", d);
    }
    if (rc) {
        json_decref(s);
        return NULL;
    }
    return s;
}

json_t *th_schema_params(const th_tool *tool)
{
    if (tool->input_schema) {
        /* ABI 1.4: the tool's own, as written, plus what the host adds
         * to a listed copy (confirm_duplicate, session.c), whose
         * arguments the host takes off before the schema checks them */
        json_t *s = json_loads(tool->input_schema, 0, NULL);
        json_t *props = json_object_get(s, "properties");
        if (s && tool->n_params && !props) {
            props = json_object();
            json_object_set_new(s, "properties", props);
        }
        for (size_t i = 0; s && props && i < tool->n_params; i++) {
            json_t *ps = param_schema(&tool->params[i]);
            if (!ps || json_object_set_new(props, tool->params[i].name, ps)) {
                json_decref(s);
                return NULL;
            }
        }
        return s;
    }
    json_t *s = json_object(), *props = json_object(), *req = json_array();
    int rc = !s || !props || !req;
    for (size_t i = 0; !rc && i < tool->n_params; i++) {
        const th_param *p = &tool->params[i];
        json_t *ps = param_schema(p);
        rc |= !ps || json_object_set_new(props, p->name, ps) != 0;
        if (p->required)
            rc |= json_array_append_new(req, json_string(p->name));
    }
    if (!rc) {
        rc |= json_object_set_new(s, "type", json_string("object"));
        rc |= json_object_set(s, "properties", props);
        if (json_array_size(req))
            rc |= json_object_set(s, "required", req);
        rc |= json_object_set_new(s, "additionalProperties", json_false());
    }
    json_decref(props);
    json_decref(req);
    if (rc) {
        json_decref(s);
        return NULL;
    }
    return s;
}

/* ---- descriptions -------------------------------------------------------- */

static size_t utf8_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            c++;
    return c;
}

/* The byte length of the first `chars` characters of s[0..n). */
static size_t utf8_prefix(const char *s, size_t n, size_t chars)
{
    size_t c = 0, i = 0;
    for (; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (c == chars)
                break;
            c++;
        }
    }
    return i;
}

/* The long description tidied: trailing blanks cut from every line, no
 * blank lines at either end, never two blank lines in a row, and a blank
 * line before every "## " heading.  Appended to `out`. */
static int normalize_long(const char *s, th_buf *out)
{
    int rc = 0;
    bool pending_blank = false, any = false;
    while (*s) {
        size_t n = strcspn(s, "\n");
        size_t e = n;
        while (e > 0 && (s[e - 1] == ' ' || s[e - 1] == '\t' ||
                         s[e - 1] == '\r'))
            e--;
        if (e == 0) {
            pending_blank = any;
        } else {
            if (any && (pending_blank || strncmp(s, "## ", 3) == 0))
                rc |= th_buf_puts(out, "\n");
            if (any)
                rc |= th_buf_puts(out, "\n");
            rc |= th_buf_append(out, s, e);
            any = true;
            pending_blank = false;
        }
        s += n;
        if (*s == '\n')
            s++;
    }
    return rc ? TH_ENOMEM : 0;
}

char *th_schema_description(const th_tool *tool, size_t max_chars)
{
    th_buf b = TH_BUF_INIT;
    const char *d = tool->description ? tool->description : "";
    int rc = th_buf_puts(&b, d);
    th_buf lb = TH_BUF_INIT;
    if (tool->long_description)
        rc |= normalize_long(tool->long_description, &lb);
    if (rc) {
        th_buf_destroy(&b);
        th_buf_destroy(&lb);
        return NULL;
    }
    if (max_chars && utf8_chars((char *)b.data, b.len) > max_chars) {
        b.len = utf8_prefix((char *)b.data, b.len, max_chars);
        b.data[b.len] = '\0';
    } else if (lb.len) {
        /* whole paragraphs while they fit; a heading stays with the
         * paragraph after it */
        const char *p = (const char *)lb.data, *end = p + lb.len;
        size_t used = utf8_chars((char *)b.data, b.len);
        while (p < end) {
            const char *q = strstr(p, "\n\n");
            if (!q)
                q = end;
            if (strncmp(p, "## ", 3) == 0 &&
                !memchr(p, '\n', (size_t)(q - p)) && q < end) {
                const char *q2 = strstr(q + 2, "\n\n");
                q = q2 ? q2 : end;
            }
            size_t add = 2 + utf8_chars(p, (size_t)(q - p));
            if (max_chars && used + add > max_chars)
                break;
            rc |= th_buf_puts(&b, "\n\n");
            rc |= th_buf_append(&b, p, (size_t)(q - p));
            used += add;
            p = q < end ? q + 2 : end;
        }
    }
    th_buf_destroy(&lb);
    if (rc) {
        th_buf_destroy(&b);
        return NULL;
    }
    if (!b.data && th_buf_puts(&b, "") != 0)
        return NULL;
    return (char *)th_buf_take(&b, NULL);
}

static int describe_param(th_buf *b, const th_param *p)
{
    int rc = th_buf_printf(b, "- `%s` (%s", p->name, th_type_name(p->type));
    if (p->type == TOOLHOST_TYPE_ARRAY && p->item_type)
        rc |= th_buf_printf(b, " of %s", th_type_name(p->item_type));
    rc |= th_buf_puts(b, p->required ? ", required" : ", optional");
    if (p->n_enum) {
        rc |= th_buf_puts(b, "; one of ");
        for (size_t i = 0; i < p->n_enum; i++) {
            json_t *s = json_string(p->enum_values[i]);
            char *t = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
            rc |= t ? th_buf_printf(b, "%s%s", i ? ", " : "", t) : TH_ENOMEM;
            free(t);
            json_decref(s);
        }
    }
    if (p->bounds & (TOOLHOST_BOUND_MINIMUM | TOOLHOST_BOUND_EXCLUSIVE_MINIMUM))
        rc |= th_buf_printf(b, "; %s %.17g",
                            p->bounds & TOOLHOST_BOUND_MINIMUM ? ">=" : ">",
                            p->minimum);
    if (p->bounds & (TOOLHOST_BOUND_MAXIMUM | TOOLHOST_BOUND_EXCLUSIVE_MAXIMUM))
        rc |= th_buf_printf(b, "; %s %.17g",
                            p->bounds & TOOLHOST_BOUND_MAXIMUM ? "<=" : "<",
                            p->maximum);
    if (p->max_length)
        rc |= th_buf_printf(b, "; %u to %u characters", p->min_length,
                            p->max_length);
    else if (p->min_length)
        rc |= th_buf_printf(b, "; at least %u characters", p->min_length);
    if (p->pattern)
        rc |= th_buf_printf(b, "; matching /%s/", p->pattern);
    if (p->max_items)
        rc |= th_buf_printf(b, "; %u to %u items", p->min_items,
                            p->max_items);
    else if (p->min_items)
        rc |= th_buf_printf(b, "; at least %u items", p->min_items);
    if (p->default_mp) {
        json_t *d = th_json_from_msgpack(p->default_mp, p->default_len, NULL);
        char *t = d ? json_dumps(d, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        if (t)
            rc |= th_buf_printf(b, "; default %s", t);
        free(t);
        json_decref(d);
    }
    rc |= th_buf_printf(b, "): %s\n", p->description ? p->description : "");
    return rc ? TH_ENOMEM : 0;
}

char *th_schema_describe(const th_tool *tool)
{
    th_buf b = TH_BUF_INIT;
    int rc = th_buf_printf(&b, "# %s\n\n%s\n", tool->name,
                           tool->description ? tool->description : "");
    if (tool->long_description) {
        th_buf lb = TH_BUF_INIT;
        rc |= normalize_long(tool->long_description, &lb);
        if (lb.len)
            rc |= th_buf_printf(&b, "\n%s\n", (char *)lb.data);
        th_buf_destroy(&lb);
    }
    rc |= th_buf_puts(&b, "\n## Parameters\n\n");
    if (tool->input_schema)
        rc |= th_buf_printf(&b, "One JSON Schema:\n\n%s\n",
                            tool->input_schema);
    else if (tool->n_params == 0)
        rc |= th_buf_puts(&b, "None.\n");
    for (size_t i = 0; i < tool->n_params; i++)
        rc |= describe_param(&b, &tool->params[i]);
    rc |= th_buf_printf(&b, "\n## Output\n\nstdout: %s; stderr: %s.\n",
                        th_sem_name(tool->stdout_type),
                        th_sem_name(tool->stderr_type));
    uint32_t fl = tool->flags & ~TH_PERM_FLAG_NEEDS;
    if (fl) {
        rc |= th_buf_puts(&b, "Flags:");
        int k = 0;
        for (uint32_t bit = 1; bit && bit <= fl; bit <<= 1) {
            const char *n = (fl & bit) ? th_perm_flag_name(bit) : NULL;
            if (n)
                rc |= th_buf_printf(&b, "%s %s", k++ ? "," : "", n);
        }
        rc |= th_buf_puts(&b, ".\n");
    }
    for (size_t i = 0; i < tool->n_tags; i++) /* ABI 1.5 */
        rc |= th_buf_printf(&b, "%s%s%s", i ? ", " : "Tags: ", tool->tags[i],
                            i + 1 == tool->n_tags ? ".\n" : "");
    if (rc) {
        th_buf_destroy(&b);
        return NULL;
    }
    return (char *)th_buf_take(&b, NULL);
}

/* ---- exports ------------------------------------------------------------- */

static int by_name(const void *a, const void *b)
{
    const th_tool *x = *(const th_tool *const *)a;
    const th_tool *y = *(const th_tool *const *)b;
    return strcmp(x->name, y->name);
}

static json_t *export_one(const th_tool *t, th_export_format fmt)
{
    json_t *params = th_schema_params(t);
    char *desc = fmt == TH_EXPORT_OPENAI
                     ? th_schema_description_fit(t, TH_SCHEMA_OPENAI_DESC_MAX)
                     : th_schema_description(t, 0);
    json_t *r = NULL;
    if (params && desc) {
        switch (fmt) {
        case TH_EXPORT_OPENAI:
            r = json_pack("{s:s, s:{s:s, s:s, s:O}}", "type", "function",
                          "function", "name", t->name, "description", desc,
                          "parameters", params);
            break;
        case TH_EXPORT_ANTHROPIC:
            r = json_pack("{s:s, s:s, s:O}", "name", t->name, "description",
                          desc, "input_schema", params);
            break;
        case TH_EXPORT_OPENAI_RESPONSES: /* th_schema_export_ex */
            break;
        case TH_EXPORT_GEMINI: {
            json_t *g = th_schema_gemini(params);
            r = g ? json_pack("{s:s, s:s, s:o}", "name", t->name,
                              "description", desc, "parameters", g)
                  : NULL;
            break;
        }
        case TH_EXPORT_JSONSCHEMA:
            r = json_pack("{s:s, s:s, s:s}", "$schema",
                          "https://json-schema.org/draft/2020-12/schema",
                          "title", t->title ? t->title : t->name,
                          "description", desc);
            if (r && json_object_update(r, params) != 0) {
                json_decref(r);
                r = NULL;
            }
            /* The plugin's tags (ABI 1.5) ride along as an annotation
             * too, only when it declares some. */
            json_t *tg = r && t->n_tags ? th_schema_tags(t) : NULL;
            if (r && t->n_tags &&
                (!tg || json_object_set_new(r, "x-toolhost-tags", tg))) {
                json_decref(r);
                r = NULL;
            }
            /* The output schema rides along as an annotation (an unknown
             * keyword to validators), for generators and MCP fronts. */
            json_t *os = th_schema_output(t);
            if (r && os && json_object_set_new(r, "outputSchema", os) != 0) {
                json_decref(r);
                r = NULL;
            } else if (!r) {
                json_decref(os);
            }
            break;
        }
    }
    json_decref(params);
    free(desc);
    return r;
}

json_t *th_schema_export(const th_tool *const *tools, size_t n,
                         th_export_format fmt, th_error *err)
{
    if (fmt == TH_EXPORT_OPENAI_RESPONSES)
        return th_schema_export_ex(tools, n, fmt, NULL, err);
    if (!th_export_format_name(fmt)) {
        th_error_set(err, TH_EINVAL,
                     "unknown export format (use openai, openai-responses, "
                     "anthropic, gemini or jsonschema)");
        return NULL;
    }
    const th_tool **sorted = malloc((n ? n : 1) * sizeof *sorted);
    json_t *out = fmt == TH_EXPORT_JSONSCHEMA ? json_object() : json_array();
    if (!sorted || !out) {
        free(sorted);
        json_decref(out);
        th_error_set(err, TH_ENOMEM, "out of memory");
        return NULL;
    }
    if (n)
        memcpy(sorted, tools, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, by_name);
    for (size_t i = 0; i < n; i++) {
        json_t *one = export_one(sorted[i], fmt);
        int rc = !one;
        if (!rc && fmt == TH_EXPORT_JSONSCHEMA)
            rc = json_object_set_new(out, sorted[i]->name, one);
        else if (!rc)
            rc = json_array_append_new(out, one);
        if (rc) {
            free(sorted);
            json_decref(out);
            th_error_set(err, TH_ENOMEM, "out of memory");
            return NULL;
        }
    }
    free(sorted);
    if (fmt == TH_EXPORT_GEMINI) {
        json_t *tool = json_pack("{s:o}", "functionDeclarations", out);
        if (!tool)
            th_error_set(err, TH_ENOMEM, "out of memory");
        return tool;
    }
    return out;
}

char *th_schema_export_text(const th_tool *const *tools, size_t n,
                            th_export_format fmt, th_error *err)
{
    json_t *j = th_schema_export(tools, n, fmt, err);
    if (!j)
        return NULL;
    char *s = json_dumps(j, JSON_INDENT(2));
    json_decref(j);
    size_t len = s ? strlen(s) : 0;
    char *r = s ? realloc(s, len + 2) : NULL;
    if (!r) {
        free(s);
        th_error_set(err, TH_ENOMEM, "out of memory");
        return NULL;
    }
    r[len] = '\n';
    r[len + 1] = '\0';
    return r;
}

/* ---- tools.list ---------------------------------------------------------- */

#define PACK_KEY(pk, s) msgpack_pack_str_with_body((pk), (s), sizeof(s) - 1)


int th_schema_pack_tool(struct msgpack_packer *pk, const th_tool *tool)
{
    json_t *params = th_schema_params(tool);
    if (!params)
        return TH_ENOMEM;
    json_t *os = th_schema_output(tool);
    bool plugin = tool->plugin && tool->plugin->name;
    int rc = msgpack_pack_map(pk, 7 + (tool->title != NULL) + (os != NULL) +
                                      plugin + (tool->n_tags != 0));
    /* the plugin's config name (`toolhost list --connect` shows it) */
    if (plugin) {
        rc |= PACK_KEY(pk, "plugin");
        rc |= th_pack_cstr(pk, tool->plugin->name);
    }
    /* ABI 1.1 keys, only when the tool has them. */
    if (tool->title) {
        rc |= PACK_KEY(pk, "title");
        rc |= th_pack_cstr(pk, tool->title);
    }
    if (os) {
        rc |= PACK_KEY(pk, "output_schema");
        if (rc == 0)
            rc = th_json_pack(os, pk);
        json_decref(os);
    }
    /* ABI 1.5: the plugin's tags, only when it declares some. */
    if (tool->n_tags) {
        rc |= PACK_KEY(pk, "tags");
        rc |= msgpack_pack_array(pk, tool->n_tags);
        for (size_t i = 0; i < tool->n_tags; i++)
            rc |= th_pack_cstr(pk, tool->tags[i]);
    }
    rc |= PACK_KEY(pk, "name");
    rc |= th_pack_cstr(pk, tool->name);
    rc |= PACK_KEY(pk, "description");
    rc |= th_pack_cstr(pk, tool->description ? tool->description : "");
    rc |= PACK_KEY(pk, "long_description");
    rc |= th_pack_cstr(pk, tool->long_description);
    rc |= PACK_KEY(pk, "parameters");
    if (rc == 0)
        rc = th_json_pack(params, pk);
    json_decref(params);
    rc |= PACK_KEY(pk, "stdout_type");
    rc |= th_pack_cstr(pk, th_sem_name(tool->stdout_type));
    rc |= PACK_KEY(pk, "stderr_type");
    rc |= th_pack_cstr(pk, th_sem_name(tool->stderr_type));
    rc |= PACK_KEY(pk, "flags");
    uint32_t fl = tool->flags & ~TH_PERM_FLAG_NEEDS;
    size_t nf = 0;
    for (uint32_t bit = 1; bit; bit <<= 1)
        if ((fl & bit) && th_perm_flag_name(bit))
            nf++;
    rc |= msgpack_pack_array(pk, nf);
    for (uint32_t bit = 1; bit; bit <<= 1)
        if ((fl & bit) && th_perm_flag_name(bit))
            rc |= th_pack_cstr(pk, th_perm_flag_name(bit));
    return rc ? TH_ENOMEM : 0;
}

/* ---- MCP (host/mcp) ------------------------------------------------------- */

/* The tools/list entry of one tool for MCP: name, description (the same
 * builder as the function-calling exports: th_schema_description, whole),
 * inputSchema (th_schema_params), annotations from the tool flags and
 * execution.taskSupport ("optional" for async tools, else "forbidden").
 * NULL when out of memory. */
json_t *th_schema_mcp_tool(const th_tool *tool)
{
    json_t *o = json_object();
    json_t *in = th_schema_params(tool);
    char *desc = th_schema_description(tool, 0);
    json_t *ann = json_object();
    json_t *exe = json_object();
    if (!o || !in || !desc || !ann || !exe)
        goto fail;
    uint32_t f = tool->flags;
    bool ro = (f & TOOLHOST_TOOL_READ_ONLY) != 0;
    int e = json_object_set_new(o, "name", json_string(tool->name));
    /* title (ABI 1.1): the display title, also as annotations.title. */
    if (tool->title) {
        e |= json_object_set_new(o, "title", json_string(tool->title));
        e |= json_object_set_new(ann, "title", json_string(tool->title));
    }
    e |= json_object_set_new(o, "description", json_string(desc));
    e |= json_object_set_new(o, "inputSchema", in);
    in = NULL;
    /* outputSchema (ABI 1.1): the declared output schema, when it
     * describes an object (MCP's outputSchema and structuredContent are
     * objects); tools/call then returns structuredContent
     * (host/mcp/mcp_result.c). */
    json_t *os = th_schema_output(tool);
    if (th_schema_output_is_object(os))
        e |= json_object_set_new(o, "outputSchema", os);
    else
        json_decref(os);
    e |= json_object_set_new(ann, "readOnlyHint", json_boolean(ro));
    e |= json_object_set_new(
        ann, "destructiveHint",
        json_boolean(!ro && (f & TOOLHOST_TOOL_DESTRUCTIVE) != 0));
    e |= json_object_set_new(
        ann, "idempotentHint",
        json_boolean((f & TOOLHOST_TOOL_IDEMPOTENT) != 0));
    e |= json_object_set_new(
        ann, "openWorldHint",
        json_boolean((f & TOOLHOST_TOOL_OPEN_WORLD) != 0));
    e |= json_object_set_new(o, "annotations", ann);
    ann = NULL;
    e |= json_object_set_new(
        exe, "taskSupport",
        json_string((f & TOOLHOST_TOOL_ASYNC) ? "optional" : "forbidden"));
    e |= json_object_set_new(o, "execution", exe);
    exe = NULL;
    /* _meta (ABI 1.5): the plugin's tags under our own prefix (MCP
     * reserves the modelcontextprotocol and mcp prefixes), only when it
     * declares some, so an untagged tool's entry is as before. */
    if (tool->n_tags) {
        json_t *tg = th_schema_tags(tool);
        e |= tg ? json_object_set_new(o, "_meta",
                                      json_pack("{s:o}", "toolhost/tags", tg))
                : -1;
    }
    free(desc);
    if (e) {
        json_decref(o);
        return NULL;
    }
    return o;
fail:
    json_decref(o);
    json_decref(in);
    json_decref(ann);
    json_decref(exe);
    free(desc);
    return NULL;
}

/* ---- Fitting descriptions, strict exports ---------------------------------- */

/* The names a "## Tools" section lists ("NAME - summary" lines), joined
 * as "a, b, c"; start and end get the section's bounds in `ld`.  0 when
 * there is no such section, 1 when found, TH_ENOMEM. */
static int tools_section(const char *ld, th_buf *names, size_t *start,
                         size_t *end)
{
    const char *s = strstr(ld, "## Tools\n");
    while (s && s != ld && s[-1] != '\n')
        s = strstr(s + 1, "## Tools\n");
    if (!s)
        return 0;
    const char *e = strstr(s + 9, "\n## ");
    e = e ? e + 1 : ld + strlen(ld);
    *start = (size_t)(s - ld);
    *end = (size_t)(e - ld);
    int rc = 0;
    for (const char *p = s + 9; p < e;) {
        const char *nl = memchr(p, '\n', (size_t)(e - p));
        const char *le = nl ? nl : e;
        size_t k = 0;
        while (p + k < le && (isalnum((unsigned char)p[k]) || p[k] == '_' ||
                              p[k] == '-' || p[k] == '.' || p[k] == ':'))
            k++;
        if (k > 0 && le - (p + k) >= 3 && strncmp(p + k, " - ", 3) == 0) {
            if (names->len)
                rc |= th_buf_puts(names, ", ");
            rc |= th_buf_append(names, p, k);
        }
        p = le + 1;
    }
    return rc ? TH_ENOMEM : 1;
}

char *th_schema_description_fit(const th_tool *tool, size_t max_chars)
{
    char *full = th_schema_description(tool, 0);
    if (!full || !max_chars || utf8_chars(full, strlen(full)) <= max_chars ||
        !tool->long_description)
        return full ? (free(full), th_schema_description(tool, max_chars))
                    : NULL;
    free(full);
    th_buf names = TH_BUF_INIT, rest = TH_BUF_INIT, tail = TH_BUF_INIT;
    size_t s = 0, e = 0;
    const char *ld = tool->long_description;
    int found = tools_section(ld, &names, &s, &e);
    if (found <= 0 || !names.len) {
        th_buf_destroy(&names);
        return found < 0 ? NULL : th_schema_description(tool, max_chars);
    }
    /* The description without the section, cut to leave room for one
     * "Tools:" paragraph naming them all. */
    int rc = th_buf_append(&rest, ld, s);
    rc |= th_buf_puts(&rest, ld + e);
    rc |= th_buf_printf(&tail, "\n\n## Tools\n%s (help(tools.NAME) prints "
                               "one with its parameters)",
                        (const char *)names.data);
    th_buf_destroy(&names);
    char *cut = NULL;
    if (!rc) {
        size_t tl = utf8_chars((char *)tail.data, tail.len);
        th_tool tmp = *tool;
        tmp.long_description = (char *)rest.data;
        cut = th_schema_description(&tmp, tl < max_chars ? max_chars - tl : 1);
    }
    th_buf out = TH_BUF_INIT;
    if (cut) {
        rc |= th_buf_puts(&out, cut);
        rc |= th_buf_append(&out, tail.data, tail.len);
    }
    free(cut);
    th_buf_destroy(&rest);
    th_buf_destroy(&tail);
    if (rc || !out.data) {
        th_buf_destroy(&out);
        return NULL;
    }
    /* Too many tools to name within the limit: a hard cut (never split a
     * UTF-8 sequence). */
    if (utf8_chars((char *)out.data, out.len) > max_chars) {
        out.len = utf8_prefix((char *)out.data, out.len, max_chars);
        out.data[out.len] = '\0';
    }
    return (char *)th_buf_take(&out, NULL);
}

/* One schema made strict (in place): every property required, the
 * optional ones nullable, additionalProperties false, no "default" (said
 * in the description instead), recursively through properties and
 * items. */
static int strict_walk(json_t *sch)
{
    if (!json_is_object(sch))
        return 0;
    int rc = 0;
    json_t *props = json_object_get(sch, "properties");
    if (json_is_object(props)) {
        json_t *req = json_object_get(sch, "required");
        json_t *all = json_array();
        if (!all)
            return TH_ENOMEM;
        const char *k;
        json_t *p;
        json_object_foreach(props, k, p)
        {
            bool was = false;
            size_t i;
            json_t *r;
            json_array_foreach(req, i, r)
            {
                if (json_is_string(r) && strcmp(json_string_value(r), k) == 0)
                    was = true;
            }
            rc |= json_array_append_new(all, json_string(k));
            rc |= strict_walk(p);
            json_t *def = json_object_get(p, "default");
            if (def) {
                char *dt = json_dumps(def, JSON_ENCODE_ANY | JSON_COMPACT);
                const char *d = json_string_value(
                    json_object_get(p, "description"));
                th_buf b = TH_BUF_INIT;
                rc |= th_buf_printf(&b, "%s%s(default %s; null for the "
                                        "default)",
                                    d ? d : "", d ? " " : "", dt ? dt : "?");
                free(dt);
                rc |= json_object_set_new(p, "description",
                                          json_string((char *)b.data));
                th_buf_destroy(&b);
                json_object_del(p, "default");
            }
            if (!was) {
                json_t *t = json_object_get(p, "type");
                if (json_is_string(t))
                    rc |= json_object_set_new(
                        p, "type",
                        json_pack("[s,s]", json_string_value(t), "null"));
                else if (json_is_array(t))
                    rc |= json_array_append_new(t, json_string("null"));
                json_t *en = json_object_get(p, "enum");
                if (json_is_array(en))
                    rc |= json_array_append_new(en, json_null());
            }
        }
        rc |= json_object_set_new(sch, "required", all);
        rc |= json_object_set_new(sch, "additionalProperties",
                                  json_false());
    } else {
        const char *t = json_string_value(json_object_get(sch, "type"));
        if (t && strcmp(t, "object") == 0) {
            rc |= json_object_set_new(sch, "properties", json_object());
            rc |= json_object_set_new(sch, "required", json_array());
            rc |= json_object_set_new(sch, "additionalProperties",
                                      json_false());
        }
    }
    rc |= strict_walk(json_object_get(sch, "items"));
    return rc ? TH_ENOMEM : 0;
}

json_t *th_schema_strict(const json_t *schema)
{
    json_t *c = json_deep_copy(schema);
    if (!c || strict_walk(c) != 0) {
        json_decref(c);
        return NULL;
    }
    return c;
}

/* ---- Gemini's schema subset ------------------------------------------------ */

static json_t *gemini_walk(const json_t *in, int depth);

/* Copies a keyword whose value is a schema, a list or a map of them. */
static int gemini_sub(json_t *out, const char *k, const json_t *v, int depth)
{
    json_t *c = NULL;
    if (json_is_array(v)) {
        c = json_array();
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e)
        {
            json_t *g = gemini_walk(e, depth + 1);
            if (!g || json_array_append_new(c, g) != 0) {
                json_decref(c);
                return TH_ENOMEM;
            }
        }
    } else if (strcmp(k, "properties") == 0 && json_is_object(v)) {
        c = json_object();
        const char *pk;
        json_t *pv;
        json_object_foreach((json_t *)v, pk, pv)
        {
            json_t *g = gemini_walk(pv, depth + 1);
            if (!g || json_object_set_new(c, pk, g) != 0) {
                json_decref(c);
                return TH_ENOMEM;
            }
        }
    } else {
        c = gemini_walk(v, depth + 1);
    }
    return !c || json_object_set_new(out, k, c) != 0 ? TH_ENOMEM : 0;
}

static json_t *gemini_walk(const json_t *in, int depth)
{
    static const char *const keep[] = {
        "format",    "title",     "description", "nullable", "maxItems",
        "minItems",  "required",  "minProperties", "maxProperties",
        "minLength", "maxLength", "pattern",     "default",  "minimum",
        "maximum",   "propertyOrdering", "example", NULL};
    json_t *out = json_object();
    if (!out || !json_is_object(in) || depth > 32)
        return out; /* true / false / too deep: any value */
    int rc = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)in, k, v)
    {
        for (size_t i = 0; keep[i]; i++)
            if (strcmp(k, keep[i]) == 0)
                rc |= json_object_set(out, k, v);
        if (!strcmp(k, "properties") || !strcmp(k, "items") ||
            !strcmp(k, "anyOf") || !strcmp(k, "oneOf"))
            rc |= gemini_sub(out, strcmp(k, "oneOf") ? k : "anyOf", v, depth);
        else if (!strcmp(k, "examples") && json_array_size(v))
            rc |= json_object_set(out, "example", json_array_get(v, 0));
        else if (!strcmp(k, "const") && json_is_string(v))
            rc |= json_object_set_new(out, "enum", json_pack("[O]", v));
        else if (!strcmp(k, "enum") && json_is_array(v)) {
            /* Gemini's enum lists strings; null in a list of strings
             * becomes "nullable" */
            json_t *strs = json_array();
            bool only = strs != NULL, null = false;
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e)
            {
                if (json_is_string(e))
                    rc |= json_array_append(strs, e);
                else if (json_is_null(e))
                    null = true;
                else
                    only = false;
            }
            if (only && json_array_size(strs)) {
                rc |= json_object_set(out, "enum", strs);
                if (null)
                    rc |= json_object_set_new(out, "nullable", json_true());
            }
            json_decref(strs);
        }
    }
    /* "type": a list becomes one type and "nullable", or anyOf */
    json_t *t = json_object_get(in, "type");
    if (json_is_string(t)) {
        rc |= json_object_set(out, "type", t);
    } else if (json_is_array(t)) {
        json_t *types = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e)
        {
            if (json_is_string(e) && strcmp(json_string_value(e), "null") == 0)
                rc |= json_object_set_new(out, "nullable", json_true());
            else if (json_is_string(e))
                rc |= json_array_append(types, e);
        }
        if (json_array_size(types) == 1) {
            rc |= json_object_set(out, "type", json_array_get(types, 0));
        } else if (json_array_size(types) > 1 &&
                   !json_object_get(out, "anyOf")) {
            json_t *any = json_array();
            json_array_foreach(types, i, e)
                rc |= json_array_append_new(any, json_pack("{s:O}", "type", e));
            rc |= json_object_set_new(out, "anyOf", any);
        }
        json_decref(types);
    }
    if (rc) {
        json_decref(out);
        return NULL;
    }
    return out;
}

json_t *th_schema_gemini(const json_t *schema)
{
    return gemini_walk(schema, 0);
}

json_t *th_schema_export_ex(const th_tool *const *tools, size_t n,
                            th_export_format fmt, const th_export_opts *o,
                            th_error *err)
{
    bool strict = o && o->strict;
    bool responses = fmt == TH_EXPORT_OPENAI_RESPONSES;
    if (strict && fmt != TH_EXPORT_OPENAI && !responses) {
        th_error_set(err, TH_EINVAL,
                     "strict schemas are for the openai and "
                     "openai-responses formats");
        return NULL;
    }
    json_t *base = th_schema_export(tools, n,
                                    responses ? TH_EXPORT_OPENAI : fmt, err);
    if (!base || (!strict && !responses))
        return base;
    json_t *out = json_array();
    size_t i;
    json_t *e;
    int rc = !out;
    json_array_foreach(base, i, e)
    {
        if (rc)
            break;
        json_t *f = json_object_get(e, "function");
        json_t *params = json_object_get(f, "parameters");
        json_t *p = strict ? th_schema_strict(params) : json_incref(params);
        json_t *one =
            !p ? NULL
            : responses
                ? json_pack("{s:s, s:O, s:O, s:o, s:b}", "type", "function",
                            "name", json_object_get(f, "name"),
                            "description", json_object_get(f, "description"),
                            "parameters", p, "strict", strict)
                : json_pack("{s:s, s:{s:O, s:O, s:o, s:b}}", "type",
                            "function", "function", "name",
                            json_object_get(f, "name"), "description",
                            json_object_get(f, "description"), "parameters",
                            p, "strict", 1);
        rc |= !one || json_array_append_new(out, one) != 0;
    }
    json_decref(base);
    if (rc) {
        json_decref(out);
        th_error_set(err, TH_ENOMEM, "out of memory");
        return NULL;
    }
    return out;
}

char *th_schema_export_text_ex(const th_tool *const *tools, size_t n,
                               th_export_format fmt, const th_export_opts *o,
                               th_error *err)
{
    json_t *j = th_schema_export_ex(tools, n, fmt, o, err);
    if (!j)
        return NULL;
    char *s = json_dumps(j, JSON_INDENT(2));
    json_decref(j);
    size_t len = s ? strlen(s) : 0;
    char *r = s ? realloc(s, len + 2) : NULL;
    if (!r) {
        free(s);
        th_error_set(err, TH_ENOMEM, "out of memory");
        return NULL;
    }
    r[len] = '\n';
    r[len + 1] = '\0';
    return r;
}
