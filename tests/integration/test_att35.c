/* test_att35.c - attacks on what landed after 0585f04: the openapi
 * plugin's form request bodies and binary answers, and the host's cache
 * of whether a tool's output schema is an object.  The pet store
 * (tests/common/petstore.c, /v1/att/...) serves the operations of
 * tests/openapi/att35.yaml and keeps what it was sent.
 *
 * form_names: field names and values from the document and from the
 *   caller's extra fields (&, =, %, CR LF, non-ASCII, a 10,000-byte name,
 *   nested objects, arrays of arrays, 2,000 fields) stay inside their
 *   pair: percent-encoded, in the call's order.
 * form_nul: a field name or value with a NUL byte (msgpack carries it)
 *   is not cut at the NUL; a header or cookie value with one fails.
 * form_media: JSON wins over a form in one requestBody; a form media type
 *   in odd case with a parameter is a form; an optional form left out
 *   sends no Content-Type; a GET, DELETE or HEAD with a body keeps its
 *   method.
 * form_not_object: a form whose schema allows a string (oneOf) given a
 *   string fails the call naming the problem, not an empty form sent;
 *   a null form (nullable) sends no body.
 * form_redirects: 307 and 308 re-send the form (and the JSON body) with
 *   its Content-Type; 303, and 302 after a POST, continue as a GET with
 *   no body and no Content-Type.
 * form_bad_docs: a form schema that is a $ref to a string, a $ref cycle
 *   or a $ref to nothing stops the load naming the problem.
 * bin_types: Content-Types with a control byte, 300 bytes, `image/`
 *   alone, none at all, odd case with parameters; `image/svg+xml` text.
 * bin_budgets: a body of exactly max_response is a block, one byte more
 *   fails; a block larger than the toolset's output limit fails the call
 *   with a clear message and a log line, and the host serves the next.
 * bin_uri: an API key in the query is in no URI, result or log; after a
 *   redirect the URI is the final URL, without user info; a structured
 *   operation answered with a PNG fails as "not JSON".
 * bin_error_body: a 500 or 503 of bytes: the message is valid UTF-8.
 * base_url_userinfo: a base URL with user info stops the load, the URL
 *   not shown.
 * bin_iso: the same answers through an isolated worker (BLOCK frames).
 * bin_mcp: over MCP stdio the answers are image and resource contents,
 *   an error answer of bytes a tool error, a \u0000 of a form sent whole.
 * cache_mcp: many MCP sessions calling a structured tool at once all get
 *   structuredContent; reloads that turn its output schema from an
 *   array to an object and back are not served from another tool's
 *   cache. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/petstore.h"
#include "common/th_http.h"
#include "common/th_test.h"
#include "test_rpc_harness.h"

#define KEY "k-123" /* the pet store's API key (petstore.h) */

typedef struct fx {
    petsrv srv;
    rpc_srv s;
    th_rpc_client *c;
} fx;

/* The host config: the API "att" (att35.yaml, the key in the query,
 * allow_private, max_redirects 2) with `api_extra` lines, the plugin
 * entry with `plugin_extra` lines, the toolset with `ts_extra`, and
 * `host_extra` under host:. */
static void fx_config(char *cfg, size_t size, const char *plugin_extra,
                      const char *api_extra, const char *ts_extra,
                      const char *host_extra, const char *top_extra,
                      const char *spec)
{
    snprintf(cfg, size,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "%s"
             "%s"
             "plugins:\n"
             "  - name: openapi\n"
             "    path: %s/plugins/openapi.so\n"
             "%s"
             "    config:\n"
             "      apis:\n"
             "        - name: att\n"
             "          spec: %s\n"
             "          base_url: ${ATT35_URL}\n"
             "          allow_private: true\n"
             "          max_redirects: 2\n"
             "          auth: {api_key_env: ATT35_KEY, api_key_query: api_key}\n"
             "%s"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n"
             "    permissions:\n"
             "      rules:\n"
             "        - {flag: open_world, action: allow}\n"
             "%s",
             host_extra ? host_extra : "", top_extra ? top_extra : "",
             TH_BUILD_DIR, plugin_extra ? plugin_extra : "",
             spec ? spec : th_test_source_path("tests/openapi/att35.yaml"),
             api_extra ? api_extra : "", ts_extra ? ts_extra : "");
}

static int srv_up(fx *f)
{
    memset(f, 0, sizeof *f);
    if (petsrv_start(&f->srv, 0) != 0)
        return -1;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", f->srv.port);
    setenv("ATT35_URL", url, 1);
    setenv("ATT35_KEY", KEY, 1);
    return 0;
}

static int fx_start(fx *f, const char *plugin_extra, const char *api_extra,
                    const char *ts_extra)
{
    if (srv_up(f) != 0)
        return -1;
    char cfg[4096];
    fx_config(cfg, sizeof cfg, plugin_extra, api_extra, ts_extra, NULL, NULL,
              NULL);
    rpc_opts o = {.config = cfg, .max_frame = "4MiB"};
    if (rpc_srv_start(&f->s, &o) != 0)
        return -1;
    f->c = rpc_connect(&f->s);
    return f->c ? 0 : -1;
}

static void fx_stop(fx *f)
{
    if (f->c)
        th_rpc_client_close(f->c);
    if (f->s.pid > 0) {
        CU_ASSERT_EQUAL(rpc_srv_stop(&f->s, SIGTERM), 0);
        rpc_srv_free(&f->s);
    }
    petsrv_stop(&f->srv);
}

/* tools.call of `tool` with the JSON arguments `args` (any length). */
static const msgpack_object *call(fx *f, const char *tool, const char *args,
                                  rpc_res *r)
{
    size_t n = strlen(tool) + strlen(args) + 16;
    char *p = malloc(n);
    snprintf(p, n, "[\"%s\", %s]", tool, args);
    int rc = rpc_call(f->c, "tools.call", p, r);
    free(p);
    return rc ? NULL : r->res;
}

