/* oa_load.c - an OpenAPI document read into a JSON tree: JSON through
 * jansson, YAML through libyaml's event parser (one document, scalars
 * typed by YAML's core schema, no aliases: an alias can multiply a small
 * file into a huge tree).  The file's size is bounded by the API's
 * max_spec, the nesting by MAX_NEST. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "openapi.h"

#define MAX_NEST 256

/* The file's bytes (NUL-terminated); NULL with a message. */
static char *read_file(const char *path, int64_t max, size_t *len, char *err,
                       size_t es)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        snprintf(err, es, "spec %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, es, "spec %s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (sb.st_size > max) {
        snprintf(err, es, "spec %s: %lld bytes, more than max_spec (%lld)",
                 path, (long long)sb.st_size, (long long)max);
        close(fd);
        return NULL;
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    size_t n = 0;
    while (buf && n < (size_t)sb.st_size) {
        ssize_t r = read(fd, buf + n, (size_t)sb.st_size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (!buf) {
        snprintf(err, es, "spec %s: out of memory", path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* ---- YAML ---------------------------------------------------------------- */

typedef struct yctx {
    yaml_parser_t p;
    const char *path;
    char *err;
    size_t es;
} yctx;

static int ybad(yctx *y, const yaml_mark_t *m, const char *what)
{
    snprintf(y->err, y->es, "spec %s:%zu:%zu: %s", y->path, m->line + 1,
             m->column + 1, what);
    return -1;
}

static int ynext(yctx *y, yaml_event_t *ev)
{
    if (yaml_parser_parse(&y->p, ev))
        return 0;
    snprintf(y->err, y->es, "spec %s:%zu:%zu: %s", y->path,
             y->p.problem_mark.line + 1, y->p.problem_mark.column + 1,
             y->p.problem ? y->p.problem : "YAML syntax error");
    return -1;
}

static bool all_digits(const char *s)
{
    if (*s == '-' || *s == '+')
        s++;
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* A plain scalar typed by the YAML 1.2 core schema (null, booleans,
 * integers, floats; the rest are strings). */
static json_t *yscalar(const yaml_event_t *ev)
{
    const char *s = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    const char *tag = (const char *)ev->data.scalar.tag;
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
        (tag && !strcmp(tag, YAML_STR_TAG)) || memchr(s, 0, n))
        return json_stringn(s, n);
    if (n == 0 || !strcmp(s, "~") || !strcmp(s, "null") ||
        !strcmp(s, "Null") || !strcmp(s, "NULL"))
        return json_null();
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE"))
        return json_true();
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE"))
        return json_false();
    if (all_digits(s) && n < 19)
        return json_integer(strtoll(s, NULL, 10));
    char *end;
    if (strspn(s, "+-0123456789.eE") == n && strpbrk(s, "0123456789")) {
        errno = 0;
        double d = strtod(s, &end);
        if (!*end && !errno)
            return json_real(d);
    }
    return json_stringn(s, n);
}

static json_t *ynode(yctx *y, yaml_event_t *ev, int depth);

static json_t *ycontainer(yctx *y, yaml_event_t *start, int depth)
{
    bool map = start->type == YAML_MAPPING_START_EVENT;
    json_t *out = map ? json_object() : json_array();
    yaml_event_t ev;
    if (!out) {
        ybad(y, &start->start_mark, "out of memory");
        return NULL;
    }
    for (;;) {
        if (ynext(y, &ev) != 0)
            goto bad;
        if (ev.type == YAML_MAPPING_END_EVENT ||
            ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return out;
        }
        if (!map) {
            json_t *v = ynode(y, &ev, depth + 1);
            yaml_event_delete(&ev);
            if (!v || json_array_append_new(out, v) != 0)
                goto bad;
            continue;
        }
        if (ev.type != YAML_SCALAR_EVENT) {
            ybad(y, &ev.start_mark, "a mapping key must be a scalar");
            yaml_event_delete(&ev);
            goto bad;
        }
        const char *k = (const char *)ev.data.scalar.value;
        if (memchr(k, 0, ev.data.scalar.length)) {
            ybad(y, &ev.start_mark, "a key holds a NUL byte");
            yaml_event_delete(&ev);
            goto bad;
        }
        if (json_object_get(out, k)) {
            char msg[160];
            snprintf(msg, sizeof msg, "duplicate key '%.100s'", k);
            ybad(y, &ev.start_mark, msg);
            yaml_event_delete(&ev);
            goto bad;
        }
        char *key = strdup(k);
        yaml_event_delete(&ev);
        if (!key || ynext(y, &ev) != 0) {
            free(key);
            goto bad;
        }
        json_t *v = ynode(y, &ev, depth + 1);
        yaml_event_delete(&ev);
        int rc = v ? json_object_set_new(out, key, v) : -1;
        free(key);
        if (rc != 0)
            goto bad;
    }
bad:
    json_decref(out);
    return NULL;
}

static json_t *ynode(yctx *y, yaml_event_t *ev, int depth)
{
    if (depth > MAX_NEST) {
        ybad(y, &ev->start_mark, "nested deeper than 256 levels");
        return NULL;
    }
    switch (ev->type) {
    case YAML_SCALAR_EVENT: {
        json_t *v = yscalar(ev);
        if (!v)
            ybad(y, &ev->start_mark, "out of memory");
        return v;
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
        return ycontainer(y, ev, depth);
    case YAML_ALIAS_EVENT:
        ybad(y, &ev->start_mark, "YAML aliases (*name) are not accepted in "
                                 "an OpenAPI document");
        return NULL;
    default:
        ybad(y, &ev->start_mark, "unexpected YAML event");
        return NULL;
    }
}

static json_t *load_yaml(const char *path, const char *text, size_t len,
                         char *err, size_t es)
{
    yctx y = {.path = path, .err = err, .es = es};
    if (!yaml_parser_initialize(&y.p)) {
        snprintf(err, es, "spec %s: out of memory", path);
        return NULL;
    }
    yaml_parser_set_input_string(&y.p, (const unsigned char *)text, len);
    json_t *root = NULL;
    yaml_event_t ev;
    /* stream start, document start, the node, document end, stream end */
    if (ynext(&y, &ev) != 0)
        goto out;
    yaml_event_delete(&ev);
    if (ynext(&y, &ev) != 0)
        goto out;
    if (ev.type != YAML_DOCUMENT_START_EVENT) {
        snprintf(err, es, "spec %s: empty document", path);
        yaml_event_delete(&ev);
        goto out;
    }
    yaml_event_delete(&ev);
    if (ynext(&y, &ev) != 0)
        goto out;
    root = ynode(&y, &ev, 0);
    yaml_event_delete(&ev);
    if (!root)
        goto out;
    if (ynext(&y, &ev) != 0)
        goto fail;
    yaml_event_delete(&ev);
    if (ynext(&y, &ev) != 0)
        goto fail;
    bool more = ev.type != YAML_STREAM_END_EVENT;
    if (more)
        ybad(&y, &ev.start_mark, "more than one YAML document");
    yaml_event_delete(&ev);
    if (!more)
        goto out;
fail:
    json_decref(root);
    root = NULL;
out:
    yaml_parser_delete(&y.p);
    return root;
}

json_t *oa_load_document(const char *path, int64_t max_bytes, char *err,
                         size_t err_size)
{
    size_t len = 0;
    char *text = read_file(path, max_bytes, &len, err, err_size);
    if (!text)
        return NULL;
    size_t skip = strspn(text, " \t\r\n");
    const char *dot = strrchr(path, '.');
    json_t *doc;
    if ((dot && !strcmp(dot, ".json")) || text[skip] == '{') {
        json_error_t je;
        doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
        if (!doc)
            snprintf(err, err_size, "spec %s:%d:%d: %s", path, je.line,
                     je.column, je.text);
    } else {
        doc = load_yaml(path, text, len, err, err_size);
    }
    free(text);
    if (doc && !json_is_object(doc)) {
        snprintf(err, err_size, "spec %s: not an OpenAPI document (the top "
                                "level is not a map)", path);
        json_decref(doc);
        return NULL;
    }
    return doc;
}
