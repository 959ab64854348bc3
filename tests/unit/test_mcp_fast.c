/* test_mcp_fast.c - the tree-less read of a plain tools/call
 * (host/mcp/mcp_fast.c): what it accepts gives the id, the name and the
 * very msgpack bytes that json_loadb() then th_json_to_msgpack() give;
 * everything else it leaves to the tree (returns 0), so the errors and
 * the edge cases stay the tree path's. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../host/mcp/mcp_int.h"
#include "common/host_session.h"
#include "common/th_test.h"
#include "th/buf.h"
#include "th/config.h"
#include "th/json.h"
#include "th/log.h"

/* A tools/call line with `args` as its arguments. */
static char *line_with(const char *args)
{
    size_t n = strlen(args) + 200;
    char *s = malloc(n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    snprintf(s, n,
             "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"echo\",\"arguments\":%s}}",
             args);
    return s;
}

/* Scans text and checks it against the tree's reading. */
static void same_as_tree(const char *text, size_t len)
{
    th_mcp_plain fc;
    th_buf_init(&fc.args);
    int rc = th_mcp_plain_scan(text, len, &fc);
    CU_ASSERT_EQUAL(rc, 1);
    if (rc != 1) {
        fprintf(stderr, "\nrefused: %.300s\n", text);
        th_buf_destroy(&fc.args);
        return;
    }
    json_error_t je;
    json_t *msg = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(msg);
    json_t *id = json_object_get(msg, "id");
    if (fc.id_is_str) {
        CU_ASSERT(json_is_string(id));
        CU_ASSERT(json_string_length(id) == fc.id_len &&
                  memcmp(json_string_value(id), fc.id_str, fc.id_len) == 0);
    } else {
        CU_ASSERT(json_is_integer(id));
        CU_ASSERT_EQUAL(json_integer_value(id), fc.id_int);
    }
    json_t *params = json_object_get(msg, "params");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(params, "name")),
                           fc.name);
    json_t *args = json_object_get(params, "arguments");
    json_t *empty = args ? NULL : json_object();
    th_buf want;
    th_buf_init(&want);
    CU_ASSERT_EQUAL(th_json_to_msgpack(args ? args : empty, &want), 0);
    bool same = want.len == fc.args.len &&
                memcmp(want.data, fc.args.data, want.len) == 0;
    CU_ASSERT(same);
    if (!same)
        fprintf(stderr, "\nnot the same msgpack (%zu vs %zu bytes): %.300s\n",
                want.len, fc.args.len, text);
    th_buf_destroy(&want);
    json_decref(empty);
    json_decref(msg);
    th_buf_destroy(&fc.args);
}

static void args_same(const char *args)
{
    char *s = line_with(args);
    same_as_tree(s, strlen(s));
    free(s);
}

