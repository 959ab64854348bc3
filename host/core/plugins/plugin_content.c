/* plugin_content.c - what a plugin declares besides tools (ABI 1.4, see
 * th/content.h): the load-time checks and copies of its resources and
 * prompts, URI templates, and the host callbacks content_add() (the sink
 * a read, a get or a completion fills) and resource_updated().  Part of
 * the loader's side: it calls nothing of the registry or the sessions
 * (content.c serves what it keeps). */
#include "th/content.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/buf.h"
#include "th/log.h"
#include "th/utf8.h"

#define MAX_COMPLETIONS 100 /* MCP: at most 100 values in one answer */
#define MAX_URI 2048
#define MAX_SHORT 255       /* a block's mime_type or name */
#define BLOCK_OVERHEAD 128  /* the JSON around a block: keys, quotes */

/* The sink a plugin callback of this thread was given (th_content_enter):
 * content_add() of any other (kept past its callback, another thread's)
 * is refused before it is touched. */
static _Thread_local th_content *tl_sink;

void th_content_enter(th_content *c)
{
    tl_sink = c;
}

void th_content_leave(void)
{
    tl_sink = NULL;
}

/* ---- The sink ------------------------------------------------------------- */

void th_content_init(th_content *c, th_content_mode mode, size_t max_bytes)
{
    memset(c, 0, sizeof *c);
    c->pub.struct_size = sizeof c->pub;
    c->mode = mode;
    c->max_bytes = max_bytes ? max_bytes : (size_t)16 << 20;
}

void th_content_free(th_content *c)
{
    for (size_t i = 0; i < c->n; i++) {
        th_block *b = &c->v[i];
        free(b->role);
        free(b->mime_type);
        free(b->uri);
        free(b->name);
        free(b->data);
    }
    free(c->v);
    c->v = NULL;
    c->n = c->cap = c->bytes = 0;
}

/* What the plugin called: write_block() fills a call's result. */
static const char *api_name(const th_content *c)
{
    return c->mode == TH_CONTENT_RESULT ? "write_block" : "content_add";
}

/* One line per sink: write_block() clears `bad` for each block (a refused
 * block does not fail the call), so a tool that keeps writing refused
 * blocks would otherwise log one line each. */
static int refuse(th_content *c, const char *why, uint32_t kind)
{
    if (!c->bad)
        snprintf(c->why, sizeof c->why, "%s (block kind %u)", why, kind);
    if (!c->logged) {
        c->logged = true;
        th_log(TOOLHOST_LOG_WARN, "plugin %s: %s: %s (later refusals are "
               "not logged)", c->plugin ? c->plugin : "?", api_name(c),
               c->why);
    }
    c->bad = true;
    return TOOLHOST_EINVAL;
}

bool th_mime_textual(const char *mime)
{
    if (!mime)
        return false;
    size_t n = strcspn(mime, ";");
    return strncmp(mime, "text/", 5) == 0 ||
           (n >= 4 && strncmp(mime + n - 4, "json", 4) == 0) ||
           (n >= 3 && strncmp(mime + n - 3, "xml", 3) == 0);
}

/* Checks a block against the sink's mode: NULL when it may go in, else
 * why not. */
static const char *block_problem(const th_content *c, const toolhost_block *b)
{
    if (b->kind < TOOLHOST_BLOCK_TEXT || b->kind > TOOLHOST_BLOCK_LINK)
        return "an unknown block kind";
    if (b->len && !b->data)
        return "data NULL with a length";
    if (c->mode == TH_CONTENT_COMPLETE && b->kind != TOOLHOST_BLOCK_TEXT)
        return "a completion value must be a TEXT block";
    if (c->mode == TH_CONTENT_READ && b->kind == TOOLHOST_BLOCK_LINK)
        return "a resource's contents cannot hold a LINK block";
    if ((b->kind == TOOLHOST_BLOCK_IMAGE || b->kind == TOOLHOST_BLOCK_AUDIO) &&
        (!b->mime_type || !b->mime_type[0]))
        return "an IMAGE or AUDIO block needs a mime_type";
    if ((b->kind == TOOLHOST_BLOCK_RESOURCE ||
         b->kind == TOOLHOST_BLOCK_LINK) &&
        (!b->uri || !b->uri[0]) && c->mode != TH_CONTENT_READ)
        return "a RESOURCE or LINK block needs a uri";
    if (b->kind == TOOLHOST_BLOCK_LINK && (!b->name || !b->name[0]))
        return "a LINK block needs a name";
    if (c->mode == TH_CONTENT_PROMPT && b->role &&
        strcmp(b->role, "user") != 0 && strcmp(b->role, "assistant") != 0)
        return "role must be \"user\" or \"assistant\"";
    if (b->uri && strnlen(b->uri, MAX_URI + 1) > MAX_URI)
        return "a uri longer than 2048 bytes";
    if ((b->mime_type && strnlen(b->mime_type, MAX_SHORT + 1) > MAX_SHORT) ||
        (b->name && strnlen(b->name, MAX_SHORT + 1) > MAX_SHORT))
        return "a mime_type or name longer than 255 bytes";
    if ((b->uri && !th_utf8_valid(b->uri, strlen(b->uri))) ||
        (b->name && !th_utf8_valid(b->name, strlen(b->name))) ||
        (b->mime_type && !th_utf8_valid(b->mime_type, strlen(b->mime_type))))
        return "a uri, name or mime_type that is not UTF-8";
    return NULL;
}

