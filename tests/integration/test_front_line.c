/* test_front_line.c - the test tree's fifth front (tests/fronts/line.c),
 * added through its descriptor alone: its config section is read by the
 * core's config reader (keys, defaults, file:line:col errors, its listen
 * scheme), `serve`'s way of opening a front opens it, its sessions call
 * tools, and its counters reach the host's stats under its own name. */
#include <CUnit/CUnit.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/th_test.h"
#include "fronts/line.h"
#include "th/config.h"
#include "th/front.h"
#include "th/host.h"
#include "th/section.h"

static th_config *parse(const char *yaml, th_error *e)
{
    th_config *cfg = NULL;
    th_error_clear(e);
    CU_ASSERT_EQUAL_FATAL(th_front_register(&th_line_front), 0);
    if (th_config_parse("t.yaml", "/", yaml, strlen(yaml), &cfg, e) != 0)
        return NULL;
    return cfg;
}

/* One line of the answer (without its newline), or "" at end of stream. */
static void read_line(int fd, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    while (n + 1 < size) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)th_test_ms(10000)) != 1)
            break;
        ssize_t r = read(fd, out + n, 1);
        if (r != 1 || out[n] == '\n')
            break;
        out[++n] = '\0';
    }
    out[n] = '\0';
}

typedef struct counts {
    uint64_t too_long, protocol;
} counts;

static int count_fn(const char *front, const char *reason,
                    th_front_event_class cls, uint64_t n, void *ud)
{
    counts *c = ud;
    if (strcmp(front, "line") != 0)
        return 0;
    if (strcmp(reason, "line_too_long") == 0 && cls == TH_FEV_CLOSED)
        c->too_long = n;
    if (strcmp(reason, "protocol_error") == 0 && cls == TH_FEV_PROTOCOL)
        c->protocol = n;
    return 0;
}

