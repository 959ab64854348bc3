/* text.c - the text plugin: grep with POSIX extended regexes and line,
 * word and byte counts, for files below a root folder from the config. */
#include <ctype.h>
#include <errno.h>
#include <fts.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <toolhost/sdk.h>

/* The plugin's state: its root folder (th_sdk_rooted_init from the
 * config key "root"). */
typedef th_sdk_rooted text_state;

/* Resolves the "path" argument (or `dflt` when absent) inside the root. */
static int arg_path(const text_state *st, th_sdk_args *a, toolhost_call *call,
                    const char *dflt, char **out)
{
    return th_sdk_rooted_arg_path(st, a, call, "path", dflt, out);
}


/* ---- text_grep ----------------------------------------------------------- */

typedef struct grep {
    const text_state *st;
    toolhost_call *call;
    regex_t re;
    int64_t max, matches, files;
    bool truncated, stop;
    char *line;
    size_t cap;
} grep;

/* True when the first bytes hold a NUL: a binary file, skipped. */
static bool binary(FILE *f)
{
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    rewind(f);
    return memchr(buf, '\0', n) != NULL;
}

static void grep_file(grep *g, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return; /* unreadable files are skipped, as grep -s does */
    g->files++;
    if (binary(f)) {
        fclose(f);
        return;
    }
    int64_t lineno = 0;
    ssize_t n;
    while (!g->stop && (n = getline(&g->line, &g->cap, f)) >= 0) {
        if ((++lineno & 4095) == 0 && th_sdk_cancelled(g->call)) {
            g->stop = true; /* a long file: look up now and then */
            break;
        }
        if (n > 0 && g->line[n - 1] == '\n')
            g->line[--n] = '\0';
        if (regexec(&g->re, g->line, 0, NULL, 0) != 0)
            continue;
        if (g->matches == g->max) {
            g->truncated = g->stop = true;
            break;
        }
        g->matches++;
        if (th_sdk_printf(g->call, "%s:%lld:%s\n", th_sdk_rooted_rel(g->st, path),
                          (long long)lineno, g->line) != 0)
            g->stop = true;
    }
    fclose(f);
}

static int by_name(const FTSENT **a, const FTSENT **b)
{
    return strcmp((*a)->fts_name, (*b)->fts_name);
}

/* Walks a folder in name order without following symbolic links (a link
 * could lead outside the root), skipping .git folders. */
static int grep_tree(grep *g, char *path)
{
    char *roots[] = {path, NULL};
    FTS *fts = fts_open(roots, FTS_PHYSICAL | FTS_NOCHDIR, by_name);
    if (!fts)
        return -1;
    FTSENT *e;
    while (!g->stop && (e = fts_read(fts)) != NULL) {
        if (th_sdk_cancelled(g->call)) {
            g->stop = true;
            break;
        }
        if (e->fts_info == FTS_D && e->fts_level > 0 &&
            strcmp(e->fts_name, ".git") == 0)
            fts_set(fts, e, FTS_SKIP);
        else if (e->fts_info == FTS_F)
            grep_file(g, e->fts_path);
    }
    fts_close(fts);
    return 0;
}

static int text_grep(void *state, const toolhost_tool *tool,
                     toolhost_call *call, const uint8_t *args, size_t args_len)
{
    (void)tool;
    grep g = {.st = state, .call = call};
    th_sdk_args a;
    char *path = NULL;
    const char *pattern;
    int status = TOOLHOST_FAILED, rc;
    bool compiled = false;

    if (th_sdk_args_init(&a, args, args_len) != 0 ||
        th_sdk_arg_cstr(&a, "pattern", &pattern) != 0) {
        th_sdk_fail(call, "'pattern' must be a string without NUL bytes");
        goto out;
    }
    if (arg_path(g.st, &a, call, ".", &path) != 0)
        goto out;
    g.max = th_sdk_arg_int_or(&a, "max_matches", 100);
    int cflags = REG_EXTENDED | REG_NOSUB;
    if (th_sdk_arg_bool_or(&a, "ignore_case", false))
        cflags |= REG_ICASE;
    if ((rc = regcomp(&g.re, pattern, cflags)) != 0) {
        char msg[256];
        regerror(rc, &g.re, msg, sizeof msg);
        th_sdk_fail(call, "invalid pattern '%s': %s", pattern, msg);
        goto out;
    }
    compiled = true;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        th_sdk_fail(call, "cannot read '%s': %s", th_sdk_rooted_rel(g.st, path),
                    strerror(errno));
        goto out;
    }
    if (S_ISDIR(sb.st_mode)) {
        if (grep_tree(&g, path) != 0) {
            th_sdk_fail(call, "cannot walk '%s': %s", th_sdk_rooted_rel(g.st, path),
                        strerror(errno));
            goto out;
        }
    } else {
        grep_file(&g, path);
    }
    th_sdk_meta m;
    th_sdk_meta_init(&m);
    th_sdk_meta_int(&m, "matches", g.matches);
    th_sdk_meta_int(&m, "files", g.files);
    th_sdk_meta_bool(&m, "truncated", g.truncated);
    th_sdk_meta_set(&m, call);
    th_sdk_meta_destroy(&m);
    status = TOOLHOST_OK;
