/* config.c - the YAML config: a table of keys per section, mapped onto the
 * structs of th/config.h with offsetof and shared setters.
 *
 * Threads: th_config_load/parse build a new th_config on the caller's
 * thread; the result is never changed again, so any thread may read it.
 * Environment variables are read (getenv) while loading.
 */
#include "th/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "th/buf.h"
#include "th/section.h"
#include <nettle/base16.h>
#include <nettle/sha2.h>
#include "toolhost/plugin.h"

_Static_assert(sizeof(th_dup_policy) == sizeof(int), "enum size");
_Static_assert(sizeof(th_dup_scope) == sizeof(int), "enum size");
_Static_assert(sizeof(th_task_scope) == sizeof(int), "enum size");
_Static_assert(sizeof(th_perm_action) == sizeof(int), "enum size");
_Static_assert(sizeof(th_reload_mode) == sizeof(int), "enum size");
_Static_assert(sizeof(th_log_format) == sizeof(int), "enum size");

#define KIB 1024ull
#define MIB (1024ull * 1024)
#define GIB (1024ull * 1024 * 1024)
#define SEC 1000ull
#define MINUTE (60 * SEC)
#define HOUR (60 * MINUTE)
#define DAY (24 * HOUR)

/* ---- value forms ------------------------------------------------------- */

/* Reads "123" or "1.5" at *p: integer part and up to 18 fraction digits
 * as frac / 10^fdig.  0 or -1 (no digits, overflow). */
static int read_decimal(const char **p, uint64_t *ip, uint64_t *frac,
                        unsigned *fdig)
{
    const char *s = *p;
    uint64_t v = 0;
    size_t nd = 0;
    while (*s >= '0' && *s <= '9') {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
        s++;
        nd++;
    }
    *frac = 0;
    *fdig = 0;
    if (*s == '.') {
        s++;
        size_t nf = 0;
        while (*s >= '0' && *s <= '9') {
            if (*fdig < 18) {
                *frac = *frac * 10 + (uint64_t)(*s - '0');
                (*fdig)++;
            }
            s++;
            nf++;
        }
        if (!nf)
            return -1;
    }
    if (!nd && !*fdig)
        return -1;
    *ip = v;
    *p = s;
    return 0;
}

static uint64_t pow10u(unsigned n)
{
    uint64_t r = 1;
    while (n--)
        r *= 10;
    return r;
}

/* v * mult + frac / 10^fdig * mult, rounded down; -1 on overflow. */
static int scale(uint64_t v, uint64_t frac, unsigned fdig, uint64_t mult,
                 uint64_t *out)
{
    unsigned __int128 r = (unsigned __int128)v * mult;
    r += (unsigned __int128)frac * mult / pow10u(fdig);
    if (r > UINT64_MAX)
        return -1;
    *out = (uint64_t)r;
    return 0;
}

int th_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *unit;
        uint64_t mult;
    } units[] = {{"", 1},           {"B", 1},
                 {"KiB", KIB},      {"MiB", MIB},
                 {"GiB", GIB},      {"TiB", GIB * KIB},
                 {"kB", 1000},      {"KB", 1000},
                 {"MB", 1000000},   {"GB", 1000000000ull},
                 {"TB", 1000000000000ull}};
    if (!s || !out)
        return TH_EINVAL;
    const char *p = s;
    uint64_t v, frac;
    unsigned fdig;
    if (read_decimal(&p, &v, &frac, &fdig) < 0)
        return TH_EINVAL;
    if (*p == ' ')
        p++;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(p, units[i].unit) != 0)
            continue;
        if (units[i].mult == 1 && frac)
            return TH_EINVAL; /* no fractions of a byte */
        if (p > s && p[-1] == ' ' && !*p)
            return TH_EINVAL; /* a trailing space */
        return scale(v, frac, fdig, units[i].mult, out) < 0 ? TH_EINVAL : 0;
    }
    return TH_EINVAL;
}

int th_parse_duration_ms(const char *s, uint64_t *out)
{
    if (!s || !out || !*s)
        return TH_EINVAL;
    if (strcmp(s, "0") == 0) {
        *out = 0;
        return 0;
    }
    const char *p = s;
    uint64_t total = 0;
    while (*p) {
        uint64_t v, frac, part;
        unsigned fdig;
        if (read_decimal(&p, &v, &frac, &fdig) < 0)
            return TH_EINVAL;
        uint64_t mult;
        if (p[0] == 'm' && p[1] == 's') {
            mult = 1;
            p += 2;
        } else if (p[0] == 's') {
            mult = SEC;
            p++;
        } else if (p[0] == 'm') {
            mult = MINUTE;
            p++;
        } else if (p[0] == 'h') {
            mult = HOUR;
            p++;
        } else if (p[0] == 'd') {
            mult = DAY;
            p++;
        } else {
            return TH_EINVAL; /* a number without its unit */
        }
        if (scale(v, frac, fdig, mult, &part) < 0 || total + part < total)
            return TH_EINVAL;
        total += part;
    }
    *out = total;
    return 0;
}

/* ---- semantic types and limits ----------------------------------------- */

static const char *const sem_names[TH_SEM_COUNT] = {
    NULL,         "text",     "status",         "error",
    "file_content", "file_view", "command_output", "search_results",
    "knowledge",  "structured", "log",          "diff",
    "binary"};

const char *th_sem_name(uint32_t sem)
{
    return sem > 0 && sem < TH_SEM_COUNT ? sem_names[sem] : "unknown";
}

uint32_t th_sem_from_name(const char *name)
{
    if (!name)
        return 0;
    for (uint32_t i = 1; i < TH_SEM_COUNT; i++)
        if (strcmp(name, sem_names[i]) == 0)
            return i;
    return 0;
}

void th_limits_defaults(th_limits *l)
{
    l->bytes[0] = 8000; /* an unknown type is limited like text */
    l->bytes[TOOLHOST_SEM_TEXT] = 8000;
    l->bytes[TOOLHOST_SEM_STATUS] = 2000;
    l->bytes[TOOLHOST_SEM_ERROR] = 8000;
    l->bytes[TOOLHOST_SEM_FILE_CONTENT] = 60000;
    l->bytes[TOOLHOST_SEM_FILE_VIEW] = 60000;
    l->bytes[TOOLHOST_SEM_COMMAND_OUTPUT] = 8000;
    l->bytes[TOOLHOST_SEM_SEARCH_RESULTS] = 8000;
    l->bytes[TOOLHOST_SEM_KNOWLEDGE] = 60000;
    l->bytes[TOOLHOST_SEM_STRUCTURED] = 60000;
    l->bytes[TOOLHOST_SEM_LOG] = 8000;
    l->bytes[TOOLHOST_SEM_DIFF] = 8000;
    l->bytes[TOOLHOST_SEM_BINARY] = MIB;
}

/* ---- loading context and errors ---------------------------------------- */

struct th_cfctx {
    const char *file; /* names the file in messages */
    const char *dir;  /* absolute folder for relative paths */
    th_config *cfg;
    th_error *err;
    th_ystats *stats;  /* key_probes counts the duplicate checks here too */
    th_strset plugin_names, toolset_names, mock_tools; /* indexes into the
                                                         lists of cfg */
    /* Every mistake, not the first alone (th_config_load_report): each
     * goes to report(), the first is kept for *err, and the walk goes on
     * with the next key, list item or section, up to TH_CONFIG_MAX_ERRORS.
     * NULL report: the first error ends the walk. */
    th_config_report_fn report;
    void *report_ud;
    unsigned n_errs;
    bool capped;
    th_error first;
    /* the sections of th/section.h, for th_cf_config */
};

/* Returned up the walk once an error went to report(): the callers go on
 * (cf_more) without reporting it again. */
#define CF_REPORTED (-100000)

/* After a key, list item or section failed with rc: true when the walk
 * goes on with the next one (the error reported), false when rc ends it. */
static bool cf_more(th_cfctx *c, int rc)
{
    if (rc == CF_REPORTED)
        return !c->capped;
    if (rc != TH_ECONFIG || !c->report || c->capped)
        return false;
    if (c->n_errs++ == 0)
        c->first = *c->err;
    c->report(c->report_ud, c->err);
    if (c->n_errs >= TH_CONFIG_MAX_ERRORS) {
        c->capped = true;
        return false;
    }
    th_error_clear(c->err);
    return true;
}

/* A name seen before in `set` (at index *first), 0 when new, TH_ENOMEM. */
static int cf_seen(th_cfctx *c, th_strset *set, const char *name, size_t idx,
                   size_t *first)
{
    int rc = th_strset_add(set, name, strlen(name), idx, first);
    return rc < 0 ? th_error_set(c->err, TH_ENOMEM, "%s: out of memory",
                                 c->file)
                  : rc;
}

int th_cf_err(th_cfctx *c, const th_ynode *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    th_error_setv(c->err, TH_ECONFIG, fmt, ap);
    va_end(ap);
    th_error_prefix(c->err, "%s:%d:%d: ", c->file, at ? at->line : 1,
                    at ? at->col : 1);
    return TH_ECONFIG;
}

int th_cf_nomem(th_cfctx *c)
{
    return th_error_set(c->err, TH_ENOMEM, "%s: out of memory", c->file);
}

/* "'abc'", "a list", "a map" - for "got ..." in messages. */
static const char *describe(const th_ynode *v, char *buf, size_t size)
{
    if (!v || th_ynode_is_null(v))
        return "nothing";
    if (v->kind == TH_Y_SEQ)
        return "a list";
    if (v->kind == TH_Y_MAP)
        return "a map";
    if (v->len > 40)
        snprintf(buf, size, "'%.37s...'", v->str);
    else
        snprintf(buf, size, "'%s'", v->str);
    return buf;
}

/* Optimal-string-alignment distance (Levenshtein plus transpositions),
 * ASCII case folded; capped at 99 for long words. */
static unsigned edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    unsigned d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (unsigned)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (unsigned)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            unsigned cost = tolower((unsigned char)a[i - 1]) !=
                            tolower((unsigned char)b[j - 1]);
            unsigned m = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < m)
                m = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < m)
                m = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
                a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < m)
                m = d[i - 2][j - 2] + 1;
            d[i][j] = m;
        }
    return d[la][lb];
}

/* The candidate closest to `word`, if close enough to be a likely typo. */
static const char *closest(const char *word, const char *const *cands,
                           size_t n)
{
    size_t len = strlen(word);
    unsigned limit = len <= 4 ? 1 : len <= 12 ? 2 : 3;
    const char *best = NULL;
    unsigned bestd = limit + 1;
    for (size_t i = 0; i < n; i++) {
        if (!cands[i])
            continue;
        unsigned d = edit_distance(word, cands[i]);
        if (d < bestd) {
            bestd = d;
            best = cands[i];
        }
    }
    return best;
}

/* ---- the key table ------------------------------------------------------ */


static int apply_map(th_cfctx *c, th_ynode *node, const th_cfkey *table,
                     void *base, const char *what);

static int want_scalar(th_cfctx *c, const th_cfkey *k, const th_ynode *v,
                       const char *kind)
{
    if (v->kind == TH_Y_SCALAR)
        return 0;
    char b[64];
    return th_cf_err(c, v, "'%s' must be %s, got %s", k->name, kind,
                  describe(v, b, sizeof b));
}

char *th_cf_resolve_path(th_cfctx *c, const char *s)
{
    if (s[0] == '/')
        return strdup(s);
    while (s[0] == '.' && s[1] == '/') {
        s += 2;
        while (*s == '/')
            s++;
    }
    th_buf b = TH_BUF_INIT;
    if (th_buf_printf(&b, "%s%s%s", c->dir,
                      c->dir[strlen(c->dir) - 1] == '/' ? "" : "/", s) < 0) {
        th_buf_destroy(&b);
        return NULL;
    }
    if (b.len > 1 && b.data[b.len - 1] == '/' && !*s)
        b.data[--b.len] = '\0';
    return (char *)th_buf_take(&b, NULL);
}

int th_cf_str(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    char **f = (char **)((char *)base + k->off);
    if (th_ynode_is_null(v))
        return 0;
    int rc = want_scalar(c, k, v, "a string");
    if (rc < 0)
        return rc;
    if ((k->flags & TH_CF_PATH) && v->len == 0)
        return th_cf_err(c, v, "'%s' must not be empty", k->name);
    free(*f);
    *f = (k->flags & TH_CF_PATH) ? th_cf_resolve_path(c, v->str) : strdup(v->str);
    return *f ? 0 : th_cf_nomem(c);
}

int th_cf_bool(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    int b = th_ynode_bool(v);
    if (b < 0) {
        char d[64];
        return th_cf_err(c, v, "'%s' must be true or false, got %s", k->name,
                      v->kind == TH_Y_SCALAR && !v->plain
                          ? "a quoted string"
                          : describe(v, d, sizeof d));
    }
    *(bool *)((char *)base + k->off) = (b == 1) != !!(k->flags & TH_CF_NOT);
    return 0;
}

static int parse_uint(const th_ynode *v, int base, uint64_t *out)
{
    if (v->kind != TH_Y_SCALAR || v->len == 0)
        return -1;
    const char *s = v->str;
    if (base == 8 && s[0] == '0' && s[1] == 'o')
        s += 2;
    if (!*s)
        return -1;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > (base == 8 ? '7' : '9'))
            return -1;
    errno = 0;
    unsigned long long x = strtoull(s, NULL, base);
    if (errno == ERANGE)
        return -1;
    *out = x;
    return 0;
}

static int range_err(th_cfctx *c, const th_cfkey *k, const th_ynode *v,
                     const char *lo, const char *hi)
{
    return th_cf_err(c, v, "'%s' is out of range: %s is not between %s and %s",
                  k->name, v->str, lo, hi);
}

