/* out.c - output streams limited by semantic type while the tool writes. */
#include "out.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <msgpack.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <yajl/yajl_parse.h>

#include "th/clock.h"
#include "th/config.h"
#include "th/err.h"
#include "th/log.h"
#include "toolhost/plugin.h"

#define SPILL_PREFIX "th-spill-"
#define JSON_MAX_DEPTH 512

typedef enum strat { ST_HEAD_TAIL, ST_HEAD, ST_JSON, ST_BINARY } strat;

static strat strategy(uint32_t sem)
{
    switch (sem) {
    case TOOLHOST_SEM_FILE_CONTENT:
    case TOOLHOST_SEM_FILE_VIEW:
    case TOOLHOST_SEM_KNOWLEDGE:
        return ST_HEAD;
    case TOOLHOST_SEM_STRUCTURED:
        return ST_JSON;
    case TOOLHOST_SEM_BINARY:
        return ST_BINARY;
    default:
        return ST_HEAD_TAIL;
    }
}

void th_out_init(th_out *o, uint32_t sem, uint64_t limit)
{
    /* only what is read before it is set (out.h): two streams a call,
     * the ring's and the spill's members wait until they count */
    o->sem = sem;
    atomic_init(&o->wr, 0);
    o->limit = limit;
    o->head.data = NULL;
    o->head.len = o->head.cap = 0;
    o->total = o->lines = o->offset_base = 0;
    o->spill_dir = o->spill_path = NULL;
    o->note = NULL;
    o->spill_fd = -1;
    o->over = false;
}

void th_out_set_offset_base(th_out *o, uint64_t base)
{
    o->offset_base = base;
}

uint64_t th_out_limit(const th_limits *host, const th_toolset_cfg *ts,
                      const char *tool, uint32_t sem)
{
    const th_tool_override *ov = NULL;
    for (size_t k = 0; ts && tool && !ov && k < ts->n_overrides; k++)
        if (ts->overrides[k].tool && strcmp(ts->overrides[k].tool, tool) == 0)
            ov = &ts->overrides[k]; /* a toolset names a tool once */
    return th_out_limit_ov(host, ts, ov, sem);
}

/* ---- UTF-8 and counting ------------------------------------------------ */

size_t th_utf8_cut(const uint8_t *b, size_t n)
{
    for (size_t k = 1; k <= 4 && k <= n; k++) {
        uint8_t c = b[n - k];
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back */
        size_t len = c < 0x80            ? 1
                     : (c & 0xE0) == 0xC0 ? 2
                     : (c & 0xF0) == 0xE0 ? 3
                     : (c & 0xF8) == 0xF0 ? 4
                                          : 1;
        return len > k ? n - k : n; /* drop a sequence the cut would split */
    }
    return n;
}

/* Skips the continuation bytes (at most 3) that open a tail cut out of
 * the middle of a sequence. */
static size_t utf8_skip(const uint8_t *b, size_t n)
{
    size_t i = 0;
    while (i < n && i < 3 && (b[i] & 0xC0) == 0x80)
        i++;
    return i;
}

static uint64_t count_nl(const uint8_t *p, size_t n)
{
    uint64_t c = 0;
    const uint8_t *end = p + n;
    while (p < end && (p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        c++;
        p++;
    }
    return c;
}

/* "1,234,567" */
static const char *fmt_num(uint64_t v, char buf[32])
{
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v);
    int o = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = '\0';
    return buf;
}

/* ---- Memory -------------------------------------------------------------- */

/* One spare output buffer per thread: the head of a result the caller
 * only read (delivery hands it back with th_out_spare_put once the
 * callback returned) becomes the next stream's first block on the same
 * thread, instead of a free() and a malloc() a call.  Only buffers of
 * TH_OUT_SPARE_MIN..TH_OUT_SPARE_MAX bytes are kept; the thread's exit
 * (a key's destructor) and th_out_spare_drop() free it. */
#define TH_OUT_SPARE_MIN 256
#define TH_OUT_SPARE_MAX 4096
static _Thread_local uint8_t *tl_spare;
static _Thread_local size_t tl_spare_cap;
static _Thread_local bool tl_spare_keyed;
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static bool spare_key_ok;

static void spare_exit(void *v)
{
    (void)v;
    th_out_spare_drop();
    tl_spare_keyed = false;
}

static void spare_key_make(void)
{
    spare_key_ok = pthread_key_create(&spare_key, spare_exit) == 0;
}

