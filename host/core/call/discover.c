/* discover.c - deferred tools and the built-in search_tools (docs/gateway.md,
 * "Discovery"): a deferred tool (its plugin entry says `defer: true`, or
 * `defer_tools:` names it) is left out of every tool list a session sees
 * (th_session_tools) until search_tools found it for that session; it can
 * be called by name all along, under the toolsets' ACLs as any tool.
 *
 * The index (th/search_index.h) covers every plugin tool of the registry
 * (built-ins and task tools not), one document per tool: its name, title,
 * description, long description, parameter names and descriptions, and
 * its tags.  It is built at open and after every reload that changed the
 * tools (th_discover_rebuild, on the reload thread), never per call; a
 * search takes a reference to the current one (h->disc, under h->discmu,
 * a leaf lock) and runs without a lock.
 *
 * A session's found tools (session.c, th_session_found_add): names under
 * s->mu, at most the index's size: when the index was rebuilt since the
 * last addition, the names it no longer defers are dropped first. */
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manager.h"
#include "th/log.h"
#include "th/schema.h"
#include "th/search_index.h"

#define SEARCH_LIMIT_DEFAULT 5
#define SEARCH_LIMIT_MAX 50
#define SEARCH_QUERY_MAX 1000 /* bytes */

struct th_discovery {
    atomic_int refs;
    uint64_t gen;        /* 1, 2, ...: one per build */
    th_sindex *idx;
    bool *deferred;      /* per document */
    size_t n_deferred;
};

static void disc_unref(th_discovery *d)
{
    if (!d || atomic_fetch_sub(&d->refs, 1) != 1)
        return;
    th_sindex_free(d->idx);
    free(d->deferred);
    free(d);
}

static th_discovery *disc_get(th_host *h)
{
    pthread_mutex_lock(&h->discmu);
    th_discovery *d = h->disc;
    if (d)
        atomic_fetch_add(&d->refs, 1);
    pthread_mutex_unlock(&h->discmu);
    return d;
}

/* The tags of tool t, each passed to fn: the one place the index learns
 * a tool's tags: those its plugin declares and the config's `tags:`. */
static int tool_tags(const th_config *cfg, const th_tool *t,
                     int (*fn)(void *ud, const char *tag), void *ud)
{
    for (size_t i = 0; i < t->n_tags; i++) { /* the plugin's (ABI 1.5) */
        int rc = fn(ud, t->tags[i]);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < cfg->n_tags; i++)
        if (th_tag_has_tool(&cfg->tags[i], t->name)) {
            int rc = fn(ud, cfg->tags[i].name);
            if (rc)
                return rc;
        }
    return 0;
}

static int put_tag(void *ud, const char *tag)
{
    th_buf *b = ud;
    return th_buf_puts(b, tag) || th_buf_puts(b, "\n") ? TH_ENOMEM : 0;
}

/* One document's text: everything but the name. */
static int tool_text(const th_config *cfg, const th_tool *t, th_buf *b)
{
    th_buf_reset(b);
    int e = 0;
    const char *f[] = {t->title, t->description, t->long_description};
    for (size_t i = 0; i < 3; i++)
        if (f[i])
            e |= th_buf_puts(b, f[i]) | th_buf_puts(b, "\n");
    for (size_t i = 0; i < t->n_params; i++) {
        e |= th_buf_puts(b, t->params[i].name) | th_buf_puts(b, "\n");
        if (t->params[i].description)
            e |= th_buf_puts(b, t->params[i].description) |
                 th_buf_puts(b, "\n");
    }
    if (e)
        return TH_ENOMEM;
    return tool_tags(cfg, t, put_tag, b);
}

typedef struct build_ctx {
    th_host *h;
    const th_config *cfg;
    th_discovery *d;
    size_t cap;
    th_buf text;
    int rc;
} build_ctx;

static int add_doc(const th_tool *t, void *ud)
{
    build_ctx *c = ud;
    if (th_host_is_builtin(c->h, t))
        return 0;
    if ((c->rc = tool_text(c->cfg, t, &c->text)) != 0)
        return 1;
    size_t id = th_sindex_count(c->d->idx);
    if (id == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        bool *v = realloc(c->d->deferred, cap * sizeof *v);
        if (!v) {
            c->rc = TH_ENOMEM;
            return 1;
        }
        c->d->deferred = v;
        c->cap = cap;
    }
    if ((c->rc = th_sindex_add(c->d->idx, t->name, (const char *)c->text.data,
                               c->text.len)) != 0)
        return 1;
    bool def = th_config_tool_deferred(c->cfg, t->plugin->name, t->name);
    c->d->deferred[id] = def;
    c->d->n_deferred += def;
    return 0;
}

