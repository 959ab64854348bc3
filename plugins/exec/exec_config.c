/* exec_config.c - the exec plugin's config block: tool declarations turned
 * into toolhost_tool tables (see exec.h and docs/ops.md).
 *
 * The host checks the block against the plugin's config table (`tools` is
 * an array of objects, `kill_grace` and `path` strings); everything inside
 * a declaration is checked here, and every message names the tool and the
 * key.  Unknown keys are errors, as in the host's own config. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <msgpack.h>

#include "exec.h"
#include "toolhost/sdk.h"

#define MAX_TOOLS 256
#define MAX_PARAMS 64
#define MAX_ARGV 256


static bool key_is(const msgpack_object *k, const char *s)
{
    size_t n = strlen(s);
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
           memcmp(k->via.str.ptr, s, n) == 0;
}

static const msgpack_object *get(const msgpack_object *map, const char *key)
{
    for (uint32_t i = 0; i < map->via.map.size; i++)
        if (key_is(&map->via.map.ptr[i].key, key))
            return &map->via.map.ptr[i].val;
    return NULL;
}

/* A NUL-terminated copy of a msgpack string; NULL (errno EINVAL) when it is
 * not a string or holds a NUL, (ENOMEM) when out of memory. */
static char *dup_str(const msgpack_object *o)
{
    if (!o || o->type != MSGPACK_OBJECT_STR ||
        memchr(o->via.str.ptr, 0, o->via.str.size)) {
        errno = EINVAL;
        return NULL;
    }
    char *s = malloc(o->via.str.size + 1);
    if (!s) {
        errno = ENOMEM;
        return NULL;
    }
    memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = '\0';
    return s;
}

static bool ident_ok(const char *s, bool env)
{
    if (!s[0] || (s[0] >= '0' && s[0] <= '9'))
        return false;
    size_t n = 0;
    for (; *s; s++, n++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_'))
            return false;
    }
    return env ? n <= 255 : n <= 64;
}

/* "500ms", "30s", "2m", "1h", or an integer count of seconds; -1 when bad. */
static int64_t parse_duration(const msgpack_object *o)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return o->via.u64 <= 86400ull * 365 ? (int64_t)o->via.u64 * 1000 : -1;
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0 ||
        o->via.str.size > 31)
        return -1;
    char buf[32];
    memcpy(buf, o->via.str.ptr, o->via.str.size);
    buf[o->via.str.size] = '\0';
    if (strcmp(buf, "0") == 0)
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf || errno || buf[0] == '-' || v > 86400ull * 365 * 1000)
        return -1;
    int64_t mul;
    if (strcmp(end, "ms") == 0)
        mul = 1;
    else if (strcmp(end, "s") == 0)
        mul = 1000;
    else if (strcmp(end, "m") == 0)
        mul = 60000;
    else if (strcmp(end, "h") == 0)
        mul = 3600000;
    else
        return -1;
    return (int64_t)v * mul;
}

static const char *const sem_names[] = {
    NULL,           "text",   "status", "error",          "file_content",
    "file_view",    "command_output",   "search_results", "knowledge",
    "structured",   "log",    "diff",   "binary"};
#define N_SEM (sizeof sem_names / sizeof sem_names[0])

static const char *const type_names[] = {NULL, "string", "integer", "number",
                                         "boolean"};

/* ---- state ---------------------------------------------------------------- */

static void slot_free(exec_slot *s)
{
    free(s->text);
}

static void param_free(toolhost_param *p)
{
    free((char *)p->name);
    free((char *)p->description);
    free((char *)p->default_json);
    if (p->enum_values) {
        for (const char *const *e = p->enum_values; *e; e++)
            free((char *)*e);
        free((void *)p->enum_values);
    }
}

