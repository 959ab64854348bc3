/* th/content.h - resources, prompts and completion (ABI 1.4): what a
 * plugin offers besides tools, checked and copied at load, and served to a
 * session by URI or name.
 *
 * A plugin's resources and prompts are offered by the toolsets that have
 * one of its tools (tools: ["*"]: every plugin's), to the sessions that
 * may use such a toolset.  The plugin's read(), get() and complete() run
 * on the caller's thread (plugin.h: they never block); the generation is
 * pinned meanwhile, so a reload may swap it.  What they return is a
 * th_content: the blocks they added with content_add(), copied.
 */
#ifndef TH_CONTENT_H
#define TH_CONTENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/err.h"
#include "th/tool.h"

typedef struct th_resource {
    char *uri;                /* the URI or the template                */
    char *name, *title, *description, *mime_type; /* title..: or NULL   */
    bool is_template;         /* uri holds {variables}                  */
    const toolhost_resource *desc;
} th_resource;

typedef struct th_prompt {
    char *name, *title, *description; /* title: or NULL */
    th_param *args;
    size_t n_args;
    const toolhost_prompt *desc;
} th_prompt;

/* One block a callback added (toolhost_block, copied; strings or NULL). */
typedef struct th_block {
    uint32_t kind;            /* TOOLHOST_BLOCK_* */
    char *role, *mime_type, *uri, *name;
    uint8_t *data;
    size_t len;
} th_block;

/* What a read, a get or a completion asks of content_add(). */
typedef enum th_content_mode {
    TH_CONTENT_READ = 1,      /* resource contents */
    TH_CONTENT_PROMPT = 2,    /* prompt messages */
    TH_CONTENT_COMPLETE = 3,  /* completion values: TEXT only, 100 kept */
    TH_CONTENT_RESULT = 4     /* a tool call's blocks (write_block): any
                                 kind, role ignored */
} th_content_mode;

/* The sink behind toolhost_content (its public part first). */
typedef struct th_content {
    toolhost_content pub;     /* pub.host: set before the plugin's call */
    th_content_mode mode;
    th_block *v;
    size_t n, cap;
    size_t bytes, max_bytes;  /* what the blocks hold; the budget */
    size_t dropped;           /* completion values past 100 */
    const char *plugin;       /* for log lines */
    bool bad;                 /* a block was refused: the request fails */
    bool logged;              /* a refusal was logged: no more lines (a
                                 plugin refused in a loop floods nothing) */
    char why[256];            /* the first refusal */
    int fail_code;            /* set by an isolated plugin's proxy when
                                 its worker died (TH_EPLUGIN_CRASHED) or
                                 was killed past content_timeout
                                 (TH_ETIMEOUT): the request's error code;
                                 0: the callback's status says */
} th_content;

/* The sink the plugin callback about to run on this thread is given;
 * content_add() refuses any other (one kept past its callback, or used
 * from another thread), so a stale pointer is never written through.
 * th_content_leave() when the callback returned. */
void th_content_enter(th_content *c);
void th_content_leave(void);

/* An empty sink; max_bytes 0: 16 MiB.  th_content_free() frees the
 * blocks (the struct is the caller's). */
void th_content_init(th_content *c, th_content_mode mode, size_t max_bytes);
void th_content_free(th_content *c);

/* Appends a copy of block b to c (what content_add() and write_block()
 * do once the sink is known to be the caller's): 0, TOOLHOST_EINVAL (a
 * bad block, logged once and kept in c->why), TOOLHOST_ENOMEM (past
 * c->max_bytes, or out of memory). */
int th_content_add(th_content *c, const toolhost_block *b);

/* c's blocks as one msgpack array, the form a call result's
 * meta.toolhost.content has (docs/protocol.md): maps of "type" (text,
 * image, audio, resource, resource_link) and "text" (str) or "data"
 * (bin), "mime_type", "uri", "name" when set.  0 or TH_ENOMEM. */
struct msgpack_packer;
int th_content_pack(const th_content *c, struct msgpack_packer *pk);

/* The host api members of ABI 1.4 (content_add, resource_updated). */
void th_content_api_fill(toolhost_host_api *api);

/* Checks and copies the resources and prompts of descriptor d (a 1.4
 * plugin) into p.  Problems are TH_ELOAD errors naming the resource or
 * prompt, as for tools.  Load class. */
int th_content_load(const char *shown, const toolhost_plugin *d, th_plugin *p,
                    th_error *err);
void th_content_unload(th_plugin *p);

/* The resource of p at uri: a fixed one when !templates, else the first
 * template that matches; NULL when none. */
const th_resource *th_resource_at(const th_plugin *p, const char *uri,
                                  bool templates);

/* Whether a MIME type names text (text/..., ...json, ...xml): an
 * embedded resource of that type goes out as text when its bytes are
 * UTF-8. */
bool th_mime_textual(const char *mime);

/* Whether `uri` matches template `tmpl` (RFC 6570 level 1: a {var}
 * matches one or more characters other than '/', '?', '#', up to the
 * first place the template's next literal follows: "x://{a}.json" does
 * not match "x://v.jsonx.json").  No backtracking: the cost is at most
 * the URI's length times the literal's. */
bool th_uri_template_match(const char *tmpl, const char *uri);

/* Who hears of resource updates (the MCP front sets it once): fn(uri),
 * from the plugin's thread. */
void th_content_set_update_hook(void (*fn)(const char *uri));

/* ---- Served to a session (th/host.h) ------------------------------------ */

struct th_session;

/* Calls fn for each resource (templates when `templates`, else the
 * others) the session may read, then each prompt, in plugin order; the
 * views are valid during fn.  Stops at a nonzero return and returns it. */
int th_session_resources(struct th_session *s, bool templates,
                         int (*fn)(const th_resource *r, void *ud), void *ud);
int th_session_prompts(struct th_session *s,
                       int (*fn)(const th_prompt *p, void *ud), void *ud);

/* Whether the session is offered a resource at `uri` (as th_session_read
 * would find it), without reading it. */
bool th_session_resource_offered(struct th_session *s, const char *uri);

/* Reads `uri`: the first resource the session may read whose URI is it,
 * else the first template that matches it.  0 with the contents in out
 * (a TH_CONTENT_READ sink); TH_ENOTFOUND (no such resource, or the plugin
 * said TOOLHOST_NOT_FOUND); TH_EFAILED with the plugin's reason; TH_ETOOL
 * when a block was refused (err says why).  The same TH_ETOOL for the
 * functions below. */
int th_session_read(struct th_session *s, const char *uri, th_content *out,
                    th_error *err);
/* Gets prompt `name` with `args` (a msgpack map, or NULL for none):
 * TH_ENOTFOUND, TH_EARGS (arguments: err names the problem), TH_EFAILED,
 * or 0 with the messages in out (a TH_CONTENT_PROMPT sink). */
int th_session_prompt_get(struct th_session *s, const char *name,
                          const uint8_t *args, size_t len, th_content *out,
                          th_error *err);
/* Completion of argument `arg` of prompt `ref` (is_prompt) or of
 * variable `arg` of resource template `ref`, given `value`: 0 with the
 * values in out (TH_CONTENT_COMPLETE; none when the plugin completes
 * nothing), TH_ENOTFOUND (no such prompt, template or argument). */
int th_session_complete(struct th_session *s, bool is_prompt, const char *ref,
                        const char *arg, const char *value, th_content *out,
                        th_error *err);

#endif /* TH_CONTENT_H */
