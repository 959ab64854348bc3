/* th/tool.h - loaded plugins, tools, the registry, and argument validation.
 *
 * The loader turns a .so into a th_plugin (one "generation" of a plugin):
 * dlopen, entry symbol, ABI and struct_size checks, every tool and
 * parameter checked and copied into host-owned th_tool/th_param, then
 * init() with the plugin's config block.  The registry maps tool names to
 * th_tools; a call pins its tool's plugin generation (reference count) from
 * lookup until the call ends, so a reload can swap generations while old
 * calls finish on the old code.
 */
#ifndef TH_TOOL_H
#define TH_TOOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/buf.h"
#include "th/err.h"
#include "toolhost/plugin.h"

/* A parameter, normalized and owned by the host. */
typedef struct th_param {
    char *name;
    char *description;
    toolhost_type type;
    uint32_t item_type;   /* for arrays, 0 = any */
    bool required;
    char **enum_values;   /* NULL or n_enum strings */
    size_t n_enum;
    uint8_t *default_mp;  /* msgpack of the default, or NULL */
    size_t default_len;
    /* Appended (ABI 1.1): the constraints as declared (exported as JSON
     * Schema keywords), and `cons`, the compiled node that checks them
     * (schema_json with the bounds, length, pattern and item limits added),
     * NULL when the parameter has none. */
    double minimum, maximum;
    uint32_t bounds;              /* TOOLHOST_BOUND_* */
    uint32_t min_length, max_length, min_items, max_items; /* 0: none */
    char *pattern;                /* or NULL */
    char *schema_json;            /* or NULL, exported as is */
    struct th_jschema *cons;
} th_param;

typedef struct th_plugin th_plugin;

/* A tool, as the host sees it.  Owned by its th_plugin. */
typedef struct th_tool {
    char *name;
    char *description;
    char *long_description;      /* may be NULL */
    th_param *params;
    size_t n_params;
    uint32_t stdout_type, stderr_type, flags;
    const toolhost_tool *desc;   /* the plugin's descriptor (execute, ...) */
    th_plugin *plugin;           /* the generation that provides it */
    /* Appended (ABI 1.1): */
    char *title;                 /* or NULL */
    char *output_schema;         /* the JSON Schema text, or NULL */
    struct th_jschema *out_schema; /* compiled output_schema, or NULL */
    /* Appended (ABI 1.4): the whole input schema (text, exported as is)
     * and its compiled form, or NULL: the params describe the input. */
    char *input_schema;
    struct th_jschema *in_schema;
    /* Appended (ABI 1.5): the tags the plugin declares (copied, checked:
     * th_tag_name_valid, unique, at most TOOLHOST_MAX_TAGS), in its
     * order; NULL and 0 when none.  The config's `tags:` add to them
     * where they are read (toolsets, disable), not here. */
    char **tags;
    size_t n_tags;
    /* Whether output_schema describes an object (MCP's outputSchema and
     * structuredContent): 0 not yet known, 1 yes, 2 no.  A cache that
     * th_schema_tool_output_object() fills on first use, so that a call
     * does not parse the schema again; it never changes after. */
    _Atomic int output_object;
} th_tool;

/* One loaded generation of a plugin. */
struct th_plugin {
    char *name;                  /* the config name (or the descriptor's) */
    char *path;                  /* the file as configured */
    char *load_path;             /* the file dlopen()ed (a private copy
                                    after a reload), owned */
    void *dl;                    /* dlopen handle; NULL for built-ins */
    const toolhost_plugin *desc;
    toolhost_host_api api;       /* the api given to init(); the host finds
                                    the plugin from it (container_of) */
    void *state;                 /* what init() stored */
    bool initialized;            /* init() succeeded: fini() is owed */
    th_tool *tools;
    size_t n_tools;
    uint64_t generation;         /* 1 for the first load, +1 per reload */
    atomic_long refs;            /* 1 held by the registry + 1 per call */
    void (*on_last_unref)(th_plugin *p); /* hook for the reload module */
    void *user;                  /* for the owner of the plugin */
    /* Appended members (core): */
    char *version;               /* the descriptor's version, or "" */
    char *description;           /* the descriptor's description */
    th_param *config_params;     /* the schema of its config block */
    size_t n_config_params;
    /* Appended (ABI 1.1): */
    uint32_t abi_minor;          /* the minor the plugin was built with */
    uint64_t flags;              /* TOOLHOST_PLUGIN_* (0 before 1.1) */
    /* Appended (isolation): the proxy of an `isolation: process` plugin
     * (iso_host.c); on_destroy runs last in th_plugin_close(). */
    void *iso;
    void (*on_destroy)(th_plugin *p);
    /* Appended: this generation's serial, unique in the process and never
     * reused, given on first use (call_start.c's decision cache keys a
     * tool on its pointer and this).  0 until then; read and set
     * atomically. */
    uint64_t serial;
    /* Appended (ABI 1.4): its resources and prompts (th/content.h), or
     * none. */
    struct th_resource *resources;
    size_t n_resources;
    struct th_prompt *prompts;
    size_t n_prompts;
};

