/* th/projection.h - tools as seen from inside a code runtime, independent of
 * the language.
 *
 * A projection is the list of tools a script may call: for each, the name
 * it has in the target language (its key), the host's tool name, a text doc
 * (description and parameters, generated from the th_tool) and the
 * parameter types (so a runtime can encode an empty list as an array where
 * the tool wants one).  Calls go through one "tool caller" (th_proj_caller)
 * that the owner supplies: the built-in run_code tool plugs th_call_sync()
 * in, tests plug fake tools in.  The layer knows nothing of Lua; a runtime
 * for another language supplies its own th_proj_lang (naming rules) and
 * reuses everything here unchanged.
 *
 * Naming.  Host tool names match ^[a-zA-Z0-9_-]{1,64}$; a language rarely
 * accepts '-' in identifiers, so th_proj_lang.map_name() maps a host name to
 * an identifier (Lua: '-' -> '_', a leading digit gets a '_' prefix).  Two
 * tools mapping to the same identifier, or an identifier the language
 * refuses (a keyword), make th_projection_check() fail with a message that
 * names both tools and says what to change.
 *
 * Threads.  A projection is built by one thread; once checked it is
 * read-only and may be shared by runs on any threads, provided the caller's
 * call() is itself safe for that.
 */
#ifndef TH_PROJECTION_H
#define TH_PROJECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/buf.h"
#include "th/err.h"
#include "toolhost/plugin.h"

struct th_tool;

/* The naming rules of one target language. */
typedef struct th_proj_lang {
    const char *name; /* "lua"; used in messages */
    /* Maps a host tool name to an identifier of the language, writing a
     * NUL-terminated string of at most `size` bytes.  0 or TH_EINVAL. */
    int (*map_name)(const char *tool, char *out, size_t size);
    /* True when `ident` is a valid identifier (and not a keyword); else
     * false with a short reason ("'end' is a Lua keyword") in `why`. */
    bool (*valid_ident)(const char *ident, char *why, size_t why_size);
} th_proj_lang;

/* The outcome of one call from code, owned by the caller's struct
 * (th_proj_result_destroy releases it). */
typedef enum th_proj_kind {
    TH_PROJ_DONE = 1, /* the tool ran: ok, out, err, meta */
    TH_PROJ_ERROR = 2 /* a tool error: error code + message */
} th_proj_kind;

typedef struct th_proj_result {
    th_proj_kind kind;
    bool ok;         /* DONE */
    th_buf out, err; /* DONE: stdout and stderr */
    th_buf meta;     /* DONE: a msgpack map, len 0 when none */
    int error;       /* ERROR: a TH_E* code (th_err_name gives its name) */
    char *message;   /* ERROR: malloc()ed, or NULL */
    bool structured; /* DONE: stdout is checked structured output
                        (th_result.structured) */
} th_proj_result;

void th_proj_result_init(th_proj_result *r);
void th_proj_result_destroy(th_proj_result *r);

/* Progress of a call from code (an async tool's updates).  `message` and
 * `data` (a msgpack value or NULL) are valid during the callback only. */
typedef void (*th_proj_progress_fn)(void *ud, double fraction,
                                    const char *message, const uint8_t *data,
                                    size_t data_len);

/* The tool caller a projection calls through. */
typedef struct th_proj_caller {
    /* Runs host tool `tool` with the msgpack map `args` to its end
     * (waiting for an async tool's final result), within `timeout_ms`
     * (> 0: what is left of the run's deadline; 0 when the run has no
     * deadline, and the tool's own timeout applies).  Calls
     * `progress` (may be NULL) for progress updates, from any thread.
     * Fills *out (initialised by the runtime) and returns 0; or returns a
     * negative TH_E* code when the call could not even be made (then *out
     * is left empty and the runtime reports that code as a tool error).
     * Called from the thread running the script. */
    int (*call)(void *ud, const char *tool, const uint8_t *args, size_t len,
                int64_t timeout_ms, th_proj_progress_fn progress, void *pud,
                th_proj_result *out);
    void *ud;
} th_proj_caller;

/* A parameter as a runtime needs it. */
typedef struct th_proj_param {
    char *name;
    toolhost_type type;
    bool required;
} th_proj_param;

/* One projected tool. */
typedef struct th_proj_tool {
    char *key;         /* the identifier in the target language */
    char *name;        /* the host's tool name (what call() receives) */
    char *description; /* one line */
    char *doc;         /* description, flags and parameters, as text */
    char *signature;   /* "echo{text: string, count?: integer}" */
    th_proj_param *params;
    size_t n_params;
    uint32_t flags;    /* TOOLHOST_TOOL_* */
    bool key_given;    /* added raw with an explicit key: not re-mapped */
} th_proj_tool;

typedef struct th_projection {
    const th_proj_lang *lang;
    th_proj_caller caller;
    th_proj_tool *tools; /* in insertion order (th_session_tools: by name) */
    size_t n_tools;
    size_t cap;
} th_projection;

/* Creates an empty projection for `lang`, calling through `caller`
 * (copied).  NULL when out of memory.  Free with th_projection_free(). */
th_projection *th_projection_new(const th_proj_lang *lang,
                                 const th_proj_caller *caller);
void th_projection_free(th_projection *p);

/* Adds `tool` (copied: the th_tool need not outlive this call) under the
 * key lang->map_name() gives.  0, TH_ENOMEM, or TH_EINVAL when the name
 * cannot be mapped. */
int th_projection_add(th_projection *p, const struct th_tool *tool,
                      th_error *err);

/* Adds a tool from its parts (for tests and other runtimes without a
 * th_tool at hand).  `key` NULL: mapped from `name`.  `params` may be NULL
 * when n_params is 0.  Strings are copied. */
int th_projection_add_raw(th_projection *p, const char *key,
                          const char *name, const char *description,
                          const th_proj_param *params, size_t n_params,
                          uint32_t flags, th_error *err);

/* Checks the projection before use: every key a valid identifier of the
 * language, keys unique, each key equal to what map_name() gives for its
 * tool (unless added raw with an explicit key, the key must still be a
 * valid identifier).  0, or TH_EINVAL with a message that names the tools
 * at fault and how to fix it. */
int th_projection_check(const th_projection *p, th_error *err);

/* The projected tool with key `key`, or NULL. */
const th_proj_tool *th_projection_find(const th_projection *p,
                                       const char *key);


#endif
