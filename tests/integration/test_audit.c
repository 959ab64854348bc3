/* test_audit.c - the audit log (host.audit, docs/ops.md "Audit log") and
 * the JSON log's schema on the real `toolhost serve`: a socket call and an
 * MCP HTTP call each write one line with the right principal, front,
 * digest of the arguments and traceparent, and so does a NATS request
 * (the host's NATS user, the traceparent header); SIGHUP reopens the file after
 * logrotate renamed it; a line that cannot be written (/dev/full) is
 * counted in /metrics and logged; every line a host writes with
 * log_format: json through calls, errors, a reload and a budget matches
 * the schema of docs/ops.md (python3-jsonschema). */
#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <jansson.h>
#include <nettle/sha2.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "common/th_http.h"
#include "integration/test_nats_harness.h"

#define TOKEN "audit-token-0123456789abcdef"
#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
#define TP2 "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

/* SHA-256 hex of the MessagePack map {"text": text} (fixmap, fixstr;
 * NULL: nil, as a sensitive parameter is hashed). */
static void args_digest(const char *text, char hex[65])
{
    uint8_t mp[64];
    size_t n = 0, tl = text ? strlen(text) : 0;
    mp[n++] = 0x81;
    mp[n++] = 0xa4;
    memcpy(mp + n, "text", 4);
    n += 4;
    if (text) {
        mp[n++] = (uint8_t)(0xa0 | tl);
        memcpy(mp + n, text, tl);
        n += tl;
    } else {
        mp[n++] = 0xc0;
    }
    uint8_t d[32];
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, n, mp);
    sha256_digest(&ctx, 32, d);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* The audit lines of `path` (NULL-terminated array of objects, at most
 * max; the count in *n). */
static size_t audit_lines(const char *path, json_t **out, size_t max)
{
    FILE *f = fopen(path, "r");
    size_t n = 0;
    char line[8192];
    while (f && n < max && fgets(line, sizeof line, f)) {
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        CU_ASSERT_PTR_NOT_NULL(j);
        if (!j)
            fprintf(stderr, "\naudit line not JSON: %s", line);
        else
            out[n++] = j;
    }
    if (f)
        fclose(f);
    return n;
}

static void free_lines(json_t **l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(l[i]);
}

static bool str_is(json_t *o, const char *k, const char *want)
{
    const char *v = json_string_value(json_object_get(o, k));
    bool ok = v && strcmp(v, want) == 0;
    if (!ok)
        fprintf(stderr, "\naudit: %s is %s, not %s\n", k, v ? v : "(none)",
                want);
    return ok;
}

static void audit_path(rpc_srv *s, char *out, size_t n)
{
    snprintf(out, n, "%s/audit.log", s->dir);
}

/* One HTTP request over loopback, the whole answer (malloc) in *out;
 * the status. */
static int http(unsigned port, const char *method, const char *path,
                const char *hdrs, const char *body, char **out)
{
    return th_test_http(port, method, path, hdrs, body, rpc_wait_ms(), out);
}

static bool rpc_echo(th_rpc_client *c, const char *json)
{
    rpc_res r;
    bool ok = rpc_call(c, "tools.call", json, &r) == 0 && !r.err;
    rpc_res_free(&r);
    return ok;
}

/* ---- socket calls --------------------------------------------------------- */

