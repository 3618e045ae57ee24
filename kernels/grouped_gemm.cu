/*
 * grouped_gemm.cu - persistent grouped GEMM/SYR2K kernels (sm_80 and later).
 *
 * One kernel per config: f16 and bf16 on mma.sync m16n8k16 tensor cores,
 * f32 with TF32 allowed on mma.sync m16n8k8, exact f32 on FFMA, f64 on
 * FP64 tensor cores (dmma_gemm.cuh: its own tile and sums). All share
 * a 128 x 128 output tile, 8 warps, and a multistage cp.async pipeline
 * that stages operand tiles in shared memory in the layout they have in
 * global memory ("K-major" when consecutive k are adjacent, "MN-major"
 * when consecutive rows/columns are); the tensor-core paths read either
 * layout with ldmatrix or ldmatrix.trans. Operands whose pointer is 16-byte
 * aligned and whose leading dimension is a multiple of a 16-byte vector go
 * through cp.async; all others, and vectors that straddle the matrix edge,
 * are loaded element by element with bounds checks (zeros outside).
 *
 * A problem is computed as one or two "terms" X * Y over K: GEMM has one
 * (X = op(A), Y = op(B)); SYR2K has two (op(A) op(B)^T, then op(B) op(A)^T)
 * summed into the same chunk sum, in that order per canonical K chunk.
 *
 * Kernels are at the top, the launcher at the bottom.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <atomic>
#ifdef GEMMD_KTRACE
#include <cstdio>
#include <cstdlib>
#endif
#include <mutex>
#include <type_traits>

#include "include/gemmd.h"
#include "kernels/cuda_gemm.h"
#include "kernels/kproblem.h"
#include "kernels/res_mark.h"
#include "kernels/res_post.h"
#include "kernels/tmap_memo.h"
#include "scheduler/plan.h"
#include "scheduler/tiles.h"

/* The Hopper fast path (wgmma_gemm.cuh); 0 leaves every group on the sm_80
 * kernels. */
#ifndef GEMMD_WGMMA
#define GEMMD_WGMMA 1
#endif

namespace {

enum { MODE_MMA16 = 0, MODE_TF32 = 1, MODE_FFMA = 2 };

#ifndef GEMMD_TF32_STAGES
#define GEMMD_TF32_STAGES 3
#endif
#ifndef GEMMD_FFMA_BK
#define GEMMD_FFMA_BK 16
#endif
#ifndef GEMMD_FFMA_STAGES
#define GEMMD_FFMA_STAGES 3
#endif

/* Device code for sm_80..sm_89 (and PTX JIT-compiled from compute_80) uses
 * the smaller shared-memory layout those chips allow; the sm_90a image the
 * larger one. The host picks the matching size with device_sm90(), which
 * says which image runs. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define GEMMD_SMEM_H 0
#else
#define GEMMD_SMEM_H 1
#endif

__host__ __device__ constexpr int cmax(int a, int b) { return a > b ? a : b; }

template <int MODE_, typename T_> struct Cfg {
        static constexpr bool F64 = false; /* f64 configs: DCfg (dmma_gemm.cuh) */
        static constexpr int LAY = -1;     /* DCfg only */
        using T = T_;
        static constexpr int MODE = MODE_;
        static constexpr int BM = 128, BN = 128;
        static constexpr int BK = MODE == MODE_FFMA ? GEMMD_FFMA_BK : MODE == MODE_TF32 ? 32 : 64;
        /* _H: the sm_90a image (227 KB of shared memory per block); _L: the
         * sm_80 one (163 KB: room for the f32 running total, not tf32's). */
        static constexpr int STAGES_H = MODE == MODE_MMA16 ? 4 : MODE == MODE_TF32 ? GEMMD_TF32_STAGES
                                                                                   : GEMMD_FFMA_STAGES;
        static constexpr int STAGES_L = MODE == MODE_MMA16 ? 4 : 3;
        static constexpr int STAGES = GEMMD_SMEM_H ? STAGES_H : STAGES_L;
        static constexpr int THREADS = CUDA_GEMM_THREADS;
        static constexpr int ESZ = (int)sizeof(T);
        static constexpr int V = 16 / ESZ;             /* elements per 16-byte vector */
        static constexpr int SK = BK + (ESZ == 2 ? 8 : 4); /* K-major row stride */
        static constexpr int SM = BM + 8;              /* MN-major row stride */
        static constexpr int OP_ELEMS = cmax(BM * SK, BK * SM);
        static constexpr int NACC = BM * BN / THREADS; /* accumulators per thread */
        static constexpr int TILE = BM * BN;
        /* f32 configs keep the tile's running total in shared memory (each
         * thread its own NACC slots, THREADS apart) rather than in 64 more
         * registers: the mainloop then has room to prefetch fragments. */
        static constexpr bool TOT_SMEM_H = MODE != MODE_MMA16, TOT_SMEM_L = MODE == MODE_FFMA;
        static constexpr bool TOT_SMEM = GEMMD_SMEM_H ? TOT_SMEM_H : TOT_SMEM_L;
        static constexpr int TSTR = TOT_SMEM ? THREADS : 1; /* stride of tot[] */
        static constexpr int smem_bytes(bool h)
        {
                return (h ? STAGES_H : STAGES_L) * 2 * OP_ELEMS * ESZ + ((h ? TOT_SMEM_H : TOT_SMEM_L) ? TILE * 4 : 0);
        }
        static_assert(SCHED_KCHUNK % BK == 0, "a K chunk must hold whole k-tiles");
        static_assert(NACC * THREADS == TILE, "one tile in registers");
};

using CfgF16 = Cfg<MODE_MMA16, __half>;
using CfgBF16 = Cfg<MODE_MMA16, __nv_bfloat16>;
using CfgTF32 = Cfg<MODE_TF32, float>;
using CfgF32 = Cfg<MODE_FFMA, float>;

struct KParams {
        const struct gemmd_kproblem *probs;
        uint32_t nprobs;
        const uint32_t *cta_begin;         /* NULL: device mode */
        const struct sched_entry *entries;
        const uint32_t *split_parts;
        const uint32_t *split_ws;
        float *ws;
        uint32_t *arrivals;
        /* Nonzero: the plan's split tiles are added apart (sched_plan
         * reduce_apart) by reduce_apart_kernel after this one, which then
         * only stores their chunk sums; nentries for that kernel. */
        uint32_t reduce_apart, nentries;
        /* With two kernels sharing a group (cuda_gemm.h, tmaps): per problem
         * nonzero (1 GEMM, 2 SYR2K, | 4 with a map of C) if the wgmma kernel computes it; a kernel
         * skips the problems whose (flag != 0) differs from want_fast. NULL:
         * compute every problem. */
        const uint8_t *fast;
        uint32_t want_fast;
        /* Early completion (cuda_group.early_*; NULL early_cnt: off). */
        uint32_t *early_cnt;
        const uint32_t *early_need;
        uint32_t *early_flag;
        uint32_t early_seq;
        const uint64_t *early_word;
        /* Rows of the plan's tiles where they are not WCfg::BM (0): 64 for
         * the half tile (cuda_gemm_shape_half), whose tiles one consumer
         * computes. Host plans only (device mode maps the usual tiles). */
        uint32_t tile_rows;
};

/* The Hopper kernel's launch parameter: the group's pointers and, when
 * inl_bytes > 0, the bytes of device range [inl_dev, inl_dev + inl_bytes)
 * carried along, which the pointers into that range read instead
 * (cuda_group.inline_*). */
/* The resident kernel's own parameters (cuda_gemm_res_launch); unused
 * by the others. */
struct ResArgs {
        struct cuda_res_host *host;
        const struct cuda_res_posts *posts;
        char *area;
        uint64_t slot_bytes, first_seq, gen;
        uint32_t ndisp; /* dispatchers: CTAs 0 .. ndisp - 1 read the posts (res_dispatch) */
};

struct KArgs {
        KParams kp;
        const char *tmaps;
        ResArgs res;
        uint64_t inl_dev;
        uint32_t inl_bytes;
        alignas(64) unsigned char inl[CUDA_GEMM_INLINE_MAX];
};

/* p, moved into the launch's own copy when it points into the carried
 * range. The copy lives in kernel-parameter memory: generic loads and TMA
 * (tensor maps must be 64-byte aligned there too) read it directly. */
template <typename P> __device__ __forceinline__ P *rebase(const KArgs &a, P *p)
{
        const uint64_t off = (uint64_t)(uintptr_t)p - a.inl_dev;
        return a.inl_bytes && p && off < a.inl_bytes ? (P *)(a.inl + off) : p;
}

__device__ __forceinline__ KParams kparams(const KArgs &a)
{
        KParams kp = a.kp;
        kp.probs = rebase(a, kp.probs);
        kp.cta_begin = rebase(a, kp.cta_begin);
        kp.entries = rebase(a, kp.entries);
        kp.split_parts = rebase(a, kp.split_parts);
        kp.split_ws = rebase(a, kp.split_ws);
        kp.fast = rebase(a, kp.fast);
        return kp; /* early_*: read from the parameter space where used (early_helper) */
}

/* ---- PTX wrappers -------------------------------------------------------- */

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
        return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(void *sdst, const void *gsrc)
{
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(sdst)), "l"(gsrc));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N> __device__ __forceinline__ void cp_async_wait()
{
        asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(smem_u32(p)));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void *p)
{
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(smem_u32(p)));
}

template <typename T> __device__ __forceinline__ void mma16(float *d, const uint32_t *a, const uint32_t *b);

template <> __device__ __forceinline__ void mma16<__half>(float *d, const uint32_t *a, const uint32_t *b)
{
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma16<__nv_bfloat16>(float *d, const uint32_t *a, const uint32_t *b)
{
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_tf32(float *d, const uint32_t *a, const uint32_t *b)
{
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Four 8 x 4 blocks of 32-bit elements (8 rows of 16 bytes each): register
 * j of lane l holds element (l / 4, l % 4) of block j, the row addresses of
 * block j coming from lanes 8j..8j+7. */
__device__ __forceinline__ void ldsm_x4_b32(uint32_t r[4], const float *p)
{
        ldsm_x4(r, p);
}

/* Rounds f32 bits to TF32 (to nearest, ties away from zero, like
 * cvt.rna) for an mma that ignores the low 13 bits: one integer add.
 * Infinities stay infinite; a NaN stays NaN unless its top 10 mantissa
 * bits are all ones. */
__device__ __forceinline__ uint32_t tf32_round_bits(uint32_t x)
{
        return x + 0x1000u;
}

__device__ __forceinline__ uint32_t to_tf32(float f)
{
        uint32_t r;
        asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(f));
        return r;
}

/* ---- element conversions ------------------------------------------------- */

template <typename T> __device__ __forceinline__ float to_f32(T v);
template <> __device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v)
{
        return __bfloat162float(v);
}

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v)
{
        return __float2bfloat16_rn(v);
}

/* ---- one problem, as the mainloop sees it -------------------------------- */

struct Term {
        const char *x, *y; /* X (m x k) and Y (k x n) of the term */
        int64_t ldx, ldy;
        bool xal, yal; /* 16-byte vector loads allowed */
};

struct Prob {
        Term term[2];
        int nterms;
        uint32_t m, n, k;
        bool xk, yk; /* X K-major (op T), Y K-major (op N) */
};

