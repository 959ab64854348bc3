/* metrics.c - the Prometheus text endpoint of front/metrics.h: a GET on
 * /metrics renders the host's numbers (th_host_stats_foreach,
 * th_host_mgr_stats, the reloader's counters, the process's RSS) in the
 * text exposition format: HELP and TYPE once per family, label values
 * escaped, histograms as cumulative _bucket{le} lines ending in +Inf, then
 * _sum and _count; toolhost_build_info, the audit log's counters, and the
 * process_* families every Prometheus client library exports (start time,
 * CPU, RSS, open and maximum descriptors, from /proc and getrusage). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "front/fronts.h"
#include "front/metrics.h"
#include "th/audit.h"
#include "th/front.h"
#include "front/mcp_config.h"
#include "front/http.h"
#include "th/log.h"
#include "th/reload.h"

struct th_metrics {
    th_host *h;
    th_http_server **srv;
    size_t n_srv;
    char (*paths)[256];
};

int th_metrics_label(th_buf *out, const char *s)
{
    int e = 0;
    for (; *s && !e; s++) {
        if (*s == '\\')
            e = th_buf_puts(out, "\\\\");
        else if (*s == '"')
            e = th_buf_puts(out, "\\\"");
        else if (*s == '\n')
            e = th_buf_puts(out, "\\n");
        else
            e = th_buf_append(out, s, 1);
    }
    return e;
}

static int family(th_buf *b, const char *name, const char *type,
                  const char *help)
{
    return th_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name,
                         type);
}

/* The per-tool families are written one family at a time over every tool,
 * so the tools are walked once per family. */
typedef struct walk {
    th_buf *b;
    int which;
    int e;
} walk;

enum { W_CALLS, W_OUTCOME, W_LATE, W_ASKS, W_HIST, W_N };

static int sample(th_buf *b, const char *name, const char *tool,
                  const char *lname, const char *lval, uint64_t v)
{
    int e = th_buf_printf(b, "%s{tool=\"", name);
    e |= th_metrics_label(b, tool);
    if (lname)
        e |= th_buf_printf(b, "\",%s=\"%s", lname, lval);
    e |= th_buf_printf(b, "\"} %llu\n", (unsigned long long)v);
    return e;
}

/* The label values of `outcome`, in TH_OUTCOMES' order (th/host.h), and
 * the counts of a th_tool_stats `st` or a th_group_stats `g` in it. */
#define OUTCOME_LABEL(label, member) label,
static const char *const outcome_names[TH_OUTCOMES_N] = {
    TH_OUTCOMES(OUTCOME_LABEL)};
#undef OUTCOME_LABEL
#define OUTCOME_OF_ST(label, member) st->member,
#define OUTCOME_OF_G(label, member) g->member,

static int tool_fn(const th_tool_stats *st, void *ud)
{
    walk *w = ud;
    th_buf *b = w->b;
    int e = 0;
    switch (w->which) {
    case W_CALLS:
        e |= sample(b, "toolhost_tool_calls_started_total", st->tool, NULL,
                    NULL, st->calls);
        break;
    case W_OUTCOME: {
        const uint64_t v[] = {TH_OUTCOMES(OUTCOME_OF_ST)};
        for (size_t i = 0; i < TH_OUTCOMES_N; i++)
            e |= sample(b, "toolhost_tool_calls_total", st->tool, "outcome",
                        outcome_names[i], v[i]);
        break;
    }
    case W_LATE:
        e |= sample(b, "toolhost_tool_late_results_total", st->tool, NULL,
                    NULL, st->late_results);
        break;
    case W_ASKS:
        e |= sample(b, "toolhost_tool_permission_asks_total", st->tool, NULL,
                    NULL, st->permission_asks);
        break;
    case W_HIST:
        for (unsigned i = 0; i < TH_STATS_LE; i++) {
            char le[32];
            snprintf(le, sizeof le, "%.9g", th_stats_le_s(i));
            e |= sample(b, "toolhost_tool_call_duration_seconds_bucket",
                        st->tool, "le", le, st->lat_le[i]);
        }
        e |= sample(b, "toolhost_tool_call_duration_seconds_bucket", st->tool,
                    "le", "+Inf", st->lat_count);
        e |= th_buf_puts(b, "toolhost_tool_call_duration_seconds_sum{tool=\"");
        e |= th_metrics_label(b, st->tool);
        e |= th_buf_printf(b, "\"} %.9g\n", st->lat_sum_s);
        e |= sample(b, "toolhost_tool_call_duration_seconds_count", st->tool,
                    NULL, NULL, st->lat_count);
        break;
    }
    w->e |= e;
    return e ? -1 : 0;
}

