/* toolhost/plugin.h - the toolhost plugin ABI, version 1.5.
 *
 * This header is the whole contract between the toolhost host process and a
 * tool plugin (a shared object).  If a type, constant or function does not
 * appear in this file, it is not part of the published ABI.
 *
 * Versions.  TOOLHOST_ABI_MAJOR changes only when an existing struct member
 * changes meaning or position; a host refuses a plugin whose major differs
 * from its own.  TOOLHOST_ABI_MINOR grows when members are appended; a host
 * and a plugin of different minors work together, each reading only the
 * members the other's struct_size says are present.
 *
 * Rules that hold for every struct in this file:
 *   - it starts with `uint32_t struct_size`, which the producer MUST set to
 *     sizeof() of the struct it was compiled with;
 *   - members are only ever appended; a reader MUST NOT read a member that
 *     lies beyond struct_size;
 *   - a NULL function pointer or string means "not provided";
 *   - an array of structs (params, tools) is walked with the struct_size of
 *     its first element as the stride; every element MUST have the same
 *     struct_size;
 *   - the members a minor adds start at or after sizeof() of the struct of
 *     the minor before (the first added member is pointer- or 8-byte
 *     aligned when the older struct ends in padding), so the tail padding
 *     of an older struct is never read as a field.  A member is present
 *     when struct_size >= offsetof(member) + sizeof(member)
 *     (TOOLHOST_HAS_MEMBER below).
 *
 * Forward rules (a plugin built against a newer minor than the host's):
 * the host loads it with a note, reads only the members it knows, reads an
 * unknown semantic type as TOOLHOST_SEM_TEXT and ignores unknown advisory
 * flag bits (TOOLHOST_TOOL_ADVISORY_MASK) with a warning naming the
 * plugin's minor; it refuses the plugin ("built against toolhost ABI 1.N,
 * this host supports 1.M") when toolhost_plugin.requires_host_minor is
 * newer than the host or when a behavioural flag bit is unknown.  A plugin
 * reads the host api the same way: a member beyond the host's struct_size
 * (an older host) is not there (see TH_SDK_HOST_HAS in toolhost/sdk.h).
 *
 * Memory.  The host never frees plugin memory and the plugin never frees
 * host memory.  Descriptors returned by the entry point are static data of
 * the plugin and MUST stay valid and unchanged until the object is closed.
 *
 * Threading classes (named at each function below):
 *   Load  - the entry point, init() and fini().  Called by the host from one
 *           thread at a time per loaded plugin; never concurrently with each
 *           other for the same plugin.
 *   Call  - execute(), validate_args(), needs_permission().  Called from a
 *           host worker thread, or from the thread of a caller that waits
 *           for the call (`toolhost call`, a tool calling tools, run_code);
 *           never from a front's event loop, so a slow hook delays only its
 *           own call -- except for a tool declared TOOLHOST_TOOL_SHORT,
 *           whose Call functions a front's event loop may run itself (see
 *           the flag).  Concurrently with each other and with themselves,
 *           unless the tool has TOOLHOST_TOOL_SERIAL, in which case the host
 *           never runs two execute() of that tool at once, or the plugin has
 *           TOOLHOST_PLUGIN_SERIAL (1.1): never two execute() of any of its
 *           tools at once.
 *           Never concurrently with Load functions of the same plugin.
 *   Owner - host callbacks that take a toolhost_call: called by the thread
 *           that currently owns the call.  That is the thread running
 *           execute(); after suspend() returns 0, execute() may hand the
 *           call to one plugin thread, which owns it from then until
 *           complete() (possibly before execute() has returned: execute()
 *           MUST NOT touch the call after the hand-off, and MUST still
 *           return TOOLHOST_PENDING).
 *   Any   - may be called from any thread at any time while the plugin is
 *           loaded.
 *
 * Misuse of a call.  The host detects, logs (tool, call id, what) and
 * refuses without touching freed memory: a callback on a call that has
 * ended (write, set_meta, progress, caller, suspend or a second
 * complete(): TOOLHOST_ESTATE; is_cancelled() answers 1), suspend()
 * followed by a return other than TOOLHOST_PENDING (the call ends as a
 * tool error), an unknown status from execute() or complete() (a tool
 * error; complete() returns TOOLHOST_EINVAL; TOOLHOST_UNAVAILABLE,
 * TOOLHOST_TIMEOUT and TOOLHOST_RATE_LIMITED are unknown from a plugin
 * built against a minor older than 1.5).  The host keeps the memory
 * of the most recent ended calls for that; a handle used long after its
 * call ended (thousands of calls later) is undefined behaviour.
 *
 * Plugin threads and unloading.  The host cannot see the threads a plugin
 * starts.  fini() may assume every call of every tool of the generation
 * has ended (complete() returned for suspended ones), nothing more: a
 * thread that called complete() may still be running plugin code.  Before
 * fini() returns, the plugin MUST make every thread it started leave its
 * code (join them).  A thread still running after fini() is a bug of the
 * plugin, but the host survives it: it unmaps the code only when no thread
 * started after the load is inside it (its pc, or the first return
 * address on its stack into the plugin rather than the host), else it
 * keeps the object mapped and unloads it once the thread has left (a
 * warning names the thread; docs/reload.md says what the check cannot
 * see).  A thread whose stack cannot be read (process_vm_readv refused)
 * counts as inside until it is gone.  What such a thread finds is
 * still undefined: its state was freed by fini(), the host may have
 * closed what init() opened.  Example: sdk/AUTHORING.md section 9.
 *
 * Generations.  A hot reload loads the changed plugin as a new generation
 * (its own copy of the object, own state) and calls its init() while calls
 * of the old generation may still run: the two overlap (init of the new
 * and execute() or complete() of the old at the same time; fini() of the
 * old after its last call ended).  Globals are not shared (each generation
 * is its own copy) but outside resources are (files, ports, devices).  A
 * plugin that cannot overlap sets TOOLHOST_PLUGIN_EXCLUSIVE_RELOAD: the
 * new init() then runs after the old fini().
 *
 * Only <stdint.h> and <stddef.h> are used; the header compiles as C99 with
 * -pedantic and as C++.
 */
#ifndef TOOLHOST_PLUGIN_H
#define TOOLHOST_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TOOLHOST_ABI_MAJOR 1
#define TOOLHOST_ABI_MINOR 5

/* Whether the struct at `p` (with its struct_size) holds `member` of `type`. */
#define TOOLHOST_HAS_MEMBER(type, p, member)                                  \
    ((p)->struct_size >= offsetof(type, member) + sizeof(((type *)0)->member))

