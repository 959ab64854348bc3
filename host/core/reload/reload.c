/* reload.c - the reloader: plan a reload from the whole new config, load
 * every new generation from a private copy before touching the running set,
 * swap them into the registry, drain and close the old ones on the
 * reloader's own thread.
 *
 * Threads.  One reloader thread runs the requested reloads and closes the
 * generations whose last call ended (fini, dlclose, residency check, copy
 * removal): never a worker mid-call.  th_reload_now() runs a reload on the
 * caller's thread instead.  Reloads are serialized by run_mu.
 *
 * Reloads a plugin asks for (tools_changed(), ABI 1.5) are names queued in
 * `asked` (mu): the thread runs them as one reload that keeps the running
 * config and loads those plugins again, at most once per
 * host.plugin_reload_min_interval (it waits on cv, a CLOCK_MONOTONIC
 * condition, until then).  A full reload that runs meanwhile takes the
 * queued names with it.
 *
 * Locks: run_mu (held for a whole reload) -> mu (the generation list, the
 * queues, the stats, the current config pointer).  mu is never held while
 * calling into the registry, a plugin or a target callback.  The
 * on_last_unref hook takes mu only.
 */
#include <errno.h>
#include <libgen.h>
#include <msgpack.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "th/buf.h"
#include "th/clock.h"
#include "th/log.h"
#include "plugins/dl_go.h"
#include "iso/iso_wire.h"
#include "reloader.h"

/* One generation the reloader knows, from load (or adoption) to close. */
typedef struct th_gen {
    th_reloader *r;
    th_plugin *p;         /* not a reference: valid until closed */
    char *name;
    char *path;           /* as configured */
    char *real;           /* realpath() of `path` at load, or NULL */
    char *copy;           /* the private copy, NULL when adopted */
    th_file_id id;        /* identity of `path` when it was copied */
    uint64_t generation;
    bool current;         /* the registry's generation for `name` */
    bool draining;        /* counted in stats.draining */
    bool linked;          /* in r->gens */
    bool excl;            /* an exclusive reload waits for its drain: the
                             last unref signals excl_cv (mu) */
    bool drained;         /* (mu) its last reference went, while excl */
    struct th_gen *prev, *next;
    struct th_gen *qnext; /* close queue */
} th_gen;

typedef struct waiter {
    th_reload_done_fn fn;
    void *ud;
    struct waiter *next;
} waiter;

struct th_reloader {
    th_reload_target t;
    th_copydir *dir;

    pthread_mutex_t run_mu;   /* one reload at a time */

    pthread_mutex_t mu;
    pthread_cond_t cv;        /* the thread waits for work */
    pthread_cond_t idle_cv;   /* the close queue emptied */
    pthread_cond_t excl_cv;   /* an exclusive reload's old generation
                                 drained */
    const th_config *cfg;     /* the current config (see header) */
    th_config **owned;        /* configs kept when there is no swap_config */
    size_t n_owned;
    th_gen *gens;             /* every generation not closed yet */
    th_gen *q_head, *q_tail;  /* generations to close */
    bool closing_batch;       /* the thread is closing a batch */
    waiter *want;             /* requests for the next reload */
    bool want_any;
    char **asked;             /* plugins that asked to be loaded again */
    size_t n_asked, cap_asked;
    int64_t asked_next_ns;    /* the next such reload starts no earlier */
    int64_t asked_due_ns;     /* the first queued name + reload_debounce */
    bool asked_logged;        /* the wait for it was logged */
    bool stop;
    uint64_t seq;
    th_reload_stats st;

    pthread_t thread;
    bool started;
};

static int64_t now_ns(void)
{
    return th_now_ns();
}

static int64_t wall_ms(void)
{
    return th_wall_ms();
}

const char *th_reload_action_name(th_reload_action a)
{
    switch (a) {
    case TH_RL_UNCHANGED: return "unchanged";
    case TH_RL_CHANGED: return "changed";
    case TH_RL_ADDED: return "added";
    case TH_RL_REMOVED: return "removed";
    case TH_RL_SKIPPED: return "skipped";
    }
    return "unknown";
}

/* ---- generations ----------------------------------------------------------------- */

static void gen_free(th_gen *g)
{
    free(g->name);
    free(g->path);
    free(g->real);
    free(g->copy);
    free(g);
}

static void link_gen(th_reloader *r, th_gen *g) /* mu held */
{
    g->prev = NULL;
    g->next = r->gens;
    if (r->gens)
        r->gens->prev = g;
    r->gens = g;
    g->linked = true;
}

static void unlink_gen(th_reloader *r, th_gen *g) /* mu held */
{
    if (!g->linked)
        return;
    if (g->prev)
        g->prev->next = g->next;
    else
        r->gens = g->next;
    if (g->next)
        g->next->prev = g->prev;
    g->linked = false;
}

/* The plugin's last reference is gone (any thread, maybe a worker that
 * just finished the last call): hand the generation to the reloader's
 * thread.  No allocation, one lock. */
