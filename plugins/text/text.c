/* text.c - the text plugin: grep with POSIX extended regexes and line,
 * word and byte counts, for files below a root folder from the config. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <toolhost/sdk.h>

/* The plugin's state: its root folder, opened as an fd, and its limits
 * (th_sdk_rooted_init from the config). */
typedef th_sdk_rooted text_state;

/* ---- text_grep ----------------------------------------------------------- */

typedef struct grep {
    const text_state *st;
    toolhost_call *call;
    regex_t re;
    int64_t max, matches, files, cuts;
    bool truncated, stop;
    bool failed; /* out of memory: the answer would be incomplete */
    char *line; /* max_line_bytes + 1: the line NUL-terminated */
} grep;

#define MAX_DEPTH 128 /* folder levels text_grep descends */

/* Greps the regular file open on `fd` (closed here); `rel` names it. */
static void grep_fd(grep *g, int fd, const char *rel)
{
    th_sdk_lines r;
    g->files++;
    if (th_sdk_lines_init(&r, fd, (size_t)g->st->max_line_bytes) != 0) {
        g->stop = g->failed = true;
        goto out;
    }
    /* A NUL byte in the first 4 KiB: a binary file, skipped. */
    char head[4096];
    ssize_t hn = pread(fd, head, sizeof head, 0);
    if (hn > 0 && memchr(head, '\0', (size_t)hn))
        goto out;
    int64_t lineno = 0;
    const char *s;
    size_t n;
    bool cut;
    int rc;
    while (!g->stop && (rc = th_sdk_lines_next(&r, g->call, &s, &n, &cut)) == 1) {
        lineno++;
        g->cuts += cut;
        if (n > 0 && s[n - 1] == '\n')
            n--;
        memcpy(g->line, s, n);
        g->line[n] = '\0';
        /* glibc's regexec() returns REG_NOMATCH for REG_ESPACE too: an
         * allocation that failed inside it shows only in errno */
        errno = 0;
        int m = regexec(&g->re, g->line, 0, NULL, 0);
        if (m != 0 && m != REG_NOMATCH) {
            g->stop = g->failed = true;
            break;
        }
        if (m == REG_NOMATCH) {
            if (errno == ENOMEM) {
                g->stop = g->failed = true;
                break;
            }
            continue;
        }
        if (g->matches == g->max) {
            g->truncated = g->stop = true;
            break;
        }
        g->matches++;
        if (th_sdk_printf(g->call, "%s:%lld:%s\n", rel, (long long)lineno,
                          g->line) != 0)
            g->stop = g->failed = true; /* (cancelled: checked after) */
    }
    if (!g->stop && rc == TH_SDK_ECANCELLED)
        g->stop = true;
out:
    th_sdk_lines_destroy(&r);
    close(fd);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Greps the folder open on `dfd` (closed here) in name order: every entry
 * is opened with openat(O_NOFOLLOW|O_NONBLOCK) from the folder's fd, so
 * symbolic links met on the way are skipped (a link could lead outside
 * the root) and only regular files and folders are read; .git folders
 * are skipped. */
static void grep_dir(grep *g, int dfd, const char *rel, int depth)
{
    DIR *dir = fdopendir(dfd);
    char **names = NULL;
    size_t n = 0, cap = 0;
    if (!dir) {
        close(dfd);
        return;
    }
    struct dirent *d;
    while ((d = readdir(dir)) != NULL) {
        if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, "..") ||
            d->d_type == DT_LNK)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            char **t = realloc(names, nc * sizeof *t);
            if (!t)
                goto oom;
            names = t;
            cap = nc;
        }
        if (!(names[n] = strdup(d->d_name)))
            goto oom;
        n++;
    }
    if (n > 1)
        qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n && !g->stop; i++) {
        if (th_sdk_cancelled(g->call)) {
            g->stop = true;
            break;
        }
        int fd = openat(dirfd(dir), names[i],
                        O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
                            O_CLOEXEC);
        struct stat sb;
        if (fd < 0)
            continue; /* unreadable, or a link: skipped, as grep -s does */
        if (fstat(fd, &sb) != 0) {
            close(fd);
            continue;
        }
        size_t rl = strlen(rel), nl = strlen(names[i]);
        char *sub = malloc(rl + nl + 2);
        if (!sub) {
            close(fd);
            goto oom;
        }
        if (strcmp(rel, ".") == 0)
            memcpy(sub, names[i], nl + 1);
        else
            snprintf(sub, rl + nl + 2, "%s/%s", rel, names[i]);
        if (S_ISDIR(sb.st_mode) && strcmp(names[i], ".git") != 0 &&
            depth < MAX_DEPTH)
            grep_dir(g, fd, sub, depth + 1);
        else if (S_ISREG(sb.st_mode) &&
                 fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0)
            grep_fd(g, fd, sub);
        else
            close(fd); /* FIFOs, devices, sockets: never read */
        free(sub);
    }
    goto out;
