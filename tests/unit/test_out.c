/* test_out.c - output limits by semantic type (th/out.h), driven directly
 * and through the flood fixture plugin with a stand-in call. */
#include <CUnit/CUnit.h>
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <jansson.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"
#include "th/config.h"
#include "th/err.h"
#include "call/out.h"
#include "toolhost/plugin.h"

/* ---- helpers ------------------------------------------------------------- */

static int utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + len > n)
            return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
            (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

/* Runs one stream of `sem` over `data`, written in `chunk`-byte pieces. */
static void run_out(uint32_t sem, uint64_t limit, const void *data, size_t n,
                    size_t chunk, th_buf *dst, th_out_info *info)
{
    th_out o;
    th_out_init(&o, sem, limit);
    const uint8_t *p = data;
    int rc = 0;
    for (size_t i = 0; i < n; i += chunk)
        rc |= th_out_write(&o, p + i, n - i < chunk ? n - i : chunk);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    th_buf_init(dst);
    CU_ASSERT_EQUAL_FATAL(th_out_finish(&o, dst, info), 0);
    info->spill_path = NULL; /* freed below */
    th_out_destroy(&o);
}

static char *numbered_lines(const char *fmt, int count, size_t *len)
{
    th_buf b = TH_BUF_INIT;
    for (int i = 0; i < count; i++)
        th_buf_printf(&b, fmt, i);
    return (char *)th_buf_take(&b, len);
}

/* ---- the flood fixture through a stand-in call -------------------------- */

typedef struct fake_call {
    toolhost_call pub;
    th_out *out, *err;
} fake_call;

static int fake_write(toolhost_call *call, int stream, const void *data,
                      size_t len)
{
    fake_call *fc = (fake_call *)call;
    th_out *o = stream == TOOLHOST_STDOUT   ? fc->out
                : stream == TOOLHOST_STDERR ? fc->err
                                            : NULL;
    if (!o)
        return TOOLHOST_EINVAL;
    return th_out_write(o, data, len) == 0 ? 0 : TOOLHOST_ENOMEM;
}

static void *flood_dl;
static const toolhost_plugin *flood_plugin;

static int flood_open(void)
{
    if (flood_plugin)
        return 0;
    flood_dl = dlopen(th_test_build_path("fixtures/flood.so"), RTLD_NOW);
    if (!flood_dl)
        return -1;
    toolhost_entry_fn fn =
        (toolhost_entry_fn)(uintptr_t)dlsym(flood_dl, TOOLHOST_ENTRY_SYMBOL);
    flood_plugin = fn ? fn() : NULL;
    return flood_plugin ? 0 : -1;
}

static int suite_clean(void)
{
    if (flood_dl)
        dlclose(flood_dl);
    flood_dl = NULL;
    flood_plugin = NULL;
    return 0;
}

/* Runs flood tool `tool` with the pattern, size and chunk, stdout limited
 * to `limit` under the tool's stdout type. */
static void flood(const char *tool, const char *pattern, uint64_t size,
                  uint64_t chunk, uint64_t limit, th_buf *dst,
                  th_out_info *info)
{
    CU_ASSERT_EQUAL_FATAL(flood_open(), 0);
    const toolhost_tool *t = NULL;
    for (uint32_t i = 0; i < flood_plugin->n_tools; i++)
        if (strcmp(flood_plugin->tools[i].name, tool) == 0)
            t = &flood_plugin->tools[i];
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);

    th_buf args = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &args, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str_with_body(&pk, "pattern", 7);
    msgpack_pack_str_with_body(&pk, pattern, strlen(pattern));
    msgpack_pack_str_with_body(&pk, "size", 4);
    msgpack_pack_uint64(&pk, size);
    msgpack_pack_str_with_body(&pk, "chunk", 5);
    msgpack_pack_uint64(&pk, chunk);

    toolhost_host_api api;
    memset(&api, 0, sizeof api);
    api.struct_size = sizeof api;
    api.abi_major = TOOLHOST_ABI_MAJOR;
    api.write = fake_write;
    th_out out, err;
    th_out_init(&out, t->stdout_type, limit);
    th_out_init(&err, t->stderr_type, 1000);
    fake_call fc = {{sizeof(toolhost_call), &api, 1}, &out, &err};
    CU_ASSERT_EQUAL(t->execute(NULL, t, &fc.pub, args.data, args.len),
                    TOOLHOST_OK);
    th_buf_destroy(&args);
    th_buf_init(dst);
    CU_ASSERT_EQUAL_FATAL(th_out_finish(&out, dst, info), 0);
    info->spill_path = NULL;
    th_out_destroy(&out);
    th_out_destroy(&err);
}

/* ---- tests --------------------------------------------------------------- */

static void test_fast_path(void)
{
    th_out o;
    th_out_init(&o, TOOLHOST_SEM_COMMAND_OUTPUT, 1000);
    CU_ASSERT_EQUAL(th_out_write(&o, "hello\n", 6), 0);
    CU_ASSERT_EQUAL(th_out_write(&o, "world", 5), 0);
    CU_ASSERT_EQUAL(th_out_write(&o, NULL, 0), 0);
    const uint8_t *held = o.head.data;
    th_buf dst = TH_BUF_INIT;
    th_out_info info;
    CU_ASSERT_EQUAL(th_out_finish(&o, &dst, &info), 0);
    CU_ASSERT_PTR_EQUAL(dst.data, held); /* a move, not a copy */
    CU_ASSERT_STRING_EQUAL((char *)dst.data, "hello\nworld");
    CU_ASSERT_FALSE(info.truncated);
    CU_ASSERT_EQUAL(info.total_bytes, 11);
    CU_ASSERT_EQUAL(info.kept_bytes, 11);
    CU_ASSERT_EQUAL(info.total_lines, 2);
    CU_ASSERT_PTR_NULL(info.spill_path);
    CU_ASSERT_PTR_NULL(info.note);
    th_out_destroy(&o);

    /* exactly at the limit: nothing cut; into a non-empty dst: appended */
    th_out_init(&o, TOOLHOST_SEM_FILE_CONTENT, 4);
    CU_ASSERT_EQUAL(th_out_write(&o, "abcd", 4), 0);
    CU_ASSERT_EQUAL(th_out_finish(&o, &dst, &info), 0);
    CU_ASSERT_STRING_EQUAL((char *)dst.data, "hello\nworldabcd");
    CU_ASSERT_FALSE(info.truncated);
    th_out_destroy(&o);
    th_buf_destroy(&dst);

    /* limit 0: everything */
    th_out_init(&o, TOOLHOST_SEM_STATUS, 0);
    for (int i = 0; i < 1000; i++)
        CU_ASSERT_EQUAL(th_out_write(&o, "0123456789", 10), 0);
    CU_ASSERT_EQUAL(th_out_finish(&o, &dst, &info), 0);
    CU_ASSERT_EQUAL(dst.len, 10000);
    CU_ASSERT_FALSE(info.truncated);
    CU_ASSERT_EQUAL(info.total_lines, 1);
    th_out_destroy(&o);
    th_buf_destroy(&dst);
}

