/* log.c - one line per event on stderr (th/log.h).
 *
 * The log is written through a descriptor of its own: th_log_own_stderr()
 * duplicates stderr to a high, close-on-exec descriptor and remembers which
 * file it is.  A plugin that closes 0-2 then cannot steer the log into
 * whatever the host opens next under those numbers (a client's socket);
 * and should the log's own descriptor be closed and its number reused, the
 * identity check drops the line instead of writing it into a stranger. */
#include "th/log.h"
#include "th/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define OWN_FD_MIN 64 /* out of the way of the numbers files usually get */

static atomic_int log_level = TOOLHOST_LOG_INFO;
static atomic_int log_fd = 2;
/* The descriptor th_log_own_stderr() made, and the file it is. */
static atomic_int own_fd = -1;
static atomic_ullong own_dev, own_ino;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void th_log_set_level(int level)
{
    if (level < TOOLHOST_LOG_ERROR)
        level = TOOLHOST_LOG_ERROR;
    if (level > TOOLHOST_LOG_DEBUG)
        level = TOOLHOST_LOG_DEBUG;
    atomic_store(&log_level, level);
}

int th_log_get_level(void)
{
    return atomic_load(&log_level);
}

void th_log_set_fd(int fd)
{
    atomic_store(&log_fd, fd);
}

int th_log_own_stderr(void)
{
    int fd = fcntl(2, F_DUPFD_CLOEXEC, OWN_FD_MIN);
    if (fd < 0 && errno == EINVAL) /* a low RLIMIT_NOFILE */
        fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    atomic_store(&own_dev, (unsigned long long)st.st_dev);
    atomic_store(&own_ino, (unsigned long long)st.st_ino);
    int old = atomic_exchange(&own_fd, fd);
    atomic_store(&log_fd, fd);
    if (old >= 0)
        close(old);
    return fd;
}

/* Still the file th_log_own_stderr() duplicated? */
static bool fd_ok(int fd)
{
    if (fd != atomic_load(&own_fd))
        return true;
    struct stat st;
    return fstat(fd, &st) == 0 &&
           (unsigned long long)st.st_dev == atomic_load(&own_dev) &&
           (unsigned long long)st.st_ino == atomic_load(&own_ino);
}

int th_log_level_from_name(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

const char *th_log_level_name(int level)
{
    return level >= 0 && level < 4 ? level_names[level] : "info";
}

void th_log(int level, const char *fmt, ...)
{
    int fd = atomic_load(&log_fd);
    if (level > atomic_load(&log_level) || fd < 0)
        return;
    char line[2048];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ %-5s ",
                          (long)(tv.tv_usec / 1000), th_log_level_name(level));
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    n += (size_t)m < sizeof line - n - 1 ? (size_t)m : sizeof line - n - 2;
    line[n++] = '\n';
    if (fd_ok(fd))
        (void)!write(fd, line, n);
}

/* Writes v as `w` decimal digits at p. */
static void put_num(char *p, int64_t v, int w)
{
    for (int i = w - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

void th_log_raw(int level, const char *msg)
{
    int fd = atomic_load(&log_fd);
    if (level > atomic_load(&log_level) || fd < 0 || !fd_ok(fd))
        return;
    int64_t wall = th_wall_ns();
    struct timespec ts = {.tv_sec = (time_t)(wall / 1000000000),
                          .tv_nsec = (long)(wall % 1000000000)};
    /* days to civil date (proleptic Gregorian), no locks, no locale */
    int64_t secs = ts.tv_sec, days = secs / 86400, sod = secs % 86400;
    int64_t z = days + 719468, era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153, d = doy - (153 * mp + 2) / 5 + 1;
    int64_t mo = mp < 10 ? mp + 3 : mp - 9, y = yoe + era * 400 + (mo <= 2);
    char line[512] = "0000-00-00T00:00:00.000Z ";
    put_num(line, y, 4);
    put_num(line + 5, mo, 2);
    put_num(line + 8, d, 2);
    put_num(line + 11, sod / 3600, 2);
    put_num(line + 14, sod / 60 % 60, 2);
    put_num(line + 17, sod % 60, 2);
    put_num(line + 20, ts.tv_nsec / 1000000, 3);
    size_t n = 25;
    const char *lv = th_log_level_name(level);
    size_t l = strlen(lv);
    memcpy(line + n, lv, l);
    n += l;
    while (n < 31)
        line[n++] = ' ';
    l = strlen(msg);
    if (l > sizeof line - n - 1)
        l = sizeof line - n - 1;
    memcpy(line + n, msg, l);
    n += l;
    line[n++] = '\n';
    (void)!write(fd, line, n);
}
