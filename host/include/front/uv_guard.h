/* front/uv_guard.h - libuv (and yajl) under allocation failure (front
 * support).
 *
 * libuv returns UV_ENOMEM from most of its functions, but a few of its
 * own allocations abort() the process when they fail: the array of
 * watched fds that grows in uv__io_start() (called from uv_loop_init(),
 * uv_signal_init(), uv_read_start(), uv_listen(), uv_accept() ... whenever
 * a new fd is higher than any seen before), and the creation of its
 * thread pool (uv_queue_work(), uv_fs_*() with a callback).
 *
 * th_uv_guard_init() gives libuv (uv_replace_allocator) an allocator that
 * falls back on a reserve set aside in the binary (TH_UV_RESERVE bytes)
 * when malloc, calloc or realloc fail: libuv's allocations then never see
 * NULL while the reserve lasts, and the host meets the failure at its own
 * next allocation, where it is handled.  Blocks from the reserve are
 * never given back (the reserve is for failures, not for steady use).
 * The fronts do not use libuv's thread pool at all (the RPC server closes
 * sessions on threads of its own, MCP over stdio relays a file input on
 * one): its creation cannot be made to fail cleanly.
 *
 * Call th_uv_guard_init() before a front makes its loop: once per process
 * (later calls do nothing); any thread.  Safe after other libuv calls: a
 * block libuv got from malloc is freed with free as before. */
#ifndef TH_FRONT_UV_GUARD_H
#define TH_FRONT_UV_GUARD_H

#include <stddef.h>

#define TH_UV_RESERVE ((size_t)256 * 1024)

/* 0, or a libuv error code (uv_replace_allocator refused). */
int th_uv_guard_init(void);

/* The same allocator, for other libraries that crash on NULL (yajl,
 * through yajl_alloc_funcs in mcp_fast.c): malloc, then the reserve.
 * A block from either is freed with th_uv_guard_free.  Any thread. */
void *th_uv_guard_malloc(size_t n);
void *th_uv_guard_realloc(void *p, size_t n);
void th_uv_guard_free(void *p);

/* Copies fd `src` into fd `dst` until src ends or dst fails, then closes
 * dst (src stays open): the relay thread a front runs for an input that
 * epoll refuses (a file, /dev/null), so that libuv reads a pipe and never
 * needs its thread pool.  Blocking; on a thread of the front's own. */
void th_fd_relay(int src, int dst);

/* Bytes of the reserve given out so far (a test, the stats). */
size_t th_uv_guard_reserve_used(void);

#endif
