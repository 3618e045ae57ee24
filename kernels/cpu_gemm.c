/*
 * cpu_gemm.c - the CPU backend's tile code (see cpu_gemm.h for the
 * semantics and the canonical accumulation order).
 *
 * A tile is computed in sub-blocks of at most BM x BN elements. For each
 * sub-block and each canonical K chunk, the chunk's k range is walked in
 * panels of at most BK: the panel of the left operand (BM x BK) and of the
 * right operand (BK x BN) are widened to f32 and packed into micro-panels,
 * then a register-blocked MR x NR micro-kernel adds the panel's terms to the
 * chunk sums. Every output element still sees its terms one at a time in
 * increasing k, each as a rounded multiply then a rounded add, so the
 * blocking never changes the bits.
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

/* Sub-block and micro-kernel sizes. BM is a multiple of MR, BN of NR. The
 * four BM x BK / BK x BN / BM x BN scratch arrays take 64 KiB of stack. */
#define BM 64u
#define BN 64u
#define BK 64u
#define MR 8u
#define NR 4u

typedef float v4f __attribute__((vector_size(16)));

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
 * Packing: rows [r0, r0+nr) and k [p0, p0+kb) of an operand, widened to f32,
 * into micro-panels of w rows: element (r, p) goes to
 * dst[(r/w)*kb*w + p*w + r%w]. Rows [nr, nrp) are zero-filled.
 */
#define DEFINE_PACK(name, type, widen)                                                         \
        static void name(const struct opnd *o, uint32_t r0, uint32_t nr, uint32_t nrp,        \
                         uint32_t w, uint32_t p0, uint32_t kb, float *restrict dst)            \
        {                                                                                      \
                const type *x = o->x;                                                          \
                size_t ld = (size_t)o->ld;                                                     \
                for (uint32_t r = nr; r < nrp; r++)                                            \
                        for (uint32_t p = 0; p < kb; p++)                                      \
                                dst[(r / w) * kb * w + p * w + r % w] = 0.0f;                  \
                if (o->t == 0) {                                                               \
                        for (uint32_t p = 0; p < kb; p++) {                                    \
                                const type *col = x + (size_t)(p0 + p) * ld + r0;              \
                                for (uint32_t r = 0; r < nr; r++)                              \
                                        dst[(r / w) * kb * w + p * w + r % w] = widen(col[r]); \
                        }                                                                      \
                } else {                                                                       \
                        for (uint32_t r = 0; r < nr; r++) {                                    \
                                const type *row = x + (size_t)(r0 + r) * ld + p0;              \
                                float *d = dst + (r / w) * kb * w + r % w;                     \
                                for (uint32_t p = 0; p < kb; p++)                              \
                                        d[p * w] = widen(row[p]);                              \
                        }                                                                      \
                }                                                                              \
        }

#define WIDEN_F32(v) (v)
DEFINE_PACK(pack_f32, float, WIDEN_F32)
DEFINE_PACK(pack_f16, uint16_t, gemmd_f16_to_f32)
DEFINE_PACK(pack_bf16, uint16_t, gemmd_bf16_to_f32)

static void pack(int dtype, const struct opnd *o, uint32_t r0, uint32_t nr, uint32_t nrp,
                 uint32_t w, uint32_t p0, uint32_t kb, float *restrict dst)
{
        switch (dtype) {
        case GEMMD_F16:
                pack_f16(o, r0, nr, nrp, w, p0, kb, dst);
                break;
        case GEMMD_BF16:
                pack_bf16(o, r0, nr, nrp, w, p0, kb, dst);
                break;
        default:
                pack_f32(o, r0, nr, nrp, w, p0, kb, dst);
                break;
        }
}

static inline v4f vload(const float *p)
{
        v4f v;
        memcpy(&v, p, sizeof(v));
        return v;
}

static inline void vstore(float *p, v4f v) { memcpy(p, &v, sizeof(v)); }

/*
 * acc[i + j*BM] += lp(i, p) * rp(p, j) for an MR x NR micro-tile, p in
 * increasing order, one rounded multiply and one rounded add per term.
 * lp is an MR-wide micro-panel, rp an NR-wide one, both kb deep.
 */
