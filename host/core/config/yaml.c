/* yaml.c - YAML text to a tree of th_ynode with 1-based marks (libyaml
 * event API), lookups, and packing a node as msgpack (YAML 1.2 core schema).
 *
 * Threads: every function here works on the caller's data only; a finished
 * tree is read-only and may be read from any thread.
 */
#include "th/config.h"

#include <errno.h>
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

void th_ylimits_defaults(th_ylimits *l)
{
    memset(l, 0, sizeof *l);
    l->max_bytes = TH_YAML_MAX_BYTES;
    l->max_scalar = TH_YAML_MAX_SCALAR;
    l->max_large_scalar = TH_YAML_MAX_LARGE_SCALAR;
    l->max_nodes = TH_YAML_MAX_NODES;
    l->max_depth = TH_YAML_MAX_DEPTH;
}

/* ---- a set of strings: open addressing, linear probing ----------------- */

struct th_strset_slot {
    const char *str; /* NULL: empty */
    size_t len, idx;
    uint64_t hash;
};

/* FNV-1a from a start that differs between processes (the addresses of
 * a function and of the set move with ASLR), then mixed, so that the slots
 * of given keys cannot be worked out ahead to make probing quadratic. */
static uint64_t str_hash(const th_strset *set, const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull ^
                 ((uint64_t)(uintptr_t)&str_hash * 0x9E3779B97F4A7C15ull) ^
                 (uint64_t)(uintptr_t)set;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

void th_strset_init(th_strset *s, size_t *probes)
{
    s->slots = NULL;
    s->cap = s->n = 0;
    s->probes = probes;
}

void th_strset_destroy(th_strset *s)
{
    free(s->slots);
    s->slots = NULL;
    s->cap = s->n = 0;
}

static struct th_strset_slot *strset_find(th_strset *s, const char *str,
                                          size_t len, uint64_t h)
{
    size_t mask = s->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        struct th_strset_slot *sl = &s->slots[i];
        if (s->probes)
            (*s->probes)++;
        if (!sl->str || (sl->hash == h && sl->len == len &&
                         memcmp(sl->str, str, len) == 0))
            return sl;
    }
}

int th_strset_add(th_strset *s, const char *str, size_t len, size_t idx,
                  size_t *first)
{
    if ((s->n + 1) * 4 > s->cap * 3) { /* keep it at most 3/4 full */
        size_t nc = s->cap ? s->cap * 2 : 16;
        struct th_strset_slot *old = s->slots;
        size_t oc = s->cap;
        s->slots = calloc(nc, sizeof *s->slots);
        if (!s->slots) {
            s->slots = old;
            return TH_ENOMEM;
        }
        s->cap = nc;
        for (size_t i = 0; i < oc; i++)
            if (old[i].str)
                *strset_find(s, old[i].str, old[i].len, old[i].hash) = old[i];
        free(old);
    }
    uint64_t h = str_hash(s, str, len);
    struct th_strset_slot *sl = strset_find(s, str, len, h);
    if (sl->str) {
        if (first)
            *first = sl->idx;
        return 1;
    }
    *sl = (struct th_strset_slot){.str = str, .len = len, .idx = idx,
                                  .hash = h};
    s->n++;
    return 0;
}

/* ---- the tree ----------------------------------------------------------- */

void th_ynode_free(th_ynode *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n; i++)
        th_ynode_free(n->kids[i]);
    free(n->kids);
    free(n->str);
    free(n);
}

static th_ynode *ynode_new(th_ynode_kind kind, yaml_mark_t m)
{
    th_ynode *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->kind = kind;
    n->line = (int)m.line + 1;
    n->col = (int)m.column + 1;
    return n;
}

static int ynode_push(th_ynode *parent, th_ynode *kid, size_t *cap)
{
    if (parent->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 4;
        th_ynode **k = realloc(parent->kids, nc * sizeof *k);
        if (!k)
            return TH_ENOMEM;
        parent->kids = k;
        *cap = nc;
    }
    parent->kids[parent->n++] = kid;
    return 0;
}

