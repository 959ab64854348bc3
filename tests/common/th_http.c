/* th_http.c - raw HTTP/1.1 over loopback for the test suites (see
 * th_http.h). */
#include "common/th_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what)
{
    fprintf(stderr, "test helper: %s: %s\n", what, strerror(errno));
    abort();
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

unsigned th_test_log_port(const char *log, const char *what)
{
    unsigned port = 0;
    FILE *f = fopen(log, "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, what);
        p = p ? strstr(p, "127.0.0.1:") : NULL;
        if (p)
            port = (unsigned)atoi(p + 10);
    }
    if (f)
        fclose(f);
    return port;
}

int th_test_tcp_connect(unsigned port, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket");
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int th_test_tcp_from(unsigned port, int from)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket");
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(0x7f000000u | (unsigned)from);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0)
        die("bind");
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int th_test_send_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int th_test_http_send(int fd, const char *method, const char *path,
                      const char *hdrs, const char *body)
{
    char head[4096];
    size_t blen = body ? strlen(body) : 0;
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Connection: close\r\n"
                     "Accept: application/json, text/event-stream\r\n"
                     "%s%s"
                     "Content-Length: %zu\r\n\r\n",
                     method, path, hdrs ? hdrs : "",
                     body ? "Content-Type: application/json\r\n" : "", blen);
    if (n < 0 || (size_t)n >= sizeof head)
        return -1;
    if (th_test_send_all(fd, head, (size_t)n) != 0)
        return -1;
    return blen && th_test_send_all(fd, body, blen) != 0 ? 1 : 0;
}

int th_test_http_read(int fd, const char *until, int timeout_ms, char **out)
{
    size_t cap = 65536, len = 0;
    char *t = calloc(1, cap);
    if (!t)
        die("calloc");
    int64_t end = mono_ms() + timeout_ms;
    for (;;) {
        int64_t left = end - mono_ms();
        if (left <= 0)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, (int)left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            break;
        if (len + 4097 > cap) {
            char *nt = realloc(t, cap *= 2);
            if (!nt)
                die("realloc");
            t = nt;
        }
        ssize_t k = read(fd, t + len, 4096);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        len += (size_t)k;
        t[len] = '\0';
        if (until && strstr(t, until))
            break;
    }
    *out = t;
    int status = 0;
    if (sscanf(t, "HTTP/1.%*d %d", &status) != 1)
        status = 0;
    return status;
}

int th_test_http(unsigned port, const char *method, const char *path,
                 const char *hdrs, const char *body, int timeout_ms,
                 char **out)
{
    int fd = th_test_tcp_connect(port, 0);
    if (fd < 0 || th_test_http_send(fd, method, path, hdrs, body) < 0) {
        if (fd >= 0)
            close(fd);
        *out = strdup("");
        if (!*out)
            die("strdup");
        return -1;
    }
    int status = th_test_http_read(fd, NULL, timeout_ms, out);
    close(fd);
    return status;
}