/* The one exported symbol of a plugin.  Its name carries the ABI major. */
#define TOOLHOST_ENTRY_SYMBOL "toolhost_plugin_v1"

#if defined(__GNUC__) || defined(__clang__)
#define TOOLHOST_EXPORT __attribute__((visibility("default")))
#else
#define TOOLHOST_EXPORT
#endif

/* ---- Return codes ---------------------------------------------------- */

/* execute() returns one of these. */
#define TOOLHOST_OK 0      /* the tool succeeded: result ok = true          */
#define TOOLHOST_FAILED 1  /* the tool ran and failed: result ok = false;
                              write the reason to stderr                   */
#define TOOLHOST_PENDING 2 /* only after a successful suspend(): the call
                              goes on and is finished by complete()        */
#define TOOLHOST_NOT_FOUND 3 /* (1.4) a resource read: no such resource
                                at this URI (a template matched, the
                                plugin has none)                          */
/* (1.5) The tool could not do its work because something it depends on
 * (a server, a service, a remote API: its backend) failed; not the
 * caller's fault, and worth trying again later.  execute() and complete()
 * may return these; the call ends as a tool error of the matching code
 * (docs/protocol.md), whose message is what the tool wrote to stderr (the
 * code's own words when it wrote nothing; stdout and meta are not kept).
 * A hint of when to try again goes through set_retry_after() (ABI 1.5)
 * before the call ends.  A host older than 1.5 treats them as an unknown
 * status (a tool error, logged): use them only when the host api's
 * abi_minor is 5 or more (the SDK's th_sdk_fail_backend() does that), and
 * a host treats them as unknown for a plugin built against a minor older
 * than 1.5. */
#define TOOLHOST_UNAVAILABLE 4  /* the backend is down or refuses work now
                                   (a server that died and restarts, a
                                   connection refused, an HTTP 502/503):
                                   code "unavailable"                     */
#define TOOLHOST_TIMEOUT 5      /* the backend did not answer in the time
                                   the tool allows it (its own timeout,
                                   not the call's deadline, which the host
                                   enforces itself): code
                                   "backend_timeout"                      */
#define TOOLHOST_RATE_LIMITED 6 /* the backend said "slow down" (an HTTP
                                   429, a quota): code "rate_limited"     */

/* Host callbacks return 0 or one of these negative codes. */
#define TOOLHOST_EINVAL (-1)     /* a bad argument (NULL, bad msgpack, ...) */
#define TOOLHOST_ENOMEM (-2)     /* the host ran out of memory              */
#define TOOLHOST_ECANCELLED (-3) /* the call was cancelled or timed out;
                                    output is discarded: stop soon         */
#define TOOLHOST_ESTATE (-4)     /* not allowed now (e.g. suspend twice)    */
#define TOOLHOST_ENOTSUP (-5)    /* (1.4) the caller cannot do this: ask_client
                                    to a front or client without it, a block
                                    where blocks are not carried           */

/* ---- Types ------------------------------------------------------------ */

/* Parameter types: the JSON Schema types a model sees. */
typedef enum toolhost_type {
    TOOLHOST_TYPE_STRING = 1,
    TOOLHOST_TYPE_INTEGER = 2,
    TOOLHOST_TYPE_NUMBER = 3, /* an integer argument is accepted too */
    TOOLHOST_TYPE_BOOLEAN = 4,
    TOOLHOST_TYPE_ARRAY = 5,
    TOOLHOST_TYPE_OBJECT = 6
} toolhost_type;

/* Semantic types: what an output stream holds.  The host sizes and trims
 * each stream by its type (see the ops guide for the limits). */
typedef enum toolhost_semantic {
    TOOLHOST_SEM_TEXT = 1,           /* plain text, no better type fits     */
    TOOLHOST_SEM_STATUS = 2,         /* a short status message              */
    TOOLHOST_SEM_ERROR = 3,          /* an error message                    */
    TOOLHOST_SEM_FILE_CONTENT = 4,   /* the content of a file               */
    TOOLHOST_SEM_FILE_VIEW = 5,      /* a window of a file, with line nos   */
    TOOLHOST_SEM_COMMAND_OUTPUT = 6, /* what a command printed              */
    TOOLHOST_SEM_SEARCH_RESULTS = 7, /* matches, one per line               */
    TOOLHOST_SEM_KNOWLEDGE = 8,      /* documentation, reference text       */
    TOOLHOST_SEM_STRUCTURED = 9,     /* JSON text (one value; checked
                                        against output_schema when set)     */
    TOOLHOST_SEM_LOG = 10,           /* log lines                           */
    TOOLHOST_SEM_DIFF = 11,          /* a unified diff                      */
    TOOLHOST_SEM_BINARY = 12         /* bytes, never mixed into text        */
} toolhost_semantic;

/* Tool flags (bits of toolhost_tool.flags). */
#define TOOLHOST_TOOL_ASYNC (1u << 0)       /* long-running: acknowledged
                                               at the first progress update */
#define TOOLHOST_TOOL_READ_ONLY (1u << 1)   /* changes nothing outside      */
#define TOOLHOST_TOOL_DESTRUCTIVE (1u << 2) /* may delete or overwrite      */
#define TOOLHOST_TOOL_IDEMPOTENT (1u << 3)  /* same args, same effect       */
#define TOOLHOST_TOOL_OPEN_WORLD (1u << 4)  /* reaches outside the machine  */
#define TOOLHOST_TOOL_SERIAL (1u << 5)      /* never two calls at once      */
/* Bits 16-31 are advisory (hints for callers; the host behaves the same
 * without them): a host ignores an unknown one with a warning.  An unknown
 * bit below 16 changes behaviour, so the host refuses the plugin. */
#define TOOLHOST_TOOL_ADVISORY_MASK 0xffff0000u
/* Short (a hint; advisory, so an older host just runs the tool on a
 * worker): execute(), validate_args() and needs_permission() of this sync
 * tool return within about a millisecond (well under host.short_call_max)
 * and never block or wait: no sleeping, no waiting on locks others hold for
 * long, no network or slow disk I/O, no calls of other tools.  suspend()
 * is allowed when execute() hands the call to a plugin thread at once and
 * returns TOOLHOST_PENDING without waiting (the mcp plugin's calls of a
 * stdio server).  A front's own thread may then run them itself instead of
 * handing the call to a worker and back, which saves two thread hand-offs
 * per call: the msgpack-RPC server's event loop (shared by every client:
 * only tools with this flag run there) and an MCP session's input thread
 * (one client).  No tool without the flag ever runs there: set it only
 * when every call is bounded whatever its arguments (a tool whose cost
 * depends on a pattern, a path or a command must not).
 * While they run, that thread serves nothing else, so a slow call stalls
 * every client of the RPC loop.  The host times each such run: one that
 * holds the thread longer than host.short_call_max is logged; at the third
 * (or at one over 10x that) the tool runs on workers, tried on the thread
 * again after a back-off (1 s, doubling to 64 s at the default).  A run
 * that has not returned after host.short_call_stuck (100 ms) is logged
 * while it runs and the tool is sent to workers at once; that run itself
 * cannot be moved or preempted (it holds the thread until execute()
 * returns), so a tool that may hang must not set this flag, nor a tool
 * that asks its client (ask_client(), refused there).  Ignored
 * for TOOLHOST_TOOL_ASYNC tools and for isolated plugins. */
