/* test_gateway_example.c - docs/gateway.md's "Worked example" run as
 * written: one toolset over the MCP filesystem server and the pet-store
 * API.
 *
 * From the section (the text after its heading) it takes the first
 * ```yaml block, which must be configs/gateway-example.yaml less its
 * opening comment; the first ```lua block, saved as new-pet.lua; and the
 * first ```console block, a transcript: a line starting with "$ " is a
 * command, the lines under it its output (stdout and stderr together),
 * where "..." stands for any text.  It starts build/tests/petstore (the
 * program the doc tells a reader to start) on a free port and
 * `toolhost serve` with the committed config, sets the variables the doc
 * exports (PATH with the build folder first, so `toolhost` is this
 * build's), and runs each command with /bin/sh in the folder holding
 * the script.  Any difference between the doc and what the code does
 * fails the test, naming the command and the line. */
#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/th_test.h"
#include "test_rpc_harness.h"

#define SECTION "\n## Worked example: one toolset over an MCP server and an HTTP API\n"

static bool have_node_modules(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "command -v node >/dev/null 2>&1 && "
             "test -x '%s/node_modules/.bin/mcp-server-filesystem'",
             th_test_source_path("tests/mcp"));
    return th_test_shell_ok(cmd);
}

/* The body of the first block opened by `fence` (e.g. "```lua\n") at or
 * after `from`, malloc()ed; NULL when there is none. */
static char *block(const char *from, const char *fence)
{
    const char *b = strstr(from, fence);
    if (!b)
        return NULL;
    b += strlen(fence);
    const char *e = strstr(b, "\n```");
    if (!e)
        return NULL;
    return strndup(b, (size_t)(e - b) + 1);
}

/* Whether `line` (n bytes) matches `want`, in which each "..." stands for
 * any text (shortest first, backtracking). */
static bool line_matches(const char *line, size_t n, const char *want,
                         size_t wn)
{
    const char *dots = NULL;
    for (size_t i = 0; i + 3 <= wn; i++)
        if (!memcmp(want + i, "...", 3)) {
            dots = want + i;
            break;
        }
    if (!dots)
        return n == wn && !memcmp(line, want, n);
    size_t pre = (size_t)(dots - want);
    if (n < pre || memcmp(line, want, pre))
        return false;
    const char *rest = dots + 3;
    size_t rn = wn - pre - 3;
    for (size_t k = pre; k <= n; k++)
        if (line_matches(line + k, n - k, rest, rn))
            return true;
    return false;
}

/* Whether `out` matches the expected lines `want` (both '\n'-ended);
 * on a difference, says where on stderr. */
static bool output_matches(const char *cmd, const char *out, const char *want)
{
    int no = 1;
    for (;;) {
        const char *oe = strchr(out, '\n'), *we = strchr(want, '\n');
        if (!*out && !*want)
            return true;
        size_t on = oe ? (size_t)(oe - out) : strlen(out);
        size_t wn = we ? (size_t)(we - want) : strlen(want);
        if (!*out || !*want || !line_matches(out, on, want, wn)) {
            fprintf(stderr,
                    "\n$ %s\n  output line %d differs from the doc:\n"
                    "  doc: %.*s\n  got: %.*s\n",
                    cmd, no, *want ? (int)wn : 9,
                    *want ? want : "(nothing)", *out ? (int)on : 9,
                    *out ? out : "(nothing)");
            return false;
        }
        out = oe ? oe + 1 : out + on;
        want = we ? we + 1 : want + wn;
        no++;
    }
}

/* Starts build/tests/petstore --port 0; its pid, the port in *port. */
static pid_t petstore_start(int *port)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        const char *bin = th_test_build_path("tests/petstore");
        execl(bin, bin, "--port", "0", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char line[256];
    size_t n = 0;
    ssize_t r;
    /* one line, or EOF when it could not start */
    while (n + 1 < sizeof line && (r = read(p[0], line + n, 1)) == 1 &&
           line[n] != '\n')
        n++;
    line[n] = '\0';
    close(p[0]);
    if (pid < 0 ||
        sscanf(line, "pet store on http://127.0.0.1:%d/v1", port) != 1) {
        fprintf(stderr, "petstore said [%s]\n", line);
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        return -1;
    }
    return pid;
}

