/* check-includes fixture: a front folder (mcp) including a private core header. */
#include "priv.h"
