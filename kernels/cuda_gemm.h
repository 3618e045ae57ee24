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
 * SYR2K, f32 accumulation (f64 for f64 problems, which use alpha_f64 and
 * beta_f64), canonical K chunks of SCHED_KCHUNK summed in order,
 * deterministic split tiles), with these differences: f64 products are
 * summed by FP64 tensor cores (mma.sync, tile 128 x 64; never the Hopper
 * wgmma kernel, the wide tile, the resident kernel or early completion),
 * f16 and bf16
 * products are formed by tensor cores (exact products, f32 sums), f32 with
 * tf32 set uses TF32 tensor cores, and exact f32 uses fused multiply-adds
 * or, on the Hopper fast path, operands split into two TF32 parts (three
 * tensor-core products each), so bits differ from the CPU backend. For a given config and problem the
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

/* Threads per CTA of the sm_80 kernels (the wgmma kernel uses 384); one
 * CTA per SM is resident. */
#define CUDA_GEMM_THREADS 256

/* The tile shape the kernels of config (dtype, tf32) use. The daemon builds
 * its plans with this shape; cuda_gemm_launch rejects any other. tf32 only
 * matters for dtype GEMMD_F32. */
struct sched_shape cuda_gemm_shape(int dtype, int tf32);

/* The wide tile of config (dtype, tf32): 128 x 192 on an sm_90a device
 * for f16, bf16 and TF32, else all zero. A plan may use it instead of
 * cuda_gemm_shape() when every problem of the group is a GEMM on the
 * Hopper kernel (tensor maps built with this shape, nfast == nproblems):
 * a third more work per byte a tile loads, for groups large enough that
 * its coarser quantization costs little (the daemon asks the cost model,
 * sched_prefer_wide). The sums are the same, chunk for chunk, so the bits
 * are too (test_gpu_kernels checks it). */
struct sched_shape cuda_gemm_shape_wide(int dtype, int tf32);

/* The narrow tile of config (dtype, tf32): 128 x 64 on an sm_90a device
 * for f16, bf16 and TF32, else all zero. Taken, under the same conditions
 * as the wide tile, by a group whose usual tiles would leave SMs idle and
 * whose narrow ones still fit one wave (sched_prefer_narrow): a lone small
 * GEMM then spreads over twice the SMs, each loading a quarter less per
 * k-step and storing half the C. The same sums, so the same bits. */
struct sched_shape cuda_gemm_shape_narrow(int dtype, int tf32);
/* The half tile of config (dtype, tf32): 64 x 128 on an sm_90a device for
 * f16 and bf16, else all zero. The usual kernel runs it, each plan tile
 * on one consumer warpgroup (KParams.tile_rows), from host plans that cut
 * no K (cuda_gemm_launch refuses others). It is the resident kernel's
 * narrow tile: a lone small GEMM on twice the SMs without a kernel of
 * its own, each SM's share of the k-loop halved. The same sums, so the
 * same bits. */
struct sched_shape cuda_gemm_shape_half(int dtype, int tf32);
/* The rows of shape's tiles where it is config (dtype, tf32)'s half tile,
 * else 0: KParams.tile_rows, and cuda_res_post.tile_rows for a post. */
uint32_t cuda_gemm_half_rows(int dtype, int tf32, struct sched_shape shape);

/* A short name for the config ("bf16-mma", "f32-ffma", ...), static. */
const char *cuda_gemm_kernel_name(int dtype, int tf32);

