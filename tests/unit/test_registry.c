/* test_registry.c - the tool registry: lookups, duplicate names across
 * plugins, replace/remove, pinning (a removed generation lives until its
 * last call is released, fini() exactly once), and concurrent
 * acquire/release against replacement from several threads. */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "th/tool.h"
#include "base/hazard.h" /* white-box: a lookup held inside its section */

static atomic_int inits, finis;

static int run(void *s, const toolhost_tool *t, toolhost_call *c,
               const uint8_t *a, size_t n)
{
    (void)s, (void)t, (void)c, (void)a, (void)n;
    return TOOLHOST_OK;
}

static int p_init(const toolhost_host_api *host, const uint8_t *c, size_t n,
                  void **state, char *err, size_t size)
{
    (void)host, (void)c, (void)n, (void)err, (void)size;
    atomic_fetch_add(&inits, 1);
    *state = (void *)&inits;
    return 0;
}

static void p_fini(void *state)
{
    (void)state;
    atomic_fetch_add(&finis, 1);
}

#define T(name)                                                               \
    {sizeof(toolhost_tool), name, "Tool " name, NULL, NULL, 0,                 \
     TOOLHOST_SEM_TEXT, TOOLHOST_SEM_ERROR, 0, run, NULL, NULL, NULL}
#define PLUGIN(name, tools, n)                                                \
    {sizeof(toolhost_plugin), TOOLHOST_ABI_MAJOR, TOOLHOST_ABI_MINOR, name,   \
     "1", "Plugin " name, NULL, 0, p_init, p_fini, tools, n}

static const toolhost_tool alpha_tools[] = {T("zeta"), T("alpha_a"),
                                            T("mid")};
static const toolhost_plugin alpha = PLUGIN("alpha", alpha_tools, 3);
static const toolhost_tool beta_tools[] = {T("beta_b"), T("beta_c")};
static const toolhost_plugin beta = PLUGIN("beta", beta_tools, 2);
/* Same plugin name as beta, a later generation: drops beta_c, adds beta_d. */
static const toolhost_tool beta2_tools[] = {T("beta_b"), T("beta_d")};
static const toolhost_plugin beta2 = PLUGIN("beta", beta2_tools, 2);
/* Clashes with alpha's "mid". */
static const toolhost_tool clash_tools[] = {T("gamma"), T("mid")};
static const toolhost_plugin clash = PLUGIN("gamma", clash_tools, 2);
static const toolhost_plugin beta_clash = PLUGIN("beta", clash_tools, 2);

/* A built-in generation with init() done. */
static th_plugin *make(const toolhost_plugin *d)
{
    th_plugin *p = NULL;
    th_error e;
    if (th_plugin_builtin(d, &p, &e) != 0 || th_plugin_init(p, NULL, 0, &e)) {
        fprintf(stderr, "make: %s\n", e.msg);
        return NULL;
    }
    return p;
}

static void reset(void)
{
    atomic_store(&inits, 0);
    atomic_store(&finis, 0);
}

static int collect(const th_tool *t, void *ud)
{
    char *s = ud;
    strcat(s, t->name);
    strcat(s, " ");
    return 0;
}

static int stop_at_mid(const th_tool *t, void *ud)
{
    (void)ud;
    return strcmp(t->name, "mid") == 0 ? 42 : 0;
}

