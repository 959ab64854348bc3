/* test_rpc_content.c - resources, prompts and completion over msgpack-RPC
 * (docs/protocol.md, "Resources, prompts and completion"), with the real
 * binary and the conformance fixture (tests/fixtures/conform_tools.c):
 * lists, reads of fixed URIs and of a template, prompts with arguments,
 * completion, what a caller whose toolsets lack the plugin sees (nothing),
 * and bad params of every kind, after which the host still serves. */
#include <CUnit/CUnit.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "integration/test_rpc_harness.h"

/* conform_tools, big_resource and echo; `host` (more host: keys) and
 * `toolsets` follow. */
static void start_with(rpc_srv *s, const char *host, const char *toolsets)
{
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "%s"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "  - name: conform_tools\n"
             "    path: @BUILD@/fixtures/conform_tools.so\n"
             "  - name: big_resource\n"
             "    path: @BUILD@/fixtures/big_resource.so\n"
             "toolsets:\n%s",
             host, toolsets);
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(s, &o) == 0);
}

static void start(rpc_srv *s, const char *toolsets)
{
    start_with(s, "", toolsets);
}

static const char all_tools[] = "  - name: public\n"
                                "    tools: [\"*\"]\n";

/* The str/bin `o` equals `s`. */
static bool is_str(const msgpack_object *o, const char *s)
{
    return o && th_rpc_obj_streq(o, s);
}

/* The str/bin `o` contains `needle`. */
static bool str_has(const msgpack_object *o, const char *needle)
{
    const char *p;
    size_t n;
    return o && th_rpc_obj_str(o, &p, &n) &&
           memmem(p, n, needle, strlen(needle)) != NULL;
}

/* The entry of `list` whose `key` is `val`. */
static const msgpack_object *find_by(const msgpack_object *list,
                                     const char *key, const char *val)
{
    if (!list || list->type != MSGPACK_OBJECT_ARRAY)
        return NULL;
    for (uint32_t i = 0; i < list->via.array.size; i++)
        if (is_str(th_rpc_map_get(&list->via.array.ptr[i], key), val))
            return &list->via.array.ptr[i];
    return NULL;
}

/* The error's message contains `needle`. */
static bool err_has(const rpc_res *r, const char *needle)
{
    return r->err && r->err->type == MSGPACK_OBJECT_ARRAY &&
           r->err->via.array.size == 2 &&
           str_has(&r->err->via.array.ptr[1], needle);
}

