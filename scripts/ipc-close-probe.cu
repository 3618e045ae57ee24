/*
 * ipc-close-probe.cu - what closing (and opening) another process's CUDA IPC
 * memory costs the importer's other work: whether cudaIpcCloseMemHandle
 * waits for a kernel that is still running, how long it takes by size, how
 * long the GPU's running kernel is paused meanwhile, and how long another
 * thread's launches and queries are held up.
 *
 *   nvcc -O2 -std=c++17 -arch=sm_90a -o ipc-close-probe scripts/ipc-close-probe.cu -lpthread
 *   ./ipc-close-probe [--churn N] [MiB ...]     (default: 1 16 128 512)
 *
 * The process forks an exporter (which allocates and exports each size and
 * waits) before it touches CUDA itself. For each size the importer opens
 * the handle and closes it three ways: with no kernel running, with a
 * polling kernel running in a non-blocking stream (the resident kernel's
 * situation: if the close waited for it, the close returns only once the
 * watchdog stops the kernel, after 2 s), and with that kernel and a thread
 * launching empty kernels beside the close. With --churn N, N more
 * processes meanwhile come and go one after another, each creating a
 * context, allocating 128 MiB and exiting (as clients joining and
 * leaving do), to see whether the close then waits on them. Every CUDA
 * return code is checked.
 */
#include <atomic>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe.h"

/* Host-mapped state of the polling kernel. */
struct beat {
        volatile uint32_t stop;
        volatile uint64_t beats;   /* loop turns, stored now and then */
        volatile uint64_t max_gap; /* ns: the longest pause between two turns */
        volatile uint32_t done;
};

__global__ void poll_kernel(struct beat *b)
{
        uint64_t last, t, gap = 0, n = 0;

        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(last));
        while (!b->stop) {
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
                if (t - last > gap)
                        gap = t - last;
                last = t;
                if ((++n & 63) == 0)
                        b->beats = n;
        }
        b->max_gap = gap;
        __threadfence_system();
        b->done = 1;
}

__global__ void empty_kernel(void) {}

static struct beat *beat;
static std::atomic<int> beside_on, watchdog_on;
static double beside_max_us;
static uint64_t beside_calls;

/* Stops the polling kernel after 2 s, so that a close that waits for it
 * returns (and says so by its time). */
static void *watchdog(void *arg)
{
        (void)arg;
        const double t0 = now_us();

        while (watchdog_on.load() && now_us() - t0 < 2e6)
                usleep(1000);
        beat->stop = 1;
        return NULL;
}

/* Launches empty kernels on its own stream and queries it, one call at a
 * time, noting the longest call, while beside_on. */
static void *beside(void *arg)
{
        int dev = *(int *)arg;
        cudaStream_t s;

        CK(cudaSetDevice(dev));
        s = probe_stream();
        beside_max_us = 0;
        beside_calls = 0;
        while (beside_on.load()) {
                const double t0 = now_us();

                empty_kernel<<<1, 32, 0, s>>>();
                CK(cudaGetLastError());
                while (cudaStreamQuery(s) == cudaErrorNotReady)
                        ;
                const double d = now_us() - t0;

                if (d > beside_max_us)
                        beside_max_us = d;
                beside_calls++;
        }
        CK(cudaStreamSynchronize(s));
        CK(cudaStreamDestroy(s));
        return NULL;
}

static void exporter(int fd, int nsizes, const size_t *mib)
{
        for (int i = 0; i < nsizes; i++) {
                void *p;
                cudaIpcMemHandle_t h;
                char ack;

                CK(cudaMalloc(&p, mib[i] << 20));
                CK(cudaMemset(p, 0, mib[i] << 20));
                CK(cudaDeviceSynchronize());
                CK(cudaIpcGetMemHandle(&h, p));
                if (write(fd, &h, sizeof(h)) != sizeof(h) || read(fd, &ack, 1) != 1)
                        exit(1);
                CK(cudaFree(p));
        }
        exit(0);
}

/* One close of handle h with the polling kernel running (kernel) and a
 * thread launching beside it (side); prints a line. */
