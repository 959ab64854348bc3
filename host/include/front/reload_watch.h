/* front/reload_watch.h - front support: what triggers reloads on a libuv
 * loop (host/front/reload_watch.c): file events on the folders of every
 * plugin file and of the config (debounced), SIGHUP, retries of a reload
 * that met a file still being written.  A front that runs a libuv loop
 * (the msgpack-RPC server) starts one on the host's reloader
 * (th_host_reloader()); the core itself has no loop and no libuv.
 */
#ifndef TH_FRONT_RELOAD_WATCH_H
#define TH_FRONT_RELOAD_WATCH_H

#include "th/reload.h"


struct uv_loop_s;
typedef struct th_reload_watch th_reload_watch;

typedef struct th_reload_watch_opts {
    th_reload_mode mode;        /* WATCH: files + SIGHUP; SIGNAL: SIGHUP
                                   only; OFF: nothing (start succeeds) */
    uint64_t debounce_ms;       /* quiet time after the last file event */
    unsigned max_retries;       /* retries of an incomplete file; 0: 10 */
    bool no_sighup;             /* do not install the SIGHUP handler */
    /* Called on the loop's thread after every reload the watcher
     * triggered (file events, SIGHUP, retries); may be NULL.  A result
     * with `incomplete` set that will be retried is not reported until the
     * retry is over. */
    void (*on_result)(const th_reload_result *res, void *ud);
    void *ud;
} th_reload_watch_opts;

/* Starts watching on `loop` (call on the loop's thread).  The reloader
 * must outlive the watcher.  0 or TH_E* with err. */
int th_reload_watch_start(th_reloader *r, struct uv_loop_s *loop,
                          const th_reload_watch_opts *opts,
                          th_reload_watch **out, th_error *err);
/* Stops and closes every handle (loop thread); the memory is freed once
 * the loop has run the close callbacks (uv_run after this, as for any
 * handle).  A reload running on the reloader's thread is waited for. */
void th_reload_watch_stop(th_reload_watch *w);
/* A reload as SIGHUP would trigger it (loop thread); the result comes
 * through opts->on_result. */
void th_reload_watch_trigger(th_reload_watch *w);
/* Whether nothing is under way (loop thread): no reload waiting on its
 * debounce or retry timer, none asked and not answered, no answer not yet
 * reported.  File events the loop has not read yet are not seen: a caller
 * that changed a file first waits for the event itself. */
bool th_reload_watch_idle(th_reload_watch *w);
/* A reload whose result goes to fn(res, ud) on the loop's thread (the RPC
 * method): not retried, not passed to opts->on_result.  Call on the loop
 * thread.  0, or TH_ENOMEM / TH_ESTATE (stopping: fn is not called). */
int th_reload_watch_request(th_reload_watch *w,
                            void (*fn)(const th_reload_result *res, void *ud),
                            void *ud);

#endif
