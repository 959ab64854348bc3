/* mcp.c - the MCP protocol core: JSON-RPC 2.0 messages of one client, the
 * lifecycle, tools/list, tools/call (progress, cancellation, permission
 * asks through elicitation), logging, list_changed.  Tasks are in
 * mcp_tasks.c, results in mcp_result.c.  docs/mcp.md is the picture. */
#include <errno.h>
#include <nettle/base16.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "mcp_int.h"
#include "front/mcp_config.h"
#include "th/content.h"
#include "th/json.h"
#include "th/log.h"
#include "th/schema.h"
#include "th/tool.h"

#define LIST_PAGE 100           /* tools per tools/list page */
#define LIST_CHANGED_MIN_MS 1000 /* at most one list_changed a second */

/* 2024-11-05 clients speak the same tools/list and tools/call over stdio
 * (its HTTP transport, HTTP+SSE, is not served); the fields later
 * revisions added (outputSchema, structuredContent, annotations) are ones
 * its clients ignore. */
const char *const mcp_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                    "2024-11-05", NULL};
/* 2026-07-28 is served per request: a request whose params._meta names it
 * (the envelope) is answered in its terms, with no initialize before it
 * (envelope_check below). */
const char *const mcp_modern_versions[] = {"2026-07-28", NULL};

bool mcp_version_served(const char *v)
{
    for (size_t i = 0; mcp_versions[i]; i++)
        if (strcmp(v, mcp_versions[i]) == 0)
            return true;
    for (size_t i = 0; mcp_modern_versions[i]; i++)
        if (strcmp(v, mcp_modern_versions[i]) == 0)
            return true;
    return false;
}

static bool is_modern(const th_mcp_session *m)
{
    return atomic_load_explicit(&((th_mcp_session *)m)->modern,
                                memory_order_acquire);
}

int64_t mcp_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- Sending -------------------------------------------------------------- */

/* Consumes msg. */
void mcp_send(th_mcp_session *m, json_t *msg, const json_t *req)
{
    if (!msg) {
        th_log_error("mcp: out of memory building a message");
        if (m->t.lost)
            m->t.lost(m->ud, req);
        return;
    }
    m->t.send(m->ud, msg, req);
    json_decref(msg);
}

void mcp_request_done(th_mcp_session *m, const json_t *id)
{
    if (m->t.request_done && id)
        m->t.request_done(m->ud, id);
}

/* What a 2026-07-28 result carries besides its own fields: resultType
 * (required: a result without it is refused by the client) and the
 * server's identity in _meta.  -1: no memory. */
static int modern_stamp(json_t *result)
{
    if (!json_is_object(result))
        return 0;
    if (!json_object_get(result, "resultType") &&
        json_object_set_new(result, "resultType", json_string("complete")))
        return -1;
    json_t *meta = json_object_get(result, "_meta");
    if (!meta) {
        meta = json_object();
        if (json_object_set_new(result, "_meta", meta) != 0)
            return -1;
    }
    if (!json_is_object(meta) || json_object_get(meta, MCP_META_SERVER_INFO))
        return 0;
    return json_object_set_new(meta, MCP_META_SERVER_INFO,
                               json_pack("{s:s, s:s}", "name", "toolhost",
                                         "version", TOOLHOST_VERSION));
}

void mcp_send_result(th_mcp_session *m, const json_t *id, json_t *result)
{
    if (result && is_modern(m) && modern_stamp(result) != 0) {
        json_decref(result);
        result = NULL;
    }
    if (!result) {
        mcp_send_error(m, id, MCP_INTERNAL_ERROR,
                       "out of memory building the result");
        return;
    }
    json_t *msg = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                            id ? id : json_null(), "result", result);
    mcp_send(m, msg, id);
}

void mcp_send_cacheable(th_mcp_session *m, const json_t *id, json_t *result)
{
    if (result && is_modern(m) &&
        (json_object_set_new(result, "ttlMs", json_integer(0)) != 0 ||
         json_object_set_new(result, "cacheScope",
                             json_string("private")) != 0)) {
        json_decref(result);
        result = NULL;
    }
    mcp_send_result(m, id, result);
}

void mcp_send_error(th_mcp_session *m, const json_t *id, int code,
                    const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    /* 2026-07-28 has no code of its own for a resource not found: it is
     * invalid params there. */
    if (code == MCP_RESOURCE_NOT_FOUND && is_modern(m))
        code = MCP_INVALID_PARAMS;
    json_t *msg = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0",
                            "id", id ? id : json_null(), "error", "code",
                            code, "message", text);
    mcp_send(m, msg, id);
}

static void send_notification(th_mcp_session *m, const char *method,
                              json_t *params, const json_t *req)
{
    json_t *msg = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method", method);
    if (msg && params)
        json_object_set_new(msg, "params", params);
    else
        json_decref(params);
    mcp_send(m, msg, req);
}

/* ---- Logging (logging/setLevel, notifications/message) --------------------- */

static const char *const mcp_levels[] = {"debug",    "info",  "notice",
                                         "warning",  "error", "critical",
                                         "alert",    "emergency"};

static int mcp_level_from_name(const char *s)
{
    for (int i = 0; i < 8; i++)
        if (strcmp(s, mcp_levels[i]) == 0)
            return i;
    return -1;
}

/* The session's own log line: to the host log, and to the client as
 * notifications/message when it asked for that level. */