static void add_lookup(void)
{
    reset();
    th_registry *reg = th_registry_new();
    CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
    th_plugin *a = make(&alpha), *b = make(&beta);
    th_error e;
    CU_ASSERT_EQUAL(th_registry_add(reg, a, &e), 0);
    CU_ASSERT_EQUAL(th_registry_add(reg, b, &e), 0);
    CU_ASSERT_EQUAL(th_registry_count(reg), 5);
    char names[256] = "";
    CU_ASSERT_EQUAL(th_registry_foreach(reg, collect, names), 0);
    CU_ASSERT_STRING_EQUAL(names, "alpha_a beta_b beta_c mid zeta ");
    CU_ASSERT_EQUAL(th_registry_foreach(reg, stop_at_mid, NULL), 42);
    const th_tool *t = th_registry_acquire(reg, "beta_c");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_STRING_EQUAL(t->name, "beta_c");
    CU_ASSERT_PTR_EQUAL(t->plugin, b);
    CU_ASSERT_EQUAL(atomic_load(&b->refs), 2);
    th_tool_release(t);
    CU_ASSERT_EQUAL(atomic_load(&b->refs), 1);
    CU_ASSERT_PTR_NULL(th_registry_acquire(reg, "nope"));
    CU_ASSERT_PTR_NULL(th_registry_acquire(reg, ""));
    CU_ASSERT_PTR_NULL(th_registry_acquire(reg, NULL));
    CU_ASSERT_PTR_EQUAL(th_registry_plugin(reg, "alpha"), a);
    CU_ASSERT_PTR_NULL(th_registry_plugin(reg, "nope"));
    /* Adding the same generation twice is refused. */
    CU_ASSERT_EQUAL(th_registry_add(reg, a, &e), TH_ESTATE);
    th_registry_free(reg);
    CU_ASSERT_EQUAL(atomic_load(&inits), 2);
    CU_ASSERT_EQUAL(atomic_load(&finis), 2);
}

static void duplicates(void)
{
    reset();
    th_registry *reg = th_registry_new();
    th_plugin *a = make(&alpha), *c = make(&clash);
    th_error e;
    CU_ASSERT_EQUAL(th_registry_add(reg, a, &e), 0);
    CU_ASSERT_EQUAL(th_registry_add(reg, c, &e), TH_ELOAD);
    CU_ASSERT_STRING_EQUAL(e.msg,
                           "builtin:gamma: tool 'mid' of plugin 'gamma' is "
                           "already provided by plugin 'alpha' "
                           "(builtin:alpha); tool names must be unique "
                           "across the host");
    /* Nothing of gamma was added, not even its free name. */
    CU_ASSERT_EQUAL(th_registry_count(reg), 3);
    CU_ASSERT_PTR_NULL(th_registry_acquire(reg, "gamma"));
    CU_ASSERT_PTR_NULL(th_registry_plugin(reg, "gamma"));
    /* The caller kept its reference. */
    CU_ASSERT_EQUAL(atomic_load(&c->refs), 1);
    th_plugin_unref(c);
    /* A second plugin of the same name. */
    th_plugin *a2 = make(&alpha);
    CU_ASSERT_EQUAL(th_registry_add(reg, a2, &e), TH_ELOAD);
    CU_ASSERT_STRING_EQUAL(e.msg, "builtin:alpha: a plugin named 'alpha' is "
                                  "already loaded (from builtin:alpha)");
    th_plugin_unref(a2);
    th_registry_free(reg);
    CU_ASSERT_EQUAL(atomic_load(&finis), 3);
}

static void pinning(void)
{
    reset();
    th_registry *reg = th_registry_new();
    th_plugin *b = make(&beta);
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_registry_add(reg, b, &e), 0);
    const th_tool *t1 = th_registry_acquire(reg, "beta_b");
    const th_tool *t2 = th_registry_acquire(reg, "beta_c");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t2);
    th_registry_remove(reg, b);
    CU_ASSERT_EQUAL(th_registry_count(reg), 0);
    CU_ASSERT_PTR_NULL(th_registry_acquire(reg, "beta_b"));
    /* The calls still hold the generation: no fini() yet, tools valid. */
    CU_ASSERT_EQUAL(atomic_load(&finis), 0);
    CU_ASSERT_STRING_EQUAL(t1->name, "beta_b");
    CU_ASSERT_TRUE(t1->plugin->initialized);
    th_tool_release(t1);
    CU_ASSERT_EQUAL(atomic_load(&finis), 0);
    th_tool_release(t2);
    CU_ASSERT_EQUAL(atomic_load(&finis), 1);
    /* Removing what is not held is a no-op. */
    th_plugin *a = make(&alpha);
    th_registry_remove(reg, a);
    CU_ASSERT_EQUAL(atomic_load(&a->refs), 1);
    th_plugin_unref(a);
    CU_ASSERT_EQUAL(atomic_load(&finis), 2);
    th_registry_free(reg);
    CU_ASSERT_EQUAL(atomic_load(&finis), 2);
}

