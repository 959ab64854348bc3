/* iso_host.c - the host side of process isolation (docs/isolation.md).
 *
 * An isolated plugin is a proxy th_plugin (a pool): its descriptor is
 * built from what the first worker sends (HELLO), and its init_tools()
 * gives what the first worker's init_tools() gave (READY; every later
 * worker must give the same: same_tools), so the registry, the
 * validation, the permissions and the manager see an ordinary plugin.
 * init() starts `workers` processes with the config block; execute()
 * picks the least busy live worker, sends the call, and relays the
 * worker's messages to the real call callbacks on the calling thread
 * (the call's owner), until DONE or the worker's death.
 *
 * One reader thread per worker reads its stderr (lines go to the log
 * under the plugin's name) and its socket while the worker starts or is
 * idle; while calls run, the thread of a waiting call reads the socket
 * itself and routes the other calls' messages to them ("Reading" below).
 * Workers start in a cgroup v2 of their own where the host may make one
 * (iso_cgroup.c; clone3 CLONE_INTO_CGROUP, else the child writes its
 * cgroup.procs before execve), and by clone() in a PID namespace of their
 * own where the host may make one (with a user namespace when the host is
 * not root), else under a subreaper init ("Containment" in the doc), with
 * a minimal environment.  A dead worker's cgroup is killed, emptied and
 * removed by its reader thread before its calls fail.
 * When the worker dies (its pidfd, else EOF), the reader thread reaps it,
 * fails its calls with plugin_crashed naming the signal (or the limit), and the
 * next call restarts it after a backoff (0 after a worker that finished
 * calls, then 100 ms doubling to 5 s).  `crash_loop` deaths in a row
 * with no call finished mark the plugin unhealthy: calls fail at once;
 * one new start is tried every `unhealthy_retry`.
 *
 * Locks: pool->mu guards the workers, their call lists and queues, the
 * counters, who reads a socket (w->rd); never held while sending,
 * reading, calling a host callback or waiting for a process.  w->send_mu
 * orders the frames sent to one worker; nothing is locked under it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cage/iso_cgroup.h"
#include "iso_wire.h"
#include "call/manager.h"
#include "th/content.h"
#include "th/iso.h"
#include "th/log.h"
#include "th/mpwalk.h"
#include "th/utf8.h"

#define ISO_START_TIMEOUT_MS 10000
#define ISO_QUEUE_MAX (8u * 1024 * 1024)
#define ISO_ASK_TIMEOUT_MS 10000 /* validate_args, needs_permission */
#define ISO_CONTENT_TIMEOUT_MS 5000 /* content_timeout's default */


/* What a queued message costs beyond its bytes and its text (its struct,
 * the allocator's headers), counted toward ISO_QUEUE_MAX so that a flood
 * of empty frames is held back as one of full ones. */
#define MSG_COST 128

typedef struct msg {
    int type;
    int stream;
    double fraction;
    char *text;
    uint8_t *data;
    size_t len;
    size_t cost;          /* counted in its pend's queued */
    struct msg *next;
} msg;

typedef struct pend {
    uint64_t id;
    int ask;              /* 0: a call */
    struct worker *w;
    msg *head, *tail;
    size_t queued;
    bool done;
    int status;           /* DONE status or ANSWER rc */
    uint64_t retry_after_ms; /* DONE: the plugin's set_retry_after() */
    char *answer;         /* ANSWER message */
    char *death;          /* the worker died: why */
    int death_code;
    pthread_cond_t cv;
    toolhost_call *call;  /* NULL for an ASK */
    /* A content ask (ISO_ASK_READ on): its ANSWER's blocks_bin, copied
     * when it is at most blob_max bytes (else blob_over, nothing kept),
     * and the completion values the worker dropped. */
    uint8_t *blob;
    size_t blob_len, blob_max;
    bool blob_over;
    uint64_t dropped;
    bool client_ask;      /* an ISO_CLIENT_ASK queued or being asked */
    struct pend *next;
} pend;

typedef struct worker {
    struct pool *pool;
    pid_t pid;
    int sock, errfd, notefd;
    int pidfd;            /* -1: none (the socket's end tells the death) */
    bool reaper;          /* w->pid is a subreaper init, not a PID 1 */
    bool userns;          /* in a user namespace: it waits for a byte */
    th_iso_cg cg;         /* its cgroup (cg.dir NULL: none) */
    pthread_t reader;
    bool has_reader, alive, ready;
    int ready_state;      /* 0 waiting, 1 ok, -1 failed */
    char *fail_msg;
    uint8_t *hello;       /* HELLO descriptor frame */
    size_t hello_len;
    uint8_t *itools;      /* READY's tools_bin: what init_tools() gave */
    size_t itools_len;
    bool refused;         /* another tool list (same_tools): killed by us,
                             its start failed; not a crash (under mu) */
    pend *calls;
    unsigned ncalls;
    uint64_t finished;    /* calls that got DONE */
    pthread_mutex_t send_mu;
    bool reaped;          /* set when we sent SIGKILL (a deadline) */
    bool reader_done;     /* the reader's last touch is over (under mu) */
    struct worker *next_dead;
    /* Who reads the socket (under mu): nobody, the reader thread, or the
     * thread of a call waiting for its answer (rd_pend).  Only that one
     * touches rx.  See "Reading" below. */
    int rd;
    pend *rd_pend;
    th_iso_rx rx;
    int evfd;             /* wakes the reader thread */
    uint64_t call_seq;    /* calls started on this worker */
    uint64_t ends;        /* DONE and ANSWER frames routed */
    bool sock_eof;        /* the socket ended under a call, or the pool
                             closes: the reader thread takes it, reaps */
    bool malformed;       /* it sent a malformed frame: killed, and
                             nothing it sent after is routed (under mu) */
    bool stray_said;      /* a call's frame for an ask was logged */
    char kill_why[128];   /* killed by us for what it sent: the words its
                             calls' plugin_crashed gives (under mu) */
} worker;

enum { RD_FREE, RD_THREAD, RD_CALLER };
#define ISO_READER_IDLE_MS 20 /* the reader thread looks this often */

typedef struct pool {
    toolhost_plugin desc; /* the proxy's descriptor; first (container_of) */
    toolhost_tool *tools;
    uint32_t n_tools;
    /* Resources and prompts (ABI 1.4) from HELLO, whose read, get and
     * complete ask a worker (content_ask); the loader checks them. */
    toolhost_resource *res;
    uint32_t n_res;
    toolhost_prompt *prm;
    uint32_t n_prm;
    int64_t content_timeout_ms;
    size_t max_frame;     /* worker_max_frame: the largest frame body read
                             from a worker (each worker's rx.max) */
    /* Between a successful init() and fini() (under mu): only then is a
     * worker's UPDATED passed on.  fini() joins the reader threads and
     * runs after the last call, and the loader frees the resources only
     * after it, so a passed-on update never reads freed ones. */
    bool serving;
    /* The tools init_tools() gave in the first worker (p_init), served
     * after the static ones; itools_raw is that worker's tools_bin, which
     * every later worker's must equal (same_tools).  Set once in p_init,
     * read-only afterwards. */
    toolhost_tool *itools;
    uint32_t n_itools;
    uint8_t *itools_raw;
    size_t itools_raw_len;
    bool itools_set;
    char **strs;          /* every string the descriptor points at */
    size_t n_strs, cap_strs;
    toolhost_param **param_arrays;
    size_t n_param_arrays;
    const char ***enum_arrays;
    size_t n_enum_arrays;

    char *name, *path, *file, *user;
    uint32_t uid;         /* user: auto: the plugin's own uid */
    char **envp;          /* the workers' environment */
    int contain;          /* CONTAIN_*: how the last worker was started */
    int contain_said;     /* the one the log last named */
    bool netns;           /* network: false: a network namespace too */
    char contain_why[160]; /* the levels refused before it, and why */
    bool cg;              /* the last worker got a cgroup of its own */
    bool cg_said;         /* the log last named that */
    char cg_why[256];     /* !cg: why not */
    uint64_t cg_seq;      /* workers started: the leaves' names */
    int plugfd;
    th_proc_limits lim;
    bool network;
    uint64_t kill_grace_ms;
    uint32_t crash_loop;      /* deaths in a row before unhealthy */
    int64_t retry_ms;         /* unhealthy: a new start every */
    uint32_t n_workers;
    uint64_t generation;
    uint8_t *config;
    size_t config_len;
    th_plugin *plugin;    /* the proxy (not a reference) */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    worker **w;           /* n_workers slots, NULL: none */
    worker *dead;         /* replaced workers, freed once unused */
    bool starting;
    bool closing;
    int64_t next_start_ms;
    int64_t backoff_ms;
    unsigned loop;        /* deaths in a row with no call finished */
    bool unhealthy;
    char unhealthy_why[256];
    char last_crash[128];
    uint64_t restarts, crashes;
    uint64_t next_id;
    struct pool *next, *prev;
} pool;

static char *g_exe;
static pthread_mutex_t g_pools_mu = PTHREAD_MUTEX_INITIALIZER;
static pool *g_pools;

void th_iso_set_worker_exe(const char *path)
{
    free(g_exe);
    g_exe = path ? strdup(path) : NULL;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void deadline_in(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

static void msg_free(msg *m)
{
    free(m->text);
    free(m->data);
    free(m);
}

/* ---- sending to a worker ----------------------------------------------------------- */

static int wsend(worker *w, th_buf *b)
{
    pthread_mutex_lock(&w->send_mu);
    int rc = w->sock >= 0
                 ? th_iso_send(w->sock, b->data, b->len, ISO_MAX_FRAME)
                 : -1;
    pthread_mutex_unlock(&w->send_mu);
    th_buf_destroy(b);
    return rc;
}

static int send_simple(worker *w, int type, uint64_t id, bool with_id)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    int e = msgpack_pack_array(&pk, with_id ? 2 : 1);
    e |= msgpack_pack_int(&pk, type);
    if (with_id)
        e |= msgpack_pack_uint64(&pk, id);
    if (e) {
        th_buf_destroy(&b);
        return -1;
    }
    return wsend(w, &b);
}

/* ---- death ------------------------------------------------------------------------ */

static const char *sig_name(int sig)
{
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    case SIGPIPE: return "SIGPIPE";
    case SIGTRAP: return "SIGTRAP";
    default: return NULL;
    }
}

static void fmt_size(uint64_t n, char *b, size_t cap)
{
    if (n % (1024ull * 1024 * 1024) == 0)
        snprintf(b, cap, "%lluGiB", (unsigned long long)(n >> 30));
    else if (n % (1024ull * 1024) == 0)
        snprintf(b, cap, "%lluMiB", (unsigned long long)(n >> 20));
    else
        snprintf(b, cap, "%llu bytes", (unsigned long long)n);
}

/* What killed the worker, in the words calls and the log get. */
static void death_words(pool *P, int status, bool mem_note, bool killed_by_us,
                        const char *kill_why, char *out, size_t cap,
                        char *shortw, size_t scap)
{
    char sz[32];
    if (kill_why && kill_why[0]) {
        snprintf(shortw, scap, "%s", kill_why);
    } else if (mem_note && P->lim.memory) {
        fmt_size(P->lim.memory, sz, sizeof sz);
        snprintf(shortw, scap, "memory limit %s exceeded", sz);
    } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU) {
        snprintf(shortw, scap, "cpu limit %us exceeded",
                 (unsigned)P->lim.cpu_seconds);
    } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
               killed_by_us) {
        snprintf(shortw, scap, "SIGKILL: a call ignored its deadline");
    } else if (WIFSIGNALED(status)) {
        const char *n = sig_name(WTERMSIG(status));
        if (n)
            snprintf(shortw, scap, "%s", n);
        else
            snprintf(shortw, scap, "signal %d", WTERMSIG(status));
    } else if (WIFEXITED(status)) {
        snprintf(shortw, scap, "exit %d", WEXITSTATUS(status));
    } else {
        snprintf(shortw, scap, "connection lost");
    }
    snprintf(out, cap,
             "plugin_crashed (%s): the worker process of plugin '%s' died "
             "during this call; it is restarted for the next calls",
             shortw, P->name);
}

static void record_death(pool *P, worker *w, const char *shortw) /* mu held */
{
    P->crashes++;
    snprintf(P->last_crash, sizeof P->last_crash, "%s", shortw);
    if (w->finished == 0)
        P->loop++;
    else
        P->loop = 0;
    if (P->loop == 0 || w->finished)
        P->backoff_ms = 0;
    else
        P->backoff_ms = P->backoff_ms ? P->backoff_ms * 2 : 100;
    if (P->backoff_ms > 5000)
        P->backoff_ms = 5000;
    P->next_start_ms = now_ms() + P->backoff_ms;
    if (P->loop >= P->crash_loop && !P->unhealthy) {
        P->unhealthy = true;
        snprintf(P->unhealthy_why, sizeof P->unhealthy_why,
                 "its workers died %u times in a row without finishing a "
                 "call (last: %s)",
                 P->loop, shortw);
        th_log_error("plugin %s: unhealthy: %s; calls fail at once, a new "
                     "worker is tried every %lldms or at the next reload",
                     P->name, P->unhealthy_why, (long long)P->retry_ms);
        P->next_start_ms = now_ms() + P->retry_ms;
    }
}

/* ---- the reader thread ------------------------------------------------------------- */

static pend *find_pend(worker *w, uint64_t id)
{
    for (pend *p = w->calls; p; p = p->next)
        if (p->id == id)
            return p;
    return NULL;
}

static void log_stderr(pool *P, worker *w, th_buf *eb, bool flush)
{
    size_t start = 0;
    for (size_t i = 0; i < eb->len; i++) {
        if (eb->data[i] != '\n')
            continue;
        eb->data[i] = '\0';
        th_log_warn("plugin %s [worker %d]: %s", P->name, (int)w->pid,
                    (char *)eb->data + start);
        start = i + 1;
    }
    if (flush && start < eb->len) {
        th_log_warn("plugin %s [worker %d]: %.*s", P->name, (int)w->pid,
                    (int)(eb->len - start), (char *)eb->data + start);
        start = eb->len;
    }
    if (start) {
        memmove(eb->data, eb->data + start, eb->len - start);
        eb->len -= start;
    }
    if (eb->len > 4096) { /* a line too long: cut */
        th_log_warn("plugin %s [worker %d]: %.4096s [cut]", P->name,
                    (int)w->pid, (char *)eb->data);
        eb->len = 0;
    }
}

/* A frame from a worker is outside input: walked before msgpack-c
 * allocates for the counts it announces (th/mpwalk.h). */
static bool frame_ok(const uint8_t *f, size_t n)
{
    size_t vlen = 0;
    return th_mp_check(f, n, TH_MP_MAX_DEPTH, &vlen, NULL) == 0 && vlen == n;
}

static char *block_str(const msgpack_object_array *a, uint32_t i, bool *bad)
{
    if (i >= a->size || a->ptr[i].type == MSGPACK_OBJECT_NIL)
        return NULL;
    if (a->ptr[i].type != MSGPACK_OBJECT_STR ||
        memchr(a->ptr[i].via.str.ptr, 0, a->ptr[i].via.str.size)) {
        *bad = true;
        return NULL;
    }
    char *s = th_iso_strdup(a, i);
    if (!s)
        *bad = true;
    return s;
}

/* The six fields of a block at a->ptr[at..at+5] (kind, role, mime_type,
 * data, uri, name: as a content answer's blocks_bin and a BLOCK frame
 * carry them) into blk, its strings copied into str[0..3] (the caller
 * frees them).  False when they are not of that shape. */
