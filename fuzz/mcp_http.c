/* fuzz/mcp_http.c - libFuzzer target: the MCP Streamable HTTP front
 * (host/mcp/http.c on host/http/http.c): routing, the checks of every
 * request (method, Origin, bearer token, toolset, MCP-Protocol-Version,
 * Content-Type, Content-Length, body size), sessions (initialize, reuse by
 * Mcp-Session-Id, DELETE, the cap), POST answers as JSON or SSE, GET event
 * streams, the slow-reader cut, a client that hangs up.
 *
 * How: the target is the HTTP library.  It defines the libmicrohttpd
 * functions the host calls (MHD_start_daemon, MHD_lookup_connection_value,
 * MHD_queue_response, MHD_create_response_from_*, ...), so the linker
 * takes them instead of the real ones: th_mcp_http_start() "starts a
 * daemon" that binds nothing, and each request of the input is handed to
 * the host's access handler the way libmicrohttpd does it (a first call
 * with the headers, one per body chunk, a last one with no data; then the
 * response is read - an SSE one through its content reader - and the
 * request's completion and the connection's close are notified).  No
 * socket, no HTTP parser in between: every input reaches the host's code,
 * hundreds of requests a second, and the harness sees every response the
 * host queues.  Inputs are kept to what libmicrohttpd would deliver
 * (token methods and header names, values without CR/LF, trimmed; a
 * numeric Content-Length, the body cut to it).
 *
 * Input: requests separated by a line "%%"; each is
 *     METHOD PATH
 *     Name: value            (any number of headers)
 *                            (an empty line)
 *     body
 * In header values "$A", "$B", "$E" stand for the tokens of alice, bob
 * (both allowed by a toolset) and eve (no toolset), "$0".."$7" for the
 * session ids the host gave out so far in this input; in the body "$K"
 * stands for the last taskId the host gave out.  Headers of the
 * harness: X-Fuzz-Chunk: N (body in N-byte pieces), X-Fuzz-Async: 1 (the
 * request runs on a thread of its own, as on a connection of its own),
 * X-Fuzz-Open: 1 (a GET stream stays open until the end of the input),
 * X-Fuzz-Hangup: 1 (the client's socket is already closed).
 * At the end of each input the tasks it started are cancelled
 * (tasks/cancel, which a task outliving its session still takes), every
 * session it opened is deleted (DELETE with its owner's token) and every
 * stream still open is read out.
 *
 * The host is opened once: build/plugins/echo.so (echo, echo_async),
 * toolsets `asks` for alice (echo_async asks first: an elicitation, for a
 * client that declared it) and `open` for bob (no asks), tokens of alice
 * (with uid), bob and eve (no toolset), max_body
 * 8 KiB, max_sessions 6, max_streams 2, max_queued 4 KiB, keepalive 2 ms
 * (set past the config's floor so a quiet stream costs little),
 * max_timeout 1 s, permission_timeout 100 ms, session_grace 5 ms and
 * task_keep 1 (so that what an input leaves behind is soon gone).
 * Properties beyond "no crash, no leak, no UB, no hang":
 *   - every request is answered by its last call (a response, or MHD_NO),
 *     with a status of the front's set;
 *   - a request without a valid token is answered 401, 403, 404 or 405,
 *     never more; one naming another user's session never gets a 2xx;
 *   - a JSON response is a JSON-RPC object ("jsonrpc": "2.0"); an SSE
 *     stream is whole "event: message\ndata: JSON\n\n" events and
 *     keepalive comments; an initialize answered 200 carries a 64-hex
 *     Mcp-Session-Id; no response header holds CR or LF.
 *
 * needs: host/mcp/http.c host/http/http.c host/core/host/host.c
 */
#define _GNU_SOURCE 1
#include <ctype.h>
#include <jansson.h>
#include <microhttpd.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"
#include "front/fronts.h"
#include "front/mcp_config.h"
#include "front/mcp_http.h"
#include "th/config.h"
#include "th/err.h"
#include "th/host.h"
#include "th/log.h"

#ifndef TH_BUILD_DIR
#define TH_BUILD_DIR "build"
#endif

#define MH_ALICE "alice-token-0123456789abcdef"
#define MH_BOB "bob-token-0123456789abcdef"
#define MH_EVE "eve-token-0123456789abcdef"
#define MH_MAX_HDRS 24
#define MH_MAX_SESS 8
#define MH_MAX_THREADS 4
#define MH_MAX_OPEN 8

/* ---- the harness's libmicrohttpd ------------------------------------------ */

struct MHD_Daemon {
    MHD_AccessHandlerCallback dh;
    void *dh_cls;
    MHD_RequestCompletedCallback done;
    void *done_cls;
    MHD_NotifyConnectionCallback notify;
    void *notify_cls;
};

typedef struct mh_hdr {
    char *name, *value;
} mh_hdr;

struct MHD_Response {
    int refs; /* under mh_resp_mu: the host's and the connection's */
    char *data;
    size_t size;
    bool own;
    MHD_ContentReaderCallback crc;
    void *crc_cls;
    MHD_ContentReaderFreeCallback crfc;
    mh_hdr hdrs[8];
    size_t n_hdrs;
};

struct MHD_Connection {
    const mh_hdr *hdrs;
    size_t n_hdrs;
    union MHD_ConnectionInfo info;
    int peer; /* the client's end of the socket pair, or -1 */
    struct MHD_Response *resp;
    unsigned status;
    void *sock_ctx;
    union MHD_ConnectionInfo ctx_info; /* SOCKET_CONTEXT's answer */
    bool suspended;   /* under mh_susp_mu */
    uint64_t resumes; /* under mh_susp_mu: MHD_resume_connection()s */
};

