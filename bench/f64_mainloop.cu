/*
 * f64_mainloop.cu - the f64 kernel's mainloop design alone, on one DGEMM,
 * timed in turn with cublasDgemm: a plain kernel with the tile, warps,
 * double-buffered fragments, stage pipeline and copies of
 * kernels/dmma_gemm.cuh (dmainloop2, DCopy), without the grouped kernel's
 * plan walk, problem records, SYR2K terms or epilogue options. It shows
 * how far the mainloop itself gets (bench/results/f64-kernels.txt), so
 * that the grouped kernel can be held against it. Not built by make:
 *
 *   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a [-DPERSIST=1] \
 *        bench/f64_mainloop.cu -o f64_mainloop -lcublas
 *   ./f64_mainloop [n=8192] [reps=10]
 *
 * Square n x n x n (n a multiple of 128), A K-major and B K-major (op TN)
 * unless a variant says otherwise; C checked bit for bit against cuBLAS's
 * after being poisoned. PERSIST=1: 132 CTAs walk the tiles, as the grouped
 * kernel's do; else one CTA a tile. Variants: L<BM, BN, BK, STAGES,
 * warps along m, warps along n, k of one mma (m16n8kMK), min CTAs an SM,
 * MODE (1: double-buffered fragments; 0: a k-tile's reads, then its mmas),
 * BAR (0: barrier before the slice's mmas; 1: after), X K-major, Y K-major>.
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <vector>

#define CK(x)                                                                                                          \
        do {                                                                                                           \
                cudaError_t e_ = (x);                                                                                  \
                if (e_ != cudaSuccess) {                                                                               \
                        printf("CUDA %s at %d\n", cudaGetErrorString(e_), __LINE__);                                   \
                        exit(1);                                                                                       \
                }                                                                                                      \
        } while (0)
#define CB(x)                                                                                                          \
        do {                                                                                                           \
                cublasStatus_t e_ = (x);                                                                               \
                if (e_ != CUBLAS_STATUS_SUCCESS) {                                                                     \
                        printf("cuBLAS %d at %d\n", (int)e_, __LINE__);                                                \
                        exit(1);                                                                                       \
                }                                                                                                      \
        } while (0)

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
        return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void cp_async16(void *s, const void *g) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(s)), "l"(g));
}
__device__ __forceinline__ void cp_commit() {
        asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_wait() {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <int MK> __device__ __forceinline__ void dmma(double *d, const double *a, const double *b);
template <> __device__ __forceinline__ void dmma<4>(double *d, const double *a, const double *b) {
        asm("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
            : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
            : "d"(a[0]), "d"(a[1]), "d"(b[0]));
}
template <> __device__ __forceinline__ void dmma<8>(double *d, const double *a, const double *b) {
        asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
            : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
}
template <> __device__ __forceinline__ void dmma<16>(double *d, const double *a, const double *b) {
        asm("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7,%8,%9,%10,%11}, "
            "{%12,%13,%14,%15}, {%0,%1,%2,%3};\n"
            : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
            : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]), "d"(b[0]),
              "d"(b[1]), "d"(b[2]), "d"(b[3]));
}

template <int BM_, int BN_, int BK_, int S_, int WGM_, int WGN_, int MK_, int MINB_, int MODE_, int BAR_, bool XK_,
          bool YK_>
struct L {
        static constexpr int BM = BM_, BN = BN_, BK = BK_, S = S_, WGM = WGM_, WGN = WGN_, MK = MK_, MINB = MINB_,
                             MODE = MODE_, BAR = BAR_;
        static constexpr bool XK = XK_, YK = YK_;
        static constexpr int THREADS = 32 * WGM * WGN, PAD = 4, SK = BK + PAD;
        static constexpr int SXS = XK ? SK : BM + PAD, SYS = YK ? SK : BN + PAD; // row strides
        static constexpr int XE = XK ? BM * SK : BK * (BM + PAD), YE = YK ? BN * SK : BK * (BN + PAD);
        static constexpr int SE = XE + YE;
        static constexpr int WM = BM / WGM, WN = BN / WGN, MR = 16, MT = WM / MR, NT = WN / 8;
        static constexpr int MA = MK / 2, MB = MK / 4, SPS = BK / MK, NACC = MT * NT * 4;
        static constexpr int SMEM = S * SE * 8;
};

template <int B> __device__ __forceinline__ void cp_async_zfill(uint32_t sdst, const void *g, uint32_t bytes);
template <> __device__ __forceinline__ void cp_async_zfill<16>(uint32_t sdst, const void *g, uint32_t bytes) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sdst), "l"(g), "r"(bytes));
}
template <> __device__ __forceinline__ void cp_async_zfill<8>(uint32_t sdst, const void *g, uint32_t bytes) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(sdst), "l"(g), "r"(bytes));
}
template <class D, int ROWS, bool KMAJ, int VW> struct DCopy {
        static constexpr int VPR = (KMAJ ? D::BK : ROWS) / VW;
        static constexpr int PER = ROWS * D::BK / VW / D::THREADS;
        static constexpr int STEP = D::THREADS / VPR;
        static constexpr int SR = KMAJ ? D::SK : ROWS + D::PAD;
        const double *p;
        int64_t ld;
        int32_t rrem, krem;
        uint32_t soff;
        __device__ __forceinline__ void init(const double *g, int64_t ld_, uint32_t r0, uint32_t rext, uint32_t kext) {
                const int c = ((int)threadIdx.x % VPR) * VW, o = (int)threadIdx.x / VPR;
                const int r = KMAJ ? o : c, kk = KMAJ ? c : o;
                ld = ld_;
                p = g + (KMAJ ? (int64_t)(r0 + r) * ld + kk : (int64_t)(r0 + r) + (int64_t)kk * ld);
                rrem = (int32_t)(rext - r0) - r;
                krem = (int32_t)kext - kk;
                soff = (uint32_t)(KMAJ ? r * SR + kk : kk * SR + r) * 8;
        }
        __device__ __forceinline__ void issue(uint32_t sst) {
                const double *q = p;
                const int32_t along = KMAJ ? krem : rrem, across = KMAJ ? rrem : krem;
                const uint32_t vbytes = along >= VW ? VW * 8 : along > 0 ? (uint32_t)along * 8 : 0;
#pragma unroll
                for (int i = 0; i < PER; i++) {
                        const uint32_t bytes = across > i * STEP ? vbytes : 0;
                        cp_async_zfill<VW * 8>(sst + soff + (uint32_t)(i * STEP * SR * 8), q, bytes);
                        q += STEP * ld;
                        asm("" : "+l"(q)); /* one address at a time (dmma_gemm.cuh, DCopy) */
                }
                p += KMAJ ? D::BK : D::BK * ld;
                krem -= D::BK;
        }
};

