/* mcp.c - the mcp plugin: the tools of other MCP servers as toolhost
 * tools (docs/mcp-source.md).  The descriptor declares no static tools:
 * init() reads the config block (mcp_conf.c), starts every server and
 * lists its tools (mcp_server.c); init_tools() hands them to the host;
 * calls are forwarded in mcp_call.c. */
#include <stdio.h>
#include <stdlib.h>

#include "mcpsrc.h"
#include "toolhost/sdk.h"

static const toolhost_param mcp_config[] = {
    TH_SDK_PARAM("servers", ARRAY,
                 "The MCP servers to import tools from: a list of {name, "
                 "command, env, cwd, user | url, headers; prefix, timeout, "
                 "max_concurrency}",
                 TH_SDK_DEFAULT("[]"), TH_SDK_ITEMS(OBJECT)),
    TH_SDK_PARAM("restart_initial", STRING,
                 "Wait this long before restarting a server that exited "
                 "(doubled at each failure in a row)",
                 .default_json = "\"500ms\""),
    TH_SDK_PARAM("restart_max", STRING,
                 "The longest wait between two restarts of a server",
                 .default_json = "\"30s\""),
    TH_SDK_PARAM("start_timeout", STRING,
                 "A server must answer initialize and tools/list within this",
                 .default_json = "\"30s\""),
    TH_SDK_PARAM("write_timeout", STRING,
                 "A server that does not read its stdin for this long is "
                 "killed and restarted",
                 .default_json = "\"5s\""),
    TH_SDK_PARAM("max_message", INTEGER,
                 "The largest message (one line) a server may send, in "
                 "bytes; past it the server is killed and restarted",
                 .default_json = "16777216", TH_SDK_RANGE(4096, 1073741824)),
    TH_SDK_PARAM("path", STRING,
                 "PATH to find a command without a '/' in, and given to "
                 "every server",
                 .default_json = "\"/usr/local/bin:/usr/bin:/bin\""),
};

static int mcp_init(const toolhost_host_api *host, const uint8_t *config,
                    size_t config_len, void **state, char *err,
                    size_t err_size)
{
    mcp_state *st = calloc(1, sizeof *st);
    if (!st) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    st->host = host;
    if (mcpsrc_http_global(true) != 0) {
        snprintf(err, err_size, "libcurl could not be initialised");
        free(st);
        return -1;
    }
    if (mcpsrc_config(st, config, config_len, err, err_size) != 0 ||
        mcpsrc_servers_start(st, err, err_size) != 0 ||
        mcpsrc_build_tools(st, err, err_size) != 0) {
        mcpsrc_servers_stop(st);
        mcpsrc_state_free(st);
        mcpsrc_http_global(false);
        return -1;
    }
    th_sdk_log(host, TOOLHOST_LOG_INFO, "%u tool%s from %zu MCP server%s",
               st->n_tools, st->n_tools == 1 ? "" : "s", st->n_srv,
               st->n_srv == 1 ? "" : "s");
    *state = st;
    return 0;
}

static const toolhost_tool *mcp_init_tools(void *state, uint32_t *n_tools)
{
    const mcp_state *st = state;
    *n_tools = st->n_tools;
    return st->tools;
}

static void mcp_fini(void *state)
{
    mcpsrc_servers_stop(state);
    mcpsrc_state_free(state);
    mcpsrc_http_global(false);
}

static const toolhost_tool mcp_no_tools[1];

TOOLHOST_EXPORT const toolhost_plugin *toolhost_plugin_v1(void);
TOOLHOST_EXPORT const toolhost_plugin *toolhost_plugin_v1(void)
{
    static const toolhost_plugin descriptor = {
        .struct_size = sizeof(toolhost_plugin),
        .abi_major = TOOLHOST_ABI_MAJOR,
        .abi_minor = TOOLHOST_ABI_MINOR,
        .name = "mcp",
        .version = "0.1.0",
        .description = "The tools of other MCP servers (stdio commands or "
                       "Streamable HTTP), imported as toolhost tools",
        TH_SDK_CONFIG(mcp_config),
        .init = mcp_init,
        .fini = mcp_fini,
        .tools = mcp_no_tools,
        .n_tools = 0,
        .init_tools = mcp_init_tools,
        .requires_host_minor = 4,
    };
    return &descriptor;
}