/* Suspension, as libmicrohttpd does it for the host (th_http_suspend):
 * a suspended connection is not served until another thread resumes it;
 * then the handler, or the content reader, is called again. */
static pthread_mutex_t mh_susp_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mh_susp_cv = PTHREAD_COND_INITIALIZER;

void MHD_suspend_connection(struct MHD_Connection *c)
{
    pthread_mutex_lock(&mh_susp_mu);
    c->suspended = true;
    pthread_mutex_unlock(&mh_susp_mu);
}

void MHD_resume_connection(struct MHD_Connection *c)
{
    pthread_mutex_lock(&mh_susp_mu);
    c->suspended = false;
    c->resumes++;
    pthread_cond_broadcast(&mh_susp_cv);
    pthread_mutex_unlock(&mh_susp_mu);
}

/* Whether c is suspended now; if so waits (until the monotonic time
 * `until_ms`) for its resume.  True when it was suspended and is resumed. */
static int64_t mh_now_ms(void);
static bool mh_wait_resume(struct MHD_Connection *c, int64_t until_ms)
{
    pthread_mutex_lock(&mh_susp_mu);
    bool was = c->suspended;
    while (c->suspended) {
        int64_t left = until_ms - mh_now_ms();
        if (left <= 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t w = left < 50 ? left : 50;
        ts.tv_nsec += w * 1000000;
        ts.tv_sec += ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&mh_susp_cv, &mh_susp_mu, &ts);
    }
    bool resumed = was && !c->suspended;
    pthread_mutex_unlock(&mh_susp_mu);
    return resumed;
}

static struct MHD_Daemon *mh_daemon;
static pthread_mutex_t mh_resp_mu = PTHREAD_MUTEX_INITIALIZER;

static void mh_option(struct MHD_Daemon *d, int opt, intptr_t v, void *p)
{
    if (opt == MHD_OPTION_NOTIFY_COMPLETED) {
        d->done = (MHD_RequestCompletedCallback)v;
        d->done_cls = p;
    } else if (opt == MHD_OPTION_NOTIFY_CONNECTION) {
        d->notify = (MHD_NotifyConnectionCallback)v;
        d->notify_cls = p;
    }
}

struct MHD_Daemon *MHD_start_daemon(unsigned int flags, uint16_t port,
                                    MHD_AcceptPolicyCallback apc,
                                    void *apc_cls, MHD_AccessHandlerCallback dh,
                                    void *dh_cls, ...)
{
    (void)flags, (void)port, (void)apc, (void)apc_cls;
    struct MHD_Daemon *d = calloc(1, sizeof *d);
    TH_FUZZ_CHECK(d != NULL && mh_daemon == NULL);
    d->dh = dh;
    d->dh_cls = dh_cls;
    va_list ap;
    va_start(ap, dh_cls);
    for (;;) {
        int o = va_arg(ap, int);
        if (o == MHD_OPTION_END)
            break;
        if (o == MHD_OPTION_EXTERNAL_LOGGER) {
            (void)va_arg(ap, void *);
            (void)va_arg(ap, void *);
        } else if (o == MHD_OPTION_ARRAY) {
            const struct MHD_OptionItem *it =
                va_arg(ap, const struct MHD_OptionItem *);
            for (; it->option != MHD_OPTION_END; it++)
                mh_option(d, it->option, it->value, it->ptr_value);
        } else {
            fprintf(stderr, "mcp_http: MHD option %d not known to the "
                    "harness\n", o);
            abort();
        }
    }
    va_end(ap);
    mh_daemon = d;
    return d;
}

const union MHD_DaemonInfo *MHD_get_daemon_info(struct MHD_Daemon *d,
                                                enum MHD_DaemonInfoType t,
                                                ...)
{
    (void)d, (void)t;
    static union MHD_DaemonInfo info = {.port = 8080};
    return &info;
}

MHD_socket MHD_quiesce_daemon(struct MHD_Daemon *d)
{
    (void)d;
    return MHD_INVALID_SOCKET;
}

void MHD_stop_daemon(struct MHD_Daemon *d)
{
    if (d == mh_daemon)
        mh_daemon = NULL;
    free(d);
}

enum MHD_Result MHD_is_feature_supported(enum MHD_FEATURE f)
{
    (void)f;
    return MHD_NO;
}

const char *MHD_lookup_connection_value(struct MHD_Connection *c,
                                        enum MHD_ValueKind kind,
                                        const char *key)
{
    if (!(kind & MHD_HEADER_KIND) || !key)
        return NULL;
    for (size_t i = 0; i < c->n_hdrs; i++)
        if (strcasecmp(c->hdrs[i].name, key) == 0)
            return c->hdrs[i].value;
    return NULL;
}

const union MHD_ConnectionInfo *
MHD_get_connection_info(struct MHD_Connection *c,
                        enum MHD_ConnectionInfoType t, ...)
{
    if (t == MHD_CONNECTION_INFO_SOCKET_CONTEXT) {
        c->ctx_info.socket_context = c->sock_ctx;
        return &c->ctx_info;
    }
    return t == MHD_CONNECTION_INFO_CONNECTION_FD ? &c->info : NULL;
}

