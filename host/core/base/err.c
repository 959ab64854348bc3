/* err.c - the error table (th/err.h) and th_error helpers. */
#include "th/err.h"

#include <stdio.h>
#include <string.h>

const char *th_err_name(int err)
{
    switch (err) {
#define TH_ERR_NAME(name, num, code, msg)                                     \
    case num:                                                                 \
        return code;
        TH_ERRNO_MAP(TH_ERR_NAME)
#undef TH_ERR_NAME
    default:
        return "internal";
    }
}

const char *th_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
#define TH_ERR_MSG(name, num, code, msg)                                      \
    case num:                                                                 \
        return msg;
        TH_ERRNO_MAP(TH_ERR_MSG)
#undef TH_ERR_MSG
    default:
        return "unknown error";
    }
}

int th_error_setv(th_error *err, int code, const char *fmt, va_list ap)
{
    if (err) {
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    }
    return code;
}

int th_error_set(th_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    th_error_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

void th_error_prefix(th_error *err, const char *fmt, ...)
{
    if (!err)
        return;
    char pre[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t plen = strlen(pre), mlen = strlen(err->msg);
    if (plen >= sizeof err->msg - 1)
        return;
    if (plen + mlen >= sizeof err->msg)
        mlen = sizeof err->msg - 1 - plen;
    memmove(err->msg + plen, err->msg, mlen);
    memcpy(err->msg, pre, plen);
    err->msg[plen + mlen] = '\0';
}

int th_err_from_name(const char *name)
{
#define TH_ERR_FROM(ename, num, code, msg)                                    \
    if (strcmp(name, code) == 0)                                              \
        return num;
    TH_ERRNO_MAP(TH_ERR_FROM)
#undef TH_ERR_FROM
    return TH_EINTERNAL;
}
