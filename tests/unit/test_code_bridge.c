/* test_code_bridge.c - the code runtime's msgpack -> Lua bridge
 * (host/lua/code_bridge.c): a tool's result becomes the Lua table of its
 * codec form with each part converted once (the meta map read from its
 * bytes, no unpacker), and that table is the one the unpack-based
 * converter makes of the same bytes, for thousands of random values.
 * White-box: code_int.h.
 */
#include <CUnit/CUnit.h>
#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "../../host/lua/code_int.h"
#include "th/mpwalk.h"
#include "common/th_test.h"

/* ---- random msgpack values ------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void rand_bytes(char *b, size_t n)
{
    static const char abc[] = "abcab\xc3\xa9xyz";
    for (size_t i = 0; i < n; i++)
        b[i] = abc[rnd() % (sizeof abc - 1)];
}

/* A random value; containers while depth allows (sometimes a chain deeper
 * than the bridge's 64 levels). */
static void rand_value(msgpack_packer *pk, int depth, int max_depth)
{
    unsigned kind = (unsigned)(rnd() % (depth < max_depth ? 14 : 10));
    char s[300];
    switch (kind) {
    case 0:
        msgpack_pack_nil(pk);
        break;
    case 1:
        rnd() & 1 ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
        break;
    case 2: { /* every integer width, both signs, around the edges */
        static const int64_t edges[] = {0, 1, 127, 128, 255, 256, 65535, 65536,
                                        -1, -32, -33, -128, -129, -32768,
                                        -32769, INT64_MIN, INT64_MAX};
        if (rnd() & 1)
            msgpack_pack_int64(pk, edges[rnd() % (sizeof edges / sizeof *edges)]);
        else
            msgpack_pack_int64(pk, (int64_t)rnd() >> (rnd() % 64));
        break;
    }
    case 3:
        msgpack_pack_uint64(pk, rnd() | (rnd() & 1 ? 1ull << 63 : 0));
        break;
    case 4:
        msgpack_pack_float(pk, (float)((double)(int64_t)rnd() / 1e9));
        break;
    case 5: {
        double d = (double)(int64_t)rnd() / 1e6;
        if (rnd() % 8 == 0)
            d = NAN;
        msgpack_pack_double(pk, d);
        break;
    }
    case 6:
    case 7: { /* str of 0..300 bytes: fixstr, str8, str16 */
        size_t n = (size_t)(rnd() % (rnd() & 1 ? 40 : 300));
        rand_bytes(s, n);
        msgpack_pack_str_with_body(pk, s, n);
        break;
    }
    case 8: {
        size_t n = (size_t)(rnd() % 20);
        rand_bytes(s, n);
        msgpack_pack_bin_with_body(pk, s, n);
        break;
    }
    case 9: { /* ext: fixext 1..16 and ext8 */
        static const size_t sizes[] = {1, 2, 4, 8, 16, 3, 0, 40};
        size_t n = sizes[rnd() % 8];
        rand_bytes(s, n);
        msgpack_pack_ext_with_body(pk, s, n, (int8_t)(rnd() % 100));
        break;
    }
    case 10:
    case 11: {
        uint32_t n = (uint32_t)(rnd() % (rnd() % 10 == 0 ? 20 : 5));
        msgpack_pack_array(pk, n);
        for (uint32_t i = 0; i < n; i++)
            rand_value(pk, depth + 1, max_depth);
        break;
    }
    default: { /* maps: string, integer, boolean, nil and NaN keys */
        uint32_t n = (uint32_t)(rnd() % (rnd() % 10 == 0 ? 20 : 5));
        msgpack_pack_map(pk, n);
        for (uint32_t i = 0; i < n; i++) {
            unsigned k = (unsigned)(rnd() % 10);
            if (k < 5) {
                size_t m = 1 + (size_t)(rnd() % 3);
                rand_bytes(s, m);
                msgpack_pack_str_with_body(pk, s, m);
            } else if (k < 7) {
                msgpack_pack_int64(pk, (int64_t)(rnd() % 7) - 2);
            } else if (k == 7) {
                msgpack_pack_nil(pk);
            } else if (k == 8) {
                msgpack_pack_double(pk, NAN);
            } else {
                msgpack_pack_true(pk);
            }
            rand_value(pk, depth + 1, max_depth);
        }
        break;
    }
    }
}

