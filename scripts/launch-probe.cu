/*
 * launch-probe.cu - what each step of gemmd's per-group launch path costs on
 * this GPU, as the round trip a lone small group sees: the host enqueues the
 * work and spins on cudaEventQuery until it is done (as gemmd's completion
 * thread does). Each variant runs a trivial 1-CTA kernel that reads its
 * plan, so the figures are launch and copy overheads, not compute.
 *
 *   memcpy+kernel   the plan copied to the device (pinned, async), then the
 *                   kernel reads it (what gemmd does today)
 *   kernel          the kernel alone, plan already on the device
 *   param-2k/8k     the plan passed as a __grid_constant__ kernel parameter
 *   +attr           cudaFuncSetAttribute before the launch (as gemmd does)
 *   +timing events  start and end events with timing (gemmd's collect)
 *
 *   nvcc -O2 -arch=sm_90a -o launch-probe scripts/launch-probe.cu && ./launch-probe
 */
#include <string.h>

#include "probe.h"

template <int N> struct Blob {
        unsigned char b[N];
};

__global__ void k_ptr(const unsigned *plan, unsigned n, unsigned *out)
{
        unsigned s = 0;
        for (unsigned i = threadIdx.x; i < n; i += blockDim.x)
                s += plan[i];
        atomicAdd(out, s);
}

template <int N> __global__ void k_param(const __grid_constant__ Blob<N> plan, unsigned n, unsigned *out)
{
        const unsigned *p = (const unsigned *)plan.b;
        unsigned s = 0;
        for (unsigned i = threadIdx.x; i < n; i += blockDim.x)
                s += p[i];
        atomicAdd(out, s);
}

enum { MEMCPY = 1, PARAM2K = 2, PARAM8K = 4, ATTR = 8, TIMING = 16 };

static void run(const char *name, int flags, cudaStream_t st, unsigned *h_plan, unsigned *d_plan, unsigned *d_out,
                unsigned plan_bytes)
{
        const int reps = 2000, warm = 200;
        static double t[2000];
        cudaEvent_t e0, e1;
        unsigned n = plan_bytes / 4;
        CK(cudaEventCreateWithFlags(&e0, (flags & TIMING) ? 0 : cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&e1, (flags & TIMING) ? 0 : cudaEventDisableTiming));
        static Blob<2048> b2;
        static Blob<8192> b8;
        for (int i = 0; i < reps + warm; i++) {
                double t0 = now_us();
                if (flags & TIMING)
                        CK(cudaEventRecord(e0, st));
                if (flags & MEMCPY)
                        CK(cudaMemcpyAsync(d_plan, h_plan, plan_bytes, cudaMemcpyHostToDevice, st));
                if (flags & ATTR)
                        CK(cudaFuncSetAttribute(k_ptr, cudaFuncAttributeMaxDynamicSharedMemorySize, 0));
                if (flags & PARAM2K) {
                        memcpy(b2.b, h_plan, plan_bytes);
                        k_param<2048><<<1, 128, 0, st>>>(b2, n, d_out);
                } else if (flags & PARAM8K) {
                        memcpy(b8.b, h_plan, plan_bytes);
                        k_param<8192><<<1, 128, 0, st>>>(b8, n, d_out);
                } else {
                        k_ptr<<<1, 128, 0, st>>>(d_plan, n, d_out);
                }
                CK(cudaGetLastError());
                CK(cudaEventRecord(e1, st));
                while (cudaEventQuery(e1) == cudaErrorNotReady)
                        ;
                if (i >= warm)
                        t[i - warm] = now_us() - t0;
        }
        report(name, t, reps);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
}

int main(void)
{
        cudaStream_t st;
        unsigned *h_plan, *d_plan, *d_out;
        const unsigned bytes = 1024;
        cudaDeviceProp prop;
        CK(cudaGetDeviceProperties(&prop, 0));
        printf("# %s; a 1-CTA kernel reading a %u-byte plan, round trip to cudaEventQuery done, 2000 runs\n",
               prop.name, bytes);
        st = probe_stream();
        CK(cudaMallocHost((void **)&h_plan, 8192));
        CK(cudaMalloc((void **)&d_plan, 8192));
        CK(cudaMalloc((void **)&d_out, 4));
        for (unsigned i = 0; i < 2048; i++)
                h_plan[i] = i;
        run("kernel", 0, st, h_plan, d_plan, d_out, bytes);
        run("memcpy+kernel", MEMCPY, st, h_plan, d_plan, d_out, bytes);
        run("memcpy+attr+kernel+timing", MEMCPY | ATTR | TIMING, st, h_plan, d_plan, d_out, bytes);
        run("param-2k", PARAM2K, st, h_plan, d_plan, d_out, bytes);
        run("param-8k", PARAM8K, st, h_plan, d_plan, d_out, bytes);
        run("param-8k+timing", PARAM8K | TIMING, st, h_plan, d_plan, d_out, bytes);
        run("kernel+timing", TIMING, st, h_plan, d_plan, d_out, bytes);
        run("kernel", 0, st, h_plan, d_plan, d_out, bytes);
        run("memcpy+kernel", MEMCPY, st, h_plan, d_plan, d_out, bytes);
        return 0;
}
