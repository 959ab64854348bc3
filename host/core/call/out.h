/* out.h - private to host/core: one output stream of a call, limited by
 * its semantic type.
 *
 * Limits are enforced while the tool writes: the stream keeps at most
 * `limit` bytes (a head, and for head+tail types a ring buffer of the tail)
 * and only counts the rest, so a tool that writes a gigabyte costs no more
 * memory than the limit.  th_out_finish() builds the final text with an
 * explicit marker where bytes were cut; a UTF-8 sequence is never split.
 *
 * Strategies by type (docs/limits.md has the exact marker texts):
 *   command_output, log, error, text, diff, search_results, status:
 *       head and tail, marker in the middle
 *       "... [N bytes, M lines cut] ..."
 *   file_content, file_view, knowledge:
 *       head only (whole lines), marker saying how much remains and how to
 *       read on: "[... N more bytes (M lines) not shown; read on with
 *       offset=K]" (K in lines for files, in bytes for knowledge)
 *   structured: cut at a JSON element boundary, the open brackets closed,
 *       so the text stays valid JSON; no marker (meta says it)
 *   binary: head only, nothing added to the bytes (meta says it)
 *
 * UTF-8: no cut splits a valid sequence; invalid bytes pass through
 * untouched and count as one-byte units when a cut is placed.
 *
 * Memory: the head grows by doubling up to limit + 1 bytes; once the limit
 * is reached, the tail of head+tail types lives in the same allocation (a
 * ring over its second half), so a stream never holds more than limit + 1
 * bytes however much is written.  While the limit is not reached,
 * th_out_write() is an append and th_out_finish() hands the buffer over.
 *
 * Threads: one th_out is used by one thread at a time.  A call's streams
 * may be written from more than one thread (the thread running execute()
 * without the call's lock, a plugin thread under it): such writers take
 * turns through the stream's claim word (th_out_try_claim, th_out_claim,
 * th_out_unclaim), held for one th_out_write.
 */
#ifndef TH_OUT_H
#define TH_OUT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/buf.h"
#include "th/config.h"

struct msgpack_packer;
struct th_limits;
struct th_toolset_cfg;

typedef struct th_out {
    /* Set by th_out_init (the rest is set where it starts to count: once
     * over the limit, or by th_out_spill, or by a write). */
    uint32_t sem;        /* toolhost_semantic */
    atomic_uint wr;      /* 1 while a writer holds the stream (claim) */
    uint64_t limit;      /* bytes kept at most; 0 = no limit */
    th_buf head;         /* the first bytes (after the limit: head part,
                            then the ring, in one allocation) */
    uint64_t total;      /* every byte written */
    uint64_t lines;      /* newlines written */
    uint64_t offset_base;/* lines (files) or bytes (knowledge) before this
                            output, for the "offset=" of the marker */
    char *spill_dir;     /* spill wanted (th_out_spill), or NULL */
    char *spill_path;
    const char *note;    /* static text for meta, or NULL */
    int spill_fd;        /* full output saved here, or -1 */
    bool over;           /* the limit was reached: counting only */

    uint8_t last;        /* the last byte written (for the line count;
                            read only once total > 0) */
    /* Once over the limit: */
    uint8_t ring_prev;   /* the byte just before the oldest ring byte */
    uint8_t *ring;       /* the last bytes (head+tail types): points into
                            head.data, not freed alone; NULL for the
                            other types */
    size_t ring_cap, ring_pos, ring_len;
    size_t head_keep;    /* head bytes kept once over the limit */
    /* Set by th_out_spill: */
    uint64_t spill_max, spill_bytes;
    bool spill_failed;
    /* Why (the marker says it): 0, or the errno of the failed step */
    int spill_errno;
    bool spill_fail_create; /* creating the file failed, else a write */
} th_out;

/* What happened to a stream, for the result's meta. */
typedef struct th_out_info {
    bool truncated;
    uint64_t total_bytes; /* written by the tool */
    uint64_t kept_bytes;  /* of the tool's bytes in the result (a marker
                             or closing brackets added are excluded) */
    uint64_t total_lines; /* lines written: newlines, plus one for a last
                             line without a newline */
    uint64_t kept_lines;  /* newlines among the kept bytes */
    const char *spill_path; /* NULL, or the file holding the output (valid
                               while the th_out lives) */
    uint64_t spill_bytes; /* bytes in that file (< total_bytes when capped) */
    const char *note;     /* NULL, or how the stream was cut (structured,
                             binary): static text */
} th_out_info;

