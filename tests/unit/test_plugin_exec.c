/* test_plugin_exec.c - the exec plugin through the fake host: config
 * declarations checked with messages naming tool and key; a script tool;
 * hostile arguments reaching argv unchanged; exit status and signals in
 * meta; the environment allowlist; the working folder; cancel and timeout
 * ending the whole process group (SIGTERM, then SIGKILL after the grace);
 * a flooding child streamed in bounded chunks; a missing program.
 *
 * The tools reach the fake host as they reach the real one: through the
 * plugin's init_tools() (ABI 1.1), called by th_plugin_init(). */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../plugins/exec/exec.h"
#include "common/plugin_harness.h"
#include "common/th_test.h"
#include "th/log.h"

static char *fx(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/exec/%s", name);
    return strdup(th_test_source_path(rel));
}

/* Loads exec.so with `tools_json` (the JSON list) and extra top-level keys;
 * init_tools() registers its tools.  NULL with the message in err. */
static th_harness *load(const char *tools_json, const char *extra, char *err,
                        size_t es)
{
    size_t n = strlen(tools_json) + (extra ? strlen(extra) : 0) + 64;
    char *cfg = malloc(n);
    snprintf(cfg, n, "{\"tools\": %s%s%s}", tools_json, extra ? ", " : "",
             extra ? extra : "");
    th_harness *h = th_harness_load(th_test_build_path("plugins/exec.so"),
                                    cfg, err, es);
    free(cfg);
    if (!h)
        return NULL;
    /* every declared tool, no more (init_tools() adds them once) */
    exec_state *st = th_harness_state(h);
    CU_ASSERT_EQUAL(th_harness_n_tools(h), st->n_tools);
    return h;
}

/* Loads a config that must fail and checks that every `want` is in the
 * message. */
static void bad(const char *tools_json, const char *want1, const char *want2)
{
    char err[1024] = "";
    th_harness *h = load(tools_json, NULL, err, sizeof err);
    CU_ASSERT_PTR_NULL(h);
    th_harness_unload(h);
    if (!strstr(err, want1) || (want2 && !strstr(err, want2)))
        fprintf(stderr, "\nconfig %s\n  gave: %s\n  want: %s / %s\n",
                tools_json, err, want1, want2 ? want2 : "");
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want1));
    if (want2)
        CU_ASSERT_PTR_NOT_NULL(strstr(err, want2));
}

