/* iso_wire.h - the wire between the host and an isolated plugin's worker
 * process (docs/isolation.md): frames over a socketpair, each a 4-byte
 * big-endian length and one msgpack array [TYPE, ...].  Private to
 * host/core (iso_host.c, iso_worker.c, iso_wire.c).
 *
 * Host -> worker:
 *   [INIT, config_bin]                     after HELLO: call init()
 *   [CALL, id, tool_idx, args_bin, left_ms] left_ms -1: no deadline
 *   [CANCEL, id]
 *   [ASK, id, kind, tool_idx, args_bin]    kind ASK_VALIDATE|ASK_PERMISSION
 *   [ASK, id, kind, idx, arg_bin, max]     content (ABI 1.4): kind
 *                                          ASK_READ (idx: a resource,
 *                                          arg_bin: the URI), ASK_GET (a
 *                                          prompt, its args map),
 *                                          ASK_COMPLETE_RES / _PROMPT
 *                                          (arg_bin: [name, value]); max:
 *                                          the bytes the blocks may cost
 *   [EXIT]                                 drain the calls, fini(), exit
 * Worker -> host:
 *   [HELLO, descriptor_map]                after dlopen and the ABI checks
 *   [FAIL, message]                        could not load (then exits)
 *   [READY, ok, message, tools_bin]        init() answered; tools_bin
 *                                          (when ok) holds the array of
 *                                          the tools init_tools() gave,
 *                                          packed as HELLO's
 *   [WRITE, id, stream, bin] [META, id, bin]
 *   [PROGRESS, id, fraction, msg|nil, bin|nil]
 *   [DONE, id, status]                     the call ended (execute/complete)
 *   [LOG, level, message]
 *   [ANSWER, id, rc, message]              answer to an ASK
 *   [ANSWER, id, rc, message, blocks_bin, dropped]
 *                                          answer to a content ASK:
 *                                          blocks_bin an array of blocks
 *                                          [kind, role, mime_type, data,
 *                                          uri, name] (strings or nil,
 *                                          data bin); dropped: completion
 *                                          values past the 100 kept
 *   [UPDATED, uri]                         resource_updated() (ABI 1.4)
 *   [BLOCK, id, kind, role, mime_type, data, uri, name]
 *                                          write_block() (ABI 1.4): one
 *                                          block of the call's result,
 *                                          checked by the worker's sink
 *                                          and again by the host
 *
 * HELLO's descriptor also carries (ABI 1.4) the resources [[uri, name,
 * title, description, mime_type, has_complete]...] and the prompts
 * [[name, title, description, args, has_complete]...] (args as a tool's
 * params); the host checks them as an in-process plugin's.
 */
#ifndef TH_ISO_WIRE_H
#define TH_ISO_WIRE_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/buf.h"
#include "th/config.h"
#include "th/tool.h"

/* Host to worker; ISO_CLIENT_ANSWER: [type, call id, rc, answer bin or
 * nil], the answer to the call's ISO_CLIENT_ASK. */
enum { ISO_INIT = 1, ISO_CALL, ISO_CANCEL, ISO_ASK, ISO_EXIT,
       ISO_CLIENT_ANSWER };
/* Worker to host; ISO_CLIENT_ASK: [type, call id, kind, request bin], a
 * call's ask_client() (ABI 1.4), at most one in flight per call. */
enum {
    ISO_HELLO = 1, ISO_FAIL, ISO_READY, ISO_WRITE, ISO_META, ISO_PROGRESS,
    ISO_DONE, ISO_LOG, ISO_ANSWER, ISO_UPDATED, ISO_BLOCK, ISO_CLIENT_ASK
};
enum {
    ISO_ASK_VALIDATE = 1, ISO_ASK_PERMISSION = 2,
    /* content (ABI 1.4): every kind from ISO_ASK_READ on */
    ISO_ASK_READ = 3, ISO_ASK_GET = 4, ISO_ASK_COMPLETE_RES = 5,
    ISO_ASK_COMPLETE_PROMPT = 6
};

/* The fds a worker is started with. */
#define ISO_FD_SOCK 3   /* the socketpair                                  */
#define ISO_FD_PLUGIN 4 /* the plugin file, opened and checked by the host */
#define ISO_FD_NOTE 5   /* death notes (a pipe): "memory\n" or "cpu\n"     */

/* The largest frame body the worker reads from the host (a CALL's args:
 * what a front let in), and the most worker_max_frame may be. */
#define ISO_MAX_FRAME (256u * 1024 * 1024)
/* What a frame carries beyond the bytes a budget counts (msgpack
 * framing, the id, the kind, a block's strings, an answer's message). */
#define ISO_FRAME_SLACK (64u * 1024)
/* worker_max_frame's default, the largest frame body the host reads from
 * a worker: the largest budget a legitimate worker fills in one frame -
 * a content answer (a front asks for at most 16 MiB: TH_FC_CONTENT_MAX,
 * the MCP front's default max_message) and a block of a call's result
 * (the worker's sink holds at most 16 MiB: th_content_init's default) -
 * plus ISO_FRAME_SLACK.  A call's writes go in chunks of ISO_WRITE_CHUNK
 * whatever the output limits, so they never come near it. */
#define ISO_FRAME_DEFAULT ((16u << 20) + ISO_FRAME_SLACK)
/* The least worker_max_frame may be (a descriptor, a log line, an
 * answer's message must fit). */