template <class D>
__device__ __forceinline__ void load_frags(const double *sx, const double *sy, int kb, double (&a)[D::MT][D::MA],
                                           double (&b)[D::NT][D::MB]) {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const int wm = warp % D::WGM, wn = warp / D::WGM, g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int mi = 0; mi < D::MT; mi++)
#pragma unroll
                for (int i = 0; i < D::MA; i++) {
                        const int row = wm * D::WM + mi * 16 + g + 8 * (i % 2), kk = kb + t + 4 * (i / 2);
                        a[mi][i] = D::XK ? sx[row * D::SXS + kk] : sx[kk * D::SXS + row];
                }
#pragma unroll
        for (int ni = 0; ni < D::NT; ni++)
#pragma unroll
                for (int j = 0; j < D::MB; j++) {
                        const int col = wn * D::WN + ni * 8 + g, kk = kb + t + 4 * j;
                        b[ni][j] = D::YK ? sy[col * D::SYS + kk] : sy[kk * D::SYS + col];
                }
}

template <class D>
__device__ __forceinline__ void mmas(double *acc, const double (&a)[D::MT][D::MA], const double (&b)[D::NT][D::MB]) {
#pragma unroll
        for (int mi = 0; mi < D::MT; mi++)
#pragma unroll
                for (int ni = 0; ni < D::NT; ni++) {
                        const int n2 = (mi & 1) ? D::NT - 1 - ni : ni; // serpentine
                        dmma<D::MK>(acc + (mi * D::NT + n2) * 4, a[mi], b[n2]);
                }
}