/* Starts an empty stream on caller storage.  `limit` 0 keeps everything. */
void th_out_init(th_out *o, uint32_t sem, uint64_t limit);
/* Saves the whole stream to a new 0600 file "th-spill-XXXXXX" in `dir`
 * (created 0700 when missing) as well, up to max_bytes (0: no cap), when
 * the stream passes its limit: the file is created at that moment (the
 * head, still whole, goes in first), so an output that fits never touches
 * the disk.  Call before the first write.  0, TH_ENOMEM, or TH_EIO when
 * `dir` is not a writable folder (no spill then; the stream works as
 * before).  A file that cannot be created or written later is dropped. */
int th_out_spill(th_out *o, const char *dir, uint64_t max_bytes);
/* Sets where the output starts in its source, for the read-on offset of
 * head-only markers (e.g. the `offset` argument of a file reader). */
void th_out_set_offset_base(th_out *o, uint64_t base);
/* 0, or TH_ENOMEM (the stream keeps what it had). */
int th_out_write(th_out *o, const void *data, size_t len);

/* The claim word of a stream written from more than one thread: a writer
 * holds it for the span of one th_out_write.  th_out_try_claim takes it
 * when free (one CAS; true when taken), th_out_claim waits for it (a
 * holder only ever holds it for one write: bounded), th_out_unclaim gives
 * it back (a release store: the next holder sees the bytes written). */
static inline bool th_out_try_claim(th_out *o)
{
    unsigned free_word = 0;
    return atomic_compare_exchange_strong_explicit(
        &o->wr, &free_word, 1, memory_order_acquire, memory_order_relaxed);
}
void th_out_claim(th_out *o);
static inline void th_out_unclaim(th_out *o)
{
    atomic_store_explicit(&o->wr, 0, memory_order_release);
}
/* Appends the final text (with marker) to dst and fills *info (may be
 * NULL).  Call once.  `o` stays valid for th_out_destroy(); info->spill_path
 * points into `o`.  0 or TH_ENOMEM. */
int th_out_finish(th_out *o, th_buf *dst, th_out_info *info);
/* Frees what the stream holds.  Inline: after a finish that handed the
 * buffer over, with no spill, there is nothing to do. */
void th_out_destroy_held(th_out *o);
static inline void th_out_destroy(th_out *o)
{
    /* an open spill file has a path and a folder: spill_dir says it */
    if (o->head.data || o->spill_dir)
        th_out_destroy_held(o);
}

/* A finished stream's buffer the caller is done with (a delivered result's
 * head): kept as this thread's spare for the next stream's first block,
 * or freed; *b is left empty.  th_out_spare_drop frees this thread's
 * spare (a thread's exit does it too). */
void th_out_spare_put(th_buf *b);
void th_out_spare_drop(void);

/* Packs {"stdout": {...}, "stderr": {...}} describing both streams, for
 * meta["toolhost"]["output"].  Each is {truncated, total_bytes, kept_bytes,
 * total_lines, spill_path?, spill_bytes?, note?}; a NULL info is left out.
 * 0 or TH_ENOMEM. */
int th_out_pack_info(struct msgpack_packer *pk, const th_out_info *out,
                     const th_out_info *err);

/* Removes spill files ("th-spill-*" regular files of this user) in `dir`
 * older than max_age_ms (0: no age limit), then the oldest ones until the
 * rest take at most max_total bytes (0: no size limit).  Returns how many
 * files were removed, or TH_EIO when `dir` cannot be read (a missing dir
 * is 0).  Safe from any thread. */
int th_out_spill_gc(const char *dir, uint64_t max_age_ms, uint64_t max_total);

/* The byte limit for a `sem` stream of a tool in toolset `ts` whose
 * override there is `ov`: the override's if it sets one, else the
 * toolset's limits, else `host` (the config's limits, defaults filled
 * in).  0 entries inherit; a type out of range uses entry 0.  `ts`, `ov`
 * and `host` may be NULL.  Pure.  The one place of this rule: the call
 * path (th_call_out_limit, through the override found when the call
 * started) and th_out_limit (by the tool's name) come here. */
static inline uint64_t th_out_limit_ov(const th_limits *host,
                                       const th_toolset_cfg *ts,
                                       const th_tool_override *ov,
                                       uint32_t sem)
{
    uint32_t i = sem < TH_SEM_COUNT ? sem : 0;
    if (ov && ov->limits.bytes[i])
        return ov->limits.bytes[i];
    if (ts && ts->limits.bytes[i])
        return ts->limits.bytes[i];
    return host ? host->bytes[i] : 0;
}

/* The same for tool `tool`, its override found by name in `ts`. */
uint64_t th_out_limit(const struct th_limits *host,
                      const struct th_toolset_cfg *ts, const char *tool,
                      uint32_t sem);

/* Returns the number of bytes of buf[0..n) to keep so that no valid UTF-8
 * sequence is split at the end (invalid bytes count as single units). */
size_t th_utf8_cut(const uint8_t *buf, size_t n);

#endif