void th_out_spare_put(th_buf *b)
{
    if (!b->data)
        return;
    if (tl_spare || b->cap < TH_OUT_SPARE_MIN || b->cap > TH_OUT_SPARE_MAX)
        goto drop;
    if (!tl_spare_keyed) { /* once a thread: its exit frees the spare */
        pthread_once(&spare_once, spare_key_make);
        if (!spare_key_ok || pthread_setspecific(spare_key, &tl_spare) != 0)
            goto drop;
        tl_spare_keyed = true;
    }
    tl_spare = b->data;
    tl_spare_cap = b->cap;
    b->data = NULL;
    b->len = b->cap = 0;
    return;
drop:
    th_buf_destroy(b);
}

void th_out_spare_drop(void)
{
    free(tl_spare);
    tl_spare = NULL;
    tl_spare_cap = 0;
}

/* Room for `need` content bytes plus the NUL; grows by doubling but never
 * past limit + 1 while the stream is limited. */
static int head_reserve(th_out *o, size_t need)
{
    if (need < o->head.cap)
        return 0;
    if (need == SIZE_MAX)
        return TH_ENOMEM;
    if (!o->head.data && tl_spare && need < tl_spare_cap &&
        (!o->limit || tl_spare_cap <= o->limit + 1)) {
        o->head.data = tl_spare; /* the thread's spare (th_out_spare_put) */
        o->head.cap = tl_spare_cap;
        tl_spare = NULL;
        tl_spare_cap = 0;
        return 0;
    }
    size_t cap = o->head.cap ? o->head.cap : 256;
    while (cap < need + 1)
        cap = cap > SIZE_MAX / 2 ? need + 1 : cap * 2;
    if (o->limit && need <= o->limit && cap > o->limit + 1)
        cap = (size_t)o->limit + 1;
    uint8_t *p = realloc(o->head.data, cap);
    if (!p)
        return TH_ENOMEM;
    o->head.data = p;
    o->head.cap = cap;
    return 0;
}

static int head_append(th_out *o, const uint8_t *p, size_t n)
{
    if (head_reserve(o, o->head.len + n) != 0)
        return TH_ENOMEM;
    if (n)
        memcpy(o->head.data + o->head.len, p, n);
    o->head.len += n;
    o->head.data[o->head.len] = '\0';
    return 0;
}

static void ring_put(th_out *o, const uint8_t *p, size_t n)
{
    size_t cap = o->ring_cap;
    if (cap == 0)
        return;
    if (n > cap)
        o->ring_prev = p[n - cap - 1];
    else /* the last byte this write overwrites */
        o->ring_prev = o->ring[(o->ring_pos + n - 1) % cap];
    if (n >= cap) {
        memcpy(o->ring, p + n - cap, cap);
        o->ring_pos = 0;
        return;
    }
    size_t first = cap - o->ring_pos < n ? cap - o->ring_pos : n;
    memcpy(o->ring + o->ring_pos, p, first);
    memcpy(o->ring, p + first, n - first);
    o->ring_pos = (o->ring_pos + n) % cap;
}

static void reverse(uint8_t *a, size_t n)
{
    for (size_t i = 0, j = n; i + 1 < j; i++, j--) {
        uint8_t t = a[i];
        a[i] = a[j - 1];
        a[j - 1] = t;
    }
}

/* Rotates a[0..n) left by k in place (oldest byte of the ring first). */
static void rotate(uint8_t *a, size_t n, size_t k)
{
    if (k == 0 || k >= n)
        return;
    reverse(a, k);
    reverse(a + k, n - k);
    reverse(a, n);
}

/* ---- Spill --------------------------------------------------------------- */

int th_out_spill(th_out *o, const char *dir, uint64_t max_bytes)
{
    if (!dir || o->spill_dir || o->total > 0)
        return TH_EINVAL;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return TH_EIO;
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) ||
        access(dir, W_OK | X_OK) != 0)
        return TH_EIO;
    o->spill_dir = strdup(dir);
    if (!o->spill_dir)
        return TH_ENOMEM;
    o->spill_max = max_bytes;
    o->spill_bytes = 0;
    o->spill_failed = false;
    o->spill_errno = 0;
    o->spill_fail_create = false;
    return 0;
}

/* Notes why the spill stopped (the first reason only), for the marker
 * and the log: a full disk must read as a failed write. */
