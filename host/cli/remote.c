/* remote.c - `call`, `list` and `reload` against a running host
 * (--connect unix:PATH), with the same output and exit statuses as the
 * in-process commands. */
#include <errno.h>
#include <getopt.h>
#include <msgpack.h>
#include <pwd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "th/codec.h"
#include "th/json.h"
#include "th/perm.h"
#include "front/rpc.h"
#include "th/schema.h"

/* The word after a bare --connect is its address when no tool name or
 * key=value could look like it: it has a ':' or starts with '/' or '.'
 * (and has no '='); th_rpc_client_connect judges it. */
static bool looks_like_addr(const char *s)
{
    return s[0] != '-' && !strchr(s, '=') &&
           (strchr(s, ':') || s[0] == '/' || s[0] == '.');
}

int cli_remote_opt(cli_remote *r, int opt, int argc, char **argv)
{
    switch (opt) {
    case 'C':
        if (optarg)
            r->connect = optarg;
        else if (optind < argc && looks_like_addr(argv[optind]))
            r->connect = argv[optind++];
        else
            r->connect = "";
        return CLI_OK;
    case 'A':
        r->peer.any_server = true;
        return CLI_OK;
    case 'U': {
        char *end;
        errno = 0;
        unsigned long v = strtoul(optarg, &end, 10);
        if (optarg[0] >= '0' && optarg[0] <= '9' && !*end && errno == 0 &&
            v <= UINT32_MAX - 1) {
            r->peer.server_uid = (uint32_t)v;
        } else {
            struct passwd pw, *res = NULL;
            char buf[4096];
            if (getpwnam_r(optarg, &pw, buf, sizeof buf, &res) != 0 || !res) {
                cli_error("--server-uid: '%s' is neither a uid nor a user",
                          optarg);
                return CLI_USAGE;
            }
            r->peer.server_uid = (uint32_t)res->pw_uid;
        }
        r->peer.server_uid_set = true;
        return CLI_OK;
    }
    }
    return CLI_USAGE;
}

int cli_remote_check(const cli_remote *r, const char *cmd)
{
    if (!r->connect && (r->peer.server_uid_set || r->peer.any_server)) {
        cli_error("%s: --server-uid and --any-server go with --connect", cmd);
        return CLI_USAGE;
    }
    if (r->peer.server_uid_set && r->peer.any_server) {
        cli_error("%s: --server-uid and --any-server exclude each other", cmd);
        return CLI_USAGE;
    }
    return CLI_OK;
}

static th_rpc_client *connect_or_say(const cli_remote *r)
{
    th_error err;
    th_error_clear(&err);
    th_rpc_client *c = NULL;
    int rc = th_rpc_client_connect_opts(r->connect, &r->peer, &c, &err);
    /* the message names the socket (or the bad address) */
    if (rc == TH_EPERM || rc == TH_EIO || rc == TH_EINVAL)
        cli_error("%s", err.msg);
    else if (rc != 0)
        cli_error("cannot connect to %s: %s",
                  r->connect && *r->connect ? r->connect : "the default address",
                  err.msg);
    return rc ? NULL : c;
}

/* Prints a protocol error response [code, message]; returns CLI_USAGE for
 * the codes a caller fixes (unknown tool, bad arguments), else CLI_FAILED. */
static int say_rpc_error(const char *what, const uint8_t *error, size_t len)
{
    th_error err;
    json_t *j = th_json_from_msgpack(error, len, &err);
    int code = j && json_is_array(j)
                   ? (int)json_integer_value(json_array_get(j, 0))
                   : 0;
    const char *msg = j && json_is_array(j)
                          ? json_string_value(json_array_get(j, 1))
                          : NULL;
    fprintf(stderr, "%s: %s (%s)\n", what, msg ? msg : "error",
            th_err_name(code));
    json_decref(j);
    return code == TH_EUNKNOWN_TOOL || code == TH_EARGS || code == TH_EINVAL
               ? CLI_USAGE
               : CLI_FAILED;
}

/* ---- call ---------------------------------------------------------------- */

static int schema_param_type(void *ud, const char *name)
{
    json_t *props = ud;
    json_t *p = json_object_get(props, name);
    const char *t = json_string_value(json_object_get(p, "type"));
    if (!t)
        return 0;
    for (uint32_t k = TOOLHOST_TYPE_STRING; k <= TOOLHOST_TYPE_OBJECT; k++)
        if (strcmp(th_type_name(k), t) == 0)
            return (int)k;
    return 0;
}

/* task.progress params, read by the codec; the acknowledgement comes
 * first (th_rpc_client_call_tool passes it on). */