static void mcp_log(th_mcp_session *m, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void mcp_log(th_mcp_session *m, int level, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    int th = level >= 4 ? TOOLHOST_LOG_ERROR
             : level == 3 ? TOOLHOST_LOG_WARN
             : level >= 1 ? TOOLHOST_LOG_INFO
                          : TOOLHOST_LOG_DEBUG;
    th_log(th, "mcp session=%llu %s",
           (unsigned long long)th_session_id(m->s), text);
    pthread_mutex_lock(&m->mu);
    bool want = m->log_level >= 0 && level >= m->log_level;
    pthread_mutex_unlock(&m->mu);
    if (want)
        send_notification(m,
                          "notifications/message",
                          json_pack("{s:s, s:s, s:s}", "level",
                                    mcp_levels[level], "logger", "toolhost",
                                    "data", text),
                          NULL);
}

/* A tool's log_call() lines (th_front_ops.log_call) go to the client of
 * the call as notifications/message, "logger" the tool's name, related to
 * the tools/call request (over HTTP: on its stream), at most
 * MCP_LOG_PER_SEC a second per call; the lines dropped beyond are said in
 * one note at the next window or before the call's result. */
#define MCP_LOG_PER_SEC 20

/* TOOLHOST_LOG_ERROR, _WARN, _INFO, _DEBUG as MCP levels */
static const int mcp_level_of_th[] = {4, 3, 1, 0};

/* Under m->mu: the note for the lines dropped, if any. */
static void log_gate_flush_locked(th_mcp_session *m, mcp_log_gate *g,
                                  const char *tool, const json_t *req)
{
    if (!g->dropped)
        return;
    char text[128];
    snprintf(text, sizeof text,
             "%u log lines dropped (more than %d a second)", g->dropped,
             MCP_LOG_PER_SEC);
    g->dropped = 0;
    send_notification(m, "notifications/message",
                      json_pack("{s:s, s:s, s:s}", "level",
                                mcp_levels[g->drop_level], "logger", tool,
                                "data", text),
                      req);
    g->drop_level = 0;
}

/* Under m->mu: whether one more line at MCP level `lv` may go now. */
static bool log_gate_pass_locked(th_mcp_session *m, mcp_log_gate *g,
                                 const char *tool, const json_t *req, int lv)
{
    int64_t now = mono_ms();
    if (g->win_ms == 0 || now - g->win_ms >= 1000) {
        log_gate_flush_locked(m, g, tool, req);
        g->win_ms = now;
        g->n = 0;
    }
    if (g->n < MCP_LOG_PER_SEC) {
        g->n++;
        return true;
    }
    g->dropped++;
    if (lv > g->drop_level)
        g->drop_level = lv;
    return false;
}

/* ---- The MCP-visible tool list ----------------------------------------------- */

static bool is_task_tool(const char *name)
{
    return strcmp(name, "get_running_tasks") == 0 ||
           strcmp(name, "cancel_task") == 0;
}

typedef struct list_ctx {
    json_t *arr;
    int err;
} list_ctx;

static int list_one(const th_tool *t, void *ud)
{
    list_ctx *x = ud;
    if (is_task_tool(t->name))
        return 0;
    json_t *e = th_schema_mcp_tool(t);
    if (!e || json_array_append_new(x->arr, e) != 0) {
        x->err = TH_ENOMEM;
        return 1;
    }
    return 0;
}

/* Every tool session s shows, in name order; NULL when out of memory. */
static json_t *visible_tools(th_session *s)
{
    list_ctx x = {json_array(), 0};
    if (!x.arr)
        return NULL;
    th_session_tools(s, list_one, &x);
    if (x.err) {
        json_decref(x.arr);
        return NULL;
    }
    return x.arr;
}

uint64_t mcp_json_digest(const json_t *v)
{
    char *txt = v ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    uint64_t h = txt ? th_view_digest(txt, strlen(txt)) : 0;
    free(txt);
    return h;
}

/* The digest of the tools s is shown (a th_view_fn), or 0 when out of
 * memory. */
static uint64_t tools_digest(th_session *s, void *ud)
{
    (void)ud;
    json_t *arr = visible_tools(s);
    uint64_t h = mcp_json_digest(arr);
    json_decref(arr);
    return h;
}

static const struct {
    th_view_fn digest;
    const char *method; /* the notification */
    const char *what;   /* in the log line */
} lists[MCP_LISTS] = {
    [MCP_LIST_TOOLS] = {tools_digest, "notifications/tools/list_changed",
                        "tools"},
    [MCP_LIST_RESOURCES] = {mcp_resources_digest,
                            "notifications/resources/list_changed",
                            "resources"},
    [MCP_LIST_PROMPTS] = {mcp_prompts_digest,
                          "notifications/prompts/list_changed", "prompts"},
};

static void timer_wake(void);

/* ---- subscriptions/listen (2026-07-28) --------------------------------------- */

/* m->mu held: whether an open listen wants tools list_changed. */
static bool listens_tools_locked(const th_mcp_session *m)
{
    for (const mcp_listen *l = m->listens; l; l = l->next)
        if (l->tools)
            return true;
    return false;
}

/* m->mu held: `method` to every listen that asked for it, on its own
 * stream, stamped with its subscription id. */
static void listen_notify_locked(th_mcp_session *m, const char *method)
{
    for (mcp_listen *l = m->listens; l; l = l->next)
        if (l->tools)
            send_notification(m, method,
                              json_pack("{s:{s:O}}", "_meta",
                                        MCP_META_SUBSCRIPTION, l->id),
                              l->id);
}

/* m->mu held: the listen of request `id`, taken out of the list; NULL
 * when none. */
static mcp_listen *listen_take_locked(th_mcp_session *m, const json_t *id)
{
    for (mcp_listen **p = &m->listens; *p; p = &(*p)->next)
        if (json_equal((*p)->id, (json_t *)id)) {
            mcp_listen *l = *p;
            *p = l->next;
            m->n_listens--;
            return l;
        }
    return NULL;
}

static void listen_free(mcp_listen *l)
{
    json_decref(l->id);
    free(l);
}

/* Sends the list_changed of list k now, or marks it for the timer when
 * one for that list went out less than a second ago.  m->mu held.  A
 * 2026-07-28 session sends it on its listens only. */
static void lists_changed_locked(th_mcp_session *m, mcp_list_kind k)
{
    mcp_list_state *l = &m->lists[k];
    int64_t now = mono_ms();
    if (l->sent_ms && now - l->sent_ms < LIST_CHANGED_MIN_MS) {
        l->pending = true;
        timer_wake();
        return;
    }
    l->pending = false;
    l->sent_ms = now;
    if (is_modern(m))
        listen_notify_locked(m, lists[k].method);
    else
        send_notification(m, lists[k].method, NULL, NULL);
}

/* th_front_ops.tools_changed: a reload (or a tool search_tools found, or
 * a task) may have changed what the session sees.  Each list's digest,
 * shared by the sessions that see the same lists (th_session_view_digest),
 * is compared with the one the client was last shown; a list_changed goes
 * out for each list that differs. */
static void front_tools_changed(void *ud)
{
    th_mcp_session *m = ud;
    /* A reload tells every session of the host, this one too from the
     * moment th_session_open() lists it, before m->s is set: nothing to
     * compare yet (the digests are taken right after). */
    th_session *s = __atomic_load_n(&m->s, __ATOMIC_ACQUIRE);
    if (!s)
        return;
    uint64_t h[MCP_LISTS];
    for (int k = 0; k < MCP_LISTS; k++)
        h[k] = th_session_view_digest(s, lists[k].digest, NULL);
    bool sent[MCP_LISTS] = {false};
    pthread_mutex_lock(&m->mu);
    /* 2026-07-28 sends nothing unasked: only the tools' list_changed, on
     * a subscriptions/listen that asked for it (the revision's resources
     * and prompts filters are not honoured). */
    bool may = m->initialized;
    for (int k = 0; k < MCP_LISTS; k++) {
        if (!h[k]) /* out of memory: as before */
            continue;
        bool changed = m->lists[k].hash && h[k] != m->lists[k].hash;
        m->lists[k].hash = h[k];
        bool want = may && (!is_modern(m) || (k == MCP_LIST_TOOLS &&
                                              listens_tools_locked(m)));
        if ((sent[k] = changed && want))
            lists_changed_locked(m, (mcp_list_kind)k);
    }
    pthread_mutex_unlock(&m->mu);
    for (int k = 0; k < MCP_LISTS; k++)
        if (sent[k])
            th_log_info("mcp session=%llu %s changed: list_changed",
                        (unsigned long long)th_session_id(m->s),
                        lists[k].what);
}

/* ---- The timer thread --------------------------------------------------------- */

/* One thread for every session of the process (a thread per session cost
 * ~140 KiB each, and 1,000 HTTP sessions 1,000 threads): once a second,
 * and when a deferred list_changed falls due, it sends those and expires
 * the sessions' finished task records.  It runs while any session lives
 * and ends with the last (th_mcp_session_free joins it).
 *
 * Locks: g_tm.mu (the list) before a session's mu; g_tm.wmu (the wake-up)
 * is a leaf, taken by lists_changed_locked under a session's mu. */
typedef struct timer_run {
    pthread_t th;
    atomic_bool stop;
} timer_run;

static struct {
    pthread_mutex_t mu;         /* the list, run */
    th_mcp_session *list;
    size_t n;
    timer_run *run;             /* the running thread, NULL: none */
    pthread_mutex_t wmu;        /* leaf: seq, cv */
    pthread_cond_t cv;
    uint64_t seq;               /* bumped by every wake-up */
} g_tm = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, NULL,
          PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void timer_wake(void)
{
    pthread_mutex_lock(&g_tm.wmu);
    g_tm.seq++;
    pthread_cond_broadcast(&g_tm.cv);
    pthread_mutex_unlock(&g_tm.wmu);
}

/* One session's turn (m->mu held): how long until it needs the timer
 * again, at most 1000 ms. */
static int64_t timer_turn_locked(th_mcp_session *m, int64_t now)
{
    for (int k = 0; k < MCP_LISTS; k++)
        if (m->lists[k].pending &&
            now - m->lists[k].sent_ms >= LIST_CHANGED_MIN_MS)
            lists_changed_locked(m, (mcp_list_kind)k);
    mcp_subs_send_locked(m);
    mcp_tasks_expire_locked(m, mcp_wall_ms());
    int64_t wait = 1000;
    for (int k = 0; k < MCP_LISTS; k++) {
        if (!m->lists[k].pending)
            continue;
        int64_t left = LIST_CHANGED_MIN_MS - (now - m->lists[k].sent_ms);
        wait = left < 1 ? 1 : left < wait ? left : wait;
    }
    return wait;
}

static void *timer_main(void *arg)
{
    timer_run *run = arg;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&g_tm.wmu);
        seen = g_tm.seq;
        pthread_mutex_unlock(&g_tm.wmu);
        int64_t wait = 1000;
        pthread_mutex_lock(&g_tm.mu);
        if (atomic_load(&run->stop)) {
            pthread_mutex_unlock(&g_tm.mu);
            break;
        }
        int64_t now = mono_ms();
        for (th_mcp_session *m = g_tm.list; m; m = m->tnext) {
            pthread_mutex_lock(&m->mu);
            int64_t w = timer_turn_locked(m, now);
            pthread_mutex_unlock(&m->mu);
            wait = w < wait ? w : wait;
        }
        pthread_mutex_unlock(&g_tm.mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (wait % 1000) * 1000000;
        ts.tv_sec += wait / 1000 + ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_mutex_lock(&g_tm.wmu);
        /* (a wake-up since the list was read: another turn at once) */
        while (g_tm.seq == seen && !atomic_load(&run->stop) &&
               pthread_cond_timedwait(&g_tm.cv, &g_tm.wmu, &ts) == 0)
            ;
        pthread_mutex_unlock(&g_tm.wmu);
    }
    return NULL;
}

/* ---- Resource updates ------------------------------------------------------ */

/* A plugin said the resource at `uri` changed (its thread, which must not
 * wait for any client): the subscriptions to it are marked, and the timer
 * thread sends notifications/resources/updated (mcp_subs_send_locked),
 * one per subscription however many updates came meanwhile.  Nothing to
 * do, and no lock taken, while no session subscribed to anything.  Every
 * session is in the timer's list (g_tm.mu before a session's mu). */
static void on_resource_updated(const char *uri)
{
    if (!mcp_subs_any())
        return;
    bool any = false;
    pthread_mutex_lock(&g_tm.mu);
    for (th_mcp_session *m = g_tm.list; m; m = m->tnext) {
        pthread_mutex_lock(&m->mu);
        any |= m->initialized && !is_modern(m) &&
               mcp_subs_mark_locked(m, uri);
        pthread_mutex_unlock(&m->mu);
    }
    pthread_mutex_unlock(&g_tm.mu);
    if (any)
        timer_wake();
}

/* Puts m in the timer's list, starting the thread for the first session.
 * 0, or -1 when the thread cannot start. */
static int timer_add(th_mcp_session *m)
{
    pthread_mutex_lock(&g_tm.mu);
    if (!g_tm.run) {
        timer_run *run = calloc(1, sizeof *run);
        if (!run || pthread_create(&run->th, NULL, timer_main, run) != 0) {
            free(run);
            pthread_mutex_unlock(&g_tm.mu);
            return -1;
        }
        g_tm.run = run;
    }
    m->tprev = NULL;
    m->tnext = g_tm.list;
    if (g_tm.list)
        g_tm.list->tprev = m;
    g_tm.list = m;
    g_tm.n++;
    m->timed = true;
    pthread_mutex_unlock(&g_tm.mu);
    return 0;
}

/* Takes m out of the timer's list (the timer no longer touches it when
 * this returns); the last session out stops the thread and joins it. */
static void timer_remove(th_mcp_session *m)
{
    if (!m->timed)
        return;
    timer_run *done = NULL;
    pthread_mutex_lock(&g_tm.mu);
    if (m->tprev)
        m->tprev->tnext = m->tnext;
    else
        g_tm.list = m->tnext;
    if (m->tnext)
        m->tnext->tprev = m->tprev;
    m->timed = false;
    if (--g_tm.n == 0) {
        done = g_tm.run;
        g_tm.run = NULL;
        atomic_store(&done->stop, true);
    }
    pthread_mutex_unlock(&g_tm.mu);
    if (done) {
        timer_wake();
        pthread_join(done->th, NULL);
        free(done);
    }
}

/* ---- Calls ---------------------------------------------------------------------- */

static void call_free(mcp_call *c)
{
    json_decref(c->answers);
    json_decref(c->asked);
    json_decref(c->id);
    json_decref(c->token);
    json_decref(c->result);
    free(c->status_msg);
    if (c->tool != c->tool_buf)
        free(c->tool);
    free(c);
}

static void unlink_call(th_mcp_session *m, mcp_call *c)
{
    for (mcp_call **p = &m->calls; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            return;
        }
}

void mcp_call_unref_locked(th_mcp_session *m, mcp_call *c)
{
    (void)m;
    if (--c->refs == 0)
        call_free(c);
}

static mcp_call *find_call(th_mcp_session *m, const json_t *id)
{
    for (mcp_call *c = m->calls; c; c = c->next)
        if (!c->task && !c->finished && json_equal(c->id, id))
            return c;
    return NULL;
}

/* m->mu held: whether a request under `id` is in flight (a call or a
 * subscriptions/listen): a second one is refused, since a cancel or a
 * response could not tell them apart. */
static bool id_in_flight_locked(th_mcp_session *m, const json_t *id)
{
    for (const mcp_listen *l = m->listens; l; l = l->next)
        if (json_equal(l->id, (json_t *)id))
            return true;
    return find_call(m, id) != NULL;
}

static mcp_call *find_call_id(th_mcp_session *m, uint64_t call_id)
{
    for (mcp_call *c = m->calls; c; c = c->next)
        if (c->call_id == call_id)
            return c;
    return NULL;
}

