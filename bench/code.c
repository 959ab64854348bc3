/* bench/code.c - run_code's inner tool calls against the inline call path,
 * in one process.
 *
 * A host opened from a config that loads build/plugins/echo.so, with
 * run_code enabled (th_code_attach, as the fronts do).  Figures:
 *   - the inline path (the floor): th_call_sync() of echo {text: "hello"}
 *     on the calling thread, sequential, p50 over many calls;
 *     th_call_start() with may_block (dispatch.c's "inline") beside it;
 *   - run_code whose Lua script makes N echo calls
 *       local n = 0
 *       for i = 1, N do n = n + #tools.echo{text = "hello"}.stdout end
 *       return n
 *     for N = 100 and N = 0 (the same script with no call: a Lua state,
 *     the sandbox, the chunk, the result), each run through th_call_sync()
 *     of run_code, p50 over the rounds;
 *   - per inner call: (run with 100 calls - run with 0 calls) / 100, what
 *     one tools.echo{} costs inside a script: the Lua table packed to
 *     msgpack once, the call (registry, policy, validation, manager,
 *     execute, limits), the result turned into a Lua table once.  And the
 *     whole run / 100 beside it, start-up included.
 *   - the Lua floor: the same loop in a bare Lua state (the standard
 *     libraries, no sandbox) whose `echo` is a C function returning
 *     {ok, stdout, stderr}, the best of three allocator and collector
 *     settings, and the bound it sets with the inline call (Lua floor +
 *     th_call_start inline).
 * Target (issue 17): an inner call at most 1.5x the inline path.
 *
 * TH_BENCH_PROFILE=1: only the runs with 100 calls (for callgrind);
 * TH_BENCH_PROFILE=0: only the runs with none (the same rounds);
 * TH_BENCH_PROFILE=lua, lua0: the Lua side alone, 100 and 0 calls;
 * TH_BENCH_PROFILE=floor: only the floor, as many calls (1.1x rounds x 100).
 */
#include <msgpack.h>
#include <sys/stat.h>

#include "bench.h"
#include "th/code.h"
#include "th/config.h"
#include "th/host.h"
#include "th/log.h"
#include "th/projection.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#define TEXT "hello"
#define N_INNER 100

static th_host *host;
static uint8_t echo_args[64];
static size_t echo_len;

static void pack_echo_args(void)
{
    echo_len = bench_echo_args(echo_args, sizeof echo_args, TEXT);
}

/* The bench's script: n calls of `fn` (tools.echo, or the Lua floor's
 * echo), returning the total length of their stdout. */
static void loop_script(char *buf, size_t size, const char *fn, int n)
{
    snprintf(buf, size,
             "local n = 0\n"
             "for i = 1, %d do n = n + #%s{text = \"" TEXT "\"}.stdout end\n"
             "return n\n",
             n, fn);
}

/* {code: "..."} for a script making n echo calls */
static void pack_code_args(th_buf *b, int n)
{
    char script[256];
    loop_script(script, sizeof script, "tools.echo", n);
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "code", 4);
    msgpack_pack_str_with_body(&pk, script, strlen(script));
}

static th_host *open_host(const char *build)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/plugins/echo.so", build);
    struct stat st;
    if (stat(path, &st) != 0)
        bench_die("%s is missing: run make first", path);
    char yaml[4600];
    snprintf(yaml, sizeof yaml,
             "host:\n"
             "  log_level: warn\n"
             "plugins:\n"
             "  - name: echo\n"
             "    path: %s\n"
             "toolsets:\n"
             "  - name: default\n"
             "    tools: [\"*\"]\n"
             "    run_code:\n"
             "      enabled: true\n",
             path);
    th_config *cfg = NULL;
    th_error err;
    th_error_clear(&err);
    if (th_config_parse("bench.yaml", "/tmp", yaml, strlen(yaml), &cfg, &err) < 0)
        bench_die("config: %s", err.msg);
    th_host *h = NULL;
    if (th_host_open(cfg, &h, &err) < 0)
        bench_die("th_host_open: %s", err.msg);
    if (th_code_attach(h, &err) < 0)
        bench_die("th_code_attach: %s", err.msg);
    return h;
}

