/*
 * ring-probe.cu - what a resident kernel fed through host-mapped memory
 * would save over gemmd's launch per group, as the round trip a lone small
 * group sees. The host posts a group (a sequence number and a 1 KB plan in
 * pinned, mapped memory) and spins until the device reports it done; the
 * device work itself is trivial (each CTA sums the plan), so the figures
 * are the cost of getting work onto the SMs and the answer back.
 *
 *   launch        a fresh kernel per group, the plan as a kernel parameter,
 *                 the host spinning on cudaEventQuery (gemmd today)
 *   ring-1        one resident CTA polls the ring, reads the plan from host
 *                 memory, writes done back to host memory
 *   ring-all      a resident CTA per SM (as gemmd's kernels run): CTA 0
 *                 polls the ring, copies the plan to device memory and
 *                 publishes the sequence number there; every CTA reads the
 *                 copy, the last to finish (an atomic count) writes done
 *                 back to host memory
 *
 *   nvcc -O2 -arch=sm_90a -o ring-probe scripts/ring-probe.cu && ./ring-probe
 */
#include <stdint.h>
#include <string.h>

#include "probe.h"

#define PLAN_WORDS 256 /* 1 KB */
#define STOP 0xffffffffu

/* Host-mapped: written by the host, read by the device. */
struct ring {
        volatile uint32_t seq; /* the last group posted; STOP ends the kernel */
        uint32_t pad[31];
        uint32_t plan[PLAN_WORDS];
};

/* Host-mapped: written by the device, read by the host. */
struct done {
        volatile uint32_t seq; /* the last group done */
        uint32_t sum;          /* what the group computed, checked by the host */
};

struct Blob {
        uint32_t w[PLAN_WORDS];
};

/* P: volatile where the host or another CTA writes the plan (the ring, CTA
 * 0's copy); plain for a kernel parameter, which a volatile load faults on. */
template <typename P> __device__ uint32_t block_sum(P p)
{
        __shared__ uint32_t s;
        if (threadIdx.x == 0)
                s = 0;
        __syncthreads();
        uint32_t v = 0;
        for (unsigned i = threadIdx.x; i < PLAN_WORDS; i += blockDim.x)
                v += p[i];
        atomicAdd(&s, v);
        __syncthreads();
        return s;
}

__global__ void k_launch(const __grid_constant__ Blob plan, uint32_t seq, done *d)
{
        const uint32_t s = block_sum(plan.w);
        if (threadIdx.x == 0) {
                d->sum = s;
                __threadfence_system();
                d->seq = seq;
        }
}

/* Device memory of the resident kernel: the sequence number CTA 0 saw, how
 * many CTAs finished the group and their sums, and CTA 0's copy of the plan. */
struct shared_state {
        volatile uint32_t seq;
        uint32_t finished;
        uint32_t sum;
        alignas(16) uint32_t plan[PLAN_WORDS]; /* CTA 0's copy of the ring's plan (uint4 stores) */
};

__global__ void k_resident(const ring *r, done *d, shared_state *st)
{
        __shared__ uint32_t s_seq;
        uint32_t last = 0;
        for (;;) {
                if (threadIdx.x == 0) {
                        uint32_t q;
                        if (blockIdx.x == 0) {
                                while ((q = r->seq) == last) /* poll host memory */
                                        ;
                                __threadfence();
                        } else {
                                while ((q = st->seq) == last)
                                        ;
                                __threadfence();
                        }
                        s_seq = q;
                }
                __syncthreads();
                if (blockIdx.x == 0 && gridDim.x > 1) {
                        /* CTA 0 copies the plan to device memory, then
                         * tells the others. */
                        if (s_seq != STOP)
                                for (unsigned i = threadIdx.x; i < PLAN_WORDS / 4; i += blockDim.x)
                                        ((uint4 *)st->plan)[i] = __ldcv((const uint4 *)r->plan + i);
                        __threadfence();
                        __syncthreads();
                        if (threadIdx.x == 0)
                                st->seq = s_seq;
                }
                __syncthreads();
                const uint32_t q = s_seq;
                if (q == STOP)
                        return;
                const uint32_t s = block_sum(gridDim.x > 1 ? (const volatile uint32_t *)st->plan : r->plan);
                if (threadIdx.x == 0) {
                        atomicAdd(&st->sum, s);
                        __threadfence();
                        if (atomicAdd(&st->finished, 1u) == gridDim.x - 1) {
                                d->sum = atomicExch(&st->sum, 0u);
                                st->finished = 0;
                                __threadfence_system();
                                d->seq = q;
                        }
                }
                last = q;
                __syncthreads();
        }
}