template <class D>
__device__ __forceinline__ void body(const double *A, const double *B, int M, int N, int K, int lda, int ldb, int m0,
                                     int n0, double *acc, double *sm) {
        const int KT = K / D::BK;
        DCopy<D, D::BM, D::XK, 2> cx;
        DCopy<D, D::BN, D::YK, 2> cy;
        cx.init(A, lda, m0, M, K);
        cy.init(B, ldb, n0, N, K);
        const uint32_t s0 = smem_u32(sm);
        uint32_t wst = s0;
        auto issue = [&](int kt) {
                if (kt < KT) {
                        cx.issue(wst);
                        cy.issue(wst + D::XE * 8);
                        wst = wst + D::SE * 8 == s0 + D::S * D::SE * 8 ? s0 : wst + D::SE * 8;
                }
                cp_commit();
        };
        if constexpr (D::MODE == 0) {
#pragma unroll
                for (int s = 0; s < D::S - 1; s++)
                        issue(s);
                for (int kt = 0; kt < KT; kt++) {
                        cp_wait<D::S - 2>();
                        __syncthreads();
                        issue(kt + D::S - 1);
                        const double *sx = sm + (kt % D::S) * D::SE, *sy = sx + D::XE;
#pragma unroll
                        for (int ks = 0; ks < D::SPS; ks++) {
                                double a[D::MT][D::MA], b[D::NT][D::MB];
                                load_frags<D>(sx, sy, ks * D::MK, a, b);
                                mmas<D>(acc, a, b);
                        }
                }
        } else {
                static_assert(D::SPS >= 2 && D::SPS % 2 == 0, "");
#pragma unroll
                for (int s = 0; s < D::S; s++)
                        issue(s);
                cp_wait<D::S - 1>();
                __syncthreads();
                double a[2][D::MT][D::MA], b[2][D::NT][D::MB];
                load_frags<D>(sm, sm + D::XE, 0, a[0], b[0]);
                int rs = 0;
                for (int kt = 0; kt < KT; kt++) {
                        const double *sx = sm + rs * D::SE, *sy = sx + D::XE;
                        const int ns = rs + 1 == D::S ? 0 : rs + 1;
#pragma unroll
                        for (int ks = 0; ks < D::SPS; ks++) {
                                const int cur = ks & 1, nxt = cur ^ 1;
                                if (ks < D::SPS - 1)
                                        load_frags<D>(sx, sy, (ks + 1) * D::MK, a[nxt], b[nxt]);
                                if (ks == D::SPS - 2 && D::BAR == 0) {
                                        cp_wait<D::S - 2>();
                                        __syncthreads();
                                        issue(kt + D::S);
                                }
                                if (ks == D::SPS - 1 && kt + 1 < KT)
                                        load_frags<D>(sm + ns * D::SE, sm + ns * D::SE + D::XE, 0, a[nxt], b[nxt]);
                                mmas<D>(acc, a[cur], b[cur]);
                                if (ks == D::SPS - 2 && D::BAR == 1) {
                                        cp_wait<D::S - 2>();
                                        __syncthreads();
                                        issue(kt + D::S);
                                }
                        }
                        rs = ns;
                }
                cp_wait<0>();
        }
}

template <class D, bool X, bool Y>
using RB = L<D::BM, D::BN, D::BK, D::S, D::WGM, D::WGN, D::MK, D::MINB, D::MODE, D::BAR, X, Y>;

template <class D>
__global__ void __launch_bounds__(D::THREADS, D::MINB)
    kern(const double *A, const double *B, double *C, int M, int N, int K, int lda, int ldb, int ldc) {
        extern __shared__ __align__(128) double sm[];
        const int TM = M / D::BM;
#if PERSIST
        for (int tt = blockIdx.x; tt < TM * (N / D::BN); tt += gridDim.x) {
                const int tm = tt % TM, tn = tt / TM;
#else
        const int tm = blockIdx.x % TM, tn = blockIdx.x / TM;
#endif
                const int m0 = tm * D::BM, n0 = tn * D::BN;
                double acc[D::NACC];
#pragma unroll
                for (int i = 0; i < D::NACC; i++)
                        acc[i] = 0.0;
                body<D>(A, B, M, N, K, lda, ldb, m0, n0, acc, sm);
                const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
                const int wm = warp % D::WGM, wn = warp / D::WGM, g = lane >> 2, t = lane & 3;
#pragma unroll
                for (int mi = 0; mi < D::MT; mi++)
#pragma unroll
                        for (int ni = 0; ni < D::NT; ni++)
#pragma unroll
                                for (int e = 0; e < 4; e++) {
                                        const int r = m0 + wm * D::WM + mi * 16 + g + 8 * (e >> 1),
                                                  c = n0 + wn * D::WN + ni * 8 + 2 * t + (e & 1);
                                        C[r + (int64_t)c * ldc] = acc[(mi * D::NT + ni) * 4 + e];
                                }
#if PERSIST
                __syncthreads();
        }
#endif
}

struct Variant {
        const char *name;
        void (*launch)(const double *, const double *, double *, int, int, int, int, int, int, cudaStream_t);
        bool xk, yk;
};

template <class D>
void launch(const double *A, const double *B, double *C, int M, int N, int K, int lda, int ldb, int ldc,
            cudaStream_t st) {
        static bool once = false;
        if (!once) {
                CK(cudaFuncSetAttribute(kern<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, D::SMEM));
                once = true;
        }
        int grid = (M / D::BM) * (N / D::BN);
#if PERSIST
        grid = grid < 132 ? grid : 132;
#endif
        kern<D><<<grid, D::THREADS, D::SMEM, st>>>(A, B, C, M, N, K, lda, ldb, ldc);
}

