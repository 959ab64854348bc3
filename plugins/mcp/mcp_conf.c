/* mcp_conf.c - the mcp plugin's config block (servers) and the toolhost
 * tools built from each server's tools/list.
 *
 * The host checks the block's top-level keys against the descriptor's
 * table; each server's keys are checked here, every message naming the
 * server and the key.  A server's tool that toolhost cannot carry as it
 * is (a name outside ^[a-zA-Z0-9_-]{1,64}$, a schema keyword the host's
 * validator does not know) is renamed or left out with a log line naming
 * it: one odd tool does not cost the server's others. */
#include <curl/curl.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "../shared/mp_json.h"
#include "mcpsrc.h"
#include "toolhost/sdk.h"

#define MAX_SERVERS 64
#define MAX_ARGV 256
#define MAX_ENV 256

extern char **environ;

int64_t mcpsrc_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t mcpsrc_now_ms(void)
{
    return mcpsrc_now_us() / 1000;
}


/* "500ms", "30s", "2m", "1h", "0", or a whole number of seconds; -1 when
 * bad. */
int64_t mcpsrc_duration(const json_t *v)
{
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        return n >= 0 && n <= 86400 * 365 ? (int64_t)n * 1000 : -1;
    }
    const char *s = json_string_value(v);
    if (!s || !s[0] || strlen(s) > 31)
        return -1;
    if (strcmp(s, "0") == 0)
        return 0;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    if (end == s || errno || s[0] == '-' || n > 86400ull * 365 * 1000)
        return -1;
    if (strcmp(end, "ms") == 0)
        return (int64_t)n;
    if (strcmp(end, "s") == 0)
        return (int64_t)n * 1000;
    if (strcmp(end, "m") == 0)
        return (int64_t)n * 60000;
    if (strcmp(end, "h") == 0)
        return (int64_t)n * 3600000;
    return -1;
}

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static bool env_name_ok(const char *s)
{
    if (!s[0] || (s[0] >= '0' && s[0] <= '9') || strlen(s) > 255)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

static char *pair(const char *name, const char *value)
{
    size_t n = strlen(name), m = strlen(value);
    char *p = malloc(n + m + 2);
    if (p) {
        memcpy(p, name, n);
        p[n] = '=';
        memcpy(p + n + 1, value, m + 1);
    }
    return p;
}

/* The command's path: as written when it holds a '/', else the first
 * executable of that name in `path`. */
static char *find_command(const char *cmd, const char *path)
{
    if (strchr(cmd, '/'))
        return strdup(cmd);
    const char *p = path;
    while (*p) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > 0 && n < 3000) {
            char buf[4096];
            snprintf(buf, sizeof buf, "%.*s/%s", (int)n, p, cmd);
            if (access(buf, X_OK) == 0)
                return strdup(buf);
        }
        if (!e)
            break;
        p = e + 1;
    }
    errno = ENOENT;
    return NULL;
}

static const char *const server_keys[] = {
    "name",    "command",         "env",  "cwd", "prefix",
    "timeout", "max_concurrency", "max_waiting", "user", "url", "headers",
    "oauth",   "busy_poll_us", NULL};

static int http_parse(mcp_srv *s, const json_t *o, const char *who,
                      char *err, size_t es)
{
    const char *url = json_string_value(json_object_get(o, "url"));
    if (!url || (strncmp(url, "http://", 7) && strncmp(url, "https://", 8)))
        return th_sdk_errf(err, es, "%s: 'url' must be an http:// or https:// URL",
                    who);
    static const char *const stdio_only[] = {"command", "env", "cwd", "user",
                                             "busy_poll_us", NULL};
    for (const char *const *k = stdio_only; *k; k++)
        if (json_object_get(o, *k))
            return th_sdk_errf(err, es,
                        "%s: '%s' is for a stdio server (command:), not one "
                        "with url:",
                        who, *k);
    if (!(s->url = strdup(url)))
        return th_sdk_errf(err, es, "out of memory");
    const json_t *h = json_object_get(o, "headers");
    if (h && !json_is_object(h))
        return th_sdk_errf(err, es, "%s: 'headers' must be a map of header names "
                    "to values", who);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)h, k, v)
    {
        bool ok = k[0] && strlen(k) < 128;
        for (const char *c = k; ok && *c; c++)
            ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                 (*c >= '0' && *c <= '9') || *c == '-' || *c == '_';
        if (!ok || !json_is_string(v))
            return th_sdk_errf(err, es,
                        "%s: headers: '%.64s' must be a header name "
                        "(letters, digits, -) with a string value",
                        who, k);
        /* ${NAME} in the value: the host's config reader has put the
         * environment's value there already */
        const char *val = json_string_value(v);
        if (strpbrk(val, "\r\n") || strlen(val) != json_string_length(v))
            return th_sdk_errf(err, es,
                        "%s: headers: %s: its value holds a line break or a "
                        "NUL byte",
                        who, k);
        size_t n = strlen(k) + strlen(val) + 3;
        char *line = malloc(n);
        if (line)
            snprintf(line, n, "%s: %s", k, val);
        struct curl_slist *l = line ? curl_slist_append(s->headers, line)
                                    : NULL;
        free(line);
        if (!l)
            return th_sdk_errf(err, es, "out of memory");
        s->headers = l;
    }
    const json_t *oa = json_object_get(o, "oauth");
    if (oa && mcpsrc_oauth_parse(s, oa, who, err, es) != 0)
        return -1;
    return 0;
}

