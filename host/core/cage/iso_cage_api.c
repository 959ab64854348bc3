/* iso_cage_api.c - the host api's cages (ABI 1.3, toolhost_host_api
 * cage_open .. cage_close in plugin.h): th/iso.h's cages handed to
 * plugins, for the process trees they start themselves (the exec
 * plugin's commands).  No cgroup code of its own: everything goes
 * through th_iso_cage_* (iso_cgroup.c), the code the isolated workers'
 * cgroups and `toolhost check` use.
 *
 * Naming: <plugin>.<label>.<n>, n counting every cage this process
 * opened, so that no two cages (and no cage and a worker's leaf,
 * <plugin>-<generation>-<n>, nor check's check-<pid>: neither has a dot)
 * share a cgroup: th_iso_cg_make empties a leaf that already exists.
 *
 * A toolhost_cage * is a th_iso_cage * under the ABI's opaque name.
 *
 * State: g_seq (atomic) and g_off (set once, by a worker or check's child
 * before any plugin code runs, read with acquire by cage_open).
 */
#include <errno.h>
#include <stddef.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "th/iso.h"
#include "th/log.h"
#include "th/tool.h"

static unsigned long long g_seq;
static const char *g_off;

void th_iso_cage_api_off(const char *why)
{
    __atomic_store_n(&g_off, why, __ATOMIC_RELEASE);
}

static toolhost_cage *api_cage_open(const toolhost_host_api *host,
                                    const char *label, uint64_t memory_max,
                                    char *why, size_t why_size)
{
    char scratch[8];
    if (!why || !why_size) {
        why = scratch;
        why_size = sizeof scratch;
    }
    why[0] = '\0';
    const char *off = __atomic_load_n(&g_off, __ATOMIC_ACQUIRE);
    if (off) {
        snprintf(why, why_size, "%s", off);
        return NULL;
    }
    if (!host) {
        snprintf(why, why_size, "no host api");
        return NULL;
    }
    /* th_plugin_from_api(), spelled out: the loader calls this file
     * (th_iso_cage_api_fill), and the core's objects call no cycle */
    const th_plugin *p =
        (const th_plugin *)((const char *)host - offsetof(th_plugin, api));
    char lab[41];
    size_t k = 0;
    for (const char *c = label ? label : "cage"; *c && k < sizeof lab - 1;
         c++) {
        bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '-' || *c == '_';
        lab[k++] = ok ? *c : '_';
    }
    lab[k] = '\0';
    char name[128];
    snprintf(name, sizeof name, "%.64s.%s.%llu",
             p->name ? p->name : "plugin", k ? lab : "cage",
             __atomic_add_fetch(&g_seq, 1, __ATOMIC_RELAXED));
    th_iso_cage *c = th_iso_cage_open(name, memory_max, why, why_size);
    if (c)
        th_log_debug("plugin %s: cage %s", p->name ? p->name : "?",
                     th_iso_cage_dir(c));
    return (toolhost_cage *)c;
}

/* Async-signal-safe: a write(2), maybe an unshare(2), errno. */
static int api_cage_enter(const toolhost_cage *cage)
{
    if (!cage)
        return TOOLHOST_EINVAL;
    int e = th_iso_cage_enter((const th_iso_cage *)cage);
    if (e) {
        errno = e;
        return TOOLHOST_ESTATE;
    }
    /* Rooted at the cage: on a hierarchy mounted with nsdelegate the
     * kernel then refuses to move a process of the tree out of it (moves
     * from or to outside the writer's namespace); without CAP_SYS_ADMIN
     * this fails (EPERM) and changes nothing. */
    int keep = errno;
    syscall(SYS_unshare, CLONE_NEWCGROUP);
    errno = keep;
    return 0;
}

static void api_cage_placed(toolhost_cage *cage)
{
    th_iso_cage_placed((th_iso_cage *)cage);
}

static int api_cage_kill(toolhost_cage *cage, int64_t timeout_ms)
{
    if (!cage)
        return TOOLHOST_EINVAL;
    return th_iso_cage_kill_wait((th_iso_cage *)cage,
                                 timeout_ms > 0 ? timeout_ms : 0) == 0
               ? 0
               : TOOLHOST_ESTATE;
}

static void api_cage_close(toolhost_cage *cage)
{
    th_iso_cage_close((th_iso_cage *)cage);
}

void th_iso_cage_api_fill(toolhost_host_api *api)
{
    api->cage_open = api_cage_open;
    api->cage_enter = api_cage_enter;
    api->cage_placed = api_cage_placed;
    api->cage_kill = api_cage_kill;
    api->cage_close = api_cage_close;
}