__device__ __forceinline__ struct sched_problem to_sched(const struct gemmd_kproblem &p)
{
        struct sched_problem sp;
        sp.kind = p.kind;
        sp.dtype = p.dtype;
        sp.uplo = p.uplo;
        sp.tf32 = p.tf32;
        sp.m = p.m;
        sp.n = p.n;
        sp.k = p.k;
        return sp;
}

/* Device mode: maps linear tile t of the group's concatenated problems to
 * (problem, tile within it), as CUTLASS's kDeviceOnly visitor does, with a
 * warp-wide prefix sum over the tile counts of 32 problems at a time.
 * Called by a whole warp with the same t; (pbase, tbase) is the window's
 * first problem and the tiles before it, which only move forward since t
 * only grows. Returns the problem, or UINT32_MAX past the last tile. */
__device__ __forceinline__ uint32_t warp_map_tile(const KParams &kp, struct sched_shape shape, uint32_t t,
                                                  uint32_t &pbase, uint32_t &tbase, uint32_t &local)
{
        const int lane = threadIdx.x & 31;

        for (;;) {
                const uint32_t p = pbase + lane;
                uint32_t cnt = 0;
                if (p < kp.nprobs) {
                        const struct sched_problem sp = to_sched(kp.probs[p]);
                        cnt = sched_tile_count(&sp, shape);
                }
                uint32_t incl = cnt;
#pragma unroll
                for (int o = 1; o < 32; o <<= 1) {
                        const uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
                        if (lane >= o)
                                incl += v;
                }
                const uint32_t total = __shfl_sync(0xffffffffu, incl, 31);
                if (t < tbase + total) {
                        const uint32_t hit = __ballot_sync(0xffffffffu, tbase + incl > t);
                        const int L = __ffs(hit) - 1;
                        const uint32_t inclL = __shfl_sync(0xffffffffu, incl, L);
                        const uint32_t cntL = __shfl_sync(0xffffffffu, cnt, L);
                        local = t - (tbase + inclL - cntL);
                        return pbase + L;
                }
                if (pbase + 32 >= kp.nprobs)
                        return UINT32_MAX;
                tbase += total;
                pbase += 32;
        }
}

template <class C> __device__ __forceinline__ bool vec_ok(const void *p, int64_t ld)
{
        return ((uintptr_t)p & 15u) == 0 && (ld % C::V) == 0;
}

template <class C> __device__ __forceinline__ Prob make_prob(const struct gemmd_kproblem &p)
{
        Prob pr;
        const char *a = (const char *)(uintptr_t)p.a, *b = (const char *)(uintptr_t)p.b;
        pr.m = p.m;
        pr.n = p.n;
        pr.k = p.k;
        if (p.kind == SCHED_SYR2K) {
                /* op N: A B^T + B A^T (X op N, Y op T); op T: A^T B + B^T A. */
                pr.nterms = 2;
                pr.xk = p.trans_a != 0;
                pr.yk = p.trans_a != 0;
                pr.term[0] = Term{a, b, p.lda, p.ldb, vec_ok<C>(a, p.lda), vec_ok<C>(b, p.ldb)};
                pr.term[1] = Term{b, a, p.ldb, p.lda, vec_ok<C>(b, p.ldb), vec_ok<C>(a, p.lda)};
        } else {
                pr.nterms = 1;
                pr.xk = p.trans_a != 0;
                pr.yk = p.trans_b == 0;
                pr.term[0] = Term{a, b, p.lda, p.ldb, vec_ok<C>(a, p.lda), vec_ok<C>(b, p.ldb)};
                pr.term[1] = pr.term[0];
        }
        return pr;
}

/* ---- global -> shared ---------------------------------------------------- */

/*
 * Where a staged tile's rows lie. A K-major operand's smem row i is tile row
 * r0 + i, its elements k0.. of K; an MN-major one's row i is k0 + i, its
 * elements r0.. of the tile's rows. Each smem row has 16 bytes of slack
 * (SK, SM), room for the 16-byte blocks that cover a row at any 2-byte
 * offset.
 */
template <class C, bool KMAJ> struct Rows {
        static constexpr int N = KMAJ ? C::BM : C::BK;        /* smem rows */
        static constexpr int LEN = KMAJ ? C::BK : C::BM;      /* elements a row */
        static constexpr int STRIDE = KMAJ ? C::SK : C::SM;   /* elements */
        static constexpr int BLOCKS = LEN * C::ESZ / 16 + 1;  /* 16-byte blocks covering a row */
        static constexpr int PIECES = LEN * C::ESZ / 16;      /* 16-byte pieces of a placed row */
        static_assert(STRIDE * C::ESZ >= BLOCKS * 16, "a row's slot holds its covering blocks");
        static_assert(32 % PIECES == 0, "one warp places whole rows");
};

/* Row i of a staged tile: its first element's address and how many of its
 * elements lie in the matrix (0: none). */
template <class C, bool KMAJ>
__device__ __forceinline__ const char *staged_row(const char *g, int64_t ld, uint32_t r0, uint32_t rext,
                                                  uint32_t k0, uint32_t kext, int i, uint32_t *nvalid)
{
        using R = Rows<C, KMAJ>;
        const uint32_t outer = (KMAJ ? r0 : k0) + i, oext = KMAJ ? rext : kext;
        const uint32_t inner = KMAJ ? k0 : r0, iext = KMAJ ? kext : rext;
        *nvalid = outer < oext && inner < iext ? min((uint32_t)R::LEN, iext - inner) : 0;
        return g + ((int64_t)inner + (int64_t)outer * ld) * C::ESZ;
}

/* What place_tile needs of each row of a tile staged by blocks, per stage
 * and operand: the row's offset within 16 bytes, and its element count in
 * the matrix (times 16). */
template <class C> __device__ __forceinline__ uint16_t *row_info(int stage, int operand)
{
        if constexpr (C::ESZ == 2) {
                __shared__ uint16_t info[C::STAGES * 2 * C::BM];
                static_assert(C::BM >= C::BK, "a stage's rows of either layout fit");
                return info + (stage * 2 + operand) * C::BM;
        } else {
                return nullptr; /* f32 tiles are never staged by blocks */
        }
}

/*
 * A 16-bit operand tile that cp.async cannot take in whole aligned
 * vectors (its pointer or leading dimension is off the 16-byte grid, or
 * the tile crosses the matrix edge), still copied asynchronously: each
 * row's elements are fetched as the 16-byte aligned blocks that cover
 * them, into the row's slot at their offset within 16 bytes, and the row's
 * offset and length go to `info`; place_tile() moves them into place once
 * they have landed. Blocks holding no element of the matrix are not read
 * (an aligned block with one byte of the matrix lies within the matrix's
 * pages, so no read can fault); place_tile zeroes what they would hold.
 * Not inlined: only such tiles pay for its registers.
 */
template <class C, bool KMAJ>
__device__ __noinline__ void load_tile_blocks(typename C::T *s, uint16_t *info, const char *g, int64_t ld,
                                              uint32_t r0, uint32_t rext, uint32_t k0, uint32_t kext)
{
        using R = Rows<C, KMAJ>;
        constexpr int TOTAL = R::N * R::BLOCKS, PER = (TOTAL + C::THREADS - 1) / C::THREADS;
#pragma unroll
        for (int j = 0; j < PER; j++) {
                const int v = threadIdx.x + j * C::THREADS, i = v / R::BLOCKS, b = v % R::BLOCKS;
                uint32_t nvalid;
                if (v >= TOTAL)
                        break;
                const char *row = staged_row<C, KMAJ>(g, ld, r0, rext, k0, kext, i, &nvalid);
                const uintptr_t blk = ((uintptr_t)row & ~(uintptr_t)15) + 16u * b;
                if (b == 0)
                        info[i] = (uint16_t)(((uintptr_t)row & 15) | nvalid << 4);
                if (nvalid > 0 && blk < (uintptr_t)row + nvalid * C::ESZ)
                        cp_async16((char *)(s + i * R::STRIDE) + 16 * b, (const void *)blk);
        }
}

/*
 * Moves each row of a tile staged by load_tile_blocks to the start of its
 * slot and zeroes the elements outside the matrix. The PIECES threads of a
 * row (one warp) each read the 16 bytes they place, then all write.
 */
template <class C, bool KMAJ>
__device__ __noinline__ void place_tile(typename C::T *s, const uint16_t *info)
{
        using R = Rows<C, KMAJ>;
        constexpr int PER_PASS = C::THREADS / R::PIECES;
        static_assert(R::N % PER_PASS == 0, "every thread runs every pass");
        const int piece = threadIdx.x % R::PIECES;
#pragma unroll
        for (int pass = 0; pass < R::N / PER_PASS; pass++) {
                const int i = threadIdx.x / R::PIECES + pass * PER_PASS;
                const uint32_t in = info[i], nvalid = in >> 4;
                const uint32_t *w = (const uint32_t *)(s + i * R::STRIDE);
                const int byte = 16 * piece + (int)(in & 15), wi = byte >> 2, sh = (byte & 3) * 8;
                uint32_t o[4];
#pragma unroll
                for (int e = 0; e < 4; e++)
                        o[e] = __funnelshift_r(w[wi + e], w[wi + e + 1], sh);
                if (nvalid < (uint32_t)R::LEN) {
                        /* element q of the piece is bits 16 (q & 1) of word q / 2 */
                        const int first = 8 * piece;
#pragma unroll
                        for (int q = 0; q < 8; q++)
                                if ((uint32_t)(first + q) >= nvalid)
                                        o[q >> 1] &= (q & 1) ? 0x0000ffffu : 0xffff0000u;
                }
                __syncwarp();
                *(uint4 *)(s + i * R::STRIDE + 8 * piece) = make_uint4(o[0], o[1], o[2], o[3]);
        }
        __syncwarp();
}

/*
 * Stages the BM x BK tile of an operand whose rows start at r0 (rows < rext)
 * and whose k start at k0 (k < kext) into `s`. KMAJ: element (r, kk) at
 * g[kk + r * ld], stored s[r * SK + kk]; else at g[r + kk * ld], stored
 * s[kk * SM + r]. Aligned operands go by 16-byte cp.async vectors, with
 * zeros for the vectors outside the matrix; other 16-bit tiles (off the
 * grid, or a vector cut by the matrix edge) by blocks (load_tile_blocks,
 * with `info`), and then true is returned: place_tile is due before the
 * tile is read. Other f32 tiles go element by element.
 */
