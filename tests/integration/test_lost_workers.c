/* test_lost_workers.c - the real `toolhost serve` against tools that
 * misbehave with the process itself: a tool that ignores cancellation
 * (hang_nocancel: lost workers, shutdown that does not wait for it, a
 * second signal), a tool that closes fds 0-2 (close_stdio: the log must
 * never go into a client's socket), and a host started with 0-2 closed. */
#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

typedef struct lw_opts {
    const char *host_extra; /* more lines under host: */
    const char *grace;      /* host.shutdown_grace; default 500ms */
    bool close_fd[3];       /* closed in the child before exec */
} lw_opts;

/* Starts `toolhost serve` on a config with the echo plugin and the two
 * fixtures, stderr into DIR/serve.log (unless fd 2 is to be closed). */
static int lw_start(rpc_srv *s, const lw_opts *o)
{
    memset(s, 0, sizeof *s);
    s->in_fd = s->out_fd = -1;
    s->dir = th_test_tmpdir();
    const char *b = TH_BUILD_DIR;
    char text[4096];
    snprintf(text, sizeof text,
             "host:\n"
             "  log_level: debug\n"
             "  workers: 2\n"
             "  lost_worker_grace: 300ms\n"
             "  shutdown_grace: %s\n"
             "  session_grace: 200ms\n"
             "%s"
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s/plugins/echo.so\n"
             "  - name: hang\n"
             "    path: %s/fixtures/hang_nocancel.so\n"
             "  - name: closer\n"
             "    path: %s/fixtures/close_stdio.so\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [echo, hang_nocancel, close_stdio]\n",
             o->grace ? o->grace : "500ms", o->host_extra ? o->host_extra : "",
             b, b, b);
    s->cfg = th_test_write_file(s->dir, "lw.yaml", text, (size_t)-1);
    snprintf(s->sock, sizeof s->sock, "%s/th.sock", s->dir);
    size_t ll = strlen(s->dir) + 16;
    s->log = malloc(ll);
    if (!s->log)
        rpc_die("malloc");
    snprintf(s->log, ll, "%s/serve.log", s->dir);
    char listen[128];
    snprintf(listen, sizeof listen, "unix:%s", s->sock);
    const char *argv[] = {rpc_server_bin(), "serve", "-c", s->cfg,
                          "--listen", listen, NULL};
    int logfd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0)
        rpc_die("open log");
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        rpc_die("fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        for (int fd = 0; fd < 3; fd++)
            if (o->close_fd[fd])
                close(fd);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(logfd);
    s->pid = pid;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (rpc_now_ms() < end) {
        if (rpc_sock_answers(s->sock))
            return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->reaped = true;
            s->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            break;
        }
        usleep(10000);
    }
    rpc_dump_log(s);
    return -1;
}

/* A hang_nocancel call with a 200 ms timeout answers `timeout` in time:
 * far before the 60 s the tool spins. */
static bool hang_times_out(th_rpc_client *c)
{
    rpc_res r;
    int64_t t0 = rpc_now_ms();
    bool ok = rpc_call(c, "tools.call",
                       "[\"hang_nocancel\", {\"ms\": 60000}, "
                       "{\"timeout_ms\": 200}]",
                       &r) == 0 &&
              rpc_tool_error_is(r.res, "timeout");
    int64_t took = rpc_now_ms() - t0;
    if (!ok || took >= th_test_ms(10000))
        fprintf(stderr, "\nhang_nocancel: %s after %lld ms\n",
                ok ? "timeout" : "not the timeout error", (long long)took);
    rpc_res_free(&r);
    return ok && took < th_test_ms(10000);
}

/* Four calls of a tool that ignores cancellation on two workers: normal
 * calls still succeed, host.stats counts the lost workers, and SIGTERM
 * ends the host within its graces (the stuck threads are abandoned). */
static void test_lost_workers_serve(void)
{
    rpc_srv s;
    lw_opts o = {.host_extra = "  max_lost_workers: 4\n"};
    CU_ASSERT_FATAL(lw_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    /* On a busy machine a call can time out before a worker takes it:
     * then it never runs and loses no worker.  So calls until four run
     * stuck in the tool (manager.running counts them: they never return),
     * at most 12. */
    for (int i = 0; i < 12 && rpc_mgr_stat(c, "running") < 4; i++)
        CU_ASSERT(hang_times_out(c));
    CU_ASSERT_EQUAL(rpc_mgr_stat(c, "running"), 4);
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (rpc_mgr_stat(c, "lost_workers") < 4 && rpc_now_ms() < end)
        usleep(20000);
    /* (before: the first of these waited until a stuck tool ended) */
    int64_t t_echo = rpc_now_ms();
    for (int i = 0; i < 10; i++) {
        rpc_res r;
        CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {\"text\": \"up\"}]",
                           &r) == 0 &&
                  rpc_stdout_is(r.res, "up"));
        rpc_res_free(&r);
    }
    /* far below the 60 s a stuck tool takes */
    CU_ASSERT(rpc_now_ms() - t_echo < th_test_ms(2000));
    CU_ASSERT_EQUAL(rpc_mgr_stat(c, "lost_workers"), 4);
    CU_ASSERT_EQUAL(rpc_mgr_stat(c, "lost_workers_now"), 4);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_alive(&s));
    int64_t t0 = rpc_now_ms();
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    int64_t took = rpc_now_ms() - t0;
    if (getenv("TH_TEST_VERBOSE"))
        fprintf(stderr, "\nexit after SIGTERM with 4 lost workers: %lld ms\n",
                (long long)took);
    CU_ASSERT(took < th_test_ms(5000));
    CU_ASSERT(rpc_log_has(&s, "lost worker: tool=hang_nocancel call="));
    CU_ASSERT(rpc_log_has(&s, "starting a replacement"));
    CU_ASSERT(rpc_log_has(&s, "abandoning 4 workers"));
    rpc_srv_free(&s);
}

