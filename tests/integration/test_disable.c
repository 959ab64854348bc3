/* test_disable.c - tools taken out of service at run time, with the real
 * binary: host.disable / host.enable / host.disabled over msgpack-RPC
 * (admins only), a disabled tool's callers told why, patterns, the
 * limits of the set, reloads keeping it, `toolhost disable|enable`, and
 * tags: toolsets selecting by them, a tag disabled at once. */
#include <CUnit/CUnit.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

/* The error message of a tool answer ({ok: false, error: {message}}). */
static bool tool_message_has(const msgpack_object *res, const char *needle)
{
    const msgpack_object *m =
        th_rpc_map_get(th_rpc_map_get(res, "error"), "message");
    const char *p;
    size_t n;
    if (!m || !th_rpc_obj_str(m, &p, &n))
        return false;
    char buf[1024];
    snprintf(buf, sizeof buf, "%.*s", (int)n, p);
    return strstr(buf, needle) != NULL;
}

static bool echo_ok(th_rpc_client *c)
{
    rpc_res r;
    bool ok = rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"hi\"}]",
                       &r) == 0 &&
              r.res && rpc_stdout_is(r.res, "hi");
    rpc_res_free(&r);
    return ok;
}

static bool echo_disabled(th_rpc_client *c, const char *why)
{
    rpc_res r;
    bool ok = rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"hi\"}]",
                       &r) == 0 &&
              r.res && rpc_tool_error_is(r.res, "tool_disabled") &&
              tool_message_has(r.res, why) &&
              tool_message_has(r.res, "by uid ");
    rpc_res_free(&r);
    return ok;
}

static void test_rpc(void)
{
    rpc_srv s;
    rpc_opts o = {0};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(echo_ok(c));
    CU_ASSERT(rpc_call(c, "host.disable", "[\"echo\", \"upstream down\"]",
                       &r) == 0 && r.err == NULL);
    rpc_res_free(&r);
    CU_ASSERT(echo_disabled(c, "tool 'echo' is disabled: upstream down"));
    CU_ASSERT(rpc_log_wait(&s, "tools matching 'echo' disabled by uid",
                           rpc_wait_ms()));
    /* the same pattern again: the new reason */
    CU_ASSERT(rpc_call(c, "host.disable", "[\"echo\", \"still down\"]",
                       &r) == 0 && r.err == NULL);
    rpc_res_free(&r);
    CU_ASSERT(echo_disabled(c, "still down"));
    CU_ASSERT(rpc_call(c, "host.disabled", "[]", &r) == 0 && r.res &&
              r.res->type == MSGPACK_OBJECT_ARRAY &&
              r.res->via.array.size == 1 &&
              th_rpc_obj_streq(th_rpc_map_get(&r.res->via.array.ptr[0],
                                              "reason"),
                               "still down"));
    rpc_res_free(&r);
    /* a reload keeps the set */
    CU_ASSERT(rpc_call(c, "host.reload", "[]", &r) == 0 && r.err == NULL);
    rpc_res_free(&r);
    CU_ASSERT(echo_disabled(c, "still down"));
    CU_ASSERT(rpc_call(c, "host.enable", "[\"echo\"]", &r) == 0 &&
              r.err == NULL);
    rpc_res_free(&r);
    CU_ASSERT(echo_ok(c));
    /* a pattern; enable takes it as it was given */
    CU_ASSERT(rpc_call(c, "host.disable", "[\"ech?\", \"patterned\"]",
                       &r) == 0 && r.err == NULL);
    rpc_res_free(&r);
    CU_ASSERT(echo_disabled(c, "patterned"));
    CU_ASSERT(rpc_call(c, "host.enable", "[\"echo\"]", &r) == 0 &&
              rpc_is_error(&r, TH_ENOTFOUND));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "host.enable", "[\"ech?\"]", &r) == 0 &&
              r.err == NULL);
    rpc_res_free(&r);
    CU_ASSERT(echo_ok(c));
    /* bad input: the shape, no reason, a control character */
    static const char *const bad[] = {"[]", "[\"echo\"]", "[\"echo\", \"\"]",
                                      "[\"\", \"why\"]", "[1, \"why\"]",
                                      "[\"echo\", \"a\\nb\"]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CU_ASSERT(rpc_call(c, "host.disable", bad[i], &r) == 0 &&
                  rpc_is_error(&r, TH_EINVAL));
        rpc_res_free(&r);
    }
    CU_ASSERT(echo_ok(c));
    /* at most TH_DISABLED_MAX entries */
    int refused = 0;
    for (int i = 0; i < TH_DISABLED_MAX + 1; i++) {
        char p[64];
        snprintf(p, sizeof p, "[\"t%d\", \"full\"]", i);
        CU_ASSERT(rpc_call(c, "host.disable", p, &r) == 0);
        refused += rpc_is_error(&r, TH_ELIMIT);
        rpc_res_free(&r);
    }
    CU_ASSERT_EQUAL(refused, 1);
    CU_ASSERT(echo_ok(c));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* Runs `toolhost ARGS... --connect unix:SOCK`: its exit status and what
 * it printed (both streams) into out. */
