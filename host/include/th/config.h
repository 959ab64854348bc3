/* th/config.h - the host's YAML configuration, parsed and checked.
 *
 * th_config_load() reads a YAML file with libyaml into a tree of nodes that
 * keep their file:line:col, then maps it onto the structs below through a
 * table of keys (one entry per key: name, type, offset, range).  Every
 * error reads "FILE:LINE:COL: message", with a "did you mean" for unknown
 * keys that are close to a known one.
 *
 * A th_config owns all of its strings and nodes; th_config_free() releases
 * everything.  Nothing in it changes after th_config_load() returns, so it
 * may be read from any thread.
 */
#ifndef TH_CONFIG_H
#define TH_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/err.h"

struct th_param;
struct th_buf;

/* ---- YAML nodes with marks -------------------------------------------- */

typedef enum th_ynode_kind {
    TH_Y_SCALAR = 1,
    TH_Y_SEQ = 2,
    TH_Y_MAP = 3
} th_ynode_kind;

typedef struct th_ynode {
    th_ynode_kind kind;
    int line, col;        /* 1-based, where the node starts */
    char *str;            /* TH_Y_SCALAR: the text, NUL-terminated */
    size_t len;           /* TH_Y_SCALAR: its length */
    bool plain;           /* TH_Y_SCALAR: unquoted (so "3" is a number) */
    struct th_ynode **kids; /* SEQ: items; MAP: key0, value0, key1, ... */
    size_t n;             /* number of entries in kids */
    int end_line, end_col; /* 1-based, just past the node's end */
} th_ynode;

/* Looks up `key` in a TH_Y_MAP node; NULL when absent or not a map. */
const th_ynode *th_ynode_get(const th_ynode *map, const char *key);
/* The same, but returns the key node itself (for its mark). */
const th_ynode *th_ynode_get_key(const th_ynode *map, const char *key);

/* Bounds on one parse, so that a file cannot make the parser slow or big.
 * See docs/config.md ("Size limits"). */
typedef struct th_ylimits {
    size_t max_bytes;         /* the whole text; default 4 MiB            */
    size_t max_scalar;        /* one scalar, in bytes; default 64 KiB     */
    size_t max_large_scalar;  /* the value of a key named in large_keys;
                                 default 1 MiB                            */
    const char *const *large_keys; /* NULL-terminated, or NULL            */
    size_t max_nodes;         /* scalars, lists and maps; default 100000  */
    int max_depth;            /* lists and maps inside each other; 64     */
} th_ylimits;

#define TH_YAML_MAX_BYTES (4u * 1024 * 1024)
#define TH_YAML_MAX_SCALAR (64u * 1024)
#define TH_YAML_MAX_LARGE_SCALAR (1024u * 1024)
#define TH_YAML_MAX_NODES 100000u
#define TH_YAML_MAX_DEPTH 64

/* The defaults above; large_keys NULL. */
void th_ylimits_defaults(th_ylimits *l);

/* What a parse did, for tests that check it stays linear. */
typedef struct th_ystats {
    size_t nodes;       /* nodes built */
    size_t key_probes;  /* slots looked at by the duplicate-key checks */
} th_ystats;

/* Parses YAML text (one document) into a tree; *out is NULL for an empty
 * document.  Duplicate keys in one map (found through a hash set: linear
 * time), aliases, more than one document and going past a limit of `lim`
 * (NULL: th_ylimits_defaults) are errors.  Errors are TH_ECONFIG with
 * "NAME:LINE:COL: message" (libyaml's syntax errors included; "NAME: ..."
 * when the whole text is too long) or TH_ENOMEM.  `stats` (may be NULL)
 * is added to.  The caller owns *out: th_ynode_free(). */
int th_ynode_parse_ex(const char *name, const char *text, size_t len,
                      const th_ylimits *lim, th_ystats *stats,
                      th_ynode **out, th_error *err);
/* th_ynode_parse_ex with the default limits and no stats. */
int th_ynode_parse(const char *name, const char *text, size_t len,
                   th_ynode **out, th_error *err);
void th_ynode_free(th_ynode *n);

