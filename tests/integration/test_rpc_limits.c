/* test_rpc_limits.c - the limits of `toolhost serve` against its clients
 * (docs/config.md, "Connection limits"), each with a small value in the
 * config of the real binary: connection caps (total, per uid, under a low
 * fd limit), frame and idle timeouts, the global buffer budget, protocol
 * errors and per-connection log lines, frames of many tiny values, and the
 * admin-only methods and other users' tasks (as `nobody`, when root). */
#include <CUnit/CUnit.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

/* host.ping answered "pong" on this connection. */
static bool ping(rpc_raw *w, uint64_t id)
{
    th_buf f = TH_BUF_INIT;
    th_rpc_pack_request(&f, id, "host.ping", NULL, 0);
    bool sent = rpc_raw_send(w, f.data, f.len);
    th_buf_destroy(&f);
    if (!sent)
        return false;
    const msgpack_object *m = rpc_raw_response(w, id, rpc_wait_ms());
    return m && th_rpc_obj_streq(&m->via.array.ptr[3], "pong");
}

/* The host said host.disconnect [[code, message]] with `needle` in the
 * message, then closed the connection, within timeout_ms. */
static bool told_and_closed(rpc_raw *w, int code, const char *needle,
                            int timeout_ms)
{
    const msgpack_object *m =
        rpc_raw_notification(w, "host.disconnect", timeout_ms);
    if (!m) {
        fprintf(stderr, "\nno host.disconnect (wanted '%s')\n", needle);
        return false;
    }
    const msgpack_object *p = &m->via.array.ptr[2];
    const char *s;
    size_t n;
    bool ok = p->type == MSGPACK_OBJECT_ARRAY && p->via.array.size == 1 &&
              p->via.array.ptr[0].type == MSGPACK_OBJECT_ARRAY &&
              p->via.array.ptr[0].via.array.size == 2 &&
              p->via.array.ptr[0].via.array.ptr[0].via.i64 == code &&
              th_rpc_obj_str(&p->via.array.ptr[0].via.array.ptr[1], &s, &n);
    if (ok && !memmem(s, n, needle, strlen(needle))) {
        fprintf(stderr, "\nhost.disconnect says '%.*s', wanted '%s'\n",
                (int)n, s, needle);
        ok = false;
    }
    return ok && rpc_raw_eof(w, timeout_ms);
}

/* Lines of the server's log containing `needle`. */
static int log_count(rpc_srv *s, const char *needle)
{
    FILE *f = fopen(s->log, "r");
    if (!f)
        return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* The start of a request [0, 1, "host.ping", [str of `len` bytes]] whose
 * string has not come yet. */
static size_t partial_header(uint8_t *h, uint32_t len)
{
    const uint8_t start[] = {0x94, 0x00, 0x01, 0xa9, 'h', 'o', 's', 't',
                             '.',  'p',  'i',  'n', 'g', 0x91, 0xda};
    memcpy(h, start, sizeof start);
    h[sizeof start] = (uint8_t)(len >> 8);
    h[sizeof start + 1] = (uint8_t)len;
    return sizeof start + 2;
}

/* ---- connection caps -------------------------------------------------------- */

static void test_max_connections(void)
{
    rpc_srv s;
    rpc_opts o = {.host_extra = "  max_connections: 4\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rpc_raw w[5];
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_FATAL(rpc_raw_open(&w[i], &s) == 0);
        CU_ASSERT(ping(&w[i], 1));
    }
    /* The fifth is told why and closed; the four still get answers. */
    CU_ASSERT_FATAL(rpc_raw_open(&w[4], &s) == 0);
    CU_ASSERT(told_and_closed(&w[4], TH_ELIMIT, "max_connections is 4",
                              rpc_wait_ms()));
    rpc_raw_close(&w[4]);
    CU_ASSERT(rpc_log_has(&s, "refused: too many connections: 4 open"));
    for (int i = 0; i < 4; i++)
        CU_ASSERT(ping(&w[i], 2));
    /* One leaves: a new one is served at once. */
    rpc_raw_close(&w[0]);
    CU_ASSERT(rpc_alive(&s));
    /* host.stats counts the refusal */
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "host.stats", "[]", &r) == 0);
    const msgpack_object *refused =
        th_rpc_map_get(th_rpc_map_get(r.res, "connections"), "refused");
    CU_ASSERT(refused && refused->via.u64 == 1);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    for (int i = 1; i < 4; i++)
        rpc_raw_close(&w[i]);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* Runs `fn` in a child as `nobody`: its exit status (0: all well), or -1
 * when that is not possible here (not root, no such user). */
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
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (rc)
        fprintf(stderr, "\nthe child as nobody failed: %d\n", rc);
    return rc;
}

