/* fs.c - the fs plugin: read, list and stat files below a root folder
 * given in the plugin's config; paths that leave the root are refused. */
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <toolhost/sdk.h>

/* The plugin's state: its root folder (th_sdk_rooted_init from the
 * config key "root"). */
typedef th_sdk_rooted fs_state;

/* Resolves the "path" argument (or `dflt` when absent) inside the root. */
static int arg_path(const fs_state *st, th_sdk_args *a, toolhost_call *call,
                    const char *dflt, char **out)
{
    return th_sdk_rooted_arg_path(st, a, call, "path", dflt, out);
}


/* ---- fs_read ---------------------------------------------------------- */

static int fs_read(void *state, const toolhost_tool *tool, toolhost_call *call,
                   const uint8_t *args, size_t args_len)
{
    (void)tool;
    const fs_state *st = state;
    th_sdk_args a;
    char *path = NULL;
    FILE *f = NULL;
    char *line = NULL;
    size_t cap = 0;
    int status = TOOLHOST_FAILED;

    if (th_sdk_args_init(&a, args, args_len) != 0 ||
        arg_path(st, &a, call, NULL, &path) != 0)
        goto out;
    int64_t offset = th_sdk_arg_int_or(&a, "offset", 0);
    int64_t limit = th_sdk_arg_int_or(&a, "limit", -1);
    f = fopen(path, "rb");
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) != 0) {
        th_sdk_fail(call, "cannot open '%s': %s", th_sdk_rooted_rel(st, path),
                    strerror(errno));
        goto out;
    }
    if (S_ISDIR(sb.st_mode)) {
        th_sdk_fail(call, "'%s' is a folder; use fs_list to list it",
                    th_sdk_rooted_rel(st, path));
        goto out;
    }
    int64_t lineno = 0, written = 0;
    ssize_t n;
    while ((limit < 0 || written < limit) &&
           (n = getline(&line, &cap, f)) >= 0) {
        if (lineno++ < offset)
            continue;
        if (th_sdk_write(call, TOOLHOST_STDOUT, line, (size_t)n) != 0)
            break; /* cancelled: the output is dropped anyway */
        written++;
    }
    if (ferror(f)) {
        th_sdk_fail(call, "error reading '%s': %s", th_sdk_rooted_rel(st, path),
                    strerror(errno));
        goto out;
    }
    bool more = !feof(f) && getc(f) != EOF;
    th_sdk_meta m;
    th_sdk_meta_init(&m);
    th_sdk_meta_str(&m, "path", th_sdk_rooted_rel(st, path));
    th_sdk_meta_int(&m, "offset", offset);
    th_sdk_meta_int(&m, "lines", written);
    th_sdk_meta_bool(&m, "more", more);
    th_sdk_meta_set(&m, call);
    th_sdk_meta_destroy(&m);
    status = TOOLHOST_OK;
out:
    if (f)
        fclose(f);
    free(line);
    free(path);
    th_sdk_args_destroy(&a);
    return status;
}

static int fs_read_check(void *state, const toolhost_tool *tool,
                         const uint8_t *args, size_t len, char *err,
                         size_t err_size)
{
    (void)state, (void)tool;
    th_sdk_args a;
    int bad = th_sdk_args_init(&a, args, len) != 0 ||
              th_sdk_arg_int_or(&a, "offset", 0) < 0 ||
              th_sdk_arg_int_or(&a, "limit", 0) < 0;
    th_sdk_args_destroy(&a);
    if (bad)
        snprintf(err, err_size, "'offset' and 'limit' must be >= 0");
    return bad;
}

/* ---- fs_list ------------------------------------------------------------ */

static bool is_dir(const char *dir, const struct dirent *d)
{
    if (d->d_type != DT_UNKNOWN)
        return d->d_type == DT_DIR;
    char p[PATH_MAX];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, d->d_name);
    return lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int fs_list(void *state, const toolhost_tool *tool, toolhost_call *call,
                   const uint8_t *args, size_t args_len)
{
    (void)tool;
    const fs_state *st = state;
    th_sdk_args a;
    char *path = NULL;
    struct dirent **list = NULL;
    int n = -1, status = TOOLHOST_FAILED;

    if (th_sdk_args_init(&a, args, args_len) != 0 ||
        arg_path(st, &a, call, ".", &path) != 0)
        goto out;
    const char *glob = th_sdk_arg_cstr_or(&a, "glob", NULL);
    n = scandir(path, &list, NULL, alphasort);
    if (n < 0) {
        th_sdk_fail(call, "cannot list '%s': %s", th_sdk_rooted_rel(st, path),
                    errno == ENOTDIR ? "not a folder" : strerror(errno));
        goto out;
    }
    int64_t shown = 0;
    for (int i = 0; i < n; i++) {
        const char *name = list[i]->d_name;
        if (!strcmp(name, ".") || !strcmp(name, ".."))
            continue;
        if (glob && fnmatch(glob, name, 0) != 0)
            continue;
        if (th_sdk_printf(call, "%s%s\n", name,
                          is_dir(path, list[i]) ? "/" : "") != 0)
            break;
        shown++;
    }
    th_sdk_meta m;
    th_sdk_meta_init(&m);
    th_sdk_meta_str(&m, "path", th_sdk_rooted_rel(st, path));
    th_sdk_meta_int(&m, "entries", shown);
    th_sdk_meta_set(&m, call);
    th_sdk_meta_destroy(&m);
    status = TOOLHOST_OK;
out:
    for (int i = 0; i < n; i++)
        free(list[i]);
    free(list);
    free(path);
    th_sdk_args_destroy(&a);
    return status;
}

