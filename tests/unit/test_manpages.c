/* test_manpages.c - the man pages keep up with the source: every command
 * of the CLI's table (host/cli/main.c) has a subsection in toolhost(1)
 * with every long option of its getopt table (host/cli/<file>.c, the
 * remote options of cli.h included) and every "--option" it compares by
 * hand; every key the config reader knows (th_config_each_key, from the
 * key tables of host/core/config/config.c) is named in bold in its section of
 * toolhost.yaml(5).  The lists come from the source, never from a hand
 * list here: a new option or key without an entry fails. */
#include <CUnit/CUnit.h>
#include <ctype.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"
#include "th/config.h"

static char *read_src(const char *rel)
{
    size_t len;
    char *s = th_test_read_file(th_test_source_path(rel), &len);
    if (!s)
        fprintf(stderr, "\n  cannot read %s\n", rel);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    return s;
}

/* The text of the section that starts with a line "<head> <name>" (or
 * "<head> <name> ...", quotes allowed) up to the next .SH or .SS line, as
 * a new string; NULL when there is none. */
static char *section(const char *page, const char *head, const char *name)
{
    size_t hl = strlen(head), nl = strlen(name);
    for (const char *l = page; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : l) {
        if (strncmp(l, head, hl) != 0 || l[hl] != ' ')
            continue;
        const char *w = l + hl + 1;
        if (*w == '"')
            w++;
        if (strncasecmp(w, name, nl) != 0 ||
            (w[nl] != '\n' && w[nl] != ' ' && w[nl] != '"'))
            continue;
        const char *end = l + 1;
        for (;;) {
            end = strchr(end, '\n');
            if (!end || strncmp(end + 1, ".SH", 3) == 0 ||
                strncmp(end + 1, ".SS", 3) == 0)
                break;
            end++;
        }
        size_t n = end ? (size_t)(end - l) : strlen(l);
        return strndup(l, n);
    }
    return NULL;
}

/* "--name" as roff writes it: "\-\-name" (a '-' in the name too). */
static bool has_option(const char *text, const char *opt)
{
    char roff[160] = "\\-\\-";
    for (const char *c = opt; *c && strlen(roff) < sizeof roff - 3; c++) {
        if (*c == '-')
            strcat(roff, "\\-");
        else
            strncat(roff, c, 1);
    }
    for (const char *p = strstr(text, roff); p; p = strstr(p + 1, roff)) {
        char after = p[strlen(roff)];
        if (!isalnum((unsigned char)after) && after != '\\' && after != '_')
            return true;
    }
    return false;
}

/* The word in bold: a line of .B/.BR/.RB/.BI/.IB or \fB...\fR. */
static bool has_bold(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word)) {
        char before = p > text ? p[-1] : '\n', after = p[n];
        if (isalnum((unsigned char)before) || before == '_' ||
            isalnum((unsigned char)after) || after == '_')
            continue;
        if (p >= text + 3 && strncmp(p - 3, "\\fB", 3) == 0)
            return true;
        const char *line = p;
        while (line > text && line[-1] != '\n')
            line--;
        if (strncmp(line, ".B ", 3) == 0 || strncmp(line, ".BR ", 4) == 0 ||
            strncmp(line, ".RB ", 4) == 0 || strncmp(line, ".BI ", 4) == 0 ||
            strncmp(line, ".IB ", 4) == 0)
            return true;
    }
    return false;
}

/* Calls fn for each match of group 1 of `re` in text[from, to). */
static void each_match(const char *re, const char *from, const char *to,
                       void (*fn)(const char *word, void *ud), void *ud)
{
    regex_t rx;
    CU_ASSERT_EQUAL_FATAL(regcomp(&rx, re, REG_EXTENDED), 0);
    regmatch_t m[2];
    const char *p = from;
    while (p < to && regexec(&rx, p, 2, m, p == from ? 0 : REG_NOTBOL) == 0 &&
           p + m[0].rm_eo <= to) {
        char word[128];
        int n = (int)(m[1].rm_eo - m[1].rm_so);
        snprintf(word, sizeof word, "%.*s", n, p + m[1].rm_so);
        fn(word, ud);
        p += m[0].rm_eo;
    }
    regfree(&rx);
}

