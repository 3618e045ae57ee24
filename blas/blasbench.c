/*
 * blasbench.c - times sgemm_, dgemm_, ssyr2k_ and dsyr2k_ through gemmd
 * (this libblas.so.3 with GEMMD_BLAS_THRESHOLD=0) against the fallback
 * BLAS called directly, over square sizes, and prints where gemmd starts
 * to win: the value for GEMMD_BLAS_THRESHOLD on this machine.
 *
 *   build/blas/blasbench [--min N] [--max N] [--seconds S]
 *
 * It needs a running gemmd ($GEMMD_SOCKET or the default socket) and checks
 * that it answers first, so the "gemmd" column is never the fallback's.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemmd.h"

typedef void gemm_fn(const char *, const char *, const int *, const int *, const int *,
                     const void *, const void *, const int *, const void *, const int *,
                     const void *, void *, const int *, size_t, size_t);
typedef void syr2k_fn(const char *, const char *, const int *, const int *, const void *,
                      const void *, const int *, const void *, const int *, const void *, void *,
                      const int *, size_t, size_t);

void sgemm_();
void dgemm_();
void ssyr2k_();
void dsyr2k_();
const char *gemmd_blas_fallback_path(void);

struct routine {
        const char *name;
        int syr2k;
        size_t esz;
        void *ours, *theirs;
        double cross_flops; /* smallest flops from which gemmd won every larger size */
};

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Calls routine fn once on n-square operands (alpha 1, beta 1, NN / upper N). */
static void call(const struct routine *r, void *fn, int n, void *a, void *b, void *c)
{
        double one = 1.0;
        float onef = 1.0f;
        const void *s = r->esz == 4 ? (const void *)&onef : (const void *)&one;

        if (r->syr2k)
                ((syr2k_fn *)fn)("U", "N", &n, &n, s, a, &n, b, &n, s, c, &n, 1, 1);
        else
                ((gemm_fn *)fn)("N", "N", &n, &n, &n, s, a, &n, b, &n, s, c, &n, 1, 1);
}

/* Ops the daemon has run: the first device's count in its JSON stats. */
static long long daemon_ops(gemmd_client *c)
{
        char *json = NULL;
        const char *p;
        long long ops = -1;

        if (gemmd_stats(c, 1, &json) == 0 && (p = strstr(json, "\"ops\":")))
                ops = atoll(p + 6);
        free(json);
        return ops;
}

/* Best time of one call of fn over about `seconds` of repetitions; *calls
 * gets how many calls were made. */
static double best_time(const struct routine *r, void *fn, int n, double seconds, void *a, void *b,
                        void *c, int *calls)
{
        double best = 1e30, start = now_s();
        int reps = 0;

        call(r, fn, n, a, b, c); /* warm up: connection, staging, pages */
        while (reps < 3 || (now_s() - start < seconds && reps < 1000)) {
                double t0 = now_s();

                call(r, fn, n, a, b, c);
                double t = now_s() - t0;
                if (t < best)
                        best = t;
                reps++;
        }
        *calls = reps + 1;
        return best;
}

static void *filled(size_t bytes, size_t esz)
{
        void *p = malloc(bytes);

        for (size_t i = 0; p && i < bytes / esz; i++) {
                double v = (double)((i * 2654435761u) % 1000) / 1000.0 + 0.125;
                if (esz == 4)
                        ((float *)p)[i] = (float)v;
                else
                        ((double *)p)[i] = v;
        }
        return p;
}