static void replace(void)
{
    reset();
    th_registry *reg = th_registry_new();
    th_plugin *a = make(&alpha), *b1 = make(&beta);
    th_error e;
    CU_ASSERT_EQUAL(th_registry_add(reg, a, &e), 0);
    CU_ASSERT_EQUAL(th_registry_add(reg, b1, &e), 0);
    const th_tool *old = th_registry_acquire(reg, "beta_b");
    th_plugin *b2 = make(&beta2);
    b2->generation = 2;
    CU_ASSERT_EQUAL_FATAL(th_registry_replace(reg, b1, b2, &e), 0);
    CU_ASSERT_EQUAL(atomic_load(&finis), 0); /* b1 pinned by `old` */
    const th_tool *nw = th_registry_acquire(reg, "beta_b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(nw);
    CU_ASSERT_EQUAL(nw->plugin->generation, 2);
    CU_ASSERT_EQUAL(old->plugin->generation, 1);
    CU_ASSERT_PTR_NULL(th_registry_acquire(reg, "beta_c"));
    const th_tool *d = th_registry_acquire(reg, "beta_d");
    CU_ASSERT_PTR_NOT_NULL(d);
    th_tool_release(d);
    CU_ASSERT_PTR_EQUAL(th_registry_plugin(reg, "beta"), b2);
    char names[256] = "";
    th_registry_foreach(reg, collect, names);
    CU_ASSERT_STRING_EQUAL(names, "alpha_a beta_b beta_d mid zeta ");
    th_tool_release(old);
    CU_ASSERT_EQUAL(atomic_load(&finis), 1);
    th_tool_release(nw);

    /* A failing replace changes nothing. */
    th_plugin *bc = make(&beta_clash);
    CU_ASSERT_EQUAL(th_registry_replace(reg, b2, bc, &e), TH_ELOAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "tool 'mid' of plugin 'beta' is "
                                         "already provided by plugin "
                                         "'alpha'"));
    CU_ASSERT_PTR_EQUAL(th_registry_plugin(reg, "beta"), b2);
    CU_ASSERT_EQUAL(th_registry_count(reg), 5);
    CU_ASSERT_EQUAL(th_registry_replace(reg, a, bc, &e), TH_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "builtin:beta: cannot replace plugin "
                                  "'alpha' by plugin 'beta' (names differ)");
    CU_ASSERT_EQUAL(th_registry_replace(reg, bc, bc, &e),
                    TH_ENOTFOUND);
    th_plugin_unref(bc);
    th_registry_free(reg);
    CU_ASSERT_EQUAL(atomic_load(&inits), 4);
    CU_ASSERT_EQUAL(atomic_load(&finis), 4);
}

/* ---- threads ----------------------------------------------------------------- */

typedef struct worker {
    th_registry *reg;
    atomic_int *stop;
    long acquired, bad;
} worker;

static void *acquire_loop(void *arg)
{
    worker *w = arg;
    static const char *const names[] = {"beta_b", "alpha_a", "zeta"};
    for (long i = 0; !atomic_load(w->stop) || i < 20000; i++) {
        const th_tool *t = th_registry_acquire(w->reg, names[i % 3]);
        if (!t) {
            w->bad++;
            continue;
        }
        /* The generation must be alive while pinned. */
        if (!t->plugin->initialized || strcmp(t->name, names[i % 3]) != 0 ||
            atomic_load(&t->plugin->refs) < 1)
            w->bad++;
        w->acquired++;
        th_tool_release(t);
        if (i > 200000)
            break;
    }
    return NULL;
}

static void concurrent(void)
{
    reset();
    th_registry *reg = th_registry_new();
    th_error e;
    th_plugin *a = make(&alpha), *cur = make(&beta);
    CU_ASSERT_EQUAL_FATAL(th_registry_add(reg, a, &e), 0);
    CU_ASSERT_EQUAL_FATAL(th_registry_add(reg, cur, &e), 0);
    atomic_int stop = 0;
    worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){reg, &stop, 0, 0};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, acquire_loop, &w[i]),
                              0);
    }
    /* Swap generations of beta while the workers look tools up. */
    int swaps = 0;
    for (int i = 0; i < 300; i++) {
        th_plugin *next = make(i % 2 ? &beta : &beta2);
        if (th_registry_replace(reg, cur, next, &e) != 0) {
            th_plugin_unref(next);
            break;
        }
        cur = next;
        swaps++;
    }
    atomic_store(&stop, 1);
    long acquired = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CU_ASSERT_EQUAL(w[i].bad, 0);
        acquired += w[i].acquired;
    }
    CU_ASSERT_EQUAL(swaps, 300);
    CU_ASSERT_TRUE(acquired >= 4 * 20000);
    /* Every replaced generation was finished exactly once. */
    CU_ASSERT_EQUAL(atomic_load(&finis), swaps);
    th_registry_free(reg);
    CU_ASSERT_EQUAL(atomic_load(&inits), swaps + 2);
    CU_ASSERT_EQUAL(atomic_load(&finis), swaps + 2);
}