static void send_progress(th_mcp_session *m, mcp_call *c, const th_event *e)
{
    double p, total = -1;
    if (e->fraction >= 0) {
        total = 100;
        p = e->fraction * 100;
        if (p > total)
            p = total;
    } else {
        p = c->last_progress < 0 ? 1 : c->last_progress + 1;
    }
    if (p <= c->last_progress) {
        /* Progress must increase strictly: a tiny step past the last. */
        p = c->last_progress + 1e-6;
        if (total >= 0 && p > total)
            total = p;
    }
    c->last_progress = p;
    json_t *params = json_pack("{s:O, s:f}", "progressToken", c->token,
                               "progress", p);
    if (params && total >= 0)
        json_object_set_new(params, "total", json_real(total));
    if (params && e->message)
        json_object_set_new(params, "message", json_string(e->message));
    send_notification(m, "notifications/progress", params,
                      c->task ? NULL : c->id);
}

/* on_event, m->mu held: a progress update (to the client when it gave a
 * token; a task's status message). */
static void event_progress_locked(th_mcp_session *m, mcp_call *c,
                                  const th_event *e)
{
    if (c->token && !c->finished && !c->client_cancelled)
        send_progress(m, c, e);
    if (c->task && e->message) {
        free(c->status_msg);
        c->status_msg = strdup(e->message);
        c->updated_ms = mcp_wall_ms();
    }
}

/* on_event, m->mu held: the acknowledgement (r, RUNNING) or an event
 * without a result. */
static void event_ack_locked(th_mcp_session *m, mcp_call *c,
                             const th_result *r)
{
    if (c->task)
        c->updated_ms = mcp_wall_ms();
    if (r && c->task) {
        c->acked = true;
        if (c->announce_pending)
            mcp_task_announce_locked(m, c, true);
    }
    if (r && c->token && !c->client_cancelled) {
        /* The acknowledgement carries the first progress update:
         * its message and, when it gave one, its fraction. */
        th_event pe = {.kind = TH_EV_PROGRESS,
                       .fraction = r->ack_has_fraction ? r->ack_fraction
                                                       : -1,
                       .message = r->message};
        send_progress(m, c, &pe);
    }
}

/* on_event, m->mu held: a plain answer goes out as text, without a JSON
 * tree, built in the session's buffer: no allocation per call
 * (c->no_response once sent). */
static void final_text_locked(th_mcp_session *m, mcp_call *c,
                              const th_result *r)
{
    th_buf *txt = &m->txt;
    th_buf_reset(txt);
    if (mcp_tool_result_text(txt, c->id, r, c->call_id, c->out_type,
                             c->structured) == 0) {
        m->t.send_text(m->ud, (const char *)txt->data, txt->len, c->id);
        c->no_response = true;
    }
    if (txt->cap > ((size_t)64 << 10)) { /* a big answer: not kept */
        th_buf_destroy(txt);
        th_buf_init(txt);
    }
}

/* on_event, m->mu held: a task's final result (res, taken; NULL when the
 * core keeps it) and its status. */
static void final_task_locked(th_mcp_session *m, mcp_call *c,
                              const th_result *r, json_t *res)
{
    c->updated_ms = mcp_wall_ms();
    c->status = r->kind == TH_RESULT_ERROR && r->error == TH_ECANCELLED
                    ? MCP_TASK_CANCELLED
                : r->kind == TH_RESULT_DONE && r->ok ? MCP_TASK_COMPLETED
                                                     : MCP_TASK_FAILED;
    /* An acknowledged task's result is the core's (th_task_get,
     * th_task_wait); one that failed before has only this one. */
    json_decref(c->result);
    c->result = res;
    if (c->announce_pending)
        mcp_task_announce_locked(m, c, true);
    else if (c->announced)
        mcp_task_ended_locked(m, c);
}

/* on_event, m->mu held: a request's final result (res, taken) sent unless
 * sent already or cancelled by the client; the request is over. */
static void final_request_locked(th_mcp_session *m, mcp_call *c,
                                 const th_result *r, json_t *res)
{
    if (!c->client_cancelled && !c->no_response)
        mcp_send_result(m, c->id, res);
    else
        json_decref(res);
    c->no_response = true;
    mcp_request_done(m, c->id);
    if (r->kind == TH_RESULT_ERROR && r->error == TH_ECANCELLED)
        th_log_info("mcp session=%llu call=%llu %s cancelled",
                    (unsigned long long)th_session_id(m->s),
                    (unsigned long long)c->call_id, c->tool);
    unlink_call(m, c);
    mcp_call_unref_locked(m, c);
}

static void on_event(const th_event *e, void *ud)
{
    mcp_call *c = ud;
    th_mcp_session *m = c->m;
    pthread_mutex_lock(&m->mu); /* (c->call_id: set before th_call_submit) */
    if (e->kind == TH_EV_PROGRESS) {
        event_progress_locked(m, c, e);
        pthread_mutex_unlock(&m->mu);
        return;
    }
    const th_result *r = e->result;
    if (!r || r->kind == TH_RESULT_RUNNING) {
        event_ack_locked(m, c, r);
        pthread_mutex_unlock(&m->mu);
        return;
    }
    /* The final result, after the note for its dropped log lines. */
    if (!c->client_cancelled)
        log_gate_flush_locked(m, &c->log, c->tool, c->task ? NULL : c->id);
    c->finished = true;
    if (m->inflight)
        m->inflight--;
    if (m->drain_waiters)
        pthread_cond_broadcast(&m->cv);
    if (!c->task && !c->client_cancelled && !c->no_response &&
        m->t.send_text && !is_modern(m))
        final_text_locked(m, c, r);
    json_t *res = (c->task && c->acked) || (!c->task && c->no_response)
                      ? NULL
                      : mcp_tool_result(r, c->tool, c->call_id,
                                        c->out_type, c->structured,
                                        m->elicitation, mcp_has_audio(m),
                                        mcp_has_links(m));
    if (c->task)
        final_task_locked(m, c, r, res);
    else
        final_request_locked(m, c, r, res);
    mcp_call_unref_locked(m, c); /* the event's reference */
    pthread_mutex_unlock(&m->mu);
}

/* With m->mu held: the request call `call_id` belongs to - its own
 * record, or for a call a tool made, the outermost call's.  The origin is
 * looked up (the core's session lock) with m->mu let go, and only when the
 * id itself is not a request of this session; NULL when none. */
static mcp_call *find_call_locked(th_mcp_session *m, uint64_t call_id)
{
    mcp_call *c = find_call_id(m, call_id);
    if (c)
        return c;
    pthread_mutex_unlock(&m->mu);
    uint64_t root = th_call_origin(m->s, call_id);
    pthread_mutex_lock(&m->mu);
    return root && root != call_id ? find_call_id(m, root) : NULL;
}

/* ---- Input required (2026-07-28) ----------------------------------------------

 * The revision has no request of ours to the client: a tool's ask_client()
 * in a 2026-07-28 tools/call answers that request with an input_required
 * result (inputRequests {"ask-N": {method, params}} and an opaque
 * requestState) and the call is cancelled.  The client answers the
 * questions and sends the same tools/call again with inputResponses and
 * requestState: the tool runs again from the start, and its asks 1..N are
 * answered at once from the answers kept so far, in order; the N+1th goes
 * to the client the same way.  So a tool that acts before it asks acts
 * once per round (docs/mcp.md, "Input required").
 *
 * The states live here, in the process, not in a session (over HTTP each
 * request is a session of its own): at most mcp.max_pending_inputs, each
 * for mcp.input_ttl, answered once, and only by a request of the same
 * principal for the same tool and arguments. */
typedef struct mcp_input {
    char state[33];           /* 128 random bits in hex */
    char *owner, *tool;
    uint64_t args_hash;
    json_t *answers;          /* the answers to asks 1..N-1 */
    json_t *asked;            /* what asks 1..N asked: "METHOD HASH" of
                                 each (ask_sig) */
    size_t bytes;             /* the answers' size, counted against
                                 mcp.max_pending_input_bytes */
    int64_t expires_ms;
    struct mcp_input *next;
} mcp_input;

static struct {
    pthread_mutex_t mu;       /* leaf */
    mcp_input *list;
    size_t n;
    size_t bytes; /* the sum of the states' bytes */
} g_in = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

static void input_free(mcp_input *in)
{
    free(in->owner);
    free(in->tool);
    json_decref(in->answers);
    json_decref(in->asked);
    free(in);
}

/* g_in.mu held: drops the states past their time. */
static void inputs_expire_locked(int64_t now)
{
    for (mcp_input **p = &g_in.list; *p;) {
        mcp_input *in = *p;
        if (in->expires_ms > now) {
            p = &in->next;
            continue;
        }
        *p = in->next;
        g_in.n--;
        g_in.bytes -= in->bytes;
        th_log_info("mcp: input_required state of %s expired unanswered "
                    "(mcp.input_ttl)",
                    in->tool);
        input_free(in);
    }
}

void th_mcp_inputs_clear(void)
{
    pthread_mutex_lock(&g_in.mu);
    while (g_in.list) {
        mcp_input *in = g_in.list;
        g_in.list = in->next;
        input_free(in);
    }
    g_in.n = 0;
    g_in.bytes = 0;
    pthread_mutex_unlock(&g_in.mu);
}

/* The hash of a call's arguments (keys sorted): a state answers the
 * request it was made for. */
static uint64_t args_hash(const json_t *args)
{
    /* no arguments are {} */
    return json_is_object(args) ? mcp_json_digest(args)
                                : th_view_digest("{}", 2);
}

/* The first n items of a (NULL: none) in a new array; NULL: no memory. */
static json_t *array_head(const json_t *a, size_t n)
{
    json_t *r = json_array();
    for (size_t i = 0; r && i < n && i < json_array_size(a); i++)
        if (json_array_append(r, json_array_get(a, i)) != 0) {
            json_decref(r);
            return NULL;
        }
    return r;
}

/* m->mu held: a new state for c's ask number k (0-based), `sig` (what it
 * asks), listed; its requestState in state[33].  False when refused (full:
 * logged; no memory). */