static void test_resources(void)
{
    rpc_srv s;
    start(&s, all_tools);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT_FATAL(rpc_call(c, "resources.list", "[]", &r) == 0 && r.res);
    CU_ASSERT(r.res->type == MSGPACK_OBJECT_ARRAY &&
              r.res->via.array.size == 3);
    const msgpack_object *e = find_by(r.res, "uri", "test://static-text");
    CU_ASSERT(e && is_str(th_rpc_map_get(e, "name"), "static-text") &&
              is_str(th_rpc_map_get(e, "mime_type"), "text/plain") &&
              is_str(th_rpc_map_get(e, "description"),
                     "A static text resource.") &&
              !th_rpc_map_get(e, "title"));
    CU_ASSERT(find_by(r.res, "uri", "test://static-binary") != NULL);
    CU_ASSERT(find_by(r.res, "uri", "test://template/{id}/data") == NULL);
    rpc_res_free(&r);
    CU_ASSERT_FATAL(rpc_call(c, "resources.templates", "[]", &r) == 0 &&
                    r.res);
    CU_ASSERT(r.res->type == MSGPACK_OBJECT_ARRAY &&
              r.res->via.array.size == 2); /* and big_resource's size://{n} */
    e = find_by(r.res, "uri_template", "test://template/{id}/data");
    CU_ASSERT(e && is_str(th_rpc_map_get(e, "name"), "template-data") &&
              is_str(th_rpc_map_get(e, "mime_type"), "application/json"));
    rpc_res_free(&r);

    /* a fixed URI: one text block naming its URI and type */
    CU_ASSERT_FATAL(rpc_call(c, "resources.read", "[\"test://static-text\"]",
                             &r) == 0 && r.res);
    const msgpack_object *ct = th_rpc_map_get(r.res, "contents");
    CU_ASSERT_FATAL(ct && ct->type == MSGPACK_OBJECT_ARRAY &&
                    ct->via.array.size == 1);
    const msgpack_object *b = &ct->via.array.ptr[0];
    CU_ASSERT(is_str(th_rpc_map_get(b, "type"), "text"));
    CU_ASSERT(is_str(th_rpc_map_get(b, "text"),
                     "This is the content of the static text resource."));
    CU_ASSERT(is_str(th_rpc_map_get(b, "uri"), "test://static-text"));
    CU_ASSERT(is_str(th_rpc_map_get(b, "mime_type"), "text/plain"));
    rpc_res_free(&r);
    /* bytes: a resource block whose data is bin */
    CU_ASSERT_FATAL(rpc_call(c, "resources.read",
                             "[\"test://static-binary\"]", &r) == 0 && r.res);
    ct = th_rpc_map_get(r.res, "contents");
    CU_ASSERT_FATAL(ct && ct->type == MSGPACK_OBJECT_ARRAY &&
                    ct->via.array.size == 1);
    b = &ct->via.array.ptr[0];
    const msgpack_object *d = th_rpc_map_get(b, "data");
    CU_ASSERT(is_str(th_rpc_map_get(b, "type"), "resource"));
    CU_ASSERT(d && d->type == MSGPACK_OBJECT_BIN && d->via.bin.size > 8 &&
              memcmp(d->via.bin.ptr, "\x89PNG", 4) == 0);
    CU_ASSERT(is_str(th_rpc_map_get(b, "mime_type"), "image/png"));
    rpc_res_free(&r);
    /* a template */
    CU_ASSERT_FATAL(rpc_call(c, "resources.read",
                             "[\"test://template/42/data\"]", &r) == 0 &&
                    r.res);
    ct = th_rpc_map_get(r.res, "contents");
    CU_ASSERT_FATAL(ct && ct->type == MSGPACK_OBJECT_ARRAY &&
                    ct->via.array.size == 1);
    b = &ct->via.array.ptr[0];
    CU_ASSERT(str_has(th_rpc_map_get(b, "text"), "Data for ID: 42"));
    CU_ASSERT(is_str(th_rpc_map_get(b, "uri"), "test://template/42/data"));
    CU_ASSERT(is_str(th_rpc_map_get(b, "mime_type"), "application/json"));
    rpc_res_free(&r);
    /* not found: no such URI, the template's plugin says so, URIs that
     * only nearly match the template (a '/' in the variable, an empty
     * one) */
    static const char *const missing[] = {
        "[\"test://nothing\"]", "[\"test://template/missing/data\"]",
        "[\"test://template/a/b/data\"]", "[\"test://template//data\"]"};
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++) {
        CU_ASSERT(rpc_call(c, "resources.read", missing[i], &r) == 0 &&
                  rpc_is_error(&r, TH_ENOTFOUND) && err_has(&r, "not found"));
        rpc_res_free(&r);
    }
    /* the plugin refuses: its reason reaches the caller */
    char big[256];
    snprintf(big, sizeof big, "[\"test://template/%070d/data\"]", 7);
    CU_ASSERT(rpc_call(c, "resources.read", big, &r) == 0 &&
              rpc_is_error(&r, TH_EFAILED) &&
              err_has(&r, "an id of at most 64 characters"));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_alive(&s));
    /* a clean exit: no leak (valgrind, LeakSanitizer) nor error */
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

