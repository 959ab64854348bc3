/* test_rate.c - rate.c with its own clock: token buckets per caller,
 * per caller and tool, shared; concurrent slots given back; the daily
 * quota's UTC day; several rules at once (a refused call costs none of
 * them); tool patterns and user lists; the trusted CLI never limited;
 * the bounded bucket table (idle buckets go, busy ones refuse). */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#include "call/rate.h"
#include "th/err.h"

#define SEC 1000000000LL
#define DAY0 (20000LL * 86400) /* a UTC midnight */

static th_principal alice = {.uid = (uint32_t)-1, .user = "alice"};
static th_principal bob = {.uid = (uint32_t)-1, .user = "bob"};

typedef struct rig {
    th_rate *r;
    th_config cfg;
    th_rate_cfg rules[4];
    char *tools[4][2];
    char *users[4][2];
    int64_t now, wall;
    uint64_t next_id;
    char msg[512];
    uint64_t retry;
} rig;

static void rig_init(rig *g)
{
    memset(g, 0, sizeof *g);
    g->r = th_rate_new();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g->r);
    g->cfg.rate_limits = g->rules;
    g->now = 5 * SEC;
    g->wall = DAY0 + 3600;
}

static th_rate_cfg *rule(rig *g, const char *name, int per)
{
    th_rate_cfg *r = &g->rules[g->cfg.n_rate_limits++];
    r->name = (char *)name;
    r->per = per;
    return r;
}

/* Admits a call with a fresh id; with `id` the call keeps its slots
 * (*id says which to release; *held whether it holds any), else they go
 * back at once. */
static int admit_held(rig *g, const th_principal *who, const char *tool,
                      uint64_t *id, bool *held)
{
    bool h = false;
    uint64_t cid = ++g->next_id;
    int rc = th_rate_admit(g->r, &g->cfg, who, tool, cid, g->now, g->wall,
                           &h, &g->retry, g->msg, sizeof g->msg);
    if (held)
        *held = h;
    if (id)
        *id = cid;
    else if (h)
        th_rate_release(g->r, cid);
    return rc;
}

static int admit(rig *g, const th_principal *who, const char *tool)
{
    return admit_held(g, who, tool, NULL, NULL);
}

static void test_per_caller(void)
{
    rig g;
    rig_init(&g);
    th_rate_cfg *r = rule(&g, "two", TH_RATE_PER_CALLER);
    r->rate = 2;
    r->burst = 2;
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), 0);
    CU_ASSERT_EQUAL(admit(&g, &alice, "fs_read"), 0);
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), TH_ERATE_LIMITED);
    CU_ASSERT_EQUAL(g.retry, 500);
    CU_ASSERT_PTR_NOT_NULL(strstr(g.msg, "rate limit 'two': 2 calls per "
                                         "second (burst 2) for alice; retry "
                                         "after 500 ms"));
    /* bob has a bucket of his own */
    CU_ASSERT_EQUAL(admit(&g, &bob, "echo"), 0);
    /* half a second refills one token */
    g.now += SEC / 2;
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), 0);
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), TH_ERATE_LIMITED);
    /* a long pause refills no more than the burst */
    g.now += 100 * SEC;
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), 0);
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), 0);
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), TH_ERATE_LIMITED);
    CU_ASSERT_EQUAL(th_rate_refused(g.r), 3);
    th_rate_free(g.r);
}

static void test_per_caller_tool_and_all(void)
{
    rig g;
    rig_init(&g);
    th_rate_cfg *r = rule(&g, "each", TH_RATE_PER_CALLER_TOOL);
    r->rate = 1;
    r->burst = 1;
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), 0);
    CU_ASSERT_EQUAL(admit(&g, &alice, "fs_read"), 0);
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), TH_ERATE_LIMITED);
    th_rate_free(g.r);

    rig_init(&g);
    r = rule(&g, "shared", TH_RATE_PER_ALL);
    r->rate = 1;
    r->burst = 1;
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), 0);
    CU_ASSERT_EQUAL(admit(&g, &bob, "fs_read"), TH_ERATE_LIMITED);
    th_rate_free(g.r);
}

static void test_concurrent(void)
{
    rig g;
    rig_init(&g);
    th_rate_cfg *r = rule(&g, "pair", TH_RATE_PER_CALLER);
    r->concurrent = 2;
    uint64_t a, b, c;
    bool held;
    CU_ASSERT_EQUAL(admit_held(&g, &alice, "echo", &a, &held), 0);
    CU_ASSERT_TRUE(held);
    CU_ASSERT_EQUAL(admit_held(&g, &alice, "echo", &b, NULL), 0);
    CU_ASSERT_EQUAL(admit_held(&g, &alice, "echo", &c, &held),
                    TH_ERATE_LIMITED);
    CU_ASSERT_FALSE(held);
    CU_ASSERT_EQUAL(g.retry, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(g.msg, "at most 2 concurrent calls for "
                                         "alice; retry when one of them "
                                         "ends"));
    CU_ASSERT_EQUAL(admit_held(&g, &bob, "echo", &c, NULL), 0);
    th_rate_release(g.r, a);
    /* released twice, or never held: nothing */
    th_rate_release(g.r, a);
    th_rate_release(g.r, 999999);
    CU_ASSERT_EQUAL(admit_held(&g, &alice, "echo", &a, NULL), 0);
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), TH_ERATE_LIMITED);
    th_rate_release(g.r, a);
    th_rate_release(g.r, b);
    th_rate_release(g.r, c);
    th_rate_free(g.r);
}

