/* test_ops.c - operations pieces of the core: who is an admin
 * (th_host_is_admin and the rule named in refusals), and the sweep of
 * private-copy folders left by hosts that are gone (only folders that
 * prove, with their owner marker, that they are copies of a dead host). */
#include <CUnit/CUnit.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/th_test.h"
#include "th/config.h"
#include "th/host.h"
#include "th/log.h"
#include "reload/reloader.h" /* white-box: th_copydir_open */

static th_host *open_text(const char *text)
{
    th_config *cfg = NULL;
    th_error e;
    int rc = th_config_parse("ops.yaml", "/tmp", text, strlen(text), &cfg, &e);
    if (rc)
        printf("\n  config: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    th_host *h = NULL;
    rc = th_host_open(cfg, &h, &e);
    if (rc)
        printf("\n  open: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return h;
}

static void test_admin(void)
{
    const th_principal root = {.uid = 0, .gid = 0},
                       cli = {.uid = 4242, .gid = 4242, .trusted = true},
                       u4242 = {.uid = 4242, .gid = 100},
                       u4243 = {.uid = 4243, .gid = 777},
                       me = {.uid = (uint32_t)geteuid(), .gid = 5};
    char rule[512];
    /* no admin: section: root, the host's uid, the in-process CLI */
    th_host *h = open_text("host: {}\n");
    CU_ASSERT_TRUE(th_host_is_admin(h, &root));
    CU_ASSERT_TRUE(th_host_is_admin(h, &cli));
    CU_ASSERT_TRUE(th_host_is_admin(h, &me));
    CU_ASSERT_FALSE(th_host_is_admin(h, &u4242));
    th_host_admin_rule(h, rule, sizeof rule);
    char want[256];
    snprintf(want, sizeof want,
             "without an admin: section in ops.yaml, root and the uid the "
             "host runs as (%u)",
             (unsigned)geteuid());
    CU_ASSERT_STRING_EQUAL(rule, want);
    th_host_close(h);
    /* by uid, by group (the primary gid of the peer) */
    h = open_text("host: {}\nadmin:\n  users: [\"4242\"]\n"
                  "  groups: [\"777\"]\n");
    CU_ASSERT_TRUE(th_host_is_admin(h, &u4242));
    CU_ASSERT_TRUE(th_host_is_admin(h, &u4243)); /* gid 777 */
    CU_ASSERT_TRUE(th_host_is_admin(h, &root));  /* always */
    const th_principal other = {.uid = 4244, .gid = 100};
    CU_ASSERT_FALSE(th_host_is_admin(h, &other));
    if (geteuid() != 0)
        CU_ASSERT_FALSE(th_host_is_admin(h, &me)); /* listed or not at all */
    th_host_admin_rule(h, rule, sizeof rule);
    CU_ASSERT_STRING_EQUAL(rule, "admin.users/admin.groups in ops.yaml:2:1");
    th_host_close(h);
    /* an empty section: root only */
    h = open_text("admin: {}\n");
    CU_ASSERT_TRUE(th_host_is_admin(h, &root));
    CU_ASSERT_FALSE(th_host_is_admin(h, &u4242));
    th_host_close(h);
}

/* ---- stale copy folders ---------------------------------------------------- */

#define MAGIC "toolhost private plugin copies v1"

/* "boot ID\npidns NS" of this process, for markers */
static char *boot_id(void)
{
    static char b[300];
    char id[64] = "", ns[128] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(id, sizeof id, f))
            id[0] = '\0';
        fclose(f);
    }
    id[strcspn(id, "\n")] = '\0';
    ssize_t r = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    ns[r > 0 ? r : 0] = '\0';
    snprintf(b, sizeof b, "%s\npidns %s", id, ns);
    return b;
}

/* dir/name, a folder of `mode` with a marker (marker NULL: none) */
static char *folder(const char *dir, const char *name, mode_t mode,
                    const char *marker)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CU_ASSERT_EQUAL_FATAL(mkdir(p, 0700), 0);
    if (marker)
        free(th_test_write_file(p, ".toolhost-owner", marker, (size_t)-1));
    free(th_test_write_file(p, "x-g1-1.so", "x", 1));
    CU_ASSERT_EQUAL(chmod(p, mode), 0);
    return strdup(p);
}

static bool exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

