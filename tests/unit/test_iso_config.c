/* test_iso_config.c - the isolation keys of a plugin entry (isolation,
 * workers, process_limits, network, user, kill_grace, env,
 * isolation_uid_range, content_timeout, worker_max_frame): defaults, values,
 * errors, and that a change to any of them counts as a changed entry for
 * a reload (th_plugin_cfg_equal). */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#include "th/config.h"

static th_config *parse(const char *yaml)
{
    th_config *cfg = NULL;
    th_error err;
    int rc = th_config_parse("t.yaml", "/cfg", yaml, strlen(yaml), &cfg, &err);
    if (rc != 0)
        printf("\n  unexpected error: %s\n", err.msg);
    return rc == 0 ? cfg : NULL;
}

static void expect_err(const char *yaml, const char *want)
{
    th_config *cfg = NULL;
    th_error err;
    int rc = th_config_parse("t.yaml", "/cfg", yaml, strlen(yaml), &cfg, &err);
    CU_ASSERT_EQUAL(rc, TH_ECONFIG);
    if (rc == 0) {
        th_config_free(cfg);
        return;
    }
    if (!strstr(err.msg, want))
        printf("\n  want: %s\n  got:  %s\n", want, err.msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
}

#define HEAD "plugins:\n  - name: p\n    path: p.so\n"

static void test_defaults(void)
{
    th_config *c = parse(HEAD);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const th_plugin_cfg *pc = &c->plugins[0];
    CU_ASSERT_EQUAL(pc->isolation, TH_ISO_IN_PROCESS);
    CU_ASSERT_EQUAL(pc->workers, 0);
    CU_ASSERT_TRUE(pc->network);
    CU_ASSERT_PTR_NULL(pc->user);
    CU_ASSERT_EQUAL(pc->process_limits.memory, 0);
    CU_ASSERT_EQUAL(pc->kill_grace_ms, 0);
    CU_ASSERT_EQUAL(pc->content_timeout_ms, 0); /* 5 s (iso_host.c) */
    CU_ASSERT_EQUAL(pc->worker_max_frame, 0); /* ISO_FRAME_DEFAULT */
    th_config_free(c);
}

static void test_values(void)
{
    th_config *c = parse(HEAD "    isolation: process\n"
                              "    workers: 3\n"
                              "    process_limits:\n"
                              "      memory: 512MiB\n"
                              "      cpu_seconds: 30\n"
                              "      open_files: 256\n"
                              "      processes: 16\n"
                              "    network: false\n"
                              "    user: nobody\n"
                              "    kill_grace: 250ms\n"
                              "    crash_loop: 3\n"
                              "    unhealthy_retry: 2s\n"
                              "    content_timeout: 750ms\n"
                              "    worker_max_frame: 1MiB\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const th_plugin_cfg *pc = &c->plugins[0];
    CU_ASSERT_EQUAL(pc->isolation, TH_ISO_PROCESS);
    CU_ASSERT_EQUAL(pc->workers, 3);
    CU_ASSERT_EQUAL(pc->process_limits.memory, 512ull << 20);
    CU_ASSERT_EQUAL(pc->process_limits.cpu_seconds, 30);
    CU_ASSERT_EQUAL(pc->process_limits.open_files, 256);
    CU_ASSERT_EQUAL(pc->process_limits.processes, 16);
    CU_ASSERT_FALSE(pc->network);
    CU_ASSERT_STRING_EQUAL(pc->user, "nobody");
    CU_ASSERT_EQUAL(pc->kill_grace_ms, 250);
    CU_ASSERT_EQUAL(pc->crash_loop, 3);
    CU_ASSERT_EQUAL(pc->unhealthy_retry_ms, 2000);
    CU_ASSERT_EQUAL(pc->content_timeout_ms, 750);
    CU_ASSERT_EQUAL(pc->worker_max_frame, 1u << 20);
    th_config_free(c);
}

static void test_errors(void)
{
    expect_err(HEAD "    isolation: sandbox\n",
               "invalid value 'sandbox' for 'isolation' (allowed: "
               "in-process, process)");
    expect_err(HEAD "    isolation: process\n    workers: 0\n",
               "'workers' is out of range");
    expect_err(HEAD "    workers: 2\n",
               "t.yaml:4:5: 'workers' applies only to a plugin with "
               "'isolation: process' (plugin 'p' runs in-process)");
    expect_err(HEAD "    isolation: in-process\n    network: false\n",
               "'network' applies only to a plugin with");
    expect_err(HEAD "    isolation: process\n"
                    "    process_limits:\n      memory: 1KiB\n",
               "'memory' is out of range");
    expect_err(HEAD "    isolation: process\n"
                    "    process_limits:\n      rss: 1GiB\n", "rss");
    expect_err(HEAD "    isolation: process\n    crash_loop: 0\n",
               "'crash_loop' is out of range");
    expect_err(HEAD "    isolation: process\n    network: maybe\n",
               "'network' must be true or false");
    expect_err(HEAD "    isolation: process\n    content_timeout: 0s\n",
               "'content_timeout' is out of range");
    expect_err(HEAD "    content_timeout: 1s\n",
               "'content_timeout' applies only to a plugin with");
    expect_err(HEAD "    isolation: process\n    worker_max_frame: 255KiB\n",
               "'worker_max_frame' is out of range: 255KiB is not between "
               "256KiB and 256MiB");
    expect_err(HEAD "    isolation: process\n    worker_max_frame: 257MiB\n",
               "'worker_max_frame' is out of range");
    expect_err(HEAD "    isolation: process\n    worker_max_frame: lots\n",
               "'worker_max_frame' must be a size");
    expect_err(HEAD "    worker_max_frame: 1MiB\n",
               "'worker_max_frame' applies only to a plugin with");
}

/* A reload restarts the plugin when any isolation key changes. */
static void test_equal(void)
{
    th_config *a = parse(HEAD "    isolation: process\n");
    th_config *b = parse(HEAD "    isolation: process\n");
    th_config *c = parse(HEAD "    isolation: process\n    workers: 2\n");
    th_config *d = parse(HEAD "    isolation: in-process\n");
    th_config *e = parse(HEAD "    isolation: process\n"
                              "    process_limits: {memory: 64MiB}\n");
    th_config *f = parse(HEAD "    isolation: process\n    user: nobody\n");
    th_config *g = parse(HEAD "    isolation: process\n"
                              "    content_timeout: 2s\n");
    CU_ASSERT_FATAL(a && b && c && d && e && f && g);
    CU_ASSERT_FALSE(th_plugin_cfg_equal(&a->plugins[0], &g->plugins[0]));
    th_config_free(g);
    g = parse(HEAD "    isolation: process\n    worker_max_frame: 1MiB\n");
    CU_ASSERT_FATAL(g != NULL);
    CU_ASSERT_FALSE(th_plugin_cfg_equal(&a->plugins[0], &g->plugins[0]));
    th_config_free(g);
    CU_ASSERT_TRUE(th_plugin_cfg_equal(&a->plugins[0], &b->plugins[0]));
    CU_ASSERT_FALSE(th_plugin_cfg_equal(&a->plugins[0], &c->plugins[0]));
    CU_ASSERT_FALSE(th_plugin_cfg_equal(&a->plugins[0], &d->plugins[0]));
    CU_ASSERT_FALSE(th_plugin_cfg_equal(&a->plugins[0], &e->plugins[0]));
    CU_ASSERT_FALSE(th_plugin_cfg_equal(&a->plugins[0], &f->plugins[0]));
    th_config_free(a);
    th_config_free(b);
    th_config_free(c);
    th_config_free(d);
    th_config_free(e);
    th_config_free(f);
}

/* env: and isolation_uid_range: (docs/isolation.md, "Users"). */
static void test_env_and_uids(void)
{
    th_config *c = parse(HEAD "    isolation: process\n"
                              "    user: auto\n"
                              "    isolation_uid_range: 70000-70099\n"
                              "    env: [HOME, TZ]\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const th_plugin_cfg *pc = &c->plugins[0];
    CU_ASSERT_EQUAL(pc->uid_lo, 70000);
    CU_ASSERT_EQUAL(pc->uid_hi, 70099);
    CU_ASSERT_EQUAL_FATAL(pc->n_env, 2);
    CU_ASSERT_STRING_EQUAL(pc->env[0], "HOME");
    CU_ASSERT_STRING_EQUAL(pc->env[1], "TZ");
    th_config *d = parse(HEAD "    isolation: process\n"
                              "    user: auto\n"
                              "    isolation_uid_range: 70000-70099\n"
                              "    env: [HOME]\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_FALSE(th_plugin_cfg_equal(&c->plugins[0], &d->plugins[0]));
    th_config_free(c);
    th_config_free(d);
    c = parse(HEAD "    isolation: process\n    env: HOME\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(c->plugins[0].n_env, 1);
    th_config_free(c);

    expect_err(HEAD "    isolation: process\n    env: [TOOLHOST_MCP_TOKEN]\n",
               "t.yaml:5:11: 'env' must not pass the host's own variable "
               "'TOOLHOST_MCP_TOKEN'");
    expect_err(HEAD "    isolation: process\n    env: [HOME, \"A=B\"]\n",
               "t.yaml:5:17: 'env' lists names of environment variables");
    expect_err(HEAD "    env: [HOME]\n",
               "t.yaml:4:5: 'env' applies only to a plugin with "
               "'isolation: process'");
    expect_err(HEAD "    isolation: process\n    user: auto\n"
                    "    isolation_uid_range: 5-6\n",
               "t.yaml:6:26: 'isolation_uid_range' 5-6: want 1000");
    expect_err(HEAD "    isolation: process\n    user: auto\n"
                    "    isolation_uid_range: lots\n",
               "t.yaml:6:26: 'isolation_uid_range' must be two uids");
    expect_err(HEAD "    isolation: process\n    user: nobody\n"
                    "    isolation_uid_range: 70000-70099\n",
               "t.yaml:6:5: 'isolation_uid_range' applies only with "
               "'user: auto'");
}

void th_suite_iso_config(void)
{
    CU_pSuite s = CU_add_suite("iso_config", NULL, NULL);
    CU_add_test(s, "defaults", test_defaults);
    CU_add_test(s, "values", test_values);
    CU_add_test(s, "errors", test_errors);
    CU_add_test(s, "equal", test_equal);
    CU_add_test(s, "env_and_uids", test_env_and_uids);
}
