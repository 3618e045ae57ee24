/*
 * tiles.h - which output tiles a problem has, for a given tile shape.
 *
 * Header-only and free of libc so that the host planner (scheduler/plan.c),
 * the CPU kernels and the CUDA kernels include the very same code: they can
 * never disagree about which tiles exist or where a tile lies.
 *
 * Problems here are already normalized to column-major storage (the daemon
 * rewrites row-major ops before they reach the scheduler). A tile is
 * identified by its linear index t in [0, sched_tile_count()); its
 * coordinates (row, col) count tiles along m and n.
 *
 * K is cut into canonical chunks of SCHED_KCHUNK elements. Every kernel
 * accumulates each chunk from zero and adds the chunk sums in order, so a
 * tile's bits do not depend on whether the `split` plan mode cut its K range
 * (and hence not on what the request was batched with).
 */
#ifndef GEMMD_SCHED_TILES_H
#define GEMMD_SCHED_TILES_H

#include <stdint.h>

#ifdef __CUDACC__
#define SCHED_HD __host__ __device__ __forceinline__
#else
#define SCHED_HD static inline
#endif

/* Canonical K chunk, in elements: a multiple of every tile_k gemmd uses. */
#define SCHED_KCHUNK 512u

enum sched_kind { SCHED_GEMM = 0, SCHED_SYR2K = 1 };

/* A problem as the scheduler sees it (normalized, column-major). For SYR2K
 * m == n and `uplo` is 0 (lower) or 1 (upper). dtype is enum gemmd_dtype. */
struct sched_problem {
        uint8_t kind;
        uint8_t dtype;
        uint8_t uplo;
        uint8_t tf32;
        uint32_t m, n, k;
};

struct sched_shape {
        uint32_t tm, tn, tk;
};

SCHED_HD uint32_t sched_cdiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

/* Number of canonical K chunks of a problem (at least 1). */
SCHED_HD uint32_t sched_kchunks(uint32_t k) { return k == 0 ? 1 : sched_cdiv(k, SCHED_KCHUNK); }

/* Number of tiles of problem p: GEMM cdiv(m,tm)*cdiv(n,tn); SYR2K only the
 * tiles of the stored triangle (macro tiles for tm != tn, see below). */
SCHED_HD uint32_t sched_tile_count(const struct sched_problem *p, struct sched_shape s);

/* Coordinates of tile t of p. Returns 1 when the tile holds elements to
 * compute, 0 for a padding tile of a SYR2K macro grid (no work). */
SCHED_HD int sched_tile_coord(const struct sched_problem *p, struct sched_shape s, uint32_t t,
                              uint32_t *row, uint32_t *col);

/* TODO(scheduler): definitions. */

#endif /* GEMMD_SCHED_TILES_H */
