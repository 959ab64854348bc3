/* rate.c - per-caller rate limits and quotas (rate.h, `rate_limits:`).
 *
 * Each rule of the config that matches a call (its users, its tools)
 * counts the call in one bucket, named by the rule and, after its `per`,
 * the caller and the tool.  A bucket holds a token bucket (`rate` calls
 * per second refilled up to `burst`), the calls running now
 * (`concurrent`) and the calls of the current UTC day (`daily`).  A call
 * is admitted when every bucket it counts in has room, and then takes
 * from all of them at once, so that a refused call costs nothing.
 *
 * Buckets live in one chained hash table under one mutex, held for a few
 * comparisons per call; only hosts with rules pay it.  The table is
 * bounded (RATE_MAX_BUCKETS): when it is full, idle buckets (nothing
 * running, the token bucket full, the day's count from an earlier day)
 * go; when none is idle the call is refused, never admitted unlimited.
 * Buckets outlive a config reload (by name), so a reload does not hand
 * every caller a fresh burst. */
#include "rate.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th/err.h"
#include "th/log.h"
#include "manager.h"

#define RATE_MAX_BUCKETS 65536u
#define RATE_MAX_MATCH 16      /* rules one call counts in */
#define RATE_LOG_NS (10 * 1000000000LL) /* one log line per rule per 10 s */
#define RATE_LOG_RULES 64

typedef struct bucket {
    struct bucket *next;
    uint64_t hash;
    double tokens;     /* of the rate bucket */
    double burst;      /* the rule's, as last seen: idle test */
    int64_t last_ns;   /* tokens were refilled up to here */
    uint32_t inflight; /* calls holding a slot */
    uint32_t day_count;
    int64_t day;       /* the UTC day day_count counts */
    char key[];        /* rule \x1f caller [\x1f tool] */
} bucket;

/* The concurrent-call slots one admitted call holds. */
typedef struct hold {
    size_t n;
    bucket *b[RATE_MAX_MATCH];
} hold;

typedef struct rule_log {
    char name[72];
    int64_t last_ns;   /* of the last line; 0: never */
    uint64_t quiet;    /* refusals not logged since */
} rule_log;

struct th_rate {
    pthread_mutex_t mu;
    bucket **tab;
    size_t cap, n;
    atomic_uint_fast64_t refused;
    th_u64map holds;   /* call id -> hold, of calls holding slots */
    rule_log logs[RATE_LOG_RULES];
};

