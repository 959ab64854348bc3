/* test_loader.c - the plugin loader: each fixture's specific error, the
 * file-safety check, init() with config, the host API, built-in plugins,
 * and reference counting. */
#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/th_test.h"
#include "th/log.h"
#include "th/tool.h"

/* ---- helpers --------------------------------------------------------------- */

static const th_load_opts insecure = {.allow_insecure = true};

/* Opens build/fixtures/NAME.so, expecting failure; returns the message. */
static void expect_open_error(const char *name, const char *reason)
{
    char rel[128];
    snprintf(rel, sizeof rel, "fixtures/%s.so", name);
    char path[1024];
    snprintf(path, sizeof path, "%s", th_test_build_path(rel));
    th_plugin *p = (th_plugin *)1;
    th_error e;
    /* allow_insecure: these tests are about the ABI checks, whatever the
     * umask of the build; the safety check has its own test. */
    CU_ASSERT_EQUAL(th_plugin_open(path, &insecure, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NULL(p);
    char want[2048];
    snprintf(want, sizeof want, "%s: %s", path, reason);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    if (strcmp(e.msg, want))
        fprintf(stderr, "\n  want: %s\n  got:  %s\n", want, e.msg);
}

typedef struct mock_call {
    th_call_base base;
    th_buf out, err;
} mock_call;

static int mock_write(toolhost_call *c, int stream, const void *d, size_t n)
{
    mock_call *m = (mock_call *)c;
    th_buf *b = stream == TOOLHOST_STDOUT ? &m->out : &m->err;
    return th_buf_append(b, d, n) ? TOOLHOST_ENOMEM : 0;
}

static const th_call_vtbl mock_vt = {.write = mock_write};

static void mock_init(mock_call *m, th_plugin *p)
{
    memset(m, 0, sizeof *m);
    m->base.pub.struct_size = sizeof m->base.pub;
    m->base.pub.host = &p->api;
    m->base.vt = &mock_vt;
}

static void mock_free(mock_call *m)
{
    th_buf_destroy(&m->out);
    th_buf_destroy(&m->err);
}

static const th_tool *tool_named(const th_plugin *p, const char *name)
{
    for (size_t i = 0; i < p->n_tools; i++)
        if (strcmp(p->tools[i].name, name) == 0)
            return &p->tools[i];
    return NULL;
}

/* Runs a tool with the given msgpack args through th_validate_call. */
static int run_tool(th_plugin *p, const char *name, const uint8_t *args,
                    size_t len, mock_call *m)
{
    const th_tool *t = tool_named(p, name);
    if (!t)
        return -100;
    th_buf filled = TH_BUF_INIT;
    const uint8_t *a;
    size_t n;
    th_error e;
    int rc = th_validate_call(t, args, len, &filled, &a, &n, &e);
    if (rc == 0) {
        mock_init(m, p);
        rc = t->desc->execute(p->state, t->desc, &m->base.pub, a, n);
    }
    th_buf_destroy(&filled);
    return rc;
}

/* Log capture into a temp file. */
static char *log_dir;
static int log_fd = -1;

static void log_capture(void)
{
    log_dir = th_test_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/log", log_dir);
    log_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    th_log_set_fd(log_fd);
}

/* Stops capturing; returns the log text (malloc()ed). */
static char *log_release(void)
{
    th_log_set_fd(2);
    off_t n = lseek(log_fd, 0, SEEK_END);
    char *s = calloc(1, (size_t)n + 1);
    if (s && n > 0)
        (void)!pread(log_fd, s, (size_t)n, 0);
    close(log_fd);
    th_test_rmtree(log_dir);
    free(log_dir);
    return s;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *s = hay; (s = strstr(s, needle)); s += strlen(needle))
        n++;
    return n;
}

/* ---- the good plugin ---------------------------------------------------------- */

static void good_basic(void)
{
    const char *path = th_test_build_path("fixtures/good_basic.so");
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_plugin_open(path, &insecure, &p, &e), 0);
    CU_ASSERT_STRING_EQUAL(p->name, "good_basic");
    CU_ASSERT_STRING_EQUAL(p->version, "1.0");
    CU_ASSERT_STRING_EQUAL(p->description, "A well-formed fixture plugin");
    CU_ASSERT_STRING_EQUAL(p->path, path);
    CU_ASSERT_STRING_EQUAL(p->load_path, path);
    CU_ASSERT_PTR_NOT_NULL(p->dl);
    CU_ASSERT_EQUAL(p->generation, 1);
    CU_ASSERT_EQUAL(atomic_load(&p->refs), 1);
    CU_ASSERT_FALSE(p->initialized);
    CU_ASSERT_EQUAL_FATAL(p->n_tools, 5);
    const th_tool *o = tool_named(p, "gb_opts");
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT_EQUAL(o->n_params, 6);
    CU_ASSERT_EQUAL(o->plugin, p);
    CU_ASSERT_EQUAL(o->flags, TOOLHOST_TOOL_READ_ONLY);
    CU_ASSERT_EQUAL(o->stdout_type, TOOLHOST_SEM_TEXT);
    CU_ASSERT_EQUAL(o->stderr_type, TOOLHOST_SEM_ERROR);
    CU_ASSERT_EQUAL(p->n_config_params, 1);
    CU_ASSERT_PTR_EQUAL(th_plugin_from_api(&p->api), p);

    log_capture();
    CU_ASSERT_EQUAL(th_plugin_init(p, NULL, 0, &e), 0);
    CU_ASSERT_TRUE(p->initialized);
    CU_ASSERT_EQUAL(th_plugin_init(p, NULL, 0, &e), TH_ESTATE);

    /* gb_opts: defaults filled by validation reach the tool. */
    const uint8_t empty[] = {0x80};
    mock_call m;
    CU_ASSERT_EQUAL(run_tool(p, "gb_opts", empty, 1, &m), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL((char *)m.out.data, "mode=\"fast\"\ncount=3\n");
    mock_free(&m);
    /* gb_greet uses the default greeting. */
    const uint8_t greet[] = {0x81, 0xa4, 'n', 'a', 'm', 'e', 0xa2, 'y', 'o'};
    CU_ASSERT_EQUAL(run_tool(p, "gb_greet", greet, sizeof greet, &m),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL((char *)m.out.data, "hello, yo!");
    mock_free(&m);
    CU_ASSERT_EQUAL(run_tool(p, "gb_fail", empty, 1, &m), TOOLHOST_FAILED);
    CU_ASSERT_STRING_EQUAL((char *)m.err.data, "failed on purpose");
    mock_free(&m);

    th_plugin_unref(p);
    char *log = log_release();
    CU_ASSERT_EQUAL(count(log, "plugin good_basic: init greeting=hello"), 1);
    CU_ASSERT_EQUAL(count(log, "plugin good_basic: fini"), 1);
    free(log);
}

static void config_block(void)
{
    const char *path = th_test_build_path("fixtures/good_basic.so");
    th_plugin *p;
    th_error e;
    th_load_opts opts = {.allow_insecure = true, .name = "greeter",
                         .generation = 7};
    CU_ASSERT_EQUAL_FATAL(th_plugin_open(path, &opts, &p, &e), 0);
    CU_ASSERT_STRING_EQUAL(p->name, "greeter");
    CU_ASSERT_EQUAL(p->generation, 7);
    /* A bad config block is refused before init(). */
    const uint8_t typo[] = {0x81, 0xa7, 'g', 'r', 'e', 't', 'i', 'n', 'g',
                            0xa1, 'x'};
    CU_ASSERT_EQUAL(th_plugin_init(p, typo, sizeof typo, &e), TH_ELOAD);
    char want[1200];
    snprintf(want, sizeof want,
             "%s: config of plugin 'greeter': unknown parameter 'greting' "
             "(accepted parameters: greeting)",
             path);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    CU_ASSERT_FALSE(p->initialized);
    /* A good one reaches init(). */
    const uint8_t cfg[] = {0x81, 0xa8, 'g', 'r', 'e', 'e', 't', 'i', 'n', 'g',
                           0xa3, 'h', 'e', 'y'};
    log_capture();
    CU_ASSERT_EQUAL_FATAL(th_plugin_init(p, cfg, sizeof cfg, &e), 0);
    const uint8_t greet[] = {0x81, 0xa4, 'n', 'a', 'm', 'e', 0xa2, 'y', 'o'};
    mock_call m;
    CU_ASSERT_EQUAL(run_tool(p, "gb_greet", greet, sizeof greet, &m),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL((char *)m.out.data, "hey, yo!");
    mock_free(&m);
    th_plugin_unref(p);
    char *log = log_release();
    CU_ASSERT_EQUAL(count(log, "plugin greeter: init greeting=hey"), 1);
    CU_ASSERT_EQUAL(count(log, "plugin greeter: fini"), 1);
    free(log);
}

/* ---- each fixture's error -------------------------------------------------------- */

static void no_entry(void)
{
    expect_open_error("bad_no_entry",
                      "entry symbol 'toolhost_plugin_v1' not found (export "
                      "it with TOOLHOST_EXPORT; is this a toolhost plugin "
                      "of ABI 1?)");
}

static void abi_major(void)
{
    expect_open_error("bad_abi_major",
                      "ABI major 2, this host speaks 1 (rebuild the plugin "
                      "against this host's toolhost/plugin.h)");
}

static void struct_small(void)
{
    char want[200];
    snprintf(want, sizeof want,
             "toolhost_plugin struct_size 8 is smaller than the %zu bytes of "
             "ABI 1.0",
             TH_ABI10_PLUGIN_SIZE);
    expect_open_error("bad_struct_small", want);
}

static void dup_tool(void)
{
    expect_open_error("bad_dup_tool", "tool name 'dup' appears twice");
}

static void tool_name(void)
{
    expect_open_error("bad_tool_name",
                      "tool 'bad name!' has an invalid name (allowed: "
                      "letters, digits, _ and -, 1 to 64)");
}

static void bad_params(void)
{
    expect_open_error("bad_params",
                      "tool 'counter': parameter 'step' has enum values but "
                      "is of type integer (enums are only for strings)");
}

static void init_fails(void)
{
    const char *path = th_test_build_path("fixtures/bad_init_fails.so");
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_plugin_open(path, &insecure, &p, &e), 0);
    CU_ASSERT_EQUAL(th_plugin_init(p, NULL, 0, &e), TH_ELOAD);
    char want[1200];
    snprintf(want, sizeof want,
             "%s: init failed: database unreachable: set 'dsn' in the "
             "config",
             path);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    CU_ASSERT_FALSE(p->initialized);
    th_plugin_unref(p); /* fini() would abort() */
}

static void not_shared_object(void)
{
    char *dir = th_test_tmpdir();
    char *path = th_test_write_file(dir, "x.so", "not a plugin\n", (size_t)-1);
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL(th_plugin_open(path, &insecure, &p, &e), TH_ELOAD);
    char want[1200];
    snprintf(want, sizeof want, "%s: not a shared object: ", path);
    CU_ASSERT_EQUAL(strncmp(e.msg, want, strlen(want)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "x.so")); /* dlerror() kept */
    /* A missing file. */
    char missing[1100];
    snprintf(missing, sizeof missing, "%s/none.so", dir);
    CU_ASSERT_EQUAL(th_plugin_open(missing, &insecure, &p, &e), TH_ELOAD);
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory",
             missing);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    CU_ASSERT_EQUAL(th_plugin_open(missing, NULL, &p, &e), TH_ELOAD);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    free(path);
    th_test_rmtree(dir);
    free(dir);
}

/* A truncated object (a plugin being rebuilt while the host starts) is
 * refused before dlopen(), which could otherwise die of SIGBUS. */
static void truncated_object(void)
{
    FILE *f = fopen(th_test_build_path("plugins/echo.so"), "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CU_ASSERT_FATAL(n > 4096);
    char *dir = th_test_tmpdir();
    char *path = th_test_write_file(dir, "half.so", buf, n / 2);
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL(th_plugin_open(path, &insecure, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "incomplete shared object"));
    free(path);
    th_test_rmtree(dir);
    free(dir);
}

static void cxx_plugin(void)
{
    const char *path = th_test_build_path("fixtures/cxx_plugin.so");
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_plugin_open(path, &insecure, &p, &e), 0);
    CU_ASSERT_STRING_EQUAL(p->name, "cxx_plugin");
    CU_ASSERT_EQUAL_FATAL(th_plugin_init(p, NULL, 0, &e), 0);
    const uint8_t empty[] = {0x80};
    mock_call m;
    CU_ASSERT_EQUAL(run_tool(p, "cxx_hello", empty, 1, &m), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL((char *)m.out.data, "hello from C++");
    mock_free(&m);
    th_plugin_unref(p);
}

typedef struct problems {
    int n;
    char text[8192];
} problems;

static void on_problem(void *ud, const char *msg)
{
    problems *pr = ud;
    pr->n++;
    size_t len = strlen(pr->text);
    snprintf(pr->text + len, sizeof pr->text - len, "%s\n", msg);
}

/* Problems inside one parameter table and inside one tool are each
 * reported (a table with 4 problems used to report 1). */
static void every_problem_in_table(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s",
             th_test_build_path("fixtures/bad_table4.so"));
    problems pr = {0, ""};
    th_load_opts o = {.allow_insecure = true, .on_problem = on_problem,
                      .problem_ud = &pr};
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL(th_plugin_open(path, &o, &p, &e), TH_ELOAD);
    CU_ASSERT_EQUAL(pr.n, 6);
    const char *want[] = {"tool 'lister': parameter 'bad name' has an invalid",
                          "tool 'lister': parameter 'n' has an unknown type 9",
                          "tool 'lister': parameter 'limit' has bounds that",
                          "tool 'lister': parameter 'q': pattern '(' does "
                          "not compile",
                          "tool 'empty' has no description",
                          "tool 'empty' has no execute function"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CU_ASSERT_PTR_NOT_NULL(strstr(pr.text, want[i]));
        if (!strstr(pr.text, want[i]))
            fprintf(stderr, "\n  missing: %s\n", want[i]);
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "(and 5 more problems)"));
    /* Without a reporter: the first problem only, as before. */
    CU_ASSERT_EQUAL(th_plugin_open(path, &insecure, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "parameter 'bad name'"));
    CU_ASSERT_PTR_NULL(strstr(e.msg, "more problem"));
}

