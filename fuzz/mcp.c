/* fuzz/mcp.c - libFuzzer target: the MCP protocol core on one session
 * (th_mcp_session_input): the JSON-RPC reader, lifecycle, dispatch and the
 * parameter checks of every method, real calls of `echo`/`echo_async`,
 * cancellation, tasks.
 *
 * The host is opened once: build/plugins/echo.so when the build has it
 * (TH_BUILD_DIR, else only the built-in tools), shutdown/session grace
 * 50 ms, log level error.  Each input is split at '\n' like the stdio
 * transport does; every line goes to a new session (max_message 4 KiB, so
 * the over-long path runs too), which is drained for 50 ms and freed.
 * Properties beyond "no crash, no leak, no UB, no hang":
 *   - every message the session sends is a JSON object with "jsonrpc":
 *     "2.0" and either a method, or an id with exactly one of result and
 *     error;
 *   - no transport callback runs after th_mcp_session_free() returned.
 *
 * needs: host/mcp/mcp.c host/core/host/host.c
 */
#define _GNU_SOURCE 1
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "../host/mcp/mcp.h"
#include "fuzz.h"
#include "front/fronts.h"
#include "th/config.h"
#include "th/err.h"
#include "th/host.h"
#include "th/log.h"

#ifndef TH_BUILD_DIR
#define TH_BUILD_DIR "build"
#endif

static th_host *mc_host;
static atomic_bool mc_closed;
static atomic_ulong mc_sent;

static void mc_open_host(void)
{
#ifndef TH_FUZZ_NO_ENTRY
    th_log_set_level(TOOLHOST_LOG_ERROR);
    th_log_set_fd(-1);
#endif
    char yaml[4400];
    const char *echo = TH_BUILD_DIR "/plugins/echo.so";
    int have_echo = access(echo, R_OK) == 0;
    snprintf(yaml, sizeof yaml,
             "host:\n  log_level: error\n  shutdown_grace: 50ms\n"
             "  session_grace: 50ms\n%s%s%s",
             have_echo ? "plugins:\n  - name: echo\n    path: " : "",
             have_echo ? echo : "", have_echo ? "\n" : "");
    th_config *cfg = NULL;
    th_error err;
    th_error_clear(&err);
    th_fronts_register_builtin(); /* the fronts' config sections */
    if (th_config_parse("fuzz.yaml", "/", yaml, strlen(yaml), &cfg, &err) < 0 ||
        th_host_open(cfg, &mc_host, &err) < 0) {
        fprintf(stderr, "mcp: cannot open the host: %s\n", err.msg);
        abort();
    }
}

/* Closes the host (the unit suite calls it after replaying). */
__attribute__((unused)) static void mc_close(void)
{
    if (mc_host)
        th_host_close(mc_host);
    mc_host = NULL;
}

static void mc_send(void *ud, const json_t *msg, const json_t *req)
{
    (void)ud;
    (void)req;
    TH_FUZZ_CHECK(!atomic_load(&mc_closed));
    TH_FUZZ_CHECK(json_is_object(msg));
    const char *v = json_string_value(json_object_get(msg, "jsonrpc"));
    TH_FUZZ_CHECK(v && strcmp(v, "2.0") == 0);
    bool method = json_is_string(json_object_get(msg, "method"));
    bool res = json_object_get(msg, "result") != NULL;
    bool err = json_object_get(msg, "error") != NULL;
    TH_FUZZ_CHECK(method || (json_object_get(msg, "id") && res != err));
    atomic_fetch_add(&mc_sent, 1);
}

static void mc_done(void *ud, const json_t *req)
{
    (void)ud;
    (void)req;
    TH_FUZZ_CHECK(!atomic_load(&mc_closed));
}

static int fuzz_mcp(const uint8_t *data, size_t size)
{
    if (size > 60000)
        return 0;
    if (!mc_host)
        mc_open_host();
    th_mcp_transport t = {.send = mc_send, .request_done = mc_done};
    th_mcp_opts o = {.max_message = 4096};
    th_principal who = {.uid = (uint32_t)getuid(), .gid = (uint32_t)getgid()};
    th_error err;
    atomic_store(&mc_closed, false);
    th_mcp_session *m = th_mcp_session_new(mc_host, &who, &t, NULL, &o, &err);
    TH_FUZZ_CHECK(m != NULL);
    if (!m)
        return 0;
    size_t off = 0;
    while (off < size) {
        const uint8_t *nl = memchr(data + off, '\n', size - off);
        size_t k = nl ? (size_t)(nl - (data + off)) : size - off;
        if (k > 0)
            th_mcp_session_input(m, (const char *)data + off, k);
        off += k + 1;
    }
    th_mcp_session_drain(m, 50);
    th_mcp_session_free(m);
    atomic_store(&mc_closed, true);
    return 0;
}

TH_FUZZ_ENTRY(fuzz_mcp)
