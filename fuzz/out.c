/* fuzz/out.c - libFuzzer target: output limits (th_out), which cut what a
 * plugin writes (outside bytes: any tool, any content) by semantic type.
 *
 * Input: byte 0 the semantic type (1..12), bytes 1-2 the limit (0..2047,
 * 0 = none), byte 3 seeds the write sizes, the rest is what the tool
 * writes, in random pieces of 1..256 bytes.
 * Properties beyond "no crash, no leak, no UB" (docs/limits.md):
 *   - total_bytes and total_lines count what was written;
 *   - an output within its limit comes back unchanged, not truncated;
 *   - kept_bytes <= limit; binary keeps a byte-for-byte prefix and adds
 *     nothing; head-only types (file_content, file_view, knowledge) start
 *     with a prefix of the input; a marker adds under 100 bytes + digits;
 *   - valid UTF-8 in gives valid UTF-8 out (no cut splits a sequence);
 *   - structured: one valid JSON value in, cut: valid JSON out (or nothing
 *     when no boundary fits);
 *   - th_utf8_cut never grows and drops at most 3 bytes;
 *   - th_out_pack_info packs one complete msgpack value.
 *
 * needs: host/core/call/out.c
 */
#include <jansson.h>
#include <msgpack.h>
#include <string.h>

#include "fuzz.h"
#include "th/buf.h"
#include "th/err.h"
#include "call/out.h"
#include "toolhost/plugin.h"

static int out_utf8_valid(const uint8_t *s, size_t n)
{
    if (n == 0)
        return 1;
    json_t *j = json_stringn((const char *)s, n); /* jansson checks */
    json_decref(j);
    return j != NULL;
}

static int fuzz_out(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    uint32_t sem = 1 + data[0] % 12;
    uint64_t limit = ((uint64_t)data[1] << 8 | data[2]) % 2048;
    uint32_t x = 0x2545f491u ^ data[3];
    const uint8_t *in = data + 4;
    size_t n = size - 4;

    th_out o;
    th_out_init(&o, sem, limit);
    size_t pos = 0;
    while (pos < n) {
        x = x * 1103515245u + 12345u;
        size_t k = 1 + (x >> 16) % 256;
        if (k > n - pos)
            k = n - pos;
        TH_FUZZ_CHECK(th_out_write(&o, in + pos, k) == 0);
        pos += k;
    }
    th_buf dst = TH_BUF_INIT;
    th_out_info info;
    memset(&info, 0, sizeof info);
    TH_FUZZ_CHECK(th_out_finish(&o, &dst, &info) == 0);

    uint64_t nl = 0;
    for (size_t i = 0; i < n; i++)
        nl += in[i] == '\n';
    TH_FUZZ_CHECK(info.total_bytes == n);
    TH_FUZZ_CHECK(info.total_lines == nl + (n > 0 && in[n - 1] != '\n'));
    TH_FUZZ_CHECK(info.kept_bytes <= n);
    if (limit == 0 || n <= limit) {
        TH_FUZZ_CHECK(!info.truncated);
        TH_FUZZ_CHECK(dst.len == n &&
                      (n == 0 || memcmp(dst.data, in, n) == 0));
    } else {
        TH_FUZZ_CHECK(info.truncated);
        TH_FUZZ_CHECK(info.kept_bytes <= limit);
        if (sem == TOOLHOST_SEM_BINARY) {
            TH_FUZZ_CHECK(dst.len == info.kept_bytes &&
                          memcmp(dst.data, in, dst.len) == 0);
        } else if (sem == TOOLHOST_SEM_STRUCTURED) {
            /* (jansson reads a NUL byte as the end of the text: such
             * input is not JSON) */
            json_t *whole = memchr(in, 0, n)
                                ? NULL
                                : json_loadb((const char *)in, n,
                                             JSON_DECODE_ANY, NULL);
            if (whole && dst.len > 0) {
                json_error_t je;
                json_t *cut = json_loadb((const char *)dst.data, dst.len,
                                         JSON_DECODE_ANY, &je);
                if (!cut)
                    fprintf(stderr, "structured cut is not JSON: %s\n",
                            je.text);
                TH_FUZZ_CHECK(cut != NULL);
                json_decref(cut);
            }
            json_decref(whole);
            /* closing brackets come on top of the kept bytes */
            TH_FUZZ_CHECK(dst.len <= info.kept_bytes + 200 + limit);
        } else {
            /* marker: under 100 bytes plus numbers (and a spill path) */
            TH_FUZZ_CHECK(dst.len <= info.kept_bytes + 160);
            if (sem == TOOLHOST_SEM_FILE_CONTENT ||
                sem == TOOLHOST_SEM_FILE_VIEW || sem == TOOLHOST_SEM_KNOWLEDGE)
                TH_FUZZ_CHECK(info.kept_bytes == 0 ||
                              memcmp(dst.data, in, info.kept_bytes) == 0);
        }
    }
    if (sem != TOOLHOST_SEM_BINARY && out_utf8_valid(in, n))
        TH_FUZZ_CHECK(out_utf8_valid(dst.data, dst.len));

    size_t c = th_utf8_cut(in, n);
    TH_FUZZ_CHECK(c <= n && c + 3 >= n);

    th_buf mp = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &mp, th_buf_msgpack_write);
    TH_FUZZ_CHECK(th_out_pack_info(&pk, &info, &info) == 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    TH_FUZZ_CHECK(msgpack_unpack_next(&u, (const char *)mp.data, mp.len,
                                      &off) == MSGPACK_UNPACK_SUCCESS &&
                  off == mp.len);
    msgpack_unpacked_destroy(&u);
    th_buf_destroy(&mp);
    th_buf_destroy(&dst);
    th_out_destroy(&o);
    return 0;
}

TH_FUZZ_ENTRY(fuzz_out)
