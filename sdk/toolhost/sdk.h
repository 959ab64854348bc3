/* toolhost/sdk.h - helpers for writing toolhost plugins: declaration macros,
 * typed argument getters, output writers, a meta builder, progress and
 * cancellation helpers, and root-confined path resolution.
 *
 * The SDK is a static library (libtoolhost-sdk.a, `pkg-config --libs
 * toolhost-plugin`) built on msgpack-c.  It sits on top of the ABI in
 * <toolhost/plugin.h> and adds nothing to it: a plugin built with the SDK
 * is an ordinary plugin, and everything here can be done by hand.
 *
 * Return codes.  Every SDK function that can fail returns 0 (TH_SDK_OK) or
 * a negative TH_SDK_E* code.  The first four equal the host callbacks'
 * TOOLHOST_E* codes, so a writer passes the host's answer through
 * unchanged.
 *
 * Threading.  The classes are plugin.h's: Load (init/fini), Call
 * (execute, validate_args, needs_permission), Owner (the thread that owns a
 * toolhost_call), Any.  Functions that take a toolhost_call are Owner;
 * functions on caller-owned objects (th_sdk_args, th_sdk_meta) are safe on
 * any thread as long as one object is used by one thread at a time.
 *
 * Ownership.  Stated at each function.  In short: pointers returned by the
 * argument getters point into the argument bytes or into the th_sdk_args,
 * and are valid until th_sdk_args_destroy() or until the bytes go away,
 * whichever comes first; strings returned with a `char **` out parameter
 * are malloc()ed and the caller free()s them.
 */
#ifndef TOOLHOST_SDK_H
#define TOOLHOST_SDK_H

#include <msgpack.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "toolhost/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TH_SDK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TH_SDK_PRINTF(f, a)
#endif

/* ---- Return codes ------------------------------------------------------ */

#define TH_SDK_OK 0
#define TH_SDK_EINVAL TOOLHOST_EINVAL         /* bad argument, bad msgpack  */
#define TH_SDK_ENOMEM TOOLHOST_ENOMEM         /* out of memory              */
#define TH_SDK_ECANCELLED TOOLHOST_ECANCELLED /* the call was cancelled     */
#define TH_SDK_ESTATE TOOLHOST_ESTATE         /* not allowed now            */
#define TH_SDK_EABSENT (-10) /* the key is not in the map                  */
#define TH_SDK_ETYPE (-11)   /* the value has another type                 */
#define TH_SDK_ERANGE (-12)  /* the value does not fit the C type          */
#define TH_SDK_EPATH (-13)   /* a path escapes its root                    */
#define TH_SDK_ENOENT (-14)  /* no such file or folder                     */
#define TH_SDK_EIO (-15)     /* another system error (errno kept)          */

/* A short English name for a TH_SDK_* code ("absent", "wrong type", ...).
 * Static storage.  Any. */
const char *th_sdk_strerror(int code);

/* ---- Declaration macros --------------------------------------------------
 *
 * They fill struct_size and the ABI fields; everything else is given as
 * designated initializers, so a table reads like the ABI it builds:
 *
 *   static const toolhost_param echo_params[] = {
 *       TH_SDK_PARAM("text", STRING, "The text to write.", TH_SDK_REQUIRED),
 *       TH_SDK_PARAM("times", INTEGER, "How often.", TH_SDK_DEFAULT("1")),
 *   };
 *   static const toolhost_tool echo_tools[] = {
 *       TH_SDK_TOOL("echo", echo_execute, "Writes text to stdout.",
 *                   TH_SDK_PARAMS(echo_params), TH_SDK_OUTPUT(TEXT, ERROR),
 *                   .flags = TOOLHOST_TOOL_READ_ONLY),
 *   };
 *   TH_SDK_PLUGIN("echo", "1.0.0", echo_tools, "Echoes text back.");
 *
 * The macros are for C (C99 designated initializers and compound
 * literals); C++ authors fill the structs by hand. */

/* Number of elements of a static array, as the ABI's uint32_t. */
#define TH_SDK_COUNT(arr) ((uint32_t)(sizeof(arr) / sizeof((arr)[0])))

/* A parameter: name, type (STRING, INTEGER, NUMBER, BOOLEAN, ARRAY,
 * OBJECT), description, then optional TH_SDK_REQUIRED, TH_SDK_DEFAULT(),
 * TH_SDK_ENUM(), TH_SDK_ITEMS(). */
#define TH_SDK_PARAM(pname, ptype, ...)                                      \
    {                                                                        \
        .struct_size = sizeof(toolhost_param), .name = (pname),              \
        .type = TOOLHOST_TYPE_##ptype, .description = __VA_ARGS__            \
    }
#define TH_SDK_REQUIRED .required = 1
/* The default as JSON text: TH_SDK_DEFAULT("3"), TH_SDK_DEFAULT("\"a\""). */
#define TH_SDK_DEFAULT(json) .default_json = (json)
/* The allowed values of a string: TH_SDK_ENUM("fast", "slow"). */
#define TH_SDK_ENUM(...)                                                     \
    .enum_values = (const char *const[]) { __VA_ARGS__, NULL }
/* The element type of an array: TH_SDK_ITEMS(STRING). */
#define TH_SDK_ITEMS(itype) .item_type = TOOLHOST_TYPE_##itype

