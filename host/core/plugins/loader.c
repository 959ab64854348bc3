/* loader.c - opens a plugin .so (or takes a built-in descriptor), checks
 * the ABI and every tool before trusting anything, copies what it declares
 * into host-owned th_plugin/th_tool/th_param, calls init(), and keeps the
 * generation alive by reference count until its last call ends.
 *
 * Order of checks (each failure is TH_ELOAD, "PATH: reason"): the file is
 * opened once by th_plugin_file_open(), which walks the path as written
 * without following a link it has not checked: every folder on the way,
 * every link and the file are owned by root or us and not writable by
 * group or others (sticky folders such as /tmp are fine) unless
 * allow_insecure; a second Go runtime refused (dl_go.h: a Go object is
 * opened with RTLD_NODELETE, and only one per process);
 * dlopen(RTLD_NOW|RTLD_LOCAL)
 * (a copy of dlerror() kept; "not a shared object" when the file is not
 * ELF); the entry symbol; struct_size read first, then abi_major, then
 * struct_size against the ABI 1.0 size; name and description; every tool.
 *
 * Threads: th_plugin_open/_builtin/_init/_destroy are Load class (one at a
 * time per plugin); th_plugin_ref/_unref and the host API callbacks may be
 * called from any thread.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "dl_go.h"
#include "dl_guard.h"
#include "th/content.h"
#include "th/iso.h"
#include "th/jschema.h"
#include "th/log.h"
#include "th/tool.h"

/* ---- host API callbacks --------------------------------------------------- */

static const th_call_vtbl *vt_of(const toolhost_call *call)
{
    return call ? ((const th_call_base *)call)->vt : NULL;
}

static int api_write(toolhost_call *call, int stream, const void *data,
                     size_t len)
{
    const th_call_vtbl *vt = vt_of(call);
    if (!vt || !vt->write)
        return TOOLHOST_EINVAL;
    return vt->write(call, stream, data, len);
}

static int api_set_meta(toolhost_call *call, const uint8_t *map, size_t len)
{
    const th_call_vtbl *vt = vt_of(call);
    if (!vt || !vt->set_meta)
        return TOOLHOST_EINVAL;
    return vt->set_meta(call, map, len);
}

static int api_progress(toolhost_call *call, double fraction,
                        const char *message, const uint8_t *data,
                        size_t data_len)
{
    const th_call_vtbl *vt = vt_of(call);
    if (!vt || !vt->progress)
        return TOOLHOST_EINVAL;
    return vt->progress(call, fraction, message, data, data_len);
}

static int api_is_cancelled(const toolhost_call *call)
{
    const th_call_vtbl *vt = vt_of(call);
    return vt && vt->is_cancelled ? vt->is_cancelled(call) : 0;
}

static int64_t api_time_left_ms(const toolhost_call *call)
{
    const th_call_vtbl *vt = vt_of(call);
    return vt && vt->time_left_ms ? vt->time_left_ms(call) : -1;
}

static int api_suspend(toolhost_call *call)
{
    const th_call_vtbl *vt = vt_of(call);
    if (!vt)
        return TOOLHOST_EINVAL;
    return vt->suspend ? vt->suspend(call) : TOOLHOST_ESTATE;
}

static int api_complete(toolhost_call *call, int status)
{
    const th_call_vtbl *vt = vt_of(call);
    if (!vt)
        return TOOLHOST_EINVAL;
    return vt->complete ? vt->complete(call, status) : TOOLHOST_ESTATE;
}

/* One log line from a plugin: control characters become spaces, long
 * messages are cut with a visible marker.  To the host log at its level,
 * and, for a log_call() line (`call` set), to the call's vtable log
 * (the front that made the call), whatever the host log's level. */
static void log_line(const toolhost_host_api *host, const toolhost_call *call,
                     int level, const char *message)
{
    if (level < TOOLHOST_LOG_ERROR)
        level = TOOLHOST_LOG_ERROR;
    if (level > TOOLHOST_LOG_DEBUG)
        level = TOOLHOST_LOG_DEBUG;
    const th_call_vtbl *vt = vt_of(call);
    bool to_log = level <= th_log_get_level();
    bool to_call = vt && vt->log;
    if (!to_log && !to_call)
        return;
    const th_plugin *p = th_plugin_from_api(host);
    /* One line: control characters become spaces.  Long messages are cut
     * with a visible marker. */
    char line[2048];
    size_t n = 0, i;
    for (i = 0; message[i] && n < sizeof line - 16; i++) {
        unsigned char c = (unsigned char)message[i];
        line[n++] = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
    }
    if (message[i]) {
        memcpy(line + n, " [cut]", 6);
        n += 6;
    }
    line[n] = '\0';
    if (to_log && call)
        th_log(level, "plugin %s: call %llu: %s", p->name,
               (unsigned long long)call->call_id, line);
    else if (to_log)
        th_log(level, "plugin %s: %s", p->name, line);
    if (to_call)
        vt->log(call, level, line);
}

static void api_log(const toolhost_host_api *host, int level,
                    const char *message)
{
    if (host && message)
        log_line(host, NULL, level, message);
}

/* ---- ABI 1.1 callbacks ---- */

static void api_log_call(const toolhost_call *call, int level,
                         const char *message)
{
    if (call && call->host && message)
        log_line(call->host, call, level, message);
}

static int api_caller(const toolhost_call *call, toolhost_caller *out)
{
    const th_call_vtbl *vt = vt_of(call);
    if (!vt || !out || out->struct_size < offsetof(toolhost_caller, user))
        return TOOLHOST_EINVAL;
    /* Only what fits in the plugin's struct is written. */
    toolhost_caller c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.uid = -1;
    int rc = vt->caller ? vt->caller(call, &c) : 0;
    if (rc)
        return rc;
    uint32_t keep = out->struct_size;
    memcpy((char *)out + sizeof keep, (const char *)&c + sizeof keep,
           (keep < sizeof c ? keep : sizeof c) - sizeof keep);
    return 0;
}

static int api_on_cancel(toolhost_call *call, void (*fn)(void *ud), void *ud)
{
    const th_call_vtbl *vt = vt_of(call);
    if (!vt)
        return TOOLHOST_EINVAL;
    return vt->on_cancel ? vt->on_cancel(call, fn, ud) : TOOLHOST_ESTATE;
}

static int api_cancel_fd(toolhost_call *call)
{
    const th_call_vtbl *vt = vt_of(call);
    if (!vt)
        return TOOLHOST_EINVAL;
    return vt->cancel_fd ? vt->cancel_fd(call) : TOOLHOST_ESTATE;
}

static int api_write_block(toolhost_call *call, const toolhost_block *block)
{
    const th_call_vtbl *vt = vt_of(call);
    if (!vt)
        return TOOLHOST_EINVAL;
    return vt->write_block ? vt->write_block(call, block) : TOOLHOST_ENOTSUP;
}

