/* write_all.h - for the bundled plugins that start processes (exec, mcp):
 * the whole of a small buffer written to a pipe, retried on EINTR.  Only
 * write(2): safe in a child between fork() and exec. */
#ifndef TH_PLUGIN_WRITE_ALL_H
#define TH_PLUGIN_WRITE_ALL_H

#include <stddef.h>

/* Writes p[0..n) to fd; stops quietly at an error or a closed pipe (the
 * reader then sees a short message and says so). */
void write_all(int fd, const void *p, size_t n);

#endif
