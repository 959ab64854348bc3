/* test_perm.c - the permission policy (th/perm.h) in every combination:
 * glob, flag, needs_permission, rule order, default deny/allow/ask. */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <string.h>

#include "th/perm.h"
#include "toolhost/plugin.h"

#define DESTR TOOLHOST_TOOL_DESTRUCTIVE
#define OPENW TOOLHOST_TOOL_OPEN_WORLD
#define RO TOOLHOST_TOOL_READ_ONLY
#define NEEDS TH_PERM_FLAG_NEEDS

static th_toolset_cfg toolset(th_perm_rule *rules, size_t n,
                              th_perm_action def)
{
    th_toolset_cfg ts;
    memset(&ts, 0, sizeof ts);
    ts.name = "dev";
    ts.rules = rules;
    ts.n_rules = n;
    ts.perm_default = def;
    return ts;
}

static th_perm_action decide(const th_toolset_cfg *ts, const char *tool,
                             uint32_t flags, char *rule)
{
    th_perm_decision d;
    memset(&d, 0x55, sizeof d);
    th_perm_decide(ts, "cfg.yaml", tool, flags, &d);
    if (rule)
        strcpy(rule, d.rule);
    return d.action;
}

static void test_no_rules_default(void)
{
    char rule[256];
    static const th_perm_action defs[] = {TH_PERM_DENY, TH_PERM_ALLOW,
                                          TH_PERM_ASK};
    static const uint32_t needing[] = {NEEDS, DESTR, OPENW, DESTR | RO,
                                       NEEDS | OPENW};
    for (size_t d = 0; d < 3; d++) {
        th_toolset_cfg ts = toolset(NULL, 0, defs[d]);
        /* nothing that needs permission: allowed, whatever the default */
        CU_ASSERT_EQUAL(decide(&ts, "echo", 0, rule), TH_PERM_ALLOW);
        CU_ASSERT_STRING_EQUAL(rule, "no permission needed");
        CU_ASSERT_EQUAL(decide(&ts, "echo", RO | TOOLHOST_TOOL_ASYNC |
                                               TOOLHOST_TOOL_IDEMPOTENT |
                                               TOOLHOST_TOOL_SERIAL,
                               NULL),
                        TH_PERM_ALLOW);
        /* needs permission: the default */
        for (size_t f = 0; f < sizeof needing / sizeof needing[0]; f++)
            CU_ASSERT_EQUAL(decide(&ts, "rm", needing[f], NULL), defs[d]);
    }
    th_toolset_cfg ts = toolset(NULL, 0, TH_PERM_ASK);
    decide(&ts, "rm", DESTR, rule);
    CU_ASSERT_STRING_EQUAL(rule, "default (ask) of toolset 'dev'");
    ts = toolset(NULL, 0, TH_PERM_DENY);
    decide(&ts, "rm", NEEDS, rule);
    CU_ASSERT_STRING_EQUAL(rule, "default (deny) of toolset 'dev'");
    /* no toolset at all: deny what needs permission */
    CU_ASSERT_EQUAL(decide(NULL, "rm", DESTR, NULL), TH_PERM_DENY);
    CU_ASSERT_EQUAL(decide(NULL, "ls", RO, NULL), TH_PERM_ALLOW);
}

static void test_glob(void)
{
    th_perm_rule rules[] = {
        {"fs_*", 0, TH_PERM_ALLOW, 12, 9},
        {"net_[ab]?", 0, TH_PERM_ASK, 14, 9},
        {"*", 0, TH_PERM_DENY, 16, 9},
    };
    th_toolset_cfg ts = toolset(rules, 3, TH_PERM_ALLOW);
    char rule[256];
    CU_ASSERT_EQUAL(decide(&ts, "fs_write", DESTR, rule), TH_PERM_ALLOW);
    CU_ASSERT_STRING_EQUAL(rule, "rule 1 (match 'fs_*', action allow) of "
                                 "toolset 'dev' at cfg.yaml:12:9");
    CU_ASSERT_EQUAL(decide(&ts, "fs_", 0, NULL), TH_PERM_ALLOW);
    CU_ASSERT_EQUAL(decide(&ts, "net_a1", 0, rule), TH_PERM_ASK);
    CU_ASSERT_STRING_EQUAL(rule, "rule 2 (match 'net_[ab]?', action ask) of "
                                 "toolset 'dev' at cfg.yaml:14:9");
    CU_ASSERT_EQUAL(decide(&ts, "net_c1", 0, rule), TH_PERM_DENY);
    CU_ASSERT_STRING_EQUAL(rule, "rule 3 (match '*', action deny) of "
                                 "toolset 'dev' at cfg.yaml:16:9");
    /* a rule decides even for a tool that needs no permission */
    CU_ASSERT_EQUAL(decide(&ts, "echo", RO, NULL), TH_PERM_DENY);
    /* globs match the whole name, case-sensitively */
    CU_ASSERT_EQUAL(decide(&ts, "xfs_read", 0, NULL), TH_PERM_DENY);
    CU_ASSERT_EQUAL(decide(&ts, "FS_read", 0, NULL), TH_PERM_DENY);
}