static void test_same_as_tree(void)
{
    static const char *const lines[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\",\"arguments\":{\"text\":\"hello 1\"}}}",
        /* keys in another order, whitespace everywhere, a string id */
        " \t{ \"params\" : { \"arguments\" : { \"text\" : \"x\" } , "
        "\"name\" : \"echo\" } ,\r\n \"method\":\"tools/call\", \"id\" : "
        "\"req-9\", \"jsonrpc\" : \"2.0\" }\n ",
        /* no arguments: {} */
        "{\"jsonrpc\":\"2.0\",\"id\":-5,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\"}}",
        /* escaped envelope keys and values */
        "{\"json\\u0072pc\":\"2.0\",\"id\":\"a\\\"b\",\"method\":\"tools\\/"
        "call\",\"params\":{\"n\\u0061me\":\"ec\\u0068o\",\"arguments\":{}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"t\\u00e9l\\u20ac\",\"arguments\":{\"\":\"\"}}}",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        same_as_tree(lines[i], strlen(lines[i]));

    static const char *const args[] = {
        "{}",
        "{\"a\":true,\"b\":false,\"c\":null,\"d\":[],\"e\":{},\"f\":[[],{}]}",
        /* integers at every msgpack width */
        "{\"i\":[0,1,127,128,255,256,65535,65536,4294967295,4294967296,"
        "999999999999999999,-0,-1,-32,-33,-128,-129,-32768,-32769,"
        "-2147483648,-2147483649,-999999999999999999]}",
        /* escapes and UTF-8 */
        "{\"s\":\"a\\nb\\\"c\\\\d\\/e\\bf\\fg\\rh\\ti\",\"u\":\"\\u0041\\u00e9"
        "\\u07ff\\u0800\\uffff\",\"t\":\"\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e\","
        "\"\\u00e9k\":1}",
        /* order kept, nesting */
        "{\"z\":1,\"y\":{\"x\":[1,{\"w\":[\"v\"]}],\"a\":2},\"b\":3}",
        "  { \"k\" :\t[ 1 ,\n2 , 3 ] , \"l\" : { } }  ",
    };
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
        args_same(args[i]);

    /* Sizes across the header widths: strings of 0..300 and 70000 bytes,
     * maps and arrays of 15, 16, 17 and 300 entries. */
    static const size_t slen[] = {0, 1, 31, 32, 33, 255, 256, 257, 65535,
                                  65536, 70000};
    for (size_t i = 0; i < sizeof slen / sizeof slen[0]; i++) {
        char *a = malloc(slen[i] + 32);
        CU_ASSERT_PTR_NOT_NULL_FATAL(a);
        int n = sprintf(a, "{\"s\":\"");
        memset(a + n, 'q', slen[i]);
        strcpy(a + n + slen[i], "\"}");
        args_same(a);
        free(a);
    }
    /* A special byte at every offset of a longer string (the scan reads
     * eight bytes at a time). */
    static const char *const sp[] = {"\\n", "\\\"", "\\u00e9", "\xc3\xa9",
                                      "\xf0\x9d\x84\x9e", "\x7f", "/"};
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++)
        for (int at = 0; at < 20; at++) {
            char a[128];
            snprintf(a, sizeof a, "{\"s\":\"%.*s%s%.*s\"}", at,
                     "abcdefghijklmnopqrstuvwxyz", sp[i], 19 - at,
                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ");
            args_same(a);
        }
    static const int nent[] = {15, 16, 17, 32, 300};
    for (size_t i = 0; i < sizeof nent / sizeof nent[0]; i++) {
        char *a = malloc(20 * (size_t)nent[i] + 64);
        CU_ASSERT_PTR_NOT_NULL_FATAL(a);
        size_t n = (size_t)sprintf(a, "{\"arr\":[");
        for (int k = 0; k < nent[i]; k++)
            n += (size_t)sprintf(a + n, "%s%d", k ? "," : "", k);
        n += (size_t)sprintf(a + n, "]");
        if (nent[i] <= 32) /* at most 32 keys: a map of nent[i] - 1 more */
            for (int k = 1; k < nent[i]; k++)
                n += (size_t)sprintf(a + n, ",\"k%d\":%d", k, k);
        sprintf(a + n, "}");
        args_same(a);
        free(a);
    }
}

/* The scan says "not mine" (0): the tree reads these. */
static void refused(const char *text, size_t len)
{
    th_mcp_plain fc;
    th_buf_init(&fc.args);
    int rc = th_mcp_plain_scan(text, len, &fc);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc != 0)
        fprintf(stderr, "\naccepted: %.300s\n", text);
    th_buf_destroy(&fc.args);
}

static void args_refused(const char *args)
{
    char *s = line_with(args);
    refused(s, strlen(s));
    free(s);
}