void exec_state_free(exec_state *st)
{
    if (!st)
        return;
    for (uint32_t i = 0; i < st->n_tools; i++) {
        toolhost_tool *t = &st->tools_rw[i];
        exec_tool *x = &st->exec[i];
        free((char *)t->name);
        free((char *)t->description);
        free((char *)t->long_description);
        for (uint32_t k = 0; k < t->n_params; k++)
            param_free(&st->params[i][k]);
        free(st->params[i]);
        for (size_t k = 0; k < x->argc; k++)
            slot_free(&x->argv[k]);
        free(x->argv);
        for (size_t k = 0; k < x->n_env; k++) {
            free(x->env[k].name);
            slot_free(&x->env[k].value);
        }
        free(x->env);
        for (size_t k = 0; k < x->n_env_allow; k++)
            free(x->env_allow[k]);
        free(x->env_allow);
        for (size_t k = 0; x->tags && x->tags[k]; k++)
            free(x->tags[k]);
        free(x->tags);
        free(x->cwd);
    }
    free(st->tools_rw);
    free(st->exec);
    free(st->params);
    free(st->path_env);
    free(st);
}

/* ---- one parameter ------------------------------------------------------------ */

/* The default as JSON text, checked against the type. */
static char *default_json(const msgpack_object *o, uint32_t type)
{
    char buf[96];
    switch (type) {
    case TOOLHOST_TYPE_STRING: {
        if (o->type != MSGPACK_OBJECT_STR ||
            memchr(o->via.str.ptr, 0, o->via.str.size))
            return NULL;
        /* JSON string: escape quotes, backslashes and control bytes. */
        size_t n = o->via.str.size;
        char *s = malloc(n * 6 + 3);
        if (!s)
            return NULL;
        size_t w = 0;
        s[w++] = '"';
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)o->via.str.ptr[i];
            if (c == '"' || c == '\\') {
                s[w++] = '\\';
                s[w++] = (char)c;
            } else if (c < 0x20) {
                w += (size_t)sprintf(s + w, "\\u%04x", c);
            } else {
                s[w++] = (char)c;
            }
        }
        s[w++] = '"';
        s[w] = '\0';
        return s;
    }
    case TOOLHOST_TYPE_INTEGER:
        if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            snprintf(buf, sizeof buf, "%llu", (unsigned long long)o->via.u64);
        else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            snprintf(buf, sizeof buf, "%lld", (long long)o->via.i64);
        else
            return NULL;
        return strdup(buf);
    case TOOLHOST_TYPE_NUMBER:
        if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            snprintf(buf, sizeof buf, "%llu", (unsigned long long)o->via.u64);
        else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            snprintf(buf, sizeof buf, "%lld", (long long)o->via.i64);
        else if (o->type == MSGPACK_OBJECT_FLOAT64 ||
                 o->type == MSGPACK_OBJECT_FLOAT32)
            snprintf(buf, sizeof buf, "%.17g", o->via.f64);
        else
            return NULL;
        return strdup(buf);
    case TOOLHOST_TYPE_BOOLEAN:
        if (o->type != MSGPACK_OBJECT_BOOLEAN)
            return NULL;
        return strdup(o->via.boolean ? "true" : "false");
    }
    return NULL;
}

