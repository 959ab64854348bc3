/* check-includes fixture: a private header of a front folder. */