int th_cf_u32(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    uint64_t x;
    int rc = want_scalar(c, k, v, "a whole number");
    if (rc < 0)
        return rc;
    if (parse_uint(v, 10, &x) < 0) {
        char d[64];
        return th_cf_err(c, v, "'%s' must be a whole number, got %s", k->name,
                      describe(v, d, sizeof d));
    }
    if (x < k->min || x > k->max) {
        char lo[32], hi[32];
        snprintf(lo, sizeof lo, "%llu", (unsigned long long)k->min);
        snprintf(hi, sizeof hi, "%llu", (unsigned long long)k->max);
        return range_err(c, k, v, lo, hi);
    }
    *(uint32_t *)((char *)base + k->off) = (uint32_t)x;
    return 0;
}

/* File modes are octal whether written 0600, 600 or 0o600. */
int th_cf_mode(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    uint64_t x;
    int rc = want_scalar(c, k, v, "an octal file mode");
    if (rc < 0)
        return rc;
    if (parse_uint(v, 8, &x) < 0 || x > 0777) {
        char d[64];
        return th_cf_err(c, v,
                      "'%s' must be an octal file mode such as 0600 "
                      "(at most 0777), got %s",
                      k->name, describe(v, d, sizeof d));
    }
    *(uint32_t *)((char *)base + k->off) = (uint32_t)x;
    return 0;
}

static void fmt_size(uint64_t n, char *buf, size_t size)
{
    if (n >= GIB && n % GIB == 0)
        snprintf(buf, size, "%lluGiB", (unsigned long long)(n / GIB));
    else if (n >= MIB && n % MIB == 0)
        snprintf(buf, size, "%lluMiB", (unsigned long long)(n / MIB));
    else if (n >= KIB && n % KIB == 0)
        snprintf(buf, size, "%lluKiB", (unsigned long long)(n / KIB));
    else
        snprintf(buf, size, "%llu", (unsigned long long)n);
}

static void fmt_duration(uint64_t ms, char *buf, size_t size)
{
    if (ms >= DAY && ms % DAY == 0)
        snprintf(buf, size, "%llud", (unsigned long long)(ms / DAY));
    else if (ms >= HOUR && ms % HOUR == 0)
        snprintf(buf, size, "%lluh", (unsigned long long)(ms / HOUR));
    else if (ms >= MINUTE && ms % MINUTE == 0)
        snprintf(buf, size, "%llum", (unsigned long long)(ms / MINUTE));
    else if (ms >= SEC && ms % SEC == 0)
        snprintf(buf, size, "%llus", (unsigned long long)(ms / SEC));
    else
        snprintf(buf, size, "%llums", (unsigned long long)ms);
}

int th_cf_size(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    uint64_t x;
    int rc = want_scalar(c, k, v, "a size");
    if (rc < 0)
        return rc;
    if (th_parse_size(v->str, &x) < 0) {
        char d[64];
        return th_cf_err(c, v,
                      "'%s' must be a size such as 512, 64KiB or 1.5MiB, "
                      "got %s",
                      k->name, describe(v, d, sizeof d));
    }
    if (x < k->min || x > k->max) {
        char lo[32], hi[32];
        fmt_size(k->min, lo, sizeof lo);
        fmt_size(k->max, hi, sizeof hi);
        return range_err(c, k, v, lo, hi);
    }
    *(uint64_t *)((char *)base + k->off) = x;
    return 0;
}

int th_cf_duration(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    uint64_t x;
    int rc = want_scalar(c, k, v, "a duration");
    if (rc < 0)
        return rc;
    if (th_parse_duration_ms(v->str, &x) < 0) {
        char d[64];
        return th_cf_err(c, v,
                      "'%s' must be a duration such as 500ms, 30s, 2m or 1h, "
                      "got %s",
                      k->name, describe(v, d, sizeof d));
    }
    if (x < k->min || x > k->max) {
        char lo[32], hi[32];
        fmt_duration(k->min, lo, sizeof lo);
        fmt_duration(k->max, hi, sizeof hi);
        return range_err(c, k, v, lo, hi);
    }
    *(uint64_t *)((char *)base + k->off) = x;
    return 0;
}

static int enum_err(th_cfctx *c, const char *key, const th_ynode *v,
                    const char *const *names)
{
    char allowed[256] = "";
    size_t used = 0;
    for (size_t i = 0; names[i]; i++) {
        int n = snprintf(allowed + used, sizeof allowed - used, "%s%s",
                         i ? ", " : "", names[i]);
        if (n < 0 || (size_t)n >= sizeof allowed - used)
            break;
        used += (size_t)n;
    }
    char d[64];
    return th_cf_err(c, v, "invalid value %s for '%s' (allowed: %s)",
                  describe(v, d, sizeof d), key, allowed);
}

static int enum_index(const th_ynode *v, const char *const *names)
{
    if (v->kind != TH_Y_SCALAR)
        return -1;
    for (int i = 0; names[i]; i++)
        if (strcmp(v->str, names[i]) == 0)
            return i;
    return -1;
}

int th_cf_enum(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    int i = enum_index(v, k->names);
    if (i < 0)
        return enum_err(c, k->name, v, k->names);
    *(int *)((char *)base + k->off) = i;
    return 0;
}

/* An unquoted scalar that is a whole decimal number: true with *d. */
static bool scalar_number(const th_ynode *v, double *d)
{
    char *end = NULL;
    if (v->kind != TH_Y_SCALAR || !v->plain || !v->len)
        return false;
    errno = 0;
    *d = strtod(v->str, &end);
    return end && !*end && !errno;
}

static int set_fraction(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    double d = -1;
    if (!scalar_number(v, &d) || !(d >= 0.0 && d <= 1.0)) {
        char b[64];
        return th_cf_err(c, v, "'%s' must be a number from 0 to 1, got %s",
                      k->name, describe(v, b, sizeof b));
    }
    *(double *)((char *)base + k->off) = d;
    return 0;
}

/* A nested map whose keys are fields of the struct at base + off. */
int th_cf_section(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    void *sub = (char *)base + k->off;
    int rc = apply_map(c, v, k->sub, sub, k->what ? k->what : k->name);
    if (rc == 0 && k->check)
        rc = k->check(c, v, sub);
    return rc;
}

/* A list of maps: an array of elem_size items at off, its count at off2. */
int th_cf_list(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    void **arr = (void **)((char *)base + k->off);
    size_t *cnt = (size_t *)((char *)base + k->off2);
    if (th_ynode_is_null(v))
        return 0;
    if (v->kind != TH_Y_SEQ) {
        char d[64];
        return th_cf_err(c, v, "'%s' must be a list of %ss, got %s", k->name,
                      k->what, describe(v, d, sizeof d));
    }
    if (v->n == 0)
        return 0;
    *arr = calloc(v->n, k->elem_size);
    if (!*arr)
        return th_cf_nomem(c);
    bool failed = false;
    for (size_t i = 0; i < v->n; i++) {
        void *el = (char *)*arr + i * k->elem_size;
        th_ynode *item = v->kids[i];
        if (k->init)
            k->init(c, el);
        *cnt = i + 1;
        if (item->kind != TH_Y_MAP) {
            char d[64];
            int rc = th_cf_err(c, item, "each item of '%s' must be a map (a "
                            "%s), got %s", k->name, k->what,
                            describe(item, d, sizeof d));
            if (!cf_more(c, rc))
                return rc;
            failed = true;
            continue;
        }
        int rc = apply_map(c, item, k->sub, el, k->what);
        if (rc == 0 && k->check)
            rc = k->check(c, item, el);
        if (rc < 0) {
            if (!cf_more(c, rc))
                return rc;
            failed = true;
        }
    }
    return failed ? CF_REPORTED : 0;
}

/* A list of strings (one scalar counts as a list of one). */
static int strlist(th_cfctx *c, const th_cfkey *k, th_ynode *v, char ***out,
                   size_t *n_out, th_mark **marks)
{
    if (th_ynode_is_null(v))
        return 0;
    th_ynode *one[1] = {v};
    th_ynode **items = v->kind == TH_Y_SEQ ? v->kids : one;
    size_t n = v->kind == TH_Y_SEQ ? v->n : 1;
    if (v->kind == TH_Y_MAP)
        return th_cf_err(c, v, "'%s' must be a list of names, got a map",
                      k->name);
    if (n == 0)
        return 0;
    *out = calloc(n, sizeof **out);
    if (!*out)
        return th_cf_nomem(c);
    if (marks && !(*marks = calloc(n, sizeof **marks)))
        return th_cf_nomem(c);
    for (size_t i = 0; i < n; i++) {
        if (items[i]->kind != TH_Y_SCALAR || th_ynode_is_null(items[i])) {
            char d[64];
            return th_cf_err(c, items[i],
                          "each item of '%s' must be a name, got %s", k->name,
                          describe(items[i], d, sizeof d));
        }
        if (!((*out)[i] = strdup(items[i]->str)))
            return th_cf_nomem(c);
        *n_out = i + 1;
        if (marks) {
            (*marks)[i].line = items[i]->line;
            (*marks)[i].col = items[i]->col;
        }
    }
    return 0;
}

int th_cf_strlist(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    return strlist(c, k, v, (char ***)((char *)base + k->off),
                   (size_t *)((char *)base + k->off2), NULL);
}

