/* test_mcp_content.c - resources, prompts and completion (ABI 1.4): the
 * loader's checks of what a plugin declares (th_plugin_builtin), URI
 * template matching, content_add()'s refusals, and the MCP methods
 * against the conformance fixture (build/fixtures/conform_tools.so)
 * through the protocol core's transport interface:
 *
 *   load_checks      a bad URI, template, name, duplicate, missing read or
 *                    get, a prompt argument that is not a string: refused
 *                    at load with a message naming it
 *   template_match   {var} spans one or more characters other than / ? #
 *   input_schema     a tool's whole input as one JSON Schema: exported as
 *                    written, checked on each call ($ref, oneOf, ...),
 *                    refused at load with params, a non-object schema or
 *                    a keyword the validator does not know
 *   content_refusals a bad block fails the request (non-UTF-8 text, a bad
 *                    role, no mime type, a long name, a link in a read,
 *                    past the budget counting base64, escapes and strings,
 *                    a length that would wrap); a sink not entered (kept
 *                    past its callback) is never written through
 *   host_unique      a prompt name or resource URI of another plugin is
 *                    refused at registry add
 *   methods          list, read (text, blob, template, not found), get
 *                    (arguments checked), completion, subscribe (only to
 *                    what the session may read) and the update
 *                    notification (from the plugin's own resources only),
 *                    the subscription cap
 *   toolset_scope    a session whose toolset has none of the plugin's
 *                    tools is offered none of its resources or prompts
 */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "../../host/mcp/mcp.h"
#include "common/host_session.h"
#include "common/th_test.h"
#include "th/content.h"
#include "th/host.h"
#include "th/json.h"
#include "th/schema.h"
#include "toolhost/sdk.h"

/* ---- Load checks ----------------------------------------------------------- */

static int read_nothing(void *state, const toolhost_resource *res,
                        const char *uri, toolhost_content *out, char *err,
                        size_t err_size)
{
    (void)state, (void)res, (void)uri, (void)out, (void)err, (void)err_size;
    return TOOLHOST_OK;
}

static int get_nothing(void *state, const toolhost_prompt *p,
                       const uint8_t *args, size_t len, toolhost_content *out,
                       char *err, size_t err_size)
{
    (void)state, (void)p, (void)args, (void)len, (void)out, (void)err,
        (void)err_size;
    return TOOLHOST_OK;
}

#define RES(u, n, r)                                                          \
    {.struct_size = sizeof(toolhost_resource), .uri = (u), .name = (n),     \
     .read = (r)}
#define PROMPT(n, d, g)                                                       \
    {.struct_size = sizeof(toolhost_prompt), .name = (n), .description = (d), \
     .get = (g)}

/* Loads a descriptor with these resources and prompts: 0, or the error
 * whose message must hold `want`. */
static void load_expect(const toolhost_resource *res, uint32_t nres,
                        const toolhost_prompt *pr, uint32_t npr,
                        const char *want)
{
    toolhost_plugin d = {.struct_size = sizeof d,
                         .abi_major = TOOLHOST_ABI_MAJOR,
                         .abi_minor = TOOLHOST_ABI_MINOR,
                         .name = "ct",
                         .description = "content test",
                         .resources = res,
                         .n_resources = nres,
                         .prompts = pr,
                         .n_prompts = npr};
    th_plugin *p = NULL;
    th_error err;
    th_error_clear(&err);
    int rc = th_plugin_builtin(&d, &p, &err);
    if (!want) {
        CU_ASSERT_EQUAL(rc, 0);
        if (rc)
            fprintf(stderr, "\nunexpected: %s\n", err.msg);
        else
            CU_ASSERT_EQUAL(p->n_resources + p->n_prompts, nres + npr);
    } else {
        CU_ASSERT_EQUAL(rc, TH_ELOAD);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
        if (!strstr(err.msg, want))
            fprintf(stderr, "\nwanted '%s' in: %s\n", want, err.msg);
    }
    th_plugin_close(p);
}