static void test_prompts(void)
{
    rpc_srv s;
    start(&s, all_tools);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT_FATAL(rpc_call(c, "prompts.list", "[]", &r) == 0 && r.res);
    CU_ASSERT(r.res->type == MSGPACK_OBJECT_ARRAY &&
              r.res->via.array.size == 4);
    const msgpack_object *p =
        find_by(r.res, "name", "test_prompt_with_arguments");
    CU_ASSERT_FATAL(p != NULL);
    CU_ASSERT(is_str(th_rpc_map_get(p, "description"),
                     "A prompt with two required arguments."));
    const msgpack_object *args = th_rpc_map_get(p, "arguments");
    CU_ASSERT_FATAL(args && args->type == MSGPACK_OBJECT_ARRAY &&
                    args->via.array.size == 2);
    const msgpack_object *a1 = find_by(args, "name", "arg1");
    const msgpack_object *req = th_rpc_map_get(a1, "required");
    CU_ASSERT(a1 && is_str(th_rpc_map_get(a1, "description"),
                           "First test argument") &&
              req && req->type == MSGPACK_OBJECT_BOOLEAN &&
              req->via.boolean);
    p = find_by(r.res, "name", "test_simple_prompt");
    args = th_rpc_map_get(p, "arguments");
    CU_ASSERT(args && args->type == MSGPACK_OBJECT_ARRAY &&
              args->via.array.size == 0);
    rpc_res_free(&r);

    CU_ASSERT_FATAL(rpc_call(c, "prompts.get",
                             "[\"test_prompt_with_arguments\", "
                             "{\"arg1\": \"x\", \"arg2\": \"y\"}]",
                             &r) == 0 && r.res);
    CU_ASSERT(is_str(th_rpc_map_get(r.res, "description"),
                     "A prompt with two required arguments."));
    const msgpack_object *ms = th_rpc_map_get(r.res, "messages");
    CU_ASSERT_FATAL(ms && ms->type == MSGPACK_OBJECT_ARRAY &&
                    ms->via.array.size == 1);
    const msgpack_object *m = &ms->via.array.ptr[0];
    const msgpack_object *ct = th_rpc_map_get(m, "content");
    CU_ASSERT(is_str(th_rpc_map_get(m, "role"), "user"));
    CU_ASSERT(ct && ct->type == MSGPACK_OBJECT_MAP &&
              is_str(th_rpc_map_get(ct, "type"), "text") &&
              is_str(th_rpc_map_get(ct, "text"),
                     "Prompt with arguments: arg1='x', arg2='y'"));
    rpc_res_free(&r);
    /* no arguments at all, args omitted or nil */
    static const char *const simple[] = {"[\"test_simple_prompt\"]",
                                         "[\"test_simple_prompt\", null]",
                                         "[\"test_simple_prompt\", {}]"};
    for (size_t i = 0; i < sizeof simple / sizeof *simple; i++) {
        CU_ASSERT(rpc_call(c, "prompts.get", simple[i], &r) == 0 && r.res &&
                  str_has(th_rpc_map_get(
                              th_rpc_map_get(&th_rpc_map_get(r.res,
                                                             "messages")
                                                  ->via.array.ptr[0],
                                             "content"),
                              "text"),
                          "simple prompt"));
        rpc_res_free(&r);
    }
    /* an image and a text: two messages, the image's bytes as bin */
    CU_ASSERT_FATAL(rpc_call(c, "prompts.get", "[\"test_prompt_with_image\"]",
                             &r) == 0 && r.res);
    ms = th_rpc_map_get(r.res, "messages");
    CU_ASSERT_FATAL(ms && ms->type == MSGPACK_OBJECT_ARRAY &&
                    ms->via.array.size == 2);
    ct = th_rpc_map_get(&ms->via.array.ptr[0], "content");
    const msgpack_object *d = th_rpc_map_get(ct, "data");
    CU_ASSERT(is_str(th_rpc_map_get(ct, "type"), "image") &&
              is_str(th_rpc_map_get(ct, "mime_type"), "image/png") && d &&
              d->type == MSGPACK_OBJECT_BIN &&
              memcmp(d->via.bin.ptr, "\x89PNG", 4) == 0);
    rpc_res_free(&r);
    /* a required argument missing, one not a string, one unknown:
     * invalid_arguments naming it */
    CU_ASSERT(rpc_call(c, "prompts.get",
                       "[\"test_prompt_with_arguments\", {\"arg1\": \"x\"}]",
                       &r) == 0 &&
              rpc_is_error(&r, TH_EARGS) && err_has(&r, "arg2"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "prompts.get",
                       "[\"test_prompt_with_arguments\", "
                       "{\"arg1\": \"x\", \"arg2\": 5}]",
                       &r) == 0 &&
              rpc_is_error(&r, TH_EARGS) && err_has(&r, "arg2"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "prompts.get",
                       "[\"test_prompt_with_arguments\", "
                       "{\"arg1\": \"x\", \"arg2\": \"y\", \"arg3\": \"z\"}]",
                       &r) == 0 &&
              rpc_is_error(&r, TH_EARGS) && err_has(&r, "arg3"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "prompts.get", "[\"no_such_prompt\"]", &r) == 0 &&
              rpc_is_error(&r, TH_ENOTFOUND) &&
              err_has(&r, "no_such_prompt"));
    rpc_res_free(&r);
    th_rpc_client_close(c);
    /* a clean exit: no leak (valgrind, LeakSanitizer) nor error */
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* The completion's values, joined with ',' into buf; false when the
 * answer is not {values: [str...], has_more: false}. */
static bool values(const rpc_res *r, char *buf, size_t cap)
{
    const msgpack_object *v = th_rpc_map_get(r->res, "values");
    const msgpack_object *more = th_rpc_map_get(r->res, "has_more");
    if (!v || v->type != MSGPACK_OBJECT_ARRAY || !more ||
        more->type != MSGPACK_OBJECT_BOOLEAN || more->via.boolean)
        return false;
    size_t n = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < v->via.array.size; i++) {
        const char *p;
        size_t len;
        if (!th_rpc_obj_str(&v->via.array.ptr[i], &p, &len))
            return false;
        n += (size_t)snprintf(buf + n, cap - n, "%s%.*s", i ? "," : "",
                              (int)len, p);
        if (n >= cap)
            return false;
    }
    return true;
}