int MHD_get_connection_values_n(struct MHD_Connection *c,
                                enum MHD_ValueKind kind,
                                MHD_KeyValueIteratorN it, void *cls)
{
    if (!(kind & MHD_HEADER_KIND))
        return 0;
    int n = 0;
    for (size_t i = 0; i < c->n_hdrs; i++, n++)
        if (it && it(cls, MHD_HEADER_KIND, c->hdrs[i].name,
                     strlen(c->hdrs[i].name), c->hdrs[i].value,
                     strlen(c->hdrs[i].value)) != MHD_YES)
            return n + 1;
    return n;
}

/* The harness hands the host parsed values, never a head with a NUL in
 * it (as libmicrohttpd 1.0 does): the HTTP layer's check of the raw head
 * (host/http/http.c, for libraries before 1.0) is off here. */
const char *MHD_get_version(void)
{
    return "1.0.0";
}

static struct MHD_Response *mh_resp_new(void)
{
    struct MHD_Response *r = calloc(1, sizeof *r);
    if (r)
        r->refs = 1;
    return r;
}

struct MHD_Response *MHD_create_response_from_buffer(
    size_t size, void *buffer, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = mh_resp_new();
    if (!r)
        return NULL;
    r->size = size;
    if (mode == MHD_RESPMEM_MUST_COPY) {
        r->data = malloc(size ? size : 1);
        if (!r->data) {
            free(r);
            return NULL;
        }
        memcpy(r->data, buffer, size);
        r->own = true;
    } else {
        r->data = buffer;
        r->own = mode == MHD_RESPMEM_MUST_FREE;
    }
    return r;
}

struct MHD_Response *
MHD_create_response_from_callback(uint64_t size, size_t block_size,
                                  MHD_ContentReaderCallback crc,
                                  void *crc_cls,
                                  MHD_ContentReaderFreeCallback crfc)
{
    (void)size, (void)block_size;
    struct MHD_Response *r = mh_resp_new();
    if (!r)
        return NULL;
    r->crc = crc;
    r->crc_cls = crc_cls;
    r->crfc = crfc;
    return r;
}

enum MHD_Result MHD_add_response_header(struct MHD_Response *r,
                                        const char *name, const char *value)
{
    /* libmicrohttpd refuses a header that would split the response */
    TH_FUZZ_CHECK(!strpbrk(name, "\r\n") && !strpbrk(value, "\r\n"));
    if (r->n_hdrs == sizeof r->hdrs / sizeof r->hdrs[0])
        return MHD_NO;
    mh_hdr *h = &r->hdrs[r->n_hdrs];
    h->name = strdup(name);
    h->value = strdup(value);
    if (!h->name || !h->value) {
        free(h->name);
        free(h->value);
        return MHD_NO;
    }
    r->n_hdrs++;
    return MHD_YES;
}

void MHD_destroy_response(struct MHD_Response *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&mh_resp_mu);
    bool last = --r->refs == 0;
    pthread_mutex_unlock(&mh_resp_mu);
    if (!last)
        return;
    if (r->crfc)
        r->crfc(r->crc_cls);
    if (r->own)
        free(r->data);
    for (size_t i = 0; i < r->n_hdrs; i++) {
        free(r->hdrs[i].name);
        free(r->hdrs[i].value);
    }
    free(r);
}

enum MHD_Result MHD_queue_response(struct MHD_Connection *c,
                                   unsigned int status,
                                   struct MHD_Response *r)
{
    if (!r || c->resp)
        return MHD_NO;
    pthread_mutex_lock(&mh_resp_mu);
    r->refs++;
    pthread_mutex_unlock(&mh_resp_mu);
    c->resp = r;
    c->status = status;
    return MHD_YES;
}

static const char *mh_resp_hdr(const struct MHD_Response *r, const char *n)
{
    for (size_t i = 0; i < r->n_hdrs; i++)
        if (strcasecmp(r->hdrs[i].name, n) == 0)
            return r->hdrs[i].value;
    return NULL;
}

/* ---- the host ----------------------------------------------------------------- */

static th_host *mh_host;
static th_mcp_http *mh_front;
static bool mh_trace; /* TH_FUZZ_TRACE set: each request and its answer */

