/*
 * bench_fill.cu - fills device buffers with reproducible random values for
 * gemmbench (uniform in [-1, 1], never zero), on the GPU so that multi-GB
 * working sets cost no host time.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "bench/bench_fill.h"

/* 64 random bits for element i (a splitmix64 step). */
static __device__ __forceinline__ uint64_t hash_bits(uint64_t i, uint64_t seed)
{
        uint64_t x = i * 0x9e3779b97f4a7c15ull + seed;
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebull;
        return x ^ (x >> 31);
}

/* Uniform in [-1, 1), 24 random bits, never 0. */
static __device__ __forceinline__ float hash_val(uint64_t i, uint64_t seed)
{
        float f = (float)(hash_bits(i, seed) >> 40) * (2.0f / 16777216.0f) - 1.0f;
        return f == 0.f ? 0.5f : f;
}

template <typename T> __global__ void fill_kernel(T *p, size_t n, uint64_t seed)
{
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
             i += (size_t)gridDim.x * blockDim.x)
                p[i] = (T)hash_val(i, seed);
}

template <> __global__ void fill_kernel<__nv_bfloat16>(__nv_bfloat16 *p, size_t n, uint64_t seed)
{
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
             i += (size_t)gridDim.x * blockDim.x)
                p[i] = __float2bfloat16_rn(hash_val(i, seed));
}

template <> __global__ void fill_kernel<__half>(__half *p, size_t n, uint64_t seed)
{
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
             i += (size_t)gridDim.x * blockDim.x)
                p[i] = __float2half_rn(hash_val(i, seed));
}

/* f64: all 53 bits random (float-valued inputs would make every product
 * exact, which real data does not). */
__global__ void fill_f64_kernel(double *p, size_t n, uint64_t seed)
{
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
             i += (size_t)gridDim.x * blockDim.x) {
                const double f = (double)(hash_bits(i, seed) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
                p[i] = f == 0.0 ? 0.5 : f;
        }
}

extern "C" int bench_fill(void *p, size_t n, int dtype, uint64_t seed)
{
        if (n == 0)
                return 0;
        const int grid = 1024, block = 256;
        if (dtype == 0)
                fill_kernel<float><<<grid, block>>>((float *)p, n, seed);
        else if (dtype == 1)
                fill_kernel<__half><<<grid, block>>>((__half *)p, n, seed);
        else if (dtype == 3)
                fill_f64_kernel<<<grid, block>>>((double *)p, n, seed);
        else
                fill_kernel<__nv_bfloat16><<<grid, block>>>((__nv_bfloat16 *)p, n, seed);
        return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

__global__ void spin_kernel(uint64_t ns)
{
        uint64_t t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        while (t - t0 < ns);
}

extern "C" int bench_spin(uint32_t us)
{
        spin_kernel<<<1, 1>>>((uint64_t)us * 1000);
        return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

/* One thread per element of C; plain loads (the operands stay in L1/L2:
 * this is a reference, not a benchmark). */
__global__ void ref_f64_kernel(const float *a, const float *b, double *c, uint32_t m, uint32_t n, uint32_t k,
                               int syr2k)
{
        const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y;
        if (i >= m || j >= n)
                return;
        const float *ai = a + (size_t)i * k, *bj = b + (size_t)j * k;
        double s = 0;
        for (uint32_t q = 0; q < k; q++)
                s = fma((double)ai[q], (double)bj[q], s);
        if (syr2k) {
                const float *bi = b + (size_t)i * k, *aj = a + (size_t)j * k;
                for (uint32_t q = 0; q < k; q++)
                        s = fma((double)bi[q], (double)aj[q], s);
        }
        c[i + (size_t)j * m] = s;
}

extern "C" int bench_ref_f64(const float *a, const float *b, double *c, uint32_t m, uint32_t n, uint32_t k,
                             int syr2k)
{
        if (m == 0 || n == 0)
                return 0;
        ref_f64_kernel<<<dim3((m + 127) / 128, n), 128>>>(a, b, c, m, n, k, syr2k);
        return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

/* hi + lo += a * b in double-double: the product exactly (an FMA gives its
 * rounding error), the sum with its rounding error carried in lo. */
__device__ __forceinline__ void dd_fma(double a, double b, double &hi, double &lo)
{
        const double p = a * b, pe = fma(a, b, -p);
        const double t = hi + p, bp = t - hi, se = (hi - (t - bp)) + (p - bp);
        lo += se + pe;
        hi = t + lo;
        lo = lo - (hi - t);
}

/* One thread per element of the sampled columns (j = y * step). */
__global__ void ref_dd_kernel(const double *a, const double *b, double *hi, double *lo, uint32_t m, uint32_t n,
                              uint32_t k, int syr2k, uint32_t step)
{
        const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y, j = y * step;
        if (i >= m || j >= n)
                return;
        const double *ai = a + (size_t)i * k, *bj = b + (size_t)j * k;
        double h = 0, l = 0;
        for (uint32_t q = 0; q < k; q++)
                dd_fma(ai[q], bj[q], h, l);
        if (syr2k) {
                const double *bi = b + (size_t)i * k, *aj = a + (size_t)j * k;
                for (uint32_t q = 0; q < k; q++)
                        dd_fma(bi[q], aj[q], h, l);
        }
        hi[i + (size_t)y * m] = h;
        lo[i + (size_t)y * m] = l;
}

extern "C" int bench_ref_dd(const double *a, const double *b, double *hi, double *lo, uint32_t m, uint32_t n,
                            uint32_t k, int syr2k, uint32_t step)
{
        if (m == 0 || n == 0 || step == 0)
                return 0;
        ref_dd_kernel<<<dim3((m + 127) / 128, (n + step - 1) / step), 128>>>(a, b, hi, lo, m, n, k, syr2k, step);
        return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