static int server_parse(mcp_state *st, mcp_srv *s, const json_t *o,
                        size_t idx, char *err, size_t es)
{
    char who[96];
    if (!json_is_object(o))
        return th_sdk_errf(err, es, "servers[%zu]: must be a map", idx);
    const char *name = json_string_value(json_object_get(o, "name"));
    if (!name)
        return th_sdk_errf(err, es, "servers[%zu]: 'name' is required (a string)",
                    idx);
    size_t nl = strlen(name);
    bool ok = nl >= 1 && nl <= 32;
    for (size_t i = 0; ok && i < nl; i++)
        ok = name_char(name[i]);
    if (!ok)
        return th_sdk_errf(err, es,
                    "servers[%zu]: name '%.64s' must be 1 to 32 letters, "
                    "digits, _ or -",
                    idx, name);
    snprintf(who, sizeof who, "server '%s'", name);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        bool known = false;
        for (const char *const *kk = server_keys; *kk; kk++)
            known = known || strcmp(*kk, k) == 0;
        if (!known)
            return th_sdk_errf(err, es,
                        "%s: unknown key '%.64s' (known: name, command, env, "
                        "cwd, prefix, timeout, max_concurrency, max_waiting, "
                        "busy_poll_us, user, url, headers, oauth)",
                        who, k);
    }
    if (!(s->name = strdup(name)))
        return th_sdk_errf(err, es, "out of memory");
    const json_t *cmd = json_object_get(o, "command");
    if (json_object_get(o, "url")) {
        if (http_parse(s, o, who, err, es) != 0)
            return -1;
        goto common;
    }
    if (json_object_get(o, "headers") || json_object_get(o, "oauth"))
        return th_sdk_errf(err, es, "%s: '%s' is for a server with url:", who,
                           json_object_get(o, "headers") ? "headers"
                                                         : "oauth");
    /* command */
    if (!json_is_array(cmd) || json_array_size(cmd) == 0 ||
        json_array_size(cmd) > MAX_ARGV)
        return th_sdk_errf(err, es,
                    "%s: 'command' (a list of 1 to %d strings: the "
                    "program, then its arguments) or 'url' is required",
                    who, MAX_ARGV);
    if (!(s->argv = calloc(json_array_size(cmd) + 1, sizeof *s->argv)))
        return th_sdk_errf(err, es, "out of memory");
    size_t i;
    json_array_foreach(cmd, i, v)
    {
        const char *a = json_string_value(v);
        if (!a || strlen(a) != json_string_length(v))
            return th_sdk_errf(err, es,
                        "%s: command[%zu] must be a string without NUL bytes",
                        who, i);
        if (i == 0) {
            if (!a[0])
                return th_sdk_errf(err, es, "%s: command[0] is empty", who);
            if (!(s->argv[0] = find_command(a, st->path)))
                return th_sdk_errf(err, es,
                            "%s: command '%.200s' is not found in path %.200s",
                            who, a, st->path);
        } else if (!(s->argv[i] = strdup(a))) {
            return th_sdk_errf(err, es, "out of memory");
        }
    }
    /* env: a list of names passed through from the host's environment, or
     * a map of fixed values (then PATH too unless it sets it). */
    const json_t *env = json_object_get(o, "env");
    size_t n_env = json_is_array(env)    ? json_array_size(env)
                   : json_is_object(env) ? json_object_size(env)
                                         : 0;
    if (env && !json_is_array(env) && !json_is_object(env))
        return th_sdk_errf(err, es,
                    "%s: 'env' must be a list of variable names (passed "
                    "through from the host's environment) or a map of "
                    "fixed values",
                    who);
    if (n_env > MAX_ENV)
        return th_sdk_errf(err, es, "%s: 'env' has more than %d entries", who,
                    MAX_ENV);
    if (!(s->envp = calloc(n_env + 2, sizeof *s->envp)))
        return th_sdk_errf(err, es, "out of memory");
    size_t ne = 0;
    bool has_path = false;
    if (json_is_array(env)) {
        json_array_foreach(env, i, v)
        {
            const char *n = json_string_value(v);
            if (!n || !env_name_ok(n))
                return th_sdk_errf(err, es,
                            "%s: env[%zu] must be a variable name "
                            "(letters, digits, _)",
                            who, i);
            const char *val = getenv(n);
            if (!val)
                continue; /* not set in the host: not set for the server */
            has_path = has_path || strcmp(n, "PATH") == 0;
            if (!(s->envp[ne++] = pair(n, val)))
                return th_sdk_errf(err, es, "out of memory");
        }
    } else if (env) {
        json_object_foreach((json_t *)env, k, v)
        {
            const char *val = json_string_value(v);
            if (!env_name_ok(k))
                return th_sdk_errf(err, es,
                            "%s: env key '%.64s' is not a variable name", who,
                            k);
            if (!val || strlen(val) != json_string_length(v))
                return th_sdk_errf(err, es,
                            "%s: env '%.64s' must be a string without NUL "
                            "bytes",
                            who, k);
            has_path = has_path || strcmp(k, "PATH") == 0;
            if (!(s->envp[ne++] = pair(k, val)))
                return th_sdk_errf(err, es, "out of memory");
        }
    }
    if (!has_path && !(s->envp[ne++] = pair("PATH", st->path)))
        return th_sdk_errf(err, es, "out of memory");
    /* cwd */
    const json_t *cwd = json_object_get(o, "cwd");
    if (cwd) {
        const char *c = json_string_value(cwd);
        if (!c || c[0] != '/')
            return th_sdk_errf(err, es, "%s: 'cwd' must be an absolute path", who);
        if (!(s->cwd = strdup(c)))
            return th_sdk_errf(err, es, "out of memory");
    }