/* The sizes of the ABI 1.0 structs: where the members of 1.1 start (each
 * 1.1 struct starts its new members at or after the 1.0 sizeof, see
 * plugin.h; tests/abi10 holds the frozen 1.0 header that proves it). */
#define TH_ABI10_PARAM_SIZE offsetof(toolhost_param, minimum)
#define TH_ABI10_TOOL_SIZE offsetof(toolhost_tool, title)
#define TH_ABI10_PLUGIN_SIZE offsetof(toolhost_plugin, flags)
#define TH_ABI10_API_SIZE offsetof(toolhost_host_api, caller)

/* ---- Loader ------------------------------------------------------------ */

typedef struct th_load_opts {
    const char *name;        /* config name; NULL: the descriptor's name */
    bool allow_insecure;     /* skip the writable-by-others check */
    const char *load_path;   /* dlopen this file instead of `path` (a
                                private copy); NULL: `path` */
    uint64_t generation;     /* 0 means 1 */
    /* Appended (core): "report every problem" mode for `toolhost check`.
     * When set, each problem that does not stop the checks (a bad tool, a
     * duplicate tool name, a bad parameter table, a missing description)
     * is passed to on_problem (msg valid during the call) and the checks go
     * on; th_plugin_open() still fails, with the first problem and
     * " (and N more problems)".  Problems that stop everything (file,
     * dlopen, entry symbol, ABI, struct sizes, plugin name) are only
     * returned.  Called on the thread of th_plugin_open(). */
    void (*on_problem)(void *ud, const char *msg);
    void *problem_ud;
    /* Appended (core): the file already opened and checked by
     * th_plugin_file_open() (still owned by the caller).  The loader does
     * not open `path` or load_path then, and dlopen()s "/proc/self/fd/N":
     * the very file that was checked.  Only for a process that loads one
     * plugin (the child of `toolhost check`): the dynamic linker knows an
     * object by its name, so a second "/proc/self/fd/N" with a reused N
     * would give back the first object. */
    bool has_fd;
    int fd;
    /* Appended (core): load_path is a copy in the host's private folder
     * (reload_copy.c), a folder whose path was checked as the walk checks
     * folders when it was made, which only the host's user may change: the
     * loader opens the copy itself (O_NOFOLLOW, a regular file of the
     * host's user) instead of walking the folders again for every
     * plugin. */
    bool private_copy;
} th_load_opts;

/* Opens and checks a plugin without calling init().  *out is a new
 * th_plugin with refs = 1 (the caller's), or NULL on failure.  Errors
 * (TH_ELOAD) read "PATH: reason", PATH as given:
 *   cannot open: No such file or directory
 *   refused: the file|folder F is writable by others|its group (mode M),
 *     ...; fix it with 'chmod go-w F', or set 'allow_insecure: true' ...
 *   refused: the file|folder F belongs to another user (uid U), ...
 *   not a shared object: <dlerror>      (the file is not ELF)
 *   cannot be loaded: <dlerror>         (ELF, but dlopen failed)
 *   entry symbol 'toolhost_plugin_v1' not found (...)
 *   ABI major 2, this host speaks 1 (...)
 *   toolhost_plugin struct_size 8 is smaller than the N bytes of ABI 1.0
 *   tool 'bad name!' has an invalid name (allowed: letters, digits, _ and
 *     -, 1 to 64)
 *   tool name 'x' appears twice
 *   tool 'x' has no description | no execute function | an unknown
 *     stdout/stderr semantic type N | unknown flag bits 0xN
 *   tool 'x': parameter 'p' ... (see th_params_from_abi)
 *   refused: the symlink L belongs to another user (uid U), ...
 *   refused: it holds a Go runtime and this process already runs the one
 *     of P (plugin 'N') ...             (a second Go object: dl_go.h)
 *   refused: a reload of the in-process Go plugin 'N' would load a second
 *     Go runtime ...                    (generation > 1 of the Go plugin N)
 * The file is opened once with th_plugin_file_open() (the safety walk,
 * skipped with allow_insecure): load_path when given, else `path`.  With
 * load_path, `path` is only the name in messages: the caller opened and
 * checked it and made the copy from that fd (see reload.c prepare()).
 * Load class. */