static void test_config_errors(void)
{
    char *args = fx("args.sh");
    char buf[2048];
    bad("[{\"description\": \"d\", \"argv\": [\"/bin/true\"]}]", "tools[0]",
        "'name' is missing");
    bad("[{\"name\": \"t1\", \"description\": \"d\"}]", "tool 't1'",
        "key 'argv' is missing");
    bad("[{\"name\": \"t1\", \"description\": \"d\", \"argv\": [\"true\"]}]",
        "tool 't1'", "absolute path");
    bad("[{\"name\": \"t1\", \"description\": \"d\", \"argv\": "
        "[\"/no/such/program\"]}]",
        "'/no/such/program' cannot be run", "No such file");
    snprintf(buf, sizeof buf,
             "[{\"name\": \"t2\", \"description\": \"d\", \"argv\": [\"%s\", "
             "\"--x={p}\"], \"params\": [{\"name\": \"p\", \"description\": "
             "\"d\"}]}]",
             args);
    bad(buf, "tool 't2'", "placeholder '{p}' must be a whole element");
    snprintf(buf, sizeof buf,
             "[{\"name\": \"t2b\", \"description\": \"d\", \"argv\": "
             "[\"%s\", \"/var/log/{file}\", \"{}\", \"{print $1}\"]}]",
             args);
    bad(buf, "tool 't2b': key 'argv': element 2: placeholder '{file}'",
        "no parameter of that name");
    snprintf(buf, sizeof buf,
             "[{\"name\": \"t3\", \"description\": \"d\", \"argv\": [\"%s\", "
             "\"{q}\"]}]",
             args);
    bad(buf, "tool 't3'", "'{q}' names no declared parameter");
    snprintf(buf, sizeof buf,
             "[{\"name\": \"t4\", \"description\": \"d\", \"argv\": [\"%s\"], "
             "\"params\": [{\"name\": \"p\", \"description\": \"d\"}]}]",
             args);
    bad(buf, "tool 't4'", "parameter 'p' is used neither");
    snprintf(buf, sizeof buf,
             "[{\"name\": \"t5\", \"description\": \"d\", \"argv\": [\"%s\"], "
             "\"shell\": true}]",
             args);
    bad(buf, "tool 't5'", "unknown key 'shell'");
    snprintf(buf, sizeof buf,
             "[{\"name\": \"t6\", \"description\": \"d\", \"argv\": [\"%s\"], "
             "\"timeout\": \"soon\"}]",
             args);
    bad(buf, "tool 't6'", "key 'timeout'");
    snprintf(buf, sizeof buf,
             "[{\"name\": \"t7\", \"description\": \"d\", \"argv\": [\"%s\", "
             "\"{p}\"], \"params\": [{\"name\": \"p\", \"type\": \"array\", "
             "\"description\": \"d\"}]}]",
             args);
    bad(buf, "tool 't7': parameter 'p'", "key 'type'");
    snprintf(buf, sizeof buf,
             "[{\"name\": \"t8\", \"description\": \"d\", \"argv\": [\"%s\"], "
             "\"env\": {\"PATH\": \"/tmp\"}}]",
             args);
    bad(buf, "tool 't8'", "key 'env'");
    snprintf(buf, sizeof buf,
             "[{\"name\": \"t9\", \"description\": \"d\", \"argv\": [\"%s\"], "
             "\"stdout\": \"poetry\"}]",
             args);
    bad(buf, "tool 't9'", "key 'stdout' must be a semantic type");
    snprintf(buf, sizeof buf,
             "[{\"name\": \"dup\", \"description\": \"d\", \"argv\": [\"%s\"]},"
             " {\"name\": \"dup\", \"description\": \"d\", \"argv\": "
             "[\"%s\"]}]",
             args, args);
    bad(buf, "tool 'dup' is declared twice", NULL);
    bad("[{\"name\": \"t10\", \"description\": \"d\", \"argv\": "
        "[\"/bin/true\"], \"cwd\": \"/no/such/folder\"}]",
        "tool 't10': key 'cwd'", "not a folder");
    /* The host's own check of the block: tools must be a list of objects. */
    char err[1024] = "";
    th_harness *h = th_harness_load(th_test_build_path("plugins/exec.so"),
                                    "{\"tools\": [1]}", err, sizeof err);
    CU_ASSERT_PTR_NULL(h);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "tools"));
    /* No tools key: zero tools (what `toolhost check` tries). */
    h = th_harness_load(th_test_build_path("plugins/exec.so"), "{}", err,
                        sizeof err);
    CU_ASSERT_PTR_NOT_NULL(h);
    CU_ASSERT_EQUAL(h ? th_harness_n_tools(h) : 1, 0);
    th_harness_unload(h);
    free(args);
}

static th_harness *args_tool(void)
{
    char *args = fx("args.sh");
    char buf[2048], err[1024];
    snprintf(buf, sizeof buf,
             "[{\"name\": \"show_args\", \"description\": \"Shows its "
             "arguments\", \"argv\": [\"%s\", \"-n\", \"{pattern}\", "
             "\"{count}\", \"{flag}\", \"{mode}\"], \"read_only\": true, "
             "\"idempotent\": true, \"stdout\": \"search_results\", "
             "\"params\": [{\"name\": \"pattern\", \"description\": \"what "
             "to find\", \"required\": true}, {\"name\": \"count\", \"type\": "
             "\"integer\", \"description\": \"how many\", \"default\": 3}, "
             "{\"name\": \"flag\", \"type\": \"boolean\", \"description\": "
             "\"a flag\"}, {\"name\": \"mode\", \"description\": \"mode\", "
             "\"enum\": [\"fast\", \"slow\"]}]}]",
             args);
    free(args);
    th_harness *h = load(buf, NULL, err, sizeof err);
    if (!h)
        fprintf(stderr, "exec.so: %s\n", err);
    return h;
}

/* tags: of a declaration (ABI 1.5): on the tool as declared; the host
 * checks the names as for any plugin. */