static int yerr(th_error *err, const char *name, int line, int col,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int yerr(th_error *err, const char *name, int line, int col,
                const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    th_error_setv(err, TH_ECONFIG, fmt, ap);
    va_end(ap);
    th_error_prefix(err, "%s:%d:%d: ", name, line, col);
    return TH_ECONFIG;
}

typedef struct yparse {
    yaml_parser_t parser;
    const char *name;
    const char *text;
    size_t len;
    th_error *err;
    const th_ylimits *lim;
    th_ystats *stats;
} yparse;

static bool large_key(const yparse *p, const th_ynode *key)
{
    if (!key || key->kind != TH_Y_SCALAR || !p->lim->large_keys)
        return false;
    for (const char *const *k = p->lim->large_keys; *k; k++)
        if (strcmp(*k, key->str) == 0)
            return true;
    return false;
}

static void fmt_bytes(size_t n, char *buf, size_t size)
{
    if (n >= 1024 * 1024 && n % (1024 * 1024) == 0)
        snprintf(buf, size, "%zuMiB", n / (1024 * 1024));
    else if (n >= 1024 && n % 1024 == 0)
        snprintf(buf, size, "%zuKiB", n / 1024);
    else
        snprintf(buf, size, "%zu bytes", n);
}

/* 1-based line and column (in characters) of byte `off` of the text. */
static void offset_mark(const yparse *p, size_t off, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off && i < p->len; i++) {
        unsigned char ch = (unsigned char)p->text[i];
        if (ch == '\n') {
            (*line)++;
            *col = 1;
        } else if ((ch & 0xc0) != 0x80) {
            (*col)++;
        }
    }
}

/* The first tab in the indentation of a line (before its first other
 * character) on a line up to `upto`: libyaml's message for one ("found
 * character that cannot start any token", often lines later) hides it. */
static bool indent_tab(const yparse *p, int upto, int *line, int *col)
{
    int l = 1, c = 1, tab = 0; /* tab: the column of one in the indent */
    bool lead = true;
    for (size_t i = 0; i < p->len && l <= upto; i++) {
        unsigned char ch = (unsigned char)p->text[i];
        if (ch == '\n' || ch == '\r') {
            l += ch == '\n';
            c = 1;
            tab = 0;
            lead = true;
            continue;
        }
        if (lead && ch == '\t' && !tab)
            tab = c;
        if (lead && ch != ' ' && ch != '\t') {
            lead = false;
            if (tab) { /* the line has more than blanks */
                *line = l;
                *col = tab;
                return true;
            }
        }
        if ((ch & 0xc0) != 0x80)
            c++;
    }
    return false;
}

static int ynext(yparse *p, yaml_event_t *ev)
{
    if (yaml_parser_parse(&p->parser, ev))
        return 0;
    yaml_parser_t *ps = &p->parser;
    if (ps->error == YAML_MEMORY_ERROR)
        return th_error_set(p->err, TH_ENOMEM, "%s: out of memory", p->name);
    const char *problem = ps->problem ? ps->problem : "invalid YAML";
    if (ps->error == YAML_READER_ERROR) {
        /* Bad bytes: libyaml gives an offset, not a mark. */
        int line, col;
        offset_mark(p, ps->problem_offset, &line, &col);
        if (ps->problem_value >= 0)
            return yerr(p->err, p->name, line, col,
                        "YAML syntax error: %s (byte 0x%02x)", problem,
                        (unsigned)ps->problem_value & 0xffu);
        return yerr(p->err, p->name, line, col, "YAML syntax error: %s",
                    problem);
    }
    yaml_mark_t m = ps->problem_mark;
    int tl, tc;
    if (strstr(problem, "tab character")) { /* "found a tab character
                                                  that violates indentation" */
        tl = (int)m.line + 1;
        tc = (int)m.column + 1;
    }
    if (strstr(problem, "tab character") ||
        indent_tab(p, (int)m.line + 1, &tl, &tc))
        return yerr(p->err, p->name, tl, tc,
                    "tab characters are not allowed for indentation in YAML "
                    "(indent with spaces)");
    if (ps->context)
        return yerr(p->err, p->name, (int)m.line + 1, (int)m.column + 1,
                    "YAML syntax error: %s %s (line %d, column %d)", problem,
                    ps->context, (int)ps->context_mark.line + 1,
                    (int)ps->context_mark.column + 1);
    return yerr(p->err, p->name, (int)m.line + 1, (int)m.column + 1,
                "YAML syntax error: %s", problem);
}

/* Builds the node that starts with `ev` (consumed); *out owned by caller.
 * `key` is the key whose value this node is, or NULL. */
