/* th_test.h - small helpers shared by the test suites: paths into the build,
 * temporary folders and files, running a program and capturing its output.
 * Every helper aborts the test run on an internal failure (out of memory,
 * fork failure): they are for tests only. */
#ifndef TH_TEST_H
#define TH_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* "<build dir>/<rel>" and "<source dir>/<rel>" in a static rotating buffer
 * (8 slots): copy the result if you need it long. */
const char *th_test_build_path(const char *rel);
const char *th_test_source_path(const char *rel);

/* A new empty folder under $TMPDIR (or /tmp), removed with everything in
 * it by th_test_rmtree().  Returns a malloc()ed path. */
char *th_test_tmpdir(void);
void th_test_rmtree(const char *path);

/* Writes `len` bytes (or strlen(text) when len is (size_t)-1) to
 * dir/name; returns the malloc()ed full path. */
char *th_test_write_file(const char *dir, const char *name, const char *text,
                         size_t len);

/* Replaces dst with n bytes of data and the given mode through a
 * temporary file and rename(): a new inode, as a build that replaces its
 * output (a reloading host sees the change).  Fails the test (CUnit
 * fatal assertion) on any error. */
void th_test_replace_file(const char *dst, const void *data, size_t n,
                          int mode);

/* The whole of a file, NUL-terminated (the NUL not counted in *len, which
 * may be NULL), malloc()ed; NULL when it cannot be opened. */
char *th_test_read_file(const char *path, size_t *len);

/* Calls fn with the bytes of every file of the source tree's folder
 * `rel` (a fuzz target's corpus: fuzz/corpus/NAME), names starting with
 * '.' left out; the number of files, or -1 when the folder cannot be
 * read. */
int th_test_each_file(const char *rel,
                      void (*fn)(const char *data, size_t len, void *ud),
                      void *ud);

/* The output of a finished program. */
typedef struct th_test_run {
    int status;  /* exit status, or 128 + signal number */
    char *out;   /* stdout, NUL-terminated, malloc()ed */
    size_t out_len;
    char *err;   /* stderr */
    size_t err_len;
} th_test_run;

/* Runs argv (argv[0] a path) with `input` on stdin (NULL: empty), waits at
 * most timeout_s seconds, scaled by th_test_ms() (then kills it: status
 * 128+9), captures both
 * streams.  When TH_VALGRIND is set in the environment and `wrap` is
 * nonzero, the program runs under that valgrind command line. */
int th_test_run_argv(char *const argv[], const char *input, int timeout_s,
                     int wrap, th_test_run *out);
/* `/bin/sh -c cmd` exits 0 within 20 s (what a suite needs is there:
 * "command -v node >/dev/null 2>&1"). */
bool th_test_shell_ok(const char *cmd);
/* The same, with a toolhost command line: th_test_toolhost(&r, "call",
 * "-c", cfg, "echo", "text=hi", NULL). */
int th_test_toolhost(th_test_run *out, const char *first, ...);
void th_test_run_free(th_test_run *r);

/* ---- the runner (implemented in tests/runner.c) ----------------------------
 *
 * TH_SKIP("reason") ends the running test as skipped: it counts as
 * skipped in the summary, not as run or passed, and the reason is listed at
 * the end of the run.  Use it where a test cannot run here (no root, a
 * missing tool), never to hide a failure.  It returns from the calling
 * function, so call it from the test function itself.  A test that records
 * failures before skipping still counts failed. */
void th_test_skip(const char *file, int line, const char *reason);
#define TH_SKIP(reason)                                                       \
    do {                                                                      \
        th_test_skip(__FILE__, __LINE__, (reason));                           \
        return;                                                               \
    } while (0)

/* The running test may take `seconds` more seconds from now before the
 * watchdog ends the run (the default is TH_TEST_TIMEOUT, 60 s; both are
 * scaled up in sanitizer builds and under valgrind unless TH_TEST_TIMEOUT
 * is set).  For the few tests that are slow by nature (a build, a make
 * install). */
void th_test_timeout(unsigned seconds);

/* The one knob every time budget of a test scales with: 1 in a plain
 * build, 2 in a sanitizer build, 5 under valgrind, each multiplied by
 * $TH_TEST_SCALE (1..100) when it is set.  A budget is a deadline for
 * something that must happen ("the answer comes within th_test_ms(5000)"),
 * never a sleep that shows something did not happen: show that with an
 * event (a counter, an ack, a log line after a barrier).  th_test_ms(ms)
 * is ms times the scale, saturating. */
unsigned th_test_scale(void);
unsigned th_test_ms(unsigned ms);

#endif
