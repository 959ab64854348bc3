/* test_plugin_text.c - the text plugin through the fake host: text_grep
 * over files and folders, max_matches, bad patterns, refusals, hostile
 * patterns (catastrophic backtracking, huge counted repeats: errors within
 * their budget); text_count. */
#include <CUnit/CUnit.h>
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
    free(th_test_write_file(root, "words.txt", "one two\n  three\t\n",
                            (size_t)-1));
    char cfg[4200], err[1024];
    snprintf(cfg, sizeof cfg, "{\"root\": \"%s\"}", root);
    h = th_harness_load(th_test_build_path("plugins/text.so"), cfg, err,
                        sizeof err);
    if (!h)
        fprintf(stderr, "text.so: %s\n", err);
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


static int grep(const char *pattern, const char *path, const char *extra,
                th_harness_call *c)
{
    json_t *j = json_pack("{s:s}", "pattern", pattern);
    if (path)
        json_object_set_new(j, "path", json_string(path));
    if (extra) {
        json_t *e = json_loads(extra, 0, NULL);
        json_object_update(j, e);
        json_decref(e);
    }
    char *s = json_dumps(j, 0);
    int rc = th_harness_run(h, "text_grep", s, 0, c);
    free(s);
    json_decref(j);
    return rc;
}

static void test_grep_file(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(grep("l[24]", "a.txt", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "a.txt:2:l2\na.txt:4:l4\n");
    int64_t n = 0;
    bool trunc = true;
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "matches", &n), 0);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(th_harness_meta_bool(&c, "truncated", &trunc), 0);
    CU_ASSERT_FALSE(trunc);
    th_harness_call_free(&c);

    /* extended syntax: alternation and intervals */
    CU_ASSERT_EQUAL(grep("^(l1|l5)$", "a.txt", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "a.txt:1:l1\na.txt:5:l5\n");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(grep("L3", "a.txt", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_EQUAL(c.out.len, 0);
    th_harness_call_free(&c);
    CU_ASSERT_EQUAL(grep("L3", "a.txt", "{\"ignore_case\": true}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "a.txt:3:l3\n");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(grep("l", "a.txt", "{\"max_matches\": 2}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "a.txt:1:l1\na.txt:2:l2\n");
    CU_ASSERT_EQUAL(th_harness_meta_bool(&c, "truncated", &trunc), 0);
    CU_ASSERT_TRUE(trunc);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(grep("l", "a.txt", "{\"max_matches\": 0}", &c),
                    TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verr, "max_matches"));
    th_harness_call_free(&c);
}

static void test_grep_tree(void)
{
    th_harness_call c;
    /* the whole root: binary files and links are skipped, so the secret
     * behind link_out / link_dir_out never shows */
    CU_ASSERT_EQUAL(grep("needle|TODO|main", NULL, NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "sub/b.c:1:int main(void) { return 0; }\n"
                                    "sub/c.h:1:#define TODO 1\n");
    CU_ASSERT_PTR_NULL(strstr(th_harness_out(&c), "SECRET"));
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(grep("TODO", "sub", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "sub/c.h:1:#define TODO 1\n");
    th_harness_call_free(&c);

    /* a symlink inside the root, given by name, is searched (and named
     * as given: the file is opened beneath the root, never by its target's
     * name) */
    CU_ASSERT_EQUAL(grep("l5", "link_in", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "link_in:5:l5\n");
    th_harness_call_free(&c);
}

static void test_grep_errors(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(grep("(unclosed", "a.txt", NULL, &c), TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "invalid pattern"));
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(grep("x", "missing", NULL, &c), TOOLHOST_FAILED);
    th_harness_call_free(&c);

    const char *escapes[] = {"..", "../outside", "../../etc/passwd",
                             "/etc/passwd", "link_out", "link_dir_out"};
    for (size_t i = 0; i < sizeof escapes / sizeof escapes[0]; i++) {
        CU_ASSERT_EQUAL(grep("needle", escapes[i], NULL, &c),
                        TOOLHOST_FAILED);
        CU_ASSERT_EQUAL(c.out.len, 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "outside the allowed root"));
        th_harness_call_free(&c);
    }
}

static void test_count(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(h, "text_count", "{\"path\": \"words.txt\"}",
                                   0, &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "lines: 2\nwords: 3\nbytes: 17\n");
    int64_t v = 0;
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "words", &v), 0);
    CU_ASSERT_EQUAL(v, 3);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(th_harness_run(h, "text_count", "{\"path\": \"a.txt\"}", 0,
                                   &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "lines: 5\nwords: 5\nbytes: 15\n");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(th_harness_run(h, "text_count", "{\"path\": \"sub\"}", 0,
                                   &c),
                    TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "folder"));
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(th_harness_run(h, "text_count",
                                   "{\"path\": \"link_out\"}", 0, &c),
                    TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "outside the allowed root"));
    th_harness_call_free(&c);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct fifo_guard {
    char path[4200];
    atomic_bool done;
    atomic_int unblocked;
} fifo_guard;

/* Should a reader hang in open() on the FIFO (the old behaviour), open it
 * for writing now and then for 3 s so the test ends and fails instead of
 * hanging. */
static void *fifo_watchdog(void *arg)
{
    fifo_guard *g = arg;
    for (int i = 0; i < 300 && !atomic_load(&g->done); i++) {
        usleep(10000);
        if (i < 100)
            continue;
        int fd = open(g->path, O_WRONLY | O_NONBLOCK);
        if (fd >= 0) {
            atomic_fetch_add(&g->unblocked, 1);
            close(fd);
        }
    }
    return NULL;
}

/* A FIFO inside the root: text_count refuses it, text_grep on it refuses
 * it, and a text_grep of the folder skips it, all without blocking. */
static void test_fifo(void)
{
    fifo_guard g;
    snprintf(g.path, sizeof g.path, "%s/sub/pipe", root);
    CU_ASSERT_EQUAL_FATAL(mkfifo(g.path, 0644), 0);
    atomic_init(&g.done, false);
    atomic_init(&g.unblocked, 0);
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, fifo_watchdog, &g), 0);
    double t0 = now_s();
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(h, "text_count",
                                   "{\"path\": \"sub/pipe\"}", 0, &c),
                    TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "is a FIFO"));
    th_harness_call_free(&c);
    CU_ASSERT_EQUAL(grep("x", "sub/pipe", NULL, &c), TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "is a FIFO"));
    th_harness_call_free(&c);
    CU_ASSERT_EQUAL(grep("TODO", "sub", NULL, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "sub/c.h:1:#define TODO 1\n");
    th_harness_call_free(&c);
    double dt = now_s() - t0;
    atomic_store(&g.done, true);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(atomic_load(&g.unblocked), 0);
    CU_ASSERT_TRUE(dt < 1.0);
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

/* A character device (a /dev/zero made with mknod) is refused at once; the
 * old text_count kept counting its endless zeros. */
/* In a child: text_count of "zero" is refused within 1 s. */
static int count_device(void)
{
    th_harness_call c;
    double t0 = now_s();
    int rc = th_harness_run(h, "text_count", "{\"path\": \"zero\"}", 0, &c);
    bool ok = rc == TOOLHOST_FAILED && now_s() - t0 < 1.0 &&
              strstr(th_harness_err(&c), "character device");
    if (!ok)
        fprintf(stderr, "\n  text_count zero: %d: %s ", rc,
                th_harness_err(&c));
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
    CU_ASSERT_EQUAL(in_child(count_device, 10), 0);
    unlink(p);
}

/* A cancelled text_count of a big file (1 GiB, sparse) returns at once
 * and writes nothing (the old one counted it all, then answered). */
static void test_count_cancelled(void)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/big.txt", root);
    int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL_FATAL(ftruncate(fd, 1L << 30), 0);
    close(fd);
    th_harness_call c;
    double t0 = now_s();
    th_harness_run(h, "text_count", "{\"path\": \"big.txt\"}", -1, &c);
    double dt = now_s() - t0;
    fprintf(stderr, "\n  cancelled text_count of 1 GiB: %.3f s ", dt);
    CU_ASSERT_TRUE(dt < 0.5);
    CU_ASSERT_EQUAL(c.writes_after_cancel, 0);
    CU_ASSERT_EQUAL(c.out.len, 0);
    th_harness_call_free(&c);
    /* and text_grep of a file with one 1 GiB line: cancelled, prompt */
    t0 = now_s();
    th_harness_run(h, "text_grep", "{\"pattern\": \"x\", \"path\": \"big.txt\"}",
                   -1, &c);
    CU_ASSERT_TRUE(now_s() - t0 < 0.5);
    CU_ASSERT_EQUAL(c.writes_after_cancel, 0);
    th_harness_call_free(&c);
    unlink(p);
}

