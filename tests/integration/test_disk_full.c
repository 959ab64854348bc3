/* test_disk_full.c - the real `toolhost serve` with its spill folder and
 * its private plugin copies on a full file system: the call or the reload
 * that needs the disk says a *write* failed (ENOSPC, "No space left on
 * device"), and the host goes on answering other calls.
 *
 * Two ways to a full disk, each test run both:
 *  - tmpfs: a small tmpfs mounted in a private mount namespace of the
 *    server's process only (unshare(CLONE_NEWNS) between fork and exec):
 *    nothing is mounted where the rest of the machine sees it, and the
 *    mount goes away with the server.  The test fills it through
 *    /proc/PID/root, which looks into the server's namespace.  Skipped
 *    where mount namespaces are not permitted (no CAP_SYS_ADMIN).
 *  - shim: tests/oom/fullfs.c, an LD_PRELOAD library that makes writes to
 *    files under one folder fail with ENOSPC once the test says so (a
 *    switch file); needs no root.  Skipped under valgrind and the
 *    sanitizers, which want to come first in the process. */
#include <limits.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <CUnit/CUnit.h>

#include "test_rpc_harness.h"

#define SMALL "small"        /* the full folder, in g_plugdir */
#define SMALL_SIZE "size=16m" /* room for the copies made at start */

enum { M_TMPFS, M_SHIM };
static int g_mode;
static char *g_plugdir; /* a folder with echo.so and small/, for the
                           configs; made anew by each test */

/* In the server's process: a private mount namespace with a tmpfs on
 * g_plugdir/small.  Exit status 125 when that is not permitted. */
static void small_fs_child(const char *dir)
{
    (void)dir;
    char p[512];
    snprintf(p, sizeof p, "%s/" SMALL, g_plugdir);
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
        _exit(125);
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("toolhost-test", p, "tmpfs", MS_NOSUID | MS_NODEV,
              SMALL_SIZE ",mode=0700") != 0)
        _exit(125);
}

/* Whether this process may make a mount namespace and mount a tmpfs in
 * it (tried in a child of its own); else *why says why not. */
static bool small_fs_possible(char *why, size_t n)
{
    /* The child says yes through a pipe, not its exit status: under
     * valgrind a child's exit status reports its leaks (--error-exitcode). */
    int pf[2];
    if (pipe2(pf, O_CLOEXEC) != 0)
        rpc_die("pipe");
    char *dir = th_test_tmpdir();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        rpc_die("fork");
    if (pid == 0) {
        close(pf[0]);
        g_plugdir = dir;
        small_fs_child(NULL);
        _exit(write(pf[1], "y", 1) == 1 ? 0 : 1);
    }
    close(pf[1]);
    char yes = 0;
    while (read(pf[0], &yes, 1) < 0 && errno == EINTR)
        ;
    close(pf[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    th_test_rmtree(dir);
    free(dir);
    bool ok = yes == 'y';
    if (!ok)
        snprintf(why, n, "cannot mount a tmpfs in a private mount namespace "
                 "here (needs CAP_SYS_ADMIN)");
    return ok;
}

/* The switch file of the shim (FULLFS_FILE): '1' full, '0' not. */
static void shim_switch(bool full)
{
    free(th_test_write_file(g_plugdir, "full", full ? "1" : "0", 1));
}

/* The tmpfs's filler file, seen through the server's /proc/PID/root. */
static void fill_path(rpc_srv *s, char *p, size_t n)
{
    snprintf(p, n, "/proc/%ld/root%s/" SMALL "/fill", (long)s->pid,
             g_plugdir);
}

/* Makes the folder full: the tmpfs filled until the kernel says ENOSPC,
 * or the shim switched.  True when it is. */
static bool fill_small_fs(rpc_srv *s)
{
    if (g_mode == M_SHIM) {
        shim_switch(true);
        return true;
    }
    char p[600];
    fill_path(s, p, sizeof p);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "\n%s: %s\n", p, strerror(errno));
        return false;
    }
    static char block[65536];
    memset(block, 'f', sizeof block);
    int e = 0;
    for (int i = 0; i < 4096 && !e; i++) { /* 256 MiB at most: bounded */
        ssize_t w = write(fd, block, sizeof block);
        if (w < 0 && errno != EINTR)
            e = errno;
    }
    /* what is left may be less than a block: bytes until it is full */
    while (e == ENOSPC) {
        ssize_t w = write(fd, block, 1);
        if (w < 0 && errno == EINTR)
            continue;
        if (w != 1)
            break;
    }
    close(fd);
    if (e != ENOSPC)
        fprintf(stderr, "\nfilling %s ended with: %s\n", p,
                e ? strerror(e) : "no error (too large?)");
    return e == ENOSPC;
}