common:;
    /* prefix */
    const json_t *pre = json_object_get(o, "prefix");
    if (pre) {
        const char *p = json_string_value(pre);
        bool good = p && strlen(p) <= 32;
        for (size_t j = 0; good && p[j]; j++)
            good = name_char(p[j]);
        if (!good)
            return th_sdk_errf(err, es,
                        "%s: 'prefix' must be at most 32 letters, digits, _ "
                        "or - (\"\" for none)",
                        who);
        s->prefix = strdup(p);
    } else {
        s->prefix = pair(name, "");
        if (s->prefix)
            s->prefix[nl] = '_';
    }
    if (!s->prefix)
        return th_sdk_errf(err, es, "out of memory");
    /* timeout, max_concurrency */
    const json_t *to = json_object_get(o, "timeout");
    if (to && (s->timeout_ms = mcpsrc_duration(to)) < 0)
        return th_sdk_errf(err, es,
                    "%s: 'timeout' must be a duration (\"500ms\", \"30s\", "
                    "\"2m\", \"1h\", or 0 for the call's deadline only)",
                    who);
    const json_t *mc = json_object_get(o, "max_concurrency");
    s->max_concurrency = 16;
    if (mc) {
        if (!json_is_integer(mc) || json_integer_value(mc) < 1 ||
            json_integer_value(mc) > 4096)
            return th_sdk_errf(err, es,
                        "%s: 'max_concurrency' must be an integer from 1 to "
                        "4096",
                        who);
        s->max_concurrency = json_integer_value(mc);
    }
    /* max_waiting: calls of a stdio server past max_concurrency, held by
     * no thread (mcp_call.c): a bound, or a client could pile them up */
    const json_t *mw = json_object_get(o, "max_waiting");
    s->max_waiting = 256;
    if (mw) {
        if (!json_is_integer(mw) || json_integer_value(mw) < 0 ||
            json_integer_value(mw) > 65536)
            return th_sdk_errf(err, es,
                        "%s: 'max_waiting' must be an integer from 0 to "
                        "65536",
                        who);
        s->max_waiting = json_integer_value(mw);
    }
    /* busy_poll_us: how long the thread that sends a call alone in
     * flight reads the answer itself (mcpsrc_busy_poll) */
    const json_t *bp = json_object_get(o, "busy_poll_us");
    s->busy_poll_us = 300;
    if (bp) {
        if (!json_is_integer(bp) || json_integer_value(bp) < 0 ||
            json_integer_value(bp) > 10000)
            return th_sdk_errf(err, es,
                        "%s: 'busy_poll_us' must be an integer from 0 (off) "
                        "to 10000 (microseconds)",
                        who);
        s->busy_poll_us = json_integer_value(bp);
    }
    /* user */
    const json_t *user = json_object_get(o, "user");
    if (user) {
        const char *u = json_string_value(user);
        if (!u || !u[0])
            return th_sdk_errf(err, es, "%s: 'user' must be a user name", who);
        if (geteuid() != 0)
            return th_sdk_errf(err, es,
                        "%s: 'user: %.64s' needs the host to run as root "
                        "(it runs as uid %u)",
                        who, u, (unsigned)geteuid());
        struct passwd pw, *r = NULL;
        char buf[4096];
        if (getpwnam_r(u, &pw, buf, sizeof buf, &r) != 0 || !r)
            return th_sdk_errf(err, es, "%s: no user named '%.64s'", who, u);
        if (r->pw_uid == 0)
            return th_sdk_errf(err, es,
                        "%s: 'user: %.64s' is root: name an unprivileged "
                        "user",
                        who, u);
        s->has_user = true;
        s->uid = r->pw_uid;
        s->gid = r->pw_gid;
    }
    return 0;
}

