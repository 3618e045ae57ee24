/*
 * plan.c - builds a group's tile schedule (see plan.h for the plan, cost.h
 * for the cost model, tiles.h for the tiles).
 *
 * A build runs in four steps: validate the group and size the plan; lay
 * out the plan's one allocation; assign tiles to CTAs as the mode says,
 * predicting each CTA's load with the cost model; emit the per-CTA entry
 * lists into the blob. Nothing is allocated per tile: the allocation
 * behind plan->blob holds the blob (the first blob_bytes bytes, the part a
 * kernel reads) and, after it, the build's scratch space; it grows with
 * realloc when a bigger group comes and is reused otherwise.
 *
 * Modes
 * -----
 * rr      global tile g (problems in group order, tiles in tiles.h order)
 *         goes to CTA g % ctas, as CUTLASS's grouped problem visitor does.
 * sorted  the same after a stable sort of the problems by descending K.
 * lpt     longest processing time first: problems by descending tile cost
 *         (stable), each problem's tiles in order, each to the CTA with the
 *         smallest predicted load (a 4-ary min-heap). Tiles of one problem
 *         cost the same, so which of them goes where does not change the
 *         makespan; the dealing keeps them together: a CTA keeps taking
 *         tiles of the same problem while it is still the least loaded, and
 *         when the loads lie within one tile cost of each other, whole
 *         rounds of ctas tiles are dealt at once, CTA c taking tiles c,
 *         c + ctas, c + 2 ctas, ... of the rounds. Both are LPT with a
 *         particular tie-break, so the makespan is LPT's; the runs spare the
 *         kernel a switch of problem (operand descriptors) per tile, and in
 *         whole rounds the CTAs run neighbouring tiles at the same time, as
 *         in rr, so they share operand panels in L2 (contiguous runs spread
 *         them over the problem and lose that reuse). O(runs log ctas).
 * split   lpt; then, if the last wave is less than half full, the tiles of
 *         that wave are taken off and dealt again with their K ranges cut
 *         at canonical chunk boundaries (see split_tail below); f64 tiles
 *         stay whole (their K is summed in one pass). A group of one wave
 *         of GEMMs that fills at most half the CTAs is instead cut whole
 *         (fill below): each tile into parts of even chunk counts, one part a
 *         CTA, as many CTAs as it takes, the chunk sums added apart.
 * device  no entries; the kernel maps tile indices itself. The prediction
 *         is rr's, the order in which the kernel walks the tiles.
 *
 * makespan is the largest predicted CTA load; lower_bound is the larger of
 * the plan's total cost over ctas and its costliest single entry, so each
 * mode is measured against a bound for its own entries (split's entries
 * are smaller and its total includes the split overheads).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemmd.h"
#include "scheduler/cost.h"
#include "scheduler/plan.h"

_Static_assert(SCHED_DTYPE_F64 == GEMMD_F64, "tiles.h pairs f64 diagonal tiles by this code");

/* Largest CTA count a plan takes. */
#define MAX_CTAS 65536u
/* Sizes m and n stay below this, so tile spans never overflow 32 bits. */
#define MAX_MN (1u << 31)

/* Per-problem facts the assignment needs. */
struct pinfo {
        double cost;     /* one unsplit tile */
        uint32_t tiles;  /* sched_tile_count */
        uint32_t chunks; /* sched_kchunks */
};

/* A problem index with its sort key. */
struct skey {
        double key;
        uint32_t idx;
        uint32_t pad;
};

/* Heap node: a CTA and its predicted load. */
struct hnode {
        double load;
        uint32_t cta;
        uint32_t pad;
};

/* Tiles t0, t0 + stride, ... (count of them) of a problem, dealt to one
 * CTA in that order; in split mode the first `keep` stay there and the
 * rest are retaken. */
struct run {
        uint32_t cta, problem, t0, stride, count, keep;
};

/* A tail tile retaken by split mode. */
struct ttile {
        double cost;
        uint32_t problem, tile;
};

/* An entry dealt by split mode: a whole tile or one part of a split tile. */
struct part {
        double cost;
        uint32_t problem, tile;
        uint16_t kb, ke;
        uint32_t slot; /* split slot, or SCHED_NO_SPLIT */
        uint32_t cta;
        uint32_t pad;
};

/* Everything one build works with. */
struct build {
        struct sched_plan *plan;
        const struct sched_problem *probs;
        uint32_t n, ctas;
        struct sched_shape shape;
        const struct sched_cost *cost;
        uint64_t tiles;
        double total; /* unsplit cost of all tiles */
        double maxcost;

        /* Blob arrays. */
        uint32_t *cta_begin;
        struct sched_entry *entries;
        uint32_t *split_parts, *split_ws;

        /* Scratch. */
        struct pinfo *info;
        struct skey *keys;
        struct hnode *heap;
        double *loads, *base;
        uint32_t *cursor;
        struct run *runs;
        uint32_t nruns;
        struct ttile *tail;
        struct part *parts[2];
        double *red_finish;
        uint32_t *red_cta;

        /* Results. */
        uint32_t nentries, nsplit, ws_chunks;
        uint8_t reduce_apart;
        double makespan, lower_bound;
};

static size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

/* Reserves `bytes` at *off, 16-byte aligned; returns the region's offset. */
static size_t take(size_t *off, size_t bytes)
{
        size_t o = *off;

        *off = align16(o + bytes);
        return o;
}

static double now_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

void sched_plan_init(struct sched_plan *plan) { memset(plan, 0, sizeof(*plan)); }

void sched_plan_deinit(struct sched_plan *plan)
{
        if (plan == NULL)
                return;
        free(plan->blob);
        memset(plan, 0, sizeof(*plan));
}