#define ISO_FRAME_MIN (256u * 1024)
/* A call's write() goes to the host in frames of at most this many of
 * its bytes. */
#define ISO_WRITE_CHUNK (64u * 1024)
/* An empty receive buffer larger than this is given back: an idle
 * worker's buffer does not keep the size of its largest frame. */
#define ISO_RX_KEEP (256u * 1024)

/* Writes one frame (len bytes of msgpack) with the length in front to a
 * socket (send() with MSG_NOSIGNAL: a dead peer is -1/EPIPE, not
 * SIGPIPE).  Blocking; EINTR retried.  0 or -1 (errno).  `max`: the
 * largest frame body the peer reads (ISO_MAX_FRAME towards a worker,
 * the pool's worker_max_frame towards the host); a longer frame is not
 * sent, -1 with errno EMSGSIZE, so that a peer never gets a frame it
 * refuses (and a legitimate worker is never killed for one). */
int th_iso_send(int fd, const void *data, size_t len, size_t max);
/* The same for a frame whose body is the `n` (at most 7) parts in order:
 * one sendmsg(), no copy.  0 or -1 (errno; EMSGSIZE as above). */
struct iovec;
int th_iso_sendv(int fd, const struct iovec *parts, int n, size_t max);

/* Frame reassembly from a stream: append what read() gave, then take
 * whole frames.  th_iso_take returns 1 and points *frame and *len into the
 * buffer (valid until the next append/take), 0 when no whole frame is
 * there, -1 when the length is bad: more than `max`, refused as soon as
 * the 4-byte length is there, before any of the body is waited for
 * (`refused` then holds the length it declared).  A take that finds no
 * whole frame gives back a buffer grown past ISO_RX_KEEP when what is
 * left in it is small.
 *
 * `max` (0: ISO_MAX_FRAME, never more) is set by the owner before the
 * first fill: the host reads a worker with the pool's worker_max_frame,
 * the worker reads the host with ISO_MAX_FRAME. */
typedef struct th_iso_rx {
    th_buf b;
    size_t off;     /* start of the unread part */
    size_t max;     /* the largest frame body taken; 0: ISO_MAX_FRAME */
    size_t refused; /* the length of the header th_iso_take refused */
} th_iso_rx;
/* read() once: >0, 0 at EOF, -1. */
int th_iso_rx_fill(th_iso_rx *rx, int fd);
int th_iso_take(th_iso_rx *rx, const uint8_t **frame, size_t *len);
void th_iso_rx_destroy(th_iso_rx *rx);

/* Blocking: one whole frame into *out (reset first).  0, 1 at EOF, -1. */
int th_iso_recv(int fd, th_iso_rx *rx, th_buf *out);

/* Small readers of an unpacked array [TYPE, ...]. */
/* A small frame part packed on the stack (no allocation: a DONE frame must
 * go out even when memory is short).  th_iso_small_write is its msgpack
 * write callback: -1 once the 64 bytes are full. */
typedef struct th_iso_small {
    uint8_t b[64];
    size_t n;
} th_iso_small;
int th_iso_small_write(void *data, const char *buf, size_t len);

int64_t th_iso_int(const msgpack_object_array *a, uint32_t i);
double th_iso_num(const msgpack_object_array *a, uint32_t i);
/* bin or str: pointer/len (NULL, 0 when nil or missing). */
const uint8_t *th_iso_bytes(const msgpack_object_array *a, uint32_t i,
                            size_t *len);
/* str as a new NUL-terminated copy (NULL when nil; "" when missing). */
char *th_iso_strdup(const msgpack_object_array *a, uint32_t i);

/* The descriptor a worker sends in HELLO, from a loaded plugin, and back:
 * the host builds a toolhost_plugin (with its own strings) from it:
 * [name, version, description, config_params, [tool...], plugin_flags,
 * [resource...], [prompt...]],
 * each tool [name, description, long_description, params, stdout_type,
 * stderr_type, flags, has_needs_permission, has_validate_args, title,
 * output_schema, input_schema, tags (nil or [tag...])]. */
int th_iso_pack_desc(msgpack_packer *pk, const th_plugin *p);
/* The tools p->tools[from..] (after init: what init_tools() gave) as an
 * array of tools packed as in HELLO. */
int th_iso_pack_tools(msgpack_packer *pk, const th_plugin *p, size_t from);

/* Opens an isolated plugin: checks the file, starts its first worker and
 * reads its descriptor.  The returned th_plugin is a proxy whose init()
 * starts the configured workers with the config block and whose tools
 * forward each call to a worker.  The same contract as th_plugin_open()
 * (refs = 1, TH_ELOAD "PATH: reason"); `file` is what the workers load
 * (a private copy or `path`). */
int th_iso_open(const th_plugin_cfg *pc, const char *file, bool check,
                uint64_t generation, th_plugin **out, th_error *err);

/* th_plugin_open() or, for `isolation: process`, th_iso_open(): the one
 * branch the loaders (reload.c, reload_host.c) take. */
int th_iso_plugin_open(const th_plugin_cfg *pc, const th_load_opts *lo,
                       th_plugin **out, th_error *err);

/* For fuzz/iso_wire.c: one frame body from a worker, taken as a HELLO
 * (descriptor built and checked) and as any other message (routed to a
 * worker with one waiting call, id 1; a READY's tools built).  No process, no thread.  0 when
 * the descriptor passed the checks, else a TH_E code. */
int th_iso_fuzz_frame(const uint8_t *f, size_t n);

#endif