out:
    if (compiled)
        regfree(&g.re);
    free(g.line);
    free(path);
    th_sdk_args_destroy(&a);
    return status;
}

static int text_grep_check(void *state, const toolhost_tool *tool,
                           const uint8_t *args, size_t len, char *err,
                           size_t err_size)
{
    (void)state, (void)tool;
    th_sdk_args a;
    int bad = th_sdk_args_init(&a, args, len) != 0 ||
              th_sdk_arg_int_or(&a, "max_matches", 1) < 1;
    th_sdk_args_destroy(&a);
    if (bad)
        snprintf(err, err_size, "'max_matches' must be at least 1");
    return bad;
}

/* ---- text_count ------------------------------------------------------------ */

static int text_count(void *state, const toolhost_tool *tool,
                      toolhost_call *call, const uint8_t *args,
                      size_t args_len)
{
    (void)tool;
    const text_state *st = state;
    th_sdk_args a;
    char *path = NULL;
    FILE *f = NULL;
    int status = TOOLHOST_FAILED;

    if (th_sdk_args_init(&a, args, args_len) != 0 ||
        arg_path(st, &a, call, NULL, &path) != 0)
        goto out;
    struct stat sb;
    f = fopen(path, "rb");
    if (!f || fstat(fileno(f), &sb) != 0 || S_ISDIR(sb.st_mode)) {
        th_sdk_fail(call, "cannot count '%s': %s", th_sdk_rooted_rel(st, path),
                    f ? "it is a folder" : strerror(errno));
        goto out;
    }
    /* wc's rules: lines are newlines, words are runs of non-space. */
    int64_t lines = 0, words = 0, bytes = 0;
    bool in_word = false;
    int c;
    while ((c = getc(f)) != EOF) {
        bytes++;
        if (c == '\n')
            lines++;
        if (isspace(c))
            in_word = false;
        else if (!in_word) {
            in_word = true;
            words++;
        }
    }
    if (ferror(f)) {
        th_sdk_fail(call, "error reading '%s'", th_sdk_rooted_rel(st, path));
        goto out;
    }
    th_sdk_printf(call, "lines: %lld\nwords: %lld\nbytes: %lld\n",
                  (long long)lines, (long long)words, (long long)bytes);
    th_sdk_meta m;
    th_sdk_meta_init(&m);
    th_sdk_meta_int(&m, "lines", lines);
    th_sdk_meta_int(&m, "words", words);
    th_sdk_meta_int(&m, "bytes", bytes);
    th_sdk_meta_set(&m, call);
    th_sdk_meta_destroy(&m);
    status = TOOLHOST_OK;
out:
    if (f)
        fclose(f);
    free(path);
    th_sdk_args_destroy(&a);
    return status;
}

/* ---- tables ------------------------------------------------------------------ */

static const toolhost_param grep_params[] = {
    TH_SDK_PARAM("pattern", STRING,
                 "POSIX extended regular expression, matched per line.",
                 TH_SDK_REQUIRED),
    TH_SDK_PARAM("path", STRING,
                 "File or folder (searched recursively), relative to the root.",
                 TH_SDK_DEFAULT("\".\"")),
    TH_SDK_PARAM("max_matches", INTEGER, "Stop after this many matches.",
                 TH_SDK_DEFAULT("100")),
    TH_SDK_PARAM("ignore_case", BOOLEAN, "Match case-insensitively.",
                 TH_SDK_DEFAULT("false")),
};

static const toolhost_param count_params[] = {
    TH_SDK_PARAM("path", STRING, "File to count, relative to the root.",
                 TH_SDK_REQUIRED),
};

static const toolhost_tool text_tools[] = {
    TH_SDK_TOOL("text_grep", text_grep,
                "Searches files for lines matching a regular expression.",
                TH_SDK_PARAMS(grep_params),
                TH_SDK_OUTPUT(SEARCH_RESULTS, ERROR),
                .flags = TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT,
                .validate_args = text_grep_check,
                .long_description =
                    "Prints one `path:line:text` line per match (paths "
                    "relative to the root, lines from 1), files in name "
                    "order.  Folders are searched recursively; symbolic "
                    "links met on the way, .git folders and binary files "
                    "(a NUL byte in the first 4 KiB) are skipped.\n"
                    "The pattern is POSIX extended (regcomp(3)): use "
                    "[[:space:]] rather than \\s.  Meta holds `matches`, "
                    "`files` and `truncated` (max_matches was reached)."),
    TH_SDK_TOOL("text_count", text_count,
                "Counts the lines, words and bytes of a file (like wc).",
                TH_SDK_PARAMS(count_params), TH_SDK_OUTPUT(TEXT, ERROR),
                .flags = TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT,
                .long_description =
                    "Prints `lines: N`, `words: N` and `bytes: N`, one per "
                    "line; meta holds the same three numbers."),
};

TH_SDK_PLUGIN("text", "1.0.0", text_tools,
              "Searches and counts text in files below a root folder.",
              TH_SDK_CONFIG(th_sdk_rooted_config), .init = th_sdk_rooted_init,
              .fini = th_sdk_rooted_fini)
