/* mcp_fast.c - the hot request read without a JSON tree.
 *
 * A tools/call whose message is exactly {"jsonrpc":"2.0","id":...,
 * "method":"tools/call","params":{"name":...,"arguments":{...}}} (keys in
 * any order, any JSON whitespace) is read once by yajl's event parser
 * (libyajl: a maintained Debian package), and its arguments are written
 * straight as msgpack: the bytes th_json_to_msgpack() of jansson's tree
 * would give.  jansson builds a tree of allocated nodes with a hash table
 * per object and reads a byte at a time through a stream; for the ~100
 * bytes of a plain call that was half of the host's time per call
 * (bench/README.md, "mcp").
 *
 * This reader accepts only what it is sure of and says "not mine" for
 * anything else: other keys (_meta, task, unknown ones), a repeated key,
 * reals, integers of more than 18 digits, \u escapes of surrogates or of
 * U+0000, ill-formed UTF-8, control bytes but tab, LF and CR, nesting past FAST_DEPTH, more than FAST_KEYS
 * keys in one object, anything yajl refuses.  Those messages go through
 * json_loadb() and the usual checks, so every error text and every edge
 * case stays the tree path's.  What it accepts, jansson reads as the same
 * values (tests/unit/test_mcp_fast.c checks it on random edits). */
#include <msgpack.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <yajl_parse.h>

#include "mcp_int.h"
#include "th/utf8.h"
#include "front/uv_guard.h"

#define FAST_DEPTH 32 /* nesting of arguments */
#define FAST_KEYS 32  /* keys of one arguments object (duplicate check) */
#define FAST_KEEP_MAX ((size_t)64 << 10) /* longer messages: handle dropped */

enum {
    AT_TOP,    /* before the message's object */
    AT_ENV,    /* in the message's object */
    AT_PARAMS, /* in params */
    AT_ARGS,   /* in arguments (or deeper) */
    AT_DONE,   /* after the message's object */
};

/* What the next value is, in the envelope or params. */
enum { K_NONE, K_JSONRPC, K_ID, K_METHOD, K_PARAMS, K_NAME, K_ARGS };

enum {
    SEEN_JSONRPC = 1,
    SEEN_ID = 2,
    SEEN_METHOD = 4,
    SEEN_PARAMS = 8,
    SEEN_NAME = 16,
    SEEN_ARGS = 32,
};

/* An open map or array of the arguments: where its header is (five bytes
 * kept for it, given back when it closes), how many entries it has, and
 * for a map where its keys are (to refuse a repeated one). */
typedef struct fast_box {
    size_t at;
    uint32_t n;
    bool map;
    size_t key_at[FAST_KEYS];
    uint32_t key_len[FAST_KEYS];
} fast_box;

typedef struct fast_read {
    yajl_handle y;
    size_t end; /* bytes of the text up to the message's closing brace */
    th_mcp_plain *fc;
    th_buf *out;
    msgpack_packer pk;
    int where;
    int key;
    unsigned seen;
    int depth; /* open boxes of the arguments */
    fast_box box[FAST_DEPTH];
} fast_read;

/* ---- The arguments, as msgpack --------------------------------------------- */

/* A value of the arguments starts: one more entry of an array (a map
 * counts its keys). */
static void arg_counted(fast_read *r)
{
    if (r->depth > 0 && !r->box[r->depth - 1].map)
        r->box[r->depth - 1].n++;
}

static int box_open(fast_read *r, bool map)
{
    if (r->depth == FAST_DEPTH)
        return 0;
    arg_counted(r);
    fast_box *b = &r->box[r->depth++];
    b->at = r->out->len;
    b->n = 0;
    b->map = map;
    /* Five bytes: the widest header; box_close() gives back what the
     * count does not need. */
    return th_buf_append(r->out, "\0\0\0\0\0", 5) == 0;
}

/* The header msgpack_pack_map()/msgpack_pack_array() write for n. */
static size_t box_header(uint8_t h[5], bool map, uint32_t n)
{
    if (n < 16) {
        h[0] = (uint8_t)((map ? 0x80 : 0x90) | n);
        return 1;
    }
    if (n < 65536) {
        h[0] = map ? 0xde : 0xdc;
        h[1] = (uint8_t)(n >> 8);
        h[2] = (uint8_t)n;
        return 3;
    }
    h[0] = map ? 0xdf : 0xdd;
    h[1] = (uint8_t)(n >> 24);
    h[2] = (uint8_t)(n >> 16);
    h[3] = (uint8_t)(n >> 8);
    h[4] = (uint8_t)n;
    return 5;
}

