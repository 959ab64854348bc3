/* call_fast.h - private to host/core: which calls a front's event loop may
 * run itself (th_call_opts.short_inline, TOOLHOST_TOOL_SHORT). */
#ifndef TH_CALL_FAST_H
#define TH_CALL_FAST_H

#include <stdbool.h>

#include "th/tool.h"

/* Whether a caller that must not block may still run a call of `t` on its
 * own thread: the tool is declared TOOLHOST_TOOL_SHORT, is sync and its
 * plugin is not isolated (an isolated call waits for another process).
 * Any thread; reads only the tool's immutable description. */
bool th_call_fast_ok(const th_tool *t);

#endif
