/* iso_worker.c - `toolhost worker`: one worker process of an isolated
 * plugin (docs/isolation.md).  Drops privileges and applies its limits
 * first, then loads the plugin from the fd the host opened and checked,
 * sends its descriptor, runs init() with the config the host sends
 * (answering with the tools init_tools() gave), and serves calls: a lone call on the thread that read it, concurrent ones
 * on a pool of threads (one per concurrent call, idle ones end after
 * 10 s; "threads" below).  Every host callback of the ABI
 * becomes a message on the socket; is_cancelled and time_left_ms are
 * answered locally from the CANCEL messages and the deadline.
 *
 * Started as pid 1 of a PID namespace it stays that namespace's init and
 * forks the worker (become_init); without a PID namespace (--reaper) it
 * is a subreaper init that kills the worker's tree.  The sandbox: the plugin's user, not
 * dumpable, rlimits, no_new_privs and a seccomp allow-list
 * (th_iso_filter_load; docs/security.md).
 *
 * Its stdout is /dev/null, its stderr a pipe into the host's log.  When
 * it dies of a signal while near its memory limit, it leaves a note on
 * fd 5 ("memory") so the host can say which limit was hit.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <pthread.h>
#include <pwd.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sched.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "iso_wire.h"
#include "th/content.h"
#include "th/iso.h"
#include "th/log.h"

/* A call record: the toolhost_call the plugin gets.  A plugin may keep
 * that pointer past the end of its call (a bug of the plugin, which the
 * ABI says the host must refuse: plugin.h, "Misuse of a call"), so an
 * ended record is never reused at once: it waits in the ended queue
 * (g_ended) behind the ISO_TOMBS most recent ended calls, and every
 * callback on it answers TOOLHOST_ESTATE (is_cancelled 1) without
 * touching the call that record serves later.  `mu` orders a late
 * callback against the end of the call: the end is marked (`ended`)
 * under it, and write, set_meta, progress, suspend and complete look at
 * `ended` and do their work under it. */
typedef struct wcall {
    th_call_base base; /* first */
    uint64_t id;
    int64_t deadline_ns; /* 0: none */
    atomic_int cancelled;
    atomic_int suspended;
    atomic_int refs;
    atomic_bool ended;     /* DONE or the answer was sent (set under mu) */
    atomic_bool misuse_said; /* a late callback was logged */
    uint32_t tool;
    int ask; /* 0 call, else ISO_ASK_* */
    uint64_t retry_after_ms; /* ABI 1.5 set_retry_after(), sent with DONE */
    uint64_t max_bytes; /* what its blocks may cost (a call's together,
                           as in process; 0: the sink's own 16 MiB) */
    size_t block_bytes; /* what a call's blocks cost so far (under mu) */
    /* ask_client() (under mu): one in flight, its answer when it came;
     * the answers stay until the call's record is freed (plugin.h: valid
     * until the call ends) */
    bool asking, answered;
    int ask_rc;
    uint32_t ask_seq;    /* which ask_client() of the call waits */
    struct wanswer *answers;
    struct wcall *next;
    struct wcall *qnext; /* waiting for a thread; in the ended queue */
    /* kept when the record is reused (new_call clears what is above) */
    th_buf args;
    th_buf ob;           /* frames not sent yet (under mu) */
    pthread_mutex_t mu;
    pthread_cond_t ask_cv; /* an ask_client() waits on it (with mu) */
} wcall;

/* One answer of ask_client(), NUL-terminated. */
typedef struct wanswer {
    struct wanswer *next;
    uint32_t ask_seq;   /* the ask it answers */
    size_t len;
    char text[];
} wanswer;

static th_plugin *g_p;
static size_t g_n_static; /* g_p's tools in HELLO; init_tools() adds more */
static pthread_mutex_t g_send_mu = PTHREAD_MUTEX_INITIALIZER;
/* g_mu: the calls (g_calls, g_active), the ended queue, g_exit.  Lock
 * order: a record's mu before g_send_mu; g_mu is never held with mu. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static wcall *g_calls;
static int g_active;
static bool g_exit; /* EXIT read: drain, fini(), out */
/* Ended records, oldest first (linked by qnext): one is reused for a new
 * call only when more than ISO_TOMBS (the host's TH_CALL_TOMBS) ended
 * after it, with its buffers when they are small. */
static wcall *g_ended, *g_ended_tail;
static int g_n_ended;
#define ISO_TOMBS 1024
#define ISO_KEEP_BUF 4096
static uint64_t g_mem_limit;
/* The largest frame body the host reads from this worker (its pool's
 * worker_max_frame, --max-frame): nothing longer is sent, so a plugin
 * that asks for more gets an error, never its worker killed. */
static size_t g_max_frame = ISO_FRAME_DEFAULT;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- sending ------------------------------------------------------------------ */

/* 0, or TOOLHOST_EINVAL for a frame longer than g_max_frame (not
 * sent: the host would kill this worker for it). */
static int send_buf(th_buf *b)
{
    pthread_mutex_lock(&g_send_mu);
    int rc = th_iso_send(ISO_FD_SOCK, b->data, b->len, g_max_frame);
    int e = errno;
    pthread_mutex_unlock(&g_send_mu);
    th_buf_destroy(b);
    if (rc != 0 && e == EMSGSIZE)
        return TOOLHOST_EINVAL;
    if (rc != 0)
        _exit(0); /* the host is gone */
    return 0;
}

#define PK_BEGIN(n)                                                           \
    th_buf b = TH_BUF_INIT;                                                   \
    msgpack_packer pk;                                                        \
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);                       \
    int e = msgpack_pack_array(&pk, (n))

#define PK_END()                                                              \
    do {                                                                      \
        if (e) {                                                              \
            th_buf_destroy(&b);                                                  \
            return TOOLHOST_ENOMEM;                                           \
        }                                                                     \
        return send_buf(&b);                                                  \
    } while (0)


static int send_done(uint64_t id, int status)
{
    th_iso_small f = {.n = 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &f, th_iso_small_write);
    int e = msgpack_pack_array(&pk, 3);
    e |= msgpack_pack_int(&pk, ISO_DONE);
    e |= msgpack_pack_uint64(&pk, id);
    e |= msgpack_pack_int(&pk, status);
    pthread_mutex_lock(&g_send_mu);
    int rc = e ? 0 : th_iso_send(ISO_FD_SOCK, f.b, f.n, g_max_frame);
    pthread_mutex_unlock(&g_send_mu);
    if (rc != 0)
        _exit(0); /* the host is gone */
    return 0;
}

/* A call's frames (write, meta, progress, DONE) are packed straight into
 * c->ob, each a 4-byte length and its body, and go out together with the
 * next progress or the DONE, or at 64 KiB: one send() and one wake-up of
 * the host for a short call, and no allocation once c->ob has grown. */
static size_t ob_begin(wcall *c, msgpack_packer *pk)
{
    static const uint8_t room[4];
    size_t at = c->ob.len;
    if (th_buf_append(&c->ob, room, 4) != 0)
        return SIZE_MAX;
    msgpack_packer_init(pk, &c->ob, th_buf_msgpack_write);
    return at;
}

