/* code_lua.c - the sandboxed Lua 5.4 code runtime (th/code.h).
 *
 * One run = one fresh lua_State.  Everything that may raise a Lua error
 * (allocation included) runs inside lua_pcall, so a failure never reaches
 * the panic handler.  C memory that a Lua error could skip over (argument
 * buffers, tool results, unpacked msgpack) lives in the run struct and is
 * released when the run ends, so a longjmp never leaks it.
 *
 * Limits:
 *   memory   - a counting lua_Alloc refuses growth past the cap; Lua then
 *              collects garbage and retries, then raises "not enough
 *              memory" (LUA_ERRMEM).
 *   deadline - a count hook (every HOOK_EVERY instructions) compares the
 *              monotonic clock to the deadline and polls io->is_cancelled;
 *              every tool call gets what is left of the deadline as its
 *              timeout, and is checked again when it returns.  Once a run is
 *              killed (deadline, cancel) the hook fires at every instruction
 *              and raises again, so pcall cannot keep a killed script alive.
 *   calls    - the call function counts and refuses past max_calls.
 *   output   - at most output_limit bytes per stream reach the sink; the
 *              rest is counted and a marker line says how much was dropped.
 *
 * This file holds the sandbox: state creation, the allowed libraries, the
 * instruction hook and deadline, the memory cap allocator, the guarded
 * xpcall/coroutine.wrap/setmetatable, the tools table and output, and
 * running a script.  The msgpack <-> Lua bridge is code_bridge.c, the
 * pattern-cost guard code_guard.c; code_int.h holds what they share.
 * Threads: all of it runs on the thread that called th_code_run() (a
 * worker, for run_code).
 */
#include "code_int.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "th/log.h"
#include "th/tool.h"

#define HOOK_EVERY 1000
#define ALLOC_POLL_N 256               /* see alloc_poll() */
#define ALLOC_POLL_BYTES (256u << 10)
#define KILLED_ALLOC_MAX (64u << 10)

/* ---- Lua naming rules ----------------------------------------------------- */

static const char *const lua_keywords[] = {
    "and",  "break", "do",     "else", "elseif", "end",   "false",
    "for",  "function", "goto", "if",  "in",     "local", "nil",
    "not",  "or",    "repeat", "return", "then", "true",  "until",
    "while", NULL};

static int lua_map_name(const char *tool, char *out, size_t size)
{
    size_t n = strlen(tool);
    if (n == 0 || n + 2 > size)
        return TH_EINVAL;
    size_t o = 0;
    if (tool[0] >= '0' && tool[0] <= '9')
        out[o++] = '_';
    for (size_t i = 0; i < n; i++)
        out[o++] = tool[i] == '-' ? '_' : tool[i];
    out[o] = '\0';
    return 0;
}

static bool lua_valid_ident(const char *s, char *why, size_t why_size)
{
    if (!s[0] || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') ||
                   (s[0] >= 'A' && s[0] <= 'Z'))) {
        snprintf(why, why_size,
                 "a Lua name starts with a letter or '_'");
        return false;
    }
    for (const char *c = s; *c; c++) {
        if (!(*c == '_' || (*c >= 'a' && *c <= 'z') ||
              (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))) {
            snprintf(why, why_size,
                     "a Lua name holds only letters, digits and '_' "
                     "(found '%c')",
                     *c);
            return false;
        }
    }
    for (size_t i = 0; lua_keywords[i]; i++)
        if (strcmp(s, lua_keywords[i]) == 0) {
            snprintf(why, why_size, "'%s' is a Lua keyword", s);
            return false;
        }
    return true;
}

const th_proj_lang th_code_lua_lang = {"Lua", lua_map_name, lua_valid_ident};

int th_code_projection_add(th_projection *p, const th_tool *tool,
                           th_error *err)
{
    static const char *const skip[] = {TH_CODE_TOOL_NAME, "get_running_tasks",
                                       "cancel_task", NULL};
    if (!tool || !tool->name)
        return th_error_set(err, TH_EINVAL, "projection: no tool");
    for (size_t i = 0; skip[i]; i++)
        if (strcmp(tool->name, skip[i]) == 0)
            return 0;
    return th_projection_add(p, tool, err);
}

/* ---- Result ------------------------------------------------------------------ */

void th_code_result_init(th_code_result *r)
{
    memset(r, 0, sizeof *r);
    th_buf_init(&r->value);
    th_buf_init(&r->out);
    th_buf_init(&r->err);
}

void th_code_result_destroy(th_code_result *r)
{
    free(r->error);
    th_buf_destroy(&r->value);
    th_buf_destroy(&r->out);
    th_buf_destroy(&r->err);
    th_code_result_init(r);
}

/* ---- Allocator, clock, hook --------------------------------------------- */

static void alloc_poll(run *r, size_t grow);

/* Small blocks: sizes up to SMALL_MAX are rounded up to a multiple of
 * SMALL_STEP and, once freed, kept on the run's list of their class
 * (r->small) for the next block of that class, instead of going back to
 * malloc.  A Lua script's tables, strings and closures are mostly small and
 * short-lived (a tool call makes and drops a few tables and strings), and
 * malloc/free of each was ~20% of an inner call (bench/README.md,
 * "run_code").  What the memory limit counts is unchanged (the sizes Lua
 * asks for); the lists hold at most SMALL_KEEP_MAX bytes (past that a
 * block goes back to malloc), so a script that frees a heap of blocks of
 * one size and then asks for another cannot make the host hold more than
 * its limit plus that; they are freed with the run (small_drain).  A block
 * is kept on the list of the size it was freed with, never larger than it
 * really is. */
#define SMALL_STEP 16
#define SMALL_MAX (SMALL_STEP * (sizeof ((run *)0)->small / sizeof(void *)))
#define SMALL_KEEP_MAX (256u << 10)
/* Small blocks that no freed one can serve are carved from the run's
 * arena: one region of ARENA_SIZE bytes, allocated at the first small
 * block (past it, small blocks come from malloc).  A run's Lua objects are
 * mostly garbage the collector has not reached yet when the next one is
 * made (a tool call makes ~5 blocks; a run of 100 calls ends before a
 * cycle frees them), so the free lists alone left most blocks to malloc:
 * ~1,300 instructions of an inner call (bench/README.md, "run_code").  One
 * region rather than chunks makes "is this block the arena's" one
 * comparison: it is asked at every free.  Untouched pages of the region
 * cost nothing (malloc hands out the same heap pages run after run).  An
 * arena block, once freed, goes to its free list whatever SMALL_KEEP_MAX
 * says (it is not malloc's to take back); the region goes with the run. */
