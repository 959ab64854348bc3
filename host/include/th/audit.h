/* th/audit.h - the audit log (host.audit, docs/ops.md "Audit log"): one
 * JSON line per call that ended -- who (uid, token or NATS user), through
 * which front, which toolset and tool, a SHA-256 of the arguments, the
 * outcome and error code, the duration, the bytes out, the caller's W3C
 * traceparent -- to a file (reopened at every reload, for logrotate) or
 * to the journal.
 *
 * The core writes the lines itself, at the end of every call
 * (th_audit_call_end in call.c): a front only hands the traceparent it
 * was sent (th_call_opts.traceparent).  A line that cannot be written is
 * counted (th_audit_stats.write_errors, /metrics) and logged, never
 * dropped in silence.  Any thread. */
#ifndef TH_AUDIT_H
#define TH_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/err.h"
#include "th/host.h"

typedef struct th_audit th_audit;

/* One call's line; every string may be NULL (written as null). */
typedef struct th_audit_call {
    int64_t wall_ms;          /* when the call ended (epoch ms) */
    const th_principal *who;  /* the session's principal */
    uint64_t session;
    const char *front, *toolset, *tool;
    uint64_t call_id;
    const char *args_sha256;  /* 64 hex digits, or NULL */
    const char *outcome;      /* ok, failed, error, timeout, cancelled,
                                 duplicate, busy, denied */
    int error;                /* 0, or the TH_E* code (th_err_name) */
    double dur_ms;
    uint64_t bytes_out;       /* stdout + stderr after limits */
    uint64_t task_id;         /* an async task's id, or 0 */
    const char *traceparent;  /* checked W3C traceparent, or NULL */
} th_audit_call;

typedef struct th_audit_stats {
    uint64_t lines;        /* lines written */
    uint64_t write_errors; /* lines that could not be written */
    uint64_t reopens;      /* reopens (reloads) */
} th_audit_stats;

/* Opens `target`: "journald", or a file (created 0600, appended to).
 * 0 or TH_E* with err. */
int th_audit_open(const char *target, th_audit **out, th_error *err);
void th_audit_close(th_audit *a);
/* Opens the file again by its name (logrotate renamed it); the old
 * descriptor stays in use if the new open fails (logged, 0 returned only
 * on success).  Nothing for the journal. */
int th_audit_reopen(th_audit *a);
void th_audit_write(th_audit *a, const th_audit_call *c);
void th_audit_get_stats(const th_audit *a, th_audit_stats *out);
const char *th_audit_target(const th_audit *a);

/* SHA-256 of `len` bytes as 64 lowercase hex digits and a NUL. */
void th_audit_sha256_hex(const uint8_t *p, size_t len, char hex[65]);
/* Whether s is a W3C traceparent ("00-" 32 hex "-" 16 hex "-" 2 hex,
 * lowercase, ids not all zero, version not ff). */
bool th_audit_traceparent_ok(const char *s);

/* The host's audit log, or NULL (no host.audit). */
th_audit *th_host_audit(th_host *h);

#endif