int th_plugin_open(const char *path, const th_load_opts *opts,
                   th_plugin **out, th_error *err);

/* Opens `path` read-only, once, for the loader or a private copy; *fd_out
 * is the open file (the caller closes it).  With `check`, the path is
 * walked as written from "/" (a relative path from the current folder),
 * one component at a time with openat(O_PATH | O_NOFOLLOW), and what was
 * opened is checked, never a name again:
 *   - every folder reached, "/" included, must belong to root or to the
 *     host's user and not be writable by group or others, unless sticky
 *     (such as /tmp);
 *   - a symlink is followed (at most 40) only once the folder holding it
 *     passed, and only when the link belongs to root or the host's user;
 *     an absolute target starts again from "/";
 *   - the file must be a regular file, owned as above, not writable by
 *     group or others.
 * So no other user can make the same path name other code later, and the
 * fd is the file that passed.  Errors (TH_ELOAD) read "SHOWN: reason"
 * (`shown` NULL: `path`), the reasons of th_plugin_open() above, naming
 * the folder, file or link as walked.  Without `check`: open() and "not a
 * regular file" only.  Any thread. */
int th_plugin_file_open(const char *path, const char *shown, bool check,
                        int *fd_out, th_error *err);

/* Whether `path` looks like a shared object still being written: empty,
 * or an ELF header whose program headers or segments, or section table,
 * reach past the end of the file.  A complete ELF file, or a file that is
 * not ELF at all (and long enough to tell), is not "incomplete". */
bool th_elf_incomplete(const char *path);
/* The same for an open file (read with pread(), the offset is kept). */
bool th_elf_incomplete_fd(int fd);

/* Calls init() with a msgpack config map (NULL/0 for none).  The map is
 * first checked against p->config_params with th_validate_params() (what =
 * NULL) and its defaults filled in, so init() always gets a valid,
 * complete map (an empty one when the plugin declares no config); a bad
 * block fails with "PATH: config of plugin 'NAME': <reason>".  On init()
 * failure returns TH_ELOAD "PATH: init failed: <the plugin's message>";
 * fini() will not be called then.  A plugin without init() counts as
 * initialized.  TH_ESTATE if called twice.  Load class. */
int th_plugin_init(th_plugin *p, const uint8_t *config, size_t len,
                   th_error *err);

/* Pins / unpins a generation.  The last unref calls p->on_last_unref(p)
 * when set (the hook then owns p and ends it with th_plugin_close()),
 * else th_plugin_close().  Any thread; the refcount is atomic. */
void th_plugin_ref(th_plugin *p);
void th_plugin_unref(th_plugin *p);

/* Calls fini() when init() succeeded, dlclose()s, and frees everything,
 * whatever the refcount.  Load class: not concurrently with other Load
 * functions of the plugin, and only once no call uses it.  NULL is ok. */
void th_plugin_close(th_plugin *p);
/* th_plugin_close(), telling whether the object's dlclose() waits for a
 * thread still inside its code (dl_guard: it is unmapped later). */
void th_plugin_close_ex(th_plugin *p, bool *deferred);

/* The th_plugin whose api is `api` (for host callbacks such as log): the
 * api is a member of the plugin's record.  Inline, so that the files of
 * the host callbacks need nothing of the loader. */
static inline th_plugin *th_plugin_from_api(const toolhost_host_api *api)
{
    return (th_plugin *)((char *)(uintptr_t)api - offsetof(th_plugin, api));
}

/* Every toolhost_call the host hands a plugin is the first member of a
 * th_call_base: the host API's call callbacks (write, set_meta, progress,
 * is_cancelled, time_left_ms, suspend, complete) dispatch through its
 * vtable, so the manager, mocks and test harnesses each provide their own
 * call implementation behind the one ABI table. */
