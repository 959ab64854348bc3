/* call.c - `toolhost call` and `toolhost list`: in-process through the
 * same call path the server uses (th_call_sync -> manager), or on a
 * running host with --connect. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "th/json.h"

static const char call_usage[] =
    "usage: toolhost call -c FILE TOOL [key=value ...] [--json '{...}'] [options]\n"
    "       toolhost call ./PLUGIN.so TOOL [key=value ...] [options]\n"
    "       toolhost call --connect [unix:PATH] TOOL [key=value ...] [options]\n"
    "\n"
    "Calls TOOL and prints its stdout to stdout and its stderr to stderr.\n"
    "Into a pipe or file the output is the tool's bytes, unchanged; on a\n"
    "terminal a final newline is added when the output lacks one.\n"
    "Values are typed by the tool's parameters (integer, number, boolean;\n"
    "arrays and objects as JSON); key=@FILE reads a string from FILE and\n"
    "key=@@text passes \"@text\". An async tool shows its progress; Ctrl-C\n"
    "cancels the call.\n"
    "\n"
    "Options:\n"
    "  -c, --config FILE     run the tool in-process with this config (a\n"
    "                        .so file: that plugin alone, config defaults)\n"
    CLI_REMOTE_HELP
    "      --json OBJECT     arguments as a JSON object (key=value adds to it)\n"
    "      --meta            print the result's meta (JSON) on stderr\n"
    "      --output-info     describe both output streams in meta (sizes,\n"
    "                        lines) even when nothing was cut (with -c)\n"
    "      --timeout TIME    deadline for the call (500ms, 30s, 2m)\n"
    "  -y, --yes             answer yes when the policy asks for permission\n"
    "  -h, --help            this help\n"
    "\n"
    "With -c the tool runs on a worker thread: --timeout and Ctrl-C (or\n"
    "SIGTERM) end the command on time even when the tool ignores them; a\n"
    "second signal exits at once.\n"
    "\n"
    "Exit status: 0 the tool succeeded, 1 it failed (or timed out, was\n"
    "denied, ...), 2 usage or argument error, 130 cancelled with Ctrl-C\n"
    "(SIGINT), 143 cancelled with SIGTERM.\n";

typedef struct call_ctx {
    bool yes;
    th_session *session; /* set once the session is open */
} call_ctx;

static int tool_param_type(void *ud, const char *name)
{
    const th_tool *t = ud;
    for (size_t i = 0; t && i < t->n_params; i++)
        if (strcmp(t->params[i].name, name) == 0)
            return (int)t->params[i].type;
    return 0;
}

static void on_progress(const th_event *ev, void *ud)
{
    (void)ud;
    if (ev->kind == TH_EV_PROGRESS)
        cli_show_progress(ev->fraction, ev->message, ev->coalesced);
}

/* Asks on the terminal (or takes --yes); with neither, denies. */
static int ask_permission(void *ud, uint64_t call_id, const char *tool,
                          const uint8_t *args, size_t args_len,
                          const char *reason)
{
    (void)args;
    (void)args_len;
    call_ctx *cc = ud;
    bool allow = cc->yes;
    if (!allow && !isatty(STDIN_FILENO))
        return -1; /* nobody to ask: the policy denies */
    if (!allow)
        allow = cli_ask_terminal(tool, reason);
    return th_permission_answer(cc->session, call_id, allow);
}


/* How long `toolhost call -c` waits for the host to close after a call
 * that timed out or was cancelled: its tool may still be running,
 * ignoring cancellation, and the host would wait for it (shutdown_grace,
 * lost_worker_grace); the command ends anyway, within the caller's budget,
 * with the call's exit status. */
#define CLOSE_WAIT_MS 200

typedef struct closer {
    cli_host *ch;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} closer;

