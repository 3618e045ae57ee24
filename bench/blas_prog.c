/*
 * blas_prog.c - gemmbench-blas: a program that knows nothing of gemmd. It
 * calls the Fortran BLAS (dgemm_, dsyr2k_, sgemm_) of whatever libblas.so.3
 * the loader gives it, so one binary times the system's CPU BLAS, the gemmd
 * BLAS (LD_LIBRARY_PATH=build/blas) or any other, unchanged. Built with
 * cuBLAS, it also times the same calls made through cuBLAS in this process
 * (operands copied in and out, as a program offloading them itself would),
 * and the PCIe copies alone: the bound a BLAS in host memory cannot beat.
 *
 *   gemmbench-blas [--gemm N[,N...]] [--syr2k N] [--nb NB] [--reps R]
 *                  [--single] [--cublas] [--json]
 *
 * --gemm: square GEMMs C = A B (beta 0) of these orders (default 4096).
 * --syr2k: a blocked sequence like a symmetric tridiagonal reduction's
 *   (dsytrd): for each panel of NB columns, C(j+NB:, j+NB:) -= V W^T + W V^T
 *   on the trailing lower triangle, order N (default 8192, NB 256).
 * --single: sgemm_ and ssyr2k_ instead of the double routines.
 * Each figure is the median of R runs (default 5) after one warm-up; each
 * result is checked at 64 sampled elements against a long double
 * reference, and any error beyond the type's tolerance makes the exit
 * status 1.
 */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"

#ifdef GEMMD_BLAS_CUBLAS
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "bench/kbench.h" /* CK, CB */
#endif

/* The Fortran BLAS as every libblas.so.3 exports it (hidden string
 * lengths after the arguments, as gfortran passes them). */
void dgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k, const double *alpha,
            const double *a, const int *lda, const double *b, const int *ldb, const double *beta, double *c,
            const int *ldc, size_t, size_t);
void sgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k, const float *alpha,
            const float *a, const int *lda, const float *b, const int *ldb, const float *beta, float *c,
            const int *ldc, size_t, size_t);
void dsyr2k_(const char *uplo, const char *tr, const int *n, const int *k, const double *alpha, const double *a,
             const int *lda, const double *b, const int *ldb, const double *beta, double *c, const int *ldc,
             size_t, size_t);
void ssyr2k_(const char *uplo, const char *tr, const int *n, const int *k, const float *alpha, const float *a,
             const int *lda, const float *b, const int *ldb, const float *beta, float *c, const int *ldc,
             size_t, size_t);

#define MAX_SIZES 8
#define SAMPLES 64

struct opts {
        int gemm[MAX_SIZES], ngemm;
        int syr2k, nb, reps, single, cublas, json;
};

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return (x > y) - (x < y);
}

