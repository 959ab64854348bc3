/* disable.c - tools disabled at run time (th/host.h: th_host_disable).
 *
 * A short list of entries (a tool name, or an fnmatch pattern over tool
 * names), each with the reason an operator gave, who gave it and when;
 * at most TH_DISABLED_MAX.  A call of a tool an entry matches is answered
 * `tool_disabled` with the reason, before it is validated or counted
 * against a rate limit.  The set belongs to the running host: reloads
 * keep it, a restart empties it.
 *
 * Threads: any; one mutex, and a count the call path reads without it
 * (nothing disabled: one relaxed load per call). */
#include "disable.h"

#include <fnmatch.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "manager.h"
#include "th/clock.h"
#include "th/log.h"

typedef struct dis_entry {
    char *pattern, *reason, *by;
    int64_t since_ms; /* wall clock */
} dis_entry;

struct th_disabled {
    pthread_mutex_t mu;
    dis_entry e[TH_DISABLED_MAX];
    atomic_uint n;
};

th_disabled *th_disabled_new(void)
{
    th_disabled *d = calloc(1, sizeof *d);
    if (d)
        pthread_mutex_init(&d->mu, NULL);
    return d;
}

static void entry_free(dis_entry *e)
{
    free(e->pattern);
    free(e->reason);
    free(e->by);
    memset(e, 0, sizeof *e);
}

void th_disabled_free(th_disabled *d)
{
    if (!d)
        return;
    for (unsigned i = 0; i < atomic_load(&d->n); i++)
        entry_free(&d->e[i]);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

bool th_disabled_any(const th_disabled *d)
{
    return d && atomic_load_explicit(&d->n, memory_order_relaxed) != 0;
}

/* "tag:NAME": the tools that carry the tag in the call's config or
 * whose plugin declares it (ABI 1.5); else a name or an fnmatch
 * pattern. */
static bool matches(const dis_entry *e, const th_config *cfg,
                    const th_tool *t)
{
    const char *tool = t->name;
    if (strncmp(e->pattern, "tag:", 4) == 0)
        return th_config_tool_has_tag(cfg, e->pattern + 4, tool) ||
               th_tool_has_tag(t, e->pattern + 4);
    return strcmp(e->pattern, tool) == 0 || fnmatch(e->pattern, tool, 0) == 0;
}

bool th_disabled_check(th_disabled *d, const th_config *cfg,
                       const th_tool *t, char *msg, size_t cap)
{
    const char *tool = t->name;
    bool hit = false;
    pthread_mutex_lock(&d->mu);
    for (unsigned i = 0; i < atomic_load(&d->n) && !hit; i++) {
        const dis_entry *e = &d->e[i];
        if (!matches(e, cfg, t))
            continue;
        hit = true;
        char date[32] = "";
        time_t t = (time_t)(e->since_ms / 1000);
        struct tm tm;
        if (gmtime_r(&t, &tm))
            strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
        bool tag = strncmp(e->pattern, "tag:", 4) == 0;
        snprintf(msg, cap, "tool '%s' is disabled%s%s%s: %s (since %s, by "
                 "%s)", tool, tag ? " (tag '" : "", tag ? e->pattern + 4 : "",
                 tag ? "')" : "", e->reason, date, e->by);
    }
    pthread_mutex_unlock(&d->mu);
    return hit;
}

/* Printable text of at most `max` bytes, or NULL. */
static char *text_copy(const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    if (n > max)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return NULL;
    return strdup(s);
}

int th_host_disable(th_host *h, const char *pattern, const char *reason,
                    const char *by, th_error *err)
{
    th_disabled *d = h->disabled;
    if (!pattern || !*pattern || strlen(pattern) > 256)
        return th_error_set(err, TH_EINVAL, "disable: give a tool name or "
                            "pattern of 1 to 256 bytes");
    if (strncmp(pattern, "tag:", 4) == 0 && !pattern[4])
        return th_error_set(err, TH_EINVAL, "disable: 'tag:' needs a tag "
                            "name (tag:NAME: a name of the config's tags: "
                            "or a tag a plugin declares)");
    if (!reason || !*reason)
        return th_error_set(err, TH_EINVAL, "disable: give a reason (it is "
                            "what a caller of the tool is told)");
    dis_entry ne = {0};
    ne.pattern = text_copy(pattern, 256);
    ne.reason = text_copy(reason, 512);
    ne.by = strdup(by && *by ? by : "?");
    ne.since_ms = th_wall_ms();
    if (!ne.pattern || !ne.reason || !ne.by) {
        bool bad = ne.by && (!ne.pattern || !ne.reason);
        entry_free(&ne);
        return bad ? th_error_set(err, TH_EINVAL, "disable: the pattern and "
                                  "the reason are one line of printable "
                                  "text (a reason: at most 512 bytes)")
                   : th_error_set(err, TH_ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&d->mu);
    unsigned n = atomic_load(&d->n), i;
    for (i = 0; i < n && strcmp(d->e[i].pattern, ne.pattern) != 0; i++)
        ;
    int rc = 0;
    if (i < n) { /* the same pattern again: the new reason replaces it */
        entry_free(&d->e[i]);
        d->e[i] = ne;
    } else if (n == TH_DISABLED_MAX) {
        rc = th_error_set(err, TH_ELIMIT, "disable: %d entries are the most "
                          "a host keeps; enable one first, or use a "
                          "pattern", TH_DISABLED_MAX);
        entry_free(&ne);
    } else {
        d->e[n] = ne;
        atomic_store(&d->n, n + 1);
    }
    pthread_mutex_unlock(&d->mu);
    if (rc == 0)
        th_log_warn("tools matching '%s' disabled by %s: %s", pattern,
                    by && *by ? by : "?", reason);
    return rc;
}

int th_host_enable(th_host *h, const char *pattern)
{
    th_disabled *d = h->disabled;
    int rc = TH_ENOTFOUND;
    pthread_mutex_lock(&d->mu);
    unsigned n = atomic_load(&d->n);
    for (unsigned i = 0; pattern && i < n; i++) {
        if (strcmp(d->e[i].pattern, pattern) != 0)
            continue;
        entry_free(&d->e[i]);
        d->e[i] = d->e[n - 1];
        memset(&d->e[n - 1], 0, sizeof d->e[n - 1]);
        atomic_store(&d->n, n - 1);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&d->mu);
    if (rc == 0)
        th_log_info("tools matching '%s' enabled again", pattern);
    return rc;
}

int th_host_disabled_foreach(th_host *h,
                             int (*fn)(const th_disabled_view *v, void *ud),
                             void *ud)
{
    th_disabled *d = h->disabled;
    int rc = 0;
    pthread_mutex_lock(&d->mu);
    for (unsigned i = 0; i < atomic_load(&d->n) && rc == 0; i++) {
        th_disabled_view v = {d->e[i].pattern, d->e[i].reason, d->e[i].by,
                              d->e[i].since_ms};
        rc = fn(&v, ud);
    }
    pthread_mutex_unlock(&d->mu);
    return rc;
}
