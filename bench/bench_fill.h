/* bench_fill.h - random device buffers for gemmbench (see bench_fill.cu). */
#ifndef GEMMD_BENCH_FILL_H
#define GEMMD_BENCH_FILL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fills n elements of dtype (enum gemmd_dtype) at device pointer p with
 * values uniform in [-1, 1] (never zero) derived from seed, on the legacy
 * default stream. Returns 0 or -1 when the launch failed. */
int bench_fill(void *p, size_t n, int dtype, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif
