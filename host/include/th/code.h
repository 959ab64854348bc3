/* th/code.h - the sandboxed Lua 5.4 code runtime and the built-in run_code
 * tool.
 *
 * th_code_run() runs one script in a fresh lua_State: a sandbox holding the
 * base library without files or code loading from files, string (no dump),
 * table, math, utf8, coroutine, and os.time/os.clock/os.date; `tools.NAME`
 * for every projected tool; `print` to stdout and `stderr:write()` to
 * stderr.  Limits: memory (a counting allocator), a deadline (an
 * instruction-count hook, and the time left passed to every tool call, so
 * time spent inside tools counts), a maximum number of tool calls, and an
 * output limit per stream.  See docs/code-runtime.md.
 *
 * Threads: th_code_run() runs on the calling thread and blocks until the
 * script ends; runs on different threads are independent (each has its own
 * state).  The io callbacks are called on the calling thread, except
 * io->progress, which is called on whatever thread the tool caller reports
 * progress from.
 */
#ifndef TH_CODE_H
#define TH_CODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/buf.h"
#include "th/err.h"
#include "th/projection.h"
#include "toolhost/plugin.h"

/* The name of the built-in tool; never projected into a runtime. */
#define TH_CODE_TOOL_NAME "run_code"

/* The naming rules of Lua: '-' -> '_', a leading digit gets a '_' prefix;
 * identifiers [A-Za-z_][A-Za-z0-9_]* that are not Lua keywords. */
extern const th_proj_lang th_code_lua_lang;

struct th_tool;

/* th_projection_add() for a code runtime: skips run_code itself (no
 * recursion) and the task tools get_running_tasks / cancel_task (calls
 * from code wait for their tasks), returning 0 for them. */
int th_code_projection_add(th_projection *p, const struct th_tool *tool,
                           th_error *err);

typedef struct th_code_limits {
    int64_t timeout_ms;    /* <= 0: no deadline */
    uint64_t memory;       /* bytes of Lua heap; 0: no cap */
    uint32_t max_calls;    /* tool calls per run; 0: no limit */
    uint64_t output_limit; /* bytes kept per stream; 0: no limit */
} th_code_limits;

/* Where the script's output and progress go.  Every member may be NULL. */
typedef struct th_code_io {
    /* Receives stdout/stderr bytes (stream TOOLHOST_STDOUT or
     * TOOLHOST_STDERR), at most output_limit bytes per stream, then one
     * marker line saying how much was dropped.  NULL: the bytes are kept in
     * th_code_result.out / .err instead (same limit and marker).  A nonzero
     * return stops the script (as cancelled). */
    int (*write)(void *ud, int stream, const void *data, size_t len);
    /* Progress of a tool call made by the script; `tool` is the host tool
     * name.  Any thread (see the file banner). */
    void (*progress)(void *ud, const char *tool, double fraction,
                     const char *message, const uint8_t *data,
                     size_t data_len);
    /* Polled on the script's thread (every few thousand instructions and
     * around tool calls): nonzero cancels the run. */
    int (*is_cancelled)(void *ud);
    void *ud;
} th_code_io;

typedef struct th_code_result {
    int return_code;  /* 0: the script ran to its end; 1: it failed */
    char *error;      /* when return_code is 1: the message and a Lua
                         traceback ("code:3: boom\nstack traceback: ...");
                         malloc()ed */
    bool timed_out;   /* the deadline ended it */
    bool out_of_memory; /* the memory cap ended it */
    bool cancelled;   /* io->is_cancelled or io->write ended it */
    th_buf value;     /* the chunk's first returned value as msgpack, len 0
                         when it returned nothing (or nil) */
    th_buf out, err;  /* stdout / stderr when io->write is NULL */
    uint32_t calls;   /* tool calls made */
    uint64_t out_bytes, err_bytes; /* written by the script, all of it */
    bool value_too_large; /* the returned value passed its cap (the
                             output limit) once packed: refused */
} th_code_result;

void th_code_result_init(th_code_result *r);
void th_code_result_destroy(th_code_result *r);

/* Runs `code` (`len` bytes of Lua source; binary chunks are refused) with
 * the tools of `proj` (checked with th_projection_check() first; may be
 * NULL for no tools).  `io` and `lim` may be NULL.  *res must have been
 * initialised; it receives the outcome.  Returns 0 when the script ran
 * (whatever its outcome: see res->return_code), or a negative TH_E* code
 * when it could not be started (TH_EINVAL: the projection fails its check;
 * TH_ENOMEM), with a message in err. */
int th_code_run(const th_projection *proj, const char *code, size_t len,
                const th_code_limits *lim, const th_code_io *io,
                th_code_result *res, th_error *err);

/* ---- The built-in tool run_code ----------------------------------------- */

struct th_registry;
struct th_config;

/* The run_code plugin of one host: a host-owned copy of the static
 * "builtin-code" descriptor whose long_description lists the tools that
 * code may call (generated from the registry at creation). */
typedef struct th_code_builtin th_code_builtin;

/* Creates the descriptor for a host whose registry holds its plugins'
 * tools; `cfg` (the host's config) says which toolsets enable run_code and
 * which tools they hold.  Free with th_code_builtin_free() after the plugin
 * made from it (th_plugin_builtin) is gone. */
int th_code_builtin_new(struct th_registry *reg, const struct th_config *cfg,
                        th_code_builtin **out, th_error *err);
const toolhost_plugin *th_code_builtin_plugin(const th_code_builtin *b);
void th_code_builtin_free(th_code_builtin *b);

struct th_host;

/* Registers run_code in a host that was just opened (from the thread that
 * opened it, before sessions call tools), when at least one toolset enables
 * it (*out stays NULL otherwise, and 0 is returned): builds the descriptor
 * from the host's registry and config, and adds it with
 * th_host_add_builtin_ex() so that run_code belongs exactly to the toolsets
 * with run_code.enabled.  The caller frees *out with
 * th_code_builtin_free() after th_host_close(). */
int th_code_register(struct th_host *h, th_code_builtin **out,
                     th_error *err);

/* What a front that opens a host calls right after th_host_open() (the
 * CLI, the msgpack-RPC server, tests): th_code_register(), with the
 * descriptor freed at th_host_close() (th_host_at_close).  The core never
 * registers run_code itself: the code runtime is a front.  0 (also when no
 * toolset enables run_code), or a TH_E* code with err; on failure the host
 * is unchanged but for a no-op close hook. */
int th_code_attach(struct th_host *h, th_error *err);

/* The static descriptor (its run_code has a generic long description);
 * th_code_builtin_new() is the one to register. */
const toolhost_plugin *th_code_plugin_static(void);

#endif
