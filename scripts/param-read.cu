/*
 * param-read.cu - what a kernel parameter of each size costs: the host
 * time of the launch call, and on the GPU the time a CTA waits for a chain
 * of dependent reads from the parameter (read through a generic pointer,
 * as the Hopper kernel reads the launch data it carries) against the same
 * chain in device memory. Each launch is 132 CTAs of 384 threads with
 * 216 KB of dynamic shared memory (one a SM, the Hopper kernel's shape);
 * thread 0 of each CTA times its chain with the SM clock.
 *
 *   nvcc -O2 -std=c++17 -arch=sm_90a -o param-read scripts/param-read.cu && ./param-read
 */
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "probe.h"

template <int N> struct Blob {
        alignas(16) unsigned char b[N];
};

/* Follows `hops` dependent words from w[i]; each word is the next index. */
__device__ __forceinline__ uint32_t chain(const uint32_t *w, uint32_t i, int hops)
{
        for (int h = 0; h < hops; h++)
                i = w[i];
        return i;
}

template <int N>
__global__ void k_param(const __grid_constant__ Blob<N> p, uint32_t start, int hops, long long *cyc, uint32_t *sink)
{
        if (threadIdx.x == 0) {
                const long long t0 = clock64();
                const uint32_t i = chain((const uint32_t *)p.b, start, hops);
                const long long t1 = clock64();
                cyc[blockIdx.x] = t1 - t0;
                sink[blockIdx.x] = i;
        }
}

__global__ void k_global(const uint32_t *w, uint32_t start, int hops, long long *cyc, uint32_t *sink)
{
        if (threadIdx.x == 0) {
                const long long t0 = clock64();
                const uint32_t i = chain(w, start, hops);
                const long long t1 = clock64();
                cyc[blockIdx.x] = t1 - t0;
                sink[blockIdx.x] = i;
        }
}

enum { REPS = 400, WARM = 40, SMEM = 216 * 1024, THREADS = 384 };

/* Three hops through words spread over n bytes: at 64 bytes, the middle and
 * near the end (distinct 128-byte lines where n allows). */
static void fill_chain(uint32_t *w, size_t n, uint32_t *start)
{
        const uint32_t nw = (uint32_t)(n / 4);
        const uint32_t a0 = std::min(16u, nw - 1), a1 = nw / 2, a2 = nw > 40 ? nw - 32 : nw - 1, a3 = 0;
        w[a0] = a1;
        w[a1] = a2;
        w[a2] = a3;
        *start = a0;
}

struct Dev {
        long long *cyc;
        uint32_t *sink;
        int sms;
        double ghz;
};

/* Launches fn REPS times (after warm-ups), draining the stream after each;
 * prints the host time of the call, the event-to-event time and the CTAs'
 * median chain time. */
template <typename F> static void series(const char *name, const Dev &d, cudaStream_t st, F fn)
{
        std::vector<double> host, dev, chainus;
        std::vector<long long> c(d.sms);
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        for (int i = 0; i < REPS + WARM; i++) {
                CK(cudaEventRecord(e0, st));
                const double t0 = now_us();
                fn();
                const double t1 = now_us();
                CK(cudaEventRecord(e1, st));
                CK(cudaStreamSynchronize(st));
                float ms = 0;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                CK(cudaMemcpy(c.data(), d.cyc, d.sms * sizeof(long long), cudaMemcpyDeviceToHost));
                if (i < WARM)
                        continue;
                host.push_back(t1 - t0);
                dev.push_back(ms * 1e3);
                for (long long x : c)
                        chainus.push_back(x / (d.ghz * 1e3));
        }
        printf("%-22s launch call %5.2f us   event to event %5.2f us   chain %5.3f us (median of CTAs)\n", name,
               median(host.data(), (int)host.size()), median(dev.data(), (int)dev.size()),
               median(chainus.data(), (int)chainus.size()));
        CK(cudaEventDestroy(e0));
        CK(cudaEventDestroy(e1));
}

template <int N> static void param_series(const Dev &d, cudaStream_t st, int hops)
{
        static Blob<N> b;
        uint32_t start;
        char name[64];
        memset(&b, 0, sizeof b);
        fill_chain((uint32_t *)b.b, N, &start);
        CK(cudaFuncSetAttribute(k_param<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
        snprintf(name, sizeof name, "param %5d B, %d hop%s", N, hops, hops > 1 ? "s" : "");
        series(name, d, st, [&] {
                k_param<N><<<d.sms, THREADS, SMEM, st>>>(b, start, hops, d.cyc, d.sink);
                CK(cudaGetLastError());
        });
}

int main(void)
{
        cudaDeviceProp prop;
        cudaStream_t st;
        Dev d;
        int khz = 0;

        CK(cudaGetDeviceProperties(&prop, 0));
        CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
        d.sms = prop.multiProcessorCount;
        d.ghz = khz / 1e6;
        printf("# %s, %d SMs, SM clock %.3f GHz (the chain's us assume it); medians of %d launches\n", prop.name,
               d.sms, d.ghz, REPS);
        st = probe_stream();
        CK(cudaMalloc((void **)&d.cyc, d.sms * sizeof(long long)));
        CK(cudaMalloc((void **)&d.sink, d.sms * sizeof(uint32_t)));

        for (int hops = 1; hops <= 3; hops += 2) {
                param_series<256>(d, st, hops);
                param_series<1024>(d, st, hops);
                param_series<2048>(d, st, hops);
                param_series<3840>(d, st, hops);
                param_series<4096>(d, st, hops);
                param_series<4352>(d, st, hops);
                param_series<8192>(d, st, hops);
        }
        /* The same chain in device memory (in L2 after the first launch). */
        std::vector<uint32_t> h(4352 / 4, 0);
        uint32_t start, *w;
        fill_chain(h.data(), 4352, &start);
        CK(cudaMalloc((void **)&w, 4352));
        CK(cudaMemcpy(w, h.data(), 4352, cudaMemcpyHostToDevice));
        CK(cudaFuncSetAttribute(k_global, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
        for (int hops = 1; hops <= 3; hops += 2) {
                char name[64];
                snprintf(name, sizeof name, "global, %d hop%s", hops, hops > 1 ? "s" : "");
                series(name, d, st, [&] {
                        k_global<<<d.sms, THREADS, SMEM, st>>>(w, start, hops, d.cyc, d.sink);
                        CK(cudaGetLastError());
                });
        }
        return 0;
}
