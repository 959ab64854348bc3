/* fuzz/rpc_serve.c - libFuzzer target: the whole msgpack-RPC server on one
 * stdio session (th_rpc_serve with stdio = true): framing, message shapes,
 * method dispatch and parameter checks of every method, calls of real
 * tools, cancellation, shutdown at end of input.
 *
 * The host is opened once: build/plugins/echo.so when the build has it
 * (TH_BUILD_DIR, else only the built-in tools), shutdown_grace 50 ms so a
 * slow task ends soon at end of input, log level error.  Each input is what
 * a client writes, sent through a pipe that is closed at its end (at most
 * 60,000 bytes, under the pipe's capacity); the server writes to a memory
 * file.
 * Properties beyond "no crash, no leak, no UB, no hang":
 *   - th_rpc_serve returns 0 (a clean shutdown) whatever came in;
 *   - what the server wrote is whole msgpack-RPC messages, each of a shape
 *     th_rpc_msg_parse accepts, nothing else.
 *
 * needs: host/rpc/server.c host/core/host/host.c
 */
#define _GNU_SOURCE 1
#include <fcntl.h>
#include <msgpack.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "front/fronts.h"
#include "th/buf.h"
#include "th/config.h"
#include "th/err.h"
#include "th/host.h"
#include "th/log.h"
#include "front/rpc.h"

#ifndef TH_BUILD_DIR
#define TH_BUILD_DIR "build"
#endif

static th_host *rs_host;
static int rs_out = -1;

static void rs_open_host(void)
{
#ifndef TH_FUZZ_NO_ENTRY
    /* (not in the unit suite, whose other suites keep their log) */
    th_log_set_level(TOOLHOST_LOG_ERROR);
    th_log_set_fd(-1);
#endif
    char yaml[4400];
    const char *echo = TH_BUILD_DIR "/plugins/echo.so";
    int have_echo = access(echo, R_OK) == 0;
    snprintf(yaml, sizeof yaml,
             "host:\n  log_level: error\n  shutdown_grace: 50ms\n"
             "  session_grace: 50ms\n  max_frame: 64KiB\n%s%s%s",
             have_echo ? "plugins:\n  - name: echo\n    path: " : "",
             have_echo ? echo : "", have_echo ? "\n" : "");
    th_config *cfg = NULL;
    th_error err;
    th_error_clear(&err);
    th_fronts_register_builtin(); /* the fronts' config sections */
    if (th_config_parse("fuzz.yaml", "/", yaml, strlen(yaml), &cfg, &err) < 0 ||
        th_host_open(cfg, &rs_host, &err) < 0) {
        fprintf(stderr, "rpc_serve: cannot open the host: %s\n", err.msg);
        abort();
    }
    rs_out = memfd_create("th-fuzz-rpc-out", 0);
    if (rs_out < 0)
        abort();
}

/* Closes the host (the unit suite calls it after replaying). */
__attribute__((unused)) static void rs_close(void)
{
    if (rs_host)
        th_host_close(rs_host);
    rs_host = NULL;
    if (rs_out >= 0)
        close(rs_out);
    rs_out = -1;
}

/* Checks that out[0..n) is whole messages of a valid shape. */
static void rs_check_output(const uint8_t *out, size_t n)
{
    th_rpc_reader r;
    TH_FUZZ_CHECK(th_rpc_reader_init(&r, 0) == 0);
    if (n > 0)
        TH_FUZZ_CHECK(th_rpc_reader_feed(&r, out, n) == 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    th_error err;
    int rc;
    while ((rc = th_rpc_reader_next(&r, &u, &err)) == 1) {
        th_rpc_msg m;
        bool has_id;
        TH_FUZZ_CHECK(th_rpc_msg_parse(&u.data, &m, &has_id, &err) == 0);
    }
    TH_FUZZ_CHECK(rc == 0);
    TH_FUZZ_CHECK(th_rpc_reader_pending(&r) == 0);
    msgpack_unpacked_destroy(&u);
    th_rpc_reader_destroy(&r);
}

static int fuzz_rpc_serve(const uint8_t *data, size_t size)
{
    if (size > 60000)
        return 0;
    if (!rs_host)
        rs_open_host();
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        abort();
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(p[1], data + off, size - off);
        if (w <= 0)
            abort();
        off += (size_t)w;
    }
    close(p[1]);
    if (ftruncate(rs_out, 0) < 0 || lseek(rs_out, 0, SEEK_SET) < 0)
        abort();
    int out = dup(rs_out); /* the server closes what it is given */
    th_rpc_serve_opts o = {.stdio = true, .in_fd = p[0], .out_fd = out,
                           .no_signals = true};
    th_error err;
    th_error_clear(&err);
    int rc = th_rpc_serve(rs_host, &o, &err);
    if (rc != 0)
        fprintf(stderr, "th_rpc_serve: %s\n", err.msg);
    TH_FUZZ_CHECK(rc == 0);
    off_t n = lseek(rs_out, 0, SEEK_END);
    if (n > 0) {
        uint8_t *buf = malloc((size_t)n);
        if (buf && pread(rs_out, buf, (size_t)n, 0) == n)
            rs_check_output(buf, (size_t)n);
        free(buf);
    }
    return 0;
}

TH_FUZZ_ENTRY(fuzz_rpc_serve)