static bool block_decode(const msgpack_object_array *a, uint32_t at,
                         toolhost_block *blk, char *str[4])
{
    memset(blk, 0, sizeof *blk);
    blk->struct_size = sizeof *blk;
    str[0] = str[1] = str[2] = str[3] = NULL;
    if (a->size < at + 6)
        return false;
    bool bad = a->ptr[at].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
               a->ptr[at].via.u64 > UINT32_MAX ||
               (a->ptr[at + 3].type != MSGPACK_OBJECT_BIN &&
                a->ptr[at + 3].type != MSGPACK_OBJECT_NIL);
    if (bad)
        return false;
    blk->kind = (uint32_t)a->ptr[at].via.u64;
    blk->role = str[0] = block_str(a, at + 1, &bad);
    blk->mime_type = str[1] = block_str(a, at + 2, &bad);
    blk->uri = str[2] = block_str(a, at + 4, &bad);
    blk->name = str[3] = block_str(a, at + 5, &bad);
    blk->data = th_iso_bytes(a, at + 3, &blk->len);
    return !bad;
}

static void block_strs_free(char *str[4])
{
    for (int i = 0; i < 4; i++)
        free(str[i]);
}

/* A message of the call whose thread read it: to the call's callbacks
 * at once, no queue, no copy. */
static void deliver(toolhost_call *call, int type, const msgpack_object_array *a)
{
    size_t len = 0;
    const uint8_t *d;
    if (!call)
        return;
    if (type == ISO_WRITE) {
        d = th_iso_bytes(a, 3, &len);
        call->host->write(call, (int)th_iso_int(a, 2), d, len);
    } else if (type == ISO_META) {
        d = th_iso_bytes(a, 2, &len);
        call->host->set_meta(call, d, len);
    } else if (type == ISO_BLOCK) {
        /* the shape was checked when it came (route); the host's own
         * write_block() checks the rest and the call's budget */
        toolhost_block blk;
        char *str[4];
        if (block_decode(a, 2, &blk, str))
            call->host->write_block(call, &blk);
        block_strs_free(str);
    } else {
        char *t = th_iso_strdup(a, 3);
        d = th_iso_bytes(a, 4, &len);
        call->host->progress(call, th_iso_num(a, 2), t, d, len);
        free(t);
    }
}

/* A queued BLOCK frame (kept whole) delivered to the call. */
static void deliver_frame(toolhost_call *call, const uint8_t *f, size_t n)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    if (msgpack_unpack_next(&u, (const char *)f, n, &off) ==
            MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_ARRAY)
        deliver(call, ISO_BLOCK, &u.data.via.array);
    msgpack_unpacked_destroy(&u);
}

/* One frame from a worker, read by the reader thread (self NULL) or by
 * the thread of the call `self`. */
/* Ends a worker and everything it started.  The init of a PID namespace
 * takes its namespace with it when killed; a subreaper init must kill
 * its tree first, which it does on SIGTERM (iso_worker.c, become_init),
 * and the plugin cannot stop it doing so (its filter refuses to signal
 * the init).  SIGKILL stays the last resort of reader_main(). */
static void worker_kill(worker *w)
{
    th_iso_cg_kill(&w->cg); /* all of it at once, where it has one */
    if (w->pid > 0)
        kill(w->pid, w->reaper ? SIGTERM : SIGKILL);
}

/* th_iso_take() refused a header: the worker declared a frame longer
 * than worker_max_frame.  It is killed at once, before any of the body
 * is read (the host never holds more than the cap for it); its calls
 * fail with plugin_crashed in these words, and nothing it sent after is
 * routed. */
static void frame_refused(pool *P, worker *w)
{
    char cap[32];
    fmt_size(P->max_frame, cap, sizeof cap);
    pthread_mutex_lock(&P->mu);
    bool said = w->malformed;
    w->malformed = true;
    if (!said)
        snprintf(w->kill_why, sizeof w->kill_why,
                 "a frame of %zu bytes passes worker_max_frame %s",
                 w->rx.refused, cap);
    pthread_mutex_unlock(&P->mu);
    if (!said)
        th_log_warn("plugin %s: worker %d declared a frame of %zu bytes, "
                    "more than worker_max_frame (%zu bytes): killed",
                    P->name, (int)w->pid, w->rx.refused, P->max_frame);
    worker_kill(w);
}

/* route()'s end for a frame of a known type but the wrong shape, P->mu
 * held (released here): the worker is killed, logged once ("sent a
 * malformed WHAT: killed"), nothing more of it is used.  false. */
static bool kill_malformed(pool *P, worker *w, msgpack_unpacked *u,
                           const char *what)
{
    bool said = w->malformed;
    w->malformed = true;
    pthread_mutex_unlock(&P->mu);
    msgpack_unpacked_destroy(u);
    if (!said)
        th_log_warn("plugin %s: worker %d sent a malformed %s: killed",
                    P->name, (int)w->pid, what);
    worker_kill(w);
    return false;
}

/* false when the frame is not one of ours: the worker is killed, and
 * nothing it sent after is routed (a request it would still answer
 * fails with its death instead). */
static bool route(pool *P, worker *w, const uint8_t *f, size_t n, pend *self)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    if (!frame_ok(f, n) ||
        msgpack_unpack_next(&u, (const char *)f, n, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        u.data.type != MSGPACK_OBJECT_ARRAY || u.data.via.array.size < 1) {
        msgpack_unpacked_destroy(&u);
        /* Not what a worker of ours sends: it is broken or hostile. */
        pthread_mutex_lock(&P->mu);
        bool said = w->malformed;
        w->malformed = true;
        pthread_mutex_unlock(&P->mu);
        if (!said)
            th_log_warn("plugin %s: worker %d sent a malformed frame: "
                        "killed", P->name, (int)w->pid);
        worker_kill(w);
        return false;
    }
    const msgpack_object_array *a = &u.data.via.array;
    int type = (int)th_iso_int(a, 0);
    pthread_mutex_lock(&P->mu);
    if (w->malformed) { /* whoever reads on: nothing more of it counts */
        pthread_mutex_unlock(&P->mu);
        msgpack_unpacked_destroy(&u);
        return false;
    }
    switch (type) {
    case ISO_HELLO:
        free(w->hello);
        w->hello = malloc(n);
        if (w->hello) {
            memcpy(w->hello, f, n);
            w->hello_len = n;
        }
        pthread_cond_broadcast(&P->cv);
        break;
    case ISO_FAIL:
    case ISO_READY: {
        /* once per worker: the host reads w->itools without mu once the
         * state is set (start_ready, p_init), so a second READY is not
         * let to replace it */
        if (w->ready_state != 0)
            break;
        size_t tl = 0;
        const uint8_t *tb = th_iso_bytes(a, 3, &tl);
        size_t vlen = 0;
        free(w->fail_msg);
        w->fail_msg = th_iso_strdup(a, 2);
        w->ready_state = type == ISO_READY && th_iso_int(a, 1) ? 1 : -1;
        if (w->ready_state == 1 && tb && tl &&
            (th_mp_check(tb, tl, TH_MP_MAX_DEPTH, &vlen, NULL) != 0 ||
             vlen != tl)) {
            /* walked before msgpack-c allocates for the counts it
             * announces, as every frame is (frame_ok) */
            w->ready_state = -1;
            free(w->fail_msg);
            w->fail_msg = strdup("the worker's init_tools() list is not "
                                 "well-formed msgpack");
        } else if (w->ready_state == 1 && tb && tl &&
                   (w->itools = malloc(tl))) {
            memcpy(w->itools, tb, tl);
            w->itools_len = tl;
        }
        pthread_cond_broadcast(&P->cv);
        break;
    }
    case ISO_LOG: {
        char *t = th_iso_strdup(a, 2);
        int lvl = (int)th_iso_int(a, 1);
        pthread_mutex_unlock(&P->mu);
        if (t && lvl <= th_log_get_level()) {
            for (char *c = t; *c; c++)
                if ((unsigned char)*c < 0x20)
                    *c = ' ';
            th_log(lvl < 0 ? 0 : lvl > 3 ? 3 : lvl, "plugin %s: %s", P->name,
                   t);
        }
        free(t);
        msgpack_unpacked_destroy(&u);
        return true;
    }
    case ISO_BLOCK:
    case ISO_WRITE:
    case ISO_META:
    case ISO_PROGRESS:
    case ISO_CLIENT_ASK: {
        if (type == ISO_CLIENT_ASK) {
            /* [type, id, kind, request]: one at a time per call (the
             * plugin's ask_client() waits for its answer); a second
             * while one is asked is not what a worker of ours sends */
            pend *q = a->size == 4 && a->ptr[3].type == MSGPACK_OBJECT_BIN
                          ? find_pend(w, (uint64_t)th_iso_int(a, 1))
                          : NULL;
            bool bad = a->size != 4 || a->ptr[3].type != MSGPACK_OBJECT_BIN ||
                       (q && !q->ask && q->client_ask);
            if (bad)
                return kill_malformed(P, w, &u,
                                      "ask_client() (or a second one while "
                                      "its call's first waits)");
        }
        if (type == ISO_BLOCK) {
            toolhost_block blk;
            char *str[4] = {NULL, NULL, NULL, NULL};
            bool ok = a->size == 8 && block_decode(a, 2, &blk, str);
            block_strs_free(str);
            if (!ok) /* not what a worker of ours sends */
                return kill_malformed(P, w, &u, "block");
        }
        pend *p = find_pend(w, (uint64_t)th_iso_int(a, 1));
        if (!p || p->done)
            break;
        if (p->ask) {
            /* output, a block, meta or progress for an ask (a validate,
             * a permission, a content read): no call is behind it to
             * take them, and a worker of ours never sends them: dropped
             * (the read answers as it will) */
            bool said = w->stray_said;
            w->stray_said = true;
            pthread_mutex_unlock(&P->mu);
            msgpack_unpacked_destroy(&u);
            if (!said)
                th_log_warn("plugin %s: worker %d sent a call's output for "
                            "a request that is not a call: dropped (later "
                            "ones are not logged)",
                            P->name, (int)w->pid);
            return true;
        }
        if (p == self && type != ISO_CLIENT_ASK) {
            /* (an ask waits for the client: the call's thread asks it
             * from its loop, never here, where it reads for others) */
            pthread_mutex_unlock(&P->mu);
            deliver(self->call, type, a);
            msgpack_unpacked_destroy(&u);
            return true;
        }
        msg *m = calloc(1, sizeof *m);
        if (!m)
            break;
        m->type = type;
        size_t len = 0;
        const uint8_t *d = NULL;
        if (type == ISO_WRITE) {
            m->stream = (int)th_iso_int(a, 2);
            d = th_iso_bytes(a, 3, &len);
        } else if (type == ISO_BLOCK) {
            d = f; /* the whole frame, decoded again when delivered */
            len = n;
        } else if (type == ISO_META) {
            d = th_iso_bytes(a, 2, &len);
        } else if (type == ISO_CLIENT_ASK) {
            m->stream = (int)th_iso_int(a, 2); /* the kind */
            d = th_iso_bytes(a, 3, &len);
            p->client_ask = true;
        } else {
            m->fraction = th_iso_num(a, 2);
            m->text = th_iso_strdup(a, 3);
            d = th_iso_bytes(a, 4, &len);
        }
        if (d && len && !(m->data = malloc(len))) {
            msg_free(m);
            break;
        }
        if (d && len)
            memcpy(m->data, d, len);
        m->len = len;
        m->cost = len + (m->text ? strlen(m->text) : 0) + MSG_COST;
        if (p->tail)
            p->tail->next = m;
        else
            p->head = m;
        p->tail = m;
        p->queued += m->cost; /* a frame without bytes costs too */
        pthread_cond_signal(&p->cv);
        /* Back pressure: the call's owner drains; the worker waits. */
        while (p->queued > ISO_QUEUE_MAX && !p->done && !P->closing) {
            struct timespec ts;
            deadline_in(&ts, 50);
            pthread_cond_timedwait(&P->cv, &P->mu, &ts);
            if (!find_pend(w, (uint64_t)th_iso_int(a, 1)))
                break;
        }
        break;
    }
    case ISO_UPDATED: {
        /* resource_updated() in the worker: the proxy's api checks that
         * the URI is one of this plugin's (a worker cannot speak for
         * another plugin's resources) before anyone hears of it */
        bool serving = P->serving;
        pthread_mutex_unlock(&P->mu);
        size_t ul = 0;
        const uint8_t *ub = th_iso_bytes(a, 1, &ul);
        if (!serving) {
            th_log_debug("plugin %s: worker %d announced an update while "
                         "the plugin is not serving: ignored", P->name,
                         (int)w->pid);
        } else if (ub && ul && ul <= 2048 && !memchr(ub, 0, ul) &&
            th_utf8_valid(ub, ul)) {
            char *uri = th_iso_strdup(a, 1);
            if (uri && P->plugin)
                P->plugin->api.resource_updated(&P->plugin->api, uri);
            free(uri);
        } else {
            th_log_debug("plugin %s: worker %d announced an update of a "
                         "malformed URI: ignored", P->name, (int)w->pid);
        }
        msgpack_unpacked_destroy(&u);
        return true;
    }
    case ISO_DONE:
    case ISO_ANSWER: {
        /* Only the first end of a request counts, and only of its kind: a
         * DONE ends a call, an ANSWER an ask; an end of an id never sent,
         * a second end, the wrong kind: ignored (logged).  */
        pend *p = find_pend(w, (uint64_t)th_iso_int(a, 1));
        if (!p || p->done || (type == ISO_DONE) != (p->ask == 0)) {
            th_log_debug("plugin %s: worker %d ended request %llu, which "
                         "it was not running: ignored", P->name,
                         (int)w->pid,
                         (unsigned long long)th_iso_int(a, 1));
            break;
        }
        p->status = (int)th_iso_int(a, 2);
        if (type == ISO_DONE) { /* (a negative one reads as none) */
            int64_t ra = th_iso_int(a, 3);
            p->retry_after_ms = ra > 0 ? (uint64_t)ra : 0;
        }
        if (type == ISO_ANSWER)
            p->answer = th_iso_strdup(a, 3);
        if (type == ISO_ANSWER && p->ask >= ISO_ASK_READ) {
            size_t bl = 0;
            const uint8_t *bb = th_iso_bytes(a, 4, &bl);
            p->blob_len = bl;
            /* the worker's word: capped, so that a count added to it
             * (the answer's total) cannot wrap */
            p->dropped = a->size > 5 && a->ptr[5].type ==
                         MSGPACK_OBJECT_POSITIVE_INTEGER
                             ? a->ptr[5].via.u64 : 0;
            if (p->dropped > UINT32_MAX)
                p->dropped = UINT32_MAX;
            if (bl > p->blob_max)
                p->blob_over = true;
            else if (bb && bl && (p->blob = malloc(bl)))
                memcpy(p->blob, bb, bl);
            else if (bb && bl)
                p->blob_over = true; /* out of memory: refused too */
        }
        p->done = true;
        w->ends++;
        if (type == ISO_DONE)
            w->finished++;
        if (P->loop || P->unhealthy) {
            if (P->unhealthy)
                th_log_info("plugin %s: healthy again", P->name);
            P->loop = 0;
            P->unhealthy = false;
            P->backoff_ms = 0;
        }
        pthread_cond_signal(&p->cv);
        break;
    }
    default:
        break;
    }
    pthread_mutex_unlock(&P->mu);
    msgpack_unpacked_destroy(&u);
    return true;
}

/* Reading.  The socket of a worker has one reader at a time (w->rd):
 *  - the reader thread (RD_THREAD) while the worker starts, while it is
 *    idle, and once a call saw the socket end (it reaps);
 *  - or the thread of a call that waits for its answer (RD_CALLER,
 *    w->rd_pend): it reads the socket itself, gets its own frames
 *    without a hand-off and routes the others' to them, so a call costs
 *    one wake-up each way, like a bare round trip.  When its call ends
 *    it hands the socket to another waiting call, or frees it;
 *  - or nobody (RD_FREE): the next call takes it.
 * The reader thread does not poll the socket while calls come (it would
 * wake up for every answer): it looks every ISO_READER_IDLE_MS and takes
 * the socket back when no call started since it last looked (a LOG from
 * an idle plugin waits that long at most).  A call that finds the reader
 * thread reading waits for its frames as they are routed, and the reader
 * thread hands the socket to it. */

