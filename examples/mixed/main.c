#include <stdio.h>
#include <string.h>
#include "kernels.h"

int main(void) {
    const char *msg = "The quick brown fox jumps over the lazy dog";
    uint64_t xs[10];
    for (int i = 0; i < 10; i++) xs[i] = (uint64_t)(i + 1);
    scale_u64(xs, 10, 3);
    printf("crc32=%08x sum=%llu\n", (unsigned)crc32_update(0, (const unsigned char *)msg, strlen(msg)),
           (unsigned long long)sum_u64(xs, 10));
    return 0;
}
