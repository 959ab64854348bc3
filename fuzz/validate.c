/* fuzz/validate.c - libFuzzer target: argument validation, the one place
 * (th_validate_params), and th_msgpack_canonical, on random msgpack.
 *
 * Input: the first byte picks a parameter table (or, for one value in
 * four, the canonical re-encoder); the rest is the argument bytes as a
 * front hands them over.  Tables: echo's (one required string), a mixed
 * one (required string, integer and boolean with defaults, number, array
 * of strings, object, string enum with a default), and an empty one.
 *
 * Properties beyond "no crash, no leak, no UB":
 *   - the result is 0 or TH_EARGS (TH_ENOMEM never happens here), and an
 *     error has TH_EARGS in err.e.code and a message that starts with the
 *     tool name;
 *   - when defaults were filled in, the completed map validates again
 *     with nothing left to fill (filling is idempotent);
 *   - canonical form is a fixed point: canonical(canonical(x)) ==
 *     canonical(x), and it fails only on bytes that are not one value.
 * Any bytes are fed, memory bombs and deep nesting included: validation
 * walks them first (th_mp_check) and answers TH_EARGS.  (Fixed, now in
 * fuzz/corpus/validate/: args nested past 32 levels came back as
 * TH_ENOMEM.)
 *
 * (Fixed, in fuzz/corpus/validate/: th_msgpack_canonical() handed the
 * bytes to msgpack_unpack() without walking them first, so 10 bytes
 * announcing a map of 2^24 entries made it ask for 2 GiB.)
 *
 * needs: host/core/values/validate.c host/core/values/canonical.c
 */
#include <msgpack.h>
#include <string.h>

#include "fuzz.h"
#include "th/buf.h"
#include "th/err.h"
#include "th/tool.h"

static char *val_modes[] = {"r", "w", "a", NULL};
static uint8_t val_def_limit[] = {0x0a};       /* 10 */
static uint8_t val_def_flag[] = {0xc2};        /* false */
static uint8_t val_def_mode[] = {0xa1, 'r'};   /* "r" */

static th_param val_echo[] = {
    {.name = "text", .description = "text", .type = TOOLHOST_TYPE_STRING,
     .required = true},
};

static th_param val_mixed[] = {
    {.name = "path", .description = "a path", .type = TOOLHOST_TYPE_STRING,
     .required = true},
    {.name = "limit", .description = "how many", .type = TOOLHOST_TYPE_INTEGER,
     .default_mp = val_def_limit, .default_len = sizeof val_def_limit},
    {.name = "ratio", .description = "a number", .type = TOOLHOST_TYPE_NUMBER},
    {.name = "flag", .description = "a flag", .type = TOOLHOST_TYPE_BOOLEAN,
     .default_mp = val_def_flag, .default_len = sizeof val_def_flag},
    {.name = "tags", .description = "tags", .type = TOOLHOST_TYPE_ARRAY,
     .item_type = TOOLHOST_TYPE_STRING},
    {.name = "any", .description = "any list", .type = TOOLHOST_TYPE_ARRAY},
    {.name = "opts", .description = "options", .type = TOOLHOST_TYPE_OBJECT},
    {.name = "mode", .description = "open mode", .type = TOOLHOST_TYPE_STRING,
     .enum_values = val_modes, .n_enum = 3,
     .default_mp = val_def_mode, .default_len = sizeof val_def_mode},
};

typedef struct val_table {
    const char *what;
    const th_param *params;
    size_t n;
} val_table;

static const val_table val_tables[] = {
    {"echo", val_echo, 1},
    {"fs_read", val_mixed, sizeof val_mixed / sizeof val_mixed[0]},
    {"noargs", NULL, 0},
};

static void val_canonical(const uint8_t *data, size_t size)
{
    th_buf c1 = TH_BUF_INIT, c2 = TH_BUF_INIT;
    int rc = th_msgpack_canonical(data, size, &c1);
    if (rc == 0) {
        TH_FUZZ_CHECK(c1.len > 0);
        rc = th_msgpack_canonical(c1.data, c1.len, &c2);
        TH_FUZZ_CHECK(rc == 0);
        if (rc == 0)
            TH_FUZZ_CHECK(c1.len == c2.len &&
                          memcmp(c1.data, c2.data, c1.len) == 0);
    } else {
        TH_FUZZ_CHECK(rc < 0);
    }
    th_buf_destroy(&c1);
    th_buf_destroy(&c2);
}

static void val_params(const val_table *t, const uint8_t *data, size_t size)
{
    th_buf out = TH_BUF_INIT;
    bool filled = false;
    th_verr ve;
    int rc = th_validate_params(t->what, t->params, t->n, data, size, &out,
                                &filled, &ve);
    TH_FUZZ_CHECK(rc == 0 || rc == TH_EARGS);
    if (rc == TH_EARGS) {
        TH_FUZZ_CHECK(ve.e.code == TH_EARGS);
        TH_FUZZ_CHECK(ve.e.msg[0] != '\0');
        TH_FUZZ_CHECK(strstr(ve.e.msg, t->what) != NULL);
        TH_FUZZ_CHECK(!filled);
    }
    if (rc == 0 && filled) {
        TH_FUZZ_CHECK(out.len > 0);
        th_buf again = TH_BUF_INIT;
        bool filled2 = true;
        th_verr ve2;
        int rc2 = th_validate_params(t->what, t->params, t->n, out.data,
                                     out.len, &again, &filled2, &ve2);
        TH_FUZZ_CHECK(rc2 == 0);
        TH_FUZZ_CHECK(!filled2);
        th_buf_destroy(&again);
    }
    th_buf_destroy(&out);
}

static int fuzz_validate(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    data++;
    size--;
    if (sel % 4 == 3) {
        val_canonical(data, size);
    }
    else
        val_params(&val_tables[sel % 4], data, size);
    return 0;
}

TH_FUZZ_ENTRY(fuzz_validate)
