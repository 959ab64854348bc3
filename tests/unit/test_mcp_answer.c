/* test_mcp_answer.c - the mcp plugin's tree-less reader of a stdio
 * server's usual answer (plugins/mcp/mcp_answer.c): what it takes and
 * what it leaves to jansson, and on every line it takes, jansson reads
 * the same id and texts (the fuzz target's own check, fuzz/
 * mcp_answer.c, run here on examples, random edits of them and the fuzz
 * corpus).  mp_json_utf8_valid() comes from plugins/shared/mp_json.c,
 * which test_mp_json.c's fuzz target brings into this binary. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"

#define TH_FUZZ_NO_ENTRY
#define TH_FUZZ_CHECK(cond) CU_ASSERT(cond)
#define TH_MP_JSON_LINKED /* test_mp_json.c brings plugins/shared/mp_json.c */
#include "../../fuzz/mcp_answer.c"

static int take(const char *line)
{
    return mcp_answer_check(line, strlen(line));
}

static void test_taken(void)
{
    mcpsrc_fast_answer a = {0};
    const char *l = "{\"result\":{\"content\":[{\"type\":\"text\",\"text\":"
                    "\"Echo: m1\"}]},\"jsonrpc\":\"2.0\",\"id\":2}";
    CU_ASSERT_EQUAL(mcpsrc_read_answer(l, strlen(l), &a), 1);
    CU_ASSERT_EQUAL(a.id, 2);
    CU_ASSERT_EQUAL(a.n, 1);
    CU_ASSERT(a.len[0] == 8 && memcmp(a.buf + a.off[0], "Echo: m1", 8) == 0);
    /* the buffer is reused: a second answer, two texts, escapes */
    l = " { \"id\" : 9 , \"result\" : { \"isError\" : false , \"content\" :"
        " [ {\"text\":\"a\\nb\\t\\\"c\\\"\",\"type\":\"text\"},"
        "{\"type\":\"text\",\"text\":\"\"} ] } } ";
    CU_ASSERT_EQUAL(mcpsrc_read_answer(l, strlen(l), &a), 1);
    CU_ASSERT_EQUAL(a.id, 9);
    CU_ASSERT_EQUAL(a.n, 2);
    CU_ASSERT(a.len[0] == 7 && memcmp(a.buf + a.off[0], "a\nb\t\"c\"", 7) == 0);
    CU_ASSERT_EQUAL(a.len[1], 0);
    /* no blocks, a negative id, UTF-8 */
    CU_ASSERT_EQUAL(take("{\"id\":-4,\"result\":{\"content\":[]}}"), 1);
    CU_ASSERT_EQUAL(take("{\"id\":1,\"result\":{\"content\":[{\"type\":"
                         "\"text\",\"text\":\"\xc3\xa9\xf0\x9f\x98\x80\"}]}}"),
                    1);
    mcpsrc_fast_answer_free(&a);
}

