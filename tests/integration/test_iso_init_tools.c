/* test_iso_init_tools.c - tools from init_tools() (ABI 1.1) under
 * `isolation: process`, through the real `toolhost serve`
 * (docs/isolation.md, "Tools built from the config").  A worker describes
 * its plugin before init() (HELLO) and sends the tools init_tools() gave
 * with its READY; the host serves the first worker's list, and every later
 * worker (workers: N, a restart) must give the same or is refused.
 *
 * exec_two_commands: the exec plugin isolated (workers: 2) with two
 * commands: both listed and called, output right; `toolhost config check`
 * of that config passes.  same_as_in_process: the iso_itools fixture's
 * tools (title, long description, params, flags, output_schema) read the
 * same from an isolated host as from the in-process load of the same
 * config.  restart_agrees / restart_differs: a crashed worker's restart
 * serves the same tools; a restart whose init_tools() gives another list
 * is refused with a log line naming both lists, the host keeps the first
 * list, and a restart with the first list again serves.
 * workers_differ_at_load: workers: 2 whose second worker gives another
 * list: the load is refused with both lists in the log.  reload: a
 * changed exec block (SIGHUP) re-describes the isolated plugin;
 * reload_so: so does a new .so. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/th_test.h"
#include "test_rpc_harness.h"

/* `user: auto` when the tests run as root (an isolated plugin in a root
 * host needs a user of its own). */
static const char *user_line(void)
{
    return geteuid() == 0 ? "    user: auto\n" : "";
}

static const char exec_tools[] =
    "      tools:\n"
    "        - name: say_hello\n"
    "          description: Prints hello and its argument\n"
    "          argv: [/usr/bin/printf, \"hello %%s\", \"{who}\"]\n"
    "          params: [{name: who, description: w, required: true}]\n"
    "        - name: show_args\n"
    "          description: Prints its arguments, one per line\n"
    "          argv: [\"%s\", \"--\", \"{a}\", \"{b}\"]\n"
    "          read_only: true\n"
    "          params:\n"
    "            - {name: a, description: first, required: true}\n"
    "            - {name: b, description: second}\n"
    "%s";

/* The exec block with `more` appended to its tools. */
static void exec_cfg(char *out, size_t cap, const char *host,
                     const char *more)
{
    char tools[4096];
    snprintf(tools, sizeof tools, exec_tools,
             th_test_source_path("tests/fixtures/exec/args.sh"),
             more ? more : "");
    snprintf(out, cap,
             "%s"
             "plugins:\n"
             "  - name: exec\n"
             "    path: %s\n"
             "    isolation: process\n"
             "    workers: 2\n"
             "%s"
             "    config:\n"
             "%s",
             host ? host : "", th_test_build_path("plugins/exec.so"),
             user_line(), tools);
}

static bool log_has_quiet(const rpc_srv *s, const char *needle)
{
    FILE *f = fopen(s->log, "r");
    if (!f)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

static bool wait_log(const rpc_srv *s, const char *needle)
{
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!log_has_quiet(s, needle))
        if (rpc_now_ms() >= end) {
            fprintf(stderr, "\nnot in the log: %s\n", needle);
            rpc_dump_log((rpc_srv *)s);
            return false;
        } else {
            usleep(20000);
        }
    return true;
}

static void test_exec_two_commands(void)
{
    rpc_srv s;
    char cfg[8192];
    exec_cfg(cfg, sizeof cfg, "host:\n  log_level: info\n", NULL);
    rpc_opts o = {.config = cfg};
    CU_ASSERT_EQUAL_FATAL(rpc_srv_start(&s, &o), 0);
    char addr[300];
    snprintf(addr, sizeof addr, "unix:%s", s.sock);
    th_test_run r;
    th_test_toolhost(&r, "list", "--connect", addr, NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "say_hello"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "show_args"));
    if (!strstr(r.out, "show_args"))
        fprintf(stderr, "\nlist: %s\n%s\n", r.out, r.err);
    th_test_run_free(&r);
    for (int i = 0; i < 3; i++) {
        th_test_toolhost(&r, "call", "--connect", addr, "say_hello",
                         "who=; reboot", NULL);
        CU_ASSERT_EQUAL(r.status, 0);
        CU_ASSERT_STRING_EQUAL(r.out, "hello ; reboot");
        if (r.status)
            fprintf(stderr, "\nsay_hello: %s\n%s\n", r.out, r.err);
        th_test_run_free(&r);
        th_test_toolhost(&r, "call", "--connect", addr, "show_args",
                         "a=$(id) x", "b=--help", NULL);
        CU_ASSERT_EQUAL(r.status, 0);
        CU_ASSERT_STRING_EQUAL(r.out, "[--]\n[$(id) x]\n[--help]\n");
        th_test_run_free(&r);
    }
    CU_ASSERT(rpc_log_has(&s, "2 worker processes started"));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);

    /* `toolhost config check` of the same config: unaffected. */
    char *dir = th_test_tmpdir();
    exec_cfg(cfg, sizeof cfg, NULL, NULL);
    char *path = th_test_write_file(dir, "cfg.yaml", cfg, (size_t)-1);
    th_test_toolhost(&r, "config", "check", path, NULL);
    if (r.status != 0)
        fprintf(stderr, "\nconfig check: %s\n%s\n", r.out, r.err);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, ": ok:"));
    th_test_run_free(&r);
    free(path);
    th_test_rmtree(dir);
    free(dir);
}