static void on_last_unref(th_plugin *p)
{
    th_gen *g = p->user;
    th_reloader *r = g->r;
    pthread_mutex_lock(&r->mu);
    if (g->excl) { /* the exclusive reload closes it on its own thread */
        g->drained = true;
        pthread_cond_broadcast(&r->excl_cv);
        pthread_mutex_unlock(&r->mu);
        return;
    }
    g->qnext = NULL;
    if (r->q_tail)
        r->q_tail->qnext = g;
    else
        r->q_head = g;
    r->q_tail = g;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static th_gen *gen_new(th_reloader *r, th_plugin *p, const char *path,
                       const char *copy, const th_file_id *id)
{
    th_gen *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->r = r;
    g->p = p;
    g->generation = p->generation;
    char real[PATH_MAX];
    if (!(g->name = strdup(p->name)) || !(g->path = strdup(path)) ||
        (copy && !(g->copy = strdup(copy))) ||
        (realpath(path, real) && !(g->real = strdup(real)))) {
        gen_free(g);
        return NULL;
    }
    if (id)
        g->id = *id;
    return g;
}

/* fini, dlclose, residency check, copy removal.  The reloader's thread
 * (or the reload's, for generations that never served). */
static void close_gen(th_reloader *r, th_gen *g)
{
    char lp[PATH_MAX];
    bool had_dl = g->p->dl != NULL;
    bool go = had_dl && th_dl_go_is(g->p->dl); /* never unloaded: dl_go.h */
    snprintf(lp, sizeof lp, "%s", g->p->load_path ? g->p->load_path : "");
    bool deferred = false;
    th_plugin_close_ex(g->p, &deferred);
    g->p = NULL;
    bool mapped = had_dl && lp[0] && th_dl_still_loaded(lp);
    if (g->copy)
        th_copydir_remove(r->dir, g->copy);
    if (mapped && deferred) /* dl_guard said why and unmaps it later */
        th_log_debug("reload: plugin %s generation %llu is closed; its "
                     "object is unmapped once no thread is inside it",
                     g->name, (unsigned long long)g->generation);
    else if (mapped && go)
        th_log_debug("reload: plugin %s generation %llu is closed; its object "
                     "stays in memory, as the one Go runtime of the process "
                     "(never unloaded)", g->name,
                     (unsigned long long)g->generation);
    else if (mapped)
        th_log_warn("reload: plugin %s generation %llu is closed but its object "
                    "stays in memory (%s): it cannot be unloaded (nodelete, "
                    "unique symbols or thread-local destructors)",
                    g->name, (unsigned long long)g->generation, lp);
    else
        th_log_debug("reload: plugin %s generation %llu closed", g->name,
                     (unsigned long long)g->generation);
    pthread_mutex_lock(&r->mu);
    unlink_gen(r, g);
    if (g->draining)
        r->st.draining--;
    r->st.closed++;
    if (mapped)
        r->st.still_mapped++;
    else if (had_dl)
        r->st.unloaded++;
    pthread_mutex_unlock(&r->mu);
    gen_free(g);
}

/* A prepared generation that never entered the registry. */
static void discard(th_reloader *r, th_plugin *p, th_gen *g)
{
    if (!p)
        return;
    p->on_last_unref = NULL;
    p->user = NULL;
    th_plugin_close(p);
    if (g) {
        if (g->copy)
            th_copydir_remove(r->dir, g->copy);
        gen_free(g);
    }
}

static th_gen *current_gen(th_reloader *r, const char *name) /* mu held */
{
    for (th_gen *g = r->gens; g; g = g->next)
        if (g->current && strcmp(g->name, name) == 0)
            return g;
    return NULL;
}

void (*th_reload_test_after_check)(const char *path);

static const th_plugin_cfg *cfg_entry(const th_config *c, const char *name)
{
    for (size_t i = 0; c && i < c->n_plugins; i++)
        if (strcmp(c->plugins[i].name, name) == 0)
            return &c->plugins[i];
    return NULL;
}

/* Copy, open, config block, init: generation `gen` of entry `pc`.  On
 * failure *incomplete says whether the file looked half-written. */
static int prepare(th_reloader *r, const th_config *cfg, const th_plugin_cfg *pc,
                   uint64_t gen, const th_gen *old, th_plugin **pout,
                   th_gen **gout, bool *deferred, bool *incomplete,
                   th_error *err)
{
    if (deferred)
        *deferred = false;
    *pout = NULL;
    *gout = NULL;
    char *copy = NULL;
    th_file_id id;
    /* Open and check once, then copy from that fd: the copy is the file
     * that passed, even if the path names another file a moment later
     * (a link flipped, a file renamed over). */
    int fd = -1;
    int rc = th_plugin_file_open(pc->path, NULL, !pc->allow_insecure, &fd, err);
    if (rc)
        return rc;
    if (th_reload_test_after_check)
        th_reload_test_after_check(pc->path);
    rc = th_copydir_copy_fd(r->dir, fd, pc->path, pc->name, gen, &copy, &id,
                            err);
    /* A truncated object must not reach dlopen(): mapping a segment past
     * the end of the file faults (SIGBUS) during relocation.  The copy
     * holds the bytes of `fd` (same identity and size before and after),
     * so asking the source is asking the copy, without opening it again;
     * th_plugin_open() looks at the copy itself once more. */
    bool trunc = th_elf_incomplete_fd(fd);
    if (rc && (rc == TH_ESTATE || trunc))
        *incomplete = true;
    close(fd);
    if (rc) {
        if (rc == TH_EIO && err) /* as the loader says it */
            err->code = rc = TH_ELOAD;
        return rc;
    }
    if (trunc) {
        *incomplete = true;
        th_copydir_remove(r->dir, copy);
        free(copy);
        return th_error_set(err, TH_ELOAD, "%s: cannot be loaded: the file is "
                            "truncated (empty, or its ELF headers reach past "
                            "its end)", pc->path);
    }
    th_load_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.name = pc->name;
    lo.allow_insecure = pc->allow_insecure;
    lo.load_path = copy;
    lo.private_copy = th_copydir_checked(r->dir);
    lo.generation = gen;
    th_plugin *p = NULL;
    rc = th_iso_plugin_open(pc, &lo, &p, err); /* isolation: a proxy */
    if (rc) {
        th_copydir_remove(r->dir, copy);
        free(copy);
        return rc;
    }
    /* TOOLHOST_PLUGIN_EXCLUSIVE_RELOAD (of either generation): init() waits
     * until the old generation's fini() (exclusive_swap). */
    bool defer = deferred && old && old->p &&
                 ((p->flags | old->p->flags) & TOOLHOST_PLUGIN_EXCLUSIVE_RELOAD);
    th_buf block = TH_BUF_INIT;
    rc = th_config_plugin_block(cfg, pc, p->config_params, p->n_config_params,
                                &block, err);
    if (rc == 0 && !defer)
        rc = th_plugin_init(p, block.data, block.len, err);
    th_buf_destroy(&block);
    if (deferred)
        *deferred = defer;
    th_gen *g = NULL;
    if (rc == 0 && !(g = gen_new(r, p, pc->path, copy, &id)))
        rc = th_error_set(err, TH_ENOMEM, "out of memory");
    if (rc) {
        th_plugin_close(p);
        th_copydir_remove(r->dir, copy);
        free(copy);
        return rc;
    }
    free(copy);
    __atomic_store_n((th_gen **)&p->user, g, __ATOMIC_RELEASE);
    p->on_last_unref = on_last_unref;
    *pout = p;
    *gout = g;
    return 0;
}

/* ---- the plan ---------------------------------------------------------------------- */

typedef struct step {
    const th_plugin_cfg *pc; /* the new entry; NULL for a removal */
    th_gen *old;             /* the running generation of that name */
    th_plugin *np;           /* the new generation (one reference) */
    th_gen *ng;
    th_reload_action action;
    bool refresh_id;         /* unchanged bytes, new identity */
    th_file_id id;
    bool applied;
    bool deferred;           /* exclusive reload: np not initialized yet */
    bool excl_closed;        /* exclusive reload: `old` closed (NULL) */
} step;

typedef struct name_ref {
    const char *tool;
    const char *plugin;
    const char *path;
    const th_tool *t; /* its tags (ABI 1.5) */
} name_ref;

typedef struct collect_ud {
    name_ref *v;
    size_t n, cap;
    step *steps;
    size_t n_steps;
    int rc;
} collect_ud;

static int push_name(collect_ud *c, const th_tool *t, const char *plugin,
                     const char *path)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        name_ref *v = realloc(c->v, cap * sizeof *v);
        if (!v)
            return TH_ENOMEM;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = (name_ref){t->name, plugin, path, t};
    return 0;
}

/* Registry tools that stay: those of generations no step replaces. */
static int collect_kept(const th_tool *t, void *ud)
{
    collect_ud *c = ud;
    for (size_t i = 0; i < c->n_steps; i++)
        if (c->steps[i].old && c->steps[i].old->p == t->plugin &&
            (c->steps[i].action == TH_RL_CHANGED || c->steps[i].action == TH_RL_REMOVED))
            return 0;
    return (c->rc = push_name(c, t, t->plugin->name, t->plugin->path));
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(((const name_ref *)a)->tool, ((const name_ref *)b)->tool);
}

typedef struct future {
    th_reloader *r;
    const name_ref *v;
    size_t n;
} future;

static bool future_has(void *ud, const char *name)
{
    future *f = ud;
    name_ref key = {name, NULL, NULL, NULL};
    if (bsearch(&key, f->v, f->n, sizeof key, name_cmp))
        return true;
    return f->r->t.reserved && f->r->t.reserved(f->r->t.ud, name);
}

/* Whether a tool of the set after the reload declares `tag`. */
static bool future_has_tag(void *ud, const char *tag)
{
    future *f = ud;
    for (size_t i = 0; i < f->n; i++)
        if (th_tool_has_tag(f->v[i].t, tag))
            return true;
    return false;
}

/* The tool set after the reload: no name twice, nothing reserved taken,
 * every tool the new config names present. */
