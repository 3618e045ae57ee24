/*
 * cpu_gemm.c - the CPU backend's tile code (see cpu_gemm.h for the
 * semantics and the canonical accumulation order).
 *
 * A tile is computed in sub-blocks of at most BM x BN elements. For each
 * sub-block and each canonical K chunk, the chunk's k range is walked in
 * panels of at most BK: the panel of the left operand (BM x BK) and of the
 * right operand (BK x BN) are widened to the accumulator type (f32, or f64
 * for f64 problems) and packed into micro-panels, then a register-blocked
 * MR x NR micro-kernel adds the panel's terms to the chunk sums. Every
 * output element still sees its terms one at a time in increasing k, each
 * as a rounded multiply then a rounded add, so the blocking never changes
 * the bits. What depends on the accumulator type is in cpu_gemm_acc.h,
 * included below once for float and once for double.
 *
 * Contraction of a * b + c into a fused multiply-add would change the bits
 * on machines that have one. kernels/module.mk compiles this file with
 * -ffp-contract=off, and the pragmas below say the same to GCC and Clang
 * so that no other build of this file can fuse either.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels/cpu_gemm.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "gemmd.h"
#include "kernels/half.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* Sub-block and micro-kernel sizes. BM is a multiple of MR_F32 and MR_F64,
 * BN of NR. The four BM x BK / BK x BN / BM x BN scratch arrays take 64 KiB
 * of stack in float, 128 KiB in double. The f64 micro-tile is half as tall
 * so that its sums still fit the sixteen SSE registers. */
#define BM 64u
#define BN 64u
#define BK 64u
#define MR_F32 8u
#define MR_F64 4u
#define NR 4u

typedef float v4f __attribute__((vector_size(16)));
typedef double v2d __attribute__((vector_size(16)));

/* One operand as a panel source: element (r, p), r an output row or column,
 * p a k index, is x[r + p*ld] when t == 0 and x[p + r*ld] when t == 1. */
struct opnd {
        const void *x;
        int64_t ld;
        int t;
};

/* The sub-block being computed: rows [i0, i0+mb), columns [j0, j0+nb) of C,
 * and the same sizes rounded up to the micro-kernel. */
struct blk {
        uint32_t i0, j0, mb, nb, mbp, nbp;
};

/* The elements of a tile: rows [i0, i1) and columns [j0, j1) of C. */
struct tile {
        const struct gemmd_kproblem *kp;
        uint32_t i0, i1, j0, j1;
        uint32_t tm, tn;
};

static inline uint32_t umin(uint32_t a, uint32_t b) { return a < b ? a : b; }
static inline uint32_t umax(uint32_t a, uint32_t b) { return a > b ? a : b; }
static inline uint32_t rup(uint32_t a, uint32_t b) { return (a + b - 1) / b * b; }

/* Rows of column j (of a block starting at row i0, mb rows) that the problem
 * writes: all for GEMM, the stored triangle for SYR2K. Sets [*lo, *hi) in
 * absolute rows; the range may be empty. */
static inline void col_rows(const struct gemmd_kproblem *kp, uint32_t i0, uint32_t mb, uint32_t j,
                            uint32_t *lo, uint32_t *hi)
{
        *lo = i0;
        *hi = i0 + mb;
        if (kp->kind != SCHED_SYR2K)
                return;
        if (kp->uplo == GEMMD_UPPER)
                *hi = umin(*hi, j + 1);
        else
                *lo = umax(*lo, j);
        if (*lo > *hi)
                *lo = *hi;
}

/* Whether rows [i0, i0+mb) x columns [j0, j0+nb) hold an element of the
 * stored triangle (always, for GEMM). */
static inline int blk_live(const struct gemmd_kproblem *kp, uint32_t i0, uint32_t mb, uint32_t j0,
                           uint32_t nb)
{
        if (kp->kind != SCHED_SYR2K)
                return 1;
        if (kp->uplo == GEMMD_UPPER)
                return i0 <= j0 + nb - 1;
        return i0 + mb - 1 >= j0;
}

/*
 * Packing: rows [r0, r0+nr) and k [p0, p0+kb) of an operand, widened to the
 * accumulator type, into micro-panels of w rows: element (r, p) goes to
 * dst[(r/w)*kb*w + p*w + r%w]. Rows [nr, nrp) are zero-filled.
 */