static void test_tags(void)
{
    char buf[1024], err[1024] = "";
    snprintf(buf, sizeof buf,
             "[{\"name\": \"tg\", \"description\": \"d\", \"argv\": "
             "[\"/bin/true\"], \"tags\": [\"commands\", \"read-only\"]}]");
    th_harness *h = load(buf, NULL, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    const toolhost_tool *t = th_harness_tool(h, "tg");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t->tags);
    CU_ASSERT_STRING_EQUAL(t->tags[0], "commands");
    CU_ASSERT_STRING_EQUAL(t->tags[1], "read-only");
    CU_ASSERT_PTR_NULL(t->tags[2]);
    th_harness_unload(h);
    bad("[{\"name\": \"tg\", \"description\": \"d\", \"argv\": "
        "[\"/bin/true\"], \"tags\": \"commands\"}]",
        "tool 'tg'", "key 'tags' must be a list of at most 16 tag names");
    bad("[{\"name\": \"tg\", \"description\": \"d\", \"argv\": "
        "[\"/bin/true\"], \"tags\": [1]}]",
        "tool 'tg'", "key 'tags': element 1 is not a string");
    bad("[{\"name\": \"tg\", \"description\": \"d\", \"argv\": "
        "[\"/bin/true\"], \"tags\": [\"Not Ok\"]}]",
        "tool 'tg'", "invalid tag 'Not Ok'");
}

static void test_script_tool(void)
{
    th_harness *h = args_tool();
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    const toolhost_tool *t = th_harness_tool(h, "show_args");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->flags, TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT);
    CU_ASSERT_EQUAL(t->stdout_type, TOOLHOST_SEM_SEARCH_RESULTS);
    CU_ASSERT_EQUAL(t->stderr_type, TOOLHOST_SEM_ERROR);
    th_harness_call c;
    /* default filled in (count 3), absent optional dropped (flag, mode) */
    int rc = th_harness_run(h, "show_args", "{\"pattern\": \"x y\"}", 0, &c);
    CU_ASSERT_EQUAL(rc, TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "[-n]\n[x y]\n[3]\n");
    int64_t code = -1;
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "exit_code", &code), 0);
    CU_ASSERT_EQUAL(code, 0);
    th_harness_call_free(&c);
    rc = th_harness_run(h, "show_args",
                        "{\"pattern\": \"p\", \"count\": -7, \"flag\": false, "
                        "\"mode\": \"slow\"}",
                        0, &c);
    CU_ASSERT_EQUAL(rc, TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c),
                           "[-n]\n[p]\n[-7]\n[false]\n[slow]\n");
    th_harness_call_free(&c);
    /* the host validates the declared types and enums */
    rc = th_harness_run(h, "show_args", "{\"pattern\": \"p\", \"mode\": \"x\"}",
                        0, &c);
    CU_ASSERT_EQUAL(rc, TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verr, "mode"));
    th_harness_call_free(&c);
    rc = th_harness_run(h, "show_args", "{}", 0, &c);
    CU_ASSERT_EQUAL(rc, TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verr, "pattern"));
    th_harness_call_free(&c);
    /* a NUL cannot be passed in argv: refused before anything runs */
    rc = th_harness_run(h, "show_args", "{\"pattern\": \"a\\u0000b\"}", 0, &c);
    CU_ASSERT_EQUAL(rc, TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verr, "NUL"));
    th_harness_call_free(&c);
    th_harness_unload(h);
}

