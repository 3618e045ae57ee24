/*
 * test_pack_rule.c - which groups get packed copies of their operands
 * (cuda_gemm_pack_bytes, kernels/grouped_gemm.cu), and how many bytes.
 *
 * The rule is host code: it needs the CUDA build but no GPU, so it runs
 * wherever the kernels are built. A group packs when every problem either
 * takes the Hopper kernel as it lies or is a 16-bit GEMM it cannot read in
 * place, on the usual tile, not of the 64-row stages, with at least 24 Mi
 * products in at most 256 MiB of copies; only the operands that cannot be
 * read in place are copied, each as rows of k rounded up to 8 elements,
 * 128-byte aligned.
 */
#include <criterion/criterion.h>
#include <stdint.h>

#include "include/gemmd.h"
#include "kernels/cuda_gemm.h"
#include "scheduler/tiles.h"

#define ALIGNED 0x10000000ull

/* A 16-bit GEMM of m x n x k: A stored along K (trans_a T) or along M
 * (N), B along K (N) or along N (T), leading dimensions the least plus
 * pad, A and B at ALIGNED plus `off` bytes. */
static struct gemmd_kproblem gemm(uint32_t m, uint32_t n, uint32_t k, int a_k, int b_k, uint32_t pad, uint64_t off)
{
        struct gemmd_kproblem p = {0};

        p.kind = SCHED_GEMM;
        p.dtype = GEMMD_BF16;
        p.m = m;
        p.n = n;
        p.k = k;
        p.trans_a = a_k ? 1 : 0;
        p.trans_b = b_k ? 0 : 1;
        p.lda = (a_k ? k : m) + pad;
        p.ldb = (b_k ? k : n) + pad;
        p.ldc = m;
        p.a = ALIGNED + off;
        p.b = ALIGNED + (1ull << 30) + off;
        p.c = ALIGNED + (2ull << 30);
        p.alpha = 1.f;
        return p;
}

/* Bytes of one packed copy of `rows` rows of K k. */
static size_t copy_bytes(uint32_t rows, uint32_t k)
{
        return ((size_t)rows * ((k + 7) / 8 * 8) * 2 + 127) / 128 * 128;
}

static const struct sched_shape usual = {128, 128, 64};

Test(pack_rule, aligned_groups_take_no_copy)
{
        struct gemmd_kproblem p[4];

        for (int i = 0; i < 4; i++)
                p[i] = gemm(1024, 1024, 1024, 1, 1, 0, 0);
        cr_assert_eq(cuda_gemm_pack_bytes(p, 4, usual), 0);
        cr_assert_eq(cuda_gemm_pack_bytes(NULL, 4, usual), 0);
        cr_assert_eq(cuda_gemm_pack_bytes(p, 0, usual), 0);
}

Test(pack_rule, odd_leading_dimensions_copy_both_operands)
{
        struct gemmd_kproblem p[2] = {gemm(512, 384, 1023, 1, 1, 0, 0), gemm(512, 384, 1024, 1, 1, 0, 0)};

        /* the second qualifies as it lies: only the first is copied */
        cr_assert_eq(cuda_gemm_pack_bytes(p, 2, usual), copy_bytes(512, 1023) + copy_bytes(384, 1023));
        /* an address off the 16-byte grid (2-byte aligned) packs too */
        p[1] = gemm(512, 384, 1024, 1, 1, 0, 2);
        cr_assert_eq(cuda_gemm_pack_bytes(p, 2, usual),
                     copy_bytes(512, 1023) + copy_bytes(384, 1023) + copy_bytes(512, 1024) + copy_bytes(384, 1024));
}

