/* test_plugin_fs.c - the fs plugin through the fake host: fs_read with
 * offset/limit, fs_list with glob, fs_stat, and every path-escape refusal. */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "common/plugin_harness.h"
#include "common/th_test.h"

static th_harness *h;
static char *tmp, *root;

static int setup(void)
{
    tmp = th_harness_sandbox(&root);
    char cfg[4200], err[1024];
    snprintf(cfg, sizeof cfg, "{\"root\": \"%s\"}", root);
    h = th_harness_load(th_test_build_path("plugins/fs.so"), cfg, err,
                        sizeof err);
    if (!h)
        fprintf(stderr, "fs.so: %s\n", err);
    return h ? 0 : -1;
}

static int teardown(void)
{
    th_harness_unload(h);
    th_test_rmtree(tmp);
    free(tmp);
    free(root);
    return 0;
}


/* Runs a tool of harness `x` with {"path": path} plus `extra` members. */
static int run_on(th_harness *x, const char *tool, const char *path,
                  const char *extra, th_harness_call *c)
{
    json_t *j = json_pack("{s:s}", "path", path);
    if (extra) {
        json_t *e = json_loads(extra, 0, NULL);
        json_object_update(j, e);
        json_decref(e);
    }
    char *s = json_dumps(j, 0);
    int rc = th_harness_run(x, tool, s, 0, c);
    free(s);
    json_decref(j);
    return rc;
}

/* Runs a tool with {"path": path} plus `extra` JSON members. */
static int run(const char *tool, const char *path, const char *extra,
               th_harness_call *c)
{
    return run_on(h, tool, path, extra, c);
}

/* Loads fs.so on `dir` with `extra` config members ("" for none); with
 * `walk` the openat() walk stands in for openat2 (the fallback for kernels
 * without it). */
static th_harness *load_fs(const char *dir, const char *extra, bool walk)
{
    char cfg[4400], err[1024];
    snprintf(cfg, sizeof cfg, "{\"root\": \"%s\"%s%s}", dir,
             *extra ? ", " : "", extra);
    if (walk)
        setenv("TOOLHOST_SDK_NO_OPENAT2", "1", 1);
    th_harness *x = th_harness_load(th_test_build_path("plugins/fs.so"), cfg,
                                    err, sizeof err);
    unsetenv("TOOLHOST_SDK_NO_OPENAT2");
    if (!x)
        fprintf(stderr, "fs.so: %s\n", err);
    return x;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_config(void)
{
    char err_[1024];
    th_harness *x = th_harness_load(th_test_build_path("plugins/fs.so"), "{}",
                                    err_, sizeof err_);
    CU_ASSERT_PTR_NULL(x);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_, "'root'"));
    x = th_harness_load(th_test_build_path("plugins/fs.so"),
                        "{\"root\": \"/nonexistent/toolhost\"}", err_,
                        sizeof err_);
    CU_ASSERT_PTR_NULL(x);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_, "/nonexistent/toolhost"));
    const toolhost_plugin *p = th_harness_plugin(h);
    CU_ASSERT_EQUAL(p->n_config_params, 4);
    CU_ASSERT_TRUE(p->config_params[0].required);
    CU_ASSERT_EQUAL(th_harness_tool(h, "fs_read")->stdout_type,
                    TOOLHOST_SEM_FILE_CONTENT);
    CU_ASSERT_TRUE(th_harness_tool(h, "fs_read")->flags &
                   TOOLHOST_TOOL_READ_ONLY);
}

