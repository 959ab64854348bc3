/* openapi.c - the openapi plugin: OpenAPI 3.0/3.1 documents as a tool
 * source (docs/gateway.md, "OpenAPI documents as a tool source").
 *
 * This file has the descriptor and the config block (`apis:`, checked here
 * key by key with messages naming the API and the key).  The documents become
 * tools in oa_spec.c; calls go out through libcurl in oa_http.c. */
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../shared/mp_json.h"
#include "openapi.h"
#include "toolhost/sdk.h"

#define MAX_APIS 64

static const toolhost_param oa_config[] = {
    TH_SDK_PARAM("apis", ARRAY,
                 "The APIs: a list of {name, spec, base_url, prefix, "
                 "include, exclude, auth, timeout, connect_timeout, "
                 "max_response, max_spec, max_redirects, allow_private, "
                 "retries, headers, keep_alive}",
                 TH_SDK_DEFAULT("[]"), TH_SDK_ITEMS(OBJECT)),
};

/* ---- config ------------------------------------------------------------ */


static bool env_name_ok(const char *s)
{
    if (!s[0] || (s[0] >= '0' && s[0] <= '9') || strlen(s) > 255)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

/* An HTTP header name (RFC 9110 token). */
static bool token_ok(const char *s)
{
    if (!s[0] || strlen(s) > 128)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || strchr("!#$%&'*+-.^_`|~", *s)))
            return false;
    return true;
}

/* Text without control bytes (no CR/LF: a header value, a name). */
static bool line_ok(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 && *s != '\t')
            return false;
    return true;
}

/* "500ms", "30s", "2m", or an integer count of seconds; -1 when bad. */
static int64_t duration_ms(const json_t *v)
{
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        return n >= 0 && n <= 86400 ? (int64_t)n * 1000 : -1;
    }
    const char *s = json_string_value(v);
    if (!s || !*s || s[0] == '-')
        return -1;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    if (end == s || errno || n > 86400000ull)
        return -1;
    int64_t mul = !strcmp(end, "ms") ? 1
                  : !strcmp(end, "s") || !*end ? 1000
                  : !strcmp(end, "m")          ? 60000
                                               : -1;
    if (mul < 0 || (int64_t)n * mul > 86400000)
        return -1;
    return (int64_t)n * mul;
}

/* 1048576, "512KiB", "4MiB", "1GiB", "100B"; -1 when bad. */
static int64_t size_bytes(const json_t *v)
{
    if (json_is_integer(v))
        return json_integer_value(v) > 0 ? (int64_t)json_integer_value(v)
                                         : -1;
    const char *s = json_string_value(v);
    if (!s || !*s || s[0] == '-')
        return -1;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    if (end == s || errno || n == 0)
        return -1;
    int64_t mul = !*end || !strcmp(end, "B")  ? 1
                  : !strcmp(end, "KiB")       ? 1024
                  : !strcmp(end, "MiB")       ? 1024 * 1024
                  : !strcmp(end, "GiB")       ? 1024 * 1024 * 1024
                                              : -1;
    if (mul < 0 || n > (unsigned long long)(INT64_MAX / mul))
        return -1;
    return (int64_t)n * mul;
}

/* A string value copied; -1 with a message when not a non-empty string. */
static int str_key(const json_t *o, const char *api, const char *key,
                   char **out, char *err, size_t es)
{
    const json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    const char *s = json_string_value(v);
    if (!s || !*s || !line_ok(s))
        return th_sdk_errf(err, es, "api '%s': %s must be a non-empty one-line "
                             "string", api, key);
    if (!(*out = strdup(s)))
        return th_sdk_errf(err, es, "out of memory");
    return 0;
}

static int env_key(const json_t *o, const char *api, const char *key,
                   char **out, char *err, size_t es)
{
    if (str_key(o, api, key, out, err, es) != 0)
        return -1;
    if (*out && !env_name_ok(*out))
        return th_sdk_errf(err, es, "api '%s': auth.%s: '%s' is not an environment "
                             "variable name", api, key, *out);
    return 0;
}

static int strv_key(const json_t *o, const char *api, const char *key,
                    char ***out, char *err, size_t es)
{
    const json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    if (!json_is_array(v) || json_array_size(v) > 4096)
        return th_sdk_errf(err, es, "api '%s': %s must be a list of strings", api,
                    key);
    char **s = calloc(json_array_size(v) + 1, sizeof *s);
    if (!s)
        return th_sdk_errf(err, es, "out of memory");
    *out = s;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        const char *t = json_string_value(e);
        if (!t || !*t || !line_ok(t))
            return th_sdk_errf(err, es, "api '%s': %s[%zu] must be a non-empty "
                                 "string", api, key, i);
        if (!(s[i] = strdup(t)))
            return th_sdk_errf(err, es, "out of memory");
    }
    return 0;
}

