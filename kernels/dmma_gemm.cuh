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
 * accumulators a thread. The sm_90a image (CfgF64h) runs m16n8k4 mmas
 * with double-buffered fragments (PIPE 2, dmainloop2): the fragments of
 * the next k-slice are read while the mmas of this one run, in K steps of
 * 16 over 4 stages. Its copies keep one address per operand rather than
 * one per vector and zero-fill what lies outside the matrix, so that
 * both fragment buffers fit in registers beside the accumulators (a
 * config that spills there loses what the pipelining gains; m16n8k8 did,
 * see docs/performance.md). A launch whose problems share one layout and
 * copy width runs CfgF64hLV, which holds one copy of the mainloop: ptxas
 * allocates registers for the whole kernel, and CfgF64h's 24 inlined
 * copies (layouts x copy widths x tile walks) cost it 15%. The sm_80
 * image (CfgF64) runs m8n8k4 with
 * one k-tile's reads, then its mmas (PIPE 0, dmainloop). Every tile of
 * one device runs the same mma in the same K order, so bits never depend
 * on the plan; on the H100 they are cuBLAS's.
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
 * MK, MR: k and rows of one mma (m8n8k4, or m16n8kMK from sm_90). BK_H,
 * STAGES_H: the K step and stages of the sm_90a image (227 KB of shared
 * memory a block); the sm_80 image takes K steps of 16 and 3 stages (its
 * 163 KB). Tile 128 x 128 either way, 8 warps as 2 (m) x 4 (n) of 64 x 32
 * outputs. PIPE 2: double-buffered fragments (dmainloop2); 0: one
 * k-tile's reads, then its mmas (dmainloop).
 */
template <int MK_, int BK_H_, int STAGES_H_, int PIPE_ = 0, int MR_ = (MK_ == 4 ? 8 : 16), int LAY_ = -1,
          int VWC_ = -1>
struct DCfg {
        static constexpr bool F64 = true;
        /* PIPE 2 only: LAY (X K-major 2, Y K-major 1) and VWC (dsum2's
         * VW) when every problem of the launch has them, else -1. */
        static constexpr int LAY = LAY_, VWC = VWC_;
        static constexpr int MK = MK_;
        static constexpr int PIPE = PIPE_;
        static constexpr int MR = MR_; /* rows of one mma: 8 (m8n8k4) or 16 */
        static constexpr int BM = 128, BN = 128, BK_H = BK_H_, BK_L = 16;
        static constexpr int BK = GEMMD_SMEM_H ? BK_H : BK_L;
        static constexpr int STAGES_H = STAGES_H_, STAGES_L = 3;
        static constexpr int STAGES = GEMMD_SMEM_H ? STAGES_H : STAGES_L;
        static constexpr int THREADS = CUDA_GEMM_THREADS;
        static constexpr int ESZ = 8;
        static constexpr int V = 2; /* doubles per 16-byte vector */
        static constexpr int PAD = 4;
        static constexpr int SK = BK + PAD; /* K-major row stride */
        /* Row stride of a tile's sum in shared memory (depilogue's mirror):
         * pair writes and transposed reads both free of bank conflicts. */
        static constexpr int MS = BN + 4;
        static constexpr int WARPS_M = 2, WM = BM / WARPS_M, WN = BN / (THREADS / 32 / WARPS_M);
        __host__ __device__ static constexpr int stage_elems(int bk)
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
        __host__ __device__ static constexpr int smem_bytes(bool h)
        {
                return (h ? STAGES_H : STAGES_L) * stage_elems(h ? BK_H : BK_L) * ESZ;
        }
        static_assert(SCHED_KCHUNK % BK_L == 0 && BK % MK == 0 && BK_L % MK == 0, "whole mmas per K step");
        static_assert(MT * NT * CV == NACC, "one warp tile of WM x WN");
        static_assert(BM == BN, "one tile shape for every f64 config (cuda_gemm_shape)");
};