typedef struct opt_check {
    const char *page;    /* toolhost(1) */
    const char *section; /* the command's .SS text */
    const char *cmd;
    const char *remote;  /* cli.h */
    int checked, missing;
} opt_check;

static void check_option(const char *opt, void *ud)
{
    opt_check *oc = ud;
    if (strcmp(opt, "help") == 0)
        return; /* every command's; said once in OPTIONS */
    oc->checked++;
    if (!oc->section || !has_option(oc->section, opt)) {
        oc->missing++;
        fprintf(stderr, "\n  toolhost.1: command '%s' has no entry for "
                        "--%s", oc->cmd, opt);
    }
}

static void remote_options(const char *macro, void *ud)
{
    (void)macro;
    opt_check *oc = ud;
    const char *start = strstr(oc->remote, "#define CLI_REMOTE_OPTIONS");
    CU_ASSERT_PTR_NOT_NULL_FATAL(start);
    const char *end = strstr(start, "\n\n");
    each_match("\\{\"([a-z0-9-]+)\", *(no|required|optional)_argument", start,
               end ? end : start + strlen(start), check_option, oc);
}

typedef struct cmd_list {
    char names[32][16];
    int n;
} cmd_list;

static void add_command(const char *name, void *ud)
{
    cmd_list *l = ud;
    if (l->n < 32)
        snprintf(l->names[l->n++], sizeof l->names[0], "%s", name);
}

static bool is_command(const cmd_list *l, const char *name)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->names[i], name) == 0)
            return true;
    return false;
}

/* The options of each command: in each host/cli/NAME.c, the getopt tables
 * and "--x" literals from `int cli_CMD(int argc, char **argv)` to the
 * next such entry point. */
static void commands_and_options(void)
{
    char *page = read_src("docs/man/toolhost.1");
    char *main_c = read_src("host/cli/main.c");
    char *remote = read_src("host/cli/cli.h");
    const char *t = strstr(main_c, "commands[] = {");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    cmd_list cmds = {.n = 0};
    each_match("\\{\"([a-z]+)\", *\"", t, strstr(t, "};"), add_command,
               &cmds);
    CU_ASSERT_TRUE(cmds.n >= 10);
    int missing = 0, checked = 0;
    for (int i = 0; i < cmds.n; i++) {
        char *sec = section(page, ".SS", cmds.names[i]);
        if (!sec) {
            fprintf(stderr, "\n  toolhost.1: no subsection (.SS) for command "
                            "'%s'", cmds.names[i]);
            missing++;
        }
        free(sec);
    }
    /* the options each command's source gives */
    static const char *const files[] = {"call", "check", "describe", "list",
                                        "mcp", "new", "remote", "serve"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char rel[64];
        snprintf(rel, sizeof rel, "host/cli/%s.c", files[f]);
        char *src = read_src(rel);
        regex_t rx;
        CU_ASSERT_EQUAL_FATAL(
            regcomp(&rx, "\nint cli_([a-z]+)\\(int argc, char \\*\\*argv\\)",
                    REG_EXTENDED),
            0);
        regmatch_t m[2];
        const char *p = src;
        while (regexec(&rx, p, 2, m, 0) == 0) {
            char cmd[32];
            snprintf(cmd, sizeof cmd, "%.*s", (int)(m[1].rm_eo - m[1].rm_so),
                     p + m[1].rm_so);
            const char *from = p + m[0].rm_eo, *to = from;
            regmatch_t n2[2];
            to = regexec(&rx, from, 2, n2, 0) == 0 ? from + n2[0].rm_so
                                                   : from + strlen(from);
            if (is_command(&cmds, cmd)) {
                char *sec = section(page, ".SS", cmd);
                opt_check oc = {.page = page, .section = sec, .cmd = cmd,
                                .remote = remote};
                each_match("\\{\"([a-z0-9-]+)\", *(no|required|optional)_"
                           "argument",
                           from, to, check_option, &oc);
                each_match("\"--([a-z0-9-]+)\"", from, to, check_option, &oc);
                each_match("(CLI_REMOTE_OPTIONS),", from, to, remote_options,
                           &oc);
                missing += oc.missing;
                checked += oc.checked;
                free(sec);
            }
            p = to;
        }
        regfree(&rx);
        free(src);
    }
    CU_ASSERT_TRUE(checked >= 30); /* the scan found the tables */
    /* the global options main.c compares by hand */
    opt_check g = {.page = page, .section = page, .cmd = "(global)"};
    each_match("\"--([a-z0-9-]+)\"", main_c, main_c + strlen(main_c),
               check_option, &g);
    CU_ASSERT_TRUE(g.checked >= 2);
    missing += g.missing;
    /* the files toolhost runs: a plugin .so straight (call ./X.so) and
     * the metrics listener have their words in the page */
    CU_ASSERT_PTR_NOT_NULL(strstr(page, "call ./"));
    CU_ASSERT_PTR_NOT_NULL(strstr(page, "/metrics"));
    CU_ASSERT_EQUAL(missing, 0);
    free(page);
    free(main_c);
    free(remote);
}