/* Median of n timings (sorts them). */
static double median(double *t, int n)
{
        qsort(t, (size_t)n, sizeof(*t), cmp_double);
        return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* A matrix of `count` elements in [-1, 1), of the run's type. */
static void *random_matrix(size_t count, int single, unsigned *seed)
{
        void *p = malloc(count * (single ? sizeof(float) : sizeof(double)));

        if (!p) {
                fprintf(stderr, "gemmbench-blas: out of memory\n");
                exit(1);
        }
        for (size_t i = 0; i < count; i++) {
                double v = (double)rand_r(seed) / RAND_MAX * 2.0 - 1.0;

                if (single)
                        ((float *)p)[i] = (float)v;
                else
                        ((double *)p)[i] = v;
        }
        return p;
}

static long double elem(const void *p, size_t i, int single)
{
        return single ? (long double)((const float *)p)[i] : (long double)((const double *)p)[i];
}

/* Tolerance on |got - want| for a sum of k products of values in [-1, 1). */
static double tolerance(int k, int single)
{
        return (single ? 1e-5 : 1e-13) * sqrt((double)k) * 4.0;
}

/* One timed GEMM C = A B of order n through the loaded BLAS. */
static void run_gemm(int n, int single, void *a, void *b, void *c)
{
        if (single) {
                const float one = 1.0f, zero = 0.0f;

                sgemm_("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n, 1, 1);
        } else {
                const double one = 1.0, zero = 0.0;

                dgemm_("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n, 1, 1);
        }
}

/* Checks SAMPLES elements of C = A B against long double sums. */
static double check_gemm(int n, int single, const void *a, const void *b, const void *c, unsigned *seed)
{
        double worst = 0;

        for (int s = 0; s < SAMPLES; s++) {
                size_t i = (size_t)rand_r(seed) % (size_t)n, j = (size_t)rand_r(seed) % (size_t)n;
                long double want = 0;

                for (size_t l = 0; l < (size_t)n; l++)
                        want += elem(a, i + l * n, single) * elem(b, l + j * n, single);
                worst = fmax(worst, (double)fabsl(elem(c, i + j * n, single) - want));
        }
        return worst;
}

/* The blocked SYR2K sequence: the panel at column j updates the trailing
 * lower triangle from (j + nb, j + nb) with rank 2 nb, from rows j + nb on
 * of V and W (n x nb each, as the reduction's panel vectors are). */
static void run_syr2k_sequence(int n, int nb, int single, void *v, void *w, void *c)
{
        size_t esz = single ? sizeof(float) : sizeof(double);

        for (int j = 0; j + nb < n; j += nb) {
                int m = n - j - nb;
                void *vj = (char *)v + (size_t)(j + nb) * esz, *wj = (char *)w + (size_t)(j + nb) * esz;
                void *cj = (char *)c + ((size_t)(j + nb) + (size_t)(j + nb) * n) * esz;

                if (single) {
                        const float alpha = -1.0f, one = 1.0f;

                        ssyr2k_("L", "N", &m, &nb, &alpha, vj, &n, wj, &n, &one, cj, &n, 1, 1);
                } else {
                        const double alpha = -1.0, one = 1.0;

                        dsyr2k_("L", "N", &m, &nb, &alpha, vj, &n, wj, &n, &one, cj, &n, 1, 1);
                }
        }
}

/* Flops of the sequence, 2 m^2 k per call (the convention for SYR2K). */
static double syr2k_flops(int n, int nb)
{
        double f = 0;

        for (int j = 0; j + nb < n; j += nb)
                f += 2.0 * (double)(n - j - nb) * (double)(n - j - nb) * nb;
        return f;
}

/* Checks sampled lower-triangle elements after one sequence from c0: each
 * element (i, j), i >= j, got -(V W^T + W V^T)(i, j) once for every panel
 * whose trailing triangle holds it (panel start p with p + nb <= j). */
static double check_syr2k(int n, int nb, int single, const void *v, const void *w, const void *c0, const void *c,
                          unsigned *seed)
{
        double worst = 0;

        for (int s = 0; s < SAMPLES; s++) {
                size_t i = (size_t)rand_r(seed) % (size_t)n, j = (size_t)rand_r(seed) % (size_t)n;
                long double want;

                if (i < j) {
                        size_t t = i;

                        i = j;
                        j = t;
                }
                want = elem(c0, i + j * n, single);
                for (size_t p = 0; p + nb < (size_t)n; p += nb) {
                        if (j < p + nb)
                                break;
                        for (size_t l = 0; l < (size_t)nb; l++)
                                want -= elem(v, i + l * n, single) * elem(w, j + l * n, single) +
                                        elem(w, i + l * n, single) * elem(v, j + l * n, single);
                }
                worst = fmax(worst, (double)fabsl(elem(c, i + j * n, single) - want));
        }
        return worst;
}

#ifdef GEMMD_BLAS_CUBLAS
/* The GEMM as a program offloading it itself would run it: A and B copied
 * from its (pageable) memory, cublasDgemm, C copied back. */
static void cublas_gemm(cublasHandle_t h, int n, int single, const void *a, const void *b, void *c, void *da,
                        void *db, void *dc)
{
        size_t bytes = (size_t)n * n * (single ? 4 : 8);

        CK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
        if (single) {
                const float one = 1.0f, zero = 0.0f;

                CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n));
        } else {
                const double one = 1.0, zero = 0.0;

                CB(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n));
        }
        CK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
}