static void test_stale_copies(void)
{
    char *tmp = th_test_tmpdir();
    const char *old = getenv("TMPDIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("TMPDIR", tmp, 1);
    /* a dead pid, and a live one (a child that waits) */
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    pid_t live = fork();
    if (live == 0) {
        sleep(30);
        _exit(0);
    }
    char m[256];
    snprintf(m, sizeof m, MAGIC "\npid %ld\nstart 0\nboot %s\n", (long)dead,
             boot_id());
    char *gone = folder(tmp, "toolhost-gone01", 0700, m);
    char *wide = folder(tmp, "toolhost-wide01", 0755, m); /* mode not 0700 */
    char *unmarked = folder(tmp, "toolhost-nomark", 0700, NULL);
    char *other = folder(tmp, "notours-01", 0700, m);     /* not our name */
    snprintf(m, sizeof m, MAGIC "\npid %ld\nstart 0\nboot %s\n", (long)live,
             boot_id());
    char *alive = folder(tmp, "toolhost-alive1", 0700, m);
    snprintf(m, sizeof m, MAGIC "\npid %ld\nstart 1\nboot %s\n", (long)live,
             boot_id());
    char *reused = folder(tmp, "toolhost-reuse1", 0700, m); /* pid reused */
    snprintf(m, sizeof m, MAGIC "\npid %ld\nstart 0\nboot not-this-boot\n",
             (long)live);
    char *rebooted = folder(tmp, "toolhost-boot01", 0700, m);
    snprintf(m, sizeof m, "something else\npid %ld\n", (long)dead);
    char *foreign = folder(tmp, "toolhost-magic1", 0700, m);
    /* a host in another pid namespace (a container sharing /tmp): its pid
     * means nothing here */
    snprintf(m, sizeof m, MAGIC "\npid %ld\nstart 0\nboot %.36s\npidns "
             "pid:[1]\n", (long)dead, boot_id());
    char *otherns = folder(tmp, "toolhost-ns0001", 0700, m);
    /* a link to a stale folder is not a folder */
    char link[4200], target[4200];
    snprintf(target, sizeof target, "%s/elsewhere", tmp);
    CU_ASSERT_EQUAL(mkdir(target, 0700), 0);
    snprintf(m, sizeof m, MAGIC "\npid %ld\nstart 0\nboot %s\n", (long)dead,
             boot_id());
    free(th_test_write_file(target, ".toolhost-owner", m, (size_t)-1));
    snprintf(link, sizeof link, "%s/toolhost-link01", tmp);
    CU_ASSERT_EQUAL(symlink(target, link), 0);

    th_copydir *d = NULL;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_copydir_open(NULL, &d, &e), 0);
    CU_ASSERT_FALSE(exists(gone));
    CU_ASSERT_FALSE(exists(reused));
    CU_ASSERT_FALSE(exists(rebooted));
    CU_ASSERT_TRUE(exists(wide));
    CU_ASSERT_TRUE(exists(unmarked));
    CU_ASSERT_TRUE(exists(other));
    CU_ASSERT_TRUE(exists(alive));
    CU_ASSERT_TRUE(exists(foreign));
    CU_ASSERT_TRUE(exists(otherns));
    CU_ASSERT_TRUE(exists(link));
    CU_ASSERT_TRUE(exists(target));
    /* the new folder carries our own marker */
    char mp[4200];
    snprintf(mp, sizeof mp, "%s/.toolhost-owner", th_copydir_path(d));
    FILE *f = fopen(mp, "r");
    CU_ASSERT_FATAL(f != NULL);
    char line[128];
    CU_ASSERT_PTR_NOT_NULL(fgets(line, sizeof line, f));
    CU_ASSERT_STRING_EQUAL(line, MAGIC "\n");
    CU_ASSERT_PTR_NOT_NULL(fgets(line, sizeof line, f));
    char want[64];
    snprintf(want, sizeof want, "pid %ld\n", (long)getpid());
    CU_ASSERT_STRING_EQUAL(line, want);
    fclose(f);
    /* a second host leaves the first (alive: us) alone */
    char *first = strdup(th_copydir_path(d));
    th_copydir *d2 = NULL;
    CU_ASSERT_EQUAL_FATAL(th_copydir_open(NULL, &d2, &e), 0);
    CU_ASSERT_TRUE(exists(first));
    th_copydir_close(d2);
    th_copydir_close(d);
    CU_ASSERT_FALSE(exists(first)); /* removed at close, marker and all */

    kill(live, SIGKILL);
    waitpid(live, NULL, 0);
    if (saved)
        setenv("TMPDIR", saved, 1);
    else
        unsetenv("TMPDIR");
    free(saved);
    char *all[] = {gone, wide, unmarked, other, alive, reused, rebooted,
                   foreign, otherns, first};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    chmod(tmp, 0700);
    th_test_rmtree(tmp);
    free(tmp);
}

void th_suite_ops(void)
{
    CU_pSuite s = CU_add_suite("ops", NULL, NULL);
    CU_add_test(s, "admin", test_admin);
    CU_add_test(s, "stale_copies", test_stale_copies);
}
