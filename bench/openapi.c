/* bench/openapi.c - the OpenAPI tool source's overhead: the same GET
 * (getInventory of tests/openapi/petstore.yaml, a bearer token, a small
 * JSON answer) made two ways against one local HTTP server in one run:
 *   - direct: libcurl easy handles as the plugin uses them (the floor);
 *   - toolhost: tools.call over msgpack-RPC (Unix socket) to `toolhost
 *     serve` with the openapi plugin, which makes that request;
 * each twice: a new connection per request (direct: a new handle each;
 * toolhost: the API with keep_alive 0), and the connection reused (direct:
 * one handle kept; toolhost: keep_alive's default).
 * Reported: p50/p99 and mean of each, the overhead (toolhost - direct) in
 * microseconds and the ratio; beside them, a tools.call of `echo` on the
 * same connection (the RPC round trip alone, with no HTTP) to show how
 * much of the overhead is the front and how much the plugin.  The server
 * is libmicrohttpd on 127.0.0.1 (port 0), one thread per connection.
 *
 *   build/bench/openapi build      (TH_BENCH_QUICK=1: a short run) */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "front/rpc.h"

#define TOKEN "bench-token"
#define BODY "{\"dog\": 2, \"cat\": 1, \"fish\": 7}"

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *data,
                                  size_t *size, void **con_cls)
{
    (void)cls, (void)method, (void)version, (void)data, (void)size;
    (void)con_cls;
    const char *auth =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    bool ok = auth && !strcmp(auth, "Bearer " TOKEN) &&
              !strcmp(url, "/v1/store/inventory");
    const char *body = ok ? BODY : "{}";
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result rc = MHD_queue_response(c, ok ? 200 : 401, r);
    MHD_destroy_response(r);
    return rc;
}

/* ---- direct ----------------------------------------------------------- */

typedef struct direct {
    const char *url;
    struct curl_slist *h;
    char buf[256];
    size_t len;
    CURL *kept; /* reused (its connection with it), or NULL: one each */
} direct;

static size_t on_data(char *p, size_t s, size_t n, void *ud)
{
    direct *d = ud;
    size_t len = s * n;
    if (d->len + len < sizeof d->buf) {
        memcpy(d->buf + d->len, p, len);
        d->len += len;
    }
    return len;
}

static uint64_t direct_one(void *ud)
{
    direct *d = ud;
    uint64_t t0 = bench_now_ns();
    CURL *e = d->kept ? d->kept : curl_easy_init();
    if (d->kept)
        curl_easy_reset(e);
    d->len = 0;
    curl_easy_setopt(e, CURLOPT_URL, d->url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, d->h);
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, d);
    long status = 0;
    if (curl_easy_perform(e) != CURLE_OK ||
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK ||
        status != 200)
        bench_die("direct request failed (HTTP %ld)", status);
    if (!d->kept)
        curl_easy_cleanup(e);
    return bench_now_ns() - t0;
}

/* ---- through toolhost ------------------------------------------------- */

static char tmpdir[256];
static pid_t server_pid = -1;

static void stop_server(void)
{
    if (server_pid > 0) {
        kill(server_pid, SIGTERM);
        int st;
        for (int i = 0; i < 500 && server_pid > 0; i++) {
            if (waitpid(server_pid, &st, WNOHANG) == server_pid)
                server_pid = -1;
            else
                usleep(10000);
        }
        if (server_pid > 0) {
            kill(server_pid, SIGKILL);
            waitpid(server_pid, &st, 0);
            server_pid = -1;
        }
    }
    if (tmpdir[0]) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "bench: could not remove %s\n", tmpdir);
        tmpdir[0] = '\0';
    }
}

