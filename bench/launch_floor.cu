/*
 * launch_floor.cu - `gemmbench floor`: what a kernel costs the GPU before
 * it does any work, by what the kernel asks for, beside cuBLAS on one small
 * GEMM. A lone request's device time is this floor plus its CTAs' own
 * path, so the table says how much of gemmd's time for one small GEMM
 * (`gemmbench kernels --queued --narrow`, one problem) any kernel would
 * spend, and how much is its own.
 *
 * Each row is timed as `kernels --queued` times gemmd's: queued behind a
 * spin kernel, so that the host's launch call is hidden and only the GPU's
 * time from the event before to the event after counts; median of --reps.
 */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

#define FL_CK(x)                                                                                     \
        do {                                                                                         \
                cudaError_t e_ = (x);                                                                \
                if (e_ != cudaSuccess) {                                                             \
                        fprintf(stderr, "gemmbench floor: %s: %s\n", #x, cudaGetErrorString(e_));   \
                        exit(1);                                                                     \
                }                                                                                    \
        } while (0)

constexpr int SMEM = 216 * 1024; /* about what gemmd's Hopper kernel takes */
constexpr int BIG_PARAM = 4352; /* gemmd's launch parameter, launch data carried inline */

__device__ __forceinline__ unsigned long long globaltimer()
{
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        return t;
}

/* Holds the stream for ns so that what follows is queued behind it. */
__global__ void spin(unsigned long long ns)
{
        const unsigned long long t0 = globaltimer();
        while (globaltimer() - t0 < ns) {
        }
}

struct Small {
        const unsigned *p;
        unsigned off;
};
template <int N> struct Param {
        unsigned char b[N];
};

/* Does nothing the compiler can remove: the store never happens. */
__global__ void empty(const __grid_constant__ Small a)
{
        extern __shared__ unsigned char s[];
        if (a.off == 0xffffffffu)
                s[threadIdx.x] = 1;
}

__device__ unsigned sink;

/* One thread reads two bytes of an N-byte parameter. */
template <int N> __global__ void param_read(const __grid_constant__ Param<N> a)
{
        if (threadIdx.x == 0 && a.b[blockIdx.x % N] == 0xee && a.b[N - 1] == 0xef)
                sink = 1;
}

/* Three dependent reads by one thread from p (indices masked by mask), as
 * a CTA's first plan entry, problem and tensor map are; the value is kept
 * so that the reads cannot be removed. */
__device__ __forceinline__ void read_chain(const unsigned *p, unsigned mask, unsigned stride)
{
        extern __shared__ unsigned char s[];
        __shared__ unsigned v;
        if (threadIdx.x == 0) {
                const unsigned x = p[blockIdx.x];
                const unsigned y = p[(x & mask) + stride];
                v = p[(y & mask) + 2 * stride];
        }
        __syncthreads();
        if (v == 0xdeadbeef)
                s[threadIdx.x] = 1;
}

/* Through a generic pointer into the parameter, as gemmd's carried launch
 * data are read. */
__global__ void chain_param(const __grid_constant__ Param<BIG_PARAM> a)
{
        read_chain((const unsigned *)a.b, 0xff, 256);
}

/* From memory. */
__global__ void chain_mem(const __grid_constant__ Small a)
{
        read_chain(a.p + a.off, 0xffff, 1024);
}

/* A pipelined kernel's prologue: 16 mbarriers set up, then a CTA barrier. */
__global__ void prologue(const __grid_constant__ Small a)
{
        extern __shared__ unsigned char s[];
        __shared__ __align__(8) unsigned long long bar[16];
        if (threadIdx.x == 0) {
                for (int i = 0; i < 16; i++)
                        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(
                                             (unsigned)__cvta_generic_to_shared(&bar[i])),
                                     "r"(1));
#if __CUDA_ARCH__ >= 900
                asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
        }
        __syncthreads();
        if (a.off == 0xffffffffu)
                s[threadIdx.x] = 1;
}