/* Per toolset / per front: one family of outcomes, one histogram. */
typedef struct gwalk {
    th_buf *b;
    const char *kind;  /* "toolset" or "front" */
    bool hist;
    int e;
} gwalk;

static int glabel(th_buf *b, const char *name, const char *lname,
                  const char *lval, const char *l2, const char *v2)
{
    int e = th_buf_printf(b, "%s{%s=\"", name, lname);
    e |= th_metrics_label(b, lval);
    if (l2)
        e |= th_buf_printf(b, "\",%s=\"%s", l2, v2);
    e |= th_buf_puts(b, "\"} ");
    return e;
}

static int group_fn(const th_group_stats *g, void *ud)
{
    gwalk *w = ud;
    if (strcmp(g->kind, w->kind) != 0)
        return 0;
    th_buf *b = w->b;
    char name[96];
    int e = 0;
    if (!w->hist) {
        const uint64_t v[] = {TH_OUTCOMES(OUTCOME_OF_G)};
        snprintf(name, sizeof name, "toolhost_%s_calls_total", w->kind);
        for (size_t i = 0; i < TH_OUTCOMES_N; i++) {
            e |= glabel(b, name, w->kind, g->name, "outcome",
                        outcome_names[i]);
            e |= th_buf_printf(b, "%llu\n", (unsigned long long)v[i]);
        }
    } else {
        snprintf(name, sizeof name, "toolhost_%s_call_duration_seconds_bucket",
                 w->kind);
        for (unsigned i = 0; i < TH_STATS_LE; i++) {
            char le[32];
            snprintf(le, sizeof le, "%.9g", th_stats_le_s(i));
            e |= glabel(b, name, w->kind, g->name, "le", le);
            e |= th_buf_printf(b, "%llu\n", (unsigned long long)g->lat_le[i]);
        }
        e |= glabel(b, name, w->kind, g->name, "le", "+Inf");
        e |= th_buf_printf(b, "%llu\n", (unsigned long long)g->lat_count);
        snprintf(name, sizeof name, "toolhost_%s_call_duration_seconds_sum",
                 w->kind);
        e |= glabel(b, name, w->kind, g->name, NULL, NULL);
        e |= th_buf_printf(b, "%.9g\n", g->lat_sum_s);
        snprintf(name, sizeof name, "toolhost_%s_call_duration_seconds_count",
                 w->kind);
        e |= glabel(b, name, w->kind, g->name, NULL, NULL);
        e |= th_buf_printf(b, "%llu\n", (unsigned long long)g->lat_count);
    }
    w->e |= e;
    return e ? -1 : 0;
}

/* The HELP text of a calls_total family: "Calls ended, per KIND and
 * outcome (ok, failed, ...)." with every label of TH_OUTCOMES; `buf`. */
#define OUTCOME_HELP_MAX 256
#define OUTCOME_WORD(label, member) ", " label
_Static_assert(sizeof("Calls ended, per toolset and outcome ()."
                      TH_OUTCOMES(OUTCOME_WORD)) <= OUTCOME_HELP_MAX,
               "the longest HELP text of a calls_total family fits");
#undef OUTCOME_WORD
static const char *outcome_help(char *buf, size_t n, const char *kind)
{
    size_t at = (size_t)snprintf(buf, n, "Calls ended, per %s and outcome (",
                                 kind);
    for (size_t i = 0; i < TH_OUTCOMES_N && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s", i ? ", " : "",
                               outcome_names[i]);
    if (at < n)
        snprintf(buf + at, n - at, ").");
    return buf;
}

