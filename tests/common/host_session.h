/* host_session.h - a host opened from YAML text and one trusted session of
 * the calling user (the RPC front), for suites that drive the real call
 * path (th_call_sync/th_call_start) without a server. */
#ifndef TH_TEST_HOST_SESSION_H
#define TH_TEST_HOST_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "th/host.h"

/* Parses yaml (name: the file name in error messages) and opens the host;
 * the process's log level is kept as it was (a host.log_level in yaml
 * does not outlive the open).  NULL with the reason on stderr. */
th_host *th_test_host_open(const char *name, const char *yaml);
/* The host of th_test_host_open() with build/plugins/echo.so, log level
 * error, shutdown_grace 50ms. */
th_host *th_test_echo_host_open(void);
/* th_test_host_open() and
 * a session; 0, or -1 with the reason on stderr (nothing left open). */
int th_test_host_session_open(const char *name, const char *yaml,
                              th_host **h, th_session **s);
/* th_call_sync() of tool with the arguments given as JSON text (an
 * object), a timeout of timeout_ms and o.may_block; r is filled (the
 * caller destroys it).  The call's return code. */
int th_test_call_json(th_session *s, const char *tool, const char *json,
                      int64_t timeout_ms, bool may_block, th_result_copy *r);
/* The same with the options given whole. */
int th_test_call_json_opts(th_session *s, const char *tool, const char *json,
                           const th_call_opts *o, th_result_copy *r);
/* The stdout of a result as a C string ("" when empty). */
const char *th_test_out(const th_result_copy *r);
/* Closes what th_test_host_session_open() opened (either may be NULL). */
void th_test_host_session_close(th_host *h, th_session *s);

#endif