static void spill_fail(th_out *o, bool create, int e)
{
    if (!o->spill_failed) {
        o->spill_errno = e ? e : EIO;
        o->spill_fail_create = create;
        th_log_warn("output not saved in full: %s a spill file in %s "
                    "failed: %s", create ? "creating" : "writing",
                    o->spill_dir, strerror(o->spill_errno));
    }
    o->spill_failed = true;
}

static void spill_write(th_out *o, const uint8_t *p, size_t n);

/* Creates the file when the stream first passes its limit: until then
 * every byte is still in the head, which goes into the file first. */
static void spill_open(th_out *o)
{
    size_t n = strlen(o->spill_dir) + sizeof "/" SPILL_PREFIX "XXXXXX";
    char *path = malloc(n);
    if (!path) {
        spill_fail(o, true, ENOMEM);
        return;
    }
    snprintf(path, n, "%s/" SPILL_PREFIX "XXXXXX", o->spill_dir);
    int fd = mkostemp(path, O_CLOEXEC); /* mode 0600 */
    if (fd < 0) {
        spill_fail(o, true, errno);
        free(path);
        return;
    }
    (void)fchmod(fd, 0600);
    o->spill_fd = fd;
    o->spill_path = path;
    spill_write(o, o->head.data, o->head.len);
}

static void spill_drop(th_out *o)
{
    if (o->spill_fd >= 0)
        close(o->spill_fd);
    o->spill_fd = -1;
    if (o->spill_path) {
        unlink(o->spill_path);
        free(o->spill_path);
        o->spill_path = NULL;
    }
}

static void spill_write(th_out *o, const uint8_t *p, size_t n)
{
    if (o->spill_max && o->spill_bytes + n > o->spill_max)
        n = (size_t)(o->spill_max - o->spill_bytes);
    while (n > 0) {
        ssize_t w = write(o->spill_fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            spill_fail(o, false, w < 0 ? errno : ENOSPC);
            spill_drop(o);
            return;
        }
        p += w;
        n -= (size_t)w;
        o->spill_bytes += (uint64_t)w;
    }
}

/* ---- Writing ------------------------------------------------------------- */

/* A write that reaches the limit, or comes after it: the head takes
 * what fits, the ring (head+tail types) and the spill file the rest. */
static __attribute__((noinline)) int write_over(th_out *o, const uint8_t *data,
                                                size_t len)
{
    const uint8_t *p = data;
    size_t n = len;
    if (!o->over) {
        size_t room = (size_t)(o->limit - o->head.len);
        if (head_append(o, p, room) != 0)
            return TH_ENOMEM;
        o->over = true;
        p += room;
        n -= room;
        if (o->spill_dir && !o->spill_failed)
            spill_open(o);
        o->ring = NULL;
        if (strategy(o->sem) == ST_HEAD_TAIL) {
            o->head_keep = (size_t)(o->limit / 2);
            o->ring = o->head.data + o->head_keep;
            o->ring_cap = o->ring_len = (size_t)o->limit - o->head_keep;
            o->ring_pos = 0;
            o->ring_prev = o->head_keep ? o->head.data[o->head_keep - 1]
                                        : 0;
        }
    }
    if (o->ring)
        ring_put(o, p, n);
    if (o->spill_fd >= 0)
        spill_write(o, p, n);
    o->total += len;
    o->lines += count_nl(data, len);
    o->last = data[len - 1];
    return 0;
}

int th_out_write(th_out *o, const void *data, size_t len)
{
    if (len == 0)
        return 0;
    if (!data)
        return TH_EINVAL;
    size_t at = o->head.len;
    if (o->over || (o->limit && len > o->limit - at))
        return write_over(o, data, len);
    /* the usual write: an append within the limit (the block grows, or
     * is this thread's spare, when the bytes and the NUL do not fit) */
    if (len >= o->head.cap - at) {
        if (!o->head.data && tl_spare && len < tl_spare_cap &&
            (!o->limit || tl_spare_cap <= o->limit + 1)) {
            o->head.data = tl_spare; /* the thread's spare (as head_reserve) */
            o->head.cap = tl_spare_cap;
            tl_spare = NULL;
            tl_spare_cap = 0;
        } else if (head_reserve(o, at + len) != 0) {
            return TH_ENOMEM;
        }
    }
    uint8_t *d = o->head.data + at;
    memcpy(d, data, len);
    d[len] = '\0';
    o->head.len = at + len;
    o->total += len;
    o->lines += count_nl(d, len);
    o->last = d[len - 1];
    return 0;
}

