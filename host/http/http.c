/* http.c - the HTTP server layer of th/http.h over libmicrohttpd. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "th/http.h"
#include "th/log.h"

struct th_http_server {
    struct MHD_Daemon *d;
    th_http_route *routes;
    size_t n_routes;
    th_http_url url;
    char url_text[384]; /* with the bound port; set after the start */
    char entry[384];    /* the listen entry as written; set before */
    char *cert, *key; /* PEM text, kept while the daemon runs */
    int sndbuf;
    unsigned max_conn;
    atomic_uint n_conn;
    atomic_llong full_logged_ms; /* when "at the cap" was last logged */
};

/* What *req_cls points to while a request is routed. */
typedef struct route_req {
    const th_http_route *r;
    void *cls;
} route_req;

/* ---- URLs ------------------------------------------------------------------ */

int th_http_parse_url(const char *s, th_http_url *u, th_error *err)
{
    memset(u, 0, sizeof *u);
    const char *p;
    if (strncmp(s, "http://", 7) == 0) {
        p = s + 7;
    } else if (strncmp(s, "https://", 8) == 0) {
        p = s + 8;
        u->tls = true;
    } else {
        return th_error_set(err, TH_EINVAL,
                            "'%s' is not an http:// or https:// address", s);
    }
    const char *hs = p, *he;
    if (*p == '[') {
        hs = p + 1;
        he = strchr(hs, ']');
        if (!he)
            return th_error_set(err, TH_EINVAL, "'%s': no ']' after the "
                                "IPv6 address", s);
        p = he + 1;
    } else {
        he = p + strcspn(p, ":/");
        p = he;
    }
    size_t hl = (size_t)(he - hs);
    if (hl == 0 || hl >= sizeof u->host)
        return th_error_set(err, TH_EINVAL, "'%s': no host (write "
                            "http://127.0.0.1:PORT/PATH)", s);
    memcpy(u->host, hs, hl);
    u->host[hl] = '\0';
    if (*p != ':')
        return th_error_set(err, TH_EINVAL, "'%s': no port (write "
                            "http://%s:PORT/PATH; 0 takes a free port)", s,
                            u->host);
    p++;
    unsigned long port = 0;
    const char *ps = p;
    while (*p >= '0' && *p <= '9' && p - ps < 6)
        port = port * 10 + (unsigned long)(*p++ - '0');
    if (p == ps || port > 65535 || (*p && *p != '/'))
        return th_error_set(err, TH_EINVAL, "'%s': the port must be a "
                            "number from 0 to 65535", s);
    u->port = (uint16_t)port;
    const char *path = *p ? p : "/mcp";
    if (strlen(path) >= sizeof u->path || strpbrk(path, "?# \t"))
        return th_error_set(err, TH_EINVAL, "'%s': the path must be plain "
                            "(no query, at most 255 bytes)", s);
    snprintf(u->path, sizeof u->path, "%s", path);
    const char *h = strcmp(u->host, "localhost") == 0 ? "127.0.0.1"
                                                       : u->host;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&u->addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&u->addr;
    if (inet_pton(AF_INET, h, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(u->port);
        u->addr_len = sizeof *a4;
        u->loopback = (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
    } else if (inet_pton(AF_INET6, h, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(u->port);
        u->addr_len = sizeof *a6;
        u->loopback = IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr);
    } else {
        return th_error_set(err, TH_EINVAL, "'%s': the host must be an IP "
                            "address or localhost, got '%s'", s, u->host);
    }
    return 0;
}

/* ---- the daemon -------------------------------------------------------------- */

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    th_log_debug("http: %s", line);
}

enum MHD_Result th_http_reply(struct MHD_Connection *c, unsigned status,
                              const char *content_type, const char *body,
                              const char *hname, const char *hvalue)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    if (content_type)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                content_type);
    if (hname)
        MHD_add_response_header(r, hname, hvalue);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

/* Leaves the URL as sent: routes match the raw path, so /mcp%00 or
 * /mc%70 is not /mcp (no handler reads query arguments). */