#define DEFINE_PACK(name, type, acc, widen)                                                    \
        static void name(const struct opnd *o, uint32_t r0, uint32_t nr, uint32_t nrp,        \
                         uint32_t w, uint32_t p0, uint32_t kb, acc *restrict dst)              \
        {                                                                                      \
                const type *x = o->x;                                                          \
                size_t ld = (size_t)o->ld;                                                     \
                for (uint32_t r = nr; r < nrp; r++)                                            \
                        for (uint32_t p = 0; p < kb; p++)                                      \
                                dst[(r / w) * kb * w + p * w + r % w] = 0;                     \
                if (o->t == 0) {                                                               \
                        for (uint32_t p = 0; p < kb; p++) {                                    \
                                const type *col = x + (size_t)(p0 + p) * ld + r0;              \
                                for (uint32_t r = 0; r < nr; r++)                              \
                                        dst[(r / w) * kb * w + p * w + r % w] = widen(col[r]); \
                        }                                                                      \
                } else {                                                                       \
                        for (uint32_t r = 0; r < nr; r++) {                                    \
                                const type *row = x + (size_t)(r0 + r) * ld + p0;              \
                                acc *d = dst + (r / w) * kb * w + r % w;                       \
                                for (uint32_t p = 0; p < kb; p++)                              \
                                        d[p * w] = widen(row[p]);                              \
                        }                                                                      \
                }                                                                              \
        }

#define WIDEN_NONE(v) (v)
DEFINE_PACK(pack_raw_f32, float, float, WIDEN_NONE)
DEFINE_PACK(pack_raw_f16, uint16_t, float, gemmd_f16_to_f32)
DEFINE_PACK(pack_raw_bf16, uint16_t, float, gemmd_bf16_to_f32)
DEFINE_PACK(pack_raw_f64, double, double, WIDEN_NONE)

/* Packs an f32, f16 or bf16 operand into f32 micro-panels. */
static void pack_f32(int dtype, const struct opnd *o, uint32_t r0, uint32_t nr, uint32_t nrp,
                     uint32_t w, uint32_t p0, uint32_t kb, float *restrict dst)
{
        switch (dtype) {
        case GEMMD_F16:
                pack_raw_f16(o, r0, nr, nrp, w, p0, kb, dst);
                break;
        case GEMMD_BF16:
                pack_raw_bf16(o, r0, nr, nrp, w, p0, kb, dst);
                break;
        default:
                pack_raw_f32(o, r0, nr, nrp, w, p0, kb, dst);
                break;
        }
}

/* Packs an f64 operand into f64 micro-panels (the dtype is always f64). */
static void pack_f64(int dtype, const struct opnd *o, uint32_t r0, uint32_t nr, uint32_t nrp,
                     uint32_t w, uint32_t p0, uint32_t kb, double *restrict dst)
{
        pack_raw_f64(o, r0, nr, nrp, w, p0, kb, dst);
}

static inline v4f vload(const float *p)
{
        v4f v;
        memcpy(&v, p, sizeof(v));
        return v;
}

static inline void vstore(float *p, v4f v) { memcpy(p, &v, sizeof(v)); }

/*
 * acc[i + j*BM] += lp(i, p) * rp(p, j) for an MR_F32 x NR micro-tile, p in
 * increasing order, one rounded multiply and one rounded add per term.
 * lp is an MR_F32-wide micro-panel, rp an NR-wide one, both kb deep.
 */