static void test_refuses_the_rest(void)
{
    static const char *const lines[] = {
        "", "not json", "[]", "{}", "null",
        /* another method, version, id kind */
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
        "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"echo\"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"echo\"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"echo\"}}",
        /* a notification (no id) */
        "{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\"}}",
        /* other keys: _meta, task, unknown */
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\",\"_meta\":{\"progressToken\":1}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\",\"task\":{}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"x\":0,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"echo\"}}",
        /* a repeated envelope key */
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"echo\"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\",\"name\":\"x\"}}",
        /* no name, a name not a string, with U+0000 */
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":3}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"a\\u0000b\"}}",
        /* params not an object, trailing bytes, cut short */
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "[]}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\"}} x",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\"}",
        /* a second value after the message (a string cut short, an
         * object), vertical tab and form feed as whitespace */
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\"}} \"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\"}}{}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\"}}\v",
        "\f{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\"}}",
        /* a 19-digit id */
        "{\"jsonrpc\":\"2.0\",\"id\":1234567890123456789,\"method\":"
        "\"tools/call\",\"params\":{\"name\":\"echo\"}}",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        refused(lines[i], strlen(lines[i]));

    static const char *const args[] = {
        "null", "[]", "1", "\"s\"",
        "{\"r\":1.5}", "{\"r\":1e3}", "{\"r\":-0.0}",
        "{\"i\":1234567890123456789}", "{\"i\":01}", "{\"i\":-}",
        "{\"i\":+1}",
        "{\"k\":1,\"k\":2}",
        "{\"k\":1,\"\\u006b\":2}",
        "{\"s\":\"a\\u0000b\"}",
        "{\"a\\u0000\":1}",
        "{\"s\":\"\\ud834\\udd1e\"}",
        "{\"s\":\"\\x\"}",
        "{\"s\":\"\\u12\"}",
        "{\"s\":\"\xff\"}",
        "{\"s\":\"\xc0\x80\"}",
        "{\"s\":\"\xed\xa0\x80\"}",
        "{\"s\":\"a\tb\"}",
        "{\"s\":\"abc}",
        "{\"t\":tru}", "{\"t\":nul}", "{\"t\":True}",
        "{\"a\":[1,]}", "{\"a\":[1 2]}", "{\"a\":1,}", "{\"a\" 1}",
        "{'a':1}",
    };
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
        args_refused(args[i]);

    /* A control byte or an ill-formed sequence at every offset. */
    static const char *const bad[] = {"\x01", "\x1f", "\xff", "\xc3",
                                       "\xed\xa0\x80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (int at = 0; at < 20; at++) {
            char a[128];
            snprintf(a, sizeof a, "{\"s\":\"%.*s%s%.*s\"}", at,
                     "abcdefghijklmnopqrstuvwxyz", bad[i], 19 - at,
                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ");
            args_refused(a);
        }

    /* Nesting past the scan's depth, and 33 keys in one object. */
    char deep[200] = "";
    for (int i = 0; i < 40; i++)
        strcat(deep, "[");
    for (int i = 0; i < 40; i++)
        strcat(deep, "]");
    char a[300];
    snprintf(a, sizeof a, "{\"d\":%s}", deep);
    args_refused(a);
    size_t n = (size_t)sprintf(a, "{");
    for (int k = 0; k < 33; k++)
        n += (size_t)sprintf(a + n, "%s\"k%d\":1", k ? "," : "", k);
    sprintf(a + n, "}");
    args_refused(a);
}

/* A line with a NUL byte or cut in the middle of every token: refused or
 * accepted, never read past its end (ASan sees that). */
static void test_cut_lines(void)
{
    const char *full =
        "{\"jsonrpc\":\"2.0\",\"id\":\"q\\u00e9\",\"method\":\"tools/call\","
        "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"h\\n\","
        "\"n\":[-12,true,false,null,{\"x\":\"\xc3\xa9\"}]}}}";
    size_t len = strlen(full);
    for (size_t k = 0; k < len; k++) {
        char *cut = malloc(k ? k : 1); /* exactly k bytes */
        CU_ASSERT_PTR_NOT_NULL_FATAL(cut);
        memcpy(cut, full, k);
        refused(cut, k);
        free(cut);
    }
    same_as_tree(full, len);
}

/* Random edits of request lines (a fixed seed): whatever the scan
 * accepts, json_loadb() accepts too and reads the same way; what jansson
 * refuses, the scan refuses. */
static void test_mutations_agree(void)
{
    static const char *const seeds[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"echo\",\"arguments\":{\"text\":\"hello 12\",\"n\":"
        "[-1,0,true,null,{\"k\":\"v\\u00e9\"}]}}}",
        "{\"id\":\"x\",\"params\":{\"arguments\":{\"a\":{\"b\":[[],{}]}},"
        "\"name\":\"t\"},\"method\":\"tools/call\",\"jsonrpc\":\"2.0\"}",
    };
    static const char pick[] = "\"\\{}[],:0-9e.+ untrfals\x01\xc3\xa9\xff/";
    uint32_t seed = 12345;
    int accepted = 0;
    for (int it = 0; it < 20000; it++) {
        const char *src = seeds[it % 2];
        size_t n = strlen(src);
        char buf[512];
        memcpy(buf, src, n);
        int edits = 1 + (int)((seed >> 8) % 3);
        for (int e = 0; e < edits; e++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % n;
            seed = seed * 1103515245u + 12345u;
            char c = pick[(seed >> 8) % (sizeof pick - 1)];
            seed = seed * 1103515245u + 12345u;
            switch ((seed >> 8) % 3) {
            case 0:
                buf[at] = c;
                break;
            case 1: /* insert */
                if (n + 1 < sizeof buf) {
                    memmove(buf + at + 1, buf + at, n - at);
                    buf[at] = c;
                    n++;
                }
                break;
            default: /* delete */
                memmove(buf + at, buf + at + 1, n - at - 1);
                n--;
            }
        }
        th_mcp_plain fc;
        th_buf_init(&fc.args);
        int rc = th_mcp_plain_scan(buf, n, &fc);
        th_buf_destroy(&fc.args);
        json_error_t je;
        json_t *msg = json_loadb(buf, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!msg)
            CU_ASSERT_EQUAL(rc, 0);
        json_decref(msg);
        if (rc == 1) {
            accepted++;
            same_as_tree(buf, n);
        }
    }
    CU_ASSERT(accepted > 100); /* the edits leave many lines readable */
}

/* ---- A session: the scanned request answered as the tree's --------------- */

typedef struct got {
    pthread_mutex_t mu;
    json_t *by_id; /* response by its id's text */
} got;

static void got_msg(got *g, json_t *msg)
{
    json_t *id = json_object_get(msg, "id");
    char key[80];
    if (json_is_string(id))
        snprintf(key, sizeof key, "%s", json_string_value(id));
    else if (json_is_integer(id))
        snprintf(key, sizeof key, "%lld", (long long)json_integer_value(id));
    else
        return; /* notifications */
    pthread_mutex_lock(&g->mu);
    json_object_set(g->by_id, key, msg);
    pthread_mutex_unlock(&g->mu);
}

static void got_send(void *ud, const json_t *msg, const json_t *req)
{
    (void)req;
    got_msg(ud, (json_t *)msg);
}

static void got_text(void *ud, const char *text, size_t len,
                     const json_t *req)
{
    (void)req;
    json_error_t je;
    json_t *msg = json_loadb(text, len, 0, &je);
    CU_ASSERT_PTR_NOT_NULL(msg);
    if (msg)
        got_msg(ud, msg);
    json_decref(msg);
}

/* The response to id (a copy), waiting up to 5 s; NULL if none came. */
static json_t *got_wait(got *g, const char *id)
{
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&g->mu);
        json_t *r = json_object_get(g->by_id, id);
        json_t *c = r ? json_deep_copy(r) : NULL;
        pthread_mutex_unlock(&g->mu);
        if (c)
            return c;
        usleep(10000);
    }
    return NULL;
}