/* The same with the params packed by the caller (msgpack). */
static const msgpack_object *call_packed(fx *f, const th_buf *params,
                                         rpc_res *r)
{
    memset(r, 0, sizeof *r);
    msgpack_unpacked_init(&r->ue);
    msgpack_unpacked_init(&r->ur);
    th_error e;
    if (th_rpc_client_call(f->c, "tools.call", params->data, params->len,
                           NULL, NULL, &r->rep, &e) != 0)
        return NULL;
    size_t off = 0;
    if (r->rep.result &&
        msgpack_unpack_next(&r->ur, (const char *)r->rep.result,
                            r->rep.result_len, &off) ==
            MSGPACK_UNPACK_SUCCESS &&
        r->ur.data.type != MSGPACK_OBJECT_NIL)
        r->res = &r->ur.data;
    return r->res;
}

static bool stream_has(const msgpack_object *res, const char *stream,
                       const char *needle)
{
    const char *p;
    size_t n;
    if (!res || !th_rpc_obj_str(th_rpc_map_get(res, stream), &p, &n))
        return false;
    char *s = strndup(p, n);
    bool has = s && strstr(s, needle);
    if (!has)
        fprintf(stderr, "\n%s is [%.300s], wanted [%s]\n", stream, s, needle);
    free(s);
    return has;
}

/* A result's stdout, stderr and meta hold `needle` nowhere. */
static bool result_lacks(const msgpack_object *res, const char *needle)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_object(&pk, *res);
    bool lacks = !memmem(sb.data, sb.size, needle, strlen(needle));
    msgpack_sbuffer_destroy(&sb);
    return lacks;
}

static const msgpack_object *block_field(const msgpack_object *res,
                                         uint32_t i, const char *key)
{
    const msgpack_object *c = th_rpc_map_get(
        th_rpc_map_get(th_rpc_map_get(res, "meta"), "toolhost"), "content");
    if (!c || c->type != MSGPACK_OBJECT_ARRAY || i >= c->via.array.size)
        return NULL;
    return th_rpc_map_get(&c->via.array.ptr[i], key);
}

static size_t n_blocks(const msgpack_object *res)
{
    const msgpack_object *c = th_rpc_map_get(
        th_rpc_map_get(th_rpc_map_get(res, "meta"), "toolhost"), "content");
    return c && c->type == MSGPACK_OBJECT_ARRAY ? c->via.array.size : 0;
}

static bool block_is(const msgpack_object *res, uint32_t i, const char *key,
                     const char *want)
{
    const msgpack_object *v = block_field(res, i, key);
    const char *p = NULL;
    size_t n = 0;
    bool ok = v && th_rpc_obj_str(v, &p, &n) && n == strlen(want) &&
              !memcmp(p, want, n);
    if (!ok)
        fprintf(stderr, "\nblock %u: %s is [%.*s], wanted [%s]\n", i, key,
                (int)n, p ? p : "", want);
    return ok;
}

static size_t block_len(const msgpack_object *res, uint32_t i)
{
    const msgpack_object *v = block_field(res, i, "data");
    return v && v->type == MSGPACK_OBJECT_BIN ? v->via.bin.size : 0;
}

static bool meta_has(const msgpack_object *res, const char *key)
{
    return th_rpc_map_get(th_rpc_map_get(res, "meta"), key) != NULL;
}

static bool meta_str_is(const msgpack_object *res, const char *key,
                        const char *want)
{
    const char *p;
    size_t n;
    return th_rpc_obj_str(th_rpc_map_get(th_rpc_map_get(res, "meta"), key),
                          &p, &n) &&
           n == strlen(want) && !memcmp(p, want, n);
}

/* What the pet store's echo got last: method, Content-Type ("-": none),
 * body; each compared when not NULL. */
static bool echo_was(petsrv *p, const char *method, const char *type,
                     const char *body)
{
    pthread_mutex_lock(&p->mu);
    bool ok = (!method || !strcmp(p->att_method, method)) &&
              (!type || !strcmp(p->att_type, type)) &&
              (!body || (p->att_body && p->att_body_len == strlen(body) &&
                         !memcmp(p->att_body, body, p->att_body_len)));
    if (!ok)
        fprintf(stderr, "\nthe echo got %s [%s] [%.400s]; wanted %s [%s] "
                        "[%.400s]\n",
                p->att_method, p->att_type, p->att_body ? p->att_body : "",
                method ? method : "*", type ? type : "*", body ? body : "*");
    pthread_mutex_unlock(&p->mu);
    return ok;
}

static int echo_hits(petsrv *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->att_hits;
    pthread_mutex_unlock(&p->mu);
    return n;
}

#define FORM "application/x-www-form-urlencoded"

/* The host still answers a call. */
static bool alive(fx *f)
{
    rpc_res r;
    const msgpack_object *res = call(f, "structEcho", "{}", &r);
    bool ok = res && rpc_ok(res);
    rpc_res_free(&r);
    return ok;
}

/* ---- form bodies -------------------------------------------------------- */

