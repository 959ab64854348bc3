/* serve.c - `toolhost serve`: the host behind msgpack-RPC on a Unix socket
 * or on stdio, until SIGTERM/SIGINT (or end of input on stdio). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "th/code.h"
#include "th/log.h"
#include "front/rpc.h"
#include "front/sockpath.h"
#include "front/rpc_config.h"
#include "front/sd.h"
#include "th/front.h"
#include "front/http.h"

/* ---- Signals ----------------------------------------------------------------
 * The server stops on the first SIGTERM/SIGINT (its own handlers: grace,
 * cancel, close).  Once it runs, ours sit in front of them: the first
 * signal goes on to the server's handler; a second one, or any while the
 * host closes after the server stopped (waiting for calls), logs a line
 * and exits at once with status 1 - tools that ignore cancellation never
 * keep an operator waiting. */
static struct sigaction srv_term, srv_int; /* the server's handlers */
static atomic_int n_signals;
static atomic_bool serving;
/* What the first stop signal starts beside the server's own shutdown
 * leaves from a thread (the signal handler only writes a byte to this
 * pipe; -1 when there is nothing to do): STOPPING=1 to the service
 * manager, and the fronts that can take no new calls from then on (NATS)
 * stop taking them (the server's grace is for the calls in flight, not
 * for new ones). */
static int stop_pipe[2] = {-1, -1};

/* ---- The fronts ------------------------------------------------------------
 * Every registered front with an open hook, opened in registration order
 * and closed in reverse; a failure closes those already open. */
static const th_front *open_front[TH_FRONTS_MAX];
static void *open_state[TH_FRONTS_MAX];
static size_t n_open;

static void fronts_close(void)
{
    while (n_open > 0) {
        n_open--;
        open_front[n_open]->close(open_state[n_open]);
    }
}

static int fronts_open(th_host *h, th_error *err)
{
    const th_front *f;
    for (size_t i = 0; (f = th_front_at(i)) != NULL; i++) {
        if (!f->open)
            continue;
        void *state = NULL;
        if (f->open(h, &state, err) != 0) {
            fronts_close();
            return err->code ? err->code : TH_EINTERNAL;
        }
        if (!state)
            continue; /* nothing of it in the config */
        open_front[n_open] = f;
        open_state[n_open++] = state;
    }
    return 0;
}

/* The first stop signal: the open fronts take no new calls. */
static void fronts_stop(void)
{
    for (size_t i = 0; i < n_open; i++)
        if (open_front[i]->stop)
            open_front[i]->stop(open_state[i]);
}

static bool fronts_stoppable(void)
{
    for (size_t i = 0; i < n_open; i++)
        if (open_front[i]->stop)
            return true;
    return false;
}

static void *stop_notifier(void *ud)
{
    (void)ud;
    char b;
    ssize_t n;
    do
        n = read(stop_pipe[0], &b, 1);
    while (n < 0 && errno == EINTR);
    if (n == 1) {
        fronts_stop();
        th_sd_stopping();
    }
    return NULL;
}

static void on_stop_signal(int sig, siginfo_t *si, void *ctx)
{
    int saved = errno;
    if (atomic_fetch_add(&n_signals, 1) == 0 && atomic_load(&serving)) {
        if (stop_pipe[1] >= 0 && write(stop_pipe[1], "s", 1) < 0)
            (void)0; /* best effort */
        const struct sigaction *a = sig == SIGINT ? &srv_int : &srv_term;
        if (a->sa_flags & SA_SIGINFO)
            a->sa_sigaction(sig, si, ctx);
        else if (a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN)
            a->sa_handler(sig);
        errno = saved;
        return;
    }
    th_log_raw(TOOLHOST_LOG_WARN,
               sig == SIGINT ? "shutdown: SIGINT while stopping: exiting now, "
                               "without waiting for running calls"
                             : "shutdown: SIGTERM while stopping: exiting now, "
                               "without waiting for running calls");
    _exit(CLI_FAILED);
}