using CfgF64 = DCfg<4, 16, GEMMD_F64_STAGES>; /* sm_80 image */
using CfgF64h = DCfg<4, 16, 4, 2, 16>;         /* sm_90a image: m16n8k4, pipelined */
/* CfgF64h for launches whose problems share layout L and VW class V. */
template <int L, int V> using CfgF64hLV = DCfg<4, 16, 4, 2, 16, L, V>;

/* d += a b for one f64 mma of k MK (fragments as in the PTX ISA). The
 * m16n8 shape exists from sm_90 on; the host never launches it on an
 * older device (device_sm90), where it traps. */
template <int MK, int MR> __device__ __forceinline__ void dmma(double *d, const double *a, const double *b);

template <> __device__ __forceinline__ void dmma<4, 8>(double *d, const double *a, const double *b)
{
        asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
            : "+d"(d[0]), "+d"(d[1])
            : "d"(a[0]), "d"(b[0]));
}

template <> __device__ __forceinline__ void dmma<4, 16>(double *d, const double *a, const double *b)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
        asm("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
            : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
            : "d"(a[0]), "d"(a[1]), "d"(b[0]));
#else
        __trap();
#endif
}

__device__ __forceinline__ void cp_async8(void *sdst, const void *gsrc)
{
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_u32(sdst)), "l"(gsrc));
}

/* One double at byte address p, which may be misaligned (an f64 operand
 * at an offset that is only a multiple of a smaller element), read by
 * ordered byte loads: a copy by bytes then holds one double's bytes at a
 * time in registers rather than a whole k-tile's, which the mainloop has
 * no room for. */
__device__ __forceinline__ double load_bytes(const char *p)
{
        uint64_t v = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
                uint32_t b;
                asm volatile("ld.global.u8 %0, [%1];\n" : "=r"(b) : "l"(p + i));
                v |= (uint64_t)b << (8 * i);
        }
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
                                dst[e] = load_bytes(g + (off + e) * 8);
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
                                dmma<D::MK, D::MR>(acc + (mi * D::NT + ni) * D::CV, a[mi], b[ni]);
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

/* Every A and B fragment of k-slice kb of the warp's tile. */
template <class D, bool XK, bool YK>
__device__ __forceinline__ void dload_frags(const double *sx, int kb, double (&a)[D::MT][D::MA],
                                            double (&b)[D::NT][D::MB])
{
#pragma unroll
        for (int ni = 0; ni < D::NT; ni++)
                dload_b1<D, YK>(sx + D::X_ELEMS, kb, ni, b[ni]);
#pragma unroll
        for (int mi = 0; mi < D::MT; mi++)
                dload_a<D, XK>(sx, kb, mi, a[mi]);
}

/* The mmas of one k-slice, row block by row block; odd row blocks walk
 * the columns backwards so that consecutive mmas share a fragment. */
template <class D>
__device__ __forceinline__ void dmma_slice(double *acc, const double (&a)[D::MT][D::MA],
                                           const double (&b)[D::NT][D::MB])
{
#pragma unroll
        for (int mi = 0; mi < D::MT; mi++)
#pragma unroll
                for (int j = 0; j < D::NT; j++) {
                        const int ni = (mi & 1) ? D::NT - 1 - j : j;
                        dmma<D::MK, D::MR>(acc + (mi * D::NT + ni) * D::CV, a[mi], b[ni]);
                }
}

/* cp.async of a B-byte vector (B 16 or 8) of which only the first `bytes`
 * are read, the rest of it zero-filled; nothing is read when bytes is 0. */
template <int B> __device__ __forceinline__ void cp_async_zfill(uint32_t sdst, const void *g, uint32_t bytes);

template <> __device__ __forceinline__ void cp_async_zfill<16>(uint32_t sdst, const void *g, uint32_t bytes)
{
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sdst), "l"(g), "r"(bytes));
}

template <> __device__ __forceinline__ void cp_async_zfill<8>(uint32_t sdst, const void *g, uint32_t bytes)
{
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(sdst), "l"(g), "r"(bytes));
}