static bool input_put(th_mcp_session *m, mcp_call *c, size_t k,
                      const char *sig, char state[33])
{
    th_config *cfg = th_host_config_get(m->h);
    const th_mcp_cfg *mc = th_mcp_config(cfg);
    size_t max = mc ? mc->max_pending_inputs : 1024; /* the defaults */
    size_t max_user = mc ? mc->max_pending_inputs_per_user : 64;
    /* the answers kept: one principal's states hold a quarter at most */
    size_t max_bytes = mc ? mc->max_pending_input_bytes : 64u << 20;
    int64_t ttl = mc ? (int64_t)mc->input_ttl_ms : 600000;
    th_config_unref(cfg);
    uint8_t rnd[16];
    mcp_input *in = calloc(1, sizeof *in);
    if (!in || getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd ||
        !(in->owner = strdup(m->owner)) || !(in->tool = strdup(c->tool)) ||
        !(in->answers = array_head(c->answers, k)) ||
        !(in->asked = array_head(c->asked, k)) ||
        json_array_append_new(in->asked, json_string(sig)) != 0) {
        if (in)
            input_free(in);
        return false;
    }
    base16_encode_update(in->state, sizeof rnd, rnd);
    in->state[32] = '\0';
    in->args_hash = c->args_hash;
    /* what the answers cost kept (their JSON text, plus the record) */
    in->bytes = sizeof *in + json_dumpb(in->answers, NULL, 0, JSON_COMPACT);
    int64_t now = mono_ms();
    in->expires_ms = now + ttl;
    pthread_mutex_lock(&g_in.mu);
    inputs_expire_locked(now);
    size_t mine = 0, mine_bytes = 0;
    for (mcp_input *o = g_in.list; o; o = o->next)
        if (strcmp(o->owner, m->owner) == 0) {
            mine++;
            mine_bytes += o->bytes;
        }
    size_t total = g_in.n, total_bytes = g_in.bytes;
    const char *key = total >= max               ? "mcp.max_pending_inputs"
                      : mine >= max_user         ? "mcp.max_pending_inputs_per_user"
                      : total_bytes + in->bytes > max_bytes
                          ? "mcp.max_pending_input_bytes"
                      : mine_bytes + in->bytes > max_bytes / 4
                          ? "mcp.max_pending_input_bytes (a quarter of it "
                            "for one caller)"
                          : NULL;
    if (!key) {
        in->next = g_in.list;
        g_in.list = in;
        g_in.n++;
        g_in.bytes += in->bytes;
        memcpy(state, in->state, 33);
    }
    pthread_mutex_unlock(&g_in.mu);
    if (key) {
        th_log_warn("mcp session=%llu call=%llu %s: input_required refused: "
                    "%zu states of %zu bytes wait for their retry, %zu of "
                    "%zu bytes this caller's; this one %zu bytes (%s)",
                    (unsigned long long)th_session_id(m->s),
                    (unsigned long long)c->call_id, c->tool, total,
                    total_bytes, mine, mine_bytes, in->bytes, key);
        input_free(in);
    }
    return !key;
}

/* m->mu held (c a 2026-07-28 request's call, not a task): the tool's ask
 * number c->n_asked.  Answered at once from an earlier round's answer;
 * else the request gets its input_required result.  0: answered; 1: the
 * request was answered (the caller cancels the call, the tool hears
 * ENOTSUP); -1: cannot be asked (ENOTSUP). */
static int ask_in_band_locked(th_mcp_session *m, mcp_call *c,
                              uint64_t ask_id, int kind, json_t *params)
{
    const char *method = kind == TOOLHOST_ASK_SAMPLING
                             ? "sampling/createMessage"
                             : "elicitation/create";
    /* What is asked: its method and the hash of its params (keys
     * sorted), so that an answer is given again to the same question
     * only. */
    char sig[64];
    snprintf(sig, sizeof sig, "%s %016llx", method,
             (unsigned long long)args_hash(params));
    size_t k = c->n_asked++;
    json_t *prev = json_array_get(c->answers, k);
    const char *was = json_string_value(json_array_get(c->asked, k));
    if (prev && was && strcmp(was, sig) == 0) {
        char *txt = json_dumps(prev, JSON_COMPACT);
        th_call_client_answer(ask_id, txt ? 0 : TOOLHOST_ENOMEM, txt,
                              txt ? strlen(txt) : 0);
        free(txt);
        json_decref(params);
        return 0;
    }
    /* (an earlier round's answers from k on no longer fit: the tool asks
     * something else this time; input_put keeps 1..k only) */
    bool can = kind == TOOLHOST_ASK_SAMPLING ? c->can_sample : c->can_elicit;
    char state[33];
    if (!can || c->no_response || c->client_cancelled ||
        !input_put(m, c, k, sig, state)) {
        json_decref(params);
        return -1;
    }
    char key[32];
    snprintf(key, sizeof key, "ask-%zu", k + 1);
    json_t *res = json_pack("{s:s, s:{s:{s:s, s:o}}, s:s}", "resultType",
                            "input_required", "inputRequests", key,
                            "method", method, "params", params,
                            "requestState", state);
    mcp_send_result(m, c->id, res);
    /* the run's own end (its result, its later log lines) says nothing
     * more to this request */
    c->no_response = true;
    c->client_cancelled = true;
    th_log_info("mcp session=%llu call=%llu %s: input_required (%s %s)",
                (unsigned long long)th_session_id(m->s),
                (unsigned long long)c->call_id, c->tool, key, method);
    return 1;
}

/* m_tools_call of 2026-07-28: a retry's requestState and inputResponses
 * checked against the state kept, which is taken (answered once); c gets
 * the answers of every round so far.  True when the request goes on
 * (a first round too); false when refused (answered). */
static bool input_resume(th_mcp_session *m, const json_t *id,
                         const json_t *params, mcp_call *c)
{
    json_t *rs = json_object_get(params, "requestState");
    json_t *ir = json_object_get(params, "inputResponses");
    if (!rs && !ir)
        return true;
    if (!json_is_string(rs) || (ir && !json_is_object(ir))) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "params.requestState must be the string of an "
                       "input_required result, and params.inputResponses "
                       "an object");
        return false;
    }
    const char *why = NULL;
    char key[32] = "";
    json_t *answer = NULL;
    pthread_mutex_lock(&g_in.mu);
    inputs_expire_locked(mono_ms());
    mcp_input **p = &g_in.list;
    while (*p && strcmp((*p)->state, json_string_value(rs)) != 0)
        p = &(*p)->next;
    mcp_input *in = *p;
    if (!in) {
        why = "params.requestState is unknown, expired or answered already "
              "(a state waits mcp.input_ttl and is answered once): call "
              "the tool again without it";
    } else if (strcmp(in->owner, m->owner) != 0 ||
               strcmp(in->tool, c->tool) != 0 ||
               in->args_hash != c->args_hash) {
        why = "params.requestState belongs to another request (the same "
              "caller, tool and arguments must send it back)";
        in = NULL;
    } else {
        snprintf(key, sizeof key, "ask-%zu", json_array_size(in->asked));
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)ir, k, v) if (strcmp(k, key) != 0)
        {
            why = "params.inputResponses answers a question this request "
                  "was not asked";
        }
        answer = json_object_get(ir, key);
        if (!why && !json_is_object(answer))
            why = "params.inputResponses lacks the answer (an object) to "
                  "the question asked";
        if (why)
            in = NULL;
        else {
            *p = in->next; /* taken: answered once */
            g_in.n--;
            g_in.bytes -= in->bytes;
        }
    }
    pthread_mutex_unlock(&g_in.mu);
    if (why) {
        th_log_info("mcp session=%llu tools/call %s refused: %s",
                    (unsigned long long)th_session_id(m->s), c->tool, why);
        mcp_send_error(m, id, MCP_INVALID_PARAMS, "%s", why);
        return false;
    }
    c->answers = in->answers;
    c->asked = in->asked;
    in->answers = in->asked = NULL;
    input_free(in);
    if (json_array_append(c->answers, answer) != 0) {
        mcp_send_error(m, id, MCP_INTERNAL_ERROR, "out of memory");
        return false;
    }
    return true;
}

static int front_ask_permission(void *ud, uint64_t call_id, const char *tool,
                                const uint8_t *args, size_t args_len,
                                const char *reason)
{
    th_mcp_session *m = ud;
    pthread_mutex_lock(&m->mu);
    if (!m->elicitation) {
        pthread_mutex_unlock(&m->mu);
        return -1;
    }
    /* the request the ask belongs to: its call (filed under its id before
     * th_call_submit), or for a call a tool made, the outermost one */
    mcp_call *c = find_call_locked(m, call_id);
    mcp_ask *a = calloc(1, sizeof *a);
    if (!a) {
        pthread_mutex_unlock(&m->mu);
        return -1;
    }
    snprintf(a->id, sizeof a->id, "toolhost-ask-%llu",
             (unsigned long long)++m->next_out_id);
    a->call_id = call_id;
    a->next = m->asks;
    m->asks = a;
    json_t *req = c ? json_incref(c->id) : NULL;
    bool task = c && c->task;
    if (c && c->task)
        c->status = MCP_TASK_INPUT_REQUIRED;
    char id[32];
    memcpy(id, a->id, sizeof id);
    pthread_mutex_unlock(&m->mu);

    th_error err;
    json_t *aj = th_json_from_msgpack_lossy(args, args_len, &err);
    char *atxt = aj ? json_dumps(aj, JSON_COMPACT) : NULL;
    json_decref(aj);
    char msg[1536];
    snprintf(msg, sizeof msg,
             "Allow the tool %s to run with arguments %.800s? (%s)", tool,
             atxt ? atxt : "{}", reason ? reason : "permission rule");
    free(atxt);
    json_t *params = json_pack(
        "{s:s, s:{s:s, s:{s:{s:s, s:s, s:s}}, s:[s]}}", "message", msg,
        "requestedSchema", "type", "object", "properties", "allow", "type",
        "boolean", "title", "Allow", "description",
        "Run this tool call now", "required", "allow");
    json_t *out = json_pack("{s:s, s:s, s:s, s:o}", "jsonrpc", "2.0", "id",
                            id, "method", "elicitation/create", "params",
                            params);
    mcp_send(m, out, task ? NULL : req);
    json_decref(req);
    return 0;
}

/* th_front_ops.ask_client: a tool's sampling/createMessage or
 * elicitation/create, on the request stream of its call (a task's: the
 * session's stream, the task input_required meanwhile).  Answered in
 * on_response; a client that did not declare the capability is not
 * asked. */
static int front_ask_client(void *ud, uint64_t call_id, uint64_t ask_id,
                            int kind, const char *request, size_t len)
{
    th_mcp_session *m = ud;
    json_t *params = json_loadb(request, len, 0, NULL);
    if (!json_is_object(params)) {
        json_decref(params);
        return -1;
    }
    pthread_mutex_lock(&m->mu);
    if (is_modern(m)) {
        /* In-band (input_required) for a request's call; a task's cannot
         * be (the revision has none). */
        mcp_call *c = find_call_locked(m, call_id);
        int rc = c && !c->task
                     ? ask_in_band_locked(m, c, ask_id, kind, params)
                     : (json_decref(params), -1);
        uint64_t cid = c ? c->call_id : 0;
        pthread_mutex_unlock(&m->mu);
        if (rc == 1)
            th_call_cancel(m->s, cid); /* asked: this run is over */
        return rc == 0 ? 0 : -1;
    }
    bool can = kind == TOOLHOST_ASK_SAMPLING ? m->sampling : m->elicitation;
    mcp_ask *a = can ? calloc(1, sizeof *a) : NULL;
    if (!a) {
        pthread_mutex_unlock(&m->mu);
        json_decref(params);
        return -1;
    }
    mcp_call *c = find_call_locked(m, call_id);
    snprintf(a->id, sizeof a->id, "toolhost-ask-%llu",
             (unsigned long long)++m->next_out_id);
    a->call_id = call_id;
    a->client_ask = ask_id;
    a->next = m->asks;
    m->asks = a;
    json_t *req = c ? json_incref(c->id) : NULL;
    bool task = c && c->task;
    if (task)
        c->status = MCP_TASK_INPUT_REQUIRED;
    char id[32];
    memcpy(id, a->id, sizeof id);
    pthread_mutex_unlock(&m->mu);
    json_t *out = json_pack("{s:s, s:s, s:s, s:o}", "jsonrpc", "2.0", "id",
                            id, "method",
                            kind == TOOLHOST_ASK_SAMPLING
                                ? "sampling/createMessage"
                                : "elicitation/create",
                            "params", params);
    mcp_send(m, out, task ? NULL : req);
    json_decref(req);
    return 0;
}