th_rate *th_rate_new(void)
{
    th_rate *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->cap = 256;
    if (!(r->tab = calloc(r->cap, sizeof *r->tab))) {
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    th_u64map_init(&r->holds);
    return r;
}

void th_rate_free(th_rate *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->cap; i++)
        for (bucket *b = r->tab[i], *nx; b; b = nx) {
            nx = b->next;
            free(b);
        }
    free(r->tab);
    th_u64map_destroy(&r->holds);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

uint64_t th_rate_refused(const th_rate *r)
{
    return r ? atomic_load(&((th_rate *)r)->refused) : 0;
}

/* FNV-1a, 64 bits: the keys are the config's names and authenticated
 * callers, not an attacker's free choice of strings. */
static uint64_t hash_of(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static bool grow(th_rate *r)
{
    size_t cap = r->cap * 2;
    bucket **t = calloc(cap, sizeof *t);
    if (!t)
        return false;
    for (size_t i = 0; i < r->cap; i++)
        for (bucket *b = r->tab[i], *nx; b; b = nx) {
            nx = b->next;
            b->next = t[b->hash & (cap - 1)];
            t[b->hash & (cap - 1)] = b;
        }
    free(r->tab);
    r->tab = t;
    r->cap = cap;
    return true;
}

/* A bucket that holds nothing worth keeping at `now_ns` / `day`. */
static bool idle(const bucket *b, int64_t now_ns, double rate, int64_t day)
{
    if (b->inflight || (b->day == day && b->day_count))
        return false;
    double t = b->tokens + (double)(now_ns - b->last_ns) / 1e9 * rate;
    return rate <= 0 || t >= b->burst;
}

/* Drops idle buckets (rate unknown here: a bucket idle for a minute has
 * refilled any rate of at least burst/60 per second). */
static void sweep(th_rate *r, int64_t now_ns, int64_t day)
{
    for (size_t i = 0; i < r->cap; i++)
        for (bucket **pp = &r->tab[i]; *pp;) {
            bucket *b = *pp;
            if (idle(b, now_ns, b->burst / 60.0, day) &&
                now_ns - b->last_ns >= 60 * 1000000000LL) {
                *pp = b->next;
                free(b);
                r->n--;
            } else {
                pp = &b->next;
            }
        }
}

static bucket *find_or_add(th_rate *r, const char *key, size_t klen,
                           const th_rate_cfg *rule, int64_t now_ns,
                           int64_t day)
{
    uint64_t h = hash_of(key, klen);
    for (bucket *b = r->tab[h & (r->cap - 1)]; b; b = b->next)
        if (b->hash == h && strncmp(b->key, key, klen) == 0 &&
            b->key[klen] == '\0')
            return b;
    if (r->n >= RATE_MAX_BUCKETS) {
        sweep(r, now_ns, day);
        if (r->n >= RATE_MAX_BUCKETS)
            return NULL;
    }
    if (r->n >= r->cap && !grow(r))
        return NULL;
    bucket *b = malloc(sizeof *b + klen + 1);
    if (!b)
        return NULL;
    memcpy(b->key, key, klen);
    b->key[klen] = '\0';
    b->hash = h;
    b->tokens = b->burst = rule->burst;
    b->last_ns = now_ns;
    b->inflight = b->day_count = 0;
    b->day = day;
    b->next = r->tab[h & (r->cap - 1)];
    r->tab[h & (r->cap - 1)] = b;
    r->n++;
    return b;
}

static bool rule_matches(const th_rate_cfg *rule, const th_principal *who,
                         const char *tool)
{
    bool t = rule->n_tools == 0;
    for (size_t i = 0; i < rule->n_tools && !t; i++)
        t = fnmatch(rule->tools[i], tool, 0) == 0;
    if (!t)
        return false;
    bool u = rule->n_users == 0;
    for (size_t i = 0; i < rule->n_users && !u; i++)
        u = th_principal_is(who, rule->users[i]);
    return u;
}

/* The caller as it names buckets and messages. */
static void caller_name(const th_principal *who, char *buf, size_t cap)
{
    if (who->user)
        snprintf(buf, cap, "%s", who->user);
    else
        snprintf(buf, cap, "uid %" PRIu32, who->uid);
}

/* One line per rule per RATE_LOG_NS while it bites, with how many
 * refusals went unlogged since the last. */
static void log_refusal(th_rate *r, const char *rule, const char *msg,
                        const char *tool, int64_t now_ns)
{
    rule_log *l = NULL;
    for (size_t i = 0; i < RATE_LOG_RULES && !l; i++)
        if (!r->logs[i].name[0] || strcmp(r->logs[i].name, rule) == 0)
            l = &r->logs[i];
    if (!l)
        l = &r->logs[RATE_LOG_RULES - 1]; /* shared by the rest */
    if (!l->name[0])
        snprintf(l->name, sizeof l->name, "%s", rule);
    if (l->last_ns && now_ns - l->last_ns < RATE_LOG_NS) {
        l->quiet++;
        return;
    }
    th_log_warn("rate_limit: refused a call of %s: %s (%" PRIu64
                " more refused by this rule since the last line)",
                tool, msg, l->quiet);
    l->last_ns = now_ns;
    l->quiet = 0;
}

static int64_t day_of(int64_t wall_s)
{
    return wall_s >= 0 ? wall_s / 86400 : -1;
}

int th_rate_admit(th_rate *r, const th_config *cfg, const th_principal *who,
                  const char *tool, uint64_t call_id, int64_t now_ns,
                  int64_t wall_s, bool *held, uint64_t *retry_ms, char *msg,
                  size_t cap)
{
    *held = false;
    *retry_ms = 0;
    if (!r || !cfg->n_rate_limits || who->trusted)
        return 0;
    char caller[96];
    caller_name(who, caller, sizeof caller);
    int64_t day = day_of(wall_s);
    const th_rate_cfg *rules[RATE_MAX_MATCH];
    bucket *bs[RATE_MAX_MATCH];
    size_t n = 0;
    int rc = 0;
    const char *refused_by = "rate_limits";
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < cfg->n_rate_limits && rc == 0; i++) {
        const th_rate_cfg *rule = &cfg->rate_limits[i];
        if (!rule_matches(rule, who, tool))
            continue;
        refused_by = rule->name; /* if it refuses */
        if (n == RATE_MAX_MATCH) {
            snprintf(msg, cap,
                     "more than %d rate limits match this call; the host "
                     "refuses it rather than skip one",
                     RATE_MAX_MATCH);
            rc = TH_ERATE_LIMITED;
            break;
        }
        char key[256];
        int k = rule->per == TH_RATE_PER_ALL
                    ? snprintf(key, sizeof key, "%s", rule->name)
                : rule->per == TH_RATE_PER_CALLER_TOOL
                    ? snprintf(key, sizeof key, "%s\x1f%s\x1f%s", rule->name,
                               caller, tool)
                    : snprintf(key, sizeof key, "%s\x1f%s", rule->name,
                               caller);
        if (k < 0 || (size_t)k >= sizeof key)
            k = sizeof key - 1; /* names are bounded: cannot happen */
        bucket *b = find_or_add(r, key, (size_t)k, rule, now_ns, day);
        if (!b) {
            snprintf(msg, cap,
                     "rate limit '%s': the host tracks %u callers' buckets "
                     "already, none idle; retry later",
                     rule->name, RATE_MAX_BUCKETS);
            *retry_ms = 1000;
            rc = TH_ERATE_LIMITED;
            break;
        }
        b->burst = rule->burst;
        if (rule->rate > 0) {
            double t = b->tokens +
                       (double)(now_ns - b->last_ns) / 1e9 * rule->rate;
            b->tokens = t > rule->burst ? rule->burst : t;
            b->last_ns = now_ns;
            if (b->tokens < 1.0) {
                uint64_t ms =
                    (uint64_t)ceil((1.0 - b->tokens) / rule->rate * 1000.0);
                *retry_ms = ms ? ms : 1;
                snprintf(msg, cap,
                         "rate limit '%s': %g calls per second (burst %" PRIu32
                         ") for %s; retry after %" PRIu64 " ms",
                         rule->name, rule->rate, rule->burst, caller,
                         *retry_ms);
                rc = TH_ERATE_LIMITED;
                break;
            }
        } else {
            b->last_ns = now_ns;
        }
        if (rule->concurrent && b->inflight >= rule->concurrent) {
            snprintf(msg, cap,
                     "rate limit '%s': at most %" PRIu32
                     " concurrent calls for %s; retry when one of them ends",
                     rule->name, rule->concurrent, caller);
            rc = TH_ERATE_LIMITED;
            break;
        }
        if (rule->daily) {
            if (b->day != day) {
                b->day = day;
                b->day_count = 0;
            }
            if (b->day_count >= rule->daily) {
                int64_t left = (day + 1) * 86400 - wall_s;
                *retry_ms = (uint64_t)(left > 0 ? left : 1) * 1000;
                snprintf(msg, cap,
                         "rate limit '%s': the daily quota of %" PRIu32
                         " calls is used for %s; retry after %" PRIu64
                         " ms (00:00 UTC)",
                         rule->name, rule->daily, caller, *retry_ms);
                rc = TH_ERATE_LIMITED;
                break;
            }
        }
        rules[n] = rule;
        bs[n++] = b;
    }
    if (rc != 0) {
        atomic_fetch_add(&r->refused, 1);
        log_refusal(r, refused_by, msg, tool, now_ns);
        pthread_mutex_unlock(&r->mu);
        return rc;
    }
    hold h = {0};
    for (size_t i = 0; i < n; i++) {
        if (rules[i]->rate > 0)
            bs[i]->tokens -= 1.0;
        if (rules[i]->daily)
            bs[i]->day_count++;
        if (rules[i]->concurrent) {
            bs[i]->inflight++;
            h.b[h.n++] = bs[i];
        }
    }
    if (h.n) {
        hold *hp = malloc(sizeof *hp);
        if (!hp || th_u64map_put(&r->holds, call_id, hp) != 0) {
            free(hp);
            for (size_t i = 0; i < h.n; i++)
                h.b[i]->inflight--;
            pthread_mutex_unlock(&r->mu);
            return TH_ENOMEM;
        }
        *hp = h;
        *held = true;
    }
    pthread_mutex_unlock(&r->mu);
    return 0;
}

void th_rate_release(th_rate *r, uint64_t call_id)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    hold *hp = th_u64map_del(&r->holds, call_id);
    for (size_t i = 0; hp && i < hp->n; i++)
        hp->b[i]->inflight--;
    pthread_mutex_unlock(&r->mu);
    free(hp);
}
