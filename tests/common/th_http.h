/* th_http.h - raw HTTP/1.1 over loopback for the suites that talk to the
 * host's HTTP listeners (MCP over HTTP, /metrics): the port a listener
 * named in the server's log, one request on a connection of its own
 * (Connection: close), the answer read whole.  Written by hand on purpose:
 * the suites send what a client library would refuse to (bad headers,
 * truncated bodies, slow reads).  For tests only: they abort the run when
 * a socket cannot be made. */
#ifndef TH_TEST_HTTP_H
#define TH_TEST_HTTP_H

#include <stddef.h>

/* The port of the last line of the log file `log` that holds `what` and
 * then "127.0.0.1:PORT" (e.g. what = "(Streamable HTTP) on http"); 0 when
 * there is none. */
unsigned th_test_log_port(const char *log, const char *what);

/* A TCP connection to 127.0.0.1:port (rcvbuf > 0: that SO_RCVBUF first);
 * the fd, or -1 when refused. */
int th_test_tcp_connect(unsigned port, int rcvbuf);

/* A TCP connection to 127.0.0.1:port from 127.0.0.<from> (all of 127/8
 * is loopback: a per-address budget of one test client is its own); the
 * fd, or -1 when refused. */
int th_test_tcp_from(unsigned port, int from);

/* Sends all of p[0..n) (no SIGPIPE, EINTR retried); 0, or -1 when the
 * peer stopped taking it. */
int th_test_send_all(int fd, const void *p, size_t n);

/* Sends "METHOD PATH HTTP/1.1" with Host, Connection: close, Accept:
 * application/json, text/event-stream, the extra header lines `hdrs`
 * ("Name: v\r\n"..., may be NULL), Content-Type: application/json when
 * there is a body, Content-Length, then the body (NULL: none).  No
 * SIGPIPE.  0 when all went out, -1 when the head did not, 1 when the
 * peer stopped taking the body (it may have answered already: 413). */
int th_test_http_send(int fd, const char *method, const char *path,
                      const char *hdrs, const char *body);

/* Reads the answer until end of file, until `until` appears in it (NULL:
 * end of file only) or timeout_ms passed; *out: the text (head and body,
 * NUL-terminated, malloc()ed, never NULL).  The status of its status line,
 * 0 when there is none. */
int th_test_http_read(int fd, const char *until, int timeout_ms, char **out);

/* One request on a connection of its own: connect, send, read to the end
 * (at most timeout_ms), close.  The status (0: no status line), or -1 when
 * the connection was refused or the head could not be sent; *out as for
 * th_test_http_read (an empty text after -1). */
int th_test_http(unsigned port, const char *method, const char *path,
                 const char *hdrs, const char *body, int timeout_ms,
                 char **out);

#endif