static void test_flags(void)
{
    th_perm_rule rules[] = {
        {NULL, DESTR | OPENW, TH_PERM_DENY, 3, 5},
        {NULL, NEEDS, TH_PERM_ASK, 4, 5},
        {NULL, DESTR, TH_PERM_ALLOW, 5, 5},
    };
    th_toolset_cfg ts = toolset(rules, 3, TH_PERM_DENY);
    char rule[256];
    /* every flag of the rule must be set */
    CU_ASSERT_EQUAL(decide(&ts, "t", DESTR | OPENW, rule), TH_PERM_DENY);
    CU_ASSERT_STRING_EQUAL(rule, "rule 1 (flags destructive+open_world, "
                                 "action deny) of toolset 'dev' at "
                                 "cfg.yaml:3:5");
    CU_ASSERT_EQUAL(decide(&ts, "t", DESTR | OPENW | NEEDS, NULL),
                    TH_PERM_DENY);
    CU_ASSERT_EQUAL(decide(&ts, "t", DESTR | NEEDS, rule), TH_PERM_ASK);
    CU_ASSERT_STRING_EQUAL(rule, "rule 2 (flags needs_permission, action "
                                 "ask) of toolset 'dev' at cfg.yaml:4:5");
    CU_ASSERT_EQUAL(decide(&ts, "t", DESTR, NULL), TH_PERM_ALLOW);
    /* open-world alone: no rule, needs permission: the default */
    CU_ASSERT_EQUAL(decide(&ts, "t", OPENW, rule), TH_PERM_DENY);
    CU_ASSERT_STRING_EQUAL(rule, "default (deny) of toolset 'dev'");
    CU_ASSERT_EQUAL(decide(&ts, "t", RO, rule), TH_PERM_ALLOW);
    CU_ASSERT_STRING_EQUAL(rule, "no permission needed");
}

static void test_glob_and_flag(void)
{
    th_perm_rule rules[] = {
        {"git_*", NEEDS, TH_PERM_ASK, 7, 7},
        {"git_*", 0, TH_PERM_ALLOW, 8, 7},
    };
    th_toolset_cfg ts = toolset(rules, 2, TH_PERM_DENY);
    char rule[256];
    CU_ASSERT_EQUAL(decide(&ts, "git_push", NEEDS | OPENW, rule),
                    TH_PERM_ASK);
    CU_ASSERT_STRING_EQUAL(rule, "rule 1 (match 'git_*', flags "
                                 "needs_permission, action ask) of toolset "
                                 "'dev' at cfg.yaml:7:7");
    CU_ASSERT_EQUAL(decide(&ts, "git_push", OPENW, NULL), TH_PERM_ALLOW);
    CU_ASSERT_EQUAL(decide(&ts, "svn_commit", NEEDS, NULL), TH_PERM_DENY);
    CU_ASSERT_EQUAL(decide(&ts, "svn_log", RO, NULL), TH_PERM_ALLOW);
}

