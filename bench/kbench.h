/*
 * kbench.h - what gemmbench's kernel benchmarks share (gemmbench.c: the
 * workloads against cuBLAS; calibrate.c: the cost model's figures).
 */
#ifndef GEMMD_BENCH_KBENCH_H
#define GEMMD_BENCH_KBENCH_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "include/gemmd.h"
#include "kernels/cuda_gemm.h"
#include "scheduler/plan.h"

#define CK(x)                                                                                    \
        do {                                                                                     \
                cudaError_t e_ = (x);                                                            \
                if (e_ != cudaSuccess) {                                                         \
                        fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,               \
                                cudaGetErrorString(e_));                                         \
                        exit(1);                                                                 \
                }                                                                                \
        } while (0)
#define CB(x)                                                                                    \
        do {                                                                                     \
                cublasStatus_t s_ = (x);                                                         \
                if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
                        fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, \
                                (int)s_);                                                        \
                        exit(1);                                                                 \
                }                                                                                \
        } while (0)

struct bprob {
        int kind, dtype, tf32, uplo;
        uint32_t m, n, k;
};

struct workload {
        char name[64];
        struct bprob *p;
        uint32_t n, cap;
};

/* Appends a problem to w. */
void workload_add(struct workload *w, int kind, int dtype, int tf32, int uplo, uint32_t m, uint32_t n,
                  uint32_t k);

/* The problems of one dtype/TF32 config, on the device: several copies of
 * the operands when one fits in L2, each with its problems and tensor maps. */
struct set {
        int dtype, tf32;
        uint32_t n, copies;
        struct bprob *p;
        size_t *aoff, *boff, *coff; /* element offsets inside each copy */
        size_t elems;               /* elements of one copy */
        char *dbuf;                 /* copies * elems elements */
        struct gemmd_kproblem **dkp; /* per copy, device */
        struct gemmd_kproblem **hkp; /* per copy, host (cuda_group.problems_host) */
        void **dtm;                  /* per copy: tensor maps (cuda_gemm_tmaps_build), device */
        void **dtm_wide;             /* per copy: the maps of the wide tile, or NULL */
        void **dpack;                /* per copy: packed copies' buffer (cuda_gemm_pack_bytes), or NULL */
        int nfast;                   /* problems on the sm_90 fast path */
        int wide_ok;                 /* every problem takes the second tile (wide, or narrow: --narrow) */
        double tmaps_us;             /* host time of cuda_gemm_tmaps_build for the set, encoding */
        double tmaps_memo_us;        /* the same again, its maps found in the memo (tmap_memo.h) */
        uint32_t nfast_syr2k;        /* of which SYR2Ks */
        struct sched_problem *sp;
        double flops;
        int all_equal, any_syr2k;
};

size_t esize(int dtype);
/* Takes w's problems of (dtype, tf32) into s, on the device (l2: the L2
 * size, which sets the number of copies; 0: one copy). shared_ab: every
 * problem reads the first one's A and B (problems of one shape), which
 * then stay in L2; each still writes a C of its own. */
void set_init(struct set *s, const struct workload *w, int dtype, int tf32, size_t l2, int shared_ab);
void set_free(struct set *s);

/* A gemmd launch ready to time. */
struct gplan {
        struct sched_plan plan;
        struct sched_config cfg;
        void *blob;
        float *ws;
        uint32_t *arr;
        int sm80; /* leave the sm_90 fast path off (comparison rows) */
        int wide; /* the wide tile (set by gplan_build's caller's request) */
};

/* Builds s's plan in `mode` for `ctas` CTAs, on the device. Returns 0 or
 * sched_plan_build's code. */
int gplan_build(struct gplan *g, const struct set *s, enum sched_mode mode, uint32_t ctas);
/* The same with the second tile, wide or narrow (needs s->wide_ok). */
int gplan_build_wide(struct gplan *g, const struct set *s, enum sched_mode mode, uint32_t ctas);
void gplan_free(struct gplan *g);
/* Launches the plan on copy `copy` of the set's operands (default stream). */
void kern_run(const struct set *s, const struct gplan *g, uint32_t copy);

/* Median milliseconds of `reps` timed runs of fn(arg, copy) after warm-ups,
 * rotating over `copies`; -1 when fn fails. With kbench_queued set, each
 * timed run is queued behind a spin kernel (bench_spin) longer than the
 * host takes to queue it, so the events time the device's work alone: no
 * launch gap, for gemmd and its peers alike. */
typedef int (*runfn)(void *arg, uint32_t copy);
float time_median(runfn fn, void *arg, uint32_t copies, int reps);
extern int kbench_queued;
extern int kbench_narrow; /* "-w" rows run the narrow tile instead ("-n") */

/* A gemmd launch as a runfn. */
struct grun {
        const struct set *s;
        const struct gplan *g;
};
int grun_fn(void *arg, uint32_t c);

/* gemmbench calibrate (calibrate.c). */
int calibrate_main(int argc, char **argv);
/* `gemmbench floor` (launch_floor.cu). */
int launch_floor_main(int argc, char **argv);

#endif