/* A set of strings (not copied: they must outlive the set) by hash, each
 * with the index the caller gave it; for duplicate checks in linear time.
 * `probes` (may be NULL) counts the slots looked at.  The hash depends on
 * the set's address: a set in use must not be copied or moved. */
typedef struct th_strset {
    struct th_strset_slot *slots;
    size_t cap, n;
    size_t *probes;
} th_strset;

void th_strset_init(th_strset *s, size_t *probes);
void th_strset_destroy(th_strset *s);
/* Adds `str` (len bytes) with `idx`.  Returns 0 when added, 1 when an
 * equal string is in the set already (its index in *first; the set is
 * unchanged), or TH_ENOMEM. */
int th_strset_add(th_strset *s, const char *str, size_t len, size_t idx,
                  size_t *first);

/* YAML 1.2 core-schema typing of a plain scalar: null ("", ~, null),
 * booleans (true/false, True, TRUE, ...).  th_ynode_bool gives 1, 0, or
 * -1 when `n` is not a plain boolean.  A NULL node counts as null. */
bool th_ynode_is_null(const th_ynode *n);
int th_ynode_bool(const th_ynode *n);

/* Same shape and text (plain-ness included), marks ignored; two NULLs are
 * equal.  For reloads: an unchanged `config:` block needs no re-init. */
bool th_ynode_equal(const th_ynode *a, const th_ynode *b);

/* Packs a node as msgpack: plain scalars typed by YAML's core schema
 * (null/~, true/false, integers, floats), quoted scalars as strings,
 * sequences as arrays, maps as maps.  0 or TH_ENOMEM/TH_EINVAL. */
struct msgpack_packer;
int th_ynode_pack(const th_ynode *n, struct msgpack_packer *pk);

/* A position in the config file (1-based; 0 when not from the file). */
typedef struct th_mark {
    int line, col;
} th_mark;

/* ---- Enumerations ------------------------------------------------------ */

typedef enum th_dup_policy {
    TH_DUP_ALLOW = 0,
    TH_DUP_REJECT,
    TH_DUP_REPLACE,
    TH_DUP_CONFIRM
} th_dup_policy;

typedef enum th_dup_scope {
    TH_DUPSCOPE_NAME_AND_ARGS = 0,
    TH_DUPSCOPE_NAME
} th_dup_scope;

typedef enum th_task_scope {
    TH_SCOPE_SESSION = 0,
    TH_SCOPE_TOOLSET
} th_task_scope;

typedef enum th_perm_action {
    TH_PERM_DENY = 0,
    TH_PERM_ALLOW,
    TH_PERM_ASK
} th_perm_action;

typedef enum th_reload_mode {
    TH_RELOAD_SIGNAL = 0, /* SIGHUP and the host.reload method */
    TH_RELOAD_WATCH,      /* plus watching plugin and config files */
    TH_RELOAD_OFF
} th_reload_mode;

typedef enum th_log_format {
    TH_LOG_FORMAT_TEXT = 0, /* "2026-...Z info  session=3 tool=echo ..." */
    TH_LOG_FORMAT_JSON      /* one JSON object a line */
} th_log_format;

/* Number of semantic types, indexable by toolhost_semantic (1..12). */
#define TH_SEM_COUNT 13

/* Per-semantic-type byte limits; 0 in an override means "inherit". */
typedef struct th_limits {
    uint64_t bytes[TH_SEM_COUNT];
} th_limits;

/* ---- Sections ---------------------------------------------------------- */