static int check_future(th_reloader *r, const th_config *nc, step *steps,
                        size_t n, th_error *err)
{
    collect_ud c = {NULL, 0, 0, steps, n, 0};
    th_registry_foreach(r->t.reg, collect_kept, &c);
    int rc = c.rc;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        th_plugin *p = steps[i].np;
        for (size_t k = 0; p && rc == 0 && k < p->n_tools; k++) {
            if (r->t.reserved && r->t.reserved(r->t.ud, p->tools[k].name)) {
                rc = th_error_set(err, TH_ELOAD,
                                  "%s: tool '%s' of plugin '%s' has the name of "
                                  "a built-in tool", p->path, p->tools[k].name,
                                  p->name);
                break;
            }
            rc = push_name(&c, &p->tools[k], p->name, p->path);
        }
    }
    if (rc == TH_ENOMEM)
        th_error_set(err, rc, "out of memory");
    if (rc == 0) {
        qsort(c.v, c.n, sizeof *c.v, name_cmp);
        for (size_t i = 1; i < c.n; i++)
            if (strcmp(c.v[i - 1].tool, c.v[i].tool) == 0) {
                rc = th_error_set(err, TH_ELOAD,
                                  "tool '%s' would be provided by plugin '%s' "
                                  "(%s) and by plugin '%s' (%s); tool names "
                                  "must be unique across the host",
                                  c.v[i].tool, c.v[i - 1].plugin, c.v[i - 1].path,
                                  c.v[i].plugin, c.v[i].path);
                break;
            }
    }
    if (rc == 0) {
        future f = {r, c.v, c.n};
        rc = th_config_check_tools(nc, future_has, &f, err);
        if (rc == 0)
            rc = th_config_check_tags(nc, future_has_tag, &f, NULL, NULL,
                                      err);
    }
    free(c.v);
    return rc;
}

/* ---- apply --------------------------------------------------------------------------- */

static void mark_leaving(th_reloader *r, th_gen *g)
{
    pthread_mutex_lock(&r->mu);
    g->current = false;
    if (!g->draining) {
        g->draining = true;
        r->st.draining++;
    }
    pthread_mutex_unlock(&r->mu);
}

static void mark_back(th_reloader *r, th_gen *g)
{
    pthread_mutex_lock(&r->mu);
    g->current = true;
    if (g->draining) {
        g->draining = false;
        r->st.draining--;
    }
    pthread_mutex_unlock(&r->mu);
}

static void enter(th_reloader *r, th_gen *g)
{
    pthread_mutex_lock(&r->mu);
    g->current = true;
    link_gen(r, g);
    pthread_mutex_unlock(&r->mu);
}

static void leave_unentered(th_reloader *r, th_gen *g)
{
    pthread_mutex_lock(&r->mu);
    g->current = false;
    unlink_gen(r, g);
    pthread_mutex_unlock(&r->mu);
}

/* One replace or add; 0 or the registry's error. */
static int apply_one(th_reloader *r, step *s, th_error *err)
{
    enter(r, s->ng);
    int rc;
    if (s->action == TH_RL_CHANGED && s->old) {
        mark_leaving(r, s->old);
        rc = th_registry_replace(r->t.reg, s->old->p, s->np, err);
        if (rc)
            mark_back(r, s->old);
    } else {
        rc = th_registry_add(r->t.reg, s->np, err);
    }
    if (rc)
        leave_unentered(r, s->ng);
    return rc;
}

/* Applies the plan: removals, then replacements and additions in passes
 * (a tool moving from one plugin to another needs its old owner swapped
 * first).  The plan was checked as a whole, so this only fails when out of
 * memory; if an order cannot be found (two plugins swapping tools), the
 * old generations left are removed first. */
static int apply(th_reloader *r, step *steps, size_t n, th_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (steps[i].action == TH_RL_REMOVED) {
            mark_leaving(r, steps[i].old);
            th_registry_remove(r->t.reg, steps[i].old->p);
            steps[i].applied = true;
        }
    size_t left = 0;
    for (size_t i = 0; i < n; i++)
        if (steps[i].np)
            left++;
    bool progress = true;
    th_error e;
    while (left && progress) {
        progress = false;
        for (size_t i = 0; i < n; i++) {
            if (!steps[i].np || steps[i].applied)
                continue;
            if (apply_one(r, &steps[i], &e) == 0) {
                steps[i].applied = true;
                progress = true;
                left--;
            } else if (e.code == TH_ENOMEM) {
                break;
            }
        }
    }
    int rc = 0;
    for (size_t i = 0; i < n && left; i++) {
        step *s = &steps[i];
        if (!s->np || s->applied)
            continue;
        if (s->action == TH_RL_CHANGED && s->old) {
            mark_leaving(r, s->old);
            th_registry_remove(r->t.reg, s->old->p);
            s->action = TH_RL_ADDED;
        }
        if (apply_one(r, s, &e) == 0) {
            s->applied = true;
            left--;
        } else if (rc == 0) {
            rc = th_error_set(err, e.code, "applying the reload failed half-way "
                              "(plugin %s is not running): %s", s->pc->name, e.msg);
        }
    }
    return rc;
}

/* ---- exclusive reload ------------------------------------------------------------------ */

/* Generations that must not overlap (TOOLHOST_PLUGIN_EXCLUSIVE_RELOAD):
 * take each old one out of the registry, wait (host.reload_drain_timeout)
 * until its last call ended, fini and close it, then init the new one,
 * which apply() adds.  When the old calls do not end in time, the old
 * generations go back and the reload fails: nothing changed (the tools
 * were unavailable while it waited). */
static int exclusive_swap(th_reloader *r, const th_config *nc, step *steps,
                          size_t n, th_error *err)
{
    size_t nx = 0;
    for (size_t i = 0; i < n; i++)
        if (steps[i].deferred)
            nx++;
    if (!nx)
        return 0;
    uint64_t tmo = nc->host.reload_drain_timeout_ms;
    for (size_t i = 0; i < n; i++) {
        step *s = &steps[i];
        if (!s->deferred)
            continue;
        pthread_mutex_lock(&r->mu);
        s->old->excl = true;
        s->old->drained = false;
        pthread_mutex_unlock(&r->mu);
        th_log_info("reload: plugin %s has exclusive_reload: waiting for the calls "
                    "of generation %llu to end before init of generation %llu",
                    s->old->name, (unsigned long long)s->old->generation,
                    (unsigned long long)s->np->generation);
        mark_leaving(r, s->old);
        th_registry_remove(r->t.reg, s->old->p);
    }
    int64_t until = now_ns() + (int64_t)tmo * 1000000;
    step *late = NULL;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        late = NULL;
        for (size_t i = 0; i < n && !late; i++)
            if (steps[i].deferred && !steps[i].old->drained)
                late = &steps[i];
        if (!late || now_ns() >= until)
            break;
        struct timespec ts;
        th_deadline_rt(&ts, 10);
        pthread_cond_timedwait(&r->excl_cv, &r->mu, &ts);
    }
    pthread_mutex_unlock(&r->mu);
    if (late) {
        long left = atomic_load(&late->old->p->refs);
        int rc = th_error_set(err, TH_ETIMEOUT,
                              "plugin %s has exclusive_reload and %ld call%s of its "
                              "generation %llu still ran after reload_drain_timeout "
                              "(%llu ms): reload refused, nothing changed",
                              late->old->name, left, left == 1 ? "" : "s",
                              (unsigned long long)late->old->generation,
                              (unsigned long long)tmo);
        /* Back as they were: our reference first (the last call may end
         * right now), then the hook goes back to the close queue. */
        for (size_t i = 0; i < n; i++) {
            step *s = &steps[i];
            if (!s->deferred)
                continue;
            th_plugin_ref(s->old->p);
            pthread_mutex_lock(&r->mu);
            s->old->excl = false;
            pthread_mutex_unlock(&r->mu);
            th_error e;
            if (th_registry_add(r->t.reg, s->old->p, &e) != 0) {
                th_log_error("reload: plugin %s: cannot put generation %llu back: %s",
                             s->old->name, (unsigned long long)s->old->generation,
                             e.msg);
                th_plugin_unref(s->old->p);
            } else {
                mark_back(r, s->old);
            }
        }
        return rc;
    }
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        step *s = &steps[i];
        if (!s->deferred)
            continue;
        uint64_t og = s->old->generation;
        close_gen(r, s->old); /* fini (every old call ended), dlclose */
        s->old = NULL;
        s->excl_closed = true;
        s->deferred = false;
        th_buf block = TH_BUF_INIT;
        th_error e;
        th_error_clear(&e);
        int irc = th_config_plugin_block(nc, s->pc, s->np->config_params,
                                         s->np->n_config_params, &block, &e);
        if (irc == 0)
            irc = th_plugin_init(s->np, block.data, block.len, &e);
        th_buf_destroy(&block);
        if (irc) {
            if (rc == 0)
                rc = th_error_set(err, irc, "plugin %s: generation %llu was closed "
                                  "(exclusive_reload) and init of generation %llu "
                                  "failed: the plugin is not running: %s",
                                  s->pc->name, (unsigned long long)og,
                                  (unsigned long long)s->np->generation, e.msg);
            continue;
        }
        th_log_info("reload: plugin %s: generation %llu closed, generation %llu "
                    "initialized (exclusive_reload)",
                    s->pc->name, (unsigned long long)og,
                    (unsigned long long)s->np->generation);
    }
    return rc;
}

