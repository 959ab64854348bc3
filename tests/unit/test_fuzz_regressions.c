/* test_fuzz_regressions.c - replays every committed fuzz input (seeds and
 * past crashes, fuzz/corpus/NAME/) through the fuzz targets' own code, in
 * the normal suite: gcc, ASan+UBSan and valgrind builds see them too.
 *
 * The targets are included with TH_FUZZ_NO_ENTRY (no libFuzzer entry
 * point) and TH_FUZZ_CHECK redefined as a CUnit assertion that names the
 * input.  A crash found by `make fuzz` is fixed and its input is added to
 * fuzz/corpus/NAME/, where this suite and `make fuzz-replay` keep it.
 *
 * Open findings in code another module owns wait in fuzz/open/NAME/ until
 * fixed (fuzz/open/README.md lists them): the test `open_findings` replays
 * them in strict mode only when TH_FUZZ_OPEN=1 is set, since they are
 * known to fail; once a fix lands, `git mv` the input into
 * fuzz/corpus/NAME/.
 */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"
#include "th/log.h"

static const char *fr_input = "?"; /* the input being replayed */

#define TH_FUZZ_NO_ENTRY 1
#define TH_FUZZ_CHECK(cond)                                                   \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "\n%s: %s:%d: check failed: %s\n", fr_input,      \
                    __FILE__, __LINE__, #cond);                               \
            CU_assertImplementation(CU_FALSE, __LINE__, #cond, __FILE__, "",  \
                                    CU_FALSE);                                \
        }                                                                     \
    } while (0)

/* Each landed target, included whole. */
#include "../../fuzz/cli_args.c"
#include "../../fuzz/code.c"
#include "../../fuzz/config.c"
#include "../../fuzz/iso_wire.c"
#include "../../fuzz/json.c"
#include "../../fuzz/jschema.c"
#include "../../fuzz/mcp.c"
#include "../../fuzz/mcp_fast.c"
#include "../../fuzz/oauth.c"
#include "../../fuzz/out.c"
#include "../../fuzz/rpc_frames.c"
#include "../../fuzz/rpc_serve.c"
#include "../../fuzz/validate.c"
#include "../../fuzz/values.c"

typedef struct fr_target {
    const char *name;
    int (*fn)(const uint8_t *data, size_t size);
    void (*done)(void); /* after the replay, may be NULL */
} fr_target;

static const fr_target fr_targets[] = {
    {"cli_args", fuzz_cli_args, NULL},
    {"code", fuzz_code, NULL},
    {"config", fuzz_config, NULL},
    {"iso_wire", fuzz_iso_wire, NULL},
    {"json", fuzz_json, NULL},
    {"jschema", fuzz_jschema, NULL},
    {"mcp", fuzz_mcp, mc_close},
    {"mcp_fast", fuzz_mcp_fast, NULL},
    {"oauth", fuzz_oauth, oa_close},
    {"out", fuzz_out, NULL},
    {"rpc_frames", fuzz_rpc_frames, NULL},
    {"rpc_serve", fuzz_rpc_serve, rs_close},
    {"validate", fuzz_validate, NULL},
    {"values", fuzz_values, NULL},
};

static uint8_t *fr_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* Runs fn over every file in dir; returns the number of inputs run.  The
 * log level is put back afterwards: opening a host (rpc_serve) sets it
 * from its config, and the suites after this one count log lines. */
static unsigned fr_replay_dir(const fr_target *t, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int level = th_log_get_level();
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len = 0;
        uint8_t *data = fr_read(path, &len);
        CU_ASSERT_PTR_NOT_NULL(data);
        if (!data)
            continue;
        fr_input = path;
        t->fn(data, len);
        fr_input = "?";
        free(data);
        n++;
    }
    closedir(d);
    if (t->done)
        t->done();
    th_log_set_level(level);
    return n;
}

static void test_corpora(void)
{
    for (size_t i = 0; i < sizeof fr_targets / sizeof fr_targets[0]; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s",
                 th_test_source_path("fuzz/corpus"), fr_targets[i].name);
        unsigned n = fr_replay_dir(&fr_targets[i], dir);
        /* every target has a seed corpus */
        CU_ASSERT(n > 0);
    }
}

/* Only with TH_FUZZ_OPEN=1: the open findings, in strict mode.  Prints
 * which inputs still fail. */
static void test_open_findings(void)
{
    setenv("TH_FUZZ_STRICT", "1", 1);
    for (size_t i = 0; i < sizeof fr_targets / sizeof fr_targets[0]; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s",
                 th_test_source_path("fuzz/open"), fr_targets[i].name);
        fr_replay_dir(&fr_targets[i], dir);
    }
    unsetenv("TH_FUZZ_STRICT");
}

void th_suite_fuzz_regressions(void)
{
    CU_pSuite s = CU_add_suite("fuzz_regressions", NULL, NULL);
    CU_add_test(s, "corpora", test_corpora);
    const char *open = getenv("TH_FUZZ_OPEN");
    if (open && strcmp(open, "1") == 0)
        CU_add_test(s, "open_findings", test_open_findings);
}