static void mh_hex_sha256(const char *s, char hex[65])
{
    uint8_t d[SHA256_DIGEST_SIZE];
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(s), (const uint8_t *)s);
    sha256_digest(&ctx, sizeof d, d);
    for (size_t i = 0; i < sizeof d; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

static void mh_open_host(void)
{
#ifndef TH_FUZZ_NO_ENTRY
    th_log_set_level(TOOLHOST_LOG_ERROR);
    th_log_set_fd(-1);
#endif
    char a[65], b[65], e[65];
    mh_hex_sha256(MH_ALICE, a);
    mh_hex_sha256(MH_BOB, b);
    mh_hex_sha256(MH_EVE, e);
    const char *echo = TH_BUILD_DIR "/plugins/echo.so";
    int have_echo = access(echo, R_OK) == 0;
    char yaml[6000];
    snprintf(yaml, sizeof yaml,
             "host:\n  log_level: error\n  shutdown_grace: 50ms\n"
             "  session_grace: 5ms\n  max_timeout: 1s\n"
             "  default_timeout: 1s\n  permission_timeout: 100ms\n"
             "  task_keep: 1\n"
             "  listen: [\"http://127.0.0.1:0/mcp\"]\n"
             "%s%s%s"
             "toolsets:\n  - name: asks\n    tools: [\"*\"]\n"
             "    allow_users: [alice]\n"
             "    permissions:\n      default: allow\n"
             "      rules:\n        - {match: echo_async, action: ask}\n"
             "  - name: open\n    tools: [\"*\"]\n"
             "    allow_users: [bob]\n    permissions: {default: allow}\n"
             "mcp:\n  allow_origins: [\"https://app.example\"]\n"
             "  max_body: 8KiB\n  max_sessions: 6\n  max_streams: 2\n"
             "  max_queued: 4KiB\n  session_idle: 30s\n"
             "  tokens:\n"
             "    - {user: alice, sha256: %s, uid: %u}\n"
             "    - {user: bob, sha256: %s}\n"
             "    - {user: eve, sha256: %s}\n",
             have_echo ? "plugins:\n  - name: echo\n    path: " : "",
             have_echo ? echo : "", have_echo ? "\n" : "", a,
             (unsigned)getuid(), b, e);
    th_config *cfg = NULL;
    th_error err;
    th_error_clear(&err);
    th_fronts_register_builtin(); /* the fronts' config sections */
    if (th_config_parse("fuzz.yaml", "/", yaml, strlen(yaml), &cfg, &err) <
        0) {
        fprintf(stderr, "mcp_http: bad config: %s\n", err.msg);
        abort();
    }
    /* under the config's floor (100 ms): a quiet stream costs 2 ms */
    ((th_mcp_cfg *)th_mcp_config(cfg))->keepalive_ms = 2;
    if (th_host_open(cfg, &mh_host, &err) < 0 ||
        th_mcp_http_start(mh_host, cfg, &mh_front, &err) < 0 || !mh_front ||
        !mh_daemon) {
        fprintf(stderr, "mcp_http: cannot start: %s\n", err.msg);
        abort();
    }
}

/* Stops the front and closes the host (for a replaying suite). */
__attribute__((unused)) static void mh_close(void)
{
    th_mcp_http_stop(mh_front);
    mh_front = NULL;
    if (mh_host)
        th_host_close(mh_host);
    mh_host = NULL;
}

/* ---- one input ------------------------------------------------------------------- */

typedef struct mh_req {
    char method[32];
    char path[256];
    mh_hdr hdrs[MH_MAX_HDRS + 1];
    size_t n_hdrs;
    const uint8_t *body;
    size_t body_len;
    char *body_own; /* the body with $K replaced, when it had one */
    bool timeout; /* Content-Length promised more than came */
    size_t chunk;
    bool async, open, hangup;
    const char *user;  /* of a valid token, or NULL */
    char *sess_owner;  /* the owner of the session it names, or NULL */
    bool is_init;
} mh_req;

typedef struct mh_sess {
    char id[80];
    char user[16];
} mh_sess;

typedef struct mh_open {
    struct MHD_Connection *c;
    void *cls;
} mh_open;

static pthread_mutex_t mh_mu = PTHREAD_MUTEX_INITIALIZER;
static mh_sess mh_sess_v[MH_MAX_SESS];
static size_t mh_n_sess;
static mh_open mh_open_v[MH_MAX_OPEN];
static size_t mh_n_open;
static char mh_task[32]; /* the last taskId the host gave out ($K) */
static char mh_tasks[16][32]; /* all of this input's, cancelled at its end */
static size_t mh_n_tasks;

static void mh_req_free(mh_req *q)
{
    for (size_t i = 0; i < q->n_hdrs; i++) {
        free(q->hdrs[i].name);
        free(q->hdrs[i].value);
    }
    free(q->sess_owner);
    free(q->body_own);
    free(q);
}

static const char *mh_req_hdr(const mh_req *q, const char *n)
{
    for (size_t i = 0; i < q->n_hdrs; i++)
        if (strcasecmp(q->hdrs[i].name, n) == 0)
            return q->hdrs[i].value;
    return NULL;
}

/* The user a request's Authorization names, by the front's own reading
 * ("Bearer" in any case, the token trimmed), or NULL. */
static const char *mh_token_user(const char *a)
{
    if (!a || strncasecmp(a, "Bearer ", 7) != 0)
        return NULL;
    a += 7;
    while (*a == ' ')
        a++;
    size_t len = strlen(a);
    while (len && (a[len - 1] == ' ' || a[len - 1] == '\t'))
        len--;
    static const struct {
        const char *tok, *user;
    } known[] = {{MH_ALICE, "alice"}, {MH_BOB, "bob"}, {MH_EVE, "eve"}};
    for (size_t i = 0; i < 3; i++)
        if (len == strlen(known[i].tok) &&
            memcmp(a, known[i].tok, len) == 0)
            return known[i].user;
    return NULL;
}

/* A header value with the harness's names replaced; NULL when too long. */
static char *mh_subst(const char *v, size_t n)
{
    char out[1024], sid[80];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rep = NULL;
        char c = i + 1 < n && v[i] == '$' ? v[i + 1] : 0;
        if (c == 'A')
            rep = MH_ALICE;
        else if (c == 'B')
            rep = MH_BOB;
        else if (c == 'E')
            rep = MH_EVE;
        else if (c >= '0' && c <= '7') {
            pthread_mutex_lock(&mh_mu);
            rep = (size_t)(c - '0') < mh_n_sess
                      ? strcpy(sid, mh_sess_v[c - '0'].id)
                      : NULL;
            pthread_mutex_unlock(&mh_mu);
        }
        if (rep) {
            size_t l = strlen(rep);
            if (k + l >= sizeof out)
                return NULL;
            memcpy(out + k, rep, l);
            k += l;
            i++;
            continue;
        }
        if (k + 1 >= sizeof out)
            return NULL;
        out[k++] = v[i];
    }
    while (k && (out[k - 1] == ' ' || out[k - 1] == '\t'))
        k--; /* trimmed, as libmicrohttpd does */
    size_t s = 0;
    while (s < k && (out[s] == ' ' || out[s] == '\t'))
        s++;
    return strndup(out + s, k - s);
}