/* A call stuck in a tool that ignores cancellation, in flight at SIGTERM:
 * the host cancels it after the grace and exits without it. */
static void test_stuck_call_sigterm(void)
{
    rpc_srv s;
    lw_opts o = {0};
    CU_ASSERT_FATAL(lw_start(&s, &o) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call",
                    "[\"hang_nocancel\", {\"ms\": 60000}, "
                    "{\"timeout_ms\": 60000}]");
    CU_ASSERT_FATAL(rpc_wait_running(&s, 1));
    int64_t t0 = rpc_now_ms();
    kill(s.pid, SIGTERM);
    const msgpack_object *m = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT(m && rpc_tool_error_is(&m->via.array.ptr[3], "cancelled"));
    CU_ASSERT_EQUAL(rpc_srv_wait(&s), 0);
    int64_t took = rpc_now_ms() - t0;
    if (getenv("TH_TEST_VERBOSE"))
        fprintf(stderr, "\nexit after SIGTERM with a stuck call: %lld ms\n",
                (long long)took);
    /* the graces (0.5 s + 0.3 s), far below the 60 s the tool takes */
    CU_ASSERT(took < th_test_ms(6000));
    CU_ASSERT(rpc_log_has(&s, "abandoning 1 worker"));
    CU_ASSERT(rpc_log_has(&s, "shutdown complete"));
    rpc_raw_close(&w);
    rpc_srv_free(&s);
}

/* A second SIGTERM while the host waits for calls exits at once; its
 * line comes from the signal handler (th_log_raw), as JSON in the JSON
 * format. */