static int api_set_retry_after(toolhost_call *call, uint64_t ms)
{
    const th_call_vtbl *vt = vt_of(call);
    if (!vt)
        return TOOLHOST_EINVAL;
    return vt->set_retry_after ? vt->set_retry_after(call, ms)
                               : TOOLHOST_ENOTSUP;
}

static int api_ask_client(toolhost_call *call, int kind, const char *request,
                          size_t len, const char **answer, size_t *answer_len)
{
    const th_call_vtbl *vt = vt_of(call);
    if (!vt)
        return TOOLHOST_EINVAL;
    return vt->ask_client ? vt->ask_client(call, kind, request, len, answer,
                                           answer_len)
                          : TOOLHOST_ENOTSUP;
}

/* ---- ABI 1.5 ---- */

static int (*tools_changed_hook)(th_plugin *p, const char *reason);

void th_plugin_set_tools_changed_hook(int (*fn)(th_plugin *p,
                                                const char *reason))
{
    __atomic_store_n(&tools_changed_hook, fn, __ATOMIC_RELEASE);
}

/* Any thread, never waits: the reason made one printable line (control
 * characters become spaces, cut at TH_TOOLS_CHANGED_REASON_MAX bytes with
 * a marker), then handed to the reloader's hook. */
static int api_tools_changed(const toolhost_host_api *host, const char *reason)
{
    if (!host)
        return TOOLHOST_EINVAL;
    th_plugin *p = th_plugin_from_api(host);
    int (*fn)(th_plugin *, const char *) =
        __atomic_load_n(&tools_changed_hook, __ATOMIC_ACQUIRE);
    if (!fn) {
        th_log(TOOLHOST_LOG_DEBUG, "plugin %s: tools_changed() where no "
               "reloader runs (host.reload off, an isolated worker, "
               "toolhost check or call): not supported", p->name);
        return TOOLHOST_ENOTSUP;
    }
    char line[TH_TOOLS_CHANGED_REASON_MAX + 8];
    size_t n = 0, i = 0;
    if (!reason)
        reason = "(no reason given)";
    for (; reason[i] && n < TH_TOOLS_CHANGED_REASON_MAX; i++) {
        unsigned char c = (unsigned char)reason[i];
        line[n++] = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
    }
    if (reason[i]) {
        memcpy(line + n, " [cut]", 6);
        n += 6;
    }
    line[n] = '\0';
    return fn(p, line);
}

void th_host_api_fill(toolhost_host_api *api)
{
    memset(api, 0, sizeof *api);
    api->struct_size = sizeof *api;
    api->abi_major = TOOLHOST_ABI_MAJOR;
    api->abi_minor = TOOLHOST_ABI_MINOR;
    api->write = api_write;
    api->set_meta = api_set_meta;
    api->progress = api_progress;
    api->is_cancelled = api_is_cancelled;
    api->time_left_ms = api_time_left_ms;
    api->suspend = api_suspend;
    api->complete = api_complete;
    api->log = api_log;
    api->caller = api_caller;
    api->log_call = api_log_call;
    api->on_cancel = api_on_cancel;
    api->cancel_fd = api_cancel_fd;
    api->write_block = api_write_block; /* ABI 1.4 */
    api->ask_client = api_ask_client;
    th_iso_cage_api_fill(api); /* ABI 1.3: iso_cage_api.c */
    th_content_api_fill(api);  /* ABI 1.4: content.c */
    api->tools_changed = api_tools_changed; /* ABI 1.5 */
    api->set_retry_after = api_set_retry_after;
}

/* ---- lifetime ----------------------------------------------------------------- */

static void free_tool_range(th_tool *tools, size_t from, size_t n)
{
    for (size_t i = from; i < n; i++) {
        free(tools[i].name);
        free(tools[i].description);
        free(tools[i].long_description);
        free(tools[i].title);
        free(tools[i].output_schema);
        th_jschema_free(tools[i].out_schema);
        free(tools[i].input_schema);
        th_jschema_free(tools[i].in_schema);
        for (size_t k = 0; k < tools[i].n_tags; k++)
            free(tools[i].tags[k]);
        free(tools[i].tags);
        th_params_free(tools[i].params, tools[i].n_params);
        memset(&tools[i], 0, sizeof tools[i]);
    }
}

static void free_tools(th_tool *tools, size_t n)
{
    if (!tools)
        return;
    free_tool_range(tools, 0, n);
    free(tools);
}

void th_plugin_close(th_plugin *p)
{
    th_plugin_close_ex(p, NULL);
}

void th_plugin_close_ex(th_plugin *p, bool *deferred)
{
    if (deferred)
        *deferred = false;
    if (!p)
        return;
    if (p->initialized && p->desc && p->desc->fini)
        p->desc->fini(p->state);
    p->initialized = false;
    free_tools(p->tools, p->n_tools);
    th_content_unload(p);
    th_params_free(p->config_params, p->n_config_params);
    /* not under a thread of the plugin still in its code; a Go object
     * (RTLD_NODELETE) stays mapped whatever dlclose() does: its runtime's
     * threads never leave its code (dl_go.h) */
    if (p->dl && th_dl_go_is(p->dl))
        dlclose(p->dl);
    else if (p->dl && !th_dl_close_guarded(p->dl, p->name) && deferred)
        *deferred = true;
    free(p->name);
    free(p->path);
    free(p->load_path);
    free(p->version);
    free(p->description);
    if (p->on_destroy) /* isolation: the proxy's workers and descriptor */
        p->on_destroy(p);
    free(p);
}

void th_plugin_ref(th_plugin *p)
{
    atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
}

void th_plugin_unref(th_plugin *p)
{
    if (!p)
        return;
    if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (p->on_last_unref)
        p->on_last_unref(p);
    else
        th_plugin_close(p);
}

/* ---- checks -------------------------------------------------------------------- */

/* Refuses a file or folder that others could change under us (`st` is
 * what was opened; `name` how messages call it). */
static int check_owner_mode(const char *shown, const char *what,
                            const char *name, const struct stat *st,
                            th_error *err)
{
    bool is_dir = S_ISDIR(st->st_mode);
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) &&
        !(is_dir && (st->st_mode & S_ISVTX)))
        return th_error_set(err, TH_ELOAD,
                            "%s: refused: the %s %s is writable by %s (mode "
                            "%04o), so another user could change the code "
                            "the host runs; fix it with 'chmod go-w %s', or "
                            "set 'allow_insecure: true' for this plugin",
                            shown, what, name,
                            (st->st_mode & S_IWOTH) ? "others" : "its group",
                            (unsigned)(st->st_mode & 07777), name);
    if (st->st_uid != 0 && st->st_uid != geteuid())
        return th_error_set(err, TH_ELOAD,
                            "%s: refused: the %s %s belongs to another user "
                            "(uid %u), who could change the code the host "
                            "runs; give it to root or to uid %u, or set "
                            "'allow_insecure: true' for this plugin",
                            shown, what, name, (unsigned)st->st_uid,
                            (unsigned)geteuid());
    return 0;
}

