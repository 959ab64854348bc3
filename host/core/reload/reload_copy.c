/* reload_copy.c - private plugin copies: the host's 0700 folder, unique
 * copies written atomically, file identity, half-written ELF detection, and
 * the after-dlclose residency check. */
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include "th/log.h"
#include "th/tool.h"
#include "reloader.h"

struct th_copydir {
    char *path;        /* the folder we created (removed at close) */
    atomic_ulong seq;  /* makes every copy name unique */
    /* FICLONE refused for sources on this device (copy_bytes) */
    atomic_bool no_clone_set;
    _Atomic uint64_t no_clone_dev;
    /* copy_file_range() refused for sources on this device: sendfile() */
    atomic_bool no_cfr_set;
    _Atomic uint64_t no_cfr_dev;
    atomic_ulong n_cloned, n_copied; /* copies made each way */
    /* the folder's path passed the loader's checks when it was made
     * (th_copydir_checked) */
    bool checked;
    /* the sweep of stale folders, when deferred (th_copydir_sweep) */
    bool defer_sweep;
    char *sweep_parent;
    bool sweep_state;
};

/* ---- file identity ------------------------------------------------------------ */

static void id_from_stat(const struct stat *st, th_file_id *id)
{
    id->dev = (uint64_t)st->st_dev;
    id->ino = (uint64_t)st->st_ino;
    id->size = (uint64_t)st->st_size;
    id->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
    id->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
}

bool th_file_id_equal(const th_file_id *a, const th_file_id *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

int th_file_id_of(const char *path, th_file_id *out, th_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return th_error_set(err, TH_EIO, "%s: cannot open: %s", path, strerror(errno));
    id_from_stat(&st, out);
    return 0;
}

/* ---- the folder ------------------------------------------------------------------ */

static int rm_tree_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    char p[PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p)
            (void)unlink(p); /* our folders hold plain files only */
    }
    closedir(d);
    return rmdir(dir);
}

/* ---- the owner marker: which host a folder belongs to -------------------------- */

#define MARKER ".toolhost-owner"
#define MARKER_MAGIC "toolhost private plugin copies v1"

/* The start time of process `pid` (field 22 of /proc/PID/stat, clock ticks
 * since boot), or 0 when unknown. */
static unsigned long long proc_start(long pid)
{
    char p[64], buf[1024];
    snprintf(p, sizeof p, "/proc/%ld/stat", pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *q = strrchr(buf, ')'); /* the name may hold spaces */
    if (!q)
        return 0;
    unsigned long long v = 0;
    /* after ')': state is field 3; starttime is field 22 */
    int field = 2;
    for (q++; *q && field < 22; q++)
        if (*q == ' ')
            field++;
    if (field == 22)
        v = strtoull(q, NULL, 10);
    return v;
}

/* The pid namespace of this process ("pid:[4026531836]"): a pid means
 * something only inside its namespace (a container sharing /tmp). */
static void pid_ns(char *out, size_t n)
{
    ssize_t r = readlink("/proc/self/ns/pid", out, n - 1);
    out[r > 0 ? r : 0] = '\0';
    for (char *p = out; *p; p++)
        if (*p == ' ' || *p == '\n')
            *p = '_';
}

static void boot_id(char *out, size_t n)
{
    out[0] = '\0';
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t r = read(fd, out, n - 1);
    close(fd);
    out[r > 0 ? r : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

/* Writes DIR/.toolhost-owner: who made the folder (pid, its start time,
 * the boot), so that a later host can prove the folder is a copy folder
 * whose owner is gone.  Best effort: without it the folder is never swept. */
static void marker_write(const char *dir)
{
    char p[PATH_MAX], text[512], boot[64], ns[128];
    if (snprintf(p, sizeof p, "%s/" MARKER, dir) >= (int)sizeof p)
        return;
    boot_id(boot, sizeof boot);
    pid_ns(ns, sizeof ns);
    int n = snprintf(text, sizeof text,
                     MARKER_MAGIC "\npid %ld\nstart %llu\nboot %s\npidns %s\n",
                     (long)getpid(), proc_start((long)getpid()), boot, ns);
    if (n < 0 || (size_t)n >= sizeof text)
        return;
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return;
    if (write(fd, text, (size_t)n) != n)
        (void)unlink(p);
    close(fd);
}

/* Whether `path` is a copy folder of a host that is gone: a real folder
 * (not a link) of our uid, mode 0700, with a marker file of ours whose
 * owner process no longer runs (no such pid, the pid reused by a process
 * that started at another time, or the machine rebooted since). */
static bool stale_by_marker(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 07777) != 0700)
        return false;
    char p[PATH_MAX], buf[256];
    if (snprintf(p, sizeof p, "%s/" MARKER, path) >= (int)sizeof p)
        return false;
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return false;
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid())
        n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    long pid = 0;
    unsigned long long start = 0;
    char boot[64] = "", now_boot[64], ns[128] = "", now_ns[128];
    if (sscanf(buf, MARKER_MAGIC "\npid %ld\nstart %llu\nboot %63s\npidns %127s",
               &pid, &start, boot, ns) < 2 ||
        pid <= 0)
        return false;
    if (pid == (long)getpid())
        return false;
    boot_id(now_boot, sizeof now_boot);
    if (boot[0] && now_boot[0] && strcmp(boot, now_boot) != 0)
        return true; /* made before the last boot */
    pid_ns(now_ns, sizeof now_ns);
    if (!ns[0] || !now_ns[0] || strcmp(ns, now_ns) != 0)
        return false; /* its pid is not ours to look up: keep */
    if (kill((pid_t)pid, 0) != 0)
        return errno == ESRCH;
    /* alive: the owner only if it started when the marker says */
    unsigned long long now = proc_start(pid);
    return start && now && now != start;
}

