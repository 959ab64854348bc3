/* test_config.c - the YAML config: tree and marks, every error with its
 * line:col, defaults, value forms, paths, expansion, packing, the shipped
 * configs. */
#include <CUnit/CUnit.h>
#include <limits.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/th_test.h"
#include "th/buf.h"
#include "th/config.h"
#include "front/rpc_config.h"
#include "front/nats_config.h"
#include "th/section.h"
#include "th/err.h"
#include "th/log.h"
#include "th/tool.h"
#include "toolhost/plugin.h"

/* Parses `yaml` as "t.yaml" in folder /cfg; NULL (and a printed reason)
 * on failure. */
static th_config *parse(const char *yaml)
{
    th_config *cfg = NULL;
    th_error err;
    int rc = th_config_parse("t.yaml", "/cfg", yaml, strlen(yaml), &cfg, &err);
    if (rc != 0) {
        printf("\n  unexpected error: %s\n", err.msg);
        CU_ASSERT_PTR_NULL(cfg);
        return NULL;
    }
    CU_ASSERT_PTR_NOT_NULL(cfg);
    return cfg;
}

/* Asserts that `yaml` fails with exactly `want` (TH_ECONFIG). */
#define EXPECT_ERR(yaml, want) expect_err(yaml, want, __LINE__)
static void expect_err(const char *yaml, const char *want, int line)
{
    th_config *cfg = (th_config *)1;
    th_error err;
    int rc = th_config_parse("t.yaml", "/cfg", yaml, strlen(yaml), &cfg, &err);
    CU_ASSERT_EQUAL(rc, TH_ECONFIG);
    CU_ASSERT_PTR_NULL(cfg);
    if (rc == 0)
        th_config_free(cfg);
    if (rc == 0 || strcmp(err.msg, want) != 0)
        printf("\n  line %d: want: %s\n           got:  %s\n", line, want,
               rc == 0 ? "(success)" : err.msg);
    CU_ASSERT_STRING_EQUAL(err.msg, want);
}

/* ---- tree and marks --------------------------------------------------- */

static void test_tree_marks(void)
{
    const char *y = "a: 1\n"
                    "b:\n"
                    "  - x\n"
                    "  - {k: 'v'}\n";
    th_ynode *root = NULL;
    th_error err;
    CU_ASSERT_EQUAL_FATAL(th_ynode_parse("t", y, strlen(y), &root, &err), 0);
    CU_ASSERT_EQUAL(root->kind, TH_Y_MAP);
    CU_ASSERT_EQUAL(root->n, 4);
    const th_ynode *a = th_ynode_get(root, "a");
    CU_ASSERT_EQUAL(a->line, 1);
    CU_ASSERT_EQUAL(a->col, 4);
    CU_ASSERT_TRUE(a->plain);
    const th_ynode *b = th_ynode_get(root, "b");
    CU_ASSERT_EQUAL(b->kind, TH_Y_SEQ);
    CU_ASSERT_EQUAL(b->n, 2);
    CU_ASSERT_EQUAL(b->kids[0]->line, 3);
    CU_ASSERT_EQUAL(b->kids[0]->col, 5);
    const th_ynode *m = b->kids[1];
    CU_ASSERT_EQUAL(m->kind, TH_Y_MAP);
    CU_ASSERT_EQUAL(m->line, 4);
    CU_ASSERT_EQUAL(m->col, 5);
    const th_ynode *v = th_ynode_get(m, "k");
    CU_ASSERT_STRING_EQUAL(v->str, "v");
    CU_ASSERT_FALSE(v->plain);
    CU_ASSERT_EQUAL(v->col, 9);
    const th_ynode *kk = th_ynode_get_key(m, "k");
    CU_ASSERT_EQUAL(kk->col, 6);
    CU_ASSERT_PTR_NULL(th_ynode_get(m, "nope"));
    CU_ASSERT_PTR_NULL(th_ynode_get(b, "k"));
    th_ynode_free(root);

    /* an empty document is no tree */
    CU_ASSERT_EQUAL(th_ynode_parse("t", "", 0, &root, &err), 0);
    CU_ASSERT_PTR_NULL(root);
    CU_ASSERT_EQUAL(th_ynode_parse("t", "# only a comment\n", 17, &root,
                                   &err), 0);
    CU_ASSERT_PTR_NULL(root);
}

static void test_syntax_errors(void)
{
    EXPECT_ERR("host:\n  workers: [1, 2\n",
               "t.yaml:3:1: YAML syntax error: did not find expected ',' or "
               "']' while parsing a flow sequence (line 2, column 12)");
    EXPECT_ERR("host:\n  workers: 1\n bad: 2\n",
               "t.yaml:3:2: YAML syntax error: did not find expected key "
               "while parsing a block mapping (line 1, column 1)");
    EXPECT_ERR("a: 'unterminated\n",
               "t.yaml:2:1: YAML syntax error: found unexpected end of stream "
               "while scanning a quoted scalar (line 1, column 4)");
    EXPECT_ERR("a: b: c\n",
               "t.yaml:1:5: YAML syntax error: mapping values are not allowed "
               "in this context");
    EXPECT_ERR("a: &x 1\nb: *x\n",
               "t.yaml:2:4: YAML aliases (*x) are not supported in toolhost "
               "configs");
    EXPECT_ERR("host: {}\n---\nhost: {}\n",
               "t.yaml:2:1: only one YAML document is allowed in a config");
    EXPECT_ERR("- a\n- b\n",
               "t.yaml:1:1: the config must be a map with keys such as host, "
               "plugins, toolsets; got a list");
    EXPECT_ERR("just text\n",
               "t.yaml:1:1: the config must be a map with keys such as host, "
               "plugins, toolsets; got 'just text'");
    /* a tab for indentation */
    EXPECT_ERR("host:\n\tworkers: 2\n",
               "t.yaml:2:1: tab characters are not allowed for indentation "
               "in YAML (indent with spaces)");
    /* after spaces, and found although libyaml fails lines later */
    EXPECT_ERR("plugins:\n  - name: a\n  \tpath: x\n",
               "t.yaml:3:3: tab characters are not allowed for indentation "
               "in YAML (indent with spaces)");
    /* libyaml's own words for a tab name it too: said the same way */
    EXPECT_ERR("host:\n  workers: 2\n\t\n  queue_size: [\n",
               "t.yaml:3:1: tab characters are not allowed for indentation "
               "in YAML (indent with spaces)");
    /* bad bytes: libyaml gives an offset, turned into line:col */
    EXPECT_ERR("host:\n  workers: \xff\n",
               "t.yaml:2:12: YAML syntax error: invalid leading UTF-8 octet "
               "(byte 0xff)");
    EXPECT_ERR("host:\n  listen: 'caf\xc3\xa9'\n  x: \x01\n",
               "t.yaml:3:6: YAML syntax error: control characters are not "
               "allowed (byte 0x01)");
    th_config *cfg = NULL;
    th_error err;
    CU_ASSERT_EQUAL(th_config_parse("t.yaml", "/cfg", "a: 'x\0y'\n", 9, &cfg,
                                    &err),
                    TH_ECONFIG);
    CU_ASSERT_STRING_EQUAL(err.msg, "t.yaml:1:6: YAML syntax error: control "
                                    "characters are not allowed (byte 0x00)");
    char deep[400] = "";
    for (int i = 0; i < 70; i++)
        strcat(deep, "[");
    EXPECT_ERR(deep, "t.yaml:1:65: nesting deeper than 64 levels");
}

static void test_duplicate_key(void)
{
    EXPECT_ERR("host:\n  workers: 2\n  queue_size: 9\n  workers: 3\n",
               "t.yaml:4:3: duplicate key 'workers' (first at line 2, column "
               "3)");
    /* also inside a plugin's config block, which the host does not know */
    EXPECT_ERR("plugins:\n  - name: a\n    path: a.so\n    config: {x: 1, "
               "x: 2}\n",
               "t.yaml:4:20: duplicate key 'x' (first at line 4, column 14)");
}

/* ---- defaults ------------------------------------------------------------ */