static const char *const mode_names[SCHED_NMODES] = {"rr", "sorted", "lpt", "split", "device", "spt", "auto"};

const char *sched_mode_name(enum sched_mode mode)
{
        return (unsigned)mode < SCHED_NMODES ? mode_names[mode] : "?";
}

int sched_mode_parse(const char *name, enum sched_mode *mode)
{
        int i;

        for (i = 0; i < SCHED_NMODES; i++) {
                if (strcmp(name, mode_names[i]) == 0) {
                        *mode = (enum sched_mode)i;
                        return 0;
                }
        }
        return -EINVAL;
}

/* Checks one problem against the shape and returns its tile count in
 * *tiles. Returns 0 or -EINVAL. */
static int check_problem(const struct sched_problem *p, struct sched_shape s, uint64_t *tiles)
{
        uint64_t t;

        if (p->kind > SCHED_SYR2K || p->dtype > GEMMD_F64 || p->uplo > 1 || p->tf32 > 1)
                return -EINVAL;
        if (p->m == 0 || p->n == 0 || p->k == 0 || p->m >= MAX_MN || p->n >= MAX_MN ||
            p->k > SCHED_MAX_K)
                return -EINVAL;
        if (p->kind == SCHED_SYR2K) {
                uint32_t big = s.tm > s.tn ? s.tm : s.tn, small = s.tm > s.tn ? s.tn : s.tm;

                if (p->m != p->n || big % small != 0)
                        return -EINVAL;
                t = p->uplo ? sched_tri_tiles64(p->n, s.tn, s.tm)
                            : sched_tri_tiles64(p->n, s.tm, s.tn);
        } else {
                t = (uint64_t)sched_cdiv(p->m, s.tm) * sched_cdiv(p->n, s.tn);
        }
        if (t > UINT32_MAX)
                return -EINVAL;
        *tiles = sched_tile_count(p, s); /* t or fewer (paired f64 diagonal tiles) */
        return 0;
}

/* Validates the whole build request and counts its tiles into b->tiles. */
static int check(struct build *b, const struct sched_config *cfg)
{
        uint64_t t;
        uint32_t i;
        int rc;

        if ((unsigned)cfg->mode >= SCHED_NMODES || cfg->ctas == 0 || cfg->ctas > MAX_CTAS)
                return -EINVAL;
        if (cfg->shape.tm == 0 || cfg->shape.tn == 0 || cfg->shape.tk == 0 ||
            SCHED_KCHUNK % cfg->shape.tk != 0)
                return -EINVAL;
        if (b->n > 0 && b->probs == NULL)
                return -EINVAL;
        if (sched_cost_validate(b->cost) != 0)
                return -EINVAL;
        b->tiles = 0;
        for (i = 0; i < b->n; i++) {
                rc = check_problem(&b->probs[i], cfg->shape, &t);
                if (rc != 0)
                        return rc;
                b->tiles += t;
                /* entries (up to tiles + 2 * ctas in split mode) and
                 * cta_begin values are 32-bit */
                if (b->tiles > UINT32_MAX - 2 * (uint64_t)cfg->ctas - 1)
                        return -EINVAL;
        }
        return 0;
}

/* Lays out the allocation (blob bound, then scratch), grows it if needed
 * and points the build's arrays into it. The blob proper is laid out again,
 * exactly, by layout_blob once the entry count is known. */
static int reserve(struct build *b, enum sched_mode mode)
{
        struct sched_plan *plan = b->plan;
        size_t c = b->ctas, tiles = (size_t)b->tiles, off = 0, maxent, o[16];
        size_t need;
        char *m;
        int split = mode == SCHED_SPLIT, lpt = mode == SCHED_LPT || split;

        maxent = split ? tiles + 2 * c : mode == SCHED_DEVICE ? 0 : tiles;
        take(&off, (c + 1) * sizeof(uint32_t));
        take(&off, maxent * sizeof(struct sched_entry));
        take(&off, c * sizeof(uint32_t)); /* split_parts: at most ctas split tiles */
        take(&off, c * sizeof(uint32_t));
        o[0] = take(&off, b->n * sizeof(struct pinfo));
        o[1] = take(&off, b->n * sizeof(struct skey));
        o[2] = take(&off, c * sizeof(struct hnode));
        o[3] = take(&off, c * sizeof(double));
        o[4] = take(&off, c * sizeof(double));
        o[5] = take(&off, c * sizeof(uint32_t));
        o[6] = take(&off, (lpt ? tiles : 0) * sizeof(struct run));
        o[7] = take(&off, (split ? tiles : 0) * sizeof(struct ttile));
        o[8] = take(&off, (split ? tiles + 2 * c : 0) * sizeof(struct part));
        o[9] = take(&off, (split ? tiles + 2 * c : 0) * sizeof(struct part));
        o[10] = take(&off, (split ? c : 0) * sizeof(double));
        o[11] = take(&off, (split ? c : 0) * sizeof(uint32_t));
        need = off;

        if (need > plan->blob_cap) {
                size_t cap = plan->blob_cap * 2 > need ? plan->blob_cap * 2 : need;
                void *p = realloc(plan->blob, cap);

                if (p == NULL)
                        return -ENOMEM;
                plan->blob = p;
                plan->blob_cap = cap;
        }
        m = plan->blob;
        b->info = (struct pinfo *)(m + o[0]);
        b->keys = (struct skey *)(m + o[1]);
        b->heap = (struct hnode *)(m + o[2]);
        b->loads = (double *)(m + o[3]);
        b->base = (double *)(m + o[4]);
        b->cursor = (uint32_t *)(m + o[5]);
        b->runs = (struct run *)(m + o[6]);
        b->tail = (struct ttile *)(m + o[7]);
        b->parts[0] = (struct part *)(m + o[8]);
        b->parts[1] = (struct part *)(m + o[9]);
        b->red_finish = (double *)(m + o[10]);
        b->red_cta = (uint32_t *)(m + o[11]);
        return 0;
}

