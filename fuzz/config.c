/* fuzz/config.c - libFuzzer target: the YAML config loader
 * (th_config_parse) on random text, as an operator's file would bring it.
 *
 * The whole input is the YAML text (seeds are real config files).
 * Properties beyond "no crash, no leak, no UB":
 *   - failure is TH_ECONFIG (or TH_ENOMEM) with *out NULL and a message
 *     that starts with the file name ("fuzz.yaml:LINE:COL: ...");
 *   - success gives a config whose every plugin `config:` block and whose
 *     whole document pack as msgpack (th_ynode_pack) into one complete
 *     value; th_config_check_tools answers with a message whenever it
 *     refuses (tools are said to exist when their name starts with 'e').
 * Plugin paths are resolved against a folder that does not exist: parsing
 * must not need the files.
 *
 * needs: host/core/config/config.c
 */
#include <msgpack.h>
#include <string.h>

#include "fuzz.h"
#include "front/fronts.h"
#include "th/buf.h"
#include "th/config.h"
#include "th/err.h"

static bool cfg_has_tool(void *ud, const char *name)
{
    (void)ud;
    return name[0] == 'e';
}

static void cfg_check_packs(const th_ynode *n)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    int rc = th_ynode_pack(n, &pk);
    TH_FUZZ_CHECK(rc == 0 || rc == TH_EINVAL);
    if (rc == 0) {
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        TH_FUZZ_CHECK(th_fuzz_msgpack_plausible(b.data, b.len));
        int ur = msgpack_unpack_next(&u, (const char *)b.data, b.len, &off);
        /* one complete value; msgpack-c refuses more than 32 levels, which
         * YAML can nest */
        TH_FUZZ_CHECK(ur == MSGPACK_UNPACK_SUCCESS ||
                      ur == MSGPACK_UNPACK_NOMEM_ERROR);
        if (ur == MSGPACK_UNPACK_SUCCESS)
            TH_FUZZ_CHECK(off == b.len);
        msgpack_unpacked_destroy(&u);
    }
    th_buf_destroy(&b);
}

static int fuzz_config(const uint8_t *data, size_t size)
{
    th_config *cfg = (th_config *)1;
    th_error err;
    th_error_clear(&err);
    th_fronts_register_builtin(); /* the fronts' config sections */
    int rc = th_config_parse("fuzz.yaml", "/nonexistent-th-fuzz", (const char *)data,
                             size, &cfg, &err);
    if (rc < 0) {
        TH_FUZZ_CHECK(rc == TH_ECONFIG || rc == TH_ENOMEM);
        TH_FUZZ_CHECK(cfg == NULL);
        TH_FUZZ_CHECK(err.code == rc);
        TH_FUZZ_CHECK(strncmp(err.msg, "fuzz.yaml", 9) == 0);
        return 0;
    }
    TH_FUZZ_CHECK(rc == 0 && cfg != NULL && cfg != (th_config *)1);
    if (rc != 0 || cfg == NULL || cfg == (th_config *)1)
        return 0;
    TH_FUZZ_CHECK(cfg->n_toolsets >= 1);
    for (size_t i = 0; i < cfg->n_plugins; i++) {
        TH_FUZZ_CHECK(cfg->plugins[i].name && cfg->plugins[i].path);
        if (cfg->plugins[i].config)
            cfg_check_packs(cfg->plugins[i].config);
    }
    if (cfg->root)
        cfg_check_packs(cfg->root);
    th_error_clear(&err);
    rc = th_config_check_tools(cfg, cfg_has_tool, NULL, &err);
    if (rc < 0)
        TH_FUZZ_CHECK(err.code != 0 && err.msg[0] != '\0');
    th_config_free(cfg);
    return 0;
}

TH_FUZZ_ENTRY(fuzz_config)
