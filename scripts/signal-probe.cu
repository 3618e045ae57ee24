/*
 * signal-probe.cu - how fast a kernel that already runs learns of new work,
 * by the way the host tells it: the resident kernel's way (the host stores
 * into pinned memory, the kernel polls it over PCIe) against ways that put
 * the news in device memory, which the kernel polls without crossing PCIe:
 * a stream memory operation (cuStreamWriteValue64, done by the GPU's front
 * end on a stream of its own while the kernel runs) or an 8-byte copy.
 * One CTA of 96 threads polls, as a dispatcher does; on news it reads
 * `bytes` of launch data from pinned memory (0: none), checks their sum,
 * and stores the seq back into pinned memory, which the host spins on.
 * Each way runs beside an idle GPU and beside a kernel that keeps every
 * other SM busy with arithmetic, as the resident kernel's GEMMs do.
 * Printed: the host's round trip and the time its call took (the driver
 * call, for the ways that make one).
 *
 *   nvcc -O2 -std=c++17 -arch=sm_90a -o signal-probe scripts/signal-probe.cu && ./signal-probe
 */
#include <cuda.h>
#include <stdint.h>
#include <string.h>

#include "probe.h"

#define MAX_BYTES 4096
#define PER ((MAX_BYTES / 16 + 95) / 96)
#define STOP 0xffffffffffffffffull

/* DATA: the launch data copied into device memory, then a memop, on one
 * stream; the kernel reads it there instead of over PCIe. */
enum way { PINNED, MEMOP, COPY, DATA, NWAYS };
static const char *way_name[NWAYS] = {"pinned poll", "stream memop", "8-byte copy", "copy + memop"};

struct shared_host {
        uint64_t seq;   /* PINNED: the news */
        uint64_t done;  /* the kernel's answer */
        uint32_t bytes; /* launch data to read after the news */
        uint32_t sum;
        uint64_t src[64]; /* COPY: the values copied, one per post in turn */
        uint4 data[MAX_BYTES / 16];
};

