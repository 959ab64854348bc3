/* test_att33_mcp_http.c - attacks on the mcp plugin's Streamable HTTP
 * client by a hostile MCP server (review att33).
 *
 * big_sse_event: the answer to tools/call is an event stream whose first
 * event is one data line of 12 MiB (3 under valgrind) (not JSON: dropped), sent in 1 KiB
 * writes, then the real answer.  The event parser used to scan the whole
 * pending buffer again for the blank line after every read (quadratic in
 * the event's size: seconds of CPU per event, ~12 GiB of compares); it
 * now resumes where the last scan stopped, so the answer comes well within
 * the call's budget.  The same stream carries "retry: 0" (ignored).
 * event_ids: ids with a control byte or past 127 bytes are not sent back
 * as Last-Event-ID on the GET stream's reconnect (held). */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdlib.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

/* The big event's size: 12 MiB; 3 MiB under valgrind, where the test's
 * own server and libcurl move bytes some 50 times slower (quadratic,
 * that size still costs minutes). */
static size_t BIG = 12u << 20;

typedef struct hsrv {
    struct MHD_Daemon *d;
    pthread_mutex_t mu;
    unsigned port;
    unsigned calls; /* tools/call answered */
    unsigned gets;  /* GET streams asked for */
    char last_id[2][256]; /* Last-Event-ID of GETs 1 and 2 ("-": none) */
    char get1[1024];      /* GET 1's events */
} hsrv;

typedef struct hreq {
    hsrv *h;
    char *body;
    size_t len;
    size_t pos; /* bytes of the stream sent */
    char tail[256];
} hreq;

/* The SSE answer: "retry: 0", "data: " + BIG bytes, the blank line, then
 * the JSON-RPC answer event. */
static ssize_t big_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    hreq *q = cls;
    static const char head[] = "retry: 0\ndata: ";
    size_t hl = sizeof head - 1, tl = strlen(q->tail);
    size_t total = hl + BIG + tl;
    if (q->pos >= total)
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = 0;
    while (n < max && q->pos < total) {
        size_t k;
        if (q->pos < hl) {
            k = hl - q->pos < max - n ? hl - q->pos : max - n;
            memcpy(buf + n, head + q->pos, k);
        } else if (q->pos < hl + BIG) {
            k = hl + BIG - q->pos < max - n ? hl + BIG - q->pos : max - n;
            memset(buf + n, 'x', k);
        } else {
            size_t t = q->pos - hl - BIG;
            k = tl - t < max - n ? tl - t : max - n;
            memcpy(buf + n, q->tail + t, k);
        }
        n += k;
        q->pos += k;
    }
    return (ssize_t)n;
}

static enum MHD_Result h_handler(void *cls, struct MHD_Connection *c,
                                 const char *url, const char *method,
                                 const char *version, const char *upload,
                                 size_t *upload_size, void **req_cls)
{
    (void)url, (void)version;
    hsrv *h = cls;
    hreq *q = *req_cls;
    if (!q) {
        q = calloc(1, sizeof *q);
        q->h = h;
        *req_cls = q;
        return MHD_YES;
    }
    if (!strcmp(method, "GET")) {
        /* GET 1: a good id, then one with a control byte and one of 200
         * bytes (neither may be sent back), then the end; GET 2 is
         * refused (405: the plugin stops asking) */
        const char *li = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     "Last-Event-ID");
        pthread_mutex_lock(&h->mu);
        unsigned g = ++h->gets;
        if (g <= 2)
            snprintf(h->last_id[g - 1], sizeof h->last_id[0], "%s",
                     li ? li : "-");
        pthread_mutex_unlock(&h->mu);
        char *ev = h->get1;
        struct MHD_Response *r =
            g == 1 ? MHD_create_response_from_buffer(strlen(ev), ev,
                                                      MHD_RESPMEM_PERSISTENT)
                   : MHD_create_response_from_buffer(0, "",
                                                     MHD_RESPMEM_PERSISTENT);
        if (g == 1)
            MHD_add_response_header(r, "Content-Type", "text/event-stream");
        enum MHD_Result rc = MHD_queue_response(c, g == 1 ? 200 : 405, r);
        MHD_destroy_response(r);
        return rc;
    }
    if (*upload_size) {
        char *b = realloc(q->body, q->len + *upload_size + 1);
        if (b) {
            memcpy(b + q->len, upload, *upload_size);
            q->len += *upload_size;
            b[q->len] = 0;
            q->body = b;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    json_t *m = q->body ? json_loads(q->body, 0, NULL) : NULL;
    const char *meth = json_string_value(json_object_get(m, "method"));
    json_t *id = json_object_get(m, "id");
    enum MHD_Result rc;
    struct MHD_Response *r;
    if (!meth || !id) {
        r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        rc = MHD_queue_response(c, 202, r);
        MHD_destroy_response(r);
        json_decref(m);
        return rc;
    }
    if (!strcmp(meth, "tools/call")) {
        snprintf(q->tail, sizeof q->tail,
                 "\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":"
                 "{\"content\":[{\"type\":\"text\",\"text\":\"big-ok\"}]}}"
                 "\n\n",
                 (long long)json_integer_value(id));
        pthread_mutex_lock(&h->mu);
        h->calls++;
        pthread_mutex_unlock(&h->mu);
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024,
                                              big_reader, q, NULL);
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
    } else {
        json_t *res;
        if (!strcmp(meth, "initialize"))
            res = json_pack("{s:s, s:{s:{}}, s:{s:s, s:s}}",
                            "protocolVersion", "2025-06-18", "capabilities",
                            "tools", "serverInfo", "name", "h", "version",
                            "1");
        else
            res = json_pack("{s:[{s:s, s:{s:s}}]}", "tools", "name", "big",
                            "inputSchema", "type", "object");
        json_t *ans = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                                id, "result", res);
        char *text = json_dumps(ans, 0);
        json_decref(ans);
        r = MHD_create_response_from_buffer(strlen(text), text,
                                            MHD_RESPMEM_MUST_FREE);
        MHD_add_response_header(r, "Content-Type", "application/json");
        MHD_add_response_header(r, "Mcp-Session-Id", "s1");
    }
    rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    json_decref(m);
    return rc;
}

