/* client.c - a small blocking msgpack-RPC client (the CLI's --connect).
 *
 * One thread at a time.  Waiting is poll(2) in steps of at most 100 ms so
 * that the cancel flag (set from a signal handler) is seen soon.
 */
#include "front/rpc.h"
#include "front/sockpath.h"
#include "th/codec.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CLIENT_MAX_FRAME ((size_t)256 << 20)
#define POLL_STEP_MS 100

struct th_rpc_client {
    int fd;
    th_rpc_reader rd;
    msgpack_unpacked msg;
    uint64_t next_msgid;
    th_rpc_permission_fn perm_fn;
    void *perm_ud;
    volatile sig_atomic_t *cancel;
};

void th_rpc_reply_destroy(th_rpc_reply *r)
{
    if (!r)
        return;
    free(r->error);
    free(r->result);
    r->error = r->result = NULL;
    r->error_len = r->result_len = 0;
}

/* Who listens on fd: refuses a server run by another user, unless the
 * caller said whom to accept. */
static int check_peer(int fd, const char *path, const th_rpc_client_opts *o,
                      th_error *err)
{
    if (o && o->any_server)
        return 0;
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
        return th_error_set(err, TH_EIO,
                            "cannot tell who runs the server on unix:%s: %s",
                            path, strerror(errno));
    uint32_t me = (uint32_t)geteuid();
    uint32_t uid = (uint32_t)cr.uid;
    if (o && o->server_uid_set) {
        if (uid == o->server_uid)
            return 0;
        return th_error_set(err, TH_EPERM,
                            "refusing to talk to unix:%s owned by uid %u "
                            "(expected uid %u, as --server-uid says)",
                            path, (unsigned)uid, (unsigned)o->server_uid);
    }
    if (uid == 0 || uid == me)
        return 0;
    if (me == 0)
        return th_error_set(err, TH_EPERM,
                            "refusing to talk to unix:%s owned by uid %u "
                            "(expected root; --server-uid %u accepts it)",
                            path, (unsigned)uid, (unsigned)uid);
    return th_error_set(err, TH_EPERM,
                        "refusing to talk to unix:%s owned by uid %u "
                        "(expected root or your uid %u; --server-uid %u "
                        "accepts it)",
                        path, (unsigned)uid, (unsigned)me, (unsigned)uid);
}

int th_rpc_client_connect(const char *addr, th_rpc_client **out,
                          th_error *err)
{
    return th_rpc_client_connect_opts(addr, NULL, out, err);
}

int th_rpc_client_connect_opts(const char *addr,
                               const th_rpc_client_opts *opts,
                               th_rpc_client **out, th_error *err)
{
    const char *path;
    char def[128];
    bool is_default = !addr || !*addr;
    int rc;
    if (is_default) {
        if ((rc = th_sock_default_addr(def, sizeof def, err)))
            return rc;
        addr = def;
    }
    if ((rc = th_sock_addr_path(addr, &path, err))) {
        if (err) /* the message stays; a bad address is the caller's */
            err->code = TH_EINVAL;
        return TH_EINVAL;
    }
    th_rpc_client *c = calloc(1, sizeof *c);
    if (!c)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        free(c);
        return th_error_set(err, TH_EIO, "socket: %s", strerror(errno));
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        rc = th_error_set(err, TH_EIO, "cannot connect to unix:%s%s: %s%s",
                          path, is_default ? " (the default address)" : "",
                          strerror(e),
                          e == ENOENT || e == ECONNREFUSED
                              ? " (is `toolhost serve` running there?)"
                              : "");
        close(c->fd);
        free(c);
        return rc;
    }
    if ((rc = check_peer(c->fd, path, opts, err))) {
        close(c->fd);
        free(c);
        return rc;
    }
    if (th_rpc_reader_init(&c->rd, CLIENT_MAX_FRAME) != 0) {
        close(c->fd);
        free(c);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    msgpack_unpacked_init(&c->msg);
    c->next_msgid = 1;
    *out = c;
    return 0;
}

void th_rpc_client_close(th_rpc_client *c)
{
    if (!c)
        return;
    close(c->fd);
    msgpack_unpacked_destroy(&c->msg);
    th_rpc_reader_destroy(&c->rd);
    free(c);
}

void th_rpc_client_on_permission(th_rpc_client *c, th_rpc_permission_fn fn,
                                 void *ud)
{
    c->perm_fn = fn;
    c->perm_ud = ud;
}

void th_rpc_client_set_cancel_flag(th_rpc_client *c,
                                   volatile sig_atomic_t *flag)
{
    c->cancel = flag;
}