/* ABI 1.1 constraints, checked by the host before execute() and shown in
 * the JSON Schema a model sees.  Use one bounds macro per parameter. */
/* minimum <= value <= maximum (integers, numbers): TH_SDK_RANGE(1, 1000) */
#define TH_SDK_RANGE(lo, hi)                                                 \
    .minimum = (lo), .maximum = (hi),                                        \
    .bounds = TOOLHOST_BOUND_MINIMUM | TOOLHOST_BOUND_MAXIMUM
#define TH_SDK_MIN(lo) .minimum = (lo), .bounds = TOOLHOST_BOUND_MINIMUM
#define TH_SDK_MAX(hi) .maximum = (hi), .bounds = TOOLHOST_BOUND_MAXIMUM
/* value > lo (exclusive), e.g. a ratio that must be positive. */
#define TH_SDK_ABOVE(lo)                                                     \
    .minimum = (lo), .bounds = TOOLHOST_BOUND_EXCLUSIVE_MINIMUM
/* String length in code points (max 0 = no maximum). */
#define TH_SDK_LENGTH(lo, hi) .min_length = (lo), .max_length = (hi)
/* A PCRE2 pattern the string must match (not anchored: add ^...$). */
#define TH_SDK_PATTERN(re) .pattern = (re)
/* Item count of an array (max 0 = no maximum). */
#define TH_SDK_ITEM_COUNT(lo, hi) .min_items = (lo), .max_items = (hi)
/* A JSON Schema for an object or array parameter (the host's subset:
 * type, enum, const, bounds, lengths, pattern, items, properties,
 * required, additionalProperties). */
#define TH_SDK_SCHEMA(json) .schema_json = (json)

/* A tool: name, execute function, one-line description, then designated
 * initializers.  TH_SDK_OUTPUT() is required (the host refuses a tool
 * without semantic types); add TH_SDK_PARAMS() when it has parameters,
 * `.flags`, `.long_description`, `.validate_args`, `.needs_permission`,
 * `.user_data` as needed. */
#define TH_SDK_TOOL(tname, texec, ...)                                       \
    {                                                                        \
        .struct_size = sizeof(toolhost_tool), .name = (tname),               \
        .execute = (texec), .description = __VA_ARGS__                       \
    }
#define TH_SDK_PARAMS(arr) .params = (arr), .n_params = TH_SDK_COUNT(arr)
/* ABI 1.1: a short human title, and the JSON Schema of a structured
 * stdout (the host checks the output against it when the call ends; the
 * tool needs TH_SDK_OUTPUT(STRUCTURED, ...)). */
#define TH_SDK_TITLE(t) .title = (t)
#define TH_SDK_OUTPUT_SCHEMA(json) .output_schema = (json)
/* ABI 1.5: tags an operator's toolsets select the tool by (and disable
 * it by): TH_SDK_TAGS("files", "read-only").  Each is
 * ^[a-z0-9][a-z0-9_-]{0,31}$, at most TOOLHOST_MAX_TAGS; a host older
 * than 1.5 does not see them. */
#define TH_SDK_TAGS(...)                                                     \
    .tags = (const char *const[]) { __VA_ARGS__, NULL }
/* Semantic types of stdout and stderr: TH_SDK_OUTPUT(FILE_CONTENT, ERROR).
 * Names are the TOOLHOST_SEM_* suffixes. */
#define TH_SDK_OUTPUT(out, err)                                              \
    .stdout_type = TOOLHOST_SEM_##out, .stderr_type = TOOLHOST_SEM_##err

/* The plugin descriptor and the exported entry point toolhost_plugin_v1().
 * Use once per plugin, at file scope: name, version, the tools array, the
 * description, then optional `.init`, `.fini`, TH_SDK_CONFIG(). */
#define TH_SDK_PLUGIN(pname, pversion, ptools, ...)                          \
    TOOLHOST_EXPORT const toolhost_plugin *toolhost_plugin_v1(void);         \
    TOOLHOST_EXPORT const toolhost_plugin *toolhost_plugin_v1(void)          \
    {                                                                        \
        static const toolhost_plugin descriptor = {                          \
            .struct_size = sizeof(toolhost_plugin),                          \
            .abi_major = TOOLHOST_ABI_MAJOR,                                 \
            .abi_minor = TOOLHOST_ABI_MINOR,                                 \
            .name = (pname),                                                 \
            .version = (pversion),                                           \
            .tools = (ptools),                                               \
            .n_tools = TH_SDK_COUNT(ptools),                                 \
            .description = __VA_ARGS__};                                     \
        return &descriptor;                                                  \
    }
/* ABI 1.4: the plugin's resources and prompts (toolhost_resource and
 * toolhost_prompt arrays), as more arguments of TH_SDK_PLUGIN after the
 * description: TH_SDK_PLUGIN("p", "1.0", tools, "What it does.",
 * TH_SDK_RESOURCES(resources), TH_SDK_PROMPTS(prompts)). */
#define TH_SDK_RESOURCES(arr)                                                \
    .resources = (arr), .n_resources = TH_SDK_COUNT(arr)
#define TH_SDK_PROMPTS(arr) .prompts = (arr), .n_prompts = TH_SDK_COUNT(arr)
/* The keys of the plugin's config block (a toolhost_param array). */
#define TH_SDK_CONFIG(arr)                                                   \
    .config_params = (arr), .n_config_params = TH_SDK_COUNT(arr)