/* th_front_ops.log_call: on the tool's thread.  The line goes out under
 * m->mu, as progress does, so that it comes before the call's result. */
static void front_log_call(void *ud, uint64_t call_id, const char *tool,
                           int level, const char *text)
{
    th_mcp_session *m = ud;
    int lv = mcp_level_of_th[level < TOOLHOST_LOG_ERROR   ? TOOLHOST_LOG_ERROR
                             : level > TOOLHOST_LOG_DEBUG ? TOOLHOST_LOG_DEBUG
                                                          : level];
    pthread_mutex_lock(&m->mu);
    if (m->log_level < 0 || lv < m->log_level) {
        pthread_mutex_unlock(&m->mu);
        return;
    }
    /* a line of a call a tool made goes with the request of the outermost */
    mcp_call *c = find_call_locked(m, call_id);
    if (c && c->client_cancelled) {
        pthread_mutex_unlock(&m->mu);
        return;
    }
    mcp_log_gate *g = c ? &c->log : &m->log_unknown;
    const json_t *req = c && !c->task ? c->id : NULL;
    const char *logger = c ? c->tool : tool;
    if (log_gate_pass_locked(m, g, logger, req, lv))
        send_notification(m, "notifications/message",
                          json_pack("{s:s, s:s, s:s}", "level",
                                    mcp_levels[lv], "logger", logger, "data",
                                    text),
                          req);
    pthread_mutex_unlock(&m->mu);
}

/* The answer to one of our requests: a permission ask's, or a tool's
 * ask_client(). */
static void on_response(th_mcp_session *m, const json_t *msg)
{
    const char *id = json_string_value(json_object_get(msg, "id"));
    if (!id)
        return;
    pthread_mutex_lock(&m->mu);
    mcp_ask *a = NULL;
    for (mcp_ask **p = &m->asks; *p; p = &(*p)->next)
        if (strcmp((*p)->id, id) == 0) {
            a = *p;
            *p = a->next;
            break;
        }
    mcp_call *c = a ? find_call_id(m, a->call_id) : NULL;
    if (c && c->task && c->status == MCP_TASK_INPUT_REQUIRED)
        c->status = MCP_TASK_WORKING;
    pthread_mutex_unlock(&m->mu);
    if (!a)
        return;
    if (a->client_ask) {
        json_t *res = json_object_get(msg, "result");
        json_t *e = json_object_get(msg, "error");
        char *txt = json_dumps(res ? res : e ? e : json_null(),
                               JSON_COMPACT | JSON_ENCODE_ANY);
        th_call_client_answer(a->client_ask,
                              res ? 0 : txt ? TOOLHOST_FAILED
                                            : TOOLHOST_ENOMEM,
                              txt, txt ? strlen(txt) : 0);
        free(txt);
        free(a);
        return;
    }
    json_t *res = json_object_get(msg, "result");
    const char *action = json_string_value(json_object_get(res, "action"));
    json_t *allow = json_object_get(json_object_get(res, "content"), "allow");
    bool yes = action && strcmp(action, "accept") == 0 &&
               (!allow || json_is_true(allow));
    mcp_log(m, 1, "permission for call %llu %s by the client",
            (unsigned long long)a->call_id, yes ? "granted" : "refused");
    th_permission_answer(m->s, a->call_id, yes);
    free(a);
}

/* ---- Methods -------------------------------------------------------------------- */

/* initialize's words (as they always were), and server/discover's (no
 * tasks in 2026-07-28). */
#define INSTRUCTIONS_LEGACY                                                 \
    "Tools of a toolhost host. A tool error comes back as a result with "  \
    "isError true and a message saying what to change; long-running "      \
    "tools (execution.taskSupport optional) report progress and may run "  \
    "as tasks."
#define INSTRUCTIONS                                                        \
    "Tools of a toolhost host. A tool error comes back as a result with "  \
    "isError true and a message saying what to change; long-running "      \
    "tools report progress"

static void m_initialize(th_mcp_session *m, const json_t *id,
                         const json_t *params)
{
    const char *want =
        json_string_value(json_object_get(params, "protocolVersion"));
    if (!json_is_object(params) || !want) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "initialize needs params.protocolVersion (a string)");
        return;
    }
    const char *v = mcp_versions[0];
    for (size_t i = 0; mcp_versions[i]; i++)
        if (strcmp(want, mcp_versions[i]) == 0)
            v = mcp_versions[i];
    json_t *caps = json_object_get(params, "capabilities");
    bool elicit = json_is_object(json_object_get(caps, "elicitation"));
    bool sample = json_is_object(json_object_get(caps, "sampling"));
    json_t *res = json_pack(
        "{s:s, s:{s:{s:b}, s:{}, s:{s:{}, s:{}, s:{s:{s:{}}}}, "
        "s:{s:b, s:b}, s:{s:b}, s:{}}, "
        "s:{s:s, s:s, s:s}, s:s}",
        "protocolVersion", v, "capabilities", "tools", "listChanged", 1,
        "logging", "tasks", "list", "cancel", "requests", "tools", "call",
        "resources", "subscribe", 1, "listChanged", 1, "prompts",
        "listChanged", 1, "completions",
        "serverInfo", "name", "toolhost", "title", "toolhost", "version",
        TOOLHOST_VERSION, "instructions", INSTRUCTIONS_LEGACY);
    if (res && strcmp(v, "2025-11-25") != 0)
        json_object_del(json_object_get(res, "capabilities"), "tasks");
    pthread_mutex_lock(&m->mu);
    snprintf(m->version, sizeof m->version, "%s", v);
    m->initialized = true;
    m->elicitation = elicit;
    m->sampling = sample;
    pthread_mutex_unlock(&m->mu);
    mcp_send_result(m, id, res);
    const char *cname = json_string_value(
        json_object_get(json_object_get(params, "clientInfo"), "name"));
    th_log_info("mcp session=%llu initialize: client %s, protocol %s%s",
                (unsigned long long)th_session_id(m->s),
                cname ? cname : "(unnamed)", v,
                strcmp(v, want) ? " (the requested one is not supported)"
                                : "");
}

bool mcp_list_cursor(th_mcp_session *m, const json_t *id,
                     const json_t *params, const char *method, size_t *off)
{
    *off = 0;
    json_t *cur = json_object_get(params, "cursor");
    if (!cur)
        return true;
    const char *s = json_string_value(cur);
    char *end = NULL;
    errno = 0;
    unsigned long long v = s ? strtoull(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v > SIZE_MAX) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "invalid cursor: pass back a nextCursor of an "
                       "earlier %s",
                       method);
        return false;
    }
    *off = (size_t)v;
    return true;
}

static void m_tools_list(th_mcp_session *m, const json_t *id,
                         const json_t *params)
{
    size_t off;
    if (!mcp_list_cursor(m, id, params, "tools/list", &off))
        return;
    json_t *all = visible_tools(m->s);
    if (!all) {
        mcp_send_error(m, id, MCP_INTERNAL_ERROR, "out of memory");
        return;
    }
    size_t n = json_array_size(all);
    json_t *page = json_array();
    for (size_t i = off; page && i < n && i < off + LIST_PAGE; i++)
        json_array_append(page, json_array_get(all, i));
    /* 2026-07-28 has no execution (tasks are not in it); the page's
     * entries are this call's own. */
    bool modern = is_modern(m);
    for (size_t i = 0; modern && page && i < json_array_size(page); i++)
        json_object_del(json_array_get(page, i), "execution");
    json_t *res = json_pack("{s:o}", "tools", page);
    if (res && off + LIST_PAGE < n) {
        char next[32];
        snprintf(next, sizeof next, "%zu", off + LIST_PAGE);
        json_object_set_new(res, "nextCursor", json_string(next));
    }
    json_decref(all);
    mcp_send_cacheable(m, id, res);
}

/* m_tools_call: params' shape (fc: read by the plain scan, which checked
 * it).  False when refused (answered). */
static bool call_params_ok(th_mcp_session *m, const json_t *id,
                           const json_t *params, const th_mcp_plain *fc,
                           const char *name, const json_t *args,
                           const json_t *task)
{
    if ((!fc && !json_is_object(params)) || !name) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "tools/call needs params.name (a string)");
        return false;
    }
    if (args && !json_is_object(args) && !json_is_null(args)) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "params.arguments must be an object");
        return false;
    }
    if (task && !json_is_object(task)) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "params.task must be an object");
        return false;
    }
    return true;
}

/* m_tools_call: what the answer needs of the tool (its stdout type,
 * whether its output schema is an object); false when it is unknown to
 * this session or asked as a task without being one (answered). */
static bool call_tool_facts(th_mcp_session *m, const json_t *id,
                            const char *name, bool task, uint32_t *out_type,
                            bool *structured)
{
    const th_tool *t = is_task_tool(name) ? NULL
                                          : th_session_acquire(m->s, name);
    if (!t) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "Unknown tool: %s (tools/list has the tools of this "
                       "server)",
                       name);
        return false;
    }
    bool async = (t->flags & TOOLHOST_TOOL_ASYNC) != 0;
    *out_type = t->stdout_type;
    *structured = th_schema_tool_output_object(t);
    th_tool_release(t);
    if (task && !async) {
        mcp_send_error(m, id, MCP_METHOD_NOT_FOUND,
                       "tool %s does not support tasks "
                       "(execution.taskSupport is forbidden): call it "
                       "without params.task",
                       name);
        return false;
    }
    return true;
}

/* m_tools_call: the arguments as msgpack in *mp (fc's, taken; else
 * params.arguments converted).  False when they cannot be (answered as a
 * tool error). */
static bool call_args_msgpack(th_mcp_session *m, const json_t *id,
                              const char *name, th_mcp_plain *fc,
                              json_t *args, th_buf *mp)
{
    json_t *empty = NULL;
    if (fc) {
        *mp = fc->args; /* the scan's msgpack: taken */
        th_buf_init(&fc->args);
    } else if (!args || json_is_null(args))
        args = empty = json_object();
    if (!fc && (!args || th_json_to_msgpack(args, mp) != 0)) {
        json_decref(empty);
        th_buf_destroy(mp);
        /* Not representable (an integer past int64): a tool error. */
        json_t *res = mcp_tool_error(
            name, TH_EARGS,
            "the arguments cannot be converted (integers must fit in 64 "
            "bits)");
        mcp_send_result(m, id, res);
        return false;
    }
    json_decref(empty);
    return true;
}

