/*
 * dmma_gemm.cuh - the f64 grouped GEMM/SYR2K kernel (FP64 tensor cores),
 * included by grouped_gemm.cu inside its anonymous namespace.
 *
 * It walks the same plans as the other sm_80 kernels (grouped_kernel and
 * launch<C> run it: run_entry sends configs with F64 set here) and follows
 * the same numerics with f64 sums: each canonical K chunk is summed from
 * zero by the tensor cores, the chunk sums are added in order (split tiles
 * through a workspace of doubles), and C = alpha * sum (+ beta * C) with
 * separately rounded operations.
 *
 * Tile 128 x 64, 8 warps as 4 (m) x 2 (n), 32 x 32 outputs each; the
 * chunk sum in registers (32 doubles a thread), the running total in
 * shared memory, which leaves registers to have the next fragments loaded
 * while the mmas run. K steps of 32 on the sm_90a image, 16 on the sm_80
 * one (its smaller shared memory), 3 stages. mma.sync has the f64 shape
 * m8n8k4 on sm_80 and from sm_90 also m16n8k4/k8/k16, of which k16 ran
 * fastest on the H100 (k8 3% slower, m8n8k4 28%: docs/performance.md);
 * the config's MK picks one (4 is m8n8k4).
 * ldmatrix moves 16-bit elements only, so fragments are read element by
 * element from shared memory: lane (g = lane / 4, t = lane % 4) reads row
 * g (+ 8) and k t (+ 4 j). Rows of a K-major stage are BK + 4 doubles
 * apart and columns of an MN-major stage rows + 4: with that stride the 16
 * lanes of each half-warp read 16 distinct 8-byte bank pairs.
 */

#ifndef GEMMD_F64_STAGES
#define GEMMD_F64_STAGES 3
#endif

template <int MK_> struct DCfg {
        static constexpr bool F64 = true;
        static constexpr int MK = MK_;              /* k of one mma: 4 (m8n8k4), 8 or 16 (m16n8kMK) */
        static constexpr int MR = MK == 4 ? 8 : 16; /* rows of one mma */
        static constexpr int BM = 128, BN = 64, BK_H = 32, BK_L = 16;
        static constexpr int BK = GEMMD_SMEM_H ? BK_H : BK_L; /* as STAGES of the other configs */
        static constexpr int STAGES = GEMMD_F64_STAGES;
        static constexpr int THREADS = CUDA_GEMM_THREADS;
        static constexpr int ESZ = 8;
        static constexpr int V = 2; /* doubles per 16-byte vector */
        static constexpr int PAD = 4;
        static constexpr int SK = BK + PAD; /* K-major row stride */
        static constexpr int stage_elems(int bk)
        {
                return cmax(BM * (bk + PAD), bk * (BM + PAD)) + cmax(BN * (bk + PAD), bk * (BN + PAD));
        }
        static constexpr int X_ELEMS = cmax(BM * SK, BK * (BM + PAD));
        static constexpr int STAGE_ELEMS = stage_elems(BK);
        static constexpr int NACC = BM * BN / THREADS; /* 32 */
        static constexpr int TILE = BM * BN;
        static constexpr int MT = 32 / MR;     /* mma tiles along m per warp */
        static constexpr int NT = 4;           /* along n (8 columns each) */
        static constexpr int CV = MR / 4;      /* accumulators per mma per lane */
        static constexpr int MA = MR * MK / 32; /* A elements per mma per lane */
        static constexpr int MB = MK / 4;      /* B elements */
        /* The stages, then the running total (TILE doubles). */
        static constexpr int smem_bytes(bool h) { return (STAGES * stage_elems(h ? BK_H : BK_L) + TILE) * ESZ; }
        static_assert(SCHED_KCHUNK % BK == 0 && BK % MK == 0, "a K chunk must hold whole k-tiles");
        static_assert(MT * NT * CV == NACC, "one warp tile of 32 x 32");
};

using CfgF64 = DCfg<4>;
using CfgF64k16 = DCfg<16>;

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

/* One k-tile of the warp's 32 x 32 outputs: BK / MK steps of MT x NT mmas.
 * Accumulator (mi * NT + ni) * CV + e of a lane holds row wm * 32 + mi * MR
 * + g + 8 (e / 2), column wn * 32 + ni * 8 + 2 t + e % 2 (dacc_pos). */
