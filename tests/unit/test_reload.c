/* test_reload.c - hot reload without the manager: private copies, the
 * half-written check, the reloader against a real registry with calls made
 * by hand (acquire, execute, release) from several threads: 100 swaps under
 * a tight loop of calls, calls in flight finishing on the old code, failed
 * reloads changing nothing, removal with a call in flight, folding of
 * requests. */
#include <CUnit/CUnit.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"
#include "th/buf.h"
#include "th/host.h"
#include "th/log.h"
#include "front/reload_watch.h"
#include "reload/reloader.h" /* white-box: private copies, th_reloader_new */
#include "base/hazard.h"   /* white-box: th_hz_count, slots */
#include "call/manager.h"  /* white-box: th_host.cfg */
#include <uv.h>

/* ---- helpers ------------------------------------------------------------------- */

/* The monotonic clock in ms, for deadlines (th_test_ms). */
static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Writes `len` bytes of `src` (all when len is (size_t)-1) to `dst` by a
 * temporary file and rename(), as a build that replaces its output does. */
static void put_file(const char *src, const char *dst, size_t len)
{
    size_t n = 0;
    char *data = th_test_read_file(src, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(data);
    if (len != (size_t)-1 && len < n)
        n = len;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.new", dst);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL_FATAL(write(fd, data, n), (ssize_t)n);
    fchmod(fd, 0755);
    close(fd);
    CU_ASSERT_EQUAL_FATAL(rename(tmp, dst), 0);
    free(data);
}

static void put_text(const char *dst, const char *text)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.new", dst);
    FILE *f = fopen(tmp, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
    CU_ASSERT_EQUAL_FATAL(rename(tmp, dst), 0);
}

static int count_files(const char *dir)
{
    char cmd[4200];
    /* the copies, not the folder's owner marker (.toolhost-owner) */
    snprintf(cmd, sizeof cmd, "ls '%s' 2>/dev/null | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1)
            n = -1;
        pclose(p);
    }
    return n;
}

/* ---- a call made by hand ---------------------------------------------------- */

typedef struct tcall {
    th_call_base base;
    char out[64];
    size_t n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int status;
} tcall;

static int t_write(toolhost_call *c, int stream, const void *d, size_t n)
{
    tcall *t = (tcall *)c;
    if (stream == TOOLHOST_STDOUT && t->n + n < sizeof t->out) {
        memcpy(t->out + t->n, d, n);
        t->n += n;
        t->out[t->n] = '\0';
    }
    return 0;
}
static int t_progress(toolhost_call *c, double f, const char *m, const uint8_t *d,
                      size_t n)
{
    (void)c, (void)f, (void)m, (void)d, (void)n;
    return 0;
}
static int t_cancelled(const toolhost_call *c)
{
    (void)c;
    return 0;
}
static int64_t t_left(const toolhost_call *c)
{
    (void)c;
    return -1;
}
static int t_suspend(toolhost_call *c)
{
    (void)c;
    return 0;
}
static int t_complete(toolhost_call *c, int status)
{
    tcall *t = (tcall *)c;
    pthread_mutex_lock(&t->mu);
    t->status = status;
    t->done = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return 0;
}
static const th_call_vtbl t_vt = {t_write, NULL, t_progress, t_cancelled,
                                  t_left, t_suspend, t_complete};

/* {"path": path} or {} */
static void pack_args(th_buf *b, const char *path)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, th_buf_msgpack_write);
    msgpack_pack_map(&pk, path ? 1 : 0);
    if (path) {
        msgpack_pack_str_with_body(&pk, "path", 4);
        msgpack_pack_str_with_body(&pk, path, strlen(path));
    }
}

/* Runs `tool` (pinned by the caller) to its end, including a suspended
 * call's complete(); "" + status -1 when the tool is unknown. */
static int run_pinned(const th_tool *t, const char *path, char *out, size_t size)
{
    tcall c;
    memset(&c, 0, sizeof c);
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    c.base.pub.struct_size = sizeof c.base.pub;
    c.base.pub.host = &t->plugin->api;
    c.base.pub.call_id = 1;
    c.base.vt = &t_vt;
    th_buf args = TH_BUF_INIT;
    pack_args(&args, path);
    int st = t->desc->execute(t->plugin->state, t->desc, &c.base.pub, args.data,
                              args.len);
    th_buf_destroy(&args);
    if (st == TOOLHOST_PENDING) {
        pthread_mutex_lock(&c.mu);
        while (!c.done)
            pthread_cond_wait(&c.cv, &c.mu);
        pthread_mutex_unlock(&c.mu);
        st = c.status;
    }
    snprintf(out, size, "%s", c.out);
    pthread_mutex_destroy(&c.mu);
    pthread_cond_destroy(&c.cv);
    return st;
}

static int call(th_registry *reg, const char *tool, const char *path, char *out,
                size_t size)
{
    const th_tool *t = th_registry_acquire(reg, tool);
    if (!t) {
        out[0] = '\0';
        return -1;
    }
    int st = run_pinned(t, path, out, size);
    th_tool_release(t);
    return st;
}

/* ---- a host without the manager ----------------------------------------------- */

typedef struct fx {
    char *dir;          /* temp folder */
    char so[4096];      /* the plugin file the config names */
    char cfg_path[4096];
    char marker[4096];
    char gate[4096];
    th_config *cfg;
    th_registry *reg;
    th_reloader *r;
    atomic_int tools_changed;
    /* for the folding test */
    pthread_mutex_t gmu;
    pthread_cond_t gcv;
    int block_state; /* 1: block in tools_changed; 2: blocked; 0: go */
} fx;

static void on_tools_changed(void *ud)
{
    fx *f = ud;
    atomic_fetch_add(&f->tools_changed, 1);
    pthread_mutex_lock(&f->gmu);
    if (f->block_state == 1) {
        f->block_state = 2;
        pthread_cond_broadcast(&f->gcv);
        while (f->block_state == 2)
            pthread_cond_wait(&f->gcv, &f->gmu);
    }
    pthread_mutex_unlock(&f->gmu);
}

/* Exclusive-reload tests: the fixture fx_open copies, and host keys. */
static const char *fx_so_first = "fixtures/reload_a.so";
static const char *fx_host_extra = "";

static void write_config(fx *f, const char *extra_plugin_cfg, const char *tail)
{
    th_buf b = TH_BUF_INIT;
    th_buf_printf(&b,
                  "host:\n  state_dir: %s/state\n%s"
                  "plugins:\n"
                  "  - name: fx\n    path: %s\n    config:\n      marker: %s\n%s"
                  "%s",
                  f->dir, fx_host_extra, f->so, f->marker,
                  extra_plugin_cfg ? extra_plugin_cfg : "", tail ? tail : "");
    th_buf_append(&b, "", 1);
    put_text(f->cfg_path, (const char *)b.data);
    th_buf_destroy(&b);
}

static int fx_open(fx *f)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->gmu, NULL);
    pthread_cond_init(&f->gcv, NULL);
    f->dir = th_test_tmpdir();
    snprintf(f->so, sizeof f->so, "%s/fx.so", f->dir);
    snprintf(f->cfg_path, sizeof f->cfg_path, "%s/toolhost.yaml", f->dir);
    snprintf(f->marker, sizeof f->marker, "%s/marker", f->dir);
    snprintf(f->gate, sizeof f->gate, "%s/gate", f->dir);
    put_file(th_test_build_path(fx_so_first), f->so, (size_t)-1);
    write_config(f, NULL, NULL);
    th_error e;
    if (th_config_load(f->cfg_path, &f->cfg, &e) != 0) {
        fprintf(stderr, "config: %s\n", e.msg);
        return -1;
    }
    f->reg = th_registry_new();
    th_reload_target t = {.reg = f->reg, .tools_changed = on_tools_changed, .ud = f};
    if (th_reloader_new(&t, f->cfg, &f->r, &e) != 0) {
        fprintf(stderr, "reloader: %s\n", e.msg);
        return -1;
    }
    th_plugin *p = NULL;
    if (th_reloader_load(f->r, f->cfg, &f->cfg->plugins[0], &p, &e) != 0 ||
        th_registry_add(f->reg, p, &e) != 0) {
        fprintf(stderr, "load: %s\n", e.msg);
        return -1;
    }
    return 0;
}

static void fx_close(fx *f)
{
    th_registry_free(f->reg);
    th_reloader_free(f->r);
    th_config_free(f->cfg);
    th_test_rmtree(f->dir);
    free(f->dir);
    pthread_mutex_destroy(&f->gmu);
    pthread_cond_destroy(&f->gcv);
}

static uint64_t gen_of(fx *f)
{
    th_plugin *p = th_registry_plugin(f->reg, "fx");
    return p ? p->generation : 0;
}

static bool marker_has(fx *f, const char *line)
{
    char *m = th_test_read_file(f->marker, NULL);
    bool has = m && strstr(m, line);
    free(m);
    return has;
}

/* ---- private copies ----------------------------------------------------------- */

static void test_copydir(void)
{
    char *tmp = th_test_tmpdir();
    char state[4200];
    snprintf(state, sizeof state, "%s/state", tmp);
    /* A folder left by a host that is gone: swept at open. */
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    waitpid(pid, NULL, 0);
    mkdir(state, 0700);
    char stale[4300];
    snprintf(stale, sizeof stale, "%s/run-%ld-abcdef", state, (long)pid);
    CU_ASSERT_EQUAL(mkdir(stale, 0700), 0);
    free(th_test_write_file(stale, "old.so", "x", 1));

    th_copydir *d = NULL;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_copydir_open(state, &d, &e), 0);
    struct stat st;
    CU_ASSERT_EQUAL(stat(th_copydir_path(d), &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0700);
    CU_ASSERT_NOT_EQUAL(stat(stale, &st), 0); /* swept */
    CU_ASSERT_PTR_NOT_NULL(strstr(th_copydir_path(d), "/run-"));

    const char *src = th_test_build_path("fixtures/reload_a.so");
    char *c1 = NULL, *c2 = NULL;
    th_file_id id, id0;
    CU_ASSERT_EQUAL(th_copydir_copy(d, src, "fx", 1, &c1, &id, &e), 0);
    CU_ASSERT_EQUAL(th_copydir_copy(d, src, "fx", 1, &c2, &id, &e), 0);
    CU_ASSERT_STRING_NOT_EQUAL(c1, c2);
    CU_ASSERT_EQUAL(th_file_id_of(src, &id0, &e), 0);
    CU_ASSERT(th_file_id_equal(&id, &id0));
    CU_ASSERT_EQUAL(stat(c1, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0500);
    CU_ASSERT(th_file_same_content(c1, src));
    CU_ASSERT(!th_file_same_content(c1, th_test_build_path("fixtures/reload_b.so")));
    CU_ASSERT_EQUAL(count_files(th_copydir_path(d)), 2);
    th_copydir_remove(d, c1);
    CU_ASSERT_EQUAL(count_files(th_copydir_path(d)), 1);
    th_copydir_remove(d, "/etc/passwd"); /* refused, logged */
    CU_ASSERT_EQUAL(stat("/etc/passwd", &st), 0);
    char *path = strdup(th_copydir_path(d));
    th_copydir_close(d);
    CU_ASSERT_NOT_EQUAL(stat(path, &st), 0); /* gone, with c2 */
    CU_ASSERT_EQUAL(stat(state, &st), 0);    /* state_dir stays */
    free(path);
    free(c1);
    free(c2);

    /* A state_dir others may write is refused. */
    chmod(state, 0777);
    CU_ASSERT_EQUAL(th_copydir_open(state, &d, &e), TH_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "chmod 700"));
    /* Without state_dir: a folder under $TMPDIR. */
    CU_ASSERT_EQUAL_FATAL(th_copydir_open(NULL, &d, &e), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_copydir_path(d), "toolhost-"));
    th_copydir_close(d);
    th_test_rmtree(tmp);
    free(tmp);
}