static th_session *session_new(void)
{
    th_principal who = {.uid = getuid(), .gid = getgid(), .trusted = true};
    th_session *s = th_session_open(host, &who, NULL, NULL);
    if (!s)
        bench_die("th_session_open failed");
    return s;
}

/* ---- the inline path ------------------------------------------------------------ */

static uint64_t sync_once(void *ud)
{
    th_call_opts o = {.may_block = true};
    th_result_copy r;
    memset(&r, 0, sizeof r);
    uint64_t a = bench_now_ns();
    int rc = th_call_sync(ud, "echo", echo_args, echo_len, &o, NULL, NULL,
                          NULL, &r);
    uint64_t b = bench_now_ns();
    if (rc < 0 || r.kind != TH_RESULT_DONE || !r.ok ||
        r.out.len != sizeof TEXT - 1)
        bench_die("th_call_sync(echo) failed (%d)", rc);
    th_result_copy_destroy(&r);
    return b - a;
}

static void run_sync(th_session *s, long n, uint64_t *samples, bench_stats *st)
{
    bench_rounds(n, sync_once, s, samples, st);
}

static void on_event(const th_event *ev, void *ud)
{
    if (ev->kind == TH_EV_RESULT) {
        const th_result *r = ev->result;
        if (r->kind != TH_RESULT_DONE || !r->ok || r->out_len != sizeof TEXT - 1)
            bench_die("echo failed (kind %d)", (int)r->kind);
        *(int *)ud = 1;
    }
}

/* th_call_start(may_block): the call runs on this thread, its result
 * event arrives before th_call_start returns. */
static uint64_t inline_once(void *ud)
{
    th_call_opts o = {.may_block = true};
    int got = 0;
    uint64_t id, a = bench_now_ns();
    if (th_call_start(ud, "echo", echo_args, echo_len, &o, on_event, &got,
                      &id) < 0 || !got)
        bench_die("th_call_start(echo) did not run inline");
    return bench_now_ns() - a;
}

static void run_inline(th_session *s, long n, uint64_t *samples, bench_stats *st)
{
    bench_rounds(n, inline_once, s, samples, st);
}

/* ---- run_code ------------------------------------------------------------------- */

/* meta.value of a run_code result as an integer, or -1 */
static int64_t meta_value(const th_buf *meta)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    int64_t v = -1;
    if (msgpack_unpack_next(&u, (const char *)meta->data, meta->len, NULL) ==
            MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP) {
        const msgpack_object_map *m = &u.data.via.map;
        for (uint32_t i = 0; i < m->size; i++) {
            const msgpack_object *k = &m->ptr[i].key, *x = &m->ptr[i].val;
            if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == 5 &&
                memcmp(k->via.str.ptr, "value", 5) == 0 &&
                x->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                v = (int64_t)x->via.u64;
        }
    }
    msgpack_unpacked_destroy(&u);
    return v;
}

typedef struct code_round {
    th_session *s;
    th_buf args;
    int inner;
} code_round;

static uint64_t code_once(void *ud)
{
    code_round *cr = ud;
    th_call_opts o = {.may_block = true};
    th_result_copy r;
    memset(&r, 0, sizeof r);
    uint64_t a = bench_now_ns();
    int rc = th_call_sync(cr->s, "run_code", cr->args.data, cr->args.len, &o,
                          NULL, NULL, NULL, &r);
    uint64_t b = bench_now_ns();
    if (rc < 0 || r.kind != TH_RESULT_DONE || !r.ok)
        bench_die("run_code failed (%d, %s): %.*s", rc,
                  r.message ? r.message : "", (int)r.err.len,
                  (const char *)r.err.data);
    /* the script's return value (meta.value) is the total length */
    if (meta_value(&r.meta) != (int64_t)cr->inner * (int64_t)(sizeof TEXT - 1))
        bench_die("run_code returned %lld, wanted %d",
                  (long long)meta_value(&r.meta),
                  cr->inner * (int)(sizeof TEXT - 1));
    th_result_copy_destroy(&r);
    return b - a;
}

