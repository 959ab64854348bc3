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
 * Findings fixed on main and kept in fuzz/corpus/json/: NaN without an
 * error code, empty strings, memory bombs in container counts, str and bin
 * that are not UTF-8.  (A map key holding NUL bytes converts both ways;
 * jansson's json_equal cannot compare such keys, hence the byte check.)
 *
 * needs: host/core/values/json.c
 */
#include <jansson.h>
#include <math.h>
#include <msgpack.h>
#include <string.h>

#include "fuzz.h"
#include "th/buf.h"
#include "th/err.h"
#include "th/json.h"

static void json_from_text(const uint8_t *data, size_t size)
{
    json_error_t jerr;
    json_t *j = json_loadb((const char *)data, size,
                           JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!j)
        return;
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
    th_buf_destroy(&mp);
    json_decref(j);
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
        if (back) {
            /* equal values pack to equal bytes (jansson's json_equal looks
             * keys up as C strings, so it cannot compare keys holding NUL) */
            th_buf mp2 = TH_BUF_INIT;
            TH_FUZZ_CHECK(th_json_to_msgpack(back, &mp2) == 0);
            TH_FUZZ_CHECK(mp2.len == mp.len &&
                          memcmp(mp2.data, mp.data, mp.len) == 0);
            th_buf_destroy(&mp2);
        }
        json_decref(back);
    }
    th_buf_destroy(&mp);
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