static void test_head_tail_marker(void)
{
    size_t n;
    char *text = numbered_lines("%03d\n", 100, &n); /* 400 bytes */
    th_buf dst;
    th_out_info info;
    run_out(TOOLHOST_SEM_COMMAND_OUTPUT, 40, text, n, 7, &dst, &info);
    CU_ASSERT_STRING_EQUAL((char *)dst.data,
                           "000\n001\n002\n003\n004\n"
                           "... [360 bytes, 90 lines cut] ...\n"
                           "095\n096\n097\n098\n099\n");
    CU_ASSERT_TRUE(info.truncated);
    CU_ASSERT_EQUAL(info.total_bytes, 400);
    CU_ASSERT_EQUAL(info.kept_bytes, 40);
    CU_ASSERT_EQUAL(info.total_lines, 100);
    CU_ASSERT_EQUAL(info.kept_lines, 10);
    th_buf_destroy(&dst);

    /* one huge write, the same result */
    run_out(TOOLHOST_SEM_LOG, 40, text, n, n, &dst, &info);
    CU_ASSERT_STRING_EQUAL((char *)dst.data,
                           "000\n001\n002\n003\n004\n"
                           "... [360 bytes, 90 lines cut] ...\n"
                           "095\n096\n097\n098\n099\n");
    th_buf_destroy(&dst);

    /* no newlines: the marker gets its own line; singular words */
    run_out(TOOLHOST_SEM_ERROR, 10, "abcdefghijk", 11, 1, &dst, &info);
    CU_ASSERT_STRING_EQUAL((char *)dst.data,
                           "abcde\n... [1 byte, 0 lines cut] ...\nghijk");
    CU_ASSERT_EQUAL(info.kept_bytes, 10);
    CU_ASSERT_EQUAL(info.total_lines, 1);
    th_buf_destroy(&dst);
    free(text);

    /* big numbers get thousands separators */
    th_out o;
    th_out_init(&o, TOOLHOST_SEM_TEXT, 8);
    char block[4096];
    memset(block, 'z', sizeof block);
    for (int i = 0; i < 300; i++)
        th_out_write(&o, block, sizeof block);
    th_buf_init(&dst);
    CU_ASSERT_EQUAL(th_out_finish(&o, &dst, &info), 0);
    CU_ASSERT_STRING_EQUAL((char *)dst.data,
                           "zzzz\n... [1,228,792 bytes, 0 lines cut] ...\n"
                           "zzzz");
    th_buf_destroy(&dst);
    th_out_destroy(&o);
}

static void test_head_marker(void)
{
    size_t n;
    char *text = numbered_lines("L%04d\n", 1000, &n); /* 6000 bytes */
    th_buf dst;
    th_out_info info;
    run_out(TOOLHOST_SEM_FILE_CONTENT, 100, text, n, 13, &dst, &info);
    th_buf want = TH_BUF_INIT;
    th_buf_append(&want, text, 96); /* 16 whole lines */
    th_buf_puts(&want, "[... 5,904 more bytes (984 lines) not shown; "
                       "read on with offset=16]\n");
    CU_ASSERT_STRING_EQUAL((char *)dst.data, (char *)want.data);
    CU_ASSERT_TRUE(info.truncated);
    CU_ASSERT_EQUAL(info.kept_bytes, 96);
    CU_ASSERT_EQUAL(info.kept_lines, 16);
    CU_ASSERT_EQUAL(info.total_lines, 1000);
    th_buf_destroy(&dst);
    th_buf_destroy(&want);

    /* the read-on offset counts from the offset the output started at */
    th_out o;
    th_out_init(&o, TOOLHOST_SEM_FILE_VIEW, 100);
    th_out_set_offset_base(&o, 200);
    th_out_write(&o, text, n);
    th_buf_init(&dst);
    th_out_finish(&o, &dst, &info);
    CU_ASSERT_PTR_NOT_NULL(strstr((char *)dst.data,
                                  "not shown; read on with offset=216]\n"));
    th_buf_destroy(&dst);
    th_out_destroy(&o);

    /* knowledge: the offset is in bytes */
    run_out(TOOLHOST_SEM_KNOWLEDGE, 100, text, n, n, &dst, &info);
    CU_ASSERT_PTR_NOT_NULL(strstr(
        (char *)dst.data,
        "[... 5,904 more bytes (984 lines) not shown; read on with "
        "offset=96 (bytes)]\n"));
    th_buf_destroy(&dst);

    /* one line longer than the limit: cut at a character, offset stays */
    run_out(TOOLHOST_SEM_FILE_CONTENT, 10, "abcdefghijklmnop\nq", 18, 3,
            &dst, &info);
    CU_ASSERT_STRING_EQUAL((char *)dst.data,
                           "abcdefghij\n[... 8 more bytes (2 lines) not "
                           "shown; read on with offset=0]\n");
    th_buf_destroy(&dst);
    free(text);
}