/* A chain of one-element arrays `levels` deep around an integer. */
static void deep_value(msgpack_packer *pk, int levels)
{
    for (int i = 0; i < levels; i++)
        msgpack_pack_array(pk, 1);
    msgpack_pack_int(pk, 7);
}

/* ---- comparing Lua values ---------------------------------------------------------- */

static bool lua_same(lua_State *L, int a, int b, int depth);

/* lua_same() compares borders (lua_rawlen) too, which two tables with the
 * same pairs may not share (an array with a hole made as an array, or as
 * a map): the round trips of a Lua value compare the pairs only. */
static bool same_pairs_only;

/* Every key of table a is in b with the same value. */
static bool lua_subset(lua_State *L, int a, int b, int depth)
{
    lua_pushnil(L);
    while (lua_next(L, a)) {
        int v = lua_gettop(L);
        lua_pushvalue(L, v - 1);
        if (lua_type(L, v - 1) == LUA_TTABLE) {
            /* table keys: equal by shape, found by scanning b */
            bool found = false;
            lua_pop(L, 1);
            lua_pushnil(L);
            while (!found && lua_next(L, b)) {
                int w = lua_gettop(L);
                if (lua_type(L, w - 1) == LUA_TTABLE &&
                    lua_same(L, v - 1, w - 1, depth + 1) &&
                    lua_same(L, v, w, depth + 1))
                    found = true;
                lua_pop(L, found ? 2 : 1);
            }
            if (!found) {
                lua_pop(L, 2);
                return false;
            }
            lua_pop(L, 1);
            continue;
        }
        lua_rawget(L, b);
        bool ok = lua_same(L, v, lua_gettop(L), depth + 1);
        lua_pop(L, 2);
        if (!ok) {
            lua_pop(L, 1);
            return false;
        }
    }
    return true;
}

static size_t n_keys(lua_State *L, int t)
{
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        n++;
        lua_pop(L, 1);
    }
    return n;
}

static bool lua_same(lua_State *L, int a, int b, int depth)
{
    luaL_checkstack(L, 8, "compare");
    a = lua_absindex(L, a);
    b = lua_absindex(L, b);
    int t = lua_type(L, a);
    if (t != lua_type(L, b) || depth > 200)
        return false;
    switch (t) {
    case LUA_TNUMBER: {
        if (lua_isinteger(L, a) != lua_isinteger(L, b))
            return false;
        if (lua_isinteger(L, a))
            return lua_tointeger(L, a) == lua_tointeger(L, b);
        lua_Number x = lua_tonumber(L, a), y = lua_tonumber(L, b);
        return x == y || (x != x && y != y);
    }
    case LUA_TTABLE:
        if (!same_pairs_only && lua_rawlen(L, a) != lua_rawlen(L, b))
            return false;
        /* as many keys, and every key of a in b with the same value */
        return n_keys(L, a) == n_keys(L, b) && lua_subset(L, a, b, depth);
    default:
        return lua_rawequal(L, a, b);
    }
}

/* ---- the tests ------------------------------------------------------------------------ */

static run *run_new(lua_State *L)
{
    run *r = calloc(1, sizeof *r);
    r->L = L;
    return r;
}

static void run_free(run *r)
{
    if (r->unp_live)
        msgpack_unpacked_destroy(&r->unp);
    th_buf_destroy(&r->scratch);
    free(r);
}

/* The result of a tool with `meta` both ways: directly (push_result) and
 * as the codec's bytes unpacked (the converter it replaced). */