template <class C, bool KMAJ>
__device__ __forceinline__ bool load_tile(typename C::T *s, uint16_t *info, const char *g, int64_t ld, bool al,
                                          uint32_t r0, uint32_t rext, uint32_t k0, uint32_t kext)
{
        using S = typename std::conditional<C::ESZ == 2, uint16_t, uint32_t>::type;
        constexpr int V = C::V;
        constexpr int PER = C::BM * C::BK / V / C::THREADS;
        const S *gs = (const S *)g;
        if (al && r0 + C::BM <= rext && k0 + C::BK <= kext) {
                /* Interior tile: every vector is whole and in bounds. */
#pragma unroll
                for (int i = 0; i < PER; i++) {
                        const int v = threadIdx.x + i * C::THREADS;
                        if (KMAJ) {
                                const int r = v / (C::BK / V), kk = (v % (C::BK / V)) * V;
                                cp_async16((S *)s + r * C::SK + kk, gs + (k0 + kk) + (int64_t)(r0 + r) * ld);
                        } else {
                                const int kk = v / (C::BM / V), r = (v % (C::BM / V)) * V;
                                cp_async16((S *)s + kk * C::SM + r, gs + (r0 + r) + (int64_t)(k0 + kk) * ld);
                        }
                }
                return false;
        }
        if constexpr (C::ESZ == 2) {
                /* Blocks unless every vector is whole, or wholly outside
                 * the matrix (zeros), on the 16-byte grid. */
                const uint32_t inner = KMAJ ? kext - k0 : rext - r0;
                if (!al || (inner < (uint32_t)Rows<C, KMAJ>::LEN && inner % V != 0)) {
                        load_tile_blocks<C, KMAJ>(s, info, g, ld, r0, rext, k0, kext);
                        return true;
                }
#pragma unroll
                for (int i = 0; i < PER; i++) {
                        const int v = threadIdx.x + i * C::THREADS;
                        const int r = KMAJ ? v / (C::BK / V) : (v % (C::BM / V)) * V;
                        const int kk = KMAJ ? (v % (C::BK / V)) * V : v / (C::BM / V);
                        S *dst = (S *)s + (KMAJ ? r * C::SK + kk : kk * C::SM + r);
                        if (r0 + r < rext && k0 + kk < kext)
                                cp_async16(dst, gs + (KMAJ ? (k0 + kk) + (int64_t)(r0 + r) * ld
                                                           : (r0 + r) + (int64_t)(k0 + kk) * ld));
                        else
                                *(uint4 *)dst = make_uint4(0, 0, 0, 0);
                }
                return false;
        } else {
#pragma unroll
                for (int i = 0; i < PER; i++) {
                        int v = threadIdx.x + i * C::THREADS;
                        uint32_t r, kk, gr, gk;
                        S *dst;
                        bool none, full;
                        int64_t off;
                        if (KMAJ) {
                                r = v / (C::BK / V);
                                kk = (v % (C::BK / V)) * V;
                                dst = (S *)s + r * C::SK + kk;
                                gr = r0 + r;
                                gk = k0 + kk;
                                none = gr >= rext || gk >= kext;
                                full = !none && gk + V <= kext;
                                off = (int64_t)gk + (int64_t)gr * ld;
                        } else {
                                kk = v / (C::BM / V);
                                r = (v % (C::BM / V)) * V;
                                dst = (S *)s + kk * C::SM + r;
                                gr = r0 + r;
                                gk = k0 + kk;
                                none = gr >= rext || gk >= kext;
                                full = !none && gr + V <= rext;
                                off = (int64_t)gr + (int64_t)gk * ld;
                        }
                        if (full && al) {
                                cp_async16(dst, gs + off);
                        } else if (none) {
                                *(uint4 *)dst = make_uint4(0, 0, 0, 0);
                        } else {
                                union {
                                        S e[V];
                                        uint4 u;
                                } tmp;
                                uint32_t lim = KMAJ ? kext - gk : rext - gr;
#pragma unroll
                                for (int e = 0; e < V; e++)
                                        tmp.e[e] = (uint32_t)e < lim ? gs[off + e] : (S)0;
                                *(uint4 *)dst = tmp.u;
                        }
                }
                return false;
        }
}

/* ---- shared -> registers -> math ---------------------------------------- */

/* Tensor-core warp grid: 2 (m) x 4 (n) warps, 64 x 32 per warp, 4 x 4 MMA
 * tiles; accumulator i = (mi * 4 + ni) * 4 + e. FFMA: 16 x 16 threads
 * (ty = tid % 16, tx = tid / 16: neighbouring threads own neighbouring rows,
 * so the epilogue's stores run down columns of C), 8 x 8 elements each,
 * rows ty + 16 r (X K-major) or ty * 4 + (r & 3) + 64 (r >> 2) (X
 * MN-major), columns likewise with tx; accumulator i = r * 8 + c. (512
 * threads of 8 x 4, held to 128 registers, measured slower on the H100.) */
template <class C, bool XK, bool YK>
__device__ __forceinline__ void compute_stage(const typename C::T *sx, const typename C::T *sy,
                                              float *acc)
{
        const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
        if constexpr (C::MODE == MODE_MMA16) {
                using T = typename C::T;
                const int wm = warp & 1, wn = warp >> 1;
#pragma unroll
                for (int ks = 0; ks < C::BK / 16; ks++) {
                        const int kb = ks * 16;
                        uint32_t a[4][4], b[4][2];
#pragma unroll
                        for (int mi = 0; mi < 4; mi++) {
                                const int rb = wm * 64 + mi * 16;
                                if (XK)
                                        ldsm_x4(a[mi], sx + (rb + (lane & 15)) * C::SK + kb + (lane >> 4) * 8);
                                else
                                        ldsm_x4_t(a[mi], sx + (kb + (lane & 7) + (lane >> 4) * 8) * C::SM +
                                                                 rb + ((lane >> 3) & 1) * 8);
                        }
#pragma unroll
                        for (int nj = 0; nj < 2; nj++) {
                                const int nb = wn * 32 + nj * 16;
                                uint32_t r[4];
                                if (YK)
                                        ldsm_x4(r, sy + (nb + (lane & 7) + (lane >> 4) * 8) * C::SK + kb +
                                                           ((lane >> 3) & 1) * 8);
                                else
                                        ldsm_x4_t(r, sy + (kb + (lane & 7) + ((lane >> 3) & 1) * 8) * C::SM +
                                                             nb + (lane >> 4) * 8);
                                b[2 * nj][0] = r[0];
                                b[2 * nj][1] = r[1];
                                b[2 * nj + 1][0] = r[2];
                                b[2 * nj + 1][1] = r[3];
                        }
#pragma unroll
                        for (int mi = 0; mi < 4; mi++)
#pragma unroll
                                for (int ni = 0; ni < 4; ni++)
                                        mma16<T>(acc + (mi * 4 + ni) * 4, a[mi], b[ni]);
                }
        } else if constexpr (C::MODE == MODE_TF32) {
                const int wm = warp & 1, wn = warp >> 1, g = lane >> 2, t = lane & 3;
#pragma unroll
                for (int ks = 0; ks < C::BK / 8; ks++) {
                        const int kb = ks * 8;
                        uint32_t a[4][4], b[4][2];
                        /* K-major operands: whole fragments by ldmatrix,
                         * rounded by tf32_round_bits. MN-major: element
                         * loads rounded by cvt.rna. */
#pragma unroll
                        for (int mi = 0; mi < 4; mi++) {
                                const int r = wm * 64 + mi * 16 + g;
                                if (XK) {
                                        ldsm_x4_b32(a[mi], sx + (wm * 64 + mi * 16 + (lane & 7) +
                                                                 ((lane >> 3) & 1) * 8) * C::SK +
                                                                    kb + (lane >> 4) * 4);
#pragma unroll
                                        for (int e = 0; e < 4; e++)
                                                a[mi][e] = tf32_round_bits(a[mi][e]);
                                } else {
#pragma unroll
                                        for (int e = 0; e < 4; e++) {
                                                const int rr = r + (e & 1) * 8, kk = kb + t + (e >> 1) * 4;
                                                a[mi][e] = to_tf32(sx[kk * C::SM + rr]);
                                        }
                                }
                        }
                        if (YK) {
#pragma unroll
                                for (int nj = 0; nj < 2; nj++) {
                                        uint32_t r4[4];
                                        ldsm_x4_b32(r4, sy + (wn * 32 + nj * 16 + (lane & 7) + (lane >> 4) * 8) * C::SK +
                                                                kb + ((lane >> 3) & 1) * 4);
                                        b[2 * nj][0] = tf32_round_bits(r4[0]);
                                        b[2 * nj][1] = tf32_round_bits(r4[1]);
                                        b[2 * nj + 1][0] = tf32_round_bits(r4[2]);
                                        b[2 * nj + 1][1] = tf32_round_bits(r4[3]);
                                }
                        } else {
#pragma unroll
                                for (int ni = 0; ni < 4; ni++) {
                                        const int n = wn * 32 + ni * 8 + g;
#pragma unroll
                                        for (int e = 0; e < 2; e++) {
                                                const int kk = kb + t + e * 4;
                                                b[ni][e] = to_tf32(sy[kk * C::SM + n]);
                                        }
                                }
                        }
#pragma unroll
                        for (int mi = 0; mi < 4; mi++)
#pragma unroll
                                for (int ni = 0; ni < 4; ni++)
                                        mma_tf32(acc + (mi * 4 + ni) * 4, a[mi], b[ni]);
                }
        } else {
                constexpr int FC = 8, TXN = 16; /* columns per thread, threads along n */
                static_assert(C::NACC == 8 * FC && C::BN == FC * TXN, "the FFMA thread grid");
                const int ty = tid & 15, tx = tid >> 4;
                /* Fragments of 4 k at a time; those of the next 4 are read
                 * before this step's multiply-adds, so that shared-memory
                 * latency hides behind them. */
                float xr[2][4][8], yr[2][4][FC];
                auto load = [&](int kq, int b) {
#pragma unroll
                        for (int r = 0; r < 8; r++)
                                if (XK) {
                                        float4 v = *(const float4 *)(sx + (ty + 16 * r) * C::SK + kq);
                                        xr[b][0][r] = v.x, xr[b][1][r] = v.y, xr[b][2][r] = v.z, xr[b][3][r] = v.w;
                                }
#pragma unroll
                        for (int c = 0; c < FC; c++)
                                if (YK) {
                                        float4 v = *(const float4 *)(sy + (tx + TXN * c) * C::SK + kq);
                                        yr[b][0][c] = v.x, yr[b][1][c] = v.y, yr[b][2][c] = v.z, yr[b][3][c] = v.w;
                                }
#pragma unroll
                        for (int q = 0; q < 4; q++) {
                                if (!XK)
#pragma unroll
                                        for (int h = 0; h < 2; h++) {
                                                float4 v = *(const float4 *)(sx + (kq + q) * C::SM + h * 64 + ty * 4);
                                                xr[b][q][h * 4 + 0] = v.x, xr[b][q][h * 4 + 1] = v.y;
                                                xr[b][q][h * 4 + 2] = v.z, xr[b][q][h * 4 + 3] = v.w;
                                        }
                                if (!YK)
#pragma unroll
                                        for (int h = 0; h < FC / 4; h++) {
                                                float4 v = *(const float4 *)(sy + (kq + q) * C::SM + h * (TXN * 4) + tx * 4);
                                                yr[b][q][h * 4 + 0] = v.x, yr[b][q][h * 4 + 1] = v.y;
                                                yr[b][q][h * 4 + 2] = v.z, yr[b][q][h * 4 + 3] = v.w;
                                        }
                        }
                };
                load(0, 0);
#pragma unroll
                for (int kq = 0; kq < C::BK; kq += 4) {
                        const int b = (kq / 4) & 1;
                        if (kq + 4 < C::BK)
                                load(kq + 4, b ^ 1);
                        /* Odd rows run their columns backwards: the last
                         * y of a row is then the first of the next, so every
                         * multiply-add but a step's first reuses an operand
                         * it had (the register reuse cache spares a read). */
#pragma unroll
                        for (int q = 0; q < 4; q++)
#pragma unroll
                                for (int r = 0; r < 8; r++)
#pragma unroll
                                        for (int cc = 0; cc < FC; cc++) {
                                                const int c = r & 1 ? FC - 1 - cc : cc;

                                                acc[r * FC + c] = fmaf(xr[b][q][r], yr[b][q][c], acc[r * FC + c]);
                                        }
                }
        }
}