/* m_tools_call: the call's record (3 references: the list, the event,
 * m_tools_call), NULL without memory. */
static mcp_call *call_new(th_mcp_session *m, const json_t *id,
                          const char *name, const json_t *params,
                          const json_t *task, uint32_t out_type,
                          bool structured)
{
    mcp_call *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    size_t nl = strlen(name);
    c->tool = nl < sizeof c->tool_buf ? memcpy(c->tool_buf, name, nl + 1)
                                      : strdup(name);
    if (!c->tool) {
        free(c);
        return NULL;
    }
    c->m = m;
    c->out_type = out_type;
    c->structured = structured;
    c->refs = 3; /* the list, the event, this function */
    /* An id is a string or an integer: nobody changes it, a reference
     * does. */
    c->id = json_incref((json_t *)id);
    c->last_progress = -1; /* none sent: a first fraction of 0 is 0 */
    json_t *tok = params ? json_object_get(json_object_get(params, "_meta"),
                                           "progressToken")
                         : NULL;
    if (json_is_string(tok) || json_is_integer(tok))
        c->token = json_deep_copy(tok);
    if (task) {
        c->task = true;
        c->created_ms = c->updated_ms = mcp_wall_ms();
        c->ttl_ms = mcp_task_ttl(m, task);
    }
    return c;
}

/* m_tools_call, m->mu held: the call submitted (its on_event may have
 * come already).  A task is announced now when the core knows it, else
 * at its acknowledgement. */
static void call_started_locked(th_mcp_session *m, mcp_call *c)
{
    uint64_t call_id = c->call_id;
    c->started = true;
    if (!c->task)
        m->deferred = true; /* on_event answers and ends the request */
    if (c->task) {
        snprintf(c->task_id, sizeof c->task_id, "%llu",
                 (unsigned long long)call_id);
        if (c->acked || c->finished) {
            mcp_task_announce_locked(m, c, false);
        } else {
            /* The core knows the task from its acknowledgement on: the
             * CreateTaskResult waits for it (on_event), so tasks/get right
             * after it finds the task. */
            c->announce_pending = true;
            m->deferred = true;
        }
    }
}

/* fc: the request as th_mcp_plain_scan() read it (its name and its
 * arguments as msgpack, taken), else NULL and params says. */
static void m_tools_call(th_mcp_session *m, const json_t *id,
                         const json_t *params, th_mcp_plain *fc)
{
    const char *name = fc ? fc->name
                          : json_string_value(json_object_get(params, "name"));
    /* (fc: params is NULL, and so are these) */
    json_t *args = params ? json_object_get(params, "arguments") : NULL;
    json_t *task = params ? json_object_get(params, "task") : NULL;
    if (task && is_modern(m)) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "params.task: tasks are not part of protocol "
                       "2026-07-28 (call the tool without it)");
        return;
    }
    if (!call_params_ok(m, id, params, fc, name, args, task))
        return;
    uint32_t out_type;
    bool structured;
    if (!call_tool_facts(m, id, name, task != NULL, &out_type, &structured))
        return;
    th_buf mp;
    th_buf_init(&mp);
    if (!call_args_msgpack(m, id, name, fc, args, &mp))
        return;
    mcp_call *c = call_new(m, id, name, params, task, out_type, structured);
    if (!c) {
        th_buf_destroy(&mp);
        mcp_send_error(m, id, MCP_INTERNAL_ERROR, "out of memory");
        return;
    }
    if (is_modern(m)) {
        /* What this request's client can answer in-band, and a retry's
         * answers (input_required). */
        json_t *caps = json_object_get(json_object_get(params, "_meta"),
                                       MCP_META_CLIENT_CAPS);
        c->can_sample = json_is_object(json_object_get(caps, "sampling"));
        c->can_elicit = json_is_object(json_object_get(caps, "elicitation"));
        c->args_hash = args_hash(args);
        if (!input_resume(m, id, params, c)) {
            call_free(c);
            th_buf_destroy(&mp);
            return;
        }
    }
    th_call_opts o = {.as_task = task != NULL};
    pthread_mutex_lock(&m->mu);
    if (!task && id_in_flight_locked(m, id)) {
        pthread_mutex_unlock(&m->mu);
        call_free(c);
        th_buf_destroy(&mp);
        mcp_send_error(m, id, MCP_INVALID_REQUEST,
                       "Invalid Request: a request with this id is in "
                       "flight");
        return;
    }
    /* This thread serves one client: a short sync call (not a task) may
     * run right here (the core's policy, call_fast.c: declared
     * TOOLHOST_TOOL_SHORT only, host.short_call_max, demotion and
     * back-off). */
    o.short_client = m->run_short && !c->task;
    /* W3C trace context for the audit log: _meta.traceparent, else the
     * transport's (an HTTP header); both live past th_call_submit */
    const char *tp = params ? json_string_value(json_object_get(
                                  json_object_get(params, "_meta"),
                                  "traceparent"))
                            : NULL;
    o.traceparent = tp ? tp : m->traceparent;
    /* filed under its id before it starts: the front ops (ask, log) and
     * cancels find it by that id from any thread */
    th_call_req req;
    c->call_id = th_call_create(&req, m->s, name, mp.data, mp.len, &o,
                                on_event, c);
    c->next = m->calls;
    m->calls = c;
    m->inflight++;
    pthread_mutex_unlock(&m->mu);

    int rc = th_call_submit(&req);
    th_buf_destroy(&mp);
    pthread_mutex_lock(&m->mu);
    if (rc != 0) {
        /* The callback never runs. */
        c->finished = true;
        m->inflight--;
        unlink_call(m, c);
        c->refs -= 2;
        mcp_call_unref_locked(m, c);
        pthread_mutex_unlock(&m->mu);
        mcp_send_result(m, id,
                        mcp_tool_error(name, rc,
                                       "the host is shutting down"));
        return;
    }
    call_started_locked(m, c);
    mcp_call_unref_locked(m, c);
    pthread_mutex_unlock(&m->mu);
}

static void n_cancelled(th_mcp_session *m, const json_t *params)
{
    json_t *rid = json_object_get(params, "requestId");
    if (!rid)
        return;
    pthread_mutex_lock(&m->mu);
    mcp_listen *l = listen_take_locked(m, rid);
    pthread_mutex_unlock(&m->mu);
    if (l) {
        /* The client closes its subscriptions/listen: no answer. */
        mcp_request_done(m, l->id);
        mcp_log(m, 1, "subscriptions/listen closed by the client");
        listen_free(l);
        return;
    }
    pthread_mutex_lock(&m->mu);
    mcp_call *c = find_call(m, rid);
    uint64_t cid = 0;
    if (c && c->started && !c->client_cancelled) {
        c->client_cancelled = true;
        cid = c->call_id;
    }
    pthread_mutex_unlock(&m->mu);
    if (!cid)
        return;
    const char *why = json_string_value(json_object_get(params, "reason"));
    mcp_log(m, 1, "call %llu cancelled by the client%s%s",
            (unsigned long long)cid, why ? ": " : "", why ? why : "");
    th_call_cancel(m->s, cid);
}

static void m_set_level(th_mcp_session *m, const json_t *id,
                        const json_t *params)
{
    const char *s = json_string_value(json_object_get(params, "level"));
    int lv = s ? mcp_level_from_name(s) : -1;
    if (lv < 0) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "level must be one of debug, info, notice, warning, "
                       "error, critical, alert, emergency");
        return;
    }
    pthread_mutex_lock(&m->mu);
    m->log_level = lv;
    pthread_mutex_unlock(&m->mu);
    mcp_send_result(m, id, json_object());
}

/* subscriptions/listen (2026-07-28): a request answered only when the
 * server closes it; its first message is the acknowledgement (with what
 * is honoured: tools list_changed here), then the changes asked for, each
 * stamped with its id.  At most mcp.max_subscriptions open per session
 * (over HTTP each is a session of its own, under mcp.max_sessions). */
static void m_listen(th_mcp_session *m, const json_t *id,
                     const json_t *params)
{
    json_t *f = json_object_get(params, "notifications");
    static const char *const flags[] = {"toolsListChanged",
                                        "promptsListChanged",
                                        "resourcesListChanged", NULL};
    const char *bad = json_is_object(f) ? NULL : "notifications";
    for (size_t i = 0; !bad && flags[i]; i++) {
        json_t *v = json_object_get(f, flags[i]);
        if (v && !json_is_boolean(v))
            bad = flags[i];
    }
    json_t *rs = json_object_get(f, "resourceSubscriptions");
    if (!bad && rs && !json_is_array(rs))
        bad = "resourceSubscriptions";
    for (size_t i = 0; !bad && i < json_array_size(rs); i++)
        if (!json_is_string(json_array_get(rs, i)))
            bad = "resourceSubscriptions";
    if (bad) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "subscriptions/listen: params.notifications%s%s is "
                       "not of its type (an object of booleans "
                       "toolsListChanged, promptsListChanged, "
                       "resourcesListChanged and a string array "
                       "resourceSubscriptions)",
                       strcmp(bad, "notifications") ? "." : "",
                       strcmp(bad, "notifications") ? bad : "");
        return;
    }
    bool tools = json_is_true(json_object_get(f, "toolsListChanged"));
    th_config *cfg = th_host_config_get(m->h);
    const th_mcp_cfg *mc = th_mcp_config(cfg);
    size_t max = mc ? mc->max_subscriptions : 256; /* the default */
    th_config_unref(cfg);
    mcp_listen *l = calloc(1, sizeof *l);
    if (!l) {
        mcp_send_error(m, id, MCP_INTERNAL_ERROR, "out of memory");
        return;
    }
    pthread_mutex_lock(&m->mu);
    bool dup = id_in_flight_locked(m, id);
    size_t n = m->n_listens;
    if (dup || n >= max) {
        pthread_mutex_unlock(&m->mu);
        free(l);
        if (dup) {
            mcp_send_error(m, id, MCP_INVALID_REQUEST,
                           "Invalid Request: a request with this id is in "
                           "flight");
            return;
        }
        mcp_log(m, 3, "subscriptions/listen refused: %zu open "
                      "(mcp.max_subscriptions)", n);
        mcp_send_error(m, id, MCP_INVALID_REQUEST,
                       "subscriptions/listen: this session holds %zu, as "
                       "many as it may (mcp.max_subscriptions): close one "
                       "first", n);
        return;
    }
    l->id = json_incref((json_t *)id);
    l->tools = tools;
    l->next = m->listens;
    m->listens = l;
    m->n_listens++;
    m->deferred = true; /* answered when the server closes it */
    /* (under mu: no change goes out before the acknowledgement) */
    send_notification(m, "notifications/subscriptions/acknowledged",
                      json_pack("{s:{s:O}, s:{s:b}}", "_meta",
                                MCP_META_SUBSCRIPTION, id, "notifications",
                                "toolsListChanged", tools),
                      id);
    pthread_mutex_unlock(&m->mu);
    th_log(m->http ? TOOLHOST_LOG_DEBUG : TOOLHOST_LOG_INFO,
           "mcp session=%llu subscriptions/listen open%s",
           (unsigned long long)th_session_id(m->s),
           tools ? ": tools list_changed" : " (nothing it asked is served)");
}