/* text_grep matches the head of a line longer than max_line_bytes and
 * keeps going on the lines after it. */
static void test_grep_long_line(void)
{
    static char text[200000];
    memset(text, 'a', 150000);
    memcpy(text, "head", 4);
    memcpy(text + 149990, "TAIL", 4);
    strcpy(text + 150000, "\nlast needle\n");
    free(th_test_write_file(root, "long.txt", text, (size_t)-1));
    th_harness_call c;
    CU_ASSERT_EQUAL(grep("^head|TAIL|needle", "long.txt", NULL, &c),
                    TOOLHOST_OK);
    const char *out = th_harness_out(&c);
    CU_ASSERT_EQUAL(strncmp(out, "long.txt:1:head", 15), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\nlong.txt:2:last needle\n"));
    CU_ASSERT_PTR_NULL(strstr(out, "TAIL"));
    CU_ASSERT_TRUE(c.out.len < 70000);
    th_harness_call_free(&c);
    char p[4200];
    snprintf(p, sizeof p, "%s/long.txt", root);
    unlink(p);
}

/* PCRE2 syntax (the dialect since POSIX ERE): \\s, \\d, lazy repeats,
 * lookahead; POSIX classes still work. */
static void test_grep_pcre2(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(grep("^l\\d$", "a.txt", "{\"max_matches\": 1}", &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "a.txt:1:l1\n");
    th_harness_call_free(&c);
    CU_ASSERT_EQUAL(grep("two\\s+thr(?=ee)", "words.txt", NULL, &c),
                    TOOLHOST_OK); /* "two\n  three": not on one line */
    CU_ASSERT_EQUAL(c.out.len, 0);
    th_harness_call_free(&c);
    CU_ASSERT_EQUAL(grep("^[[:space:]]+thr(?=ee)", "words.txt", NULL, &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "words.txt:2:  three\t\n");
    th_harness_call_free(&c);
    /* a pattern error names PCRE2 and the offset */
    CU_ASSERT_EQUAL(grep("a(?<", "a.txt", NULL, &c), TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "invalid pattern"));
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "offset"));
    th_harness_call_free(&c);
    /* too long a pattern */
    char big[5000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CU_ASSERT_EQUAL(grep(big, "a.txt", NULL, &c), TOOLHOST_FAILED);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "pattern too long"));
    th_harness_call_free(&c);
}

