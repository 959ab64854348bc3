/* line.c - a fifth front, kept in the tests to show how a front is added
 * (docs/architecture.md, "How to add a front"): a line protocol on a Unix
 * socket, registered through its descriptor (th/front.h) and built with no
 * change to host/core.
 *
 * Config: `host.listen: line:PATH` (a scheme its section claims) and a
 * section `line: {max_line: SIZE}` (default 4KiB).  On a connection, one
 * session; each line "TOOL JSON-ARGS" runs TOOL and is answered with
 * "ok STDOUT" or "error CODE MESSAGE" (stdout's newlines as spaces).  A
 * line over max_line closes the connection ("line_too_long"); arguments
 * that are not a JSON object count a protocol error.  One connection at
 * a time, on one thread: a demonstration, not a product (and ~100 lines
 * of it are the front; the rest is its config section and descriptor). */
#include "fronts/line.h"

#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "th/buf.h"
#include "th/json.h"

typedef struct line_cfg {
    uint64_t max_line;
    char *path; /* the line: entry of host.listen, or NULL */
} line_cfg;

enum { EV_TOO_LONG, EV_PROTOCOL, EV_N };

static const th_cfkey line_keys[] = {
    {.name = "max_line", .set = th_cf_size, .off = offsetof(line_cfg, max_line),
     .min = 16, .max = TH_MIB},
    {.name = NULL}};

static void line_init(void *sec) { ((line_cfg *)sec)->max_line = 4 * TH_KIB; }
static void line_free(void *sec) { free(((line_cfg *)sec)->path); }

static int line_listen(th_cfctx *c, const th_ynode *v, void *sec)
{
    line_cfg *lc = sec;
    if (lc->path || strlen(v->str) < 6 || strlen(v->str + 5) >= 108)
        return th_cf_err(c, v, "'listen': one line:PATH entry, a path of "
                               "1 to 107 bytes");
    return (lc->path = strdup(v->str + 5)) ? 0 : th_cf_nomem(c);
}

static const char *const line_schemes[] = {"line:", NULL};
const th_section th_line_section = {
    .name = "line", .size = sizeof(line_cfg), .keys = line_keys,
    .init = line_init, .free = line_free, .schemes = line_schemes,
    .listen = line_listen, .listen_form = "line:PATH (the test front)"};

typedef struct line_front {
    th_host *h;
    int lfd, wake[2];
    uint64_t max_line;
    pthread_t thread;
} line_front;

/* Runs one line; the answer goes to out. */
static void line_call(line_front *f, th_session *s, char *line, th_buf *out)
{
    char *sp = strchr(line, ' ');
    json_t *args = json_loads(sp ? sp + 1 : "{}", JSON_REJECT_DUPLICATES, NULL);
    th_buf mp = TH_BUF_INIT;
    th_result_copy r;
    memset(&r, 0, sizeof r);
    if (sp)
        *sp = '\0';
    if (!json_is_object(args) || th_json_to_msgpack(args, &mp) < 0) {
        th_stat_front_event(f->h, "line", EV_PROTOCOL);
        th_buf_printf(out, "error invalid_request arguments must be a JSON "
                           "object\n");
    } else if (th_call_sync(s, line, mp.data, mp.len, NULL, NULL, NULL, NULL,
                            &r) < 0 || r.kind == TH_RESULT_ERROR) {
        th_buf_printf(out, "error %s %s\n", th_err_name(r.error),
                      r.message ? r.message : "");
    } else {
        for (size_t i = 0; i < r.out.len; i++)
            if (r.out.data[i] == '\n')
                r.out.data[i] = ' ';
        th_buf_printf(out, "%s %.*s\n", r.ok ? "ok" : "failed",
                      (int)r.out.len, (const char *)r.out.data);
    }
    th_result_copy_destroy(&r);
    th_buf_destroy(&mp);
    json_decref(args);
}

static void line_conn(line_front *f, int fd)
{
    static const th_front_ops ops = {.front = "line"};
    struct ucred cr;
    socklen_t cl = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0)
        return;
    th_principal who = {.uid = cr.uid, .gid = cr.gid};
    th_session *s = th_session_open(f->h, &who, &ops, NULL);
    char *buf = malloc(f->max_line + 1);
    size_t have = 0;
    ssize_t n = 1;
    struct pollfd p[2] = {{fd, POLLIN, 0}, {f->wake[0], POLLIN, 0}};
    while (s && buf && n > 0 && poll(p, 2, -1) > 0 && !p[1].revents &&
           (n = read(fd, buf + have, f->max_line + 1 - have)) > 0) {
        have += (size_t)n;
        char *nl;
        while ((nl = memchr(buf, '\n', have)) != NULL) {
            *nl = '\0';
            th_buf out = TH_BUF_INIT;
            line_call(f, s, buf, &out);
            if (write(fd, out.data, out.len) < 0)
                have = 0;
            th_buf_destroy(&out);
            have -= (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, have);
        }
        if (have > f->max_line) {
            th_stat_front_event(f->h, "line", EV_TOO_LONG);
            break;
        }
    }
    free(buf);
    if (s)
        th_session_close(s);
}

static void *line_loop(void *ud)
{
    line_front *f = ud;
    struct pollfd p[2] = {{f->lfd, POLLIN, 0}, {f->wake[0], POLLIN, 0}};
    while (poll(p, 2, -1) >= 0 && !p[1].revents) {
        int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            line_conn(f, fd);
            close(fd);
        }
    }
    return NULL;
}

static int line_open(th_host *h, void **state, th_error *err)
{
    const line_cfg *lc = th_config_section(th_host_config(h), &th_line_section);
    if (!lc || !lc->path)
        return 0;
    line_front *f = calloc(1, sizeof *f);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", lc->path);
    if (!f || pipe(f->wake) != 0 ||
        (f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        bind(f->lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(f->lfd, 8) != 0) {
        free(f); /* (a test front: its fds go with the test process) */
        return th_error_set(err, TH_EIO, "line: cannot listen on %s", lc->path);
    }
    f->h = h;
    f->max_line = lc->max_line;
    pthread_create(&f->thread, NULL, line_loop, f);
    *state = f;
    return 0;
}

static void line_close(void *state)
{
    line_front *f = state;
    if (!f)
        return;
    if (write(f->wake[1], "x", 1) == 1)
        pthread_join(f->thread, NULL);
    close(f->lfd);
    close(f->wake[0]);
    close(f->wake[1]);
    free(f);
}

static const th_front_event_desc line_events[EV_N] = {
    [EV_TOO_LONG] = {"line_too_long", TH_FEV_CLOSED},
    [EV_PROTOCOL] = {"protocol_error", TH_FEV_PROTOCOL}};

const th_front th_line_front = {
    .name = "line", .section = &th_line_section, .events = line_events,
    .n_events = EV_N, .open = line_open, .close = line_close};