static bool both_ways_same(lua_State *L, run *r, const char *meta, size_t len,
                           bool ok)
{
    th_result_copy res;
    memset(&res, 0, sizeof res);
    res.kind = TH_RESULT_DONE;
    res.ok = ok;
    th_buf_append(&res.out, "out\xff", 4); /* not UTF-8: bin in the codec */
    th_buf_append(&res.err, "err", 3);
    if (len)
        th_buf_append(&res.meta, meta, len);
    int top = lua_gettop(L);
    th_code__push_result(L, r, &res);
    th_buf codec = TH_BUF_INIT;
    CU_ASSERT_EQUAL_FATAL(th_codec_result_to_buf(&codec, &res), 0);
    th_code__push_msgpack(L, r, &codec);
    if (!ok) { /* as push_result adds it */
        lua_getfield(L, top + 1, "error");
        lua_setfield(L, top + 2, "error");
    }
    bool same = lua_same(L, top + 1, top + 2, 0);
    lua_settop(L, top);
    th_buf_destroy(&codec);
    th_result_copy_destroy(&res);
    return same;
}

static void test_random_results(void)
{
    lua_State *L = luaL_newstate();
    CU_ASSERT_PTR_NOT_NULL_FATAL(L);
    run *r = run_new(L);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int differ = 0, rounds = 3000;
    for (int i = 0; i < rounds; i++) {
        msgpack_sbuffer_clear(&sb);
        if (i % 50 == 49) /* deep, within what msgpack-c unpacks (32) */
            deep_value(&pk, 20 + (int)(rnd() % 11));
        else
            rand_value(&pk, 0, 1 + (int)(rnd() % 4));
        if (!both_ways_same(L, r, sb.data, sb.size, rnd() & 1)) {
            if (differ++ < 3)
                fprintf(stderr, "round %d: the direct result differs (%zu "
                                "bytes of meta)\n",
                        i, sb.size);
        }
    }
    CU_ASSERT_EQUAL(differ, 0);
    msgpack_sbuffer_destroy(&sb);
    run_free(r);
    lua_close(L);
}

/* Hand-picked: a meta map, errors, and meta bytes that are not one
 * complete msgpack value (meta becomes an empty table; ok and the texts
 * stay, where the old converter lost the whole result). */
