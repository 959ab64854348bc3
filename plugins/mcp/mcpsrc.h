/* mcpsrc.h - the mcp plugin: other MCP servers as a tool source
 * (docs/mcp-source.md).  Shared by its files.
 *
 * Each server declared in the config block is a stdio command (or a
 * Streamable HTTP endpoint, below).  A
 * supervisor thread per server starts it (in a cage of the host where it
 * gives one, its own session and process group, killed with the host),
 * does the MCP handshake and tools/list, and restarts it with exponential
 * back-off when it exits; a reader thread per process routes what the
 * server writes: responses to the waiting call by id, progress to the
 * call whose token it names, pings answered, everything else dropped and
 * counted.  A call of a stdio server (mcp_call.c) is suspended and handed
 * to the server's reader, which ends it: with the answer, or cancelled,
 * timed out, or failed when the server goes away.  A server with url:
 * (mcp_http.c) has a supervisor too, but no process and no reader: the
 * supervisor reads the session's GET stream itself; with `oauth:`
 * (mcp_oauth.c) its requests carry a client-credentials token.
 *
 * Lock order: srv->mu, then srv->wmu (the writer of the server's stdin).
 * The host's callbacks are never called with srv->mu held, except
 * log(), which is Any and does not call back. */
#ifndef TH_PLUGIN_MCPSRC_H
#define TH_PLUGIN_MCPSRC_H

#include <jansson.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "toolhost/plugin.h"

#define MCPSRC_PROTOCOL "2025-06-18"

struct curl_slist;
typedef struct mcp_state mcp_state;
typedef struct mcp_oauth mcp_oauth;
typedef struct mcp_srv mcp_srv;

struct mcp_tool;

/* One request in flight to a server: the supervisor's handshake (on its
 * stack, waiting on cv) or a call of a stdio server (`call` set: on the
 * heap, the call suspended and owned by the server's reader thread, which
 * finishes it and frees this).  Linked in srv->pending while it waits;
 * every member below `next` is written under srv->mu. */
typedef struct mcp_pend {
    int64_t id;
    struct mcp_pend *next;
    /* a suspended call (NULL for the handshake's requests) */
    toolhost_call *call;
    const toolhost_tool *tool;
    const struct mcp_tool *mt;
    int64_t t0, deadline;  /* monotonic ms; deadline -1: none */
    pid_t pid;
    bool hooked;           /* on_cancel registered */
    const char *fail;      /* the request could not be sent */
    pthread_cond_t cv;
    json_t *msg;        /* the response (result or error), owned      */
    const char *gone;   /* the server went away (a static reason)     */
    bool cancel;        /* the call's on_cancel hook fired            */
    uint64_t n_progress; /* progress updates handed on                */
    /* a call of a stdio server: its tools/call line (ending in '\n'),
     * malloc()ed, until written; NULL once written */
    char *line;
    size_t line_len;
    bool slot;          /* holds one of the server's max_concurrency  */
    bool unsent;        /* in pending, line not written yet: the reader
                           writes it (mcpsrc_pump)                   */
} mcp_pend;

enum { SRV_STARTING = 0, SRV_UP = 1, SRV_DOWN = 2 };

/* One imported tool: the server and the tool's name there. */
typedef struct mcp_tool {
    mcp_srv *srv;
    char *remote;        /* the tool's name on the server            */
    bool structured;     /* declared with an output schema we kept   */
} mcp_tool;

/* mcp_answer.c: the usual answer (text blocks only) without a tree. */
#define MCPSRC_FAST_TEXTS 16
typedef struct mcpsrc_fast_answer {
    int64_t id;
    size_t n;                       /* text blocks */
    size_t off[MCPSRC_FAST_TEXTS];  /* each text in buf (NUL after it) */
    size_t len[MCPSRC_FAST_TEXTS];
    char *buf;                      /* reused from answer to answer */
    size_t used, cap;
} mcpsrc_fast_answer;