/* ---- one reload ---------------------------------------------------------------------- */

static void add_item(th_reload_result *res, const char *name, th_reload_action a,
                     uint64_t generation)
{
    switch (a) {
    case TH_RL_UNCHANGED: res->n_unchanged++; return;
    case TH_RL_CHANGED: res->n_changed++; break;
    case TH_RL_ADDED: res->n_added++; break;
    case TH_RL_REMOVED: res->n_removed++; break;
    case TH_RL_SKIPPED: res->n_skipped++; break;
    }
    if (res->n_items < TH_RELOAD_MAX_REPORTED) {
        th_reload_item *it = &res->items[res->n_items++];
        snprintf(it->name, sizeof it->name, "%s", name);
        it->action = a;
        it->generation = generation;
    }
}

double th_reload_le_s(unsigned i)
{
    static const double le[TH_RELOAD_LE] = {0.005, 0.01, 0.025, 0.05, 0.1,
                                            0.25,  0.5,  1,     2.5,  10};
    return i < TH_RELOAD_LE ? le[i] : 1e300;
}

void th_reload_stats_duration(th_reload_stats *st, int64_t total_ns)
{
    double s = total_ns > 0 ? (double)total_ns / 1e9 : 0;
    st->dur_sum_s += s;
    for (unsigned i = 0; i < TH_RELOAD_LE; i++)
        st->dur_le[i] += s <= th_reload_le_s(i);
}

static void finish(th_reloader *r, th_reload_result *res, int64_t t0)
{
    res->total_ns = now_ns() - t0;
    pthread_mutex_lock(&r->mu);
    r->st.reloads++;
    r->st.last_rc = res->rc;
    r->st.last_wall_ms = wall_ms();
    th_reload_stats_duration(&r->st, res->total_ns);
    if (res->rc == 0) {
        r->st.ok++;
        r->st.last_error[0] = '\0';
        r->st.last_swap_ns = res->swap_ns;
        if (res->swap_ns > r->st.max_swap_ns)
            r->st.max_swap_ns = res->swap_ns;
    } else {
        r->st.failed++;
        snprintf(r->st.last_error, sizeof r->st.last_error, "%s", res->err.msg);
    }
    pthread_mutex_unlock(&r->mu);
    if (res->rc && res->incomplete) { /* the watcher retries: not broken */
        th_log_info("reload #%llu: nothing changed, a file is still being "
                    "written: %s", (unsigned long long)res->seq, res->err.msg);
        return;
    }
    if (res->rc) {
        th_log_error("reload #%llu failed, nothing changed: %s",
                     (unsigned long long)res->seq, res->err.msg);
        return;
    }
    char line[768];
    size_t k = 0;
    line[0] = '\0';
    for (size_t i = 0; i < res->n_items && k < sizeof line - 80; i++)
        k += (size_t)snprintf(line + k, sizeof line - k, "%s%s g%llu %s",
                              i ? ", " : "", res->items[i].name,
                              (unsigned long long)res->items[i].generation,
                              th_reload_action_name(res->items[i].action));
    th_log_info("reload #%llu ok: %s%s%u unchanged%s, swap %.3f ms, total %.1f ms",
                (unsigned long long)res->seq, line, k ? "; " : "", res->n_unchanged,
                res->config_changed ? ", config changed" : "",
                (double)res->swap_ns / 1e6, (double)res->total_ns / 1e6);
}

/* do_reload's plan for one plugin of the new config: its running
 * generation (s->old) and whether it changed; unchanged when its entry
 * is equal and its file is the same (or was rebuilt with the same
 * bytes: s->refresh_id). */
static void plan_action(th_reloader *r, const th_config *oc, step *s,
                        bool asked)
{
    const th_plugin_cfg *pc = s->pc;
    pthread_mutex_lock(&r->mu);
    s->old = current_gen(r, pc->name);
    pthread_mutex_unlock(&r->mu);
    const th_plugin_cfg *opc = cfg_entry(oc, pc->name);
    s->action = s->old ? TH_RL_CHANGED : TH_RL_ADDED;
    if (!s->old || !opc || !th_plugin_cfg_equal(opc, pc) || asked)
        return; /* asked: the plugin's tools changed (tools_changed()) */
    th_file_id now;
    if (th_file_id_of(pc->path, &now, NULL) != 0)
        return;
    if (th_file_id_equal(&now, &s->old->id)) {
        s->action = TH_RL_UNCHANGED;
    } else if (s->old->copy && th_file_same_content(pc->path, s->old->copy)) {
        s->action = TH_RL_UNCHANGED; /* rebuilt, same bytes */
        s->refresh_id = true;
        s->id = now;
    }
}

/* do_reload: a new generation prepared for a step that is not unchanged.
 * An optional plugin that fails is skipped (0); any other failure is
 * the reload's (res->err, res->incomplete). */
static int plan_prepare(th_reloader *r, th_config *nc, step *s,
                        th_reload_result *res)
{
    const th_plugin_cfg *pc = s->pc;
    bool incomplete = false;
    th_error e;
    th_error_clear(&e);
    uint64_t gen = s->old ? s->old->generation + 1 : 1;
    int rc = prepare(r, nc, pc, gen, s->old, &s->np, &s->ng, &s->deferred,
                     &incomplete, &e);
    if (rc == 0)
        return 0;
    th_plugin_load_error(nc, pc, &e);
    if (incomplete) {
        res->incomplete = true;
        th_error_set(&res->err, rc, "%s (the file looks half-written; "
                     "trying again after the debounce)", e.msg);
    } else if (pc->optional) {
        th_log_warn("reload: optional plugin %s skipped%s: %s", pc->name,
                    s->old ? ", its running generation stays" : "", e.msg);
        s->action = TH_RL_SKIPPED;
        return 0;
    } else {
        res->err = e;
    }
    return rc;
}

