/* A private header of the upper room (check-includes fixture). */
