/* mcp_answer.c - the usual answer of a stdio server read without a JSON
 * tree.
 *
 * A tools/call answer that is exactly {"jsonrpc":"2.0","id":N,"result":
 * {"content":[{"type":"text","text":"..."}, ...],"isError":false}} (keys
 * in any order, isError may be left out, any JSON whitespace) is read
 * once by yajl's event parser (libyajl, as the host's own hot request
 * reader, host/mcp/mcp_fast.c), its texts copied into one buffer.
 * jansson builds a tree of allocated nodes with a hash table per object:
 * for the ~90 bytes of such an answer that was a third of what the
 * plugin spent per call (bench/README.md, "mcp_source").
 *
 * It takes only what it is sure of and says "not mine" for anything else
 * (the caller then reads the line with json_loadb() as before, so every
 * other shape and every error keeps the tree path's handling): another
 * key anywhere, a key given twice, a block of another type, isError
 * true, an id that is not an integer of at most 18 digits, a \u escape
 * (a surrogate or U+0000 would need jansson's rules), a vertical tab or
 * form feed (whitespace to yajl, not to JSON), a string left open at the
 * end (yajl lets it pass after the object), a text that is not
 * UTF-8 as jansson reads it, more than MCPSRC_FAST_TEXTS blocks, or
 * anything yajl refuses.  What it takes, jansson reads as the same id and
 * texts (tests/unit/test_mcp_answer.c; fuzz/mcp_answer.c). */
#include <stdlib.h>
#include <string.h>
#include <yajl_parse.h>

#include "../shared/mp_json.h"
#include "mcpsrc.h"

enum {
    AT_TOP,     /* before the message's object */
    AT_MSG,     /* in the message's object */
    AT_RESULT,  /* in result */
    AT_CONTENT, /* in result.content */
    AT_BLOCK,   /* in one block */
    AT_DONE,    /* after the message's object */
};

/* What the next value is. */
enum { K_NONE, K_JSONRPC, K_ID, K_RESULT, K_CONTENT, K_ISERROR, K_TYPE,
       K_TEXT };

enum {
    SEEN_JSONRPC = 1, SEEN_ID = 2, SEEN_RESULT = 4, SEEN_CONTENT = 8,
    SEEN_ISERROR = 16, SEEN_TYPE = 32, SEEN_TEXT = 64
};

typedef struct rd {
    mcpsrc_fast_answer *a;
    int at, key;
    unsigned seen, bseen; /* keys met in the message and result; in the
                             block being read */
    bool oom;
} rd;

static int no(void *ud)
{
    (void)ud;
    return 0; /* null, a boolean true where false is wanted, a real... */
}

static int on_bool(void *ud, int v)
{
    rd *r = ud;
    return r->at == AT_RESULT && r->key == K_ISERROR && !v;
}

static int on_number(void *ud, const char *s, size_t n)
{
    rd *r = ud;
    if (r->at != AT_MSG || r->key != K_ID)
        return 0;
    size_t i = s[0] == '-';
    if (n == i || n - i > 18)
        return 0;
    int64_t v = 0;
    for (size_t k = i; k < n; k++) {
        if (s[k] < '0' || s[k] > '9')
            return 0; /* a real: 1.0, 1e3 */
        v = v * 10 + (s[k] - '0');
    }
    r->a->id = i ? -v : v;
    return 1;
}

static int on_string(void *ud, const unsigned char *s, size_t n)
{
    rd *r = ud;
    const char *t = (const char *)s;
    if (r->at == AT_MSG && r->key == K_JSONRPC)
        return n == 3 && memcmp(t, "2.0", 3) == 0;
    if (r->at == AT_BLOCK && r->key == K_TYPE)
        return n == 4 && memcmp(t, "text", 4) == 0;
    if (r->at != AT_BLOCK || r->key != K_TEXT || memchr(t, 0, n) ||
        !mp_json_utf8_valid(t, n))
        return 0;
    mcpsrc_fast_answer *a = r->a;
    if (a->n == MCPSRC_FAST_TEXTS)
        return 0;
    if (a->used + n + 1 > a->cap) {
        size_t cap = a->cap ? a->cap : 256;
        while (cap < a->used + n + 1)
            cap *= 2;
        char *b = realloc(a->buf, cap);
        if (!b) {
            r->oom = true;
            return 0;
        }
        a->buf = b;
        a->cap = cap;
    }
    memcpy(a->buf + a->used, t, n);
    a->off[a->n] = a->used;
    a->len[a->n++] = n;
    a->used += n;
    a->buf[a->used++] = '\0';
    return 1;
}