static void test_defaults(void)
{
    th_config *cfg = parse("");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    const th_host_cfg *h = &cfg->host;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    CU_ASSERT_EQUAL(h->workers, (uint32_t)(2 * (cores < 1 ? 1 : cores)));
    CU_ASSERT_EQUAL(h->async_workers, h->workers / 2 ? h->workers / 2 : 1);
    CU_ASSERT_EQUAL(h->queue_size, 1024);
    CU_ASSERT_EQUAL(h->log_level, TOOLHOST_LOG_INFO);
    CU_ASSERT_PTR_NULL(th_rpc_config(cfg)->listen);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->socket_mode, 0600);
    CU_ASSERT_PTR_NULL(th_rpc_config(cfg)->socket_group);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->max_frame, 16u << 20);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->max_inflight, 256);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->max_outbuf, 64u << 20);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->max_connections, 1024);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->max_connections_per_uid, 256);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->idle_timeout_ms, 3600000);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->frame_timeout_ms, 30000);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->max_buffered, 256u << 20);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->max_protocol_errors, 8);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->max_conn_log_lines, 20);
    CU_ASSERT_EQUAL(h->shutdown_grace_ms, 5000);
    CU_ASSERT_EQUAL(h->default_timeout_ms, 60000);
    CU_ASSERT_EQUAL(h->max_timeout_ms, 3600000);
    CU_ASSERT_EQUAL(h->session_grace_ms, 2000);
    CU_ASSERT_EQUAL(h->result_ttl_ms, 600000);
    CU_ASSERT_EQUAL(h->permission_timeout_ms, 60000);
    CU_ASSERT_FALSE(h->expose_task_tools);
    CU_ASSERT_EQUAL(h->reload, TH_RELOAD_SIGNAL);
    CU_ASSERT_EQUAL(h->reload_debounce_ms, 200);
    CU_ASSERT_EQUAL(h->busy_poll_us, 300);
    CU_ASSERT_PTR_NULL(h->state_dir);
    CU_ASSERT_PTR_NULL(h->spill_dir);
    CU_ASSERT_EQUAL(h->spill_max_bytes, 64u << 20);
    CU_ASSERT_EQUAL(h->spill_max_age_ms, 3600000);
    CU_ASSERT_EQUAL(h->lost_worker_grace_ms, 3000);
    CU_ASSERT_EQUAL(h->max_lost_workers, 0); /* = workers */
    CU_ASSERT_EQUAL(h->line, 0);

    th_limits d;
    th_limits_defaults(&d);
    CU_ASSERT_EQUAL(memcmp(&d, &cfg->limits, sizeof d), 0);
    CU_ASSERT_EQUAL(d.bytes[TOOLHOST_SEM_FILE_CONTENT], 60000);
    CU_ASSERT_EQUAL(d.bytes[TOOLHOST_SEM_FILE_VIEW], 60000);
    CU_ASSERT_EQUAL(d.bytes[TOOLHOST_SEM_KNOWLEDGE], 60000);
    CU_ASSERT_EQUAL(d.bytes[TOOLHOST_SEM_COMMAND_OUTPUT], 8000);
    CU_ASSERT_EQUAL(d.bytes[TOOLHOST_SEM_ERROR], 8000);
    CU_ASSERT_EQUAL(d.bytes[TOOLHOST_SEM_STATUS], 2000);
    CU_ASSERT_EQUAL(d.bytes[TOOLHOST_SEM_STRUCTURED], 60000);
    CU_ASSERT_EQUAL(d.bytes[TOOLHOST_SEM_BINARY], 1u << 20);
    for (int i = 0; i < TH_SEM_COUNT; i++)
        CU_ASSERT(d.bytes[i] > 0);

    CU_ASSERT_EQUAL(cfg->n_plugins, 0);
    CU_ASSERT_EQUAL(cfg->n_mocks, 0);
    CU_ASSERT_EQUAL_FATAL(cfg->n_toolsets, 1);
    const th_toolset_cfg *ts = &cfg->toolsets[0];
    CU_ASSERT_STRING_EQUAL(ts->name, "default");
    CU_ASSERT_EQUAL_FATAL(ts->n_tools, 1);
    CU_ASSERT_STRING_EQUAL(ts->tools[0], "*");
    CU_ASSERT_PTR_NOT_NULL(ts->tool_marks);
    CU_ASSERT_EQUAL(ts->timeout_ms, 0);
    CU_ASSERT_EQUAL(ts->max_concurrency, 0);
    CU_ASSERT_EQUAL(ts->on_duplicate_call, TH_DUP_ALLOW);
    CU_ASSERT_EQUAL(ts->duplicate_scope, TH_DUPSCOPE_NAME_AND_ARGS);
    CU_ASSERT_EQUAL(ts->scope, TH_SCOPE_SESSION);
    CU_ASSERT_EQUAL(ts->perm_default, TH_PERM_DENY);
    CU_ASSERT_EQUAL(ts->n_rules, 0);
    CU_ASSERT_EQUAL(ts->n_allow_users, 0);
    CU_ASSERT_FALSE(ts->run_code.enabled);
    CU_ASSERT_EQUAL(ts->run_code.timeout_ms, 10000);
    CU_ASSERT_EQUAL(ts->run_code.memory, 64u << 20);
    CU_ASSERT_EQUAL(ts->run_code.max_calls, 1000);
    CU_ASSERT_EQUAL(ts->run_code.output_limit, 64u << 10);
    for (int i = 0; i < TH_SEM_COUNT; i++)
        CU_ASSERT_EQUAL(ts->limits.bytes[i], 0);
    CU_ASSERT_STRING_EQUAL(cfg->path, "t.yaml");
    CU_ASSERT_STRING_EQUAL(cfg->dir, "/cfg");
    th_config_free(cfg);

    /* empty sections are allowed and keep the defaults */
    cfg = parse("host:\nlimits:\nplugins:\ntoolsets: []\nmocks: []\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(cfg->host.queue_size, 1024);
    CU_ASSERT_EQUAL(cfg->n_toolsets, 1);
    th_config_free(cfg);

    /* async_workers defaults to half of workers, at least 1 */
    cfg = parse("host:\n  workers: 1\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(cfg->host.async_workers, 1);
    CU_ASSERT_EQUAL(cfg->host.line, 2);
    CU_ASSERT_EQUAL(cfg->host.col, 3);
    th_config_free(cfg);
    cfg = parse("host: {workers: 7}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(cfg->host.async_workers, 3);
    th_config_free(cfg);
}

static void test_host_keys(void)
{
    th_config *cfg = parse("host:\n"
                           "  workers: 6\n"
                           "  async_workers: 2\n"
                           "  queue_size: 50\n"
                           "  log_level: debug\n"
                           "  listen: unix:/run/th.sock\n"
                           "  socket_mode: 0660\n"
                           "  socket_group: tools\n"
                           "  max_frame: 1MiB\n"
                           "  max_inflight: 8\n"
                           "  max_outbuf: 2MiB\n"
                           "  shutdown_grace: 1s\n"
                           "  default_timeout: 30s\n"
                           "  max_timeout: 2h\n"
                           "  session_grace: 250ms\n"
                           "  result_ttl: 5m\n"
                           "  permission_timeout: 15s\n"
                           "  expose_task_tools: true\n"
                           "  reload: watch\n"
                           "  reload_debounce: 50ms\n"
                           "  state_dir: state\n"
                           "  spill_dir: /var/spill\n"
                           "  spill_max_bytes: 1GiB\n"
                           "  spill_max_age: 1d\n"
                           "  lost_worker_grace: 750ms\n"
                           "  max_lost_workers: 3\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    const th_host_cfg *h = &cfg->host;
    CU_ASSERT_EQUAL(h->workers, 6);
    CU_ASSERT_EQUAL(h->async_workers, 2);
    CU_ASSERT_EQUAL(h->queue_size, 50);
    CU_ASSERT_EQUAL(h->log_level, TOOLHOST_LOG_DEBUG);
    CU_ASSERT_STRING_EQUAL(th_rpc_config(cfg)->listen, "unix:/run/th.sock");
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->socket_mode, 0660);
    CU_ASSERT_STRING_EQUAL(th_rpc_config(cfg)->socket_group, "tools");
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->max_frame, 1u << 20);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->max_inflight, 8);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->max_outbuf, 2u << 20);
    CU_ASSERT_EQUAL(h->shutdown_grace_ms, 1000);
    CU_ASSERT_EQUAL(h->default_timeout_ms, 30000);
    CU_ASSERT_EQUAL(h->max_timeout_ms, 7200000);
    CU_ASSERT_EQUAL(h->session_grace_ms, 250);
    CU_ASSERT_EQUAL(h->result_ttl_ms, 300000);
    CU_ASSERT_EQUAL(h->permission_timeout_ms, 15000);
    CU_ASSERT_TRUE(h->expose_task_tools);
    CU_ASSERT_EQUAL(h->reload, TH_RELOAD_WATCH);
    CU_ASSERT_EQUAL(h->reload_debounce_ms, 50);
    CU_ASSERT_STRING_EQUAL(h->state_dir, "/cfg/state");
    CU_ASSERT_STRING_EQUAL(h->spill_dir, "/var/spill");
    CU_ASSERT_EQUAL(h->spill_max_bytes, 1u << 30);
    CU_ASSERT_EQUAL(h->spill_max_age_ms, 86400000);
    CU_ASSERT_EQUAL(h->lost_worker_grace_ms, 750);
    CU_ASSERT_EQUAL(h->max_lost_workers, 3);
    th_config_free(cfg);

    /* socket modes are octal in every spelling; a relative socket path is
     * resolved like any other path */
    cfg = parse("host: {socket_mode: 660, listen: 'unix:run/th.sock'}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->socket_mode, 0660);
    CU_ASSERT_STRING_EQUAL(th_rpc_config(cfg)->listen, "unix:/cfg/run/th.sock");
    th_config_free(cfg);
    cfg = parse("host: {socket_mode: 0o600, log_level: error}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->socket_mode, 0600);
    CU_ASSERT_EQUAL(cfg->host.log_level, TOOLHOST_LOG_ERROR);
    th_config_free(cfg);
}

/* nats.results_replicas: absent is 0 (the host picks min(3, the
 * JetStream cluster's size)); 1..5 kept; outside refused. */
static void test_nats_results_replicas(void)
{
    th_config *cfg = parse("nats: {results_bucket: rb}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(th_nats_config(cfg)->results_replicas, 0);
    th_config_free(cfg);
    cfg = parse("nats: {results_replicas: 3}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(th_nats_config(cfg)->results_replicas, 3);
    th_config_free(cfg);
    EXPECT_ERR("nats: {results_replicas: 0}\n", "t.yaml:1:26: 'results_replicas' is out of range: 0 is not "
               "between 1 and 5");
    EXPECT_ERR("nats: {results_replicas: 6}\n", "t.yaml:1:26: 'results_replicas' is out of range: 6 is not "
               "between 1 and 5");
    EXPECT_ERR("nats: {results_replicas: three}\n",
               "t.yaml:1:26: 'results_replicas' must be a whole number, got "
               "'three'");
}

/* nats.reply_batching: on unless set false; a boolean only. */
static void test_nats_reply_batching(void)
{
    th_config *cfg = parse("nats: {results_bucket: rb}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_FALSE(th_nats_config(cfg)->no_reply_batching);
    th_config_free(cfg);
    cfg = parse("nats: {reply_batching: false}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_TRUE(th_nats_config(cfg)->no_reply_batching);
    th_config_free(cfg);
    cfg = parse("nats: {reply_batching: true}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_FALSE(th_nats_config(cfg)->no_reply_batching);
    th_config_free(cfg);
    EXPECT_ERR("nats: {reply_batching: sometimes}\n",
               "t.yaml:1:24: 'reply_batching' must be true or false, got "
               "'sometimes'");
}

/* A reload that changes what the NATS front started with says that it
 * waits for the next restart (the front keeps its start's config), like
 * the RPC socket's and the MCP HTTP front's; nothing when neither config
 * serves on NATS, or when the section is the same. */
static void test_nats_reload_note(void)
{
    static const char base[] =
        "host:\n  listen: \"nats://127.0.0.1:4222\"\n"
        "nats: {toolsets: [default], prefix: %s}\n";
    char y1[256], y2[256];
    snprintf(y1, sizeof y1, base, "p1");
    snprintf(y2, sizeof y2, base, "p2");
    th_config *a = parse(y1), *a2 = parse(y1), *b = parse(y2);
    th_config *off1 = parse("nats: {prefix: p1}\n");
    th_config *off2 = parse("nats: {prefix: p2}\n");
    CU_ASSERT_FATAL(a && a2 && b && off1 && off2);
    const th_section *s = &th_nats_section;
    CU_ASSERT_PTR_NOT_NULL_FATAL(s->reload_note);
    const char *note = s->reload_note(th_nats_config(a), th_nats_config(b));
    CU_ASSERT_PTR_NOT_NULL(note);
    CU_ASSERT(note && strstr(note, "nats:") && strstr(note, "next restart"));
    CU_ASSERT_PTR_NOT_NULL(
        s->reload_note(th_nats_config(off1), th_nats_config(a)));
    CU_ASSERT_PTR_NULL(s->reload_note(th_nats_config(a), th_nats_config(a2)));
    CU_ASSERT_PTR_NULL(
        s->reload_note(th_nats_config(off1), th_nats_config(off2)));
    th_config_free(a);
    th_config_free(a2);
    th_config_free(b);
    th_config_free(off1);
    th_config_free(off2);
}

/* The RPC socket's keys under host: are read once, when the server
 * starts: a reload that changes host.socket_mode, socket_group or a limit
 * says so (docs/reload.md), not only one that changes host.listen. */
static void test_rpc_reload_note(void)
{
    th_config *a = parse("host: {listen: \"unix:/s\"}\n");
    th_config *a2 = parse("host: {listen: \"unix:/s\"}\n");
    th_config *mode = parse("host: {listen: \"unix:/s\", socket_mode: "
                            "\"0660\"}\n");
    th_config *grp = parse("host: {listen: \"unix:/s\", socket_group: "
                           "wheel}\n");
    th_config *frame = parse("host: {listen: \"unix:/s\", max_frame: "
                             "1MiB}\n");
    th_config *moved = parse("host: {listen: \"unix:/t\"}\n");
    CU_ASSERT_FATAL(a && a2 && mode && grp && frame && moved);
    const th_section *s = &th_rpc_section;
    CU_ASSERT_PTR_NOT_NULL_FATAL(s->reload_note);
    CU_ASSERT_PTR_NULL(s->reload_note(th_rpc_config(a), th_rpc_config(a2)));
    const char *n;
    n = s->reload_note(th_rpc_config(a), th_rpc_config(mode));
    CU_ASSERT(n && strstr(n, "socket_*"));
    n = s->reload_note(th_rpc_config(a), th_rpc_config(grp));
    CU_ASSERT(n && strstr(n, "socket_*"));
    n = s->reload_note(th_rpc_config(a), th_rpc_config(frame));
    CU_ASSERT(n && strstr(n, "max_frame"));
    n = s->reload_note(th_rpc_config(a), th_rpc_config(moved));
    CU_ASSERT(n && strstr(n, "host.listen"));
    th_config_free(a);
    th_config_free(a2);
    th_config_free(mode);
    th_config_free(grp);
    th_config_free(frame);
    th_config_free(moved);
}

/* ---- errors ------------------------------------------------------------ */

static void test_unknown_keys(void)
{
    EXPECT_ERR("host:\n  wokers: 4\n",
               "t.yaml:2:3: unknown key 'wokers' in host (did you mean "
               "'workers'?)");
    EXPECT_ERR("host:\n  queue-size: 4\n",
               "t.yaml:2:3: unknown key 'queue-size' in host (did you mean "
               "'queue_size'?)");
    EXPECT_ERR("tolsets: []\n",
               "t.yaml:1:1: unknown key 'tolsets' in the config (did you mean "
               "'toolsets'?)");
    EXPECT_ERR("host: {}\nbananas: 3\n",
               "t.yaml:2:1: unknown key 'bananas' in the config (known keys: "
               "host, limits, plugins, tags, defer_tools, toolsets, mocks, "
               "admin, rate_limits, mcp, nats)");
    EXPECT_ERR("plugins:\n  - name: a\n    path: a.so\n    optinal: true\n",
               "t.yaml:4:5: unknown key 'optinal' in plugin (did you mean "
               "'optional'?)");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    permissions:\n"
               "      rules:\n        - mtach: 'x*'\n          action: allow\n",
               "t.yaml:6:11: unknown key 'mtach' in rule (did you mean "
               "'match'?)");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    run_code: "
               "{enable: true}\n",
               "t.yaml:4:16: unknown key 'enable' in run_code (did you mean "
               "'enabled'?)");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    tool_overrides:\n"
               "      echo: {timeuot: 1s}\n",
               "t.yaml:5:14: unknown key 'timeuot' in the override of 'echo' "
               "(did you mean 'timeout'?)");
    EXPECT_ERR("limits:\n  file_contents: 1KiB\n",
               "t.yaml:2:3: unknown semantic type 'file_contents' in 'limits' "
               "(did you mean 'file_content'?)");
    EXPECT_ERR("limits:\n  pictures: 1KiB\n",
               "t.yaml:2:3: unknown semantic type 'pictures' in 'limits' "
               "(known: text, status, error, file_content, file_view, "
               "command_output, search_results, knowledge, structured, log, "
               "diff, binary)");
    EXPECT_ERR("mocks:\n  - tool: echo\n    sdout: hi\n",
               "t.yaml:3:5: unknown key 'sdout' in mock (did you mean "
               "'stdout'?)");
    /* an unknown key is reported before other errors in its map */
    EXPECT_ERR("host:\n  workers: 0\n  zzz: 1\n",
               "t.yaml:3:3: unknown key 'zzz' in host (known keys: workers, "
               "async_workers, queue_size, log_level, listen, shutdown_grace, "
               "default_timeout, max_timeout, session_grace, result_ttl, "
               "permission_timeout, max_client_asks, expose_task_tools, "
               "reload, reload_debounce, reload_drain_timeout, "
               "plugin_reload_min_interval, state_dir, "
               "spill_dir, spill_max_bytes, spill_max_age, lost_worker_grace, "
               "max_lost_workers, task_keep, log_format, allow_unknown_users, "
               "short_call_max, short_call_stuck, busy_poll_us, audit, "
               "socket_mode, "
               "socket_group, max_frame, max_inflight, max_outbuf, "
               "max_connections, max_connections_per_uid, idle_timeout, "
               "frame_timeout, max_buffered, max_protocol_errors, "
               "max_conn_log_lines, mcp_max_message)");
}

static void test_wrong_types(void)
{
    EXPECT_ERR("host: [1]\n",
               "t.yaml:1:7: host must be a map of keys, got a list");
    EXPECT_ERR("host:\n  workers: abc\n",
               "t.yaml:2:12: 'workers' must be a whole number, got 'abc'");
    EXPECT_ERR("host:\n  workers: -2\n",
               "t.yaml:2:12: 'workers' must be a whole number, got '-2'");
    EXPECT_ERR("host:\n  workers: [2]\n",
               "t.yaml:2:12: 'workers' must be a whole number, got a list");
    EXPECT_ERR("host:\n  expose_task_tools: yes\n",
               "t.yaml:2:22: 'expose_task_tools' must be true or false, got "
               "'yes'");
    EXPECT_ERR("host:\n  expose_task_tools: \"true\"\n",
               "t.yaml:2:22: 'expose_task_tools' must be true or false, got a "
               "quoted string");
    EXPECT_ERR("host:\n  listen: {unix: x}\n",
               "t.yaml:2:11: 'listen' must be an address or a list of addresses, "
               "got a map");
    EXPECT_ERR("host:\n  listen: tcp:127.0.0.1:80\n",
               "t.yaml:2:11: 'listen' must be unix:PATH (a Unix socket), "
               "http://HOST:PORT/PATH (MCP) or nats://HOST:PORT (NATS), got "
               "'tcp:127.0.0.1:80'");
    EXPECT_ERR("host:\n  socket_mode: 0800\n",
               "t.yaml:2:16: 'socket_mode' must be an octal file mode such as "
               "0600 (at most 0777), got '0800'");
    EXPECT_ERR("host:\n  max_frame: lots\n",
               "t.yaml:2:14: 'max_frame' must be a size such as 512, 64KiB or "
               "1.5MiB, got 'lots'");
    EXPECT_ERR("host:\n  default_timeout: 30\n",
               "t.yaml:2:20: 'default_timeout' must be a duration such as "
               "500ms, 30s, 2m or 1h, got '30'");
    EXPECT_ERR("plugins: {name: a}\n",
               "t.yaml:1:10: 'plugins' must be a list of plugins, got a map");
    EXPECT_ERR("plugins:\n  - echo.so\n",
               "t.yaml:2:5: each item of 'plugins' must be a map (a plugin), "
               "got 'echo.so'");
    EXPECT_ERR("plugins:\n  - name: a\n    path: a.so\n    config: [1]\n",
               "t.yaml:4:13: 'config' must be a map of the plugin's keys, got "
               "a list");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: {x: 1}\n",
               "t.yaml:3:12: 'tools' must be a list of names, got a map");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: [[x]]\n",
               "t.yaml:3:13: each item of 'tools' must be a name, got a list");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: []\n",
               "t.yaml:3:12: 'tools' must list at least one tool name (or "
               "\"*\" for every tool)");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['bad name']\n",
               "t.yaml:3:13: invalid tool name 'bad name' (tool names are 1 "
               "to 64 letters, digits, '_' or '-'; \"*\" means every tool)");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    limits: 5\n",
               "t.yaml:4:13: 'limits' must be a map of semantic type to size, "
               "got '5'");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    tool_overrides: "
               "[x]\n",
               "t.yaml:4:21: 'tool_overrides' must be a map of tool name to "
               "settings, got a list");
    EXPECT_ERR("mocks:\n  - tool: echo\n    meta: [1, 2]\n",
               "t.yaml:3:11: 'meta' must be a map, got a list");
    EXPECT_ERR("mocks:\n  - tool: echo\n    progress:\n      - progress: "
               "half\n",
               "t.yaml:4:19: 'progress' must be a number from 0 to 1, got "
               "'half'");
    EXPECT_ERR("plugins:\n  - name: 'a b'\n    path: x.so\n",
               "t.yaml:2:11: invalid plugin name 'a b' (use 1 to 64 letters, "
               "digits, '_' or '-')");
}

static void test_missing_required(void)
{
    EXPECT_ERR("plugins:\n  - name: echo\n",
               "t.yaml:2:5: missing required key 'path' in plugin");
    EXPECT_ERR("plugins:\n  - path: echo.so\n    optional: true\n",
               "t.yaml:2:5: missing required key 'name' in plugin");
    EXPECT_ERR("plugins:\n  - name: echo\n    path:\n",
               "t.yaml:3:10: 'path' must not be empty");
    EXPECT_ERR("toolsets:\n  - name: a\n",
               "t.yaml:2:5: missing required key 'tools' in toolset");
    EXPECT_ERR("toolsets:\n  - tools: [echo]\n",
               "t.yaml:2:5: missing required key 'name' in toolset");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    permissions:\n"
               "      rules:\n        - match: 'x*'\n",
               "t.yaml:6:11: missing required key 'action' in rule");
    EXPECT_ERR("mocks:\n  - stdout: hi\n",
               "t.yaml:2:5: missing required key 'tool' in mock");
}