/* The reader thread's side of the socket: what it read, routed.  false
 * when the socket ended or the worker misbehaved (*bad). */
static bool reader_read(pool *P, worker *w, bool *bad)
{
    int r = th_iso_rx_fill(&w->rx, w->sock);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return true;
    if (r <= 0)
        return false;
    pthread_mutex_lock(&P->mu);
    uint64_t ends = w->ends;
    pthread_mutex_unlock(&P->mu);
    const uint8_t *f;
    size_t len;
    int t;
    while ((t = th_iso_take(&w->rx, &f, &len)) == 1)
        if (!route(P, w, f, len, NULL)) {
            *bad = true;
            return false;
        }
    if (t < 0) {
        frame_refused(P, w);
        *bad = true;
        return false;
    }
    /* Calls are running: the socket goes to one of them, or is left
     * free for the next. */
    pthread_mutex_lock(&P->mu);
    if (w->rd == RD_THREAD && w->ready_state == 1 && !w->sock_eof) {
        pend *q = w->calls;
        while (q && q->done)
            q = q->next;
        if (q) {
            w->rd = RD_CALLER;
            w->rd_pend = q;
            pthread_cond_signal(&q->cv);
        } else if (w->ends != ends) {
            w->rd = RD_FREE;
        }
    }
    pthread_mutex_unlock(&P->mu);
    return true;
}

static void *reader_main(void *arg)
{
    worker *w = arg;
    pool *P = w->pool;
    th_buf eb = TH_BUF_INIT;
    bool sock_open = true, err_open = true, bad = false;
    uint64_t seen = 0;
    bool looked = false; /* one period without the socket passed */
    while (sock_open) {
        pthread_mutex_lock(&P->mu);
        if (w->rd == RD_FREE &&
            (w->sock_eof || (looked && w->call_seq == seen)))
            w->rd = RD_THREAD;
        bool mine = w->rd == RD_THREAD, is_free = w->rd == RD_FREE;
        looked = !mine;
        seen = w->call_seq;
        pthread_mutex_unlock(&P->mu);
        struct pollfd pf[4] = {{w->evfd, POLLIN, 0},
                               {err_open ? w->errfd : -1, POLLIN, 0},
                               {w->pidfd, POLLIN, 0},
                               {w->sock, POLLIN, 0}};
        /* Free: look again soon to take it back; with a call: that call
         * frees it or hands it on, so look now and then. */
        int n = poll(pf, mine ? 4 : 3,
                     mine      ? -1
                     : is_free ? ISO_READER_IDLE_MS
                               : 10 * ISO_READER_IDLE_MS);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        if (pf[0].revents & POLLIN) {
            uint64_t v;
            ssize_t r = read(w->evfd, &v, sizeof v);
            (void)r;
        }
        if (err_open && (pf[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            char buf[4096];
            ssize_t r = read(w->errfd, buf, sizeof buf);
            if (r > 0) {
                if (th_buf_append(&eb, buf, (size_t)r) == 0)
                    log_stderr(P, w, &eb, false);
            } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
                err_open = false;
            }
        }
        if (mine && (pf[3].revents & (POLLIN | POLLHUP | POLLERR)) &&
            !reader_read(P, w, &bad))
            sock_open = bad;
        if (bad)
            break;
        /* The process ended: its death counts, not the socket's end, which
         * a process it left behind may hold open.  What it sent before is
         * read first when the socket is the reader's. */
        if (pf[2].revents & (POLLIN | POLLHUP | POLLERR)) {
            if (mine)
                while (reader_read(P, w, &bad) && !bad &&
                       poll(&pf[3], 1, 0) == 1 && (pf[3].revents & POLLIN))
                    ;
            break;
        }
    }
    /* Dead or misbehaving: make sure it is gone, then reap it. */
    bool killed_by_us = false;
    char kill_why[sizeof w->kill_why];
    pthread_mutex_lock(&P->mu);
    killed_by_us = w->reaped; /* reused as "we sent SIGKILL" before reap */
    memcpy(kill_why, w->kill_why, sizeof kill_why);
    pthread_mutex_unlock(&P->mu);
    int status = 0;
    pid_t r;
    /* A worker that closed its socket but lives: give it a moment.  With
     * a pidfd, wait for exactly its end (up to 500 ms), then kill. */
    if (w->pidfd >= 0) {
        struct pollfd pp = {w->pidfd, POLLIN, 0};
        int64_t until = now_ms() + 500;
        while (poll(&pp, 1, (int)(until - now_ms() > 0 ? until - now_ms()
                                                        : 0)) < 0 &&
               errno == EINTR)
            ;
        if (!(pp.revents & POLLIN))
            worker_kill(w);
    }
    for (int i = 0; i < 100; i++) {
        r = waitpid(w->pid, &status, WNOHANG);
        if (r == w->pid || (r < 0 && errno != EINTR))
            break;
        if (i == 50 || (i == 0 && !sock_open && false))
            kill(w->pid, SIGKILL);
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
        r = 0;
    }
    if (r != w->pid) {
        kill(w->pid, SIGKILL);
        while ((r = waitpid(w->pid, &status, 0)) < 0 && errno == EINTR)
            ;
    }
    kill(-w->pid, SIGKILL); /* whatever it left in its process group */
    /* Its cgroup: whatever is left in it is killed (a PID namespace took
     * it all with its init already), then the leaf goes, before the
     * calls hear of the death. */
    th_iso_cg_remove(&w->cg, 5000);
    /* The rest of its stderr. */
    if (err_open) {
        char buf[4096];
        ssize_t n;
        int fl = fcntl(w->errfd, F_GETFL);
        fcntl(w->errfd, F_SETFL, fl | O_NONBLOCK);
        while ((n = read(w->errfd, buf, sizeof buf)) > 0)
            if (th_buf_append(&eb, buf, (size_t)n) != 0)
                break;
    }
    log_stderr(P, w, &eb, true);
    th_buf_destroy(&eb);
    /* Notes: "memory" from the worker near its limit; "status N" from
     * the init of its PID namespace: the worker's own wait status. */
    char note[256] = "";
    {
        int fl = fcntl(w->notefd, F_GETFL);
        fcntl(w->notefd, F_SETFL, fl | O_NONBLOCK);
        /* The plugin may write there too: read it all (bounded), keep
         * its end, where the init wrote last. */
        char buf[4096];
        size_t have = 0;
        ssize_t n;
        for (int i = 0; i < 64 && (n = read(w->notefd, buf, sizeof buf)) > 0;
             i++) {
            size_t k = (size_t)n;
            if (k >= sizeof note - 1) {
                memcpy(note, buf + k - (sizeof note - 1), sizeof note - 1);
                have = sizeof note - 1;
            } else {
                size_t keep = have + k > sizeof note - 1
                                  ? sizeof note - 1 - k
                                  : have;
                memmove(note, note + have - keep, keep);
                memcpy(note + keep, buf, k);
                have = keep + k;
            }
        }
        note[have] = '\0';
        for (size_t i = 0; i < have; i++)
            if (note[i] == '\0')
                note[i] = ' ';
    }
    const char *st = NULL;
    for (const char *q = note; (q = strstr(q, "status ")); q++)
        st = q; /* the last one: the init's */
    if (st && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        status = atoi(st + 7);
    char words[512], shortw[128];
    death_words(P, status, strstr(note, "memory") != NULL, killed_by_us,
                kill_why, words, sizeof words, shortw, sizeof shortw);
    pthread_mutex_lock(&P->mu);
    w->alive = false;
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
                 w->ncalls == 0 && P->closing;
    unsigned failed = 0;
    for (pend *p = w->calls; p; p = p->next) {
        if (p->done)
            continue;
        p->death = strdup(words);
        p->death_code = TH_EPLUGIN_CRASHED;
        p->done = true;
        failed++;
        pthread_cond_signal(&p->cv);
    }
    if (!clean && w->ready_state == 1 && !w->refused)
        record_death(P, w, shortw);
    bool refused = w->refused;
    if (w->ready_state == 0) {
        w->ready_state = -1;
        if (!w->fail_msg) {
            char m[300];
            snprintf(m, sizeof m, "the worker died while starting (%s)",
                     shortw);
            w->fail_msg = strdup(m);
        }
    }
    pthread_cond_broadcast(&P->cv);
    pthread_mutex_unlock(&P->mu);
    if (refused)
        th_log_debug("plugin %s: refused worker %d ended (%s)", P->name,
                     (int)w->pid, shortw);
    else if (!clean)
        th_log_error("plugin %s: worker %d died (%s); %u call%s failed",
                     P->name, (int)w->pid, shortw, failed,
                     failed == 1 ? "" : "s");
    pthread_mutex_lock(&P->mu);
    w->reader_done = true;
    pthread_mutex_unlock(&P->mu);
    return NULL;
}

/* ---- starting a worker ------------------------------------------------------------- */

static void worker_free(worker *w)
{
    if (!w)
        return;
    if (w->sock >= 0)
        close(w->sock);
    if (w->errfd >= 0)
        close(w->errfd);
    if (w->notefd >= 0)
        close(w->notefd);
    if (w->evfd >= 0)
        close(w->evfd);
    if (w->pidfd >= 0)
        close(w->pidfd);
    th_iso_cg_remove(&w->cg, 5000); /* (a worker that never ran) */
    th_iso_cg_destroy(&w->cg);
    th_iso_rx_destroy(&w->rx);
    free(w->fail_msg);
    free(w->hello);
    free(w->itools);
    pthread_mutex_destroy(&w->send_mu);
    free(w);
}

/* Joins the reader (the process is gone then) and frees. */
static void worker_end(worker *w)
{
    if (w->has_reader)
        pthread_join(w->reader, NULL);
    worker_free(w);
}

/* The host's own program: the path /proc/self/exe names (what a tool
 * such as valgrind reports as the program it runs), or the link itself
 * when the file was deleted or replaced since the host started. */
static char g_self[4096] = "/proc/self/exe";
static pthread_once_t g_self_once = PTHREAD_ONCE_INIT;

static void find_self(void)
{
    char buf[sizeof g_self];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0 || n >= (ssize_t)sizeof buf - 1)
        return;
    buf[n] = '\0';
    static const char del[] = " (deleted)";
    if ((size_t)n >= sizeof del - 1 &&
        strcmp(buf + n - (sizeof del - 1), del) == 0)
        return;
    memcpy(g_self, buf, (size_t)n + 1);
}

/* How a pool's workers are contained (docs/isolation.md, "Containment"),
 * as the last start found it. */
enum {
    CONTAIN_UNSET,
    CONTAIN_PIDNS,  /* a PID namespace each: nothing outlives the worker */
    CONTAIN_USERNS, /* the same, in a user namespace (a host not root) */
    CONTAIN_REAPER, /* a subreaper init kills the tree, death by pidfd */
    CONTAIN_SOCKET  /* the same, death seen as the socket's end only */
};

static const char *const g_contain_words[] = {
    "", "a PID namespace of its own (every process it starts dies with it)",
    "a user and a PID namespace of its own (the host is not root; every "
    "process it starts dies with it)",
    "a subreaper init of its own, no PID namespace (every process it "
    "starts is killed when the worker ends, whatever session or group it "
    "made)",
    "a subreaper init of its own, no PID namespace, and its death is seen "
    "when its socket ends (no pidfd: a process it leaves holding the "
    "socket delays that)"};

/* The same for host.stats ("containment"); [0]: a cgroup each (with
 * the level below it). */
static const char *const g_contain_names[] = {
    "cgroup", "pid namespace", "user namespace", "subreaper",
    "subreaper (no pidfd)"};

/* In the child of clone(), until execve(): raw system calls only (no
 * lock of libc or of a sanitizer runtime another thread may have held at
 * the clone; the memory is the host's).  Sets fds 0-5 up, closes the
 * rest, resets the signals, makes a process group of its own (not a
 * session: a session is a scheduling group of its own under autogroup,
 * which made a crash loop 2x slower on a loaded machine; the filter
 * refuses TIOCSTI on any terminal), runs the worker. */
struct k_sigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    unsigned long mask;
};

typedef struct child_args {
    const char *exe;
    char **argv, **envp;
    const int *hi;
    int cg_fd;          /* its cgroup's cgroup.procs, -1: none (or
                           clone3 put it there) */
    bool cg_ns;         /* a cgroup namespace rooted at its cgroup */
    volatile int cg_err; /* set by the child: the write was refused */
} child_args;

/* Writes `text` to /proc/PID/FILE; 0 or an errno. */
static int write_proc(pid_t pid, const char *file, const char *text)
{
    char dir[32];
    snprintf(dir, sizeof dir, "/proc/%d", (int)pid);
    return th_iso_write_file(dir, file, text);
}

/* The worker `pid` runs in a user namespace of its own, created by this
 * host (its owner): the host's uid and gid map to themselves there, so
 * files, signals and /proc see the same ids and files it creates get
 * them.  Written by the host after the worker's execve (the host may be
 * non-dumpable, which would make its child's /proc files root's before
 * that); the worker waits for the byte spawn() sends next.  0 or errno. */
static int map_ids(pid_t pid)
{
    char um[48], gm[48];
    snprintf(um, sizeof um, "%u %u 1\n", (unsigned)geteuid(),
             (unsigned)geteuid());
    snprintf(gm, sizeof gm, "%u %u 1\n", (unsigned)getegid(),
             (unsigned)getegid());
    int e = write_proc(pid, "setgroups", "deny");
    if (!e)
        e = write_proc(pid, "uid_map", um);
    if (!e)
        e = write_proc(pid, "gid_map", gm);
    return e;
}

static int child_exec(void *arg)
{
    child_args *a = arg;
    /* Into its cgroup before anything else runs ("0": the writer, whatever
     * its pid in a new PID namespace), then a cgroup namespace rooted
     * there: a process of the worker that could write cgroup.procs files
     * (it cannot: another uid) still could not move out of it (the kernel
     * refuses moves from or to outside the writer's namespace root). */
    if (a->cg_fd >= 0 && syscall(SYS_write, a->cg_fd, "0", 1) != 1) {
        a->cg_err = errno ? errno : EIO;
        syscall(SYS_exit_group, 126);
    }
    if (a->cg_ns)
        syscall(SYS_unshare, CLONE_NEWCGROUP);
    struct k_sigaction dfl = {SIG_DFL, 0, NULL, 0};
    for (int sig = 1; sig <= 64; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            syscall(SYS_rt_sigaction, sig, &dfl, NULL, 8);
    long nul = syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDWR, 0);
    if (nul < 0 || syscall(SYS_dup2, nul, 0) < 0 ||
        syscall(SYS_dup2, nul, 1) < 0 ||
        syscall(SYS_dup2, a->hi[2], 2) < 0 ||
        syscall(SYS_dup2, a->hi[0], ISO_FD_SOCK) < 0 ||
        syscall(SYS_dup2, a->hi[1], ISO_FD_PLUGIN) < 0 ||
        syscall(SYS_dup2, a->hi[3], ISO_FD_NOTE) < 0)
        syscall(SYS_exit_group, 127);
    if (syscall(SYS_close_range, ISO_FD_NOTE + 1, ~0u, 0) != 0)
        for (long fd = ISO_FD_NOTE + 1; fd < 65536; fd++)
            syscall(SYS_close, fd);
    syscall(SYS_setpgid, 0, 0);
    uint64_t none = 0;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, 8);
    syscall(SYS_execve, a->exe, a->argv, a->envp);
    syscall(SYS_exit_group, 127);
    return 127;
}

#if defined(__x86_64__) && defined(SYS_clone3)
#define ISO_HAVE_CLONE3 1
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL /* <linux/sched.h>, 5.7 */
#endif
/* struct clone_args of <linux/sched.h> up to `cgroup` (kernel 5.7). */
typedef struct iso_clone_args {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack,
        stack_size, tls, set_tid, set_tid_size, cgroup;
} iso_clone_args;

/* clone3() whose child, on the stack `ca` names, runs fn(arg) and exits
 * with what it returns: what clone() of glibc does for clone(), which it
 * has no wrapper for with clone3.  The child shares the caller's memory
 * (CLONE_VM), so it must not return into the caller's frames: it never
 * leaves the asm.  The parent gets the pid or -errno. */