enum { REPS = 2000, WARM = 200 };

static uint32_t fill(uint32_t *plan, uint32_t seq)
{
        uint32_t s = 0;
        for (int i = 0; i < PLAN_WORDS; i++) {
                plan[i] = seq * 2654435761u + (uint32_t)i;
                s += plan[i];
        }
        return s;
}

static void check(const done *d, uint32_t want)
{
        if (d->sum != want) { /* each CTA's sum of the plan, added up */
                fprintf(stderr, "ring-probe: wrong sum %u, want %u\n", d->sum, want);
                exit(1);
        }
}

static void run_launch(done *d, cudaStream_t st)
{
        static double t[REPS];
        static Blob b;
        cudaEvent_t ev;
        CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        for (int i = 0; i < REPS + WARM; i++) {
                const uint32_t seq = (uint32_t)i + 1, want = fill(b.w, seq);
                const double t0 = now_us();
                k_launch<<<1, 128, 0, st>>>(b, seq, d);
                CK(cudaGetLastError());
                CK(cudaEventRecord(ev, st));
                cudaError_t e;
                while ((e = cudaEventQuery(ev)) == cudaErrorNotReady)
                        ;
                CK(e);
                if (i >= WARM)
                        t[i - WARM] = now_us() - t0;
                check(d, want);
        }
        CK(cudaEventDestroy(ev));
        report("launch", t, REPS);
}

static void run_ring(const char *name, unsigned ctas, ring *r, done *d, shared_state *sst, cudaStream_t st)
{
        static double t[REPS];
        r->seq = 0;
        d->seq = 0;
        CK(cudaMemsetAsync(sst, 0, sizeof *sst, st)); /* ordered before the kernel */
        CK(cudaStreamSynchronize(st));
        k_resident<<<ctas, 128, 0, st>>>(r, d, sst);
        CK(cudaGetLastError());
        /* A launch may wait in the driver's queue until something flushes
         * it; nothing else will while the host spins on mapped memory. */
        if (cudaStreamQuery(st) == cudaSuccess) {
                fprintf(stderr, "ring-probe: the resident kernel ended at once\n");
                exit(1);
        }
        for (int i = 0; i < REPS + WARM; i++) {
                const uint32_t seq = (uint32_t)i + 1, want = fill(r->plan, seq);
                const double t0 = now_us();
                __atomic_thread_fence(__ATOMIC_SEQ_CST); /* the plan before the sequence number */
                r->seq = seq;
                for (long spins = 0; d->seq != seq; spins++)
                        if (spins == 100000000) {
                                fprintf(stderr, "ring-probe: %s: group %u not done\n", name, seq);
                                exit(1);
                        }
                if (i >= WARM)
                        t[i - WARM] = now_us() - t0;
                check(d, want * ctas);
        }
        r->seq = STOP;
        CK(cudaStreamSynchronize(st));
        report(name, t, REPS);
}

int main(void)
{
        setvbuf(stdout, NULL, _IOLBF, 0);
        cudaDeviceProp p;
        CK(cudaGetDeviceProperties(&p, 0));
        ring *r = (ring *)mapped_zeroed(sizeof *r);
        done *d = (done *)mapped_zeroed(sizeof *d);
        shared_state *sst;
        CK(cudaMalloc((void **)&sst, sizeof *sst));
        cudaStream_t st = probe_stream();
        printf("# %s, %d SMs; a lone group's round trip, host to done, %d runs after %d warm-ups\n", p.name,
               p.multiProcessorCount, REPS, WARM);
        for (int round = 0; round < 2; round++) {
                run_launch(d, st);
                run_ring("ring-1", 1, r, d, sst, st);
                run_ring("ring-all", (unsigned)p.multiProcessorCount, r, d, sst, st);
        }
        return 0;
}
