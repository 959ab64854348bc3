/* check-includes fixture: a front folder (nats) including a private core header. */
#include "priv.h"