static th_rpc_client *start_server(const char *build, const char *spec,
                                   const char *url)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/th-bench-openapi-XXXXXX", base);
    if (!mkdtemp(tmpdir))
        bench_die("mkdtemp: %s", strerror(errno));
    atexit(stop_server);
    char cfg[400], log[400], sock[400];
    snprintf(cfg, sizeof cfg, "%s/bench.yaml", tmpdir);
    snprintf(log, sizeof log, "%s/server.log", tmpdir);
    snprintf(sock, sizeof sock, "unix:%s/s.sock", tmpdir);
    FILE *f = fopen(cfg, "w");
    if (!f)
        bench_die("%s: %s", cfg, strerror(errno));
    fprintf(f,
            "host:\n"
            "  log_level: warn\n"
            "plugins:\n"
            "  - name: echo\n"
            "    path: %s/plugins/echo.so\n"
            "  - name: openapi\n"
            "    path: %s/plugins/openapi.so\n"
            "    config:\n"
            "      apis:\n"
            "        - name: pets\n"
            "          spec: %s\n"
            "          base_url: %s\n"
            "          include: [getInventory]\n"
            "          allow_private: true\n"
            "          auth: {bearer_env: TH_BENCH_OPENAPI_TOKEN}\n"
            "        - name: fresh\n"
            "          prefix: fresh_\n"
            "          keep_alive: 0\n"
            "          spec: %s\n"
            "          base_url: %s\n"
            "          include: [getInventory]\n"
            "          allow_private: true\n"
            "          auth: {bearer_env: TH_BENCH_OPENAPI_TOKEN}\n"
            "toolsets:\n"
            "  - name: default\n"
            "    tools: [\"*\"]\n"
            "    permissions:\n"
            "      rules:\n"
            "        - {flag: open_world, action: allow}\n",
            build, build, spec, url, spec, url);
    fclose(f);
    setenv("TH_BENCH_OPENAPI_TOKEN", TOKEN, 1);
    char exe[4200];
    snprintf(exe, sizeof exe, "%s/toolhost", build);
    server_pid = fork();
    if (server_pid < 0)
        bench_die("fork: %s", strerror(errno));
    if (server_pid == 0) {
        int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (lfd >= 0) {
            dup2(lfd, 1);
            dup2(lfd, 2);
        }
        execl(exe, exe, "serve", "-c", cfg, "--listen", sock, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 6000; i++) {
        th_rpc_client *c = NULL;
        th_error e;
        if (th_rpc_client_connect(sock, &c, &e) == 0)
            return c;
        int st;
        if (waitpid(server_pid, &st, WNOHANG) == server_pid) {
            server_pid = -1;
            char cmd[500];
            snprintf(cmd, sizeof cmd, "cat '%s' >&2", log);
            if (system(cmd) != 0)
                fprintf(stderr, "(no log)\n");
            bench_die("toolhost serve exited before listening (log above)");
        }
        usleep(10000);
    }
    bench_die("toolhost serve did not listen within 60 s");
    return NULL;
}

typedef struct via {
    th_rpc_client *c;
    uint8_t params[64];
    size_t len;
} via;

/* ["TOOL", {KEY: VALUE}] (no key: {}) as msgpack into v->params. */
static void via_args(via *v, const char *tool, const char *key,
                     const char *value)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_str_with_body(&pk, tool, strlen(tool));
    msgpack_pack_map(&pk, key ? 1 : 0);
    if (key) {
        msgpack_pack_str_with_body(&pk, key, strlen(key));
        msgpack_pack_str_with_body(&pk, value, strlen(value));
    }
    if (sb.size > sizeof v->params)
        bench_die("arguments too long");
    memcpy(v->params, sb.data, sb.size);
    v->len = sb.size;
    msgpack_sbuffer_destroy(&sb);
}