/* Links followed at most while walking one path (as the kernel's 40). */
#define MAX_LINKS 40

/* The walk of th_plugin_file_open(): `dir` is the folder reached so far
 * (an O_PATH fd, checked), `where` its name as walked, `todo` what is
 * left of the path. */
typedef struct walk {
    const char *shown;
    int dir;
    char where[PATH_MAX];
    char todo[2 * PATH_MAX];
    int links;
} walk;

/* `known`: what the caller's fstat() of `fd` said, or NULL to look. */
static int walk_set_dir(walk *w, int fd, const char *where,
                        const struct stat *known, th_error *err)
{
    struct stat st;
    if (known) {
        st = *known;
    } else if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return th_error_set(err, TH_ELOAD, "%s: cannot read the folder %s: %s",
                            w->shown, where, strerror(e));
    }
    int rc = check_owner_mode(w->shown, "folder", where, &st, err);
    if (rc) {
        close(fd);
        return rc;
    }
    if (w->dir >= 0)
        close(w->dir);
    w->dir = fd;
    if (where != w->where)
        snprintf(w->where, sizeof w->where, "%s", where);
    return 0;
}

static int walk_root(walk *w, th_error *err)
{
    int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return th_error_set(err, TH_ELOAD, "%s: cannot open the folder /: %s",
                            w->shown, strerror(errno));
    return walk_set_dir(w, fd, "/", NULL, err);
}

/* "where/name" into buf (cut at cap: only for messages and the walk's
 * own bound, checked by the caller). */
static void join(char *buf, size_t cap, const char *where, const char *name)
{
    size_t n = strlen(where), m = strlen(name);
    bool slash = !(n && where[n - 1] == '/');
    if (n >= cap)
        n = cap - 1;
    memcpy(buf, where, n);
    if (slash && n + 1 < cap)
        buf[n++] = '/';
    if (m > cap - 1 - n)
        m = cap - 1 - n;
    memcpy(buf + n, name, m);
    buf[n + m] = '\0';
}

/* th_plugin_file_open without the check: the file opened as it is. */
static int open_unchecked(const char *path, const char *shown, int *fd_out,
                          th_error *err)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return th_error_set(err, TH_ELOAD, "%s: cannot open: %s", shown,
                            strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return th_error_set(err, TH_ELOAD, "%s: cannot open: not a "
                            "regular file", shown);
    }
    *fd_out = fd;
    return 0;
}

/* The walk's path (absolute: the current folder before a relative one)
 * in w->todo, and the walk at /. */
static int walk_start(walk *w, const char *path, th_error *err)
{
    if (path[0] == '/') {
        snprintf(w->todo, sizeof w->todo, "%s", path);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd))
            return th_error_set(err, TH_ELOAD, "%s: cannot open: the current "
                                "folder: %s", w->shown, strerror(errno));
        join(w->todo, sizeof w->todo, cwd, path);
    }
    if (strlen(w->todo) >= PATH_MAX)
        return th_error_set(err, TH_ELOAD, "%s: cannot open: %s", w->shown,
                            strerror(ENAMETOOLONG));
    return walk_root(w, err);
}

/* The walk's next name at *p into name (*p moved past it and the
 * slashes after it; *last: nothing follows). */
static int walk_name(walk *w, char **p, char name[NAME_MAX + 1], bool *last,
                     th_error *err)
{
    char *q = *p;
    while (*q == '/')
        q++;
    if (!*q)
        return th_error_set(err, TH_ELOAD, "%s: cannot open: %s", w->shown,
                            strerror(EISDIR));
    size_t len = strcspn(q, "/");
    if (len > NAME_MAX)
        return th_error_set(err, TH_ELOAD, "%s: cannot open: %s", w->shown,
                            strerror(ENAMETOOLONG));
    memcpy(name, q, len);
    name[len] = '\0';
    q += len;
    while (*q == '/')
        q++;
    *last = *q == '\0';
    *p = q;
    return 0;
}

/* The path the walk reaches through name (for messages and the next
 * folder's own): ".." is the folder above. */
static void walk_next(const walk *w, const char *name, char next[PATH_MAX])
{
    if (strcmp(name, "..") == 0) {
        snprintf(next, PATH_MAX, "%s", w->where);
        char *slash = strrchr(next, '/');
        if (slash == next)
            slash[1] = '\0';
        else if (slash)
            *slash = '\0';
    } else {
        join(next, PATH_MAX, w->where, name);
    }
}

/* A symlink met on the walk (c: opened O_PATH, closed here; st its
 * stat): its target takes its place in w->todo, *p at its start. */
static int walk_link(walk *w, int c, const struct stat *st, const char *next,
                     char **p, th_error *err)
{
    /* Its folder was checked when the walk entered it; the link
     * itself must be ours or root's (in a sticky folder anyone
     * may own one). */
    if (st->st_uid != 0 && st->st_uid != geteuid()) {
        close(c);
        return th_error_set(err, TH_ELOAD,
                            "%s: refused: the symlink %s belongs to "
                            "another user (uid %u), who could point it "
                            "at other code; give it to root or to uid "
                            "%u, or set 'allow_insecure: true' for this "
                            "plugin",
                            w->shown, next, (unsigned)st->st_uid,
                            (unsigned)geteuid());
    }
    if (++w->links > MAX_LINKS) {
        close(c);
        return th_error_set(err, TH_ELOAD, "%s: cannot open: %s", w->shown,
                            strerror(ELOOP));
    }
    char target[PATH_MAX];
    ssize_t n = readlinkat(c, "", target, sizeof target - 1);
    int e = errno;
    close(c);
    if (n <= 0 || (size_t)n >= sizeof target - 1)
        return th_error_set(err, TH_ELOAD, "%s: cannot read the symlink "
                            "%s: %s", w->shown, next,
                            strerror(n < 0 ? e : ENAMETOOLONG));
    /* target, then what is left of the path (*p, inside w->todo) */
    size_t rl = strlen(*p), sl = **p ? 1 : 0;
    if ((size_t)n + sl + rl >= PATH_MAX)
        return th_error_set(err, TH_ELOAD, "%s: cannot open: %s", w->shown,
                            strerror(ENAMETOOLONG));
    char rest[PATH_MAX];
    memcpy(rest, target, (size_t)n);
    if (sl)
        rest[n] = '/';
    memcpy(rest + n + sl, *p, rl + 1);
    memcpy(w->todo, rest, (size_t)n + sl + rl + 1);
    *p = w->todo;
    if (target[0] == '/')
        return walk_root(w, err);
    return 0;
}

/* The walk's last name, not a folder nor a link (st: its stat, taken
 * O_PATH): a regular file whose owner and mode are checked, opened, and
 * compared with what was checked. */
