/* petstore.c - the test pet store (petstore.h). */
#include "common/petstore.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct upload {
    char *data;
    size_t len;
} upload;

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status,
                              const char *body, const char *location)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (location)
        MHD_add_response_header(r, "Location", location);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

/* n bytes of the given Content-Type */
static enum MHD_Result answer_bytes(struct MHD_Connection *c, unsigned status,
                                    const char *body, size_t n,
                                    const char *type)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        n, (void *)body, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result answer_json(struct MHD_Connection *c, unsigned status,
                                   json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    enum MHD_Result rc = answer(c, status, s ? s : "null", NULL);
    free(s);
    return rc;
}

static json_t *find_pet(petsrv *p, const char *id, size_t *at)
{
    size_t i;
    json_t *e;
    json_array_foreach(p->pets, i, e)
    {
        char buf[32];
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(e, "id")));
        if (!strcmp(buf, id)) {
            *at = i;
            return e;
        }
    }
    return NULL;
}

/* The value of the first field `name` of a form body, percent-decoded
 * (libmicrohttpd's unescape) into out; false when there is none. */
static bool form_field(const char *body, const char *name, char *out,
                       size_t size)
{
    size_t nl = strlen(name);
    for (const char *f = body; f && *f; f = strchr(f, '&'), f = f ? f + 1 : f) {
        if (strncmp(f, name, nl) || f[nl] != '=')
            continue;
        const char *v = f + nl + 1, *e = strchr(v, '&');
        size_t n = e ? (size_t)(e - v) : strlen(v);
        if (n >= size)
            return false;
        memcpy(out, v, n);
        out[n] = '\0';
        MHD_http_unescape(out);
        return true;
    }
    return false;
}

/* /v1/att/echo... (suite att35), any method: what came kept (the
 * method, the Content-Type or "-", the whole body), {"ok": true} */
static enum MHD_Result att_echo(petsrv *p, struct MHD_Connection *c,
                                const char *method, const upload *up)
{
    const char *type = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   "Content-Type");
    snprintf(p->att_method, sizeof p->att_method, "%s", method);
    snprintf(p->att_type, sizeof p->att_type, "%s", type ? type : "-");
    free(p->att_body);
    p->att_body = malloc(up->len + 1);
    p->att_body_len = p->att_body ? up->len : 0;
    if (p->att_body) {
        memcpy(p->att_body, up->data ? up->data : "", up->len);
        p->att_body[up->len] = '\0';
    }
    p->att_hits++;
    return answer(c, 200, "{\"ok\": true}", NULL);
}

/* GET /v1/att/bin... (suite att35): n bytes (query n, default 16) that
 * are not UTF-8 (0x80 | i), or 'a's with text=true, of the Content-Type
 * in query ct (none at all when ct is absent), with the HTTP status in
 * query status (default 200) */
static enum MHD_Result att_bin(struct MHD_Connection *c)
{
    const char *st = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND,
                                                 "status");
    const char *ct = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND,
                                                 "ct");
    const char *ns = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND,
                                                 "n");
    const char *text = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND,
                                                   "text");
    size_t n = ns ? strtoul(ns, NULL, 10) : 16;
    if (n > 8 * 1024 * 1024)
        n = 8 * 1024 * 1024;
    char *b = malloc(n ? n : 1);
    if (!b)
        return MHD_NO;
    for (size_t i = 0; i < n; i++)
        b[i] = text && !strcmp(text, "true") ? 'a' : (char)(0x80 | (i & 0x3f));
    struct MHD_Response *r =
        MHD_create_response_from_buffer(n, b, MHD_RESPMEM_MUST_FREE);
    if (ct)
        MHD_add_response_header(r, "Content-Type", ct);
    enum MHD_Result rc =
        MHD_queue_response(c, st ? (unsigned)strtoul(st, NULL, 10) : 200, r);
    MHD_destroy_response(r);
    return rc;
}

/* POST /v1/pets/ID with a form (updatePetWithForm): its Content-Type
 * and body kept as sent (last_form_type, last_form), the pet renamed
 * (and retagged when the form has a tag). */
