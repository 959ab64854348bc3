/* test_stats_shards.c - the per-thread shards of stats.c: calls counted
 * from many threads at once (more than there are shard slots, so some count
 * with atomics on the entry), some threads exiting mid-way and their slots
 * taken over by new threads, add up to exactly what one thread counting the
 * same calls on the entry itself gets: per tool (latency histogram, sum,
 * p50/p99, the window) and per toolset and front (outcomes, those of a
 * backend and an isolated plugin's crash included, histogram). */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "call/manager.h"

#define MS 1000000LL
#define T0 (1000LL * 1000000000LL) /* a fake monotonic clock */
#define WAVE1 40                     /* > TH_STAT_SHARDS */
#define WAVE2 20
#define SHORT_CALLS 150
#define LONG_CALLS 3000

typedef struct shard_run {
    th_host *h;
    th_stat *st;
    int id;
    int calls;
    pthread_barrier_t *bar; /* wave 1: all hold a slot before going on */
} shard_run;

/* Call k of thread `id`: its latency, end time, toolset and outcome. */
static int64_t call_ns(int id, int k)
{
    return (int64_t)((id * 7919 + k * 104729) % 40000) * 1000; /* < 40 ms */
}

static int64_t call_now(int id, int k)
{
    return T0 + (int64_t)((id + k) % 50) * 1000 * MS; /* 50 s: 5 slices */
}

static const char *call_ts(int id) { return id % 2 ? "ts_a" : "ts_b"; }

static void call_fin(int id, int k, th_result_copy *r)
{
    memset(r, 0, sizeof *r);
    switch ((id + k) % 10) {
    case 0: case 1: case 2: r->kind = TH_RESULT_DONE; r->ok = true; break;
    case 3: r->kind = TH_RESULT_DONE; r->ok = false; break;
    case 4: r->kind = TH_RESULT_ERROR; r->error = TH_ETIMEOUT; break;
    case 5: r->kind = TH_RESULT_ERROR; r->error = TH_ECANCELLED; break;
    case 6: r->kind = TH_RESULT_ERROR; r->error = TH_EUNAVAILABLE; break;
    case 7: r->kind = TH_RESULT_ERROR; r->error = TH_EBACKEND_TIMEOUT; break;
    case 8: r->kind = TH_RESULT_ERROR; r->error = TH_EPLUGIN_CRASHED; break;
    default: r->kind = TH_RESULT_RUNNING; break; /* not final: tool only */
    }
}

static void *shard_thread(void *arg)
{
    shard_run *r = arg;
    for (int k = 0; k < r->calls; k++) {
        th_result_copy fin;
        call_fin(r->id, k, &fin);
        th_stat_end_counts(r->h, r->st, call_ts(r->id), "rpc", &fin,
                           call_ns(r->id, k), call_now(r->id, k));
        if (k == 0 && r->bar)
            pthread_barrier_wait(r->bar);
    }
    return NULL;
}

typedef struct grp_seen {
    th_group_stats g[3];
    int n;
} grp_seen;

static int grp_cb(const th_group_stats *g, void *ud)
{
    grp_seen *s = ud;
    if (s->n < 3)
        s->g[s->n] = *g;
    s->n++;
    return 0;
}

static int tool_cb(const th_tool_stats *t, void *ud)
{
    *(th_tool_stats *)ud = *t;
    return 0;
}