int th_discover_rebuild(th_host *h, const th_config *cfg, th_error *err)
{
    static atomic_ulong gens;
    th_discovery *d = calloc(1, sizeof *d);
    if (!d || !(d->idx = th_sindex_new())) {
        free(d);
        return th_error_set(err, TH_ENOMEM, "out of memory building the "
                            "search_tools index");
    }
    atomic_init(&d->refs, 1);
    d->gen = atomic_fetch_add(&gens, 1) + 1;
    build_ctx c = {h, cfg, d, 0, TH_BUF_INIT, 0};
    th_registry_foreach(h->reg, add_doc, &c);
    th_buf_destroy(&c.text);
    if (c.rc == 0)
        c.rc = th_sindex_finish(d->idx);
    if (c.rc) {
        disc_unref(d);
        return th_error_set(err, c.rc, "out of memory building the "
                            "search_tools index");
    }
    pthread_mutex_lock(&h->discmu);
    th_discovery *old = h->disc;
    h->disc = d;
    atomic_store(&h->any_deferred, d->n_deferred > 0);
    pthread_mutex_unlock(&h->discmu);
    disc_unref(old);
    th_log_debug("search_tools: index of %zu tools (%zu deferred, %zu terms)",
                 th_sindex_count(d->idx), d->n_deferred,
                 th_sindex_terms(d->idx));
    return 0;
}

void th_discover_close(th_host *h)
{
    disc_unref(h->disc);
    h->disc = NULL;
}

/* Whether the index still defers `name` (found names of an older index
 * that it no longer defers are dropped). */
static bool still_deferred(void *ud, const char *name)
{
    const th_discovery *d = ud;
    long id = th_sindex_find(d->idx, name);
    return id >= 0 && d->deferred[id];
}

/* ---- search_tools --------------------------------------------------------- */

typedef struct search_ctx {
    th_session *s;
    const th_sindex *idx;
    const th_tool *tools[SEARCH_LIMIT_MAX]; /* pinned, one per hit */
    size_t n;
} search_ctx;

/* Only tools the session may call (the toolsets' ACLs, as a call). */
static bool may_call(void *ud, uint32_t doc)
{
    search_ctx *c = ud;
    const th_tool *t = th_session_acquire(c->s, th_sindex_name(c->idx, doc));
    if (!t)
        return false;
    c->tools[c->n++] = t;
    return true;
}

