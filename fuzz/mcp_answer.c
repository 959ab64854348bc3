/* fuzz/mcp_answer.c - libFuzzer target: the mcp plugin's tree-less reader
 * of a stdio server's usual answer (plugins/mcp/mcp_answer.c) on random
 * lines, as a server writes them.
 *
 * The property beyond "no crash, no leak, no UB": whatever the reader
 * takes (1), jansson reads the same way the plugin's tree path would
 * use it: an object without "method" or "error", the same integer id,
 * a result object whose isError is absent or false, without
 * structuredContent, and whose content is exactly the reader's text
 * blocks, byte for byte, in order.  What it does not take goes to that
 * tree path unchanged, so only this direction needs checking.
 *
 * The plugin's source is included (its symbols are hidden in the .so).
 *
 * needs: plugins/shared/mp_json.c
 */
#include <jansson.h>
#include <string.h>

#include "fuzz.h"

#include "../plugins/mcp/mcp_answer.c"
/* mp_json_utf8_valid(); a binary that has it already (the unit tests,
 * through fuzz/mp_json.c) defines TH_MP_JSON_LINKED */
#ifndef TH_MP_JSON_LINKED
#include "../plugins/shared/mp_json.c"
#endif

/* 1 when the reader took `line` (and jansson agrees), 0 when it did not;
 * a disagreement is a TH_FUZZ_CHECK failure. */
static int mcp_answer_check(const char *line, size_t len)
{
    mcpsrc_fast_answer a = {0};
    int rc = mcpsrc_read_answer(line, len, &a);
    TH_FUZZ_CHECK(rc == 0 || rc == 1);
    if (rc == 1) {
        json_t *m = json_loadb(line, len, JSON_ALLOW_NUL, NULL);
        TH_FUZZ_CHECK(json_is_object(m));
        TH_FUZZ_CHECK(!json_object_get(m, "method"));
        TH_FUZZ_CHECK(!json_object_get(m, "error"));
        const json_t *id = json_object_get(m, "id");
        TH_FUZZ_CHECK(json_is_integer(id) && json_integer_value(id) == a.id);
        const json_t *r = json_object_get(m, "result");
        TH_FUZZ_CHECK(json_is_object(r));
        const json_t *ie = json_object_get(r, "isError");
        TH_FUZZ_CHECK(!ie || json_is_false(ie));
        TH_FUZZ_CHECK(!json_object_get(r, "structuredContent"));
        const json_t *c = json_object_get(r, "content");
        TH_FUZZ_CHECK(json_is_array(c) && json_array_size(c) == a.n);
        for (size_t i = 0; i < a.n && json_is_array(c); i++) {
            const json_t *b = json_array_get(c, i);
            const json_t *t = json_object_get(b, "text");
            TH_FUZZ_CHECK(json_is_object(b) && json_object_size(b) == 2);
            TH_FUZZ_CHECK(json_is_string(json_object_get(b, "type")) &&
                          strcmp(json_string_value(json_object_get(b, "type")),
                                 "text") == 0);
            TH_FUZZ_CHECK(json_is_string(t) && json_string_length(t) == a.len[i] &&
                          memcmp(json_string_value(t), a.buf + a.off[i],
                                 a.len[i]) == 0);
        }
        json_decref(m);
    }
    mcpsrc_fast_answer_free(&a);
    return rc;
}

#ifndef TH_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    mcp_answer_check((const char *)data, len);
    return 0;
}
#endif
