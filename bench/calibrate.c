/*
 * calibrate.c - gemmbench calibrate: the scheduler's cost model
 * (scheduler/cost.h) measured on this GPU.
 *
 *   gemmbench calibrate [--reps N] [--json]
 *
 * For each data type's kernel, groups of one-tile problems (the kernel's
 * tile, K from 128 to 4096) are timed on every SM at once, 1, 2 and 4
 * tiles per CTA (round-robin plans), and the times are fitted to
 *
 *      t = launch + tiles_per_cta * (fixed + kiters(K) * kiter)
 *
 * by least squares: `fixed` is what an entry costs whatever its K (the
 * pipeline fill, the epilogue, fetching the next entry), `kiter` one
 * mainloop iteration, kiters(K) the model's count (sched_kiters). Every
 * problem reads the same A and B, which stay in L2: this measures what a
 * tile costs the SM, as in a group whose tiles share their operands,
 * not DRAM. The model's units are one bf16 iteration, so the last line is
 * a cost spec for `gemmd --cost` and `gemmbench kernels --cost`:
 * kiter_* relative to bf16's, tile_fixed as bf16's fixed cost. The split
 * costs are not measured here and keep their values.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/kbench.h"
#include "scheduler/cost.h"
#include "scheduler/tiles.h"

static const uint32_t kvals[] = {128, 512, 1024, 2048, 4096};
static const uint32_t per_cta[] = {1, 2, 4};
#define NK (sizeof(kvals) / sizeof(kvals[0]))
#define NT (sizeof(per_cta) / sizeof(per_cta[0]))

/* The four classes of the model, as (dtype, tf32), in its order. */
static const struct {
        int dtype, tf32, cls;
        const char *name;
} classes[] = {
        {GEMMD_BF16, 0, SCHED_COST_BF16, "bf16"},
        {GEMMD_F16, 0, SCHED_COST_F16, "f16"},
        {GEMMD_F32, 1, SCHED_COST_TF32, "tf32"},
        {GEMMD_F32, 0, SCHED_COST_F32, "f32"},
};

/* Solves the 3 x 3 system m x = v in place (Gaussian elimination with
 * partial pivoting). Returns 0, or -1 when it is singular. */
static int solve3(double m[3][3], double v[3], double x[3])
{
        for (int c = 0; c < 3; c++) {
                int p = c;

                for (int r = c + 1; r < 3; r++)
                        if (fabs(m[r][c]) > fabs(m[p][c]))
                                p = r;
                if (fabs(m[p][c]) < 1e-12)
                        return -1;
                for (int j = 0; j < 3; j++) {
                        double t = m[c][j];

                        m[c][j] = m[p][j];
                        m[p][j] = t;
                }
                double t = v[c];

                v[c] = v[p];
                v[p] = t;
                for (int r = c + 1; r < 3; r++) {
                        double f = m[r][c] / m[c][c];

                        for (int j = c; j < 3; j++)
                                m[r][j] -= f * m[c][j];
                        v[r] -= f * v[c];
                }
        }
        for (int r = 2; r >= 0; r--) {
                double acc = v[r];

                for (int j = r + 1; j < 3; j++)
                        acc -= m[r][j] * x[j];
                x[r] = acc / m[r][r];
        }
        return 0;
}

struct fit {
        double launch_us, fixed_us, kiter_us, worst; /* worst: largest relative residual */
};

