/*
 * res_mark.h - the resident kernel's slot marks (cuda_gemm.h, struct
 * cuda_res_post; kernels/wgmma_gemm.cuh).
 *
 * When the kernel's dispatch warps have a posted group in its slot of
 * device memory, they mark the slot: the group's seq with its plan's CTAs
 * and their rotation, in one 64-bit word, so that each CTA tells from the
 * mark alone whether the group has work for it. A CTA with no part in a
 * group may fall behind it by a lap of the slots, by which time the
 * slot's other fields are a later group's; the mark, read in one load,
 * is never half of each. A stop is marked at the seq where a dispatcher
 * found it instead of a post: RES_EXIT_BIT with the launch's generation.
 * With several dispatchers, each taking every n-th group, each marks one
 * exit, at its first seq past the last post, having first raised the
 * area's exit_seq to it. A CTA that finds an exit below exit_seq passes
 * it; the last raise comes before its own exit's mark, so no CTA passes
 * that exit, and each ends at one of them (tests/test_res_mark.c tries
 * every order).
 *
 * Plain C as well as device code, so that tests can drive the rule
 * without a GPU (tests/test_res_mark.c).
 */
#ifndef GEMMD_RES_MARK_H
#define GEMMD_RES_MARK_H

#include <stdint.h>

#ifdef __CUDACC__
#define RES_MARK_FN __host__ __device__ __forceinline__
#else
#define RES_MARK_FN static inline
#endif

#define RES_EXIT_BIT (1ull << 63)
#define RES_SEQ_BITS 46
#define RES_SEQ_MASK ((1ull << RES_SEQ_BITS) - 1)
/* The most CTAs a mark can name (8 bits each for the plan's CTAs and the
 * rotation): cuda_gemm_res_launch takes no larger grid. */
#define RES_MARK_MAX_CTAS 255u

/* Group seq's mark: its plan runs on nctas CTAs, the plan's CTA i on
 * CTA (i + rot) % grid. seq below 2^46, nctas and rot at most 255. */
RES_MARK_FN uint64_t res_mark(uint64_t seq, uint32_t nctas, uint32_t rot)
{
        return (seq & RES_SEQ_MASK) | (uint64_t)(nctas & 255u) << RES_SEQ_BITS |
               (uint64_t)(rot & 255u) << (RES_SEQ_BITS + 8);
}

enum res_step {
        RES_WAIT, /* not marked yet for this group (or an older launch's exit) */
        RES_TAKE, /* the group has work for this CTA: *vcta is its place in the plan */
        RES_PASS, /* no part in the group: go on to the next seq */
        RES_EXIT, /* the launch ends here */
};

/*
 * What CTA `cta` of `grid` does with mark r, read from the slot of group
 * seq in launch gen. exit_seq: the highest seq an exit was marked at so
 * far, read only once r is an exit (anything before). A launch before
 * this one may have left a higher value than some of this launch's
 * exits, never than its last (this launch starts at the earlier one's
 * first exit, with a post there, so its last exit lies past all of that
 * one's). A mark of a later group, or an exit at a later seq, in this
 * group's slot means the slot was reused: the host posts to a slot only
 * once its group is done and stops a launch with fewer groups in flight
 * than slots, so the group had no work here.
 */
RES_MARK_FN enum res_step res_step(uint64_t r, uint64_t seq, uint64_t gen, uint64_t exit_seq, uint32_t cta,
                                   uint32_t grid, uint32_t *vcta)
{
        const uint64_t sq = seq & RES_SEQ_MASK;

        if (r == (RES_EXIT_BIT | gen))
                return exit_seq == seq ? RES_EXIT : RES_PASS;
        if ((r & RES_EXIT_BIT) || (r & RES_SEQ_MASK) < sq)
                return RES_WAIT;
        if ((r & RES_SEQ_MASK) != sq)
                return RES_PASS;
        const uint32_t nctas = (uint32_t)(r >> RES_SEQ_BITS) & 255u;
        const uint32_t rot = (uint32_t)(r >> (RES_SEQ_BITS + 8)) & 255u;
        const uint32_t v = (cta + grid - rot % grid) % grid;
        if (v >= nctas)
                return RES_PASS;
        *vcta = v;
        return RES_TAKE;
}

#endif
