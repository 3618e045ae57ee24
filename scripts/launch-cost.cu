/*
 * launch-cost.cu - the host time of each CUDA call on gemmd's launch path,
 * one call at a time (the thread's clock around the call alone, the stream
 * drained between calls so that no queue fills), to find what makes a
 * group's launch call cost more than a bare kernel's:
 *
 *   param-64 / param-4352 / param-8k   a 1-CTA kernel whose parameter is
 *                   that many bytes (gemmd's KArgs is 4352)
 *   big-ctas        param-4352 on 132 CTAs of 384 threads and 216 KB of
 *                   dynamic shared memory (gemmd's Hopper kernel's shape)
 *   +querier        the same while another thread spins on cudaEventQuery
 *                   of a finished event (gemmd's completion thread)
 *   +allocs         the same after 2000 device allocations are live
 *   event-record, memcpy-4k     the other calls of the path
 *
 *   nvcc -O2 -arch=sm_90a -o launch-cost scripts/launch-cost.cu -lpthread && ./launch-cost
 */
#include <pthread.h>
#include <atomic>
#include <string.h>

#include "probe.h"

template <int N> struct Blob {
        unsigned char b[N];
};

template <int N> __global__ void k_param(const __grid_constant__ Blob<N> p, unsigned *out)
{
        if (threadIdx.x == 0 && blockIdx.x == 0)
                atomicAdd(out, p.b[N - 1]);
}

enum { REPS = 3000, WARM = 300 };

static std::atomic<int> stop_querier{0};

/* Spins on a finished event, as a completion thread does while it waits. */
static void *querier(void *arg)
{
        cudaEvent_t ev = (cudaEvent_t)arg;
        while (!stop_querier.load())
                (void)cudaEventQuery(ev);
        return NULL;
}

/* Times fn's host call REPS times, draining the stream after each. */
template <typename F> static void host_time(const char *name, cudaStream_t st, F fn)
{
        static double t[REPS];
        for (int i = 0; i < REPS + WARM; i++) {
                const double t0 = now_us();
                fn();
                const double t1 = now_us();
                CK(cudaStreamSynchronize(st));
                if (i >= WARM)
                        t[i - WARM] = t1 - t0;
        }
        report(name, t, REPS);
}

template <int N> static void launch(cudaStream_t st, unsigned *out, int ctas, int threads, int smem)
{
        static Blob<N> b;
        b.b[N - 1]++;
        k_param<N><<<ctas, threads, smem, st>>>(b, out);
        CK(cudaGetLastError());
}

static void launches(const char *tag, cudaStream_t st, unsigned *out, int sms)
{
        char name[64];
        snprintf(name, sizeof name, "param-64%s", tag);
        host_time(name, st, [&] { launch<64>(st, out, 1, 128, 0); });
        snprintf(name, sizeof name, "param-4352%s", tag);
        host_time(name, st, [&] { launch<4352>(st, out, 1, 128, 0); });
        snprintf(name, sizeof name, "param-8k%s", tag);
        host_time(name, st, [&] { launch<8192>(st, out, 1, 128, 0); });
        snprintf(name, sizeof name, "big-ctas%s", tag);
        host_time(name, st, [&] { launch<4352>(st, out, sms, 384, 216 * 1024); });
}

int main(void)
{
        cudaStream_t st;
        cudaDeviceProp prop;
        unsigned *d_out;
        void *h_buf, *d_buf;
        cudaEvent_t ev, done;

        CK(cudaGetDeviceProperties(&prop, 0));
        printf("# %s, %d SMs: host time of one call, us, %d calls after %d warm-ups\n", prop.name,
               prop.multiProcessorCount, REPS, WARM);
        st = probe_stream();
        CK(cudaMalloc((void **)&d_out, 4));
        CK(cudaMallocHost(&h_buf, 4096));
        CK(cudaMalloc(&d_buf, 4096));
        CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
        CK(cudaFuncSetAttribute(k_param<4352>, cudaFuncAttributeMaxDynamicSharedMemorySize, 216 * 1024));

        launches("", st, d_out, prop.multiProcessorCount);
        host_time("event-record", st, [&] { CK(cudaEventRecord(ev, st)); });
        host_time("memcpy-4k", st, [&] { CK(cudaMemcpyAsync(d_buf, h_buf, 4096, cudaMemcpyHostToDevice, st)); });

        CK(cudaEventRecord(done, st));
        CK(cudaStreamSynchronize(st));
        pthread_t q;
        pthread_create(&q, NULL, querier, done);
        launches(" +querier", st, d_out, prop.multiProcessorCount);
        host_time("event-record +querier", st, [&] { CK(cudaEventRecord(ev, st)); });
        stop_querier.store(1);
        pthread_join(q, NULL);

        static void *bufs[2000];
        for (int i = 0; i < 2000; i++)
                CK(cudaMalloc(&bufs[i], 2 << 20));
        launches(" +allocs", st, d_out, prop.multiProcessorCount);
        for (int i = 0; i < 2000; i++)
                CK(cudaFree(bufs[i]));
        return 0;
}