/* What a TEXT block's bytes become in JSON beyond themselves: the escapes
 * of '"', '\\' and control characters (at most 5 bytes more each). */
static size_t escape_growth(const uint8_t *p, size_t n)
{
    size_t g = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] == '"' || p[i] == '\\')
            g += p[i] < 0x20 && p[i] != '\n' && p[i] != '\t' &&
                         p[i] != '\r' && p[i] != '\b' && p[i] != '\f'
                     ? 5
                     : 1;
    return g;
}

static char *dup_or_null(const char *s, bool *oom)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *oom = true;
    return d;
}

static int over_budget(th_content *c)
{
    const char *limit = c->mode == TH_CONTENT_RESULT
                            ? "what the call's stdout may hold"
                            : "the largest message its front carries";
    if (!c->logged) {
        c->logged = true;
        th_log(TOOLHOST_LOG_WARN,
               "plugin %s: %s: the content passes %zu bytes (%s): refused "
               "(later refusals are not logged)",
               c->plugin ? c->plugin : "?", api_name(c), c->max_bytes, limit);
    }
    if (!c->bad)
        snprintf(c->why, sizeof c->why, "the content passes %zu bytes (%s)",
                 c->max_bytes, limit);
    c->bad = true;
    return TOOLHOST_ENOMEM;
}

static int out_of_memory(th_content *c)
{
    if (!c->bad)
        snprintf(c->why, sizeof c->why, "out of memory");
    c->bad = true;
    return TOOLHOST_ENOMEM;
}

static int api_content_add(toolhost_content *pub, const toolhost_block *b)
{
    th_content *c = (th_content *)pub;
    if (!c || c != tl_sink) {
        /* a sink kept past its callback, or used from another thread:
         * its memory may be gone; nothing of it is read */
        th_log(TOOLHOST_LOG_WARN, "a plugin called content_add() outside "
               "the read(), get() or complete() it was given the content "
               "for: refused");
        return TOOLHOST_ESTATE;
    }
    return th_content_add(c, b);
}

int th_content_add(th_content *c, const toolhost_block *b)
{
    if (!b || b->struct_size < offsetof(toolhost_block, name) +
                                   sizeof b->name)
        return refuse(c, "a NULL block or a struct_size too small", 0);
    const char *why = block_problem(c, b);
    if (why)
        return refuse(c, why, b->kind);
    if (c->mode == TH_CONTENT_COMPLETE && c->n >= MAX_COMPLETIONS) {
        c->dropped++;
        return 0;
    }
    /* What the answer will hold: base64 makes bytes 4/3 larger, JSON
     * escapes text, and every block has its strings and keys.  The length
     * is checked first, so the sums cannot wrap (max_bytes is at most
     * 1 GiB) and no byte is scanned past the budget. */
    size_t room = c->max_bytes - c->bytes;
    if (b->len > room)
        return over_budget(c);
    if (b->kind == TOOLHOST_BLOCK_TEXT && !th_utf8_valid(b->data, b->len))
        return refuse(c, "a TEXT block that is not UTF-8", b->kind);
    size_t cost = BLOCK_OVERHEAD + b->len +
                  (b->kind == TOOLHOST_BLOCK_TEXT
                       ? escape_growth(b->data, b->len)
                       : b->len / 3 + 4) +
                  (b->uri ? strlen(b->uri) : 0) +
                  (b->name ? strlen(b->name) : 0) +
                  (b->mime_type ? strlen(b->mime_type) : 0);
    if (cost > room)
        return over_budget(c);
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4;
        th_block *v = realloc(c->v, cap * sizeof *v);
        if (!v)
            return out_of_memory(c);
        c->v = v;
        c->cap = cap;
    }
    th_block *d = &c->v[c->n];
    memset(d, 0, sizeof *d);
    bool oom = false;
    d->kind = b->kind;
    d->role = c->mode == TH_CONTENT_PROMPT ? dup_or_null(b->role, &oom)
                                           : NULL;
    d->mime_type = dup_or_null(b->mime_type, &oom);
    d->uri = dup_or_null(b->uri, &oom);
    d->name = dup_or_null(b->name, &oom);
    d->data = malloc(b->len + 1); /* NUL-terminated: text is a C string */
    if (d->data) {
        if (b->len)
            memcpy(d->data, b->data, b->len);
        d->data[b->len] = 0;
        d->len = b->len;
    }
    c->n++; /* freed by th_content_free() either way */
    if (oom || !d->data)
        return out_of_memory(c);
    c->bytes += cost;
    return 0;
}

