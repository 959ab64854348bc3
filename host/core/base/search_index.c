/* search_index.c - a BM25 index over short documents (th/search_index.h):
 * a term table (open addressing over an arena of term bytes), postings in
 * one array per field (CSR: the postings of term t are off[t]..off[t+1],
 * in document order), each document's length norm precomputed.  Built
 * once, then read-only: searches share it without a lock. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "th/err.h"
#include "th/search_index.h"

typedef struct term {
    uint32_t off;   /* into arena */
    uint32_t len;
    uint32_t hash;
} term;

struct th_sindex {
    bool done;
    /* terms */
    char *arena;
    size_t arena_len, arena_cap;
    term *terms;
    size_t n_terms, terms_cap;
    uint32_t *slots; /* term id + 1, or 0: empty; a power of two */
    size_t n_slots;
    /* documents */
    char **names;
    uint32_t *dl;    /* tokens per document */
    size_t n_docs, docs_cap;
    /* building: (term, doc, tf) of each document, in document order */
    uint32_t *b_term, *b_doc, *b_tf;
    size_t n_b, b_cap;
    uint32_t *tmp;   /* one document's term ids */
    size_t n_tmp, tmp_cap;
    bool oom;        /* a token could not be added */
    /* finished */
    uint32_t *off;   /* n_terms + 1 */
    uint32_t *p_doc, *p_tf;
    double *idf;     /* per term */
    double *norm;    /* per document: k1 * (1 - b + b * dl / avgdl) */
    uint32_t *by_name; /* document ids sorted by name */
};

static uint32_t fnv1a(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* ---- tokens -------------------------------------------------------------- */

static bool is_word(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c >= 0x80;
}

static bool is_upper(unsigned char c)
{
    return c >= 'A' && c <= 'Z';
}

static bool is_lower_or_digit(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* Harman's S-stemmer on a lowered token of more than 3 bytes: "ies" ->
 * "y" (not "aies", "eies"), "es" -> "e" (not "aes", "ees", "oes"), "s" ->
 * "" (not "us", "ss"); the new length. */
static size_t stem(const char *t, size_t n)
{
    if (n <= 3 || t[n - 1] != 's')
        return n;
    if (t[n - 3] == 'i' && t[n - 2] == 'e' && t[n - 4] != 'a' &&
        t[n - 4] != 'e')
        return n - 2; /* the caller writes the 'y' */
    if (t[n - 2] == 'e' && t[n - 3] != 'a' && t[n - 3] != 'e' &&
        t[n - 3] != 'o')
        return n - 1;
    if (t[n - 2] != 'u' && t[n - 2] != 's')
        return n - 1;
    return n;
}

static void emit(char *tok, size_t n,
                 void (*fn)(void *ud, const char *tok, size_t n), void *ud)
{
    if (!fn)
        return;
    size_t m = stem(tok, n);
    if (m == n - 2) { /* "ies" -> "y" */
        tok[m - 1] = 'y';
        fn(ud, tok, m);
        return;
    }
    fn(ud, tok, m);
}

size_t th_sindex_tokens(const char *text, size_t len, bool split_case,
                        void (*fn)(void *ud, const char *tok, size_t n),
                        void *ud)
{
    char tok[TH_SINDEX_TOKEN_MAX];
    size_t n = 0, count = 0;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i <= len; i++) {
        unsigned char c = i < len ? s[i] : 0;
        bool split = !is_word(c);
        if (!split && split_case && n > 0 && is_upper(c) && i > 0) {
            unsigned char prev = s[i - 1];
            unsigned char next = i + 1 < len ? s[i + 1] : 0;
            /* listPull | v2Api | HTTP|Server (the last capital of a run
             * starts the next word when a lower-case letter follows) */
            split = is_lower_or_digit(prev) ||
                    (is_upper(prev) && next >= 'a' && next <= 'z');
            if (split) {
                emit(tok, n, fn, ud);
                count++;
                n = 0;
            }
            split = false;
        }
        if (split) {
            if (n > 0) {
                emit(tok, n, fn, ud);
                count++;
            }
            n = 0;
            continue;
        }
        if (n < sizeof tok)
            tok[n++] = (char)(is_upper(c) ? c + ('a' - 'A') : c);
    }
    return count;
}

/* ---- the term table ------------------------------------------------------ */

static long term_find(const th_sindex *x, const char *tok, size_t n,
                      uint32_t h)
{
    if (!x->n_slots)
        return -1;
    size_t mask = x->n_slots - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t v = x->slots[i];
        if (!v)
            return -1;
        const term *t = &x->terms[v - 1];
        if (t->hash == h && t->len == n &&
            memcmp(x->arena + t->off, tok, n) == 0)
            return (long)(v - 1);
    }
}