static void run_code(th_session *s, int inner, long rounds, uint64_t *samples,
                     bench_stats *st)
{
    code_round cr = {s, TH_BUF_INIT, inner};
    pack_code_args(&cr.args, inner);
    bench_rounds(rounds, code_once, &cr, samples, st);
    th_buf_destroy(&cr.args);
}

/* ---- the Lua side alone ---------------------------------------------------------- */

/* A tool caller that makes no call: echo's result for {text = "hello"}
 * (the arguments still packed, the result still turned into a table). */
static int fake_echo(void *ud, const char *tool, const uint8_t *args,
                     size_t len, int64_t timeout_ms, th_proj_progress_fn pf,
                     void *pud, th_proj_result *out)
{
    (void)ud, (void)tool, (void)args, (void)len, (void)timeout_ms, (void)pf,
        (void)pud;
    out->kind = TH_PROJ_DONE;
    out->ok = true;
    th_buf_reset(&out->out);
    return th_buf_append(&out->out, TEXT, sizeof TEXT - 1);
}

static int add_tool(const th_tool *t, void *ud)
{
    th_error err;
    th_error_clear(&err);
    return th_code_projection_add(ud, t, &err);
}

/* th_code_run() of the script with n calls, through fake_echo: what the
 * Lua side of an inner call costs without the call (the sandbox, its
 * limits, packing, the result table); the limits of run_code's defaults. */
typedef struct lua_round {
    th_projection *p;
    char script[256];
    int inner;
} lua_round;

static uint64_t lua_once(void *ud)
{
    lua_round *lr = ud;
    th_code_limits lim = {.timeout_ms = 30000, .memory = 64u << 20,
                          .max_calls = 1000, .output_limit = 1 << 20};
    th_code_result res;
    th_code_result_init(&res);
    th_error err;
    th_error_clear(&err);
    uint64_t a = bench_now_ns();
    int rc = th_code_run(lr->p, lr->script, strlen(lr->script), &lim, NULL,
                         &res, &err);
    uint64_t b = bench_now_ns();
    if (rc != 0 || res.error || res.calls != (uint32_t)lr->inner)
        bench_die("th_code_run failed: %s", res.error ? res.error : err.msg);
    th_code_result_destroy(&res);
    return b - a;
}

static void run_lua_only(th_session *s, int inner, long rounds,
                         uint64_t *samples, bench_stats *st)
{
    th_proj_caller caller = {fake_echo, NULL};
    lua_round lr = {.p = th_projection_new(&th_code_lua_lang, &caller),
                    .inner = inner};
    if (!lr.p || th_session_tools(s, add_tool, lr.p) != 0)
        bench_die("projection failed");
    loop_script(lr.script, sizeof lr.script, "tools.echo", inner);
    bench_rounds(rounds, lua_once, &lr, samples, st);
    th_projection_free(lr.p);
}

/* ---- the Lua floor: a bare Lua state, no host -------------------------------------- */

/* The least a Lua binding of `tools.NAME{...}` returning a result table
 * can do: read the argument table's `text` and return {ok, stdout,
 * stderr}.  No sandbox, no limits, no msgpack, no call. */
static int floor_echo(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "text");
    size_t n;
    const char *t = lua_tolstring(L, -1, &n);
    lua_createtable(L, 0, 3);
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "ok");
    lua_pushlstring(L, t ? t : "", n);
    lua_setfield(L, -2, "stdout");
    lua_pushliteral(L, "");
    lua_setfield(L, -2, "stderr");
    return 1;
}

