/* openapi.h - the state of the openapi plugin, shared by its files.
 *
 * The openapi plugin turns OpenAPI 3.0/3.1 documents named in its config
 * block into tools, one per operation (docs/gateway.md, "OpenAPI
 * documents as a tool source").  init() reads the config (openapi.c),
 * loads each document and converts its operations (oa_spec.c); execute()
 * makes the HTTP request through libcurl (oa_http.c).  Everything here is
 * built once in init() and read-only until fini(), so concurrent calls
 * share it without locks; the one exception is each API's pool of idle
 * libcurl handles (keep_alive), under its own mutex. */
#ifndef TH_PLUGIN_OPENAPI_H
#define TH_PLUGIN_OPENAPI_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "toolhost/plugin.h"

/* Bounds of what a document may ask for. */
#define OA_MAX_DEPTH 32        /* schema nesting (the host's own bound)   */
#define OA_MAX_REF_HOPS 64     /* a chain of $ref before it is a loop     */
#define OA_MAX_OPS 1024        /* operations per document                 */
#define OA_MAX_PARAMS 128      /* parameters per operation                */
#define OA_MAX_NODES 100000    /* schema nodes of one tool, refs inlined  */
#define OA_MAX_KEEP 64         /* keep_alive's bound                      */

enum oa_in { OA_IN_PATH = 1, OA_IN_QUERY, OA_IN_HEADER, OA_IN_COOKIE };

/* How an operation's request body is sent: none (no `body` in its
 * input), JSON, or the fields of an object as a form. */
enum oa_body { OA_BODY_NONE = 0, OA_BODY_JSON, OA_BODY_FORM };

enum oa_auth {
    OA_AUTH_NONE = 0,
    OA_AUTH_BEARER,
    OA_AUTH_BASIC,
    OA_AUTH_API_KEY
};

typedef struct oa_param {
    char *name;
    int in;          /* OA_IN_* */
} oa_param;

struct oa_api;

/* One operation: what execute() needs to build its request. */
typedef struct oa_op {
    const struct oa_api *api;
    char *method;    /* "GET", "POST", ... */
    char *path;      /* the template, "/pets/{petId}" */
    oa_param *params;
    size_t n_params;
    int body;        /* OA_BODY_*: the input's `body` and how it is sent */
    bool structured; /* an output schema: stdout is TOOLHOST_SEM_STRUCTURED */
    bool idempotent; /* GET, HEAD, PUT, DELETE, OPTIONS: may be retried */
} oa_op;

/* The libcurl handles of an API's ended calls, kept for its next calls
 * with their open connections (a handle keeps its own: libcurl does not
 * share connections between threads).  Per API, never shared with
 * another: a connection was opened under this API's address rules
 * (allow_private), and only this API's requests reuse it. */
typedef struct oa_pool {
    pthread_mutex_t mu;
    void *idle[OA_MAX_KEEP]; /* CURL handles, n of them */
    long n;
    uint64_t dropped;        /* handles closed: keep_alive were idle */
} oa_pool;

/* One entry of `apis:`. */
typedef struct oa_api {
    char *name;
    char *spec;           /* the document's path */
    char *base_url;       /* no trailing '/' */
    char *base_host;      /* the base URL's host (lower case) and port, */
    long base_port;       /* the one host allow_private lets through   */
    bool base_https;      /* its scheme: the origin is scheme, host, port */
    char *prefix;
    char **include, **exclude; /* NULL-terminated, or NULL */
    int auth;             /* OA_AUTH_* */
    char *auth_env;       /* bearer_env, basic_user_env or api_key_env */
    char *auth_env2;      /* basic_password_env */
    char *key_header;     /* api_key_header (or NULL) */
    char *key_query;      /* api_key_query (or NULL) */
    int64_t timeout_ms;
    int64_t connect_timeout_ms;
    int64_t max_response; /* bytes */
    int64_t max_spec;     /* bytes of the document */
    long max_redirects;
    bool allow_private;
    long retries;
    char **headers;       /* "Name: value", NULL-terminated, or NULL */
    long keep_alive;      /* idle handles kept (with their connections) */
    struct oa_pool *pool; /* the API's idle handles (oa_http.c) */
    /* The tag every tool of the API declares (ABI 1.5): the API's name
     * made a tag, or NULL when nothing of it is left.  tags[1] is NULL. */
    char *tags[2];
} oa_api;

typedef struct oa_state {
    /* What init_tools() returns; the first two members. */
    const toolhost_tool *tools;
    uint32_t n_tools;
    /* Private. */
    toolhost_tool *tools_rw;
    oa_op *ops;           /* n_tools entries, user_data of each tool */
    uint32_t cap_tools;
    oa_api *apis;
    size_t n_apis;
    const toolhost_host_api *host;
    bool curl_ready;      /* curl_global_init() succeeded */
} oa_state;

/* Frees everything init() made (oa_state.c); NULL is fine. */
void oa_state_free(oa_state *st);

/* Document loading (oa_spec.c). */

/* Reads a JSON or YAML document of at most max_bytes into a JSON tree.
 * NULL with a message naming the file (and line:col for YAML) in err. */
json_t *oa_load_document(const char *path, int64_t max_bytes, char *err,
                         size_t err_size);
/* Adds the tools of one API's document to st.  0, or -1 with a message
 * naming the API, the operation and the place in err. */
int oa_spec_tools(oa_state *st, oa_api *api, const json_t *doc, char *err,
                  size_t err_size);

/* Requests (oa_http.c). */
int oa_execute(void *state, const toolhost_tool *tool, toolhost_call *call,
               const uint8_t *args, size_t args_len);
/* Whether an address (sockaddr_in or sockaddr_in6) is loopback, private,
 * link-local, unique-local, CGNAT, multicast or unspecified. */
struct sockaddr;
bool oa_addr_private(const struct sockaddr *sa);


#endif