/* ---- a writer waits for a lookup inside its section (hazard.h) --------------- */

typedef struct remover {
    th_registry *reg;
    th_plugin *p;
    atomic_int done;
} remover;

static void *remove_thread(void *arg)
{
    remover *m = arg;
    th_registry_remove(m->reg, m->p);
    atomic_store(&m->done, 1);
    return NULL;
}

/* This thread stands for a lookup stopped between reading the table and
 * taking its plugin's reference (its hazard slot holds the table): a
 * removal of that plugin must not drop the registry's reference (fini)
 * nor free the table until the slot is cleared.  Without the writer's
 * wait (th_hz_wait in change()) the removal returns at once and fini()
 * runs under the lookup. */
static void writer_waits_for_lookup(void)
{
    reset();
    th_registry *reg = th_registry_new();
    th_plugin *b = make(&beta);
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_registry_add(reg, b, &e), 0);
    th_hz_rec *r = th_hz_mine();
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    void *tab = th_registry_table(reg);
    __atomic_store_n(&r->slot[TH_HZ_REGISTRY], tab, __ATOMIC_SEQ_CST);
    CU_ASSERT_PTR_EQUAL(th_registry_table(reg), tab);
    remover m = {reg, b, 0};
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, remove_thread, &m), 0);
    for (int i = 0; i < 100 && !atomic_load(&m.done); i++)
        usleep(1000);
    CU_ASSERT_EQUAL(atomic_load(&m.done), 0);  /* waits for the lookup */
    CU_ASSERT_EQUAL(atomic_load(&finis), 0);   /* beta not finished under it */
    CU_ASSERT_PTR_NOT_EQUAL(th_registry_table(reg), tab); /* new lookups: the new table */
    th_hz_clear(r, TH_HZ_REGISTRY);
    for (int i = 0; i < 5000 && !atomic_load(&m.done); i++)
        usleep(1000);
    CU_ASSERT_EQUAL_FATAL(atomic_load(&m.done), 1);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(atomic_load(&finis), 1);
    CU_ASSERT_PTR_NULL(th_registry_acquire(reg, "beta_b"));
    th_registry_free(reg);
}

/* A thread's lookup cache answers only for the table it was filled from:
 * after a replace the same name finds the new generation, after a remove
 * nothing, and a second registry with the same tool names answers with
 * its own tools. */
static void lookup_cache_generations(void)
{
    reset();
    th_registry *reg = th_registry_new(), *reg2 = th_registry_new();
    th_plugin *b1 = make(&beta), *c = make(&beta);
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_registry_add(reg, b1, &e), 0);
    CU_ASSERT_EQUAL_FATAL(th_registry_add(reg2, c, &e), 0);
    for (int i = 0; i < 3; i++) {
        const th_tool *t = th_registry_acquire(reg, "beta_b");
        CU_ASSERT(t && t->plugin == b1);
        th_tool_release(t);
        t = th_registry_acquire(reg2, "beta_b");
        CU_ASSERT(t && t->plugin == c);
        th_tool_release(t);
    }
    th_plugin *b2 = make(&beta2);
    CU_ASSERT_EQUAL_FATAL(th_registry_replace(reg, b1, b2, &e), 0);
    const th_tool *t = th_registry_acquire(reg, "beta_b");
    CU_ASSERT(t && t->plugin == b2);
    th_tool_release(t);
    CU_ASSERT_PTR_NULL(th_registry_acquire(reg, "beta_c"));
    th_registry_remove(reg, b2);
    CU_ASSERT_PTR_NULL(th_registry_acquire(reg, "beta_b"));
    /* the same bytes at another address, and a name the cache slot shares */
    char name[16];
    strcpy(name, "beta_b");
    t = th_registry_acquire(reg2, name);
    CU_ASSERT(t && t->plugin == c && t->name != name);
    th_tool_release(t);
    strcpy(name, "beta_c");
    t = th_registry_acquire(reg2, name);
    CU_ASSERT(t && strcmp(t->name, "beta_c") == 0);
    th_tool_release(t);
    strcpy(name, "beta_x");
    CU_ASSERT_PTR_NULL(th_registry_acquire(reg2, name));
    th_registry_free(reg);
    th_registry_free(reg2);
    CU_ASSERT_EQUAL(atomic_load(&finis), 3);
}