static void test_utf8_never_split(void)
{
    /* 1-, 2-, 3- and 4-byte characters at every offset, no newlines */
    const char *unit = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    th_buf in = TH_BUF_INIT;
    for (int i = 0; i < 50; i++)
        th_buf_puts(&in, unit);
    static const uint32_t sems[] = {
        TOOLHOST_SEM_COMMAND_OUTPUT, TOOLHOST_SEM_STATUS,
        TOOLHOST_SEM_FILE_CONTENT, TOOLHOST_SEM_KNOWLEDGE, TOOLHOST_SEM_DIFF};
    int bad = 0;
    for (size_t s = 0; s < sizeof sems / sizeof sems[0]; s++) {
        for (uint64_t limit = 1; limit < 60; limit++) {
            for (size_t chunk = 1; chunk <= 7; chunk += 3) {
                th_buf dst;
                th_out_info info;
                run_out(sems[s], limit, in.data, in.len, chunk, &dst, &info);
                if (!utf8_valid(dst.data, dst.len) ||
                    info.kept_bytes > limit || !info.truncated)
                    bad++;
                th_buf_destroy(&dst);
            }
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(th_utf8_cut((const uint8_t *)"a\xe2\x82", 3), 1);
    CU_ASSERT_EQUAL(th_utf8_cut((const uint8_t *)"a\xe2\x82\xac", 4), 4);
    CU_ASSERT_EQUAL(th_utf8_cut((const uint8_t *)"\x80\x80\x80\x80", 4), 4);
    CU_ASSERT_EQUAL(th_utf8_cut((const uint8_t *)"ab\xff", 3), 3);
    th_buf_destroy(&in);
}

static void test_invalid_utf8(void)
{
    /* invalid bytes pass through untouched; cuts still keep valid
     * sequences whole */
    const uint8_t bad[] = "ok\xff\x80 \xc3\xa9\xe2\x82\xac|\xc3";
    th_buf dst;
    th_out_info info;
    run_out(TOOLHOST_SEM_TEXT, 100, bad, sizeof bad - 1, 1, &dst, &info);
    CU_ASSERT_EQUAL(dst.len, sizeof bad - 1);
    CU_ASSERT_EQUAL(memcmp(dst.data, bad, dst.len), 0);
    th_buf_destroy(&dst);

    int errors = 0;
    for (uint64_t limit = 1; limit < 40; limit++) {
        th_out o;
        th_out_init(&o, TOOLHOST_SEM_COMMAND_OUTPUT, limit);
        for (int i = 0; i < 20; i++)
            th_out_write(&o, bad, sizeof bad - 1);
        th_buf_init(&dst);
        if (th_out_finish(&o, &dst, &info) != 0 || !info.truncated ||
            info.kept_bytes > limit ||
            !strstr((char *)dst.data, " lines cut] ..."))
            errors++;
        th_buf_destroy(&dst);
        th_out_destroy(&o);
    }
    CU_ASSERT_EQUAL(errors, 0);
}

static void check_json_cut(const uint8_t *text, size_t n, uint64_t limit,
                           int *bad)
{
    th_buf dst;
    th_out_info info;
    run_out(TOOLHOST_SEM_STRUCTURED, limit, text, n, 5, &dst, &info);
    json_error_t je;
    json_t *j = dst.len ? json_loadb((char *)dst.data, dst.len, 0, &je) : NULL;
    if (n > limit) {
        if (!info.truncated || !info.note || dst.len > limit ||
            info.kept_bytes > limit)
            (*bad)++;
        if (dst.len && !j)
            (*bad)++;
        if (dst.len && strstr((char *)dst.data, "..."))
            (*bad)++; /* no marker inside the JSON */
    } else if (!j || dst.len != n) {
        (*bad)++;
    }
    json_decref(j);
    th_buf_destroy(&dst);
}

static void test_structured(void)
{
    /* objects in an array in an object, strings with escapes and UTF-8 */
    json_t *doc = json_object();
    json_t *items = json_array();
    for (int i = 0; i < 60; i++) {
        json_t *it = json_pack("{s:i, s:s, s:[s,s], s:{s:b, s:n}}", "id", i,
                               "name", "caf\xc3\xa9 \"q\" \\ ,]}", "tags",
                               "a", "b", "nested", "ok", 1, "none");
        json_array_append_new(items, it);
    }
    json_object_set_new(doc, "items", items);
    json_object_set_new(doc, "count", json_integer(60));
    char *text = json_dumps(doc, JSON_INDENT(1));
    json_decref(doc);
    size_t n = strlen(text);
    int bad = 0;
    for (uint64_t limit = 1; limit < n + 10; limit += 7)
        check_json_cut((uint8_t *)text, n, limit, &bad);
    CU_ASSERT_EQUAL(bad, 0);

    /* numbers are never cut short: every element stays 123456 */
    th_buf nums = TH_BUF_INIT;
    th_buf_puts(&nums, "[");
    for (int i = 0; i < 500; i++)
        th_buf_puts(&nums, i ? ",123456" : "123456");
    th_buf_puts(&nums, "]");
    for (uint64_t limit = 2; limit < 200; limit++) {
        th_buf dst;
        th_out_info info;
        run_out(TOOLHOST_SEM_STRUCTURED, limit, nums.data, nums.len, 64,
                &dst, &info);
        json_t *j = json_loadb((char *)dst.data, dst.len, 0, NULL);
        size_t idx;
        json_t *v;
        if (!j || !json_is_array(j))
            bad++;
        json_array_foreach(j, idx, v) if (json_integer_value(v) != 123456)
            bad++;
        json_decref(j);
        th_buf_destroy(&dst);
    }
    CU_ASSERT_EQUAL(bad, 0);
    th_buf_destroy(&nums);

    /* exact text of one cut */
    th_buf dst;
    th_out_info info;
    const char *small = "{\"a\": [1, 2, 3], \"b\": {\"c\": \"xyz\"}}";
    run_out(TOOLHOST_SEM_STRUCTURED, 20, small, strlen(small), 3, &dst,
            &info);
    CU_ASSERT_STRING_EQUAL((char *)dst.data, "{\"a\": [1, 2, 3]}");
    CU_ASSERT_EQUAL(info.kept_bytes, 15);
    CU_ASSERT_STRING_EQUAL(info.note, "cut at a JSON element boundary; the "
                                      "open brackets were closed");
    th_buf_destroy(&dst);

    /* one JSON value per line: cut between whole lines */
    th_buf nd = TH_BUF_INIT;
    for (int i = 0; i < 100; i++)
        th_buf_printf(&nd, "{\"i\": %d, \"s\": \"x\"}\n", i);
    run_out(TOOLHOST_SEM_STRUCTURED, 70, nd.data, nd.len, 9, &dst, &info);
    CU_ASSERT_STRING_EQUAL((char *)dst.data,
                           "{\"i\": 0, \"s\": \"x\"}\n{\"i\": 1, \"s\": \"x\"}\n"
                           "{\"i\": 2, \"s\": \"x\"}");
    CU_ASSERT_TRUE(info.truncated);
    CU_ASSERT_STRING_EQUAL(info.note, "cut between whole JSON values");
    th_buf_destroy(&dst);
    th_buf_destroy(&nd);

    /* a top-level scalar past the limit: nothing can be kept */
    run_out(TOOLHOST_SEM_STRUCTURED, 5, "\"abcdefgh\"", 10, 10, &dst, &info);
    CU_ASSERT_EQUAL(dst.len, 0);
    CU_ASSERT_TRUE(info.truncated);
    CU_ASSERT_PTR_NOT_NULL(info.note);
    th_buf_destroy(&dst);

    /* not JSON: cut as text, said so */
    run_out(TOOLHOST_SEM_STRUCTURED, 10, "not json at all\n", 16, 16, &dst,
            &info);
    CU_ASSERT_STRING_EQUAL(info.note, "not valid JSON: cut as text");
    CU_ASSERT_PTR_NOT_NULL(strstr((char *)dst.data, "not shown]"));
    th_buf_destroy(&dst);
    free(text);
}

static void test_binary(void)
{
    uint8_t data[10000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 7 + (i >> 8));
    th_buf dst;
    th_out_info info;
    run_out(TOOLHOST_SEM_BINARY, 1000, data, sizeof data, 333, &dst, &info);
    CU_ASSERT_EQUAL(dst.len, 1000);
    CU_ASSERT_EQUAL(memcmp(dst.data, data, 1000), 0); /* nothing added */
    CU_ASSERT_TRUE(info.truncated);
    CU_ASSERT_EQUAL(info.kept_bytes, 1000);
    CU_ASSERT_EQUAL(info.total_bytes, sizeof data);
    CU_ASSERT_PTR_NOT_NULL(info.note);
    th_buf_destroy(&dst);
}

static long vm_hwm_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static void reset_hwm(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f); /* resets the peak RSS (Linux 4.0+) */
        fclose(f);
    }
}

