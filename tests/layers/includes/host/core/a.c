/* check-includes fixture: the core including a front header and libuv. */
#include "front/rpc.h"
#include <uv.h>
#include "mcp.h"
