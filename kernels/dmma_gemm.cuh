/*
 * dmma_gemm.cuh - the f64 grouped GEMM/SYR2K kernel (FP64 tensor cores),
 * included by grouped_gemm.cu inside its anonymous namespace.
 *
 * It walks the same plans as the other sm_80 kernels (grouped_kernel and
 * launch<C> run it: run_entry sends configs with F64 set here). f64 has no
 * K chunks (cpu_gemm.h): each output is summed from zero over all of K by
 * the tensor cores, one mma after another in K order (SYR2K: all of the
 * first term, then all of the second), and C = alpha * sum (+ beta * C)
 * with separately rounded operations. Plans never split f64 tiles, so the
 * sum stays in registers and nothing but the operands crosses shared
 * memory; that is what buys the 128 x 128 tile (half the L2 traffic per
 * flop of 128 x 64, which a running total in shared memory had no room
 * for).
 *
 * Tile 128 x 128, 8 warps as 2 (m) x 4 (n), 64 x 32 outputs each: 64
 * accumulators a thread. K steps of 32 in 3 stages on the sm_90a image,
 * software-pipelined (PIPE 1, dmainloop); K steps of 16 in 3 stages on the
 * sm_80 one (its smaller shared memory). mma.sync has the f64 shape m8n8k4
 * on sm_80 and from sm_90 also m16n8k4/k8/k16; the config's MK picks one
 * (4 is m8n8k4); k16 ran fastest on the H100 (docs/performance.md). Every
 * tile of one device runs the same mma in the same K order, so bits never
 * depend on the plan.
 * ldmatrix moves 16-bit elements only, so fragments are read element by
 * element from shared memory: lane (g = lane / 4, t = lane % 4) reads row
 * g (+ 8) and k t (+ 4 j). Rows of a K-major stage are BK + 4 doubles
 * apart and columns of an MN-major stage rows + 4: with that stride the 16
 * lanes of each half-warp read 16 distinct 8-byte bank pairs.
 */

#ifndef GEMMD_F64_STAGES
#define GEMMD_F64_STAGES 5
#endif

/*
 * MK: k of one mma (4: m8n8k4; 8 or 16: m16n8kMK). BK_H, STAGES_H: the K
 * step and stages of the sm_90a image (227 KB of shared memory a block);
 * the sm_80 image takes K steps of 16 and 3 stages (its 163 KB). Tile 128
 * x 128 either way, 8 warps as 2 (m) x 4 (n) of 64 x 32 outputs. PIPE 1:
 * the software-pipelined mainloop (fragments of the next k-slice read
 * while the mmas of this one run); 0: one k-tile's loads, then its mmas.
 */
template <int MK_, int BK_H_, int STAGES_H_, int PIPE_ = 0> struct DCfg {
        static constexpr bool F64 = true;
        static constexpr int MK = MK_;
        static constexpr int PIPE = PIPE_;
        static constexpr int MR = MK == 4 ? 8 : 16; /* rows of one mma */
        static constexpr int BM = 128, BN = 128, BK_H = BK_H_, BK_L = 16;
        static constexpr int BK = GEMMD_SMEM_H ? BK_H : BK_L;
        static constexpr int STAGES_H = STAGES_H_, STAGES_L = 3;
        static constexpr int STAGES = GEMMD_SMEM_H ? STAGES_H : STAGES_L;
        static constexpr int THREADS = CUDA_GEMM_THREADS;
        static constexpr int ESZ = 8;
        static constexpr int V = 2; /* doubles per 16-byte vector */
        static constexpr int PAD = 4;
        static constexpr int SK = BK + PAD; /* K-major row stride */
        static constexpr int WARPS_M = 2, WM = BM / WARPS_M, WN = BN / (THREADS / 32 / WARPS_M);
        static constexpr int stage_elems(int bk)
        {
                return cmax(BM * (bk + PAD), bk * (BM + PAD)) + cmax(BN * (bk + PAD), bk * (BN + PAD));
        }
        static constexpr int X_ELEMS = cmax(BM * SK, BK * (BM + PAD));
        static constexpr int STAGE_ELEMS = stage_elems(BK);
        static constexpr int NACC = BM * BN / THREADS; /* 64 */
        static constexpr int MT = WM / MR;      /* mma tiles along m per warp */
        static constexpr int NT = WN / 8;       /* along n (8 columns each) */
        static constexpr int CV = MR / 4;       /* accumulators per mma per lane */
        static constexpr int MA = MR * MK / 32; /* A elements per mma per lane */
        static constexpr int MB = MK / 4;       /* B elements */
        static constexpr int smem_bytes(bool h)
        {
                return (h ? STAGES_H : STAGES_L) * stage_elems(h ? BK_H : BK_L) * ESZ;
        }
        static_assert(SCHED_KCHUNK % BK_L == 0 && BK % MK == 0 && BK_L % MK == 0, "whole mmas per K step");
        static_assert(MT * NT * CV == NACC, "one warp tile of WM x WN");
        static_assert(BM == BN, "one tile shape for every f64 config (cuda_gemm_shape)");
};