static void test_bounded_memory(void)
{
    static const uint32_t sems[] = {TOOLHOST_SEM_COMMAND_OUTPUT,
                                    TOOLHOST_SEM_FILE_CONTENT,
                                    TOOLHOST_SEM_STRUCTURED,
                                    TOOLHOST_SEM_BINARY};
    size_t chunk = 64 * 1024;
    uint8_t *buf = malloc(chunk);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    for (size_t i = 0; i < chunk; i++)
        buf[i] = (i % 61 == 60) ? '\n' : (uint8_t)('a' + i % 26);
    for (size_t s = 0; s < sizeof sems / sizeof sems[0]; s++) {
        uint64_t total = s == 0 ? (256ull << 20) : (64ull << 20);
        reset_hwm();
        long before = vm_hwm_kb();
        th_out o;
        th_out_init(&o, sems[s], 64 * 1024);
        int werr = 0;
        for (uint64_t w = 0; w < total; w += chunk)
            werr |= th_out_write(&o, buf, chunk);
        CU_ASSERT_EQUAL(werr, 0);
        th_buf dst = TH_BUF_INIT;
        th_out_info info;
        CU_ASSERT_EQUAL(th_out_finish(&o, &dst, &info), 0);
        long after = vm_hwm_kb();
        CU_ASSERT_EQUAL(info.total_bytes, total);
        CU_ASSERT_TRUE(info.truncated);
        CU_ASSERT_TRUE(info.kept_bytes <= 64 * 1024);
        CU_ASSERT_TRUE(dst.len <= 64 * 1024 + 200);
        CU_ASSERT_TRUE(o.head.cap <= 64 * 1024 + 1);
        /* the peak grew by far less than what was written */
        CU_ASSERT_TRUE(before > 0 && after > 0);
        CU_ASSERT_TRUE(after - before < 8 * 1024);
        th_buf_destroy(&dst);
        th_out_destroy(&o);
    }
    free(buf);
}

/* Random inputs, chunkings, limits and types against what each strategy
 * promises: the head is a prefix of the input, the tail a suffix, the
 * marker's count is what is missing, nothing valid becomes invalid. */
static uint64_t rng = 0x1234567;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static int is_prefix(const uint8_t *p, size_t n, const uint8_t *of)
{
    return memcmp(p, of, n) == 0;
}

