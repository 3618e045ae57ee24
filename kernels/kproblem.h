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

#include "gemmd.h"
#include "scheduler/tiles.h"

struct gemmd_kproblem {
        uint64_t a, b, c;      /* addresses of A, B, C (element 0,0) */
        int64_t lda, ldb, ldc; /* column-major leading dimensions, elements */
        uint32_t m, n, k;      /* SYR2K: m == n */
        float alpha, beta; /* rounded to float: what the f32, f16 and bf16 kernels use */
        uint8_t kind;    /* enum sched_kind */
        uint8_t dtype;   /* enum gemmd_dtype: A, B and C share it */
        uint8_t trans_a; /* 0 = N, 1 = T; SYR2K: the op of A and B */
        uint8_t trans_b;
        uint8_t uplo;    /* SYR2K: 0 lower, 1 upper */
        uint8_t tf32;    /* f32 may use TF32 tensor cores */
        uint8_t pad[2];
        double alpha_f64, beta_f64; /* as sent: what the f64 kernels use */
};

/*
 * Whether p's layout is the one the Hopper kernel's tensor maps read: a
 * GEMM with A stored m x k and B stored n x k (trans_a = T, trans_b = N) or
 * a SYR2K with op T, both contiguous along K, of a type it runs, with
 * leading dimensions multiples of 16 bytes, at least k and below 2^37.
 * The kernel also needs A and B 16-byte aligned (cuda_gemm.h); the daemon
 * asks this before their addresses are resolved, to choose a tile.
 */
static inline int kproblem_tma_layout(const struct gemmd_kproblem *p)
{
        const int b16 = p->dtype == GEMMD_F16 || p->dtype == GEMMD_BF16;
        const int64_t vec = b16 ? 8 : 4; /* elements per 16 bytes */
        const int kmaj = p->trans_a == 1 && (p->kind == SCHED_SYR2K || p->trans_b == 0);

        return (p->kind == SCHED_GEMM || p->kind == SCHED_SYR2K) && (b16 || p->dtype == GEMMD_F32) && kmaj &&
               p->m > 0 && p->n > 0 && p->k > 0 && p->lda % vec == 0 && p->ldb % vec == 0 &&
               p->lda >= (int64_t)p->k && p->ldb >= (int64_t)p->k && p->lda < ((int64_t)1 << 37) &&
               p->ldb < ((int64_t)1 << 37);
}

#endif /* GEMMD_KPROBLEM_H */