oom:
    g->stop = g->failed = true;
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(dir);
}

static int text_grep(void *state, const toolhost_tool *tool,
                     toolhost_call *call, const uint8_t *args, size_t args_len)
{
    (void)tool;
    grep g = {.st = state, .call = call};
    th_sdk_args a;
    char *rel = NULL;
    const char *pattern;
    int fd = -1, status = TOOLHOST_FAILED, rc;
    bool compiled = false;
    struct stat sb;

    if (th_sdk_args_init(&a, args, args_len) != 0 ||
        th_sdk_arg_cstr(&a, "pattern", &pattern) != 0) {
        th_sdk_fail(call, "'pattern' must be a string without NUL bytes");
        goto out;
    }
    if (th_sdk_rooted_arg_open(g.st, &a, call, "path", ".",
                               TH_SDK_OPEN_FILE | TH_SDK_OPEN_DIR, &fd, &sb,
                               &rel) != 0)
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
    if (!(g.line = malloc((size_t)g.st->max_line_bytes + 1))) {
        th_sdk_fail(call, "out of memory");
        goto out;
    }
    int f = fd;
    fd = -1; /* closed by grep_dir / grep_fd */
    if (S_ISDIR(sb.st_mode))
        grep_dir(&g, f, rel, 0);
    else
        grep_fd(&g, f, rel);
    if (th_sdk_cancelled(call))
        goto out; /* nothing more to say: the answer is dropped */
    if (g.failed) { /* what was found is not all there is */
        th_sdk_fail(call, "out of memory while searching");
        goto out;
    }
    if (g.cuts)
        th_sdk_log(g.st->host, TOOLHOST_LOG_INFO,
                   "text_grep: %lld line(s) cut at max_line_bytes (%lld)",
                   (long long)g.cuts, (long long)g.st->max_line_bytes);
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
    if (fd >= 0)
        close(fd);
    free(g.line);
    free(rel);
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
    char *rel = NULL;
    int fd = -1, status = TOOLHOST_FAILED;

    if (th_sdk_args_init(&a, args, args_len) != 0 ||
        th_sdk_rooted_arg_open(st, &a, call, "path", NULL, TH_SDK_OPEN_FILE,
                               &fd, NULL, &rel) != 0)
        goto out;
    /* wc's rules: lines are newlines, words are runs of non-space.  Read
     * in chunks, looking at the cancellation before each. */
    int64_t lines = 0, words = 0, bytes = 0;
    bool in_word = false;
    unsigned char buf[65536];
    for (;;) {
        if (th_sdk_cancelled(call))
            goto out; /* nothing more to say: the answer is dropped */
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            th_sdk_fail(call, "error reading '%s': %s", rel, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        bytes += n;
        for (ssize_t i = 0; i < n; i++) {
            int c = buf[i];
            if (c == '\n')
                lines++;
            if (isspace(c))
                in_word = false;
            else if (!in_word) {
                in_word = true;
                words++;
            }
        }
    }
    if (th_sdk_printf(call, "lines: %lld\nwords: %lld\nbytes: %lld\n",
                      (long long)lines, (long long)words,
                      (long long)bytes) != 0) {
        th_sdk_fail(call, "out of memory"); /* not an empty answer */
        goto out;
    }
    th_sdk_meta m;
    th_sdk_meta_init(&m);
    th_sdk_meta_int(&m, "lines", lines);
    th_sdk_meta_int(&m, "words", words);
    th_sdk_meta_int(&m, "bytes", bytes);
    th_sdk_meta_set(&m, call);
    th_sdk_meta_destroy(&m);
    status = TOOLHOST_OK;
out:
    if (fd >= 0)
        close(fd);
    free(rel);
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
                    "(a NUL byte in the first 4 KiB) are skipped, and so are "
                    "FIFOs, devices and sockets.\n"
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