/* Per-semantic-type sizes into the th_limits at base + off. */
static int set_limits(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    th_limits *l = (th_limits *)((char *)base + k->off);
    if (th_ynode_is_null(v))
        return 0;
    if (v->kind != TH_Y_MAP) {
        char d[64];
        return th_cf_err(c, v, "'%s' must be a map of semantic type to size, "
                      "got %s", k->name, describe(v, d, sizeof d));
    }
    for (size_t i = 0; i + 1 < v->n; i += 2) {
        th_ynode *key = v->kids[i], *val = v->kids[i + 1];
        uint32_t sem = key->kind == TH_Y_SCALAR ? th_sem_from_name(key->str)
                                                : 0;
        if (!sem) {
            char d[64];
            const char *near = key->kind == TH_Y_SCALAR
                                   ? closest(key->str, sem_names + 1,
                                             TH_SEM_COUNT - 1)
                                   : NULL;
            if (near)
                return th_cf_err(c, key,
                              "unknown semantic type %s in '%s' (did you "
                              "mean '%s'?)",
                              describe(key, d, sizeof d), k->name, near);
            return th_cf_err(c, key,
                          "unknown semantic type %s in '%s' (known: text, "
                          "status, error, file_content, file_view, "
                          "command_output, search_results, knowledge, "
                          "structured, log, diff, binary)",
                          describe(key, d, sizeof d), k->name);
        }
        th_cfkey one = {.name = key->str, .min = 1, .max = 1024 * GIB,
                     .off = offsetof(th_limits, bytes) +
                            sem * sizeof l->bytes[0]};
        int rc = th_cf_size(c, &one, val, l);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- host ------------------------------------------------------------------ */

static const char *const log_levels[] = {"error", "warn", "info", "debug",
                                         NULL};
static const char *const log_formats[] = {"text", "json", NULL};
static const char *const reload_modes[] = {"signal", "watch", "off", NULL};
static const char *const dup_policies[] = {"allow", "reject", "replace",
                                           "confirm", NULL};
static const char *const dup_scopes[] = {"name_and_args", "name", NULL};
static const char *const task_scopes[] = {"session", "toolset", NULL};
static const char *const perm_actions[] = {"deny", "allow", "ask", NULL};
static const char *const ask_fallbacks[] = {"deny", "allow_read_only",
                                            "error", NULL};

static int expand_scalar(th_cfctx *c, th_ynode *n, const char *where, bool path);

/* ---- sections of modules (th/section.h) ------------------------------------ */

static const th_section *g_sections[TH_SECTIONS_MAX];
static size_t g_n_sections;

static bool core_key(const char *name);

static bool host_key_taken(const char *name);

/* Whether two sections claim a listen scheme one of them would shadow
 * ("unix:" and "unix:x" both match "unix:x..."). */
static bool schemes_clash(const th_section *a, const th_section *b)
{
    for (const char *const *p = a->schemes; p && *p; p++)
        for (const char *const *q = b->schemes; q && *q; q++)
            if (strncmp(*p, *q, strlen(*p) < strlen(*q) ? strlen(*p)
                                                        : strlen(*q)) == 0)
                return true;
    return false;
}

int th_section_register(const th_section *s)
{
    for (size_t i = 0; i < g_n_sections; i++)
        if (g_sections[i] == s)
            return 0;
    if (!s->name || !*s->name || core_key(s->name))
        return TH_ESTATE;
    for (const char *const *p = s->schemes; p && *p; p++)
        if (!**p) /* would claim every entry */
            return TH_ESTATE;
    for (size_t i = 0; i < g_n_sections; i++)
        if (strcmp(g_sections[i]->name, s->name) == 0 ||
            schemes_clash(g_sections[i], s))
            return TH_ESTATE;
    for (const th_cfkey *k = s->host_keys; k && k->name; k++)
        if (host_key_taken(k->name))
            return TH_ESTATE;
    if (g_n_sections == TH_SECTIONS_MAX)
        return TH_ELIMIT;
    g_sections[g_n_sections++] = s;
    return 0;
}

void *th_config_section(const th_config *cfg, const th_section *s)
{
    for (size_t i = 0; cfg && i < cfg->n_sec; i++)
        if (cfg->sec_desc[i] == s)
            return cfg->sec[i];
    return NULL;
}

void th_config_sections_each(const th_config *cfg,
                             void (*fn)(const th_section *s, void *sec,
                                        void *ud),
                             void *ud)
{
    for (size_t i = 0; cfg && i < cfg->n_sec; i++)
        fn(cfg->sec_desc[i], cfg->sec[i], ud);
}

th_config *th_cf_config(th_cfctx *c)
{
    return c->cfg;
}

/* The struct of the section that claims a listen entry, or NULL. */
static void *listen_section(th_cfctx *c, const char *addr,
                            const th_section **out)
{
    th_config *cfg = c->cfg;
    for (size_t i = 0; i < cfg->n_sec; i++) {
        const th_section *s = cfg->sec_desc[i];
        for (const char *const *p = s->schemes; p && *p && s->listen; p++)
            if (strncmp(addr, *p, strlen(*p)) == 0) {
                *out = s;
                return cfg->sec[i];
            }
    }
    return NULL;
}

/* "unix:PATH (a Unix socket), http://HOST:PORT/PATH (MCP) or
 * nats://HOST:PORT (NATS)": the forms of listen entries, for the message
 * of an entry nobody takes. */
static void listen_forms(const th_config *cfg, char *buf, size_t size)
{
    const char *forms[TH_SECTIONS_MAX];
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_sec; i++)
        if (cfg->sec_desc[i]->listen && cfg->sec_desc[i]->listen_form)
            forms[n++] = cfg->sec_desc[i]->listen_form;
    size_t used = 0;
    if (!n)
        snprintf(buf, size, "the address of a front (no front that takes "
                 "addresses is registered)");
    for (size_t i = 0; i < n; i++) {
        int w = snprintf(buf + used, size - used, "%s%s",
                         i == 0 ? "" : i + 1 == n ? " or " : ", ", forms[i]);
        if (w < 0 || (size_t)w >= size - used)
            return;
        used += (size_t)w;
    }
}

/* Whether a registered section declares `name` as a user of the host. */
static bool section_user(th_cfctx *c, const char *name)
{
    th_config *cfg = c->cfg;
    for (size_t i = 0; i < cfg->n_sec; i++) {
        const th_section *s = cfg->sec_desc[i];
        const th_ynode *n = cfg->root ? th_ynode_get(cfg->root, s->name)
                                      : NULL;
        if (s->names_user && n && s->names_user(n, name))
            return true;
    }
    return false;
}

/* A section of a module, read like a core section. */
static int set_module_section(th_cfctx *c, const th_cfkey *k, th_ynode *v,
                              void *base)
{
    th_config *cfg = base;
    const th_section *s = cfg->sec_desc[k->off];
    void *sec = cfg->sec[k->off];
    int rc = apply_map(c, v, s->keys, sec, s->name);
    if (rc == 0 && s->check)
        rc = s->check(c, v, sec);
    return rc;
}

/* A key a section adds to `host:` (th_section.host_keys): `sub` is the
 * section's own key, `off` the section's index in cfg. */
static int set_host_ext(th_cfctx *c, const th_cfkey *k, th_ynode *v,
                        void *base)
{
    (void)base;
    return k->sub->set(c, k->sub, v, c->cfg->sec[k->off]);
}

/* Gives cfg a struct, with its defaults, for every registered section. */
static int sections_init(th_cfctx *c, th_config *cfg)
{
    for (size_t i = 0; i < g_n_sections; i++) {
        const th_section *s = g_sections[i];
        void *sec = calloc(1, s->size ? s->size : 1);
        if (!sec)
            return th_cf_nomem(c);
        cfg->sec_desc[i] = s;
        cfg->sec[i] = sec;
        cfg->n_sec = i + 1;
        if (s->init)
            s->init(sec);
    }
    return 0;
}

static int sections_finish(th_cfctx *c, th_config *cfg)
{
    for (size_t i = 0; i < cfg->n_sec; i++) {
        const th_section *s = cfg->sec_desc[i];
        const th_ynode *n = cfg->root ? th_ynode_get(cfg->root, s->name)
                                      : NULL;
        int rc = s->finish ? s->finish(c, n, cfg->sec[i]) : 0;
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void sections_free(th_config *cfg)
{
    for (size_t i = 0; i < cfg->n_sec; i++) {
        if (cfg->sec_desc[i]->free)
            cfg->sec_desc[i]->free(cfg->sec[i]);
        free(cfg->sec[i]);
    }
}

/* listen: one address or a list; each ${VAR} expanded like a plugin path.
 * At most one unix: entry (none, or "unix:" alone: the default address of
 * th/sockpath.h when serving); an entry whose scheme a registered section
 * claims (th_section.schemes) goes to that section's listen hook. */
static int listen_item(th_cfctx *c, th_ynode *v)
{
    if (v->kind != TH_Y_SCALAR || th_ynode_is_null(v)) {
        char d[64];
        return th_cf_err(c, v, "each item of 'listen' must be an address, got "
                      "%s", describe(v, d, sizeof d));
    }
    int rc = expand_scalar(c, v, "'listen'", true);
    if (rc < 0)
        return rc;
    const th_section *sec;
    void *sv = listen_section(c, v->str, &sec);
    if (sv)
        return sec->listen(c, v, sv);
    char forms[512];
    listen_forms(c->cfg, forms, sizeof forms);
    return th_cf_err(c, v, "'listen' must be %s, got '%s'", forms, v->str);
}

/* host.audit: "journald", or a file (relative paths against the config's
 * folder), docs/ops.md "Audit log". */
static int set_audit(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    th_host_cfg *h = base;
    if (th_ynode_is_null(v))
        return 0;
    int rc = want_scalar(c, k, v, "a file path or 'journald'");
    if (rc < 0)
        return rc;
    if (v->len == 0)
        return th_cf_err(c, v, "'audit' must be a file path or 'journald', "
                      "not empty");
    if (v->str[v->len - 1] == '/')
        return th_cf_err(c, v, "'audit' must name a file, not a folder: '%s'",
                      v->str);
    free(h->audit);
    h->audit = strcmp(v->str, "journald") == 0 ? strdup(v->str)
                                               : th_cf_resolve_path(c, v->str);
    return h->audit ? 0 : th_cf_nomem(c);
}

static int set_listen(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    (void)k, (void)base;
    if (th_ynode_is_null(v))
        return 0;
    if (v->kind == TH_Y_SCALAR)
        return listen_item(c, v);
    if (v->kind != TH_Y_SEQ) {
        char d[64];
        return th_cf_err(c, v, "'listen' must be an address or a list of "
                      "addresses, got %s", describe(v, d, sizeof d));
    }
    for (size_t i = 0; i < v->n; i++) {
        int rc = listen_item(c, v->kids[i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

#define H(f) offsetof(th_host_cfg, f)
static const th_cfkey host_keys[] = {
    {.name = "workers", .set = th_cf_u32, .off = H(workers), .min = 1,
     .max = 1024},
    {.name = "async_workers", .set = th_cf_u32, .off = H(async_workers),
     .min = 1, .max = 1024},
    {.name = "queue_size", .set = th_cf_u32, .off = H(queue_size), .min = 1,
     .max = 1000000},
    {.name = "log_level", .set = th_cf_enum, .off = H(log_level),
     .names = log_levels},
    {.name = "listen", .set = set_listen, .off = 0},
    {.name = "shutdown_grace", .set = th_cf_duration,
     .off = H(shutdown_grace_ms), .min = 0, .max = HOUR},
    {.name = "default_timeout", .set = th_cf_duration,
     .off = H(default_timeout_ms), .min = 1, .max = 7 * DAY},
    {.name = "max_timeout", .set = th_cf_duration, .off = H(max_timeout_ms),
     .min = 1, .max = 7 * DAY},
    {.name = "session_grace", .set = th_cf_duration,
     .off = H(session_grace_ms), .min = 0, .max = HOUR},
    {.name = "result_ttl", .set = th_cf_duration, .off = H(result_ttl_ms),
     .min = 0, .max = 7 * DAY},
    {.name = "permission_timeout", .set = th_cf_duration,
     .off = H(permission_timeout_ms), .min = 1, .max = DAY},
    {.name = "max_client_asks", .set = th_cf_u32, .off = H(max_client_asks),
     .min = 1, .max = 100000},
    {.name = "expose_task_tools", .set = th_cf_bool,
     .off = H(expose_task_tools)},
    {.name = "reload", .set = th_cf_enum, .off = H(reload),
     .names = reload_modes},
    {.name = "reload_debounce", .set = th_cf_duration,
     .off = H(reload_debounce_ms), .min = 0, .max = MINUTE},
    {.name = "reload_drain_timeout", .set = th_cf_duration,
     .off = H(reload_drain_timeout_ms), .min = 0, .max = HOUR},
    {.name = "plugin_reload_min_interval", .set = th_cf_duration,
     .off = H(plugin_reload_min_interval_ms), .min = 0, .max = HOUR},
    {.name = "state_dir", .set = th_cf_str, .off = H(state_dir),
     .flags = TH_CF_PATH},
    {.name = "spill_dir", .set = th_cf_str, .off = H(spill_dir),
     .flags = TH_CF_PATH},
    {.name = "spill_max_bytes", .set = th_cf_size, .off = H(spill_max_bytes),
     .min = 1, .max = 1024 * GIB},
    {.name = "spill_max_age", .set = th_cf_duration,
     .off = H(spill_max_age_ms), .min = SEC, .max = 30 * DAY},
    {.name = "lost_worker_grace", .set = th_cf_duration,
     .off = H(lost_worker_grace_ms), .min = 1, .max = HOUR},
    {.name = "max_lost_workers", .set = th_cf_u32, .off = H(max_lost_workers),
     .min = 1, .max = 1024},
    {.name = "task_keep", .set = th_cf_u32, .off = H(task_keep), .min = 1,
     .max = 1000000},
    {.name = "log_format", .set = th_cf_enum, .off = H(log_format),
     .names = log_formats},
    {.name = "allow_unknown_users", .set = th_cf_bool,
     .off = H(allow_unknown_users)},
    {.name = "short_call_max", .set = th_cf_duration,
     .off = H(short_call_max_ms), .min = 0, .max = MINUTE},
    {.name = "short_call_stuck", .set = th_cf_duration,
     .off = H(short_call_stuck_ms), .min = 0, .max = MINUTE},
    {.name = "busy_poll_us", .set = th_cf_u32, .off = H(busy_poll_us),
     .min = 0, .max = 10000},
    {.name = "audit", .set = set_audit, .off = 0},
    {.name = NULL}};
#undef H

static void host_init(th_host_cfg *h)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        cores = 1;
    if (cores > 512)
        cores = 512;
    memset(h, 0, sizeof *h);
    h->workers = (uint32_t)(2 * cores);
    h->async_workers = 0; /* computed after loading */
    h->queue_size = 1024;
    h->log_level = TOOLHOST_LOG_INFO;
    h->shutdown_grace_ms = 5 * SEC;
    h->default_timeout_ms = 60 * SEC;
    h->max_timeout_ms = HOUR;
    h->session_grace_ms = 2 * SEC;
    h->result_ttl_ms = 10 * MINUTE;
    h->task_keep = 256;
    h->permission_timeout_ms = 60 * SEC;
    h->max_client_asks = 32;
    h->reload = TH_RELOAD_SIGNAL;
    h->reload_debounce_ms = 200;
    h->short_call_max_ms = 10;
    h->short_call_stuck_ms = 100;
    h->busy_poll_us = 300;
    h->reload_drain_timeout_ms = 10 * SEC;
    h->plugin_reload_min_interval_ms = SEC;
    h->spill_max_bytes = 64 * MIB;
    h->spill_max_age_ms = HOUR;
    h->lost_worker_grace_ms = 3 * SEC;
    h->max_lost_workers = 0; /* = workers */
}

static int host_check(th_cfctx *c, th_ynode *n, void *el)
{
    th_host_cfg *h = el;
    if (n && n->kind == TH_Y_MAP) {
        h->line = n->line;
        h->col = n->col;
    }
    const th_ynode *v;
    if (h->async_workers == 0) {
        h->async_workers = h->workers / 2 ? h->workers / 2 : 1;
    } else if (h->async_workers > h->workers) {
        v = th_ynode_get(n, "async_workers");
        return th_cf_err(c, v,
                      "'async_workers' (%u) must not exceed 'workers' (%u)",
                      h->async_workers, h->workers);
    }
    if (h->default_timeout_ms > h->max_timeout_ms) {
        v = th_ynode_get(n, "default_timeout");
        if (!v)
            v = th_ynode_get(n, "max_timeout");
        char a[32], b[32];
        fmt_duration(h->default_timeout_ms, a, sizeof a);
        fmt_duration(h->max_timeout_ms, b, sizeof b);
        return th_cf_err(c, v,
                      "'default_timeout' (%s) must not exceed 'max_timeout' "
                      "(%s)",
                      a, b);
    }
    return 0;
}

/* ---- plugins ------------------------------------------------------------- */

static bool name_valid(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        unsigned char ch = (unsigned char)s[n];
        if (!(isalnum(ch) || ch == '_' || ch == '-') || n >= 64)
            return false;
    }
    return n > 0;
}

/* The mark of byte `off` of a scalar's text: exact for a scalar on one
 * line without escapes, else the scalar's start. */
static th_ynode mark_at(const th_ynode *n, size_t off)
{
    th_ynode m = {.line = n->line, .col = n->col};
    bool quoted = !n->plain;
    size_t width = n->len + (quoted ? 2 : 0);
    if (n->end_line == n->line && (size_t)(n->end_col - n->col) == width)
        m.col = n->col + (quoted ? 1 : 0) + (int)off;
    return m;
}

/* Expands ${CONFIG_DIR}, ${NAME} and ${NAME:-default} in one scalar;
 * $$ stands for a literal $.  A set but empty ${NAME} is an error in a
 * path (`path`: the value names a file or folder) and, anywhere, at the
 * start of a value when a '/' follows: "${DIR}/x" would become the
 * absolute "/x".  ${NAME:-} says an empty value is intended. */
static int expand_scalar(th_cfctx *c, th_ynode *n, const char *where, bool path)
{
    if (!memchr(n->str, '$', n->len))
        return 0;
    th_buf b = TH_BUF_INIT;
    const char *s = n->str;
    int rc = 0;
    while (*s) {
        if (s[0] != '$' || (s[1] != '{' && s[1] != '$')) {
            if (th_buf_append(&b, s, 1) < 0)
                goto nomem;
            s++;
            continue;
        }
        if (s[1] == '$') {
            if (th_buf_append(&b, "$", 1) < 0)
                goto nomem;
            s += 2;
            continue;
        }
        const char *close = strchr(s + 2, '}');
        if (!close) {
            th_ynode at = mark_at(n, (size_t)(s - n->str));
            rc = th_cf_err(c, &at, "unterminated ${ in %s", where);
            goto out;
        }
        char name[256];
        size_t len = (size_t)(close - (s + 2));
        const char *dflt = NULL;
        const char *sep = strstr(s + 2, ":-");
        size_t nlen = len;
        if (sep && sep < close) {
            nlen = (size_t)(sep - (s + 2));
            dflt = sep + 2;
        }
        bool ok = nlen > 0 && nlen < sizeof name &&
                  !isdigit((unsigned char)s[2]);
        for (size_t i = 0; ok && i < nlen; i++)
            ok = isalnum((unsigned char)s[2 + i]) || s[2 + i] == '_';
        if (!ok) {
            th_ynode at = mark_at(n, (size_t)(s - n->str));
            rc = th_cf_err(c, &at, "invalid variable name '${%.*s}' in %s",
                        (int)(len > 64 ? 64 : len), s + 2, where);
            goto out;
        }
        memcpy(name, s + 2, nlen);
        name[nlen] = '\0';
        const char *val = strcmp(name, "CONFIG_DIR") == 0 ? c->dir
                                                          : getenv(name);
        if (dflt && (!val || !*val)) {
            if (th_buf_append(&b, dflt, (size_t)(close - dflt)) < 0)
                goto nomem;
        } else if (val && !*val &&
                   (path || (s == n->str && close[1] == '/'))) {
            th_ynode at = mark_at(n, (size_t)(s - n->str));
            rc = th_cf_err(c, &at,
                        "${%s} is empty; write ${%s:-} if an empty value is "
                        "intended (in %s)",
                        name, name, where);
            goto out;
        } else if (!val) {
            th_ynode at = mark_at(n, (size_t)(s - n->str));
            rc = th_cf_err(c, &at,
                        "environment variable '%s' is not set (used in %s; "
                        "write ${%s:-default} for a fallback)",
                        name, where, name);
            goto out;
        } else if (th_buf_puts(&b, val) < 0) {
            goto nomem;
        }
        s = close + 1;
    }
    if (th_buf_append(&b, "", 0) < 0) /* allocated and NUL-terminated */
        goto nomem;
    free(n->str);
    n->str = (char *)th_buf_take(&b, &n->len);
    return 0;
nomem:
    rc = th_cf_nomem(c);
out:
    th_buf_destroy(&b);
    return rc;
}

/* True for a key of a plugin's config block that names a file or folder:
 * its last word is root, path, dir, directory, folder, file or socket (or
 * their plural), words split at '_', '-' or a lower-to-upper case change
 * ("root", "work_dir", "cachePath", "log-files"). */
static bool path_key(const char *key)
{
    static const char *const words[] = {"root",   "path", "dir",
                                        "directory", "folder", "file",
                                        "socket"};
    size_t n = strlen(key);
    for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
        for (int plural = 0; plural < 2; plural++) {
            size_t l = strlen(words[w]) + (size_t)plural;
            if (n < l || strncasecmp(key + n - l, words[w], l - (size_t)plural) != 0 ||
                (plural && tolower((unsigned char)key[n - 1]) != 's'))
                continue;
            if (n == l)
                return true;
            unsigned char prev = (unsigned char)key[n - l - 1];
            unsigned char head = (unsigned char)key[n - l];
            if (prev == '_' || prev == '-' ||
                (isupper(head) && (islower(prev) || isdigit(prev))))
                return true;
        }
    }
    return false;
}

/* Expands every scalar value under `n` (not the keys); `path` as for
 * expand_scalar, and set for everything under a path_key(). */
static int expand_tree(th_cfctx *c, th_ynode *n, const char *where, bool path)
{
    if (n->kind == TH_Y_SCALAR)
        return expand_scalar(c, n, where, path);
    bool map = n->kind == TH_Y_MAP;
    for (size_t i = map ? 1 : 0; i < n->n; i += map ? 2 : 1) {
        const th_ynode *key = map ? n->kids[i - 1] : NULL;
        bool p = path || (key && key->kind == TH_Y_SCALAR &&
                          path_key(key->str));
        int rc = expand_tree(c, n->kids[i], where, p);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The plugin's `path` is expanded before it is resolved. */
static int set_plugin_path(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    if (th_ynode_is_null(v))
        return th_cf_err(c, v, "'%s' must not be empty", k->name);
    int rc = want_scalar(c, k, v, "a file path");
    if (rc == 0)
        rc = expand_scalar(c, v, "a plugin path", true);
    return rc < 0 ? rc : th_cf_str(c, k, v, base);
}

static int set_plugin_config(th_cfctx *c, const th_cfkey *k, th_ynode *v,
                             void *base)
{
    th_plugin_cfg *pc = base;
    (void)k;
    if (th_ynode_is_null(v))
        return 0;
    if (v->kind != TH_Y_MAP) {
        char d[64];
        return th_cf_err(c, v, "'config' must be a map of the plugin's keys, "
                      "got %s", describe(v, d, sizeof d));
    }
    pc->config = v;
    return 0;
}

static const char *const iso_names[] = {"in-process", "process", NULL};

/* `env: [NAME, ...]`: names of variables the workers get from the host's
 * environment.  Never the host's own TOOLHOST_* (tokens, secrets). */
static int set_plugin_env(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    th_plugin_cfg *pc = base;
    int rc = strlist(c, k, v, &pc->env, &pc->n_env, NULL);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < pc->n_env; i++) {
        const th_ynode *at = v->kind == TH_Y_SEQ ? v->kids[i] : v;
        const char *e = pc->env[i];
        bool ok = (*e >= 'A' && *e <= 'Z') || (*e >= 'a' && *e <= 'z') ||
                  *e == '_';
        for (const char *q = e; ok && *q; q++)
            ok = (*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') ||
                 (*q >= '0' && *q <= '9') || *q == '_';
        if (!ok)
            return th_cf_err(c, at, "'env' lists names of environment "
                          "variables ('%s' is not one: letters, digits and "
                          "'_', not a digit first)", e);
        if (strncmp(e, "TOOLHOST_", 9) == 0)
            return th_cf_err(c, at, "'env' must not pass the host's own "
                          "variable '%s' to a plugin's workers (TOOLHOST_* "
                          "hold the host's tokens and secrets)", e);
    }
    return 0;
}

/* `isolation_uid_range: LO-HI`: the uids `user: auto` takes from. */
static int set_uid_range(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    th_plugin_cfg *pc = base;
    (void)k;
    unsigned long lo, hi;
    int end = 0;
    if (v->kind != TH_Y_SCALAR ||
        sscanf(v->str, "%lu-%lu%n", &lo, &hi, &end) != 2 ||
        v->str[end] != '\0' || !(v->str[0] >= '0' && v->str[0] <= '9'))
        return th_cf_err(c, v, "'isolation_uid_range' must be two uids, "
                      "LOW-HIGH (e.g. 61184-65519)");
    if (lo < 1000 || hi < lo || hi >= 4294967295ul)
        return th_cf_err(c, v, "'isolation_uid_range' %lu-%lu: want "
                      "1000 <= LOW <= HIGH < 4294967295", lo, hi);
    pc->uid_lo = (uint32_t)lo;
    pc->uid_hi = (uint32_t)hi;
    return 0;
}

#define PL(f) offsetof(th_proc_limits, f)
static const th_cfkey proc_limit_keys[] = {
    {.name = "memory", .set = th_cf_size, .off = PL(memory), .min = 16 * MIB,
     .max = 1024 * GIB},
    {.name = "cpu_seconds", .set = th_cf_u32, .off = PL(cpu_seconds), .min = 1,
     .max = 1000000},
    {.name = "open_files", .set = th_cf_u32, .off = PL(open_files), .min = 16,
     .max = 1048576},
    {.name = "processes", .set = th_cf_u32, .off = PL(processes), .min = 1,
     .max = 100000},
    {.name = NULL}};
#undef PL

#define P(f) offsetof(th_plugin_cfg, f)
static const th_cfkey plugin_keys[] = {
    {.name = "name", .set = th_cf_str, .off = P(name), .flags = TH_CF_REQUIRED},
    {.name = "path", .set = set_plugin_path, .off = P(path),
     .flags = TH_CF_REQUIRED | TH_CF_PATH},
    {.name = "optional", .set = th_cf_bool, .off = P(optional)},
    {.name = "allow_insecure", .set = th_cf_bool, .off = P(allow_insecure)},
    {.name = "config", .set = set_plugin_config},
    /* Isolation (docs/isolation.md). */
    {.name = "isolation", .set = th_cf_enum, .off = P(isolation),
     .names = iso_names},
    {.name = "workers", .set = th_cf_u32, .off = P(workers), .min = 1,
     .max = 64},
    {.name = "process_limits", .set = th_cf_section, .off = P(process_limits),
     .sub = proc_limit_keys, .what = "process_limits"},
    {.name = "network", .set = th_cf_bool, .off = P(network)},
    {.name = "user", .set = th_cf_str, .off = P(user)},
    {.name = "env", .set = set_plugin_env},
    {.name = "isolation_uid_range", .set = set_uid_range},
    {.name = "kill_grace", .set = th_cf_duration, .off = P(kill_grace_ms),
     .min = 1, .max = 60000},
    {.name = "crash_loop", .set = th_cf_u32, .off = P(crash_loop), .min = 1,
     .max = 1000},
    {.name = "unhealthy_retry", .set = th_cf_duration,
     .off = P(unhealthy_retry_ms), .min = 100, .max = DAY},
    {.name = "content_timeout", .set = th_cf_duration,
     .off = P(content_timeout_ms), .min = 1, .max = 600000},
    /* the bounds of ISO_FRAME_MIN and ISO_MAX_FRAME (iso_wire.h) */
    {.name = "worker_max_frame", .set = th_cf_size,
     .off = P(worker_max_frame), .min = 256 * KIB, .max = 256 * MIB},
    /* Discovery (docs/gateway.md): its tools are found by search_tools */
    {.name = "defer", .set = th_cf_bool, .off = P(defer)},
    {.name = NULL}};
#undef P

static void plugin_init(th_cfctx *c, void *el)
{
    (void)c;
    ((th_plugin_cfg *)el)->network = true;
}

static int plugin_check(th_cfctx *c, th_ynode *n, void *el)
{
    th_plugin_cfg *pc = el;
    th_config *cfg = c->cfg;
    pc->line = n->line;
    pc->col = n->col;
    const th_ynode *nv = th_ynode_get(n, "name");
    if (!pc->name || !name_valid(pc->name))
        return th_cf_err(c, nv,
                      "invalid plugin name '%s' (use 1 to 64 letters, digits, "
                      "'_' or '-')",
                      pc->name ? pc->name : "");
    size_t first = 0;
    int rc = cf_seen(c, &c->plugin_names, pc->name,
                     (size_t)(pc - cfg->plugins), &first);
    if (rc < 0)
        return rc;
    if (rc == 1)
        return th_cf_err(c, nv,
                      "duplicate plugin name '%s' (first at line %d, "
                      "column %d)",
                      pc->name, cfg->plugins[first].line,
                      cfg->plugins[first].col);
    if (pc->isolation != TH_ISO_PROCESS) { /* isolation keys need process */
        static const char *const only[] = {
            "workers", "process_limits", "network", "user", "kill_grace",
            "crash_loop", "unhealthy_retry", "env", "isolation_uid_range",
            "content_timeout", "worker_max_frame", NULL};
        for (size_t i = 0; only[i]; i++) {
            const th_ynode *k = th_ynode_get_key(n, only[i]);
            if (k)
                return th_cf_err(c, k,
                              "'%s' applies only to a plugin with "
                              "'isolation: process' (plugin '%s' runs "
                              "in-process)",
                              only[i], pc->name);
        }
    }
    const th_ynode *ur = th_ynode_get_key(n, "isolation_uid_range");
    if (ur && !(pc->user && strcmp(pc->user, "auto") == 0))
        return th_cf_err(c, ur, "'isolation_uid_range' applies only with "
                      "'user: auto' (plugin '%s')", pc->name);
    if (pc->config) {
        char where[128];
        snprintf(where, sizeof where, "the config of plugin '%s'", pc->name);
        return expand_tree(c, (th_ynode *)pc->config, where, false);
    }
    return 0;
}

/* ---- toolsets -------------------------------------------------------------- */

static int set_tools(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    th_toolset_cfg *ts = base;
    if (th_ynode_is_null(v) || (v->kind == TH_Y_SEQ && v->n == 0))
        return th_cf_err(c, v,
                      "'tools' must list at least one tool name (or \"*\" "
                      "for every tool)");
    int rc = strlist(c, k, v, &ts->tools, &ts->n_tools, &ts->tool_marks);
    if (rc < 0)
        return rc;
    th_strset seen;
    th_strset_init(&seen, &c->stats->key_probes);
    for (size_t i = 0; i < ts->n_tools && rc == 0; i++) {
        const th_ynode *item = v->kind == TH_Y_SEQ ? v->kids[i] : v;
        size_t j = 0;
        if (strcmp(ts->tools[i], "*") != 0 && !name_valid(ts->tools[i]))
            rc = th_cf_err(c, item,
                        "invalid tool name '%s' (tool names are 1 to 64 "
                        "letters, digits, '_' or '-'; \"*\" means every "
                        "tool)",
                        ts->tools[i]);
        else if ((rc = cf_seen(c, &seen, ts->tools[i], i, &j)) == 1)
            rc = th_cf_err(c, item,
                        "tool '%s' is listed twice (first at line %d, "
                        "column %d)",
                        ts->tools[i], ts->tool_marks[j].line,
                        ts->tool_marks[j].col);
    }
    th_strset_destroy(&seen);
    return rc;
}

static const struct {
    const char *name;
    uint32_t bit;
} perm_flags[] = {{"async", TOOLHOST_TOOL_ASYNC},
                  {"read_only", TOOLHOST_TOOL_READ_ONLY},
                  {"destructive", TOOLHOST_TOOL_DESTRUCTIVE},
                  {"idempotent", TOOLHOST_TOOL_IDEMPOTENT},
                  {"open_world", TOOLHOST_TOOL_OPEN_WORLD},
                  {"serial", TOOLHOST_TOOL_SERIAL},
                  {"needs_permission", TH_PERM_FLAG_NEEDS}};
#define N_PERM_FLAGS (sizeof perm_flags / sizeof perm_flags[0])

static int set_flags(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    uint32_t *bits = (uint32_t *)((char *)base + k->off);
    th_ynode *one[1] = {v};
    th_ynode **items = v->kind == TH_Y_SEQ ? v->kids : one;
    size_t n = v->kind == TH_Y_SEQ ? v->n : 1;
    static const char *const names[N_PERM_FLAGS + 1] = {
        "async",      "read_only", "destructive",      "idempotent",
        "open_world", "serial",    "needs_permission", NULL};
    for (size_t i = 0; i < n; i++) {
        int idx = enum_index(items[i], names);
        if (idx < 0)
            return enum_err(c, k->name, items[i], names);
        *bits |= perm_flags[idx].bit;
    }
    return 0;
}

#define R(f) offsetof(th_perm_rule, f)
static const th_cfkey rule_keys[] = {
    {.name = "match", .set = th_cf_str, .off = R(match)},
    {.name = "flag", .set = set_flags, .off = R(flags)},
    {.name = "flags", .set = set_flags, .off = R(flags)},
    {.name = "action", .set = th_cf_enum, .off = R(action),
     .names = perm_actions, .flags = TH_CF_REQUIRED},
    {.name = NULL}};
#undef R

static int rule_check(th_cfctx *c, th_ynode *n, void *el)
{
    th_perm_rule *r = el;
    r->line = n->line;
    r->col = n->col;
    if (th_ynode_get(n, "flag") && th_ynode_get(n, "flags"))
        return th_cf_err(c, th_ynode_get_key(n, "flags"),
                      "give either 'flag' or 'flags', not both");
    return 0;
}

#define T(f) offsetof(th_toolset_cfg, f)
static const th_cfkey perm_keys[] = {
    {.name = "default", .set = th_cf_enum, .off = T(perm_default),
     .names = perm_actions},
    {.name = "rules", .set = th_cf_list, .off = T(rules), .off2 = T(n_rules),
     .sub = rule_keys, .elem_size = sizeof(th_perm_rule),
     .check = rule_check, .what = "rule"},
    {.name = NULL}};

#define RC(f) offsetof(th_run_code_cfg, f)
static const th_cfkey run_code_keys[] = {
    {.name = "enabled", .set = th_cf_bool, .off = RC(enabled)},
    {.name = "timeout", .set = th_cf_duration, .off = RC(timeout_ms), .min = 1,
     .max = DAY},
    {.name = "memory", .set = th_cf_size, .off = RC(memory), .min = MIB,
     .max = 64 * GIB},
    {.name = "max_calls", .set = th_cf_u32, .off = RC(max_calls), .min = 1,
     .max = 10000000},
    {.name = "output_limit", .set = th_cf_size, .off = RC(output_limit),
     .min = 1, .max = GIB},
    {.name = NULL}};
#undef RC

#define O(f) offsetof(th_tool_override, f)
static const th_cfkey override_keys[] = {
    {.name = "timeout", .set = th_cf_duration, .off = O(timeout_ms), .min = 1,
     .max = 7 * DAY},
    {.name = "max_concurrency", .set = th_cf_u32, .off = O(max_concurrency),
     .min = 1, .max = 65536},
    {.name = "on_duplicate_call", .set = th_cf_enum,
     .off = O(on_duplicate_call), .names = dup_policies},
    {.name = "duplicate_scope", .set = th_cf_enum, .off = O(duplicate_scope),
     .names = dup_scopes},
    {.name = "limits", .set = set_limits, .off = O(limits)},
    {.name = "sensitive", .set = th_cf_strlist, .off = O(sensitive),
     .off2 = O(n_sensitive)},
    {.name = NULL}};
#undef O

static int set_overrides(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    th_toolset_cfg *ts = base;
    if (th_ynode_is_null(v))
        return 0;
    if (v->kind != TH_Y_MAP) {
        char d[64];
        return th_cf_err(c, v, "'%s' must be a map of tool name to settings, "
                      "got %s", k->name, describe(v, d, sizeof d));
    }
    size_t n = v->n / 2;
    if (n == 0)
        return 0;
    ts->overrides = calloc(n, sizeof *ts->overrides);
    if (!ts->overrides)
        return th_cf_nomem(c);
    for (size_t i = 0; i < n; i++) {
        th_ynode *key = v->kids[2 * i], *val = v->kids[2 * i + 1];
        th_tool_override *o = &ts->overrides[i];
        o->on_duplicate_call = -1;
        o->duplicate_scope = -1;
        o->line = key->line;
        o->col = key->col;
        ts->n_overrides = i + 1;
        if (key->kind != TH_Y_SCALAR || !name_valid(key->str)) {
            char d[64];
            return th_cf_err(c, key, "invalid tool name %s in '%s'",
                          describe(key, d, sizeof d), k->name);
        }
        if (!(o->tool = strdup(key->str)))
            return th_cf_nomem(c);
        char what[96];
        snprintf(what, sizeof what, "the override of '%s'", o->tool);
        int rc = apply_map(c, val, override_keys, o, what);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static const th_cfkey toolset_keys[] = {
    {.name = "name", .set = th_cf_str, .off = T(name), .flags = TH_CF_REQUIRED},
    {.name = "tools", .set = set_tools},
    {.name = "tags", .set = th_cf_strlist, .off = T(tags), .off2 = T(n_tags)},
    {.name = "timeout", .set = th_cf_duration, .off = T(timeout_ms), .min = 1,
     .max = 7 * DAY},
    {.name = "max_concurrency", .set = th_cf_u32, .off = T(max_concurrency),
     .min = 0, .max = 65536},
    {.name = "on_duplicate_call", .set = th_cf_enum,
     .off = T(on_duplicate_call), .names = dup_policies},
    {.name = "duplicate_scope", .set = th_cf_enum, .off = T(duplicate_scope),
     .names = dup_scopes},
    {.name = "scope", .set = th_cf_enum, .off = T(scope), .names = task_scopes},
    {.name = "ask_fallback", .set = th_cf_enum, .off = T(ask_fallback),
     .names = ask_fallbacks},
    {.name = "allow_users", .set = th_cf_strlist, .off = T(allow_users),
     .off2 = T(n_allow_users)},
    {.name = "allow_groups", .set = th_cf_strlist, .off = T(allow_groups),
     .off2 = T(n_allow_groups)},
    {.name = "permissions", .set = th_cf_section, .off = 0, .sub = perm_keys,
     .what = "permissions"},
    {.name = "limits", .set = set_limits, .off = T(limits)},
    {.name = "tool_overrides", .set = set_overrides,
     .sub = override_keys}, /* .sub: for th_config_each_key */
    {.name = "run_code", .set = th_cf_section, .off = T(run_code),
     .sub = run_code_keys, .what = "run_code"},
    {.name = NULL}};
#undef T

static void toolset_init(th_cfctx *c, void *el)
{
    (void)c;
    th_toolset_cfg *ts = el;
    ts->on_duplicate_call = TH_DUP_ALLOW;
    ts->duplicate_scope = TH_DUPSCOPE_NAME_AND_ARGS;
    ts->scope = TH_SCOPE_SESSION;
    ts->perm_default = TH_PERM_DENY;
    ts->run_code.enabled = false;
    ts->run_code.timeout_ms = 10 * SEC;
    ts->run_code.memory = 64 * MIB;
    ts->run_code.max_calls = 1000;
    ts->run_code.output_limit = 64 * KIB;
}

/* A user (or group) name of allow_users, allow_groups or admin exists on
 * this system: a name that does not would silently never match.  Numeric
 * ids are taken as they are; host.allow_unknown_users turns the check off
 * (images built before their users exist). */
/* The sections' hints on where else a user may be declared. */
static const char *user_hints(const th_config *cfg, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < cfg->n_sec; i++) {
        const char *h = cfg->sec_desc[i]->user_hint;
        int w = h ? snprintf(buf + used, size - used, "%s", h) : 0;
        if (w < 0 || (size_t)w >= size - used)
            break;
        used += (size_t)w;
    }
    return buf;
}

static int check_names(th_cfctx *c, const th_ynode *v, bool group)
{
    char hint[512];
    const char *esc = getenv("TOOLHOST_ALLOW_UNKNOWN_USERS");
    if (!v || th_ynode_is_null(v) || c->cfg->host.allow_unknown_users ||
        (esc && strcmp(esc, "1") == 0))
        return 0;
    const th_ynode *one[1] = {v};
    const th_ynode *const *items =
        v->kind == TH_Y_SEQ ? (const th_ynode *const *)v->kids : one;
    size_t n = v->kind == TH_Y_SEQ ? v->n : 1;
    for (size_t i = 0; i < n; i++) {
        const th_ynode *it = items[i];
        if (it->kind != TH_Y_SCALAR || !it->str[0])
            continue;
        char *end;
        errno = 0;
        unsigned long id = strtoul(it->str, &end, 10);
        if (!*end && errno == 0 && id <= UINT32_MAX && isdigit((unsigned char)it->str[0]))
            continue;
        if (!group && section_user(c, it->str))
            continue;
        char buf[16384];
        int e;
        if (group) {
            struct group gr, *res = NULL;
            e = getgrnam_r(it->str, &gr, buf, sizeof buf, &res);
            if (res)
                continue;
        } else {
            struct passwd pw, *res = NULL;
            e = getpwnam_r(it->str, &pw, buf, sizeof buf, &res);
            if (res)
                continue;
        }
        return th_cf_err(c, it,
                      "no %s named '%s' on this system%s%s%s (a name that "
                      "does not exist never matches;%s set "
                      "host.allow_unknown_users: true (or pass "
                      "--allow-unknown-users) when the config is "
                      "written before its users exist)",
                      group ? "group" : "user", it->str, e ? " (" : "",
                      e ? strerror(e) : "", e ? ")" : "",
                      group ? "" : user_hints(c->cfg, hint, sizeof hint));
    }
    return 0;
}

/* A toolset's `tags:`, each resolved to its entry of `tags:` (read before
 * the toolsets), or NULL for a tag only plugins declare (ABI 1.5): that
 * one is checked once the plugins are loaded (th_config_check_tags). */
static int toolset_tags(th_cfctx *c, const th_ynode *n, th_toolset_cfg *ts)
{
    if (!ts->n_tags)
        return 0;
    ts->tag_refs = calloc(ts->n_tags, sizeof *ts->tag_refs);
    ts->tag_marks = calloc(ts->n_tags, sizeof *ts->tag_marks);
    if (!ts->tag_refs || !ts->tag_marks)
        return th_cf_nomem(c);
    const th_ynode *tl = th_ynode_get(n, "tags");
    for (size_t i = 0; i < ts->n_tags; i++) {
        const th_ynode *at = tl && tl->kind == TH_Y_SEQ && i < tl->n
                                 ? tl->kids[i] : tl;
        if (at)
            ts->tag_marks[i] = (th_mark){at->line, at->col};
        for (size_t j = 0; j < c->cfg->n_tags && !ts->tag_refs[i]; j++)
            if (strcmp(c->cfg->tags[j].name, ts->tags[i]) == 0)
                ts->tag_refs[i] = &c->cfg->tags[j];
    }
    return 0;
}

static int toolset_check(th_cfctx *c, th_ynode *n, void *el)
{
    th_toolset_cfg *ts = el;
    th_config *cfg = c->cfg;
    const th_host_cfg *h = &cfg->host;
    ts->line = n->line;
    ts->col = n->col;
    const th_ynode *nv = th_ynode_get(n, "name");
    if (!ts->name || !name_valid(ts->name))
        return th_cf_err(c, nv,
                      "invalid toolset name '%s' (use 1 to 64 letters, "
                      "digits, '_' or '-')",
                      ts->name ? ts->name : "");
    size_t first = 0;
    int rc = cf_seen(c, &c->toolset_names, ts->name,
                     (size_t)(ts - cfg->toolsets), &first);
    if (rc < 0)
        return rc;
    if (rc == 1)
        return th_cf_err(c, nv,
                      "duplicate toolset name '%s' (first at line %d, "
                      "column %d)",
                      ts->name, cfg->toolsets[first].line,
                      cfg->toolsets[first].col);
    char a[32], b[32];
    fmt_duration(h->max_timeout_ms, b, sizeof b);
    if (ts->timeout_ms > h->max_timeout_ms) {
        fmt_duration(ts->timeout_ms, a, sizeof a);
        return th_cf_err(c, th_ynode_get(n, "timeout"),
                      "'timeout' (%s) exceeds host.max_timeout (%s)", a, b);
    }
    if ((rc = check_names(c, th_ynode_get(n, "allow_users"), false)) < 0 ||
        (rc = check_names(c, th_ynode_get(n, "allow_groups"), true)) < 0)
        return rc;
    if (ts->n_tools == 0 && ts->n_tags == 0)
        return th_cf_err(c, n, "missing required key 'tools' in toolset");
    if ((rc = toolset_tags(c, n, ts)) < 0)
        return rc;
    const th_ynode *ov = th_ynode_get(n, "tool_overrides");
    bool all = ts->n_tags > 0; /* tagged tools are known once loaded */
    for (size_t i = 0; i < ts->n_tools; i++)
        all |= strcmp(ts->tools[i], "*") == 0;
    th_strset tools; /* looked up by each override */
    th_strset_init(&tools, &c->stats->key_probes);
    for (size_t i = 0; i < ts->n_tools && !all && ts->n_overrides && rc >= 0;
         i++)
        rc = cf_seen(c, &tools, ts->tools[i], i, NULL);
    for (size_t i = 0; i < ts->n_overrides && rc >= 0; i++) {
        th_tool_override *o = &ts->overrides[i];
        const th_ynode *key = ov->kids[2 * i];
        if (o->timeout_ms > h->max_timeout_ms) {
            fmt_duration(o->timeout_ms, a, sizeof a);
            rc = th_cf_err(c, th_ynode_get(ov->kids[2 * i + 1], "timeout"),
                        "'timeout' (%s) exceeds host.max_timeout (%s)", a, b);
        } else if (!all &&
                   (rc = cf_seen(c, &tools, o->tool, ts->n_tools, NULL)) ==
                       0) {
            rc = th_cf_err(c, key,
                        "'tool_overrides' names '%s', which is not in the "
                        "tools of toolset '%s'",
                        o->tool, ts->name);
        }
    }
    th_strset_destroy(&tools);
    return rc < 0 ? rc : 0;
}

/* ---- mocks ----------------------------------------------------------------- */

static int set_meta(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    th_mock_cfg *m = base;
    if (th_ynode_is_null(v))
        return 0;
    if (v->kind != TH_Y_MAP) {
        char d[64];
        return th_cf_err(c, v, "'%s' must be a map, got %s", k->name,
                      describe(v, d, sizeof d));
    }
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    if (th_ynode_pack(v, &pk) < 0) {
        th_buf_destroy(&b);
        return th_cf_nomem(c);
    }
    m->meta = th_buf_take(&b, &m->meta_len);
    return 0;
}

#define MP(f) offsetof(th_mock_progress, f)
static const th_cfkey progress_keys[] = {
    {.name = "message", .set = th_cf_str, .off = MP(message)},
    {.name = "progress", .set = set_fraction, .off = MP(fraction)},
    {.name = "delay", .set = th_cf_duration, .off = MP(delay_ms), .min = 0,
     .max = HOUR},
    {.name = NULL}};
#undef MP

static void progress_init(th_cfctx *c, void *el)
{
    (void)c;
    ((th_mock_progress *)el)->fraction = -1;
}

#define M(f) offsetof(th_mock_cfg, f)
static const th_cfkey mock_keys[] = {
    {.name = "tool", .set = th_cf_str, .off = M(tool), .flags = TH_CF_REQUIRED},
    {.name = "ok", .set = th_cf_bool, .off = M(ok)},
    {.name = "stdout", .set = th_cf_str, .off = M(stdout_text)},
    {.name = "stderr", .set = th_cf_str, .off = M(stderr_text)},
    {.name = "meta", .set = set_meta},
    {.name = "progress", .set = th_cf_list, .off = M(progress),
     .off2 = M(n_progress), .sub = progress_keys,
     .elem_size = sizeof(th_mock_progress), .init = progress_init,
     .what = "progress update"},
    {.name = "delay", .set = th_cf_duration, .off = M(delay_ms), .min = 0,
     .max = HOUR},
    {.name = NULL}};
#undef M

static void mock_init(th_cfctx *c, void *el)
{
    (void)c;
    ((th_mock_cfg *)el)->ok = true;
}

static int mock_check(th_cfctx *c, th_ynode *n, void *el)
{
    th_mock_cfg *m = el;
    const th_ynode *tv = th_ynode_get(n, "tool");
    m->line = tv->line;
    m->col = tv->col;
    if (!m->tool || !name_valid(m->tool))
        return th_cf_err(c, tv, "invalid tool name '%s' in a mock",
                      m->tool ? m->tool : "");
    size_t first = 0;
    int rc = cf_seen(c, &c->mock_tools, m->tool,
                     (size_t)(m - c->cfg->mocks), &first);
    if (rc == 1)
        return th_cf_err(c, tv,
                      "duplicate mock of tool '%s' (first at line %d, "
                      "column %d)",
                      m->tool, c->cfg->mocks[first].line,
                      c->cfg->mocks[first].col);
    return rc;
}

/* ---- rate_limits (rate.c) -------------------------------------------------- */

/* A number of calls per second: > 0, at most 1e6, decimals allowed. */
static int set_rate(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base)
{
    double d = -1;
    if (!scalar_number(v, &d) || !(d > 0.0 && d <= 1e6)) {
        char b[64];
        return th_cf_err(c, v,
                      "'%s' must be a number of calls per second above 0 "
                      "and at most 1000000 (e.g. 5 or 0.5), got %s",
                      k->name, describe(v, b, sizeof b));
    }
    *(double *)((char *)base + k->off) = d;
    return 0;
}

static const char *const rate_per_names[] = {"caller", "caller_tool", "all",
                                             NULL};

/* ---- tags ------------------------------------------------------------------ */

/* A list of tool names or fnmatch patterns ("fs_*"), at least one. */
static int tool_patterns(th_cfctx *c, const th_cfkey *k, th_ynode *v,
                         char ***out, size_t *n_out, th_mark **marks)
{
    if (th_ynode_is_null(v) || (v->kind == TH_Y_SEQ && v->n == 0))
        return th_cf_err(c, v, "'%s' must list at least one tool name or "
                         "pattern", k->name);
    int rc = strlist(c, k, v, out, n_out, marks);
    for (size_t i = 0; i < *n_out && rc == 0; i++) {
        const th_ynode *item = v->kind == TH_Y_SEQ ? v->kids[i] : v;
        const char *name = (*out)[i];
        size_t len = strlen(name);
        bool ok = len > 0 && len <= 128;
        for (size_t j = 0; j < len && ok; j++)
            ok = isalnum((unsigned char)name[j]) || strchr("_-*?[]!", name[j]);
        if (!ok)
            rc = th_cf_err(c, item, "invalid tool name or pattern '%s' (tool "
                           "names are letters, digits, '_' or '-'; a "
                           "pattern adds *, ? and [...])", name);
    }
    return rc;
}

/* A tag's tools: names or fnmatch patterns ("fs_*"), each once. */
static int set_tag_tools(th_cfctx *c, const th_cfkey *k, th_ynode *v,
                         void *base)
{
    th_tag_cfg *t = base;
    return tool_patterns(c, k, v, &t->tools, &t->n_tools, &t->tool_marks);
}

/* `defer_tools:` - the deferred tools by name or pattern. */
static int set_defer_tools(th_cfctx *c, const th_cfkey *k, th_ynode *v,
                           void *base)
{
    th_config *cfg = base;
    return tool_patterns(c, k, v, &cfg->defer_tools, &cfg->n_defer_tools,
                         &cfg->defer_marks);
}

#define TG(f) offsetof(th_tag_cfg, f)
static const th_cfkey tag_keys[] = {
    {.name = "name", .set = th_cf_str, .off = TG(name),
     .flags = TH_CF_REQUIRED},
    {.name = "tools", .set = set_tag_tools, .flags = TH_CF_REQUIRED},
    {.name = NULL}};
#undef TG

static int tag_check(th_cfctx *c, th_ynode *n, void *el)
{
    th_tag_cfg *t = el;
    t->line = n->line;
    t->col = n->col;
    const th_ynode *nv = th_ynode_get(n, "name");
    if (!t->name || !name_valid(t->name))
        return th_cf_err(c, nv, "invalid tag name '%s' (use 1 to 64 "
                         "letters, digits, '_' or '-')",
                         t->name ? t->name : "");
    for (const th_tag_cfg *o = c->cfg->tags; o < t; o++)
        if (strcmp(o->name, t->name) == 0)
            return th_cf_err(c, nv, "duplicate tag '%s' (first at line %d; "
                             "list all its tools in one entry)", t->name,
                             o->line);
    return 0;
}

bool th_tag_has_tool(const th_tag_cfg *t, const char *tool)
{
    for (size_t i = 0; i < t->n_tools; i++)
        if (strcmp(t->tools[i], tool) == 0 ||
            fnmatch(t->tools[i], tool, 0) == 0)
            return true;
    return false;
}

bool th_config_tool_has_tag(const th_config *cfg, const char *tag,
                            const char *tool)
{
    for (size_t i = 0; cfg && i < cfg->n_tags; i++)
        if (strcmp(cfg->tags[i].name, tag) == 0)
            return th_tag_has_tool(&cfg->tags[i], tool);
    return false;
}

bool th_config_tool_deferred(const th_config *cfg, const char *plugin,
                             const char *tool)
{
    for (size_t i = 0; plugin && i < cfg->n_plugins; i++)
        if (cfg->plugins[i].defer && strcmp(cfg->plugins[i].name, plugin) == 0)
            return true;
    for (size_t i = 0; i < cfg->n_defer_tools; i++)
        if (strcmp(cfg->defer_tools[i], tool) == 0 ||
            fnmatch(cfg->defer_tools[i], tool, 0) == 0)
            return true;
    return false;
}

bool th_config_defers(const th_config *cfg)
{
    for (size_t i = 0; i < cfg->n_plugins; i++)
        if (cfg->plugins[i].defer)
            return true;
    return cfg->n_defer_tools > 0;
}

#define RL(f) offsetof(th_rate_cfg, f)
static const th_cfkey rate_keys[] = {
    {.name = "name", .set = th_cf_str, .off = RL(name)},
    {.name = "users", .set = th_cf_strlist, .off = RL(users),
     .off2 = RL(n_users)},
    {.name = "tools", .set = th_cf_strlist, .off = RL(tools),
     .off2 = RL(n_tools)},
    {.name = "per", .set = th_cf_enum, .off = RL(per), .names = rate_per_names},
    {.name = "rate", .set = set_rate, .off = RL(rate)},
    {.name = "burst", .set = th_cf_u32, .off = RL(burst), .min = 1,
     .max = 1000000},
    {.name = "concurrent", .set = th_cf_u32, .off = RL(concurrent), .min = 1,
     .max = 1000000},
    {.name = "daily", .set = th_cf_u32, .off = RL(daily), .min = 1,
     .max = UINT32_MAX},
    {.name = NULL}};
#undef RL

static int rate_check(th_cfctx *c, th_ynode *n, void *el)
{
    th_rate_cfg *r = el;
    size_t idx = (size_t)(r - c->cfg->rate_limits);
    r->line = n->line;
    r->col = n->col;
    if (r->burst && r->rate == 0)
        return th_cf_err(c, th_ynode_get(n, "burst"),
                      "'burst' is the size of the 'rate' bucket: set 'rate' "
                      "too");
    if (r->rate == 0 && !r->concurrent && !r->daily)
        return th_cf_err(c, n,
                      "a rate limit needs at least one of 'rate' (calls per "
                      "second), 'concurrent' or 'daily'");
    if (r->rate > 0 && !r->burst)
        r->burst = r->rate < 1 ? 1 : (uint32_t)ceil(r->rate);
    const th_ynode *tv = th_ynode_get(n, "tools");
    for (size_t i = 0; i < r->n_tools; i++) {
        const char *t = r->tools[i];
        if (!*t || strlen(t) > 64 || strspn(t, "abcdefghijklmnopqrstuvwxyz"
                                               "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                               "0123456789_-*?[]!") != strlen(t))
            return th_cf_err(c, tv && tv->kind == TH_Y_SEQ ? tv->kids[i] : tv,
                          "invalid tool name or pattern '%s' in a rate limit "
                          "(tool names, or patterns with * ? [...])",
                          t);
    }
    if (!r->name) {
        char nm[32];
        snprintf(nm, sizeof nm, "rate_limits[%zu]", idx);
        if (!(r->name = strdup(nm)))
            return th_cf_nomem(c);
    } else if (!name_valid(r->name)) {
        return th_cf_err(c, th_ynode_get(n, "name"),
                      "invalid rate limit name '%s' (1 to 64 letters, "
                      "digits, '_' or '-')",
                      r->name);
    }
    for (size_t i = 0; i < idx; i++)
        if (strcmp(c->cfg->rate_limits[i].name, r->name) == 0)
            return th_cf_err(c, n,
                          "duplicate rate limit name '%s' (first at line %d, "
                          "column %d)",
                          r->name, c->cfg->rate_limits[i].line,
                          c->cfg->rate_limits[i].col);
    return 0;
}

/* ---- admin ----------------------------------------------------------------- */

#define A(f) offsetof(th_admin_cfg, f)
static const th_cfkey admin_keys[] = {
    {.name = "users", .set = th_cf_strlist, .off = A(users),
     .off2 = A(n_users)},
    {.name = "groups", .set = th_cf_strlist, .off = A(groups),
     .off2 = A(n_groups)},
    {.name = NULL}};
#undef A

static int admin_check(th_cfctx *c, th_ynode *n, void *el)
{
    th_admin_cfg *a = el;
    a->present = true;
    const th_ynode *key = th_ynode_get_key(c->cfg->root, "admin");
    a->line = key ? key->line : n->line;
    a->col = key ? key->col : n->col;
    int rc = check_names(c, th_ynode_get(n, "users"), false);
    if (rc == 0)
        rc = check_names(c, th_ynode_get(n, "groups"), true);
    return rc;
}

/* ---- the document ---------------------------------------------------------- */

#define C(f) offsetof(th_config, f)
static const th_cfkey top_keys[] = {
    {.name = "host", .set = th_cf_section, .off = C(host), .sub = host_keys,
     .check = host_check, .what = "host"},
    {.name = "limits", .set = set_limits, .off = C(limits)},
    {.name = "plugins", .set = th_cf_list, .off = C(plugins),
     .off2 = C(n_plugins), .sub = plugin_keys,
     .elem_size = sizeof(th_plugin_cfg), .check = plugin_check,
     .init = plugin_init, .what = "plugin"},
    {.name = "tags", .set = th_cf_list, .off = C(tags), .off2 = C(n_tags),
     .sub = tag_keys, .elem_size = sizeof(th_tag_cfg), .check = tag_check,
     .what = "tag"},
    {.name = "defer_tools", .set = set_defer_tools},
    {.name = "toolsets", .set = th_cf_list, .off = C(toolsets),
     .off2 = C(n_toolsets), .sub = toolset_keys,
     .elem_size = sizeof(th_toolset_cfg), .init = toolset_init,
     .check = toolset_check, .what = "toolset"},
    {.name = "mocks", .set = th_cf_list, .off = C(mocks), .off2 = C(n_mocks),
     .sub = mock_keys, .elem_size = sizeof(th_mock_cfg), .init = mock_init,
     .check = mock_check, .what = "mock"},
    {.name = "admin", .set = th_cf_section, .off = C(admin), .sub = admin_keys,
     .check = admin_check, .what = "admin"},
    {.name = "rate_limits", .set = th_cf_list, .off = C(rate_limits),
     .off2 = C(n_rate_limits), .sub = rate_keys,
     .elem_size = sizeof(th_rate_cfg), .check = rate_check,
     .what = "rate limit"},
    {.name = NULL}};
#undef C

#define N_TOP_KEYS (sizeof top_keys / sizeof top_keys[0] - 1)

static bool core_key(const char *name)
{
    for (size_t i = 0; i < N_TOP_KEYS; i++)
        if (strcmp(top_keys[i].name, name) == 0)
            return true;
    return false;
}

/* The document's keys: the core's, then one per section of cfg (its
 * index in .off). */
#define N_HOST_KEYS (sizeof host_keys / sizeof host_keys[0] - 1)
#define N_HOST_ALL (N_HOST_KEYS + 64)

/* A key of host: the core has, or a registered section adds; and the
 * room for one more (N_HOST_ALL in all). */
static bool host_key_taken(const char *name)
{
    size_t n = N_HOST_KEYS;
    for (size_t i = 0; i < N_HOST_KEYS; i++)
        if (strcmp(host_keys[i].name, name) == 0)
            return true;
    for (size_t i = 0; i < g_n_sections; i++)
        for (const th_cfkey *k = g_sections[i]->host_keys; k && k->name;
             k++, n++)
            if (strcmp(k->name, name) == 0)
                return true;
    return n >= N_HOST_ALL;
}

/* The keys of `host:`: the core's, then those the sections of cfg add
 * (at most 64 in all). */
static void host_table(const th_config *cfg, th_cfkey out[N_HOST_ALL + 1])
{
    memcpy(out, host_keys, N_HOST_KEYS * sizeof *out);
    size_t n = N_HOST_KEYS;
    for (size_t i = 0; cfg && i < cfg->n_sec; i++)
        for (const th_cfkey *k = cfg->sec_desc[i]->host_keys; k && k->name &&
                                                              n < N_HOST_ALL;
             k++)
            out[n++] = (th_cfkey){.name = k->name, .set = set_host_ext,
                                  .off = i, .sub = k};
    out[n] = (th_cfkey){.name = NULL};
}

static void top_table(const th_config *cfg,
                      th_cfkey out[N_TOP_KEYS + TH_SECTIONS_MAX + 1],
                      const th_cfkey *host)
{
    memcpy(out, top_keys, N_TOP_KEYS * sizeof *out);
    for (size_t i = 0; i < N_TOP_KEYS; i++)
        if (out[i].sub == host_keys)
            out[i].sub = host;
    size_t n = N_TOP_KEYS;
    for (size_t i = 0; cfg && i < cfg->n_sec; i++)
        if (cfg->sec_desc[i]->keys) /* else its keys are elsewhere */
            out[n++] = (th_cfkey){.name = cfg->sec_desc[i]->name,
                              .set = set_module_section, .off = i,
                              .what = cfg->sec_desc[i]->name};
    out[n] = (th_cfkey){.name = NULL};
}

static int unknown_key(th_cfctx *c, const th_ynode *key, const th_cfkey *table,
                       const char *what)
{
    const char *names[160] = {NULL}; /* host: has 28 + up to 64 added */
    size_t n = 0;
    for (const th_cfkey *k = table; k->name && n < 160; k++)
        names[n++] = k->name;
    const char *near = closest(key->str, names, n);
    if (near)
        return th_cf_err(c, key, "unknown key '%s' in %s (did you mean '%s'?)",
                      key->str, what, near);
    char known[2048] = "";
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        int w = snprintf(known + used, sizeof known - used, "%s%s",
                         i ? ", " : "", names[i]);
        if (w < 0 || (size_t)w >= sizeof known - used)
            break;
        used += (size_t)w;
    }
    return th_cf_err(c, key, "unknown key '%s' in %s (known keys: %s)",
                  key->str, what, known);
}

/* Applies every key of `node` (a map, or null for an empty one) through
 * `table`: unknown keys first (in file order), then each known key in
 * table order (so a section may rely on an earlier one), then the
 * required keys that are missing. */
static int apply_map(th_cfctx *c, th_ynode *node, const th_cfkey *table,
                     void *base, const char *what)
{
    if (node && !th_ynode_is_null(node) && node->kind != TH_Y_MAP) {
        char d[64];
        return th_cf_err(c, node, "%s must be a map of keys, got %s", what,
                      describe(node, d, sizeof d));
    }
    size_t n = node && node->kind == TH_Y_MAP ? node->n : 0;
    /* With a report (cf_more): each mistake is reported and the walk goes
     * on; the map then fails as a whole (CF_REPORTED), so no check runs on
     * what it half filled. */
    bool failed = false;
    int rc;
    for (size_t i = 0; i + 1 < n; i += 2) {
        const th_ynode *key = node->kids[i];
        if (key->kind != TH_Y_SCALAR) {
            rc = th_cf_err(c, key, "keys in %s must be plain names", what);
            if (!cf_more(c, rc))
                return rc;
            failed = true;
            continue;
        }
        const th_cfkey *k = table;
        while (k->name && strcmp(k->name, key->str) != 0)
            k++;
        if (!k->name) {
            rc = unknown_key(c, key, table, what);
            if (!cf_more(c, rc))
                return rc;
            failed = true;
        }
    }
    for (const th_cfkey *k = table; k->name; k++) {
        for (size_t i = 0; i + 1 < n; i += 2) {
            if (node->kids[i]->kind != TH_Y_SCALAR ||
                strcmp(node->kids[i]->str, k->name) != 0)
                continue;
            rc = k->set(c, k, node->kids[i + 1], base);
            if (rc < 0) {
                if (!cf_more(c, rc))
                    return rc;
                failed = true;
            }
        }
    }
    for (const th_cfkey *k = table; k->name; k++)
        if ((k->flags & TH_CF_REQUIRED) && !th_ynode_get(node, k->name)) {
            rc = th_cf_err(c, node, "missing required key '%s' in %s", k->name,
                        what);
            if (!cf_more(c, rc))
                return rc;
            failed = true;
        }
    return failed ? CF_REPORTED : 0;
}

/* ---- the list of keys ------------------------------------------------------ */

static void each_key(const th_cfkey *table, char *path, size_t len,
                     void (*fn)(const char *path, void *ud), void *ud)
{
    for (const th_cfkey *k = table; k->name; k++) {
        int n = snprintf(path + len, 256 - len, "%s%s", len ? "." : "",
                         k->name);
        if (n < 0 || (size_t)n >= 256 - len)
            continue;
        fn(path, ud);
        if (k->sub)
            each_key(k->sub, path, len + (size_t)n, fn, ud);
        else if (k->set == set_limits)
            for (size_t t = 1; t < TH_SEM_COUNT; t++) {
                char one[256];
                snprintf(one, sizeof one, "%s.%s", path, sem_names[t]);
                fn(one, ud);
            }
        path[len] = '\0';
    }
}

void th_config_each_key(void (*fn)(const char *path, void *ud), void *ud)
{
    char path[256] = "";
    each_key(top_keys, path, 0, fn, ud);
    for (size_t i = 0; i < g_n_sections; i++)
        for (const th_cfkey *k = g_sections[i]->host_keys; k && k->name; k++) {
            snprintf(path, sizeof path, "host.%s", k->name);
            fn(path, ud);
        }
    for (size_t i = 0; i < g_n_sections; i++) {
        if (!g_sections[i]->keys)
            continue;
        int n = snprintf(path, sizeof path, "%s", g_sections[i]->name);
        fn(path, ud);
        each_key(g_sections[i]->keys, path, (size_t)n, fn, ud);
    }
}

/* ---- free --------------------------------------------------------------------- */

void th_strv_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

th_config *th_config_ref(th_config *cfg)
{
    if (cfg)
        __atomic_fetch_add(&cfg->extra_refs, 1, __ATOMIC_RELAXED);
    return cfg;
}

void th_config_unref(th_config *cfg)
{
    if (cfg && __atomic_fetch_sub(&cfg->extra_refs, 1, __ATOMIC_ACQ_REL) == 0)
        th_config_free(cfg);
}

void th_config_free(th_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->path);
    free(cfg->dir);
    th_host_cfg *h = &cfg->host;
    free(h->audit);
    free(h->state_dir);
    free(h->spill_dir);
    for (size_t i = 0; i < cfg->n_plugins; i++) {
        free(cfg->plugins[i].name);
        free(cfg->plugins[i].path);
        free(cfg->plugins[i].user);
        for (size_t j = 0; j < cfg->plugins[i].n_env; j++)
            free(cfg->plugins[i].env[j]);
        free(cfg->plugins[i].env);
    }
    free(cfg->plugins);
    for (size_t i = 0; i < cfg->n_toolsets; i++) {
        th_toolset_cfg *ts = &cfg->toolsets[i];
        free(ts->name);
        th_strv_free(ts->tools, ts->n_tools);
        free(ts->tool_marks);
        th_strv_free(ts->allow_users, ts->n_allow_users);
        th_strv_free(ts->allow_groups, ts->n_allow_groups);
        for (size_t j = 0; j < ts->n_rules; j++)
            free(ts->rules[j].match);
        free(ts->rules);
        for (size_t j = 0; j < ts->n_overrides; j++) {
            free(ts->overrides[j].tool);
            th_strv_free(ts->overrides[j].sensitive, ts->overrides[j].n_sensitive);
        }
        free(ts->overrides);
        th_strv_free(ts->tags, ts->n_tags);
        free(ts->tag_refs);
        free(ts->tag_marks);
    }
    free(cfg->toolsets);
    for (size_t i = 0; i < cfg->n_tags; i++) {
        free(cfg->tags[i].name);
        th_strv_free(cfg->tags[i].tools, cfg->tags[i].n_tools);
        free(cfg->tags[i].tool_marks);
    }
    free(cfg->tags);
    th_strv_free(cfg->defer_tools, cfg->n_defer_tools);
    free(cfg->defer_marks);
    for (size_t i = 0; i < cfg->n_mocks; i++) {
        th_mock_cfg *m = &cfg->mocks[i];
        free(m->tool);
        free(m->stdout_text);
        free(m->stderr_text);
        free(m->meta);
        for (size_t j = 0; j < m->n_progress; j++)
            free(m->progress[j].message);
        free(m->progress);
    }
    free(cfg->mocks);
    for (size_t i = 0; i < cfg->n_rate_limits; i++) {
        th_rate_cfg *r = &cfg->rate_limits[i];
        free(r->name);
        th_strv_free(r->users, r->n_users);
        th_strv_free(r->tools, r->n_tools);
    }
    free(cfg->rate_limits);
    th_strv_free(cfg->admin.users, cfg->admin.n_users);
    th_strv_free(cfg->admin.groups, cfg->admin.n_groups);
    sections_free(cfg);
    th_ynode_free(cfg->root);
    free(cfg);
}

/* ---- load ----------------------------------------------------------------------- */

static int default_toolset(th_cfctx *c, th_config *cfg)
{
    cfg->toolsets = calloc(1, sizeof *cfg->toolsets);
    if (!cfg->toolsets)
        return th_cf_nomem(c);
    th_toolset_cfg *ts = cfg->toolsets;
    cfg->n_toolsets = 1;
    toolset_init(c, ts);
    ts->name = strdup("default");
    ts->tools = calloc(1, sizeof *ts->tools);
    ts->tool_marks = calloc(1, sizeof *ts->tool_marks);
    if (!ts->name || !ts->tools || !ts->tool_marks)
        return th_cf_nomem(c);
    if (!(ts->tools[0] = strdup("*")))
        return th_cf_nomem(c);
    ts->n_tools = 1;
    return 0;
}

static char *abs_dir(const char *dir)
{
    char cwd[PATH_MAX];
    if (dir && dir[0] == '/')
        return strdup(dir);
    if (!getcwd(cwd, sizeof cwd))
        return NULL;
    if (!dir || !*dir || strcmp(dir, ".") == 0)
        return strdup(cwd);
    th_buf b = TH_BUF_INIT;
    if (th_buf_printf(&b, "%s/%s", cwd, dir) < 0) {
        th_buf_destroy(&b);
        return NULL;
    }
    return (char *)th_buf_take(&b, NULL);
}

/* Values that may be longer than TH_YAML_MAX_SCALAR: a mock's output. */
static const char *const large_keys[] = {"stdout", "stderr", NULL};

int th_config_limits(th_ylimits *lim, th_error *err)
{
    th_ylimits_defaults(lim);
    lim->large_keys = large_keys;
    const char *env = getenv("TOOLHOST_CONFIG_MAX_BYTES");
    uint64_t x;
    if (!env || !*env)
        return 0;
    if (th_parse_size(env, &x) < 0 || x < KIB || x > GIB)
        return th_error_set(err, TH_ECONFIG,
                            "TOOLHOST_CONFIG_MAX_BYTES: '%.64s' is not a "
                            "size from 1KiB to 1GiB (such as 16MiB)",
                            env);
    lim->max_bytes = (size_t)x;
    return 0;
}

int th_config_parse(const char *name, const char *dir, const char *text,
                    size_t len, th_config **out, th_error *err)
{
    return th_config_parse_ex(name, dir, text, len, NULL, NULL, out, err);
}

static int parse_report(const char *name, const char *dir, const char *text,
                        size_t len, const th_ylimits *lim, th_ystats *stats,
                        th_config_report_fn report, void *ud,
                        th_config **out, th_error *err);

int th_config_parse_ex(const char *name, const char *dir, const char *text,
                       size_t len, const th_ylimits *lim, th_ystats *stats,
                       th_config **out, th_error *err)
{
    return parse_report(name, dir, text, len, lim, stats, NULL, NULL, out,
                        err);
}

static int parse_report(const char *name, const char *dir, const char *text,
                        size_t len, const th_ylimits *lim, th_ystats *stats,
                        th_config_report_fn report, void *ud,
                        th_config **out, th_error *err)
{
    *out = NULL;
    th_error_clear(err);
    if (!name)
        name = "<config>";
    th_ylimits own;
    th_ystats scratch = {0};
    if (!lim) {
        if (th_config_limits(&own, err) < 0) {
            th_error_prefix(err, "%s: ", name);
            return err->code;
        }
        lim = &own;
    }
    th_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", name);
    th_cfctx c = {.file = name, .cfg = cfg, .err = err,
               .stats = stats ? stats : &scratch, .report = report,
               .report_ud = ud};
    th_strset_init(&c.plugin_names, &c.stats->key_probes);
    th_strset_init(&c.toolset_names, &c.stats->key_probes);
    th_strset_init(&c.mock_tools, &c.stats->key_probes);
    int rc;
    cfg->path = strdup(name);
    cfg->dir = abs_dir(dir);
    if (!cfg->path || !cfg->dir) {
        rc = th_cf_nomem(&c);
        goto fail;
    }
    c.dir = cfg->dir;
    host_init(&cfg->host);
    if ((rc = sections_init(&c, cfg)) < 0)
        goto fail;
    th_limits_defaults(&cfg->limits);
    if ((rc = th_ynode_parse_ex(name, text, len, lim, c.stats, &cfg->root,
                                err)) < 0)
        goto fail;
    if (cfg->root && !th_ynode_is_null(cfg->root) &&
        cfg->root->kind != TH_Y_MAP) {
        char d[64];
        rc = th_cf_err(&c, cfg->root,
                    "the config must be a map with keys such as host, "
                    "plugins, toolsets; got %s",
                    describe(cfg->root, d, sizeof d));
        goto fail;
    }
    th_cfkey host[N_HOST_ALL + 1], top[N_TOP_KEYS + TH_SECTIONS_MAX + 1];
    host_table(cfg, host);
    top_table(cfg, top, host);
    if ((rc = apply_map(&c, cfg->root, top, cfg, "the config")) < 0) {
        if (c.n_errs) { /* reported: *err is the first */
            *err = c.first;
            rc = TH_ECONFIG;
        }
        goto fail;
    }
    if (!th_ynode_get(cfg->root, "host") &&
        (rc = host_check(&c, NULL, &cfg->host)) < 0)
        goto fail;
    if (cfg->n_toolsets == 0 && (rc = default_toolset(&c, cfg)) < 0)
        goto fail;
    if ((rc = sections_finish(&c, cfg)) < 0)
        goto fail;
    *out = cfg;
    rc = 0;
    cfg = NULL;
fail:
    th_strset_destroy(&c.plugin_names);
    th_strset_destroy(&c.toolset_names);
    th_strset_destroy(&c.mock_tools);
    th_config_free(cfg);
    return rc;
}

/* The whole file in one bounded read: a regular file of at most
 * lim->max_bytes (a FIFO, a device or a folder is refused before reading,
 * and opening does not wait for a FIFO's writer). */
static int read_config(const char *path, const th_ylimits *lim, th_buf *b,
                       th_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return th_error_set(err, TH_EIO, "%s: cannot open: %s", path,
                            strerror(errno));
    struct stat st;
    int rc = 0;
    char a[32];
    fmt_size(lim->max_bytes, a, sizeof a);
    if (fstat(fd, &st) < 0) {
        rc = th_error_set(err, TH_EIO, "%s: cannot read: %s", path,
                          strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = th_error_set(err, TH_ECONFIG,
                          "%s: not a regular file (a %s); a config must be "
                          "a file",
                          path,
                          S_ISDIR(st.st_mode)    ? "folder"
                          : S_ISFIFO(st.st_mode) ? "pipe"
                          : S_ISSOCK(st.st_mode) ? "socket"
                                                 : "device");
    } else if ((uint64_t)st.st_size > lim->max_bytes) {
        rc = th_error_set(err, TH_ECONFIG,
                          "%s: the config is %llu bytes, more than the limit "
                          "of %s (TOOLHOST_CONFIG_MAX_BYTES)",
                          path, (unsigned long long)st.st_size, a);
    } else if (th_buf_reserve(b, (size_t)st.st_size) < 0) {
        rc = th_error_set(err, TH_ENOMEM, "%s: out of memory", path);
    }
    /* Read to the end, but never past the limit (the file may grow). */
    char chunk[16384];
    while (rc == 0) {
        size_t room = lim->max_bytes + 1 - b->len;
        ssize_t got = read(fd, chunk, room < sizeof chunk ? room
                                                          : sizeof chunk);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            rc = th_error_set(err, TH_EIO, "%s: cannot read: %s", path,
                              strerror(errno));
        else if (got == 0)
            break;
        else if (th_buf_append(b, chunk, (size_t)got) < 0)
            rc = th_error_set(err, TH_ENOMEM, "%s: out of memory", path);
        else if (b->len > lim->max_bytes)
            rc = th_error_set(err, TH_ECONFIG,
                              "%s: the config is more than the limit of %s "
                              "(TOOLHOST_CONFIG_MAX_BYTES)",
                              path, a);
    }
    close(fd);
    return rc;
}

int th_config_load(const char *path, th_config **out, th_error *err)
{
    return th_config_load_report(path, out, err, NULL, NULL);
}

int th_config_load_report(const char *path, th_config **out, th_error *err,
                          th_config_report_fn report, void *ud)
{
    *out = NULL;
    th_error_clear(err);
    th_ylimits lim;
    if (th_config_limits(&lim, err) < 0) {
        th_error_prefix(err, "%s: ", path);
        return err->code;
    }
    th_buf b = TH_BUF_INIT;
    int rc = read_config(path, &lim, &b, err);
    if (rc < 0) {
        th_buf_destroy(&b);
        return rc;
    }
    /* The folder, canonical: ${CONFIG_DIR} and relative paths use it. */
    char *copy = strdup(path);
    if (!copy) {
        th_buf_destroy(&b);
        return th_error_set(err, TH_ENOMEM, "%s: out of memory", path);
    }
    char *slash = strrchr(copy, '/');
    const char *dir = ".";
    if (slash == copy)
        dir = "/";
    else if (slash) {
        *slash = '\0';
        dir = copy;
    }
    char *real = realpath(dir, NULL);
    rc = parse_report(path, real ? real : dir,
                      b.data ? (const char *)b.data : "", b.len, &lim, NULL,
                      report, ud, out, err);
    free(real);
    free(copy);
    th_buf_destroy(&b);
    if (rc == 0 && th_ynode_is_null((*out)->root)) {
        /* An empty file (or one of comments only) is a mistake: a config
         * truncated or not yet written, not a request for the defaults. */
        th_config_free(*out);
        *out = NULL;
        rc = th_error_set(err, TH_ECONFIG,
                          "%s:1:1: the config is empty (no keys, only blank "
                          "lines or comments); write at least a 'plugins:' "
                          "list, or '{}' for the defaults",
                          path);
    }
    return rc;
}

const th_toolset_cfg *th_config_toolset(const th_config *cfg,
                                        const char *name)
{
    for (size_t i = 0; cfg && name && i < cfg->n_toolsets; i++)
        if (strcmp(cfg->toolsets[i].name, name) == 0)
            return &cfg->toolsets[i];
    return NULL;
}

static bool env_equal(const th_plugin_cfg *a, const th_plugin_cfg *b)
{
    if (a->n_env != b->n_env)
        return false;
    for (size_t i = 0; i < a->n_env; i++)
        if (strcmp(a->env[i], b->env[i]) != 0)
            return false;
    return true;
}

bool th_plugin_cfg_equal(const th_plugin_cfg *a, const th_plugin_cfg *b)
{
    return strcmp(a->name, b->name) == 0 && strcmp(a->path, b->path) == 0 &&
           a->optional == b->optional &&
           a->allow_insecure == b->allow_insecure &&
           th_ynode_equal(a->config, b->config) &&
           a->isolation == b->isolation && a->workers == b->workers &&
           a->process_limits.memory == b->process_limits.memory &&
           a->process_limits.cpu_seconds == b->process_limits.cpu_seconds &&
           a->process_limits.open_files == b->process_limits.open_files &&
           a->process_limits.processes == b->process_limits.processes &&
           a->network == b->network && a->kill_grace_ms == b->kill_grace_ms &&
           a->crash_loop == b->crash_loop &&
           a->unhealthy_retry_ms == b->unhealthy_retry_ms &&
           a->content_timeout_ms == b->content_timeout_ms &&
           a->worker_max_frame == b->worker_max_frame &&
           (a->user ? b->user && strcmp(a->user, b->user) == 0 : !b->user) &&
           a->uid_lo == b->uid_lo && a->uid_hi == b->uid_hi &&
           env_equal(a, b);
}

/* ---- after the plugins are loaded ------------------------------------------------ */

/* One miss: reported and kept going, or the answer at once. */
static int tool_miss(th_error *first, th_error *e,
                     void (*report)(void *rud, const th_error *e), void *rud)
{
    if (first->code == 0)
        *first = *e;
    if (!report)
        return 1;
    report(rud, e);
    return 0;
}

int th_config_check_tools_all(const th_config *cfg,
                              bool (*has_tool)(void *ud, const char *name),
                              void *ud,
                              void (*report)(void *rud, const th_error *e),
                              void *rud, th_error *err)
{
    th_error first, e;
    th_error_clear(&first);
    const char *f = cfg->path;
    for (size_t i = 0; i < cfg->n_toolsets; i++) {
        const th_toolset_cfg *ts = &cfg->toolsets[i];
        for (size_t j = 0; j < ts->n_tools; j++) {
            if (strcmp(ts->tools[j], "*") == 0 || has_tool(ud, ts->tools[j]))
                continue;
            th_error_set(&e, TH_ECONFIG,
                         "%s:%d:%d: toolset '%s' names tool '%s', which no "
                         "plugin provides",
                         f, ts->tool_marks[j].line, ts->tool_marks[j].col,
                         ts->name, ts->tools[j]);
            if (tool_miss(&first, &e, report, rud))
                goto out;
        }
        for (size_t j = 0; j < ts->n_overrides; j++) {
            const th_tool_override *o = &ts->overrides[j];
            if (has_tool(ud, o->tool))
                continue;
            th_error_set(&e, TH_ECONFIG,
                         "%s:%d:%d: 'tool_overrides' of toolset '%s' names "
                         "tool '%s', which no plugin provides",
                         f, o->line, o->col, ts->name, o->tool);
            if (tool_miss(&first, &e, report, rud))
                goto out;
        }
    }
    for (size_t i = 0; i < cfg->n_tags; i++) {
        const th_tag_cfg *t = &cfg->tags[i];
        for (size_t j = 0; j < t->n_tools; j++) {
            if (strpbrk(t->tools[j], "*?[") || has_tool(ud, t->tools[j]))
                continue; /* a pattern may match nothing yet */
            th_error_set(&e, TH_ECONFIG,
                         "%s:%d:%d: tag '%s' names tool '%s', which no "
                         "plugin provides",
                         f, t->tool_marks[j].line, t->tool_marks[j].col,
                         t->name, t->tools[j]);
            if (tool_miss(&first, &e, report, rud))
                goto out;
        }
    }
    for (size_t j = 0; j < cfg->n_defer_tools; j++) {
        const char *t = cfg->defer_tools[j];
        if (strpbrk(t, "*?[") || has_tool(ud, t))
            continue; /* a pattern may match nothing yet */
        th_error_set(&e, TH_ECONFIG,
                     "%s:%d:%d: 'defer_tools' names tool '%s', which no "
                     "plugin provides",
                     f, cfg->defer_marks[j].line, cfg->defer_marks[j].col, t);
        if (tool_miss(&first, &e, report, rud))
            goto out;
    }
    for (size_t i = 0; i < cfg->n_mocks; i++) {
        const th_mock_cfg *m = &cfg->mocks[i];
        if (has_tool(ud, m->tool))
            continue;
        th_error_set(&e, TH_ECONFIG,
                     "%s:%d:%d: a mock names tool '%s', which no plugin "
                     "provides",
                     f, m->line, m->col, m->tool);
        if (tool_miss(&first, &e, report, rud))
            goto out;
    }
out:
    if (err)
        *err = first;
    return first.code;
}

int th_config_check_tools(const th_config *cfg,
                          bool (*has_tool)(void *ud, const char *name),
                          void *ud, th_error *err)
{
    return th_config_check_tools_all(cfg, has_tool, ud, NULL, NULL, err);
}

int th_config_check_tags(const th_config *cfg,
                         bool (*has_tag)(void *ud, const char *tag), void *ud,
                         void (*report)(void *rud, const th_error *e),
                         void *rud, th_error *err)
{
    th_error first, e;
    th_error_clear(&first);
    for (size_t i = 0; i < cfg->n_toolsets; i++) {
        const th_toolset_cfg *ts = &cfg->toolsets[i];
        for (size_t j = 0; j < ts->n_tags; j++) {
            if (ts->tag_refs[j] || has_tag(ud, ts->tags[j]))
                continue;
            th_error_set(&e, TH_ECONFIG,
                         "%s:%d:%d: toolset '%s' selects tag '%s', which "
                         "neither an entry of 'tags:' nor a plugin's tool "
                         "declares",
                         cfg->path, ts->tag_marks[j].line,
                         ts->tag_marks[j].col, ts->name, ts->tags[j]);
            if (tool_miss(&first, &e, report, rud))
                goto out;
        }
    }
out:
    if (err && first.code)
        *err = first;
    return first.code;
}
