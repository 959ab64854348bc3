/* describe.c - `toolhost describe` (a tool's detailed description and
 * JSON Schema) and `toolhost export` (function-calling JSON), both built by
 * the schema module so the CLI, exports and RPC say the same thing. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "th/schema.h"

static const char describe_usage[] =
    "usage: toolhost describe -c FILE TOOL [--json]\n"
    "       toolhost describe ./PLUGIN.so TOOL [--json]\n"
    "\n"
    "Prints the tool's detailed description as a model sees it (summary,\n"
    "long description with its sections, parameters, output types and\n"
    "flags, tags), then the JSON Schema of its parameters. --json prints\n"
    "{name, description, detailed_description, parameters} (and tags when\n"
    "the plugin declares some).\n"
    "\n"
    "Options:\n"
    "  -c, --config FILE   load the plugins of this config\n"
    "      --json          JSON output\n"
    "  -h, --help          this help\n";

int cli_describe(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *config = NULL;
    bool json = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            fputs(describe_usage, stdout);
            return CLI_OK;
        default:
            fputs(describe_usage, stderr);
            return CLI_USAGE;
        }
    }
    /* toolhost describe ./x.so TOOL: the plugin alone, as `call` does */
    if (!config && optind + 2 == argc && cli_is_plugin_path(argv[optind]))
        config = argv[optind++];
    if (optind + 1 != argc) {
        cli_error("describe: give one tool name");
        fputs(describe_usage, stderr);
        return CLI_USAGE;
    }
    const char *name = argv[optind];
    cli_host ch;
    int rc = cli_host_open(config, NULL, NULL, &ch);
    if (rc != CLI_OK)
        return rc;
    const th_tool *t = th_session_acquire(ch.session, name);
    if (!t) {
        cli_error("describe: no tool '%s' (toolhost list -c %s shows them)",
                  name, config);
        cli_host_close(&ch);
        return CLI_USAGE;
    }
    char *text = th_schema_describe(t);
    json_t *params = th_schema_params(t);
    rc = CLI_FAILED;
    if (text && params) {
        if (json) {
            json_t *o = json_pack("{s:s, s:s, s:s, s:O}", "name", t->name,
                                  "description", t->description,
                                  "detailed_description", text, "parameters",
                                  params);
            json_t *tags = o ? th_schema_tags(t) : NULL; /* ABI 1.5 */
            if (o && t->n_tags &&
                (!tags || json_object_set_new(o, "tags", tags) != 0)) {
                json_decref(o);
                o = NULL;
            }
            char *s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
            if (s) {
                printf("%s\n", s);
                rc = CLI_OK;
            }
            free(s);
            json_decref(o);
        } else {
            char *s = json_dumps(params, JSON_INDENT(2));
            if (s) {
                printf("%s\n## JSON Schema\n\n%s\n", text, s);
                rc = CLI_OK;
            }
            free(s);
        }
    }
    if (rc != CLI_OK)
        cli_error("describe: out of memory");
    free(text);
    json_decref(params);
    th_tool_release(t);
    cli_host_close(&ch);
    return rc;
}

static const char export_usage[] =
    "usage: toolhost export -c FILE --format "
    "openai|openai-responses|anthropic|gemini|jsonschema [--strict] "
    "[--toolset NAME]\n"
    "\n"
    "Writes the tools as the function-calling JSON that API accepts, in a\n"
    "stable (name) order, ready to paste into a request:\n"
    "  openai      [{\"type\": \"function\", \"function\": {name, description,\n"
    "              parameters}}]\n"
    "  anthropic   [{name, description, input_schema}]\n"
    "  jsonschema  {name: JSON Schema of the parameters}\n"
    "  openai-responses  [{\"type\": \"function\", name, description,\n"
    "              parameters, strict}] (the flat Responses API shape)\n"
    "  gemini      {\"functionDeclarations\": [{name, description,\n"
    "              parameters}]}: one Tool; parameters in the OpenAPI 3.0\n"
    "              subset Gemini reads (what it cannot say is left out;\n"
    "              the host still checks every argument)\n"
    "Parameters are JSON Schema: type object, properties, required, enum,\n"
    "default, additionalProperties false.\n"
    "\n"
    "Options:\n"
    "  -c, --config FILE     load the plugins of this config\n"
    "  -f, --format FORMAT   openai, openai-responses, anthropic, gemini or\n"
    "                        jsonschema\n"
    "                        (default openai)\n"
    "      --strict          openai formats: strict mode (every property\n"
    "                        required, optional ones nullable,\n"
    "                        additionalProperties false, strict: true)\n"
    "  -t, --toolset NAME    only the tools of this toolset\n"
    "  -h, --help            this help\n";

