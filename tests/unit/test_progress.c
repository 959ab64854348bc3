/* test_progress.c - the one progress coalescing slot (th/progress.h):
 * the latest update wins, every replaced one is counted (with what was
 * folded upstream), taking empties the slot; a model-based run over random
 * rounds; and the config reference count (th_config_ref/unref). */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/config.h"
#include "th/progress.h"

static void test_latest_wins(void)
{
    th_progress_slot p;
    memset(&p, 0, sizeof p);
    th_progress_update u;
    CU_ASSERT_FALSE(th_progress_take(&p, &u));
    static const uint8_t data[] = {0x81, 0xa1, 'n', 0x01};
    CU_ASSERT_EQUAL(th_progress_copy(&u, 7, 0.1, "one", NULL, 0, 0), 0);
    th_progress_put(&p, &u);
    CU_ASSERT_PTR_NULL(u.message); /* taken by the slot */
    CU_ASSERT_EQUAL(th_progress_copy(&u, 7, 0.5, "two", data, sizeof data, 2), 0);
    th_progress_put(&p, &u);
    CU_ASSERT_TRUE(th_progress_take(&p, &u));
    CU_ASSERT_STRING_EQUAL(u.message, "two");
    CU_ASSERT_EQUAL(u.data_len, sizeof data);
    CU_ASSERT_EQUAL(memcmp(u.data, data, sizeof data), 0);
    CU_ASSERT_EQUAL(u.coalesced, 3); /* "one" + the 2 folded into "two" */
    th_event ev;
    th_progress_event(&u, 9, &ev);
    CU_ASSERT_EQUAL(ev.kind, TH_EV_PROGRESS);
    CU_ASSERT_EQUAL(ev.call_id, 9);
    CU_ASSERT_EQUAL(ev.task_id, 7);
    CU_ASSERT_EQUAL(ev.coalesced, 3);
    CU_ASSERT_DOUBLE_EQUAL(ev.fraction, 0.5, 1e-9);
    th_progress_update_destroy(&u);
    CU_ASSERT_FALSE(th_progress_take(&p, &u));
    /* an event copied from another slot's event keeps its count */
    ev.message = "three";
    ev.data = NULL;
    ev.data_len = 0;
    CU_ASSERT_EQUAL(th_progress_copy_event(&u, &ev), 0);
    th_progress_put(&p, &u);
    CU_ASSERT_EQUAL(p.coalesced, 3);
    th_progress_clear(&p);
    CU_ASSERT_FALSE(p.pending);
}

/* Random puts and takes against a model: what is taken is the last put,
 * with coalesced = (puts since the last take - 1) + their upstream counts. */
static void test_random_model(void)
{
    srand(12);
    th_progress_slot p;
    memset(&p, 0, sizeof p);
    int puts = 0, seq = 0;
    uint32_t upstream = 0;
    for (int round = 0; round < 20000; round++) {
        th_progress_update u;
        if (rand() % 3) {
            char msg[32];
            snprintf(msg, sizeof msg, "m%d", ++seq);
            uint32_t up = (uint32_t)(rand() % 4);
            CU_ASSERT_EQUAL_FATAL(th_progress_copy(&u, 1, seq, msg, NULL, 0, up), 0);
            th_progress_put(&p, &u);
            puts++;
            upstream += up;
            continue;
        }
        bool got = th_progress_take(&p, &u);
        CU_ASSERT_EQUAL(got, puts > 0);
        if (got) {
            char want[32];
            snprintf(want, sizeof want, "m%d", seq);
            CU_ASSERT_STRING_EQUAL(u.message, want);
            CU_ASSERT_EQUAL(u.coalesced, (uint32_t)(puts - 1) + upstream);
        }
        th_progress_update_destroy(&u);
        puts = 0;
        upstream = 0;
    }
    th_progress_clear(&p);
}

static void test_config_refs(void)
{
    th_config *c = NULL;
    th_error e;
    CU_ASSERT_EQUAL_FATAL(th_config_parse("t.yaml", NULL, "host: {}\n", 9, &c, &e), 0);
    CU_ASSERT_PTR_EQUAL(th_config_ref(c), c);
    CU_ASSERT_PTR_EQUAL(th_config_ref(c), c);
    th_config_unref(c);
    th_config_unref(c);
    CU_ASSERT_PTR_NOT_NULL(c->path); /* still the loader's */
    th_config_unref(c);              /* the last: freed (ASan would tell) */
    th_config_ref(NULL);
    th_config_unref(NULL);
}

void th_suite_progress(void)
{
    CU_pSuite s = CU_add_suite("progress", NULL, NULL);
    CU_add_test(s, "latest_wins", test_latest_wins);
    CU_add_test(s, "random_model", test_random_model);
    CU_add_test(s, "config_refs", test_config_refs);
}