static void ob_flush(wcall *c)
{
    pthread_mutex_lock(&g_send_mu);
    const uint8_t *p = c->ob.data;
    size_t n = c->ob.len;
    while (n) {
        ssize_t w = send(ISO_FD_SOCK, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(0); /* the host is gone */
        p += w;
        n -= (size_t)w;
    }
    pthread_mutex_unlock(&g_send_mu);
    th_buf_reset(&c->ob);
}

/* Closes the frame ob_begin() opened at `at` (e: the packer failed). */
static int ob_end(wcall *c, size_t at, int e, bool flush)
{
    if (at == SIZE_MAX)
        return TOOLHOST_ENOMEM;
    size_t n = c->ob.len - at - 4;
    if (e || n > g_max_frame) {
        c->ob.len = at; /* the frame is dropped whole */
        c->ob.data[at] = '\0';
        return e ? TOOLHOST_ENOMEM : TOOLHOST_EINVAL;
    }
    uint8_t *h = c->ob.data + at;
    h[0] = (uint8_t)(n >> 24);
    h[1] = (uint8_t)(n >> 16);
    h[2] = (uint8_t)(n >> 8);
    h[3] = (uint8_t)n;
    if (flush || c->ob.len >= 65536)
        ob_flush(c);
    return 0;
}

/* The status a call of the worker's plugin ends with, as the host reads
 * it: a backend's status (ABI 1.5) passes from a plugin of 1.5 or later,
 * every other failure is TOOLHOST_FAILED. */
static int done_status(int st)
{
    if (st == TOOLHOST_OK)
        return TOOLHOST_OK;
    if ((st == TOOLHOST_UNAVAILABLE || st == TOOLHOST_TIMEOUT ||
         st == TOOLHOST_RATE_LIMITED) && g_p->abi_minor >= 5)
        return st;
    return TOOLHOST_FAILED;
}

/* [DONE, id, status] or, with a retry-after hint (ABI 1.5),
 * [DONE, id, status, retry_after_ms]. */
static int send_done_c(wcall *c, int status)
{
    msgpack_packer pk;
    size_t at = ob_begin(c, &pk);
    int e = 0;
    if (at != SIZE_MAX) {
        e |= msgpack_pack_array(&pk, c->retry_after_ms ? 4 : 3);
        e |= msgpack_pack_int(&pk, ISO_DONE);
        e |= msgpack_pack_uint64(&pk, c->id);
        e |= msgpack_pack_int(&pk, status);
        if (c->retry_after_ms)
            e |= msgpack_pack_uint64(&pk, c->retry_after_ms);
    }
    int rc = ob_end(c, at, e, true);
    if (rc != 0) { /* no room for DONE: what was queued, then DONE alone */
        if (c->ob.len)
            ob_flush(c);
        send_done(c->id, status);
    }
    return rc;
}


static int send_answer(uint64_t id, int rc, const char *msg)
{
    PK_BEGIN(4);
    e |= msgpack_pack_int(&pk, ISO_ANSWER);
    e |= msgpack_pack_uint64(&pk, id);
    e |= msgpack_pack_int(&pk, rc);
    e |= th_pack_cstr(&pk, msg);
    PK_END();
}

static int send_text(int type, int level, const char *msg)
{
    PK_BEGIN(3);
    e |= msgpack_pack_int(&pk, type);
    if (type == ISO_READY)
        e |= msgpack_pack_int(&pk, level);
    else if (type == ISO_LOG)
        e |= msgpack_pack_int(&pk, level);
    else
        e |= msgpack_pack_nil(&pk);
    e |= th_pack_cstr(&pk, msg);
    PK_END();
}

/* [READY, 1, nil, tools_bin]: init() succeeded; tools_bin is the array of
 * the tools init_tools() added after the g_n_static of HELLO, packed as
 * HELLO packs tools, so the host lists what an in-process load lists. */
static int send_ready(void)
{
    th_buf tb = TH_BUF_INIT;
    msgpack_packer tp;
    msgpack_packer_init(&tp, &tb, th_buf_msgpack_write);
    if (th_iso_pack_tools(&tp, g_p, g_n_static)) {
        th_buf_destroy(&tb);
        return send_text(ISO_READY, 0, "out of memory describing the tools "
                                       "from init_tools()");
    }
    PK_BEGIN(4);
    e |= msgpack_pack_int(&pk, ISO_READY);
    e |= msgpack_pack_int(&pk, 1);
    e |= msgpack_pack_nil(&pk);
    e |= msgpack_pack_bin_with_body(&pk, tb.data, tb.len);
    size_t tl = tb.len;
    th_buf_destroy(&tb);
    if (e) {
        th_buf_destroy(&b);
        return TOOLHOST_ENOMEM;
    }
    if (send_buf(&b) != 0) {
        char m[300];
        snprintf(m, sizeof m, "the tools init_tools() gave take %zu bytes, "
                 "more than the host reads in one frame (worker_max_frame "
                 "%zu bytes)", tl, g_max_frame);
        return send_text(ISO_READY, 0, m);
    }
    return 0;
}

/* ---- the call callbacks --------------------------------------------------------- */

static bool cancelled(const wcall *c)
{
    return atomic_load(&c->cancelled) ||
           (c->deadline_ns && now_ns() >= c->deadline_ns);
}

/* A callback on an ended call: logged once per call, refused. */
static int late(wcall *c, const char *what)
{
    if (!atomic_exchange(&c->misuse_said, true)) {
        char m[160];
        snprintf(m, sizeof m,
                 "call %llu: %s() after the call ended (refused with "
                 "TOOLHOST_ESTATE)",
                 (unsigned long long)c->id, what);
        send_text(ISO_LOG, TOOLHOST_LOG_ERROR, m);
    }
    return TOOLHOST_ESTATE;
}

/* Ends the record for the plugin (mu held): later callbacks are late. */
static void mark_ended(wcall *c)
{
    atomic_store(&c->ended, true);
}

/* One write() of the plugin as WRITE frames of at most ISO_WRITE_CHUNK
 * of its bytes each: the host's frame cap (worker_max_frame) bounds what
 * one frame may hold, never what a call may write (the host's output
 * limits cut that, as in process). */
static int write_locked(wcall *c, int stream, const void *data, size_t len)
{
    if (cancelled(c))
        return TOOLHOST_ECANCELLED;
    const uint8_t *d = data;
    while (len) {
        size_t k = len < ISO_WRITE_CHUNK ? len : ISO_WRITE_CHUNK;
        msgpack_packer pk;
        size_t at = ob_begin(c, &pk);
        int e = 0;
        if (at != SIZE_MAX) {
            e |= msgpack_pack_array(&pk, 4);
            e |= msgpack_pack_int(&pk, ISO_WRITE);
            e |= msgpack_pack_uint64(&pk, c->id);
            e |= msgpack_pack_int(&pk, stream);
            e |= msgpack_pack_bin_with_body(&pk, d, k);
        }
        int rc = ob_end(c, at, e, false);
        if (rc != 0)
            return rc;
        d += k;
        len -= k;
    }
    return 0;
}

static int w_write(toolhost_call *call, int stream, const void *data,
                   size_t len)
{
    wcall *c = (wcall *)call;
    if ((stream != TOOLHOST_STDOUT && stream != TOOLHOST_STDERR) ||
        (!data && len))
        return TOOLHOST_EINVAL;
    pthread_mutex_lock(&c->mu);
    int rc = atomic_load(&c->ended) ? TOOLHOST_ESTATE
                                    : write_locked(c, stream, data, len);
    pthread_mutex_unlock(&c->mu);
    return rc == TOOLHOST_ESTATE ? late(c, "write") : rc;
}

/* [BLOCK, id, kind, role, mime_type, data, uri, name]: b as this
 * worker's own sink kept it (checked, its strings copied). */
static int block_locked(wcall *c, const th_block *b)
{
    if (cancelled(c))
        return TOOLHOST_ECANCELLED;
    msgpack_packer pk;
    size_t at = ob_begin(c, &pk);
    int e = 0;
    if (at != SIZE_MAX) {
        e |= msgpack_pack_array(&pk, 8);
        e |= msgpack_pack_int(&pk, ISO_BLOCK);
        e |= msgpack_pack_uint64(&pk, c->id);
        e |= msgpack_pack_uint32(&pk, b->kind);
        e |= th_pack_cstr(&pk, b->role);
        e |= th_pack_cstr(&pk, b->mime_type);
        e |= msgpack_pack_bin_with_body(&pk, b->data, b->len);
        e |= th_pack_cstr(&pk, b->uri);
        e |= th_pack_cstr(&pk, b->name);
    }
    return ob_end(c, at, e, false);
}

/* write_block() (ABI 1.4): the block is checked here as in process (the
 * same sink code: kind, MIME type, URI, UTF-8, the call's budget), so a
 * bad one is refused to the plugin at once; the host checks it again. */
static int w_write_block(toolhost_call *call, const toolhost_block *block)
{
    wcall *c = (wcall *)call;
    th_content one;
    /* The blocks together hold what the call's stdout may (the host sent
     * it with the call; 0: the sink's own 16 MiB), counted as in process
     * from what the earlier ones cost; and one block no more than the
     * host reads in a frame. */
    size_t room = g_max_frame - ISO_FRAME_SLACK;
    size_t max = c->max_bytes && c->max_bytes < ((uint64_t)16 << 20)
                     ? (size_t)c->max_bytes
                     : (size_t)16 << 20;
    pthread_mutex_lock(&c->mu);
    size_t before = c->block_bytes < max ? c->block_bytes : max;
    th_content_init(&one, TH_CONTENT_RESULT,
                    max - before > room ? before + room : max);
    one.bytes = before;
    one.plugin = g_p->name;
    /* a cancelled call first, as in process (cb_write_block): a plugin
     * past its budget still hears that it should stop */
    int rc = atomic_load(&c->ended) ? TOOLHOST_ESTATE
             : cancelled(c)         ? TOOLHOST_ECANCELLED
                                    : th_content_add(&one, block);
    if (rc == 0 && (rc = block_locked(c, &one.v[0])) == 0)
        c->block_bytes = one.bytes;
    pthread_mutex_unlock(&c->mu);
    th_content_free(&one);
    return rc == TOOLHOST_ESTATE ? late(c, "write_block") : rc;
}

static int w_set_meta(toolhost_call *call, const uint8_t *map, size_t len)
{
    wcall *c = (wcall *)call;
    if (!map || !len)
        return TOOLHOST_EINVAL;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    bool ok = msgpack_unpack_next(&u, (const char *)map, len, &off) ==
                  MSGPACK_UNPACK_SUCCESS &&
              u.data.type == MSGPACK_OBJECT_MAP && off == len;
    msgpack_unpacked_destroy(&u);
    if (!ok)
        return TOOLHOST_EINVAL;
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->ended)) {
        pthread_mutex_unlock(&c->mu);
        return late(c, "set_meta");
    }
    msgpack_packer pk;
    size_t at = ob_begin(c, &pk);
    int e = 0;
    if (at != SIZE_MAX) {
        e |= msgpack_pack_array(&pk, 3);
        e |= msgpack_pack_int(&pk, ISO_META);
        e |= msgpack_pack_uint64(&pk, c->id);
        e |= msgpack_pack_bin_with_body(&pk, map, len);
    }
    int rc = ob_end(c, at, e, false);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int progress_locked(wcall *c, double fraction, const char *message,
                           const uint8_t *data, size_t data_len)
{
    if (cancelled(c))
        return TOOLHOST_ECANCELLED;
    msgpack_packer pk;
    size_t at = ob_begin(c, &pk);
    int e = 0;
    if (at != SIZE_MAX) {
        e |= msgpack_pack_array(&pk, 5);
        e |= msgpack_pack_int(&pk, ISO_PROGRESS);
        e |= msgpack_pack_uint64(&pk, c->id);
        e |= msgpack_pack_double(&pk, fraction);
        e |= th_pack_cstr(&pk, message);
        if (data && data_len)
            e |= msgpack_pack_bin_with_body(&pk, data, data_len);
        else
            e |= msgpack_pack_nil(&pk);
    }
    return ob_end(c, at, e, true);
}

static int w_progress(toolhost_call *call, double fraction,
                      const char *message, const uint8_t *data,
                      size_t data_len)
{
    wcall *c = (wcall *)call;
    pthread_mutex_lock(&c->mu);
    int rc = atomic_load(&c->ended)
                 ? TOOLHOST_ESTATE
                 : progress_locked(c, fraction, message, data, data_len);
    pthread_mutex_unlock(&c->mu);
    return rc == TOOLHOST_ESTATE ? late(c, "progress") : rc;
}