static void test_socket(void)
{
    rpc_srv s;
    rpc_opts o = {.host_extra = "  audit: audit.log\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(rpc_echo(c, "[\"echo\", {\"text\": \"a\"}]"));
    CU_ASSERT(rpc_echo(c, "[\"echo\", {\"text\": \"traced\"}, "
                          "{\"traceparent\": \"" TP "\"}]"));
    CU_ASSERT(rpc_echo(c, "[\"echo\", {\"text\": \"badtp\"}, "
                          "{\"traceparent\": \"00-zz\"}]"));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    char path[4200];
    audit_path(&s, path, sizeof path);
    json_t *l[16];
    size_t n = audit_lines(path, l, 16);
    CU_ASSERT_EQUAL(n, 3); /* one line a call, nothing else */
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_object_get(l[i], "principal");
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(p, "uid")),
                        (json_int_t)getuid());
        CU_ASSERT(str_is(l[i], "front", "rpc"));
        CU_ASSERT(str_is(l[i], "toolset", "public"));
        CU_ASSERT(str_is(l[i], "tool", "echo"));
        CU_ASSERT(str_is(l[i], "outcome", "ok"));
        CU_ASSERT(json_is_null(json_object_get(l[i], "error")));
        CU_ASSERT(json_is_number(json_object_get(l[i], "dur_ms")));
        CU_ASSERT(json_is_integer(json_object_get(l[i], "call_id")));
        const char *ts = json_string_value(json_object_get(l[i], "ts"));
        CU_ASSERT(ts && strlen(ts) == 24 && ts[23] == 'Z');
    }
    char want[65];
    if (n == 3) {
        args_digest("a", want);
        CU_ASSERT(str_is(l[0], "args_sha256", want));
        CU_ASSERT(json_is_null(json_object_get(l[0], "traceparent")));
        /* echo writes its text back: one byte */
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(l[0], "bytes_out")),
                        1);
        args_digest("traced", want);
        CU_ASSERT(str_is(l[1], "args_sha256", want));
        CU_ASSERT(str_is(l[1], "traceparent", TP));
        CU_ASSERT(json_is_null(json_object_get(l[2], "traceparent")));
    }
    free_lines(l, n);
    rpc_srv_free(&s);
}

/* A call refused before it has a record (an unknown tool) is audited too:
 * its name, the digest of its arguments as sent, outcome and error. */
static void test_refused(void)
{
    rpc_srv s;
    rpc_opts o = {.host_extra = "  audit: audit.log\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(rpc_call(c, "tools.call",
                       "[\"no_such_tool\", {\"text\": \"x\"}, "
                       "{\"traceparent\": \"" TP "\"}]",
                       &r) == 0);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    char path[4200];
    audit_path(&s, path, sizeof path);
    json_t *l[4];
    size_t n = audit_lines(path, l, 4);
    CU_ASSERT_EQUAL(n, 1);
    if (n == 1) {
        CU_ASSERT(str_is(l[0], "tool", "no_such_tool"));
        CU_ASSERT(str_is(l[0], "front", "rpc"));
        CU_ASSERT(str_is(l[0], "outcome", "error"));
        CU_ASSERT(str_is(l[0], "error", "unknown_tool"));
        CU_ASSERT(str_is(l[0], "traceparent", TP));
        CU_ASSERT(json_is_null(json_object_get(l[0], "toolset")));
        char want[65];
        args_digest("x", want);
        CU_ASSERT(str_is(l[0], "args_sha256", want));
    }
    free_lines(l, n);
    rpc_srv_free(&s);
}

/* A parameter the toolset marks sensitive is hashed as nil: two calls
 * with different secrets have the same digest. */
static void test_sensitive(void)
{
    rpc_srv s;
    rpc_opts o = {.host_extra = "  audit: audit.log\n",
                  .public_extra = "    tool_overrides:\n"
                                  "      echo: {sensitive: [text]}\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(rpc_echo(c, "[\"echo\", {\"text\": \"hunter2\"}]"));
    CU_ASSERT(rpc_echo(c, "[\"echo\", {\"text\": \"1234\"}]"));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    char path[4200];
    audit_path(&s, path, sizeof path);
    json_t *l[8];
    size_t n = audit_lines(path, l, 8);
    CU_ASSERT_EQUAL(n, 2);
    char want[65], clear[65];
    args_digest(NULL, want);
    args_digest("1234", clear);
    for (size_t i = 0; i < n; i++) {
        CU_ASSERT(str_is(l[i], "args_sha256", want));
        char *line = json_dumps(l[i], 0);
        CU_ASSERT(line && !strstr(line, "hunter2") && !strstr(line, clear));
        free(line);
    }
    free_lines(l, n);
    rpc_srv_free(&s);
}