static int parse_param(const char *tool, uint32_t idx, const msgpack_object *o,
                       toolhost_param *p, char *err, size_t es)
{
    p->struct_size = sizeof *p;
    if (o->type != MSGPACK_OBJECT_MAP)
        return th_sdk_errf(err, es, "tool '%s': params[%u] is not a mapping", tool,
                    idx);
    const msgpack_object *v = get(o, "name");
    char *name = v ? dup_str(v) : NULL;
    if (!name)
        return th_sdk_errf(err, es, "tool '%s': params[%u]: key 'name' %s", tool,
                    idx, !v ? "is missing" : "must be a string");
    p->name = name;
    if (!ident_ok(name, false))
        return th_sdk_errf(err, es,
                    "tool '%s': parameter '%.64s': key 'name': allowed are "
                    "letters, digits and _, not starting with a digit, 1 to "
                    "64",
                    tool, name);
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key;
        if (!key_is(k, "name") && !key_is(k, "type") &&
            !key_is(k, "description") && !key_is(k, "required") &&
            !key_is(k, "enum") && !key_is(k, "default"))
            return th_sdk_errf(err, es,
                        "tool '%s': parameter '%s': unknown key '%.*s' "
                        "(allowed: name, type, description, required, enum, "
                        "default)",
                        tool, name,
                        k->type == MSGPACK_OBJECT_STR ? (int)k->via.str.size
                                                      : 1,
                        k->type == MSGPACK_OBJECT_STR ? k->via.str.ptr : "?");
    }
    v = get(o, "type");
    p->type = TOOLHOST_TYPE_STRING;
    if (v) {
        p->type = 0;
        for (uint32_t t = 1; t < 5; t++)
            if (key_is(v, type_names[t]))
                p->type = t;
        if (!p->type)
            return th_sdk_errf(err, es,
                        "tool '%s': parameter '%s': key 'type' must be one "
                        "of string, integer, number, boolean",
                        tool, name);
    }
    v = get(o, "description");
    if (!v || !(p->description = dup_str(v)) || !p->description[0])
        return th_sdk_errf(err, es,
                    "tool '%s': parameter '%s': key 'description' %s", tool,
                    name,
                    !v ? "is missing (a model needs one line on what to pass)"
                       : "must be a non-empty string");
    v = get(o, "required");
    if (v) {
        if (v->type != MSGPACK_OBJECT_BOOLEAN)
            return th_sdk_errf(err, es,
                        "tool '%s': parameter '%s': key 'required' must be "
                        "true or false",
                        tool, name);
        p->required = v->via.boolean;
    }
    v = get(o, "enum");
    if (v) {
        if (p->type != TOOLHOST_TYPE_STRING || v->type != MSGPACK_OBJECT_ARRAY ||
            v->via.array.size == 0 || v->via.array.size > 1024)
            return th_sdk_errf(err, es,
                        "tool '%s': parameter '%s': key 'enum' must be a "
                        "non-empty list of strings, on a string parameter",
                        tool, name);
        const char **e = calloc(v->via.array.size + 1, sizeof *e);
        if (!e)
            return th_sdk_errf(err, es, "out of memory");
        p->enum_values = e;
        for (uint32_t i = 0; i < v->via.array.size; i++)
            if (!(e[i] = dup_str(&v->via.array.ptr[i])))
                return th_sdk_errf(err, es,
                            "tool '%s': parameter '%s': key 'enum': element "
                            "%u must be a string",
                            tool, name, i + 1);
    }
    v = get(o, "default");
    if (v) {
        if (p->required)
            return th_sdk_errf(err, es,
                        "tool '%s': parameter '%s': key 'default' is not "
                        "allowed with required: true",
                        tool, name);
        if (!(p->default_json = default_json(v, p->type)))
            return th_sdk_errf(err, es,
                        "tool '%s': parameter '%s': key 'default' must be a "
                        "%s",
                        tool, name, type_names[p->type]);
    }
    return 0;
}

/* ---- templates --------------------------------------------------------------- */

static int param_index(const toolhost_tool *t, const char *name, size_t len)
{
    for (uint32_t i = 0; i < t->n_params; i++)
        if (strlen(t->params[i].name) == len &&
            memcmp(t->params[i].name, name, len) == 0)
            return (int)i;
    return -1;
}

/* A template element: "{name}" alone is a placeholder; a declared
 * "{name}" inside a longer string is an error (it would need splicing). */