static void test_many_threads_exact(void)
{
    th_host *h = calloc(1, sizeof *h);
    th_stat *want = calloc(1, sizeof *want); /* the same, on one thread */
    CU_ASSERT_FATAL(h != NULL && want != NULL);
    pthread_mutex_init(&h->stmu, NULL);
    h->mgr.serial = (1ull << 62) | (uint64_t)(uintptr_t)h;
    th_stat *st = th_stat_get(h, "echo");
    CU_ASSERT_FATAL(st != NULL);

    shard_run runs[WAVE1 + WAVE2];
    pthread_t tid[WAVE1 + WAVE2];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, WAVE1);
    for (int i = 0; i < WAVE1 + WAVE2; i++) {
        runs[i].h = h;
        runs[i].st = st;
        runs[i].id = i;
        /* every third thread of wave 1 exits early */
        runs[i].calls = i < WAVE1 && i % 3 == 0 ? SHORT_CALLS : LONG_CALLS;
        runs[i].bar = i < WAVE1 ? &bar : NULL;
    }
    int started = 0;
    for (int i = 0; i < WAVE1; i++)
        if (pthread_create(&tid[i], NULL, shard_thread, &runs[i]) == 0)
            started++;
    CU_ASSERT_FATAL(started == WAVE1);
    /* the short ones exit; wave 2 takes their slots over while the long
     * ones still count */
    for (int i = 0; i < WAVE1; i += 3)
        pthread_join(tid[i], NULL);
    for (int i = WAVE1; i < WAVE1 + WAVE2; i++)
        CU_ASSERT_FATAL(pthread_create(&tid[i], NULL, shard_thread, &runs[i]) == 0);
    for (int i = 0; i < WAVE1 + WAVE2; i++)
        if (i >= WAVE1 || i % 3 != 0)
            pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&bar);

    /* what they should add up to */
    uint64_t n_ok[2] = {0}, n_failed[2] = {0}, n_to[2] = {0}, n_cancel[2] = {0},
             n_un[2] = {0}, n_bt[2] = {0}, n_pc[2] = {0}, n_fin[2] = {0},
             sum_fin[2] = {0}, total = 0;
    for (int i = 0; i < WAVE1 + WAVE2; i++)
        for (int k = 0; k < runs[i].calls; k++) {
            th_result_copy fin;
            call_fin(i, k, &fin);
            th_stat_latency_at(want, call_ns(i, k), call_now(i, k));
            total++;
            if (fin.kind == TH_RESULT_RUNNING)
                continue;
            int t = i % 2 ? 0 : 1; /* ts_a, ts_b */
            n_fin[t]++;
            sum_fin[t] += (uint64_t)call_ns(i, k);
            if (fin.kind == TH_RESULT_DONE)
                (fin.ok ? n_ok : n_failed)[t]++;
            else if (fin.error == TH_ETIMEOUT)
                n_to[t]++;
            else if (fin.error == TH_EUNAVAILABLE)
                n_un[t]++;
            else if (fin.error == TH_EBACKEND_TIMEOUT)
                n_bt[t]++;
            else if (fin.error == TH_EPLUGIN_CRASHED)
                n_pc[t]++;
            else
                n_cancel[t]++;
        }

    /* per tool: the histogram (count, sum, le buckets, p50/p99) ... */
    th_tool_stats ts;
    memset(&ts, 0, sizeof ts);
    CU_ASSERT_EQUAL(th_host_stats_foreach(h, tool_cb, &ts), 0);
    CU_ASSERT_STRING_EQUAL(ts.tool, "echo");
    CU_ASSERT_EQUAL(ts.lat_count, total);
    uint64_t wsum = 0, whist[TH_HIST_BUCKETS];
    for (unsigned b = 0; b < TH_HIST_BUCKETS; b++)
        wsum += whist[b] = want->hist[b];
    CU_ASSERT_EQUAL(wsum, total);
    CU_ASSERT_DOUBLE_EQUAL(ts.lat_sum_s, (double)want->sum_ns / 1e9, 1e-9);
    for (unsigned i = 0; i < TH_STATS_LE; i++) {
        uint64_t cum = 0;
        for (unsigned b = 0; b <= 4 * (i + 4) && b < TH_HIST_BUCKETS; b++)
            cum += whist[b];
        CU_ASSERT_EQUAL(ts.lat_le[i], cum);
    }
    th_tool_stats ws;
    memset(&ws, 0, sizeof ws);
    th_host h2; /* the expected entry alone, read the same way */
    memset(&h2, 0, sizeof h2);
    atomic_store(&h2.stat_b[0], want);
    want->tool = (char *)"echo";
    CU_ASSERT_EQUAL(th_host_stats_foreach(&h2, tool_cb, &ws), 0);
    CU_ASSERT_EQUAL(ts.p50_ms, ws.p50_ms);
    CU_ASSERT_EQUAL(ts.p99_ms, ws.p99_ms);
    /* ... and the window, on the fake clock: 1 minute, a slice, 5 min.
     * It stays on the entry, an estimate: a count racing with the clear
     * of a new slice may be lost, so within a bucket (4 a power of two) */
    static const unsigned slots[] = {1, 3, 6, TH_WIN_SLOTS};
    for (unsigned j = 0; j < sizeof slots / sizeof slots[0]; j++) {
        double a50, a99, b50, b99;
        th_stat_window(st, T0 + 49 * 1000 * MS, slots[j], &a50, &a99);
        th_stat_window(want, T0 + 49 * 1000 * MS, slots[j], &b50, &b99);
        CU_ASSERT(b50 > 0);
        CU_ASSERT(a50 >= b50 / 1.2 && a50 <= b50 * 1.2);
        CU_ASSERT(a99 >= b99 / 1.2 && a99 <= b99 * 1.2);
    }

    /* per toolset and front: outcomes and histogram sums */
    grp_seen gs;
    memset(&gs, 0, sizeof gs);
    CU_ASSERT_EQUAL(th_host_group_stats_foreach(h, grp_cb, &gs), 0);
    CU_ASSERT_EQUAL_FATAL(gs.n, 3);
    int seen = 0;
    for (int j = 0; j < 3; j++) {
        const th_group_stats *g = &gs.g[j];
        uint64_t lat = 0;
        if (strcmp(g->kind, "front") == 0) {
            CU_ASSERT_STRING_EQUAL(g->name, "rpc");
            CU_ASSERT_EQUAL(g->calls, n_fin[0] + n_fin[1]);
            CU_ASSERT_EQUAL(g->ok, n_ok[0] + n_ok[1]);
            CU_ASSERT_EQUAL(g->failed, n_failed[0] + n_failed[1]);
            CU_ASSERT_EQUAL(g->timeouts, n_to[0] + n_to[1]);
            CU_ASSERT_EQUAL(g->cancels, n_cancel[0] + n_cancel[1]);
            CU_ASSERT_EQUAL(g->unavailable, n_un[0] + n_un[1]);
            CU_ASSERT_EQUAL(g->backend_timeouts, n_bt[0] + n_bt[1]);
            CU_ASSERT_EQUAL(g->plugin_crashed, n_pc[0] + n_pc[1]);
            CU_ASSERT_EQUAL(g->errors, 0);
            CU_ASSERT_EQUAL(g->lat_count, n_fin[0] + n_fin[1]);
            lat = sum_fin[0] + sum_fin[1];
            seen |= 1;
        } else {
            int t = strcmp(g->name, "ts_a") == 0 ? 0 : 1;
            CU_ASSERT_STRING_EQUAL(g->name, t ? "ts_b" : "ts_a");
            CU_ASSERT_EQUAL(g->calls, n_fin[t]);
            CU_ASSERT_EQUAL(g->ok, n_ok[t]);
            CU_ASSERT_EQUAL(g->failed, n_failed[t]);
            CU_ASSERT_EQUAL(g->timeouts, n_to[t]);
            CU_ASSERT_EQUAL(g->cancels, n_cancel[t]);
            CU_ASSERT_EQUAL(g->unavailable, n_un[t]);
            CU_ASSERT_EQUAL(g->backend_timeouts, n_bt[t]);
            CU_ASSERT_EQUAL(g->plugin_crashed, n_pc[t]);
            CU_ASSERT_EQUAL(g->errors, 0);
            CU_ASSERT_EQUAL(g->lat_count, n_fin[t]);
            lat = sum_fin[t];
            seen |= 2 << t;
        }
        CU_ASSERT_EQUAL(g->calls, g->ok + g->failed + g->timeouts + g->cancels +
                                      g->unavailable + g->backend_timeouts +
                                      g->plugin_crashed);
        CU_ASSERT_DOUBLE_EQUAL(g->lat_sum_s, (double)lat / 1e9, 1e-9);
        CU_ASSERT_EQUAL(g->lat_le[TH_STATS_LE - 1], g->lat_count); /* < 40 ms */
    }
    CU_ASSERT_EQUAL(seen, 7);

    for (size_t b = 0; b < 256; b++)
        for (th_stat *s = atomic_load(&h->stat_b[b]), *n; s; s = n) {
            n = s->next;
            th_stat_free_shards(s);
            free(s->tool);
            free(s);
        }
    pthread_mutex_destroy(&h->stmu);
    free(h);
    free(want);
}

void th_suite_stats_shards(void)
{
    CU_pSuite s = CU_add_suite("stats_shards", NULL, NULL);
    CU_add_test(s, "many_threads_exact", test_many_threads_exact);
}