#define ARENA_SIZE (240u << 10)

static size_t small_class(size_t n) /* n in 1..SMALL_MAX */
{
    return (n - 1) / SMALL_STEP;
}

static inline bool in_arena(const run *r, const void *b)
{
    return (uintptr_t)b - (uintptr_t)r->arena < r->arena_size;
}

static void *arena_get(run *r, size_t size)
{
    if (!r->arena_size) {
        if (r->arena_failed) /* out of memory once: malloc from then on */
            return NULL;
        r->arena = malloc(ARENA_SIZE);
        if (!r->arena) {
            r->arena_failed = true;
            return NULL;
        }
        r->arena_size = ARENA_SIZE;
    }
    if (r->arena_size - r->arena_off < size)
        return NULL;
    void *b = r->arena + r->arena_off;
    r->arena_off += size;
    return b;
}

/* A block of class c (size bytes) from the class's free list or the
 * arena's free end, or NULL: the common cases, without a call. */
static inline void *small_take(run *r, size_t c, size_t size)
{
    void *b = r->small[c];
    if (b) {
        memcpy(&r->small[c], b, sizeof(void *));
        if (!in_arena(r, b))
            r->small_bytes -= size;
        return b;
    }
    if (r->arena_size - r->arena_off >= size) {
        b = r->arena + r->arena_off;
        r->arena_off += size;
        return b;
    }
    return NULL;
}

static inline void *small_get(run *r, size_t n)
{
    size_t c = small_class(n);
    size_t size = (c + 1) * SMALL_STEP;
    void *b = small_take(r, c, size);
    if (b)
        return b;
    b = arena_get(r, size);
    return b ? b : malloc(size);
}

static inline void small_put(run *r, void *b, size_t n)
{
    size_t c = small_class(n);
    if (!in_arena(r, b)) {
        size_t size = (c + 1) * SMALL_STEP;
        if (r->small_bytes + size > SMALL_KEEP_MAX) {
            free(b);
            return;
        }
        r->small_bytes += size;
    }
    memcpy(b, &r->small[c], sizeof(void *));
    r->small[c] = b;
}

static void small_drain(run *r)
{
    for (size_t c = 0; c < sizeof r->small / sizeof r->small[0]; c++)
        while (r->small[c]) {
            void *b = r->small[c];
            memcpy(&r->small[c], b, sizeof(void *));
            if (!in_arena(r, b))
                free(b);
        }
    r->small_bytes = 0;
    if (r->arena_size)
        free(r->arena);
    r->arena = NULL;
    r->arena_size = 0;
    r->arena_off = 0;
}

/* Frees a block of Lua's size n (small ones kept; while the state closes,
 * arena blocks are left to go with the region). */
static inline void block_free(run *r, void *b, size_t n)
{
    if (n && n <= SMALL_MAX) {
        if (!r->closing)
            small_put(r, b, n);
        else if (!in_arena(r, b))
            free(b);
        return;
    }
    free(b);
}

/* Everything but the two common cases of run_alloc (below). */
__attribute__((noinline)) static void *
alloc_slow(run *r, void *ptr, size_t osize, size_t nsize)
{
    if (!ptr)
        osize = 0; /* osize is a type tag for new blocks */
    if (nsize == 0) {
        if (ptr)
            block_free(r, ptr, osize);
        r->used -= osize;
        return NULL;
    }
    if (nsize > osize) {
        if (r->has_deadline) {
            alloc_poll(r, nsize - osize);
            /* killed: library calls that build large strings stop here */
            if (r->kill && nsize - osize > KILLED_ALLOC_MAX)
                return NULL;
        }
        if (r->limit && (nsize - osize > r->limit ||
                         r->used > r->limit - (nsize - osize))) {
            r->mem_hit = true;
            return NULL;
        }
    }
    void *n;
    if (nsize <= SMALL_MAX) {
        if (!ptr) {
            n = small_get(r, nsize);
        } else if (osize && osize <= SMALL_MAX &&
                   small_class(nsize) == small_class(osize)) {
            n = ptr; /* the block is big enough already */
        } else {
            n = small_get(r, nsize);
            if (n) {
                memcpy(n, ptr, osize < nsize ? osize : nsize);
                block_free(r, ptr, osize);
            }
        }
    } else if (ptr && osize > SMALL_MAX) {
        n = realloc(ptr, nsize);
    } else {
        n = malloc(nsize);
        if (n && ptr) {
            memcpy(n, ptr, osize < nsize ? osize : nsize);
            block_free(r, ptr, osize);
        }
    }
    if (!n)
        return nsize <= osize ? ptr : NULL;
    r->used = r->used - osize + nsize;
    return n;
}

/* Lua's allocator.  The two common cases take no call (so no registers to
 * save): a new small block served by a free list or the arena, within the
 * cap and before the next clock poll, and an arena block freed (onto its
 * list, or left to the region while the state closes).  Both do what
 * alloc_slow would, as does the no-op of no block to 0 bytes; the rest
 * goes there. */
static void *run_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    run *r = ud;
    if (!ptr) {
        /* Lua "resizes" and frees the absent array part of every table it
         * makes and frees (NULL, 0 bytes): twice per table, nothing to do */
        if (!nsize)
            return NULL;
        if (nsize - 1 < SMALL_MAX &&
            (!r->has_deadline || (r->alloc_n + 1 < ALLOC_POLL_N &&
                                  r->alloc_grow + nsize < ALLOC_POLL_BYTES)) &&
            (!r->limit || (nsize <= r->limit && r->used <= r->limit - nsize))) {
            size_t c = small_class(nsize);
            size_t size = (c + 1) * SMALL_STEP;
            void *b = small_take(r, c, size);
            if (!b)
                return alloc_slow(r, ptr, osize, nsize);
            if (r->has_deadline) { /* alloc_poll's counts */
                r->alloc_n++;
                r->alloc_grow += nsize;
            }
            r->used += nsize;
            return b;
        }
    } else if (nsize == 0 && osize - 1 < SMALL_MAX && in_arena(r, ptr)) {
        if (!r->closing) { /* while the state closes: left to the region */
            size_t c = small_class(osize);
            memcpy(ptr, &r->small[c], sizeof(void *));
            r->small[c] = ptr;
        }
        r->used -= osize;
        return NULL;
    }
    return alloc_slow(r, ptr, osize, nsize);
}