void th_mcp_session_close_listens(th_mcp_session *m)
{
    pthread_mutex_lock(&m->mu);
    mcp_listen *l = m->listens;
    m->listens = NULL;
    m->n_listens = 0;
    pthread_mutex_unlock(&m->mu);
    while (l) {
        mcp_listen *next = l->next;
        /* The revision's graceful end: the listen's (empty) result. */
        mcp_send_result(m, l->id,
                        json_pack("{s:{s:O}}", "_meta",
                                  MCP_META_SUBSCRIPTION, l->id));
        mcp_request_done(m, l->id);
        th_log_info("mcp session=%llu subscriptions/listen closed: the "
                    "server stops",
                    (unsigned long long)th_session_id(m->s));
        listen_free(l);
        l = next;
    }
}

/* ---- Dispatch ------------------------------------------------------------------- */

/* True once initialize was answered; else the request gets the error. */
static bool initialized_or_say(th_mcp_session *m, const json_t *id)
{
    pthread_mutex_lock(&m->mu);
    bool init = m->initialized;
    pthread_mutex_unlock(&m->mu);
    if (!init)
        mcp_send_error(m, id, MCP_INVALID_REQUEST,
                       "the session is not initialized: send initialize "
                       "first (only ping is allowed before it)");
    return init;
}

/* The protocol revisions served, newest first: the 2026-07-28 era's,
 * then initialize's.  NULL: no memory. */
static json_t *versions_json(void)
{
    json_t *a = json_array();
    for (size_t i = 0; a && mcp_modern_versions[i]; i++)
        if (json_array_append_new(a, json_string(mcp_modern_versions[i])))
            goto fail;
    for (size_t i = 0; a && mcp_versions[i]; i++)
        if (json_array_append_new(a, json_string(mcp_versions[i])))
            goto fail;
    return a;
fail:
    json_decref(a);
    return NULL;
}

/* server/discover (2026-07-28): what this server serves, asked before
 * (and instead of) initialize.  Answered in the 2026-07-28 shape whatever
 * the session's era: only that revision's clients ask. */
static void m_discover(th_mcp_session *m, const json_t *id)
{
    json_t *res = json_pack(
        "{s:o*, s:{s:{s:b}, s:{}, s:{}, s:{}, s:{}}, s:s, s:i, s:s}",
        "supportedVersions", versions_json(), "capabilities", "tools",
        "listChanged", 1, "logging", "resources", "prompts", "completions", "instructions",
        INSTRUCTIONS ".", "ttlMs", 0, "cacheScope", "private");
    if (res && (!json_object_get(res, "supportedVersions") ||
                modern_stamp(res) != 0)) {
        json_decref(res);
        res = NULL;
    }
    mcp_send_result(m, id, res);
}

/* The requests of protocol 2026-07-28 this server answers. */
static bool modern_method(const char *method)
{
    static const char *const served[] = {
        "server/discover",   "tools/list",     "tools/call",
        "prompts/list",      "prompts/get",    "resources/list",
        "resources/read",    "resources/templates/list",
        "completion/complete", "subscriptions/listen", NULL};
    for (size_t i = 0; served[i]; i++)
        if (strcmp(method, served[i]) == 0)
            return true;
    return false;
}

/* The 2026-07-28 envelope of a request (params._meta): the revision, the
 * client's capabilities, its log level.  A request with one makes the
 * session a 2026-07-28 one (it needs no initialize); in such a session
 * every request needs one.  False when the request is refused
 * (answered). */
static bool envelope_check(th_mcp_session *m, const json_t *id,
                           const json_t *params)
{
    /* (no params: a plain tools/call, th_mcp_session_input_plain) */
    json_t *meta = params ? json_object_get(params, "_meta") : NULL;
    json_t *pv = meta ? json_object_get(meta, MCP_META_PROTOCOL) : NULL;
    if (!pv) {
        if (!is_modern(m))
            return true;
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "this session speaks protocol 2026-07-28: every "
                       "request needs params._meta[\"%s\"] and "
                       "params._meta[\"%s\"]",
                       MCP_META_PROTOCOL, MCP_META_CLIENT_CAPS);
        return false;
    }
    const char *v = json_string_value(pv);
    bool known = false;
    for (size_t i = 0; v && mcp_modern_versions[i]; i++)
        known |= strcmp(v, mcp_modern_versions[i]) == 0;
    if (!known) {
        /* Said back only when it can be a revision (a date): a client
         * does not get its megabyte back twice. */
        const char *shown = v && strlen(v) <= 32 ? v : NULL;
        json_t *data = json_pack("{s:o*, s:s*}", "supported",
                                 versions_json(), "requested", shown);
        json_t *msg = json_pack(
            "{s:s, s:O, s:{s:i, s:s+, s:o*}}", "jsonrpc", "2.0", "id", id,
            "error", "code", MCP_UNSUPPORTED_VERSION, "message",
            "unsupported protocol version in params._meta: this server "
            "serves 2026-07-28 (server/discover) and 2025-11-25, "
            "2025-06-18, 2025-03-26, 2024-11-05 (initialize); asked: ",
            shown ? shown : v ? "(not a revision)" : "(not a string)",
            "data", data);
        mcp_send(m, msg, id);
        return false;
    }
    json_t *ci = json_object_get(meta, MCP_META_CLIENT_INFO);
    json_t *lv = json_object_get(meta, MCP_META_LOG_LEVEL);
    int level = lv && json_is_string(lv)
                    ? mcp_level_from_name(json_string_value(lv))
                    : -1;
    const char *bad =
        !json_is_object(json_object_get(meta, MCP_META_CLIENT_CAPS))
            ? MCP_META_CLIENT_CAPS " (an object) is required"
        : ci && !json_is_object(ci) ? MCP_META_CLIENT_INFO
                                      " must be an object"
        : lv && level < 0 ? MCP_META_LOG_LEVEL
                            " must be one of debug, info, notice, warning, "
                            "error, critical, alert, emergency"
                          : NULL;
    if (bad) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS, "params._meta: %s", bad);
        return false;
    }
    pthread_mutex_lock(&m->mu);
    bool legacy = m->initialized && !is_modern(m);
    bool first = !legacy && !is_modern(m);
    char had[sizeof m->version];
    memcpy(had, m->version, sizeof had);
    if (!legacy) {
        snprintf(m->version, sizeof m->version, "%s", v);
        m->initialized = true;
        /* No request of ours to the client in this revision (it asks
         * in-band, input_required): no elicitation, no sampling. */
        m->elicitation = false;
        m->sampling = false;
        m->log_level = level; /* the request's own: absent is none */
        atomic_store_explicit(&m->modern, true, memory_order_release);
    }
    pthread_mutex_unlock(&m->mu);
    if (legacy) {
        mcp_send_error(m, id, MCP_INVALID_REQUEST,
                       "this session negotiated protocol %s with "
                       "initialize: a request in protocol %s needs a "
                       "connection of its own",
                       had, v);
        return false;
    }
    if (first) {
        const char *cname =
            json_string_value(json_object_get(ci, "name"));
        /* Over HTTP each request is a session: not one info line each. */
        th_log(m->http ? TOOLHOST_LOG_DEBUG : TOOLHOST_LOG_INFO,
               "mcp session=%llu protocol %s (no initialize), client %s",
               (unsigned long long)th_session_id(m->s), v,
               cname ? cname : "(unnamed)");
    }
    return true;
}

static void dispatch_request(th_mcp_session *m, const json_t *id,
                             const char *method, const json_t *params)
{
    if (params && !json_is_object(params) && !json_is_array(params)) {
        mcp_send_error(m, id, MCP_INVALID_REQUEST,
                       "params must be an object");
        return;
    }
    if (!envelope_check(m, id, params))
        return;
    if (strcmp(method, "server/discover") == 0) {
        m_discover(m, id);
        return;
    }
    if (is_modern(m) && !modern_method(method)) {
        mcp_send_error(m, id, MCP_METHOD_NOT_FOUND,
                       "method not found in protocol %s: %.200s",
                       mcp_modern_versions[0], method);
        return;
    }
    if (strcmp(method, "ping") == 0) {
        mcp_send_result(m, id, json_object());
        return;
    }
    if (strcmp(method, "initialize") == 0) {
        pthread_mutex_lock(&m->mu);
        bool again = m->initialized;
        pthread_mutex_unlock(&m->mu);
        if (again)
            mcp_send_error(m, id, MCP_INVALID_REQUEST,
                           "the session is already initialized");
        else
            m_initialize(m, id, params);
        return;
    }
    if (!initialized_or_say(m, id))
        return;
    if (params && !json_is_object(params)) {
        mcp_send_error(m, id, MCP_INVALID_PARAMS,
                       "params must be an object");
        return;
    }
    if (strcmp(method, "tools/list") == 0)
        m_tools_list(m, id, params);
    else if (strcmp(method, "tools/call") == 0)
        m_tools_call(m, id, params, NULL);
    else if (strcmp(method, "logging/setLevel") == 0)
        m_set_level(m, id, params);
    else if (strcmp(method, "tasks/get") == 0)
        mcp_tasks_get(m, id, params);
    else if (strcmp(method, "tasks/result") == 0)
        mcp_tasks_result(m, id, params);
    else if (strcmp(method, "tasks/list") == 0)
        mcp_tasks_list(m, id, params);
    else if (strcmp(method, "tasks/cancel") == 0)
        mcp_tasks_cancel(m, id, params);
    else if (strcmp(method, "resources/list") == 0 ||
             strcmp(method, "prompts/list") == 0 ||
             strcmp(method, "resources/templates/list") == 0)
        mcp_content_list(m, id, params, method);
    else if (strcmp(method, "resources/read") == 0)
        mcp_resources_read(m, id, params);
    else if (strcmp(method, "resources/subscribe") == 0 ||
             strcmp(method, "resources/unsubscribe") == 0)
        mcp_resources_subscribe(m, id, params, method[10] == 's');
    else if (strcmp(method, "prompts/get") == 0)
        mcp_prompts_get(m, id, params);
    else if (strcmp(method, "completion/complete") == 0)
        mcp_complete(m, id, params);
    else if (strcmp(method, "subscriptions/listen") == 0 && is_modern(m))
        m_listen(m, id, params);
    else
        mcp_send_error(m, id, MCP_METHOD_NOT_FOUND,
                       "method not found: %.200s", method);
}

static bool valid_id(const json_t *id)
{
    return json_is_string(id) || json_is_integer(id);
}