/* ---- the first writer and the first reader publish the same way (hazard.h) -- */

/* Runs test `name` of this suite alone in a fresh process (the binary
 * again, with `env` set so the test runs its child part): the suite's own
 * threads took hazard records already.  The child's exit status 0 passes. */
static void run_fresh(const char *name, const char *env)
{
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    CU_ASSERT_FATAL(len > 0);
    self[len] = '\0';
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        setenv(env, "1", 1); /* one thread here */
        execl(self, self, name, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    pid_t w = 0;
    for (int i = 0; i < 3000 && (w = waitpid(pid, &st, WNOHANG)) == 0; i++)
        usleep(10000); /* 30 s at most */
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    CU_ASSERT_TRUE(WIFEXITED(st));
    CU_ASSERT_EQUAL(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 0);
}

/* In a fresh process (no hazard record taken yet): a writer's wait comes
 * first, then a thread takes its record.  The way the writer looked at the
 * slots (membarrier or not, th_hz_light) must be the way that reader then
 * publishes: a writer that read th_hz_light before the first reader set it
 * skips the process-wide barrier while that reader publishes with a plain
 * store, and can free what the reader is about to take.  Exit status 0:
 * they agree; 1: they differ; 3: the process was not fresh. */
static void hz_first_wait_child(void)
{
    static int old;
    size_t n = 0, u = 0;
    th_hz_count(&n, &u);
    if (n != 0)
        _exit(3);
    th_hz_wait(TH_HZ_CONFIG, &old); /* a writer first: no slot holds &old */
    int writer = __atomic_load_n(&th_hz_light, __ATOMIC_ACQUIRE);
    th_hz_rec *r = th_hz_mine(); /* then the process's first reader */
    int reader = __atomic_load_n(&th_hz_light, __ATOMIC_ACQUIRE);
    printf("hz_first_wait: writer light %d, reader light %d\n", writer, reader);
    fflush(stdout);
    _exit(r && writer == reader ? 0 : 1);
}

/* It fails when th_hz_wait reads th_hz_light before the hazard records
 * were set up (the writer 0, the reader 1, on a kernel with membarrier;
 * under TSan both are 0 and it cannot fail).  The check runs in a child
 * that runs this test alone (the registry suite took records already). */
static void hz_first_wait(void)
{
    if (getenv("TH_TEST_HZ_FRESH"))
        hz_first_wait_child();
    run_fresh("registry:hz_first_wait", "TH_TEST_HZ_FRESH");
}

/* ---- a writer with no reader skips the wait, never a reader's slot ------- */

typedef struct hz_obj {
    atomic_uint magic; /* HZ_LIVE while the writer has not dropped it */
} hz_obj;
#define HZ_LIVE 0x5afe5afeu

static hz_obj *_Atomic hz_src;
static atomic_int hz_stop, hz_bad;
static atomic_long hz_reads;

/* A short-lived reader: its thread takes a record, protects what hz_src
 * holds, checks it is live, and ends (its record goes back). */
static void *hz_reader(void *arg)
{
    (void)arg;
    th_hz_rec *r = th_hz_mine();
    if (!r)
        return NULL;
    for (int i = 0; i < 64; i++) {
        hz_obj *o = th_hz_protect(r, TH_HZ_CONFIG, &hz_src);
        for (int k = 0; k < 32; k++) /* a protected section of ~100 ns */
            if (atomic_load(&o->magic) != HZ_LIVE) {
                atomic_fetch_add(&hz_bad, 1);
                break;
            }
        th_hz_clear(r, TH_HZ_CONFIG);
    }
    atomic_fetch_add(&hz_reads, 64);
    return NULL;
}

/* A thread that only writes (it never takes a record): swaps hz_src,
 * waits, then kills the old object (its memory is reused only 64 swaps
 * later, so a reader that should not hold it sees it killed). */
static void *hz_writer(void *arg)
{
    static hz_obj pool[64];
    long *swaps = arg;
    for (unsigned i = 1; !atomic_load(&hz_stop); i = (i + 1) % 64) {
        hz_obj *n = &pool[i];
        atomic_store(&n->magic, HZ_LIVE);
        hz_obj *old = atomic_exchange(&hz_src, n); /* seq_cst, as a swap */
        th_hz_wait(TH_HZ_CONFIG, old);
        atomic_store(&old->magic, 0);
        (*swaps)++;
    }
    return NULL;
}

/* th_hz_wait returns at once when no thread but the writer owns a record
 * (a host's start: one registry add per plugin, no reader yet), so every
 * thread that owns one must be counted before its first protect.  Here
 * readers come and go on fresh threads (each counts itself, protects,
 * leaves) while a writer with no record of its own swaps and kills the
 * old object: no reader may ever see a killed one.  It fails when the
 * writer skips while a reader is counted (a wait that always returns, or
 * one that skips with one owner though the writer owns none: readers then
 * read killed objects within a few hundred swaps).  The second needs a
 * process where no other thread owns a record (in the suite the main
 * thread took one in the tests above, so the count never drops to one
 * while a reader runs): the check runs in a child that runs this test
 * alone.  Exit status 0: no killed object read; 1: some; 3: the process
 * was not fresh. */
static void hz_wait_skip_child(void)
{
    size_t n = 0, u = 0;
    th_hz_count(&n, &u);
    if (u != 0)
        _exit(3);
    static hz_obj first;
    atomic_store(&first.magic, HZ_LIVE);
    atomic_store(&hz_src, &first);
    atomic_store(&hz_stop, 0);
    atomic_store(&hz_bad, 0);
    atomic_store(&hz_reads, 0);
    long swaps = 0;
    pthread_t w;
    if (pthread_create(&w, NULL, hz_writer, &swaps) != 0)
        _exit(4);
    for (int round = 0; round < 400 && atomic_load(&hz_bad) == 0; round++) {
        pthread_t rd[4];
        int k = 0;
        for (int i = 0; i < 4; i++)
            if (pthread_create(&rd[k], NULL, hz_reader, NULL) == 0)
                k++;
        for (int i = 0; i < k; i++)
            pthread_join(rd[i], NULL);
    }
    atomic_store(&hz_stop, 1);
    pthread_join(w, NULL);
    printf("hz_wait_skip_vs_new_readers: %ld swaps, %ld reads, %d of a "
           "killed object\n", swaps, atomic_load(&hz_reads),
           atomic_load(&hz_bad));
    fflush(stdout);
    _exit(atomic_load(&hz_bad) == 0 && atomic_load(&hz_reads) > 0 ? 0 : 1);
}

static void hz_wait_skip_vs_new_readers(void)
{
    if (getenv("TH_TEST_HZ_SKIP_FRESH"))
        hz_wait_skip_child();
    run_fresh("registry:hz_wait_skip_vs_new_readers", "TH_TEST_HZ_SKIP_FRESH");
}

void th_suite_registry(void)
{
    CU_pSuite s = CU_add_suite("registry", NULL, NULL);
    CU_add_test(s, "add_lookup", add_lookup);
    CU_add_test(s, "duplicates", duplicates);
    CU_add_test(s, "pinning", pinning);
    CU_add_test(s, "replace", replace);
    CU_add_test(s, "concurrent", concurrent);
    CU_add_test(s, "writer_waits_for_lookup", writer_waits_for_lookup);
    CU_add_test(s, "lookup_cache_generations", lookup_cache_generations);
    CU_add_test(s, "hz_first_wait", hz_first_wait);
    CU_add_test(s, "hz_wait_skip_vs_new_readers", hz_wait_skip_vs_new_readers);
}
