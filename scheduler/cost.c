/*
 * cost.c - the scheduler's cost model (see cost.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemmd.h"
#include "scheduler/cost.h"

/* The defaults, in units of one bf16 mainloop iteration of a 128x128x64
 * tile, as `gemmbench calibrate` measured them on the H100
 * (bench/results/calibrate.txt). A TF32 iteration (32 of K) costs about
 * one, an exact f32 one (16
 * of K, three TF32 products on the sm_90 kernel) about three; the FFMA
 * kernel of other GPUs is slower (pass --cost there). The fixed cost, 1.4
 * us, covers the pipeline fill and an epilogue that the next tile's
 * mainloop only partly hides. The split costs are estimates: a split part
 * stores 64 KiB of f32 per chunk and the last CTA reads them all back;
 * added apart, a second kernel reads them on many CTAs a tile, and costs
 * about its launch's gap on the stream and a read of each chunk. The three
 * terms of the fill split (apart_fixed, apart_chunk, fill_crowd) were fitted
 * to lone 16-bit GEMMs of 1-32 tiles and K 2048-16384 on the H200
 * (bench/results/fill-split.txt): predicted and measured gains within 0.1.
 * A 128x192 tile's entry costs 1.4 of a 128x128 one's, half again the
 * products in 1.4 of the time, as gemmbench kernels measures them on one
 * large GEMM.
 *
 * The f64 figure is an estimate until calibrated: the H100's f64 tensor
 * cores do about 1/15 of its dense bf16 products per second, so an f64
 * iteration of 16 of K costs 15 * 16 / 64 = 3.75 bf16 ones (an f64 tile
 * of another depth scales it). */
static const struct sched_cost cost_defaults = {
        .kiter = {[SCHED_COST_F32] = 3.0,
                  [SCHED_COST_TF32] = 1.0,
                  [SCHED_COST_F16] = 1.0,
                  [SCHED_COST_BF16] = 1.0,
                  [SCHED_COST_F64] = 3.75},
        .syr2k_mainloops = 2.0,
        .tile_fixed = 4.0,
        .split_part = 2.0,
        .split_store = 2.0,
        .split_reduce = 1.0,
        .apart_fixed = 8.0,
        .apart_chunk = 1.0,
        .fill_crowd = 1.0,
        .split_min_gain = 0.02,
        .auto_gain = 0.05,
        .auto_min_tile = 24.0,
        .wide = 1.4,
};

static struct sched_cost cost_current = cost_defaults;

/* Names sched_cost_parse and sched_cost_format use, with each field. */
static const struct {
        const char *name;
        size_t off;
} cost_fields[] = {
        {"kiter_f32", offsetof(struct sched_cost, kiter[SCHED_COST_F32])},
        {"kiter_tf32", offsetof(struct sched_cost, kiter[SCHED_COST_TF32])},
        {"kiter_f16", offsetof(struct sched_cost, kiter[SCHED_COST_F16])},
        {"kiter_bf16", offsetof(struct sched_cost, kiter[SCHED_COST_BF16])},
        {"kiter_f64", offsetof(struct sched_cost, kiter[SCHED_COST_F64])},
        {"syr2k_mainloops", offsetof(struct sched_cost, syr2k_mainloops)},
        {"tile_fixed", offsetof(struct sched_cost, tile_fixed)},
        {"split_part", offsetof(struct sched_cost, split_part)},
        {"split_store", offsetof(struct sched_cost, split_store)},
        {"split_reduce", offsetof(struct sched_cost, split_reduce)},
        {"apart_fixed", offsetof(struct sched_cost, apart_fixed)},
        {"apart_chunk", offsetof(struct sched_cost, apart_chunk)},
        {"fill_crowd", offsetof(struct sched_cost, fill_crowd)},
        {"split_min_gain", offsetof(struct sched_cost, split_min_gain)},
        {"auto_gain", offsetof(struct sched_cost, auto_gain)},
        {"auto_min_tile", offsetof(struct sched_cost, auto_min_tile)},
        {"wide", offsetof(struct sched_cost, wide)},
};

#define NFIELDS (sizeof(cost_fields) / sizeof(cost_fields[0]))

static double *field(struct sched_cost *c, size_t i)
{
        return (double *)((char *)c + cost_fields[i].off);
}

struct sched_cost sched_cost_default(void) { return cost_defaults; }

int sched_cost_validate(const struct sched_cost *c)
{
        struct sched_cost tmp = *c;
        size_t i;

        for (i = 0; i < NFIELDS; i++)
                if (!isfinite(*field(&tmp, i)) || *field(&tmp, i) < 0)
                        return -EINVAL;
        for (i = 0; i < SCHED_COST_NCLASSES; i++)
                if (!(c->kiter[i] > 0))
                        return -EINVAL;
        if (!(c->tile_fixed > 0) || c->split_min_gain >= 1 || c->auto_gain >= 1 || !(c->wide > 0))
                return -EINVAL;
        return 0;
}