using CfgF64 = DCfg<4, 16, GEMMD_F64_STAGES>; /* sm_80 image */
using CfgF64k16 = DCfg<16, 32, 3, 1>;          /* sm_90a image */

/* d += a b for one f64 mma of k MK (fragments as in the PTX ISA). The
 * m16n8 shapes exist from sm_90 on; the host never launches them on an
 * older device (device_sm90), where they trap. */
template <int MK> __device__ __forceinline__ void dmma(double *d, const double *a, const double *b);

template <> __device__ __forceinline__ void dmma<4>(double *d, const double *a, const double *b)
{
        asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
            : "+d"(d[0]), "+d"(d[1])
            : "d"(a[0]), "d"(b[0]));
}

template <> __device__ __forceinline__ void dmma<8>(double *d, const double *a, const double *b)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
        asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
            : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
#else
        __trap();
#endif
}

template <> __device__ __forceinline__ void dmma<16>(double *d, const double *a, const double *b)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
        asm("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, {%0,%1,%2,%3};\n"
            : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
            : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]),
              "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
#else
        __trap();
#endif
}

__device__ __forceinline__ void cp_async8(void *sdst, const void *gsrc)
{
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_u32(sdst)), "l"(gsrc));
}

/* One double at byte address p, which may be misaligned (an f64 operand
 * at an offset that is only a multiple of a smaller element). */
__device__ __forceinline__ double load_unaligned(const char *p)
{
        uint64_t v = 0;
#pragma unroll
        for (int i = 0; i < 8; i++)
                v |= (uint64_t)(unsigned char)p[i] << (8 * i);
        return __longlong_as_double((long long)v);
}

/*
 * Stages the ROWS x BK tile of an operand whose rows start at r0 (rows <
 * rext) and whose k start at k0 (k < kext) into s. KMAJ: element (r, kk)
 * at g[kk + r * ld], stored s[r * SK + kk]; else at g[r + kk * ld], stored
 * s[kk * (ROWS + PAD) + r]. Interior tiles of 16-byte aligned operands go
 * by 16-byte copies; elsewhere each element alone (8-byte copies, or bytes
 * when misaligned), zeros outside the matrix.
 */
template <class D, int ROWS, bool KMAJ>
__device__ __forceinline__ void dload_tile(double *s, const char *g, int64_t ld, bool al, uint32_t r0,
                                           uint32_t rext, uint32_t k0, uint32_t kext)
{
        constexpr int SR = KMAJ ? D::SK : ROWS + D::PAD;
        constexpr int PER = ROWS * D::BK / 2 / D::THREADS;
        static_assert(PER * 2 * D::THREADS == ROWS * D::BK, "whole vectors per thread");
        const double *gd = (const double *)g;
        if (al && r0 + ROWS <= rext && k0 + D::BK <= kext) {
#pragma unroll
                for (int i = 0; i < PER; i++) {
                        const int v = threadIdx.x + i * D::THREADS;
                        if (KMAJ) {
                                const int r = v / (D::BK / 2), kk = (v % (D::BK / 2)) * 2;
                                cp_async16(s + r * SR + kk, gd + (k0 + kk) + (int64_t)(r0 + r) * ld);
                        } else {
                                const int kk = v / (ROWS / 2), r = (v % (ROWS / 2)) * 2;
                                cp_async16(s + kk * SR + r, gd + (r0 + r) + (int64_t)(k0 + kk) * ld);
                        }
                }
                return;
        }
        const bool a8 = ((uintptr_t)g & 7) == 0;
#pragma unroll
        for (int i = 0; i < PER; i++) {
                const int v = threadIdx.x + i * D::THREADS;
                uint32_t r, kk;
                if (KMAJ) {
                        r = v / (D::BK / 2);
                        kk = (v % (D::BK / 2)) * 2;
                } else {
                        kk = v / (ROWS / 2);
                        r = (v % (ROWS / 2)) * 2;
                }
                double *dst = s + (KMAJ ? r * SR + kk : kk * SR + r);
                const uint32_t gr = r0 + r, gk = k0 + kk;
                const int64_t off = KMAJ ? (int64_t)gk + (int64_t)gr * ld : (int64_t)gr + (int64_t)gk * ld;
                const bool full = gr < rext && gk < kext && (KMAJ ? gk + 2 <= kext : gr + 2 <= rext);
                if (full && al) {
                        cp_async16(dst, gd + off);
                        continue;
                }
#pragma unroll
                for (int e = 0; e < 2; e++) {
                        const bool in = KMAJ ? gr < rext && gk + e < kext : gr + e < rext && gk < kext;
                        if (!in)
                                dst[e] = 0.0;
                        else if (a8)
                                cp_async8(dst + e, gd + off + e);
                        else
                                dst[e] = load_unaligned(g + (off + e) * 8);
                }
        }
}