/* One launch: every problem shares the config (dtype, tf32). */
struct cuda_group {
        const struct gemmd_kproblem *problems; /* device copy, nproblems */
        /* Host copy of problems, or NULL. With it, an f64 group whose
         * problems share one layout and alignment runs a kernel built for
         * that one (each such kernel holds one copy of the f64 mainloop,
         * whose registers several copies in one kernel crowd), and a
         * 16-bit group whose problems off the Hopper kernel hold 1/64 of
         * its products or more runs whole on the sm_80 kernel, in one
         * launch rather than two. */
        const struct gemmd_kproblem *problems_host;
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
        /* Hopper fast path (optional, zero/NULL to leave it off): the device
         * copy of cuda_gemm_tmaps_build()'s output for these problems, in
         * this order (64-byte aligned, cuda_gemm_tmaps_bytes(nproblems)
         * bytes), and that call's return value. */
        const void *tmaps;
        uint32_t nfast;
        /* The packed copies' buffer whose addresses the maps were built
         * with (cuda_gemm_tmaps_build_packed), or NULL. */
        void *pack;
        /* How many of them are SYR2Ks (cuda_gemm_tmaps_syr2k): a group
         * without any runs a fast-path kernel built without their code. */
        uint32_t nfast_syr2k;
        /* Optional launch data sent with the launch itself (0 bytes: off).
         * The pointers above (problems, plan_blob, tmaps) that lie in
         * [inline_dev, inline_dev + inline_bytes) are read from the host
         * copy inline_host (same offsets) passed as a kernel parameter, so
         * the caller need not copy that range to the device first: no copy
         * on the launch path of a small group. inline_dev must be 64-byte
         * aligned, inline_bytes at most CUDA_GEMM_INLINE_MAX, and every
         * problem must run on the Hopper fast path (nfast == nproblems on
         * an sm_90a device): the other kernels read device memory only, and
         * cuda_gemm_launch returns -EINVAL rather than launch them. */
        const void *inline_host;
        uint64_t inline_dev;
        uint32_t inline_bytes;
        /* Optional early completion (NULL early_cnt: off): the kernel tells
         * the host when each problem's C is whole, before the group ends.
         * Each consumer warpgroup of a CTA arrives once per plan entry it
         * takes, after its stores of that entry's C (through a helper warp
         * that fences for it), so problem p is done after early_need[p] =
         * 2 x its plan entries arrivals; the last one writes early_seq to
         * early_flag[p] (host memory the device can write, system scope). early_cnt: nproblems device counters, zero before
         * the launch and left zero. early_need: device (or inline) memory.
         * Only where every problem is a 16-bit GEMM on the Hopper kernel
         * (nfast == nproblems, nfast_syr2k == 0, dtype f16 or bf16), with a
         * plan; cuda_gemm_launch returns -EINVAL otherwise. */
        uint32_t *early_cnt;
        const uint32_t *early_need;
        uint32_t *early_flag;
        uint32_t early_seq; /* nonzero */
        /* Optional, with early completion: per problem p, an address the
         * device can write at system scope (early_word[2p], 0: none) and
         * the value it gets (early_word[2p + 1]), stored just before
         * early_flag[p]: a client's completion word (proto/ring.h).
         * Device (or inline) memory, or NULL. */
        const uint64_t *early_word;
};

/* Largest launch data cuda_gemm_launch sends as a kernel parameter. Every
 * launch carries a parameter this big, so it is kept small: room for a
 * lone request's problem, plan and tensor maps, or a few small ones. */
#define CUDA_GEMM_INLINE_MAX 4096

/* Launches so far, in this process, of the Hopper kernel whose stages
 * hold 64 rows of A (16-bit groups of GEMMs of at most 64 rows). */
uint64_t cuda_gemm_skinny_launches(void);

/*
 * Enqueues the group's kernel on `stream` (a cudaStream_t, NULL for the
 * legacy default stream) on the current device; for a plan whose split
 * tiles are added apart (sched_plan.reduce_apart) that the Hopper kernel
 * runs whole, without early completion, a second kernel after it that
 * adds them (otherwise each tile's last part does, as in any split plan).
 * Returns 0, -EINVAL (config or shape mismatch, missing workspace) or -EIO
 * when the launch failed; the CUDA error is cleared then
 * (cudaGetLastError). Errors raised while the kernel runs surface at the
 * next synchronization, as usual. Thread-safe.
 */
int cuda_gemm_launch(const struct cuda_group *g, void *stream);