static int w_is_cancelled(const toolhost_call *call)
{
    const wcall *c = (const wcall *)call;
    return atomic_load(&c->ended) || cancelled(c);
}

static int64_t w_time_left_ms(const toolhost_call *call)
{
    const wcall *c = (const wcall *)call;
    if (atomic_load(&c->ended))
        return 0;
    if (!c->deadline_ns)
        return -1;
    int64_t left = (c->deadline_ns - now_ns()) / 1000000;
    return left < 0 ? 0 : left;
}

static void call_unref(wcall *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    pthread_mutex_lock(&g_mu);
    for (wcall **pp = &g_calls; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    g_active--;
    if (g_exit)
        pthread_cond_broadcast(&g_cv); /* the drain waits for g_active */
    /* (the plugin may still hold it: no callback reaches it again
     * before ISO_TOMBS more calls ended) */
    for (wanswer *a = c->answers, *n; a; a = n) {
        n = a->next;
        free(a);
    }
    c->answers = NULL;
    if (c->ob.cap > ISO_KEEP_BUF)
        th_buf_destroy(&c->ob);
    if (c->args.cap > ISO_KEEP_BUF)
        th_buf_destroy(&c->args);
    c->qnext = NULL;
    if (g_ended_tail)
        g_ended_tail->qnext = c;
    else
        g_ended = c;
    g_ended_tail = c;
    g_n_ended++;
    pthread_mutex_unlock(&g_mu);
}

static int w_suspend(toolhost_call *call)
{
    wcall *c = (wcall *)call;
    int expect = 0;
    pthread_mutex_lock(&c->mu);
    bool ended = atomic_load(&c->ended);
    bool ok = !ended &&
              atomic_compare_exchange_strong(&c->suspended, &expect, 1);
    pthread_mutex_unlock(&c->mu);
    if (ended)
        return late(c, "suspend");
    return ok ? 0 : TOOLHOST_ESTATE;
}

static int w_complete(toolhost_call *call, int status)
{
    wcall *c = (wcall *)call;
    int expect = 1;
    pthread_mutex_lock(&c->mu);
    bool ended = atomic_load(&c->ended);
    if (ended ||
        !atomic_compare_exchange_strong(&c->suspended, &expect, 2)) {
        pthread_mutex_unlock(&c->mu);
        return ended ? late(c, "complete") : TOOLHOST_ESTATE;
    }
    send_done_c(c, done_status(status));
    mark_ended(c);
    pthread_mutex_unlock(&c->mu);
    call_unref(c);
    return 0;
}

static int w_set_retry_after(toolhost_call *call, uint64_t ms)
{
    wcall *c = (wcall *)call;
    pthread_mutex_lock(&c->mu);
    bool ended = atomic_load(&c->ended);
    if (!ended)
        c->retry_after_ms = ms < TOOLHOST_MAX_RETRY_AFTER_MS
                                ? ms
                                : TOOLHOST_MAX_RETRY_AFTER_MS;
    pthread_mutex_unlock(&c->mu);
    return ended ? late(c, "set_retry_after") : 0;
}

/* ask_client() (ABI 1.4): the request goes to the host as an
 * ISO_CLIENT_ASK frame, and the host asks the call's client on the
 * call's own thread there, as in process; this thread waits for the
 * ISO_CLIENT_ANSWER (take_frame), at most until the call is cancelled or
 * past its deadline.  The reader's role is this thread's only while a
 * call runs inline, and the sentinel takes it over within ISO_INLINE_MS,
 * so the answer is read while this waits. */
static int w_ask_client(toolhost_call *call, int kind, const char *request,
                        size_t len, const char **answer, size_t *answer_len)
{
    wcall *c = (wcall *)call;
    if (!answer || !answer_len || (len && !request))
        return TOOLHOST_EINVAL;
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->ended)) {
        pthread_mutex_unlock(&c->mu);
        return late(c, "ask_client");
    }
    if (c->ask || c->asking) { /* one at a time, from the call's thread */
        pthread_mutex_unlock(&c->mu);
        return TOOLHOST_ESTATE;
    }
    if (cancelled(c)) {
        pthread_mutex_unlock(&c->mu);
        return TOOLHOST_ECANCELLED;
    }
    msgpack_packer pk;
    size_t at = ob_begin(c, &pk);
    int e = 0;
    if (at != SIZE_MAX) {
        e |= msgpack_pack_array(&pk, 4);
        e |= msgpack_pack_int(&pk, ISO_CLIENT_ASK);
        e |= msgpack_pack_uint64(&pk, c->id);
        e |= msgpack_pack_int(&pk, kind);
        e |= msgpack_pack_bin_with_body(&pk, request ? request : "", len);
    }
    int rc = ob_end(c, at, e, true);
    if (rc != 0) {
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    c->asking = true;
    c->answered = false;
    c->ask_seq++;
    while (!c->answered && !cancelled(c)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 20 * 1000000; /* a CANCEL frame only sets a flag */
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&c->ask_cv, &c->mu, &ts);
    }
    c->asking = false;
    if (!c->answered) {
        pthread_mutex_unlock(&c->mu);
        return TOOLHOST_ECANCELLED;
    }
    rc = c->ask_rc;
    if (c->answers && c->answers->ask_seq == c->ask_seq) {
        *answer = c->answers->text;
        *answer_len = c->answers->len;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ISO_CLIENT_ANSWER from the host: [type, id, rc, answer bin or nil],
 * to the call of that id when its ask_client() still waits. */
static void client_answer(const msgpack_object_array *a)
{
    uint64_t id = (uint64_t)th_iso_int(a, 1);
    wcall *c = NULL;
    pthread_mutex_lock(&g_mu);
    for (wcall *q = g_calls; q && !c; q = q->next) {
        if (q->id != id || q->ask)
            continue;
        /* a reference, unless the call is on its way out */
        int r = atomic_load(&q->refs);
        while (r > 0 && !atomic_compare_exchange_weak(&q->refs, &r, r + 1))
            ;
        if (r > 0)
            c = q;
    }
    pthread_mutex_unlock(&g_mu);
    if (!c)
        return;
    int rc = (int)th_iso_int(a, 2);
    size_t n = 0;
    const uint8_t *b = th_iso_bytes(a, 3, &n);
    bool has = a->size > 3 && a->ptr[3].type == MSGPACK_OBJECT_BIN;
    /* an answer, or a client's error (TOOLHOST_FAILED: its JSON) */
    wanswer *w = has ? malloc(sizeof *w + n + 1) : NULL;
    if (w) {
        if (n)
            memcpy(w->text, b, n);
        w->text[n] = '\0';
        w->len = n;
    }
    pthread_mutex_lock(&c->mu);
    if (c->asking && !c->answered) {
        c->answered = true;
        c->ask_rc = has && !w ? TOOLHOST_ENOMEM : rc;
        if (w) {
            w->ask_seq = c->ask_seq;
            w->next = c->answers;
            c->answers = w;
            w = NULL;
        }
        pthread_cond_broadcast(&c->ask_cv);
    }
    pthread_mutex_unlock(&c->mu);
    free(w);
    call_unref(c);
}

static const th_call_vtbl w_vtbl = {
    .write = w_write, .set_meta = w_set_meta, .progress = w_progress,
    .is_cancelled = w_is_cancelled, .time_left_ms = w_time_left_ms,
    .suspend = w_suspend, .complete = w_complete,
    .set_retry_after = w_set_retry_after, .write_block = w_write_block,
    .ask_client = w_ask_client};

static void w_log(const toolhost_host_api *host, int level,
                  const char *message)
{
    (void)host;
    if (message)
        send_text(ISO_LOG, level, message);
}

/* ---- running calls ---------------------------------------------------------------- */

static const th_tool *tool_at(uint32_t i)
{
    return i < g_p->n_tools ? &g_p->tools[i] : NULL;
}

/* [ANSWER, id, rc, message, blocks_bin, dropped]: what a content ask
 * gave.  The blocks are those the plugin's content_add() took here (the
 * same sink and checks as in-process); the host checks them again. */
static int send_content(uint64_t id, int rc, const char *msg,
                        const th_content *out)
{
    th_buf bb = TH_BUF_INIT;
    msgpack_packer bp;
    msgpack_packer_init(&bp, &bb, th_buf_msgpack_write);
    int be = msgpack_pack_array(&bp, (uint32_t)out->n);
    for (size_t i = 0; i < out->n && !be; i++) {
        const th_block *b = &out->v[i];
        be |= msgpack_pack_array(&bp, 6);
        be |= msgpack_pack_uint32(&bp, b->kind);
        be |= th_pack_cstr(&bp, b->role);
        be |= th_pack_cstr(&bp, b->mime_type);
        be |= msgpack_pack_bin_with_body(&bp, b->data, b->len);
        be |= th_pack_cstr(&bp, b->uri);
        be |= th_pack_cstr(&bp, b->name);
    }
    if (be) {
        th_buf_destroy(&bb);
        return send_answer(id, TOOLHOST_FAILED, "worker out of memory");
    }
    PK_BEGIN(6);
    e |= msgpack_pack_int(&pk, ISO_ANSWER);
    e |= msgpack_pack_uint64(&pk, id);
    e |= msgpack_pack_int(&pk, rc);
    e |= th_pack_cstr(&pk, msg);
    e |= msgpack_pack_bin_with_body(&pk, bb.data, bb.len);
    e |= msgpack_pack_uint64(&pk, out->dropped);
    size_t bl = bb.len;
    th_buf_destroy(&bb);
    if (e) {
        th_buf_destroy(&b);
        return send_answer(id, TOOLHOST_FAILED, "worker out of memory");
    }
    if (send_buf(&b) != 0) { /* (the host's budget keeps it below) */
        char m[300];
        snprintf(m, sizeof m, "the answer's blocks take %zu bytes, more "
                 "than the host reads in one frame (worker_max_frame %zu "
                 "bytes)", bl, g_max_frame);
        return send_answer(id, TOOLHOST_EINVAL, m);
    }
    return 0;
}

/* A read, a prompt get or a completion (ABI 1.4) of the plugin's, as
 * the host's content.c runs it in process. */
static void run_content(wcall *c)
{
    static const th_content_mode modes[] = {
        [ISO_ASK_READ] = TH_CONTENT_READ, [ISO_ASK_GET] = TH_CONTENT_PROMPT,
        [ISO_ASK_COMPLETE_RES] = TH_CONTENT_COMPLETE,
        [ISO_ASK_COMPLETE_PROMPT] = TH_CONTENT_COMPLETE};
    th_content out;
    th_content_init(&out, modes[c->ask], (size_t)c->max_bytes);
    out.plugin = g_p->name;
    out.pub.host = &g_p->api;
    char reason[512] = "";
    int rc = TOOLHOST_FAILED;
    bool is_res = c->ask == ISO_ASK_READ || c->ask == ISO_ASK_COMPLETE_RES;
    const th_resource *r =
        is_res && c->tool < g_p->n_resources ? &g_p->resources[c->tool] : NULL;
    const th_prompt *q =
        !is_res && c->tool < g_p->n_prompts ? &g_p->prompts[c->tool] : NULL;
    /* arg_bin: the URI (a read), the args map (a get), [name, value] */
    char *a1 = NULL, *a2 = NULL;
    if (c->ask == ISO_ASK_COMPLETE_RES || c->ask == ISO_ASK_COMPLETE_PROMPT) {
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        if (msgpack_unpack_next(&u, (const char *)c->args.data, c->args.len,
                                &off) == MSGPACK_UNPACK_SUCCESS &&
            u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 2) {
            a1 = th_iso_strdup(&u.data.via.array, 0);
            a2 = th_iso_strdup(&u.data.via.array, 1);
        }
        msgpack_unpacked_destroy(&u);
    } else if (c->ask == ISO_ASK_READ && (a1 = malloc(c->args.len + 1))) {
        memcpy(a1, c->args.data, c->args.len);
        a1[c->args.len] = '\0';
    }
    th_content_enter(&out);
    if (c->ask == ISO_ASK_READ && r && a1)
        rc = r->desc->read(g_p->state, r->desc, a1, &out.pub, reason,
                           sizeof reason);
    else if (c->ask == ISO_ASK_GET && q)
        rc = q->desc->get(g_p->state, q->desc, c->args.data, c->args.len,
                          &out.pub, reason, sizeof reason);
    else if (c->ask == ISO_ASK_COMPLETE_RES && r && r->desc->complete && a1 &&
             a2)
        rc = r->desc->complete(g_p->state, r->desc, a1, a2, &out.pub);
    else if (c->ask == ISO_ASK_COMPLETE_PROMPT && q && q->desc->complete &&
             a1 && a2)
        rc = q->desc->complete(g_p->state, q->desc, a1, a2, &out.pub);
    else
        snprintf(reason, sizeof reason, "no such resource or prompt in the "
                 "worker");
    th_content_leave();
    reason[sizeof reason - 1] = '\0';
    if (out.bad) { /* refused here: the host says why, as in process */
        rc = TOOLHOST_EINVAL;
        snprintf(reason, sizeof reason, "%s", out.why);
        th_content_free(&out);
    }
    send_content(c->id, rc, reason, &out);
    th_content_free(&out);
    free(a1);
    free(a2);
}

static void *run_call(void *arg)
{
    wcall *c = arg;
    const th_tool *t = tool_at(c->tool);
    if (c->ask >= ISO_ASK_READ) {
        run_content(c);
        atomic_store(&c->ended, true); /* (never handed to the plugin) */
        call_unref(c);
        return NULL;
    }
    if (c->ask) {
        char msg[1024] = "";
        int rc = 0;
        if (c->ask == ISO_ASK_VALIDATE && t && t->desc->validate_args)
            rc = t->desc->validate_args(g_p->state, t->desc, c->args.data,
                                        c->args.len, msg, sizeof msg);
        else if (c->ask == ISO_ASK_PERMISSION && t &&
                 t->desc->needs_permission)
            rc = t->desc->needs_permission(g_p->state, t->desc,
                                           c->args.data, c->args.len, msg,
                                           sizeof msg);
        msg[sizeof msg - 1] = '\0';
        send_answer(c->id, rc, msg);
        atomic_store(&c->ended, true); /* (never handed to the plugin) */
        call_unref(c);
        return NULL;
    }
    int st = TOOLHOST_FAILED;
    /* ABI 1.2: the arguments decoded, as the host's call path does */
    toolhost_arg view_args[TH_ARGS_VIEW_MAX];
    toolhost_args_view view;
    if (t && th_args_view_build(c->args.data, c->args.len, view_args,
                                TH_ARGS_VIEW_MAX, &view) == 0)
        c->base.pub.args_view = &view;
    if (t)
        st = t->desc->execute(g_p->state, t->desc, &c->base.pub,
                              c->args.data, c->args.len);
    c->base.pub.args_view = NULL; /* on this stack frame */
    /* After a successful suspend() the call belongs to complete(). */
    pthread_mutex_lock(&c->mu);
    int s = atomic_load(&c->suspended);
    if (s == 0) {
        if (st == TOOLHOST_PENDING) {
            static const char m[] = "the tool returned TOOLHOST_PENDING "
                                    "without suspend()\n";
            write_locked(c, TOOLHOST_STDERR, m, sizeof m - 1);
            st = TOOLHOST_FAILED;
        }
        send_done_c(c, done_status(st));
        mark_ended(c);
    }
    pthread_mutex_unlock(&c->mu);
    if (s == 0)
        call_unref(c); /* complete()'s, never owed */
    call_unref(c);
    return NULL;
}

/* ---- threads: one reader at a time ------------------------------------------------ */

/* Every thread of the worker runs thread_main() and takes, in this order:
 * a queued call; the reader's role when nobody holds it; the sentinel's
 * role when there is none; else it idles (10 s, then it ends).
 *
 * The reader reads the socket and takes its frames.  A CALL that is the
 * last whole frame it has, with no other call running in the worker,
 * runs on the reader itself: no hand-off, so a sequential call costs one
 * wake-up each way, like a bare round trip over the socketpair.  Other
 * calls (more frames read, calls in flight) go to idle threads, and the
 * reader goes on reading for them.  While the reader runs a call
 * nobody reads the socket; the sentinel sleeps until that call has run
 * ISO_INLINE_MS and then becomes the reader, so a long call delays a
 * CANCEL or a concurrent call by at most that.  The thread whose call
 * was overtaken so goes back to the pool when the call ends.
 *
 * g_tp_mu guards everything below and is never held while running a
 * call, reading or sending.  Lock order: g_tp_mu before g_mu. */
#define ISO_INLINE_MS 1
#define ISO_IDLE_S 10

static pthread_mutex_t g_tp_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_tp_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t g_sent_cv; /* CLOCK_MONOTONIC, set up in main */
static wcall *g_tp_head, *g_tp_tail; /* linked by ->qnext */
static int g_tp_idle, g_tp_queued;
static bool g_role_free;     /* no thread holds the reader's role */
static int g_exec;           /* the reader runs a call itself (1) or not */
static int64_t g_exec_start; /* ... since (ns) */
static uint64_t g_exec_seq;  /* calls the reader ran itself */
static uint64_t g_taken_seq; /* the call whose reader the sentinel replaced */
static bool g_sentinel, g_sent_coming, g_sent_asleep;
static bool g_tp_exit;
static th_iso_rx g_rx;  /* the reader's */
static bool g_ready;    /* init() succeeded (the reader's) */

static void *thread_main(void *arg);
static void cancel_call(uint64_t id);

static int spawn_thread(void)
{
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    int rc = pthread_create(&th, &at, thread_main, NULL);
    pthread_attr_destroy(&at);
    return rc;
}

/* g_tp_mu held.  0, or pthread_create's error when no thread waits and
 * none can be started. */
static int hand_off_locked(wcall *c)
{
    int rc;
    if (g_tp_idle <= g_tp_queued && (rc = spawn_thread()) != 0)
        return rc; /* every idle thread is spoken for, and no new one */
    c->qnext = NULL;
    if (g_tp_tail)
        g_tp_tail->qnext = c;
    else
        g_tp_head = c;
    g_tp_tail = c;
    g_tp_queued++;
    pthread_cond_signal(&g_tp_cv);
    return 0;
}

/* The worker cannot run the call: it says why and ends it. */
static void refuse(uint64_t id, int ask, const char *why)
{
    if (ask >= ISO_ASK_READ) {
        send_answer(id, TOOLHOST_FAILED, why);
        return;
    }
    if (ask) {
        send_answer(id, 1, why);
        return;
    }
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    int e = msgpack_pack_array(&pk, 4);
    e |= msgpack_pack_int(&pk, ISO_WRITE);
    e |= msgpack_pack_uint64(&pk, id);
    e |= msgpack_pack_int(&pk, TOOLHOST_STDERR);
    e |= msgpack_pack_bin_with_body(&pk, why, strlen(why));
    if (e)
        th_buf_destroy(&b);
    else
        send_buf(&b);
    send_done(id, TOOLHOST_FAILED);
}

/* A call record from a CALL or ASK frame, registered (g_calls), or NULL
 * (answered already: out of memory). */
static wcall *new_call(const msgpack_object_array *a, int ask, int *active)
{
    pthread_mutex_lock(&g_mu);
    wcall *c = NULL;
    if (g_n_ended > ISO_TOMBS) { /* the oldest ended record */
        c = g_ended;
        g_ended = c->qnext;
        if (!g_ended)
            g_ended_tail = NULL;
        g_n_ended--;
    }
    pthread_mutex_unlock(&g_mu);
    if (!c) {
        if (!(c = calloc(1, sizeof *c)))
            goto oom;
        pthread_mutex_init(&c->mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&c->ask_cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    memset(c, 0, offsetof(wcall, args));
    th_buf_reset(&c->args);
    th_buf_reset(&c->ob);
    c->base.pub.struct_size = sizeof(toolhost_call);
    c->base.pub.host = &g_p->api;
    c->base.vt = &w_vtbl;
    c->id = (uint64_t)th_iso_int(a, 1);
    c->base.pub.call_id = c->id;
    c->ask = ask;
    size_t n = 0;
    const uint8_t *args_p;
    if (ask) {
        c->tool = (uint32_t)th_iso_int(a, 3);
        args_p = th_iso_bytes(a, 4, &n);
        if (ask >= ISO_ASK_READ) {
            int64_t m = th_iso_int(a, 5);
            c->max_bytes = m > 0 ? (uint64_t)m : 0;
        }
    } else {
        c->tool = (uint32_t)th_iso_int(a, 2);
        args_p = th_iso_bytes(a, 3, &n);
        int64_t left = th_iso_int(a, 4);
        if (left >= 0)
            c->deadline_ns = now_ns() + left * 1000000;
        int64_t m = a->size > 5 ? th_iso_int(a, 5) : 0;
        c->max_bytes = m > 0 ? (uint64_t)m : 0;
    }
    /* A copy: the frame is in the reader's buffer, which the next reader
     * refills while this call may still run.  Never NULL for a plugin. */
    if (th_buf_reserve(&c->args, 1) != 0 ||
        (n && th_buf_append(&c->args, args_p, n) != 0)) {
        th_buf_destroy(&c->args);
        th_buf_destroy(&c->ob);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->ask_cv);
        free(c);
        goto oom;
    }
    /* The thread's reference, and for a call the one complete() drops
     * (run_call drops it when the call never suspended). */
    atomic_init(&c->refs, ask ? 1 : 2);
    pthread_mutex_lock(&g_mu);
    c->next = g_calls;
    g_calls = c;
    *active = ++g_active;
    pthread_mutex_unlock(&g_mu);
    return c;
oom:
    refuse((uint64_t)th_iso_int(a, 1), ask, "worker out of memory");
    return NULL;
}

/* A registered call that will never run. */
static void drop_call(wcall *c)
{
    atomic_store(&c->refs, 1);
    call_unref(c);
}

/* The reader runs `c` itself.  Returns true while it still holds the
 * reader's role afterwards. */
static bool run_inline(wcall *c)
{
    pthread_mutex_lock(&g_tp_mu);
    uint64_t seq = ++g_exec_seq;
    g_exec = 1;
    g_exec_start = now_ns();
    if (g_sent_asleep) {
        pthread_cond_signal(&g_sent_cv); /* arm it */
    } else if (!g_sentinel && !g_sent_coming) {
        g_sent_coming = true;
        if (g_tp_idle > g_tp_queued)
            pthread_cond_signal(&g_tp_cv);
        else if (spawn_thread() != 0)
            g_sent_coming = false; /* none: the call runs unwatched */
    }
    pthread_mutex_unlock(&g_tp_mu);
    run_call(c);
    pthread_mutex_lock(&g_tp_mu);
    bool still = g_taken_seq != seq;
    if (still)
        g_exec = 0;
    pthread_mutex_unlock(&g_tp_mu);
    return still;
}

/* One frame from the host; `last`: no whole frame follows it yet.
 * Returns false when this thread no longer holds the reader's role. */
static bool take_frame(const uint8_t *f, size_t len, bool last)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    if (msgpack_unpack_next(&u, (const char *)f, len, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        u.data.type != MSGPACK_OBJECT_ARRAY || u.data.via.array.size < 1)
        _exit(3); /* not from our host */
    const msgpack_object_array *a = &u.data.via.array;
    int type = (int)th_iso_int(a, 0);
    wcall *c = NULL;
    int active = 0;
    if (type == ISO_INIT && !g_ready) {
        size_t n;
        const uint8_t *cfg = th_iso_bytes(a, 1, &n);
        th_error err;
        th_error_clear(&err);
        int rc = th_plugin_init(g_p, cfg, n, &err);
        if (rc == 0)
            send_ready(); /* with the tools init_tools() gave */
        else
            send_text(ISO_READY, 0, err.msg);
        g_ready = rc == 0;
    } else if ((type == ISO_CALL || type == ISO_ASK) && g_ready) {
        int ask = type == ISO_ASK ? (int)th_iso_int(a, 2) : 0;
        if (ask < 0 || ask > ISO_ASK_COMPLETE_PROMPT)
            _exit(3); /* not from our host */
        c = new_call(a, ask, &active);
    } else if (type == ISO_CANCEL) {
        cancel_call((uint64_t)th_iso_int(a, 1));
    } else if (type == ISO_CLIENT_ANSWER) {
        client_answer(a);
    } else if (type == ISO_EXIT) {
        pthread_mutex_lock(&g_tp_mu);
        g_tp_exit = true;
        pthread_cond_broadcast(&g_tp_cv);
        pthread_cond_broadcast(&g_sent_cv);
        pthread_mutex_unlock(&g_tp_mu);
        pthread_mutex_lock(&g_mu);
        g_exit = true;
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_mu);
        msgpack_unpacked_destroy(&u);
        return false; /* nobody reads any more */
    }
    msgpack_unpacked_destroy(&u);
    if (!c)
        return true;
    /* Alone: run it here.  Among others (calls in flight, more frames
     * read): to a thread, so this one goes on reading for them. */
    if (last && active == 1)
        return run_inline(c);
    pthread_mutex_lock(&g_tp_mu);
    int rc = hand_off_locked(c);
    pthread_mutex_unlock(&g_tp_mu);
    if (rc != 0) {
        uint64_t id = c->id;
        int ask = c->ask;
        drop_call(c);
        char why[200];
        snprintf(why, sizeof why,
                 ask ? "the worker cannot start a thread: %s"
                     : "the plugin's worker process cannot start a thread "
                       "for this call: %s (processes or memory limit?)\n",
                 strerror(rc));
        refuse(id, ask, why);
    }
    return true;
}

/* The reader's role: read, take frames, until another thread took the
 * role over (or EXIT). */
static void lead(void)
{
    for (;;) {
        const uint8_t *f;
        size_t n;
        int t = th_iso_take(&g_rx, &f, &n);
        if (t < 0)
            _exit(3);
        if (t == 0) {
            if (th_iso_rx_fill(&g_rx, ISO_FD_SOCK) <= 0)
                _exit(0); /* the host went away: nothing to finish for */
            continue;
        }
        size_t have = g_rx.b.len - g_rx.off;
        bool last = true;
        if (have >= 4) {
            const uint8_t *h = g_rx.b.data + g_rx.off;
            size_t next = ((size_t)h[0] << 24) | ((size_t)h[1] << 16) |
                          ((size_t)h[2] << 8) | h[3];
            last = have < 4 + next;
        }
        if (!take_frame(f, n, last))
            return;
    }
}

/* The sentinel's role (g_tp_mu held): returns when this thread became
 * the reader (true) or ends as sentinel (false). */
static bool sentinel(bool is_main)
{
    g_sentinel = true;
    g_sent_coming = false;
    uint64_t seen = g_exec_seq;
    for (;;) {
        if (g_tp_exit)
            break; /* (queued calls have idle threads of their own) */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec, due;
        if (g_exec) {
            due = g_exec_start + ISO_INLINE_MS * 1000000;
            if (now >= due) { /* the reader's call runs long: read now */
                g_taken_seq = g_exec_seq;
                g_exec = 0;
                g_sentinel = false;
                return true;
            }
        } else if (g_exec_seq != seen) {
            /* Calls are coming: stay armed one more period, so the next
             * call does not have to wake us. */
            seen = g_exec_seq;
            due = now + ISO_INLINE_MS * 1000000;
        } else {
            due = now + (int64_t)ISO_IDLE_S * 1000000000;
            g_sent_asleep = true;
        }
        struct timespec dl = {(time_t)(due / 1000000000), (long)(due % 1000000000)};
        int rc = pthread_cond_timedwait(&g_sent_cv, &g_tp_mu, &dl);
        bool asleep = g_sent_asleep;
        g_sent_asleep = false;
        if (rc == ETIMEDOUT && asleep && !g_exec && !is_main)
            break; /* idle for ISO_IDLE_S */
    }
    g_sentinel = false;
    return false;
}

static void *thread_main(void *arg)
{
    bool is_main = arg != NULL;
    pthread_mutex_lock(&g_tp_mu);
    for (;;) {
        if (g_tp_head) {
            wcall *c = g_tp_head;
            g_tp_head = c->qnext;
            if (!g_tp_head)
                g_tp_tail = NULL;
            g_tp_queued--;
            pthread_mutex_unlock(&g_tp_mu);
            run_call(c);
            pthread_mutex_lock(&g_tp_mu);
            continue;
        }
        if (g_tp_exit)
            break;
        bool read_now = false;
        if (g_role_free) {
            g_role_free = false;
            read_now = true;
        } else if (!g_sentinel) {
            read_now = sentinel(is_main);
            if (!read_now && !is_main && !g_tp_head && !g_tp_exit)
                break; /* idle */
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += ISO_IDLE_S;
            g_tp_idle++;
            int rc = pthread_cond_timedwait(&g_tp_cv, &g_tp_mu, &ts);
            g_tp_idle--;
            if (rc != 0 && !g_tp_head && !is_main && !g_sent_coming)
                break;
            continue;
        }
        if (read_now) {
            pthread_mutex_unlock(&g_tp_mu);
            lead();
            pthread_mutex_lock(&g_tp_mu);
        }
    }
    pthread_mutex_unlock(&g_tp_mu);
    return NULL;
}

static void cancel_call(uint64_t id)
{
    pthread_mutex_lock(&g_mu);
    for (wcall *c = g_calls; c; c = c->next)
        if (c->id == id && !c->ask)
            atomic_store(&c->cancelled, 1);
    pthread_mutex_unlock(&g_mu);
}

/* ---- limits and sandbox ------------------------------------------------------------ */

/* Processes of this real uid now (RLIMIT_NPROC counts them all, threads
 * included): the limit is that plus what the config allows. */
static unsigned long user_tasks(uid_t uid)
{
    unsigned long n = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char path[300], line[256];
        snprintf(path, sizeof path, "/proc/%s/status", de->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        unsigned long threads = 0;
        bool mine = false;
        while (fgets(line, sizeof line, f)) {
            unsigned long r;
            if (sscanf(line, "Uid: %lu", &r) == 1)
                mine = r == (unsigned long)uid;
            else if (sscanf(line, "Threads: %lu", &r) == 1)
                threads = r;
        }
        fclose(f);
        if (mine)
            n += threads ? threads : 1;
    }
    closedir(d);
    return n;
}

static int set_limit(int res, uint64_t v, const char *what)
{
    struct rlimit rl = {(rlim_t)v, (rlim_t)v};
    if (res == RLIMIT_CPU)
        rl.rlim_max = (rlim_t)v + 2; /* SIGXCPU first, SIGKILL after */
    if (setrlimit(res, &rl) == 0)
        return 0;
    fprintf(stderr, "worker: cannot set the %s limit: %s\n", what,
            strerror(errno));
    return -1;
}

/* The seccomp filter (docs/security.md, "The worker's seccomp filter"):
 * an allow-list.  What is not named below fails with EPERM (clone3 with
 * ENOSYS, so that glibc falls back to clone(), whose flags the filter can
 * see); a call from another ABI (i386 by int 0x80) kills the process;
 * x32 numbers (bit 30 set) are not in the list, so they fail too. */
static const char *const g_allow[] = {
    /* memory */
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore",
    "msync", "mlock", "mlock2", "munlock", "mlockall", "munlockall",
    "membarrier", "pkey_alloc", "pkey_free", "pkey_mprotect",
    /* files: what the worker's user may open */
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv",
    "pwritev", "preadv2", "pwritev2", "lseek", "close", "close_range",
    "open", "openat", "openat2", "creat", "stat", "fstat", "lstat",
    "newfstatat", "statx", "statfs", "fstatfs", "access", "faccessat",
    "faccessat2", "readlink", "readlinkat", "getdents", "getdents64",
    "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "unlink",
    "unlinkat", "rename", "renameat", "renameat2", "link", "linkat",
    "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "chown",
    "fchown", "lchown", "fchownat", "truncate", "ftruncate", "fallocate",
    "fsync", "fdatasync", "sync_file_range", "utime", "utimes",
    "utimensat", "futimesat", "umask", "flock", "fcntl", "dup", "dup2",
    "dup3", "pipe", "pipe2", "mknod", "mknodat", "sendfile",
    "copy_file_range", "splice", "tee", "vmsplice", "fadvise64",
    "readahead", "getxattr", "lgetxattr", "fgetxattr", "listxattr",
    "llistxattr", "flistxattr", "setxattr", "lsetxattr", "fsetxattr",
    "removexattr", "lremovexattr", "fremovexattr", "memfd_create",
    "inotify_init", "inotify_init1", "inotify_add_watch",
    "inotify_rm_watch",
    /* waiting, events, time */
    "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1",
    "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd",
    "eventfd2", "signalfd", "signalfd4", "timerfd_create",
    "timerfd_settime", "timerfd_gettime", "nanosleep", "clock_nanosleep",
    "clock_gettime", "clock_getres", "gettimeofday", "time", "times",
    "getrusage", "sysinfo", "uname", "getrandom", "getcpu",
    "alarm", "setitimer", "getitimer", "timer_create", "timer_settime",
    "timer_gettime", "timer_getoverrun", "timer_delete",
    /* threads */
    "futex", "futex_waitv", "set_robust_list", "get_robust_list",
    "set_tid_address", "rseq", "sched_yield", "sched_getaffinity",
    "sched_setaffinity", "sched_getparam", "sched_getscheduler",
    "sched_get_priority_max", "sched_get_priority_min",
    "sched_rr_get_interval", "getpriority", "setpriority", "arch_prctl",
    "restart_syscall",
    /* signals (kill reaches only what the worker's user may signal) */
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending",
    "rt_sigtimedwait", "rt_sigsuspend", "rt_sigqueueinfo",
    "rt_tgsigqueueinfo", "sigaltstack", "pause", "kill", "tgkill", "tkill",
    /* processes: tools may start commands (contained: docs/isolation.md) */
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4",
    "waitid", "pidfd_open", "pidfd_send_signal", "getpid", "getppid",
    "gettid", "getuid", "geteuid", "getgid", "getegid", "getgroups",
    "getresuid", "getresgid", "getpgid", "getpgrp", "getsid", "setsid",
    "setpgid", "capget", "getrlimit", "setrlimit", "prlimit64",
    "personality",
    /* sockets: the families are filtered below */
    "connect", "bind", "listen", "accept", "accept4", "getsockname",
    "getpeername", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg",
    "recvmmsg", "shutdown", "setsockopt", "getsockopt",
    /* System V shared memory and semaphores (permission-checked) */
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop",
    "semctl",
    NULL};

/* ALLOW rules for `sys` when the low 32 bits of argument `arg` are none
 * of no[0..n): the kernel reads that argument as a 32-bit int, so a
 * 64-bit comparison could be passed with the high bits set.  The
 * complement of the set, split on the first bit where a value leaves it:
 * one MASKED_EQ rule per branch. */
static int allow_but32(scmp_filter_ctx ctx, int sys, unsigned arg,
                       const uint32_t *no, size_t n, int bit, uint32_t prefix)
{
    uint32_t mask = bit >= 31 ? 0 : ~(uint32_t)0 << (bit + 1);
    bool any = false;
    for (size_t i = 0; i < n && !any; i++)
        any = (no[i] & mask) == prefix;
    if (!any)
        return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, sys, 1,
                                SCMP_CMP64(arg, SCMP_CMP_MASKED_EQ,
                                           (scmp_datum_t)mask,
                                           (scmp_datum_t)prefix));
    if (bit < 0)
        return 0; /* one of no[] */
    int rc = allow_but32(ctx, sys, arg, no, n, bit - 1, prefix);
    if (rc == 0)
        rc = allow_but32(ctx, sys, arg, no, n, bit - 1,
                         prefix | (uint32_t)1 << bit);
    return rc;
}