static void box_close(fast_read *r)
{
    fast_box *b = &r->box[--r->depth];
    uint8_t h[5];
    size_t hl = box_header(h, b->map, b->n);
    uint8_t *p = r->out->data + b->at;
    if (hl < 5) {
        memmove(p + hl, p + 5, r->out->len - b->at - 5);
        r->out->len -= 5 - hl;
    }
    memcpy(p, h, hl);
}

/* A key of the open map: refused when it is there already. */
static int arg_key(fast_read *r, const unsigned char *s, size_t n)
{
    fast_box *b = &r->box[r->depth - 1];
    if (b->n >= FAST_KEYS || n > UINT32_MAX)
        return 0;
    for (uint32_t i = 0; i < b->n; i++)
        if (b->key_len[i] == n &&
            memcmp(r->out->data + b->key_at[i], s, n) == 0)
            return 0;
    if (msgpack_pack_str(&r->pk, n) != 0)
        return 0;
    b->key_at[b->n] = r->out->len;
    b->key_len[b->n] = (uint32_t)n;
    b->n++;
    return msgpack_pack_str_body(&r->pk, s, n) == 0;
}

/* ---- Events ------------------------------------------------------------------ */

static int ev_null(void *ctx)
{
    fast_read *r = ctx;
    if (r->where != AT_ARGS)
        return 0;
    arg_counted(r);
    return msgpack_pack_nil(&r->pk) == 0;
}

static int ev_boolean(void *ctx, int v)
{
    fast_read *r = ctx;
    if (r->where != AT_ARGS)
        return 0;
    arg_counted(r);
    return (v ? msgpack_pack_true(&r->pk) : msgpack_pack_false(&r->pk)) == 0;
}

/* An integer of at most 18 digits (no fraction, no exponent): exact in
 * int64 without a range check. */
static bool small_int(const char *s, size_t n, int64_t *v)
{
    size_t i = s[0] == '-';
    if (n - i < 1 || n - i > 18)
        return false;
    int64_t x = 0;
    for (size_t k = i; k < n; k++) {
        if (s[k] < '0' || s[k] > '9')
            return false;
        x = x * 10 + (s[k] - '0');
    }
    *v = i ? -x : x;
    return true;
}

static int ev_number(void *ctx, const char *s, size_t n)
{
    fast_read *r = ctx;
    int64_t v;
    if (!small_int(s, n, &v))
        return 0; /* a real or a long integer: the tree's */
    if (r->where == AT_ARGS) {
        arg_counted(r);
        return msgpack_pack_int64(&r->pk, v) == 0;
    }
    if (r->key != K_ID)
        return 0;
    r->fc->id_is_str = false;
    r->fc->id_int = v;
    r->key = K_NONE;
    return 1;
}

static int ev_string(void *ctx, const unsigned char *s, size_t n)
{
    fast_read *r = ctx;
    if (r->where == AT_ARGS) {
        arg_counted(r);
        return msgpack_pack_str_with_body(&r->pk, s, n) == 0;
    }
    th_mcp_plain *fc = r->fc;
    switch (r->key) {
    case K_JSONRPC:
        if (n != 3 || memcmp(s, "2.0", 3) != 0)
            return 0;
        break;
    case K_METHOD:
        if (n != 10 || memcmp(s, "tools/call", 10) != 0)
            return 0;
        break;
    case K_ID:
        if (n >= sizeof fc->id_str)
            return 0;
        fc->id_is_str = true;
        memcpy(fc->id_str, s, n);
        fc->id_len = n;
        break;
    case K_NAME:
        if (n >= sizeof fc->name || memchr(s, 0, n))
            return 0;
        memcpy(fc->name, s, n);
        fc->name[n] = 0;
        break;
    default:
        return 0;
    }
    r->key = K_NONE;
    return 1;
}

static int ev_start_map(void *ctx)
{
    fast_read *r = ctx;
    switch (r->where) {
    case AT_TOP:
        r->where = AT_ENV;
        return 1;
    case AT_ENV:
        if (r->key != K_PARAMS)
            return 0;
        r->where = AT_PARAMS;
        r->key = K_NONE;
        return 1;
    case AT_PARAMS:
        if (r->key != K_ARGS)
            return 0;
        r->where = AT_ARGS;
        r->key = K_NONE;
        return box_open(r, true);
    case AT_ARGS:
        return box_open(r, true);
    default:
        return 0;
    }
}

