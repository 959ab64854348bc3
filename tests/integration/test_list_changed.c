/* test_list_changed.c - notifications/{tools,resources,prompts}/list_changed
 * over MCP Streamable HTTP, per session (issues 31 and 32), with the real
 * binary: two users see two toolsets; the fixture "lc" (lc_lists.h) is
 * swapped for a build with one tool, one resource or one prompt more and
 * the host reloaded (host.reload over RPC, which answers once every
 * session was told).  Only the session that sees "lc" hears of it, and
 * only of the list that changed; the same build again and a config change
 * in the other toolset tell it nothing; its resources/subscribe still
 * works across the reloads.  An RPC client (in both toolsets) hears
 * tools.changed, resources.changed and prompts.changed the same way.  The
 * lists' digests are computed once per view, not once per session (the
 * reload's log line counts them). */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/th_http.h"
#include "integration/test_rpc_harness.h"

#define ALPHA "lc-alpha-token-0123456789abcdef"
#define BETA "lc-beta-token-0123456789abcdef01"
#define ALPHA_ENV "TH_TEST_LC_ALPHA"
#define BETA_ENV "TH_TEST_LC_BETA"

/* The notifications an RPC client got, by method, in order. */
typedef struct notes {
    char text[512]; /* "tools.changed resources.changed " ... */
} notes;

static int note_rec(const char *method, size_t n, const msgpack_object *p,
                    void *ud)
{
    (void)p;
    notes *o = ud;
    size_t at = strlen(o->text);
    snprintf(o->text + at, sizeof o->text - at, "%.*s ", (int)n, method);
    return 0;
}

typedef struct lc_srv {
    rpc_srv rs;
    th_rpc_client *c; /* admin and listener: the RPC session (the test's
                         uid, in both toolsets) */
    notes heard;      /* what it heard by the last lc_reload */
    char *dir;  /* where lc.so is swapped */
    char so[512];
    unsigned port;
} lc_srv;

