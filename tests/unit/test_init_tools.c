/* test_init_tools.c - ABI 1.1 init_tools(): tools a plugin builds in
 * init() are checked like the static ones, listed after them, and a
 * problem is a load error naming the tool (fini() runs: the fixture's
 * state would leak otherwise). */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#include "common/th_test.h"
#include "th/tool.h"

static const th_load_opts insecure = {.allow_insecure = true};

/* {"mode": MODE} as msgpack (fixstr). */
static size_t mode_cfg(uint8_t *buf, const char *mode)
{
    size_t n = strlen(mode), i = 0;
    buf[i++] = 0x81;
    buf[i++] = 0xa4;
    memcpy(buf + i, "mode", 4);
    i += 4;
    buf[i++] = (uint8_t)(0xa0 | n);
    memcpy(buf + i, mode, n);
    return i + n;
}

/* Opens the fixture and inits it with MODE: the init rc, the plugin
 * (unref it) and the message. */
static int open_init(const char *mode, th_plugin **p, th_error *e)
{
    const char *path = th_test_build_path("fixtures/init_tools.so");
    CU_ASSERT_EQUAL_FATAL(th_plugin_open(path, &insecure, p, e), 0);
    CU_ASSERT_EQUAL((*p)->n_tools, 1); /* the static one, before init */
    uint8_t cfg[64];
    return th_plugin_init(*p, cfg, mode_cfg(cfg, mode), e);
}

static void test_good(void)
{
    th_plugin *p;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(open_init("good", &p, &e), 0);
    CU_ASSERT_TRUE(p->initialized);
    CU_ASSERT_EQUAL_FATAL(p->n_tools, 3);
    CU_ASSERT_STRING_EQUAL(p->tools[0].name, "it_static");
    CU_ASSERT_STRING_EQUAL(p->tools[1].name, "it_dyn_a");
    CU_ASSERT_STRING_EQUAL(p->tools[2].name, "it_dyn_b");
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_PTR_EQUAL(p->tools[i].plugin, p);
        CU_ASSERT_PTR_NOT_NULL(p->tools[i].desc);
        CU_ASSERT_EQUAL(p->tools[i].stdout_type, TOOLHOST_SEM_TEXT);
    }
    th_plugin_unref(p);

    CU_ASSERT_EQUAL_FATAL(open_init("none", &p, &e), 0);
    CU_ASSERT_EQUAL(p->n_tools, 1);
    th_plugin_unref(p);
}

static void test_bad(void)
{
    static const struct {
        const char *mode, *want;
    } cases[] = {
        {"clash", "init_tools(): tool name 'it_static' is also a static "
                  "tool's"},
        {"dup", "init_tools(): tool name 'it_dyn_a' appears twice"},
        {"badname", "init_tools(): tool 'bad name' has an invalid name"},
        {"noexec", "init_tools(): tool 'it_dyn_b' has no execute function"},
        {"nullarray", "init_tools(): n_tools is 1 but its array is NULL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        th_plugin *p;
        th_error e;
        th_error_clear(&e);
        CU_ASSERT_EQUAL(open_init(cases[i].mode, &p, &e), TH_ELOAD);
        if (!strstr(e.msg, cases[i].want))
            fprintf(stderr, "\n%s: want '%s', got '%s'\n", cases[i].mode,
                    cases[i].want, e.msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, cases[i].want));
        CU_ASSERT_FALSE(p->initialized);
        CU_ASSERT_EQUAL(p->n_tools, 1); /* back to the static tool */
        th_plugin_unref(p);
    }
}

void th_suite_init_tools(void)
{
    CU_pSuite s = CU_add_suite("init_tools", NULL, NULL);
    CU_add_test(s, "good", test_good);
    CU_add_test(s, "bad", test_bad);
}