/* ---- MCP over HTTP ---------------------------------------------------------- */

static void test_mcp_http(void)
{
    char *tokdir = th_test_tmpdir();
    char *tf = th_test_write_file(tokdir, "t.token", TOKEN "\n", (size_t)-1);
    char mcp[4400], pub[128];
    snprintf(mcp, sizeof mcp, "mcp:\n  tokens:\n    - {user: alice, file: %s}\n",
             tf);
    snprintf(pub, sizeof pub, "    allow_users: [alice, \"%u\"]\n",
             (unsigned)getuid());
    rpc_srv s;
    rpc_opts o = {.host_extra = "  audit: audit.log\n"
                                "  listen: [\"http://127.0.0.1:0/mcp\"]\n",
                  .plugins_extra = mcp,
                  .public_extra = pub};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    unsigned port = th_test_log_port(s.log, "(Streamable HTTP) on http");
    CU_ASSERT_FATAL(port != 0);
    char *ans = NULL;
    const char *auth = "Authorization: Bearer " TOKEN "\r\n";
    CU_ASSERT_EQUAL(
        http(port, "POST", "/mcp", auth,
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
             "\"params\":{\"protocolVersion\":\"2025-06-18\","
             "\"capabilities\":{},\"clientInfo\":{\"name\":\"a\","
             "\"version\":\"1\"}}}",
             &ans),
        200);
    char sid[80] = "";
    const char *p = ans ? strcasestr(ans, "Mcp-Session-Id: ") : NULL;
    if (p)
        sscanf(p + 16, "%79[0-9a-f]", sid);
    free(ans);
    CU_ASSERT_FATAL(sid[0] != '\0');
    char h[512];
    snprintf(h, sizeof h, "%sMcp-Session-Id: %s\r\n", auth, sid);
    http(port, "POST", "/mcp", h,
         "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
         &ans);
    free(ans);
    /* the traceparent as an HTTP header */
    char h2[640];
    snprintf(h2, sizeof h2, "%straceparent: " TP "\r\n", h);
    CU_ASSERT_EQUAL(
        http(port, "POST", "/mcp", h2,
             "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"m\"}}}",
             &ans),
        200);
    CU_ASSERT(ans && strstr(ans, "\"isError\":false"));
    free(ans);
    /* in params._meta, over the header */
    CU_ASSERT_EQUAL(
        http(port, "POST", "/mcp", h2,
             "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\","
             "\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"n\"},"
             "\"_meta\":{\"traceparent\":\"" TP2 "\"}}}",
             &ans),
        200);
    free(ans);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    char path[4200];
    audit_path(&s, path, sizeof path);
    json_t *l[16];
    size_t n = audit_lines(path, l, 16);
    CU_ASSERT_EQUAL(n, 2);
    char want[65];
    if (n == 2) {
        for (size_t i = 0; i < 2; i++) {
            json_t *pr = json_object_get(l[i], "principal");
            CU_ASSERT(str_is(pr, "user", "alice"));
            CU_ASSERT_PTR_NULL(json_object_get(pr, "uid"));
            CU_ASSERT(str_is(l[i], "front", "mcp"));
            CU_ASSERT(str_is(l[i], "outcome", "ok"));
        }
        args_digest("m", want);
        CU_ASSERT(str_is(l[0], "args_sha256", want));
        CU_ASSERT(str_is(l[0], "traceparent", TP));
        args_digest("n", want);
        CU_ASSERT(str_is(l[1], "args_sha256", want));
        CU_ASSERT(str_is(l[1], "traceparent", TP2));
    }
    free_lines(l, n);
    rpc_srv_free(&s);
    free(tf);
    th_test_rmtree(tokdir);
    free(tokdir);
}