#define TOOLHOST_TOOL_SHORT (1u << 16)

/* Plugin flags (bits of toolhost_plugin.flags, ABI 1.1). */
#define TOOLHOST_PLUGIN_SERIAL (1u << 0) /* never two calls of ANY of the
                                            plugin's tools at once (one
                                            handle shared by all tools)    */
/* A hot reload does not overlap generations: the new generation's init()
 * runs only after every call of the old one ended and its fini()
 * returned (its tools are unavailable meanwhile).  When the old calls do
 * not end within host.reload_drain_timeout the reload fails and nothing
 * changes.  Without the flag a reload overlaps: see Generations below. */
#define TOOLHOST_PLUGIN_EXCLUSIVE_RELOAD (1u << 1)
#define TOOLHOST_PLUGIN_KNOWN \
    (TOOLHOST_PLUGIN_SERIAL | TOOLHOST_PLUGIN_EXCLUSIVE_RELOAD)

/* Bits of toolhost_param.bounds (ABI 1.1): which of minimum/maximum hold,
 * and whether they exclude the bound itself. */
#define TOOLHOST_BOUND_MINIMUM (1u << 0)
#define TOOLHOST_BOUND_MAXIMUM (1u << 1)
#define TOOLHOST_BOUND_EXCLUSIVE_MINIMUM (1u << 2)
#define TOOLHOST_BOUND_EXCLUSIVE_MAXIMUM (1u << 3)

/* Fronts a call can come from (toolhost_caller.front). */
#define TOOLHOST_FRONT_CLI "cli"
#define TOOLHOST_FRONT_RPC "rpc"
#define TOOLHOST_FRONT_MCP "mcp"
#define TOOLHOST_FRONT_CODE "code"

/* Output streams for write(). */
#define TOOLHOST_STDOUT 1
#define TOOLHOST_STDERR 2

/* Log levels for log(). */
#define TOOLHOST_LOG_ERROR 0
#define TOOLHOST_LOG_WARN 1
#define TOOLHOST_LOG_INFO 2
#define TOOLHOST_LOG_DEBUG 3

struct toolhost_host_api;
struct toolhost_tool;

/* A cage (ABI 1.3): a cgroup the host made for a process tree the plugin
 * starts itself (toolhost_host_api.cage_open).  Opaque: owned by the
 * host, handled by the plugin only through the cage_* callbacks. */
typedef struct toolhost_cage toolhost_cage;

/* Content (ABI 1.4): where a resource read, a prompt get or a completion
 * puts what it returns, through out->host->content_add().  The host
 * allocates it; the members below are public and read-only for the
 * plugin, host-private data follows them.  Valid only during the callback
 * it was given to. */
typedef struct toolhost_content {
    uint32_t struct_size;
    const struct toolhost_host_api *host; /* the api init() was given */
} toolhost_content;

/* Kinds of a content block (toolhost_block.kind). */
#define TOOLHOST_BLOCK_TEXT 1     /* UTF-8 text: data, len                */
#define TOOLHOST_BLOCK_IMAGE 2    /* bytes of mime_type image/...         */
#define TOOLHOST_BLOCK_AUDIO 3    /* bytes of mime_type audio/...         */
#define TOOLHOST_BLOCK_RESOURCE 4 /* an embedded resource: uri, mime_type,
                                     its bytes (text when mime_type is
                                     text/... or a JSON or XML type and
                                     the bytes are UTF-8, else a blob)   */
#define TOOLHOST_BLOCK_LINK 5     /* a link to a resource: uri, name,
                                     mime_type; no data                  */

/* One block of content (ABI 1.4).  The host copies what it points to. */
typedef struct toolhost_block {
    uint32_t struct_size; /* sizeof(toolhost_block) the plugin built with */
    uint32_t kind;        /* TOOLHOST_BLOCK_*                             */
    const char *role;     /* prompts: "user" or "assistant"; NULL: "user";
                             ignored elsewhere                            */
    const char *mime_type; /* at most 255 bytes.  IMAGE, AUDIO: required.
                              A resource read: NULL takes the resource's
                              declared type.  A prompt's RESOURCE: NULL
                              is application/octet-stream (a blob); a
                              LINK: NULL says none                        */
    const void *data;     /* the text or the bytes (not NUL-terminated)   */
    size_t len;
    const char *uri;      /* RESOURCE, LINK: required; a resource read:
                             NULL is the URI read; at most 2048 bytes     */
    const char *name;     /* LINK: required; at most 255 bytes            */
} toolhost_block;

/* One call of a tool.  The host allocates it; the members below are public
 * and read-only for the plugin; host-private data follows them.  A plugin
 * MUST NOT copy the struct or keep the pointer after the call ended: the
 * call ends when execute() returns anything but TOOLHOST_PENDING, or, after
 * TOOLHOST_PENDING, when complete() returns. */
struct toolhost_args_view;

typedef struct toolhost_call {
    uint32_t struct_size;
    const struct toolhost_host_api *host; /* the same api init() was given */
    uint64_t call_id;                     /* unique within the host process */

    /* ---- ABI 1.2 (check with TOOLHOST_HAS_MEMBER before use) ---- */

    /* NULL, or the arguments of execute() already decoded by the host (it
     * walks them once, just before execute()): a read-only view, borrowed, valid
     * exactly as long as execute()'s `args` (until execute() returns).  It
     * describes the bytes at view->data; use it only when view->data and
     * view->len are execute()'s `args` and `args_len` (the SDK's
     * th_sdk_args_init_call() checks that and falls back to decoding).
     * The host may leave it NULL for any call (too many arguments, a host
     * that does not build it); it is set only while execute() runs. */
    const struct toolhost_args_view *args_view;
} toolhost_call;

/* Who calls (ABI 1.1, filled by toolhost_host_api.caller).  Strings are
 * the host's, valid until the call ends; NULL when unknown. */