void th_out_claim(th_out *o)
{
    /* the holder is in one th_out_write: spin a little, then yield */
    for (unsigned i = 0; !th_out_try_claim(o); i++)
        while (atomic_load_explicit(&o->wr, memory_order_relaxed))
            if (++i > 64)
                sched_yield();
}

/* ---- JSON element boundaries --------------------------------------------- */

/* A block yajl allocated, on the scan's list (see json_scan). */
typedef struct jblk {
    struct jblk *prev, *next; /* 16 bytes: the payload stays aligned */
} jblk;

typedef struct jscan {
    char stack[JSON_MAX_DEPTH]; /* closers of the open containers */
    size_t depth;
    bool err;     /* not JSON (or nested too deep) */
    bool have;    /* best is set */
    size_t best;  /* the last cut point with best + depth <= budget */
    size_t budget;
    yajl_handle h;
    /* the last such cut point at each depth, SIZE_MAX when none */
    size_t at[JSON_MAX_DEPTH + 1];
    /* the closers as they were at the last cut point (see jcandidate);
     * frozen: copied into kept, else still those of stack */
    bool frozen;
    char kept[JSON_MAX_DEPTH];
    /* yajl's blocks, and where an allocation that fails jumps to */
    jblk *blocks;
    jmp_buf oom;
} jscan;

/* A cut point: right after the token yajl just read. */
static int jcandidate(void *ud)
{
    jscan *st = ud;
    size_t i = yajl_get_bytes_consumed(st->h);
    if (i + st->depth <= st->budget) {
        st->best = i;
        st->have = true;
        st->at[st->depth] = i;
    } else if (!st->frozen) {
        /* The first point past the budget: no later one comes within it
         * (i only grows, and a closing bracket gives back one level for
         * the byte it takes), so the closers of the last kept point are
         * those of the stack now, up to one level more when this token
         * closed a container.  jchoose's cut has no closer changed since
         * (to change one, the depth must drop below the cut's, which
         * makes a later, shallower point that jchoose takes first). */
        size_t d = st->depth < JSON_MAX_DEPTH ? st->depth + 1
                                              : JSON_MAX_DEPTH;
        memcpy(st->kept, st->stack, d);
        st->frozen = true;
    }
    return 1;
}

/* The cut to use: the shallowest boundary that keeps at least half of what
 * the last boundary would, so whole records of an array (or whole lines of
 * NDJSON) are preferred to a record cut in its middle. */
static size_t jchoose(const jscan *st, size_t *depth)
{
    for (size_t d = 0; d <= JSON_MAX_DEPTH; d++)
        if (st->at[d] != SIZE_MAX && st->at[d] >= st->best / 2) {
            *depth = d;
            return st->at[d];
        }
    *depth = 0; /* not reached: at[best's depth] is best */
    return st->best;
}

static int j_null(void *ud) { return jcandidate(ud); }
static int j_bool(void *ud, int b) { (void)b; return jcandidate(ud); }
static int j_num(void *ud, const char *p, size_t n)
{
    (void)p, (void)n;
    return jcandidate(ud);
}
static int j_str(void *ud, const unsigned char *p, size_t n)
{
    (void)p, (void)n;
    return jcandidate(ud);
}
static int j_key(void *ud, const unsigned char *p, size_t n)
{
    (void)ud, (void)p, (void)n;
    return 1;
}
static int j_open(jscan *st, char closer)
{
    if (st->depth >= JSON_MAX_DEPTH)
        return 0; /* too deep: yajl stops, st->err */
    st->stack[st->depth++] = closer;
    return jcandidate(st);
}
static int j_open_map(void *ud) { return j_open(ud, '}'); }
static int j_open_array(void *ud) { return j_open(ud, ']'); }
static int j_close(void *ud)
{
    jscan *st = ud;
    st->depth--;
    return jcandidate(st);
}

static const yajl_callbacks jscan_cb = {
    .yajl_null = j_null,
    .yajl_boolean = j_bool,
    .yajl_number = j_num,
    .yajl_string = j_str,
    .yajl_start_map = j_open_map,
    .yajl_map_key = j_key,
    .yajl_end_map = j_close,
    .yajl_start_array = j_open_array,
    .yajl_end_array = j_close,
};