static void test_out_of_range(void)
{
    EXPECT_ERR("host:\n  workers: 0\n",
               "t.yaml:2:12: 'workers' is out of range: 0 is not between 1 and "
               "1024");
    EXPECT_ERR("host:\n  workers: 5000\n",
               "t.yaml:2:12: 'workers' is out of range: 5000 is not between 1 "
               "and 1024");
    EXPECT_ERR("host:\n  workers: 99999999999999999999999\n",
               "t.yaml:2:12: 'workers' must be a whole number, got "
               "'99999999999999999999999'");
    EXPECT_ERR("host:\n  max_frame: 100\n",
               "t.yaml:2:14: 'max_frame' is out of range: 100 is not between "
               "1KiB and 1GiB");
    EXPECT_ERR("host:\n  busy_poll_us: 20000\n",
               "t.yaml:2:17: 'busy_poll_us' is out of range: 20000 is not "
               "between 0 and 10000");
    EXPECT_ERR("host:\n  reload_debounce: 2m\n",
               "t.yaml:2:20: 'reload_debounce' is out of range: 2m is not "
               "between 0ms and 1m");
    EXPECT_ERR("host:\n  workers: 4\n  async_workers: 5\n",
               "t.yaml:3:18: 'async_workers' (5) must not exceed 'workers' "
               "(4)");
    EXPECT_ERR("host:\n  default_timeout: 2h\n",
               "t.yaml:2:20: 'default_timeout' (2h) must not exceed "
               "'max_timeout' (1h)");
    EXPECT_ERR("host: {max_timeout: 1h}\ntoolsets:\n  - name: a\n    tools: "
               "['*']\n    timeout: 90m\n",
               "t.yaml:5:14: 'timeout' (90m) exceeds host.max_timeout (1h)");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    tool_overrides:\n"
               "      echo: {timeout: 2h}\n",
               "t.yaml:5:23: 'timeout' (2h) exceeds host.max_timeout (1h)");
    EXPECT_ERR("limits:\n  text: 0\n",
               "t.yaml:2:9: 'text' is out of range: 0 is not between 1 and "
               "1024GiB");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    run_code: "
               "{memory: 10KiB}\n",
               "t.yaml:4:24: 'memory' is out of range: 10KiB is not between "
               "1MiB and 64GiB");
    EXPECT_ERR("mocks:\n  - tool: echo\n    progress:\n      - progress: 1.5\n",
               "t.yaml:4:19: 'progress' must be a number from 0 to 1, got "
               "'1.5'");
}

static void test_invalid_enums(void)
{
    EXPECT_ERR("host:\n  reload: sometimes\n",
               "t.yaml:2:11: invalid value 'sometimes' for 'reload' (allowed: "
               "signal, watch, off)");
    EXPECT_ERR("host:\n  log_level: verbose\n",
               "t.yaml:2:14: invalid value 'verbose' for 'log_level' "
               "(allowed: error, warn, info, debug)");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    "
               "on_duplicate_call: queue\n",
               "t.yaml:4:24: invalid value 'queue' for 'on_duplicate_call' "
               "(allowed: allow, reject, replace, confirm)");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    "
               "duplicate_scope: args\n",
               "t.yaml:4:22: invalid value 'args' for 'duplicate_scope' "
               "(allowed: name_and_args, name)");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    scope: global\n",
               "t.yaml:4:12: invalid value 'global' for 'scope' (allowed: "
               "session, toolset)");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    permissions: "
               "{default: maybe}\n",
               "t.yaml:4:28: invalid value 'maybe' for 'default' (allowed: "
               "deny, allow, ask)");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    permissions:\n"
               "      rules: [{flag: [read_only, dangerous], action: allow}]\n",
               "t.yaml:5:34: invalid value 'dangerous' for 'flag' (allowed: "
               "async, read_only, destructive, idempotent, open_world, serial, "
               "needs_permission)");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    tool_overrides:\n"
               "      echo: {on_duplicate_call: nope}\n",
               "t.yaml:5:33: invalid value 'nope' for 'on_duplicate_call' "
               "(allowed: allow, reject, replace, confirm)");
}

static void test_duplicate_names(void)
{
    EXPECT_ERR("plugins:\n  - name: echo\n    path: a.so\n  - name: echo\n"
               "    path: b.so\n",
               "t.yaml:4:11: duplicate plugin name 'echo' (first at line 2, "
               "column 5)");
    EXPECT_ERR("toolsets:\n  - {name: a, tools: ['*']}\n  - {name: b, tools: "
               "[x]}\n  - {name: a, tools: [y]}\n",
               "t.yaml:4:12: duplicate toolset name 'a' (first at line 2, "
               "column 5)");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools:\n      - echo\n      - fs\n"
               "      - echo\n",
               "t.yaml:6:9: tool 'echo' is listed twice (first at line 4, "
               "column 9)");
    EXPECT_ERR("mocks:\n  - tool: echo\n  - tool: fs_read\n  - tool: echo\n",
               "t.yaml:4:11: duplicate mock of tool 'echo' (first at line 2, "
               "column 11)");
}

static void test_override_not_in_toolset(void)
{
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: [echo]\n    tool_overrides:\n"
               "      fs_read: {timeout: 1s}\n",
               "t.yaml:5:7: 'tool_overrides' names 'fs_read', which is not in "
               "the tools of toolset 'a'");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n    permissions:\n"
               "      rules: [{flag: read_only, flags: [serial], action: "
               "allow}]\n",
               "t.yaml:5:33: give either 'flag' or 'flags', not both");
}

/* ---- toolsets, permissions, mocks in full ------------------------------ */