static enum MHD_Result form_update(petsrv *p, struct MHD_Connection *c,
                                   json_t *pet, const upload *up)
{
    const char *type = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   "Content-Type");
    snprintf(p->last_form_type, sizeof p->last_form_type, "%s",
             type ? type : "");
    size_t n = up->len < sizeof p->last_form - 1 ? up->len
                                                 : sizeof p->last_form - 1;
    memcpy(p->last_form, up->data ? up->data : "", n);
    p->last_form[n] = '\0';
    if (!type || strcmp(type, "application/x-www-form-urlencoded"))
        return answer(c, 415, "{\"code\": 415, \"message\": \"a form, "
                              "please\"}", NULL);
    char name[256], tag[256];
    if (!form_field(p->last_form, "name", name, sizeof name))
        return answer(c, 400, "{\"code\": 400, \"message\": \"no name\"}",
                      NULL);
    json_object_set_new(pet, "name", json_string(name));
    if (form_field(p->last_form, "tag", tag, sizeof tag))
        json_object_set_new(pet, "tag", json_string(tag));
    return answer_json(c, 200, pet);
}

static enum MHD_Result route(petsrv *p, struct MHD_Connection *c,
                             const char *method, const char *url,
                             const upload *up)
{
    if (!strcmp(url, "/v1/canary")) {
        p->canary++;
        return answer(c, 200, "{}", NULL);
    }
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   "Authorization");
    const char *hkey = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   "X-Api-Key");
    const char *qkey = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND,
                                                   "api_key");
    /* the bearer token; basic ann / "open sesame"; an API key */
    bool authorized = (auth && (!strcmp(auth, "Bearer " PETSRV_TOKEN) ||
                                !strcmp(auth, "Basic YW5uOm9wZW4gc2VzYW1l"))) ||
                      (hkey && !strcmp(hkey, "k-123")) ||
                      (qkey && !strcmp(qkey, "k-123"));
    if (!authorized) {
        p->unauthorized++;
        return answer(c, 401, "{\"code\": 401, \"message\": \"bad or no "
                              "bearer token\"}", NULL);
    }
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    json_error_t je;
    json_t *in = up->len ? json_loadb(up->data, up->len, 0, &je) : NULL;
    enum MHD_Result rc;
    if (!strcmp(url, "/v1/pets") && get) {
        const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND,
                                                      "limit");
        const char *tag = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND,
                                                      "tag");
        const char *rid = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                      "X-Request-Id");
        snprintf(p->last_tag, sizeof p->last_tag, "%s", tag ? tag : "");
        snprintf(p->last_reqid, sizeof p->last_reqid, "%s", rid ? rid : "");
        const char *ck = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     "Cookie");
        snprintf(p->last_cookie, sizeof p->last_cookie, "%s", ck ? ck : "");
        json_t *out = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(p->pets, i, e)
        {
            const char *t = json_string_value(json_object_get(e, "tag"));
            if (lim && json_array_size(out) >= strtoul(lim, NULL, 10))
                break;
            if (!tag || (t && !strcmp(t, tag)))
                json_array_append(out, e);
        }
        rc = answer_json(c, 200, out);
        json_decref(out);
    } else if (!strcmp(url, "/v1/pets") && post) {
        if (!json_is_string(json_object_get(in, "name"))) {
            rc = answer(c, 400, "{\"code\": 400, \"message\": \"name?\"}",
                        NULL);
        } else {
            json_t *pet = json_pack("{s:i, s:O, s:O}", "id", p->next_id++,
                                    "name", json_object_get(in, "name"),
                                    "tag",
                                    json_object_get(in, "tag")
                                        ? json_object_get(in, "tag")
                                        : json_null());
            json_array_append(p->pets, pet);
            rc = answer_json(c, 201, pet);
            json_decref(pet);
        }
    } else if (!strncmp(url, "/v1/pets/", 9) && strstr(url, "/photo") && get) {
        /* bytes that are not UTF-8, of the type the document says */
        static const char png[] = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        rc = answer_bytes(c, 200, png, sizeof png - 1, "image/png");
    } else if (!strcmp(url, "/v1/export") && get) {
        /* the document says JSON; the API sends bytes of its own type */
        static const char blob[] = "\xff\xfe\0export\x80";
        rc = answer_bytes(c, 200, blob, sizeof blob - 1,
                          "Application/Octet-Stream; q=1");
    } else if (!strcmp(url, "/v1/notes") && get) {
        rc = answer_bytes(c, 200, "caf\xc3\xa9 notes", 11,
                          "text/plain; charset=utf-8");
    } else if (!strncmp(url, "/v1/pets/", 9) && strstr(url, "/owner")) {
        rc = answer(c, 200, "{\"name\": \"Ada\", \"email\": \"ada@example\"}",
                    NULL);
    } else if (!strncmp(url, "/v1/pets/", 9)) {
        const char *id = url + 9;
        snprintf(p->last_id, sizeof p->last_id, "%s", id);
        size_t at;
        json_t *pet = find_pet(p, id, &at);
        if (!pet)
            rc = answer(c, 404, "{\"code\": 404, \"message\": \"no such "
                                "pet\"}", NULL);
        else if (get)
            rc = answer_json(c, 200, pet);
        else if (post)
            rc = form_update(p, c, pet, up);
        else if (!strcmp(method, "PUT") && json_is_object(in)) {
            json_object_set(pet, "name", json_object_get(in, "name"));
            json_object_set(pet, "tag", json_object_get(in, "tag")
                                            ? json_object_get(in, "tag")
                                            : json_null());
            rc = answer_json(c, 200, pet);
        } else if (!strcmp(method, "DELETE")) {
            json_array_remove(p->pets, at);
            rc = answer(c, 204, "", NULL);
        } else
            rc = answer(c, 405, "{}", NULL);
    } else if (!strncmp(url, "/v1/store/orders/", 17) && get) {
        /* lies: the document says an Order (integers, petId and
         * quantity required) */
        rc = answer(c, 200, "{\"id\": \"not-a-number\"}", NULL);
    } else if (!strcmp(url, "/v1/store/inventory") && get) {
        rc = answer(c, 200, "{\"dog\": 2, \"cat\": 1}", NULL);
    } else if (!strcmp(url, "/v1/categories") && post && in) {
        rc = answer_json(c, 201, in);
    } else if (!strncmp(url, "/v1/att/echo", 12)) {
        rc = att_echo(p, c, method, up);
    } else if (!strcmp(url, "/v1/att/list") && get) {
        rc = answer(c, 200, "[true]", NULL);
    } else if (!strncmp(url, "/v1/att/go/", 11)) {
        /* a redirect of the status in the path to /v1/att/echo */
        rc = answer(c, (unsigned)strtoul(url + 11, NULL, 10), "{}",
                    "/v1/att/echo/landed?api_key=" "k-123");
    } else if (!strcmp(url, "/v1/att/binredir") && get) {
        rc = answer(c, 302, "", "/v1/att/bin/moved?ct=application/x-att&n=5"
                                 "&api_key=k-123");
    } else if (!strcmp(url, "/v1/att/binuser") && get) {
        /* to the same origin, with user info in the URL */
        char loc[160];
        snprintf(loc, sizeof loc,
                 "http://ann:open%%20sesame@127.0.0.1:%d/v1/att/bin/u?"
                 "ct=application/x-att&n=5&api_key=k-123",
                 p->port);
        rc = answer(c, 302, "", loc);
    } else if (!strncmp(url, "/v1/att/bin", 11) && get) {
        rc = att_bin(c);
    } else if (!strcmp(url, "/v1/old-pets")) {
        rc = answer(c, 301, "", "/v1/pets");
    } else if (!strcmp(url, "/v1/elsewhere")) {
        char loc[128];
        snprintf(loc, sizeof loc, "http://localhost:%d/v1/canary", p->port);
        rc = answer(c, 302, "", loc);
    } else if (!strcmp(url, "/v1/slow")) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 60;
        pthread_mutex_lock(&p->mu);
        p->slow_waiting++;
        while (!p->released &&
               pthread_cond_timedwait(&p->cv, &p->mu, &ts) == 0)
            ;
        p->slow_waiting--;
        pthread_mutex_unlock(&p->mu);
        rc = answer(c, 200, "\"pong\"", NULL);
    } else if (!strcmp(url, "/v1/huge")) {
        size_t n = 4 * 1024 * 1024;
        char *big = malloc(n);
        memset(big, 'x', n);
        big[0] = big[n - 1] = '"';
        struct MHD_Response *r =
            MHD_create_response_from_buffer(n, big, MHD_RESPMEM_MUST_FREE);
        rc = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
    } else if (!strcmp(url, "/v1/flaky")) {
        int n = get ? p->flaky_get++ : p->flaky_post++;
        rc = n == 0 ? answer(c, 503, "{\"message\": \"try again\"}", NULL)
                    : answer(c, 200, "{\"ok\": true}", NULL);
    } else if (!strcmp(url, "/v1/limited") || !strcmp(url, "/v1/down")) {
        /* 429 with Retry-After in seconds (GET) or as an HTTP date far
         * ahead (POST); /down: 503 with Retry-After 3 */
        bool down = url[4] == 'd';
        const char *body = down ? "{\"message\": \"maintenance\"}"
                                : "{\"message\": \"slow down\"}";
        struct MHD_Response *r = MHD_create_response_from_buffer(
            strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(r, "Content-Type", "application/json");
        MHD_add_response_header(r, "Retry-After",
                                down  ? "3"
                                : get ? "7"
                                      : "Fri, 31 Dec 2100 23:59:59 GMT");
        rc = MHD_queue_response(c, down ? 503 : 429, r);
        MHD_destroy_response(r);
    } else {
        rc = answer(c, 404, "{\"message\": \"no route\"}", NULL);
    }
    json_decref(in);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
    (void)version;
    petsrv *p = cls;
    upload *up = *con_cls;
    if (!up) {
        *con_cls = up = calloc(1, sizeof *up);
        return up ? MHD_YES : MHD_NO;
    }
    if (*data_size) {
        char *n = realloc(up->data, up->len + *data_size);
        if (!n)
            return MHD_NO;
        memcpy(n + up->len, data, *data_size);
        up->data = n;
        up->len += *data_size;
        *data_size = 0;
        return MHD_YES;
    }
    pthread_mutex_lock(&p->mu);
    bool slow = !strcmp(url, "/v1/slow");
    if (slow)
        pthread_mutex_unlock(&p->mu); /* route() waits on p->cv itself */
    enum MHD_Result rc = route(p, c, method, url, up);
    if (!slow)
        pthread_mutex_unlock(&p->mu);
    return rc;
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    upload *up = *con_cls;
    if (up)
        free(up->data);
    free(up);
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode toe)
{
    (void)c, (void)socket_ctx;
    petsrv *p = cls;
    if (toe != MHD_CONNECTION_NOTIFY_STARTED)
        return;
    pthread_mutex_lock(&p->mu);
    p->connections++;
    pthread_mutex_unlock(&p->mu);
}

int petsrv_start(petsrv *p, int port)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->pets = json_array();
    p->next_id = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    p->d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
        NULL, NULL, on_request, p, MHD_OPTION_SOCK_ADDR, &sa,
        MHD_OPTION_NOTIFY_COMPLETED, on_done, p,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, p, MHD_OPTION_END);
    if (!p->d)
        return -1;
    const union MHD_DaemonInfo *i =
        MHD_get_daemon_info(p->d, MHD_DAEMON_INFO_BIND_PORT);
    p->port = i ? i->port : 0;
    return p->port ? 0 : -1;
}

void petsrv_stop(petsrv *p)
{
    pthread_mutex_lock(&p->mu);
    p->released = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (p->d)
        MHD_stop_daemon(p->d);
    json_decref(p->pets);
    free(p->att_body);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
}