static void every_problem(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s",
             th_test_build_path("fixtures/bad_many.so"));
    problems pr = {0, ""};
    th_load_opts o = {.allow_insecure = true, .on_problem = on_problem,
                      .problem_ud = &pr};
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL(th_plugin_open(path, &o, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_EQUAL(pr.n, 5);
    char want[8192];
    snprintf(want, sizeof want,
             "%s: tool 'bad name!' has an invalid name (allowed: letters, "
             "digits, _ and -, 1 to 64)\n"
             "%s: tool 'no_desc' has no description (a model needs one line "
             "saying what it does)\n"
             "%s: tool 'sem' has an unknown stdout semantic type 99 (known: "
             "1 to 12, see toolhost_semantic)\n"
             "%s: tool name 'twice' appears twice\n"
             "%s: tool 'param': parameter 'n' has a default \"x\" that is not "
             "of its type integer\n",
             path, path, path, path, path);
    CU_ASSERT_STRING_EQUAL(pr.text, want);
    snprintf(want, sizeof want,
             "%s: tool 'bad name!' has an invalid name (allowed: letters, "
             "digits, _ and -, 1 to 64) (and 4 more problems)",
             path);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    /* Without the callback: the first problem only. */
    CU_ASSERT_EQUAL(th_plugin_open(path, &insecure, &p, &e), TH_ELOAD);
    snprintf(want, sizeof want,
             "%s: tool 'bad name!' has an invalid name (allowed: letters, "
             "digits, _ and -, 1 to 64)",
             path);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    /* Fatal problems are returned, not reported. */
    pr.n = 0;
    snprintf(path, sizeof path, "%s",
             th_test_build_path("fixtures/bad_abi_major.so"));
    CU_ASSERT_EQUAL(th_plugin_open(path, &o, &p, &e), TH_ELOAD);
    CU_ASSERT_EQUAL(pr.n, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "ABI major 2"));
}

