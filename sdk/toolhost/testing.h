/* toolhost/testing.h - run a plugin's tools in-process from a unit test.
 *
 * A fake host for plugin authors: th_sdk_test_load() takes the plugin's
 * descriptor (call its toolhost_plugin_v1() directly: link the plugin's
 * .c or .o into the test program) and calls init() with a msgpack config
 * (NULL: an empty map; defaults are NOT filled in: the host does that);
 * th_sdk_test_run() runs one tool with msgpack arguments and a fake call
 * that captures stdout, stderr, meta, progress and log lines, and waits for
 * complete() when the tool suspends (at most timeout_ms).  The arguments
 * are passed as given: the host's validation (types, bounds, defaults) is
 * not run here; `toolhost call ./x.so TOOL k=v` runs the real thing.
 *
 *   #include <toolhost/testing.h>
 *   const toolhost_plugin *toolhost_plugin_v1(void);
 *   int main(void) {
 *       th_sdk_test t;
 *       char err[256];
 *       if (th_sdk_test_load(&t, toolhost_plugin_v1(), NULL, 0, err,
 *                            sizeof err) != 0) return 1;
 *       th_sdk_test_call c;
 *       int st = th_sdk_test_run_kv(&t, "greeter_hello", &c,
 *                                   "name", "you", NULL);
 *       // st == TOOLHOST_OK, c.out holds "hello, you\n"
 *       th_sdk_test_call_free(&c);
 *       th_sdk_test_unload(&t);
 *   }
 *
 * Build: cc test.c plugin.c $(pkg-config --cflags --libs toolhost-testing)
 * (the same library as toolhost-plugin, plus pthread).
 */
#ifndef TOOLHOST_TESTING_H
#define TOOLHOST_TESTING_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "toolhost/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct th_sdk_test {
    toolhost_host_api api; /* given to init() and every call */
    const toolhost_plugin *plugin;
    void *state;
    bool initialized;
    char log[4096];        /* log lines, newline-separated (cut when full) */
    pthread_mutex_t mu;
} th_sdk_test;

/* One fake call.  `call` comes first: the tool's toolhost_call *. */
typedef struct th_sdk_test_call {
    toolhost_call call;
    th_sdk_test *t;
    char *out, *err;       /* NUL-terminated captures (never NULL after
                              a run), out_len/err_len bytes */
    size_t out_len, err_len;
    uint8_t *meta;         /* the last set_meta() map, or NULL */
    size_t meta_len;
    int n_progress;
    double fraction;       /* of the last progress update */
    char message[256];     /* of the last progress update */
    int cancel;            /* set nonzero to cancel (is_cancelled, writes) */
    int64_t deadline_ms;   /* time_left_ms() answers this; -1 none */
    /* suspend / complete */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool suspended, completed;
    int status;
    uint64_t retry_after_ms; /* ABI 1.5: the last set_retry_after(), 0 */
} th_sdk_test_call;

/* Calls init() (when the plugin has one).  0, or nonzero with a message. */
int th_sdk_test_load(th_sdk_test *t, const toolhost_plugin *plugin,
                     const uint8_t *config, size_t config_len, char *err,
                     size_t err_size);
/* Calls fini() when init() succeeded. */
void th_sdk_test_unload(th_sdk_test *t);

/* Runs `tool` with msgpack `args` (NULL: an empty map).  Returns the
 * tool's status (TOOLHOST_OK, TOOLHOST_FAILED, or (1.5) a backend's
 * TOOLHOST_UNAVAILABLE, TOOLHOST_TIMEOUT, TOOLHOST_RATE_LIMITED; a
 * suspended call's status from complete()), -1 for an unknown tool, -2 when a suspended call did
 * not complete within timeout_ms.  Free c with th_sdk_test_call_free()
 * in every case (after a -2 the tool may still hold the call: free it only
 * once the tool is done with it). */
int th_sdk_test_run(th_sdk_test *t, const char *tool, const uint8_t *args,
                    size_t len, int64_t timeout_ms, th_sdk_test_call *c);
/* The same with string arguments: key, value, ..., NULL. */
int th_sdk_test_run_kv(th_sdk_test *t, const char *tool, th_sdk_test_call *c,
                       ...);
void th_sdk_test_call_free(th_sdk_test_call *c);

#ifdef __cplusplus
}
#endif

#endif