static void hook(lua_State *L, lua_Debug *ar);

static void set_kill(run *r, lua_State *L, int why)
{
    if (!r->kill)
        r->kill = why;
    /* From now on the hook fires at every instruction, of this thread and
     * of the main one. */
    lua_sethook(L, hook, LUA_MASKCOUNT, 1);
    if (r->L && r->L != L)
        lua_sethook(r->L, hook, LUA_MASKCOUNT, 1);
}

/* Checks deadline and cancellation; sets r->kill. */
static void poll_limits(run *r, lua_State *L)
{
    if (r->kill)
        return;
    if (r->has_deadline && th_code__ms_left(r) <= 0)
        set_kill(r, L, KILL_TIMEOUT);
    else if (r->io.is_cancelled && r->io.is_cancelled(r->io.ud))
        set_kill(r, L, KILL_CANCEL);
}

/* poll_limits after a tool call returned (the time spent in the tool
 * counts: a call that ended past the deadline kills the run at once).
 * Most calls end far from the deadline, which the coarse clock (~5 ns, the
 * last tick's time) can tell: it lags the precise one (~26 ns here) by at
 * most a tick, so when the deadline is more than coarse_slack_ns (two
 * ticks and 1 ms) past its reading, it is not passed; closer, the precise
 * clock decides.  (The call's timeout, before it, keeps the precise read:
 * a coarse one would make it up to the slack short, and a tool that runs
 * to its timeout would leave the script a few ms after it.) */
static void poll_after_call(run *r, lua_State *L)
{
    if (r->kill)
        return;
    if (r->has_deadline) {
        struct timespec t;
        bool far = false;
        if (r->coarse_slack_ns &&
            clock_gettime(CLOCK_MONOTONIC_COARSE, &t) == 0)
            far = (int64_t)(r->deadline.tv_sec - t.tv_sec) * 1000000000 +
                      (r->deadline.tv_nsec - t.tv_nsec) >
                  r->coarse_slack_ns;
        if (!far && th_code__ms_left(r) <= 0) {
            set_kill(r, L, KILL_TIMEOUT);
            return;
        }
    }
    if (r->io.is_cancelled && r->io.is_cancelled(r->io.ud))
        set_kill(r, L, KILL_CANCEL);
}

/* Raises the kill error, with the position of the function `level` up
 * the stack (0 from the hook, 1 from a C function called by the script). */
static int raise_kill(lua_State *L, run *r, int level)
{
    luaL_where(L, level);
    if (r->kill == KILL_TIMEOUT)
        lua_pushfstring(L,
                        "timed out: the script ran past its deadline of "
                        "%I ms",
                        (lua_Integer)r->lim.timeout_ms);
    else
        lua_pushliteral(L, "cancelled: the run_code call was cancelled");
    lua_concat(L, 2);
    return lua_error(L);
}

/* The deadline, seen from the allocator: a library function that runs
 * long in C (gsub, rep, concat on big strings) executes one VM instruction,
 * so the count hook alone could let a loop of them overrun the deadline by
 * up to HOOK_EVERY calls.  Every ALLOC_POLL_N allocations or
 * ALLOC_POLL_BYTES of growth the allocator reads the clock; past the
 * deadline it kills the run (the hook then fires at the next instruction)
 * and refuses growth above KILLED_ALLOC_MAX, so the running library call
 * fails at once instead of finishing its work. */
static void alloc_poll(run *r, size_t grow)
{
    r->alloc_grow += grow;
    if (++r->alloc_n < ALLOC_POLL_N && r->alloc_grow < ALLOC_POLL_BYTES)
        return;
    r->alloc_n = 0;
    r->alloc_grow = 0;
    if (r->kill || !r->L || th_code__ms_left(r) > 0)
        return;
    r->kill = KILL_TIMEOUT;
    lua_sethook(r->L, hook, LUA_MASKCOUNT, 1);
}

static void hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    run *r = th_code__get_run(L);
    poll_limits(r, L);
    if (r->kill) {
        if (L != r->L) /* a coroutine: keep it at every instruction too */
            lua_sethook(L, hook, LUA_MASKCOUNT, 1);
        raise_kill(L, r, 0);
    }
}

/* ---- Output ------------------------------------------------------------------ */

/* Sends bytes to a stream within the output limit.  Returns nonzero when
 * the sink asks to stop. */
static int out_write(run *r, int stream, const void *data, size_t len)
{
    if (stream == TOOLHOST_STDOUT)
        r->res->out_bytes += len;
    else
        r->res->err_bytes += len;
    size_t keep = len;
    if (r->lim.output_limit) {
        uint64_t room = r->kept[stream] >= r->lim.output_limit
                            ? 0
                            : r->lim.output_limit - r->kept[stream];
        if (keep > room)
            keep = (size_t)room;
    }
    r->dropped[stream] += len - keep;
    r->kept[stream] += keep;
    if (!keep)
        return 0;
    if (r->io.write)
        return r->io.write(r->io.ud, stream, data, keep);
    th_buf *b = stream == TOOLHOST_STDOUT ? &r->res->out : &r->res->err;
    if (th_buf_append(b, data, keep) != 0) {
        r->kept[stream] -= keep;
        r->dropped[stream] += keep;
    }
    return 0;
}

static void out_finish(run *r)
{
    static const char *const names[3] = {"", "stdout", "stderr"};
    for (int s = TOOLHOST_STDOUT; s <= TOOLHOST_STDERR; s++) {
        if (!r->dropped[s])
            continue;
        char line[256];
        int n = snprintf(line, sizeof line,
                         "\n[toolhost: %llu more bytes of %s dropped: the "
                         "run_code output limit is %llu bytes]\n",
                         (unsigned long long)r->dropped[s], names[s],
                         (unsigned long long)r->lim.output_limit);
        if (n <= 0)
            continue;
        if (r->io.write)
            (void)r->io.write(r->io.ud, s, line, (size_t)n);
        else
            (void)th_buf_append(s == TOOLHOST_STDOUT ? &r->res->out
                                                     : &r->res->err,
                                line, (size_t)n);
    }
}

static void write_or_kill(lua_State *L, run *r, int stream, const char *s,
                          size_t n)
{
    if (out_write(r, stream, s, n) != 0) {
        set_kill(r, L, KILL_CANCEL);
        raise_kill(L, r, 1);
    }
}