struct mcp_srv {
    mcp_state *st;
    /* config (read-only after init) */
    char *name;
    char *prefix;
    char *url;          /* Streamable HTTP: the endpoint (NULL: stdio) */
    struct curl_slist *headers; /* HTTP: "Name: value" lines           */
    mcp_oauth *oauth;   /* HTTP: client credentials (NULL: none)     */
    char **argv;        /* NULL-terminated, argv[0] a path (stdio)   */
    char **envp;        /* NULL-terminated NAME=VALUE                */
    char *cwd;
    bool has_user;
    uid_t uid;
    gid_t gid;
    int64_t timeout_ms; /* 0: the call's deadline only               */
    int64_t max_concurrency;
    int64_t max_waiting; /* stdio: calls waiting for a slot, at most */

    pthread_mutex_t mu;
    pthread_cond_t cv;  /* state changes, a slot freed, stop         */
    int state;          /* SRV_*                                     */
    bool stop;
    bool first_done;    /* the first start ended (up or failed)      */
    char why[256];      /* why the last start failed or it exited    */
    int64_t next_try;   /* monotonic ms of the next start (DOWN)     */
    unsigned attempt;   /* starts that failed or died in a row       */
    uint64_t generation; /* starts so far                           */
    pid_t pid;          /* the running server, or -1                 */
    int in_fd;          /* its stdin (our end), or -1                */
    int out_fd;         /* its stdout (our end), or -1               */
    int err_fd;         /* its stderr (read end), or -1              */
    toolhost_cage *cage;
    int64_t next_id;
    mcp_pend *pending;
    int64_t in_flight;
    /* calls of a stdio server waiting for a slot, first in first out
     * (never in pending); the reader gives them slots as calls end */
    mcp_pend *waitq, *waitq_tail;
    int64_t n_waiting;  /* in waitq                                  */
    uint64_t n_refused; /* calls refused by max_waiting (log lines)  */
    size_t n_unsent;    /* calls in pending with `unsent`            */
    bool flush;         /* wrest holds bytes: the reader writes them  */
    json_t *tools;      /* the last tools/list (array), owned        */
    json_t *served;     /* the list this generation's init_tools()
                           built from, owned; NULL before           */
    bool relist;        /* list_changed came: the supervisor lists
                           the tools again                          */
    bool asked;         /* tools_changed() called (once per
                           generation of the plugin)                */
    char session[160];  /* HTTP: Mcp-Session-Id ("" before initialize) */
    bool http_down;     /* HTTP: a call found the server gone        */
    void *get_multi;    /* HTTP: the GET stream's CURLM while it is
                           open (woken by stop and by mark_down)     */
    /* counters for rate-limited log lines (reader thread only) */
    uint64_t n_dropped, n_unknown_id, n_bad_json, n_stderr;

    int wake_fd;        /* eventfd: wakes the reader (a call cancelled,
                           a request that could not be sent)         */
    bool reader_done;   /* the reader of this start has ended: no call
                           may be handed to it                       */
    pthread_mutex_t wmu; /* one writer of in_fd at a time           */
    /* (wmu) the rest of a line execute() began to write without
     * waiting: written before any other byte (mcpsrc_send, the reader) */
    char *wrest;
    size_t wrest_off, wrest_len;
    int pid_fd;          /* a pidfd of the server (-1: none), read by
                            the reader: the leader's exit ends it even
                            when a descendant holds its stdout      */
    pthread_t sup;
    bool sup_started;