/* Without host.state_dir and $TMPDIR: /dev/shm when /tmp is on disk and
 * /dev/shm is memory one may run code from with room to spare, else /tmp
 * (reload_copy.c, copies_in_memory); either way a copy holds the source's
 * bytes, mode 0500, made by FICLONE or by the kernel's copy, counted. */
static void test_copydir_default_folder(void)
{
    struct statfs tf, sf;
    struct statvfs sv;
    bool shm = !(statfs("/tmp", &tf) == 0 && tf.f_type == TMPFS_MAGIC) &&
               statfs("/dev/shm", &sf) == 0 && sf.f_type == TMPFS_MAGIC &&
               statvfs("/dev/shm", &sv) == 0 &&
               !(sv.f_flag & (ST_NOEXEC | ST_RDONLY)) &&
               (uint64_t)sv.f_bavail * sv.f_frsize >= ((uint64_t)1 << 30);
    char *saved = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
    unsetenv("TMPDIR");
    th_copydir *d = NULL;
    th_error e;
    int rc = th_copydir_open(NULL, &d, &e);
    if (saved) {
        setenv("TMPDIR", saved, 1);
        free(saved);
    }
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    const char *want = shm ? "/dev/shm/toolhost-" : "/tmp/toolhost-";
    CU_ASSERT_EQUAL(strncmp(th_copydir_path(d), want, strlen(want)), 0);
    if (strncmp(th_copydir_path(d), want, strlen(want)) != 0)
        fprintf(stderr, "copies in %s, wanted %s...\n", th_copydir_path(d), want);
    struct stat st;
    CU_ASSERT_EQUAL(stat(th_copydir_path(d), &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 07777, 0700);

    const char *src = th_test_build_path("fixtures/reload_a.so");
    char *c1 = NULL, *c2 = NULL;
    th_file_id id;
    CU_ASSERT_EQUAL(th_copydir_copy(d, src, "fx", 1, &c1, &id, &e), 0);
    CU_ASSERT_EQUAL(th_copydir_copy(d, src, "fx", 2, &c2, &id, &e), 0);
    CU_ASSERT(c1 && th_file_same_content(c1, src));
    CU_ASSERT(c2 && th_file_same_content(c2, src));
    CU_ASSERT(c1 && stat(c1, &st) == 0 && (st.st_mode & 0777) == 0500);
    unsigned long cloned = 0, copied = 0;
    th_copydir_counts(d, &cloned, &copied);
    CU_ASSERT_EQUAL(cloned + copied, 2);
    /* the copy is the host's own: a later write to the source (in place,
     * same inode) does not reach it */
    char *tmp = th_test_tmpdir();
    char *own = th_test_write_file(tmp, "own.so", "first version", 13);
    char *c3 = NULL;
    CU_ASSERT_EQUAL(th_copydir_copy(d, own, "own", 1, &c3, &id, &e), 0);
    FILE *f = fopen(own, "r+");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("SECOND", f);
    fclose(f);
    CU_ASSERT(c3 && !th_file_same_content(c3, own));
    char buf[32] = "";
    f = c3 ? fopen(c3, "r") : NULL;
    CU_ASSERT(f && fgets(buf, sizeof buf, f) && strcmp(buf, "first version") == 0);
    if (f)
        fclose(f);
    char *path = strdup(th_copydir_path(d));
    th_copydir_close(d);
    CU_ASSERT_NOT_EQUAL(stat(path, &st), 0);
    free(path);
    free(c1);
    free(c2);
    free(c3);
    free(own);
    th_test_rmtree(tmp);
    free(tmp);
}

static int copydir_in(const char *parent, th_copydir **d)
{
    char *saved = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
    setenv("TMPDIR", parent, 1);
    th_error e;
    int rc = th_copydir_open(NULL, d, &e);
    if (saved) {
        setenv("TMPDIR", saved, 1);
        free(saved);
    } else {
        unsetenv("TMPDIR");
    }
    return rc;
}

/* The private folder's path is checked once, when it is made; its copies
 * are then opened directly (O_NOFOLLOW, a file of ours), and a folder in a
 * place others may change keeps the walk for every copy, which refuses it. */
static void test_copydir_checked_once(void)
{
    char *tmp = th_test_tmpdir();
    chmod(tmp, 0700);
    th_copydir *d = NULL;
    CU_ASSERT_EQUAL_FATAL(copydir_in(tmp, &d), 0);
    CU_ASSERT(th_copydir_checked(d));
    const char *src = th_test_build_path("fixtures/reload_a.so");
    char *c = NULL;
    th_file_id id;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_copydir_copy(d, src, "fx", 1, &c, &id, &e), 0);
    th_load_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.name = "fx";
    lo.load_path = c;
    lo.private_copy = true;
    th_plugin *p = NULL;
    CU_ASSERT_EQUAL(th_plugin_open(src, &lo, &p, &e), 0);
    if (p)
        th_plugin_close(p);
    /* a link where the copy was: not followed */
    CU_ASSERT_EQUAL(unlink(c), 0);
    CU_ASSERT_EQUAL(symlink(src, c), 0);
    p = NULL;
    CU_ASSERT_EQUAL(th_plugin_open(src, &lo, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "cannot open its copy"));
    CU_ASSERT_PTR_NULL(p);
    unlink(c);
    free(c);
    th_copydir_close(d);

    /* under a folder anyone may write (not sticky): not checked, and the
     * loader's walk refuses the copy as before */
    char open_dir[4200];
    snprintf(open_dir, sizeof open_dir, "%s/open", tmp);
    CU_ASSERT_EQUAL_FATAL(mkdir(open_dir, 0777), 0);
    chmod(open_dir, 0777);
    CU_ASSERT_EQUAL_FATAL(copydir_in(open_dir, &d), 0);
    CU_ASSERT(!th_copydir_checked(d));
    c = NULL;
    CU_ASSERT_EQUAL_FATAL(th_copydir_copy(d, src, "fx", 1, &c, &id, &e), 0);
    lo.load_path = c;
    lo.private_copy = th_copydir_checked(d);
    p = NULL;
    CU_ASSERT_EQUAL(th_plugin_open(src, &lo, &p, &e), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "writable by others"));
    free(c);
    th_copydir_close(d);
    th_test_rmtree(tmp);
    free(tmp);
}

/* The sweep of stale folders: at th_copydir_open, or deferred to
 * th_copydir_sweep() (once); the reloader sweeps on its own thread, so a
 * start does not wait for the copies a crashed host left. */
static void test_copydir_sweep_deferred(void)
{
    char *tmp = th_test_tmpdir();
    char state[4200], stale[4300];
    snprintf(state, sizeof state, "%s/state", tmp);
    CU_ASSERT_EQUAL_FATAL(mkdir(state, 0700), 0);
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    waitpid(pid, NULL, 0); /* a pid that is gone */
    snprintf(stale, sizeof stale, "%s/run-%ld-abcdef", state, (long)pid);
    CU_ASSERT_EQUAL(mkdir(stale, 0700), 0);
    free(th_test_write_file(stale, "old.so", "x", 1));
    struct stat st;
    th_copydir *d = NULL;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_copydir_open_ex(state, true, &d, &e), 0);
    CU_ASSERT_EQUAL(stat(stale, &st), 0); /* not yet */
    th_copydir_sweep(d);
    CU_ASSERT_NOT_EQUAL(stat(stale, &st), 0); /* swept */
    th_copydir_sweep(d);                      /* once is enough */
    th_copydir_close(d);

    /* the reloader: the folder goes without anyone calling for it */
    CU_ASSERT_EQUAL(mkdir(stale, 0700), 0);
    free(th_test_write_file(stale, "old.so", "x", 1));
    fx f;
    CU_ASSERT_EQUAL_FATAL(fx_open(&f), 0);
    char fstale[4300];
    snprintf(fstale, sizeof fstale, "%s/state/run-%ld-abcdef", f.dir, (long)pid);
    CU_ASSERT_EQUAL(mkdir(fstale, 0700), 0);
    /* fx_open's reloader has swept already or sweeps what it saw; a new
     * one (a reload does not make one) is what a start is: open another */
    th_reloader *r2 = NULL;
    th_registry *reg2 = th_registry_new();
    th_reload_target t = {.reg = reg2};
    CU_ASSERT_EQUAL_FATAL(th_reloader_new(&t, f.cfg, &r2, &e), 0);
    bool gone = false;
    for (int i = 0; i < 500 && !gone; i++) { /* 5 s at most */
        gone = stat(fstale, &st) != 0;
        if (!gone)
            usleep(10000);
    }
    CU_ASSERT_TRUE(gone);
    th_reloader_free(r2);
    th_registry_free(reg2);
    fx_close(&f);
    th_test_rmtree(tmp);
    free(tmp);
}

static void test_elf_incomplete(void)
{
    char *tmp = th_test_tmpdir();
    const char *so = th_test_build_path("fixtures/reload_a.so");
    CU_ASSERT(!th_elf_incomplete(so));
    char p[4200];
    snprintf(p, sizeof p, "%s/half.so", tmp);
    put_file(so, p, 20000);
    CU_ASSERT(th_elf_incomplete(p));
    put_file(so, p, 40);
    CU_ASSERT(th_elf_incomplete(p));
    put_file(so, p, 2);
    CU_ASSERT(th_elf_incomplete(p));
    put_text(p, "");
    CU_ASSERT(th_elf_incomplete(p));
    put_text(p, "this is not an ELF file, and long enough to tell so for sure\n");
    CU_ASSERT(!th_elf_incomplete(p));
    snprintf(p, sizeof p, "%s/missing.so", tmp);
    CU_ASSERT(!th_elf_incomplete(p));
    th_test_rmtree(tmp);
    free(tmp);
}

static void test_still_loaded(void)
{
    char *tmp = th_test_tmpdir();
    char p[4200];
    snprintf(p, sizeof p, "%s/x.so", tmp);
    put_file(th_test_build_path("fixtures/reload_b.so"), p, (size_t)-1);
    CU_ASSERT(!th_dl_still_loaded(p));
    void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    CU_ASSERT(th_dl_still_loaded(p));
    dlclose(h);
    CU_ASSERT(!th_dl_still_loaded(p));
    th_test_rmtree(tmp);
    free(tmp);
}

/* ---- the reloader ---------------------------------------------------------------- */