typedef struct toolhost_caller {
    uint32_t struct_size; /* set by the PLUGIN to sizeof(toolhost_caller);
                             the host fills only members that fit */
    int64_t uid;          /* the peer's uid, -1 when unknown */
    const char *user;     /* the peer's user name */
    const char *session;  /* the session id (one per connection) */
    const char *toolset;  /* the toolset the call came through */
    const char *front;    /* TOOLHOST_FRONT_* */
} toolhost_caller;

/* The kind of a decoded argument value (toolhost_arg.type, ABI 1.2). */
#define TOOLHOST_VALUE_NIL 1
#define TOOLHOST_VALUE_BOOL 2   /* i: 0 or 1                                */
#define TOOLHOST_VALUE_UINT 3   /* a non-negative integer: u                */
#define TOOLHOST_VALUE_INT 4    /* a negative integer: i                    */
#define TOOLHOST_VALUE_FLOAT 5  /* f (a float32 is widened)                 */
#define TOOLHOST_VALUE_STR 6    /* bytes, len: the string (no NUL at end)   */
#define TOOLHOST_VALUE_BIN 7    /* bytes, len: the binary payload           */
#define TOOLHOST_VALUE_ARRAY 8  /* len: the number of elements              */
#define TOOLHOST_VALUE_MAP 9    /* len: the number of entries               */
#define TOOLHOST_VALUE_EXT 10   /* bytes, len: the payload; i: the ext type */

/* One top-level entry of the arguments map (ABI 1.2), in map order.  Every
 * pointer points into the argument bytes (toolhost_args_view.data); the
 * value is decoded one level: a scalar fully, a container by its count,
 * with its encoded bytes in raw/raw_len for a decoder of the plugin's own
 * choice. */
typedef struct toolhost_arg {
    uint32_t struct_size;  /* sizeof(toolhost_arg) of the host */
    uint32_t type;         /* TOOLHOST_VALUE_* */
    const char *name;      /* the key, not NUL-terminated */
    size_t name_len;
    const uint8_t *raw;    /* the value as msgpack */
    size_t raw_len;
    const uint8_t *bytes;  /* STR, BIN, EXT: the payload */
    size_t len;            /* STR, BIN, EXT: bytes; ARRAY, MAP: count */
    int64_t i;             /* BOOL, INT, EXT (see the kinds above) */
    uint64_t u;            /* UINT */
    double f;              /* FLOAT */
} toolhost_arg;

/* The decoded arguments of one execute() (toolhost_call.args_view, ABI
 * 1.2): what the host's validation already found, so that a plugin need
 * not decode the map again.  Read-only, owned by the host. */
typedef struct toolhost_args_view {
    uint32_t struct_size;      /* sizeof(toolhost_args_view) of the host */
    uint32_t n_args;           /* entries in args (the map's size) */
    const uint8_t *data;       /* the argument bytes this view describes */
    size_t len;
    const toolhost_arg *args;  /* n_args entries; stride args[0].struct_size */
} toolhost_args_view;

/* What ask_client() asks the caller's client (ABI 1.4). */
#define TOOLHOST_ASK_SAMPLING 1 /* a completion from the client's model:
                                   request = MCP sampling/createMessage
                                   params ({messages, maxTokens, ...});
                                   answer = its result ({role, content,
                                   model, stopReason})                   */
#define TOOLHOST_ASK_FORM 2     /* a form the user fills: request =
                                   {message, requestedSchema} (a flat
                                   object schema: string, number, integer,
                                   boolean and enum properties, with
                                   defaults); answer = {action: "accept" |
                                   "decline" | "cancel", content}         */

/* ---- What the host gives the plugin ----------------------------------- */