static void test_load_checks(void)
{
    toolhost_resource good[] = {RES("docs://a", "a", read_nothing),
                                RES("db://{table}/{id}", "row", read_nothing)};
    load_expect(good, 2, NULL, 0, NULL);
    toolhost_resource r1[] = {RES("no scheme", "a", read_nothing)};
    load_expect(r1, 1, NULL, 0, "is not a URI");
    toolhost_resource r2[] = {RES("db://{a}{b}", "a", read_nothing)};
    load_expect(r2, 1, NULL, 0, "is not a URI");
    toolhost_resource r3[] = {RES("db://{}", "a", read_nothing)};
    load_expect(r3, 1, NULL, 0, "is not a URI");
    toolhost_resource r4[] = {RES("db://x}", "a", read_nothing)};
    load_expect(r4, 1, NULL, 0, "is not a URI");
    toolhost_resource r5[] = {RES("db://x", NULL, read_nothing)};
    load_expect(r5, 1, NULL, 0, "has no name");
    toolhost_resource r6[] = {RES("db://x", "x", NULL)};
    load_expect(r6, 1, NULL, 0, "no read function");
    toolhost_resource r7[] = {RES("db://x", "x", read_nothing),
                              RES("db://x", "y", read_nothing)};
    load_expect(r7, 2, NULL, 0, "appears twice");
    toolhost_resource r8[] = {
        RES("db://{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}", "x", read_nothing)};
    load_expect(r8, 1, NULL, 0, "is not a URI");
    load_expect(NULL, 1, NULL, 0, "resources: NULL");

    toolhost_prompt p1[] = {PROMPT("ok", "fine", get_nothing)};
    load_expect(NULL, 0, p1, 1, NULL);
    toolhost_prompt p2[] = {PROMPT("bad name!", "x", get_nothing)};
    load_expect(NULL, 0, p2, 1, "invalid name");
    toolhost_prompt p3[] = {PROMPT("p", NULL, get_nothing)};
    load_expect(NULL, 0, p3, 1, "has no description");
    toolhost_prompt p4[] = {PROMPT("p", "x", NULL)};
    load_expect(NULL, 0, p4, 1, "has no get function");
    toolhost_prompt p5[] = {PROMPT("p", "x", get_nothing),
                            PROMPT("p", "y", get_nothing)};
    load_expect(NULL, 0, p5, 2, "appears twice");
    static const toolhost_param num[] = {
        TH_SDK_PARAM("n", INTEGER, "A number.", TH_SDK_REQUIRED)};
    toolhost_prompt p6[] = {{.struct_size = sizeof(toolhost_prompt),
                             .name = "p", .description = "x",
                             .args = num, .n_args = 1, .get = get_nothing}};
    load_expect(NULL, 0, p6, 1, "is not a string");
}

static void test_template_match(void)
{
    CU_ASSERT(th_uri_template_match("t://x/{id}/data", "t://x/1/data"));
    CU_ASSERT(th_uri_template_match("t://x/{id}/data", "t://x/abc-9/data"));
    CU_ASSERT(!th_uri_template_match("t://x/{id}/data", "t://x//data"));
    CU_ASSERT(!th_uri_template_match("t://x/{id}/data", "t://x/a/b/data"));
    CU_ASSERT(!th_uri_template_match("t://x/{id}/data", "t://x/1/datax"));
    CU_ASSERT(!th_uri_template_match("t://x/{id}/data", "t://y/1/data"));
    CU_ASSERT(th_uri_template_match("t://{a}", "t://z"));
    CU_ASSERT(!th_uri_template_match("t://{a}", "t://z?q"));
    CU_ASSERT(th_uri_template_match("t://{a}.{b}", "t://x.y.z"));
    CU_ASSERT(th_uri_template_match("t://fixed", "t://fixed"));
    CU_ASSERT(!th_uri_template_match("t://fixed", "t://fixe"));
    /* a client's URI cannot make matching expensive: no backtracking (an
     * exponential matcher would not return here in a lifetime) */
    char uri[2100] = "t://";
    for (size_t i = 4; i < 2040; i++)
        uri[i] = i % 2 ? '.' : 'x';
    uri[2040] = '\0';
    CU_ASSERT(!th_uri_template_match("t://{a}.{b}.{c}.{d}.{e}.{f}.{g}.{h}!",
                                     uri));
    CU_ASSERT(th_uri_template_match("t://{a}.{b}.{c}.{d}.{e}.{f}.{g}.{h}",
                                    uri));
}

/* ---- A tool's whole input schema (ABI 1.4 input_schema) ------------------- */

static int run_nothing(void *state, const toolhost_tool *tool,
                       toolhost_call *call, const uint8_t *args, size_t len)
{
    (void)state, (void)tool, (void)call, (void)args, (void)len;
    return TOOLHOST_OK;
}