static int ybuild(yparse *p, yaml_event_t *ev, int depth, const th_ynode *key,
                  th_ynode **out)
{
    *out = NULL;
    int rc = 0;
    th_ynode *n = NULL;
    th_strset keys; /* of a map: its scalar keys */
    th_strset_init(&keys, &p->stats->key_probes);
    if (ev->type != YAML_ALIAS_EVENT && ++p->stats->nodes > p->lim->max_nodes) {
        rc = yerr(p->err, p->name, (int)ev->start_mark.line + 1,
                  (int)ev->start_mark.column + 1,
                  "more than %zu YAML nodes (keys, values and list items); "
                  "a toolhost config is far smaller",
                  p->lim->max_nodes);
        yaml_event_delete(ev);
        return rc;
    }
    switch (ev->type) {
    case YAML_ALIAS_EVENT:
        rc = yerr(p->err, p->name, (int)ev->start_mark.line + 1,
                  (int)ev->start_mark.column + 1,
                  "YAML aliases (*%s) are not supported in toolhost configs",
                  (const char *)ev->data.alias.anchor);
        yaml_event_delete(ev);
        return rc;
    case YAML_SCALAR_EVENT: {
        bool large = large_key(p, key);
        size_t max = large ? p->lim->max_large_scalar : p->lim->max_scalar;
        if (ev->data.scalar.length > max) {
            char lim[32];
            fmt_bytes(max, lim, sizeof lim);
            rc = yerr(p->err, p->name, (int)ev->start_mark.line + 1,
                      (int)ev->start_mark.column + 1,
                      "a scalar of %zu bytes is longer than the limit of "
                      "%s%s%s%s",
                      ev->data.scalar.length, lim,
                      large ? " for '" : "", large ? key->str : "",
                      large ? "'" : "");
            yaml_event_delete(ev);
            return rc;
        }
        n = ynode_new(TH_Y_SCALAR, ev->start_mark);
        if (!n)
            goto nomem;
        n->len = ev->data.scalar.length;
        n->str = malloc(n->len + 1);
        if (!n->str)
            goto nomem;
        memcpy(n->str, ev->data.scalar.value, n->len);
        n->str[n->len] = '\0';
        n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        n->end_line = (int)ev->end_mark.line + 1;
        n->end_col = (int)ev->end_mark.column + 1;
        const char *tag = (const char *)ev->data.scalar.tag;
        if (tag && (strcmp(tag, "tag:yaml.org,2002:str") == 0 ||
                    strcmp(tag, "!") == 0))
            n->plain = false;
        yaml_event_delete(ev);
        *out = n;
        return 0;
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        bool is_map = ev->type == YAML_MAPPING_START_EVENT;
        n = ynode_new(is_map ? TH_Y_MAP : TH_Y_SEQ, ev->start_mark);
        yaml_event_delete(ev);
        if (!n)
            return th_error_set(p->err, TH_ENOMEM, "%s: out of memory",
                                p->name);
        if (depth >= p->lim->max_depth) {
            rc = yerr(p->err, p->name, n->line, n->col,
                      "nesting deeper than %d levels", p->lim->max_depth);
            th_ynode_free(n);
            return rc;
        }
        size_t cap = 0;
        for (;;) {
            yaml_event_t e;
            if ((rc = ynext(p, &e)) < 0)
                goto fail;
            if (e.type == YAML_SEQUENCE_END_EVENT ||
                e.type == YAML_MAPPING_END_EVENT) {
                n->end_line = (int)e.end_mark.line + 1;
                n->end_col = (int)e.end_mark.column + 1;
                yaml_event_delete(&e);
                break;
            }
            th_ynode *kid;
            const th_ynode *of = is_map && n->n % 2 == 1
                                     ? n->kids[n->n - 1] : NULL;
            if ((rc = ybuild(p, &e, depth + 1, of, &kid)) < 0)
                goto fail;
            if ((rc = ynode_push(n, kid, &cap)) < 0) {
                th_ynode_free(kid);
                goto nomem;
            }
            /* A duplicate key is an error at the second occurrence. */
            if (is_map && n->n % 2 == 1 && kid->kind == TH_Y_SCALAR) {
                size_t first = 0;
                rc = th_strset_add(&keys, kid->str, kid->len, n->n - 1,
                                   &first);
                if (rc < 0)
                    goto nomem;
                if (rc == 1) {
                    const th_ynode *k = n->kids[first];
                    rc = yerr(p->err, p->name, kid->line, kid->col,
                              "duplicate key '%s' (first at line %d, "
                              "column %d)",
                              kid->str, k->line, k->col);
                    goto fail;
                }
            }
        }
        th_strset_destroy(&keys);
        *out = n;
        return 0;
    }
    default:
        rc = yerr(p->err, p->name, (int)ev->start_mark.line + 1,
                  (int)ev->start_mark.column + 1, "unexpected YAML event");
        yaml_event_delete(ev);
        return rc;
    }
nomem:
    rc = th_error_set(p->err, TH_ENOMEM, "%s: out of memory", p->name);
fail:
    th_strset_destroy(&keys);
    th_ynode_free(n);
    return rc;
}