static int parse_auth(const json_t *a, oa_api *api, char *err, size_t es)
{
    static const char *const keys[] = {
        "bearer_env", "basic_user_env", "basic_password_env", "api_key_env",
        "api_key_header", "api_key_query", NULL};
    if (!json_is_object(a))
        return th_sdk_errf(err, es, "api '%s': auth must be a map", api->name);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)a, k, v)
    {
        bool known = false;
        for (int i = 0; keys[i]; i++)
            known |= !strcmp(k, keys[i]);
        if (!known)
            return th_sdk_errf(err, es, "api '%s': auth: unknown key '%s' (known: "
                                 "bearer_env, basic_user_env + "
                                 "basic_password_env, api_key_env + "
                                 "api_key_header or api_key_query)",
                        api->name, k);
    }
    char *bearer = NULL, *user = NULL, *pass = NULL, *key = NULL;
    if (env_key(a, api->name, "bearer_env", &bearer, err, es) ||
        env_key(a, api->name, "basic_user_env", &user, err, es) ||
        env_key(a, api->name, "basic_password_env", &pass, err, es) ||
        env_key(a, api->name, "api_key_env", &key, err, es) ||
        str_key(a, api->name, "api_key_header", &api->key_header, err, es) ||
        str_key(a, api->name, "api_key_query", &api->key_query, err, es)) {
        free(bearer), free(user), free(pass), free(key);
        return -1;
    }
    int kinds = !!bearer + !!(user || pass) + !!key;
    if (kinds != 1) {
        free(bearer), free(user), free(pass), free(key);
        return th_sdk_errf(err, es, "api '%s': auth needs exactly one of "
                             "bearer_env, basic_user_env + "
                             "basic_password_env, api_key_env",
                    api->name);
    }
    if (bearer) {
        api->auth = OA_AUTH_BEARER;
        api->auth_env = bearer;
    } else if (user || pass) {
        api->auth = OA_AUTH_BASIC;
        api->auth_env = user;
        api->auth_env2 = pass;
        if (!user || !pass)
            return th_sdk_errf(err, es, "api '%s': auth: basic_user_env and "
                                 "basic_password_env go together",
                        api->name);
    } else {
        api->auth = OA_AUTH_API_KEY;
        api->auth_env = key;
    }
    if ((api->key_header || api->key_query) && api->auth != OA_AUTH_API_KEY)
        return th_sdk_errf(err, es, "api '%s': auth: api_key_header and "
                             "api_key_query go with api_key_env", api->name);
    if (api->auth == OA_AUTH_API_KEY && !api->key_header == !api->key_query)
        return th_sdk_errf(err, es, "api '%s': auth: api_key_env needs one of "
                             "api_key_header or api_key_query", api->name);
    if (api->key_header && !token_ok(api->key_header))
        return th_sdk_errf(err, es, "api '%s': auth: api_key_header '%s' is not a "
                             "header name", api->name, api->key_header);
    return 0;
}

static int parse_headers(const json_t *h, oa_api *api, char *err, size_t es)
{
    if (!json_is_object(h) || json_object_size(h) > 64)
        return th_sdk_errf(err, es, "api '%s': headers must be a map of at most 64 "
                             "names to values", api->name);
    api->headers = calloc(json_object_size(h) + 1, sizeof *api->headers);
    if (!api->headers)
        return th_sdk_errf(err, es, "out of memory");
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)h, k, v)
    {
        const char *s = json_string_value(v);
        if (!token_ok(k))
            return th_sdk_errf(err, es, "api '%s': headers: '%s' is not a header "
                                 "name", api->name, k);
        if (!s || !line_ok(s))
            return th_sdk_errf(err, es, "api '%s': headers: %s must be a one-line "
                                 "string", api->name, k);
        /* what each request sets itself: a second one would be sent
         * beside it, and which the API reads is its choice */
        static const char *const own[] = {"Content-Type", "Content-Length",
                                          "Transfer-Encoding", "Host", NULL};
        for (const char *const *o = own; *o; o++)
            if (!strcasecmp(k, *o))
                return th_sdk_errf(err, es, "api '%s': headers: '%s' is set "
                                     "by each request (its body, its URL); "
                                     "it cannot be configured", api->name, k);
        if ((api->auth == OA_AUTH_BEARER || api->auth == OA_AUTH_BASIC) &&
            !strcasecmp(k, "Authorization"))
            return th_sdk_errf(err, es, "api '%s': headers: 'Authorization' "
                                 "is set by auth:; give one or the other",
                                 api->name);
        if (api->auth == OA_AUTH_API_KEY && api->key_header &&
            !strcasecmp(k, api->key_header))
            return th_sdk_errf(err, es, "api '%s': headers: '%s' is "
                                 "auth.api_key_header's; give one or the "
                                 "other", api->name, k);
        size_t len = strlen(k) + strlen(s) + 3;
        if (!(api->headers[n] = malloc(len)))
            return th_sdk_errf(err, es, "out of memory");
        snprintf(api->headers[n++], len, "%s: %s", k, s);
    }
    return 0;
}

