/* th/perm.h - permission policy: may this call run, be refused, or must
 * someone be asked?
 *
 * A toolset's rules (th_toolset_cfg.rules) are tried in order; the first
 * whose tool-name glob and flags match decides: a rule matches when its
 * glob (fnmatch(3), no flags) matches the tool name, or it has none, and
 * every flag bit it names is set in the call's flags.  Flags are the tool's
 * TOOLHOST_TOOL_* bits plus TH_PERM_FLAG_NEEDS when the tool's
 * needs_permission() said 1 for these arguments.  When no rule matches:
 * a call that needs permission (needs_permission said 1, or the tool is
 * destructive or open-world) gets the toolset's `default` (deny unless the
 * config says otherwise); any other call is allowed.
 */
#ifndef TH_PERM_H
#define TH_PERM_H

#include <stddef.h>
#include <stdint.h>

#include "th/config.h"

typedef struct th_perm_decision {
    th_perm_action action;
    /* Which rule decided, for messages and logs: "rule 2 (match 'fs_*',
     * action deny) of toolset 'default' at configs/x.yaml:12:9", or
     * "default of toolset 'default'", or "no permission needed". */
    char rule[256];
} th_perm_decision;

/* Decides for `tool_name` with `flags` (TOOLHOST_TOOL_* | maybe
 * TH_PERM_FLAG_NEEDS).  `cfg_path` names the file in the rule text.
 * Pure function: safe from any thread. */
void th_perm_decide(const th_toolset_cfg *ts, const char *cfg_path,
                    const char *tool_name, uint32_t flags,
                    th_perm_decision *out);

/* "allow", "deny", "ask".  Static storage. */
const char *th_perm_action_name(th_perm_action a);
/* The name of one flag bit ("destructive", "open_world", ...,
 * "needs_permission" for TH_PERM_FLAG_NEEDS), or NULL.  Static storage. */
const char *th_perm_flag_name(uint32_t bit);
/* Writes the set bits of `flags` as "destructive+open_world" into buf
 * (always NUL-terminated when size > 0); returns the length it needed. */
size_t th_perm_flags_str(uint32_t flags, char *buf, size_t size);

#endif