template <class D, bool XK, bool YK>
__device__ __forceinline__ void dcompute_stage(const double *sx, const double *sy, double *acc)
{
        constexpr int SX = XK ? D::SK : D::BM + D::PAD, SY = YK ? D::SK : D::BN + D::PAD;
        constexpr int RB = D::MR / 8; /* row blocks of 8 in one mma's A */
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const int wm = warp & 3, wn = warp >> 2, g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int ks = 0; ks < D::BK / D::MK; ks++) {
                const int kb = ks * D::MK;
                double a[D::MT][D::MA], b[D::NT][D::MB];
#pragma unroll
                for (int mi = 0; mi < D::MT; mi++)
#pragma unroll
                        for (int i = 0; i < D::MA; i++) {
                                const int row = wm * 32 + mi * D::MR + g + 8 * (i % RB), kk = kb + t + 4 * (i / RB);
                                a[mi][i] = XK ? sx[row * SX + kk] : sx[kk * SX + row];
                        }
#pragma unroll
                for (int ni = 0; ni < D::NT; ni++)
#pragma unroll
                        for (int j = 0; j < D::MB; j++) {
                                const int col = wn * 32 + ni * 8 + g, kk = kb + t + 4 * j;
                                b[ni][j] = YK ? sy[col * SY + kk] : sy[kk * SY + col];
                        }
#pragma unroll
                for (int mi = 0; mi < D::MT; mi++)
#pragma unroll
                        for (int ni = 0; ni < D::NT; ni++)
                                dmma<D::MK>(acc + (mi * D::NT + ni) * D::CV, a[mi], b[ni]);
        }
}

template <class D> __device__ __forceinline__ void dacc_pos(int i, uint32_t &row, uint32_t &col)
{
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const int wm = warp & 3, wn = warp >> 2;
        const int e = i % D::CV, mn = i / D::CV, mi = mn / D::NT, ni = mn % D::NT;
        row = wm * 32 + mi * D::MR + (lane >> 2) + 8 * (e >> 1);
        col = wn * 32 + ni * 8 + 2 * (lane & 3) + (e & 1);
}

/*
 * Chunks [kc0, kc1) of the tile at (m0, n0), as mainloop does for the
 * other configs: unsplit (wsb NULL), tot += each chunk sum in order; split,
 * chunk c's sum goes to workspace slot wsb + c.
 */
template <class D, bool XK, bool YK>
__device__ __forceinline__ void dmainloop(const Prob &pr, uint32_t m0, uint32_t n0, uint32_t kc0, uint32_t kc1,
                                          double *tot, double *wsb, unsigned char *smem)
{
        double *sbase = (double *)smem;
        const uint32_t kbeg = kc0 * SCHED_KCHUNK, kend = min(pr.k, kc1 * SCHED_KCHUNK);
        const int niter = (int)((kend - kbeg + D::BK - 1) / D::BK) * pr.nterms;
        double acc[D::NACC];
#pragma unroll
        for (int i = 0; i < D::NACC; i++)
                acc[i] = 0.0;

        KPos lp = {kc0, 0, 0};
        int lstage = 0;
        auto issue = [&](int it) {
                if (it < niter) {
                        const bool t1 = lp.term != 0;
                        const char *gx = t1 ? pr.term[1].x : pr.term[0].x;
                        const char *gy = t1 ? pr.term[1].y : pr.term[0].y;
                        const int64_t ldx = t1 ? pr.term[1].ldx : pr.term[0].ldx;
                        const int64_t ldy = t1 ? pr.term[1].ldy : pr.term[0].ldy;
                        const bool xal = t1 ? pr.term[1].xal : pr.term[0].xal;
                        const bool yal = t1 ? pr.term[1].yal : pr.term[0].yal;
                        const uint32_t k0 = lp.c * SCHED_KCHUNK + lp.kt * D::BK;
                        double *sx = sbase + lstage * D::STAGE_ELEMS, *sy = sx + D::X_ELEMS;
                        dload_tile<D, D::BM, XK>(sx, gx, ldx, xal, m0, pr.m, k0, pr.k);
                        dload_tile<D, D::BN, YK>(sy, gy, ldy, yal, n0, pr.n, k0, pr.k);
                        kpos_next<D>(lp, pr.k, pr.nterms);
                        lstage = lstage + 1 == D::STAGES ? 0 : lstage + 1;
                }
                cp_async_commit();
        };
#pragma unroll
        for (int s = 0; s < D::STAGES - 1; s++)
                issue(s);

        KPos cp = {kc0, 0, 0};
        int cstage = 0;
        for (int it = 0; it < niter; it++) {
                cp_async_wait<D::STAGES - 2>();
                __syncthreads();
                issue(it + D::STAGES - 1);
                const double *sx = sbase + cstage * D::STAGE_ELEMS;
                dcompute_stage<D, XK, YK>(sx, sx + D::X_ELEMS, acc);
                cstage = cstage + 1 == D::STAGES ? 0 : cstage + 1;
                const uint32_t c = cp.c;
                if (kpos_next<D>(cp, pr.k, pr.nterms)) {
                        if (wsb) {
                                double *w = wsb + (size_t)c * D::TILE + threadIdx.x;
#pragma unroll
                                for (int i = 0; i < D::NACC; i++)
                                        __stcg(w + i * D::THREADS, acc[i]);
                        } else {
#pragma unroll
                                for (int i = 0; i < D::NACC; i++)
                                        tot[i * D::THREADS] = __dadd_rn(tot[i * D::THREADS], acc[i]);
                        }
#pragma unroll
                        for (int i = 0; i < D::NACC; i++)
                                acc[i] = 0.0;
                }
        }
        cp_async_wait<0>();
        __syncthreads();
}