static void micro_f32(uint32_t kb, const float *restrict lp, const float *restrict rp,
                      float *restrict acc)
{
        v4f c00 = vload(acc + 0 * BM), c10 = vload(acc + 0 * BM + 4);
        v4f c01 = vload(acc + 1 * BM), c11 = vload(acc + 1 * BM + 4);
        v4f c02 = vload(acc + 2 * BM), c12 = vload(acc + 2 * BM + 4);
        v4f c03 = vload(acc + 3 * BM), c13 = vload(acc + 3 * BM + 4);

        for (uint32_t p = 0; p < kb; p++) {
                v4f a0 = vload(lp + p * MR_F32), a1 = vload(lp + p * MR_F32 + 4);
                const float *b = rp + p * NR;
                v4f b0 = {b[0], b[0], b[0], b[0]};
                v4f b1 = {b[1], b[1], b[1], b[1]};
                v4f b2 = {b[2], b[2], b[2], b[2]};
                v4f b3 = {b[3], b[3], b[3], b[3]};
                v4f t;

                t = a0 * b0; c00 = c00 + t;
                t = a1 * b0; c10 = c10 + t;
                t = a0 * b1; c01 = c01 + t;
                t = a1 * b1; c11 = c11 + t;
                t = a0 * b2; c02 = c02 + t;
                t = a1 * b2; c12 = c12 + t;
                t = a0 * b3; c03 = c03 + t;
                t = a1 * b3; c13 = c13 + t;
        }
        vstore(acc + 0 * BM, c00), vstore(acc + 0 * BM + 4, c10);
        vstore(acc + 1 * BM, c01), vstore(acc + 1 * BM + 4, c11);
        vstore(acc + 2 * BM, c02), vstore(acc + 2 * BM + 4, c12);
        vstore(acc + 3 * BM, c03), vstore(acc + 3 * BM + 4, c13);
}

static inline v2d vload2(const double *p)
{
        v2d v;
        memcpy(&v, p, sizeof(v));
        return v;
}

static inline void vstore2(double *p, v2d v) { memcpy(p, &v, sizeof(v)); }

/* micro_f32's f64 twin: an MR_F64 x NR micro-tile, the same order. */
static void micro_f64(uint32_t kb, const double *restrict lp, const double *restrict rp,
                      double *restrict acc)
{
        v2d c00 = vload2(acc + 0 * BM), c10 = vload2(acc + 0 * BM + 2);
        v2d c01 = vload2(acc + 1 * BM), c11 = vload2(acc + 1 * BM + 2);
        v2d c02 = vload2(acc + 2 * BM), c12 = vload2(acc + 2 * BM + 2);
        v2d c03 = vload2(acc + 3 * BM), c13 = vload2(acc + 3 * BM + 2);

        for (uint32_t p = 0; p < kb; p++) {
                v2d a0 = vload2(lp + p * MR_F64), a1 = vload2(lp + p * MR_F64 + 2);
                const double *b = rp + p * NR;
                v2d b0 = {b[0], b[0]}, b1 = {b[1], b[1]};
                v2d b2 = {b[2], b[2]}, b3 = {b[3], b[3]};
                v2d t;

                t = a0 * b0; c00 = c00 + t;
                t = a1 * b0; c10 = c10 + t;
                t = a0 * b1; c01 = c01 + t;
                t = a1 * b1; c11 = c11 + t;
                t = a0 * b2; c02 = c02 + t;
                t = a1 * b2; c12 = c12 + t;
                t = a0 * b3; c03 = c03 + t;
                t = a1 * b3; c13 = c13 + t;
        }
        vstore2(acc + 0 * BM, c00), vstore2(acc + 0 * BM + 2, c10);
        vstore2(acc + 1 * BM, c01), vstore2(acc + 1 * BM + 2, c11);
        vstore2(acc + 2 * BM, c02), vstore2(acc + 2 * BM + 2, c12);
        vstore2(acc + 3 * BM, c03), vstore2(acc + 3 * BM + 2, c13);
}

/* The left and right operands of pass `pass` (GEMM: one pass; SYR2K: two). */
static void pass_operands(const struct gemmd_kproblem *kp, int pass, struct opnd *l,
                          struct opnd *r)
{
        const void *a = (const void *)(uintptr_t)kp->a;
        const void *b = (const void *)(uintptr_t)kp->b;

        if (kp->kind != SCHED_SYR2K) {
                /* L(i,p) = op(A)(i,p); R(p,j) = op(B)(p,j), i.e. B[p + j*ldb] for N. */
                *l = (struct opnd){a, kp->lda, kp->trans_a ? 1 : 0};
                *r = (struct opnd){b, kp->ldb, kp->trans_b ? 0 : 1};
                return;
        }
        /* Pass 0: op(A)(i,p) op(B)(j,p); pass 1: op(B)(i,p) op(A)(j,p). */
        int t = kp->trans_a ? 1 : 0;
        if (pass == 0) {
                *l = (struct opnd){a, kp->lda, t};
                *r = (struct opnd){b, kp->ldb, t};
        } else {
                *l = (struct opnd){b, kp->ldb, t};
                *r = (struct opnd){a, kp->lda, t};
        }
}