/* ABI 1.1: tools built from the config in init(), handed to the host by
 * `fn` (const toolhost_tool *fn(void *state, uint32_t *n_tools)), called
 * once right after init().  The array stays valid and unchanged until
 * fini(): keep it in the state.  TH_SDK_INIT_TOOLS(my_init_tools). */
#define TH_SDK_INIT_TOOLS(fn) .init_tools = (fn)

/* ---- Arguments ------------------------------------------------------------
 *
 * A parsed view of a msgpack map: the arguments execute() gets, or the
 * config block init() gets.  Init it on caller storage, read keys, destroy
 * it.  The map bytes are not copied: they MUST outlive the th_sdk_args
 * (execute()'s `args` do, until execute() returns).
 *
 * Every getter returns 0 and stores the value, or leaves the output
 * untouched and returns TH_SDK_EABSENT (no such key), TH_SDK_ETYPE (the
 * value has another msgpack type; nil is a type too), TH_SDK_ERANGE (the
 * value does not fit), or TH_SDK_EINVAL (a NULL argument).  After the
 * host's validation a required parameter is present and of its declared
 * type, and a parameter with a default is present.
 *
 * Threads: Any, one th_sdk_args used by one thread at a time (typically
 * on the stack of execute(), validate_args() or init()). */
typedef struct th_sdk_args {
    msgpack_unpacked unp;     /* private */
    const msgpack_object *map; /* private: the map, or NULL when empty */
    const toolhost_args_view *view; /* private: the host's decoded view,
                                       or NULL (then `map` is used) */
    const uint8_t *data;      /* private: the bytes (for a late decode) */
    size_t len;
} th_sdk_args;

/* Parses `data`/`len` (a msgpack map; NULL/0 reads as an empty map).
 * Returns 0, TH_SDK_EINVAL (not one msgpack map) or TH_SDK_ENOMEM.  Call
 * th_sdk_args_destroy() in every case. */
int th_sdk_args_init(th_sdk_args *a, const uint8_t *data, size_t len);
/* Like th_sdk_args_init() for execute()'s arguments, given its call: on a
 * host that hands the arguments decoded (ABI 1.2, call->args_view, when
 * it describes exactly `data`/`len`) nothing is parsed and the getters
 * read the host's view (the scalar getters decode nothing; the object,
 * cstr, strings and ints getters parse the map on first use); otherwise
 * (an older host, another buffer, call NULL) it is th_sdk_args_init().
 * Same results and errors either way.  Use it in execute() only (the view
 * is valid until execute() returns, like `args`); validate_args() and
 * init() have no call: use th_sdk_args_init() there.  With the view even
 * the scalar getters read the host's memory: do not read this th_sdk_args
 * after execute() returns (copy what a suspended call needs first). */
int th_sdk_args_init_call(th_sdk_args *a, const toolhost_call *call,
                          const uint8_t *data, size_t len);
/* Frees what the th_sdk_args holds, including th_sdk_arg_cstr() copies.
 * Safe to call twice. */
void th_sdk_args_destroy(th_sdk_args *a);

/* Nonzero when `key` is in the map (whatever its value). */
bool th_sdk_arg_has(const th_sdk_args *a, const char *key);

/* The raw value of `key` (valid while `a` lives).  For objects, arrays of
 * mixed types, or anything the typed getters do not cover. */
int th_sdk_arg_object(const th_sdk_args *a, const char *key,
                      const msgpack_object **out);

/* A string as bytes: *s points into the argument bytes and is NOT
 * NUL-terminated; *len is its length (len may be NULL).  A string is a
 * msgpack str, or a bin that is valid UTF-8 (the host's validator applies
 * the same rule and refuses other bin for string parameters, with a
 * message, before the tool runs); anything else is TH_SDK_ETYPE.  The
 * string getters below follow the same rule.  A tool that fails on such an
 * error should say why (th_sdk_fail), not fail with an empty stderr. */
int th_sdk_arg_string(const th_sdk_args *a, const char *key, const char **s,
                      size_t *len);
/* A string as a NUL-terminated copy owned by `a` (freed by
 * th_sdk_args_destroy()).  TH_SDK_EINVAL when the string holds a NUL byte
 * (a C string would silently cut it), TH_SDK_ENOMEM. */
int th_sdk_arg_cstr(th_sdk_args *a, const char *key, const char **s);
/* An integer (msgpack positive or negative int).  TH_SDK_ERANGE above
 * INT64_MAX. */
int th_sdk_arg_int(const th_sdk_args *a, const char *key, int64_t *v);
/* A number: a float or an integer. */
int th_sdk_arg_number(const th_sdk_args *a, const char *key, double *v);
int th_sdk_arg_bool(const th_sdk_args *a, const char *key, bool *v);
/* An array of strings as NUL-terminated copies: *out is an array of *n
 * pointers, owned by `a`.  TH_SDK_ETYPE when the value or any element is
 * not a string, TH_SDK_EINVAL when an element holds a NUL byte. */
int th_sdk_arg_strings(th_sdk_args *a, const char *key,
                       const char *const **out, size_t *n);
/* An array of integers: *out is an array of *n values owned by `a`. */
int th_sdk_arg_ints(th_sdk_args *a, const char *key, const int64_t **out,
                    size_t *n);

/* Shorthands for optional parameters: the value, or `def` when the key is
 * absent or unusable. */