static int load_schema_tool(const char *schema, uint32_t n_params,
                            th_plugin **p, th_error *err)
{
    static const toolhost_param one[] = {
        TH_SDK_PARAM("x", STRING, "An x.", TH_SDK_REQUIRED)};
    static toolhost_tool t[1];
    t[0] = (toolhost_tool){.struct_size = sizeof(toolhost_tool),
                           .name = "st", .description = "schema tool",
                           .stdout_type = TOOLHOST_SEM_TEXT,
                           .stderr_type = TOOLHOST_SEM_ERROR,
                           .execute = run_nothing, .params = one,
                           .n_params = n_params, .input_schema = schema};
    static toolhost_plugin d;
    d = (toolhost_plugin){.struct_size = sizeof d,
                          .abi_major = TOOLHOST_ABI_MAJOR,
                          .abi_minor = TOOLHOST_ABI_MINOR, .name = "sp",
                          .description = "schema plugin", .tools = t,
                          .n_tools = 1};
    th_error_clear(err);
    return th_plugin_builtin(&d, p, err);
}

/* msgpack of a JSON text, into b (reset). */
static const uint8_t *mp_of(const char *json, th_buf *b, size_t *len)
{
    json_t *j = json_loads(json, 0, NULL);
    th_buf_reset(b);
    CU_ASSERT_EQUAL_FATAL(th_json_to_msgpack(j, b), 0);
    json_decref(j);
    *len = b->len;
    return b->data;
}

static void test_input_schema(void)
{
    static const char schema[] =
        "{\"$schema\": \"https://json-schema.org/draft/2020-12/schema\","
        " \"type\": \"object\", \"$defs\": {\"n\": {\"type\": "
        "\"integer\", \"minimum\": 1}}, \"properties\": {\"k\": "
        "{\"$ref\": \"#/$defs/n\"}, \"mode\": {\"oneOf\": [{\"const\": "
        "\"a\"}, {\"const\": \"b\"}]}}, \"required\": [\"k\"], "
        "\"additionalProperties\": false}";
    th_plugin *p = NULL;
    th_error err;
    CU_ASSERT_EQUAL_FATAL(load_schema_tool(schema, 0, &p, &err), 0);
    const th_tool *t = &p->tools[0];
    json_t *in = th_schema_params(t);
    json_t *want = json_loads(schema, 0, NULL);
    CU_ASSERT(json_equal(in, want)); /* exported as written */
    json_decref(in);
    json_decref(want);
    th_buf b, out;
    th_buf_init(&b);
    th_buf_init(&out);
    size_t len;
    const uint8_t *a, *ao;
    size_t ao_len;
    a = mp_of("{\"k\": 3, \"mode\": \"b\"}", &b, &len);
    CU_ASSERT_EQUAL(th_validate_call(t, a, len, &out, &ao, &ao_len, &err), 0);
    a = mp_of("{\"k\": 0}", &b, &len);
    CU_ASSERT_EQUAL(th_validate_call(t, a, len, &out, &ao, &ao_len, &err),
                    TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "Error parsing arguments for st"));
    a = mp_of("{\"k\": 2, \"mode\": \"c\"}", &b, &len);
    CU_ASSERT_EQUAL(th_validate_call(t, a, len, &out, &ao, &ao_len, &err),
                    TH_EARGS);
    a = mp_of("{\"k\": 2, \"zz\": 1}", &b, &len);
    CU_ASSERT_EQUAL(th_validate_call(t, a, len, &out, &ao, &ao_len, &err),
                    TH_EARGS);
    CU_ASSERT_EQUAL(th_validate_call(t, NULL, 0, &out, &ao, &ao_len, &err),
                    TH_EARGS); /* k is required */
    th_buf_destroy(&b);
    th_buf_destroy(&out);
    th_plugin_close(p);

    /* refused at load: params too, not an object schema, bad JSON, a
     * keyword the validator does not know */
    CU_ASSERT_EQUAL(load_schema_tool(schema, 1, &p, &err), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "both params and an input_schema"));
    CU_ASSERT_EQUAL(load_schema_tool("{\"type\": \"array\"}", 0, &p, &err),
                    TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "\"type\": \"object\""));
    CU_ASSERT_EQUAL(load_schema_tool("{nope", 0, &p, &err), TH_ELOAD);
    CU_ASSERT_EQUAL(load_schema_tool("{\"type\": \"object\", "
                                     "\"unevaluatedProperties\": false}",
                                     0, &p, &err),
                    TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "unevaluatedProperties"));
}

/* ---- content_add ---------------------------------------------------------- */