static void h_done(void *cls, struct MHD_Connection *c, void **req_cls,
                   enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    hreq *q = *req_cls;
    if (q)
        free(q->body);
    free(q);
    *req_cls = NULL;
}

static int h_start(hsrv *h)
{
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    static const char note[] = "data: {\"jsonrpc\":\"2.0\",\"method\":"
                               "\"notifications/message\",\"params\":"
                               "{\"level\":\"info\",\"data\":\"x\"}}\n\n";
    char longid[201];
    memset(longid, 'L', 200);
    longid[200] = 0;
    snprintf(h->get1, sizeof h->get1,
             "id: ok1\n%sid: bad\x01id\n%sid: %s\n%s", note, note, longid,
             note);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
                                MHD_USE_THREAD_PER_CONNECTION |
                                MHD_USE_ERROR_LOG,
                            0, NULL, NULL, h_handler, h,
                            MHD_OPTION_SOCK_ADDR, &sa,
                            MHD_OPTION_NOTIFY_COMPLETED, h_done, h,
                            MHD_OPTION_END);
    const union MHD_DaemonInfo *i =
        h->d ? MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    h->port = i ? i->port : 0;
    return h->port ? 0 : -1;
}

static void h_stop(hsrv *h)
{
    if (h->d)
        MHD_stop_daemon(h->d);
    pthread_mutex_destroy(&h->mu);
}

/* A 12 MiB event in 1 KiB writes: the answer after it comes within the
 * call's budget (5 s, scaled), and the host serves on. */
static void test_big_sse_event(void)
{
    th_test_timeout(180);
    if (getenv("TH_VALGRIND"))
        BIG = 3u << 20;
    hsrv h;
    CU_ASSERT_FATAL(h_start(&h) == 0);
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "plugins:\n"
             "  - name: mcp\n"
             "    path: @BUILD@/plugins/mcp.so\n"
             "    config:\n"
             "      servers:\n"
             "        - name: h\n"
             "          url: http://127.0.0.1:%u/mcp\n"
             "          timeout: %ums\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             h.port, th_test_ms(5000));
    rpc_opts o = {.config = cfg};
    rpc_srv out;
    CU_ASSERT_FATAL(rpc_srv_start(&out, &o) == 0);
    th_rpc_client *c = rpc_connect(&out);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.call", "[\"h_big\", {}]", &r) == 0);
    CU_ASSERT(r.res && rpc_stdout_is(r.res, "big-ok"));
    if (!(r.res && rpc_stdout_is(r.res, "big-ok")))
        rpc_dump_log(&out);
    rpc_res_free(&r);
    pthread_mutex_lock(&h.mu);
    CU_ASSERT_EQUAL(h.calls, 1);
    pthread_mutex_unlock(&h.mu);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&out, SIGTERM), 0);
    rpc_srv_free(&out);
    h_stop(&h);
}

/* Event ids the plugin must not send back as Last-Event-ID: one with a
 * control byte (header injection toward the server) and one of 200
 * bytes (past its 127); the last good one goes instead. */
static void test_event_ids(void)
{
    th_test_timeout(120);
    hsrv h;
    CU_ASSERT_FATAL(h_start(&h) == 0);
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  shutdown_grace: 1s\n"
             "plugins:\n"
             "  - name: mcp\n"
             "    path: @BUILD@/plugins/mcp.so\n"
             "    config:\n"
             "      restart_initial: 50ms\n"
             "      servers:\n"
             "        - name: h\n"
             "          url: http://127.0.0.1:%u/mcp\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n",
             h.port);
    rpc_opts o = {.config = cfg};
    rpc_srv out;
    CU_ASSERT_FATAL(rpc_srv_start(&out, &o) == 0);
    CU_ASSERT(rpc_log_wait(&out, "server 'h' offers no GET stream (HTTP "
                                 "405)",
                           rpc_wait_ms()));
    pthread_mutex_lock(&h.mu);
    CU_ASSERT_EQUAL(h.gets, 2);
    CU_ASSERT_STRING_EQUAL(h.last_id[0], "-");
    CU_ASSERT_STRING_EQUAL(h.last_id[1], "ok1");
    pthread_mutex_unlock(&h.mu);
    CU_ASSERT_EQUAL(rpc_srv_stop(&out, SIGTERM), 0);
    rpc_srv_free(&out);
    h_stop(&h);
}

void th_suite_att33_mcp_http(void)
{
    CU_pSuite s = CU_add_suite("att33_mcp_http", NULL, NULL);
    CU_add_test(s, "big_sse_event", test_big_sse_event);
    CU_add_test(s, "event_ids", test_event_ids);
}