/* Marks an envelope or params key seen; a repeated one is refused. */
static int seen_once(fast_read *r, unsigned bit, int key)
{
    if (r->seen & bit)
        return 0;
    r->seen |= bit;
    r->key = key;
    return 1;
}

#define KEY_IS(lit) (n == sizeof lit - 1 && memcmp(s, lit, n) == 0)

static int ev_map_key(void *ctx, const unsigned char *s, size_t n)
{
    fast_read *r = ctx;
    switch (r->where) {
    case AT_ARGS:
        return arg_key(r, s, n);
    case AT_ENV:
        if (KEY_IS("jsonrpc"))
            return seen_once(r, SEEN_JSONRPC, K_JSONRPC);
        if (KEY_IS("id"))
            return seen_once(r, SEEN_ID, K_ID);
        if (KEY_IS("method"))
            return seen_once(r, SEEN_METHOD, K_METHOD);
        if (KEY_IS("params"))
            return seen_once(r, SEEN_PARAMS, K_PARAMS);
        return 0;
    case AT_PARAMS:
        if (KEY_IS("name"))
            return seen_once(r, SEEN_NAME, K_NAME);
        if (KEY_IS("arguments"))
            return seen_once(r, SEEN_ARGS, K_ARGS);
        return 0; /* _meta, task, anything else: the tree's */
    default:
        return 0;
    }
}

static int ev_end_map(void *ctx)
{
    fast_read *r = ctx;
    switch (r->where) {
    case AT_ENV:
        r->where = AT_DONE;
        r->end = yajl_get_bytes_consumed(r->y);
        return 1;
    case AT_PARAMS:
        r->where = AT_ENV;
        return 1;
    case AT_ARGS:
        box_close(r);
        if (r->depth == 0)
            r->where = AT_PARAMS;
        return 1;
    default:
        return 0;
    }
}

static int ev_start_array(void *ctx)
{
    fast_read *r = ctx;
    return r->where == AT_ARGS && r->depth > 0 ? box_open(r, false) : 0;
}

static int ev_end_array(void *ctx)
{
    fast_read *r = ctx;
    if (r->where != AT_ARGS)
        return 0;
    box_close(r);
    return 1;
}

static const yajl_callbacks fast_events = {
    .yajl_null = ev_null,
    .yajl_boolean = ev_boolean,
    .yajl_number = ev_number, /* the digits as written: no double */
    .yajl_string = ev_string,
    .yajl_start_map = ev_start_map,
    .yajl_map_key = ev_map_key,
    .yajl_end_map = ev_end_map,
    .yajl_start_array = ev_start_array,
    .yajl_end_array = ev_end_array,
};

/* ---- The line ------------------------------------------------------------------ */

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* What yajl would read differently from jansson, checked on the raw
 * text: ill-formed UTF-8 (yajl checks only the shape of a sequence),
 * control bytes other than tab, LF and CR (yajl takes \v and \f for
 * whitespace; inside a string no control byte is allowed anyway), and \u
 * escapes of U+0000 or of a surrogate (yajl writes '?' for a lone one;
 * jansson refuses it, and a name with U+0000 is not a C string).  An
 * escaped backslash is skipped with its pair.  A short or bad escape is
 * left to yajl, which refuses it. */
static bool text_plain(const char *text, size_t len)
{
    const unsigned char *p = (const unsigned char *)text;
    const unsigned char *end = p + len;
    const uint64_t ones = 0x0101010101010101ull;
    const uint64_t high = 0x8080808080808080ull;
    bool utf8 = false;
    size_t i = 0;
    while (i < len) {
        if (i + 8 <= len) { /* eight plain ASCII bytes at a time */
            uint64_t v;
            memcpy(&v, p + i, 8);
            if (!((v | ((v - ones * 0x20) & ~v)) & high)) {
                i += 8;
                continue;
            }
        }
        unsigned char c = p[i++];
        if (c >= 0x80)
            utf8 = true;
        else if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
            return false;
    }
    if (utf8 && !th_utf8_valid(text, len))
        return false;
    while ((p = memchr(p, '\\', (size_t)(end - p))) != NULL) {
        if (end - p < 2)
            return true;
        if (p[1] == 'u' && end - p >= 6) {
            unsigned cp = 0;
            for (int k = 2; k < 6; k++) {
                int h = hexval(p[k]);
                if (h < 0)
                    return true;
                cp = cp << 4 | (unsigned)h;
            }
            if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF))
                return false;
        }
        p += 2;
    }
    return true;
}