static int on_start_map(void *ud)
{
    rd *r = ud;
    if (r->at == AT_TOP) {
        r->at = AT_MSG;
    } else if (r->at == AT_MSG && r->key == K_RESULT) {
        r->at = AT_RESULT;
    } else if (r->at == AT_CONTENT) {
        r->at = AT_BLOCK;
        r->bseen = 0;
    } else {
        return 0;
    }
    r->key = K_NONE;
    return 1;
}

/* The key's kind in the object being read, or K_NONE for one not taken;
 * a key met twice is not taken either. */
static int on_map_key(void *ud, const unsigned char *s, size_t n)
{
    rd *r = ud;
    static const struct {
        int at, key;
        unsigned bit;
        const char *name;
    } keys[] = {
        {AT_MSG, K_JSONRPC, SEEN_JSONRPC, "jsonrpc"},
        {AT_MSG, K_ID, SEEN_ID, "id"},
        {AT_MSG, K_RESULT, SEEN_RESULT, "result"},
        {AT_RESULT, K_CONTENT, SEEN_CONTENT, "content"},
        {AT_RESULT, K_ISERROR, SEEN_ISERROR, "isError"},
        {AT_BLOCK, K_TYPE, SEEN_TYPE, "type"},
        {AT_BLOCK, K_TEXT, SEEN_TEXT, "text"},
    };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        if (keys[i].at != r->at || strlen(keys[i].name) != n ||
            memcmp(keys[i].name, s, n) != 0)
            continue;
        unsigned *seen = r->at == AT_BLOCK ? &r->bseen : &r->seen;
        if (*seen & keys[i].bit)
            return 0;
        *seen |= keys[i].bit;
        r->key = keys[i].key;
        return 1;
    }
    return 0;
}

static int on_end_map(void *ud)
{
    rd *r = ud;
    r->key = K_NONE;
    switch (r->at) {
    case AT_BLOCK:
        r->at = AT_CONTENT;
        return r->bseen == (SEEN_TYPE | SEEN_TEXT);
    case AT_RESULT:
        r->at = AT_MSG;
        return (r->seen & SEEN_CONTENT) != 0;
    case AT_MSG:
        r->at = AT_DONE;
        return (r->seen & (SEEN_ID | SEEN_RESULT)) == (SEEN_ID | SEEN_RESULT);
    default:
        return 0;
    }
}

static int on_start_array(void *ud)
{
    rd *r = ud;
    if (r->at != AT_RESULT || r->key != K_CONTENT)
        return 0;
    r->at = AT_CONTENT;
    return 1;
}

static int on_end_array(void *ud)
{
    rd *r = ud;
    if (r->at != AT_CONTENT)
        return 0;
    r->at = AT_RESULT;
    r->key = K_NONE;
    return 1;
}

static const yajl_callbacks cbs = {
    .yajl_null = no,
    .yajl_boolean = on_bool,
    .yajl_number = on_number,
    .yajl_string = on_string,
    .yajl_start_map = on_start_map,
    .yajl_map_key = on_map_key,
    .yajl_end_map = on_end_map,
    .yajl_start_array = on_start_array,
    .yajl_end_array = on_end_array,
};

int mcpsrc_read_answer(const char *line, size_t len, mcpsrc_fast_answer *a)
{
    a->n = 0;
    a->used = 0;
    /* a \u escape: jansson's rules for surrogates and U+0000 apply;
     * a vertical tab or form feed: whitespace to yajl, not to JSON; a
     * string left open at the end: yajl lets an unfinished token pass
     * after the top value (it could go on in the next buffer) */
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = line[i];
        if (c == '\v' || c == '\f')
            return 0;
        if (c == '"')
            in_str = !in_str;
        else if (c == '\\' && ++i < len && line[i] == 'u')
            return 0;
    }
    if (in_str)
        return 0;
    rd r = {.a = a, .at = AT_TOP, .key = K_NONE};
    yajl_handle y = yajl_alloc(&cbs, NULL, &r);
    if (!y)
        return -1;
    bool ok = yajl_parse(y, (const unsigned char *)line, len) == yajl_status_ok &&
              yajl_complete_parse(y) == yajl_status_ok && r.at == AT_DONE;
    yajl_free(y);
    if (r.oom)
        return -1;
    return ok ? 1 : 0;
}

void mcpsrc_fast_answer_free(mcpsrc_fast_answer *a)
{
    free(a->buf);
    a->buf = NULL;
    a->cap = a->used = 0;
    a->n = 0;
}