int64_t th_sdk_arg_int_or(const th_sdk_args *a, const char *key, int64_t def);
double th_sdk_arg_number_or(const th_sdk_args *a, const char *key,
                            double def);
bool th_sdk_arg_bool_or(const th_sdk_args *a, const char *key, bool def);
const char *th_sdk_arg_cstr_or(th_sdk_args *a, const char *key,
                               const char *def);

/* ---- Output ----------------------------------------------------------------
 *
 * Owner.  All go through call->host->write(); the host copies the bytes.
 * They return 0, TH_SDK_EINVAL, TH_SDK_ENOMEM (formatting), or
 * TH_SDK_ECANCELLED once the call is cancelled (the bytes are dropped:
 * stop soon). */

/* Writes `len` bytes to stream TOOLHOST_STDOUT or TOOLHOST_STDERR. */
int th_sdk_write(toolhost_call *call, int stream, const void *data,
                 size_t len);
/* Writes a NUL-terminated string to stdout. */
int th_sdk_puts(toolhost_call *call, const char *s);
/* printf to stdout / to stderr / to `stream`. */
int th_sdk_printf(toolhost_call *call, const char *fmt, ...)
    TH_SDK_PRINTF(2, 3);
int th_sdk_eprintf(toolhost_call *call, const char *fmt, ...)
    TH_SDK_PRINTF(2, 3);
int th_sdk_vprintf(toolhost_call *call, int stream, const char *fmt,
                   va_list ap) TH_SDK_PRINTF(3, 0);
/* Writes the message and a newline to stderr and returns TOOLHOST_FAILED,
 * so a tool can `return th_sdk_fail(call, "no such file: %s", path);`. */
int th_sdk_fail(toolhost_call *call, const char *fmt, ...)
    TH_SDK_PRINTF(2, 3);
/* ABI 1.5: fails the call as its backend's fault (what the tool depends
 * on is down, too slow, or limiting it).  Writes the message and a
 * newline to stderr (the tool error's message), sets the retry-after
 * hint when `retry_after_ms` is nonzero (th_sdk_set_retry_after), and
 * returns `status` (TOOLHOST_UNAVAILABLE, TOOLHOST_TIMEOUT or
 * TOOLHOST_RATE_LIMITED) for execute() to return or complete() to pass:
 *   return th_sdk_fail_backend(call, TOOLHOST_UNAVAILABLE, 2000,
 *                              "server %s is restarting", name);
 * On a host older than 1.5 (or with any other `status`) it returns
 * TOOLHOST_FAILED, which every host knows: the message says it all. */
int th_sdk_fail_backend(toolhost_call *call, int status,
                        uint64_t retry_after_ms, const char *fmt, ...)
    TH_SDK_PRINTF(4, 5);
/* ABI 1.5, Owner: call->host->set_retry_after() (see plugin.h); returns
 * its code, or TH_SDK_ESTATE on a host without it. */
int th_sdk_set_retry_after(toolhost_call *call, uint64_t ms);
/* Writes the message into err (at most err_size bytes, NUL-terminated;
 * nothing when err is NULL or err_size 0) and returns -1: the error
 * buffer init(), validate_args() and needs_permission() get, so a plugin
 * can `return th_sdk_errf(err, err_size, "'%s' is not a folder", dir);`. */
int th_sdk_errf(char *err, size_t err_size, const char *fmt, ...)
    TH_SDK_PRINTF(3, 4);

/* ---- Meta -------------------------------------------------------------------
 *
 * Builds the msgpack map a tool sets as its meta.  Init on caller storage,
 * add keys, set it on the call (or take the bytes), destroy.  Errors are
 * sticky: after a failed add the others are no-ops and th_sdk_meta_set()
 * returns the first error.  Keys should be unique (not checked); keys
 * under "toolhost" are the host's.  One th_sdk_meta per thread at a time. */
typedef struct th_sdk_meta {
    msgpack_sbuffer body; /* private: the packed entries */
    msgpack_sbuffer out;  /* private: header + body, built on finish */
    msgpack_packer pk;    /* private */
    uint32_t count;       /* entries added so far */
    int err;              /* first error, 0 */
} th_sdk_meta;

void th_sdk_meta_init(th_sdk_meta *m);
void th_sdk_meta_destroy(th_sdk_meta *m);
int th_sdk_meta_str(th_sdk_meta *m, const char *key, const char *value);
int th_sdk_meta_strn(th_sdk_meta *m, const char *key, const char *value,
                     size_t len);
int th_sdk_meta_int(th_sdk_meta *m, const char *key, int64_t value);
int th_sdk_meta_bool(th_sdk_meta *m, const char *key, bool value);
int th_sdk_meta_double(th_sdk_meta *m, const char *key, double value);
/* Packs `key` and returns the packer, on which the caller MUST pack
 * exactly one value (an array, a nested map, ...).  NULL after an error.
 * The packer belongs to `m`. */
msgpack_packer *th_sdk_meta_value(th_sdk_meta *m, const char *key);
/* The finished map: *data is owned by `m`, valid until the next add or
 * th_sdk_meta_destroy().  Returns 0 or the sticky error. */
int th_sdk_meta_finish(th_sdk_meta *m, const uint8_t **data, size_t *len);
/* Owner.  Finishes the map and hands it to call->host->set_meta() (which
 * copies it).  Returns 0, the sticky error, or the host's code. */
int th_sdk_meta_set(th_sdk_meta *m, toolhost_call *call);

