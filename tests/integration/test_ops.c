/* test_ops.c - operations with the real binary: admin rights (host.reload
 * refused to a toolset user who is no admin, with the rule named; granted
 * by admin.groups), the JSON log with real keys, journal priorities when
 * stderr is the journal, per-tool stats across a plugin's removal and
 * return, plugin-load errors at their place in the config, and
 * `config check --json`. */
#include <CUnit/CUnit.h>
#include <grp.h>
#include <jansson.h>
#include <poll.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

/* The error [code, message] of a response: code (0 when none) and the
 * message into msg. */
static int64_t err_of(const msgpack_object *m, char *msg, size_t n)
{
    msg[0] = '\0';
    if (!m)
        return 1;
    const msgpack_object *e = &m->via.array.ptr[2];
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2)
        return 0;
    const char *s;
    size_t l;
    if (th_rpc_obj_str(&e->via.array.ptr[1], &s, &l))
        snprintf(msg, n, "%.*s", (int)l, s);
    return e->via.array.ptr[0].via.i64;
}

/* Runs `fn` in a child as `nobody`: its exit status, or -1 when not
 * possible here (not root, no such user). */
static int as_nobody(rpc_srv *s, int (*fn)(rpc_srv *s, void *ud), void *ud)
{
    struct passwd *pw = getpwnam("nobody");
    if (geteuid() != 0 || !pw)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setgid(pw->pw_gid) != 0 ||
            setuid(pw->pw_uid) != 0)
            _exit(100);
        _exit(fn(s, ud));
    }
    int st = 0;
    int64_t end = rpc_now_ms() + 2 * rpc_wait_ms();
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (rpc_now_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return 99;
        }
        usleep(10000);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* nobody asks for host.reload: ud is NULL when it must work, else a
 * piece of the refusal's message. */
static int nobody_reloads(rpc_srv *s, void *ud)
{
    const char *want = ud;
    rpc_raw w;
    if (rpc_raw_open(&w, s) != 0)
        return 1;
    int fail = 0;
    /* nobody may use the toolset "public" */
    rpc_raw_request(&w, 1, "tools.call", "[\"echo\", {\"text\": \"e\"}]");
    char msg[1024];
    if (err_of(rpc_raw_response(&w, 1, rpc_wait_ms()), msg, sizeof msg))
        fail |= 2;
    rpc_raw_request(&w, 2, "host.reload", "[]");
    int64_t code = err_of(rpc_raw_response(&w, 2, 2 * rpc_wait_ms()), msg,
                          sizeof msg);
    if (want && (code != TH_EPERM || !strstr(msg, want))) {
        fprintf(stderr, "\nnobody's reload: %lld '%s', wanted '%s'\n",
                (long long)code, msg, want);
        fail |= 4;
    }
    if (!want && code != 0) {
        fprintf(stderr, "\nnobody's reload refused: %lld %s\n",
                (long long)code, msg);
        fail |= 8;
    }
    rpc_raw_close(&w);
    return fail;
}

static bool call_ok(rpc_srv *s, const char *method, const char *json)
{
    th_rpc_client *c = rpc_connect(s);
    if (!c)
        return false;
    rpc_res r;
    bool ok = rpc_call(c, method, json, &r) == 0 && !r.err;
    /* a reload's result and a tool's result say ok inside */
    const msgpack_object *k = ok ? th_rpc_map_get(r.res, "ok") : NULL;
    if (k && k->type == MSGPACK_OBJECT_BOOLEAN)
        ok = k->via.boolean;
    rpc_res_free(&r);
    th_rpc_client_close(c);
    return ok;
}

static int start_open(rpc_srv *s, const char *host_extra)
{
    rpc_opts o = {.socket_mode = "0666", .host_extra = host_extra};
    if (rpc_srv_start(s, &o) != 0)
        return -1;
    chmod(s->dir, 0755);
    return 0;
}

/* An admin (root) sees and cancels nobody's toolset-scoped task over RPC;
 * before, another uid's task was invisible even to root. */