static void put_so(const char *variant, const char *dst)
{
    char rel[64];
    snprintf(rel, sizeof rel, "fixtures/lc_%s.so", variant);
    FILE *f = fopen(th_test_build_path(rel), "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    th_buf b = TH_BUF_INIT;
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        th_buf_append(&b, chunk, n);
    fclose(f);
    th_test_replace_file(dst, b.data, b.len, 0755);
    th_buf_destroy(&b);
}

/* The config: toolset ta (lc's tools) for alpha, tb (good_basic's
 * `tb_tools`) for beta; the test's own uid in both for the RPC client. */
static char *lc_config(const lc_srv *l, const char *tb_tools)
{
    char *text = NULL;
    int n = asprintf(
        &text,
        "host:\n"
        "  shutdown_grace: 1s\n"
        "  listen: [\"http://127.0.0.1:0/mcp\"]\n"
        "mcp:\n"
        "  tokens:\n"
        "    - {user: alpha, env: " ALPHA_ENV "}\n"
        "    - {user: beta, env: " BETA_ENV "}\n"
        "plugins:\n"
        "  - name: lc\n"
        "    path: %s\n"
        "  - name: gb\n"
        "    path: @BUILD@/fixtures/good_basic.so\n"
        "toolsets:\n"
        "  - name: ta\n"
        "    tools: [lc_echo, lc_touch]\n"
        "    allow_users: [alpha, \"%u\"]\n"
        "  - name: tb\n"
        "    tools: [%s]\n"
        "    allow_users: [beta, \"%u\"]\n",
        l->so, (unsigned)getuid(), tb_tools, (unsigned)getuid());
    return n < 0 ? NULL : text;
}

static int lc_start(lc_srv *l)
{
    memset(l, 0, sizeof *l);
    l->dir = th_test_tmpdir();
    snprintf(l->so, sizeof l->so, "%s/lc.so", l->dir);
    put_so("base", l->so);
    setenv(ALPHA_ENV, ALPHA, 1);
    setenv(BETA_ENV, BETA, 1);
    char *cfg = lc_config(l, "gb_greet");
    rpc_opts o = {.config = cfg};
    int rc = cfg ? rpc_srv_start(&l->rs, &o) : -1;
    free(cfg);
    if (rc != 0)
        return -1;
    l->port = th_test_log_port(l->rs.log, "(Streamable HTTP) on http");
    l->c = rpc_connect(&l->rs);
    if (!l->port || !l->c) {
        rpc_dump_log(&l->rs);
        return -1;
    }
    return 0;
}

static void lc_stop(lc_srv *l)
{
    if (l->c)
        th_rpc_client_close(l->c);
    /* a clean exit: no leak (valgrind, LeakSanitizer) nor error */
    CU_ASSERT_EQUAL(rpc_srv_stop(&l->rs, SIGTERM), 0);
    rpc_srv_free(&l->rs);
    th_test_rmtree(l->dir);
    free(l->dir);
    unsetenv(ALPHA_ENV);
    unsetenv(BETA_ENV);
}

/* host.reload on the RPC client; true when it succeeded.  Every session
 * was told of the change before the answer (reload_host.c tells them on
 * the reload's thread, then the answer goes); the RPC session's own
 * notifications, which its loop thread sends, are all out before the
 * answer to a host.ping after it.  l->heard: what the RPC client heard
 * meanwhile. */
static bool lc_reload(lc_srv *l)
{
    memset(&l->heard, 0, sizeof l->heard);
    th_rpc_reply r;
    memset(&r, 0, sizeof r);
    th_error e;
    bool ok = false;
    if (th_rpc_client_call(l->c, "host.reload", NULL, 0, note_rec, &l->heard,
                           &r, &e) == 0 &&
        !r.error) {
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        if (msgpack_unpack_next(&u, (const char *)r.result, r.result_len,
                                NULL) == MSGPACK_UNPACK_SUCCESS) {
            const msgpack_object *v = th_rpc_map_get(&u.data, "ok");
            ok = v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
        }
        msgpack_unpacked_destroy(&u);
    }
    th_rpc_reply_destroy(&r);
    memset(&r, 0, sizeof r);
    ok = ok && th_rpc_client_call(l->c, "host.ping", NULL, 0, note_rec,
                                  &l->heard, &r, &e) == 0 && !r.error;
    th_rpc_reply_destroy(&r);
    if (!ok)
        rpc_dump_log(&l->rs);
    return ok;
}

static bool heard(lc_srv *l, const char *want)
{
    bool ok = strcmp(l->heard.text, want) == 0;
    if (!ok)
        fprintf(stderr, "\nthe RPC client heard '%s', expected '%s'\n",
                l->heard.text, want);
    return ok;
}

/* ---- MCP over HTTP ----------------------------------------------------------- */

typedef struct sess {
    char sid[80];
    char hdrs[320];
    unsigned long long id; /* the host's session id (its log lines) */
    int stream;            /* the GET stream, or -1 */
    char *seen;            /* what the stream brought so far */
} sess;

static int post(lc_srv *l, const char *hdrs, const char *body, char **out)
{
    return th_test_http(l->port, "POST", "/mcp", hdrs, body, rpc_wait_ms(),
                        out);
}

/* Opens a session of `token` whose client is called `name`, and its GET
 * stream; 0 when all went well. */
static int sess_open(lc_srv *l, sess *s, const char *token, const char *name)
{
    memset(s, 0, sizeof *s);
    s->stream = -1;
    char h[160], body[512], *out = NULL;
    snprintf(h, sizeof h, "Authorization: Bearer %s\r\n", token);
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
             "\"params\":{\"protocolVersion\":\"2025-06-18\","
             "\"capabilities\":{},\"clientInfo\":{\"name\":\"%s\","
             "\"version\":\"1\"}}}",
             name);
    int st = post(l, h, body, &out);
    const char *p = strcasestr(out, "Mcp-Session-Id: ");
    if (st == 200 && p)
        sscanf(p + 16, "%79[0-9a-f]", s->sid);
    bool caps = strstr(out, "\"resources\":{\"subscribe\":true,"
                            "\"listChanged\":true}") &&
                strstr(out, "\"prompts\":{\"listChanged\":true}");
    free(out);
    if (!s->sid[0] || !caps)
        return -1;
    snprintf(s->hdrs, sizeof s->hdrs, "%sMcp-Session-Id: %s\r\n", h, s->sid);
    st = post(l, s->hdrs,
              "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
              &out);
    free(out);
    if (st != 202)
        return -1;
    char needle[128];
    snprintf(needle, sizeof needle, "initialize: client %s,", name);
    FILE *f = fopen(l->rs.log, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, needle) && (p = strstr(line, "mcp session=")))
            s->id = strtoull(p + 12, NULL, 10);
    if (f)
        fclose(f);
    s->stream = th_test_tcp_connect(l->port, 0);
    if (s->stream < 0 ||
        th_test_http_send(s->stream, "GET", "/mcp", s->hdrs, NULL) != 0)
        return -1;
    s->seen = strdup("");
    return s->id ? 0 : -1;
}

static void sess_close(sess *s)
{
    if (s->stream >= 0)
        close(s->stream);
    free(s->seen);
}