static int parse_slot(const char *tool, const char *where,
                      const msgpack_object *o, const toolhost_tool *t,
                      exec_slot *s, char *err, size_t es)
{
    s->param = -1;
    if (!(s->text = dup_str(o)))
        return th_sdk_errf(err, es, "tool '%s': %s must be a string without NUL",
                    tool, where);
    size_t n = strlen(s->text);
    if (n >= 3 && s->text[0] == '{' && s->text[n - 1] == '}' &&
        !memchr(s->text + 1, '{', n - 2) && !memchr(s->text + 1, '}', n - 2)) {
        int k = param_index(t, s->text + 1, n - 2);
        if (k < 0)
            return th_sdk_errf(err, es,
                        "tool '%s': %s: '%s' names no declared parameter",
                        tool, where, s->text);
        s->param = k;
        free(s->text);
        s->text = NULL;
        return 0;
    }
    /* "{name}" inside a longer string: a placeholder that would need
     * splicing (or a typo).  Other braces ("{}", "{print $1}") are
     * literal. */
    for (const char *p = strchr(s->text, '{'); p; p = strchr(p + 1, '{')) {
        const char *q = strchr(p + 1, '}');
        size_t len = q ? (size_t)(q - p - 1) : 0;
        char id[80];
        if (!q || len == 0 || len >= sizeof id)
            continue;
        memcpy(id, p + 1, len);
        id[len] = '\0';
        if (!ident_ok(id, false))
            continue;
        return th_sdk_errf(err, es,
                    "tool '%s': %s: placeholder '{%s}' must be a whole "
                    "element (\"%s\"): arguments are never spliced into a "
                    "string%s",
                    tool, where, id, s->text,
                    param_index(t, id, len) >= 0
                        ? ""
                        : "; and no parameter of that name is declared");
    }
    return 0;
}

/* ---- one tool ------------------------------------------------------------------- */

static const char *const tool_keys[] = {
    "name",      "description", "long_description", "params",     "argv",
    "env",       "env_allow",   "cwd",              "timeout",    "stdout",
    "stderr",    "read_only",   "destructive",      "idempotent", "open_world",
    "serial",    "tags",        NULL};

static int parse_sem(const char *tool, const char *key,
                     const msgpack_object *v, uint32_t def, uint32_t *out,
                     char *err, size_t es)
{
    *out = def;
    if (!v)
        return 0;
    for (uint32_t i = 1; i < N_SEM; i++)
        if (key_is(v, sem_names[i])) {
            *out = i;
            return 0;
        }
    return th_sdk_errf(err, es,
                "tool '%s': key '%s' must be a semantic type: text, status, "
                "error, file_content, file_view, command_output, "
                "search_results, knowledge, structured, log, diff, binary",
                tool, key);
}