static const char *const block_type[] = {
    [TOOLHOST_BLOCK_TEXT] = "text", [TOOLHOST_BLOCK_IMAGE] = "image",
    [TOOLHOST_BLOCK_AUDIO] = "audio", [TOOLHOST_BLOCK_RESOURCE] = "resource",
    [TOOLHOST_BLOCK_LINK] = "resource_link"};

static int pack_opt(msgpack_packer *pk, const char *k, const char *v)
{
    return v ? th_pack_cstr(pk, k) | th_pack_cstr(pk, v) : 0;
}

int th_content_pack(const th_content *c, msgpack_packer *pk)
{
    int e = msgpack_pack_array(pk, (uint32_t)c->n);
    for (size_t i = 0; i < c->n && !e; i++) {
        const th_block *b = &c->v[i];
        bool text = b->kind == TOOLHOST_BLOCK_TEXT;
        e |= msgpack_pack_map(pk, 1 + (b->kind != TOOLHOST_BLOCK_LINK) +
                                      !!b->mime_type + !!b->uri + !!b->name);
        e |= th_pack_cstr(pk, "type");
        e |= th_pack_cstr(pk, block_type[b->kind]);
        if (b->kind != TOOLHOST_BLOCK_LINK) {
            e |= th_pack_cstr(pk, text ? "text" : "data");
            e |= text ? msgpack_pack_str_with_body(pk, b->data, b->len)
                      : msgpack_pack_bin_with_body(pk, b->data, b->len);
        }
        e |= pack_opt(pk, "mime_type", b->mime_type);
        e |= pack_opt(pk, "uri", b->uri);
        e |= pack_opt(pk, "name", b->name);
    }
    return e ? TH_ENOMEM : 0;
}

static void (*update_hook)(const char *uri);

void th_content_set_update_hook(void (*fn)(const char *uri))
{
    __atomic_store_n(&update_hook, fn, __ATOMIC_RELEASE);
}

const th_resource *th_resource_at(const th_plugin *p, const char *uri,
                                  bool templates)
{
    for (size_t k = 0; k < p->n_resources; k++) {
        const th_resource *r = &p->resources[k];
        if (templates ? r->is_template && th_uri_template_match(r->uri, uri)
                      : !r->is_template && strcmp(r->uri, uri) == 0)
            return r;
    }
    return NULL;
}

static void api_resource_updated(const toolhost_host_api *host,
                                 const char *uri)
{
    void (*fn)(const char *) = __atomic_load_n(&update_hook, __ATOMIC_ACQUIRE);
    if (!fn || !host || !uri || !uri[0] || strnlen(uri, MAX_URI + 1) > MAX_URI)
        return;
    /* only its own resources: a plugin cannot speak for another's */
    const th_plugin *p = th_plugin_from_api(host);
    if (!th_resource_at(p, uri, false) && !th_resource_at(p, uri, true)) {
        th_log(TOOLHOST_LOG_DEBUG, "plugin %s: resource_updated() of a URI "
               "that is none of its resources: ignored", p->name);
        return;
    }
    fn(uri);
}

void th_content_api_fill(toolhost_host_api *api)
{
    api->content_add = api_content_add;
    api->resource_updated = api_resource_updated;
}

/* ---- URI templates ---------------------------------------------------------- */

/* A template's shape: at most 8 "{name}" variables, names [A-Za-z0-9_],
 * none empty, no nesting, no two variables side by side (matching needs
 * a literal between them). */
