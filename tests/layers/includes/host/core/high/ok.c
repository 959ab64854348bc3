/* check-includes fixture: the upper room including the lower one is allowed. */
#include "h.h"
#include "low/l.h"