typedef struct th_call_vtbl {
    int (*write)(toolhost_call *call, int stream, const void *data,
                 size_t len);
    int (*set_meta)(toolhost_call *call, const uint8_t *map, size_t len);
    int (*progress)(toolhost_call *call, double fraction, const char *message,
                    const uint8_t *data, size_t data_len);
    int (*is_cancelled)(const toolhost_call *call);
    int64_t (*time_left_ms)(const toolhost_call *call);
    int (*suspend)(toolhost_call *call);
    int (*complete)(toolhost_call *call, int status);
    /* Appended (ABI 1.1), each optional (NULL: caller fills nothing but
     * uid -1; on_cancel and cancel_fd answer TOOLHOST_ESTATE).  caller()
     * gets a zeroed host-sized toolhost_caller; on_cancel() and
     * cancel_fd() are Any class (see plugin.h). */
    int (*caller)(const toolhost_call *call, toolhost_caller *out);
    int (*on_cancel)(toolhost_call *call, void (*fn)(void *ud), void *ud);
    int (*cancel_fd)(toolhost_call *call);
    /* Appended, optional: a log_call() line (Any class), already one line
     * and bounded, passed on to whoever made the call (the session's
     * front, th_front_ops.log_call).  The host log is written before. */
    void (*log)(const toolhost_call *call, int level, const char *line);
    /* Appended (ABI 1.4), each optional (NULL: TOOLHOST_ENOTSUP). */
    int (*write_block)(toolhost_call *call, const toolhost_block *block);
    int (*ask_client)(toolhost_call *call, int kind, const char *request,
                      size_t len, const char **answer, size_t *answer_len);
    /* Appended (ABI 1.5), optional (NULL: TOOLHOST_ENOTSUP). */
    int (*set_retry_after)(toolhost_call *call, uint64_t ms);
} th_call_vtbl;

typedef struct th_call_base {
    toolhost_call pub; /* first: a toolhost_call* is a th_call_base* */
    const th_call_vtbl *vt;
} th_call_base;

/* Fills the host API table given to plugins: struct_size, ABI version,
 * the call callbacks (dispatching through th_call_base.vt) and log (which
 * logs under the plugin's name, found with th_plugin_from_api). */
void th_host_api_fill(toolhost_host_api *api);

/* ABI 1.5 tools_changed(): the host api member checks its arguments and
 * makes `reason` one printable line of at most this many bytes (then
 * " [cut]"), and calls the hook with the plugin generation whose api it
 * was (the reloader's, reload.c; any thread; must not wait).  No hook:
 * TOOLHOST_ENOTSUP.  Process-wide; set it before plugins run, NULL to
 * remove. */
#define TH_TOOLS_CHANGED_REASON_MAX 200
void th_plugin_set_tools_changed_hook(int (*fn)(th_plugin *p,
                                                const char *reason));

/* Builds a plugin generation from a descriptor linked into the host (the
 * built-in tools: task tools, run_code, mocks): the same checks as
 * th_plugin_open(), no dlopen, refs = 1.  init() is not called. */
int th_plugin_builtin(const toolhost_plugin *desc, th_plugin **out,
                      th_error *err);

/* Checks that `name` matches ^[a-zA-Z0-9_-]{1,64}$. */
bool th_tool_name_valid(const char *name);
/* Checks that `name` matches ^[a-z0-9][a-z0-9_-]{0,31}$ (a tag a plugin
 * declares, toolhost_tool.tags). */
bool th_tag_name_valid(const char *name);
/* Whether the plugin of `t` declares the tag `tag` on it (ABI 1.5). */
bool th_tool_has_tag(const th_tool *t, const char *tag);
/* Checks that `name` matches ^[a-zA-Z_][a-zA-Z0-9_]{0,63}$. */
bool th_param_name_valid(const char *name);
/* "string", "integer", ... for a toolhost_type; "unknown" otherwise. */
const char *th_type_name(uint32_t type);

/* Normalizes a parameter table from a plugin (walking by struct_size) into
 * host-owned th_params: names valid and unique, types known, description
 * present, enum only on strings, default parses as JSON and matches.
 * `what` names the table in errors ("tool fs_read", "config of fs"). */
int th_params_from_abi(const char *what, const toolhost_param *params,
                       uint32_t n, th_param **out, size_t *n_out,
                       th_error *err);
