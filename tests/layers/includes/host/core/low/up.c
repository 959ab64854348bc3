/* check-includes fixture: a room including a private header of the room above it. */
#include "high/h.h"