/* ---- NATS: the host's NATS user, the traceparent header -------------------- */

static void test_nats(void)
{
    if (!nats_server_bin()) {
        TH_SKIP("needs nats-server (scripts/install-deps)");
        return;
    }
    gnatsd g;
    gnatsd_files(&g, "");
    CU_ASSERT_FATAL(gnatsd_start(&g) == 0);
    char url[64], cfg[2048], id[40];
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", g.port);
    snprintf(cfg, sizeof cfg,
             "host:\n"
             "  log_level: debug\n"
             "  shutdown_grace: 1s\n"
             "  audit: audit.log\n"
             "  listen: [\"%s\"]\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: @BUILD@/plugins/echo.so\n"
             "toolsets:\n"
             "  - name: public\n"
             "    tools: [echo]\n"
             "    allow_users: [nats]\n"
             "nats:\n"
             "  prefix: th\n"
             "  name: toolhost\n"
             "  toolsets: [public]\n",
             url);
    rpc_srv h;
    rpc_opts o = {.config = cfg};
    CU_ASSERT_FATAL(rpc_srv_start(&h, &o) == 0);
    host_id_from_log(&h, id, sizeof id);
    CU_ASSERT_FATAL(id[0] != '\0');
    natsConnection *nc = nats_connect(url, NULL, NULL);
    CU_ASSERT_FATAL(nc != NULL);
    natsMsg *req = NULL, *rep = NULL;
    th_buf b = TH_BUF_INIT;
    rpc_pack_json(&b, "{\"text\":\"q\"}");
    CU_ASSERT_FATAL(natsMsg_Create(&req, "th.public.echo", NULL,
                                   (const char *)b.data, (int)b.len) ==
                    NATS_OK);
    natsMsgHeader_Set(req, "traceparent", TP);
    CU_ASSERT(natsConnection_RequestMsg(&rep, nc, req, rpc_wait_ms()) ==
                  NATS_OK &&
              reply_ok(rep, "q"));
    natsMsg_Destroy(req);
    natsMsg_Destroy(rep);
    th_buf_destroy(&b);
    natsConnection_Destroy(nc);
    CU_ASSERT_EQUAL(rpc_srv_stop(&h, SIGTERM), 0);
    char path[4200];
    audit_path(&h, path, sizeof path);
    json_t *l[8];
    size_t n = audit_lines(path, l, 8);
    CU_ASSERT_EQUAL(n, 1);
    char want[65];
    args_digest("q", want);
    if (n == 1) {
        CU_ASSERT(str_is(json_object_get(l[0], "principal"), "user", "nats"));
        CU_ASSERT(str_is(l[0], "front", "nats"));
        CU_ASSERT(str_is(l[0], "args_sha256", want));
        CU_ASSERT(str_is(l[0], "traceparent", TP));
    }
    free_lines(l, n);
    rpc_srv_free(&h);
    gnatsd_free(&g);
}

/* ---- logrotate: SIGHUP reopens ------------------------------------------------ */

static void test_reopen(void)
{
    rpc_srv s;
    rpc_opts o = {.host_extra = "  audit: audit.log\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(rpc_echo(c, "[\"echo\", {\"text\": \"before\"}]"));
    char path[4200], rotated[4300];
    audit_path(&s, path, sizeof path);
    snprintf(rotated, sizeof rotated, "%s.1", path);
    CU_ASSERT_EQUAL_FATAL(rename(path, rotated), 0);
    CU_ASSERT_EQUAL(kill(s.pid, SIGHUP), 0);
    CU_ASSERT(rpc_log_wait(&s, "event=audit.reopen ", rpc_wait_ms()));
    CU_ASSERT(rpc_echo(c, "[\"echo\", {\"text\": \"after\"}]"));
    th_rpc_client_close(c);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    json_t *l[8];
    char want[65];
    size_t n = audit_lines(rotated, l, 8);
    CU_ASSERT_EQUAL(n, 1);
    args_digest("before", want);
    if (n == 1)
        CU_ASSERT(str_is(l[0], "args_sha256", want));
    free_lines(l, n);
    n = audit_lines(path, l, 8);
    CU_ASSERT_EQUAL(n, 1);
    args_digest("after", want);
    if (n == 1)
        CU_ASSERT(str_is(l[0], "args_sha256", want));
    free_lines(l, n);
    rpc_srv_free(&s);
}

