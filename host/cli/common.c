/* common.c - pieces every toolhost subcommand shares: errors, opening a
 * host from a config, typing key=value arguments, printing results and
 * progress, Ctrl-C. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "th/code.h"
#include "th/json.h"
#include "th/log.h"

volatile sig_atomic_t cli_interrupted;

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("toolhost: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_log_level_arg(const char *arg)
{
    int level = th_log_level_from_name(arg);
    if (level < 0)
        cli_error("--log-level: '%s' is not error, warn, info or debug", arg);
    return level;
}

bool cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return true;
    }
    return false;
}

bool cli_is_plugin_path(const char *p)
{
    size_t n = p ? strlen(p) : 0;
    return n > 3 && strcmp(p + n - 3, ".so") == 0;
}

/* The config of one plugin file, for `toolhost call ./x.so TOOL`: the
 * plugin with its config defaults, one toolset with all its tools, and
 * permissions asked as with the default config (-y answers yes). */
static int so_config(const char *so, th_config **cfg, th_error *err)
{
    const char *base = strrchr(so, '/');
    base = base ? base + 1 : so;
    char name[65];
    size_t n = 0;
    for (const char *c = base; *c && n < sizeof name - 1; c++) {
        if (strcmp(c, ".so") == 0)
            break;
        bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '_' || *c == '-';
        name[n++] = ok ? *c : '_';
    }
    name[n] = '\0';
    if (!n)
        snprintf(name, sizeof name, "plugin");
    th_buf y = TH_BUF_INIT;
    int rc = th_buf_printf(&y, "plugins:\n  - name: \"%s\"\n    path: \"",
                           name);
    for (const char *c = so; *c && !rc; c++) {
        if (*c == '"' || *c == '\\')
            rc |= th_buf_printf(&y, "\\%c", *c);
        else
            rc |= th_buf_printf(&y, "%c", *c);
    }
    rc |= th_buf_puts(&y, "\"\ntoolsets:\n  - name: default\n"
                          "    tools: [\"*\"]\n"
                          "    permissions:\n      default: ask\n");
    if (rc) {
        th_buf_destroy(&y);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    rc = th_config_parse(so, NULL, (const char *)y.data, y.len, cfg, err);
    th_buf_destroy(&y);
    return rc;
}

int cli_host_open(const char *config, const th_front_ops *ops, void *ud,
                  cli_host *out)
{
    memset(out, 0, sizeof *out);
    if (!config) {
        cli_error("no config given (use -c FILE)");
        return CLI_USAGE;
    }
    /* The in-process CLI keeps its stderr for the tool's own output:
     * only warnings and errors from the host. */
    if (th_log_get_level() > TOOLHOST_LOG_WARN)
        th_log_set_level(TOOLHOST_LOG_WARN);
    th_error err;
    th_error_clear(&err);
    th_config *cfg = NULL;
    if ((cli_is_plugin_path(config) ? so_config(config, &cfg, &err)
                                    : th_config_load(config, &cfg, &err)) !=
        0) {
        fprintf(stderr, "%s\n", err.msg);
        return CLI_USAGE;
    }
    /* th_host_open() applies the config's log_level: a chatty one (dev
     * configs say debug) would print the host's lines around the tool's
     * output. */
    if (cfg->host.log_level > TOOLHOST_LOG_WARN)
        cfg->host.log_level = TOOLHOST_LOG_WARN;
    if (th_host_open(cfg, &out->host, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return CLI_USAGE;
    }
    if (th_code_attach(out->host, &err) != 0) { /* run_code, where enabled */
        fprintf(stderr, "%s\n", err.msg);
        th_host_close(out->host);
        out->host = NULL;
        return CLI_FAILED;
    }
    th_principal who = {.uid = (uint32_t)getuid(),
                        .gid = (uint32_t)getgid(),
                        .trusted = true};
    out->session = th_session_open(out->host, &who, ops, ud);
    if (!out->session) {
        cli_error("cannot open a session: out of memory");
        th_host_close(out->host);
        out->host = NULL;
        return CLI_FAILED;
    }
    return CLI_OK;
}

void cli_host_close(cli_host *ch)
{
    if (ch->session)
        th_session_close(ch->session);
    if (ch->host)
        th_host_close(ch->host);
    ch->session = NULL;
    ch->host = NULL;
}

json_t *cli_build_args(char **kv, int n_kv, const char *json_text,
                       cli_param_type_fn type_of, void *ud)
{
    th_error err;
    th_error_clear(&err);
    json_t *args = th_kv_args(kv, n_kv, json_text, type_of, ud, &err);
    if (!args)
        cli_error("%s", err.msg);
    return args;
}

static void print_meta(const th_result_copy *r)
{
    if (!r->meta.len) {
        fprintf(stderr, "meta: {}\n");
        return;
    }
    th_error err;
    /* lossy: tool meta may hold any bytes; this only prints it */
    json_t *j = th_json_from_msgpack_lossy(r->meta.data, r->meta.len, &err);
    if (!j) {
        fprintf(stderr, "meta: (not printable: %s)\n", err.msg);
        return;
    }
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    fprintf(stderr, "meta: %s\n", s ? s : "?");
    free(s);
    json_decref(j);
}

int cli_print_result(const th_result_copy *r, bool show_meta,
                     const char *tool)
{
    switch (r->kind) {
    case TH_RESULT_DONE:
        if (r->out.len)
            fwrite(r->out.data, 1, r->out.len, stdout);
        if (r->out.len && r->out.data[r->out.len - 1] != '\n' &&
            isatty(STDOUT_FILENO))
            fputc('\n', stdout);
        fflush(stdout);
        if (r->err.len)
            fwrite(r->err.data, 1, r->err.len, stderr);
        else if (!r->ok) /* e.g. its message could not be stored: out of
                            memory */
            fprintf(stderr, "%s: the tool failed without a message\n", tool);
        if (show_meta)
            print_meta(r);
        return r->ok ? CLI_OK : CLI_FAILED;
    case TH_RESULT_ERROR:
        fprintf(stderr, "%s: %s (%s", tool,
                r->message ? r->message : th_strerror(r->error),
                th_err_name(r->error));
        if (r->retry_after_ms) /* a backend's or the rate limits' hint */
            fprintf(stderr, "; retry after %llu ms",
                    (unsigned long long)r->retry_after_ms);
        fputs(")\n", stderr);
        if (r->error == TH_EARGS || r->error == TH_EUNKNOWN_TOOL)
            return CLI_USAGE;
        if (r->error == TH_ECANCELLED && cli_interrupted)
            return 128 + cli_interrupted; /* 130 SIGINT, 143 SIGTERM */
        return CLI_FAILED;
    case TH_RESULT_RUNNING:
        fprintf(stderr, "%s: task %llu is running: %s\n", tool,
                (unsigned long long)r->task_id,
                r->message ? r->message : "");
        return CLI_OK;
    }
    return CLI_FAILED;
}

static bool progress_live;

void cli_show_progress(double fraction, const char *message,
                       unsigned coalesced)
{
    const char *msg = message ? message : "";
    if (isatty(STDERR_FILENO)) {
        char bar[21];
        int filled = fraction >= 0 ? (int)(fraction * 20 + 0.5) : 0;
        if (filled > 20)
            filled = 20;
        for (int i = 0; i < 20; i++)
            bar[i] = i < filled ? '#' : (fraction >= 0 ? '.' : ' ');
        bar[20] = '\0';
        if (fraction >= 0)
            fprintf(stderr, "\r\033[K[%s] %3d%% %s", bar,
                    (int)(fraction * 100 + 0.5), msg);
        else
            fprintf(stderr, "\r\033[K[working] %s", msg);
        progress_live = true;
    } else {
        if (fraction >= 0)
            fprintf(stderr, "progress: %d%% %s", (int)(fraction * 100 + 0.5),
                    msg);
        else
            fprintf(stderr, "progress: %s", msg);
        if (coalesced)
            fprintf(stderr, " (+%u earlier updates folded in)", coalesced);
        fputc('\n', stderr);
    }
    fflush(stderr);
}

void cli_progress_end(void)
{
    if (progress_live) {
        fputs("\r\033[K", stderr);
        progress_live = false;
    }
}

/* The first SIGINT or SIGTERM asks the call to end (cancel); a second
 * one ends the process at once, whatever a tool is doing (a fixed line,
 * then _exit: async-signal-safe). */
static void on_sigint(int sig)
{
    if (cli_interrupted) {
        static const char msg[] =
            "toolhost: second signal: exiting now, without waiting for the "
            "call\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(128 + sig);
    }
    cli_interrupted = sig;
}

void cli_catch_sigint(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

bool cli_ask_terminal(const char *tool, const char *reason)
{
    if (!isatty(STDIN_FILENO) || !isatty(STDERR_FILENO))
        return false;
    cli_progress_end();
    fprintf(stderr, "Allow %s? %s [y/N] ", tool, reason ? reason : "");
    fflush(stderr);
    char line[32];
    if (!fgets(line, sizeof line, stdin))
        return false;
    return line[0] == 'y' || line[0] == 'Y';
}
