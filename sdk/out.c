/* out.c - output writers, progress, cancellation and logging helpers
 * (toolhost/sdk.h). */
#include "toolhost/sdk.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int th_sdk_write(toolhost_call *call, int stream, const void *data,
                 size_t len)
{
    if (!call || !call->host || !call->host->write || (!data && len))
        return TH_SDK_EINVAL;
    if (len == 0)
        return TH_SDK_OK;
    return call->host->write(call, stream, data, len);
}

int th_sdk_puts(toolhost_call *call, const char *s)
{
    if (!s)
        return TH_SDK_EINVAL;
    return th_sdk_write(call, TOOLHOST_STDOUT, s, strlen(s));
}

/* Formats into a stack buffer, or a heap one when the text is longer.
 * *heap receives the heap buffer to free (NULL when the stack one held it).
 * Returns the length or a negative code. */
static int format(char *stack, size_t stack_size, char **out, char **heap,
                  const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(stack, stack_size, fmt, ap);
    *heap = NULL;
    *out = stack;
    if (n < 0) {
        va_end(ap2);
        return TH_SDK_EINVAL;
    }
    if ((size_t)n >= stack_size) {
        char *h = malloc((size_t)n + 1);
        if (!h) {
            va_end(ap2);
            return TH_SDK_ENOMEM;
        }
        vsnprintf(h, (size_t)n + 1, fmt, ap2);
        *heap = *out = h;
    }
    va_end(ap2);
    return n;
}

int th_sdk_vprintf(toolhost_call *call, int stream, const char *fmt,
                   va_list ap)
{
    if (!fmt)
        return TH_SDK_EINVAL;
    char stack[512], *s, *heap;
    int n = format(stack, sizeof stack, &s, &heap, fmt, ap);
    if (n < 0)
        return n;
    int rc = th_sdk_write(call, stream, s, (size_t)n);
    free(heap);
    return rc;
}

int th_sdk_printf(toolhost_call *call, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = th_sdk_vprintf(call, TOOLHOST_STDOUT, fmt, ap);
    va_end(ap);
    return rc;
}

int th_sdk_eprintf(toolhost_call *call, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = th_sdk_vprintf(call, TOOLHOST_STDERR, fmt, ap);
    va_end(ap);
    return rc;
}

int th_sdk_fail(toolhost_call *call, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = th_sdk_vprintf(call, TOOLHOST_STDERR, fmt, ap);
    va_end(ap);
    if (rc == 0)
        (void)th_sdk_write(call, TOOLHOST_STDERR, "\n", 1);
    return TOOLHOST_FAILED;
}

int th_sdk_set_retry_after(toolhost_call *call, uint64_t ms)
{
    if (!call || !TH_SDK_HOST_HAS(call->host, set_retry_after))
        return TH_SDK_ESTATE;
    return call->host->set_retry_after(call, ms);
}

int th_sdk_fail_backend(toolhost_call *call, int status,
                        uint64_t retry_after_ms, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = th_sdk_vprintf(call, TOOLHOST_STDERR, fmt, ap);
    va_end(ap);
    if (rc == 0)
        (void)th_sdk_write(call, TOOLHOST_STDERR, "\n", 1);
    bool known = status == TOOLHOST_UNAVAILABLE ||
                 status == TOOLHOST_TIMEOUT ||
                 status == TOOLHOST_RATE_LIMITED;
    /* a host older than 1.5 reads these as a misuse: plain failure */
    if (!known || !call || !call->host || call->host->abi_minor < 5)
        return TOOLHOST_FAILED;
    if (retry_after_ms)
        (void)th_sdk_set_retry_after(call, retry_after_ms);
    return status;
}

int th_sdk_errf(char *err, size_t err_size, const char *fmt, ...)
{
    if (err && err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int th_sdk_progress(toolhost_call *call, double fraction, const char *fmt,
                    ...)
{
    if (!call || !call->host || !call->host->progress)
        return TH_SDK_EINVAL;
    if (!fmt)
        return call->host->progress(call, fraction, NULL, NULL, 0);
    char stack[256], *s, *heap;
    va_list ap;
    va_start(ap, fmt);
    int n = format(stack, sizeof stack, &s, &heap, fmt, ap);
    va_end(ap);
    if (n < 0)
        return n;
    int rc = call->host->progress(call, fraction, s, NULL, 0);
    free(heap);
    return rc;
}

bool th_sdk_cancelled(const toolhost_call *call)
{
    if (!call || !call->host || !call->host->is_cancelled)
        return false;
    return call->host->is_cancelled(call) != 0;
}

int th_sdk_sleep_ms(const toolhost_call *call, int64_t ms)
{
    const int64_t slice = 5;
    while (ms > 0) {
        if (th_sdk_cancelled(call))
            return TH_SDK_ECANCELLED;
        int64_t d = ms < slice ? ms : slice;
        struct timespec ts = {(time_t)(d / 1000), (long)(d % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        ms -= d;
    }
    return th_sdk_cancelled(call) ? TH_SDK_ECANCELLED : TH_SDK_OK;
}

void th_sdk_log(const toolhost_host_api *host, int level, const char *fmt,
                ...)
{
    if (!host || !host->log || !fmt)
        return;
    char stack[512], *s, *heap;
    va_list ap;
    va_start(ap, fmt);
    int n = format(stack, sizeof stack, &s, &heap, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    host->log(host, level, s);
    free(heap);
}
