/* test_stats_window.c - the windowed percentiles of stats.c on a fake
 * clock: calls land in 10-second slices; the 1-minute window sees the last
 * 6 slices, the 5-minute one the last 30; old slices drop out and a slot
 * reused for a new slice starts empty. */
#include <CUnit/CUnit.h>
#include <stdlib.h>

#include "call/manager.h"

#define S 1000000000LL

static void test_window_math(void)
{
    th_stat *st = calloc(1, sizeof *st);
    CU_ASSERT_FATAL(st != NULL);
    double p50, p99;
    int64_t t0 = 1000 * S;
    /* 100 fast calls (1 ms) at t0, one slow (1 s) at t0 + 120 s */
    for (int i = 0; i < 100; i++)
        th_stat_latency_at(st, 1000000, t0);
    th_stat_latency_at(st, S, t0 + 120 * S);
    /* at t0 + 125 s: the last minute holds only the slow call */
    th_stat_window(st, t0 + 125 * S, 6, &p50, &p99);
    CU_ASSERT(p50 >= 1000 && p50 < 1200);
    /* the 5 minutes hold both: p50 fast, p99 ... still fast (100 of 101) */
    th_stat_window(st, t0 + 125 * S, TH_WIN_SLOTS, &p50, &p99);
    CU_ASSERT(p50 >= 1 && p50 < 1.2);
    CU_ASSERT(p99 >= 1 && p99 < 1.2);
    /* 6 minutes on: both windows are empty */
    th_stat_window(st, t0 + 480 * S, TH_WIN_SLOTS, &p50, &p99);
    CU_ASSERT_EQUAL(p50, 0);
    CU_ASSERT_EQUAL(p99, 0);
    /* t0 + 300 s reuses t0's slot: the slot starts empty */
    th_stat_latency_at(st, 2000000, t0 + 300 * S);
    th_stat_window(st, t0 + 300 * S, 1, &p50, &p99);
    CU_ASSERT(p50 >= 2 && p50 < 2.4);
    CU_ASSERT(p99 >= 2 && p99 < 2.4);
    /* the totals keep everything: 102 calls, their sum */
    uint64_t n = 0;
    for (unsigned i = 0; i < TH_HIST_BUCKETS; i++)
        n += st->hist[i];
    CU_ASSERT_EQUAL(n, 102);
    CU_ASSERT_EQUAL(st->sum_ns, 100ull * 1000000 + S + 2000000);
    free(st);
}

static void test_le_bounds(void)
{
    /* doubling from 16 us */
    CU_ASSERT_DOUBLE_EQUAL(th_stats_le_s(0), 16e-6, 1e-12);
    for (unsigned i = 1; i < TH_STATS_LE; i++)
        CU_ASSERT_DOUBLE_EQUAL(th_stats_le_s(i), 2 * th_stats_le_s(i - 1), 1e-12);
}

void th_suite_stats_window(void)
{
    CU_pSuite s = CU_add_suite("stats_window", NULL, NULL);
    CU_add_test(s, "window_math", test_window_math);
    CU_add_test(s, "le_bounds", test_le_bounds);
}