static void test_hostile_arguments(void)
{
    th_harness *h = args_tool();
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    char *dir = th_test_tmpdir();
    char canary[4096];
    snprintf(canary, sizeof canary, "%s/pwned", dir);
    const char *hostile[] = {
        "; rm -rf /",    "$(touch CANARY)", "`touch CANARY`",
        "a\nb\n",        "-rf",             "--help",
        "* ? [a-z]",     "'\"\\",           "x && touch CANARY | cat",
        "$HOME ${PATH}", "",                " leading space",
    };
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        /* replace CANARY by a path in the temp folder */
        char arg[8192] = "";
        const char *s = hostile[i], *p;
        while ((p = strstr(s, "CANARY"))) {
            strncat(arg, s, (size_t)(p - s));
            strcat(arg, canary);
            s = p + 6;
        }
        strcat(arg, s);
        json_t *j = json_pack("{s:s}", "pattern", arg);
        char *js = json_dumps(j, 0);
        th_harness_call c;
        int rc = th_harness_run(h, "show_args", js, 0, &c);
        CU_ASSERT_EQUAL(rc, TOOLHOST_OK);
        char want[8400];
        snprintf(want, sizeof want, "[-n]\n[%s]\n[3]\n", arg);
        if (strcmp(th_harness_out(&c), want) != 0)
            fprintf(stderr, "\nargument %s came out as %s\n", js,
                    th_harness_out(&c));
        CU_ASSERT_STRING_EQUAL(th_harness_out(&c), want);
        th_harness_call_free(&c);
        free(js);
        json_decref(j);
    }
    CU_ASSERT_EQUAL(access(canary, F_OK), -1);
    th_test_rmtree(dir);
    free(dir);
    th_harness_unload(h);
}

static void test_exit_status_and_signal(void)
{
    char *st = fx("status.sh");
    char buf[2048], err[1024];
    snprintf(buf, sizeof buf,
             "[{\"name\": \"st\", \"description\": \"exits\", \"argv\": "
             "[\"%s\", \"{code}\", \"{sig}\"], \"params\": [{\"name\": "
             "\"code\", \"type\": \"integer\", \"description\": \"status\", "
             "\"required\": true}, {\"name\": \"sig\", \"description\": "
             "\"signal\"}]}]",
             st);
    free(st);
    th_harness *h = load(buf, NULL, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    th_harness_call c;
    int rc = th_harness_run(h, "st", "{\"code\": 3}", 0, &c);
    CU_ASSERT_EQUAL(rc, TOOLHOST_FAILED);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "to stdout\n");
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "to stderr\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "exited with status 3"));
    int64_t v = -1;
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "exit_code", &v), 0);
    CU_ASSERT_EQUAL(v, 3);
    bool b = true;
    CU_ASSERT_EQUAL(th_harness_meta_bool(&c, "timed_out", &b), 0);
    CU_ASSERT_FALSE(b);
    th_harness_call_free(&c);
    rc = th_harness_run(h, "st", "{\"code\": 0, \"sig\": \"TERM\"}", 0, &c);
    CU_ASSERT_EQUAL(rc, TOOLHOST_FAILED);
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "signal", &v), 0);
    CU_ASSERT_EQUAL(v, SIGTERM);
    CU_ASSERT_EQUAL(th_harness_meta_int(&c, "exit_code", &v), -1);
    char name[32];
    CU_ASSERT_EQUAL(th_harness_meta_str(&c, "signal_name", name, sizeof name),
                    0);
    CU_ASSERT_STRING_EQUAL(name, "SIGTERM");
    th_harness_call_free(&c);
    th_harness_unload(h);
}