/* In a child (1 GiB of address space outside ASan): the hostile patterns
 * end as errors, each within its budget.  glibc's regexec took minutes on
 * the first (backreferences after .*) and regcomp gigabytes on the
 * second (nested counted repeats). */
static int grep_hostile(void)
{
    static const struct {
        const char *pattern, *want;
    } cases[] = {
        {"(.*)(.*)(.*)(.*)(.*)\\5\\4\\3\\2\\1x", "pattern too costly"},
        {"((a{0,100}){0,100}){0,100}", "invalid pattern"},
        {"(?:(?:a*)*)*y", NULL}, /* PCRE2 sees through it: no match, ok */
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        th_harness_call c;
        double t0 = now_s();
        int rc = grep(cases[i].pattern, "hostile.txt", NULL, &c);
        double dt = now_s() - t0;
        bool ok = dt < th_test_ms(1000) / 1000.0 &&
                  (cases[i].want
                       ? rc == TOOLHOST_FAILED &&
                             strstr(th_harness_err(&c), cases[i].want)
                       : rc == TOOLHOST_OK);
        fprintf(stderr, "\n  %s: %.3f s: %s ", cases[i].pattern, dt,
                rc == TOOLHOST_OK ? "ok" : th_harness_err(&c));
        bad += !ok;
        th_harness_call_free(&c);
    }
    return bad;
}

static void test_grep_hostile(void)
{
    /* 40 lines of 300 bytes: 'b' runs ending in 'x', then 'a' runs */
    static char text[40 * 301 + 1];
    char *p = text;
    for (int l = 0; l < 40; l++) {
        memset(p, l < 20 ? 'b' : 'a', 299);
        p[299] = l < 20 ? 'x' : 'a';
        p[300] = '\n';
        p += 301;
    }
    *p = '\0';
    free(th_test_write_file(root, "hostile.txt", text, (size_t)-1));
    CU_ASSERT_EQUAL(in_child(grep_hostile, 30), 0);
    char f[4200];
    snprintf(f, sizeof f, "%s/hostile.txt", root);
    unlink(f);
}

void th_suite_plugin_text(void)
{
    CU_pSuite s = CU_add_suite("plugin_text", setup, teardown);
    CU_add_test(s, "grep_file", test_grep_file);
    CU_add_test(s, "grep_tree", test_grep_tree);
    CU_add_test(s, "grep_errors", test_grep_errors);
    CU_add_test(s, "count", test_count);
    CU_add_test(s, "fifo", test_fifo);
    CU_add_test(s, "device", test_device);
    CU_add_test(s, "count_cancelled", test_count_cancelled);
    CU_add_test(s, "grep_long_line", test_grep_long_line);
    CU_add_test(s, "grep_pcre2", test_grep_pcre2);
    CU_add_test(s, "grep_hostile", test_grep_hostile);
}
