/* mcp_json.c - compact JSON text of a jansson value, appended to a th_buf:
 * what json_dumps(JSON_COMPACT) writes, without its per-token callback and
 * printf for every integer (a third of the time of a short tools/call
 * answer went there).  Strings are written as UTF-8 (jansson keeps them
 * valid), with '"', '\\' and the control characters escaped; reals as
 * jansson writes them (%.17g, ".0" added to an integral value, no '+'
 * or leading zeros in the exponent). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mcp_int.h"

/* 1: the byte needs an escape in a JSON string. */
static const unsigned char esc[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* '"' */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, /* '\\' */
};

static inline int put(th_buf *b, const char *p, size_t n)
{
    if (b->len + n < b->cap) {
        memcpy(b->data + b->len, p, n);
        b->len += n;
        return 0;
    }
    return th_buf_append(b, p, n);
}

static int put_string(th_buf *b, const char *s, size_t n)
{
    /* Room for the common case (nothing to escape) in one go. */
    if (th_buf_reserve(b, n + 2) != 0)
        return -1;
    b->data[b->len++] = '"';
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!esc[c])
            continue;
        if (i > run && put(b, s + run, i - run) != 0)
            return -1;
        char e[8];
        size_t el = 2;
        e[0] = '\\';
        switch (c) {
        case '"': e[1] = '"'; break;
        case '\\': e[1] = '\\'; break;
        case '\b': e[1] = 'b'; break;
        case '\f': e[1] = 'f'; break;
        case '\n': e[1] = 'n'; break;
        case '\r': e[1] = 'r'; break;
        case '\t': e[1] = 't'; break;
        default:
            snprintf(e, sizeof e, "\\u%04X", c);
            el = 6;
        }
        if (put(b, e, el) != 0)
            return -1;
        run = i + 1;
    }
    if (n > run && put(b, s + run, n - run) != 0)
        return -1;
    return put(b, "\"", 1);
}

static int put_int(th_buf *b, json_int_t v)
{
    char t[24], *p = t + sizeof t;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v
                                 : (unsigned long long)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    return put(b, p, (size_t)(t + sizeof t - p));
}

static int put_real(th_buf *b, double v)
{
    if (!isfinite(v))
        return -1; /* jansson refuses these too */
    char t[40];
    int n = snprintf(t, sizeof t, "%.17g", v);
    if (n <= 0 || (size_t)n >= sizeof t - 3)
        return -1;
    char *e = strchr(t, 'e');
    if (!e && !strchr(t, '.')) {
        t[n++] = '.';
        t[n++] = '0';
    }
    if (e) {
        /* as jansson: "1e+300" -> "1e300", "1e-05" -> "1e-5" */
        char *p = e + 1, *q = p;
        if (*q == '-')
            p = ++q;
        else if (*q == '+')
            q++;
        while (*q == '0' && q[1])
            q++;
        memmove(p, q, strlen(q) + 1);
        n = (int)strlen(t);
    }
    return put(b, t, (size_t)n);
}

static int put_value(th_buf *b, const json_t *j, int depth)
{
    if (depth > 2048)
        return -1;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        if (put(b, "{", 1) != 0)
            return -1;
        bool first = true;
        const char *k;
        json_t *v;
        void *it = json_object_iter((json_t *)j);
        for (; it; it = json_object_iter_next((json_t *)j, it)) {
            k = json_object_iter_key(it);
            v = json_object_iter_value(it);
            if ((!first && put(b, ",", 1) != 0) ||
                put_string(b, k, json_object_iter_key_len(it)) != 0 ||
                put(b, ":", 1) != 0 || put_value(b, v, depth + 1) != 0)
                return -1;
            first = false;
        }
        return put(b, "}", 1);
    }
    case JSON_ARRAY: {
        if (put(b, "[", 1) != 0)
            return -1;
        size_t n = json_array_size(j);
        for (size_t i = 0; i < n; i++)
            if ((i && put(b, ",", 1) != 0) ||
                put_value(b, json_array_get(j, i), depth + 1) != 0)
                return -1;
        return put(b, "]", 1);
    }
    case JSON_STRING:
        return put_string(b, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return put_int(b, json_integer_value(j));
    case JSON_REAL:
        return put_real(b, json_real_value(j));
    case JSON_TRUE:
        return put(b, "true", 4);
    case JSON_FALSE:
        return put(b, "false", 5);
    case JSON_NULL:
        return put(b, "null", 4);
    }
    return -1;
}

int mcp_json_append_string(th_buf *b, const char *s, size_t n)
{
    size_t at = b->len;
    if (put_string(b, s, n) != 0) {
        b->len = at;
        return -1;
    }
    return 0;
}

int mcp_json_append(th_buf *b, const json_t *j)
{
    size_t at = b->len;
    if (put_value(b, j, 0) != 0) {
        b->len = at;
        return -1;
    }
    return 0;
}
