/* new.c - `toolhost new NAME`: a plugin project from the template that is
 * embedded in the binary (sdk/template/ at build time). */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

typedef struct th_embedded_file {
    const char *name;
    const unsigned char *data;
    size_t len;
} th_embedded_file;
extern const th_embedded_file th_plugin_template[];

static const char new_usage[] =
    "usage: toolhost new [--dir DIR] NAME\n"
    "\n"
    "Creates DIR/NAME (default ./NAME) with a plugin written with the SDK:\n"
    "NAME.c (one tool, NAME_hello), a Makefile that builds NAME.so with\n"
    "pkg-config toolhost-plugin (linked with --no-undefined, chmod go-w),\n"
    "toolhost.yaml (the plugin with reload: watch and a socket in the\n"
    "folder) and a README. NAME is a C identifier of at most 50\n"
    "characters. Then: cd NAME && make && toolhost call ./NAME.so NAME_hello\n"
    "\n"
    "Options:\n"
    "      --dir DIR   create the project folder inside DIR\n"
    "  -h, --help      this help\n";

static bool name_ok(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len > 50)
        return false;
    if (!(n[0] == '_' || (n[0] >= 'a' && n[0] <= 'z') ||
          (n[0] >= 'A' && n[0] <= 'Z')))
        return false;
    for (size_t i = 1; i < len; i++) {
        char c = n[i];
        if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9')))
            return false;
    }
    return true;
}

/* Writes `data` with every "@NAME@" replaced by `name`. */
static int write_expanded(const char *path, const unsigned char *data,
                          size_t len, const char *name)
{
    FILE *f = fopen(path, "wx");
    if (!f)
        return -1;
    static const char mark[] = "@NAME@";
    size_t i = 0;
    while (i < len) {
        if (len - i >= sizeof mark - 1 &&
            memcmp(data + i, mark, sizeof mark - 1) == 0) {
            fputs(name, f);
            i += sizeof mark - 1;
        } else {
            fputc(data[i++], f);
        }
    }
    return fclose(f) == 0 ? 0 : -1;
}

int cli_new(int argc, char **argv)
{
    static const struct option opts[] = {
        {"dir", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *dir = ".";
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            dir = optarg;
            break;
        case 'h':
            fputs(new_usage, stdout);
            return CLI_OK;
        default:
            fputs(new_usage, stderr);
            return CLI_USAGE;
        }
    }
    if (optind + 1 != argc) {
        cli_error("new: give the plugin's name");
        fputs(new_usage, stderr);
        return CLI_USAGE;
    }
    const char *name = argv[optind];
    if (!name_ok(name)) {
        cli_error("new: '%s' is not a valid plugin name (a C identifier: "
                  "letters, digits and _, not starting with a digit, at "
                  "most 50 characters)",
                  name);
        return CLI_USAGE;
    }
    char root[4096];
    if (snprintf(root, sizeof root, "%s/%s", dir, name) >= (int)sizeof root) {
        cli_error("new: path too long");
        return CLI_USAGE;
    }
    if (mkdir(root, 0755) != 0) {
        cli_error("new: cannot create %s: %s", root, strerror(errno));
        return CLI_FAILED;
    }
    for (const th_embedded_file *f = th_plugin_template; f->name; f++) {
        char path[4200];
        if (strcmp(f->name, "plugin.c.in") == 0)
            snprintf(path, sizeof path, "%s/%s.c", root, name);
        else
            snprintf(path, sizeof path, "%s/%s", root, f->name);
        if (write_expanded(path, f->data, f->len, name) != 0) {
            cli_error("new: cannot write %s: %s", path, strerror(errno));
            return CLI_FAILED;
        }
    }
    printf("created %s: %s.c, Makefile, toolhost.yaml, README.md\n"
           "next: cd %s && make && toolhost call ./%s.so %s_hello\n",
           root, name, root, name, name);
    return CLI_OK;
}