typedef struct th_host_cfg {
    uint32_t workers;          /* worker threads; default 2 x cores      */
    uint32_t async_workers;    /* cap on workers busy with long-running
                                  tasks; default workers / 2, at least 1 */
    uint32_t queue_size;       /* bounded call queue; default 1024       */
    int log_level;             /* TOOLHOST_LOG_*; default info           */
    uint64_t shutdown_grace_ms;/* default 5000                           */
    uint64_t default_timeout_ms; /* default 60000                        */
    uint64_t max_timeout_ms;   /* cap on per-call timeouts; 3600000      */
    uint64_t session_grace_ms; /* wait for session tasks at close; 2000  */
    uint64_t result_ttl_ms;    /* toolset-scoped results kept; 600000    */
    uint64_t permission_timeout_ms; /* "ask" answered within; 60000      */
    bool expose_task_tools;    /* always list the task tools; false      */
    th_reload_mode reload;     /* default signal                         */
    uint64_t reload_debounce_ms; /* default 200                          */
    char *state_dir;           /* private plugin copies; NULL: a
                                  0700 folder under $TMPDIR              */
    char *spill_dir;           /* full outputs saved here; NULL: off     */
    uint64_t spill_max_bytes;  /* per file; default 64 MiB               */
    uint64_t spill_max_age_ms; /* default 1 h                            */
    /* Limits of the RPC server against its clients (docs/config.md). */
    uint64_t lost_worker_grace_ms; /* a worker still in execute() this long
                                  after its call's deadline is lost and
                                  replaced; 0: 3000                      */
    uint32_t max_lost_workers; /* replacements alive at once; 0: workers */
    int log_format;            /* TH_LOG_FORMAT_TEXT (default) or _JSON  */
    char *audit;               /* the audit log: a file (absolute), or
                                  "journald"; NULL: none (docs/ops.md)   */
    bool allow_unknown_users;  /* allow_users/allow_groups/admin names
                                  that do not exist yet are not errors   */
    int line, col;             /* where the section starts (0 if absent) */
    uint32_t task_keep;        /* finished tasks kept (both scopes, with
                                  result_ttl); default 256; 0: 256      */
    uint64_t reload_drain_timeout_ms; /* TOOLHOST_PLUGIN_EXCLUSIVE_RELOAD:
                                  the old generation's calls end within
                                  this or the reload fails; 10 s        */
    uint64_t short_call_max_ms; /* a TOOLHOST_TOOL_SHORT call may hold the
                                  RPC loop this long; longer: the tool
                                  runs on workers from then on; 10 ms,
                                  0: short tools run on workers too     */
    uint64_t short_call_stuck_ms; /* a short call still holding a front's
                                  thread after this (at least
                                  short_call_max) is reported by the
                                  watchdog and its tool demoted while it
                                  runs; 100 ms, 0: no watchdog          */
    uint32_t max_client_asks; /* ask_client() calls one tool call may
                                  make (each answer is kept until the
                                  call ends); 32                       */
    uint64_t plugin_reload_min_interval_ms; /* reloads a plugin asks for
                                  (tools_changed, ABI 1.5) start at most
                                  this often; 1 s, 0: no limit          */
    uint32_t busy_poll_us;     /* the MCP stdio front looks for the next
                                  message this long after one, without
                                  sleeping; 300, 0: off                  */
} th_host_cfg;

/* Where a plugin runs (th_plugin_cfg.isolation). */
#define TH_ISO_IN_PROCESS 0
#define TH_ISO_PROCESS 1

/* setrlimit() limits of an isolated plugin's workers; 0: not set. */
typedef struct th_proc_limits {
    uint64_t memory;       /* RLIMIT_AS, bytes                           */
    uint32_t cpu_seconds;  /* RLIMIT_CPU per worker process              */
    uint32_t open_files;   /* RLIMIT_NOFILE                              */
    uint32_t processes;    /* processes and threads the worker may add
                              (RLIMIT_NPROC over its user's count)       */
} th_proc_limits;

