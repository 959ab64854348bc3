/* test_fs_sec.c - the fs and text plugins' confinement end to end, through
 * the real binary: FIFOs and devices inside the root are refused at once by
 * `toolhost call` and by `toolhost serve` (four FIFO reads used to block
 * every worker for good, so every later call timed out and SIGTERM did not
 * end the server), and paths that leave the root are refused. */
#include <CUnit/CUnit.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "test_rpc_harness.h"

static char *dir, *cfg;

/* DIR/root holds a.txt, a FIFO "pipe", a symlink "link_out" to
 * DIR/outside/secret.txt and, where mknod works, a /dev/zero "zero". */
static int setup(void)
{
    dir = th_test_tmpdir();
    char p[4200], text[4096];
    snprintf(p, sizeof p, "%s/outside", dir);
    if (mkdir(p, 0755) != 0)
        return -1;
    free(th_test_write_file(p, "secret.txt", "SECRET\n", (size_t)-1));
    snprintf(p, sizeof p, "%s/root", dir);
    if (mkdir(p, 0755) != 0)
        return -1;
    free(th_test_write_file(p, "a.txt", "hello\n", (size_t)-1));
    snprintf(p, sizeof p, "%s/root/pipe", dir);
    if (mkfifo(p, 0644) != 0)
        return -1;
    snprintf(p, sizeof p, "%s/root/link_out", dir);
    if (symlink("../outside/secret.txt", p) != 0)
        return -1;
    snprintf(p, sizeof p, "%s/root/zero", dir);
    if (mknod(p, S_IFCHR | 0666, makedev(1, 5)) != 0)
        fprintf(stderr, "\n  (mknod: %s; device cases skipped) ",
                strerror(errno));
    const char *b = TH_BUILD_DIR;
    snprintf(text, sizeof text,
             "host:\n"
             "  log_level: info\n"
             "  workers: 4\n"
             "  shutdown_grace: 1s\n"
             "  default_timeout: 3s\n"
             "plugins:\n"
             "  - name: fs\n"
             "    path: %s/plugins/fs.so\n"
             "    config:\n"
             "      root: %s/root\n"
             "  - name: text\n"
             "    path: %s/plugins/text.so\n"
             "    config:\n"
             "      root: %s/root\n"
             "toolsets:\n"
             "  - name: default\n"
             "    tools: [\"*\"]\n",
             b, dir, b, dir);
    cfg = th_test_write_file(dir, "fs.yaml", text, (size_t)-1);
    return 0;
}

static int teardown(void)
{
    th_test_rmtree(dir);
    free(dir);
    free(cfg);
    return 0;
}

static bool have_device(void)
{
    char p[4200];
    struct stat sb;
    snprintf(p, sizeof p, "%s/root/zero", dir);
    return lstat(p, &sb) == 0 && S_ISCHR(sb.st_mode);
}

/* `toolhost call -c CFG TOOL path=PATH` with a 10 s cap. */
static void call(th_test_run *r, const char *tool, const char *path)
{
    char arg[4300];
    snprintf(arg, sizeof arg, "path=%s", path);
    char *argv[] = {(char *)th_test_build_path("toolhost"), "call", "-c", cfg,
                    (char *)tool, arg,
                    strcmp(tool, "text_grep") ? NULL : "pattern=x", NULL};
    th_test_run_argv(argv, NULL, 10, 1, r);
}

static void expect_refused(const char *tool, const char *path,
                           const char *words)
{
    th_test_run r = {0};
    int64_t t0 = rpc_now_ms();
    call(&r, tool, path);
    int64_t ms = rpc_now_ms() - t0;
    CU_ASSERT_EQUAL(r.status, 1);
    CU_ASSERT_TRUE(ms < th_test_ms(5000));
    CU_ASSERT_PTR_NULL(strstr(r.out, "SECRET"));
    if (!strstr(r.err, words)) {
        CU_FAIL("refusal message");
        fprintf(stderr, "\n  %s %s (status %d, %lld ms): %s\n", tool, path,
                r.status, (long long)ms, r.err);
    }
    th_test_run_free(&r);
}

static void test_cli(void)
{
    th_test_run r = {0};
    call(&r, "fs_read", "a.txt");
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "hello"));
    th_test_run_free(&r);

    /* Each kind of refusal by each tool that has it; under valgrind
     * (~1 s a run) each kind once, the tools taking turns: the tools share
     * the SDK's one path check, which the normal and sanitizer runs prove
     * for every tool. */
    static const struct {
        const char *tool, *path, *words;
        bool vg; /* run under valgrind too */
    } cases[] = {
        {"fs_read", "pipe", "is a FIFO", true},
        {"text_count", "pipe", "is a FIFO", false},
        {"text_grep", "pipe", "is a FIFO", false},
        {"fs_read", "link_out", "outside the allowed root folder", false},
        {"text_count", "link_out", "outside the allowed root folder", true},
        {"fs_read", "../outside/secret.txt",
         "is outside the allowed root folder", true},
        {"fs_read", "/etc/passwd", "is outside the allowed root folder",
         true},
        {"fs_read", "zero", "is a character device", false},
        {"text_count", "zero", "is a character device", true},
    };
    bool vg = rpc_valgrind();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (vg && !cases[i].vg)
            continue;
        if (strcmp(cases[i].path, "zero") == 0 && !have_device())
            continue;
        expect_refused(cases[i].tool, cases[i].path, cases[i].words);
    }
}

