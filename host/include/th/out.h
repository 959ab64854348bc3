/* th/out.h - one output stream of a call, limited by its semantic type.
 *
 * Limits are enforced while the tool writes: the stream keeps at most
 * `limit` bytes (a head, and for head+tail types a ring buffer of the tail)
 * and only counts the rest, so a tool that writes a gigabyte costs no more
 * memory than the limit.  th_out_finish() builds the final text with an
 * explicit marker where bytes were cut; a UTF-8 sequence is never split.
 *
 * Strategies by type:
 *   command_output, log, error, text, diff, search_results, status:
 *       head and tail, marker in the middle ("... [N bytes, M lines cut] ...")
 *   file_content, file_view, knowledge:
 *       head only, marker saying how much remains and how to read on
 *   structured: cut at an element boundary so the JSON stays valid
 *   binary: head only, the marker never mixed into the bytes (meta says it)
 *
 * Threads: one th_out is used by one thread at a time (the call's owner).
 */
#ifndef TH_OUT_H
#define TH_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/buf.h"

struct msgpack_packer;

typedef struct th_out {
    uint32_t sem;        /* toolhost_semantic */
    uint64_t limit;      /* bytes kept at most; 0 = no limit */
    th_buf head;         /* the first bytes */
    uint8_t *ring;       /* the last bytes (head+tail types), or NULL */
    size_t ring_cap, ring_pos, ring_len;
    uint64_t total;      /* every byte written */
    uint64_t lines;      /* newlines written */
    int spill_fd;        /* full output saved here, or -1 */
    char *spill_path;
} th_out;

/* What happened to a stream, for the result's meta. */
typedef struct th_out_info {
    bool truncated;
    uint64_t total_bytes; /* written by the tool */
    uint64_t kept_bytes;  /* in the result, marker excluded */
    uint64_t total_lines;
    const char *spill_path; /* NULL, or the file holding all of it */
} th_out_info;

void th_out_init(th_out *o, uint32_t sem, uint64_t limit);
/* Saves the whole stream to a new 0600 file in `dir` as well. */
int th_out_spill(th_out *o, const char *dir, uint64_t max_bytes);
/* 0, or TH_ENOMEM (the stream keeps what it had). */
int th_out_write(th_out *o, const void *data, size_t len);
/* Appends the final text (with marker) to dst and fills *info.  `o` stays
 * valid for th_out_free(). */
int th_out_finish(th_out *o, th_buf *dst, th_out_info *info);
void th_out_free(th_out *o);

/* Packs {"stdout": {...}, "stderr": {...}} describing both streams, for
 * meta["toolhost"]["output"]. */
int th_out_pack_info(struct msgpack_packer *pk, const th_out_info *out,
                     const th_out_info *err);

#endif
