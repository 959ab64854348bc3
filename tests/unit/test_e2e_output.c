/* test_e2e_output.c - output limits end to end through the manager: the
 * flood fixture and fs_read loaded by th_host_open from a YAML config with
 * `limits:`, called with th_call_sync; each strategy's marker, the result's
 * meta["toolhost"]["output"], UTF-8, toolset and tool overrides over the
 * host's limits, spill files (0600, size cap, periodic cleaning), the
 * read-on offset of a call that had an offset, and bounded memory. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"
#include "th/config.h"
#include "th/host.h"
#include "th/log.h"
#include "call/manager.h"

typedef struct ofx {
    int log_level;
    char *tmp;
    char spill[512];
    th_host *h;
    th_session *s;
} ofx;

static int ofx_up(ofx *fx)
{
    memset(fx, 0, sizeof *fx);
    fx->tmp = th_test_tmpdir();
    snprintf(fx->spill, sizeof fx->spill, "%s/spill", fx->tmp);
    char data[512];
    snprintf(data, sizeof data, "%s/data", fx->tmp);
    if (mkdir(data, 0700) != 0)
        return -1;
    /* 5000 numbered lines of 9 bytes: 45,000 bytes */
    th_buf big = TH_BUF_INIT;
    for (int i = 0; i < 5000; i++)
        th_buf_printf(&big, "row %04d\n", i);
    free(th_test_write_file(data, "big.txt", (const char *)big.data, big.len));
    th_buf_destroy(&big);

    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "host:\n"
             "  workers: 2\n"
             "  log_level: error\n"
             "  spill_dir: %s\n"
             "  spill_max_bytes: 256KiB\n"
             "  spill_max_age: 1s\n"
             "limits:\n"
             "  command_output: 4000\n"
             "  file_content: 8000\n"
             "  knowledge: 6000\n"
             "  status: 1000\n"
             "  structured: 4000\n"
             "  binary: 2000\n"
             "plugins:\n"
             "  - name: flood\n"
             "    path: %s\n"
             "  - name: fs\n"
             "    path: %s\n"
             "    config: {root: %s}\n"
             "toolsets:\n"
             "  - name: main\n"
             "    tools: [\"*\"]\n"
             "    limits: {status: 1500}\n"
             "    tool_overrides:\n"
             "      flood_command:\n"
             "        limits: {command_output: 2000}\n",
             fx->spill, th_test_build_path("fixtures/flood.so"),
             th_test_build_path("plugins/fs.so"), data);
    th_config *cfg = NULL;
    th_error e;
    th_error_clear(&e);
    fx->log_level = th_log_get_level();
    if (th_config_parse("e2e.yaml", NULL, yaml, strlen(yaml), &cfg, &e)) {
        fprintf(stderr, "config: %s\n", e.msg);
        return -1;
    }
    if (th_host_open(cfg, &fx->h, &e)) {
        fprintf(stderr, "host: %s\n", e.msg);
        th_log_set_level(fx->log_level);
        return -1;
    }
    th_principal who = {.uid = 0, .gid = 0, .trusted = true};
    fx->s = th_session_open(fx->h, &who, NULL, NULL);
    return fx->s ? 0 : -1;
}

static void ofx_down(ofx *fx)
{
    if (fx->s)
        th_session_close(fx->s);
    if (fx->h)
        th_host_close(fx->h);
    th_log_set_level(fx->log_level);
    th_test_rmtree(fx->tmp);
    free(fx->tmp);
}

