/* check-includes fixture: a front folder (cli) including a private core header. */
#include "priv.h"