/* ---- a line that cannot be written ------------------------------------------ */

static void test_write_error(void)
{
    if (access("/dev/full", W_OK) != 0) {
        TH_SKIP("needs /dev/full");
        return;
    }
    rpc_srv s;
    rpc_opts o = {.host_extra = "  audit: /dev/full\n"
                                "  listen: [\"http://127.0.0.1:0/metrics\"]\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    unsigned port = th_test_log_port(s.log, "serving Prometheus metrics on http");
    CU_ASSERT_FATAL(port != 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(rpc_echo(c, "[\"echo\", {\"text\": \"a\"}]"));
    CU_ASSERT(rpc_echo(c, "[\"echo\", {\"text\": \"b\"}]"));
    th_rpc_client_close(c);
    char *ans = NULL;
    CU_ASSERT_EQUAL(http(port, "GET", "/metrics", NULL, NULL, &ans), 200);
    CU_ASSERT(ans && strstr(ans, "\ntoolhost_audit_write_errors_total 2\n"));
    CU_ASSERT(ans && strstr(ans, "\ntoolhost_audit_lines_total 0\n"));
    free(ans);
    /* the first failure is logged, naming the file and the error */
    CU_ASSERT(rpc_log_has(&s, "event=audit.write_failed errors=1 "));
    CU_ASSERT(rpc_log_has(&s, "/dev/full: No space left on device"));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- journald ------------------------------------------------------------------ */

/* The journal's socket the test binds; the server sees it at the path
 * libsystemd sends to, in a mount namespace of its own. */
static const char *g_journal_sock;

static void journal_child(const char *dir)
{
    (void)dir;
    int fd;
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("toolhost-test", "/run", "tmpfs", MS_NOSUID | MS_NODEV,
              "mode=0755") != 0 ||
        mkdir("/run/systemd", 0755) != 0 ||
        mkdir("/run/systemd/journal", 0755) != 0 ||
        (fd = open("/run/systemd/journal/socket", O_CREAT | O_WRONLY, 0600)) <
            0)
        _exit(125);
    close(fd);
    if (mount(g_journal_sock, "/run/systemd/journal/socket", NULL, MS_BIND,
              NULL) != 0)
        _exit(125);
}

/* Whether a child may make that namespace (root, mounts allowed). */
static bool journal_possible(void)
{
    if (geteuid() != 0)
        return false;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        _exit(unshare(CLONE_NEWNS) == 0 &&
                      mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
                      mount("toolhost-test", "/run", "tmpfs", 0, NULL) == 0
                  ? 0
                  : 1);
    }
    int st = 1;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
           WEXITSTATUS(st) == 0;
}

/* audit: journald: one journal entry a call, sent to the journal's socket
 * (its native protocol), with the JSON line as MESSAGE and the fields
 * that let `journalctl TOOLHOST_AUDIT=1` find it. */
static void test_journald(void)
{
#ifndef TH_HAVE_SYSTEMD
    TH_SKIP("built without libsystemd");
    return;
#endif
    if (!journal_possible()) {
        TH_SKIP("needs root and a mount namespace (a fake journal socket "
                "at /run/systemd/journal/socket)");
        return;
    }
    char *jdir = th_test_tmpdir();
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char sock[sizeof sa.sun_path];
    CU_ASSERT_FATAL((size_t)snprintf(sock, sizeof sock, "%s/journal.sock",
                                     jdir) < sizeof sock);
    int jfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    memcpy(sa.sun_path, sock, sizeof sock);
    CU_ASSERT_FATAL(jfd >= 0 &&
                    bind(jfd, (struct sockaddr *)&sa, sizeof sa) == 0);
    g_journal_sock = sock;
    rpc_srv s;
    rpc_opts o = {.host_extra = "  audit: journald\n",
                  .child_setup = journal_child};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(rpc_echo(c, "[\"echo\", {\"text\": \"to the journal\"}]"));
    th_rpc_client_close(c);
    /* the entry: wait for a datagram naming the call (others may come
     * first) */
    char buf[8192];
    bool found = false;
    int64_t end = rpc_now_ms() + rpc_wait_ms();
    while (!found && rpc_now_ms() < end) {
        struct pollfd pf = {.fd = jfd, .events = POLLIN};
        if (poll(&pf, 1, 100) != 1)
            continue;
        ssize_t r = recv(jfd, buf, sizeof buf - 1, 0);
        if (r <= 0)
            continue;
        buf[r] = '\0';
        found = strstr(buf, "TOOLHOST_AUDIT=1") != NULL;
    }
    CU_ASSERT(found);
    if (found) {
        CU_ASSERT_PTR_NOT_NULL(strstr(buf, "SYSLOG_IDENTIFIER=toolhost-audit"));
        const char *m = strstr(buf, "MESSAGE=");
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        char *nl = strchr(m, '\n');
        if (nl)
            *nl = '\0';
        json_error_t e;
        json_t *j = json_loads(m + 8, 0, &e);
        CU_ASSERT_PTR_NOT_NULL(j);
        if (j) {
            CU_ASSERT(str_is(j, "tool", "echo"));
            CU_ASSERT(str_is(j, "front", "rpc"));
            CU_ASSERT(str_is(j, "outcome", "ok"));
            char want[65];
            args_digest("to the journal", want);
            CU_ASSERT(str_is(j, "args_sha256", want));
        }
        json_decref(j);
    }
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
    close(jfd);
    th_test_rmtree(jdir);
    free(jdir);
}

/* ---- config errors ------------------------------------------------------------- */

static void test_config(void)
{
    char *dir = th_test_tmpdir();
    static const struct {
        const char *value, *want;
    } cases[] = {
        {"\"\"", ":2:10: 'audit' must be a file path or 'journald', not "
                 "empty"},
        {"[a]", ":2:10: 'audit' must be a file path or 'journald', got "},
        {"/var/log/", ":2:10: 'audit' must name a file, not a folder"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[512];
        snprintf(text, sizeof text, "host:\n  audit: %s\n", cases[i].value);
        char *cfg = th_test_write_file(dir, "a.yaml", text, (size_t)-1);
        th_test_run r;
        th_test_toolhost(&r, "config", "check", cfg, NULL);
        CU_ASSERT(r.status != 0);
        bool ok = r.err && strstr(r.err, cases[i].want);
        CU_ASSERT(ok);
        if (!ok)
            fprintf(stderr, "\nwanted '%s' in: %s\n", cases[i].want,
                    r.err ? r.err : "");
        th_test_run_free(&r);
        free(cfg);
    }
    /* a file that cannot be opened stops the start, naming it */
    rpc_srv s;
    rpc_opts o = {.host_extra = "  audit: /nonexistent/dir/audit.log\n",
                  .no_wait = true};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    CU_ASSERT(rpc_srv_wait(&s) != 0);
    CU_ASSERT(rpc_log_has(&s, "host.audit: cannot open "
                              "/nonexistent/dir/audit.log"));
    rpc_srv_free(&s);
    th_test_rmtree(dir);
    free(dir);
}

/* ---- every JSON log line against docs/ops.md's schema ------------------------- */

static void test_log_schema(void)
{
    if (system("/usr/bin/python3 -c 'import jsonschema' 2>/dev/null") != 0) {
        TH_SKIP("needs python3-jsonschema (scripts/install-deps)");
        return;
    }
    rpc_srv s;
    /* debug: the per-call lines too; a budget that bites: max_inflight */
    rpc_opts o = {.host_extra = "  log_format: json\n"
                                "  audit: audit.log\n"
                                "  default_timeout: 2s\n"
                                "  max_timeout: 2s\n"};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    th_rpc_client *c = rpc_connect(&s);
    CU_ASSERT_FATAL(c != NULL);
    rpc_res r;
    CU_ASSERT(rpc_echo(c, "[\"echo\", {\"text\": \"ok\"}]"));
    /* a tool error, an unknown tool, bad arguments */
    CU_ASSERT(rpc_call(c, "tools.call", "[\"nope\", {}]", &r) == 0);
    rpc_res_free(&r);
    CU_ASSERT(rpc_call(c, "tools.call", "[\"echo\", {\"text\": 5}]", &r) == 0);
    rpc_res_free(&r);
    /* a budget: a timeout above host.max_timeout is capped (a log line) */
    CU_ASSERT(rpc_echo(c, "[\"echo\", {\"text\": \"t\"}, "
                          "{\"timeout_ms\": 900000}]"));
    /* an async task: acknowledged, then done */
    CU_ASSERT(rpc_call(c, "tools.call", "[\"echo_async\", {\"text\": \"x\"}]",
                       &r) == 0);
    rpc_res_free(&r);
    /* a denial (ask rule, no handler) */
    CU_ASSERT(rpc_call(c, "tools.call", "[\"fs_list\", {\"path\": \".\"}]",
                       &r) == 0);
    rpc_res_free(&r);
    /* a reload */
    CU_ASSERT(rpc_call(c, "host.reload", "[]", &r) == 0);
    rpc_res_free(&r);
    th_rpc_client_close(c);
    CU_ASSERT(rpc_log_wait(&s, "\"event\":\"audit.reopen\"", rpc_wait_ms()));
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    CU_ASSERT(rpc_log_has(&s, "\"event\":\"call.end\""));
    char script[512], doc[512];
    snprintf(script, sizeof script, "%s/tests/integration/log_schema.py",
             TH_SOURCE_DIR);
    snprintf(doc, sizeof doc, "%s/docs/ops.md", TH_SOURCE_DIR);
    char *argv[] = {"/usr/bin/python3", script, doc, s.log, NULL};
    th_test_run pr;
    th_test_run_argv(argv, NULL, 60, 0, &pr);
    if (pr.status != 0)
        fprintf(stderr, "\nlog_schema: %s%s\n", pr.out ? pr.out : "",
                pr.err ? pr.err : "");
    CU_ASSERT_EQUAL(pr.status, 0);
    th_test_run_free(&pr);
    rpc_srv_free(&s);
}

/* The NATS client library's threads and memory go with nats_Close, as in
 * the nats suites: without it valgrind counts them lost. */
static int audit_suite_clean(void)
{
    nats_CloseAndWait(2000);
    return 0;
}

void th_suite_audit(void)
{
    CU_pSuite s = CU_add_suite("audit", NULL, audit_suite_clean);
    CU_add_test(s, "socket", test_socket);
    CU_add_test(s, "refused", test_refused);
    CU_add_test(s, "sensitive", test_sensitive);
    CU_add_test(s, "mcp_http", test_mcp_http);
    CU_add_test(s, "nats", test_nats);
    CU_add_test(s, "reopen", test_reopen);
    CU_add_test(s, "write_error", test_write_error);
    CU_add_test(s, "journald", test_journald);
    CU_add_test(s, "config", test_config);
    CU_add_test(s, "log_schema", test_log_schema);
}