/* ---- fs_stat ------------------------------------------------------------- */

static const char *type_name(mode_t m)
{
    if (S_ISREG(m)) return "file";
    if (S_ISDIR(m)) return "directory";
    if (S_ISLNK(m)) return "symlink";
    if (S_ISFIFO(m)) return "fifo";
    if (S_ISSOCK(m)) return "socket";
    if (S_ISCHR(m) || S_ISBLK(m)) return "device";
    return "other";
}

static int fs_stat(void *state, const toolhost_tool *tool, toolhost_call *call,
                   const uint8_t *args, size_t args_len)
{
    (void)tool;
    const fs_state *st = state;
    th_sdk_args a;
    char *path = NULL;
    json_t *j = NULL;
    char *text = NULL;
    int status = TOOLHOST_FAILED;

    if (th_sdk_args_init(&a, args, args_len) != 0 ||
        arg_path(st, &a, call, NULL, &path) != 0)
        goto out;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        th_sdk_fail(call, "cannot stat '%s': %s", th_sdk_rooted_rel(st, path),
                    strerror(errno));
        goto out;
    }
    char mode[8], mtime[32];
    struct tm tm;
    snprintf(mode, sizeof mode, "%04o", (unsigned)(sb.st_mode & 07777));
    gmtime_r(&sb.st_mtime, &tm);
    strftime(mtime, sizeof mtime, "%Y-%m-%dT%H:%M:%SZ", &tm);
    j = json_pack("{s:s, s:s, s:I, s:s, s:s}", "path", th_sdk_rooted_rel(st, path), "type",
                  type_name(sb.st_mode), "size", (json_int_t)sb.st_size,
                  "mode", mode, "mtime", mtime);
    text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (!text) {
        th_sdk_fail(call, "out of memory");
        goto out;
    }
    th_sdk_printf(call, "%s\n", text);
    status = TOOLHOST_OK;
out:
    free(text);
    json_decref(j);
    free(path);
    th_sdk_args_destroy(&a);
    return status;
}

/* ---- tables -------------------------------------------------------------- */

static const toolhost_param read_params[] = {
    TH_SDK_PARAM("path", STRING, "File to read, relative to the root.",
                 TH_SDK_REQUIRED),
    TH_SDK_PARAM("offset", INTEGER, "Lines to skip from the start.",
                 TH_SDK_DEFAULT("0")),
    TH_SDK_PARAM("limit", INTEGER,
                 "Most lines to return; all when left out."),
};

static const toolhost_param list_params[] = {
    TH_SDK_PARAM("path", STRING, "Folder to list, relative to the root.",
                 TH_SDK_DEFAULT("\".\"")),
    TH_SDK_PARAM("glob", STRING,
                 "Shell pattern the names must match, e.g. \"*.c\"."),
};

static const toolhost_param stat_params[] = {
    TH_SDK_PARAM("path", STRING, "File or folder, relative to the root.",
                 TH_SDK_REQUIRED),
};

static const toolhost_tool fs_tools[] = {
    TH_SDK_TOOL("fs_read", fs_read, "Reads a text file, or a range of its lines.",
                TH_SDK_PARAMS(read_params), TH_SDK_OUTPUT(FILE_CONTENT, ERROR),
                .flags = TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT,
                .validate_args = fs_read_check,
                .long_description =
                    "Returns the file's bytes as they are, from line "
                    "`offset` (0 = the first line) for at most `limit` lines.\n"
                    "Meta tells how many lines came back and whether more "
                    "follow (`more`); continue with offset + lines.\n"
                    "Paths are relative to the plugin's root folder; paths "
                    "that leave it (\"..\", absolute paths elsewhere, "
                    "symbolic links pointing outside) are refused."),
    TH_SDK_TOOL("fs_list", fs_list, "Lists a folder, one entry per line.",
                TH_SDK_PARAMS(list_params), TH_SDK_OUTPUT(TEXT, ERROR),
                .flags = TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT,
                .long_description =
                    "Entries come sorted by name, folders with a trailing "
                    "\"/\". `glob` filters names with shell patterns "
                    "(fnmatch(3)): \"*.c\", \"test_?.txt\", \"[a-c]*\"."),
    TH_SDK_TOOL("fs_stat", fs_stat,
                "Size, type, mode and modification time of a file, as JSON.",
                TH_SDK_PARAMS(stat_params), TH_SDK_OUTPUT(STRUCTURED, ERROR),
                .flags = TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT,
                .long_description =
                    "Prints one JSON object: {\"path\", \"type\" (file, "
                    "directory, fifo, socket, device, other), \"size\" in "
                    "bytes, \"mode\" as octal text (\"0644\"), \"mtime\" in "
                    "UTC ISO 8601}.  Symbolic links inside the root are "
                    "followed."),
};

TH_SDK_PLUGIN("fs", "1.0.0", fs_tools,
              "Reads, lists and inspects files below a root folder.",
              TH_SDK_CONFIG(th_sdk_rooted_config), .init = th_sdk_rooted_init,
              .fini = th_sdk_rooted_fini)
