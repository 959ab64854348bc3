/* test_openapi.c - the openapi plugin in the real binary: the pet store
 * of tests/openapi/petstore.yaml served by this process (tests/common/
 * petstore.c: libmicrohttpd on
 * 127.0.0.1, port 0, pets in memory, a bearer token required), and
 * `toolhost serve` with the plugin pointed at it (the base URL through
 * ${OA_TEST_URL} in the config), called over msgpack-RPC.
 *
 * What it shows: the pets listed, created, read, replaced and deleted;
 * a missing or wrong credential as a clear error; a redirect refused by
 * default, followed on the same host when allowed, refused to another
 * host on a private address (the server's canary never hit); a slow
 * answer ended by the timeout; a huge one by max_response; a flaky one
 * retried for GET but not for POST; include/exclude by operationId and
 * tag; path, query and header values that try to escape their place;
 * bad documents refused at load, naming the problem. */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"
#include "test_rpc_harness.h"

#include "common/petstore.h"

#define TOKEN PETSRV_TOKEN

/* ---- the pet store (tests/common/petstore.c) ------------------------- */

static int counter(petsrv *p, int *what)
{
    pthread_mutex_lock(&p->mu);
    int n = *what;
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* One of the server's last_* strings, read under its lock, equals want. */
static bool seen(petsrv *p, const char *last, const char *want)
{
    char copy[256];
    pthread_mutex_lock(&p->mu);
    snprintf(copy, sizeof copy, "%s", last);
    pthread_mutex_unlock(&p->mu);
    if (strcmp(copy, want))
        fprintf(stderr, "\nthe server saw [%s], wanted [%s]\n", copy, want);
    return !strcmp(copy, want);
}

/* a and b are the same string (a may be NULL). */
static bool same(const char *a, const char *b)
{
    return a && !strcmp(a, b);
}

/* ---- toolhost pointed at it ------------------------------------------- */

typedef struct fx {
    petsrv srv;
    rpc_srv s;
    th_rpc_client *c;
} fx;

/* The pet store, then `toolhost serve` with the first API "pets" (all
 * operations, the token in OA_TEST_TOKEN, allow_private) with
 * `pets_extra` lines, and `more` APIs after it. */
static int fx_start_with(fx *f, const char *pets_extra, const char *more,
                         const char *toolset_extra)
{
    memset(f, 0, sizeof *f);
    if (petsrv_start(&f->srv, 0) != 0)
        return -1;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", f->srv.port);
    setenv("OA_TEST_URL", url, 1);
    setenv("OA_TEST_TOKEN", TOKEN, 1);
    setenv("OA_TEST_WRONG", "not-the-token", 1);
    setenv("OA_TEST_USER", "ann", 1);
    setenv("OA_TEST_PASSWORD", "open sesame", 1);
    setenv("OA_TEST_KEY", "k-123", 1);
    unsetenv("OA_TEST_MISSING");
    const char *spec = th_test_source_path("tests/openapi/petstore.yaml");
    char apis[3000] = "";
    for (const char *m = more ? more : ""; *m;) {
        size_t w = strlen(apis);
        if (!strncmp(m, "@SPEC@", 6)) {
            snprintf(apis + w, sizeof apis - w, "%s", spec);
            m += 6;
        } else if (w + 1 < sizeof apis) {
            apis[w] = *m++;
            apis[w + 1] = '\0';
        } else {
            return -1;
        }
    }
    char cfg[4000];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "plugins:\n"
             "  - name: openapi\n"
             "    path: @BUILD@/plugins/openapi.so\n"
             "    config:\n"
             "      apis:\n"
             "        - name: pets\n"
             "          spec: %s\n"
             "          base_url: ${OA_TEST_URL}\n"
             "          allow_private: true\n"
             "          auth: {bearer_env: OA_TEST_TOKEN}\n"
             "%s%s"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [\"*\"]\n"
             "    permissions:\n"
             "      rules:\n"
             "        - {flag: open_world, action: allow}\n"
             "%s",
             spec, pets_extra ? pets_extra : "", apis,
             toolset_extra ? toolset_extra : "");
    rpc_opts o = {.config = cfg};
    if (rpc_srv_start(&f->s, &o) != 0)
        return -1;
    f->c = rpc_connect(&f->s);
    return f->c ? 0 : -1;
}

static int fx_start(fx *f, const char *pets_extra, const char *more)
{
    return fx_start_with(f, pets_extra, more, NULL);
}

static void fx_stop(fx *f)
{
    if (f->c)
        th_rpc_client_close(f->c);
    if (f->s.pid > 0) {
        /* 0: a clean exit (under valgrind: no error, no leak) */
        CU_ASSERT_EQUAL(rpc_srv_stop(&f->s, SIGTERM), 0);
        rpc_srv_free(&f->s);
    }
    petsrv_stop(&f->srv);
}

/* tools.call; the result map (r->res) or NULL. */
static const msgpack_object *call(fx *f, const char *tool, const char *args,
                                  rpc_res *r)
{
    char p[4096];
    snprintf(p, sizeof p, "[\"%s\", %s]", tool, args);
    if (rpc_call(f->c, "tools.call", p, r) != 0)
        return NULL;
    return r->res;
}

static bool stream_contains(const msgpack_object *res, const char *stream,
                            const char *needle, bool say)
{
    const char *p;
    size_t n;
    if (!res || !th_rpc_obj_str(th_rpc_map_get(res, stream), &p, &n))
        return false;
    char *s = strndup(p, n);
    bool has = s && strstr(s, needle);
    if (!has && say)
        fprintf(stderr, "\n%s is [%s], wanted [%s]\n", stream, s, needle);
    free(s);
    return has;
}

static bool stream_has(const msgpack_object *res, const char *stream,
                       const char *needle)
{
    return stream_contains(res, stream, needle, true);
}

/* The tool error's message holds `needle`. */
static bool error_has(const msgpack_object *res, const char *needle)
{
    const char *p;
    size_t n;
    if (!th_rpc_obj_str(th_rpc_map_get(th_rpc_map_get(res, "error"),
                                       "message"), &p, &n))
        return false;
    char buf[2048];
    snprintf(buf, sizeof buf, "%.*s", (int)n, p);
    if (!strstr(buf, needle))
        fprintf(stderr, "\nerror message '%s' lacks '%s'\n", buf, needle);
    return strstr(buf, needle) != NULL;
}

/* error.retry_after_ms, -1 when absent. */
static int64_t retry_after(const msgpack_object *res)
{
    const msgpack_object *v =
        th_rpc_map_get(th_rpc_map_get(res, "error"), "retry_after_ms");
    return !v ? -1
           : v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (int64_t)v->via.u64
                                                        : -2;
}

static json_t *stdout_json(const msgpack_object *res)
{
    const char *p;
    size_t n;
    if (!res || !th_rpc_obj_str(th_rpc_map_get(res, "stdout"), &p, &n))
        return NULL;
    json_error_t je;
    return json_loadb(p, n, JSON_DECODE_ANY, &je);
}

static int64_t meta_int(const msgpack_object *res, const char *key)
{
    const msgpack_object *v = th_rpc_map_get(th_rpc_map_get(res, "meta"), key);
    return v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (int64_t)v->via.u64
                                                           : -1;
}

/* ---- tests ------------------------------------------------------------- */

/* meta.toolhost.content[i]'s `key`: a string or bytes, into *p, *n */
static bool block_field(const msgpack_object *res, uint32_t i,
                        const char *key, const char **p, size_t *n)
{
    const msgpack_object *c = th_rpc_map_get(
        th_rpc_map_get(th_rpc_map_get(res, "meta"), "toolhost"), "content");
    if (!c || c->type != MSGPACK_OBJECT_ARRAY || i >= c->via.array.size)
        return false;
    const msgpack_object *v = th_rpc_map_get(&c->via.array.ptr[i], key);
    if (v && v->type == MSGPACK_OBJECT_BIN) {
        *p = v->via.bin.ptr;
        *n = v->via.bin.size;
        return true;
    }
    return v && th_rpc_obj_str(v, p, n);
}

static bool block_is(const msgpack_object *res, uint32_t i, const char *key,
                     const void *want, size_t wn)
{
    const char *p;
    size_t n;
    bool ok = block_field(res, i, key, &p, &n) && n == wn &&
              !memcmp(p, want, n);
    if (!ok)
        fprintf(stderr, "\ncontent block %u: %s is not the one wanted\n", i,
                key);
    return ok;
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

/* A 2xx body that is not text, or whose type says image or audio: one
 * content block of its media type (an embedded resource, whose URI is
 * the URL answered, for other bytes) and a line on stdout naming it;
 * UTF-8 text of any other type stays stdout's text. */
static void test_binary_answers(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, NULL, NULL) == 0);
    rpc_res r;
    const msgpack_object *res =
        call(&f, "getPetPhoto", "{\"petId\": \"1\"}", &r);
    static const char png[] = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(stream_has(res, "stdout", "image/png, 16 bytes"));
    CU_ASSERT(block_is(res, 0, "type", "image", 5));
    CU_ASSERT(block_is(res, 0, "mime_type", "image/png", 9));
    CU_ASSERT(block_is(res, 0, "data", png, sizeof png - 1));
    CU_ASSERT(meta_str_is(res, "content_type", "image/png"));
    rpc_res_free(&r);

    res = call(&f, "exportAll", "{}", &r);
    static const char blob[] = "\xff\xfe\0export\x80";
    char uri[80];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d/v1/export", f.srv.port);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(block_is(res, 0, "type", "resource", 8));
    CU_ASSERT(block_is(res, 0, "mime_type", "application/octet-stream", 24));
    CU_ASSERT(block_is(res, 0, "uri", uri, strlen(uri)));
    CU_ASSERT(block_is(res, 0, "data", blob, sizeof blob - 1));
    rpc_res_free(&r);

    res = call(&f, "getNotes", "{}", &r);
    const char *p;
    size_t n;
    CU_ASSERT(res && rpc_ok(res) && stream_has(res, "stdout", "caf\xc3\xa9 notes"));
    CU_ASSERT_FALSE(block_field(res, 0, "type", &p, &n));
    CU_ASSERT(meta_str_is(res, "content_type", "text/plain"));
    rpc_res_free(&r);
    fx_stop(&f);
}