typedef struct toolhost_host_api {
    uint32_t struct_size;
    uint32_t abi_major; /* the host's TOOLHOST_ABI_MAJOR */
    uint32_t abi_minor; /* the host's TOOLHOST_ABI_MINOR */

    /* Owner.  Appends `len` bytes to the call's stdout or stderr (stream is
     * TOOLHOST_STDOUT or TOOLHOST_STDERR).  The host copies the bytes before
     * returning.  The host limits each stream by its semantic type, keeping
     * memory bounded however much is written; writes past the limit succeed
     * and are counted.  Returns 0, TOOLHOST_EINVAL, or TOOLHOST_ECANCELLED
     * once the call is cancelled or timed out (the bytes are dropped). */
    int (*write)(toolhost_call *call, int stream, const void *data,
                 size_t len);

    /* Owner.  Sets the call's meta to the msgpack map in `map` (copied
     * before returning), replacing an earlier set_meta().  The host adds
     * its own keys (output sizes, truncation) under "toolhost".  Returns 0
     * or TOOLHOST_EINVAL if `map` is not one valid msgpack map. */
    int (*set_meta)(toolhost_call *call, const uint8_t *map, size_t len);

    /* Owner.  Reports progress.  `fraction` is in [0, 1], or negative when
     * unknown; `message` (UTF-8, may be NULL) and `data` (a msgpack value,
     * may be NULL) are copied before returning.  For an async tool the first
     * update acknowledges the call: the caller gets {status: running}, and
     * later updates reach it as progress events, coalesced when the caller
     * reads slower than the tool reports.  Returns 0 or a negative code. */
    int (*progress)(toolhost_call *call, double fraction, const char *message,
                    const uint8_t *data, size_t data_len);

    /* Owner.  Nonzero once the call is cancelled or past its deadline; the
     * tool should then stop soon and return (what it returns is dropped). */
    int (*is_cancelled)(const toolhost_call *call);

    /* Owner.  Milliseconds left before the call's deadline, or -1 when the
     * call has none. */
    int64_t (*time_left_ms)(const toolhost_call *call);

    /* Owner, from execute() only.  Detaches the call from the host worker:
     * after suspend() returns 0, execute() MUST return TOOLHOST_PENDING, and
     * the plugin MUST call complete() exactly once, from the thread it
     * handed the call to (see the Owner class: that may happen before
     * execute() returns).  Until then that thread may use the call's other
     * callbacks.  The worker is free as soon as execute() returns.
     * Returns 0 or TOOLHOST_ESTATE (already suspended). */
    int (*suspend)(toolhost_call *call);

    /* Owner, after suspend().  Finishes a suspended call with `status`
     * (TOOLHOST_OK or TOOLHOST_FAILED; from a 1.5 plugin on a 1.5 host
     * also TOOLHOST_UNAVAILABLE, TOOLHOST_TIMEOUT, TOOLHOST_RATE_LIMITED).  The call pointer is invalid once
     * complete() returns (whatever it returns, except TOOLHOST_ESTATE for a
     * call not suspended).  Returns 0; TOOLHOST_EINVAL for another status
     * (the call ends as a tool error, logged); TOOLHOST_ESTATE when the
     * call was not suspended (nothing happens, the call goes on and
     * execute() still returns its result) or has ended already (a second
     * complete(), logged).  (This member once returned void: a plugin
     * that ignores the value is unaffected.) */
    int (*complete)(toolhost_call *call, int status);

    /* Any.  Writes one line to the host's log under the plugin's name.
     * `host` is the api pointer init() was given; `message` is copied. */
    void (*log)(const struct toolhost_host_api *host, int level,
                const char *message);

    /* ---- ABI 1.1 (check with TH_SDK_HOST_HAS before use) ---- */

    /* Owner.  Fills *out (whose struct_size the plugin set) with who calls.
     * Returns 0 or TOOLHOST_EINVAL. */
    int (*caller)(const toolhost_call *call, toolhost_caller *out);

    /* Any, until the call ends.  Like log(), with the line tagged with the
     * plugin's name and the call id ("plugin P: call N: message"). */
    void (*log_call)(const toolhost_call *call, int level,
                     const char *message);

    /* Any, until the call ends.  Registers fn(ud) to run once when the call
     * is cancelled or passes its deadline (at once if it already is), on a
     * host thread that must not block: fn should only wake the tool's own
     * thread.  Never after the call ended.  One registration per call (a
     * later one replaces it).  fn NULL removes the registration and waits
     * until a running fn has returned (not from inside fn): do that before
     * freeing what `ud` points to, if that happens before the call ends.
     * Returns 0, TOOLHOST_EINVAL or TOOLHOST_ESTATE (this call cannot be
     * cancelled this way). */
    int (*on_cancel)(toolhost_call *call, void (*fn)(void *ud), void *ud);

    /* Any, until the call ends.  A file descriptor that becomes readable
     * when the call is cancelled or passes its deadline, for poll(); owned
     * by the host (do not close or read it), valid until the call ends.
     * Returns the fd or a negative code. */
    int (*cancel_fd)(toolhost_call *call);

    /* ---- ABI 1.3 (check with TH_SDK_HOST_HAS before use) ---- */

    /* Cages: a cgroup for the processes a plugin starts itself (a command,
     * a helper), made by the host in its own cgroup subtree, so that the
     * whole tree can be killed at once whatever it does: a process that
     * makes a session of its own, double-forks, or kills its parent stays
     * in the cage, and so does everything it starts.  Without a cage the
     * plugin contains its children itself (a subreaper, a process group).
     *
     * Order: cage_open; fork(); cage_enter in the child, first thing;
     * cage_placed in the parent once the children are forked; when they
     * are done (or the call is cancelled or past its deadline) cage_kill;
     * cage_close.  One cage is for one tree: open one per call (or per
     * batch of children that end together); the host names and removes
     * it.  The plugin owns the cage from cage_open to cage_close and MUST
     * close every cage before fini() returns; one cage is used by one
     * thread at a time (cage_kill and cage_close of one cage never run
     * at once), and cage_close is called once.  A NULL member (a host
     * older than 1.3) means "no cages": use TH_SDK_HOST_HAS. */

    /* Any.  Opens a cage: a new, empty cgroup below the host's own
     * (<host cgroup>/toolhost-<pid>/<plugin>.<label>.<n>; `label` may be
     * NULL, characters other than [A-Za-z0-9_-] become '_').
     * `memory_max`: the cgroup's memory.max in bytes where the host has
     * the memory controller for its subtree, 0 for none.  Returns the
     * cage, or NULL with a one-line reason in `why` (NUL-terminated, at
     * most why_size bytes) when the host has no cage to give: cgroups
     * off ($TOOLHOST_CGROUP=off), no cgroup2 hierarchy, a host that may
     * not make cgroups (not root and no delegated subtree), or a plugin
     * running in an isolated worker or under `toolhost check` (the
     * worker's or check's own cgroup already holds whatever the plugin
     * starts).  NULL is an answer, not an error: go on with the
     * plugin's own containment.  Logs nothing; say which applied. */
    toolhost_cage *(*cage_open)(const struct toolhost_host_api *host,
                                const char *label, uint64_t memory_max,
                                char *why, size_t why_size);

    /* Async-signal-safe: in a child the plugin forked, right after
     * fork() and before it runs anything else (before execve, before the
     * child forks).  Moves the calling process into the cage (one
     * write(2) to a file the host opened in cage_open()), then, where
     * the process may (CAP_SYS_ADMIN), puts it in a cgroup namespace
     * rooted at the cage (it and its descendants see the cage as "/").
     * Everything the child starts afterwards is in the cage too.
     * Returns 0; TOOLHOST_EINVAL for a NULL cage; TOOLHOST_ESTATE when
     * the move failed, cage_placed() came first, or the caller is the
     * process that opened the cage (the host itself: EPERM) (errno says
     * why): the process is then where it was.  The descriptors the host opened for
     * this are close-on-exec; a child that closes every descriptor
     * before execve (close_range) MUST call cage_enter first. */
    int (*cage_enter)(const toolhost_cage *cage);

    /* Any, in the parent once every child meant for the cage is forked
     * (whether it entered or not): closes the descriptors cage_enter()
     * needs.  Optional: cage_kill() and cage_close() close them too. */
    void (*cage_placed)(toolhost_cage *cage);

    /* Any (it waits: not from a front's thread, not in an on_cancel()
     * hook).  Kills every process in the cage and in the cgroups made
     * inside it (cgroup.kill, which also takes what forks meanwhile;
     * before Linux 5.14 freeze and SIGKILL to each), waits until it is
     * empty (at most `timeout_ms`) and removes it.  Reaps nothing: the
     * plugin still waits for its own children.  Returns 0, or
     * TOOLHOST_ESTATE when it could not be emptied or removed in time
     * (the host logs it, and tries again at cage_close() and at its
     * exit). */
    int (*cage_kill)(toolhost_cage *cage, int64_t timeout_ms);

    /* Any.  Frees the cage; one not killed and removed yet is killed and
     * removed first (waiting at most 1 s).  NULL is a no-op. */
    void (*cage_close)(toolhost_cage *cage);

    /* ---- ABI 1.4 (check with TH_SDK_HOST_HAS before use) ---- */

    /* The thread of the read(), get() or complete() that was given `out`,
     * during that callback.  Appends one block (copied).  What a resource
     * read returns is one item of its contents per block (TEXT, or the
     * bytes of IMAGE, AUDIO or RESOURCE as a blob); a prompt's messages
     * are one per block, each with its role; a completion's values are
     * its TEXT blocks, one value each (at most 100 are kept).  Returns 0;
     * TOOLHOST_EINVAL for a bad block (named in the host log: an unknown
     * kind, text that is not UTF-8, a missing mime_type, uri or name, a
     * block a completion cannot hold); TOOLHOST_ENOMEM when the content
     * would pass the host's budget (mcp.max_message, the answer must fit
     * in one message: bytes count 4/3 for base64, text its JSON escapes,
     * every block its strings and a little more) or memory ran out: the
     * request then fails.  TOOLHOST_ESTATE for an `out` that is not the
     * one this thread's running callback was given (kept past its
     * callback, or passed to another thread): nothing is written. */
    int (*content_add)(toolhost_content *out, const toolhost_block *block);

    /* Any; never waits for a client.  The resource at `uri` (one of this
     * plugin's, or a URI one of its templates matches; any other is
     * ignored) changed: clients that subscribed to it are told (MCP
     * notifications/resources/updated, sent by a host thread, one per
     * subscription however many updates came meanwhile).  One atomic load
     * when nobody subscribed.  `host` is the api pointer init() was
     * given. */
    void (*resource_updated)(const struct toolhost_host_api *host,
                             const char *uri);

    /* Owner.  Appends one content block (copied) to the call's result,
     * after its stdout: a result of several blocks - text, an image or
     * audio clip (bytes with their mime_type), an embedded resource, a
     * link to a resource (toolhost_block; `role` is ignored).  MCP
     * clients get stdout's block (when it wrote any) and then these, in
     * order; the RPC and NATS fronts carry them in the result's
     * meta.toolhost.content (docs/protocol.md).  The blocks together may
     * hold as much as the call's stdout may (the tool's semantic type);
     * a block past that is refused.  Returns 0; TOOLHOST_EINVAL for a bad
     * block (named in the host log); TOOLHOST_ENOMEM past the budget or
     * out of memory; TOOLHOST_ECANCELLED once the call is cancelled;
     * TOOLHOST_ENOTSUP where the call's host cannot carry blocks
     * (`toolhost check`'s strict mode). */
    int (*write_block)(toolhost_call *call, const toolhost_block *block);

    /* Owner, and it waits: from the call's own thread (execute(), or the
     * thread a suspended call was handed to), never from an on_cancel()
     * hook.  Asks the caller's client (`kind` TOOLHOST_ASK_*; `request`
     * the JSON text of the ask, `len` bytes) and waits for its answer,
     * at most until the call is cancelled or passes its deadline.  On 0,
     * *answer is the JSON text of the client's answer (NUL-terminated,
     * *answer_len bytes without the NUL), owned by the host and valid
     * until the call ends.  Returns 0; TOOLHOST_EINVAL (a request that
     * is not one JSON object, an unknown kind); TOOLHOST_ENOTSUP (the
     * front cannot carry it, or the client did not declare it: MCP's
     * `sampling` or `elicitation` capability); TOOLHOST_ESTATE (the call
     * made host.max_client_asks asks already; the host has no spare
     * worker slot (host.max_lost_workers) to serve in place of the
     * waiting one; or the tool is declared
     * TOOLHOST_TOOL_SHORT and runs on the front's own thread, which
     * could not read the answer: a tool that asks must not set that
     * flag); TOOLHOST_FAILED (the
     * client answered with an error: *answer is that error's JSON);
     * TOOLHOST_ECANCELLED (the call was cancelled or timed out while it
     * waited, or the client went away). */
    int (*ask_client)(toolhost_call *call, int kind, const char *request,
                      size_t len, const char **answer, size_t *answer_len);

    /* ---- ABI 1.5 (check with TH_SDK_HOST_HAS before use) ---- */

    /* Any, after init() returned 0 and until fini() (any plugin thread,
     * a reader thread while calls run, or execute()); never waits.  The
     * plugin's tool list is no longer what init_tools() returned: the
     * host loads the plugin again as a new generation (init(),
     * init_tools(), from the same file and config block), the way a hot
     * reload of a rebuilt .so does, and swaps it in when that load
     * succeeds: calls in flight finish on this generation, which is then
     * finalized (fini()).  Sessions whose list changed are told
     * (MCP notifications/tools/list_changed).  The new generation is a
     * new dlopen() of a private copy: its static data starts afresh, so
     * what it must know (the new list) it reads again itself.
     * The request is queued, never served inline: requests that arrive
     * before the reload starts fold into one; reloads asked this way
     * start at most once per host.plugin_reload_min_interval (default
     * 1 s; a request inside that waits for it, logged).  `reason` (one
     * line, may be NULL; copied, cut at 200 bytes) goes to the host's
     * log: "plugin 'P' asked for its tools to be listed again: REASON".
     * A failing reload leaves this generation serving (logged).
     * Returns 0 (queued); TOOLHOST_ESTATE from init() or after fini()
     * began, or while the host stops; TOOLHOST_ENOTSUP where the host
     * cannot reload the plugin: host.reload off, `toolhost check` or
     * `toolhost call` without a host, or a plugin run with isolation:
     * process (its worker does not carry the request). */
    int (*tools_changed)(const struct toolhost_host_api *host,
                         const char *reason);

    /* Owner.  When the caller may try the call again, in milliseconds
     * from the call's end: a hint carried with the tool error of a call
     * that ends TOOLHOST_UNAVAILABLE or TOOLHOST_RATE_LIMITED (RPC and
     * NATS: error.retry_after_ms; MCP: _meta "toolhost/retry_after_ms"),
     * ignored for any other end.  A later call replaces an earlier one;
     * 0 removes it; a value above TOOLHOST_MAX_RETRY_AFTER_MS is cut to
     * it.  Returns 0, TOOLHOST_EINVAL (no call), TOOLHOST_ESTATE (the
     * call has ended: logged as a misuse) or TOOLHOST_ENOTSUP (a call
     * that cannot carry it: `toolhost check`'s own runs).  Not there on a
     * host older than 1.5 (check with TH_SDK_HOST_HAS).  In an isolated
     * worker the hint travels with the call's end. */
    int (*set_retry_after)(toolhost_call *call, uint64_t ms);
} toolhost_host_api;

