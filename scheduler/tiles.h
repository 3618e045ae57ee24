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
 *
 * Tile order
 * ----------
 * GEMM: the tile grid is cut into bands of SCHED_BAND_ROWS tile rows (the
 * last band may be shorter). Bands come one after the other; inside a band
 * the index walks down a column of tiles, then on to the next column:
 *
 *      t -> band = t / (SCHED_BAND_ROWS * ntn), rows of the band h,
 *           u = t - band * SCHED_BAND_ROWS * ntn,
 *           row = band * SCHED_BAND_ROWS + u % h, col = u / h.
 *
 * Tiles that run at the same time (consecutive indices under round-robin)
 * then touch at most SCHED_BAND_ROWS panels of A and few panels of B, so
 * the panels they share are read from L2 rather than from DRAM.
 *
 * SYR2K: only the stored triangle. For a square tile (tm == tn) the tiles
 * of the lower triangle are numbered row by row, (0,0), (1,0), (1,1),
 * (2,0)..., so tile t lies in row i = floor((sqrt(8t + 1) - 1) / 2) and
 * column t - i(i+1)/2; the square root is an exact integer one. For tm !=
 * tn, one must be a multiple r of the other: the triangle is numbered in
 * macro tiles of L = max(tm, tn) square, each holding r true tiles that are
 * numbered consecutively. The true tile grid need not fill the macro grid
 * (n = 132 with 64x32 tiles gives 3 x 5 true tiles in 3 x 3 macro tiles);
 * rather than padding the grid with tiles that do no work, the numbering
 * leaves those positions out in closed form:
 *   - tm > tn (macro tiles split along n): the only missing tiles are at the
 *     end of the last macro tile, which is the last one numbered; the count
 *     simply stops before them.
 *   - tm < tn (split along m): the missing tiles are in the last macro row,
 *     which is numbered last; that row is numbered with only its r_last
 *     existing true rows per macro tile.
 * So every t < sched_tile_count() is a tile with work, and every such tile
 * holds at least one stored element. An upper triangle with shape (tm, tn)
 * is the transpose of a lower one with shape (tn, tm): the same numbering
 * with row and col swapped.
 *
 * f64 SYR2K (square tiles): a tile on the diagonal costs the f64 kernels
 * one term instead of two (its second term is its first's transpose), so
 * those go two to a tile and every tile of the problem costs the same,
 * which is what the planner assumes. The T(T-1)/2 tiles below the diagonal
 * come first, row by row ((1,0), (2,0), (2,1), ...), then ceil(T/2) paired
 * tiles (j, j) for j = 0, 2, 4, ..., each standing for diagonal tiles j and
 * j + 1 (the last alone when T is odd): sched_tile_blocks.
 *
 * Ranges: sizes and tile indices fit in 32 bits (the planner rejects groups
 * whose tile counts do not; m and n are below 2^31).
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

/* Chunk indices are 16-bit in plan entries: the largest K a plan takes. */
#define SCHED_MAX_KCHUNKS 65535u
#define SCHED_MAX_K (SCHED_MAX_KCHUNKS * SCHED_KCHUNK) /* 33,553,920 */

/* Tile rows per band of the GEMM tile order (see the top of this file). */
#define SCHED_BAND_ROWS 8u

enum sched_kind { SCHED_GEMM = 0, SCHED_SYR2K = 1 };

/* GEMMD_F64 (enum gemmd_dtype), which this header cannot include. */
#define SCHED_DTYPE_F64 3u

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

/* The elements of C one tile covers, clipped to the problem: rows
 * [row0, row0 + rows) and columns [col0, col0 + cols). */
struct sched_span {
        uint32_t row0, rows;
        uint32_t col0, cols;
};

/* ceil(a / b) for b > 0, without overflow for any a. */
SCHED_HD uint32_t sched_cdiv(uint32_t a, uint32_t b) { return a / b + (a % b != 0); }

SCHED_HD uint32_t sched_min(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* Number of canonical K chunks of a problem (at least 1). */
SCHED_HD uint32_t sched_kchunks(uint32_t k) { return k == 0 ? 1 : sched_cdiv(k, SCHED_KCHUNK); }

/* The K elements of chunks [kc_begin, kc_end) of a problem with this k:
 * [*k0, *k0 + *klen). The last chunk of a problem may be partial. */
SCHED_HD void sched_chunk_span(uint32_t k, uint32_t kc_begin, uint32_t kc_end, uint32_t *k0,
                               uint32_t *klen)
{
        uint32_t end = kc_end * SCHED_KCHUNK;

        *k0 = kc_begin * SCHED_KCHUNK;
        if (end > k)
                end = k;
        *klen = end > *k0 ? end - *k0 : 0;
}

/* Mainloop iterations of tile_k elements that chunks [kc_begin, kc_end) of
 * a problem with this k take: whole chunks give SCHED_KCHUNK / tk each, a
 * partial last chunk cdiv(rest, tk). tk must divide SCHED_KCHUNK. */
SCHED_HD uint32_t sched_kiters(uint32_t k, uint32_t tk, uint32_t kc_begin, uint32_t kc_end)
{
        uint32_t k0, klen;

        sched_chunk_span(k, kc_begin, kc_end, &k0, &klen);
        return sched_cdiv(klen, tk);
}

/* Integer square root: the largest r with r * r <= x (digit by digit, no
 * floating point, so host and device agree bit for bit). */
SCHED_HD uint32_t sched_isqrt(uint64_t x)
{
        uint64_t r = 0, bit;
        int lz;

        if (x == 0)
                return 0;
#ifdef __CUDA_ARCH__
        lz = __clzll((long long)x);
#else
        lz = __builtin_clzll(x);
#endif
        bit = (uint64_t)1 << ((63 - lz) & ~1);
        while (bit != 0) {
                if (x >= r + bit) {
                        x -= r + bit;
                        r = (r >> 1) + bit;
                } else {
                        r >>= 1;
                }
                bit >>= 2;
        }
        return (uint32_t)r;
}

/* Position of entry t of a lower triangle numbered row by row: *i the row,
 * *j <= *i the column. t < 2^32. */
SCHED_HD void sched_tri_coord(uint32_t t, uint32_t *i, uint32_t *j)
{
        uint32_t r = (sched_isqrt(8 * (uint64_t)t + 1) - 1) / 2;

        *i = r;
        *j = (uint32_t)(t - (uint64_t)r * (r + 1) / 2);
}

/* Tile grid of a problem: *ntm tiles along m, *ntn along n. */
SCHED_HD void sched_tile_grid(const struct sched_problem *p, struct sched_shape s, uint32_t *ntm,
                              uint32_t *ntn)
{
        *ntm = sched_cdiv(p->m, s.tm);
        *ntn = sched_cdiv(p->n, s.tn);
}

/* Tiles of the lower triangle of an n x n matrix with tile shape tm x tn
 * (one a multiple of the other), as a 64-bit count (the planner checks it
 * fits in 32 bits before it uses the 32-bit functions). */
SCHED_HD uint64_t sched_tri_tiles64(uint32_t n, uint32_t tm, uint32_t tn)
{
        uint64_t mac, r, fine, last;

        if (tm >= tn) {
                r = tm / tn;
                mac = sched_cdiv(n, tm);
                fine = sched_cdiv(n, tn);
                return r * mac * (mac + 1) / 2 - (r * mac - fine);
        }
        r = tn / tm;
        mac = sched_cdiv(n, tn);
        fine = sched_cdiv(n, tm);
        last = fine - (mac - 1) * r; /* true tile rows of the last macro row */
        return r * mac * (mac - 1) / 2 + last * mac;
}

/* Tile t (< count) of the lower triangle of an n x n matrix, shape tm x tn. */
SCHED_HD void sched_tri_tile(uint32_t n, uint32_t tm, uint32_t tn, uint32_t t, uint32_t *row,
                             uint32_t *col)
{
        uint32_t r, mac, fine, last, i, j;
        uint64_t base;

        if (tm >= tn) {
                r = tm / tn;
                sched_tri_coord(t / r, &i, &j);
                *row = i;
                *col = j * r + t % r;
                return;
        }
        r = tn / tm;
        mac = sched_cdiv(n, tn);
        base = (uint64_t)r * mac * (mac - 1) / 2;
        if (t < base) {
                sched_tri_coord(t / r, &i, &j);
                *row = i * r + t % r;
                *col = j;
                return;
        }
        fine = sched_cdiv(n, tm);
        last = fine - (mac - 1) * r;
        t -= (uint32_t)base;
        *row = (mac - 1) * r + t % last;
        *col = t / last;
}

/* Whether p's diagonal tiles go two to a tile (see the top of the file). */
SCHED_HD int sched_diag_paired(const struct sched_problem *p, struct sched_shape s)
{
        return p->kind == SCHED_SYR2K && p->dtype == SCHED_DTYPE_F64 && s.tm == s.tn;
}

/* Diagonal tiles that tile (row, col) of p stands for, from (row, col) on
 * along the diagonal: 2 for a paired tile whose second exists, else 1. */
SCHED_HD uint32_t sched_tile_blocks(const struct sched_problem *p, struct sched_shape s, uint32_t row,
                                    uint32_t col)
{
        if (!sched_diag_paired(p, s) || row != col)
                return 1;
        return row + 1 < sched_cdiv(p->n, s.tm) ? 2 : 1;
}

/* Number of tiles of problem p: GEMM cdiv(m,tm)*cdiv(n,tn); SYR2K only the
 * tiles of the stored triangle (macro tiles for tm != tn, see above; every
 * one of them holds work, so there are no padding tiles). */
SCHED_HD uint32_t sched_tile_count(const struct sched_problem *p, struct sched_shape s);

/* Coordinates of tile t of p. Returns 1 when the tile holds elements to
 * compute, 0 for a padding tile of a SYR2K macro grid (no work). With the
 * numbering above that only happens for t >= sched_tile_count(p, s). */
SCHED_HD int sched_tile_coord(const struct sched_problem *p, struct sched_shape s, uint32_t t,
                              uint32_t *row, uint32_t *col);

SCHED_HD uint32_t sched_tile_count(const struct sched_problem *p, struct sched_shape s)
{
        uint32_t ntm, ntn;

        if (sched_diag_paired(p, s)) {
                const uint32_t T = sched_cdiv(p->n, s.tm);
                return (uint32_t)((uint64_t)T * (T - 1) / 2 + (T + 1) / 2);
        }
        if (p->kind == SCHED_SYR2K)
                return (uint32_t)(p->uplo ? sched_tri_tiles64(p->n, s.tn, s.tm)
                                          : sched_tri_tiles64(p->n, s.tm, s.tn));
        sched_tile_grid(p, s, &ntm, &ntn);
        return ntm * ntn;
}

SCHED_HD int sched_tile_coord(const struct sched_problem *p, struct sched_shape s, uint32_t t,
                              uint32_t *row, uint32_t *col)
{
        uint32_t ntm, ntn, h, u, band;
        uint64_t per_band;

        *row = 0;
        *col = 0;
        if (t >= sched_tile_count(p, s))
                return 0;
        if (sched_diag_paired(p, s)) {
                const uint32_t T = sched_cdiv(p->n, s.tm);
                const uint64_t below = (uint64_t)T * (T - 1) / 2;
                uint32_t i, j;
                if (t >= below) {
                        *row = *col = 2 * (uint32_t)(t - below);
                        return 1;
                }
                sched_tri_coord(t, &i, &j); /* the triangle below, one row up */
                *row = p->uplo ? j : i + 1;
                *col = p->uplo ? i + 1 : j;
                return 1;
        }
        if (p->kind == SCHED_SYR2K) {
                if (p->uplo)
                        sched_tri_tile(p->n, s.tn, s.tm, t, col, row);
                else
                        sched_tri_tile(p->n, s.tm, s.tn, t, row, col);
                return 1;
        }
        sched_tile_grid(p, s, &ntm, &ntn);
        per_band = (uint64_t)SCHED_BAND_ROWS * ntn;
        band = (uint32_t)(t / per_band);
        u = (uint32_t)(t - band * per_band);
        h = sched_min(SCHED_BAND_ROWS, ntm - band * SCHED_BAND_ROWS);
        *row = band * SCHED_BAND_ROWS + u % h;
        *col = u / h;
        return 1;
}

/* Elements of C that tile (row, col) of p covers, clipped to m x n. For a
 * SYR2K tile, only the stored elements of the span are written (see
 * sched_stored); the span always holds at least one. */
SCHED_HD struct sched_span sched_tile_span(const struct sched_problem *p, struct sched_shape s,
                                           uint32_t row, uint32_t col)
{
        struct sched_span sp;

        sp.row0 = row * s.tm;
        sp.rows = sched_min(s.tm, p->m - sp.row0);
        sp.col0 = col * s.tn;
        sp.cols = sched_min(s.tn, p->n - sp.col0);
        return sp;
}

/* Whether element (i, j) of a SYR2K's C is stored: i >= j for lower
 * (uplo 0), i <= j for upper. */
SCHED_HD int sched_stored(uint32_t uplo, uint32_t i, uint32_t j) { return uplo ? i <= j : i >= j; }

/* Whether every element of a span lies in the stored triangle, so a SYR2K
 * kernel may write the tile without a per-element mask. */
SCHED_HD int sched_span_full(uint32_t uplo, struct sched_span sp)
{
        if (uplo)
                return sp.row0 + sp.rows <= sp.col0 + 1;
        return sp.row0 + 1 >= sp.col0 + sp.cols;
}

#endif /* GEMMD_SCHED_TILES_H */