/* Calls a flood tool; pattern/stream NULL for the defaults. */
static void flood(ofx *fx, const char *tool, uint64_t size, uint64_t chunk,
                  const char *pattern, const char *stream, th_result_copy *r)
{
    th_buf a = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &a, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 2 + (pattern ? 1 : 0) + (stream ? 1 : 0));
    msgpack_pack_str_with_body(&pk, "size", 4);
    msgpack_pack_uint64(&pk, size);
    msgpack_pack_str_with_body(&pk, "chunk", 5);
    msgpack_pack_uint64(&pk, chunk);
    if (pattern) {
        msgpack_pack_str_with_body(&pk, "pattern", 7);
        msgpack_pack_str_with_body(&pk, pattern, strlen(pattern));
    }
    if (stream) {
        msgpack_pack_str_with_body(&pk, "stream", 6);
        msgpack_pack_str_with_body(&pk, stream, strlen(stream));
    }
    th_call_opts o;
    memset(&o, 0, sizeof o);
    o.timeout_ms = 120000;
    o.output_info = true; /* both streams described, cut or not */
    CU_ASSERT_EQUAL(th_call_sync(fx->s, tool, a.data, a.len, &o, NULL, NULL,
                                 NULL, r),
                    0);
    CU_ASSERT_EQUAL(r->kind, TH_RESULT_DONE);
    if (r->kind != TH_RESULT_DONE)
        fprintf(stderr, "%s: %s\n", tool, r->message ? r->message : "?");
    th_buf_destroy(&a);
}

/* What meta["toolhost"]["output"][stream] says. */
typedef struct sinfo {
    bool found, truncated;
    int64_t total_bytes, kept_bytes, total_lines, spill_bytes;
    char spill_path[512];
    char note[160];
} sinfo;

static const msgpack_object *get(const msgpack_object *m, const char *key)
{
    if (!m || m->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object_kv *kv = &m->via.map.ptr[i];
        if (kv->key.type == MSGPACK_OBJECT_STR &&
            kv->key.via.str.size == strlen(key) &&
            memcmp(kv->key.via.str.ptr, key, kv->key.via.str.size) == 0)
            return &kv->val;
    }
    return NULL;
}

static int64_t get_int(const msgpack_object *m, const char *key)
{
    const msgpack_object *v = get(m, key);
    return v && (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
                 v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
               ? v->via.i64
               : -1;
}

static void get_str(const msgpack_object *m, const char *key, char *dst,
                    size_t cap)
{
    const msgpack_object *v = get(m, key);
    dst[0] = '\0';
    if (v && v->type == MSGPACK_OBJECT_STR && v->via.str.size < cap) {
        memcpy(dst, v->via.str.ptr, v->via.str.size);
        dst[v->via.str.size] = '\0';
    }
}

static sinfo meta_of(const th_result_copy *r, const char *stream)
{
    sinfo si;
    memset(&si, 0, sizeof si);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    if (r->meta.len &&
        msgpack_unpack_next(&u, (const char *)r->meta.data, r->meta.len,
                            NULL) == MSGPACK_UNPACK_SUCCESS) {
        const msgpack_object *s =
            get(get(get(&u.data, "toolhost"), "output"), stream);
        if (s) {
            si.found = true;
            const msgpack_object *t = get(s, "truncated");
            si.truncated = t && t->type == MSGPACK_OBJECT_BOOLEAN &&
                           t->via.boolean;
            si.total_bytes = get_int(s, "total_bytes");
            si.kept_bytes = get_int(s, "kept_bytes");
            si.total_lines = get_int(s, "total_lines");
            si.spill_bytes = get_int(s, "spill_bytes");
            get_str(s, "spill_path", si.spill_path, sizeof si.spill_path);
            get_str(s, "note", si.note, sizeof si.note);
        }
    }
    msgpack_unpacked_destroy(&u);
    return si;
}

static const char *text(const th_buf *b)
{
    return b->data ? (const char *)b->data : "";
}

static int utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0 && c >= 0xC2) {
            len = 2;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3;
        } else if ((c & 0xF8) == 0xF0 && c <= 0xF4) {
            len = 4;
        } else {
            return 0;
        }
        if (i + len > n)
            return 0;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += len;
    }
    return 1;
}