/* The launchers set each kernel's shared-memory limit once per device; a
 * caller that destroys a device's context (cudaDeviceReset) calls this so
 * that they set it again in the new one. */
void cuda_gemm_forget_attributes(void);

/*
 * Hopper fast path. On a compute capability 9.0 device, f16, bf16 and
 * f32 GEMM and SYR2K problems with A stored m x k and B
 * stored n x k, both contiguous along K (GEMM: trans_a = 1, trans_b = 0;
 * SYR2K: trans_a = 1), A and B 16-byte
 * aligned and lda, ldb multiples of 16 bytes run on a TMA + wgmma kernel (same tile shape, plans and
 * workspace as the other kernels). Its copies read through tensor maps that
 * the host encodes per problem:
 *
 *   n = nproblems; buf = host memory, 64-byte aligned, cuda_gemm_tmaps_bytes(n)
 *   nfast = cuda_gemm_tmaps_build(host_problems, n, shape, buf);  (device addresses;
 *                                  shape: the plan's, cuda_gemm_shape or _wide)
 *   nsyr2k = cuda_gemm_tmaps_syr2k(buf, n);
 *   copy buf to the device (64-byte aligned), set g.tmaps, g.nfast and
 *   g.nfast_syr2k.
 *
 * Exact f32 problems with maps run split into TF32 parts (as close to an
 * f64 reference as FMA, measured); leave their maps off (g.tmaps NULL) to
 * run them on fused multiply-adds instead.
 * cuda_gemm_tmaps_build returns how many problems qualify (0..n) or
 * -EINVAL; it calls no kernel and may run while earlier groups execute.
 * The maps hold the operands' addresses: rebuild them when those change.
 * When some but not all problems qualify, cuda_gemm_launch enqueues two
 * kernels on the stream, each computing its share of the same plan. A
 * problem's bits depend only on which kernel computes it (whether it
 * qualifies, whether the device is sm_90), never on the rest of the group.
 */
size_t cuda_gemm_tmaps_bytes(uint32_t nproblems);
/* 1 when the current device runs the fast path (else groups with tensor
 * maps take the sm_80 kernels whole). */
int cuda_gemm_fast_available(void);
int cuda_gemm_tmaps_build(const struct gemmd_kproblem *problems, uint32_t nproblems, struct sched_shape shape,
                          void *out);

/*
 * Packed copies. A 16-bit GEMM whose A or B is stored along M or N, or
 * lies off the 16-byte grid (an odd leading dimension, an address that is
 * a multiple of 2 bytes only), cannot be read through a tensor map, so a
 * group holding one runs on the sm_80 kernel. When every problem of a
 * group on the usual tile either qualifies or is such a GEMM, and those
 * hold enough products to outweigh a copy of their operands,
 * cuda_gemm_pack_bytes returns the bytes of a device buffer for packed
 * copies of those operands (rows along K, each row's start on the grid;
 * an operand the map can read where it lies is not copied), else 0:
 *
 *   bytes = cuda_gemm_pack_bytes(host_problems, n, shape);
 *   nfast = cuda_gemm_tmaps_build_packed(host_problems, n, shape, buf, pack, c16);
 *   (pack: the device address of a buffer of those bytes, 128-byte
 *   aligned, only where bytes > 0 for these problems and shape; 0: as
 *   cuda_gemm_tmaps_build. c16: also map 16-bit GEMMs' C, which the
 *   kernel stores through the map on every tile but a CTA's last, and not
 *   under early completion: 0 where no tile could, so that the launch
 *   encodes no map it will not use; cuda_gemm_tmaps_build passes 1)
 *
 * The maps of those problems then point into the buffer, and
 * cuda_gemm_launch, given it in g.pack, first copies their operands there
 * on the stream (device-resident maps only: not with inline launch data),
 * then runs the whole group on the Hopper kernel. The same chunk sums, so
 * the same bits as on the sm_80 kernel. The buffer is the launch's until
 * its kernels end.
 */
