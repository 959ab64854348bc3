/* sockpath.c - the default socket address and the checks on a socket's
 * folder before `toolhost serve` binds it (see th/sockpath.h). */
#include "front/sockpath.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "th/log.h"

int th_sock_addr_path(const char *addr, const char **path, th_error *err)
{
    if (!addr || !*addr)
        return th_error_set(err, TH_ECONFIG, "no socket address");
    const char *p = addr;
    if (strncmp(p, "unix:", 5) == 0)
        p += 5;
    else if (p[0] != '/')
        return th_error_set(err, TH_ECONFIG,
                            "address '%s': use unix:PATH", addr);
    if (!*p)
        return th_error_set(err, TH_ECONFIG, "address '%s': empty path",
                            addr);
    size_t n = strlen(p);
    if (n > TH_SOCK_PATH_MAX)
        return th_error_set(err, TH_ECONFIG,
                            "socket path %s is %zu bytes long; a Unix socket "
                            "path holds at most %d bytes (choose a shorter "
                            "listen path)",
                            p, n, TH_SOCK_PATH_MAX);
    *path = p;
    return 0;
}

int th_sock_default_addr(char *buf, size_t cap, th_error *err)
{
    const char *x = getenv("XDG_RUNTIME_DIR");
    int n;
    if (x && x[0] == '/') {
        size_t len = strlen(x);
        while (len > 1 && x[len - 1] == '/')
            len--;
        n = snprintf(buf, cap, "unix:%.*s/toolhost/toolhost.sock", (int)len,
                     x);
    } else if (geteuid() == 0) {
        n = snprintf(buf, cap, "unix:/run/toolhost/toolhost.sock");
    } else {
        n = snprintf(buf, cap, "unix:/tmp/toolhost-%u/toolhost.sock",
                     (unsigned)geteuid());
    }
    if (n < 0 || (size_t)n >= cap || (size_t)n - 5 > TH_SOCK_PATH_MAX) {
        if (cap)
            buf[0] = '\0';
        return th_error_set(err, TH_ECONFIG,
                            "the default socket path under XDG_RUNTIME_DIR "
                            "(%s) is longer than the %d bytes a Unix socket "
                            "path holds: set host.listen or --listen",
                            x ? x : "", TH_SOCK_PATH_MAX);
    }
    return 0;
}

static int refuse(th_error *err, const char *dir, const char *why,
                  const char *fix)
{
    return th_error_set(err, TH_ECONFIG,
                        "refusing to use socket folder %s: %s (%s)", dir, why,
                        fix);
}

int th_sock_prepare(const char *addr, bool strict, unsigned socket_mode,
                    th_error *err)
{
    const char *path;
    int rc = th_sock_addr_path(addr, &path, err);
    if (rc)
        return rc;
    char dir[TH_SOCK_PATH_MAX + 1];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);

    /* The default folder must be a real folder, not a link someone put
     * there; an explicit one may be reached through links. */
    int (*stat_fn)(const char *, struct stat *) = strict ? lstat : stat;
    struct stat st;
    if (stat_fn(dir, &st) != 0) {
        if (errno != ENOENT)
            return th_error_set(err, TH_EIO, "socket folder %s: %s", dir,
                                strerror(errno));
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            if (errno == ENOENT) {
                char parent[TH_SOCK_PATH_MAX + 1];
                const char *ps = strrchr(dir, '/');
                snprintf(parent, sizeof parent, "%.*s",
                         ps && ps != dir ? (int)(ps - dir) : 1,
                         ps ? dir : ".");
                return th_error_set(err, TH_ECONFIG,
                                    "socket folder %s does not exist and "
                                    "cannot be created: its parent %s is "
                                    "missing (create it, or choose another "
                                    "listen path)",
                                    dir, parent);
            }
            return th_error_set(err, TH_EIO,
                                "cannot create socket folder %s: %s", dir,
                                strerror(errno));
        }
        if (lstat(dir, &st) != 0)
            return th_error_set(err, TH_EIO, "socket folder %s: %s", dir,
                                strerror(errno));
        /* Created by us just now (or by a racing host of ours: checked
         * below like any existing folder). */
        if (S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
            !(st.st_mode & 022)) {
            mode_t want = (socket_mode & 077) ? 0711 : 0700;
            if ((st.st_mode & 07777) != want && chmod(dir, want) != 0)
                return th_error_set(err, TH_EIO, "chmod %s: %s", dir,
                                    strerror(errno));
            st.st_mode = (st.st_mode & ~(mode_t)07777) | want;
            th_log_info("created socket folder %s mode %04o", dir,
                        (unsigned)want);
        }
    }
    if (S_ISLNK(st.st_mode))
        return refuse(err, dir, "it is a symbolic link",
                      "remove it; toolhost creates the folder itself");
    if (!S_ISDIR(st.st_mode))
        return th_error_set(err, TH_ECONFIG,
                            "socket folder %s is not a folder", dir);
    uid_t me = geteuid();
    if (st.st_uid != me && (strict || st.st_uid != 0)) {
        char why[128];
        snprintf(why, sizeof why,
                 "it is owned by uid %u, not by this host's uid %u",
                 (unsigned)st.st_uid, (unsigned)me);
        return refuse(err, dir, why,
                      "another user may have made it to catch the requests "
                      "of your clients; remove it or choose another listen "
                      "path");
    }
    if (st.st_mode & 022) {
        char why[128];
        snprintf(why, sizeof why, "it is writable by %s (mode %04o)",
                 (st.st_mode & 002) ? "everyone" : "its group",
                 (unsigned)(st.st_mode & 07777));
        if (strict || !(st.st_mode & S_ISVTX))
            return refuse(err, dir, why,
                          "run chmod go-w on it, or choose another listen "
                          "path");
        th_log_warn("socket folder %s is shared (mode %04o): another user "
                    "can take the name %s while no host listens on it; "
                    "clients check the server's uid, and the default "
                    "listen address is a private folder",
                    dir, (unsigned)(st.st_mode & 07777), path);
    }
    return 0;
}
