/* mocks.c - canned results from the config's `mocks:` section.  A mock
 * replaces only the tool's execute(): the call goes through the whole
 * manager (validation, duplicates, deadline, acknowledgement, progress,
 * cancellation) like a real one.  It writes through the call's own
 * vtable (c->base.vt) and keeps its own clock, so it is a leaf below
 * call.c: it calls nothing of the call path. */
#include <string.h>
#include <time.h>

#include "manager.h"

const th_mock_cfg *th_mock_find(const th_config *cfg, const char *tool)
{
    for (size_t i = 0; i < cfg->n_mocks; i++)
        if (cfg->mocks[i].tool && strcmp(cfg->mocks[i].tool, tool) == 0)
            return &cfg->mocks[i];
    return NULL;
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Sleeps `ms`, waking early when the call is cancelled: returns nonzero
 * then. */
static int nap(th_mcall *c, uint64_t ms)
{
    int64_t until = mono_ns() + (int64_t)ms * 1000000;
    for (;;) {
        if (atomic_load(&c->abort_code))
            return 1;
        int64_t left = until - mono_ns();
        if (left <= 0)
            return 0;
        if (left > 2000000)
            left = 2000000;
        struct timespec ts = {0, (long)left};
        nanosleep(&ts, NULL);
    }
}

int th_mock_execute(th_mcall *c)
{
    const th_mock_cfg *m = c->mock;
    toolhost_call *call = &c->base.pub;
    const th_call_vtbl *vt = c->base.vt;
    for (size_t i = 0; i < m->n_progress; i++) {
        if (nap(c, m->progress[i].delay_ms))
            return TOOLHOST_FAILED;
        vt->progress(call, m->progress[i].fraction, m->progress[i].message,
                               NULL, 0);
    }
    if (nap(c, m->delay_ms))
        return TOOLHOST_FAILED;
    if (m->stdout_text)
        vt->write(call, TOOLHOST_STDOUT, m->stdout_text, strlen(m->stdout_text));
    if (m->stderr_text)
        vt->write(call, TOOLHOST_STDERR, m->stderr_text, strlen(m->stderr_text));
    if (m->meta && m->meta_len)
        vt->set_meta(call, m->meta, m->meta_len);
    return m->ok ? TOOLHOST_OK : TOOLHOST_FAILED;
}