static void *close_main(void *arg)
{
    closer *k = arg;
    cli_host_close(k->ch);
    pthread_mutex_lock(&k->mu);
    k->done = true;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

/* Closes the host, waiting at most CLOSE_WAIT_MS (or not at all when the
 * helper thread cannot start); a close still running then ends with the
 * process: exits with `rc` at once (stdio flushed).  Returns otherwise. */
static void close_bounded(cli_host *ch, int rc)
{
    closer k = {.ch = ch, .done = false};
    pthread_mutex_init(&k.mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_t th;
    bool done = false;
    if (pthread_create(&th, NULL, close_main, &k) == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (long)(CLOSE_WAIT_MS % 1000) * 1000000L;
        ts.tv_sec += CLOSE_WAIT_MS / 1000 + ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_mutex_lock(&k.mu);
        while (!k.done &&
               pthread_cond_timedwait(&k.cv, &k.mu, &ts) != ETIMEDOUT)
            ;
        done = k.done;
        pthread_mutex_unlock(&k.mu);
        if (done)
            pthread_join(th, NULL);
    }
    if (!done) {
        /* a tool that ignores cancellation holds the host: the kernel
         * frees the rest */
        fflush(NULL);
        _exit(rc);
    }
    pthread_mutex_destroy(&k.mu);
    pthread_cond_destroy(&k.cv);
}

int cli_call(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        CLI_REMOTE_OPTIONS,
        {"json", required_argument, NULL, 'j'},
        {"meta", no_argument, NULL, 'm'},
        {"output-info", no_argument, NULL, 'O'},
        {"timeout", required_argument, NULL, 't'},
        {"yes", no_argument, NULL, 'y'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *config = NULL, *json_text = NULL;
    cli_remote remote;
    memset(&remote, 0, sizeof remote);
    bool show_meta = false, output_info = false;
    uint64_t timeout_ms = 0;
    call_ctx cc = {.yes = false};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:yh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 'C':
        case 'U':
        case 'A':
            if (cli_remote_opt(&remote, c, argc, argv) != CLI_OK)
                return CLI_USAGE;
            break;
        case 'j':
            json_text = optarg;
            break;
        case 'm':
            show_meta = true;
            break;
        case 'O':
            output_info = true;
            break;
        case 't':
            if (th_parse_duration_ms(optarg, &timeout_ms) != 0) {
                cli_error("--timeout: '%s' is not a duration (500ms, 30s, 2m)",
                          optarg);
                return CLI_USAGE;
            }
            break;
        case 'y':
            cc.yes = true;
            break;
        case 'h':
            fputs(call_usage, stdout);
            return CLI_OK;
        default:
            fputs(call_usage, stderr);
            return CLI_USAGE;
        }
    }
    if (optind >= argc) {
        cli_error("call: which tool? (toolhost list -c FILE shows them)");
        fputs(call_usage, stderr);
        return CLI_USAGE;
    }
    /* toolhost call ./x.so TOOL ...: the plugin alone, config defaults. */
    if (!config && !remote.connect && cli_is_plugin_path(argv[optind])) {
        if (optind + 1 >= argc) {
            cli_error("call: which tool of %s? (toolhost list %s shows "
                      "them)", argv[optind], argv[optind]);
            fputs(call_usage, stderr);
            return CLI_USAGE;
        }
        config = argv[optind++];
    }
    if (!config == !remote.connect) {
        cli_error("call: give exactly one of -c FILE and --connect [ADDR]");
        return CLI_USAGE;
    }
    if (cli_remote_check(&remote, "call") != CLI_OK)
        return CLI_USAGE;
    const char *tool = argv[optind];
    char **kv = argv + optind + 1;
    int n_kv = argc - optind - 1;

    if (remote.connect && output_info) {
        cli_error("call: --output-info works with -c (over RPC, send the "
                  "tools.call option output_info)");
        return CLI_USAGE;
    }
    if (remote.connect)
        return cli_call_remote(&remote, tool, kv, n_kv, json_text,
                               (int64_t)timeout_ms, show_meta, cc.yes);

    th_front_ops ops = {.ask_permission = ask_permission,
                        .front = TOOLHOST_FRONT_CLI};
    cli_host ch;
    int rc = cli_host_open(config, &ops, &cc, &ch);
    if (rc != CLI_OK)
        return rc;
    cc.session = ch.session;
    const th_tool *t = th_session_acquire(ch.session, tool);
    json_t *args = cli_build_args(kv, n_kv, json_text, tool_param_type,
                                  (void *)t);
    if (t)
        th_tool_release(t);
    if (!args) {
        cli_host_close(&ch);
        return CLI_USAGE;
    }
    th_buf mp = TH_BUF_INIT;
    if (th_json_to_msgpack(args, &mp) != 0) {
        cli_error("out of memory");
        json_decref(args);
        th_buf_destroy(&mp);
        cli_host_close(&ch);
        return CLI_FAILED;
    }
    json_decref(args);

    cli_catch_sigint();
    /* keep_thread: the tool runs on a worker, so that this thread sees
     * the deadline and the signals even while the tool hangs */
    th_call_opts copts = {.timeout_ms = (int64_t)timeout_ms,
                          .keep_thread = true, .output_info = output_info};
    th_result_copy res;
    memset(&res, 0, sizeof res);
    rc = th_call_sync(ch.session, tool, mp.data, mp.len, &copts, on_progress,
                      NULL, &cli_interrupted, &res);
    cli_progress_end();
    th_buf_destroy(&mp);
    if (rc != 0) {
        cli_error("call failed: %s", th_strerror(rc));
        cli_host_close(&ch);
        return CLI_FAILED;
    }
    rc = cli_print_result(&res, show_meta, tool);
    bool ended = res.kind == TH_RESULT_ERROR &&
                 (res.error == TH_ECANCELLED || res.error == TH_ETIMEOUT);
    if (res.kind == TH_RESULT_ERROR && res.error == TH_ECANCELLED &&
        cli_interrupted)
        fprintf(stderr, "%s: cancelled\n", tool);
    th_result_copy_destroy(&res);
    if (ended)
        close_bounded(&ch, rc); /* its tool may still run */
    else
        cli_host_close(&ch);
    return rc;
}
