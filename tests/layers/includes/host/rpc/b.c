/* check-includes fixture: a front including private core headers. */
#include "priv.h"
#include "../core/priv.h"