static int sb_print(lua_State *L)
{
    run *r = th_code__get_run(L);
    int n = lua_gettop(L);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 1; i <= n; i++) {
        if (i > 1)
            luaL_addchar(&b, '\t');
        luaL_tolstring(L, i, NULL);
        luaL_addvalue(&b);
    }
    luaL_addchar(&b, '\n');
    luaL_pushresult(&b);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    write_or_kill(L, r, TOOLHOST_STDOUT, s, len);
    return 0;
}

/* stream:write(...) for the stdout and stderr objects; upvalue 1 is the
 * stream number, upvalue 2 the object (skipped when passed as self). */
static int sb_stream_write(lua_State *L)
{
    run *r = th_code__get_run(L);
    int stream = (int)lua_tointeger(L, lua_upvalueindex(1));
    int first = lua_rawequal(L, 1, lua_upvalueindex(2)) ? 2 : 1;
    int n = lua_gettop(L);
    for (int i = first; i <= n; i++) {
        size_t len;
        const char *s = luaL_checklstring(L, i, &len);
        write_or_kill(L, r, stream, s, len);
    }
    lua_pushvalue(L, lua_upvalueindex(2));
    return 1;
}

/* ---- Tools ----------------------------------------------------------------- */

typedef struct progress_ctx {
    run *r;
    const char *tool;
} progress_ctx;

static void progress_tramp(void *ud, double fraction, const char *message,
                           const uint8_t *data, size_t data_len)
{
    progress_ctx *p = ud;
    if (p->r->io.progress)
        p->r->io.progress(p->r->io.ud, p->tool, fraction, message, data,
                          data_len);
}

/* Empties the run's call result for the next call, keeping its buffers
 * (the tool caller appends into them) unless one grew past PRES_KEEP_MAX:
 * a run holds no more than that between its calls. */
#define PRES_KEEP_MAX (64u << 10)

static void pres_buf_reset(th_buf *b)
{
    if (b->cap > PRES_KEEP_MAX)
        th_buf_destroy(b);
    else
        th_buf_reset(b);
}

static void pres_reset(th_proj_result *p)
{
    free(p->message);
    p->message = NULL;
    p->kind = 0;
    p->ok = false;
    p->error = 0;
    p->structured = false;
    pres_buf_reset(&p->out);
    pres_buf_reset(&p->err);
    pres_buf_reset(&p->meta);
}

/* __call of a tool object: upvalue 1 = its th_proj_tool (light userdata;
 * the projection outlives the run). */
static int tool_call(lua_State *L)
{
    run *r = th_code__get_run(L);
    const th_proj_tool *t = lua_touserdata(L, lua_upvalueindex(1));
    if (lua_gettop(L) > 2)
        return luaL_error(L,
                          "tools.%s takes one table of named arguments, "
                          "e.g. tools.%s{...}",
                          t->key, t->key);
    int at = lua_type(L, 2); /* the arguments' type, asked once */
    if (at != LUA_TNONE && at != LUA_TNIL && at != LUA_TTABLE)
        return luaL_error(L,
                          "tools.%s takes a table of named arguments, "
                          "e.g. tools.%s{...}, not a %s",
                          t->key, t->key, luaL_typename(L, 2));
    /* the deadline and cancellation (poll_limits), the clock read once
     * for the check and the call's timeout */
    int64_t timeout = 0;
    if (!r->kill && r->has_deadline && (timeout = th_code__ms_left(r)) <= 0)
        set_kill(r, L, KILL_TIMEOUT);
    else if (!r->kill && r->io.is_cancelled && r->io.is_cancelled(r->io.ud))
        set_kill(r, L, KILL_CANCEL);
    if (r->kill)
        return raise_kill(L, r, 1);
    if (r->lim.max_calls && r->res->calls >= r->lim.max_calls)
        return luaL_error(L,
                          "tool call limit reached: a run may make at most "
                          "%d tool calls (run_code max_calls)",
                          (int)r->lim.max_calls);
    if (at != LUA_TTABLE) {
        th_buf_reset(&r->args);
        if (th_buf_append(&r->args, "\x80", 1) != 0)
            return luaL_error(L, "out of memory");
    } else if (th_code__pack_into(L, r, 2, &r->args, false, t, 0, NULL) != 0) {
        return luaL_error(L, "tools.%s: bad arguments: %s", t->key, r->msg);
    }
    r->res->calls++;
    progress_ctx pc = {r, t->name};
    int rc = r->proj->caller.call(r->proj->caller.ud, t->name, r->args.data,
                                  r->args.len, timeout, progress_tramp, &pc,
                                  &r->pres);
    poll_after_call(r, L);
    if (r->kill)
        return raise_kill(L, r, 1);
    if (rc < 0) {
        th_code__push_error_result(L, r, rc, NULL);
    } else if (r->pres.kind == TH_PROJ_ERROR) {
        th_code__push_error_result(L, r, r->pres.error, r->pres.message);
    } else if (!r->pres.structured) {
        th_code__push_done(L, r, r->pres.ok, &r->pres.out, &r->pres.err,
                           &r->pres.meta);
    } else {
        /* A view of the projection's result (nothing changes hands). */
        th_result_copy done;
        memset(&done, 0, sizeof done);
        done.kind = TH_RESULT_DONE;
        done.ok = r->pres.ok;
        done.out = r->pres.out;
        done.err = r->pres.err;
        done.meta = r->pres.meta;
        done.structured = r->pres.structured;
        th_code__push_result(L, r, &done);
    }
    pres_reset(&r->pres);
    return 1;
}

/* Raises "NAME is read-only"; upvalue 1 is the name. */
static int ro_newindex(lua_State *L)
{
    return luaL_error(L, "%s is read-only in the sandbox",
                      lua_tostring(L, lua_upvalueindex(1)));
}

/* Sets a metatable on the table at -1 that protects it: __metatable is a
 * read-only view of the metatable, writes through __newindex raise.  The
 * metatable is at the top of the stack; it is consumed. */
