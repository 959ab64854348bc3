/* front/rpc.h - the msgpack-RPC front: frames, the server, a blocking client.
 *
 * Protocol (the MessagePack-RPC spec as it is, see docs/protocol.md):
 *   request       [0, msgid, method, params]
 *   response      [1, msgid, error, result]
 *   notification  [2, method, params]
 * Frames follow each other without a length prefix; requests are pipelined
 * and answered in any order; method names may be str or bin; a protocol
 * error is [code, message] with code a TH_E* number.
 *
 * Three layers, each usable alone:
 *   - frames: th_rpc_reader splits a byte stream into messages with
 *     msgpack-c's streaming unpacker, enforcing a maximum frame size;
 *     th_rpc_msg_parse() checks a message's shape.  No threads, no I/O.
 *   - the server: th_rpc_serve() runs a libuv loop on a Unix socket or on
 *     stdio until SIGTERM/SIGINT (or end of input in stdio mode).
 *   - the client: a small blocking client for `toolhost call --connect`
 *     and `toolhost list --connect`.
 */
#ifndef TH_RPC_H
#define TH_RPC_H

#include <msgpack.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/buf.h"
#include "th/err.h"
#include "th/host.h"

/* ---- Frames ------------------------------------------------------------ */

#define TH_RPC_REQUEST 0
#define TH_RPC_RESPONSE 1
#define TH_RPC_NOTIFY 2

/* Splits a byte stream into msgpack messages.  Caller storage:
 * th_rpc_reader_init() / th_rpc_reader_destroy().  One thread at a time.
 *
 * Before msgpack-c builds a message, the reader walks the buffered bytes
 * of the frame (without allocating) to find where it ends, so the
 * unpacker only ever sees complete frames: a container header that
 * announces more elements than the frame can hold never makes the
 * unpacker allocate for them, and a frame longer than max_frame is refused
 * as soon as that many bytes are buffered. */
typedef struct th_rpc_reader {
    msgpack_unpacker up;
    size_t max_frame;   /* bytes; a longer frame is TH_ELIMIT */
    /* the frame skim: how far the current frame was walked */
    size_t skim_pos;    /* bytes of the current frame walked so far */
    uint64_t skim_left; /* values still to walk in the current frame */
    bool skim_started;
    bool failed;        /* a TH_EPROTO/TH_ELIMIT was returned: stays so */
    uint64_t skim_values; /* values walked in the current frame */
    bool no_unpacker;   /* th_rpc_reader_shrink() could not make a new one */
    /* The bytes of the message th_rpc_reader_next() returned last, as they
     * came: valid until the next call of any th_rpc_reader_* function (a
     * front passes a slice of them on instead of packing them again). */
    const uint8_t *frame;
    size_t frame_len;
} th_rpc_reader;

/* A frame may hold at most TH_RPC_FRAME_VALUES_FLOOR + bytes / 8 values
 * (every msgpack value, container or not, counts one).  Unpacked, each
 * value is a 24-byte msgpack_object, so a frame costs at most about
 * 1.5 MiB + 3 times its bytes once built, instead of 24 times for a frame
 * of one-byte values (an array of nils).  A frame over the bound is
 * TH_ELIMIT, found by the skim before anything is built. */
#define TH_RPC_FRAME_VALUES_FLOOR 65536u
#define TH_RPC_FRAME_VALUES_PER_BYTE_DIV 8u

int th_rpc_reader_init(th_rpc_reader *r, size_t max_frame);
void th_rpc_reader_destroy(th_rpc_reader *r);
/* Room for at least `want` more bytes: *buf and *cap point into the reader's
 * buffer (for a libuv alloc_cb); then th_rpc_reader_commit(r, n) after n
 * bytes were written there.  0 or TH_ENOMEM. */
int th_rpc_reader_space(th_rpc_reader *r, size_t want, char **buf,
                        size_t *cap);
void th_rpc_reader_commit(th_rpc_reader *r, size_t n);
/* Copies `len` bytes in (space + commit).  0 or TH_ENOMEM. */
int th_rpc_reader_feed(th_rpc_reader *r, const void *data, size_t len);
/* The next complete message: returns 1 and fills *out (which the caller
 * owns: msgpack_unpacked_destroy() it; *out must be initialised with
 * msgpack_unpacked_init() once before the first call; a zone *out still
 * holds is cleared and reused).  The message's objects refer to the
 * reader's buffer: they are valid until the next call of any
 * th_rpc_reader_* function on r (copy what must live longer), 0 when more bytes
 * are needed, TH_EPROTO for bytes that are not msgpack, TH_ELIMIT for a
 * frame over max_frame, TH_ENOMEM.  After an error the reader is
 * unusable (the stream cannot be resynchronised). */
int th_rpc_reader_next(th_rpc_reader *r, msgpack_unpacked *out,
                       th_error *err);