int main(int argc, char **argv)
{
        int nmin = 16, nmax = 2048;
        double seconds = 0.3, suggest = 0;
        struct routine rs[] = {{"sgemm", 0, 4, (void *)sgemm_, NULL, 0},
                               {"dgemm", 0, 8, (void *)dgemm_, NULL, 0},
                               {"ssyr2k", 1, 4, (void *)ssyr2k_, NULL, 0},
                               {"dsyr2k", 1, 8, (void *)dsyr2k_, NULL, 0}};
        struct gemmd_info info;
        gemmd_client *c;
        const char *fb;
        void *h;
        int rc;

        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--min") && i + 1 < argc)
                        nmin = atoi(argv[++i]);
                else if (!strcmp(argv[i], "--max") && i + 1 < argc)
                        nmax = atoi(argv[++i]);
                else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
                        seconds = atof(argv[++i]);
                else {
                        fprintf(stderr, "usage: blasbench [--min N] [--max N] [--seconds S]\n");
                        return 2;
                }
        }
        if (nmin < 1 || nmax < nmin) {
                fprintf(stderr, "blasbench: need 1 <= --min <= --max\n");
                return 2;
        }
        setenv("GEMMD_BLAS_THRESHOLD", "0", 1);
        rc = gemmd_connect(NULL, &c);
        if (rc != 0) {
                fprintf(stderr, "blasbench: cannot reach gemmd: %s\n", gemmd_strerror(rc));
                return 1;
        }
        gemmd_get_info(c, &info); /* c stays open to read the op count */
        fb = gemmd_blas_fallback_path();
        if (!fb || !(h = dlopen(fb, RTLD_NOW | RTLD_LOCAL))) {
                fprintf(stderr, "blasbench: no fallback BLAS to compare with\n");
                return 1;
        }
        printf("gemmd backend %s, fallback %s\n", info.backend, fb);
        printf("%-7s %6s %14s %12s %12s %8s\n", "routine", "n", "flops", "gemmd_us", "fallback_us",
               "speedup");
        for (size_t r = 0; r < sizeof(rs) / sizeof(rs[0]); r++) {
                struct routine *x = &rs[r];
                char sym[16];

                snprintf(sym, sizeof(sym), "%s_", x->name);
                x->theirs = dlsym(h, sym);
                x->cross_flops = -1;
                for (int n = nmin; n <= nmax; n *= 2) {
                        size_t bytes = (size_t)n * n * x->esz;
                        void *a = filled(bytes, x->esz), *b = filled(bytes, x->esz);
                        void *cc = filled(bytes, x->esz);
                        double flops = 2.0 * n * n * n;

                        if (!a || !b || !cc) {
                                fprintf(stderr, "blasbench: out of memory at n=%d\n", n);
                                return 1;
                        }
                        long long ops0 = daemon_ops(c);
                        int calls;
                        double tg = best_time(x, x->ours, n, seconds, a, b, cc, &calls);
                        long long served = daemon_ops(c) - ops0;
                        /* the daemon's count may trail its replies a little */
                        for (int w = 0; w < 100 && served < calls; w++) {
                                struct timespec ts = {0, 2000000};
                                nanosleep(&ts, NULL);
                                served = daemon_ops(c) - ops0;
                        }
                        double tf = best_time(x, x->theirs, n, seconds, a, b, cc, &calls);

                        if (served < calls) {
                                fprintf(stderr,
                                        "blasbench: gemmd ran %lld of %d %s calls (it refuses them, "
                                        "or they exceed its limits): no figure for n=%d\n",
                                        served, calls, x->name, n);
                                x->cross_flops = -1;
                                free(a);
                                free(b);
                                free(cc);
                                continue;
                        }
                        printf("%-7s %6d %14.0f %12.1f %12.1f %8.2f\n", x->name, n, flops, tg * 1e6,
                               tf * 1e6, tf / tg);
                        if (tg < tf && x->cross_flops < 0)
                                x->cross_flops = flops;
                        else if (tg >= tf)
                                x->cross_flops = -1;
                        free(a);
                        free(b);
                        free(cc);
                }
        }
        for (size_t r = 0; r < sizeof(rs) / sizeof(rs[0]); r++) {
                if (rs[r].cross_flops < 0)
                        printf("crossover %-7s: gemmd never won up to n=%d\n", rs[r].name, nmax);
                else
                        printf("crossover %-7s: gemmd wins from %.0f flops\n", rs[r].name,
                               rs[r].cross_flops);
                if (rs[r].cross_flops > suggest)
                        suggest = rs[r].cross_flops;
        }
        if (suggest > 0)
                printf("suggested GEMMD_BLAS_THRESHOLD=%.0f\n", suggest);
        gemmd_disconnect(c);
        return 0;
}
