/* fuzz/json.c - libFuzzer target: JSON <-> msgpack at the CLI and MCP edge
 * (th/json.h).
 *
 * The first byte picks the direction; the rest is the input:
 *   even: JSON text as a human types it (any value, NUL allowed in
 *         strings) -> th_json_to_msgpack -> th_json_from_msgpack, which
 *         must give back an equal value;
 *   odd:  bytes as msgpack (what a tool returns in meta, what a client
 *         sends) -> th_json_from_msgpack: either NULL with an error code
 *         set, or a value that converts back and again to an equal value
 *         and that a JSON front can print (json_dumps succeeds); the
 *         lossy variant (for printing) fails only where the strict one
 *         fails too, and what it gives always prints.
 *
 * Open findings (fuzz/open/json/, reported to the owner of host/core/json.c)
 * are skipped unless TH_FUZZ_STRICT is set in the environment, so that
 * fuzzing goes on past them: a float that is NaN or infinite (NULL without
 * an error code), a map key holding a NUL byte (the key is cut at the NUL
 * on the way back), an
 * empty str or bin (msgpack-c leaves the pointer of an empty str at the
 * end of the buffer NULL, and jansson refuses a NULL string even of length
 * 0: NULL without an error code, so "" does not survive a round trip), and
 * an array or map header announcing more elements than the input holds
 * (msgpack_unpack_next allocates for them up front: 23 bytes ask for 2 GiB).
 * Remove a clause here once its fix lands.
 *
 * needs: host/core/json.c
 */
#include <jansson.h>
#include <math.h>
#include <msgpack.h>
#include <string.h>

#include "fuzz.h"
#include "th/buf.h"
#include "th/err.h"
#include "th/json.h"

/* An empty string anywhere (the open finding on "" in the other direction
 * makes the way back fail). */
static int json_has_empty(json_t *j)
{
    size_t i;
    json_t *v;
    const char *k;
    switch (json_typeof(j)) {
    case JSON_STRING:
        return json_string_length(j) == 0;
    case JSON_ARRAY:
        json_array_foreach(j, i, v) if (json_has_empty(v)) return 1;
        return 0;
    case JSON_OBJECT:
        json_object_foreach(j, k, v) if (k[0] == 0 || json_has_empty(v)) return 1;
        return 0;
    default:
        return 0;
    }
}

static void json_from_text(const uint8_t *data, size_t size)
{
    json_error_t jerr;
    json_t *j = json_loadb((const char *)data, size,
                           JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!j)
        return;
    if (!getenv("TH_FUZZ_STRICT") && json_has_empty(j)) {
        json_decref(j);
        return;
    }
    th_buf mp = TH_BUF_INIT;
    int rc = th_json_to_msgpack(j, &mp);
    TH_FUZZ_CHECK(rc == 0);
    if (rc == 0) {
        th_error err;
        th_error_clear(&err);
        json_t *back = th_json_from_msgpack(mp.data, mp.len, &err);
        TH_FUZZ_CHECK(back != NULL);
        if (back)
            TH_FUZZ_CHECK(json_equal(j, back));
        json_decref(back);
    }
    th_buf_free(&mp);
    json_decref(j);
}

static int json_open_finding(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return !isfinite(o->via.f64);
    case MSGPACK_OBJECT_STR:
        return o->via.str.size == 0;
    case MSGPACK_OBJECT_BIN:
        return o->via.bin.size == 0;
    case MSGPACK_OBJECT_ARRAY:
        for (uint32_t i = 0; i < o->via.array.size; i++)
            if (json_open_finding(&o->via.array.ptr[i]))
                return 1;
        return 0;
    case MSGPACK_OBJECT_MAP:
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            if ((k->type == MSGPACK_OBJECT_STR ||
                 k->type == MSGPACK_OBJECT_BIN) && k->via.str.size > 0 &&
                memchr(k->via.str.ptr, 0, k->via.str.size))
                return 1;
            if (json_open_finding(k) ||
                json_open_finding(&o->via.map.ptr[i].val))
                return 1;
        }
        return 0;
    default:
        return 0;
    }
}

/* True when the input trips an open finding and strict mode is off. */
static int json_skip_open(const uint8_t *data, size_t size)
{
    if (getenv("TH_FUZZ_STRICT"))
        return 0;
    if (!th_fuzz_msgpack_plausible(data, size))
        return 1;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int skip = 0;
    if (msgpack_unpack_next(&u, (const char *)data, size, &off) ==
        MSGPACK_UNPACK_SUCCESS)
        skip = json_open_finding(&u.data);
    msgpack_unpacked_destroy(&u);
    return skip;
}

/* The lossy variant, for printing: never refuses text for its bytes, so
 * it fails only where the strict one fails for another reason, and a JSON
 * front can always print what it gives. */
static void json_lossy(const uint8_t *data, size_t size, int strict_ok)
{
    th_error err;
    th_error_clear(&err);
    json_t *j = th_json_from_msgpack_lossy(data, size, &err);
    if (!j) {
        TH_FUZZ_CHECK(err.code != 0);
        TH_FUZZ_CHECK(!strict_ok);
        return;
    }
    char *text = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
    TH_FUZZ_CHECK(text != NULL);
    free(text);
    json_decref(j);
}

static void json_from_msgpack(const uint8_t *data, size_t size)
{
    if (json_skip_open(data, size))
        return;
    th_error err;
    th_error_clear(&err);
    json_t *j = th_json_from_msgpack(data, size, &err);
    json_lossy(data, size, j != NULL);
    if (!j) {
        /* "NULL with err set when it cannot be said in JSON" */
        TH_FUZZ_CHECK(err.code != 0);
        return;
    }
    char *text = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
    TH_FUZZ_CHECK(text != NULL); /* a JSON front can print what it got */
    free(text);
    th_buf mp = TH_BUF_INIT;
    int rc = th_json_to_msgpack(j, &mp);
    TH_FUZZ_CHECK(rc == 0);
    if (rc == 0) {
        th_error_clear(&err);
        json_t *back = th_json_from_msgpack(mp.data, mp.len, &err);
        TH_FUZZ_CHECK(back != NULL);
        if (back)
            TH_FUZZ_CHECK(json_equal(j, back));
        json_decref(back);
    }
    th_buf_free(&mp);
    json_decref(j);
}

static int fuzz_json(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] % 2 == 0)
        json_from_text(data + 1, size - 1);
    else
        json_from_msgpack(data + 1, size - 1);
    return 0;
}

TH_FUZZ_ENTRY(fuzz_json)
