/* path.c - resolving caller-given paths inside a root folder, refusing
 * those that leave it (toolhost/sdk.h). */
#include "toolhost/sdk.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/openat2.h>
#include <sys/syscall.h>
#endif

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

const toolhost_param th_sdk_rooted_config[4] = {
    TH_SDK_PARAM("root", STRING,
                 "The folder the tools may see; every path is relative to it.",
                 TH_SDK_REQUIRED),
    TH_SDK_PARAM("follow_symlinks", BOOLEAN,
                 "Follow symbolic links that stay inside the root (links "
                 "that lead out are always refused); false refuses every "
                 "path through a link.",
                 TH_SDK_DEFAULT("true")),
    TH_SDK_PARAM("max_line_bytes", INTEGER,
                 "Longest line handed out whole; longer lines are cut there "
                 "with a marker.",
                 TH_SDK_DEFAULT("65536")),
    TH_SDK_PARAM("max_read_bytes", INTEGER,
                 "Most bytes one call returns from a file; past it the "
                 "answer says more follow.",
                 TH_SDK_DEFAULT("1048576")),
};

#define LINE_DEFAULT 65536
#define READ_DEFAULT (1024 * 1024)

int th_sdk_rooted_init(const toolhost_host_api *host, const uint8_t *config,
                       size_t len, void **state, char *err, size_t err_size)
{
    th_sdk_rooted *st = calloc(1, sizeof *st);
    if (!st)
        return fail(err, err_size, TH_SDK_ENOMEM, "out of memory");
    st->root_fd = -1;
    st->host = host;
    int rc = th_sdk_root_from_config(config, len, "root", &st->root, err,
                                     err_size);
    if (rc != 0)
        goto bad;
    th_sdk_args a;
    rc = th_sdk_args_init(&a, config, len);
    if (rc == 0) {
        st->follow_symlinks = th_sdk_arg_bool_or(&a, "follow_symlinks", true);
        st->max_line_bytes = th_sdk_arg_int_or(&a, "max_line_bytes",
                                               LINE_DEFAULT);
        st->max_read_bytes = th_sdk_arg_int_or(&a, "max_read_bytes",
                                               READ_DEFAULT);
    }
    th_sdk_args_destroy(&a);
    if (rc != 0) {
        fail(err, err_size, rc, "config: %s", th_sdk_strerror(rc));
        goto bad;
    }
    if (st->max_line_bytes < 16 || st->max_line_bytes > (1 << 30) ||
        st->max_read_bytes < 1) {
        rc = fail(err, err_size, TH_SDK_EINVAL,
                  "config: 'max_line_bytes' must be 16 .. 1073741824 and "
                  "'max_read_bytes' at least 1");
        goto bad;
    }
    const char *no2 = getenv("TOOLHOST_SDK_NO_OPENAT2");
    st->no_openat2 = no2 && strcmp(no2, "1") == 0;
    st->root_fd = open(st->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (st->root_fd < 0) {
        int e = errno;
        rc = fail(err, err_size, errno_code(e), "root '%s': %s", st->root,
                  strerror(e));
        goto bad;
    }
    *state = st;
    return 0;
bad:
    th_sdk_rooted_fini(st);
    return rc;
}

void th_sdk_rooted_fini(void *state)
{
    th_sdk_rooted *st = state;
    if (st) {
        if (st->root_fd >= 0)
            close(st->root_fd);
        free(st->root);
    }
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

/* ---- opening beneath the root fd ----------------------------------------- */

#define MAX_LINKS 40 /* symlinks followed in one open, as the kernel does */

/* The root-relative, lexically normalized name of `path`, malloc()ed ("."
 * for the root), or NULL with *code set (EPATH: it leaves the root). */
static char *relative_name(const char *root, const char *path, int *code)
{
    size_t rl = strlen(root), pl = strlen(path);
    char *cand = malloc(rl + pl + 2);
    if (!cand) {
        *code = TH_SDK_ENOMEM;
        return NULL;
    }
    if (path[0] == '/')
        memcpy(cand, path, pl + 1);
    else
        snprintf(cand, rl + pl + 2, "%s/%s", root, path);
    normalize(cand);
    if (!inside(root, cand)) {
        free(cand);
        *code = TH_SDK_EPATH;
        return NULL;
    }
    const char *r = th_sdk_path_relative(root, cand);
    if (!*r)
        r = ".";
    memmove(cand, r, strlen(r) + 1);
    return cand;
}

static void close_all(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

/* Appends the components of `s` (up to `n` bytes) to the work list
 * `todo` (a stack: the next component is on top), in reverse order. */
static int push_components(char ***todo, size_t *n, size_t *cap,
                           const char *s)
{
    size_t before = *n;
    const char *p = s;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *e = p;
        while (*e && *e != '/')
            e++;
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 16;
            char **t = realloc(*todo, nc * sizeof *t);
            if (!t)
                return -1;
            *todo = t;
            *cap = nc;
        }
        char *c = strndup(p, (size_t)(e - p));
        if (!c)
            return -1;
        (*todo)[(*n)++] = c;
        p = e;
    }
    /* reverse the new ones so the first component is on top */
    for (size_t i = before, j = *n; i + 1 < j; i++, j--) {
        char *t = (*todo)[i];
        (*todo)[i] = (*todo)[j - 1];
        (*todo)[j - 1] = t;
    }
    return 0;
}

/* The openat() walk for kernels without openat2: one component at a time
 * from the root fd, each opened O_PATH|O_NOFOLLOW; a symlink is read with
 * readlinkat() and its target walked in its place (an absolute target, or
 * ".." above the root, is EXDEV as with RESOLVE_BENEATH); ".." pops the
 * stack of held folder fds, never opens "..".  The last component is
 * opened with `oflags | O_NOFOLLOW` from its held parent, so a name
 * swapped for a symlink meanwhile fails with ELOOP instead of leading
 * elsewhere.  Returns the fd or -1 with errno. */
static int walk_open(int root_fd, const char *rel, int oflags, bool follow)
{
    enum { MAX_DEPTH = 256 };
    int stack[MAX_DEPTH]; /* held folder fds below the root */
    int depth = 0, links = 0, fd = -1, e = 0;
    char **todo = NULL;
    size_t n = 0, cap = 0;
    char target[PATH_MAX];

    if (push_components(&todo, &n, &cap, rel) != 0) {
        e = ENOMEM;
        goto out;
    }
    while (n > 0) {
        char *c = todo[--n];
        int dir = depth ? stack[depth - 1] : root_fd;
        if (strcmp(c, ".") == 0) {
            free(c);
            if (n == 0) {
                fd = openat(dir, ".", oflags);
                if (fd < 0)
                    e = errno;
                goto out;
            }
            continue;
        }
        if (strcmp(c, "..") == 0) {
            free(c);
            if (depth == 0) {
                e = EXDEV;
                goto out;
            }
            close(stack[--depth]);
            if (n == 0) {
                dir = depth ? stack[depth - 1] : root_fd;
                fd = openat(dir, ".", oflags);
                if (fd < 0)
                    e = errno;
                goto out;
            }
            continue;
        }
        int p = openat(dir, c, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        struct stat sb;
        if (p < 0 || fstat(p, &sb) != 0) {
            e = errno;
            if (p >= 0)
                close(p);
            free(c);
            goto out;
        }
        if (S_ISLNK(sb.st_mode)) {
            ssize_t tl = readlinkat(p, "", target, sizeof target - 1);
            e = errno;
            close(p);
            free(c);
            if (!follow) {
                e = ELOOP;
                goto out;
            }
            if (tl < 0)
                goto out;
            target[tl] = '\0';
            if (++links > MAX_LINKS) {
                e = ELOOP;
                goto out;
            }
            if (target[0] == '/') {
                e = EXDEV;
                goto out;
            }
            if (push_components(&todo, &n, &cap, target) != 0) {
                e = ENOMEM;
                goto out;
            }
            if (n == 0) { /* an empty target */
                e = ENOENT;
                goto out;
            }
            continue;
        }
        if (n == 0) {
            close(p);
            fd = openat(dir, c, oflags | O_NOFOLLOW);
            e = errno;
            free(c);
            goto out;
        }
        free(c);
        if (!S_ISDIR(sb.st_mode)) {
            close(p);
            e = ENOTDIR;
            goto out;
        }
        if (depth == MAX_DEPTH) {
            close(p);
            e = ENAMETOOLONG;
            goto out;
        }
        stack[depth++] = p;
    }
    fd = openat(depth ? stack[depth - 1] : root_fd, ".", oflags);
    if (fd < 0)
        e = errno;
out:
    close_all(stack, depth);
    while (n > 0)
        free(todo[--n]);
    free(todo);
    if (fd < 0)
        errno = e ? e : EIO;
    return fd;
}

/* Set once openat2 answered ENOSYS: the walk from then on. */
static _Atomic int openat2_missing;

/* Opens `rel` beneath `st->root_fd` with `oflags`: -1 with errno (EXDEV
 * when it leaves the root, ELOOP for a symlink when they are not
 * followed). */
static int open_beneath(const th_sdk_rooted *st, const char *rel, int oflags)
{
#if defined(__linux__) && defined(SYS_openat2)
    if (!st->no_openat2 && !openat2_missing) {
        struct open_how how = {
            .flags = (uint64_t)oflags,
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
                       (st->follow_symlinks ? 0 : RESOLVE_NO_SYMLINKS),
        };
        for (int tries = 0; tries < 64; tries++) {
            long fd = syscall(SYS_openat2, st->root_fd, rel, &how,
                              sizeof how);
            if (fd >= 0)
                return (int)fd;
            if (errno == EAGAIN || errno == EINTR)
                continue; /* a concurrent rename: the kernel asks again */
            if (errno != ENOSYS)
                return -1;
            openat2_missing = 1;
            break;
        }
        if (!openat2_missing) {
            errno = EAGAIN;
            return -1;
        }
    }
#endif
    return walk_open(st->root_fd, rel, oflags, st->follow_symlinks);
}

static const char *kind_name(mode_t m)
{
    if (S_ISDIR(m)) return "a folder";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISLNK(m)) return "a symbolic link";
    return "not a regular file";
}

int th_sdk_rooted_open(const th_sdk_rooted *st, const char *path,
                       unsigned kinds, int *fd, struct stat *sb, char **rel,
                       char *err, size_t err_size)
{
    if (!st || !path || !fd || st->root_fd < 0 || !kinds)
        return fail(err, err_size, TH_SDK_EINVAL,
                    "opening a path needs a rooted state and a path");
    int code = 0;
    char *name = relative_name(st->root, path, &code);
    if (!name)
        return code == TH_SDK_EPATH
                   ? fail(err, err_size, code,
                          "path '%s' is outside the allowed root folder",
                          path)
                   : fail(err, err_size, code, "out of memory");
    int oflags = (kinds & TH_SDK_OPEN_STAT)
                     ? O_PATH | O_CLOEXEC
                     : O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
    if (kinds == TH_SDK_OPEN_DIR)
        oflags |= O_DIRECTORY;
    int f = open_beneath(st, name, oflags);
    if (f < 0) {
        int e = errno;
        free(name);
        if (e == EXDEV)
            return fail(err, err_size, TH_SDK_EPATH,
                        "path '%s' leads outside the allowed root folder "
                        "through a symbolic link",
                        path);
        if (e == ELOOP && !st->follow_symlinks)
            return fail(err, err_size, TH_SDK_EPATH,
                        "path '%s' goes through a symbolic link, and "
                        "symbolic links are not followed here",
                        path);
        if (e == ENOTDIR && kinds == TH_SDK_OPEN_DIR)
            return fail(err, err_size, TH_SDK_ETYPE,
                        "path '%s' is not a folder", path);
        return fail(err, err_size, errno_code(e), "path '%s': %s", path,
                    e == ENOENT ? "no such file or folder" : strerror(e));
    }
    struct stat s;
    if (fstat(f, &s) != 0) {
        int e = errno;
        close(f);
        free(name);
        return fail(err, err_size, errno_code(e), "path '%s': %s", path,
                    strerror(e));
    }
    if (!(kinds & TH_SDK_OPEN_STAT)) {
        bool ok = (S_ISREG(s.st_mode) && (kinds & TH_SDK_OPEN_FILE)) ||
                  (S_ISDIR(s.st_mode) && (kinds & TH_SDK_OPEN_DIR));
        if (!ok) {
            close(f);
            free(name);
            if (kinds == TH_SDK_OPEN_DIR)
                return fail(err, err_size, TH_SDK_ETYPE,
                            "path '%s' is not a folder", path);
            return fail(err, err_size, TH_SDK_ETYPE,
                        "path '%s' is %s, not a regular file%s; refused",
                        path, kind_name(s.st_mode),
                        (kinds & TH_SDK_OPEN_DIR) ? " or folder" : "");
        }
        if (S_ISREG(s.st_mode)) {
            int fl = fcntl(f, F_GETFL);
            if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
                int e = errno;
                close(f);
                free(name);
                return fail(err, err_size, TH_SDK_EIO, "path '%s': %s",
                            path, strerror(e));
            }
        }
    }
    *fd = f;
    if (sb)
        *sb = s;
    if (rel)
        *rel = name;
    else
        free(name);
    return TH_SDK_OK;
}

