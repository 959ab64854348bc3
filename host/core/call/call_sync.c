/* call_sync.c - th_call_sync: start a call and wait for its end on this
 * thread.  Progress from other threads goes into the waiter's coalescing
 * slot (th/progress.h) and is handed to the caller's callback on this
 * thread, in order, before the end. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "call_int.h"

typedef struct sync_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t self;
    bool done;
    int rc;
    th_result_copy *out;
    th_event_fn progress;
    void *ud;
    th_progress_slot prog;          /* under mu */
} sync_wait;

static void sync_cb(const th_event *ev, void *ud)
{
    sync_wait *w = ud;
    bool here = pthread_equal(pthread_self(), w->self);
    if (ev->kind == TH_EV_PROGRESS) {
        if (!w->progress)
            return;
        if (here) {
            w->progress(ev, w->ud);
            return;
        }
        th_progress_update u;
        if (th_progress_copy_event(&u, ev) != 0)
            return; /* out of memory: this update is lost, the next comes */
        pthread_mutex_lock(&w->mu);
        th_progress_put(&w->prog, &u);
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        return;
    }
    if (ev->result->kind == TH_RESULT_RUNNING) {
        /* The acknowledgement is the task's first update: the waiter sees
         * it as progress too (its message; the fraction is not carried). */
        if (!w->progress)
            return;
        if (here) {
            /* inline on the waiting thread: in order, right now */
            th_event pe;
            memset(&pe, 0, sizeof pe);
            pe.kind = TH_EV_PROGRESS;
            pe.call_id = ev->call_id;
            pe.task_id = ev->task_id;
            pe.fraction = -1;
            pe.message = ev->result->message;
            w->progress(&pe, w->ud);
            return;
        }
        th_progress_update u;
        if (th_progress_copy(&u, ev->task_id, -1, ev->result->message, NULL, 0, 0) != 0)
            return;
        pthread_mutex_lock(&w->mu);
        if (!w->prog.pending) /* an update already waiting says more */
            th_progress_put(&w->prog, &u);
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        th_progress_update_destroy(&u);
        return;
    }
    th_result_copy tmp;
    int rc = th_result_copy_from(&tmp, ev->result);
    pthread_mutex_lock(&w->mu);
    *w->out = tmp;
    w->rc = rc;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int th_call_sync(th_session *s, const char *tool, const uint8_t *args,
                 size_t len, const th_call_opts *opts, th_event_fn progress,
                 void *ud, volatile int *cancel_flag, th_result_copy *out)
{
    sync_wait w;
    memset(&w, 0, sizeof w);
    memset(out, 0, sizeof *out);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    w.self = pthread_self();
    w.out = out;
    w.progress = progress;
    w.ud = ud;
    th_call_opts o;
    memset(&o, 0, sizeof o);
    if (opts)
        o = *opts;
    /* we wait anyway: a sync tool may run right here, unless the caller
     * keeps its thread (then the call is answered at its deadline or
     * cancellation even when the tool never returns) */
    o.may_block = !o.keep_thread;
    uint64_t id = 0;
    int rc = th_call_start(s, tool, args, len, &o, sync_cb, &w, &id);
    bool cancelled = false;
    if (rc == 0) {
        pthread_mutex_lock(&w.mu);
        for (;;) { /* progress first, then the end */
            th_progress_update u;
            if (th_progress_take(&w.prog, &u)) {
                th_event ev;
                th_progress_event(&u, id, &ev);
                pthread_mutex_unlock(&w.mu);
                progress(&ev, ud);
                th_progress_update_destroy(&u);
                pthread_mutex_lock(&w.mu);
                continue;
            }
            if (w.done)
                break;
            if (cancel_flag && !cancelled && *cancel_flag) {
                cancelled = true;
                pthread_mutex_unlock(&w.mu);
                th_call_cancel(s, id);
                pthread_mutex_lock(&w.mu);
                continue;
            }
            if (cancel_flag && !cancelled) {
                struct timespec ts;
                th_deadline_rt(&ts, 5); /* the flag is polled */
                pthread_cond_timedwait(&w.cv, &w.mu, &ts);
            } else {
                pthread_cond_wait(&w.cv, &w.mu);
            }
        }
        rc = w.rc;
        pthread_mutex_unlock(&w.mu);
    }
    th_progress_clear(&w.prog);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return rc;
}