static bool mh_token_chars(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("!#$%&'*+-.^_`|~", s[i]))
            return false;
    return true;
}

/* One request of the input, or NULL when libmicrohttpd would not pass it
 * on (it answers a malformed request itself). */
static mh_req *mh_parse(const uint8_t *p, size_t n)
{
    mh_req *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    const uint8_t *end = p + n;
    const uint8_t *nl = memchr(p, '\n', n);
    const uint8_t *le = nl ? nl : end;
    const uint8_t *sp = memchr(p, ' ', (size_t)(le - p));
    size_t ml = sp ? (size_t)(sp - p) : (size_t)(le - p);
    if (ml >= sizeof q->method || !mh_token_chars((const char *)p, ml))
        goto bad;
    memcpy(q->method, p, ml);
    const uint8_t *ps = sp ? sp + 1 : le;
    size_t pl = (size_t)(le - ps);
    const uint8_t *qm = memchr(ps, '?', pl);
    if (qm)
        pl = (size_t)(qm - ps);
    if (pl == 0) {
        strcpy(q->path, "/mcp");
    } else {
        if (pl >= sizeof q->path || ps[0] != '/' || memchr(ps, 0, pl) ||
            memchr(ps, '\r', pl) || memchr(ps, ' ', pl))
            goto bad;
        memcpy(q->path, ps, pl);
    }
    p = nl ? nl + 1 : end;
    for (;;) {
        if (p >= end)
            break;
        nl = memchr(p, '\n', (size_t)(end - p));
        le = nl ? nl : end;
        size_t ll = (size_t)(le - p);
        if (ll && p[ll - 1] == '\r')
            ll--;
        const uint8_t *next = nl ? nl + 1 : end;
        if (ll == 0) {
            p = next;
            break;
        }
        const uint8_t *colon = memchr(p, ':', ll);
        if (!colon || memchr(p, 0, ll) || memchr(p, '\r', ll) ||
            !mh_token_chars((const char *)p, (size_t)(colon - p)))
            goto bad;
        char name[64];
        size_t nn = (size_t)(colon - p);
        if (nn >= sizeof name)
            goto bad;
        memcpy(name, p, nn);
        name[nn] = '\0';
        char *val = mh_subst((const char *)colon + 1,
                             ll - (size_t)(colon + 1 - p));
        if (!val)
            goto bad;
        if (strncasecmp(name, "X-Fuzz-", 7) == 0) {
            if (strcasecmp(name + 7, "Chunk") == 0)
                q->chunk = (size_t)strtoul(val, NULL, 10) % 9000;
            else if (strcasecmp(name + 7, "Async") == 0)
                q->async = true;
            else if (strcasecmp(name + 7, "Open") == 0)
                q->open = true;
            else if (strcasecmp(name + 7, "Hangup") == 0)
                q->hangup = true;
            free(val);
        } else if (q->n_hdrs < MH_MAX_HDRS) {
            q->hdrs[q->n_hdrs].name = strdup(name);
            q->hdrs[q->n_hdrs].value = val;
            if (!q->hdrs[q->n_hdrs].name) {
                free(val);
                goto bad;
            }
            q->n_hdrs++;
        } else {
            free(val);
            goto bad;
        }
        p = next;
    }
    q->body = p;
    q->body_len = (size_t)(end - p);
    if (memmem(q->body, q->body_len, "$K", 2)) {
        char task[32];
        pthread_mutex_lock(&mh_mu);
        memcpy(task, mh_task, sizeof task);
        pthread_mutex_unlock(&mh_mu);
        size_t tl = strlen(task), k = 0;
        q->body_own = malloc(q->body_len * (tl + 1) + 1);
        if (!q->body_own)
            goto bad;
        for (size_t i = 0; i < q->body_len; i++) {
            if (q->body[i] == '$' && i + 1 < q->body_len &&
                q->body[i + 1] == 'K') {
                memcpy(q->body_own + k, task, tl);
                k += tl;
                i++;
            } else {
                q->body_own[k++] = (char)q->body[i];
            }
        }
        q->body = (const uint8_t *)q->body_own;
        q->body_len = k;
    }
    const char *cl = mh_req_hdr(q, "Content-Length");
    if (cl) {
        /* libmicrohttpd answers a bad one 400 itself, and reads exactly
         * as many bytes as it says */
        if (!*cl || strspn(cl, "0123456789") != strlen(cl) || strlen(cl) > 15)
            goto bad;
        size_t want = (size_t)strtoull(cl, NULL, 10);
        if (want < q->body_len)
            q->body_len = want;
        else if (want > q->body_len)
            q->timeout = true;
    } else if (q->body_len && !mh_req_hdr(q, "Transfer-Encoding")) {
        char v[32];
        snprintf(v, sizeof v, "%zu", q->body_len);
        q->hdrs[q->n_hdrs].name = strdup("Content-Length");
        q->hdrs[q->n_hdrs].value = strdup(v);
        q->n_hdrs++;
        if (!q->hdrs[q->n_hdrs - 1].name || !q->hdrs[q->n_hdrs - 1].value)
            goto bad;
    }
    q->user = mh_token_user(mh_req_hdr(q, "Authorization"));
    const char *sid = mh_req_hdr(q, "Mcp-Session-Id");
    pthread_mutex_lock(&mh_mu);
    for (size_t i = 0; sid && i < mh_n_sess; i++)
        if (strcmp(mh_sess_v[i].id, sid) == 0)
            q->sess_owner = strdup(mh_sess_v[i].user);
    pthread_mutex_unlock(&mh_mu);
    return q;
bad:
    mh_req_free(q);
    return NULL;
}

