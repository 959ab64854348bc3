/* test_cli.c - the toolhost binary run as a subprocess, as a user would:
 * list, describe, call, check, config check, export, exit statuses. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"

static const char *default_cfg(void)
{
    return th_test_source_path("configs/default.yaml");
}

#define RUN(r, ...) th_test_toolhost(&(r), __VA_ARGS__, NULL)

static void test_version_help(void)
{
    th_test_run r;
    RUN(r, "--version");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "toolhost "));
    th_test_run_free(&r);
    RUN(r, "--help");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "call"));
    th_test_run_free(&r);
    const char *cmds[] = {"serve", "list", "describe", "call", "check",
                          "config", "export", "new", "reload"};
    RUN(r, "frobnicate");
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "unknown command"));
    th_test_run_free(&r);
    /* Every command's usage, and `toolhost help CMD` is `toolhost CMD
     * --help` word for word (one code path for every command: under
     * valgrind, where each run takes ~0.6 s, the first three show it; the
     * normal and sanitizer runs check all) */
    size_t n_cmds = getenv("TH_VALGRIND") ? 3 : sizeof cmds / sizeof cmds[0];
    for (size_t i = 0; i < n_cmds; i++) {
        th_test_run h;
        RUN(r, "help", cmds[i]);
        RUN(h, cmds[i], "--help");
        CU_ASSERT_EQUAL(r.status, 0);
        CU_ASSERT_EQUAL(h.status, 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(h.out, "usage: toolhost"));
        CU_ASSERT_STRING_EQUAL(r.out, h.out);
        th_test_run_free(&r);
        th_test_run_free(&h);
    }
    RUN(r, "help", "frobnicate");
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "unknown command 'frobnicate'"));
    th_test_run_free(&r);
}

/* Runs toolhost with its stdout on a pseudo-terminal: what it wrote
 * there (the terminal turns \n into \r\n), at most 10 s. */
static char *run_on_tty(char *const argv[])
{
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0)
        return NULL;
    const char *sname = ptsname(m);
    pid_t pid = fork();
    if (pid == 0) {
        int sl = open(sname, O_RDWR | O_NOCTTY);
        int null = open("/dev/null", O_RDWR);
        if (sl < 0 || null < 0)
            _exit(127);
        dup2(null, 0);
        dup2(sl, 1);
        dup2(null, 2);
        execv(th_test_build_path("toolhost"), argv);
        _exit(127);
    }
    char *out = calloc(1, 4096);
    size_t n = 0;
    for (int waited = 0; out && n < 4095 && waited < 10000;) {
        struct pollfd p = {.fd = m, .events = POLLIN};
        int pr = poll(&p, 1, 100);
        if (pr == 0) {
            waited += 100;
            if (waitpid(pid, NULL, WNOHANG) == pid) {
                pid = -1;
                /* what is left in the terminal, then stop */
                while (poll(&p, 1, 50) == 1 && n < 4095) {
                    ssize_t k = read(m, out + n, 4095 - n);
                    if (k <= 0)
                        break;
                    n += (size_t)k;
                }
                break;
            }
            continue;
        }
        ssize_t k = read(m, out + n, 4095 - n);
        if (k <= 0)
            break; /* EIO: the child closed the terminal */
        n += (size_t)k;
    }
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    close(m);
    return out;
}

static void test_call_echo(void)
{
    th_test_run r;
    /* into a pipe: the tool's bytes, no newline added */
    RUN(r, "call", "-c", default_cfg(), "echo", "text=hello");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "hello");
    th_test_run_free(&r);
    /* on a terminal: the line is ended, once */
    char *argv[] = {"toolhost", "call", "-c", (char *)default_cfg(), "echo",
                    "text=hello", NULL};
    char *tty = run_on_tty(argv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tty);
    CU_ASSERT_STRING_EQUAL(tty, "hello\r\n");
    free(tty);
    char *argv2[] = {"toolhost", "call", "-c", (char *)default_cfg(), "echo",
                     "text=two\n", NULL};
    tty = run_on_tty(argv2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tty);
    CU_ASSERT_STRING_EQUAL(tty, "two\r\n");
    free(tty);
}