static int groups(th_host *h, th_buf *b)
{
    int e = 0;
    static const char *const kinds[] = {"toolset", "front"};
    for (int k = 0; k < 2; k++) {
        char name[96], help[OUTCOME_HELP_MAX];
        snprintf(name, sizeof name, "toolhost_%s_calls_total", kinds[k]);
        e |= family(b, name, "counter",
                    outcome_help(help, sizeof help, kinds[k]));
        gwalk w = {.b = b, .kind = kinds[k]};
        th_host_group_stats_foreach(h, group_fn, &w);
        snprintf(name, sizeof name, "toolhost_%s_call_duration_seconds",
                 kinds[k]);
        snprintf(help, sizeof help, "Call latency, per %s.", kinds[k]);
        e |= family(b, name, "histogram", help);
        w.hist = true;
        th_host_group_stats_foreach(h, group_fn, &w);
        e |= w.e;
    }
    return e;
}

static int gauge(th_buf *b, const char *name, const char *type,
                 const char *help, double v)
{
    int e = family(b, name, type, help);
    e |= th_buf_printf(b, "%s %.17g\n", name, v);
    return e;
}

/* Connection events, one family per class: fn of
 * th_host_front_events_foreach. */
typedef struct evwalk {
    th_buf *b;
    th_front_event_class cls;
    const char *name;
    int e;
} evwalk;

static int event_fn(const char *front, const char *reason,
                    th_front_event_class cls, uint64_t n, void *ud)
{
    evwalk *w = ud;
    if (cls != w->cls)
        return 0;
    w->e |= th_buf_printf(w->b, "%s{front=\"", w->name);
    w->e |= th_metrics_label(w->b, front);
    if (w->cls != TH_FEV_PROTOCOL)
        w->e |= th_buf_printf(w->b, "\",reason=\"%s", reason);
    w->e |= th_buf_printf(w->b, "\"} %llu\n", (unsigned long long)n);
    return w->e ? -1 : 0;
}

static int front_events(th_host *h, th_buf *b)
{
    static const struct {
        th_front_event_class cls;
        const char *name, *help;
    } fams[] = {
        {TH_FEV_REFUSED, "toolhost_connections_refused_total",
         "Connections and requests refused before a session opened, per "
         "front and reason."},
        {TH_FEV_CLOSED, "toolhost_connections_closed_total",
         "Connections (and MCP event streams) closed by a limit, per front "
         "and reason."},
        {TH_FEV_PROTOCOL, "toolhost_protocol_errors_total",
         "Messages that broke the protocol, per front."},
    };
    int e = 0;
    for (size_t i = 0; i < sizeof fams / sizeof *fams; i++) {
        e |= family(b, fams[i].name, "counter", fams[i].help);
        evwalk w = {.b = b, .cls = fams[i].cls, .name = fams[i].name};
        th_host_front_events_foreach(h, event_fn, &w);
        e |= w.e;
    }
    return e;
}

static int reload_hist(th_buf *b, const th_reload_stats *rs)
{
    int e = family(b, "toolhost_reload_duration_seconds", "histogram",
                   "Reload duration (load, prepare, swap), ok or failed.");
    for (unsigned i = 0; i < TH_RELOAD_LE; i++)
        e |= th_buf_printf(b,
                           "toolhost_reload_duration_seconds_bucket{le=\"%.9g\"}"
                           " %llu\n",
                           th_reload_le_s(i),
                           (unsigned long long)rs->dur_le[i]);
    e |= th_buf_printf(b,
                       "toolhost_reload_duration_seconds_bucket{le=\"+Inf\"} "
                       "%llu\n"
                       "toolhost_reload_duration_seconds_sum %.9g\n"
                       "toolhost_reload_duration_seconds_count %llu\n",
                       (unsigned long long)rs->reloads, rs->dur_sum_s,
                       (unsigned long long)rs->reloads);
    return e;
}