int mcpsrc_config(mcp_state *st, const uint8_t *config, size_t len,
                  char *err, size_t es)
{
    json_t *c = mp_json_parse(config, len);
    int rc = -1;
    if (!json_is_object(c)) {
        th_sdk_errf(err, es, "the config block is not a map");
        goto out;
    }
    static const struct {
        const char *key;
        int64_t min, max;
        size_t off;
    } durs[] = {
        {"restart_initial", 1, 3600000, offsetof(mcp_state, restart_initial_ms)},
        {"restart_max", 1, 86400000, offsetof(mcp_state, restart_max_ms)},
        {"start_timeout", 1, 3600000, offsetof(mcp_state, start_timeout_ms)},
        {"write_timeout", 1, 3600000, offsetof(mcp_state, write_timeout_ms)},
    };
    for (size_t i = 0; i < sizeof durs / sizeof durs[0]; i++) {
        int64_t v = mcpsrc_duration(json_object_get(c, durs[i].key));
        if (v < durs[i].min || v > durs[i].max) {
            th_sdk_errf(err, es,
                 "'%s' must be a duration from 1ms to %lldh (\"500ms\", "
                 "\"30s\", \"2m\")",
                 durs[i].key, (long long)durs[i].max / 3600000);
            goto out;
        }
        *(int64_t *)((char *)st + durs[i].off) = v;
    }
    if (st->restart_max_ms < st->restart_initial_ms)
        st->restart_max_ms = st->restart_initial_ms;
    st->max_message = json_integer_value(json_object_get(c, "max_message"));
    const char *path = json_string_value(json_object_get(c, "path"));
    if (!(st->path = strdup(path ? path : "/usr/bin:/bin"))) {
        th_sdk_errf(err, es, "out of memory");
        goto out;
    }
    const json_t *servers = json_object_get(c, "servers");
    size_t n = json_array_size(servers);
    if (n > MAX_SERVERS) {
        th_sdk_errf(err, es, "'servers' lists %zu servers, more than %d", n,
             MAX_SERVERS);
        goto out;
    }
    if (n && !(st->srv = calloc(n, sizeof *st->srv))) {
        th_sdk_errf(err, es, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        mcp_srv *s = &st->srv[i];
        s->st = st;
        s->pid = -1;
        s->in_fd = s->out_fd = s->err_fd = -1;
        s->pid_fd = -1;
        s->reader_done = true;
        s->next_id = 1;
        pthread_mutex_init(&s->mu, NULL);
        pthread_mutex_init(&s->wmu, NULL);
        pthread_mutex_init(&s->rd_mu, NULL);
        s->rd_fd = -1;
        s->rd_until = -1;
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&s->cv, &ca);
        pthread_condattr_destroy(&ca);
        st->n_srv = i + 1;
        s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (s->wake_fd < 0) {
            th_sdk_errf(err, es, "cannot make an eventfd: %s", strerror(errno));
            goto out;
        }
        if (server_parse(st, s, json_array_get(servers, i), i, err, es) != 0)
            goto out;
        for (size_t j = 0; j < i; j++)
            if (strcmp(st->srv[j].name, s->name) == 0) {
                th_sdk_errf(err, es, "servers[%zu]: the name '%s' is taken by "
                     "servers[%zu]", i, s->name, j);
                goto out;
            }
    }
    rc = 0;
out:
    json_decref(c);
    return rc;
}