/* Reserves an array of `bytes` in the blob and zeroes the alignment gap
 * after it, so that the blob's bytes depend on the plan alone. */
static size_t take_zeroed(char *blob, size_t *off, size_t bytes)
{
        size_t o = take(off, bytes);

        memset(blob + o + bytes, 0, *off - o - bytes);
        return o;
}

/* Lays out the blob for b->nentries entries and b->nsplit split tiles:
 * [cta_begin | entries | split_parts | split_ws], each 16-byte aligned. */
static void layout_blob(struct build *b)
{
        struct sched_plan *plan = b->plan;
        size_t off = 0;
        char *m = plan->blob;

        plan->off_cta_begin = take_zeroed(m, &off, (b->ctas + (size_t)1) * sizeof(uint32_t));
        plan->off_entries = take_zeroed(m, &off, b->nentries * sizeof(struct sched_entry));
        plan->off_split_parts = take_zeroed(m, &off, b->nsplit * sizeof(uint32_t));
        plan->off_split_ws = take_zeroed(m, &off, b->nsplit * sizeof(uint32_t));
        plan->blob_bytes = off;
        b->cta_begin = (uint32_t *)(m + plan->off_cta_begin);
        b->entries = (struct sched_entry *)(m + plan->off_entries);
        b->split_parts = (uint32_t *)(m + plan->off_split_parts);
        b->split_ws = (uint32_t *)(m + plan->off_split_ws);
}

/* Fills b->info and the group's unsplit total and costliest tile. */
static void measure(struct build *b)
{
        uint32_t i;

        b->total = 0;
        b->maxcost = 0;
        for (i = 0; i < b->n; i++) {
                const struct sched_problem *p = &b->probs[i];
                struct pinfo *in = &b->info[i];

                in->tiles = sched_tile_count(p, b->shape);
                in->chunks = sched_kchunks(p->k);
                in->cost = sched_cost_entry(b->cost, p, b->shape, 0, in->chunks, 0);
                b->total += in->cost * in->tiles;
                if (in->cost > b->maxcost)
                        b->maxcost = in->cost;
        }
}

