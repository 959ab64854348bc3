/* test_search_index.c - the BM25 index of search_tools (th/search_index.h):
 * tokens, scores checked by hand on a small corpus, ties, filters, limits,
 * the empty query, UTF-8 words, and a random model against a brute force. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/err.h"
#include "th/search_index.h"

typedef struct toks {
    char v[32][TH_SINDEX_TOKEN_MAX + 1];
    size_t n;
} toks;

static void keep(void *ud, const char *tok, size_t n)
{
    toks *t = ud;
    if (t->n < 32) {
        memcpy(t->v[t->n], tok, n);
        t->v[t->n][n] = '\0';
        t->n++;
    }
}

static toks tokens(const char *s, bool name)
{
    toks t;
    memset(&t, 0, sizeof t);
    size_t n = th_sindex_tokens(s, strlen(s), name, keep, &t);
    CU_ASSERT_EQUAL(n, t.n);
    return t;
}

static void test_tokens(void)
{
    toks t = tokens("github_create-Issue", true);
    CU_ASSERT_EQUAL_FATAL(t.n, 3);
    CU_ASSERT_STRING_EQUAL(t.v[0], "github");
    CU_ASSERT_STRING_EQUAL(t.v[1], "create");
    CU_ASSERT_STRING_EQUAL(t.v[2], "issue");
    t = tokens("listPullRequests", true);
    CU_ASSERT_EQUAL_FATAL(t.n, 3);
    CU_ASSERT_STRING_EQUAL(t.v[0], "list");
    CU_ASSERT_STRING_EQUAL(t.v[1], "pull");
    CU_ASSERT_STRING_EQUAL(t.v[2], "request"); /* stemmed */
    t = tokens("HTTPServer v2Api", true);
    CU_ASSERT_EQUAL_FATAL(t.n, 4);
    CU_ASSERT_STRING_EQUAL(t.v[0], "http");
    CU_ASSERT_STRING_EQUAL(t.v[1], "server");
    CU_ASSERT_STRING_EQUAL(t.v[2], "v2");
    CU_ASSERT_STRING_EQUAL(t.v[3], "api");
    /* text is not split at capitals, only lowered */
    t = tokens("Read the GitHub README, (twice)!", false);
    CU_ASSERT_EQUAL_FATAL(t.n, 5);
    CU_ASSERT_STRING_EQUAL(t.v[2], "github");
    CU_ASSERT_STRING_EQUAL(t.v[3], "readme");
    CU_ASSERT_STRING_EQUAL(t.v[4], "twice");
    /* UTF-8 words stay whole; non-ASCII bytes are not lowered */
    t = tokens("Café Übersicht 東京-tower", false);
    CU_ASSERT_EQUAL_FATAL(t.n, 4);
    CU_ASSERT_STRING_EQUAL(t.v[0], "café");
    CU_ASSERT_STRING_EQUAL(t.v[1], "Übersicht");
    CU_ASSERT_STRING_EQUAL(t.v[2], "東京");
    CU_ASSERT_STRING_EQUAL(t.v[3], "tower");
    /* the S-stemmer: plurals and third persons meet their stems */
    t = tokens("issues queries subscribes status class bus goes its toes "
               "cookies series", false);
    CU_ASSERT_EQUAL_FATAL(t.n, 11);
    const char *const st[] = {"issue", "query", "subscribe", "status",
                              "class", "bus", "goe", "its", "toe",
                              "cooky", "sery"};
    for (size_t i = 0; i < 11; i++)
        CU_ASSERT_STRING_EQUAL(t.v[i], st[i]);
    /* nothing but separators */
    t = tokens(" _-.,;:!? \t\n", true);
    CU_ASSERT_EQUAL(t.n, 0);
    /* a long token is cut at TH_SINDEX_TOKEN_MAX bytes */
    char lng[200];
    memset(lng, 'a', sizeof lng - 1);
    lng[sizeof lng - 1] = '\0';
    t = tokens(lng, false);
    CU_ASSERT_EQUAL_FATAL(t.n, 1);
    CU_ASSERT_EQUAL(strlen(t.v[0]), TH_SINDEX_TOKEN_MAX);
}

