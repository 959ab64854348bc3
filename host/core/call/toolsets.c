/* toolsets.c - which toolset a call runs under, and the host's config as
 * new calls read it.  Pure lookups over the config and the built-ins: the
 * bottom of the host's files, called by call.c, manager.c, session.c,
 * tasks.c and the fronts, calling none of them. */
#include <string.h>

#include "manager.h"

bool th_host_is_task_tool(const char *name)
{
    /* the first byte first: this runs twice on every call */
    return (name[0] == 'g' && strcmp(name, "get_running_tasks") == 0) ||
           (name[0] == 'c' && strcmp(name, "cancel_task") == 0);
}

/* A reload swaps h->cfg for new calls (reload_host.c) and drops the
 * host's reference: what this returns is borrowed, valid until the next
 * swap (th/host.h).  A front's thread takes a reference instead
 * (th_host_config_get). */
const th_config *th_host_config(const th_host *h)
{
    return __atomic_load_n(&h->cfg, __ATOMIC_ACQUIRE);
}

th_registry *th_host_registry(th_host *h)
{
    return h->reg;
}

const th_tool_override *th_host_override(const th_toolset_cfg *ts,
                                         const char *tool)
{
    for (size_t i = 0; i < ts->n_overrides; i++)
        if (strcmp(ts->overrides[i].tool, tool) == 0)
            return &ts->overrides[i];
    return NULL;
}

bool th_host_toolset_has(th_host *h, const th_toolset_cfg *ts,
                         const th_tool *tool)
{
    if (th_host_is_task_tool(tool->name))
        return false;
    for (size_t i = 0; i < h->n_builtins; i++)
        if (h->builtins[i].p == tool->plugin && h->builtins[i].member)
            return h->builtins[i].member(ts, tool->name, h->builtins[i].ud);
    for (size_t i = 0; i < ts->n_tools; i++)
        if ((ts->tools[i][0] == '*' && ts->tools[i][1] == '\0') ||
            strcmp(ts->tools[i], tool->name) == 0)
            return true;
    /* `tags:` of the toolset: a tag the config's `tags:` gives the tool
     * (tag_refs[i], NULL when no entry has that name) or its plugin
     * declares (ABI 1.5) */
    for (size_t i = 0; i < ts->n_tags; i++)
        if ((ts->tag_refs[i] && th_tag_has_tool(ts->tag_refs[i], tool->name)) ||
            th_tool_has_tag(tool, ts->tags[i]))
            return true;
    return false;
}

int th_host_pick_toolset(th_host *h, const th_config *cfg, th_session *s,
                         const th_tool *tool, bool *any)
{
    *any = false;
    int idx = -1;
    for (size_t i = 0; i < cfg->n_toolsets && idx < 0; i++) {
        if (!th_host_toolset_has(h, &cfg->toolsets[i], tool))
            continue;
        *any = true;
        if (s->usable[i])
            idx = (int)i;
    }
    return idx;
}

bool th_host_is_builtin(const th_host *h, const th_tool *t)
{
    if (t->plugin == h->task_plugin)
        return true;
    for (size_t i = 0; i < h->n_builtins; i++)
        if (h->builtins[i].p == t->plugin)
            return true;
    return false;
}

/* Deferred (discover.c, docs/gateway.md): by its plugin entry or
 * defer_tools, in a host with search_tools (h->discovery); a built-in
 * never. */
bool th_host_tool_deferred(const th_host *h, const th_config *cfg,
                           const th_tool *t)
{
    return h->discovery && !th_host_is_builtin(h, t) &&
           th_config_tool_deferred(cfg, t->plugin->name, t->name);
}