static void test_form_names(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, NULL, NULL, NULL) == 0);
    rpc_res r;
    const msgpack_object *res = call(
        &f, "formEcho",
        "{\"body\": {\"name\": \"x y\", \"a&b=c%\": \"1&admin=true\", "
        "\"line\\r\\nX-Injected: 1\": \"v\\r\\nw\", \"caf\\u00e9\": "
        "\"\\u00e9\", \"body\": \"inner\", \"nested\": {\"k\": [1, 2]}, "
        "\"grid\": [[1, 2], [3]], \"extra&admin=1\": \"=\"}}",
        &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(echo_was(&f.srv, "POST", FORM,
                       "name=x%20y&a%26b%3Dc%25=1%26admin%3Dtrue"
                       "&line%0D%0AX-Injected%3A%201=v%0D%0Aw"
                       "&caf%C3%A9=%C3%A9&body=inner"
                       "&nested=%7B%22k%22%3A%5B1%2C2%5D%7D"
                       "&grid=%5B1%2C2%5D&grid=%5B3%5D&extra%26admin%3D1=%3D"));
    rpc_res_free(&r);

    /* a 10,000-byte name and 2,000 fields */
    size_t big = 10000, nf = 2000;
    char *args = malloc(big + nf * 32 + 64);
    char *want = malloc(big + nf * 32 + 64);
    char *a = args, *w = want;
    a += sprintf(a, "{\"body\": {\"");
    memset(a, 'n', big);
    memset(w, 'n', big);
    a += big;
    w += big;
    a += sprintf(a, "\": \"v\"");
    w += sprintf(w, "=v");
    for (size_t i = 0; i < nf; i++) {
        a += sprintf(a, ", \"f%zu\": %zu", i, i);
        w += sprintf(w, "&f%zu=%zu", i, i);
    }
    sprintf(a, "}}");
    res = call(&f, "formEcho", args, &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(echo_was(&f.srv, "POST", FORM, want));
    rpc_res_free(&r);
    free(args);
    free(want);
    fx_stop(&f);
}

/* ["formEcho", {"body": {"a\0b": "x\0y"}}] with the NULs msgpack keeps */
static void test_form_nul(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, NULL, NULL, NULL) == 0);
    th_buf p = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &p, th_buf_msgpack_write);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_str_with_body(&pk, "formEcho", 8);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "body", 4);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "name", 4);
    msgpack_pack_str_with_body(&pk, "x\0y", 3);
    msgpack_pack_str_with_body(&pk, "a\0b", 3);
    msgpack_pack_str_with_body(&pk, "v", 1);
    rpc_res r;
    const msgpack_object *res = call_packed(&f, &p, &r);
    /* sent whole: never "name=x" nor "a=v" */
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(echo_was(&f.srv, "POST", FORM, "name=x%00y&a%00b=v"));
    rpc_res_free(&r);
    /* a header or cookie value with a NUL is refused, not cut */
    static const char *const where[] = {"X-Att", "att"};
    for (int i = 0; i < 2; i++) {
        th_buf_reset(&p);
        msgpack_packer_init(&pk, &p, th_buf_msgpack_write);
        msgpack_pack_array(&pk, 2);
        msgpack_pack_str_with_body(&pk, "getBin", 6);
        msgpack_pack_map(&pk, 1);
        msgpack_pack_str_with_body(&pk, where[i], strlen(where[i]));
        msgpack_pack_str_with_body(&pk, "ok\0evil", 7);
        res = call_packed(&f, &p, &r);
        CU_ASSERT(res && !rpc_ok(res) &&
                  stream_has(res, "stderr", i ? "cookie parameter 'att'"
                                              : "header parameter 'X-Att' "
                                                "must be one line (no CR, "
                                                "LF or NUL)"));
        rpc_res_free(&r);
    }
    th_buf_destroy(&p);
    CU_ASSERT(alive(&f));
    fx_stop(&f);
}