/* Iterates over the blocks of a tile that hold stored elements. */
#define FOR_EACH_BLOCK(t, b)                                                                    \
        for (uint32_t bj_ = (t)->j0; bj_ < (t)->j1; bj_ += BN)                                  \
                for (uint32_t bi_ = (t)->i0; bi_ < (t)->i1; bi_ += BM)                          \
                        if (blk_init(t, bi_, bj_, &(b)))

/* Sets b to the block at (i0, j0) of t, clipped to the tile, with its
 * sizes rounded up to the widest micro-tile; returns whether it holds a
 * stored element. */
static int blk_init(const struct tile *t, uint32_t i0, uint32_t j0, struct blk *b)
{
        b->i0 = i0;
        b->j0 = j0;
        b->mb = umin(BM, t->i1 - i0);
        b->nb = umin(BN, t->j1 - j0);
        b->mbp = rup(b->mb, MR_F32);
        b->nbp = rup(b->nb, NR);
        return blk_live(t->kp, b->i0, b->mb, b->j0, b->nb);
}

/* Sets *t to the elements of the tile at (row, col) of the problem. */
static void tile_at(const struct gemmd_kproblem *kp, const struct sched_problem *sp,
                    const struct sched_config *cfg, uint32_t row, uint32_t col, struct tile *t)
{
        struct sched_span span = sched_tile_span(sp, cfg->shape, row, col);

        *t = (struct tile){.kp = kp, .tm = cfg->shape.tm, .tn = cfg->shape.tn};
        t->i0 = span.row0;
        t->i1 = span.row0 + span.rows;
        t->j0 = span.col0;
        t->j1 = span.col0 + span.cols;
}

/* Sets *t to the elements of tile `tile` of the problem (none when the
 * plan names a tile the problem does not have). */
static void tile_of(const struct gemmd_kproblem *kp, const struct sched_problem *sp,
                    const struct sched_config *cfg, uint32_t tile, struct tile *t)
{
        uint32_t row, col;

        *t = (struct tile){.kp = kp, .tm = cfg->shape.tm, .tn = cfg->shape.tn};
        if (sched_tile_coord(sp, cfg->shape, tile, &row, &col))
                tile_at(kp, sp, cfg, row, col, t);
}

/* Counts a split entry's arrival at its tile; returns 1 for the last of the
 * tile's parts, which then finishes the tile. */
static int split_arrive(const struct sched_plan *plan, const struct sched_entry *e,
                        struct cpu_workspace *ws)
{
        _Atomic uint32_t *arr = (_Atomic uint32_t *)&ws->arrivals[e->split];
        uint32_t prev = atomic_fetch_add_explicit(arr, 1, memory_order_acq_rel);

        return prev + 1 == plan->split_parts[e->split];
}

/* Run by the last arrival: zeroes the tile's counter for the next group. */
static void split_reset(const struct sched_entry *e, struct cpu_workspace *ws)
{
        _Atomic uint32_t *arr = (_Atomic uint32_t *)&ws->arrivals[e->split];

        atomic_store_explicit(arr, 0, memory_order_release);
}

/* C of an f32, f16 or bf16 problem, widened to f32. */
static inline float load_c_f32(const struct gemmd_kproblem *kp, size_t idx)
{
        const void *c = (const void *)(uintptr_t)kp->c;

        switch (kp->dtype) {
        case GEMMD_F16:
                return gemmd_f16_to_f32(((const uint16_t *)c)[idx]);
        case GEMMD_BF16:
                return gemmd_bf16_to_f32(((const uint16_t *)c)[idx]);
        default:
                return ((const float *)c)[idx];
        }
}

/* Writes v to C of an f32, f16 or bf16 problem, rounded to nearest even. */
static inline void store_c_f32(const struct gemmd_kproblem *kp, size_t idx, float v)
{
        void *c = (void *)(uintptr_t)kp->c;

        switch (kp->dtype) {
        case GEMMD_F16:
                ((uint16_t *)c)[idx] = gemmd_f32_to_f16(v);
                break;
        case GEMMD_BF16:
                ((uint16_t *)c)[idx] = gemmd_f32_to_bf16(v);
                break;
        default:
                ((float *)c)[idx] = v;
                break;
        }
}