static void test_toolsets(void)
{
    th_config *cfg = parse(
        "toolsets:\n"
        "  - name: main\n"
        "    tools: [echo, fs_read, fs_list]\n"
        "    timeout: 90s\n"
        "    max_concurrency: 3\n"
        "    on_duplicate_call: confirm\n"
        "    duplicate_scope: name\n"
        "    scope: toolset\n"
        "    allow_users: [alice, 1000]\n"
        "    allow_groups: wheel\n"
        "    permissions:\n"
        "      default: ask\n"
        "      rules:\n"
        "        - match: 'fs_*'\n"
        "          flag: read_only\n"
        "          action: allow\n"
        "        - flags: [destructive, needs_permission]\n"
        "          action: deny\n"
        "        - action: ask\n"
        "    limits: {file_content: 1KiB, binary: 1.5MiB}\n"
        "    tool_overrides:\n"
        "      fs_read:\n"
        "        timeout: 10s\n"
        "        max_concurrency: 2\n"
        "        on_duplicate_call: reject\n"
        "        duplicate_scope: name_and_args\n"
        "        limits: {file_content: 100}\n"
        "      echo: {}\n"
        "    run_code: {enabled: true, timeout: 2s, memory: 8MiB, max_calls: "
        "5, output_limit: 1KiB}\n"
        "  - name: second\n"
        "    tools: '*'\n"
        "host:\n" /* alice and wheel need not exist here */
        "  allow_unknown_users: true\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL_FATAL(cfg->n_toolsets, 2);
    const th_toolset_cfg *ts = &cfg->toolsets[0];
    CU_ASSERT_STRING_EQUAL(ts->name, "main");
    CU_ASSERT_EQUAL(ts->line, 2);
    CU_ASSERT_EQUAL(ts->col, 5);
    CU_ASSERT_EQUAL_FATAL(ts->n_tools, 3);
    CU_ASSERT_STRING_EQUAL(ts->tools[1], "fs_read");
    CU_ASSERT_EQUAL(ts->tool_marks[1].line, 3);
    CU_ASSERT_EQUAL(ts->tool_marks[1].col, 19);
    CU_ASSERT_EQUAL(ts->timeout_ms, 90000);
    CU_ASSERT_EQUAL(ts->max_concurrency, 3);
    CU_ASSERT_EQUAL(ts->on_duplicate_call, TH_DUP_CONFIRM);
    CU_ASSERT_EQUAL(ts->duplicate_scope, TH_DUPSCOPE_NAME);
    CU_ASSERT_EQUAL(ts->scope, TH_SCOPE_TOOLSET);
    CU_ASSERT_EQUAL_FATAL(ts->n_allow_users, 2);
    CU_ASSERT_STRING_EQUAL(ts->allow_users[0], "alice");
    CU_ASSERT_STRING_EQUAL(ts->allow_users[1], "1000");
    CU_ASSERT_EQUAL_FATAL(ts->n_allow_groups, 1);
    CU_ASSERT_STRING_EQUAL(ts->allow_groups[0], "wheel");
    CU_ASSERT_EQUAL(ts->perm_default, TH_PERM_ASK);
    CU_ASSERT_EQUAL_FATAL(ts->n_rules, 3);
    CU_ASSERT_STRING_EQUAL(ts->rules[0].match, "fs_*");
    CU_ASSERT_EQUAL(ts->rules[0].flags, TOOLHOST_TOOL_READ_ONLY);
    CU_ASSERT_EQUAL(ts->rules[0].action, TH_PERM_ALLOW);
    CU_ASSERT_EQUAL(ts->rules[0].line, 14);
    CU_ASSERT_EQUAL(ts->rules[0].col, 11);
    CU_ASSERT_PTR_NULL(ts->rules[1].match);
    CU_ASSERT_EQUAL(ts->rules[1].flags,
                    TOOLHOST_TOOL_DESTRUCTIVE | TH_PERM_FLAG_NEEDS);
    CU_ASSERT_EQUAL(ts->rules[1].action, TH_PERM_DENY);
    CU_ASSERT_EQUAL(ts->rules[2].flags, 0);
    CU_ASSERT_EQUAL(ts->rules[2].action, TH_PERM_ASK);
    CU_ASSERT_EQUAL(ts->limits.bytes[TOOLHOST_SEM_FILE_CONTENT], 1024);
    CU_ASSERT_EQUAL(ts->limits.bytes[TOOLHOST_SEM_BINARY], 1572864);
    CU_ASSERT_EQUAL(ts->limits.bytes[TOOLHOST_SEM_TEXT], 0);
    CU_ASSERT_EQUAL_FATAL(ts->n_overrides, 2);
    const th_tool_override *o = &ts->overrides[0];
    CU_ASSERT_STRING_EQUAL(o->tool, "fs_read");
    CU_ASSERT_EQUAL(o->line, 22);
    CU_ASSERT_EQUAL(o->col, 7);
    CU_ASSERT_EQUAL(o->timeout_ms, 10000);
    CU_ASSERT_EQUAL(o->max_concurrency, 2);
    CU_ASSERT_EQUAL(o->on_duplicate_call, TH_DUP_REJECT);
    CU_ASSERT_EQUAL(o->duplicate_scope, TH_DUPSCOPE_NAME_AND_ARGS);
    CU_ASSERT_EQUAL(o->limits.bytes[TOOLHOST_SEM_FILE_CONTENT], 100);
    o = &ts->overrides[1];
    CU_ASSERT_STRING_EQUAL(o->tool, "echo");
    CU_ASSERT_EQUAL(o->timeout_ms, 0);
    CU_ASSERT_EQUAL(o->max_concurrency, 0);
    CU_ASSERT_EQUAL(o->on_duplicate_call, -1);
    CU_ASSERT_EQUAL(o->duplicate_scope, -1);
    CU_ASSERT_TRUE(ts->run_code.enabled);
    CU_ASSERT_EQUAL(ts->run_code.timeout_ms, 2000);
    CU_ASSERT_EQUAL(ts->run_code.memory, 8u << 20);
    CU_ASSERT_EQUAL(ts->run_code.max_calls, 5);
    CU_ASSERT_EQUAL(ts->run_code.output_limit, 1024);
    ts = &cfg->toolsets[1];
    CU_ASSERT_STRING_EQUAL(ts->name, "second");
    CU_ASSERT_EQUAL_FATAL(ts->n_tools, 1);
    CU_ASSERT_STRING_EQUAL(ts->tools[0], "*");
    CU_ASSERT_EQUAL(ts->tool_marks[0].line, 31);
    CU_ASSERT_EQUAL(ts->tool_marks[0].col, 12);
    th_config_free(cfg);
}

static void test_top_limits(void)
{
    th_config *cfg = parse("limits:\n  command_output: 16KiB\n  status: 500\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(cfg->limits.bytes[TOOLHOST_SEM_COMMAND_OUTPUT], 16384);
    CU_ASSERT_EQUAL(cfg->limits.bytes[TOOLHOST_SEM_STATUS], 500);
    CU_ASSERT_EQUAL(cfg->limits.bytes[TOOLHOST_SEM_FILE_CONTENT], 60000);
    th_config_free(cfg);
}

static void test_mocks(void)
{
    th_config *cfg = parse("mocks:\n"
                           "  - tool: echo\n"
                           "    stdout: hi\n"
                           "    delay: 20ms\n"
                           "    meta: {n: 3, s: '3', ok: true, list: [1, x]}\n"
                           "    progress:\n"
                           "      - {message: half, progress: 0.5, delay: 5ms}\n"
                           "      - message: '?'\n"
                           "  - tool: fs_read\n"
                           "    ok: false\n"
                           "    stderr: no such file\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL_FATAL(cfg->n_mocks, 2);
    const th_mock_cfg *m = &cfg->mocks[0];
    CU_ASSERT_STRING_EQUAL(m->tool, "echo");
    CU_ASSERT_EQUAL(m->line, 2);
    CU_ASSERT_EQUAL(m->col, 11);
    CU_ASSERT_TRUE(m->ok);
    CU_ASSERT_STRING_EQUAL(m->stdout_text, "hi");
    CU_ASSERT_PTR_NULL(m->stderr_text);
    CU_ASSERT_EQUAL(m->delay_ms, 20);
    CU_ASSERT_EQUAL_FATAL(m->n_progress, 2);
    CU_ASSERT_STRING_EQUAL(m->progress[0].message, "half");
    CU_ASSERT_DOUBLE_EQUAL(m->progress[0].fraction, 0.5, 1e-9);
    CU_ASSERT_EQUAL(m->progress[0].delay_ms, 5);
    CU_ASSERT_STRING_EQUAL(m->progress[1].message, "?");
    CU_ASSERT(m->progress[1].fraction < 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m->meta);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CU_ASSERT_EQUAL_FATAL(msgpack_unpack_next(&u, (const char *)m->meta,
                                              m->meta_len, NULL),
                          MSGPACK_UNPACK_SUCCESS);
    msgpack_object o = u.data;
    CU_ASSERT_EQUAL_FATAL(o.type, MSGPACK_OBJECT_MAP);
    CU_ASSERT_EQUAL_FATAL(o.via.map.size, 4);
    CU_ASSERT_EQUAL(o.via.map.ptr[0].val.type,
                    MSGPACK_OBJECT_POSITIVE_INTEGER);
    CU_ASSERT_EQUAL(o.via.map.ptr[1].val.type, MSGPACK_OBJECT_STR);
    CU_ASSERT_EQUAL(o.via.map.ptr[2].val.type, MSGPACK_OBJECT_BOOLEAN);
    CU_ASSERT_EQUAL(o.via.map.ptr[3].val.type, MSGPACK_OBJECT_ARRAY);
    msgpack_unpacked_destroy(&u);
    m = &cfg->mocks[1];
    CU_ASSERT_FALSE(m->ok);
    CU_ASSERT_STRING_EQUAL(m->stderr_text, "no such file");
    CU_ASSERT_PTR_NULL(m->meta);
    th_config_free(cfg);
}

/* ---- value forms ------------------------------------------------------- */

static void test_sizes(void)
{
    static const struct {
        const char *s;
        uint64_t v;
    } good[] = {{"0", 0},
                {"512", 512},
                {"512B", 512},
                {"64KiB", 65536},
                {"64 KiB", 65536},
                {"1MiB", 1048576},
                {"1.5MiB", 1572864},
                {"0.5KiB", 512},
                {"2GiB", 2147483648ull},
                {"1TiB", 1099511627776ull},
                {"10kB", 10000},
                {"10KB", 10000},
                {"3MB", 3000000},
                {"1GB", 1000000000},
                {"18446744073709551615", UINT64_MAX}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 12345;
        int rc = th_parse_size(good[i].s, &v);
        if (rc != 0 || v != good[i].v)
            printf("\n  size '%s': rc %d, %llu\n", good[i].s, rc,
                   (unsigned long long)v);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_EQUAL(v, good[i].v);
    }
    static const char *const bad[] = {
        "", "KiB", "-1", "1.5", "1.5B", "12XB", "1 ", "1  KiB", "1kib",
        "1K", "1.MiB", ".MiB", "1e3", "0x10", "18446744073709551616",
        "16777216TiB", "1MiB ", " 1MiB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v;
        int rc = th_parse_size(bad[i], &v);
        if (rc != TH_EINVAL)
            printf("\n  size '%s' accepted\n", bad[i]);
        CU_ASSERT_EQUAL(rc, TH_EINVAL);
    }
    CU_ASSERT_EQUAL(th_parse_size(NULL, NULL), TH_EINVAL);
}

static void test_durations(void)
{
    static const struct {
        const char *s;
        uint64_t v;
    } good[] = {{"0", 0},         {"500ms", 500},     {"30s", 30000},
                {"2m", 120000},   {"1h", 3600000},    {"1d", 86400000},
                {"1.5s", 1500},   {"0.25m", 15000},   {"1h30m", 5400000},
                {"1m30s", 90000}, {"2s500ms", 2500}, {"0ms", 0}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 12345;
        int rc = th_parse_duration_ms(good[i].s, &v);
        if (rc != 0 || v != good[i].v)
            printf("\n  duration '%s': rc %d, %llu\n", good[i].s, rc,
                   (unsigned long long)v);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_EQUAL(v, good[i].v);
    }
    static const char *const bad[] = {"",     "30",   "s",     "-1s",
                                      "1.s",  "5 s",  "5sec",  "1h 30m",
                                      "ms",   "1x",   "3w",    "1hh",
                                      "99999999999999999999d", "1e3ms"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v;
        int rc = th_parse_duration_ms(bad[i], &v);
        if (rc != TH_EINVAL)
            printf("\n  duration '%s' accepted\n", bad[i]);
        CU_ASSERT_EQUAL(rc, TH_EINVAL);
    }
}

static void test_sem_names(void)
{
    static const char *const names[] = {
        "text", "status", "error", "file_content", "file_view",
        "command_output", "search_results", "knowledge", "structured",
        "log", "diff", "binary"};
    for (uint32_t i = 1; i <= 12; i++) {
        CU_ASSERT_STRING_EQUAL(th_sem_name(i), names[i - 1]);
        CU_ASSERT_EQUAL(th_sem_from_name(names[i - 1]), i);
    }
    CU_ASSERT_EQUAL(th_sem_from_name(TOOLHOST_SEM_DIFF == 11 ? "diff" : ""),
                    TOOLHOST_SEM_DIFF);
    CU_ASSERT_EQUAL(th_sem_from_name("File_Content"), 0);
    CU_ASSERT_EQUAL(th_sem_from_name(NULL), 0);
    CU_ASSERT_STRING_EQUAL(th_sem_name(0), "unknown");
    CU_ASSERT_STRING_EQUAL(th_sem_name(13), "unknown");
}

/* ---- paths and expansion ----------------------------------------------- */

static void test_relative_paths(void)
{
    th_config *cfg = parse("plugins:\n"
                           "  - {name: a, path: plugins/a.so}\n"
                           "  - {name: b, path: ./b.so}\n"
                           "  - {name: c, path: /opt/c.so}\n"
                           "  - {name: d, path: ../build/plugins/d.so}\n"
                           "  - {name: e, path: '${CONFIG_DIR}/e.so', "
                           "optional: true, allow_insecure: true}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL_FATAL(cfg->n_plugins, 5);
    CU_ASSERT_STRING_EQUAL(cfg->plugins[0].path, "/cfg/plugins/a.so");
    CU_ASSERT_STRING_EQUAL(cfg->plugins[1].path, "/cfg/b.so");
    CU_ASSERT_STRING_EQUAL(cfg->plugins[2].path, "/opt/c.so");
    CU_ASSERT_STRING_EQUAL(cfg->plugins[3].path,
                           "/cfg/../build/plugins/d.so");
    CU_ASSERT_STRING_EQUAL(cfg->plugins[4].path, "/cfg/e.so");
    CU_ASSERT_FALSE(cfg->plugins[0].optional);
    CU_ASSERT_FALSE(cfg->plugins[0].allow_insecure);
    CU_ASSERT_TRUE(cfg->plugins[4].optional);
    CU_ASSERT_TRUE(cfg->plugins[4].allow_insecure);
    CU_ASSERT_PTR_NULL(cfg->plugins[0].config);
    CU_ASSERT_EQUAL(cfg->plugins[1].line, 3);
    CU_ASSERT_EQUAL(cfg->plugins[1].col, 5);
    th_config_free(cfg);

    /* th_config_load: the folder of the file, absolute and canonical,
     * even when the file is named by a relative path */
    char *tmp = th_test_tmpdir();
    char sub[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/conf", tmp);
    CU_ASSERT_EQUAL_FATAL(mkdir(sub, 0700), 0);
    char *file = th_test_write_file(sub, "c.yaml",
                                    "plugins:\n  - name: x\n    path: x.so\n"
                                    "    config: {dir: '${CONFIG_DIR}'}\n",
                                    (size_t)-1);
    char cwd[PATH_MAX], real[PATH_MAX], want[PATH_MAX + 16];
    CU_ASSERT_PTR_NOT_NULL_FATAL(getcwd(cwd, sizeof cwd));
    CU_ASSERT_EQUAL_FATAL(chdir(tmp), 0);
    th_error err;
    cfg = NULL;
    int rc = th_config_load("conf/c.yaml", &cfg, &err);
    CU_ASSERT_EQUAL(chdir(cwd), 0);
    if (rc != 0)
        printf("\n  %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(realpath(sub, real));
    CU_ASSERT_STRING_EQUAL(cfg->dir, real);
    CU_ASSERT_STRING_EQUAL(cfg->path, "conf/c.yaml");
    snprintf(want, sizeof want, "%s/x.so", real);
    CU_ASSERT_STRING_EQUAL(cfg->plugins[0].path, want);
    CU_ASSERT_STRING_EQUAL(th_ynode_get(cfg->plugins[0].config, "dir")->str,
                           real);
    th_config_free(cfg);

    /* a missing file is an I/O error naming it */
    rc = th_config_load("/nonexistent/toolhost.yaml", &cfg, &err);
    CU_ASSERT_EQUAL(rc, TH_EIO);
    CU_ASSERT_PTR_NULL(cfg);
    CU_ASSERT_STRING_EQUAL(err.msg, "/nonexistent/toolhost.yaml: cannot "
                                    "open: No such file or directory");
    /* errors from a loaded file name it as given */
    char *bad = th_test_write_file(sub, "bad.yaml", "host:\n  wrkers: 2\n",
                                   (size_t)-1);
    rc = th_config_load(bad, &cfg, &err);
    CU_ASSERT_EQUAL(rc, TH_ECONFIG);
    snprintf(want, sizeof want, "%s:2:3: unknown key", bad);
    CU_ASSERT_EQUAL(strncmp(err.msg, want, strlen(want)), 0);
    free(bad);
    free(file);
    th_test_rmtree(tmp);
    free(tmp);
}

static void test_expansion(void)
{
    setenv("TH_CFG_TEST_A", "alpha", 1);
    setenv("TH_CFG_TEST_N", "42", 1);
    setenv("TH_CFG_TEST_EMPTY", "", 1);
    unsetenv("TH_CFG_TEST_UNSET");
    th_config *cfg = parse(
        "plugins:\n"
        "  - name: p\n"
        "    path: ${TH_CFG_TEST_A}/p.so\n"
        "    config:\n"
        "      a: ${TH_CFG_TEST_A}\n"
        "      b: \"x-${TH_CFG_TEST_A}-${TH_CFG_TEST_A}\"\n"
        "      dir: ${CONFIG_DIR}/..\n"
        "      n: ${TH_CFG_TEST_N}\n"
        "      q: '${TH_CFG_TEST_N}'\n"
        "      lit: 'cost $$5 and $${HOME} and $ alone'\n"
        "      d1: ${TH_CFG_TEST_UNSET:-fallback}\n"
        "      d2: ${TH_CFG_TEST_EMPTY:-used}\n"
        "      e: '${TH_CFG_TEST_EMPTY}'\n"
        "      list: ['${TH_CFG_TEST_A}', {k: '${TH_CFG_TEST_A}'}]\n"
        "      ${TH_CFG_TEST_A}: keys are not expanded\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    const th_plugin_cfg *p = &cfg->plugins[0];
    CU_ASSERT_STRING_EQUAL(p->path, "/cfg/alpha/p.so");
    const th_ynode *c = p->config;
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_STRING_EQUAL(th_ynode_get(c, "a")->str, "alpha");
    CU_ASSERT_STRING_EQUAL(th_ynode_get(c, "b")->str, "x-alpha-alpha");
    CU_ASSERT_STRING_EQUAL(th_ynode_get(c, "dir")->str, "/cfg/..");
    CU_ASSERT_STRING_EQUAL(th_ynode_get(c, "n")->str, "42");
    CU_ASSERT_EQUAL(th_ynode_get(c, "n")->len, 2);
    CU_ASSERT_STRING_EQUAL(th_ynode_get(c, "lit")->str,
                           "cost $5 and ${HOME} and $ alone");
    CU_ASSERT_STRING_EQUAL(th_ynode_get(c, "d1")->str, "fallback");
    CU_ASSERT_STRING_EQUAL(th_ynode_get(c, "d2")->str, "used");
    CU_ASSERT_STRING_EQUAL(th_ynode_get(c, "e")->str, "");
    CU_ASSERT_EQUAL(th_ynode_get(c, "e")->len, 0);
    const th_ynode *l = th_ynode_get(c, "list");
    CU_ASSERT_STRING_EQUAL(l->kids[0]->str, "alpha");
    CU_ASSERT_STRING_EQUAL(th_ynode_get(l->kids[1], "k")->str, "alpha");
    CU_ASSERT_PTR_NOT_NULL(th_ynode_get(c, "${TH_CFG_TEST_A}"));

    /* expanded plain scalars are typed after expansion: n is an int */
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    CU_ASSERT_EQUAL(th_ynode_pack(th_ynode_get(c, "n"), &pk), 0);
    CU_ASSERT_EQUAL(b.len, 1);
    CU_ASSERT_EQUAL(b.data[0], 42);
    th_buf_reset(&b);
    CU_ASSERT_EQUAL(th_ynode_pack(th_ynode_get(c, "q"), &pk), 0);
    CU_ASSERT_EQUAL(b.len, 3);
    CU_ASSERT_EQUAL(b.data[0], 0xa2);
    th_buf_destroy(&b);
    th_config_free(cfg);

    EXPECT_ERR("plugins:\n  - name: p\n    path: p.so\n    config:\n"
               "      token: ${TH_CFG_TEST_UNSET}\n",
               "t.yaml:5:14: environment variable 'TH_CFG_TEST_UNSET' is not "
               "set (used in the config of plugin 'p'; write "
               "${TH_CFG_TEST_UNSET:-default} for a fallback)");
    EXPECT_ERR("plugins:\n  - name: p\n    path: ${TH_CFG_TEST_UNSET}/p.so\n",
               "t.yaml:3:11: environment variable 'TH_CFG_TEST_UNSET' is not "
               "set (used in a plugin path; write "
               "${TH_CFG_TEST_UNSET:-default} for a fallback)");
    EXPECT_ERR("plugins:\n  - name: p\n    path: p.so\n    config:\n"
               "      x: [ok, '${1BAD}']\n",
               "t.yaml:5:16: invalid variable name '${1BAD}' in the config of "
               "plugin 'p'");
    EXPECT_ERR("plugins:\n  - name: p\n    path: p.so\n    config:\n"
               "      x: 'a ${OPEN'\n",
               "t.yaml:5:13: unterminated ${ in the config of plugin 'p'");
    /* the mark points at the ${ on a one-line scalar, at the scalar's
     * start otherwise */
    EXPECT_ERR("plugins:\n  - name: p\n    path: p.so\n    config:\n"
               "      x: \"a-${TH_CFG_TEST_A}-${TH_CFG_TEST_UNSET}\"\n",
               "t.yaml:5:30: environment variable 'TH_CFG_TEST_UNSET' is not "
               "set (used in the config of plugin 'p'; write "
               "${TH_CFG_TEST_UNSET:-default} for a fallback)");
    EXPECT_ERR("plugins:\n  - name: p\n    path: p.so\n    config:\n"
               "      x: \"a\\t${TH_CFG_TEST_UNSET}\"\n",
               "t.yaml:5:10: environment variable 'TH_CFG_TEST_UNSET' is not "
               "set (used in the config of plugin 'p'; write "
               "${TH_CFG_TEST_UNSET:-default} for a fallback)");
    EXPECT_ERR("plugins:\n  - name: p\n    path: p.so\n    config:\n"
               "      x: a\n        ${TH_CFG_TEST_UNSET}\n",
               "t.yaml:5:10: environment variable 'TH_CFG_TEST_UNSET' is not "
               "set (used in the config of plugin 'p'; write "
               "${TH_CFG_TEST_UNSET:-default} for a fallback)");
    /* outside plugin blocks nothing is expanded */
    cfg = parse("mocks:\n  - tool: echo\n    stdout: ${TH_CFG_TEST_UNSET}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_STRING_EQUAL(cfg->mocks[0].stdout_text, "${TH_CFG_TEST_UNSET}");
    th_config_free(cfg);
    unsetenv("TH_CFG_TEST_A");
    unsetenv("TH_CFG_TEST_N");
    unsetenv("TH_CFG_TEST_EMPTY");
}

/* ---- packing ------------------------------------------------------------ */

static void test_pack_typing(void)
{
    const char *y = "- 3\n"
                    "- '3'\n"
                    "- \"3\"\n"
                    "- true\n"
                    "- False\n"
                    "- null\n"
                    "- ~\n"
                    "-\n"
                    "- 1.5\n"
                    "- -7\n"
                    "- 0x1F\n"
                    "- 0o17\n"
                    "- .inf\n"
                    "- 1e3\n"
                    "- hello\n"
                    "- 'true'\n"
                    "- yes\n"
                    "- 99999999999999999999\n"
                    "- {a: [1, b], 2: c}\n"
                    "- 010\n"
                    "- +5\n"
                    "- !!str 12\n";
    th_ynode *root;
    th_error err;
    CU_ASSERT_EQUAL_FATAL(th_ynode_parse("t", y, strlen(y), &root, &err), 0);
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    CU_ASSERT_EQUAL_FATAL(th_ynode_pack(root, &pk), 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CU_ASSERT_EQUAL_FATAL(msgpack_unpack_next(&u, (const char *)b.data, b.len,
                                              NULL),
                          MSGPACK_UNPACK_SUCCESS);
    msgpack_object a = u.data;
    CU_ASSERT_EQUAL_FATAL(a.type, MSGPACK_OBJECT_ARRAY);
    CU_ASSERT_EQUAL_FATAL(a.via.array.size, 22);
    msgpack_object *o = a.via.array.ptr;
    CU_ASSERT_EQUAL(o[0].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    CU_ASSERT_EQUAL(o[0].via.u64, 3);
    CU_ASSERT_EQUAL(o[1].type, MSGPACK_OBJECT_STR);
    CU_ASSERT_EQUAL(o[1].via.str.size, 1);
    CU_ASSERT_EQUAL(o[2].type, MSGPACK_OBJECT_STR);
    CU_ASSERT_EQUAL(o[3].type, MSGPACK_OBJECT_BOOLEAN);
    CU_ASSERT_TRUE(o[3].via.boolean);
    CU_ASSERT_EQUAL(o[4].type, MSGPACK_OBJECT_BOOLEAN);
    CU_ASSERT_FALSE(o[4].via.boolean);
    CU_ASSERT_EQUAL(o[5].type, MSGPACK_OBJECT_NIL);
    CU_ASSERT_EQUAL(o[6].type, MSGPACK_OBJECT_NIL);
    CU_ASSERT_EQUAL(o[7].type, MSGPACK_OBJECT_NIL);
    CU_ASSERT_EQUAL(o[8].type, MSGPACK_OBJECT_FLOAT64);
    CU_ASSERT_DOUBLE_EQUAL(o[8].via.f64, 1.5, 1e-12);
    CU_ASSERT_EQUAL(o[9].type, MSGPACK_OBJECT_NEGATIVE_INTEGER);
    CU_ASSERT_EQUAL(o[9].via.i64, -7);
    CU_ASSERT_EQUAL(o[10].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    CU_ASSERT_EQUAL(o[10].via.u64, 31);
    CU_ASSERT_EQUAL(o[11].via.u64, 15);
    CU_ASSERT_EQUAL(o[12].type, MSGPACK_OBJECT_FLOAT64);
    CU_ASSERT_TRUE(isinf(o[12].via.f64));
    CU_ASSERT_EQUAL(o[13].type, MSGPACK_OBJECT_FLOAT64);
    CU_ASSERT_DOUBLE_EQUAL(o[13].via.f64, 1000.0, 1e-9);
    CU_ASSERT_EQUAL(o[14].type, MSGPACK_OBJECT_STR);
    CU_ASSERT_EQUAL(o[15].type, MSGPACK_OBJECT_STR);
    CU_ASSERT_EQUAL(o[16].type, MSGPACK_OBJECT_STR); /* YAML 1.2: yes */
    CU_ASSERT_EQUAL(o[17].type, MSGPACK_OBJECT_FLOAT64);
    CU_ASSERT_EQUAL_FATAL(o[18].type, MSGPACK_OBJECT_MAP);
    CU_ASSERT_EQUAL_FATAL(o[18].via.map.size, 2);
    CU_ASSERT_EQUAL(o[18].via.map.ptr[0].val.type, MSGPACK_OBJECT_ARRAY);
    CU_ASSERT_EQUAL(o[18].via.map.ptr[1].key.type,
                    MSGPACK_OBJECT_POSITIVE_INTEGER);
    CU_ASSERT_EQUAL(o[19].via.u64, 10); /* YAML 1.2: decimal */
    CU_ASSERT_EQUAL(o[20].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    CU_ASSERT_EQUAL(o[20].via.u64, 5);
    CU_ASSERT_EQUAL(o[21].type, MSGPACK_OBJECT_STR);
    msgpack_unpacked_destroy(&u);
    th_buf_destroy(&b);
    CU_ASSERT_EQUAL(th_ynode_pack(NULL, &pk), TH_EINVAL);
    th_ynode_free(root);
}

/* ---- tools, after the plugins are loaded -------------------------------- */

static bool known_tool(void *ud, const char *name)
{
    (void)ud;
    return strcmp(name, "echo") == 0 || strcmp(name, "fs_read") == 0;
}

static void test_check_tools(void)
{
    th_error err;
    th_config *cfg = parse("toolsets:\n"
                           "  - name: a\n"
                           "    tools: [echo, fs_read]\n"
                           "  - name: b\n"
                           "    tools:\n"
                           "      - echo\n"
                           "      - fs_raed\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(th_config_check_tools(cfg, known_tool, NULL, &err),
                    TH_ECONFIG);
    CU_ASSERT_STRING_EQUAL(err.msg, "t.yaml:7:9: toolset 'b' names tool "
                                    "'fs_raed', which no plugin provides");
    th_config_free(cfg);

    cfg = parse("toolsets:\n  - name: a\n    tools: ['*']\n"
                "    tool_overrides:\n      echo: {}\n      nope: {}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(th_config_check_tools(cfg, known_tool, NULL, &err),
                    TH_ECONFIG);
    CU_ASSERT_STRING_EQUAL(err.msg, "t.yaml:6:7: 'tool_overrides' of toolset "
                                    "'a' names tool 'nope', which no plugin "
                                    "provides");
    th_config_free(cfg);

    cfg = parse("mocks:\n  - tool: echo\n  - tool: ghost\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(th_config_check_tools(cfg, known_tool, NULL, &err),
                    TH_ECONFIG);
    CU_ASSERT_STRING_EQUAL(err.msg, "t.yaml:3:11: a mock names tool 'ghost', "
                                    "which no plugin provides");
    th_config_free(cfg);

    cfg = parse("toolsets:\n  - {name: a, tools: [echo]}\n  - {name: b, "
                "tools: ['*']}\nmocks:\n  - tool: fs_read\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(th_config_check_tools(cfg, known_tool, NULL, &err), 0);
    CU_ASSERT_EQUAL(err.code, 0);
    th_config_free(cfg);
}

static void test_helpers(void)
{
    const char *y1 = "plugins:\n"
                     "  - {name: a, path: a.so, config: {k: 1, l: [x]}}\n"
                     "  - {name: b, path: b.so}\n"
                     "toolsets:\n  - {name: one, tools: ['*']}\n"
                     "  - {name: two, tools: [x]}\n";
    const char *y2 = "# moved down a line\nplugins:\n"
                     "  - name: a\n    path: a.so\n"
                     "    config: {k: 1, l: [x]}\n"
                     "  - {name: b, path: b.so, config: {k: '1'}}\n"
                     "  - {name: c, path: a.so, config: {k: 1, l: [x]}}\n"
                     "  - {name: a2, path: a.so, config: {k: 1, l: [y]}}\n"
                     "  - {name: a3, path: a.so, optional: true, "
                     "config: {k: 1, l: [x]}}\n";
    th_config *c1 = parse(y1), *c2 = parse(y2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_TRUE(th_plugin_cfg_equal(&c1->plugins[0], &c2->plugins[0]));
    CU_ASSERT_TRUE(th_plugin_cfg_equal(&c1->plugins[1], &c1->plugins[1]));
    /* a config block appeared; a different name; a different value */
    CU_ASSERT_FALSE(th_plugin_cfg_equal(&c1->plugins[1], &c2->plugins[1]));
    CU_ASSERT_FALSE(th_plugin_cfg_equal(&c1->plugins[0], &c2->plugins[2]));
    CU_ASSERT_FALSE(th_ynode_equal(c2->plugins[0].config,
                                   c2->plugins[3].config));
    CU_ASSERT_TRUE(th_ynode_equal(c2->plugins[0].config,
                                  c2->plugins[4].config));
    CU_ASSERT_FALSE(th_plugin_cfg_equal(&c2->plugins[0], &c2->plugins[4]));
    CU_ASSERT_TRUE(th_ynode_equal(NULL, NULL));
    CU_ASSERT_FALSE(th_ynode_equal(c1->root, NULL));
    /* plain 1 and quoted '1' differ */
    th_ynode *a, *b;
    th_error err;
    CU_ASSERT_EQUAL_FATAL(th_ynode_parse("t", "[1]", 3, &a, &err), 0);
    CU_ASSERT_EQUAL_FATAL(th_ynode_parse("t", "['1']", 5, &b, &err), 0);
    CU_ASSERT_FALSE(th_ynode_equal(a, b));
    th_ynode_free(a);
    th_ynode_free(b);

    const th_toolset_cfg *ts = th_config_toolset(c1, "two");
    CU_ASSERT_PTR_NOT_NULL_FATAL(ts);
    CU_ASSERT_STRING_EQUAL(ts->tools[0], "x");
    CU_ASSERT_PTR_EQUAL(th_config_toolset(c1, "one"), &c1->toolsets[0]);
    CU_ASSERT_PTR_NULL(th_config_toolset(c1, "three"));
    CU_ASSERT_PTR_NULL(th_config_toolset(c1, NULL));
    th_config_free(c1);
    th_config_free(c2);
}

/* ---- a plugin's config block, checked by the validator ------------------ */

/* Parameters root (string, required), depth (integer, default 2), mode
 * (string enum a|b). */
static void block_params(th_param p[3])
{
    static char *modes[] = {"a", "b"};
    static uint8_t two = 0x02;
    memset(p, 0, 3 * sizeof p[0]);
    p[0].name = "root";
    p[0].description = "the root";
    p[0].type = TOOLHOST_TYPE_STRING;
    p[0].required = true;
    p[1].name = "depth";
    p[1].description = "how deep";
    p[1].type = TOOLHOST_TYPE_INTEGER;
    p[1].default_mp = &two;
    p[1].default_len = 1;
    p[2].name = "mode";
    p[2].description = "the mode";
    p[2].type = TOOLHOST_TYPE_STRING;
    p[2].enum_values = modes;
    p[2].n_enum = 2;
}

/* Runs th_config_plugin_block on the first plugin of `yaml`; returns its
 * code, with the message in msg and the packed block in *out. */
static int run_block(const char *yaml, char *msg, size_t size, th_buf *out)
{
    th_config *cfg = parse(yaml);
    if (!cfg)
        return 1;
    th_param p[3];
    block_params(p);
    th_error err;
    int rc = th_config_plugin_block(cfg, &cfg->plugins[0], p, 3, out, &err);
    snprintf(msg, size, "%s", rc ? err.msg : "");
    th_config_free(cfg);
    return rc;
}

#define EXPECT_BLOCK_ERR(yaml, want)                                        \
    do {                                                                    \
        char m_[1024];                                                      \
        th_buf b_ = TH_BUF_INIT;                                            \
        CU_ASSERT_EQUAL(run_block(yaml, m_, sizeof m_, &b_), TH_ECONFIG);   \
        if (strncmp(m_, want, strlen(want)) != 0)                           \
            printf("\n  line %d: want: %s...\n           got:  %s\n",       \
                   __LINE__, want, m_);                                     \
        CU_ASSERT_EQUAL(strncmp(m_, want, strlen(want)), 0);                \
        CU_ASSERT_EQUAL(b_.len, 0);                                         \
        th_buf_destroy(&b_);                                                   \
    } while (0)

static void test_plugin_block(void)
{
    char msg[1024];
    th_buf b = TH_BUF_INIT;
    setenv("TH_CFG_TEST_ROOT", "/srv", 1);
    int rc = run_block("plugins:\n  - name: p\n    path: p.so\n    config:\n"
                       "      root: ${TH_CFG_TEST_ROOT}/data\n      mode: b\n",
                       msg, sizeof msg, &b);
    unsetenv("TH_CFG_TEST_ROOT");
    if (rc)
        printf("\n  %s\n", msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CU_ASSERT_EQUAL_FATAL(msgpack_unpack_next(&u, (const char *)b.data, b.len,
                                              NULL),
                          MSGPACK_UNPACK_SUCCESS);
    msgpack_object o = u.data;
    CU_ASSERT_EQUAL_FATAL(o.type, MSGPACK_OBJECT_MAP);
    CU_ASSERT_EQUAL_FATAL(o.via.map.size, 3); /* depth filled in */
    bool saw_root = false, saw_depth = false;
    for (uint32_t i = 0; i < o.via.map.size; i++) {
        msgpack_object_kv *kv = &o.via.map.ptr[i];
        if (kv->key.via.str.size == 4 &&
            memcmp(kv->key.via.str.ptr, "root", 4) == 0) {
            saw_root = kv->val.type == MSGPACK_OBJECT_STR &&
                       kv->val.via.str.size == 9 &&
                       memcmp(kv->val.via.str.ptr, "/srv/data", 9) == 0;
        } else if (kv->key.via.str.size == 5 &&
                   memcmp(kv->key.via.str.ptr, "depth", 5) == 0) {
            saw_depth = kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
                        kv->val.via.u64 == 2;
        }
    }
    CU_ASSERT_TRUE(saw_root);
    CU_ASSERT_TRUE(saw_depth);
    msgpack_unpacked_destroy(&u);
    th_buf_destroy(&b);

    /* nothing to fill in: the block as written; `out` is appended to */
    th_buf_puts(&b, "X");
    rc = run_block("plugins:\n  - name: p\n    path: p.so\n    config: "
                   "{root: /r, depth: 7, mode: a}\n",
                   msg, sizeof msg, &b);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(b.data[0], 'X');
    CU_ASSERT_EQUAL(b.data[1], 0x83);
    th_buf_destroy(&b);

    /* each error points at the key at fault */
    EXPECT_BLOCK_ERR("plugins:\n  - name: p\n    path: p.so\n    config:\n"
                     "      root: /r\n      roots: /x\n",
                     "t.yaml:6:7: in the config of plugin 'p': unknown "
                     "parameter 'roots'");
    EXPECT_BLOCK_ERR("plugins:\n  - name: p\n    path: p.so\n    config:\n"
                     "      root: /r\n      depth: deep\n",
                     "t.yaml:6:7: in the config of plugin 'p': parameter "
                     "'depth' must be an integer");
    /* a quoted number is a string */
    EXPECT_BLOCK_ERR("plugins:\n  - name: p\n    path: p.so\n    config:\n"
                     "      root: /r\n      depth: '3'\n",
                     "t.yaml:6:7: in the config of plugin 'p': parameter "
                     "'depth' must be an integer");
    EXPECT_BLOCK_ERR("plugins:\n  - name: p\n    path: p.so\n    config:\n"
                     "      mode: c\n      root: /r\n",
                     "t.yaml:5:7: in the config of plugin 'p': parameter "
                     "'mode' must be one of");
    /* a missing key: the block's mark, or the plugin's without a block */
    EXPECT_BLOCK_ERR("plugins:\n  - name: p\n    path: p.so\n    config:\n"
                     "      depth: 3\n",
                     "t.yaml:5:7: in the config of plugin 'p': missing "
                     "required parameter 'root'");
    EXPECT_BLOCK_ERR("plugins:\n  - name: x\n    path: x.so\n  - name: p\n"
                     "    path: p.so\n",
                     "t.yaml:2:5: in the config of plugin 'x': missing "
                     "required parameter 'root'");
}

/* The whole path with a real plugin: parse, open, check the block, init,
 * register, check the toolsets' tools against the registry. */
static bool registry_has(void *ud, const char *name)
{
    const th_tool *t = th_registry_acquire(ud, name);
    if (t)
        th_tool_release(t);
    return t != NULL;
}

static int load_with_block(const char *block, th_registry *reg, char *msg,
                           size_t size)
{
    char yaml[8192];
    snprintf(yaml, sizeof yaml,
             "plugins:\n"
             "  - name: greeter\n"
             "    path: '%s'\n"
             "    allow_insecure: true\n"
             "%s"
             "toolsets:\n"
             "  - name: main\n"
             "    tools: [gb_greet, gb_echo]\n"
             "  - name: other\n"
             "    tools: [gb_greet, gb_nope]\n",
             th_test_build_path("fixtures/good_basic.so"), block);
    th_config *cfg = parse(yaml);
    if (!cfg)
        return 1;
    th_error e;
    const th_plugin_cfg *pc = &cfg->plugins[0];
    th_load_opts lo = {.name = pc->name, .allow_insecure = pc->allow_insecure};
    th_plugin *p = NULL;
    th_param *params = NULL;
    size_t np = 0;
    th_buf b = TH_BUF_INIT;
    int rc = th_plugin_open(pc->path, &lo, &p, &e);
    if (rc == 0)
        rc = th_params_from_abi("config of greeter", p->desc->config_params,
                                p->desc->n_config_params, &params, &np, &e);
    if (rc == 0)
        rc = th_config_plugin_block(cfg, pc, params, np, &b, &e);
    if (rc == 0)
        rc = th_plugin_init(p, b.data, b.len, &e);
    if (rc == 0) {
        rc = th_registry_add(reg, p, &e);
        p = NULL; /* the registry's now, or freed */
    }
    if (rc == 0)
        rc = th_config_check_tools(cfg, registry_has, reg, &e);
    snprintf(msg, size, "%s", rc ? e.msg : "");
    if (p)
        th_plugin_unref(p);
    th_params_free(params, np);
    th_buf_destroy(&b);
    th_config_free(cfg);
    return rc;
}

static void test_with_plugin(void)
{
    char msg[1024];
    th_log_set_fd(-1);
    th_registry *reg = th_registry_new();
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    int rc = load_with_block("    config:\n      greting: hey\n", reg, msg,
                             sizeof msg);
    CU_ASSERT_EQUAL(rc, TH_ECONFIG);
    CU_ASSERT_STRING_EQUAL(msg, "t.yaml:6:7: in the config of plugin "
                                "'greeter': unknown parameter 'greting' "
                                "(accepted parameters: greeting)");
    CU_ASSERT_EQUAL(th_registry_count(reg), 0);
    rc = load_with_block("    config:\n      greeting: 7\n", reg, msg,
                         sizeof msg);
    CU_ASSERT_EQUAL(rc, TH_ECONFIG);
    const char *want = "t.yaml:6:7: in the config of plugin 'greeter': "
                       "parameter 'greeting' must be a string";
    CU_ASSERT_EQUAL(strncmp(msg, want, strlen(want)), 0);
    /* a good block: the plugin loads; then the toolsets are checked */
    rc = load_with_block("    config:\n      greeting: hey\n", reg, msg,
                         sizeof msg);
    CU_ASSERT_EQUAL(rc, TH_ECONFIG);
    if (rc != TH_ECONFIG || strstr(msg, "gb_nope") == NULL)
        printf("\n  %s\n", msg);
    CU_ASSERT_STRING_EQUAL(msg, "t.yaml:11:23: toolset 'other' names tool "
                                "'gb_nope', which no plugin provides");
    CU_ASSERT(th_registry_count(reg) > 0);
    th_registry_free(reg);
    th_log_set_fd(2);
}

/* ---- the shipped configs ------------------------------------------------- */

static th_config *load_shipped(const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", th_test_source_path(name));
    th_config *cfg = NULL;
    th_error err;
    int rc = th_config_load(path, &cfg, &err);
    if (rc != 0)
        printf("\n  %s\n", err.msg);
    CU_ASSERT_EQUAL(rc, 0);
    return cfg;
}

/* echo, fs, text (and exec, with its example tool, in dev.yaml) */
static void check_bundled(const th_config *cfg, size_t n_plugins)
{
    char want[PATH_MAX + 32];
    static const char *const names[] = {"echo", "fs", "text"};
    CU_ASSERT_EQUAL_FATAL(cfg->n_plugins, n_plugins);
    if (n_plugins == 4) {
        CU_ASSERT_STRING_EQUAL(cfg->plugins[3].name, "exec");
        CU_ASSERT_PTR_NOT_NULL(th_ynode_get(cfg->plugins[3].config,
                                            "tools"));
    }
    for (int i = 0; i < 3; i++) {
        const th_plugin_cfg *p = &cfg->plugins[i];
        CU_ASSERT_STRING_EQUAL(p->name, names[i]);
        snprintf(want, sizeof want, "%s/../build/plugins/%s.so", cfg->dir,
                 names[i]);
        CU_ASSERT_STRING_EQUAL(p->path, want);
        CU_ASSERT_FALSE(p->optional);
        if (i == 0) {
            CU_ASSERT_PTR_NULL(p->config);
            continue;
        }
        const th_ynode *root = th_ynode_get(p->config, "root");
        CU_ASSERT_PTR_NOT_NULL_FATAL(root);
        snprintf(want, sizeof want, "%s/..", cfg->dir);
        CU_ASSERT_STRING_EQUAL(root->str, want);
        /* the root is the project root: README.md is there */
        snprintf(want, sizeof want, "%s/README.md", root->str);
        CU_ASSERT_EQUAL(access(want, R_OK), 0);
    }
    CU_ASSERT_EQUAL_FATAL(cfg->n_toolsets, 1);
    CU_ASSERT_STRING_EQUAL(cfg->toolsets[0].name, "default");
    CU_ASSERT_STRING_EQUAL(cfg->toolsets[0].tools[0], "*");
    CU_ASSERT_TRUE(cfg->toolsets[0].run_code.enabled);
    /* no listen: serve takes the private default folder (th/sockpath.h) */
    CU_ASSERT_PTR_NULL(th_rpc_config(cfg)->listen);
}

static void test_shipped_configs(void)
{
    th_config *cfg = load_shipped("configs/default.yaml");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    char real[PATH_MAX];
    CU_ASSERT_PTR_NOT_NULL(realpath(th_test_source_path("configs"), real));
    CU_ASSERT_STRING_EQUAL(cfg->dir, real);
    check_bundled(cfg, 3);
    CU_ASSERT_EQUAL(cfg->host.reload, TH_RELOAD_SIGNAL);
    th_config_free(cfg);

    cfg = load_shipped("configs/dev.yaml");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    check_bundled(cfg, 4);
    CU_ASSERT_EQUAL(cfg->host.reload, TH_RELOAD_WATCH);
    th_config_free(cfg);

    /* the example sets every key: spot-check some of each section */
    cfg = load_shipped("configs/example.yaml");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(cfg->host.workers, 8);
    CU_ASSERT_EQUAL(cfg->host.async_workers, 4);
    CU_ASSERT_EQUAL(th_rpc_config(cfg)->socket_mode, 0600);
    CU_ASSERT_EQUAL(cfg->host.spill_max_age_ms, 3600000);
    th_limits d;
    th_limits_defaults(&d);
    CU_ASSERT_EQUAL(memcmp(&d, &cfg->limits, sizeof d), 0);
    CU_ASSERT_EQUAL(cfg->n_plugins, 4); /* echo, fs, text, exec */
    CU_ASSERT_EQUAL_FATAL(cfg->n_toolsets, 2);
    CU_ASSERT_EQUAL(cfg->toolsets[0].n_rules, 2);
    CU_ASSERT_EQUAL(cfg->toolsets[0].n_overrides, 1);
    CU_ASSERT_EQUAL(cfg->toolsets[1].scope, TH_SCOPE_TOOLSET);
    CU_ASSERT_EQUAL_FATAL(cfg->n_mocks, 1);
    CU_ASSERT_EQUAL(cfg->mocks[0].n_progress, 1);
    th_config_free(cfg);
}

/* Every prefix of the example and deterministic byte mutations of it: each
 * parse succeeds or fails with "t.yaml:LINE:COL: ..." (never a crash or a
 * leak under the sanitizers). */
static void test_mangled_input(void)
{
    /* ~21,600 parses, about 2 s of CPU in a plain build: on a machine
     * that gives this runner a few percent of a core, more than the
     * default 60 s of wall time the watchdog allows */
    th_test_timeout(300);
    FILE *f = fopen(th_test_source_path("configs/example.yaml"), "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static char text[65536];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    CU_ASSERT_FATAL(len > 1000);
    char *buf = malloc(len + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    unsigned ok = 0, failed = 0, bad_msg = 0;
    uint32_t seed = 12345;
    static const char subst[] = "{}[]:-,#&*!|>'\"%@`\t\n x0";
    for (size_t i = 0; i < len + 3000; i++) {
        size_t n = len;
        memcpy(buf, text, len);
        if (i < len) {
            n = i; /* a prefix */
        } else {
            for (int k = 0; k < 3; k++) {
                seed = seed * 1103515245u + 12345u;
                size_t at = (seed >> 8) % len;
                buf[at] = subst[(seed >> 20) % (sizeof subst - 1)];
            }
        }
        buf[n] = '\0';
        th_config *cfg = NULL;
        th_error err;
        int rc = th_config_parse("t.yaml", "/cfg", buf, n, &cfg, &err);
        if (rc == 0) {
            ok++;
            th_config_free(cfg);
            continue;
        }
        failed++;
        int line, col;
        char rest[8];
        if (rc != TH_ECONFIG ||
            sscanf(err.msg, "t.yaml:%d:%d: %7s", &line, &col, rest) != 3 ||
            line < 1 || col < 1) {
            if (bad_msg++ < 5)
                printf("\n  bad message (rc %d): %s\n", rc, err.msg);
        }
    }
    free(buf);
    CU_ASSERT_EQUAL(bad_msg, 0);
    CU_ASSERT(ok > 0);
    CU_ASSERT(failed > 0);
}


/* ---- limits: size, scalars, nodes, linear checks ------------------------ */

/* A config text built with printf-like pieces; the caller frees it. */
static char *big_text(th_buf *b)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(b->data);
    return (char *)th_buf_take(b, NULL);
}

/* 100,000 keys used to take 20 s (the duplicate-key scan was quadratic):
 * now the node limit refuses them at once, with the line:col where it
 * bit. */
static void test_node_limit(void)
{
    th_buf b = TH_BUF_INIT;
    th_buf_puts(&b, "plugins:\n  - name: p\n    path: p.so\n    config:\n");
    for (int i = 0; i < 100000; i++)
        th_buf_printf(&b, "      k%d: %d\n", i, i);
    char *y = big_text(&b);
    EXPECT_ERR(y, "t.yaml:50000:7: more than 100000 YAML nodes (keys, "
                  "values and list items); a toolhost config is far "
                  "smaller");
    free(y);
    /* a long list counts its items too */
    th_buf_puts(&b, "x: [");
    for (int i = 0; i < 100001; i++)
        th_buf_puts(&b, "1,");
    th_buf_puts(&b, "]\n");
    y = big_text(&b);
    th_config *cfg = NULL;
    th_error err;
    CU_ASSERT_EQUAL(th_config_parse("t.yaml", "/cfg", y, strlen(y), &cfg,
                                    &err), TH_ECONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "more than 100000 YAML nodes"));
    free(y);
}

/* 20,000 distinct keys in a plugin's config block, and thousands of
 * plugins, tools, overrides and mocks: every duplicate check looks at a
 * few hash slots per name, not at every earlier name. */
static void test_linear_checks(void)
{
    th_buf b = TH_BUF_INIT;
    th_buf_puts(&b, "plugins:\n  - name: big\n    path: p.so\n    config:\n");
    size_t names = 20000;
    for (int i = 0; i < 20000; i++)
        th_buf_printf(&b, "      key_%d: %d\n", i, i);
    for (int i = 0; i < 4000; i++)
        th_buf_printf(&b, "  - {name: p%d, path: p%d.so}\n", i, i);
    th_buf_puts(&b, "toolsets:\n  - name: t\n    tools: [");
    for (int i = 0; i < 10000; i++)
        th_buf_printf(&b, "%stool%d", i ? "," : "", i);
    th_buf_puts(&b, "]\n    tool_overrides:\n");
    for (int i = 0; i < 2000; i++)
        th_buf_printf(&b, "      tool%d: {timeout: 1s}\n", i * 5);
    th_buf_puts(&b, "mocks:\n");
    for (int i = 0; i < 4000; i++)
        th_buf_printf(&b, "  - tool: tool%d\n", i);
    names += 4000 * 3 + 10000 + 2000 * 2 + 4000;
    char *y = big_text(&b);
    th_ystats st = {0};
    th_config *cfg = NULL;
    th_error err;
    int rc = th_config_parse_ex("t.yaml", "/cfg", y, strlen(y), NULL, &st,
                                &cfg, &err);
    if (rc != 0)
        printf("\n  unexpected error: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(cfg->n_plugins, 4001);
    CU_ASSERT_EQUAL(cfg->toolsets[0].n_tools, 10000);
    CU_ASSERT_EQUAL(cfg->toolsets[0].n_overrides, 2000);
    CU_ASSERT_EQUAL(cfg->n_mocks, 4000);
    CU_ASSERT(st.nodes > 70000 && st.nodes < TH_YAML_MAX_NODES);
    /* quadratic checks would look at about 2e8 names */
    if (st.key_probes > 8 * names)
        printf("\n  %zu probes for %zu names\n", st.key_probes, names);
    CU_ASSERT(st.key_probes > names);
    CU_ASSERT(st.key_probes <= 8 * names);
    th_config_free(cfg);
    free(y);

    /* duplicates are still found, at the second occurrence */
    th_buf_puts(&b, "x:\n");
    for (int i = 0; i < 20000; i++)
        th_buf_printf(&b, "  k%d: 1\n", i);
    th_buf_puts(&b, "  k12345: 2\n");
    y = big_text(&b);
    EXPECT_ERR(y, "t.yaml:20002:3: duplicate key 'k12345' (first at line "
                  "12347, column 3)");
    free(y);
}

/* th_strset on its own: equal strings of any bytes, growth, indexes. */
static void test_strset(void)
{
    size_t probes = 0;
    th_strset set;
    th_strset_init(&set, &probes);
    char keys[3000][8];
    for (size_t i = 0; i < 3000; i++) {
        snprintf(keys[i], sizeof keys[i], "%zu", i);
        CU_ASSERT_EQUAL(th_strset_add(&set, keys[i], strlen(keys[i]), i,
                                      NULL), 0);
    }
    CU_ASSERT_EQUAL(set.n, 3000);
    for (size_t i = 0; i < 3000; i += 7) {
        size_t first = 99999;
        char again[8];
        snprintf(again, sizeof again, "%zu", i);
        CU_ASSERT_EQUAL(th_strset_add(&set, again, strlen(again), 1, &first),
                        1);
        CU_ASSERT_EQUAL(first, i);
    }
    CU_ASSERT_EQUAL(th_strset_add(&set, "a\0b", 3, 1, NULL), 0);
    CU_ASSERT_EQUAL(th_strset_add(&set, "a\0c", 3, 2, NULL), 0);
    CU_ASSERT_EQUAL(th_strset_add(&set, "", 0, 3, NULL), 0);
    CU_ASSERT_EQUAL(th_strset_add(&set, "", 0, 4, NULL), 1);
    CU_ASSERT(probes > 3000 && probes < 3000 * 8);
    th_strset_destroy(&set);
    th_strset_destroy(&set); /* twice is harmless */
}

/* One scalar may have 64 KiB; a mock's stdout/stderr 1 MiB. */
static void test_scalar_limit(void)
{
    size_t n = 70000;
    th_buf b = TH_BUF_INIT;
    th_buf_puts(&b, "plugins:\n  - name: p\n    path: p.so\n    config:\n"
                    "      text: '");
    for (size_t i = 0; i < n; i++)
        th_buf_puts(&b, "x");
    th_buf_puts(&b, "'\n");
    char *y = big_text(&b);
    EXPECT_ERR(y, "t.yaml:5:13: a scalar of 70000 bytes is longer than the "
                  "limit of 64KiB");
    free(y);
    /* exactly the limit is fine */
    th_buf_puts(&b, "x: ");
    for (size_t i = 0; i < TH_YAML_MAX_SCALAR; i++)
        th_buf_puts(&b, "y");
    th_buf_puts(&b, "\n");
    y = big_text(&b);
    th_ynode *root = NULL;
    th_error err;
    CU_ASSERT_EQUAL(th_ynode_parse("t", y, strlen(y), &root, &err), 0);
    CU_ASSERT_EQUAL(th_ynode_get(root, "x")->len, TH_YAML_MAX_SCALAR);
    th_ynode_free(root);
    free(y);
    /* a mock's stdout may be larger */
    th_buf_puts(&b, "mocks:\n  - tool: echo\n    stdout: '");
    for (size_t i = 0; i < 300000; i++)
        th_buf_puts(&b, "z");
    th_buf_puts(&b, "'\n");
    y = big_text(&b);
    th_config *cfg = parse(y);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(strlen(cfg->mocks[0].stdout_text), 300000);
    th_config_free(cfg);
    free(y);
    th_buf_puts(&b, "mocks:\n  - tool: echo\n    stderr: |\n      ");
    for (size_t i = 0; i < TH_YAML_MAX_LARGE_SCALAR + 10; i++)
        th_buf_puts(&b, "z");
    th_buf_puts(&b, "\n");
    y = big_text(&b);
    EXPECT_ERR(y, "t.yaml:3:13: a scalar of 1048587 bytes is longer than "
                  "the limit of 1MiB for 'stderr'");
    free(y);
}

/* The whole text: 4 MiB by default, TOOLHOST_CONFIG_MAX_BYTES to change. */
static void test_text_limit(void)
{
    size_t n = TH_YAML_MAX_BYTES + 1;
    char *y = malloc(n + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(y);
    memset(y, '#', n);
    y[n] = '\0';
    EXPECT_ERR(y, "t.yaml: the config is 4194305 bytes, more than the limit "
                  "of 4MiB");
    y[n - 1] = '\0'; /* a 4 MiB comment is fine */
    th_config *cfg = parse(y);
    th_config_free(cfg);
    free(y);

    const char *small = "host:\n  workers: 2\n# padding padding padding\n";
    setenv("TOOLHOST_CONFIG_MAX_BYTES", "1KiB", 1);
    cfg = parse(small);
    th_config_free(cfg);
    char pad[2048];
    memset(pad, '#', sizeof pad - 1);
    pad[sizeof pad - 1] = '\0';
    EXPECT_ERR(pad, "t.yaml: the config is 2047 bytes, more than the limit "
                    "of 1KiB");
    setenv("TOOLHOST_CONFIG_MAX_BYTES", "lots", 1);
    EXPECT_ERR(small, "t.yaml: TOOLHOST_CONFIG_MAX_BYTES: 'lots' is not a "
                      "size from 1KiB to 1GiB (such as 16MiB)");
    unsetenv("TOOLHOST_CONFIG_MAX_BYTES");
}

/* th_config_load reads a 200 MB file not at all: the size is checked
 * first (the peak RSS does not grow by the file's size). */
static void test_load_big_file(void)
{
    char *dir = th_test_tmpdir();
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    char *path = th_test_write_file(dir, "big.yaml", "a: '", (size_t)-1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(path);
    CU_ASSERT_EQUAL_FATAL(truncate(path, 200l * 1024 * 1024), 0);
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    th_config *cfg = (th_config *)1;
    th_error err;
    CU_ASSERT_EQUAL(th_config_load(path, &cfg, &err), TH_ECONFIG);
    CU_ASSERT_PTR_NULL(cfg);
    getrusage(RUSAGE_SELF, &ru1);
    char want[PATH_MAX + 128];
    snprintf(want, sizeof want,
             "%s: the config is 209715200 bytes, more than the limit of "
             "4MiB (TOOLHOST_CONFIG_MAX_BYTES)",
             path);
    CU_ASSERT_STRING_EQUAL(err.msg, want);
    CU_ASSERT(ru1.ru_maxrss - ru0.ru_maxrss < 64 * 1024); /* KiB */
    /* a small file loads as before */
    char *ok = th_test_write_file(dir, "ok.yaml", "host:\n  workers: 3\n",
                                  (size_t)-1);
    CU_ASSERT_EQUAL(th_config_load(ok, &cfg, &err), 0);
    if (cfg != (th_config *)1 && cfg) {
        CU_ASSERT_EQUAL(cfg->host.workers, 3);
        th_config_free(cfg);
    }
    free(ok);
    free(path);
    th_test_rmtree(dir);
    free(dir);
}

/* A FIFO, a device and a folder are refused before reading: `config
 * check` on a FIFO without a writer used to wait forever. */
static void test_load_not_a_file(void)
{
    char *dir = th_test_tmpdir();
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    char fifo[PATH_MAX];
    snprintf(fifo, sizeof fifo, "%s/fifo.yaml", dir);
    CU_ASSERT_EQUAL_FATAL(mkfifo(fifo, 0600), 0);
    th_test_run r;
    CU_ASSERT_EQUAL(th_test_toolhost(&r, "config", "check", fifo, NULL), 0);
    CU_ASSERT_EQUAL(r.status, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "fifo.yaml: not a regular file (a "
                                         "pipe); a config must be a file"));
    th_test_run_free(&r);

    th_config *cfg = (th_config *)1;
    th_error err;
    CU_ASSERT_EQUAL(th_config_load(fifo, &cfg, &err), TH_ECONFIG);
    CU_ASSERT_PTR_NULL(cfg);
    CU_ASSERT_EQUAL(th_config_load("/dev/zero", &cfg, &err), TH_ECONFIG);
    CU_ASSERT_STRING_EQUAL(err.msg, "/dev/zero: not a regular file (a "
                                    "device); a config must be a file");
    CU_ASSERT_EQUAL(th_config_load(dir, &cfg, &err), TH_ECONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "not a regular file (a folder)"));
    th_test_rmtree(dir);
    free(dir);
}

/* `root: ${VAR}/` with VAR set but empty used to become "/". */
static void test_empty_expansion(void)
{
    setenv("TH_CFG_TEST_EMPTY", "", 1);
    setenv("TH_CFG_TEST_A", "alpha", 1);
    unsetenv("TH_CFG_TEST_UNSET");
#define BLOCK "plugins:\n  - name: p\n    path: p.so\n    config:\n"
    EXPECT_ERR(BLOCK "      root: ${TH_CFG_TEST_EMPTY}/\n",
               "t.yaml:5:13: ${TH_CFG_TEST_EMPTY} is empty; write "
               "${TH_CFG_TEST_EMPTY:-} if an empty value is intended (in the "
               "config of plugin 'p')");
    /* path keys: any empty ${} in them, anywhere in the value */
    static const char *const path_keys[] = {
        "root", "roots", "path", "work_dir", "cachePath", "log-files",
        "data_directory", "Socket", "state_folder", "tmpDir"};
    for (size_t i = 0; i < sizeof path_keys / sizeof path_keys[0]; i++) {
        char y[256], want[256];
        snprintf(y, sizeof y, BLOCK "      %s: x${TH_CFG_TEST_EMPTY}\n",
                 path_keys[i]);
        snprintf(want, sizeof want,
                 "t.yaml:5:%zu: ${TH_CFG_TEST_EMPTY} is empty; write "
                 "${TH_CFG_TEST_EMPTY:-} if an empty value is intended (in "
                 "the config of plugin 'p')",
                 strlen(path_keys[i]) + 10);
        EXPECT_ERR(y, want);
    }
    /* nested under a path key, in a list */
    EXPECT_ERR(BLOCK "      dirs: [a, 'b${TH_CFG_TEST_EMPTY}']\n",
               "t.yaml:5:19: ${TH_CFG_TEST_EMPTY} is empty; write "
               "${TH_CFG_TEST_EMPTY:-} if an empty value is intended (in the "
               "config of plugin 'p')");
    /* the plugin's own path */
    EXPECT_ERR("plugins:\n  - name: p\n    path: ${TH_CFG_TEST_EMPTY}/p.so\n",
               "t.yaml:3:11: ${TH_CFG_TEST_EMPTY} is empty; write "
               "${TH_CFG_TEST_EMPTY:-} if an empty value is intended (in a "
               "plugin path)");
    /* any key: a leading empty ${} before '/' would make the value an
     * absolute path */
    EXPECT_ERR(BLOCK "      prefix: ${TH_CFG_TEST_EMPTY}/api\n",
               "t.yaml:5:15: ${TH_CFG_TEST_EMPTY} is empty; write "
               "${TH_CFG_TEST_EMPTY:-} if an empty value is intended (in the "
               "config of plugin 'p')");
    /* unset stays an error of its own */
    EXPECT_ERR(BLOCK "      root: ${TH_CFG_TEST_UNSET}/\n",
               "t.yaml:5:13: environment variable 'TH_CFG_TEST_UNSET' is not "
               "set (used in the config of plugin 'p'; write "
               "${TH_CFG_TEST_UNSET:-default} for a fallback)");
    /* what stays allowed */
    th_config *cfg = parse(
        "plugins:\n"
        "  - name: p\n"
        "    path: ${TH_CFG_TEST_EMPTY:-}p.so\n"
        "    config:\n"
        "      root: ${TH_CFG_TEST_EMPTY:-}/srv\n"
        "      work_dir: ${TH_CFG_TEST_EMPTY:-/var/tmp}/w\n"
        "      cache_path: ${TH_CFG_TEST_A}/c\n"
        "      name: x${TH_CFG_TEST_EMPTY}\n"
        "      url: http://h${TH_CFG_TEST_EMPTY}/api\n"
        "      filepath: x${TH_CFG_TEST_EMPTY}\n"
        "      ${TH_CFG_TEST_EMPTY}/k: keys are not expanded\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    const th_ynode *c = cfg->plugins[0].config;
    CU_ASSERT_STRING_EQUAL(cfg->plugins[0].path, "/cfg/p.so");
    CU_ASSERT_STRING_EQUAL(th_ynode_get(c, "root")->str, "/srv");
    CU_ASSERT_STRING_EQUAL(th_ynode_get(c, "work_dir")->str, "/var/tmp/w");
    CU_ASSERT_STRING_EQUAL(th_ynode_get(c, "cache_path")->str, "alpha/c");
    CU_ASSERT_STRING_EQUAL(th_ynode_get(c, "name")->str, "x");
    CU_ASSERT_STRING_EQUAL(th_ynode_get(c, "url")->str, "http://h/api");
    CU_ASSERT_STRING_EQUAL(th_ynode_get(c, "filepath")->str, "x");
    th_config_free(cfg);
#undef BLOCK
    unsetenv("TH_CFG_TEST_EMPTY");
    unsetenv("TH_CFG_TEST_A");
}

/* ---- ops: admin, user names, log format, empty files, load errors ------- */

static void test_admin_section(void)
{
    th_config *cfg = parse("host: {}\n");
    CU_ASSERT_FATAL(cfg != NULL);
    CU_ASSERT_FALSE(cfg->admin.present); /* the host's uid, and root */
    CU_ASSERT_EQUAL(cfg->host.log_format, TH_LOG_FORMAT_TEXT);
    th_config_free(cfg);
    cfg = parse("admin:\n  users: [root, \"4242\"]\n  groups: root\n"
                "host: {log_format: json}\n");
    CU_ASSERT_FATAL(cfg != NULL);
    CU_ASSERT(cfg->admin.present);
    CU_ASSERT_EQUAL(cfg->admin.line, 1);
    CU_ASSERT_EQUAL(cfg->admin.col, 1);
    CU_ASSERT_EQUAL_FATAL(cfg->admin.n_users, 2);
    CU_ASSERT_STRING_EQUAL(cfg->admin.users[0], "root");
    CU_ASSERT_STRING_EQUAL(cfg->admin.users[1], "4242"); /* uids as they are */
    CU_ASSERT_EQUAL_FATAL(cfg->admin.n_groups, 1);
    CU_ASSERT_STRING_EQUAL(cfg->admin.groups[0], "root");
    CU_ASSERT_EQUAL(cfg->host.log_format, TH_LOG_FORMAT_JSON);
    th_config_free(cfg);
    cfg = parse("admin:\n"); /* present, empty: root only */
    CU_ASSERT_FATAL(cfg != NULL);
    CU_ASSERT(cfg->admin.present);
    CU_ASSERT_EQUAL(cfg->admin.n_users + cfg->admin.n_groups, 0);
    th_config_free(cfg);
    EXPECT_ERR("admin:\n  user: [root]\n",
               "t.yaml:2:3: unknown key 'user' in admin (did you mean "
               "'users'?)");
    EXPECT_ERR("host: {log_format: xml}\n",
               "t.yaml:1:20: invalid value 'xml' for 'log_format' (allowed: "
               "text, json)");
}

static void test_unknown_user_names(void)
{
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n"
               "    allow_users: [root, no-such-user-x1]\n",
               "t.yaml:4:25: no user named 'no-such-user-x1' on this "
               "system (a name that does not exist never matches; an "
               "mcp.tokens entry or mcp.oauth.users may declare a user; "
               "set "
               "host.allow_unknown_users: true (or pass --allow-unknown-users) when the config is written "
               "before its users exist)");
    EXPECT_ERR("toolsets:\n  - name: a\n    tools: ['*']\n"
               "    allow_groups: no-such-group-x1\n",
               "t.yaml:4:19: no group named 'no-such-group-x1' on this "
               "system (a name that does not exist never matches; set "
               "host.allow_unknown_users: true (or pass --allow-unknown-users) when the config is written "
               "before its users exist)");
    EXPECT_ERR("admin:\n  users: [\"1000\", no-such-user-x1]\n",
               "t.yaml:2:19: no user named 'no-such-user-x1' on this "
               "system (a name that does not exist never matches; an "
               "mcp.tokens entry or mcp.oauth.users may declare a user; "
               "set "
               "host.allow_unknown_users: true (or pass --allow-unknown-users) when the config is written "
               "before its users exist)");
    EXPECT_ERR("admin:\n  groups: [no-such-group-x1]\n",
               "t.yaml:2:12: no group named 'no-such-group-x1' on this "
               "system (a name that does not exist never matches; set "
               "host.allow_unknown_users: true (or pass --allow-unknown-users) when the config is written "
               "before its users exist)");
    /* numeric ids need not exist; the escape takes any name */
    th_config *cfg = parse("toolsets:\n  - name: a\n    tools: ['*']\n"
                           "    allow_users: [\"123456\", root]\n"
                           "    allow_groups: [\"654321\"]\n");
    th_config_free(cfg);
    cfg = parse("host: {allow_unknown_users: true}\n"
                "admin: {users: [no-such-user-x1], groups: [no-such-g]}\n"
                "toolsets:\n  - name: a\n    tools: ['*']\n"
                "    allow_users: [no-such-user-x1]\n");
    CU_ASSERT(cfg && cfg->host.allow_unknown_users);
    th_config_free(cfg);
    /* a user declared by an MCP token exists for the host */
    cfg = parse("toolsets:\n  - name: a\n    tools: ['*']\n"
                "    allow_users: [token-user-x1]\n"
                "mcp:\n  tokens:\n    - user: token-user-x1\n"
                "      sha256: 036bcbb34b18909a92d95613fbb38defaedfa7900a3c5584f6229e94d80fdc49\n");
    CU_ASSERT_PTR_NOT_NULL(cfg);
    th_config_free(cfg);
}

static void test_empty_file(void)
{
    char *dir = th_test_tmpdir();
    const char *texts[] = {"", "\n\n", "# only a comment\n  # another\n",
                           "---\n", "~\n"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char *p = th_test_write_file(dir, "e.yaml", texts[i], (size_t)-1);
        th_config *cfg = (th_config *)1;
        th_error err;
        CU_ASSERT_EQUAL(th_config_load(p, &cfg, &err), TH_ECONFIG);
        CU_ASSERT_PTR_NULL(cfg);
        char want[4300];
        snprintf(want, sizeof want,
                 "%s:1:1: the config is empty (no keys, only blank lines or "
                 "comments); write at least a 'plugins:' list, or '{}' for "
                 "the defaults",
                 p);
        CU_ASSERT_STRING_EQUAL(err.msg, want);
        free(p);
    }
    /* '{}' asks for the defaults */
    char *p = th_test_write_file(dir, "d.yaml", "{}\n", (size_t)-1);
    th_config *cfg = NULL;
    th_error err;
    CU_ASSERT_EQUAL(th_config_load(p, &cfg, &err), 0);
    th_config_free(cfg);
    free(p);
    th_test_rmtree(dir);
    free(dir);
}

static void test_plugin_load_error(void)
{
    th_config *cfg = parse("plugins:\n  - name: a\n    path: ./x/a.so\n"
                           "  - name: b\n    path: /abs/b.so\n");
    CU_ASSERT_FATAL(cfg != NULL);
    th_error e;
    /* the resolved path becomes the path as written */
    th_error_set(&e, TH_ELOAD, "/cfg/x/a.so: cannot open: No such file");
    th_plugin_load_error(cfg, &cfg->plugins[0], &e);
    CU_ASSERT_STRING_EQUAL(e.msg, "t.yaml:2:5: plugin 'a' (path ./x/a.so): "
                                  "cannot open: No such file");
    CU_ASSERT_EQUAL(e.code, TH_ELOAD);
    /* a private copy's path too */
    th_error_set(&e, TH_ELOAD,
                 "not a shared object: /tmp/toolhost-Ab12/b-g3-17.so: file "
                 "too short");
    th_plugin_load_error(cfg, &cfg->plugins[1], &e);
    CU_ASSERT_STRING_EQUAL(e.msg, "t.yaml:4:5: plugin 'b' (path /abs/b.so): "
                                  "not a shared object: /abs/b.so: file too "
                                  "short");
    /* already at a place in the config: unchanged */
    th_error_set(&e, TH_ECONFIG, "t.yaml:3:9: in the config of plugin 'a': x");
    th_plugin_load_error(cfg, &cfg->plugins[0], &e);
    CU_ASSERT_STRING_EQUAL(e.msg, "t.yaml:3:9: in the config of plugin 'a': x");
    th_config_free(cfg);
}

/* Sections of modules (th/section.h): a registration that would make the
 * reading ambiguous is refused, and nothing of it is registered (the
 * sections here never are: the suites after this one read configs). */
static void test_section_register(void)
{
    static const th_cfkey none[] = {{.name = NULL}};
    static const th_cfkey workers[] = {{.name = "workers", .set = th_cf_u32},
                                       {.name = NULL}};
    static const th_cfkey frame[] = {{.name = "max_frame", .set = th_cf_u32},
                                     {.name = NULL}};
    static const char *const unix_x[] = {"unix:x", NULL};
    static const char *const web[] = {"http", NULL};
    const th_section core_name = {.name = "toolsets", .keys = none};
    const th_section same_name = {.name = "mcp", .keys = none};
    const th_section host_core = {.name = "t1", .keys = none,
                                  .host_keys = workers};
    const th_section host_rpc = {.name = "t2", .keys = none,
                                 .host_keys = frame};
    const th_section scheme = {.name = "t3", .keys = none, .schemes = unix_x};
    const th_section prefix = {.name = "t4", .keys = none, .schemes = web};
    const th_section unnamed = {.name = "", .keys = none};
    static const char *const everything[] = {"", NULL};
    const th_section greedy = {.name = "t5", .keys = none,
                               .schemes = everything};
    CU_ASSERT_EQUAL(th_section_register(&core_name), TH_ESTATE);
    CU_ASSERT_EQUAL(th_section_register(&same_name), TH_ESTATE);
    CU_ASSERT_EQUAL(th_section_register(&host_core), TH_ESTATE);
    CU_ASSERT_EQUAL(th_section_register(&host_rpc), TH_ESTATE);
    CU_ASSERT_EQUAL(th_section_register(&scheme), TH_ESTATE);
    CU_ASSERT_EQUAL(th_section_register(&prefix), TH_ESTATE);
    CU_ASSERT_EQUAL(th_section_register(&unnamed), TH_ESTATE);
    CU_ASSERT_EQUAL(th_section_register(&greedy), TH_ESTATE);
    /* registered already (the runner's th_fronts_register_builtin) */
    CU_ASSERT_EQUAL(th_section_register(&th_nats_section), 0);
    th_config *cfg = NULL;
    th_error e;
    CU_ASSERT_EQUAL(th_config_parse("t.yaml", "/", "t1: {}\n", 7, &cfg, &e),
                    TH_ECONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "unknown key 't1'"));
}

/* Discovery: `defer: true` on a plugin, `defer_tools:` by name or
 * pattern, th_config_tool_deferred, and the refusals. */
static void test_defer(void)
{
    static const char ok[] =
        "plugins:\n"
        "  - name: saas\n"
        "    path: /x/saas.so\n"
        "    defer: true\n"
        "  - name: fs\n"
        "    path: /x/fs.so\n"
        "defer_tools: [\"fs_write*\", fs_delete]\n";
    th_config *cfg = NULL;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_config_parse("t.yaml", "/", ok, strlen(ok),
                                          &cfg, &e), 0);
    CU_ASSERT(cfg->plugins[0].defer);
    CU_ASSERT(!cfg->plugins[1].defer);
    CU_ASSERT_EQUAL(cfg->n_defer_tools, 2);
    CU_ASSERT_EQUAL(cfg->defer_marks[1].line, 7);
    CU_ASSERT(th_config_defers(cfg));
    CU_ASSERT(th_config_tool_deferred(cfg, "saas", "anything"));
    CU_ASSERT(th_config_tool_deferred(cfg, "fs", "fs_write_file"));
    CU_ASSERT(th_config_tool_deferred(cfg, "fs", "fs_delete"));
    CU_ASSERT(!th_config_tool_deferred(cfg, "fs", "fs_read"));
    CU_ASSERT(!th_config_tool_deferred(cfg, NULL, "fs_read"));
    CU_ASSERT(th_config_tool_deferred(cfg, NULL, "fs_writer"));
    th_config_free(cfg);
    static const char none[] = "plugins:\n  - name: a\n    path: /a.so\n";
    CU_ASSERT_EQUAL_FATAL(th_config_parse("t.yaml", "/", none, strlen(none),
                                          &cfg, &e), 0);
    CU_ASSERT(!th_config_defers(cfg));
    CU_ASSERT(!th_config_tool_deferred(cfg, "a", "x"));
    th_config_free(cfg);
    EXPECT_ERR("defer_tools: []\n",
               "t.yaml:1:14: 'defer_tools' must list at least one tool name "
               "or pattern");
    EXPECT_ERR("defer_tools: [\"a b\"]\n",
               "t.yaml:1:15: invalid tool name or pattern 'a b' (tool names "
               "are letters, digits, '_' or '-'; a pattern adds *, ? and "
               "[...])");
    EXPECT_ERR("defer_tools: {a: 1}\n",
               "t.yaml:1:14: 'defer_tools' must be a list of names, got a "
               "map");
    EXPECT_ERR("plugins:\n  - name: a\n    path: /a.so\n    defer: maybe\n",
               "t.yaml:4:12: 'defer' must be true or false, got 'maybe'");
}

/* tags: entries of tools by name or pattern, toolsets that select by
 * them, and what is refused. */
/* has_tag of th_config_check_tags: plugins declare the one tag `ud`. */
static bool tag_is(void *ud, const char *tag)
{
    return strcmp(ud, tag) == 0;
}

static void test_tags(void)
{
    static const char ok[] =
        "tags:\n"
        "  - name: files\n"
        "    tools: [fs_read, \"fs_[lw]*\"]\n"
        "  - name: net\n"
        "    tools: [fetch]\n"
        "toolsets:\n"
        "  - name: readers\n"
        "    tags: [files]\n"
        "    tool_overrides:\n"
        "      fs_read: {timeout: 1s}\n"
        "  - name: both\n"
        "    tools: [echo]\n"
        "    tags: [files, net]\n";
    th_config *cfg = NULL;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_config_parse("t.yaml", "/", ok, strlen(ok),
                                          &cfg, &e), 0);
    CU_ASSERT_EQUAL(cfg->n_tags, 2);
    CU_ASSERT_EQUAL(cfg->toolsets[0].n_tools, 0);
    CU_ASSERT_EQUAL(cfg->toolsets[0].n_tags, 1);
    CU_ASSERT_PTR_EQUAL(cfg->toolsets[0].tag_refs[0], &cfg->tags[0]);
    CU_ASSERT_PTR_EQUAL(cfg->toolsets[1].tag_refs[1], &cfg->tags[1]);
    CU_ASSERT_TRUE(th_config_tool_has_tag(cfg, "files", "fs_read"));
    CU_ASSERT_TRUE(th_config_tool_has_tag(cfg, "files", "fs_write"));
    CU_ASSERT_TRUE(th_config_tool_has_tag(cfg, "files", "fs_list"));
    CU_ASSERT_FALSE(th_config_tool_has_tag(cfg, "files", "fs_stat"));
    CU_ASSERT_FALSE(th_config_tool_has_tag(cfg, "net", "fs_read"));
    CU_ASSERT_FALSE(th_config_tool_has_tag(cfg, "nope", "fetch"));
    th_config_free(cfg);
    /* A toolset tag no entry of `tags:` has: a plugin may declare it
     * (ABI 1.5), so it is checked once the plugins are loaded. */
    const char *pl = "tags:\n  - name: a\n    tools: [x]\n"
                     "toolsets:\n  - name: t\n    tags: [a, b]\n";
    CU_ASSERT_EQUAL_FATAL(th_config_parse("t.yaml", "/", pl, strlen(pl),
                                          &cfg, &e), 0);
    CU_ASSERT_PTR_EQUAL(cfg->toolsets[0].tag_refs[0], &cfg->tags[0]);
    CU_ASSERT_PTR_NULL(cfg->toolsets[0].tag_refs[1]);
    CU_ASSERT_EQUAL(cfg->toolsets[0].tag_marks[1].line, 6);
    CU_ASSERT_EQUAL(cfg->toolsets[0].tag_marks[1].col, 15);
    const char *declared = "b";
    CU_ASSERT_EQUAL(th_config_check_tags(cfg, tag_is, (void *)declared,
                                         NULL, NULL, &e), 0);
    declared = "c";
    CU_ASSERT_EQUAL(th_config_check_tags(cfg, tag_is, (void *)declared,
                                         NULL, NULL, &e), TH_ECONFIG);
    CU_ASSERT_STRING_EQUAL(e.msg, "t.yaml:6:15: toolset 't' selects tag "
                                  "'b', which neither an entry of 'tags:' "
                                  "nor a plugin's tool declares");
    th_config_free(cfg);
    EXPECT_ERR("tags:\n  - name: a\n    tools: [x]\n"
               "  - name: a\n    tools: [y]\n",
               "t.yaml:4:11: duplicate tag 'a' (first at line 2; list all "
               "its tools in one entry)");
    EXPECT_ERR("tags:\n  - name: a\n    tools: [\"x y\"]\n",
               "t.yaml:3:13: invalid tool name or pattern 'x y' (tool names "
               "are letters, digits, '_' or '-'; a pattern adds *, ? and "
               "[...])");
    EXPECT_ERR("tags:\n  - name: a\n    tools: []\n",
               "t.yaml:3:12: 'tools' must list at least one tool name or "
               "pattern");
    EXPECT_ERR("tags:\n  - tools: [x]\n",
               "t.yaml:2:5: missing required key 'name' in tag");
    EXPECT_ERR("tags:\n  - name: \"a b\"\n    tools: [x]\n",
               "t.yaml:2:11: invalid tag name 'a b' (use 1 to 64 letters, "
               "digits, '_' or '-')");
}

void th_suite_config(void)
{
    CU_pSuite s = CU_add_suite("config", NULL, NULL);
    CU_add_test(s, "tree_marks", test_tree_marks);
    CU_add_test(s, "section_register", test_section_register);
    CU_add_test(s, "tags", test_tags);
    CU_add_test(s, "defer", test_defer);
    CU_add_test(s, "syntax_errors", test_syntax_errors);
    CU_add_test(s, "duplicate_key", test_duplicate_key);
    CU_add_test(s, "defaults", test_defaults);
    CU_add_test(s, "host_keys", test_host_keys);
    CU_add_test(s, "unknown_keys", test_unknown_keys);
    CU_add_test(s, "wrong_types", test_wrong_types);
    CU_add_test(s, "missing_required", test_missing_required);
    CU_add_test(s, "out_of_range", test_out_of_range);
    CU_add_test(s, "invalid_enums", test_invalid_enums);
    CU_add_test(s, "duplicate_names", test_duplicate_names);
    CU_add_test(s, "override_not_in_toolset", test_override_not_in_toolset);
    CU_add_test(s, "toolsets", test_toolsets);
    CU_add_test(s, "top_limits", test_top_limits);
    CU_add_test(s, "mocks", test_mocks);
    CU_add_test(s, "sizes", test_sizes);
    CU_add_test(s, "durations", test_durations);
    CU_add_test(s, "sem_names", test_sem_names);
    CU_add_test(s, "relative_paths", test_relative_paths);
    CU_add_test(s, "expansion", test_expansion);
    CU_add_test(s, "pack_typing", test_pack_typing);
    CU_add_test(s, "check_tools", test_check_tools);
    CU_add_test(s, "helpers", test_helpers);
    CU_add_test(s, "plugin_block", test_plugin_block);
    CU_add_test(s, "with_plugin", test_with_plugin);
    CU_add_test(s, "shipped_configs", test_shipped_configs);
    CU_add_test(s, "mangled_input", test_mangled_input);
    CU_add_test(s, "node_limit", test_node_limit);
    CU_add_test(s, "linear_checks", test_linear_checks);
    CU_add_test(s, "strset", test_strset);
    CU_add_test(s, "scalar_limit", test_scalar_limit);
    CU_add_test(s, "text_limit", test_text_limit);
    CU_add_test(s, "load_big_file", test_load_big_file);
    CU_add_test(s, "load_not_a_file", test_load_not_a_file);
    CU_add_test(s, "empty_expansion", test_empty_expansion);
    CU_add_test(s, "admin_section", test_admin_section);
    CU_add_test(s, "unknown_user_names", test_unknown_user_names);
    CU_add_test(s, "empty_file", test_empty_file);
    CU_add_test(s, "plugin_load_error", test_plugin_load_error);
    CU_add_test(s, "nats_results_replicas", test_nats_results_replicas);
    CU_add_test(s, "nats_reply_batching", test_nats_reply_batching);
    CU_add_test(s, "nats_reload_note", test_nats_reload_note);
    CU_add_test(s, "rpc_reload_note", test_rpc_reload_note);
}