static int slots_grow(th_sindex *x)
{
    size_t ns = x->n_slots ? x->n_slots * 2 : 256;
    uint32_t *v = calloc(ns, sizeof *v);
    if (!v)
        return TH_ENOMEM;
    for (size_t t = 0; t < x->n_terms; t++) {
        size_t i = x->terms[t].hash & (ns - 1);
        while (v[i])
            i = (i + 1) & (ns - 1);
        v[i] = (uint32_t)t + 1;
    }
    free(x->slots);
    x->slots = v;
    x->n_slots = ns;
    return 0;
}

/* The id of a term, added when new; -1 when out of memory. */
static long term_intern(th_sindex *x, const char *tok, size_t n)
{
    uint32_t h = fnv1a(tok, n);
    long id = term_find(x, tok, n, h);
    if (id >= 0)
        return id;
    if ((x->n_terms + 1) * 2 > x->n_slots && slots_grow(x) != 0)
        return -1;
    if (x->n_terms == x->terms_cap) {
        size_t cap = x->terms_cap ? x->terms_cap * 2 : 256;
        term *v = realloc(x->terms, cap * sizeof *v);
        if (!v)
            return -1;
        x->terms = v;
        x->terms_cap = cap;
    }
    if (x->arena_len + n > x->arena_cap) {
        size_t cap = x->arena_cap ? x->arena_cap * 2 : 4096;
        while (cap < x->arena_len + n)
            cap *= 2;
        char *a = realloc(x->arena, cap);
        if (!a)
            return -1;
        x->arena = a;
        x->arena_cap = cap;
    }
    memcpy(x->arena + x->arena_len, tok, n);
    x->terms[x->n_terms] = (term){(uint32_t)x->arena_len, (uint32_t)n, h};
    x->arena_len += n;
    size_t mask = x->n_slots - 1, i = h & mask;
    while (x->slots[i])
        i = (i + 1) & mask;
    x->slots[i] = (uint32_t)x->n_terms + 1;
    return (long)x->n_terms++;
}

/* ---- building ------------------------------------------------------------ */

th_sindex *th_sindex_new(void)
{
    return calloc(1, sizeof(th_sindex));
}

static void add_token(void *ud, const char *tok, size_t n)
{
    th_sindex *x = ud;
    if (x->oom)
        return;
    long id = term_intern(x, tok, n);
    if (id < 0) {
        x->oom = true;
        return;
    }
    if (x->n_tmp == x->tmp_cap) {
        size_t cap = x->tmp_cap ? x->tmp_cap * 2 : 256;
        uint32_t *v = realloc(x->tmp, cap * sizeof *v);
        if (!v) {
            x->oom = true;
            return;
        }
        x->tmp = v;
        x->tmp_cap = cap;
    }
    x->tmp[x->n_tmp++] = (uint32_t)id;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int grow_u32(uint32_t **v, size_t cap)
{
    uint32_t *n = realloc(*v, cap * sizeof *n);
    if (!n)
        return TH_ENOMEM;
    *v = n;
    return 0;
}

int th_sindex_add(th_sindex *x, const char *name, const char *text,
                  size_t text_len)
{
    if (x->done)
        return TH_ESTATE;
    if (x->n_docs == x->docs_cap) {
        size_t cap = x->docs_cap ? x->docs_cap * 2 : 64;
        char **nv = realloc(x->names, cap * sizeof *nv);
        if (!nv)
            return TH_ENOMEM;
        x->names = nv;
        if (grow_u32(&x->dl, cap) != 0)
            return TH_ENOMEM;
        x->docs_cap = cap;
    }
    char *nm = strdup(name);
    if (!nm)
        return TH_ENOMEM;
    x->n_tmp = 0;
    x->oom = false;
    th_sindex_tokens(name, strlen(name), true, add_token, x);
    if (text)
        th_sindex_tokens(text, text_len, false, add_token, x);
    if (x->oom) {
        free(nm);
        return TH_ENOMEM;
    }
    qsort(x->tmp, x->n_tmp, sizeof *x->tmp, cmp_u32);
    size_t distinct = 0;
    for (size_t i = 0; i < x->n_tmp; i++)
        distinct += i == 0 || x->tmp[i] != x->tmp[i - 1];
    if (x->n_b + distinct > x->b_cap) {
        size_t cap = x->b_cap ? x->b_cap * 2 : 1024;
        while (cap < x->n_b + distinct)
            cap *= 2;
        if (grow_u32(&x->b_term, cap) || grow_u32(&x->b_doc, cap) ||
            grow_u32(&x->b_tf, cap)) {
            free(nm);
            return TH_ENOMEM;
        }
        x->b_cap = cap;
    }
    uint32_t doc = (uint32_t)x->n_docs;
    for (size_t i = 0; i < x->n_tmp;) {
        size_t j = i;
        while (j < x->n_tmp && x->tmp[j] == x->tmp[i])
            j++;
        x->b_term[x->n_b] = x->tmp[i];
        x->b_doc[x->n_b] = doc;
        x->b_tf[x->n_b] = (uint32_t)(j - i);
        x->n_b++;
        i = j;
    }
    x->names[x->n_docs] = nm;
    x->dl[x->n_docs] = (uint32_t)x->n_tmp;
    x->n_docs++;
    return 0;
}

typedef struct named {
    const char *name;
    uint32_t id;
} named;

static int cmp_name(const void *a, const void *b)
{
    const named *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->id < y->id ? -1 : x->id > y->id);
}