static void test_directed_results(void)
{
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    run *r = run_new(L);
    /* {"toolhost": {"n": 5, "f": -1.5, "l": [1, nil, "x"]}} */
    static const char meta[] = "\x81\xa8toolhost\x83\xa1n\x05\xa1\x66\xcb\xbf\xf8"
                               "\x00\x00\x00\x00\x00\x00\xa1l\x93\x01\xc0\xa1x";
    th_result_copy res;
    memset(&res, 0, sizeof res);
    res.kind = TH_RESULT_DONE;
    res.ok = true;
    th_buf_append(&res.out, "hi", 2);
    th_buf_append(&res.meta, meta, sizeof meta - 1);
    th_code__push_result(L, r, &res);
    lua_setglobal(L, "r");
    CU_ASSERT_EQUAL(luaL_dostring(L,
                                  "assert(r.ok == true and r.stdout == 'hi' and "
                                  "r.stderr == '')\n"
                                  "local t = r.meta.toolhost\n"
                                  "assert(math.type(t.n) == 'integer' and t.n == 5)\n"
                                  "assert(t.f == -1.5)\n"
                                  "assert(t.l[1] == 1 and t.l[2] == nil and t.l[3] == 'x')\n"
                                  "assert(r.error == nil and r.structured == nil)"),
                    LUA_OK);
    /* truncated meta: an empty table, the rest kept */
    for (size_t cut = 1; cut < sizeof meta - 1; cut += 3) {
        th_buf_reset(&res.meta);
        th_buf_append(&res.meta, meta, cut);
        int top = lua_gettop(L);
        th_code__push_result(L, r, &res);
        CU_ASSERT_EQUAL(lua_gettop(L), top + 1);
        lua_setglobal(L, "r");
        CU_ASSERT_EQUAL(luaL_dostring(L, "assert(r.ok and r.stdout == 'hi' and "
                                         "next(r.meta) == nil)"),
                        LUA_OK);
    }
    /* deeper than msgpack-c's unpacker goes (32 levels): the meta is an
     * empty table, the rest of the result kept */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    deep_value(&pk, 70);
    th_buf_reset(&res.meta);
    th_buf_append(&res.meta, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    th_code__push_result(L, r, &res);
    lua_setglobal(L, "r");
    CU_ASSERT_EQUAL(luaL_dostring(L, "assert(type(r.meta) == 'table')\n"
                                     "assert(r.stdout == 'hi')"),
                    LUA_OK);
    /* a structured result: meta lazy like any other when it is empty, a
     * key when the tool set one */
    th_buf_reset(&res.out);
    th_buf_append(&res.out, "{\"n\": [1, 2]}", 13);
    th_buf_reset(&res.meta);
    res.structured = true;
    th_code__push_result(L, r, &res);
    lua_setglobal(L, "r");
    CU_ASSERT_EQUAL(luaL_dostring(L, "assert(r.structured.n[2] == 2)\n"
                                     "assert(rawget(r, 'meta') == nil)\n"
                                     "assert(next(r.meta) == nil and "
                                     "rawget(r, 'meta') == r.meta)"),
                    LUA_OK);
    th_buf_append(&res.meta, "\x81\xa1k\x01", 4); /* {"k": 1} */
    th_code__push_result(L, r, &res);
    lua_setglobal(L, "r");
    CU_ASSERT_EQUAL(luaL_dostring(L, "assert(r.structured.n[1] == 1)\n"
                                     "assert(rawget(r, 'meta').k == 1)"),
                    LUA_OK);
    res.structured = false;
    th_buf_reset(&res.out);
    th_buf_append(&res.out, "hi", 2);
    /* a run that failed: error = {code = tool_failed, message = stderr} */
    th_buf_reset(&res.meta);
    res.ok = false;
    th_buf_append(&res.err, "boom", 4);
    th_code__push_result(L, r, &res);
    lua_setglobal(L, "r");
    CU_ASSERT_EQUAL(luaL_dostring(L, "assert(r.ok == false and r.stderr == 'boom' "
                                     "and r.error.code == 'tool_failed' and "
                                     "r.error.message == 'boom' and "
                                     "next(r.meta) == nil)"),
                    LUA_OK);
    th_result_copy_destroy(&res);
    /* an error result: {ok = false, error = {code, message}} */
    th_code__push_error_result(L, r, TH_EINVAL, "bad args");
    lua_setglobal(L, "r");
    CU_ASSERT_EQUAL(luaL_dostring(L, "assert(r.ok == false and r.error.code == "
                                     "'invalid_request' and r.error.message == "
                                     "'bad args' and r.stdout == nil)"),
                    LUA_OK);
    run_free(r);
    lua_close(L);
}

/* ---- Lua -> msgpack: the encoder ------------------------------------------------ */

/* The value at the top packed by th_code__pack_into, compared with the
 * bytes msgpack-c made of `want`. */
static bool packs_as(lua_State *L, run *r, const msgpack_sbuffer *want)
{
    th_buf b = TH_BUF_INIT;
    bool over = false;
    int rc = th_code__pack_into(L, r, -1, &b, true, NULL, 0, &over);
    bool same = rc == 0 && !over && b.len == want->size &&
                memcmp(b.data, want->data, b.len) == 0;
    if (!same)
        fprintf(stderr, "packed %zu bytes, msgpack-c %zu (rc %d)\n", b.len,
                want->size, rc);
    th_buf_destroy(&b);
    lua_pop(L, 1);
    return same;
}

/* Scalars, strings and arrays at every width edge give msgpack-c's bytes
 * (the packer writes its own encodings since it stopped using msgpack-c's
 * packer); a one-key map too. */
static void test_pack_bytes(void)
{
    lua_State *L = luaL_newstate();
    CU_ASSERT_PTR_NOT_NULL_FATAL(L);
    run *r = run_new(L);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    static const int64_t ints[] = {
        0, 1, 31, 127, 128, 255, 256, 65535, 65536, 4294967295LL,
        4294967296LL, INT64_MAX, -1, -32, -33, -128, -129, -32768, -32769,
        -2147483648LL, -2147483649LL, INT64_MIN};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        msgpack_sbuffer_clear(&sb);
        msgpack_pack_int64(&pk, ints[i]);
        lua_pushinteger(L, (lua_Integer)ints[i]);
        CU_ASSERT_TRUE(packs_as(L, r, &sb));
    }
    static const double dbl[] = {1.5, -0.0, 1e300, -2.25e-300, 3.0};
    for (size_t i = 0; i < sizeof dbl / sizeof *dbl; i++) {
        msgpack_sbuffer_clear(&sb);
        msgpack_pack_double(&pk, dbl[i]);
        lua_pushnumber(L, dbl[i]);
        CU_ASSERT_TRUE(packs_as(L, r, &sb));
    }
    static const size_t lens[] = {0, 1, 31, 32, 255, 256, 65535, 65536, 70000};
    char *text = malloc(70000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    rand_bytes(text, 70000);
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        msgpack_sbuffer_clear(&sb);
        msgpack_pack_str_with_body(&pk, text, lens[i]);
        lua_pushlstring(L, text, lens[i]);
        CU_ASSERT_TRUE(packs_as(L, r, &sb));
    }
    free(text);
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_true(&pk);
    lua_pushboolean(L, 1);
    CU_ASSERT_TRUE(packs_as(L, r, &sb));
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_false(&pk);
    lua_pushboolean(L, 0);
    CU_ASSERT_TRUE(packs_as(L, r, &sb));
    /* arrays of 15, 16 and 70000 integers: fixarray, array16, array32 */
    static const uint32_t alen[] = {1, 15, 16, 65535, 70000};
    for (size_t i = 0; i < sizeof alen / sizeof *alen; i++) {
        msgpack_sbuffer_clear(&sb);
        msgpack_pack_array(&pk, alen[i]);
        lua_createtable(L, (int)alen[i], 0);
        for (uint32_t k = 1; k <= alen[i]; k++) {
            msgpack_pack_int64(&pk, (int64_t)k * 1000);
            lua_pushinteger(L, (lua_Integer)k * 1000);
            lua_rawseti(L, -2, k);
        }
        CU_ASSERT_TRUE(packs_as(L, r, &sb));
    }
    /* {a = {1, "x"}}: a map of one key, an array inside */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "a", 1);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_int64(&pk, 1);
    msgpack_pack_str_with_body(&pk, "x", 1);
    CU_ASSERT_EQUAL_FATAL(luaL_dostring(L, "return {a = {1, 'x'}}"), LUA_OK);
    CU_ASSERT_TRUE(packs_as(L, r, &sb));
    /* {} is an empty map */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 0);
    lua_newtable(L);
    CU_ASSERT_TRUE(packs_as(L, r, &sb));
    msgpack_sbuffer_destroy(&sb);
    run_free(r);
    lua_close(L);
}

