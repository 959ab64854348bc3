/* projection.c - tools as seen from inside a code runtime (th/projection.h). */
#include "th/projection.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/tool.h"

void th_proj_result_init(th_proj_result *r)
{
    memset(r, 0, sizeof *r);
    th_buf_init(&r->out);
    th_buf_init(&r->err);
    th_buf_init(&r->meta);
}

void th_proj_result_destroy(th_proj_result *r)
{
    th_buf_destroy(&r->out);
    th_buf_destroy(&r->err);
    th_buf_destroy(&r->meta);
    free(r->message);
    th_proj_result_init(r);
}

th_projection *th_projection_new(const th_proj_lang *lang,
                                 const th_proj_caller *caller)
{
    if (!lang || !caller)
        return NULL;
    th_projection *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->lang = lang;
    p->caller = *caller;
    return p;
}

static void tool_free(th_proj_tool *t)
{
    free(t->key);
    free(t->name);
    free(t->description);
    free(t->doc);
    free(t->signature);
    for (size_t i = 0; i < t->n_params; i++)
        free(t->params[i].name);
    free(t->params);
    memset(t, 0, sizeof *t);
}

void th_projection_free(th_projection *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_tools; i++)
        tool_free(&p->tools[i]);
    free(p->tools);
    free(p);
}

/* A parameter's description line for a doc, from whatever the caller has. */
typedef struct doc_param {
    const char *name;
    const char *description;
    uint32_t type, item_type;
    bool required;
    char *const *enum_values;
    size_t n_enum;
    const uint8_t *default_mp;
    size_t default_len;
} doc_param;

static int doc_default(th_buf *b, const uint8_t *mp, size_t len)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    int rc = 0;
    if (msgpack_unpack_next(&u, (const char *)mp, len, NULL) ==
        MSGPACK_UNPACK_SUCCESS) {
        char tmp[256];
        int n = msgpack_object_print_buffer(tmp, sizeof tmp, u.data);
        if (n > 0)
            rc = th_buf_printf(b, ", default %s", tmp);
    }
    msgpack_unpacked_destroy(&u);
    return rc;
}

static int flags_text(th_buf *b, uint32_t flags)
{
    static const struct {
        uint32_t bit;
        const char *name;
    } names[] = {
        {TOOLHOST_TOOL_ASYNC, "long-running"},
        {TOOLHOST_TOOL_READ_ONLY, "read-only"},
        {TOOLHOST_TOOL_DESTRUCTIVE, "destructive"},
        {TOOLHOST_TOOL_IDEMPOTENT, "idempotent"},
        {TOOLHOST_TOOL_OPEN_WORLD, "open-world"},
    };
    bool any = false;
    int rc = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !rc; i++) {
        if (!(flags & names[i].bit))
            continue;
        rc = th_buf_printf(b, "%s%s", any ? ", " : "Flags: ", names[i].name);
        any = true;
    }
    if (any && !rc)
        rc = th_buf_puts(b, "\n");
    return rc;
}

/* Builds doc and signature text for one tool. */
static int make_doc(th_proj_tool *t, const doc_param *dp, size_t n)
{
    th_buf doc = TH_BUF_INIT, sig = TH_BUF_INIT;
    int rc = th_buf_printf(&doc, "%s - %s\n", t->key, t->description);
    if (!rc && strcmp(t->key, t->name) != 0)
        rc = th_buf_printf(&doc, "Host tool name: %s\n", t->name);
    if (!rc)
        rc = flags_text(&doc, t->flags);
    if (!rc)
        rc = th_buf_printf(&sig, "%s{", t->key);
    if (!rc)
        rc = th_buf_puts(&doc, n ? "Parameters:\n" : "Parameters: none\n");
    for (size_t i = 0; i < n && !rc; i++) {
        const doc_param *q = &dp[i];
        rc = th_buf_printf(&sig, "%s%s%s: %s", i ? ", " : "", q->name,
                           q->required ? "" : "?", th_type_name(q->type));
        if (!rc)
            rc = th_buf_printf(&doc, "  %s (%s", q->name,
                               th_type_name(q->type));
        if (!rc && q->type == TOOLHOST_TYPE_ARRAY && q->item_type)
            rc = th_buf_printf(&doc, " of %s", th_type_name(q->item_type));
        if (!rc)
            rc = th_buf_puts(&doc, q->required ? ", required" : ", optional");
        if (!rc && q->default_mp)
            rc = doc_default(&doc, q->default_mp, q->default_len);
        if (!rc && q->n_enum) {
            rc = th_buf_puts(&doc, ", one of");
            for (size_t k = 0; k < q->n_enum && !rc; k++)
                rc = th_buf_printf(&doc, "%s \"%s\"", k ? "," : "",
                                   q->enum_values[k]);
        }
        if (!rc)
            rc = th_buf_printf(&doc, ")%s%s\n", q->description ? ": " : "",
                               q->description ? q->description : "");
    }
    if (!rc)
        rc = th_buf_puts(&sig, "}");
    if (rc) {
        th_buf_destroy(&doc);
        th_buf_destroy(&sig);
        return TH_ENOMEM;
    }
    t->doc = (char *)th_buf_take(&doc, NULL);
    t->signature = (char *)th_buf_take(&sig, NULL);
    return 0;
}

