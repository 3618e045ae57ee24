/*
 * probe.h - what the probes in scripts/ (launch-cost.cu, launch-probe.cu,
 * param-read.cu, post-probe.cu, ring-probe.cu, signal-probe.cu,
 * ipc-close-probe.cu, and the C client register-loop.c) share: a check of
 * every CUDA call, their set-up (pinned memory both sides see, a stream), a
 * monotonic clock, and the percentile line each prints for a series of
 * round trips. Header-only: each probe still builds with one nvcc command.
 */
#ifndef GEMMD_PROBE_H
#define GEMMD_PROBE_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                                    \
        do {                                                                                     \
                cudaError_t e_ = (x);                                                            \
                if (e_ != cudaSuccess) {                                                         \
                        fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
                        exit(1);                                                                 \
                }                                                                                \
        } while (0)

/* n bytes of pinned host memory mapped into the device's address space
 * (the same address there), zeroed. */
static inline void *mapped_zeroed(size_t n)
{
        void *p;

        CK(cudaHostAlloc(&p, n, cudaHostAllocMapped));
        memset(p, 0, n);
        return p;
}

/* A stream that does not wait on the legacy default stream. */
static inline cudaStream_t probe_stream(void)
{
        cudaStream_t st;

        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        return st;
}

static inline double now_us(void)
{
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static inline int cmpd(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

/* Sorts the n values in t and returns their median. */
static inline double median(double *t, int n)
{
        qsort(t, n, sizeof *t, cmpd);
        return t[n / 2];
}

/* Sorts the n values in t and gives their p50, p90 and p99 in p. */
static inline void percentiles(double *t, int n, double p[3])
{
        qsort(t, n, sizeof *t, cmpd);
        p[0] = t[n / 2];
        p[1] = t[n * 9 / 10];
        p[2] = t[n * 99 / 100];
}

/* Prints the p50, p90 and p99 of the n round trips in t (us), sorting t. */
static inline void report(const char *name, double *t, int n)
{
        double p[3];

        percentiles(t, n, p);
        printf("%-28s p50 %6.1f us  p90 %6.1f us  p99 %6.1f us\n", name, p[0], p[1], p[2]);
}

#endif
