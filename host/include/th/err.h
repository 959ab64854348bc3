/* th/err.h - the host's one error table: negative codes, names, messages.
 *
 * Every host function that can fail returns 0 or a negative TH_E* code.  The
 * same table gives the tool error codes a caller (often an LLM) reads in
 * {ok: false, error: {code, message}}: th_err_name() is that code.
 */
#ifndef TH_ERR_H
#define TH_ERR_H

#include <stdarg.h>
#include <stddef.h>

/* XX(NAME, number, tool error code, default message) */
#define TH_ERRNO_MAP(XX)                                                      \
    XX(NOMEM, -1, "internal", "out of memory")                                \
    XX(INVAL, -2, "invalid_request", "invalid argument")                      \
    XX(ARGS, -3, "invalid_arguments", "invalid arguments")                    \
    XX(UNKNOWN_TOOL, -4, "unknown_tool", "unknown tool")                      \
    XX(PERM, -5, "permission_denied", "permission denied")                    \
    XX(DUPLICATE, -6, "duplicate_call", "a call of this tool is running")     \
    XX(TIMEOUT, -7, "timeout", "the call timed out")                          \
    XX(CANCELLED, -8, "cancelled", "the call was cancelled")                  \
    XX(BUSY, -9, "busy", "the host is busy, try again later")                 \
    XX(NOTFOUND, -10, "not_found", "not found")                               \
    XX(LOAD, -11, "load_error", "the plugin could not be loaded")             \
    XX(CONFIG, -12, "config_error", "invalid configuration")                  \
    XX(IO, -13, "io_error", "input/output error")                             \
    XX(PROTO, -14, "protocol_error", "protocol error")                        \
    XX(STATE, -15, "bad_state", "not allowed in this state")                  \
    XX(TOOL, -16, "tool_error", "the tool misbehaved")                        \
    XX(LIMIT, -17, "limit_exceeded", "a configured limit was exceeded")       \
    XX(INTERNAL, -18, "internal", "internal error")                           \
    XX(FAILED, -19, "tool_failed", "the tool reported a failure")             \
    XX(PLUGIN_CRASHED, -20, "plugin_crashed",                                 \
       "the plugin's worker process died during the call")                  \
    XX(RATE_LIMITED, -21, "rate_limited",                                     \
       "a rate limit or quota of the caller was reached")                    \
    XX(DISABLED, -22, "tool_disabled",                                        \
       "an operator disabled the tool (the message says why)")               \
    XX(UNAVAILABLE, -23, "unavailable",                                       \
       "the tool's backend is unavailable, try again later")                 \
    XX(BACKEND_TIMEOUT, -24, "backend_timeout",                               \
       "the tool's backend did not answer in time")

enum {
    TH_OK = 0,
#define TH_ERR_ENUM(name, num, code, msg) TH_E##name = (num),
    TH_ERRNO_MAP(TH_ERR_ENUM)
#undef TH_ERR_ENUM
};

/* The tool error code string for `err` ("invalid_arguments", ...);
 * "internal" for an unknown value.  Static storage. */
const char *th_err_name(int err);

/* The first TH_E* code whose tool error code is `name` ("timeout" ->
 * TH_ETIMEOUT); TH_EINTERNAL when none is. */
int th_err_from_name(const char *name);

/* The default message for `err`.  Static storage. */
const char *th_strerror(int err);

/* An error with words, filled by the function that failed.  Callers own
 * the storage (usually on the stack).  `msg` is always NUL-terminated. */
typedef struct th_error {
    int code;       /* a TH_E* value, 0 when no error */
    char msg[1024]; /* a full sentence without a trailing newline */
} th_error;

/* Sets err->code and formats err->msg; returns `code` so that a function
 * can `return th_error_set(err, TH_EARGS, "...")`.  `err` may be NULL. */
int th_error_set(th_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int th_error_setv(th_error *err, int code, const char *fmt, va_list ap);

/* Prefixes err->msg with formatted text (e.g. a file name and ": "). */
void th_error_prefix(th_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static inline void th_error_clear(th_error *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}

#endif