static void check_spill_file(const sinfo *si, int64_t want_bytes)
{
    CU_ASSERT_TRUE(si->spill_path[0] != '\0');
    struct stat sb;
    CU_ASSERT_EQUAL_FATAL(stat(si->spill_path, &sb), 0);
    CU_ASSERT_EQUAL(sb.st_mode & 0777, 0600);
    CU_ASSERT_EQUAL((int64_t)sb.st_size, want_bytes);
    CU_ASSERT_EQUAL(si->spill_bytes, want_bytes);
}

/* ---- Strategies ------------------------------------------------------------ */

/* command_output: head and tail around a "lines cut" marker; the tool
 * override's 2000 beats the host's 4000; the full text is spilled. */
static void test_head_tail(void)
{
    ofx fx;
    CU_ASSERT_EQUAL_FATAL(ofx_up(&fx), 0);
    th_result_copy r;
    flood(&fx, "flood_command", 100000, 4096, "lines", NULL, &r);
    CU_ASSERT_TRUE(r.ok);
    const char *o = text(&r.out);
    CU_ASSERT_PTR_NOT_NULL(strstr(o, "lines cut"));
    CU_ASSERT_PTR_NOT_NULL(strstr(o, "full output in "));
    CU_ASSERT_EQUAL(strncmp(o, "line 00000000: ", 15), 0);
    /* the tail ends with the stream's last bytes (padding 'x') */
    CU_ASSERT_TRUE(r.out.len > 0 && o[r.out.len - 1] == 'x');
    sinfo si = meta_of(&r, "stdout");
    CU_ASSERT_TRUE(si.found);
    CU_ASSERT_TRUE(si.truncated);
    CU_ASSERT_EQUAL(si.total_bytes, 100000);
    CU_ASSERT_TRUE(si.kept_bytes > 1000 && si.kept_bytes <= 2000);
    CU_ASSERT_TRUE(r.out.len < 2000 + 300);
    CU_ASSERT_EQUAL(si.total_lines, 100000 / 35 + 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(o, si.spill_path));
    check_spill_file(&si, 100000);
    /* the spill file holds the whole stream */
    FILE *f = fopen(si.spill_path, "rb");
    char head[16] = "";
    CU_ASSERT_TRUE(f && fread(head, 1, 15, f) == 15);
    if (f)
        fclose(f);
    CU_ASSERT_EQUAL(memcmp(head, "line 00000000: ", 15), 0);
    sinfo se = meta_of(&r, "stderr");
    CU_ASSERT_TRUE(se.found);
    CU_ASSERT_FALSE(se.truncated);
    CU_ASSERT_EQUAL(se.total_bytes, 0);
    th_result_copy_destroy(&r);

    /* what fits is untouched: no marker, no spill */
    flood(&fx, "flood_command", 1500, 100, "lines", NULL, &r);
    CU_ASSERT_EQUAL(r.out.len, 1500);
    si = meta_of(&r, "stdout");
    CU_ASSERT_FALSE(si.truncated);
    CU_ASSERT_EQUAL(si.kept_bytes, 1500);
    CU_ASSERT_EQUAL(si.spill_path[0], '\0');
    th_result_copy_destroy(&r);

    /* stderr has its own type (error: the host default 8000) */
    flood(&fx, "flood_command", 50000, 4096, "lines", "stderr", &r);
    si = meta_of(&r, "stderr");
    CU_ASSERT_TRUE(si.truncated);
    CU_ASSERT_TRUE(si.kept_bytes > 4000 && si.kept_bytes <= 8000);
    CU_ASSERT_PTR_NOT_NULL(strstr(text(&r.err), "lines cut"));
    CU_ASSERT_EQUAL(r.out.len, 0);
    th_result_copy_destroy(&r);
    ofx_down(&fx);
}

/* file_content and knowledge: head only with a read-on marker; status: the
 * toolset's 1500 beats the host's 1000. */