/* do_reload: the steps of the plugins the new config no longer names. */
static size_t plan_removed(th_reloader *r, const th_config *oc,
                           const th_config *nc, step *steps, size_t n)
{
    pthread_mutex_lock(&r->mu);
    for (th_gen *g = r->gens; g; g = g->next)
        if (g->current && cfg_entry(oc, g->name) && !cfg_entry(nc, g->name)) {
            step *s = &steps[n++];
            s->old = g;
            s->action = TH_RL_REMOVED;
        }
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* do_reload, once applied or not (rc): generations prepared but not
 * applied are discarded (no call saw them); unchanged plugins rebuilt
 * with the same bytes get their new identity. */
static void steps_settle(th_reloader *r, step *steps, size_t n, int rc)
{
    for (size_t i = 0; i < n; i++) {
        step *s = &steps[i];
        if (s->np && !s->applied) {
            discard(r, s->np, s->ng);
            s->np = NULL;
        }
        if (rc == 0 && s->refresh_id) {
            pthread_mutex_lock(&r->mu);
            s->old->id = s->id;
            pthread_mutex_unlock(&r->mu);
        }
    }
}

/* do_reload, applied: every step in res->items; true when one changed
 * the tools. */
static bool steps_report(th_reload_result *res, const step *steps, size_t n)
{
    bool changed = false;
    for (size_t i = 0; i < n; i++) {
        const step *s = &steps[i];
        const char *name = s->pc ? s->pc->name : s->old->name;
        uint64_t g = s->np ? s->np->generation : s->old ? s->old->generation : 0;
        add_item(res, name, s->action, g);
        if (s->action != TH_RL_UNCHANGED && s->action != TH_RL_SKIPPED)
            changed = true;
    }
    return changed;
}

/* do_reload, applied with a changed config: nc becomes the current one
 * (handed to the host's swap_config, or kept in r->owned); without memory
 * to keep it, the old one stays and nc is freed. */
static void config_take(th_reloader *r, const th_config *oc, th_config *nc,
                        th_reload_result *res)
{
    pthread_mutex_lock(&r->mu);
    r->cfg = nc;
    th_config **ow = NULL;
    if (!r->t.swap_config &&
        (ow = realloc(r->owned, (r->n_owned + 1) * sizeof *ow)) != NULL) {
        r->owned = ow;
        r->owned[r->n_owned++] = nc;
    }
    pthread_mutex_unlock(&r->mu);
    if (r->t.swap_config) {
        r->t.swap_config(r->t.ud, nc);
    } else if (!ow) {
        /* Cannot keep it: go on with the old config (plugins are
         * swapped already; toolsets stay as they were). */
        pthread_mutex_lock(&r->mu);
        r->cfg = oc;
        pthread_mutex_unlock(&r->mu);
        th_config_free(nc);
        res->config_changed = false;
        th_log_error("reload: out of memory keeping the new config");
    }
}

static bool names_have(char *const *v, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], name) == 0)
            return true;
    return false;
}

static void names_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* One reload.  `asked` (n_asked names): plugins that asked to be loaded
 * again (tools_changed()), loaded anew even when unchanged (requests
 * that come within host.reload_debounce of the first fold into it).  `full`: read
 * the config file again; otherwise the running config stays (only the
 * asked plugins are loaded again). */
static int do_reload(th_reloader *r, th_reload_result *res, bool full,
                     char *const *asked, size_t n_asked)
{
    memset(res, 0, sizeof *res);
    int64_t t0 = now_ns();
    pthread_mutex_lock(&r->mu);
    res->seq = ++r->seq;
    const th_config *oc = r->cfg;
    pthread_mutex_unlock(&r->mu);

    th_config *nc = NULL;
    int rc = 0;
    if (full)
        rc = th_config_load(oc->path, &nc, &res->err);
    else
        nc = (th_config *)oc; /* kept as is: never freed nor taken here */
    if (rc) {
        res->rc = rc;
        finish(r, res, t0);
        return rc;
    }

    size_t cap = nc->n_plugins + oc->n_plugins + 1;
    step *steps = calloc(cap, sizeof *steps);
    if (!steps) {
        th_config_free(nc);
        res->rc = th_error_set(&res->err, TH_ENOMEM, "out of memory");
        finish(r, res, t0);
        return res->rc;
    }
    size_t n = 0;

    /* Plan, and prepare every new generation. */
    for (size_t i = 0; rc == 0 && i < nc->n_plugins; i++) {
        step *s = &steps[n++];
        s->pc = &nc->plugins[i];
        plan_action(r, oc, s, names_have(asked, n_asked, s->pc->name));
        if (s->action != TH_RL_UNCHANGED)
            rc = plan_prepare(r, nc, s, res);
    }
    if (rc == 0)
        n = plan_removed(r, oc, nc, steps, n);
    if (rc == 0)
        rc = check_future(r, nc, steps, n, &res->err);
    if (rc == 0 && r->t.check_config)
        rc = r->t.check_config(r->t.ud, nc, &res->err);
    if (rc == 0)
        rc = exclusive_swap(r, nc, steps, n, &res->err);
    res->prepare_ns = now_ns() - t0;

    if (rc == 0) {
        int64_t s0 = now_ns();
        rc = apply(r, steps, n, &res->err);
        res->swap_ns = now_ns() - s0;
    }
    steps_settle(r, steps, n, rc);
    bool changed = false;
    if (rc == 0) {
        changed = steps_report(res, steps, n);
        res->config_changed = !th_ynode_equal(oc->root, nc->root);
    }
    free(steps);
    if (rc == 0 && res->config_changed && nc != oc) {
        config_take(r, oc, nc, res);
        nc = NULL;
    }
    if (nc && nc != oc)
        th_config_free(nc);
    res->tools_changed = rc == 0 && (changed || res->config_changed);
    res->rc = rc;
    finish(r, res, t0);
    if (res->tools_changed && r->t.tools_changed)
        r->t.tools_changed(r->t.ud);
    return rc;
}

int th_reload_now(th_reloader *r, th_reload_result *res)
{
    pthread_mutex_lock(&r->run_mu);
    int rc = do_reload(r, res, true, NULL, 0);
    pthread_mutex_unlock(&r->run_mu);
    return rc;
}

/* ---- the thread ------------------------------------------------------------------------ */

static void answer(waiter *w, const th_reload_result *res)
{
    while (w) {
        waiter *n = w->next;
        if (w->fn)
            w->fn(res, w->ud);
        free(w);
        w = n;
    }
}

