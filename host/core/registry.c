/* registry.c - tool name -> th_tool, with plugin generations pinned by
 * reference count while a call uses them.
 *
 * Data: `tools`, an array of th_tool pointers sorted by name (binary search
 * with strcmp), and `plugins`, the generations the registry holds (one
 * reference each).
 *
 * Lock: one pthread rwlock, writer-preferring so a reload is never starved
 * by a stream of lookups.  Readers (acquire, foreach, count, plugin) hold
 * it shared; add/replace/remove build the new arrays before taking it
 * exclusively, swap them in, and drop references only after unlocking, so
 * fini() and dlclose() never run under the lock.
 *
 * Ownership: a th_tool belongs to its plugin generation; th_registry_acquire()
 * takes a reference on that generation (under the read lock, so it cannot
 * be removed in between), which keeps the tool valid until
 * th_tool_release(), even after the registry dropped the generation.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "th/tool.h"

struct th_registry {
    pthread_rwlock_t lock;
    th_tool **tools; /* sorted by name */
    size_t n_tools;
    th_plugin **plugins;
    size_t n_plugins;
};

th_registry *th_registry_new(void)
{
    th_registry *reg = calloc(1, sizeof *reg);
    if (!reg)
        return NULL;
    pthread_rwlockattr_t attr;
    if (pthread_rwlockattr_init(&attr) != 0) {
        free(reg);
        return NULL;
    }
    pthread_rwlockattr_setkind_np(&attr,
                                  PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    int rc = pthread_rwlock_init(&reg->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc != 0) {
        free(reg);
        return NULL;
    }
    return reg;
}

void th_registry_free(th_registry *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->n_plugins; i++)
        th_plugin_unref(reg->plugins[i]);
    free(reg->plugins);
    free(reg->tools);
    pthread_rwlock_destroy(&reg->lock);
    free(reg);
}

static int tool_cmp(const void *a, const void *b)
{
    const th_tool *x = *(th_tool *const *)a, *y = *(th_tool *const *)b;
    return strcmp(x->name, y->name);
}

