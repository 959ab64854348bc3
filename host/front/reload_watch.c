/* reload_watch.c - front support (libuv): what triggers reloads on a libuv
 * loop: file events on the folders of every plugin file and of the config
 * (debounced), SIGHUP, and retries of a reload that met a file still being
 * written.  It drives the core's reloader only through th/reload.h.
 *
 * Threads.  Everything here runs on the loop's thread, except done_cb,
 * which the reloader's thread calls when a requested reload is over: it
 * copies the result under `mu` and wakes the loop with uv_async_send().
 * `outstanding` counts requests not answered yet; stop waits for it to
 * reach 0 before closing the async handle, so done_cb never touches a
 * closed handle.
 *
 * Folders, not files, are watched: a build replaces its output by rename,
 * which a watch on the file itself would lose.  An event counts when its
 * file name is one the reload reads (th_reload_is_watched).
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "th/log.h"
#include "front/reload_watch.h"
#include "front/sd.h"

typedef struct wdir {
    uv_fs_event_t h;
    char *path;
    struct th_reload_watch *w;
    bool keep;            /* marked during a resync */
    struct wdir *next;
} wdir;

/* A request of th_reload_watch_request(), answered on the loop. */
typedef struct wreq {
    struct th_reload_watch *w;
    void (*fn)(const th_reload_result *res, void *ud);
    void *ud;
    th_reload_result res;
    struct wreq *next;
} wreq;

struct th_reload_watch {
    th_reloader *r;
    uv_loop_t *loop;
    th_reload_watch_opts o;
    uv_timer_t debounce;
    uv_signal_t sighup;
    uv_async_t async;
    bool has_sighup;
    uv_timer_t watchdog;  /* WATCHDOG=1 at half $WATCHDOG_USEC (front/sd.h) */
    bool has_watchdog;
    bool sd_reloading;    /* RELOADING=1 sent: READY=1 with the result */
    wdir *dirs;
    unsigned retries;
    int handles;          /* open handles; freed when it reaches 0 */
    bool stopping;

    pthread_mutex_t mu;   /* guards what follows */
    pthread_cond_t cv;
    int outstanding;      /* requests the reloader has not answered */
    bool have_res;
    th_reload_result res; /* the latest result */
    wreq *answered;       /* th_reload_watch_request()s answered */
};

static void handle_closed(uv_handle_t *h)
{
    th_reload_watch *w = h->data;
    if (h->type == UV_FS_EVENT) {
        wdir *d = (wdir *)h;
        free(d->path);
        free(d);
    }
    if (--w->handles == 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
    }
}

/* ---- requests ------------------------------------------------------------------ */

