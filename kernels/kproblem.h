/*
 * kproblem.h - one problem of a group, as every kernel (CPU or CUDA) reads it.
 *
 * Plain C, no CUDA types: the daemon fills an array of these for a group,
 * with operand addresses already resolved to memory the executing device
 * can reach, and storage normalized to column-major. The same layout is
 * copied to the GPU byte for byte.
 */
#ifndef GEMMD_KPROBLEM_H
#define GEMMD_KPROBLEM_H

#include <stdint.h>

struct gemmd_kproblem {
        uint64_t a, b, c;      /* addresses of A, B, C (element 0,0) */
        int64_t lda, ldb, ldc; /* column-major leading dimensions, elements */
        uint32_t m, n, k;      /* SYR2K: m == n */
        float alpha, beta;
        uint8_t kind;    /* enum sched_kind */
        uint8_t dtype;   /* enum gemmd_dtype: A, B and C share it */
        uint8_t trans_a; /* 0 = N, 1 = T; SYR2K: the op of A and B */
        uint8_t trans_b;
        uint8_t uplo;    /* SYR2K: 0 lower, 1 upper */
        uint8_t tf32;    /* f32 may use TF32 tensor cores */
        uint8_t pad[2];
};

#endif /* GEMMD_KPROBLEM_H */