static void test_content_refusals(void)
{
    toolhost_host_api api;
    memset(&api, 0, sizeof api);
    api.struct_size = sizeof api;
    th_content_api_fill(&api);
    th_content c;
    th_content_init(&c, TH_CONTENT_PROMPT, 4096);
    c.pub.host = &api;
    /* a sink nobody entered (kept past its callback, another thread's):
     * refused before it is touched */
    CU_ASSERT_EQUAL(th_sdk_prompt_text(&c.pub, "user", "hello"),
                    TOOLHOST_ESTATE);
    CU_ASSERT_EQUAL(c.n, 0);
    th_content_enter(&c);
    CU_ASSERT_EQUAL(th_sdk_prompt_text(&c.pub, "user", "hello"), 0);
    CU_ASSERT_FALSE(c.bad);
    CU_ASSERT_EQUAL(th_sdk_prompt_text(&c.pub, "system", "x"),
                    TOOLHOST_EINVAL);
    CU_ASSERT(c.bad);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.why, "role"));
    th_content_leave();
    th_content_free(&c);

#define FRESH(mode, max)                                                      \
    do {                                                                      \
        th_content_init(&c, (mode), (max));                                   \
        c.pub.host = &api;                                                    \
        th_content_enter(&c);                                                 \
    } while (0)
#define DONE()                                                                \
    do {                                                                      \
        th_content_leave();                                                   \
        th_content_free(&c);                                                  \
    } while (0)
    FRESH(TH_CONTENT_PROMPT, 4096);
    CU_ASSERT_EQUAL(th_sdk_prompt_text(&c.pub, NULL, "\xff\xfe"),
                    TOOLHOST_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.why, "UTF-8"));
    DONE();
    FRESH(TH_CONTENT_PROMPT, 4096);
    CU_ASSERT_EQUAL(th_sdk_prompt_image(&c.pub, NULL, NULL, "x", 1),
                    TOOLHOST_EINVAL);
    DONE();
    FRESH(TH_CONTENT_PROMPT, 4096);
    char longname[300];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CU_ASSERT_EQUAL(th_sdk_prompt_link(&c.pub, NULL, "a://b", longname, NULL),
                    TOOLHOST_EINVAL);
    DONE();
    FRESH(TH_CONTENT_READ, 4096);
    CU_ASSERT_EQUAL(th_sdk_prompt_link(&c.pub, NULL, "a://b", "b", NULL),
                    TOOLHOST_EINVAL);
    DONE();

    /* the budget counts what the answer holds: 128 per block, the
     * strings, base64's growth of bytes, JSON's escapes of text */
    FRESH(TH_CONTENT_READ, 300);
    char big[200] = {0};
    CU_ASSERT_EQUAL(th_sdk_content_bytes(&c.pub, "a/b", big, 120), 0);
    CU_ASSERT_EQUAL(c.bytes, 128 + 120 + 40 + 4 + 3);
    CU_ASSERT_EQUAL(th_sdk_content_bytes(&c.pub, "a/b", big, 1),
                    TOOLHOST_ENOMEM);
    CU_ASSERT(c.bad);
    DONE();
    FRESH(TH_CONTENT_READ, 128 + 10 + 50);
    CU_ASSERT_EQUAL(th_sdk_content_text(&c.pub, "\x01\x01\x01\x01\x01"
                                                "\x01\x01\x01\x01\x01"),
                    0);
    DONE();
    FRESH(TH_CONTENT_READ, 128 + 10 + 50 - 1);
    CU_ASSERT_EQUAL(th_sdk_content_text(&c.pub, "\x01\x01\x01\x01\x01"
                                                "\x01\x01\x01\x01\x01"),
                    TOOLHOST_ENOMEM);
    DONE();
    /* a length that would wrap the sums is refused before anything is
     * read (the 1-byte buffer is never touched past its end) */
    FRESH(TH_CONTENT_READ, 0);
    CU_ASSERT_EQUAL(th_sdk_content_bytes(&c.pub, "a/b", big,
                                         (size_t)0xC000000000000000ull),
                    TOOLHOST_ENOMEM);
    DONE();

    FRESH(TH_CONTENT_COMPLETE, 0);
    CU_ASSERT_EQUAL(th_sdk_content_bytes(&c.pub, "a/b", "x", 1),
                    TOOLHOST_EINVAL);
    DONE();
    FRESH(TH_CONTENT_COMPLETE, 0);
    for (int i = 0; i < 150; i++)
        CU_ASSERT_EQUAL(th_sdk_complete_value(&c.pub, "v"), 0);
    CU_ASSERT_EQUAL(c.n, 100);
    CU_ASSERT_EQUAL(c.dropped, 50);
    DONE();
    /* an older host: the SDK says so instead of calling a missing member */
    api.struct_size = offsetof(toolhost_host_api, content_add);
    FRESH(TH_CONTENT_READ, 0);
    CU_ASSERT_EQUAL(th_sdk_content_text(&c.pub, "x"), TOOLHOST_EINVAL);
    CU_ASSERT_EQUAL(c.n, 0);
    DONE();