static void test_crud(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, NULL, NULL) == 0);
    rpc_res r;
    /* the tool list: one per operation, schemas from the document */
    CU_ASSERT(rpc_call(f.c, "tools.list", "[]", &r) == 0 && r.res);
    const char *names[] = {"listPets", "createPet", "getPet", "updatePet",
                           "updatePetWithForm", "deletePet", "getPetPhoto",
                           "exportAll", "getNotes", "get_pets_petId_owner",
                           "getInventory", "placeOrder", "getOrder",
                           "createCategory", "legacyPets", "redirectAway",
                           "slowPing", "hugeDump", "flakyGet", "flakyPost",
                           "limitedGet", "limitedPost", "downGet"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const msgpack_object *t = rpc_find_tool(r.res, names[i]);
        if (!t)
            fprintf(stderr, "\nno tool %s\n", names[i]);
        CU_ASSERT_PTR_NOT_NULL(t);
    }
    CU_ASSERT(rpc_has_flag(rpc_find_tool(r.res, "deletePet"), "destructive"));
    CU_ASSERT(rpc_has_flag(rpc_find_tool(r.res, "getPet"), "read_only"));
    rpc_res_free(&r);

    const msgpack_object *res;
    res = call(&f, "createPet", "{\"body\": {\"name\": \"Rex\", \"tag\": "
                                "\"dog\"}}", &r);
    CU_ASSERT(res && rpc_ok(res));
    json_t *pet = stdout_json(res);
    if (!pet)
        rpc_dump_log(&f.s);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(pet, "id")), 1);
    CU_ASSERT(same(json_string_value(json_object_get(pet, "name")), "Rex"));
    CU_ASSERT_EQUAL(meta_int(res, "http_status"), 201);
    json_decref(pet);
    rpc_res_free(&r);
    res = call(&f, "createPet", "{\"body\": {\"name\": \"Tom\", \"tag\": "
                                "\"cat\"}}", &r);
    CU_ASSERT(res && rpc_ok(res));
    rpc_res_free(&r);
    /* the input schema is enforced by the host before any request */
    res = call(&f, "createPet", "{\"body\": {\"tag\": \"dog\"}}", &r);
    CU_ASSERT(res && rpc_tool_error_is(res, "invalid_arguments"));
    rpc_res_free(&r);
    res = call(&f, "listPets", "{\"limit\": 1000}", &r);
    CU_ASSERT(res && rpc_tool_error_is(res, "invalid_arguments"));
    rpc_res_free(&r);

    res = call(&f, "listPets", "{\"tag\": \"cat\", \"X-Request-Id\": "
                               "\"abc-1\"}", &r);
    CU_ASSERT(res && rpc_ok(res));
    json_t *list = stdout_json(res);
    CU_ASSERT_EQUAL(json_array_size(list), 1);
    CU_ASSERT(same(json_string_value(json_object_get(json_array_get(list, 0),
                                                     "name")),
                   "Tom"));
    CU_ASSERT(seen(&f.srv, f.srv.last_reqid, "abc-1"));
    CU_ASSERT(seen(&f.srv, f.srv.last_cookie, "")); /* none given: none */
    json_decref(list);
    rpc_res_free(&r);
    /* a cookie parameter: the Cookie header */
    res = call(&f, "listPets", "{\"view\": \"compact\"}", &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(seen(&f.srv, f.srv.last_cookie, "view=compact"));
    rpc_res_free(&r);

    res = call(&f, "updatePet", "{\"petId\": \"1\", \"body\": {\"name\": "
                                "\"Rex II\"}}", &r);
    CU_ASSERT(res && stream_has(res, "stdout", "\"Rex II\""));
    rpc_res_free(&r);
    res = call(&f, "getPet", "{\"petId\": \"1\"}", &r);
    CU_ASSERT(res && rpc_ok(res) && stream_has(res, "stdout", "Rex II"));
    rpc_res_free(&r);
    /* a form body: the fields percent-encoded in the order given, an
     * array repeating its field, null left out, the form's media type */
    res = call(&f, "updatePetWithForm",
               "{\"petId\": \"1\", \"body\": {\"name\": \"Rex & co=1\", "
               "\"tag\": null, \"vaccines\": [\"rabies\", \"flu shot\"]}}",
               &r);
    CU_ASSERT(res && rpc_ok(res) && stream_has(res, "stdout", "Rex & co=1"));
    CU_ASSERT(seen(&f.srv, f.srv.last_form,
                   "name=Rex%20%26%20co%3D1&vaccines=rabies&vaccines=flu%20shot"));
    CU_ASSERT(seen(&f.srv, f.srv.last_form_type,
                   "application/x-www-form-urlencoded"));
    rpc_res_free(&r);
    /* its schema: the form's fields are the body's properties */
    res = call(&f, "updatePetWithForm",
               "{\"petId\": \"1\", \"body\": {\"tag\": \"dog\"}}", &r);
    CU_ASSERT(res && rpc_tool_error_is(res, "invalid_arguments"));
    rpc_res_free(&r);
    res = call(&f, "updatePetWithForm",
               "{\"petId\": \"1\", \"body\": {\"name\": \"Rex II\", "
               "\"tag\": \"dog\"}}", &r);
    CU_ASSERT(res && rpc_ok(res) && stream_has(res, "stdout", "Rex II"));
    CU_ASSERT(seen(&f.srv, f.srv.last_form, "name=Rex%20II&tag=dog"));
    rpc_res_free(&r);
    res = call(&f, "get_pets_petId_owner", "{\"petId\": \"1\"}", &r);
    CU_ASSERT(res && stream_has(res, "stdout", "Ada"));
    rpc_res_free(&r);
    res = call(&f, "getInventory", "{}", &r);
    CU_ASSERT(res && rpc_ok(res) && stream_has(res, "stdout", "\"dog\""));
    rpc_res_free(&r);
    /* a recursive body schema ($defs with a $ref to itself) */
    res = call(&f, "createCategory",
               "{\"body\": {\"name\": \"a\", \"children\": [{\"name\": "
               "\"b\", \"children\": [{\"name\": \"c\"}]}]}}", &r);
    CU_ASSERT(res && rpc_ok(res) && stream_has(res, "stdout", "\"c\""));
    rpc_res_free(&r);
    res = call(&f, "createCategory",
               "{\"body\": {\"name\": \"a\", \"children\": [{\"children\": "
               "[]}]}}", &r);
    CU_ASSERT(res && rpc_tool_error_is(res, "invalid_arguments"));
    rpc_res_free(&r);

    /* an answer that does not match the document's response schema */
    res = call(&f, "getOrder", "{\"orderId\": 7}", &r);
    CU_ASSERT(res && rpc_tool_error_is(res, "tool_error"));
    const char *m;
    size_t mn;
    CU_ASSERT(res && th_rpc_obj_str(th_rpc_map_get(th_rpc_map_get(res, "error"),
                                                   "message"), &m, &mn) &&
              memmem(m, mn, "does not match its output_schema", 32));
    rpc_res_free(&r);
    res = call(&f, "getOrder", "{\"orderId\": 0}", &r);
    CU_ASSERT(res && rpc_tool_error_is(res, "invalid_arguments"));
    rpc_res_free(&r);

    res = call(&f, "deletePet", "{\"petId\": \"1\"}", &r);
    CU_ASSERT(res && rpc_ok(res) && stream_has(res, "stdout", "204"));
    rpc_res_free(&r);
    res = call(&f, "getPet", "{\"petId\": \"1\"}", &r);
    CU_ASSERT(res && !rpc_ok(res));
    CU_ASSERT(stream_has(res, "stderr", "HTTP 404 from GET /pets/1"));
    CU_ASSERT(stream_has(res, "stderr", "no such pet"));
    rpc_res_free(&r);
    fx_stop(&f);
}