static bool template_ok(const char *t, bool *is_template)
{
    *is_template = false;
    bool prev_var = false;
    int vars = 0;
    for (const char *p = t; *p; p++) {
        if (*p == '}')
            return false;
        if (*p != '{') {
            prev_var = false;
            continue;
        }
        if (prev_var || ++vars > 8)
            return false;
        const char *e = p + 1;
        while ((*e >= 'a' && *e <= 'z') || (*e >= 'A' && *e <= 'Z') ||
               (*e >= '0' && *e <= '9') || *e == '_')
            e++;
        if (e == p + 1 || *e != '}')
            return false;
        *is_template = true;
        prev_var = true;
        p = e;
    }
    return true;
}

bool th_uri_template_match(const char *t, const char *u)
{
    /* One pass, no backtracking (a client's URI against a plugin's
     * template must cost O(length x literal), whatever the two hold): a
     * variable ends at the first place where the template's next literal
     * follows, after at least one character. */
    while (*t) {
        if (*t != '{') {
            if (*t != *u)
                return false;
            t++;
            u++;
            continue;
        }
        t = strchr(t, '}') + 1;
        size_t lit = strcspn(t, "{"); /* the literal after it */
        size_t span = strcspn(u, "/?#");
        if (span == 0)
            return false;
        if (lit == 0) { /* the template's end: the rest is the value */
            u += span;
            continue;
        }
        size_t i = 1;
        while (i <= span && strncmp(u + i, t, lit) != 0)
            i++;
        if (i > span)
            return false;
        u += i;
    }
    return *u == '\0';
}

/* ---- Load -------------------------------------------------------------------- */

static bool scheme_ok(const char *u)
{
    if (!((*u >= 'a' && *u <= 'z') || (*u >= 'A' && *u <= 'Z')))
        return false;
    const char *p = u + strspn(u, "abcdefghijklmnopqrstuvwxyz"
                                  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-");
    return *p == ':' && p[1];
}

/* Whether each of the n strings (NULL ones skipped) is UTF-8: they go
 * into JSON as they are. */
static bool all_utf8(const char *const *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] && !th_utf8_valid(v[i], strlen(v[i])))
            return false;
    return true;
}

static int load_resources(const char *shown, const toolhost_plugin *d,
                          th_plugin *p, th_error *err)
{
    if (!d->n_resources)
        return 0;
    if (!d->resources || d->resources[0].struct_size <
                             offsetof(toolhost_resource, user_data))
        return th_error_set(err, TH_ELOAD, "%s: resources: NULL, or a "
                            "toolhost_resource struct_size too small",
                            shown);
    if (d->n_resources > 10000)
        return th_error_set(err, TH_ELOAD, "%s: %u resources (at most "
                            "10000)", shown, d->n_resources);
    uint32_t stride = d->resources[0].struct_size;
    if (!(p->resources = calloc(d->n_resources, sizeof *p->resources)))
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    for (uint32_t i = 0; i < d->n_resources; i++) {
        const toolhost_resource *r =
            (const void *)((const char *)d->resources + (size_t)i * stride);
        if (r->struct_size != stride)
            return th_error_set(err, TH_ELOAD, "%s: resource %u has "
                                "struct_size %u, the first has %u",
                                shown, i, r->struct_size, stride);
        th_resource *o = &p->resources[p->n_resources];
        bool tmpl;
        if (!r->uri || !r->uri[0] || strlen(r->uri) > MAX_URI ||
            !scheme_ok(r->uri) || !template_ok(r->uri, &tmpl))
            return th_error_set(err, TH_ELOAD, "%s: resource %u: uri "
                                "'%.200s' is not a URI (scheme:...) or a "
                                "URI template with {name} variables",
                                shown, i, r->uri ? r->uri : "(NULL)");
        if (!r->name || !r->name[0])
            return th_error_set(err, TH_ELOAD, "%s: resource '%.200s' has "
                                "no name", shown, r->uri);
        if (!r->read)
            return th_error_set(err, TH_ELOAD, "%s: resource '%.200s' has "
                                "no read function", shown, r->uri);
        const char *strs[] = {r->uri, r->name, r->title, r->description,
                              r->mime_type};
        if (!all_utf8(strs, 5))
            return th_error_set(err, TH_ELOAD, "%s: resource %u: a uri, "
                                "name, title, description or mime_type that "
                                "is not UTF-8", shown, i);
        for (size_t j = 0; j < p->n_resources; j++)
            if (strcmp(p->resources[j].uri, r->uri) == 0)
                return th_error_set(err, TH_ELOAD, "%s: resource uri "
                                    "'%.200s' appears twice", shown, r->uri);
        bool oom = false;
        o->uri = dup_or_null(r->uri, &oom);
        o->name = dup_or_null(r->name, &oom);
        o->title = dup_or_null(r->title, &oom);
        o->description = dup_or_null(r->description, &oom);
        o->mime_type = dup_or_null(r->mime_type, &oom);
        o->is_template = tmpl;
        o->desc = r;
        p->n_resources++;
        if (oom)
            return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    }
    return 0;
}