#ifndef VARIANTS
#define VARIANTS                                                                                                       \
        V(L<128, 128, 16, 4, 2, 4, 4, 1, 1, 0, true, true>)                                                            \
        V(L<128, 128, 16, 3, 2, 4, 8, 1, 1, 0, true, true>)                                                            \
        V(L<128, 128, 16, 4, 2, 4, 4, 1, 1, 0, false, false>)
#endif

#define V(...) {#__VA_ARGS__, launch<__VA_ARGS__>, __VA_ARGS__::XK, __VA_ARGS__::YK},
static const Variant variants[] = {VARIANTS};
#undef V

static double rnd(uint64_t &s) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return ((s >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1;
}

int main(int argc, char **argv) {
        const int n = argc > 1 ? atoi(argv[1]) : 8192, reps = argc > 2 ? atoi(argv[2]) : 10;
        const int M = n, N = n, K = n;
        const size_t ea = (size_t)M * K, eb = (size_t)K * N, ec = (size_t)M * N;
        std::vector<double> h(std::max(ea, eb));
        uint64_t s = 42;
        double *A, *B, *C, *R;
        CK(cudaMalloc(&A, ea * 8));
        CK(cudaMalloc(&B, eb * 8));
        CK(cudaMalloc(&C, ec * 8));
        CK(cudaMalloc(&R, ec * 8));
        for (size_t i = 0; i < ea; i++)
                h[i] = rnd(s);
        CK(cudaMemcpy(A, h.data(), ea * 8, cudaMemcpyHostToDevice));
        for (size_t i = 0; i < eb; i++)
                h[i] = rnd(s);
        CK(cudaMemcpy(B, h.data(), eb * 8, cudaMemcpyHostToDevice));
        cublasHandle_t hb;
        CB(cublasCreate(&hb));
        const double one = 1, zero = 0;
        // A K-major (m,k) at A[k + m*K] = op(A)=T with lda=K; B K-major (k,n) at B[k + n*K] = N, ldb=K.
        bool xk = true, yk = true;
        auto cub = [&]() {
                CB(cublasDgemm(hb, xk ? CUBLAS_OP_T : CUBLAS_OP_N, yk ? CUBLAS_OP_N : CUBLAS_OP_T, M, N, K, &one, A,
                               xk ? K : M, B, yk ? K : N, &zero, R, M));
        };
        std::vector<double> hr(ec), hc(ec);
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        const double flops = 2.0 * M * N * K;
        for (const Variant &v : variants) {
                xk = v.xk;
                yk = v.yk;
                cub();
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(hr.data(), R, ec * 8, cudaMemcpyDeviceToHost));
                CK(cudaMemset(C, 0xff, ec * 8));
                v.launch(A, B, C, M, N, K, v.xk ? K : M, v.yk ? K : N, M, 0);
                CK(cudaGetLastError());
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(hc.data(), C, ec * 8, cudaMemcpyDeviceToHost));
                double md = 0, mx = 0;
                size_t neq = 0;
                for (size_t i = 0; i < ec; i++) {
                        md = std::max(md, std::fabs(hc[i] - hr[i]));
                        mx = std::max(mx, std::fabs(hr[i]));
                        neq += hc[i] != hr[i];
                        if (hc[i] != hc[i])
                                md = 1e300;
                }
                std::vector<float> tv, tc;
                for (int r = 0; r < reps + 2; r++) {
                        float ms;
                        CK(cudaEventRecord(e0));
                        v.launch(A, B, C, M, N, K, v.xk ? K : M, v.yk ? K : N, M, 0);
                        CK(cudaEventRecord(e1));
                        CK(cudaEventSynchronize(e1));
                        CK(cudaEventElapsedTime(&ms, e0, e1));
                        if (r >= 2)
                                tv.push_back(ms);
                        CK(cudaEventRecord(e0));
                        cub();
                        CK(cudaEventRecord(e1));
                        CK(cudaEventSynchronize(e1));
                        CK(cudaEventElapsedTime(&ms, e0, e1));
                        if (r >= 2)
                                tc.push_back(ms);
                }
                std::sort(tv.begin(), tv.end());
                std::sort(tc.begin(), tc.end());
                const double a = flops / tv[tv.size() / 2] / 1e9, c = flops / tc[tc.size() / 2] / 1e9;
                printf("%-70s %7.1f TF/s  cublas %7.1f  ratio %.3f  maxdiff/max %.2e  unequal %zu\n", v.name, a, c,
                       a / c, md / mx, neq);
        }
        return 0;
}