/* ---- The host's ABI 1.1 callbacks ------------------------------------------
 *
 * An older host's api ends before these members: check before calling.
 * TH_SDK_HOST_HAS(host, caller) is true when the host provides caller().
 * The wrappers below check for you and answer TH_SDK_ESTATE (or fall back,
 * for logging) on a 1.0 host. */
#define TH_SDK_HOST_HAS(api, member)                                         \
    ((api) != NULL &&                                                        \
     TOOLHOST_HAS_MEMBER(toolhost_host_api, (api), member) &&                \
     (api)->member != NULL)

/* Owner.  Who calls: fills *out (struct_size set for you); TH_SDK_ESTATE
 * on a host without caller(). */
int th_sdk_caller(const toolhost_call *call, toolhost_caller *out);
/* Any, until the call ends.  A formatted log line tagged with the call id
 * (on a 1.0 host: log() with "call N: " in front). */
void th_sdk_log_call(const toolhost_call *call, int level, const char *fmt,
                     ...) TH_SDK_PRINTF(3, 4);
/* Any, until the call ends.  See toolhost_host_api.on_cancel/cancel_fd
 * (fn NULL: unregister and wait for a running fn). */
int th_sdk_on_cancel(toolhost_call *call, void (*fn)(void *ud), void *ud);
int th_sdk_cancel_fd(toolhost_call *call);

/* ---- The host's ABI 1.3 cages ----------------------------------------------
 *
 * A cgroup the host makes for a process tree the plugin starts itself, so
 * that the whole tree dies at once at the end (see toolhost_host_api's
 * cage_* members for the contract).  The wrappers check the host's minor:
 * on an older host th_sdk_cage_open() answers NULL with why = "the host
 * gives no cages (ABI 1.N)", and the others do nothing (NULL cage).
 *
 *   char why[256];
 *   toolhost_cage *cage = th_sdk_cage_open(host, "run", 0, why, sizeof why);
 *   pid_t pid = fork();
 *   if (pid == 0) {
 *       th_sdk_cage_enter(host, cage);   // first; async-signal-safe
 *       execve(...);
 *   }
 *   th_sdk_cage_placed(host, cage);
 *   ... waitpid(pid, ...) ...
 *   th_sdk_cage_kill(host, cage, 5000);  // all it started, then rmdir
 *   th_sdk_cage_close(host, cage);
 */

/* Any.  toolhost_host_api.cage_open, or NULL with `why` set. */
toolhost_cage *th_sdk_cage_open(const toolhost_host_api *host,
                                const char *label, uint64_t memory_max,
                                char *why, size_t why_size);
/* Async-signal-safe (in the forked child, first).  0, TH_SDK_EINVAL (no
 * cage) or TH_SDK_ESTATE (errno says why). */
int th_sdk_cage_enter(const toolhost_host_api *host,
                      const toolhost_cage *cage);
/* Any.  The children are forked; NULL cage: nothing. */
void th_sdk_cage_placed(const toolhost_host_api *host, toolhost_cage *cage);
/* Any (waits).  Kills the whole cage, waits at most timeout_ms for it to
 * be empty, removes it: 0, TH_SDK_EINVAL (no cage) or TH_SDK_ESTATE. */
int th_sdk_cage_kill(const toolhost_host_api *host, toolhost_cage *cage,
                     int64_t timeout_ms);
/* Any.  Frees it (killing and removing it first if need be); NULL: no-op. */
void th_sdk_cage_close(const toolhost_host_api *host, toolhost_cage *cage);

/* ---- Resources, prompts, completion (ABI 1.4) ---------------------------------
 *
 * What a resource's read(), a prompt's get() and a complete() return,
 * added to the `out` they are given (toolhost_host_api.content_add; see
 * toolhost_resource and toolhost_prompt in toolhost/plugin.h):
 *
 *   static int read_guide(void *state, const toolhost_resource *res,
 *                         const char *uri, toolhost_content *out,
 *                         char *err, size_t err_size)
 *   {
 *       return th_sdk_content_text(out, "The guide's text.");
 *   }
 *   static int get_review(void *state, const toolhost_prompt *p,
 *                         const uint8_t *args, size_t len,
 *                         toolhost_content *out, char *err, size_t n)
 *   {
 *       th_sdk_args a;  ... th_sdk_arg_cstr(&a, "code", &code) ...
 *       return th_sdk_prompt_text(out, "user", "Review this code: ...");
 *   }
 *
 * Each returns TOOLHOST_OK (0) or a negative TOOLHOST_E* code (the host
 * refused the block, named in its log; TOOLHOST_ENOMEM past the host's
 * budget); TOOLHOST_EINVAL on a host older than 1.4. */

/* A TEXT block: a resource's text (of its declared type), a completion
 * value (th_sdk_complete_value says it better), a prompt message from
 * the user. */
int th_sdk_content_text(toolhost_content *out, const char *text);
/* A resource's bytes of type `mime` (NULL: its declared type): a blob,
 * or text when the type is textual (text/..., ...json, ...xml) and the
 * bytes are UTF-8. */
int th_sdk_content_bytes(toolhost_content *out, const char *mime,
                         const void *data, size_t len);
/* Prompt messages from `role` ("user" or "assistant"): text, an image or
 * an audio clip (mime required), an embedded resource (uri required;
 * text when its mime type is textual), a link to a resource. */