/* The address families a worker may open: AF_UNIX always; with
 * `network: true` also IPv4, IPv6 and netlink (routing queries of
 * getaddrinfo).  Any other family is refused with EACCES (a 64-bit
 * domain whose low 32 bits name a family counts as that family). */
static bool family_ok(int f, bool network)
{
    return f == AF_UNIX ||
           (network && (f == AF_INET || f == AF_INET6 || f == AF_NETLINK));
}

#define ISO_NS_FLAGS                                                          \
    (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |            \
     CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET)

/* Processes the worker must not signal (a subreaper init and the host:
 * th_iso_filter_guard); 0: none. */
static pid_t g_guard_init, g_guard_host;

void th_iso_filter_guard(pid_t init, pid_t host)
{
    g_guard_init = init;
    g_guard_host = host;
}

/* The system calls that take a pid to signal (or a pidfd of) in their
 * first argument, and are allowed but for the guarded pids. */
static bool guarded_sys(const char *name)
{
    static const char *const g[] = {"kill", "tgkill", "rt_sigqueueinfo",
                                    "rt_tgsigqueueinfo", "pidfd_open",
                                    NULL};
    for (size_t i = 0; g[i]; i++)
        if (strcmp(name, g[i]) == 0)
            return true;
    return false;
}

int th_iso_filter_load(bool network)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
    if (!ctx)
        return -1;
    int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH,
                              SCMP_ACT_KILL_PROCESS);
    /* A binary tree over the syscall numbers: a few comparisons per
     * system call instead of one per rule. */
    if (rc == 0)
        rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    bool guard = g_guard_init > 0;
    for (size_t i = 0; rc == 0 && g_allow[i]; i++) {
        int nr = seccomp_syscall_resolve_name(g_allow[i]);
        /* guarded: pidfd_send_signal takes a pidfd, which an open() of
         * /proc/PID also is, and tkill a thread id: refused whole */
        if (nr != __NR_SCMP_ERROR && !(guard && guarded_sys(g_allow[i])) &&
            !(guard && (strcmp(g_allow[i], "pidfd_send_signal") == 0 ||
                        strcmp(g_allow[i], "tkill") == 0)))
            rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
    }
    /* Not the init, its group, the host, its group, nor everything
     * (-1): the pid as the kernel reads it, a 32-bit int. */
    if (guard) {
        uint32_t no[5] = {(uint32_t)g_guard_init, (uint32_t)-g_guard_init,
                          (uint32_t)-1, 0, 0};
        size_t nn = 3;
        if (g_guard_host > 1) {
            no[nn++] = (uint32_t)g_guard_host;
            no[nn++] = (uint32_t)-g_guard_host;
        }
        for (size_t i = 0; rc == 0 && g_allow[i]; i++) {
            int nr = seccomp_syscall_resolve_name(g_allow[i]);
            if (nr != __NR_SCMP_ERROR && guarded_sys(g_allow[i]))
                rc = allow_but32(ctx, nr, 0, no, nn, 31, 0);
        }
    }
    /* clone3 keeps its flags in memory the filter cannot read: ENOSYS
     * makes glibc use clone(), whose flags must not ask for namespaces. */
    if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3),
                              0);
    if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                              SCMP_A0_64(SCMP_CMP_MASKED_EQ, ISO_NS_FLAGS, 0));
    /* prctl, except making the process dumpable again (it would let a
     * process of the same user trace it or open its /proc/PID/mem). */