typedef struct export_ctx {
    th_session *session;
    const th_toolset_cfg *toolset; /* NULL: every tool */
    const th_tool **tools;
    size_t n, cap;
    int rc;
} export_ctx;

static bool in_toolset(const th_toolset_cfg *ts, const char *name)
{
    for (size_t i = 0; i < ts->n_tools; i++)
        if (strcmp(ts->tools[i], "*") == 0 || strcmp(ts->tools[i], name) == 0)
            return true;
    return false;
}

static int collect(const th_tool *t, void *ud)
{
    export_ctx *ec = ud;
    if (ec->toolset && !in_toolset(ec->toolset, t->name))
        return 0;
    if (ec->n == ec->cap) {
        size_t cap = ec->cap ? ec->cap * 2 : 16;
        const th_tool **p = realloc(ec->tools, cap * sizeof *p);
        if (!p) {
            ec->rc = CLI_FAILED;
            return 1;
        }
        ec->tools = p;
        ec->cap = cap;
    }
    ec->tools[ec->n++] = t;
    return 0;
}

int cli_export(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"format", required_argument, NULL, 'f'},
        {"toolset", required_argument, NULL, 't'},
        {"strict", no_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *config = NULL, *format = "openai", *toolset = NULL;
    th_export_opts xo = {.strict = false};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:f:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 'f':
            format = optarg;
            break;
        case 't':
            toolset = optarg;
            break;
        case 'S':
            xo.strict = true;
            break;
        case 'h':
            fputs(export_usage, stdout);
            return CLI_OK;
        default:
            fputs(export_usage, stderr);
            return CLI_USAGE;
        }
    }
    if (optind != argc) {
        cli_error("export: unexpected argument '%s'", argv[optind]);
        return CLI_USAGE;
    }
    th_export_format fmt = th_export_format_from_name(format);
    if (!fmt) {
        cli_error("export: unknown format '%s' (openai, openai-responses, "
                  "anthropic, gemini, jsonschema)",
                  format);
        return CLI_USAGE;
    }
    if (xo.strict && fmt != TH_EXPORT_OPENAI &&
        fmt != TH_EXPORT_OPENAI_RESPONSES) {
        cli_error("export: --strict is for the openai and openai-responses "
                  "formats");
        return CLI_USAGE;
    }
    cli_host ch;
    int rc = cli_host_open(config, NULL, NULL, &ch);
    if (rc != CLI_OK)
        return rc;
    export_ctx ec = {.session = ch.session, .rc = CLI_OK};
    if (toolset) {
        ec.toolset = th_config_toolset(th_host_config(ch.host), toolset);
        if (!ec.toolset) {
            cli_error("export: no toolset '%s' in %s", toolset, config);
            cli_host_close(&ch);
            return CLI_USAGE;
        }
    }
    /* The tools stay valid while the host is open and nothing reloads. */
    th_session_tools(ch.session, collect, &ec);
    if (ec.rc == CLI_OK) {
        th_error err;
        char *text = th_schema_export_text_ex(ec.tools, ec.n, fmt, &xo, &err);
        if (text) {
            fputs(text, stdout);
            free(text);
        } else {
            cli_error("export: %s", err.msg);
            ec.rc = CLI_FAILED;
        }
    }
    free(ec.tools);
    cli_host_close(&ch);
    return ec.rc;
}