static void micro(uint32_t kb, const float *restrict lp, const float *restrict rp,
                  float *restrict acc)
{
        v4f c00 = vload(acc + 0 * BM), c10 = vload(acc + 0 * BM + 4);
        v4f c01 = vload(acc + 1 * BM), c11 = vload(acc + 1 * BM + 4);
        v4f c02 = vload(acc + 2 * BM), c12 = vload(acc + 2 * BM + 4);
        v4f c03 = vload(acc + 3 * BM), c13 = vload(acc + 3 * BM + 4);

        for (uint32_t p = 0; p < kb; p++) {
                v4f a0 = vload(lp + p * MR), a1 = vload(lp + p * MR + 4);
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

/* Scratch of one call, on the caller's stack. */
struct scratch {
        _Alignas(64) float lp[BM * BK];
        _Alignas(64) float rp[BK * BN];
        _Alignas(64) float acc[BM * BN]; /* chunk sums, column-major, ld BM */
        _Alignas(64) float tot[BM * BN]; /* running totals, same layout */
};

/*
 * Sums k in [kbeg, kend) of the block into acc (ld BM) from zero, in the
 * canonical order. Only micro-tiles that hold an element of the stored
 * triangle are computed; the others are left zero.
 */
static void chunk_sum(const struct gemmd_kproblem *kp, const struct blk *b, uint32_t kbeg,
                      uint32_t kend, float *restrict acc, struct scratch *s)
{
        int npass = kp->kind == SCHED_SYR2K ? 2 : 1;

        for (uint32_t j = 0; j < b->nbp; j++)
                memset(acc + (size_t)j * BM, 0, b->mbp * sizeof(float));
        for (int pass = 0; pass < npass; pass++) {
                struct opnd l, r;
                pass_operands(kp, pass, &l, &r);
                for (uint32_t p0 = kbeg; p0 < kend; p0 += BK) {
                        uint32_t kb = umin(BK, kend - p0);
                        pack(kp->dtype, &l, b->i0, b->mb, b->mbp, MR, p0, kb, s->lp);
                        pack(kp->dtype, &r, b->j0, b->nb, b->nbp, NR, p0, kb, s->rp);
                        for (uint32_t jq = 0; jq < b->nbp; jq += NR) {
                                for (uint32_t iq = 0; iq < b->mbp; iq += MR) {
                                        if (!blk_live(kp, b->i0 + iq, MR, b->j0 + jq, NR))
                                                continue;
                                        micro(kb, s->lp + iq * kb, s->rp + jq * kb,
                                              acc + iq + (size_t)jq * BM);
                                }
                        }
                }
        }
}

static inline float load_c(const struct gemmd_kproblem *kp, size_t idx)
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

static inline void store_c(const struct gemmd_kproblem *kp, size_t idx, float v)
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

/* C = alpha * tot + beta * C over the block's stored elements. */
static void epilogue(const struct gemmd_kproblem *kp, const struct blk *b, const float *tot)
{
        size_t ldc = (size_t)kp->ldc;
        float alpha = kp->alpha, beta = kp->beta;

        for (uint32_t jj = 0; jj < b->nb; jj++) {
                uint32_t j = b->j0 + jj, lo, hi;
                col_rows(kp, b->i0, b->mb, j, &lo, &hi);
                for (uint32_t i = lo; i < hi; i++) {
                        size_t idx = (size_t)i + (size_t)j * ldc;
                        float v = alpha * tot[(i - b->i0) + (size_t)jj * BM];
                        if (beta != 0.0f) {
                                float bc = beta * load_c(kp, idx);
                                v = v + bc;
                        }
                        store_c(kp, idx, v);
                }
        }
}

/* Workspace slot of chunk c of a split tile, at the block's corner. */
static float *slot_at(const struct tile *t, const struct blk *b, float *chunks, uint32_t ws0,
                      uint32_t c)
{
        size_t tile_elems = (size_t)t->tm * t->tn;
        return chunks + (size_t)(ws0 + c) * tile_elems + (b->i0 - t->i0) +
               (size_t)(b->j0 - t->j0) * t->tm;
}

/* Copies (add == 0) or adds (add == 1) the block's stored elements between
 * a BM-strided buffer and a tm-strided workspace slot, in either direction. */
static void slot_move(const struct gemmd_kproblem *kp, const struct tile *t, const struct blk *b,
                      float *slot, float *buf, int to_slot, int add)
{
        for (uint32_t jj = 0; jj < b->nb; jj++) {
                uint32_t lo, hi;
                col_rows(kp, b->i0, b->mb, b->j0 + jj, &lo, &hi);
                float *s = slot + (size_t)jj * t->tm - b->i0;
                float *d = buf + (size_t)jj * BM - b->i0;
                for (uint32_t i = lo; i < hi; i++) {
                        if (to_slot)
                                s[i] = d[i];
                        else if (add)
                                d[i] = d[i] + s[i];
                        else
                                d[i] = s[i];
                }
        }
}

/* Iterates over the blocks of a tile that hold stored elements. */
#define FOR_EACH_BLOCK(t, b)                                                                    \
        for (uint32_t bj_ = (t)->j0; bj_ < (t)->j1; bj_ += BN)                                  \
                for (uint32_t bi_ = (t)->i0; bi_ < (t)->i1; bi_ += BM)                          \
                        if (blk_init(t, bi_, bj_, &(b)))

static int blk_init(const struct tile *t, uint32_t i0, uint32_t j0, struct blk *b)
{
        b->i0 = i0;
        b->j0 = j0;
        b->mb = umin(BM, t->i1 - i0);
        b->nb = umin(BN, t->j1 - j0);
        b->mbp = rup(b->mb, MR);
        b->nbp = rup(b->nb, NR);
        return blk_live(t->kp, b->i0, b->mb, b->j0, b->nb);
}

/* Run by the last arrival at a split tile: adds the tile's nkc chunk sums
 * (slots ws0, ws0 + 1, ...) in chunk order and writes C. */
static void split_reduce(const struct tile *t, uint32_t nkc, float *chunks, uint32_t ws0,
                         struct scratch *s)
{
        struct blk b;

        FOR_EACH_BLOCK (t, b) {
                for (uint32_t c = 0; c < nkc; c++)
                        slot_move(t->kp, t, &b, slot_at(t, &b, chunks, ws0, c), s->tot, 0, c > 0);
                epilogue(t->kp, &b, s->tot);
        }
}

/* Computes one entry: a whole tile, or chunks [kcb, kce) of a split tile. */
static void run_entry(const struct gemmd_kproblem *kp, const struct sched_problem *sp,
                      const struct sched_plan *plan, const struct sched_config *cfg,
                      const struct sched_entry *e, struct cpu_workspace *ws, struct scratch *s)
{
        struct tile t = {.kp = kp, .tm = cfg->shape.tm, .tn = cfg->shape.tn};
        uint32_t row, col, nkc = sched_kchunks(kp->k);
        int split = e->split != SCHED_NO_SPLIT;
        uint32_t kcb = split ? e->kc_begin : 0, kce = split ? umin(e->kc_end, nkc) : nkc;
        uint32_t ws0 = split ? plan->split_ws[e->split] : 0;
        struct blk b;

        if (sched_tile_coord(sp, cfg->shape, e->tile, &row, &col)) {
                struct sched_span span = sched_tile_span(sp, cfg->shape, row, col);
                t.i0 = span.row0;
                t.i1 = span.row0 + span.rows;
                t.j0 = span.col0;
                t.j1 = span.col0 + span.cols;
        } else {
                t.i0 = t.i1 = t.j0 = t.j1 = 0; /* no such tile: no elements */
        }

        FOR_EACH_BLOCK (&t, b) {
                for (uint32_t c = kcb; c < kce; c++) {
                        uint32_t k0, klen, k1;
                        sched_chunk_span(kp->k, c, c + 1, &k0, &klen);
                        k1 = k0 + klen;
                        if (split) {
                                chunk_sum(kp, &b, k0, k1, s->acc, s);
                                slot_move(kp, &t, &b, slot_at(&t, &b, ws->chunks, ws0, c),
                                          s->acc, 1, 0);
                        } else if (c == kcb) {
                                chunk_sum(kp, &b, k0, k1, s->tot, s); /* total = sum0 */
                        } else {
                                chunk_sum(kp, &b, k0, k1, s->acc, s);
                                for (uint32_t jj = 0; jj < b.nb; jj++)
                                        for (uint32_t ii = 0; ii < b.mb; ii++) {
                                                size_t x = ii + (size_t)jj * BM;
                                                s->tot[x] = s->tot[x] + s->acc[x];
                                        }
                        }
                }
                if (!split)
                        epilogue(kp, &b, s->tot);
        }
        if (!split)
                return;

        /* Publish this entry's chunk sums; the last of the tile's parts to
         * arrive sees everyone's and finishes the tile. */
        _Atomic uint32_t *arr = (_Atomic uint32_t *)&ws->arrivals[e->split];
        uint32_t prev = atomic_fetch_add_explicit(arr, 1, memory_order_acq_rel);
        if (prev + 1 == plan->split_parts[e->split]) {
                split_reduce(&t, nkc, ws->chunks, ws0, s);
                atomic_store_explicit(arr, 0, memory_order_release);
        }
}

void cpu_gemm_run_cta(const struct gemmd_kproblem *probs, const struct sched_problem *sp,
                      const struct sched_plan *plan, const struct sched_config *cfg, uint32_t cta,
                      struct cpu_workspace *ws)
{
        struct scratch s;

        _Static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t), "atomic counters");
        if (plan->nentries > 0) {
                if (cta >= plan->nctas)
                        return;
                for (uint32_t i = plan->cta_begin[cta]; i < plan->cta_begin[cta + 1]; i++) {
                        const struct sched_entry *e = &plan->entries[i];
                        run_entry(&probs[e->problem], &sp[e->problem], plan, cfg, e, ws, &s);
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
        }
}