typedef struct th_plugin_cfg {
    char *name;            /* required, unique                          */
    char *path;            /* absolute (resolved against the config dir) */
    bool optional;         /* a failure to load is a warning            */
    bool allow_insecure;   /* skip the writable-by-others check         */
    const th_ynode *config;/* the `config:` block or NULL; owned by the
                              th_config                                 */
    int line, col;
    /* Appended (isolation, docs/isolation.md): */
    int isolation;         /* TH_ISO_IN_PROCESS (default) or TH_ISO_PROCESS */
    uint32_t workers;      /* worker processes; 0: 1                     */
    th_proc_limits process_limits;
    bool network;          /* false: sockets of AF_INET/6 refused (seccomp);
                              default true                              */
    char *user;            /* run the workers as this user (root only);
                              "auto": a uid of the plugin's own from
                              uid_lo..uid_hi                            */
    uint64_t kill_grace_ms;/* after a deadline, SIGKILL after; 0: 1000   */
    uint32_t crash_loop;   /* deaths in a row, no call finished, before
                              unhealthy; 0: 5                           */
    uint64_t unhealthy_retry_ms; /* unhealthy: a new start every; 0: 30 s */
    char **env;            /* `env:` names the workers get from the host's
                              environment (besides PATH, LANG, LC_ALL)  */
    size_t n_env;
    uint32_t uid_lo, uid_hi; /* isolation_uid_range (user: auto); 0: the
                                default 61184-65519                     */
    /* Appended (discovery, docs/gateway.md): every tool of this plugin is
     * deferred: left out of tool lists, found by search_tools. */
    bool defer;
    /* Appended (isolation, docs/isolation.md): a resource read, prompt
     * get or completion of an isolated plugin not answered within this
     * kills its worker and fails; 0: 5000                              */
    uint64_t content_timeout_ms;
    /* Appended (isolation, docs/isolation.md, "Frames"): the largest
     * frame the host reads from one of this plugin's workers; a longer
     * one declared kills the worker; 0: ISO_FRAME_DEFAULT (16 MiB +
     * 64 KiB), 256 KiB..256 MiB */
    uint64_t worker_max_frame;
} th_plugin_cfg;

typedef struct th_perm_rule {
    char *match;         /* a glob over tool names (fnmatch), or NULL   */
    uint32_t flags;      /* TOOLHOST_TOOL_* bits that must all be set, or
                            TH_PERM_FLAG_NEEDS for "needs_permission"   */
    th_perm_action action;
    int line, col;       /* names the rule in messages */
} th_perm_rule;

#define TH_PERM_FLAG_NEEDS (1u << 31) /* the tool's needs_permission said 1 */

typedef struct th_tool_override {
    char *tool;
    uint64_t timeout_ms;        /* 0: inherit */
    uint32_t max_concurrency;   /* 0: inherit */
    int on_duplicate_call;      /* -1: inherit, else th_dup_policy */
    int duplicate_scope;        /* -1: inherit, else th_dup_scope */
    th_limits limits;           /* 0 entries inherit */
    int line, col;
    char **sensitive;           /* parameters whose values the audit log's
                                   digest leaves out (docs/ops.md) */
    size_t n_sensitive;
} th_tool_override;

typedef struct th_run_code_cfg {
    bool enabled;
    uint64_t timeout_ms;   /* default 10000 */
    uint64_t memory;       /* bytes; default 64 MiB */
    uint32_t max_calls;    /* default 1000 */
    uint64_t output_limit; /* bytes; default 64 KiB */
} th_run_code_cfg;

/* What a call a permission rule says to ask about gets when no one can
 * be asked (a front without asks, an MCP client that did not declare
 * elicitation). */
typedef enum th_ask_fallback {
    TH_ASKFB_DENY = 0,       /* permission_denied, saying why */
    TH_ASKFB_ALLOW_READ_ONLY, /* run a tool flagged read-only, deny others */
    TH_ASKFB_ERROR           /* bad_state: the client cannot take asks */
} th_ask_fallback;

typedef struct th_toolset_cfg {
    char *name;
    char **tools;          /* tool names; a single "*" means every tool */
    size_t n_tools;
    uint64_t timeout_ms;   /* 0: host default */
    uint32_t max_concurrency; /* 0: unlimited */
    th_dup_policy on_duplicate_call;
    th_dup_scope duplicate_scope;
    th_task_scope scope;
    char **allow_users;    /* names or numeric uids; NULL: anyone */
    size_t n_allow_users;
    char **allow_groups;   /* names or numeric gids */
    size_t n_allow_groups;
    th_perm_rule *rules;   /* in order; the first that matches decides */
    size_t n_rules;
    th_perm_action perm_default; /* when no rule matches; default deny for
                                    tools that need permission, see docs */
    th_ask_fallback ask_fallback;
    th_limits limits;      /* 0 entries inherit the host's */
    th_tool_override *overrides;
    size_t n_overrides;
    th_run_code_cfg run_code;
    int line, col;
    th_mark *tool_marks;   /* n_tools marks, parallel to `tools` */
    /* Appended: `tags:` - every tool a tag of these names has is in the
     * toolset too (besides `tools`); each resolved to its entry of the
     * config's `tags:` (tag_refs, n_tags of them). */
    char **tags;
    size_t n_tags;
    const struct th_tag_cfg **tag_refs; /* NULL: no entry of `tags:` has
                                           that name (plugins may declare
                                           it, ABI 1.5) */
    th_mark *tag_marks;    /* n_tags marks, parallel to `tags` */
} th_toolset_cfg;