/* Removes copy folders of hosts that are gone (a crashed host) in `parent`:
 * run-PID-* folders of the state_dir whose pid is gone, and toolhost-* /
 * run-* folders that prove it with their marker (stale_by_marker). */
static void sweep_stale(const char *parent, bool state_dir)
{
    DIR *d = opendir(parent);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid;
        char rest[64];
        bool run = sscanf(e->d_name, "run-%ld-%63s", &pid, rest) == 2 && pid > 0;
        if (!run && strncmp(e->d_name, "toolhost-", 9) != 0)
            continue;
        char p[PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s", parent, e->d_name) >= (int)sizeof p)
            continue;
        if (!stale_by_marker(p)) {
            /* Older hosts wrote no marker: in the state_dir, a run-PID
             * folder whose pid is gone is one of theirs. */
            if (!state_dir || !run || pid == (long)getpid())
                continue;
            if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
                continue;
            char m[PATH_MAX];
            struct stat st;
            if (snprintf(m, sizeof m, "%s/" MARKER, p) < (int)sizeof m &&
                lstat(m, &st) == 0)
                continue; /* a marker that does not prove it: keep */
        }
        if (rm_tree_files(p) == 0)
            th_log_info("reload: removed the copies of a host that is gone: %s", p);
    }
    closedir(d);
}

/* ---- where copies go without host.state_dir or $TMPDIR ------------------------- */

#define SHM "/dev/shm"
/* Free room /dev/shm must have to be chosen: a container's 64 MiB /dev/shm
 * is left to shared memory. */
#define SHM_MIN_FREE ((uint64_t)1 << 30)

/* Whether copies should go to /dev/shm rather than /tmp: /tmp is not in
 * memory (tmpfs) while /dev/shm is, without noexec, with 1 GiB free.
 * Creating a file on a disk file system is most of what a copy costs: on
 * an ext4 without a journal that just deleted files (the copies of the
 * last start) the kernel walks the inode table for a free inode, ~0.4 ms a
 * file, 40 ms for 100 plugins (bench/README.md, "startup"); in memory a
 * file costs a few microseconds and there is no disk to spare anyway (the
 * copies are removed at close, never read after a restart). */