static void test_complete(void)
{
    rpc_srv s;
    start(&s, all_tools);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    char got[256];
    CU_ASSERT(rpc_call(c, "completion.complete",
                       "[{\"ref\": {\"type\": \"prompt\", \"name\": "
                       "\"test_prompt_with_arguments\"}, \"argument\": "
                       "{\"name\": \"arg1\", \"value\": \"par\"}}]",
                       &r) == 0 &&
              r.res && values(&r, got, sizeof got) &&
              strcmp(got, "paris,park,party") == 0);
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "completion.complete",
                       "[{\"ref\": {\"type\": \"resource\", \"uri\": "
                       "\"test://template/{id}/data\"}, \"argument\": "
                       "{\"name\": \"id\", \"value\": \"12\"}}]",
                       &r) == 0 &&
              r.res && values(&r, got, sizeof got) &&
              strcmp(got, "123,124") == 0);
    rpc_res_free(&r);
    /* nothing typed yet: every value */
    CU_ASSERT(rpc_call(c, "completion.complete",
                       "[{\"ref\": {\"type\": \"resource\", \"uri\": "
                       "\"test://template/{id}/data\"}, \"argument\": "
                       "{\"name\": \"id\", \"value\": \"\"}}]",
                       &r) == 0 &&
              r.res && values(&r, got, sizeof got) &&
              strcmp(got, "123,124,200") == 0);
    rpc_res_free(&r);
    /* a prompt that completes nothing: no values, no error */
    CU_ASSERT(rpc_call(c, "completion.complete",
                       "[{\"ref\": {\"type\": \"prompt\", \"name\": "
                       "\"test_prompt_with_embedded_resource\"}, "
                       "\"argument\": {\"name\": \"resourceUri\", "
                       "\"value\": \"x\"}}]",
                       &r) == 0 &&
              r.res && values(&r, got, sizeof got) && got[0] == '\0');
    rpc_res_free(&r);
    /* not found: the prompt, its argument, the template */
    static const char *const missing[] = {
        "[{\"ref\": {\"type\": \"prompt\", \"name\": \"nope\"}, "
        "\"argument\": {\"name\": \"arg1\", \"value\": \"p\"}}]",
        "[{\"ref\": {\"type\": \"prompt\", \"name\": "
        "\"test_prompt_with_arguments\"}, \"argument\": {\"name\": "
        "\"arg9\", \"value\": \"p\"}}]",
        "[{\"ref\": {\"type\": \"resource\", \"uri\": \"test://static-text\"}"
        ", \"argument\": {\"name\": \"id\", \"value\": \"1\"}}]"};
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++) {
        CU_ASSERT(rpc_call(c, "completion.complete", missing[i], &r) == 0 &&
                  rpc_is_error(&r, TH_ENOTFOUND));
        rpc_res_free(&r);
    }
    th_rpc_client_close(c);
    /* a clean exit: no leak (valgrind, LeakSanitizer) nor error */
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* A caller whose toolsets have no tool of conform_tools: no resources, no
 * prompts, and reading, getting or completing theirs is not_found, as if
 * they did not exist (the plugin is never asked). */