static int nobody_pings(rpc_srv *s, void *ud)
{
    (void)ud;
    rpc_raw w;
    if (rpc_raw_open(&w, s) != 0)
        return 1;
    int rc = ping(&w, 1) ? 0 : 2;
    rpc_raw_close(&w);
    return rc;
}

static void test_max_connections_per_uid(void)
{
    rpc_srv s;
    rpc_opts o = {.host_extra = "  max_connections_per_uid: 2\n",
                  .socket_mode = "0666"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    chmod(s.dir, 0755);
    rpc_raw w[3];
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_FATAL(rpc_raw_open(&w[i], &s) == 0);
        CU_ASSERT(ping(&w[i], 1));
    }
    CU_ASSERT_FATAL(rpc_raw_open(&w[2], &s) == 0);
    CU_ASSERT(told_and_closed(&w[2], TH_ELIMIT,
                              "max_connections_per_uid is 2", rpc_wait_ms()));
    rpc_raw_close(&w[2]);
    CU_ASSERT(rpc_log_has(&s, "refused: too many connections of uid"));
    /* Another uid has its own count. */
    int rc = as_nobody(&s, nobody_pings, NULL);
    CU_ASSERT(rc == 0 || rc == -1);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT(ping(&w[i], 2));
        rpc_raw_close(&w[i]);
    }
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* Under an fd limit of 96 the host lowers max_connections to fit, so the
 * cap (or, when the host holds more fds of its own than the cap allowed
 * for, the fd check) refuses clients with a reason before accept() runs
 * out of fds. */