/* yajl's allocator.  yajl uses what its allocator returns without a
 * check (a NULL from malloc crashes it, in yajl_alloc already), so a
 * failed allocation does not return: it jumps back to json_scan, which
 * frees every block yajl holds (they are on st->blocks) and reports the
 * failure.  Nothing else of yajl's outlives the jump: it takes no lock and
 * owns no other resource. */
static void jblk_link(jscan *st, jblk *b)
{
    b->prev = NULL;
    b->next = st->blocks;
    if (st->blocks)
        st->blocks->prev = b;
    st->blocks = b;
}

static void jblk_unlink(jscan *st, jblk *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        st->blocks = b->next;
    if (b->next)
        b->next->prev = b->prev;
}

static void *j_malloc(void *ud, size_t n)
{
    jscan *st = ud;
    jblk *b = n <= SIZE_MAX - sizeof *b ? malloc(sizeof *b + n) : NULL;
    if (!b)
        longjmp(st->oom, 1);
    jblk_link(st, b);
    return b + 1;
}

static void *j_realloc(void *ud, void *p, size_t n)
{
    jscan *st = ud;
    if (!p)
        return j_malloc(ud, n);
    jblk *b = (jblk *)p - 1;
    jblk_unlink(st, b);
    jblk *nb = n <= SIZE_MAX - sizeof *b ? realloc(b, sizeof *b + n) : NULL;
    if (!nb) {
        jblk_link(st, b); /* still yajl's: freed after the jump */
        longjmp(st->oom, 1);
    }
    jblk_link(st, nb);
    return nb + 1;
}

static void j_free(void *ud, void *p)
{
    if (!p)
        return;
    jblk *b = (jblk *)p - 1;
    jblk_unlink(ud, b);
    free(b);
}

static void json_parse(const uint8_t *s, size_t n, jscan *st)
{
    yajl_alloc_funcs af = {j_malloc, j_realloc, j_free, st};
    st->h = yajl_alloc(&jscan_cb, &af, st);
    yajl_config(st->h, yajl_allow_multiple_values, 1);
    yajl_config(st->h, yajl_dont_validate_strings, 1);
    st->err = yajl_parse(st->h, s, n) != yajl_status_ok;
    yajl_free(st->h);
    st->h = NULL;
}

/* Parses s[0..n) with yajl and notes every place where the text can be cut
 * and closed: right after '{' or '[', right after a complete value inside a
 * container, and right after a complete top-level value (several may
 * follow each other: NDJSON, JSON text sequences, so one value per line is
 * cut between lines).  An incomplete token at the end (the head was cut
 * there) is no error: the parse is never completed.  -1: out of memory. */
static int json_scan(const uint8_t *s, size_t n, size_t budget, jscan *st)
{
    st->depth = 0;
    st->err = st->have = st->frozen = false;
    st->best = 0;
    st->budget = budget;
    for (size_t d = 0; d <= JSON_MAX_DEPTH; d++)
        st->at[d] = SIZE_MAX;
    st->blocks = NULL;
    if (setjmp(st->oom) != 0) { /* out of memory inside yajl */
        while (st->blocks) {
            jblk *b = st->blocks;
            st->blocks = b->next;
            free(b);
        }
        st->h = NULL;
        return -1;
    }
    json_parse(s, n, st);
    return 0;
}

/* ---- Finishing ----------------------------------------------------------- */

/* Resizes the head to exactly `need` content bytes + NUL. */
static int head_exact(th_out *o, size_t need)
{
    if (need + 1 <= o->head.cap)
        return 0;
    uint8_t *p = realloc(o->head.data, need + 1);
    if (!p)
        return TH_ENOMEM;
    o->head.data = p;
    o->head.cap = need + 1;
    return 0;
}

static int head_add_marker(th_out *o, const char *m, size_t mlen)
{
    if (head_exact(o, o->head.len + mlen) != 0)
        return TH_ENOMEM;
    memcpy(o->head.data + o->head.len, m, mlen);
    o->head.len += mlen;
    o->head.data[o->head.len] = '\0';
    return 0;
}

