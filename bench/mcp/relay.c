/* relay.c - the floor of any extra hop between an MCP client and a stdio
 * server, for bench/mcp/source.mjs: `relay COMMAND [ARGS...]` starts the
 * server with pipes and copies bytes both ways (its stdin to the server's,
 * the server's stdout to its own) in one thread: one poll() wake, one
 * read() and one write() per message each way, no parsing.  What toolhost
 * adds over this is its own work (JSON, policy, validation, the call's
 * bookkeeping); what this adds over calling the server directly is the
 * hop itself: a process in the middle, two more pipe writes and two more
 * wake-ups per call.  A bench tool, not part of toolhost: plain poll(2)
 * on two fds is the fewest system calls any relay makes. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

/* the whole buffer to fd (blocking): 0, or -1 when the other side left */
static int put(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: relay COMMAND [ARGS...]\n");
        return 2;
    }
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) {
        perror("relay: pipe");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    pid_t pid = fork();
    if (pid < 0) {
        perror("relay: fork");
        return 1;
    }
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        execvp(argv[1], argv + 1);
        perror("relay: exec");
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    static char buf[65536];
    struct pollfd pf[2] = {{.fd = 0, .events = POLLIN},
                           {.fd = out[0], .events = POLLIN}};
    const int to[2] = {in[1], 1};
    for (;;) {
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        int done = 0;
        for (int i = 0; i < 2 && !done; i++) {
            if (!pf[i].revents)
                continue;
            ssize_t r = read(pf[i].fd, buf, sizeof buf);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0 || put(to[i], buf, (size_t)r) != 0)
                done = 1;
        }
        if (done)
            break;
    }
    close(in[1]); /* the server sees the end of its input */
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return 0;
}