#undef FRESH
#undef DONE
}

/* Prompt names and resource URIs are unique across the host: the
 * registry refuses the second plugin, as it does a repeated tool name. */
static void test_host_unique(void)
{
    toolhost_prompt pa[] = {PROMPT("review", "one", get_nothing)};
    toolhost_resource ra[] = {RES("docs://a", "a", read_nothing)};
    toolhost_plugin d1 = {.struct_size = sizeof d1,
                          .abi_major = TOOLHOST_ABI_MAJOR,
                          .abi_minor = TOOLHOST_ABI_MINOR, .name = "p1",
                          .description = "one", .prompts = pa,
                          .n_prompts = 1, .resources = ra, .n_resources = 1};
    toolhost_plugin d2 = d1, d3 = d1;
    d2.name = "p2";
    d2.n_resources = 0; /* the same prompt */
    d3.name = "p3";
    d3.n_prompts = 0;   /* the same resource */
    th_registry *reg = th_registry_new();
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    th_plugin *p1, *p2, *p3;
    th_error err;
    CU_ASSERT_EQUAL_FATAL(th_plugin_builtin(&d1, &p1, &err), 0);
    CU_ASSERT_EQUAL_FATAL(th_plugin_builtin(&d2, &p2, &err), 0);
    CU_ASSERT_EQUAL_FATAL(th_plugin_builtin(&d3, &p3, &err), 0);
    CU_ASSERT_EQUAL(th_registry_add(reg, p1, &err), 0);
    CU_ASSERT_EQUAL(th_registry_add(reg, p2, &err), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "prompt 'review'"));
    CU_ASSERT_EQUAL(th_registry_add(reg, p3, &err), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "resource 'docs://a'"));
    th_plugin_unref(p2);
    th_plugin_unref(p3);
    th_registry_free(reg);
}

/* ---- Over MCP ---------------------------------------------------------------- */

typedef struct cap {
    pthread_mutex_t mu;
    json_t *sent; /* messages */
} cap;

static void cap_send(void *ud, const json_t *msg, const json_t *req)
{
    (void)req;
    cap *c = ud;
    pthread_mutex_lock(&c->mu);
    json_array_append_new(c->sent, json_deep_copy(msg));
    pthread_mutex_unlock(&c->mu);
}

/* The response to request id (answered at once: these methods run on the
 * input thread), borrowed from c->sent, or NULL. */
static json_t *resp(cap *c, json_int_t id)
{
    size_t i;
    json_t *v, *hit = NULL;
    pthread_mutex_lock(&c->mu);
    json_array_foreach(c->sent, i, v)
    {
        json_t *j = json_object_get(v, "id");
        if (!json_object_get(v, "method") && json_is_integer(j) &&
            json_integer_value(j) == id)
            hit = v;
    }
    pthread_mutex_unlock(&c->mu);
    return hit;
}

static json_int_t next_id;

/* Sends a request; its result (borrowed), or NULL with *code set to the
 * error's code. */
static json_t *rpc(th_mcp_session *m, cap *c, const char *method,
                   const char *params, int *code)
{
    char text[2048];
    json_int_t id = ++next_id;
    snprintf(text, sizeof text,
             "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"method\":\"%s\","
             "\"params\":%s}",
             (long long)id, method, params ? params : "{}");
    th_mcp_session_input(m, text, strlen(text));
    json_t *r = resp(c, id);
    *code = 1;
    if (!r)
        return NULL;
    json_t *e = json_object_get(r, "error");
    *code = e ? (int)json_integer_value(json_object_get(e, "code")) : 0;
    if (e && getenv("TH_TEST_VERBOSE"))
        fprintf(stderr, "%s: %s\n", method,
                json_string_value(json_object_get(e, "message")));
    return json_object_get(r, "result");
}

/* notifications/resources/updated sent so far, each checked to name
 * test://watched-resource. */