typedef struct floor_round {
    lua_State *L; /* the chunk at the top of its stack */
    int inner;
} floor_round;

static uint64_t floor_once(void *ud)
{
    floor_round *fr = ud;
    lua_State *L = fr->L;
    lua_pushvalue(L, -1);
    uint64_t a = bench_now_ns();
    lua_call(L, 0, 1);
    uint64_t b = bench_now_ns();
    if (lua_tointeger(L, -1) != (lua_Integer)fr->inner * (lua_Integer)(sizeof TEXT - 1))
        bench_die("Lua floor: the script returned %lld",
                  (long long)lua_tointeger(L, -1));
    lua_pop(L, 1);
    return b - a;
}

/* The Lua floor's allocator: freed blocks of up to FLOOR_SMALL bytes
 * kept on a free list per 16-byte class and handed out again (what the
 * sandbox's arena does, without its limit), the rest from the C library;
 * nothing is counted or capped. */
#define FLOOR_SMALL 256
typedef struct floor_heap {
    void *free[FLOOR_SMALL / 16 + 1];
} floor_heap;

static void *floor_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    floor_heap *fh = ud;
    size_t oc = ptr && osize <= FLOOR_SMALL ? (osize + 15) / 16 : 0;
    size_t nc = nsize && nsize <= FLOOR_SMALL ? (nsize + 15) / 16 : 0;
    if (ptr && oc && oc == nc)
        return ptr;
    void *q = NULL;
    if (nc && fh->free[nc]) {
        q = fh->free[nc];
        fh->free[nc] = *(void **)q;
    } else if (nsize) {
        q = malloc(nc ? nc * 16 : nsize);
        if (!q)
            return NULL;
    }
    if (ptr) {
        if (q)
            memcpy(q, ptr, osize < nsize ? osize : nsize);
        if (oc) {
            *(void **)ptr = fh->free[oc];
            fh->free[oc] = ptr;
        } else {
            free(ptr);
        }
    }
    return q;
}

static void floor_heap_free(floor_heap *fh)
{
    for (size_t c = 0; c < sizeof fh->free / sizeof fh->free[0]; c++)
        while (fh->free[c]) {
            void *b = fh->free[c];
            fh->free[c] = *(void **)b;
            free(b);
        }
}

/* The Lua floor's settings: the C library's allocator with Lua's default
 * incremental collector (luaL_newstate), the same with the generational
 * collector, and the free lists with the sandbox's collector pause (400). */
enum { FLOOR_STOCK, FLOOR_GEN, FLOOR_TUNED, FLOOR_MODES };
static const char *const floor_mode_name[FLOOR_MODES] = {
    "stock allocator, incremental GC", "stock allocator, generational GC",
    "free lists, GC pause 400"};

/* One bare Lua state in `mode` with the standard libraries and `echo`
 * bound to floor_echo (no sandbox, no limits); the bench's loop with n
 * calls per chunk call, p50 over the rounds. */
static void run_lua_floor(int mode, int inner, long rounds, uint64_t *samples,
                          bench_stats *st)
{
    floor_heap fh;
    memset(&fh, 0, sizeof fh);
    floor_round fr = {mode == FLOOR_TUNED ? lua_newstate(floor_alloc, &fh)
                                          : luaL_newstate(),
                      inner};
    lua_State *L = fr.L;
    if (!L)
        bench_die("lua_newstate failed");
    if (mode == FLOOR_GEN)
        lua_gc(L, LUA_GCGEN, 0, 0);
    else if (mode == FLOOR_TUNED)
        lua_gc(L, LUA_GCINC, 400, 0, 0);
    /* the standard libraries: a live set like the sandbox's (the
     * collector's cycles are paced by it) */
    luaL_openlibs(L);
    lua_register(L, "echo", floor_echo);
    char script[256];
    loop_script(script, sizeof script, "echo", inner);
    if (luaL_loadstring(L, script) != LUA_OK)
        bench_die("Lua floor: %s", lua_tostring(L, -1));
    bench_rounds(rounds, floor_once, &fr, samples, st);
    lua_close(L);
    floor_heap_free(&fh);
}