static void test_auth(void)
{
    fx f;
    CU_ASSERT_FATAL(
        fx_start(&f, NULL,
                 "        - name: wrong\n"
                 "          spec: @SPEC@\n"
                 "          base_url: ${OA_TEST_URL}\n"
                 "          prefix: wrong_\n"
                 "          include: [getPet]\n"
                 "          allow_private: true\n"
                 "          auth: {bearer_env: OA_TEST_WRONG}\n"
                 "        - name: nokey\n"
                 "          spec: @SPEC@\n"
                 "          base_url: ${OA_TEST_URL}\n"
                 "          prefix: nokey_\n"
                 "          include: [getPet]\n"
                 "          allow_private: true\n"
                 "          auth: {bearer_env: OA_TEST_MISSING}\n") == 0);
    rpc_res r;
    const msgpack_object *res = call(&f, "wrong_getPet", "{\"petId\": \"1\"}",
                                     &r);
    CU_ASSERT(res && !rpc_ok(res) && stream_has(res, "stderr", "HTTP 401"));
    /* the secret is neither shown nor logged */
    CU_ASSERT(!stream_contains(res, "stderr", "not-the-token", false));
    rpc_res_free(&r);
    res = call(&f, "nokey_getPet", "{\"petId\": \"1\"}", &r);
    CU_ASSERT(res && !rpc_ok(res) &&
              stream_has(res, "stderr", "environment variable "
                                        "OA_TEST_MISSING is not set"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_has(&f.s, "OA_TEST_MISSING is not set"));
    CU_ASSERT_EQUAL(counter(&f.srv, &f.srv.unauthorized), 1);
    CU_ASSERT_EQUAL(rpc_log_count(&f.s, TOKEN), 0);
    CU_ASSERT_EQUAL(rpc_log_count(&f.s, "not-the-token"), 0);
    fx_stop(&f);
}

/* Redirects: refused by default; followed on the base URL's host when
 * max_redirects allows; refused to another host on a private address
 * ("localhost" resolves to loopback: the address checked is the one
 * connected, so no name gets around the rule) before any request. */
static void test_redirect(void)
{
    fx f;
    CU_ASSERT_FATAL(
        fx_start(&f, NULL,
                 "        - name: follow\n"
                 "          spec: @SPEC@\n"
                 "          base_url: ${OA_TEST_URL}\n"
                 "          prefix: r2_\n"
                 "          include: [tag:diagnostics]\n"
                 "          exclude: [slowPing, hugeDump]\n"
                 "          max_redirects: 2\n"
                 "          allow_private: true\n"
                 "          auth: {bearer_env: OA_TEST_TOKEN}\n") == 0);
    rpc_res r;
    const msgpack_object *res = call(&f, "legacyPets", "{}", &r);
    CU_ASSERT(res && !rpc_ok(res) &&
              stream_has(res, "stderr", "the API redirected (HTTP 301); "
                                        "redirects are refused past "
                                        "max_redirects (0)"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_has(&f.s, "redirect (HTTP 301) refused"));
    res = call(&f, "r2_legacyPets", "{}", &r);
    CU_ASSERT(res && rpc_ok(res) && stream_has(res, "stdout", "["));
    rpc_res_free(&r);
    res = call(&f, "r2_redirectAway", "{}", &r);
    CU_ASSERT(res && !rpc_ok(res) &&
              stream_has(res, "stderr", "refused to connect to ") &&
              stream_has(res, "stderr", " for GET /elsewhere: a private"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_has(&f.s, "refused (a private address)"));
    CU_ASSERT_EQUAL(counter(&f.srv, &f.srv.canary), 0);
    fx_stop(&f);
}

/* Without allow_private, even the base URL on loopback is refused. */
static void test_private_default(void)
{
    fx f;
    CU_ASSERT_FATAL(
        fx_start(&f, NULL,
                 "        - name: strict\n"
                 "          spec: @SPEC@\n"
                 "          base_url: ${OA_TEST_URL}\n"
                 "          prefix: strict_\n"
                 "          include: [getInventory]\n"
                 "          auth: {bearer_env: OA_TEST_TOKEN}\n") == 0);
    rpc_res r;
    const msgpack_object *res = call(&f, "strict_getInventory", "{}", &r);
    CU_ASSERT(res && !rpc_ok(res) &&
              stream_has(res, "stderr", "refused to connect to 127.0.0.1"));
    rpc_res_free(&r);
    res = call(&f, "getInventory", "{}", &r);
    CU_ASSERT(res && rpc_ok(res));
    rpc_res_free(&r);
    fx_stop(&f);
}

/* A slow answer ends at the API's timeout; a huge one at max_response. */
static void test_slow_and_huge(void)
{
    char more[1024];
    snprintf(more, sizeof more,
             "        - name: tight\n"
             "          spec: @SPEC@\n"
             "          base_url: ${OA_TEST_URL}\n"
             "          prefix: t_\n"
             "          include: [slowPing, hugeDump, getInventory]\n"
             "          allow_private: true\n"
             "          timeout: %ums\n"
             "          max_response: 64KiB\n"
             "          auth: {bearer_env: OA_TEST_TOKEN}\n",
             th_test_ms(600));
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, NULL, more) == 0);
    rpc_res r;
    const msgpack_object *res = call(&f, "t_slowPing", "{}", &r);
    CU_ASSERT(res && rpc_tool_error_is(res, "backend_timeout") &&
              error_has(res, "GET /slow: no answer within") &&
              retry_after(res) == -1);
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_has(&f.s, "GET /slow: no answer within"));
    res = call(&f, "t_hugeDump", "{}", &r);
    CU_ASSERT(res && !rpc_ok(res) &&
              stream_has(res, "stderr", "larger than max_response (65536 "
                                        "bytes)"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_has(&f.s, "answer larger than max_response"));
    /* the default (1 MiB) stops it too; the API still serves */
    res = call(&f, "hugeDump", "{}", &r);
    CU_ASSERT(res && !rpc_ok(res) &&
              stream_has(res, "stderr", "larger than max_response (1048576"));
    rpc_res_free(&r);
    res = call(&f, "t_getInventory", "{}", &r);
    CU_ASSERT(res && rpc_ok(res));
    rpc_res_free(&r);
    fx_stop(&f);
}

/* retries: 2 retries a GET that failed with 503, never a POST. */
static void test_retry(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, "          retries: 2\n", NULL) == 0);
    rpc_res r;
    const msgpack_object *res = call(&f, "flakyGet", "{}", &r);
    CU_ASSERT(res && rpc_ok(res) && stream_has(res, "stdout", "\"ok\""));
    CU_ASSERT_EQUAL(meta_int(res, "attempts"), 2);
    rpc_res_free(&r);
    CU_ASSERT_EQUAL(counter(&f.srv, &f.srv.flaky_get), 2);
    res = call(&f, "flakyPost", "{}", &r);
    /* a 503 is the API being unavailable (ABI 1.5), no Retry-After */
    CU_ASSERT(res && rpc_tool_error_is(res, "unavailable") &&
              error_has(res, "HTTP 503 from POST /flaky: {\"message\": "
                             "\"try again\"}") &&
              retry_after(res) == -1);
    rpc_res_free(&r);
    CU_ASSERT_EQUAL(counter(&f.srv, &f.srv.flaky_post), 1);
    fx_stop(&f);
}

