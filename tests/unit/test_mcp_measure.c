/* test_mcp_measure.c - mcp_json_measure(), the scan that bounds a POST
 * body's nesting and elements before jansson builds it: examples at the
 * edges, then a model over random trees (the depth and the element count
 * computed from the tree jansson dumped, with strings full of brackets,
 * quotes and backslashes) - the scan agrees at the limit and one below. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../../host/mcp/mcp.h"

static int measure(const char *t, uint32_t depth, uint32_t elems)
{
    return mcp_json_measure(t, strlen(t), depth, elems);
}

static void test_examples(void)
{
    CU_ASSERT_EQUAL(measure("", 1, 1), 0);
    CU_ASSERT_EQUAL(measure("[[]]", 2, 10), 0);
    CU_ASSERT_EQUAL(measure("[[]]", 1, 10), MCP_JSON_TOO_DEEP);
    CU_ASSERT_EQUAL(measure("{\"a\":[1,2]}", 2, 4), 0);
    CU_ASSERT_EQUAL(measure("{\"a\":[1,2]}", 2, 3), MCP_JSON_TOO_MANY);
    /* brackets, escaped quotes and backslashes inside strings */
    CU_ASSERT_EQUAL(measure("[\"[[[[\\\"]]]],,,\"]", 1, 1), 0);
    CU_ASSERT_EQUAL(measure("[\"\\\\\",[]]", 2, 3), 0);
    CU_ASSERT_EQUAL(measure("[\"\\\\\",[]]", 1, 3), MCP_JSON_TOO_DEEP);
    CU_ASSERT_EQUAL(measure("[\"\\\\\\\"[\"]", 1, 1), 0);
    /* an unterminated string ends the scan (the parser refuses it) */
    CU_ASSERT_EQUAL(measure("[\"[[[[[[", 1, 1), 0);
    /* closers without openers do not go below zero */
    CU_ASSERT_EQUAL(measure("]]]][[", 2, 10), 0);
    CU_ASSERT_EQUAL(measure("]]]][[[", 2, 10), MCP_JSON_TOO_DEEP);
}

static unsigned rnd(unsigned *seed, unsigned n)
{
    *seed = *seed * 1103515245u + 12345u;
    return (*seed >> 16) % n;
}

static json_t *random_value(unsigned *seed, int depth)
{
    static const char alphabet[] = "[]{},:\"\\ab \n\t";
    unsigned k = depth <= 0 ? rnd(seed, 3) : rnd(seed, 5);
    if (k == 0) {
        char s[12];
        unsigned n = rnd(seed, sizeof s);
        for (unsigned i = 0; i < n; i++)
            s[i] = alphabet[rnd(seed, sizeof alphabet - 1)];
        return json_stringn(s, n);
    }
    if (k == 1)
        return json_integer(rnd(seed, 1000));
    if (k == 2)
        return json_true();
    unsigned n = rnd(seed, 5);
    json_t *c = k == 3 ? json_array() : json_object();
    for (unsigned i = 0; i < n; i++) {
        json_t *v = random_value(seed, depth - 1 - (int)rnd(seed, 2));
        if (k == 3) {
            json_array_append_new(c, v);
        } else {
            char key[8] = "k[\"]";
            key[4] = (char)('a' + i);
            key[5] = '\0';
            json_object_set_new(c, key, v);
        }
    }
    return c;
}

/* The tree's nesting, and its elements as the scan counts them: one per
 * container, one per member ':' and one per ',' between children. */
static void model(const json_t *j, unsigned at, unsigned *depth,
                  unsigned *elems)
{
    if (json_is_array(j) || json_is_object(j)) {
        if (at + 1 > *depth)
            *depth = at + 1;
        (*elems)++;
        size_t n = json_is_array(j) ? json_array_size(j) : json_object_size(j);
        if (n)
            *elems += (unsigned)n - 1;
        if (json_is_object(j))
            *elems += (unsigned)n;
        if (json_is_array(j)) {
            size_t i;
            json_t *v;
            json_array_foreach(j, i, v) model(v, at + 1, depth, elems);
        } else {
            const char *key;
            json_t *v;
            json_object_foreach((json_t *)j, key, v)
                model(v, at + 1, depth, elems);
        }
    }
}

static void test_random_model(void)
{
    unsigned seed = 29;
    for (int round = 0; round < 3000; round++) {
        json_t *j = random_value(&seed, 1 + (int)rnd(&seed, 7));
        char *t = json_dumps(j, JSON_ENCODE_ANY |
                                    (round % 2 ? JSON_COMPACT : JSON_INDENT(1)));
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        unsigned depth = 0, elems = 0;
        model(j, 0, &depth, &elems);
        CU_ASSERT_EQUAL(measure(t, depth, elems), 0);
        if (depth > 0)
            CU_ASSERT_EQUAL(measure(t, depth - 1, 1000000),
                            MCP_JSON_TOO_DEEP);
        if (elems > 0)
            CU_ASSERT_EQUAL(measure(t, 1000, elems - 1), MCP_JSON_TOO_MANY);
        free(t);
        json_decref(j);
    }
}

void th_suite_mcp_measure(void)
{
    CU_pSuite s = CU_add_suite("mcp_measure", NULL, NULL);
    CU_add_test(s, "examples", test_examples);
    CU_add_test(s, "random_model", test_random_model);
}