typedef struct key_check {
    const char *page;
    int checked, missing;
} key_check;

static void check_key(const char *path, void *ud)
{
    key_check *kc = ud;
    char top[64], leaf[64], parent[64] = "";
    const char *dot = strchr(path, '.');
    snprintf(top, sizeof top, "%.*s", (int)(dot ? dot - path : (long)strlen(path)),
             path);
    const char *last = strrchr(path, '.');
    snprintf(leaf, sizeof leaf, "%s", last ? last + 1 : path);
    if (last && last != dot) { /* three steps or more: the one before */
        const char *q = last - 1;
        while (q > path && *q != '.')
            q--;
        snprintf(parent, sizeof parent, "%.*s", (int)(last - q - 1), q + 1);
    }
    /* per-type limits of a toolset or override: the types are LIMITS' */
    if (strcmp(parent, "limits") == 0)
        return;
    kc->checked++;
    char *sec = section(kc->page, ".SH", top);
    bool ok = sec && (dot ? has_bold(sec, leaf) : true);
    if (!ok) {
        kc->missing++;
        fprintf(stderr, "\n  toolhost.yaml.5: no entry for '%s'%s", path,
                sec ? "" : " (no section)");
    }
    free(sec);
}

static void config_keys(void)
{
    char *page = read_src("docs/man/toolhost.yaml.5");
    key_check kc = {.page = page};
    th_config_each_key(check_key, &kc);
    CU_ASSERT_TRUE(kc.checked >= 100);
    CU_ASSERT_EQUAL(kc.missing, 0);
    free(page);
}

/* The scanner finds what it should: a page without the entries fails. */
static void scanner_catches_gaps(void)
{
    const char *page = ".SH HOST\n.TP\n.B workers\nWorker threads.\n"
                       ".SH TOOLSETS\nThe name is a string.\n"
                       ".SS call\n.BR \\-\\-timeout \" \" duration\n";
    char *host = section(page, ".SH", "host");
    CU_ASSERT_PTR_NOT_NULL_FATAL(host);
    CU_ASSERT_TRUE(has_bold(host, "workers"));
    CU_ASSERT_FALSE(has_bold(host, "queue_size"));
    CU_ASSERT_FALSE(has_bold(host, "work"));
    free(host);
    char *ts = section(page, ".SH", "toolsets");
    CU_ASSERT_FALSE(has_bold(ts, "name")); /* prose is not an entry */
    free(ts);
    CU_ASSERT_PTR_NULL(section(page, ".SH", "mcp"));
    char *call = section(page, ".SS", "call");
    CU_ASSERT_TRUE(has_option(call, "timeout"));
    CU_ASSERT_FALSE(has_option(call, "time"));
    CU_ASSERT_FALSE(has_option(call, "meta"));
    free(call);
}

void th_suite_manpages(void)
{
    CU_pSuite s = CU_add_suite("manpages", NULL, NULL);
    CU_add_test(s, "commands_and_options", commands_and_options);
    CU_add_test(s, "config_keys", config_keys);
    CU_add_test(s, "scanner_catches_gaps", scanner_catches_gaps);
}