static void second_signal(bool json)
{
    /* a grace far beyond the bound on the exit below */
    char grace[32];
    snprintf(grace, sizeof grace, "%ums", th_test_ms(20000));
    rpc_srv s;
    lw_opts o = {.grace = grace,
                 .host_extra = json ? "  log_format: json\n" : NULL};
    CU_ASSERT_FATAL(lw_start(&s, &o) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call",
                    "[\"hang_nocancel\", {\"ms\": 60000}, "
                    "{\"timeout_ms\": 60000}]");
    CU_ASSERT_FATAL(rpc_wait_running(&s, 1));
    kill(s.pid, SIGTERM);
    /* the first signal taken: the host now waits for the call */
    CU_ASSERT_FATAL(rpc_log_wait(&s, "shutdown: SIGTERM", rpc_wait_ms()));
    int64_t t0 = rpc_now_ms();
    kill(s.pid, SIGTERM);
    int st = rpc_srv_wait(&s);
    int64_t took = rpc_now_ms() - t0;
    CU_ASSERT_EQUAL(st, 1);
    /* at once: far below the 20 s grace (both scaled alike; a
     * ThreadSanitizer build sleeps 1 s at exit, valgrind is slower) */
    if (getenv("TH_TEST_VERBOSE"))
        fprintf(stderr, "\nexit after the second SIGTERM: %lld ms\n",
                (long long)took);
    CU_ASSERT(took < th_test_ms(2500));
    CU_ASSERT(rpc_log_has(&s, "shutdown: SIGTERM while stopping: exiting now"));
    if (json) { /* the handler's line: one whole JSON object */
        char *log = th_test_read_file(s.log, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(log);
        char *at = strstr(log, "while stopping: exiting now");
        char *start = at;
        while (start && start > log && start[-1] != '\n')
            start--;
        char *end = at ? strchr(at, '\n') : NULL;
        json_t *line = start && end ? json_loadb(start, (size_t)(end - start),
                                                 0, NULL)
                                    : NULL;
        CU_ASSERT_PTR_NOT_NULL(line);
        const char *ev = json_string_value(json_object_get(line, "event"));
        const char *lv = json_string_value(json_object_get(line, "level"));
        const char *ts = json_string_value(json_object_get(line, "ts"));
        CU_ASSERT(ev && strcmp(ev, "shutdown") == 0);
        CU_ASSERT(lv && strcmp(lv, "warn") == 0);
        CU_ASSERT(ts && strlen(ts) == 24 && ts[10] == 'T' && ts[23] == 'Z');
        json_decref(line);
        free(log);
    }
    rpc_raw_close(&w);
    rpc_srv_free(&s);
}

static void test_second_signal(void)
{
    second_signal(false);
}

static void test_second_signal_json(void)
{
    second_signal(true);
}

/* Sends `n` echo calls on a raw connection and reads every byte that comes
 * back: only the n responses (no log text: note that ASCII text parses as
 * msgpack too - a string of positive fixints - so nothing but the
 * responses may arrive). */
static bool only_msgpack(rpc_raw *w, uint64_t first_id, int n)
{
    for (int i = 0; i < n; i++)
        rpc_raw_request(w, first_id + (uint64_t)i, "tools.call",
                        "[\"echo\", {\"text\": \"mine\"}]");
    for (int i = 0; i < n; i++) {
        const msgpack_object *m =
            rpc_raw_response(w, first_id + (uint64_t)i, rpc_wait_ms());
        if (!m || !rpc_stdout_is(&m->via.array.ptr[3], "mine"))
            return false;
    }
    /* nothing more: no log line came after them either - a last call's
     * answer is the very next message (a barrier, not a quiet wait) */
    rpc_raw_request(w, first_id + (uint64_t)n, "tools.call",
                    "[\"echo\", {\"text\": \"last\"}]");
    const msgpack_object *m = rpc_raw_next(w, rpc_wait_ms());
    if (!m || m->type != MSGPACK_OBJECT_ARRAY || m->via.array.size != 4 || m->via.array.ptr[0].via.u64 != 1 ||
        m->via.array.ptr[1].via.u64 != first_id + (uint64_t)n ||
        !rpc_stdout_is(&m->via.array.ptr[3], "last")) {
        fprintf(stderr, "\na message besides the responses\n");
        return false;
    }
    if (w->n_stash > 0) {
        fprintf(stderr, "\n%d messages besides the responses\n", w->n_stash);
        return false;
    }
    return true;
}

/* A tool closes fds 0-2; then new clients connect (the server's next
 * sockets get those numbers): they receive only msgpack, and the log
 * still reaches the host's stderr. */
static void test_plugin_closes_stdio(void)
{
    rpc_srv s;
    lw_opts o = {0};
    CU_ASSERT_FATAL(lw_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.call", "[\"close_stdio\", {}]", &r) == 0 &&
              rpc_stdout_is(r.res, "closed"));
    rpc_res_free(&r);
    rpc_raw w[4];
    for (int i = 0; i < 4; i++)
        CU_ASSERT_FATAL(rpc_raw_open(&w[i], &s) == 0);
    for (int i = 0; i < 4; i++)
        CU_ASSERT(only_msgpack(&w[i], 10, 3));
    for (int i = 0; i < 4; i++)
        rpc_raw_close(&w[i]);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    /* lines logged after the close reached the log file */
    CU_ASSERT(rpc_log_has(&s, "tool=close_stdio"));
    CU_ASSERT(rpc_log_has(&s, "shutdown complete"));
    rpc_srv_free(&s);
}

/* Started with fds 0-2 closed: the host serves, and its clients receive
 * only msgpack. */
static void test_started_without_stdio(void)
{
    rpc_srv s;
    lw_opts o = {.close_fd = {true, true, true}};
    CU_ASSERT_FATAL(lw_start(&s, &o) == 0);
    rpc_raw w[4];
    for (int i = 0; i < 4; i++)
        CU_ASSERT_FATAL(rpc_raw_open(&w[i], &s) == 0);
    for (int i = 0; i < 4; i++)
        CU_ASSERT(only_msgpack(&w[i], 1, 3));
    for (int i = 0; i < 4; i++)
        rpc_raw_close(&w[i]);
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);

    /* 0 and 1 closed, 2 kept: it serves and logs */
    lw_opts o2 = {.close_fd = {true, true, false}};
    CU_ASSERT_FATAL(lw_start(&s, &o2) == 0);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_FATAL(rpc_raw_open(&w[i], &s) == 0);
    for (int i = 0; i < 3; i++)
        CU_ASSERT(only_msgpack(&w[i], 1, 3));
    for (int i = 0; i < 3; i++)
        rpc_raw_close(&w[i]);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    CU_ASSERT(rpc_log_has(&s, "listening on unix:"));
    CU_ASSERT(rpc_log_has(&s, "tool=echo"));
    CU_ASSERT(rpc_log_has(&s, "shutdown complete"));
    rpc_srv_free(&s);
}

void th_suite_lost_workers(void)
{
    CU_pSuite s = CU_add_suite("lost_workers", NULL, NULL);
    CU_add_test(s, "lost_workers_serve", test_lost_workers_serve);
    CU_add_test(s, "stuck_call_sigterm", test_stuck_call_sigterm);
    CU_add_test(s, "second_signal", test_second_signal);
    CU_add_test(s, "second_signal_json", test_second_signal_json);
    CU_add_test(s, "plugin_closes_stdio", test_plugin_closes_stdio);
    CU_add_test(s, "started_without_stdio", test_started_without_stdio);
}