__device__ __forceinline__ uint64_t ld_sys(const uint64_t *p)
{
        uint64_t v;
        asm volatile("ld.relaxed.sys.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
        return v;
}

/* Waits for each seq at *flag (pinned or device memory), reads the launch
 * data, answers. */
__global__ void k_poll(shared_host *h, const uint64_t *flag, const uint4 *data)
{
        __shared__ uint64_t s_seq;
        __shared__ uint32_t s_sum;
        const int t = threadIdx.x;
        for (uint64_t last = 0;;) {
                if (t == 0) {
                        uint64_t v;
                        while ((v = ld_sys(flag)) == last)
                                ;
                        asm volatile("fence.acq_rel.sys;\n" ::: "memory");
                        s_seq = v;
                        s_sum = 0;
                }
                __syncthreads();
                const uint64_t seq = s_seq;
                if (seq == STOP)
                        return;
                const uint32_t n = *(volatile const uint32_t *)&h->bytes / 16;
                uint4 v[PER];
#pragma unroll
                for (int u = 0; u < PER; u++)
                        if (t + u * 96 < (int)n)
                                v[u] = __ldcv(data + t + u * 96);
                uint32_t s = 0;
#pragma unroll
                for (int u = 0; u < PER; u++)
                        if (t + u * 96 < (int)n)
                                s += v[u].x + v[u].y + v[u].z + v[u].w;
                atomicAdd(&s_sum, s);
                __syncthreads();
                if (t == 0) {
                        *(volatile uint32_t *)&h->sum = s_sum;
                        __threadfence_system();
                        asm volatile("st.release.sys.global.u64 [%0], %1;\n" ::"l"(&h->done), "l"(seq) : "memory");
                }
                last = seq;
        }
}

/* The other SMs' load: multiply-adds until *stop, so that the GPU is at
 * work, as it is under the resident kernel. */
__global__ void k_load(float *out, const volatile int *stop)
{
        __shared__ int s_stop;
        float x = threadIdx.x, y = 1.0f;
        for (;;) {
                if (threadIdx.x == 0)
                        s_stop = *stop; /* one read over PCIe a CTA every ~100 us */
                __syncthreads();
                if (s_stop)
                        break;
                for (int i = 0; i < 65536; i++)
                        x = fmaf(x, 0.999f, y);
                __syncthreads();
        }
        if (x == 12345.0f)
                out[threadIdx.x] = x;
}

typedef CUresult (*write_value_fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
static write_value_fn write_value;

enum { REPS = 3000, WARM = 300 };

static void run(shared_host *h, uint64_t *dflag, uint4 *ddata, cudaStream_t kst, cudaStream_t sst, enum way w, uint32_t bytes,
                const char *load)
{
        static double rt[REPS], call[REPS];
        const uint64_t *flag = w == PINNED ? &h->seq : dflag;
        h->seq = 0;
        h->done = 0;
        CK(cudaMemsetAsync(dflag, 0, 8, sst));
        CK(cudaStreamSynchronize(sst));
        k_poll<<<1, 96, 0, kst>>>(h, flag, w == DATA ? ddata : h->data);
        CK(cudaGetLastError());
        for (int i = 0; i < REPS + WARM; i++) {
                const uint64_t seq = (uint64_t)i + 1;
                uint32_t want = 0;
                for (uint32_t j = 0; j < bytes / 4; j++) {
                        const uint32_t x = (uint32_t)seq * 2654435761u + j;
                        ((uint32_t *)h->data)[j] = x;
                        want += x;
                }
                h->bytes = bytes;
                __atomic_thread_fence(__ATOMIC_SEQ_CST);
                const double t0 = now_us();
                if (w == PINNED) {
                        __atomic_store_n(&h->seq, seq, __ATOMIC_RELEASE);
                } else if (w == MEMOP || w == DATA) {
                        if (w == DATA && bytes)
                                CK(cudaMemcpyAsync(ddata, h->data, bytes, cudaMemcpyHostToDevice, sst));
                        if (write_value((CUstream)sst, (CUdeviceptr)(uintptr_t)dflag, seq, 0) != CUDA_SUCCESS) {
                                fprintf(stderr, "signal-probe: cuStreamWriteValue64 failed\n");
                                exit(1);
                        }
                } else {
                        uint64_t *src = &h->src[seq % 64];
                        *src = seq;
                        CK(cudaMemcpyAsync(dflag, src, 8, cudaMemcpyHostToDevice, sst));
                }
                const double tc = now_us();
                for (long spins = 0; __atomic_load_n(&h->done, __ATOMIC_ACQUIRE) != seq; spins++)
                        if (spins == 400000000) {
                                fprintf(stderr, "signal-probe: %s: post %llu not answered\n", way_name[w],
                                        (unsigned long long)seq);
                                exit(1);
                        }
                const double t1 = now_us();
                if (h->sum != want) {
                        fprintf(stderr, "signal-probe: wrong sum %u, want %u\n", h->sum, want);
                        exit(1);
                }
                if (i >= WARM) {
                        rt[i - WARM] = t1 - t0;
                        call[i - WARM] = tc - t0;
                }
        }
        if (w == PINNED)
                __atomic_store_n(&h->seq, STOP, __ATOMIC_RELEASE);
        else if (write_value((CUstream)sst, (CUdeviceptr)(uintptr_t)dflag, STOP, 0) != CUDA_SUCCESS)
                exit(1);
        CK(cudaStreamSynchronize(kst));
        double p[3];
        percentiles(rt, REPS, p);
        printf("%-12s %-5s %4u B: round trip p50 %5.2f us  p90 %5.2f  p99 %5.2f; host call p50 %5.2f us\n",
               way_name[w], load, bytes, p[0], p[1], p[2], median(call, REPS));
}

int main(void)
{
        setvbuf(stdout, NULL, _IOLBF, 0);
        cudaDeviceProp prop;
        CK(cudaGetDeviceProperties(&prop, 0));
        enum cudaDriverEntryPointQueryResult q;
        CK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", (void **)&write_value, 12000, cudaEnableDefault,
                                            &q));
        if (q != cudaDriverEntryPointSuccess) {
                fprintf(stderr, "signal-probe: no cuStreamWriteValue64\n");
                return 1;
        }
        shared_host *h = (shared_host *)mapped_zeroed(sizeof *h);
        int *stop = (int *)mapped_zeroed(sizeof(int));
        uint64_t *dflag;
        uint4 *ddata;
        CK(cudaMalloc((void **)&dflag, 8));
        CK(cudaMalloc((void **)&ddata, MAX_BYTES));
        float *out;
        CK(cudaMalloc((void **)&out, 1024 * sizeof(float)));
        cudaStream_t kst = probe_stream(), sst = probe_stream(), lst = probe_stream();
        printf("# %s: news of a post to a running kernel (one CTA polling), %d runs after %d warm-ups\n", prop.name,
               REPS, WARM);
        static const uint32_t sizes[] = {0, 2048};
        for (int loaded = 0; loaded < 2; loaded++) {
                if (loaded) {
                        *stop = 0;
                        /* A CTA of 1024 threads an SM leaves room for the poller's. */
                        k_load<<<prop.multiProcessorCount - 1, 1024, 0, lst>>>(out, stop);
                        CK(cudaGetLastError());
                }
                for (int w = 0; w < NWAYS; w++)
                        for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
                                run(h, dflag, ddata, kst, sst, (enum way)w, sizes[i], loaded ? "busy" : "idle");
                if (loaded) {
                        *stop = 1;
                        CK(cudaStreamSynchronize(lst));
                }
        }
        return 0;
}