Test(pack_rule, only_the_operand_not_in_place_is_copied)
{
        /* A along M (column-major op N), B along K and aligned */
        struct gemmd_kproblem nn = gemm(1024, 512, 768, 0, 1, 0, 0);
        /* A along K, B along N */
        struct gemmd_kproblem tt = gemm(1024, 512, 768, 1, 0, 0, 0);
        /* both along M and N, odd leading dimensions */
        struct gemmd_kproblem both = gemm(1024, 512, 768, 0, 0, 3, 0);

        cr_assert_eq(cuda_gemm_pack_bytes(&nn, 1, usual), copy_bytes(1024, 768));
        cr_assert_eq(cuda_gemm_pack_bytes(&tt, 1, usual), copy_bytes(512, 768));
        cr_assert_eq(cuda_gemm_pack_bytes(&both, 1, usual), copy_bytes(1024, 768) + copy_bytes(512, 768));
}

Test(pack_rule, too_few_products)
{
        /* 256^3 is 16 Mi products: under the threshold alone, over it two
         * together (those 24 Mi of the measured crossover) */
        struct gemmd_kproblem p[2] = {gemm(256, 256, 256, 0, 1, 0, 0), gemm(256, 256, 256, 0, 1, 0, 0)};

        cr_assert_eq(cuda_gemm_pack_bytes(p, 1, usual), 0);
        cr_assert_eq(cuda_gemm_pack_bytes(p, 2, usual), 2 * copy_bytes(256, 256));
        /* 304^3 alone is over it */
        p[0] = gemm(304, 304, 304, 0, 1, 0, 0);
        cr_assert_eq(cuda_gemm_pack_bytes(p, 1, usual), copy_bytes(304, 304));
}

Test(pack_rule, too_many_bytes)
{
        /* A along M of 16384 x 8192 bf16 is 256 MiB: at the cap; a row more
         * of K is past it */
        struct gemmd_kproblem p = gemm(16384, 128, 8192, 0, 1, 0, 0);

        cr_assert_eq(cuda_gemm_pack_bytes(&p, 1, usual), (size_t)256 << 20);
        p = gemm(16384, 128, 8200, 0, 1, 0, 0);
        cr_assert_eq(cuda_gemm_pack_bytes(&p, 1, usual), 0);
}

Test(pack_rule, a_problem_no_copy_helps_keeps_the_group_off)
{
        struct gemmd_kproblem p[2] = {gemm(1024, 1024, 1023, 1, 1, 0, 0), gemm(1024, 1024, 1023, 1, 1, 0, 0)};
        const size_t one = copy_bytes(1024, 1023) * 2;

        cr_assert_eq(cuda_gemm_pack_bytes(p, 2, usual), 2 * one);
        /* an f32 problem off the grid: the sm_80 kernel runs the group */
        p[1].dtype = GEMMD_F32;
        cr_assert_eq(cuda_gemm_pack_bytes(p, 2, usual), 0);
        /* an f16 one packs beside a bf16 one (the rule does not mix types;
         * groups never do) */
        p[1].dtype = GEMMD_F16;
        cr_assert_eq(cuda_gemm_pack_bytes(p, 2, usual), 2 * one);
        /* a SYR2K off the grid */
        p[1].kind = SCHED_SYR2K;
        p[1].n = p[1].m;
        cr_assert_eq(cuda_gemm_pack_bytes(p, 2, usual), 0);
}

Test(pack_rule, the_usual_tile_only)
{
        struct gemmd_kproblem p = gemm(1024, 1024, 1023, 1, 1, 0, 0);
        const struct sched_shape wide = {128, 192, 64}, narrow = {128, 64, 64};

        cr_assert_gt(cuda_gemm_pack_bytes(&p, 1, usual), 0);
        cr_assert_eq(cuda_gemm_pack_bytes(&p, 1, wide), 0);
        cr_assert_eq(cuda_gemm_pack_bytes(&p, 1, narrow), 0);
}

Test(pack_rule, not_the_64_row_stages)
{
        /* every GEMM of at most 64 rows: the stages of 64 rows of A use the
         * third map slot that packed copies are named in */
        struct gemmd_kproblem p[64];

        for (int i = 0; i < 64; i++)
                p[i] = gemm(64, 512, 1023, 1, 1, 0, 0);
        cr_assert_eq(cuda_gemm_pack_bytes(p, 64, usual), 0);
        p[0].m = 65;
        cr_assert_gt(cuda_gemm_pack_bytes(p, 64, usual), 0);
}
