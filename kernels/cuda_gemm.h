/*
 * cuda_gemm.h - the CUDA backend's grouped GEMM/SYR2K kernels, seen from C.
 *
 * Plain C, no CUDA types: the daemon's CUDA worker, the kernel tests and the
 * benchmark include this header from C files and link the launchers built
 * from kernels/grouped_gemm.cu.
 *
 * One persistent kernel per config (dtype, tf32) computes every problem of a
 * group. Each CTA either walks its plan entries (scheduler/plan.h) or, when
 * the plan has no entries (SCHED_DEVICE), the group's tiles blockIdx.x,
 * blockIdx.x + gridDim.x, ..., mapping a linear tile index to its problem
 * with a warp-wide prefix sum over the problems' tile counts. Both use the
 * tile enumeration of scheduler/tiles.h, like the host planner.
 *
 * Semantics are those of kernels/cpu_gemm.h (column-major problems, GEMM and
 * SYR2K, f32 accumulation, canonical K chunks of SCHED_KCHUNK summed in
 * order, deterministic split tiles), with these differences: f16 and bf16
 * products are formed by tensor cores (exact products, f32 sums), f32 with
 * tf32 set uses TF32 tensor cores, and exact f32 uses fused multiply-adds,
 * so bits differ from the CPU backend. For a given config and problem the
 * bits never depend on the plan, the mode or the rest of the group.
 */
#ifndef GEMMD_CUDA_GEMM_H
#define GEMMD_CUDA_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kproblem.h"
#include "scheduler/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per CTA of every config; one CTA per SM is resident. */
#define CUDA_GEMM_THREADS 256

/* The tile shape the kernels of config (dtype, tf32) use. The daemon builds
 * its plans with this shape; cuda_gemm_launch rejects any other. tf32 only
 * matters for dtype GEMMD_F32. */
struct sched_shape cuda_gemm_shape(int dtype, int tf32);

/* A short name for the config ("bf16-mma", "f32-ffma", ...), static. */
const char *cuda_gemm_kernel_name(int dtype, int tf32);

/* One launch: every problem shares the config (dtype, tf32). */
struct cuda_group {
        const struct gemmd_kproblem *problems; /* device copy, nproblems */
        uint32_t nproblems;
        int dtype; /* enum gemmd_dtype of every problem */
        int tf32;  /* f32 only: TF32 tensor cores allowed */
        /* Device copy of plan->blob (NULL when plan->nentries == 0). */
        const void *plan_blob;
        /* Host plan: offsets, nctas, nentries, nsplit. NULL or a plan with
         * nentries == 0 selects device mode over cfg.ctas CTAs. */
        const struct sched_plan *plan;
        struct sched_config cfg; /* the config the plan was built with */
        /* Split workspace (device): cuda_gemm_ws_bytes() bytes, and
         * plan->nsplit counters that are zero before the first launch; the
         * kernels leave them zero again. May be NULL when plan->nsplit == 0.
         * Two launches in flight at once need distinct workspaces. */
        float *ws;
        uint32_t *arrivals;
};

/*
 * Enqueues the group's kernel on `stream` (a cudaStream_t, NULL for the
 * legacy default stream) on the current device. Returns 0, -EINVAL (config
 * or shape mismatch, missing workspace) or -EIO when the launch failed; the
 * CUDA error is cleared then (cudaGetLastError). Errors raised while the
 * kernel runs surface at the next synchronization, as usual. Thread-safe.
 */
int cuda_gemm_launch(const struct cuda_group *g, void *stream);

/* Bytes of split workspace a plan built with shape `s` needs (0 if none). */
size_t cuda_gemm_ws_bytes(const struct sched_plan *plan, struct sched_shape s);

/* Bytes of arrival counters a plan needs (0 if it splits nothing). */
size_t cuda_gemm_arrivals_bytes(const struct sched_plan *plan);

#ifdef __cplusplus
}
#endif
#endif /* GEMMD_CUDA_GEMM_H */