static th_tool *find(th_tool *const *tools, size_t n, const char *name)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, tools[mid]->name);
        if (c == 0)
            return tools[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* The new arrays for (current - `drop`) + `add`, checked for clashes.
 * Caller holds the lock (read or write). */
static int build(th_registry *reg, th_plugin *drop, th_plugin *add,
                 th_tool ***tools_out, size_t *nt_out,
                 th_plugin ***plugins_out, size_t *np_out, th_error *err)
{
    size_t keep = 0;
    for (size_t i = 0; i < reg->n_tools; i++)
        if (reg->tools[i]->plugin != drop)
            keep++;
    size_t nt = keep + (add ? add->n_tools : 0);
    size_t np = reg->n_plugins + (add ? 1 : 0);
    th_tool **tools = malloc((nt ? nt : 1) * sizeof *tools);
    th_plugin **plugins = malloc((np ? np : 1) * sizeof *plugins);
    if (!tools || !plugins) {
        free(tools);
        free(plugins);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    if (add) {
        for (size_t i = 0; i < reg->n_plugins; i++) {
            th_plugin *q = reg->plugins[i];
            if (q != drop && strcmp(q->name, add->name) == 0) {
                free(tools);
                free(plugins);
                return th_error_set(err, TH_ELOAD,
                                    "%s: a plugin named '%s' is already "
                                    "loaded (from %s)",
                                    add->path, add->name, q->path);
            }
        }
        for (size_t i = 0; i < add->n_tools; i++) {
            th_tool *t = find(reg->tools, reg->n_tools, add->tools[i].name);
            if (t && t->plugin != drop) {
                int rc = th_error_set(
                    err, TH_ELOAD,
                    "%s: tool '%s' of plugin '%s' is already provided by "
                    "plugin '%s' (%s); tool names must be unique across the "
                    "host",
                    add->path, t->name, add->name, t->plugin->name,
                    t->plugin->path);
                free(tools);
                free(plugins);
                return rc;
            }
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < reg->n_tools; i++)
        if (reg->tools[i]->plugin != drop)
            tools[k++] = reg->tools[i];
    for (size_t i = 0; add && i < add->n_tools; i++)
        tools[k++] = &add->tools[i];
    qsort(tools, nt, sizeof *tools, tool_cmp);
    k = 0;
    for (size_t i = 0; i < reg->n_plugins; i++)
        if (reg->plugins[i] != drop)
            plugins[k++] = reg->plugins[i];
    if (add)
        plugins[k++] = add;
    *tools_out = tools;
    *nt_out = nt;
    *plugins_out = plugins;
    *np_out = k;
    return 0;
}

static bool holds(const th_registry *reg, const th_plugin *p)
{
    for (size_t i = 0; i < reg->n_plugins; i++)
        if (reg->plugins[i] == p)
            return true;
    return false;
}

/* Swaps in new arrays under the write lock; frees the old ones. */
static void swap_in(th_registry *reg, th_tool **tools, size_t nt,
                    th_plugin **plugins, size_t np)
{
    th_tool **old_t = reg->tools;
    th_plugin **old_p = reg->plugins;
    reg->tools = tools;
    reg->n_tools = nt;
    reg->plugins = plugins;
    reg->n_plugins = np;
    free(old_t);
    free(old_p);
}

/* Writers are serialized by the write lock itself: the check and the swap
 * happen under it, so two concurrent adds cannot both pass the duplicate
 * check.  Building the arrays is short (a qsort of pointers). */
static int change(th_registry *reg, th_plugin *drop, th_plugin *add,
                  th_error *err)
{
    pthread_rwlock_wrlock(&reg->lock);
    if (drop && !holds(reg, drop)) {
        pthread_rwlock_unlock(&reg->lock);
        return th_error_set(err, TH_ENOTFOUND,
                            "%s: plugin '%s' is not in the registry",
                            drop->path, drop->name);
    }
    if (add && holds(reg, add)) {
        pthread_rwlock_unlock(&reg->lock);
        return th_error_set(err, TH_ESTATE,
                            "%s: plugin '%s' is already in the registry",
                            add->path, add->name);
    }
    th_tool **tools = NULL;
    th_plugin **plugins = NULL;
    size_t nt = 0, np = 0;
    int rc = build(reg, drop, add, &tools, &nt, &plugins, &np, err);
    if (rc == 0)
        swap_in(reg, tools, nt, plugins, np);
    pthread_rwlock_unlock(&reg->lock);
    if (rc == 0 && drop)
        th_plugin_unref(drop); /* outside the lock: may run fini() */
    return rc;
}

int th_registry_add(th_registry *reg, th_plugin *p, th_error *err)
{
    return change(reg, NULL, p, err);
}

int th_registry_replace(th_registry *reg, th_plugin *old, th_plugin *p,
                        th_error *err)
{
    if (strcmp(old->name, p->name) != 0)
        return th_error_set(err, TH_EINVAL,
                            "%s: cannot replace plugin '%s' by plugin '%s' "
                            "(names differ)",
                            p->path, old->name, p->name);
    return change(reg, old, p, err);
}

void th_registry_remove(th_registry *reg, th_plugin *p)
{
    th_error err;
    (void)change(reg, p, NULL, &err); /* not held: nothing to do */
}

const th_tool *th_registry_acquire(th_registry *reg, const char *name)
{
    if (!name)
        return NULL;
    pthread_rwlock_rdlock(&reg->lock);
    th_tool *t = find(reg->tools, reg->n_tools, name);
    if (t)
        th_plugin_ref(t->plugin);
    pthread_rwlock_unlock(&reg->lock);
    return t;
}

void th_tool_release(const th_tool *tool)
{
    if (tool)
        th_plugin_unref(tool->plugin);
}

th_plugin *th_registry_plugin(th_registry *reg, const char *name)
{
    th_plugin *p = NULL;
    pthread_rwlock_rdlock(&reg->lock);
    for (size_t i = 0; i < reg->n_plugins && !p; i++)
        if (strcmp(reg->plugins[i]->name, name) == 0)
            p = reg->plugins[i];
    pthread_rwlock_unlock(&reg->lock);
    return p;
}

int th_registry_foreach(th_registry *reg,
                        int (*fn)(const th_tool *tool, void *ud), void *ud)
{
    int rc = 0;
    pthread_rwlock_rdlock(&reg->lock);
    for (size_t i = 0; i < reg->n_tools && rc == 0; i++)
        rc = fn(reg->tools[i], ud);
    pthread_rwlock_unlock(&reg->lock);
    return rc;
}

size_t th_registry_count(th_registry *reg)
{
    pthread_rwlock_rdlock(&reg->lock);
    size_t n = reg->n_tools;
    pthread_rwlock_unlock(&reg->lock);
    return n;
}
