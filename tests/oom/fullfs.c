/* fullfs.c - an LD_PRELOAD shim that makes one folder look full: writes to
 * files under it fail with ENOSPC ("No space left on device") once a
 * number of bytes went there.  The disk_full suite's second way to a full
 * disk, one that needs no root (its first is a small tmpfs in a private
 * mount namespace).
 *
 *   LD_PRELOAD=build/tests/oom/fullfs.so FULLFS_DIR=/path FULLFS_AFTER=N \
 *       toolhost serve ...
 *
 * Environment, read once when the shim is loaded (and then removed, so a
 * program the process execs is not affected):
 *   FULLFS_DIR=PATH     the folder (an absolute path, as /proc/self/fd
 *                       shows it) whose files fill up
 *   FULLFS_AFTER=N      bytes the folder still takes, in all (default 0)
 *   FULLFS_FILE=F       a file outside the folder; when its first byte is
 *                       '1' the folder is full whatever was written, when
 *                       it is '0' or missing FULLFS_AFTER counts (a test
 *                       fills the disk at a moment of its choosing)
 * What fails: write, pwrite, pwrite64, writev, copy_file_range, sendfile,
 * sendfile64, fallocate, posix_fallocate and ftruncate that would grow a
 * file, on a regular file whose path (readlink of /proc/self/fd/FD) is
 * under FULLFS_DIR.  A write that fits partly is cut short, as the kernel
 * does.  Everything else goes through: the real functions are found with
 * dlsym(RTLD_NEXT). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static char g_dir[4096];
static size_t g_dir_len;
static char g_file[4096];
static long long g_after;
static atomic_llong g_used;

__attribute__((constructor)) static void fullfs_init(void)
{
    const char *d = getenv("FULLFS_DIR");
    if (d && d[0] == '/' && strlen(d) < sizeof g_dir) {
        strcpy(g_dir, d);
        g_dir_len = strlen(g_dir);
        while (g_dir_len > 1 && g_dir[g_dir_len - 1] == '/')
            g_dir[--g_dir_len] = '\0';
    }
    const char *a = getenv("FULLFS_AFTER");
    g_after = a ? atoll(a) : 0;
    const char *f = getenv("FULLFS_FILE");
    if (f && strlen(f) < sizeof g_file)
        strcpy(g_file, f);
    unsetenv("FULLFS_DIR");
    unsetenv("FULLFS_AFTER");
    unsetenv("FULLFS_FILE");
}

/* The next definition of `name` (libc's), found once. */
#define REAL(name)                                                            \
    static __typeof__(&name) real_##name;                                     \
    if (!real_##name)                                                         \
        real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

/* Whether fd is a regular file under the folder. */
static bool under(int fd)
{
    if (!g_dir_len || fd < 0)
        return false;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return false;
    char p[64], path[4096];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(p, path, sizeof path - 1);
    if (n <= 0)
        return false;
    path[n] = '\0';
    return strncmp(path, g_dir, g_dir_len) == 0 &&
           (path[g_dir_len] == '/' || path[g_dir_len] == '\0');
}

/* The test's switch (FULLFS_FILE): true when it says "full now". */
static bool switched_full(void)
{
    if (!g_file[0])
        return false;
    int saved = errno;
    int fd = open(g_file, O_RDONLY | O_CLOEXEC);
    char c = '0';
    if (fd >= 0) {
        if (read(fd, &c, 1) != 1)
            c = '0';
        close(fd);
    }
    errno = saved;
    return c == '1';
}

/* How many of n bytes to fd may go through: n when fd is not ours, else
 * what the folder still takes (0: fail with ENOSPC). */
static size_t room(int fd, size_t n)
{
    if (!under(fd))
        return n;
    if (switched_full())
        return 0;
    long long used = atomic_load(&g_used);
    long long left = g_after - used;
    if (left <= 0)
        return 0;
    return (long long)n < left ? n : (size_t)left;
}

static void took(int fd, ssize_t w)
{
    if (w > 0 && under(fd))
        atomic_fetch_add(&g_used, (long long)w);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    REAL(write);
    size_t k = n ? room(fd, n) : 0;
    if (n && !k) {
        errno = ENOSPC;
        return -1;
    }
    ssize_t w = real_write(fd, buf, k);
    if (n)
        took(fd, w);
    return w;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    REAL(pwrite);
    size_t k = n ? room(fd, n) : 0;
    if (n && !k) {
        errno = ENOSPC;
        return -1;
    }
    ssize_t w = real_pwrite(fd, buf, k, off);
    if (n)
        took(fd, w);
    return w;
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    return pwrite(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    REAL(writev);
    size_t n = 0;
    for (int i = 0; i < cnt; i++)
        n += iov[i].iov_len;
    if (n && under(fd)) {
        /* one buffer at a time, each through write(): simple and rare */
        ssize_t total = 0;
        for (int i = 0; i < cnt; i++) {
            ssize_t w = write(fd, iov[i].iov_base, iov[i].iov_len);
            if (w < 0)
                return total > 0 ? total : -1;
            total += w;
            if ((size_t)w < iov[i].iov_len)
                break;
        }
        return total;
    }
    return real_writev(fd, iov, cnt);
}

ssize_t copy_file_range(int in, off_t *in_off, int out, off_t *out_off,
                        size_t n, unsigned flags)
{
    REAL(copy_file_range);
    size_t k = n ? room(out, n) : 0;
    if (n && !k) {
        errno = ENOSPC;
        return -1;
    }
    ssize_t w = real_copy_file_range(in, in_off, out, out_off, k, flags);
    if (n)
        took(out, w);
    return w;
}

ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
    REAL(sendfile);
    size_t k = n ? room(out, n) : 0;
    if (n && !k) {
        errno = ENOSPC;
        return -1;
    }
    ssize_t w = real_sendfile(out, in, off, k);
    if (n)
        took(out, w);
    return w;
}

ssize_t sendfile64(int out, int in, off_t *off, size_t n)
{
    return sendfile(out, in, off, n);
}

/* Growing a file by `to` bytes past its size. */
static bool grows_too_far(int fd, off_t end)
{
    struct stat st;
    if (!under(fd) || fstat(fd, &st) != 0 || end <= st.st_size)
        return false;
    return room(fd, (size_t)(end - st.st_size)) < (size_t)(end - st.st_size);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
    REAL(fallocate);
    if (grows_too_far(fd, off + len)) {
        errno = ENOSPC;
        return -1;
    }
    return real_fallocate(fd, mode, off, len);
}

int posix_fallocate(int fd, off_t off, off_t len)
{
    REAL(posix_fallocate);
    if (grows_too_far(fd, off + len))
        return ENOSPC;
    return real_posix_fallocate(fd, off, len);
}

int ftruncate(int fd, off_t len)
{
    REAL(ftruncate);
    if (grows_too_far(fd, len)) {
        errno = ENOSPC;
        return -1;
    }
    return real_ftruncate(fd, len);
}
