/* code_guard.c - the pattern-cost guard of the Lua code runtime
 * (th/code.h): string.find/match/gmatch/gsub, and table.move, refuse a
 * call whose estimated work in C does not fit in the time left, since the
 * count hook cannot stop a library function that runs long in C.  Installed
 * by the sandbox (code_lua.c); runs on the thread that called th_code_run()
 * (a worker, for run_code), inside the run's lua_pcall.
 */
#include "code_int.h"

#include <ctype.h>
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

/* ---- Pattern cost guard -------------------------------------------------------
 *
 * Lua's pattern matcher is C code: the count hook cannot stop it, and a
 * backtracking pattern on a large subject (("a"):rep(1e5):find("a*b"),
 * s:find(".-.-.-x")) can run for minutes.  Before string.find, match,
 * gmatch and gsub run, the sandbox estimates the worst-case number of
 * matcher steps from the pattern's items and the subject, and refuses a
 * call whose estimate does not fit in the time left.  The estimate reads the
 * pattern grammar of the Lua manual (classes, sets, quantifiers, %b, %f,
 * anchors); the matching itself is always Lua's.
 *
 * For the first item quantified with *, + or - the work over all start
 * positions is about the sum, over maximal runs of subject bytes in its
 * class, of L^2/2 (anchored: the first run only); every later such item
 * multiplies by its longest run + 1, every ? by 2. */

#define STEPS_PER_MS 100000.0 /* measured: 3e5 or more per ms */

static bool class_has(int c, int cl)
{
    int r;
    switch (tolower(cl)) {
    case 'a': r = isalpha(c); break;
    case 'c': r = iscntrl(c); break;
    case 'd': r = isdigit(c); break;
    case 'g': r = isgraph(c); break;
    case 'l': r = islower(c); break;
    case 'p': r = ispunct(c); break;
    case 's': r = isspace(c); break;
    case 'u': r = isupper(c); break;
    case 'w': r = isalnum(c); break;
    case 'x': r = isxdigit(c); break;
    default: return cl == c;
    }
    return isupper(cl) ? !r : r != 0;
}

static void set_add(uint8_t set[32], int c)
{
    set[(unsigned)c >> 3] |= (uint8_t)(1u << (c & 7));
}

static bool set_has(const uint8_t set[32], unsigned char c)
{
    return set[c >> 3] & (1u << (c & 7));
}

/* Parses one single-character class at p into set; returns the position
 * after it, or NULL when the pattern is malformed (Lua will say so). */
static const char *parse_class(const char *p, const char *end, uint8_t set[32])
{
    memset(set, 0, 32);
    if (*p == '.') {
        memset(set, 0xff, 32);
        return p + 1;
    }
    if (*p == '%') {
        if (p + 1 >= end)
            return NULL;
        for (int c = 0; c < 256; c++)
            if (class_has(c, (unsigned char)p[1]))
                set_add(set, c);
        return p + 2;
    }
    if (*p != '[') {
        set_add(set, (unsigned char)*p);
        return p + 1;
    }
    const char *q = p + 1;
    bool neg = q < end && *q == '^';
    if (neg)
        q++;
    bool first = true;
    while (q < end && (*q != ']' || first)) {
        first = false;
        if (*q == '%' && q + 1 < end) {
            for (int c = 0; c < 256; c++)
                if (class_has(c, (unsigned char)q[1]))
                    set_add(set, c);
            q += 2;
        } else if (q + 2 < end && q[1] == '-' && q[2] != ']') {
            for (int c = (unsigned char)q[0]; c <= (unsigned char)q[2]; c++)
                set_add(set, c);
            q += 3;
        } else {
            set_add(set, (unsigned char)*q);
            q++;
        }
    }
    if (q >= end)
        return NULL;
    if (neg)
        for (int i = 0; i < 32; i++)
            set[i] = (uint8_t)~set[i];
    return q + 1;
}

/* Longest run and sum of squared runs of subject bytes in set. */
static void runs(const unsigned char *s, size_t n, const uint8_t set[32],
                 double *longest, double *sumsq)
{
    double L = 0, best = 0, sq = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && set_has(set, s[i])) {
            L++;
            continue;
        }
        sq += L * L;
        if (L > best)
            best = L;
        L = 0;
    }
    *longest = best;
    *sumsq = sq;
}

/* The estimated worst-case matcher steps, or -1 when the pattern is
 * malformed (Lua reports that itself). */
