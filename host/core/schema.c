/* schema.c - JSON Schemas, detailed descriptions, function-calling exports
 * and the tools.list entry, from one builder (th/schema.h). */
#include "th/schema.h"

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
    }
    return NULL;
}

/* ---- the parameters schema -------------------------------------------- */

static json_t *param_schema(const th_param *p)
{
    json_t *s = json_object();
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
    if (p->type == TOOLHOST_TYPE_ARRAY && p->item_type) {
        const char *it = th_type_name(p->item_type);
        if (it)
            rc |= json_object_set_new(s, "items", json_pack("{s:s}", "type",
                                                            it));
    }
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
        th_buf_free(&b);
        th_buf_free(&lb);
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
    th_buf_free(&lb);
    if (rc) {
        th_buf_free(&b);
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
        th_buf_free(&lb);
    }
    rc |= th_buf_puts(&b, "\n## Parameters\n\n");
    if (tool->n_params == 0)
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
    if (rc) {
        th_buf_free(&b);
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
    char *desc = th_schema_description(
        t, fmt == TH_EXPORT_OPENAI ? TH_SCHEMA_OPENAI_DESC_MAX : 0);
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
        case TH_EXPORT_JSONSCHEMA:
            r = json_pack("{s:s, s:s, s:s}", "$schema",
                          "https://json-schema.org/draft/2020-12/schema",
                          "title", t->name, "description", desc);
            if (r && json_object_update(r, params) != 0) {
                json_decref(r);
                r = NULL;
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
    if (!th_export_format_name(fmt)) {
        th_error_set(err, TH_EINVAL,
                     "unknown export format (use openai, anthropic or "
                     "jsonschema)");
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
    int rc = msgpack_pack_map(pk, 7);
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
    /* title: ABI 1.1 adds a display title to tools; once th_tool carries
     * it, set "title" here (and annotations.title) when present. */
    e |= json_object_set_new(o, "description", json_string(desc));
    e |= json_object_set_new(o, "inputSchema", in);
    in = NULL;
    /* outputSchema: ABI 1.1 adds declared output schemas; once th_tool
     * carries one, set "outputSchema" here (and tools/call returns
     * structuredContent, host/mcp/mcp.c). */
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
