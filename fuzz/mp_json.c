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

/* What both paths make of data (with `object`: only a map converts): 1
 * when both converted it, byte for byte alike and ASCII; 0 when both
 * refused it, the text left as it was; -1 (and a failed check) when they
 * disagree.  The unit suite mp_json calls it too. */
static int mp_json_fuzz_one(const uint8_t *data, size_t len, bool object)
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
    int res = mp_json_put(&t, "<", 1) == 0 ? 0 : -1;
    if (res == 0 && mp_json_dump(data, len, object, &t) != 0) {
        res = !want && t.len == 1 && strcmp(t.data, "<") == 0 ? 0 : -1;
    } else if (res == 0) {
        res = want && t.len == 1 + strlen(want) &&
                      memcmp(t.data + 1, want, t.len - 1) == 0
                  ? 1
                  : -1;
        for (size_t i = 0; res == 1 && i < t.len; i++)
            if ((unsigned char)t.data[i] >= 0x80) /* ASCII only */
                res = -1;
    }
    TH_FUZZ_CHECK(res >= 0);
    free(want);
    free(t.data);
    return res;
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