int th_sindex_finish(th_sindex *x)
{
    if (x->done)
        return 0;
    size_t nt = x->n_terms, nd = x->n_docs;
    x->off = calloc(nt + 1, sizeof *x->off);
    x->p_doc = malloc((x->n_b ? x->n_b : 1) * sizeof *x->p_doc);
    x->p_tf = malloc((x->n_b ? x->n_b : 1) * sizeof *x->p_tf);
    x->idf = malloc((nt ? nt : 1) * sizeof *x->idf);
    x->norm = malloc((nd ? nd : 1) * sizeof *x->norm);
    x->by_name = malloc((nd ? nd : 1) * sizeof *x->by_name);
    if (!x->off || !x->p_doc || !x->p_tf || !x->idf || !x->norm ||
        !x->by_name)
        return TH_ENOMEM;
    /* counting sort by term: document order is kept within a term */
    for (size_t i = 0; i < x->n_b; i++)
        x->off[x->b_term[i] + 1]++;
    for (size_t t = 0; t < nt; t++)
        x->off[t + 1] += x->off[t];
    uint32_t *at = malloc((nt ? nt : 1) * sizeof *at);
    if (!at)
        return TH_ENOMEM;
    memcpy(at, x->off, nt * sizeof *at);
    for (size_t i = 0; i < x->n_b; i++) {
        uint32_t p = at[x->b_term[i]]++;
        x->p_doc[p] = x->b_doc[i];
        x->p_tf[p] = x->b_tf[i];
    }
    free(at);
    for (size_t t = 0; t < nt; t++) {
        double df = (double)(x->off[t + 1] - x->off[t]);
        x->idf[t] = log(1.0 + ((double)nd - df + 0.5) / (df + 0.5));
    }
    double total = 0;
    for (size_t d = 0; d < nd; d++)
        total += x->dl[d];
    double avgdl = nd && total > 0 ? total / (double)nd : 1.0;
    for (size_t d = 0; d < nd; d++)
        x->norm[d] = TH_SINDEX_K1 * (1.0 - TH_SINDEX_B +
                                     TH_SINDEX_B * (double)x->dl[d] / avgdl);
    named *nm = malloc((nd ? nd : 1) * sizeof *nm);
    if (!nm)
        return TH_ENOMEM;
    for (size_t d = 0; d < nd; d++)
        nm[d] = (named){x->names[d], (uint32_t)d};
    qsort(nm, nd, sizeof *nm, cmp_name);
    for (size_t d = 0; d < nd; d++)
        x->by_name[d] = nm[d].id;
    free(nm);
    free(x->b_term);
    free(x->b_doc);
    free(x->b_tf);
    free(x->tmp);
    x->b_term = x->b_doc = x->b_tf = x->tmp = NULL;
    x->n_b = x->b_cap = x->n_tmp = x->tmp_cap = 0;
    x->done = true;
    return 0;
}

