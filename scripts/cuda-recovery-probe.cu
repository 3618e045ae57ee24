/*
 * cuda-recovery-probe.cu - can a process go on using a GPU after one of its
 * kernels took a sticky error (an illegal address)?
 *
 * gemmd's CUDA worker would like to rebuild its context in place after a
 * device fault. This probe tries the ways CUDA offers, each in a fresh
 * child process: cudaDeviceReset (at once, and 3 s after the fault),
 * cuDevicePrimaryCtxReset, and destroying a private context and creating
 * another. Each child faults, tries its way, then (retrying for 8 s, in
 * case the driver is still tearing the old context down) allocates, runs
 * a kernel and copies back. Build and run on a GPU machine:
 *
 *   nvcc -O2 -arch=native scripts/cuda-recovery-probe.cu -o probe -lcuda && ./probe
 *
 * On the H100 with driver 580.159.04 and CUDA 13.0 every way failed (output
 * in bench/results/cuda-recovery-probe.txt): after the fault, the process
 * gets "busy or unavailable" or error 700 from every later call, however
 * long it waits. That is why gemmd drives each GPU from a device process
 * of its own and replaces that process after such a fault (daemon/devproc.h).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* How long each way retries before it gives up. */
#define RETRY_MS 8000

__global__ void bad(int *p) { p[threadIdx.x] = 1; }
__global__ void good(int *p) { p[threadIdx.x] = 7; }

/* Allocates, runs a kernel and reads its result back: 0 when it all works. */
static int works(const char *tag)
{
        int *d = NULL, h[32] = {0};
        cudaError_t e = cudaMalloc(&d, sizeof(h));

        /* The driver may still be tearing the faulted context down: retry
         * for a while before calling the process unusable. */
        for (int ms = 0; e != cudaSuccess && ms < RETRY_MS; ms += 50) {
                usleep(50000);
                cudaGetLastError();
                e = cudaMalloc(&d, sizeof(h));
                if (e == cudaSuccess)
                        printf("%s: cudaMalloc works after %d ms\n", tag, ms + 50);
        }
        if (e != cudaSuccess) {
                printf("%s: cudaMalloc after the fault: %s\n", tag, cudaGetErrorString(e));
                return 1;
        }
        good<<<1, 32>>>(d);
        e = cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
        printf("%s: after recovery: %s, h[0] = %d\n", tag, cudaGetErrorString(e), h[0]);
        return e != cudaSuccess || h[0] != 7;
}

static void fault(void)
{
        bad<<<1, 32>>>((int *)0x10);
        printf("fault: %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
}

static int runtime_reset(void)
{
        cudaFree(0);
        fault();
        printf("cudaDeviceReset: %s\n", cudaGetErrorString(cudaDeviceReset()));
        cudaGetLastError();
        return works("cudaDeviceReset");
}

/* The same, after waiting for the driver to finish with the fault. */
static int runtime_reset_late(void)
{
        cudaFree(0);
        fault();
        sleep(3);
        printf("cudaDeviceReset 3 s later: %s\n", cudaGetErrorString(cudaDeviceReset()));
        cudaGetLastError();
        return works("cudaDeviceReset 3 s later");
}

static int primary_reset(void)
{
        cudaFree(0);
        fault();
        printf("cuDevicePrimaryCtxReset: %d\n", (int)cuDevicePrimaryCtxReset(0));
        cudaGetLastError();
        return works("cuDevicePrimaryCtxReset");
}

static int new_context(void)
{
        CUdevice dev;
        CUcontext c1, c2;
        CUdeviceptr p;

        cuInit(0);
        cuDeviceGet(&dev, 0);
        printf("cuCtxCreate: %d\n", (int)cuCtxCreate(&c1, NULL, 0, dev));
        fault();
        printf("cuCtxDestroy: %d\n", (int)cuCtxDestroy(c1));
        CUresult r = cuCtxCreate(&c2, NULL, 0, dev);

        for (int ms = 0; r != CUDA_SUCCESS && ms < RETRY_MS; ms += 50) {
                usleep(50000);
                r = cuCtxCreate(&c2, NULL, 0, dev);
        }
        printf("cuCtxCreate again: %d\n", (int)r);
        if (r == CUDA_SUCCESS)
                r = cuMemAlloc(&p, 128);
        if (r == CUDA_SUCCESS)
                r = cuMemsetD32(p, 5, 32);
        if (r == CUDA_SUCCESS)
                r = cuCtxSynchronize();
        printf("new context: %s (%d)\n", r == CUDA_SUCCESS ? "works" : "fails", (int)r);
        return r != CUDA_SUCCESS;
}

int main(void)
{
        int (*ways[])(void) = {runtime_reset, runtime_reset_late, primary_reset, new_context};
        const int nways = (int)(sizeof(ways) / sizeof(ways[0]));
        int usable = 0;

        for (int i = 0; i < nways; i++) {
                pid_t pid = fork();
                int st = 0;

                if (pid == 0)
                        exit(ways[i]());
                waitpid(pid, &st, 0);
                usable += WIFEXITED(st) && WEXITSTATUS(st) == 0;
        }
        printf("%d of %d ways leave the process able to use the GPU\n", usable, nways);
        return 0;
}