static int load_prompts(const char *shown, const toolhost_plugin *d,
                        th_plugin *p, th_error *err)
{
    if (!d->n_prompts)
        return 0;
    if (!d->prompts ||
        d->prompts[0].struct_size < offsetof(toolhost_prompt, user_data))
        return th_error_set(err, TH_ELOAD, "%s: prompts: NULL, or a "
                            "toolhost_prompt struct_size too small", shown);
    if (d->n_prompts > 10000)
        return th_error_set(err, TH_ELOAD, "%s: %u prompts (at most 10000)",
                            shown, d->n_prompts);
    uint32_t stride = d->prompts[0].struct_size;
    if (!(p->prompts = calloc(d->n_prompts, sizeof *p->prompts)))
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    for (uint32_t i = 0; i < d->n_prompts; i++) {
        const toolhost_prompt *q =
            (const void *)((const char *)d->prompts + (size_t)i * stride);
        if (q->struct_size != stride)
            return th_error_set(err, TH_ELOAD, "%s: prompt %u has "
                                "struct_size %u, the first has %u",
                                shown, i, q->struct_size, stride);
        if (!q->name || !th_tool_name_valid(q->name))
            return th_error_set(err, TH_ELOAD, "%s: prompt %u has an "
                                "invalid name '%.100s' (allowed: letters, "
                                "digits, _ and -, 1 to 64)",
                                shown, i, q->name ? q->name : "(NULL)");
        if (!q->description || !q->description[0] || !q->get)
            return th_error_set(err, TH_ELOAD, "%s: prompt '%s' has no %s",
                                shown, q->name,
                                q->get ? "description" : "get function");
        const char *strs[] = {q->title, q->description};
        if (!all_utf8(strs, 2))
            return th_error_set(err, TH_ELOAD, "%s: prompt '%s': a title or "
                                "description that is not UTF-8", shown,
                                q->name);
        for (size_t j = 0; j < p->n_prompts; j++)
            if (strcmp(p->prompts[j].name, q->name) == 0)
                return th_error_set(err, TH_ELOAD, "%s: prompt name '%s' "
                                    "appears twice", shown, q->name);
        th_prompt *o = &p->prompts[p->n_prompts];
        char what[1200];
        snprintf(what, sizeof what, "%.1000s: prompt '%s'", shown, q->name);
        int rc = th_params_from_abi(what, q->args, q->n_args, &o->args,
                                    &o->n_args, err);
        if (rc)
            return rc;
        p->n_prompts++;
        for (size_t j = 0; j < o->n_args; j++) {
            const th_param *a = &o->args[j];
            if (a->type != TOOLHOST_TYPE_STRING)
                return th_error_set(err, TH_ELOAD, "%s: argument '%s' is "
                                    "not a string (prompt arguments are "
                                    "strings)", what, a->name);
            if (a->description &&
                !th_utf8_valid(a->description, strlen(a->description)))
                return th_error_set(err, TH_ELOAD, "%s: argument '%s': its "
                                    "description is not UTF-8", what,
                                    a->name);
        }
        bool oom = false;
        o->name = dup_or_null(q->name, &oom);
        o->title = dup_or_null(q->title, &oom);
        o->description = dup_or_null(q->description, &oom);
        o->desc = q;
        if (oom)
            return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    }
    return 0;
}

int th_content_load(const char *shown, const toolhost_plugin *d, th_plugin *p,
                    th_error *err)
{
    if (!TOOLHOST_HAS_MEMBER(toolhost_plugin, d, n_prompts) ||
        d->abi_minor < 4)
        return 0;
    int rc = load_resources(shown, d, p, err);
    return rc ? rc : load_prompts(shown, d, p, err);
}

void th_content_unload(th_plugin *p)
{
    for (size_t i = 0; i < p->n_resources; i++) {
        th_resource *r = &p->resources[i];
        free(r->uri);
        free(r->name);
        free(r->title);
        free(r->description);
        free(r->mime_type);
    }
    free(p->resources);
    for (size_t i = 0; i < p->n_prompts; i++) {
        th_prompt *q = &p->prompts[i];
        free(q->name);
        free(q->title);
        free(q->description);
        th_params_free(q->args, q->n_args);
    }
    free(p->prompts);
    p->resources = NULL;
    p->prompts = NULL;
    p->n_resources = p->n_prompts = 0;
}