static void *reload_thread(void *arg)
{
    th_reloader *r = arg;
    pthread_setname_np(pthread_self(), "th-reload");
    /* the copies of hosts that are gone, off the start-up path */
    th_copydir_sweep(r->dir);
    th_reload_result *res = malloc(sizeof *res);
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (r->q_head) {
            th_gen *g = r->q_head;
            r->q_head = r->q_tail = NULL;
            r->closing_batch = true;
            pthread_mutex_unlock(&r->mu);
            while (g) {
                th_gen *nx = g->qnext;
                close_gen(r, g);
                g = nx;
            }
            pthread_mutex_lock(&r->mu);
            r->closing_batch = false;
            if (!r->q_head)
                pthread_cond_broadcast(&r->idle_cv);
            continue;
        }
        if (r->n_asked && !r->want_any && !r->stop) {
            /* only plugins asked: host.plugin_reload_min_interval */
            int64_t now = now_ns();
            int64_t due = r->asked_due_ns > r->asked_next_ns ? r->asked_due_ns
                                                             : r->asked_next_ns;
            if (now < due) {
                if (!r->asked_logged && r->asked_next_ns > r->asked_due_ns) {
                    r->asked_logged = true;
                    r->st.asked_waits++;
                    th_log_info("reload: plugin %s%s waits %lld ms for its "
                                "reload (host.plugin_reload_min_interval)",
                                r->asked[0], r->n_asked > 1 ? " and others" : "",
                                (long long)((r->asked_next_ns - now) / 1000000));
                }
                struct timespec ts = {.tv_sec = (time_t)(due / 1000000000),
                                      .tv_nsec = (long)(due % 1000000000)};
                pthread_cond_timedwait(&r->cv, &r->mu, &ts);
                continue;
            }
        }
        if (r->n_asked && !r->want_any && !r->stop) {
            char **asked = r->asked;
            size_t n_asked = r->n_asked;
            r->asked = NULL;
            r->n_asked = r->cap_asked = 0;
            r->asked_logged = false;
            r->st.asked_reloads++;
            pthread_mutex_unlock(&r->mu);
            if (res) {
                pthread_mutex_lock(&r->run_mu);
                do_reload(r, res, false, asked, n_asked);
                pthread_mutex_unlock(&r->run_mu);
            }
            names_free(asked, n_asked);
            pthread_mutex_lock(&r->mu);
            r->asked_next_ns = now_ns() +
                (int64_t)r->cfg->host.plugin_reload_min_interval_ms * 1000000;
            continue;
        }
        if (r->want_any) {
            waiter *w = r->want;
            r->want = NULL;
            r->want_any = false;
            bool stop = r->stop;
            char **asked = r->asked; /* a full reload takes them along */
            size_t n_asked = r->n_asked;
            r->asked = NULL;
            r->n_asked = r->cap_asked = 0;
            r->asked_logged = false;
            pthread_mutex_unlock(&r->mu);
            if (res && !stop && n_asked) {
                pthread_mutex_lock(&r->run_mu);
                do_reload(r, res, true, asked, n_asked);
                pthread_mutex_unlock(&r->run_mu);
                answer(w, res);
                names_free(asked, n_asked);
                pthread_mutex_lock(&r->mu);
                continue;
            }
            names_free(asked, n_asked);
            if (!res || stop) {
                th_reload_result tmp;
                memset(&tmp, 0, sizeof tmp);
                tmp.rc = th_error_set(&tmp.err, stop ? TH_ESTATE : TH_ENOMEM,
                                      stop ? "the host is stopping"
                                           : "out of memory");
                answer(w, &tmp);
            } else {
                th_reload_now(r, res);
                answer(w, res);
            }
            pthread_mutex_lock(&r->mu);
            continue;
        }
        if (r->stop)
            break;
        pthread_cond_wait(&r->cv, &r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    free(res);
    return NULL;
}

int th_reload_request(th_reloader *r, th_reload_done_fn done, void *ud)
{
    waiter *w = NULL;
    if (done && !(w = malloc(sizeof *w)))
        return TH_ENOMEM;
    pthread_mutex_lock(&r->mu);
    if (r->stop) {
        pthread_mutex_unlock(&r->mu);
        free(w);
        return TH_ESTATE;
    }
    r->st.requests++;
    if (w) { /* FIFO: answered in the order they came */
        w->fn = done;
        w->ud = ud;
        w->next = NULL;
        waiter **pp = &r->want;
        while (*pp)
            pp = &(*pp)->next;
        *pp = w;
    }
    r->want_any = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* tools_changed() of a generation (th_plugin_set_tools_changed_hook):
 * queue its plugin's name for a reload of the thread.  Any thread, no
 * wait: one lock, at most one allocation. */
static int asked_hook(th_plugin *p, const char *reason)
{
    th_gen *g = __atomic_load_n((th_gen **)&p->user, __ATOMIC_ACQUIRE);
    if (!g)
        return TOOLHOST_ESTATE; /* in init(), or not one of a reloader's */
    th_reloader *r = g->r;
    pthread_mutex_lock(&r->mu);
    if (r->stop) {
        pthread_mutex_unlock(&r->mu);
        return TOOLHOST_ESTATE;
    }
    r->st.asked_requests++;
    if (names_have(r->asked, r->n_asked, g->name)) { /* folded */
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    if (r->n_asked == r->cap_asked) {
        size_t cap = r->cap_asked ? 2 * r->cap_asked : 4;
        char **v = realloc(r->asked, cap * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&r->mu);
            return TOOLHOST_ENOMEM;
        }
        r->asked = v;
        r->cap_asked = cap;
    }
    char *name = strdup(g->name);
    if (!name) {
        pthread_mutex_unlock(&r->mu);
        return TOOLHOST_ENOMEM;
    }
    if (r->n_asked == 0) /* a burst folds into one reload */
        r->asked_due_ns = now_ns() +
            (int64_t)r->cfg->host.reload_debounce_ms * 1000000;
    r->asked[r->n_asked++] = name; /* the thread may free it once mu goes */
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    th_log_info("plugin '%s' asked for its tools to be listed again: %s",
                g->name, reason); /* g lives while its plugin is loaded */
    return 0;
}

typedef struct sync_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    th_reload_result *res;
} sync_wait;

static void sync_done(const th_reload_result *res, void *ud)
{
    sync_wait *s = ud;
    pthread_mutex_lock(&s->mu);
    *s->res = *res;
    s->done = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int th_reload_run(th_reloader *r, th_reload_result *res)
{
    sync_wait s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, res};
    int rc = th_reload_request(r, sync_done, &s);
    if (rc) {
        memset(res, 0, sizeof *res);
        res->rc = th_error_set(&res->err, rc, "%s", rc == TH_ESTATE ? "the host is stopping"
                                                                    : "out of memory");
        return rc;
    }
    pthread_mutex_lock(&s.mu);
    while (!s.done)
        pthread_cond_wait(&s.cv, &s.mu);
    pthread_mutex_unlock(&s.mu);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
    return res->rc;
}

bool th_reload_quiesce(th_reloader *r, int64_t timeout_ms)
{
    struct timespec ts;
    th_deadline_rt(&ts, timeout_ms);
    pthread_mutex_lock(&r->mu);
    while ((r->q_head || r->closing_batch) &&
           pthread_cond_timedwait(&r->idle_cv, &r->mu, &ts) != ETIMEDOUT)
        ;
    bool idle = !r->q_head && !r->closing_batch;
    pthread_mutex_unlock(&r->mu);
    return idle;
}

/* ---- life -------------------------------------------------------------------------------- */

static int adopt(th_reloader *r, const th_config *cfg, th_error *err)
{
    for (size_t i = 0; i < cfg->n_plugins; i++) {
        const th_plugin_cfg *pc = &cfg->plugins[i];
        th_plugin *p = th_registry_plugin(r->t.reg, pc->name);
        if (!p || p->user)
            continue; /* not loaded (optional), or one of ours */
        th_file_id id;
        memset(&id, 0, sizeof id);
        (void)th_file_id_of(pc->path, &id, NULL);
        th_gen *g = gen_new(r, p, pc->path, NULL, &id);
        if (!g)
            return th_error_set(err, TH_ENOMEM, "out of memory");
        g->current = true;
        __atomic_store_n((th_gen **)&p->user, g, __ATOMIC_RELEASE);
        p->on_last_unref = on_last_unref;
        pthread_mutex_lock(&r->mu);
        link_gen(r, g);
        pthread_mutex_unlock(&r->mu);
    }
    return 0;
}

int th_reloader_new(const th_reload_target *target, const th_config *cfg,
                    th_reloader **out, th_error *err)
{
    *out = NULL;
    th_reloader *r = calloc(1, sizeof *r);
    if (!r)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    r->t = *target;
    r->cfg = cfg;
    pthread_mutex_init(&r->run_mu, NULL);
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca; /* cv's timed wait counts on now_ns()'s clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&r->idle_cv, NULL);
    pthread_cond_init(&r->excl_cv, NULL);
    int rc = th_copydir_open_ex(cfg->host.state_dir, true, &r->dir, err);
    if (rc == 0 && (rc = pthread_create(&r->thread, NULL, reload_thread, r)) != 0)
        rc = th_error_set(err, TH_ENOMEM, "cannot start the reload thread: %s",
                          strerror(rc));
    else if (rc == 0)
        r->started = true;
    if (rc == 0)
        rc = adopt(r, cfg, err);
    if (rc) {
        th_reloader_free(r);
        return rc;
    }
    th_plugin_set_tools_changed_hook(asked_hook);
    *out = r;
    return 0;
}

int th_reloader_load(th_reloader *r, const th_config *cfg,
                     const th_plugin_cfg *pc, th_plugin **out, th_error *err)
{
    pthread_mutex_lock(&r->run_mu);
    th_gen *g = NULL;
    bool incomplete = false;
    int rc = prepare(r, cfg, pc, 1, NULL, out, &g, NULL, &incomplete, err);
    if (rc == 0)
        enter(r, g);
    pthread_mutex_unlock(&r->run_mu);
    return rc;
}

void th_reloader_stop_thread(th_reloader *r)
{
    if (!r || !r->started)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    r->started = false;
}

void th_reloader_free(th_reloader *r)
{
    if (!r)
        return;
    th_reloader_stop_thread(r);
    /* Released after the thread's last look: close them here (no call
     * can use them any more). */
    pthread_mutex_lock(&r->mu);
    th_gen *q = r->q_head;
    r->q_head = r->q_tail = NULL;
    pthread_mutex_unlock(&r->mu);
    while (q) {
        th_gen *nx = q->qnext;
        close_gen(r, q);
        q = nx;
    }
    /* Generations still held by someone (a leak elsewhere): detach them so
     * a late unref destroys them in place instead of reaching us. */
    for (th_gen *g = r->gens, *n; g; g = n) {
        n = g->next;
        if (g->p) {
            th_log_warn("reload: plugin %s generation %llu is still referenced "
                        "when the reloader ends", g->name,
                        (unsigned long long)g->generation);
            g->p->on_last_unref = NULL;
            g->p->user = NULL;
        }
        gen_free(g);
    }
    names_free(r->asked, r->n_asked);
    for (size_t i = 0; i < r->n_owned; i++)
        th_config_free(r->owned[i]);
    free(r->owned);
    th_copydir_close(r->dir);
    pthread_mutex_destroy(&r->run_mu);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->idle_cv);
    pthread_cond_destroy(&r->excl_cv);
    free(r);
}

