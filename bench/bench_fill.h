/* bench_fill.h - random device buffers for gemmbench (see bench_fill.cu). */
#ifndef GEMMD_BENCH_FILL_H
#define GEMMD_BENCH_FILL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fills n elements of dtype (enum gemmd_dtype) at device pointer p with
 * values uniform in [-1, 1] (never zero; f64 with all 53 bits random)
 * derived from seed, on the legacy
 * default stream. Returns 0 or -1 when the launch failed. */
int bench_fill(void *p, size_t n, int dtype, uint64_t seed);

/* The f64 reference of one f32 problem in gemmbench's layout (A m x k and
 * B n x k, both contiguous along k; C m x n column-major, ldc = m): C = A
 * B^T, or for a SYR2K (m == n) A B^T + B A^T, every product and sum in
 * double, whole C. Device pointers, legacy default stream. Returns 0 or -1
 * when the launch failed. */
int bench_ref_f64(const float *a, const float *b, double *c, uint32_t m, uint32_t n, uint32_t k, int syr2k);

/* A double-double reference of one f64 problem in the same layout, for
 * columns 0, step, 2 step, ... of C only: column y * step of C is hi + lo
 * at hi[y * m], lo[y * m] (m elements each). Every product is exact and
 * every sum carries its rounding error, so hi + lo is far closer than any
 * f64 result. Returns 0 or -1 when the launch failed. */
int bench_ref_dd(const double *a, const double *b, double *hi, double *lo, uint32_t m, uint32_t n, uint32_t k,
                 int syr2k, uint32_t step);

/* One thread that spins for `us` microseconds of the GPU's clock, on the
 * legacy default stream: work queued behind it starts the moment it ends,
 * whatever the host took to queue it. Returns 0 or -1 when the launch
 * failed. */
int bench_spin(uint32_t us);

#ifdef __cplusplus
}
#endif
#endif