/* Each SYR2K call of the sequence offloaded on its own, as the BLAS call
 * is: its V and W panels and its C triangle's columns in, C out. */
static void cublas_syr2k_sequence(cublasHandle_t h, int n, int nb, int single, const void *v, const void *w,
                                  void *c, void *dv, void *dw, void *dc)
{
        size_t esz = single ? 4 : 8;

        for (int j = 0; j + nb < n; j += nb) {
                int m = n - j - nb;
                size_t off = (size_t)(j + nb);
                size_t cbytes = ((size_t)n * (m - 1) + m) * esz;

                CK(cudaMemcpy2D(dv, (size_t)m * esz, (const char *)v + off * esz, (size_t)n * esz, (size_t)m * esz,
                                (size_t)nb, cudaMemcpyHostToDevice));
                CK(cudaMemcpy2D(dw, (size_t)m * esz, (const char *)w + off * esz, (size_t)n * esz, (size_t)m * esz,
                                (size_t)nb, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(dc, (const char *)c + (off + off * n) * esz, cbytes, cudaMemcpyHostToDevice));
                if (single) {
                        const float alpha = -1.0f, one = 1.0f;

                        CB(cublasSsyr2k(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, m, nb, &alpha, dv, m, dw, m, &one,
                                        dc, n));
                } else {
                        const double alpha = -1.0, one = 1.0;

                        CB(cublasDsyr2k(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, m, nb, &alpha, dv, m, dw, m, &one,
                                        dc, n));
                }
                CK(cudaMemcpy((char *)c + (off + off * n) * esz, dc, cbytes, cudaMemcpyDeviceToHost));
        }
}

/* Pageable host <-> device bandwidth for `bytes`, GB/s each way. */
static void pcie_bandwidth(size_t bytes, double *h2d, double *d2h)
{
        void *host = malloc(bytes), *dev;
        double t[5];

        memset(host, 1, bytes);
        CK(cudaMalloc(&dev, bytes));
        for (int dir = 0; dir < 2; dir++) {
                for (int r = 0; r < 5; r++) {
                        double t0 = now_s();

                        if (dir == 0)
                                CK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
                        else
                                CK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
                        t[r] = now_s() - t0;
                }
                *(dir == 0 ? h2d : d2h) = bytes / median(t, 5) * 1e-9;
        }
        CK(cudaFree(dev));
        free(host);
}
#endif

static void usage(FILE *f)
{
        fprintf(f, "usage: gemmbench-blas [--gemm N[,N...]] [--syr2k N] [--nb NB] [--reps R] [--single]"
#ifdef GEMMD_BLAS_CUBLAS
                   " [--cublas]"
#endif
                   " [--json]\n"
                   "Times GEMMs and a blocked SYR2K sequence through the loaded libblas.so.3.\n");
}

/* --gemm's comma list of orders. Returns 0, or -1 when one is not an order
 * in 1..65536 or there are more than MAX_SIZES. */
static int parse_sizes(char *s, struct opts *o)
{
        o->ngemm = 0;
        for (char *t = strtok(s, ","); t; t = strtok(NULL, ",")) {
                if (o->ngemm == MAX_SIZES || bench_parse_int(t, 1, 65536, &o->gemm[o->ngemm]))
                        return -1;
                o->ngemm++;
        }
        return o->ngemm ? 0 : -1;
}

/* The options into *o. Returns 0, or 2 (the exit status) after saying why. */
static int parse(int argc, char **argv, struct opts *o)
{
        static const char prog[] = "gemmbench-blas";
        static const struct option longs[] = {
                {"gemm", required_argument, NULL, 'g'}, {"syr2k", required_argument, NULL, 's'},
                {"nb", required_argument, NULL, 'b'},   {"reps", required_argument, NULL, 'r'},
                {"single", no_argument, NULL, '1'},     {"cublas", no_argument, NULL, 'c'},
                {"json", no_argument, NULL, 'j'},       {"help", no_argument, NULL, 'h'},
                {NULL, 0, NULL, 0},
        };
        int c;

        *o = (struct opts){.gemm = {4096}, .ngemm = 1, .syr2k = 8192, .nb = 256, .reps = 5};
        opterr = 0; /* bench_getopt_error says it in one line */
        while ((c = getopt_long(argc, argv, ":", longs, NULL)) != -1) {
                switch (c) {
                case 'g':
                        if (parse_sizes(optarg, o))
                                return bench_usage_error(prog, "--gemm: orders in 1..65536, at most %d", MAX_SIZES);
                        break;
                case 's':
                        if (bench_parse_int(optarg, 0, 65536, &o->syr2k))
                                return bench_usage_error(prog, "--syr2k: an order in 0..65536");
                        break;
                case 'b':
                        if (bench_parse_int(optarg, 1, 4096, &o->nb))
                                return bench_usage_error(prog, "--nb: a panel width in 1..4096");
                        break;
                case 'r':
                        if (bench_parse_int(optarg, 1, 1000, &o->reps))
                                return bench_usage_error(prog, "--reps: 1..1000");
                        break;
                case '1':
                        o->single = 1;
                        break;
                case 'c':
#ifdef GEMMD_BLAS_CUBLAS
                        o->cublas = 1;
                        break;
#else
                        return bench_usage_error(prog, "--cublas: built without cuBLAS");
#endif
                case 'j':
                        o->json = 1;
                        break;
                case 'h':
                        usage(stdout);
                        exit(0);
                default:
                        return bench_getopt_error(prog, c, argv);
                }
        }
        if (optind < argc)
                return bench_usage_error(prog, "unexpected argument '%s'", argv[optind]);
        return 0;
}

/* Prints one result line (or JSON object) and returns 1 when it failed. */
static int report(const struct opts *o, const char *what, const char *via, int n, double flops, double secs,
                  double err, double tol)
{
        int bad = !(err <= tol);

        if (o->json)
                printf("{\"what\":\"%s\",\"via\":\"%s\",\"n\":%d,\"type\":\"%s\",\"seconds\":%.6f,\"gflops\":%.1f,"
                       "\"max_err\":%.3g,\"ok\":%s}\n",
                       what, via, n, o->single ? "f32" : "f64", secs, flops / secs * 1e-9, err, bad ? "false" : "true");
        else
                printf("%-14s %-8s n=%-6d %s  %9.4f s  %9.1f GF/s  max err %.3g%s\n", what, via, n,
                       o->single ? "f32" : "f64", secs, flops / secs * 1e-9, err, bad ? "  FAILED" : "");
        return bad;
}

int main(int argc, char **argv)
{
        struct opts o;
        int rc = parse(argc, argv, &o), failed = 0;
        unsigned seed = 12345;
        size_t esz;
        double *t;

        if (rc)
                return rc;
        esz = o.single ? sizeof(float) : sizeof(double);
        t = calloc((size_t)o.reps, sizeof(*t));
#ifdef GEMMD_BLAS_CUBLAS
        cublasHandle_t h = NULL;
        if (o.cublas)
                CB(cublasCreate(&h));
#endif
        for (int s = 0; s < o.ngemm; s++) {
                int n = o.gemm[s];
                size_t cnt = (size_t)n * n;
                void *a = random_matrix(cnt, o.single, &seed), *b = random_matrix(cnt, o.single, &seed);
                void *c = random_matrix(cnt, o.single, &seed);
                double flops = 2.0 * n * (double)n * n;

                run_gemm(n, o.single, a, b, c);
                for (int r = 0; r < o.reps; r++) {
                        double t0 = now_s();

                        run_gemm(n, o.single, a, b, c);
                        t[r] = now_s() - t0;
                }
                failed |= report(&o, "gemm", "blas", n, flops, median(t, o.reps),
                                 check_gemm(n, o.single, a, b, c, &seed), tolerance(n, o.single));
#ifdef GEMMD_BLAS_CUBLAS
                if (o.cublas) {
                        void *da, *db, *dc;
                        double h2d, d2h;

                        CK(cudaMalloc(&da, cnt * esz));
                        CK(cudaMalloc(&db, cnt * esz));
                        CK(cudaMalloc(&dc, cnt * esz));
                        memset(c, 0xff, cnt * esz);
                        cublas_gemm(h, n, o.single, a, b, c, da, db, dc);
                        for (int r = 0; r < o.reps; r++) {
                                double t0 = now_s();

                                cublas_gemm(h, n, o.single, a, b, c, da, db, dc);
                                t[r] = now_s() - t0;
                        }
                        failed |= report(&o, "gemm", "cublas", n, flops, median(t, o.reps),
                                         check_gemm(n, o.single, a, b, c, &seed), tolerance(n, o.single));
                        pcie_bandwidth(cnt * esz, &h2d, &d2h);
                        /* A and B in, C out: no BLAS in host memory does better. */
                        double bound = cnt * esz * (2.0 / (h2d * 1e9) + 1.0 / (d2h * 1e9));
                        if (o.json)
                                printf("{\"what\":\"pcie\",\"n\":%d,\"h2d_gbs\":%.1f,\"d2h_gbs\":%.1f,"
                                       "\"copy_bound_s\":%.6f}\n",
                                       n, h2d, d2h, bound);
                        else
                                printf("%-14s %-8s n=%-6d      %9.4f s  (pageable copies: in %.1f GB/s, out %.1f "
                                       "GB/s)\n",
                                       "copies alone", "pcie", n, bound, h2d, d2h);
                        CK(cudaFree(da));
                        CK(cudaFree(db));
                        CK(cudaFree(dc));
                }
#endif
                free(a);
                free(b);
                free(c);
        }
        if (o.syr2k > o.nb) {
                int n = o.syr2k, nb = o.nb;
                size_t cnt = (size_t)n * n;
                void *v = random_matrix((size_t)n * nb, o.single, &seed);
                void *w = random_matrix((size_t)n * nb, o.single, &seed);
                void *c0 = random_matrix(cnt, o.single, &seed), *c = malloc(cnt * esz);
                double flops = syr2k_flops(n, nb), tol = tolerance(2 * n, o.single) * 4;

                for (int r = -1; r < o.reps; r++) {
                        memcpy(c, c0, cnt * esz);
                        double t0 = now_s();

                        run_syr2k_sequence(n, nb, o.single, v, w, c);
                        if (r >= 0)
                                t[r] = now_s() - t0;
                }
                failed |= report(&o, "syr2k-blocked", "blas", n, flops, median(t, o.reps),
                                 check_syr2k(n, nb, o.single, v, w, c0, c, &seed), tol);
#ifdef GEMMD_BLAS_CUBLAS
                if (o.cublas) {
                        void *dv, *dw, *dc;

                        CK(cudaMalloc(&dv, (size_t)n * nb * esz));
                        CK(cudaMalloc(&dw, (size_t)n * nb * esz));
                        CK(cudaMalloc(&dc, cnt * esz));
                        for (int r = -1; r < o.reps; r++) {
                                memcpy(c, c0, cnt * esz);
                                double t0 = now_s();

                                cublas_syr2k_sequence(h, n, nb, o.single, v, w, c, dv, dw, dc);
                                if (r >= 0)
                                        t[r] = now_s() - t0;
                        }
                        failed |= report(&o, "syr2k-blocked", "cublas", n, flops, median(t, o.reps),
                                         check_syr2k(n, nb, o.single, v, w, c0, c, &seed), tol);
                        CK(cudaFree(dv));
                        CK(cudaFree(dw));
                        CK(cudaFree(dc));
                }
#endif
                free(v);
                free(w);
                free(c0);
                free(c);
        }
#ifdef GEMMD_BLAS_CUBLAS
        if (h)
                cublasDestroy(h);
#endif
        free(t);
        return failed;
}
