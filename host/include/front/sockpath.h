/* front/sockpath.h - where `toolhost serve` listens by default, and the checks
 * on the folder of a socket before the server binds it.
 *
 * The default address (when neither --listen nor host.listen gives one),
 * first match wins:
 *   1. $XDG_RUNTIME_DIR/toolhost/toolhost.sock  (XDG_RUNTIME_DIR set to an
 *      absolute path)
 *   2. /run/toolhost/toolhost.sock              (root)
 *   3. /tmp/toolhost-UID/toolhost.sock          (anyone else)
 * `toolhost call/list/reload --connect` with no address uses the same
 * rule, so a client finds a server run by the same user.
 *
 * The folder of a socket is made ready by th_sock_prepare(): a missing
 * folder is created (one level, mode 0700, owned by the host's uid); an
 * existing one must be a folder owned by the host's uid (or root, for an
 * explicit address) that nobody else can write to.  The default folder is
 * checked strictly: owned by us, not a symlink, not group/world writable.
 * An explicit address in a shared sticky folder (/tmp) is allowed with a
 * warning: clients check the server's uid (see th_rpc_client_connect).
 */
#ifndef TH_SOCKPATH_H
#define TH_SOCKPATH_H

#include <stdbool.h>
#include <stddef.h>

#include "th/err.h"

/* The longest socket path a sockaddr_un holds (108 bytes with the NUL). */
#define TH_SOCK_PATH_MAX 107

/* The default address, "unix:PATH", into buf (cap bytes; 128 is enough
 * for any valid one).  Fails (TH_ECONFIG) only when the path would be too
 * long for a Unix socket. */
int th_sock_default_addr(char *buf, size_t cap, th_error *err);

/* The path of `addr` ("unix:PATH" or "/PATH") when it fits a Unix socket;
 * a clear TH_ECONFIG error otherwise (empty, not unix:, too long). */
int th_sock_addr_path(const char *addr, const char **path, th_error *err);

/* Readies the folder of the socket at `addr` for binding (see above).
 * `strict`: the folder is toolhost's own (the default address).
 * `socket_mode`: the mode the socket will get (0: 0600); when it lets the
 * group or others in, a folder created here gets search permission (0711)
 * so that they can reach the socket.  Logs one line when it creates the
 * folder or warns.  0, or TH_ECONFIG/TH_EIO with a message naming the
 * folder and what to do. */
int th_sock_prepare(const char *addr, bool strict, unsigned socket_mode,
                    th_error *err);

#endif
