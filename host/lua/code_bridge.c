/* code_bridge.c - the msgpack <-> Lua bridge of the Lua code runtime
 * (th/code.h): Lua values to msgpack (tool arguments, the returned value,
 * within the value cap) and msgpack back to Lua values (tool results, as
 * the Lua table of their codec form).  Runs on the thread that called
 * th_code_run() (a worker, for run_code), inside the run's lua_pcall.
 */
#include "code_int.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/log.h"
#include "th/mpwalk.h"

#define MAX_DEPTH 64 /* nesting of tables converted to or from msgpack */
#define VALUE_MAX_NO_LIMIT (64u << 20) /* returned value, no output_limit */

/* ---- Lua -> msgpack ------------------------------------------------------------ */

typedef struct pack_ctx {
    run *r;
    th_buf *buf;
    size_t cap;   /* bytes the packed value may take; 0: no cap */
    bool over;    /* the cap was reached */
    /* the tables being packed, from the root down (a table found among
     * its own ancestors is a cycle): path[d] is the table at depth d */
    const void *path[MAX_DEPTH + 1];
    bool lenient; /* unsupported values become their tostring() text */
    const th_proj_tool *tool; /* for argument hints, or NULL */
    bool one_pass;            /* pack_args is packing the top level */
    msgpack_packer pk;        /* msgpack-c, writing through put() */
} pack_ctx;

static int pack_fail(pack_ctx *c, const char *fmt, const char *a)
{
    snprintf(c->r->msg, sizeof c->r->msg, fmt, a);
    return -1;
}