int th_sdk_prompt_text(toolhost_content *out, const char *role,
                       const char *text);
int th_sdk_prompt_image(toolhost_content *out, const char *role,
                        const char *mime, const void *data, size_t len);
int th_sdk_prompt_audio(toolhost_content *out, const char *role,
                        const char *mime, const void *data, size_t len);
int th_sdk_prompt_resource(toolhost_content *out, const char *role,
                           const char *uri, const char *mime,
                           const void *data, size_t len);
int th_sdk_prompt_link(toolhost_content *out, const char *role,
                       const char *uri, const char *name, const char *mime);
/* One completion value. */
int th_sdk_complete_value(toolhost_content *out, const char *value);
/* Any: tells subscribed clients that the resource at `uri` changed
 * (nothing on a host older than 1.4). */
void th_sdk_resource_updated(const toolhost_host_api *host, const char *uri);

/* ---- A tool result of several blocks; asking the client (ABI 1.4) -----------
 *
 * Owner.  Each appends one block to the call's result, after its stdout
 * (toolhost_host_api.write_block): an MCP client sees stdout's text (when
 * the tool wrote any) and then these, in order:
 *
 *   th_sdk_puts(call, "The chart:");
 *   th_sdk_write_image(call, "image/png", png, png_len);
 *   th_sdk_write_resource(call, "file:///data.csv", "text/csv", csv, n);
 *
 * Returns 0, TOOLHOST_EINVAL (a bad block, named in the host log),
 * TOOLHOST_ENOMEM (past what the call's stdout may hold),
 * TOOLHOST_ECANCELLED, or TOOLHOST_ENOTSUP where the host carries no
 * blocks (older than 1.4, an isolated worker). */
int th_sdk_write_text_block(toolhost_call *call, const char *text);
int th_sdk_write_image(toolhost_call *call, const char *mime,
                       const void *data, size_t len);
int th_sdk_write_audio(toolhost_call *call, const char *mime,
                       const void *data, size_t len);
int th_sdk_write_resource(toolhost_call *call, const char *uri,
                          const char *mime, const void *data, size_t len);
int th_sdk_write_link(toolhost_call *call, const char *uri, const char *name,
                      const char *mime);

/* Owner; waits.  Asks the caller's client (toolhost_host_api.ask_client):
 * TOOLHOST_ASK_SAMPLING with MCP sampling/createMessage params, or
 * TOOLHOST_ASK_FORM with {message, requestedSchema}, as JSON text.  On 0
 * *answer is the client's answer as JSON text (the host's, valid until
 * the call ends).  TOOLHOST_ENOTSUP when the front or client cannot
 * carry it (and on a host older than 1.4): say so in the result.
 *
 *   const char *ans;
 *   size_t n;
 *   int rc = th_sdk_ask_client(call, TOOLHOST_ASK_FORM,
 *       "{\"message\": \"Your name?\", \"requestedSchema\": {"
 *       "\"type\": \"object\", \"properties\": {\"name\": "
 *       "{\"type\": \"string\"}}}}", &ans, &n);
 */
int th_sdk_ask_client(toolhost_call *call, int kind, const char *request,
                      const char **answer, size_t *answer_len);

/* ---- A JSON writer for structured output -------------------------------------
 *
 * Builds one JSON value in memory, with escaping done right: quotes,
 * backslashes and control characters escaped, invalid UTF-8 replaced by
 * U+FFFD, non-finite numbers refused.  Separators are placed for you; a
 * misuse (a key outside an object, a value without its key, unbalanced
 * ends) is an error.  The first error sticks: later calls do nothing and
 * th_sdk_json_finish() returns it, so a writer can be used without
 * checking each call.
 *
 *   th_sdk_json j;
 *   th_sdk_json_init(&j);
 *   th_sdk_json_object(&j);
 *   th_sdk_json_key(&j, "count");  th_sdk_json_int(&j, 3);
 *   th_sdk_json_key(&j, "names");  th_sdk_json_array(&j);
 *   th_sdk_json_str(&j, "a\"b");    th_sdk_json_end(&j);
 *   th_sdk_json_end(&j);
 *   int rc = th_sdk_json_write(&j, call); // to stdout
 *   th_sdk_json_destroy(&j);
 */
#define TH_SDK_JSON_MAX_DEPTH 64
typedef struct th_sdk_json {
    char *buf;
    size_t len, cap;
    int err;                                   /* the first error, or 0  */
    int depth;
    unsigned char in_object[TH_SDK_JSON_MAX_DEPTH]; /* per level: 1 object */
    unsigned char count[TH_SDK_JSON_MAX_DEPTH];     /* values so far (0/1+) */
    int have_key;                              /* a key awaits its value */
    int done;                                  /* the top value is whole */
} th_sdk_json;
void th_sdk_json_init(th_sdk_json *j);
void th_sdk_json_destroy(th_sdk_json *j);
int th_sdk_json_object(th_sdk_json *j); /* { */
int th_sdk_json_array(th_sdk_json *j);  /* [ */
int th_sdk_json_end(th_sdk_json *j);    /* } or ], whichever is open */
int th_sdk_json_key(th_sdk_json *j, const char *key);
int th_sdk_json_str(th_sdk_json *j, const char *s); /* NULL writes null */
int th_sdk_json_strn(th_sdk_json *j, const char *s, size_t n);
int th_sdk_json_int(th_sdk_json *j, int64_t v);
int th_sdk_json_uint(th_sdk_json *j, uint64_t v);
int th_sdk_json_double(th_sdk_json *j, double v); /* EINVAL if not finite */
int th_sdk_json_bool(th_sdk_json *j, bool v);
int th_sdk_json_null(th_sdk_json *j);
/* The finished text (NUL-terminated, owned by j) or the first error
 * (TH_SDK_EINVAL for a misuse or an unfinished value, TH_SDK_ENOMEM). */