/* The iso_itools fixture, isolated or not, names from `names_file` when
 * it is given. */
static void iti_cfg(char *out, size_t cap, bool iso, const char *names_file)
{
    char file_line[1200] = "";
    if (names_file)
        snprintf(file_line, sizeof file_line, "      names_file: %s\n",
                 names_file);
    snprintf(out, cap,
             "host:\n"
             "  log_level: info\n"
             "plugins:\n"
             "  - name: iti\n"
             "    path: %s\n"
             "%s%s"
             "    config:\n"
             "      names: iti_a,iti_b\n"
             "%s",
             th_test_build_path("fixtures/iso_itools.so"),
             iso ? "    isolation: process\n    workers: 2\n"
                   "    crash_loop: 1000\n"
                 : "",
             iso ? user_line() : "", file_line);
}

/* `toolhost list --connect ADDR --json` of a host serving `cfg`. */
static char *served_list(const char *cfg)
{
    rpc_srv s;
    rpc_opts o = {.config = cfg};
    if (rpc_srv_start(&s, &o) != 0)
        return NULL;
    char addr[300];
    snprintf(addr, sizeof addr, "unix:%s", s.sock);
    th_test_run r;
    th_test_toolhost(&r, "list", "--connect", addr, "--json", NULL);
    char *out = r.status == 0 ? r.out : NULL;
    if (out)
        r.out = NULL;
    th_test_run_free(&r);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
    return out;
}

