/* th/log.h - the host's log: one line per event on stderr.
 *
 *   2026-11-25T21:30:00.123Z info  event=reload.ok reload #1 ok (12 ms)
 *
 * th_log() may be called from any thread; each line is written with one
 * write(2), so lines from different threads never interleave.
 */
#ifndef TH_LOG_H
#define TH_LOG_H

#include <stdbool.h>

#include "toolhost/plugin.h" /* TOOLHOST_LOG_* levels */

/* The current level (TOOLHOST_LOG_*); lines above it are dropped. */
void th_log_set_level(int level);
int th_log_get_level(void);
/* Sends lines to `fd` instead of 2 (tests); -1 silences the log. */
void th_log_set_fd(int fd);
/* From now on the log goes to a close-on-exec duplicate of stderr at a
 * high descriptor (>= 64, or >= 3 under a low fd limit), checked to still
 * be that file before each line: closing fds 0-2 later (a plugin) never
 * sends the log elsewhere.  Call once at start, with fds 0-2 open.
 * Returns the descriptor, or -1 (errno) with the log left as it was. */
int th_log_own_stderr(void);
/* One line with a fixed message; async-signal-safe (for signal handlers:
 * no locks, no allocation, no stdio). */
void th_log_raw(int level, const char *msg);
/* host.log_format: nonzero writes each line as one JSON object
 * (docs/ops.md, "Log lines", has the schema):
 *   {"ts":"2026-11-25T21:30:00.123Z","level":"debug","event":"call.end",
 *    "front":"rpc","session":3,"tool":"echo","call_id":17,"dur_ms":0.2,
 *    "outcome":"ok","msg":"event=call.end front=rpc session=3 ..."}
 * The message's key=value words become keys (integers and decimals as
 * numbers); the event is the value of an event= word (th_log_event), else
 * the message's first plain word. */
void th_log_set_format(int json);
/* Journal mode: each line starts with "<N>", the syslog priority
 * (sd-daemon(3)), and text lines carry no time (the journal adds it).
 * th_log_own_stderr() turns it on when stderr is the journal; this sets
 * it by hand (tests). */
void th_log_set_journal(int on);
/* Whether fd is the stream $JOURNAL_STREAM ("DEV:INO") names. */
bool th_log_is_journal(int fd);
/* "error", "warn", "info", "debug" -> level, or -1. */
int th_log_level_from_name(const char *name);
const char *th_log_level_name(int level);

void th_log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A line with a stable event name (docs/ops.md lists them): the message
 * starts "event=NAME " (the text format shows it so; the JSON format takes
 * it as "event").  NAME: [a-z0-9_.]+, e.g. "call.end", "reload.ok". */
void th_log_event(int level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define th_log_error(...) th_log(TOOLHOST_LOG_ERROR, __VA_ARGS__)
#define th_log_warn(...) th_log(TOOLHOST_LOG_WARN, __VA_ARGS__)
#define th_log_info(...) th_log(TOOLHOST_LOG_INFO, __VA_ARGS__)
#define th_log_debug(...) th_log(TOOLHOST_LOG_DEBUG, __VA_ARGS__)

#endif