static const char *spill_note(const th_out *o, char *buf, size_t size)
{
    if (!o->spill_path && o->spill_dir && o->spill_errno) {
        snprintf(buf, size, "; full output not saved: %s a spill file in %s "
                 "failed: %s", o->spill_fail_create ? "creating" : "writing",
                 o->spill_dir, strerror(o->spill_errno));
        return buf;
    }
    if (!o->spill_path)
        return "";
    if (o->spill_bytes == o->total)
        snprintf(buf, size, "; full output in %s", o->spill_path);
    else
        snprintf(buf, size, "; first %" PRIu64 " bytes in %s",
                 o->spill_bytes, o->spill_path);
    return buf;
}

static int finish_head_tail(th_out *o, th_out_info *info)
{
    uint8_t *d = o->head.data;
    size_t cap = o->ring_cap;
    rotate(o->ring, cap, o->ring_pos);
    o->ring_pos = 0;

    /* head: end at a line end in its last quarter, else at a char end */
    size_t h = o->head_keep;
    size_t lo = h - h / 4;
    const uint8_t *nl = h > lo ? memrchr(d + lo, '\n', h - lo) : NULL;
    h = nl ? (size_t)(nl - d) + 1 : th_utf8_cut(d, h);

    /* tail: start after a line end in its first quarter, else at a char */
    const uint8_t *r = o->ring;
    const uint8_t *tnl = cap / 4 ? memchr(r, '\n', cap / 4) : NULL;
    size_t t0 = o->ring_prev == '\n' ? 0
                : tnl                 ? (size_t)(tnl - r) + 1
                                      : utf8_skip(r, cap);
    size_t tl = cap - t0;

    uint64_t kept_nl = count_nl(d, h) + count_nl(r + t0, tl);
    uint64_t cut_bytes = o->total - h - tl;
    uint64_t cut_lines = o->lines - kept_nl;

    char m[PATH_MAX + 320], a[32], b[32], sp[PATH_MAX + 128];
    int ml = snprintf(m, sizeof m, "%s... [%s byte%s, %s line%s cut%s] ...\n",
                      h > 0 && d[h - 1] != '\n' ? "\n" : "",
                      fmt_num(cut_bytes, a), cut_bytes == 1 ? "" : "s",
                      fmt_num(cut_lines, b), cut_lines == 1 ? "" : "s",
                      spill_note(o, sp, sizeof sp));
    if (ml < 0 || (size_t)ml >= sizeof m)
        ml = 0;
    size_t out = h + (size_t)ml + tl;
    size_t ring_off = o->head_keep + t0;
    if (head_exact(o, out) != 0)
        return TH_ENOMEM;
    d = o->head.data;
    o->ring = NULL;
    memmove(d + h + ml, d + ring_off, tl);
    memcpy(d + h, m, (size_t)ml);
    o->head.len = out;
    d[out] = '\0';
    info->kept_bytes = h + tl;
    info->kept_lines = kept_nl;
    return 0;
}

static int finish_head(th_out *o, th_out_info *info, bool read_on)
{
    uint8_t *d = o->head.data;
    size_t h = o->head.len;
    const uint8_t *nl = h ? memrchr(d, '\n', h) : NULL;
    h = nl ? (size_t)(nl - d) + 1 : th_utf8_cut(d, h);
    o->head.len = h;
    uint64_t kept_nl = count_nl(d, h);
    uint64_t more = o->total - h;
    uint64_t total_lines = o->lines + (o->last != '\n');
    uint64_t more_lines = total_lines - kept_nl;

    char m[PATH_MAX + 360], a[32], b[32], sp[PATH_MAX + 128], ro[96];
    ro[0] = '\0';
    if (read_on) {
        if (o->sem == TOOLHOST_SEM_KNOWLEDGE)
            snprintf(ro, sizeof ro, "; read on with offset=%" PRIu64
                     " (bytes)", o->offset_base + h);
        else
            snprintf(ro, sizeof ro, "; read on with offset=%" PRIu64,
                     o->offset_base + kept_nl);
    }
    int ml = snprintf(m, sizeof m,
                      "%s[... %s more byte%s (%s line%s) not shown%s%s]\n",
                      h > 0 && d[h - 1] != '\n' ? "\n" : "",
                      fmt_num(more, a), more == 1 ? "" : "s",
                      fmt_num(more_lines, b), more_lines == 1 ? "" : "s", ro,
                      spill_note(o, sp, sizeof sp));
    if (ml < 0 || (size_t)ml >= sizeof m)
        ml = 0;
    if (head_add_marker(o, m, (size_t)ml) != 0)
        return TH_ENOMEM;
    info->kept_bytes = h;
    info->kept_lines = kept_nl;
    return 0;
}

