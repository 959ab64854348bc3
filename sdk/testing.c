/* testing.c - a fake host for plugin unit tests (toolhost/testing.h). */
#include "toolhost/testing.h"

#include <errno.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static th_sdk_test_call *of(const toolhost_call *call)
{
    return (th_sdk_test_call *)(uintptr_t)call;
}

static int append(char **buf, size_t *len, const void *data, size_t n)
{
    char *b = realloc(*buf, *len + n + 1);
    if (!b)
        return TOOLHOST_ENOMEM;
    memcpy(b + *len, data, n);
    *len += n;
    b[*len] = '\0';
    *buf = b;
    return 0;
}

static int t_write(toolhost_call *call, int stream, const void *data,
                   size_t len)
{
    th_sdk_test_call *c = of(call);
    if ((stream != TOOLHOST_STDOUT && stream != TOOLHOST_STDERR) ||
        (!data && len))
        return TOOLHOST_EINVAL;
    if (c->cancel)
        return TOOLHOST_ECANCELLED;
    return stream == TOOLHOST_STDOUT ? append(&c->out, &c->out_len, data, len)
                                     : append(&c->err, &c->err_len, data, len);
}

static int t_set_meta(toolhost_call *call, const uint8_t *map, size_t len)
{
    th_sdk_test_call *c = of(call);
    if (!map || !len ||
        ((map[0] & 0xf0) != 0x80 && map[0] != 0xde && map[0] != 0xdf))
        return TOOLHOST_EINVAL;
    uint8_t *m = malloc(len);
    if (!m)
        return TOOLHOST_ENOMEM;
    memcpy(m, map, len);
    free(c->meta);
    c->meta = m;
    c->meta_len = len;
    return 0;
}

static int t_progress(toolhost_call *call, double fraction,
                      const char *message, const uint8_t *data, size_t n)
{
    (void)data, (void)n;
    th_sdk_test_call *c = of(call);
    c->n_progress++;
    c->fraction = fraction;
    snprintf(c->message, sizeof c->message, "%s", message ? message : "");
    return c->cancel ? TOOLHOST_ECANCELLED : 0;
}

static int t_is_cancelled(const toolhost_call *call)
{
    return of(call)->cancel != 0;
}

static int64_t t_time_left_ms(const toolhost_call *call)
{
    return of(call)->deadline_ms;
}