static void test_env_allowlist(void)
{
    setenv("TH_EXEC_ALLOWED", "yes", 1);
    setenv("TH_EXEC_SECRET", "must not leak", 1);
    char err[1024];
    th_harness *h = load(
        "[{\"name\": \"show_env\", \"description\": \"env\", \"argv\": "
        "[\"/usr/bin/env\"], \"env_allow\": [\"TH_EXEC_ALLOWED\", "
        "\"TH_EXEC_UNSET\"], \"env\": {\"FROM_ARG\": \"{v}\", \"FIXED\": "
        "\"lit {} $x\"}, \"params\": [{\"name\": \"v\", \"description\": "
        "\"a value\"}]}]",
        "\"path\": \"/usr/bin:/bin\"", err, sizeof err);
    if (!h)
        fprintf(stderr, "%s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    th_harness_call c;
    int rc = th_harness_run(h, "show_env", "{\"v\": \"a b;$(c)\\nd\"}", 0, &c);
    CU_ASSERT_EQUAL(rc, TOOLHOST_OK);
    const char *out = th_harness_out(&c);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "PATH=/usr/bin:/bin\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "TH_EXEC_ALLOWED=yes\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "FROM_ARG=a b;$(c)\nd\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "FIXED=lit {} $x\n"));
    CU_ASSERT_PTR_NULL(strstr(out, "SECRET"));
    CU_ASSERT_PTR_NULL(strstr(out, "TH_EXEC_UNSET"));
    CU_ASSERT_PTR_NULL(strstr(out, "HOME="));
    /* five lines: the four variables, one value holding a newline */
    int lines = 0;
    for (const char *p = out; *p; p++)
        lines += *p == '\n';
    CU_ASSERT_EQUAL(lines, 5);
    th_harness_call_free(&c);
    /* an absent argument leaves its variable unset */
    rc = th_harness_run(h, "show_env", "{}", 0, &c);
    CU_ASSERT_EQUAL(rc, TOOLHOST_OK);
    CU_ASSERT_PTR_NULL(strstr(th_harness_out(&c), "FROM_ARG"));
    th_harness_call_free(&c);
    th_harness_unload(h);
    unsetenv("TH_EXEC_ALLOWED");
    unsetenv("TH_EXEC_SECRET");
}

static void test_cwd(void)
{
    char *dir = th_test_tmpdir();
    char *real = realpath(dir, NULL);
    char *pw = fx("pwd.sh");
    char buf[4096], err[1024];
    snprintf(buf, sizeof buf,
             "[{\"name\": \"where\", \"description\": \"pwd\", \"argv\": "
             "[\"%s\"], \"cwd\": \"%s\"}, {\"name\": \"where_default\", "
             "\"description\": \"pwd\", \"argv\": [\"%s\"]}]",
             pw, dir, pw);
    th_harness *h = load(buf, NULL, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(h, "where", NULL, 0, &c), TOOLHOST_OK);
    char want[4200];
    snprintf(want, sizeof want, "%s\n", real);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), want);
    th_harness_call_free(&c);
    CU_ASSERT_EQUAL(th_harness_run(h, "where_default", NULL, 0, &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "/\n");
    th_harness_call_free(&c);
    th_harness_unload(h);
    th_test_rmtree(dir);
    free(dir);
    free(real);
    free(pw);
}

/* ---- a call of our own: cancel on a cue, count without keeping ---------- */

typedef struct my_call {
    th_call_base base;
    atomic_int cancelled;
    const char *cancel_on;  /* cancel once stdout holds this */
    char head[4096];        /* the first bytes of stdout */
    size_t head_len;
    uint64_t bytes;         /* every byte written */
    size_t max_chunk;
    uint8_t meta[512];
    size_t meta_len;
} my_call;

static int my_write(toolhost_call *call, int stream, const void *data,
                    size_t len)
{
    my_call *c = (my_call *)call;
    c->bytes += len;
    if (len > c->max_chunk)
        c->max_chunk = len;
    if (stream == TOOLHOST_STDOUT && c->head_len < sizeof c->head - 1) {
        size_t n = len < sizeof c->head - 1 - c->head_len
                       ? len
                       : sizeof c->head - 1 - c->head_len;
        memcpy(c->head + c->head_len, data, n);
        c->head_len += n;
        c->head[c->head_len] = '\0';
    }
    if (c->cancel_on && strstr(c->head, c->cancel_on))
        atomic_store(&c->cancelled, 1);
    return atomic_load(&c->cancelled) ? TOOLHOST_ECANCELLED : 0;
}

static int my_set_meta(toolhost_call *call, const uint8_t *map, size_t len)
{
    my_call *c = (my_call *)call;
    if (len <= sizeof c->meta) {
        memcpy(c->meta, map, len);
        c->meta_len = len;
    }
    return 0;
}

static int my_cancelled(const toolhost_call *call)
{
    return atomic_load(&((my_call *)call)->cancelled);
}

static int64_t my_left(const toolhost_call *call)
{
    (void)call;
    return -1;
}

static const th_call_vtbl my_vt = {.write = my_write,
                                   .set_meta = my_set_meta,
                                   .is_cancelled = my_cancelled,
                                   .time_left_ms = my_left};

