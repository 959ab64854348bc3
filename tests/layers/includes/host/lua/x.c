/* check-includes fixture: the code runtime (a front) including a private core header. */
#include "priv.h"
