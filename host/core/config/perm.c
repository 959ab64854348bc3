/* perm.c - the permission policy: ordered rules, a default, a reason. */
#include "th/perm.h"

#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "toolhost/plugin.h"

static const struct {
    uint32_t bit;
    const char *name;
} flag_names[] = {
    {TOOLHOST_TOOL_ASYNC, "async"},
    {TOOLHOST_TOOL_READ_ONLY, "read_only"},
    {TOOLHOST_TOOL_DESTRUCTIVE, "destructive"},
    {TOOLHOST_TOOL_IDEMPOTENT, "idempotent"},
    {TOOLHOST_TOOL_OPEN_WORLD, "open_world"},
    {TOOLHOST_TOOL_SERIAL, "serial"},
    {TH_PERM_FLAG_NEEDS, "needs_permission"},
};

/* snprintf that may cut (the decision text is bounded on purpose);
 * returns the length it wanted. */
static size_t textf(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static size_t textf(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    return n > 0 ? (size_t)n : 0;
}

const char *th_perm_flag_name(uint32_t bit)
{
    for (size_t i = 0; i < sizeof flag_names / sizeof flag_names[0]; i++)
        if (flag_names[i].bit == bit)
            return flag_names[i].name;
    return NULL;
}

const char *th_perm_action_name(th_perm_action a)
{
    switch (a) {
    case TH_PERM_ALLOW:
        return "allow";
    case TH_PERM_ASK:
        return "ask";
    case TH_PERM_DENY:
        return "deny";
    }
    return "deny";
}

size_t th_perm_flags_str(uint32_t flags, char *buf, size_t size)
{
    size_t n = 0;
    if (size)
        buf[0] = '\0';
    for (size_t i = 0; i < sizeof flag_names / sizeof flag_names[0]; i++) {
        if (!(flags & flag_names[i].bit))
            continue;
        n += textf(buf + (n < size ? n : size), n < size ? size - n : 0,
                   "%s%s", n ? "+" : "", flag_names[i].name);
    }
    return n;
}

static bool rule_matches(const th_perm_rule *r, const char *tool,
                         uint32_t flags)
{
    if (r->match && fnmatch(r->match, tool, 0) != 0)
        return false;
    return (flags & r->flags) == r->flags;
}

void th_perm_decide(const th_toolset_cfg *ts, const char *cfg_path,
                    const char *tool_name, uint32_t flags,
                    th_perm_decision *out)
{
    const char *tsname = ts && ts->name ? ts->name : "?";
    for (size_t i = 0; ts && i < ts->n_rules; i++) {
        const th_perm_rule *r = &ts->rules[i];
        if (!rule_matches(r, tool_name, flags))
            continue;
        char what[160] = "";
        size_t n = 0;
        if (r->match)
            n += textf(what, sizeof what, "match '%s', ", r->match);
        if (r->flags && n < sizeof what) {
            char fl[96];
            th_perm_flags_str(r->flags, fl, sizeof fl);
            textf(what + n, sizeof what - n, "flags %s, ", fl);
        }
        char at[96] = "";
        if (cfg_path)
            textf(at, sizeof at, " at %s:%d:%d", cfg_path, r->line, r->col);
        out->action = r->action;
        textf(out->rule, sizeof out->rule,
              "rule %zu (%saction %s) of toolset '%s'%s", i + 1, what,
              th_perm_action_name(r->action), tsname, at);
        return;
    }
    uint32_t needs = TH_PERM_FLAG_NEEDS | TOOLHOST_TOOL_DESTRUCTIVE |
                     TOOLHOST_TOOL_OPEN_WORLD;
    if (flags & needs) {
        out->action = ts ? ts->perm_default : TH_PERM_DENY;
        textf(out->rule, sizeof out->rule, "default (%s) of toolset '%s'",
              th_perm_action_name(out->action), tsname);
        return;
    }
    out->action = TH_PERM_ALLOW;
    memcpy(out->rule, "no permission needed", sizeof "no permission needed");
}