/* Bytes buffered and not yet returned as messages. */
size_t th_rpc_reader_pending(const th_rpc_reader *r);
/* Memory the reader holds (its buffer), whatever is pending. */
size_t th_rpc_reader_footprint(const th_rpc_reader *r);
/* Between frames (nothing pending), gives back a buffer that grew past
 * twice its initial size for a big frame, so an idle connection holds
 * little.  0, or TH_ENOMEM (then the reader is unusable, as after an
 * error).  Call after the last message returned was released. */
int th_rpc_reader_shrink(th_rpc_reader *r);

/* A message whose shape was checked.  Pointers point into the object the
 * message was parsed from and live as long as it does. */
typedef struct th_rpc_msg {
    int kind;                       /* TH_RPC_REQUEST/RESPONSE/NOTIFY */
    uint64_t msgid;                 /* REQUEST, RESPONSE */
    const char *method;             /* REQUEST, NOTIFY: not NUL-terminated */
    size_t method_len;
    const msgpack_object *params;   /* REQUEST, NOTIFY: an array */
    const msgpack_object *error;    /* RESPONSE */
    const msgpack_object *result;   /* RESPONSE */
} th_rpc_msg;

/* Checks the shape of a message.  0, or TH_EPROTO with a sentence in err
 * naming the problem; when the message is a request whose msgid could be
 * read (its second element is an unsigned 32-bit integer, whatever else is
 * wrong: missing or extra elements, a method or params of the wrong type),
 * *has_msgid is set and m->msgid holds it, so the error can be answered. */
int th_rpc_msg_parse(const msgpack_object *o, th_rpc_msg *m, bool *has_msgid,
                     th_error *err);

/* A msgpack str or bin as bytes: true and *p, *n set, false otherwise
 * (o NULL too: th_rpc_map_get()'s missing key may be passed on). */
bool th_rpc_obj_str(const msgpack_object *o, const char **p, size_t *n);
/* True when the str/bin `o` equals the NUL-terminated `s`. */
bool th_rpc_obj_streq(const msgpack_object *o, const char *s);
/* What a value is, for messages: "nil", "a boolean", "an integer",
 * "a float", "a string", "binary", "an array", "a map", "an extension". */
const char *th_rpc_obj_kind(const msgpack_object *o);
/* Looks up a str/bin key in a map; NULL when absent or not a map. */
const msgpack_object *th_rpc_map_get(const msgpack_object *map,
                                     const char *key);

/* Frame builders: they append one whole message to `out`. */
int th_rpc_pack_request(th_buf *out, uint64_t msgid, const char *method,
                        const uint8_t *params, size_t params_len);
int th_rpc_pack_notify(th_buf *out, const char *method, const uint8_t *params,
                       size_t params_len);
/* `error`/`result` are packed msgpack values; NULL packs nil. */
int th_rpc_pack_response(th_buf *out, uint64_t msgid, const uint8_t *error,
                         size_t error_len, const uint8_t *result,
                         size_t result_len);
/* A response carrying the protocol error [code, message]. */
int th_rpc_pack_error(th_buf *out, uint64_t msgid, int code,
                      const char *message);

/* ---- Server -------------------------------------------------------------- */

typedef struct th_rpc_server th_rpc_server;

typedef struct th_rpc_serve_opts {
    /* "unix:PATH", or NULL to use host.listen from the config.  Ignored
     * in stdio mode. */
    const char *listen;
    /* Serve one session on in_fd/out_fd instead of a socket; end of input
     * shuts down like SIGTERM.  Nothing but frames is written to out_fd. */
    bool stdio;
    int in_fd, out_fd;         /* stdio mode; both 0 means 0 and 1 */
    /* Do not install SIGTERM/SIGINT handlers (an embedding program or an
     * in-process test stops the server with th_rpc_server_stop()). */
    bool no_signals;
    /* Called once on the loop thread when the server accepts input, with
     * the server (valid until th_rpc_serve() returns).  May be NULL. */
    void (*on_ready)(th_rpc_server *srv, void *ud);
    void *ready_ud;
    /* A listening Unix socket already bound to `listen`'s path (socket
     * activation): served instead of binding; the file is left in place at
     * the end (the service manager owns it).  Used when has_listen_fd. */
    bool has_listen_fd;
    int listen_fd;
} th_rpc_serve_opts;

/* Runs the server on the calling thread until SIGTERM/SIGINT, end of input
 * (stdio), or th_rpc_server_stop(): stops accepting, lets in-flight calls
 * finish within host.shutdown_grace, cancels the rest, closes every
 * session, removes the socket file.  Returns 0 after a clean shutdown;
 * TH_ECONFIG (no listen address), TH_ESTATE (another host answers on the
 * socket), TH_EIO (bind, listen, stdio) with a sentence in err.  The host
 * stays owned by the caller and is not closed.  Side effect: SIGPIPE is
 * ignored in the process (a client that hangs up must not kill the host).
 * One server per host at a time; th_rpc_serve() blocks its thread. */
int th_rpc_serve(th_host *h, const th_rpc_serve_opts *o, th_error *err);

/* Asks a running server to shut down as on SIGTERM.  Any thread, from
 * on_ready() until th_rpc_serve() returns (then `srv` is freed). */
