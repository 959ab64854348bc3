/* cli.h - shared pieces of the toolhost command line. */
#ifndef TH_CLI_H
#define TH_CLI_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

#include "th/host.h"
#include "th/kvargs.h"
#include "front/rpc.h"

/* Exit statuses, the same for every subcommand. */
#define CLI_OK 0
#define CLI_FAILED 1    /* the tool (or the check) reported failure */
#define CLI_USAGE 2     /* bad command line, bad arguments, bad config */
#define CLI_CANCELLED 130

/* One subcommand: name, one-line summary, entry point. */
typedef struct cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} cli_command;

int cli_serve(int argc, char **argv);
int cli_list(int argc, char **argv);
int cli_describe(int argc, char **argv);
int cli_call(int argc, char **argv);
int cli_check(int argc, char **argv);
int cli_config(int argc, char **argv);
int cli_export(int argc, char **argv);
int cli_new(int argc, char **argv);
int cli_reload(int argc, char **argv);
/* toolhost disable | enable (argv[0]): host.disable/enable/disabled. */
int cli_disable(int argc, char **argv);
int cli_mcp(int argc, char **argv);

/* Prints "toolhost: <message>" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The log level named by a --log-level argument, or -1 after printing
 * why it is not one. */
int cli_log_level_arg(const char *arg);

/* True when argv holds -h or --help (before a "--"). */
bool cli_wants_help(int argc, char **argv);

/* Loads a config and opens a host with a trusted in-process session.
 * Prints the error and returns CLI_USAGE on failure. */
typedef struct cli_host {
    th_host *host;
    th_session *session;
} cli_host;
int cli_host_open(const char *config, const th_front_ops *ops, void *ud,
                  cli_host *out);
/* A `config` that ends in ".so" is a plugin file: cli_host_open() runs it
 * alone with its config defaults (toolhost call ./x.so TOOL). */
bool cli_is_plugin_path(const char *p);
void cli_host_close(cli_host *ch);

/* The type a parameter expects, looked up by the caller: returns a
 * toolhost_type or 0 when unknown. */
typedef th_kv_type_fn cli_param_type_fn;

/* th_kv_args (th/kvargs.h: key=value typing, --json, key=@file) that
 * prints the reason to stderr.  Returns a new object or NULL after
 * printing the reason. */
json_t *cli_build_args(char **kv, int n_kv, const char *json_text,
                       cli_param_type_fn type_of, void *ud);

/* Prints a result the way `toolhost call` does; returns the exit status. */
int cli_print_result(const th_result_copy *r, bool show_meta,
                     const char *tool);

/* Progress display: a live line on a terminal, plain lines otherwise. */
void cli_show_progress(double fraction, const char *message,
                       unsigned coalesced);
void cli_progress_end(void);

/* --connect: the same commands against a running host (remote.c). */
typedef struct cli_remote {
    const char *connect;     /* NULL: in-process; "": the default address */
    th_rpc_client_opts peer; /* --server-uid, --any-server */
} cli_remote;

/* The getopt_long entries of --connect [ADDR], --server-uid UID and
 * --any-server, and their help lines. */
#define CLI_REMOTE_OPTIONS                                                   \
    {"connect", optional_argument, NULL, 'C'},                               \
        {"server-uid", required_argument, NULL, 'U'},                        \
        {"any-server", no_argument, NULL, 'A'}
#define CLI_REMOTE_HELP                                                      \
    "      --connect [ADDR]  a running host (unix:PATH; none: the default\n" \
    "                        socket of `toolhost serve`, see its --help)\n"  \
    "      --server-uid UID  accept a host run by UID (a number or a user\n" \
    "                        name); by default only root or your own uid\n" \
    "      --any-server      accept a host run by any user\n"

/* Handles the 'C', 'U' and 'A' options of getopt_long (the word after a
 * separate --connect is its ADDR when it has a ':' or starts with '/' or
 * '.', and no '=').  CLI_OK, or CLI_USAGE after saying why. */
int cli_remote_opt(cli_remote *r, int opt, int argc, char **argv);
/* After parsing: CLI_USAGE (said) when --server-uid/--any-server came
 * without --connect or together. */
int cli_remote_check(const cli_remote *r, const char *cmd);

int cli_call_remote(const cli_remote *r, const char *tool, char **kv,
                    int n_kv, const char *json_text, int64_t timeout_ms,
                    bool show_meta, bool yes);
int cli_list_remote(const cli_remote *r, bool json);
/* The same over NATS (remote_nats.c): --connect nats://HOST:PORT. */
bool cli_is_nats(const char *addr);
int cli_call_nats(const char *url, const char *tool, char **kv, int n_kv,
                  const char *json_text, int64_t timeout_ms, bool show_meta);
int cli_list_nats(const char *url, bool json);

/* Asks "Allow TOOL? REASON [y/N]" on the terminal; false when there is
 * none (with --yes the caller does not ask). */
bool cli_ask_terminal(const char *tool, const char *reason);

/* The signal number (SIGINT, SIGTERM) the handler that cli_catch_sigint()
 * installs caught first, 0: none; a second signal exits at once. */
extern volatile sig_atomic_t cli_interrupted;
void cli_catch_sigint(void);

/* `toolhost worker`: internal, started by the host for a plugin with
 * `isolation: process` (worker.c); not listed in the help. */
int cli_worker(int argc, char **argv);

#endif