static void test_read(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(run("fs_read", "a.txt", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "l1\nl2\nl3\nl4\nl5\n");
    int64_t v = -1;
    bool more = true;
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "lines", &v), 0);
    CU_ASSERT_EQUAL(v, 5);
    CU_ASSERT_EQUAL(th_harness_meta_bool(&c, "more", &more), 0);
    CU_ASSERT_FALSE(more);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_read", "a.txt", "{\"offset\": 1, \"limit\": 2}",
                        &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "l2\nl3\n");
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "lines", &v), 0);
    CU_ASSERT_EQUAL(v, 2);
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "offset", &v), 0);
    CU_ASSERT_EQUAL(v, 1);
    CU_ASSERT_EQUAL(th_harness_meta_bool(&c, "more", &more), 0);
    CU_ASSERT_TRUE(more);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_read", "a.txt", "{\"offset\": 3}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "l4\nl5\n");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_read", "a.txt", "{\"offset\": 10}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_EQUAL(c.out.len, 0);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_read", "a.txt", "{\"limit\": 0}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_EQUAL(c.out.len, 0);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_read", "a.txt", "{\"offset\": -1}", &c),
                    TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verr, "'offset'"));
    th_harness_call_free(&c);

    /* a symlink that stays inside the root is followed */
    CU_ASSERT_EQUAL(run("fs_read", "link_in", "{\"limit\": 1}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "l1\n");
    th_harness_call_free(&c);

    /* an absolute path inside the root is fine */
    char abs[4200];
    snprintf(abs, sizeof abs, "%s/sub/b.c", root);
    CU_ASSERT_EQUAL(run("fs_read", abs, NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "int main(void) { return 0; }\n");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_read", "sub", NULL, &c), TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "is a folder"));
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_read", "missing.txt", NULL, &c), TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "no such file"));
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(th_harness_run(h, "fs_read", "{}", 0, &c), TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verr, "missing required parameter "
                                          "'path'"));
    th_harness_call_free(&c);
}

static void expect_refused(const char *tool, const char *path)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(run(tool, path, NULL, &c), TOOLHOST_FAILED);
    CU_ASSERT_EQUAL(c.out.len, 0);
    if (!strstr(th_harness_err(&c), "outside the allowed root")) {
        CU_FAIL("not refused as outside the root");
        fprintf(stderr, "\n  %s %s: %s\n", tool, path, th_harness_err(&c));
    }
    th_harness_call_free(&c);
}

static void test_escapes(void)
{
    char abs[4200], link[4200];
    snprintf(abs, sizeof abs, "%s/outside/secret.txt", tmp);
    /* a symlink with an absolute target outside, and one whose target
     * climbs out through "..", made for this test only */
    snprintf(link, sizeof link, "%s/sub/link_abs", root);
    CU_ASSERT_EQUAL_FATAL(symlink(abs, link), 0);
    snprintf(link, sizeof link, "%s/sub/link_up", root);
    CU_ASSERT_EQUAL_FATAL(symlink("../../outside/secret.txt", link), 0);
    const char *paths[] = {"..", "../outside/secret.txt", "../../etc/passwd",
                           "sub/../../outside/secret.txt", "/etc/passwd", abs,
                           "link_out", "link_dir_out/secret.txt",
                           "link_dir_out", "sub/link_abs", "sub/link_up"};
    const char *tools[] = {"fs_read", "fs_list", "fs_stat"};
    th_harness *walk = load_fs(root, "", true);
    CU_ASSERT_PTR_NOT_NULL_FATAL(walk);
    th_harness *keep = h;
    for (int pass = 0; pass < 2; pass++) {
        h = pass ? walk : keep; /* openat2, then the openat() walk */
        for (size_t t = 0; t < 3; t++)
            for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
                expect_refused(tools[t], paths[i]);
        /* what stays inside still works, links included */
        th_harness_call c;
        CU_ASSERT_EQUAL(run("fs_read", "link_in", "{\"limit\": 1}", &c),
                        TOOLHOST_OK);
        CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "l1\n");
        th_harness_call_free(&c);
        CU_ASSERT_EQUAL(run("fs_read", "sub/../sub/./c.h", NULL, &c),
                        TOOLHOST_OK);
        CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "#define TODO 1\n");
        th_harness_call_free(&c);
        CU_ASSERT_EQUAL(run("fs_list", "sub", NULL, &c), TOOLHOST_OK);
        th_harness_call_free(&c);
        CU_ASSERT_EQUAL(run("fs_read", "sub/missing", NULL, &c),
                        TOOLHOST_FAILED);
        CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "no such file"));
        th_harness_call_free(&c);
    }
    h = keep;
    th_harness_unload(walk);
    snprintf(link, sizeof link, "%s/sub/link_abs", root);
    unlink(link);
    snprintf(link, sizeof link, "%s/sub/link_up", root);
    unlink(link);
}

