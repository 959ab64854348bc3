/* th_test.c - helpers shared by the test suites (see th_test.h). */
#include "common/th_test.h"

#include <dirent.h>
#include <CUnit/CUnit.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what)
{
    fprintf(stderr, "test helper: %s: %s\n", what, strerror(errno));
    abort();
}

static const char *rotate(const char *base, const char *rel)
{
    static __thread char slots[8][4096];
    static __thread int next;
    char *s = slots[next++ % 8];
    snprintf(s, 4096, "%s/%s", base, rel);
    return s;
}

const char *th_test_build_path(const char *rel)
{
    return rotate(TH_BUILD_DIR, rel);
}

const char *th_test_source_path(const char *rel)
{
    return rotate(TH_SOURCE_DIR, rel);
}

char *th_test_tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/toolhost-test-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpl))
        die("mkdtemp");
    char *p = strdup(tmpl);
    if (!p)
        die("strdup");
    return p;
}

static int rm_one(const char *path, const struct stat *st, int flag,
                  struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void th_test_rmtree(const char *path)
{
    if (path)
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *th_test_write_file(const char *dir, const char *name, const char *text,
                         size_t len)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p)
        die("malloc");
    snprintf(p, n, "%s/%s", dir, name);
    if (len == (size_t)-1)
        len = strlen(text);
    FILE *f = fopen(p, "wb");
    if (!f)
        die("fopen");
    if (len && fwrite(text, 1, len, f) != len)
        die("fwrite");
    fclose(f);
    return p;
}

void th_test_replace_file(const char *dst, const void *data, size_t n,
                          int mode)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.new", dst);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, mode);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL_FATAL(write(fd, data, n), (ssize_t)n);
    fchmod(fd, (mode_t)mode);
    close(fd);
    CU_ASSERT_EQUAL_FATAL(rename(tmp, dst), 0);
}

char *th_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 8192, n = 0, got;
    char *b = malloc(cap);
    if (!b)
        die("malloc");
    while ((got = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            char *m = realloc(b, cap *= 2);
            if (!m)
                die("realloc");
            b = m;
        }
    }
    fclose(f);
    b[n] = '\0';
    if (len)
        *len = n;
    return b;
}

int th_test_each_file(const char *rel,
                      void (*fn)(const char *data, size_t len, void *ud),
                      void *ud)
{
    const char *dir = th_test_source_path(rel);
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len = 0;
        char *data = th_test_read_file(path, &len);
        if (!data)
            continue;
        fn(data, len, ud);
        free(data);
        n++;
    }
    closedir(d);
    return n;
}

static void append(char **buf, size_t *len, size_t *cap, const char *d,
                   size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < *len + n + 1)
            c *= 2;
        char *p = realloc(*buf, c);
        if (!p)
            die("realloc");
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, d, n);
    *len += n;
    (*buf)[*len] = '\0';
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int th_test_run_argv(char *const argv[], const char *input, int timeout_s,
                     int wrap, th_test_run *out)
{
    int pin[2], pout[2], perr[2];
    if (pipe(pin) || pipe(pout) || pipe(perr))
        die("pipe");
    const char *vg = wrap ? getenv("TH_VALGRIND") : NULL;
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        dup2(pin[0], 0);
        dup2(pout[1], 1);
        dup2(perr[1], 2);
        close(pin[1]);
        close(pout[0]);
        close(perr[0]);
        if (vg && *vg) {
            char *cmd = NULL;
            size_t len = 0, cap = 0;
            append(&cmd, &len, &cap, "exec ", 5);
            append(&cmd, &len, &cap, vg, strlen(vg));
            for (int i = 0; argv[i]; i++) {
                /* single-quoted; a quote inside becomes '\'' */
                append(&cmd, &len, &cap, " '", 2);
                for (const char *p = argv[i]; *p; p++) {
                    if (*p == '\'')
                        append(&cmd, &len, &cap, "'\\''", 4);
                    else
                        append(&cmd, &len, &cap, p, 1);
                }
                append(&cmd, &len, &cap, "'", 1);
            }
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        } else {
            execv(argv[0], argv);
        }
        _exit(127);
    }
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    if (input) {
        size_t n = strlen(input), off = 0;
        while (off < n) {
            ssize_t w = write(pin[1], input + off, n - off);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
    }
    close(pin[1]);
    memset(out, 0, sizeof *out);
    size_t ocap = 0, ecap = 0;
    append(&out->out, &out->out_len, &ocap, "", 0);
    append(&out->err, &out->err_len, &ecap, "", 0);
    struct pollfd fds[2] = {{pout[0], POLLIN, 0}, {perr[0], POLLIN, 0}};
    int open_fds = 2;
    /* a deadline for the program to end, scaled like every budget of the
     * tests (th_test_ms: sanitizers, valgrind, $TH_TEST_SCALE) */
    double end = now_s() + (double)th_test_ms((unsigned)timeout_s * 1000u) / 1000.0;
    int killed = 0;
    while (open_fds > 0) {
        int left = (int)((end - now_s()) * 1000);
        if (left <= 0) {
            kill(pid, SIGKILL);
            killed = 1;
            break;
        }
        if (poll(fds, 2, left) < 0 && errno != EINTR)
            die("poll");
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP)))
                continue;
            char b[65536];
            ssize_t r = read(fds[i].fd, b, sizeof b);
            if (r <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            } else if (i == 0) {
                append(&out->out, &out->out_len, &ocap, b, (size_t)r);
            } else {
                append(&out->err, &out->err_len, &ecap, b, (size_t)r);
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0)
            close(fds[i].fd);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (killed || WIFSIGNALED(st))
        out->status = 128 + (killed ? SIGKILL : WTERMSIG(st));
    else
        out->status = WEXITSTATUS(st);
    return 0;
}

bool th_test_shell_ok(const char *cmd)
{
    char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
    th_test_run r;
    int rc = th_test_run_argv(argv, NULL, 20, 0, &r);
    bool ok = rc == 0 && r.status == 0;
    th_test_run_free(&r);
    return ok;
}

int th_test_toolhost(th_test_run *out, const char *first, ...)
{
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)th_test_build_path("toolhost");
    char *bin = strdup(argv[0]);
    if (!bin)
        die("strdup");
    argv[0] = bin;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && n < 63; a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    int rc = th_test_run_argv(argv, NULL, 60, 1, out);
    free(bin);
    return rc;
}

void th_test_run_free(th_test_run *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}
