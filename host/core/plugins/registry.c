/* registry.c - tool name -> th_tool, with plugin generations pinned by
 * reference count while a call uses them.
 *
 * Data: `tab`, a table of th_tool pointers sorted by name (binary search
 * with strcmp), immutable once published, with a generation number unique
 * in the process; and `plugins`, the generations the registry holds (one
 * reference each).
 *
 * Lookup (th_registry_acquire) takes no lock: it protects the current
 * table with its thread's hazard slot (hazard.h), finds the tool, takes
 * the reference on its plugin and clears the slot.  It finds the tool in
 * its thread's lookup cache first (hazard.h: the last tools looked up,
 * each with the generation of the table it was found in; one strcmp
 * confirms the name), else by the binary search.  A cache entry holds no
 * reference: it is used only while the table of its generation is the
 * current one (protected), whose plugins the registry holds.
 *
 * Lock: one pthread rwlock, writer-preferring.  Writers (add, replace,
 * remove) hold it exclusively: they build the new table and plugin list,
 * publish them, unlock, wait until no reader's slot holds the old table
 * (th_hz_wait), then free it and drop the old plugin's reference, so
 * fini() and dlclose() never run under the lock and never under a reader.
 * The other readers (foreach, count, plugin) hold it shared, as does a
 * lookup on a thread without a hazard record (out of memory).
 *
 * Ownership: a th_tool belongs to its plugin generation; th_registry_acquire()
 * takes a reference on that generation (while the table that holds it is
 * protected, so it cannot be dropped in between), which keeps the tool
 * valid until th_tool_release(), even after the registry dropped the
 * generation.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/hazard.h"
#include "th/content.h"
#include "th/tool.h"

typedef struct reg_table {
    uint64_t gen; /* unique in the process: a lookup cache's key */
    size_t n;
    th_tool *tools[]; /* sorted by name */
} reg_table;

struct th_registry {
    pthread_rwlock_t lock;
    reg_table *tab; /* atomic for lookups; written under the write lock */
    th_plugin **plugins;
    size_t n_plugins;
};

static uint64_t next_gen = 1; /* atomic */

static reg_table *table_new(size_t n)
{
    reg_table *t = malloc(sizeof *t + n * sizeof t->tools[0]);
    if (!t)
        return NULL;
    t->gen = __atomic_fetch_add(&next_gen, 1, __ATOMIC_RELAXED);
    t->n = n;
    return t;
}

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
    if (rc != 0 || !(reg->tab = table_new(0))) {
        if (rc == 0)
            pthread_rwlock_destroy(&reg->lock);
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
    free(reg->tab);
    pthread_rwlock_destroy(&reg->lock);
    free(reg);
}

static int tool_cmp(const void *a, const void *b)
{
    const th_tool *x = *(th_tool *const *)a, *y = *(th_tool *const *)b;
    return strcmp(x->name, y->name);
}

