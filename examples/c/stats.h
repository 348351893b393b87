#ifndef STATS_H
#define STATS_H
#include <stddef.h>

/* Small helpers defined in other translation units, so ThinLTO has something to import. */
double stats_mean(const double *xs, size_t n);
double stats_stddev(const double *xs, size_t n);
size_t text_words(const char *s, double *lengths, size_t max);
unsigned text_hash(const char *s);
#endif