size_t cuda_gemm_pack_bytes(const struct gemmd_kproblem *problems, uint32_t nproblems, struct sched_shape shape);
int cuda_gemm_tmaps_build_packed(const struct gemmd_kproblem *problems, uint32_t nproblems,
                                 struct sched_shape shape, void *out, uint64_t pack, int c16);
/* How many of the problems that qualified are SYR2Ks, from the host buffer
 * cuda_gemm_tmaps_build filled for nproblems problems. */
uint32_t cuda_gemm_tmaps_syr2k(const void *buf, uint32_t nproblems);
/* How many of them have a map of C as well (same buffer): f32 GEMMs on
 * the usual tile, whose epilogue stages C through it, and 16-bit GEMMs
 * not on the 64-row stages, whose tiles other than a CTA's last store C
 * by one TMA copy (not under early completion). Where C is 16-byte
 * aligned and m and ldc are multiples of 8 (16-bit) or 4 (f32). */
uint32_t cuda_gemm_tmaps_cmaps(const void *buf, uint32_t nproblems);

/*
 * The resident kernel: the Hopper kernel (f16 or bf16 GEMMs, the usual
 * tile) left running between groups and fed through pinned host memory,
 * so that a group costs the host a few stores instead of a launch, and
 * the device a poll instead of a launch's round trip.
 *
 * struct cuda_res_host and struct cuda_res_posts live in pinned host memory
 * that the device maps. The host posts group seq (1, 2, ...) in
 * post[seq % CUDA_RES_SLOTS]: a
 * struct cuda_res_post (its fields, then the launch data if it fits in
 * data) written as tagged words, each 32 bits of it beside the low 32 bits
 * of seq in one 64-bit store (kernels/res_post.h: the rule, and the
 * writer). Warps 1-3 of the post's reader (CTA (seq - first_seq) %
 * ndisp, cuda_gemm_res_launch) read the
 * slot's first CUDA_RES_SPEC words at once, again and again: a post is
 * whole once every word it needs carries its seq, so one round trip over
 * PCIe brings both the news and the data, where a sequence number read
 * before them took two. Each 64-bit word is stored and read whole, so a
 * word with the right tag holds what the host wrote for that post and
 * nothing else; a slot's words are rewritten with a tag no post of that
 * slot can have whenever seq's low 32 bits wrap, so no word
 * left from an earlier round of them can pass. After a while without
 * posts only the fields are read. Those warps copy the launch data
 * (bytes from src, or from the post itself:
 * problems, plan and tensor maps at the offsets given, as
 * cuda_gemm_launch's blob) into device memory (the area, slot seq %
 * CUDA_RES_SLOTS) and hand it to every CTA. When the last of the plan's
 * CTAs is done with the group, its completion words are stored, done[slot]
 * gets t0 and t1 (device clock, ns: handed over, finished) and then seq.
 * A group may finish before groups posted ahead of it.
 * The host may post seq only when the group before it in that slot is
 * done. Each launch has a generation (gen, increasing), which each post
 * names: setting stop to it ends that launch once the groups posted to it
 * are done; later posts go to the next launch (first_seq: the first of
 * them), which the stream starts after this one has ended.
 */
#define CUDA_RES_SLOTS 16
/* The most dispatchers (CTAs reading the posts) a resident launch takes. */
#define CUDA_RES_DISPATCHERS_MAX 4
/* Launch data of at most this many bytes travels inside its post (data):
 * a lone request's problem, plan and tensor maps. Read with the post's
 * fields when the post fits in CUDA_RES_SPEC words, else in one more
 * round trip. */
#define CUDA_RES_INLINE 3968
#define CUDA_RES_POST_SEQ ((1ull << 48) - 1)
/* Tagged words of a post (one per 4 bytes of struct cuda_res_post), and
 * how many of them every poll reads: 2304 bytes of fields and data (a
 * multiple of 192; a build may set another, -DCUDA_RES_SPEC=768). */
