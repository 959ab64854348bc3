/* A private core header (check-includes fixture). */