/*
 * One operand's copies in the pipelined mainloop (dmainloop2): the ROWS x
 * BK k-tiles of an operand whose rows start at r0, by vectors of VW
 * doubles (VW 2 needs 16-byte alignment, 1 needs 8; 0: one double at a
 * time from an operand at an odd byte offset, read by bytes and stored by
 * the thread itself, which the stage barrier orders as it does the
 * copies). A thread copies the
 * vectors v = tid + i * THREADS of a k-tile; along the contiguous
 * dimension its position is the same for every i, along the other its
 * vectors are STEP apart. So a k-tile's copies take the address of the
 * thread's first vector, ld, and how many rows and k are left past it:
 * what lies outside the matrix is zero-filled by the copy itself instead
 * of a slower path, and no address is kept per vector (the registers go
 * to the fragments).
 */
template <class D, int ROWS, bool KMAJ, int VW_> struct DCopy {
        static constexpr int VW = VW_ ? VW_ : 1; /* doubles a vector */
        static constexpr int VPR = (KMAJ ? D::BK : ROWS) / VW; /* vectors along the contiguous dimension */
        static constexpr int PER = ROWS * D::BK / VW / D::THREADS;
        static constexpr int STEP = D::THREADS / VPR;
        static constexpr int SR = KMAJ ? D::SK : ROWS + D::PAD;
        static_assert(D::THREADS % VPR == 0 && PER * VW * D::THREADS == ROWS * D::BK, "whole vectors a thread");
        const double *p; /* the thread's first vector of the next k-tile */
        int64_t ld;
        int32_t rrem, krem; /* rows and k of the matrix from that vector on */
        uint32_t soff;      /* that vector's byte offset in a stage */

        __device__ __forceinline__ void init(const char *g, int64_t ld_, uint32_t r0, uint32_t rext, uint32_t kext)
        {
                const int c = ((int)threadIdx.x % VPR) * VW, o = (int)threadIdx.x / VPR;
                const int r = KMAJ ? o : c, kk = KMAJ ? c : o;
                ld = ld_;
                p = (const double *)g + (KMAJ ? (int64_t)(r0 + r) * ld + kk : (int64_t)(r0 + r) + (int64_t)kk * ld);
                rrem = (int32_t)(rext - r0) - r;
                krem = (int32_t)kext - kk;
                soff = (uint32_t)(KMAJ ? r * SR + kk : kk * SR + r) * 8;
        }

        /* Copies the next k-tile into the stage at shared address sst. */
        __device__ __forceinline__ void issue(uint32_t sst)
        {
                const double *q = p;
                const int32_t along = KMAJ ? krem : rrem, across = KMAJ ? rrem : krem;
                const uint32_t vbytes = along >= VW ? VW * 8 : along > 0 ? (uint32_t)along * 8 : 0;
#pragma unroll
                for (int i = 0; i < PER; i++) {
                        const uint32_t bytes = across > i * STEP ? vbytes : 0;
                        const uint32_t dst = sst + soff + (uint32_t)(i * STEP * SR * 8);
                        if (VW_ == 0) {
                                const double v = bytes ? load_bytes((const char *)q) : 0.0;
                                asm volatile("st.shared.f64 [%0], %1;\n" ::"r"(dst), "d"(v));
                        } else {
                                cp_async_zfill<VW * 8>(dst, q, bytes);
                        }
                        q += STEP * ld;
                        /* Opaque to the optimizer, so that it computes each
                         * vector's address from the last rather than keeping
                         * one per vector in registers across the mainloop. */
                        asm("" : "+l"(q));
                }
                p += KMAJ ? D::BK : D::BK * ld;
                krem -= D::BK;
        }
};

/*
 * The pipelined mainloop of dmainloop2 and dterm2 over niter k-tiles: acc
 * += each k-tile's mmas with double-buffered fragments (the next k-slice's
 * fragments read while this one's mmas run). issue(i) stages k-tile i
 * (nothing past the last) and commits a copy group. All STAGES stages are
 * filled up front. The barrier of k-tile it comes once the reads of its
 * last slice are issued: past it no warp reads that stage again, so it is
 * refilled at once (k-tile it + STAGES), and k-tile it + 1 is complete for
 * the reads of its first slice.
 */