static void test_daily(void)
{
    rig g;
    rig_init(&g);
    th_rate_cfg *r = rule(&g, "quota", TH_RATE_PER_CALLER);
    r->daily = 2;
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), 0);
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), 0);
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), TH_ERATE_LIMITED);
    /* 01:00 UTC: 23 hours to the next day */
    CU_ASSERT_EQUAL(g.retry, 23ull * 3600 * 1000);
    g.wall = DAY0 + 86400 - 1;
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), TH_ERATE_LIMITED);
    CU_ASSERT_EQUAL(g.retry, 1000);
    g.wall = DAY0 + 86400;
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), 0);
    th_rate_free(g.r);
}

/* Both rules must have room; the one that refuses costs the other
 * nothing. */
static void test_rules_together(void)
{
    rig g;
    rig_init(&g);
    th_rate_cfg *wide = rule(&g, "wide", TH_RATE_PER_CALLER);
    wide->rate = 1;
    wide->burst = 3;
    th_rate_cfg *narrow = rule(&g, "narrow", TH_RATE_PER_CALLER);
    narrow->concurrent = 1;
    g.tools[1][0] = "fs_*";
    narrow->tools = g.tools[1];
    narrow->n_tools = 1;
    uint64_t h1, h2;
    bool held;
    CU_ASSERT_EQUAL(admit_held(&g, &alice, "fs_read", &h1, &held), 0);
    CU_ASSERT_TRUE(held);
    CU_ASSERT_EQUAL(admit(&g, &alice, "fs_list"), TH_ERATE_LIMITED);
    CU_ASSERT_PTR_NOT_NULL(strstr(g.msg, "'narrow'"));
    /* echo is not fs_*: only "wide" counts it; its 2 tokens are there
     * (the refused fs_list took none) */
    CU_ASSERT_EQUAL(admit_held(&g, &alice, "echo", &h2, &held), 0);
    CU_ASSERT_FALSE(held);
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), 0);
    CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), TH_ERATE_LIMITED);
    CU_ASSERT_PTR_NOT_NULL(strstr(g.msg, "'wide'"));
    th_rate_release(g.r, h1);
    th_rate_free(g.r);
}

static void test_users_and_trusted(void)
{
    rig g;
    rig_init(&g);
    th_rate_cfg *r = rule(&g, "bob_only", TH_RATE_PER_CALLER);
    r->rate = 1;
    r->burst = 1;
    g.users[0][0] = "bob";
    r->users = g.users[0];
    r->n_users = 1;
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(admit(&g, &alice, "echo"), 0);
    CU_ASSERT_EQUAL(admit(&g, &bob, "echo"), 0);
    CU_ASSERT_EQUAL(admit(&g, &bob, "echo"), TH_ERATE_LIMITED);
    /* the in-process CLI: never */
    th_principal cli = {.uid = 0, .trusted = true};
    r->n_users = 0;
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(admit(&g, &cli, "echo"), 0);
    /* a local caller by uid: named "uid N" */
    th_principal local = {.uid = 4242, .gid = 4242};
    CU_ASSERT_EQUAL(admit(&g, &local, "echo"), 0);
    CU_ASSERT_EQUAL(admit(&g, &local, "echo"), TH_ERATE_LIMITED);
    CU_ASSERT_PTR_NOT_NULL(strstr(g.msg, "for uid 4242"));
    th_rate_free(g.r);
}

/* 65,536 callers fill the table: the next is refused while their buckets
 * hold something (a concurrent slot, tokens not yet refilled); a minute
 * later the idle ones go and new callers are admitted. */
static void test_bounded_table(void)
{
    rig g;
    rig_init(&g);
    th_rate_cfg *r = rule(&g, "many", TH_RATE_PER_CALLER);
    r->rate = 1;
    r->burst = 1;
    char name[32];
    th_principal p = {.uid = (uint32_t)-1, .user = name};
    int bad = 0;
    for (int i = 0; i < 65536; i++) {
        snprintf(name, sizeof name, "u%d", i);
        bad += admit(&g, &p, "echo") != 0;
    }
    CU_ASSERT_EQUAL(bad, 0);
    snprintf(name, sizeof name, "one-more");
    CU_ASSERT_EQUAL(admit(&g, &p, "echo"), TH_ERATE_LIMITED);
    CU_ASSERT_PTR_NOT_NULL(strstr(g.msg, "none idle"));
    g.now += 61 * SEC;
    CU_ASSERT_EQUAL(admit(&g, &p, "echo"), 0);
    th_rate_free(g.r);
}

void th_suite_rate(void)
{
    CU_pSuite s = CU_add_suite("rate", NULL, NULL);
    CU_add_test(s, "per_caller", test_per_caller);
    CU_add_test(s, "per_caller_tool_and_all", test_per_caller_tool_and_all);
    CU_add_test(s, "concurrent", test_concurrent);
    CU_add_test(s, "daily", test_daily);
    CU_add_test(s, "rules_together", test_rules_together);
    CU_add_test(s, "users_and_trusted", test_users_and_trusted);
    CU_add_test(s, "bounded_table", test_bounded_table);
}
