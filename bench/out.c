/* bench/out.c - the output limit of a structured result: the JSON cut.
 *
 * A white-box benchmark of the core's out.c (it includes the private
 * out.h, as the unit tests do): a stream of semantic type
 * TOOLHOST_SEM_STRUCTURED gets a whole JSON text in one th_out_write(),
 * then th_out_finish() cuts it at an element boundary and closes the open
 * brackets (finish_json: yajl reads the kept head once, with a callback
 * at every token).  The floor of each row is yajl_parse() of the same
 * head with no callbacks at all, measured in the same run: what reading
 * the JSON costs before out.c does anything with it.  A last pair of
 * rows is the usual call: a 5-byte result under its limit (no cut, the
 * buffer handed over), beside a malloc + memcpy + free of 5 bytes.
 *
 * The JSON cut runs only for a structured result over its limit, once per
 * such call, never on the path of a result that fits (dispatch's echo).
 * Each case alternates with its floor in ROUNDS rounds; p50 over all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>

#include "bench.h"
#include "call/out.h"
#include "toolhost/plugin.h"

#define ROUNDS 5

typedef struct jcase {
    const char *name;
    char *text;
    size_t len;
    uint64_t limit;
    long n;
} jcase;

/* [{"id":0,"name":"item \"0\"","ok":true,"v":[1.5,null]}, ...] */
static char *make_records(size_t n, size_t *len)
{
    char *s = malloc(n + 128);
    if (!s)
        bench_die("out of memory");
    size_t o = 0;
    s[o++] = '[';
    for (int i = 0; o + 96 < n; i++)
        o += (size_t)sprintf(s + o,
                             "%s{\"id\":%d,\"name\":\"item \\\"%d\\\"\","
                             "\"ok\":true,\"v\":[1.5,null]}",
                             i ? "," : "", i, i);
    s[o++] = ']';
    s[o] = '\0';
    *len = o;
    return s;
}

/* 200 nested arrays around a list of strings. */
static char *make_nested(size_t n, size_t *len)
{
    char *s = malloc(n + 128);
    if (!s)
        bench_die("out of memory");
    size_t o = 0;
    memset(s, '[', 200);
    o = 200;
    for (int i = 0; o + 300 < n; i++)
        o += (size_t)sprintf(s + o, "%s\"word %d\"", i ? "," : "", i);
    memset(s + o, ']', 200);
    o += 200;
    s[o] = '\0';
    *len = o;
    return s;
}

/* One object a line. */
static char *make_ndjson(size_t n, size_t *len)
{
    char *s = malloc(n + 128);
    if (!s)
        bench_die("out of memory");
    size_t o = 0;
    for (int i = 0; o + 64 < n; i++)
        o += (size_t)sprintf(s + o, "{\"line\":%d,\"text\":\"abc def\"}\n", i);
    s[o] = '\0';
    *len = o;
    return s;
}

static uint64_t one_cut(const jcase *c)
{
    uint64_t t0 = bench_now_ns();
    th_out o;
    th_out_init(&o, TOOLHOST_SEM_STRUCTURED, c->limit);
    th_buf b;
    th_buf_init(&b);
    th_out_info info;
    if (th_out_write(&o, c->text, c->len) != 0 ||
        th_out_finish(&o, &b, &info) != 0)
        bench_die("%s: th_out failed", c->name);
    uint64_t d = bench_now_ns() - t0;
    if (c->len > c->limit &&
        (!info.truncated || info.kept_bytes == 0 || !info.note ||
         strncmp(info.note, "cut ", 4) != 0))
        bench_die("%s: not cut at a boundary (%s)", c->name,
                  info.note ? info.note : "no note");
    th_buf_destroy(&b);
    th_out_destroy(&o);
    return d;
}

/* yajl reading the head the cut reads (limit bytes), no callbacks. */
static uint64_t one_floor(const jcase *c)
{
    size_t n = c->len < c->limit ? c->len : (size_t)c->limit;
    uint64_t t0 = bench_now_ns();
    yajl_handle h = yajl_alloc(NULL, NULL, NULL);
    if (!h)
        bench_die("out of memory");
    yajl_config(h, yajl_allow_multiple_values, 1);
    yajl_config(h, yajl_dont_validate_strings, 1);
    if (yajl_parse(h, (const unsigned char *)c->text, n) != yajl_status_ok)
        bench_die("%s: yajl refused the head", c->name);
    yajl_free(h);
    return bench_now_ns() - t0;
}

