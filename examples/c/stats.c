#include <math.h>
#include "stats.h"

double stats_mean(const double *xs, size_t n) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += xs[i];
    return n ? sum / (double)n : 0.0;
}

double stats_stddev(const double *xs, size_t n) {
    double m = stats_mean(xs, n), acc = 0;
    for (size_t i = 0; i < n; i++) acc += (xs[i] - m) * (xs[i] - m);
    return n ? sqrt(acc / (double)n) : 0.0;
}