static void test_order(void)
{
    /* the first matching rule wins, whatever the later ones say */
    th_perm_rule a[] = {
        {"rm*", 0, TH_PERM_DENY, 1, 1},
        {"*", 0, TH_PERM_ALLOW, 2, 1},
    };
    th_perm_rule b[] = {
        {"*", 0, TH_PERM_ALLOW, 1, 1},
        {"rm*", 0, TH_PERM_DENY, 2, 1},
    };
    th_toolset_cfg ta = toolset(a, 2, TH_PERM_ASK);
    th_toolset_cfg tb = toolset(b, 2, TH_PERM_ASK);
    CU_ASSERT_EQUAL(decide(&ta, "rmdir", DESTR, NULL), TH_PERM_DENY);
    CU_ASSERT_EQUAL(decide(&tb, "rmdir", DESTR, NULL), TH_PERM_ALLOW);
    CU_ASSERT_EQUAL(decide(&ta, "ls", 0, NULL), TH_PERM_ALLOW);
    /* a rule with neither glob nor flags matches every call */
    th_perm_rule c[] = {{NULL, 0, TH_PERM_ASK, 9, 3}};
    th_toolset_cfg tc = toolset(c, 1, TH_PERM_DENY);
    char rule[256];
    CU_ASSERT_EQUAL(decide(&tc, "ls", RO, rule), TH_PERM_ASK);
    CU_ASSERT_STRING_EQUAL(rule, "rule 1 (action ask) of toolset 'dev' at "
                                 "cfg.yaml:9:3");
    /* without a config path the text has no location */
    th_perm_decision d;
    th_perm_decide(&tc, NULL, "ls", 0, &d);
    CU_ASSERT_STRING_EQUAL(d.rule, "rule 1 (action ask) of toolset 'dev'");
}

static void test_names(void)
{
    CU_ASSERT_STRING_EQUAL(th_perm_action_name(TH_PERM_ALLOW), "allow");
    CU_ASSERT_STRING_EQUAL(th_perm_action_name(TH_PERM_DENY), "deny");
    CU_ASSERT_STRING_EQUAL(th_perm_action_name(TH_PERM_ASK), "ask");
    CU_ASSERT_STRING_EQUAL(th_perm_flag_name(OPENW), "open_world");
    CU_ASSERT_STRING_EQUAL(th_perm_flag_name(NEEDS), "needs_permission");
    CU_ASSERT_PTR_NULL(th_perm_flag_name(1u << 20));
    char buf[8];
    size_t need = th_perm_flags_str(RO | DESTR, buf, sizeof buf);
    CU_ASSERT_EQUAL(need, strlen("read_only+destructive"));
    CU_ASSERT_STRING_EQUAL(buf, "read_on"); /* cut, terminated */
    /* a long glob: the text is cut, never overflows */
    char glob[400];
    memset(glob, 'g', sizeof glob - 1);
    glob[sizeof glob - 1] = '\0';
    th_perm_rule r[] = {{glob, DESTR | OPENW | NEEDS, TH_PERM_DENY, 1, 1}};
    th_toolset_cfg ts = toolset(r, 1, TH_PERM_ALLOW);
    th_perm_decision d;
    th_perm_decide(&ts, "/a/very/long/path/config.yaml", glob,
                   DESTR | OPENW | NEEDS, &d);
    CU_ASSERT_EQUAL(d.action, TH_PERM_DENY);
    CU_ASSERT_TRUE(strlen(d.rule) < sizeof d.rule);
    CU_ASSERT_EQUAL(strncmp(d.rule, "rule 1 (match 'ggg", 18), 0);
}

/* Pure and thread-safe: the same answers from many threads at once. */
static th_perm_rule mt_rules[] = {
    {"a*", NEEDS, TH_PERM_ASK, 1, 1},
    {"b*", 0, TH_PERM_DENY, 2, 1},
};

static void *mt_worker(void *arg)
{
    th_toolset_cfg *ts = arg;
    long bad = 0;
    for (int i = 0; i < 20000; i++) {
        th_perm_decision d;
        th_perm_decide(ts, "c.yaml", i % 2 ? "abc" : "bcd", NEEDS, &d);
        if (d.action != (i % 2 ? TH_PERM_ASK : TH_PERM_DENY))
            bad++;
    }
    return (void *)bad;
}

static void test_threads(void)
{
    th_toolset_cfg ts = toolset(mt_rules, 2, TH_PERM_ALLOW);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, mt_worker, &ts), 0);
    long bad = 0;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)r;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

void th_suite_perm(void)
{
    CU_pSuite s = CU_add_suite("perm", NULL, NULL);
    CU_add_test(s, "no_rules_default", test_no_rules_default);
    CU_add_test(s, "glob", test_glob);
    CU_add_test(s, "flags", test_flags);
    CU_add_test(s, "glob_and_flag", test_glob_and_flag);
    CU_add_test(s, "order", test_order);
    CU_add_test(s, "names", test_names);
    CU_add_test(s, "threads", test_threads);
}