#ifdef __SANITIZE_ADDRESS__
    /* LeakSanitizer checks for leaks at exit from a tracer process that
     * makes the worker dumpable and ptraces its threads: an ASan build
     * (a test build) allows both; the other barriers (a uid per plugin,
     * the PID namespace) still hold. */
    if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 0);
    if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ptrace), 0);
#else
    static const uint32_t no_prctl[] = {PR_SET_DUMPABLE};
    if (rc == 0)
        rc = allow_but32(ctx, SCMP_SYS(prctl), 0, no_prctl, 1, 31, 0);
#endif
    /* ioctl, except pushing input into a terminal. */
    static const uint32_t no_ioctl[] = {TIOCSTI, TIOCLINUX};
    if (rc == 0)
        rc = allow_but32(ctx, SCMP_SYS(ioctl), 1, no_ioctl, 2, 31, 0);
    /* socket(): the allowed families (low 32 bits), EACCES for the other
     * known ones, EPERM (the default) beyond.  socketpair(): AF_UNIX. */
    for (int f = 0; rc == 0 && f < AF_MAX; f++)
        rc = seccomp_rule_add(ctx, family_ok(f, network)
                                       ? SCMP_ACT_ALLOW
                                       : SCMP_ACT_ERRNO(EACCES),
                              SCMP_SYS(socket), 1,
                              SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffu,
                                         (scmp_datum_t)f));
    if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socketpair), 1,
                              SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffu,
                                         (scmp_datum_t)AF_UNIX));
    if (rc == 0)
        rc = seccomp_load(ctx);
    seccomp_release(ctx);
    return rc;
}

