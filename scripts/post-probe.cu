/*
 * post-probe.cu - what the resident kernel's hand-off costs by the size of
 * a post, as daemon/cuda_resident.c and res_dispatch (wgmma_gemm.cuh) make
 * it: the host writes N bytes of launch data and then a sequence number
 * into pinned memory; 96 threads of one CTA poll the number, then read the
 * N bytes all at once (each thread up to PER 16-byte vectors in flight),
 * copy them to device memory and write a done word back to pinned memory,
 * which the host spins on. Printed per size: the host's round trip, and on
 * the device the time from the number seen to the data in hand (the
 * resident kernel's "post seen to handed over" is this and a fence).
 * "poll" modes: sleep = __nanosleep(64) between polls (gemmd's), spin = none.
 *
 *   nvcc -O2 -arch=sm_90a -o post-probe scripts/post-probe.cu && ./post-probe
 */
#include <stdint.h>
#include <string.h>

#include "probe.h"

#define MAX_BYTES 4096
#define PER (MAX_BYTES / 16 + 95) / 96
#define STOP 0xffffffffffffffffull

struct post {
        uint64_t seq; /* written last; STOP ends the kernel */
        uint32_t bytes, pad[29];
        uint4 data[MAX_BYTES / 16];
};

struct done {
        uint64_t seq, t_seen, t_read; /* globaltimer, ns */
        uint32_t sum, pad;
};

__global__ void k_dispatch(const post *p, done *d, uint4 *dev, int sleep)
{
        __shared__ uint64_t s_seq;
        __shared__ uint64_t s_seen;
        const int t = threadIdx.x;
        for (uint64_t last = 0;;) {
                if (t == 0) {
                        uint64_t v;
                        while ((v = *(volatile const uint64_t *)&p->seq) == last)
                                if (sleep)
                                        __nanosleep(64);
                        asm volatile("fence.acq_rel.sys;\n" ::: "memory");
                        s_seq = v;
                        asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(s_seen));
                }
                __syncthreads();
                const uint64_t seq = s_seq;
                if (seq == STOP)
                        return;
                const uint32_t n = *(volatile const uint32_t *)&p->bytes / 16;
                uint4 v[PER];
#pragma unroll
                for (int u = 0; u < PER; u++)
                        if (t + u * 96 < (int)n)
                                v[u] = __ldcv(p->data + t + u * 96);
                uint32_t s = 0;
#pragma unroll
                for (int u = 0; u < PER; u++)
                        if (t + u * 96 < (int)n) {
                                dev[t + u * 96] = v[u];
                                s += v[u].x + v[u].y + v[u].z + v[u].w;
                        }
                __shared__ uint32_t s_sum;
                if (t == 0)
                        s_sum = 0;
                __syncthreads();
                atomicAdd(&s_sum, s);
                __syncthreads();
                if (t == 0) {
                        uint64_t now;
                        asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(now));
                        d->t_seen = s_seen;
                        d->t_read = now;
                        d->sum = s_sum;
                        __threadfence_system();
                        *(volatile uint64_t *)&d->seq = seq;
                }
                last = seq;
        }
}

enum { REPS = 3000, WARM = 300 };

static void run(post *p, done *d, uint4 *dev, cudaStream_t st, uint32_t bytes, int sleep)
{
        static double rt[REPS], dv[REPS];
        p->seq = 0;
        d->seq = 0;
        CK(cudaStreamSynchronize(st));
        k_dispatch<<<1, 96, 0, st>>>(p, d, dev, sleep);
        CK(cudaGetLastError());
        if (cudaStreamQuery(st) == cudaSuccess) { /* flushes the launch too */
                fprintf(stderr, "post-probe: the kernel ended at once\n");
                exit(1);
        }
        for (int i = 0; i < REPS + WARM; i++) {
                const uint64_t seq = (uint64_t)i + 1;
                uint32_t want = 0;
                for (uint32_t w = 0; w < bytes / 4; w++) {
                        const uint32_t x = (uint32_t)seq * 2654435761u + w;
                        ((uint32_t *)p->data)[w] = x;
                        want += x;
                }
                p->bytes = bytes;
                const double t0 = now_us();
                __atomic_store_n(&p->seq, seq, __ATOMIC_RELEASE);
                for (long spins = 0; __atomic_load_n(&d->seq, __ATOMIC_ACQUIRE) != seq; spins++)
                        if (spins == 200000000) {
                                fprintf(stderr, "post-probe: post %llu not done\n", (unsigned long long)seq);
                                exit(1);
                        }
                const double t1 = now_us();
                if (d->sum != want) {
                        fprintf(stderr, "post-probe: wrong sum %u, want %u\n", d->sum, want);
                        exit(1);
                }
                if (i >= WARM) {
                        rt[i - WARM] = t1 - t0;
                        dv[i - WARM] = (double)(d->t_read - d->t_seen) / 1e3;
                }
        }
        __atomic_store_n(&p->seq, STOP, __ATOMIC_RELEASE);
        CK(cudaStreamSynchronize(st));
        double pct[3];
        char name[64];
        snprintf(name, sizeof name, "%4u B, %s", bytes, sleep ? "sleep" : "spin");
        percentiles(rt, REPS, pct);
        printf("%-16s round trip p50 %5.2f us  p90 %5.2f  p99 %5.2f; seen to read p50 %5.2f us\n", name, pct[0],
               pct[1], pct[2], median(dv, REPS));
}

int main(void)
{
        setvbuf(stdout, NULL, _IOLBF, 0);
        cudaDeviceProp prop;
        CK(cudaGetDeviceProperties(&prop, 0));
        post *p = (post *)mapped_zeroed(sizeof *p);
        done *d = (done *)mapped_zeroed(sizeof *d);
        uint4 *dev;
        CK(cudaMalloc((void **)&dev, MAX_BYTES));
        cudaStream_t st = probe_stream();
        printf("# %s: a post of N bytes read by 96 threads after its number, %d runs after %d warm-ups\n", prop.name,
               REPS, WARM);
        static const uint32_t sizes[] = {16, 256, 512, 1024, 2048, 3968};
        for (int round = 0; round < 2; round++)
                for (int sleep = 1; sleep >= 0; sleep--)
                        for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
                                run(p, d, dev, st, sizes[i], sleep);
        return 0;
}