static void test_same_as_in_process(void)
{
    char iso_cfg[4096], inp_cfg[4096];
    iti_cfg(iso_cfg, sizeof iso_cfg, true, NULL);
    iti_cfg(inp_cfg, sizeof inp_cfg, false, NULL);

    /* What a client of the host sees. */
    char *iso = served_list(iso_cfg), *inp = served_list(inp_cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(iso);
    CU_ASSERT_PTR_NOT_NULL_FATAL(inp);
    CU_ASSERT_PTR_NOT_NULL(strstr(inp, "\"iti_b\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(inp, "Tool iti_a"));
    CU_ASSERT_PTR_NOT_NULL(strstr(inp, "output_schema"));
    CU_ASSERT_STRING_EQUAL(iso, inp);
    if (strcmp(iso, inp) != 0)
        fprintf(stderr, "\nisolated: %s\nin process: %s\n", iso, inp);
    free(iso);
    free(inp);

    /* What the CLI loading each config sees. */
    char *dir = th_test_tmpdir();
    char *iso_path = th_test_write_file(dir, "iso.yaml", iso_cfg, (size_t)-1);
    char *inp_path = th_test_write_file(dir, "inp.yaml", inp_cfg, (size_t)-1);
    th_test_run a, b;
    th_test_toolhost(&a, "describe", "-c", iso_path, "iti_b", "--json",
                     NULL);
    th_test_toolhost(&b, "describe", "-c", inp_path, "iti_b", "--json",
                     NULL);
    CU_ASSERT_EQUAL(a.status, 0);
    CU_ASSERT_EQUAL(b.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.out, "When to use"));
    CU_ASSERT_STRING_EQUAL(a.out, b.out);
    if (a.status || strcmp(a.out, b.out) != 0)
        fprintf(stderr, "\nisolated: %s%s\nin process: %s\n", a.out, a.err,
                b.out);
    th_test_run_free(&a);
    th_test_run_free(&b);
    th_test_toolhost(&a, "call", "-c", iso_path, "iti_b", "x=42", NULL);
    CU_ASSERT_EQUAL(a.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(a.out, "\"tool\": \"iti_b\", \"x\": 42"));
    if (a.status)
        fprintf(stderr, "\ncall -c: %s%s\n", a.out, a.err);
    th_test_run_free(&a);
    free(iso_path);
    free(inp_path);
    th_test_rmtree(dir);
    free(dir);
}

/* A names file the plugin's user can read. */
static char *names_file(const char *dir, const char *names)
{
    chmod(dir, 0755);
    char *p = th_test_write_file(dir, "names", names, (size_t)-1);
    chmod(p, 0644);
    return p;
}

/* One call of iti tool `tool` with the argument x ("x=N", or NULL for
 * none): its exit status (output in *out when not NULL). */
static int call_iti(const char *addr, const char *tool, const char *x,
                    char **out)
{
    th_test_run r;
    char tmo[32];
    snprintf(tmo, sizeof tmo, "%ds", (int)(th_test_ms(10000) / 1000));
    th_test_toolhost(&r, "call", "--connect", addr, "--timeout", tmo, tool,
                     x, NULL);
    int st = r.status;
    if (out) {
        *out = r.out;
        r.out = NULL;
    }
    th_test_run_free(&r);
    return st;
}

static void test_restarts(void)
{
    char *dir = th_test_tmpdir();
    char *nf = names_file(dir, "iti_a,iti_b\n");
    char cfg[4096];
    iti_cfg(cfg, sizeof cfg, true, nf);
    rpc_srv s;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_EQUAL_FATAL(rpc_srv_start(&s, &o), 0);
    char addr[300];
    snprintf(addr, sizeof addr, "unix:%s", s.sock);
    char *out = NULL;
    CU_ASSERT_EQUAL(call_iti(addr, "iti_a", "x=1", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "\"x\": 1"));
    free(out);

    /* Both workers crash (a call goes to an idle live worker: the second
     * crash is the other's); the next call restarts one, which gives the
     * same list and serves. */
    CU_ASSERT_NOT_EQUAL(call_iti(addr, "iti_crash", NULL, NULL), 0);
    CU_ASSERT_NOT_EQUAL(call_iti(addr, "iti_crash", NULL, NULL), 0);
    CU_ASSERT_EQUAL(call_iti(addr, "iti_b", "x=2", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "\"tool\": \"iti_b\""));
    free(out);
    CU_ASSERT(wait_log(&s, "(restart 1)"));

    /* The file changes under the plugin: the live worker dies, and the
     * restart's init_tools() gives another list: refused, with both
     * lists said. */
    free(names_file(dir, "iti_a,iti_c\n"));
    CU_ASSERT_NOT_EQUAL(call_iti(addr, "iti_crash", NULL, NULL), 0);
    th_test_run r;
    th_test_toolhost(&r, "call", "--connect", addr, "--timeout", "1s",
                     "iti_a", "x=3", NULL);
    CU_ASSERT_NOT_EQUAL(r.status, 0);
    th_test_run_free(&r);
    CU_ASSERT(wait_log(&s, "init_tools() gave a different tool list "
                           "(2 tools: iti_a, iti_c) from the first "
                           "worker's (2 tools: iti_a, iti_b)"));
    CU_ASSERT(wait_log(&s, "cannot restart a worker"));
    /* the refused worker's end is no crash (the crashes of iti_crash each
     * failed their call) */
    CU_ASSERT(!log_has_quiet(&s, "0 calls failed"));
    /* the host keeps the first list */
    th_test_toolhost(&r, "list", "--connect", addr, NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "iti_b"));
    CU_ASSERT_PTR_NULL(strstr(r.out, "\niti_c "));
    th_test_run_free(&r);

    /* The first list again: the next restart (after the backoff) serves. */
    free(names_file(dir, "iti_a,iti_b\n"));
    CU_ASSERT_EQUAL(call_iti(addr, "iti_a", "x=4", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "\"x\": 4"));
    free(out);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
    free(nf);
    th_test_rmtree(dir);
    free(dir);
}

/* workers: 2 whose second init_tools() gives another list (the fixture
 * counts its inits in a file and the odd ones add a tool): the load is
 * refused, the host does not start, and the log says both lists. */
static void test_workers_differ_at_load(void)
{
    char *dir = th_test_tmpdir();
    chmod(dir, 0755);
    char *count = th_test_write_file(dir, "count", "", 0);
    chmod(count, 0666);
    char cfg[4096];
    iti_cfg(cfg, sizeof cfg, true, NULL);
    char line[1200];
    snprintf(line, sizeof line, "      count_file: %s\n", count);
    strncat(cfg, line, sizeof cfg - strlen(cfg) - 1);
    rpc_srv s;
    rpc_opts o = {.config = cfg, .no_wait = true};
    CU_ASSERT_EQUAL_FATAL(rpc_srv_start(&s, &o), 0);
    int st = rpc_srv_wait(&s);
    CU_ASSERT(st != 0 && st != -1);
    CU_ASSERT(rpc_log_has(&s, "refused: its init_tools() gave a different "
                              "tool list (3 tools: iti_a, iti_b, iti_odd) "
                              "from the first worker's (2 tools: iti_a, "
                              "iti_b)"));
    /* the refused worker's end is no crash */
    CU_ASSERT(!log_has_quiet(&s, "calls failed"));
    rpc_srv_free(&s);
    free(count);
    th_test_rmtree(dir);
    free(dir);
}

/* A changed exec block (SIGHUP): the isolated plugin is described again,
 * the new command listed and called. */
static void test_reload(void)
{
    const char host[] = "host:\n  log_level: debug\n  shutdown_grace: 1s\n"
                        "  reload: signal\n";
    char cfg[8192];
    exec_cfg(cfg, sizeof cfg, host, NULL);
    rpc_srv s;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_EQUAL_FATAL(rpc_srv_start(&s, &o), 0);
    char addr[300];
    snprintf(addr, sizeof addr, "unix:%s", s.sock);
    th_test_run r;
    th_test_toolhost(&r, "call", "--connect", addr, "say_hello", "who=a",
                     NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    th_test_run_free(&r);

    exec_cfg(cfg, sizeof cfg, host,
             "        - name: say_bye\n"
             "          description: Prints bye and its argument\n"
             "          argv: [/usr/bin/printf, \"bye %s\", \"{who}\"]\n"
             "          params: [{name: who, description: w, required: "
             "true}]\n");
    free(th_test_write_file(s.dir, "rpc.yaml", cfg, (size_t)-1));
    kill(s.pid, SIGHUP);
    bool listed = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!listed && rpc_now_ms() < end) {
        th_test_toolhost(&r, "list", "--connect", addr, NULL);
        listed = r.status == 0 && strstr(r.out, "say_bye") &&
                 strstr(r.out, "show_args");
        th_test_run_free(&r);
        if (!listed)
            usleep(50000);
    }
    CU_ASSERT(listed);
    if (!listed)
        rpc_dump_log(&s);
    th_test_toolhost(&r, "call", "--connect", addr, "say_bye", "who=b",
                     NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "bye b");
    th_test_run_free(&r);
    th_test_toolhost(&r, "call", "--connect", addr, "show_args", "a=c",
                     "b=d", NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_STRING_EQUAL(r.out, "[--]\n[c]\n[d]\n");
    th_test_run_free(&r);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* A new .so (iso_itools_v2.so, SIGHUP): the new generation's first worker
 * describes the plugin again; the names file changed meanwhile, so its
 * list is the new one (the old generation's workers were never asked). */
static void test_reload_so(void)
{
    char *dir = th_test_tmpdir();
    char *nf = names_file(dir, "iti_a,iti_b\n");
    size_t n = 0;
    char *so = th_test_read_file(th_test_build_path("fixtures/iso_itools.so"),
                                 &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(so);
    char sopath[1200];
    snprintf(sopath, sizeof sopath, "%s/iti.so", dir);
    th_test_replace_file(sopath, so, n, 0755);
    char cfg[4096];
    snprintf(cfg, sizeof cfg,
             "host:\n  log_level: info\n  reload: signal\n"
             "plugins:\n"
             "  - name: iti\n"
             "    path: %s\n"
             "    isolation: process\n"
             "%s"
             "    config:\n"
             "      names_file: %s\n",
             sopath, user_line(), nf);
    rpc_srv s;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_EQUAL_FATAL(rpc_srv_start(&s, &o), 0);
    char addr[300];
    snprintf(addr, sizeof addr, "unix:%s", s.sock);
    CU_ASSERT_EQUAL(call_iti(addr, "iti_b", "x=1", NULL), 0);

    free(names_file(dir, "iti_a,iti_c\n"));
    free(so);
    so = th_test_read_file(th_test_build_path("fixtures/iso_itools_v2.so"),
                           &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(so);
    th_test_replace_file(sopath, so, n, 0755);
    kill(s.pid, SIGHUP);
    bool listed = false;
    th_test_run r;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!listed && rpc_now_ms() < end) {
        th_test_toolhost(&r, "list", "--connect", addr, NULL);
        listed = r.status == 0 && strstr(r.out, "\niti_c ") &&
                 !strstr(r.out, "\niti_b ");
        th_test_run_free(&r);
        if (!listed)
            usleep(50000);
    }
    CU_ASSERT(listed);
    if (!listed)
        rpc_dump_log(&s);
    char *out = NULL;
    CU_ASSERT_EQUAL(call_iti(addr, "iti_c", "x=5", &out), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "\"tool\": \"iti_c\""));
    free(out);
    CU_ASSERT_NOT_EQUAL(call_iti(addr, "iti_b", "x=5", NULL), 0);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
    free(so);
    free(nf);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_iso_init_tools(void);
void th_suite_iso_init_tools(void)
{
    CU_pSuite s = CU_add_suite("iso_init_tools", NULL, NULL);
    CU_add_test(s, "exec_two_commands", test_exec_two_commands);
    CU_add_test(s, "same_as_in_process", test_same_as_in_process);
    CU_add_test(s, "restarts", test_restarts);
    CU_add_test(s, "workers_differ_at_load", test_workers_differ_at_load);
    CU_add_test(s, "reload", test_reload);
    CU_add_test(s, "reload_so", test_reload_so);
}
