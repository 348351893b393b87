#include <ctype.h>
#include "stats.h"

size_t text_words(const char *s, double *lengths, size_t max) {
    size_t n = 0, len = 0;
    for (;; s++) {
        if (*s && !isspace((unsigned char)*s)) { len++; continue; }
        if (len && n < max) lengths[n++] = (double)len;
        len = 0;
        if (!*s) return n;
    }
}

unsigned text_hash(const char *s) {
    unsigned h = 2166136261u;
    while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}
