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
#include <sys/stat.h>

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
        th_buf_destroy(&packed);
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
        th_buf_destroy(&packed);
        th_buf_destroy(&filled_buf);
        return TH_ECONFIG;
    }
    const th_buf *src = filled ? &filled_buf : &packed;
    rc = th_buf_append(out, src->data, src->len);
    th_buf_destroy(&packed);
    th_buf_destroy(&filled_buf);
    if (rc < 0)
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", cfg->path);
    return 0;
}

/* The path of entry `pc` as the config file has it (after ${} expansion),
 * or pc->path. */
static const char *written_path(const th_config *cfg, const th_plugin_cfg *pc)
{
    const th_ynode *list = th_ynode_get(cfg->root, "plugins");
    size_t i = (size_t)(pc - cfg->plugins);
    if (list && list->kind == TH_Y_SEQ && pc >= cfg->plugins &&
        i < cfg->n_plugins && i < list->n) {
        const th_ynode *p = th_ynode_get(list->kids[i], "path");
        if (p && p->kind == TH_Y_SCALAR && p->str[0])
            return p->str;
    }
    return pc->path;
}

/* A private copy's path: ".../NAME-gGEN-SEQ.so" (reload_copy.c). */
static bool copy_name(const char *w, size_t n, const char *name)
{
    const char *slash = memrchr(w, '/', n);
    if (!slash)
        return false;
    const char *b = slash + 1, *end = w + n;
    size_t nl = strlen(name);
    if ((size_t)(end - b) < nl + 6 || memcmp(b, name, nl) != 0 ||
        b[nl] != '-' || b[nl + 1] != 'g')
        return false;
    const char *q = b + nl + 2;
    while (q < end && *q >= '0' && *q <= '9')
        q++;
    if (q == b + nl + 2 || q >= end || *q++ != '-')
        return false;
    const char *d = q;
    while (q < end && *q >= '0' && *q <= '9')
        q++;
    return q > d && (size_t)(end - q) == 3 && memcmp(q, ".so", 3) == 0;
}

void th_plugin_load_error(const th_config *cfg, const th_plugin_cfg *pc,
                          th_error *err)
{
    if (!err || !err->code || !cfg || !pc)
        return;
    size_t pl = strlen(cfg->path);
    if (strncmp(err->msg, cfg->path, pl) == 0 && err->msg[pl] == ':')
        return; /* already at a place in the config (its config: block) */
    const char *as = written_path(cfg, pc);
    /* the message with the resolved path and private copies' paths
     * replaced by the path as written */
    char msg[sizeof err->msg];
    size_t n = 0, rl = strlen(pc->path), al = strlen(as);
    const char *s = err->msg;
    while (*s && n + 1 < sizeof msg) {
        size_t w = strcspn(s, " :,;()'\"");
        if (w && ((w == rl && memcmp(s, pc->path, rl) == 0) ||
                  copy_name(s, w, pc->name))) {
            size_t c = al < sizeof msg - 1 - n ? al : sizeof msg - 1 - n;
            memcpy(msg + n, as, c);
            n += c;
            s += w;
            continue;
        }
        if (!w)
            w = 1;
        size_t c = w < sizeof msg - 1 - n ? w : sizeof msg - 1 - n;
        memcpy(msg + n, s, c);
        n += c;
        s += w;
    }
    msg[n] = '\0';
    const char *body = msg; /* without a leading "PATH: " said above */
    if (strncmp(body, as, al) == 0 && body[al] == ':' && body[al + 1] == ' ')
        body += al + 2;
    struct stat st;
    if (stat(pc->path, &st) == 0 && S_ISDIR(st.st_mode))
        body = "the path is a folder; give the plugin's shared object "
               "(a .so file)";
    /* "FILE:LINE:COL: plugin 'NAME' (path P): message" */
    int w = snprintf(err->msg, sizeof err->msg,
                     "%s:%d:%d: plugin '%s' (path %s): ", cfg->path, pc->line,
                     pc->col, pc->name, as);
    if (w > 0 && (size_t)w < sizeof err->msg)
        snprintf(err->msg + w, sizeof err->msg - (size_t)w, "%.*s",
                 (int)(sizeof err->msg - 1 - (size_t)w), body);
}
