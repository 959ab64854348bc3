/* check-includes fixture: a front folder (http) including a private core header. */
#include "priv.h"
