/* th/search_index.h - a BM25 full-text index over a fixed set of short
 * documents (tools: a name and some text), built once and then searched
 * by any number of threads at once.  Used by the built-in search_tools
 * (docs/gateway.md, "Discovery"); knows nothing of tools itself.
 *
 * Tokens: maximal runs of ASCII letters and digits and of bytes >= 0x80
 * (so a UTF-8 word such as "café" or "übersicht" is one token, compared
 * byte for byte); ASCII letters are lowered, other bytes kept as they are.
 * Everything else separates tokens ('_', '-', '.', spaces, punctuation).
 * A document's name is further split at camelCase ("listPullRequests":
 * list, pull, request; "HTTPServer": http, server); a query is read both
 * ways (its words as written, and split).  A token longer than
 * TH_SINDEX_TOKEN_MAX bytes is cut there.  Then Harman's S-stemmer makes
 * plurals and third persons meet their stems: a token of more than 3
 * bytes ending in "ies" ends in "y" instead (not "aies", "eies"), in "es"
 * loses the "s" (not "aes", "ees", "oes"), in "s" loses it (not "us",
 * "ss"): issues -> issue, queries -> query, subscribes -> subscribe.
 *
 * Ranking: Okapi BM25 with k1 = 1.2, b = 0.75 and idf = ln(1 + (N - df +
 * 0.5) / (df + 0.5)) (never negative); a query term counts once however
 * often it is repeated; ties go to the lower document id.
 *
 * Lifetime: th_sindex_new(), th_sindex_add() per document, then
 * th_sindex_finish() once; from then on the index is read-only and every
 * function below is safe from any thread.  th_sindex_free() when no search
 * runs.  A search allocates two arrays of the document count (scores and
 * candidates), never anything per document or per term. */
#ifndef TH_SEARCH_INDEX_H
#define TH_SEARCH_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TH_SINDEX_TOKEN_MAX 64   /* bytes of a token kept */
#define TH_SINDEX_QUERY_TERMS 64 /* distinct query terms used, the rest
                                    ignored */
#define TH_SINDEX_K1 1.2
#define TH_SINDEX_B 0.75

typedef struct th_sindex th_sindex;

/* A new empty index, or NULL when out of memory. */
th_sindex *th_sindex_new(void);
/* Adds a document: `name` (kept, split at camelCase too) and `text` (any
 * number of bytes, not kept).  Its id is the count of documents before
 * it.  0, TH_ENOMEM, or TH_ESTATE after th_sindex_finish(). */
int th_sindex_add(th_sindex *x, const char *name, const char *text,
                  size_t text_len);
/* Builds the postings; no document may be added after.  0 or TH_ENOMEM. */
int th_sindex_finish(th_sindex *x);
void th_sindex_free(th_sindex *x);

size_t th_sindex_count(const th_sindex *x);
size_t th_sindex_terms(const th_sindex *x);
/* The name of document `id` (valid while the index lives). */
const char *th_sindex_name(const th_sindex *x, size_t id);
/* The id of the document called `name`, or -1 (the first of that name). */
long th_sindex_find(const th_sindex *x, const char *name);

typedef struct th_sindex_hit {
    uint32_t doc;
    double score;
} th_sindex_hit;

/* Decides whether a candidate may be returned (e.g. the caller may call
 * that tool).  Called in descending score order, only until k are
 * accepted. */
typedef bool (*th_sindex_filter_fn)(void *ud, uint32_t doc);

/* The best (at most k) documents for `query` (len bytes) with a score
 * above 0, best first, that `filter` (NULL: every document) accepts, into
 * hits[0..*n).  A query without tokens finds nothing.  0 or TH_ENOMEM;
 * TH_ESTATE before th_sindex_finish(). */
int th_sindex_search(const th_sindex *x, const char *query, size_t len,
                     size_t k, th_sindex_filter_fn filter, void *ud,
                     th_sindex_hit *hits, size_t *n);

/* Calls fn with each token of text (len bytes), lowered, as the index
 * reads a document's text (split_case false) or its name (true).  The
 * token is valid during the call; fn may be NULL (only counting).
 * Returns the count of tokens. */
size_t th_sindex_tokens(const char *text, size_t len, bool split_case,
                        void (*fn)(void *ud, const char *tok, size_t n),
                        void *ud);

#endif