/* Notes the last "taskId":"N" of a message, for $K. */
static void mh_learn_task(const char *text, size_t len)
{
    const char *p = memmem(text, len, "\"taskId\":\"", 10);
    if (!p)
        return;
    p += 10;
    size_t n = strspn(p, "0123456789");
    if (n == 0 || n >= sizeof mh_task || p + n > text + len)
        return;
    pthread_mutex_lock(&mh_mu);
    memcpy(mh_task, p, n);
    mh_task[n] = '\0';
    bool seen = false;
    for (size_t i = 0; i < mh_n_tasks && !seen; i++)
        seen = strcmp(mh_tasks[i], mh_task) == 0;
    if (!seen && mh_n_tasks < sizeof mh_tasks / sizeof mh_tasks[0])
        memcpy(mh_tasks[mh_n_tasks++], mh_task, sizeof mh_task);
    pthread_mutex_unlock(&mh_mu);
}

static bool mh_is_rpc(const char *text, size_t len)
{
    mh_learn_task(text, len);
    json_t *j = json_loadb(text, len, 0, NULL);
    bool ok = json_is_object(j) &&
              json_string_value(json_object_get(j, "jsonrpc")) &&
              strcmp(json_string_value(json_object_get(j, "jsonrpc")),
                     "2.0") == 0;
    json_decref(j);
    return ok;
}

/* What an SSE stream sent: whole events and keepalive comments (the last
 * event may be cut by the harness's read budget). */
static void mh_check_sse(const char *s, size_t n, bool cut)
{
    size_t i = 0;
    while (i < n) {
        const char *e = memmem(s + i, n - i, "\n\n", 2);
        if (!e) {
            TH_FUZZ_CHECK(cut);
            return;
        }
        size_t el = (size_t)(e - (s + i));
        if (el >= 1 && s[i] == ':') {
            /* a comment */
        } else {
            TH_FUZZ_CHECK(el > 21 &&
                          memcmp(s + i, "event: message\ndata: ", 21) == 0);
            TH_FUZZ_CHECK(mh_is_rpc(s + i + 21, el - 21));
        }
        i += el + 2;
    }
}

static int64_t mh_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads a callback response: until its end, `until_quiet` (a keepalive
 * comment: nothing waiting) or 300 ms.  1 when it ended. */
static int mh_read_stream(struct MHD_Connection *c, struct MHD_Response *r,
                          bool until_quiet)
{
    char *all = NULL;
    size_t n = 0;
    char buf[16384];
    int64_t stop = mh_now_ms() + 300;
    int ended = 0;
    for (uint64_t pos = 0;;) {
        ssize_t k = r->crc(r->crc_cls, pos, buf, sizeof buf);
        if (k == MHD_CONTENT_READER_END_OF_STREAM ||
            k == MHD_CONTENT_READER_END_WITH_ERROR) {
            ended = 1;
            break;
        }
        TH_FUZZ_CHECK(k >= 0 && (size_t)k <= sizeof buf);
        if (k == 0) {
            /* nothing yet: the reader suspended the connection until a
             * message or its keepalive is due */
            if (!mh_wait_resume(c, stop) && mh_now_ms() > stop)
                break;
            continue;
        }
        char *m = realloc(all, n + (size_t)k + 1);
        if (!m)
            break;
        all = m;
        memcpy(all + n, buf, (size_t)k);
        n += (size_t)k;
        pos += (uint64_t)k;
        if (until_quiet && k > 0 && buf[0] == ':')
            break;
        if (mh_now_ms() > stop || n > (1u << 20))
            break;
    }
    mh_check_sse(all ? all : "", n, !ended);
    free(all);
    return ended;
}

static void mh_close_conn(struct MHD_Connection *c, void **cls,
                          enum MHD_RequestTerminationCode why, bool called)
{
    struct MHD_Daemon *d = mh_daemon;
    if (called && d->done)
        d->done(d->done_cls, c, cls, why);
    struct MHD_Response *r = c->resp;
    c->resp = NULL;
    MHD_destroy_response(r);
    if (d->notify)
        d->notify(d->notify_cls, c, &c->sock_ctx,
                  MHD_CONNECTION_NOTIFY_CLOSED);
    close(c->info.connect_fd);
    if (c->peer >= 0)
        close(c->peer);
    free(c);
}

static bool mh_status_known(unsigned s)
{
    static const unsigned known[] = {200, 202, 400, 401, 403, 404, 405, 406,
                                     409, 413, 415, 429, 500, 503};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (s == known[i])
            return true;
    return false;
}