static int key_desc(const void *x, const void *y)
{
        const struct skey *a = x, *b = y;

        if (a->key != b->key)
                return a->key > b->key ? -1 : 1;
        return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Orders the problems in b->keys: by group index (by == 0), by descending
 * K (by == 1), by descending tile cost (by == 2) or by ascending problem
 * cost, all its tiles (by == 3); ties keep group order. */
static void order_problems(struct build *b, int by)
{
        uint32_t i;

        for (i = 0; i < b->n; i++) {
                b->keys[i].idx = i;
                b->keys[i].key = by == 1   ? (double)b->probs[i].k
                                 : by == 2 ? b->info[i].cost
                                 : by == 3 ? -b->info[i].cost * (double)b->info[i].tiles
                                           : 0;
        }
        if (by != 0)
                qsort(b->keys, b->n, sizeof(*b->keys), key_desc);
}

static double max_of(const double *v, uint32_t n)
{
        double m = 0;
        uint32_t i;

        for (i = 0; i < n; i++)
                if (v[i] > m)
                        m = v[i];
        return m;
}

/* n >= 1 */
static double min_of(const double *v, uint32_t n)
{
        double m = v[0];
        uint32_t i;

        for (i = 1; i < n; i++)
                if (v[i] < m)
                        m = v[i];
        return m;
}

static double sum_of(const double *v, uint32_t n)
{
        double s = 0;
        uint32_t i;

        for (i = 0; i < n; i++)
                s += v[i];
        return s;
}

static double bound(double total, uint32_t ctas, double maxentry)
{
        double avg = total / ctas;

        return avg > maxentry ? avg : maxentry;
}

/* Round-robin over the problems in b->keys order: global tile g to CTA
 * g % ctas. Writes the entries unless `predict_only` (device mode). */
static void deal_rr(struct build *b, int predict_only)
{
        uint32_t c = 0, q = 0, i, t, per, rem;

        memset(b->loads, 0, b->ctas * sizeof(double));
        b->nentries = predict_only ? 0 : (uint32_t)b->tiles;
        b->nsplit = 0;
        b->ws_chunks = 0; /* (auto deals sorted again after a split plan) */
        layout_blob(b);
        per = (uint32_t)(b->tiles / b->ctas);
        rem = (uint32_t)(b->tiles % b->ctas);
        for (i = 0; i <= b->ctas; i++)
                b->cta_begin[i] = predict_only ? 0 : i * per + (i < rem ? i : rem);
        for (i = 0; i < b->n; i++) {
                uint32_t p = b->keys[i].idx;
                const struct pinfo *in = &b->info[p];
                struct sched_entry e = {p, 0, 0, (uint16_t)in->chunks, SCHED_NO_SPLIT};

                for (t = 0; t < in->tiles; t++) {
                        b->loads[c] += in->cost;
                        if (!predict_only) {
                                e.tile = t;
                                b->entries[b->cta_begin[c] + q] = e;
                        }
                        if (++c == b->ctas) {
                                c = 0;
                                q++;
                        }
                }
        }
        b->makespan = max_of(b->loads, b->ctas);
        b->lower_bound = bound(b->total, b->ctas, b->maxcost);
}

/*
 * The CTA heap is 4-ary and ordered by load alone (equal loads keep
 * whatever order the heap operations leave, which is deterministic): four
 * children per node halve the depth, and choosing the least child with
 * conditional moves leaves one hard-to-predict branch per level, which is
 * what dealing ten thousand tiles in well under a millisecond needs.
 */
static void sift_down(struct hnode *h, uint32_t n, uint32_t i)
{
        struct hnode x = h[i];

        for (;;) {
                uint32_t c = 4 * i + 1, best, a, d;

                if (c + 3 < n) {
                        a = h[c + 1].load < h[c].load ? c + 1 : c;
                        d = h[c + 3].load < h[c + 2].load ? c + 3 : c + 2;
                        best = h[d].load < h[a].load ? d : a;
                } else if (c < n) {
                        best = c;
                        for (a = c + 1; a < n; a++)
                                if (h[a].load < h[best].load)
                                        best = a;
                } else {
                        break;
                }
                if (!(h[best].load < x.load))
                        break;
                h[i] = h[best];
                i = best;
        }
        h[i] = x;
}

/* The least load in the heap after its root: the least of the root's
 * children. */
static double second_load(const struct hnode *h, uint32_t n)
{
        double s = h[1].load;
        uint32_t i;

        for (i = 2; i <= 4 && i < n; i++)
                if (h[i].load < s)
                        s = h[i].load;
        return s;
}

/* Builds a heap of the CTAs with loads v. */
static void heapify(struct hnode *h, const double *v, uint32_t n)
{
        uint32_t i;

        for (i = 0; i < n; i++) {
                h[i].load = v[i];
                h[i].cta = i;
                h[i].pad = 0;
        }
        for (i = n / 4 + 1; i-- > 0;)
                if (i < n)
                        sift_down(h, n, i);
}

static void add_run(struct build *b, uint32_t cta, uint32_t p, uint32_t t0, uint32_t stride, uint32_t count)
{
        struct run *r = &b->runs[b->nruns++];

        r->cta = cta;
        r->problem = p;
        r->t0 = t0;
        r->stride = stride;
        r->count = count;
        r->keep = count;
}

/* Deals the tiles of problem p (cost u each) by LPT; see the top of the
 * file. *maxload tracks the largest load. */
static void deal_problem(struct build *b, uint32_t p, double u, double *maxload)
{
        struct hnode *h = b->heap;
        uint32_t C = b->ctas, rem = b->info[p].tiles, t = 0, i;

        while (rem > 0) {
                double l = h[0].load, s, room;
                uint32_t r;

                if (rem >= C && *maxload - l <= u) {
                        /* Every CTA gets q tiles: the smallest load plus
                         * one tile reaches the largest, so LPT would deal
                         * whole rounds. Round by round, as rr would. */
                        uint32_t q = rem / C;

                        for (i = 0; i < C; i++)
                                add_run(b, i, p, t + i, C, q);
                        for (i = 0; i < C; i++)
                                b->loads[h[i].cta] = h[i].load + q * u;
                        heapify(h, b->loads, C);
                        *maxload = max_of(b->loads, C);
                        t += q * C;
                        rem -= q * C;
                        continue;
                }
                if (C == 1) {
                        r = rem;
                } else {
                        s = second_load(h, C);
                        if (s - l < u) {
                                r = 1; /* the usual case: no division */
                        } else {
                                room = (s - l) / u;
                                r = room >= rem ? rem : (uint32_t)room + 1;
                                if (r > rem)
                                        r = rem;
                        }
                }
                add_run(b, h[0].cta, p, t, 1, r);
                h[0].load = l + r * u;
                if (h[0].load > *maxload)
                        *maxload = h[0].load;
                sift_down(h, C, 0);
                t += r;
                rem -= r;
        }
}

/* LPT over the whole group into b->runs; final loads into b->loads. */
static void deal_lpt(struct build *b)
{
        double maxload = 0;
        uint32_t i;

        memset(b->loads, 0, b->ctas * sizeof(double));
        heapify(b->heap, b->loads, b->ctas);
        b->nruns = 0;
        for (i = 0; i < b->n; i++) {
                uint32_t p = b->keys[i].idx;

                deal_problem(b, p, b->info[p].cost, &maxload);
        }
        for (i = 0; i < b->ctas; i++)
                b->loads[b->heap[i].cta] = b->heap[i].load;
        b->makespan = max_of(b->loads, b->ctas);
        b->lower_bound = bound(b->total, b->ctas, b->maxcost);
}

/* Writes the kept part of b->runs, then `np` parts, as per-CTA lists. */
static void emit(struct build *b, const struct part *parts, uint32_t np)
{
        uint32_t i, j, sum = 0;

        memset(b->cta_begin, 0, (b->ctas + (size_t)1) * sizeof(uint32_t));
        for (i = 0; i < b->nruns; i++)
                b->cta_begin[b->runs[i].cta] += b->runs[i].keep;
        for (i = 0; i < np; i++)
                b->cta_begin[parts[i].cta]++;
        for (i = 0; i < b->ctas; i++) {
                uint32_t c = b->cta_begin[i];

                b->cta_begin[i] = sum;
                b->cursor[i] = sum;
                sum += c;
        }
        b->cta_begin[b->ctas] = sum;
        for (i = 0; i < b->nruns; i++) {
                const struct run *r = &b->runs[i];
                struct sched_entry e = {r->problem, 0, 0, (uint16_t)b->info[r->problem].chunks,
                                        SCHED_NO_SPLIT};
                struct sched_entry *out = &b->entries[b->cursor[r->cta]];

                for (j = 0; j < r->keep; j++) {
                        e.tile = r->t0 + j * r->stride;
                        out[j] = e;
                }
                b->cursor[r->cta] += r->keep;
        }
        for (i = 0; i < np; i++) {
                const struct part *pt = &parts[i];
                struct sched_entry e = {pt->problem, pt->tile, pt->kb, pt->ke, pt->slot};

                b->entries[b->cursor[pt->cta]++] = e;
        }
}

/* Takes the tiles that end after time lmin off their CTAs: runs keep their
 * earlier tiles, b->base gets the loads that remain. Returns the number of
 * tail tiles (in b->tail) and their cost in *work. */
static uint32_t take_tail(struct build *b, double lmin, double *work)
{
        double *orig = b->loads, limit = lmin + lmin * 1e-9;
        uint32_t i, j, nt = 0;

        memset(orig, 0, b->ctas * sizeof(double));
        memset(b->base, 0, b->ctas * sizeof(double));
        *work = 0;
        for (i = 0; i < b->nruns; i++) {
                struct run *r = &b->runs[i];
                double u = b->info[r->problem].cost, start = orig[r->cta], fit;

                fit = start < limit ? (limit - start) / u : 0;
                r->keep = fit >= r->count ? r->count : (uint32_t)fit;
                for (j = r->keep; j < r->count; j++) {
                        b->tail[nt].cost = u;
                        b->tail[nt].problem = r->problem;
                        b->tail[nt].tile = r->t0 + j * r->stride;
                        nt++;
                        *work += u;
                }
                orig[r->cta] = start + r->count * u;
                b->base[r->cta] += r->keep * u;
        }
        return nt;
}

static int part_desc(const void *x, const void *y)
{
        const struct part *a = x, *b = y;

        if (a->cost != b->cost)
                return a->cost > b->cost ? -1 : 1;
        if (a->problem != b->problem)
                return a->problem < b->problem ? -1 : 1;
        if (a->tile != b->tile)
                return a->tile < b->tile ? -1 : 1;
        return (a->kb > b->kb) - (a->kb < b->kb);
}

/* How many parts a tail tile of problem p, cost u, is cut into when no
 * CTA should run past `target` and the least loaded one already carries
 * `least` (its kept tiles): the fewest parts whose cost plus the tile's
 * reduction fit between the two (1: leave the tile whole), at most the
 * tile's chunks and the CTA count. Measured from that load, not from zero:
 * after whole rounds of one problem every CTA keeps the same load, and a
 * last wave of tiles that each fit under the target from zero would
 * otherwise never be cut. */
static uint32_t parts_for(const struct build *b, uint32_t p, double u, double least, double target)
{
        const struct sched_problem *pr = &b->probs[p];
        uint32_t ch = b->info[p].chunks, c, pc;
        double first, per, room;

        /* f64 sums all of K in one pass (docs/design.md): never cut */
        if (least + u <= target || ch < 2 || pr->dtype == GEMMD_F64)
                return 1;
        /* a split part costs first + per for each (whole) chunk */
        first = sched_cost_entry(b->cost, pr, b->shape, 0, 0, 1);
        per = sched_cost_entry(b->cost, pr, b->shape, 0, 1, 1) - first;
        room = target - least - first - sched_cost_reduce(b->cost, pr);
        c = room >= per * ch ? ch : room >= per ? (uint32_t)(room / per) : 1;
        pc = sched_cdiv(ch, c);
        return pc < b->ctas ? pc : b->ctas;
}

/* One way to deal the tail: every tail tile that would end past `target`
 * on the least loaded CTA (kept load `least`) is cut into parts_for()
 * parts of even chunk counts, and every whole tile and part goes,
 * costliest first, to the least loaded CTA on top of the kept loads; each
 * split tile's reduction is charged to the CTA whose part of it ends
 * last. Writes the entries to `out` and returns their number, or 0 when
 * they would be more than `cap`, or when no tile would be cut (*makespan
 * then -1: no split plan at this target, nor at any higher one, since
 * parts_for cuts less as the target grows); the predicted makespan goes
 * to *makespan, the number of split tiles to *nsplit. */
static uint32_t deal_tail(struct build *b, uint32_t nt, double least, double target, uint32_t cap,
                          struct part *out, double *makespan, uint32_t *nsplit)
{
        struct hnode *h = b->heap;
        uint32_t i, j, np = 0, slots = 0;

        *nsplit = 0;
        for (i = 0; i < nt; i++)
                np += parts_for(b, b->tail[i].problem, b->tail[i].cost, least, target);
        if (np == nt) { /* every tile stays whole */
                *makespan = -1;
                return 0;
        }
        if (np > cap)
                return 0;
        np = 0;
        for (i = 0; i < nt; i++) {
                const struct ttile *tt = &b->tail[i];
                const struct sched_problem *p = &b->probs[tt->problem];
                uint32_t ch = b->info[tt->problem].chunks, q, extra, kb = 0;
                uint32_t pc = parts_for(b, tt->problem, tt->cost, least, target);

                if (pc < 2) {
                        struct part *o = &out[np++];

                        o->cost = tt->cost;
                        o->problem = tt->problem;
                        o->tile = tt->tile;
                        o->kb = 0;
                        o->ke = (uint16_t)ch;
                        o->slot = SCHED_NO_SPLIT;
                        continue;
                }
                /* Even chunk counts; the longer parts first, so the part
                 * holding a partial last chunk is a short one. */
                q = ch / pc;
                extra = ch % pc;
                for (j = 0; j < pc; j++) {
                        struct part *o = &out[np++];
                        uint32_t len = q + (j < extra);

                        o->problem = tt->problem;
                        o->tile = tt->tile;
                        o->kb = (uint16_t)kb;
                        o->ke = (uint16_t)(kb + len);
                        o->slot = slots;
                        o->cost = sched_cost_entry(b->cost, p, b->shape, kb, kb + len, 1);
                        kb += len;
                }
                b->red_finish[slots] = -1;
                slots++;
        }
        qsort(out, np, sizeof(*out), part_desc);
        heapify(h, b->base, b->ctas);
        for (i = 0; i < np; i++) {
                struct part *o = &out[i];
                double end = h[0].load + o->cost;

                o->cta = h[0].cta;
                h[0].load = end;
                sift_down(h, b->ctas, 0);
                if (o->slot != SCHED_NO_SPLIT && end > b->red_finish[o->slot]) {
                        b->red_finish[o->slot] = end;
                        b->red_cta[o->slot] = o->cta;
                }
        }
        for (i = 0; i < b->ctas; i++)
                b->loads[h[i].cta] = h[i].load;
        for (i = 0; i < np; i++) {
                const struct part *o = &out[i];

                /* the first part of each split tile charges its reduction */
                if (o->slot != SCHED_NO_SPLIT && o->kb == 0)
                        b->loads[b->red_cta[o->slot]] +=
                                sched_cost_reduce(b->cost, &b->probs[o->problem]);
        }
        *makespan = max_of(b->loads, b->ctas);
        *nsplit = slots;
        return np;
}

/* Emits the split plan whose tail entries are `parts` (np of them, nsplit
 * split tiles, predicted makespan ms): the kept runs and the parts, the
 * split bookkeeping, and the bound. For the bound, a split tile counts as
 * one entry of its cheapest part plus its reduction: no plan of these
 * entries ends before that part and the reduction after it. */
static void finish_split(struct build *b, uint32_t nt, const struct part *parts, uint32_t np,
                         uint32_t nsplit, double ms)
{
        double total = sum_of(b->base, b->ctas), maxentry = 0, *cheapest = b->red_finish;
        uint32_t i, ws = 0;

        b->nentries = (uint32_t)(b->tiles - nt) + np;
        b->nsplit = nsplit;
        layout_blob(b);
        emit(b, parts, np);

        memset(b->split_parts, 0, nsplit * sizeof(uint32_t));
        for (i = 0; i < nsplit; i++)
                cheapest[i] = HUGE_VAL;
        for (i = 0; i < np; i++) {
                const struct part *pt = &parts[i];

                total += pt->cost;
                if (pt->slot == SCHED_NO_SPLIT) {
                        maxentry = fmax(maxentry, pt->cost);
                        continue;
                }
                b->split_parts[pt->slot]++;
                cheapest[pt->slot] = fmin(cheapest[pt->slot], pt->cost);
                if (pt->kb == 0)
                        b->split_ws[pt->slot] = b->info[pt->problem].chunks;
        }
        for (i = 0; i < np; i++) {
                const struct part *pt = &parts[i];
                double red;

                if (pt->slot == SCHED_NO_SPLIT || pt->kb != 0)
                        continue;
                red = sched_cost_reduce(b->cost, &b->probs[pt->problem]);
                total += red;
                maxentry = fmax(maxentry, cheapest[pt->slot] + red);
        }
        /* chunk c of split tile i uses workspace slot split_ws[i] + c */
        for (i = 0; i < nsplit; i++) {
                uint32_t len = b->split_ws[i];

                b->split_ws[i] = ws;
                ws += len;
        }
        b->ws_chunks = ws;
        for (i = 0; i < b->nruns; i++)
                if (b->runs[i].keep > 0)
                        maxentry = fmax(maxentry, b->info[b->runs[i].problem].cost);
        b->makespan = ms;
        b->lower_bound = bound(total, b->ctas, maxentry);
}

/*
 * split mode after deal_lpt: looks at the last wave, the time between the
 * first CTA running out of work (lmin) and the makespan. With tiles of one
 * cost this is the classic last wave, and its fill (busy CTA time over
 * ctas * its length) is the fraction of CTAs it occupies; with tiles of
 * many costs it measures the same idleness. When the fill is under one
 * half, the tiles ending after lmin are retaken and dealt again with their
 * K ranges cut at chunk boundaries (deal_tail), aiming at a few multiples
 * of the tail's fluid bound (the loads if the tail's work spread evenly).
 * The best of those is kept when it shortens the predicted makespan by at
 * least cost->split_min_gain; else the plan stays lpt's.
 */
static void split_tail(struct build *b)
{
        static const double factors[] = {1.0, 1.1, 1.25, 1.5, 2.0, 3.0};
        double lmin = min_of(b->loads, b->ctas), ms = b->makespan, busy, work, fluid, least, best = ms;
        uint32_t i, nt, best_np = 0, best_nsplit = 0, cur = 0, best_buf = 0;

        busy = sum_of(b->loads, b->ctas) - lmin * b->ctas;
        if (!(ms - lmin > ms * 1e-9) || busy >= 0.5 * b->ctas * (ms - lmin))
                goto keep_lpt;
        nt = take_tail(b, lmin, &work);
        if (nt == 0 || !(work > 0))
                goto keep_lpt;
        fluid = (sum_of(b->base, b->ctas) + work) / b->ctas;
        least = min_of(b->base, b->ctas);
        for (i = 0; i < sizeof(factors) / sizeof(factors[0]); i++) {
                double mk = 0;
                uint32_t ns, np;

                np = deal_tail(b, nt, least, fluid * factors[i], nt + 2 * b->ctas, b->parts[cur], &mk,
                               &ns);
                if (np == 0 && mk < 0)
                        break; /* no cut here, so none at the higher targets either */
                if (np > 0 && ns > 0 && mk < best) {
                        best = mk;
                        best_np = np;
                        best_nsplit = ns;
                        best_buf = cur;
                        cur ^= 1; /* keep the best, deal the next into the other */
                }
        }
        if (best_nsplit > 0 && best <= ms * (1 - b->cost->split_min_gain)) {
                finish_split(b, nt, b->parts[best_buf], best_np, best_nsplit, best);
                return;
        }
        for (i = 0; i < b->nruns; i++)
                b->runs[i].keep = b->runs[i].count;
keep_lpt:
        b->nentries = (uint32_t)b->tiles;
        b->nsplit = 0;
        layout_blob(b);
        emit(b, NULL, 0);
}

/*
 * The fill split of a group of one wave of GEMMs (not f64, whose K is one
 * pass) that fills at most half the CTAs. Such a group's time is one tile's k-loop, run by one SM
 * on its own (a lone CTA streams its operands at a fraction of what the
 * GPU can), while most SMs stay idle. Cut every tile's K into parts of
 * `len` chunks or fewer, one part a CTA, and the group's time is one
 * part's; the chunk sums are then added apart (plan.h reduce_apart), on
 * many CTAs a tile, where one last part reading all of them would take
 * about as long as the k-loop it saved.
 */
static int fill_eligible(const struct build *b)
{
        uint32_t i;

        if (b->tiles == 0 || 2 * b->tiles > b->ctas)
                return 0;
        for (i = 0; i < b->n; i++)
                if (b->probs[i].kind != SCHED_GEMM || b->probs[i].dtype == GEMMD_F64)
                        return 0;
        return 1;
}

/* The most workspace a fill split's chunk sums may take (f32, a tile's
 * each): past it the sums' traffic would cost more than the parts save,
 * and a device would hold that much per group in flight. */
#define FILL_WS_MAX (64ull << 20)

/* The fill split's parts when none has more than len chunks. */
static uint64_t fill_parts(const struct build *b, uint32_t len)
{
        uint64_t np = 0;
        uint32_t i;

        for (i = 0; i < b->n; i++)
                np += (uint64_t)b->info[i].tiles * sched_cdiv(b->info[i].chunks, len);
        return np;
}

/* How much the other parts of a fill split of np parts slow each part's
 * k-loop down, on b's CTAs (cost.h fill_crowd). */
static double fill_crowding(const struct build *b, uint64_t np)
{
        return b->cost->fill_crowd * (double)np / b->ctas;
}

/* Predicted cost of a part (chunks [kb, ke)) of a tile of p in a fill
 * split of the given crowding: a split entry whose k-loop takes that much
 * longer. */
static double fill_part_cost(const struct build *b, const struct sched_problem *p, uint32_t kb, uint32_t ke,
                             double crowding)
{
        const double whole = sched_cost_entry(b->cost, p, b->shape, kb, ke, 1);
        const double loop = sched_cost_entry(b->cost, p, b->shape, kb, ke, 0) - b->cost->tile_fixed;

        return whole + loop * crowding;
}

/* A fill split as predicted before it is written: its part length (at
 * most len chunks a part), parts, split tiles and makespan. */
struct fill {
        uint32_t len, parts, nsplit;
        double makespan;
};

/*
 * Predicts the fill split into *f: the shortest part length that needs no
 * more parts than CTAs (parts only shrink as it grows), and the makespan,
 * the longest part (each split tile's first, fill_emit) and the pass that
 * adds the chunk sums. Returns 0 when the group does not take it: not
 * eligible, no tile would be cut, or the sums would take more than
 * FILL_WS_MAX.
 */
static int fill_predict(const struct build *b, struct fill *f)
{
        uint32_t lo = 1, hi = 0, i, maxch = 0;
        uint64_t ws = 0;
        double crowding, longest = 0;

        if (!fill_eligible(b))
                return 0;
        for (i = 0; i < b->n; i++)
                hi = b->info[i].chunks > hi ? b->info[i].chunks : hi;
        if (hi < 2)
                return 0;
        f->len = hi;
        while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;

                if (fill_parts(b, mid) <= b->ctas)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        if (lo >= f->len)
                return 0;
        f->len = lo;
        f->parts = (uint32_t)fill_parts(b, lo);
        f->nsplit = 0;
        crowding = fill_crowding(b, f->parts);
        for (i = 0; i < b->n; i++) {
                const uint32_t ch = b->info[i].chunks, pc = sched_cdiv(ch, lo);
                double c = b->info[i].cost;

                if (pc >= 2) {
                        c = fill_part_cost(b, &b->probs[i], 0, sched_cdiv(ch, pc), crowding);
                        f->nsplit += b->info[i].tiles;
                        ws += (uint64_t)b->info[i].tiles * ch;
                        maxch = ch > maxch ? ch : maxch;
                }
                longest = fmax(longest, c);
        }
        if (ws * b->shape.tm * b->shape.tn * sizeof(float) > FILL_WS_MAX)
                return 0;
        f->makespan = longest + b->cost->apart_fixed + b->cost->apart_chunk * maxch;
        return 1;
}

/* Writes the fill split f: one entry a CTA, in group order, the CTAs cut
 * to the parts. With one entry a CTA its bound is its makespan. */
static void fill_emit(struct build *b, const struct fill *f)
{
        uint32_t i, t, j, np = 0, slots = 0, ws = 0;

        b->ctas = f->parts;
        b->nentries = f->parts;
        b->nsplit = f->nsplit;
        layout_blob(b);
        for (i = 0; i < b->n; i++) {
                const uint32_t ch = b->info[i].chunks, pc = sched_cdiv(ch, f->len);

                for (t = 0; t < b->info[i].tiles; t++) {
                        struct sched_entry e = {i, t, 0, (uint16_t)ch, SCHED_NO_SPLIT};
                        uint32_t kb = 0;

                        if (pc < 2) {
                                b->entries[np++] = e;
                                continue;
                        }
                        /* Even chunk counts, the longer parts first. */
                        for (j = 0; j < pc; j++) {
                                const uint32_t plen = ch / pc + (j < ch % pc);

                                e.kc_begin = (uint16_t)kb;
                                e.kc_end = (uint16_t)(kb + plen);
                                e.split = slots;
                                b->entries[np++] = e;
                                kb += plen;
                        }
                        b->split_parts[slots] = pc;
                        b->split_ws[slots++] = ws;
                        ws += ch;
                }
        }
        for (i = 0; i <= b->ctas; i++)
                b->cta_begin[i] = i;
        b->ws_chunks = ws;
        b->reduce_apart = 1;
        b->makespan = b->lower_bound = f->makespan;
}

/* Writes the fill split when the group takes it and it is predicted to
 * end before `limit`; returns whether it did. */
static int try_fill(struct build *b, double limit)
{
        struct fill f;

        if (!fill_predict(b, &f) || !(f.makespan < limit))
                return 0;
        fill_emit(b, &f);
        return 1;
}

/* lpt's plan, and with `split` the tail split after it (split_tail). */
static void deal_lpt_plan(struct build *b, int split)
{
        order_problems(b, 2);
        deal_lpt(b);
        if (split && try_fill(b, b->makespan * (1 - b->cost->split_min_gain)))
                return;
        if (split && b->tiles > 0) {
                split_tail(b);
                return;
        }
        b->nentries = (uint32_t)b->tiles;
        layout_blob(b);
        emit(b, NULL, 0);
}

/*
 * auto: sorted, which ran fastest on the GPU on every 16-bit workload of
 * short tiles measured (docs/performance.md), unless the group has more
 * than one wave, its tiles cost auto_min_tile on average, its sorted plan
 * is more than auto_gain above the bound, and split's plan (lpt with the
 * tail split) is predicted shorter by at least auto_gain. The model counts
 * k-loop iterations; on short tiles what it leaves out (operand traffic,
 * fixed costs) decides, and there sorted, whose tiles of one problem run
 * side by side and share its operands in L2, won where the model said
 * otherwise; long tiles (large K, f64, exact f32) ran as it predicts. A
 * single wave stays sorted on only the CTAs its tiles need (the others
 * would only take SMs from the next group, on another stream), so one
 * small request costs one plan; unless it fills at most half the CTAs,
 * and its tiles cut to fill them (try_fill) are predicted shorter by
 * auto_gain: then it is split's plan. Both candidates are dealt in the
 * one build (sorted's again when split's loses). Returns the mode whose
 * plan b holds.
 */
static enum sched_mode deal_auto(struct build *b)
{
        const double gain = b->cost->auto_gain;
        double sorted;

        if (b->tiles <= b->ctas) {
                /* one wave: its longest tile */
                if (try_fill(b, b->maxcost * (1 - gain)))
                        return SCHED_SPLIT;
                if (b->tiles > 0)
                        b->ctas = (uint32_t)b->tiles;
        }
        order_problems(b, 1);
        deal_rr(b, 0);
        sorted = b->makespan;
        if (b->tiles <= b->ctas || b->total < b->cost->auto_min_tile * (double)b->tiles ||
            sorted <= b->lower_bound * (1 + gain))
                return SCHED_SORTED;
        deal_lpt_plan(b, 1);
        if (b->makespan <= sorted * (1 - gain))
                return SCHED_SPLIT;
        order_problems(b, 1);
        deal_rr(b, 0);
        return SCHED_SORTED;
}

int sched_plan_build_cost(struct sched_plan *plan, const struct sched_problem *probs, uint32_t n,
                          const struct sched_config *cfg, const struct sched_cost *cost)
{
        double t0 = now_us();
        struct build b;
        int rc;


        memset(&b, 0, sizeof(b));
        b.plan = plan;
        b.probs = probs;
        b.n = n;
        b.ctas = cfg->ctas;
        b.shape = cfg->shape;
        b.cost = cost;
        rc = check(&b, cfg);
        if (rc != 0)
                return rc;
        /* auto may end in split's plan: room for it */
        rc = reserve(&b, cfg->mode == SCHED_AUTO ? SCHED_SPLIT : cfg->mode);
        if (rc != 0)
                return rc;
        measure(&b);

        switch (cfg->mode) {
        case SCHED_ROUND_ROBIN:
        case SCHED_DEVICE:
                order_problems(&b, 0);
                deal_rr(&b, cfg->mode == SCHED_DEVICE);
                break;
        case SCHED_SORTED:
        case SCHED_SPT:
                order_problems(&b, cfg->mode == SCHED_SORTED ? 1 : 3);
                deal_rr(&b, 0);
                break;
        case SCHED_LPT:
        case SCHED_SPLIT:
                deal_lpt_plan(&b, cfg->mode == SCHED_SPLIT);
                break;
        case SCHED_AUTO:
                plan->mode = deal_auto(&b);
                break;
        default:
                return -EINVAL;
        }

        if (cfg->mode != SCHED_AUTO)
                plan->mode = cfg->mode;
        plan->nctas = b.ctas;
        plan->nproblems = n;
        plan->nentries = b.nentries;
        plan->nsplit = b.nsplit;
        plan->ws_chunks = b.ws_chunks;
        plan->reduce_apart = b.reduce_apart;
        plan->tiles = b.tiles;
        plan->cta_begin = b.cta_begin;
        plan->entries = b.entries;
        plan->split_parts = b.split_parts;
        plan->split_ws = b.split_ws;
        plan->makespan = b.makespan;
        plan->lower_bound = b.lower_bound;
        plan->build_us = now_us() - t0;
        return 0;
}

int sched_plan_build(struct sched_plan *plan, const struct sched_problem *probs, uint32_t n,
                     const struct sched_config *cfg)
{
        return sched_plan_build_cost(plan, probs, n, cfg, sched_cost_get());
}