/* Each is left to the tree path. */
static void test_left(void)
{
    static const char *const lines[] = {
        /* other shapes of a response */
        "{\"id\":1,\"error\":{\"code\":1,\"message\":\"x\"}}",
        "{\"id\":1,\"result\":{\"content\":[],\"isError\":true}}",
        "{\"id\":1,\"result\":{\"content\":[],\"structuredContent\":{}}}",
        "{\"id\":1,\"result\":{\"content\":[],\"_meta\":{}}}",
        "{\"id\":1,\"result\":{}}",
        "{\"id\":1,\"result\":{\"content\":{}}}",
        "{\"id\":1,\"result\":{\"content\":[{\"type\":\"image\","
        "\"data\":\"AA==\",\"mimeType\":\"image/png\"}]}}",
        "{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\"}]}}",
        "{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":1}]}}",
        "{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"a\","
        "\"annotations\":{}}]}}",
        "{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"a\","
        "\"text\":\"b\"}]}}",
        "{\"id\":1,\"id\":2,\"result\":{\"content\":[]}}",
        "{\"result\":{\"content\":[]}}",
        "{\"id\":1}",
        /* ids: a string, a real, 19 digits */
        "{\"id\":\"1\",\"result\":{\"content\":[]}}",
        "{\"id\":1.0,\"result\":{\"content\":[]}}",
        "{\"id\":1e2,\"result\":{\"content\":[]}}",
        "{\"id\":1234567890123456789,\"result\":{\"content\":[]}}",
        /* another jsonrpc, a method: a request or notification */
        "{\"jsonrpc\":\"1.0\",\"id\":1,\"result\":{\"content\":[]}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
        /* \u escapes (jansson's rules), a NUL, bad UTF-8, a surrogate */
        "{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":"
        "\"\\u0041\"}]}}",
        "{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":"
        "\"\\ud800\"}]}}",
        "{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":"
        "\"\xff\"}]}}",
        "{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":"
        "\"\xed\xa0\x80\"}]}}",
        "{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":"
        "\"\xc0\xaf\"}]}}",
        /* not JSON, or more than one value; whitespace yajl takes and
         * JSON does not; a string left open after the object (yajl lets
         * an unfinished token pass there: fuzz/corpus/mcp_answer) */
        "{\"id\":1,\"result\":{\"content\":[]}} {}",
        "{\"id\":1,\"result\":{\"content\":[]}}\v",
        "{\"id\":1,\"result\":{\"content\":[]}}\":7.",
        "{\"id\":1,\"result\":{\"content\":[]}} 12",
        "{\"id\":1,\"result\":{\"content\":[]}} tru",
        "{\"id\":1,\"result\":{\"content\":[]}",
        "[]",
        "",
        "null",
    };
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
        int rc = take(lines[i]);
        if (rc != 0)
            fprintf(stderr, "\nmcp_answer: took %s\n", lines[i]);
        CU_ASSERT_EQUAL(rc, 0);
    }
    /* a text with a NUL byte (jansson reads \u0000 only with
     * JSON_ALLOW_NUL): left too */
    static const char nul[] = "{\"id\":1,\"result\":{\"content\":[{\"type\":"
                              "\"text\",\"text\":\"a\0b\"}]}}";
    CU_ASSERT_EQUAL(mcp_answer_check(nul, sizeof nul - 1), 0);
    /* more blocks than MCPSRC_FAST_TEXTS */
    char big[4096] = "{\"id\":1,\"result\":{\"content\":[";
    for (int i = 0; i <= MCPSRC_FAST_TEXTS; i++)
        strcat(big, i ? ",{\"type\":\"text\",\"text\":\"t\"}"
                      : "{\"type\":\"text\",\"text\":\"t\"}");
    strcat(big, "]}}");
    CU_ASSERT_EQUAL(take(big), 0);
}

/* Random edits of answers (a byte changed, dropped or doubled): every
 * line the reader takes, jansson reads the same (mcp_answer_check). */
static void test_random(void)
{
    static const char *const base[] = {
        "{\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"Echo: m1\"}]},"
        "\"jsonrpc\":\"2.0\",\"id\":2}",
        "{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"content\":[{\"text\":"
        "\"a\\\\b\\n\",\"type\":\"text\"},{\"type\":\"text\",\"text\":\"2\"}],"
        "\"isError\":false}}",
    };
    srand(20261130);
    unsigned taken = 0, left = 0;
    for (int round = 0; round < 20000; round++) {
        const char *b = base[round % 2];
        size_t n = strlen(b);
        char l[256];
        memcpy(l, b, n + 1);
        for (int k = rand() % 3 + 1; k > 0; k--) {
            size_t at = (size_t)rand() % n;
            int how = rand() % 3;
            if (how == 0) {
                static const char pick[] = "{}[]\":,0123456789-.etx \\u\n";
                l[at] = rand() % 4 ? pick[rand() % (sizeof pick - 1)]
                                   : (char)(rand() % 256);
            } else if (how == 1 && n > 1) {
                memmove(l + at, l + at + 1, n - at);
                n--;
            } else if (n + 1 < sizeof l) {
                memmove(l + at + 1, l + at, n - at + 1);
                n++;
            }
        }
        if (mcp_answer_check(l, n))
            taken++;
        else
            left++;
    }
    /* both kinds were seen in earnest */
    CU_ASSERT(taken > 100);
    CU_ASSERT(left > 1000);
}

/* The fuzz target's seeds and past findings, replayed. */
static void corpus_one(const char *data, size_t len, void *ud)
{
    *(unsigned *)ud += (unsigned)mcp_answer_check(data, len);
}

static void test_corpus(void)
{
    unsigned taken = 0;
    CU_ASSERT(th_test_each_file("fuzz/corpus/mcp_answer", corpus_one,
                                &taken) >= 5);
    CU_ASSERT(taken >= 2);
}

void th_suite_mcp_answer(void)
{
    CU_pSuite s = CU_add_suite("mcp_answer", NULL, NULL);
    CU_add_test(s, "taken", test_taken);
    CU_add_test(s, "left", test_left);
    CU_add_test(s, "random", test_random);
    CU_add_test(s, "corpus", test_corpus);
}