/* ---- the process_* families Prometheus clients export ------------------ */

/* Seconds since the epoch when the process started: /proc/self/stat's
 * starttime (clock ticks after boot) plus /proc/stat's btime; -1 when
 * either is unreadable. */
static double start_time_s(void)
{
    double v = -1;
    unsigned long long start = 0, btime = 0;
    char line[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (f) {
        size_t n = fread(line, 1, sizeof line - 1, f);
        line[n] = '\0';
        fclose(f);
        /* the command (field 2) may hold spaces and ')': after the last */
        const char *p = strrchr(line, ')');
        /* fields 3..22: starttime is field 22, the 20th after ')' */
        for (int i = 0; p && i < 20; i++)
            p = strchr(p + 1, ' ');
        if (p)
            start = strtoull(p + 1, NULL, 10);
    }
    f = fopen("/proc/stat", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "btime ", 6) == 0)
            btime = strtoull(line + 6, NULL, 10);
    if (f)
        fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    if (btime && hz > 0)
        v = (double)btime + (double)start / (double)hz;
    return v;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    long size = 0, res = -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2)
        res = -1;
    fclose(f);
    return res < 0 ? -1 : res * sysconf(_SC_PAGESIZE);
}

/* Open descriptors: the entries of /proc/self/fd but the one the count
 * itself opens. */
static long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n > 0 ? n - 1 : 0;
}

static int process_families(th_buf *b)
{
    int e = 0;
    double st = start_time_s(), cpu = cpu_seconds();
    long rss = rss_bytes(), fds = open_fds();
    struct rlimit rl;
    if (st >= 0)
        e |= gauge(b, "process_start_time_seconds", "gauge",
                   "Start time of the process since unix epoch in seconds.",
                   st);
    if (cpu >= 0)
        e |= gauge(b, "process_cpu_seconds_total", "counter",
                   "Total user and system CPU time spent in seconds.", cpu);
    if (rss >= 0)
        e |= gauge(b, "process_resident_memory_bytes", "gauge",
                   "Resident memory size in bytes.", (double)rss);
    if (fds >= 0)
        e |= gauge(b, "process_open_fds", "gauge",
                   "Number of open file descriptors.", (double)fds);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        e |= gauge(b, "process_max_fds", "gauge",
                   "Maximum number of open file descriptors.",
                   rl.rlim_cur == RLIM_INFINITY ? 1e300
                                                : (double)rl.rlim_cur);
    return e;
}