static void lock_metatable(lua_State *L, const char *what, bool ro)
{
    int mt = lua_gettop(L);
    if (ro) {
        lua_pushstring(L, what);
        lua_pushcclosure(L, ro_newindex, 1);
        lua_setfield(L, mt, "__newindex");
    }
    /* the view: an empty table reading through to mt, itself locked */
    lua_newtable(L);
    lua_newtable(L);
    lua_pushvalue(L, mt);
    lua_setfield(L, -2, "__index");
    lua_pushfstring(L, "the metatable of %s", what);
    lua_pushcclosure(L, ro_newindex, 1);
    lua_setfield(L, -2, "__newindex");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_setfield(L, mt, "__metatable");
    lua_setmetatable(L, mt - 1);
}

/* __index of the real tools table: a name that is no tool (`tools.NAME`
 * reads the real table straight, with no C call, through the proxy's
 * __index). */
static int tools_index(lua_State *L)
{
    run *r = th_code__get_run(L);
    const char *k = lua_tostring(L, 2);
    if (k && strcmp(k, TH_CODE_TOOL_NAME) == 0)
        return luaL_error(L, "tools.run_code does not exist: run_code "
                             "cannot call itself from code (no recursion)");
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < r->proj->n_tools && i < 40; i++) {
        if (i)
            luaL_addstring(&b, ", ");
        luaL_addstring(&b, r->proj->tools[i].key);
    }
    if (r->proj->n_tools > 40)
        luaL_addstring(&b, ", ...");
    if (!r->proj->n_tools)
        luaL_addstring(&b, "(none)");
    luaL_pushresult(&b);
    return luaL_error(L, "no tool '%s' in this toolset; the tools are: %s",
                      k ? k : luaL_typename(L, 2), lua_tostring(L, -1));
}

/* next() over the real tools table (upvalue 1), whatever the state. */
static int tools_next(lua_State *L)
{
    lua_settop(L, 2);
    if (lua_next(L, lua_upvalueindex(1)))
        return 2;
    lua_pushnil(L);
    return 1;
}

static int tools_pairs(lua_State *L)
{
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushcclosure(L, tools_next, 1);
    lua_pushvalue(L, 1);
    lua_pushnil(L);
    return 3;
}

static int tool_tostring(lua_State *L)
{
    lua_pushfstring(L, "tool %s", lua_tostring(L, lua_upvalueindex(1)));
    return 1;
}

/* Builds the global `tools`. */
static void make_tools(lua_State *L, run *r)
{
    lua_newtable(L); /* real */
    int real = lua_gettop(L);
    size_t n = r->proj ? r->proj->n_tools : 0;
    for (size_t i = 0; i < n; i++) {
        const th_proj_tool *t = &r->proj->tools[i];
        lua_newtable(L); /* proxy */
        lua_newtable(L); /* mt */
        lua_createtable(L, 0, 5); /* fields */
        lua_pushstring(L, t->key);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, t->name);
        lua_setfield(L, -2, "tool");
        lua_pushstring(L, t->doc);
        lua_setfield(L, -2, "doc");
        lua_pushstring(L, t->description);
        lua_setfield(L, -2, "description");
        lua_pushstring(L, t->signature);
        lua_setfield(L, -2, "signature");
        lua_setfield(L, -2, "__index");
        lua_pushlightuserdata(L, (void *)t);
        lua_pushcclosure(L, tool_call, 1);
        lua_setfield(L, -2, "__call");
        lua_pushstring(L, t->key);
        lua_pushcclosure(L, tool_tostring, 1);
        lua_setfield(L, -2, "__tostring");
        lua_pushstring(L, "__toolhost_tool");
        lua_pushboolean(L, 1);
        lua_rawset(L, -3);
        char what[160];
        snprintf(what, sizeof what, "tools.%s", t->key);
        lock_metatable(L, what, true);
        lua_setfield(L, real, t->key);
    }
    /* the real table: missing names raise, writes too */
    lua_newtable(L); /* its mt */
    lua_pushcfunction(L, tools_index);
    lua_setfield(L, -2, "__index");
    lock_metatable(L, "tools", true);
    lua_newtable(L); /* proxy */
    lua_newtable(L); /* mt */
    lua_pushvalue(L, real);
    lua_setfield(L, -2, "__index");
    lua_pushvalue(L, real);
    lua_pushcclosure(L, tools_pairs, 1);
    lua_setfield(L, -2, "__pairs");
    lock_metatable(L, "tools", true);
    lua_setglobal(L, "tools");
    lua_pop(L, 1); /* real (kept alive by the proxy's metatable) */
}

/* help(x): prints the doc of a tool, or the list of tools. */
static int sb_help(lua_State *L)
{
    run *r = th_code__get_run(L);
    lua_settop(L, 1); /* the buffer below lives above argument 1 */
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    if (lua_isnoneornil(L, 1)) {
        luaL_addstring(&b, "Tools (call as tools.NAME{...}; help(tools.NAME) "
                           "for details):\n");
        for (size_t i = 0; r->proj && i < r->proj->n_tools; i++) {
            const th_proj_tool *t = &r->proj->tools[i];
            lua_pushfstring(L, "  %s - %s\n", t->signature, t->description);
            luaL_addvalue(&b);
        }
    } else {
        if (lua_getmetatable(L, 1) &&
            lua_getfield(L, -1, "__index") == LUA_TTABLE &&
            lua_getfield(L, -1, "doc") == LUA_TSTRING) {
            lua_remove(L, -2);
            lua_remove(L, -2);
            luaL_addvalue(&b);
        } else {
            return luaL_error(L, "help: no help for a %s value; try help() "
                                 "or help(tools.NAME)",
                              luaL_typename(L, 1));
        }
    }
    luaL_pushresult(&b);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    write_or_kill(L, r, TOOLHOST_STDOUT, s, len);
    return 0;
}

/* ---- The sandbox ------------------------------------------------------------ */

static int sb_unavailable(lua_State *L)
{
    return luaL_error(L, "%s is not available in the toolhost sandbox%s",
                      lua_tostring(L, lua_upvalueindex(1)),
                      lua_tostring(L, lua_upvalueindex(2)));
}

static void push_unavailable(lua_State *L, const char *what, const char *why)
{
    lua_pushstring(L, what);
    lua_pushstring(L, why);
    lua_pushcclosure(L, sb_unavailable, 2);
}

/* __index of _G: a clear error for the libraries the sandbox leaves out. */
static int globals_index(lua_State *L)
{
    static const char *const gone[] = {"io",      "debug",    "package",
                                       "require", "dofile",   "loadfile",
                                       "loadstring", "module", NULL};
    const char *k = lua_tostring(L, 2);
    for (size_t i = 0; k && gone[i]; i++)
        if (strcmp(k, gone[i]) == 0)
            return luaL_error(L,
                              "'%s' is not available in the toolhost "
                              "sandbox: no files, processes, modules or "
                              "debug access (use tools.NAME{...}, print, "
                              "stderr:write)",
                              k);
    return 0;
}