/* One entry of `tags:`: the tools (names or fnmatch patterns) that carry
 * the tag `name`; toolsets select by it, an operator disables by it
 * (host.disable "tag:NAME"). */
typedef struct th_tag_cfg {
    char *name;
    char **tools;
    size_t n_tools;
    th_mark *tool_marks;   /* n_tools marks */
    int line, col;
} th_tag_cfg;

typedef struct th_mock_progress {
    char *message;
    double fraction;       /* < 0: unknown */
    uint64_t delay_ms;     /* wait before sending it */
} th_mock_progress;

typedef struct th_mock_cfg {
    char *tool;
    bool ok;               /* default true */
    char *stdout_text;     /* may be NULL */
    char *stderr_text;
    uint8_t *meta;         /* msgpack map or NULL */
    size_t meta_len;
    th_mock_progress *progress;
    size_t n_progress;
    uint64_t delay_ms;     /* before the result */
    int line, col;
} th_mock_cfg;

/* Who may administer the host (host.reload, the whole host.stats, other
 * users' tasks): `admin: {users: [...], groups: [...]}`.  Without the
 * section (present false): the uid the host runs as.  root always is. */
typedef struct th_admin_cfg {
    bool present;
    char **users;          /* names or numeric uids */
    size_t n_users;
    char **groups;         /* names or numeric gids */
    size_t n_groups;
    int line, col;         /* the `admin:` key */
} th_admin_cfg;

/* Who shares one bucket of a rate limit (th_rate_cfg.per). */
#define TH_RATE_PER_CALLER 0      /* each caller its own (the default) */
#define TH_RATE_PER_CALLER_TOOL 1 /* each caller and tool              */
#define TH_RATE_PER_ALL 2         /* every caller the rule matches     */

/* One entry of `rate_limits:` (rate.c, docs/gateway.md "Rate limits"):
 * calls of the tools matched by callers matched, per bucket; 0: that
 * limit is not set (at least one is). */
typedef struct th_rate_cfg {
    char *name;            /* in messages, logs and metrics; default
                              "rate_limits[N]"                          */
    char **users;          /* caller names (token and NATS users, or
                              local user names / numeric uids); none:
                              every caller                              */
    size_t n_users;
    char **tools;          /* tool names or fnmatch patterns; none:
                              every tool                                */
    size_t n_tools;
    int per;               /* TH_RATE_PER_*                             */
    double rate;           /* calls per second refilled                 */
    uint32_t burst;        /* the bucket's size; default ceil(rate)     */
    uint32_t concurrent;   /* calls running at once                     */
    uint32_t daily;        /* calls per UTC day                         */
    int line, col;
} th_rate_cfg;

#define TH_SECTIONS_MAX 16

typedef struct th_config {
    char *path;            /* the file as given */
    char *dir;             /* its folder, absolute */
    th_host_cfg host;
    th_limits limits;      /* host-wide, defaults filled in */
    th_plugin_cfg *plugins;
    size_t n_plugins;
    th_toolset_cfg *toolsets; /* when the file has none: one toolset
                                 "default" with tools ["*"] */
    size_t n_toolsets;
    th_mock_cfg *mocks;
    size_t n_mocks;
    th_ynode *root;        /* the whole document */
    int extra_refs;        /* th_config_ref()s not yet dropped (atomic) */
    th_admin_cfg admin;
    /* Appended: this config's serial, unique in the process and never
     * reused, given on first use (call_start.c's decision cache keys on
     * it with the pointer: a config freed and another made at the same
     * address never match).  0 until then; read and set atomically. */
    uint64_t serial;
    th_rate_cfg *rate_limits; /* `rate_limits:` (rate.c)               */
    size_t n_rate_limits;
    th_tag_cfg *tags;      /* `tags:`                                    */
    size_t n_tags;
    /* `defer_tools:` (docs/gateway.md, "Discovery"): tool names or fnmatch
     * patterns of deferred tools, besides the tools of plugins with
     * `defer: true`. */
    char **defer_tools;
    size_t n_defer_tools;
    th_mark *defer_marks;  /* n_defer_tools marks */
    /* The sections of modules (th/section.h: a front's own), registered
     * when this config was read: descriptor and struct, n_sec of each. */
    const struct th_section *sec_desc[TH_SECTIONS_MAX];
    void *sec[TH_SECTIONS_MAX];
    size_t n_sec;
} th_config;

