/* json.c - a small JSON writer for structured output, and the wrappers of
 * the host's ABI 1.1 callbacks (toolhost/sdk.h). */
#include "toolhost/sdk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- host callbacks of ABI 1.1 -------------------------------------------- */

int th_sdk_caller(const toolhost_call *call, toolhost_caller *out)
{
    if (!call || !out)
        return TH_SDK_EINVAL;
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->uid = -1;
    if (!TH_SDK_HOST_HAS(call->host, caller))
        return TH_SDK_ESTATE;
    return call->host->caller(call, out);
}

void th_sdk_log_call(const toolhost_call *call, int level, const char *fmt,
                     ...)
{
    if (!call || !call->host || !fmt)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (TH_SDK_HOST_HAS(call->host, log_call)) {
        call->host->log_call(call, level, line);
    } else if (call->host->log) {
        char tagged[1100];
        snprintf(tagged, sizeof tagged, "call %llu: %s",
                 (unsigned long long)call->call_id, line);
        call->host->log(call->host, level, tagged);
    }
}

int th_sdk_on_cancel(toolhost_call *call, void (*fn)(void *ud), void *ud)
{
    if (!call)
        return TH_SDK_EINVAL;
    if (!TH_SDK_HOST_HAS(call->host, on_cancel))
        return TH_SDK_ESTATE;
    return call->host->on_cancel(call, fn, ud);
}

int th_sdk_cancel_fd(toolhost_call *call)
{
    if (!call)
        return TH_SDK_EINVAL;
    if (!TH_SDK_HOST_HAS(call->host, cancel_fd))
        return TH_SDK_ESTATE;
    return call->host->cancel_fd(call);
}

/* ---- the JSON writer --------------------------------------------------------- */

void th_sdk_json_init(th_sdk_json *j)
{
    memset(j, 0, sizeof *j);
}

void th_sdk_json_destroy(th_sdk_json *j)
{
    free(j->buf);
    memset(j, 0, sizeof *j);
}

static int fail(th_sdk_json *j, int code)
{
    if (!j->err)
        j->err = code;
    return j->err;
}

static int put(th_sdk_json *j, const char *s, size_t n)
{
    if (j->err)
        return j->err;
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap : 256;
        while (cap < j->len + n + 1) {
            if (cap > SIZE_MAX / 2)
                return fail(j, TH_SDK_ENOMEM);
            cap *= 2;
        }
        char *b = realloc(j->buf, cap);
        if (!b)
            return fail(j, TH_SDK_ENOMEM);
        j->buf = b;
        j->cap = cap;
    }
    memcpy(j->buf + j->len, s, n);
    j->len += n;
    j->buf[j->len] = '\0';
    return 0;
}

/* Before a value: a comma when needed; a key must be waiting inside an
 * object; nothing after the top value is whole. */
static int before_value(th_sdk_json *j)
{
    if (j->err)
        return j->err;
    if (j->done)
        return fail(j, TH_SDK_EINVAL);
    if (j->depth == 0)
        return 0;
    int d = j->depth - 1;
    if (j->in_object[d]) {
        if (!j->have_key)
            return fail(j, TH_SDK_EINVAL);
        j->have_key = 0;
        return 0;
    }
    if (j->count[d] && put(j, ",", 1))
        return j->err;
    j->count[d] = 1;
    return 0;
}

static void after_value(th_sdk_json *j)
{
    if (j->depth == 0)
        j->done = 1;
}

/* The decoded length of a well-formed UTF-8 sequence at s (1 to 4), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    unsigned cp = c & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

static int put_string(th_sdk_json *j, const char *s, size_t n)
{
    if (put(j, "\"", 1))
        return j->err;
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n && !j->err) {
        size_t run = i;
        /* Plain ASCII runs in one copy. */
        while (run < n && p[run] >= 0x20 && p[run] < 0x80 && p[run] != '"' &&
               p[run] != '\\')
            run++;
        if (run > i) {
            put(j, s + i, run - i);
            i = run;
            continue;
        }
        unsigned char c = p[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(j, esc, 2);
            i++;
        } else if (c < 0x20) {
            const char *short_form = c == '\n'   ? "\\n"
                                     : c == '\r' ? "\\r"
                                     : c == '\t' ? "\\t"
                                     : c == '\b' ? "\\b"
                                     : c == '\f' ? "\\f"
                                                 : NULL;
            if (short_form) {
                put(j, short_form, 2);
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                put(j, esc, 6);
            }
            i++;
        } else {
            size_t l = utf8_len(p + i, n - i);
            if (l) {
                put(j, s + i, l);
                i += l;
            } else {
                put(j, "\xef\xbf\xbd", 3); /* U+FFFD for a bad byte */
                i++;
            }
        }
    }
    return put(j, "\"", 1);
}