/* follow_symlinks: false refuses every path through a link, both ways. */
static void test_no_follow(void)
{
    for (int walk = 0; walk < 2; walk++) {
        th_harness *x = load_fs(root, "\"follow_symlinks\": false", walk);
        CU_ASSERT_PTR_NOT_NULL_FATAL(x);
        th_harness_call c;
        CU_ASSERT_EQUAL(run_on(x, "fs_read", "a.txt", "{\"limit\": 1}", &c),
                        TOOLHOST_OK);
        CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "l1\n");
        th_harness_call_free(&c);
        const char *links[] = {"link_in", "link_out", "link_dir_out/secret.txt"};
        for (size_t i = 0; i < 3; i++) {
            CU_ASSERT_EQUAL(run_on(x, "fs_read", links[i], NULL, &c),
                            TOOLHOST_FAILED);
            CU_ASSERT_EQUAL(c.out.len, 0);
            CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c),
                                          "symbolic link"));
            th_harness_call_free(&c);
        }
        th_harness_unload(x);
    }
}

/* ---- the swap race: a folder exchanged with a symlink to outside ---------- */

typedef struct swapper {
    char a[4200], b[4200];
    atomic_bool stop;
    long swaps;
} swapper;

static void *swap_loop(void *arg)
{
    swapper *w = arg;
    while (!atomic_load(&w->stop))
        if (renameat2(AT_FDCWD, w->a, AT_FDCWD, w->b, RENAME_EXCHANGE) == 0)
            w->swaps++;
    return NULL;
}

/* Open fds of this process. */
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* One thread exchanges root/d (a folder holding f = "inside") with root/l
 * (a symlink to outside/, holding f = "SECRET") while fs_read reads "d/f"
 * for 1.5 s or 20,000 calls: the secret must never come back.  The old
 * realpath()-then-fopen() code returned it in about 2% of the calls. */
static void race_once(bool walk)
{
    char *t = th_test_tmpdir(), p[4200];
    snprintf(p, sizeof p, "%s/root", t);
    CU_ASSERT_EQUAL_FATAL(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/root/d", t);
    CU_ASSERT_EQUAL_FATAL(mkdir(p, 0755), 0);
    free(th_test_write_file(p, "f", "inside\n", (size_t)-1));
    snprintf(p, sizeof p, "%s/outside", t);
    CU_ASSERT_EQUAL_FATAL(mkdir(p, 0755), 0);
    free(th_test_write_file(p, "f", "SECRET\n", (size_t)-1));
    snprintf(p, sizeof p, "%s/root/l", t);
    CU_ASSERT_EQUAL_FATAL(symlink("../outside", p), 0);

    snprintf(p, sizeof p, "%s/root", t);
    int fds = open_fds();
    th_harness *x = load_fs(p, "", walk);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    swapper w = {.swaps = 0};
    snprintf(w.a, sizeof w.a, "%s/root/d", t);
    snprintf(w.b, sizeof w.b, "%s/root/l", t);
    atomic_init(&w.stop, false);
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, swap_loop, &w), 0);
    long calls = 0, ok = 0, leaks = 0;
    double end = now_s() + 1.5;
    while (calls < 20000 && now_s() < end) {
        th_harness_call c;
        int rc = run_on(x, "fs_read", "d/f", NULL, &c);
        calls++;
        if (rc == TOOLHOST_OK && strcmp(th_harness_out(&c), "inside\n") == 0)
            ok++;
        if (strstr(th_harness_out(&c), "SECRET"))
            leaks++;
        th_harness_call_free(&c);
    }
    atomic_store(&w.stop, true);
    pthread_join(th, NULL);
    fprintf(stderr, "\n  race (%s): %ld calls, %ld read inside, %ld swaps, "
            "%ld leaks ",
            walk ? "openat walk" : "openat2", calls, ok, w.swaps, leaks);
    CU_ASSERT_EQUAL(leaks, 0);
    CU_ASSERT_TRUE(ok > 0);      /* the race ran both ways */
    CU_ASSERT_TRUE(w.swaps > 0);
    th_harness_unload(x);
    CU_ASSERT_EQUAL(open_fds(), fds); /* no fd left behind on any path */
    th_test_rmtree(t);
    free(t);
}