/* Row and column inside the tile of accumulator i of this thread. */
template <class C>
__device__ __forceinline__ void acc_pos(int i, bool xk, bool yk, uint32_t &row, uint32_t &col)
{
        const int tid = threadIdx.x;
        if constexpr (C::MODE == MODE_FFMA) {
                constexpr int FC = 8, TXN = 16; /* as in compute_stage */
                const int ty = tid & 15, tx = tid >> 4, r = i / FC, c = i % FC;
                row = xk ? ty + 16 * r : ty * 4 + (r & 3) + 64 * (r >> 2);
                col = yk ? tx + TXN * c : tx * 4 + (c & 3) + TXN * 4 * (c >> 2);
        } else {
                const int lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
                const int mi = i >> 4, ni = (i >> 2) & 3, e = i & 3;
                row = wm * 64 + mi * 16 + (lane >> 2) + (e >> 1) * 8;
                col = wn * 32 + ni * 8 + (lane & 3) * 2 + (e & 1);
        }
}

/* Position in the K loop of an entry: chunk, term, k-tile of the chunk. */
struct KPos {
        uint32_t c, term, kt;
};

template <class C> __device__ __forceinline__ uint32_t chunk_tiles(uint32_t k, uint32_t c)
{
        uint32_t end = min(k, (c + 1) * SCHED_KCHUNK);
        return (end - c * SCHED_KCHUNK + C::BK - 1) / C::BK;
}

/* Moves to the next k-tile; returns true when that finished a chunk. */
template <class C> __device__ __forceinline__ bool kpos_next(KPos &p, uint32_t k, int nterms)
{
        if (++p.kt < chunk_tiles<C>(k, p.c))
                return false;
        p.kt = 0;
        if ((int)++p.term < nterms)
                return false;
        p.term = 0;
        p.c++;
        return true;
}

/*
 * Computes the chunk sums of chunks [kc0, kc1) of the tile at (m0, n0).
 * Unsplit (wsb == NULL): tot += each chunk sum, in order. Split: chunk c's
 * sum goes to workspace slot wsb + c.
 */
template <class C, bool XK, bool YK>
__device__ __forceinline__ void mainloop(const Prob &pr, uint32_t m0, uint32_t n0, uint32_t kc0,
                                         uint32_t kc1, float *tot, float *wsb, unsigned char *smem)
{
        using T = typename C::T;
        T *sbase = (T *)smem;
        const uint32_t kbeg = kc0 * SCHED_KCHUNK, kend = min(pr.k, kc1 * SCHED_KCHUNK);
        const int niter = (int)((kend - kbeg + C::BK - 1) / C::BK) * pr.nterms;
        float acc[C::NACC];
#pragma unroll
        for (int i = 0; i < C::NACC; i++)
                acc[i] = 0.f;

        KPos lp = {kc0, 0, 0};
        int lstage = 0;
        /* Two bits a stage: operand X, Y staged by blocks (load_tile). */
        uint32_t blocks = 0;
        auto issue = [&](int it) {
                if (it < niter) {
                        /* Field by field: a reference to one of the two
                         * terms would put the whole Prob on the stack. */
                        const bool t1 = lp.term != 0;
                        const char *gx = t1 ? pr.term[1].x : pr.term[0].x;
                        const char *gy = t1 ? pr.term[1].y : pr.term[0].y;
                        const int64_t ldx = t1 ? pr.term[1].ldx : pr.term[0].ldx;
                        const int64_t ldy = t1 ? pr.term[1].ldy : pr.term[0].ldy;
                        const bool xal = t1 ? pr.term[1].xal : pr.term[0].xal;
                        const bool yal = t1 ? pr.term[1].yal : pr.term[0].yal;
                        const uint32_t k0 = lp.c * SCHED_KCHUNK + lp.kt * C::BK;
                        T *sx = sbase + lstage * 2 * C::OP_ELEMS, *sy = sx + C::OP_ELEMS;
                        const uint32_t f =
                                (uint32_t)load_tile<C, XK>(sx, row_info<C>(lstage, 0), gx, ldx, xal, m0, pr.m, k0,
                                                           pr.k) |
                                (uint32_t)load_tile<C, YK>(sy, row_info<C>(lstage, 1), gy, ldy, yal, n0, pr.n, k0,
                                                           pr.k)
                                        << 1;
                        blocks = (blocks & ~(3u << 2 * lstage)) | f << 2 * lstage;
                        kpos_next<C>(lp, pr.k, pr.nterms);
                        lstage = lstage + 1 == C::STAGES ? 0 : lstage + 1;
                }
                cp_async_commit();
        };
#pragma unroll
        for (int s = 0; s < C::STAGES - 1; s++)
                issue(s);

        /* Places the operands of stage st that load_tile staged by blocks
         * (16-bit tiles off the vector grid or cut by an edge). */
        auto place = [&](int st) {
                if constexpr (C::ESZ == 2) {
                        const uint32_t f = blocks >> 2 * st & 3u;
                        T *sx = sbase + st * 2 * C::OP_ELEMS;
                        if (f & 1u)
                                place_tile<C, XK>(sx, row_info<C>(st, 0));
                        if (f & 2u)
                                place_tile<C, YK>(sx + C::OP_ELEMS, row_info<C>(st, 1));
                }
        };
        static_assert(C::STAGES >= 3, "a stage is placed while the one before it is computed");
        if (C::ESZ == 2 && (blocks & 3u)) {
                cp_async_wait<C::STAGES - 2>();
                __syncthreads();
                place(0);
        }

        KPos cp = {kc0, 0, 0};
        int cstage = 0;
        for (int it = 0; it < niter; it++) {
                /* A stage staged by blocks is placed one iteration early,
                 * while this one is computed: it waits for one stage more
                 * to land, and the next iteration's barrier orders the
                 * placing before its reads. */
                const int nstage = cstage + 1 == C::STAGES ? 0 : cstage + 1;
                if (C::ESZ == 2 && it + 1 < niter && (blocks >> 2 * nstage & 3u)) {
                        cp_async_wait<C::STAGES - 3>();
                        __syncthreads();
                        place(nstage);
                } else {
                        cp_async_wait<C::STAGES - 2>();
                        __syncthreads();
                }
                issue(it + C::STAGES - 1);
                const T *sx = sbase + cstage * 2 * C::OP_ELEMS;
                compute_stage<C, XK, YK>(sx, sx + C::OP_ELEMS, acc);
                cstage = cstage + 1 == C::STAGES ? 0 : cstage + 1;
                const uint32_t c = cp.c;
                if (kpos_next<C>(cp, pr.k, pr.nterms)) {
                        if (wsb) {
                                float *w = wsb + (size_t)c * C::TILE + threadIdx.x;
#pragma unroll
                                for (int i = 0; i < C::NACC; i++)
                                        __stcg(w + i * C::THREADS, acc[i]);
                        } else {
#pragma unroll
                                for (int i = 0; i < C::NACC; i++)
                                        tot[i * C::TSTR] += acc[i];
                        }
#pragma unroll
                        for (int i = 0; i < C::NACC; i++)
                                acc[i] = 0.f;
                }
        }
        cp_async_wait<0>();
        __syncthreads();
}

template <class C>
__device__ __forceinline__ void epilogue(const struct gemmd_kproblem &p, bool xk, bool yk, uint32_t m0,
                                         uint32_t n0, const float *tot)
{
        using T = typename C::T;
        T *cptr = (T *)(uintptr_t)p.c;
        const float alpha = p.alpha, beta = p.beta;
        const bool syr2k = p.kind == SCHED_SYR2K, lower = p.uplo == 0;
        /* beta is tested once, outside the loop: inside, the compiler
         * keeps the C-reading path's work on the beta = 0 path too. */
        auto store = [&](auto with_beta) {
#pragma unroll
                for (int i = 0; i < C::NACC; i++) {
                        uint32_t r, c;
                        acc_pos<C>(i, xk, yk, r, c);
                        const uint32_t gi = m0 + r, gj = n0 + c;
                        if (gi >= p.m || gj >= p.n)
                                continue;
                        if (syr2k && (lower ? gi < gj : gi > gj))
                                continue;
                        T *dst = cptr + gi + (int64_t)gj * p.ldc;
                        float v = __fmul_rn(alpha, tot[i * C::TSTR]);
                        if (decltype(with_beta)::value)
                                v = __fadd_rn(v, __fmul_rn(beta, to_f32<T>(*dst)));
                        *dst = from_f32<T>(v);
                }
        };
        if (beta != 0.f)
                store(std::true_type{});
        else
                store(std::false_type{});
}

/* Computes one entry of an f32, f16 or bf16 config: chunks [kc0, kc1) of
 * tile `tile` of problem `pi`. */
template <class C>
__device__ __forceinline__ void run_entry_f32(const KParams &kp, uint32_t pi, uint32_t tile, uint32_t kc0,
                                              uint32_t kc1, uint32_t split, unsigned char *smem,
                                              uint32_t *s_flag)
{
        const struct gemmd_kproblem p = kp.probs[pi];
        const struct sched_problem sp = to_sched(p);
        const struct sched_shape shape = {C::BM, C::BN, C::BK};
        uint32_t row = 0, col = 0;
        const bool valid = sched_tile_coord(&sp, shape, tile, &row, &col) != 0;
        const uint32_t m0 = row * C::BM, n0 = col * C::BN;
        const Prob pr = make_prob<C>(p);
        float treg[C::TOT_SMEM ? 1 : C::NACC];
        float *tot = treg;
        if constexpr (C::TOT_SMEM)
                tot = (float *)(smem + C::STAGES * 2 * C::OP_ELEMS * C::ESZ) + threadIdx.x;
#pragma unroll
        for (int i = 0; i < C::NACC; i++)
                tot[i * C::TSTR] = 0.f;
        float *wsb = nullptr;
        if (split != SCHED_NO_SPLIT)
                wsb = kp.ws + (size_t)kp.split_ws[split] * C::TILE;

        if (valid) {
                const int lay = (pr.xk ? 2 : 0) | (pr.yk ? 1 : 0);
                switch (lay) {
                case 0:
                        mainloop<C, false, false>(pr, m0, n0, kc0, kc1, tot, wsb, smem);
                        break;
                case 1:
                        mainloop<C, false, true>(pr, m0, n0, kc0, kc1, tot, wsb, smem);
                        break;
                case 2:
                        mainloop<C, true, false>(pr, m0, n0, kc0, kc1, tot, wsb, smem);
                        break;
                default:
                        mainloop<C, true, true>(pr, m0, n0, kc0, kc1, tot, wsb, smem);
                        break;
                }
        }
        if (wsb) {
                /* Publish this entry's chunk sums; the last arrival adds all
                 * of the tile's chunk sums in chunk order. */
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
                        const float *w = wsb + (size_t)c * C::TILE + threadIdx.x;
#pragma unroll
                        for (int i = 0; i < C::NACC; i++)
                                tot[i * C::TSTR] += __ldcg(w + i * C::THREADS);
                }
                if (threadIdx.x == 0)
                        atomicExch(&kp.arrivals[split], 0u);
        }
        if (valid)
                epilogue<C>(p, pr.xk, pr.yk, m0, n0, tot);
}

#include "kernels/dmma_gemm.cuh"