static void test_swap_and_unchanged(void)
{
    fx f;
    CU_ASSERT_EQUAL_FATAL(fx_open(&f), 0);
    char out[64];
    CU_ASSERT_EQUAL(call(f.reg, "rl_answer", NULL, out, sizeof out), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(out, "A");
    CU_ASSERT_EQUAL(gen_of(&f), 1);

    /* Nothing changed: nothing happens. */
    th_reload_result res;
    CU_ASSERT_EQUAL(th_reload_now(f.r, &res), 0);
    CU_ASSERT_EQUAL(res.n_unchanged, 1);
    CU_ASSERT_EQUAL(res.n_items, 0);
    CU_ASSERT(!res.tools_changed);
    CU_ASSERT_EQUAL(atomic_load(&f.tools_changed), 0);

    /* Rebuilt with the same bytes (new inode, new mtime): unchanged. */
    put_file(th_test_build_path("fixtures/reload_a.so"), f.so, (size_t)-1);
    CU_ASSERT_EQUAL(th_reload_now(f.r, &res), 0);
    CU_ASSERT_EQUAL(res.n_unchanged, 1);
    CU_ASSERT_EQUAL(gen_of(&f), 1);

    /* Rebuilt with another answer: generation 2 answers. */
    put_file(th_test_build_path("fixtures/reload_b.so"), f.so, (size_t)-1);
    CU_ASSERT_EQUAL(th_reload_now(f.r, &res), 0);
    CU_ASSERT_EQUAL(res.n_changed, 1);
    CU_ASSERT_EQUAL_FATAL(res.n_items, 1);
    CU_ASSERT_STRING_EQUAL(res.items[0].name, "fx");
    CU_ASSERT_EQUAL(res.items[0].action, TH_RL_CHANGED);
    CU_ASSERT_EQUAL(res.items[0].generation, 2);
    CU_ASSERT(res.tools_changed);
    CU_ASSERT(!res.config_changed);
    CU_ASSERT_EQUAL(atomic_load(&f.tools_changed), 1);
    CU_ASSERT_EQUAL(call(f.reg, "rl_answer", NULL, out, sizeof out), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(out, "B");
    CU_ASSERT_EQUAL(gen_of(&f), 2);
    th_plugin *p = th_registry_plugin(f.reg, "fx");
    CU_ASSERT_STRING_EQUAL(p->path, f.so);
    CU_ASSERT_PTR_NOT_NULL(strstr(p->load_path, "/fx-g2-"));

    /* The old generation was closed on the reloader's thread, its object
     * left memory, its copy is gone. */
    CU_ASSERT(th_reload_quiesce(f.r, 5000));
    th_reload_stats st;
    th_reload_get_stats(f.r, &st);
    CU_ASSERT_EQUAL(st.reloads, 3);
    CU_ASSERT_EQUAL(st.ok, 3);
    CU_ASSERT_EQUAL(st.closed, 1);
    CU_ASSERT_EQUAL(st.unloaded, 1);
    CU_ASSERT_EQUAL(st.still_mapped, 0);
    CU_ASSERT_EQUAL(st.draining, 0);
    CU_ASSERT(marker_has(&f, "fini A th-reload"));
    char state[4200];
    snprintf(state, sizeof state, "%s/state", f.dir);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "%s/%s", state, "run-*");
    /* exactly one copy left (generation 2) in the run folder */
    char *dirpath = strdup(p->load_path);
    *strrchr(dirpath, '/') = '\0';
    CU_ASSERT_EQUAL(count_files(dirpath), 1);
    fx_close(&f);
    struct stat sb;
    CU_ASSERT_NOT_EQUAL(stat(dirpath, &sb), 0); /* the run folder is gone */
    free(dirpath);
}

/* The 100 swaps under a tight loop of calls. */
typedef struct loop_ud {
    fx *f;
    atomic_int stop;
    atomic_long calls, failed, bad, a, b;
} loop_ud;

static void *caller(void *arg)
{
    loop_ud *u = arg;
    char out[64];
    while (!atomic_load(&u->stop)) {
        int st = call(u->f->reg, "rl_answer", NULL, out, sizeof out);
        atomic_fetch_add(&u->calls, 1);
        if (st != TOOLHOST_OK)
            atomic_fetch_add(&u->failed, 1);
        else if (strcmp(out, "A") == 0)
            atomic_fetch_add(&u->a, 1);
        else if (strcmp(out, "B") == 0)
            atomic_fetch_add(&u->b, 1);
        else
            atomic_fetch_add(&u->bad, 1);
    }
    return NULL;
}

/* How many mappings of f's private copies /proc/self/maps lists, other
 * than those of the generation named `live` ("/fx-g101-"). */
static int old_gens_mapped(const fx *f, const char *live)
{
    FILE *m = fopen("/proc/self/maps", "r");
    if (!m)
        return -1;
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, m))
        if (strstr(line, f->dir) && strstr(line, "/fx-g") && !strstr(line, live))
            n++;
    fclose(m);
    return n;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_hundred_reloads_under_load(void)
{
    fx f;
    CU_ASSERT_EQUAL_FATAL(fx_open(&f), 0);
    loop_ud u;
    memset(&u, 0, sizeof u);
    u.f = &f;
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, caller, &u);
    int failed_reloads = 0;
    int64_t swaps[100];
    for (int i = 0; i < 100; i++) {
        bool b = i % 2 == 0;
        put_file(th_test_build_path(b ? "fixtures/reload_b.so" : "fixtures/reload_a.so"),
                 f.so, (size_t)-1);
        th_reload_result res;
        swaps[i] = th_reload_now(f.r, &res) == 0 ? res.swap_ns : INT64_MAX;
        if (res.rc != 0 || res.n_changed != 1) {
            failed_reloads++;
            fprintf(stderr, "reload %d: %s\n", i, res.err.msg);
        }
        /* From now on only the new code answers. */
        char out[64];
        CU_ASSERT_EQUAL(call(f.reg, "rl_answer", NULL, out, sizeof out), TOOLHOST_OK);
        CU_ASSERT_STRING_EQUAL(out, b ? "B" : "A");
    }
    atomic_store(&u.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CU_ASSERT_EQUAL(failed_reloads, 0);
    CU_ASSERT_EQUAL(atomic_load(&u.failed), 0);
    CU_ASSERT_EQUAL(atomic_load(&u.bad), 0);
    CU_ASSERT(atomic_load(&u.calls) > 100);
    CU_ASSERT_EQUAL(gen_of(&f), 101);
    CU_ASSERT(th_reload_quiesce(f.r, 10000));
    th_reload_stats st;
    th_reload_get_stats(f.r, &st);
    CU_ASSERT_EQUAL(st.closed, 100);
    /* A generation whose fini() found a caller still inside its code (a
     * caller thread preempted there: now and then on a loaded machine, two
     * TSan suites at a time) is counted still_mapped and unloaded once the
     * thread has left (checked every 50 ms): in the end no old generation
     * is in memory. */
    CU_ASSERT_EQUAL(st.unloaded + st.still_mapped, 100);
    int mapped = -1;
    for (int t = 0; t < 300 && (mapped = old_gens_mapped(&f, "/fx-g101-")) != 0; t++)
        usleep(10000);
    CU_ASSERT_EQUAL(mapped, 0);
    CU_ASSERT(old_gens_mapped(&f, "/none/") > 0); /* the live one is seen */
    CU_ASSERT_EQUAL(st.draining, 0);
    /* The swap is well under 10 ms: the median (the maximum depends on the
     * scheduler of a loaded machine; bench/reload reports it). */
    qsort(swaps, 100, sizeof swaps[0], cmp_i64);
    CU_ASSERT(swaps[50] < 1000000);
    fx_close(&f);
}

/* Suspended calls completed by the plugin's own threads (rl_bg: fini()
 * joins them, as plugin.h asks) under 20 reloads: every old generation is
 * unloaded while its threads are gone, no call fails, nothing crashes. */
static void *caller_bg(void *arg)
{
    loop_ud *u = arg;
    char out[64];
    while (!atomic_load(&u->stop)) {
        int st = call(u->f->reg, "rl_bg", u->f->gate, out, sizeof out);
        atomic_fetch_add(&u->calls, 1);
        if (st != TOOLHOST_OK)
            atomic_fetch_add(&u->failed, 1);
        else if (strcmp(out, "A") && strcmp(out, "B"))
            atomic_fetch_add(&u->bad, 1);
    }
    return NULL;
}

static void test_twenty_reloads_threads_joined(void)
{
    fx f;
    CU_ASSERT_EQUAL_FATAL(fx_open(&f), 0);
    put_text(f.gate, "go"); /* rl_bg answers at once, from its thread */
    loop_ud u;
    memset(&u, 0, sizeof u);
    u.f = &f;
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, caller_bg, &u);
    for (int i = 0; i < 20; i++) {
        put_file(th_test_build_path(i % 2 == 0 ? "fixtures/reload_b.so"
                                               : "fixtures/reload_a.so"),
                 f.so, (size_t)-1);
        th_reload_result res;
        CU_ASSERT_EQUAL(th_reload_now(f.r, &res), 0);
        usleep(5000);
    }
    atomic_store(&u.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CU_ASSERT_EQUAL(atomic_load(&u.failed), 0);
    CU_ASSERT_EQUAL(atomic_load(&u.bad), 0);
    CU_ASSERT(atomic_load(&u.calls) > 20);
    CU_ASSERT(th_reload_quiesce(f.r, 10000));
    th_reload_stats st;
    th_reload_get_stats(f.r, &st);
    CU_ASSERT_EQUAL(st.closed, 20);
    CU_ASSERT_EQUAL(st.unloaded, 20);
    fx_close(&f);
}

/* A call pinned to the old generation finishes on it after the swap. */
typedef struct held {
    fx *f;
    const char *tool;
    char out[64];
    int st;
    const th_tool *t;
} held;

static void *run_held(void *arg)
{
    held *h = arg;
    h->st = run_pinned(h->t, h->f->gate, h->out, sizeof h->out);
    th_tool_release(h->t); /* maybe the last reference: fini is deferred */
    return NULL;
}

