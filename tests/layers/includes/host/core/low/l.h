/* A private header of the lower room (check-includes fixture). */
