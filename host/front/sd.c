/* sd.c - front/sd.h: notifications to the service manager and socket
 * activation, through libsystemd when the build has it. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "front/sd.h"
#include "th/log.h"

#ifdef TH_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

static atomic_bool stopping_sent;

void th_sd_notify(const char *state)
{
#ifdef TH_HAVE_SYSTEMD
    int rc = sd_notify(0, state);
    if (rc < 0)
        th_log_debug("sd_notify(%s): %s", state, strerror(-rc));
#else
    (void)state;
#endif
}

void th_sd_ready(void)
{
    th_sd_notify("READY=1\nSTATUS=serving");
}

void th_sd_reloading(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char m[96];
    snprintf(m, sizeof m, "RELOADING=1\nMONOTONIC_USEC=%llu",
             (unsigned long long)ts.tv_sec * 1000000ull +
                 (unsigned long long)ts.tv_nsec / 1000ull);
    th_sd_notify(m);
}

void th_sd_stopping(void)
{
    if (!atomic_exchange(&stopping_sent, true))
        th_sd_notify("STOPPING=1");
}

uint64_t th_sd_watchdog_usec(void)
{
#ifdef TH_HAVE_SYSTEMD
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0)
        return usec;
#endif
    return 0;
}

void th_sd_watchdog_ping(void)
{
    th_sd_notify("WATCHDOG=1");
}

/* ---- Socket activation ----------------------------------------------------- */

static int n_fds = -1;  /* -1: not read yet */
#ifdef TH_HAVE_SYSTEMD
static bool taken[64];
#endif

int th_sd_listen_fds(void)
{
    if (n_fds >= 0)
        return n_fds;
    n_fds = 0;
#ifdef TH_HAVE_SYSTEMD
    int n = sd_listen_fds(1);
    if (n < 0)
        th_log_warn("socket activation: %s", strerror(-n));
    else
        n_fds = n > 64 ? 64 : n;
    if (n_fds > 0)
        th_log_info("socket activation: %d socket%s from the service manager",
                    n_fds, n_fds == 1 ? "" : "s");
#endif
    return n_fds;
}

int th_sd_take_unix(const char *path)
{
#ifdef TH_HAVE_SYSTEMD
    for (int i = 0; i < th_sd_listen_fds(); i++) {
        int fd = SD_LISTEN_FDS_START + i;
        if (!taken[i] && sd_is_socket_unix(fd, SOCK_STREAM, 1, path, 0) > 0) {
            taken[i] = true;
            return fd;
        }
    }
#else
    (void)path;
#endif
    return -1;
}

size_t th_sd_take_inet(int *fds, size_t max)
{
    size_t n = 0;
#ifdef TH_HAVE_SYSTEMD
    for (int i = 0; i < th_sd_listen_fds() && n < max; i++) {
        int fd = SD_LISTEN_FDS_START + i;
        if (!taken[i] && sd_is_socket_inet(fd, 0, SOCK_STREAM, 1, 0) > 0) {
            taken[i] = true;
            fds[n++] = fd;
        }
    }
#else
    (void)fds;
    (void)max;
#endif
    return n;
}

void th_sd_close_unused(void)
{
#ifdef TH_HAVE_SYSTEMD
    for (int i = 0; i < th_sd_listen_fds(); i++)
        if (!taken[i]) {
            th_log_warn("socket activation: fd %d matches no listen entry; "
                        "closed", SD_LISTEN_FDS_START + i);
            close(SD_LISTEN_FDS_START + i);
            taken[i] = true;
        }
#endif
}
