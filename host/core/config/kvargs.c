/* kvargs.c - tool arguments from `key=value` words (th/kvargs.h).
 *
 * Threads: any; no shared state.  Reads files for `key=@path`.
 */
#include "th/kvargs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/buf.h"
#include "toolhost/plugin.h"

/* Reads a whole file for `key=@path`; NULL with errno set. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    th_buf b = TH_BUF_INIT;
    char chunk[65536];
    size_t n;
    int rc = 0;
    while (rc == 0 && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        rc = th_buf_append(&b, chunk, n);
    int bad = ferror(f) || rc != 0;
    fclose(f);
    if (bad || th_buf_reserve(&b, 0) != 0) { /* a NUL even for empty files */
        th_buf_destroy(&b);
        errno = rc != 0 ? ENOMEM : EIO;
        return NULL;
    }
    return (char *)th_buf_take(&b, len);
}

/* A string value, or NULL with err set (JSON strings are UTF-8). */
static json_t *string_value(const char *key, const char *value,
                            th_error *err)
{
    json_t *j = json_string(value);
    if (!j)
        th_error_set(err, TH_EARGS, "%s=...: the value is not UTF-8 text",
                     key);
    return j;
}

/* `value` as a value of `type` when its text is one; NULL when not. */
static json_t *convert(const char *value, int type)
{
    char *end;
    switch (type) {
    case TOOLHOST_TYPE_INTEGER: {
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (*value && !*end && errno == 0)
            return json_integer(v);
        return NULL;
    }
    case TOOLHOST_TYPE_NUMBER: {
        errno = 0;
        long long iv = strtoll(value, &end, 10);
        if (*value && !*end && errno == 0)
            return json_integer(iv);
        double v = strtod(value, &end);
        if (*value && !*end && isfinite(v))
            return json_real(v);
        return NULL;
    }
    case TOOLHOST_TYPE_BOOLEAN:
        if (!strcmp(value, "true") || !strcmp(value, "yes") ||
            !strcmp(value, "1"))
            return json_true();
        if (!strcmp(value, "false") || !strcmp(value, "no") ||
            !strcmp(value, "0"))
            return json_false();
        return NULL;
    case TOOLHOST_TYPE_ARRAY:
    case TOOLHOST_TYPE_OBJECT:
        return json_loads(value, JSON_DECODE_ANY, NULL);
    default:
        return NULL;
    }
}

/* Types one `value` for a parameter of type `type` (0: unknown). */
static json_t *typed_value(const char *key, const char *value, int type,
                           th_error *err)
{
    json_t *j = convert(value, type);
    if (j)
        return j;
    if (value[0] != '@')
        return string_value(key, value, err);
    if (value[1] == '@')
        return string_value(key, value + 1, err);
    size_t len;
    char *text = read_file(value + 1, &len);
    if (!text) {
        th_error_set(err, errno == ENOMEM ? TH_ENOMEM : TH_EIO,
                     "%s=@%s: cannot read the file: %s", key, value + 1,
                     strerror(errno ? errno : EIO));
        return NULL;
    }
    j = json_stringn(text, len);
    if (!j)
        th_error_set(err, TH_EARGS, "%s=@%s: the file is not UTF-8 text",
                     key, value + 1);
    free(text);
    return j;
}

/* The --json object, or a new empty one; NULL with err set. */
static json_t *base_object(const char *json_text, th_error *err)
{
    if (!json_text) {
        json_t *o = json_object();
        if (!o)
            th_error_set(err, TH_ENOMEM, "out of memory");
        return o;
    }
    json_error_t je;
    json_t *args = json_loads(json_text, 0, &je);
    if (!args) {
        th_error_set(err, TH_EARGS, "--json: %s (at character %d)", je.text,
                     je.position);
        return NULL;
    }
    if (!json_is_object(args)) {
        json_decref(args);
        th_error_set(err, TH_EARGS,
                     "--json: the arguments must be a JSON object");
        return NULL;
    }
    return args;
}

/* Adds one `key=value` word to args; 0 or -1 with err set. */
static int add_word(json_t *args, const char *word, th_kv_type_fn type_of,
                    void *ud, th_error *err)
{
    const char *eq = strchr(word, '=');
    if (!eq || eq == word)
        return th_error_set(err, TH_EARGS, "'%s' is not key=value", word);
    char key[128];
    size_t klen = (size_t)(eq - word);
    if (klen >= sizeof key)
        return th_error_set(err, TH_EARGS,
                            "parameter name too long in '%s'", word);
    memcpy(key, word, klen);
    key[klen] = '\0';
    json_t *v =
        typed_value(key, eq + 1, type_of ? type_of(ud, key) : 0, err);
    if (!v)
        return -1;
    if (json_object_set_new(args, key, v) != 0)
        return th_error_set(err, TH_EARGS,
                            "'%s': the parameter name is not UTF-8 text",
                            key);
    return 0;
}

json_t *th_kv_args(char *const *kv, int n_kv, const char *json_text,
                   th_kv_type_fn type_of, void *ud, th_error *err)
{
    json_t *args = base_object(json_text, err);
    for (int i = 0; args && i < n_kv; i++) {
        if (add_word(args, kv[i], type_of, ud, err) != 0) {
            json_decref(args);
            return NULL;
        }
    }
    return args;
}