void th_rpc_server_stop(th_rpc_server *srv);

/* Splits "unix:PATH" (or a bare absolute path).  0, or TH_EINVAL.  *path
 * points into addr. */
int th_rpc_parse_addr(const char *addr, const char **path, th_error *err);

/* ---- Client -------------------------------------------------------------- */

/* A blocking client on one connection.  One thread at a time (the CLI's
 * main thread); the cancel flag may be set from a signal handler. */
typedef struct th_rpc_client th_rpc_client;

/* A notification that arrived while waiting.  Return 0 to go on waiting;
 * nonzero makes th_rpc_client_wait() return (th_rpc_client_call ignores
 * it).  `params` lives during the callback. */
typedef int (*th_rpc_note_fn)(const char *method, size_t method_len,
                              const msgpack_object *params, void *ud);

/* The server's permission.request: return true to allow.  `request` is the
 * request's params [call_id, tool, args, reason, origin] (origin: {msgid,
 * tool, task_id?} of the tools.call it belongs to; docs/protocol.md),
 * valid during the call.
 * Without a handler every request is answered false. */
typedef bool (*th_rpc_permission_fn)(const msgpack_object *request,
                                     void *ud);

/* A response: error and result as owned packed msgpack (free with
 * th_rpc_reply_destroy); error is NULL when the response's error was nil. */
typedef struct th_rpc_reply {
    uint8_t *error;
    size_t error_len;
    uint8_t *result;
    size_t result_len;
} th_rpc_reply;
void th_rpc_reply_destroy(th_rpc_reply *r);

/* Connects to "unix:PATH" (NULL or "": the default address of
 * front/sockpath.h) and checks who runs the server (SO_PEERCRED) before
 * anything is sent: it must be root or the caller's own effective uid.
 * 0, or TH_EINVAL/TH_EIO/TH_ENOMEM, or TH_EPERM ("refusing to talk to
 * unix:PATH owned by uid N (expected ...)") with the connection closed. */
int th_rpc_client_connect(const char *addr, th_rpc_client **out,
                          th_error *err);

/* Whose server a client accepts. */
typedef struct th_rpc_client_opts {
    bool any_server;  /* skip the uid check */
    bool server_uid_set;
    uint32_t server_uid; /* accept this uid (and only it) when set */
} th_rpc_client_opts;

/* th_rpc_client_connect() with opts (NULL: root or the caller's uid). */
int th_rpc_client_connect_opts(const char *addr,
                               const th_rpc_client_opts *opts,
                               th_rpc_client **out, th_error *err);
void th_rpc_client_close(th_rpc_client *c);

void th_rpc_client_on_permission(th_rpc_client *c, th_rpc_permission_fn fn,
                                 void *ud);
/* Polled (every 100 ms at most) by call and wait: once it reads nonzero,
 * the running tools.call is cancelled (tools.cancel, or tasks.cancel
 * once a task was acknowledged) and the call goes on to its answer. */
void th_rpc_client_set_cancel_flag(th_rpc_client *c,
                                   volatile sig_atomic_t *flag);

/* Sends a request (params: a packed msgpack array; NULL/0 for []) and
 * waits for its response, handing notifications that arrive meanwhile to
 * on_note (may be NULL) and answering permission requests.  0 with *out
 * filled (even when the response carries an error), or TH_EIO (connection
 * lost), TH_EPROTO (the server sent garbage), TH_ENOMEM. */
int th_rpc_client_call(th_rpc_client *c, const char *method,
                       const uint8_t *params, size_t len,
                       th_rpc_note_fn on_note, void *ud, th_rpc_reply *out,
                       th_error *err);
/* Sends a notification. */
int th_rpc_client_notify(th_rpc_client *c, const char *method,
                         const uint8_t *params, size_t len, th_error *err);
/* Reads and dispatches messages until on_note returns nonzero (then 1),
 * timeout_ms passes (< 0: no limit; then 0), or the connection fails
 * (negative). */
int th_rpc_client_wait(th_rpc_client *c, th_rpc_note_fn on_note, void *ud,
                       int64_t timeout_ms, th_error *err);

/* The whole tools.call of the CLI: calls `tool` with `args` (a packed
 * msgpack map) and, when the server acknowledges an async task, waits for
 * its task.done.  Progress notifications of the call go to on_progress
 * (params [task_id, {message, progress?, data?, coalesced}], th/codec.h),
 * the acknowledgement's message first (it is the task's first update).  The cancel
 * flag cancels the call or the task.  *result is the final result map
 * ({ok, stdout, stderr, meta} or {ok: false, error: {code, message}}) as
 * owned packed msgpack (free()).  timeout_ms > 0 is sent as the call's
 * timeout option.  0, or a negative code (protocol error: its message in
 * err). */
int th_rpc_client_call_tool(th_rpc_client *c, const char *tool,
                            const uint8_t *args, size_t len,
                            int64_t timeout_ms, th_rpc_note_fn on_progress,
                            void *ud, uint8_t **result, size_t *result_len,
                            th_error *err);

#endif