/* Computes one entry: chunks [kc0, kc1) of tile `tile` of problem `pi`. */
template <class C>
__device__ __forceinline__ void run_entry(const KParams &kp, uint32_t pi, uint32_t tile, uint32_t kc0,
                                          uint32_t kc1, uint32_t split, unsigned char *smem,
                                          uint32_t *s_flag)
{
        if constexpr (C::F64)
                drun_entry<C>(kp, pi, tile, smem);
        else
                run_entry_f32<C>(kp, pi, tile, kc0, kc1, split, smem, s_flag);
}

/* warp_map_tile for the whole block: warp 0 maps linear tile t and
 * shares (problem, local tile) through s_map; UINT32_MAX past the end. */
__device__ __forceinline__ uint32_t block_map_tile(const KParams &kp, struct sched_shape shape, uint32_t t,
                                                   uint32_t &pbase, uint32_t &tbase, uint32_t *s_map,
                                                   uint32_t &local)
{
        if (threadIdx.x < 32) {
                uint32_t l = 0;
                const uint32_t prob = warp_map_tile(kp, shape, t, pbase, tbase, l);
                if ((threadIdx.x & 31) == 0) {
                        s_map[0] = prob;
                        s_map[1] = l;
                }
        }
        __syncthreads();
        const uint32_t prob = s_map[0];
        local = s_map[1];
        __syncthreads();
        return prob;
}

/*
 * The tile walk of an f64 launch of one layout and alignment (CfgF64hLV):
 * the plan's entries for this CTA or, in device mode, tiles b, b + grid,
 * ... (warp_map_tile), through one call of the tile's code rather than one
 * for each walk, so that the kernel holds one copy of the mainloop.
 */
template <class C>
__device__ __forceinline__ void run_f64_tiles(const KParams &kp, unsigned char *smem, uint32_t *s_map)
{
        const bool plan = kp.cta_begin != nullptr; /* the same in every thread */
        uint32_t e = plan ? kp.cta_begin[blockIdx.x] : 0, e1 = plan ? kp.cta_begin[blockIdx.x + 1] : 0;
        const struct sched_shape shape = {C::BM, C::BN, C::BK};
        uint32_t t = blockIdx.x, pbase = 0, tbase = 0;
        for (;;) {
                uint32_t prob, tile;
                if (plan) {
                        if (e >= e1)
                                break;
                        const struct sched_entry en = kp.entries[e++];
                        prob = en.problem;
                        tile = en.tile;
                } else {
                        prob = block_map_tile(kp, shape, t, pbase, tbase, s_map, tile);
                        if (prob == UINT32_MAX)
                                break;
                        t += gridDim.x;
                }
                drun_entry<C>(kp, prob, tile, smem); /* (f64 never takes the fast path's kp.fast) */
        }
}

template <class C> __global__ void __launch_bounds__(C::THREADS, 1) grouped_kernel(const KParams kp)
{
        extern __shared__ __align__(128) unsigned char smem[];
        __shared__ uint32_t s_map[2];
        __shared__ uint32_t s_flag;

        if constexpr (C::F64 && C::LAY >= 0) {
                run_f64_tiles<C>(kp, smem, s_map);
                return;
        }
        if (kp.cta_begin) {
                const uint32_t e0 = kp.cta_begin[blockIdx.x], e1 = kp.cta_begin[blockIdx.x + 1];
                for (uint32_t e = e0; e < e1; e++) {
                        const struct sched_entry en = kp.entries[e];
                        if (kp.fast && (kp.fast[en.problem] != 0) != kp.want_fast)
                                continue;
                        run_entry<C>(kp, en.problem, en.tile, en.kc_begin, en.kc_end, en.split, smem,
                                     &s_flag);
                }
                return;
        }

        /* Device mode: tiles b, b + grid, ... of the concatenated problems,
         * mapped by warp 0 (warp_map_tile) and shared through s_map. */
        const struct sched_shape shape = {C::BM, C::BN, C::BK};
        uint32_t pbase = 0, tbase = 0;
        for (uint32_t t = blockIdx.x;; t += gridDim.x) {
                uint32_t local = 0;
                const uint32_t prob = block_map_tile(kp, shape, t, pbase, tbase, s_map, local);
                if (prob == UINT32_MAX)
                        break;
                if (kp.fast && (kp.fast[prob] != 0) != kp.want_fast)
                        continue;
                run_entry<C>(kp, prob, local, 0, sched_kchunks(kp.probs[prob].k), SCHED_NO_SPLIT, smem,
                             &s_flag);
        }
}

/*
 * The dynamic shared-memory limit is a per-function attribute of the
 * current context. Setting it at every launch put one more driver call on
 * the launch path of every group (a small group's launch cost the worker
 * about 15 us of host time on the H100 machine), so each launcher sets it
 * once per device and context generation (bumped by
 * cuda_gemm_forget_attributes when a context is rebuilt). `done` is the
 * launcher's own array: one per kernel.
 */
std::atomic<uint32_t> ctx_generation{1};

template <typename K>
int smem_attr_once(std::atomic<uint32_t> (&done)[64], K *kernel, int smem)
{
        int dev = -1;
        if (cudaGetDevice(&dev) != cudaSuccess) {
                cudaGetLastError();
                return -EIO;
        }
        const uint32_t gen = ctx_generation.load(std::memory_order_acquire);
        if (dev >= 0 && dev < 64 && done[dev].load(std::memory_order_acquire) == gen)
                return 0;
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) {
                cudaGetLastError();
                return -EIO;
        }
        if (dev >= 0 && dev < 64)
                done[dev].store(gen, std::memory_order_release);
        return 0;
}

#include "kernels/wgmma_gemm.cuh"

bool device_sm90();

template <class C> int launch(const struct cuda_group *g, const KParams &kp, uint32_t grid, cudaStream_t st)
{
        const int smem = C::smem_bytes(device_sm90());
        static std::atomic<uint32_t> done[64];
        if (smem_attr_once(done, grouped_kernel<C>, smem))
                return -EIO;
        grouped_kernel<C><<<grid, C::THREADS, smem, st>>>(kp);
        const cudaError_t err = cudaGetLastError();
        return err == cudaSuccess ? 0 : -EIO;
}

/*
 * The layout (X K-major 2, Y K-major 1) and copy width (2: 16-byte
 * vectors, 1: doubles, 0: bytes) that every problem of g shares, as
 * drun_entry would pick them for each, or -1 when they differ or g has no
 * host copy of its problems.
 */
static int f64_class(const struct cuda_group *g)
{
        const struct gemmd_kproblem *p = g->problems_host;
        int cls = -1;
        for (uint32_t i = 0; p && i < g->nproblems; i++) {
                const int c = f64_layout(p[i]) + 4 * f64_copy_width(p[i]);
                if (i > 0 && c != cls)
                        return -1;
                cls = c;
        }
        return cls;
}

/* f64 on m16n8k4 from sm_90 (device_sm90), by a kernel built for the
 * group's one layout and aligned copy width where it has one; m8n8k4
 * before. */
int launch_f64(const struct cuda_group *g, const KParams &kp, uint32_t grid, cudaStream_t st)
{
        if (!device_sm90())
                return launch<CfgF64>(g, kp, grid, st);
        switch (f64_class(g)) {
#define LV(L, V)                                                                                   \
        case L + 4 * V:                                                                            \
                return launch<CfgF64hLV<L, V>>(g, kp, grid, st);
                LV(0, 1) LV(1, 1) LV(2, 1) LV(3, 1) LV(0, 2) LV(1, 2) LV(2, 2) LV(3, 2)
#undef LV
        default:
                return launch<CfgF64h>(g, kp, grid, st);
        }
}

} /* namespace */

/* ---- launcher ------------------------------------------------------------ */

extern "C" struct sched_shape cuda_gemm_shape(int dtype, int tf32)
{
        static_assert(CfgF64::BM == CfgF64h::BM && CfgF64::BN == CfgF64h::BN, "one f64 tile");
        struct sched_shape s;
        if (dtype == GEMMD_F64)
                s = {CfgF64::BM, CfgF64::BN, CfgF64::BK_L}; /* tk: the cost model's unit */
        else if (dtype == GEMMD_F32 && !tf32)
                s = {CfgF32::BM, CfgF32::BN, CfgF32::BK};
        else if (dtype == GEMMD_F32)
                s = {CfgTF32::BM, CfgTF32::BN, CfgTF32::BK};
        else
                s = {CfgBF16::BM, CfgBF16::BN, CfgBF16::BK};
        return s;
}

/* The Hopper kernel's own tile bn wide for config (dtype, tf32): the usual
 * tile's tm and tk, on an sm_90a device for f16, bf16 and TF32; else all
 * zero (exact f32 and f64 have no such tile, and other devices no kernel). */
static struct sched_shape hopper_shape(int dtype, int tf32, uint32_t bn)
{
        struct sched_shape s = {0, 0, 0};
#if GEMMD_WGMMA
        if (dtype != GEMMD_F64 && (dtype != GEMMD_F32 || tf32) && device_sm90()) {
                s = cuda_gemm_shape(dtype, tf32);
                s.tn = bn;
        }
#endif
        return s;
}

extern "C" struct sched_shape cuda_gemm_shape_wide(int dtype, int tf32)
{
        return hopper_shape(dtype, tf32, WIDE_BN);
}

extern "C" struct sched_shape cuda_gemm_shape_narrow(int dtype, int tf32)
{
        return hopper_shape(dtype, tf32, NARROW_BN);
}

extern "C" struct sched_shape cuda_gemm_shape_half(int dtype, int tf32)
{
        struct sched_shape s = {0, 0, 0};
        if (dtype == GEMMD_F16 || dtype == GEMMD_BF16) {
                s = hopper_shape(dtype, tf32, 128);
                s.tm = s.tn ? 64 : 0;
        }
        return s;
}

/* Whether shape is a half tile's (cuda_gemm_shape_half) whatever the
 * config, for the tensor maps, which know no config; a launch asks
 * cuda_gemm_half_rows. */
static bool half_shape(struct sched_shape shape)
{
        return shape.tm == 64 && shape.tn == 128;
}

extern "C" uint32_t cuda_gemm_half_rows(int dtype, int tf32, struct sched_shape shape)
{
        const struct sched_shape h = cuda_gemm_shape_half(dtype, tf32);
        return h.tn && shape.tm == h.tm && shape.tn == h.tn && shape.tk == h.tk ? h.tm : 0u;
}

extern "C" const char *cuda_gemm_kernel_name(int dtype, int tf32)
{
        switch (dtype) {
        case GEMMD_F32:
                return tf32 ? "tf32-mma-128x128x32" : GEMMD_FFMA_BK == 16 ? "f32-ffma-128x128x16" : "f32-ffma-128x128x32";
        case GEMMD_F16:
                return "f16-mma-128x128x64";
        case GEMMD_BF16:
                return "bf16-mma-128x128x64";
        case GEMMD_F64:
                return "f64-dmma-128x128";
        default:
                return "?";
        }
}

extern "C" size_t cuda_gemm_ws_bytes(const struct sched_plan *plan, struct sched_shape s, int dtype)
{
        if (!plan || plan->nsplit == 0 || dtype == GEMMD_F64) /* f64 is never split */
                return 0;
        return (size_t)plan->ws_chunks * s.tm * s.tn * sizeof(float);
}

extern "C" size_t cuda_gemm_arrivals_bytes(const struct sched_plan *plan)
{
        return plan ? (size_t)plan->nsplit * sizeof(uint32_t) : 0;
}

