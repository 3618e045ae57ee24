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

static __device__ __forceinline__ float hash_val(uint64_t i, uint64_t seed)
{
        uint64_t x = i * 0x9e3779b97f4a7c15ull + seed;
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 31;
        float f = (float)(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
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

extern "C" int bench_fill(void *p, size_t n, int dtype, uint64_t seed)
{
        if (n == 0)
                return 0;
        const int grid = 1024, block = 256;
        if (dtype == 0)
                fill_kernel<float><<<grid, block>>>((float *)p, n, seed);
        else if (dtype == 1)
                fill_kernel<__half><<<grid, block>>>((__half *)p, n, seed);
        else
                fill_kernel<__nv_bfloat16><<<grid, block>>>((__nv_bfloat16 *)p, n, seed);
        return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