/* The longest retry-after the host carries (set_retry_after, ABI 1.5):
 * one day. */
#define TOOLHOST_MAX_RETRY_AFTER_MS 86400000u

/* ---- What the plugin declares ------------------------------------------ */

/* One parameter of a tool (or one key of a plugin's config block). */
typedef struct toolhost_param {
    uint32_t struct_size;
    const char *name;        /* ^[a-zA-Z_][a-zA-Z0-9_]{0,63}$, unique      */
    uint32_t type;           /* a toolhost_type                            */
    int required;            /* nonzero: the caller must give it           */
    const char *description; /* one line a model can act on; required      */
    /* NULL, or a NULL-terminated list of the allowed values; only for
     * TOOLHOST_TYPE_STRING. */
    const char *const *enum_values;
    /* NULL, or the default as JSON text ("3", "true", "\"utf-8\""); it must
     * match `type` and is not allowed with `required`.  The host fills it in
     * before execute() when the caller leaves the parameter out. */
    const char *default_json;
    /* For TOOLHOST_TYPE_ARRAY: the type of the elements, 0 for any. */
    uint32_t item_type;

    /* ---- ABI 1.1 (a zeroed member means "no constraint") ---- */

    /* For integer and number parameters: bounds, used when the matching
     * TOOLHOST_BOUND_* bit is set in `bounds` (JSON Schema minimum,
     * maximum, exclusiveMinimum, exclusiveMaximum). */
    double minimum;
    double maximum;
    uint32_t bounds;
    /* For strings: length in Unicode code points; max_length 0 = none. */
    uint32_t min_length;
    uint32_t max_length;
    /* For arrays: number of items; max_items 0 = none. */
    uint32_t min_items;
    uint32_t max_items;
    /* For strings: a regular expression (PCRE2, UTF; not anchored, as in
     * JSON Schema), or NULL. */
    const char *pattern;
    /* For object and array parameters: a JSON Schema (text) the value must
     * match, exported as is.  Only the keywords type, enum, const, minimum,
     * maximum, exclusiveMinimum, exclusiveMaximum, minLength, maxLength,
     * pattern, items (one schema), minItems, maxItems, properties, required,
     * additionalProperties (and the annotations title, description,
     * default, examples, $schema, $comment) are allowed; the host refuses
     * any other at load, naming it.  NULL: none. */
    const char *schema_json;
} toolhost_param;