void th_sindex_free(th_sindex *x)
{
    if (!x)
        return;
    for (size_t d = 0; d < x->n_docs; d++)
        free(x->names[d]);
    free(x->names);
    free(x->dl);
    free(x->arena);
    free(x->terms);
    free(x->slots);
    free(x->b_term);
    free(x->b_doc);
    free(x->b_tf);
    free(x->tmp);
    free(x->off);
    free(x->p_doc);
    free(x->p_tf);
    free(x->idf);
    free(x->norm);
    free(x->by_name);
    free(x);
}

size_t th_sindex_count(const th_sindex *x)
{
    return x->n_docs;
}

size_t th_sindex_terms(const th_sindex *x)
{
    return x->n_terms;
}

const char *th_sindex_name(const th_sindex *x, size_t id)
{
    return id < x->n_docs ? x->names[id] : NULL;
}

long th_sindex_find(const th_sindex *x, const char *name)
{
    if (!x->done)
        return -1;
    size_t lo = 0, hi = x->n_docs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(x->names[x->by_name[mid]], name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < x->n_docs && strcmp(x->names[x->by_name[lo]], name) == 0)
        return (long)x->by_name[lo];
    return -1;
}

/* ---- searching ----------------------------------------------------------- */

typedef struct qterms {
    const th_sindex *x;
    uint32_t id[TH_SINDEX_QUERY_TERMS];
    size_t n;
} qterms;

static void query_token(void *ud, const char *tok, size_t n)
{
    qterms *q = ud;
    if (q->n == TH_SINDEX_QUERY_TERMS)
        return;
    long id = term_find(q->x, tok, n, fnv1a(tok, n));
    if (id < 0)
        return;
    for (size_t i = 0; i < q->n; i++)
        if (q->id[i] == (uint32_t)id)
            return; /* a repeated term counts once */
    q->id[q->n++] = (uint32_t)id;
}

/* Whether a ranks before b: the higher score, then the lower id. */
static bool before(const double *s, uint32_t a, uint32_t b)
{
    return s[a] > s[b] || (s[a] == s[b] && a < b);
}

static void sift_down(uint32_t *h, size_t n, size_t i, const double *s)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && before(s, h[l], h[m]))
            m = l;
        if (r < n && before(s, h[r], h[m]))
            m = r;
        if (m == i)
            return;
        uint32_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

int th_sindex_search(const th_sindex *x, const char *query, size_t len,
                     size_t k, th_sindex_filter_fn filter, void *ud,
                     th_sindex_hit *hits, size_t *n)
{
    *n = 0;
    if (!x->done)
        return TH_ESTATE;
    qterms q = {.x = x, .n = 0};
    /* the words as written, and their camelCase parts (a model may type a
     * tool's name: "listPullRequests") */
    th_sindex_tokens(query, len, false, query_token, &q);
    th_sindex_tokens(query, len, true, query_token, &q);
    if (q.n == 0 || k == 0 || x->n_docs == 0)
        return 0;
    double *score = calloc(x->n_docs, sizeof *score);
    uint32_t *cand = malloc(x->n_docs * sizeof *cand);
    if (!score || !cand) {
        free(score);
        free(cand);
        return TH_ENOMEM;
    }
    size_t nc = 0;
    for (size_t i = 0; i < q.n; i++) {
        uint32_t t = q.id[i];
        double idf = x->idf[t];
        for (uint32_t p = x->off[t]; p < x->off[t + 1]; p++) {
            uint32_t d = x->p_doc[p];
            double tf = (double)x->p_tf[p];
            if (score[d] == 0)
                cand[nc++] = d; /* idf > 0: a posting always scores */
            score[d] += idf * tf * (TH_SINDEX_K1 + 1.0) / (tf + x->norm[d]);
        }
    }
    /* a heap of the candidates, popped best first until k pass */
    for (size_t i = nc / 2; i-- > 0;)
        sift_down(cand, nc, i, score);
    while (nc > 0 && *n < k) {
        uint32_t d = cand[0];
        cand[0] = cand[--nc];
        sift_down(cand, nc, 0, score);
        if (filter && !filter(ud, d))
            continue;
        hits[*n].doc = d;
        hits[*n].score = score[d];
        (*n)++;
    }
    free(score);
    free(cand);
    return 0;
}
