/* path.c - resolving caller-given paths inside a root folder, refusing
 * those that leave it (toolhost/sdk.h). */
#include "toolhost/sdk.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int fail(char *err, size_t err_size, int code, const char *fmt, ...)
    TH_SDK_PRINTF(4, 5);

static int fail(char *err, size_t err_size, int code, const char *fmt, ...)
{
    if (err && err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return code;
}

static int errno_code(int e)
{
    if (e == ENOENT || e == ENOTDIR)
        return TH_SDK_ENOENT;
    if (e == ENOMEM)
        return TH_SDK_ENOMEM;
    return TH_SDK_EIO;
}

int th_sdk_root_resolve(const char *root, char **out, char *err,
                        size_t err_size)
{
    if (!root || !out || !*root)
        return fail(err, err_size, TH_SDK_EINVAL, "the root is empty");
    char *r = realpath(root, NULL);
    if (!r) {
        int e = errno;
        return fail(err, err_size, errno_code(e), "root '%s': %s", root,
                    strerror(e));
    }
    struct stat st;
    if (stat(r, &st) != 0 || !S_ISDIR(st.st_mode)) {
        free(r);
        return fail(err, err_size, TH_SDK_EINVAL,
                    "root '%s' is not a folder", root);
    }
    *out = r;
    return TH_SDK_OK;
}

/* True when `p` is `root` or below it (both absolute, normalized). */
static bool inside(const char *root, const char *p)
{
    size_t n = strlen(root);
    if (n == 1 && root[0] == '/')
        return p[0] == '/';
    return strncmp(p, root, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

const char *th_sdk_path_relative(const char *root, const char *resolved)
{
    if (!root || !resolved || !inside(root, resolved))
        return resolved;
    size_t n = strlen(root);
    if (n == 1)
        return resolved + 1;
    return resolved[n] == '/' ? resolved + n + 1 : resolved + n;
}

/* Normalizes an absolute path lexically ("." and ".." removed, slashes
 * collapsed), in place; ".." at the top stays at "/".  The output never
 * runs ahead of the input: each component it writes had a slash before it
 * in the input. */
static void normalize(char *p)
{
    char *w = p; /* end of the output, which is "" or "/c1/c2..." */
    const char *r = p;
    while (*r) {
        while (*r == '/')
            r++;
        if (!*r)
            break;
        const char *s = r;
        while (*r && *r != '/')
            r++;
        size_t n = (size_t)(r - s);
        if (n == 1 && s[0] == '.')
            continue;
        if (n == 2 && s[0] == '.' && s[1] == '.') {
            while (w > p && *--w != '/')
                ; /* drop the last "/component" */
            continue;
        }
        *w++ = '/';
        memmove(w, s, n);
        w += n;
    }
    if (w == p)
        *w++ = '/';
    *w = '\0';
}

int th_sdk_path_resolve(const char *root, const char *path, unsigned flags,
                        char **out, char *err, size_t err_size)
{
    if (!root || !path || !out || root[0] != '/')
        return fail(err, err_size, TH_SDK_EINVAL,
                    "path resolution needs a resolved root and a path");
    /* The candidate: the path as given, anchored at the root. */
    size_t rl = strlen(root), pl = strlen(path);
    char *cand = malloc(rl + pl + 2);
    if (!cand)
        return fail(err, err_size, TH_SDK_ENOMEM, "out of memory");
    if (path[0] == '/')
        memcpy(cand, path, pl + 1);
    else
        snprintf(cand, rl + pl + 2, "%s/%s", root, path);
    normalize(cand);

    /* Refuse by the letter first, so that a path leaving the root is
     * called that, whether or not it exists out there. */
    if (!inside(root, cand)) {
        free(cand);
        return fail(err, err_size, TH_SDK_EPATH,
                    "path '%s' is outside the allowed root folder", path);
    }

    char *real = realpath(cand, NULL);
    if (!real && errno == ENOENT && (flags & TH_SDK_PATH_MAY_NOT_EXIST)) {
        /* The folder must exist inside the root; the name is appended. */
        char *slash = strrchr(cand, '/');
        const char *base = slash + 1;
        if (slash == cand || !*base) {
            free(cand);
            return fail(err, err_size, TH_SDK_ENOENT,
                        "path '%s': no such file or folder", path);
        }
        *slash = '\0';
        char *dir = realpath(cand, NULL);
        int e = errno;
        *slash = '/';
        if (!dir) {
            free(cand);
            return fail(err, err_size, errno_code(e), "path '%s': %s", path,
                        strerror(e));
        }
        struct stat st;
        size_t dl = strlen(dir), bl = strlen(base);
        if (!inside(root, dir) || lstat(cand, &st) == 0) {
            /* the folder escapes, or a dangling symlink is the name */
            free(dir);
            free(cand);
            return fail(err, err_size, TH_SDK_EPATH,
                        "path '%s' leads outside the allowed root folder "
                        "through a symbolic link",
                        path);
        }
        real = malloc(dl + bl + 2);
        if (!real) {
            free(dir);
            free(cand);
            return fail(err, err_size, TH_SDK_ENOMEM, "out of memory");
        }
        snprintf(real, dl + bl + 2, "%s/%s", strcmp(dir, "/") ? dir : "",
                 base);
        free(dir);
    } else if (!real) {
        int e = errno;
        free(cand);
        return fail(err, err_size, errno_code(e), "path '%s': %s", path,
                    e == ENOENT ? "no such file or folder" : strerror(e));
    }
    free(cand);
    if (!inside(root, real)) {
        free(real);
        return fail(err, err_size, TH_SDK_EPATH,
                    "path '%s' leads outside the allowed root folder "
                    "through a symbolic link",
                    path);
    }
    *out = real;
    return TH_SDK_OK;
}

int th_sdk_root_from_config(const uint8_t *config, size_t len,
                            const char *key, char **out, char *err,
                            size_t err_size)
{
    th_sdk_args a;
    const char *root = NULL;
    int rc = th_sdk_args_init(&a, config, len);
    if (rc == 0)
        rc = th_sdk_arg_cstr(&a, key, &root);
    if (rc) {
        th_sdk_args_destroy(&a);
        return fail(err, err_size, rc, "config key '%s': %s", key ? key : "",
                    rc == TH_SDK_EABSENT ? "missing (a folder path)"
                                         : th_sdk_strerror(rc));
    }
    rc = th_sdk_root_resolve(root, out, err, err_size);
    th_sdk_args_destroy(&a);
    return rc;
}

const toolhost_param th_sdk_rooted_config[1] = {
    TH_SDK_PARAM("root", STRING,
                 "The folder the tools may see; every path is relative to it.",
                 TH_SDK_REQUIRED),
};

int th_sdk_rooted_init(const toolhost_host_api *host, const uint8_t *config,
                       size_t len, void **state, char *err, size_t err_size)
{
    (void)host;
    th_sdk_rooted *st = calloc(1, sizeof *st);
    if (!st)
        return fail(err, err_size, TH_SDK_ENOMEM, "out of memory");
    int rc = th_sdk_root_from_config(config, len, "root", &st->root, err,
                                     err_size);
    if (rc != 0) {
        free(st);
        return rc;
    }
    *state = st;
    return 0;
}

void th_sdk_rooted_fini(void *state)
{
    th_sdk_rooted *st = state;
    if (st)
        free(st->root);
    free(st);
}

int th_sdk_rooted_arg_path(const th_sdk_rooted *st, th_sdk_args *a,
                           toolhost_call *call, const char *key,
                           const char *dflt, char **out)
{
    const char *path = th_sdk_arg_cstr_or(a, key, dflt);
    if (!path) {
        th_sdk_fail(call, "'%s' must be a string without NUL bytes", key);
        return 1;
    }
    char err[512];
    if (th_sdk_path_resolve(st->root, path, 0, out, err, sizeof err) != 0) {
        th_sdk_fail(call, "%s", err);
        return 1;
    }
    return 0;
}

const char *th_sdk_rooted_rel(const th_sdk_rooted *st, const char *resolved)
{
    const char *r = th_sdk_path_relative(st->root, resolved);
    return *r ? r : ".";
}