int calibrate_main(int argc, char **argv)
{
        int reps = 20, json = 0, ndev = 0;
        struct cudaDeviceProp prop;
        struct fit fit[4];
        double t_us[4][NK][NT];

        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--reps") && i + 1 < argc)
                        reps = atoi(argv[++i]);
                else if (!strcmp(argv[i], "--json"))
                        json = 1;
                else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
                        printf("usage: gemmbench calibrate [--reps N] [--json]\n");
                        return 0;
                } else {
                        fprintf(stderr, "gemmbench calibrate: unknown option '%s'\n"
                                        "Try 'gemmbench calibrate --help'.\n", argv[i]);
                        return 2;
                }
        }
        if (reps < 1 || cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
                fprintf(stderr, "gemmbench calibrate: %s\n", reps < 1 ? "--reps must be >= 1" : "no CUDA device");
                return reps < 1 ? 2 : 1;
        }
        CK(cudaGetDeviceProperties(&prop, 0));
        const uint32_t sms = (uint32_t)prop.multiProcessorCount;

        for (int c = 0; c < 4; c++) {
                const struct sched_shape sh = cuda_gemm_shape(classes[c].dtype, classes[c].tf32);
                double m[3][3] = {{0}}, v[3] = {0}, x[3] = {0};

                for (size_t ki = 0; ki < NK; ki++)
                        for (size_t ti = 0; ti < NT; ti++) {
                                struct set s;
                                struct gplan g;
                                struct grun r = {&s, &g};
                                const uint32_t k = kvals[ki];
                                const double it = sched_kiters(k, sh.tk, 0, sched_kchunks(k));
                                const double n = per_cta[ti];

                                struct workload w = {.n = 0};

                                /* One-tile problems sharing A and B (in L2). */
                                for (uint32_t i = 0; i < per_cta[ti] * sms; i++)
                                        workload_add(&w, SCHED_GEMM, classes[c].dtype, classes[c].tf32, 0,
                                                     sh.tm, sh.tn, k);
                                set_init(&s, &w, classes[c].dtype, classes[c].tf32, 0, 1);
                                free(w.p);
                                if (gplan_build(&g, &s, SCHED_ROUND_ROBIN, sms)) {
                                        fprintf(stderr, "gemmbench calibrate: plan failed\n");
                                        return 1;
                                }
                                t_us[c][ki][ti] = 1e3 * time_median(grun_fn, &r, 1, reps);
                                gplan_free(&g);
                                set_free(&s);
                                /* Least squares on (1, n, n * it). */
                                const double f[3] = {1, n, n * it};

                                for (int i = 0; i < 3; i++) {
                                        for (int j = 0; j < 3; j++)
                                                m[i][j] += f[i] * f[j];
                                        v[i] += f[i] * t_us[c][ki][ti];
                                }
                        }
                if (solve3(m, v, x)) {
                        fprintf(stderr, "gemmbench calibrate: %s: no fit\n", classes[c].name);
                        return 1;
                }
                fit[c] = (struct fit){x[0], x[1], x[2], 0};
                for (size_t ki = 0; ki < NK; ki++)
                        for (size_t ti = 0; ti < NT; ti++) {
                                const double it = sched_kiters(kvals[ki], sh.tk, 0, sched_kchunks(kvals[ki]));
                                const double pred = x[0] + per_cta[ti] * (x[1] + it * x[2]);
                                const double rel = fabs(pred - t_us[c][ki][ti]) / t_us[c][ki][ti];

                                if (rel > fit[c].worst)
                                        fit[c].worst = rel;
                        }
        }

        /* In the model's units: one bf16 iteration. */
        struct sched_cost cost = *sched_cost_get();
        const double unit = fit[0].kiter_us;
        char spec[512];

        for (int c = 0; c < 4; c++)
                cost.kiter[classes[c].cls] = fit[c].kiter_us / unit;
        cost.tile_fixed = fit[0].fixed_us / unit;
        if (sched_cost_validate(&cost)) {
                fprintf(stderr, "gemmbench calibrate: the fit gives no valid model (a cost <= 0)\n");
                return 1;
        }
        sched_cost_format(&cost, spec, sizeof(spec));
        if (json) {
                printf("{\"device\":\"%s\",\"sms\":%u,\"reps\":%d,\"classes\":[", prop.name, sms, reps);
                for (int c = 0; c < 4; c++)
                        printf("%s{\"class\":\"%s\",\"launch_us\":%.3f,\"fixed_us\":%.3f,\"kiter_us\":%.4f,"
                               "\"worst_residual\":%.4f}",
                               c ? "," : "", classes[c].name, fit[c].launch_us, fit[c].fixed_us,
                               fit[c].kiter_us, fit[c].worst);
                printf("],\"cost\":\"%s\"}\n", spec);
                return 0;
        }
        printf("# %s, %u SMs; median of %d runs; one-tile problems sharing A and B, rr plans\n", prop.name,
               sms, reps);
        printf("# measured us (rows: K; columns: tiles per CTA %u / %u / %u)\n", per_cta[0], per_cta[1],
               per_cta[2]);
        for (int c = 0; c < 4; c++) {
                const struct sched_shape sh = cuda_gemm_shape(classes[c].dtype, classes[c].tf32);

                printf("%-5s tile %ux%ux%u (%s)\n", classes[c].name, sh.tm, sh.tn, sh.tk,
                       cuda_gemm_kernel_name(classes[c].dtype, classes[c].tf32));
                for (size_t ki = 0; ki < NK; ki++)
                        printf("  K %-5u %9.2f %9.2f %9.2f\n", kvals[ki], t_us[c][ki][0], t_us[c][ki][1],
                               t_us[c][ki][2]);
        }
        printf("# fit: t = launch + tiles * (fixed + kiters * kiter), us; worst = largest relative residual\n");
        printf("%-5s %10s %10s %10s %8s %12s %12s\n", "class", "launch", "fixed", "kiter", "worst",
               "kiter_units", "fixed_units");
        for (int c = 0; c < 4; c++)
                printf("%-5s %10.3f %10.3f %10.4f %7.1f%% %12.3f %12.3f\n", classes[c].name, fit[c].launch_us,
                       fit[c].fixed_us, fit[c].kiter_us, 100 * fit[c].worst, fit[c].kiter_us / unit,
                       fit[c].fixed_us / unit);
        printf("cost: %s\n", spec);
        return 0;
}
