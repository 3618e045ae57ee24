/*
 * cpu_gemm.h - the CPU backend's tile code: computes a CTA's share of a
 * group's plan on the calling thread.
 *
 * The CPU backend runs a plan the way the GPU runs it: every "CTA" of the
 * plan is a unit of work that a thread of the daemon's pool executes by
 * calling cpu_gemm_run_cta(). Distinct CTAs of one plan may run
 * concurrently; they only meet at split tiles, through the workspace.
 *
 * Semantics (the definition every backend follows)
 * -------------------------------------------------
 * Problems are column-major (struct gemmd_kproblem):
 *   GEMM   C = alpha * op(A) * op(B) + beta * C        (C is m x n)
 *   SYR2K  C = alpha * (op(A) op(B)^T + op(B) op(A)^T) + beta * C
 *          (C is n x n; only the `uplo` triangle is read or written,
 *          the other triangle is left untouched, inside diagonal tiles too)
 * f16 and bf16 inputs are widened exactly to f32; products are accumulated
 * in f32; C is read and written in the problem's dtype, rounded to nearest
 * even. The tf32 flag is ignored: the CPU always computes exact f32. f64
 * problems are the same in f64 throughout: f64 products and sums, and the
 * scalars alpha_f64 and beta_f64 (the others use the float alpha and beta).
 * When beta == 0, C is not read (NaN or garbage in C does not propagate).
 *
 * Canonical accumulation (bit-exact, whatever the plan)
 * ----------------------------------------------------
 * K is cut into chunks of SCHED_KCHUNK elements. For every output element,
 * each chunk is summed from zero in increasing k, one multiply rounded to
 * the accumulator type (f32, or f64 for f64) and then one add rounded to it
 * per term (never a fused
 * multiply-add: this file is compiled with contraction off). SYR2K sums,
 * within each chunk, first the op(A) op(B)^T terms over the chunk's k, then
 * the op(B) op(A)^T terms over the same k, into the same chunk sum. The
 * chunk sums are then added in chunk order: total = sum0; total += sum1; ...
 * The epilogue is c = alpha * total + beta * c_old (two products, one add,
 * each rounded to the accumulator type), or c = alpha * total when
 * beta == 0. f64 problems have no chunks: each output element is summed
 * from zero over all of K in increasing k (SYR2K: all of the op(A)
 * op(B)^T terms, then all of the op(B) op(A)^T terms), as the GPU's f64
 * kernel sums one mma after another along K; planners never split them.
 * Since the order never
 * depends on tile shape, sub-blocking, split entries or the other problems
 * of the group, a problem gives the same bits in any plan and any group.
 *
 * Split tiles
 * -----------
 * An entry with split != SCHED_NO_SPLIT computes only its chunks
 * [kc_begin, kc_end): chunk c's sums go to workspace slot
 * plan->split_ws[split] + c (a tm x tn column-major tile, ld tm, of
 * CPU_WS_ELEM_BYTES an element whatever the type, only the
 * elements the tile computes are written). The entry then increments
 * arrivals[split] (acq_rel); the caller whose increment completes
 * plan->split_parts[split] arrivals adds the chunk sums in chunk order as
 * above, writes C and resets arrivals[split] to 0 for the next group.
 * f64 entries ignore the split: the part holding chunk 0 computes the
 * whole tile, any other part nothing (planners never split f64).
 */
#ifndef GEMMD_CPU_GEMM_H
#define GEMMD_CPU_GEMM_H

#include <stdint.h>

#include "kernels/kproblem.h"
#include "scheduler/plan.h"

/* Bytes of one workspace element: the widest accumulator, double. */
#define CPU_WS_ELEM_BYTES 8

/* Scratch shared by the CTAs of one group. */
struct cpu_workspace {
        /* plan->ws_chunks * tm * tn elements of CPU_WS_ELEM_BYTES: a
         * problem's chunk sums are of its accumulator type (float, or
         * double for f64), and a group may mix them. */
        void *chunks;
        uint32_t *arrivals;  /* plan->nsplit counters, zero before the group */
};

/*
 * Computes CTA `cta`'s work of a group: its plan entries in order or, for a
 * SCHED_DEVICE plan (nentries == 0), the tiles cta, cta + nctas, ... of the
 * group's tiles concatenated problem by problem (nctas is plan->nctas, or
 * cfg->ctas when the plan leaves it 0), each over its whole K range.
 *
 * `probs` and `sp` are the group's problems (plan->nproblems of each, same
 * order, sp[i] describing probs[i]); `cfg` is the config the plan was built
 * with. `ws` may be NULL when plan->nsplit == 0. Operand addresses must be
 * valid for every element the problem names.
 *
 * Thread safety: safe to call concurrently for distinct ctas of one plan
 * (and for any ctas of distinct groups with distinct workspaces). Uses no
 * heap and about 128 KiB of the caller's stack.
 */
void cpu_gemm_run_cta(const struct gemmd_kproblem *probs, const struct sched_problem *sp,
                      const struct sched_plan *plan, const struct sched_config *cfg, uint32_t cta,
                      struct cpu_workspace *ws);

/* The same, calling ran(ctx, problem) after each of the CTA's tiles (or
 * parts of a split tile) is done, its stores made: what early completion
 * counts (daemon/backend_cpu.c). */
void cpu_gemm_run_cta_each(const struct gemmd_kproblem *probs, const struct sched_problem *sp,
                           const struct sched_plan *plan, const struct sched_config *cfg, uint32_t cta,
                           struct cpu_workspace *ws, void (*ran)(void *ctx, uint32_t problem), void *ctx);

#endif /* GEMMD_CPU_GEMM_H */