static int send_all(th_rpc_client *c, const uint8_t *p, size_t n,
                    th_error *err)
{
    while (n > 0) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return th_error_set(err, TH_EIO, "connection lost: %s",
                                strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int send_frame(th_rpc_client *c, th_buf *b, th_error *err)
{
    int rc = send_all(c, b->data, b->len, err);
    th_buf_destroy(b);
    return rc;
}

int th_rpc_client_notify(th_rpc_client *c, const char *method,
                         const uint8_t *params, size_t len, th_error *err)
{
    th_buf b = TH_BUF_INIT;
    if (th_rpc_pack_notify(&b, method, params, len))
        return th_error_set(err, TH_ENOMEM, "out of memory");
    return send_frame(c, &b, err);
}

static int send_request(th_rpc_client *c, const char *method,
                        const uint8_t *params, size_t len, uint64_t *msgid,
                        th_error *err)
{
    th_buf b = TH_BUF_INIT;
    *msgid = c->next_msgid++ & 0xffffffffu;
    if (th_rpc_pack_request(&b, *msgid, method, params, len))
        return th_error_set(err, TH_ENOMEM, "out of memory");
    return send_frame(c, &b, err);
}

/* A method name (not NUL-terminated) is `want`. */
static bool name_is(const char *name, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(name, want, len) == 0;
}

static int copy_obj(const msgpack_object *o, uint8_t **out, size_t *len)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    if (msgpack_pack_object(&pk, *o)) {
        th_buf_destroy(&b);
        return TH_ENOMEM;
    }
    *out = th_buf_take(&b, len);
    return 0;
}

/* Answers a request from the server (permission.request). */
static int answer_request(th_rpc_client *c, const th_rpc_msg *m,
                          th_error *err)
{
    th_buf b = TH_BUF_INIT;
    int rc;
    if (name_is(m->method, m->method_len, "permission.request")) {
        bool allow = false;
        if (c->perm_fn)
            allow = c->perm_fn(m->params, c->perm_ud);
        const uint8_t v = allow ? 0xc3 : 0xc2;
        rc = th_rpc_pack_response(&b, m->msgid, NULL, 0, &v, 1);
    } else {
        rc = th_rpc_pack_error(&b, m->msgid, TH_ENOTFOUND,
                               "the client has no such method");
    }
    if (rc) {
        th_buf_destroy(&b);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    return send_frame(c, &b, err);
}

typedef int (*cancel_fn)(th_rpc_client *c, void *ud, th_error *err);

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads and dispatches messages until: the response to `want` arrives
 * (want_id true; *out filled; returns 1), on_note returns nonzero
 * (returns 1), timeout_ms passes (returns 0), or an error (negative).
 * on_cancel runs once when the cancel flag is seen. */
static int client_loop(th_rpc_client *c, bool want_id, uint64_t want,
                       th_rpc_note_fn on_note, void *ud, bool note_stops,
                       int64_t timeout_ms, th_rpc_reply *out,
                       cancel_fn on_cancel, void *cud, th_error *err)
{
    int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : -1;
    bool cancelled = false;
    for (;;) {
        /* First whatever is buffered. */
        for (;;) {
            int rc = th_rpc_reader_next(&c->rd, &c->msg, err);
            if (rc < 0)
                return rc == TH_ENOMEM ? rc : TH_EPROTO;
            if (rc == 0)
                break;
            th_rpc_msg m;
            bool has_id;
            if (th_rpc_msg_parse(&c->msg.data, &m, &has_id, err) != 0)
                return th_error_set(err, TH_EPROTO, "the server sent %s",
                                    err->msg);
            if (m.kind == TH_RPC_RESPONSE) {
                if (!want_id || m.msgid != want)
                    continue; /* e.g. the answer to a tasks.cancel */
                memset(out, 0, sizeof *out);
                if (m.error->type != MSGPACK_OBJECT_NIL &&
                    copy_obj(m.error, &out->error, &out->error_len))
                    return th_error_set(err, TH_ENOMEM, "out of memory");
                if (copy_obj(m.result, &out->result, &out->result_len)) {
                    th_rpc_reply_destroy(out);
                    return th_error_set(err, TH_ENOMEM, "out of memory");
                }
                return 1;
            }
            if (m.kind == TH_RPC_REQUEST) {
                if ((rc = answer_request(c, &m, err)))
                    return rc;
                continue;
            }
            if (on_note && on_note(m.method, m.method_len, m.params, ud) &&
                note_stops)
                return 1;
        }
        if (!cancelled && c->cancel && *c->cancel) {
            cancelled = true;
            if (on_cancel) {
                int rc = on_cancel(c, cud, err);
                if (rc)
                    return rc;
            }
        }
        int wait = POLL_STEP_MS;
        if (deadline >= 0) {
            int64_t left = deadline - now_ms();
            if (left <= 0)
                return 0;
            if (left < wait)
                wait = (int)left;
        }
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        int pr = poll(&pfd, 1, wait);
        if (pr < 0) {
            if (errno == EINTR)
                continue;
            return th_error_set(err, TH_EIO, "poll: %s", strerror(errno));
        }
        if (pr == 0)
            continue;
        char *buf;
        size_t cap;
        if (th_rpc_reader_space(&c->rd, 64 * 1024, &buf, &cap))
            return th_error_set(err, TH_ENOMEM, "out of memory");
        ssize_t n = recv(c->fd, buf, cap, 0);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return th_error_set(err, TH_EIO, "connection lost: %s",
                                strerror(errno));
        }
        if (n == 0)
            return th_error_set(err, TH_EIO,
                                "the server closed the connection");
        th_rpc_reader_commit(&c->rd, (size_t)n);
    }
}

typedef struct call_cancel {
    uint64_t msgid;
    bool is_tool_call;
} call_cancel;

static int cancel_call(th_rpc_client *c, void *ud, th_error *err)
{
    call_cancel *cc = ud;
    if (!cc->is_tool_call)
        return 0;
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_uint64(&pk, cc->msgid);
    int rc = b.data ? th_rpc_client_notify(c, "tools.cancel", b.data, b.len,
                                           err)
                    : th_error_set(err, TH_ENOMEM, "out of memory");
    th_buf_destroy(&b);
    return rc;
}

int th_rpc_client_call(th_rpc_client *c, const char *method,
                       const uint8_t *params, size_t len,
                       th_rpc_note_fn on_note, void *ud, th_rpc_reply *out,
                       th_error *err)
{
    memset(out, 0, sizeof *out);
    call_cancel cc = {.is_tool_call = strcmp(method, "tools.call") == 0};
    int rc = send_request(c, method, params, len, &cc.msgid, err);
    if (rc)
        return rc;
    rc = client_loop(c, true, cc.msgid, on_note, ud, false, -1, out,
                     cancel_call, &cc, err);
    return rc < 0 ? rc : 0;
}

int th_rpc_client_wait(th_rpc_client *c, th_rpc_note_fn on_note, void *ud,
                       int64_t timeout_ms, th_error *err)
{
    th_rpc_reply unused;
    return client_loop(c, false, 0, on_note, ud, true, timeout_ms, &unused,
                       NULL, NULL, err);
}

/* ---- The CLI's tools.call ---------------------------------------------------- */

typedef struct tool_wait {
    uint64_t task_id;
    bool acked;
    th_rpc_note_fn on_progress;
    void *ud;
    uint8_t *final;
    size_t final_len;
    int rc;
} tool_wait;

static bool param0_is(const msgpack_object *params, uint64_t id)
{
    return params->via.array.size >= 1 &&
           params->via.array.ptr[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
           params->via.array.ptr[0].via.u64 == id;
}

static int tool_note(const char *method, size_t mlen,
                     const msgpack_object *params, void *ud)
{
    tool_wait *tw = ud;
    if (!tw->acked)
        return 0;
    if (name_is(method, mlen, "task.progress") &&
        param0_is(params, tw->task_id)) {
        if (tw->on_progress)
            tw->on_progress(method, mlen, params, tw->ud);
        return 0;
    }
    if (name_is(method, mlen, "task.done") &&
        param0_is(params, tw->task_id) && params->via.array.size >= 2) {
        if (copy_obj(&params->via.array.ptr[1], &tw->final, &tw->final_len))
            tw->rc = TH_ENOMEM;
        return 1;
    }
    return 0;
}

/* Gives on_progress the acknowledgement's message as task.progress params
 * (the codec's form), so a caller sees every update. */
static int ack_progress(tool_wait *tw, const char *message)
{
    if (!tw->on_progress)
        return 0;
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    th_progress p = {.task_id = tw->task_id, .message = message, .fraction = -1};
    int rc = th_codec_pack_progress(&pk, &p);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    if (rc == 0 && msgpack_unpack_next(&u, (const char *)b.data, b.len, &off) ==
                       MSGPACK_UNPACK_SUCCESS)
        tw->on_progress("task.progress", strlen("task.progress"), &u.data, tw->ud);
    else
        rc = TH_ENOMEM;
    msgpack_unpacked_destroy(&u);
    th_buf_destroy(&b);
    return rc;
}

static int cancel_task(th_rpc_client *c, void *ud, th_error *err)
{
    tool_wait *tw = ud;
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_uint64(&pk, tw->task_id);
    uint64_t id;
    int rc = b.data ? send_request(c, "tasks.cancel", b.data, b.len, &id, err)
                    : th_error_set(err, TH_ENOMEM, "out of memory");
    th_buf_destroy(&b);
    return rc;
}

/* [code, message] of a protocol error into err. */
static int reply_error(const th_rpc_reply *r, th_error *err)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int code = TH_EPROTO;
    char msg[512] = "the server answered with an error";
    if (msgpack_unpack_next(&u, (const char *)r->error, r->error_len, &off) ==
        MSGPACK_UNPACK_SUCCESS) {
        const msgpack_object *o = &u.data;
        const char *p;
        size_t n;
        if (o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 2) {
            if (o->via.array.ptr[0].type == MSGPACK_OBJECT_NEGATIVE_INTEGER &&
                o->via.array.ptr[0].via.i64 >= TH_EFAILED)
                code = (int)o->via.array.ptr[0].via.i64;
            if (th_rpc_obj_str(&o->via.array.ptr[1], &p, &n))
                snprintf(msg, sizeof msg, "%.*s", (int)n, p);
        } else if (th_rpc_obj_str(o, &p, &n)) {
            snprintf(msg, sizeof msg, "%.*s", (int)n, p);
        }
    }
    msgpack_unpacked_destroy(&u);
    return th_error_set(err, code, "%s", msg);
}

int th_rpc_client_call_tool(th_rpc_client *c, const char *tool,
                            const uint8_t *args, size_t len,
                            int64_t timeout_ms, th_rpc_note_fn on_progress,
                            void *ud, uint8_t **result, size_t *result_len,
                            th_error *err)
{
    *result = NULL;
    *result_len = 0;
    th_buf p = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &p, th_buf_msgpack_write);
    int e = msgpack_pack_array(&pk, 3);
    e |= th_pack_cstr(&pk, tool);
    if (args && len)
        e |= th_buf_append(&p, args, len);
    else
        e |= msgpack_pack_map(&pk, 0);
    e |= msgpack_pack_map(&pk, timeout_ms > 0 ? 1 : 0);
    if (timeout_ms > 0) {
        e |= th_pack_cstr(&pk, "timeout_ms");
        e |= msgpack_pack_int64(&pk, timeout_ms);
    }
    if (e) {
        th_buf_destroy(&p);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    tool_wait tw = {.on_progress = on_progress, .ud = ud};
    th_rpc_reply r;
    int rc = th_rpc_client_call(c, "tools.call", p.data, p.len, tool_note,
                                &tw, &r, err);
    th_buf_destroy(&p);
    if (rc)
        return rc;
    if (r.error) {
        rc = reply_error(&r, err);
        th_rpc_reply_destroy(&r);
        return rc;
    }
    /* {status: "running", task_id, message}: wait for task.done. */
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    if (msgpack_unpack_next(&u, (const char *)r.result, r.result_len, &off) !=
        MSGPACK_UNPACK_SUCCESS) {
        th_rpc_reply_destroy(&r);
        return th_error_set(err, TH_EPROTO, "unreadable result");
    }
    th_result_copy ack;
    if (th_codec_unpack_result(&u.data, &ack) == 0 &&
        ack.kind == TH_RESULT_RUNNING) {
        tw.task_id = ack.task_id;
        tw.acked = true;
        msgpack_unpacked_destroy(&u);
        th_rpc_reply_destroy(&r);
        /* The acknowledgement is the task's first progress update. */
        rc = ack_progress(&tw, ack.message);
        th_result_copy_destroy(&ack);
        if (rc)
            return th_error_set(err, rc, "out of memory");
        /* A cancel flag already set is seen at once by the loop. */
        th_rpc_reply unused;
        rc = client_loop(c, false, 0, tool_note, &tw, true, -1, &unused,
                         cancel_task, &tw, err);
        if (rc < 0) {
            free(tw.final);
            return rc;
        }
        if (tw.rc) {
            free(tw.final);
            return th_error_set(err, tw.rc, "out of memory");
        }
        *result = tw.final;
        *result_len = tw.final_len;
        return 0;
    }
    th_result_copy_destroy(&ack);
    msgpack_unpacked_destroy(&u);
    *result = r.result;
    *result_len = r.result_len;
    r.result = NULL;
    th_rpc_reply_destroy(&r);
    return 0;
}
