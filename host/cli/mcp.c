/* mcp.c - `toolhost mcp`: the host as an MCP server on stdio, for the
 * `command` of an MCP client's config (docs/mcp.md). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../mcp/mcp.h"
#include "cli.h"
#include "th/code.h"
#include "th/log.h"

static const char mcp_usage[] =
    "usage: toolhost mcp -c FILE [--toolset NAME] [--log-level LEVEL]\n"
    "\n"
    "Loads the config's plugins and speaks MCP (Model Context Protocol,\n"
    "versions 2025-11-25, 2025-06-18 and 2025-03-26) on stdin/stdout:\n"
    "newline-delimited JSON-RPC, one session for the user running it\n"
    "(matched against the toolsets' allow_users/allow_groups). Nothing but\n"
    "MCP goes to stdout; logs (and anything a plugin prints) go to stderr.\n"
    "End of input, SIGTERM or SIGINT stops it: calls in flight get\n"
    "host.shutdown_grace, the rest are cancelled, and it exits 0.\n"
    "Use it as the `command` of an MCP client (docs/mcp.md).\n"
    "\n"
    "Options:\n"
    "  -c, --config FILE      the config to serve\n"
    "  -t, --toolset NAME     offer only this toolset (one the user may use)\n"
    "      --log-level LEVEL  error, warn, info or debug (overrides\n"
    "                         host.log_level)\n"
    "  -h, --help             this help\n";

int cli_mcp(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"toolset", required_argument, NULL, 't'},
        {"log-level", required_argument, NULL, 'L'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *config = NULL, *toolset = NULL;
    int level = -1, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 't':
            toolset = optarg;
            break;
        case 'L':
            if ((level = cli_log_level_arg(optarg)) < 0)
                return CLI_USAGE;
            break;
        case 'h':
            fputs(mcp_usage, stdout);
            return CLI_OK;
        default:
            fputs(mcp_usage, stderr);
            return CLI_USAGE;
        }
    }
    if (optind != argc || !config) {
        cli_error(!config ? "mcp: no config given (use -c FILE)"
                          : "mcp: unexpected argument");
        fputs(mcp_usage, stderr);
        return CLI_USAGE;
    }
    /* The protocol gets a private copy of stdout; fd 1 becomes stderr, so
     * a stray printf (of a plugin) cannot corrupt the stream. */
    fflush(stdout);
    int out = fcntl(1, F_DUPFD_CLOEXEC, 3);
    if (out < 0 || dup2(2, 1) < 0) {
        cli_error("mcp: cannot set up stdout: %s", strerror(errno));
        return CLI_FAILED;
    }
    th_error err;
    th_error_clear(&err);
    th_config *cfg = NULL;
    if (th_config_load(config, &cfg, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        close(out);
        return CLI_USAGE;
    }
    th_log_set_level(level >= 0 ? level : cfg->host.log_level);
    th_host *h = NULL;
    if (th_host_open(cfg, &h, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        close(out);
        return CLI_USAGE;
    }
    if (th_code_attach(h, &err) != 0) { /* run_code, where enabled */
        fprintf(stderr, "%s\n", err.msg);
        th_host_close(h);
        close(out);
        return CLI_USAGE;
    }
    th_principal who = {.uid = (uint32_t)getuid(),
                        .gid = (uint32_t)getgid(),
                        .trusted = false};
    th_mcp_opts o = {.toolset = toolset};
    int rc = th_mcp_stdio_run(h, &who, &o, 0, out, &err);
    /* While the host closes, a signal means "now". */
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    th_host_close(h);
    close(out);
    if (rc != 0) {
        cli_error("mcp: %s", err.msg);
        return rc == TH_ENOTFOUND || rc == TH_EPERM ? CLI_USAGE : CLI_FAILED;
    }
    return CLI_OK;
}