static size_t keep_escaped(void *cls, struct MHD_Connection *c, char *uri)
{
    (void)cls;
    (void)c;
    return strlen(uri);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c,
                                 const char *url, const char *method,
                                 const char *version, const char *upload,
                                 size_t *upload_size, void **req_cls)
{
    (void)version;
    th_http_server *s = cls;
    route_req *rr = *req_cls;
    if (!rr) {
        const th_http_route *r = NULL;
        for (size_t i = 0; i < s->n_routes && !r; i++)
            if (strcmp(s->routes[i].path, url) == 0)
                r = &s->routes[i];
        if (!r) {
            if (*upload_size) { /* drain, then answer */
                *upload_size = 0;
                return MHD_YES;
            }
            return th_http_reply(c, MHD_HTTP_NOT_FOUND, "text/plain",
                                 "not found\n", NULL, NULL);
        }
        rr = calloc(1, sizeof *rr);
        if (!rr)
            return MHD_NO;
        rr->r = r;
        *req_cls = rr;
    }
    return rr->r->handle(rr->r->ud, c, method, upload, upload_size,
                         &rr->cls);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode why)
{
    (void)cls;
    route_req *rr = *req_cls;
    if (!rr)
        return;
    if (rr->r->completed)
        rr->r->completed(rr->r->ud, c, &rr->cls, why);
    free(rr);
    *req_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    th_http_server *s = cls;
    (void)socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        atomic_fetch_sub(&s->n_conn, 1);
        return;
    }
    if (toe != MHD_CONNECTION_NOTIFY_STARTED)
        return;
    /* At the cap the daemon stops accepting: new clients wait in the
     * kernel's queue.  Say so, at most once a second. */
    if (atomic_fetch_add(&s->n_conn, 1) + 1 >= s->max_conn) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long long now = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        long long last = atomic_load(&s->full_logged_ms);
        if (now - last >= 1000 &&
            atomic_compare_exchange_strong(&s->full_logged_ms, &last, now))
            th_log_warn("http: %s: %u connections open (mcp.max_connections); "
                        "new ones wait until one closes",
                        s->entry, s->max_conn);
    }
    if (s->sndbuf <= 0)
        return;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci)
        setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &s->sndbuf,
                   sizeof s->sndbuf);
}

/* A PEM file, whole (at most 1 MiB). */
static char *read_pem(const char *path, const char *what, th_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        th_error_set(err, TH_ECONFIG, "mcp.%s: cannot open '%s': %s", what,
                     path, strerror(errno));
        return NULL;
    }
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size > (1 << 20)) {
        th_error_set(err, TH_ECONFIG, "mcp.%s: '%s' is not a PEM file of "
                     "at most 1MiB", what, path);
    } else if (!(buf = malloc((size_t)st.st_size + 1))) {
        th_error_set(err, TH_ENOMEM, "out of memory");
    } else {
        size_t got = 0;
        while (got < (size_t)st.st_size) {
            ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        buf[got] = '\0';
        if (got == 0) {
            th_error_set(err, TH_ECONFIG, "mcp.%s: '%s' is empty", what,
                         path);
            free(buf);
            buf = NULL;
        }
    }
    close(fd);
    return buf;
}

/* ---- Socket activation ----------------------------------------------------- */

/* Listening TCP sockets handed over by the service manager, each taken by
 * the first entry whose address matches (family, port, address or any). */
static pthread_mutex_t act_mu = PTHREAD_MUTEX_INITIALIZER;
static int act_fd[16];
static size_t n_act;

void th_http_set_listen_fds(const int *fds, size_t n)
{
    pthread_mutex_lock(&act_mu);
    n_act = 0;
    for (size_t i = 0; i < n && n_act < sizeof act_fd / sizeof *act_fd; i++)
        act_fd[n_act++] = fds[i];
    pthread_mutex_unlock(&act_mu);
}

static bool addr_match(const struct sockaddr_storage *want,
                       const struct sockaddr_storage *got)
{
    if (want->ss_family != got->ss_family)
        return false;
    if (want->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)want, *b = (const void *)got;
        return a->sin_port == b->sin_port &&
               (a->sin_addr.s_addr == b->sin_addr.s_addr ||
                b->sin_addr.s_addr == htonl(INADDR_ANY));
    }
    const struct sockaddr_in6 *a = (const void *)want, *b = (const void *)got;
    return a->sin6_port == b->sin6_port &&
           (!memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) ||
            !memcmp(&b->sin6_addr, &in6addr_any, sizeof b->sin6_addr));
}

void th_http_close_unused_listen_fds(void)
{
    pthread_mutex_lock(&act_mu);
    for (size_t i = 0; i < n_act; i++) {
        th_log_warn("socket activation: TCP socket fd %d matches no http:// "
                    "listen entry; closed", act_fd[i]);
        close(act_fd[i]);
    }
    n_act = 0;
    pthread_mutex_unlock(&act_mu);
}

/* An activated socket for `u` (removed from the table), or -1. */
static int take_activated(const th_http_url *u)
{
    int fd = -1;
    if (u->port == 0)
        return -1;
    pthread_mutex_lock(&act_mu);
    for (size_t i = 0; i < n_act && fd < 0; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        if (getsockname(act_fd[i], (struct sockaddr *)&ss, &len) != 0 ||
            !addr_match(&u->addr, &ss))
            continue;
        fd = act_fd[i];
        act_fd[i] = act_fd[--n_act];
    }
    pthread_mutex_unlock(&act_mu);
    return fd;
}

