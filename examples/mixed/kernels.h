#ifndef KERNELS_H
#define KERNELS_H
#include <stddef.h>
#include <stdint.h>

uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n); /* native: -fno-lto */
uint64_t sum_u64(const uint64_t *xs, size_t n);                        /* native: assembly */
void scale_u64(uint64_t *xs, size_t n, uint64_t k);                    /* bitcode */
#endif
