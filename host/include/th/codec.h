/* th/codec.h - the one codec of what every front sends: call results,
 * progress events, task info and tool entries.
 *
 * Each form has one msgpack encoder (the wire form of docs/protocol.md),
 * one decoder where a front reads it back (the RPC client, the CLI), and a
 * JSON form derived from the msgpack form through th/json.h (lossy: tool
 * output may hold any bytes), never written by hand a second time.
 *
 * Forms:
 *   result    {ok, stdout, stderr, meta}              a call that ran
 *             {ok: false, error: {code, message}}     a tool error
 *             {status: "running", task_id, message}   an acknowledged task
 *             stdout/stderr are str when UTF-8, bin otherwise; meta is the
 *             tool's msgpack map passed through untouched ({} when none);
 *             code is th_err_name() of a TH_E* code (th/err.h).
 *   progress  [task_id, {message, progress?, data?, coalesced}]
 *   task      {task_id, tool, status, state, scope, elapsed_ms, started_at,
 *              last_update, message, progress, arguments}
 *   tool      th_schema_pack_tool()'s tools.list entry.
 *
 * Threads: every function is pure (any thread).  Ownership: decoders fill
 * caller storage (_init/_destroy pairs); returned json_t* are new
 * references.
 */
#ifndef TH_CODEC_H
#define TH_CODEC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/buf.h"
#include "th/err.h"
#include "th/host.h"

struct msgpack_packer;
struct msgpack_object;

/* ---- Call results ---------------------------------------------------------- */

/* Packs the result map of r (form by r->kind).  0 or TH_ENOMEM. */
int th_codec_pack_result(struct msgpack_packer *pk, const th_result_copy *r);
/* The same, appended to out. */
int th_codec_result_to_buf(th_buf *out, const th_result_copy *r);
/* Reads a result map back into caller storage *r (th_result_copy_destroy()
 * after, also on failure).  Unknown error codes become TH_EINTERNAL (their
 * name is kept in r->message's words).  0, TH_EPROTO (not a result map) or
 * TH_ENOMEM. */
int th_codec_unpack_result(const struct msgpack_object *o, th_result_copy *r);
int th_codec_unpack_result_bytes(const uint8_t *data, size_t len,
                                 th_result_copy *r);
/* The JSON form of the result map (invalid UTF-8 in stdout/stderr becomes
 * U+FFFD).  NULL with err set when out of memory. */
json_t *th_codec_result_json(const th_result_copy *r, th_error *err);
/* A deep copy of src into caller storage dst.  0 or TH_ENOMEM (dst then
 * empty). */
int th_result_copy_dup(th_result_copy *dst, const th_result_copy *src);

/* ---- Progress ---------------------------------------------------------------- */

/* A progress event; the decoder's pointers point into the object it read
 * (message is NOT NUL-terminated: use message_len). */
typedef struct th_progress {
    uint64_t task_id;
    const char *message; /* NULL: none (packed as "") */
    size_t message_len;  /* decoder only; the encoder uses strlen */
    double fraction;     /* < 0: unknown (not packed) */
    const uint8_t *data; /* a msgpack value or NULL */
    size_t data_len;
    uint32_t coalesced;
} th_progress;

/* Packs the params of a task.progress notification. 0 or TH_ENOMEM. */
int th_codec_pack_progress(struct msgpack_packer *pk, const th_progress *p);
/* Reads task.progress params.  0 or TH_EPROTO. */
int th_codec_unpack_progress(const struct msgpack_object *params,
                             th_progress *p);

/* ---- Task info ----------------------------------------------------------------- */

/* "working", "completed", "failed", "cancelled". */
const char *th_task_state_name(th_task_state st);
/* The state of a finished task from its final result. */
th_task_state th_task_state_of(const th_result_copy *r);

/* Packs one task as tasks.list and get_running_tasks show it; now_ms (Unix
 * ms) gives a live task's elapsed_ms.  0 or TH_ENOMEM. */
int th_codec_pack_task(struct msgpack_packer *pk, const th_task_view *t,
                       int64_t now_ms);
/* Its JSON form. NULL with err set when out of memory. */
json_t *th_codec_task_json(const th_task_view *t, int64_t now_ms,
                           th_error *err);

/* ---- Tool entries ---------------------------------------------------------------- */

/* The tools.list entry of a tool (th_schema_pack_tool) and its JSON form. */
int th_codec_pack_tool(struct msgpack_packer *pk, const th_tool *t);
json_t *th_codec_tool_json(const th_tool *t, th_error *err);

#endif