typedef struct toolhost_tool {
    uint32_t struct_size;
    const char *name;             /* ^[a-zA-Z0-9_-]{1,64}$, unique in the
                                     whole host                            */
    const char *description;      /* one line; required                    */
    const char *long_description; /* NULL or usage, warnings, examples in
                                     paragraphs; lines starting "## " open
                                     sections (e.g. "## When to use")      */
    const toolhost_param *params; /* n_params parameters (may be NULL if 0) */
    uint32_t n_params;
    uint32_t stdout_type; /* a toolhost_semantic */
    uint32_t stderr_type; /* a toolhost_semantic */
    uint32_t flags;       /* TOOLHOST_TOOL_* bits */

    /* Call.  Runs the tool.  `state` is what init() stored.  `args` is a
     * msgpack map, already validated against `params` with defaults filled
     * in; it and `call` are valid until execute() returns (for a suspended
     * call: `args` until execute() returns, `call` until complete()).
     * Returns TOOLHOST_OK, TOOLHOST_FAILED, (1.5) TOOLHOST_UNAVAILABLE,
     * TOOLHOST_TIMEOUT or TOOLHOST_RATE_LIMITED, or (after suspend())
     * TOOLHOST_PENDING.  Output goes through call->host->write().
     * A 1.2 host may also hand the same arguments decoded in
     * call->args_view (see toolhost_call). */
    int (*execute)(void *state, const struct toolhost_tool *tool,
                   toolhost_call *call, const uint8_t *args, size_t args_len);

    /* Call, optional.  Asked before execute() with the validated args:
     * return 0 when this call needs no permission, 1 when it does, writing
     * a one-line reason (NUL-terminated, at most reason_size bytes) that the
     * host shows to whoever decides. */
    int (*needs_permission)(void *state, const struct toolhost_tool *tool,
                            const uint8_t *args, size_t args_len,
                            char *reason, size_t reason_size);

    /* Call, optional.  Checks what the parameter table cannot express,
     * after the host's own validation: return 0 when the args are good, or
     * nonzero writing a message (NUL-terminated, at most err_size bytes)
     * that tells a model what to change. */
    int (*validate_args)(void *state, const struct toolhost_tool *tool,
                         const uint8_t *args, size_t args_len, char *err,
                         size_t err_size);

    const void *user_data; /* the plugin's own, untouched by the host */

    /* ---- ABI 1.1 ---- */

    const char *title; /* NULL or a short human name ("Read file") */
    /* NULL, or a JSON Schema (text, the keyword subset of schema_json) for
     * the tool's stdout, which then must be TOOLHOST_SEM_STRUCTURED.  The
     * host checks what a successful call wrote against it when the call
     * ends; a mismatch fails the call as the tool's error
     * ("tool_output_invalid"), not the caller's. */
    const char *output_schema;

    /* ---- ABI 1.4 ---- */

    /* NULL, or the whole input as one JSON Schema (text): an object
     * schema ("type": "object") whose keywords may be any the host's
     * validator knows (JSON Schema 2020-12: local "$ref" into "$defs",
     * "anyOf", "oneOf", "allOf", "not", "if"/"then"/"else", "const",
     * "prefixItems", "patternProperties", "dependentRequired", ...); the
     * host refuses one it does not, naming it.  Clients see it exactly as
     * written (an MCP inputSchema, an export).  A tool with an
     * input_schema declares no params (n_params 0): the host checks each
     * call's arguments against the schema instead, fills in no defaults,
     * and then calls validate_args() as usual. */
    const char *input_schema;

    /* ---- ABI 1.5 ---- */

    /* NULL, or a NULL-terminated list of tags: names an operator's
     * toolsets select the tool by (a toolset's `tags:`) and disable it by
     * (`toolhost disable tag:NAME`), beside the tags the config gives it.
     * Each is ^[a-z0-9][a-z0-9_-]{0,31}$, none repeated, at most
     * TOOLHOST_MAX_TAGS of them; the host refuses a tool with a bad one
     * at load, naming the plugin, the tool and the tag.  Clients see them
     * in the tool's description (tools.list "tags", MCP tools/list
     * "_meta": {"toolhost/tags": [...]}).  A host older than 1.5 does not
     * see them (the tool is then selected by the config's tags only). */
    const char *const *tags;
} toolhost_tool;

/* The most tags one tool may declare (toolhost_tool.tags, ABI 1.5). */
#define TOOLHOST_MAX_TAGS 16

/* A resource (ABI 1.4): data a client may read by URI, such as a file,
 * a record or a schema; or, when `uri` holds "{name}" variables, a family
 * of them (a URI template, RFC 6570 level 1: each variable matches one or
 * more characters other than '/', '?' and '#', up to the first place the
 * template's next literal follows; at most 8 variables, never two side by
 * side).  The URI read() gets is the client's, as sent: not
 * percent-decoded; treat what a variable matched as untrusted input.
 *
 * read(), get() and complete() below run on the thread of the front that
 * received the request (an MCP session's input thread, an HTTP pool
 * thread), like a TOOLHOST_TOOL_SHORT tool: they return within about a
 * millisecond and never block (no network, no slow disk, no waiting on
 * locks others hold for long).  The host times each one and logs one
 * that passes host.short_call_max.  Anything slow belongs in a tool.
 * Concurrently with each other, with execute() of any tool and with
 * themselves; never concurrently with Load functions of the plugin. */