/* ---- Hopper fast path: tensor maps ---------------------------------------- */

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn()
{
        static std::once_flag once;
        static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
        std::call_once(once, [] {
                void *p = nullptr;
                cudaDriverEntryPointQueryResult q;
                if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
                            cudaSuccess &&
                    q == cudaDriverEntryPointSuccess)
                        fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
                else
                        cudaGetLastError();
        });
        return fn;
}

bool wgmma_qualifies(const struct gemmd_kproblem &p)
{
        return kproblem_tma_layout(&p) && (p.a & 15) == 0 && (p.b & 15) == 0;
}

/* This thread's memo of encoded maps (tmap_memo.h), made on its first
 * launch and freed with the thread; NULL if memory ran out (every map is
 * then encoded). */
static struct tmap_memo *thread_memo()
{
        struct Holder {
                struct tmap_memo *m = (struct tmap_memo *)calloc(1, sizeof(struct tmap_memo));
                ~Holder() { free(m); }
        };
        thread_local Holder h;
        return h.m;
}

/* A rows x k matrix stored with consecutive k adjacent, rows ld apart;
 * the box is 128 bytes of K by box_rows rows (the tile's side). Copied
 * from this thread's memo where the same inputs were encoded before. */
bool encode_kmajor(PFN_cuTensorMapEncodeTiled_v12000 fn, CUtensorMap *m, int dtype, uint64_t addr, uint32_t rows,
                   uint32_t k, int64_t ld, uint32_t box_rows)
{
        const struct tmap_key key = {addr, ld, rows, k, (uint32_t)dtype, box_rows};
        struct tmap_memo *memo = thread_memo();
        if (memo && tmap_memo_get(memo, &key, m))
                return true;
        const uint32_t esz = dtype == GEMMD_F32 ? 4 : 2;
        const cuuint64_t dims[2] = {k, rows};
        const cuuint64_t strides[1] = {(cuuint64_t)ld * esz};
        const cuuint32_t box[2] = {WCfg::ROW_BYTES / esz, box_rows};
        const cuuint32_t estr[2] = {1, 1};
        const CUtensorMapDataType dt = dtype == GEMMD_F32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                       : dtype == GEMMD_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                             : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
        if (fn(m, dt, 2, (void *)(uintptr_t)addr, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
                return false;
        if (memo)
                tmap_memo_put(memo, &key, m);
        return true;
}

/* C of an f32 GEMM, column-major, for the staged epilogue's stores (c_staged):
 * boxes of 32 rows (128 bytes) x 128 columns, 128-byte swizzle. */
bool encode_c(PFN_cuTensorMapEncodeTiled_v12000 fn, CUtensorMap *m, const struct gemmd_kproblem &p)
{
        const cuuint64_t dims[2] = {p.m, p.n};
        const cuuint64_t strides[1] = {(cuuint64_t)p.ldc * 4};
        const cuuint32_t box[2] = {32, 128};
        const cuuint32_t estr[2] = {1, 1};
        return fn(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)(uintptr_t)p.c, dims, strides, box, estr,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* Whether the current device runs the sm_90a kernel: compute capability
 * 9.0, and the image the runtime picked for it is the sm_90a one (a build
 * without that target would JIT the empty compute_80 body instead). */
bool device_sm90_query(int dev)
{
        int maj = 0, min = 0;
        if (
            cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
                cudaGetLastError();
                return false;
        }
        if (maj != 9 || min != 0)
                return false;
        cudaFuncAttributes fa;
        if (cudaFuncGetAttributes(&fa, wgmma_kernel<__nv_bfloat16, false, false, 128>) != cudaSuccess) {
                cudaGetLastError();
                return false;
        }
        return fa.ptxVersion >= 90;
}

bool device_sm90()
{
        static std::atomic<int> known[64]; /* 0 unknown, 1 no, 2 yes */
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess) {
                cudaGetLastError();
                return false;
        }
        if (dev < 0 || dev >= 64)
                return device_sm90_query(dev);
        int v = known[dev].load(std::memory_order_relaxed);
        if (v == 0) {
                v = device_sm90_query(dev) ? 2 : 1;
                known[dev].store(v, std::memory_order_relaxed);
        }
        return v == 2;
}

} /* namespace */

extern "C" void cuda_gemm_forget_attributes(void)
{
        ctx_generation.fetch_add(1, std::memory_order_acq_rel);
}

extern "C" int cuda_gemm_fast_available(void)
{
#if GEMMD_WGMMA
        return device_sm90() ? 1 : 0;
#else
        return 0;
#endif
}

extern "C" size_t cuda_gemm_tmaps_bytes(uint32_t nproblems)
{
        return (size_t)nproblems * WCfg::TMAP_BYTES + ((size_t)nproblems + 63) / 64 * 64;
}

/* Whether the n problems on tiles of shape are all 16-bit GEMMs of at
 * most 64 rows on the usual or the wide tile: a group the kernel whose
 * stages hold 64 rows of A can take (skinny_group), and whose problems
 * then get the third map of 64 rows of A. */
static bool skinny_shape(const struct gemmd_kproblem *probs, uint32_t n, struct sched_shape shape)
{
        if (n == 0 || (shape.tn != WIDE_BN && shape.tn != 128))
                return false;
        for (uint32_t i = 0; i < n; i++)
                if (probs[i].kind != SCHED_GEMM || (probs[i].dtype != GEMMD_F16 && probs[i].dtype != GEMMD_BF16) ||
                    probs[i].m > 64)
                        return false;
        return true;
}

/* ---- packed copies (cuda_gemm_pack_bytes) ------------------------------- */

/* A group packs only when its packed problems hold this many products
 * (m n k): below, the copy kernel's launch and traffic cost about what
 * the Hopper kernel saves (on the H100 a lone GEMM with A along M gained
 * from 384^3 on and lost at 256^3, one with an odd K gained from 255^3 on:
 * bench/results/packed-layouts.txt). */
#define PACK_MIN_PRODUCTS (24ull << 20)
/* ... and their copies fit this many bytes. */
#define PACK_MAX_BYTES (256ull << 20)
/* Flag bit of a problem whose maps point at packed copies. */
#define FLAG_PACKED 8u

/* Whether operand j (0: A, 1: B) of a 16-bit GEMM p can be read through
 * a tensor map where it lies: stored along K, on the 16-byte grid. */
static bool in_place(const struct gemmd_kproblem &p, int j)
{
        const bool kmaj = j == 0 ? p.trans_a == 1 : p.trans_b == 0;
        const uint64_t addr = j ? p.b : p.a;
        const int64_t ld = j ? p.ldb : p.lda;
        return kmaj && (addr & 15) == 0 && ld % 8 == 0 && ld >= (int64_t)p.k && ld < ((int64_t)1 << 37);
}

/* Whether p would take the Hopper kernel but for how or where its A or B
 * lies: a 16-bit GEMM that does not qualify (an operand stored along M
 * or N, an odd leading dimension, an address off the grid). */
static bool packable(const struct gemmd_kproblem &p)
{
        return p.kind == SCHED_GEMM && (p.dtype == GEMMD_F16 || p.dtype == GEMMD_BF16) && p.m > 0 && p.n > 0 &&
               p.k > 0 && !wgmma_qualifies(p);
}

/* A packed copy's leading dimension: k rounded up to 16 bytes. */
static uint64_t pack_ld(const struct gemmd_kproblem &p) { return ((uint64_t)p.k + 7) & ~7ull; }

/* Bytes of a packed copy of operand j of p (0 when it is read in place),
 * 128-byte aligned. */
static uint64_t pack_size(const struct gemmd_kproblem &p, int j)
{
        return in_place(p, j) ? 0 : ((uint64_t)(j ? p.n : p.m) * pack_ld(p) * 2 + 127) & ~127ull;
}

extern "C" size_t cuda_gemm_pack_bytes(const struct gemmd_kproblem *probs, uint32_t n, struct sched_shape shape)
{
        uint64_t products = 0, bytes = 0;

        /* The usual tile only (the worker gives the others to groups that
         * qualify whole), and not a group of the 64-row stages, whose
         * third map slot packing uses. */
        if (!probs || n == 0 || shape.tm != WCfg::BM || shape.tn != 128 || skinny_shape(probs, n, shape))
                return 0;
        for (uint32_t i = 0; i < n; i++) {
                const struct gemmd_kproblem &p = probs[i];
                if (wgmma_qualifies(p))
                        continue;
                if (!packable(p))
                        return 0; /* it runs on the sm_80 kernel whatever we copy */
                products += (uint64_t)p.m * p.n * p.k;
                bytes += pack_size(p, 0) + pack_size(p, 1);
        }
        return products >= PACK_MIN_PRODUCTS && bytes <= PACK_MAX_BYTES ? (size_t)bytes : 0;
}

/*
 * Copies `rows` rows of K (k elements) of an operand to dst, rows along K,
 * pld apart, the padding past k zeroed. From a source stored along K
 * (element (r, l) at src[l + r ld]): a warp a row, 8 elements a lane,
 * read 2 bytes at a time (the source is off the 16-byte grid), stored 16.
 * From one stored along M or N (at src[r + l ld]): 32 x 32 blocks turned
 * over in shared memory, read and written 2 bytes a lane along each
 * side's contiguous direction. The CTA takes every gridDim.x-th row or
 * block.
 */
static __device__ void pack_operand(const uint16_t *src, int64_t ld, bool kmaj, uint32_t rows, uint32_t k, uint16_t *dst,
                                    uint64_t pld, uint16_t (*blk)[33])
{
        const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        if (kmaj) {
                for (uint32_t r = blockIdx.x * 8 + warp; r < rows; r += gridDim.x * 8) {
                        const uint16_t *s = src + (uint64_t)r * (uint64_t)ld;
                        uint16_t *d = dst + (uint64_t)r * pld;
                        for (uint32_t c = lane * 8; c < pld; c += 256) {
                                uint32_t w[4];
#pragma unroll
                                for (int i = 0; i < 4; i++) {
                                        const uint32_t lo = c + 2 * i < k ? __ldg(s + c + 2 * i) : 0;
                                        const uint32_t hi = c + 2 * i + 1 < k ? __ldg(s + c + 2 * i + 1) : 0;
                                        w[i] = lo | hi << 16;
                                }
                                *(uint4 *)(d + c) = make_uint4(w[0], w[1], w[2], w[3]);
                        }
                }
                return;
        }
        const uint32_t tr = (rows + 31) / 32, tk = (uint32_t)((pld + 31) / 32);
        for (uint32_t t = blockIdx.x; t < tr * tk; t += gridDim.x) {
                const uint32_t r0 = (t % tr) * 32, k0 = (t / tr) * 32;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                        const uint32_t l = k0 + warp + 8 * i, r = r0 + lane;
                        blk[warp + 8 * i][lane] = r < rows && l < k ? __ldg(src + r + (uint64_t)l * (uint64_t)ld) : 0;
                }
                __syncthreads();
#pragma unroll
                for (int i = 0; i < 4; i++) {
                        const uint32_t r = r0 + warp + 8 * i, l = k0 + lane;
                        if (r < rows && l < pld)
                                dst[l + (uint64_t)r * pld] = blk[lane][warp + 8 * i];
                }
                __syncthreads();
        }
}

/*
 * Copies each packed problem's operands (FLAG_PACKED in the maps buffer
 * tm) to the places its third map slot names (packed A or 0, packed B or
 * 0, leading dimension), problems along grid y.
 */