static const char *const api_keys[] = {
    "name",          "spec",         "base_url",      "prefix",
    "include",       "exclude",      "auth",          "timeout",
    "connect_timeout", "max_response", "max_spec",    "max_redirects",
    "allow_private", "retries",      "headers",       "keep_alive",
    NULL};

static int parse_api(const json_t *o, size_t idx, oa_api *api, char *err,
                     size_t es)
{
    if (!json_is_object(o))
        return th_sdk_errf(err, es, "apis[%zu] must be a map", idx);
    const char *name = json_string_value(json_object_get(o, "name"));
    if (!name || !*name || strlen(name) > 64 || !line_ok(name))
        return th_sdk_errf(err, es, "apis[%zu]: name is required (a one-line "
                             "string of at most 64 bytes)", idx);
    if (!(api->name = strdup(name)))
        return th_sdk_errf(err, es, "out of memory");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        bool known = false;
        for (int i = 0; api_keys[i]; i++)
            known |= !strcmp(k, api_keys[i]);
        if (!known)
            return th_sdk_errf(err, es, "api '%s': unknown key '%s'", name, k);
    }
    if (str_key(o, name, "spec", &api->spec, err, es) ||
        str_key(o, name, "base_url", &api->base_url, err, es) ||
        strv_key(o, name, "include", &api->include, err, es) ||
        strv_key(o, name, "exclude", &api->exclude, err, es))
        return -1;
    if (!api->spec)
        return th_sdk_errf(err, es, "api '%s': spec is required (the path of an "
                             "OpenAPI 3.0 or 3.1 document, JSON or YAML)",
                    name);
    if (api->spec[0] != '/')
        return th_sdk_errf(err, es, "api '%s': spec '%s' must be an absolute path "
                             "(use ${CONFIG_DIR}/...)", name, api->spec);
    if ((v = json_object_get(o, "prefix"))) {
        const char *p = json_string_value(v);
        if (!p || strlen(p) > 32 || strspn(p, "abcdefghijklmnopqrstuvwxyz"
                                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_-") != strlen(p))
            return th_sdk_errf(err, es, "api '%s': prefix must match "
                                 "^[a-zA-Z0-9_-]{0,32}$", name);
        if (!(api->prefix = strdup(p)))
            return th_sdk_errf(err, es, "out of memory");
    }
    if ((v = json_object_get(o, "auth")) && parse_auth(v, api, err, es))
        return -1;
    if ((v = json_object_get(o, "headers")) &&
        parse_headers(v, api, err, es))
        return -1;
    struct {
        const char *key;
        int64_t *slot;
        int64_t def, min;
    } durations[] = {{"timeout", &api->timeout_ms, 30000, 1},
                     {"connect_timeout", &api->connect_timeout_ms, 10000, 1}};
    for (size_t i = 0; i < 2; i++) {
        *durations[i].slot = durations[i].def;
        if ((v = json_object_get(o, durations[i].key)) &&
            (*durations[i].slot = duration_ms(v)) < durations[i].min)
            return th_sdk_errf(err, es, "api '%s': %s must be a duration from 1ms "
                                 "to 24h (\"500ms\", \"30s\", \"2m\")",
                        name, durations[i].key);
    }
    api->max_response = 1024 * 1024;
    if ((v = json_object_get(o, "max_response")) &&
        ((api->max_response = size_bytes(v)) < 1 ||
         api->max_response > 256 * 1024 * 1024))
        return th_sdk_errf(err, es, "api '%s': max_response must be a size from 1B "
                             "to 256MiB (\"4MiB\")", name);
    api->max_spec = 8 * 1024 * 1024;
    if ((v = json_object_get(o, "max_spec")) &&
        ((api->max_spec = size_bytes(v)) < 1 ||
         api->max_spec > 256 * 1024 * 1024))
        return th_sdk_errf(err, es, "api '%s': max_spec must be a size from 1B to "
                             "256MiB (\"8MiB\")", name);
    if ((v = json_object_get(o, "max_redirects"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > 10)
            return th_sdk_errf(err, es, "api '%s': max_redirects must be an integer "
                                 "from 0 to 10", name);
        api->max_redirects = (long)json_integer_value(v);
    }
    if ((v = json_object_get(o, "retries"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > 5)
            return th_sdk_errf(err, es, "api '%s': retries must be an integer from "
                                 "0 to 5", name);
        api->retries = (long)json_integer_value(v);
    }
    if ((v = json_object_get(o, "allow_private"))) {
        if (!json_is_boolean(v))
            return th_sdk_errf(err, es, "api '%s': allow_private must be true or "
                                 "false", name);
        api->allow_private = json_is_true(v);
    }
    api->keep_alive = 4;
    if ((v = json_object_get(o, "keep_alive"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > OA_MAX_KEEP)
            return th_sdk_errf(err, es, "api '%s': keep_alive must be an "
                                 "integer from 0 to %d", name, OA_MAX_KEEP);
        api->keep_alive = (long)json_integer_value(v);
    }
    oa_pool *pool = calloc(1, sizeof *pool);
    if (!pool || pthread_mutex_init(&pool->mu, NULL) != 0) {
        free(pool);
        return th_sdk_errf(err, es, "api '%s': out of memory", name);
    }
    api->pool = pool;
    return 0;
}

/* ---- descriptor -------------------------------------------------------- */

static int oa_init(const toolhost_host_api *host, const uint8_t *config,
                   size_t config_len, void **state, char *err,
                   size_t err_size)
{
    oa_state *st = calloc(1, sizeof *st);
    json_t *cfg = NULL;
    if (!st)
        return th_sdk_errf(err, err_size, "out of memory");
    st->host = host;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        th_sdk_errf(err, err_size, "libcurl failed to initialise");
        goto bad;
    }
    st->curl_ready = true;
    cfg = mp_json_parse(config, config_len);
    const json_t *apis = json_object_get(cfg, "apis");
    if (!json_is_array(apis)) {
        th_sdk_errf(err, err_size, "apis must be a list");
        goto bad;
    }
    if (json_array_size(apis) > MAX_APIS) {
        th_sdk_errf(err, err_size, "apis: at most %d entries", MAX_APIS);
        goto bad;
    }
    st->apis = calloc(json_array_size(apis) + 1, sizeof *st->apis);
    if (!st->apis) {
        th_sdk_errf(err, err_size, "out of memory");
        goto bad;
    }
    for (size_t i = 0; i < json_array_size(apis); i++) {
        oa_api *api = &st->apis[st->n_apis++];
        if (parse_api(json_array_get(apis, i), i, api, err, err_size) != 0)
            goto bad;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(st->apis[j].name, api->name)) {
                th_sdk_errf(err, err_size, "api '%s' is declared twice", api->name);
                goto bad;
            }
        json_t *doc = oa_load_document(api->spec, api->max_spec, err,
                                       err_size);
        if (!doc) {
            char tmp[1024];
            snprintf(tmp, sizeof tmp, "%s", err);
            th_sdk_errf(err, err_size, "api '%s': %s", api->name, tmp);
            goto bad;
        }
        uint32_t before = st->n_tools;
        int rc = oa_spec_tools(st, api, doc, err, err_size);
        json_decref(doc);
        if (rc != 0)
            goto bad;
        if (api->auth && !getenv(api->auth_env))
            th_sdk_log(host, TOOLHOST_LOG_WARN,
                       "api '%s': %s is not set: its calls will fail until "
                       "it is (and the host restarted)",
                       api->name, api->auth_env);
        th_sdk_log(host, TOOLHOST_LOG_INFO,
                   "api '%s': %u operation%s from %s, base URL %s",
                   api->name, st->n_tools - before,
                   st->n_tools - before == 1 ? "" : "s", api->spec,
                   api->base_url);
    }
    json_decref(cfg);
    st->tools = st->tools_rw;
    *state = st;
    return 0;
bad:
    json_decref(cfg);
    oa_state_free(st);
    return -1;
}

/* ABI 1.1: the operations' tools, built once by init(). */
static const toolhost_tool *oa_init_tools(void *state, uint32_t *n_tools)
{
    const oa_state *st = state;
    *n_tools = st->n_tools;
    return st->tools;
}

static void oa_fini(void *state)
{
    oa_state_free(state);
}

static const toolhost_tool oa_no_tools[1];

TOOLHOST_EXPORT const toolhost_plugin *toolhost_plugin_v1(void);
TOOLHOST_EXPORT const toolhost_plugin *toolhost_plugin_v1(void)
{
    static const toolhost_plugin descriptor = {
        .struct_size = sizeof(toolhost_plugin),
        .abi_major = TOOLHOST_ABI_MAJOR,
        .abi_minor = TOOLHOST_ABI_MINOR,
        .name = "openapi",
        .version = "0.1.0",
        .description = "Tools from OpenAPI 3.0/3.1 documents: one per "
                       "operation, called over HTTP(S) through libcurl",
        TH_SDK_CONFIG(oa_config),
        .init = oa_init,
        .fini = oa_fini,
        .tools = oa_no_tools,
        .n_tools = 0,
        .init_tools = oa_init_tools,
        .requires_host_minor = 4,
    };
    return &descriptor;
}
