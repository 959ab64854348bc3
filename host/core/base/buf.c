/* buf.c - the growable byte buffer of th/buf.h. */
#include "th/buf.h"

#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/err.h"

void th_buf_init(th_buf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}

void th_buf_destroy(th_buf *b)
{
    if (b->data) /* most result buffers of a call are empty */
        free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void th_buf_reset(th_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

int th_buf_reserve(th_buf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len - 1)
        return TH_ENOMEM;
    size_t need = b->len + extra + 1; /* room for the NUL */
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p)
        return TH_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int th_buf_append(th_buf *b, const void *data, size_t len)
{
    if (th_buf_reserve(b, len) != 0)
        return TH_ENOMEM;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int th_buf_printf(th_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return TH_EINVAL;
    if ((size_t)n < sizeof small)
        return th_buf_append(b, small, (size_t)n);
    if (th_buf_reserve(b, (size_t)n) != 0)
        return TH_ENOMEM;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

uint8_t *th_buf_take(th_buf *b, size_t *len)
{
    uint8_t *p = b->data;
    if (len)
        *len = b->len;
    th_buf_init(b);
    return p;
}

int th_buf_msgpack_write(void *data, const char *buf, size_t len)
{
    return th_buf_append(data, buf, len) == 0 ? 0 : -1;
}

int th_pack_cstr(msgpack_packer *pk, const char *s)
{
    if (!s)
        return msgpack_pack_nil(pk);
    return msgpack_pack_str_with_body(pk, s, strlen(s));
}