/* Appends n bytes within c->cap. */
static int put(pack_ctx *c, const void *p, size_t n)
{
    if (c->cap && (n > c->cap || c->buf->len > c->cap - n)) {
        c->over = true;
        return -1;
    }
    th_buf *b = c->buf;
    if (b->cap - b->len <= n || !b->data) { /* room for n and the NUL */
        if (th_buf_reserve(b, n) != 0)
            return -1;
    }
    uint8_t *d = b->data + b->len;
    const uint8_t *s = p;
    if (n >= 4 && n <= 8) { /* msgpack-c's tokens, short strings: no call */
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else if (n && n < 4) {
        d[0] = s[0];
        d[n / 2] = s[n / 2];
        d[n - 1] = s[n - 1];
    } else {
        memcpy(d, p, n);
    }
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

/* msgpack-c's packer writes through put(), so the cap holds token by
 * token. */
static int capped_write(void *data, const char *b, size_t len)
{
    return put(data, b, len);
}

static int mp_nil(pack_ctx *c)
{
    return msgpack_pack_nil(&c->pk);
}

static int mp_bool(pack_ctx *c, bool v)
{
    return v ? msgpack_pack_true(&c->pk) : msgpack_pack_false(&c->pk);
}

static int mp_int(pack_ctx *c, int64_t d)
{
    return msgpack_pack_int64(&c->pk, d);
}

static int mp_double(pack_ctx *c, double d)
{
    return msgpack_pack_double(&c->pk, d);
}

static int mp_str(pack_ctx *c, const char *s, size_t n)
{
    if ((uint64_t)n > 0xffffffffu)
        return -1;
    return msgpack_pack_str(&c->pk, n) || msgpack_pack_str_body(&c->pk, s, n)
               ? -1
               : 0;
}

static int mp_container(pack_ctx *c, bool map, uint32_t n)
{
    return map ? msgpack_pack_map(&c->pk, n) : msgpack_pack_array(&c->pk, n);
}

static int pack_value(lua_State *L, pack_ctx *c, int idx, int depth,
                      uint32_t hint);

/* Packs the pairs of the table at idx as map entries (the header is the
 * caller's); *count gets how many.  0, -1, or 1 when c->one_pass and a
 * numeric key at the top of tool arguments (see pack_args). */
static int pack_pairs(lua_State *L, pack_ctx *c, int idx, int depth,
                      size_t *count)
{
    int rc = 0;
    size_t n = 0;
    int ki = lua_gettop(L) + 1; /* the key's index, the value's above it */
    lua_pushnil(L);
    while (!rc && lua_next(L, idx)) {
        n++;
        int kt = lua_type(L, ki);
        const char *k = NULL;
        if (kt == LUA_TSTRING) {
            size_t kl;
            k = lua_tolstring(L, ki, &kl);
            rc = mp_str(c, k, kl);
        } else if (kt == LUA_TNUMBER || kt == LUA_TBOOLEAN) {
            if (depth == 0 && c->tool) {
                lua_pop(L, 2);
                if (c->one_pass) /* the caller says why, as before */
                    return 1;
                return pack_fail(c,
                                 "tools.%s takes named arguments, e.g. "
                                 "tools.NAME{key=value}; found a "
                                 "positional or numeric key",
                                 c->tool->key);
            }
            rc = pack_value(L, c, ki, depth + 1, 0);
        } else {
            lua_pop(L, 2);
            return pack_fail(c, "table keys must be strings or numbers, "
                                "not %s values",
                             lua_typename(L, kt));
        }
        uint32_t h = 0;
        if (!rc && depth == 0 && c->tool && k) {
            for (size_t i = 0; i < c->tool->n_params; i++)
                if (strcmp(c->tool->params[i].name, k) == 0)
                    h = c->tool->params[i].type;
        }
        if (!rc)
            rc = pack_value(L, c, ki + 1, depth + 1, h);
        if (rc) {
            lua_pop(L, 2);
            break;
        }
        lua_pop(L, 1);
    }
    *count = n;
    return rc ? -1 : 0;
}

static int pack_table(lua_State *L, pack_ctx *c, int idx, int depth,
                      uint32_t hint);

/* Tool arguments (depth 0, a tool): named, so a map; its pairs are packed
 * in one pass into the run's scratch buffer, then the header msgpack-c
 * makes of their count and the pairs go to c->buf (a map's header comes
 * first, and the count is known only at the end).  A numeric key (a list,
 * or positional arguments) goes back to pack_table's two passes, whose
 * errors say which.  0 or -1. */
static int pack_args(lua_State *L, pack_ctx *c, int idx)
{
    c->path[0] = lua_topointer(L, idx);
    th_buf *out = c->buf;
    size_t cap = c->cap;
    th_buf_reset(&c->r->scratch);
    c->buf = &c->r->scratch;
    c->cap = 0; /* the cap is checked on the whole, below */
    c->one_pass = true;
    size_t n = 0;
    luaL_checkstack(L, 8, "tables nested too deeply");
    int rc = pack_pairs(L, c, idx, 0, &n);
    c->one_pass = false;
    c->buf = out;
    c->cap = cap;
    if (rc > 0)
        return pack_table(L, c, idx, 0, 0);
    if (rc == 0 && (uint64_t)n > 0xffffffffu)
        rc = -1;
    if (rc == 0)
        rc = mp_container(c, true, (uint32_t)n);
    if (rc == 0 && c->r->scratch.len)
        rc = put(c, c->r->scratch.data, c->r->scratch.len);
    if (rc && !c->r->msg[0])
        snprintf(c->r->msg, sizeof c->r->msg, "out of memory");
    return rc ? -1 : 0;
}

static int pack_table(lua_State *L, pack_ctx *c, int idx, int depth,
                      uint32_t hint)
{
    if (depth > MAX_DEPTH)
        return pack_fail(c, "a table is nested more than %s levels deep",
                         "64");
    luaL_checkstack(L, 8, "tables nested too deeply");
    /* Tables nest only in tables: the ancestors are path[0..depth-1]. */
    const void *me = lua_topointer(L, idx);
    for (int d = 0; d < depth; d++)
        if (c->path[d] == me)
            return pack_fail(c, "%s",
                             "a table contains itself (a cycle); tool "
                             "arguments and returned values must be trees");
    c->path[depth] = me;

    size_t n = 0;
    lua_Integer max = 0;
    bool arr = true;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        n++;
        if (arr) {
            if (lua_isinteger(L, -2)) {
                lua_Integer k = lua_tointeger(L, -2);
                if (k < 1)
                    arr = false;
                else if (k > max)
                    max = k;
            } else {
                arr = false;
            }
        }
        lua_pop(L, 1);
    }
    arr = arr && (n ? (size_t)max == n : hint == TOOLHOST_TYPE_ARRAY);
    if (depth == 0 && c->tool) {
        if (arr && n) {
            return pack_fail(c,
                             "tools.%s takes named arguments, e.g. "
                             "tools.NAME{key=value}, not a list",
                             c->tool->key);
        }
        arr = false;
    }
    int rc = 0;
    if (arr) {
        rc = mp_container(c, false, (uint32_t)n);
        for (size_t i = 1; i <= n && !rc; i++) {
            lua_rawgeti(L, idx, (lua_Integer)i);
            rc = pack_value(L, c, lua_gettop(L), depth + 1, 0);
            lua_pop(L, 1);
        }
    } else {
        rc = mp_container(c, true, (uint32_t)n);
        size_t got = 0;
        if (!rc)
            rc = pack_pairs(L, c, idx, depth, &got);
    }
    if (rc && !c->r->msg[0])
        snprintf(c->r->msg, sizeof c->r->msg, "out of memory");
    return rc ? -1 : 0;
}

static int pack_value(lua_State *L, pack_ctx *c, int idx, int depth,
                      uint32_t hint)
{
    /* the stack: pack_table makes room for a level (pack_pairs' three
     * slots, a tostring of a value) before it walks one */
    switch (lua_type(L, idx)) {
    case LUA_TNIL:
        return mp_nil(c);
    case LUA_TBOOLEAN:
        return mp_bool(c, lua_toboolean(L, idx));
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx))
            return mp_int(c, lua_tointeger(L, idx));
        else {
            lua_Number d = lua_tonumber(L, idx);
            lua_Integer i;
            if (hint == TOOLHOST_TYPE_INTEGER && lua_numbertointeger(d, &i) &&
                (lua_Number)i == d)
                return mp_int(c, i);
            return mp_double(c, d);
        }
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        return mp_str(c, s, n);
    }
    case LUA_TTABLE:
        return pack_table(L, c, idx, depth, hint);
    default:
        if (c->lenient) {
            size_t n;
            const char *s = luaL_tolstring(L, idx, &n);
            int rc = mp_str(c, s, n);
            lua_pop(L, 1);
            return rc;
        }
        return pack_fail(c,
                         "a %s value cannot be passed to a tool (only "
                         "nil, booleans, numbers, strings and tables)",
                         luaL_typename(L, idx));
    }
}