/* The corpus of the hand-checked scores. */
static th_sindex *small(void)
{
    th_sindex *x = th_sindex_new();
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    const char *d[][2] = {
        {"read_file", "Read a file from disk"},
        {"write_file", "Write text to a file"},
        {"list_issues", "List the open issues of a GitHub repository"},
    };
    for (size_t i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(th_sindex_add(x, d[i][0], d[i][1], strlen(d[i][1])),
                        0);
    CU_ASSERT_EQUAL(th_sindex_finish(x), 0);
    return x;
}

static void test_scores(void)
{
    th_sindex *x = small();
    CU_ASSERT_EQUAL(th_sindex_count(x), 3);
    th_sindex_hit h[4];
    size_t n = 9;
    const char *q = "read file";
    CU_ASSERT_EQUAL(th_sindex_search(x, q, strlen(q), 4, NULL, NULL, h, &n),
                    0);
    CU_ASSERT_EQUAL_FATAL(n, 2);
    /* by hand: N = 3, dl = 7, 7, 10 (the name's tokens count), avgdl 8;
     * read: df 1, idf ln(1 + 2.5/1.5); file: df 2, idf ln(1 + 1.5/2.5);
     * read_file has tf 2 of each, write_file tf 2 of file. */
    double k1 = 1.2, b = 0.75, norm7 = k1 * (1 - b + b * 7.0 / 8.0);
    double idf_read = log(1 + 2.5 / 1.5), idf_file = log(1 + 1.5 / 2.5);
    double s0 = idf_read * 2 * (k1 + 1) / (2 + norm7) +
                idf_file * 2 * (k1 + 1) / (2 + norm7);
    double s1 = idf_file * 2 * (k1 + 1) / (2 + norm7);
    CU_ASSERT_EQUAL(h[0].doc, 0);
    CU_ASSERT_EQUAL(h[1].doc, 1);
    CU_ASSERT_DOUBLE_EQUAL(h[0].score, s0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(h[1].score, s1, 1e-9);
    /* repeating a term changes nothing; case and separators neither */
    q = "READ read, File-file";
    CU_ASSERT_EQUAL(th_sindex_search(x, q, strlen(q), 4, NULL, NULL, h, &n),
                    0);
    CU_ASSERT_EQUAL_FATAL(n, 2);
    CU_ASSERT_DOUBLE_EQUAL(h[0].score, s0, 1e-9);
    /* a rarer word outweighs a common one */
    q = "github file";
    CU_ASSERT_EQUAL(th_sindex_search(x, q, strlen(q), 4, NULL, NULL, h, &n),
                    0);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    CU_ASSERT_EQUAL(h[0].doc, 2);
    CU_ASSERT_STRING_EQUAL(th_sindex_name(x, h[0].doc), "list_issues");
    CU_ASSERT_EQUAL(th_sindex_find(x, "write_file"), 1);
    CU_ASSERT_EQUAL(th_sindex_find(x, "nope"), -1);
    CU_ASSERT_EQUAL(th_sindex_add(x, "late", "too late", 8), TH_ESTATE);
    th_sindex_free(x);
}

static void test_empty_and_limits(void)
{
    th_sindex *x = small();
    th_sindex_hit h[4];
    size_t n = 9;
    CU_ASSERT_EQUAL(th_sindex_search(x, "", 0, 4, NULL, NULL, h, &n), 0);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(th_sindex_search(x, " -- ", 4, 4, NULL, NULL, h, &n), 0);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(th_sindex_search(x, "zebra", 5, 4, NULL, NULL, h, &n), 0);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(th_sindex_search(x, "a", 1, 0, NULL, NULL, h, &n), 0);
    CU_ASSERT_EQUAL(n, 0);
    /* "a" is in all three: k bounds the answer, ties by id */
    CU_ASSERT_EQUAL(th_sindex_search(x, "a", 1, 2, NULL, NULL, h, &n), 0);
    CU_ASSERT_EQUAL_FATAL(n, 2);
    CU_ASSERT(h[0].score >= h[1].score);
    th_sindex_free(x);
    /* an empty index, and one not finished */
    x = th_sindex_new();
    CU_ASSERT_EQUAL(th_sindex_search(x, "a", 1, 2, NULL, NULL, h, &n),
                    TH_ESTATE);
    CU_ASSERT_EQUAL(th_sindex_finish(x), 0);
    CU_ASSERT_EQUAL(th_sindex_search(x, "a", 1, 2, NULL, NULL, h, &n), 0);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(th_sindex_find(x, "a"), -1);
    th_sindex_free(x);
}

static bool not_first(void *ud, uint32_t doc)
{
    int *calls = ud;
    (*calls)++;
    return doc != 0;
}

static void test_filter(void)
{
    th_sindex *x = small();
    th_sindex_hit h[4];
    size_t n = 0;
    int calls = 0;
    CU_ASSERT_EQUAL(th_sindex_search(x, "read file", 9, 1, not_first, &calls,
                                     h, &n), 0);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    CU_ASSERT_EQUAL(h[0].doc, 1); /* read_file filtered out */
    CU_ASSERT_EQUAL(calls, 2);    /* asked about the best two only */
    th_sindex_free(x);
}

static void test_unicode(void)
{
    th_sindex *x = th_sindex_new();
    const char *a = "Order a café au lait", *b = "Zeigt die Übersicht";
    CU_ASSERT_EQUAL(th_sindex_add(x, "coffee", a, strlen(a)), 0);
    CU_ASSERT_EQUAL(th_sindex_add(x, "overview", b, strlen(b)), 0);
    CU_ASSERT_EQUAL(th_sindex_finish(x), 0);
    th_sindex_hit h[2];
    size_t n = 0;
    CU_ASSERT_EQUAL(th_sindex_search(x, "CAFÉ", strlen("CAFÉ"), 2, NULL, NULL,
                                     h, &n), 0);
    CU_ASSERT_EQUAL(n, 0); /* É is not lowered: only ASCII is */
    CU_ASSERT_EQUAL(th_sindex_search(x, "Café", strlen("Café"), 2, NULL, NULL,
                                     h, &n), 0);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    CU_ASSERT_EQUAL(h[0].doc, 0);
    CU_ASSERT_EQUAL(th_sindex_search(x, "Übersicht", strlen("Übersicht"), 2,
                                     NULL, NULL, h, &n), 0);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    CU_ASSERT_EQUAL(h[0].doc, 1);
    /* a lone continuation byte or a cut sequence is just bytes */
    CU_ASSERT_EQUAL(th_sindex_search(x, "\x80\xff caf\xc3", 7, 2, NULL, NULL,
                                     h, &n), 0);
    CU_ASSERT_EQUAL(n, 0);
    th_sindex_free(x);
}

/* A random corpus over a small vocabulary, each query's ranking checked
 * against a brute force of the same formula. */
static void test_random_model(void)
{
    static const char *const words[] = {"alpha", "beta", "gamma", "delta",
                                        "eps", "zeta", "eta", "theta"};
    enum { NW = 8, ND = 60, ROUNDS = 200 };
    srand(7);
    int tf[ND][NW];
    int dl[ND];
    th_sindex *x = th_sindex_new();
    for (int d = 0; d < ND; d++) {
        char text[512] = "";
        memset(tf[d], 0, sizeof tf[d]);
        int len = 1 + rand() % 12;
        for (int i = 0; i < len; i++) {
            int w = rand() % NW;
            tf[d][w]++;
            strcat(text, words[w]);
            strcat(text, " ");
        }
        char name[16];
        snprintf(name, sizeof name, "d%d", d);
        dl[d] = len + 1; /* the name "dN" is a token of its own */
        CU_ASSERT_EQUAL_FATAL(th_sindex_add(x, name, text, strlen(text)), 0);
    }
    CU_ASSERT_EQUAL_FATAL(th_sindex_finish(x), 0);
    double avg = 0;
    for (int d = 0; d < ND; d++)
        avg += dl[d];
    avg /= ND;
    for (int r = 0; r < ROUNDS; r++) {
        int qa = rand() % NW, qb = rand() % NW;
        char q[64];
        snprintf(q, sizeof q, "%s %s", words[qa], words[qb]);
        double s[ND];
        for (int d = 0; d < ND; d++) {
            s[d] = 0;
            for (int k = 0; k < 2; k++) {
                int w = k ? qb : qa;
                if (k && qb == qa)
                    break;
                int df = 0;
                for (int e = 0; e < ND; e++)
                    df += tf[e][w] > 0;
                double idf = log(1 + (ND - df + 0.5) / (df + 0.5));
                double norm = 1.2 * (0.25 + 0.75 * dl[d] / avg);
                s[d] += tf[d][w] ? idf * tf[d][w] * 2.2 / (tf[d][w] + norm)
                                 : 0;
            }
        }
        size_t k = 1 + (size_t)(rand() % 10), n = 0;
        th_sindex_hit h[10];
        CU_ASSERT_EQUAL(th_sindex_search(x, q, strlen(q), k, NULL, NULL, h,
                                         &n), 0);
        bool used[ND] = {false};
        for (size_t i = 0; i < n; i++) {
            int best = -1; /* the brute force's i-th */
            for (int d = 0; d < ND; d++)
                if (!used[d] && s[d] > 0 &&
                    (best < 0 || s[d] > s[best] + 1e-12))
                    best = d;
            CU_ASSERT_FATAL(best >= 0);
            used[best] = true;
            CU_ASSERT_DOUBLE_EQUAL(h[i].score, s[best], 1e-9);
        }
        size_t pos = 0;
        for (int d = 0; d < ND; d++)
            pos += s[d] > 0;
        CU_ASSERT_EQUAL(n, pos < k ? pos : k);
    }
    th_sindex_free(x);
}

/* An attacker's query of many distinct words costs at most
 * TH_SINDEX_QUERY_TERMS terms: the words after them are not looked up. */
static void test_query_terms_cap(void)
{
    th_sindex *x = th_sindex_new();
    char name[16], text[16], q[2048] = "";
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "t%d", i);
        snprintf(text, sizeof text, "w%d", i);
        CU_ASSERT_EQUAL_FATAL(th_sindex_add(x, name, text, strlen(text)), 0);
        strcat(q, text);
        strcat(q, i % 2 ? " " : " w0 "); /* repeats do not count */
    }
    CU_ASSERT_EQUAL_FATAL(th_sindex_finish(x), 0);
    th_sindex_hit h[100];
    size_t n = 0;
    CU_ASSERT_EQUAL(th_sindex_search(x, q, strlen(q), 100, NULL, NULL, h,
                                     &n), 0);
    CU_ASSERT_EQUAL(n, TH_SINDEX_QUERY_TERMS);
    for (size_t i = 0; i < n; i++)
        CU_ASSERT(h[i].doc < TH_SINDEX_QUERY_TERMS);
    th_sindex_free(x);
}