/* The API's own "not now" answers as the host's codes (ABI 1.5): 429
 * rate_limited with its Retry-After (seconds; an HTTP date, cut at a
 * day), 503 unavailable with its Retry-After, a refused connection
 * unavailable; over RPC and MCP. */
static void test_backend_codes(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, NULL,
                             "        - name: gone\n"
                             "          spec: @SPEC@\n"
                             "          base_url: http://127.0.0.1:1/v1\n"
                             "          prefix: gone_\n"
                             "          include: [getInventory]\n"
                             "          allow_private: true\n") == 0);
    rpc_res r;
    const msgpack_object *res = call(&f, "limitedGet", "{}", &r);
    CU_ASSERT(res && rpc_tool_error_is(res, "rate_limited") &&
              error_has(res, "HTTP 429 from GET /limited: {\"message\": "
                             "\"slow down\"}"));
    CU_ASSERT(res && retry_after(res) == 7000);
    rpc_res_free(&r);
    res = call(&f, "limitedPost", "{}", &r);
    CU_ASSERT(res && rpc_tool_error_is(res, "rate_limited"));
    CU_ASSERT(res && retry_after(res) == 86400000);
    rpc_res_free(&r);
    res = call(&f, "downGet", "{}", &r);
    CU_ASSERT(res && rpc_tool_error_is(res, "unavailable") &&
              error_has(res, "HTTP 503 from GET /down"));
    CU_ASSERT(res && retry_after(res) == 3000);
    rpc_res_free(&r);
    res = call(&f, "gone_getInventory", "{}", &r);
    CU_ASSERT(res && rpc_tool_error_is(res, "unavailable") &&
              error_has(res, "GET /store/inventory: Couldn't connect"));
    rpc_res_free(&r);
    /* a 404 stays the API's answer: a failed call with its stderr */
    res = call(&f, "getPet", "{\"petId\": \"nope\"}", &r);
    CU_ASSERT(res && !rpc_ok(res) && stream_has(res, "stderr", "HTTP 404"));
    rpc_res_free(&r);

    /* MCP (stdio) with the same config: isError, _meta code and hint */
    const char *input =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
        "\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"
        "\"clientInfo\":{\"name\":\"raw\",\"version\":\"1\"}}}\n"
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"limitedGet\",\"arguments\":{}}}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\","
        "\"params\":{\"name\":\"downGet\",\"arguments\":{}}}\n";
    th_test_run run;
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c",
                    f.s.cfg, NULL};
    CU_ASSERT_EQUAL(th_test_run_argv(argv, input, 60, 1, &run), 0);
    int seen = 0;
    char *save = NULL;
    for (char *l = run.out ? strtok_r(run.out, "\n", &save) : NULL; l;
         l = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(l, 0, NULL);
        json_int_t id = json_integer_value(json_object_get(j, "id"));
        json_t *res_j = json_object_get(j, "result");
        json_t *meta = json_object_get(res_j, "_meta");
        if (id == 2 || id == 3) {
            seen++;
            CU_ASSERT(json_is_true(json_object_get(res_j, "isError")));
            const char *code = json_string_value(
                json_object_get(meta, "toolhost/error"));
            CU_ASSERT_STRING_EQUAL(code ? code : "",
                                   id == 2 ? "rate_limited" : "unavailable");
            CU_ASSERT_EQUAL(json_integer_value(json_object_get(
                                meta, "toolhost/retry_after_ms")),
                            id == 2 ? 7000 : 3000);
        }
        json_decref(j);
    }
    CU_ASSERT_EQUAL(seen, 2);
    th_test_run_free(&run);
    fx_stop(&f);
}