static void test_swap_race(void) { race_once(false); }
static void test_swap_race_walk(void) { race_once(true); }

/* ---- special files and big files --------------------------------------- */

typedef struct fifo_guard {
    char path[4200];
    atomic_bool done;
    bool unblocked;
} fifo_guard;

/* Should a reader hang in open() on the FIFO (the old behaviour), open it
 * for writing after 3 s so the test ends and fails instead of hanging. */
static void *fifo_watchdog(void *arg)
{
    fifo_guard *g = arg;
    for (int i = 0; i < 300 && !atomic_load(&g->done); i++)
        usleep(10000);
    if (atomic_load(&g->done))
        return NULL;
    int fd = open(g->path, O_WRONLY | O_NONBLOCK);
    if (fd >= 0) {
        g->unblocked = true;
        close(fd);
    }
    return NULL;
}

static void test_fifo(void)
{
    fifo_guard g = {.unblocked = false};
    snprintf(g.path, sizeof g.path, "%s/pipe", root);
    CU_ASSERT_EQUAL_FATAL(mkfifo(g.path, 0644), 0);
    atomic_init(&g.done, false);
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, fifo_watchdog, &g), 0);
    double t0 = now_s();
    th_harness_call c;
    int rc = run("fs_read", "pipe", NULL, &c);
    double dt = now_s() - t0;
    atomic_store(&g.done, true);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(rc, TOOLHOST_FAILED);
    CU_ASSERT_FALSE(g.unblocked);
    CU_ASSERT_TRUE(dt < 1.0);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "is a FIFO"));
    th_harness_call_free(&c);
    /* fs_stat still describes it (O_PATH: nothing is opened for reading) */
    CU_ASSERT_EQUAL(run("fs_stat", "pipe", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_out(&c), "\"fifo\""));
    th_harness_call_free(&c);
    /* fs_list names it */
    CU_ASSERT_EQUAL(run("fs_list", ".", "{\"glob\": \"pipe\"}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "pipe\n");
    th_harness_call_free(&c);
    unlink(g.path);
}

/* Runs `fn` in a child process with at most `secs` seconds and (outside
 * ASan) 1 GiB of address space, so that a tool that hangs or eats memory
 * (as the old code did on a device) fails the test instead of hanging the
 * run.  Returns fn's result, or -1 when the child had to be killed. */
static int in_child(int (*fn)(void), int secs)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
        struct rlimit rl = {1L << 30, 1L << 30};
        setrlimit(RLIMIT_AS, &rl);
#endif
        _exit(fn());
    }
    int st = 0;
    for (int i = 0; i < secs * 100; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* A character device inside the root (a /dev/zero made with mknod) is
 * refused; reading it used to fill a line buffer up to 2 GiB. */
/* In a child: fs_read of "zero" is refused within 1 s. */
static int read_device(void)
{
    th_harness_call c;
    double t0 = now_s();
    int rc = run("fs_read", "zero", NULL, &c);
    bool ok = rc == TOOLHOST_FAILED && now_s() - t0 < 1.0 &&
              strstr(th_harness_err(&c), "character device") &&
              c.out.len == 0;
    if (!ok)
        fprintf(stderr, "\n  fs_read zero: %d: %s ", rc, th_harness_err(&c));
    th_harness_call_free(&c);
    return ok ? 0 : 1;
}

static void test_device(void)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/zero", root);
    if (mknod(p, S_IFCHR | 0666, makedev(1, 5)) != 0) {
        fprintf(stderr, "\n  SKIPPED device test: mknod: %s ",
                strerror(errno));
        return;
    }
    CU_ASSERT_EQUAL(in_child(read_device, 10), 0);
    unlink(p);
}

