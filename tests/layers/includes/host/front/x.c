/* check-includes fixture: a front folder (front) including a private core header. */
#include "priv.h"
