/*
 * cost.h - the scheduler's cost model: how long a plan entry is predicted
 * to take, in abstract units.
 *
 * One unit is one mainloop iteration (tile_k elements of K) of a bf16 tile
 * of the configured shape. An entry costs
 *
 *      fixed + kiters * kiter[class] * (SYR2K ? syr2k_mainloops : 1)
 *
 * where kiters counts the tile_k steps of its chunks (sched_kiters(): whole
 * chunks SCHED_KCHUNK / tk each, a partial last chunk its real K rounded up
 * to tile_k), class is the dtype (f32 exact, f32 via TF32, f16, bf16, f64) and
 * fixed is tile_fixed (pipeline fill, epilogue, fetching the next entry).
 * Every tile of a problem costs the same: edge tiles run the full MMA.
 *
 * A part of a split tile also stores the f32 sum of each of its chunks in
 * the workspace (split_store per chunk) and pays split_part once (counter
 * atomics, fences); the CTA that finishes a split tile last reads and adds
 * all its chunk sums (split_reduce per chunk of the tile).
 *
 * The defaults (sched_cost_default) are what `gemmbench calibrate`
 * measured on the H100, the split costs estimated
 * (bench/results/calibrate.txt); on another GPU, measure there:
 * sched_cost_parse() reads "name=value,..." overrides (the same names as
 * the fields, what calibrate prints and gemmd --cost takes),
 * sched_cost_set() installs a model for every later build.
 */
#ifndef GEMMD_SCHED_COST_H
#define GEMMD_SCHED_COST_H

#include <stddef.h>
#include <stdint.h>

#include "scheduler/plan.h"
#include "scheduler/tiles.h"

/* Cost classes of an entry's mainloop. */
enum sched_cost_class {
        SCHED_COST_F32 = 0,  /* exact f32 (FMA units) */
        SCHED_COST_TF32 = 1, /* f32 inputs on TF32 tensor cores */
        SCHED_COST_F16 = 2,
        SCHED_COST_BF16 = 3,
        SCHED_COST_F64 = 4,  /* f64 (DMMA tensor cores, or FMA units) */
        SCHED_COST_NCLASSES = 5
};

struct sched_cost {
        double kiter[SCHED_COST_NCLASSES]; /* per mainloop iteration, by class */
        double syr2k_mainloops;            /* a SYR2K tile runs A*B^T and B*A^T */
        double tile_fixed;                 /* per entry, whatever its K */
        double split_part;                 /* extra per part of a split tile */
        double split_store;                /* per chunk a split part stores */
        double split_reduce;               /* per chunk the final reduction adds */
        double apart_fixed;                /* a split group whose tiles are added
                                            * apart (plan.h reduce_apart): that
                                            * pass's launch and start */
        double apart_chunk;                /* ... and per chunk of its longest tile */
        double fill_crowd;                 /* a part's k-loop of such a group takes
                                            * (1 + fill_crowd * parts / ctas) of
                                            * a lone tile's: the parts share the
                                            * memory system a lone tile has alone */
        double split_min_gain; /* split mode keeps its K splits only when they
                                * shorten the predicted makespan by this
                                * fraction (0.02 = 2%) */
        double auto_gain;      /* auto mode takes split's plan over sorted's
                                * only when it is predicted shorter by this
                                * fraction (0.05 = 5%) */
        double auto_min_tile;  /* ... and only for groups whose tiles cost
                                * this much on average: long enough that
                                * the k-loop the model counts outweighs the
                                * memory traffic and fixed costs it does not */
        double wide;           /* an entry of the wide tile (a backend's
                                * second shape, e.g. 128x192 against
                                * 128x128) against the same entry of the
                                * usual one: sched_prefer_wide */
};

/* The built-in defaults. */
struct sched_cost sched_cost_default(void);

/* Returns 0 when every field is finite, the kiter costs and tile_fixed are
 * > 0 and the others >= 0; -EINVAL otherwise. */
int sched_cost_validate(const struct sched_cost *c);

/* Applies overrides "name=value[,name=value...]" (names as the fields;
 * kiter_f32, kiter_tf32, kiter_f16, kiter_bf16, kiter_f64 for the array) to *c.
 * Returns 0, or -EINVAL for an unknown name, a bad number or a model that
 * fails sched_cost_validate (then *c is unchanged). */
