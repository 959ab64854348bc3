/* text.c - the text plugin: grep with PCRE2 patterns (bounded in time and
 * memory per line: a caller's pattern is hostile input) and line, word and
 * byte counts, for files below a root folder from the config. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pcre2.h>
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

/* What one pattern may cost.  The caller's pattern is untrusted: a
 * backtracking pattern ((.*)(.*)\2\1x, (a|aa)*c) or a nested counted
 * repeat (((a{0,100}){0,100}){0,100}) must end as an error, not hold a
 * worker for minutes or take gigabytes.  PCRE2's interpreter (no JIT: the
 * JIT ignores the depth and heap limits) counts its steps, so every line
 * costs at most GREP_MATCH_LIMIT steps (~80 ms on one core of the machines
 * of bench/README.md) and GREP_HEAP_KIB of backtracking memory; between
 * lines the call's cancellation (which includes its deadline) is looked at.
 * Compiling is bounded by the pattern's length, the nesting of its
 * parentheses, PCRE2's own 64 KiB cap on a compiled pattern and, for all
 * of the plugin's PCRE2 memory of a call, GREP_MEM_BYTES. */
#define GREP_PATTERN_MAX 4096        /* bytes of pattern */
#define GREP_PARENS_MAX 64           /* nested parentheses */
#define GREP_MATCH_LIMIT 1000000u    /* backtracking steps per line */
#define GREP_DEPTH_LIMIT 10000u      /* nested backtracking points */
#define GREP_HEAP_KIB 8192u          /* backtracking memory per line */
#define GREP_MEM_BYTES (16u << 20)   /* every PCRE2 allocation of a call */

/* PCRE2's allocations for one call, counted against GREP_MEM_BYTES (each
 * block carries its size in front of it). */
typedef struct grep_mem {
    size_t used;
} grep_mem;

typedef union grep_blk {
    size_t n;
    max_align_t align;
} grep_blk;

static void *grep_malloc(size_t n, void *ud)
{
    grep_mem *m = ud;
    if (n > GREP_MEM_BYTES - m->used)
        return NULL;
    grep_blk *b = malloc(sizeof *b + n);
    if (!b)
        return NULL;
    b->n = n;
    m->used += n;
    return b + 1;
}

static void grep_free(void *p, void *ud)
{
    if (!p)
        return;
    grep_blk *b = (grep_blk *)p - 1;
    ((grep_mem *)ud)->used -= b->n;
    free(b);
}