int th_ynode_parse(const char *name, const char *text, size_t len,
                   th_ynode **out, th_error *err)
{
    return th_ynode_parse_ex(name, text, len, NULL, NULL, out, err);
}

int th_ynode_parse_ex(const char *name, const char *text, size_t len,
                      const th_ylimits *lim, th_ystats *stats,
                      th_ynode **out, th_error *err)
{
    *out = NULL;
    th_ylimits dflt;
    th_ystats scratch = {0};
    if (!lim) {
        th_ylimits_defaults(&dflt);
        lim = &dflt;
    }
    yparse p = {.name = name ? name : "<config>", .text = text, .len = len,
                .err = err, .lim = lim, .stats = stats ? stats : &scratch};
    if (len > lim->max_bytes) {
        char a[32];
        fmt_bytes(lim->max_bytes, a, sizeof a);
        return th_error_set(err, TH_ECONFIG,
                            "%s: the config is %zu bytes, more than the "
                            "limit of %s",
                            p.name, len, a);
    }
    if (!yaml_parser_initialize(&p.parser))
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", p.name);
    yaml_parser_set_input_string(&p.parser, (const unsigned char *)text, len);
    th_ynode *root = NULL;
    int rc = 0, docs = 0;
    for (;;) {
        yaml_event_t ev;
        if ((rc = ynext(&p, &ev)) < 0)
            break;
        yaml_event_type_t t = ev.type;
        if (t == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        if (t == YAML_DOCUMENT_START_EVENT) {
            if (++docs > 1) {
                rc = yerr(err, p.name, (int)ev.start_mark.line + 1,
                          (int)ev.start_mark.column + 1,
                          "only one YAML document is allowed in a config");
                yaml_event_delete(&ev);
                break;
            }
            yaml_event_delete(&ev);
            continue;
        }
        if (t == YAML_STREAM_START_EVENT || t == YAML_DOCUMENT_END_EVENT) {
            yaml_event_delete(&ev);
            continue;
        }
        if ((rc = ybuild(&p, &ev, 0, NULL, &root)) < 0)
            break;
    }
    yaml_parser_delete(&p.parser);
    if (rc < 0) {
        th_ynode_free(root);
        return rc;
    }
    *out = root;
    return 0;
}

const th_ynode *th_ynode_get(const th_ynode *map, const char *key)
{
    if (!map || map->kind != TH_Y_MAP || !key)
        return NULL;
    for (size_t i = 0; i + 1 < map->n; i += 2) {
        const th_ynode *k = map->kids[i];
        if (k->kind == TH_Y_SCALAR && strcmp(k->str, key) == 0)
            return map->kids[i + 1];
    }
    return NULL;
}

const th_ynode *th_ynode_get_key(const th_ynode *map, const char *key)
{
    if (!map || map->kind != TH_Y_MAP || !key)
        return NULL;
    for (size_t i = 0; i + 1 < map->n; i += 2) {
        const th_ynode *k = map->kids[i];
        if (k->kind == TH_Y_SCALAR && strcmp(k->str, key) == 0)
            return k;
    }
    return NULL;
}

bool th_ynode_equal(const th_ynode *a, const th_ynode *b)
{
    if (!a || !b)
        return a == b;
    if (a->kind != b->kind || a->n != b->n)
        return false;
    if (a->kind == TH_Y_SCALAR)
        return a->plain == b->plain && a->len == b->len &&
               memcmp(a->str, b->str, a->len) == 0;
    for (size_t i = 0; i < a->n; i++)
        if (!th_ynode_equal(a->kids[i], b->kids[i]))
            return false;
    return true;
}

/* ---- typing of plain scalars (YAML 1.2 core schema) -------------------- */

bool th_ynode_is_null(const th_ynode *n)
{
    if (!n)
        return true;
    if (n->kind != TH_Y_SCALAR || !n->plain)
        return false;
    return n->len == 0 || strcmp(n->str, "~") == 0 ||
           strcmp(n->str, "null") == 0 || strcmp(n->str, "Null") == 0 ||
           strcmp(n->str, "NULL") == 0;
}

int th_ynode_bool(const th_ynode *n)
{
    if (!n || n->kind != TH_Y_SCALAR || !n->plain)
        return -1;
    const char *s = n->str;
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE"))
        return 1;
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE"))
        return 0;
    return -1;
}

/* 1: fits in int64 (*neg set when negative, value in *i / *u); 2: an
 * integer too large for 64 bits; 0: not an integer. */
static int scalar_int(const char *s, int64_t *i, uint64_t *u, bool *neg)
{
    const char *p = s;
    *neg = false;
    int base = 10;
    if (*p == '-' || *p == '+') {
        *neg = *p == '-';
        p++;
    }
    if (p[0] == '0' && p[1] == 'o' && p == s) {
        base = 8;
        p += 2;
    } else if (p[0] == '0' && p[1] == 'x' && p == s) {
        base = 16;
        p += 2;
    }
    if (!*p)
        return 0;
    for (const char *q = p; *q; q++) {
        int ok = base == 16   ? (*q >= '0' && *q <= '9') ||
                                  (*q >= 'a' && *q <= 'f') ||
                                  (*q >= 'A' && *q <= 'F')
                 : base == 8 ? *q >= '0' && *q <= '7'
                             : *q >= '0' && *q <= '9';
        if (!ok)
            return 0;
    }
    errno = 0;
    unsigned long long v = strtoull(p, NULL, base);
    if (errno == ERANGE)
        return 2;
    if (*neg) {
        if (v > (unsigned long long)INT64_MAX + 1)
            return 2;
        *i = v == (unsigned long long)INT64_MAX + 1 ? INT64_MIN
                                                     : -(int64_t)v;
    } else {
        *u = v;
    }
    return 1;
}

static bool scalar_float(const char *s, double *d)
{
    const char *p = s;
    if (*p == '-' || *p == '+')
        p++;
    if (!strcmp(p, ".inf") || !strcmp(p, ".Inf") || !strcmp(p, ".INF")) {
        *d = s[0] == '-' ? -INFINITY : INFINITY;
        return true;
    }
    if (p == s &&
        (!strcmp(p, ".nan") || !strcmp(p, ".NaN") || !strcmp(p, ".NAN"))) {
        *d = NAN;
        return true;
    }
    /* [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )? */
    size_t digits = 0;
    while (*p >= '0' && *p <= '9') {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            p++;
            digits++;
        }
    }
    if (!digits)
        return false;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '-' || *p == '+')
            p++;
        if (!(*p >= '0' && *p <= '9'))
            return false;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p)
        return false;
    *d = strtod(s, NULL);
    return true;
}