/* The server with 4 workers: 4 fs_read calls of the FIFO (plus 2 of the
 * device) are refused at once, a normal call still answers, and SIGTERM
 * ends the server. */
static void test_serve(void)
{
    rpc_srv s;
    memset(&s, 0, sizeof s);
    s.in_fd = s.out_fd = -1;
    s.dir = th_test_tmpdir();
    s.cfg = strdup(cfg);
    size_t ll = strlen(s.dir) + 16;
    s.log = malloc(ll);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s.cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s.log);
    snprintf(s.log, ll, "%s/serve.log", s.dir);
    snprintf(s.sock, sizeof s.sock, "%s/th.sock", s.dir);
    char listen[128];
    snprintf(listen, sizeof listen, "unix:%s", s.sock);
    int logfd = open(s.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    CU_ASSERT_FATAL(logfd >= 0);
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        execl(th_test_build_path("toolhost"), "toolhost", "serve", "-c",
              cfg, "--listen", listen, (char *)NULL);
        _exit(127);
    }
    close(logfd);
    s.pid = pid;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (rpc_now_ms() < end && !rpc_sock_answers(s.sock))
        usleep(10000);
    if (!rpc_sock_answers(s.sock)) {
        CU_FAIL("server did not come up");
        rpc_dump_log(&s);
        rpc_srv_free(&s);
        return;
    }
    rpc_raw w;
    CU_ASSERT_EQUAL_FATAL(rpc_raw_open(&w, &s), 0);
    int n = have_device() ? 6 : 4;
    int64_t t0 = rpc_now_ms();
    for (int i = 0; i < n; i++)
        rpc_raw_request(&w, (uint64_t)(i + 1), "tools.call",
                        i < 4 ? "[\"fs_read\", {\"path\": \"pipe\"}]"
                              : "[\"text_count\", {\"path\": \"zero\"}]");
    int refused = 0;
    for (int i = 0; i < n; i++) {
        const msgpack_object *m = rpc_raw_response(&w, (uint64_t)(i + 1),
                                                   5000);
        const msgpack_object *res =
            m && m->type == MSGPACK_OBJECT_ARRAY && m->via.array.size == 4
                ? &m->via.array.ptr[3]
                : NULL;
        const msgpack_object *e = th_rpc_map_get(res, "error");
        const msgpack_object *msg = th_rpc_map_get(e, "message");
        const msgpack_object *err = th_rpc_map_get(res, "stderr");
        const char *p;
        size_t len;
        bool said = (msg && th_rpc_obj_str(msg, &p, &len) &&
                     memmem(p, len, "refused", 7)) ||
                    (err && th_rpc_obj_str(err, &p, &len) &&
                     memmem(p, len, "refused", 7));
        if (res && !rpc_ok(res) && said)
            refused++;
    }
    int64_t ms = rpc_now_ms() - t0;
    fprintf(stderr, "\n  %d special-file calls: %d refused in %lld ms ", n,
            refused, (long long)ms);
    /* each answer says "refused": none waited for the 3 s call timeout
     * (that answer says "timed out"), whatever the machine's load */
    CU_ASSERT_EQUAL(refused, n);

    /* every worker is free: a normal call answers */
    rpc_raw_request(&w, 100, "tools.call",
                    "[\"fs_read\", {\"path\": \"a.txt\"}]");
    const msgpack_object *m = rpc_raw_response(&w, 100, rpc_wait_ms());
    const msgpack_object *res =
        m && m->type == MSGPACK_OBJECT_ARRAY && m->via.array.size == 4
            ? &m->via.array.ptr[3]
            : NULL;
    CU_ASSERT_TRUE(res && rpc_ok(res) && rpc_stdout_is(res, "hello"));
    rpc_raw_close(&w);

    t0 = rpc_now_ms();
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    CU_ASSERT_TRUE(rpc_now_ms() - t0 < th_test_ms(5000));
    rpc_srv_free(&s);
}

void th_suite_fs_sec(void)
{
    CU_pSuite s = CU_add_suite("fs_sec", setup, teardown);
    CU_add_test(s, "cli", test_cli);
    CU_add_test(s, "serve", test_serve);
}