/* Per call of the Lua floor, the best of its modes (*mode: which). */
static double lua_floor_ns(long rounds, uint64_t *samples, int *mode)
{
    double best = 0;
    for (int m = 0; m < FLOOR_MODES; m++) {
        bench_stats a, b;
        run_lua_floor(m, N_INNER, rounds, samples, &a);
        run_lua_floor(m, 0, rounds, samples, &b);
        double v = ((double)a.p50_ns - (double)b.p50_ns) / N_INNER;
        if (m == 0 || v < best) {
            best = v;
            *mode = m;
        }
    }
    return best;
}

int main(int argc, char **argv)
{
    const char *build = bench_build_dir(argc > 1 ? argv[1] : TH_BUILD_DIR);
    bench_machine m;
    bench_machine_get(&m);
    bench_machine_print("code: run_code's inner calls vs the inline path", &m);
    th_log_set_level(TOOLHOST_LOG_WARN);
    pack_echo_args();
    host = open_host(build);
    th_session *s = session_new();

    long n = bench_iters(100000, 20, 2000);
    long rounds = bench_iters(2000, 20, 50);
    uint64_t *samples = malloc(sizeof(uint64_t) * (size_t)(n > rounds ? n : rounds));
    if (!samples)
        bench_die("out of memory");

    const char *prof = getenv("TH_BENCH_PROFILE");
    if (prof && strcmp(prof, "floor") == 0) {
        /* the floor alone, as many calls as the run_code profile makes */
        bench_stats st;
        long calls = rounds * N_INNER;
        uint64_t *s2 = malloc(sizeof(uint64_t) * (size_t)calls);
        if (!s2)
            bench_die("out of memory");
        run_sync(s, calls, s2, &st);
        printf("floor, %ld calls: p50 %.1f ns\n", calls, (double)st.p50_ns);
        free(s2);
        th_session_close(s);
        th_host_close(host);
        free(samples);
        return 0;
    }
    if (prof) {
        /* 1: run_code with 100 calls; 0: with none; lua, lua0: the Lua
         * side alone (th_code_run, no call) with 100 and 0 calls.  The
         * difference of two profiles / (rounds x 100) is per inner call. */
        bench_stats st;
        bool lua = strncmp(prof, "lua", 3) == 0;
        int inner = strcmp(prof, "0") == 0 || strcmp(prof, "lua0") == 0
                        ? 0
                        : N_INNER;
        if (lua)
            run_lua_only(s, inner, rounds, samples, &st);
        else
            run_code(s, inner, rounds, samples, &st);
        printf("%s, %d calls: p50 %.1f us\n", lua ? "Lua side" : "run_code",
               inner, (double)st.p50_ns / 1e3);
        th_session_close(s);
        th_host_close(host);
        free(samples);
        return 0;
    }

    bench_stats syn, inl, c100, c0;
    /* interleaved twice, keeping the faster of each: the machine is
     * shared, and a figure is compared with a floor of the same moment */
    bench_stats syn2, inl2, c1002, c02, l100, l0, l1002, l02;
    run_sync(s, n, samples, &syn);
    run_inline(s, n, samples, &inl);
    run_code(s, N_INNER, rounds, samples, &c100);
    run_code(s, 0, rounds, samples, &c0);
    run_sync(s, n, samples, &syn2);
    run_inline(s, n, samples, &inl2);
    run_code(s, N_INNER, rounds, samples, &c1002);
    run_code(s, 0, rounds, samples, &c02);
    run_lua_only(s, N_INNER, rounds, samples, &l100);
    run_lua_only(s, 0, rounds, samples, &l0);
    run_lua_only(s, N_INNER, rounds, samples, &l1002);
    run_lua_only(s, 0, rounds, samples, &l02);
    if (l1002.p50_ns < l100.p50_ns)
        l100 = l1002;
    if (l02.p50_ns < l0.p50_ns)
        l0 = l02;
    if (syn2.p50_ns < syn.p50_ns)
        syn = syn2;
    if (inl2.p50_ns < inl.p50_ns)
        inl = inl2;
    if (c1002.p50_ns < c100.p50_ns)
        c100 = c1002;
    if (c02.p50_ns < c0.p50_ns)
        c0 = c02;
    int floor_mode = FLOOR_STOCK;
    double lfloor = lua_floor_ns(rounds, samples, &floor_mode);
    th_session_close(s);
    th_host_close(host);

    double floor = (double)syn.p50_ns;
    double inner = ((double)c100.p50_ns - (double)c0.p50_ns) / N_INNER;
    double whole = (double)c100.p50_ns / N_INNER;
    double lua = ((double)l100.p50_ns - (double)l0.p50_ns) / N_INNER;
    printf("\n");
    bench_row_head();
    bench_row_ns("floor: echo, th_call_sync (inline path)", &syn, 0, NULL);
    bench_row_ns("echo, th_call_start inline (may_block)", &inl, floor,
                 "th_call_sync");
    bench_row_ns("run_code, 100 echo calls", &c100, 0, NULL);
    bench_row_ns("run_code, no call (start-up of a run)", &c0, 0, NULL);
    printf("%-44s %10.0fns %21s %7.2fx  th_call_sync\n",
           "per inner call: (run100 - run0) / 100", inner, "", inner / floor);
    printf("%-44s %10.0fns %21s %7.2fx  th_call_sync\n",
           "per call, whole run: run100 / 100", whole, "", whole / floor);
    printf("%-44s %10.0fns %21s %7.2fx  th_call_sync\n",
           "Lua side alone (no call), per inner call", lua, "", lua / floor);
    printf("%-44s %10.0fns %21s %7.2fx  th_call_sync\n",
           "the call inside a script: inner - Lua side", inner - lua, "",
           (inner - lua) / floor);
    printf("%-44s %10.0fns %21s %7.2fx  th_call_sync\n",
           "Lua floor (bare Lua state, a C echo)", lfloor, "", lfloor / floor);
    printf("  (its best setting: %s)\n", floor_mode_name[floor_mode]);
    double bound = lfloor + (double)inl.p50_ns;
    printf("%-44s %10.0fns %21s %7.2fx  th_call_sync\n",
           "bound: Lua floor + th_call_start inline", bound, "",
           bound / floor);

    bench_json j;
    bench_json_begin(&j, "code", &m);
    bench_json_num(&j, "inline_sync_p50_ns", floor);
    bench_json_num(&j, "inline_start_p50_ns", (double)inl.p50_ns);
    bench_json_num(&j, "run_code100_p50_ns", (double)c100.p50_ns);
    bench_json_num(&j, "run_code0_p50_ns", (double)c0.p50_ns);
    bench_json_num(&j, "inner_call_ns", inner);
    bench_json_num(&j, "whole_run_per_call_ns", whole);
    bench_json_num(&j, "inner_ratio_inline", inner / floor);
    bench_json_num(&j, "whole_ratio_inline", whole / floor);
    bench_json_num(&j, "lua_side_ns", lua);
    bench_json_num(&j, "call_in_script_ns", inner - lua);
    bench_json_num(&j, "lua_floor_ns", lfloor);
    bench_json_str(&j, "lua_floor_mode", floor_mode_name[floor_mode]);
    bench_json_num(&j, "bound_ns", bound);
    bench_json_num(&j, "bound_ratio_inline", bound / floor);
    bench_target(&j, "run_code_inner", "run_code inner call <= 1.5x the inline path",
                 inner / floor, 1.5, 1);
    bench_json_end(&j);
    free(samples);
    return 0;
}