/* Packs the value at idx into buf, stopping as soon as it would pass cap
 * bytes (0: no cap; *over then says so); on failure r->msg says why. */
int th_code__pack_into(lua_State *L, run *r, int idx, th_buf *buf,
                     bool lenient, const th_proj_tool *tool, size_t cap,
                     bool *over)
{
    idx = lua_absindex(L, idx);
    pack_ctx c;
    c.r = r;
    c.lenient = lenient;
    c.tool = tool;
    c.buf = buf;
    c.cap = cap;
    c.over = false;
    c.one_pass = false;
    msgpack_packer_init(&c.pk, &c, capped_write);
    r->msg[0] = '\0';
    th_buf_reset(buf);
    int rc = tool && lua_type(L, idx) == LUA_TTABLE
                 ? pack_args(L, &c, idx)
                 : pack_value(L, &c, idx, 0, 0);
    if (over)
        *over = c.over;
    if (rc && c.over)
        snprintf(r->msg, sizeof r->msg, "more than %zu bytes", cap);
    else if (rc && !r->msg[0])
        snprintf(r->msg, sizeof r->msg, "out of memory");
    return rc ? -1 : 0;
}

/* ---- msgpack -> Lua ---------------------------------------------------------- */

static void push_object(lua_State *L, const msgpack_object *o, int depth)
{
    luaL_checkstack(L, 4, "result nested too deeply");
    if (depth > MAX_DEPTH) {
        lua_pushnil(L);
        return;
    }
    switch (o->type) {
    case MSGPACK_OBJECT_BOOLEAN:
        lua_pushboolean(L, o->via.boolean);
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 > (uint64_t)LUA_MAXINTEGER)
            lua_pushnumber(L, (lua_Number)o->via.u64);
        else
            lua_pushinteger(L, (lua_Integer)o->via.u64);
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        lua_pushinteger(L, (lua_Integer)o->via.i64);
        break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        lua_pushnumber(L, o->via.f64);
        break;
    case MSGPACK_OBJECT_STR:
        lua_pushlstring(L, o->via.str.ptr, o->via.str.size);
        break;
    case MSGPACK_OBJECT_BIN:
        lua_pushlstring(L, o->via.bin.ptr, o->via.bin.size);
        break;
    case MSGPACK_OBJECT_ARRAY:
        lua_createtable(L, (int)o->via.array.size, 0);
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            push_object(L, &o->via.array.ptr[i], depth + 1);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        break;
    case MSGPACK_OBJECT_MAP:
        lua_createtable(L, 0, (int)o->via.map.size);
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if (kv->key.type == MSGPACK_OBJECT_NIL)
                continue;
            push_object(L, &kv->key, depth + 1);
            push_object(L, &kv->val, depth + 1);
            if (lua_isnil(L, -2) ||
                (lua_type(L, -2) == LUA_TNUMBER &&
                 lua_tonumber(L, -2) != lua_tonumber(L, -2)))
                lua_pop(L, 2); /* nil or NaN key */
            else
                lua_rawset(L, -3);
        }
        break;
    default: /* nil, ext */
        lua_pushnil(L);
        break;
    }
}