static bool copies_in_memory(void)
{
    struct statfs tf, sf;
    struct statvfs sv;
    if (statfs("/tmp", &tf) == 0 && tf.f_type == TMPFS_MAGIC)
        return false; /* /tmp is memory already */
    if (statfs(SHM, &sf) != 0 || sf.f_type != TMPFS_MAGIC ||
        statvfs(SHM, &sv) != 0 || (sv.f_flag & (ST_NOEXEC | ST_RDONLY)))
        return false;
    return (uint64_t)sv.f_bavail * sv.f_frsize >= SHM_MIN_FREE;
}

/* Sweeps `parent` now, or notes it for th_copydir_sweep(). */
static void sweep_or_defer(th_copydir *d, const char *parent, bool state_dir)
{
    if (!d->defer_sweep) {
        sweep_stale(parent, state_dir);
        return;
    }
    free(d->sweep_parent);
    d->sweep_parent = strdup(parent); /* out of memory: no sweep, as with no marker */
    d->sweep_state = state_dir;
}

void th_copydir_sweep(th_copydir *d)
{
    if (!d || !d->sweep_parent)
        return;
    sweep_stale(d->sweep_parent, d->sweep_state);
    free(d->sweep_parent);
    d->sweep_parent = NULL;
}

int th_copydir_open(const char *state_dir, th_copydir **out, th_error *err)
{
    return th_copydir_open_ex(state_dir, false, out, err);
}