static long clone3_run(iso_clone_args *ca, int (*fn)(void *), void *arg)
{
    long ret;
    __asm__ volatile("syscall\n\t"
                     "test %%rax, %%rax\n\t"
                     "jnz 1f\n\t"
                     "xor %%ebp, %%ebp\n\t"
                     "mov %[arg], %%rdi\n\t"
                     "call *%[fn]\n\t"
                     "mov %%eax, %%edi\n\t"
                     "mov %[ex], %%eax\n\t"
                     "syscall\n\t"
                     "hlt\n\t"
                     "1:"
                     : "=a"(ret)
                     : "0"((long)SYS_clone3), "D"(ca), "S"(sizeof *ca),
                       [fn] "r"(fn), [arg] "r"(arg),
                       [ex] "i"(SYS_exit_group)
                     : "rcx", "r11", "memory", "cc");
    return ret;
}
static int g_no_clone3; /* clone3 answered ENOSYS once */
#endif

/* Starts the worker with clone(): in a PID namespace of its own when the
 * host may make one (root; else in a user namespace of its own too), and
 * with a pidfd.  Without a PID namespace the worker is a subreaper init
 * (its --reaper argument).  P->contain_why says what was refused.  Like posix_spawn, the
 * child shares the host's memory (CLONE_VM, on a stack of its own) and
 * the host's thread waits until it has run execve() (CLONE_VFORK): no
 * copy of the host's page tables, no copy-on-write faults for the host's
 * other threads.  1: started; 0: clone() cannot do it here (the caller
 * uses posix_spawn); -1: failed (errno). */
static int start_contained(pool *P, worker *w, const char *exe, char **argv,
                           int uarg, const int *hi)
{
    /* network: false also gets a network namespace of its own (only
     * loopback, no abstract AF_UNIX sockets of the host) and an IPC one */
    int ns = P->network ? 0 : CLONE_NEWNET | CLONE_NEWIPC;
    /* Without root a PID namespace needs a user namespace of its own. */
    int user = geteuid() == 0 ? 0 : CLONE_NEWUSER;
    const int tries[] = {user | CLONE_NEWPID | ns, user | CLONE_NEWPID, 0};
    enum { STACK = 64 * 1024 };
    void *stack = mmap(NULL, STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        return -1;
    child_args a = {exe, argv, P->envp, hi, w->cg.procs_fd, w->cg.dir != NULL,
                    0};
    sigset_t all, old;
    sigfillset(&all);
    int res = 0;
    P->contain_why[0] = '\0';
    for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        int pidfd = -1;
        bool userns = (tries[i] & CLONE_NEWUSER) != 0;
        argv[uarg] = userns ? "1" : "0"; /* the worker waits for its map */
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pid_t pid = -1;
        int e = 0;
#ifdef ISO_HAVE_CLONE3
        /* Into its cgroup by clone3 (CLONE_INTO_CGROUP): no migration,
         * which costs a write lock of every thread group and an RCU grace
         * period; else clone() and the child writes cgroup.procs. */
        if (w->cg.dir && w->cg.dir_fd >= 0 &&
            !__atomic_load_n(&g_no_clone3, __ATOMIC_RELAXED)) {
            iso_clone_args ca;
            memset(&ca, 0, sizeof ca);
            ca.flags = (uint64_t)(unsigned)(tries[i] | CLONE_VM |
                                            CLONE_VFORK | CLONE_PIDFD) |
                       CLONE_INTO_CGROUP;
            ca.pidfd = (uint64_t)(uintptr_t)&pidfd;
            ca.exit_signal = SIGCHLD;
            ca.stack = (uint64_t)(uintptr_t)stack;
            ca.stack_size = STACK;
            ca.cgroup = (uint64_t)w->cg.dir_fd;
            a.cg_fd = -1;
            long r = clone3_run(&ca, child_exec, &a);
            if (r > 0)
                pid = (pid_t)r;
            else if (r == -ENOSYS)
                __atomic_store_n(&g_no_clone3, 1, __ATOMIC_RELAXED);
            if (pid < 0)
                a.cg_fd = w->cg.procs_fd; /* clone() decides below */
        }
        if (pid < 0)
#endif
        {
            pid = clone(child_exec, (char *)stack + STACK,
                        tries[i] | CLONE_VM | CLONE_VFORK | CLONE_PIDFD |
                            SIGCHLD,
                        &a, &pidfd);
            e = errno;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (pid > 0 && a.cg_err) {
            /* its cgroup refused it: the same level again without one */
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
            close(pidfd);
            snprintf(P->cg_why, sizeof P->cg_why,
                     "cannot move a worker into %.180s: %s", w->cg.dir,
                     strerror(a.cg_err));
            th_iso_cg_remove(&w->cg, 1000);
            th_iso_cg_destroy(&w->cg);
            a.cg_fd = -1;
            a.cg_ns = false;
            a.cg_err = 0;
            i--;
            continue;
        }
        if (pid > 0 && userns && (e = map_ids(pid)) != 0) {
            kill(pid, SIGKILL);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
            close(pidfd);
            size_t l = strlen(P->contain_why);
            snprintf(P->contain_why + l, sizeof P->contain_why - l,
                     "%sa user namespace's id map refused (%s)",
                     l ? "; " : "", strerror(e));
            continue;
        }
        if (pid > 0) {
            w->pid = pid;
            w->pidfd = pidfd;
            w->reaper = tries[i] == 0;
            w->userns = userns;
            P->contain = !tries[i] ? CONTAIN_REAPER
                         : user    ? CONTAIN_USERNS
                                   : CONTAIN_PIDNS;
            P->netns = (tries[i] & CLONE_NEWNET) != 0;
            res = 1;
            break;
        }
        if (e == EAGAIN || e == ENOMEM) {
            errno = e;
            res = -1;
            break;
        }
        /* refused: say so once per kind of namespace */
        size_t l = strlen(P->contain_why);
        const char *what = (tries[i] & CLONE_NEWNET) ? NULL
                           : tries[i] & CLONE_NEWUSER
                               ? "a user and a PID namespace"
                           : tries[i] ? "a PID namespace"
                                      : "clone()";
        if (what)
            snprintf(P->contain_why + l, sizeof P->contain_why - l,
                     "%s%s refused (%s)", l ? "; " : "", what, strerror(e));
    }
    int e = errno;
    munmap(stack, STACK);
    errno = e;
    return res; /* 0: EPERM, EINVAL, ENOSYS: a sandbox or a tool refuses */
}

static int spawn(pool *P, worker **out, th_error *err)
{
    *out = NULL;
    int sv[2] = {-1, -1}, ep[2] = {-1, -1}, np[2] = {-1, -1};
    int hi[4] = {-1, -1, -1, -1};
    worker *w = calloc(1, sizeof *w);
    if (!w)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    w->pool = P;
    w->sock = w->errfd = w->notefd = w->pidfd = -1;
    w->cg.procs_fd = w->cg.dir_fd = -1;
    w->rd = RD_THREAD; /* HELLO, READY */
    w->rx.max = P->max_frame;
    pthread_mutex_init(&w->send_mu, NULL);
    if ((w->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
        pipe2(ep, O_CLOEXEC) != 0 || pipe2(np, O_CLOEXEC) != 0) {
        th_error_set(err, TH_ELOAD, "%s: cannot start a worker: %s", P->path,
                     strerror(errno));
        goto fail;
    }
    /* Out of the way of 0..5 before the dup2s of the child. */
    int src[4] = {sv[1], P->plugfd, ep[1], np[1]};
    for (int i = 0; i < 4; i++)
        if ((hi[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 10)) < 0) {
            th_error_set(err, TH_ELOAD, "%s: cannot start a worker: %s",
                         P->path, strerror(errno));
            goto fail;
        }
    char a_mem[24], a_cpu[24], a_files[24], a_procs[24], a_frame[24];
    snprintf(a_mem, sizeof a_mem, "%llu", (unsigned long long)P->lim.memory);
    snprintf(a_cpu, sizeof a_cpu, "%u", P->lim.cpu_seconds);
    snprintf(a_files, sizeof a_files, "%u", P->lim.open_files);
    snprintf(a_procs, sizeof a_procs, "%u", P->lim.processes);
    snprintf(a_frame, sizeof a_frame, "%zu", P->max_frame);
    char *argv[32];
    int k = 0;
    argv[k++] = "toolhost";
    argv[k++] = "worker";
    argv[k++] = "--name";
    argv[k++] = P->name;
    argv[k++] = "--path";
    argv[k++] = P->path;
    argv[k++] = "--memory";
    argv[k++] = a_mem;
    argv[k++] = "--cpu";
    argv[k++] = a_cpu;
    argv[k++] = "--files";
    argv[k++] = a_files;
    argv[k++] = "--procs";
    argv[k++] = a_procs;
    argv[k++] = "--max-frame"; /* it sends nothing longer */
    argv[k++] = a_frame;
    argv[k++] = "--network";
    argv[k++] = P->network ? "1" : "0";
    char a_uid[24];
    if (P->uid) {
        snprintf(a_uid, sizeof a_uid, "%u", P->uid);
        argv[k++] = "--uid";
        argv[k++] = a_uid;
    } else if (P->user && strcmp(P->user, "auto") != 0) {
        argv[k++] = "--user";
        argv[k++] = P->user;
    }
    /* the init of a PID namespace ignores it */
    argv[k++] = "--reaper";
    argv[k++] = "1";
    argv[k++] = "--userns";
    int uarg = k;
    argv[k++] = "0";
    argv[k] = NULL;
    pthread_once(&g_self_once, find_self);
    const char *exe = g_exe ? g_exe : g_self;
    /* A cgroup of its own first, where the host may make one. */
    P->cg_why[0] = '\0';
    if (th_iso_cg_setup(P->cg_why, sizeof P->cg_why)) {
        char leaf[160];
        uint64_t seq = __atomic_add_fetch(&P->cg_seq, 1, __ATOMIC_RELAXED);
        snprintf(leaf, sizeof leaf, "%.100s-%llu-%llu", P->name,
                 (unsigned long long)P->generation, (unsigned long long)seq);
        int e = th_iso_cg_make(leaf, P->lim.memory, P->lim.processes, &w->cg);
        if (e)
            snprintf(P->cg_why, sizeof P->cg_why,
                     "cannot create a cgroup for it: %s", strerror(e));
    }
    int rc = start_contained(P, w, exe, argv, uarg, hi);
    P->cg = rc == 1 && w->cg.dir;
    if (rc == 1)
        th_iso_cg_placed(&w->cg);
    else if (w->cg.dir) {
        /* posix_spawn cannot place it before execve: no cgroup */
        snprintf(P->cg_why, sizeof P->cg_why,
                 "clone() refused: a worker started by posix_spawn gets "
                 "none");
        th_iso_cg_remove(&w->cg, 1000);
        th_iso_cg_destroy(&w->cg);
    }
    if (rc < 0) {
        rc = errno;
        for (int i = 0; i < 4; i++)
            close(hi[i]);
        hi[0] = hi[1] = hi[2] = hi[3] = -1;
        close(sv[1]);
        close(ep[1]);
        close(np[1]);
        sv[1] = ep[1] = np[1] = -1;
        th_error_set(err, TH_ELOAD, "%s: cannot start a worker (%s): %s",
                     P->path, exe, strerror(rc));
        goto fail;
    }
    if (rc == 1) {
        rc = 0;
        goto started;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, hi[2], 2);
    posix_spawn_file_actions_adddup2(&fa, hi[0], ISO_FD_SOCK);
    posix_spawn_file_actions_adddup2(&fa, hi[1], ISO_FD_PLUGIN);
    posix_spawn_file_actions_adddup2(&fa, hi[3], ISO_FD_NOTE);
    posix_spawn_file_actions_addclosefrom_np(&fa, ISO_FD_NOTE + 1);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
    rc = posix_spawn(&w->pid, exe, &fa, &at, argv, P->envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc == 0) {
        w->pidfd = (int)syscall(SYS_pidfd_open, w->pid, 0);
        w->reaper = true;
        P->contain = w->pidfd >= 0 ? CONTAIN_REAPER : CONTAIN_SOCKET;
    }
started:
    for (int i = 0; i < 4; i++)
        close(hi[i]);
    hi[0] = hi[1] = hi[2] = hi[3] = -1;
    close(sv[1]);
    close(ep[1]);
    close(np[1]);
    sv[1] = ep[1] = np[1] = -1;
    if (rc != 0) {
        th_error_set(err, TH_ELOAD, "%s: cannot start a worker (%s): %s",
                     P->path, exe, strerror(rc));
        goto fail;
    }
    w->sock = sv[0];
    /* its ids are mapped (map_ids): the worker may go on */
    if (w->userns && send(w->sock, "M", 1, MSG_NOSIGNAL) != 1)
        worker_kill(w); /* (seen as a death at its start) */
    /* A call reading its answer looks at its deadline and cancellation
     * this often (the reader thread polls first). */
    struct timeval tv = {0, ISO_READER_IDLE_MS * 1000};
    setsockopt(w->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    w->errfd = ep[0];
    w->notefd = np[0];
    sv[0] = ep[0] = np[0] = -1;
    w->alive = true;
    if ((rc = pthread_create(&w->reader, NULL, reader_main, w)) != 0) {
        worker_kill(w);
        waitpid(w->pid, NULL, 0);
        th_error_set(err, TH_ELOAD, "%s: cannot start a thread: %s", P->path,
                     strerror(rc));
        goto fail;
    }
    w->has_reader = true;
    pthread_mutex_lock(&P->mu);
    bool first = !P->contain_said || P->contain_said != P->contain ||
                 P->cg_said != P->cg;
    P->contain_said = P->contain;
    P->cg_said = P->cg;
    pthread_mutex_unlock(&P->mu);
    /* The operator's view of the containment (docs/isolation.md): the
     * level that applied, and what was refused before it. */
    char cgw[512] = "", whyw[512] = "";
    if (P->cg)
        snprintf(cgw, sizeof cgw,
                 "a cgroup each (%s: every process of the worker is "
                 "counted and killed there; limits: %s), and ",
                 w->cg.dir, th_iso_cg_limits());
    snprintf(whyw, sizeof whyw, "%s%s%s%s%s",
             P->cg ? "" : "; no cgroup (",
             P->cg ? "" : P->cg_why,
             P->cg ? "" : ")",
             P->contain_why[0] ? "; " : "", P->contain_why);
    if (first && (P->cg || P->contain == CONTAIN_PIDNS ||
                  P->contain == CONTAIN_USERNS))
        th_log_info("plugin %s: workers contained by %s%s%s%s", P->name,
                    cgw, g_contain_words[P->contain],
                    P->netns ? "; network: false: a network and an IPC "
                               "namespace of their own"
                             : "",
                    whyw);
    else if (first)
        th_log_warn("plugin %s: workers contained by %s%s", P->name,
                    g_contain_words[P->contain], whyw);
    *out = w;
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (sv[i] >= 0)
            close(sv[i]);
        if (ep[i] >= 0)
            close(ep[i]);
        if (np[i] >= 0)
            close(np[i]);
    }
    for (int i = 0; i < 4; i++)
        if (hi[i] >= 0)
            close(hi[i]);
    worker_free(w);
    return err ? err->code : TH_ELOAD;
}

/* Waits (mu held) until the worker said HELLO (want_ready false) or
 * answered init (true), died, or the start timed out. */
static int wait_worker(pool *P, worker *w, bool want_ready, th_error *err)
{
    int64_t end = now_ms() + ISO_START_TIMEOUT_MS;
    while (w->ready_state == 0 && (want_ready || !w->hello)) {
        int64_t left = end - now_ms();
        if (left <= 0) {
            worker_kill(w);
            return th_error_set(err, TH_ELOAD,
                                "%s: the worker did not start within %ds",
                                P->path, ISO_START_TIMEOUT_MS / 1000);
        }
        struct timespec ts;
        deadline_in(&ts, left);
        pthread_cond_timedwait(&P->cv, &P->mu, &ts);
    }
    if (w->ready_state < 0) {
        const char *m = w->fail_msg ? w->fail_msg : "the worker failed";
        size_t pl = strlen(P->path);
        if (strncmp(m, P->path, pl) == 0 && m[pl] == ':')
            return th_error_set(err, TH_ELOAD, "%s", m);
        return th_error_set(err, TH_ELOAD, "%s: %s", P->path, m);
    }
    return 0;
}

static int send_init(pool *P, worker *w)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    int e = msgpack_pack_array(&pk, 2);
    e |= msgpack_pack_int(&pk, ISO_INIT);
    e |= msgpack_pack_bin_with_body(&pk, P->config, P->config_len);
    if (e) {
        th_buf_destroy(&b);
        return -1;
    }
    return wsend(w, &b);
}

static int same_tools(pool *P, worker *w, th_error *err);

/* Spawns, waits for HELLO, sends INIT, waits for READY.  No lock held on
 * entry.  On failure the worker is gone. */
static int start_ready(pool *P, worker **out, th_error *err)
{
    worker *w;
    int rc = spawn(P, &w, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&P->mu);
    rc = wait_worker(P, w, false, err);
    pthread_mutex_unlock(&P->mu);
    if (rc == 0 && send_init(P, w) != 0)
        rc = th_error_set(err, TH_ELOAD, "%s: the worker went away", P->path);
    if (rc == 0) {
        pthread_mutex_lock(&P->mu);
        rc = wait_worker(P, w, true, err);
        pthread_mutex_unlock(&P->mu);
    }
    if (rc == 0 && P->itools_set && (rc = same_tools(P, w, err))) {
        pthread_mutex_lock(&P->mu);
        w->refused = true; /* the failed start counts, not its death */
        pthread_mutex_unlock(&P->mu);
    }
    if (rc) {
        worker_kill(w);
        worker_end(w);
        return rc;
    }
    *out = w;
    return 0;
}

/* ---- the descriptor from HELLO --------------------------------------------------------- */

static const char *keep(pool *P, char *s)
{
    if (!s)
        return NULL;
    if (P->n_strs == P->cap_strs) {
        size_t cap = P->cap_strs ? P->cap_strs * 2 : 64;
        char **v = realloc(P->strs, cap * sizeof *v);
        if (!v) {
            free(s);
            return NULL;
        }
        P->strs = v;
        P->cap_strs = cap;
    }
    P->strs[P->n_strs++] = s;
    return s;
}

static int build_params(pool *P, const msgpack_object *o,
                        const toolhost_param **out, uint32_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return -1;
    uint32_t n = o->via.array.size;
    if (n == 0)
        return 0;
    toolhost_param *ps = calloc(n, sizeof *ps);
    toolhost_param **v =
        realloc(P->param_arrays, (P->n_param_arrays + 1) * sizeof *v);
    if (!ps || !v) {
        free(ps);
        if (v)
            P->param_arrays = v;
        return -1;
    }
    P->param_arrays = v;
    P->param_arrays[P->n_param_arrays++] = ps;
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size < 7)
            return -1;
        const msgpack_object_array *a = &e->via.array;
        toolhost_param *q = &ps[i];
        q->struct_size = sizeof *q;
        q->name = keep(P, th_iso_strdup(a, 0));
        q->type = (uint32_t)th_iso_int(a, 1);
        q->required = (int)th_iso_int(a, 2);
        q->description = keep(P, th_iso_strdup(a, 3));
        if (a->ptr[4].type == MSGPACK_OBJECT_ARRAY) {
            uint32_t ne = a->ptr[4].via.array.size;
            const char **ev = calloc(ne + 1, sizeof *ev);
            const char ***ea = realloc(P->enum_arrays,
                                       (P->n_enum_arrays + 1) * sizeof *ea);
            if (!ev || !ea) {
                free(ev);
                if (ea)
                    P->enum_arrays = ea;
                return -1;
            }
            P->enum_arrays = ea;
            P->enum_arrays[P->n_enum_arrays++] = ev;
            for (uint32_t k = 0; k < ne; k++)
                ev[k] = keep(P, th_iso_strdup(&a->ptr[4].via.array, k));
            q->enum_values = ev;
        }
        q->default_json = keep(P, th_iso_strdup(a, 5));
        q->item_type = (uint32_t)th_iso_int(a, 6);
    }
    *out = ps;
    *n_out = n;
    return 0;
}