typedef struct toolhost_resource {
    uint32_t struct_size;
    const char *uri;         /* "docs://guide", or a template
                                "db://{table}/{id}"; a scheme is required;
                                unique in the host                       */
    const char *name;        /* a short name; required                    */
    const char *title;       /* NULL or a human name                      */
    const char *description; /* NULL or one line                          */
    const char *mime_type;   /* NULL or the type of its content           */
    /* Reads the resource at `uri` (this one, or a URI the template
     * matched): content_add() of each item of its contents, then
     * TOOLHOST_OK; TOOLHOST_NOT_FOUND when there is none at that URI;
     * TOOLHOST_FAILED writing a one-line reason (NUL-terminated, at most
     * err_size bytes).  Required. */
    int (*read)(void *state, const struct toolhost_resource *res,
                const char *uri, toolhost_content *out, char *err,
                size_t err_size);
    /* Optional, templates only: values for the template's variable `var`
     * that start with (or match) `value`, as TEXT blocks; return
     * TOOLHOST_OK. */
    int (*complete)(void *state, const struct toolhost_resource *res,
                    const char *var, const char *value,
                    toolhost_content *out);
    const void *user_data;   /* the plugin's own, untouched by the host   */
} toolhost_resource;

/* A prompt (ABI 1.4): a message template a client offers its user.  Its
 * arguments are declared like tool parameters, of type
 * TOOLHOST_TYPE_STRING only (MCP prompt arguments are strings). */
typedef struct toolhost_prompt {
    uint32_t struct_size;
    const char *name;        /* as a tool name; unique in the host        */
    const char *title;       /* NULL or a human name                      */
    const char *description; /* one line; required                        */
    const toolhost_param *args; /* n_args arguments (NULL if 0)           */
    uint32_t n_args;
    /* Builds the messages: content_add() of one block per message (its
     * role in the block), then TOOLHOST_OK, or TOOLHOST_FAILED with a
     * reason in err.  `args` is a msgpack map of strings, checked against
     * the declared arguments (required ones present, no others), valid
     * during the call.  Required. */
    int (*get)(void *state, const struct toolhost_prompt *prompt,
               const uint8_t *args, size_t args_len, toolhost_content *out,
               char *err, size_t err_size);
    /* Optional: values for argument `arg` given what the user typed so
     * far (`value`), as TEXT blocks; return TOOLHOST_OK. */
    int (*complete)(void *state, const struct toolhost_prompt *prompt,
                    const char *arg, const char *value,
                    toolhost_content *out);
    const void *user_data;   /* the plugin's own, untouched by the host   */
} toolhost_prompt;

typedef struct toolhost_plugin {
    uint32_t struct_size;
    uint32_t abi_major; /* TOOLHOST_ABI_MAJOR the plugin was built with */
    uint32_t abi_minor; /* TOOLHOST_ABI_MINOR the plugin was built with */
    const char *name;   /* ^[a-zA-Z0-9_-]{1,64}$                        */
    const char *version;
    const char *description;

    /* The keys of the plugin's config block, declared like tool params;
     * the host validates the block against them before init(). */
    const toolhost_param *config_params;
    uint32_t n_config_params;

    /* Load, optional.  If the host calls init() and it returns 0, the host
     * MUST call fini() before closing the plugin.  `host` stays valid until
     * fini() returns.  `config` is the validated config block as a msgpack
     * map (defaults filled in), valid until init() returns.  Store the
     * plugin's state in *state (the host passes it back, never frees it).
     * Return 0, or nonzero writing a message (NUL-terminated, at most
     * err_size bytes); after a failure the host does not call fini(). */
    int (*init)(const toolhost_host_api *host, const uint8_t *config,
                size_t config_len, void **state, char *err, size_t err_size);

    /* Load, optional.  Frees what init() made.  Called once, after the last
     * call of every tool of this plugin has ended.  Before it returns every
     * thread the plugin started MUST have left plugin code (join them): the
     * object may be unloaded right after (see "Plugin threads and
     * unloading" above). */
    void (*fini)(void *state);

    const toolhost_tool *tools; /* n_tools tools */
    uint32_t n_tools;

    /* ---- ABI 1.1 (uint64_t first: the 1.0 struct ends in padding) ---- */

    uint64_t flags; /* TOOLHOST_PLUGIN_* bits */
    /* The oldest host minor this plugin works with (0 = any 1.x host).  A
     * host older than that refuses it with "built against toolhost ABI
     * 1.N, this host supports 1.M".  (A 1.0 host does not know this
     * member and loads the plugin anyway: still check TH_SDK_HOST_HAS
     * before calling a 1.1 host callback.) */
    uint32_t requires_host_minor;

    /* Load, optional (1.1; NULL: only the static `tools`).  Tools the
     * plugin builds from its config.  Called once, right after init()
     * returned 0, with the state init() stored (NULL when there is no
     * init()).  Return an array of *n_tools tools (NULL with *n_tools = 0
     * for none); it MUST stay valid and unchanged until fini() returns.
     * The host checks these tools as it checks the static ones (names,
     * params, struct sizes; no name may repeat a static tool's) and lists
     * them after the static ones; a problem is a load error naming the
     * tool, and the host then calls fini().  A reload with a changed
     * config block calls init() and init_tools() again on a new
     * generation. */
    const toolhost_tool *(*init_tools)(void *state, uint32_t *n_tools);

    /* ---- ABI 1.4 ---- */

    /* Resources and prompts (static, like `tools`; a host older than 1.4
     * does not see them).  Prompt names and resource URIs are unique
     * across the host, as tool names are (the host refuses a plugin that
     * repeats another's).  A toolset offers those of the plugins it has a
     * tool of (every plugin's for tools: ["*"]).  Under isolation:
     * process the worker serves them, each request bounded by the
     * plugin's content_timeout (docs/isolation.md). */
    const toolhost_resource *resources;
    uint32_t n_resources;
    const toolhost_prompt *prompts;
    uint32_t n_prompts;
} toolhost_plugin;

/* The entry point every plugin exports, and nothing else.  Load.  Returns
 * the plugin's static descriptor; MUST NOT fail or have side effects. */
typedef const toolhost_plugin *(*toolhost_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* TOOLHOST_PLUGIN_H */