int th_metrics_render(th_host *h, th_buf *b)
{
    int e = 0;
    static const struct {
        const char *name, *type, *help;
    } fams[W_N] = {
        {"toolhost_tool_calls_started_total", "counter",
         "Calls started, per tool."},
        {"toolhost_tool_calls_total", "counter", NULL /* outcome_help */},
        {"toolhost_tool_late_results_total", "counter",
         "Results discarded after a timeout or cancel, per tool."},
        {"toolhost_tool_permission_asks_total", "counter",
         "Permission requests sent to the client (ask rules), per tool."},
        {"toolhost_tool_call_duration_seconds", "histogram",
         "Call latency from start to final result, per tool."},
    };
    e |= family(b, "toolhost_build_info", "gauge",
                "The toolhost version and the plugin ABI it offers; always 1.");
    e |= th_buf_printf(b, "toolhost_build_info{version=\"%s\",abi=\"%d.%d\"} 1\n",
                       TOOLHOST_VERSION, TOOLHOST_ABI_MAJOR,
                       TOOLHOST_ABI_MINOR);
    for (int i = 0; i < W_N && !e; i++) {
        char help[OUTCOME_HELP_MAX];
        e |= family(b, fams[i].name, fams[i].type,
                    fams[i].help ? fams[i].help
                                 : outcome_help(help, sizeof help, "tool"));
        walk w = {.b = b, .which = i};
        th_host_stats_foreach(h, tool_fn, &w);
        e |= w.e;
    }
    e |= groups(h, b);
    th_mgr_stats ms;
    th_host_mgr_stats(h, &ms);
    e |= gauge(b, "toolhost_workers", "gauge", "Worker threads.",
               (double)ms.workers);
    e |= gauge(b, "toolhost_workers_busy", "gauge",
               "Calls executing now (workers, inline, suspended).",
               (double)ms.running);
    e |= gauge(b, "toolhost_queue_depth", "gauge",
               "Calls waiting for a worker or a concurrency slot.",
               (double)ms.queued);
    e |= gauge(b, "toolhost_live_tasks", "gauge",
               "Acknowledged async tasks not yet done.",
               (double)ms.live_tasks);
    e |= gauge(b, "toolhost_calls_total", "counter", "Calls started.",
               (double)ms.calls_total);
    e |= gauge(b, "toolhost_lost_workers_total", "counter",
               "Workers counted lost (stuck past lost_worker_grace).",
               (double)ms.lost_workers);
    e |= gauge(b, "toolhost_lost_workers", "gauge",
               "Lost workers still stuck now.", (double)ms.lost_workers_now);
    e |= gauge(b, "toolhost_calls_inline_front_total", "counter",
               "Short calls run on a front's own thread (host.short_call_max).",
               (double)ms.inline_front);
    e |= gauge(b, "toolhost_short_demoted_total", "counter",
               "Short tools sent back to workers for holding a front's thread.",
               (double)ms.short_demoted);
    e |= gauge(b, "toolhost_short_stuck_total", "counter",
               "Short calls found still holding a front's thread past "
               "host.short_call_stuck.",
               (double)ms.short_stuck);
    th_front_stats fs[TH_FRONTS_MAX + 1];
    size_t nf = th_host_front_stats(h, fs, TH_FRONTS_MAX + 1);
    e |= family(b, "toolhost_sessions_opened_total", "counter",
                "Sessions (connections) opened, per front.");
    for (size_t i = 0; i < nf; i++)
        e |= th_buf_printf(b, "toolhost_sessions_opened_total{front=\"%s\"} "
                              "%llu\n",
                           fs[i].front, (unsigned long long)fs[i].opened);
    e |= family(b, "toolhost_sessions", "gauge",
                "Sessions (connections) open now, per front.");
    for (size_t i = 0; i < nf; i++)
        e |= th_buf_printf(b, "toolhost_sessions{front=\"%s\"} %llu\n",
                           fs[i].front, (unsigned long long)fs[i].open);
    e |= front_events(h, b);
    th_reloader *r = th_host_reloader(h);
    if (r) {
        th_reload_stats rs;
        th_reload_get_stats(r, &rs);
        e |= family(b, "toolhost_reloads_total", "counter",
                    "Reloads run, by result.");
        e |= th_buf_printf(b, "toolhost_reloads_total{result=\"ok\"} %llu\n"
                              "toolhost_reloads_total{result=\"failed\"} %llu\n",
                           (unsigned long long)rs.ok,
                           (unsigned long long)rs.failed);
        e |= gauge(b, "toolhost_reload_requests_total", "counter",
                   "Reload triggers received.", (double)rs.requests);
        e |= gauge(b, "toolhost_reload_last_swap_seconds", "gauge",
                   "The registry swap of the last reload.",
                   (double)rs.last_swap_ns / 1e9);
        e |= gauge(b, "toolhost_reload_max_swap_seconds", "gauge",
                   "The longest registry swap of any reload.",
                   (double)rs.max_swap_ns / 1e9);
        e |= reload_hist(b, &rs);
    }
    th_audit *au = th_host_audit(h);
    if (au) {
        th_audit_stats as;
        th_audit_get_stats(au, &as);
        e |= gauge(b, "toolhost_audit_lines_total", "counter",
                   "Lines written to the audit log (host.audit).",
                   (double)as.lines);
        e |= gauge(b, "toolhost_audit_write_errors_total", "counter",
                   "Audit lines that could not be written (each is also "
                   "logged).",
                   (double)as.write_errors);
        e |= gauge(b, "toolhost_audit_reopens_total", "counter",
                   "Audit log reopens (every reload, for logrotate).",
                   (double)as.reopens);
    }
    e |= process_families(b);
    return e ? TH_ENOMEM : 0;
}

