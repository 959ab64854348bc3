/* fuzz/code.c - libFuzzer target: the Lua code runtime (th_code_run) on
 * random scripts, as a model sends them to run_code.
 *
 * The whole input is the script.  No tools are projected; limits are
 * small so that a loop or a bomb ends fast: 50 ms, 8 MiB of Lua heap, 4 KiB
 * of output per stream.
 * Properties beyond "no crash, no leak, no UB, no hang":
 *   - th_code_run returns 0 (a script that ran, whatever it did) or
 *     TH_ENOMEM;
 *   - return_code is 0 or 1, and 1 comes with an error message;
 *   - the returned value, when there is one, is exactly one complete
 *     msgpack value (whatever the script returned: cycles, functions,
 *     NaN, deep tables, huge strings);
 *   - kept output stays within the limit plus its marker line.
 *
 * needs: host/lua/code_lua.c
 */
#include <msgpack.h>
#include <string.h>

#include "fuzz.h"
#include "th/code.h"
#include "th/err.h"

static int fuzz_code(const uint8_t *data, size_t size)
{
    if (size > 16384)
        return 0;
    th_code_limits lim = {.timeout_ms = 50, .memory = 8u << 20,
                          .max_calls = 10, .output_limit = 4096};
    th_code_result res;
    th_code_result_init(&res);
    th_error err;
    th_error_clear(&err);
    int rc = th_code_run(NULL, (const char *)data, size, &lim, NULL, &res,
                         &err);
    TH_FUZZ_CHECK(rc == 0 || rc == TH_ENOMEM);
    if (rc == 0) {
        TH_FUZZ_CHECK(res.return_code == 0 || res.return_code == 1);
        if (res.return_code == 1)
            TH_FUZZ_CHECK(res.error != NULL && res.error[0] != '\0');
        if (res.value.len > 0) {
            TH_FUZZ_CHECK(th_fuzz_msgpack_plausible(res.value.data,
                                                    res.value.len));
            msgpack_unpacked u;
            msgpack_unpacked_init(&u);
            size_t off = 0;
            int ur = msgpack_unpack_next(&u, (const char *)res.value.data,
                                         res.value.len, &off);
            /* msgpack-c cannot unpack past 32 levels; the bytes still
             * have to be one value, which the walk above checked */
            TH_FUZZ_CHECK(ur == MSGPACK_UNPACK_NOMEM_ERROR ||
                          (ur == MSGPACK_UNPACK_SUCCESS &&
                           off == res.value.len));
            msgpack_unpacked_destroy(&u);
        }
        TH_FUZZ_CHECK(res.out.len <= lim.output_limit + 200);
        TH_FUZZ_CHECK(res.err.len <= lim.output_limit + 200);
    }
    th_code_result_destroy(&res);
    return 0;
}

TH_FUZZ_ENTRY(fuzz_code)