static int64_t ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs a tool on my_call, cancelled once stdout holds `cancel_on`. */
static int run_mine(th_harness *h, const char *tool, const char *args_json,
                    const char *cancel_on, my_call *c)
{
    memset(c, 0, sizeof *c);
    c->cancel_on = cancel_on;
    c->base.pub.struct_size = sizeof c->base.pub;
    c->base.pub.host = th_harness_api(h);
    c->base.pub.call_id = 42;
    c->base.vt = &my_vt;
    const toolhost_tool *t = th_harness_tool(h, tool);
    th_buf a = TH_BUF_INIT;
    th_harness_json_to_mp(args_json ? args_json : "{}", &a);
    int rc = t->execute(th_harness_state(h), t, &c->base.pub, a.data, a.len);
    th_buf_destroy(&a);
    return rc;
}

/* Processes (not zombies) left in process group `pgid`, from /proc. */
static int group_alive(long pgid)
{
    int n = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        char path[300], line[1024];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t r = fread(line, 1, sizeof line - 1, f);
        fclose(f);
        line[r] = '\0';
        /* pid (comm) state ppid pgrp ... ; comm may hold spaces */
        char *p = strrchr(line, ')');
        char state;
        long ppid, pgrp;
        if (p && sscanf(p + 1, " %c %ld %ld", &state, &ppid, &pgrp) == 3 &&
            pgrp == pgid && state != 'Z')
            n++;
    }
    closedir(d);
    return n;
}

/* Waits (bounded) until the group has no live process. */
static bool group_gone(long pgid)
{
    for (int i = 0; i < 200; i++) {
        if (group_alive(pgid) == 0)
            return true;
        usleep(10000);
    }
    return false;
}

static th_harness *hang_tool(const char *timeout, const char *grace)
{
    char *hang = fx("hang.sh");
    char buf[2048], extra[128], err[1024];
    snprintf(buf, sizeof buf,
             "[{\"name\": \"hang\", \"description\": \"hangs\", \"argv\": "
             "[\"%s\", \"{mode}\"], \"params\": [{\"name\": \"mode\", "
             "\"description\": \"mode\", \"enum\": [\"stubborn\"]}]%s%s%s}]",
             hang, timeout ? ", \"timeout\": \"" : "", timeout ? timeout : "",
             timeout ? "\"" : "");
    snprintf(extra, sizeof extra, "\"kill_grace\": \"%s\"", grace);
    free(hang);
    th_harness *h = load(buf, extra, err, sizeof err);
    if (!h)
        fprintf(stderr, "%s\n", err);
    return h;
}

static long pgid_of(const my_call *c)
{
    const char *p = strstr(c->head, "pgid ");
    return p ? strtol(p + 5, NULL, 10) : -1;
}

static bool meta_has(const my_call *c, const char *key_value)
{
    /* msgpack fixstr key then the value; a byte search is enough here */
    return memmem(c->meta, c->meta_len, key_value, strlen(key_value)) != NULL;
}

static void test_cancel_kills_group(void)
{
    th_test_timeout(30);
    th_harness *h = hang_tool(NULL, "2s");
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    my_call c;
    /* cancelled as soon as it printed its group: SIGTERM ends it */
    int64_t t0 = ms_now();
    int rc = run_mine(h, "hang", NULL, "pgid ", &c);
    int64_t took = ms_now() - t0;
    CU_ASSERT_EQUAL(rc, TOOLHOST_FAILED);
    CU_ASSERT(took < 2000); /* no grace spent */
    CU_ASSERT(meta_has(&c, "\xa9" "cancelled\xc3"));
    CU_ASSERT(meta_has(&c, "\xa6" "signal\x0f")); /* SIGTERM */
    long pgid = pgid_of(&c);
    CU_ASSERT(pgid > 1);
    if (pgid > 1)
        CU_ASSERT(group_gone(pgid));
    th_harness_unload(h);
}

static void test_cancel_stubborn_gets_sigkill(void)
{
    th_test_timeout(30);
    th_harness *h = hang_tool(NULL, "300ms");
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    my_call c;
    int64_t t0 = ms_now();
    int rc = run_mine(h, "hang", "{\"mode\": \"stubborn\"}", "pgid ", &c);
    int64_t took = ms_now() - t0;
    CU_ASSERT_EQUAL(rc, TOOLHOST_FAILED);
    CU_ASSERT(took >= 300 && took < 5000);
    CU_ASSERT(meta_has(&c, "\xa6" "signal\x09")); /* SIGKILL */
    long pgid = pgid_of(&c);
    CU_ASSERT(pgid > 1);
    if (pgid > 1)
        CU_ASSERT(group_gone(pgid));
    th_harness_unload(h);
}

