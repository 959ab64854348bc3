/* admin.c - who may administer the host (th_host_is_admin, th/host.h).
 *
 * The config's `admin: {users: [...], groups: [...]}` lists them, matched
 * like a toolset's allow_users/allow_groups (session.c); without the
 * section the uid the host runs as is the admin.  root and the in-process
 * CLI (trusted) always are.  Fronts ask here before host.reload, the whole
 * host.stats and other users' tasks, and name th_host_admin_rule() when
 * they refuse. */
#include <stdio.h>
#include <unistd.h>

#include "manager.h"

/* Both read the config through a reference of their own (a front's
 * thread, while a reload may swap the config and free the old one once
 * its last holder lets go). */
static bool is_admin(const th_config *cfg, const th_principal *who)
{
    if (!cfg->admin.present)
        return who->uid == (uint32_t)geteuid();
    if (cfg->admin.n_users == 0 && cfg->admin.n_groups == 0)
        return false; /* an empty list: root only */
    th_toolset_cfg acl = {.allow_users = cfg->admin.users,
                          .n_allow_users = cfg->admin.n_users,
                          .allow_groups = cfg->admin.groups,
                          .n_allow_groups = cfg->admin.n_groups};
    return th_acl_allows(&acl, who);
}

bool th_host_is_admin(th_host *h, const th_principal *who)
{
    if (who->trusted || who->uid == 0)
        return true;
    th_config *cfg = th_host_config_get(h);
    bool yes = is_admin(cfg, who);
    th_config_unref(cfg);
    return yes;
}

const char *th_host_admin_rule(th_host *h, char *buf, size_t n)
{
    th_config *cfg = th_host_config_get(h);
    if (cfg->admin.present)
        snprintf(buf, n, "admin.users/admin.groups in %s:%d:%d", cfg->path,
                 cfg->admin.line, cfg->admin.col);
    else
        snprintf(buf, n,
                 "without an admin: section in %s, root and the uid the "
                 "host runs as (%u)",
                 cfg->path, (unsigned)geteuid());
    th_config_unref(cfg);
    return buf;
}