static void test_admin_tasks(void)
{
    struct passwd *pw = getpwnam("nobody");
    if (geteuid() != 0 || !pw) {
        TH_SKIP("needs root and a 'nobody' user");
        return;
    }
    rpc_srv s;
    rpc_opts o = {.socket_mode = "0666",
                  .public_extra = "    scope: toolset\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    chmod(s.dir, 0755);
    int up[2], down[2];
    CU_ASSERT_FATAL(pipe(up) == 0 && pipe(down) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) { /* nobody starts a long task and holds its session */
        close(up[0]);
        close(down[1]);
        if (setgroups(0, NULL) != 0 || setgid(pw->pw_gid) != 0 ||
            setuid(pw->pw_uid) != 0)
            _exit(100);
        rpc_raw w;
        if (rpc_raw_open(&w, &s) != 0)
            _exit(101);
        rpc_raw_request(&w, 1, "tools.call",
                        "[\"echo_async\", {\"text\": \"x\", \"steps\": 2, "
                        "\"delay_ms\": 20000}]");
        const msgpack_object *m = rpc_raw_response(&w, 1, rpc_wait_ms());
        const msgpack_object *id =
            m ? th_rpc_map_get(&m->via.array.ptr[3], "task_id") : NULL;
        uint64_t task = id ? id->via.u64 : 0;
        if (write(up[1], &task, sizeof task) != (ssize_t)sizeof task)
            _exit(102);
        struct pollfd pf = {.fd = down[0], .events = POLLIN};
        poll(&pf, 1, 2 * rpc_wait_ms()); /* until the parent is done */
        rpc_raw_close(&w);
        _exit(task ? 0 : 103);
    }
    close(up[1]);
    close(down[0]);
    uint64_t task = 0;
    struct pollfd pf = {.fd = up[0], .events = POLLIN};
    if (poll(&pf, 1, 2 * rpc_wait_ms()) == 1 &&
        read(up[0], &task, sizeof task) != (ssize_t)sizeof task)
        task = 0;
    CU_ASSERT(task != 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    /* it sees it (tasks.result: the task store's view) */
    char p[64];
    snprintf(p, sizeof p, "[%llu]", (unsigned long long)task);
    rpc_raw_request(&w, 2, "tasks.result", p);
    const msgpack_object *m = rpc_raw_response(&w, 2, rpc_wait_ms());
    const msgpack_object *stt =
        m && m->via.array.ptr[3].type == MSGPACK_OBJECT_MAP
            ? th_rpc_map_get(&m->via.array.ptr[3], "status")
            : NULL;
    bool listed = stt && th_rpc_obj_streq(stt, "running");
    CU_ASSERT(listed);
    rpc_raw_request(&w, 3, "tasks.cancel", p);
    m = rpc_raw_response(&w, 3, rpc_wait_ms());
    CU_ASSERT(m && m->via.array.ptr[2].type == MSGPACK_OBJECT_NIL);
    rpc_raw_close(&w);
    close(down[1]);
    close(up[0]);
    int st = 0;
    int64_t end = rpc_now_ms() + 2 * rpc_wait_ms();
    while (waitpid(pid, &st, WNOHANG) == 0 && rpc_now_ms() < end)
        usleep(10000);
    if (waitpid(pid, &st, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void test_reload_admin(void)
{
    struct passwd *pw = getpwnam("nobody");
    struct group *gr = pw ? getgrgid(pw->pw_gid) : NULL;
    if (geteuid() != 0 || !pw || !gr)
        TH_SKIP("needs root, a 'nobody' user and its group");
    char gname[64];
    snprintf(gname, sizeof gname, "%s", gr->gr_name);
    /* no admin: section: the host's uid (root) only */
    rpc_srv s;
    CU_ASSERT_FATAL(start_open(&s, NULL) == 0);
    CU_ASSERT_EQUAL(as_nobody(&s, nobody_reloads,
                              "host.reload needs an admin (without an admin: "
                              "section in "),
                    0);
    CU_ASSERT(rpc_log_has(&s, "host.reload refused: not an admin"));
    /* the admin (root) reloads */
    CU_ASSERT(call_ok(&s, "host.reload", "[]"));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);

    /* admin.users names root only: the refusal names the rule's place */
    CU_ASSERT_FATAL(start_open(&s, "admin:\n  users: [root]\n") == 0);
    char want[4300];
    snprintf(want, sizeof want,
             "host.reload needs an admin (admin.users/admin.groups in "
             "%s:8:1); uid %u is not one",
             s.cfg, (unsigned)pw->pw_uid);
    CU_ASSERT_EQUAL(as_nobody(&s, nobody_reloads, want), 0);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);

    /* admin by group: nobody's group */
    char extra[128];
    snprintf(extra, sizeof extra, "admin:\n  groups: [%s]\n", gname);
    CU_ASSERT_FATAL(start_open(&s, extra) == 0);
    CU_ASSERT_EQUAL(as_nobody(&s, nobody_reloads, NULL), 0);
    CU_ASSERT(rpc_log_has(&s, "reload #1 ok"));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- logs ----------------------------------------------------------------- */

static void test_json_log(void)
{
    rpc_srv s;
    rpc_opts o = {.host_extra = "  log_format: json\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT_EQUAL(rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"j\"}]",
                             &r), 0);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    FILE *f = fopen(s.log, "r");
    CU_ASSERT_FATAL(f != NULL);
    char line[8192];
    int lines = 0, calls = 0, connects = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        CU_ASSERT_PTR_NOT_NULL(j);
        if (!j) {
            fprintf(stderr, "\nnot JSON: %s", line);
            continue;
        }
        CU_ASSERT(json_is_string(json_object_get(j, "ts")) &&
                  json_is_string(json_object_get(j, "level")) &&
                  json_is_string(json_object_get(j, "event")) &&
                  json_is_string(json_object_get(j, "msg")));
        const char *ev = json_string_value(json_object_get(j, "event"));
        if (ev && strcmp(ev, "call.end") == 0) {
            calls++;
            CU_ASSERT(json_is_integer(json_object_get(j, "session")));
            CU_ASSERT(json_is_integer(json_object_get(j, "call_id")));
            CU_ASSERT(json_is_number(json_object_get(j, "dur_ms")));
            CU_ASSERT(json_is_integer(json_object_get(j, "bytes_out")));
            const char *oc = json_string_value(json_object_get(j, "outcome"));
            CU_ASSERT(oc && strcmp(oc, "ok") == 0);
            const char *tool = json_string_value(json_object_get(j, "tool"));
            CU_ASSERT(tool && strcmp(tool, "echo") == 0);
        }
        if (ev && strcmp(ev, "session.open") == 0) {
            connects++;
            CU_ASSERT(json_is_integer(json_object_get(j, "uid")));
        }
        json_decref(j);
    }
    fclose(f);
    CU_ASSERT(lines >= 3);
    CU_ASSERT_EQUAL(calls, 1);
    CU_ASSERT(connects >= 1);
    rpc_srv_free(&s);
}

/* stderr is the journal (JOURNAL_STREAM names it): "<N>" priorities and
 * no time of our own. */
static void test_journal(void)
{
    rpc_srv s;
    memset(&s, 0, sizeof s);
    s.in_fd = s.out_fd = -1; /* none: rpc_srv_free closes what is >= 0 */
    s.dir = th_test_tmpdir();
    rpc_write_config(&s, NULL);
    char log[4200], sock[108], listen[128];
    snprintf(log, sizeof log, "%s/journal.log", s.dir);
    snprintf(sock, sizeof sock, "%s/j.sock", s.dir);
    snprintf(listen, sizeof listen, "unix:%s", sock);
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        struct stat st;
        if (fd < 0 || dup2(fd, 2) < 0 || fstat(2, &st) != 0)
            _exit(120);
        char v[64];
        snprintf(v, sizeof v, "%llu:%llu", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
        setenv("JOURNAL_STREAM", v, 1);
        execl(rpc_server_bin(), rpc_server_bin(), "serve", "-c", s.cfg,
              "--listen", listen, (char *)NULL);
        _exit(127);
    }
    int64_t end = rpc_now_ms() + 2 * rpc_wait_ms();
    while (!rpc_sock_answers(sock) && rpc_now_ms() < end)
        usleep(20000);
    kill(pid, SIGTERM);
    int st = 0;
    end = rpc_now_ms() + 2 * rpc_wait_ms();
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (rpc_now_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
        }
        usleep(10000);
    }
    FILE *f = fopen(log, "r");
    CU_ASSERT_FATAL(f != NULL);
    char line[4096];
    int listening = 0, others = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "<6>info  listening on unix:", 27) == 0)
            listening++;
        else if (line[0] != '<' || !strchr("3467", line[1]) || line[2] != '>')
            others++;
    }
    fclose(f);
    CU_ASSERT_EQUAL(listening, 1);
    CU_ASSERT_EQUAL(others, 0);
    rpc_srv_free(&s);
}