int th_sdk_rooted_arg_open(const th_sdk_rooted *st, th_sdk_args *a,
                           toolhost_call *call, const char *key,
                           const char *dflt, unsigned kinds, int *fd,
                           struct stat *sb, char **rel)
{
    const char *path = th_sdk_arg_cstr_or(a, key, dflt);
    if (!path) {
        th_sdk_fail(call, "'%s' must be a string without NUL bytes", key);
        return 1;
    }
    char err[512];
    if (th_sdk_rooted_open(st, path, kinds, fd, sb, rel, err, sizeof err)) {
        th_sdk_fail(call, "%s", err);
        return 1;
    }
    return 0;
}

/* ---- bounded line reader --------------------------------------------------- */

#define CHUNK 65536

int th_sdk_lines_init(th_sdk_lines *r, int fd, size_t max_line)
{
    memset(r, 0, sizeof *r);
    r->fd = fd;
    r->max = max_line ? max_line : LINE_DEFAULT;
    /* room for one whole line plus a chunk read behind it */
    r->buf = malloc(r->max + CHUNK);
    return r->buf ? TH_SDK_OK : TH_SDK_ENOMEM;
}

void th_sdk_lines_destroy(th_sdk_lines *r)
{
    free(r->buf);
    r->buf = NULL;
}