#define CUDA_RES_WORDS 1024
#ifndef CUDA_RES_SPEC
#define CUDA_RES_SPEC 576
#endif
/* A post's content, as its tagged words carry it. */
struct cuda_res_post {
        uint64_t src;     /* launch data, in pinned host memory (its device address); 0: in data */
        uint32_t bytes;   /* a multiple of 16, at most the area's slot size (CUDA_RES_INLINE in data) */
        /* The plan's CTA i runs on CTA (i + rot) % grid: groups of few
         * CTAs, one after another, then run side by side. */
        uint32_t rot;
        uint32_t nprobs, nctas; /* nctas: the plan's; CTAs beyond it have no work */
        /* Offsets into the launch data. */
        uint64_t probs, cta_begin, entries, split_parts, split_ws, tmaps;
        uint64_t ws, arrivals; /* device addresses (plan->nsplit > 0) */
        uint64_t gen;          /* the launch it is for */
        /* Offset into the launch data of each problem's completion word
         * address and value (as cuda_group.early_word), 0: none. They are
         * stored once the group is done, before done[slot].seq. */
        uint64_t words;
        /* The group's seq (CUDA_RES_POST_SEQ), and in bits 48-63 the
         * bytes of launch data in data (0 with src). */
        uint64_t seq;
        uint32_t tile_rows; /* the plan's, where not the usual (KParams.tile_rows): 64 for the half tile */
        uint32_t pad0;
        uint64_t pad;
        unsigned char data[CUDA_RES_INLINE]; /* the launch data when src is 0; 4 KiB a post in all */
};
struct cuda_res_done {
        uint64_t seq, t0, t1, tp; /* tp: device clock when the post was seen */
        uint64_t pad[4]; /* a GEMMD_RTRACE build's stamps (wgmma_gemm.cuh, RT_*), else 0 */
};
/* The posts, in pinned memory of their own, write-combined: the host
 * only writes them, so its stores go out in whole lines, neither read
 * for ownership nor snooped by the device's reads. (A read over PCIe
 * still finds a post half written when the two overlap, which costs the
 * reader another round: docs/performance.md, "Latency".) */
struct cuda_res_posts {
        uint64_t post[CUDA_RES_SLOTS][CUDA_RES_WORDS]; /* tagged struct cuda_res_post */
};
/* What the host reads (done) and the stop, in ordinary pinned memory. */
struct cuda_res_host {
        struct cuda_res_done done[CUDA_RES_SLOTS];
        uint64_t stop, pad[15];
};

/* Bytes of device memory (the area) the resident kernel needs for launch
 * data of at most slot_bytes per group. */
size_t cuda_gemm_res_area_bytes(size_t slot_bytes);

/* Launches the resident kernel for dtype (GEMMD_F16 or GEMMD_BF16) on
 * `stream`, over `grid` CTAs (all must fit on the device at once: one per
 * SM), taking groups from first_seq on, as generation gen (> host->stop).
 * host and posts: the device addresses of the pinned structs; area:
 * cuda_gemm_res_area_bytes(slot_bytes) of device memory (slot_bytes a
 * multiple of 1024), zeroed before the first launch. ndisp CTAs (1 to
 * CUDA_RES_DISPATCHERS_MAX, at most grid) read the posts, each every
 * ndisp-th group. Returns 0, -EINVAL or -EIO. */
int cuda_gemm_res_launch(int dtype, struct cuda_res_host *host, const struct cuda_res_posts *posts, void *area,
                         size_t slot_bytes, uint64_t first_seq, uint64_t gen, uint32_t grid, uint32_t ndisp,
                         void *stream);

/* Bytes of split workspace a plan built with shape `s` for problems of
 * dtype (enum gemmd_dtype: f64 sums take twice the room) needs (0 if
 * none). */
size_t cuda_gemm_ws_bytes(const struct sched_plan *plan, struct sched_shape s, int dtype);

/* Bytes of arrival counters a plan needs (0 if it splits nothing). */
size_t cuda_gemm_arrivals_bytes(const struct sched_plan *plan);

#ifdef __cplusplus
}
#endif
#endif /* GEMMD_CUDA_GEMM_H */