/* Maps packed in one pass get their header once counted: 15 keys a
 * fixmap, 16 a map16, 70000 a map32 (the pairs moved up in place), and
 * each unpacks to the table it came from. */
static void test_pack_map_widths(void)
{
    lua_State *L = luaL_newstate();
    CU_ASSERT_PTR_NOT_NULL_FATAL(L);
    run *r = run_new(L);
    static const struct {
        int n;
        uint8_t head;
        size_t head_len;
    } cases[] = {{1, 0x81, 1}, {15, 0x8f, 1}, {16, 0xde, 3}, {65535, 0xde, 3},
                 {65536, 0xdf, 5}, {70000, 0xdf, 5}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int n = cases[i].n;
        lua_createtable(L, 0, n);
        for (int k = 0; k < n; k++) {
            lua_pushfstring(L, "key%d", k);
            lua_pushinteger(L, (lua_Integer)k * 3);
            lua_rawset(L, -3);
        }
        int t = lua_gettop(L);
        th_buf b = TH_BUF_INIT;
        CU_ASSERT_EQUAL_FATAL(th_code__pack_into(L, r, t, &b, false, NULL, 0,
                                                 NULL),
                              0);
        CU_ASSERT_EQUAL(b.data[0], cases[i].head);
        if (cases[i].head_len > 1) {
            uint64_t got = 0;
            for (size_t j = 1; j < cases[i].head_len; j++)
                got = got << 8 | b.data[j];
            CU_ASSERT_EQUAL(got, (uint64_t)n);
        }
        size_t vlen = 0;
        CU_ASSERT_EQUAL(th_mp_check(b.data, b.len, 1000000, &vlen, NULL), 0);
        CU_ASSERT_EQUAL(vlen, b.len);
        th_code__push_msgpack(L, r, &b);
        CU_ASSERT_TRUE(lua_same(L, t, t + 1, 0));
        lua_settop(L, t - 1);
        th_buf_destroy(&b);
    }
    /* the cap holds while the header is widened */
    lua_createtable(L, 0, 16);
    for (int k = 0; k < 16; k++) {
        lua_pushinteger(L, k);
        lua_setfield(L, -2, "abcdefghij" + (k % 10));
    }
    th_buf b = TH_BUF_INIT;
    bool over = false;
    th_code__pack_into(L, r, -1, &b, false, NULL, 1, &over);
    CU_ASSERT_TRUE(over);
    th_buf_destroy(&b);
    lua_pop(L, 1);
    run_free(r);
    lua_close(L);
}