/* ---- tools ------------------------------------------------------------- */

/* The keywords the host's schema validator knows (docs/mcp-source.md:
 * JSON Schema 2020-12 less $dynamicRef, unevaluated* and remote $ref,
 * and its annotations). */
static const char *const known_kw[] = {
    "type", "enum", "const", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern",
    "items", "prefixItems", "minItems", "maxItems", "uniqueItems",
    "contains", "minContains", "maxContains", "properties",
    "patternProperties", "additionalProperties", "propertyNames",
    "required", "minProperties", "maxProperties", "dependentRequired",
    "dependentSchemas", "allOf", "anyOf", "oneOf", "not", "if", "then",
    "else", "$ref", "$schema", "$id", "$defs", "$anchor", "$dynamicAnchor",
    "$comment", "title", "description", "default", "examples", "readOnly",
    "writeOnly", "deprecated", "format", "contentMediaType",
    "contentEncoding", "contentSchema", NULL};

/* Keywords whose value is a schema, a list of schemas, a map of them. */
static const char *const kw_schema[] = {
    "items", "additionalProperties", "not", "if", "then", "else",
    "contains", "propertyNames", "contentSchema", NULL};
static const char *const kw_list[] = {"allOf", "anyOf", "oneOf",
                                      "prefixItems", NULL};
static const char *const kw_map[] = {"properties", "patternProperties",
                                     "$defs", "dependentSchemas", NULL};

static bool in(const char *const *list, const char *k)
{
    for (; *list; list++)
        if (strcmp(*list, k) == 0)
            return true;
    return false;
}

/* NULL when every keyword of `s` (and its subschemas) is known, else the
 * first unknown one; `at` gets where it is. */
static const char *schema_unknown(const json_t *s, int depth, char *at,
                                  size_t at_size)
{
    if (json_is_boolean(s))
        return NULL;
    if (!json_is_object(s) || depth > 32) {
        snprintf(at, at_size, "a subschema that is not an object");
        return "(not a schema)";
    }
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v)
    {
        if (!in(known_kw, k)) {
            snprintf(at, at_size, "%s", k);
            return k;
        }
        const char *bad = NULL;
        if (in(kw_schema, k)) {
            bad = schema_unknown(v, depth + 1, at, at_size);
        } else if (in(kw_list, k)) {
            size_t i;
            const json_t *e;
            if (!json_is_array(v))
                bad = k;
            json_array_foreach(v, i, e) if (!bad) bad =
                schema_unknown(e, depth + 1, at, at_size);
        } else if (in(kw_map, k)) {
            const char *kk;
            const json_t *e;
            if (!json_is_object(v))
                bad = k;
            json_object_foreach((json_t *)v, kk, e) if (!bad) bad =
                schema_unknown(e, depth + 1, at, at_size);
        }
        if (bad)
            return bad;
    }
    return NULL;
}

static void tool_free(toolhost_tool *t, mcp_tool *m)
{
    free((char *)t->name);
    free((char *)t->description);
    free((char *)t->long_description);
    free((char *)t->title);
    free((char *)t->input_schema);
    free((char *)t->output_schema);
    free(m->remote);
}

/* One server tool as a toolhost tool in *t, *m; 1 when it is left out
 * (logged), -1 when out of memory. */