static size_t n_updates(cap *c)
{
    size_t n = 0, i;
    json_t *v;
    pthread_mutex_lock(&c->mu);
    json_array_foreach(c->sent, i, v)
    {
        const char *mth = json_string_value(json_object_get(v, "method"));
        if (mth && strcmp(mth, "notifications/resources/updated") == 0) {
            n++;
            const char *u = json_string_value(
                json_object_get(json_object_get(v, "params"), "uri"));
            CU_ASSERT(u && strcmp(u, "test://watched-resource") == 0);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

static const char *msg_of(cap *c)
{
    pthread_mutex_lock(&c->mu);
    json_t *last = json_array_get(c->sent, json_array_size(c->sent) - 1);
    pthread_mutex_unlock(&c->mu);
    return json_string_value(
        json_object_get(json_object_get(last, "error"), "message"));
}

typedef struct fx {
    th_host *h;
    th_mcp_session *m;
    cap c;
    json_int_t init_id;
} fx;

static bool fx_open(fx *f, const char *extra, const char *toolset)
{
    memset(f, 0, sizeof *f);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "host:\n  log_level: error\n  shutdown_grace: 50ms\n"
             "plugins:\n"
             "  - name: conform_tools\n    path: %s\n"
             "  - name: echo\n    path: %s\n"
             "toolsets:\n"
             "  - name: all\n    tools: [\"*\"]\n"
             "  - name: echo_only\n    tools: [echo]\n"
             "%s",
             th_test_build_path("fixtures/conform_tools.so"),
             th_test_build_path("plugins/echo.so"), extra ? extra : "");
    f->h = th_test_host_open("content.yaml", yaml);
    if (!f->h)
        return false;
    pthread_mutex_init(&f->c.mu, NULL);
    f->c.sent = json_array();
    th_mcp_transport t = {.send = cap_send};
    th_principal who = {.uid = (uint32_t)getuid(), .gid = (uint32_t)getgid()};
    th_mcp_opts o = {.toolset = toolset};
    th_error err;
    th_error_clear(&err);
    f->m = th_mcp_session_new(f->h, &who, &t, &f->c, &o, &err);
    if (!f->m)
        return false;
    int code;
    rpc(f->m, &f->c, "initialize",
        "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}", &code);
    f->init_id = next_id;
    return code == 0;
}

static void fx_close(fx *f)
{
    if (f->m)
        th_mcp_session_free(f->m);
    if (f->h)
        th_host_close(f->h);
    json_decref(f->c.sent);
    pthread_mutex_destroy(&f->c.mu);
}

static void test_methods(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_open(&f, "mcp:\n  max_subscriptions: 2\n", NULL));
    int code;
    /* initialize declared the capabilities */
    json_t *init = resp(&f.c, f.init_id);
    json_t *caps = json_object_get(json_object_get(init, "result"),
                                   "capabilities");
    CU_ASSERT(json_is_true(json_object_get(json_object_get(caps, "resources"),
                                           "subscribe")));
    CU_ASSERT_PTR_NOT_NULL(json_object_get(caps, "prompts"));
    CU_ASSERT_PTR_NOT_NULL(json_object_get(caps, "completions"));

    json_t *r = rpc(f.m, &f.c, "resources/list", NULL, &code);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(r, "resources")), 3);
    r = rpc(f.m, &f.c, "resources/templates/list", NULL, &code);
    json_t *tl = json_object_get(r, "resourceTemplates");
    CU_ASSERT_EQUAL(json_array_size(tl), 1);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(
                               json_array_get(tl, 0), "uriTemplate")),
                           "test://template/{id}/data");

    r = rpc(f.m, &f.c, "resources/read", "{\"uri\":\"test://static-text\"}",
            &code);
    json_t *c0 = json_array_get(json_object_get(r, "contents"), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(c0, "text")),
                           "This is the content of the static text "
                           "resource.");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(c0, "mimeType")),
                           "text/plain");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(c0, "uri")),
                           "test://static-text");
    r = rpc(f.m, &f.c, "resources/read", "{\"uri\":\"test://static-binary\"}",
            &code);
    c0 = json_array_get(json_object_get(r, "contents"), 0);
    const char *blob = json_string_value(json_object_get(c0, "blob"));
    CU_ASSERT(blob && strncmp(blob, "iVBORw0KGgo", 11) == 0);
    r = rpc(f.m, &f.c, "resources/read",
            "{\"uri\":\"test://template/42/data\"}", &code);
    c0 = json_array_get(json_object_get(r, "contents"), 0);
    const char *txt = json_string_value(json_object_get(c0, "text"));
    CU_ASSERT(txt && strstr(txt, "\"id\":\"42\""));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(c0, "mimeType")),
                           "application/json");
    /* not found: no resource, the plugin's NOT_FOUND, a / in a variable */
    CU_ASSERT_PTR_NULL(rpc(f.m, &f.c, "resources/read",
                           "{\"uri\":\"test://nope\"}", &code));
    CU_ASSERT_EQUAL(code, -32002);
    CU_ASSERT_PTR_NULL(rpc(f.m, &f.c, "resources/read",
                           "{\"uri\":\"test://template/missing/data\"}",
                           &code));
    CU_ASSERT_EQUAL(code, -32002);
    CU_ASSERT_PTR_NULL(rpc(f.m, &f.c, "resources/read",
                           "{\"uri\":\"test://template/a/b/data\"}", &code));
    CU_ASSERT_EQUAL(code, -32002);
    CU_ASSERT_PTR_NULL(rpc(f.m, &f.c, "resources/read", "{\"uri\":7}",
                           &code));
    CU_ASSERT_EQUAL(code, -32602);

    r = rpc(f.m, &f.c, "prompts/list", NULL, &code);
    json_t *pl = json_object_get(r, "prompts");
    CU_ASSERT_EQUAL(json_array_size(pl), 4);
    json_t *wa = json_array_get(pl, 1);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(wa, "name")),
                           "test_prompt_with_arguments");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(wa, "arguments")), 2);
    r = rpc(f.m, &f.c, "prompts/get",
            "{\"name\":\"test_prompt_with_arguments\",\"arguments\":"
            "{\"arg1\":\"hello\",\"arg2\":\"world\"}}",
            &code);
    json_t *m0 = json_array_get(json_object_get(r, "messages"), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(m0, "role")),
                           "user");
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_object_get(m0, "content"),
                                          "text")),
        "Prompt with arguments: arg1='hello', arg2='world'");
    /* arguments checked: a missing one, an unknown one, not a string */
    CU_ASSERT_PTR_NULL(rpc(f.m, &f.c, "prompts/get",
                           "{\"name\":\"test_prompt_with_arguments\","
                           "\"arguments\":{\"arg1\":\"x\"}}",
                           &code));
    CU_ASSERT_EQUAL(code, -32602);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg_of(&f.c), "arg2"));
    CU_ASSERT_PTR_NULL(rpc(f.m, &f.c, "prompts/get",
                           "{\"name\":\"test_simple_prompt\","
                           "\"arguments\":{\"zz\":\"x\"}}",
                           &code));
    CU_ASSERT_EQUAL(code, -32602);
    CU_ASSERT_PTR_NULL(rpc(f.m, &f.c, "prompts/get",
                           "{\"name\":\"test_prompt_with_arguments\","
                           "\"arguments\":{\"arg1\":1,\"arg2\":\"y\"}}",
                           &code));
    CU_ASSERT_EQUAL(code, -32602);
    CU_ASSERT_PTR_NULL(rpc(f.m, &f.c, "prompts/get", "{\"name\":\"nope\"}",
                           &code));
    CU_ASSERT_EQUAL(code, -32602);
    r = rpc(f.m, &f.c, "prompts/get", "{\"name\":\"test_prompt_with_image\"}",
            &code);
    m0 = json_array_get(json_object_get(r, "messages"), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(
                               json_object_get(m0, "content"), "type")),
                           "image");
    r = rpc(f.m, &f.c, "prompts/get",
            "{\"name\":\"test_prompt_with_embedded_resource\","
            "\"arguments\":{\"resourceUri\":\"test://x\"}}",
            &code);
    m0 = json_array_get(json_object_get(r, "messages"), 0);
    json_t *er = json_object_get(json_object_get(m0, "content"), "resource");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(er, "uri")),
                           "test://x");
    CU_ASSERT_PTR_NOT_NULL(json_object_get(er, "text"));

    r = rpc(f.m, &f.c, "completion/complete",
            "{\"ref\":{\"type\":\"ref/prompt\",\"name\":"
            "\"test_prompt_with_arguments\"},\"argument\":{\"name\":\"arg1\","
            "\"value\":\"pa\"}}",
            &code);
    json_t *vals = json_object_get(json_object_get(r, "completion"), "values");
    CU_ASSERT_EQUAL(json_array_size(vals), 3);
    r = rpc(f.m, &f.c, "completion/complete",
            "{\"ref\":{\"type\":\"ref/resource\",\"uri\":"
            "\"test://template/{id}/data\"},\"argument\":{\"name\":\"id\","
            "\"value\":\"12\"}}",
            &code);
    vals = json_object_get(json_object_get(r, "completion"), "values");
    CU_ASSERT_EQUAL(json_array_size(vals), 2);
    CU_ASSERT_PTR_NULL(rpc(f.m, &f.c, "completion/complete",
                           "{\"ref\":{\"type\":\"ref/prompt\",\"name\":"
                           "\"test_simple_prompt\"},\"argument\":{\"name\":"
                           "\"x\",\"value\":\"\"}}",
                           &code));
    CU_ASSERT_EQUAL(code, -32602);

    /* subscriptions: only to what the session may read */
    CU_ASSERT_PTR_NULL(rpc(f.m, &f.c, "resources/subscribe",
                           "{\"uri\":\"a://1\"}", &code));
    CU_ASSERT_EQUAL(code, -32002);
    CU_ASSERT_PTR_NOT_NULL(rpc(f.m, &f.c, "resources/subscribe",
                               "{\"uri\":\"test://watched-resource\"}",
                               &code));
    /* the update reaches the subscriber (sent by the timer thread: waited
     * for); an update the plugin makes of another's URI, or of one
     * nobody subscribed to, reaches nobody: those two are made first, so
     * they would have been sent in the same turn as the one awaited */
    th_plugin *p = th_registry_plugin(th_host_registry(f.h), "conform_tools");
    th_plugin *e = th_registry_plugin(th_host_registry(f.h), "echo");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    e->api.resource_updated(&e->api, "test://watched-resource");
    p->api.resource_updated(&p->api, "test://static-text");
    CU_ASSERT_EQUAL(n_updates(&f.c), 0); /* not the caller's thread */
    p->api.resource_updated(&p->api, "test://watched-resource");
    for (unsigned waited = 0; n_updates(&f.c) == 0 &&
                              waited < th_test_ms(10000);
         waited += 2)
        usleep(2000);
    CU_ASSERT_EQUAL(n_updates(&f.c), 1);
    CU_ASSERT_PTR_NOT_NULL(rpc(f.m, &f.c, "resources/subscribe",
                               "{\"uri\":\"test://template/1/data\"}",
                               &code));
    CU_ASSERT_PTR_NULL(rpc(f.m, &f.c, "resources/subscribe",
                           "{\"uri\":\"test://static-text\"}", &code));
    CU_ASSERT_EQUAL(code, -32600);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg_of(&f.c), "mcp.max_subscriptions"));
    CU_ASSERT_PTR_NOT_NULL(rpc(f.m, &f.c, "resources/unsubscribe",
                               "{\"uri\":\"test://template/1/data\"}",
                               &code));
    CU_ASSERT_PTR_NOT_NULL(rpc(f.m, &f.c, "resources/subscribe",
                               "{\"uri\":\"test://static-text\"}", &code));
    fx_close(&f);
}

