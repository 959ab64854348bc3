/* new.c - `toolhost new [--lang L] NAME`: a plugin project from the
 * templates embedded in the binary at build time (sdk/template/: the C one
 * at its top, one folder per other language).  Every template builds
 * NAME.so with `make` and declares one tool, NAME_hello. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "cli.h"

typedef struct th_embedded_file {
    const char *name;
    const unsigned char *data;
    size_t len;
} th_embedded_file;
extern const th_embedded_file th_plugin_template[];

static const char new_usage[] =
    "usage: toolhost new [--lang c|cxx|rust|go] [--dir DIR] NAME\n"
    "\n"
    "Creates DIR/NAME (default ./NAME) with a plugin written with the SDK\n"
    "of the language (default c): the source with one tool, NAME_hello, a\n"
    "Makefile that builds NAME.so (linked with --no-undefined, chmod go-w),\n"
    "toolhost.yaml (the plugin with reload: watch and a socket in the\n"
    "folder) and a README. NAME is a C identifier of at most 50\n"
    "characters. Then: cd NAME && make && toolhost call ./NAME.so NAME_hello\n"
    "\n"
    "Languages (sdk/AUTHORING.md has a section for each):\n"
    "  c      NAME.c with the C SDK (pkg-config toolhost-plugin)\n"
    "  cxx    NAME.cpp with the header-only C++17 SDK (toolhost.hpp)\n"
    "  rust   a cargo crate on the toolhost crate (sdk/rust)\n"
    "  go     a Go package built with -buildmode=c-shared (sdk/go)\n"
    "\n"
    "Options:\n"
    "      --lang L    the plugin's language (c, cxx, rust, go; default c)\n"
    "      --dir DIR   create the project folder inside DIR\n"
    "  -h, --help      this help\n";

/* The template folder of each language; the C template is the top of
 * sdk/template/, whose plugin.c.in becomes NAME.c. */
static const struct {
    const char *lang;
    const char *folder;
} langs[] = {{"c", ""}, {"cxx", "cxx/"}, {"rust", "rust/"}, {"go", "go/"}};

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

static const char mark[] = "@NAME@";

/* Writes `data` with every "@NAME@" replaced by `name`. */
static int write_expanded(const char *path, const unsigned char *data,
                          size_t len, const char *name)
{
    FILE *f = fopen(path, "wx");
    if (!f)
        return -1;
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

/* Whether an embedded file belongs to the template in `folder` (below it,
 * or for C at the top). */
static bool in_template(const char *name, const char *folder, size_t flen)
{
    return flen ? strncmp(name, folder, flen) == 0 : strchr(name, '/') == NULL;
}

/* root + "/" + rel with "@NAME@" replaced by `name` (plugin.c.in becomes
 * NAME.c), the folders on the way made; -1 when the path is too long or a
 * folder cannot be made. */
static int project_path(char *out, size_t cap, const char *root,
                        const char *rel, const char *name)
{
    if (strcmp(rel, "plugin.c.in") == 0)
        return snprintf(out, cap, "%s/%s.c", root, name) < (int)cap ? 0 : -1;
    size_t n = (size_t)snprintf(out, cap, "%s/", root);
    for (const char *p = rel; *p && n < cap; p++) {
        if (strncmp(p, mark, sizeof mark - 1) == 0) {
            n += (size_t)snprintf(out + n, cap - n, "%s", name);
            p += sizeof mark - 2;
            continue;
        }
        if (*p == '/') {
            out[n] = '\0';
            if (mkdir(out, 0755) != 0 && errno != EEXIST)
                return -1;
        }
        out[n++] = *p;
    }
    if (n >= cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    out[n] = '\0';
    return 0;
}

int cli_new(int argc, char **argv)
{
    static const struct option opts[] = {
        {"dir", required_argument, NULL, 'd'},
        {"lang", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *dir = ".", *lang = "c";
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            dir = optarg;
            break;
        case 'l':
            lang = optarg;
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
    const char *folder = NULL;
    for (size_t i = 0; i < sizeof langs / sizeof langs[0]; i++)
        if (strcmp(lang, langs[i].lang) == 0)
            folder = langs[i].folder;
    if (!folder) {
        cli_error("new: unknown language '%s' (give c, cxx, rust or go)",
                  lang);
        return CLI_USAGE;
    }
    size_t flen = strlen(folder), nfiles = 0;
    for (const th_embedded_file *f = th_plugin_template; f->name; f++)
        nfiles += in_template(f->name, folder, flen);
    if (nfiles == 0) {
        cli_error("new: this build has no %s template", lang);
        return CLI_FAILED;
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
    printf("created %s:", root);
    for (const th_embedded_file *f = th_plugin_template; f->name; f++) {
        /* This language's files: below its folder, or (C) at the top. */
        if (!in_template(f->name, folder, flen))
            continue;
        const char *rel = f->name + flen;
        char path[4200];
        if (project_path(path, sizeof path, root, rel, name) != 0 ||
            write_expanded(path, f->data, f->len, name) != 0) {
            putchar('\n');
            cli_error("new: cannot write %s/%s: %s", root, rel,
                      strerror(errno));
            return CLI_FAILED;
        }
        printf(" %s", path + strlen(root) + 1);
    }
    printf("\nnext: cd %s && make && toolhost call ./%s.so %s_hello\n", root,
           name, name);
    return CLI_OK;
}
