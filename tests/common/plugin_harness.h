/* plugin_harness.h - a fake host for plugin tests: loads a built plugin
 * .so with the host's own loader (th_plugin_open, allow_insecure for test
 * folders; th_plugin_init with a config given as JSON, validated against
 * the plugin's config table), and runs a tool's execute() with a fake call
 * that captures stdout, stderr, meta and progress updates, and can be
 * cancelled after the Nth progress update.
 *
 * The fake call is a th_call_base with its own th_call_vtbl (th/tool.h);
 * the host API is the loader's th_host_api_fill() table, so callbacks
 * dispatch exactly as in the host.  Arguments go through th_validate_call()
 * (the host's one validation: types, required keys, defaults filled in,
 * then the tool's validate_args()) before execute().
 *
 * For tests only: helpers abort on out-of-memory.  A call runs on the test
 * thread; a tool that suspends may complete from its own thread
 * (th_harness_run waits for complete()).
 */
#ifndef TH_PLUGIN_HARNESS_H
#define TH_PLUGIN_HARNESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/buf.h"
#include "th/tool.h"
#include "toolhost/plugin.h"

typedef struct th_harness th_harness;

/* Loads `so_path` (e.g. th_test_build_path("plugins/fs.so")), checks the
 * ABI and tables, and calls init() with `config_json` (a JSON object; NULL for
 * no config) converted to msgpack.  Returns NULL and writes a message into
 * err on failure (the loader's message: dlopen, entry symbol, ABI, a bad
 * config block, init() failing with the plugin's message). */
th_harness *th_harness_load(const char *so_path, const char *config_json,
                            char *err, size_t err_size);
/* The same, with adjust(api) run on the host api before init() (e.g. to
 * play an older host: a smaller struct_size and abi_minor). */
th_harness *th_harness_load_with(const char *so_path, const char *config_json,
                                 void (*adjust)(toolhost_host_api *api),
                                 char *err, size_t err_size);
/* The same for a descriptor linked into the test program (no dlopen). */
th_harness *th_harness_load_desc(const toolhost_plugin *desc,
                                 const char *config_json, char *err,
                                 size_t err_size);
/* Calls fini() (when init() succeeded), dlclose()s and frees.  NULL ok. */
void th_harness_unload(th_harness *h);

const toolhost_plugin *th_harness_plugin(const th_harness *h);
/* The tool of that name, or NULL. */
const toolhost_tool *th_harness_tool(const th_harness *h, const char *name);

/* One captured progress update. */
typedef struct th_harness_progress {
    double fraction;
    char message[128]; /* "" when NULL */
} th_harness_progress;

#define TH_HARNESS_MAX_PROGRESS 64

/* A fake call: the tool's view is `base.pub`. */
typedef struct th_harness_call {
    th_call_base base;
    th_buf out;                /* stdout as written */
    th_buf err;                /* stderr as written */
    uint8_t *meta;             /* the last set_meta() map, malloc()ed */
    size_t meta_len;
    int n_meta;                /* set_meta() calls */
    th_harness_progress progress[TH_HARNESS_MAX_PROGRESS];
    int n_progress;            /* every update, even past the array */
    int cancel_after_progress; /* > 0: cancel when update N arrives */
    atomic_int cancelled;
    int writes_after_cancel;   /* writes made once cancelled (captured
                                  anyway, answered TOOLHOST_ECANCELLED) */
    char verr[1024];           /* validation message for TH_EARGS */
    /* suspend / complete */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool suspended, completed;
    int status;
} th_harness_call;

/* Runs `tool` with arguments `args_json` (a JSON object, NULL for {}).
 * `cancel_after_progress` > 0 cancels the call when that many progress
 * updates arrived; < 0 cancels it before execute().  Returns the tool's
 * status (TOOLHOST_OK, TOOLHOST_FAILED; a suspended call's status from
 * complete()), TH_EARGS with c->verr when the arguments do not validate,
 * TH_EUNKNOWN_TOOL, or TH_EINVAL for bad JSON.  Free with
 * th_harness_call_free() in every case. */
int th_harness_run(th_harness *h, const char *tool, const char *args_json,
                   int cancel_after_progress, th_harness_call *c);
/* The same with msgpack arguments. */
int th_harness_run_mp(th_harness *h, const char *tool, const uint8_t *args,
                      size_t len, int cancel_after_progress,
                      th_harness_call *c);
void th_harness_call_free(th_harness_call *c);

/* The captured stdout / stderr as text ("" when nothing was written). */
const char *th_harness_out(const th_harness_call *c);
const char *th_harness_err(const th_harness_call *c);

/* Reads a key of the captured meta map: 0, or -1 when absent or of another
 * type.  The string is copied NUL-terminated into buf. */
int th_harness_meta_int(const th_harness_call *c, const char *key,
                        int64_t *v);
int th_harness_meta_bool(const th_harness_call *c, const char *key, bool *v);
int th_harness_meta_str(const th_harness_call *c, const char *key, char *buf,
                        size_t size);

/* The state init() stored (for plugins whose tests look inside it). */
void *th_harness_state(const th_harness *h);
/* The host API init() got (what a test's own fake call must carry). */
const toolhost_host_api *th_harness_api(const th_harness *h);
/* How many tools the host registered: the static ones, then those of
 * init_tools() (ABI 1.1). */
size_t th_harness_n_tools(const th_harness *h);

/* JSON text to msgpack (test helper for building arguments).  Appends to
 * out; 0 or -1 when the JSON does not parse. */
int th_harness_json_to_mp(const char *json, th_buf *out);

#endif

/* A sandbox for the root-confined plugins, under a new temporary folder T
 * (returned, malloc()ed; remove with th_test_rmtree()); *root is T/root
 * (malloc()ed):
 *   T/root/a.txt            "l1\n" .. "l5\n", mode 0644, mtime 2001-09-09
 *                           01:46:40 UTC (1000000000)
 *   T/root/sub/b.c          "int main(void) { return 0; }\n"
 *   T/root/sub/c.h          "#define TODO 1\n"
 *   T/root/sub/bin.dat      "needle\0binary\n" (a binary file)
 *   T/root/link_in          -> a.txt            (stays inside)
 *   T/root/link_out         -> ../outside/secret.txt
 *   T/root/link_dir_out     -> ../outside
 *   T/outside/secret.txt    "SECRET needle\n"
 */
char *th_harness_sandbox(char **root);