/* include by tag, exclude by operationId. */
static void test_filters(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, "          include: [\"tag:store\", getPet]\n"
                                 "          exclude: [placeOrder]\n",
                             NULL) == 0);
    rpc_res r;
    CU_ASSERT(rpc_call(f.c, "tools.list", "[]", &r) == 0 && r.res);
    CU_ASSERT_PTR_NOT_NULL(rpc_find_tool(r.res, "getInventory"));
    CU_ASSERT_PTR_NOT_NULL(rpc_find_tool(r.res, "getOrder"));
    CU_ASSERT_PTR_NOT_NULL(rpc_find_tool(r.res, "createCategory"));
    CU_ASSERT_PTR_NOT_NULL(rpc_find_tool(r.res, "getPet"));
    CU_ASSERT_PTR_NULL(rpc_find_tool(r.res, "placeOrder"));
    CU_ASSERT_PTR_NULL(rpc_find_tool(r.res, "listPets"));
    CU_ASSERT_PTR_NULL(rpc_find_tool(r.res, "get_pets_petId_owner"));
    rpc_res_free(&r);
    fx_stop(&f);
}

/* Values that try to leave their place: a path value with '/' and '..'
 * stays one escaped segment; '..' alone is refused; a query value cannot
 * add parameters; a header value cannot add headers. */
