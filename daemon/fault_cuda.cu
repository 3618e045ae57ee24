/*
 * fault_cuda.cu - a kernel that fails on purpose, for the tests of the CUDA
 * backend's recovery. The daemon calls it only when built with
 * GEMMD_FAULT_INJECTION (see daemon/module.mk).
 */
#include <cuda_runtime.h>
#include <errno.h>

/* Writes through a null-page pointer: an illegal address, which leaves the
 * context with a sticky error, the worst a kernel can do. */
__global__ void fault_kernel(volatile int *p)
{
        *p = 1;
}

extern "C" int cuda_debug_fault(void *stream)
{
        fault_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((volatile int *)16);
        return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
