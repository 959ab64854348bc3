/* write_all.c - a whole buffer to a pipe (write_all.h). */
#include "write_all.h"

#include <errno.h>
#include <unistd.h>

void write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        c += w;
        n -= (size_t)w;
    }
}
