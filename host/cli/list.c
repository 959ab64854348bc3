/* list.c - `toolhost list`: the tools a config (or a running host) offers. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "th/perm.h"
#include "th/schema.h"

static const char list_usage[] =
    "usage: toolhost list -c FILE [--json]\n"
    "       toolhost list --connect [unix:PATH] [--json]\n"
    "\n"
    "Lists the tools: name, plugin, flags, stdout/stderr semantic types and\n"
    "the one-line description. --json prints the same as a JSON array with\n"
    "each tool's JSON Schema.\n"
    "\n"
    "Options:\n"
    "  -c, --config FILE     load the plugins of this config\n"
    CLI_REMOTE_HELP
    "      --json            JSON output\n"
    "  -h, --help            this help\n";

typedef struct list_ctx {
    json_t *arr;     /* --json */
    int rc;
} list_ctx;

static int print_row(const th_tool *t, void *ud)
{
    list_ctx *lc = ud;
    char flags[96];
    th_perm_flags_str(t->flags, flags, sizeof flags);
    if (lc->arr) {
        json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o}", "name",
                              t->name, "plugin",
                              t->plugin ? t->plugin->name : "",
                              "description", t->description, "flags", flags,
                              "stdout_type", th_sem_name(t->stdout_type),
                              "stderr_type", th_sem_name(t->stderr_type),
                              "parameters", th_schema_params(t));
        json_t *tags = j ? th_schema_tags(t) : NULL; /* ABI 1.5 */
        if (j && t->n_tags &&
            (!tags || json_object_set_new(j, "tags", tags) != 0)) {
            json_decref(j);
            j = NULL;
        }
        if (!j || json_array_append_new(lc->arr, j) != 0) {
            lc->rc = CLI_FAILED;
            return 1;
        }
        return 0;
    }
    char types[64];
    snprintf(types, sizeof types, "%s/%s", th_sem_name(t->stdout_type),
             th_sem_name(t->stderr_type));
    printf("%-20s %-12s %-22s %-22s %s\n", t->name,
           t->plugin ? t->plugin->name : "-", flags[0] ? flags : "-", types,
           t->description);
    return 0;
}

int cli_list(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        CLI_REMOTE_OPTIONS,
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *config = NULL;
    cli_remote remote;
    memset(&remote, 0, sizeof remote);
    bool json = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
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
            json = true;
            break;
        case 'h':
            fputs(list_usage, stdout);
            return CLI_OK;
        default:
            fputs(list_usage, stderr);
            return CLI_USAGE;
        }
    }
    if (optind < argc) {
        cli_error("list: unexpected argument '%s'", argv[optind]);
        return CLI_USAGE;
    }
    if (!config == !remote.connect) {
        cli_error("list: give exactly one of -c FILE and --connect [ADDR]");
        return CLI_USAGE;
    }
    if (cli_remote_check(&remote, "list") != CLI_OK)
        return CLI_USAGE;
    if (remote.connect)
        return cli_list_remote(&remote, json);

    cli_host ch;
    int rc = cli_host_open(config, NULL, NULL, &ch);
    if (rc != CLI_OK)
        return rc;
    list_ctx lc = {.arr = json ? json_array() : NULL, .rc = CLI_OK};
    if (!json)
        printf("%-20s %-12s %-22s %-22s %s\n", "TOOL", "PLUGIN", "FLAGS",
               "STDOUT/STDERR", "DESCRIPTION");
    th_session_tools(ch.session, print_row, &lc);
    if (lc.arr) {
        if (lc.rc == CLI_OK) {
            char *s = json_dumps(lc.arr, JSON_INDENT(2));
            if (s)
                printf("%s\n", s);
            free(s);
        }
        json_decref(lc.arr);
    }
    cli_host_close(&ch);
    return lc.rc;
}