/* query and limit from the validated arguments (defaults filled in). */
static void read_args(const uint8_t *args, size_t len, msgpack_unpacked *u,
                      const char **q, size_t *qlen, int64_t *limit)
{
    size_t off = 0;
    if (msgpack_unpack_next(u, (const char *)args, len, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        u->data.type != MSGPACK_OBJECT_MAP)
        return;
    for (uint32_t i = 0; i < u->data.via.map.size; i++) {
        const msgpack_object_kv *kv = &u->data.via.map.ptr[i];
        if (kv->key.type != MSGPACK_OBJECT_STR)
            continue;
        const msgpack_object_str *k = &kv->key.via.str;
        if (k->size == 5 && memcmp(k->ptr, "query", 5) == 0 &&
            kv->val.type == MSGPACK_OBJECT_STR) {
            *q = kv->val.via.str.ptr;
            *qlen = kv->val.via.str.size;
        } else if (k->size == 5 && memcmp(k->ptr, "limit", 5) == 0 &&
                   kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
            *limit = kv->val.via.u64 > SEARCH_LIMIT_MAX
                         ? SEARCH_LIMIT_MAX
                         : (int64_t)kv->val.via.u64;
        }
    }
}

static json_t *hit_json(const th_tool *t, double score)
{
    json_t *mcp = th_schema_mcp_tool(t);
    json_t *in = mcp ? json_object_get(mcp, "inputSchema") : NULL;
    json_t *o = json_object();
    if (!mcp || !in || !o) {
        json_decref(mcp);
        json_decref(o);
        return NULL;
    }
    int e = json_object_set_new(o, "name", json_string(t->name));
    if (t->title)
        e |= json_object_set_new(o, "title", json_string(t->title));
    e |= json_object_set_new(o, "description",
                             json_string(t->description ? t->description
                                                        : ""));
    e |= json_object_set_new(o, "score",
                             json_real((double)(int64_t)(score * 1e4) / 1e4));
    e |= json_object_set(o, "input_schema", in);
    json_decref(mcp);
    if (e) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int fail(toolhost_call *call, int code, const char *msg)
{
    th_mcall_set_error(call, code, msg);
    return TOOLHOST_FAILED;
}

static int exec_search(void *state, const toolhost_tool *tool,
                       toolhost_call *call, const uint8_t *args, size_t len)
{
    (void)state, (void)tool;
    th_session *s = th_call_session(call);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    const char *q = NULL;
    size_t qlen = 0;
    int64_t limit = SEARCH_LIMIT_DEFAULT;
    read_args(args, len, &u, &q, &qlen, &limit);
    char msg[160];
    th_discovery *d = s ? disc_get(s->h) : NULL;
    int rc = TOOLHOST_OK;
    if (!d || !q) {
        rc = fail(call, TH_ESTATE, "search_tools has no index");
        goto out;
    }
    search_ctx c = {.s = s, .idx = d->idx, .n = 0};
    th_sindex_hit hits[SEARCH_LIMIT_MAX];
    size_t n = 0;
    if (th_sindex_search(d->idx, q, qlen, (size_t)(limit < 1 ? 1 : limit),
                         may_call, &c, hits, &n) != 0) {
        rc = fail(call, TH_ENOMEM, "out of memory searching the tools");
        goto out_pinned;
    }
    if (n == 0 && th_sindex_tokens(q, qlen, false, NULL, NULL) == 0) {
        snprintf(msg, sizeof msg, "the query has no word to search for: give "
                 "a few words (letters or digits) that describe the tool");
        rc = fail(call, TH_EARGS, msg);
        goto out_pinned;
    }
    json_t *out = json_object(), *arr = json_array();
    int e = !out || !arr;
    for (size_t i = 0; !e && i < n; i++) {
        json_t *o = hit_json(c.tools[i], hits[i].score);
        e = !o || json_array_append_new(arr, o) != 0;
    }
    if (!e) {
        e = json_object_set_new(out, "tools", arr);
        arr = NULL;
    }
    /* 15 digits: a score reads 4.0146, not 4.0145999999999997 */
    char *text = e ? NULL
                   : json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(arr);
    json_decref(out);
    if (!text) {
        rc = fail(call, TH_ENOMEM, "out of memory answering search_tools");
        goto out_pinned;
    }
    /* The deferred tools found join the session's list. */
    const char *found[SEARCH_LIMIT_MAX];
    size_t nf = 0;
    for (size_t i = 0; i < n; i++)
        if (d->deferred[hits[i].doc])
            found[nf++] = c.tools[i]->name;
    bool added = false;
    if (nf)
        (void)th_session_found_add(s, d->gen, still_deferred, d, found, nf,
                                   &added); /* out of memory: callable
                                               anyway, listed later */
    call->host->write(call, TOOLHOST_STDOUT, text, strlen(text));
    free(text);
    if (added)
        th_session_tools_changed(s);
out_pinned:
    for (size_t i = 0; i < c.n; i++)
        th_tool_release(c.tools[i]);
out:
    disc_unref(d);
    msgpack_unpacked_destroy(&u);
    return rc;
}

static const toolhost_param search_params[] = {
    {.struct_size = sizeof(toolhost_param),
     .name = "query",
     .type = TOOLHOST_TYPE_STRING,
     .required = 1,
     .description = "What the tool should do, in a few words (e.g. \"create "
                    "a github issue\"); matched against tool names, "
                    "descriptions, parameters and tags",
     .min_length = 1,
     .max_length = SEARCH_QUERY_MAX},
    {.struct_size = sizeof(toolhost_param),
     .name = "limit",
     .type = TOOLHOST_TYPE_INTEGER,
     .required = 0,
     .description = "How many tools to return at most, best first",
     .default_json = "5",
     .minimum = 1,
     .maximum = SEARCH_LIMIT_MAX,
     .bounds = TOOLHOST_BOUND_MINIMUM | TOOLHOST_BOUND_MAXIMUM},
};

static const char search_output_schema[] =
    "{\"type\":\"object\",\"properties\":{\"tools\":{\"type\":\"array\","
    "\"items\":{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\"},\"title\":{\"type\":\"string\"},"
    "\"description\":{\"type\":\"string\"},\"score\":{\"type\":\"number\"},"
    "\"input_schema\":{\"type\":\"object\"}},"
    "\"required\":[\"name\",\"description\",\"score\",\"input_schema\"]}}},"
    "\"required\":[\"tools\"]}";

static const toolhost_tool search_tools[] = {
    {.struct_size = sizeof(toolhost_tool),
     .name = TH_SEARCH_TOOL_NAME,
     .description = "Find tools that are not in your tool list: returns the "
                    "best matches for a query with their input schemas; "
                    "then call them by name",
     .long_description =
         "Many tools of this server are not listed up front. Describe what "
         "you need in a few words; the answer lists the tools that match "
         "best (name, title, description, relevance score and the JSON "
         "Schema of their arguments), best first. Call a tool found this way "
         "by its name like any listed tool. Only tools you may call are "
         "returned.",
     .params = search_params,
     .n_params = 2,
     .stdout_type = TOOLHOST_SEM_STRUCTURED,
     .stderr_type = TOOLHOST_SEM_ERROR,
     /* short: a search is tens of microseconds and never waits (h->discmu
      * and s->mu are leaves held for a copy), so it runs on the caller's
      * thread */
     .flags = TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT |
              TOOLHOST_TOOL_SHORT,
     .execute = exec_search,
     .title = "Search tools",
     .output_schema = search_output_schema},
};

const toolhost_plugin th_search_tools_plugin = {
    .struct_size = sizeof(toolhost_plugin),
    .abi_major = TOOLHOST_ABI_MAJOR,
    .abi_minor = TOOLHOST_ABI_MINOR,
    .name = "builtin-search",
    .version = TOOLHOST_VERSION,
    .description = "The host's tool search (deferred tools).",
    .tools = search_tools,
    .n_tools = 1,
};

/* search_tools is in every toolset while some tool is deferred; what it
 * returns is the caller's to call. */
bool th_search_tools_member(const th_toolset_cfg *ts, const char *tool,
                            void *ud)
{
    (void)ts, (void)tool;
    th_host *h = ud;
    return atomic_load_explicit(&h->any_deferred, memory_order_relaxed);
}