template <class D, bool XK, bool YK, class Issue>
__device__ __forceinline__ void dpipeline(Issue &issue, int niter, double *acc, unsigned char *smem)
{
        constexpr int SPS = D::BK / D::MK;
        static_assert(SPS >= 2 && SPS % 2 == 0, "an even number of k-slices a k-tile");
        const double *sbase = (const double *)smem;
#pragma unroll
        for (int s = 0; s < D::STAGES; s++)
                issue(s);
        cp_async_wait<D::STAGES - 1>();
        __syncthreads();
        double a[2][D::MT][D::MA], b[2][D::NT][D::MB];
        dload_frags<D, XK, YK>(sbase, 0, a[0], b[0]);
        int cstage = 0;
        for (int it = 0; it < niter; it++) {
                const double *sx = sbase + cstage * D::STAGE_ELEMS;
                const int nstage = cstage + 1 == D::STAGES ? 0 : cstage + 1;
#pragma unroll
                for (int ks = 0; ks < SPS; ks++) {
                        const int cur = ks & 1, nxt = cur ^ 1;
                        if (ks < SPS - 1)
                                dload_frags<D, XK, YK>(sx, (ks + 1) * D::MK, a[nxt], b[nxt]);
                        if (ks == SPS - 2) {
                                cp_async_wait<D::STAGES - 2>();
                                __syncthreads();
                                issue(it + D::STAGES);
                        }
                        if (ks == SPS - 1 && it + 1 < niter)
                                dload_frags<D, XK, YK>(sbase + nstage * D::STAGE_ELEMS, 0, a[nxt], b[nxt]);
                        dmma_slice<D>(acc, a[cur], b[cur]);
                }
                cstage = nstage;
        }
        cp_async_wait<0>();
        __syncthreads();
}

/*
 * The whole-K sum of the tile at (m0, n0) of problem *pp into acc, from
 * zero, by dpipeline (PIPE 2), its terms one continuous pipeline: the
 * second term's copies follow the first's. Operands 16-byte (VW 2) or
 * 8-byte (VW 1) aligned, or read by bytes (VW 0). The sum's order is dmainloop's: all of the first term's
 * K, then (SYR2K) all of the second's, whose X and Y are the first's
 * swapped; they are read from the problem when it begins, so that
 * nothing of the problem stays in registers beside the fragments.
 */
template <class D, bool XK, bool YK, int VW>
__device__ __forceinline__ void dmainloop2(const struct gemmd_kproblem *pp, uint32_t m0, uint32_t n0,
                                           uint32_t m, uint32_t n, uint32_t k, int nterms, double *acc,
                                           unsigned char *smem)
{
        constexpr uint32_t SB = D::STAGE_ELEMS * 8, XB = D::X_ELEMS * 8;
        const uint32_t s0 = smem_u32(smem);
        const int ktiles = (int)((k + D::BK - 1) / D::BK);
        const int niter = ktiles * nterms;
        DCopy<D, D::BM, XK, VW> cx;
        DCopy<D, D::BN, YK, VW> cy;
        cx.init((const char *)(uintptr_t)pp->a, pp->lda, m0, m, k);
        cy.init((const char *)(uintptr_t)pp->b, pp->ldb, n0, n, k);
        int left = ktiles; /* k-tiles of the current term still to copy */
        uint32_t wst = s0;
        auto issue = [&](int it) {
                if (it < niter) {
                        if (left == 0) {
                                cx.init((const char *)(uintptr_t)pp->b, pp->ldb, m0, m, k);
                                cy.init((const char *)(uintptr_t)pp->a, pp->lda, n0, n, k);
                                left = ktiles;
                        }
                        cx.issue(wst);
                        cy.issue(wst + XB);
                        left--;
                        wst = wst + SB == s0 + D::STAGES * SB ? s0 : wst + SB;
                }
                cp_async_commit();
        };
        dpipeline<D, XK, YK>(issue, niter, acc, smem);
}