static void test_toolset_scope(void)
{
    fx f;
    CU_ASSERT_FATAL(fx_open(&f, NULL, "echo_only"));
    int code;
    json_t *r = rpc(f.m, &f.c, "resources/list", NULL, &code);
    CU_ASSERT_EQUAL(code, 0);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(r, "resources")), 0);
    r = rpc(f.m, &f.c, "prompts/list", NULL, &code);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(r, "prompts")), 0);
    CU_ASSERT_PTR_NULL(rpc(f.m, &f.c, "resources/read",
                           "{\"uri\":\"test://static-text\"}", &code));
    CU_ASSERT_EQUAL(code, -32002);
    CU_ASSERT_PTR_NULL(rpc(f.m, &f.c, "prompts/get",
                           "{\"name\":\"test_simple_prompt\"}", &code));
    CU_ASSERT_EQUAL(code, -32602);
    fx_close(&f);
}

void th_suite_mcp_content(void)
{
    CU_pSuite s = CU_add_suite("mcp_content", NULL, NULL);
    CU_add_test(s, "load_checks", test_load_checks);
    CU_add_test(s, "template_match", test_template_match);
    CU_add_test(s, "content_refusals", test_content_refusals);
    CU_add_test(s, "host_unique", test_host_unique);
    CU_add_test(s, "input_schema", test_input_schema);
    CU_add_test(s, "methods", test_methods);
    CU_add_test(s, "toolset_scope", test_toolset_scope);
}