int th_ynode_pack(const th_ynode *n, struct msgpack_packer *pk)
{
    if (!n || !pk)
        return TH_EINVAL;
    int rc = 0;
    switch (n->kind) {
    case TH_Y_SCALAR: {
        if (!n->plain)
            return msgpack_pack_str_with_body(pk, n->str, n->len) ? TH_ENOMEM
                                                                  : 0;
        if (th_ynode_is_null(n))
            return msgpack_pack_nil(pk) ? TH_ENOMEM : 0;
        int b = th_ynode_bool(n);
        if (b == 1)
            return msgpack_pack_true(pk) ? TH_ENOMEM : 0;
        if (b == 0)
            return msgpack_pack_false(pk) ? TH_ENOMEM : 0;
        int64_t i;
        uint64_t u;
        bool neg;
        double d;
        int k = scalar_int(n->str, &i, &u, &neg);
        if (k == 1)
            rc = neg ? msgpack_pack_int64(pk, i) : msgpack_pack_uint64(pk, u);
        else if (k == 2 || scalar_float(n->str, &d))
            rc = msgpack_pack_double(pk, k == 2 ? strtod(n->str, NULL) : d);
        else
            rc = msgpack_pack_str_with_body(pk, n->str, n->len);
        return rc ? TH_ENOMEM : 0;
    }
    case TH_Y_SEQ:
        if (msgpack_pack_array(pk, n->n))
            return TH_ENOMEM;
        for (size_t i = 0; i < n->n; i++)
            if ((rc = th_ynode_pack(n->kids[i], pk)) < 0)
                return rc;
        return 0;
    case TH_Y_MAP:
        if (msgpack_pack_map(pk, n->n / 2))
            return TH_ENOMEM;
        for (size_t i = 0; i < n->n; i++)
            if ((rc = th_ynode_pack(n->kids[i], pk)) < 0)
                return rc;
        return 0;
    }
    return TH_EINVAL;
}