static void test_form_media(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, NULL, NULL, NULL) == 0);
    rpc_res r;
    const msgpack_object *res =
        call(&f, "bothEcho", "{\"body\": {\"a\": \"1&b=2\"}}", &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(echo_was(&f.srv, "PUT", "application/json",
                       "{\"a\":\"1&b=2\"}"));
    rpc_res_free(&r);
    res = call(&f, "oddTypeEcho", "{\"body\": {\"a\": \"1\"}}", &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(echo_was(&f.srv, "PATCH", FORM, "a=1"));
    rpc_res_free(&r);
    res = call(&f, "optFormEcho", "{}", &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(echo_was(&f.srv, "POST", "-", ""));
    rpc_res_free(&r);
    res = call(&f, "optFormEcho", "{\"body\": {\"k\": \"v\", \"n\": null}}",
               &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(echo_was(&f.srv, "POST", FORM, "k=v"));
    rpc_res_free(&r);
    /* a GET (and a DELETE) with a body stays a GET: libcurl turns a
     * request with POSTFIELDS into a POST unless told the method */
    res = call(&f, "getWithForm", "{\"body\": {\"q\": \"1\"}}", &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(echo_was(&f.srv, "GET", FORM, "q=1"));
    rpc_res_free(&r);
    res = call(&f, "deleteWithJson", "{\"body\": {\"q\": \"1\"}}", &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(echo_was(&f.srv, "DELETE", "application/json", "{\"q\":\"1\"}"));
    rpc_res_free(&r);
    res = call(&f, "headWithJson", "{\"body\": {\"q\": \"1\"}}", &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(echo_was(&f.srv, "HEAD", NULL, NULL));
    rpc_res_free(&r);
    res = call(&f, "getWithForm", "{}", &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(echo_was(&f.srv, "GET", "-", ""));
    rpc_res_free(&r);
    /* the host's own schema check: a field the document does not name
     * is fine (no additionalProperties: false), one of the wrong type not */
    res = call(&f, "formEcho", "{\"body\": {\"name\": 5}}", &r);
    CU_ASSERT(res && !rpc_ok(res) &&
              rpc_tool_error_is(res, "invalid_arguments"));
    rpc_res_free(&r);
    fx_stop(&f);
}

static void test_form_not_object(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, NULL, NULL, NULL) == 0);
    rpc_res r;
    int before = echo_hits(&f.srv);
    const msgpack_object *res =
        call(&f, "anyFormEcho", "{\"body\": \"name=x&admin=true\"}", &r);
    CU_ASSERT(res && !rpc_ok(res));
    CU_ASSERT(stream_has(res, "stderr", "form"));
    CU_ASSERT(stream_has(res, "stderr", "object"));
    CU_ASSERT_EQUAL(echo_hits(&f.srv), before);
    rpc_res_free(&r);
    res = call(&f, "anyFormEcho", "{\"body\": {\"name\": \"x\"}}", &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(echo_was(&f.srv, "POST", FORM, "name=x"));
    rpc_res_free(&r);
    /* a null form (nullable: true) is no form: no body, no type */
    res = call(&f, "nullFormEcho", "{\"body\": null}", &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(echo_was(&f.srv, "POST", "-", ""));
    rpc_res_free(&r);
    fx_stop(&f);
}

static void test_form_redirects(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, NULL, NULL, NULL) == 0);
    static const struct {
        const char *tool, *code, *method, *type, *body;
    } cases[] = {
        {"formRedirect", "307", "POST", FORM, "name=a%26b"},
        {"formRedirect", "308", "POST", FORM, "name=a%26b"},
        {"formRedirect", "303", "GET", "-", ""},
        {"formRedirect", "302", "GET", "-", ""},
        {"formRedirect", "301", "GET", "-", ""},
        {"jsonRedirect", "307", "PUT", "application/json", "{\"name\":\"a&b\"}"},
        {"jsonRedirect", "308", "PUT", "application/json", "{\"name\":\"a&b\"}"},
        {"jsonRedirect", "303", "GET", "-", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[128];
        snprintf(args, sizeof args,
                 "{\"code\": \"%s\", \"body\": {\"name\": \"a&b\"}}",
                 cases[i].code);
        int before = echo_hits(&f.srv);
        rpc_res r;
        const msgpack_object *res = call(&f, cases[i].tool, args, &r);
        CU_ASSERT(res && rpc_ok(res));
        CU_ASSERT_EQUAL(echo_hits(&f.srv), before + 1);
        if (!echo_was(&f.srv, cases[i].method, cases[i].type, cases[i].body)) {
            fprintf(stderr, "case %s %s\n", cases[i].tool, cases[i].code);
            CU_FAIL("the redirected request");
        }
        rpc_res_free(&r);
    }
    fx_stop(&f);
}

static void test_form_bad_docs(void)
{
    char *dir = th_test_tmpdir();
    static const struct {
        const char *schemas, *body_schema, *want;
    } cases[] = {
        {"    S: {type: string}\n", "{$ref: '#/components/schemas/S'}",
         "the form request body's schema is not an object"},
        {"    A: {$ref: '#/components/schemas/B'}\n"
         "    B: {$ref: '#/components/schemas/A'}\n",
         "{$ref: '#/components/schemas/A'}", "$ref cycle"},
        {"    S: {type: object}\n", "{$ref: '#/components/schemas/Nope'}",
         "#/components/schemas/Nope"},
        {"    S: {type: object}\n", "{type: [object, string]}",
         "the form request body's schema is not an object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char doc[2048];
        snprintf(doc, sizeof doc,
                 "openapi: 3.1.0\n"
                 "servers: [{url: 'http://x.example'}]\n"
                 "paths:\n"
                 "  /f:\n"
                 "    post:\n"
                 "      operationId: f\n"
                 "      requestBody:\n"
                 "        required: true\n"
                 "        content:\n"
                 "          application/x-www-form-urlencoded:\n"
                 "            schema: %s\n"
                 "      responses: {'200': {description: ok}}\n"
                 "components:\n"
                 "  schemas:\n%s",
                 cases[i].body_schema, cases[i].schemas);
        char *spec = th_test_write_file(dir, "f.yaml", doc, (size_t)-1);
        char text[1024];
        snprintf(text, sizeof text,
                 "plugins:\n"
                 "  - name: openapi\n"
                 "    path: %s\n"
                 "    config:\n"
                 "      apis:\n"
                 "        - name: bad\n"
                 "          spec: %s\n",
                 th_test_build_path("plugins/openapi.so"), spec);
        char *cfg = th_test_write_file(dir, "cfg.yaml", text, (size_t)-1);
        th_test_run r;
        th_test_toolhost(&r, "config", "check", cfg, NULL);
        CU_ASSERT_NOT_EQUAL(r.status, 0);
        bool has = strstr(r.err, cases[i].want) || strstr(r.out, cases[i].want);
        if (!has)
            fprintf(stderr, "\ncase %zu: want %s\nout: %s\nerr: %s\n", i,
                    cases[i].want, r.out, r.err);
        CU_ASSERT(has);
        th_test_run_free(&r);
        free(cfg);
        free(spec);
    }
    th_test_rmtree(dir);
    free(dir);
}

/* ---- binary answers ------------------------------------------------------ */

/* getBin (or another operation of its parameters) with the
 * Content-Type `ct` (JSON string text; NULL: none), n bytes, text (the
 * 'a's) or not; getBinStructured has no `text`. */
static const msgpack_object *get_bin(fx *f, const char *tool, const char *ct,
                                     int n, bool text, rpc_res *r)
{
    char args[1024];
    bool has_text = strcmp(tool, "getBinStructured") != 0;
    int w = snprintf(args, sizeof args, "{\"n\": %d%s", n,
                     !has_text ? "" : text ? ", \"text\": true"
                                           : ", \"text\": false");
    if (ct)
        w += snprintf(args + w, sizeof args - (size_t)w, ", \"ct\": \"%s\"",
                      ct);
    snprintf(args + w, sizeof args - (size_t)w, "}");
    return call(f, tool, args, r);
}

static void test_bin_types(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, NULL, NULL, NULL) == 0);
    rpc_res r;
    /* a control byte inside the type: no media type, other bytes */
    const msgpack_object *res = get_bin(&f, "getBin", "image/p\\u0001ng", 8,
                                        false, &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(block_is(res, 0, "type", "resource"));
    CU_ASSERT(block_is(res, 0, "mime_type", "application/octet-stream"));
    CU_ASSERT_FALSE(meta_has(res, "content_type"));
    rpc_res_free(&r);
    res = get_bin(&f, "getBin", "image/p\\u007fng", 8, false, &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(block_is(res, 0, "mime_type", "application/octet-stream"));
    rpc_res_free(&r);
    /* 300 bytes of type */
    char longt[320] = "image/";
    memset(longt + 6, 'x', 294);
    longt[300] = '\0';
    res = get_bin(&f, "getBin", longt, 8, false, &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(block_is(res, 0, "type", "resource"));
    CU_ASSERT(block_is(res, 0, "mime_type", "application/octet-stream"));
    CU_ASSERT_FALSE(meta_has(res, "content_type"));
    rpc_res_free(&r);
    /* "image/" and "image" alone are no media types */
    static const char *const odd[] = {"image/", "image", "/png", "a/b/c"};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        res = get_bin(&f, "getBin", odd[i], 8, false, &r);
        CU_ASSERT(res && rpc_ok(res));
        CU_ASSERT(block_is(res, 0, "type", "resource"));
        if (!block_is(res, 0, "mime_type", "application/octet-stream"))
            fprintf(stderr, "type %s\n", odd[i]);
        rpc_res_free(&r);
    }
    /* none at all */
    res = get_bin(&f, "getBin", NULL, 8, false, &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(block_is(res, 0, "type", "resource"));
    CU_ASSERT(block_is(res, 0, "mime_type", "application/octet-stream"));
    CU_ASSERT_EQUAL(block_len(res, 0), 8);
    rpc_res_free(&r);
    /* none, and UTF-8 text: stdout */
    res = get_bin(&f, "getBin", NULL, 8, true, &r);
    CU_ASSERT(res && rpc_ok(res) && stream_has(res, "stdout", "aaaaaaaa"));
    CU_ASSERT_EQUAL(n_blocks(res), 0);
    rpc_res_free(&r);
    /* odd case and parameters */
    res = get_bin(&f, "getBin", " IMAGE/PNG ; charset=x", 8, false, &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(block_is(res, 0, "type", "image"));
    CU_ASSERT(block_is(res, 0, "mime_type", "image/png"));
    CU_ASSERT(meta_str_is(res, "content_type", "image/png"));
    rpc_res_free(&r);
    /* an SVG is an XML text: stdout, no image block */
    res = get_bin(&f, "getBin", "image/svg+xml", 8, true, &r);
    CU_ASSERT(res && rpc_ok(res) && stream_has(res, "stdout", "aaaaaaaa"));
    CU_ASSERT_EQUAL(n_blocks(res), 0);
    CU_ASSERT(meta_str_is(res, "content_type", "image/svg+xml"));
    rpc_res_free(&r);
    /* an SVG that is not UTF-8 is bytes of its type */
    res = get_bin(&f, "getBin", "image/svg+xml", 8, false, &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(block_is(res, 0, "type", "resource"));
    CU_ASSERT(block_is(res, 0, "mime_type", "image/svg+xml"));
    rpc_res_free(&r);
    CU_ASSERT(alive(&f));
    fx_stop(&f);
}

static void test_bin_budgets(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, NULL, "          max_response: 4KiB\n",
                             "    limits: {text: 4000}\n") == 0);
    rpc_res r;
    const msgpack_object *res =
        get_bin(&f, "getBin", "application/x-att", 4096, false, &r);
    /* exactly max_response is an answer; the toolset's 4,000 bytes of
     * text do not hold it */
    CU_ASSERT(res && !rpc_ok(res) &&
              stream_has(res, "stderr", "cannot be carried as a content "
                                        "block"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_wait(&f.s, "the content passes 4000 bytes",
                           rpc_wait_ms()));
    res = get_bin(&f, "getBin", "application/x-att", 4097, false, &r);
    CU_ASSERT(res && !rpc_ok(res) &&
              stream_has(res, "stderr", "larger than max_response (4096"));
    rpc_res_free(&r);
    /* base64 makes 2,000 bytes 2,668: under 4,000; 3,001 bytes not */
    res = get_bin(&f, "getBin", "image/png", 2000, false, &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(block_is(res, 0, "type", "image"));
    CU_ASSERT_EQUAL(block_len(res, 0), 2000);
    rpc_res_free(&r);
    res = get_bin(&f, "getBin", "image/png", 3001, false, &r);
    CU_ASSERT(res && !rpc_ok(res) &&
              stream_has(res, "stderr", "(image/png, 3001 bytes) is not text "
                                        "and cannot be carried"));
    CU_ASSERT_EQUAL(n_blocks(res), 0);
    rpc_res_free(&r);
    res = get_bin(&f, "getBin", "image/png", 16, false, &r);
    CU_ASSERT(res && rpc_ok(res) && block_len(res, 0) == 16);
    rpc_res_free(&r);
    fx_stop(&f);
}

static void test_bin_uri(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, NULL, NULL, NULL) == 0);
    rpc_res r;
    char uri[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d/v1/att/bin", f.srv.port);
    const msgpack_object *res =
        get_bin(&f, "getBin", "application/x-att", 8, false, &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(block_is(res, 0, "uri", uri));
    CU_ASSERT(res && result_lacks(res, KEY));
    CU_ASSERT(res && result_lacks(res, "api_key"));
    rpc_res_free(&r);
    /* after a redirect, the URL that answered (its query left out) */
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d/v1/att/bin/moved",
             f.srv.port);
    res = call(&f, "getBinRedirected", "{}", &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(block_is(res, 0, "uri", uri));
    CU_ASSERT(block_is(res, 0, "mime_type", "application/x-att"));
    CU_ASSERT(res && result_lacks(res, KEY));
    rpc_res_free(&r);
    /* a Location with user info: the URI has none */
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d/v1/att/bin/u", f.srv.port);
    res = call(&f, "getBinUserinfo", "{}", &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(block_is(res, 0, "uri", uri));
    CU_ASSERT(res && result_lacks(res, "sesame"));
    CU_ASSERT(res && result_lacks(res, KEY));
    rpc_res_free(&r);
    /* a structured operation answered with a PNG: not JSON, no block */
    res = get_bin(&f, "getBinStructured", "image/png", 8, false, &r);
    CU_ASSERT(res && !rpc_ok(res) &&
              stream_has(res, "stderr", "the answer is not JSON"));
    CU_ASSERT_EQUAL(n_blocks(res), 0);
    rpc_res_free(&r);
    /* a failed call does not show the key either */
    res = get_bin(&f, "getBinStructured", "image/png", 8, false, &r);
    CU_ASSERT(res && result_lacks(res, KEY));
    rpc_res_free(&r);
    CU_ASSERT_FALSE(rpc_log_has(&f.s, KEY));
    fx_stop(&f);
}

/* A string of the result that is valid UTF-8 (jansson takes it). */
static bool utf8_str(const msgpack_object *res, const char *key)
{
    const char *p;
    size_t n;
    if (!res || !th_rpc_obj_str(th_rpc_map_get(res, key), &p, &n))
        return false;
    json_t *j = json_stringn(p, n);
    json_decref(j);
    return j != NULL;
}

/* An error answer of bytes that are not UTF-8: the call's message
 * quotes it as valid UTF-8 (RPC carries it as a string; MCP in JSON). */
static void test_bin_error_body(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, NULL, NULL, NULL) == 0);
    rpc_res r;
    const msgpack_object *res =
        call(&f, "getBin", "{\"status\": 500, \"n\": 600, \"ct\": "
                           "\"image/png\"}", &r);
    CU_ASSERT(res && !rpc_ok(res) && stream_has(res, "stderr", "HTTP 500"));
    CU_ASSERT(utf8_str(res, "stderr"));
    const msgpack_object *em =
        th_rpc_map_get(th_rpc_map_get(res, "error"), "message");
    CU_ASSERT(!em || utf8_str(th_rpc_map_get(res, "error"), "message"));
    CU_ASSERT_EQUAL(n_blocks(res), 0);
    rpc_res_free(&r);
    /* 503: the backend's code, error.message */
    res = call(&f, "getBin", "{\"status\": 503, \"n\": 600}", &r);
    CU_ASSERT(res && !rpc_ok(res) && rpc_tool_error_is(res, "unavailable"));
    CU_ASSERT(utf8_str(th_rpc_map_get(res, "error"), "message"));
    rpc_res_free(&r);
    /* text stays as it is */
    res = call(&f, "getBin", "{\"status\": 404, \"n\": 600, \"text\": "
                             "true}", &r);
    CU_ASSERT(res && !rpc_ok(res) && stream_has(res, "stderr", "HTTP 404"));
    CU_ASSERT(utf8_str(res, "stderr"));
    rpc_res_free(&r);
    CU_ASSERT(alive(&f));
    fx_stop(&f);
}

/* A base URL (config or document) with user info is refused at load:
 * it would be logged, sent, and shown in resource URIs. */
static void test_base_url_userinfo(void)
{
    char *dir = th_test_tmpdir();
    static const char *const urls[] = {"http://ann:pw@127.0.0.1:9/v1",
                                       "http://ann@127.0.0.1:9/v1"};
    for (size_t i = 0; i < 2; i++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "plugins:\n"
                 "  - name: openapi\n"
                 "    path: %s\n"
                 "    config:\n"
                 "      apis:\n"
                 "        - name: bad\n"
                 "          spec: %s\n"
                 "          base_url: %s\n",
                 th_test_build_path("plugins/openapi.so"),
                 th_test_source_path("tests/openapi/att35.yaml"), urls[i]);
        char *cfg = th_test_write_file(dir, "cfg.yaml", text, (size_t)-1);
        th_test_run r;
        th_test_toolhost(&r, "config", "check", cfg, NULL);
        CU_ASSERT_NOT_EQUAL(r.status, 0);
        bool has = strstr(r.err, "has user info") || strstr(r.out, "has user info");
        if (!has)
            fprintf(stderr, "\nout: %s\nerr: %s\n", r.out, r.err);
        CU_ASSERT(has);
        CU_ASSERT(!strstr(r.err, ":pw@") && !strstr(r.out, ":pw@"));
        th_test_run_free(&r);
        free(cfg);
    }
    th_test_rmtree(dir);
    free(dir);
}

static const char *user_line(void)
{
    return geteuid() == 0 ? "    user: auto\n" : "";
}

/* The same answers through an isolated worker: BLOCK frames. */
static void test_bin_iso(void)
{
    char plug[128];
    snprintf(plug, sizeof plug,
             "    isolation: process\n    env: [ATT35_KEY]\n%s", user_line());
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, plug, NULL, "    limits: {text: 4000}\n") ==
                    0);
    rpc_res r;
    const msgpack_object *res =
        get_bin(&f, "getBin", "image/png", 2000, false, &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(block_is(res, 0, "type", "image"));
    CU_ASSERT(block_is(res, 0, "mime_type", "image/png"));
    CU_ASSERT_EQUAL(block_len(res, 0), 2000);
    CU_ASSERT(res && stream_has(res, "stdout", "image/png, 2000 bytes"));
    rpc_res_free(&r);
    char uri[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d/v1/att/bin", f.srv.port);
    res = get_bin(&f, "getBin", NULL, 8, false, &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(block_is(res, 0, "type", "resource"));
    CU_ASSERT(block_is(res, 0, "uri", uri));
    CU_ASSERT(res && result_lacks(res, KEY));
    rpc_res_free(&r);
    /* over the toolset's limit: the worker's write_block() knows the
     * call's budget (sent with the call) and refuses, so the call fails
     * as in process, and no block reaches the caller */
    res = get_bin(&f, "getBin", "image/png", 3001, false, &r);
    CU_ASSERT(res && !rpc_ok(res) &&
              stream_has(res, "stderr", "(image/png, 3001 bytes) is not text "
                                        "and cannot be carried"));
    CU_ASSERT_EQUAL(n_blocks(res), 0);
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_wait(&f.s, "the content passes 4000 bytes",
                           rpc_wait_ms()));
    res = get_bin(&f, "getBin", "image/png", 16, false, &r);
    CU_ASSERT(res && rpc_ok(res) && block_len(res, 0) == 16);
    rpc_res_free(&r);
    CU_ASSERT_FALSE(rpc_log_has(&f.s, KEY));
    fx_stop(&f);
}

/* Over MCP stdio: an image content and an embedded resource. */
static void test_bin_mcp(void)
{
    fx f;
    CU_ASSERT_FATAL(srv_up(&f) == 0);
    char *dir = th_test_tmpdir();
    char text[4096];
    fx_config(text, sizeof text, NULL, NULL, NULL, NULL, NULL, NULL);
    char *cfg = th_test_write_file(dir, "c.yaml", text, (size_t)-1);
    const char *in =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
        "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"
        "\"clientInfo\":{\"name\":\"att35\",\"version\":\"1\"}}}\n"
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"getBin\",\"arguments\":{\"ct\":\"image/png\",\"n\":4}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"getBin\",\"arguments\":{\"n\":4}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"getBin\",\"arguments\":{\"status\":500,\"n\":40}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":"
        "{\"name\":\"formEcho\",\"arguments\":{\"body\":{\"name\":"
        "\"x\\u0000y\"}}}}\n";
    th_test_run r;
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c", cfg,
                    NULL};
    CU_ASSERT_EQUAL_FATAL(th_test_run_argv(argv, in, 60, 1, &r), 0);
    CU_ASSERT_EQUAL(r.status, 0);
    char uri[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d/v1/att/bin", f.srv.port);
    int seen = 0;
    char *save = NULL;
    for (char *line = r.out ? strtok_r(r.out, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(line, 0, NULL);
        json_int_t id = json_integer_value(json_object_get(j, "id"));
        json_t *res = json_object_get(j, "result");
        json_t *content = json_object_get(res, "content");
        json_t *img = NULL, *rsc = NULL;
        size_t i;
        json_t *c;
        json_array_foreach(content, i, c)
        {
            const char *t = json_string_value(json_object_get(c, "type"));
            if (t && !strcmp(t, "image"))
                img = c;
            if (t && !strcmp(t, "resource"))
                rsc = c;
        }
        if (id == 2) {
            seen++;
            /* 0x80 0x81 0x82 0x83 */
            CU_ASSERT(img &&
                      !strcmp(json_string_value(json_object_get(img, "data")),
                              "gIGCgw==") &&
                      !strcmp(json_string_value(
                                  json_object_get(img, "mimeType")),
                              "image/png"));
            CU_ASSERT(!json_is_true(json_object_get(res, "isError")));
        } else if (id == 3) {
            seen++;
            json_t *rr = json_object_get(rsc, "resource");
            const char *u = json_string_value(json_object_get(rr, "uri"));
            const char *b = json_string_value(json_object_get(rr, "blob"));
            CU_ASSERT(u && !strcmp(u, uri));
            CU_ASSERT(b && !strcmp(b, "gIGCgw=="));
        } else if (id == 5) {
            /* an error answer of bytes: a tool error whose text is JSON
             * (json_loads took the line), naming the status */
            seen++;
            json_t *t0 = json_array_get(content, 0);
            const char *tx = json_string_value(json_object_get(t0, "text"));
            CU_ASSERT(json_is_true(json_object_get(res, "isError")));
            CU_ASSERT(tx && strstr(tx, "HTTP 500"));
        }
        json_decref(j);
    }
    CU_ASSERT_EQUAL(seen, 3);
    /* JSON's \u0000 through MCP reaches the form whole (id 6 the one
     * call of the echo: the calls run at once) */
    CU_ASSERT_EQUAL(echo_hits(&f.srv), 1);
    CU_ASSERT(echo_was(&f.srv, "POST", FORM, "name=x%00y"));
    CU_ASSERT(!r.out || !strstr(r.out, KEY));
    CU_ASSERT(!r.err || !strstr(r.err, KEY));
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
    petsrv_stop(&f.srv);
}

/* ---- the output-object cache --------------------------------------------- */

#define ATT_TOKEN "att35-token-0123456789abcdef"

typedef struct mcp_load {
    unsigned port;
    int calls, structured;
} mcp_load;

/* One MCP session: `calls` tools/call of structEcho, counting the
 * answers that carry structuredContent. */
static int mcp_session(unsigned port, char sid[96])
{
    char *out = NULL;
    int st = th_test_http(
        port, "POST", "/mcp", "Authorization: Bearer " ATT_TOKEN "\r\n",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
        "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"
        "\"clientInfo\":{\"name\":\"att35\",\"version\":\"1\"}}}",
        rpc_wait_ms(), &out);
    const char *p = out ? strcasestr(out, "Mcp-Session-Id: ") : NULL;
    int rc = -1;
    if (st == 200 && p) {
        p += 16;
        size_t n = strcspn(p, "\r\n");
        if (n < 96) {
            memcpy(sid, p, n);
            sid[n] = '\0';
            rc = 0;
        }
    }
    free(out);
    return rc;
}

/* tools/call of structEcho in session sid: 1 with structuredContent, 0
 * without, -1 when it failed */
static int mcp_struct_call(unsigned port, const char *sid, int id)
{
    char h[256], body[256];
    snprintf(h, sizeof h,
             "Authorization: Bearer " ATT_TOKEN "\r\n"
             "Mcp-Session-Id: %s\r\nMcp-Protocol-Version: 2025-06-18\r\n",
             sid);
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"structEcho\",\"arguments\":{}}}",
             id);
    char *out = NULL;
    int st = th_test_http(port, "POST", "/mcp", h, body, rpc_wait_ms(), &out);
    int rc = st != 200 || !out || strstr(out, "\"isError\":true") ||
                     (!strstr(out, "\\\"ok\\\"") && !strstr(out, "[true]"))
                 ? -1
             : strstr(out, "\"structuredContent\"")           ? 1
                                                              : 0;
    if (rc < 0)
        fprintf(stderr, "\nstructEcho: %d %.500s\n", st, out ? out : "");
    free(out);
    return rc;
}

static void *mcp_load_run(void *ud)
{
    mcp_load *l = ud;
    char sid[96];
    if (mcp_session(l->port, sid) != 0)
        return NULL;
    for (int i = 0; i < l->calls; i++)
        if (mcp_struct_call(l->port, sid, 10 + i) == 1)
            l->structured++;
    return NULL;
}

/* The config rewritten with `spec` (NULL: att35.yaml), then
 * host.reload. */
static void reload_with(fx *f, const char *uid, const char *mcp,
                        const char *spec)
{
    char text[4096];
    fx_config(text, sizeof text, NULL, NULL, uid,
              "  listen: [\"http://127.0.0.1:0/mcp\"]\n", mcp, spec);
    char *cfg = th_test_write_file(f->s.dir, "reload.yaml", text, (size_t)-1);
    CU_ASSERT(rename(cfg, f->s.cfg) == 0);
    free(cfg);
    rpc_res r;
    CU_ASSERT(rpc_call(f->c, "host.reload", "[]", &r) == 0 && !r.err);
    rpc_res_free(&r);
}

static void test_cache_mcp(void)
{
    fx f;
    CU_ASSERT_FATAL(srv_up(&f) == 0);
    setenv("ATT35_TOKEN", ATT_TOKEN, 1);
    char *dir = th_test_tmpdir();
    /* the second document: structEcho answers an array, its output
     * schema says so (an output schema that is not an object) */
    static const char doc2[] =
        "openapi: 3.0.3\n"
        "info: {title: att35b, version: '1'}\n"
        "servers: [{url: 'http://127.0.0.1/v1'}]\n"
        "paths:\n"
        "  /att/list:\n"
        "    get:\n"
        "      operationId: structEcho\n"
        "      responses:\n"
        "        '200':\n"
        "          description: a list\n"
        "          content:\n"
        "            application/json:\n"
        "              schema: {type: array, items: {type: boolean}}\n";
    char *spec2 = th_test_write_file(dir, "b.yaml", doc2, (size_t)-1);
    char uid[64];
    snprintf(uid, sizeof uid, "    allow_users: [alice, \"%u\"]\n",
             (unsigned)getuid());
    static const char mcp[] = "mcp:\n"
                              "  tokens:\n"
                              "    - {user: alice, env: ATT35_TOKEN}\n";
    /* first the array, so that a cache kept past the tool (or shared
     * by tools) would say "not an object" to the next structEcho */
    char text[4096];
    fx_config(text, sizeof text, NULL, NULL, uid,
              "  listen: [\"http://127.0.0.1:0/mcp\"]\n", mcp, spec2);
    rpc_opts o = {.config = text};
    CU_ASSERT_FATAL(rpc_srv_start(&f.s, &o) == 0);
    f.c = rpc_connect(&f.s);
    unsigned port = th_test_log_port(f.s.log, "(Streamable HTTP) on http");
    CU_ASSERT_FATAL(port != 0);
    char sid[96];
    CU_ASSERT_FATAL(mcp_session(port, sid) == 0);
    CU_ASSERT_EQUAL(mcp_struct_call(port, sid, 2), 0);

    /* att35.yaml (a new spec path: the plugin is loaded again):
     * structEcho's output is an object */
    reload_with(&f, uid, mcp, NULL);
    CU_ASSERT_EQUAL(mcp_struct_call(port, sid, 3), 1);
    enum { N = 6 };
    int calls = rpc_valgrind() ? 3 : 10;
    mcp_load l[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        l[i] = (mcp_load){.port = port, .calls = calls};
        CU_ASSERT_FATAL(pthread_create(&t[i], NULL, mcp_load_run, &l[i]) ==
                        0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        CU_ASSERT_EQUAL(l[i].structured, calls);
    }

    /* and back to the array */
    reload_with(&f, uid, mcp, spec2);
    CU_ASSERT_EQUAL(mcp_struct_call(port, sid, 4), 0);
    fx_stop(&f);
    unsetenv("ATT35_TOKEN");
    free(spec2);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_att35(void)
{
    CU_pSuite s = CU_add_suite("att35", NULL, NULL);
    CU_add_test(s, "form_names", test_form_names);
    CU_add_test(s, "form_nul", test_form_nul);
    CU_add_test(s, "form_media", test_form_media);
    CU_add_test(s, "form_not_object", test_form_not_object);
    CU_add_test(s, "form_redirects", test_form_redirects);
    CU_add_test(s, "form_bad_docs", test_form_bad_docs);
    CU_add_test(s, "bin_types", test_bin_types);
    CU_add_test(s, "bin_budgets", test_bin_budgets);
    CU_add_test(s, "bin_uri", test_bin_uri);
    CU_add_test(s, "bin_error_body", test_bin_error_body);
    CU_add_test(s, "base_url_userinfo", test_base_url_userinfo);
    CU_add_test(s, "bin_iso", test_bin_iso);
    CU_add_test(s, "bin_mcp", test_bin_mcp);
    CU_add_test(s, "cache_mcp", test_cache_mcp);
}