/* ---- stats across a plugin's removal ---------------------------------------- */

static uint64_t echo_calls(rpc_srv *s)
{
    th_rpc_client *c = rpc_connect(s);
    if (!c)
        return 0;
    rpc_res r;
    uint64_t n = 0;
    if (rpc_call(c, "host.stats", "[]", &r) == 0) {
        const msgpack_object *calls = th_rpc_map_get(
            th_rpc_map_get(th_rpc_map_get(r.res, "tools"), "echo"), "calls");
        n = calls ? calls->via.u64 : 0;
        rpc_res_free(&r);
    }
    th_rpc_client_close(c);
    return n;
}

static void test_stats_survive(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    CU_ASSERT(call_ok(&s, "tools.call", "[\"echo\", {\"text\": \"1\"}]"));
    CU_ASSERT_EQUAL(echo_calls(&s), 1);
    /* the echo plugin goes (same toolsets, without its tools) */
    char text[2048];
    snprintf(text, sizeof text,
             "host:\n  shutdown_grace: 1s\n  max_frame: 64KiB\n"
             "plugins:\n  - name: text\n    path: %s/plugins/text.so\n"
             "    config:\n      root: %s\n"
             "toolsets:\n  - name: public\n    tools: [text_count]\n"
             "  - name: private\n    tools: [text_count]\n"
             "    allow_users: [root]\n",
             TH_BUILD_DIR, s.dir);
    free(th_test_write_file(s.dir, "rpc.yaml", text, (size_t)-1));
    CU_ASSERT(call_ok(&s, "host.reload", "[]"));
    CU_ASSERT_FALSE(call_ok(&s, "tools.call", "[\"echo\", {\"text\": \"x\"}]"));
    CU_ASSERT_EQUAL(echo_calls(&s), 1); /* kept while it is away */
    /* and comes back: the numbers go on */
    free(s.cfg); /* the same path, written again */
    rpc_write_config(&s, NULL);
    CU_ASSERT(call_ok(&s, "host.reload", "[]"));
    CU_ASSERT(call_ok(&s, "tools.call", "[\"echo\", {\"text\": \"2\"}]"));
    CU_ASSERT_EQUAL(echo_calls(&s), 2);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- plugin-load errors and config check --json ----------------------------- */

static void test_load_errors(void)
{
    char *dir = th_test_tmpdir();
    free(th_test_write_file(dir, "junk.so", "not an ELF file\n", (size_t)-1));
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/folder.so", dir);
    CU_ASSERT_EQUAL(mkdir(sub, 0700), 0);
    struct {
        const char *path, *want;
    } cases[] = {
        {"./missing.so", "plugin 'p' (path ./missing.so): cannot open: No "
                         "such file or directory"},
        {"junk.so", "plugin 'p' (path junk.so): not a shared object: "},
        {"folder.so", "plugin 'p' (path folder.so): the path is a folder; "
                      "give the plugin's shared object (a .so file)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "# plugins\nplugins:\n  - name: echo\n    path: %s/plugins/"
                 "echo.so\n  - name: p\n    path: %s\n",
                 TH_BUILD_DIR, cases[i].path);
        char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
        char want[4600], sock[4300];
        snprintf(want, sizeof want, "%s:5:5: %s", cfg, cases[i].want);
        snprintf(sock, sizeof sock, "unix:%s/s.sock", dir);
        th_test_run r;
        th_test_toolhost(&r, "serve", "-c", cfg, "--listen", sock, NULL);
        CU_ASSERT_NOT_EQUAL(r.status, 0);
        if (!strstr(r.err, want))
            fprintf(stderr, "\nwanted '%s' in: %s\n", want, r.err);
        CU_ASSERT_PTR_NOT_NULL(strstr(r.err, want));
        CU_ASSERT_PTR_NULL(strstr(r.err, "-g1-")); /* no private copy */
        th_test_run_free(&r);
        /* the same finding as JSON */
        th_test_toolhost(&r, "config", "check", "--json", cfg, NULL);
        CU_ASSERT_EQUAL(r.status, 2);
        json_error_t je;
        json_t *j = json_loads(r.out, 0, &je);
        CU_ASSERT_FATAL(j != NULL);
        CU_ASSERT(json_is_false(json_object_get(j, "ok")));
        json_t *e0 = json_array_get(json_object_get(j, "errors"), 0);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(e0, "file")),
                               cfg);
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(e0, "line")), 5);
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(e0, "col")), 5);
        const char *m = json_string_value(json_object_get(e0, "message"));
        CU_ASSERT(m && strncmp(m, cases[i].want, strlen(cases[i].want)) == 0);
        json_decref(j);
        th_test_run_free(&r);
        free(cfg);
    }
    /* an optional plugin that fails is a warning; the rest is counted */
    char text[512];
    snprintf(text, sizeof text,
             "plugins:\n  - name: echo\n    path: %s/plugins/echo.so\n"
             "  - name: p\n    path: ./missing.so\n    optional: true\n",
             TH_BUILD_DIR);
    char *cfg = th_test_write_file(dir, "o.yaml", text, (size_t)-1);
    th_test_run r;
    th_test_toolhost(&r, "config", "check", "--json", cfg, NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT(json_is_true(json_object_get(j, "ok")));
    CU_ASSERT_EQUAL(json_array_size(json_object_get(j, "errors")), 0);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "plugins")), 2);
    CU_ASSERT(json_integer_value(json_object_get(j, "tools")) >= 1);
    json_t *w0 = json_array_get(json_object_get(j, "warnings"), 0);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(w0, "line")), 4);
    const char *m = json_string_value(json_object_get(w0, "message"));
    CU_ASSERT(m && strstr(m, "optional plugin p skipped: plugin 'p' (path "
                             "./missing.so): cannot open"));
    json_decref(j);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* A reload that adds a plugin that cannot load: the error names its entry
 * and path as written, not the private copy. */