static int t_suspend(toolhost_call *call)
{
    th_sdk_test_call *c = of(call);
    pthread_mutex_lock(&c->mu);
    int rc = c->suspended ? TOOLHOST_ESTATE : 0;
    c->suspended = true;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* As the host: complete() is for a suspended call, once. */
static int t_complete(toolhost_call *call, int status)
{
    th_sdk_test_call *c = of(call);
    pthread_mutex_lock(&c->mu);
    if (!c->suspended || c->completed) {
        pthread_mutex_unlock(&c->mu);
        return TOOLHOST_ESTATE;
    }
    c->status = status == TOOLHOST_OK || status == TOOLHOST_UNAVAILABLE ||
                        status == TOOLHOST_TIMEOUT ||
                        status == TOOLHOST_RATE_LIMITED
                    ? status
                    : TOOLHOST_FAILED;
    c->completed = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static int t_set_retry_after(toolhost_call *call, uint64_t ms)
{
    th_sdk_test_call *c = of(call);
    c->retry_after_ms = ms < TOOLHOST_MAX_RETRY_AFTER_MS
                            ? ms
                            : TOOLHOST_MAX_RETRY_AFTER_MS;
    return 0;
}

static void add_log(th_sdk_test *t, const char *line)
{
    pthread_mutex_lock(&t->mu);
    size_t used = strlen(t->log);
    snprintf(t->log + used, sizeof t->log - used, "%s\n", line);
    pthread_mutex_unlock(&t->mu);
}

static void t_log(const toolhost_host_api *host, int level,
                  const char *message)
{
    (void)level;
    if (host && message)
        add_log((th_sdk_test *)(uintptr_t)host, message);
}

static int t_caller(const toolhost_call *call, toolhost_caller *out)
{
    (void)call;
    out->uid = -1;
    out->user = "test";
    out->session = "test";
    out->toolset = "default";
    out->front = TOOLHOST_FRONT_CLI;
    return 0;
}

static void t_log_call(const toolhost_call *call, int level,
                       const char *message)
{
    (void)level;
    char line[1100];
    snprintf(line, sizeof line, "call %llu: %s",
             (unsigned long long)call->call_id, message ? message : "");
    add_log(of(call)->t, line);
}

int th_sdk_test_load(th_sdk_test *t, const toolhost_plugin *plugin,
                     const uint8_t *config, size_t config_len, char *err,
                     size_t err_size)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    t->api.struct_size = sizeof t->api;
    t->api.abi_major = TOOLHOST_ABI_MAJOR;
    t->api.abi_minor = TOOLHOST_ABI_MINOR;
    t->api.write = t_write;
    t->api.set_meta = t_set_meta;
    t->api.progress = t_progress;
    t->api.is_cancelled = t_is_cancelled;
    t->api.time_left_ms = t_time_left_ms;
    t->api.suspend = t_suspend;
    t->api.complete = t_complete;
    t->api.set_retry_after = t_set_retry_after; /* ABI 1.5 */
    t->api.log = t_log;
    t->api.caller = t_caller;
    t->api.log_call = t_log_call;
    t->plugin = plugin;
    if (!plugin || plugin->abi_major != TOOLHOST_ABI_MAJOR) {
        snprintf(err, err_size, "no plugin, or another ABI major");
        return -1;
    }
    static const uint8_t empty[] = {0x80};
    if (!config) {
        config = empty;
        config_len = 1;
    }
    if (plugin->init) {
        char msg[1024] = "";
        if (plugin->init(&t->api, config, config_len, &t->state, msg,
                         sizeof msg) != 0) {
            snprintf(err, err_size, "init failed: %s",
                     msg[0] ? msg : "(no message)");
            return -1;
        }
    }
    t->initialized = true;
    return 0;
}

void th_sdk_test_unload(th_sdk_test *t)
{
    if (t->initialized && t->plugin->fini)
        t->plugin->fini(t->state);
    t->initialized = false;
    pthread_mutex_destroy(&t->mu);
}

static const toolhost_tool *find(const toolhost_plugin *p, const char *name)
{
    if (!p->n_tools)
        return NULL;
    uint32_t stride = p->tools[0].struct_size;
    for (uint32_t i = 0; i < p->n_tools; i++) {
        const toolhost_tool *t =
            (const toolhost_tool *)((const char *)p->tools +
                                    (size_t)i * stride);
        if (t->name && strcmp(t->name, name) == 0)
            return t;
    }
    return NULL;
}

int th_sdk_test_run(th_sdk_test *t, const char *tool, const uint8_t *args,
                    size_t len, int64_t timeout_ms, th_sdk_test_call *c)
{
    static uint64_t next_id = 1;
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->call.struct_size = sizeof c->call;
    c->call.host = &t->api;
    c->call.call_id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
    c->t = t;
    c->deadline_ms = -1;
    c->out = calloc(1, 1);
    c->err = calloc(1, 1);
    const toolhost_tool *d = find(t->plugin, tool);
    if (!d || !c->out || !c->err)
        return -1;
    static const uint8_t empty[] = {0x80};
    if (!args) {
        args = empty;
        len = 1;
    }
    int st = d->execute(t->state, d, &c->call, args, len);
    pthread_mutex_lock(&c->mu);
    bool susp = c->suspended;
    pthread_mutex_unlock(&c->mu);
    if (!susp)
        return st;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    while (!c->completed && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&c->cv, &c->mu, &until);
    st = c->completed ? c->status : -2;
    pthread_mutex_unlock(&c->mu);
    return st;
}

int th_sdk_test_run_kv(th_sdk_test *t, const char *tool, th_sdk_test_call *c,
                       ...)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    va_list ap;
    va_start(ap, c);
    uint32_t n = 0;
    va_list ap2;
    va_copy(ap2, ap);
    while (va_arg(ap2, const char *) != NULL) {
        (void)va_arg(ap2, const char *);
        n++;
    }
    va_end(ap2);
    msgpack_pack_map(&pk, n);
    for (uint32_t i = 0; i < n; i++) {
        const char *k = va_arg(ap, const char *);
        const char *v = va_arg(ap, const char *);
        msgpack_pack_str_with_body(&pk, k, strlen(k));
        msgpack_pack_str_with_body(&pk, v, strlen(v));
    }
    va_end(ap);
    int st = th_sdk_test_run(t, tool, (const uint8_t *)sb.data, sb.size, 5000,
                             c);
    msgpack_sbuffer_destroy(&sb);
    return st;
}

void th_sdk_test_call_free(th_sdk_test_call *c)
{
    free(c->out);
    free(c->err);
    free(c->meta);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    c->out = c->err = NULL;
    c->meta = NULL;
}