static uint64_t via_one(void *ud)
{
    via *v = ud;
    th_rpc_reply rep;
    th_error e;
    uint64_t t0 = bench_now_ns();
    if (th_rpc_client_call(v->c, "tools.call", v->params, v->len, NULL, NULL,
                           &rep, &e) != 0)
        bench_die("tools.call: %s", e.msg);
    uint64_t d = bench_now_ns() - t0;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    bool ok = rep.result &&
              msgpack_unpack_next(&u, (const char *)rep.result,
                                  rep.result_len, &off) ==
                  MSGPACK_UNPACK_SUCCESS;
    const msgpack_object *o = ok ? th_rpc_map_get(&u.data, "ok") : NULL;
    ok = o && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
    msgpack_unpacked_destroy(&u);
    th_rpc_reply_destroy(&rep);
    if (!ok)
        bench_die("getInventory through toolhost failed");
    return d;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        bench_die("usage: %s BUILD_DIR", argv[0]);
    const char *build = bench_build_dir(argv[1]);
    char spec[4300];
    snprintf(spec, sizeof spec, "%s/../tests/openapi/petstore.yaml", build);
    char spec_abs[4300];
    if (!realpath(spec, spec_abs)) { /* a sanitizer build: one level more */
        snprintf(spec, sizeof spec, "%s/../../tests/openapi/petstore.yaml",
                 build);
        if (!realpath(spec, spec_abs))
            bench_die("tests/openapi/petstore.yaml not found beside %s",
                      build);
    }
    bench_machine m;
    bench_machine_get(&m);
    bench_machine_print("openapi", &m);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        bench_die("curl_global_init failed");
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
        NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, &sa,
        MHD_OPTION_END);
    if (!d)
        bench_die("libmicrohttpd did not start");
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    char base[64], url[128];
    snprintf(base, sizeof base, "http://127.0.0.1:%u/v1", di->port);
    snprintf(url, sizeof url, "%s/store/inventory", base);

    long n = bench_iters(2000, 20, 50);
    uint64_t *samples = malloc((size_t)n * sizeof *samples);
    if (!samples)
        bench_die("out of memory");
    direct dr = {.url = url};
    dr.h = curl_slist_append(NULL, "Authorization: Bearer " TOKEN);
    dr.h = curl_slist_append(dr.h, "Accept: application/json");
    bench_stats sd, sv, sdk, svk;
    bench_rounds(n, direct_one, &dr, samples, &sd);
    dr.kept = curl_easy_init();
    if (!dr.kept)
        bench_die("out of memory");
    bench_rounds(n, direct_one, &dr, samples, &sdk);
    curl_easy_cleanup(dr.kept);

    via v = {.c = start_server(build, spec_abs, base)};
    bench_stats se;
    via_args(&v, "echo", "text", "hello");
    bench_rounds(n, via_one, &v, samples, &se);
    via_args(&v, "fresh_getInventory", NULL, NULL);
    bench_rounds(n, via_one, &v, samples, &sv);
    via_args(&v, "getInventory", NULL, NULL);
    bench_rounds(n, via_one, &v, samples, &svk);
    th_rpc_client_close(v.c);
    stop_server();

    double over_us = ((double)sv.p50_ns - (double)sd.p50_ns) / 1000.0;
    double ratio = sd.p50_ns ? (double)sv.p50_ns / (double)sd.p50_ns : 0;
    double over_k = ((double)svk.p50_ns - (double)sdk.p50_ns) / 1000.0;
    double ratio_k = sdk.p50_ns ? (double)svk.p50_ns / (double)sdk.p50_ns : 0;
    printf("%-40s %10s %10s %10s\n", "one GET", "p50 us", "p99 us",
           "mean us");
    printf("%-40s %10.1f %10.1f %10.1f\n",
           "direct libcurl, a new connection each", sd.p50_ns / 1e3,
           sd.p99_ns / 1e3, sd.mean_ns / 1e3);
    printf("%-40s %10.1f %10.1f %10.1f\n",
           "tools.call -> openapi, keep_alive 0", sv.p50_ns / 1e3,
           sv.p99_ns / 1e3, sv.mean_ns / 1e3);
    printf("%-40s %10.1f %10.1f %10.1f\n",
           "direct libcurl, connection reused", sdk.p50_ns / 1e3,
           sdk.p99_ns / 1e3, sdk.mean_ns / 1e3);
    printf("%-40s %10.1f %10.1f %10.1f\n",
           "tools.call -> openapi (keep_alive 4)", svk.p50_ns / 1e3,
           svk.p99_ns / 1e3, svk.mean_ns / 1e3);
    printf("%-40s %10.1f %10.1f %10.1f\n", "(tools.call of echo: RPC alone)",
           se.p50_ns / 1e3, se.p99_ns / 1e3, se.mean_ns / 1e3);
    printf("overhead of the OpenAPI path at p50: a new connection each "
           "%.1f us (%.2fx the direct request); connection reused %.1f us "
           "(%.2fx); %d calls each\n",
           over_us, ratio, over_k, ratio_k, (int)n);
    bench_json j;
    bench_json_begin(&j, "openapi", &m);
    bench_json_num(&j, "calls", (double)n);
    bench_json_num(&j, "direct_p50_us", sd.p50_ns / 1e3);
    bench_json_num(&j, "direct_p99_us", sd.p99_ns / 1e3);
    bench_json_num(&j, "toolhost_p50_us", sv.p50_ns / 1e3);
    bench_json_num(&j, "toolhost_p99_us", sv.p99_ns / 1e3);
    bench_json_num(&j, "direct_reused_p50_us", sdk.p50_ns / 1e3);
    bench_json_num(&j, "toolhost_reused_p50_us", svk.p50_ns / 1e3);
    bench_json_num(&j, "rpc_echo_p50_us", se.p50_ns / 1e3);
    bench_json_num(&j, "overhead_p50_us", over_us);
    bench_json_num(&j, "ratio_p50", ratio);
    bench_json_num(&j, "overhead_reused_p50_us", over_k);
    bench_json_num(&j, "ratio_reused_p50", ratio_k);
    bench_json_end(&j);
    curl_slist_free_all(dr.h);
    free(samples);
    MHD_stop_daemon(d);
    curl_global_cleanup();
    return 0;
}
