/* front/sd.h - the service manager (host/front/sd.c): readiness and state
 * notifications (sd_notify: READY, RELOADING, STOPPING, the watchdog) and
 * socket activation (sd_listen_fds).  Built on libsystemd when the build
 * found it (TH_HAVE_SYSTEMD); without it every call is a no-op and no
 * socket is activated.  Outside a unit ($NOTIFY_SOCKET, $LISTEN_FDS unset)
 * nothing happens either. */
#ifndef TH_FRONT_SD_H
#define TH_FRONT_SD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Sends `state` ("READY=1", ...) when $NOTIFY_SOCKET is set. */
void th_sd_notify(const char *state);
/* READY=1 with a STATUS line. */
void th_sd_ready(void);
/* RELOADING=1 with MONOTONIC_USEC (a reload begins); th_sd_ready() when
 * it is over. */
void th_sd_reloading(void);
/* STOPPING=1, once per process (later calls do nothing). */
void th_sd_stopping(void);
/* The watchdog interval in microseconds ($WATCHDOG_USEC for this pid), 0
 * when there is none. */
uint64_t th_sd_watchdog_usec(void);
/* WATCHDOG=1. */
void th_sd_watchdog_ping(void);

/* Reads the activated sockets ($LISTEN_FDS for this pid, from fd 3; the
 * variables are unset) once: how many. */
int th_sd_listen_fds(void);
/* The activated listening Unix stream socket bound to `path`, or -1;
 * taken (a second call gives -1). */
int th_sd_take_unix(const char *path);
/* The activated listening TCP sockets not taken, into fds (at most max):
 * how many.  They are taken. */
size_t th_sd_take_inet(int *fds, size_t max);
/* Activated sockets nobody took: closed, each with a warning. */
void th_sd_close_unused(void);

#endif