/* The peak resident set (VmHWM) in KiB, or -1. */
static long vm_hwm_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

/* Resets VmHWM to the current RSS (Linux >= 4.0); false when it cannot. */
static bool reset_hwm(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* A 64 MiB file without a newline (sparse zeros): memory stays bounded
 * (the old code grew a 64 MiB line buffer and wrote all of it out), the
 * line comes back cut with a marker. */
static void test_long_line(void)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/big.bin", root);
    int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL_FATAL(ftruncate(fd, 64L << 20), 0);
    close(fd);
    bool reset = reset_hwm();
    long before = vm_hwm_kib();
    th_harness_call c;
    CU_ASSERT_EQUAL(run("fs_read", "big.bin", NULL, &c), TOOLHOST_OK);
    long grown = vm_hwm_kib() - before;
    fprintf(stderr, "\n  64 MiB line: VmHWM grew %ld KiB (reset %s), "
            "%zu bytes out ",
            grown, reset ? "yes" : "no", c.out.len);
    CU_ASSERT_TRUE(grown < 16 * 1024);
    CU_ASSERT_EQUAL(c.out.len, 65536 + strlen(" [... line cut: longer than "
                                              "max_line_bytes]\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_out(&c) + 65536, "line cut"));
    int64_t v = 0;
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "lines", &v), 0);
    CU_ASSERT_EQUAL(v, 1);
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "cut_lines", &v), 0);
    CU_ASSERT_EQUAL(v, 1);
    th_harness_call_free(&c);
    unlink(p);
}

/* max_line_bytes and max_read_bytes from the config: a cut line keeps its
 * head, the lines after it are whole, and a read stops at the budget with
 * `more` so the caller continues at offset + lines. */
static void test_read_limits(void)
{
    char text[1024] = "";
    strcat(text, "short\n");
    for (int i = 0; i < 100; i++)
        strcat(text, "x");
    strcat(text, "\nafter\n0123456789\n0123456789\n");
    free(th_test_write_file(root, "lim.txt", text, (size_t)-1));
    th_harness *x = load_fs(root, "\"max_line_bytes\": 32, "
                                  "\"max_read_bytes\": 60", false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    th_harness_call c;
    CU_ASSERT_EQUAL(run_on(x, "fs_read", "lim.txt", NULL, &c), TOOLHOST_OK);
    /* 6 + 32 (+ marker) + 6 + 11 = 55 bytes of lines; the next would pass 60 */
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c),
                           "short\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                           " [... line cut: longer than max_line_bytes]\n"
                           "after\n0123456789\n");
    int64_t v = 0;
    bool more = false;
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "lines", &v), 0);
    CU_ASSERT_EQUAL(v, 4);
    CU_ASSERT_EQUAL(th_harness_meta_bool(&c, "more", &more), 0);
    CU_ASSERT_TRUE(more);
    th_harness_call_free(&c);
    CU_ASSERT_EQUAL(run_on(x, "fs_read", "lim.txt", "{\"offset\": 4}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "0123456789\n");
    CU_ASSERT_EQUAL(th_harness_meta_bool(&c, "more", &more), 0);
    CU_ASSERT_FALSE(more);
    th_harness_call_free(&c);
    th_harness_unload(x);
    char err[1024];
    char cfg[4400];
    snprintf(cfg, sizeof cfg, "{\"root\": \"%s\", \"max_line_bytes\": 0}",
             root);
    x = th_harness_load(th_test_build_path("plugins/fs.so"), cfg, err,
                        sizeof err);
    CU_ASSERT_PTR_NULL(x);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "max_line_bytes"));
    th_harness_unload(x);
    snprintf(err, sizeof err, "%s/lim.txt", root);
    unlink(err);
}