static int walk_open_file(walk *w, const char *name, const char *next,
                          const struct stat *st, int *fd_out, th_error *err)
{
    if (!S_ISREG(st->st_mode))
        return th_error_set(err, TH_ELOAD, "%s: cannot open: not a regular "
                            "file", w->shown);
    int rc = check_owner_mode(w->shown, "file", next, st, err);
    if (rc)
        return rc;
    /* The folder is one only root or we may change: the name still
     * means the file just checked; compare to be sure. */
    int fd = openat(w->dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    struct stat st2;
    if (fd < 0 || fstat(fd, &st2) != 0) {
        rc = th_error_set(err, TH_ELOAD, "%s: cannot open: %s", w->shown,
                          strerror(errno));
    } else if (st2.st_dev != st->st_dev || st2.st_ino != st->st_ino) {
        rc = th_error_set(err, TH_ELOAD, "%s: refused: the file %s was "
                          "replaced while it was checked", w->shown, next);
    } else {
        *fd_out = fd;
        return 0;
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

/* th_plugin_file_open with the check: the path walked one name at a time
 * from /, each folder and link checked as it is entered (walk_set_dir,
 * walk_link), the file last (walk_open_file). */
static int open_checked(walk *w, const char *path, int *fd_out, th_error *err)
{
    const char *shown = w->shown;
    int rc = walk_start(w, path, err);
    if (rc)
        return rc;
    char *p = w->todo;
    for (;;) {
        char name[NAME_MAX + 1];
        bool last = false;
        if ((rc = walk_name(w, &p, name, &last, err)))
            return rc;
        if (strcmp(name, ".") == 0) {
            if (last)
                return th_error_set(err, TH_ELOAD, "%s: cannot open: %s",
                                    shown, strerror(EISDIR));
            continue;
        }
        char next[PATH_MAX];
        walk_next(w, name, next);
        struct stat st;
        int c = openat(w->dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (c < 0 || fstat(c, &st) != 0) {
            rc = th_error_set(err, TH_ELOAD, "%s: cannot open: %s", shown,
                              strerror(errno));
            if (c >= 0)
                close(c);
            return rc;
        }
        if (S_ISLNK(st.st_mode)) {
            if ((rc = walk_link(w, c, &st, next, &p, err)))
                return rc;
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            if (last) {
                close(c);
                return th_error_set(err, TH_ELOAD, "%s: cannot open: %s",
                                    shown, strerror(EISDIR));
            }
            if ((rc = walk_set_dir(w, c, next, &st, err)))
                return rc;
            continue;
        }
        close(c);
        if (!last)
            return th_error_set(err, TH_ELOAD, "%s: cannot open: %s", shown,
                                strerror(ENOTDIR));
        return walk_open_file(w, name, next, &st, fd_out, err);
    }
}

int th_plugin_file_open(const char *path, const char *shown, bool check,
                        int *fd_out, th_error *err)
{
    *fd_out = -1;
    if (!shown)
        shown = path;
    if (!check)
        return open_unchecked(path, shown, fd_out, err);
    walk *w = calloc(1, sizeof *w);
    if (!w)
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    w->shown = shown;
    w->dir = -1;
    int rc = open_checked(w, path, fd_out, err);
    if (w->dir >= 0)
        close(w->dir);
    free(w);
    return rc;
}

static bool is_elf_fd(int fd)
{
    unsigned char magic[4] = {0};
    ssize_t n = pread(fd, magic, sizeof magic, 0);
    return n == 4 && memcmp(magic, "\177ELF", 4) == 0;
}

static bool semantic_ok(uint32_t t)
{
    return t >= TOOLHOST_SEM_TEXT && t <= TOOLHOST_SEM_BINARY;
}

#define KNOWN_FLAGS                                                           \
    (TOOLHOST_TOOL_ASYNC | TOOLHOST_TOOL_READ_ONLY |                          \
     TOOLHOST_TOOL_DESTRUCTIVE | TOOLHOST_TOOL_IDEMPOTENT |                   \
     TOOLHOST_TOOL_OPEN_WORLD | TOOLHOST_TOOL_SERIAL | TOOLHOST_TOOL_SHORT)

/* "built against toolhost ABI 1.N, this host supports 1.M" */
static int newer_refused(th_error *err, const char *shown, uint32_t minor,
                         const char *why)
{
    return th_error_set(err, TH_ELOAD,
                        "%s: built against toolhost ABI 1.%u, this host "
                        "supports 1.%d: %s (upgrade the host, or rebuild the "
                        "plugin against this host's toolhost/plugin.h)",
                        shown, minor, TOOLHOST_ABI_MINOR, why);
}

/* A semantic type: known, or (from a newer plugin) read as TEXT. */
static int semantic_of(const char *shown, const toolhost_tool *d,
                       uint32_t minor, const char *stream, uint32_t t,
                       uint32_t *out, th_error *err)
{
    *out = t;
    if (semantic_ok(t))
        return 0;
    if (minor > TOOLHOST_ABI_MINOR && t != 0) {
        th_log(TOOLHOST_LOG_WARN,
               "%s: tool '%s' has the %s semantic type %u, unknown to this "
               "host (the plugin is built against toolhost ABI 1.%u, this "
               "host supports 1.%d): read as text",
               shown, d->name, stream, t, minor, TOOLHOST_ABI_MINOR);
        *out = TOOLHOST_SEM_TEXT;
        return 0;
    }
    return th_error_set(err, TH_ELOAD,
                        "%s: tool '%s' has an unknown %s semantic "
                        "type %u (known: %d to %d, see toolhost_semantic)",
                        shown, d->name, stream, t, TOOLHOST_SEM_TEXT,
                        TOOLHOST_SEM_BINARY);
}

/* The ABI 1.1 members of a tool: title and output_schema. */
static int check_tool_11(const char *shown, const toolhost_tool *d,
                         th_tool *t, th_error *err)
{
    if (!TOOLHOST_HAS_MEMBER(toolhost_tool, d, output_schema))
        return 0;
    if (d->title && !(t->title = strdup(d->title)))
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    if (!d->output_schema)
        return 0;
    if (t->stdout_type != TOOLHOST_SEM_STRUCTURED)
        return th_error_set(err, TH_ELOAD,
                            "%s: tool '%s' has an output_schema but its "
                            "stdout type is %u (an output_schema needs "
                            "TOOLHOST_SEM_STRUCTURED, %d)",
                            shown, d->name, t->stdout_type,
                            TOOLHOST_SEM_STRUCTURED);
    if (!(t->output_schema = strdup(d->output_schema)))
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    char what[200];
    snprintf(what, sizeof what, "%s: tool '%s': output_schema", shown,
             d->name);
    return th_jschema_compile(what, d->output_schema, &t->out_schema, err);
}

/* The ABI 1.4 member of a tool: input_schema, one object schema instead
 * of params. */
static int check_tool_14(const char *shown, const toolhost_tool *d,
                         th_tool *t, th_error *err)
{
    if (!TOOLHOST_HAS_MEMBER(toolhost_tool, d, input_schema) ||
        !d->input_schema)
        return 0;
    if (d->n_params)
        return th_error_set(err, TH_ELOAD,
                            "%s: tool '%s' has both params and an "
                            "input_schema (declare the input one way)",
                            shown, d->name);
    char what[200];
    snprintf(what, sizeof what, "%s: tool '%s': input_schema", shown,
             d->name);
    json_error_t je;
    json_t *j = json_loads(d->input_schema, 0, &je);
    const char *type = json_string_value(json_object_get(j, "type"));
    bool object = type && strcmp(type, "object") == 0, parsed = j != NULL;
    json_decref(j);
    if (!object)
        return th_error_set(err, TH_ELOAD,
                            "%s: %s (an input schema is a JSON object with "
                            "\"type\": \"object\")",
                            what, parsed ? "has no \"type\": \"object\""
                                         : je.text);
    if (!(t->input_schema = strdup(d->input_schema)))
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    return th_jschema_compile(what, d->input_schema, &t->in_schema, err);
}

/* The ABI 1.5 member of a tool: tags, each checked and copied.  The
 * list is walked to at most TOOLHOST_MAX_TAGS + 1 entries, so a missing
 * NULL terminator is "too many", never a read past the end of a short
 * array the plugin meant. */
static int check_tool_15(const char *shown, const toolhost_tool *d,
                         th_tool *t, th_error *err)
{
    if (!TOOLHOST_HAS_MEMBER(toolhost_tool, d, tags) || !d->tags)
        return 0;
    size_t n = 0;
    while (n <= TOOLHOST_MAX_TAGS && d->tags[n])
        n++;
    if (n > TOOLHOST_MAX_TAGS)
        return th_error_set(err, TH_ELOAD,
                            "%s: tool '%s' declares more than %d tags (or "
                            "its tags list is not NULL-terminated)",
                            shown, d->name, TOOLHOST_MAX_TAGS);
    if (n == 0)
        return 0;
    if (!(t->tags = calloc(n, sizeof *t->tags)))
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    for (size_t i = 0; i < n; i++) {
        const char *g = d->tags[i];
        if (!th_tag_name_valid(g)) {
            /* shown cut to 40 bytes, anything unprintable as '?': the
             * message is one log line whatever an isolated worker sent */
            char cut[41];
            size_t k = 0;
            for (; k < sizeof cut - 1 && g[k]; k++)
                cut[k] = g[k] >= 0x20 && g[k] < 0x7f ? g[k] : '?';
            cut[k] = '\0';
            return th_error_set(err, TH_ELOAD,
                                "%s: tool '%s' has an invalid tag '%s' "
                                "(allowed: ^[a-z0-9][a-z0-9_-]{0,31}$)",
                                shown, d->name, cut);
        }
        if (th_tool_has_tag(t, g))
            return th_error_set(err, TH_ELOAD,
                                "%s: tool '%s' declares the tag '%s' twice",
                                shown, d->name, g);
        if (!(t->tags[i] = strdup(g)))
            return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
        t->n_tags = i + 1;
    }
    return 0;
}

/* Where problems go in "report every problem" mode (th_load_opts.on_problem):
 * a problem that does not stop the checks is reported and counted, and
 * the checks go on; the first one is returned at the end. */
typedef struct reporter {
    void (*fn)(void *ud, const char *msg);
    void *ud;
    int count;
    th_error first;
} reporter;

/* After `err` was set: 0 to go on (reported), or the code to return. */
static int problem(reporter *r, th_error *err, int code)
{
    if (!r || !r->fn || code != TH_ELOAD || !err)
        return code;
    r->fn(r->ud, err->msg);
    if (r->count++ == 0)
        r->first = *err;
    return 0;
}

static int report_param(void *ud, th_error *err, int code)
{
    return problem(ud, err, code);
}

/* Checks one tool and copies it into *t.  `shown` prefixes messages.  In
 * "report every problem" mode (r), each problem after the name is
 * reported and the next check runs, so one run shows them all. */
static int check_tool(const char *shown, const toolhost_tool *d, uint32_t idx,
                      uint32_t minor, th_tool *t, reporter *r, th_error *err)
{
    if (!d->name)
        return th_error_set(err, TH_ELOAD, "%s: tool #%u has no name", shown,
                            idx + 1);
    if (!th_tool_name_valid(d->name))
        return th_error_set(err, TH_ELOAD,
                            "%s: tool '%.100s' has an invalid name (allowed: "
                            "letters, digits, _ and -, 1 to 64)",
                            shown, d->name);
    if (!(t->name = strdup(d->name)))
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    int rc, bad = 0;
#define GO_ON(expr)                                                           \
    do {                                                                      \
        if ((rc = (expr))) {                                                  \
            if ((rc = problem(r, err, rc)))                                   \
                return rc;                                                    \
            bad = 1;                                                          \
        }                                                                     \
    } while (0)
    if (!d->description || !d->description[0])
        GO_ON(th_error_set(err, TH_ELOAD,
                           "%s: tool '%s' has no description (a model needs "
                           "one line saying what it does)",
                           shown, d->name));
    if (!d->execute)
        GO_ON(th_error_set(err, TH_ELOAD,
                           "%s: tool '%s' has no execute function", shown,
                           d->name));
    GO_ON(semantic_of(shown, d, minor, "stdout", d->stdout_type,
                      &t->stdout_type, err));
    GO_ON(semantic_of(shown, d, minor, "stderr", d->stderr_type,
                      &t->stderr_type, err));
    uint32_t unknown = d->flags & ~KNOWN_FLAGS;
    uint32_t advisory = unknown & TOOLHOST_TOOL_ADVISORY_MASK;
    if (unknown & ~TOOLHOST_TOOL_ADVISORY_MASK) {
        if (minor > TOOLHOST_ABI_MINOR) {
            char why[160];
            snprintf(why, sizeof why,
                     "tool '%s' uses flag bits 0x%x that this host does "
                     "not know",
                     d->name, unknown & ~TOOLHOST_TOOL_ADVISORY_MASK);
            return newer_refused(err, shown, minor, why);
        }
        GO_ON(th_error_set(err, TH_ELOAD,
                           "%s: tool '%s' has unknown flag bits 0x%x (known: "
                           "TOOLHOST_TOOL_* = 0x%x; the plugin says it is "
                           "built against toolhost ABI 1.%u, which has no "
                           "such flag)",
                           shown, d->name, unknown, KNOWN_FLAGS, minor));
    }
    if (advisory)
        th_log(TOOLHOST_LOG_WARN,
               "%s: tool '%s' has advisory flag bits 0x%x unknown to this "
               "host (the plugin is built against toolhost ABI 1.%u, this "
               "host supports 1.%d): ignored",
               shown, d->name, advisory, minor, TOOLHOST_ABI_MINOR);
    if ((d->description && !(t->description = strdup(d->description))) ||
        (d->long_description &&
         !(t->long_description = strdup(d->long_description))))
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    char what[1200];
    snprintf(what, sizeof what, "%.1000s: tool '%s'", shown, d->name);
    GO_ON(th_params_from_abi_r(what, d->params, d->n_params, report_param, r,
                               &t->params, &t->n_params, err));
    t->flags = d->flags & ~advisory;
    t->desc = d;
    GO_ON(check_tool_11(shown, d, t, err));
    GO_ON(check_tool_14(shown, d, t, err));
    GO_ON(check_tool_15(shown, d, t, err));
#undef GO_ON
    (void)bad; /* reported: the load fails at the end */
    return 0;
}

/* Checks the array `tools` of n tools (the descriptor's, or what
 * init_tools() returned: `from` names the array) and appends copies to
 * p->tools, after the p->n_tools there already (static tools: no name may
 * repeat theirs). */
static int check_tools(const char *shown, const char *from,
                       const toolhost_tool *tools, uint32_t n, uint32_t minor,
                       th_plugin *p, reporter *r, th_error *err)
{
    if (n == 0)
        return 0;
    if (!tools)
        return th_error_set(err, TH_ELOAD, "%s: n_tools is %u but %s is "
                            "NULL", shown, n, from);
    uint32_t stride = tools[0].struct_size;
    if (stride < TH_ABI10_TOOL_SIZE)
        return th_error_set(err, TH_ELOAD,
                            "%s: toolhost_tool struct_size %u (of the first "
                            "tool) is smaller than the %zu bytes of ABI 1.0",
                            shown, stride, TH_ABI10_TOOL_SIZE);
    /* A size larger than the plugin's own minor has is a lie about the
     * first element (the stride), not a fault of tool #2 read at the wrong
     * place. */
    if (minor <= TOOLHOST_ABI_MINOR && stride > sizeof(toolhost_tool))
        return th_error_set(err, TH_ELOAD,
                            "%s: toolhost_tool struct_size %u (of the first "
                            "tool) is larger than the %zu bytes of ABI 1.%d, "
                            "and the plugin says it is built against 1.%u",
                            shown, stride, sizeof(toolhost_tool),
                            TOOLHOST_ABI_MINOR, minor);
    if (stride % alignof(toolhost_tool))
        return th_error_set(err, TH_ELOAD,
                            "%s: toolhost_tool struct_size %u is not a "
                            "multiple of its alignment %zu",
                            shown, stride, alignof(toolhost_tool));
    size_t base = p->n_tools;
    th_tool *nt = realloc(p->tools, (base + n) * sizeof *nt);
    if (!nt)
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    memset(nt + base, 0, n * sizeof *nt);
    p->tools = nt;
    int rc;
    for (uint32_t i = 0; i < n; i++) {
        const toolhost_tool *td =
            (const toolhost_tool *)((const char *)tools +
                                    (size_t)i * stride);
        if (td->struct_size != stride)
            return th_error_set(err, TH_ELOAD,
                                "%s: tool #%u has struct_size %u, the first "
                                "has %u (all must be the same)",
                                shown, i + 1, td->struct_size, stride);
        th_tool *t = &p->tools[base + i];
        p->n_tools = base + i + 1;
        t->plugin = p;
        if ((rc = check_tool(shown, td, i, minor, t, r, err))) {
            if ((rc = problem(r, err, rc)))
                return rc;
            continue;
        }
        for (size_t k = 0; k < base + i; k++) {
            if (p->tools[k].name && strcmp(p->tools[k].name, t->name) == 0) {
                if (k < base)
                    rc = th_error_set(err, TH_ELOAD,
                                      "%s: tool name '%s' is also a static "
                                      "tool's (in the descriptor)",
                                      shown, t->name);
                else
                    rc = th_error_set(err, TH_ELOAD,
                                      "%s: tool name '%s' appears twice",
                                      shown, t->name);
                if ((rc = problem(r, err, rc)))
                    return rc;
                break;
            }
        }
    }
    return 0;
}

/* Checks a descriptor and fills p (name, tools, config params). */
static int check_desc(const char *shown, const toolhost_plugin *d,
                      th_plugin *p, reporter *r, th_error *err)
{
    if (!d)
        return th_error_set(err, TH_ELOAD, "%s: the entry point returned NULL",
                            shown);
    /* struct_size first, then the major version, then the full size. */
    uint32_t size = d->struct_size;
    if (size >= offsetof(toolhost_plugin, abi_major) + sizeof d->abi_major &&
        d->abi_major != TOOLHOST_ABI_MAJOR)
        return th_error_set(err, TH_ELOAD,
                            "%s: ABI major %u, this host speaks %d (rebuild "
                            "the plugin against this host's "
                            "toolhost/plugin.h)",
                            shown, d->abi_major, TOOLHOST_ABI_MAJOR);
    if (size < TH_ABI10_PLUGIN_SIZE)
        return th_error_set(err, TH_ELOAD,
                            "%s: toolhost_plugin struct_size %u is smaller "
                            "than the %zu bytes of ABI 1.0",
                            shown, size, TH_ABI10_PLUGIN_SIZE);
    uint32_t minor = d->abi_minor;
    if (minor <= TOOLHOST_ABI_MINOR && size > sizeof(toolhost_plugin))
        return th_error_set(err, TH_ELOAD,
                            "%s: toolhost_plugin struct_size %u is larger "
                            "than the %zu bytes of ABI 1.%d, and the plugin "
                            "says it is built against 1.%u",
                            shown, size, sizeof(toolhost_plugin),
                            TOOLHOST_ABI_MINOR, minor);
    p->abi_minor = minor;
    if (TOOLHOST_HAS_MEMBER(toolhost_plugin, d, requires_host_minor)) {
        if (d->requires_host_minor > TOOLHOST_ABI_MINOR) {
            char why[96];
            snprintf(why, sizeof why, "it requires a host of ABI 1.%u or "
                                      "newer",
                     d->requires_host_minor);
            return newer_refused(err, shown, minor > d->requires_host_minor
                                                 ? minor
                                                 : d->requires_host_minor,
                                 why);
        }
        uint64_t unknown = d->flags & ~(uint64_t)TOOLHOST_PLUGIN_KNOWN;
        if (unknown && minor > TOOLHOST_ABI_MINOR) {
            char why[96];
            snprintf(why, sizeof why, "plugin flag bits 0x%llx are unknown "
                                      "here",
                     (unsigned long long)unknown);
            return newer_refused(err, shown, minor, why);
        }
        if (unknown)
            return th_error_set(err, TH_ELOAD,
                                "%s: unknown plugin flag bits 0x%llx (known: "
                                "TOOLHOST_PLUGIN_* = 0x%x)",
                                shown, (unsigned long long)unknown,
                                (unsigned)TOOLHOST_PLUGIN_KNOWN);
        p->flags = d->flags;
    }
    if (minor > TOOLHOST_ABI_MINOR)
        th_log(TOOLHOST_LOG_INFO,
               "%s: built against toolhost ABI 1.%u, this host supports "
               "1.%d: loaded; what 1.%u added is not used",
               shown, minor, TOOLHOST_ABI_MINOR, minor);
    if (!d->name)
        return th_error_set(err, TH_ELOAD, "%s: the plugin has no name",
                            shown);
    if (!th_tool_name_valid(d->name))
        return th_error_set(err, TH_ELOAD,
                            "%s: plugin name '%.100s' is invalid (allowed: "
                            "letters, digits, _ and -, 1 to 64)",
                            shown, d->name);
    int rc;
    if (!d->description || !d->description[0]) {
        rc = th_error_set(err, TH_ELOAD, "%s: plugin '%s' has no description",
                          shown, d->name);
        if ((rc = problem(r, err, rc)))
            return rc;
    }
    if (!(p->version = strdup(d->version ? d->version : "")) ||
        !(p->description = strdup(d->description ? d->description : "")))
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    char what[1200];
    snprintf(what, sizeof what, "%.1000s: config of plugin '%s'", shown,
             d->name);
    rc = th_params_from_abi_r(what, d->config_params, d->n_config_params,
                              report_param, r, &p->config_params,
                              &p->n_config_params, err);
    if (rc && (rc = problem(r, err, rc)))
        return rc;
    if ((rc = check_tools(shown, "tools", d->tools, d->n_tools,
                          minor, p, r, err)))
        return rc;
    if ((rc = th_content_load(shown, d, p, err)) &&
        (rc = problem(r, err, rc)))
        return rc;
    if (r && r->count) {
        *err = r->first;
        if (r->count > 1) {
            size_t n = strlen(err->msg);
            snprintf(err->msg + n, sizeof err->msg - n,
                     " (and %d more problem%s)", r->count - 1,
                     r->count > 2 ? "s" : "");
        }
        return TH_ELOAD;
    }
    return 0;
}

static th_plugin *plugin_alloc(void)
{
    th_plugin *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    th_host_api_fill(&p->api);
    atomic_init(&p->refs, 1);
    p->generation = 1;
    return p;
}

/* ---- open ----------------------------------------------------------------------- */

/* A shared object still being written (see th/tool.h): dlopen() of a
 * truncated object can kill the process with SIGBUS, so look first. */
bool th_elf_incomplete(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return false; /* missing: not "being written", a real error */
    bool inc = th_elf_incomplete_fd(fd);
    close(fd);
    return inc;
}

bool th_elf_incomplete_fd(int fd)
{
    struct stat st;
    Elf64_Ehdr eh;
    bool inc = false;
    if (fstat(fd, &st) != 0)
        return false;
    uint64_t size = (uint64_t)st.st_size;
    /* One read for the header and, in every object a linker writes, the
     * program headers right after it (a read per header cost ten system
     * calls per load, twice per plugin). */
    static _Thread_local unsigned char head[4096];
    ssize_t got = pread(fd, head, sizeof head, 0);
    if (got < 0)
        return false;
    size_t n = (size_t)got < sizeof eh ? (size_t)got : sizeof eh;
    memcpy(&eh, head, n);
    if (size == 0) {
        inc = true;
    } else if (n < SELFMAG) {
        /* Too short to tell: a prefix of the ELF magic is being written. */
        inc = memcmp(&eh, ELFMAG, n) == 0;
    } else if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
        inc = false; /* not ELF at all: broken, not half-written */
    } else if (n < sizeof eh || eh.e_ident[EI_CLASS] != ELFCLASS64) {
        inc = n < sizeof eh;
    } else {
        /* Section table at the end of the file: written last. */
        if (eh.e_shoff && eh.e_shoff + (uint64_t)eh.e_shnum * eh.e_shentsize > size)
            inc = true;
        if (eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize > size)
            inc = true;
        for (unsigned i = 0; !inc && i < eh.e_phnum && i < 64; i++) {
            Elf64_Phdr ph;
            uint64_t at = eh.e_phoff + (uint64_t)i * eh.e_phentsize;
            if (eh.e_phentsize < sizeof ph)
                break;
            if (at + sizeof ph <= (uint64_t)got)
                memcpy(&ph, head + at, sizeof ph);
            else if (pread(fd, &ph, sizeof ph, (off_t)at) != (ssize_t)sizeof ph)
                break;
            if (ph.p_type == PT_LOAD && ph.p_offset + ph.p_filesz > size)
                inc = true;
        }
    }
    return inc;
}

int th_plugin_open(const char *path, const th_load_opts *opts,
                   th_plugin **out, th_error *err)
{
    static const th_load_opts no_opts;
    if (!opts)
        opts = &no_opts;
    *out = NULL;
    if (!path || !path[0])
        return th_error_set(err, TH_ELOAD, "a plugin path is empty");
    const char *file = opts->load_path ? opts->load_path : path;
    int rc, fd = -1;
    if (opts->has_fd) {
        fd = opts->fd;
    } else if (opts->private_copy && opts->load_path) {
        struct stat st;
        fd = open(file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
            return th_error_set(err, TH_ELOAD, "%s: cannot open its copy "
                                "%s: %s", path, file, strerror(errno));
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
            st.st_uid != geteuid()) {
            close(fd);
            return th_error_set(err, TH_ELOAD, "%s: refused: its copy %s is "
                                "not a file of the host's user", path, file);
        }
    } else if ((rc = th_plugin_file_open(file, path, !opts->allow_insecure,
                                         &fd, err))) {
        return rc;
    }

    th_plugin *p = plugin_alloc();
    if (!p) {
        rc = th_error_set(err, TH_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    if (!(p->path = strdup(path)) || !(p->load_path = strdup(file))) {
        rc = th_error_set(err, TH_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    if (opts->generation)
        p->generation = opts->generation;

    /* What dlopen() maps.  With has_fd: the checked fd itself, by
     * /proc/self/fd/N (see th_load_opts for why only there).  Otherwise
     * the name just checked: every folder on the way (and every link) is
     * one only root or the host's user may change (the walk refused the
     * rest), so the name still means the file of `fd`; with load_path it
     * is a private copy in the host's own 0700 folder.  dlopen() searches
     * the library path for a name without a slash: add "./". */
    char dlpath[PATH_MAX];
    int n;
    if (opts->has_fd)
        n = snprintf(dlpath, sizeof dlpath, "/proc/self/fd/%d", fd);
    else
        n = snprintf(dlpath, sizeof dlpath, "%s%s",
                     strchr(file, '/') ? "" : "./", file);
    if (n < 0 || n >= (int)sizeof dlpath) {
        rc = th_error_set(err, TH_ELOAD, "%s: path too long", path);
        goto fail;
    }
    if (th_elf_incomplete_fd(fd)) {
        rc = th_error_set(err, TH_ELOAD,
                          "%s: incomplete shared object (still being "
                          "written?): its headers reach past the end of "
                          "the file",
                          path);
        goto fail;
    }
    /* A Go object: one Go runtime per process, never unloaded (dl_go.h). */
    bool go = th_dl_go_fd(fd), go_fresh = false;
    if (go && (rc = th_dl_go_claim(fd, path, opts->name, p->generation,
                                   &go_fresh, err)))
        goto fail;
    dlerror();
    th_dl_snap *snap = go ? NULL : th_dl_snap_take(); /* dl_guard.h */
    p->dl = dlopen(dlpath, RTLD_NOW | RTLD_LOCAL | (go ? RTLD_NODELETE : 0));
    if (p->dl && go)
        th_dl_go_opened(p->dl);
    else if (p->dl)
        th_dl_snap_attach(p->dl, snap);
    else
        th_dl_snap_free(snap);
    if (!p->dl && go_fresh)
        th_dl_go_unclaim();
    if (!p->dl) {
        const char *e = dlerror();
        char why[512];
        snprintf(why, sizeof why, "%s", e ? e : "unknown dlopen error");
        size_t dl = strlen(dlpath);
        if (opts->has_fd && strncmp(why, dlpath, dl) == 0) {
            /* Name the file as the user gave it, not /proc/self/fd/N. */
            char tail[512];
            snprintf(tail, sizeof tail, "%s", why + dl);
            snprintf(why, sizeof why, "%s%s", file, tail);
        }
        if (!is_elf_fd(fd))
            rc = th_error_set(err, TH_ELOAD, "%s: not a shared object: %s",
                              path, why);
        else
            rc = th_error_set(err, TH_ELOAD, "%s: cannot be loaded: %s", path,
                              why);
        goto fail;
    }
    if (!opts->has_fd)
        close(fd);
    fd = -1;
    dlerror();
    void *sym = dlsym(p->dl, TOOLHOST_ENTRY_SYMBOL);
    if (!sym) {
        th_plugin_close(p);
        return th_error_set(err, TH_ELOAD,
                            "%s: entry symbol '%s' not found (export it with "
                            "TOOLHOST_EXPORT; is this a toolhost plugin of "
                            "ABI %d?)",
                            path, TOOLHOST_ENTRY_SYMBOL, TOOLHOST_ABI_MAJOR);
    }
    toolhost_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* object to function pointer */
    p->desc = entry();
    reporter rep = {opts->on_problem, opts->problem_ud, 0, {0, ""}};
    if ((rc = check_desc(path, p->desc, p, &rep, err))) {
        th_plugin_close(p);
        return rc;
    }
    p->name = strdup(opts->name ? opts->name : p->desc->name);
    if (!p->name) {
        th_plugin_close(p);
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", path);
    }
    *out = p;
    return 0;
fail:
    if (fd >= 0 && !opts->has_fd)
        close(fd);
    th_plugin_close(p);
    return rc;
}

int th_plugin_builtin(const toolhost_plugin *desc, th_plugin **out,
                      th_error *err)
{
    *out = NULL;
    char shown[128];
    snprintf(shown, sizeof shown, "built-in plugin '%.64s'",
             desc && desc->struct_size >= TH_ABI10_PLUGIN_SIZE &&
                     desc->name
                 ? desc->name
                 : "?");
    th_plugin *p = plugin_alloc();
    if (!p)
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    p->desc = desc;
    int rc = check_desc(shown, desc, p, NULL, err);
    if (rc) {
        th_plugin_close(p);
        return rc;
    }
    char path[128];
    snprintf(path, sizeof path, "builtin:%s", desc->name);
    if (!(p->name = strdup(desc->name)) || !(p->path = strdup(path)) ||
        !(p->load_path = strdup(path))) {
        th_plugin_close(p);
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", shown);
    }
    *out = p;
    return 0;
}

/* ---- init ---------------------------------------------------------------------- */

/* ABI 1.1 init_tools(): the tools a plugin built in init(), checked as the
 * static ones and listed after them.  On failure p->tools is back to the
 * static tools. */
static int init_tools(th_plugin *p, th_error *err)
{
    const toolhost_plugin *d = p->desc;
    if (!TOOLHOST_HAS_MEMBER(toolhost_plugin, d, init_tools) ||
        !d->init_tools)
        return 0;
    uint32_t n = 0;
    const toolhost_tool *tools = d->init_tools(p->state, &n);
    if (n == 0)
        return 0;
    char shown[1200];
    snprintf(shown, sizeof shown, "%.1000s: init_tools()", p->path);
    size_t base = p->n_tools;
    int rc = check_tools(shown, "its array", tools, n, p->abi_minor, p, NULL,
                         err);
    if (rc) {
        free_tool_range(p->tools, base, p->n_tools);
        p->n_tools = base;
        return rc;
    }
    th_log(TOOLHOST_LOG_DEBUG, "%s: %u tool%s from init_tools()", p->path, n,
           n == 1 ? "" : "s");
    return 0;
}

int th_plugin_init(th_plugin *p, const uint8_t *config, size_t len,
                   th_error *err)
{
    if (p->initialized)
        return th_error_set(err, TH_ESTATE, "%s: init() was already called",
                            p->path);
    /* The config block is checked here too (cheap, and a NULL config gets
     * its defaults): init() only ever sees a valid, complete map. */
    static const uint8_t empty_map[] = {0x80};
    if (!config || len == 0) {
        config = empty_map;
        len = sizeof empty_map;
    }
    th_buf filled_cfg = TH_BUF_INIT;
    bool filled = false;
    th_verr ve;
    int rc = th_validate_params(NULL, p->config_params, p->n_config_params,
                                config, len, &filled_cfg, &filled, &ve);
    if (rc) {
        th_buf_destroy(&filled_cfg);
        return th_error_set(err, rc == TH_EARGS ? TH_ELOAD : rc,
                            "%s: config of plugin '%s': %s", p->path, p->name,
                            ve.e.msg);
    }
    if (filled) {
        config = filled_cfg.data;
        len = filled_cfg.len;
    }
    if (p->desc->init) {
        char msg[1024];
        msg[0] = '\0';
        void *state = NULL;
        int r = p->desc->init(&p->api, config, len, &state, msg, sizeof msg);
        msg[sizeof msg - 1] = '\0';
        if (r != 0) {
            th_buf_destroy(&filled_cfg);
            if (msg[0])
                return th_error_set(err, TH_ELOAD, "%s: init failed: %s",
                                    p->path, msg);
            return th_error_set(err, TH_ELOAD,
                                "%s: init failed (returned %d) without a "
                                "message",
                                p->path, r);
        }
        p->state = state;
    }
    th_buf_destroy(&filled_cfg);
    if ((rc = init_tools(p, err)) != 0) {
        if (p->desc->fini)
            p->desc->fini(p->state);
        p->state = NULL;
        return rc;
    }
    p->initialized = true;
    return 0;
}
