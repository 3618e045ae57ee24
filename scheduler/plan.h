/*
 * plan.h - a group's tile schedule: per-CTA work lists built on the host.
 *
 * A plan lists, for each CTA of a persistent grouped kernel, the entries it
 * computes in order. An entry names a problem of the group, one of its
 * tiles (tiles.h) and a range of canonical K chunks [kc_begin, kc_end).
 * Unsplit entries cover every chunk of their tile. A `split` entry covers
 * part of a tile's chunks: each chunk's f32 sum goes to its own workspace
 * slot, and the CTA that arrives last at the tile (an atomic counter per
 * split tile) adds all chunk sums in chunk order and writes C, so the bits
 * match an unsplit run.
 *
 * Everything a kernel reads lives in one contiguous blob (plan->blob,
 * plan->blob_bytes) so that one asynchronous copy moves it to the device;
 * the off_* fields give each array's byte offset inside the blob.
 */
#ifndef GEMMD_SCHED_PLAN_H
#define GEMMD_SCHED_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "scheduler/tiles.h"

enum sched_mode {
        SCHED_ROUND_ROBIN = 0, /* (not SCHED_RR: <sched.h> owns that name)
                                * round-robin over the linear tile index (CUTLASS) */
        SCHED_SORTED = 1, /* round-robin after sorting by descending K */
        SCHED_LPT = 2,    /* longest processing time first over the cost model */
        SCHED_SPLIT = 3,  /* lpt + deterministic K split of an under-half-full tail;
                           * a group of one under-half-full wave has every
                           * tile cut to fill the CTAs (reduce_apart) */
        SCHED_DEVICE = 4, /* no entries: the kernel maps tiles itself */
        SCHED_SPT = 5,    /* round-robin after sorting by ascending problem cost:
                           * the quick problems' C are whole first, which
                           * early completion answers at once */
        SCHED_AUTO = 6,   /* the choice per group: sorted, unless the group
                           * has more than one wave of tiles that cost
                           * auto_min_tile on average and the cost model
                           * predicts split (lpt with a split tail) shorter
                           * by at least its auto_gain (cost.h), or it is
                           * one under-half-full wave of GEMMs (not f64) whose
                           * tiles cut to fill the CTAs are predicted
                           * shorter by that much; a wave left whole keeps
                           * only the CTAs its tiles need */
        SCHED_NMODES = 7
};

#define SCHED_NO_SPLIT UINT32_MAX

/* 16 bytes, so a kernel loads one with a single vector load. */
struct sched_entry {
        uint32_t problem;  /* index into the group's problems */
        uint32_t tile;     /* linear tile index (tiles.h) */
        uint16_t kc_begin; /* first canonical K chunk */
        uint16_t kc_end;   /* one past the last chunk */
        uint32_t split;    /* split-tile slot, or SCHED_NO_SPLIT */
};

struct sched_config {
        enum sched_mode mode;
        struct sched_shape shape;
        uint32_t ctas; /* CTAs of the persistent launch (work lists) */
};

struct sched_plan {
        /* The blob: [cta_begin | entries | split_parts | split_ws], owned by
         * the plan, grown on demand and reused by the next build. */
        void *blob;
        size_t blob_bytes, blob_cap;
        size_t off_cta_begin, off_entries, off_split_parts, off_split_ws;

        uint32_t nctas;
        uint32_t nproblems;
        uint32_t nentries;
        uint32_t nsplit;   /* split tiles */
        uint32_t ws_chunks; /* workspace slots, each shape.tm * shape.tn floats */
        /* 1: the split tiles' chunk sums are added by a pass of their own
         * after the group's CTAs (a GPU's second kernel, many CTAs to a
         * tile) instead of by each tile's last part alone; the sums and
         * their order, hence the bits, are the same. A kernel that does
         * not take it reduces as the last part, as without. */
        uint8_t reduce_apart;
        uint64_t tiles;    /* tiles of the whole group */

        /* Views into the blob. Entries of CTA i: [cta_begin[i], cta_begin[i+1]). */
        const uint32_t *cta_begin;           /* nctas + 1 */
        const struct sched_entry *entries;   /* nentries */
        const uint32_t *split_parts;         /* nsplit: entries sharing each split tile */
        const uint32_t *split_ws;            /* nsplit: first workspace slot of the tile;
                                              * chunk c of the tile uses slot split_ws + c */

        enum sched_mode mode; /* the mode it was built in (auto: the one chosen) */
        double makespan;    /* predicted, cost units (cost.h) */
        double lower_bound; /* max(total cost / ctas, costliest single entry) */
        double build_us;    /* wall time of sched_plan_build */
};

void sched_plan_init(struct sched_plan *plan);
void sched_plan_deinit(struct sched_plan *plan); /* accepts NULL */

/* Builds the plan of `n` problems for `cfg` into `plan`, reusing its blob.
 * Returns 0, -EINVAL (bad config or a problem with a zero size) or -ENOMEM.
 * Thread-compatible: distinct plans may be built concurrently. */
int sched_plan_build(struct sched_plan *plan, const struct sched_problem *probs, uint32_t n,
                     const struct sched_config *cfg);

const char *sched_mode_name(enum sched_mode mode);
/* Returns 0 and sets *mode for "rr", "sorted", "lpt", "split", "device", "spt", "auto". */
int sched_mode_parse(const char *name, enum sched_mode *mode);

#endif /* GEMMD_SCHED_PLAN_H */
