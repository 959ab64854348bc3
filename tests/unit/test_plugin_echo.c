/* test_plugin_echo.c - the echo plugin through the fake host: echo, and
 * echo_async's progress steps and cancellation. */
#include <CUnit/CUnit.h>
#include <string.h>
#include <time.h>

#include "common/plugin_harness.h"
#include "common/th_test.h"

static th_harness *h;

static int setup(void)
{
    char err[1024];
    h = th_harness_load(th_test_build_path("plugins/echo.so"), NULL, err,
                        sizeof err);
    return h ? 0 : -1;
}

static int teardown(void)
{
    th_harness_unload(h);
    return 0;
}


static void test_descriptor(void)
{
    const toolhost_plugin *p = th_harness_plugin(h);
    CU_ASSERT_STRING_EQUAL(p->name, "echo");
    CU_ASSERT_EQUAL(p->n_tools, 2);
    const toolhost_tool *t = th_harness_tool(h, "echo");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->flags, TOOLHOST_TOOL_READ_ONLY |
                                  TOOLHOST_TOOL_IDEMPOTENT |
                                  TOOLHOST_TOOL_SHORT);
    CU_ASSERT_EQUAL(t->stdout_type, TOOLHOST_SEM_TEXT);
    CU_ASSERT_EQUAL(t->n_params, 1);
    CU_ASSERT_TRUE(t->params[0].required);
    t = th_harness_tool(h, "echo_async");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_TRUE(t->flags & TOOLHOST_TOOL_ASYNC);
    CU_ASSERT_EQUAL(t->n_params, 3);
}

static void test_echo(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(h, "echo", "{\"text\": \"hello\"}", 0, &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "hello");
    CU_ASSERT_EQUAL(c.err.len, 0);
    th_harness_call_free(&c);

    /* bytes as they are, NUL included */
    CU_ASSERT_EQUAL(th_harness_run(h, "echo", "{\"text\": \"a\\u0000b\"}", 0,
                                   &c),
                    TOOLHOST_OK);
    CU_ASSERT_EQUAL_FATAL(c.out.len, 3);
    CU_ASSERT_EQUAL(memcmp(c.out.data, "a\0b", 3), 0);
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(th_harness_run(h, "echo", "{}", 0, &c), TH_EARGS);
    CU_ASSERT_STRING_EQUAL(c.verr, "Error parsing arguments for echo: "
                                   "missing required parameter 'text'");
    th_harness_call_free(&c);
    CU_ASSERT_EQUAL(th_harness_run(h, "echo", "{\"text\": 3}", 0, &c),
                    TH_EARGS);
    th_harness_call_free(&c);
}

static void test_async_steps(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(h, "echo_async",
                                   "{\"text\": \"done\", \"delay_ms\": 1}", 0,
                                   &c),
                    TOOLHOST_OK);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "done");
    CU_ASSERT_EQUAL_FATAL(c.n_progress, 3); /* the default steps */
    for (int i = 0; i < 3; i++) {
        char want[32];
        snprintf(want, sizeof want, "step %d/3", i + 1);
        CU_ASSERT_STRING_EQUAL(c.progress[i].message, want);
        CU_ASSERT_DOUBLE_EQUAL(c.progress[i].fraction, (i + 1) / 3.0, 1e-9);
    }
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(th_harness_run(h, "echo_async",
                                   "{\"text\": \"x\", \"steps\": 5, "
                                   "\"delay_ms\": 0}",
                                   0, &c),
                    TOOLHOST_OK);
    CU_ASSERT_EQUAL(c.n_progress, 5);
    CU_ASSERT_STRING_EQUAL(c.progress[4].message, "step 5/5");
    th_harness_call_free(&c);

    CU_ASSERT_EQUAL(th_harness_run(h, "echo_async",
                                   "{\"text\": \"x\", \"steps\": 0}", 0, &c),
                    TOOLHOST_OK);
    CU_ASSERT_EQUAL(c.n_progress, 0);
    CU_ASSERT_STRING_EQUAL(th_harness_out(&c), "x");
    th_harness_call_free(&c);
}

static void test_async_cancel(void)
{
    th_harness_call c;
    /* cancelled when the 2nd update arrives: stops before step 3 */
    CU_ASSERT_EQUAL(th_harness_run(h, "echo_async",
                                   "{\"text\": \"x\", \"steps\": 5, "
                                   "\"delay_ms\": 2}",
                                   2, &c),
                    TOOLHOST_FAILED);
    CU_ASSERT_EQUAL(c.n_progress, 2);
    CU_ASSERT_EQUAL(c.out.len, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(th_harness_err(&c), "cancelled"));
    th_harness_call_free(&c);

    /* a cancel during a long step ends the wait at once */
    time_t t0 = time(NULL);
    CU_ASSERT_EQUAL(th_harness_run(h, "echo_async",
                                   "{\"text\": \"x\", \"steps\": 2, "
                                   "\"delay_ms\": 60000}",
                                   1, &c),
                    TOOLHOST_FAILED);
    CU_ASSERT_EQUAL(c.n_progress, 1);
    CU_ASSERT_EQUAL(c.out.len, 0);
    CU_ASSERT_TRUE(time(NULL) - t0 < 10);
    th_harness_call_free(&c);

    /* cancelled before it starts */
    CU_ASSERT_EQUAL(th_harness_run(h, "echo_async", "{\"text\": \"x\"}", -1,
                                   &c),
                    TOOLHOST_FAILED);
    CU_ASSERT_TRUE(c.n_progress <= 1);
    CU_ASSERT_EQUAL(c.out.len, 0);
    th_harness_call_free(&c);
}

static void test_async_validate(void)
{
    th_harness_call c;
    CU_ASSERT_EQUAL(th_harness_run(h, "echo_async",
                                   "{\"text\": \"x\", \"steps\": -1}", 0, &c),
                    TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verr, "'steps'"));
    th_harness_call_free(&c);
    CU_ASSERT_EQUAL(th_harness_run(h, "echo_async",
                                   "{\"text\": \"x\", \"other\": 1}", 0, &c),
                    TH_EARGS);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verr, "unknown parameter 'other'"));
    th_harness_call_free(&c);
}

void th_suite_plugin_echo(void)
{
    CU_pSuite s = CU_add_suite("plugin_echo", setup, teardown);
    CU_add_test(s, "descriptor", test_descriptor);
    CU_add_test(s, "echo", test_echo);
    CU_add_test(s, "async_steps", test_async_steps);
    CU_add_test(s, "async_cancel", test_async_cancel);
    CU_add_test(s, "async_validate", test_async_validate);
}