static uint64_t one_copy(const jcase *c)
{
    uint64_t t0 = bench_now_ns();
    char *p = malloc(c->len + 1);
    if (!p)
        bench_die("out of memory");
    memcpy(p, c->text, c->len + 1);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
    return bench_now_ns() - t0;
}

typedef uint64_t (*one_fn)(const jcase *);

/* ROUNDS alternating rounds of c->n runs of `a` and of `b`. */
static void measure(const jcase *c, one_fn a, one_fn b, bench_stats *sa,
                    bench_stats *sb)
{
    size_t total = (size_t)(ROUNDS * c->n);
    uint64_t *va = malloc(total * sizeof *va), *vb = malloc(total * sizeof *vb);
    if (!va || !vb)
        bench_die("out of memory");
    uint64_t wa = 0, wb = 0;
    for (long i = 0; i < c->n / 10 + 1; i++) /* warm up */
        a(c), b(c);
    for (int r = 0; r < ROUNDS; r++) {
        for (long i = 0; i < c->n; i++)
            wa += va[r * c->n + i] = a(c);
        for (long i = 0; i < c->n; i++)
            wb += vb[r * c->n + i] = b(c);
    }
    bench_stats_from(sa, va, total, wa, total);
    bench_stats_from(sb, vb, total, wb, total);
    free(va);
    free(vb);
}

int main(void)
{
    bench_machine m;
    bench_machine_get(&m);
    bench_machine_print("out: the JSON cut of a structured result", &m);
    jcase cases[] = {
        {"records: 64 KiB at a 16 KiB limit", NULL, 0, 16384,
         bench_iters(2000, 20, 50)},
        {"records: 1 MiB at a 256 KiB limit", NULL, 0, 262144,
         bench_iters(200, 20, 10)},
        {"depth 200: 64 KiB at a 16 KiB limit", NULL, 0, 16384,
         bench_iters(2000, 20, 50)},
        {"NDJSON: 64 KiB at a 16 KiB limit", NULL, 0, 16384,
         bench_iters(2000, 20, 50)},
    };
    cases[0].text = make_records(64 * 1024, &cases[0].len);
    cases[1].text = make_records(1024 * 1024, &cases[1].len);
    cases[2].text = make_nested(64 * 1024, &cases[2].len);
    cases[3].text = make_ndjson(64 * 1024, &cases[3].len);
    jcase small = {"5 bytes under a 4 KiB limit", "hello", 5, 4096,
                   bench_iters(200000, 20, 5000)};

    bench_json j;
    bench_json_begin(&j, "out", &m);
    bench_row_head();
    static const char *const keys[] = {"records_64k", "records_1m",
                                       "depth200_64k", "ndjson_64k"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bench_stats cut, floor;
        measure(&cases[i], one_cut, one_floor, &cut, &floor);
        printf("%s\n", cases[i].name);
        bench_row_ns("  floor: yajl_parse of the head", &floor, 0, NULL);
        bench_row_ns("  th_out_write + th_out_finish (the cut)", &cut,
                     (double)floor.p50_ns, "yajl_parse");
        char key[64];
        snprintf(key, sizeof key, "%s_p50_ns", keys[i]);
        bench_json_num(&j, key, (double)cut.p50_ns);
        snprintf(key, sizeof key, "%s_floor_p50_ns", keys[i]);
        bench_json_num(&j, key, (double)floor.p50_ns);
        free(cases[i].text);
    }
    bench_stats fit, copy;
    measure(&small, one_cut, one_copy, &fit, &copy);
    printf("%s (no cut)\n", small.name);
    bench_row_ns("  floor: malloc + memcpy + free", &copy, 0, NULL);
    bench_row_ns("  th_out_write + th_out_finish", &fit, (double)copy.p50_ns,
                 "malloc + memcpy");
    bench_json_num(&j, "fit_5b_p50_ns", (double)fit.p50_ns);
    bench_json_num(&j, "fit_5b_floor_p50_ns", (double)copy.p50_ns);
    bench_json_end(&j);
    return 0;
}