/* Tool arguments are packed in one pass (pack_args: the pairs first, the
 * header after): the bytes are msgpack-c's for the same map (one key, a
 * float sent as an integer where the tool declares one, 16 keys past a
 * fixmap, a nested table), empty arguments are an empty map, and numeric
 * keys still get the two-pass path's errors (a list, positional keys), a
 * cycle back to the top its own. */
static void test_pack_tool_args(void)
{
    lua_State *L = luaL_newstate();
    CU_ASSERT_PTR_NOT_NULL_FATAL(L);
    run *r = run_new(L);
    th_proj_tool tool;
    memset(&tool, 0, sizeof tool);
    th_proj_param params[] = {{(char *)"n", TOOLHOST_TYPE_INTEGER, false},
                              {(char *)"text", TOOLHOST_TYPE_STRING, true}};
    tool.key = tool.name = (char *)"t";
    tool.params = params;
    tool.n_params = 2;

    /* {text = "hello"} */
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "hello");
    lua_setfield(L, -2, "text");
    th_buf b = TH_BUF_INIT;
    CU_ASSERT_EQUAL_FATAL(th_code__pack_into(L, r, -1, &b, false, &tool, 0,
                                             NULL),
                          0);
    static const uint8_t hello[] = "\x81\xa4text\xa5hello";
    CU_ASSERT_EQUAL(b.len, sizeof hello - 1);
    CU_ASSERT_EQUAL(memcmp(b.data, hello, sizeof hello - 1), 0);
    lua_pop(L, 1);

    /* {n = 3.0}: an integer where declared */
    lua_createtable(L, 0, 1);
    lua_pushnumber(L, 3.0);
    lua_setfield(L, -2, "n");
    CU_ASSERT_EQUAL(th_code__pack_into(L, r, -1, &b, false, &tool, 0, NULL), 0);
    static const uint8_t n3[] = "\x81\xa1n\x03";
    CU_ASSERT_TRUE(b.len == sizeof n3 - 1 && memcmp(b.data, n3, b.len) == 0);
    lua_pop(L, 1);

    /* 16 keys and a nested table: map16, same bytes as msgpack-c's of the
     * pairs in lua_next() order */
    lua_createtable(L, 0, 16);
    for (int k = 0; k < 15; k++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", k);
        lua_pushinteger(L, k);
        lua_setfield(L, -2, key);
    }
    lua_createtable(L, 2, 0);
    lua_pushinteger(L, 7);
    lua_rawseti(L, -2, 1);
    lua_pushliteral(L, "x");
    lua_rawseti(L, -2, 2);
    lua_setfield(L, -2, "list");
    int t = lua_gettop(L);
    CU_ASSERT_EQUAL_FATAL(th_code__pack_into(L, r, t, &b, false, &tool, 0,
                                             NULL),
                          0);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 16);
    lua_pushnil(L);
    while (lua_next(L, t)) {
        size_t kl;
        const char *k = lua_tolstring(L, -2, &kl);
        msgpack_pack_str_with_body(&pk, k, kl);
        if (lua_istable(L, -1)) {
            msgpack_pack_array(&pk, 2);
            msgpack_pack_int64(&pk, 7);
            msgpack_pack_str_with_body(&pk, "x", 1);
        } else {
            msgpack_pack_int64(&pk, lua_tointeger(L, -1));
        }
        lua_pop(L, 1);
    }
    CU_ASSERT_EQUAL(b.len, sb.size);
    CU_ASSERT_TRUE(b.len == sb.size && memcmp(b.data, sb.data, sb.size) == 0);
    CU_ASSERT_EQUAL(b.data[0], 0xde);
    msgpack_sbuffer_destroy(&sb);
    lua_settop(L, t - 1);

    /* {} */
    lua_newtable(L);
    CU_ASSERT_EQUAL(th_code__pack_into(L, r, -1, &b, false, &tool, 0, NULL), 0);
    CU_ASSERT_TRUE(b.len == 1 && b.data[0] == 0x80);
    lua_pop(L, 1);

    /* errors: a list, a positional key among named ones, a cycle */
    static const struct {
        const char *code, *want;
    } bad[] = {{"return {'a', 'b'}", "not a list"},
               {"local t = {text = 'x'}; t[5] = 1; return t",
                "positional or numeric key"},
               {"local t = {text = 'x'}; t.again = {t}; return t",
                "contains itself"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int top = lua_gettop(L);
        CU_ASSERT_EQUAL_FATAL(luaL_dostring(L, bad[i].code), 0);
        CU_ASSERT_EQUAL(th_code__pack_into(L, r, -1, &b, false, &tool, 0,
                                           NULL),
                        -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(r->msg, bad[i].want));
        if (!strstr(r->msg, bad[i].want))
            fprintf(stderr, "case %zu: %s\n", i, r->msg);
        CU_ASSERT_EQUAL(lua_gettop(L), top + 1);
        lua_settop(L, top);
    }
    th_buf_destroy(&b);
    run_free(r);
    lua_close(L);
}