static void test_serves(void)
{
    char *dir = th_test_tmpdir();
    char yaml[1024], sock[256];
    snprintf(sock, sizeof sock, "%s/line.sock", dir);
    snprintf(yaml, sizeof yaml,
             "host:\n  log_level: error\n  listen: [\"line:%s\"]\n"
             "line:\n  max_line: 64\n"
             "plugins:\n  - name: echo\n    path: %s\n",
             sock, th_test_build_path("plugins/echo.so"));
    th_error e;
    th_config *cfg = parse(yaml, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    th_host *h = NULL;
    CU_ASSERT_EQUAL_FATAL(th_host_open(cfg, &h, &e), 0);
    void *state = NULL;
    CU_ASSERT_EQUAL_FATAL(th_line_front.open(h, &state, &e), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(state);

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%.100s", sock);
    CU_ASSERT_EQUAL_FATAL(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char line[256];
    static const char call[] = "echo {\"text\": \"hi there\"}\n";
    CU_ASSERT_EQUAL(write(fd, call, strlen(call)), (ssize_t)strlen(call));
    read_line(fd, line, sizeof line);
    CU_ASSERT_STRING_EQUAL(line, "ok hi there");
    static const char bad[] = "echo [1]\nnope {}\n";
    CU_ASSERT_EQUAL(write(fd, bad, strlen(bad)), (ssize_t)strlen(bad));
    read_line(fd, line, sizeof line);
    CU_ASSERT_STRING_EQUAL(line, "error invalid_request arguments must be "
                                 "a JSON object");
    read_line(fd, line, sizeof line);
    CU_ASSERT_EQUAL(strncmp(line, "error unknown_tool ", 19), 0);
    /* a line longer than line.max_line (64) closes the connection */
    char longl[100];
    memset(longl, 'x', sizeof longl);
    CU_ASSERT_EQUAL(write(fd, longl, sizeof longl), (ssize_t)sizeof longl);
    read_line(fd, line, sizeof line);
    CU_ASSERT_STRING_EQUAL(line, "");
    close(fd);

    counts c = {0};
    th_host_front_events_foreach(h, count_fn, &c);
    CU_ASSERT_EQUAL(c.too_long, 1);
    CU_ASSERT_EQUAL(c.protocol, 1);
    th_front_stats fs[TH_FRONTS_MAX + 1];
    size_t nf = th_host_front_stats(h, fs, TH_FRONTS_MAX + 1);
    uint64_t opened = 0;
    for (size_t i = 0; i < nf; i++)
        if (strcmp(fs[i].front, "line") == 0)
            opened = fs[i].opened;
    CU_ASSERT_EQUAL(opened, 1);
    th_line_front.close(state);
    th_host_close(h);
    th_test_rmtree(dir);
    free(dir);
}

/* The stats keep a front's name past the session that gave it: a session
 * whose th_front_ops.front lives in a buffer of its opener's (freed or
 * reused once the session is gone) still counts under the name it had,
 * and the buffer's new text is not taken for it. */
static void test_stats_name_copied(void)
{
    th_error e;
    th_config *cfg = parse("host:\n  log_level: error\n", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    th_host *h = NULL;
    CU_ASSERT_EQUAL_FATAL(th_host_open(cfg, &h, &e), 0);
    char name[16] = "zfront_a";
    th_front_ops ops = {.front = name};
    th_principal who = {(uint32_t)getuid(), (uint32_t)getgid(), true};
    th_session *s = th_session_open(h, &who, &ops, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    th_session_close(s);
    memcpy(name, "zfront_b", 9); /* the opener reuses its buffer */
    th_front_stats fs[TH_FRONTS_MAX + 1];
    size_t nf = th_host_front_stats(h, fs, TH_FRONTS_MAX + 1);
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i < nf; i++) {
        CU_ASSERT_PTR_NOT_EQUAL(fs[i].front, name);
        if (strcmp(fs[i].front, "zfront_a") == 0)
            a = fs[i].opened;
        if (strcmp(fs[i].front, "zfront_b") == 0)
            b = fs[i].opened;
    }
    CU_ASSERT_EQUAL(a, 1);
    CU_ASSERT_EQUAL(b, 0);
    th_host_close(h);
}

/* A front registered when the stats' table of front names is full (more
 * than TH_FRONTS_MAX names given by sessions before it) has no counters
 * of its own: its events would land in "other", shared with every other
 * such front, and each would report the others' counts as its own.  Run
 * in a child process: the table is the process's. */
static int late_count(const char *front, const char *reason,
                      th_front_event_class cls, uint64_t n, void *ud)
{
    (void)reason, (void)cls;
    if (strcmp(front, "late_b") == 0)
        *(uint64_t *)ud += n;
    return 0;
}

static int late_fronts_child(void)
{
    th_error e;
    th_config *cfg = NULL;
    static const char yaml[] = "host:\n  log_level: error\n";
    if (th_config_parse("t.yaml", "/", yaml, strlen(yaml), &cfg, &e) != 0)
        return 10;
    th_host *h = NULL;
    if (th_host_open(cfg, &h, &e) != 0)
        return 11;
    static char names[TH_FRONTS_MAX + 2][16];
    th_principal who = {(uint32_t)getuid(), (uint32_t)getgid(), true};
    for (int i = 0; i < TH_FRONTS_MAX + 2; i++) {
        snprintf(names[i], sizeof names[i], "fill%d", i);
        th_front_ops ops = {.front = names[i]};
        th_session *s = th_session_open(h, &who, &ops, NULL);
        if (!s)
            return 12;
        th_session_close(s);
    }
    static const th_front_event_desc ev[1] = {{"boom", TH_FEV_CLOSED}};
    static const th_front a = {.name = "late_a", .events = ev, .n_events = 1};
    static const th_front b = {.name = "late_b", .events = ev, .n_events = 1};
    int ra = th_front_register(&a), rb = th_front_register(&b);
    th_stat_front_event(h, "late_a", 0); /* one event, of late_a */
    uint64_t nb = 0;
    th_host_front_events_foreach(h, late_count, &nb);
    th_host_close(h);
    if (nb != 0)
        return 13; /* late_b reported late_a's event */
    if (ra != TH_ELIMIT || rb != TH_ELIMIT)
        return 14;
    return 0;
}

static void test_stats_late_fronts(void)
{
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0)
        _exit(late_fronts_child());
    int st = 0;
    CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fprintf(stderr, "\n  child: status %d\n", st);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void expect_err(const char *yaml, const char *want)
{
    th_error e;
    th_config *cfg = parse(yaml, &e);
    CU_ASSERT_PTR_NULL(cfg);
    th_config_free(cfg);
    if (!strstr(e.msg, want))
        fprintf(stderr, "\n  want: %s\n  got:  %s\n", want, e.msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, want));
}

static void test_config(void)
{
    th_error e;
    th_config *cfg = parse("host: {log_level: error}\n", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    const struct {
        uint64_t max_line;
        char *path;
    } *lc = th_config_section(cfg, &th_line_section);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lc);
    CU_ASSERT_EQUAL(lc->max_line, 4096); /* the default, without a section */
    CU_ASSERT_PTR_NULL(lc->path);
    th_config_free(cfg);
    expect_err("line:\n  max_lines: 3\n",
               "t.yaml:2:3: unknown key 'max_lines' in line (did you mean "
               "'max_line'?)");
    expect_err("line:\n  max_line: 2\n", "t.yaml:2:13: ");
    expect_err("host:\n  listen: \"line:\"\n",
               "t.yaml:2:11: 'listen': one line:PATH entry");
    expect_err("host:\n  listen: \"tcp:1\"\n",
               "or line:PATH (the test front), got 'tcp:1'");
    /* a second front of a taken name is refused, the same one is not */
    static const th_front twin = {.name = "line"};
    CU_ASSERT_EQUAL(th_front_register(&twin), TH_ESTATE);
    CU_ASSERT_EQUAL(th_front_register(&th_line_front), 0);
}

void th_suite_front_line(void)
{
    CU_pSuite s = CU_add_suite("front_line", NULL, NULL);
    CU_add_test(s, "serves", test_serves);
    CU_add_test(s, "config", test_config);
    CU_add_test(s, "stats_name_copied", test_stats_name_copied);
    CU_add_test(s, "stats_late_fronts", test_stats_late_fronts);
}