/* Pushes the msgpack value in buf, or an empty table when there is none. */
void th_code__push_msgpack(lua_State *L, run *r, const th_buf *b)
{
    if (!b->len) {
        lua_newtable(L);
        return;
    }
    if (r->unp_live)
        msgpack_unpacked_destroy(&r->unp);
    msgpack_unpacked_init(&r->unp);
    r->unp_live = true;
    if (msgpack_unpack_next(&r->unp, (const char *)b->data, b->len, NULL) !=
        MSGPACK_UNPACK_SUCCESS) {
        lua_newtable(L);
        return;
    }
    push_object(L, &r->unp.data, 0);
}

static void push_failed(lua_State *L, const th_result_copy *res);
static void push_failed_msg(lua_State *L, const th_buf *err);

static void set_str(lua_State *L, const char *k, const char *v, size_t n)
{
    lua_pushlstring(L, v ? v : "", v ? n : 0);
    lua_setfield(L, -2, k);
}

/* The result table's keys, interned once per run and fetched from the
 * registry by number: lua_setfield() looks each C string up in the
 * string table every time (~490 instructions a key, half the result). */
#define K_OK TH_CODE_K_OK
#define K_STDOUT TH_CODE_K_STDOUT
#define K_STDERR TH_CODE_K_STDERR
#define K_META TH_CODE_K_META
#define K_LAZY_MT TH_CODE_K_LAZY_MT

/* __index of a result with no meta: `r.meta` is an empty table made on
 * its first read and stored in r (so r.meta == r.meta, and r.meta.x is
 * nil); any other missing key is nil.  An empty meta table per call was a
 * table and a key insertion (~400 instructions of an inner call,
 * bench/README.md, "run_code") that few scripts read. */
static int lazy_meta(lua_State *L)
{
    size_t n;
    const char *k;
    if (lua_type(L, 1) == LUA_TTABLE && lua_type(L, 2) == LUA_TSTRING &&
        (k = lua_tolstring(L, 2, &n)) && n == 4 && memcmp(k, "meta", 4) == 0) {
        lua_settop(L, 2);
        lua_newtable(L);
        lua_pushvalue(L, 2);
        lua_pushvalue(L, 3);
        lua_rawset(L, 1);
        return 1;
    }
    return 0;
}

static void make_keys(lua_State *L, run *r)
{
    static const char *const names[] = {"ok", "stdout", "stderr", "meta"};
    int k[5]; /* all or none: luaL_ref may raise (out of memory) */
    for (int i = 0; i < 4; i++) {
        lua_pushstring(L, names[i]);
        k[i] = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    /* The metatable is protected (__metatable): the script cannot reach
     * it to add a __gc that every later result would carry (finalizers
     * run outside the deadline); the sandbox's setmetatable may still
     * replace it on a result (code_lua.c, sb_setmetatable). */
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, lazy_meta);
    lua_setfield(L, -2, "__index");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    k[K_LAZY_MT] = luaL_ref(L, LUA_REGISTRYINDEX);
    memcpy(r->keys, k, sizeof k);
}

/* Pushes a call's result as the Lua table of its codec form (th/codec.h:
 * {ok, stdout, stderr, meta[, structured]} or {ok = false, error = {code,
 * message}}; structured: a tool's checked JSON output as a Lua value);
 * a run that failed (ok = false) also gets error = {code = "tool_failed",
 * message = its stderr} (TH_EFAILED).  Raises on out of memory. */
void th_code__push_done(lua_State *L, run *r, bool ok, const th_buf *out,
                        const th_buf *err, const th_buf *meta)
{
    /* The codec form built here directly, each part converted once:
     * {ok, stdout, stderr[, meta]} (th_codec_pack_result) with the texts
     * as Lua strings (str and bin alike) and the tool's meta map from its
     * bytes; with no meta, the lazy metatable (lazy_meta). */
    if (!r->keys[0])
        make_keys(L, r);
    lua_createtable(L, 0, 4);
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->keys[K_OK]);
    lua_pushboolean(L, ok);
    lua_rawset(L, -3);
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->keys[K_STDOUT]);
    lua_pushlstring(L, out->data ? (const char *)out->data : "", out->len);
    lua_rawset(L, -3);
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->keys[K_STDERR]);
    lua_pushlstring(L, err->data ? (const char *)err->data : "", err->len);
    lua_rawset(L, -3);
    if (meta->len) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, r->keys[K_META]);
        th_code__push_msgpack(L, r, meta);
        lua_rawset(L, -3);
    } else { /* no meta key: an empty table on first read */
        lua_rawgeti(L, LUA_REGISTRYINDEX, r->keys[K_LAZY_MT]);
        lua_setmetatable(L, -2);
    }
    if (!ok)
        push_failed_msg(L, err);
}