/* C = alpha * tot (+ beta * C), each operation rounded on its own; with
 * beta == 0 C is not read. SYR2K: the stored triangle only. tot: this
 * thread's slots in shared memory, THREADS apart. */
template <class D>
__device__ __forceinline__ void depilogue(const struct gemmd_kproblem &p, uint32_t m0, uint32_t n0, const double *tot)
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
                        double v = __dmul_rn(alpha, tot[i * D::THREADS]);
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

/* run_entry for the f64 configs: chunks [kc0, kc1) of tile `tile` of
 * problem pi, split tiles finished by their last arrival in chunk order. */
template <class D>
__device__ __forceinline__ void drun_entry(const KParams &kp, uint32_t pi, uint32_t tile, uint32_t kc0, uint32_t kc1,
                                           uint32_t split, unsigned char *smem, uint32_t *s_flag)
{
        const struct gemmd_kproblem p = kp.probs[pi];
        const struct sched_problem sp = to_sched(p);
        const struct sched_shape shape = {D::BM, D::BN, D::BK};
        uint32_t row = 0, col = 0;
        const bool valid = sched_tile_coord(&sp, shape, tile, &row, &col) != 0;
        const uint32_t m0 = row * D::BM, n0 = col * D::BN;
        const Prob pr = make_prob<D>(p);
        /* This thread's NACC slots of the running total, THREADS apart. */
        double *tot = (double *)smem + D::STAGES * D::STAGE_ELEMS + threadIdx.x;
#pragma unroll
        for (int i = 0; i < D::NACC; i++)
                tot[i * D::THREADS] = 0.0;
        double *wsb = nullptr;
        if (split != SCHED_NO_SPLIT)
                wsb = (double *)kp.ws + (size_t)kp.split_ws[split] * D::TILE;

        if (valid) {
                const int lay = (pr.xk ? 2 : 0) | (pr.yk ? 1 : 0);
                switch (lay) {
                case 0:
                        dmainloop<D, false, false>(pr, m0, n0, kc0, kc1, tot, wsb, smem);
                        break;
                case 1:
                        dmainloop<D, false, true>(pr, m0, n0, kc0, kc1, tot, wsb, smem);
                        break;
                case 2:
                        dmainloop<D, true, false>(pr, m0, n0, kc0, kc1, tot, wsb, smem);
                        break;
                default:
                        dmainloop<D, true, true>(pr, m0, n0, kc0, kc1, tot, wsb, smem);
                        break;
                }
        }
        if (wsb) {
                __threadfence();
                __syncthreads();
                if (threadIdx.x == 0)
                        *s_flag = atomicAdd(&kp.arrivals[split], 1u) == kp.split_parts[split] - 1;
                __syncthreads();
                const bool last = *s_flag != 0;
                __syncthreads();
                if (!last)
                        return;
                __threadfence();
                const uint32_t nch = sched_kchunks(p.k);
                for (uint32_t c = 0; c < nch; c++) {
                        const double *w = wsb + (size_t)c * D::TILE + threadIdx.x;
#pragma unroll
                        for (int i = 0; i < D::NACC; i++)
                                tot[i * D::THREADS] = __dadd_rn(tot[i * D::THREADS], __ldcg(w + i * D::THREADS));
                }
                if (threadIdx.x == 0)
                        atomicExch(&kp.arrivals[split], 0u);
        }
        if (valid)
                depilogue<D>(p, m0, n0, tot);
}
