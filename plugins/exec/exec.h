/* exec.h - the state of the exec plugin, shared by its files (and read by
 * its unit test, which registers the declared tools in the fake host).
 *
 * The exec plugin declares its tools from its config block, in init();
 * `tools`/`n_tools` below are what its init_tools() (ABI 1.1) hands to the
 * host.  They are built once in init() and never change until fini(). */
#ifndef TH_PLUGIN_EXEC_H
#define TH_PLUGIN_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "toolhost/plugin.h"

/* One argv element or env value: a literal, or a whole "{param}". */
typedef struct exec_slot {
    char *text;  /* the literal (param < 0) */
    int param;   /* index into the tool's params, or -1 */
} exec_slot;

typedef struct exec_env {
    char *name;
    exec_slot value;
} exec_env;

typedef struct exec_tool {
    exec_slot *argv;     /* argv[0] is a literal absolute path */
    size_t argc;
    exec_env *env;       /* set from arguments or literals */
    size_t n_env;
    char **env_allow;    /* copied from the host's environment when set */
    size_t n_env_allow;
    char *cwd;           /* NULL: "/" */
    int64_t timeout_ms;  /* 0: only the call's deadline */
    int64_t grace_ms;    /* SIGTERM to SIGKILL */
    char **tags;         /* NULL-terminated, or NULL (toolhost_tool.tags) */
} exec_tool;

typedef struct exec_state {
    /* What init_tools() returns (see above); the first two members. */
    const toolhost_tool *tools;
    uint32_t n_tools;
    /* Private. */
    toolhost_tool *tools_rw;
    exec_tool *exec;     /* n_tools entries, user_data of each tool */
    toolhost_param **params; /* per tool */
    const toolhost_host_api *host;
    char *path_env;      /* "PATH=..." for every child */
    /* Which containment the last call had (EXEC_CONTAIN_*), to log each
     * change once; read and written with __atomic by concurrent calls. */
    int contain;
} exec_state;

#define EXEC_CONTAIN_CGROUP 1 /* the host's cage (ABI 1.3) and the keeper */
#define EXEC_CONTAIN_KEEPER 2 /* the keeper alone */

/* init()'s config parsing, in exec_config.c.  0, or nonzero with a message
 * in err naming the tool and the key. */
int exec_config_parse(exec_state *st, const uint8_t *config, size_t len,
                      char *err, size_t err_size);
void exec_state_free(exec_state *st);

/* Runs a declared tool, in exec_run.c. */
int exec_execute(void *state, const toolhost_tool *tool, toolhost_call *call,
                 const uint8_t *args, size_t args_len);
int exec_validate_args(void *state, const toolhost_tool *tool,
                       const uint8_t *args, size_t args_len, char *err,
                       size_t err_size);

#endif
