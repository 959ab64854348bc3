/* fuzz/jschema.c - libFuzzer target: JSON Schema 2020-12 compile and check
 * (host/core/values/jschema.c), the validator every tool's parameters and output
 * go through, on schemas a plugin (or, through the gateway, a remote
 * server) declares and values a caller sends.
 *
 * Input: a schema as JSON text, a NUL byte, then a value as JSON text (no
 * NUL: the whole input is the schema, checked against null).
 *
 * Properties beyond "no crash, no leak, no UB, no hang":
 *   - compiling answers 0 or TH_ELOAD (TH_ENOMEM never here), and a
 *     refusal has a message that starts with the schema's name;
 *   - checking answers 0 or 1, and 1 comes with a message;
 *   - the answer is the same when asked twice (no state kept between
 *     checks of one compiled schema).
 * Cycles through $ref, anyOf over shared subschemas and backtracking
 * patterns are bounded by the validator (a depth, a step budget, PCRE2's
 * match limit), so a slow input is a finding too.
 *
 * (Fixed, in fuzz/corpus/jschema/leak-pattern-properties-names: the
 * names of patternProperties were allocated twice, one list leaked.)
 *
 * needs: host/core/values/jschema.c host/core/values/json.c
 */
#include <jansson.h>
#include <string.h>

#include "fuzz.h"
#include "th/err.h"
#include "th/jschema.h"

static int fuzz_jschema(const uint8_t *data, size_t len)
{
    const uint8_t *nul = memchr(data, 0, len);
    size_t slen = nul ? (size_t)(nul - data) : len;
    json_error_t je;
    json_t *schema = json_loadb((const char *)data, slen, JSON_DECODE_ANY, &je);
    if (!schema)
        return 0;
    json_t *value = nul ? json_loadb((const char *)nul + 1, len - slen - 1,
                                     JSON_DECODE_ANY | JSON_ALLOW_NUL, &je)
                        : json_null();
    th_jschema *s = NULL;
    th_error err;
    int rc = th_jschema_compile_json("fuzz schema", schema, &s, &err);
    TH_FUZZ_CHECK(rc == 0 || rc == TH_ELOAD);
    if (rc) {
        TH_FUZZ_CHECK(s == NULL);
        TH_FUZZ_CHECK(strncmp(err.msg, "fuzz schema", 11) == 0);
    } else if (value) {
        char m1[256], m2[256];
        int a = th_jschema_check_json(s, value, m1, sizeof m1);
        int b = th_jschema_check_json(s, value, m2, sizeof m2);
        TH_FUZZ_CHECK(a == b);
        TH_FUZZ_CHECK(a == 0 || a == 1);
        if (a == 1)
            TH_FUZZ_CHECK(m1[0] != '\0' && strcmp(m1, m2) == 0);
    }
    th_jschema_free(s);
    json_decref(schema);
    json_decref(value);
    return 0;
}

#ifndef TH_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    return fuzz_jschema(data, len);
}
#endif