static int finish_json(th_out *o, th_out_info *info)
{
    jscan *st = malloc(sizeof *st);
    if (!st)
        return TH_ENOMEM;
    if (json_scan(o->head.data, o->head.len, o->head.len, st) != 0) {
        free(st);
        return TH_ENOMEM;
    }
    if (st->err) {
        free(st);
        o->note = "not valid JSON: cut as text";
        return finish_head(o, info, false);
    }
    if (!st->have) {
        free(st);
        o->note = "no JSON element boundary within the limit: nothing kept";
        o->head.len = 0;
        o->head.data[0] = '\0';
        info->kept_bytes = info->kept_lines = 0;
        return 0;
    }
    size_t depth, cut = jchoose(st, &depth);
    /* the containers open there, innermost first: one scan, no second
     * over the kept text (jcandidate says why the closers are known) */
    const char *open = st->frozen ? st->kept : st->stack;
    o->head.len = cut;
    char close[JSON_MAX_DEPTH];
    for (size_t i = 0; i < depth; i++)
        close[i] = open[depth - 1 - i];
    free(st);
    if (head_add_marker(o, close, depth) != 0)
        return TH_ENOMEM;
    o->note = depth ? "cut at a JSON element boundary; the open brackets "
                      "were closed"
                    : "cut between whole JSON values";
    info->kept_bytes = cut;
    info->kept_lines = count_nl(o->head.data, cut);
    return 0;
}

/* The rest of th_out_finish: a stream over its limit, an append to a
 * buffer that holds text, no info wanted. */
static __attribute__((noinline)) int finish_cut(th_out *o, th_buf *dst,
                                                th_out_info *info)
{
    th_out_info dummy;
    if (!info)
        info = &dummy;
    memset(info, 0, sizeof *info);
    info->total_bytes = o->total;
    info->total_lines = o->lines + (o->total > 0 && o->last != '\n');
    info->truncated = o->over;

    if (o->spill_fd >= 0) {
        close(o->spill_fd);
        o->spill_fd = -1;
    }

    int rc = 0;
    if (!o->over) {
        info->kept_bytes = o->head.len;
        info->kept_lines = o->lines;
    } else {
        switch (strategy(o->sem)) {
        case ST_HEAD_TAIL:
            rc = finish_head_tail(o, info);
            break;
        case ST_HEAD:
            rc = finish_head(o, info, true);
            break;
        case ST_JSON:
            rc = finish_json(o, info);
            break;
        case ST_BINARY:
            o->note = "binary: the first kept_bytes bytes are kept, nothing "
                      "was added";
            info->kept_bytes = o->head.len;
            info->kept_lines = count_nl(o->head.data, o->head.len);
            break;
        }
        o->over = false; /* finished: the head holds the final text */
        o->ring = NULL;
    }
    if (rc != 0)
        return rc;
    info->note = o->note;
    info->spill_path = o->spill_path;
    info->spill_bytes = o->spill_path ? o->spill_bytes : 0;

    if (!dst->data) { /* a move */
        *dst = o->head;
        o->head.data = NULL;
        o->head.len = o->head.cap = 0;
        return 0;
    }
    if (th_buf_append(dst, o->head.data, o->head.len) != 0)
        return TH_ENOMEM;
    return 0;
}

int th_out_finish(th_out *o, th_buf *dst, th_out_info *info)
{
    if (o->over || dst->data || !info)
        return finish_cut(o, dst, info);
    /* Nothing was cut (so nothing spilled: a spill file opens at the
     * limit): the buffer is handed over as it is, and a stream never
     * written hands over nothing. */
    *info = (th_out_info){
        .total_bytes = o->total,
        .kept_bytes = o->head.len,
        .total_lines = o->lines + (o->total > 0 && o->last != '\n'),
        .kept_lines = o->lines,
        .note = o->note,
    };
    *dst = o->head;
    o->head.data = NULL;
    o->head.len = o->head.cap = 0;
    return 0;
}

void th_out_destroy_held(th_out *o)
{
    th_buf_destroy(&o->head);
    o->ring = NULL;
    if (o->spill_fd >= 0)
        spill_drop(o); /* never finished: the copy goes too */
    if (o->spill_path || o->spill_dir) { /* spill configured (rare) */
        free(o->spill_path);
        o->spill_path = NULL;
        free(o->spill_dir);
        o->spill_dir = NULL;
    }
}