static void test_random_model(void)
{
    static const char *atoms[] = {"a", "b", "\n", "\xc3\xa9",
                                  "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
    static const uint32_t sems[] = {
        TOOLHOST_SEM_COMMAND_OUTPUT, TOOLHOST_SEM_LOG,
        TOOLHOST_SEM_SEARCH_RESULTS, TOOLHOST_SEM_FILE_CONTENT,
        TOOLHOST_SEM_FILE_VIEW, TOOLHOST_SEM_BINARY};
    int bad = 0;
    for (int round = 0; round < 3000; round++) {
        th_buf in = TH_BUF_INIT;
        size_t atoms_n = rnd(1500);
        for (size_t i = 0; i < atoms_n; i++)
            th_buf_puts(&in, atoms[rnd(6)]);
        uint32_t sem = sems[rnd(6)];
        uint64_t limit = 1 + rnd(700);
        th_out o;
        th_out_init(&o, sem, limit);
        for (size_t pos = 0; pos < in.len;) {
            size_t c = 1 + rnd(rnd(2) ? 9 : 3000);
            if (c > in.len - pos)
                c = in.len - pos;
            th_out_write(&o, in.data + pos, c);
            pos += c;
        }
        th_buf out = TH_BUF_INIT;
        th_out_info info;
        th_out_finish(&o, &out, &info);
        th_out_destroy(&o);
        const uint8_t *od = out.data ? out.data : (const uint8_t *)"";
        int ok = info.total_bytes == in.len && info.kept_bytes <= limit;
        if (in.len <= limit) {
            ok = ok && !info.truncated && out.len == in.len &&
                 (in.len == 0 || memcmp(od, in.data, in.len) == 0);
        } else if (sem == TOOLHOST_SEM_BINARY) {
            ok = ok && out.len == limit && is_prefix(od, limit, in.data);
        } else {
            ok = ok && info.truncated && utf8_valid(od, out.len);
            const char *m = sem == TOOLHOST_SEM_FILE_CONTENT ||
                                    sem == TOOLHOST_SEM_FILE_VIEW
                                ? "[... "
                                : "... [";
            const char *mk = strstr((const char *)od, m);
            ok = ok && mk;
            if (ok) {
                size_t h = (size_t)(mk - (const char *)od);
                const char *end = strchr(mk, '\n');
                size_t t = end ? out.len - (size_t)(end + 1 - (char *)od) : 0;
                /* "x\n" + marker or "x" + "\n" + marker: kept_bytes says */
                if (h >= 1 && od[h - 1] == '\n' && h + t == info.kept_bytes + 1)
                    h--;
                unsigned long long cut = 0;
                const char *num = mk + 5;
                char digits[32];
                size_t k = 0;
                while (k < 31 && (isdigit((unsigned char)*num) || *num == ','))
                    if (*num++ != ',')
                        digits[k++] = num[-1];
                digits[k] = '\0';
                cut = strtoull(digits, NULL, 10);
                ok = end && is_prefix(od, h, in.data) &&
                     h + t == info.kept_bytes &&
                     cut == in.len - info.kept_bytes &&
                     memcmp(od + out.len - t, in.data + in.len - t, t) == 0;
            }
        }
        if (!ok && bad++ < 3)
            fprintf(stderr, "\nmodel: sem %u limit %llu len %zu kept %llu\n",
                    sem, (unsigned long long)limit, in.len,
                    (unsigned long long)info.kept_bytes);
        th_buf_destroy(&out);
        th_buf_destroy(&in);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_flood_fixture(void)
{
    th_buf dst;
    th_out_info info;
    /* numbered lines, small writes, head+tail: head and tail are the
     * stream's first and last whole lines */
    flood("flood_command", "lines", 1 << 20, 1, 8000, &dst, &info);
    CU_ASSERT_TRUE(info.truncated);
    CU_ASSERT_EQUAL(info.total_bytes, 1 << 20);
    CU_ASSERT_EQUAL(strncmp((char *)dst.data, "line 00000000: ", 15), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr((char *)dst.data, " lines cut] ...\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr((char *)dst.data, "line 00029958: "));
    CU_ASSERT_TRUE(info.kept_bytes <= 8000);
    th_buf_destroy(&dst);

    /* valid UTF-8 in huge and tiny writes, every text strategy */
    static const char *tools[] = {"flood_command", "flood_file",
                                  "flood_knowledge", "flood_status"};
    int bad = 0;
    for (size_t t = 0; t < 4; t++) {
        for (uint64_t chunk = 1; chunk <= (1 << 20); chunk *= 64) {
            for (uint64_t limit = 997; limit < 1005; limit++) {
                flood(tools[t], "utf8", 300000, chunk, limit, &dst, &info);
                if (!utf8_valid(dst.data, dst.len) || !info.truncated ||
                    info.total_bytes != 300000)
                    bad++;
                th_buf_destroy(&dst);
            }
        }
    }
    CU_ASSERT_EQUAL(bad, 0);

    /* invalid UTF-8: kept, counted, no crash */
    flood("flood_command", "invalid_utf8", 100000, 4096, 1000, &dst, &info);
    CU_ASSERT_TRUE(info.truncated);
    CU_ASSERT_EQUAL(info.total_lines, 100000 / 11 + 1);
    th_buf_destroy(&dst);

    /* JSON: stays valid at any limit */
    for (uint64_t limit = 50; limit < 5000; limit += 97) {
        flood("flood_json", "json", 200000, 1000, limit, &dst, &info);
        json_t *j = json_loadb((char *)dst.data, dst.len, 0, NULL);
        CU_ASSERT_PTR_NOT_NULL(j);
        CU_ASSERT_TRUE(json_is_array(json_object_get(j, "items")));
        /* whole records are preferred to a record cut in its middle */
        size_t idx;
        json_t *it;
        json_array_foreach(json_object_get(j, "items"), idx, it)
            CU_ASSERT_PTR_NOT_NULL(json_object_get(it, "s"));
        CU_ASSERT_TRUE(json_array_size(json_object_get(j, "items")) >=
                       (limit - 12) / 37 / 2);
        CU_ASSERT_TRUE(utf8_valid(dst.data, dst.len));
        json_decref(j);
        th_buf_destroy(&dst);
    }
    /* and the whole stream parses when unlimited */
    flood("flood_json", "json", 200000, 1000, 0, &dst, &info);
    json_t *j = json_loadb((char *)dst.data, dst.len, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL(j);
    CU_ASSERT_EQUAL(dst.len, 200000);
    json_decref(j);
    th_buf_destroy(&dst);

    /* binary: the head, byte for byte */
    th_buf whole;
    flood("flood_binary", "binary", 50000, 999, 0, &whole, &info);
    flood("flood_binary", "binary", 50000, 999, 4096, &dst, &info);
    CU_ASSERT_EQUAL(dst.len, 4096);
    CU_ASSERT_EQUAL(memcmp(dst.data, whole.data, 4096), 0);
    th_buf_destroy(&dst);
    th_buf_destroy(&whole);
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void test_spill(void)
{
    char *dir = th_test_tmpdir();
    char sub[512];
    snprintf(sub, sizeof sub, "%s/spill", dir);
    th_out o;
    th_out_init(&o, TOOLHOST_SEM_COMMAND_OUTPUT, 100);
    CU_ASSERT_EQUAL(th_out_spill(&o, sub, 0), 0);
    char line[16];
    for (int i = 0; i < 1000; i++) {
        snprintf(line, sizeof line, "%04d\n", i);
        th_out_write(&o, line, 5);
    }
    th_buf dst = TH_BUF_INIT;
    th_out_info info;
    CU_ASSERT_EQUAL(th_out_finish(&o, &dst, &info), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(info.spill_path);
    CU_ASSERT_EQUAL(info.spill_bytes, 5000);
    struct stat sb;
    CU_ASSERT_EQUAL(stat(info.spill_path, &sb), 0);
    CU_ASSERT_EQUAL(sb.st_mode & 0777, 0600);
    CU_ASSERT_EQUAL(sb.st_size, 5000);
    FILE *sf = fopen(info.spill_path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(sf);
    char whole[5001];
    size_t got = fread(whole, 1, 5000, sf);
    fclose(sf);
    int same = got == 5000;
    for (int i = 0; same && i < 1000; i++) {
        snprintf(line, sizeof line, "%04d\n", i);
        same = memcmp(whole + 5 * i, line, 5) == 0;
    }
    CU_ASSERT_TRUE(same); /* the head, then the rest, in order */
    char want[600];
    snprintf(want, sizeof want, "lines cut; full output in %s] ...\n",
             info.spill_path);
    CU_ASSERT_PTR_NOT_NULL(strstr((char *)dst.data, want));
    char *spath = strdup(info.spill_path);
    th_buf_destroy(&dst);
    th_out_destroy(&o);
    CU_ASSERT_EQUAL(access(spath, F_OK), 0); /* kept after free */
    free(spath);

    /* capped */
    th_out_init(&o, TOOLHOST_SEM_FILE_CONTENT, 100);
    CU_ASSERT_EQUAL(th_out_spill(&o, sub, 1234), 0);
    for (int i = 0; i < 1000; i++)
        th_out_write(&o, "abcd\n", 5);
    CU_ASSERT_EQUAL(th_out_finish(&o, &dst, &info), 0);
    CU_ASSERT_EQUAL(info.spill_bytes, 1234);
    snprintf(want, sizeof want, "; first 1234 bytes in %s]\n",
             info.spill_path);
    CU_ASSERT_PTR_NOT_NULL(strstr((char *)dst.data, want));
    CU_ASSERT_EQUAL(stat(info.spill_path, &sb), 0);
    CU_ASSERT_EQUAL(sb.st_size, 1234);
    th_buf_destroy(&dst);
    th_out_destroy(&o);

    /* not truncated: no file at all */
    int files = count_files(sub);
    th_out_init(&o, TOOLHOST_SEM_COMMAND_OUTPUT, 100);
    CU_ASSERT_EQUAL(th_out_spill(&o, sub, 0), 0);
    th_out_write(&o, "short", 5);
    CU_ASSERT_EQUAL(o.spill_fd, -1);
    CU_ASSERT_EQUAL(th_out_finish(&o, &dst, &info), 0);
    CU_ASSERT_PTR_NULL(info.spill_path);
    CU_ASSERT_EQUAL(count_files(sub), files);
    th_buf_destroy(&dst);
    th_out_destroy(&o);

    /* freed without finishing: removed */
    th_out_init(&o, TOOLHOST_SEM_COMMAND_OUTPUT, 10);
    CU_ASSERT_EQUAL(th_out_spill(&o, sub, 0), 0);
    th_out_write(&o, "abcdefghijklmnop", 16);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o.spill_path);
    char *tmp = strdup(o.spill_path);
    CU_ASSERT_EQUAL(access(tmp, F_OK), 0);
    CU_ASSERT_EQUAL(count_files(sub), files + 1);
    th_out_destroy(&o);
    CU_ASSERT_NOT_EQUAL(access(tmp, F_OK), 0);
    CU_ASSERT_EQUAL(count_files(sub), files);
    free(tmp);

    /* a regular file is no folder */
    char *plain = th_test_write_file(dir, "plain", "x", 1);
    th_out_init(&o, TOOLHOST_SEM_COMMAND_OUTPUT, 100);
    CU_ASSERT_EQUAL(th_out_spill(&o, plain, 0), TH_EIO);
    th_out_destroy(&o);
    free(plain);

    /* a folder that cannot be made */
    th_out_init(&o, TOOLHOST_SEM_COMMAND_OUTPUT, 100);
    CU_ASSERT_EQUAL(th_out_spill(&o, "/proc/no/such/dir", 0), TH_EIO);
    th_out_destroy(&o);
    th_test_rmtree(dir);
    free(dir);
}

static void test_spill_gc(void)
{
    char *dir = th_test_tmpdir();
    char *old1 = th_test_write_file(dir, "th-spill-old111", "0123456789", 10);
    char *old2 = th_test_write_file(dir, "th-spill-old222", "01234", 5);
    char *new1 = th_test_write_file(dir, "th-spill-new111", "0123", 4);
    char *new2 = th_test_write_file(dir, "th-spill-new222", "012", 3);
    char *other = th_test_write_file(dir, "not-a-spill", "x", 1);
    struct timespec ts[2];
    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= 7200;
    ts[1] = ts[0];
    utimensat(AT_FDCWD, old1, ts, 0);
    utimensat(AT_FDCWD, old2, ts, 0);
    ts[0].tv_sec += 6600; /* new1: 10 minutes old, older than new2 */
    ts[1] = ts[0];
    utimensat(AT_FDCWD, new1, ts, 0);

    /* by age: the two older than one hour */
    CU_ASSERT_EQUAL(th_out_spill_gc(dir, 3600 * 1000, 0), 2);
    CU_ASSERT_NOT_EQUAL(access(old1, F_OK), 0);
    CU_ASSERT_NOT_EQUAL(access(old2, F_OK), 0);
    CU_ASSERT_EQUAL(access(new1, F_OK), 0);
    /* by size: the oldest goes first */
    CU_ASSERT_EQUAL(th_out_spill_gc(dir, 0, 5), 1);
    CU_ASSERT_NOT_EQUAL(access(new1, F_OK), 0);
    CU_ASSERT_EQUAL(access(new2, F_OK), 0);
    CU_ASSERT_EQUAL(th_out_spill_gc(dir, 0, 5), 0);
    CU_ASSERT_EQUAL(access(other, F_OK), 0); /* never touched */
    CU_ASSERT_EQUAL(th_out_spill_gc("/no/such/dir/here", 1, 1), 0);
    free(old1);
    free(old2);
    free(new1);
    free(new2);
    free(other);
    th_test_rmtree(dir);
    free(dir);
}

static const msgpack_object *mp_get(const msgpack_object *m, const char *k)
{
    if (m->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object *key = &m->via.map.ptr[i].key;
        if (key->type == MSGPACK_OBJECT_STR &&
            key->via.str.size == strlen(k) &&
            memcmp(key->via.str.ptr, k, key->via.str.size) == 0)
            return &m->via.map.ptr[i].val;
    }
    return NULL;
}

static void test_pack_info(void)
{
    th_out_info out = {true, 1000000, 8000, 12000, 400, "/tmp/th-spill-x",
                       1000000, NULL};
    th_out_info err = {false, 10, 10, 1, 1, NULL, 0, NULL};
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    CU_ASSERT_EQUAL(th_out_pack_info(&pk, &out, &err), 0);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    CU_ASSERT_EQUAL_FATAL(
        msgpack_unpack_next(&up, (char *)b.data, b.len, NULL),
        MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *so = mp_get(&up.data, "stdout");
    const msgpack_object *se = mp_get(&up.data, "stderr");
    CU_ASSERT_PTR_NOT_NULL_FATAL(so);
    CU_ASSERT_PTR_NOT_NULL_FATAL(se);
    CU_ASSERT_EQUAL(so->via.map.size, 6);
    CU_ASSERT_TRUE(mp_get(so, "truncated")->via.boolean);
    CU_ASSERT_EQUAL(mp_get(so, "total_bytes")->via.u64, 1000000);
    CU_ASSERT_EQUAL(mp_get(so, "kept_bytes")->via.u64, 8000);
    CU_ASSERT_EQUAL(mp_get(so, "total_lines")->via.u64, 12000);
    CU_ASSERT_EQUAL(mp_get(so, "spill_path")->via.str.size, 15);
    CU_ASSERT_EQUAL(mp_get(so, "spill_bytes")->via.u64, 1000000);
    CU_ASSERT_EQUAL(se->via.map.size, 4);
    CU_ASSERT_FALSE(mp_get(se, "truncated")->via.boolean);
    CU_ASSERT_PTR_NULL(mp_get(se, "spill_path"));
    msgpack_unpacked_destroy(&up);

    /* one stream only; a note */
    th_buf_reset(&b);
    err.note = "binary";
    CU_ASSERT_EQUAL(th_out_pack_info(&pk, NULL, &err), 0);
    msgpack_unpacked_init(&up);
    msgpack_unpack_next(&up, (char *)b.data, b.len, NULL);
    CU_ASSERT_EQUAL(up.data.via.map.size, 1);
    CU_ASSERT_PTR_NOT_NULL(mp_get(mp_get(&up.data, "stderr"), "note"));
    msgpack_unpacked_destroy(&up);
    th_buf_destroy(&b);
}

static void test_limit_lookup(void)
{
    th_limits host;
    memset(&host, 0, sizeof host);
    host.bytes[0] = 8000;
    host.bytes[TOOLHOST_SEM_FILE_CONTENT] = 60000;
    host.bytes[TOOLHOST_SEM_LOG] = 8000;
    th_tool_override ov[2];
    memset(ov, 0, sizeof ov);
    ov[0].tool = "fs_read";
    ov[0].limits.bytes[TOOLHOST_SEM_FILE_CONTENT] = 200000;
    ov[1].tool = "tail";
    th_toolset_cfg ts;
    memset(&ts, 0, sizeof ts);
    ts.limits.bytes[TOOLHOST_SEM_LOG] = 4000;
    ts.overrides = ov;
    ts.n_overrides = 2;
    CU_ASSERT_EQUAL(th_out_limit(&host, &ts, "fs_read",
                                 TOOLHOST_SEM_FILE_CONTENT), 200000);
    CU_ASSERT_EQUAL(th_out_limit(&host, &ts, "cat",
                                 TOOLHOST_SEM_FILE_CONTENT), 60000);
    CU_ASSERT_EQUAL(th_out_limit(&host, &ts, "fs_read", TOOLHOST_SEM_LOG),
                    4000);
    CU_ASSERT_EQUAL(th_out_limit(&host, &ts, "tail", TOOLHOST_SEM_LOG), 4000);
    CU_ASSERT_EQUAL(th_out_limit(&host, NULL, "tail", TOOLHOST_SEM_LOG),
                    8000);
    CU_ASSERT_EQUAL(th_out_limit(&host, NULL, NULL, 99), 8000);
}

/* A finished stream's buffer handed back (th_out_spare_put, what delivery
 * does once the caller's callback returned) is the next stream's first
 * block on the same thread; a small limit, a big buffer or a second spare
 * are not kept; the content is the new stream's alone. */
static void *spare_other_thread(void *arg)
{
    th_out o;
    th_out_init(&o, TOOLHOST_SEM_TEXT, 0);
    CU_ASSERT_EQUAL(th_out_write(&o, "x", 1), 0);
    void *got = o.head.data;
    th_buf b = TH_BUF_INIT;
    CU_ASSERT_EQUAL(th_out_finish(&o, &b, NULL), 0);
    th_out_destroy(&o);
    th_out_spare_put(&b); /* freed by this thread's exit */
    return got == arg ? (void *)1 : NULL; /* NULL: not the other spare */
}

static void test_spare_buffer(void)
{
    th_out_spare_drop();
    th_out o;
    th_out_init(&o, TOOLHOST_SEM_TEXT, 0);
    CU_ASSERT_EQUAL(th_out_write(&o, "hello world", 11), 0);
    th_buf b = TH_BUF_INIT;
    CU_ASSERT_EQUAL(th_out_finish(&o, &b, NULL), 0);
    th_out_destroy(&o);
    uint8_t *first = b.data;
    th_out_spare_put(&b);
    CU_ASSERT_PTR_NULL(b.data);
    CU_ASSERT_EQUAL(b.cap, 0);

    /* another thread does not get it */
    pthread_t t;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, spare_other_thread, first), 0);
    void *r = (void *)1;
    pthread_join(t, &r);
    CU_ASSERT_PTR_NULL(r);

    /* a stream limited below the spare's size allocates its own */
    th_out_init(&o, TOOLHOST_SEM_TEXT, 16);
    CU_ASSERT_EQUAL(th_out_write(&o, "abc", 3), 0);
    CU_ASSERT_PTR_NOT_EQUAL(o.head.data, first);
    CU_ASSERT(o.head.cap <= 17);
    th_out_destroy(&o);

    /* the next unlimited one takes it: only its own bytes */
    th_out_init(&o, TOOLHOST_SEM_TEXT, 0);
    CU_ASSERT_EQUAL(th_out_write(&o, "ab", 2), 0);
    CU_ASSERT_PTR_EQUAL(o.head.data, first);
    th_buf c = TH_BUF_INIT;
    CU_ASSERT_EQUAL(th_out_finish(&o, &c, NULL), 0);
    CU_ASSERT_EQUAL(c.len, 2);
    CU_ASSERT_EQUAL(memcmp(c.data, "ab", 3), 0);
    th_out_destroy(&o);

    /* a second buffer while one is kept, and a big one: freed */
    th_buf d = TH_BUF_INIT;
    CU_ASSERT_EQUAL(th_buf_append(&d, "z", 1), 0);
    th_out_spare_put(&c);
    th_out_spare_put(&d);
    CU_ASSERT_PTR_NULL(d.data);
    th_buf big = TH_BUF_INIT;
    CU_ASSERT_EQUAL(th_buf_reserve(&big, 64 * 1024), 0);
    th_out_spare_drop();
    th_out_spare_put(&big);
    CU_ASSERT_PTR_NULL(big.data);
    th_out_init(&o, TOOLHOST_SEM_TEXT, 0);
    CU_ASSERT_EQUAL(th_out_write(&o, "q", 1), 0);
    CU_ASSERT(o.head.cap < 64 * 1024);
    th_out_destroy(&o);
    th_out_spare_drop();
}

/* One stream on storage filled with `fill` before th_out_init, written
 * with `chunks` (sizes cycling through `sizes`), finished into an empty
 * buffer or one holding "<", with a spill when `dir`. */
static void dirty_run(uint8_t fill, uint32_t sem, uint64_t limit, const uint8_t *in,
                      size_t n, const size_t *sizes, size_t n_sizes, bool append,
                      const char *dir, th_buf *dst, th_out_info *info)
{
    th_out *o = malloc(sizeof *o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    memset(o, fill, sizeof *o);
    th_out_init(o, sem, limit);
    if (dir)
        CU_ASSERT_EQUAL(th_out_spill(o, dir, 0), 0);
    for (size_t at = 0, k = 0; at < n; k++) {
        size_t len = sizes[k % n_sizes] < n - at ? sizes[k % n_sizes] : n - at;
        CU_ASSERT_EQUAL(th_out_write(o, in + at, len), 0);
        at += len;
    }
    th_buf_init(dst);
    if (append)
        th_buf_puts(dst, "<");
    CU_ASSERT_EQUAL(th_out_finish(o, dst, info), 0);
    if (info->spill_path) { /* the file goes; its name (random) leaves the text */
        size_t pl = strlen(info->spill_path);
        uint8_t *at = dst->data ? memmem(dst->data, dst->len, info->spill_path, pl) : NULL;
        if (at) {
            memmove(at, at + pl, dst->len - (size_t)(at - dst->data) - pl + 1);
            dst->len -= pl;
        }
        unlink(info->spill_path);
        info->spill_path = "(spill)";
    }
    th_out_destroy(o);
    free(o);
}

/* th_out_init sets only what is read before it is set (the ring's and the
 * spill's members wait until the stream goes over its limit or spills):
 * a stream on storage full of garbage behaves exactly as one on zeroed
 * storage, for every strategy, under, at and over the limit, with and
 * without a spill, a finish that hands the buffer over or appends, and a
 * stream never written.  It fails when init leaves out a member read
 * before it is set (checked: without the ring cleared for head-only
 * types a write over the limit copies into the garbage pointer). */
static void test_dirty_storage(void)
{
    static const uint32_t sems[] = {
        TOOLHOST_SEM_COMMAND_OUTPUT, TOOLHOST_SEM_FILE_CONTENT,
        TOOLHOST_SEM_KNOWLEDGE, TOOLHOST_SEM_STRUCTURED, TOOLHOST_SEM_BINARY};
    static const uint64_t limits[] = {0, 1, 7, 64, 300};
    static const size_t sizes[] = {1, 5, 3, 40, 2};
    char *tmp = th_test_tmpdir();
    char dir[600];
    snprintf(dir, sizeof dir, "%s/spill", tmp);
    uint8_t in[400];
    const char *text = "{\"a\": [1, 2, \"x\\n\"], \"b\": \"\xc3\xa9t\xc3\xa9\"}\nline two\n";
    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (uint8_t)text[i % strlen(text)];
    int differ = 0, runs = 0;
    for (size_t si = 0; si < sizeof sems / sizeof sems[0]; si++)
        for (size_t li = 0; li < sizeof limits / sizeof limits[0]; li++)
            for (size_t n = 0; n <= sizeof in; n += n < 10 ? 3 : 97)
                for (int mode = 0; mode < 4; mode++, runs++) {
                    bool append = mode & 1;
                    const char *sd = mode & 2 ? dir : NULL;
                    th_buf a, b;
                    th_out_info ia, ib;
                    dirty_run(0x00, sems[si], limits[li], in, n, sizes, 5, append, sd, &a,
                              &ia);
                    dirty_run(0xA5, sems[si], limits[li], in, n, sizes, 5, append, sd, &b,
                              &ib);
                    bool same = a.len == b.len && (a.len == 0 || memcmp(a.data, b.data, a.len) == 0) &&
                                ia.truncated == ib.truncated &&
                                ia.total_bytes == ib.total_bytes && ia.kept_bytes == ib.kept_bytes &&
                                ia.total_lines == ib.total_lines && ia.kept_lines == ib.kept_lines &&
                                ia.spill_bytes == ib.spill_bytes && ia.note == ib.note &&
                                (ia.spill_path == NULL) == (ib.spill_path == NULL) &&
                                ia.total_bytes == n;
                    if (!same && differ++ < 5)
                        fprintf(stderr, "dirty storage: sem %u limit %llu n %zu mode %d differs\n",
                                sems[si], (unsigned long long)limits[li], n, mode);
                    /* a stream never written hands over nothing */
                    if (n == 0 && !append)
                        CU_ASSERT_PTR_NULL(a.data);
                    th_buf_destroy(&a);
                    th_buf_destroy(&b);
                }
    CU_ASSERT_EQUAL(differ, 0);
    CU_ASSERT_TRUE(runs > 400);
    th_test_rmtree(tmp);
    free(tmp);
}

/* The buffer written is the buffer handed over when nothing was cut (no
 * copy), and the info says so. */
static void test_finish_hands_over(void)
{
    th_out o;
    th_out_init(&o, TOOLHOST_SEM_TEXT, 100);
    CU_ASSERT_EQUAL(th_out_write(&o, "one\ntwo", 7), 0);
    const uint8_t *written = o.head.data;
    th_buf dst = TH_BUF_INIT;
    th_out_info info;
    memset(&info, 0xA5, sizeof info);
    CU_ASSERT_EQUAL(th_out_finish(&o, &dst, &info), 0);
    CU_ASSERT_PTR_EQUAL(dst.data, written);
    CU_ASSERT_EQUAL(dst.len, 7);
    CU_ASSERT_FALSE(info.truncated);
    CU_ASSERT_EQUAL(info.total_bytes, 7);
    CU_ASSERT_EQUAL(info.kept_bytes, 7);
    CU_ASSERT_EQUAL(info.total_lines, 2);
    CU_ASSERT_EQUAL(info.kept_lines, 1);
    CU_ASSERT_PTR_NULL(info.spill_path);
    CU_ASSERT_EQUAL(info.spill_bytes, 0);
    CU_ASSERT_PTR_NULL(info.note);
    CU_ASSERT_PTR_NULL(o.head.data);
    th_out_destroy(&o); /* nothing left to free */
    th_buf_destroy(&dst);
    /* never written: nothing handed over, all counts 0 */
    th_out_init(&o, TOOLHOST_SEM_ERROR, 100);
    memset(&info, 0xA5, sizeof info);
    CU_ASSERT_EQUAL(th_out_finish(&o, &dst, &info), 0);
    CU_ASSERT_PTR_NULL(dst.data);
    CU_ASSERT_EQUAL(info.total_bytes + info.kept_bytes + info.total_lines + info.kept_lines, 0);
    CU_ASSERT_FALSE(info.truncated);
    th_out_destroy(&o);
}

void th_suite_out(void)
{
    CU_pSuite s = CU_add_suite("out", NULL, suite_clean);
    CU_add_test(s, "fast_path", test_fast_path);
    CU_add_test(s, "head_tail_marker", test_head_tail_marker);
    CU_add_test(s, "head_marker", test_head_marker);
    CU_add_test(s, "utf8_never_split", test_utf8_never_split);
    CU_add_test(s, "invalid_utf8", test_invalid_utf8);
    CU_add_test(s, "structured", test_structured);
    CU_add_test(s, "binary", test_binary);
    CU_add_test(s, "bounded_memory", test_bounded_memory);
    CU_add_test(s, "random_model", test_random_model);
    CU_add_test(s, "flood_fixture", test_flood_fixture);
    CU_add_test(s, "spill", test_spill);
    CU_add_test(s, "spill_gc", test_spill_gc);
    CU_add_test(s, "pack_info", test_pack_info);
    CU_add_test(s, "limit_lookup", test_limit_lookup);
    CU_add_test(s, "spare_buffer", test_spare_buffer);
    CU_add_test(s, "dirty_storage", test_dirty_storage);
    CU_add_test(s, "finish_hands_over", test_finish_hands_over);
}
