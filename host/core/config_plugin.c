/* config_plugin.c - a plugin's `config:` block: packed as msgpack and checked
 * against the plugin's declared keys by th_validate_params (the one
 * validator), with errors pointing at FILE:LINE:COL of the offending key.
 *
 * Kept apart from config.c so that programs which only parse configs do
 * not link the validator.
 */
#include "th/config.h"

#include <msgpack.h>
#include <string.h>

#include "th/buf.h"
#include "th/tool.h"

int th_config_plugin_block(const th_config *cfg, const th_plugin_cfg *pc,
                           const struct th_param *params, size_t n_params,
                           struct th_buf *out, th_error *err)
{
    th_error_clear(err);
    th_buf packed = TH_BUF_INIT, filled_buf = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &packed, th_buf_msgpack_write);
    int rc = pc->config ? th_ynode_pack(pc->config, &pk)
                        : (msgpack_pack_map(&pk, 0) ? TH_ENOMEM : 0);
    if (rc < 0) {
        th_buf_free(&packed);
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", cfg->path);
    }
    bool filled = false;
    th_verr verr;
    memset(&verr, 0, sizeof verr);
    /* No `what`: the message is the bare reason, prefixed below. */
    rc = th_validate_params(NULL, params, n_params, packed.data, packed.len,
                            &filled_buf, &filled, &verr);
    if (rc < 0) {
        /* Point at the key the validator names, else at the block. */
        int line = pc->line, col = pc->col;
        const th_ynode *at = NULL;
        if (verr.key[0] && pc->config)
            at = th_ynode_get_key(pc->config, verr.key);
        if (!at)
            at = pc->config;
        if (at) {
            line = at->line;
            col = at->col;
        }
        th_error_set(err, TH_ECONFIG, "%s:%d:%d: in the config of plugin "
                     "'%s': %s", cfg->path, line, col, pc->name,
                     verr.e.msg[0] ? verr.e.msg : "invalid config block");
        th_buf_free(&packed);
        th_buf_free(&filled_buf);
        return TH_ECONFIG;
    }
    const th_buf *src = filled ? &filled_buf : &packed;
    rc = th_buf_append(out, src->data, src->len);
    th_buf_free(&packed);
    th_buf_free(&filled_buf);
    if (rc < 0)
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", cfg->path);
    return 0;
}