/* Random values: msgpack -> Lua -> th_code__pack_into -> Lua again is
 * the same Lua value (maps in one pass or two, arrays, every scalar). */
static void test_pack_random(void)
{
    lua_State *L = luaL_newstate();
    CU_ASSERT_PTR_NOT_NULL_FATAL(L);
    run *r = run_new(L);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int differ = 0;
    same_pairs_only = true;
    for (int i = 0; i < 3000; i++) {
        msgpack_sbuffer_clear(&sb);
        rand_value(&pk, 0, 1 + (int)(rnd() % 4));
        th_buf in = TH_BUF_INIT, out = TH_BUF_INIT;
        th_buf_append(&in, sb.data, sb.size);
        int top = lua_gettop(L);
        th_code__push_msgpack(L, r, &in);
        if (th_code__pack_into(L, r, top + 1, &out, true, NULL, 0, NULL) != 0) {
            differ++;
        } else {
            th_code__push_msgpack(L, r, &out);
            if (!lua_same(L, top + 1, top + 2, 0) && differ++ < 3)
                fprintf(stderr, "round %d: packed again, the value differs\n",
                        i);
        }
        lua_settop(L, top);
        th_buf_destroy(&in);
        th_buf_destroy(&out);
    }
    same_pairs_only = false;
    CU_ASSERT_EQUAL(differ, 0);
    msgpack_sbuffer_destroy(&sb);
    run_free(r);
    lua_close(L);
}

void th_suite_code_bridge(void)
{
    CU_pSuite s = CU_add_suite("code_bridge", NULL, NULL);
    CU_add_test(s, "random_results", test_random_results);
    CU_add_test(s, "directed_results", test_directed_results);
    CU_add_test(s, "pack_bytes", test_pack_bytes);
    CU_add_test(s, "pack_map_widths", test_pack_map_widths);
    CU_add_test(s, "pack_tool_args", test_pack_tool_args);
    CU_add_test(s, "pack_random", test_pack_random);
}