static void test_call_missing_param(void)
{
    th_test_run r;
    RUN(r, "call", "-c", default_cfg(), "echo");
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "missing required parameter 'text'"));
    th_test_run_free(&r);
}

static void test_call_errors(void)
{
    th_test_run r;
    RUN(r, "call", "-c", default_cfg(), "no_such_tool");
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "unknown_tool"));
    th_test_run_free(&r);
    RUN(r, "call", "-c", default_cfg(), "echo", "text=a", "bogus=1");
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "bogus"));
    th_test_run_free(&r);
    RUN(r, "call", "-c", default_cfg(), "echo", "--json", "{not json");
    CU_ASSERT_EQUAL(r.status, 2);
    th_test_run_free(&r);
    RUN(r, "call", "echo", "text=x");
    CU_ASSERT_EQUAL(r.status, 2);
    th_test_run_free(&r);
}

static void test_call_json_and_file_args(void)
{
    char *dir = th_test_tmpdir();
    char *f = th_test_write_file(dir, "t.txt", "from a file", (size_t)-1);
    char arg[4200];
    snprintf(arg, sizeof arg, "text=@%s", f);
    th_test_run r;
    RUN(r, "call", "-c", default_cfg(), "echo", arg);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "from a file");
    th_test_run_free(&r);
    RUN(r, "call", "-c", default_cfg(), "echo", "text=@@literal");
    CU_ASSERT_STRING_EQUAL(r.out, "@literal");
    th_test_run_free(&r);
    RUN(r, "call", "-c", default_cfg(), "echo", "--json", "{\"text\": \"js\"}");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "js");
    th_test_run_free(&r);
    free(f);
    th_test_rmtree(dir);
    free(dir);
}

static void test_call_fs_escape(void)
{
    th_test_run r;
    RUN(r, "call", "-c", default_cfg(), "fs_read", "path=../../etc/passwd");
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NULL(strstr(r.out, "root:"));
    CU_ASSERT_TRUE(strlen(r.err) > 0);
    th_test_run_free(&r);
    RUN(r, "call", "-c", default_cfg(), "fs_read", "path=README.md");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "toolhost"));
    th_test_run_free(&r);
}

static void test_call_async_progress(void)
{
    th_test_run r;
    RUN(r, "call", "-c", default_cfg(), "echo_async", "text=hi", "steps=5",
        "delay_ms=20");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "hi");
    int lines = 0;
    for (const char *p = r.err; (p = strstr(p, "progress:")); p++)
        lines++;
    /* the first update acknowledges; the rest arrive as progress (some
     * may be coalesced, never lost at the end) */
    CU_ASSERT_TRUE(lines >= 1 && lines <= 5);
    th_test_run_free(&r);
}

static void test_call_run_code(void)
{
    th_test_run r;
    RUN(r, "call", "-c", default_cfg(), "run_code",
        "code=for i=1,3 do print(tools.echo{text=\"n\"..i}.stdout) end");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "n1\nn2\nn3\n");
    th_test_run_free(&r);
    /* a script error: exit 1, the line in the message */
    RUN(r, "call", "-c", default_cfg(), "run_code", "code=local x = 1\nerror('boom')");
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, ":2:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "boom"));
    th_test_run_free(&r);
    /* code from a file */
    char *dir = th_test_tmpdir();
    char *f = th_test_write_file(dir, "s.lua", "return tools.echo{text='f'}.stdout", (size_t)-1);
    char arg[4200];
    snprintf(arg, sizeof arg, "code=@%s", f);
    RUN(r, "call", "-c", default_cfg(), "run_code", arg, "--meta");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "return_code"));
    th_test_run_free(&r);
    free(f);
    th_test_rmtree(dir);
    free(dir);
}

/* meta describes the output streams only when one was cut, or with
 * --output-info (docs/limits.md, "Meta"). */
