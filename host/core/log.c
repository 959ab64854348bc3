/* log.c - one line per event on stderr (th/log.h). */
#include "th/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static atomic_int log_level = TOOLHOST_LOG_INFO;
static atomic_int log_fd = 2;

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
    (void)!write(fd, line, n);
}