/* __index of os: only time, clock and date are there. */
static int os_index(lua_State *L)
{
    const char *k = lua_tostring(L, 2);
    return luaL_error(L,
                      "os.%s is not available in the toolhost sandbox: only "
                      "os.time, os.clock and os.date are",
                      k ? k : "?");
}

static int sb_collectgarbage(lua_State *L)
{
    const char *opt = luaL_optstring(L, 1, "collect");
    if (strcmp(opt, "count") != 0)
        return luaL_error(L,
                          "collectgarbage(\"%s\") is not available in the "
                          "toolhost sandbox: only collectgarbage(\"count\")",
                          opt);
    int k = lua_gc(L, LUA_GCCOUNT, 0);
    int b = lua_gc(L, LUA_GCCOUNTB, 0);
    lua_pushnumber(L, (lua_Number)k + ((lua_Number)b / 1024));
    return 1;
}

/* load(chunk [, chunkname [, mode [, env]]]): text only; env defaults to
 * the sandbox's globals.  Upvalue 1 is the base library's load. */
static int sb_load(lua_State *L)
{
    int top = lua_gettop(L);
    if (top >= 3 && !lua_isnil(L, 3)) {
        const char *mode = luaL_checkstring(L, 3);
        if (strcmp(mode, "t") != 0)
            return luaL_error(L,
                              "load: mode \"%s\" refused: the toolhost "
                              "sandbox loads text chunks only (mode \"t\")",
                              mode);
    }
    if (top >= 4 && !lua_isnil(L, 4))
        luaL_checktype(L, 4, LUA_TTABLE);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushvalue(L, 1);
    if (top >= 2 && !lua_isnil(L, 2))
        lua_pushvalue(L, 2);
    else
        lua_pushliteral(L, "=(load)");
    lua_pushliteral(L, "t");
    if (top >= 4 && !lua_isnil(L, 4))
        lua_pushvalue(L, 4);
    else
        lua_pushglobaltable(L);
    lua_call(L, 4, LUA_MULTRET);
    return lua_gettop(L) - top;
}

/* setmetatable(t, mt) without __gc: Lua runs finalizers with hooks off
 * (during collection steps and at lua_close), so a finalizer would be out
 * of the deadline's reach.  Upvalue 1: the original function. */
static int sb_setmetatable(lua_State *L)
{
    lua_pushliteral(L, "__gc");
    if (lua_type(L, 2) == LUA_TTABLE && lua_rawget(L, 2) != LUA_TNIL)
        return luaL_error(L, "setmetatable: __gc metamethods are not "
                             "available in the toolhost sandbox (finalizers "
                             "would run outside the deadline)");
    lua_settop(L, 2);
    /* A tool result with no meta has the run's shared metatable, protected
     * so that no script reaches it (code_bridge.c, lazy_meta); the script
     * may still give the result a metatable of its own. */
    run *r = th_code__get_run(L);
    if (r->keys[TH_CODE_K_LAZY_MT] && lua_type(L, 1) == LUA_TTABLE &&
        (lua_isnil(L, 2) || lua_type(L, 2) == LUA_TTABLE) &&
        lua_getmetatable(L, 1)) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, r->keys[TH_CODE_K_LAZY_MT]);
        bool shared = lua_rawequal(L, -1, -2);
        lua_settop(L, 2);
        if (shared) {
            lua_setmetatable(L, 1);
            return 1;
        }
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, 2, 1);
    return 1;
}

/* ---- Lua code that would run with the hook off --------------------------
 *
 * When the count hook raises the kill error, Lua leaves hooks disabled on
 * that thread (its allowhook flag) until the error reaches a pcall
 * boundary.  Script code that runs on the way would have no hook and no
 * deadline: an xpcall message handler (Lua calls it again for the error
 * raised inside it), the __close metamethods of a coroutine that died of
 * the kill and is then closed (coroutine.wrap closes it itself).  Once a
 * run is killed these paths run no script code; before that they run with
 * the hook on, so a handler that loops is killed like any code. */