/*
 * One term's whole-K sum (X rows m0.. of m, Y rows n0.. of n) added into
 * acc by dpipeline, with no term switch in its copies (dmainloop2f), so
 * the compiler can predicate them and spread them between the mmas.
 */
template <class D, bool XK, bool YK, int VW>
__device__ __forceinline__ void dterm2(const char *gx, int64_t ldx, const char *gy, int64_t ldy, uint32_t m0,
                                       uint32_t n0, uint32_t m, uint32_t n, uint32_t k, double *acc,
                                       unsigned char *smem)
{
        constexpr uint32_t SB = D::STAGE_ELEMS * 8, XB = D::X_ELEMS * 8;
        const uint32_t s0 = smem_u32(smem);
        const int ktiles = (int)((k + D::BK - 1) / D::BK);
        DCopy<D, D::BM, XK, VW> cx;
        DCopy<D, D::BN, YK, VW> cy;
        cx.init(gx, ldx, m0, m, k);
        cy.init(gy, ldy, n0, n, k);
        uint32_t wst = s0;
        auto issue = [&](int kt) {
                if (kt < ktiles) {
                        cx.issue(wst);
                        cy.issue(wst + XB);
                        wst = wst + SB == s0 + D::STAGES * SB ? s0 : wst + SB;
                }
                cp_async_commit();
        };
        dpipeline<D, XK, YK>(issue, ktiles, acc, smem);
}

/*
 * dmainloop2 for launches of one layout and alignment (CfgF64hLV): one
 * dterm2 a term, in dmainloop's order (all of the first term's
 * K, then a SYR2K's second, whose X and Y are the first's swapped). Each
 * term's operands are read from the problem as it begins, so that none of
 * it stays in registers beside the fragments.
 */
template <class D, bool XK, bool YK, int VW>
__device__ __forceinline__ void dmainloop2f(const struct gemmd_kproblem *pp, uint32_t m0, uint32_t n0,
                                           uint32_t m, uint32_t n, uint32_t k, int nterms, double *acc,
                                           unsigned char *smem)
{
        for (int t = 0; t < nterms; t++) {
                const char *a = (const char *)(uintptr_t)pp->a, *b = (const char *)(uintptr_t)pp->b;
                const int64_t lda = pp->lda, ldb = pp->ldb;
                dterm2<D, XK, YK, VW>(t ? b : a, t ? ldb : lda, t ? a : b, t ? lda : ldb, m0, n0, m, n, k, acc,
                                      smem);
        }
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
        for (int it = 0; it < niter; it++) {
                cp_async_wait<D::STAGES - 2>();
                __syncthreads();
                issue(it + D::STAGES - 1);
                const double *sx = sbase + cstage * D::STAGE_ELEMS;
                dcompute_stage<D, XK, YK>(sx, sx + D::X_ELEMS, acc);
                cstage = cstage + 1 == D::STAGES ? 0 : cstage + 1;
        }
        cp_async_wait<0>();
        __syncthreads();
}

/* C = alpha * sum(i, row, col) (+ beta * C) over the thread's accumulator
 * positions, each operation rounded on its own; with beta == 0 C is not
 * read. SYR2K: the stored triangle only (sum is not called elsewhere).
 * With beta, C is read CB elements at a time, all of them before their
 * stores: the compiler cannot tell C's addresses apart (ldc is a run-time
 * value), so an element read after a store waits for it, and the tile
 * paid the memory's latency once per element. */
