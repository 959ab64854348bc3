/* test_mcp_core.c - the MCP protocol core through its transport interface
 * (host/mcp/mcp.h), as the stdio and HTTP transports use it: every request
 * with an id gets exactly one response and then exactly one request_done,
 * whatever the method or the outcome; notifications and unusable ids get
 * no request_done; nothing is called after th_mcp_session_free(). */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <msgpack.h>
#include <nettle/base64.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "../../host/mcp/mcp.h"
#include "../../host/mcp/mcp_int.h"
#include "common/host_session.h"
#include "common/th_test.h"
#include "th/config.h"
#include "th/content.h"
#include "th/json.h"
#include "th/log.h"

typedef struct cap {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    json_t *sent;  /* [[msg, req-or-null], ...] */
    json_t *done;  /* [req, ...] */
    bool closed;
    int late;      /* callbacks after free */
} cap;

static void cap_send(void *ud, const json_t *msg, const json_t *req)
{
    cap *c = ud;
    pthread_mutex_lock(&c->mu);
    if (c->closed)
        c->late++;
    json_array_append_new(c->sent, json_pack("[O,O]", msg,
                                             req ? req : json_null()));
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void cap_done(void *ud, const json_t *req)
{
    cap *c = ud;
    pthread_mutex_lock(&c->mu);
    if (c->closed)
        c->late++;
    json_array_append_new(c->done, json_deep_copy(req));
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* How many request_done for id (an integer). */
static int n_done(cap *c, json_int_t id)
{
    int n = 0;
    size_t i;
    json_t *v;
    json_array_foreach(c->done, i, v)
    {
        if (json_is_integer(v) && json_integer_value(v) == id)
            n++;
    }
    return n;
}

/* The responses to id, and whether each came before its request_done. */
static int n_resp(cap *c, json_int_t id)
{
    int n = 0;
    size_t i;
    json_t *v;
    json_array_foreach(c->sent, i, v)
    {
        json_t *m = json_array_get(v, 0);
        json_t *j = json_object_get(m, "id");
        if (!json_object_get(m, "method") && json_is_integer(j) &&
            json_integer_value(j) == id) {
            n++;
            /* a response names its own request as req */
            json_t *r = json_array_get(v, 1);
            CU_ASSERT(json_is_integer(r) && json_integer_value(r) == id);
        }
    }
    return n;
}

static bool wait_done(cap *c, json_int_t id, int ms)
{
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < (int)th_test_ms((unsigned)ms) / 10 && n_done(c, id) == 0; i++) {
        pthread_mutex_unlock(&c->mu);
        usleep(10000);
        pthread_mutex_lock(&c->mu);
    }
    bool ok = n_done(c, id) > 0;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

static void in(th_mcp_session *m, const char *s)
{
    th_mcp_session_input(m, s, strlen(s));
}

static void test_request_done_pairing(void)
{
    th_host *h = th_test_echo_host_open();
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    th_error err;
    th_error_clear(&err);
    cap c = {.sent = json_array(), .done = json_array()};
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    th_mcp_transport t = {.send = cap_send, .request_done = cap_done};
    th_principal who = {.uid = (uint32_t)getuid(), .gid = (uint32_t)getgid()};
    th_mcp_session *m = th_mcp_session_new(h, &who, &t, &c, NULL, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_PTR_NULL(th_mcp_session_version(m));

    in(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}");
    in(m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":"
          "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}}");
    CU_ASSERT_STRING_EQUAL(th_mcp_session_version(m), "2025-06-18");
    in(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    in(m, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}");
    in(m, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\"}");
    in(m, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"nope\"}");
    in(m, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\","
          "\"params\":{\"name\":\"nope\"}}");
    in(m, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\","
          "\"params\":{\"name\":\"echo\",\"arguments\":{}}}");
    in(m, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\","
          "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"x\"}}}");
    in(m, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\","
          "\"params\":{\"name\":\"echo_async\",\"arguments\":{\"text\":\"y\","
          "\"steps\":3,\"delay_ms\":20}}}");
    in(m, "{\"jsonrpc\":\"1.0\",\"id\":10,\"method\":\"ping\"}");
    in(m, "not json");
    in(m, "[]");
    in(m, "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/call\","
          "\"params\":{\"name\":\"echo_async\",\"arguments\":{\"text\":\"z\","
          "\"steps\":100000,\"delay_ms\":20}}}");
    in(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
          "\"params\":{\"requestId\":11}}");
    for (json_int_t id = 1; id <= 11; id++)
        CU_ASSERT(wait_done(&c, id, 5000));
    pthread_mutex_lock(&c.mu);
    for (json_int_t id = 1; id <= 11; id++) {
        CU_ASSERT_EQUAL(n_done(&c, id), 1);
        /* 11 was cancelled by the client: no response */
        CU_ASSERT_EQUAL(n_resp(&c, id), id == 11 ? 0 : 1);
    }
    CU_ASSERT_EQUAL(json_array_size(c.done), 11);
    pthread_mutex_unlock(&c.mu);
    th_mcp_session_free(m);
    pthread_mutex_lock(&c.mu);
    c.closed = true;
    pthread_mutex_unlock(&c.mu);
    /* no callback after the free: the host's close waits for every call
     * and worker, so a late one would have come by its return (an event,
     * where a 50 ms sleep only gave it a chance) */
    th_host_close(h);
    pthread_mutex_lock(&c.mu);
    CU_ASSERT_EQUAL(c.late, 0);
    pthread_mutex_unlock(&c.mu);
    json_decref(c.sent);
    json_decref(c.done);
    pthread_mutex_destroy(&c.mu);
    pthread_cond_destroy(&c.cv);
}

/* The error code of the response to id (0: a result, 1: none). */
static int resp_code(cap *c, json_int_t id)
{
    size_t i;
    json_t *v;
    json_array_foreach(c->sent, i, v)
    {
        json_t *m = json_array_get(v, 0);
        json_t *j = json_object_get(m, "id");
        if (json_object_get(m, "method") || !json_is_integer(j) ||
            json_integer_value(j) != id)
            continue;
        json_t *e = json_object_get(m, "error");
        return e ? (int)json_integer_value(json_object_get(e, "code")) : 0;
    }
    return 1;
}

/* tools/list and tasks/list read their cursor alike: a decimal index
 * that fits, anything else is -32602. */
static void test_list_cursor(void)
{
    th_host *h = th_test_echo_host_open();
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    th_error err;
    th_error_clear(&err);
    cap c = {.sent = json_array(), .done = json_array()};
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    th_mcp_transport t = {.send = cap_send, .request_done = cap_done};
    th_principal who = {.uid = (uint32_t)getuid(), .gid = (uint32_t)getgid()};
    th_mcp_session *m = th_mcp_session_new(h, &who, &t, &c, NULL, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    in(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
          "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}}");
    in(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    static const struct {
        const char *method, *cursor;
        int code;
    } k[] = {
        {"tools/list", "\"0\"", 0},
        {"tools/list", "\"1\"", 0},
        {"tools/list", "\"x\"", -32602},
        {"tools/list", "\"\"", -32602},
        {"tools/list", "3", -32602},
        {"tools/list", "\"99999999999999999999\"", -32602},
        {"tasks/list", "\"0\"", 0},
        {"tasks/list", "\"1x\"", -32602},
        {"tasks/list", "\"99999999999999999999\"", -32602},
    };
    size_t n = sizeof k / sizeof *k;
    for (size_t i = 0; i < n; i++) {
        char req[256];
        snprintf(req, sizeof req,
                 "{\"jsonrpc\":\"2.0\",\"id\":%zu,\"method\":\"%s\","
                 "\"params\":{\"cursor\":%s}}",
                 i + 2, k[i].method, k[i].cursor);
        in(m, req);
    }
    for (size_t i = 0; i < n; i++) {
        CU_ASSERT(wait_done(&c, (json_int_t)i + 2, 5000));
        pthread_mutex_lock(&c.mu);
        int code = resp_code(&c, (json_int_t)i + 2);
        pthread_mutex_unlock(&c.mu);
        if (code != k[i].code)
            fprintf(stderr, "\n%s cursor %s: %d\n", k[i].method, k[i].cursor,
                    code);
        CU_ASSERT_EQUAL(code, k[i].code);
    }
    th_mcp_session_free(m);
    th_host_close(h);
    json_decref(c.sent);
    json_decref(c.done);
    pthread_mutex_destroy(&c.mu);
    pthread_cond_destroy(&c.cv);
}

static int count_tool(const th_tool *t, void *ud)
{
    (void)t;
    (*(int *)ud)++;
    return 0;
}

static int n_tools(th_host *h, const th_principal *who)
{
    th_session *s = th_session_open(h, who, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    int n = 0;
    th_session_tools(s, count_tool, &n);
    th_session_close(s);
    return n;
}

/* th_principal.user (a token's user name: allow_users match it by name,
 * allow_groups never) and th_principal.toolset (only that toolset). */
static void test_principal_user_and_toolset(void)
{
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "host:\n  log_level: error\n  allow_unknown_users: true\n"
             "plugins:\n  - name: echo\n    path: %s\n"
             "toolsets:\n"
             "  - name: a\n    tools: [\"echo\"]\n"
             "    allow_users: [\"alice\"]\n"
             "  - name: b\n    tools: [\"echo_async\"]\n"
             "    allow_groups: [\"%u\"]\n"
             "  - name: c\n    tools: [\"echo\", \"echo_async\"]\n",
             th_test_build_path("plugins/echo.so"), (unsigned)getgid());
    th_host *h = th_test_host_open("t.yaml", yaml);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    th_principal alice = {.uid = (uint32_t)-1, .gid = (uint32_t)getgid(),
                          .user = "alice"};
    th_principal bob = {.uid = (uint32_t)-1, .gid = (uint32_t)getgid(),
                        .user = "bob"};
    /* alice: a (by name) and c (open); never b (groups never match) */
    CU_ASSERT_EQUAL(n_tools(h, &alice), 2);
    /* bob: only c */
    CU_ASSERT_EQUAL(n_tools(h, &bob), 2);
    alice.toolset = "a";
    CU_ASSERT_EQUAL(n_tools(h, &alice), 1);
    bob.toolset = "a";
    CU_ASSERT_EQUAL(n_tools(h, &bob), 0);
    th_principal me = {.uid = (uint32_t)getuid(), .gid = (uint32_t)getgid(),
                       .toolset = "b"};
    CU_ASSERT_EQUAL(n_tools(h, &me), 1); /* b by group */
    me.toolset = "nope";
    CU_ASSERT_EQUAL(n_tools(h, &me), 0);
    /* the strings are copied: a session outlives the caller's buffer */
    char name[16] = "alice";
    th_principal tmp = {.uid = (uint32_t)-1, .user = name, .toolset = "a"};
    th_session *s = th_session_open(h, &tmp, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    strcpy(name, "zzzzz");
    int n = 0;
    th_session_tools(s, count_tool, &n);
    CU_ASSERT_EQUAL(n, 1);
    th_session_close(s);
    th_host_close(h);
}

/* mcp_json_append writes what json_dumps(JSON_COMPACT) writes. */
static void test_json_text_same_as_jansson(void)
{
    static const char *const cases[] = {
        "{}", "[]", "\"\"", "0", "-1", "9223372036854775807",
        "-9223372036854775808", "1.5", "-0.25", "1e300", "3.0", "1e-5",
        "-2.5e-300", "123456789012345678.0", "true",
        "false", "null",
        "{\"a\":[1,2,{\"b\":null}],\"c\":\"x\\\"y\\\\z\"}",
        "\"tab\\tnl\\ncr\\rbs\\bff\\f ctl\\u0001\\u001f del\\u007f\"",
        "\"h\u00e9llo \u20ac \U0001F600 / </script>\"",
        "{\"nul\":\"a\\u0000b\"}",
        "[[[[[[[[[[\"deep\"]]]]]]]]]]",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_error_t je;
        json_t *j = json_loads(cases[i], JSON_DECODE_ANY | JSON_ALLOW_NUL,
                               &je);
        CU_ASSERT_PTR_NOT_NULL_FATAL(j);
        size_t want_len = json_dumpb(j, NULL, 0,
                                     JSON_COMPACT | JSON_ENCODE_ANY);
        char *want = malloc(want_len + 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(want);
        json_dumpb(j, want, want_len, JSON_COMPACT | JSON_ENCODE_ANY);
        th_buf b;
        th_buf_init(&b);
        CU_ASSERT_EQUAL(th_buf_puts(&b, "<"), 0);
        CU_ASSERT_EQUAL(mcp_json_append(&b, j), 0);
        CU_ASSERT_EQUAL(b.len, want_len + 1);
        if (b.len != want_len + 1 || memcmp(b.data + 1, want, want_len) != 0)
            fprintf(stderr, "\ncase %zu: want %.*s got %.*s\n", i,
                    (int)want_len, want, (int)b.len - 1,
                    (const char *)b.data + 1);
        else
            CU_PASS("same text");
        CU_ASSERT(b.len == want_len + 1 &&
                  memcmp(b.data + 1, want, want_len) == 0);
        th_buf_destroy(&b);
        free(want);
        json_decref(j);
    }
}

/* A binary stdout: an image block for an image/ media type, an audio
 * block for audio/ when the client's protocol has them (else an embedded
 * resource, as for any other type), the bytes in base64. */
static void test_result_binary_blocks(void)
{
    static const struct {
        const char *mime;
        bool audio;
        const char *type;
    } cases[] = {
        {"image/png", false, "image"},
        {"audio/wav", true, "audio"},
        {"audio/wav", false, "resource"},
        {"application/pdf", true, "resource"},
        {NULL, true, "resource"},
    };
    static const uint8_t bytes[] = {0x89, 'P', 'N', 'G', 0x00, 0xff};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint8_t meta[64];
        size_t ml = 0;
        if (cases[i].mime) { /* {"mime_type": MIME} */
            size_t n = strlen(cases[i].mime);
            meta[ml++] = 0x81;
            meta[ml++] = 0xa9;
            memcpy(meta + ml, "mime_type", 9);
            ml += 9;
            meta[ml++] = (uint8_t)(0xa0 | n);
            memcpy(meta + ml, cases[i].mime, n);
            ml += n;
        }
        th_result r = {.kind = TH_RESULT_DONE, .ok = true, .out = bytes,
                       .out_len = sizeof bytes, .meta = ml ? meta : NULL,
                       .meta_len = ml};
        json_t *res = mcp_tool_result(&r, "t", 9, TOOLHOST_SEM_BINARY, false,
                                      false, cases[i].audio, true);
        CU_ASSERT_PTR_NOT_NULL_FATAL(res);
        json_t *blk = json_array_get(json_object_get(res, "content"), 0);
        const char *type = json_string_value(json_object_get(blk, "type"));
        CU_ASSERT(type && strcmp(type, cases[i].type) == 0);
        json_t *in = strcmp(cases[i].type, "resource") == 0
                         ? json_object_get(blk, "resource")
                         : blk;
        const char *data = json_string_value(json_object_get(
            in, strcmp(cases[i].type, "resource") == 0 ? "blob" : "data"));
        CU_ASSERT(data && strcmp(data, "iVBORwD/") == 0);
        const char *mt = json_string_value(json_object_get(in, "mimeType"));
        CU_ASSERT(mt && strcmp(mt, cases[i].mime ? cases[i].mime
                                                 : "application/octet-stream") == 0);
        json_decref(res);
    }
}

/* A result whose meta holds only the tool's blocks (meta.toolhost.content,
 * what write_block() leaves): they become content blocks after stdout's,
 * and _meta has no "toolhost/meta" left over (an empty object before). */
static void test_result_blocks_only_meta(void)
{
    /* {"toolhost": {"content": [{"type": "text", "text": "b"}]}} */
    static const uint8_t meta[] = {
        0x81, 0xa8, 't', 'o', 'o', 'l', 'h', 'o', 's', 't', 0x81, 0xa7, 'c',
        'o', 'n', 't', 'e', 'n', 't', 0x91, 0x82, 0xa4, 't', 'y', 'p', 'e',
        0xa4, 't', 'e', 'x', 't', 0xa4, 't', 'e', 'x', 't', 0xa1, 'b'};
    static const uint8_t out[] = "a";
    th_result r = {.kind = TH_RESULT_DONE, .ok = true, .out = out,
                   .out_len = 1, .meta = meta, .meta_len = sizeof meta};
    json_t *res = mcp_tool_result(&r, "t", 9, TOOLHOST_SEM_TEXT, false, false,
                                  true, true);
    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    json_t *c = json_object_get(res, "content");
    CU_ASSERT_EQUAL(json_array_size(c), 2);
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_array_get(c, 1), "text")), "b");
    json_t *m = json_object_get(res, "_meta");
    CU_ASSERT_PTR_NOT_NULL(json_object_get(m, "toolhost/call_id"));
    CU_ASSERT_PTR_NULL(json_object_get(m, "toolhost/meta"));
    json_decref(res);
}

/* The text answer of a plain result (mcp_tool_result_text) is the text of
 * the tree answer (mcp_tool_result wrapped as mcp_send_result does); a
 * result that is not plain is refused (1). */
static void test_result_text_same_as_tree(void)
{
    static const uint8_t meta[] = {0x81, 0xa1, 'k', 0x92, 0x01, 0xc3};
    /* an integer key and a uint64 past INT64_MAX: the lossy tree's way */
    static const uint8_t odd_meta[] = {0x82, 0x01, 0x02, 0xa1, 'u', 0xcf, 0xff,
                                       0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    th_result rs[] = {
        {.kind = TH_RESULT_DONE, .ok = true, .out = (const uint8_t *)"hi",
         .out_len = 2},
        {.kind = TH_RESULT_DONE, .ok = true},
        {.kind = TH_RESULT_DONE, .ok = false,
         .out = (const uint8_t *)"o\"ut\n", .out_len = 5,
         .err = (const uint8_t *)"bad \xc3\xa9", .err_len = 6,
         .meta = meta, .meta_len = sizeof meta},
        {.kind = TH_RESULT_DONE, .ok = true,
         .out = (const uint8_t *)"\x01\x1f\\", .out_len = 3,
         .meta = meta, .meta_len = sizeof meta},
        {.kind = TH_RESULT_DONE, .ok = true, .out = (const uint8_t *)"x",
         .out_len = 1, .meta = odd_meta, .meta_len = sizeof odd_meta},
    };
    json_t *ids[] = {json_integer(7), json_string("a\"b"), json_integer(-3),
                     json_string(""), json_integer(0)};
    for (size_t i = 0; i < sizeof rs / sizeof *rs; i++) {
        th_buf b;
        th_buf_init(&b);
        CU_ASSERT_EQUAL(mcp_tool_result_text(&b, ids[i], &rs[i], 42 + i,
                                             TOOLHOST_SEM_TEXT, false),
                        0);
        json_t *res = mcp_tool_result(&rs[i], "t", 42 + i, TOOLHOST_SEM_TEXT,
                                      false, false, true, true);
        json_t *msg = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                                ids[i], "result", res);
        char *want = json_dumps(msg, JSON_COMPACT);
        CU_ASSERT_PTR_NOT_NULL_FATAL(want);
        CU_ASSERT(b.len == strlen(want) &&
                  memcmp(b.data, want, b.len) == 0);
        if (b.len != strlen(want) || memcmp(b.data, want, b.len) != 0)
            fprintf(stderr, "\nresult %zu:\nwant %s\ngot  %.*s\n", i, want,
                    (int)b.len, (const char *)b.data);
        free(want);
        json_decref(msg);
        th_buf_destroy(&b);
    }
    /* Not plain: binary stdout, structured content, ill-formed UTF-8, an
     * error result. */
    th_buf b;
    th_buf_init(&b);
    CU_ASSERT_EQUAL(mcp_tool_result_text(&b, ids[0], &rs[0], 1,
                                         TOOLHOST_SEM_BINARY, false),
                    1);
    CU_ASSERT_EQUAL(mcp_tool_result_text(&b, ids[0], &rs[0], 1,
                                         TOOLHOST_SEM_TEXT, true),
                    1);
    th_result bad = {.kind = TH_RESULT_DONE, .ok = true,
                     .out = (const uint8_t *)"\xff", .out_len = 1};
    CU_ASSERT_EQUAL(mcp_tool_result_text(&b, ids[0], &bad, 1,
                                         TOOLHOST_SEM_TEXT, false),
                    1);
    static const uint8_t blocks[] = {0x81, 0xa8, 't', 'o', 'o', 'l', 'h', 'o',
                                     's', 't', 0x81, 0xa7, 'c', 'o', 'n', 't',
                                     'e', 'n', 't', 0x90};
    th_result bl = {.kind = TH_RESULT_DONE, .ok = true,
                    .out = (const uint8_t *)"x", .out_len = 1,
                    .meta = blocks, .meta_len = sizeof blocks};
    CU_ASSERT_EQUAL(mcp_tool_result_text(&b, ids[0], &bl, 1,
                                         TOOLHOST_SEM_TEXT, false),
                    1);
    th_result er = {.kind = TH_RESULT_ERROR, .error = TH_EARGS,
                    .message = "no"};
    CU_ASSERT_EQUAL(mcp_tool_result_text(&b, ids[0], &er, 1,
                                         TOOLHOST_SEM_TEXT, false),
                    1);
    CU_ASSERT_EQUAL(b.len, 0);
    th_buf_destroy(&b);
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
        json_decref(ids[i]);
}

/* mcp_json_append_msgpack writes what the tree (th_json_from_msgpack_lossy
 * + mcp_json_append) writes, or gives up (1) where the tree has its own
 * way; the caller then uses the tree. */
static void test_msgpack_text_same_as_tree(void)
{
    for (int k = 0; k < 9; k++) {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        int want_rc = 0;
        switch (k) {
        case 0: /* the core's output meta shape */
            msgpack_pack_map(&pk, 2);
            msgpack_pack_str_with_body(&pk, "truncated", 9);
            msgpack_pack_false(&pk);
            msgpack_pack_str_with_body(&pk, "n", 1);
            msgpack_pack_array(&pk, 4);
            msgpack_pack_int64(&pk, -5);
            msgpack_pack_uint64(&pk, 18);
            msgpack_pack_double(&pk, 0.1);
            msgpack_pack_nil(&pk);
            break;
        case 1: /* ill-formed UTF-8 in a value, bin, float32, NaN */
            msgpack_pack_array(&pk, 4);
            msgpack_pack_str_with_body(&pk, "a\xff\"b\n", 5);
            msgpack_pack_bin_with_body(&pk, "bin", 3);
            msgpack_pack_float(&pk, 1.5f);
            msgpack_pack_double(&pk, NAN);
            break;
        case 2: /* empty containers and strings */
            msgpack_pack_map(&pk, 2);
            msgpack_pack_str_with_body(&pk, "", 0);
            msgpack_pack_array(&pk, 0);
            msgpack_pack_str_with_body(&pk, "m", 1);
            msgpack_pack_map(&pk, 0);
            break;
        case 3: /* a key twice: the tree keeps one */
            msgpack_pack_map(&pk, 2);
            msgpack_pack_str_with_body(&pk, "k", 1);
            msgpack_pack_int(&pk, 1);
            msgpack_pack_str_with_body(&pk, "k", 1);
            msgpack_pack_int(&pk, 2);
            want_rc = 1;
            break;
        case 4: /* an integer key: the tree fails */
            msgpack_pack_map(&pk, 1);
            msgpack_pack_int(&pk, 1);
            msgpack_pack_int(&pk, 2);
            want_rc = 1;
            break;
        case 5: /* past int64 */
            msgpack_pack_uint64(&pk, UINT64_MAX);
            want_rc = 1;
            break;
        case 6: /* an ill-formed key */
            msgpack_pack_map(&pk, 1);
            msgpack_pack_str_with_body(&pk, "\xfe", 1);
            msgpack_pack_int(&pk, 2);
            want_rc = 1;
            break;
        case 7: /* an ext value */
            msgpack_pack_ext_with_body(&pk, "x", 1, 5);
            want_rc = 1;
            break;
        case 8: /* control characters in a key */
            msgpack_pack_map(&pk, 1);
            msgpack_pack_str_with_body(&pk, "\x01\t", 2);
            msgpack_pack_true(&pk);
            break;
        }
        th_buf b;
        th_buf_init(&b);
        int rc = mcp_json_append_msgpack(&b, (const uint8_t *)sb.data,
                                         sb.size);
        CU_ASSERT_EQUAL(rc, want_rc);
        if (rc == 0) {
            th_error err;
            json_t *t = th_json_from_msgpack_lossy((const uint8_t *)sb.data,
                                                   sb.size, &err);
            CU_ASSERT_PTR_NOT_NULL_FATAL(t);
            th_buf w;
            th_buf_init(&w);
            CU_ASSERT_EQUAL(mcp_json_append(&w, t), 0);
            CU_ASSERT(w.len == b.len && memcmp(w.data, b.data, b.len) == 0);
            if (w.len != b.len || memcmp(w.data, b.data, b.len) != 0)
                fprintf(stderr, "\ncase %d: want %.*s got %.*s\n", k,
                        (int)w.len, (const char *)w.data, (int)b.len,
                        (const char *)b.data);
            th_buf_destroy(&w);
            json_decref(t);
        } else {
            CU_ASSERT_EQUAL(b.len, 0);
        }
        th_buf_destroy(&b);
        msgpack_sbuffer_destroy(&sb);
    }
}

/* Decodes a base64 text with nettle's decoder; the bytes' count, or -1
 * when it is not base64 with its padding. */
static long b64_decode(const char *text, uint8_t *out, size_t cap)
{
    struct base64_decode_ctx ctx;
    base64_decode_init(&ctx);
    size_t n = cap;
    if (!base64_decode_update(&ctx, &n, out, strlen(text), text) ||
        !base64_decode_final(&ctx))
        return -1;
    return (long)n;
}

/* mcp_base64 (nettle's base64_encode_raw): RFC 4648's vectors with their
 * padding, nothing for nothing, and random bytes of every length to 300
 * decoding back to themselves, alone and inside image and resource
 * blocks. */
static void test_base64_round_trip(void)
{
    static const char *const rfc[][2] = {
        {"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
        {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
        {"foobar", "Zm9vYmFy"}};
    for (size_t i = 0; i < sizeof rfc / sizeof *rfc; i++) {
        char *e = mcp_base64((const uint8_t *)rfc[i][0], strlen(rfc[i][0]));
        CU_ASSERT(e && strcmp(e, rfc[i][1]) == 0);
        free(e);
    }
    char *e = mcp_base64(NULL, 0);
    CU_ASSERT(e && e[0] == '\0');
    free(e);
    /* every byte value, in every position of a 3-byte group */
    uint8_t all[256 + 2], back[sizeof all];
    for (size_t i = 0; i < sizeof all; i++)
        all[i] = (uint8_t)i;
    for (size_t off = 0; off < 3; off++) {
        e = mcp_base64(all + off, 256);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        CU_ASSERT_EQUAL(b64_decode(e, back, sizeof back), 256);
        CU_ASSERT_EQUAL(memcmp(back, all + off, 256), 0);
        free(e);
    }
    uint32_t seed = 0x9e3779b9u;
    uint8_t in[300], out[300];
    for (size_t n = 0; n <= sizeof in; n++) {
        for (size_t i = 0; i < n; i++) {
            seed ^= seed << 13, seed ^= seed >> 17, seed ^= seed << 5;
            in[i] = (uint8_t)seed;
        }
        e = mcp_base64(in, n);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        size_t el = strlen(e);
        CU_ASSERT_EQUAL(el, (n + 2) / 3 * 4);
        size_t pad = n % 3 ? 3 - n % 3 : 0;
        CU_ASSERT(strspn(e, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuv"
                            "wxyz0123456789+/") == el - pad);
        CU_ASSERT(strspn(e + el - pad, "=") == pad);
        long got = b64_decode(e, out, sizeof out);
        CU_ASSERT(got == (long)n && memcmp(in, out, n) == 0);
        free(e);
        if (n % 50 != 7)
            continue;
        /* the same bytes in an image block and in an embedded resource */
        th_block img = {.kind = TOOLHOST_BLOCK_IMAGE, .mime_type = "image/png",
                        .data = in, .len = n};
        json_t *j = mcp_block_json(&img, true, true);
        const char *d = json_string_value(json_object_get(j, "data"));
        CU_ASSERT(d && b64_decode(d, out, sizeof out) == (long)n &&
                  memcmp(in, out, n) == 0);
        json_decref(j);
        th_block res = {.kind = TOOLHOST_BLOCK_RESOURCE,
                        .mime_type = "application/octet-stream",
                        .uri = "toolhost://x", .data = in, .len = n};
        j = mcp_block_json(&res, true, true);
        d = json_string_value(
            json_object_get(json_object_get(j, "resource"), "blob"));
        CU_ASSERT(d && b64_decode(d, out, sizeof out) == (long)n &&
                  memcmp(in, out, n) == 0);
        json_decref(j);
    }
    /* what the decoder used here refuses, so that the checks above mean
     * something: a bad character, a cut group, padding in the middle */
    CU_ASSERT_EQUAL(b64_decode("Zm9v!A==", out, sizeof out), -1);
    CU_ASSERT_EQUAL(b64_decode("Zm9vY", out, sizeof out), -1);
    CU_ASSERT_EQUAL(b64_decode("Zg==Zm8=", out, sizeof out), -1);
}

void th_suite_mcp_core(void)
{
    CU_pSuite s = CU_add_suite("mcp_core", NULL, NULL);
    CU_add_test(s, "request_done_pairing", test_request_done_pairing);
    CU_add_test(s, "list_cursor", test_list_cursor);
    CU_add_test(s, "principal_user_and_toolset",
                test_principal_user_and_toolset);
    CU_add_test(s, "json_text_same_as_jansson",
                test_json_text_same_as_jansson);
    CU_add_test(s, "result_text_same_as_tree", test_result_text_same_as_tree);
    CU_add_test(s, "result_binary_blocks", test_result_binary_blocks);
    CU_add_test(s, "result_blocks_only_meta", test_result_blocks_only_meta);
    CU_add_test(s, "base64_round_trip", test_base64_round_trip);
    CU_add_test(s, "msgpack_text_same_as_tree",
                test_msgpack_text_same_as_tree);
}