/* Reads and checks `path`.  On success *out is a new config (free with
 * th_config_free).  On failure returns TH_ECONFIG or TH_EIO with
 * "FILE:LINE:COL: message" in err; *out is NULL.  The file is read once,
 * bounded: anything but a regular file ("FILE: not a regular file (a
 * pipe); ...") and a file over the size limit ("FILE: the config is N
 * bytes, more than the limit of 4MiB ...") are refused before reading. */
int th_config_load(const char *path, th_config **out, th_error *err);

/* th_config_load that goes on after a mistake in the file: report() gets
 * each one ("FILE:LINE:COL: message", in the order of the file's keys),
 * up to TH_CONFIG_MAX_ERRORS; *err is then the first.  A failure that
 * ends the reading at once (the file unreadable, bad YAML, a check of the
 * whole config) is not reported: it is in *err alone.  `toolhost config
 * check` prints them all. */
#define TH_CONFIG_MAX_ERRORS 20
typedef void (*th_config_report_fn)(void *ud, const th_error *e);
int th_config_load_report(const char *path, th_config **out, th_error *err,
                          th_config_report_fn report, void *ud);

/* Calls fn with the dotted path of every key the config reader knows
 * ("host.workers", "toolsets.permissions.rules.match", "limits.text"; a
 * list's items add no step; the keys of a plugin's own `config:` block are
 * the plugin's), in table order.  The man page test holds
 * toolhost.yaml(5) to this list. */
void th_config_each_key(void (*fn)(const char *path, void *ud), void *ud);
/* The same for YAML text in memory; `name` stands for the file in
 * messages and `dir` resolves relative plugin paths (NULL: cwd). */
int th_config_parse(const char *name, const char *dir, const char *text,
                    size_t len, th_config **out, th_error *err);
/* th_config_parse with limits (NULL: th_config_limits) and stats (may be
 * NULL; key_probes also counts the checks for duplicate plugin, toolset,
 * tool and mock names). */
int th_config_parse_ex(const char *name, const char *dir, const char *text,
                       size_t len, const th_ylimits *lim, th_ystats *stats,
                       th_config **out, th_error *err);
/* The limits a config is loaded with: th_ylimits_defaults, mocks' stdout
 * and stderr as large keys, and max_bytes from the environment variable
 * TOOLHOST_CONFIG_MAX_BYTES (a size, 1KiB to 1GiB) when set.  0 or
 * TH_ECONFIG when the variable is not such a size. */
int th_config_limits(th_ylimits *lim, th_error *err);
void th_config_free(th_config *cfg);
/* A config is shared by reference once loaded: whoever loaded it holds
 * the first reference; th_config_ref() adds one, th_config_unref() drops
 * one and frees the config with the last (th_config_free() frees at once,
 * for a config no one else has seen).  Any thread.  The running host holds
 * one reference to its current config and every call one to the config it
 * started under (its snapshot), until it ends. */
th_config *th_config_ref(th_config *cfg);
void th_config_unref(th_config *cfg);

/* Checks a plugin's `config:` block against the plugin's declared keys
 * (with th_validate_params) and packs it as a msgpack map with defaults
 * filled in, appended to `out` (caller-initialized; an empty map when the
 * plugin has no block).  Errors are TH_ECONFIG, "FILE:LINE:COL: in the
 * config of plugin 'NAME': REASON", at the offending key, or at the block
 * (or the plugin entry) when a key is missing; `out` is untouched then.
 * Reads cfg only: safe from any thread. */