int sched_cost_parse(struct sched_cost *c, const char *spec);

/* Writes the model as "name=value,..." (the form sched_cost_parse reads)
 * into buf; returns what snprintf returns. */
int sched_cost_format(const struct sched_cost *c, char *buf, size_t size);

/* The process-wide model that sched_plan_build uses: the defaults until
 * sched_cost_set() installs another. sched_cost_set(NULL) restores the
 * defaults. Returns 0 or -EINVAL (invalid model, nothing changed). Not
 * synchronized with builds: install the model before starting threads that
 * build plans (or build with sched_plan_build_cost). */
const struct sched_cost *sched_cost_get(void);
int sched_cost_set(const struct sched_cost *c);

/* Class of a problem's mainloop (SCHED_COST_F32 .. SCHED_COST_F64), or -1
 * for an unknown dtype. */
int sched_cost_class(const struct sched_problem *p);

/* Predicted cost of one entry of p covering chunks [kc_begin, kc_end):
 * split != 0 for a part of a split tile (adds split_part and split_store). */
double sched_cost_entry(const struct sched_cost *c, const struct sched_problem *p,
                        struct sched_shape s, uint32_t kc_begin, uint32_t kc_end, int split);

/* Predicted cost of the final reduction of a split tile of p (all its
 * chunks), paid by the CTA that finishes the tile. */
double sched_cost_reduce(const struct sched_cost *c, const struct sched_problem *p);

/*
 * Whether a group runs faster on the wide tile than on the usual one
 * (both of the backend; wide has the same tm and tk and a larger tn),
 * predicted: for each shape, its waves (ceil(tiles / ctas)) times its
 * average entry (unsplit), an entry of the wide tile costing c->wide
 * times the usual one's. A wide tile loads a third less per product, so
 * it wins on groups of many large tiles; it loses where its coarser
 * edges waste work (n = 512 takes three 192-wide tiles, 576 columns) or
 * its fewer tiles leave SMs idle. Groups under 8 waves of usual tiles keep
 * the usual tile: the groups in flight with them fill a last wave's idle
 * SMs, so the wide tile saves them nothing (measured). Returns 1 (wide),
 * 0 (usual), or 0 for n == 0 or ctas == 0.
 */
int sched_prefer_wide(const struct sched_cost *c, const struct sched_problem *probs, uint32_t n,
                      struct sched_shape usual, struct sched_shape wide, uint32_t ctas);

/*
 * Whether a group of n problems should take a backend's narrow tile
 * (same tm and tk as usual, a smaller tn) instead of its usual one: only
 * when the narrow tiles still fit one wave of ctas CTAs and are more than
 * the usual ones. Such a group's time is one tile's, and a narrow tile
 * loads less per k-step and stores less C, on more SMs; a group of more
 * waves gains nothing from more, smaller tiles. Returns 1 (narrow) or 0
 * (usual; also for n == 0, ctas == 0 or a narrow shape of all zero).
 */
int sched_prefer_narrow(const struct sched_problem *probs, uint32_t n, struct sched_shape usual,
                        struct sched_shape narrow, uint32_t ctas);

/* sched_plan_build with an explicit cost model instead of sched_cost_get().
 * Same contract; -EINVAL also for a model failing sched_cost_validate.
 *
 * What both accept (anything else is -EINVAL): 1 <= ctas <= 65536; tile
 * sides > 0 with tk dividing SCHED_KCHUNK; a group holding a SYR2K needs
 * one of tm, tn a multiple of the other (GEMM-only groups take any shape);
 * per problem a known kind, dtype and uplo, 1 <= m, n < 2^31 (SYR2K m ==
 * n), 1 <= k <= SCHED_MAX_K (65535 chunks of 512: chunk indices are 16-bit
 * in entries), fewer than 2^32 tiles; for the group, tiles + 2 * ctas below
 * 2^32. An empty group (n == 0) gives an empty plan. */
int sched_plan_build_cost(struct sched_plan *plan, const struct sched_problem *probs, uint32_t n,
                          const struct sched_config *cfg, const struct sched_cost *cost);

#endif /* GEMMD_SCHED_COST_H */