template <class D, class Sum>
__device__ __forceinline__ void dstore(const struct gemmd_kproblem &p, uint32_t m0, uint32_t n0, Sum sum)
{
        constexpr int CB = 8;
        static_assert(D::NACC % CB == 0, "whole batches");
        double *cptr = (double *)(uintptr_t)p.c;
        const double alpha = p.alpha_f64, beta = p.beta_f64;
        const bool syr2k = p.kind == SCHED_SYR2K, lower = p.uplo == 0;
        /* Whether (gi, gj) is in C and, for a SYR2K, in its stored triangle. */
        auto inside = [&](uint32_t gi, uint32_t gj) {
                return gi < p.m && gj < p.n && !(syr2k && (lower ? gi < gj : gi > gj));
        };
        auto store = [&](auto with_beta) {
#pragma unroll
                for (int b = 0; b < D::NACC; b += CB) {
                        double old[CB];
                        if (decltype(with_beta)::value) {
#pragma unroll
                                for (int e = 0; e < CB; e++) {
                                        uint32_t r, c;
                                        dacc_pos<D>(b + e, r, c);
                                        const uint32_t gi = m0 + r, gj = n0 + c;
                                        old[e] = inside(gi, gj) ? cptr[gi + (int64_t)gj * p.ldc] : 0.0;
                                }
                        }
#pragma unroll
                        for (int e = 0; e < CB; e++) {
                                const int i = b + e;
                                uint32_t r, c;
                                dacc_pos<D>(i, r, c);
                                const uint32_t gi = m0 + r, gj = n0 + c;
                                if (!inside(gi, gj))
                                        continue;
                                double *dst = cptr + gi + (int64_t)gj * p.ldc;
                                double v = __dmul_rn(alpha, sum(i, r, c));
                                if (decltype(with_beta)::value)
                                        v = __dadd_rn(v, __dmul_rn(beta, old[e]));
                                *dst = v;
                        }
                }
        };
        if (beta != 0.0)
                store(std::true_type{});
        else
                store(std::false_type{});
}

/*
 * A SYR2K tile on the diagonal (m0 == n0) sums its first term alone: the
 * second term's tile is the first's transpose (B A^T = (A B^T)^T), so the
 * tile costs one term's K instead of two. Every f64 path takes it, so a
 * problem's bits never depend on which kernel ran it.
 */
__device__ __forceinline__ bool dmirror(const struct gemmd_kproblem &p, uint32_t m0, uint32_t n0)
{
        return p.kind == SCHED_SYR2K && m0 == n0;
}

/*
 * depilogue of a dmirror tile where shared memory holds half of D (the
 * sm_80 image): 64 rows of D at a time, written by the warps that hold
 * them, then read by the warps whose columns are those rows.
 */
template <class D>
__device__ __forceinline__ void depilogue_mirror_halves(const struct gemmd_kproblem &p, uint32_t m0,
                                                        const double *acc, unsigned char *smem)
{
        constexpr int H = D::BM / 2, S = D::MS;
        static_assert(D::WM == H && H % D::WN == 0 && D::CV % 2 == 0, "a warp's rows and columns in one half");
        static_assert(H * S * 8 <= D::smem_bytes(false), "half of D fits the sm_80 image's stages");
        double *sd = (double *)smem;
        const int warp = threadIdx.x >> 5, wm = warp % D::WARPS_M, wn = warp / D::WARPS_M;
#pragma unroll
        for (int h = 0; h < 2; h++) {
                if (wm == h) {
#pragma unroll
                        for (int i = 0; i < D::NACC; i += 2) {
                                uint32_t r, c;
                                dacc_pos<D>(i, r, c);
                                *(double2 *)(sd + (r - h * H) * S + c) = make_double2(acc[i], acc[i + 1]);
                        }
                }
                __syncthreads();
                if (wn * D::WN / H == h)
                        dstore<D>(p, m0, m0, [&](int i, uint32_t r, uint32_t c) {
                                return __dadd_rn(acc[i], sd[(c - h * H) * S + r]);
                        });
                __syncthreads();
        }
}

/*
 * The tile's epilogue: C = alpha * acc (+ beta * C) or, for a dmirror tile
 * (acc the first term's sum D), C = alpha * (D + D^T) (+ beta * C): D goes
 * through shared memory and D^T is added into acc, so both take the one
 * store loop, one copy of it a kernel. The stages must be idle (the
 * mainloops end on a barrier), and are again at the stores.
 */