static th_tool *find(const reg_table *tab, const char *name)
{
    th_tool *const *tools = tab->tools;
    size_t lo = 0, hi = tab->n;
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

/* TH_ELOAD when plugin `add` declares a prompt name or a resource URI
 * (template) that `have` declares too: unique across the host, as tool
 * names are; else 0. */
static int content_clash(const th_plugin *have, const th_plugin *add,
                         th_error *err)
{
    for (size_t i = 0; i < add->n_prompts; i++)
        for (size_t k = 0; k < have->n_prompts; k++)
            if (strcmp(add->prompts[i].name, have->prompts[k].name) == 0)
                return th_error_set(err, TH_ELOAD, "%s: prompt '%s' of plugin "
                                    "'%s' is already provided by plugin '%s' "
                                    "(%s); prompt names must be unique across "
                                    "the host",
                                    add->path, add->prompts[i].name,
                                    add->name, have->name, have->path);
    for (size_t i = 0; i < add->n_resources; i++)
        for (size_t k = 0; k < have->n_resources; k++)
            if (strcmp(add->resources[i].uri, have->resources[k].uri) == 0)
                return th_error_set(err, TH_ELOAD, "%s: resource '%.300s' of "
                                    "plugin '%s' is already provided by "
                                    "plugin '%s' (%s); resource URIs must be "
                                    "unique across the host",
                                    add->path, add->resources[i].uri,
                                    add->name, have->name, have->path);
    return 0;
}

/* The new arrays for (current - `drop`) + `add`, checked for clashes.
 * Caller holds the lock (read or write). */
static int build(th_registry *reg, th_plugin *drop, th_plugin *add,
                 reg_table **tab_out,
                 th_plugin ***plugins_out, size_t *np_out, th_error *err)
{
    const reg_table *cur = reg->tab;
    size_t keep = 0;
    for (size_t i = 0; i < cur->n; i++)
        if (cur->tools[i]->plugin != drop)
            keep++;
    size_t nt = keep + (add ? add->n_tools : 0);
    size_t np = reg->n_plugins + (add ? 1 : 0);
    reg_table *tab = table_new(nt);
    th_tool **tools = tab ? tab->tools : NULL;
    th_plugin **plugins = malloc((np ? np : 1) * sizeof *plugins);
    if (!tab || !plugins) {
        free(tab);
        free(plugins);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    if (add) {
        for (size_t i = 0; i < reg->n_plugins; i++) {
            th_plugin *q = reg->plugins[i];
            if (q != drop && strcmp(q->name, add->name) == 0) {
                free(tab);
                free(plugins);
                return th_error_set(err, TH_ELOAD,
                                    "%s: a plugin named '%s' is already "
                                    "loaded (from %s)",
                                    add->path, add->name, q->path);
            }
        }
        for (size_t i = 0; i < add->n_tools; i++) {
            th_tool *t = find(cur, add->tools[i].name);
            if (t && t->plugin != drop) {
                int rc = th_error_set(
                    err, TH_ELOAD,
                    "%s: tool '%s' of plugin '%s' is already provided by "
                    "plugin '%s' (%s); tool names must be unique across the "
                    "host",
                    add->path, t->name, add->name, t->plugin->name,
                    t->plugin->path);
                free(tab);
                free(plugins);
                return rc;
            }
        }
        /* prompt names and resource URIs are unique across the host too */
        for (size_t i = 0; i < reg->n_plugins; i++) {
            th_plugin *q = reg->plugins[i];
            int rc = q != drop ? content_clash(q, add, err) : 0;
            if (rc) {
                free(tab);
                free(plugins);
                return rc;
            }
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < cur->n; i++)
        if (cur->tools[i]->plugin != drop)
            tools[k++] = cur->tools[i];
    for (size_t i = 0; add && i < add->n_tools; i++)
        tools[k++] = &add->tools[i];
    qsort(tools, nt, sizeof *tools, tool_cmp);
    k = 0;
    for (size_t i = 0; i < reg->n_plugins; i++)
        if (reg->plugins[i] != drop)
            plugins[k++] = reg->plugins[i];
    if (add)
        plugins[k++] = add;
    *tab_out = tab;
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

/* Swaps in the new table and list under the write lock; frees the old
 * list and returns the old table (freed by the caller once no lookup
 * holds it). */
static reg_table *swap_in(th_registry *reg, reg_table *tab,
                          th_plugin **plugins, size_t np)
{
    reg_table *old_t = reg->tab;
    th_plugin **old_p = reg->plugins;
    __atomic_store_n(&reg->tab, tab, __ATOMIC_SEQ_CST);
    reg->plugins = plugins;
    reg->n_plugins = np;
    free(old_p);
    return old_t;
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
    reg_table *tab = NULL, *old = NULL;
    th_plugin **plugins = NULL;
    size_t np = 0;
    int rc = build(reg, drop, add, &tab, &plugins, &np, err);
    if (rc == 0)
        old = swap_in(reg, tab, plugins, np);
    pthread_rwlock_unlock(&reg->lock);
    if (rc != 0)
        return rc;
    /* A lookup that protected the old table may still be taking its
     * reference on `drop`: it is waited for before the reference the
     * registry held is dropped. */
    th_hz_wait(TH_HZ_REGISTRY, old);
    free(old);
    if (drop)
        th_plugin_unref(drop); /* outside the lock: may run fini() */
    return 0;
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

/* The lookup cache's entry for a name: its first two bytes (the second
 * read only when the first is not the end). */
static inline unsigned cache_slot(const char *name)
{
    unsigned c0 = (unsigned char)name[0];
    unsigned c1 = c0 ? (unsigned char)name[1] : 0;
    return (c0 + 5 * c1) & (TH_HZ_TOOL_CACHE - 1);
}

/* A lookup on a thread without a hazard record (out of memory): under
 * the read lock, as the writers swap the table under the write lock. */
static __attribute__((noinline, cold)) const th_tool *
acquire_locked(th_registry *reg, const char *name)
{
    pthread_rwlock_rdlock(&reg->lock);
    th_tool *t = find(reg->tab, name);
    if (t)
        th_plugin_ref(t->plugin);
    pthread_rwlock_unlock(&reg->lock);
    return t;
}

const th_tool *th_registry_acquire(th_registry *reg, const char *name)
{
    if (!name)
        return NULL;
    th_hz_rec *r = th_hz_mine();
    if (__builtin_expect(r == NULL, 0))
        return acquire_locked(reg, name);
    const reg_table *tab = th_hz_protect(r, TH_HZ_REGISTRY, &reg->tab);
    unsigned k = cache_slot(name);
    const th_tool *t = r->tools[k].tool;
    if (r->tools[k].gen != tab->gen ||
        (t->name != name && strcmp(t->name, name) != 0)) {
        t = find(tab, name);
        if (t) {
            r->tools[k].gen = tab->gen;
            r->tools[k].tool = t;
        }
    }
    if (t)
        th_plugin_ref(t->plugin);
    th_hz_clear(r, TH_HZ_REGISTRY);
    return t;
}

void *th_registry_table(th_registry *reg)
{
    return __atomic_load_n(&reg->tab, __ATOMIC_SEQ_CST);
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
    const reg_table *tab = reg->tab;
    for (size_t i = 0; i < tab->n && rc == 0; i++)
        rc = fn(tab->tools[i], ud);
    pthread_rwlock_unlock(&reg->lock);
    return rc;
}

int th_registry_foreach_plugin(th_registry *reg,
                               int (*fn)(th_plugin *p, void *ud), void *ud)
{
    int rc = 0;
    pthread_rwlock_rdlock(&reg->lock);
    for (size_t i = 0; i < reg->n_plugins && rc == 0; i++)
        rc = fn(reg->plugins[i], ud);
    pthread_rwlock_unlock(&reg->lock);
    return rc;
}

size_t th_registry_count(th_registry *reg)
{
    pthread_rwlock_rdlock(&reg->lock);
    size_t n = reg->tab->n;
    pthread_rwlock_unlock(&reg->lock);
    return n;
}