static void stop_signals_ours(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_stop_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

/* The server is up with its handlers installed: put ours in front. */
static void on_server_ready(th_rpc_server *srv, void *ud)
{
    (void)srv;
    (void)ud;
    sigaction(SIGTERM, NULL, &srv_term);
    sigaction(SIGINT, NULL, &srv_int);
    atomic_store(&serving, true);
    stop_signals_ours();
    th_sd_ready(); /* every front is up */
}

static const char serve_usage[] =
    "usage: toolhost serve -c FILE [--listen unix:PATH | --stdio] "
    "[--log-level LEVEL]\n"
    "\n"
    "Loads the config's plugins and serves msgpack-RPC (see docs/protocol.md):\n"
    "on a Unix socket (--listen, or host.listen in the config; the socket\n"
    "file is created with mode 0600 unless host.socket_mode says otherwise)\n"
    "or on stdin/stdout (--stdio: one session; nothing but frames is written\n"
    "to stdout). Each connection is a session. SIGTERM or SIGINT stops\n"
    "accepting, lets calls finish within host.shutdown_grace, cancels the\n"
    "rest and exits 0; tools that ignore the cancel are abandoned after\n"
    "host.lost_worker_grace. A second signal exits at once (status 1).\n"
    "Logs go to stderr, one line per event.\n"
    "\n"
    "With no address the socket is, first match wins:\n"
    "  $XDG_RUNTIME_DIR/toolhost/toolhost.sock   (XDG_RUNTIME_DIR set)\n"
    "  /run/toolhost/toolhost.sock               (root)\n"
    "  /tmp/toolhost-UID/toolhost.sock           (anyone else)\n"
    "The socket's folder is created 0700 when missing; an existing folder\n"
    "owned by another user or writable by others is refused.\n"
    "\n"
    "With http:// entries in host.listen the same host also serves MCP over\n"
    "Streamable HTTP on each (bearer tokens of the mcp section; see\n"
    "docs/mcp.md); --listen replaces only the unix: entry. An http://\n"
    "entry whose path is /metrics serves Prometheus metrics instead.\n"
    "Under systemd (Type=notify) it reports READY/RELOADING/STOPPING,\n"
    "pings the watchdog, and takes activated sockets (LISTEN_FDS) that\n"
    "match its listen entries (docs/ops.md).\n"
    "\n"
    "Options:\n"
    "  -c, --config FILE      the config to serve\n"
    "  -l, --listen ADDR      unix:PATH (overrides host.listen's unix: entry)\n"
    "      --stdio            serve one session on stdin/stdout\n"
    "      --log-level LEVEL  error, warn, info or debug (overrides\n"
    "                         host.log_level)\n"
    "  -h, --help             this help\n";

int cli_serve(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"listen", required_argument, NULL, 'l'},
        {"stdio", no_argument, NULL, 's'},
        {"log-level", required_argument, NULL, 'L'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *config = NULL, *listen = NULL;
    bool stdio = false;
    int level = -1;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:l:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 'l':
            listen = optarg;
            break;
        case 's':
            stdio = true;
            break;
        case 'L':
            if ((level = cli_log_level_arg(optarg)) < 0)
                return CLI_USAGE;
            break;
        case 'h':
            fputs(serve_usage, stdout);
            return CLI_OK;
        default:
            fputs(serve_usage, stderr);
            return CLI_USAGE;
        }
    }
    if (optind != argc || !config || (stdio && listen)) {
        cli_error(!config ? "serve: no config given (use -c FILE)"
                  : optind != argc ? "serve: unexpected argument"
                                   : "serve: --listen and --stdio exclude "
                                     "each other");
        fputs(serve_usage, stderr);
        return CLI_USAGE;
    }
    th_error err;
    th_error_clear(&err);
    th_config *cfg = NULL;
    if (th_config_load(config, &cfg, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return CLI_USAGE;
    }
    th_log_set_level(level >= 0 ? level : cfg->host.log_level);
    th_log_set_format(cfg->host.log_format == TH_LOG_FORMAT_JSON);
    /* A host that reloads on SIGHUP must not die of one that comes while
     * it starts (the HTTP front may already answer before the reload
     * watcher takes the signal): ignored until then; the config being
     * loaded is the newest anyway. */
    if (cfg->host.reload != TH_RELOAD_OFF)
        signal(SIGHUP, SIG_IGN);
    /* The socket's folder first: a bad address fails before the plugins
     * load, with a message that says which folder and why. */
    char def[128];
    const char *addr = listen ? listen : th_rpc_config(cfg)->listen;
    bool strict = !addr;
    if (!stdio && !addr) {
        if (th_sock_default_addr(def, sizeof def, &err) != 0) {
            cli_error("serve: %s", err.msg);
            th_config_free(cfg);
            return CLI_USAGE;
        }
        addr = def;
    }
    /* Socket activation: sockets the service manager bound, matched to
     * the entries by path (unix:) and by address and port (http://). */
    int act_unix = -1;
    if (!stdio && th_sd_listen_fds() > 0) {
        const char *path;
        if (th_rpc_parse_addr(addr, &path, NULL) == 0)
            act_unix = th_sd_take_unix(path);
        int fds[16];
        size_t n = th_sd_take_inet(fds, 16);
        th_http_set_listen_fds(fds, n);
    }
    if (!stdio && act_unix < 0 &&
        th_sock_prepare(addr, strict, th_rpc_config(cfg)->socket_mode, &err) != 0) {
        cli_error("serve: %s", err.msg);
        th_config_free(cfg);
        return err.code == TH_ECONFIG ? CLI_USAGE : CLI_FAILED;
    }
    th_host *h = NULL;
    if (th_host_open(cfg, &h, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return CLI_USAGE;
    }
    if (th_code_attach(h, &err) != 0) { /* run_code, where enabled */
        fprintf(stderr, "%s\n", err.msg);
        th_host_close(h);
        return CLI_FAILED;
    }
    /* The registered fronts (front/fronts.h), each serving what the config
     * asks of it on threads of its own while the RPC loop runs on this
     * one; none on stdio. */
    if (!stdio && fronts_open(h, &err) != 0) {
        cli_error("serve: %s", err.msg);
        th_host_close(h);
        return err.code == TH_ECONFIG || err.code == TH_EINVAL ||
                       err.code == TH_EPERM
                   ? CLI_USAGE
                   : CLI_FAILED;
    }
    th_rpc_serve_opts so;
    memset(&so, 0, sizeof so);
    so.listen = stdio ? NULL : addr;
    so.stdio = stdio;
    so.on_ready = on_server_ready;
    so.has_listen_fd = act_unix >= 0;
    so.listen_fd = act_unix;
    th_sd_close_unused(); /* the fronts took theirs */
    th_http_close_unused_listen_fds();
    pthread_t stopper;
    bool have_stopper = false;
    if ((getenv("NOTIFY_SOCKET") || fronts_stoppable()) &&
        pipe2(stop_pipe, O_CLOEXEC) == 0) {
        have_stopper = pthread_create(&stopper, NULL, stop_notifier, NULL) == 0;
        if (!have_stopper) {
            close(stop_pipe[0]);
            close(stop_pipe[1]);
            stop_pipe[0] = stop_pipe[1] = -1;
        }
    }
    int rc = th_rpc_serve(h, &so, &err);
    th_sd_stopping(); /* stdio end of input, or a start that failed */
    if (have_stopper) {
        int wfd = stop_pipe[1];
        stop_pipe[1] = -1;
        close(wfd); /* the notifier reads EOF */
        pthread_join(stopper, NULL);
        close(stop_pipe[0]);
    }
    /* The server's handlers are gone (default actions again): while the
     * host closes, a signal means "now". */
    atomic_store(&serving, false);
    stop_signals_ours();
    fronts_close();
    th_host_close(h);
    if (rc != 0) {
        cli_error("serve: %s", err.msg);
        return rc == TH_ECONFIG ? CLI_USAGE : CLI_FAILED;
    }
    return CLI_OK;
}