static __global__ void __launch_bounds__(256) pack_kernel(const struct gemmd_kproblem *probs, const char *tm, uint32_t n)
{
        __shared__ uint16_t blk[32][33];
        const uint8_t *flags = map_flags(tm, n);

        for (uint32_t pi = blockIdx.y; pi < n; pi += gridDim.y) {
                if (!(flags[pi] & FLAG_PACKED))
                        continue;
                const uint64_t *d = (const uint64_t *)third_map(tm, pi);
                const struct gemmd_kproblem p = probs[pi];
                if (d[0])
                        pack_operand((const uint16_t *)(uintptr_t)p.a, p.lda, p.trans_a == 1, p.m, p.k,
                                     (uint16_t *)(uintptr_t)d[0], d[2], blk);
                if (d[1])
                        pack_operand((const uint16_t *)(uintptr_t)p.b, p.ldb, p.trans_b == 0, p.n, p.k,
                                     (uint16_t *)(uintptr_t)d[1], d[2], blk);
        }
}

/* Enqueues pack_kernel for g's packed problems: enough CTAs a problem
 * that the largest one's operands spread over the GPU, about eight 32 x
 * 32 blocks (16 KiB) a CTA; a lone problem would otherwise be copied by a
 * few SMs. */
static int launch_pack(const struct cuda_group *g, const char *tm, cudaStream_t st)
{
        uint64_t blocks = 0;
        for (uint32_t i = 0; g->problems_host && i < g->nproblems; i++) {
                const struct gemmd_kproblem &p = g->problems_host[i];
                blocks = max(blocks, (uint64_t)((p.m + p.n + 31) / 32) * ((p.k + 31) / 32));
        }
        const uint32_t per = g->problems_host ? (uint32_t)min((uint64_t)1024, max((uint64_t)1, blocks / 8)) : 64u;
        const dim3 grid(per, min(g->nproblems, 65535u));
        pack_kernel<<<grid, 256, 0, st>>>(g->problems, tm, g->nproblems);
        return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

/* Encodes the maps of a packable problem p, each operand from where it
 * lies or from its packed copy at pack + *off (advancing *off), and names
 * the copies in the third slot for pack_kernel. */
static bool encode_packed(PFN_cuTensorMapEncodeTiled_v12000 fn, CUtensorMap *m, const struct gemmd_kproblem &p,
                          struct sched_shape shape, uint64_t pack, uint64_t *off)
{
        const uint64_t ld = pack_ld(p), sa = pack_size(p, 0), sb = pack_size(p, 1);
        const uint64_t pa = sa ? pack + *off : 0, pb = sb ? pack + *off + sa : 0;
        if (!encode_kmajor(fn, &m[0], p.dtype, pa ? pa : p.a, p.m, p.k, pa ? (int64_t)ld : p.lda, shape.tm) ||
            !encode_kmajor(fn, &m[1], p.dtype, pb ? pb : p.b, p.n, p.k, pb ? (int64_t)ld : p.ldb, shape.tn))
                return false;
        uint64_t *d = (uint64_t *)&m[2];
        d[0] = pa;
        d[1] = pb;
        d[2] = ld;
        *off += sa + sb;
        return true;
}

extern "C" int cuda_gemm_tmaps_build(const struct gemmd_kproblem *probs, uint32_t n, struct sched_shape shape,
                                     void *out)
{
        return cuda_gemm_tmaps_build_packed(probs, n, shape, out, 0, 1);
}

/* Where problem p's C can have a map (flag bit 4): a GEMM whose columns
 * are whole 16-byte granules, 16-byte aligned. Where a column ends inside
 * one, the copy wrote the whole granule on the H100 (a TF32 GEMM of 63
 * rows, ldc 64, had row 63 written: bench/results/test_gpu_kernels.log),
 * so such a C is stored from the fragments, row by row. f32: the usual
 * tile's epilogue stages C through it (and reads it there with beta !=
 * 0); 16-bit (c16): the epilogue's TMA store, not on the 64-row stages,
 * whose third map is A's. */
static bool c_mappable(const struct gemmd_kproblem &p, struct sched_shape shape, bool skinny, bool c16)
{
        const bool f32 = p.dtype == GEMMD_F32;
        const uint32_t g = f32 ? 4 : 8; /* elements a granule */
        return p.kind == SCHED_GEMM && (f32 ? shape.tn == 128 : c16 && !skinny) && (p.c & 15) == 0 && p.m % g == 0 &&
               p.ldc % g == 0 && p.ldc < ((int64_t)1 << 37);
}

extern "C" int cuda_gemm_tmaps_build_packed(const struct gemmd_kproblem *probs, uint32_t n,
                                            struct sched_shape shape, void *out, uint64_t pack, int c16)
{
        static_assert(sizeof(CUtensorMap) == 128, "a tensor map is 128 bytes");
        if ((!probs || !out) && n > 0)
                return -EINVAL;
        if ((shape.tm != WCfg::BM && !half_shape(shape)) ||
            (shape.tn != 128 && shape.tn != WIDE_BN && shape.tn != NARROW_BN))
                return -EINVAL;
        if (((uintptr_t)out & 63) != 0)
                return -EINVAL;
        uint8_t *flags = (uint8_t *)map_flags(out, n);
        memset(flags, 0, n);
        PFN_cuTensorMapEncodeTiled_v12000 fn = encode_fn();
        if (!fn)
                return 0;
        /* Only a group that can run whole on those stages gets the maps they read. */
        const bool skinny = skinny_shape(probs, n, shape);
        /* The caller passes a buffer only where cuda_gemm_pack_bytes said
         * these problems pack (cuda_gemm.h): not judged twice per launch. */
        const bool packs = pack != 0 && (pack & 127) == 0;
        uint64_t pack_off = 0;
        int nfast = 0;
        for (uint32_t i = 0; i < n; i++) {
                const struct gemmd_kproblem &p = probs[i];
                CUtensorMap *m = (CUtensorMap *)((char *)out + (size_t)i * WCfg::TMAP_BYTES);
                if (!wgmma_qualifies(p)) {
                        if (packs && packable(p) && encode_packed(fn, m, p, shape, pack, &pack_off)) {
                                flags[i] = 1 | FLAG_PACKED;
                                nfast++;
                        }
                        continue;
                }
                /* A wide, narrow or half tile is a GEMM's (a SYR2K's B
                 * rows are A rows too, on square tiles). */
                if ((shape.tn != 128 || half_shape(shape)) && p.kind != SCHED_GEMM)
                        continue;
                /* A's box is the stage's rows, a half tile's too (it
                 * computes the first 64 of them). */
                if (!encode_kmajor(fn, &m[0], p.dtype, p.a, p.m, p.k, p.lda, WCfg::BM) ||
                    !encode_kmajor(fn, &m[1], p.dtype, p.b, p.n, p.k, p.ldb, shape.tn))
                        continue;
                flags[i] = p.kind == SCHED_SYR2K ? 2 : 1;
                /* A again, 64 rows a box, in the third slot (which only
                 * f32 uses, for C), for the kernel whose stages hold only
                 * those rows of A (skinny_group). */
                if (skinny)
                        encode_kmajor(fn, &m[2], p.dtype, p.a, p.m, p.k, p.lda, 64);
                /* C's map: 16-bit boxes of 64 rows (128 bytes) x the tile's
                 * columns, as A's and B's (memoized); f32 ones encode_c's. */
                if (c_mappable(p, shape, skinny, c16) &&
                    (p.dtype == GEMMD_F32 ? encode_c(fn, &m[2], p)
                                          : encode_kmajor(fn, &m[2], p.dtype, p.c, p.n, p.m, p.ldc, shape.tn)))
                        flags[i] |= 4;
                nfast++;
        }
        return nfast;
}

/* How many of the n problems' flags in maps buffer buf have (f & mask) == want. */
static uint32_t count_flags(const void *buf, uint32_t n, uint8_t mask, uint8_t want)
{
        const uint8_t *flags = map_flags(buf, n);
        uint32_t c = 0;
        for (uint32_t i = 0; i < n && buf; i++)
                c += (flags[i] & mask) == want;
        return c;
}

extern "C" uint32_t cuda_gemm_tmaps_cmaps(const void *buf, uint32_t n) { return count_flags(buf, n, 4, 4); }

extern "C" uint32_t cuda_gemm_tmaps_syr2k(const void *buf, uint32_t n) { return count_flags(buf, n, 3, 2); }

static_assert(sizeof(struct cuda_res_post) == 4096, "a post is 4 KiB: its fields, then CUDA_RES_INLINE of data");

extern "C" size_t cuda_gemm_res_area_bytes(size_t slot_bytes)
{
        return slot_bytes * CUDA_RES_SLOTS + sizeof(ResMeta);
}

#if defined(GEMMD_RTRACE) && GEMMD_WGMMA
/* The resident dispatchers' reading (wgmma_gemm.cuh, g_rr), at exit. */
static void rread_print(void)
{
        unsigned long long v[CUDA_RES_DISPATCHERS_MAX][RR_N];
        if (cudaMemcpyFromSymbol(v, g_rr, sizeof(v)) != cudaSuccess)
                return;
        for (int d = 0; d < CUDA_RES_DISPATCHERS_MAX; d++)
                if (v[d][RR_ROUNDS])
                        fprintf(stderr,
                                "rread: dispatcher %d: %llu rounds, %.2f us each; %llu posts, %.1f%% with their "
                                "fields a round early (lowest word missing %.1f, of %.1f), %llu rounds of fields "
                                "alone\n",
                                d, v[d][RR_ROUNDS], v[d][RR_NS] / 1e3 / (double)v[d][RR_ROUNDS], v[d][RR_POSTS],
                                v[d][RR_POSTS] ? 100.0 * (double)v[d][RR_TORN] / (double)v[d][RR_POSTS] : 0.0,
                                v[d][RR_TORN] ? (double)v[d][RR_LOW] / (double)v[d][RR_TORN] : 0.0,
                                v[d][RR_TORN] ? (double)v[d][RR_NW] / (double)v[d][RR_TORN] : 0.0, v[d][RR_LAZY]);
}
#endif

extern "C" int cuda_gemm_res_launch(int dtype, struct cuda_res_host *host, const struct cuda_res_posts *posts,
                                    void *area, size_t slot_bytes, uint64_t first_seq, uint64_t gen, uint32_t grid,
                                    uint32_t ndisp, void *stream)
{
        /* (a slot's mark carries the plan's CTAs in 8 bits, its seq in 46: res_mark.h) */
        if (!host || !posts || !area || grid == 0 || grid > RES_MARK_MAX_CTAS || first_seq > RES_SEQ_MASK || slot_bytes % 1024 ||
            first_seq == 0 || gen == 0 || ndisp == 0 || ndisp > CUDA_RES_DISPATCHERS_MAX || ndisp > grid ||
            (dtype != GEMMD_F16 && dtype != GEMMD_BF16))
                return -EINVAL;
#if GEMMD_WGMMA
        if (!device_sm90())
                return -EINVAL;
#ifdef GEMMD_RTRACE
        static std::atomic<int> rr_once{0};
        if (!rr_once.exchange(1))
                atexit(rread_print);
#endif
        KArgs args;
        memset(&args, 0, offsetof(KArgs, inl));
        args.res.host = host;
        args.res.posts = posts;
        args.res.area = (char *)area;
        args.res.slot_bytes = slot_bytes;
        args.res.first_seq = first_seq;
        args.res.gen = gen;
        args.res.ndisp = ndisp;
        cudaStream_t st = (cudaStream_t)stream;
        return dtype == GEMMD_F16 ? launch_wgmma_res<__half>(args, grid, st)
                                  : launch_wgmma_res<__nv_bfloat16>(args, grid, st);
#else
        (void)stream;
        return -EINVAL;
#endif
}

#if defined(GEMMD_KTRACE) && GEMMD_WGMMA
/* The phase timing's means (wgmma_gemm.cuh, g_kt), at exit. */
static void ktrace_print(void)
{
        unsigned long long v[KT_N + 3];
        if (cudaMemcpyFromSymbol(v, g_kt, sizeof(v)) != cudaSuccess || v[KT_N] == 0)
                return;
        const double n = (double)v[KT_N], ghz = (double)v[KT_N - 1] / (double)v[KT_N + 2];
        const double us = 1.0 / (n * ghz * 1e3);
        fprintf(stderr,
                "ktrace: %llu CTAs with work, %.2f warpgroup tiles each (a full tile is two), SM clock %.3f GHz; per CTA, mean us: barriers "
                "%.2f, first plan entries and problems read %.2f, first copy issued %.2f, its stage full %.2f, "
                "first tile's k-loop %.2f, C staged in shared memory %.2f, stored %.2f, the rest %.2f; whole "
                "%.2f\n",
                v[KT_N], (double)v[KT_N + 1] / n, ghz, v[0] * us, v[1] * us, v[2] * us, v[3] * us, v[4] * us,
                v[5] * us, v[6] * us, v[7] * us, v[8] * us);
}
#endif

#if GEMMD_WGMMA
/*
 * Whether a 16-bit group that the two kernels would share (nfast of its
 * problems on the Hopper kernel, the rest on the sm_80 one after it) runs
 * whole on the sm_80 kernel instead: when the problems the Hopper kernel
 * cannot take hold at least 1/64 of the group's products (m n k). The
 * second launch reruns the plan for those problems alone, whose tiles
 * the plan did not balance by themselves, and its tail costs more than
 * the Hopper kernel saves: measured from 2% to 89% of the products
 * (bench/results/odd-sizes.txt). Needs the host copy of the problems;
 * groups that must stay on the Hopper kernel (its own tiles, launch data
 * carried, early completion) do.
 */
static bool whole_on_sm80(const struct cuda_group *g, bool own_tile)
{
        double slow = 0, all = 0;
        if ((g->dtype != GEMMD_F16 && g->dtype != GEMMD_BF16) || g->nfast >= g->nproblems || !g->problems_host ||
            own_tile || g->inline_bytes || g->early_cnt)
                return false;
        for (uint32_t i = 0; i < g->nproblems; i++) {
                const struct gemmd_kproblem &p = g->problems_host[i];
                const double w = (double)p.m * p.n * p.k;
                all += w;
                if (!wgmma_qualifies(p))
                        slow += w;
        }
        return 64 * slow >= all;
}
#endif

/* Which of the Hopper kernel's own tiles g's plan uses: WIDE_BN or
 * NARROW_BN, 0 for the usual tile (which every kernel runs) and for the
 * half tile (half_rows, cuda_gemm_half_rows: the usual kernel, which alone
 * runs it), -1 for a shape no kernel runs. */
static int hopper_tile_bn(const struct cuda_group *g, uint32_t half_rows)
{
        const struct sched_shape want = cuda_gemm_shape(g->dtype, g->tf32), have = g->cfg.shape;

        if (half_rows)
                return 0;
        if (have.tm != want.tm || have.tk != want.tk)
                return -1;
        if (have.tn == want.tn)
                return 0;
        if (have.tn != WIDE_BN && have.tn != NARROW_BN)
                return -1;
        return hopper_shape(g->dtype, g->tf32, have.tn).tn ? (int)have.tn : -1;
}

static std::atomic<uint64_t> skinny_launches{0};

extern "C" uint64_t cuda_gemm_skinny_launches(void) { return skinny_launches.load(); }

/*
 * Whether g runs on the Hopper kernel whose stages hold 64 rows of A
 * (WCfgT's BMA): a 16-bit group of GEMMs on the usual or the wide tile,
 * all of at most 64 rows, none split (so every tile is a half tile, which
 * one consumer computes from rows 0-63 of its stages), with their third
 * maps (cuda_gemm_tmaps_build builds them for such groups: skinny_shape). A stage
 * then takes 8 KiB less and more of them fit (7 of 24 KiB where 5 of 32
 * did, 5 of 32 where 4 of 40), so more of B, nearly all that a
 * decode-like GEMM reads, is in flight. Needs the host copy of the
 * problems.
 */
static bool skinny_group(const struct cuda_group *g)
{
        return g->problems_host && g->nfast == g->nproblems && !(g->plan && g->plan->nsplit > 0) &&
               skinny_shape(g->problems_host, g->nproblems, g->cfg.shape);
}

extern "C" int cuda_gemm_launch(const struct cuda_group *g, void *stream)
{
        if (!g || g->dtype < GEMMD_F32 || g->dtype > GEMMD_F64)
                return -EINVAL;
        if (g->nproblems == 0)
                return 0;
#if defined(GEMMD_KTRACE) && GEMMD_WGMMA
        static std::atomic<int> kt_once{0};
        if (!kt_once.exchange(1))
                atexit(ktrace_print);
#endif
        const uint32_t half_rows = cuda_gemm_half_rows(g->dtype, g->tf32, g->cfg.shape);
        const int bn = hopper_tile_bn(g, half_rows);
        if (bn < 0 || !g->problems)
                return -EINVAL;
        /* The wide, narrow and half tiles are the Hopper kernel's alone:
         * every problem on it. A half tile is whole (a split one would
         * need both consumers' sums, as a usual tile's). */
        const bool half = half_rows != 0;
        const bool own_tile = bn != 0 || half;
        if (own_tile && (!g->tmaps || g->nfast != g->nproblems || g->nfast_syr2k))
                return -EINVAL;
        if (half && (!g->plan || g->plan->nentries == 0 || g->plan->nsplit > 0))
                return -EINVAL;

        if (g->inline_bytes > CUDA_GEMM_INLINE_MAX ||
            (g->inline_bytes && (!g->inline_host || (g->inline_dev & 63))))
                return -EINVAL;
        /* Built per launch (a few KB, on this thread's stack): the runtime
         * copies it into the launch. */
        KArgs args;
        KParams &kp = args.kp;
        kp = KParams{};
        args.tmaps = nullptr;
        args.inl_dev = g->inline_dev;
        args.inl_bytes = g->inline_bytes;
        if (g->inline_bytes)
                memcpy(args.inl, g->inline_host, g->inline_bytes);
        kp.probs = g->problems;
        kp.nprobs = g->nproblems;
        uint32_t grid;
        const struct sched_plan *pl = g->plan;
        if (pl && pl->nentries > 0) {
                if (!g->plan_blob || pl->nctas == 0 || pl->nproblems != g->nproblems)
                        return -EINVAL;
                if (pl->nsplit > 0 && (!g->ws || !g->arrivals))
                        return -EINVAL;
                /* f64 sums all of K in one pass (no chunks to reduce). */
                if (pl->nsplit > 0 && g->dtype == GEMMD_F64)
                        return -EINVAL;
                const char *b = (const char *)g->plan_blob;
                kp.cta_begin = (const uint32_t *)(b + pl->off_cta_begin);
                kp.entries = (const struct sched_entry *)(b + pl->off_entries);
                kp.split_parts = (const uint32_t *)(b + pl->off_split_parts);
                kp.split_ws = (const uint32_t *)(b + pl->off_split_ws);
                kp.ws = g->ws;
                kp.arrivals = g->arrivals;
                kp.tile_rows = half_rows;
                grid = pl->nctas;
        } else {
                grid = g->cfg.ctas;
                if (grid == 0)
                        return -EINVAL;
        }
        cudaStream_t st = (cudaStream_t)stream;
        bool fast = false;
#if GEMMD_WGMMA
        /* wgmma has no f64: those groups never take the Hopper kernel. */
        fast = g->dtype != GEMMD_F64 && g->tmaps && g->nfast > 0 && ((uintptr_t)g->tmaps & 63) == 0 &&
               device_sm90() && !whole_on_sm80(g, own_tile);
#endif
        /* Launch data carried with the launch: the Hopper kernel only (the
         * sm_80 kernels read device memory). */
        if (g->inline_bytes && !(fast && g->nfast == g->nproblems))
                return -EINVAL;
        if (g->early_cnt) {
                if (!fast || g->nfast != g->nproblems || g->nfast_syr2k || !kp.cta_begin || !g->early_need ||
                    !g->early_flag || (g->dtype != GEMMD_F16 && g->dtype != GEMMD_BF16))
                        return -EINVAL;
                kp.early_cnt = g->early_cnt;
                kp.early_need = g->early_need;
                kp.early_flag = g->early_flag;
                kp.early_seq = g->early_seq;
                kp.early_word = g->early_word;
        }
#if GEMMD_WGMMA
        if (fast) {
                const char *tm = (const char *)g->tmaps;
                if (g->nfast < g->nproblems) {
                        kp.fast = map_flags(tm, g->nproblems);
                        kp.want_fast = 1;
                }
                const bool syrk = g->nfast_syr2k > 0;
                args.tmaps = tm;
                /* Packed copies first (their maps are on the device). */
                if (g->pack) {
                        if (g->inline_bytes)
                                return -EINVAL;
                        if (int rc = launch_pack(g, tm, st))
                                return rc;
                }
                const bool skinny = skinny_group(g);
                skinny_launches += skinny;
                /* Split tiles added apart: GEMMs, all on this kernel,
                 * without early completion (a tile is whole only after the
                 * second kernel). Otherwise the last part adds them, as in
                 * any split plan. */
                const bool apart = pl && pl->reduce_apart && pl->nsplit > 0 && g->nfast == g->nproblems &&
                                   !syrk && !skinny && !g->early_cnt;
                kp.reduce_apart = apart;
                kp.nentries = apart ? pl->nentries : 0;
                int rc = g->dtype == GEMMD_F16    ? launch_wgmma<__half>(args, grid, st, syrk, false, bn, skinny)
                         : g->dtype == GEMMD_BF16 ? launch_wgmma<__nv_bfloat16>(args, grid, st, syrk, false, bn, skinny)
                                                  : launch_wgmma<float>(args, grid, st, syrk, !g->tf32, bn, false);
                if (!rc && apart)
                        rc = g->dtype == GEMMD_F16    ? launch_reduce_apart<__half>(args, bn, pl->nsplit, st)
                             : g->dtype == GEMMD_BF16 ? launch_reduce_apart<__nv_bfloat16>(args, bn, pl->nsplit, st)
                                                      : launch_reduce_apart<float>(args, bn, pl->nsplit, st);
                if (rc || g->nfast == g->nproblems)
                        return rc;
                kp.want_fast = 0; /* the rest of the group on the sm_80 kernel */
        }
#endif
        if (own_tile)
                return -EINVAL; /* no sm_90a device, or a build without its kernel */
        if (g->dtype == GEMMD_F64)
                return launch_f64(g, kp, grid, st);
        if (g->dtype == GEMMD_F16)
                return launch<CfgF16>(g, kp, grid, st);
        if (g->dtype == GEMMD_BF16)
                return launch<CfgBF16>(g, kp, grid, st);
        if (g->tf32)
                return launch<CfgTF32>(g, kp, grid, st);
        return launch<CfgF32>(g, kp, grid, st);
}