static void test_call_output_info(void)
{
    th_test_run r;
    RUN(r, "call", "-c", default_cfg(), "echo", "text=hi", "--meta");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "meta: {}"));
    CU_ASSERT_PTR_NULL(strstr(r.err, "total_bytes"));
    th_test_run_free(&r);
    RUN(r, "call", "-c", default_cfg(), "echo", "text=hi", "--meta",
        "--output-info");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "\"total_bytes\": 2"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "\"stderr\""));
    th_test_run_free(&r);
}

static void test_list_describe(void)
{
    th_test_run r;
    RUN(r, "list", "-c", default_cfg());
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "echo_async"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "fs_read"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "text_grep"));
    th_test_run_free(&r);
    RUN(r, "list", "-c", default_cfg(), "--json");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_EQUAL(r.out[0], '[');
    th_test_run_free(&r);
    RUN(r, "describe", "-c", default_cfg(), "fs_read");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "path"));
    th_test_run_free(&r);
    RUN(r, "describe", "-c", default_cfg(), "nope");
    CU_ASSERT_EQUAL(r.status, 2);
    th_test_run_free(&r);
}

static void test_check(void)
{
    th_test_run r;
    RUN(r, "check", th_test_build_path("plugins/echo.so"));
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "0 errors"));
    th_test_run_free(&r);
    struct {
        const char *fixture, *expect;
    } bad[] = {
        {"fixtures/bad_no_entry.so", "toolhost_plugin_v1"},
        {"fixtures/bad_abi_major.so", "ABI"},
        {"fixtures/bad_struct_small.so", "struct_size"},
        {"fixtures/bad_dup_tool.so", "twice"},
        {"fixtures/bad_tool_name.so", "invalid name"},
        {"fixtures/bad_init_fails.so", "init"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        RUN(r, "check", th_test_build_path(bad[i].fixture));
        CU_ASSERT_EQUAL(r.status, 1);
        if (!strstr(r.out, bad[i].expect))
            fprintf(stderr, "check %s said: %s\n", bad[i].fixture, r.out);
        CU_ASSERT_PTR_NOT_NULL(strstr(r.out, bad[i].expect));
        th_test_run_free(&r);
    }
    char *dir = th_test_tmpdir();
    char *f = th_test_write_file(dir, "text.so", "not an ELF file\n", (size_t)-1);
    RUN(r, "check", f);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "not a shared object"));
    th_test_run_free(&r);
    free(f);
    th_test_rmtree(dir);
    free(dir);
}

static void test_config_check(void)
{
    th_test_run r;
    RUN(r, "config", "check", default_cfg());
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "ok"));
    /* as many tools as `list` shows (the hidden task tools not counted) */
    const char *tc = strstr(r.out, " tools,");
    int n_said = -1;
    if (tc) {
        while (tc > r.out && tc[-1] >= '0' && tc[-1] <= '9')
            tc--;
        n_said = atoi(tc);
    }
    th_test_run_free(&r);
    RUN(r, "list", "-c", default_cfg());
    int rows = -1; /* the header line */
    for (const char *q = r.out; *q; q++)
        rows += *q == '\n';
    CU_ASSERT(n_said > 0);
    CU_ASSERT_EQUAL(n_said, rows);
    th_test_run_free(&r);
    /* A config with log_level: debug does not chatter around the output
     * of the in-process CLI (only warnings and errors). */
    RUN(r, "call", "-c", th_test_source_path("configs/dev.yaml"), "echo",
        "text=quiet");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "quiet");
    CU_ASSERT_PTR_NULL(strstr(r.err, " debug "));
    CU_ASSERT_PTR_NULL(strstr(r.err, " info "));
    th_test_run_free(&r);

    char *dir = th_test_tmpdir();
    char *f = th_test_write_file(dir, "bad.yaml",
                                 "host:\n"
                                 "  workres: 4\n",
                                 (size_t)-1);
    RUN(r, "config", "check", f);
    CU_ASSERT_EQUAL(r.status, 2);
    char expect[4200];
    snprintf(expect, sizeof expect, "%s:2:3:", f);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, expect));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "workers"));
    th_test_run_free(&r);
    free(f);
    f = th_test_write_file(dir, "syntax.yaml", "host: [\n", (size_t)-1);
    RUN(r, "config", "check", f);
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "syntax.yaml:"));
    th_test_run_free(&r);
    free(f);
    th_test_rmtree(dir);
    free(dir);
}

