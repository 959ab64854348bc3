/* fuzz/mcp_fast.c - libFuzzer target: the tree-less read of a plain
 * tools/call (host/mcp/mcp_fast.c) against jansson, the reader every
 * other message goes through.
 *
 * The first byte picks the form; the rest is the input:
 *   even: a whole message line;
 *   odd:  the value of "arguments" inside a fixed plain tools/call.
 * Property: whatever the fast read accepts, json_loadb() accepts too, with
 * the same id, the same name and, through th_json_to_msgpack(), the very
 * msgpack bytes of the arguments.  (What it refuses goes to jansson in the
 * host, so refusing is always safe.)  The same thread's parser is reused
 * from input to input, as in the host, so a state left over from one
 * input would show in the next.
 *
 * needs: host/mcp/mcp_fast.c host/core/values/json.c
 */
#include <jansson.h>
#include <string.h>

#include "../host/mcp/mcp_int.h"
#include "fuzz.h"
#include "th/buf.h"
#include "th/json.h"

static void mf_check(const char *text, size_t len)
{
    th_mcp_plain fc;
    th_buf_init(&fc.args);
    int rc = th_mcp_plain_scan(text, len, &fc);
    TH_FUZZ_CHECK(rc == 0 || rc == 1);
    if (rc == 1) {
        json_error_t je;
        json_t *msg =
            json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        TH_FUZZ_CHECK(msg != NULL);
        if (msg) {
            json_t *id = json_object_get(msg, "id");
            if (fc.id_is_str)
                TH_FUZZ_CHECK(json_is_string(id) &&
                              json_string_length(id) == fc.id_len &&
                              memcmp(json_string_value(id), fc.id_str,
                                     fc.id_len) == 0);
            else
                TH_FUZZ_CHECK(json_is_integer(id) &&
                              json_integer_value(id) == fc.id_int);
            json_t *params = json_object_get(msg, "params");
            const char *name =
                json_string_value(json_object_get(params, "name"));
            TH_FUZZ_CHECK(name && strcmp(name, fc.name) == 0);
            json_t *args = json_object_get(params, "arguments");
            json_t *empty = args ? NULL : json_object();
            th_buf want = TH_BUF_INIT;
            TH_FUZZ_CHECK(th_json_to_msgpack(args ? args : empty, &want) ==
                          0);
            TH_FUZZ_CHECK(want.len == fc.args.len &&
                          memcmp(want.data, fc.args.data, want.len) == 0);
            th_buf_destroy(&want);
            json_decref(empty);
            json_decref(msg);
        }
    }
    th_buf_destroy(&fc.args);
}

static int fuzz_mcp_fast(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    const char *in = (const char *)data + 1;
    size_t n = size - 1;
    if (!(data[0] & 1)) {
        mf_check(in, n);
        return 0;
    }
    static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":"
                               "\"tools/call\",\"params\":{\"name\":\"echo\","
                               "\"arguments\":";
    size_t hl = sizeof head - 1;
    char *line = malloc(hl + n + 2);
    if (!line)
        return 0;
    memcpy(line, head, hl);
    memcpy(line + hl, in, n);
    memcpy(line + hl + n, "}}", 2);
    mf_check(line, hl + n + 2);
    free(line);
    return 0;
}

#ifndef TH_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_mcp_fast(data, size);
}
#endif