int th_sdk_json_finish(th_sdk_json *j, const char **text, size_t *len);
/* Owner.  th_sdk_json_finish(), then the text to the call's stdout. */
int th_sdk_json_write(th_sdk_json *j, toolhost_call *call);

/* ---- Progress, cancellation, logging --------------------------------------- */

/* Owner.  Reports progress with a formatted message (fmt may be NULL).
 * `fraction` in [0, 1] or negative when unknown.  For an async tool the
 * first update acknowledges the call.  Returns 0 or a negative code. */
int th_sdk_progress(toolhost_call *call, double fraction, const char *fmt,
                    ...) TH_SDK_PRINTF(3, 4);
/* Owner.  Nonzero once the call is cancelled or past its deadline. */
bool th_sdk_cancelled(const toolhost_call *call);
/* Owner.  Sleeps `ms` milliseconds in short slices, returning early with
 * TH_SDK_ECANCELLED as soon as the call is cancelled; 0 otherwise. */
int th_sdk_sleep_ms(const toolhost_call *call, int64_t ms);
/* Any.  A formatted line in the host's log (dropped when host or its log
 * callback is NULL). */
void th_sdk_log(const toolhost_host_api *host, int level, const char *fmt,
                ...) TH_SDK_PRINTF(3, 4);

/* ---- Paths confined to a root ------------------------------------------------
 *
 * For plugins that give a model access to one folder.  The root is
 * resolved once (in init()); every path a caller gives is then resolved
 * against it and refused when it leaves it: by "..", by an absolute path
 * elsewhere, or through a symlink that points outside.  Symlinks that stay
 * inside the root are followed.  th_sdk_path_resolve() checks a path
 * string (realpath(3)): a root that an adversary can modify concurrently can
 * race it between the check and the open.  Plugins that open files use
 * th_sdk_rooted_open() below instead, which resolves beneath an fd of the
 * root in the kernel and hands back the opened fd.
 *
 * Messages are one line, NUL-terminated, at most err_size bytes, and name
 * the path as the caller gave it.  Call class: Any (no shared state). */

/* Resolves `root` (must be an existing folder) to an absolute path without
 * symlinks: *out is malloc()ed, the caller frees it.  Returns 0,
 * TH_SDK_ENOENT, TH_SDK_EINVAL (not a folder), TH_SDK_EIO, TH_SDK_ENOMEM. */
int th_sdk_root_resolve(const char *root, char **out, char *err,
                        size_t err_size);

/* Load.  For init(): reads the string `key` of a config map and resolves
 * it with th_sdk_root_resolve().  *out is malloc()ed (free it in fini()).
 * Returns 0 or a negative code with a message naming the key. */
int th_sdk_root_from_config(const uint8_t *config, size_t len,
                            const char *key, char **out, char *err,
                            size_t err_size);

/* th_sdk_path_resolve() flags. */
#define TH_SDK_PATH_MAY_NOT_EXIST 1u /* the last component may be missing
                                        (for a file the tool will create):
                                        its folder must exist in the root */

/* Resolves `path` (relative to `root`, or absolute inside it; "" and "."
 * are the root itself) against `root`, a th_sdk_root_resolve() result.
 * *out is the malloc()ed absolute resolved path (the caller frees it).
 * Returns 0, TH_SDK_EPATH (outside the root), TH_SDK_ENOENT, TH_SDK_EIO,
 * TH_SDK_EINVAL (NULL argument), TH_SDK_ENOMEM. */
int th_sdk_path_resolve(const char *root, const char *path, unsigned flags,
                        char **out, char *err, size_t err_size);

/* The part of `resolved` (a th_sdk_path_resolve() result) below `root`:
 * "" for the root itself, else a pointer into `resolved` after the
 * root and its slash. */
const char *th_sdk_path_relative(const char *root, const char *resolved);

/* ---- A plugin confined to one folder ----------------------------------------
 *
 * The common case above as ready-made pieces: a plugin whose config has a
 * string key "root" uses th_sdk_rooted_init / th_sdk_rooted_fini as its
 * init and fini, and its tools resolve their path arguments with
 * th_sdk_rooted_arg_path(state, ...). */

typedef struct th_sdk_rooted {
    char *root;           /* the resolved root (th_sdk_root_resolve); owned */
    int root_fd;          /* O_PATH|O_DIRECTORY fd of the root, opened in
                             init(); every open resolves beneath it */
    bool follow_symlinks; /* config "follow_symlinks" (default true):
                             follow symlinks that stay inside the root;
                             false refuses any symlink on the way */
    bool no_openat2;      /* use the openat() walk, never openat2(2) (set
                             when TOOLHOST_SDK_NO_OPENAT2=1 is in the
                             environment at init; for tests) */
    int64_t max_line_bytes; /* config "max_line_bytes" (default 65536):
                               longer lines are cut (th_sdk_lines) */
    int64_t max_read_bytes; /* config "max_read_bytes" (default 1 MiB): most
                               bytes one call reads out (tools may use it) */
    const toolhost_host_api *host; /* for log lines; not owned */
} th_sdk_rooted;

