/* fuzz/mp_json.c - libFuzzer target: the bundled plugins' msgpack to JSON
 * (plugins/shared/mp_json.c) on random msgpack, as a call's arguments
 * reach the mcp plugin's tools/call line.
 *
 * The input is one msgpack value (inputs whose container counts promise
 * more entries than bytes remain are skipped: msgpack-c allocates for the
 * count up front, and the host never hands a plugin such bytes).  The
 * property beyond "no crash, no leak, no UB": mp_json_dump() and
 * json_dumps(JSON_COMPACT | JSON_ENSURE_ASCII) of mp_json_parse()'s tree
 * agree, byte for byte, on what is converted and what is refused (a bin,
 * an ext, a key that is not a string, text that is not UTF-8, NaN, a twin
 * key's lost value), with and without `object`, and a refusal leaves the
 * text as it was.
 *
 * The plugin's source is included (its symbols are hidden in the .so).
 *
 * needs: plugins/shared/mp_json.c
 */
#include <string.h>

#include "fuzz.h"

#include "../plugins/shared/mp_json.c"

static void mp_json_fuzz_one(const uint8_t *data, size_t len, bool object)
{
    json_t *j = mp_json_parse(data, len);
    if (object && !json_is_object(j)) {
        json_decref(j);
        j = NULL;
    }
    char *want = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII |
                                       JSON_ENCODE_ANY)
                   : NULL;
    json_decref(j);
    mp_json_text t = {0};
    TH_FUZZ_CHECK(mp_json_put(&t, "<", 1) == 0);
    int rc = mp_json_dump(data, len, object, &t);
    if (rc != 0) {
        TH_FUZZ_CHECK(!want);
        TH_FUZZ_CHECK(t.len == 1 && strcmp(t.data, "<") == 0);
    } else {
        TH_FUZZ_CHECK(want != NULL);
        TH_FUZZ_CHECK(want && t.len == 1 + strlen(want) &&
                      memcmp(t.data + 1, want, t.len - 1) == 0);
        for (size_t i = 0; i < t.len; i++)
            TH_FUZZ_CHECK((unsigned char)t.data[i] < 0x80); /* ASCII */
    }
    free(want);
    free(t.data);
}

static int fuzz_mp_json(const uint8_t *data, size_t len)
{
    if (!th_fuzz_msgpack_walk(data, len, NULL))
        return 0;
    mp_json_fuzz_one(data, len, false);
    mp_json_fuzz_one(data, len, true);
    return 0;
}

#ifndef TH_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    return fuzz_mp_json(data, len);
}
#endif