static void test_acl(void)
{
    rpc_srv s;
    start(&s, "  - name: public\n"
              "    tools: [echo]\n"
              "  - name: other\n"
              "    tools: [test_simple_text]\n"
              "    allow_users: [nobody]\n");
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    static const char *const lists[] = {"resources.list",
                                        "resources.templates",
                                        "prompts.list"};
    for (size_t i = 0; i < 3; i++) {
        CU_ASSERT(rpc_call(c, lists[i], "[]", &r) == 0 && r.res &&
                  r.res->type == MSGPACK_OBJECT_ARRAY &&
                  r.res->via.array.size == 0);
        rpc_res_free(&r);
    }
    static const struct {
        const char *method, *params;
    } hidden[] = {
        {"resources.read", "[\"test://static-text\"]"},
        {"resources.read", "[\"test://template/1/data\"]"},
        {"prompts.get", "[\"test_simple_prompt\"]"},
        {"completion.complete",
         "[{\"ref\": {\"type\": \"prompt\", \"name\": "
         "\"test_prompt_with_arguments\"}, \"argument\": {\"name\": "
         "\"arg1\", \"value\": \"p\"}}]"},
    };
    for (size_t i = 0; i < sizeof hidden / sizeof *hidden; i++) {
        CU_ASSERT(rpc_call(c, hidden[i].method, hidden[i].params, &r) == 0 &&
                  rpc_is_error(&r, TH_ENOTFOUND));
        rpc_res_free(&r);
    }
    th_rpc_client_close(c);
    /* a clean exit: no leak (valgrind, LeakSanitizer) nor error */
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* Params of the wrong shape, type or size: invalid_request naming what
 * is wrong; the connection and the host go on. */
static void test_bad_params(void)
{
    rpc_srv s;
    start(&s, all_tools);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    char *long_uri = malloc(3000);
    CU_ASSERT_FATAL(long_uri != NULL);
    memset(long_uri, 'u', 2990);
    memcpy(long_uri, "[\"", 2);
    memcpy(long_uri + 2988, "\"]", 3);
    static const struct {
        const char *method, *params, *says;
    } bad[] = {
        {"resources.list", "[1]", "takes []"},
        {"resources.templates", "[\"x\"]", "takes []"},
        {"prompts.list", "[{}]", "takes []"},
        {"resources.read", "[]", "takes [uri]"},
        {"resources.read", "[\"a\", \"b\"]", "takes [uri]"},
        {"resources.read", "[1]", "uri must be a string, got an integer"},
        {"resources.read", "[null]", "uri must be a string, got nil"},
        {"resources.read", "[\"\"]", "1 to 2048 bytes"},
        {"resources.read", NULL, "1 to 2048 bytes"}, /* long_uri */
        {"prompts.get", "[]", "takes [name, args?]"},
        {"prompts.get", "[\"a\", {}, {}]", "takes [name, args?]"},
        {"prompts.get", "[{}]", "name must be a string, got a map"},
        {"prompts.get", "[\"test_simple_prompt\", [1]]",
         "args must be a map"},
        {"prompts.get", "[\"test_simple_prompt\", \"a=b\"]",
         "args must be a map"},
        {"completion.complete", "[]", "takes [{ref"},
        {"completion.complete", "[1]", "got an integer"},
        {"completion.complete", "[{}, {}]", "takes [{ref"},
        {"completion.complete", "[{}]", "ref and argument must be maps"},
        {"completion.complete",
         "[{\"ref\": [], \"argument\": {\"name\": \"a\", \"value\": \"\"}}]",
         "ref and argument must be maps"},
        {"completion.complete",
         "[{\"ref\": {\"type\": \"tool\", \"name\": \"echo\"}, "
         "\"argument\": {\"name\": \"a\", \"value\": \"\"}}]",
         "ref.type must be"},
        {"completion.complete",
         "[{\"ref\": {\"type\": \"prompt\", \"uri\": \"x\"}, "
         "\"argument\": {\"name\": \"a\", \"value\": \"\"}}]",
         "ref.name must be a string, got nothing"},
        {"completion.complete",
         "[{\"ref\": {\"type\": \"resource\", \"uri\": 5}, "
         "\"argument\": {\"name\": \"a\", \"value\": \"\"}}]",
         "ref.uri must be a string"},
        {"completion.complete",
         "[{\"ref\": {\"type\": \"prompt\", \"name\": \"p\"}, "
         "\"argument\": {\"value\": \"\"}}]",
         "argument.name must be a string"},
        {"completion.complete",
         "[{\"ref\": {\"type\": \"prompt\", \"name\": \"p\"}, "
         "\"argument\": {\"name\": \"a\"}}]",
         "argument.value must be a string"},
        {"completion.complete",
         "[{\"ref\": {\"type\": \"prompt\", \"name\": \"p\"}, "
         "\"argument\": {\"name\": \"a\", \"value\": 1.5}}]",
         "argument.value must be a string"},
    };
    rpc_res r;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *p = bad[i].params ? bad[i].params : long_uri;
        int rc = rpc_call(c, bad[i].method, p, &r);
        bool ok = rc == 0 && rpc_is_error(&r, TH_EINVAL) &&
                  err_has(&r, bad[i].says);
        if (!ok)
            fprintf(stderr, "bad params %zu (%s): not refused as '%s'\n", i,
                    bad[i].method, bad[i].says);
        CU_ASSERT(ok);
        rpc_res_free(&r);
    }
    free(long_uri);
    /* an argument nested 24 levels deep (the frame around it is 4 more,
     * just below what a frame may nest):
     * refused by the prompt's declared type, nothing else */
    char deep[256];
    size_t n = (size_t)snprintf(deep, sizeof deep, "[\"test_prompt_with_"
                                "arguments\", {\"arg1\": \"x\", \"arg2\": ");
    for (int i = 0; i < 24; i++)
        deep[n++] = '[';
    for (int i = 0; i < 24; i++)
        deep[n++] = ']';
    snprintf(deep + n, sizeof deep - n, "}]");
    CU_ASSERT(rpc_call(c, "prompts.get", deep, &r) == 0 &&
              rpc_is_error(&r, TH_EARGS) && err_has(&r, "arg2"));
    rpc_res_free(&r);
    /* the same connection still works */
    CU_ASSERT(rpc_call(c, "resources.read", "[\"test://static-text\"]",
                       &r) == 0 && r.res);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_alive(&s));
    /* a clean exit: no leak (valgrind, LeakSanitizer) nor error */
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* The blocks of one answer hold at most 16 MiB or half of
 * host.max_outbuf: with 64 KiB (the least it may be), 32 KiB.  20000
 * bytes fit; 40000 are refused as tool_error naming the limit, logged;
 * the connection goes on. */