template <class D>
__device__ __forceinline__ void depilogue(const struct gemmd_kproblem &p, uint32_t m0, uint32_t n0, double *acc,
                                          bool mirror, unsigned char *smem)
{
        static_assert(D::CV % 2 == 0, "pairs of columns a thread");
        static_assert(D::BM * D::MS * 8 <= D::smem_bytes(true), "all of D fits the sm_90 image's stages");
        double *sd = (double *)smem;
        if (!GEMMD_SMEM_H && mirror) {
                depilogue_mirror_halves<D>(p, m0, acc, smem);
                return;
        }
        if (mirror) {
#pragma unroll
                for (int i = 0; i < D::NACC; i += 2) {
                        uint32_t r, c;
                        dacc_pos<D>(i, r, c);
                        *(double2 *)(sd + r * D::MS + c) = make_double2(acc[i], acc[i + 1]);
                }
                __syncthreads();
#pragma unroll
                for (int i = 0; i < D::NACC; i++) {
                        uint32_t r, c;
                        dacc_pos<D>(i, r, c);
                        double t;
                        /* Each load where its add needs it, not hoisted
                         * ahead: registers are tight beside acc. */
                        asm volatile("ld.shared.f64 %0, [%1];" : "=d"(t) : "r"(smem_u32(sd + c * D::MS + r)));
                        acc[i] = __dadd_rn(acc[i], t);
                }
                __syncthreads();
        }
        dstore<D>(p, m0, n0, [&](int i, uint32_t, uint32_t) { return acc[i]; });
}

/* A problem's layout as the f64 kernels take it: X K-major 2, Y K-major
 * 1 (make_prob's xk, yk). Host and device, so that the launcher's choice
 * of kernel (f64_class) and the kernel agree. */
__host__ __device__ inline int f64_layout(const struct gemmd_kproblem &p)
{
        const bool xk = p.trans_a != 0, yk = p.kind == SCHED_SYR2K ? xk : p.trans_b == 0;
        return (xk ? 2 : 0) | (yk ? 1 : 0);
}

/* Its copy width in dmainloop2: 2 (16-byte vectors: both operands and
 * their leading dimensions allow them), 1 (doubles), 0 (an operand at an
 * odd byte offset: bytes). */
__host__ __device__ inline int f64_copy_width(const struct gemmd_kproblem &p)
{
        if (((p.a | p.b) & 7) != 0)
                return 0;
        return ((p.a | p.b) & 15) == 0 && p.lda % 2 == 0 && p.ldb % 2 == 0 ? 2 : 1;
}

/* dmainloop for the tile's layout (lay: X K-major 2, Y K-major 1). */
template <class D>
__device__ __forceinline__ void dmainloop_any(const Prob &pr, int lay, uint32_t m0, uint32_t n0, double *acc,
                                              unsigned char *smem)
{
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
}

/* dmainloop2 for the problem's layout. */
template <class D, int VW>
__device__ __forceinline__ void dtile2_any_layout(const struct gemmd_kproblem *pp, const Prob &pr, uint32_t m0,
                                                  uint32_t n0, double *acc, unsigned char *smem)
{
        switch ((pr.xk ? 2 : 0) | (pr.yk ? 1 : 0)) {
        case 0:
                dmainloop2<D, false, false, VW>(pp, m0, n0, pr.m, pr.n, pr.k, pr.nterms, acc, smem);
                break;
        case 1:
                dmainloop2<D, false, true, VW>(pp, m0, n0, pr.m, pr.n, pr.k, pr.nterms, acc, smem);
                break;
        case 2:
                dmainloop2<D, true, false, VW>(pp, m0, n0, pr.m, pr.n, pr.k, pr.nterms, acc, smem);
                break;
        default:
                dmainloop2<D, true, true, VW>(pp, m0, n0, pr.m, pr.n, pr.k, pr.nterms, acc, smem);
                break;
        }
}