static int parse_tool(exec_state *st, uint32_t idx, const msgpack_object *o,
                      int64_t grace_ms, char *err, size_t es)
{
    toolhost_tool *t = &st->tools_rw[idx];
    exec_tool *x = &st->exec[idx];
    t->struct_size = sizeof *t;
    t->user_data = x;
    t->execute = exec_execute;
    t->validate_args = exec_validate_args;
    x->grace_ms = grace_ms;
    if (o->type != MSGPACK_OBJECT_MAP)
        return th_sdk_errf(err, es, "tools[%u] is not a mapping", idx);
    const msgpack_object *v = get(o, "name");
    char *name = v ? dup_str(v) : NULL;
    if (!name)
        return th_sdk_errf(err, es, "tools[%u]: key 'name' %s", idx,
                    !v ? "is missing" : "must be a string");
    t->name = name;
    size_t nl = strlen(name);
    bool name_ok = nl >= 1 && nl <= 64;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
              (*c >= '0' && *c <= '9') || *c == '_' || *c == '-'))
            name_ok = false;
    if (!name_ok)
        return th_sdk_errf(err, es,
                    "tools[%u]: tool name '%.64s' is invalid (allowed: "
                    "letters, digits, _ and -, 1 to 64)",
                    idx, name);
    for (uint32_t k = 0; k < idx; k++)
        if (strcmp(st->tools_rw[k].name, name) == 0)
            return th_sdk_errf(err, es, "tool '%s' is declared twice", name);
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key;
        bool known = false;
        for (const char *const *tk = tool_keys; *tk; tk++)
            known = known || key_is(k, *tk);
        if (!known)
            return th_sdk_errf(err, es,
                        "tool '%s': unknown key '%.*s' (allowed: name, "
                        "description, long_description, params, argv, env, "
                        "env_allow, cwd, timeout, stdout, stderr, read_only, "
                        "destructive, idempotent, open_world, serial, tags)",
                        name,
                        k->type == MSGPACK_OBJECT_STR ? (int)k->via.str.size
                                                      : 1,
                        k->type == MSGPACK_OBJECT_STR ? k->via.str.ptr : "?");
    }
    v = get(o, "description");
    if (!v || !(t->description = dup_str(v)) || !t->description[0])
        return th_sdk_errf(err, es, "tool '%s': key 'description' %s", name,
                    !v ? "is missing (one line a model can act on)"
                       : "must be a non-empty string");
    if ((v = get(o, "long_description")) &&
        !(t->long_description = dup_str(v)))
        return th_sdk_errf(err, es, "tool '%s': key 'long_description' must be a "
                    "string", name);

    /* params */
    v = get(o, "params");
    if (v) {
        if (v->type != MSGPACK_OBJECT_ARRAY ||
            v->via.array.size > MAX_PARAMS)
            return th_sdk_errf(err, es,
                        "tool '%s': key 'params' must be a list of at most "
                        "%d parameters",
                        name, MAX_PARAMS);
        if (v->via.array.size) {
            st->params[idx] = calloc(v->via.array.size, sizeof(toolhost_param));
            if (!st->params[idx])
                return th_sdk_errf(err, es, "out of memory");
        }
        t->params = st->params[idx];
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            t->n_params = i + 1;
            if (parse_param(name, i, &v->via.array.ptr[i], &st->params[idx][i],
                            err, es))
                return -1;
            for (uint32_t k = 0; k < i; k++)
                if (strcmp(st->params[idx][k].name, st->params[idx][i].name) ==
                    0)
                    return th_sdk_errf(err, es,
                                "tool '%s': parameter '%s' is declared twice",
                                name, st->params[idx][i].name);
        }
    }

    /* argv */
    v = get(o, "argv");
    if (!v || v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size == 0 ||
        v->via.array.size > MAX_ARGV)
        return th_sdk_errf(err, es,
                    "tool '%s': key 'argv' %s", name,
                    !v ? "is missing (the command as a list: [\"/usr/bin/grep\", "
                         "\"-n\", \"{pattern}\"])"
                       : "must be a list of 1 to 256 strings");
    x->argv = calloc(v->via.array.size, sizeof *x->argv);
    if (!x->argv)
        return th_sdk_errf(err, es, "out of memory");
    for (uint32_t i = 0; i < v->via.array.size; i++) {
        char where[48];
        snprintf(where, sizeof where, "key 'argv': element %u", i + 1);
        x->argc = i + 1;
        if (parse_slot(name, where, &v->via.array.ptr[i], t, &x->argv[i], err,
                       es))
            return -1;
    }
    if (x->argv[0].param >= 0 || x->argv[0].text[0] != '/')
        return th_sdk_errf(err, es,
                    "tool '%s': key 'argv': the program '%s' must be an "
                    "absolute path (no placeholder, no PATH search)",
                    name, x->argv[0].text ? x->argv[0].text : "{...}");
    if (access(x->argv[0].text, X_OK) != 0)
        return th_sdk_errf(err, es,
                    "tool '%s': key 'argv': the program '%s' cannot be run: "
                    "%s",
                    name, x->argv[0].text, strerror(errno));

    /* env */
    v = get(o, "env");
    if (v) {
        if (v->type != MSGPACK_OBJECT_MAP)
            return th_sdk_errf(err, es,
                        "tool '%s': key 'env' must be a mapping NAME: value",
                        name);
        if (v->via.map.size) {
            x->env = calloc(v->via.map.size, sizeof *x->env);
            if (!x->env)
                return th_sdk_errf(err, es, "out of memory");
        }
        for (uint32_t i = 0; i < v->via.map.size; i++) {
            exec_env *e = &x->env[i];
            x->n_env = i + 1;
            e->value.param = -1;
            if (!(e->name = dup_str(&v->via.map.ptr[i].key)) ||
                !ident_ok(e->name, true) || strcmp(e->name, "PATH") == 0)
                return th_sdk_errf(err, es,
                            "tool '%s': key 'env': '%s' is not a variable "
                            "name this plugin sets (letters, digits, _; "
                            "not PATH, which is the plugin's 'path' key)",
                            name, e->name ? e->name : "?");
            char where[300];
            snprintf(where, sizeof where, "key 'env': %s", e->name);
            if (parse_slot(name, where, &v->via.map.ptr[i].val, t, &e->value,
                           err, es))
                return -1;
        }
    }
    v = get(o, "env_allow");
    if (v) {
        if (v->type != MSGPACK_OBJECT_ARRAY)
            return th_sdk_errf(err, es,
                        "tool '%s': key 'env_allow' must be a list of "
                        "variable names",
                        name);
        if (v->via.array.size) {
            x->env_allow = calloc(v->via.array.size, sizeof *x->env_allow);
            if (!x->env_allow)
                return th_sdk_errf(err, es, "out of memory");
        }
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            x->n_env_allow = i + 1;
            if (!(x->env_allow[i] = dup_str(&v->via.array.ptr[i])) ||
                !ident_ok(x->env_allow[i], true))
                return th_sdk_errf(err, es,
                            "tool '%s': key 'env_allow': element %u is not a "
                            "variable name",
                            name, i + 1);
        }
    }

    /* tags (ABI 1.5): strings, NULL-terminated; the host checks the
     * names (and refuses more than TOOLHOST_MAX_TAGS) as for any plugin */
    v = get(o, "tags");
    if (v) {
        if (v->type != MSGPACK_OBJECT_ARRAY ||
            v->via.array.size > TOOLHOST_MAX_TAGS)
            return th_sdk_errf(err, es,
                        "tool '%s': key 'tags' must be a list of at most %d "
                        "tag names",
                        name, TOOLHOST_MAX_TAGS);
        if (!(x->tags = calloc(v->via.array.size + 1, sizeof *x->tags)))
            return th_sdk_errf(err, es, "out of memory");
        for (uint32_t i = 0; i < v->via.array.size; i++)
            if (!(x->tags[i] = dup_str(&v->via.array.ptr[i])))
                return th_sdk_errf(err, es,
                            "tool '%s': key 'tags': element %u is not a "
                            "string",
                            name, i + 1);
        t->tags = (const char *const *)x->tags;
    }

    /* every parameter goes somewhere */
    for (uint32_t p = 0; p < t->n_params; p++) {
        bool used = false;
        for (size_t i = 0; i < x->argc; i++)
            used = used || x->argv[i].param == (int)p;
        for (size_t i = 0; i < x->n_env; i++)
            used = used || x->env[i].value.param == (int)p;
        if (!used)
            return th_sdk_errf(err, es,
                        "tool '%s': parameter '%s' is used neither in 'argv' "
                        "nor in 'env' (write \"{%s}\" where it goes)",
                        name, t->params[p].name, t->params[p].name);
    }

    /* cwd, timeout */
    if ((v = get(o, "cwd"))) {
        struct stat sb;
        if (!(x->cwd = dup_str(v)) || x->cwd[0] != '/')
            return th_sdk_errf(err, es,
                        "tool '%s': key 'cwd' must be an absolute path", name);
        if (stat(x->cwd, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return th_sdk_errf(err, es, "tool '%s': key 'cwd': '%s' is not a folder%s%s",
                        name, x->cwd, errno ? ": " : "",
                        errno ? strerror(errno) : "");
    }
    if ((v = get(o, "timeout")) && (x->timeout_ms = parse_duration(v)) < 0)
        return th_sdk_errf(err, es,
                    "tool '%s': key 'timeout' must be a duration such as "
                    "500ms, 30s, 2m, 1h (or whole seconds)",
                    name);

    /* output and flags */
    if (parse_sem(name, "stdout", get(o, "stdout"), TOOLHOST_SEM_COMMAND_OUTPUT,
                  &t->stdout_type, err, es) ||
        parse_sem(name, "stderr", get(o, "stderr"), TOOLHOST_SEM_ERROR,
                  &t->stderr_type, err, es))
        return -1;
    static const struct {
        const char *key;
        uint32_t bit;
    } flags[] = {{"read_only", TOOLHOST_TOOL_READ_ONLY},
                 {"destructive", TOOLHOST_TOOL_DESTRUCTIVE},
                 {"idempotent", TOOLHOST_TOOL_IDEMPOTENT},
                 {"open_world", TOOLHOST_TOOL_OPEN_WORLD},
                 {"serial", TOOLHOST_TOOL_SERIAL}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (!(v = get(o, flags[i].key)))
            continue;
        if (v->type != MSGPACK_OBJECT_BOOLEAN)
            return th_sdk_errf(err, es, "tool '%s': key '%s' must be true or false",
                        name, flags[i].key);
        if (v->via.boolean)
            t->flags |= flags[i].bit;
    }
    if ((t->flags & TOOLHOST_TOOL_READ_ONLY) &&
        (t->flags & TOOLHOST_TOOL_DESTRUCTIVE))
        return th_sdk_errf(err, es,
                    "tool '%s': read_only and destructive contradict each "
                    "other",
                    name);
    return 0;
}

/* ---- the block ------------------------------------------------------------------ */

int exec_config_parse(exec_state *st, const uint8_t *config, size_t len,
                      char *err, size_t es)
{
    th_sdk_args a;
    int rc = th_sdk_args_init(&a, config, len);
    if (rc) {
        th_sdk_args_destroy(&a);
        return th_sdk_errf(err, es, "the config block is not a msgpack map");
    }
    rc = -1;
    const msgpack_object *tools = NULL;
    const char *grace = "2s", *path = NULL;
    th_sdk_arg_object(&a, "tools", &tools);
    if (!tools || tools->type != MSGPACK_OBJECT_ARRAY) {
        th_sdk_errf(err, es, "key 'tools' must be a list of tool declarations");
        goto out;
    }
    if (tools->via.array.size > MAX_TOOLS) {
        th_sdk_errf(err, es, "key 'tools': %u tools, at most %d", tools->via.array.size,
             MAX_TOOLS);
        goto out;
    }
    th_sdk_arg_cstr(&a, "kill_grace", &grace);
    th_sdk_arg_cstr(&a, "path", &path);
    msgpack_object g = {.type = MSGPACK_OBJECT_STR,
                        .via.str = {(uint32_t)strlen(grace), grace}};
    int64_t grace_ms = parse_duration(&g);
    if (grace_ms < 0 || grace_ms > 60000) {
        th_sdk_errf(err, es,
             "key 'kill_grace': '%s' is not a duration from 0 to 60s (such "
             "as 500ms, 2s)",
             grace);
        goto out;
    }
    size_t pl = strlen(path ? path : "");
    if (!path || !pl)
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    if (!(st->path_env = malloc(strlen(path) + 6))) {
        th_sdk_errf(err, es, "out of memory");
        goto out;
    }
    sprintf(st->path_env, "PATH=%s", path);
    uint32_t n = tools->via.array.size;
    if (n) {
        st->tools_rw = calloc(n, sizeof *st->tools_rw);
        st->exec = calloc(n, sizeof *st->exec);
        st->params = calloc(n, sizeof *st->params);
        if (!st->tools_rw || !st->exec || !st->params) {
            th_sdk_errf(err, es, "out of memory");
            goto out;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        st->n_tools = i + 1;
        if (parse_tool(st, i, &tools->via.array.ptr[i], grace_ms, err, es))
            goto out;
    }
    st->tools = st->tools_rw;
    rc = 0;
out:
    th_sdk_args_destroy(&a);
    return rc;
}