static void trial(int dev, const cudaIpcMemHandle_t *h, size_t mib, int kernel, int side)
{
        cudaStream_t s;
        pthread_t wd, bt;
        void *p;
        double t0, t1, t2;

        s = probe_stream();
        memset((void *)beat, 0, sizeof(*beat));
        if (kernel) {
                poll_kernel<<<1, 1, 0, s>>>(beat);
                CK(cudaGetLastError());
                while (beat->beats == 0)
                        ;
                watchdog_on.store(1);
                pthread_create(&wd, NULL, watchdog, NULL);
        }
        if (side) {
                beside_on.store(1);
                pthread_create(&bt, NULL, beside, &dev);
                usleep(20000);
        }
        t0 = now_us();
        CK(cudaIpcOpenMemHandle(&p, *h, cudaIpcMemLazyEnablePeerAccess));
        t1 = now_us();
        CK(cudaIpcCloseMemHandle(p));
        t2 = now_us();
        int stopped_before = beat->stop;
        if (side) {
                usleep(20000);
                beside_on.store(0);
                pthread_join(bt, NULL);
        }
        if (kernel) {
                watchdog_on.store(0);
                pthread_join(wd, NULL);
                CK(cudaStreamSynchronize(s));
        }
        printf("%6zu MiB  kernel %d  side %d   open %8.3f ms  close %8.3f ms  %s  kernel's longest pause %8.3f ms"
               "  beside: longest launch+query %8.3f ms over %llu\n",
               mib, kernel, side, (t1 - t0) / 1e3, (t2 - t1) / 1e3,
               !kernel ? "                              "
               : stopped_before ? "close WAITED for the kernel  "
                                : "close returned, kernel ran on",
               kernel ? beat->max_gap / 1e6 : 0.0, side ? beside_max_us / 1e3 : 0.0,
               (unsigned long long)beside_calls);
        CK(cudaStreamDestroy(s));
}

/* One process coming and going after another until killed: each sets up
 * a context, allocates and touches 128 MiB, and exits. */
static void churner(void)
{
        for (;;) {
                pid_t c = fork();

                if (c == 0) {
                        void *p;

                        CK(cudaSetDevice(0));
                        CK(cudaMalloc(&p, 128u << 20));
                        CK(cudaMemset(p, 1, 128u << 20));
                        CK(cudaDeviceSynchronize());
                        _exit(0);
                }
                if (c < 0 || waitpid(c, NULL, 0) < 0)
                        _exit(1);
        }
}

int main(int argc, char **argv)
{
        size_t mib[16] = {1, 16, 128, 512};
        int nsizes = 4, sv[2], dev = 0, churn = 0, a = 1;
        pid_t churners[16];

        if (argc > 2 && !strcmp(argv[1], "--churn")) {
                churn = atoi(argv[2]);
                churn = churn < 0 ? 0 : churn > 16 ? 16 : churn;
                a = 3;
        }
        if (argc > a) {
                nsizes = 0;
                for (int i = a; i < argc && nsizes < 16; i++)
                        mib[nsizes++] = strtoull(argv[i], NULL, 10);
        }
        for (int i = 0; i < churn; i++)
                if ((churners[i] = fork()) == 0)
                        churner();
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
                return 1;
        pid_t pid = fork();
        if (pid == 0) {
                close(sv[0]);
                exporter(sv[1], nsizes, mib);
        }
        close(sv[1]);
        CK(cudaSetDevice(dev));
        beat = (struct beat *)mapped_zeroed(sizeof(*beat));
        empty_kernel<<<1, 1>>>();
        CK(cudaDeviceSynchronize());
        for (int i = 0; i < nsizes; i++) {
                cudaIpcMemHandle_t h;
                char ack = 1;

                if (read(sv[0], &h, sizeof(h)) != sizeof(h))
                        return 1;
                for (int rep = 0; rep < (churn ? 8 : 2); rep++) {
                        trial(dev, &h, mib[i], 0, 0);
                        if (churn) /* the close alone, beside the processes */
                                continue;
                        trial(dev, &h, mib[i], 1, 0);
                        trial(dev, &h, mib[i], 1, 1);
                }
                if (write(sv[0], &ack, 1) != 1)
                        return 1;
        }
        int st;
        waitpid(pid, &st, 0);
        for (int i = 0; i < churn; i++) {
                kill(churners[i], SIGKILL);
                waitpid(churners[i], NULL, 0);
        }
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