/* Near the memory limit when a fatal signal comes: leave a note so the
 * host reports "memory limit exceeded" rather than a plain crash.  Only
 * async-signal-safe calls. */
static void on_fatal(int sig)
{
    if (g_mem_limit) {
        char buf[128];
        int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0)
            close(fd);
        uint64_t pages = 0;
        for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; i++)
            pages = pages * 10 + (uint64_t)(buf[i] - '0');
        uint64_t size = pages * (uint64_t)sysconf(_SC_PAGESIZE);
        if (size + size / 8 >= g_mem_limit) {
            ssize_t w = write(ISO_FD_NOTE, "memory\n", 7);
            (void)w;
        }
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void catch_fatal(void)
{
    static char stack[64 * 1024];
    stack_t ss = {.ss_sp = stack, .ss_size = sizeof stack};
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal;
    sa.sa_flags = SA_ONSTACK | SA_RESETHAND | SA_NODEFER;
    int sigs[] = {SIGSEGV, SIGABRT, SIGBUS, SIGILL};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
}

typedef struct wopts {
    const char *name, *shown, *user;
    uint64_t uid; /* user: auto; 0: none */
    uint64_t memory;
    uint64_t cpu, files, procs;
    uint64_t max_frame; /* worker_max_frame; 0: ISO_FRAME_DEFAULT */
    bool no_network;
    bool reaper; /* not in a PID namespace: a subreaper init forks it */
    bool userns; /* in a user namespace: wait for the host's byte first */
} wopts;