int th_copydir_open_ex(const char *state_dir, bool defer_sweep,
                       th_copydir **out, th_error *err)
{
    *out = NULL;
    th_copydir *d = calloc(1, sizeof *d);
    if (!d)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    d->defer_sweep = defer_sweep;
    char tmpl[PATH_MAX];
    if (state_dir && state_dir[0]) {
        if (mkdir(state_dir, 0700) != 0 && errno != EEXIST) {
            free(d->sweep_parent);
        free(d);
            return th_error_set(err, TH_EIO,
                                "host.state_dir %s: cannot create it: %s",
                                state_dir, strerror(errno));
        }
        struct stat st;
        if (stat(state_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            free(d->sweep_parent);
        free(d);
            return th_error_set(err, TH_EIO, "host.state_dir %s: not a folder",
                                state_dir);
        }
        if (st.st_uid != geteuid() || (st.st_mode & 022)) {
            free(d->sweep_parent);
        free(d);
            return th_error_set(err, TH_EIO,
                                "host.state_dir %s: refused: it must belong to "
                                "this user (uid %lu) and be writable by no "
                                "one else (mode %04o); fix it with 'chmod 700 %s'",
                                state_dir, (unsigned long)geteuid(),
                                (unsigned)(st.st_mode & 07777), state_dir);
        }
        sweep_or_defer(d, state_dir, true);
        if (snprintf(tmpl, sizeof tmpl, "%s/run-%ld-XXXXXX", state_dir,
                     (long)getpid()) >= (int)sizeof tmpl) {
            free(d->sweep_parent);
        free(d);
            return th_error_set(err, TH_EIO, "host.state_dir %s: path too long",
                                state_dir);
        }
    } else {
        const char *t = getenv("TMPDIR");
        if (!t || !t[0]) {
            t = "/tmp";
            /* Without a choice of the user's: /dev/shm when it is memory
             * and /tmp is not (copies_in_memory).  Its stale folders are
             * swept as /tmp's are. */
            if (copies_in_memory()) {
                if (snprintf(tmpl, sizeof tmpl, "%s/toolhost-XXXXXX", SHM) <
                        (int)sizeof tmpl &&
                    (sweep_or_defer(d, SHM, false), mkdtemp(tmpl)))
                    goto made;
                th_log_debug("reload: cannot create a folder in " SHM
                             " (%s); copies go to /tmp", strerror(errno));
            }
        }
        if (snprintf(tmpl, sizeof tmpl, "%s/toolhost-XXXXXX", t) >= (int)sizeof tmpl) {
            free(d->sweep_parent);
        free(d);
            return th_error_set(err, TH_EIO, "TMPDIR %s: path too long", t);
        }
        sweep_or_defer(d, t, false);
    }
    if (!mkdtemp(tmpl)) { /* mode 0700 */
        free(d->sweep_parent);
        free(d);
        return th_error_set(err, TH_EIO,
                            "cannot create the folder for private plugin "
                            "copies %s: %s", tmpl, strerror(errno));
    }
made:;
    char real[PATH_MAX];
    const char *use = realpath(tmpl, real) ? real : tmpl;
    if (!(d->path = strdup(use))) {
        rmdir(tmpl);
        free(d->sweep_parent);
        free(d);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    marker_write(d->path);
    /* Every folder from / to ours belongs to root or to us and no one else
     * may write it (or it is sticky): walked once here, through the marker
     * (a file of ours, 0600), so the loader need not walk it again for
     * every copy.  Only root or we can change that later. */
    char m[PATH_MAX];
    int mfd = -1;
    if (snprintf(m, sizeof m, "%s/" MARKER, d->path) < (int)sizeof m &&
        th_plugin_file_open(m, NULL, true, &mfd, NULL) == 0) {
        d->checked = true;
        close(mfd);
    }
    atomic_init(&d->seq, 0);
    atomic_init(&d->no_clone_set, false);
    atomic_init(&d->no_clone_dev, 0);
    atomic_init(&d->no_cfr_set, false);
    atomic_init(&d->no_cfr_dev, 0);
    atomic_init(&d->n_cloned, 0);
    atomic_init(&d->n_copied, 0);
    *out = d;
    return 0;
}

void th_copydir_close(th_copydir *d)
{
    if (!d)
        return;
    if (rm_tree_files(d->path) != 0)
        th_log_warn("reload: cannot remove %s: %s", d->path, strerror(errno));
    free(d->path);
    free(d->sweep_parent);
    free(d);
}

const char *th_copydir_path(const th_copydir *d)
{
    return d->path;
}

/* ---- copies ---------------------------------------------------------------------------- */

/* How a copy is made, cheapest first:
 *  1. FICLONE: the copy shares the source's blocks, copy-on-write (btrfs,
 *     xfs with reflink, bcachefs): no bytes move, and a later write to
 *     either file does not change the other.  Tried once per source file
 *     system; a file system that says no (ext4, tmpfs: EOPNOTSUPP, EINVAL;
 *     another file system: EXDEV) is not asked again.
 *  2. copy_file_range() (same file system) or sendfile() (across): the
 *     kernel copies, no round trip through a user buffer.
 *  3. pread()/write(), where the kernel has neither.
 * The copy is created under its final name, mode 0500, O_EXCL, in the
 * host's own 0700 folder: no one else can open it, and the reloader
 * dlopen()s it only after it is complete, so there is no temporary name to
 * rename.  It is not fsync()ed: it lives as long as the host process, and
 * after a crash the folder is swept, never reused, so writing it to disk
 * buys nothing (and cost ~0.25 ms a plugin, most of the copy, under load). */

#ifndef FICLONE
#define FICLONE _IOW(0x94, 9, int)
#endif

static int write_all(int fd, const char *buf, size_t n)
{
    while (n) {
        ssize_t w = write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The source file system refuses FICLONE: no need to ask again. */
static bool clone_refused(th_copydir *d, uint64_t dev)
{
    return atomic_load(&d->no_clone_set) &&
           atomic_load(&d->no_clone_dev) == dev;
}

static void clone_refused_note(th_copydir *d, uint64_t dev)
{
    atomic_store(&d->no_clone_dev, dev);
    atomic_store(&d->no_clone_set, true);
}

/* Which side of a copy failed (copy_bytes), for the message. */
typedef enum copy_side { SIDE_WRITE, SIDE_READ, SIDE_EITHER } copy_side;

/* The side a failed copy_file_range()/sendfile() names: the kernel moved
 * bytes both ways, so only errors that belong to the destination (a full
 * file system, a quota, a file size limit, a read-only mount) say
 * "write"; EIO and the like could be either. */
static copy_side kernel_copy_side(int e)
{
    switch (e) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
    case EROFS:
        return SIDE_WRITE;
    default:
        return SIDE_EITHER;
    }
}

/* Copies `size` bytes of `in` (from offset 0, the fd's offset untouched)
 * to `out`; *total: bytes written.  0 or -1 (errno; *side says which
 * side failed). */
static int copy_bytes(th_copydir *d, int in, int out, uint64_t dev,
                      uint64_t size, uint64_t *total, copy_side *side)
{
    *total = 0;
    *side = SIDE_WRITE;
    if (!clone_refused(d, dev)) {
        if (ioctl(out, FICLONE, in) == 0) {
            struct stat st;
            if (fstat(out, &st) != 0)
                return -1;
            *total = (uint64_t)st.st_size;
            atomic_fetch_add(&d->n_cloned, 1);
            return 0;
        }
        if (errno == EOPNOTSUPP || errno == EINVAL || errno == EXDEV ||
            errno == ENOTTY || errno == ENOSYS || errno == EPERM)
            clone_refused_note(d, dev);
        /* anything else: copy the bytes below, ask again next time */
    }
    /* In the kernel: copy_file_range() within a file system (ext4 to
     * ext4), sendfile() across (ext4 to tmpfs: copy_file_range says
     * EXDEV there, remembered per source device).  `size` bytes and no
     * more: a file that grows or shrinks meanwhile changes its identity,
     * which the caller compares. */
    loff_t off = 0;
    bool cfr = !(atomic_load(&d->no_cfr_set) && atomic_load(&d->no_cfr_dev) == dev);
    while (*total < size) {
        size_t want = (size_t)(size - *total);
        ssize_t n = cfr ? copy_file_range(in, &off, out, NULL, want, 0)
                        : sendfile(out, in, &off, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && *total == 0 && cfr &&
            (errno == EXDEV || errno == ENOSYS || errno == EINVAL ||
             errno == EOPNOTSUPP)) {
            atomic_store(&d->no_cfr_dev, dev);
            atomic_store(&d->no_cfr_set, true);
            cfr = false;
            continue;
        }
        if (n < 0 && *total == 0 && !cfr && (errno == EINVAL || errno == ENOSYS))
            break; /* the byte copy below */
        if (n < 0) {
            *side = kernel_copy_side(errno);
            return -1;
        }
        if (n == 0)
            break; /* shrank: the caller sees total != size */
        *total += (uint64_t)n;
    }
    if (*total > 0 || size == 0) {
        atomic_fetch_add(&d->n_copied, 1);
        return 0;
    }
    static _Thread_local char buf[65536];
    off = 0;
    for (;;) {
        ssize_t n = pread(in, buf, sizeof buf, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            *side = SIDE_READ;
            return -1;
        }
        if (n == 0)
            break;
        off += n;
        if (write_all(out, buf, (size_t)n) != 0)
            return -1;
        *total += (uint64_t)n;
    }
    atomic_fetch_add(&d->n_copied, 1);
    return 0;
}

int th_copydir_copy(th_copydir *d, const char *src, const char *name,
                    uint64_t generation, char **path_out, th_file_id *id_out,
                    th_error *err)
{
    *path_out = NULL;
    int in = open(src, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (in < 0)
        return th_error_set(err, TH_EIO, "%s: cannot open: %s", src, strerror(errno));
    int rc = th_copydir_copy_fd(d, in, src, name, generation, path_out, id_out,
                                err);
    close(in);
    return rc;
}

int th_copydir_copy_fd(th_copydir *d, int in, const char *src, const char *name,
                       uint64_t generation, char **path_out,
                       th_file_id *id_out, th_error *err)
{
    *path_out = NULL;
    struct stat before, after;
    if (fstat(in, &before) != 0 || !S_ISREG(before.st_mode))
        return th_error_set(err, TH_EIO, "%s: not a regular file", src);
    char final[PATH_MAX];
    unsigned long seq = atomic_fetch_add(&d->seq, 1) + 1;
    if (snprintf(final, sizeof final, "%s/%.64s-g%llu-%lu.so", d->path, name,
                 (unsigned long long)generation, seq) >= (int)sizeof final)
        return th_error_set(err, TH_EIO, "%s: path too long", d->path);
    int out = open(final, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                   0500);
    if (out < 0)
        return th_error_set(err, TH_EIO, "%s: cannot create a copy in %s: %s",
                            src, d->path, strerror(errno));
    int rc = 0;
    uint64_t total = 0;
    copy_side side = SIDE_WRITE;
    if (copy_bytes(d, in, out, (uint64_t)before.st_dev,
                   (uint64_t)before.st_size, &total, &side) != 0) {
        int e = errno;
        rc = side == SIDE_READ
                 ? th_error_set(err, TH_EIO, "%s: reading it for its copy "
                                "failed: %s", src, strerror(e))
             : side == SIDE_WRITE
                 ? th_error_set(err, TH_EIO, "%s: writing its copy %s "
                                "failed: %s", src, final, strerror(e))
                 : th_error_set(err, TH_EIO, "%s: copying it to %s failed: "
                                "%s", src, final, strerror(e));
    }
    if (rc == 0 && fstat(in, &after) == 0) {
        th_file_id a, b;
        id_from_stat(&before, &a);
        id_from_stat(&after, &b);
        if (!th_file_id_equal(&a, &b) || total != a.size)
            rc = th_error_set(err, TH_ESTATE,
                              "%s: the file changed while it was copied (still "
                              "being written?)", src);
        else
            *id_out = a;
    }
    if (close(out) != 0 && rc == 0)
        rc = th_error_set(err, TH_EIO, "%s: closing its copy failed: %s", src,
                          strerror(errno));
    if (rc == 0 && !(*path_out = strdup(final)))
        rc = th_error_set(err, TH_ENOMEM, "out of memory");
    if (rc != 0)
        unlink(final);
    return rc;
}

bool th_copydir_checked(const th_copydir *d)
{
    return d->checked;
}

void th_copydir_counts(th_copydir *d, unsigned long *cloned,
                       unsigned long *copied)
{
    *cloned = atomic_load(&d->n_cloned);
    *copied = atomic_load(&d->n_copied);
}

void th_copydir_remove(th_copydir *d, const char *copy)
{
    size_t n = strlen(d->path);
    if (!copy || strncmp(copy, d->path, n) != 0 || copy[n] != '/' ||
        strchr(copy + n + 1, '/')) {
        th_log_error("reload: refusing to remove %s (not a private copy in %s)",
                     copy ? copy : "(null)", d->path);
        return;
    }
    if (unlink(copy) != 0 && errno != ENOENT)
        th_log_warn("reload: cannot remove the copy %s: %s", copy, strerror(errno));
}

bool th_file_same_content(const char *a, const char *b)
{
    int fa = open(a, O_RDONLY | O_CLOEXEC), fb = open(b, O_RDONLY | O_CLOEXEC);
    bool same = fa >= 0 && fb >= 0;
    struct stat sa, sb;
    if (same && (fstat(fa, &sa) != 0 || fstat(fb, &sb) != 0 || sa.st_size != sb.st_size))
        same = false;
    static _Thread_local char ba[32768], bb[32768];
    while (same) {
        ssize_t na = read(fa, ba, sizeof ba);
        if (na <= 0) {
            same = na == 0;
            break;
        }
        ssize_t got = 0;
        while (got < na) {
            ssize_t nb = read(fb, bb + got, (size_t)(na - got));
            if (nb <= 0)
                break;
            got += nb;
        }
        same = got == na && memcmp(ba, bb, (size_t)na) == 0;
    }
    if (fa >= 0)
        close(fa);
    if (fb >= 0)
        close(fb);
    return same;
}

/* ---- residency -------------------------------------------------------------------------- */

bool th_dl_still_loaded(const char *path)
{
    void *h = dlopen(path, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h) {
        dlerror(); /* clear it */
        return false;
    }
    dlclose(h); /* the reference RTLD_NOLOAD just took */
    return true;
}