int th_config_plugin_block(const th_config *cfg, const th_plugin_cfg *pc,
                           const struct th_param *params, size_t n_params,
                           struct th_buf *out, th_error *err);

/* Rewrites a plugin-load error (missing file, not a shared object, init
 * failure, a tool name clash ...) to name the plugin's entry and its path
 * as the config has it, not the resolved path or the private copy's:
 * "FILE:LINE:COL: plugin 'NAME' (path ./x.so): REASON".  Messages already
 * at a place in the config (its config: block) stay as they are. */
void th_plugin_load_error(const th_config *cfg, const th_plugin_cfg *pc,
                          th_error *err);

/* Whether tool `tool` carries tag `tag` (an entry of `tags:` of that name
 * lists it, by name or pattern). */
bool th_config_tool_has_tag(const th_config *cfg, const char *tag,
                            const char *tool);
/* Whether the tag entry `t` lists `tool`. */
bool th_tag_has_tool(const th_tag_cfg *t, const char *tool);

/* Whether tool `tool` of the plugin entry named `plugin` (NULL: none, a
 * built-in) is deferred: its plugin entry says `defer: true`, or
 * `defer_tools:` names it (by name or pattern).  Reads cfg only. */
bool th_config_tool_deferred(const th_config *cfg, const char *plugin,
                             const char *tool);
/* Whether the config defers anything at all. */
bool th_config_defers(const th_config *cfg);

/* The toolset called `name`, or NULL. */
const th_toolset_cfg *th_config_toolset(const th_config *cfg,
                                        const char *name);

/* True when two plugin entries would load the same way: name, path,
 * optional, allow_insecure and an equal `config:` block (after ${}
 * expansion).  A reload keeps such a plugin running untouched (unless its
 * file changed). */
bool th_plugin_cfg_equal(const th_plugin_cfg *a, const th_plugin_cfg *b);

/* Checks, once the plugins are loaded, that every tool a toolset, an
 * override or a mock names exists.  `has_tool` answers for a name (called
 * on this thread only).  The first missing tool is a TH_ECONFIG error at
 * the line:col of its name. */
int th_config_check_tools(const th_config *cfg,
                          bool (*has_tool)(void *ud, const char *name),
                          void *ud, th_error *err);
/* The same, going on past each miss: every one is passed to report (when
 * not NULL); the result is the first. */
int th_config_check_tools_all(const th_config *cfg,
                              bool (*has_tool)(void *ud, const char *name),
                              void *ud,
                              void (*report)(void *rud, const th_error *e),
                              void *rud, th_error *err);

/* Checks, once the plugins are loaded, that every tag a toolset selects
 * is an entry of `tags:` or declared by a loaded tool (`has_tag`, on this
 * thread only): "FILE:LINE:COL: toolset 'x' selects tag 'y', which
 * neither an entry of 'tags:' nor a plugin's tool declares" (TH_ECONFIG).
 * Each miss goes to report (when not NULL) and the checks go on; the
 * result (and *err) is the first. */
int th_config_check_tags(const th_config *cfg,
                         bool (*has_tag)(void *ud, const char *tag), void *ud,
                         void (*report)(void *rud, const th_error *e),
                         void *rud, th_error *err);

/* Parsers of the value forms, shared with the CLI: "64KiB", "1MiB", "512"
 * and "500ms", "30s", "2m", "1h".  0 or TH_EINVAL.  Sizes: B, KiB, MiB,
 * GiB, TiB (x1024) and kB/KB, MB, GB, TB (x1000), fractions with a unit
 * ("1.5MiB", rounded down).  Durations: ms, s, m, h, d, fractions and sums
 * ("1h30m"); a number without a unit is refused except "0".  See
 * docs/config.md. */
int th_parse_size(const char *s, uint64_t *out);
int th_parse_duration_ms(const char *s, uint64_t *out);

/* The config name of a semantic type ("file_content", ...; "unknown"
 * outside 1..12, static storage) and back (0 when unknown). */
const char *th_sem_name(uint32_t sem);
uint32_t th_sem_from_name(const char *name);

/* The default limits (bytes per semantic type; bytes[0], for an unknown
 * type, is the text limit).  See docs/config.md for the table. */
void th_limits_defaults(th_limits *l);

#endif