static void done_cb(const th_reload_result *res, void *ud)
{
    th_reload_watch *w = ud;
    pthread_mutex_lock(&w->mu);
    w->res = *res;
    w->have_res = true;
    uv_async_send(&w->async);
    w->outstanding--;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void wreq_done(const th_reload_result *res, void *ud)
{
    wreq *q = ud;
    th_reload_watch *w = q->w;
    q->res = *res;
    pthread_mutex_lock(&w->mu);
    q->next = w->answered;
    w->answered = q;
    uv_async_send(&w->async);
    w->outstanding--;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Hands the answered requests to their callbacks, oldest first (loop);
 * how many. */
static int deliver(th_reload_watch *w)
{
    pthread_mutex_lock(&w->mu);
    wreq *q = w->answered, *rev = NULL;
    w->answered = NULL;
    pthread_mutex_unlock(&w->mu);
    while (q) {
        wreq *n = q->next;
        q->next = rev;
        rev = q;
        q = n;
    }
    int k = 0;
    while (rev) {
        wreq *n = rev->next;
        rev->fn(&rev->res, rev->ud);
        free(rev);
        rev = n;
        k++;
    }
    return k;
}

int th_reload_watch_request(th_reload_watch *w,
                            void (*fn)(const th_reload_result *res, void *ud),
                            void *ud)
{
    if (w->stopping)
        return TH_ESTATE;
    wreq *q = calloc(1, sizeof *q);
    if (!q)
        return TH_ENOMEM;
    q->w = w;
    q->fn = fn;
    q->ud = ud;
    pthread_mutex_lock(&w->mu);
    w->outstanding++;
    pthread_mutex_unlock(&w->mu);
    int rc = th_reload_request(w->r, wreq_done, q);
    if (rc) {
        pthread_mutex_lock(&w->mu);
        w->outstanding--;
        pthread_mutex_unlock(&w->mu);
        free(q);
    }
    return rc;
}

static void request(th_reload_watch *w)
{
    if (w->stopping)
        return;
    pthread_mutex_lock(&w->mu);
    w->outstanding++;
    pthread_mutex_unlock(&w->mu);
    if (th_reload_request(w->r, done_cb, w) != 0) {
        pthread_mutex_lock(&w->mu);
        w->outstanding--;
        pthread_mutex_unlock(&w->mu);
        th_log_error("reload: cannot request a reload (out of memory or stopping)");
    }
}

/* ---- folders ----------------------------------------------------------------------- */

static void debounce_cb(uv_timer_t *t)
{
    request(t->data);
}

static void fs_cb(uv_fs_event_t *h, const char *filename, int events, int status)
{
    (void)events;
    wdir *d = (wdir *)h;
    th_reload_watch *w = d->w;
    if (status < 0) {
        th_log_warn("reload: watching %s failed: %s", d->path, uv_strerror(status));
        return;
    }
    if (filename && !th_reload_is_watched(w->r, d->path, filename))
        return;
    th_log_debug("reload: %s/%s changed", d->path, filename ? filename : "?");
    w->retries = 0;
    uv_timer_start(&w->debounce, debounce_cb, w->o.debounce_ms, 0);
}

/* Watches every folder the reloader names now; stops the others. */
static void resync(th_reload_watch *w)
{
    if (w->o.mode != TH_RELOAD_WATCH || w->stopping)
        return;
    char **v = NULL;
    size_t n = 0;
    if (th_reload_watch_paths(w->r, &v, &n) != 0) {
        th_log_error("reload: out of memory listing the folders to watch");
        return;
    }
    for (wdir *d = w->dirs; d; d = d->next)
        d->keep = false;
    for (size_t i = 0; i < n; i++) {
        wdir *d;
        for (d = w->dirs; d; d = d->next)
            if (strcmp(d->path, v[i]) == 0)
                break;
        if (d) {
            d->keep = true;
            continue;
        }
        d = calloc(1, sizeof *d);
        if (!d || !(d->path = strdup(v[i]))) {
            free(d);
            th_log_error("reload: out of memory watching %s", v[i]);
            continue;
        }
        d->w = w;
        d->keep = true;
        uv_fs_event_init(w->loop, &d->h);
        d->h.data = w;
        w->handles++;
        int rc = uv_fs_event_start(&d->h, fs_cb, d->path, 0);
        if (rc < 0) {
            th_log_warn("reload: cannot watch %s: %s", d->path, uv_strerror(rc));
            d->keep = false; /* closed below, retried at the next resync */
        } else {
            th_log_debug("reload: watching %s", d->path);
        }
        d->next = w->dirs;
        w->dirs = d;
    }
    th_reload_paths_free(v, n);
    for (wdir **pp = &w->dirs; *pp;) {
        wdir *d = *pp;
        if (d->keep) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        uv_fs_event_stop(&d->h);
        uv_close((uv_handle_t *)&d->h, handle_closed);
    }
}

/* ---- results ------------------------------------------------------------------------- */

static void async_cb(uv_async_t *a)
{
    th_reload_watch *w = a->data;
    if (deliver(w) > 0)
        resync(w); /* a reload may have added plugins in new folders */
    pthread_mutex_lock(&w->mu);
    bool have = w->have_res;
    w->have_res = false;
    th_reload_result *res = have ? malloc(sizeof *res) : NULL;
    if (res)
        *res = w->res;
    pthread_mutex_unlock(&w->mu);
    if (!have || w->stopping) {
        free(res);
        return;
    }
    if (!res) {
        th_log_error("reload: out of memory reporting a reload");
        return;
    }
    unsigned max = w->o.max_retries ? w->o.max_retries : 10;
    if (res->rc != 0 && res->incomplete && w->retries < max) {
        w->retries++;
        th_reload_note_retry(w->r);
        th_log_info("reload: a file is still being written; retry %u of %u in "
                    "%llu ms", w->retries, max,
                    (unsigned long long)w->o.debounce_ms);
        uv_timer_start(&w->debounce, debounce_cb, w->o.debounce_ms, 0);
        free(res);
        return;
    }
    if (res->rc != 0 && res->incomplete)
        th_log_error("reload #%llu failed, nothing changed: a file was still "
                     "incomplete after %u tries: %s",
                     (unsigned long long)res->seq, w->retries + 1, res->err.msg);
    w->retries = 0;
    if (w->sd_reloading) {
        w->sd_reloading = false;
        th_sd_ready();
    }
    if (w->o.on_result)
        w->o.on_result(res, w->o.ud);
    free(res);
    resync(w);
}

static void watchdog_cb(uv_timer_t *t)
{
    (void)t;
    th_sd_watchdog_ping();
}

static void sighup_cb(uv_signal_t *s, int sig)
{
    (void)sig;
    th_reload_watch *w = s->data;
    th_log_info("reload: SIGHUP");
    if (!w->sd_reloading) {
        w->sd_reloading = true;
        th_sd_reloading();
    }
    w->retries = 0;
    request(w);
}

/* ---- life -------------------------------------------------------------------------------- */

int th_reload_watch_start(th_reloader *r, uv_loop_t *loop,
                          const th_reload_watch_opts *opts,
                          th_reload_watch **out, th_error *err)
{
    *out = NULL;
    th_reload_watch *w = calloc(1, sizeof *w);
    if (!w)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    w->r = r;
    w->loop = loop;
    w->o = *opts;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    int rc = uv_async_init(loop, &w->async, async_cb);
    if (rc < 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return th_error_set(err, TH_EIO, "reload: uv_async_init: %s", uv_strerror(rc));
    }
    w->async.data = w;
    w->handles++;
    uv_timer_init(loop, &w->debounce);
    w->debounce.data = w;
    w->handles++;
    if (opts->mode != TH_RELOAD_OFF && !opts->no_sighup) {
        /* A handle whose init failed is never closed (stop) */
        if ((rc = uv_signal_init(loop, &w->sighup)) < 0) {
            th_log_warn("reload: cannot handle SIGHUP: %s", uv_strerror(rc));
        } else {
            w->sighup.data = w;
            w->handles++;
            w->has_sighup = true;
            if ((rc = uv_signal_start(&w->sighup, sighup_cb, SIGHUP)) < 0)
                th_log_warn("reload: cannot handle SIGHUP: %s",
                            uv_strerror(rc));
        }
    }
    uint64_t wd_us = th_sd_watchdog_usec();
    if (wd_us) { /* pinged from this loop: a stuck loop stops the pings */
        uint64_t every = wd_us / 2000 ? wd_us / 2000 : 1;
        uv_timer_init(loop, &w->watchdog);
        w->watchdog.data = w;
        w->handles++;
        w->has_watchdog = true;
        uv_timer_start(&w->watchdog, watchdog_cb, 0, every);
        uv_unref((uv_handle_t *)&w->watchdog);
        th_log_info("watchdog: pinging the service manager every %llu ms",
                    (unsigned long long)every);
    }
    resync(w);
    *out = w;
    return 0;
}

void th_reload_watch_trigger(th_reload_watch *w)
{
    w->retries = 0;
    request(w);
}

bool th_reload_watch_idle(th_reload_watch *w)
{
    if (uv_is_active((uv_handle_t *)&w->debounce))
        return false;
    pthread_mutex_lock(&w->mu);
    bool idle = w->outstanding == 0 && !w->have_res && !w->answered;
    pthread_mutex_unlock(&w->mu);
    return idle;
}

void th_reload_watch_stop(th_reload_watch *w)
{
    if (!w)
        return;
    w->stopping = true;
    /* Wait for the reloader to answer what we asked (a reload runs to its
     * end; a request not started yet is answered at once when the
     * reloader stops, else soon). */
    pthread_mutex_lock(&w->mu);
    while (w->outstanding > 0)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    (void)deliver(w);
    uv_timer_stop(&w->debounce);
    uv_close((uv_handle_t *)&w->debounce, handle_closed);
    if (w->has_watchdog)
        uv_close((uv_handle_t *)&w->watchdog, handle_closed);
    if (w->has_sighup) {
        uv_signal_stop(&w->sighup);
        uv_close((uv_handle_t *)&w->sighup, handle_closed);
    }
    while (w->dirs) {
        wdir *d = w->dirs;
        w->dirs = d->next;
        uv_fs_event_stop(&d->h);
        uv_close((uv_handle_t *)&d->h, handle_closed);
    }
    uv_close((uv_handle_t *)&w->async, handle_closed);
}