/* One k-tile of the warp's WM x WN outputs: BK / MK steps of MT x NT
 * mmas, in K order. Accumulator (mi * NT + ni) * CV + e of a lane holds
 * row wm * WM + mi * MR + g + 8 (e / 2), column wn * WN + ni * 8 + 2 t +
 * e % 2 (dacc_pos). */
template <class D, bool XK, bool YK>
__device__ __forceinline__ void dcompute_stage(const double *sx, const double *sy, double *acc)
{
        constexpr int SX = XK ? D::SK : D::BM + D::PAD, SY = YK ? D::SK : D::BN + D::PAD;
        constexpr int RB = D::MR / 8; /* row blocks of 8 in one mma's A */
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const int wm = warp % D::WARPS_M, wn = warp / D::WARPS_M, g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int ks = 0; ks < D::BK / D::MK; ks++) {
                const int kb = ks * D::MK;
                double a[D::MT][D::MA], b[D::NT][D::MB];
#pragma unroll
                for (int ni = 0; ni < D::NT; ni++)
#pragma unroll
                        for (int j = 0; j < D::MB; j++) {
                                const int col = wn * D::WN + ni * 8 + g, kk = kb + t + 4 * j;
                                b[ni][j] = YK ? sy[col * SY + kk] : sy[kk * SY + col];
                        }
#pragma unroll
                for (int mi = 0; mi < D::MT; mi++)
#pragma unroll
                        for (int i = 0; i < D::MA; i++) {
                                const int row = wm * D::WM + mi * D::MR + g + 8 * (i % RB), kk = kb + t + 4 * (i / RB);
                                a[mi][i] = XK ? sx[row * SX + kk] : sx[kk * SX + row];
                        }
#pragma unroll
                for (int mi = 0; mi < D::MT; mi++)
#pragma unroll
                        for (int ni = 0; ni < D::NT; ni++)
                                dmma<D::MK>(acc + (mi * D::NT + ni) * D::CV, a[mi], b[ni]);
        }
}

/* The B fragment of k-slice kb for the warp's n8 column block ni. */
template <class D, bool YK>
__device__ __forceinline__ void dload_b1(const double *sy, int kb, int ni, double (&b)[D::MB])
{
        constexpr int SY = YK ? D::SK : D::BN + D::PAD;
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const int wn = warp / D::WARPS_M, g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int j = 0; j < D::MB; j++) {
                const int col = wn * D::WN + ni * 8 + g, kk = kb + t + 4 * j;
                b[j] = YK ? sy[col * SY + kk] : sy[kk * SY + col];
        }
}

/* The A fragment of k-slice kb for the warp's m16 row block mi. */
template <class D, bool XK>
__device__ __forceinline__ void dload_a(const double *sx, int kb, int mi, double (&a)[D::MA])
{
        constexpr int SX = XK ? D::SK : D::BM + D::PAD;
        constexpr int RB = D::MR / 8;
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const int wm = warp % D::WARPS_M, g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int i = 0; i < D::MA; i++) {
                const int row = wm * D::WM + mi * D::MR + g + 8 * (i % RB), kk = kb + t + 4 * (i / RB);
                a[i] = XK ? sx[row * SX + kk] : sx[kk * SX + row];
        }
}

