/* main.c - the toolhost command line: global options and subcommands. */
#include <errno.h>
#include "front/fronts.h"
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "th/log.h"

static const cli_command commands[] = {
    {"serve", "run the host: msgpack-RPC on a Unix socket or on stdio",
     cli_serve},
    {"list", "list the tools of a config or of a running host", cli_list},
    {"describe", "show a tool's detailed description and JSON Schema",
     cli_describe},
    {"call", "call a tool in-process or on a running host", cli_call},
    {"check", "lint a plugin .so without a config", cli_check},
    {"config", "config check FILE: validate a config and load its plugins",
     cli_config},
    {"export", "write the tools as function-calling JSON", cli_export},
    {"new", "create a plugin project from the template", cli_new},
    {"reload", "ask a running host to reload its plugins and config",
     cli_reload},
    {"disable", "take a tool out of service on a running host, with a "
     "reason", cli_disable},
    {"enable", "put a disabled tool back in service", cli_disable},
    {"mcp", "run the host as an MCP server on stdio", cli_mcp},
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: toolhost [--version] [--help] COMMAND [ARGS]\n"
            "\n"
            "Runs LLM tools shipped as shared objects.\n"
            "\n"
            "Commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f,
            "\n"
            "'toolhost help COMMAND' (or 'toolhost COMMAND --help') "
            "describes a command.\n"
            "--allow-unknown-users, with any command that loads a config: "
            "names in\n"
            "allow_users, allow_groups and admin that do not exist here are "
            "not errors.\n"
            "Exit status: 0 ok, 1 the tool or check failed, 2 usage or "
            "validation error.\n");
}

/* Started with fd 0, 1 or 2 closed, the host's first sockets would get
 * those numbers, and anything written to "stdout" or "stderr" would go to a
 * client: they are opened on /dev/null instead.  Then the log takes its
 * own descriptor (th_log_own_stderr). */
static void std_fds(void)
{
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
            continue;
        int n = open("/dev/null", O_RDWR); /* the lowest free: fd */
        if (n >= 0 && n != fd) {
            dup2(n, fd);
            close(n);
        }
    }
    (void)th_log_own_stderr();
}

/* --allow-unknown-users, accepted by every command that loads a config
 * (before a "--"): names in allow_users, allow_groups and admin that do
 * not exist on this system are not errors (host.allow_unknown_users for
 * one run, through TOOLHOST_ALLOW_UNKNOWN_USERS).  Removed from argv. */
static int take_allow_unknown_users(int argc, char **argv)
{
    int out = 1;
    bool rest = false;
    for (int i = 1; i < argc; i++) {
        if (!rest && strcmp(argv[i], "--") == 0)
            rest = true;
        if (!rest && strcmp(argv[i], "--allow-unknown-users") == 0) {
            setenv("TOOLHOST_ALLOW_UNKNOWN_USERS", "1", 1);
            continue;
        }
        argv[out++] = argv[i];
    }
    argv[out] = NULL;
    return out;
}

int main(int argc, char **argv)
{
    std_fds();
    th_fronts_register_builtin(); /* before any config is read */
    argc = take_allow_unknown_users(argc, argv);
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
        printf("toolhost %s (plugin ABI %d.%d)\n", TOOLHOST_VERSION,
               TOOLHOST_ABI_MAJOR, TOOLHOST_ABI_MINOR);
        return CLI_OK;
    }
    if (strcmp(argv[1], "help") == 0 && argc >= 3) {
        /* toolhost help CMD: the same as toolhost CMD --help */
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            if (strcmp(argv[2], commands[i].name) == 0) {
                char *help[] = {argv[2], "--help", NULL};
                return commands[i].run(2, help);
            }
        cli_error("help: unknown command '%s'", argv[2]);
        usage(stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(argv[1], "worker") == 0) /* internal: isolated plugins */
        return cli_worker(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    cli_error("unknown command '%s'", argv[1]);
    usage(stderr);
    return CLI_USAGE;
}