static void test_head_only_and_overrides(void)
{
    ofx fx;
    CU_ASSERT_EQUAL_FATAL(ofx_up(&fx), 0);
    th_result_copy r;
    flood(&fx, "flood_file", 100000, 4096, "lines", NULL, &r);
    const char *o = text(&r.out);
    sinfo si = meta_of(&r, "stdout");
    CU_ASSERT_TRUE(si.truncated);
    CU_ASSERT_TRUE(si.kept_bytes > 7000 && si.kept_bytes <= 8000);
    CU_ASSERT_EQUAL(si.kept_bytes % 35, 0); /* whole lines */
    char want[96];
    /* (a spill note follows the offset) */
    snprintf(want, sizeof want, "read on with offset=%lld; full output in ",
             (long long)(si.kept_bytes / 35));
    CU_ASSERT_PTR_NOT_NULL(strstr(o, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(o, "more bytes ("));
    check_spill_file(&si, 100000);
    th_result_copy_destroy(&r);

    flood(&fx, "flood_knowledge", 100000, 4096, "lines", NULL, &r);
    si = meta_of(&r, "stdout");
    CU_ASSERT_TRUE(si.kept_bytes > 5000 && si.kept_bytes <= 6000);
    snprintf(want, sizeof want, "read on with offset=%lld (bytes)",
             (long long)si.kept_bytes);
    CU_ASSERT_PTR_NOT_NULL(strstr(text(&r.out), want));
    th_result_copy_destroy(&r);

    flood(&fx, "flood_status", 100000, 4096, "lines", NULL, &r);
    si = meta_of(&r, "stdout");
    CU_ASSERT_TRUE(si.truncated);
    CU_ASSERT_TRUE(si.kept_bytes > 1000 && si.kept_bytes <= 1500);
    CU_ASSERT_PTR_NOT_NULL(strstr(text(&r.out), "lines cut"));
    th_result_copy_destroy(&r);
    ofx_down(&fx);
}

/* structured stays valid JSON (meta says how it was cut); binary is the
 * first bytes and nothing else. */
static void test_structured_and_binary(void)
{
    ofx fx;
    CU_ASSERT_EQUAL_FATAL(ofx_up(&fx), 0);
    th_result_copy r;
    flood(&fx, "flood_json", 200000, 1000, "json", NULL, &r);
    json_error_t je;
    json_t *j = json_loadb(text(&r.out), r.out.len, 0, &je);
    CU_ASSERT_PTR_NOT_NULL(j);
    CU_ASSERT_TRUE(j && json_is_array(json_object_get(j, "items")) &&
                   json_array_size(json_object_get(j, "items")) > 50);
    json_decref(j);
    sinfo si = meta_of(&r, "stdout");
    CU_ASSERT_TRUE(si.truncated);
    CU_ASSERT_TRUE(si.kept_bytes <= 4000);
    CU_ASSERT_PTR_NOT_NULL(strstr(si.note, "JSON element boundary"));
    th_result_copy_destroy(&r);

    flood(&fx, "flood_binary", 100000, 333, "binary", NULL, &r);
    CU_ASSERT_EQUAL(r.out.len, 2000);
    si = meta_of(&r, "stdout");
    CU_ASSERT_TRUE(si.truncated);
    CU_ASSERT_EQUAL(si.kept_bytes, 2000);
    CU_ASSERT_PTR_NOT_NULL(strstr(si.note, "binary"));
    /* the kept bytes are the stream's first ones: the spill file's head */
    FILE *f = fopen(si.spill_path, "rb");
    uint8_t head[2000];
    CU_ASSERT_TRUE(f && fread(head, 1, sizeof head, f) == sizeof head);
    if (f)
        fclose(f);
    CU_ASSERT_EQUAL(memcmp(head, r.out.data, sizeof head), 0);
    th_result_copy_destroy(&r);
    ofx_down(&fx);
}

/* Valid UTF-8 written one byte at a time stays valid at every cut;
 * invalid bytes pass through without making the result longer. */
static void test_utf8(void)
{
    ofx fx;
    CU_ASSERT_EQUAL_FATAL(ofx_up(&fx), 0);
    static const char *const tools[] = {"flood_command", "flood_file",
                                        "flood_knowledge", "flood_status"};
    for (size_t i = 0; i < 4; i++) {
        th_result_copy r;
        flood(&fx, tools[i], 30011, 1, "utf8", NULL, &r);
        CU_ASSERT_TRUE(utf8_valid(r.out.data, r.out.len));
        if (!utf8_valid(r.out.data, r.out.len))
            fprintf(stderr, "%s: invalid UTF-8 after the cut\n", tools[i]);
        sinfo si = meta_of(&r, "stdout");
        CU_ASSERT_TRUE(si.truncated);
        CU_ASSERT_EQUAL(si.total_bytes, 30011);
        th_result_copy_destroy(&r);

        flood(&fx, tools[i], 30011, 7, "invalid_utf8", NULL, &r);
        si = meta_of(&r, "stdout");
        CU_ASSERT_TRUE(si.truncated);
        CU_ASSERT_TRUE(si.kept_bytes <= 8000);
        CU_ASSERT_PTR_NOT_NULL(memchr(r.out.data, 0xff, r.out.len));
        th_result_copy_destroy(&r);
    }
    ofx_down(&fx);
}

/* The spill file stops at spill_max_bytes; meta tells both sizes. */
static void test_spill_cap(void)
{
    ofx fx;
    CU_ASSERT_EQUAL_FATAL(ofx_up(&fx), 0);
    th_result_copy r;
    flood(&fx, "flood_command", 1 << 20, 65536, "ascii", NULL, &r);
    /* the folder is made (0700) by the first spill */
    struct stat sb;
    CU_ASSERT_EQUAL(stat(fx.spill, &sb), 0);
    CU_ASSERT_TRUE(S_ISDIR(sb.st_mode));
    CU_ASSERT_EQUAL(sb.st_mode & 0777, 0700);
    sinfo si = meta_of(&r, "stdout");
    CU_ASSERT_EQUAL(si.total_bytes, 1 << 20);
    check_spill_file(&si, 256 * 1024);
    th_result_copy_destroy(&r);
    ofx_down(&fx);
}

/* The deadline thread removes old spill files while the host runs. */
static void test_spill_gc_periodic(void)
{
    ofx fx;
    CU_ASSERT_EQUAL_FATAL(ofx_up(&fx), 0);
    th_result_copy r;
    flood(&fx, "flood_command", 100000, 4096, "lines", NULL, &r);
    sinfo si = meta_of(&r, "stdout");
    th_result_copy_destroy(&r);
    CU_ASSERT_EQUAL_FATAL(access(si.spill_path, F_OK), 0);
    /* a fresh one stays, one older than spill_max_age (1 s) goes */
    char *fresh = th_test_write_file(fx.spill, "th-spill-fresh1", "x", 1);
    struct timeval old[2];
    gettimeofday(&old[0], NULL);
    old[0].tv_sec -= 3600;
    old[1] = old[0];
    CU_ASSERT_EQUAL(utimes(si.spill_path, old), 0);
    th_mgr_set_spill_gc_every(fx.h, 20);
    bool gone = false;
    struct timespec t0, tn;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do { /* the deadline thread's clean-up runs every 20 ms now */
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
        gone = access(si.spill_path, F_OK) != 0;
        clock_gettime(CLOCK_MONOTONIC, &tn);
    } while (!gone && (tn.tv_sec - t0.tv_sec) * 1000 +
                          (tn.tv_nsec - t0.tv_nsec) / 1000000 < (long)th_test_ms(5000));
    CU_ASSERT_TRUE(gone);
    CU_ASSERT_EQUAL(access(fresh, F_OK), 0);
    th_mgr_set_spill_gc_every(fx.h, 60000);
    free(fresh);
    ofx_down(&fx);
}

/* fs_read with offset=1000: the marker's read-on offset counts from 1000. */
static void test_read_on_offset(void)
{
    ofx fx;
    CU_ASSERT_EQUAL_FATAL(ofx_up(&fx), 0);
    th_buf a = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &a, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "path", 4);
    msgpack_pack_str_with_body(&pk, "big.txt", 7);
    msgpack_pack_str_with_body(&pk, "offset", 6);
    msgpack_pack_uint64(&pk, 1000);
    th_result_copy r;
    CU_ASSERT_EQUAL(th_call_sync(fx.s, "fs_read", a.data, a.len, NULL, NULL,
                                 NULL, NULL, &r),
                    0);
    th_buf_destroy(&a);
    CU_ASSERT_EQUAL_FATAL(r.kind, TH_RESULT_DONE);
    const char *o = text(&r.out);
    CU_ASSERT_EQUAL(strncmp(o, "row 1000\n", 9), 0);
    sinfo si = meta_of(&r, "stdout");
    CU_ASSERT_TRUE(si.truncated);
    CU_ASSERT_EQUAL(si.kept_bytes % 9, 0);
    long shown = (long)(si.kept_bytes / 9);
    char want[64];
    snprintf(want, sizeof want, "read on with offset=%ld; full output in ",
             1000 + shown);
    CU_ASSERT_PTR_NOT_NULL(strstr(o, want));
    if (!strstr(o, want))
        fprintf(stderr, "want '%s' in '%s'\n", want,
                r.out.len > 200 ? o + r.out.len - 200 : o);
    /* the row right after the shown ones is the one the offset names */
    char last[32];
    snprintf(last, sizeof last, "row %04ld\n[...", 1000 + shown - 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(o, last));
    /* the tool's own meta is kept beside the host's */
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CU_ASSERT_EQUAL(msgpack_unpack_next(&u, (const char *)r.meta.data,
                                        r.meta.len, NULL),
                    MSGPACK_UNPACK_SUCCESS);
    CU_ASSERT_EQUAL(get_int(&u.data, "offset"), 1000);
    msgpack_unpacked_destroy(&u);
    th_result_copy_destroy(&r);
    ofx_down(&fx);
}