static int p_init(const toolhost_host_api *host, const uint8_t *config,
                  size_t config_len, void **state, char *err, size_t err_size);
static void p_fini(void *state);
static int p_execute(void *state, const toolhost_tool *tool,
                     toolhost_call *call, const uint8_t *args, size_t len);
static int p_needs(void *state, const toolhost_tool *tool, const uint8_t *args,
                   size_t len, char *reason, size_t size);
static int p_validate(void *state, const toolhost_tool *tool,
                      const uint8_t *args, size_t len, char *err, size_t size);

static const toolhost_tool *p_init_tools(void *state, uint32_t *n_tools);
static int p_read(void *state, const toolhost_resource *res, const char *uri,
                  toolhost_content *out, char *err, size_t err_size);
static int p_rcomplete(void *state, const toolhost_resource *res,
                       const char *var, const char *value,
                       toolhost_content *out);
static int p_get(void *state, const toolhost_prompt *prompt,
                 const uint8_t *args, size_t args_len, toolhost_content *out,
                 char *err, size_t err_size);
static int p_pcomplete(void *state, const toolhost_prompt *prompt,
                       const char *arg, const char *value,
                       toolhost_content *out);

/* One tool of HELLO or READY (iso_wire.h) into *t, its strings kept by P.
 * -1 when it is not a tool. */
static int build_tool(pool *P, const msgpack_object *e, toolhost_tool *t)
{
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size < 9)
        return -1;
    const msgpack_object_array *a = &e->via.array;
    t->struct_size = sizeof *t;
    t->name = keep(P, th_iso_strdup(a, 0));
    t->description = keep(P, th_iso_strdup(a, 1));
    t->long_description = keep(P, th_iso_strdup(a, 2));
    if (build_params(P, &a->ptr[3], &t->params, &t->n_params))
        return -1;
    t->stdout_type = (uint32_t)th_iso_int(a, 4);
    t->stderr_type = (uint32_t)th_iso_int(a, 5);
    t->flags = (uint32_t)th_iso_int(a, 6);
    t->execute = p_execute;
    if (th_iso_int(a, 7))
        t->needs_permission = p_needs;
    if (th_iso_int(a, 8))
        t->validate_args = p_validate;
    t->user_data = P;
    if (a->size >= 11) {
        t->title = keep(P, th_iso_strdup(a, 9));
        t->output_schema = keep(P, th_iso_strdup(a, 10));
    }
    if (a->size >= 12)
        t->input_schema = keep(P, th_iso_strdup(a, 11));
    if (a->size >= 13 && a->ptr[12].type == MSGPACK_OBJECT_ARRAY) {
        /* the tags (ABI 1.5), NULL-terminated; the loader checks them */
        const msgpack_object_array *g = &a->ptr[12].via.array;
        uint32_t ng = g->size > TOOLHOST_MAX_TAGS + 1 ? TOOLHOST_MAX_TAGS + 1
                                                      : g->size;
        const char **tv = calloc(ng + 1, sizeof *tv);
        const char ***ta = realloc(P->enum_arrays,
                                   (P->n_enum_arrays + 1) * sizeof *ta);
        if (ta)
            P->enum_arrays = ta;
        if (!tv || !ta) {
            free(tv);
            return -1;
        }
        P->enum_arrays[P->n_enum_arrays++] = tv;
        for (uint32_t k = 0; k < ng; k++)
            if (!(tv[k] = keep(P, th_iso_strdup(g, k))))
                return -1;
        t->tags = tv;
    }
    return 0;
}

/* HELLO's resources and prompts (ABI 1.4; absent from an older
 * worker's) into P->res and P->prm.  -1 when they are not of that form;
 * the loader (th_content_load) checks what they say, as an in-process
 * plugin's: URIs and templates, names, UTF-8, duplicates, arguments. */
static int build_content(pool *P, const msgpack_object_array *d)
{
    if (d->size < 8)
        return 0;
    const msgpack_object *ro = &d->ptr[6], *po = &d->ptr[7];
    if (ro->type != MSGPACK_OBJECT_ARRAY || po->type != MSGPACK_OBJECT_ARRAY)
        return -1;
    uint32_t nr = ro->via.array.size, np = po->via.array.size;
    if ((nr && !(P->res = calloc(nr, sizeof *P->res))) ||
        (np && !(P->prm = calloc(np, sizeof *P->prm))))
        return -1;
    for (uint32_t i = 0; i < nr; i++) {
        const msgpack_object *e = &ro->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size < 6)
            return -1;
        const msgpack_object_array *a = &e->via.array;
        toolhost_resource *r = &P->res[i];
        r->struct_size = sizeof *r;
        r->uri = keep(P, th_iso_strdup(a, 0));
        r->name = keep(P, th_iso_strdup(a, 1));
        r->title = keep(P, th_iso_strdup(a, 2));
        r->description = keep(P, th_iso_strdup(a, 3));
        r->mime_type = keep(P, th_iso_strdup(a, 4));
        r->read = p_read;
        if (th_iso_int(a, 5))
            r->complete = p_rcomplete;
        r->user_data = P;
        P->n_res = i + 1;
    }
    for (uint32_t i = 0; i < np; i++) {
        const msgpack_object *e = &po->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size < 5)
            return -1;
        const msgpack_object_array *a = &e->via.array;
        toolhost_prompt *q = &P->prm[i];
        q->struct_size = sizeof *q;
        q->name = keep(P, th_iso_strdup(a, 0));
        q->title = keep(P, th_iso_strdup(a, 1));
        q->description = keep(P, th_iso_strdup(a, 2));
        if (build_params(P, &a->ptr[3], &q->args, &q->n_args))
            return -1;
        q->get = p_get;
        if (th_iso_int(a, 4))
            q->complete = p_pcomplete;
        q->user_data = P;
        P->n_prm = i + 1;
    }
    P->desc.resources = P->res;
    P->desc.n_resources = P->n_res;
    P->desc.prompts = P->prm;
    P->desc.n_prompts = P->n_prm;
    return 0;
}

/* An array of tools (HELLO's, READY's) into a new array *out of *n. */
static int build_tools(pool *P, const msgpack_object *o, toolhost_tool **out,
                       uint32_t *n)
{
    *out = NULL;
    *n = 0;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return -1;
    uint32_t nt = o->via.array.size;
    toolhost_tool *ts = calloc(nt ? nt : 1, sizeof *ts);
    if (!ts)
        return -1;
    *out = ts; /* the caller's to free, whole or not */
    for (uint32_t i = 0; i < nt; i++)
        if (build_tool(P, &o->via.array.ptr[i], &ts[i]))
            return -1;
    *n = nt;
    return 0;
}

