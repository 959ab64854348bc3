/* test_att35_cache.c - th_schema_tool_output_object(), the cache in
 * th_tool of whether its output schema is an object (MCP's
 * structuredContent): many threads asking about one tool at once all get
 * the same answer (TSan: make SANITIZER=thread unit-build); tools of
 * each kind answer for themselves; an allocation that fails while the
 * schema is parsed gives "no" for that call only, not for the tool's
 * life. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "th/schema.h"

#define THREADS 8
#define ASKS 2000

typedef struct asker {
    const th_tool *tool;
    pthread_barrier_t *bar;
    int yes;
} asker;

static void *ask(void *ud)
{
    asker *a = ud;
    pthread_barrier_wait(a->bar);
    for (int i = 0; i < ASKS; i++)
        a->yes += th_schema_tool_output_object(a->tool);
    return NULL;
}

/* THREADS threads asking ASKS times each about t, started together: how
 * many "yes" in all. */
static int ask_together(const th_tool *t)
{
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, THREADS);
    pthread_t th[THREADS];
    asker a[THREADS];
    for (int i = 0; i < THREADS; i++) {
        a[i] = (asker){.tool = t, .bar = &bar};
        CU_ASSERT_FATAL(pthread_create(&th[i], NULL, ask, &a[i]) == 0);
    }
    int yes = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        yes += a[i].yes;
    }
    pthread_barrier_destroy(&bar);
    return yes;
}

static void test_threads(void)
{
    th_tool obj = {.name = "obj",
                   .output_schema = "{\"type\": \"object\", \"properties\": "
                                    "{\"a\": {\"type\": \"integer\"}}}"};
    th_tool arr = {.name = "arr",
                   .output_schema = "{\"type\": \"array\"}"};
    th_tool none = {.name = "none"};
    CU_ASSERT_EQUAL(ask_together(&obj), THREADS * ASKS);
    CU_ASSERT_EQUAL(ask_together(&arr), 0);
    CU_ASSERT_EQUAL(ask_together(&none), 0);
    /* each tool its own answer, whatever was asked before */
    CU_ASSERT_TRUE(th_schema_tool_output_object(&obj));
    CU_ASSERT_FALSE(th_schema_tool_output_object(&arr));
    th_tool obj2 = {.name = "obj2", .output_schema = "{\"type\": \"object\"}"};
    CU_ASSERT_TRUE(th_schema_tool_output_object(&obj2));
}

static json_malloc_t g_malloc;
static json_free_t g_free;

static void *failing_malloc(size_t n)
{
    (void)n;
    return NULL;
}

static void test_oom_not_kept(void)
{
    th_tool obj = {.name = "obj", .output_schema = "{\"type\": \"object\"}"};
    json_get_alloc_funcs(&g_malloc, &g_free);
    json_set_alloc_funcs(failing_malloc, g_free);
    bool during = th_schema_tool_output_object(&obj);
    json_set_alloc_funcs(g_malloc, g_free);
    CU_ASSERT_FALSE(during);
    /* the schema can be read now: the answer is its own */
    CU_ASSERT_TRUE(th_schema_tool_output_object(&obj));
}

void th_suite_att35_cache(void)
{
    CU_pSuite s = CU_add_suite("att35_cache", NULL, NULL);
    CU_add_test(s, "threads", test_threads);
    CU_add_test(s, "oom_not_kept", test_oom_not_kept);
}
