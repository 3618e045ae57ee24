/*
 * cpu_gemm_acc.h - the half of cpu_gemm.c that depends on the accumulator
 * type, written once and included by cpu_gemm.c once per type: float for
 * f32, f16 and bf16, double for f64. The canonical order (cpu_gemm.h) is
 * the same for both; only the type the terms are rounded to differs.
 *
 * Before including it, cpu_gemm.c defines:
 *   ACC          the accumulator type
 *   SFX(name)    name with the type's suffix (name_f32, name_f64)
 *   ACC_MR       micro-kernel rows (BM is a multiple of it)
 *   ACC_WHOLE_K  1 to sum all of K in one pass (f64), 0 for chunk sums
 *   ACC_ALPHA(kp), ACC_BETA(kp)  the problem's scalars in ACC
 * and the functions SFX(pack), SFX(micro), SFX(load_c) and SFX(store_c).
 * It defines struct SFX(scratch) and SFX(run_entry).
 */

/* Scratch of one call, on the caller's stack. */
struct SFX(scratch) {
        _Alignas(64) ACC lp[BM * BK];
        _Alignas(64) ACC rp[BK * BN];
        _Alignas(64) ACC acc[BM * BN]; /* chunk sums, column-major, ld BM */
        _Alignas(64) ACC tot[BM * BN]; /* running totals, same layout */
};

/*
 * Sums k in [kbeg, kend) of the block into acc (ld BM) from zero, in the
 * canonical order. Only micro-tiles that hold an element of the stored
 * triangle are computed; the others are left zero.
 */
static void SFX(chunk_sum)(const struct gemmd_kproblem *kp, const struct blk *b, uint32_t kbeg,
                           uint32_t kend, ACC *restrict acc, struct SFX(scratch) *s)
{
        int npass = kp->kind == SCHED_SYR2K ? 2 : 1;

        for (uint32_t j = 0; j < b->nbp; j++)
                memset(acc + (size_t)j * BM, 0, b->mbp * sizeof(ACC));
        for (int pass = 0; pass < npass; pass++) {
                struct opnd l, r;
                pass_operands(kp, pass, &l, &r);
                for (uint32_t p0 = kbeg; p0 < kend; p0 += BK) {
                        uint32_t kb = umin(BK, kend - p0);
                        SFX(pack)(kp->dtype, &l, b->i0, b->mb, b->mbp, ACC_MR, p0, kb, s->lp);
                        SFX(pack)(kp->dtype, &r, b->j0, b->nb, b->nbp, NR, p0, kb, s->rp);
                        for (uint32_t jq = 0; jq < b->nbp; jq += NR) {
                                for (uint32_t iq = 0; iq < b->mbp; iq += ACC_MR) {
                                        if (!blk_live(kp, b->i0 + iq, ACC_MR, b->j0 + jq, NR))
                                                continue;
                                        SFX(micro)(kb, s->lp + iq * kb, s->rp + jq * kb,
                                                   acc + iq + (size_t)jq * BM);
                                }
                        }
                }
        }
}

/* C = alpha * tot + beta * C over the block's stored elements; C is not
 * read when beta is 0. */
static void SFX(epilogue)(const struct gemmd_kproblem *kp, const struct blk *b, const ACC *tot)
{
        size_t ldc = (size_t)kp->ldc;
        ACC alpha = ACC_ALPHA(kp), beta = ACC_BETA(kp);

        for (uint32_t jj = 0; jj < b->nb; jj++) {
                uint32_t j = b->j0 + jj, lo, hi;
                col_rows(kp, b->i0, b->mb, j, &lo, &hi);
                for (uint32_t i = lo; i < hi; i++) {
                        size_t idx = (size_t)i + (size_t)j * ldc;
                        ACC v = alpha * tot[(i - b->i0) + (size_t)jj * BM];
                        if (beta != 0) {
                                ACC bc = beta * SFX(load_c)(kp, idx);
                                v = v + bc;
                        }
                        SFX(store_c)(kp, idx, v);
                }
        }
}

/* Workspace slot of chunk c of a split tile, at the block's corner. Slots
 * are CPU_WS_ELEM_BYTES an element whatever the type, so that the float
 * and double slots of one group never overlap. */
static ACC *SFX(slot_at)(const struct tile *t, const struct blk *b, void *chunks, uint32_t ws0,
                         uint32_t c)
{
        size_t tile_elems = (size_t)t->tm * t->tn;
        ACC *slot = (ACC *)((char *)chunks + (size_t)(ws0 + c) * tile_elems * CPU_WS_ELEM_BYTES);

        return slot + (b->i0 - t->i0) + (size_t)(b->j0 - t->j0) * t->tm;
}

/* Copies (add == 0) or adds (add == 1) the block's stored elements between
 * a BM-strided buffer and a tm-strided workspace slot, in either direction. */