/* ---- Meta ---------------------------------------------------------------- */

#define PACK_KEY(pk, s) msgpack_pack_str_with_body((pk), (s), sizeof(s) - 1)

static int pack_one(msgpack_packer *pk, const th_out_info *i)
{
    size_t n = 4 + (i->spill_path ? 2 : 0) + (i->note ? 1 : 0);
    int rc = msgpack_pack_map(pk, n);
    rc |= PACK_KEY(pk, "truncated");
    rc |= i->truncated ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    rc |= PACK_KEY(pk, "total_bytes");
    rc |= msgpack_pack_uint64(pk, i->total_bytes);
    rc |= PACK_KEY(pk, "kept_bytes");
    rc |= msgpack_pack_uint64(pk, i->kept_bytes);
    rc |= PACK_KEY(pk, "total_lines");
    rc |= msgpack_pack_uint64(pk, i->total_lines);
    if (i->spill_path) {
        rc |= PACK_KEY(pk, "spill_path");
        rc |= msgpack_pack_str_with_body(pk, i->spill_path,
                                         strlen(i->spill_path));
        rc |= PACK_KEY(pk, "spill_bytes");
        rc |= msgpack_pack_uint64(pk, i->spill_bytes);
    }
    if (i->note) {
        rc |= PACK_KEY(pk, "note");
        rc |= msgpack_pack_str_with_body(pk, i->note, strlen(i->note));
    }
    return rc;
}

int th_out_pack_info(struct msgpack_packer *pk, const th_out_info *out,
                     const th_out_info *err)
{
    int rc = msgpack_pack_map(pk, (out ? 1 : 0) + (err ? 1 : 0));
    if (out) {
        rc |= PACK_KEY(pk, "stdout");
        rc |= pack_one(pk, out);
    }
    if (err) {
        rc |= PACK_KEY(pk, "stderr");
        rc |= pack_one(pk, err);
    }
    return rc ? TH_ENOMEM : 0;
}

/* ---- Spill directory cleaning -------------------------------------------- */

typedef struct spill_ent {
    char name[256];
    int64_t mtime_ms;
    uint64_t size;
} spill_ent;

static int ent_cmp(const void *a, const void *b)
{
    const spill_ent *x = a, *y = b;
    if (x->mtime_ms != y->mtime_ms)
        return x->mtime_ms < y->mtime_ms ? -1 : 1;
    return strcmp(x->name, y->name);
}

int th_out_spill_gc(const char *dir, uint64_t max_age_ms, uint64_t max_total)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return errno == ENOENT ? 0 : TH_EIO;
    int dfd = dirfd(dp);
    int64_t now_ms = th_wall_ms();
    uid_t me = geteuid();
    spill_ent *ents = NULL;
    size_t n = 0, cap = 0;
    int removed = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(dp)) != NULL) {
        if (strncmp(de->d_name, SPILL_PREFIX, sizeof SPILL_PREFIX - 1) != 0 ||
            strlen(de->d_name) >= sizeof ents->name)
            continue;
        struct stat sb;
        if (fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(sb.st_mode) || sb.st_uid != me)
            continue;
        int64_t mt = (int64_t)sb.st_mtim.tv_sec * 1000 +
                     sb.st_mtim.tv_nsec / 1000000;
        if (max_age_ms && now_ms - mt > (int64_t)max_age_ms) {
            if (unlinkat(dfd, de->d_name, 0) == 0)
                removed++;
            continue;
        }
        if (!max_total)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            spill_ent *p = realloc(ents, nc * sizeof *p);
            if (!p) {
                rc = TH_ENOMEM;
                break;
            }
            ents = p;
            cap = nc;
        }
        snprintf(ents[n].name, sizeof ents[n].name, "%s", de->d_name);
        ents[n].mtime_ms = mt;
        ents[n].size = (uint64_t)sb.st_size;
        n++;
    }
    if (rc == 0 && max_total && n) {
        qsort(ents, n, sizeof *ents, ent_cmp);
        uint64_t sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += ents[i].size;
        for (size_t i = 0; i < n && sum > max_total; i++) {
            if (unlinkat(dfd, ents[i].name, 0) == 0) {
                removed++;
                sum -= ents[i].size;
            }
        }
    }
    free(ents);
    closedir(dp);
    return rc ? rc : removed;
}