static int grow(th_projection *p)
{
    if (p->n_tools < p->cap)
        return 0;
    size_t cap = p->cap ? p->cap * 2 : 16;
    th_proj_tool *n = realloc(p->tools, cap * sizeof *n);
    if (!n)
        return TH_ENOMEM;
    p->tools = n;
    p->cap = cap;
    return 0;
}

static int add_common(th_projection *p, const char *key, const char *name,
                      const char *description, const doc_param *dp,
                      size_t n, uint32_t flags, th_error *err)
{
    if (!p || !name)
        return th_error_set(err, TH_EINVAL, "projection: no tool name");
    if (grow(p))
        return th_error_set(err, TH_ENOMEM, "out of memory");
    th_proj_tool t;
    memset(&t, 0, sizeof t);
    char mapped[128];
    if (key) {
        t.key_given = true;
    } else {
        if (p->lang->map_name(name, mapped, sizeof mapped) != 0)
            return th_error_set(err, TH_EINVAL,
                                "tool '%s' has no %s name: it cannot be "
                                "mapped to an identifier",
                                name, p->lang->name);
        key = mapped;
    }
    t.key = strdup(key);
    t.name = strdup(name);
    t.description = strdup(description ? description : "");
    t.flags = flags;
    if (n) {
        t.params = calloc(n, sizeof *t.params);
        t.n_params = t.params ? n : 0;
    }
    int rc = (!t.key || !t.name || !t.description || (n && !t.params))
                 ? TH_ENOMEM
                 : 0;
    for (size_t i = 0; i < n && !rc; i++) {
        t.params[i].name = strdup(dp[i].name);
        t.params[i].type = (toolhost_type)dp[i].type;
        t.params[i].required = dp[i].required;
        if (!t.params[i].name)
            rc = TH_ENOMEM;
    }
    if (!rc)
        rc = make_doc(&t, dp, n);
    if (rc) {
        tool_free(&t);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    p->tools[p->n_tools++] = t;
    return 0;
}

int th_projection_add(th_projection *p, const th_tool *tool, th_error *err)
{
    if (!tool)
        return th_error_set(err, TH_EINVAL, "projection: no tool");
    doc_param stack[16];
    doc_param *dp = stack;
    if (tool->n_params > 16) {
        dp = calloc(tool->n_params, sizeof *dp);
        if (!dp)
            return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < tool->n_params; i++) {
        const th_param *q = &tool->params[i];
        dp[i] = (doc_param){q->name,       q->description, (uint32_t)q->type,
                            q->item_type,  q->required,    q->enum_values,
                            q->n_enum,     q->default_mp,  q->default_len};
    }
    int rc = add_common(p, NULL, tool->name, tool->description, dp,
                        tool->n_params, tool->flags, err);
    if (dp != stack)
        free(dp);
    return rc;
}

int th_projection_add_raw(th_projection *p, const char *key, const char *name,
                          const char *description,
                          const th_proj_param *params, size_t n_params,
                          uint32_t flags, th_error *err)
{
    doc_param *dp = NULL;
    if (n_params) {
        dp = calloc(n_params, sizeof *dp);
        if (!dp)
            return th_error_set(err, TH_ENOMEM, "out of memory");
        for (size_t i = 0; i < n_params; i++) {
            dp[i].name = params[i].name;
            dp[i].type = params[i].type;
            dp[i].required = params[i].required;
        }
    }
    int rc = add_common(p, key, name, description, dp, n_params, flags, err);
    free(dp);
    return rc;
}

int th_projection_check(const th_projection *p, th_error *err)
{
    if (!p)
        return th_error_set(err, TH_EINVAL, "no projection");
    const char *lang = p->lang->name;
    for (size_t i = 0; i < p->n_tools; i++) {
        const th_proj_tool *t = &p->tools[i];
        char why[160] = "";
        if (!t->key || !t->key[0])
            return th_error_set(err, TH_EINVAL,
                                "tool '%s' has an empty %s name", t->name,
                                lang);
        if (!p->lang->valid_ident(t->key, why, sizeof why))
            return th_error_set(
                err, TH_EINVAL,
                "tool '%s' cannot be projected into %s as '%s': %s; rename "
                "the tool or leave it out of the toolset",
                t->name, lang, t->key, why[0] ? why : "not an identifier");
        if (!t->key_given) {
            char mapped[128];
            if (p->lang->map_name(t->name, mapped, sizeof mapped) != 0 ||
                strcmp(mapped, t->key) != 0)
                return th_error_set(
                    err, TH_EINVAL,
                    "projected tool '%s' is keyed '%s' but its %s name is "
                    "'%s'",
                    t->name, t->key, lang, mapped);
        }
        for (size_t k = 0; k < i; k++) {
            const th_proj_tool *o = &p->tools[k];
            if (strcmp(o->key, t->key) != 0)
                continue;
            if (strcmp(o->name, t->name) == 0)
                return th_error_set(err, TH_EINVAL,
                                    "tool '%s' is projected twice", t->name);
            return th_error_set(
                err, TH_EINVAL,
                "tools '%s' and '%s' both become '%s' in %s ('-' maps to "
                "'_'); rename one of them or leave one out of the toolset",
                o->name, t->name, t->key, lang);
        }
    }
    return 0;
}

const th_proj_tool *th_projection_find(const th_projection *p,
                                       const char *key)
{
    if (!p || !key)
        return NULL;
    for (size_t i = 0; i < p->n_tools; i++)
        if (strcmp(p->tools[i].key, key) == 0)
            return &p->tools[i];
    return NULL;
}