template <class D> __device__ __forceinline__ void dacc_pos(int i, uint32_t &row, uint32_t &col)
{
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const int wm = warp % D::WARPS_M, wn = warp / D::WARPS_M;
        const int e = i % D::CV, mn = i / D::CV, mi = mn / D::NT, ni = mn % D::NT;
        row = wm * D::WM + mi * D::MR + (lane >> 2) + 8 * (e >> 1);
        col = wn * D::WN + ni * 8 + 2 * (lane & 3) + (e & 1);
}

/*
 * The whole-K sum of the tile at (m0, n0) into acc, from zero: every
 * k-tile of term 0 in K order, then (SYR2K) every k-tile of term 1, each
 * k-tile its mmas in K order. K is never cut (the planner leaves f64
 * problems whole), so the sum runs on the tensor cores from the first mma
 * to the last with no other addition in between.
 */
template <class D, bool XK, bool YK>
__device__ __forceinline__ void dmainloop(const Prob &pr, uint32_t m0, uint32_t n0, double *acc,
                                          unsigned char *smem)
{
        double *sbase = (double *)smem;
        const int ktiles = (int)((pr.k + D::BK - 1) / D::BK);
        const int niter = ktiles * pr.nterms;

        int lterm = 0, lkt = 0, lstage = 0;
        auto issue = [&](int it) {
                if (it < niter) {
                        /* make_prob's second term is the first with X and Y
                         * swapped (SYR2K), so only the first is kept live. */
                        const bool t1 = lterm != 0;
                        const Term &t0 = pr.term[0];
                        const char *gx = t1 ? t0.y : t0.x, *gy = t1 ? t0.x : t0.y;
                        const int64_t ldx = t1 ? t0.ldy : t0.ldx, ldy = t1 ? t0.ldx : t0.ldy;
                        const bool xal = t1 ? t0.yal : t0.xal, yal = t1 ? t0.xal : t0.yal;
                        const uint32_t k0 = (uint32_t)lkt * D::BK;
                        double *sx = sbase + lstage * D::STAGE_ELEMS, *sy = sx + D::X_ELEMS;
                        dload_tile<D, D::BM, XK>(sx, gx, ldx, xal, m0, pr.m, k0, pr.k);
                        dload_tile<D, D::BN, YK>(sy, gy, ldy, yal, n0, pr.n, k0, pr.k);
                        if (++lkt == ktiles) {
                                lkt = 0;
                                lterm++;
                        }
                        lstage = lstage + 1 == D::STAGES ? 0 : lstage + 1;
                }
                cp_async_commit();
        };
#pragma unroll
        for (int s = 0; s < D::STAGES - 1; s++)
                issue(s);

        int cstage = 0;
        if constexpr (D::PIPE == 1) {
                /* The barrier that frees a stage comes before the last
                 * row block's mmas of the k-tile rather than after them,
                 * and the next slice's B fragments are read while those
                 * mmas run, so the tensor cores do not idle through the
                 * barrier and the first loads of the next stage. A row
                 * block's A fragment is read just before its mmas, so few
                 * fragment registers are live beside the accumulators. */
                constexpr int SPS = D::BK / D::MK;
                cp_async_wait<D::STAGES - 2>();
                __syncthreads();
                issue(D::STAGES - 1);
                double bc[D::NT][D::MB];
#pragma unroll
                for (int ni = 0; ni < D::NT; ni++)
                        dload_b1<D, YK>(sbase + D::X_ELEMS, 0, ni, bc[ni]);
                for (int it = 0; it < niter; it++) {
                        const double *sx = sbase + cstage * D::STAGE_ELEMS, *sy = sx + D::X_ELEMS;
                        const int nstage = cstage + 1 == D::STAGES ? 0 : cstage + 1;
#pragma unroll
                        for (int ks = 0; ks < SPS; ks++) {
                                const int kb = ks * D::MK;
                                const bool last = ks + 1 == SPS;
#pragma unroll
                                for (int mi = 0; mi < D::MT; mi++) {
                                        double a[D::MA];
                                        dload_a<D, XK>(sx, kb, mi, a);
                                        if (mi < D::MT - 1) {
#pragma unroll
                                                for (int ni = 0; ni < D::NT; ni++)
                                                        dmma<D::MK>(acc + (mi * D::NT + ni) * D::CV, a, bc[ni]);
                                                continue;
                                        }
                                        const bool more = !last || it + 1 < niter;
                                        if (last && more) {
                                                cp_async_wait<D::STAGES - 2>();
                                                __syncthreads();
                                        }
                                        /* Each B fragment, once its last mma of the slice
                                         * is issued, is replaced by the next slice's. */
                                        const double *syn = last ? sbase + nstage * D::STAGE_ELEMS + D::X_ELEMS : sy;
                                        const int kbn = last ? 0 : kb + D::MK;
#pragma unroll
                                        for (int ni = 0; ni < D::NT; ni++) {
                                                dmma<D::MK>(acc + (mi * D::NT + ni) * D::CV, a, bc[ni]);
                                                if (more)
                                                        dload_b1<D, YK>(syn, kbn, ni, bc[ni]);
                                        }
                                        /* Into the stage just read: every warp is past
                                         * the barrier, so past its last read of it. */
                                        if (last && more)
                                                issue(it + D::STAGES);
                                }
                        }
                        cstage = nstage;
                }
        } else {
                for (int it = 0; it < niter; it++) {
                        cp_async_wait<D::STAGES - 2>();
                        __syncthreads();
                        issue(it + D::STAGES - 1);
                        const double *sx = sbase + cstage * D::STAGE_ELEMS;
                        dcompute_stage<D, XK, YK>(sx, sx + D::X_ELEMS, acc);
                        cstage = cstage + 1 == D::STAGES ? 0 : cstage + 1;
                }
        }
        cp_async_wait<0>();
        __syncthreads();
}