static int on_progress(const char *method, size_t method_len,
                       const msgpack_object *params, void *ud)
{
    (void)ud;
    th_progress p;
    if (method_len != strlen("task.progress") ||
        memcmp(method, "task.progress", method_len) != 0 ||
        th_codec_unpack_progress(params, &p) != 0)
        return 0;
    char msg[512];
    snprintf(msg, sizeof msg, "%.*s", (int)(p.message_len < 511 ? p.message_len : 511),
             p.message ? p.message : "");
    cli_show_progress(p.fraction, msg, p.coalesced);
    return 0;
}

static bool on_permission(const msgpack_object *req, void *ud)
{
    bool yes = *(bool *)ud;
    if (yes)
        return true;
    char tool[128] = "?", reason[512] = "";
    const char *s;
    size_t n;
    if (req->type == MSGPACK_OBJECT_ARRAY && req->via.array.size >= 4) {
        if (th_rpc_obj_str(&req->via.array.ptr[1], &s, &n))
            snprintf(tool, sizeof tool, "%.*s", (int)n, s);
        if (th_rpc_obj_str(&req->via.array.ptr[3], &s, &n))
            snprintf(reason, sizeof reason, "%.*s", (int)n, s);
    }
    return cli_ask_terminal(tool, reason);
}

/* tools.describe [tool] -> the properties of its parameters schema (for
 * typing key=value), or NULL after saying why. */
static json_t *remote_properties(th_rpc_client *c, const char *tool,
                                 int *rc)
{
    th_buf params = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &params, th_buf_msgpack_write);
    msgpack_pack_array(&pk, 1);
    th_pack_cstr(&pk, tool);
    th_rpc_reply reply;
    memset(&reply, 0, sizeof reply);
    th_error err;
    json_t *props = NULL;
    *rc = CLI_FAILED;
    if (th_rpc_client_call(c, "tools.describe", params.data, params.len, NULL,
                           NULL, &reply, &err) != 0) {
        cli_error("tools.describe: %s", err.msg);
    } else if (reply.error) {
        *rc = say_rpc_error(tool, reply.error, reply.error_len);
    } else {
        json_t *d = th_json_from_msgpack(reply.result, reply.result_len, &err);
        props = json_incref(
            json_object_get(json_object_get(d, "parameters"), "properties"));
        if (!props)
            props = json_object();
        json_decref(d);
        *rc = CLI_OK;
    }
    th_rpc_reply_destroy(&reply);
    th_buf_destroy(&params);
    return props;
}

int cli_call_remote(const cli_remote *remote, const char *tool, char **kv,
                    int n_kv, const char *json_text, int64_t timeout_ms,
                    bool show_meta, bool yes)
{
    if (cli_is_nats(remote->connect))
        return cli_call_nats(remote->connect, tool, kv, n_kv, json_text,
                             timeout_ms, show_meta);
    th_rpc_client *c = connect_or_say(remote);
    if (!c)
        return CLI_FAILED;
    int rc;
    json_t *props = remote_properties(c, tool, &rc);
    if (!props) {
        th_rpc_client_close(c);
        return rc;
    }
    json_t *args =
        cli_build_args(kv, n_kv, json_text, schema_param_type, props);
    json_decref(props);
    th_buf mp = TH_BUF_INIT;
    if (!args || th_json_to_msgpack(args, &mp) != 0) {
        json_decref(args);
        th_buf_destroy(&mp);
        th_rpc_client_close(c);
        return CLI_USAGE;
    }
    json_decref(args);

    cli_catch_sigint();
    th_rpc_client_set_cancel_flag(c, &cli_interrupted);
    th_rpc_client_on_permission(c, on_permission, &yes);
    uint8_t *result = NULL;
    size_t result_len = 0;
    th_error err;
    th_error_clear(&err);
    rc = th_rpc_client_call_tool(c, tool, mp.data, mp.len, timeout_ms,
                                 on_progress, NULL, &result, &result_len,
                                 &err);
    cli_progress_end();
    th_buf_destroy(&mp);
    if (rc != 0) {
        cli_error("call failed: %s", err.msg[0] ? err.msg : th_strerror(rc));
        th_rpc_client_close(c);
        return CLI_FAILED;
    }
    th_result_copy r;
    if (th_codec_unpack_result_bytes(result, result_len, &r) != 0 ||
        r.kind == TH_RESULT_RUNNING) {
        cli_error("the host sent a result of the wrong shape");
        rc = CLI_FAILED;
    } else {
        rc = cli_print_result(&r, show_meta, tool);
        if (r.kind == TH_RESULT_ERROR && r.error == TH_ECANCELLED &&
            cli_interrupted)
            fprintf(stderr, "%s: cancelled\n", tool);
    }
    th_result_copy_destroy(&r);
    free(result);
    th_rpc_client_close(c);
    return rc;
}