struct Timer {
        cudaStream_t st;
        cudaEvent_t e0, e1;
        int reps;
};

/* Median us of launch(rep) from the event before to the event after. */
template <typename F> float time_queued(Timer &t, F launch)
{
        std::vector<float> v;
        for (int r = 0; r < t.reps + 5; r++) {
                spin<<<1, 32, 0, t.st>>>(20000);
                FL_CK(cudaEventRecord(t.e0, t.st));
                launch(r);
                FL_CK(cudaEventRecord(t.e1, t.st));
                FL_CK(cudaStreamSynchronize(t.st));
                float ms;
                FL_CK(cudaEventElapsedTime(&ms, t.e0, t.e1));
                if (r >= 5)
                        v.push_back(ms * 1000.f);
        }
        FL_CK(cudaGetLastError());
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
}

void row(const char *what, float us, float floor_us)
{
        printf("| %s | %.2f | %+.2f |\n", what, us, us - floor_us);
}

/* One cublasGemmEx of bf16 n^3 (A^T B, gemmd's benchmark layout). */
float time_cublas(Timer &t, cublasHandle_t h, int n)
{
        __nv_bfloat16 *a, *b, *c;
        const size_t bytes = (size_t)n * n * sizeof(__nv_bfloat16);
        FL_CK(cudaMalloc(&a, bytes));
        FL_CK(cudaMalloc(&b, bytes));
        FL_CK(cudaMalloc(&c, bytes));
        FL_CK(cudaMemset(a, 0x3c, bytes));
        FL_CK(cudaMemset(b, 0x3c, bytes));
        const float one = 1.f, zero = 0.f;
        cublasStatus_t rc = CUBLAS_STATUS_SUCCESS;
        const float us = time_queued(t, [&](int) {
                cublasStatus_t r = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b,
                                                CUDA_R_16BF, n, &zero, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT);
                if (r != CUBLAS_STATUS_SUCCESS)
                        rc = r;
        });
        FL_CK(cudaFree(a));
        FL_CK(cudaFree(b));
        FL_CK(cudaFree(c));
        if (rc != CUBLAS_STATUS_SUCCESS) {
                fprintf(stderr, "gemmbench floor: cublasGemmEx failed (%d)\n", (int)rc);
                exit(1);
        }
        return us;
}

} // namespace