/* Reads s's stream until `needle` is in what it brought since the last
 * call that found its needle (at most the wait budget); true when it
 * came.  What came before the needle is kept in s->seen for the caller. */
static bool stream_until(sess *s, const char *needle)
{
    if (strstr(s->seen, needle))
        return true;
    char *more = NULL;
    th_test_http_read(s->stream, needle, rpc_wait_ms(), &more);
    size_t a = strlen(s->seen), b = strlen(more);
    char *all = malloc(a + b + 1);
    if (all) {
        memcpy(all, s->seen, a);
        memcpy(all + a, more, b + 1);
        free(s->seen);
        s->seen = all;
    }
    free(more);
    bool ok = strstr(s->seen, needle) != NULL;
    if (!ok)
        fprintf(stderr, "\nno '%s' on the stream; it brought:\n%.2000s\n",
                needle, s->seen);
    return ok;
}

/* Forgets what s's stream brought up to and including the last `upto`. */
static void stream_forget(sess *s, const char *upto)
{
    char *p = s->seen, *q;
    while ((q = strstr(p, upto)))
        p = q + strlen(upto);
    memmove(s->seen, p, strlen(p) + 1);
}

/* The host's log lines saying session s was told that `list` changed. */
static int told(lc_srv *l, const sess *s, const char *list)
{
    char needle[128];
    snprintf(needle, sizeof needle, "mcp session=%llu %s changed: "
             "list_changed", s->id, list);
    return rpc_log_count(&l->rs, needle);
}

static bool told_counts(lc_srv *l, const sess *s, int tools, int res,
                        int prompts)
{
    int t = told(l, s, "tools"), r = told(l, s, "resources"),
        p = told(l, s, "prompts");
    bool ok = t == tools && r == res && p == prompts;
    if (!ok)
        fprintf(stderr, "\nsession %llu told tools %d resources %d prompts "
                "%d; expected %d %d %d\n", s->id, t, r, p, tools, res,
                prompts);
    return ok;
}

/* ---- Tests ------------------------------------------------------------------ */

/* One list at a time changes for alpha; beta hears nothing of it, then
 * hears of its own change (a config edit) and alpha nothing. */