/* ---- queries --------------------------------------------------------------------------- */

void th_reload_note_retry(th_reloader *r)
{
    pthread_mutex_lock(&r->mu);
    r->st.retries++;
    pthread_mutex_unlock(&r->mu);
}

void th_reload_get_stats(th_reloader *r, th_reload_stats *out)
{
    pthread_mutex_lock(&r->mu);
    *out = r->st;
    pthread_mutex_unlock(&r->mu);
}

const char *th_reload_config_path(th_reloader *r)
{
    pthread_mutex_lock(&r->mu);
    const char *p = r->cfg->path;
    pthread_mutex_unlock(&r->mu);
    return p;
}

typedef struct gen_view {
    char *name, *path, *load_path;
    uint64_t generation;
} gen_view;

static int view_cmp(const void *a, const void *b)
{
    return strcmp(((const gen_view *)a)->name, ((const gen_view *)b)->name);
}

int th_reload_foreach(th_reloader *r,
                      int (*fn)(const char *name, uint64_t generation,
                                const char *path, const char *load_path, void *ud),
                      void *ud)
{
    pthread_mutex_lock(&r->mu);
    size_t n = 0;
    for (th_gen *g = r->gens; g; g = g->next)
        n += g->current;
    gen_view *v = calloc(n ? n : 1, sizeof *v);
    size_t k = 0;
    bool oom = !v;
    for (th_gen *g = r->gens; v && g; g = g->next) {
        if (!g->current)
            continue;
        v[k].name = strdup(g->name);
        v[k].path = strdup(g->path);
        v[k].load_path = strdup(g->copy ? g->copy : g->path);
        v[k].generation = g->generation;
        k++;
        if (!v[k - 1].name || !v[k - 1].path || !v[k - 1].load_path)
            oom = true;
    }
    pthread_mutex_unlock(&r->mu);
    int rc = oom ? TH_ENOMEM : 0;
    if (v && !oom) {
        qsort(v, k, sizeof *v, view_cmp);
        for (size_t i = 0; i < k && rc == 0; i++)
            rc = fn(v[i].name, v[i].generation, v[i].path, v[i].load_path, ud);
    }
    for (size_t i = 0; v && i < k; i++) {
        free(v[i].name);
        free(v[i].path);
        free(v[i].load_path);
    }
    free(v);
    return rc;
}

static int add_path(char ***v, size_t *n, const char *p)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*v)[i], p) == 0)
            return 0;
    char **nv = realloc(*v, (*n + 1) * sizeof *nv);
    if (!nv)
        return TH_ENOMEM;
    *v = nv;
    if (!(nv[*n] = strdup(p)))
        return TH_ENOMEM;
    (*n)++;
    return 0;
}

/* The folder of `file` with "..", "." and folder symlinks resolved (the
 * file itself may be a symlink: its own folder is meant); NULL when the
 * folder does not exist. */
static char *norm_dir(const char *file, char *out)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", file);
    return realpath(dirname(buf), out);
}

static int add_dir_of(char ***v, size_t *n, const char *file)
{
    char d[PATH_MAX];
    if (!norm_dir(file, d))
        return 0; /* nothing to watch there yet */
    return add_path(v, n, d);
}

void th_reload_paths_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

int th_reload_watch_paths(th_reloader *r, char ***out, size_t *nout)
{
    char **v = NULL;
    size_t n = 0;
    int rc = 0;
    pthread_mutex_lock(&r->mu);
    rc = add_dir_of(&v, &n, r->cfg->path);
    char real[PATH_MAX];
    if (rc == 0 && realpath(r->cfg->path, real))
        rc = add_dir_of(&v, &n, real);
    for (th_gen *g = r->gens; rc == 0 && g; g = g->next) {
        if (!g->current)
            continue;
        rc = add_dir_of(&v, &n, g->path);
        if (rc == 0 && g->real)
            rc = add_dir_of(&v, &n, g->real);
    }
    /* Optional plugins that failed and entries not loaded yet. */
    for (size_t i = 0; rc == 0 && i < r->cfg->n_plugins; i++)
        rc = add_dir_of(&v, &n, r->cfg->plugins[i].path);
    pthread_mutex_unlock(&r->mu);
    if (rc) {
        th_reload_paths_free(v, n);
        return rc;
    }
    *out = v;
    *nout = n;
    return 0;
}

/* Whether dir/base names `path`: through its folder (normalized), or,
 * for a symlink, through the folder of what it points to. */
