/* check-includes fixture: the code runtime (host/lua, a front) including a private core header. */
#include "priv.h"