/*
 * The sum of pr's terms (pr.nterms) of the tile at (m0, n0) of problem *pp
 * into acc by the pipelined mainloop, with vectors of VW doubles: the
 * launch's one layout (CfgF64hLV) or the problem's.
 */
template <class D, int VW>
__device__ __forceinline__ void dsum2(const struct gemmd_kproblem *pp, const Prob &pr, uint32_t m0, uint32_t n0,
                                      double *acc, unsigned char *smem)
{
        if constexpr (D::LAY >= 0)
                dmainloop2f<D, (D::LAY & 2) != 0, (D::LAY & 1) != 0, VW>(pp, m0, n0, pr.m, pr.n, pr.k, pr.nterms,
                                                                        acc, smem);
        else
                dtile2_any_layout<D, VW>(pp, pr, m0, n0, acc, smem);
}

/* dsum2 with the launch's one copy width (CfgF64hLV), or, in the kernel
 * for mixed groups, by doubles, or by bytes for an operand at an odd byte
 * offset: that kernel holds a mainloop for each layout and width, and
 * with 16-byte copies as well its twelve spilled 3 KB beside depilogue's
 * mirror, which cost more than the wider copies gain. */
template <class D>
__device__ __forceinline__ void dsum2_any(const struct gemmd_kproblem *pp, const Prob &pr, int vw, uint32_t m0,
                                          uint32_t n0, double *acc, unsigned char *smem)
{
        if constexpr (D::VWC >= 0) {
                dsum2<D, D::VWC>(pp, pr, m0, n0, acc, smem);
        } else {
                if (vw == 0)
                        dsum2<D, 0>(pp, pr, m0, n0, acc, smem);
                else
                        dsum2<D, 1>(pp, pr, m0, n0, acc, smem);
        }
}

/* The tile at (m0, n0) of problem pi, one epilogue after whichever
 * mainloop summed it. */
template <class D>
__device__ __forceinline__ void dtile(const KParams &kp, uint32_t pi, uint32_t m0, uint32_t n0, unsigned char *smem)
{
        const struct gemmd_kproblem p = kp.probs[pi];
        Prob pr = make_prob<D>(p);
        if (dmirror(p, m0, n0))
                pr.nterms = 1;
        double acc[D::NACC];
#pragma unroll
        for (int i = 0; i < D::NACC; i++)
                acc[i] = 0.0;
        if constexpr (D::PIPE == 2)
                dsum2_any<D>(kp.probs + pi, pr, f64_copy_width(p), m0, n0, acc, smem);
        else
                dmainloop_any<D>(pr, (pr.xk ? 2 : 0) | (pr.yk ? 1 : 0), m0, n0, acc, smem);
        /* Read again rather than kept in registers across the mainloop,
         * which needs them all; into a local copy, since stores to C
         * could alias the problem array and would force a reload of each
         * field after every store. */
        const struct gemmd_kproblem pe = kp.probs[pi];
        /* dmirror again rather than a flag kept across the mainloop. */
        depilogue<D>(pe, m0, n0, acc, dmirror(pe, m0, n0), smem);
}

/* run_entry for the f64 configs: the whole of tile `tile` of problem pi
 * (f64 entries always cover all of K: the launcher refuses split plans);
 * an f64 SYR2K's paired diagonal tile is two dtile calls, one a block. */
template <class D>
__device__ __forceinline__ void drun_entry(const KParams &kp, uint32_t pi, uint32_t tile, unsigned char *smem)
{
        const struct sched_problem sp = to_sched(kp.probs[pi]);
        const struct sched_shape shape = {D::BM, D::BN, D::BK};
        uint32_t row = 0, col = 0;
        if (!sched_tile_coord(&sp, shape, tile, &row, &col))
                return;
        const uint32_t nb = sched_tile_blocks(&sp, shape, row, col);
        for (uint32_t d = 0; d < nb; d++)
                dtile<D>(kp, pi, (row + d) * D::BM, (col + d) * D::BN, smem);
}