/* A cancelled fs_read of a big file stops at once. */
static void test_read_cancelled(void)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/big2.txt", root);
    int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL_FATAL(ftruncate(fd, 1L << 30), 0); /* sparse 1 GiB */
    close(fd);
    th_harness_call c;
    double t0 = now_s();
    CU_ASSERT_EQUAL(th_harness_run(h, "fs_read",
                                   "{\"path\": \"big2.txt\", \"offset\": 5}",
                                   -1, &c),
                    TOOLHOST_FAILED);
    CU_ASSERT_TRUE(now_s() - t0 < 0.5);
    CU_ASSERT_EQUAL(c.writes_after_cancel, 0);
    th_harness_call_free(&c);
    unlink(p);
}

static void test_list(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(h, "fs_list", "{}", 0, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c),
                           "a.txt\nlink_dir_out\nlink_in\nlink_out\nsub/\n");
    int64_t n = 0;
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "entries", &n), 0);
    CU_ASSERT_EQUAL(n, 5);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_list", "sub", "{\"glob\": \"*.[ch]\"}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "b.c\nc.h\n");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_list", ".", "{\"glob\": \"link_*\"}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "link_dir_out\nlink_in\nlink_out\n");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_list", "sub", "{\"glob\": \"*.zip\"}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_EQUAL(c.out.len, 0);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_list", "a.txt", NULL, &c), TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "not a folder"));
    th_harness_call_free(&c);
}

static void test_stat(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(run("fs_stat", "a.txt", NULL, &c), TOOLHOST_OK);
    json_t *j = json_loads(th_harness_out(&c), 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "path")),
                           "a.txt");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "type")),
                           "file");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "size")), 15);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "mode")),
                           "0644");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "mtime")),
                           "2001-09-09T01:46:40Z");
    json_decref(j);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_stat", "sub", NULL, &c), TOOLHOST_OK);
    j = json_loads(th_harness_out(&c), 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "type")),
                           "directory");
    json_decref(j);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_stat", ".", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_out(&c), "\"path\":\".\""));
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(run("fs_stat", "nope", NULL, &c), TOOLHOST_FAILED);
    th_harness_call_free(&c);
}

/* As configs/default.yaml sets it up: the project root. */
static void test_project_root(void)
{
    char cfg[4200], e[1024];
    snprintf(cfg, sizeof cfg, "{\"root\": \"%s\"}", th_test_source_path("."));
    th_harness *p = th_harness_load(th_test_build_path("plugins/fs.so"), cfg,
                                    e, sizeof e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(p, "fs_read",
                                   "{\"path\": \"README.md\", \"limit\": 1}",
                                   0, &c),
                    TOOLHOST_OK);
    CU_ASSERT_TRUE(c.out.len > 0);
    th_harness_call_free(&c);
    CU_ASSERT_EQUAL(th_harness_run(p, "fs_read",
                                   "{\"path\": \"../../etc/passwd\"}", 0, &c),
                    TOOLHOST_FAILED);
    CU_ASSERT_EQUAL(c.out.len, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "outside the allowed root"));
    th_harness_call_free(&c);
    th_harness_unload(p);
}

void th_suite_plugin_fs(void)
{
    CU_pSuite s = CU_add_suite("plugin_fs", setup, teardown);
    CU_add_test(s, "config", test_config);
    CU_add_test(s, "read", test_read);
    CU_add_test(s, "escapes", test_escapes);
    CU_add_test(s, "list", test_list);
    CU_add_test(s, "stat", test_stat);
    CU_add_test(s, "project_root", test_project_root);
    CU_add_test(s, "no_follow", test_no_follow);
    CU_add_test(s, "swap_race", test_swap_race);
    CU_add_test(s, "swap_race_walk", test_swap_race_walk);
    CU_add_test(s, "fifo", test_fifo);
    CU_add_test(s, "device", test_device);
    CU_add_test(s, "long_line", test_long_line);
    CU_add_test(s, "read_limits", test_read_limits);
    CU_add_test(s, "read_cancelled", test_read_cancelled);
}