static void test_budget(void)
{
    rpc_srv s;
    start_with(&s, "  max_outbuf: 64KiB\n", all_tools);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT_FATAL(rpc_call(c, "resources.read", "[\"size://20000\"]",
                             &r) == 0 && r.res);
    const msgpack_object *ct = th_rpc_map_get(r.res, "contents");
    const msgpack_object *t =
        ct && ct->type == MSGPACK_OBJECT_ARRAY && ct->via.array.size == 1
            ? th_rpc_map_get(&ct->via.array.ptr[0], "text")
            : NULL;
    CU_ASSERT(t && t->type == MSGPACK_OBJECT_STR &&
              t->via.str.size == 20000);
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "resources.read", "[\"size://40000\"]", &r) == 0 &&
              rpc_is_error(&r, TH_ETOOL) &&
              err_has(&r, "the content passes 32768 bytes"));
    rpc_res_free(&r);
    CU_ASSERT(rpc_log_wait(&s, "the content passes 32768 bytes",
                           rpc_wait_ms()));
    CU_ASSERT(rpc_call(c, "resources.read", "[\"size://10\"]", &r) == 0 &&
              r.res);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

void th_suite_rpc_content(void)
{
    CU_pSuite s = CU_add_suite("rpc_content", NULL, NULL);
    CU_add_test(s, "resources", test_resources);
    CU_add_test(s, "prompts", test_prompts);
    CU_add_test(s, "complete", test_complete);
    CU_add_test(s, "acl", test_acl);
    CU_add_test(s, "bad_params", test_bad_params);
    CU_add_test(s, "budget", test_budget);
}
