/* call_fast.c - the short path: a front's event loop that passes
 * th_call_opts.short_inline runs a call itself, as a caller that waits
 * would (may_block), when the tool promises to be short (plugin.h,
 * TOOLHOST_TOOL_SHORT).  Every stage is the same as on a worker: lookup,
 * policy, validation, permission, the manager's limits (a full group or a
 * stopping manager still queues), output limits and stats.  What the front
 * saves is the hand-off to a worker and back (docs: bench/README.md, rpc).
 */
#include "call_fast.h"

#include "toolhost/plugin.h"

bool th_call_fast_ok(const th_tool *t)
{
    return t && (t->flags & TOOLHOST_TOOL_SHORT) &&
           !(t->flags & TOOLHOST_TOOL_ASYNC) && t->plugin && !t->plugin->iso;
}