/* Why apply() failed when it was the user, for the error the host gets
 * (the log has the line too). */
static char g_apply_why[256];

/* `user: NAME` (its groups) or `user: auto` (a uid of the plugin's own,
 * no groups; the host passes it as --uid).  The process is left
 * non-dumpable: no process of the same user may trace it or open its
 * /proc/PID/mem, and the filter keeps it so. */
static int drop_user(const char *user, uint64_t uid)
{
    if (geteuid() != 0) {
        snprintf(g_apply_why, sizeof g_apply_why,
                 "'user: %s' needs a host running as root",
                 user ? user : "auto");
        fprintf(stderr, "worker: %s\n", g_apply_why);
        return -1;
    }
    int rc;
    if (user) {
        errno = 0;
        struct passwd *pw = getpwnam(user);
        if (!pw) {
            snprintf(g_apply_why, sizeof g_apply_why,
                     "'user: %s': no such user on this system%s%s", user,
                     errno ? ": " : "", errno ? strerror(errno) : "");
            fprintf(stderr, "worker: %s\n", g_apply_why);
            return -1;
        }
        rc = initgroups(pw->pw_name, pw->pw_gid) != 0 ||
             setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0;
    } else {
        rc = setgroups(0, NULL) != 0 || setgid((gid_t)uid) != 0 ||
             setuid((uid_t)uid) != 0;
    }
    if (rc || getuid() == 0 || geteuid() == 0) {
        snprintf(g_apply_why, sizeof g_apply_why,
                 "cannot become user '%s' (uid %llu): %s",
                 user ? user : "auto", (unsigned long long)uid,
                 strerror(errno));
        fprintf(stderr, "worker: %s\n", g_apply_why);
        return -1;
    }
    return 0;
}

/* The plugin file may be one only the host's user can open again (a
 * private copy in a 0700 folder): before another user is taken on, fd 4
 * becomes a sealed in-memory copy, which any user may open by
 * /proc/self/fd/4. */
static int plugin_to_memfd(void)
{
    int m = memfd_create("toolhost-plugin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (m < 0)
        return -1;
    char buf[65536];
    off_t off = 0;
    for (;;) {
        ssize_t n = pread(ISO_FD_PLUGIN, buf, sizeof buf, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            close(m);
            return -1;
        }
        if (n == 0)
            break;
        for (ssize_t w = 0; w < n;) {
            ssize_t k = write(m, buf + w, (size_t)(n - w));
            if (k <= 0) {
                close(m);
                return -1;
            }
            w += k;
        }
        off += n;
    }
    fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE |
                              F_SEAL_SEAL);
    int rc = dup2(m, ISO_FD_PLUGIN) == ISO_FD_PLUGIN ? 0 : -1;
    close(m);
    return rc;
}

static int apply(const wopts *o)
{
    bool drop = o->user || o->uid;
    if (drop && plugin_to_memfd() != 0) {
        fprintf(stderr, "worker: cannot copy the plugin: %s\n",
                strerror(errno));
        return -1;
    }
    if (drop && drop_user(o->user, o->uid) != 0)
        return -1;
    /* Not dumpable whatever the user: the loader reaches the plugin by
     * /proc/self/fd/4, which a process may always open for itself. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        fprintf(stderr, "worker: not dumpable: %s\n", strerror(errno));
        return -1;
    }
#if defined(__SANITIZE_ADDRESS__)
    /* The sanitizer reserves terabytes of address space up front: the
     * host passed `memory` as ASAN_OPTIONS' hard_rss_limit_mb instead. */
#elif defined(__SANITIZE_THREAD__)
    if (o->memory)
        fprintf(stderr, "worker: the memory limit is not applied in a "
                        "ThreadSanitizer build\n");
#else
    if (o->memory && set_limit(RLIMIT_AS, o->memory, "memory") != 0)
        return -1;
    g_mem_limit = o->memory;
    /* RLIMIT_AS counts address space, and glibc reserves 64 MiB of it for
     * each thread's malloc arena (up to 8 per core): a handful of threads
     * would reach a small limit without using the memory, and the next
     * pthread_create fails (EAGAIN).  One arena: `memory` bounds what the
     * worker uses, whichever threads allocate. */
    if (o->memory)
        mallopt(M_ARENA_MAX, 1);
#endif
    if (o->cpu && set_limit(RLIMIT_CPU, o->cpu, "cpu") != 0)
        return -1;
    if (o->files && set_limit(RLIMIT_NOFILE, o->files, "open files") != 0)
        return -1;
    if (o->procs && getuid() == 0)
        fprintf(stderr, "worker: 'processes' has no effect on a worker "
                        "running as root (the kernel does not count root's "
                        "processes); set 'user:'\n");
    if (o->procs &&
        set_limit(RLIMIT_NPROC, user_tasks(getuid()) + o->procs,
                  "processes") != 0)
        return -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        fprintf(stderr, "worker: no_new_privs: %s\n", strerror(errno));
        return -1;
    }
    if (th_iso_filter_load(!o->no_network) != 0) {
        fprintf(stderr, "worker: cannot load the seccomp filter\n");
        return -1;
    }
    catch_fatal();
    return 0;
}

/* ---- main ----------------------------------------------------------------------------- */

static int fail(const char *fmt, const char *a)
{
    char msg[1200];
    snprintf(msg, sizeof msg, fmt, a);
    send_text(ISO_FAIL, 0, msg);
    return 2;
}

static int parse(int argc, char **argv, wopts *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        uint64_t n = strtoull(v, NULL, 10);
        if (strcmp(k, "--name") == 0)
            o->name = v;
        else if (strcmp(k, "--path") == 0)
            o->shown = v;
        else if (strcmp(k, "--user") == 0)
            o->user = v;
        else if (strcmp(k, "--uid") == 0)
            o->uid = n;
        else if (strcmp(k, "--memory") == 0)
            o->memory = n;
        else if (strcmp(k, "--cpu") == 0)
            o->cpu = n;
        else if (strcmp(k, "--files") == 0)
            o->files = n;
        else if (strcmp(k, "--procs") == 0)
            o->procs = n;
        else if (strcmp(k, "--max-frame") == 0)
            o->max_frame = n;
        else if (strcmp(k, "--network") == 0)
            o->no_network = strcmp(v, "0") == 0;
        else if (strcmp(k, "--reaper") == 0)
            o->reaper = strcmp(v, "0") != 0;
        else if (strcmp(k, "--userns") == 0)
            o->userns = strcmp(v, "0") != 0;
        else
            return -1;
    }
    return o->name && o->shown ? 0 : -1;
}