static enum MHD_Result on_request(void *ud, struct MHD_Connection *c,
                                  const char *method, const char *upload,
                                  size_t *upload_size, void **req_cls)
{
    th_metrics *m = ud;
    (void)upload;
    if (!*req_cls) { /* headers only: wait for the body (none expected) */
        *req_cls = m;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return th_http_reply(c, 405, "text/plain", "GET only\n", "Allow",
                             "GET, HEAD");
    th_buf b;
    th_buf_init(&b);
    if (th_metrics_render(m->h, &b) != 0) {
        th_buf_destroy(&b);
        return th_http_reply(c, 500, "text/plain", "out of memory\n", NULL,
                             NULL);
    }
    size_t len = 0;
    uint8_t *text = th_buf_take(&b, &len);
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type",
                            "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result rc = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return rc;
}

int th_metrics_start(th_host *h, const th_config *cfg, th_metrics **out,
                     th_error *err)
{
    *out = NULL;
    const th_mcp_cfg *mc = th_mcp_config(cfg);
    size_t n = mc ? mc->n_listen_metrics : 0;
    if (n == 0)
        return 0;
    th_metrics *m = calloc(1, sizeof *m);
    if (!m || !(m->srv = calloc(n, sizeof *m->srv)) ||
        !(m->paths = calloc(n, sizeof *m->paths))) {
        th_metrics_stop(m);
        return th_error_set(err, TH_ENOMEM, "out of memory");
    }
    m->h = h;
    for (size_t i = 0; i < n; i++) {
        th_http_url u;
        int rc = th_http_parse_url(mc->listen_metrics[i], &u, err);
        if (rc < 0) {
            th_metrics_stop(m);
            return rc;
        }
        memcpy(m->paths[i], u.path, sizeof u.path);
        th_http_route r = {.path = m->paths[i], .handle = on_request,
                           .ud = m};
        th_http_opts o;
        memset(&o, 0, sizeof o);
        o.url = mc->listen_metrics[i];
        o.allow_remote = mc->allow_remote;
        o.tls_cert = mc->tls_cert;
        o.tls_key = mc->tls_key;
        o.max_connections = 16;
        o.client_timeout_s = 30;
        o.header_timeout_ms = (unsigned)mc->header_timeout_ms;
        o.body_timeout_ms = (unsigned)mc->body_timeout_ms;
        o.max_per_address = mc->max_connections_per_address;
        o.tls_priorities = mc->tls_priorities;
        rc = th_http_start(&o, &r, 1, &m->srv[i], err);
        if (rc < 0) {
            th_metrics_stop(m);
            return rc;
        }
        m->n_srv = i + 1;
        th_log_info("metrics: serving Prometheus metrics on %s",
                    th_http_url_of(m->srv[i]));
    }
    *out = m;
    return 0;
}

unsigned th_metrics_port(const th_metrics *m, size_t i)
{
    return m && i < m->n_srv ? th_http_port(m->srv[i]) : 0;
}

void th_metrics_stop(th_metrics *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_srv; i++)
        th_http_stop(m->srv[i]);
    free(m->srv);
    free(m->paths);
    free(m);
}

/* ---- The descriptor (th/front.h) ----------------------------------------- */

static int metrics_open(th_host *h, void **state, th_error *err)
{
    th_metrics *m = NULL;
    int rc = th_metrics_start(h, th_host_config(h), &m, err);
    *state = m;
    return rc;
}

static void metrics_close(void *state)
{
    th_metrics_stop(state);
}

/* The /metrics entries of host.listen (taken by the mcp section, whose
 * allow_remote and TLS keys they share): Prometheus text, no token. */
const th_front th_metrics_front = {
    .name = "metrics",
    .open = metrics_open,
    .close = metrics_close,
};