/* `config check` reports every mistake of the file in one run (in the
 * order of the file, up to 20) and warns about permission rules that match
 * no tool. */
/* `config check FILE` fails (2) and its stderr has each of want[], in
 * that order. */
static void expect_check_errors(const char *f, const char *const *want,
                                size_t n)
{
    th_test_run r;
    RUN(r, "config", "check", f);
    CU_ASSERT_EQUAL(r.status, 2);
    const char *at = r.err;
    for (size_t i = 0; i < n; i++) {
        const char *hit = at ? strstr(at, want[i]) : NULL;
        if (!hit)
            fprintf(stderr, "\n  missing (in order): %s\n%s", want[i], r.err);
        CU_ASSERT_PTR_NOT_NULL(hit);
        at = hit;
    }
    th_test_run_free(&r);
}

static void test_config_check_all(void)
{
    char *dir = th_test_tmpdir();
    char yaml[8192];
    snprintf(yaml, sizeof yaml,
             "host:\n"
             "  workers: 0\n"
             "  log_levle: info\n"
             "  default_timeout: forever\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n"
             "    optinal: true\n"
             "  - name: \"bad name!\"\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: default\n"
             "    tools: [\"*\"]\n"
             "    timeout: 3x\n"
             "    permissions:\n"
             "      rules:\n"
             "        - match: \"ech*\"\n"
             "          action: maybe\n",
             th_test_build_path("plugins/echo.so"),
             th_test_build_path("plugins/fs.so"));
    char *f = th_test_write_file(dir, "many.yaml", yaml, (size_t)-1);
    th_test_run r;
    static const char *const want[] = {
        ":2:12: 'workers' is out of range",
        ":3:3: unknown key 'log_levle' in host",
        ":4:20: 'default_timeout' must be a duration",
        ":8:5: unknown key 'optinal' in plugin",
        ":9:11: invalid plugin name 'bad name!'",
        ":14:14: 'timeout' must be a duration",
        ":18:19: invalid value 'maybe' for 'action'",
        ": 7 errors"};
    expect_check_errors(f, want, sizeof want / sizeof want[0]);
    /* --json: the same seven */
    RUN(r, "config", "check", "--json", f);
    CU_ASSERT_EQUAL(r.status, 2);
    int n = 0;
    for (const char *q = strstr(r.out, "\"message\""); q;
         q = strstr(q + 1, "\"message\""))
        n++;
    CU_ASSERT_EQUAL(n, 7);
    th_test_run_free(&r);
    free(f);

    /* 30 mistakes: the first 20, and a line that says so */
    char big[8192] = "host:\n";
    for (int i = 0; i < 30; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big),
                 "  nokey%d: 1\n", i);
    f = th_test_write_file(dir, "cap.yaml", big, (size_t)-1);
    RUN(r, "config", "check", f);
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "nokey19"));
    CU_ASSERT_PTR_NULL(strstr(r.err, "nokey20"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "20 errors (the first 20"));
    th_test_run_free(&r);
    free(f);

    /* what is found once the file is read (plugins that do not load, tool
     * names no plugin provides): every one, not the first alone */
    snprintf(yaml, sizeof yaml,
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n"
             "  - name: gone\n"
             "    path: %s/no-such-a.so\n"
             "  - name: gone2\n"
             "    path: %s/no-such-b.so\n",
             th_test_build_path("plugins/echo.so"), dir, dir);
    static const char *const want_plugins[] = {
        ":4:5: plugin 'gone' ", ":6:5: plugin 'gone2' ", ": 2 errors"};
    f = th_test_write_file(dir, "plugins.yaml", yaml, (size_t)-1);
    expect_check_errors(f, want_plugins, 3);
    free(f);
    snprintf(yaml, sizeof yaml,
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: a\n"
             "    tools: [echo, missing_one]\n"
             "  - name: b\n"
             "    tools: [missing_two]\n",
             th_test_build_path("plugins/echo.so"));
    static const char *const want_tools[] = {
        ":6:19: toolset 'a' names tool 'missing_one'",
        ":8:13: toolset 'b' names tool 'missing_two'", ": 2 errors"};
    f = th_test_write_file(dir, "tools.yaml", yaml, (size_t)-1);
    expect_check_errors(f, want_tools, 3);
    RUN(r, "config", "check", "--json", f);
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "missing_one"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "missing_two"));
    th_test_run_free(&r);
    free(f);

    /* rules that match nothing: warned, the config still valid */
    snprintf(yaml, sizeof yaml,
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: default\n"
             "    tools: [\"*\"]\n"
             "    permissions:\n"
             "      default: ask\n"
             "      rules:\n"
             "        - match: \"ehco*\"\n"
             "          action: allow\n"
             "        - match: \"echo*\"\n"
             "          action: allow\n"
             "        - flags: [destructive]\n"
             "          action: deny\n",
             th_test_build_path("plugins/echo.so"));
    f = th_test_write_file(dir, "rules.yaml", yaml, (size_t)-1);
    RUN(r, "config", "check", f);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "rules.yaml:10:11: the permission "
                                         "rule (match 'ehco*') of toolset "
                                         "'default' matches no tool"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, ":14:11: the permission rule "
                                         "(flags destructive)"));
    CU_ASSERT_PTR_NULL(strstr(r.err, ":12:11:")); /* echo* matches */
    th_test_run_free(&r);
    RUN(r, "config", "check", "--json", f);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"warnings\":[{"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "match 'ehco*'"));
    th_test_run_free(&r);
    free(f);

    /* an isolated plugin's unknown user is named (as root: no such user;
     * otherwise: the user needs a root host) */
    snprintf(yaml, sizeof yaml,
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n"
             "    isolation: process\n"
             "    user: th-no-such-user\n",
             th_test_build_path("plugins/echo.so"));
    f = th_test_write_file(dir, "user.yaml", yaml, (size_t)-1);
    RUN(r, "config", "check", f);
    CU_ASSERT_EQUAL(r.status, 2);
    const char *line = strstr(r.err, "user.yaml:2:5:");
    CU_ASSERT_PTR_NOT_NULL(line);
    CU_ASSERT(line && strstr(line, "'user: th-no-such-user'") != NULL);
    CU_ASSERT_PTR_NULL(strstr(r.err, "(see the log)"));
    th_test_run_free(&r);
    free(f);
    th_test_rmtree(dir);
    free(dir);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A plugin file straight: `describe ./x.so TOOL` as `call ./x.so TOOL`
 * does; `call ./x.so` without a tool asks which; a tool that suspends and
 * never completes, called with --timeout, ends soon after its deadline. */