static void test_per_session(void)
{
    lc_srv l;
    CU_ASSERT_FATAL(lc_start(&l) == 0);
    sess a, b;
    CU_ASSERT_FATAL(sess_open(&l, &a, ALPHA, "alpha") == 0);
    CU_ASSERT_FATAL(sess_open(&l, &b, BETA, "beta") == 0);
    char *out = NULL;
    /* alpha subscribes to lc://one, which every build keeps */
    CU_ASSERT_EQUAL(post(&l, a.hdrs,
                         "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":"
                         "\"resources/subscribe\",\"params\":{\"uri\":"
                         "\"lc://one\"}}",
                         &out),
                    200);
    free(out);

    /* one tool more: tools only */
    put_so("tools", l.so);
    CU_ASSERT_FATAL(lc_reload(&l));
    CU_ASSERT(heard(&l, "tools.changed "));
    CU_ASSERT(told_counts(&l, &a, 1, 0, 0));
    CU_ASSERT(told_counts(&l, &b, 0, 0, 0));
    CU_ASSERT(stream_until(&a, "notifications/tools/list_changed"));
    CU_ASSERT(!strstr(a.seen, "resources/list_changed") &&
              !strstr(a.seen, "prompts/list_changed"));
    stream_forget(&a, "notifications/tools/list_changed");

    /* one resource more: resources only */
    put_so("res", l.so);
    CU_ASSERT_FATAL(lc_reload(&l));
    CU_ASSERT(heard(&l, "resources.changed "));
    CU_ASSERT(told_counts(&l, &a, 1, 1, 0));
    CU_ASSERT(told_counts(&l, &b, 0, 0, 0));
    CU_ASSERT(stream_until(&a, "notifications/resources/list_changed"));
    CU_ASSERT(!strstr(a.seen, "tools/list_changed") &&
              !strstr(a.seen, "prompts/list_changed"));
    stream_forget(&a, "notifications/resources/list_changed");

    /* one prompt more: prompts only */
    put_so("prompts", l.so);
    CU_ASSERT_FATAL(lc_reload(&l));
    CU_ASSERT(heard(&l, "prompts.changed "));
    CU_ASSERT(told_counts(&l, &a, 1, 1, 1));
    CU_ASSERT(told_counts(&l, &b, 0, 0, 0));
    CU_ASSERT(stream_until(&a, "notifications/prompts/list_changed"));
    CU_ASSERT(!strstr(a.seen, "tools/list_changed") &&
              !strstr(a.seen, "resources/list_changed"));
    stream_forget(&a, "notifications/prompts/list_changed");

    /* another build with the same lists: a new generation (every session
     * is asked), nothing to tell */
    put_so("again", l.so);
    int told_before = rpc_log_count(&l.rs, "reload: 3 sessions told");
    CU_ASSERT_FATAL(lc_reload(&l));
    CU_ASSERT(heard(&l, ""));
    CU_ASSERT_EQUAL(rpc_log_count(&l.rs, "reload: 3 sessions told"),
                    told_before + 1);
    CU_ASSERT(told_counts(&l, &a, 1, 1, 1));
    CU_ASSERT(told_counts(&l, &b, 0, 0, 0));

    /* the subscription lives on the new generations: lc_touch's update
     * reaches alpha */
    CU_ASSERT_EQUAL(post(&l, a.hdrs,
                         "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":"
                         "\"tools/call\",\"params\":{\"name\":\"lc_touch\","
                         "\"arguments\":{}}}",
                         &out),
                    200);
    CU_ASSERT(out && strstr(out, "touched"));
    free(out);
    CU_ASSERT(stream_until(&a, "notifications/resources/updated"));
    CU_ASSERT(strstr(a.seen, "\"uri\":\"lc://one\"") != NULL);
    CU_ASSERT(!strstr(a.seen, "list_changed")); /* nothing else came */
    stream_forget(&a, "notifications/resources/updated");

    /* beta's toolset gains a tool (a config edit): beta hears of it,
     * alpha does not */
    char *cfg = lc_config(&l, "gb_greet, gb_fail");
    CU_ASSERT_FATAL(cfg != NULL);
    rpc_opts o = {.config = cfg};
    char *old = l.rs.cfg;
    rpc_write_config(&l.rs, &o);
    free(old);
    free(cfg);
    CU_ASSERT_FATAL(lc_reload(&l));
    CU_ASSERT(heard(&l, "tools.changed ")); /* the test's uid is in tb */
    CU_ASSERT(told_counts(&l, &a, 1, 1, 1));
    CU_ASSERT(told_counts(&l, &b, 1, 0, 0));
    CU_ASSERT(stream_until(&b, "notifications/tools/list_changed"));
    /* what beta's stream brought: that one list_changed alone */
    CU_ASSERT(!strstr(b.seen, "resources/list_changed") &&
              !strstr(b.seen, "prompts/list_changed"));
    const char *first = strstr(b.seen, "list_changed");
    CU_ASSERT(first && !strstr(first + 1, "list_changed"));

    sess_close(&a);
    sess_close(&b);
    lc_stop(&l);
}

/* Eight sessions in two views: each list's digest is computed once per
 * view at a reload, the other sessions share it. */
static void test_shared_digests(void)
{
    lc_srv l;
    CU_ASSERT_FATAL(lc_start(&l) == 0);
    sess v[8];
    for (int i = 0; i < 8; i++) {
        char name[16];
        snprintf(name, sizeof name, "c%d", i);
        CU_ASSERT_FATAL(sess_open(&l, &v[i], i < 6 ? ALPHA : BETA, name) ==
                        0);
    }
    put_so("tools", l.so);
    CU_ASSERT_FATAL(lc_reload(&l));
    /* 8 MCP sessions and the RPC client's (whose digests its own loop
     * thread makes); 2 views x 3 lists computed, (5 + 1) x 3 shared.
     * The count of sessions told is 9, or 10 when the server has not
     * yet read the end of the harness's readiness probe (a connection
     * made and closed at once, an RPC session too: no digest here) */
    bool ok = rpc_log_has(&l.rs, "sessions told that the tools changed "
                                 "(list digests made here: 6 computed, 18 "
                                 "shared)") &&
              (rpc_log_has(&l.rs, "reload: 9 sessions told") ||
               rpc_log_has(&l.rs, "reload: 10 sessions told"));
    CU_ASSERT(ok);
    if (!ok)
        rpc_dump_log(&l.rs);
    for (int i = 0; i < 8; i++) {
        CU_ASSERT(told_counts(&l, &v[i], i < 6, 0, 0));
        if (i < 6)
            CU_ASSERT(stream_until(&v[i], "notifications/tools/list_changed"));
        sess_close(&v[i]);
    }
    lc_stop(&l);
}

void th_suite_list_changed(void)
{
    CU_pSuite s = CU_add_suite("list_changed", NULL, NULL);
    CU_add_test(s, "per_session", test_per_session);
    CU_add_test(s, "shared_digests", test_shared_digests);
}