static void test_as_written(void)
{
    if (!have_node_modules())
        TH_SKIP("node or tests/mcp/node_modules (server-filesystem) is not "
                "installed: run scripts/install-deps");
    char *doc = th_test_read_file(th_test_source_path("docs/gateway.md"),
                                  NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    const char *sec = strstr(doc, SECTION);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sec);
    char *yaml = block(sec, "```yaml\n");
    char *lua = block(sec, "```lua\n");
    char *console = block(sec, "```console\n");
    char *cfg = th_test_read_file(
        th_test_source_path("configs/gateway-example.yaml"), NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(yaml);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lua);
    CU_ASSERT_PTR_NOT_NULL_FATAL(console);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    /* the doc shows the committed file, less its opening comment */
    const char *body = strstr(cfg, "\nhost:\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(body);
    if (strcmp(body + 1, yaml))
        fprintf(stderr, "\nthe YAML of docs/gateway.md's worked example is "
                        "not configs/gateway-example.yaml\n");
    CU_ASSERT_STRING_EQUAL(body + 1, yaml);

    int port = 0;
    pid_t store = petstore_start(&port);
    CU_ASSERT_FATAL(store > 0);
    char *dir = th_test_tmpdir();
    char files[512], url[64], path[4096];
    snprintf(files, sizeof files, "%s/files", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(files, 0700), 0);
    free(th_test_write_file(files, "new-pet.txt", "Rex dog\n", (size_t)-1));
    free(th_test_write_file(dir, "new-pet.lua", lua, (size_t)-1));
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", port);
    setenv("TOOLHOST_PLUGINS", th_test_build_path("plugins"), 1);
    setenv("MCP_FILESYSTEM",
           th_test_source_path("tests/mcp/node_modules/.bin/"
                               "mcp-server-filesystem"),
           1);
    setenv("GW_FILES", files, 1);
    setenv("PETSTORE_SPEC", th_test_source_path("tests/openapi/petstore.yaml"),
           1);
    setenv("PETSTORE_URL", url, 1);
    setenv("PETSTORE_TOKEN", "s3cret-token", 1);
    const char *old_path = getenv("PATH");
    snprintf(path, sizeof path, "%s:%s", TH_BUILD_DIR,
             old_path ? old_path : "/usr/bin:/bin");
    char *saved_path = strdup(old_path ? old_path : "/usr/bin:/bin");

    rpc_srv s;
    rpc_opts o = {.config = cfg};
    int up = rpc_srv_start(&s, &o);
    CU_ASSERT_EQUAL(up, 0);
    setenv("GW_SOCKET", s.sock, 1);
    setenv("PATH", path, 1);

    /* the transcript, command by command */
    int commands = 0;
    for (const char *l = console; up == 0 && *l;) {
        CU_ASSERT_FATAL(!strncmp(l, "$ ", 2));
        const char *ce = strchr(l, '\n');
        char *cmd = strndup(l + 2, (size_t)(ce - l - 2));
        const char *want = ce + 1, *we = want;
        while (*we && strncmp(we, "$ ", 2))
            we = strchr(we, '\n') + 1;
        char *expect = strndup(want, (size_t)(we - want));
        char sh[4096];
        snprintf(sh, sizeof sh, "cd '%s' && exec 2>&1 && %s", dir, cmd);
        char *argv[] = {"/bin/sh", "-c", sh, NULL};
        th_test_run r;
        CU_ASSERT_EQUAL(th_test_run_argv(argv, NULL, 30, 0, &r), 0);
        CU_ASSERT(output_matches(cmd, r.out ? r.out : "", expect));
        th_test_run_free(&r);
        free(cmd);
        free(expect);
        commands++;
        l = we;
    }
    CU_ASSERT(commands >= 3);
    /* the operator saw the rate limit bite (docs/gateway.md) */
    CU_ASSERT(rpc_log_count(&s, "refused a call of files_") >= 1);

    setenv("PATH", saved_path, 1);
    free(saved_path);
    const char *vars[] = {"TOOLHOST_PLUGINS", "MCP_FILESYSTEM", "GW_FILES",
                          "PETSTORE_SPEC", "PETSTORE_URL", "PETSTORE_TOKEN",
                          "GW_SOCKET"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
    if (s.pid > 0) {
        CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
        rpc_srv_free(&s);
    }
    kill(store, SIGTERM);
    int st = 0;
    waitpid(store, &st, 0);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    th_test_rmtree(dir);
    free(dir);
    free(cfg);
    free(yaml);
    free(lua);
    free(console);
    free(doc);
}

void th_suite_gateway_example(void)
{
    CU_pSuite s = CU_add_suite("gateway_example", NULL, NULL);
    CU_add_test(s, "as_written", test_as_written);
}
