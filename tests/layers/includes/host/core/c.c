/* check-includes fixture: a core file naming the code runtime. */
#include "th/code.h"