/* Room again. */
static bool unfill_small_fs(rpc_srv *s)
{
    if (g_mode == M_SHIM) {
        shim_switch(false);
        return true;
    }
    char p[600];
    fill_path(s, p, sizeof p);
    return unlink(p) == 0;
}

/* The server with g_plugdir/small (the tmpfs, or the shim's folder) for
 * its spill files and private copies, and a client of it; the echo plugin
 * is g_plugdir/echo.so, a copy of the build's (replaced to make a reload
 * copy it again). */
static th_rpc_client *start_server(rpc_srv *s)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: info\n"
             "  shutdown_grace: 1s\n"
             "  spill_dir: %s/" SMALL "/spill\n"
             "  state_dir: %s/" SMALL "/state\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s/echo.so\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [echo]\n"
             "    limits: {text: 100}\n",
             g_plugdir, g_plugdir, g_plugdir);
    rpc_opts o = {.config = cfg};
    if (g_mode == M_TMPFS)
        o.child_setup = small_fs_child;
    if (g_mode == M_SHIM) { /* for the server only: it takes them at exec */
        char dir[600], sw[600];
        snprintf(dir, sizeof dir, "%s/" SMALL, g_plugdir);
        snprintf(sw, sizeof sw, "%s/full", g_plugdir);
        setenv("LD_PRELOAD", th_test_build_path("tests/oom/fullfs.so"), 1);
        setenv("FULLFS_DIR", dir, 1);
        setenv("FULLFS_FILE", sw, 1);
        setenv("FULLFS_AFTER", "1099511627776", 1);
    }
    int rc = rpc_srv_start(s, &o);
    unsetenv("LD_PRELOAD");
    unsetenv("FULLFS_DIR");
    unsetenv("FULLFS_FILE");
    unsetenv("FULLFS_AFTER");
    CU_ASSERT_FATAL(rc == 0);
    th_rpc_client *c = rpc_connect(s);
    CU_ASSERT_FATAL(c != NULL);
    return c;
}

static void put_plugin(const char *extra, size_t extra_n)
{
    size_t n = 0;
    char *so = th_test_read_file(th_test_build_path("plugins/echo.so"), &n);
    CU_ASSERT_FATAL(so != NULL);
    char *both = malloc(n + extra_n);
    CU_ASSERT_FATAL(both != NULL);
    memcpy(both, so, n);
    memcpy(both + n, extra, extra_n); /* bytes after the ELF: ignored */
    char path[600];
    snprintf(path, sizeof path, "%s/echo.so", g_plugdir);
    th_test_replace_file(path, both, n + extra_n, 0755);
    free(both);
    free(so);
}

static bool setup_or_skip(int mode, char *why, size_t n)
{
    g_mode = mode;
    if (mode == M_TMPFS && !small_fs_possible(why, n))
        return false;
    if (mode == M_SHIM && (rpc_valgrind() || TH_SANITIZER[0])) {
        snprintf(why, n, "the fullfs shim is not loaded under valgrind or a "
                 "sanitizer (they come first); the tmpfs variant runs");
        return false;
    }
    if (mode == M_SHIM &&
        access(th_test_build_path("tests/oom/fullfs.so"), R_OK) != 0) {
        snprintf(why, n, "no build/tests/oom/fullfs.so (make all)");
        return false;
    }
    char *t = th_test_tmpdir();
    char real[PATH_MAX];
    g_plugdir = strdup(realpath(t, real) ? real : t); /* as /proc shows it */
    free(t);
    CU_ASSERT_FATAL(g_plugdir != NULL);
    if (mode == M_SHIM) {
        char p[600];
        snprintf(p, sizeof p, "%s/" SMALL, g_plugdir);
        CU_ASSERT_FATAL(mkdir(p, 0700) == 0);
        shim_switch(false);
    }
    put_plugin("", 0);
    return true;
}

/* The host still serves a fresh client; it stops with status 0; the
 * test's folders go. */
static void finish(rpc_srv *s)
{
    CU_ASSERT(rpc_alive(s));
    CU_ASSERT_EQUAL(rpc_srv_stop(s, SIGTERM), 0);
    rpc_srv_free(s);
    if (g_plugdir) {
        th_test_rmtree(g_plugdir);
        free(g_plugdir);
        g_plugdir = NULL;
    }
}

/* The stdout of a result (NULL-terminated copy, malloc()ed), or NULL. */
static char *result_stdout(const msgpack_object *res)
{
    const char *p;
    size_t n;
    const msgpack_object *o = th_rpc_map_get(res, "stdout");
    if (!o || !th_rpc_obj_str(o, &p, &n))
        return NULL;
    return strndup(p, n);
}

/* An answer (error or result) as text. */
static void answer_text(const msgpack_object *o, char *text, size_t n)
{
    text[0] = '\0';
    char *js = NULL;
    size_t jn = 0;
    FILE *m = o ? open_memstream(&js, &jn) : NULL;
    if (!m)
        return;
    msgpack_object_print(m, *o);
    fclose(m);
    snprintf(text, n, "%s", js ? js : "");
    free(js);
}

