/* hazard.c - per-thread hazard slots (hazard.h): the records' list, a
 * thread's record taken and given back (thread exit, fork's child), a
 * writer's wait.
 *
 * The list only grows (a record is pushed with a CAS and never unlinked
 * or freed), so a writer walks it without a lock.  rec_mu is taken only
 * by a thread looking for a free record (its first read), never by a
 * reader or a writer. */
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hazard.h"

_Thread_local th_hz_rec *th_hz_tl;
int th_hz_light;

static th_hz_rec *rec_head; /* atomic */
/* Records owned by a thread (atomic, seq_cst): a writer that finds none
 * but its own has no reader to wait for (th_hz_wait). */
static long rec_owned;
static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t rec_key;
static pthread_once_t rec_once = PTHREAD_ONCE_INIT;
static bool rec_key_ok;

/* Thread exit: the record goes back (its slots are clear: no reader is
 * inside a protected section when its thread ends). */
static void rec_exit(void *v)
{
    th_hz_rec *r = v;
    for (int k = 0; k < TH_HZ_SLOTS; k++)
        __atomic_store_n(&r->slot[k], NULL, __ATOMIC_RELEASE);
    th_hz_tl = NULL;
    __atomic_store_n(&r->used, 0, __ATOMIC_RELEASE);
    __atomic_sub_fetch(&rec_owned, 1, __ATOMIC_SEQ_CST);
}

/* A child of fork() has only the forking thread: the other threads'
 * records go back (a slot one of them held at the fork would make a
 * writer in the child wait for ever). */
static bool membarrier_register(void)
{
#if defined(__SANITIZE_THREAD__)
    return false; /* TSan does not see the kernel's barrier */
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
    return false;
#endif
#endif
#if defined(__NR_membarrier)
    long q = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    return q > 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
           syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                   0, 0) == 0;
#else
    return false;
#endif
}

static void rec_after_fork(void)
{
    for (th_hz_rec *r = __atomic_load_n(&rec_head, __ATOMIC_ACQUIRE); r;
         r = r->next) {
        if (r == th_hz_tl)
            continue;
        for (int k = 0; k < TH_HZ_SLOTS; k++)
            __atomic_store_n(&r->slot[k], NULL, __ATOMIC_RELAXED);
        __atomic_store_n(&r->used, 0, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&rec_owned, th_hz_tl ? 1 : 0, __ATOMIC_SEQ_CST);
    /* one thread: no reader to order; threads started later publish
     * with the full store unless the child's registration holds */
    if (th_hz_light && !membarrier_register())
        __atomic_store_n(&th_hz_light, 0, __ATOMIC_RELAXED);
}

static void rec_key_make(void)
{
    rec_key_ok = pthread_key_create(&rec_key, rec_exit) == 0 &&
                 pthread_atfork(NULL, NULL, rec_after_fork) == 0;
    /* set before any thread holds a record: every reader then publishes
     * the same way */
    if (rec_key_ok && membarrier_register())
        __atomic_store_n(&th_hz_light, 1, __ATOMIC_RELEASE);
}

th_hz_rec *th_hz_take(void)
{
    pthread_once(&rec_once, rec_key_make);
    if (!rec_key_ok)
        return NULL;
    th_hz_rec *r = NULL;
    pthread_mutex_lock(&rec_mu);
    for (th_hz_rec *q = __atomic_load_n(&rec_head, __ATOMIC_ACQUIRE); q;
         q = q->next) {
        if (__atomic_load_n(&q->used, __ATOMIC_ACQUIRE) == 0) {
            r = q;
            break;
        }
    }
    if (!r) {
        r = aligned_alloc(64, sizeof *r);
        if (!r) {
            pthread_mutex_unlock(&rec_mu);
            return NULL;
        }
        memset(r, 0, sizeof *r);
        r->next = __atomic_load_n(&rec_head, __ATOMIC_RELAXED);
        /* pushed whole: a writer walking the list sees it set up */
        __atomic_store_n(&r->used, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&rec_head, r, __ATOMIC_RELEASE);
    } else {
        __atomic_store_n(&r->used, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&rec_mu);
    if (pthread_setspecific(rec_key, r) != 0) {
        __atomic_store_n(&r->used, 0, __ATOMIC_RELEASE);
        return NULL;
    }
    /* Counted, a full barrier, before the thread's first protect: a
     * writer whose count did not include it had swapped its source
     * before, so that protect's re-read sees the new pointer. */
    __atomic_add_fetch(&rec_owned, 1, __ATOMIC_SEQ_CST);
    th_hz_tl = r;
    return r;
}

void th_hz_init(void)
{
    pthread_once(&rec_once, rec_key_make);
}

/* Per slot kind: how often th_hz_wait met a reader's slot holding the
 * old pointer and waited for it (tests: th_hz_waited). */
static unsigned long hz_waited[TH_HZ_SLOTS];

void th_hz_wait(int k, const void *old)
{
    if (!old)
        return;
    /* th_hz_light is decided before it is read here: a writer that came
     * before the first reader would else read 0 and skip the barrier
     * while that reader, setting it to 1, publishes with a plain store */
    pthread_once(&rec_once, rec_key_make);
    /* No record owned but the writer's own (it holds no slot here): no
     * other thread can be inside a protect, and one that takes a record
     * from now on counts itself (a seq_cst RMW) after this seq_cst load,
     * itself after the writer's seq_cst swap of the source (host_config.c,
     * registry.c), so its protect re-reads the new pointer.  A host's
     * start (an add to the registry per plugin, before any call) then
     * pays no barrier: ~9 us each here, 100 for 100 plugins. */
    if (__atomic_load_n(&rec_owned, __ATOMIC_SEQ_CST) <= (th_hz_tl ? 1 : 0))
        return;
#if defined(__NR_membarrier)
    /* every thread's plain publish before this point is seen below (a
     * registered process: the command does not fail) */
    if (__atomic_load_n(&th_hz_light, __ATOMIC_ACQUIRE))
        (void)syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
#endif
    for (th_hz_rec *r = __atomic_load_n(&rec_head, __ATOMIC_ACQUIRE); r;
         r = r->next) {
        if (__atomic_load_n(&r->slot[k], __ATOMIC_SEQ_CST) != old)
            continue;
        __atomic_add_fetch(&hz_waited[k], 1, __ATOMIC_RELAXED);
        /* A reader holds the slot for a few instructions; one preempted
         * there is waited out (it cannot block inside). */
        for (unsigned spins = 0;
             __atomic_load_n(&r->slot[k], __ATOMIC_SEQ_CST) == old; spins++)
            if (spins >= 64)
                sched_yield();
    }
}

unsigned long th_hz_waited(int k)
{
    return __atomic_load_n(&hz_waited[k], __ATOMIC_RELAXED);
}

void th_hz_count(size_t *records, size_t *owned)
{
    size_t n = 0, u = 0;
    for (th_hz_rec *r = __atomic_load_n(&rec_head, __ATOMIC_ACQUIRE); r;
         r = r->next) {
        n++;
        if (__atomic_load_n(&r->used, __ATOMIC_ACQUIRE))
            u++;
    }
    *records = n;
    *owned = u;
}