static void test_timeout(void)
{
    th_test_timeout(30);
    th_harness *h = hang_tool("300ms", "200ms");
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    my_call c;
    int64_t t0 = ms_now();
    int rc = run_mine(h, "hang", "{\"mode\": \"stubborn\"}", NULL, &c);
    int64_t took = ms_now() - t0;
    CU_ASSERT_EQUAL(rc, TOOLHOST_FAILED);
    CU_ASSERT(took >= 300 && took < 5000);
    CU_ASSERT(meta_has(&c, "\xa9" "timed_out\xc3"));
    long pgid = pgid_of(&c);
    CU_ASSERT(pgid > 1);
    if (pgid > 1)
        CU_ASSERT(group_gone(pgid));
    th_harness_unload(h);
}

static long maxrss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static void test_flood_is_streamed(void)
{
    th_test_timeout(60);
    char err[1024];
    th_harness *h = load(
        "[{\"name\": \"flood\", \"description\": \"floods\", \"argv\": "
        "[\"/usr/bin/head\", \"-c\", \"{n}\", \"/dev/zero\"], \"params\": "
        "[{\"name\": \"n\", \"type\": \"integer\", \"description\": "
        "\"bytes\", \"required\": true}]}, {\"name\": \"yes\", "
        "\"description\": \"forever\", \"argv\": [\"/usr/bin/yes\"], "
        "\"timeout\": \"500ms\"}]",
        NULL, err, sizeof err);
    if (!h)
        fprintf(stderr, "%s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    long before = maxrss_kb();
    my_call c;
    int rc = run_mine(h, "flood", "{\"n\": 200000000}", NULL, &c);
    CU_ASSERT_EQUAL(rc, TOOLHOST_OK);
    CU_ASSERT_EQUAL(c.bytes, 200000000u);
    CU_ASSERT(c.max_chunk <= 65536);
    /* an endless writer ends at its timeout */
    rc = run_mine(h, "yes", NULL, NULL, &c);
    CU_ASSERT_EQUAL(rc, TOOLHOST_FAILED);
    CU_ASSERT(c.bytes > 0);
    CU_ASSERT(meta_has(&c, "\xa9" "timed_out\xc3"));
    long grew = maxrss_kb() - before;
    if (grew >= 32 * 1024)
        fprintf(stderr, "\nmax RSS grew by %ld KiB\n", grew);
    CU_ASSERT(grew < 32 * 1024);
    th_harness_unload(h);
}

static void test_missing_program(void)
{
    char *dir = th_test_tmpdir();
    char *prog = th_test_write_file(dir, "gone.sh", "#!/bin/sh\necho hi\n",
                                    (size_t)-1);
    chmod(prog, 0755);
    char buf[4096], err[1024];
    snprintf(buf, sizeof buf,
             "[{\"name\": \"gone\", \"description\": \"d\", \"argv\": "
             "[\"%s\"]}]",
             prog);
    th_harness *h = load(buf, NULL, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(h, "gone", NULL, 0, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "hi\n");
    th_harness_call_free(&c);
    unlink(prog);
    CU_ASSERT_EQUAL(th_harness_run(h, "gone", NULL, 0, &c), TOOLHOST_FAILED);
    const char *e = th_harness_err(&c);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, "exec: gone: cannot run "));
    CU_ASSERT_PTR_NOT_NULL(strstr(e, prog));
    CU_ASSERT_PTR_NOT_NULL(strstr(e, "No such file or directory"));
    th_harness_call_free(&c);
    th_harness_unload(h);
    th_test_rmtree(dir);
    free(dir);
    free(prog);
}

/* Calls run concurrently (the Call class): each gets its own child, its
 * own output and its own status. */
typedef struct conc_arg {
    th_harness *h;
    int n;
    int ok;
} conc_arg;

