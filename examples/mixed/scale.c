#include "kernels.h"

void scale_u64(uint64_t *xs, size_t n, uint64_t k) {
    for (size_t i = 0; i < n; i++) xs[i] *= k;
}