json_t *th_mcp_plain_id(const th_mcp_plain *fc)
{
    return fc->id_is_str ? json_stringn_nocheck(fc->id_str, fc->id_len)
                         : json_integer(fc->id_int);
}

void th_mcp_session_input_plain(th_mcp_session *m, th_mcp_plain *fc,
                                const json_t *id)
{
    m->deferred = false;
    /* No _meta: refused in a 2026-07-28 session (envelope_check). */
    if (envelope_check(m, id, NULL) && initialized_or_say(m, id))
        m_tools_call(m, id, NULL, fc);
    if (!m->deferred)
        mcp_request_done(m, id);
}

/* A tools/call of the plain shape, without a JSON tree: the same
 * dispatch as th_mcp_session_input_value() gives it.  False: not such a
 * message (nothing was done). */
static bool input_fast(th_mcp_session *m, const char *text, size_t len)
{
    th_mcp_plain fc;
    th_buf_init(&fc.args);
    json_t *id = th_mcp_plain_scan(text, len, &fc) == 1
                     ? th_mcp_plain_id(&fc)
                     : NULL;
    if (id)
        th_mcp_session_input_plain(m, &fc, id);
    json_decref(id);
    th_buf_destroy(&fc.args);
    return id != NULL;
}

void th_mcp_session_set_traceparent(th_mcp_session *m, const char *tp)
{
    m->traceparent = tp;
}

void th_mcp_session_input(th_mcp_session *m, const char *text, size_t len)
{
    if (len > m->max_message) {
        mcp_log(m, 3, "message of %zu bytes refused: mcp_max_message is %zu",
                len, m->max_message);
        mcp_send_error(m, NULL, MCP_INVALID_REQUEST,
                       "message too long: %zu bytes, the limit is %zu "
                       "(host.mcp_max_message)",
                       len, m->max_message);
        return;
    }
    if (input_fast(m, text, len))
        return;
    json_error_t jerr;
    json_t *msg = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL,
                             &jerr);
    if (!msg) {
        mcp_send_error(m, NULL, MCP_PARSE_ERROR, "parse error: %s (at %d)",
                       jerr.text, jerr.position);
        return;
    }
    th_mcp_session_input_value(m, msg);
    json_decref(msg);
}

void th_mcp_session_input_value(th_mcp_session *m, json_t *msg)
{
    json_incref(msg);
    if (json_is_array(msg)) {
        mcp_send_error(m, NULL, MCP_INVALID_REQUEST,
                       "batches (JSON arrays) are not supported: send one "
                       "message per line");
        json_decref(msg);
        return;
    }
    json_t *id = json_object_get(msg, "id");
    const char *ver = json_string_value(json_object_get(msg, "jsonrpc"));
    json_t *mj = json_object_get(msg, "method");
    const char *method = json_string_value(mj);
    if (!json_is_object(msg) || !ver || strcmp(ver, "2.0") != 0 ||
        (mj && !method) || (id && !valid_id(id) && !json_is_null(id))) {
        mcp_send_error(m, valid_id(id) ? id : NULL, MCP_INVALID_REQUEST,
                       "not a JSON-RPC 2.0 message (needs \"jsonrpc\": "
                       "\"2.0\", a string method, an id that is a string "
                       "or an integer)");
        if (valid_id(id))
            mcp_request_done(m, id);
        json_decref(msg);
        return;
    }
    if (!method) {
        /* A response: the answer to one of our requests. */
        if (json_object_get(msg, "result") || json_object_get(msg, "error"))
            on_response(m, msg);
        else
            mcp_send_error(m, valid_id(id) ? id : NULL, MCP_INVALID_REQUEST,
                           "a message needs a method (or result/error)");
        json_decref(msg);
        return;
    }
    json_t *params = json_object_get(msg, "params");
    if (!id) {
        /* A notification: never answered. */
        if (strcmp(method, "notifications/cancelled") == 0)
            n_cancelled(m, params);
        json_decref(msg);
        return;
    }
    if (json_is_null(id)) {
        mcp_send_error(m, NULL, MCP_INVALID_REQUEST,
                       "the id of a request must not be null");
        json_decref(msg);
        return;
    }
    /* Every request ends with request_done(): here, or later by whoever
     * answers a deferred one (a running tools/call, a waiting
     * tasks/result). */
    m->deferred = false;
    dispatch_request(m, id, method, params);
    if (!m->deferred)
        mcp_request_done(m, id);
    json_decref(msg);
}

/* ---- Life ------------------------------------------------------------------------ */

th_mcp_session *th_mcp_session_new(th_host *h, const th_principal *who,
                                   const th_mcp_transport *t, void *ud,
                                   const th_mcp_opts *o, th_error *err)
{
    th_mcp_opts def = {0};
    if (!o)
        o = &def;
    /* a front's thread: a reload may swap the config meanwhile */
    th_config *cfg = th_host_config_get(h);
    th_principal p = who ? *who : (th_principal){0};
    if (o->toolset) {
        const th_toolset_cfg *ts = NULL;
        for (size_t i = 0; i < cfg->n_toolsets; i++)
            if (cfg->toolsets[i].name &&
                strcmp(cfg->toolsets[i].name, o->toolset) == 0)
                ts = &cfg->toolsets[i];
        if (!ts) {
            th_config_unref(cfg);
            th_error_set(err, TH_ENOTFOUND, "no toolset '%s' in the config",
                         o->toolset);
            return NULL;
        }
        p.toolset = o->toolset;
    }
    const th_mcp_cfg *mcfg = th_mcp_config(cfg);
    size_t cfg_max_message = mcfg ? (size_t)mcfg->max_message : 0;
    th_config_unref(cfg);
    th_mcp_session *m = calloc(1, sizeof *m);
    if (!m) {
        th_error_set(err, TH_ENOMEM, "out of memory");
        return NULL;
    }
    m->h = h;
    m->t = *t;
    m->ud = ud;
    m->http = o->http;
    m->run_short = o->run_short;
    /* A token user without `uid`: the core's uid rule cannot tell it from
     * another such user, so it sees only its own session's tasks. */
    m->own_tasks_only = p.uid == (uint32_t)-1 && !p.trusted;
    m->log_level = 3; /* warning, until logging/setLevel */
    m->max_message = o->max_message ? o->max_message
                     : cfg_max_message ? cfg_max_message
                                       : TH_MCP_MAX_MESSAGE_DEFAULT;
    char owner[512];
    snprintf(owner, sizeof owner, "uid=%u gid=%u user=%s toolset=%s",
             (unsigned)p.uid, (unsigned)p.gid, p.user ? p.user : "",
             p.toolset ? p.toolset : "");
    if (!(m->owner = strdup(owner))) {
        free(m);
        th_error_set(err, TH_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    th_front_ops ops = {.ask_permission = front_ask_permission,
                        .tools_changed = front_tools_changed,
                        .front = "mcp",
                        .log_call = front_log_call,
                        .ask_client = front_ask_client};
    __atomic_store_n(&m->s, th_session_open(h, &p, &ops, m),
                     __ATOMIC_RELEASE);
    if (!m->s) {
        th_error_set(err, TH_ENOMEM, "cannot open a session (out of memory "
                                     "or the host is closing)");
        goto fail;
    }
    if (o->toolset) {
        /* The toolset must be one the principal may use. */
        bool any = false;
        list_ctx x = {json_array(), 0};
        if (x.arr) {
            th_session_tools(m->s, list_one, &x);
            any = json_array_size(x.arr) > 0;
        }
        json_decref(x.arr);
        if (!any) {
            th_error_set(err, TH_EPERM,
                         "toolset '%s' is not usable by uid %u (its "
                         "allow_users/allow_groups) or has no tools",
                         o->toolset, (unsigned)p.uid);
            th_session_close(m->s);
            goto fail;
        }
    }
    for (int k = 0; k < MCP_LISTS; k++)
        m->lists[k].hash = th_session_view_digest(m->s, lists[k].digest, NULL);
    th_content_set_update_hook(on_resource_updated);
    if (timer_add(m) != 0) {
        th_error_set(err, TH_ENOMEM, "cannot start a thread");
        th_session_close(m->s);
        goto fail;
    }
    return m;
fail:
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m->owner);
    free(m);
    return NULL;
}

const char *th_mcp_session_version(const th_mcp_session *m)
{
    /* The version is written once, before initialized is set: once seen
     * set (under the lock, for other threads), it stays. */
    th_mcp_session *w = (th_mcp_session *)m;
    pthread_mutex_lock(&w->mu);
    bool init = w->initialized;
    pthread_mutex_unlock(&w->mu);
    return init ? m->version : NULL;
}

size_t th_mcp_session_inflight(th_mcp_session *m)
{
    pthread_mutex_lock(&m->mu);
    size_t n = m->inflight;
    pthread_mutex_unlock(&m->mu);
    return n;
}

bool th_mcp_session_drain(th_mcp_session *m, int64_t timeout_ms)
{
    int64_t end = mono_ms() + timeout_ms;
    pthread_mutex_lock(&m->mu);
    m->drain_waiters++;
    while (m->inflight > 0) {
        int64_t left = end - mono_ms();
        if (left <= 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t w = left < 100 ? left : 100;
        ts.tv_nsec += w * 1000000;
        ts.tv_sec += ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&m->cv, &m->mu, &ts);
    }
    bool ok = m->inflight == 0;
    m->drain_waiters--;
    pthread_mutex_unlock(&m->mu);
    return ok;
}

void th_mcp_session_free(th_mcp_session *m)
{
    if (!m)
        return;
    timer_remove(m);
    /* Cancel what runs (toolset-scoped tasks go on in the core). */
    pthread_mutex_lock(&m->mu);
    size_t n = 0;
    for (mcp_call *c = m->calls; c; c = c->next)
        if (!c->finished && c->started)
            n++;
    uint64_t *ids = n ? calloc(n, sizeof *ids) : NULL;
    size_t k = 0;
    for (mcp_call *c = m->calls; ids && c; c = c->next)
        if (!c->finished && c->started)
            ids[k++] = c->call_id;
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; i < k; i++)
        th_call_cancel(m->s, ids[i]);
    free(ids);
    mcp_tasks_stop_waiters(m);
    th_session_close(m->s);
    while (m->calls) {
        mcp_call *c = m->calls;
        m->calls = c->next;
        if ((!c->task || c->announce_pending) && !c->no_response)
            mcp_request_done(m, c->id);
        call_free(c);
    }
    while (m->asks) {
        mcp_ask *a = m->asks;
        m->asks = a->next;
        if (a->client_ask) /* (its call was cancelled above) */
            th_call_client_answer(a->client_ask, TOOLHOST_ECANCELLED, NULL,
                                  0);
        free(a);
    }
    while (m->listens) {
        mcp_listen *l = m->listens;
        m->listens = l->next;
        mcp_request_done(m, l->id);
        listen_free(l);
    }
    free(m->owner);
    th_buf_destroy(&m->txt);
    mcp_subs_free(m);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
}