static bool same_file(const char *dir, const char *base, const char *path)
{
    if (!path)
        return false;
    const char *slash = strrchr(path, '/');
    if (!slash || strcmp(slash + 1, base) != 0)
        return false;
    char d[PATH_MAX];
    return norm_dir(path, d) && strcmp(d, dir) == 0;
}

static bool same_file_or_target(const char *dir, const char *base,
                                const char *path)
{
    if (same_file(dir, base, path))
        return true;
    char real[PATH_MAX];
    return path && realpath(path, real) && same_file(dir, base, real);
}

bool th_reload_is_watched(th_reloader *r, const char *dir, const char *base)
{
    bool hit = false;
    pthread_mutex_lock(&r->mu);
    const th_config *c = r->cfg;
    hit = same_file_or_target(dir, base, c->path);
    for (th_gen *g = r->gens; !hit && g; g = g->next)
        hit = g->current && (same_file_or_target(dir, base, g->path) ||
                             same_file(dir, base, g->real));
    for (size_t i = 0; !hit && i < c->n_plugins; i++)
        hit = same_file_or_target(dir, base, c->plugins[i].path);
    pthread_mutex_unlock(&r->mu);
    return hit;
}

/* ---- msgpack forms ------------------------------------------------------------------- */


int th_reload_result_pack(const th_reload_result *res, msgpack_packer *pk)
{
    int e = msgpack_pack_map(pk, res->rc ? 11 : 10);
    e |= th_pack_cstr(pk, "ok");
    e |= res->rc ? msgpack_pack_false(pk) : msgpack_pack_true(pk);
    e |= th_pack_cstr(pk, "seq");
    e |= msgpack_pack_uint64(pk, res->seq);
    if (res->rc) {
        e |= th_pack_cstr(pk, "error");
        e |= msgpack_pack_map(pk, 2);
        e |= th_pack_cstr(pk, "code");
        e |= th_pack_cstr(pk, th_err_name(res->rc));
        e |= th_pack_cstr(pk, "message");
        e |= th_pack_cstr(pk, res->err.msg);
    }
    e |= th_pack_cstr(pk, "incomplete");
    e |= res->incomplete ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    e |= th_pack_cstr(pk, "config_changed");
    e |= res->config_changed ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    e |= th_pack_cstr(pk, "tools_changed");
    e |= res->tools_changed ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    e |= th_pack_cstr(pk, "plugins");
    e |= msgpack_pack_array(pk, res->n_items);
    for (size_t i = 0; i < res->n_items; i++) {
        e |= msgpack_pack_map(pk, 3);
        e |= th_pack_cstr(pk, "name");
        e |= th_pack_cstr(pk, res->items[i].name);
        e |= th_pack_cstr(pk, "action");
        e |= th_pack_cstr(pk, th_reload_action_name(res->items[i].action));
        e |= th_pack_cstr(pk, "generation");
        e |= msgpack_pack_uint64(pk, res->items[i].generation);
    }
    e |= th_pack_cstr(pk, "unchanged");
    e |= msgpack_pack_uint32(pk, res->n_unchanged);
    e |= th_pack_cstr(pk, "prepare_ms");
    e |= msgpack_pack_double(pk, (double)res->prepare_ns / 1e6);
    e |= th_pack_cstr(pk, "swap_ms");
    e |= msgpack_pack_double(pk, (double)res->swap_ns / 1e6);
    e |= th_pack_cstr(pk, "total_ms");
    e |= msgpack_pack_double(pk, (double)res->total_ns / 1e6);
    return e;
}

typedef struct gens_ud {
    msgpack_packer pk; /* into buf */
    th_buf buf;
    uint32_t n;
    int e;
} gens_ud;

static int pack_gen(const char *name, uint64_t g, const char *path,
                    const char *lp, void *ud)
{
    gens_ud *c = ud;
    c->n++;
    c->e |= th_pack_cstr(&c->pk, name);
    c->e |= msgpack_pack_map(&c->pk, 3);
    c->e |= th_pack_cstr(&c->pk, "generation");
    c->e |= msgpack_pack_uint64(&c->pk, g);
    c->e |= th_pack_cstr(&c->pk, "path");
    c->e |= th_pack_cstr(&c->pk, path);
    c->e |= th_pack_cstr(&c->pk, "loaded_from");
    c->e |= th_pack_cstr(&c->pk, lp);
    return 0;
}

int th_reload_stats_pack(th_reloader *r, msgpack_packer *pk)
{
    th_reload_stats st;
    th_reload_get_stats(r, &st);
    /* One snapshot of the running generations, packed aside, then
     * appended after its map header. */
    gens_ud c;
    memset(&c, 0, sizeof c);
    th_buf_init(&c.buf);
    msgpack_packer_init(&c.pk, &c.buf, th_buf_msgpack_write);
    int fe = th_reload_foreach(r, pack_gen, &c);
    int e = msgpack_pack_map(pk, 18);
    e |= th_pack_cstr(pk, "reloads");
    e |= msgpack_pack_uint64(pk, st.reloads);
    e |= th_pack_cstr(pk, "ok");
    e |= msgpack_pack_uint64(pk, st.ok);
    e |= th_pack_cstr(pk, "failed");
    e |= msgpack_pack_uint64(pk, st.failed);
    e |= th_pack_cstr(pk, "requests");
    e |= msgpack_pack_uint64(pk, st.requests);
    e |= th_pack_cstr(pk, "retries");
    e |= msgpack_pack_uint64(pk, st.retries);
    e |= th_pack_cstr(pk, "plugin_requests");
    e |= msgpack_pack_uint64(pk, st.asked_requests);
    e |= th_pack_cstr(pk, "plugin_reloads");
    e |= msgpack_pack_uint64(pk, st.asked_reloads);
    e |= th_pack_cstr(pk, "plugin_waits");
    e |= msgpack_pack_uint64(pk, st.asked_waits);
    e |= th_pack_cstr(pk, "last_ok");
    e |= st.reloads == 0 ? msgpack_pack_nil(pk)
                         : st.last_rc == 0 ? msgpack_pack_true(pk)
                                           : msgpack_pack_false(pk);
    e |= th_pack_cstr(pk, "last_error");
    e |= st.last_error[0] ? th_pack_cstr(pk, st.last_error) : msgpack_pack_nil(pk);
    e |= th_pack_cstr(pk, "last_at_ms");
    e |= msgpack_pack_int64(pk, st.last_wall_ms);
    e |= th_pack_cstr(pk, "last_swap_ms");
    e |= msgpack_pack_double(pk, (double)st.last_swap_ns / 1e6);
    e |= th_pack_cstr(pk, "max_swap_ms");
    e |= msgpack_pack_double(pk, (double)st.max_swap_ns / 1e6);
    e |= th_pack_cstr(pk, "draining");
    e |= msgpack_pack_uint64(pk, st.draining);
    e |= th_pack_cstr(pk, "closed");
    e |= msgpack_pack_uint64(pk, st.closed);
    e |= th_pack_cstr(pk, "unloaded");
    e |= msgpack_pack_uint64(pk, st.unloaded);
    e |= th_pack_cstr(pk, "still_mapped");
    e |= msgpack_pack_uint64(pk, st.still_mapped);
    e |= th_pack_cstr(pk, "plugins");
    e |= msgpack_pack_map(pk, c.n);
    if (c.buf.len)
        e |= pk->callback(pk->data, (const char *)c.buf.data, c.buf.len);
    th_buf_destroy(&c.buf);
    return e | c.e | fe;
}