static void test_hostile_values(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start(&f, NULL, NULL) == 0);
    rpc_res r;
    const msgpack_object *res =
        call(&f, "getPet", "{\"petId\": \"..%2F..\\\\admin?x=1#f\"}", &r);
    CU_ASSERT(res && !rpc_ok(res) && stream_has(res, "stderr", "HTTP 404"));
    CU_ASSERT(seen(&f.srv, f.srv.last_id, "..%2F..\\admin?x=1#f"));
    rpc_res_free(&r);
    res = call(&f, "get_pets_petId_owner", "{\"petId\": \"..\"}", &r);
    CU_ASSERT(res && !rpc_ok(res) &&
              stream_has(res, "stderr", "path parameter 'petId' must be a "
                                        "non-empty value other than '.' and "
                                        "'..'"));
    rpc_res_free(&r);
    res = call(&f, "listPets", "{\"tag\": \"dog&limit=1\"}", &r);
    CU_ASSERT(res && rpc_ok(res));
    CU_ASSERT(seen(&f.srv, f.srv.last_tag, "dog&limit=1"));
    rpc_res_free(&r);
    res = call(&f, "listPets", "{\"X-Request-Id\": \"a\\r\\nX-Admin: 1\"}",
               &r);
    CU_ASSERT(res && !rpc_ok(res) &&
              stream_has(res, "stderr", "header parameter 'X-Request-Id' "
                                        "must be one line"));
    rpc_res_free(&r);
    /* a cookie value that would add a cookie of its own */
    res = call(&f, "listPets", "{\"view\": \"x; admin=1\"}", &r);
    CU_ASSERT(res && !rpc_ok(res) &&
              stream_has(res, "stderr", "cookie parameter 'view' must be "
                                        "printable ASCII without spaces"));
    rpc_res_free(&r);
    /* unknown arguments are refused by the host (additionalProperties) */
    res = call(&f, "getInventory", "{\"Authorization\": \"x\"}", &r);
    CU_ASSERT(res && rpc_tool_error_is(res, "invalid_arguments"));
    rpc_res_free(&r);
    fx_stop(&f);
}