static int cli(rpc_srv *s, char *out, size_t cap, const char *a1,
               const char *a2, const char *a3, const char *a4)
{
    char conn[160];
    snprintf(conn, sizeof conn, "--connect=unix:%s", s->sock);
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        const char *argv[8] = {rpc_server_bin(), a1, a2, a3, a4, NULL};
        size_t n = 1;
        while (argv[n])
            n++;
        argv[n] = conn;
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < cap && (k = read(fd[0], out + got, cap - 1 - got)) > 0)
        got += (size_t)k;
    out[got] = '\0';
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli(void)
{
    rpc_srv s;
    rpc_opts o = {0};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    char out[4096];
    CU_ASSERT_EQUAL(cli(&s, out, sizeof out, "disable", "echo", "--reason",
                        "INC-42"), 0);
    CU_ASSERT(strstr(out, "echo disabled") != NULL);
    CU_ASSERT_EQUAL(cli(&s, out, sizeof out, "call", "echo", "text=hi",
                        NULL), 1);
    CU_ASSERT(strstr(out, "tool 'echo' is disabled: INC-42") != NULL);
    CU_ASSERT_EQUAL(cli(&s, out, sizeof out, "disable", "--list", NULL,
                        NULL), 0);
    CU_ASSERT(strstr(out, "\"reason\": \"INC-42\"") != NULL);
    CU_ASSERT_EQUAL(cli(&s, out, sizeof out, "enable", "echo", NULL, NULL),
                    0);
    CU_ASSERT_EQUAL(cli(&s, out, sizeof out, "call", "echo", "text=hi",
                        NULL), 0);
    CU_ASSERT_EQUAL(cli(&s, out, sizeof out, "enable", "echo", NULL, NULL),
                    1);
    CU_ASSERT(strstr(out, "nothing is disabled under 'echo'") != NULL);
    /* usage: no reason */
    CU_ASSERT_EQUAL(cli(&s, out, sizeof out, "disable", "echo", NULL, NULL),
                    2);
    CU_ASSERT(strstr(out, "give --reason") != NULL);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* Someone who may call tools but is no admin cannot disable them. */
static void test_not_admin(void)
{
    struct passwd *pw = getpwnam("nobody");
    if (!pw || getuid() != 0) {
        fprintf(stderr, "\n  not_admin: needs root and a user 'nobody': "
                "skipped\n");
        return;
    }
    rpc_srv s;
    rpc_opts o = {.socket_mode = "0666"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    CU_ASSERT(chmod(s.dir, 0755) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0)
            _exit(3);
        th_rpc_client *c = rpc_connect(&s);
        rpc_res r;
        int bad = !c || rpc_call(c, "host.disable", "[\"echo\", \"x\"]",
                                 &r) != 0 || !rpc_is_error(&r, TH_EPERM);
        if (c)
            rpc_res_free(&r);
        bad |= !c || rpc_call(c, "host.disabled", "[]", &r) != 0 ||
               !rpc_is_error(&r, TH_EPERM);
        if (c) {
            rpc_res_free(&r);
            th_rpc_client_close(c);
        }
        _exit(bad ? 1 : 0);
    }
    int st;
    waitpid(pid, &st, 0);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CU_ASSERT(rpc_log_wait(&s, "host.disable refused: not an admin",
                           rpc_wait_ms()));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* tags: a toolset that selects by tag gets the tagged tools (a pattern
 * too) and no other; "tag:NAME" disables every tool of the tag. */
static const char tags_config[] =
    "host:\n"
    "  log_level: debug\n"
    "  shutdown_grace: 1s\n"
    "plugins:\n"
    "  - name: echo\n"
    "    path: @BUILD@/plugins/echo.so\n"
    "  - name: text\n"
    "    path: @BUILD@/plugins/text.so\n"
    "    config:\n"
    "      root: @DIR@\n"
    "tags:\n"
    "  - name: talk\n"
    "    tools: [\"echo*\"]\n"
    "  - name: counting\n"
    "    tools: [text_count]\n"
    "toolsets:\n"
    "  - name: chat\n"
    "    tags: [talk]\n";

static bool listed(th_rpc_client *c, const char *tool)
{
    rpc_res r;
    bool has = rpc_call(c, "tools.list", "[]", &r) == 0 && r.res &&
               rpc_find_tool(r.res, tool) != NULL;
    rpc_res_free(&r);
    return has;
}

static void test_tags(void)
{
    rpc_srv s;
    rpc_opts o = {.config = tags_config};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(listed(c, "echo"));
    CU_ASSERT(listed(c, "echo_async"));
    CU_ASSERT(!listed(c, "text_count")); /* tagged, but not "talk" */
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.call", "[\"text_count\", {\"path\": "
                       "\"x\"}]", &r) == 0 && r.res &&
              rpc_tool_error_is(r.res, "unknown_tool"));
    rpc_res_free(&r);
    CU_ASSERT(echo_ok(c));
    CU_ASSERT(rpc_call(c, "host.disable", "[\"tag:talk\", \"quiet hours\"]",
                       &r) == 0 && r.err == NULL);
    rpc_res_free(&r);
    CU_ASSERT(echo_disabled(c, "tool 'echo' is disabled (tag 'talk'): "
                               "quiet hours"));
    CU_ASSERT(rpc_call(c, "host.disable", "[\"tag:\", \"x\"]", &r) == 0 &&
              rpc_is_error(&r, TH_EINVAL));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "host.enable", "[\"tag:talk\"]", &r) == 0 &&
              r.err == NULL);
    rpc_res_free(&r);
    CU_ASSERT(echo_ok(c));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

void th_suite_disable(void)
{
    CU_pSuite s = CU_add_suite("disable", NULL, NULL);
    CU_add_test(s, "rpc", test_rpc);
    CU_add_test(s, "cli", test_cli);
    CU_add_test(s, "not_admin", test_not_admin);
    CU_add_test(s, "tags", test_tags);
}