static inline double load_c_f64(const struct gemmd_kproblem *kp, size_t idx)
{
        return ((const double *)(uintptr_t)kp->c)[idx];
}

static inline void store_c_f64(const struct gemmd_kproblem *kp, size_t idx, double v)
{
        ((double *)(uintptr_t)kp->c)[idx] = v;
}

/* f32, f16 and bf16: f32 sums, the scalars rounded to float. */
#define ACC float
#define SFX(name) name##_f32
#define ACC_MR MR_F32
#define ACC_WHOLE_K 0
#define ACC_ALPHA(kp) ((kp)->alpha)
#define ACC_BETA(kp) ((kp)->beta)
#include "kernels/cpu_gemm_acc.h"
#undef ACC
#undef SFX
#undef ACC_MR
#undef ACC_WHOLE_K
#undef ACC_ALPHA
#undef ACC_BETA

/* f64: f64 sums, the scalars as the client sent them. */
#define ACC double
#define SFX(name) name##_f64
#define ACC_MR MR_F64
#define ACC_WHOLE_K 1
#define ACC_ALPHA(kp) ((kp)->alpha_f64)
#define ACC_BETA(kp) ((kp)->beta_f64)
#include "kernels/cpu_gemm_acc.h"
#undef ACC
#undef SFX
#undef ACC_MR
#undef ACC_WHOLE_K
#undef ACC_ALPHA
#undef ACC_BETA

/* Scratch of one call, on the caller's stack: one type's at a time. */
union scratch {
        struct scratch_f32 f32;
        struct scratch_f64 f64;
};

/* Computes one entry of problem kp in its accumulator type. */
static void run_entry(const struct gemmd_kproblem *kp, const struct sched_problem *sp,
                      const struct sched_plan *plan, const struct sched_config *cfg,
                      const struct sched_entry *e, struct cpu_workspace *ws, union scratch *s)
{
        if (kp->dtype == GEMMD_F64)
                run_entry_f64(kp, sp, plan, cfg, e, ws, &s->f64);
        else
                run_entry_f32(kp, sp, plan, cfg, e, ws, &s->f32);
}

void cpu_gemm_run_cta(const struct gemmd_kproblem *probs, const struct sched_problem *sp,
                      const struct sched_plan *plan, const struct sched_config *cfg, uint32_t cta,
                      struct cpu_workspace *ws)
{
        cpu_gemm_run_cta_each(probs, sp, plan, cfg, cta, ws, NULL, NULL);
}

void cpu_gemm_run_cta_each(const struct gemmd_kproblem *probs, const struct sched_problem *sp,
                           const struct sched_plan *plan, const struct sched_config *cfg, uint32_t cta,
                           struct cpu_workspace *ws, void (*ran)(void *ctx, uint32_t problem), void *ctx)
{
        union scratch s;

        _Static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t), "atomic counters");
        if (plan->nentries > 0) {
                if (cta >= plan->nctas)
                        return;
                for (uint32_t i = plan->cta_begin[cta]; i < plan->cta_begin[cta + 1]; i++) {
                        const struct sched_entry *e = &plan->entries[i];
                        run_entry(&probs[e->problem], &sp[e->problem], plan, cfg, e, ws, &s);
                        if (ran)
                                ran(ctx, e->problem);
                }
                return;
        }

        /* SCHED_DEVICE: walk the group's concatenated tiles with stride nctas. */
        uint32_t nctas = plan->nctas ? plan->nctas : cfg->ctas;
        uint32_t p = 0, np = plan->nproblems;
        uint64_t base = 0, cnt = np ? sched_tile_count(&sp[0], cfg->shape) : 0;

        if (nctas == 0 || cta >= nctas)
                return;
        for (uint64_t g = cta; p < np; g += nctas) {
                while (p < np && g >= base + cnt) {
                        base += cnt;
                        if (++p < np)
                                cnt = sched_tile_count(&sp[p], cfg->shape);
                }
                if (p >= np)
                        break;
                struct sched_entry e = {
                        .problem = p,
                        .tile = (uint32_t)(g - base),
                        .kc_begin = 0,
                        .kc_end = (uint16_t)sched_kchunks(probs[p].k),
                        .split = SCHED_NO_SPLIT,
                };
                run_entry(&probs[p], &sp[p], plan, cfg, &e, ws, &s);
                if (ran)
                        ran(ctx, p);
        }
}