/* ---- list and reload ----------------------------------------------------- */

/* Connects, sends `method` with no params and waits for its answer.  On
 * CLI_OK *reply holds the result (free it with th_rpc_reply_destroy); any
 * other status was already explained on stderr. */
static int params_request(const cli_remote *remote, const char *method,
                          const th_buf *params, th_rpc_reply *reply);

static int simple_request(const cli_remote *remote, const char *method,
                          th_rpc_reply *reply)
{
    return params_request(remote, method, NULL, reply);
}

/* A request with params (a msgpack array, or NULL for none). */
static int params_request(const cli_remote *remote, const char *method,
                          const th_buf *params, th_rpc_reply *reply)
{
    memset(reply, 0, sizeof *reply);
    th_rpc_client *c = connect_or_say(remote);
    if (!c)
        return CLI_FAILED;
    th_error err;
    int rc = CLI_OK;
    if (th_rpc_client_call(c, method, params ? params->data : NULL,
                           params ? params->len : 0, NULL, NULL, reply,
                           &err) != 0) {
        cli_error("%s: %s", method, err.msg);
        rc = CLI_FAILED;
    } else if (reply->error) {
        rc = say_rpc_error(method, reply->error, reply->error_len);
    }
    th_rpc_client_close(c);
    if (rc != CLI_OK)
        th_rpc_reply_destroy(reply);
    return rc;
}

int cli_list_remote(const cli_remote *remote, bool json)
{
    if (cli_is_nats(remote->connect))
        return cli_list_nats(remote->connect, json);
    th_rpc_reply reply;
    int rc = simple_request(remote, "tools.list", &reply);
    if (rc != CLI_OK)
        return rc;
    rc = CLI_FAILED;
    th_error err;
    json_t *tools = th_json_from_msgpack(reply.result, reply.result_len, &err);
    if (!json_is_array(tools)) {
        cli_error("tools.list: the host sent a result of the wrong shape");
        json_decref(tools);
        goto out;
    }
    if (json) {
        char *s = json_dumps(tools, JSON_INDENT(2));
        if (s)
            printf("%s\n", s);
        free(s);
    } else {
        /* the columns of `toolhost list -c` (list.c) */
        printf("%-20s %-12s %-22s %-22s %s\n", "TOOL", "PLUGIN", "FLAGS",
               "STDOUT/STDERR", "DESCRIPTION");
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t)
        {
            char flags[128] = "";
            size_t k;
            json_t *f;
            json_array_foreach(json_object_get(t, "flags"), k, f)
            {
                if (k)
                    strncat(flags, "+", sizeof flags - strlen(flags) - 1);
                strncat(flags, json_string_value(f) ? json_string_value(f) : "",
                        sizeof flags - strlen(flags) - 1);
            }
            char types[64];
            snprintf(types, sizeof types, "%s/%s",
                     json_string_value(json_object_get(t, "stdout_type")),
                     json_string_value(json_object_get(t, "stderr_type")));
            const char *plugin =
                json_string_value(json_object_get(t, "plugin"));
            printf("%-20s %-12s %-22s %-22s %s\n",
                   json_string_value(json_object_get(t, "name")),
                   plugin && *plugin ? plugin : "-", flags[0] ? flags : "-",
                   types,
                   json_string_value(json_object_get(t, "description")));
        }
    }
    json_decref(tools);
    rc = CLI_OK;
out:
    th_rpc_reply_destroy(&reply);
    return rc;
}

/* ---- reload ------------------------------------------------------------------ */

static const char reload_usage[] =
    "usage: toolhost reload --connect [unix:PATH] [--server-uid UID | "
    "--any-server]\n"
    "\n"
    "Asks a running host to reload: the config is read again, changed\n"
    "plugins are loaded from private copies and swapped in while calls in\n"
    "flight finish on the old code. A reload that fails changes nothing.\n"
    "Prints the host's answer; exit 0 when the reload succeeded, 1 when it\n"
    "failed.\n"
    "\n"
    "Options:\n" CLI_REMOTE_HELP
    "  -h, --help            this help\n";