void th_params_free(th_param *params, size_t n);
/* The same, reporting each bad parameter to report(ud, err, code) and
 * going on with the next while it returns 0 (the table is then incomplete:
 * only for a caller that fails the whole load in the end, as `toolhost
 * check` does); a nonzero return stops with that code.  report NULL: stop
 * at the first problem. */
typedef int (*th_problem_fn)(void *ud, th_error *err, int code);
int th_params_from_abi_r(const char *what, const toolhost_param *params,
                         uint32_t n, th_problem_fn report, void *ud,
                         th_param **out, size_t *n_out, th_error *err);

/* ---- Registry ----------------------------------------------------------- */

typedef struct th_registry th_registry;

th_registry *th_registry_new(void);
/* Unrefs every plugin it holds, then frees itself. */
void th_registry_free(th_registry *reg);

/* Adds every tool of `p`.  On success the registry takes over the
 * caller's reference (the one th_plugin_open() returned); on failure the
 * caller keeps it.  Fails with TH_ELOAD naming both plugins if a tool name
 * is taken, or if a plugin of the same name is already in; nothing is
 * added then.  Any thread (writers are serialized by the registry lock). */
int th_registry_add(th_registry *reg, th_plugin *p, th_error *err);

/* Atomically replaces generation `old` by `p` (same plugin name): new
 * lookups see `p`; `old` loses the registry's reference (dropped after the
 * lock is released, so its fini() runs here only if no call pins it).  The
 * registry takes over the caller's reference on `p` on success.  Fails
 * (changing nothing) with TH_EINVAL if names differ, TH_ENOTFOUND if `old`
 * is not held, TH_ELOAD if a new tool name clashes with another plugin. */
int th_registry_replace(th_registry *reg, th_plugin *old, th_plugin *p,
                        th_error *err);
/* Removes `p` and drops the registry's reference; no-op if not held. */
void th_registry_remove(th_registry *reg, th_plugin *p);

/* Looks up a tool and pins its generation; NULL when unknown.  Pair with
 * th_tool_release().  Safe from any thread, without a lock: the thread's
 * hazard slot, its lookup cache (one strcmp) or a binary search, and one
 * atomic increment.  The tool stays valid until released, even if its
 * plugin is removed or replaced meanwhile. */
const th_tool *th_registry_acquire(th_registry *reg, const char *name);
void th_tool_release(const th_tool *tool);

/* The plugin of that config name (not pinned), or NULL. */
th_plugin *th_registry_plugin(th_registry *reg, const char *name);

/* Calls fn for every tool, in name order, with the registry read-locked;
 * fn must not call back into the registry.  Stops when fn returns nonzero
 * and returns that value. */
int th_registry_foreach(th_registry *reg,
                        int (*fn)(const th_tool *tool, void *ud), void *ud);
size_t th_registry_count(th_registry *reg);
/* Calls fn for every plugin generation the registry holds, in load order,
 * read-locked (fn may th_plugin_ref it; it must not call back into the
 * registry); stops at a nonzero return and returns it. */
int th_registry_foreach_plugin(th_registry *reg,
                               int (*fn)(th_plugin *p, void *ud), void *ud);

/* ---- Validation: the one place ------------------------------------------ */

/* What failed, for messages that point at one key. */
typedef struct th_verr {
    th_error e;
    char key[72]; /* the offending parameter, "" when the args as a whole */
} th_verr;