/* A text over the toolset's 100-byte limit: cut, and spilled. */
static void long_text_call(char *json, size_t n)
{
    size_t k = (size_t)snprintf(json, n, "[\"echo\", {\"text\": \"");
    for (int i = 0; i < 60 && k + 80 < n; i++)
        k += (size_t)snprintf(json + k, n - k, "line %02d of a long text\\n",
                              i);
    snprintf(json + k, n - k, "\"}]");
}

/* A call whose output passes its limit, with host.spill_dir on a full file
 * system: the call is answered (a spill file is an extra, docs/limits.md),
 * and its cut marker and the log say that *writing* the spill file failed,
 * with the kernel's reason. */
static void spill_write(int mode)
{
    char why[256];
    if (!setup_or_skip(mode, why, sizeof why))
        TH_SKIP(why);
    rpc_srv s;
    th_rpc_client *c = start_server(&s);
    char json[4096];
    long_text_call(json, sizeof json);

    /* with room: the marker names the spill file */
    rpc_res r;
    CU_ASSERT_FATAL(rpc_call(c, "tools.call", json, &r) == 0);
    char *out = result_stdout(r.res);
    CU_ASSERT(rpc_ok(r.res));
    CU_ASSERT(out && strstr(out, "full output in ") &&
              strstr(out, "/" SMALL "/spill/th-spill-"));
    free(out);
    rpc_res_free(&r);

    CU_ASSERT_FATAL(fill_small_fs(&s));
    CU_ASSERT_FATAL(rpc_call(c, "tools.call", json, &r) == 0);
    out = result_stdout(r.res);
    CU_ASSERT(rpc_ok(r.res));
    bool said = out && strstr(out, "full output not saved: writing a spill "
                                   "file in ") &&
                strstr(out, "No space left on device");
    CU_ASSERT(said);
    if (!said)
        fprintf(stderr, "\nstdout: %s\n", out ? out : "(none)");
    CU_ASSERT(out && !strstr(out, "read"));
    free(out);
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_has(&s, "output not saved in full: writing a spill "
                              "file in "));

    /* the host goes on: a short call, a fresh client */
    CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"short\"}]",
                       &r) == 0 &&
              rpc_stdout_is(r.res, "short"));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    finish(&s);
}

/* A reload that must copy a changed plugin into host.state_dir, on a full
 * file system: the reload fails, its answer and the log say that *writing*
 * the copy failed (ENOSPC), not reading the plugin; the old plugin goes on
 * serving; with room again, the same reload works. */
static void copy_write(int mode)
{
    char why[256];
    if (!setup_or_skip(mode, why, sizeof why))
        TH_SKIP(why);
    rpc_srv s;
    th_rpc_client *c = start_server(&s);

    CU_ASSERT_FATAL(fill_small_fs(&s));
    put_plugin("\0changed", 9); /* a new file: the reload copies it */
    rpc_res r;
    CU_ASSERT_FATAL(rpc_call(c, "host.reload", "[]", &r) == 0);
    CU_ASSERT(!(r.res && rpc_ok(r.res)));
    /* the answer's text, wherever the front puts it */
    char text[4096] = "";
    answer_text(r.err ? r.err : r.res, text, sizeof text);
    bool said = strstr(text, "writing its copy") &&
                strstr(text, "No space left on device") &&
                !strstr(text, "read failed");
    CU_ASSERT(said);
    if (!said)
        fprintf(stderr, "\nreload answer: %s\n", text);
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_has(&s, "No space left on device"));

    /* the old plugin goes on */
    CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"still\"}]",
                       &r) == 0 &&
              rpc_stdout_is(r.res, "still"));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_alive(&s));

    /* room again: the reload works */
    CU_ASSERT(unfill_small_fs(&s));
    c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(rpc_call(c, "host.reload", "[]", &r) == 0 && r.res &&
              rpc_ok(r.res));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    finish(&s);
}

static void test_spill_write(void)
{
    spill_write(M_TMPFS);
}

static void test_copy_write(void)
{
    copy_write(M_TMPFS);
}

static void test_spill_write_shim(void)
{
    spill_write(M_SHIM);
}

static void test_copy_write_shim(void)
{
    copy_write(M_SHIM);
}

void th_suite_disk_full(void)
{
    CU_pSuite s = CU_add_suite("disk_full", NULL, NULL);
    CU_add_test(s, "spill_write", test_spill_write);
    CU_add_test(s, "copy_write", test_copy_write);
    CU_add_test(s, "spill_write_shim", test_spill_write_shim);
    CU_add_test(s, "copy_write_shim", test_copy_write_shim);
}
