/* hazard.h - per-thread hazard slots: readers of a pointer that a rare
 * writer swaps (the host's current config, the registry's tool table)
 * take no lock.  Private to the core (docs/reload.md, "Readers without a
 * lock").
 *
 * A reader publishes the pointer it read in its thread's slot and reads
 * the source again: if it still holds the same pointer, the object stays
 * valid until the reader clears the slot, because a writer, after it
 * stored a new pointer in the source, waits until no thread's slot holds
 * the old one before it drops or frees it (th_hz_wait).  Both sides use
 * sequentially consistent accesses for the store-then-load (the reader's
 * publish and re-read, the writer's swap and scan), so one of them sees
 * the other: the reader retries or the writer waits.  Where the kernel
 * offers membarrier(2), the reader's publish is a plain store and the
 * writer issues the process-wide barrier instead (th_hz_light): a reload
 * pays ~0.5 us, a read no lock-prefixed instruction.  A writer with no
 * other thread owning a record (a host's start, before any call) skips
 * the barrier and the scan: a thread counts its record, with a full
 * barrier, before its first protect.  The slot is held
 * only for the few instructions that take a reference (no lock, no call
 * out): a writer waits for nothing longer than a preempted reader.
 *
 * A slot holds no reference: nothing a thread read stays pinned after the
 * reader cleared its slot, so an idle thread never keeps an old config or
 * plugin alive.  A thread's record (one cache line or two: its slots and
 * its tool lookup cache, which holds no reference either) is taken on the
 * thread's first read, given back when the thread exits (a thread key's
 * destructor) and taken again by a later thread: records are never freed,
 * their number is the most threads that read at one time.
 *
 * Threads: any.  th_hz_wait runs on a writer's thread with no slot of its
 * own held (it would wait for itself). */
#ifndef TH_HAZARD_H
#define TH_HAZARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    TH_HZ_CONFIG = 0,   /* the host's config (host_config.c)  */
    TH_HZ_REGISTRY = 1, /* a registry's tool table (registry.c) */
    TH_HZ_SLOTS = 2
};

/* Entries of a thread's tool lookup cache (registry.c; a power of 2). */
#define TH_HZ_TOOL_CACHE 8

typedef struct th_hz_rec {
    void *slot[TH_HZ_SLOTS];   /* atomic: the pointers this thread reads */
    struct th_hz_rec *next;    /* the list of all records; set once      */
    int used;                  /* atomic: 1 while a thread owns it       */
    /* The owner's only (registry.c): the last tools it looked up, each
     * valid for the table of generation `gen` (0: empty). */
    struct {
        uint64_t gen;
        const void *tool;
    } tools[TH_HZ_TOOL_CACHE];
} __attribute__((aligned(64))) th_hz_rec;

extern _Thread_local th_hz_rec *th_hz_tl;

/* This thread's record, taken on first use; NULL when out of memory (the
 * caller then reads under its lock, as before). */
th_hz_rec *th_hz_take(void);

/* Sets the process up (the thread key, the light mode): the first host's
 * open calls it, before the host starts a thread.  The kernel's
 * registration for membarrier waits for an RCU grace period when the
 * process has more than one thread (13.7 ms measured under strace on the
 * machines of bench/README.md, paid by a start with `reload: signal`,
 * which copies plugins on threads); with one thread it returns at once.
 * Later calls do nothing; readers and writers call it themselves too. */
void th_hz_init(void);

static inline th_hz_rec *th_hz_mine(void)
{
    th_hz_rec *r = th_hz_tl;
    return r ? r : th_hz_take();
}

/* 1 when writers issue a process-wide barrier (membarrier(2), private
 * expedited) before they look at the slots: a reader's publish is then a
 * plain store, kept before its re-read by the compiler only (the
 * writer's barrier orders it for the processor).  0 (no membarrier, or a
 * sanitizer that cannot see it): the publish is a sequentially
 * consistent store. */
extern int th_hz_light;

/* Reads *src (a pointer, read with atomics) and protects what it read in
 * slot k: the value it yields was in *src after the slot was set, so a
 * writer that swaps it out waits for th_hz_clear before freeing it.  NULL
 * if *src is NULL.  (A macro: *src keeps its own pointer type.) */
#define th_hz_protect(r, k, src)                                          \
    __extension__({                                                       \
        __typeof__(*(src)) hz_p_ = __atomic_load_n((src), __ATOMIC_ACQUIRE); \
        for (;;) {                                                        \
            if (__builtin_expect(__atomic_load_n(&th_hz_light, __ATOMIC_RELAXED), 1)) { \
                __atomic_store_n(&(r)->slot[(k)], (void *)hz_p_,          \
                                 __ATOMIC_RELAXED);                       \
                __atomic_signal_fence(__ATOMIC_SEQ_CST);                  \
            } else {                                                      \
                __atomic_store_n(&(r)->slot[(k)], (void *)hz_p_,          \
                                 __ATOMIC_SEQ_CST);                       \
            }                                                             \
            __typeof__(*(src)) hz_q_ =                                    \
                __atomic_load_n((src), __ATOMIC_SEQ_CST);                 \
            if (hz_q_ == hz_p_)                                           \
                break;                                                    \
            hz_p_ = hz_q_;                                                \
        }                                                                 \
        hz_p_;                                                            \
    })

static inline void th_hz_clear(th_hz_rec *r, int k)
{
    __atomic_store_n(&r->slot[k], NULL, __ATOMIC_RELEASE);
}

/* A writer, after storing a new pointer (seq_cst) where `old` was: returns
 * once no thread's slot k holds `old` (a reader that protects it from now
 * on sees the new pointer and retries). */
void th_hz_wait(int k, const void *old);

/* For tests: how many times a writer's th_hz_wait(k, ...) found a
 * thread's slot k holding the old pointer and waited for that reader (an
 * event to wait for: "the writer is blocked on my slot"). */
unsigned long th_hz_waited(int k);

/* How many records exist, and how many threads own one (for tests). */
void th_hz_count(size_t *records, size_t *owned);

/* For tests: the table a lookup in `reg` protects now (registry.c). */
struct th_registry;
void *th_registry_table(struct th_registry *reg);

#endif