/* Checks a msgpack map against a parameter table: a map, no unknown key,
 * every required key present, each value of its type (an integer is
 * accepted for a number; nothing else is coerced), in the enum.  When a
 * default must be filled in, *out receives the completed map and
 * *filled = true; otherwise `out` is untouched and the input stands.
 * Returns 0, TH_EARGS, TH_ENOMEM, or TH_EINVAL when a default must be
 * filled in and `out` is NULL.
 *
 * Messages.  err->e.msg is "Error parsing arguments for " WHAT ": " REASON
 * when `what` is not NULL, and REASON alone when it is NULL (for config
 * blocks, whose caller puts file:line:col in front).  err->key is the
 * offending parameter name ("" when the arguments as a whole are wrong).
 * REASON is one of (P a parameter, T "a string", "an integer", "a number",
 * "a boolean", "an array", "an object"; G what was sent, in the same words
 * or "null", "a number with a fraction", "binary data"):
 *   the arguments are empty; send an object (...), {} when there are none
 *   the arguments must be an object (a map of parameter names to values),
 *     got G
 *   the arguments are not valid msgpack (truncated, malformed, or nested
 *     too deeply)
 *   the arguments are followed by N extra bytes; send exactly one object
 *   parameter names must be strings, got G
 *   unknown parameter 'P' (accepted parameters: a, b, c)
 *   unknown parameter 'P' (this takes no parameters)
 *   parameter 'P' is given twice
 *   parameter 'P' must be T, got G
 *   parameter 'P' must be an array of strings; P[3] is G
 *   parameter 'P' must be one of 'a', 'b'; got 'c'
 *   missing required parameter 'P'
 * Checks run in map order, then required parameters in table order; the
 * first failure is reported.  `err` may be NULL.
 *
 * Speed and threads: any thread.  The map is decoded in a per-thread
 * msgpack zone that is reused, so no allocation happens unless a default
 * is filled in (into `out`, which is reset first) or the table has more
 * than 256 parameters.  `out` may be NULL when no parameter has a default. */
int th_validate_params(const char *what, const th_param *params, size_t n,
                       const uint8_t *args, size_t len, th_buf *out,
                       bool *filled, th_verr *err);

/* th_validate_params for a tool (what = the tool's name), then the tool's
 * own validate_args() (Call class: from any thread), whose message is
 * wrapped the same way: "Error parsing arguments for NAME: <its message>".
 * *args_out and *len_out point at the bytes to pass to execute() (the input,
 * or out->data), valid while both stay untouched.  0 or TH_EARGS (or
 * TH_ENOMEM). */
int th_validate_call(const th_tool *tool, const uint8_t *args, size_t len,
                     th_buf *out, const uint8_t **args_out, size_t *len_out,
                     th_error *err);

/* th_validate_call that also hands out the view validation decoded the
 * arguments into (items: TH_ARGS_VIEW_MAX entries), so that the call path
 * need not decode them again for execute(): on 0, view->data is
 * *args_out (the arguments as given, no default filled in) or NULL (no
 * view: more entries than items, or defaults filled in).  items and view
 * may be NULL (then it is th_validate_call). */
int th_validate_call_view(const th_tool *tool, const uint8_t *args,
                          size_t len, th_buf *out, const uint8_t **args_out,
                          size_t *len_out, toolhost_arg *items,
                          toolhost_args_view *view, th_error *err);

/* The decoded view of an argument map (ABI 1.2, toolhost_call.args_view;
 * argview.c): fills items[0..n) with the map's entries in order (every
 * pointer into `data`) and *v.  0, or -1 (nothing to hand out) when
 * `data` is not one msgpack map with string keys, or has more than `cap`
 * entries.  Allocates nothing; any thread. */
#define TH_ARGS_VIEW_MAX 16
int th_args_view_build(const uint8_t *data, size_t len, toolhost_arg *items,
                       size_t cap, toolhost_args_view *v);

/* Checks what a call that succeeded wrote to stdout, when the tool's
 * stdout is TOOLHOST_SEM_STRUCTURED (ABI 1.1): one JSON value (empty output
 * is accepted when the tool has no output_schema), matching the tool's
 * output_schema when it has one.  Call it at the end of the call with the
 * whole stdout (not a truncated copy: a cut JSON text is not JSON).
 * 0, or TH_ETOOL - the tool's fault, not the caller's:
 *   tool NAME wrote structured output that is not JSON: is not valid
 *     JSON (...)
 *   tool NAME wrote structured output that does not match its
 *     output_schema: at /n: must be >= 1, got 0
 * (or TH_ENOMEM).  Any thread. */
int th_validate_output(const th_tool *tool, const void *data, size_t len,
                       th_error *err);

/* Re-encodes a msgpack value in canonical form (map keys sorted bytewise,
 * integers in their shortest form), for comparing arguments.  `out` is
 * reset first.  String keys compare by their bytes (a prefix first) and
 * follow every non-string key; non-string keys compare by their canonical
 * encoding; maps and arrays are canonical all the way down.  0, TH_EINVAL
 * (not one msgpack value; trailing bytes are ignored) or TH_ENOMEM.  Any
 * thread. */
int th_msgpack_canonical(const uint8_t *data, size_t len, th_buf *out);

#endif