/* Reads one chunk behind the kept bytes: 1 read, 0 end, < 0 error. */
static int fill(th_sdk_lines *r, const toolhost_call *call)
{
    if (call && th_sdk_cancelled(call))
        return TH_SDK_ECANCELLED;
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
    }
    size_t room = r->max + CHUNK - r->len;
    ssize_t n;
    do
        n = read(r->fd, r->buf + r->len, room < CHUNK ? room : CHUNK);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return TH_SDK_EIO;
    if (n == 0) {
        r->eof = true;
        return 0;
    }
    r->len += (size_t)n;
    r->bytes += n;
    return 1;
}

int th_sdk_lines_next(th_sdk_lines *r, const toolhost_call *call,
                      const char **line, size_t *len, bool *cut)
{
    *cut = false;
    for (;;) {
        char *s = r->buf + r->pos;
        size_t avail = r->len - r->pos;
        size_t look = avail < r->max ? avail : r->max;
        char *nl = memchr(s, '\n', look);
        if (nl) {
            *line = s;
            *len = (size_t)(nl - s) + 1;
            r->pos += *len;
            return 1;
        }
        if (avail >= r->max)
            break; /* too long: cut it */
        if (r->eof) {
            if (!avail)
                return 0;
            *line = s;
            *len = avail;
            r->pos = r->len;
            return 1;
        }
        int rc = fill(r, call);
        if (rc < 0)
            return rc;
    }
    /* Hand out the first max bytes and drop the rest of the line: move the
     * head to the front, then read and discard until a newline or the end,
     * keeping whatever follows the newline. */
    char *s = r->buf + r->pos;
    memmove(r->buf, s, r->max);
    size_t tail = r->len - r->pos - r->max; /* bytes behind the head */
    memmove(r->buf + r->max, s + r->max, tail);
    r->pos = 0;
    r->len = r->max + tail;
    for (;;) {
        char *t = r->buf + r->max;
        size_t tl = r->len - r->max;
        char *nl = memchr(t, '\n', tl);
        if (nl) {
            size_t drop = (size_t)(nl - t) + 1;
            memmove(t, nl + 1, tl - drop);
            r->len -= drop;
            break;
        }
        r->len = r->max; /* drop it all */
        if (r->eof)
            break;
        if (call && th_sdk_cancelled(call))
            return TH_SDK_ECANCELLED;
        size_t room = CHUNK;
        ssize_t n;
        do
            n = read(r->fd, r->buf + r->len, room);
        while (n < 0 && errno == EINTR);
        if (n < 0)
            return TH_SDK_EIO;
        if (n == 0) {
            r->eof = true;
            break;
        }
        r->len += (size_t)n;
        r->bytes += n;
    }
    /* The head is at [0, max); hand it out and keep the tail after it. */
    *line = r->buf;
    *len = r->max;
    *cut = true;
    r->pos = r->max;
    return 1;
}
