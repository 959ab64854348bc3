/* uv_guard.c - front support (libuv): libuv's allocator with a reserve, so
 * that an allocation failure inside libuv is not an abort()
 * (front/uv_guard.h).
 *
 * The reserve is a static arena cut by an atomic bump pointer: any thread
 * may allocate (libuv allocates on the loop's thread and, for fs requests,
 * on its pool).  Each block starts with a header holding its size, so
 * realloc can copy it out.  A block of the reserve is never reused: free
 * ignores it, realloc moves it to the heap when the heap has room again.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "front/uv_guard.h"

typedef struct blk {
    size_t size;
    size_t pad; /* keeps the payload 16-byte aligned */
} blk;

static alignas(16) unsigned char reserve[TH_UV_RESERVE];
static atomic_size_t reserve_used;

static bool in_reserve(const void *p)
{
    const unsigned char *q = p;
    return q >= reserve && q < reserve + sizeof reserve;
}

/* A zeroed block of n bytes from the reserve, or NULL when it is spent. */
static void *reserve_alloc(size_t n)
{
    if (n > sizeof reserve)
        return NULL;
    size_t need = sizeof(blk) + ((n + 15) & ~(size_t)15);
    size_t at = atomic_fetch_add(&reserve_used, need);
    if (at + need > sizeof reserve) {
        atomic_fetch_sub(&reserve_used, need);
        return NULL;
    }
    blk *b = (blk *)(reserve + at);
    b->size = n;
    return b + 1; /* the arena is static: still zero */
}

static size_t reserve_size(const void *p)
{
    return ((const blk *)p - 1)->size;
}

static void *g_malloc(size_t n)
{
    void *p = malloc(n);
    return p ? p : reserve_alloc(n);
}

static void *g_calloc(size_t count, size_t n)
{
    void *p = calloc(count, n);
    if (p || (n && count > SIZE_MAX / n))
        return p;
    return reserve_alloc(count * n);
}

static void g_free(void *p)
{
    if (!in_reserve(p))
        free(p);
}

static void *g_realloc(void *p, size_t n)
{
    if (!p)
        return g_malloc(n);
    if (n == 0) { /* libuv's uv__realloc frees on 0 itself; be safe */
        g_free(p);
        return NULL;
    }
    if (in_reserve(p)) {
        size_t old = reserve_size(p);
        if (n <= old)
            return p;
        void *q = g_malloc(n);
        if (q)
            memcpy(q, p, old);
        return q;
    }
    void *q = realloc(p, n);
    if (q)
        return q;
    size_t old = malloc_usable_size(p);
    q = reserve_alloc(n);
    if (!q)
        return NULL; /* p is still valid, as realloc leaves it */
    memcpy(q, p, old < n ? old : n);
    free(p);
    return q;
}

void *th_uv_guard_malloc(size_t n)
{
    return g_malloc(n);
}

void *th_uv_guard_realloc(void *p, size_t n)
{
    return g_realloc(p, n);
}

void th_uv_guard_free(void *p)
{
    g_free(p);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_rc;

static void install(void)
{
    init_rc = uv_replace_allocator(g_malloc, g_realloc, g_calloc, g_free);
}

int th_uv_guard_init(void)
{
    pthread_once(&once, install);
    return init_rc;
}

size_t th_uv_guard_reserve_used(void)
{
    size_t n = atomic_load(&reserve_used);
    return n < sizeof reserve ? n : sizeof reserve;
}

void th_fd_relay(int src, int dst)
{
    char buf[64 * 1024];
    for (;;) {
        ssize_t n = read(src, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(dst, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                goto out;
            off += w;
        }
    }
out:
    close(dst);
}