/* C = alpha * acc (+ beta * C), each operation rounded on its own; with
 * beta == 0 C is not read. SYR2K: the stored triangle only. */
template <class D>
__device__ __forceinline__ void depilogue(const struct gemmd_kproblem &p, uint32_t m0, uint32_t n0, const double *acc)
{
        double *cptr = (double *)(uintptr_t)p.c;
        const double alpha = p.alpha_f64, beta = p.beta_f64;
        const bool syr2k = p.kind == SCHED_SYR2K, lower = p.uplo == 0;
        auto store = [&](auto with_beta) {
#pragma unroll
                for (int i = 0; i < D::NACC; i++) {
                        uint32_t r, c;
                        dacc_pos<D>(i, r, c);
                        const uint32_t gi = m0 + r, gj = n0 + c;
                        if (gi >= p.m || gj >= p.n)
                                continue;
                        if (syr2k && (lower ? gi < gj : gi > gj))
                                continue;
                        double *dst = cptr + gi + (int64_t)gj * p.ldc;
                        double v = __dmul_rn(alpha, acc[i]);
                        if (decltype(with_beta)::value)
                                v = __dadd_rn(v, __dmul_rn(beta, *dst));
                        *dst = v;
                }
        };
        if (beta != 0.0)
                store(std::true_type{});
        else
                store(std::false_type{});
}

/* run_entry for the f64 configs: the whole of tile `tile` of problem pi
 * (f64 entries always cover all of K: the launcher refuses split plans). */
template <class D>
__device__ __forceinline__ void drun_entry(const KParams &kp, uint32_t pi, uint32_t tile, unsigned char *smem)
{
        const struct gemmd_kproblem p = kp.probs[pi];
        const struct sched_problem sp = to_sched(p);
        const struct sched_shape shape = {D::BM, D::BN, D::BK};
        uint32_t row = 0, col = 0;
        if (!sched_tile_coord(&sp, shape, tile, &row, &col))
                return;
        const uint32_t m0 = row * D::BM, n0 = col * D::BN;
        const Prob pr = make_prob<D>(p);
        double acc[D::NACC];
#pragma unroll
        for (int i = 0; i < D::NACC; i++)
                acc[i] = 0.0;
        const int lay = (pr.xk ? 2 : 0) | (pr.yk ? 1 : 0);
        switch (lay) {
        case 0:
                dmainloop<D, false, false>(pr, m0, n0, acc, smem);
                break;
        case 1:
                dmainloop<D, false, true>(pr, m0, n0, acc, smem);
                break;
        case 2:
                dmainloop<D, true, false>(pr, m0, n0, acc, smem);
                break;
        default:
                dmainloop<D, true, true>(pr, m0, n0, acc, smem);
                break;
        }
        /* Read again rather than kept in registers across the mainloop,
         * which needs them all; into a local copy, since stores to C
         * could alias the problem array and would force a reload of each
         * field after every store. */
        const struct gemmd_kproblem pe = kp.probs[pi];
        depilogue<D>(pe, m0, n0, acc);
}