static void mh_learn_session(const mh_req *q, const struct MHD_Response *r)
{
    const char *sid = mh_resp_hdr(r, "Mcp-Session-Id");
    TH_FUZZ_CHECK(sid && strlen(sid) == 64 &&
                  strspn(sid, "0123456789abcdef") == 64);
    TH_FUZZ_CHECK(q->user != NULL);
    pthread_mutex_lock(&mh_mu);
    if (sid && q->user && mh_n_sess < MH_MAX_SESS) {
        snprintf(mh_sess_v[mh_n_sess].id, sizeof mh_sess_v[0].id, "%s", sid);
        snprintf(mh_sess_v[mh_n_sess].user, sizeof mh_sess_v[0].user, "%s",
                 q->user);
        mh_n_sess++;
    }
    pthread_mutex_unlock(&mh_mu);
}

/* One request, as libmicrohttpd hands it to the access handler. */
static void mh_run(mh_req *q)
{
    struct MHD_Daemon *d = mh_daemon;
    struct MHD_Connection *c = calloc(1, sizeof *c);
    if (!c)
        return;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        free(c);
        return;
    }
    c->info.connect_fd = sv[0];
    c->peer = sv[1];
    if (q->hangup) {
        close(c->peer);
        c->peer = -1;
    }
    c->hdrs = q->hdrs;
    c->n_hdrs = q->n_hdrs;
    if (d->notify)
        d->notify(d->notify_cls, c, &c->sock_ctx,
                  MHD_CONNECTION_NOTIFY_STARTED);
    void *cls = NULL;
    size_t up = 0;
    enum MHD_Result rc =
        d->dh(d->dh_cls, c, q->path, q->method, "HTTP/1.1", NULL, &up, &cls);
    size_t off = 0;
    while (rc == MHD_YES && !c->resp && off < q->body_len) {
        size_t k = q->chunk ? q->chunk : q->body_len - off;
        if (k > q->body_len - off)
            k = q->body_len - off;
        up = k;
        rc = d->dh(d->dh_cls, c, q->path, q->method, "HTTP/1.1",
                   (const char *)q->body + off, &up, &cls);
        TH_FUZZ_CHECK(up <= k);
        off += k - up; /* what the handler left comes again */
    }
    if (rc == MHD_YES && !c->resp && q->timeout) {
        /* the rest never comes: libmicrohttpd times the client out */
        mh_close_conn(c, &cls, MHD_REQUEST_TERMINATED_TIMEOUT_REACHED, true);
        return;
    }
    if (rc == MHD_YES && !c->resp) {
        up = 0;
        rc = d->dh(d->dh_cls, c, q->path, q->method, "HTTP/1.1", NULL, &up,
                   &cls);
    }
    /* a handler that suspended the connection (a POST waiting for its
     * answer) is called again once it is resumed */
    int64_t until = mh_now_ms() + 10000;
    while (rc == MHD_YES && !c->resp && mh_wait_resume(c, until)) {
        up = 0;
        rc = d->dh(d->dh_cls, c, q->path, q->method, "HTTP/1.1", NULL, &up,
                   &cls);
    }
    if (rc != MHD_YES || !c->resp) {
        /* the last call must answer: else the client would wait forever */
        TH_FUZZ_CHECK(rc != MHD_YES);
        mh_close_conn(c, &cls, MHD_REQUEST_TERMINATED_WITH_ERROR, true);
        return;
    }
    struct MHD_Response *r = c->resp;
    unsigned st = c->status;
    if (mh_trace) /* what a seed does, for its author */
        fprintf(stderr, "mcp_http: %s %s (%s) -> %u %.*s\n", q->method,
                q->path, q->user ? q->user : "-", st,
                r->crc ? 5 : (int)(r->size > 300 ? 300 : r->size),
                r->crc ? "(SSE)" : r->data);
    TH_FUZZ_CHECK(mh_status_known(st));
    if (!q->user || strcmp(q->user, "eve") == 0)
        TH_FUZZ_CHECK(st == 401 || st == 403 || st == 404 || st == 405);
    if (q->sess_owner && q->user && strcmp(q->sess_owner, q->user) != 0)
        TH_FUZZ_CHECK(st >= 300);
    const char *ct = mh_resp_hdr(r, "Content-Type");
    if (!r->crc) {
        if (ct && strcmp(ct, "application/json") == 0)
            TH_FUZZ_CHECK(mh_is_rpc(r->data, r->size));
        if (st == 200 && ct && strcmp(ct, "application/json") == 0 &&
            mh_resp_hdr(r, "Mcp-Session-Id"))
            mh_learn_session(q, r);
        mh_close_conn(c, &cls, MHD_REQUEST_TERMINATED_COMPLETED_OK, true);
        return;
    }
    TH_FUZZ_CHECK(st == 200 && ct && strcmp(ct, "text/event-stream") == 0);
    if (mh_resp_hdr(r, "Mcp-Session-Id"))
        mh_learn_session(q, r);
    bool keep = q->open && strcmp(q->method, "GET") == 0;
    int ended = mh_read_stream(c, r, keep);
    if (keep && !ended) {
        pthread_mutex_lock(&mh_mu);
        bool room = mh_n_open < MH_MAX_OPEN;
        if (room)
            mh_open_v[mh_n_open++] = (mh_open){c, cls};
        pthread_mutex_unlock(&mh_mu);
        if (room)
            return;
    }
    mh_close_conn(c, &cls,
                  ended ? MHD_REQUEST_TERMINATED_COMPLETED_OK
                        : MHD_REQUEST_TERMINATED_CLIENT_ABORT,
                  true);
}

static void *mh_thread(void *arg)
{
    mh_req *q = arg;
    mh_run(q);
    mh_req_free(q);
    return NULL;
}

