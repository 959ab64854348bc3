/* test_host.c - the host object from a YAML config: real plugins, optional
 * and failing plugins, toolset ACLs, permissions (deny, ask answered yes,
 * no, and not at all), built-ins added by later pieces, output limits and
 * mocks from the config. */
#include <dirent.h>

#include "common/th_test.h"
#include "th/code.h"
#include "unit/test_manager_fx.h"

static th_host *open_yaml(const char *text, th_error *e, int *rc)
{
    th_config *cfg = NULL;
    th_error_clear(e);
    *rc = th_config_parse("host-test.yaml", "/tmp", text, strlen(text), &cfg, e);
    if (*rc) {
        fprintf(stderr, "config: %s\n", e->msg);
        return NULL;
    }
    static const toolhost_plugin *const b[] = {&fx_plugin};
    th_host_opts o = {b, 1};
    th_host *h = NULL;
    *rc = th_host_open_ex(cfg, &o, &h, e);
    return h;
}

static th_host *must_open(const char *fmt, ...)
{
    char text[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    th_error e;
    int rc;
    th_host *h = open_yaml(text, &e, &rc);
    if (rc)
        fprintf(stderr, "open: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return h;
}

static int progress_n;
static void count_progress(const th_event *ev, void *ud)
{
    (void)ev;
    (void)ud;
    progress_n++;
}

static void test_real_plugins(void)
{
    th_host *h = must_open("host: {workers: 2, log_level: error}\n"
                           "plugins:\n  - name: echo\n    path: %s\n",
                           th_test_build_path("plugins/echo.so"));
    th_session *s = open_trusted(h);
    th_result_copy r;
    th_buf a = A(1, "text", 's', "hello");
    CU_ASSERT_EQUAL(th_call_sync(s, "echo", a.data, a.len, NULL, NULL, NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_DONE);
    CU_ASSERT_TRUE(r.ok);
    CU_ASSERT_TRUE(out_is(&r, "hello"));
    th_result_copy_destroy(&r);
    th_buf_destroy(&a);
    /* echo_async: five updates, then the text (the acceptance flow) */
    progress_n = 0;
    a = A(3, "text", 's', "hi", "steps", 'i', 5LL, "delay_ms", 'i', 5LL);
    CU_ASSERT_EQUAL(th_call_sync(s, "echo_async", a.data, a.len, NULL, count_progress, NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_DONE);
    CU_ASSERT_TRUE(out_is(&r, "hi"));
    CU_ASSERT_TRUE(r.task_id > 0);
    CU_ASSERT_TRUE(progress_n >= 2 && progress_n <= 5); /* the acknowledgement counts */
    th_result_copy_destroy(&r);
    th_buf_destroy(&a);
    const th_tool *t = th_session_acquire(s, "echo_async");
    CU_ASSERT_PTR_NOT_NULL(t);
    if (t)
        th_tool_release(t);
    CU_ASSERT_PTR_NULL(th_session_acquire(s, "cancel_task"));
    CU_ASSERT_PTR_NULL(th_session_acquire(s, "nope"));
    th_session_close(s);
    th_host_close(h);
}

static void test_plugin_failures(void)
{
    char text[2048];
    th_error e;
    int rc;
    /* an optional plugin that fails is skipped */
    snprintf(text, sizeof text,
             "host: {log_level: error}\nplugins:\n"
             "  - name: gone\n    path: /nonexistent/gone.so\n    optional: true\n"
             "  - name: echo\n    path: %s\n",
             th_test_build_path("plugins/echo.so"));
    th_log_set_fd(-1);
    th_host *h = open_yaml(text, &e, &rc);
    th_log_set_fd(2);
    CU_ASSERT_EQUAL(rc, 0);
    if (h) {
        th_session *s = open_trusted(h);
        const th_tool *t = th_session_acquire(s, "echo");
        CU_ASSERT_PTR_NOT_NULL(t);
        if (t)
            th_tool_release(t);
        th_session_close(s);
        th_host_close(h);
    }
    /* a required one fails the open, naming the file */
    snprintf(text, sizeof text, "plugins:\n  - name: gone\n    path: /nonexistent/gone.so\n");
    h = open_yaml(text, &e, &rc);
    CU_ASSERT_PTR_NULL(h);
    CU_ASSERT_EQUAL(rc, TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "gone.so"));
    /* init() failing: the plugin's own message */
    snprintf(text, sizeof text, "plugins:\n  - name: bad\n    path: %s\n",
             th_test_build_path("fixtures/bad_init_fails.so"));
    h = open_yaml(text, &e, &rc);
    CU_ASSERT_PTR_NULL(h);
    CU_ASSERT_EQUAL(rc, TH_ELOAD);
    /* a toolset naming an unknown tool */
    snprintf(text, sizeof text, "toolsets:\n  - name: x\n    tools: [no_such_tool]\n");
    h = open_yaml(text, &e, &rc);
    CU_ASSERT_PTR_NULL(h);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    /* reserved built-in names may be named before they exist */
    snprintf(text, sizeof text, "toolsets:\n  - name: x\n    tools: [t_echo, run_code]\n");
    h = open_yaml(text, &e, &rc);
    CU_ASSERT_EQUAL(rc, 0);
    th_host_close(h);
}

static void test_acl(void)
{
    th_host *h = must_open("host: {log_level: error}\n"
                           "toolsets:\n"
                           "  - name: private\n    tools: [t_echo]\n    allow_users: [\"4242\"]\n"
                           "  - name: grp\n    tools: [t_sleep]\n    allow_groups: [\"777\"]\n"
                           "  - name: open\n    tools: [t_fail]\n");
    th_principal nobody = {.uid = 1, .gid = 1};
    th_principal user = {.uid = 4242, .gid = 1};
    th_principal member = {.uid = 2, .gid = 777};
    th_session *s1 = th_session_open(h, &nobody, NULL, NULL);
    th_session *s2 = th_session_open(h, &user, NULL, NULL);
    th_session *s3 = th_session_open(h, &member, NULL, NULL);
    th_result_copy r;
    th_buf a = A(1, "text", 's', "x"), b = A(1, "ms", 'i', 1LL);
    CU_ASSERT_EQUAL(th_call_sync(s1, "t_echo", a.data, a.len, NULL, NULL, NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.error, TH_EPERM);
    th_result_copy_destroy(&r);
    CU_ASSERT_EQUAL(th_call_sync(s1, "t_sleep", b.data, b.len, NULL, NULL, NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.error, TH_EPERM);
    th_result_copy_destroy(&r);
    CU_ASSERT_EQUAL(th_call_sync(s1, "t_fail", NULL, 0, NULL, NULL, NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_DONE);
    th_result_copy_destroy(&r);
    /* a tool in no toolset is unknown */
    CU_ASSERT_EQUAL(th_call_sync(s1, "t_async", NULL, 0, NULL, NULL, NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.error, TH_EUNKNOWN_TOOL);
    th_result_copy_destroy(&r);
    CU_ASSERT_EQUAL(th_call_sync(s2, "t_echo", a.data, a.len, NULL, NULL, NULL, NULL, &r), 0);
    CU_ASSERT_TRUE(r.ok);
    th_result_copy_destroy(&r);
    CU_ASSERT_EQUAL(th_call_sync(s3, "t_sleep", b.data, b.len, NULL, NULL, NULL, NULL, &r), 0);
    CU_ASSERT_TRUE(r.ok);
    th_result_copy_destroy(&r);
    CU_ASSERT_PTR_NULL(th_session_acquire(s1, "t_echo"));
    th_buf_destroy(&a);
    th_buf_destroy(&b);
    th_session_close(s1);
    th_session_close(s2);
    th_session_close(s3);
    th_host_close(h);
}

/* ---- Permissions ------------------------------------------------------------------- */

typedef struct asker {
    th_session *s;
    int mode; /* 0 allow, 1 refuse, 2 never answer, 3 cannot ask */
    int asked;
    char reason[128];
} asker;

static int ask_cb(void *ud, uint64_t call_id, const char *tool, const uint8_t *args,
                  size_t len, const char *reason)
{
    asker *k = ud;
    (void)tool;
    (void)args;
    (void)len;
    k->asked++;
    snprintf(k->reason, sizeof k->reason, "%s", reason ? reason : "");
    if (k->mode == 3)
        return -1;
    if (k->mode < 2)
        CU_ASSERT_EQUAL(th_permission_answer(k->s, call_id, k->mode == 0), 0);
    return 0;
}

/* Each mode on a host of its own: mode 2 waits for the ask to expire
 * (permission_timeout 100 ms); the others answer from ask_permission (or
 * cannot ask), and the answer must win however late this thread gets its
 * core back on a loaded machine, so their ask has 30 s (scaled).  With
 * 100 ms for all, an answer delayed 150 ms was refused (TH_ESTATE) and
 * the call denied. */
static void test_permissions(void)
{
    th_buf a = A(1, "text", 's', "ok");
    for (int mode = 0; mode < 4; mode++) {
        unsigned ask_ms = mode == 2 ? 100 : th_test_ms(30000);
        th_host *h = must_open("host: {log_level: error, permission_timeout: %ums}\n"
                               "toolsets:\n"
                               "  - name: p\n    tools: [\"*\"]\n"
                               "    permissions:\n      default: deny\n      rules:\n"
                               "        - match: t_fail\n          action: deny\n"
                               "        - match: t_guarded\n          action: ask\n",
                               ask_ms);
        asker k = {0};
        th_front_ops ops = {.ask_permission = ask_cb};
        th_principal p = {.uid = 1, .gid = 1, .trusted = true};
        k.s = th_session_open(h, &p, &ops, &k);
        th_result_copy r;
        CU_ASSERT_EQUAL(th_call_sync(k.s, "t_fail", NULL, 0, NULL, NULL, NULL, NULL, &r), 0);
        CU_ASSERT_EQUAL(r.error, TH_EPERM);
        CU_ASSERT_PTR_NOT_NULL(r.message ? strstr(r.message, "rule") : NULL);
        th_result_copy_destroy(&r);
        k.mode = mode;
        int64_t t0 = mono_ms();
        CU_ASSERT_EQUAL(th_call_sync(k.s, "t_guarded", a.data, a.len, NULL, NULL, NULL, NULL, &r), 0);
        CU_ASSERT_EQUAL(k.asked, 1);
        if (mode == 0) {
            CU_ASSERT_EQUAL(r.kind, TH_RESULT_DONE);
            CU_ASSERT_TRUE(out_is(&r, "ok"));
            CU_ASSERT_STRING_EQUAL(k.reason, "it writes");
        } else {
            CU_ASSERT_EQUAL(r.error, TH_EPERM);
        }
        if (mode == 2)
            CU_ASSERT_TRUE(mono_ms() - t0 >= 90);
        th_result_copy_destroy(&r);
        th_session_close(k.s);
        th_host_close(h);
    }
    th_buf_destroy(&a);
}

/* ---- Built-ins ---------------------------------------------------------------------- */

static int b_exec(void *st, const toolhost_tool *t, toolhost_call *c, const uint8_t *a, size_t l)
{
    (void)st;
    (void)t;
    (void)a;
    (void)l;
    c->host->write(c, TOOLHOST_STDOUT, "builtin", 7);
    return TOOLHOST_OK;
}

static const toolhost_tool b_tools[] = {
    {.struct_size = sizeof(toolhost_tool), .name = "b_tool", .description = "a built-in added after open",
     .stdout_type = TOOLHOST_SEM_TEXT, .stderr_type = TOOLHOST_SEM_ERROR, .execute = b_exec},
};
static const toolhost_plugin b_plugin = {
    .struct_size = sizeof(toolhost_plugin), .abi_major = TOOLHOST_ABI_MAJOR,
    .abi_minor = TOOLHOST_ABI_MINOR, .name = "b", .version = "1", .description = "b",
    .tools = b_tools, .n_tools = 1,
};

static bool only_enabled(const th_toolset_cfg *ts, const char *tool, void *ud)
{
    (void)tool;
    (void)ud;
    return ts->run_code.enabled;
}

static void test_add_builtin(void)
{
    th_host *h = must_open("host: {log_level: error}\n"
                           "toolsets:\n"
                           "  - name: plain\n    tools: [\"*\"]\n    allow_users: [\"1\"]\n"
                           "  - name: code\n    tools: [t_echo]\n    allow_users: [\"2\"]\n"
                           "    run_code: {enabled: true}\n");
    th_error e;
    CU_ASSERT_EQUAL(th_host_add_builtin_ex(h, &b_plugin, only_enabled, NULL, &e), 0);
    CU_ASSERT_EQUAL(th_host_add_builtin(h, &b_plugin, &e), TH_ELOAD); /* name taken */
    th_principal u1 = {.uid = 1, .gid = 1}, u2 = {.uid = 2, .gid = 2};
    th_session *s1 = th_session_open(h, &u1, NULL, NULL);
    th_session *s2 = th_session_open(h, &u2, NULL, NULL);
    th_result_copy r;
    CU_ASSERT_EQUAL(th_call_sync(s1, "b_tool", NULL, 0, NULL, NULL, NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_ERROR); /* "*" but not enabled there */
    th_result_copy_destroy(&r);
    CU_ASSERT_EQUAL(th_call_sync(s2, "b_tool", NULL, 0, NULL, NULL, NULL, NULL, &r), 0);
    CU_ASSERT_TRUE(out_is(&r, "builtin"));
    th_result_copy_destroy(&r);
    th_session_close(s1);
    th_session_close(s2);
    th_host_close(h);
}

/* ---- Fronts plug in after open --------------------------------------------------------- */

/* The core does not register run_code: th_host_open leaves it out even
 * where a toolset enables it; the front's th_code_attach adds it, and
 * th_host_close frees its descriptor (under ASan a leak or a use after
 * free fails this test). */
static void test_run_code_is_a_front(void)
{
    th_host *h = must_open("host: {log_level: error}\n"
                           "toolsets:\n  - name: code\n    tools: [t_echo]\n"
                           "    run_code: {enabled: true}\n");
    const th_tool *t = th_registry_acquire(th_host_registry(h), "run_code");
    CU_ASSERT_PTR_NULL(t);
    if (t)
        th_tool_release(t);
    th_error e;
    th_error_clear(&e);
    CU_ASSERT_EQUAL(th_code_attach(h, &e), 0);
    t = th_registry_acquire(th_host_registry(h), "run_code");
    CU_ASSERT_PTR_NOT_NULL(t);
    if (t)
        th_tool_release(t);
    th_session *s = open_trusted(h);
    th_buf a = A(1, "code", 's', "return 6 * 7");
    th_result_copy r;
    CU_ASSERT_EQUAL(th_call_sync(s, "run_code", a.data, a.len, NULL, NULL, NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_DONE);
    CU_ASSERT_TRUE(r.ok);
    th_result_copy_destroy(&r);
    th_buf_destroy(&a);
    th_session_close(s);
    th_host_close(h);

    /* No toolset enables it: attaching is a no-op. */
    h = must_open("host: {log_level: error}\n");
    CU_ASSERT_EQUAL(th_code_attach(h, &e), 0);
    t = th_registry_acquire(th_host_registry(h), "run_code");
    CU_ASSERT_PTR_NULL(t);
    if (t)
        th_tool_release(t);
    th_host_close(h);
}

static int closed[4], n_closed, fini_at = -1;

static void note_close(void *ud)
{
    if (n_closed < 4)
        closed[n_closed++] = (int)(intptr_t)ud;
}

static int c_init(const toolhost_host_api *api, const uint8_t *cfg, size_t len, void **state,
                  char *err, size_t err_size)
{
    (void)api;
    (void)cfg;
    (void)len;
    (void)err;
    (void)err_size;
    *state = NULL;
    return TOOLHOST_OK;
}

static void c_fini(void *state)
{
    (void)state;
    fini_at = n_closed; /* how many close hooks ran before the plugin closed */
}

static const toolhost_tool c_tools[] = {
    {.struct_size = sizeof(toolhost_tool), .name = "c_tool", .description = "a front's built-in",
     .stdout_type = TOOLHOST_SEM_TEXT, .stderr_type = TOOLHOST_SEM_ERROR, .execute = b_exec},
};
static const toolhost_plugin c_plugin = {
    .struct_size = sizeof(toolhost_plugin), .abi_major = TOOLHOST_ABI_MAJOR,
    .abi_minor = TOOLHOST_ABI_MINOR, .name = "c", .version = "1", .description = "c",
    .tools = c_tools, .n_tools = 1, .init = c_init, .fini = c_fini,
};

/* th_host_at_close hooks run once, newest first, after every plugin (the
 * fronts' built-ins too) was closed: a front may free what its built-in's
 * descriptor points to there. */
static void test_at_close(void)
{
    n_closed = 0;
    fini_at = -1;
    th_host *h = must_open("host: {log_level: error}\n");
    th_error e;
    th_error_clear(&e);
    CU_ASSERT_EQUAL(th_host_add_builtin(h, &c_plugin, &e), 0);
    CU_ASSERT_EQUAL(th_host_at_close(h, note_close, (void *)(intptr_t)1, &e), 0);
    CU_ASSERT_EQUAL(th_host_at_close(h, note_close, (void *)(intptr_t)2, &e), 0);
    CU_ASSERT_EQUAL(n_closed, 0);
    th_host_close(h);
    CU_ASSERT_EQUAL(fini_at, 0);
    CU_ASSERT_EQUAL(n_closed, 2);
    CU_ASSERT_EQUAL(closed[0], 2);
    CU_ASSERT_EQUAL(closed[1], 1);
}

/* ---- Limits and mocks from the config ------------------------------------------------ */

static bool meta_truncated(const th_result_copy *r)
{
    /* meta.toolhost.output.stdout.truncated == true */
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    bool yes = false;
    if (msgpack_unpack_next(&u, (const char *)r->meta.data, r->meta.len, &off) == MSGPACK_UNPACK_SUCCESS) {
        const msgpack_object *o = &u.data;
        const char *path[] = {"toolhost", "output", "stdout", "truncated"};
        for (int d = 0; d < 4 && o; d++) {
            const msgpack_object *next = NULL;
            if (o->type == MSGPACK_OBJECT_MAP)
                for (uint32_t i = 0; i < o->via.map.size; i++)
                    if (o->via.map.ptr[i].key.type == MSGPACK_OBJECT_STR &&
                        o->via.map.ptr[i].key.via.str.size == strlen(path[d]) &&
                        memcmp(o->via.map.ptr[i].key.via.str.ptr, path[d], strlen(path[d])) == 0)
                        next = &o->via.map.ptr[i].val;
            o = next;
        }
        yes = o && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
    }
    msgpack_unpacked_destroy(&u);
    return yes;
}

static void test_limits_and_mocks(void)
{
    char *spill = th_test_tmpdir();
    th_host *h = must_open("host: {log_level: error, spill_dir: \"%s\"}\n"
                           "toolsets:\n"
                           "  - name: small\n    tools: [\"*\"]\n    limits: {text: 64}\n"
                           "mocks:\n"
                           "  - tool: t_fail\n    stdout: \"canned\"\n"
                           "    progress:\n      - message: working\n        progress: 0.5\n"
                           "      - message: still\n        delay: 20ms\n", spill);
    th_session *s = open_trusted(h);
    char big[1001];
    memset(big, 'a', 1000);
    big[1000] = '\0';
    th_result_copy r;
    th_buf a = A(1, "text", 's', big);
    CU_ASSERT_EQUAL(th_call_sync(s, "t_echo", a.data, a.len, NULL, NULL, NULL, NULL, &r), 0);
    CU_ASSERT_TRUE(r.ok);
    CU_ASSERT_TRUE(r.out.len < 300);
    CU_ASSERT_TRUE(meta_truncated(&r));
    CU_ASSERT_PTR_NOT_NULL(memmem(r.meta.data, r.meta.len, spill, strlen(spill)));
    /* only the stream that was cut is described (stderr fit) */
    CU_ASSERT_PTR_NULL(memmem(r.meta.data, r.meta.len, "stderr", 6));
    th_result_copy_destroy(&r);
    th_buf_destroy(&a);
    /* the whole output was saved */
    int files = 0;
    DIR *dp = opendir(spill);
    for (struct dirent *de; dp && (de = readdir(dp));)
        files += strncmp(de->d_name, "th-spill-", 9) == 0;
    if (dp)
        closedir(dp);
    CU_ASSERT_EQUAL(files, 1);
    progress_n = 0;
    CU_ASSERT_EQUAL(th_call_sync(s, "t_fail", NULL, 0, NULL, count_progress, NULL, NULL, &r), 0);
    CU_ASSERT_EQUAL(r.kind, TH_RESULT_DONE);
    CU_ASSERT_TRUE(r.ok);
    CU_ASSERT_TRUE(out_is(&r, "canned"));
    CU_ASSERT_TRUE(r.task_id > 0); /* acknowledged, then done */
    CU_ASSERT_EQUAL(progress_n, 2); /* acknowledgement + one update */
    th_result_copy_destroy(&r);
    th_session_close(s);
    th_host_close(h);
    th_test_rmtree(spill);
    free(spill);
}

void th_suite_host(void)
{
    CU_pSuite s = CU_add_suite("host", suite_init, suite_cleanup);
    CU_add_test(s, "real_plugins", test_real_plugins);
    CU_add_test(s, "plugin_failures", test_plugin_failures);
    CU_add_test(s, "acl", test_acl);
    CU_add_test(s, "permissions", test_permissions);
    CU_add_test(s, "add_builtin", test_add_builtin);
    CU_add_test(s, "run_code_is_a_front", test_run_code_is_a_front);
    CU_add_test(s, "at_close", test_at_close);
    CU_add_test(s, "limits_and_mocks", test_limits_and_mocks);
}