static void *conc_main(void *p)
{
    conc_arg *a = p;
    a->ok = 1;
    for (int i = 0; i < 10; i++) {
        char args[64], want[96];
        snprintf(args, sizeof args, "{\"pattern\": \"t%d-%d\"}", a->n, i);
        snprintf(want, sizeof want, "[-n]\n[t%d-%d]\n[3]\n", a->n, i);
        th_harness_call c;
        int rc = th_harness_run(a->h, "show_args", args, 0, &c);
        if (rc != TOOLHOST_OK || strcmp(th_harness_out(&c), want) != 0)
            a->ok = 0;
        th_harness_call_free(&c);
    }
    return NULL;
}

static void test_concurrent_calls(void)
{
    th_test_timeout(60);
    th_harness *h = args_tool();
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    pthread_t t[4];
    conc_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (conc_arg){h, i, 0};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, conc_main, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CU_ASSERT(a[i].ok);
    }
    th_harness_unload(h);
}

/* ---- ABI 1.3 cages on an older host ------------------------------------------- */

static int g_poisoned; /* cage members read beyond the host's struct_size */

static toolhost_cage *poison_open(const toolhost_host_api *host,
                                  const char *label, uint64_t mem, char *why,
                                  size_t cap)
{
    (void)host, (void)label, (void)mem, (void)why, (void)cap;
    g_poisoned++;
    return NULL;
}

/* A 1.2 host: its api ends before cage_open (whatever lies there). */
static void as_host_12(toolhost_host_api *api)
{
    api->struct_size = (uint32_t)offsetof(toolhost_host_api, cage_open);
    api->abi_minor = 2;
    api->cage_open = poison_open;
}

/* exec (built for 1.3) on a 1.2 host: it reads no cage member, runs its
 * command with the keeper alone and says so in the log. */
static void test_host_12_no_cage(void)
{
    char *dir = th_test_tmpdir();
    char lpath[1100];
    snprintf(lpath, sizeof lpath, "%s/log", dir);
    int lfd = open(lpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CU_ASSERT_FATAL(lfd >= 0);
    th_log_set_fd(lfd);
    int level = th_log_get_level();
    th_log_set_level(TOOLHOST_LOG_INFO);
    g_poisoned = 0;
    char err[1024] = "";
    th_harness *h = th_harness_load_with(
        th_test_build_path("plugins/exec.so"),
        "{\"tools\": [{\"name\": \"hi\", \"description\": \"d\", "
        "\"argv\": [\"/bin/echo\", \"hi\"]}]}",
        as_host_12, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(h, "hi", NULL, 0, &c), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "hi\n");
    th_harness_call_free(&c);
    th_harness_unload(h);
    th_log_set_fd(2);
    th_log_set_level(level);
    CU_ASSERT_EQUAL(g_poisoned, 0);
    char text[8192] = "";
    ssize_t n = pread(lfd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = '\0';
    close(lfd);
    if (!strstr(text, "no cgroup: the host gives no cages (ABI 1.2)"))
        fprintf(stderr, "\nlog: %s\n", text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "commands contained by the call's "
                                        "keeper only"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(text, "no cgroup: the host gives no cages (ABI 1.2)"));
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_plugin_exec(void)
{
    CU_pSuite s = CU_add_suite("plugin_exec", NULL, NULL);
    CU_add_test(s, "config_errors", test_config_errors);
    CU_add_test(s, "script_tool", test_script_tool);
    CU_add_test(s, "tags", test_tags);
    CU_add_test(s, "hostile_arguments", test_hostile_arguments);
    CU_add_test(s, "exit_status_and_signal", test_exit_status_and_signal);
    CU_add_test(s, "env_allowlist", test_env_allowlist);
    CU_add_test(s, "cwd", test_cwd);
    CU_add_test(s, "cancel_kills_group", test_cancel_kills_group);
    CU_add_test(s, "cancel_stubborn_gets_sigkill",
                test_cancel_stubborn_gets_sigkill);
    CU_add_test(s, "timeout", test_timeout);
    CU_add_test(s, "flood_is_streamed", test_flood_is_streamed);
    CU_add_test(s, "missing_program", test_missing_program);
    CU_add_test(s, "concurrent_calls", test_concurrent_calls);
    CU_add_test(s, "host_12_no_cage", test_host_12_no_cage);
}