extern "C" int launch_floor_main(int argc, char **argv)
{
        Timer t = {};
        t.reps = 200;
        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
                        char *end;
                        const long v = strtol(argv[++i], &end, 10);
                        if (*end || v < 1 || v > 100000) {
                                fprintf(stderr, "gemmbench floor: --reps takes 1 to 100000, not '%s'\n", argv[i]);
                                return 2;
                        }
                        t.reps = (int)v;
                } else {
                        fprintf(stderr, "gemmbench floor: unknown argument '%s'\nusage: gemmbench floor [--reps N]\n",
                                argv[i]);
                        return 2;
                }
        }
        cudaDeviceProp prop;
        FL_CK(cudaGetDeviceProperties(&prop, 0));
        const int sms = prop.multiProcessorCount;
        FL_CK(cudaStreamCreateWithFlags(&t.st, cudaStreamNonBlocking));
        FL_CK(cudaEventCreate(&t.e0));
        FL_CK(cudaEventCreate(&t.e1));
        FL_CK(cudaFuncSetAttribute(empty, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
        FL_CK(cudaFuncSetAttribute(chain_param, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
        FL_CK(cudaFuncSetAttribute(chain_mem, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
        FL_CK(cudaFuncSetAttribute(prologue, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
        /* 256 MB: each run reads a part no earlier run touched since it left L2. */
        const size_t words = 64ull << 20;
        unsigned *buf;
        FL_CK(cudaMalloc(&buf, words * sizeof(unsigned)));
        FL_CK(cudaMemset(buf, 0, words * sizeof(unsigned)));
        const Small none = {buf, 0};

        printf("# %s, %d SMs; each row queued behind a spin kernel, median of %d runs, us from the event before "
               "to the event after\n",
               prop.name, sms, t.reps);
        printf("| kernel | us | over the floor |\n|---|---|---|\n");
        const float floor_us = time_queued(t, [&](int) { empty<<<sms, 128, 0, t.st>>>(none); });
        row("empty, one CTA of 128 threads an SM (the floor)", floor_us, floor_us);
        row("empty, 384 threads and 216 KB of shared memory a CTA", time_queued(t, [&](int) {
                    empty<<<sms, 384, SMEM, t.st>>>(none);
            }), floor_us);
        row("empty, one CTA of 384 threads, 216 KB", time_queued(t, [&](int) {
                    empty<<<1, 384, SMEM, t.st>>>(none);
            }), floor_us);
        row("one thread reads a 64-byte parameter", time_queued(t, [&](int) {
                    param_read<64><<<sms, 384, 0, t.st>>>(Param<64>{});
            }), floor_us);
        row("one thread reads a 4352-byte parameter", time_queued(t, [&](int) {
                    param_read<BIG_PARAM><<<sms, 384, 0, t.st>>>(Param<BIG_PARAM>{});
            }), floor_us);
        row("three dependent reads from the parameter, 216 KB", time_queued(t, [&](int) {
                    chain_param<<<sms, 384, SMEM, t.st>>>(Param<BIG_PARAM>{});
            }), floor_us);
        row("three dependent reads from L2, 216 KB", time_queued(t, [&](int) {
                    chain_mem<<<sms, 384, SMEM, t.st>>>(none);
            }), floor_us);
        row("three dependent reads from DRAM, 216 KB", time_queued(t, [&](int r) {
                    const Small cold = {buf, (unsigned)((r % 60) * (1u << 20))};
                    chain_mem<<<sms, 384, SMEM, t.st>>>(cold);
            }), floor_us);
        row("16 mbarriers set up and a CTA barrier, 216 KB", time_queued(t, [&](int) {
                    prologue<<<sms, 384, SMEM, t.st>>>(none);
            }), floor_us);
        if (prop.major >= 9) { /* clusters: sm_90 on */
                cudaLaunchAttribute at[1];
                at[0].id = cudaLaunchAttributeClusterDimension;
                at[0].val.clusterDim.x = 2;
                at[0].val.clusterDim.y = 1;
                at[0].val.clusterDim.z = 1;
                cudaLaunchConfig_t cfg = {};
                cfg.gridDim = dim3(sms & ~1);
                cfg.blockDim = dim3(384);
                cfg.dynamicSmemBytes = SMEM;
                cfg.stream = t.st;
                cfg.attrs = at;
                cfg.numAttrs = 1;
                row("the same in clusters of two CTAs", time_queued(t, [&](int) {
                            FL_CK(cudaLaunchKernelEx(&cfg, prologue, none));
                    }), floor_us);
        }
        cublasHandle_t h;
        if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cublasSetStream(h, t.st) != CUBLAS_STATUS_SUCCESS) {
                fprintf(stderr, "gemmbench floor: cuBLAS could not start\n");
                return 1;
        }
        void *ws;
        const size_t wsb = 32u << 20;
        FL_CK(cudaMalloc(&ws, wsb));
        if (cublasSetWorkspace(h, ws, wsb) != CUBLAS_STATUS_SUCCESS) {
                fprintf(stderr, "gemmbench floor: cublasSetWorkspace failed\n");
                return 1;
        }
        for (int n : {128, 544, 1024}) {
                char what[64];
                snprintf(what, sizeof what, "cublasGemmEx, one bf16 GEMM of %d^3", n);
                row(what, time_cublas(t, h, n), floor_us);
        }
        cublasDestroy(h);
        FL_CK(cudaFree(ws));
        FL_CK(cudaFree(buf));
        return 0;
}