static int open_level(th_sdk_json *j, int object)
{
    if (before_value(j))
        return j->err;
    if (j->depth >= TH_SDK_JSON_MAX_DEPTH)
        return fail(j, TH_SDK_EINVAL);
    j->in_object[j->depth] = (unsigned char)object;
    j->count[j->depth] = 0;
    j->depth++;
    return put(j, object ? "{" : "[", 1);
}

int th_sdk_json_object(th_sdk_json *j)
{
    return open_level(j, 1);
}

int th_sdk_json_array(th_sdk_json *j)
{
    return open_level(j, 0);
}

int th_sdk_json_end(th_sdk_json *j)
{
    if (j->err)
        return j->err;
    if (j->depth == 0 || j->have_key)
        return fail(j, TH_SDK_EINVAL);
    j->depth--;
    if (put(j, j->in_object[j->depth] ? "}" : "]", 1))
        return j->err;
    after_value(j);
    return 0;
}

int th_sdk_json_key(th_sdk_json *j, const char *key)
{
    if (j->err)
        return j->err;
    if (!key || j->depth == 0 || !j->in_object[j->depth - 1] || j->have_key)
        return fail(j, TH_SDK_EINVAL);
    int d = j->depth - 1;
    if (j->count[d] && put(j, ",", 1))
        return j->err;
    j->count[d] = 1;
    if (put_string(j, key, strlen(key)) || put(j, ":", 1))
        return j->err;
    j->have_key = 1;
    return 0;
}

int th_sdk_json_strn(th_sdk_json *j, const char *s, size_t n)
{
    if (!s && n)
        return fail(j, TH_SDK_EINVAL);
    if (before_value(j) || put_string(j, s ? s : "", n))
        return j->err;
    after_value(j);
    return 0;
}

int th_sdk_json_str(th_sdk_json *j, const char *s)
{
    if (!s)
        return th_sdk_json_null(j);
    return th_sdk_json_strn(j, s, strlen(s));
}

static int put_literal(th_sdk_json *j, const char *text)
{
    if (before_value(j) || put(j, text, strlen(text)))
        return j->err;
    after_value(j);
    return 0;
}

int th_sdk_json_int(th_sdk_json *j, int64_t v)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)v);
    return put_literal(j, b);
}

int th_sdk_json_uint(th_sdk_json *j, uint64_t v)
{
    char b[32];
    snprintf(b, sizeof b, "%llu", (unsigned long long)v);
    return put_literal(j, b);
}

int th_sdk_json_double(th_sdk_json *j, double v)
{
    if (!isfinite(v))
        return fail(j, TH_SDK_EINVAL);
    char b[40];
    /* The shortest of %.15g..%.17g that reads back as the same double
     * (0.1, not 0.10000000000000001); keep a fraction or exponent so it
     * reads as a number with a fraction (1.0, not 1). */
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, v);
        if (strtod(b, NULL) == v)
            break;
    }
    if (!strpbrk(b, ".eE"))
        strncat(b, ".0", sizeof b - strlen(b) - 1);
    return put_literal(j, b);
}

int th_sdk_json_bool(th_sdk_json *j, bool v)
{
    return put_literal(j, v ? "true" : "false");
}

int th_sdk_json_null(th_sdk_json *j)
{
    return put_literal(j, "null");
}

int th_sdk_json_finish(th_sdk_json *j, const char **text, size_t *len)
{
    if (j->err)
        return j->err;
    if (!j->done)
        return fail(j, TH_SDK_EINVAL);
    if (text)
        *text = j->buf;
    if (len)
        *len = j->len;
    return 0;
}

int th_sdk_json_write(th_sdk_json *j, toolhost_call *call)
{
    const char *t;
    size_t n;
    int rc = th_sdk_json_finish(j, &t, &n);
    if (rc)
        return rc;
    return th_sdk_write(call, TOOLHOST_STDOUT, t, n);
}