static bool only_space(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\n' && p[i] != '\r')
            return false;
    return true;
}

/* Each thread keeps its parser and its state between messages: yajl
 * reads one JSON value after another (yajl_allow_multiple_values), so a
 * handle that read a whole message is ready for the next.  One that
 * stopped inside a message (refused, or an error) is dropped. */
typedef struct fast_tls {
    yajl_handle y;
    fast_read r;
} fast_tls;

/* This thread's state once made: read without pthread_once() and
 * pthread_getspecific() per message (the key stays for its destructor). */
static _Thread_local fast_tls *tl_fast;

static pthread_key_t fast_key;
static pthread_once_t fast_once = PTHREAD_ONCE_INIT;
static bool fast_key_ok;

static void fast_tls_free(void *p)
{
    fast_tls *t = p;
    tl_fast = NULL;
    if (t && t->y)
        yajl_free(t->y);
    free(t);
}

static void fast_key_init(void)
{
    fast_key_ok = pthread_key_create(&fast_key, fast_tls_free) == 0;
}

static void *guard_malloc(void *ctx, size_t n)
{
    (void)ctx;
    return th_uv_guard_malloc(n);
}

static void *guard_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    return th_uv_guard_realloc(p, n);
}

static void guard_free(void *ctx, void *p)
{
    (void)ctx;
    th_uv_guard_free(p);
}

static yajl_alloc_funcs guard_funcs = {guard_malloc, guard_realloc,
                                       guard_free, NULL};

static fast_tls *fast_tls_get(void)
{
    fast_tls *t = tl_fast;
    if (t && t->y)
        return t;
    pthread_once(&fast_once, fast_key_init);
    if (!fast_key_ok)
        return NULL;
    t = pthread_getspecific(fast_key);
    if (!t) {
        t = malloc(sizeof *t);
        if (!t)
            return NULL;
        t->y = NULL;
        if (pthread_setspecific(fast_key, t) != 0) {
            free(t);
            return NULL;
        }
        tl_fast = t;
    }
    if (!t->y) {
        /* yajl uses what its allocator returns without a check (a NULL
         * from malloc crashes it): the guard's reserve stands behind */
        t->y = yajl_alloc(&fast_events, &guard_funcs, &t->r);
        if (!t->y)
            return NULL;
        yajl_config(t->y, yajl_allow_multiple_values, 1);
        t->r.y = t->y;
        /* text_plain() checked the UTF-8, as strictly as jansson. */
        yajl_config(t->y, yajl_dont_validate_strings, 1);
    }
    return t;
}

int th_mcp_plain_scan(const char *text, size_t len, th_mcp_plain *fc)
{
    if (!text_plain(text, len))
        return 0;
    fast_tls *t = fast_tls_get();
    if (!t)
        return -1;
    fast_read *r = &t->r; /* the boxes are set as they open: not cleared */
    r->fc = fc;
    r->out = &fc->args;
    r->where = AT_TOP;
    r->key = K_NONE;
    r->seen = 0;
    r->depth = 0;
    th_buf_reset(&fc->args);
    msgpack_packer_init(&r->pk, &fc->args, th_buf_msgpack_write);
    const unsigned all = SEEN_JSONRPC | SEEN_ID | SEEN_METHOD | SEEN_PARAMS |
                         SEEN_NAME;
    /* The message must end the text: after its closing brace only JSON
     * whitespace (yajl, reading value after value, would take more as
     * the start of the next one). */
    int rc = yajl_parse(t->y, (const unsigned char *)text, len) ==
                     yajl_status_ok &&
                 r->where == AT_DONE && (r->seen & all) == all &&
                 only_space(text + r->end, len - r->end)
             ? 1
             : 0;
    r->fc = NULL;
    r->out = NULL;
    /* A handle that stopped inside a message is dropped; so is one that
     * read a long message (yajl keeps its string buffer at the size of
     * the longest string it decoded: up to mcp_max_message per thread). */
    if (rc != 1 || len > FAST_KEEP_MAX) {
        yajl_free(t->y);
        t->y = NULL;
    }
    if (rc != 1)
        return 0;
    if (!(r->seen & SEEN_ARGS) && th_buf_append(&fc->args, "\x80", 1) != 0)
        return -1; /* no arguments: {} as the tree gives them */
    return 1;
}