/* The message handler xpcall installs; upvalue 1 is the script's. */
static int sb_msgh_guard(lua_State *L)
{
    run *r = th_code__get_run(L);
    if (r->kill) { /* the error passes through unchanged */
        lua_settop(L, 1);
        return 1;
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

static int xpcall_done(lua_State *L, int status, lua_KContext extra)
{
    if (status != LUA_OK && status != LUA_YIELD) {
        lua_pushboolean(L, 0);
        lua_pushvalue(L, -2);
        return 2;
    }
    return lua_gettop(L) - (int)extra;
}

/* xpcall(f, msgh, ...) with msgh behind sb_msgh_guard; yieldable like
 * Lua's own. */
static int sb_xpcall(lua_State *L)
{
    int n = lua_gettop(L);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, sb_msgh_guard, 1);
    lua_replace(L, 2);
    lua_pushboolean(L, 1);
    lua_pushvalue(L, 1);
    lua_rotate(L, 3, 2); /* f, guard, true, f, args... */
    int st = lua_pcallk(L, n - 2, LUA_MULTRET, 2, 2, xpcall_done);
    return xpcall_done(L, st, 2);
}

/* The function coroutine.wrap returns; upvalue 1 is the coroutine.  Like
 * Lua's, except that a coroutine that died of the kill is not closed (its
 * __close metamethods would run with the hook off). */
static int sb_wrap_resume(lua_State *L)
{
    run *r = th_code__get_run(L);
    lua_State *co = lua_tothread(L, lua_upvalueindex(1));
    int narg = lua_gettop(L);
    if (!lua_checkstack(co, narg))
        return luaL_error(L, "too many arguments to resume");
    lua_xmove(L, co, narg);
    int nres = 0;
    int st = lua_resume(co, L, narg, &nres);
    if (st == LUA_OK || st == LUA_YIELD) {
        if (!lua_checkstack(L, nres + 1)) {
            lua_pop(co, nres);
            return luaL_error(L, "too many results to resume");
        }
        lua_xmove(co, L, nres);
        return nres;
    }
    int cst = lua_status(co);
    if (cst != LUA_OK && cst != LUA_YIELD) { /* it died of this error */
        if (r->kill)
            return raise_kill(L, r, 1);
#if LUA_VERSION_RELEASE_NUM >= 50406
        (void)lua_closethread(co, L); /* runs its __close metamethods */
#else
        (void)lua_resetthread(co); /* runs its __close metamethods */
#endif
    }
    lua_xmove(co, L, 1);
    if (st != LUA_ERRMEM && lua_type(L, -1) == LUA_TSTRING) {
        luaL_where(L, 1);
        lua_insert(L, -2);
        lua_concat(L, 2);
    }
    return lua_error(L);
}

static int sb_wrap(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_State *co = lua_newthread(L);
    lua_pushvalue(L, 1);
    lua_xmove(L, co, 1);
    lua_pushcclosure(L, sb_wrap_resume, 1);
    return 1;
}

/* coroutine.close(co): refused once the run is killed.  Upvalue 1: the
 * original function. */
static int sb_coclose(lua_State *L)
{
    run *r = th_code__get_run(L);
    if (r->kill)
        return raise_kill(L, r, 1);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* Lua's warn(): "Lua warning: ..." lines on the script's stderr. */
static void sb_warnf(void *ud, const char *msg, int tocont)
{
    run *r = ud;
    if (!r->warn_cont && msg[0] == '@') /* control messages: ignored */
        return;
    if (!r->warn_cont)
        (void)out_write(r, TOOLHOST_STDERR, "Lua warning: ", 13);
    (void)out_write(r, TOOLHOST_STDERR, msg, strlen(msg));
    if (!tocont)
        (void)out_write(r, TOOLHOST_STDERR, "\n", 1);
    r->warn_cont = tocont != 0;
}

static void guard_patterns(lua_State *L)
{
    static const char *const fns[] = {"find", "match", "gmatch", "gsub",
                                      NULL};
    lua_getglobal(L, "string");
    for (size_t i = 0; fns[i]; i++) {
        lua_getfield(L, -1, fns[i]);
        lua_pushstring(L, fns[i]);
        lua_pushboolean(L, i == 0);
        lua_pushcclosure(L, th_code__pattern_fn, 3);
        lua_setfield(L, -2, fns[i]);
    }
    lua_getglobal(L, "setmetatable");
    lua_pushcclosure(L, sb_setmetatable, 1);
    lua_setglobal(L, "setmetatable");
    lua_getglobal(L, "table");
    lua_getfield(L, -1, "move");
    lua_pushcclosure(L, th_code__table_move, 1);
    lua_setfield(L, -2, "move");
    lua_pop(L, 2);
    lua_pushcfunction(L, sb_xpcall);
    lua_setglobal(L, "xpcall");
    lua_getglobal(L, "coroutine");
    lua_pushcfunction(L, sb_wrap);
    lua_setfield(L, -2, "wrap");
    lua_getfield(L, -1, "close");
    lua_pushcclosure(L, sb_coclose, 1);
    lua_setfield(L, -2, "close");
    lua_pop(L, 1);
}

static void make_stream(lua_State *L, const char *name, int stream)
{
    lua_newtable(L); /* the object */
    lua_newtable(L); /* mt */
    lua_newtable(L); /* methods */
    lua_pushinteger(L, stream);
    lua_pushvalue(L, -4);
    lua_pushcclosure(L, sb_stream_write, 2);
    lua_setfield(L, -2, "write");
    lua_setfield(L, -2, "__index");
    lock_metatable(L, name, true);
    lua_setglobal(L, name);
}

/* Runs protected: builds the sandbox.  Argument 1: the run. */
static int setup(lua_State *L)
{
    run *r = lua_touserdata(L, 1);
    luaL_requiref(L, LUA_GNAME, luaopen_base, 1);
    luaL_requiref(L, LUA_STRLIBNAME, luaopen_string, 1);
    luaL_requiref(L, LUA_TABLIBNAME, luaopen_table, 1);
    luaL_requiref(L, LUA_MATHLIBNAME, luaopen_math, 1);
    luaL_requiref(L, LUA_UTF8LIBNAME, luaopen_utf8, 1);
    luaL_requiref(L, LUA_COLIBNAME, luaopen_coroutine, 1);
    lua_settop(L, 1);

    /* os: time, clock, date only; the full library is never global */
    lua_pushcfunction(L, luaopen_os);
    lua_call(L, 0, 1);
    int fullos = lua_gettop(L);
    lua_createtable(L, 0, 3);
    static const char *const keep[] = {"time", "clock", "date", NULL};
    for (size_t i = 0; keep[i]; i++) {
        lua_getfield(L, fullos, keep[i]);
        lua_setfield(L, -2, keep[i]);
    }
    lua_newtable(L);
    lua_pushcfunction(L, os_index);
    lua_setfield(L, -2, "__index");
    lock_metatable(L, "os", true);
    lua_setglobal(L, "os");
    lua_settop(L, 1);
    /* nothing needs the loaded-modules table after this */
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);

    /* base: replace or remove */
    lua_getglobal(L, "load");
    lua_pushcclosure(L, sb_load, 1);
    lua_setglobal(L, "load");
    lua_pushcfunction(L, sb_collectgarbage);
    lua_setglobal(L, "collectgarbage");
    lua_pushcfunction(L, sb_print);
    lua_setglobal(L, "print");
    lua_pushcfunction(L, sb_help);
    lua_setglobal(L, "help");
    lua_pushnil(L);
    lua_setglobal(L, "dofile");
    lua_pushnil(L);
    lua_setglobal(L, "loadfile");

    guard_patterns(L);

    /* string.dump */
    lua_getglobal(L, "string");
    push_unavailable(L, "string.dump",
                     ": binary chunks are refused (load takes text only)");
    lua_setfield(L, -2, "dump");
    lua_pop(L, 1);

    /* the string metatable: __index kept, the metatable locked */
    lua_pushliteral(L, "");
    lua_getmetatable(L, -1);
    lock_metatable(L, "strings", false);
    lua_pop(L, 1);

    make_stream(L, "stdout", TOOLHOST_STDOUT);
    make_stream(L, "stderr", TOOLHOST_STDERR);
    make_tools(L, r);

    /* _G: clear errors for what is left out; its metatable locked */
    lua_pushglobaltable(L);
    lua_newtable(L);
    lua_pushcfunction(L, globals_index);
    lua_setfield(L, -2, "__index");
    lock_metatable(L, "the global table", false);
    lua_pop(L, 1);
    return 0;
}

/* Message handler: the message and a traceback. */
static int msgh(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        /* no script code once killed: it would run with the hook off */
        if (!th_code__get_run(L)->kill && luaL_callmeta(L, 1, "__tostring") &&
            lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else
            msg = lua_pushfstring(L, "(error object is a %s value)",
                                  luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Runs protected: the chunk (argument 2), then packs its first result.
 * Argument 1: the run. */
static int run_chunk(lua_State *L)
{
    run *r = lua_touserdata(L, 1);
    lua_pushvalue(L, 2);
    lua_call(L, 0, 1);
    if (lua_isnil(L, -1))
        return 0;
    return th_code__pack_returned(L, r);
}

static char *dup_msg(const char *s)
{
    char *d = strdup(s ? s : "unknown error");
    return d;
}

int th_code_run(const th_projection *proj, const char *code, size_t len,
                const th_code_limits *lim, const th_code_io *io,
                th_code_result *res, th_error *err)
{
    if (!code || !res)
        return th_error_set(err, TH_EINVAL, "th_code_run: no code");
    if (proj) {
        int rc = th_projection_check(proj, err);
        if (rc)
            return rc;
    }
    th_projection empty;
    memset(&empty, 0, sizeof empty);
    empty.lang = &th_code_lua_lang;
    run *r = calloc(1, sizeof *r);
    if (!r)
        return th_error_set(err, TH_ENOMEM, "out of memory");
    r->proj = proj ? proj : &empty;
    if (lim)
        r->lim = *lim;
    if (io)
        r->io = *io;
    r->res = res;
    r->limit = (size_t)r->lim.memory;
    th_buf_init(&r->args);
    th_buf_init(&r->scratch);
    th_proj_result_init(&r->pres);
    if (r->lim.timeout_ms > 0) {
        r->has_deadline = true;
        r->deadline = th_code__now_mono();
        r->deadline.tv_sec += r->lim.timeout_ms / 1000;
        r->deadline.tv_nsec += (r->lim.timeout_ms % 1000) * 1000000;
        if (r->deadline.tv_nsec >= 1000000000) {
            r->deadline.tv_sec++;
            r->deadline.tv_nsec -= 1000000000;
        }
        struct timespec res;
        if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 &&
            res.tv_sec == 0 && res.tv_nsec > 0 && res.tv_nsec <= 50000000)
            r->coarse_slack_ns = 2 * (int64_t)res.tv_nsec + 1000000;
    }

    lua_State *L = lua_newstate(run_alloc, r);
    if (!L) {
        small_drain(r);
        free(r);
        return th_error_set(err, TH_ENOMEM,
                            "cannot create a Lua state (out of memory, or "
                            "the memory limit is too small)");
    }
    r->L = L;
    /* A cycle when the heap is 4x what the last one left (Lua's default:
     * 2x): a run's live set is mostly the sandbox, and with the default
     * the garbage of each tool call paid ~900 instructions of collector
     * steps.  The memory cap holds as before: an allocation over it makes
     * Lua collect fully and retry before it fails. */
    lua_gc(L, LUA_GCINC, 400, 0, 0);
    *(run **)lua_getextraspace(L) = r;
    lua_setwarnf(L, sb_warnf, r);

    int rc = 0;
    lua_pushcfunction(L, setup);
    lua_pushlightuserdata(L, r);
    int st = lua_pcall(L, 1, 0, 0);
    if (st != LUA_OK) {
        const char *m = lua_tostring(L, -1);
        th_error_set(err, st == LUA_ERRMEM ? TH_ELIMIT : TH_EINTERNAL,
                     "cannot build the Lua sandbox: %s%s",
                     m ? m : "unknown error",
                     st == LUA_ERRMEM ? " (the memory limit is too small)"
                                      : "");
        rc = err ? err->code : TH_EINTERNAL;
        goto done;
    }
    lua_sethook(L, hook, LUA_MASKCOUNT, HOOK_EVERY);

    lua_pushcfunction(L, msgh);
    int h = lua_gettop(L);
    lua_pushcfunction(L, run_chunk);
    lua_pushlightuserdata(L, r);
    st = luaL_loadbufferx(L, code, len, "=code", "t");
    if (st == LUA_OK)
        st = lua_pcall(L, 2, 0, h);
    if (st == LUA_OK && r->kill)
        st = LUA_ERRRUN; /* killed after its last instruction */
    if (st != LUA_OK) {
        res->return_code = 1;
        res->timed_out = r->kill == KILL_TIMEOUT;
        res->cancelled = r->kill == KILL_CANCEL;
        res->out_of_memory = !r->kill && (st == LUA_ERRMEM || r->mem_hit);
        const char *m = lua_tostring(L, -1);
        if (r->kill && !m)
            m = r->kill == KILL_TIMEOUT ? "timed out" : "cancelled";
        if (r->kill == KILL_TIMEOUT && !strstr(m, "timed out")) {
            /* killed inside a library call (see alloc_poll) */
            char buf[512];
            snprintf(buf, sizeof buf,
                     "timed out: the script ran past its deadline of %lld "
                     "ms (stopped in a library call: %.300s)",
                     (long long)r->lim.timeout_ms, m);
            res->error = dup_msg(buf);
        } else if (st == LUA_ERRMEM) {
            char buf[256];
            snprintf(buf, sizeof buf,
                     "memory limit exceeded: the script needed more than "
                     "%llu bytes (%s)",
                     (unsigned long long)r->lim.memory,
                     m ? m : "not enough memory");
            res->error = dup_msg(buf);
        } else {
            res->error = dup_msg(m);
            /* the last frame is the C function that ran the chunk */
            static const char tail[] = "\n\t[C]: in ?";
            size_t el = res->error ? strlen(res->error) : 0;
            if (el > sizeof tail - 1 &&
                strcmp(res->error + el - (sizeof tail - 1), tail) == 0)
                res->error[el - (sizeof tail - 1)] = '\0';
        }
        th_buf_reset(&res->value);
        res->value.len = 0;
    }

done:
    r->closing = true;
    lua_close(L);
    small_drain(r);
    out_finish(r);
    th_buf_destroy(&r->args);
    th_buf_destroy(&r->scratch);
    th_proj_result_destroy(&r->pres);
    if (r->unp_live)
        msgpack_unpacked_destroy(&r->unp);
    free(r);
    return rc;
}