static int tool_build(mcp_state *st, mcp_srv *s, const json_t *d,
                      toolhost_tool *t, mcp_tool *m)
{
    const toolhost_host_api *h = st->host;
    const char *rname = json_string_value(json_object_get(d, "name"));
    if (!rname || !rname[0]) {
        th_sdk_log(h, TOOLHOST_LOG_WARN,
                   "server '%s': a tool without a name: left out", s->name);
        return 1;
    }
    if (strlen(rname) != json_string_length(json_object_get(d, "name"))) {
        th_sdk_log(h, TOOLHOST_LOG_WARN,
                   "server '%s': tool '%.100s': its name holds a NUL "
                   "character: left out", s->name, rname);
        return 1;
    }
    char name[128];
    size_t pl = strlen(s->prefix), rl = strlen(rname);
    if (pl + rl > 64) {
        th_sdk_log(h, TOOLHOST_LOG_WARN,
                   "server '%s': tool '%.100s': its name with the prefix "
                   "'%s' is longer than 64 characters: left out",
                   s->name, rname, s->prefix);
        return 1;
    }
    memcpy(name, s->prefix, pl);
    memcpy(name + pl, rname, rl + 1);
    bool renamed = false;
    for (char *c = name; *c; c++)
        if (!name_char(*c)) {
            *c = '_';
            renamed = true;
        }
    if (renamed)
        th_sdk_log(h, TOOLHOST_LOG_WARN,
                   "server '%s': tool '%.100s' has characters outside "
                   "[a-zA-Z0-9_-]: named '%s' here",
                   s->name, rname, name);
    for (uint32_t i = 0; i < st->n_tools; i++)
        if (strcmp(st->tools_rw[i].name, name) == 0) {
            th_sdk_log(h, TOOLHOST_LOG_WARN,
                       "server '%s': tool '%.100s': the name '%s' is taken "
                       "already: left out",
                       s->name, rname, name);
            return 1;
        }
    const json_t *in_s = json_object_get(d, "inputSchema");
    const char *ty = json_string_value(json_object_get(in_s, "type"));
    if (!json_is_object(in_s) || !ty || strcmp(ty, "object") != 0) {
        th_sdk_log(h, TOOLHOST_LOG_WARN,
                   "server '%s': tool '%.100s': its inputSchema is not an "
                   "object schema (\"type\": \"object\"): left out",
                   s->name, rname);
        return 1;
    }
    char at[128];
    const char *bad = schema_unknown(in_s, 0, at, sizeof at);
    if (bad) {
        th_sdk_log(h, TOOLHOST_LOG_WARN,
                   "server '%s': tool '%.100s': its inputSchema uses '%.80s', "
                   "which toolhost's schema validator does not know: left "
                   "out",
                   s->name, rname, at);
        return 1;
    }
    const json_t *out_s = json_object_get(d, "outputSchema");
    if (out_s) {
        const char *oty = json_string_value(json_object_get(out_s, "type"));
        bad = !json_is_object(out_s) || !oty || strcmp(oty, "object") != 0
                  ? "(not an object schema)"
                  : schema_unknown(out_s, 0, at, sizeof at);
        if (bad) {
            th_sdk_log(h, TOOLHOST_LOG_WARN,
                       "server '%s': tool '%.100s': its outputSchema uses "
                       "'%.80s', outside what toolhost checks: the tool is "
                       "imported without it (no structured output)",
                       s->name, rname, bad == at ? at : bad);
            out_s = NULL;
        }
    }
    const char *desc = json_string_value(json_object_get(d, "description"));
    char fallback[160];
    if (!desc || !desc[0]) {
        snprintf(fallback, sizeof fallback, "Tool %.64s of the MCP server %s",
                 rname, s->name);
        desc = fallback;
    }
    const char *nl = strchr(desc, '\n');
    t->struct_size = sizeof *t;
    t->name = strdup(name);
    t->description = nl ? strndup(desc, (size_t)(nl - desc)) : strdup(desc);
    if (nl)
        t->long_description = strdup(desc);
    const char *title = json_string_value(json_object_get(d, "title"));
    const json_t *ann = json_object_get(d, "annotations");
    if (!title)
        title = json_string_value(json_object_get(ann, "title"));
    if (title)
        t->title = strdup(title);
    t->input_schema = json_dumps(in_s, JSON_COMPACT);
    if (out_s)
        t->output_schema = json_dumps(out_s, JSON_COMPACT);
    t->stdout_type = out_s ? TOOLHOST_SEM_STRUCTURED : TOOLHOST_SEM_TEXT;
    t->stderr_type = TOOLHOST_SEM_ERROR;
    if (json_is_true(json_object_get(ann, "readOnlyHint")))
        t->flags |= TOOLHOST_TOOL_READ_ONLY;
    if (json_is_true(json_object_get(ann, "destructiveHint")))
        t->flags |= TOOLHOST_TOOL_DESTRUCTIVE;
    if (json_is_true(json_object_get(ann, "idempotentHint")))
        t->flags |= TOOLHOST_TOOL_IDEMPOTENT;
    if (json_is_true(json_object_get(ann, "openWorldHint")))
        t->flags |= TOOLHOST_TOOL_OPEN_WORLD;
    /* a call of a stdio server never waits in execute() (mcp_call.c,
     * stdio_call): a front's own thread may run it.  HTTP calls wait
     * for their answer on the thread that runs them. */
    if (!s->url)
        t->flags |= TOOLHOST_TOOL_SHORT;
    t->execute = mcpsrc_execute;
    m->srv = s;
    m->remote = strdup(rname);
    m->structured = out_s != NULL;
    t->user_data = m;
    if (!t->name || !t->description || (nl && !t->long_description) ||
        (title && !t->title) || !t->input_schema ||
        (out_s && !t->output_schema) || !m->remote) {
        tool_free(t, m);
        memset(t, 0, sizeof *t);
        return -1;
    }
    return 0;
}