/* Requests of the harness's own, with session i's owner's token: DELETE
 * the session, or (task) cancel a task first - a task outlives its
 * session. */
static void mh_own_request(size_t i, const char *task);

static void mh_delete(size_t i)
{
    mh_own_request(i, NULL);
}

static void mh_own_request(size_t i, const char *task)
{
    mh_req *q = calloc(1, sizeof *q);
    if (!q)
        return;
    strcpy(q->method, task ? "POST" : "DELETE");
    strcpy(q->path, "/mcp");
    if (task) {
        int k = asprintf(&q->body_own,
                         "{\"jsonrpc\":\"2.0\",\"id\":\"fz\",\"method\":"
                         "\"tasks/cancel\",\"params\":{\"taskId\":\"%s\"}}",
                         task);
        if (k < 0) {
            q->body_own = NULL;
            free(q);
            return;
        }
        q->body = (const uint8_t *)q->body_own;
        q->body_len = (size_t)k;
    }
    const char *tok = strcmp(mh_sess_v[i].user, "alice") == 0 ? MH_ALICE
                      : strcmp(mh_sess_v[i].user, "bob") == 0 ? MH_BOB
                                                               : MH_EVE;
    char auth[128];
    snprintf(auth, sizeof auth, "Bearer %s", tok);
    q->hdrs[0] = (mh_hdr){strdup("Authorization"), strdup(auth)};
    q->hdrs[1] = (mh_hdr){strdup("Mcp-Session-Id"), strdup(mh_sess_v[i].id)};
    q->n_hdrs = 2;
    if (task)
        q->hdrs[q->n_hdrs++] = (mh_hdr){strdup("Content-Type"),
                                        strdup("application/json")};
    q->user = mh_token_user(auth);
    mh_run(q);
    mh_req_free(q);
}

static int fuzz_mcp_http(const uint8_t *data, size_t size);

/* The host keeps the records of its last 1024 calls (tombstones, for late
 * plugin callbacks): until that ring is full each call leaves blocks
 * behind, and libFuzzer would scan for leaks after every input.  Filled
 * at the start, with echo calls on one session, before the first input. */
static void mh_warm_up(void)
{
    static const char init[] =
        "POST /mcp\nAuthorization: Bearer $A\n"
        "Content-Type: application/json\n\n"
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
        "\"params\":{\"protocolVersion\":\"2025-06-18\","
        "\"capabilities\":{},\"clientInfo\":{\"name\":\"w\","
        "\"version\":\"1\"}}}";
    static const char call[] =
        "POST /mcp\nAuthorization: Bearer $A\n"
        "Content-Type: application/json\nMcp-Session-Id: $0\n\n"
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"w\"}}}";
    mh_req *q = mh_parse((const uint8_t *)init, sizeof init - 1);
    if (q) {
        mh_run(q);
        mh_req_free(q);
    }
    for (int i = 0; i < 1100 && mh_n_sess; i++) {
        q = mh_parse((const uint8_t *)call, sizeof call - 1);
        if (q) {
            mh_run(q);
            mh_req_free(q);
        }
    }
    fuzz_mcp_http(NULL, 0); /* deletes the session */
}

static int fuzz_mcp_http(const uint8_t *data, size_t size)
{
    if (size > 64000)
        return 0;
    if (!mh_host) {
        mh_open_host();
        mh_warm_up();
        mh_trace = getenv("TH_FUZZ_TRACE") != NULL;
    }
    th_fuzz_settle settle = th_fuzz_settle_begin();
    int64_t t0 = mh_now_ms();
    pthread_t th[MH_MAX_THREADS];
    size_t n_th = 0;
    size_t off = 0;
    while (off < size) {
        const uint8_t *sep = memmem(data + off, size - off, "\n%%\n", 4);
        size_t k = sep ? (size_t)(sep - (data + off)) : size - off;
        mh_req *q = mh_parse(data + off, k);
        off += k + (sep ? 4 : 0);
        if (!q)
            continue;
        if (q->async && n_th < MH_MAX_THREADS &&
            pthread_create(&th[n_th], NULL, mh_thread, q) == 0) {
            n_th++;
            continue;
        }
        mh_run(q);
        mh_req_free(q);
    }
    for (size_t i = 0; i < n_th; i++)
        pthread_join(th[i], NULL);
    /* the client goes: its tasks cancelled, its sessions deleted, its
     * streams read out */
    for (size_t t = 0; t < mh_n_tasks; t++)
        for (size_t i = 0; i < mh_n_sess; i++)
            mh_own_request(i, mh_tasks[t]);
    mh_n_tasks = 0;
    for (size_t i = 0; i < mh_n_sess; i++)
        mh_delete(i);
    mh_n_sess = 0;
    for (size_t i = 0; i < mh_n_open; i++) {
        int ended = mh_read_stream(mh_open_v[i].c, mh_open_v[i].c->resp, false);
        mh_close_conn(mh_open_v[i].c, &mh_open_v[i].cls,
                      ended ? MHD_REQUEST_TERMINATED_COMPLETED_OK
                            : MHD_REQUEST_TERMINATED_CLIENT_ABORT,
                      true);
    }
    mh_n_open = 0;
    if (mh_trace)
        fprintf(stderr, "mcp_http: input done in %lld ms\n",
                (long long)(mh_now_ms() - t0));
    /* a session's last frees may run on a call's thread just after */
    th_fuzz_settle_end(settle, 10);
    return 0;
}

TH_FUZZ_ENTRY(fuzz_mcp_http)
