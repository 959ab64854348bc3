/* exec.c - the exec plugin: command tools declared in the config block
 * (docs/ops.md, "The exec plugin").  Each declaration names a program and
 * an argv template; arguments reach the program as whole argv elements or
 * environment variables, never through a shell.
 *
 * The descriptor has no static tools: they come from the config, in init()
 * (exec_config.c), reach the host through init_tools() (ABI 1.1) and run
 * in exec_run.c. */
#include <stdio.h>
#include <stdlib.h>

#include "exec.h"
#include "toolhost/sdk.h"

static const toolhost_param exec_config[] = {
    TH_SDK_PARAM("tools", ARRAY,
                 "The command tools: a list of declarations (name, "
                 "description, params, argv, env, env_allow, cwd, timeout, "
                 "stdout, stderr, read_only, destructive, idempotent, "
                 "open_world, serial)",
                 TH_SDK_DEFAULT("[]"), TH_SDK_ITEMS(OBJECT)),
    TH_SDK_PARAM("kill_grace", STRING,
                 "Wait this long after SIGTERM before SIGKILL when a call is "
                 "cancelled or times out (0 to 60s)",
                 .default_json = "\"2s\""),
    TH_SDK_PARAM("path", STRING,
                 "PATH given to every command (the child's environment is "
                 "otherwise empty but for env_allow and env)",
                 .default_json = "\"/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                                 "/usr/bin:/sbin:/bin\""),
};

static int exec_init(const toolhost_host_api *host, const uint8_t *config,
                     size_t config_len, void **state, char *err,
                     size_t err_size)
{
    exec_state *st = calloc(1, sizeof *st);
    if (!st) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    st->host = host;
    if (exec_config_parse(st, config, config_len, err, err_size) != 0) {
        exec_state_free(st);
        return -1;
    }
    th_sdk_log(host, TOOLHOST_LOG_INFO, "%u command tool%s declared",
               st->n_tools, st->n_tools == 1 ? "" : "s");
    *state = st;
    return 0;
}

/* ABI 1.1: the declared tools, built once by init(); they stay as they are
 * until fini(). */
static const toolhost_tool *exec_init_tools(void *state, uint32_t *n_tools)
{
    const exec_state *st = state;
    *n_tools = st->n_tools;
    return st->tools;
}

static void exec_fini(void *state)
{
    exec_state_free(state);
}

/* No static tools: an empty table (the macro needs an array). */
static const toolhost_tool exec_no_tools[1];

TOOLHOST_EXPORT const toolhost_plugin *toolhost_plugin_v1(void);
TOOLHOST_EXPORT const toolhost_plugin *toolhost_plugin_v1(void)
{
    static const toolhost_plugin descriptor = {
        .struct_size = sizeof(toolhost_plugin),
        .abi_major = TOOLHOST_ABI_MAJOR,
        .abi_minor = TOOLHOST_ABI_MINOR,
        .name = "exec",
        .version = "0.1.0",
        .description = "Command tools declared in the config: argv templates, "
                       "no shell, a clean environment, timeouts",
        TH_SDK_CONFIG(exec_config),
        .init = exec_init,
        .fini = exec_fini,
        .tools = exec_no_tools,
        .n_tools = 0,
        .init_tools = exec_init_tools,
    };
    return &descriptor;
}