    /* What the server wrote and no line has taken yet (its stdout).  The
     * reader's; a caller reads for a moment in mcpsrc_busy_poll().  All
     * under rd_mu, taken after mu never (mu may be taken under it). */
    pthread_mutex_t rd_mu;
    int rd_fd;           /* this start's stdout, -1 between starts   */
    char *rd_buf;
    size_t rd_cap, rd_len;
    const char *rd_kill; /* a read found it must be killed (why)     */
    mcpsrc_fast_answer rd_fa;
    /* busy polling (stdio): at most busy_poll_us of a caller's time for
     * the answer of a call alone in flight; spin_skip calls go without
     * after a poll the answer outlasted (under mu) */
    int64_t busy_poll_us;
    unsigned spin_skip, spin_backoff;
    int64_t spin_last_ms; /* (mu) when a call was last busy-polled     */
    int64_t concurrent_ms; /* (mu) when a call was last sent with others
                              in flight: no busy polling for
                              MCPSRC_ALONE_MS after                      */
    bool rd_parked;       /* (mu) the reader is not watching rd_fd     */
    char *dout;           /* (mu) answers to the server's requests read
                             by a caller (busy polling), for the reader
                             to write: a caller never waits for room in
                             the server's stdin                         */
    size_t dout_len;
    int64_t rd_until;     /* (mu) when the reader looks at its calls
                             next (monotonic ms; -1: not until woken): a
                             call due before must wake it              */
};

struct mcp_state {
    /* What init_tools() returns. */
    const toolhost_tool *tools;
    uint32_t n_tools;
    /* Private. */
    toolhost_tool *tools_rw;
    mcp_tool *mtools;
    const toolhost_host_api *host;
    mcp_srv *srv;
    size_t n_srv;
    int64_t restart_initial_ms, restart_max_ms, start_timeout_ms;
    int64_t max_message;
    int64_t write_timeout_ms;
    char *path;         /* PATH to look commands up in */
};

/* mcp_server.c: the thread that has just written the request of a
 * call alone in flight to a stdio server reads the server's output
 * itself for up to busy_poll_us, instead of leaving it to the reader
 * thread and sleeping: an answer that comes that soon costs no wake-up
 * of a thread.  Any answer it reads ends its call here.  Without mu. */
void mcpsrc_busy_poll(mcp_srv *s);
#define MCPSRC_ALONE_MS 100
/* The server whose output this thread reads in mcpsrc_busy_poll() right
 * now (NULL: none): the calls it ends say so in their meta. */
extern __thread const mcp_srv *mcpsrc_busy_polling;

/* mcp_conf.c */
int mcpsrc_config(mcp_state *st, const uint8_t *config, size_t len,
                  char *err, size_t err_size);
int mcpsrc_build_tools(mcp_state *st, char *err, size_t err_size);
void mcpsrc_state_free(mcp_state *st);

int64_t mcpsrc_now_ms(void);
int64_t mcpsrc_now_us(void); /* monotonic, microseconds */
/* "500ms", "30s", "2m", "1h", "0", or whole seconds: ms, or -1. */
int64_t mcpsrc_duration(const json_t *v);

/* mcp_oauth.c (a server with url: and oauth:) */
int mcpsrc_oauth_parse(mcp_srv *s, const json_t *o, const char *who,
                       char *err, size_t es);
void mcpsrc_oauth_free(mcp_oauth *a);
/* The Authorization header line for the next request: 0 with *line
 * (malloc'd; NULL: send none yet, the server's 401 starts the flow) and
 * *gen (the token's generation), or -1 with why (which step failed).
 * `refused`: the server answered 401 to the token of generation *gen (0:
 * none sent), `rm` the resource_metadata URL that 401 named ("" none): a
 * new token is fetched, or taken from a fetch of another thread.  Any
 * thread; may block for one fetch (oauth.timeout per transfer), but no
 * longer than `call` lives (NULL: no call) or past `deadline` (monotonic
 * ms, -1: none): then MCPSRC_OAUTH_CANCELLED or MCPSRC_OAUTH_TIMEDOUT.
 * A fetch its own call ends is abandoned: the calls that waited for it
 * fetch again rather than take its failure. */
