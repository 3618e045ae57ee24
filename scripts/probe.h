/*
 * probe.h - what the probes in scripts/ (launch-probe.cu, ring-probe.cu)
 * share: a check of every CUDA call, a monotonic clock, and the percentile
 * line each prints for a series of round trips. Header-only: each probe
 * still builds with one nvcc command.
 */
#ifndef GEMMD_PROBE_H
#define GEMMD_PROBE_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x)                                                                                    \
        do {                                                                                     \
                cudaError_t e_ = (x);                                                            \
                if (e_ != cudaSuccess) {                                                         \
                        fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
                        exit(1);                                                                 \
                }                                                                                \
        } while (0)

static double now_us(void)
{
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmpd(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

/* Sorts the n values in t and returns their median. */
static double median(double *t, int n)
{
        qsort(t, n, sizeof *t, cmpd);
        return t[n / 2];
}

/* Sorts the n round trips in t (us) and prints their p50, p90 and p99. */
static void report(const char *name, double *t, int n)
{
        qsort(t, n, sizeof *t, cmpd);
        printf("%-28s p50 %6.1f us  p90 %6.1f us  p99 %6.1f us\n", name, t[n / 2], t[n * 9 / 10], t[n * 99 / 100]);
}

#endif
