/* check-includes fixture: the core API including a private header. */
#include "priv.h"