int cli_reload(int argc, char **argv)
{
    static const struct option opts[] = {
        CLI_REMOTE_OPTIONS,
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    cli_remote remote;
    memset(&remote, 0, sizeof remote);
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(reload_usage, stdout);
            return CLI_OK;
        }
        if ((c != 'C' && c != 'U' && c != 'A') ||
            cli_remote_opt(&remote, c, argc, argv) != CLI_OK) {
            fputs(reload_usage, stderr);
            return CLI_USAGE;
        }
    }
    if (optind != argc || !remote.connect) {
        if (optind != argc)
            cli_error("reload: unexpected argument '%s'", argv[optind]);
        fputs(reload_usage, stderr);
        return CLI_USAGE;
    }
    if (cli_remote_check(&remote, "reload") != CLI_OK)
        return CLI_USAGE;
    th_rpc_reply reply;
    int rc = simple_request(&remote, "host.reload", &reply);
    if (rc != CLI_OK)
        return CLI_FAILED;
    th_error err;
    json_t *j = th_json_from_msgpack(reply.result, reply.result_len, &err);
    char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
    printf("%s\n", s ? s : "(no answer)");
    json_t *ok = json_object_get(j, "ok");
    rc = !ok || json_is_true(ok) ? CLI_OK : CLI_FAILED;
    free(s);
    json_decref(j);
    th_rpc_reply_destroy(&reply);
    return rc;
}

/* ---- disable, enable ------------------------------------------------------- */

static const char disable_usage[] =
    "usage: toolhost disable TOOL --reason TEXT --connect [unix:PATH]\n"
    "       toolhost enable TOOL --connect [unix:PATH]\n"
    "       toolhost disable --list --connect [unix:PATH]\n"
    "\n"
    "Takes a tool out of service on a running host, without a reload, or\n"
    "puts it back. TOOL is a tool name or an fnmatch pattern (\"fs_*\");\n"
    "a caller of a tool it matches is answered tool_disabled with the\n"
    "reason, the date and who disabled it (\"uid N\"). A pattern disabled\n"
    "again gets the new reason; enable takes the pattern as it was given.\n"
    "The host keeps the entries across reloads, not across a restart, at\n"
    "most 64. Admins only (the config's admin: section, see\n"
    "docs/security.md). --list prints the entries as JSON.\n"
    "\n"
    "Options:\n"
    "  -r, --reason TEXT     why (one line, at most 512 bytes): what the\n"
    "                        callers of the tool are told\n"
    "  -l, --list            print what is disabled\n" CLI_REMOTE_HELP
    "  -h, --help            this help\n";

/* toolhost disable / toolhost enable (argv[0] says which). */
int cli_disable(int argc, char **argv)
{
    static const struct option opts[] = {
        CLI_REMOTE_OPTIONS,
        {"reason", required_argument, NULL, 'r'},
        {"list", no_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    bool enable = strcmp(argv[0], "enable") == 0, list = false;
    const char *reason = NULL;
    cli_remote remote;
    memset(&remote, 0, sizeof remote);
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "r:lh", opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(disable_usage, stdout);
            return CLI_OK;
        }
        if (c == 'r' && !enable) {
            reason = optarg;
        } else if (c == 'l' && !enable) {
            list = true;
        } else if ((c != 'C' && c != 'U' && c != 'A') ||
                   cli_remote_opt(&remote, c, argc, argv) != CLI_OK) {
            fputs(disable_usage, stderr);
            return CLI_USAGE;
        }
    }
    int want = list ? 0 : 1;
    if (argc - optind != want || !remote.connect || (!enable && !list &&
                                                     !reason)) {
        cli_error("%s: %s", argv[0],
                  !remote.connect ? "give --connect (a running host)"
                  : argc - optind != want
                      ? (want ? "give one TOOL (a name or a pattern)"
                              : "--list takes no TOOL")
                      : "give --reason TEXT (what callers are told)");
        fputs(disable_usage, stderr);
        return CLI_USAGE;
    }
    if (cli_remote_check(&remote, argv[0]) != CLI_OK)
        return CLI_USAGE;
    th_buf params = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &params, th_buf_msgpack_write);
    msgpack_pack_array(&pk, list ? 0 : enable ? 1 : 2);
    if (!list)
        th_pack_cstr(&pk, argv[optind]);
    if (!list && !enable)
        th_pack_cstr(&pk, reason);
    const char *method = list ? "host.disabled"
                         : enable ? "host.enable" : "host.disable";
    th_rpc_reply reply;
    int rc = params_request(&remote, method, &params, &reply);
    th_buf_destroy(&params);
    if (rc != CLI_OK)
        return CLI_FAILED;
    if (list) {
        th_error err;
        json_t *j = th_json_from_msgpack(reply.result, reply.result_len,
                                         &err);
        char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
        printf("%s\n", s ? s : "[]");
        free(s);
        json_decref(j);
    } else {
        printf("%s %s\n", argv[optind], enable ? "enabled" : "disabled");
    }
    th_rpc_reply_destroy(&reply);
    return CLI_OK;
}