static void test_reload_load_error(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    free(th_test_write_file(s.dir, "junk.so", "not an ELF\n", (size_t)-1));
    rpc_opts o = {.plugins_extra = "  - name: junk\n    path: ./junk.so\n"};
    free(s.cfg); /* the same path, written again */
    rpc_write_config(&s, &o);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT_EQUAL(rpc_call(c, "host.reload", "[]", &r), 0);
    const char *msg = NULL;
    size_t n = 0;
    const msgpack_object *ok = th_rpc_map_get(r.res, "ok");
    CU_ASSERT(ok && ok->type == MSGPACK_OBJECT_BOOLEAN && !ok->via.boolean);
    CU_ASSERT_FATAL(th_rpc_obj_str(
        th_rpc_map_get(th_rpc_map_get(r.res, "error"), "message"), &msg, &n));
    char want[4300];
    snprintf(want, sizeof want,
             "%s:19:5: plugin 'junk' (path ./junk.so): not a shared object: "
             "./junk.so: file too short",
             s.cfg);
    CU_ASSERT_PTR_NOT_NULL(memmem(msg, n, want, strlen(want)));
    CU_ASSERT_PTR_NULL(memmem(msg, n, "-g1-", 4));
    if (!memmem(msg, n, want, strlen(want)))
        fprintf(stderr, "\nreload said: %.*s\n", (int)n, msg);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* --allow-unknown-users: the one-run escape for names not yet on the
 * system, taken by any command that loads a config. */
static void test_allow_unknown_users_flag(void)
{
    char *dir = th_test_tmpdir();
    char text[512];
    snprintf(text, sizeof text,
             "plugins:\n  - name: echo\n    path: %s/plugins/echo.so\n"
             "toolsets:\n  - name: a\n    tools: ['*']\n"
             "    allow_users: [no-such-user-ops1]\n",
             TH_BUILD_DIR);
    char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
    th_test_run r;
    th_test_toolhost(&r, "config", "check", cfg, NULL);
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "no user named 'no-such-user-ops1'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "--allow-unknown-users"));
    th_test_run_free(&r);
    th_test_toolhost(&r, "config", "check", "--allow-unknown-users", cfg,
                     NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, ": ok:"));
    th_test_run_free(&r);
    th_test_toolhost(&r, "call", "--allow-unknown-users", "-c", cfg, "echo",
                     "text=hi", NULL);
    CU_ASSERT_EQUAL(r.status, 0);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_ops(void)
{
    CU_pSuite s = CU_add_suite("ops", NULL, NULL);
    CU_add_test(s, "reload_admin", test_reload_admin);
    CU_add_test(s, "admin_tasks", test_admin_tasks);
    CU_add_test(s, "json_log", test_json_log);
    CU_add_test(s, "journal", test_journal);
    CU_add_test(s, "stats_survive", test_stats_survive);
    CU_add_test(s, "load_errors", test_load_errors);
    CU_add_test(s, "reload_load_error", test_reload_load_error);
    CU_add_test(s, "allow_unknown_users_flag", test_allow_unknown_users_flag);
}