/* Basic credentials and an API key in a header or in the query, each
 * from the environment; a key in the query is not shown in messages. */
static void test_auth_kinds(void)
{
    fx f;
    CU_ASSERT_FATAL(
        fx_start(&f, NULL,
                 "        - name: basic\n"
                 "          spec: @SPEC@\n"
                 "          base_url: ${OA_TEST_URL}\n"
                 "          prefix: b_\n"
                 "          include: [getInventory]\n"
                 "          allow_private: true\n"
                 "          auth: {basic_user_env: OA_TEST_USER, "
                 "basic_password_env: OA_TEST_PASSWORD}\n"
                 "        - name: keyh\n"
                 "          spec: @SPEC@\n"
                 "          base_url: ${OA_TEST_URL}\n"
                 "          prefix: h_\n"
                 "          include: [getInventory]\n"
                 "          allow_private: true\n"
                 "          auth: {api_key_env: OA_TEST_KEY, api_key_header: "
                 "X-Api-Key}\n"
                 "        - name: keyq\n"
                 "          spec: @SPEC@\n"
                 "          base_url: ${OA_TEST_URL}\n"
                 "          prefix: q_\n"
                 "          include: [getInventory, getPet]\n"
                 "          allow_private: true\n"
                 "          auth: {api_key_env: OA_TEST_KEY, api_key_query: "
                 "api_key}\n") == 0);
    rpc_res r;
    const char *tools[] = {"b_getInventory", "h_getInventory",
                           "q_getInventory"};
    for (size_t i = 0; i < 3; i++) {
        const msgpack_object *res = call(&f, tools[i], "{}", &r);
        CU_ASSERT(res && rpc_ok(res) && stream_has(res, "stdout", "\"dog\""));
        rpc_res_free(&r);
    }
    const msgpack_object *res = call(&f, "q_getPet", "{\"petId\": \"9\"}", &r);
    CU_ASSERT(res && stream_has(res, "stderr", "HTTP 404 from GET /pets/9:"));
    CU_ASSERT(res && !stream_contains(res, "stderr", "k-123", false));
    rpc_res_free(&r);
    CU_ASSERT_EQUAL(counter(&f.srv, &f.srv.unauthorized), 0);
    CU_ASSERT_EQUAL(rpc_log_count(&f.s, "k-123"), 0);
    CU_ASSERT_EQUAL(rpc_log_count(&f.s, "open sesame"), 0);
    fx_stop(&f);
}

/* A call cancelled by its caller (tools.cancel) stops its request at
 * once: the worker is free again while the API's timeout (20 minutes)
 * and the call's (10) are far away, through libcurl's progress callback
 * and is_cancelled(). */
static void test_cancel(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_start_with(&f, "          timeout: 20m\n", NULL,
                                  "    tool_overrides:\n"
                                  "      slowPing: {timeout: 10m}\n") == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &f.s) == 0);
    rpc_raw_request(&w, 1, "tools.call", "[\"slowPing\", {}]");
    /* the request has reached the API */
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (counter(&f.srv, &f.srv.slow_waiting) == 0 && rpc_now_ms() < end)
        usleep(5000);
    CU_ASSERT_FATAL(counter(&f.srv, &f.srv.slow_waiting) == 1);
    rpc_raw_request(&w, 2, "tools.cancel", "[1]");
    const msgpack_object *m = rpc_raw_response(&w, 1, rpc_wait_ms());
    const msgpack_object *res =
        m && m->via.array.size == 4 ? &m->via.array.ptr[3] : NULL;
    CU_ASSERT(res && rpc_tool_error_is(res, "cancelled"));
    /* no call left running: the request was abandoned, not waited out */
    end = rpc_now_ms() + rpc_wait_ms();
    uint64_t running;
    while ((running = rpc_mgr_stat(f.c, "running")) != 0 &&
           rpc_now_ms() < end)
        usleep(5000);
    CU_ASSERT_EQUAL(running, 0);
    rpc_raw_close(&w);
    fx_stop(&f);
}

/* Calls of an API reuse its connections (keep_alive idle handles, 4 by
 * default): eight calls in a row open one connection; with keep_alive 0
 * each call opens its own.  An out-of-range keep_alive is refused at
 * load, naming the key. */
static void test_keep_alive(void)
{
    static const struct {
        const char *extra;
        int calls, connections;
    } runs[] = {{NULL, 8, 1}, {"          keep_alive: 0\n", 3, 3}};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        fx f;
        CU_ASSERT_FATAL(fx_start(&f, runs[i].extra, NULL) == 0);
        for (int k = 0; k < runs[i].calls; k++) {
            rpc_res r;
            const msgpack_object *res = call(&f, "listPets", "{}", &r);
            CU_ASSERT(res && rpc_ok(res));
            rpc_res_free(&r);
        }
        CU_ASSERT_EQUAL(counter(&f.srv, &f.srv.connections),
                        runs[i].connections);
        fx_stop(&f);
    }
    char *argv[] = {(char *)th_test_build_path("toolhost"), "check",
                    "--config",
                    "{\"apis\": [{\"name\": \"pets\", \"spec\": "
                    "\"/nonexistent.yaml\", \"keep_alive\": 65}]}",
                    (char *)th_test_build_path("plugins/openapi.so"), NULL};
    th_test_run r;
    CU_ASSERT_EQUAL_FATAL(th_test_run_argv(argv, NULL, 60, 0, &r), 0);
    CU_ASSERT(r.status != 0);
    const char *want = "api 'pets': keep_alive must be an integer from 0 to 64";
    CU_ASSERT((r.out && strstr(r.out, want)) || (r.err && strstr(r.err, want)));
    th_test_run_free(&r);
}