typedef struct grep {
    const text_state *st;
    toolhost_call *call;
    grep_mem mem;
    pcre2_general_context *gc;
    pcre2_code *re;
    pcre2_match_context *mc;
    pcre2_match_data *md;
    int64_t max, matches, files, cuts;
    bool truncated, stop;
    int err;               /* a PCRE2 error that ended the call, 0: none */
    bool failed;           /* out of memory: the answer would be incomplete */
    int64_t err_line;      /* its line */
    char *err_file;        /* its file (owned) */
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
        /* each line may cost up to the match limit: look at the
         * cancellation (and deadline) before every one */
        if (th_sdk_cancelled(g->call)) {
            g->stop = true;
            break;
        }
        int m = pcre2_match(g->re, (PCRE2_SPTR)s, n, 0, 0, g->md, g->mc);
        if (m == PCRE2_ERROR_NOMATCH)
            continue;
        if (m < 0) {
            /* a limit (match, depth, heap, memory): the whole call fails,
             * naming the line, rather than answer a partial search */
            g->err = m;
            g->err_line = lineno;
            g->err_file = strdup(rel);
            g->stop = true;
            break;
        }
        if (g->matches == g->max) {
            g->truncated = g->stop = true;
            break;
        }
        g->matches++;
        /* printed up to a NUL byte, as the line was matched before */
        if (th_sdk_printf(g->call, "%s:%lld:%.*s\n", rel, (long long)lineno,
                          (int)n, s) != 0)
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

/* Compiles the caller's pattern within the limits above; 0, or fails the
 * call with PCRE2's words and where in the pattern. */
static int grep_compile(grep *g, const char *pattern, bool icase)
{
    size_t plen = strlen(pattern);
    if (plen > GREP_PATTERN_MAX) {
        th_sdk_fail(g->call, "pattern too long: %zu bytes (at most %d)", plen,
                    GREP_PATTERN_MAX);
        return -1;
    }
    g->gc = pcre2_general_context_create(grep_malloc, grep_free, &g->mem);
    pcre2_compile_context *cc = g->gc ? pcre2_compile_context_create(g->gc)
                                      : NULL;
    g->mc = g->gc ? pcre2_match_context_create(g->gc) : NULL;
    g->md = g->gc ? pcre2_match_data_create(1, g->gc) : NULL;
    if (!cc || !g->mc || !g->md) {
        pcre2_compile_context_free(cc);
        th_sdk_fail(g->call, "out of memory");
        return -1;
    }
    pcre2_set_max_pattern_length(cc, GREP_PATTERN_MAX);
    pcre2_set_parens_nest_limit(cc, GREP_PARENS_MAX);
    pcre2_set_match_limit(g->mc, GREP_MATCH_LIMIT);
    pcre2_set_depth_limit(g->mc, GREP_DEPTH_LIMIT);
    pcre2_set_heap_limit(g->mc, GREP_HEAP_KIB);
    /* UTF-8 with invalid bytes allowed in the subject (they match
     * nothing): files are not always valid UTF-8 */
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_NEVER_BACKSLASH_C;
    if (icase)
        opts |= PCRE2_CASELESS;
    int ec;
    PCRE2_SIZE at;
    g->re = pcre2_compile((PCRE2_SPTR)pattern, plen, opts, &ec, &at, cc);
    pcre2_compile_context_free(cc);
    if (!g->re) {
        PCRE2_UCHAR msg[256];
        if (pcre2_get_error_message(ec, msg, sizeof msg) < 0)
            snprintf((char *)msg, sizeof msg, "error %d", ec);
        th_sdk_fail(g->call, "invalid pattern '%s': %s at offset %zu "
                    "(PCRE2 syntax)", pattern, (const char *)msg,
                    (size_t)at);
        return -1;
    }
    return 0;
}

static int text_grep(void *state, const toolhost_tool *tool,
                     toolhost_call *call, const uint8_t *args, size_t args_len)
{
    (void)tool;
    grep g = {.st = state, .call = call};
    th_sdk_args a;
    char *rel = NULL;
    const char *pattern;
    int fd = -1, status = TOOLHOST_FAILED;
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
    if (grep_compile(&g, pattern, th_sdk_arg_bool_or(&a, "ignore_case", false)))
        goto out;
    int f = fd;
    fd = -1; /* closed by grep_dir / grep_fd */
    if (S_ISDIR(sb.st_mode))
        grep_dir(&g, f, rel, 0);
    else
        grep_fd(&g, f, rel);
    if (th_sdk_cancelled(call))
        goto out; /* nothing more to say: the answer is dropped */
    if (g.err) {
        PCRE2_UCHAR msg[256];
        if (pcre2_get_error_message(g.err, msg, sizeof msg) < 0)
            snprintf((char *)msg, sizeof msg, "error %d", g.err);
        th_sdk_fail(call,
                    "pattern too costly: %s at %s:%lld (each line may take "
                    "%u backtracking steps and %u KiB); simplify the "
                    "pattern: avoid nested repeats such as (a*)* and "
                    "backreferences after .*",
                    (const char *)msg, g.err_file ? g.err_file : "?",
                    (long long)g.err_line, GREP_MATCH_LIMIT, GREP_HEAP_KIB);
        goto out;
    }
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
    pcre2_code_free(g.re);
    pcre2_match_data_free(g.md);
    pcre2_match_context_free(g.mc);
    pcre2_general_context_free(g.gc);
    free(g.err_file);
    if (fd >= 0)
        close(fd);
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
                 "Regular expression (PCRE2, Perl syntax), matched per line.",
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
                    "The pattern is PCRE2 (Perl syntax: \\s, \\d, \\b, "
                    "(?:...), lazy and possessive repeats, lookaround; "
                    "POSIX classes such as [[:space:]] too), matched as "
                    "UTF-8; at most 4096 bytes.  Each line may cost at "
                    "most 1,000,000 backtracking steps and 8 MiB: a "
                    "pattern that needs more (nested repeats such as "
                    "(a*)*, backreferences after .*) fails the call with "
                    "'pattern too costly' naming the file and line.  Meta "
                    "holds `matches`, `files` and `truncated` (max_matches "
                    "was reached)."),
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