/* Sends `params` as a plain request (id "f<k>": the scan reads it) and
 * with an empty _meta (id "s<k>": the tree reads it); both answers must
 * be the same but for the id and the call id. */
static void same_answer(th_mcp_session *m, got *g, int k, const char *params)
{
    char fast[600], slow[600], fid[16], sid[16];
    snprintf(fid, sizeof fid, "f%d", k);
    snprintf(sid, sizeof sid, "s%d", k);
    snprintf(fast, sizeof fast,
             "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"method\":\"tools/call\","
             "\"params\":{%s}}",
             fid, params);
    snprintf(slow, sizeof slow,
             "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"method\":\"tools/call\","
             "\"params\":{\"_meta\":{},%s}}",
             sid, params);
    th_mcp_plain fc;
    th_buf_init(&fc.args);
    CU_ASSERT_EQUAL(th_mcp_plain_scan(fast, strlen(fast), &fc), 1);
    CU_ASSERT_EQUAL(th_mcp_plain_scan(slow, strlen(slow), &fc), 0);
    th_buf_destroy(&fc.args);
    th_mcp_session_input(m, fast, strlen(fast));
    th_mcp_session_input(m, slow, strlen(slow));
    json_t *a = got_wait(g, fid), *b = got_wait(g, sid);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    json_object_del(a, "id");
    json_object_del(b, "id");
    json_object_del(json_object_get(json_object_get(a, "result"), "_meta"),
                    "toolhost/call_id");
    json_object_del(json_object_get(json_object_get(b, "result"), "_meta"),
                    "toolhost/call_id");
    bool same = json_equal(a, b);
    CU_ASSERT(same);
    if (!same) {
        char *x = json_dumps(a, JSON_COMPACT), *y = json_dumps(b, JSON_COMPACT);
        fprintf(stderr, "\n%s: scanned %s\n   tree %s\n", params, x, y);
        free(x);
        free(y);
    }
    json_decref(a);
    json_decref(b);
}

