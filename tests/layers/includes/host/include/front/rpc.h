/* check-includes fixture: a front header under host/include. */