static void test_plugin_file_edges(void)
{
    const char *so = th_test_build_path("plugins/echo.so");
    th_test_run r;
    RUN(r, "describe", so, "echo");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"text\""));
    th_test_run_free(&r);
    RUN(r, "describe", so, "echo", "--json");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"name\": \"echo\""));
    th_test_run_free(&r);
    RUN(r, "describe", so);
    CU_ASSERT_EQUAL(r.status, 2);
    th_test_run_free(&r);

    RUN(r, "call", so);
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "which tool of "));
    CU_ASSERT_PTR_NULL(strstr(r.err, "exactly one of"));
    th_test_run_free(&r);

    /* cm_never: suspend(), and complete() never comes.  Not under
     * valgrind: the CLI exits on the deadline without waiting for the
     * abandoned call (its threads and host are left to the exit, which
     * valgrind would count as leaks). */
    char *th = strdup(th_test_build_path("toolhost"));
    char *never = strdup(th_test_build_path("fixtures/contract_misuse.so"));
    CU_ASSERT_FATAL(th && never);
    char *argv[] = {th, "call", "--timeout", "1s", never, "cm_never", NULL};
    int64_t t0 = now_ms();
    th_test_run_argv(argv, NULL, 60, 0, &r);
    int64_t took = now_ms() - t0;
    free(th);
    free(never);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "timed out"));
    if (took >= 1000 + (int64_t)th_test_ms(2500))
        fprintf(stderr, "\n  call --timeout 1s took %lld ms\n",
                (long long)took);
    CU_ASSERT(took < 1000 + (int64_t)th_test_ms(2500));
    th_test_run_free(&r);
}