/* ---- Memory ---------------------------------------------------------------- */

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

/* A call writing 512 MiB in 4 KiB writes raises the peak RSS by far less
 * than that (limits and the spill cap hold while the tool writes). */
static void test_bounded_memory(void)
{
    ofx fx;
    CU_ASSERT_EQUAL_FATAL(ofx_up(&fx), 0);
    th_result_copy r;
    flood(&fx, "flood_command", 4096, 4096, "ascii", NULL, &r); /* warm up */
    th_result_copy_destroy(&r);
    reset_hwm();
    long before = vm_hwm_kb();
    flood(&fx, "flood_command", 512ull << 20, 4096, "ascii", NULL, &r);
    long after = vm_hwm_kb();
    sinfo si = meta_of(&r, "stdout");
    CU_ASSERT_EQUAL(si.total_bytes, 512ll << 20);
    CU_ASSERT_TRUE(si.kept_bytes <= 2000);
    CU_ASSERT_TRUE(before > 0 && after > 0);
    long delta = after - before;
    fprintf(stderr, "[e2e_output] 512 MiB written: peak RSS +%ld KiB\n", delta);
    CU_ASSERT_TRUE(delta < 16 * 1024);
    th_result_copy_destroy(&r);
    ofx_down(&fx);
}

void th_suite_e2e_output(void)
{
    CU_pSuite s = CU_add_suite("e2e_output", NULL, NULL);
    CU_add_test(s, "head_tail", test_head_tail);
    CU_add_test(s, "head_only_and_overrides", test_head_only_and_overrides);
    CU_add_test(s, "structured_and_binary", test_structured_and_binary);
    CU_add_test(s, "utf8", test_utf8);
    CU_add_test(s, "spill_cap", test_spill_cap);
    CU_add_test(s, "spill_gc_periodic", test_spill_gc_periodic);
    CU_add_test(s, "read_on_offset", test_read_on_offset);
    CU_add_test(s, "bounded_memory", test_bounded_memory);
}