/* ---- the file-safety check ------------------------------------------------------- */

static int copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    int rc = -1;
    if (in && out) {
        char buf[65536];
        size_t n;
        rc = 0;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0)
            if (fwrite(buf, 1, n, out) != n)
                rc = -1;
    }
    if (in)
        fclose(in);
    if (out && fclose(out))
        rc = -1;
    return rc;
}

static void writable_by_others(void)
{
    /* Messages name resolved paths: resolve the temp folder first. */
    char *dir0 = th_test_tmpdir();
    char *dir = realpath(dir0, NULL);
    free(dir0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    char path[1100];
    snprintf(path, sizeof path, "%s/plug.so", dir);
    CU_ASSERT_EQUAL_FATAL(
        copy_file(th_test_build_path("fixtures/good_basic.so"), path), 0);
    th_plugin *p;
    th_error e;
    char want[5000];
    chmod(dir, 0700);

    chmod(path, 0644);
    CU_ASSERT_EQUAL(th_plugin_open(path, NULL, &p, &e), 0);
    th_plugin_unref(p);

    chmod(path, 0666);
    CU_ASSERT_EQUAL(th_plugin_open(path, NULL, &p, &e), TH_ELOAD);
    snprintf(want, sizeof want,
             "%s: refused: the file %s is writable by others (mode 0666), so "
             "another user could change the code the host runs; fix it with "
             "'chmod go-w %s', or set 'allow_insecure: true' for this plugin",
             path, path, path);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    chmod(path, 0664);
    CU_ASSERT_EQUAL(th_plugin_open(path, NULL, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "is writable by its group (mode "
                                         "0664)"));
    /* Overridable per plugin. */
    CU_ASSERT_EQUAL(th_plugin_open(path, &insecure, &p, &e), 0);
    th_plugin_unref(p);

    chmod(path, 0755);
    chmod(dir, 0777);
    CU_ASSERT_EQUAL(th_plugin_open(path, NULL, &p, &e), TH_ELOAD);
    snprintf(want, sizeof want,
             "%s: refused: the folder %s is writable by others (mode 0777), "
             "so another user could change the code the host runs; fix it "
             "with 'chmod go-w %s', or set 'allow_insecure: true' for this "
             "plugin",
             path, dir, dir);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    /* A sticky folder (like /tmp) is fine: others cannot replace our file. */
    chmod(dir, 01777);
    CU_ASSERT_EQUAL(th_plugin_open(path, NULL, &p, &e), 0);
    th_plugin_unref(p);
    chmod(dir, 0700);

    /* A folder further up counts too: whoever can rename it can swap the
     * file. */
    char sub[1100], deep[1200];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    mkdir(sub, 0700);
    snprintf(deep, sizeof deep, "%s/plug.so", sub);
    CU_ASSERT_EQUAL_FATAL(copy_file(path, deep), 0);
    chmod(deep, 0644);
    CU_ASSERT_EQUAL(th_plugin_open(deep, NULL, &p, &e), 0);
    th_plugin_unref(p);
    chmod(dir, 0775);
    CU_ASSERT_EQUAL(th_plugin_open(deep, NULL, &p, &e), TH_ELOAD);
    snprintf(want, sizeof want,
             "%s: refused: the folder %s is writable by its group (mode "
             "0775)",
             deep, dir);
    CU_ASSERT_EQUAL(strncmp(e.msg, want, strlen(want)), 0);
    chmod(dir, 0700);

    /* load_path: a private copy is what gets dlopen()ed. */
    char copy[1100];
    snprintf(copy, sizeof copy, "%s/copy.so", dir);
    CU_ASSERT_EQUAL_FATAL(copy_file(path, copy), 0);
    chmod(copy, 0644);
    th_load_opts o = {.load_path = copy, .generation = 2};
    CU_ASSERT_EQUAL(th_plugin_open(path, &o, &p, &e), 0);
    CU_ASSERT_STRING_EQUAL(p->path, path);
    CU_ASSERT_STRING_EQUAL(p->load_path, copy);
    CU_ASSERT_EQUAL(p->generation, 2);
    th_plugin_unref(p);

    th_test_rmtree(dir);
    free(dir);
}

/* The path is checked as written: a link is judged by the folder it sits
 * in (and its owner) before it is followed, not only by where it points.
 * Before the walk, the check followed links (realpath) and looked at the
 * target's folders only: every refusal below was accepted. */
static void symlink_paths(void)
{
    char *dir0 = th_test_tmpdir();
    char *dir = realpath(dir0, NULL);
    free(dir0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    char good[1024];
    snprintf(good, sizeof good, "%s",
             th_test_build_path("fixtures/good_basic.so"));
    th_plugin *p = NULL;
    th_error e;
    char want[5000];

    /* Good paths still load with the check on: the build's own plugins
     * (under folders owned by root) and a link in a safe folder. */
    CU_ASSERT_EQUAL(th_plugin_open(good, NULL, &p, &e), 0);
    th_plugin_unref(p);
    CU_ASSERT_EQUAL(th_plugin_open(th_test_build_path("plugins/echo.so"), NULL,
                                   &p, &e), 0);
    th_plugin_unref(p);
    char safe[1100], link1[1200];
    snprintf(safe, sizeof safe, "%s/safe", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(safe, 0755), 0);
    snprintf(link1, sizeof link1, "%s/plug.so", safe);
    CU_ASSERT_EQUAL_FATAL(symlink(good, link1), 0);
    CU_ASSERT_EQUAL(th_plugin_open(link1, NULL, &p, &e), 0);
    if (p)
        CU_ASSERT_STRING_EQUAL(p->path, link1);
    th_plugin_unref(p);
    /* The fd is the file that was checked. */
    int fd = -1;
    struct stat a, b;
    CU_ASSERT_EQUAL(th_plugin_file_open(link1, NULL, true, &fd, &e), 0);
    CU_ASSERT(fd >= 0 && fstat(fd, &a) == 0 && stat(good, &b) == 0 &&
              a.st_ino == b.st_ino && a.st_dev == b.st_dev);
    if (fd >= 0)
        close(fd);

    /* (1) The same link in a world-writable, non-sticky folder: whoever
     * may write there can point it at their own code. */
    char open_[1100], link2[1200];
    snprintf(open_, sizeof open_, "%s/open", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(open_, 0755), 0);
    chmod(open_, 0777);
    snprintf(link2, sizeof link2, "%s/plug.so", open_);
    CU_ASSERT_EQUAL_FATAL(symlink(good, link2), 0);
    p = (th_plugin *)1;
    CU_ASSERT_EQUAL(th_plugin_open(link2, NULL, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NULL(p);
    snprintf(want, sizeof want,
             "%s: refused: the folder %s is writable by others (mode 0777), "
             "so another user could change the code the host runs; fix it "
             "with 'chmod go-w %s', or set 'allow_insecure: true' for this "
             "plugin",
             link2, open_, open_);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    /* allow_insecure still overrides. */
    CU_ASSERT_EQUAL(th_plugin_open(link2, &insecure, &p, &e), 0);
    th_plugin_unref(p);

    /* (2) A writable-by-others folder further up, the link in a safe
     * folder below it. */
    char deep[1200], link3[1300];
    snprintf(deep, sizeof deep, "%s/deep", open_);
    CU_ASSERT_EQUAL_FATAL(mkdir(deep, 0755), 0);
    snprintf(link3, sizeof link3, "%s/plug.so", deep);
    CU_ASSERT_EQUAL_FATAL(symlink(good, link3), 0);
    CU_ASSERT_EQUAL(th_plugin_open(link3, NULL, &p, &e), TH_ELOAD);
    snprintf(want, sizeof want,
             "%s: refused: the folder %s is writable by others (mode 0777)",
             link3, open_);
    CU_ASSERT_EQUAL(strncmp(e.msg, want, strlen(want)), 0);
    /* ... and a safe link whose relative target goes through it. */
    char rel[1200];
    snprintf(rel, sizeof rel, "%s/rel.so", safe);
    CU_ASSERT_EQUAL_FATAL(symlink("../open/deep/plug.so", rel), 0);
    CU_ASSERT_EQUAL(th_plugin_open(rel, NULL, &p, &e), TH_ELOAD);
    snprintf(want, sizeof want,
             "%s: refused: the folder %s is writable by others (mode 0777)",
             rel, open_);
    CU_ASSERT_EQUAL(strncmp(e.msg, want, strlen(want)), 0);
    chmod(open_, 0755);
    CU_ASSERT_EQUAL(th_plugin_open(rel, NULL, &p, &e), 0);
    th_plugin_unref(p);

    /* A sticky folder: our own link is fine, another user's is not (they
     * may replace it). */
    char sticky[1100], link4[1200];
    snprintf(sticky, sizeof sticky, "%s/sticky", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(sticky, 0755), 0);
    chmod(sticky, 01777);
    snprintf(link4, sizeof link4, "%s/plug.so", sticky);
    CU_ASSERT_EQUAL_FATAL(symlink(good, link4), 0);
    CU_ASSERT_EQUAL(th_plugin_open(link4, NULL, &p, &e), 0);
    th_plugin_unref(p);
    if (geteuid() == 0 && lchown(link4, 65534, 65534) == 0) {
        CU_ASSERT_EQUAL(th_plugin_open(link4, NULL, &p, &e), TH_ELOAD);
        snprintf(want, sizeof want,
                 "%s: refused: the symlink %s belongs to another user (uid "
                 "65534)",
                 link4, link4);
        CU_ASSERT_EQUAL(strncmp(e.msg, want, strlen(want)), 0);
    }

    /* Links are followed a bounded number of times. */
    char l1[1200], l2[1200];
    snprintf(l1, sizeof l1, "%s/loop1.so", safe);
    snprintf(l2, sizeof l2, "%s/loop2.so", safe);
    CU_ASSERT_EQUAL_FATAL(symlink("loop2.so", l1), 0);
    CU_ASSERT_EQUAL_FATAL(symlink("loop1.so", l2), 0);
    CU_ASSERT_EQUAL(th_plugin_open(l1, NULL, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "Too many levels of symbolic links"));
    /* A folder or a missing file: plain errors. */
    CU_ASSERT_EQUAL(th_plugin_open(safe, NULL, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, ": cannot open: Is a directory"));
    snprintf(l1, sizeof l1, "%s/missing.so", safe);
    CU_ASSERT_EQUAL(th_plugin_open(l1, NULL, &p, &e), TH_ELOAD);
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory",
             l1);
    CU_ASSERT_STRING_EQUAL(e.msg, want);

    th_test_rmtree(dir);
    free(dir);
}

/* ---- built-in plugins ----------------------------------------------------------- */

static int bi_inits, bi_finis;

static int bi_run(void *s, const toolhost_tool *t, toolhost_call *c,
                  const uint8_t *a, size_t n)
{
    (void)s, (void)t, (void)a, (void)n;
    return c->host->write(c, TOOLHOST_STDOUT, "builtin", 7) ? TOOLHOST_FAILED
                                                            : TOOLHOST_OK;
}

static int bi_init(const toolhost_host_api *host, const uint8_t *c, size_t n,
                   void **state, char *err, size_t size)
{
    (void)host, (void)c, (void)n, (void)err, (void)size;
    bi_inits++;
    *state = &bi_inits;
    return 0;
}

static void bi_fini(void *state)
{
    CU_ASSERT_PTR_EQUAL(state, &bi_inits);
    bi_finis++;
}

#define BT(name, desc, so, se, flags, run)                                    \
    {sizeof(toolhost_tool), name, desc, NULL, NULL, 0, so, se, flags, run,     \
     NULL, NULL, NULL}

static void expect_builtin_error(const toolhost_tool *tools, uint32_t n,
                                 const char *want)
{
    toolhost_plugin d = {sizeof d, TOOLHOST_ABI_MAJOR, 0, "bi", "1", "B",
                         NULL, 0, NULL, NULL, tools, n};
    th_plugin *p = (th_plugin *)1;
    th_error e;
    CU_ASSERT_EQUAL(th_plugin_builtin(&d, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    if (strcmp(e.msg, want))
        fprintf(stderr, "\n  got: %s\n", e.msg);
}

static void builtin(void)
{
    static const toolhost_tool tools[] = {
        BT("bi_tool", "A built-in tool", TOOLHOST_SEM_STATUS,
           TOOLHOST_SEM_ERROR, TOOLHOST_TOOL_SERIAL, bi_run),
    };
    static const toolhost_plugin d = {
        sizeof d, TOOLHOST_ABI_MAJOR, TOOLHOST_ABI_MINOR, "bi", "1",
        "Built in", NULL, 0, bi_init, bi_fini, tools, 1};
    th_plugin *p;
    th_error e;
    bi_inits = bi_finis = 0;
    CU_ASSERT_EQUAL_FATAL(th_plugin_builtin(&d, &p, &e), 0);
    CU_ASSERT_PTR_NULL(p->dl);
    CU_ASSERT_STRING_EQUAL(p->name, "bi");
    CU_ASSERT_STRING_EQUAL(p->path, "builtin:bi");
    CU_ASSERT_EQUAL(th_plugin_init(p, NULL, 0, &e), 0);
    mock_call m;
    const uint8_t empty[] = {0x80};
    CU_ASSERT_EQUAL(run_tool(p, "bi_tool", empty, 1, &m), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL((char *)m.out.data, "builtin");
    mock_free(&m);
    th_plugin_ref(p);
    th_plugin_unref(p);
    CU_ASSERT_EQUAL(bi_finis, 0);
    th_plugin_unref(p);
    CU_ASSERT_EQUAL(bi_inits, 1);
    CU_ASSERT_EQUAL(bi_finis, 1);

    const toolhost_tool no_exec[] = {
        BT("t", "T", 1, 3, 0, NULL)};
    expect_builtin_error(no_exec, 1,
                         "built-in plugin 'bi': tool 't' has no execute "
                         "function");
    const toolhost_tool no_desc[] = {BT("t", NULL, 1, 3, 0, bi_run)};
    expect_builtin_error(no_desc, 1,
                         "built-in plugin 'bi': tool 't' has no description "
                         "(a model needs one line saying what it does)");
    const toolhost_tool sem[] = {BT("t", "T", 13, 3, 0, bi_run)};
    expect_builtin_error(sem, 1,
                         "built-in plugin 'bi': tool 't' has an unknown "
                         "stdout semantic type 13 (known: 1 to 12, see "
                         "toolhost_semantic)");
    const toolhost_tool sem0[] = {BT("t", "T", 1, 0, 0, bi_run)};
    expect_builtin_error(sem0, 1,
                         "built-in plugin 'bi': tool 't' has an unknown "
                         "stderr semantic type 0 (known: 1 to 12, see "
                         "toolhost_semantic)");
    const toolhost_tool flags[] = {BT("t", "T", 1, 3, 1u << 9, bi_run)};
    expect_builtin_error(flags, 1,
                         "built-in plugin 'bi': tool 't' has unknown flag "
                         "bits 0x200 (known: TOOLHOST_TOOL_* = 0x1003f; the "
                         "plugin says it is built against toolhost ABI 1.0, "
                         "which has no such flag)");
    const toolhost_tool noname[] = {BT("a", "T", 1, 3, 0, bi_run),
                                    BT(NULL, "T", 1, 3, 0, bi_run)};
    expect_builtin_error(noname, 2, "built-in plugin 'bi': tool #2 has no name");
    char long_name[80];
    memset(long_name, 'n', 65);
    long_name[65] = '\0';
    const toolhost_tool toolong[] = {BT(long_name, "T", 1, 3, 0, bi_run)};
    char want[300];
    snprintf(want, sizeof want,
             "built-in plugin 'bi': tool '%s' has an invalid name (allowed: "
             "letters, digits, _ and -, 1 to 64)",
             long_name);
    expect_builtin_error(toolong, 1, want);
    toolhost_tool small[] = {BT("t", "T", 1, 3, 0, bi_run)};
    small[0].struct_size = 16;
    snprintf(want, sizeof want,
             "built-in plugin 'bi': toolhost_tool struct_size 16 (of the "
             "first tool) is smaller than the %zu bytes of ABI 1.0",
             TH_ABI10_TOOL_SIZE);
    expect_builtin_error(small, 1, want);
    /* An oversized first struct_size is named as the first tool's, not
     * blamed on tool #2 read at the wrong place. */
    toolhost_tool big[] = {BT("t", "T", 1, 3, 0, bi_run),
                           BT("u", "T", 1, 3, 0, bi_run)};
    big[0].struct_size = 4096;
    snprintf(want, sizeof want,
             "built-in plugin 'bi': toolhost_tool struct_size 4096 (of the "
             "first tool) is larger than the %zu bytes of ABI 1.%d, and the "
             "plugin says it is built against 1.0",
             sizeof(toolhost_tool), TOOLHOST_ABI_MINOR);
    expect_builtin_error(big, 2, want);
    expect_builtin_error(NULL, 1,
                         "built-in plugin 'bi': n_tools is 1 but tools is "
                         "NULL");
    /* Plugin-level checks. */
    toolhost_plugin bad = d;
    bad.name = "no good";
    CU_ASSERT_EQUAL(th_plugin_builtin(&bad, &p, &e), TH_ELOAD);
    CU_ASSERT_STRING_EQUAL(e.msg, "built-in plugin 'no good': plugin name "
                                  "'no good' is invalid (allowed: letters, "
                                  "digits, _ and -, 1 to 64)");
    bad = d;
    bad.description = NULL;
    CU_ASSERT_EQUAL(th_plugin_builtin(&bad, &p, &e), TH_ELOAD);
    CU_ASSERT_STRING_EQUAL(e.msg, "built-in plugin 'bi': plugin 'bi' has no "
                                  "description");
    CU_ASSERT_EQUAL(th_plugin_builtin(NULL, &p, &e), TH_ELOAD);
    CU_ASSERT_STRING_EQUAL(e.msg, "built-in plugin '?': the entry point "
                                  "returned NULL");
}

/* A plugin built against a newer minor: bigger structs, walked by stride. */
typedef struct tool_v2 {
    toolhost_tool v1;
    void *future[2];
} tool_v2;

typedef struct plugin_v2 {
    toolhost_plugin v1;
    void *future[3];
} plugin_v2;

static void newer_minor(void)
{
    static tool_v2 tools[2];
    static plugin_v2 d;
    memset(tools, 0, sizeof tools);
    for (int i = 0; i < 2; i++) {
        tools[i].v1 = (toolhost_tool)BT(i ? "second" : "first", "T", 1, 3, 0,
                                        bi_run);
        tools[i].v1.struct_size = sizeof(tool_v2);
    }
    d.v1 = (toolhost_plugin){sizeof(plugin_v2), TOOLHOST_ABI_MAJOR,
                             TOOLHOST_ABI_MINOR + 1,
                             "newer", "2", "From the future", NULL, 0, NULL,
                             NULL, &tools[0].v1, 2};
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_plugin_builtin(&d.v1, &p, &e), 0);
    CU_ASSERT_STRING_EQUAL(p->tools[1].name, "second");
    CU_ASSERT_PTR_EQUAL(p->tools[1].desc, &tools[1].v1);
    CU_ASSERT_EQUAL(th_plugin_init(p, NULL, 0, &e), 0); /* no init(): ok */
    th_plugin_unref(p);
}

/* ---- ABI 1.1 ------------------------------------------------------------------------ */

/* A plugin built against the frozen 1.0 header loads and works, and its
 * struct sizes are where the host says 1.1 members start. */
static void abi10_plugin(void)
{
    const char *path = th_test_build_path("fixtures/abi10_basic.so");
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_plugin_open(path, &insecure, &p, &e), 0);
    CU_ASSERT_EQUAL(p->abi_minor, 0);
    CU_ASSERT_EQUAL(p->flags, 0);
    CU_ASSERT_EQUAL(p->desc->struct_size, TH_ABI10_PLUGIN_SIZE);
    CU_ASSERT_EQUAL(p->desc->tools[0].struct_size, TH_ABI10_TOOL_SIZE);
    CU_ASSERT_EQUAL(p->desc->tools[0].params[0].struct_size,
                    TH_ABI10_PARAM_SIZE);
    const th_tool *t = tool_named(p, "a10_echo");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_PTR_NULL(t->title);
    CU_ASSERT_PTR_NULL(t->out_schema);
    CU_ASSERT_PTR_NULL(t->params[0].cons);
    CU_ASSERT_EQUAL(th_plugin_init(p, NULL, 0, &e), 0);
    /* {text: "ab"}: n defaults to 2. */
    const uint8_t args[] = {0x81, 0xa4, 't', 'e', 'x', 't', 0xa2, 'a', 'b'};
    mock_call m;
    CU_ASSERT_EQUAL(run_tool(p, "a10_echo", args, sizeof args, &m),
                    TOOLHOST_OK);
    char want[64];
    snprintf(want, sizeof want, "abi 1.%u n=2: abab", TOOLHOST_ABI_MINOR);
    CU_ASSERT_EQUAL(m.out.len, strlen(want));
    CU_ASSERT_NSTRING_EQUAL(m.out.data, want, m.out.len);
    mock_free(&m);
    th_plugin_unref(p);
}

/* A plugin built against the frozen 1.`minor` header (fixture
 * abi1Nf_basic, tool a1N_hello): it loads on this host and works,
 * reading the host api up to its own struct, a prefix of the host's; its
 * tool reports "abi 1.<host minor> api>=1.<minor>:1".  The loaded plugin
 * is returned for more checks (th_plugin_unref). */
static th_plugin *frozen_plugin(unsigned minor)
{
    char path[64], tool[32], want[64];
    snprintf(path, sizeof path, "fixtures/abi1%uf_basic.so", minor);
    snprintf(tool, sizeof tool, "a1%u_hello", minor);
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_plugin_open(th_test_build_path(path), &insecure,
                                         &p, &e), 0);
    CU_ASSERT_EQUAL(p->abi_minor, minor);
    CU_ASSERT_EQUAL(th_plugin_init(p, NULL, 0, &e), 0);
    const uint8_t args[] = {0x80};
    mock_call m;
    CU_ASSERT_EQUAL(run_tool(p, tool, args, sizeof args, &m), TOOLHOST_OK);
    snprintf(want, sizeof want, "abi 1.%u api>=1.%u:1", TOOLHOST_ABI_MINOR,
             minor);
    CU_ASSERT_EQUAL(m.out.len, strlen(want));
    CU_ASSERT_NSTRING_EQUAL(m.out.data, want, m.out.len);
    mock_free(&m);
    return p;
}

/* The frozen 1.2 header: the host's api goes on past its cancel_fd. */
static void abi12_plugin(void)
{
    th_plugin *p = frozen_plugin(2);
    CU_ASSERT(p->api.struct_size >
              offsetof(toolhost_host_api, cancel_fd) + sizeof(void *));
    th_plugin_unref(p);
}

/* The frozen 1.3 header (cages): its toolhost_plugin ends before the
 * resources, so it declares none. */
static void abi13_plugin(void)
{
    th_plugin *p = frozen_plugin(3);
    CU_ASSERT_EQUAL(p->n_resources + p->n_prompts, 0);
    CU_ASSERT(p->desc->struct_size <= offsetof(toolhost_plugin, resources));
    th_plugin_unref(p);
}

static int out_run(void *state, const toolhost_tool *tool,
                   toolhost_call *call, const uint8_t *args, size_t len)
{
    (void)state, (void)tool, (void)args, (void)len;
    call->host->write(call, TOOLHOST_STDOUT, "{\"n\":1}", 7);
    return TOOLHOST_OK;
}

/* Forward rules and the 1.1 plugin members. */
static void abi11_forward(void)
{
    static toolhost_tool tools[1];
    tools[0] = (toolhost_tool)BT("t", "T", 99, 3,
                                 TOOLHOST_TOOL_READ_ONLY | (1u << 20),
                                 bi_run);
    toolhost_plugin d = {sizeof d, TOOLHOST_ABI_MAJOR, TOOLHOST_ABI_MINOR + 1,
                         "fwd", "1", "F", NULL, 0, NULL, NULL, tools, 1};
    th_plugin *p;
    th_error e;
    /* A newer plugin: unknown semantic type read as text, unknown
     * advisory flag dropped, both with a warning naming its minor. */
    log_capture();
    CU_ASSERT_EQUAL_FATAL(th_plugin_builtin(&d, &p, &e), 0);
    char *log = log_release();
    CU_ASSERT_EQUAL(p->tools[0].stdout_type, TOOLHOST_SEM_TEXT);
    CU_ASSERT_EQUAL(p->tools[0].flags, TOOLHOST_TOOL_READ_ONLY);
    char want[200];
    snprintf(want, sizeof want, "built against toolhost ABI 1.%d, this "
                                "host supports 1.%d",
             TOOLHOST_ABI_MINOR + 1, TOOLHOST_ABI_MINOR);
    CU_ASSERT_EQUAL(count(log, want), 3); /* note, semantic, flag */
    free(log);
    th_plugin_unref(p);
    /* A behavioural flag bit from the future: refused, the host is older. */
    tools[0] = (toolhost_tool)BT("t", "T", 1, 3, 1u << 9, bi_run);
    CU_ASSERT_EQUAL(th_plugin_builtin(&d, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "flag bits 0x200"));
    /* The same from a plugin of our minor: its own fault. */
    d.abi_minor = TOOLHOST_ABI_MINOR;
    CU_ASSERT_EQUAL(th_plugin_builtin(&d, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NULL(strstr(e.msg, "this host supports"));
    /* requires_host_minor newer than ours: refused in plain words. */
    tools[0] = (toolhost_tool)BT("t", "T", 1, 3, 0, bi_run);
    d.requires_host_minor = TOOLHOST_ABI_MINOR + 1;
    d.abi_minor = TOOLHOST_ABI_MINOR + 1;
    CU_ASSERT_EQUAL(th_plugin_builtin(&d, &p, &e), TH_ELOAD);
    snprintf(want, sizeof want,
             "built-in plugin 'fwd': built against toolhost ABI 1.%d, this "
             "host supports 1.%d: it requires a host of ABI 1.%d or newer",
             TOOLHOST_ABI_MINOR + 1, TOOLHOST_ABI_MINOR,
             TOOLHOST_ABI_MINOR + 1);
    CU_ASSERT_NSTRING_EQUAL(e.msg, want, strlen(want));
    /* Plugin flags: SERIAL kept, unknown bits refused. */
    d.requires_host_minor = TOOLHOST_ABI_MINOR;
    d.abi_minor = TOOLHOST_ABI_MINOR;
    d.flags = TOOLHOST_PLUGIN_SERIAL;
    CU_ASSERT_EQUAL_FATAL(th_plugin_builtin(&d, &p, &e), 0);
    CU_ASSERT_EQUAL(p->flags, TOOLHOST_PLUGIN_SERIAL);
    th_plugin_unref(p);
    d.flags = 1u << 7;
    CU_ASSERT_EQUAL(th_plugin_builtin(&d, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "unknown plugin flag bits 0x80"));
}

/* title and output_schema: copied, compiled, checked at load. */
static void abi11_tool_members(void)
{
    static toolhost_tool tools[1];
    tools[0] = (toolhost_tool)BT("t", "T", TOOLHOST_SEM_STRUCTURED, 3, 0,
                                 out_run);
    tools[0].title = "The T";
    tools[0].output_schema =
        "{\"type\":\"object\",\"required\":[\"n\"],\"properties\":{\"n\":"
        "{\"type\":\"integer\",\"minimum\":2}}}";
    toolhost_plugin d = {sizeof d, TOOLHOST_ABI_MAJOR, TOOLHOST_ABI_MINOR,
                         "o", "1", "O", NULL, 0, NULL, NULL, tools, 1};
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_plugin_builtin(&d, &p, &e), 0);
    const th_tool *t = &p->tools[0];
    CU_ASSERT_STRING_EQUAL(t->title, "The T");
    CU_ASSERT_PTR_NOT_NULL(t->out_schema);
    CU_ASSERT_EQUAL(th_validate_output(t, "{\"n\":2}", 7, &e), 0);
    CU_ASSERT_EQUAL(th_validate_output(t, "{\"n\":1}", 7, &e), TH_ETOOL);
    CU_ASSERT_STRING_EQUAL(e.msg, "tool t wrote structured output that does "
                                  "not match its output_schema: at /n: must "
                                  "be >= 2, got 1");
    CU_ASSERT_EQUAL(th_validate_output(t, "{\"n\":", 5, &e), TH_ETOOL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "is not valid JSON"));
    CU_ASSERT_EQUAL(th_validate_output(t, "", 0, &e), TH_ETOOL);
    th_plugin_unref(p);
    /* A keyword outside the subset is refused at load, by name. */
    tools[0].output_schema =
        "{\"type\":\"object\",\"unevaluatedProperties\":false}";
    CU_ASSERT_EQUAL(th_plugin_builtin(&d, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "built-in plugin 'o': tool 't': "
                                         "output_schema: uses the keyword "
                                         "'unevaluatedProperties'"));
    /* An output_schema needs structured stdout. */
    tools[0].output_schema = "{}";
    tools[0].stdout_type = TOOLHOST_SEM_TEXT;
    CU_ASSERT_EQUAL(th_plugin_builtin(&d, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "needs TOOLHOST_SEM_STRUCTURED"));
    /* Structured stdout without a schema must still be JSON. */
    tools[0].output_schema = NULL;
    tools[0].stdout_type = TOOLHOST_SEM_STRUCTURED;
    CU_ASSERT_EQUAL_FATAL(th_plugin_builtin(&d, &p, &e), 0);
    CU_ASSERT_EQUAL(th_validate_output(&p->tools[0], "[1]", 3, &e), 0);
    CU_ASSERT_EQUAL(th_validate_output(&p->tools[0], "", 0, &e), 0);
    CU_ASSERT_EQUAL(th_validate_output(&p->tools[0], "nope", 4, &e),
                    TH_ETOOL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "that is not JSON"));
    th_plugin_unref(p);
}

/* ---- host API and the last-unref hook -------------------------------------------- */

static int hook_calls;

static void hook(th_plugin *p)
{
    hook_calls++;
    CU_ASSERT_EQUAL(atomic_load(&p->refs), 0);
    th_plugin_close(p);
}

static void host_api(void)
{
    toolhost_host_api api;
    th_host_api_fill(&api);
    CU_ASSERT_EQUAL(api.struct_size, sizeof api);
    CU_ASSERT_EQUAL(api.abi_major, TOOLHOST_ABI_MAJOR);
    CU_ASSERT_EQUAL(api.abi_minor, TOOLHOST_ABI_MINOR);
    CU_ASSERT_PTR_NOT_NULL(api.write);
    CU_ASSERT_PTR_NOT_NULL(api.log);
    /* ABI 1.3: the cages, whole (a cage_open answers NULL where the host
     * has none, a member is never missing) */
    CU_ASSERT(api.cage_open && api.cage_enter && api.cage_placed &&
              api.cage_kill && api.cage_close);
    CU_ASSERT_EQUAL(api.cage_enter(NULL), TOOLHOST_EINVAL);
    CU_ASSERT_EQUAL(api.cage_kill(NULL, 10), TOOLHOST_EINVAL);
    api.cage_close(NULL);
    api.cage_placed(NULL);
    /* A call whose vtable lacks callbacks gets safe answers. */
    th_call_vtbl none = {0};
    th_call_base c = {{sizeof c.pub, &api, 1}, &none};
    CU_ASSERT_EQUAL(api.write(&c.pub, 1, "x", 1), TOOLHOST_EINVAL);
    CU_ASSERT_EQUAL(api.set_meta(&c.pub, (const uint8_t *)"\x80", 1),
                    TOOLHOST_EINVAL);
    CU_ASSERT_EQUAL(api.progress(&c.pub, 0.5, NULL, NULL, 0), TOOLHOST_EINVAL);
    CU_ASSERT_EQUAL(api.is_cancelled(&c.pub), 0);
    CU_ASSERT_EQUAL(api.time_left_ms(&c.pub), -1);
    CU_ASSERT_EQUAL(api.suspend(&c.pub), TOOLHOST_ESTATE);
    CU_ASSERT_EQUAL(api.complete(&c.pub, TOOLHOST_OK), TOOLHOST_ESTATE);
    CU_ASSERT_EQUAL(api.write(NULL, 1, "x", 1), TOOLHOST_EINVAL);

    /* log: under the plugin's name, one line, controls blanked. */
    static const toolhost_tool tools[] = {
        BT("hook_tool", "T", 1, 3, 0, bi_run)};
    static const toolhost_plugin d = {sizeof d, TOOLHOST_ABI_MAJOR, 0,
                                      "hooked", "1", "H", NULL, 0, NULL,
                                      NULL, tools, 1};
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_plugin_builtin(&d, &p, &e), 0);
    log_capture();
    p->api.log(&p->api, TOOLHOST_LOG_WARN, "two\nlines");
    p->api.log(&p->api, TOOLHOST_LOG_DEBUG, "dropped at level info");
    char *log = log_release();
    CU_ASSERT_EQUAL(count(log, "plugin hooked: two lines"), 1);
    CU_ASSERT_EQUAL(count(log, "dropped"), 0);
    free(log);

    /* on_last_unref takes over the last reference. */
    hook_calls = 0;
    p->on_last_unref = hook;
    th_plugin_ref(p);
    th_plugin_unref(p);
    CU_ASSERT_EQUAL(hook_calls, 0);
    th_plugin_unref(p);
    CU_ASSERT_EQUAL(hook_calls, 1);
}

void th_suite_loader(void)
{
    CU_pSuite s = CU_add_suite("loader", NULL, NULL);
    CU_add_test(s, "good_basic", good_basic);
    CU_add_test(s, "every_problem_in_table", every_problem_in_table);
    CU_add_test(s, "abi10_plugin", abi10_plugin);
    CU_add_test(s, "abi12_plugin", abi12_plugin);
    CU_add_test(s, "abi13_plugin", abi13_plugin);
    CU_add_test(s, "abi11_forward", abi11_forward);
    CU_add_test(s, "abi11_tool_members", abi11_tool_members);
    CU_add_test(s, "config_block", config_block);
    CU_add_test(s, "no_entry", no_entry);
    CU_add_test(s, "abi_major", abi_major);
    CU_add_test(s, "struct_small", struct_small);
    CU_add_test(s, "dup_tool", dup_tool);
    CU_add_test(s, "tool_name", tool_name);
    CU_add_test(s, "bad_params", bad_params);
    CU_add_test(s, "init_fails", init_fails);
    CU_add_test(s, "not_shared_object", not_shared_object);
    CU_add_test(s, "truncated_object", truncated_object);
    CU_add_test(s, "cxx_plugin", cxx_plugin);
    CU_add_test(s, "every_problem", every_problem);
    CU_add_test(s, "writable_by_others", writable_by_others);
    CU_add_test(s, "symlink_paths", symlink_paths);
    CU_add_test(s, "builtin", builtin);
    CU_add_test(s, "newer_minor", newer_minor);
    CU_add_test(s, "host_api", host_api);
}
