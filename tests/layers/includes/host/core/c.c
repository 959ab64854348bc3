/* check-includes fixture: a core file naming the code runtime (host/lua). */
#include "th/code.h"
#include "th/projection.h"