int th_http_start(const th_http_opts *o, const th_http_route *routes,
                  size_t n_routes, th_http_server **out, th_error *err)
{
    *out = NULL;
    th_http_server *s = calloc(1, sizeof *s);
    if (!s)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    int rc = th_http_parse_url(o->url, &s->url, err);
    if (rc < 0)
        goto fail;
    if (!s->url.loopback && !o->allow_remote) {
        rc = th_error_set(err, TH_EPERM,
                          "'%s' is not a loopback address; serving MCP on "
                          "it needs mcp.allow_remote: true",
                          o->url);
        goto fail;
    }
    s->routes = calloc(n_routes ? n_routes : 1, sizeof *s->routes);
    if (!s->routes) {
        rc = th_error_set(err, TH_ENOMEM, "out of memory");
        goto fail;
    }
    memcpy(s->routes, routes, n_routes * sizeof *routes);
    s->sndbuf = o->sndbuf;
    snprintf(s->entry, sizeof s->entry, "%s", o->url);
    s->max_conn = o->max_connections ? o->max_connections : 256;
    atomic_init(&s->n_conn, 0);
    atomic_init(&s->full_logged_ms, -1000000);
    s->n_routes = n_routes;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
                     MHD_USE_ITC;
    if (s->url.addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if (s->url.tls) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            rc = th_error_set(err, TH_ECONFIG,
                              "'%s': this libmicrohttpd has no TLS support; "
                              "use http:// behind a TLS proxy",
                              o->url);
            goto fail;
        }
        if (!o->tls_cert || !o->tls_key) {
            rc = th_error_set(err, TH_ECONFIG,
                              "'%s' needs mcp.tls_cert and mcp.tls_key",
                              o->url);
            goto fail;
        }
        if (!(s->cert = read_pem(o->tls_cert, "tls_cert", err)) ||
            !(s->key = read_pem(o->tls_key, "tls_key", err))) {
            rc = err ? err->code : TH_ECONFIG;
            goto fail;
        }
        flags |= MHD_USE_TLS;
    }
    struct MHD_OptionItem opts[12];
    size_t n = 0;
    int act = take_activated(&s->url);
    if (act >= 0) {
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, act,
                                            NULL};
        th_log_info("http: %s: the socket from the service manager (fd %d)",
                    o->url, act);
    } else {
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0,
                                            &s->url.addr};
    }
    opts[n++] = (struct MHD_OptionItem){
        MHD_OPTION_CONNECTION_LIMIT, (intptr_t)s->max_conn, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT,
                                        (intptr_t)o->client_timeout_s, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_COMPLETED,
                                        (intptr_t)on_completed, s};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_CONNECTION,
                                        (intptr_t)on_connection, s};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_UNESCAPE_CALLBACK,
                                        (intptr_t)keep_escaped, NULL};
    if (s->url.tls) {
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0,
                                            s->cert};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0,
                                            s->key};
    }
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    s->d = MHD_start_daemon(flags, s->url.port, NULL, NULL, on_access, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
    if (!s->d) {
        rc = th_error_set(err, TH_EIO,
                          "cannot serve HTTP on '%s' (address in use, not "
                          "local, or a bad TLS key/certificate; see the "
                          "debug log)",
                          o->url);
        goto fail;
    }
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    if (di)
        s->url.port = di->port;
    bool v6 = s->url.addr.ss_family == AF_INET6;
    snprintf(s->url_text, sizeof s->url_text, "%s://%s%s%s:%u%s",
             s->url.tls ? "https" : "http", v6 ? "[" : "", s->url.host,
             v6 ? "]" : "", (unsigned)s->url.port, s->url.path);
    *out = s;
    return 0;
fail:
    free(s->routes);
    free(s->cert);
    free(s->key);
    free(s);
    return rc;
}

uint16_t th_http_port(const th_http_server *s)
{
    return s->url.port;
}

const char *th_http_url_of(const th_http_server *s)
{
    return s->url_text;
}

void th_http_quiesce(th_http_server *s)
{
    if (!s || !s->d)
        return;
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

void th_http_stop(th_http_server *s)
{
    if (!s)
        return;
    if (s->d)
        MHD_stop_daemon(s->d);
    free(s->routes);
    if (s->key) {
        memset(s->key, 0, strlen(s->key));
        free(s->key);
    }
    free(s->cert);
    free(s);
}