/* Bad documents stop the load with a message naming the problem. */
static void test_bad_specs(void)
{
    char *dir = th_test_tmpdir();
    static const struct {
        const char *file, *text, *extra, *want;
    } cases[] = {
        {"broken.json", "{\"openapi\": \"3.0.0\", \"paths\": {", "",
         "broken.json:1:"},
        {"v2.yaml", "swagger: '2.0'\npaths: {}\n", "",
         "is Swagger 2.0; convert it to OpenAPI 3"},
        {"v4.yaml", "openapi: 4.0.0\npaths: {}\n", "",
         "OpenAPI version '4.0.0' is not supported"},
        {"cycle.yaml",
         "openapi: 3.1.0\nservers: [{url: 'http://x.example'}]\n"
         "paths:\n  /a:\n    get:\n      operationId: a\n"
         "      parameters: [{name: q, in: query, schema: {$ref: "
         "'#/components/schemas/A'}}]\n      responses: {}\n"
         "components:\n  schemas:\n    A: {$ref: '#/components/schemas/B'}\n"
         "    B: {$ref: '#/components/schemas/A'}\n",
         "", "$ref cycle: #/components/schemas/A -> #/components/schemas/B "
             "-> #/components/schemas/A"},
        {"alias.yaml",
         "openapi: 3.0.0\nservers: [{url: 'http://x.example'}]\n"
         "x-a: &a [1, 2]\nx-b: [*a, *a]\npaths: {}\n",
         "", "alias.yaml:4:7: YAML aliases (*name) are not accepted"},
        {"big.yaml",
         "openapi: 3.0.0\nservers: [{url: 'http://x.example'}]\npaths: {}\n",
         "          max_spec: 16B\n", "more than max_spec (16)"},
        {"relative.yaml", "openapi: 3.0.0\nservers: [{url: /v1}]\npaths: {}\n",
         "", "is not an absolute http(s) URL"},
        /* headers each request sets itself, or auth: does */
        {"ct.yaml",
         "openapi: 3.0.0\nservers: [{url: 'http://x.example'}]\npaths: {}\n",
         "          headers: {content-type: text/plain}\n",
         "headers: 'content-type' is set by each request"},
        {"authz.yaml",
         "openapi: 3.0.0\nservers: [{url: 'http://x.example'}]\npaths: {}\n",
         "          auth: {bearer_env: T}\n"
         "          headers: {Authorization: Bearer x}\n",
         "headers: 'Authorization' is set by auth:"},
        {"key.yaml",
         "openapi: 3.0.0\nservers: [{url: 'http://x.example'}]\npaths: {}\n",
         "          auth: {api_key_env: K, api_key_header: X-Key}\n"
         "          headers: {x-key: k}\n",
         "headers: 'x-key' is auth.api_key_header's"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] + 1; i++) {
        bool missing = i == sizeof cases / sizeof cases[0];
        char *spec = missing ? strdup("/nonexistent/petstore.yaml")
                             : th_test_write_file(dir, cases[i].file,
                                                  cases[i].text, (size_t)-1);
        char text[2048];
        snprintf(text, sizeof text,
                 "plugins:\n"
                 "  - name: openapi\n"
                 "    path: %s\n"
                 "    config:\n"
                 "      apis:\n"
                 "        - name: bad\n"
                 "          spec: %s\n%s",
                 th_test_build_path("plugins/openapi.so"), spec,
                 missing ? "" : cases[i].extra);
        char *cfg = th_test_write_file(dir, "cfg.yaml", text, (size_t)-1);
        const char *want = missing ? "/nonexistent/petstore.yaml: No such "
                                     "file or directory"
                                   : cases[i].want;
        th_test_run r;
        th_test_toolhost(&r, "config", "check", cfg, NULL);
        CU_ASSERT_NOT_EQUAL(r.status, 0);
        bool has = strstr(r.err, want) || strstr(r.out, want);
        if (!has)
            fprintf(stderr, "\ncase %zu: want %s\nout: %s\nerr: %s\n", i,
                    want, r.out, r.err);
        CU_ASSERT(has);
        CU_ASSERT(strstr(r.err, "api 'bad'") || strstr(r.out, "api 'bad'"));
        th_test_run_free(&r);
        free(cfg);
        free(spec);
    }
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_openapi(void)
{
    CU_pSuite s = CU_add_suite("openapi", NULL, NULL);
    CU_add_test(s, "crud", test_crud);
    CU_add_test(s, "binary_answers", test_binary_answers);
    CU_add_test(s, "auth", test_auth);
    CU_add_test(s, "redirect", test_redirect);
    CU_add_test(s, "private_default", test_private_default);
    CU_add_test(s, "slow_and_huge", test_slow_and_huge);
    CU_add_test(s, "backend_codes", test_backend_codes);
    CU_add_test(s, "retry", test_retry);
    CU_add_test(s, "filters", test_filters);
    CU_add_test(s, "hostile_values", test_hostile_values);
    CU_add_test(s, "auth_kinds", test_auth_kinds);
    CU_add_test(s, "cancel", test_cancel);
    CU_add_test(s, "keep_alive", test_keep_alive);
    CU_add_test(s, "bad_specs", test_bad_specs);
}