/* `call --connect` and `list --connect` against a real `toolhost serve`:
 * the same output and exit statuses as in-process. */
static void test_connect(void)
{
    char *dir = th_test_tmpdir();
    char sock[4200], addr[4300];
    snprintf(sock, sizeof sock, "%s/th.sock", dir);
    snprintf(addr, sizeof addr, "unix:%s", sock);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 2);
        execl(th_test_build_path("toolhost"), "toolhost", "serve", "-c",
              default_cfg(), "--listen", addr, (char *)NULL);
        _exit(127);
    }
    struct stat st;
    for (int i = 0; i < 500 && stat(sock, &st) != 0; i++)
        usleep(10000);
    CU_ASSERT_EQUAL(stat(sock, &st), 0);

    th_test_run r;
    RUN(r, "call", "--connect", addr, "echo", "text=hi");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "hi");
    th_test_run_free(&r);
    RUN(r, "call", "--connect", addr, "echo");
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "missing required parameter 'text'"));
    th_test_run_free(&r);
    RUN(r, "call", "--connect", addr, "nope");
    CU_ASSERT_EQUAL(r.status, 2);
    th_test_run_free(&r);
    RUN(r, "call", "--connect", addr, "echo_async", "text=done", "steps=3",
        "delay_ms=10");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "done");
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "progress:"));
    /* the acknowledgement is the first update: shown too */
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "step 1/3"));
    th_test_run_free(&r);
    RUN(r, "list", "--connect", addr);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "fs_read"));
    /* the columns of `list -c`, PLUGIN among them */
    CU_ASSERT_EQUAL(strncmp(r.out, "TOOL", 4), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, " PLUGIN "));
    const char *row = strstr(r.out, "\nfs_read ");
    CU_ASSERT_PTR_NOT_NULL(row);
    if (row) {
        char name[32], plugin[32];
        CU_ASSERT_EQUAL(sscanf(row + 1, "%31s %31s", name, plugin), 2);
        CU_ASSERT_STRING_EQUAL(plugin, "fs");
    }
    th_test_run_free(&r);
    RUN(r, "list", "--connect", addr, "--json");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_EQUAL(r.out[0], '[');
    th_test_run_free(&r);

    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    CU_ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    RUN(r, "list", "--connect", addr);
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "cannot connect"));
    th_test_run_free(&r);
    /* A bad address is named once. */
    RUN(r, "call", "--connect", "tcp:nowhere", "echo", "text=x");
    CU_ASSERT_NOT_EQUAL(r.status, 0);
    const char *first = strstr(r.err, "tcp:nowhere");
    CU_ASSERT_PTR_NOT_NULL(first);
    CU_ASSERT(first && strstr(first + 1, "tcp:nowhere") == NULL);
    th_test_run_free(&r);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_cli(void)
{
    CU_pSuite s = CU_add_suite("cli", NULL, NULL);
    CU_add_test(s, "version_help", test_version_help);
    CU_add_test(s, "call_echo", test_call_echo);
    CU_add_test(s, "call_output_info", test_call_output_info);
    CU_add_test(s, "call_missing_param", test_call_missing_param);
    CU_add_test(s, "call_errors", test_call_errors);
    CU_add_test(s, "call_json_and_file_args", test_call_json_and_file_args);
    CU_add_test(s, "call_fs_escape", test_call_fs_escape);
    CU_add_test(s, "call_async_progress", test_call_async_progress);
    CU_add_test(s, "call_run_code", test_call_run_code);
    CU_add_test(s, "list_describe", test_list_describe);
    CU_add_test(s, "check", test_check);
    CU_add_test(s, "config_check", test_config_check);
    CU_add_test(s, "config_check_all", test_config_check_all);
    CU_add_test(s, "plugin_file_edges", test_plugin_file_edges);
    CU_add_test(s, "connect", test_connect);
}
