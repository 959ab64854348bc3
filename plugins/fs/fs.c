/* fs.c - the fs plugin: read, list and stat files below a root folder
 * given in the plugin's config; paths that leave the root are refused. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <toolhost/sdk.h>

/* The plugin's state: its root folder, opened as an fd, and its limits
 * (th_sdk_rooted_init from the config). */
typedef th_sdk_rooted fs_state;

/* Opens the "path" argument (or `dflt` when absent) beneath the root. */
static int arg_open(const fs_state *st, th_sdk_args *a, toolhost_call *call,
                    const char *dflt, unsigned kinds, int *fd,
                    struct stat *sb, char **rel)
{
    return th_sdk_rooted_arg_open(st, a, call, "path", dflt, kinds, fd, sb,
                                  rel);
}

/* ---- fs_read ---------------------------------------------------------- */

static const char CUT_MARK[] = " [... line cut: longer than max_line_bytes]\n";

static int fs_read(void *state, const toolhost_tool *tool, toolhost_call *call,
                   const uint8_t *args, size_t args_len)
{
    (void)tool;
    const fs_state *st = state;
    th_sdk_args a;
    th_sdk_lines r = {0};
    char *rel = NULL;
    int fd = -1, status = TOOLHOST_FAILED;
    struct stat sb;

    if (th_sdk_args_init(&a, args, args_len) != 0 ||
        arg_open(st, &a, call, NULL, TH_SDK_OPEN_FILE | TH_SDK_OPEN_DIR, &fd,
                 &sb, &rel) != 0)
        goto out;
    int64_t offset = th_sdk_arg_int_or(&a, "offset", 0);
    int64_t limit = th_sdk_arg_int_or(&a, "limit", -1);
    if (S_ISDIR(sb.st_mode)) {
        th_sdk_fail(call, "'%s' is a folder; use fs_list to list it", rel);
        goto out;
    }
    if (th_sdk_lines_init(&r, fd, (size_t)st->max_line_bytes) != 0) {
        th_sdk_fail(call, "out of memory");
        goto out;
    }
    /* Lines go out whole until max_read_bytes: then `more` tells the
     * caller to continue at offset + lines. */
    int64_t lineno = 0, written = 0, bytes = 0, cuts = 0;
    bool more = false, budget = false;
    const char *line;
    size_t n;
    bool cut;
    int rc, wrc = 0;
    while ((rc = th_sdk_lines_next(&r, call, &line, &n, &cut)) == 1) {
        if (lineno++ < offset)
            continue;
        if ((limit >= 0 && written >= limit) ||
            (written > 0 && bytes + (int64_t)n > st->max_read_bytes)) {
            more = true;
            budget = !(limit >= 0 && written >= limit);
            break;
        }
        if ((wrc = th_sdk_write(call, TOOLHOST_STDOUT, line, n)) != 0 ||
            (cut && (wrc = th_sdk_write(call, TOOLHOST_STDOUT, CUT_MARK,
                                        sizeof CUT_MARK - 1)) != 0))
            break; /* cancelled (the output is dropped) or out of memory */
        cuts += cut;
        bytes += (int64_t)n;
        written++;
    }
    if (rc == TH_SDK_ECANCELLED || th_sdk_cancelled(call))
        goto out; /* nothing more to say: the answer is dropped */
    if (rc < 0) {
        th_sdk_fail(call, "error reading '%s': %s", rel, strerror(errno));
        goto out;
    }
    if (wrc != 0) { /* not an answer with lines missing */
        th_sdk_fail(call, "out of memory writing '%s'", rel);
        goto out;
    }
    if (cuts)
        th_sdk_log(st->host, TOOLHOST_LOG_INFO,
                   "fs_read '%s': %lld line(s) cut at max_line_bytes (%lld)",
                   rel, (long long)cuts, (long long)st->max_line_bytes);
    if (budget)
        th_sdk_log(st->host, TOOLHOST_LOG_INFO,
                   "fs_read '%s': stopped at max_read_bytes (%lld) after "
                   "%lld line(s)",
                   rel, (long long)st->max_read_bytes, (long long)written);
    th_sdk_meta m;
    th_sdk_meta_init(&m);
    th_sdk_meta_str(&m, "path", rel);
    th_sdk_meta_int(&m, "offset", offset);
    th_sdk_meta_int(&m, "lines", written);
    th_sdk_meta_bool(&m, "more", more);
    if (cuts)
        th_sdk_meta_int(&m, "cut_lines", cuts);
    th_sdk_meta_set(&m, call);
    th_sdk_meta_destroy(&m);
    status = TOOLHOST_OK;
out:
    th_sdk_lines_destroy(&r);
    if (fd >= 0)
        close(fd);
    free(rel);
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

static int by_name(const void *a, const void *b)
{
    return strcoll(*(char *const *)a, *(char *const *)b);
}

/* True when the entry is a folder (not following a symlink). */
static bool is_dir(int dfd, const struct dirent *d)
{
    if (d->d_type != DT_UNKNOWN)
        return d->d_type == DT_DIR;
    struct stat sb;
    return fstatat(dfd, d->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
           S_ISDIR(sb.st_mode);
}

static int fs_list(void *state, const toolhost_tool *tool, toolhost_call *call,
                   const uint8_t *args, size_t args_len)
{
    (void)tool;
    const fs_state *st = state;
    th_sdk_args a;
    char *rel = NULL;
    char **names = NULL;
    size_t n = 0, cap = 0;
    DIR *dir = NULL;
    int fd = -1, status = TOOLHOST_FAILED;

    if (th_sdk_args_init(&a, args, args_len) != 0 ||
        arg_open(st, &a, call, ".", TH_SDK_OPEN_DIR, &fd, NULL, &rel) != 0)
        goto out;
    const char *glob = th_sdk_arg_cstr_or(&a, "glob", NULL);
    dir = fdopendir(fd);
    if (!dir) {
        th_sdk_fail(call, "cannot list '%s': %s", rel, strerror(errno));
        goto out;
    }
    fd = -1; /* the DIR owns it */
    /* Names with a "/" appended for folders, sorted as alphasort does. */
    struct dirent *d;
    errno = 0;
    while ((d = readdir(dir)) != NULL) {
        if ((n & 1023) == 0 && th_sdk_cancelled(call))
            goto out;
        const char *name = d->d_name;
        if (!strcmp(name, ".") || !strcmp(name, ".."))
            continue;
        if (glob && fnmatch(glob, name, 0) != 0)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            char **t = realloc(names, nc * sizeof *t);
            if (!t)
                goto oom;
            names = t;
            cap = nc;
        }
        size_t l = strlen(name);
        char *e = malloc(l + 2);
        if (!e)
            goto oom;
        memcpy(e, name, l);
        e[l] = is_dir(dirfd(dir), d) ? '/' : '\0';
        e[l + 1] = '\0';
        names[n++] = e;
        errno = 0;
    }
    if (errno != 0) {
        th_sdk_fail(call, "cannot list '%s': %s", rel, strerror(errno));
        goto out;
    }
    if (n > 1)
        qsort(names, n, sizeof *names, by_name);
    int64_t shown = 0;
    for (size_t i = 0; i < n; i++) {
        if (th_sdk_printf(call, "%s\n", names[i]) != 0) {
            if (!th_sdk_cancelled(call)) /* not a list with holes */
                goto oom;
            break;
        }
        shown++;
    }
    th_sdk_meta m;
    th_sdk_meta_init(&m);
    th_sdk_meta_str(&m, "path", rel);
    th_sdk_meta_int(&m, "entries", shown);
    th_sdk_meta_set(&m, call);
    th_sdk_meta_destroy(&m);
    status = TOOLHOST_OK;
    goto out;
oom:
    th_sdk_fail(call, "out of memory");
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (dir)
        closedir(dir);
    if (fd >= 0)
        close(fd);
    free(rel);
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
    char *rel = NULL;
    json_t *j = NULL;
    char *text = NULL;
    int fd = -1, status = TOOLHOST_FAILED;
    struct stat sb;

    /* O_PATH: stats a FIFO or device without opening it */
    if (th_sdk_args_init(&a, args, args_len) != 0 ||
        arg_open(st, &a, call, NULL, TH_SDK_OPEN_STAT, &fd, &sb, &rel) != 0)
        goto out;
    char mode[8], mtime[32];
    struct tm tm;
    snprintf(mode, sizeof mode, "%04o", (unsigned)(sb.st_mode & 07777));
    gmtime_r(&sb.st_mtime, &tm);
    strftime(mtime, sizeof mtime, "%Y-%m-%dT%H:%M:%SZ", &tm);
    j = json_pack("{s:s, s:s, s:I, s:s, s:s}", "path", rel, "type",
                  type_name(sb.st_mode), "size", (json_int_t)sb.st_size,
                  "mode", mode, "mtime", mtime);
    text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (!text) {
        th_sdk_fail(call, "out of memory");
        goto out;
    }
    if (th_sdk_printf(call, "%s\n", text) != 0) {
        th_sdk_fail(call, "out of memory");
        goto out;
    }
    status = TOOLHOST_OK;
out:
    free(text);
    json_decref(j);
    if (fd >= 0)
        close(fd);
    free(rel);
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
                TH_SDK_TAGS("files", "read-only"),
                .validate_args = fs_read_check,
                .long_description =
                    "Returns the file's bytes as they are, from line "
                    "`offset` (0 = the first line) for at most `limit` lines.\n"
                    "Meta tells how many lines came back and whether more "
                    "follow (`more`); continue with offset + lines.  One "
                    "answer holds at most about 1 MiB (max_read_bytes), and "
                    "a very long line is cut with a marker.\n"
                    "Only regular files are read: FIFOs, devices and "
                    "sockets are refused.\n"
                    "Paths are relative to the plugin's root folder; paths "
                    "that leave it (\"..\", absolute paths elsewhere, "
                    "symbolic links pointing outside) are refused."),
    TH_SDK_TOOL("fs_list", fs_list, "Lists a folder, one entry per line.",
                TH_SDK_PARAMS(list_params), TH_SDK_OUTPUT(TEXT, ERROR),
                .flags = TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT,
                TH_SDK_TAGS("files", "read-only"),
                .long_description =
                    "Entries come sorted by name, folders with a trailing "
                    "\"/\". `glob` filters names with shell patterns "
                    "(fnmatch(3)): \"*.c\", \"test_?.txt\", \"[a-c]*\"."),
    TH_SDK_TOOL("fs_stat", fs_stat,
                "Size, type, mode and modification time of a file, as JSON.",
                TH_SDK_PARAMS(stat_params), TH_SDK_OUTPUT(STRUCTURED, ERROR),
                .flags = TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT,
                TH_SDK_TAGS("files", "read-only"),
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