static void in_flight(const char *tool)
{
    fx f;
    CU_ASSERT_EQUAL_FATAL(fx_open(&f), 0);
    held h = {&f, tool, "", -1, NULL};
    h.t = th_registry_acquire(f.reg, tool);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h.t);
    pthread_t th;
    pthread_create(&th, NULL, run_held, &h);
    put_file(th_test_build_path("fixtures/reload_b.so"), f.so, (size_t)-1);
    th_reload_result res;
    CU_ASSERT_EQUAL(th_reload_now(f.r, &res), 0);
    char out[64];
    CU_ASSERT_EQUAL(call(f.reg, "rl_answer", NULL, out, sizeof out), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(out, "B");
    th_reload_stats st;
    th_reload_get_stats(f.r, &st);
    CU_ASSERT_EQUAL(st.draining, 1);
    CU_ASSERT_EQUAL(st.closed, 0);
    CU_ASSERT(!marker_has(&f, "fini A"));
    put_text(f.gate, "go");
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(h.st, TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(h.out, "A");
    CU_ASSERT(th_reload_quiesce(f.r, 5000));
    th_reload_get_stats(f.r, &st);
    CU_ASSERT_EQUAL(st.draining, 0);
    CU_ASSERT_EQUAL(st.closed, 1);
    CU_ASSERT(marker_has(&f, "fini A th-reload"));
    fx_close(&f);
}

static void test_call_in_flight(void)
{
    in_flight("rl_hold");
}

/* A suspended call (the plugin's own thread completes it later) keeps its
 * generation; fini() joins that thread. */
static void test_task_in_flight(void)
{
    in_flight("rl_bg");
}

static void assert_unchanged(fx *f, uint64_t gen, const char *answer)
{
    char out[64];
    CU_ASSERT_EQUAL(call(f->reg, "rl_answer", NULL, out, sizeof out), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(out, answer);
    CU_ASSERT_EQUAL(gen_of(f), gen);
}

static void test_failures_change_nothing(void)
{
    fx f;
    CU_ASSERT_EQUAL_FATAL(fx_open(&f), 0);
    th_log_set_fd(-1);
    th_reload_result res;
    th_reload_stats st;

    /* A broken .so (not ELF). */
    put_text(f.so, "this is not a shared object, just text that is long enough\n");
    CU_ASSERT_EQUAL(th_reload_now(f.r, &res), TH_ELOAD);
    CU_ASSERT(!res.incomplete);
    CU_ASSERT_PTR_NOT_NULL(strstr(res.err.msg, "not a shared object"));
    CU_ASSERT_PTR_NOT_NULL(strstr(res.err.msg, f.so));
    assert_unchanged(&f, 1, "A");
    th_reload_get_stats(f.r, &st);
    CU_ASSERT_EQUAL(st.failed, 1);
    CU_ASSERT_EQUAL(st.last_rc, TH_ELOAD);
    CU_ASSERT_STRING_EQUAL(st.last_error, res.err.msg);

    /* A half-written .so: failed, flagged for a retry. */
    put_file(th_test_build_path("fixtures/reload_b.so"), f.so, 9000);
    CU_ASSERT_NOT_EQUAL(th_reload_now(f.r, &res), 0);
    CU_ASSERT(res.incomplete);
    CU_ASSERT_PTR_NOT_NULL(strstr(res.err.msg, "half-written"));
    assert_unchanged(&f, 1, "A");

    /* ... then complete: the reload goes through. */
    put_file(th_test_build_path("fixtures/reload_b.so"), f.so, (size_t)-1);
    CU_ASSERT_EQUAL(th_reload_now(f.r, &res), 0);
    assert_unchanged(&f, 2, "B");

    /* A plugin whose init fails. */
    write_config(&f, "      fail_init: true\n", NULL);
    CU_ASSERT_EQUAL(th_reload_now(f.r, &res), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(res.err.msg, "init failed on purpose"));
    assert_unchanged(&f, 2, "B");
    /* Another plugin file whose init fails (with no config block, which
     * that plugin does not take). */
    char text[8400];
    snprintf(text, sizeof text, "host:\n  state_dir: %s/state\nplugins:\n"
             "  - name: fx\n    path: %s\n", f.dir, f.so);
    put_text(f.cfg_path, text);
    put_file(th_test_build_path("fixtures/bad_init_fails.so"), f.so, (size_t)-1);
    CU_ASSERT_EQUAL(th_reload_now(f.r, &res), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(res.err.msg, "database unreachable"));
    assert_unchanged(&f, 2, "B");
    write_config(&f, NULL, NULL);
    put_file(th_test_build_path("fixtures/reload_b.so"), f.so, (size_t)-1);

    /* A config with a syntax error. */
    put_text(f.cfg_path, "plugins:\n  - name: fx\n    path: [unclosed\n");
    CU_ASSERT_EQUAL(th_reload_now(f.r, &res), TH_ECONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(res.err.msg, "toolhost.yaml:"));
    assert_unchanged(&f, 2, "B");

    /* A config whose toolset names a tool no plugin provides. */
    write_config(&f, NULL, "toolsets:\n  - name: t\n    tools: [rl_answer, nope]\n");
    CU_ASSERT_EQUAL(th_reload_now(f.r, &res), TH_ECONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(res.err.msg, "'nope'"));
    assert_unchanged(&f, 2, "B");

    /* A second plugin whose tools clash with the first. */
    char second[8400];
    snprintf(second, sizeof second, "  - name: fx2\n    path: %s\n",
             th_test_build_path("fixtures/reload_a.so"));
    write_config(&f, second, NULL);
    CU_ASSERT_EQUAL(th_reload_now(f.r, &res), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(res.err.msg, "must be unique"));
    assert_unchanged(&f, 2, "B");
    CU_ASSERT_PTR_NULL(th_registry_plugin(f.reg, "fx2"));

    /* Every prepared generation that was discarded is closed, its copy
     * removed: only generation 2's copy is left. */
    CU_ASSERT(th_reload_quiesce(f.r, 5000));
    char *dirpath = strdup(th_registry_plugin(f.reg, "fx")->load_path);
    *strrchr(dirpath, '/') = '\0';
    CU_ASSERT_EQUAL(count_files(dirpath), 1);
    free(dirpath);
    th_reload_get_stats(f.r, &st);
    CU_ASSERT_EQUAL(st.failed, 7);
    CU_ASSERT_EQUAL(st.ok, 1);
    th_log_set_fd(2);
    fx_close(&f);
}

static void test_add_and_remove_in_flight(void)
{
    fx f;
    CU_ASSERT_EQUAL_FATAL(fx_open(&f), 0);
    th_reload_result res;
    /* Added: another plugin. */
    char second[8400];
    snprintf(second, sizeof second, "  - name: basic\n    path: %s\n",
             th_test_build_path("fixtures/good_basic.so"));
    write_config(&f, second, NULL);
    CU_ASSERT_EQUAL(th_reload_now(f.r, &res), 0);
    CU_ASSERT_EQUAL(res.n_added, 1);
    CU_ASSERT_EQUAL(res.n_unchanged, 1); /* fx: its entry is the same */
    CU_ASSERT(res.config_changed);
    CU_ASSERT_PTR_NOT_NULL(th_registry_plugin(f.reg, "basic"));

    /* Removed while a call is in flight: the call completes, then the
     * plugin is closed. */
    held h = {&f, "rl_hold", "", -1, NULL};
    h.t = th_registry_acquire(f.reg, "rl_hold");
    CU_ASSERT_PTR_NOT_NULL_FATAL(h.t);
    pthread_t th;
    pthread_create(&th, NULL, run_held, &h);
    char text[8400];
    snprintf(text, sizeof text, "plugins:\n  - name: basic\n    path: %s\n",
             th_test_build_path("fixtures/good_basic.so"));
    put_text(f.cfg_path, text);
    CU_ASSERT_EQUAL(th_reload_now(f.r, &res), 0);
    CU_ASSERT_EQUAL(res.n_removed, 1);
    CU_ASSERT_EQUAL(res.n_unchanged, 1);
    CU_ASSERT_EQUAL_FATAL(res.n_items, 1);
    CU_ASSERT_EQUAL(res.items[0].action, TH_RL_REMOVED);
    CU_ASSERT_PTR_NULL(th_registry_plugin(f.reg, "fx"));
    char out[64];
    CU_ASSERT_EQUAL(call(f.reg, "rl_answer", NULL, out, sizeof out), -1);
    CU_ASSERT(!marker_has(&f, "fini"));
    put_text(f.gate, "go");
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(h.st, TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(h.out, "A");
    CU_ASSERT(th_reload_quiesce(f.r, 5000));
    CU_ASSERT(marker_has(&f, "fini A th-reload"));
    th_reload_stats st;
    th_reload_get_stats(f.r, &st);
    CU_ASSERT_EQUAL(st.closed, 1);
    CU_ASSERT_EQUAL(st.draining, 0);
    fx_close(&f);
}

/* Requests during a reload fold into one more reload after it. */
static atomic_int done_calls;
static void on_done(const th_reload_result *res, void *ud)
{
    (void)ud;
    if (res->rc == 0)
        atomic_fetch_add(&done_calls, 1);
}

typedef struct run_ud {
    fx *f;
    th_reload_result res;
} run_ud;

static void *run_reload(void *arg)
{
    run_ud *u = arg;
    th_reload_run(u->f->r, &u->res);
    return NULL;
}

static void test_requests_fold(void)
{
    fx f;
    CU_ASSERT_EQUAL_FATAL(fx_open(&f), 0);
    atomic_store(&done_calls, 0);
    pthread_mutex_lock(&f.gmu);
    f.block_state = 1;
    pthread_mutex_unlock(&f.gmu);
    put_file(th_test_build_path("fixtures/reload_b.so"), f.so, (size_t)-1);
    CU_ASSERT_EQUAL(th_reload_request(f.r, on_done, NULL), 0);
    /* Wait until the first reload is inside tools_changed. */
    pthread_mutex_lock(&f.gmu);
    while (f.block_state != 2)
        pthread_cond_wait(&f.gcv, &f.gmu);
    pthread_mutex_unlock(&f.gmu);
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(th_reload_request(f.r, on_done, NULL), 0);
    /* And one that waits, from another thread, before the first ends. */
    run_ud ru = {&f, {0}};
    pthread_t th;
    pthread_create(&th, NULL, run_reload, &ru);
    th_reload_stats st;
    for (int i = 0; i < 10000; i++) {
        th_reload_get_stats(f.r, &st);
        if (st.requests == 7)
            break;
        usleep(1000);
    }
    CU_ASSERT_EQUAL(st.requests, 7);
    pthread_mutex_lock(&f.gmu);
    f.block_state = 0;
    pthread_cond_broadcast(&f.gcv);
    pthread_mutex_unlock(&f.gmu);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(ru.res.rc, 0);
    /* Its callback came last (requests are answered in order). */
    CU_ASSERT_EQUAL(atomic_load(&done_calls), 6);
    th_reload_get_stats(f.r, &st);
    CU_ASSERT_EQUAL(st.reloads, 2); /* the six after the first: one reload */
    CU_ASSERT_EQUAL(ru.res.seq, 2);
    fx_close(&f);
}

static void test_watch_paths(void)
{
    fx f;
    CU_ASSERT_EQUAL_FATAL(fx_open(&f), 0);
    char **v = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL(th_reload_watch_paths(f.r, &v, &n), 0);
    char real[4096];
    CU_ASSERT_PTR_NOT_NULL(realpath(f.dir, real));
    bool found = false;
    for (size_t i = 0; i < n; i++)
        found |= strcmp(v[i], real) == 0 || strcmp(v[i], f.dir) == 0;
    CU_ASSERT(found);
    th_reload_paths_free(v, n);
    CU_ASSERT(th_reload_is_watched(f.r, f.dir, "fx.so"));
    CU_ASSERT(th_reload_is_watched(f.r, f.dir, "toolhost.yaml"));
    CU_ASSERT(!th_reload_is_watched(f.r, f.dir, "marker"));
    CU_ASSERT(!th_reload_is_watched(f.r, "/elsewhere", "fx.so"));
    fx_close(&f);
}


/* ---- the watcher on a libuv loop -------------------------------------------------- */

typedef struct wt {
    fx *f;
    uv_loop_t loop;
    uv_timer_t timeout, later;
    int results;
    th_reload_result last;
    int want;            /* stop the loop after this many results */
    void (*later_fn)(struct wt *);
    uint64_t retries0;   /* complete_after_retry: the count before */
    th_reload_watch *w;
    uv_fs_event_t probe; /* the test's own watch on the fixture's folder */
    uv_timer_t poll;
    bool probe_seen;     /* the probe saw "gate" change */
    int changed, failed; /* over every result: plugins changed, failures */
} wt;

static void wt_result(const th_reload_result *res, void *ud)
{
    wt *t = ud;
    t->results++;
    t->last = *res;
    t->changed += res->n_changed;
    t->failed += res->rc != 0;
    if (t->results >= t->want)
        uv_stop(&t->loop);
}

static void wt_timeout(uv_timer_t *h)
{
    uv_stop(h->loop);
}

static void wt_later(uv_timer_t *h)
{
    wt *t = h->data;
    t->later_fn(t);
}

/* Runs the loop until `want` more results came, at most 10 s. */
static void wt_wait(wt *t, int want)
{
    t->want = t->results + want;
    uv_timer_start(&t->timeout, wt_timeout, th_test_ms(10000), 0);
    uv_run(&t->loop, UV_RUN_DEFAULT);
    uv_timer_stop(&t->timeout);
}

static void wt_probe(uv_fs_event_t *h, const char *name, int events, int status)
{
    (void)events;
    wt *t = h->data;
    if (status == 0 && name && strcmp(name, "gate") == 0)
        t->probe_seen = true;
}

static void wt_poll_idle(uv_timer_t *h)
{
    wt *t = h->data;
    if (t->probe_seen && th_reload_watch_idle(t->w))
        uv_stop(h->loop);
}

/* Runs the loop until everything started before has ended: it changes
 * "gate", a file no reload reads, in the watched folder and waits for the
 * test's own watch to see it (file events come in order, so the watcher
 * has had every earlier one), then for the watcher to be idle: no
 * debounce or retry pending, every reload answered and reported.  What
 * did not happen is shown after this barrier, not by a sleep. */
static void wt_settle(wt *t)
{
    t->probe_seen = false;
    t->want = INT_MAX;
    put_text(t->f->gate, "x");
    uv_timer_start(&t->poll, wt_poll_idle, 1, 1);
    uv_timer_start(&t->timeout, wt_timeout, th_test_ms(10000), 0);
    uv_run(&t->loop, UV_RUN_DEFAULT);
    uv_timer_stop(&t->timeout);
    uv_timer_stop(&t->poll);
    CU_ASSERT(t->probe_seen);
    CU_ASSERT(th_reload_watch_idle(t->w));
}

static void complete_file(wt *t)
{
    put_file(th_test_build_path("fixtures/reload_a.so"), t->f->so, (size_t)-1);
}

/* On a repeating timer: completes the half-written file once the
 * reloader has met it and retried (its stats), not after a fixed time
 * that a slow loop could overtake. */
static void complete_after_retry(wt *t)
{
    th_reload_stats st;
    th_reload_get_stats(t->f->r, &st);
    if (st.retries <= t->retries0)
        return;
    uv_timer_stop(&t->later);
    complete_file(t);
}

static void send_sighup(wt *t)
{
    (void)t;
    raise(SIGHUP);
}

static void test_watcher(void)
{
    fx f;
    CU_ASSERT_EQUAL_FATAL(fx_open(&f), 0);
    wt t;
    memset(&t, 0, sizeof t);
    t.f = &f;
    uv_loop_init(&t.loop);
    uv_timer_init(&t.loop, &t.timeout);
    uv_timer_init(&t.loop, &t.later);
    t.later.data = &t;
    uv_timer_init(&t.loop, &t.poll);
    t.poll.data = &t;
    uv_fs_event_init(&t.loop, &t.probe);
    t.probe.data = &t;
    CU_ASSERT_EQUAL_FATAL(uv_fs_event_start(&t.probe, wt_probe, f.dir, 0), 0);
    th_reload_watch_opts o = {.mode = TH_RELOAD_WATCH, .debounce_ms = 30,
                              .on_result = wt_result, .ud = &t};
    th_reload_watch *w = NULL;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_reload_watch_start(f.r, &t.loop, &o, &w, &e), 0);
    t.w = w;

    /* A rebuild: one reload, the new code answers. */
    put_file(th_test_build_path("fixtures/reload_b.so"), f.so, (size_t)-1);
    wt_wait(&t, 1);
    CU_ASSERT_EQUAL(t.results, 1);
    CU_ASSERT_EQUAL(t.last.rc, 0);
    CU_ASSERT_EQUAL(t.last.n_changed, 1);
    char out[64];
    CU_ASSERT_EQUAL(call(f.reg, "rl_answer", NULL, out, sizeof out), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(out, "B");

    /* A half-written file, completed once the reloader retried it: not
     * reported as broken; one result, the good one. */
    th_log_set_fd(-1);
    th_reload_stats st;
    th_reload_get_stats(f.r, &st);
    t.retries0 = st.retries;
    put_file(th_test_build_path("fixtures/reload_a.so"), f.so, 9000);
    t.later_fn = complete_after_retry;
    uv_timer_start(&t.later, wt_later, 1, 1);
    wt_wait(&t, 1);
    /* When the loop ran late, the retry's timer and the completed file's
     * event both came before either reload: a second reload then finds
     * nothing changed (and a result not yet reported may give way to the
     * newer one).  Wait until everything is over. */
    uv_timer_stop(&t.later);
    wt_settle(&t);
    th_log_set_fd(2);
    CU_ASSERT(t.results == 2 || t.results == 3);
    CU_ASSERT_EQUAL(t.failed, 0);
    CU_ASSERT_EQUAL(t.changed, 2);
    CU_ASSERT_EQUAL(call(f.reg, "rl_answer", NULL, out, sizeof out), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(out, "A");
    th_reload_get_stats(f.r, &st);
    CU_ASSERT(st.retries > t.retries0);
    int base = t.results;

    /* SIGHUP: a reload (nothing changed). */
    t.later_fn = send_sighup;
    uv_timer_start(&t.later, wt_later, 1, 0);
    wt_wait(&t, 1);
    CU_ASSERT_EQUAL(t.results, base + 1);
    CU_ASSERT_EQUAL(t.last.rc, 0);
    CU_ASSERT_EQUAL(t.last.n_unchanged, 1);

    /* A config edit that fails: reported, nothing changed. */
    th_log_set_fd(-1);
    write_config(&f, "      fail_init: true\n", NULL);
    wt_wait(&t, 1);
    th_log_set_fd(2);
    CU_ASSERT_EQUAL(t.results, base + 2);
    CU_ASSERT_EQUAL(t.last.rc, TH_ELOAD);
    CU_ASSERT(!t.last.incomplete);
    CU_ASSERT_EQUAL(gen_of(&f), 3);

    /* A file next to them that no reload reads ("gate", which the
     * barrier changes): nothing, once every event was read. */
    wt_settle(&t);
    CU_ASSERT_EQUAL(t.results, base + 2);

    th_reload_watch_stop(w);
    uv_close((uv_handle_t *)&t.probe, NULL);
    uv_close((uv_handle_t *)&t.poll, NULL);
    uv_close((uv_handle_t *)&t.timeout, NULL);
    uv_close((uv_handle_t *)&t.later, NULL);
    uv_run(&t.loop, UV_RUN_DEFAULT);
    CU_ASSERT_EQUAL(uv_loop_close(&t.loop), 0);
    fx_close(&f);
}


/* ---- a real host (manager, sessions): the host's side of a reload ------------ */

typedef struct hx {
    char *dir;
    char so[1024], cfg_path[1024];
    th_host *h;
    th_session *s;
    atomic_int changed;
} hx;

static void hx_tools_changed(void *ud)
{
    atomic_fetch_add(&((hx *)ud)->changed, 1);
}

/* More lines under host: for the next hx_config() ("" for none). */
static const char *hx_host_extra = "";

/* toolsets: YAML for the toolsets section ("" for none). */
static void hx_config(hx *x, const char *toolsets)
{
    th_buf b = TH_BUF_INIT;
    th_buf_printf(&b,
                  "host:\n  workers: 2\n  log_level: error\n  state_dir: %s/state\n%s"
                  "plugins:\n  - name: fx\n    path: %s\n%s",
                  x->dir, hx_host_extra, x->so, toolsets);
    th_buf_append(&b, "", 1);
    put_text(x->cfg_path, (const char *)b.data);
    th_buf_destroy(&b);
}

static int hx_open_ops(hx *x, const char *toolsets, const th_front_ops *ops,
                       void *ud);

static int hx_open(hx *x, const char *toolsets)
{
    return hx_open_ops(x, toolsets, NULL, NULL);
}

/* ops NULL: tools_changed counted in x->changed. */
static int hx_open_ops(hx *x, const char *toolsets, const th_front_ops *ops,
                       void *ud)
{
    memset(x, 0, sizeof *x);
    x->dir = th_test_tmpdir();
    snprintf(x->so, sizeof x->so, "%s/fx.so", x->dir);
    snprintf(x->cfg_path, sizeof x->cfg_path, "%s/toolhost.yaml", x->dir);
    put_file(th_test_build_path("fixtures/reload_a.so"), x->so, (size_t)-1);
    hx_config(x, toolsets);
    th_config *cfg = NULL;
    th_error e;
    if (th_config_load(x->cfg_path, &cfg, &e) != 0 || th_host_open(cfg, &x->h, &e) != 0) {
        fprintf(stderr, "host: %s\n", e.msg);
        return -1;
    }
    th_principal who = {.uid = (uint32_t)getuid(), .gid = (uint32_t)getgid(), .trusted = true};
    th_front_ops dops = {.tools_changed = hx_tools_changed};
    x->s = th_session_open(x->h, &who, ops ? ops : &dops, ops ? ud : x);
    return x->s ? 0 : -1;
}

static void hx_close(hx *x)
{
    th_session_close(x->s);
    th_host_close(x->h);
    th_test_rmtree(x->dir);
    free(x->dir);
}

/* "" and -1 when the call did not succeed (the error message in out). */
static int hx_call(hx *x, const char *tool, char *out, size_t size)
{
    static const uint8_t empty_map[] = {0x80};
    th_call_opts o = {.may_block = true};
    th_result_copy r;
    memset(&r, 0, sizeof r);
    int rc = th_call_sync(x->s, tool, empty_map, 1, &o, NULL, NULL, NULL, &r);
    bool ok = rc == 0 && r.kind == TH_RESULT_DONE && r.ok;
    snprintf(out, size, "%.*s", ok ? (int)r.out.len : 0,
             ok && r.out.data ? (const char *)r.out.data : "");
    if (!ok && r.message)
        snprintf(out, size, "%s", r.message);
    th_result_copy_destroy(&r);
    return ok ? 0 : -1;
}

static void test_host_config_swap(void)
{
    hx x;
    CU_ASSERT_EQUAL_FATAL(hx_open(&x, "toolsets:\n  - name: t\n    tools: [rl_answer]\n"), 0);
    th_reloader *r = th_host_reloader(x.h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    char out[256];
    CU_ASSERT_EQUAL(hx_call(&x, "rl_answer", out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "A");
    /* The first generation runs from a private copy already. */
    th_plugin *p = th_registry_plugin(th_host_registry(x.h), "fx");
    CU_ASSERT_PTR_NOT_NULL(strstr(p->load_path, "/run-"));

    /* The toolset changes: new calls follow it; the session is told. */
    hx_config(&x, "toolsets:\n  - name: t\n    tools: [rl_hold]\n");
    th_reload_result res;
    CU_ASSERT_EQUAL(th_reload_run(r, &res), 0);
    CU_ASSERT(res.config_changed);
    CU_ASSERT_EQUAL(res.n_unchanged, 1);
    CU_ASSERT_EQUAL(atomic_load(&x.changed), 1);
    CU_ASSERT_NOT_EQUAL(hx_call(&x, "rl_answer", out, sizeof out), 0);
    CU_ASSERT_EQUAL(th_registry_plugin(th_host_registry(x.h), "fx"), p); /* untouched */
    CU_ASSERT_STRING_EQUAL(th_host_config(x.h)->toolsets[0].tools[0], "rl_hold");

    /* Toolsets added: refused, nothing changes. */
    th_log_set_fd(-1);
    hx_config(&x, "toolsets:\n  - name: t\n    tools: [rl_answer]\n"
                  "  - name: u\n    tools: [rl_answer]\n");
    CU_ASSERT_EQUAL(th_reload_run(r, &res), TH_ECONFIG);
    th_log_set_fd(2);
    CU_ASSERT_PTR_NOT_NULL(strstr(res.err.msg, "restart"));
    CU_ASSERT_STRING_EQUAL(th_host_config(x.h)->toolsets[0].tools[0], "rl_hold");
    CU_ASSERT_EQUAL(atomic_load(&x.changed), 1);
    hx_close(&x);
}

/* Calls through the whole manager while the plugin and the config swap. */
typedef struct hloop {
    hx *x;
    atomic_int stop;
    atomic_long calls, failed;
} hloop;

static void *hx_caller(void *arg)
{
    hloop *u = arg;
    char out[256];
    while (!atomic_load(&u->stop)) {
        atomic_fetch_add(&u->calls, 1);
        if (hx_call(u->x, "rl_answer", out, sizeof out) != 0 ||
            (strcmp(out, "A") != 0 && strcmp(out, "B") != 0)) {
            atomic_fetch_add(&u->failed, 1);
            fprintf(stderr, "failed call: %s\n", out);
        }
    }
    return NULL;
}

static void test_host_swaps_under_calls(void)
{
    hx x;
    CU_ASSERT_EQUAL_FATAL(hx_open(&x, ""), 0);
    th_reloader *r = th_host_reloader(x.h);
    hloop u;
    memset(&u, 0, sizeof u);
    u.x = &x;
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, hx_caller, &u);
    int bad = 0;
    for (int i = 0; i < 40; i++) {
        /* Alternately the plugin file and the config (a toolset timeout). */
        if (i % 2 == 0)
            put_file(th_test_build_path(i % 4 == 0 ? "fixtures/reload_b.so"
                                                   : "fixtures/reload_a.so"),
                     x.so, (size_t)-1);
        else
            hx_config(&x, i % 4 == 1 ? "toolsets:\n  - name: default\n    tools: [\"*\"]\n    timeout: 30s\n"
                                     : "toolsets:\n  - name: default\n    tools: [\"*\"]\n    timeout: 40s\n");
        th_reload_result res;
        if (th_reload_run(r, &res) != 0) {
            bad++;
            fprintf(stderr, "reload %d: %s\n", i, res.err.msg);
        }
    }
    atomic_store(&u.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(atomic_load(&u.failed), 0);
    CU_ASSERT(atomic_load(&u.calls) > 40);
    hx_close(&x);
}

/* ---- readers without a lock (hazard.h): snapshot and lookup under reloads ---- */

/* Two configs whose toolset differs in two places: a reader that saw a
 * whole config sees both of one. */
static const char *const snap_cfg_a =
    "toolsets:\n  - name: default\n    tools: [\"*\"]\n    timeout: 30s\n";
static const char *const snap_cfg_b =
    "toolsets:\n  - name: default\n    tools: [rl_answer, rl_hold]\n"
    "    timeout: 40s\n";

static bool snap_cfg_whole(const th_config *c)
{
    if (c->n_toolsets != 1)
        return false;
    const th_toolset_cfg *t = &c->toolsets[0];
    if (t->timeout_ms == 30000)
        return t->n_tools == 1 && strcmp(t->tools[0], "*") == 0;
    return t->timeout_ms == 40000 && t->n_tools == 2 &&
           strcmp(t->tools[0], "rl_answer") == 0 &&
           strcmp(t->tools[1], "rl_hold") == 0;
}

typedef struct hammer {
    hx *x;
    atomic_int stop;
    atomic_long rounds, bad_cfg, bad_tool, failed;
} hammer;

static void *hammer_thread(void *arg)
{
    hammer *u = arg;
    th_registry *reg = th_host_registry(u->x->h);
    char out[256];
    for (long i = 0; !atomic_load(&u->stop); i++) {
        /* the snapshot: whole, and still whole after a yield (pinned) */
        th_config *c = th_host_config_get(u->x->h);
        if (!snap_cfg_whole(c))
            atomic_fetch_add(&u->bad_cfg, 1);
        /* the lookup: the tool's generation pinned while held */
        const th_tool *t = th_registry_acquire(reg, "rl_answer");
        if (!t || strcmp(t->name, "rl_answer") != 0 ||
            atomic_load(&t->plugin->refs) < 1 || !t->plugin->initialized)
            atomic_fetch_add(&u->bad_tool, 1);
        if (i % 8 == 0)
            sched_yield();
        if (t && (!t->plugin->initialized || strcmp(t->plugin->name, "fx") != 0))
            atomic_fetch_add(&u->bad_tool, 1);
        if (!snap_cfg_whole(c))
            atomic_fetch_add(&u->bad_cfg, 1);
        th_tool_release(t);
        th_config_unref(c);
        /* and a whole call through the manager now and then */
        if (i % 4 == 0 && (hx_call(u->x, "rl_answer", out, sizeof out) != 0 ||
                           (strcmp(out, "A") != 0 && strcmp(out, "B") != 0)))
            atomic_fetch_add(&u->failed, 1);
        atomic_fetch_add(&u->rounds, 1);
    }
    return NULL;
}

/* Four threads read the config snapshot, look the tool up and call it
 * while the main thread reloads the plugin and the config 100 times: every
 * reader sees a whole config and a pinned, initialized generation (ASan
 * and TSan check that nothing read was freed under it), every call
 * succeeds, and in the end every old generation is closed and unloaded
 * (the readers' per-thread records pin nothing). */
static void test_snapshot_hammer(void)
{
    hx x;
    CU_ASSERT_EQUAL_FATAL(hx_open(&x, snap_cfg_a), 0);
    th_reloader *r = th_host_reloader(x.h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    hammer u;
    memset(&u, 0, sizeof u);
    u.x = &x;
    enum { NT = 4 };
    pthread_t th[NT];
    for (int i = 0; i < NT; i++)
        pthread_create(&th[i], NULL, hammer_thread, &u);
    int bad = 0, plugin_swaps = 0;
    for (int i = 0; i < 100; i++) {
        if (i % 2 == 0) {
            put_file(th_test_build_path(i % 4 == 0 ? "fixtures/reload_b.so"
                                                   : "fixtures/reload_a.so"),
                     x.so, (size_t)-1);
            plugin_swaps++;
        } else {
            hx_config(&x, i % 4 == 1 ? snap_cfg_b : snap_cfg_a);
        }
        th_reload_result res;
        if (th_reload_run(r, &res) != 0) {
            bad++;
            fprintf(stderr, "reload %d: %s\n", i, res.err.msg);
        }
        /* let the readers run between two swaps */
        long seen = atomic_load(&u.rounds);
        for (int w = 0; w < 200 && atomic_load(&u.rounds) < seen + 20; w++)
            usleep(1000);
    }
    atomic_store(&u.stop, 1);
    for (int i = 0; i < NT; i++)
        pthread_join(th[i], NULL);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(atomic_load(&u.bad_cfg), 0);
    CU_ASSERT_EQUAL(atomic_load(&u.bad_tool), 0);
    CU_ASSERT_EQUAL(atomic_load(&u.failed), 0);
    CU_ASSERT(atomic_load(&u.rounds) > 40);
    CU_ASSERT(th_reload_quiesce(r, 10000));
    th_reload_stats st;
    th_reload_get_stats(r, &st);
    CU_ASSERT_EQUAL(st.closed, (uint64_t)plugin_swaps);
    CU_ASSERT_EQUAL(st.unloaded + st.still_mapped, (uint64_t)plugin_swaps);
    CU_ASSERT_EQUAL(st.draining, 0);
    hx_close(&x);
}

/* A thread that read the config and looked the tool up, then went idle,
 * holds nothing: the old config is freed by the reload that swaps it (no
 * reference left but the test's own), the old plugin is closed; at the
 * thread's exit its record goes back and the next thread takes it; after
 * the host closes, the same thread's lookup cache does not answer for a
 * new host's registry. */
typedef struct idle_ud {
    hx *x;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int step; /* 1: the thread has read; 2: it may exit */
    int ok;
    th_hz_rec *rec; /* the thread's hazard record */
} idle_ud;

static void *idle_reader(void *arg)
{
    idle_ud *u = arg;
    char out[256];
    int ok = 0;
    for (int i = 0; i < 50; i++) {
        th_config *c = th_host_config_get(u->x->h);
        const th_tool *t = th_registry_acquire(th_host_registry(u->x->h), "rl_answer");
        ok += c && t;
        th_tool_release(t);
        th_config_unref(c);
        ok += hx_call(u->x, "rl_answer", out, sizeof out) == 0;
    }
    pthread_mutex_lock(&u->mu);
    u->ok = ok;
    u->rec = th_hz_tl;
    u->step = 1;
    pthread_cond_broadcast(&u->cv);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 30; /* bounded: the test moves on well before */
    while (u->step < 2)
        if (pthread_cond_timedwait(&u->cv, &u->mu, &dl) != 0)
            break;
    pthread_mutex_unlock(&u->mu);
    return NULL;
}

static void *just_read(void *arg)
{
    hx *x = arg;
    th_config_unref(th_host_config_get(x->h));
    return NULL;
}

static void test_snapshot_idle_thread(void)
{
    hx x;
    CU_ASSERT_EQUAL_FATAL(hx_open(&x, snap_cfg_a), 0);
    th_reloader *r = th_host_reloader(x.h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    idle_ud u = {.x = &x, .mu = PTHREAD_MUTEX_INITIALIZER,
                 .cv = PTHREAD_COND_INITIALIZER};
    size_t rec0, own0, rec1, own1;
    th_hz_count(&rec0, &own0);
    pthread_t th;
    pthread_create(&th, NULL, idle_reader, &u);
    pthread_mutex_lock(&u.mu);
    for (int i = 0; i < 3000 && u.step < 1; i++) {
        pthread_mutex_unlock(&u.mu);
        usleep(10000);
        pthread_mutex_lock(&u.mu);
    }
    CU_ASSERT_EQUAL(u.step, 1);
    CU_ASSERT_EQUAL(u.ok, 100);
    pthread_mutex_unlock(&u.mu);
    th_hz_count(&rec1, &own1);
    CU_ASSERT(own1 >= 2); /* the idle thread's and this one's (and others) */
    CU_ASSERT(rec1 >= own1);

    /* The config swapped while the thread idles: ours is the only
     * reference left on the old one (extra_refs counts beyond the
     * first). */
    th_config *old = th_host_config_get(x.h);
    CU_ASSERT(snap_cfg_whole(old));
    hx_config(&x, snap_cfg_b);
    th_reload_result res;
    CU_ASSERT_EQUAL(th_reload_run(r, &res), 0);
    CU_ASSERT(res.config_changed);
    CU_ASSERT_EQUAL(__atomic_load_n(&old->extra_refs, __ATOMIC_ACQUIRE), 0);
    th_config_unref(old); /* freed here (ASan: nothing reads it after) */

    /* The plugin swapped while it idles: the old generation is closed. */
    put_file(th_test_build_path("fixtures/reload_b.so"), x.so, (size_t)-1);
    CU_ASSERT_EQUAL(th_reload_run(r, &res), 0);
    CU_ASSERT(th_reload_quiesce(r, 5000));
    th_reload_stats st;
    th_reload_get_stats(r, &st);
    CU_ASSERT_EQUAL(st.closed, 1);
    CU_ASSERT_EQUAL(st.draining, 0);

    /* Its exit gives the record back: the next thread takes it. */
    pthread_mutex_lock(&u.mu);
    u.step = 2;
    pthread_cond_broadcast(&u.cv);
    pthread_mutex_unlock(&u.mu);
    pthread_join(th, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(u.rec);
    CU_ASSERT_EQUAL(__atomic_load_n(&u.rec->used, __ATOMIC_ACQUIRE), 0);
    CU_ASSERT_PTR_NULL(__atomic_load_n(&u.rec->slot[TH_HZ_CONFIG], __ATOMIC_ACQUIRE));
    CU_ASSERT_PTR_NULL(__atomic_load_n(&u.rec->slot[TH_HZ_REGISTRY], __ATOMIC_ACQUIRE));
    size_t rec2, own2;
    th_hz_count(&rec2, &own2);
    pthread_create(&th, NULL, just_read, &x);
    pthread_join(th, NULL);
    size_t rec3, own3;
    th_hz_count(&rec3, &own3);
    CU_ASSERT_EQUAL(rec3, rec2); /* reused, not a new one */

    /* This thread looked rl_answer up in x's registry (its cache has it);
     * after x closes, a new host's registry answers with its own tool. */
    const th_tool *t1 = th_registry_acquire(th_host_registry(x.h), "rl_answer");
    CU_ASSERT_PTR_NOT_NULL(t1);
    th_tool_release(t1);
    hx_close(&x);
    hx y;
    CU_ASSERT_EQUAL_FATAL(hx_open(&y, snap_cfg_a), 0);
    const th_tool *t2 = th_registry_acquire(th_host_registry(y.h), "rl_answer");
    CU_ASSERT_PTR_NOT_NULL(t2);
    CU_ASSERT(t2 && th_registry_plugin(th_host_registry(y.h), "fx") == t2->plugin);
    th_tool_release(t2);
    char out[256];
    CU_ASSERT_EQUAL(hx_call(&y, "rl_answer", out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "A");
    hx_close(&y);
}

/* This thread stands for a reader of the config stopped between reading
 * h->cfg and taking its reference (its hazard slot holds the config): a
 * reload that swaps the config must not drop the host's reference (the
 * last one: the config would be freed under the reader) until the slot is
 * cleared.  Without the swap's wait (th_hz_wait in th_host_config_swap)
 * the reload returns at once and the config read below is freed memory. */
typedef struct reload_bg {
    th_reloader *r;
    th_reload_result res;
    int rc;
    atomic_int done;
} reload_bg;

static void *reload_thread(void *arg)
{
    reload_bg *b = arg;
    b->rc = th_reload_run(b->r, &b->res);
    atomic_store(&b->done, 1);
    return NULL;
}

static void test_snapshot_swap_waits(void)
{
    hx x;
    CU_ASSERT_EQUAL_FATAL(hx_open(&x, snap_cfg_a), 0);
    reload_bg b = {.r = th_host_reloader(x.h)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(b.r);
    th_hz_rec *r = th_hz_mine();
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    th_config *c = __atomic_load_n(&x.h->cfg, __ATOMIC_SEQ_CST);
    __atomic_store_n(&r->slot[TH_HZ_CONFIG], c, __ATOMIC_SEQ_CST);
    CU_ASSERT_PTR_EQUAL(__atomic_load_n(&x.h->cfg, __ATOMIC_SEQ_CST), c);
    hx_config(&x, snap_cfg_b);
    unsigned long w0 = th_hz_waited(TH_HZ_CONFIG);
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, reload_thread, &b), 0);
    /* the swap happens (h->cfg is the new config), then the writer finds
     * this thread's slot holding the old one and waits for it (the
     * event: th_hz_waited); a reload that did not wait ends (done) */
    int64_t until = mono_ms() + th_test_ms(10000);
    while ((__atomic_load_n(&x.h->cfg, __ATOMIC_SEQ_CST) == c ||
            th_hz_waited(TH_HZ_CONFIG) == w0) &&
           !atomic_load(&b.done) && mono_ms() < until)
        usleep(1000);
    CU_ASSERT_PTR_NOT_EQUAL(__atomic_load_n(&x.h->cfg, __ATOMIC_SEQ_CST), c);
    CU_ASSERT(th_hz_waited(TH_HZ_CONFIG) > w0);
    CU_ASSERT_EQUAL(atomic_load(&b.done), 0);
    CU_ASSERT(snap_cfg_whole(c)); /* still there (ASan: not freed) */
    CU_ASSERT_EQUAL(c->toolsets[0].timeout_ms, 30000);
    th_hz_clear(r, TH_HZ_CONFIG);
    until = mono_ms() + th_test_ms(10000);
    while (!atomic_load(&b.done) && mono_ms() < until)
        usleep(1000);
    CU_ASSERT_EQUAL_FATAL(atomic_load(&b.done), 1);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(b.rc, 0);
    CU_ASSERT(b.res.config_changed);
    th_config *n = th_host_config_get(x.h);
    CU_ASSERT_EQUAL(n->toolsets[0].timeout_ms, 40000);
    th_config_unref(n);
    hx_close(&x);
}

/* ---- a call keeps the config it started under ----------------------------------- */

typedef struct snap_call {
    atomic_int done;
    int kind, error;
    bool ok;
    char out[64];
} snap_call;

typedef struct snap_fx {
    atomic_int n_asked;
    _Atomic uint64_t asked[4];
} snap_fx;

static int snap_ask(void *ud, uint64_t call_id, const char *tool,
                    const uint8_t *args, size_t len, const char *reason)
{
    (void)tool, (void)args, (void)len, (void)reason;
    snap_fx *f = ud;
    int i = atomic_load(&f->n_asked);
    if (i < 4)
        atomic_store(&f->asked[i], call_id);
    atomic_fetch_add(&f->n_asked, 1);
    return 0; /* answered later with th_permission_answer */
}

static void snap_event(const th_event *ev, void *ud)
{
    snap_call *c = ud;
    if (ev->kind == TH_EV_PROGRESS || ev->result->kind == TH_RESULT_RUNNING)
        return;
    c->kind = (int)ev->result->kind;
    c->error = ev->result->error;
    c->ok = ev->result->ok;
    snprintf(c->out, sizeof c->out, "%.*s", (int)ev->result->out_len,
             ev->result->out ? (const char *)ev->result->out : "");
    atomic_store(&c->done, 1);
}

/* Waits (ms at most, scaled: th_test_ms) until *v reaches want. */
static bool snap_wait(atomic_int *v, int want, int ms)
{
    int64_t until = mono_ms() + th_test_ms((unsigned)ms);
    while (atomic_load(v) < want && mono_ms() < until)
        usleep(1000);
    return atomic_load(v) >= want;
}

/* timeout NULL: the toolset has none (the host's default_timeout). */
static const char *snap_toolsets(const char *timeout)
{
    static char text[512];
    snprintf(text, sizeof text,
             "toolsets:\n  - name: t\n    tools: [\"*\"]\n%s%s%s"
             "    permissions:\n      rules:\n"
             "        - match: rl_hold\n          action: ask\n",
             timeout ? "    timeout: " : "", timeout ? timeout : "",
             timeout ? "\n" : "");
    return text;
}

/* A timeout changes by reload while a call waits for its permission
 * answer: the call keeps the timeout of the config it started under (60 s:
 * never reached here, so it finishes however slow the machine), a call
 * started after the reload gets the new one (100 ms: it times out).
 * by_toolset: the toolset's timeout changes, else the host's
 * default_timeout (the toolset has none).  Before the snapshot the host's
 * part was read from the new config when the call was submitted: the
 * first call, older than 100 ms by then, timed out at once.  No sleep
 * shows that the first call did not time out: a call that timed out never
 * ends DONE, and it ends only once the test opens its gate. */
static void snap_run(bool by_toolset)
{
    hx x;
    snap_fx f;
    memset(&f, 0, sizeof f);
    th_front_ops ops = {.ask_permission = snap_ask};
    hx_host_extra = by_toolset ? "" : "  default_timeout: 60s\n";
    CU_ASSERT_EQUAL_FATAL(hx_open_ops(&x, snap_toolsets(by_toolset ? "60s" : NULL),
                                      &ops, &f), 0);
    th_reloader *r = th_host_reloader(x.h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    char gate[1100];
    snprintf(gate, sizeof gate, "%s/gate", x.dir);
    th_buf a = TH_BUF_INIT;
    pack_args(&a, gate);

    snap_call c1, c2;
    memset(&c1, 0, sizeof c1);
    memset(&c2, 0, sizeof c2);
    uint64_t id1 = 0, id2 = 0;
    int64_t t1 = mono_ms(); /* before the first call starts */
    CU_ASSERT_EQUAL_FATAL(th_call_start(x.s, "rl_hold", a.data, a.len, NULL,
                                        snap_event, &c1, &id1), 0);
    CU_ASSERT_FATAL(snap_wait(&f.n_asked, 1, 5000));
    CU_ASSERT_EQUAL(atomic_load(&f.asked[0]), id1);

    /* The reload: timeout 100 ms for new calls. */
    hx_host_extra = by_toolset ? "" : "  default_timeout: 100ms\n";
    hx_config(&x, snap_toolsets(by_toolset ? "100ms" : NULL));
    hx_host_extra = "";
    th_reload_result res;
    CU_ASSERT_EQUAL(th_reload_run(r, &res), 0);
    CU_ASSERT(res.config_changed);
    /* The clock passes the new timeout counted from the first call's
     * start (a wait for the clock, not for another thread): on the new
     * timeout it would be over by the time it is submitted. */
    while (mono_ms() < t1 + 150)
        usleep(1000);
    CU_ASSERT_EQUAL(th_permission_answer(x.s, id1, true), 0);

    CU_ASSERT_EQUAL_FATAL(th_call_start(x.s, "rl_hold", a.data, a.len, NULL,
                                        snap_event, &c2, &id2), 0);
    CU_ASSERT_FATAL(snap_wait(&f.n_asked, 2, 5000));
    CU_ASSERT_EQUAL(th_permission_answer(x.s, id2, true), 0);

    /* The new call times out under the new config; the old one runs on. */
    CU_ASSERT(snap_wait(&c2.done, 1, 5000));
    CU_ASSERT_EQUAL(c2.kind, TH_RESULT_ERROR);
    CU_ASSERT_EQUAL(c2.error, TH_ETIMEOUT);
    /* the first call still waits at its gate (it cannot end before the
     * gate opens but by a timeout) */
    CU_ASSERT_EQUAL(atomic_load(&c1.done), 0);
    if (atomic_load(&c1.done))
        fprintf(stderr, "\nfirst call ended early: kind %d error %d\n", c1.kind,
                c1.error);
    put_text(gate, "open\n");
    CU_ASSERT(snap_wait(&c1.done, 1, 5000));
    CU_ASSERT_EQUAL(c1.kind, TH_RESULT_DONE);
    CU_ASSERT(c1.ok);
    CU_ASSERT_STRING_EQUAL(c1.out, "A");
    th_buf_destroy(&a);
    hx_close(&x);
}

static void test_call_keeps_toolset_timeout(void)
{
    snap_run(true);
}

static void test_call_keeps_host_timeout(void)
{
    snap_run(false);
}

/* ---- the checked file is the copied file ------------------------------------------ */

/* Replaces `link` by a symlink to `target` atomically (link, rename). */
static int flip_link(const char *target, const char *link, unsigned tag)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%u.tmp", link, tag);
    unlink(tmp);
    if (symlink(target, tmp) != 0)
        return -1;
    return rename(tmp, link);
}

/* fx with its plugin path turned into a link to good/a.so (version A, a
 * safe folder), and evil/b.so (version B) in a world-writable folder. */
static void links_setup(fx *f, char *good, char *evil, size_t cap)
{
    char gd[4150], ed[4150];
    snprintf(gd, sizeof gd, "%s/good", f->dir);
    snprintf(ed, sizeof ed, "%s/evil", f->dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(gd, 0755), 0);
    CU_ASSERT_EQUAL_FATAL(mkdir(ed, 0755), 0);
    snprintf(good, cap, "%s/a.so", gd);
    snprintf(evil, cap, "%s/b.so", ed);
    put_file(th_test_build_path("fixtures/reload_a.so"), good, (size_t)-1);
    put_file(th_test_build_path("fixtures/reload_b.so"), evil, (size_t)-1);
    chmod(ed, 0777); /* anyone could put their code here */
    CU_ASSERT_EQUAL_FATAL(flip_link(good, f->so, 0), 0);
}

static char hook_target[4200];
static char hook_link[4200];
static int hook_runs;

static void swap_after_check(const char *path)
{
    if (strcmp(path, hook_link) != 0)
        return;
    hook_runs++;
    CU_ASSERT_EQUAL(flip_link(hook_target, hook_link, 1), 0);
}

/* Between the check and the copy, the link is pointed at other code: the
 * copy is still made from the file that was checked. */
static void test_copy_is_checked_file(void)
{
    fx f;
    CU_ASSERT_EQUAL_FATAL(fx_open(&f), 0);
    char good[4200], evil[4200];
    links_setup(&f, good, evil, sizeof good);
    /* Checked: a safe B.  Swapped in after the check: A from the open
     * folder (refused if it were checked). */
    char safe_b[4200];
    snprintf(safe_b, sizeof safe_b, "%s/good/b.so", f.dir);
    put_file(th_test_build_path("fixtures/reload_b.so"), safe_b, (size_t)-1);
    char evil_a[4200];
    snprintf(evil_a, sizeof evil_a, "%s/evil/a.so", f.dir);
    put_file(th_test_build_path("fixtures/reload_a.so"), evil_a, (size_t)-1);
    CU_ASSERT_EQUAL_FATAL(flip_link(safe_b, f.so, 0), 0);
    snprintf(hook_link, sizeof hook_link, "%s", f.so);
    snprintf(hook_target, sizeof hook_target, "%s", evil_a);
    hook_runs = 0;
    th_reload_test_after_check = swap_after_check;
    th_reload_result res;
    int rc = th_reload_now(f.r, &res);
    th_reload_test_after_check = NULL;
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(hook_runs, 1);
    char out[64];
    CU_ASSERT_EQUAL(call(f.reg, "rl_answer", NULL, out, sizeof out), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(out, "B");
    CU_ASSERT_EQUAL(gen_of(&f), 2);
    /* Now the link names the open folder: refused, the running B stays. */
    rc = th_reload_now(f.r, &res);
    CU_ASSERT_EQUAL(rc, TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(res.err.msg, "/evil is writable by others"));
    CU_ASSERT_EQUAL(call(f.reg, "rl_answer", NULL, out, sizeof out), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(out, "B");
    fx_close(&f);
}

typedef struct flipper {
    const char *link, *a, *b;
    atomic_int stop;
    atomic_int started;
    long flips;
} flipper;

static void *flip_thread(void *arg)
{
    flipper *fl = arg;
    int64_t end = (int64_t)time(NULL) + 30; /* bounded even if not told */
    for (unsigned i = 0; !atomic_load(&fl->stop) && time(NULL) < end; i++) {
        if (flip_link(i % 2 ? fl->b : fl->a, fl->link, 2) == 0)
            fl->flips++;
        atomic_store(&fl->started, 1);
    }
    return NULL;
}

/* While the link flips between a safe plugin and one in a world-writable
 * folder, many reloads never load the latter. */
static void test_link_flip_race(void)
{
    fx f;
    CU_ASSERT_EQUAL_FATAL(fx_open(&f), 0);
    char good[4200], evil[4200];
    links_setup(&f, good, evil, sizeof good);
    flipper fl = {.link = f.so, .a = good, .b = evil};
    atomic_init(&fl.stop, 0);
    atomic_init(&fl.started, 0);
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, flip_thread, &fl), 0);
    int bad = 0, refused = 0, loads = 0, rounds = 300;
    int64_t end = (int64_t)time(NULL) + 20;
    /* Reloads are quick: start once the thread flips, and go on past the
     * 300 until some reloads met the other link (20 s at most). */
    while (atomic_load(&fl.started) == 0 && time(NULL) < end)
        sched_yield();
    int i;
    th_log_set_fd(-1); /* the refusals are expected */
    for (i = 0; (i < rounds || refused < 20) && time(NULL) < end; i++) {
        th_reload_result res;
        uint64_t g0 = gen_of(&f);
        int rc = th_reload_now(f.r, &res);
        if (rc == TH_ELOAD)
            refused++;
        if (gen_of(&f) != g0)
            loads++;
        char out[64];
        if (call(f.reg, "rl_answer", NULL, out, sizeof out) == TOOLHOST_OK &&
            strcmp(out, "B") == 0)
            bad++;
    }
    th_log_set_fd(2);
    atomic_store(&fl.stop, 1);
    pthread_join(th, NULL);
    fprintf(stderr, "\n  link flip race: %d reloads, %ld flips, %d refused, "
            "%d new generations, %d rounds answered by the other plugin\n",
            i, fl.flips, refused, loads, bad);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(!marker_has(&f, "init B"));
    CU_ASSERT(refused > 0); /* the race was run */
    fx_close(&f);
}

/* ---- TOOLHOST_PLUGIN_EXCLUSIVE_RELOAD --------------------------------------------- */

typedef struct xr {
    fx *f;
    th_reload_result res;
    int rc;
    atomic_int done;
} xr;

static void *xr_run(void *arg)
{
    xr *x = arg;
    x->rc = th_reload_now(x->f->r, &x->res);
    atomic_store(&x->done, 1);
    return NULL;
}

static long marker_pos(fx *f, const char *line)
{
    char *m = th_test_read_file(f->marker, NULL);
    const char *p = m ? strstr(m, line) : NULL;
    long pos = p ? (long)(p - m) : -1;
    free(m);
    return pos;
}

/* init of the new generation is observed after fini of the old one; the
 * call in flight finishes on the old generation meanwhile. */
static void test_exclusive_reload(void)
{
    fx f;
    fx_so_first = "fixtures/reload_xa.so";
    int orc = fx_open(&f);
    fx_so_first = "fixtures/reload_a.so";
    CU_ASSERT_EQUAL_FATAL(orc, 0);
    held h = {&f, "rl_hold", "", -1, NULL};
    h.t = th_registry_acquire(f.reg, "rl_hold");
    CU_ASSERT_PTR_NOT_NULL_FATAL(h.t);
    pthread_t th, rth;
    pthread_create(&th, NULL, run_held, &h);
    put_file(th_test_build_path("fixtures/reload_xb.so"), f.so, (size_t)-1);
    xr x = {.f = &f};
    pthread_create(&rth, NULL, xr_run, &x);
    /* the reload takes A out (counted draining, then it waits for A's
     * last call: this thread's reference, held until the gate opens) */
    th_reload_stats st;
    int64_t until = mono_ms() + th_test_ms(10000);
    for (;;) {
        th_reload_get_stats(f.r, &st);
        if (st.draining || atomic_load(&x.done) || mono_ms() >= until)
            break;
        usleep(1000);
    }
    CU_ASSERT_EQUAL(st.draining, 1);
    /* it waits for the old generation: no init of B yet */
    CU_ASSERT_EQUAL(atomic_load(&x.done), 0);
    CU_ASSERT(!marker_has(&f, "init B"));
    CU_ASSERT(!marker_has(&f, "fini A"));
    put_text(f.gate, "go");
    pthread_join(th, NULL);
    pthread_join(rth, NULL);
    CU_ASSERT_EQUAL(h.st, TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(h.out, "A");
    CU_ASSERT_EQUAL(x.rc, 0);
    long fini_a = marker_pos(&f, "fini A"), init_b = marker_pos(&f, "init B");
    CU_ASSERT(fini_a >= 0);
    CU_ASSERT(init_b > fini_a);
    char out[64];
    CU_ASSERT_EQUAL(call(f.reg, "rl_answer", NULL, out, sizeof out), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(out, "B");
    CU_ASSERT_EQUAL(gen_of(&f), 2);
    fx_close(&f);
}

/* Old calls that do not end within reload_drain_timeout: the reload fails
 * with a clear message and nothing changed (the old generation serves). */
static void test_exclusive_reload_timeout(void)
{
    fx f;
    fx_so_first = "fixtures/reload_xa.so";
    fx_host_extra = "  reload_drain_timeout: 200ms\n";
    int orc = fx_open(&f);
    fx_so_first = "fixtures/reload_a.so";
    fx_host_extra = "";
    CU_ASSERT_EQUAL_FATAL(orc, 0);
    held h = {&f, "rl_hold", "", -1, NULL};
    h.t = th_registry_acquire(f.reg, "rl_hold");
    CU_ASSERT_PTR_NOT_NULL_FATAL(h.t);
    pthread_t th;
    pthread_create(&th, NULL, run_held, &h);
    put_file(th_test_build_path("fixtures/reload_xb.so"), f.so, (size_t)-1);
    th_log_set_fd(-1);
    th_reload_result res;
    int rc = th_reload_now(f.r, &res);
    th_log_set_fd(2);
    CU_ASSERT_EQUAL(rc, TH_ETIMEOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(res.err.msg, "exclusive_reload"));
    CU_ASSERT_PTR_NOT_NULL(strstr(res.err.msg, "nothing changed"));
    CU_ASSERT(!marker_has(&f, "init B"));
    CU_ASSERT(!marker_has(&f, "fini A"));
    assert_unchanged(&f, 1, "A");
    put_text(f.gate, "go");
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(h.st, TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(h.out, "A");
    /* the old generation was put back whole: a later reload works */
    CU_ASSERT_EQUAL(th_reload_now(f.r, &res), 0);
    char out[64];
    CU_ASSERT_EQUAL(call(f.reg, "rl_answer", NULL, out, sizeof out), TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(out, "B");
    CU_ASSERT(marker_pos(&f, "init B") > marker_pos(&f, "fini A"));
    fx_close(&f);
}

void th_suite_reload(void)
{
    CU_pSuite s = CU_add_suite("reload", NULL, NULL);
    CU_add_test(s, "copydir", test_copydir);
    CU_add_test(s, "copydir_default_folder", test_copydir_default_folder);
    CU_add_test(s, "copydir_checked_once", test_copydir_checked_once);
    CU_add_test(s, "copydir_sweep_deferred", test_copydir_sweep_deferred);
    CU_add_test(s, "elf_incomplete", test_elf_incomplete);
    CU_add_test(s, "still_loaded", test_still_loaded);
    CU_add_test(s, "swap_and_unchanged", test_swap_and_unchanged);
    CU_add_test(s, "hundred_reloads_under_load", test_hundred_reloads_under_load);
    CU_add_test(s, "call_in_flight", test_call_in_flight);
    CU_add_test(s, "exclusive_reload", test_exclusive_reload);
    CU_add_test(s, "twenty_reloads_threads_joined", test_twenty_reloads_threads_joined);
    CU_add_test(s, "exclusive_reload_timeout", test_exclusive_reload_timeout);
    CU_add_test(s, "task_in_flight", test_task_in_flight);
    CU_add_test(s, "failures_change_nothing", test_failures_change_nothing);
    CU_add_test(s, "add_and_remove_in_flight", test_add_and_remove_in_flight);
    CU_add_test(s, "requests_fold", test_requests_fold);
    CU_add_test(s, "watch_paths", test_watch_paths);
    CU_add_test(s, "watcher", test_watcher);
    CU_add_test(s, "host_config_swap", test_host_config_swap);
    CU_add_test(s, "host_swaps_under_calls", test_host_swaps_under_calls);
    CU_add_test(s, "snapshot_hammer", test_snapshot_hammer);
    CU_add_test(s, "snapshot_idle_thread", test_snapshot_idle_thread);
    CU_add_test(s, "snapshot_swap_waits", test_snapshot_swap_waits);
    CU_add_test(s, "call_keeps_toolset_timeout", test_call_keeps_toolset_timeout);
    CU_add_test(s, "call_keeps_host_timeout", test_call_keeps_host_timeout);
    CU_add_test(s, "copy_is_checked_file", test_copy_is_checked_file);
    CU_add_test(s, "link_flip_race", test_link_flip_race);
}