int mcpsrc_build_tools(mcp_state *st, char *err, size_t es)
{
    size_t total = 0;
    for (size_t i = 0; i < st->n_srv; i++)
        total += json_array_size(st->srv[i].tools);
    if (total == 0)
        return 0;
    if (total > 4096)
        return th_sdk_errf(err, es, "the servers list %zu tools, more than 4096",
                    total);
    st->tools_rw = calloc(total, sizeof *st->tools_rw);
    st->mtools = calloc(total, sizeof *st->mtools);
    if (!st->tools_rw || !st->mtools)
        return th_sdk_errf(err, es, "out of memory");
    for (size_t i = 0; i < st->n_srv; i++) {
        mcp_srv *s = &st->srv[i];
        size_t k, before = st->n_tools;
        const json_t *d;
        pthread_mutex_lock(&s->mu); /* what a changed list compares to */
        s->served = s->tools ? json_incref(s->tools) : json_array();
        pthread_mutex_unlock(&s->mu);
        json_array_foreach(s->tools, k, d)
        {
            int rc = tool_build(st, s, d, &st->tools_rw[st->n_tools],
                                &st->mtools[st->n_tools]);
            if (rc < 0)
                return th_sdk_errf(err, es, "out of memory");
            if (rc == 0)
                st->n_tools++;
        }
        th_sdk_log(st->host, TOOLHOST_LOG_INFO,
                   "server '%s': %u of %zu tools imported (prefix '%s')",
                   s->name, (unsigned)(st->n_tools - before),
                   json_array_size(s->tools), s->prefix);
    }
    st->tools = st->tools_rw;
    return 0;
}

void mcpsrc_state_free(mcp_state *st)
{
    if (!st)
        return;
    for (uint32_t i = 0; i < st->n_tools; i++)
        tool_free(&st->tools_rw[i], &st->mtools[i]);
    free(st->tools_rw);
    free(st->mtools);
    for (size_t i = 0; i < st->n_srv; i++) {
        mcp_srv *s = &st->srv[i];
        free(s->name);
        free(s->prefix);
        if (s->argv)
            for (char **a = s->argv; *a; a++)
                free(*a);
        free(s->argv);
        if (s->envp)
            for (char **a = s->envp; *a; a++)
                free(*a);
        free(s->envp);
        free(s->cwd);
        free(s->url);
        curl_slist_free_all(s->headers);
        mcpsrc_oauth_free(s->oauth);
        json_decref(s->tools);
        json_decref(s->served);
        if (s->wake_fd >= 0)
            close(s->wake_fd);
        free(s->wrest);
        free(s->dout);
        pthread_mutex_destroy(&s->mu);
        pthread_mutex_destroy(&s->wmu);
        pthread_mutex_destroy(&s->rd_mu);
        pthread_cond_destroy(&s->cv);
    }
    free(st->srv);
    free(st->path);
    free(st);
}