/* The plugin's config table: "root" (a required string), "follow_symlinks"
 * (boolean, default true), "max_line_bytes" and "max_read_bytes"
 * (integers).  Use as TH_SDK_CONFIG(th_sdk_rooted_config). */
extern const toolhost_param th_sdk_rooted_config[4];

/* Load.  An init() for toolhost_plugin: resolves the config key "root"
 * into a new th_sdk_rooted stored in *state, opens its root_fd and reads
 * the other keys. */
int th_sdk_rooted_init(const toolhost_host_api *host, const uint8_t *config,
                       size_t len, void **state, char *err, size_t err_size);
/* Load.  The matching fini(). */
void th_sdk_rooted_fini(void *state);

/* Call.  Resolves the string argument `key` (or `dflt` when absent; NULL:
 * required) inside the root.  On failure writes the reason to the call's
 * stderr and returns nonzero (return TOOLHOST_FAILED then); on success
 * *out is malloc()ed (free it).  The result is a string checked at one
 * moment: prefer th_sdk_rooted_arg_open(). */
int th_sdk_rooted_arg_path(const th_sdk_rooted *st, th_sdk_args *a,
                           toolhost_call *call, const char *key,
                           const char *dflt, char **out);

/* Any.  The root-relative name of a resolved path, "." for the root. */
const char *th_sdk_rooted_rel(const th_sdk_rooted *st, const char *resolved);

/* th_sdk_rooted_open() kinds: what may be opened.  FILE and DIR combine;
 * anything else (FIFO, device, socket) is refused without blocking: the
 * open is O_NONBLOCK|O_NOCTTY, O_NONBLOCK is cleared again for a regular
 * file.  STAT opens anything with O_PATH, for fstat() only. */
#define TH_SDK_OPEN_FILE 1u /* a regular file, O_RDONLY              */
#define TH_SDK_OPEN_DIR 2u  /* a folder, O_RDONLY (for fdopendir())  */
#define TH_SDK_OPEN_STAT 4u /* anything, O_PATH                      */

/* Any.  Opens `path` (relative to the root, or absolute inside it; "" and
 * "." are the root) beneath st->root_fd: with openat2(2) and
 * RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS (| RESOLVE_NO_SYMLINKS when
 * follow_symlinks is off), or where the kernel lacks openat2 with an
 * openat() walk, one component at a time with O_NOFOLLOW, that reads each
 * symlink itself.  Use the fd from then on (fstat, fdopendir, read); never
 * reopen the name.  On success *fd is the fd (O_CLOEXEC; the caller
 * closes it), *sb its fstat() (sb may be NULL) and *rel the malloc()ed
 * root-relative name ("." for the root; rel may be NULL).  Returns 0,
 * TH_SDK_EPATH (outside the root: "path '..' is outside the allowed root
 * folder"; or a symlink when they are not followed), TH_SDK_ENOENT,
 * TH_SDK_ETYPE (not of an allowed kind), TH_SDK_EIO, TH_SDK_EINVAL,
 * TH_SDK_ENOMEM, with a one-line message in err. */
int th_sdk_rooted_open(const th_sdk_rooted *st, const char *path,
                       unsigned kinds, int *fd, struct stat *sb, char **rel,
                       char *err, size_t err_size);

/* Call.  th_sdk_rooted_open() of the string argument `key` (or `dflt` when
 * absent; NULL: required).  On failure writes the reason to the call's
 * stderr and returns nonzero (return TOOLHOST_FAILED then). */
int th_sdk_rooted_arg_open(const th_sdk_rooted *st, th_sdk_args *a,
                           toolhost_call *call, const char *key,
                           const char *dflt, unsigned kinds, int *fd,
                           struct stat *sb, char **rel);

/* ---- Reading lines with bounded memory --------------------------------------
 *
 * Reads an fd in fixed chunks and hands out lines of at most `max_line`
 * bytes: a longer line is cut there (*cut set) and the rest of it is read
 * and dropped, so memory stays one buffer whatever the file holds.  Each
 * chunk read checks the call's cancellation.  One reader per thread. */
typedef struct th_sdk_lines {
    int fd;           /* not owned */
    char *buf;        /* private */
    size_t max, len, pos; /* private */
    bool eof;         /* private */
    int64_t bytes;    /* bytes read so far */
} th_sdk_lines;

/* Returns 0 or TH_SDK_ENOMEM (max_line 0: 65536).  Destroy in every case. */
int th_sdk_lines_init(th_sdk_lines *r, int fd, size_t max_line);
void th_sdk_lines_destroy(th_sdk_lines *r);
/* Owner (call may be NULL: no cancellation).  The next line: *line (not
 * NUL-terminated, valid until the next call) and *len, including its
 * '\n' when it had one; *cut when the line was longer than max_line (then
 * *line holds its first max_line bytes and no '\n').  Returns 1 (a line),
 * 0 (end of file), TH_SDK_ECANCELLED, or TH_SDK_EIO (errno kept). */
int th_sdk_lines_next(th_sdk_lines *r, const toolhost_call *call,
                      const char **line, size_t *len, bool *cut);

#ifdef __cplusplus
}
#endif

#endif /* TOOLHOST_SDK_H */