#define MCPSRC_OAUTH_CANCELLED (-2)
#define MCPSRC_OAUTH_TIMEDOUT (-3)
int mcpsrc_oauth_auth(mcp_srv *s, bool refused, uint64_t *gen,
                      const char *rm, toolhost_call *call, int64_t deadline,
                      char **line, char *why, size_t ws);

/* mcp_answer.c: the usual answer, mcpsrc_read_answer() below. */
/* 1: line[0..len) is exactly {"jsonrpc":"2.0","id":N,"result":
 * {"content":[{"type":"text","text":...}...],"isError":false}} (keys in
 * any order; jsonrpc and isError may be left out) and *a holds its id and
 * texts; 0: it is not (read it with jansson); -1: out of memory. */
int mcpsrc_read_answer(const char *line, size_t len, mcpsrc_fast_answer *a);
void mcpsrc_fast_answer_free(mcpsrc_fast_answer *a);

/* mcp_server.c */
int mcpsrc_servers_start(mcp_state *st, char *err, size_t err_size);
void mcpsrc_servers_stop(mcp_state *st);
/* Writes one JSON message (a line) to the server's stdin; the caller
 * holds no lock.  0, or -1 (the server is not up, or did not read within
 * write_timeout: then it is killed). */
int mcpsrc_send(mcp_srv *s, json_t *msg);
/* execute() of a stdio call, s->mu held: writes p's line to the server
 * when that needs no wait (wmu free, the socket has room): true, the line
 * is gone (a part of it may be left in wrest for the reader); false: the
 * reader must write it. */
bool mcpsrc_try_send_locked(mcp_srv *s, mcp_pend *p);
/* Links p (with a fresh id) into the server's pending list; s->mu held. */
void mcpsrc_pend_add(mcp_srv *s, mcp_pend *p);
/* Unlinks p; s->mu held. */
void mcpsrc_pend_del(mcp_srv *s, mcp_pend *p);

/* mcp_http.c (servers with url:) */
int mcpsrc_http_global(bool init);
/* The supervisor's thread, while the session is up: reads the server's
 * GET stream (server-initiated messages) until stop or http_down; each
 * notifications/tools/list_changed calls relist(s).  Reconnects with
 * back-off when it drops; after a 405 (logged once per session) it only
 * waits.  Returns on stop or http_down. */
void mcpsrc_http_listen(mcp_srv *s, void (*relist)(mcp_srv *s));
/* Every page of tools/list: 0 with *tools (owned), or -1. */
int mcpsrc_http_list(mcp_srv *s, json_t **tools, char *why, size_t ws);
/* Wakes the GET stream's wait (s->mu held). */
void mcpsrc_http_wake(mcp_srv *s);
/* initialize, initialized, tools/list: 0 with *tools (owned), or -1. */
int mcpsrc_http_handshake(mcp_srv *s, json_t **tools, char *why, size_t ws);
/* One tools/call: 0 with *answer (owned), or -1 with *error (a meta
 * error name) and why; *answer may be set then too (an HTTP error with a
 * JSON-RPC body). */
int mcpsrc_http_call(mcp_srv *s, const char *remote, toolhost_call *call,
                     int64_t id, json_t *args, int64_t deadline,
                     json_t **answer, uint64_t *n_progress,
                     const char **error, char *why, size_t ws);

/* mcp_call.c */
/* The reader thread (the call's owner) ends a suspended call: with the
 * server's answer (owned by the caller), or failed with `error` (a meta
 * error name) and `why`; frees p. */
void mcpsrc_call_finish(mcp_pend *p, json_t *answer, const char *error,
                        const char *why);
/* The same with the answer read by mcpsrc_read_answer() (`texts`, for a
 * tool without an output schema) instead of a tree. */
void mcpsrc_call_finish_as(mcp_pend *p, json_t *answer,
                           const mcpsrc_fast_answer *texts, const char *error,
                           const char *why);
int mcpsrc_execute(void *state, const toolhost_tool *tool,
                   toolhost_call *call, const uint8_t *args, size_t args_len);

#endif