static void test_session_same_answers(void)
{
    th_host *h = th_test_echo_host_open();
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    th_error err;
    th_error_clear(&err);
    got g = {.by_id = json_object()};
    pthread_mutex_init(&g.mu, NULL);
    th_mcp_transport t = {.send = got_send, .send_text = got_text};
    th_principal who = {.uid = (uint32_t)getuid(), .gid = (uint32_t)getgid()};
    th_mcp_opts o = {.run_short = true};
    th_mcp_session *m = th_mcp_session_new(h, &who, &t, &g, &o, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    /* before initialize: the same refusal */
    same_answer(m, &g, 0, "\"name\":\"echo\",\"arguments\":{\"text\":\"a\"}");
    const char *init =
        "{\"jsonrpc\":\"2.0\",\"id\":\"i\",\"method\":\"initialize\","
        "\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}}";
    th_mcp_session_input(m, init, strlen(init));
    static const char *const cases[] = {
        "\"name\":\"echo\",\"arguments\":{\"text\":\"hello\"}",
        "\"name\":\"echo\",\"arguments\":{\"text\":\"a\\nb \\u00e9\"}",
        "\"name\":\"echo\"",                                  /* no args */
        "\"name\":\"echo\",\"arguments\":{\"text\":5}",        /* a type */
        "\"name\":\"echo\",\"arguments\":{\"text\":\"x\",\"zz\":[1]}",
        "\"name\":\"nope\",\"arguments\":{}",               /* unknown */
        "\"name\":\"get_running_tasks\",\"arguments\":{}",  /* hidden */
        "\"name\":\"echo_async\",\"arguments\":{\"text\":\"y\",\"steps\":1,"
        "\"delay_ms\":1}",
        "\"name\":\"echo_async\",\"arguments\":{\"text\":\"y\",\"steps\":-1}",
    };
    /* twice: the second round runs echo on the input thread (short) */
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            same_answer(m, &g, 1 + round * 100 + (int)i, cases[i]);
    th_mcp_session_free(m);
    json_decref(g.by_id);
    pthread_mutex_destroy(&g.mu);
    th_host_close(h);
}

void th_suite_mcp_fast(void)
{
    CU_pSuite s = CU_add_suite("mcp_fast", NULL, NULL);
    CU_add_test(s, "same_as_tree", test_same_as_tree);
    CU_add_test(s, "refuses_the_rest", test_refuses_the_rest);
    CU_add_test(s, "cut_lines", test_cut_lines);
    CU_add_test(s, "mutations_agree", test_mutations_agree);
    CU_add_test(s, "session_same_answers", test_session_same_answers);
}