static double pattern_cost(const char *s, size_t n, const char *p, size_t pl,
                           bool can_anchor)
{
    const char *end = p + pl;
    bool anchored = false;
    if (can_anchor && p < end && *p == '^') {
        anchored = true;
        p++;
    }
    double first = -1, rest = 1, items = 1;
    uint8_t set[32];
    while (p < end) {
        char c = *p;
        items++;
        if (c == '(' || c == ')' || (c == '$' && p + 1 == end)) {
            p++;
            continue;
        }
        if (c == '%' && p + 1 < end && p[1] == 'b') {
            if (p + 3 >= end)
                return -1;
            /* a balance scan may run to the end from every opener */
            double openers = 0;
            for (size_t i = 0; i < n; i++)
                openers += s[i] == (unsigned char)p[2];
            if (first < 0)
                first = openers * (double)n + (double)n;
            else
                rest *= (double)n + 1;
            p += 4;
            continue;
        }
        if (c == '%' && p + 1 < end && p[1] == 'f') {
            p += 2;
            if (p >= end || *p != '[' || !(p = parse_class(p, end, set)))
                return -1;
            continue;
        }
        if (c == '%' && p + 1 < end && isdigit((unsigned char)p[1])) {
            p += 2;
            continue;
        }
        const char *q = parse_class(p, end, set);
        if (!q)
            return -1;
        char quant = q < end ? *q : 0;
        if (quant == '*' || quant == '+' || quant == '-') {
            double longest, sumsq;
            runs((const unsigned char *)s, n, set, &longest, &sumsq);
            if (first < 0)
                first = anchored ? longest + 1 : sumsq / 2 + (double)n;
            else
                rest *= longest + 1;
            q++;
        } else if (quant == '?') {
            rest *= 2;
            q++;
        }
        p = q;
        if (rest > 1e30)
            rest = 1e30;
    }
    if (first < 0) /* no quantifier: a scan per start position */
        return (anchored ? 1.0 : (double)n + 1) * items;
    return first * rest * items;
}

/* string.find/match/gmatch/gsub with the cost guard.  Upvalue 1: the
 * original function; upvalue 2: its name; upvalue 3: true for find. */
int th_code__pattern_fn(lua_State *L)
{
    run *r = th_code__get_run(L);
    const char *name = lua_tostring(L, lua_upvalueindex(2));
    bool is_find = lua_toboolean(L, lua_upvalueindex(3));
    if (r->has_deadline && lua_type(L, 1) == LUA_TSTRING &&
        lua_type(L, 2) == LUA_TSTRING) {
        size_t n, pl;
        const char *s = lua_tolstring(L, 1, &n);
        const char *p = lua_tolstring(L, 2, &pl);
        double left = (double)th_code__ms_left(r);
        double budget = (left > 1 ? left : 1) * STEPS_PER_MS;
        double cost;
        if (is_find && (lua_toboolean(L, 4) ||
                        strpbrk(p, "^$*+?.([%-") == NULL ||
                        strlen(p) != pl))
            cost = (double)n * (double)(pl ? pl : 1) / 20; /* memcmp */
        else
            cost = pattern_cost(s, n, p, pl, strcmp(name, "gmatch") != 0);
        if (cost > budget) {
            char msg[400];
            snprintf(msg, sizeof msg,
                     "string.%s: this pattern could take too long on a "
                     "%zu-byte string (about %.3g matcher steps; the time "
                     "left allows %.3g): match smaller pieces, e.g. one line "
                     "at a time with for line in s:gmatch(\"[^\\n]+\") do "
                     "... end, or use a plain search: s:find(text, 1, true)",
                     name, n, cost, budget);
            return luaL_error(L, "%s", msg);
        }
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* table.move(a1, f, e, t [, a2]) loops in C over e - f + 1 indices, even
 * when the table is empty: refuse a range the time left cannot cover.
 * Upvalue 1: the original function. */
int th_code__table_move(lua_State *L)
{
    run *r = th_code__get_run(L);
    lua_Integer f = luaL_checkinteger(L, 2);
    lua_Integer e = luaL_checkinteger(L, 3);
    if (r->has_deadline && e >= f) {
        double left = (double)th_code__ms_left(r);
        double budget = (left > 1 ? left : 1) * STEPS_PER_MS;
        if ((double)e - (double)f + 1 > budget)
            return luaL_error(L,
                              "table.move: %I elements or more are too many "
                              "to move in the time left",
                              (lua_Integer)budget);
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}