static void SFX(slot_move)(const struct gemmd_kproblem *kp, const struct tile *t,
                           const struct blk *b, ACC *slot, ACC *buf, int to_slot, int add)
{
        for (uint32_t jj = 0; jj < b->nb; jj++) {
                uint32_t lo, hi;
                col_rows(kp, b->i0, b->mb, b->j0 + jj, &lo, &hi);
                ACC *s = slot + (size_t)jj * t->tm - b->i0;
                ACC *d = buf + (size_t)jj * BM - b->i0;
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

/* Run by the last arrival at a split tile: adds the tile's nkc chunk sums
 * (slots ws0, ws0 + 1, ...) in chunk order and writes C. */
static void SFX(split_reduce)(const struct tile *t, uint32_t nkc, void *chunks, uint32_t ws0,
                              struct SFX(scratch) *s)
{
        struct blk b;

        FOR_EACH_BLOCK (t, b) {
                for (uint32_t c = 0; c < nkc; c++)
                        SFX(slot_move)(t->kp, t, &b, SFX(slot_at)(t, &b, chunks, ws0, c), s->tot,
                                       0, c > 0);
                SFX(epilogue)(t->kp, &b, s->tot);
        }
}

/* Computes one entry of a whole-K type (f64): the whole tile, summed over
 * all of K from zero. A split entry (no planner makes one for f64) counts
 * as the whole tile when it holds chunk 0 and as nothing otherwise. */
static void SFX(run_whole)(const struct gemmd_kproblem *kp, const struct sched_problem *sp,
                           const struct sched_config *cfg, const struct sched_entry *e,
                           struct SFX(scratch) *s)
{
        struct tile t;
        struct blk b;
        uint32_t row, col;

        if (e->split != SCHED_NO_SPLIT && e->kc_begin != 0)
                return;
        if (!sched_tile_coord(sp, cfg->shape, e->tile, &row, &col))
                return;
        /* An f64 SYR2K's paired diagonal tile is two tiles (sched_tile_blocks). */
        for (uint32_t d = 0; d < sched_tile_blocks(sp, cfg->shape, row, col); d++) {
                tile_at(kp, sp, cfg, row + d, col + d, &t);
                FOR_EACH_BLOCK (&t, b) {
                        SFX(chunk_sum)(kp, &b, 0, kp->k, s->tot, s);
                        SFX(epilogue)(kp, &b, s->tot);
                }
        }
}

/* Computes one entry: a whole tile, or chunks [kcb, kce) of a split tile. */
static void SFX(run_entry)(const struct gemmd_kproblem *kp, const struct sched_problem *sp,
                           const struct sched_plan *plan, const struct sched_config *cfg,
                           const struct sched_entry *e, struct cpu_workspace *ws,
                           struct SFX(scratch) *s)
{
        struct tile t;
        uint32_t nkc = sched_kchunks(kp->k);
        int split = e->split != SCHED_NO_SPLIT;
        uint32_t kcb = split ? e->kc_begin : 0, kce = split ? umin(e->kc_end, nkc) : nkc;
        uint32_t ws0 = split ? plan->split_ws[e->split] : 0;
        void *chunks = split ? ws->chunks : NULL;
        struct blk b;

        if (ACC_WHOLE_K) {
                SFX(run_whole)(kp, sp, cfg, e, s);
                return;
        }
        tile_of(kp, sp, cfg, e->tile, &t);
        FOR_EACH_BLOCK (&t, b) {
                for (uint32_t c = kcb; c < kce; c++) {
                        uint32_t k0, klen, k1;
                        sched_chunk_span(kp->k, c, c + 1, &k0, &klen);
                        k1 = k0 + klen;
                        if (split) {
                                SFX(chunk_sum)(kp, &b, k0, k1, s->acc, s);
                                SFX(slot_move)(kp, &t, &b, SFX(slot_at)(&t, &b, chunks, ws0, c),
                                               s->acc, 1, 0);
                        } else if (c == kcb) {
                                SFX(chunk_sum)(kp, &b, k0, k1, s->tot, s); /* total = sum0 */
                        } else {
                                SFX(chunk_sum)(kp, &b, k0, k1, s->acc, s);
                                for (uint32_t jj = 0; jj < b.nb; jj++)
                                        for (uint32_t ii = 0; ii < b.mb; ii++) {
                                                size_t x = ii + (size_t)jj * BM;
                                                s->tot[x] = s->tot[x] + s->acc[x];
                                        }
                        }
                }
                if (!split)
                        SFX(epilogue)(kp, &b, s->tot);
        }
        /* Publish this entry's chunk sums; the last of the tile's parts to
         * arrive sees everyone's and finishes the tile. */
        if (split && split_arrive(plan, e, ws)) {
                SFX(split_reduce)(&t, nkc, chunks, ws0, s);
                split_reset(e, ws);
        }
}