static void test_fd_limit(void)
{
    if (rpc_valgrind())
        TH_SKIP("valgrind keeps fds of its own under the host's fd limit");
    rpc_srv s;
    rpc_opts o = {.nofile = 96};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    CU_ASSERT(rpc_log_has(&s, "max_connections lowered from 1024"));
    enum { N = 70 };
    rpc_raw w[N];
    int served = 0, refused = 0;
    for (int i = 0; i < N; i++) {
        CU_ASSERT_FATAL(rpc_raw_open(&w[i], &s) == 0);
        if (ping(&w[i], 1))
            served++;
        else
            refused++;
    }
    CU_ASSERT(served >= 40);
    CU_ASSERT(refused >= 1);
    CU_ASSERT(rpc_log_has(&s, "refused: too many connections") ||
              rpc_log_has(&s, "the host is near its fd limit"));
    CU_ASSERT_EQUAL(log_count(&s, "accept failed"), 0);
    for (int i = 0; i < N; i++)
        rpc_raw_close(&w[i]);
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* A plugin holds 80 of the 160 fds allowed: the fds run out before the
 * cap of 96 is reached.  The host refuses clients with a reason while a
 * few fds are left, instead of libuv dropping them without a word once
 * accept() fails. */
static void test_fds_run_out(void)
{
    if (rpc_valgrind())
        TH_SKIP("valgrind keeps fds of its own under the host's fd limit");
    rpc_srv s;
    char plug[512];
    snprintf(plug, sizeof plug,
             "  - name: fd_hog\n"
             "    path: %s/fixtures/fd_hog.so\n",
             TH_BUILD_DIR);
    rpc_opts o = {.nofile = 160, .plugins_extra = plug};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    enum { N = 90 };
    rpc_raw w[N];
    int served = 0, told = 0;
    for (int i = 0; i < N; i++) {
        CU_ASSERT_FATAL(rpc_raw_open(&w[i], &s) == 0);
        if (ping(&w[i], 1))
            served++;
    }
    for (int i = served; i < N; i++) /* refused ones: a reason each */
        told += told_and_closed(&w[i], TH_ELIMIT, "near its fd limit",
                                rpc_wait_ms());
    CU_ASSERT(served >= 20);
    CU_ASSERT(served < N);
    CU_ASSERT_EQUAL(told, N - served);
    CU_ASSERT(rpc_log_has(&s, "refused: the host is near its fd limit"));
    CU_ASSERT_EQUAL(log_count(&s, "accept failed"), 0);
    for (int i = 0; i < N; i++)
        rpc_raw_close(&w[i]);
    /* The closes reach the host's loop in their own time: until it has
     * seen enough of them a new client is still refused for the fd
     * limit (as it should be), so the host is asked again until then. */
    bool alive = false;
    for (int64_t end = rpc_now_ms() + rpc_wait_ms(); !alive && rpc_now_ms() < end;) {
        alive = rpc_alive(&s);
        if (!alive)
            nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
    }
    CU_ASSERT(alive);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- timeouts ------------------------------------------------------------------ */

static void test_frame_timeout(void)
{
    rpc_srv s;
    rpc_opts o = {.host_extra = "  frame_timeout: 1s\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rpc_raw half, quiet;
    CU_ASSERT_FATAL(rpc_raw_open(&half, &s) == 0);
    CU_ASSERT_FATAL(rpc_raw_open(&quiet, &s) == 0);
    CU_ASSERT(ping(&quiet, 1));
    th_buf f = TH_BUF_INIT;
    th_rpc_pack_request(&f, 1, "host.ping", NULL, 0);
    int64_t t0 = rpc_now_ms();
    rpc_raw_send(&half, f.data, f.len / 2);
    CU_ASSERT(told_and_closed(&half, TH_ETIMEOUT, "frame_timeout",
                              rpc_wait_ms()));
    int64_t took = rpc_now_ms() - t0;
    CU_ASSERT(took >= 900);
    CU_ASSERT(took < 1000 + rpc_wait_ms() / 2);
    rpc_raw_close(&half);
    th_buf_destroy(&f);
    CU_ASSERT(rpc_log_has(&s, "frame_timeout: session="));
    /* A connection between frames is not affected. */
    CU_ASSERT(ping(&quiet, 2));
    rpc_raw_close(&quiet);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* Times in units of idle_timeout (1.5 s, scaled): a task of 3 keeps its
 * connection busy, a connection that talks every 250 ms for 2 stays, the
 * silent one is closed.  The chatty one must talk again within the idle
 * timeout, however late this thread wakes up: with 1 s and 300 ms naps a
 * wake-up 900 ms late had it closed (the margin is 1.25 s now, scaled). */
static void test_idle_timeout(void)
{
    const int64_t idle_ms = th_test_ms(1500);
    char extra[64];
    snprintf(extra, sizeof extra, "  idle_timeout: %lldms\n", (long long)idle_ms);
    rpc_srv s;
    rpc_opts o = {.host_extra = extra};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rpc_raw idle, task, chatty;
    CU_ASSERT_FATAL(rpc_raw_open(&idle, &s) == 0);
    CU_ASSERT_FATAL(rpc_raw_open(&task, &s) == 0);
    CU_ASSERT_FATAL(rpc_raw_open(&chatty, &s) == 0);
    CU_ASSERT(ping(&idle, 1));
    /* A task of 3 idle_timeouts: its connection is busy, not idle. */
    char call[160];
    snprintf(call, sizeof call,
             "[\"echo_async\", {\"text\": \"t\", \"steps\": 30, "
             "\"delay_ms\": %lld}]", (long long)idle_ms / 10);
    rpc_raw_request(&task, 1, "tools.call", call);
    int64_t t0 = rpc_now_ms();
    /* One that talks every 250 ms for 2 idle_timeouts stays. */
    bool chatty_ok = true;
    for (uint64_t id = 1; rpc_now_ms() - t0 < 2 * idle_ms; id++) {
        chatty_ok &= ping(&chatty, id);
        usleep(250000);
    }
    CU_ASSERT(chatty_ok);
    CU_ASSERT(told_and_closed(&idle, TH_ETIMEOUT, "idle_timeout",
                              rpc_wait_ms()));
    rpc_raw_close(&idle);
    CU_ASSERT(rpc_raw_notification(&task, "task.done", rpc_wait_ms()) !=
              NULL);
    CU_ASSERT(rpc_now_ms() - t0 >= idle_ms * 5 / 2);
    /* Once its task is over, it is idle too. */
    CU_ASSERT(told_and_closed(&task, TH_ETIMEOUT, "idle_timeout",
                              rpc_wait_ms()));
    rpc_raw_close(&task);
    rpc_raw_close(&chatty);
    CU_ASSERT(rpc_log_has(&s, "idle_timeout: session="));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- the global budget ---------------------------------------------------------- */

/* Partial frames of 6 connections add up past max_buffered (256 KiB): the
 * one holding the most is closed, the others finish their frames. */
static void test_buffer_budget(void)
{
    rpc_srv s;
    rpc_opts o = {.host_extra = "  max_buffered: 256KiB\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    enum { N = 6, LEN = 60000 };
    const size_t sizes[N] = {40000, 40000, 40000, 40000, 59000, 50000};
    uint8_t *body = malloc(LEN);
    CU_ASSERT_FATAL(body != NULL);
    memset(body, 'a', LEN);
    uint8_t h[32];
    size_t hl = partial_header(h, LEN);
    rpc_raw w[N];
    for (int i = 0; i < N; i++) {
        CU_ASSERT_FATAL(rpc_raw_open(&w[i], &s) == 0);
        CU_ASSERT(ping(&w[i], 1));
    }
    for (int i = 0; i < N; i++) {
        rpc_raw_send(&w[i], h, hl);
        rpc_raw_send(&w[i], body, sizes[i]);
        usleep(100000); /* read in this order */
    }
    CU_ASSERT(told_and_closed(&w[4], TH_ELIMIT, "max_buffered",
                              rpc_wait_ms()));
    rpc_raw_close(&w[4]);
    CU_ASSERT(rpc_log_has(&s, "max_buffered: "));
    for (int i = 0; i < N; i++) {
        if (i == 4)
            continue;
        rpc_raw_send(&w[i], body, LEN - sizes[i]);
        const msgpack_object *m = rpc_raw_response(&w[i], 1, rpc_wait_ms());
        CU_ASSERT(m && th_rpc_obj_streq(&m->via.array.ptr[3], "pong"));
        rpc_raw_close(&w[i]);
    }
    free(body);
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- protocol errors and log lines ---------------------------------------------- */

static void test_protocol_errors(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    /* 200 frames of one byte (nil): valid msgpack, not messages. */
    uint8_t nils[200];
    memset(nils, 0xc0, sizeof nils);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_send(&w, nils, sizeof nils);
    CU_ASSERT(told_and_closed(&w, TH_EPROTO, "8 protocol errors",
                              rpc_wait_ms()));
    rpc_raw_close(&w);
    CU_ASSERT(rpc_wait_connections(&s, 0, rpc_wait_ms()));
    int bad = log_count(&s, "bad message");
    CU_ASSERT(bad >= 1 && bad <= 8);
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void test_conn_log_lines(void)
{
    rpc_srv s;
    rpc_opts o = {.host_extra = "  max_protocol_errors: 100000\n"
                                "  max_conn_log_lines: 5\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    int n = rpc_scale(2000);
    uint8_t *nils = malloc((size_t)n);
    CU_ASSERT_FATAL(nils != NULL);
    memset(nils, 0xc0, (size_t)n);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_send(&w, nils, (size_t)n);
    free(nils);
    /* Every nil is answered with host.protocol_error; a ping after them
     * is answered once they all were. */
    CU_ASSERT(ping(&w, 1));
    rpc_raw_close(&w);
    CU_ASSERT(rpc_wait_connections(&s, 0, rpc_wait_ms()));
    CU_ASSERT(log_count(&s, "bad message") <= 5);
    CU_ASSERT(rpc_log_has(&s, "more log lines of this session are "
                              "suppressed"));
    CU_ASSERT(rpc_log_has(&s, "log lines suppressed)"));
    CU_ASSERT(log_count(&s, "\n") < 100);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- frames of many tiny values ---------------------------------------------------- */

static void test_frame_values(void)
{
    rpc_srv s;
    rpc_opts o = {.max_frame = "4MiB"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    /* [0, 1, "host.ping", [nil x 1,000,000]]: 1 MB that would unpack to
     * 24 MB. */
    enum { NILS = 1000000 };
    size_t len = 13 + 5 + NILS;
    uint8_t *f = malloc(len);
    CU_ASSERT_FATAL(f != NULL);
    const uint8_t start[] = {0x94, 0x00, 0x01, 0xa9, 'h', 'o', 's', 't',
                             '.',  'p',  'i',  'n', 'g', 0xdd, 0x00, 0x0f,
                             0x42, 0x40};
    memcpy(f, start, sizeof start);
    memset(f + sizeof start, 0xc0, NILS);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_send(&w, f, len);
    CU_ASSERT(told_and_closed(&w, TH_ELIMIT, "values", rpc_wait_ms()));
    rpc_raw_close(&w);
    CU_ASSERT(rpc_log_has(&s, "holds more than"));
    /* 3 MB of bytes in a few values is fine: [bin of 3 MB] */
    free(f);
    uint32_t bl = 3000000;
    len = 19 + bl;
    f = malloc(len);
    CU_ASSERT_FATAL(f != NULL);
    memcpy(f, start, 13);
    const uint8_t bh[] = {0x91, 0xc6, (uint8_t)(bl >> 24), (uint8_t)(bl >> 16),
                          (uint8_t)(bl >> 8), (uint8_t)bl};
    memcpy(f + 13, bh, sizeof bh);
    memset(f + 19, 'x', bl);
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_send(&w, f, len);
    const msgpack_object *m = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT(m && th_rpc_obj_streq(&m->via.array.ptr[3], "pong"));
    rpc_raw_close(&w);
    free(f);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- admins and other users' tasks ------------------------------------------------ */

/* The error code of a response, 0 when it has none. */
static int64_t err_code(const msgpack_object *m)
{
    if (!m)
        return 1;
    const msgpack_object *e = &m->via.array.ptr[2];
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2)
        return 0;
    return e->via.array.ptr[0].via.i64;
}

static int nobody_checks(rpc_srv *s, void *ud)
{
    uint64_t task = *(uint64_t *)ud;
    rpc_raw w;
    if (rpc_raw_open(&w, s) != 0)
        return 1;
    int fail = 0;
    rpc_raw_request(&w, 1, "host.reload", "[]");
    if (err_code(rpc_raw_response(&w, 1, rpc_wait_ms())) != TH_EPERM)
        fail |= 2;
    rpc_raw_request(&w, 2, "host.stats", "[]");
    const msgpack_object *m = rpc_raw_response(&w, 2, rpc_wait_ms());
    const msgpack_object *res = m ? &m->via.array.ptr[3] : NULL;
    const msgpack_object *tools = th_rpc_map_get(res, "tools");
    if (!res || th_rpc_map_get(res, "reload") ||
        th_rpc_map_get(tools, "fs_stat") || !th_rpc_map_get(tools, "echo"))
        fail |= 4;
    char p[64];
    snprintf(p, sizeof p, "[%llu]", (unsigned long long)task);
    rpc_raw_request(&w, 3, "tasks.result", p);
    if (err_code(rpc_raw_response(&w, 3, rpc_wait_ms())) != TH_ENOTFOUND)
        fail |= 8;
    rpc_raw_request(&w, 4, "tasks.cancel", p);
    if (err_code(rpc_raw_response(&w, 4, rpc_wait_ms())) != TH_ENOTFOUND)
        fail |= 16;
    rpc_raw_close(&w);
    return fail;
}

static void test_admin_and_tasks(void)
{
    struct passwd *pw = getpwnam("nobody");
    if (geteuid() != 0 || !pw)
        TH_SKIP("needs root and a 'nobody' user");
    rpc_srv s;
    rpc_opts o = {.socket_mode = "0666",
                  .public_extra = "    scope: toolset\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    chmod(s.dir, 0755);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call", "[\"fs_stat\", {\"path\": \".\"}]");
    rpc_raw_request(&w, 2, "tools.call", "[\"echo\", {\"text\": \"e\"}]");
    CU_ASSERT(rpc_raw_response(&w, 1, rpc_wait_ms()) != NULL);
    CU_ASSERT(rpc_raw_response(&w, 2, rpc_wait_ms()) != NULL);
    /* root's toolset-scoped task, 2 s long */
    rpc_raw_request(&w, 3, "tools.call",
                    "[\"echo_async\", {\"text\": \"mine\", \"steps\": 20, "
                    "\"delay_ms\": 100}]");
    const msgpack_object *m = rpc_raw_response(&w, 3, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *tid =
        th_rpc_map_get(&m->via.array.ptr[3], "task_id");
    CU_ASSERT_FATAL(tid != NULL);
    uint64_t task = tid->via.u64;
    CU_ASSERT_EQUAL(as_nobody(&s, nobody_checks, &task), 0);
    /* The task was not touched: it ends well. */
    m = rpc_raw_notification(&w, "task.done", rpc_wait_ms());
    CU_ASSERT(m && rpc_ok(&m->via.array.ptr[2].via.array.ptr[1]) &&
              rpc_stdout_is(&m->via.array.ptr[2].via.array.ptr[1], "mine"));
    /* root is an admin: the whole stats, and reloads. */
    rpc_raw_request(&w, 4, "host.stats", "[]");
    m = rpc_raw_response(&w, 4, rpc_wait_ms());
    CU_ASSERT(m && th_rpc_map_get(th_rpc_map_get(&m->via.array.ptr[3],
                                                 "tools"),
                                  "fs_stat"));
    rpc_raw_request(&w, 5, "host.reload", "[]");
    m = rpc_raw_response(&w, 5, rpc_wait_ms());
    CU_ASSERT(m && err_code(m) != TH_EPERM);
    /* and the task's result is its own uid's from another session */
    rpc_raw_close(&w);
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    char p[64];
    snprintf(p, sizeof p, "[%llu]", (unsigned long long)task);
    rpc_raw_request(&w, 6, "tasks.result", p);
    m = rpc_raw_response(&w, 6, rpc_wait_ms());
    CU_ASSERT(m && rpc_stdout_is(&m->via.array.ptr[3], "mine"));
    rpc_raw_close(&w);
    CU_ASSERT(rpc_log_has(&s, "host.reload refused: not an admin"));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

void th_suite_rpc_limits(void)
{
    CU_pSuite s = CU_add_suite("rpc_limits", NULL, NULL);
    CU_add_test(s, "max_connections", test_max_connections);
    CU_add_test(s, "max_connections_per_uid", test_max_connections_per_uid);
    CU_add_test(s, "fd_limit", test_fd_limit);
    CU_add_test(s, "fds_run_out", test_fds_run_out);
    CU_add_test(s, "frame_timeout", test_frame_timeout);
    CU_add_test(s, "idle_timeout", test_idle_timeout);
    CU_add_test(s, "buffer_budget", test_buffer_budget);
    CU_add_test(s, "protocol_errors", test_protocol_errors);
    CU_add_test(s, "conn_log_lines", test_conn_log_lines);
    CU_add_test(s, "frame_values", test_frame_values);
    CU_add_test(s, "admin_and_tasks", test_admin_and_tasks);
}