int sched_cost_parse(struct sched_cost *c, const char *spec)
{
        struct sched_cost tmp = *c;
        const char *p = spec;

        while (*p != '\0') {
                const char *eq = strchr(p, '=');
                size_t len, i;
                char *end;
                double v;

                if (eq == NULL)
                        return -EINVAL;
                len = (size_t)(eq - p);
                for (i = 0; i < NFIELDS; i++)
                        if (strlen(cost_fields[i].name) == len &&
                            memcmp(cost_fields[i].name, p, len) == 0)
                                break;
                if (i == NFIELDS)
                        return -EINVAL;
                errno = 0;
                v = strtod(eq + 1, &end);
                if (end == eq + 1 || errno != 0 || (*end != ',' && *end != '\0'))
                        return -EINVAL;
                *field(&tmp, i) = v;
                p = *end == ',' ? end + 1 : end;
        }
        if (sched_cost_validate(&tmp) != 0)
                return -EINVAL;
        *c = tmp;
        return 0;
}

int sched_cost_format(const struct sched_cost *c, char *buf, size_t size)
{
        struct sched_cost tmp = *c;
        size_t i, used = 0;
        int n, total = 0;

        if (size > 0)
                buf[0] = '\0';
        for (i = 0; i < NFIELDS; i++) {
                n = snprintf(buf + used, used < size ? size - used : 0, "%s%s=%g", i ? "," : "",
                             cost_fields[i].name, *field(&tmp, i));
                if (n < 0)
                        return n;
                total += n;
                used += (size_t)n;
                if (used > size)
                        used = size;
        }
        return total;
}

const struct sched_cost *sched_cost_get(void) { return &cost_current; }

int sched_cost_set(const struct sched_cost *c)
{
        if (c == NULL) {
                cost_current = cost_defaults;
                return 0;
        }
        if (sched_cost_validate(c) != 0)
                return -EINVAL;
        cost_current = *c;
        return 0;
}

int sched_cost_class(const struct sched_problem *p)
{
        switch (p->dtype) {
        case GEMMD_F32:
                return p->tf32 ? SCHED_COST_TF32 : SCHED_COST_F32;
        case GEMMD_F16:
                return SCHED_COST_F16;
        case GEMMD_BF16:
                return SCHED_COST_BF16;
        case GEMMD_F64:
                return SCHED_COST_F64;
        default:
                return -1;
        }
}

double sched_cost_entry(const struct sched_cost *c, const struct sched_problem *p,
                        struct sched_shape s, uint32_t kc_begin, uint32_t kc_end, int split)
{
        int cls = sched_cost_class(p);
        double it = c->kiter[cls < 0 ? SCHED_COST_F32 : cls];
        double cost;

        if (p->kind == SCHED_SYR2K)
                it *= c->syr2k_mainloops;
        cost = c->tile_fixed + it * sched_kiters(p->k, s.tk, kc_begin, kc_end);
        if (split)
                cost += c->split_part + c->split_store * (kc_end - kc_begin);
        return cost;
}

double sched_cost_reduce(const struct sched_cost *c, const struct sched_problem *p)
{
        return c->split_reduce * sched_kchunks(p->k);
}

/* Waves times the average entry of the group on shape s, entries scaled
 * by f; *ntiles (unless NULL) receives the group's tiles. */
static double wave_cost(const struct sched_cost *c, const struct sched_problem *probs, uint32_t n,
                        struct sched_shape s, uint32_t ctas, double f, double *ntiles)
{
        double tiles = 0, work = 0;

        for (uint32_t i = 0; i < n; i++) {
                double t = (double)sched_tile_count(&probs[i], s);

                tiles += t;
                work += t * f * sched_cost_entry(c, &probs[i], s, 0, sched_kchunks(probs[i].k), 0);
        }
        if (ntiles)
                *ntiles = tiles;
        return tiles > 0 ? ceil(tiles / ctas) * (work / tiles) : 0;
}

/* Only groups of at least this many waves of usual tiles take the wide
 * one. Smaller groups share the device with the next ones (several are in
 * flight), which fill the SMs a last wave leaves idle, so the waves the
 * wide tile saves there are not saved at all, and the service ran slower
 * when such groups took it. */
#define WIDE_MIN_WAVES 8

int sched_prefer_wide(const struct sched_cost *c, const struct sched_problem *probs, uint32_t n,
                      struct sched_shape usual, struct sched_shape wide, uint32_t ctas)
{
        double tiles, cost;

        if (n == 0 || ctas == 0 || wide.tn == 0)
                return 0;
        cost = wave_cost(c, probs, n, usual, ctas, 1.0, &tiles);
        if (tiles < (double)WIDE_MIN_WAVES * ctas)
                return 0;
        return wave_cost(c, probs, n, wide, ctas, c->wide, NULL) < cost;
}

int sched_prefer_narrow(const struct sched_problem *probs, uint32_t n, struct sched_shape usual,
                        struct sched_shape narrow, uint32_t ctas)
{
        double usual_tiles = 0, narrow_tiles = 0;

        if (n == 0 || ctas == 0 || narrow.tn == 0)
                return 0;
        for (uint32_t i = 0; i < n; i++) {
                usual_tiles += (double)sched_tile_count(&probs[i], usual);
                narrow_tiles += (double)sched_tile_count(&probs[i], narrow);
        }
        return narrow_tiles <= ctas && narrow_tiles > usual_tiles;
}