/* The processes this one started, whatever they did since (a subreaper
 * gets the orphans of its tree): SIGKILL to each child, reap, again,
 * until it has no child left.  A child cannot be reaped by anyone else,
 * so its pid names it until this process reaps it. */
static void kill_tree(pid_t kid, int *status)
{
    pid_t me = getpid();
    for (;;) {
        int st;
        pid_t r;
        while ((r = waitpid(-1, &st, WNOHANG)) > 0)
            if (r == kid)
                *status = st;
        int found = 0;
        DIR *d = opendir("/proc");
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (de->d_name[0] < '1' || de->d_name[0] > '9')
                continue;
            char path[300], buf[512];
            snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                continue;
            ssize_t n = read(fd, buf, sizeof buf - 1);
            close(fd);
            if (n <= 0)
                continue;
            buf[n] = '\0';
            /* "PID (comm) S PPID ...": comm may hold anything, but ')' ends
             * it the last time it occurs */
            const char *rp = strrchr(buf, ')');
            char state;
            long ppid;
            if (rp && sscanf(rp + 1, " %c %ld", &state, &ppid) == 2 &&
                ppid == me) {
                kill((pid_t)atol(de->d_name), SIGKILL);
                found++;
            }
        }
        if (d)
            closedir(d);
        if (!found) {
            if (waitpid(-1, &st, WNOHANG) < 0 && errno == ECHILD)
                return;
            continue;
        }
        while ((r = waitpid(-1, &st, 0)) < 0 && errno == EINTR)
            ;
        if (r == kid)
            *status = st;
    }
}

/* The worker stays the init of what it starts (docs/isolation.md,
 * "Containment"): this process forks the real worker, keeps no plugin
 * code, reaps whatever ends below it, and when the worker ends writes its
 * wait status on the note pipe ("status N") and exits.  It exits too when
 * the host's end of the socket closes (the host died), and, not in a PID
 * namespace, on SIGTERM (the host ends the worker).
 *
 * Started as pid 1 of a PID namespace of its own, its exit makes the
 * kernel kill every process left in the namespace, whatever session or
 * group it made.  Else (`reaper`: the host could make no PID namespace)
 * it is a child subreaper: the orphans of its tree become its children,
 * and it kills the whole tree (kill_tree) before it exits; it is not
 * dumpable, and the worker's filter refuses to signal it or the host
 * (th_iso_filter_guard), so a plugin of the same user cannot end it
 * first.  Returns in the child (the worker), never in the init. */
static int become_init(bool reaper)
{
    pid_t host = getppid();
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    if (reaper) {
        sigaddset(&chld, SIGTERM);
        sigaddset(&chld, SIGINT);
        sigaddset(&chld, SIGHUP);
        if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
            fprintf(stderr, "worker: cannot become a subreaper: %s\n",
                    strerror(errno));
            _exit(2);
        }
    }
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    pid_t init = getpid();
    pid_t kid = sfd < 0 ? -1 : fork();
    if (kid == 0) {
        close(sfd);
        sigprocmask(SIG_UNBLOCK, &chld, NULL);
        if (reaper) {
            /* a group of its own: kill(0, ...) does not reach the init;
             * and if the init is killed anyway (by another plugin of the
             * same user), the worker goes with it */
            setpgid(0, 0);
            prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
            if (getppid() != init)
                _exit(0);
            th_iso_filter_guard(init, host);
        }
        return 0;
    }
    if (kid < 0) {
        fprintf(stderr, "worker: cannot start in its namespace: %s\n",
                strerror(errno));
        _exit(2);
    }
    close(ISO_FD_PLUGIN);
    prctl(PR_SET_NAME, "toolhost-init", 0, 0, 0);
#ifndef __SANITIZE_ADDRESS__ /* (LeakSanitizer ptraces its process) */
    /* A process of the plugin's user may not write its memory (it may be
     * the same user: a host not root) */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
#endif
    int status = -1;
    bool asked = false; /* SIGTERM: the host ends the worker */
    for (;;) {
        struct pollfd pf[2] = {{sfd, POLLIN, 0}, {ISO_FD_SOCK, POLLRDHUP, 0}};
        int n = poll(pf, 2, -1);
        if (n < 0 && errno != EINTR)
            _exit(3);
        bool end = false;
        if (pf[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) > 0)
                if (si.ssi_signo != SIGCHLD)
                    end = asked = true;
            int st;
            pid_t r;
            while ((r = waitpid(-1, &st, WNOHANG)) > 0)
                if (r == kid) {
                    status = st;
                    end = true;
                }
        }
        if (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
            end = true; /* the host is gone */
        if (!end)
            continue;
        if (reaper)
            kill_tree(kid, &status);
        if (asked) /* as the host's SIGKILL ends the init of a namespace */
            kill(getpid(), SIGKILL);
        if (status != -1) {
            /* never blocks on a pipe the plugin filled */
            fcntl(ISO_FD_NOTE, F_SETFL,
                  fcntl(ISO_FD_NOTE, F_GETFL) | O_NONBLOCK);
            char note[32];
            int k = snprintf(note, sizeof note, "status %d\n", status);
            ssize_t w = write(ISO_FD_NOTE, note, (size_t)k);
            (void)w;
        }
        _exit(0);
    }
}

/* [UPDATED, uri]: the plugin's resource_updated(), from any of its
 * threads. */
static void w_updated(const char *uri)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    int e = msgpack_pack_array(&pk, 2);
    e |= msgpack_pack_int(&pk, ISO_UPDATED);
    e |= th_pack_cstr(&pk, uri);
    if (e)
        th_buf_destroy(&b);
    else
        send_buf(&b);
}

int th_iso_worker_main(int argc, char **argv)
{
    wopts o;
    if (fcntl(ISO_FD_SOCK, F_GETFD) < 0 || fcntl(ISO_FD_PLUGIN, F_GETFD) < 0 ||
        parse(argc, argv, &o) != 0) {
        fprintf(stderr, "toolhost worker: internal command, started by the "
                        "host for plugins with 'isolation: process'\n");
        return 2;
    }
    /* In a user namespace of its own, the host maps its ids after this
     * process started, then sends one byte: nothing before needs them. */
    if (o.userns) {
        char b;
        ssize_t r;
        while ((r = read(ISO_FD_SOCK, &b, 1)) < 0 && errno == EINTR)
            ;
        if (r != 1)
            return 0; /* the host is gone */
    }
    if (o.max_frame >= ISO_FRAME_MIN && o.max_frame <= ISO_MAX_FRAME)
        g_max_frame = (size_t)o.max_frame;
    if (getpid() == 1 || o.reaper)
        become_init(getpid() != 1);
    signal(SIGPIPE, SIG_IGN);
    if (apply(&o) != 0) {
        if (g_apply_why[0]) {
            char m[600];
            snprintf(m, sizeof m, "%s: the worker could not take on its "
                     "user: %s", o.shown, g_apply_why);
            return fail("%s", m);
        }
        return fail("%s: the worker could not apply its limits (see the log)",
                    o.shown);
    }
    th_load_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.name = o.name;
    lo.has_fd = true;
    lo.fd = ISO_FD_PLUGIN;
    lo.allow_insecure = true; /* the host checked the file it passed */
    /* no cage of the host api here: this worker's containment (its
     * cgroup, PID namespace or subreaper init) holds what the plugin
     * starts, and the filter leaves no cgroup writes to it anyway */
    th_iso_cage_api_off("in an isolated worker, whose containment holds "
                        "what the plugin starts");
    th_error err;
    th_error_clear(&err);
    if (th_plugin_open(o.shown, &lo, &g_p, &err) != 0)
        return fail("%s", err.msg);
    g_p->api.log = w_log;
    /* not carried over the wire (docs/isolation.md): refused here */
    th_plugin_set_tools_changed_hook(NULL);
    /* resource_updated() of the plugin's own resources (the loader's
     * check) goes to the host, which checks the URI again */
    th_content_set_update_hook(w_updated);
    g_n_static = g_p->n_tools;
    {
        th_buf b = TH_BUF_INIT;
        msgpack_packer pk;
        msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
        int e = msgpack_pack_array(&pk, 2);
        e |= msgpack_pack_int(&pk, ISO_HELLO);
        e |= th_iso_pack_desc(&pk, g_p);
        if (e) {
            th_buf_destroy(&b);
            return fail("%s: worker out of memory", o.shown);
        }
        size_t n = b.len;
        if (send_buf(&b) != 0) {
            char m[600];
            snprintf(m, sizeof m, "%s: the plugin's descriptor takes %zu "
                     "bytes, more than the host reads in one frame "
                     "(worker_max_frame %zu bytes)", o.shown, n, g_max_frame);
            return fail("%s", m);
        }
    }
    /* This thread reads first; the others come when calls need them. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g_sent_cv, &ca);
    pthread_condattr_destroy(&ca);
    g_role_free = true;
    thread_main(&g_role_free);
    /* Drain: the calls in flight end, then fini() and out. */
    pthread_mutex_lock(&g_mu);
    while (g_active > 0)
        pthread_cond_wait(&g_cv, &g_mu);
    while (g_ended) {
        wcall *c = g_ended;
        g_ended = c->qnext;
        th_buf_destroy(&c->ob);
        th_buf_destroy(&c->args);
        pthread_mutex_destroy(&c->mu);
        free(c);
    }
    g_ended_tail = NULL;
    g_n_ended = 0;
    pthread_mutex_unlock(&g_mu);
    th_iso_rx_destroy(&g_rx);
    /* fini(), not dlclose(): the process ends next, and the unload guard
     * could not look at a thread of the plugin here (the filter refuses
     * process_vm_readv; a non-dumpable process cannot read its own
     * /proc/self/task/N/syscall as another user). */
    g_p->dl = NULL;
    th_plugin_close(g_p);
    g_p = NULL;
    fflush(stderr);
    return 0;
}