void th_code__push_result(lua_State *L, run *r, const th_result_copy *res)
{
    if (res->kind == TH_RESULT_DONE && !res->structured) {
        th_code__push_done(L, r, res->ok, &res->out, &res->err, &res->meta);
        return;
    }
    if (res->kind == TH_RESULT_ERROR) {
        /* {ok = false, error = {code, message}}, as the codec packs it */
        const char *name = th_err_name(res->error);
        const char *msg = res->message ? res->message : th_strerror(res->error);
        lua_createtable(L, 0, 2);
        lua_pushboolean(L, 0);
        lua_setfield(L, -2, "ok");
        lua_createtable(L, 0, 2);
        set_str(L, "code", name, strlen(name));
        set_str(L, "message", msg, strlen(msg));
        lua_setfield(L, -2, "error");
        return;
    }
    th_buf b = TH_BUF_INIT;
    if (th_codec_result_to_buf(&b, res) != 0) {
        th_buf_destroy(&b);
        luaL_error(L, "out of memory");
        return;
    }
    th_code__push_msgpack(L, r, &b);
    th_buf_destroy(&b);
    if (res->kind == TH_RESULT_DONE && !res->meta.len &&
        lua_type(L, -1) == LUA_TTABLE) {
        /* the codec's empty meta: lazy, as for any result */
        if (!r->keys[0])
            make_keys(L, r);
        lua_rawgeti(L, LUA_REGISTRYINDEX, r->keys[K_META]);
        lua_pushnil(L);
        lua_rawset(L, -3);
        lua_rawgeti(L, LUA_REGISTRYINDEX, r->keys[K_LAZY_MT]);
        lua_setmetatable(L, -2);
    }
    push_failed(L, res);
}

/* A run that failed: error = {code = "tool_failed", message = stderr}. */
static void push_failed_msg(lua_State *L, const th_buf *err)
{
    lua_createtable(L, 0, 2);
    set_str(L, "code", th_err_name(TH_EFAILED), strlen(th_err_name(TH_EFAILED)));
    if (err->len)
        set_str(L, "message", (const char *)err->data, err->len);
    else
        set_str(L, "message", th_strerror(TH_EFAILED), strlen(th_strerror(TH_EFAILED)));
    lua_setfield(L, -2, "error");
}

static void push_failed(lua_State *L, const th_result_copy *res)
{
    if (res->kind == TH_RESULT_DONE && !res->ok)
        push_failed_msg(L, &res->err);
}

void th_code__push_error_result(lua_State *L, run *r, int code,
                                const char *message)
{
    th_result_copy e;
    memset(&e, 0, sizeof e);
    e.kind = TH_RESULT_ERROR;
    e.error = code;
    e.message = (char *)(message ? message : th_strerror(code));
    th_code__push_result(L, r, &e);
}

/* ---- The returned value ------------------------------------------------------ */

/* Packs the chunk's first result (on top of the stack) into r->res->value,
 * within the value cap; raises when it cannot be carried.  Called by
 * run_chunk (code_lua.c), protected. */
int th_code__pack_returned(lua_State *L, run *r)
{
    /* The value is limited like the output, by its packed size, while it
     * is packed: N references to one big string cost N times its size. */
    size_t cap = r->lim.output_limit ? (size_t)r->lim.output_limit
                                     : (size_t)VALUE_MAX_NO_LIMIT;
    bool over = false;
    if (th_code__pack_into(L, r, -1, &r->res->value, true, NULL, cap, &over) == 0)
        return 0;
    th_buf_destroy(&r->res->value);
    if (over) {
        r->res->value_too_large = true;
        th_log_info("run_code: the returned value passed %zu bytes once "
                    "packed: refused (run_code output_limit)",
                    cap);
        return luaL_error(L,
                          "the returned value is too large: it passes %I "
                          "bytes once serialised (the run_code output "
                          "limit); return less, e.g. a count or the first "
                          "items, or print it (output is cut to the same "
                          "limit)",
                          (lua_Integer)cap);
    }
    return luaL_error(L, "the returned value cannot be carried: %s",
                      r->msg);
}
