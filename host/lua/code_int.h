/* code_int.h - private to the Lua code runtime (code_lua.c, code_bridge.c,
 * code_guard.c): the state of one run and the functions the three files
 * share.  Everything here runs on the thread that called th_code_run()
 * (a worker, for run_code), like the runtime itself. */
#ifndef TH_CODE_INT_H
#define TH_CODE_INT_H

#include <lua.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "th/code.h"
#include "th/codec.h"
#include "th/tool.h"

enum { KILL_NONE = 0, KILL_TIMEOUT, KILL_CANCEL };

typedef struct run {
    lua_State *L;
    const th_projection *proj;
    th_code_limits lim;
    th_code_io io;
    th_code_result *res;
    /* memory */
    size_t used, limit;
    bool mem_hit;
    /* time */
    bool has_deadline;
    struct timespec deadline;
    /* how far CLOCK_MONOTONIC_COARSE may lag the precise clock (two of its
     * ticks and 1 ms); 0: not used (code_lua.c, poll_after_call) */
    int64_t coarse_slack_ns;
    int kill;
    bool warn_cont; /* a warning is being continued */
    uint32_t alloc_n;   /* allocations since the allocator read the clock */
    size_t alloc_grow;  /* bytes of growth since then */
    /* freed small blocks kept for reuse, by size class (code_lua.c,
     * run_alloc): the Lua objects of a tool call (argument and result
     * tables, strings) come and go with every call */
    void *small[16];
    size_t small_bytes; /* what those lists hold of malloc()ed blocks, at
                           most SMALL_KEEP_MAX */
    /* small blocks are carved from one region first (code_lua.c,
     * small_get), allocated at the first small block */
    char *arena;
    size_t arena_size;  /* 0 until it is allocated */
    size_t arena_off;   /* bytes carved from it */
    bool arena_failed;  /* its malloc failed: small blocks from malloc */
    bool closing;       /* lua_close() is freeing everything */
    /* the keys of a call's result table (ok, stdout, stderr, meta) and
     * the shared metatable of a result with no meta (TH_CODE_K_*), as
     * registry references, made at the first result (code_bridge.c) */
    int keys[5];
    /* output */
    uint64_t kept[3], dropped[3];
    /* scratch C memory that a Lua error may skip over */
    th_buf args;
    th_buf scratch; /* the pairs of tool arguments (code_bridge.c) */
    th_proj_result pres;
    msgpack_unpacked unp;
    bool unp_live;
    char msg[512];
} run;

/* r->keys: the result table's keys, and the metatable (a protected one,
 * shared by every result of the run that has no meta) whose __index makes
 * `r.meta` an empty table on first read (code_bridge.c). */
enum { TH_CODE_K_OK, TH_CODE_K_STDOUT, TH_CODE_K_STDERR, TH_CODE_K_META,
       TH_CODE_K_LAZY_MT };

/* The sandbox's clock and run, for all three files; inline so that the
 * guard and the bridge call nothing of code_lua.c (no cycle between the
 * objects, scripts/layers-graph). */
static inline run *th_code__get_run(lua_State *L)
{
    return *(run **)lua_getextraspace(L);
}

static inline struct timespec th_code__now_mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t;
}

/* Milliseconds left before the deadline (may be <= 0). */
static inline int64_t th_code__ms_left(const run *r)
{
    struct timespec t = th_code__now_mono();
    return (int64_t)(r->deadline.tv_sec - t.tv_sec) * 1000 +
           (r->deadline.tv_nsec - t.tv_nsec) / 1000000;
}

/* code_bridge.c: msgpack <-> Lua */
int th_code__pack_into(lua_State *L, run *r, int idx, th_buf *buf,
                       bool lenient, const th_proj_tool *tool, size_t cap,
                       bool *over);
void th_code__push_result(lua_State *L, run *r, const th_result_copy *res);
/* push_result of a DONE result that is not structured, from its parts. */
void th_code__push_done(lua_State *L, run *r, bool ok, const th_buf *out,
                        const th_buf *err, const th_buf *meta);
void th_code__push_error_result(lua_State *L, run *r, int code,
                                const char *message);
int th_code__pack_returned(lua_State *L, run *r);
/* The msgpack value of `b` unpacked, then as a Lua value (an empty table
 * for none or for bytes that are not msgpack); the converter of structured
 * results, and the model the tests hold the direct one to. */
void th_code__push_msgpack(lua_State *L, run *r, const th_buf *b);

/* code_guard.c: the cost guard of C loops (patterns, table.move) */
int th_code__pattern_fn(lua_State *L);
int th_code__table_move(lua_State *L);

#endif