static int build_desc(pool *P, const uint8_t *f, size_t n)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = -1;
    if (!frame_ok(f, n) ||
        msgpack_unpack_next(&u, (const char *)f, n, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        u.data.type != MSGPACK_OBJECT_ARRAY || u.data.via.array.size < 2 ||
        u.data.via.array.ptr[1].type != MSGPACK_OBJECT_ARRAY ||
        u.data.via.array.ptr[1].via.array.size < 5)
        goto out;
    const msgpack_object_array *d = &u.data.via.array.ptr[1].via.array;
    toolhost_plugin *D = &P->desc;
    D->struct_size = sizeof *D;
    D->abi_major = TOOLHOST_ABI_MAJOR;
    D->abi_minor = TOOLHOST_ABI_MINOR;
    D->name = keep(P, th_iso_strdup(d, 0));
    D->version = keep(P, th_iso_strdup(d, 1));
    D->description = keep(P, th_iso_strdup(d, 2));
    D->init = p_init;
    D->fini = p_fini;
    /* The tools init_tools() gives in the workers: from the first
     * worker's READY (p_init). */
    D->init_tools = p_init_tools;
    if (d->size >= 6 && d->ptr[5].type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        D->flags = d->ptr[5].via.u64; /* checked by th_plugin_builtin */
    if (build_params(P, &d->ptr[3], &D->config_params, &D->n_config_params))
        goto out;
    uint32_t nt = 0;
    int brc = build_tools(P, &d->ptr[4], &P->tools, &nt);
    if (brc)
        goto out;
    P->n_tools = nt;
    D->tools = P->tools;
    D->n_tools = nt;
    if (build_content(P, d))
        goto out;
    rc = 0;
out:
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* READY's tools_bin (NULL/0: none) into P->itools. */
static int build_itools(pool *P, const uint8_t *b, size_t n)
{
    if (!b || n == 0)
        return 0;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = -1;
    if (msgpack_unpack_next(&u, (const char *)b, n, &off) ==
            MSGPACK_UNPACK_SUCCESS &&
        off == n)
        rc = build_tools(P, &u.data, &P->itools, &P->n_itools);
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* "N tools: a, b, c" of a tools_bin, for a log line. */
static void tool_names(const uint8_t *b, size_t n, char *out, size_t cap)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    snprintf(out, cap, "no tools");
    if (b && n &&
        msgpack_unpack_next(&u, (const char *)b, n, &off) ==
            MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size) {
        const msgpack_object_array *a = &u.data.via.array;
        size_t k = (size_t)snprintf(out, cap, "%u tool%s:", a->size,
                                    a->size == 1 ? "" : "s");
        for (uint32_t i = 0; i < a->size && k < cap; i++) {
            const msgpack_object *t = &a->ptr[i];
            char *nm = t->type == MSGPACK_OBJECT_ARRAY && t->via.array.size
                           ? th_iso_strdup(&t->via.array, 0)
                           : NULL;
            k += (size_t)snprintf(out + k, cap - k, "%s %.64s",
                                  i ? "," : "", nm ? nm : "?");
            free(nm);
        }
    }
    msgpack_unpacked_destroy(&u);
}

/* A worker started after the first (workers: N, a restart) must serve the
 * very tools the first one's init_tools() gave: the host routes a call by
 * the tool's index.  A different list (a config that changed on disk
 * under a plugin that reads it, a plugin whose tools are not a function
 * of its config) refuses the worker: its start fails, with both lists. */
static int same_tools(pool *P, worker *w, th_error *err)
{
    if (w->itools_len == P->itools_raw_len &&
        (P->itools_raw_len == 0 ||
         memcmp(w->itools, P->itools_raw, P->itools_raw_len) == 0))
        return 0;
    char mine[300], first[300];
    tool_names(w->itools, w->itools_len, mine, sizeof mine);
    tool_names(P->itools_raw, P->itools_raw_len, first, sizeof first);
    return th_error_set(err, TH_ELOAD,
                        "%s: worker %d refused: its init_tools() gave a "
                        "different tool list (%s) from the first worker's "
                        "(%s); an isolated plugin's tools must follow from "
                        "its config alone",
                        P->path, (int)w->pid, mine, first);
}

static const toolhost_tool *p_init_tools(void *state, uint32_t *n_tools)
{
    pool *P = state;
    *n_tools = P->n_itools;
    return P->itools;
}

/* ---- the pool's life --------------------------------------------------------------- */

static void pool_free(pool *P)
{
    for (size_t i = 0; i < P->n_strs; i++)
        free(P->strs[i]);
    free(P->strs);
    for (size_t i = 0; i < P->n_param_arrays; i++)
        free(P->param_arrays[i]);
    free(P->param_arrays);
    for (size_t i = 0; i < P->n_enum_arrays; i++)
        free((void *)P->enum_arrays[i]);
    free(P->enum_arrays);
    free(P->tools);
    free(P->res);
    free(P->prm);
    free(P->itools);
    free(P->itools_raw);
    free(P->name);
    free(P->path);
    free(P->file);
    free(P->user);
    for (size_t i = 0; P->envp && P->envp[i]; i++)
        free(P->envp[i]);
    free(P->envp);
    free(P->config);
    free(P->w);
    if (P->plugfd >= 0)
        close(P->plugfd);
    pthread_mutex_destroy(&P->mu);
    pthread_cond_destroy(&P->cv);
    free(P);
}

/* Every worker: EXIT, then (after `grace_ms`) SIGKILL; reaped and freed. */
static void stop_workers(pool *P, int64_t grace_ms)
{
    pthread_mutex_lock(&P->mu);
    P->closing = true;
    pthread_cond_broadcast(&P->cv);
    pthread_mutex_unlock(&P->mu);
    for (uint32_t i = 0; i < P->n_workers; i++) {
        worker *w = P->w[i];
        if (w && w->alive) {
            send_simple(w, ISO_EXIT, 0, false);
            /* Its reader thread reads the socket to its end now. */
            pthread_mutex_lock(&P->mu);
            w->sock_eof = true;
            if (w->rd == RD_FREE)
                w->rd = RD_THREAD;
            pthread_mutex_unlock(&P->mu);
            uint64_t one = 1;
            ssize_t wr = write(w->evfd, &one, sizeof one);
            (void)wr;
        }
    }
    int64_t end = now_ms() + grace_ms;
    for (uint32_t i = 0; i < P->n_workers; i++) {
        worker *w = P->w[i];
        if (!w)
            continue;
        pthread_mutex_lock(&P->mu);
        while (w->alive && now_ms() < end) {
            struct timespec ts;
            deadline_in(&ts, 20);
            pthread_cond_timedwait(&P->cv, &P->mu, &ts);
        }
        bool alive = w->alive;
        pthread_mutex_unlock(&P->mu);
        if (alive) {
            th_log_warn("plugin %s: worker %d did not exit in time: killed",
                        P->name, (int)w->pid);
            worker_kill(w);
        }
        worker_end(w);
        P->w[i] = NULL;
    }
    /* Replaced ones: no call is left when the proxy ends. */
    while (P->dead) {
        worker *d = P->dead;
        P->dead = d->next_dead;
        worker_end(d);
    }
}

static void on_destroy(th_plugin *p)
{
    pool *P = p->iso;
    if (!P)
        return;
    p->iso = NULL;
    stop_workers(P, 0);
    pthread_mutex_lock(&g_pools_mu);
    if (P->prev)
        P->prev->next = P->next;
    else if (g_pools == P)
        g_pools = P->next;
    if (P->next)
        P->next->prev = P->prev;
    pthread_mutex_unlock(&g_pools_mu);
    pool_free(P);
}

#ifdef __SANITIZE_ADDRESS__
/* ASAN_OPTIONS in e[0..k) (added at e[k] if absent) gains
 * hard_rss_limit_mb, the plugin's `memory` in MiB.  false: out of memory. */
static bool asan_rss_limit(char **e, size_t k, const th_plugin_cfg *pc)
{
    unsigned long long mb = pc->process_limits.memory >> 20;
    size_t i = 0;
    while (i < k && strncmp(e[i], "ASAN_OPTIONS=", 13) != 0)
        i++;
    const char *old = i < k ? e[i] + 13 : "";
    size_t len = strlen(old) + 64;
    char *v = malloc(len);
    if (!v)
        return false;
    snprintf(v, len, "ASAN_OPTIONS=%s%shard_rss_limit_mb=%llu", old,
             *old ? ":" : "", mb ? mb : 1);
    free(i < k ? e[i] : NULL);
    e[i] = v;
    return true;
}
#endif

/* The workers' environment: PATH, LANG, LC_ALL, the sanitizers' options
 * (not secrets; they matter only to sanitizer builds), and the names the
 * plugin's `env:` lists, with the host's values; never the rest (the
 * host's tokens).  NULL when out of memory. */
static char **build_env(const th_plugin_cfg *pc)
{
    static const char *const base[] = {"PATH", "LANG", "LC_ALL",
                                       "ASAN_OPTIONS", "UBSAN_OPTIONS",
                                       "LSAN_OPTIONS", "TSAN_OPTIONS", NULL};
    size_t nb = sizeof base / sizeof base[0] - 1, n = nb + pc->n_env;
    char **e = calloc(n + 3, sizeof *e);
    if (!e)
        return NULL;
    size_t k = 0;
    bool path = false;
    for (size_t i = 0; i < n; i++) {
        const char *name = i < nb ? base[i] : pc->env[i - nb];
        bool dup = strncmp(name, "TOOLHOST_", 9) == 0;
        for (size_t j = 0; j < i && !dup; j++)
            dup = strcmp(name, j < nb ? base[j] : pc->env[j - nb]) == 0;
        const char *v = dup ? NULL : getenv(name);
        if (!v)
            continue;
        size_t len = strlen(name) + strlen(v) + 2;
        if (!(e[k] = malloc(len)))
            goto oom;
        snprintf(e[k++], len, "%s=%s", name, v);
        path |= strcmp(name, "PATH") == 0;
    }
    if (!path && !(e[k++] = strdup("PATH=/usr/local/bin:/usr/bin:/bin")))
        goto oom;
#ifdef __SANITIZE_ADDRESS__
    /* AddressSanitizer reserves terabytes of address space, so the worker
     * cannot apply `memory` as RLIMIT_AS; the sanitizer's own resident-set
     * limit stands in for it (the worker dies when it passes it). */
    if (pc->process_limits.memory && !asan_rss_limit(e, k, pc))
        goto oom;
#endif
    return e;
oom:
    for (size_t i = 0; i < k; i++)
        free(e[i]);
    free(e);
    return NULL;
}

/* `user: auto`: a uid of the plugin's own in uid_lo..uid_hi, the same for
 * every generation of one plugin name in this host, never one another
 * plugin here has, nor one an account of the system has (getpwuid). */
#define ISO_UID_LO 61184
#define ISO_UID_HI 65519
static struct {
    char name[72];
    uint32_t uid;
} g_uids[256];
static size_t g_n_uids;
static pthread_mutex_t g_uids_mu = PTHREAD_MUTEX_INITIALIZER;

static int auto_uid(const th_plugin_cfg *pc, uint32_t *out, th_error *err)
{
    uint32_t lo = pc->uid_lo ? pc->uid_lo : ISO_UID_LO;
    uint32_t hi = pc->uid_lo ? pc->uid_hi : ISO_UID_HI;
    int rc = 0;
    pthread_mutex_lock(&g_uids_mu);
    for (size_t i = 0; i < g_n_uids; i++)
        if (strcmp(g_uids[i].name, pc->name) == 0 && g_uids[i].uid >= lo &&
            g_uids[i].uid <= hi) {
            *out = g_uids[i].uid;
            goto done;
        }
    uint32_t h = 2166136261u; /* FNV-1a of the name: where to start */
    for (const char *c = pc->name; *c; c++)
        h = (h ^ (uint8_t)*c) * 16777619u;
    uint64_t span = (uint64_t)hi - lo + 1;
    for (uint64_t i = 0; i < span && i < 100000; i++) {
        uint32_t uid = lo + (uint32_t)((h + i) % span);
        bool taken = false;
        for (size_t j = 0; j < g_n_uids && !taken; j++)
            taken = g_uids[j].uid == uid;
        if (taken || getpwuid(uid))
            continue;
        if (g_n_uids == sizeof g_uids / sizeof g_uids[0])
            break;
        snprintf(g_uids[g_n_uids].name, sizeof g_uids[0].name, "%s",
                 pc->name);
        g_uids[g_n_uids++].uid = uid;
        *out = uid;
        goto done;
    }
    rc = th_error_set(err, TH_ELOAD, "%s: 'user: auto' found no free uid "
                      "in %u-%u (isolation_uid_range)", pc->path, lo, hi);
done:
    pthread_mutex_unlock(&g_uids_mu);
    return rc;
}

/* A host that is not root runs its isolated plugins as its own user,
 * and a process of the same user may open a dumpable process's
 * /proc/PID/environ (the host's secrets) and /proc/PID/mem: the host
 * makes itself non-dumpable, once (no core dump then).  Not in an ASan
 * build: LeakSanitizer ptraces its own process. */
static pthread_once_t g_undump_once = PTHREAD_ONCE_INIT;

static void undump_host(void)
{
#ifdef __SANITIZE_ADDRESS__
    th_log_warn("isolated plugins run as the host's own user (uid %u); an "
                "ASan build stays dumpable, so they can read its memory",
                (unsigned)geteuid());
#else
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
        th_log_info("host: not dumpable (isolated plugins run as its own "
                    "user, uid %u: no process of that user may read its "
                    "environment or memory; no core dump)",
                    (unsigned)geteuid());
    else
        th_log_warn("host: cannot make itself non-dumpable (%s): isolated "
                    "plugins, which run as its own user, can read its "
                    "environment and memory", strerror(errno));
#endif
}

int th_iso_open(const th_plugin_cfg *pc, const char *file, bool check,
                uint64_t generation, th_plugin **out, th_error *err)
{
    *out = NULL;
    /* A worker running as root could signal, trace and read the host and
     * every other plugin's workers: refused (docs/security.md). */
    if (geteuid() == 0 && (!pc->user || strcmp(pc->user, "root") == 0))
        return th_error_set(err, TH_ELOAD,
                            "'isolation: process' in a host running as root "
                            "needs 'user:' (a user of the plugin's own, or "
                            "'user: auto'); its workers would run as root");
    if (geteuid() != 0)
        pthread_once(&g_undump_once, undump_host);
    uint32_t uid = 0;
    bool is_auto = pc->user && strcmp(pc->user, "auto") == 0;
    if (is_auto && geteuid() == 0) {
        int urc = auto_uid(pc, &uid, err);
        if (urc)
            return urc;
    }
    pool *P = calloc(1, sizeof *P);
    if (!P)
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", pc->path);
    pthread_mutex_init(&P->mu, NULL);
    pthread_cond_init(&P->cv, NULL);
    P->plugfd = -1;
    P->n_workers = pc->workers ? pc->workers : 1;
    P->lim = pc->process_limits;
    P->network = pc->network;
    P->kill_grace_ms = pc->kill_grace_ms ? pc->kill_grace_ms : 1000;
    P->content_timeout_ms = pc->content_timeout_ms
                                ? (int64_t)pc->content_timeout_ms
                                : ISO_CONTENT_TIMEOUT_MS;
    /* (the config keeps it within these; a caller of th_iso_open() that
     * did not read one is held to them too) */
    P->max_frame = !pc->worker_max_frame ? ISO_FRAME_DEFAULT
                   : pc->worker_max_frame < ISO_FRAME_MIN ? ISO_FRAME_MIN
                   : pc->worker_max_frame > ISO_MAX_FRAME
                       ? ISO_MAX_FRAME
                       : (size_t)pc->worker_max_frame;
    P->crash_loop = pc->crash_loop ? pc->crash_loop : 5;
    P->retry_ms = pc->unhealthy_retry_ms ? (int64_t)pc->unhealthy_retry_ms
                                         : 30000;
    P->generation = generation ? generation : 1;
    P->uid = uid;
    if (is_auto && !uid)
        th_log_info("plugin %s: 'user: auto' in a host not running as "
                    "root: the workers run as the host's user (uid %u)",
                    pc->name, (unsigned)geteuid());
    if (!(P->envp = build_env(pc)) || !(P->name = strdup(pc->name)) || !(P->path = strdup(pc->path)) ||
        !(P->file = strdup(file)) || (pc->user && !(P->user = strdup(pc->user))) ||
        !(P->w = calloc(P->n_workers, sizeof *P->w))) {
        pool_free(P);
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", pc->path);
    }
    int rc = th_plugin_file_open(file, pc->path, check, &P->plugfd, err);
    if (rc) {
        pool_free(P);
        return rc;
    }
    if (th_elf_incomplete_fd(P->plugfd)) {
        pool_free(P);
        return th_error_set(err, TH_ELOAD,
                            "%s: incomplete shared object (still being "
                            "written?): its headers reach past the end of "
                            "the file",
                            pc->path);
    }
    /* The first worker: its descriptor.  It stays as worker 0 (init()
     * sends it the config). */
    worker *w;
    if ((rc = spawn(P, &w, err))) {
        pool_free(P);
        return rc;
    }
    pthread_mutex_lock(&P->mu);
    rc = wait_worker(P, w, false, err);
    pthread_mutex_unlock(&P->mu);
    if (rc == 0 && build_desc(P, w->hello, w->hello_len) != 0)
        rc = th_error_set(err, TH_ELOAD, "%s: the worker sent a bad "
                          "descriptor", pc->path);
    th_plugin *p = NULL;
    if (rc == 0)
        rc = th_plugin_builtin(&P->desc, &p, err);
    if (rc) {
        worker_kill(w);
        worker_end(w);
        pool_free(P);
        return rc;
    }
    P->w[0] = w;
    free(p->name);
    free(p->path);
    free(p->load_path);
    p->name = strdup(pc->name);
    p->path = strdup(pc->path);
    p->load_path = strdup(file);
    p->generation = P->generation;
    p->iso = P;
    p->on_destroy = on_destroy;
    P->plugin = p;
    pthread_mutex_lock(&g_pools_mu);
    P->next = g_pools;
    if (g_pools)
        g_pools->prev = P;
    g_pools = P;
    pthread_mutex_unlock(&g_pools_mu);
    if (!p->name || !p->path || !p->load_path) {
        th_plugin_close(p);
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", pc->path);
    }
    *out = p;
    return 0;
}

int th_iso_plugin_open(const th_plugin_cfg *pc, const th_load_opts *lo,
                       th_plugin **out, th_error *err)
{
    if (!pc || pc->isolation != TH_ISO_PROCESS)
        return th_plugin_open(pc ? pc->path : NULL, lo, out, err);
    return th_iso_open(pc, lo && lo->load_path ? lo->load_path : pc->path,
                       !(lo && lo->allow_insecure), lo ? lo->generation : 1,
                       out, err);
}

/* ---- the proxy's ABI functions ----------------------------------------------------------- */

static pool *pool_of_api(const toolhost_host_api *host)
{
    return th_plugin_from_api(host)->iso;
}

static int p_init(const toolhost_host_api *host, const uint8_t *config,
                  size_t config_len, void **state, char *err, size_t err_size)
{
    pool *P = pool_of_api(host);
    *state = P;
    if (!(P->config = malloc(config_len ? config_len : 1))) {
        snprintf(err, err_size, "out of memory");
        return 1;
    }
    memcpy(P->config, config, config_len);
    P->config_len = config_len;
    th_error e;
    th_error_clear(&e);
    worker *w0 = P->w[0];
    int rc = send_init(P, w0) == 0 ? 0 : -1;
    if (rc == 0) {
        pthread_mutex_lock(&P->mu);
        rc = wait_worker(P, w0, true, &e);
        pthread_mutex_unlock(&P->mu);
    } else {
        th_error_set(&e, TH_ELOAD, "the worker went away");
    }
    /* The first worker's init_tools() tools are the plugin's (the loader
     * takes them from p_init_tools right after this returns); every
     * other worker must give the same (start_ready). */
    if (rc == 0) {
        P->itools_raw_len = w0->itools_len;
        if (w0->itools_len &&
            !(P->itools_raw = malloc(w0->itools_len)))
            rc = th_error_set(&e, TH_ENOMEM, "out of memory");
        else if (w0->itools_len)
            memcpy(P->itools_raw, w0->itools, w0->itools_len);
        if (rc == 0 && build_itools(P, w0->itools, w0->itools_len) != 0)
            rc = th_error_set(&e, TH_ELOAD, "the worker sent a bad list of "
                              "the tools from init_tools()");
        P->itools_set = rc == 0;
    }
    for (uint32_t i = 1; rc == 0 && i < P->n_workers; i++)
        rc = start_ready(P, &P->w[i], &e);
    if (rc) {
        /* init failed: fini() will not run; the workers go now.  The
         * loader puts "PATH: init failed: " in front again. */
        stop_workers(P, 1000);
        P->closing = false;
        const char *m = e.msg;
        size_t pl = strlen(P->path);
        if (strncmp(m, P->path, pl) == 0 && m[pl] == ':' && m[pl + 1] == ' ')
            m += pl + 2;
        if (strncmp(m, "init failed: ", 13) == 0)
            m += 13;
        snprintf(err, err_size, "%s", m);
        return 1;
    }
    th_log_info("plugin %s: %u worker process%s started (isolation: process)",
                P->name, P->n_workers, P->n_workers == 1 ? "" : "es");
    pthread_mutex_lock(&P->mu);
    P->serving = true;
    pthread_mutex_unlock(&P->mu);
    return 0;
}

static void p_fini(void *state)
{
    pool *P = state;
    pthread_mutex_lock(&P->mu);
    P->serving = false;
    pthread_mutex_unlock(&P->mu);
    /* The last call ended: the workers drain (nothing) and exit. */
    stop_workers(P, 2000);
}

/* A live worker for a call, starting one if a slot is free and the
 * backoff allows.  mu held; may drop it while starting. */
static worker *pick(pool *P, const toolhost_call *call, int64_t until,
                    char *why, size_t cap)
{
    for (;;) {
        if (P->closing) {
            snprintf(why, cap, "plugin '%s' is closing", P->name);
            return NULL;
        }
        worker *best = NULL;
        int free_slot = -1;
        for (uint32_t i = 0; i < P->n_workers; i++) {
            worker *w = P->w[i];
            if (w && w->alive && w->ready_state == 1) {
                if (!best || w->ncalls < best->ncalls)
                    best = w;
            } else if (free_slot < 0 && (!w || !w->alive)) {
                free_slot = (int)i;
            }
        }
        if (best && (best->ncalls == 0 || free_slot < 0 || P->starting))
            return best;
        int64_t now = now_ms();
        if (P->unhealthy && now < P->next_start_ms) {
            if (best)
                return best;
            snprintf(why, cap, "plugin '%s' is unhealthy: %s", P->name,
                     P->unhealthy_why);
            return NULL;
        }
        if (free_slot >= 0 && !P->starting && now >= P->next_start_ms) {
            P->starting = true;
            worker *old = P->w[free_slot];
            P->w[free_slot] = NULL;
            if (old) { /* calls may still hold it: freed once unused */
                old->next_dead = P->dead;
                P->dead = old;
            }
            worker *gone = NULL;
            for (worker **pp = &P->dead; *pp;) {
                worker *d = *pp;
                if (d->ncalls == 0 && d->reader_done) {
                    *pp = d->next_dead;
                    d->next_dead = gone;
                    gone = d;
                } else {
                    pp = &d->next_dead;
                }
            }
            pthread_mutex_unlock(&P->mu);
            while (gone) {
                worker *n = gone->next_dead;
                worker_end(gone);
                gone = n;
            }
            th_error e;
            th_error_clear(&e);
            worker *nw = NULL;
            int rc = start_ready(P, &nw, &e);
            pthread_mutex_lock(&P->mu);
            P->starting = false;
            pthread_cond_broadcast(&P->cv);
            if (rc == 0) {
                P->w[free_slot] = nw;
                P->restarts++;
                th_log_info("plugin %s: worker %d started (restart %llu)",
                            P->name, (int)nw->pid,
                            (unsigned long long)P->restarts);
                continue;
            }
            th_log_error("plugin %s: cannot restart a worker: %s", P->name,
                         e.msg);
            P->loop++;
            P->backoff_ms = P->backoff_ms ? P->backoff_ms * 2 : 100;
            if (P->backoff_ms > 5000)
                P->backoff_ms = 5000;
            P->next_start_ms = now_ms() + P->backoff_ms;
            if (P->loop >= P->crash_loop && !P->unhealthy) {
                P->unhealthy = true;
                snprintf(P->unhealthy_why, sizeof P->unhealthy_why,
                         "its workers fail to start (%.200s)", e.msg);
                th_log_error("plugin %s: unhealthy: %s", P->name,
                             P->unhealthy_why);
                P->next_start_ms = now_ms() + P->retry_ms;
            }
            continue;
        }
        if (best)
            return best;
        /* Wait for the backoff or the start in progress, within the
         * call's time. */
        int64_t left = call ? call->host->time_left_ms(call) : -1;
        if ((call && call->host->is_cancelled(call)) || left == 0 ||
            (until && now_ms() >= until)) {
            snprintf(why, cap, "plugin '%s' has no worker (restarting)",
                     P->name);
            return NULL;
        }
        struct timespec ts;
        deadline_in(&ts, 20);
        pthread_cond_timedwait(&P->cv, &P->mu, &ts);
    }
}

static void pend_unlink(worker *w, pend *p) /* mu held */
{
    for (pend **pp = &w->calls; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    w->ncalls--;
    for (msg *m = p->head, *n; m; m = n) {
        n = m->next;
        msg_free(m);
    }
    free(p->answer);
    free(p->death);
    free(p->blob);
    pthread_cond_destroy(&p->cv);
}

static bool is_mcall(const toolhost_call *call)
{
    return ((const th_call_base *)call)->vt == &th_mcall_vtbl;
}

/* The call fails with a tool error (code, message). */
static int fail_call(toolhost_call *call, int code, const char *m)
{
    if (call && is_mcall(call)) {
        th_mcall_set_error(call, code, m);
    } else if (call) {
        call->host->write(call, TOOLHOST_STDERR, m, strlen(m));
        call->host->write(call, TOOLHOST_STDERR, "\n", 1);
    }
    return TOOLHOST_FAILED;
}

/* Sends one call or ask and runs its messages on this thread until it
 * ends.  Returns the DONE status (or the ANSWER rc in *rc_out). */

/* The thread of call `self` holds w's socket: one read (at most
 * ISO_READER_IDLE_MS, SO_RCVTIMEO), every whole frame routed.  0, or -1
 * when the socket ended or the worker misbehaved (then the worker is
 * killed and the reader thread reaps it). */
static int caller_read(pool *P, worker *w, pend *self)
{
    int r = th_iso_rx_fill(&w->rx, w->sock);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (r <= 0)
        return -1;
    const uint8_t *f;
    size_t len;
    int t;
    while ((t = th_iso_take(&w->rx, &f, &len)) == 1)
        if (!route(P, w, f, len, self))
            return -1; /* killed: the reader thread reaps */
    if (t < 0) {
        frame_refused(P, w);
        return -1;
    }
    return 0;
}

/* The call `p` is over (mu held): its socket, if it held it, goes to
 * another waiting call, else it is free. */
static void release_socket(worker *w, pend *p)
{
    if (w->rd != RD_CALLER || w->rd_pend != p)
        return;
    pend *q = w->calls;
    while (q && (q == p || q->done))
        q = q->next;
    w->rd_pend = q;
    if (q)
        pthread_cond_signal(&q->cv);
    else
        w->rd = RD_FREE;
}

/* A call's ask_client() in its worker (an ISO_CLIENT_ASK), asked on the
 * call's own thread, as in process (the host's ask_client() waits for
 * the client: its deadline and cancellation end the wait), the worker's
 * socket first handed on so that other calls' frames are read
 * meanwhile; the answer, or the error, goes back as ISO_CLIENT_ANSWER.
 * No lock held. */
static void client_ask(pool *P, worker *w, pend *p, toolhost_call *call,
                       const msg *m)
{
    pthread_mutex_lock(&P->mu);
    release_socket(w, p);
    pthread_mutex_unlock(&P->mu);
    const char *ans = NULL;
    size_t alen = 0;
    int rc = call->host->ask_client(call, m->stream,
                                    m->data ? (const char *)m->data : "",
                                    m->len, &ans, &alen);
    if (!ans) /* (an error's answer is its JSON: TOOLHOST_FAILED) */
        alen = 0;
    th_iso_small head = {.n = 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &head, th_iso_small_write);
    int e = msgpack_pack_array(&pk, 4);
    e |= msgpack_pack_int(&pk, ISO_CLIENT_ANSWER);
    e |= msgpack_pack_uint64(&pk, p->id);
    e |= msgpack_pack_int(&pk, rc);
    e |= ans ? msgpack_pack_bin(&pk, (uint32_t)alen) : msgpack_pack_nil(&pk);
    struct iovec parts[2] = {{head.b, head.n}, {(void *)ans, alen}};
    if (!e) {
        pthread_mutex_lock(&w->send_mu);
        if (w->sock >= 0 && th_iso_sendv(w->sock, parts, alen ? 2 : 1,
                                         ISO_MAX_FRAME) != 0)
            th_log_debug("plugin %s: the answer to call %llu's "
                         "ask_client() did not reach worker %d: %s",
                         P->name, (unsigned long long)p->id, (int)w->pid,
                         strerror(errno));
        pthread_mutex_unlock(&w->send_mu);
    }
    pthread_mutex_lock(&P->mu);
    p->client_ask = false;
    pthread_mutex_unlock(&P->mu);
}

/* What a content ask (ISO_ASK_READ on) sends and gets besides the
 * answer: the budget of its blocks, and the ANSWER's blocks_bin (the
 * caller frees blob). */
typedef struct ask_io {
    size_t max;        /* what the blocks may cost (the sink's room) */
    const char *what;  /* "read of 'URI'", for the log */
    uint8_t *blob;
    size_t len;
    bool over;         /* blocks_bin passed max: not kept */
    bool killed;       /* no answer within content_timeout */
    bool died;         /* no worker, or it died during the ask */
    uint64_t dropped;
} ask_io;

static int run(pool *P, uint32_t tool_idx, int ask, toolhost_call *call,
               const uint8_t *args, size_t len, char *ans, size_t ans_cap,
               ask_io *io)
{
    char why[400];
    pend p;
    memset(&p, 0, sizeof p);
    pthread_cond_init(&p.cv, NULL);
    int64_t ask_ms = ask >= ISO_ASK_READ ? P->content_timeout_ms
                                         : ISO_ASK_TIMEOUT_MS;
    pthread_mutex_lock(&P->mu);
    worker *w = pick(P, call, ask ? now_ms() + ask_ms : 0, why, sizeof why);
    if (!w) {
        pthread_mutex_unlock(&P->mu);
        pthread_cond_destroy(&p.cv);
        if (ask) {
            snprintf(ans, ans_cap, "%s", why);
            if (io)
                io->died = true;
            return 1;
        }
        return fail_call(call, TH_EPLUGIN_CRASHED, why);
    }
    p.id = ++P->next_id;
    p.ask = ask;
    /* the blocks' framing costs less than the sink counts for each */
    p.blob_max = io ? io->max + 64 : 0;
    p.w = w;
    p.call = call;
    p.next = w->calls;
    w->calls = &p;
    w->ncalls++;
    w->call_seq++;
    if (w->rd == RD_FREE && !w->sock_eof) { /* the answer is read here */
        w->rd = RD_CALLER;
        w->rd_pend = &p;
    }
    pthread_mutex_unlock(&P->mu);

    /* The frame around the args, which are sent from where they are. */
    th_iso_small head = {.n = 0}, tail = {.n = 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &head, th_iso_small_write);
    int e = msgpack_pack_array(&pk, !ask || ask >= ISO_ASK_READ ? 6 : 5);
    e |= msgpack_pack_int(&pk, ask ? ISO_ASK : ISO_CALL);
    e |= msgpack_pack_uint64(&pk, p.id);
    if (ask)
        e |= msgpack_pack_int(&pk, ask);
    e |= msgpack_pack_uint32(&pk, tool_idx);
    e |= msgpack_pack_bin(&pk, (uint32_t)len);
    msgpack_packer_init(&pk, &tail, th_iso_small_write);
    if (!ask) {
        /* the time left, and what the call's blocks may hold together
         * (the worker's write_block() refuses past it, as in process) */
        e |= msgpack_pack_int64(&pk, call ? call->host->time_left_ms(call) : -1);
        e |= msgpack_pack_uint64(&pk, call ? th_call_blocks_limit(call) : 0);
    } else if (ask >= ISO_ASK_READ)
        e |= msgpack_pack_uint64(&pk, io ? io->max : 0);
    struct iovec parts[3] = {{head.b, head.n},
                             {(void *)args, len},
                             {tail.b, tail.n}};
    int sent = 0, serr = 0;
    if (!e) {
        pthread_mutex_lock(&w->send_mu);
        if (w->sock >= 0 &&
            (sent = th_iso_sendv(w->sock, parts, 3, ISO_MAX_FRAME)) != 0)
            serr = errno;
        pthread_mutex_unlock(&w->send_mu);
    }
    /* A dead socket: the call sees its end below, or the reader fails
     * the call shortly.  Arguments longer than a worker reads (a front
     * that carries more than ISO_MAX_FRAME): nothing was sent, the
     * request fails at once and the worker serves on. */
    if (sent != 0 && serr == EMSGSIZE) {
        pthread_mutex_lock(&P->mu);
        release_socket(w, &p);
        pend_unlink(w, &p);
        pthread_cond_broadcast(&P->cv);
        pthread_mutex_unlock(&P->mu);
        char m[300], sz[32];
        fmt_size(ISO_MAX_FRAME, sz, sizeof sz);
        snprintf(m, sizeof m, "the arguments (%zu bytes) are more than a "
                 "worker of plugin '%s' reads in one frame (%s)", len,
                 P->name, sz);
        th_log_warn("plugin %s: %s: refused", P->name, m);
        if (!ask)
            return fail_call(call, TH_ELIMIT, m);
        snprintf(ans, ans_cap, "%s", m);
        return 1;
    }

    int64_t cancel_at = 0, t_start = now_ms();
    bool killed = false;
    pthread_mutex_lock(&P->mu);
    for (;;) {
        while (p.head) {
            msg *m = p.head;
            p.head = m->next;
            if (!p.head)
                p.tail = NULL;
            p.queued -= m->cost;
            pthread_cond_broadcast(&P->cv); /* the reader may wait */
            pthread_mutex_unlock(&P->mu);
            if (m->type == ISO_WRITE)
                call->host->write(call, m->stream, m->data, m->len);
            else if (m->type == ISO_BLOCK)
                deliver_frame(call, m->data, m->len);
            else if (m->type == ISO_META)
                call->host->set_meta(call, m->data, m->len);
            else if (m->type == ISO_CLIENT_ASK)
                client_ask(P, w, &p, call, m);
            else
                call->host->progress(call, m->fraction, m->text, m->data,
                                     m->len);
            msg_free(m);
            pthread_mutex_lock(&P->mu);
        }
        if (p.done)
            break;
        if (!ask && call) {
            pthread_mutex_unlock(&P->mu);
            bool c = call->host->is_cancelled(call);
            pthread_mutex_lock(&P->mu);
            if (c && !cancel_at) {
                cancel_at = now_ms();
                pthread_mutex_unlock(&P->mu);
                send_simple(w, ISO_CANCEL, p.id, true);
                pthread_mutex_lock(&P->mu);
                continue;
            }
            if (cancel_at && !killed &&
                now_ms() - cancel_at >= (int64_t)P->kill_grace_ms) {
                killed = true;
                w->reaped = true; /* "killed by us" for the reader */
                th_log_warn("plugin %s: call %llu ignored its cancellation "
                            "or deadline for %llums: worker %d killed",
                            P->name, (unsigned long long)call->call_id,
                            (unsigned long long)P->kill_grace_ms, (int)w->pid);
                worker_kill(w);
            }
        }
        if (ask && !killed && now_ms() - t_start >= ask_ms) {
            killed = true;
            w->reaped = true;
            if (ask >= ISO_ASK_READ)
                th_log_warn("plugin %s: %s did not answer within %lld ms "
                            "(content_timeout): worker %d killed",
                            P->name, io && io->what ? io->what : "content",
                            (long long)ask_ms, (int)w->pid);
            else
                th_log_warn("plugin %s: %s did not answer within %ds: "
                            "worker %d killed",
                            P->name,
                            ask == ISO_ASK_VALIDATE ? "validate_args"
                                                    : "needs_permission",
                            ISO_ASK_TIMEOUT_MS / 1000, (int)w->pid);
            worker_kill(w);
        }
        if (w->rd == RD_FREE && !w->sock_eof) {
            w->rd = RD_CALLER;
            w->rd_pend = &p;
        }
        if (w->rd == RD_CALLER && w->rd_pend == &p) {
            pthread_mutex_unlock(&P->mu);
            int r = caller_read(P, w, &p);
            pthread_mutex_lock(&P->mu);
            if (r != 0) { /* the reader thread takes over, and reaps */
                w->sock_eof = true;
                w->rd = RD_THREAD;
                uint64_t one = 1;
                ssize_t wr = write(w->evfd, &one, sizeof one);
                (void)wr;
            }
            continue;
        }
        struct timespec ts;
        deadline_in(&ts, 20);
        pthread_cond_timedwait(&p.cv, &P->mu, &ts);
    }
    release_socket(w, &p);
    int status = p.status;
    uint64_t retry_after_ms = p.retry_after_ms;
    char *death = p.death;
    p.death = NULL;
    if (ask && ans && p.answer)
        snprintf(ans, ans_cap, "%s", p.answer);
    if (io) {
        io->blob = p.blob;
        io->len = p.blob_len;
        io->over = p.blob_over;
        io->dropped = p.dropped;
        io->killed = killed;
        p.blob = NULL;
    }
    pend_unlink(w, &p);
    pthread_cond_broadcast(&P->cv);
    pthread_mutex_unlock(&P->mu);
    if (death) {
        int rc;
        if (ask) {
            snprintf(ans, ans_cap, "%s", death);
            if (io)
                io->died = true;
            rc = 1;
        } else if (killed) {
            rc = fail_call(call, TH_ETIMEOUT,
                           "the call ignored its deadline; its worker was "
                           "killed");
        } else {
            rc = fail_call(call, TH_EPLUGIN_CRASHED, death);
        }
        free(death);
        return rc;
    }
    if (ask)
        return status;
    if (status == TOOLHOST_UNAVAILABLE || status == TOOLHOST_TIMEOUT ||
        status == TOOLHOST_RATE_LIMITED) {
        /* a backend's (ABI 1.5; the worker passes them only from a 1.5
         * plugin), with its hint: this proxy is a 1.5 plugin */
        if (retry_after_ms && call && call->host->set_retry_after)
            call->host->set_retry_after(call, retry_after_ms);
        return status;
    }
    return status == TOOLHOST_OK ? TOOLHOST_OK : TOOLHOST_FAILED;
}

/* The tool's index in the workers' list: the static tools, then those of
 * init_tools() (the order a worker's loader keeps). */
static uint32_t tool_index(pool *P, const toolhost_tool *tool)
{
    uintptr_t t = (uintptr_t)tool, s = (uintptr_t)P->tools;
    if (t >= s && t < s + P->n_tools * sizeof *P->tools)
        return (uint32_t)((t - s) / sizeof *P->tools);
    return P->n_tools +
           (uint32_t)((t - (uintptr_t)P->itools) / sizeof *P->itools);
}

static int p_execute(void *state, const toolhost_tool *tool,
                     toolhost_call *call, const uint8_t *args, size_t len)
{
    pool *P = state;
    return run(P, tool_index(P, tool), 0, call, args, len, NULL, 0, NULL);
}

static int p_needs(void *state, const toolhost_tool *tool, const uint8_t *args,
                   size_t len, char *reason, size_t size)
{
    pool *P = state;
    int rc = run(P, tool_index(P, tool), ISO_ASK_PERMISSION, NULL, args, len,
                 reason, size, NULL);
    return rc ? 1 : 0;
}

static int p_validate(void *state, const toolhost_tool *tool,
                      const uint8_t *args, size_t len, char *err, size_t size)
{
    pool *P = state;
    return run(P, tool_index(P, tool), ISO_ASK_VALIDATE, NULL, args, len, err,
               size, NULL);
}

/* ---- resources, prompts and completion (ABI 1.4) ------------------------------------ */

/* A string of a block from the worker: NULL (nil or missing), or a copy
 * with no NUL inside (*bad otherwise: a str that hides a shorter one). */
/* The worker's blocks_bin into `out`, each block through content_add():
 * the same checks (kind, UTF-8, MIME type and URI lengths, the budget)
 * as an in-process plugin's blocks get.  0, or the first refusal (the
 * sink says why). */
static int replay_blocks(pool *P, const uint8_t *b, size_t n,
                         toolhost_content *out)
{
    th_content *c = (th_content *)out;
    if (!b || !n)
        return 0;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0, vlen = 0;
    int rc = 0;
    if (th_mp_check(b, n, TH_MP_MAX_DEPTH, &vlen, NULL) != 0 || vlen != n ||
        msgpack_unpack_next(&u, (const char *)b, n, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        u.data.type != MSGPACK_OBJECT_ARRAY) {
        th_log_warn("plugin %s: a worker's content is not well-formed: "
                    "refused", P->name);
        snprintf(c->why, sizeof c->why, "its worker's answer is malformed");
        c->bad = true;
        msgpack_unpacked_destroy(&u);
        return TOOLHOST_EINVAL;
    }
    for (uint32_t i = 0; rc == 0 && i < u.data.via.array.size; i++) {
        const msgpack_object *e = &u.data.via.array.ptr[i];
        toolhost_block blk;
        char *str[4] = {NULL, NULL, NULL, NULL};
        bool bad = e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 6 ||
                   !block_decode(&e->via.array, 0, &blk, str);
        if (bad) {
            th_log_warn("plugin %s: a worker's content block %u is "
                        "malformed: refused", P->name, i);
            snprintf(c->why, sizeof c->why, "its worker's block %u is "
                     "malformed", i);
            c->bad = true;
            rc = TOOLHOST_EINVAL;
        } else {
            rc = out->host->content_add(out, &blk);
        }
        block_strs_free(str);
    }
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* The worker's reason, safe to show: at most err_size bytes with the
 * NUL, UTF-8, on one line (th_utf8_scrub). */
static void copy_reason(char *err, size_t err_size, const char *m)
{
    if (!err || !err_size)
        return;
    th_utf8_scrub(err, err_size - 1, m ? m : "", m ? strlen(m) : 0, false);
}

/* One content ask: sent to a worker as a call is (the budget of what
 * `out` may still hold goes with it), waited for at most content_timeout
 * (then the worker is killed), and its answer taken as untrusted: a
 * blocks_bin larger than the budget is refused unread, every block goes
 * through content_add().  Returns what the plugin's callback returns. */
static int content_ask(pool *P, int kind, uint32_t idx, const uint8_t *arg,
                       size_t arg_len, const char *what, toolhost_content *out,
                       char *err, size_t err_size)
{
    th_content *c = (th_content *)out;
    char ans[512] = "";
    ask_io io = {.max = c->max_bytes > c->bytes ? c->max_bytes - c->bytes : 0,
                 .what = what};
    /* no more than the worker may send in one frame: past that its own
     * sink refuses, in words, and the worker lives */
    if (io.max > P->max_frame - ISO_FRAME_SLACK)
        io.max = P->max_frame - ISO_FRAME_SLACK;
    int rc = run(P, idx, kind, NULL, arg, arg_len, ans, sizeof ans, &io);
    if (io.killed) {
        snprintf(ans, sizeof ans, "its worker did not answer within %lld ms "
                 "(content_timeout) and was killed",
                 (long long)P->content_timeout_ms);
        c->fail_code = TH_ETIMEOUT;
        rc = TOOLHOST_FAILED;
    } else if (io.died) {
        /* the words are the death's: "plugin_crashed (SIGSEGV): ..." */
        c->fail_code = TH_EPLUGIN_CRASHED;
        rc = TOOLHOST_FAILED;
    } else if (io.over) {
        th_log_warn("plugin %s: %s: the worker's answer of %zu bytes passes "
                    "the content budget (%zu bytes left of the largest "
                    "message the front carries): refused",
                    P->name, what, io.len, io.max);
        snprintf(c->why, sizeof c->why, "the content passes %zu bytes (the "
                 "largest message its front carries)", c->max_bytes);
        c->bad = true;
        rc = TOOLHOST_ENOMEM;
    } else if (rc == TOOLHOST_EINVAL) {
        /* the worker's own sink refused a block: the same words */
        copy_reason(c->why, sizeof c->why, ans);
        c->bad = true;
    } else if (replay_blocks(P, io.blob, io.len, out) != 0) {
        rc = TOOLHOST_EINVAL;
    } else if (rc != TOOLHOST_OK && rc != TOOLHOST_NOT_FOUND) {
        rc = TOOLHOST_FAILED;
    }
    if (io.dropped && c->mode == TH_CONTENT_COMPLETE)
        c->dropped += io.dropped;
    free(io.blob);
    copy_reason(err, err_size, ans);
    return rc;
}

static int p_read(void *state, const toolhost_resource *res, const char *uri,
                  toolhost_content *out, char *err, size_t err_size)
{
    pool *P = state;
    char what[160];
    snprintf(what, sizeof what, "read of '%.120s'", uri);
    return content_ask(P, ISO_ASK_READ, (uint32_t)(res - P->res),
                       (const uint8_t *)uri, strlen(uri), what, out, err,
                       err_size);
}

static int p_get(void *state, const toolhost_prompt *prompt,
                 const uint8_t *args, size_t args_len, toolhost_content *out,
                 char *err, size_t err_size)
{
    pool *P = state;
    char what[120];
    snprintf(what, sizeof what, "get of prompt '%.64s'", prompt->name);
    return content_ask(P, ISO_ASK_GET, (uint32_t)(prompt - P->prm), args,
                       args_len, what, out, err, err_size);
}

/* A completion's [name, value] and its ask. */
static int complete_ask(pool *P, int kind, uint32_t idx, const char *ref,
                        const char *name, const char *value,
                        toolhost_content *out)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    int e = msgpack_pack_array(&pk, 2);
    e |= th_pack_cstr(&pk, name);
    e |= th_pack_cstr(&pk, value);
    if (e) {
        th_buf_destroy(&b);
        return TOOLHOST_ENOMEM;
    }
    char what[200];
    snprintf(what, sizeof what, "completion of '%.150s'", ref);
    int rc = content_ask(P, kind, idx, b.data, b.len, what, out, NULL, 0);
    th_buf_destroy(&b);
    return rc;
}

static int p_rcomplete(void *state, const toolhost_resource *res,
                       const char *var, const char *value,
                       toolhost_content *out)
{
    pool *P = state;
    return complete_ask(P, ISO_ASK_COMPLETE_RES, (uint32_t)(res - P->res),
                        res->uri, var, value, out);
}

static int p_pcomplete(void *state, const toolhost_prompt *prompt,
                       const char *arg, const char *value,
                       toolhost_content *out)
{
    pool *P = state;
    return complete_ask(P, ISO_ASK_COMPLETE_PROMPT,
                        (uint32_t)(prompt - P->prm), prompt->name, arg, value,
                        out);
}

/* ---- stats -------------------------------------------------------------------------- */

int th_iso_stats_pack(struct msgpack_packer *pk)
{
    pthread_mutex_lock(&g_pools_mu);
    uint32_t n = 0;
    for (pool *P = g_pools; P; P = P->next)
        n++;
    int e = msgpack_pack_array(pk, n);
    for (pool *P = g_pools; P && !e; P = P->next) {
        pthread_mutex_lock(&P->mu);
        unsigned live = 0;
        int procs = P->cg ? 0 : -1;
        for (uint32_t i = 0; i < P->n_workers; i++) {
            worker *w = P->w[i];
            live += w && w->alive;
            int k = w && w->alive ? th_iso_cg_count(&w->cg) : 0;
            if (procs >= 0 && k > 0)
                procs += k;
        }
        e |= msgpack_pack_map(pk, 11);
        e |= th_pack_cstr(pk, "containment");
        e |= th_pack_cstr(pk, P->cg ? g_contain_names[0]
                              : P->contain != CONTAIN_UNSET
                                  ? g_contain_names[P->contain]
                                  : NULL);
        e |= th_pack_cstr(pk, "processes");
        e |= procs >= 0 ? msgpack_pack_int(pk, procs) : msgpack_pack_nil(pk);
        e |= th_pack_cstr(pk, "plugin");
        e |= th_pack_cstr(pk, P->name);
        e |= th_pack_cstr(pk, "generation");
        e |= msgpack_pack_uint64(pk, P->generation);
        e |= th_pack_cstr(pk, "healthy");
        e |= P->unhealthy ? msgpack_pack_false(pk) : msgpack_pack_true(pk);
        e |= th_pack_cstr(pk, "workers");
        e |= msgpack_pack_uint32(pk, P->n_workers);
        e |= th_pack_cstr(pk, "live");
        e |= msgpack_pack_uint32(pk, live);
        e |= th_pack_cstr(pk, "restarts");
        e |= msgpack_pack_uint64(pk, P->restarts);
        e |= th_pack_cstr(pk, "crashes");
        e |= msgpack_pack_uint64(pk, P->crashes);
        e |= th_pack_cstr(pk, "last_crash");
        e |= th_pack_cstr(pk, P->last_crash[0] ? P->last_crash : NULL);
        e |= th_pack_cstr(pk, "unhealthy_reason");
        e |= th_pack_cstr(pk, P->unhealthy ? P->unhealthy_why : NULL);
        pthread_mutex_unlock(&P->mu);
    }
    pthread_mutex_unlock(&g_pools_mu);
    return e;
}

void th_iso_counts(unsigned *pools, unsigned *live_workers)
{
    unsigned np = 0, nl = 0;
    pthread_mutex_lock(&g_pools_mu);
    for (pool *P = g_pools; P; P = P->next) {
        np++;
        pthread_mutex_lock(&P->mu);
        for (uint32_t i = 0; i < P->n_workers; i++)
            nl += P->w[i] && P->w[i]->alive;
        pthread_mutex_unlock(&P->mu);
    }
    pthread_mutex_unlock(&g_pools_mu);
    if (pools)
        *pools = np;
    if (live_workers)
        *live_workers = nl;
}

/* ---- for the fuzz target (fuzz/iso_wire.c) ------------------------------------------- */

int th_iso_fuzz_frame(const uint8_t *f, size_t n)
{
    pool *P = calloc(1, sizeof *P);
    if (!P)
        return TH_ENOMEM;
    pthread_mutex_init(&P->mu, NULL);
    pthread_cond_init(&P->cv, NULL);
    P->plugfd = -1;
    P->closing = true; /* nobody drains: no back-pressure wait */
    P->name = strdup("fuzz");
    P->path = strdup("fuzz.so");
    int rc = TH_EINVAL;
    /* As a HELLO: the descriptor, then the host's checks of it. */
    if (P->name && P->path && build_desc(P, f, n) == 0) {
        th_plugin *p = NULL;
        th_error err;
        th_error_clear(&err);
        rc = th_plugin_builtin(&P->desc, &p, &err);
        if (rc == 0)
            th_plugin_close(p); /* no on_destroy: P is freed below */
    }
    /* As any other message, routed to a worker with one waiting call. */
    worker *w = calloc(1, sizeof *w);
    if (w) {
        w->pool = P;
        w->sock = w->errfd = w->notefd = w->evfd = w->pidfd = -1;
        w->cg.procs_fd = w->cg.dir_fd = -1;
        pthread_mutex_init(&w->send_mu, NULL);
        pend p;
        memset(&p, 0, sizeof p);
        pthread_cond_init(&p.cv, NULL);
        p.id = 1;
        p.w = w;
        w->calls = &p;
        w->ncalls = 1;
        route(P, w, f, n, NULL);
        if (w->ready_state == 1) { /* a READY: its init_tools() tools */
            char names[300];
            tool_names(w->itools, w->itools_len, names, sizeof names);
            build_itools(P, w->itools, w->itools_len);
        }
        pthread_mutex_lock(&P->mu);
        pend_unlink(w, &p);
        pthread_mutex_unlock(&P->mu);
        worker_free(w);
    }
    pool_free(P);
    return rc;
}
