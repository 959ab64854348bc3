/* mocks.c - canned results from the config's `mocks:` section.  A mock
 * replaces only the tool's execute(): the call goes through the whole
 * manager (validation, duplicates, deadline, acknowledgement, progress,
 * cancellation) like a real one. */
#include <string.h>
#include <time.h>

#include "th/manager.h"

const th_mock_cfg *th_mock_find(const th_config *cfg, const char *tool)
{
    for (size_t i = 0; i < cfg->n_mocks; i++)
        if (cfg->mocks[i].tool && strcmp(cfg->mocks[i].tool, tool) == 0)
            return &cfg->mocks[i];
    return NULL;
}

/* Sleeps `ms`, waking early when the call is cancelled: returns nonzero
 * then. */
static int nap(th_mcall *c, uint64_t ms)
{
    int64_t until = th_now_ns() + (int64_t)ms * 1000000;
    for (;;) {
        if (atomic_load(&c->abort_code))
            return 1;
        int64_t left = until - th_now_ns();
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
    for (size_t i = 0; i < m->n_progress; i++) {
        if (nap(c, m->progress[i].delay_ms))
            return TOOLHOST_FAILED;
        th_mcall_vtbl.progress(call, m->progress[i].fraction, m->progress[i].message,
                               NULL, 0);
    }
    if (nap(c, m->delay_ms))
        return TOOLHOST_FAILED;
    if (m->stdout_text)
        th_mcall_vtbl.write(call, TOOLHOST_STDOUT, m->stdout_text, strlen(m->stdout_text));
    if (m->stderr_text)
        th_mcall_vtbl.write(call, TOOLHOST_STDERR, m->stderr_text, strlen(m->stderr_text));
    if (m->meta && m->meta_len)
        th_mcall_vtbl.set_meta(call, m->meta, m->meta_len);
    return m->ok ? TOOLHOST_OK : TOOLHOST_FAILED;
}