/* Many documents: ids, names and find() stay consistent past the first
 * growth of every table. */
static void test_many(void)
{
    th_sindex *x = th_sindex_new();
    char name[32], text[64];
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "tool_%04d", 2999 - i);
        snprintf(text, sizeof text, "word%d common", i);
        CU_ASSERT_EQUAL_FATAL(th_sindex_add(x, name, text, strlen(text)), 0);
    }
    CU_ASSERT_EQUAL_FATAL(th_sindex_finish(x), 0);
    CU_ASSERT(th_sindex_terms(x) > 3000);
    CU_ASSERT_EQUAL(th_sindex_find(x, "tool_0000"), 2999);
    CU_ASSERT_EQUAL(th_sindex_find(x, "tool_2999"), 0);
    th_sindex_hit h[3];
    size_t n = 0;
    CU_ASSERT_EQUAL(th_sindex_search(x, "word1234", 8, 3, NULL, NULL, h, &n),
                    0);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    CU_ASSERT_EQUAL(h[0].doc, 1234);
    th_sindex_free(x);
}

void th_suite_search_index(void)
{
    CU_pSuite s = CU_add_suite("search_index", NULL, NULL);
    CU_add_test(s, "tokens", test_tokens);
    CU_add_test(s, "scores", test_scores);
    CU_add_test(s, "empty_and_limits", test_empty_and_limits);
    CU_add_test(s, "filter", test_filter);
    CU_add_test(s, "unicode", test_unicode);
    CU_add_test(s, "random_model", test_random_model);
    CU_add_test(s, "many", test_many);
    CU_add_test(s, "query_terms_cap", test_query_terms_cap);
}
