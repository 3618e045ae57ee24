/*
 * test_gpu_kernels.c - the CUDA grouped kernels against a double-precision
 * CPU reference, in every config and every plan mode.
 *
 * For each config (f32, tf32, f16, bf16, f64) random groups of GEMM and SYR2K
 * problems are drawn with edge sizes (1, odd, just over a tile), every op,
 * uplo, unaligned pointers and leading dimensions, k from 1 to 4096. Each
 * group runs under every scheduler mode at two CTA counts, twice per plan
 * (the second run checks that split counters were reset). The first run is
 * checked element by element against the reference, every other run must
 * match it bit for bit (canonical K-chunk accumulation; f64: all of K in
 * one pass, never split), and every element
 * of C's storage that the op must not write (padding rows, the other
 * triangle of a SYR2K) must keep its bits. Groups whose every problem
 * takes the wide, narrow and half tiles (cuda_gemm_shape_wide, _narrow,
 * _half: GEMMs only, K-major; the half tile 16-bit, its plans whole) run
 * every mode again on each, and must match the first
 * run bit for bit too; so must one wave of a few long-K tiles cut to fill
 * the SMs, its sums added by a second kernel (the fill split). f64
 * groups take full 53-bit random inputs, are checked against a long double
 * reference, and are run again cut into two groups of their own, which
 * must give the same bits (a problem's result never depends on its group).
 *
 * A plain program: exits 0 and prints a SKIP line when no CUDA device is
 * present, so `make test` passes on machines without a GPU.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/gemmd.h"
#include "kernels/cuda_gemm.h"
#include "kernels/half.h"
#include "scheduler/plan.h"

#define CK(x)                                                                                    \
        do {                                                                                     \
                cudaError_t e_ = (x);                                                            \
                if (e_ != cudaSuccess) {                                                         \
                        fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,               \
                                cudaGetErrorString(e_));                                         \
                        exit(1);                                                                 \
                }                                                                                \
        } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
}

static uint32_t rndu(uint32_t n) { return (uint32_t)(rnd() % n); }

/* Uniform in [-1, 1], never zero. */
static float rndf(void)
{
        float f = (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        return f == 0.f ? 0.5f : f;
}

/* Uniform in [-1, 1] with all 53 bits random, never zero (f64 inputs:
 * float-valued ones would make every product exact). */
static double rndd(void)
{
        double f = (double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0;
        return f == 0.0 ? 0.5 : f;
}

static size_t esize(int dtype) { return dtype == GEMMD_F64 ? 8 : dtype == GEMMD_F32 ? 4 : 2; }

static double getv(const void *base, int dtype, size_t i)
{
        if (dtype == GEMMD_F64)
                return ((const double *)base)[i];
        if (dtype == GEMMD_F32)
                return ((const float *)base)[i];
        uint16_t h = ((const uint16_t *)base)[i];
        return dtype == GEMMD_F16 ? gemmd_f16_to_f32(h) : gemmd_bf16_to_f32(h);
}

static void setv(void *base, int dtype, size_t i, double v)
{
        if (dtype == GEMMD_F64)
                ((double *)base)[i] = v;
        else if (dtype == GEMMD_F32)
                ((float *)base)[i] = (float)v;
        else if (dtype == GEMMD_F16)
                ((uint16_t *)base)[i] = gemmd_f32_to_f16((float)v);
        else
                ((uint16_t *)base)[i] = gemmd_f32_to_bf16((float)v);
}

/* The scalars the problem's kernel uses: f64 ones as sent, others in float. */
static double alpha_of(const struct gemmd_kproblem *p)
{
        return p->dtype == GEMMD_F64 ? p->alpha_f64 : p->alpha;
}

static double beta_of(const struct gemmd_kproblem *p)
{
        return p->dtype == GEMMD_F64 ? p->beta_f64 : p->beta;
}

/* A test problem: its kernel view plus element offsets of A, B, C inside
 * the group's one buffer and the element counts they span. */
struct tprob {
        struct gemmd_kproblem kp;
        size_t off[3], span[3];
        int c_aligned; /* run_group keeps C 16-byte aligned (else sometimes not) */
};

static size_t span_of(uint32_t rows, uint32_t cols, int64_t ld) { return (size_t)ld * (cols - 1) + rows; }

static const uint32_t edge[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, 127, 128, 129, 200, 255, 257};
static const uint32_t edgek[] = {1, 3, 8, 16, 31, 32, 33, 100, 511, 512, 513, 1000, 1024, 1500, 2048, 4096};
/* K for the groups of K-major problems (the wgmma path on sm_90): around
 * the 64-wide k-tile and the 512-wide canonical chunk. */
static const uint32_t kmajk[] = {1, 2, 8, 63, 64, 65, 127, 129, 200, 511, 512, 513, 1000, 1024, 1025, 1536, 2047};

/* Draws a problem; `big` picks larger sizes; `kmaj` a GEMM with A stored
 * m x k and B stored n x k, or a SYR2K with A and B stored n x k, both
 * contiguous along K, leading dimensions multiples of 16 bytes (the layout
 * of the sm_90 fast path). */
/* What draw() gives besides: any problem; GEMMs only (the wide tile's
 * groups); GEMMs whose A has at most 64 rows (the stages holding 64 rows
 * of A); GEMMs whose C columns end inside a 16-byte granule (m % 4 != 0,
 * ldc a multiple of 4, beta 0, C kept aligned: C stored through its
 * tensor map unless the launch keeps such C off it). The last two are
 * GEMMs only too. */
static enum { DRAW_ANY, DRAW_GEMM, DRAW_SKINNY, DRAW_CPAD, DRAW_PACK, DRAW_LONGK } drawing;
static const uint32_t cpad_m[] = {1, 7, 31, 63, 65, 127, 129, 255};

static void draw(struct tprob *t, int dtype, int tf32, int big, int kmaj)
{
        struct gemmd_kproblem *p = &t->kp;
        memset(t, 0, sizeof(*t));
        p->dtype = (uint8_t)dtype;
        p->tf32 = (uint8_t)tf32;
        p->kind = rndu(4) == 0 ? SCHED_SYR2K : SCHED_GEMM;
        p->trans_a = (uint8_t)rndu(2);
        p->trans_b = (uint8_t)rndu(2);
        p->uplo = (uint8_t)rndu(2);
        uint32_t nsz = sizeof(edge) / sizeof(edge[0]);
        p->m = big ? 128 + rndu(200) : edge[rndu(nsz)];
        p->n = big ? 128 + rndu(200) : edge[rndu(nsz)];
        p->k = big ? 1024 + rndu(3100) : edgek[rndu(sizeof(edgek) / sizeof(edgek[0]) - (rndu(4) ? 3 : 0))];
        if (kmaj) {
                /* GEMM T,N, or SYR2K with op T: A and B stored n x k. */
                p->kind = rndu(4) == 0 && drawing == DRAW_ANY ? SCHED_SYR2K : SCHED_GEMM;
                p->trans_a = 1;
                p->trans_b = 0;
                if (!big)
                        p->k = kmajk[rndu(sizeof(kmajk) / sizeof(kmajk[0]))];
        }
        if (p->kind == SCHED_SYR2K)
                p->m = p->n;
        if (drawing == DRAW_LONGK) /* a few tiles, long K: the fill split */
                p->k = 2048 + rndu(14337);
        if (drawing == DRAW_SKINNY) /* decode-like: a few rows of A */
                p->m = 1 + rndu(64);
        if (drawing == DRAW_CPAD)
                p->m = cpad_m[rndu(sizeof(cpad_m) / sizeof(cpad_m[0]))];
        static const float alphas[] = {1.f, -0.5f, 2.f, 0.25f};
        static const float betas[] = {0.f, 1.f, 0.75f, -1.f};
        /* f64: scalars that no float holds, besides 0, 1 and -1. */
        static const double alphas_d[] = {1.0, -0.5, 0.1, 1.0 / 3.0};
        static const double betas_d[] = {0.0, 1.0, 0.7, -1.0};
        const uint32_t ia = rndu(4), ib = rndu(4);
        p->alpha = alphas[ia];
        p->beta = betas[ib];
        p->alpha_f64 = dtype == GEMMD_F64 ? alphas_d[ia] : alphas[ia];
        p->beta_f64 = dtype == GEMMD_F64 ? betas_d[ib] : betas[ib];
        /* Padding of leading dimensions: aligned (multiple of 8) or not. */
        static const uint32_t pads[] = {0, 0, 1, 3, 8, 5};
        uint32_t ar, ac, br, bc;
        if (p->kind == SCHED_SYR2K) {
                ar = p->trans_a ? p->k : p->n;
                ac = p->trans_a ? p->n : p->k;
                br = ar, bc = ac;
        } else {
                ar = p->trans_a ? p->k : p->m;
                ac = p->trans_a ? p->m : p->k;
                br = p->trans_b ? p->n : p->k;
                bc = p->trans_b ? p->k : p->n;
        }
        int aligned = kmaj || rndu(3) != 0;
        uint32_t round = (uint32_t)(16 / esize(dtype));
        p->lda = aligned ? (ar + round - 1) / round * round + round * rndu(2) : ar + pads[rndu(6)];
        p->ldb = aligned ? (br + round - 1) / round * round : br + pads[rndu(6)];
        p->ldc = p->m + pads[rndu(6)];
        if (drawing == DRAW_PACK) {
                /* Packed copies: each operand stored along K or along M
                 * (N), its leading dimension padded by 0-3 (on or off the
                 * 16-byte grid); at least one operand not readable where
                 * it lies. */
                p->trans_a = (uint8_t)rndu(2);
                p->trans_b = (uint8_t)rndu(2);
                if (p->trans_a == 1 && p->trans_b == 0 && p->k % 8 == 0)
                        p->k++;
                ar = p->trans_a ? p->k : p->m;
                ac = p->trans_a ? p->m : p->k;
                br = p->trans_b ? p->n : p->k;
                bc = p->trans_b ? p->k : p->n;
                p->lda = ar + rndu(4);
                p->ldb = br + rndu(4);
        }
        if (drawing == DRAW_CPAD) {
                p->beta = 0.f;
                p->beta_f64 = 0.0;
                p->ldc = (p->m + 3) / 4 * 4;
                t->c_aligned = 1;
        }
        t->span[0] = span_of(ar, ac, p->lda);
        t->span[1] = span_of(br, bc, p->ldb);
        t->span[2] = span_of(p->m, p->n, p->ldc);
}

static long double opx(const struct gemmd_kproblem *p, const void *a, int tr, int64_t ld, uint32_t i, uint32_t q)
{
        return getv(a, p->dtype, tr ? q + (size_t)i * ld : i + (size_t)q * ld);
}

/* Checks one problem's result against the long double reference. Returns the
 * worst error / bound ratio, or +inf on a bad element. */
static double check(const struct tprob *t, const char *h, const char *c0, const char *out, double tol,
                    char *why, size_t whylen)
{
        const struct gemmd_kproblem *p = &t->kp;
        size_t es = esize(p->dtype);
        const void *a = h + t->off[0] * es, *b = h + t->off[1] * es;
        const char *ci = c0 + t->off[2] * es, *co = out + t->off[2] * es;
        double worst = 0;
        for (uint32_t j = 0; j < p->n; j++) {
                for (uint64_t i = 0; i < (uint64_t)p->ldc && (size_t)i + (size_t)j * p->ldc < t->span[2];
                     i++) {
                        size_t idx = i + (size_t)j * p->ldc;
                        int inside = i < p->m;
                        if (p->kind == SCHED_SYR2K && inside)
                                inside = p->uplo == 0 ? i >= j : i <= j;
                        if (!inside) {
                                if (memcmp(ci + idx * es, co + idx * es, es)) {
                                        snprintf(why, whylen, "C(%lu,%u) outside the op changed",
                                                 (unsigned long)i, j);
                                        return INFINITY;
                                }
                                continue;
                        }
                        long double s = 0, sa = 0;
                        for (uint32_t q = 0; q < p->k; q++) {
                                long double x, y;
                                if (p->kind == SCHED_SYR2K) {
                                        int tr = p->trans_a;
                                        x = opx(p, a, tr, p->lda, (uint32_t)i, q) * opx(p, b, tr, p->ldb, j, q);
                                        y = opx(p, b, tr, p->ldb, (uint32_t)i, q) * opx(p, a, tr, p->lda, j, q);
                                        s += x + y;
                                        sa += fabsl(x) + fabsl(y);
                                } else {
                                        x = opx(p, a, p->trans_a, p->lda, (uint32_t)i, q) *
                                            opx(p, b, !p->trans_b, p->ldb, j, q);
                                        s += x;
                                        sa += fabsl(x);
                                }
                        }
                        const long double al = alpha_of(p), be = beta_of(p);
                        long double ref = al * s, bound = fabsl(al) * sa;
                        if (be != 0) {
                                long double cv = getv(ci, p->dtype, idx);
                                ref += be * cv;
                                bound += fabsl(be * cv);
                        }
                        /* Output rounding in the subnormal range is absolute. */
                        bound += (p->dtype == GEMMD_F16 ? 6e-8 : p->dtype == GEMMD_F64 ? 1e-300 : 1e-37) / tol;
                        double got = getv(co, p->dtype, idx);
                        double err = (double)(fabsl(got - ref) / (tol * bound + 1e-300L));
                        if (!(err <= 1.0) || isnan(got)) {
                                snprintf(why, whylen, "C(%lu,%u) = %.17g, want %.17Lg (bound %.3Lg)",
                                         (unsigned long)i, j, got, ref, tol * bound);
                                return INFINITY;
                        }
                        if (err > worst)
                                worst = err;
                }
        }
        return worst;
}

static const char *pdesc(const struct gemmd_kproblem *p, char *buf, size_t n)
{
        snprintf(buf, n, "%s %c%c m=%u n=%u k=%u lda=%ld ldb=%ld ldc=%ld uplo=%u a%%16=%lu b%%16=%lu",
                 p->kind == SCHED_SYR2K ? "syr2k" : "gemm", p->trans_a ? 'T' : 'N', p->trans_b ? 'T' : 'N',
                 p->m, p->n, p->k, (long)p->lda, (long)p->ldb, (long)p->ldc, p->uplo,
                 (unsigned long)(p->a % 16), (unsigned long)(p->b % 16));
        return buf;
}

static int failures;
static int inline_runs; /* launches whose data went as a kernel parameter */
static int packed_groups; /* groups run with packed copies of their operands */
static int tile_groups[4]; /* groups that also ran on the wide [1], narrow [2] and half [3] tiles */
static int cmap_groups16; /* 16-bit groups with problems whose C the kernel may store by TMA */

/* Encodes the problems' tensor maps for tile `shape` into new host memory
 * *host and copies them to new device memory *dev; returns what
 * cuda_gemm_tmaps_build returned. With `pack`, operands off the 16-byte
 * grid get packed copies where cuda_gemm_pack_bytes says so, in new
 * device memory *pack (else NULL). */
static int build_maps(const struct gemmd_kproblem *kp, uint32_t np, struct sched_shape shape, void **host,
                      void **dev, void **pack)
{
        size_t tb = cuda_gemm_tmaps_bytes(np), pb = pack ? cuda_gemm_pack_bytes(kp, np, shape) : 0;
        int n;

        if (posix_memalign(host, 64, tb)) {
                fprintf(stderr, "out of memory\n");
                exit(1);
        }
        if (pack) {
                *pack = NULL;
                if (pb)
                        CK(cudaMalloc(pack, pb));
        }
        n = cuda_gemm_tmaps_build_packed(kp, np, shape, *host, pb ? (uint64_t)(uintptr_t)*pack : 0, 1);
        CK(cudaMalloc(dev, tb));
        CK(cudaMemcpy(*dev, *host, tb, cudaMemcpyHostToDevice));
        return n;
}

/* Runs the problems of kp (device addresses) whose index has parity `par`
 * as a group of their own, planned in `mode` over `ctas` CTAs, on the
 * legacy stream; returns 0 or the failing call's code. */
static int launch_part(const struct gemmd_kproblem *kp, uint32_t np, int par, enum sched_mode mode, uint32_t ctas)
{
        struct gemmd_kproblem *sub = malloc(np * sizeof(*sub));
        struct sched_problem *sp = malloc(np * sizeof(*sp));
        uint32_t n = 0;
        int rc = 0;

        if (!sub || !sp) {
                fprintf(stderr, "out of memory\n");
                exit(1);
        }
        for (uint32_t i = (uint32_t)par; i < np; i += 2) {
                sub[n] = kp[i];
                sp[n++] = (struct sched_problem){.kind = kp[i].kind, .dtype = kp[i].dtype, .uplo = kp[i].uplo,
                                                 .tf32 = kp[i].tf32, .m = kp[i].m, .n = kp[i].n, .k = kp[i].k};
        }
        if (n > 0) {
                const int dtype = kp[0].dtype;
                struct sched_plan plan;
                struct sched_config cfg = {.mode = mode, .shape = cuda_gemm_shape(dtype, 0), .ctas = ctas};
                void *dsub = NULL, *blob = NULL, *ws = NULL;
                uint32_t *arr = NULL;
                sched_plan_init(&plan);
                if ((rc = sched_plan_build(&plan, sp, n, &cfg)) == 0) {
                        const size_t wsb = cuda_gemm_ws_bytes(&plan, cfg.shape, dtype);
                        const size_t ab = cuda_gemm_arrivals_bytes(&plan);
                        CK(cudaMalloc(&dsub, n * sizeof(*sub)));
                        CK(cudaMemcpy(dsub, sub, n * sizeof(*sub), cudaMemcpyHostToDevice));
                        if (plan.blob_bytes) {
                                CK(cudaMalloc(&blob, plan.blob_bytes));
                                CK(cudaMemcpy(blob, plan.blob, plan.blob_bytes, cudaMemcpyHostToDevice));
                        }
                        if (wsb)
                                CK(cudaMalloc(&ws, wsb));
                        if (ab) {
                                CK(cudaMalloc((void **)&arr, ab));
                                CK(cudaMemset(arr, 0, ab));
                        }
                        struct cuda_group g = {.problems = dsub, .problems_host = sub, .nproblems = n, .dtype = dtype, .plan_blob = blob,
                                               .plan = &plan, .cfg = cfg, .ws = ws, .arrivals = arr};
                        rc = cuda_gemm_launch(&g, NULL);
                        CK(cudaDeviceSynchronize());
                }
                sched_plan_deinit(&plan);
                CK(cudaFree(dsub));
                CK(cudaFree(blob));
                CK(cudaFree(ws));
                CK(cudaFree(arr));
        }
        free(sub);
        free(sp);
        return rc;
}

/* Runs the group cut in two (even and odd problems), each part a group of
 * its own in `split` and `lpt` mode, and checks that C's storage has the
 * bits of the whole group's run (`first`). d holds the buffer, c0 its
 * initial contents. */
static void check_regrouped(const char *name, const struct gemmd_kproblem *kp, uint32_t np, char *d,
                            const char *c0, const char *first, char *out, size_t bytes)
{
        static const enum sched_mode modes[2] = {SCHED_SPLIT, SCHED_LPT};
        for (int mi = 0; mi < 2; mi++) {
                CK(cudaMemcpy(d, c0, bytes, cudaMemcpyHostToDevice));
                for (int par = 0; par < 2; par++) {
                        const int rc = launch_part(kp, np, par, modes[mi], 7);
                        if (rc) {
                                printf("FAIL %s regrouped %s: %d\n", name, sched_mode_name(modes[mi]), rc);
                                failures++;
                                return;
                        }
                }
                CK(cudaMemcpy(out, d, bytes, cudaMemcpyDeviceToHost));
                if (memcmp(out, first, bytes)) {
                        printf("FAIL %s regrouped %s: bits differ from the whole group's\n", name,
                               sched_mode_name(modes[mi]));
                        failures++;
                        return;
                }
        }
        printf("  %-22s regrouped in two: same bits\n", name);
}

/* Runs one group under every mode and CTA count; returns nothing, counts
 * failures. With `both_kernels` the launch gets no host copy of the
 * problems, so it cannot run the group whole on the sm_80 kernel: a group
 * mixing problems the Hopper kernel takes with others then runs on both
 * kernels, sharing one plan. */
static void run_group(const char *name, int dtype, int tf32, struct tprob *tp, uint32_t np, int nsm, int kmaj,
                      int both_kernels)
{
        size_t es = esize(dtype);
        size_t total = 0;
        for (uint32_t i = 0; i < np; i++)
                for (int o = 0; o < 3; o++) {
                        total = (total + 127) / 128 * 128;
                        if ((!kmaj || o == 2) && !(o == 2 && tp[i].c_aligned))
                                total += rndu(2); /* sometimes unaligned */
                        tp[i].off[o] = total;
                        total += tp[i].span[o];
                }
        total += 64;
        char *h = malloc(total * es), *c0 = malloc(total * es), *out = malloc(total * es),
             *first = malloc(total * es);
        if (!h || !c0 || !out || !first) {
                fprintf(stderr, "out of memory\n");
                exit(1);
        }
        for (size_t i = 0; i < total; i++)
                setv(h, dtype, i, dtype == GEMMD_F64 ? rndd() : rndf());
        /* C: random where beta != 0; NaN where beta == 0 (must not be read),
         * and NaN in the storage the op must not touch. */
        for (uint32_t i = 0; i < np; i++) {
                if (beta_of(&tp[i].kp) == 0)
                        for (size_t e = 0; e < tp[i].span[2]; e++)
                                setv(h, dtype, tp[i].off[2] + e, NAN);
        }
        memcpy(c0, h, total * es);

        char *d;
        struct gemmd_kproblem *dp;
        CK(cudaMalloc((void **)&d, total * es));
        CK(cudaMalloc((void **)&dp, np * sizeof(*dp)));
        /* f64: every third group reads A and B from a copy of the inputs at
         * an odd byte offset (the kernel reads such operands by bytes); C
         * stays in place. */
        static unsigned f64_groups;
        char *dab = d, *dab_alloc = NULL;
        if (dtype == GEMMD_F64 && f64_groups++ % 3 == 2) {
                CK(cudaMalloc((void **)&dab_alloc, total * es + 8));
                dab = dab_alloc + 3;
                CK(cudaMemcpy(dab, h, total * es, cudaMemcpyHostToDevice));
                printf("  %-22s A and B at an odd byte offset\n", name);
        }
        struct gemmd_kproblem *kp = malloc(np * sizeof(*kp));
        struct sched_problem *sp = malloc(np * sizeof(*sp));
        for (uint32_t i = 0; i < np; i++) {
                kp[i] = tp[i].kp;
                kp[i].a = (uint64_t)(uintptr_t)(dab + tp[i].off[0] * es);
                kp[i].b = (uint64_t)(uintptr_t)(dab + tp[i].off[1] * es);
                kp[i].c = (uint64_t)(uintptr_t)(d + tp[i].off[2] * es);
                tp[i].kp = kp[i];
                sp[i] = (struct sched_problem){.kind = kp[i].kind, .dtype = kp[i].dtype,
                                               .uplo = kp[i].uplo, .tf32 = kp[i].tf32,
                                               .m = kp[i].m, .n = kp[i].n, .k = kp[i].k};
        }
        CK(cudaMemcpy(dp, kp, np * sizeof(*kp), cudaMemcpyHostToDevice));

        /* Tensor maps for the sm_90 fast path (16-bit and TF32). */
        void *tm = NULL, *htm = NULL;
        /* f64 problems get maps built for the 16-bit tile, which none may
         * take: wgmma has no f64 (nfast must stay 0, and the launch must
         * keep them off the Hopper kernel even with maps given). */
        void *pack = NULL;
        int nfast = build_maps(kp, np, cuda_gemm_shape(dtype == GEMMD_F64 ? GEMMD_F16 : dtype, tf32), &htm, &tm,
                               &pack);
        if (pack) {
                printf("  %-22s packed copies of operands it cannot read in place\n", name);
                packed_groups++;
        }
        uint32_t nsyr2k = cuda_gemm_tmaps_syr2k(htm, np);
        if ((dtype == GEMMD_F16 || dtype == GEMMD_BF16) && cuda_gemm_tmaps_cmaps(htm, np) > 0)
                cmap_groups16++;
        if (nfast < 0 || (kmaj && dtype != GEMMD_F64 && nfast != (int)np) || (dtype == GEMMD_F64 && nfast != 0)) {
                printf("FAIL %s: cuda_gemm_tmaps_build = %d of %u K-major problems\n", name, nfast, np);
                failures++;
                nfast = nfast < 0 ? 0 : nfast;
        }
        printf("  %-22s %d of %u problems qualify for the fast path\n", name, nfast, np);
        /* The wide, narrow and half tiles, where the whole group takes them:
         * every mode again on each, each run bit for bit the first (usual
         * tile) run. Variant 0 is the usual tile. */
        static const char *const vname[4] = {"", " (wide)", " (narrow)", " (half)"};
        struct sched_shape vshape[4] = {cuda_gemm_shape(dtype, tf32), cuda_gemm_shape_wide(dtype, tf32),
                                        cuda_gemm_shape_narrow(dtype, tf32), cuda_gemm_shape_half(dtype, tf32)};
        void *vtm[4] = {tm, NULL, NULL, NULL}, *vhtm[4] = {htm, NULL, NULL, NULL};
        for (int v = 1; v < 4; v++) {
                if (!vshape[v].tn)
                        continue;
                if (build_maps(kp, np, vshape[v], &vhtm[v], &vtm[v], NULL) == (int)np) {
                        tile_groups[v]++;
                } else {
                        cudaFree(vtm[v]);
                        free(vhtm[v]);
                        vtm[v] = vhtm[v] = NULL;
                }
        }

        /* f64: the f32 bound's 330 units of rounding, in f64 units. */
        double tol = dtype == GEMMD_F64   ? 4e-14
                     : dtype == GEMMD_F32 ? (tf32 ? 4e-3 : 2e-5)
                     : dtype == GEMMD_F16 ? 2e-3
                                          : 1e-2;
        struct sched_plan plan;
        sched_plan_init(&plan);
        int have_first = 0;
        const uint32_t ctas_list[2] = {(uint32_t)nsm, 5};
        for (int mi = 0; mi < SCHED_NMODES * 4; mi++) {
                const int mode = mi % SCHED_NMODES, var = mi / SCHED_NMODES;
                void *ctm = vtm[var], *chtm = vhtm[var];
                if (var > 0 && !ctm)
                        continue;
                for (int ci = 0; ci < 2; ci++) {
                        struct sched_config cfg = {.mode = (enum sched_mode)mode,
                                                   .shape = vshape[var],
                                                   .ctas = ctas_list[ci]};
                        int rc = sched_plan_build(&plan, sp, np, &cfg);
                        if (rc) {
                                printf("FAIL %s %s: sched_plan_build = %d\n", name, sched_mode_name(cfg.mode), rc);
                                failures++;
                                continue;
                        }
                        /* The half tile runs whole tiles from host plans
                         * only: the launch must refuse the others. */
                        if (var == 3 && (plan.nsplit > 0 || plan.nentries == 0)) {
                                struct cuda_group hg = {.problems = dp, .nproblems = np, .dtype = dtype,
                                                        .tf32 = tf32, .plan = &plan, .cfg = cfg,
                                                        .tmaps = ctm, .nfast = (uint32_t)nfast};
                                if (cuda_gemm_launch(&hg, NULL) != -EINVAL) {
                                        printf("FAIL %s %s (half): a plan that %s was launched\n", name,
                                               sched_mode_name(cfg.mode), plan.nsplit ? "cuts K" : "has no entries");
                                        failures++;
                                }
                                continue;
                        }
                        void *blob = NULL;
                        void *ws = NULL;
                        uint32_t *arr = NULL;
                        if (plan.blob_bytes) {
                                CK(cudaMalloc(&blob, plan.blob_bytes));
                                CK(cudaMemcpy(blob, plan.blob, plan.blob_bytes, cudaMemcpyHostToDevice));
                        }
                        size_t wsb = cuda_gemm_ws_bytes(&plan, cfg.shape, dtype);
                        size_t ab = cuda_gemm_arrivals_bytes(&plan);
                        if (wsb) {
                                CK(cudaMalloc((void **)&ws, wsb));
                                CK(cudaMemset(ws, 0xff, wsb));
                        }
                        if (ab) {
                                CK(cudaMalloc((void **)&arr, ab));
                                CK(cudaMemset(arr, 0, ab));
                        }
                        struct cuda_group g = {.problems = dp,
                                               .problems_host = both_kernels ? NULL : kp,
                                               .nproblems = np, .dtype = dtype,
                                               .tf32 = tf32, .plan_blob = blob, .plan = &plan,
                                               .cfg = cfg, .ws = ws, .arrivals = arr,
                                               .tmaps = ctm, .nfast = (uint32_t)nfast,
                                               .nfast_syr2k = nsyr2k, .pack = var == 0 ? pack : NULL};
                        /* A third run, where the group fits, sends problems,
                         * plan and tensor maps with the launch
                         * (cuda_group.inline_*): the device range they
                         * name is poisoned and never written, so a kernel
                         * reading it instead of its parameter fails. */
                        struct cuda_group gi = g;
                        void *din = NULL, *hin = NULL;
                        const size_t o_bl = (np * sizeof(*kp) + 63) & ~(size_t)63;
                        const size_t o_tm = o_bl + ((plan.blob_bytes + 63) & ~(size_t)63);
                        const size_t inl = o_tm + (htm ? cuda_gemm_tmaps_bytes(np) : 0);
                        const int reps = htm && nfast == (int)np && cuda_gemm_fast_available() && !g.pack &&
                                                         inl <= CUDA_GEMM_INLINE_MAX
                                                 ? 3
                                                 : 2;
                        if (reps == 3) {
                                CK(cudaMalloc(&din, inl));
                                CK(cudaMemset(din, 0xff, inl));
                                if (posix_memalign(&hin, 64, inl)) {
                                        fprintf(stderr, "out of memory\n");
                                        exit(1);
                                }
                                memcpy(hin, kp, np * sizeof(*kp));
                                if (plan.blob_bytes)
                                        memcpy((char *)hin + o_bl, plan.blob, plan.blob_bytes);
                                memcpy((char *)hin + o_tm, chtm, cuda_gemm_tmaps_bytes(np));
                                gi.problems = din;
                                gi.plan_blob = blob ? (char *)din + o_bl : NULL;
                                gi.tmaps = (char *)din + o_tm;
                                gi.inline_host = hin;
                                gi.inline_dev = (uint64_t)(uintptr_t)din;
                                gi.inline_bytes = (uint32_t)inl;
                        }
                        for (int rep = 0; rep < reps; rep++) {
                                CK(cudaMemcpy(d, c0, total * es, cudaMemcpyHostToDevice));
                                rc = cuda_gemm_launch(rep == 2 ? &gi : &g, NULL);
                                inline_runs += rep == 2;
                                if (rc) {
                                        printf("FAIL %s %s: launch = %d\n", name, sched_mode_name(cfg.mode), rc);
                                        failures++;
                                        break;
                                }
                                CK(cudaDeviceSynchronize());
                                CK(cudaMemcpy(out, d, total * es, cudaMemcpyDeviceToHost));
                                if (!have_first) {
                                        double worst = 0;
                                        for (uint32_t i = 0; i < np; i++) {
                                                char why[160], pd[200];
                                                double e = check(&tp[i], h, c0, out, tol, why, sizeof(why));
                                                if (isinf(e)) {
                                                        printf("FAIL %s %s ctas=%u problem %u (%s): %s\n", name,
                                                               sched_mode_name(cfg.mode), cfg.ctas, i,
                                                               pdesc(&tp[i].kp, pd, sizeof(pd)), why);
                                                        failures++;
                                                        break;
                                                }
                                                if (e > worst)
                                                        worst = e;
                                        }
                                        printf("  %-22s %u problems, worst error %.3f of the bound\n", name, np,
                                               worst);
                                        memcpy(first, out, total * es);
                                        have_first = 1;
                                } else if (memcmp(first, out, total * es)) {
                                        size_t i = 0;
                                        while (!memcmp(first + i * es, out + i * es, es))
                                                i++;
                                        printf("FAIL %s %s%s ctas=%u rep %d: bits differ from the first run "
                                               "(element %zu, %g vs %g, nsplit=%u)\n",
                                               name, sched_mode_name(cfg.mode), vname[var], cfg.ctas, rep, i,
                                               getv(out, dtype, i), getv(first, dtype, i), plan.nsplit);
                                        failures++;
                                        break;
                                }
                        }
                        if (mode == SCHED_SPLIT || plan.reduce_apart)
                                printf("  %-22s %s ctas=%u: %u split tiles, %u entries%s\n", name,
                                       sched_mode_name(cfg.mode), cfg.ctas, plan.nsplit, plan.nentries,
                                       plan.reduce_apart ? ", added apart" : "");
                        if (dtype == GEMMD_F64 && plan.nsplit) {
                                printf("FAIL %s %s: %u f64 tiles split (f64 K is summed in one pass)\n", name,
                                       sched_mode_name(cfg.mode), plan.nsplit);
                                failures++;
                        }
                        if (ab) {
                                uint32_t *ha = malloc(ab);
                                CK(cudaMemcpy(ha, arr, ab, cudaMemcpyDeviceToHost));
                                for (uint32_t i = 0; i < plan.nsplit; i++)
                                        if (ha[i]) {
                                                printf("FAIL %s: arrival counter %u left at %u\n", name, i, ha[i]);
                                                failures++;
                                                break;
                                        }
                                free(ha);
                        }
                        cudaFree(blob);
                        cudaFree(ws);
                        cudaFree(arr);
                        cudaFree(din);
                        free(hin);
                }
        }
        sched_plan_deinit(&plan);
        /* f64, and packed groups: the same bits from the group cut in two
         * (each part on the sm_80 kernel, which reads the operands where
         * they lie: packing must not change a result). */
        if ((dtype == GEMMD_F64 || pack) && have_first)
                check_regrouped(name, kp, np, d, c0, first, out, total * es);
        cudaFree(tm);
        cudaFree(pack);
        free(htm);
        for (int v = 1; v < 3; v++) {
                cudaFree(vtm[v]);
                free(vhtm[v]);
        }
        CK(cudaFree(d));
        if (dab_alloc)
                CK(cudaFree(dab_alloc));
        CK(cudaFree(dp));
        free(kp);
        free(sp);
        free(h);
        free(c0);
        free(out);
        free(first);
}

/* Runs group cfg/what of np + rndu(nrand) K-major problems drawn in mode
 * `mode` (big: the larger sizes), from a generator of its own seeded with
 * `seed`: the shared generator is left where it was, so every other
 * group's draws stay those of the runs logged before. */
static void run_own_draws(const char *cfg, const char *what, int dtype, int tf32, int nsm, int mode, uint64_t seed,
                          uint32_t np, uint32_t nrand, int big)
{
        struct tprob tp[80];
        char name[64];
        const uint64_t saved = rng;

        rng = seed;
        drawing = mode;
        np += nrand ? rndu(nrand) : 0;
        for (uint32_t i = 0; i < np; i++)
                draw(&tp[i], dtype, tf32, big, 1);
        drawing = DRAW_ANY;
        snprintf(name, sizeof(name), "%s/%s", cfg, what);
        run_group(name, dtype, tf32, tp, np, nsm, 1, 0);
        rng = saved;
}

/* Whether the comma list s holds the number v. */
static int in_list(const char *s, int v)
{
        while (*s) {
                char *end;
                const long x = strtol(s, &end, 10);
                if (end == s)
                        return 0;
                if (x == v)
                        return 1;
                s = *end == ',' ? end + 1 : end;
        }
        return 0;
}

int main(int argc, char **argv)
{
        (void)argc;
        (void)argv;
        int ndev = 0;
        if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
                printf("test_gpu_kernels: SKIP: no CUDA device\n");
                return 0;
        }
        int nsm = 0;
        CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
        int major = 0;
        CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
        printf("sm_90 fast path (TMA + wgmma): %s\n", cuda_gemm_fast_available() ? "on" : "off");
        if (major == 9 && !cuda_gemm_fast_available()) {
                printf("FAIL: a compute capability 9 device but the fast path is off\n");
                failures++;
        }
        static const char *names[] = {"f32", "tf32", "f16", "bf16", "f64"};
        static const int dts[] = {GEMMD_F32, GEMMD_F32, GEMMD_F16, GEMMD_BF16, GEMMD_F64};
        static const int tfs[] = {0, 1, 0, 0, 0};
        /* GEMMD_TEST_DTYPES: a comma list of the configs to run (all by
         * default), to check one kernel variant alone. */
        const char *only = getenv("GEMMD_TEST_DTYPES");
        /* GEMMD_TEST_GROUPS: a comma list of group numbers to run (all by
         * default; the draws of later groups then differ), e.g. to run
         * one under compute-sanitizer. */
        const char *groups = getenv("GEMMD_TEST_GROUPS");
        for (int c = 0; c < 5; c++) {
                if (only && !strstr(only, names[c]))
                        continue;
                printf("%s (%s)\n", names[c], cuda_gemm_kernel_name(dts[c], tfs[c]));
                /* Every config also gets groups of K-major problems only
                 * (the sm_90 fast path for 16-bit and tf32, the ldmatrix
                 * fragment path on sm_80) and a mix of both kinds. */
                const int ngrp = 15;
                for (int grp = 0; grp < ngrp; grp++) {
                        struct tprob tp[80];
                        uint32_t np;
                        char name[64];
                        if (groups && !in_list(groups, grp))
                                continue;
                        const int kmaj = grp >= 4 && grp != 7;
                        if (grp == 8) {
                                /* One or two small K-major problems: a
                                 * group small enough to go with its launch. */
                                np = 1 + rndu(2);
                                for (uint32_t i = 0; i < np; i++)
                                        draw(&tp[i], dts[c], tfs[c], 0, 1);
                                snprintf(name, sizeof(name), "%s/kmaj-small", names[c]);
                                run_group(name, dts[c], tfs[c], tp, np, nsm, 1, 0);
                                continue;
                        }
                        if (grp == 14) {
                                /* One or two GEMMs of a few tiles and long
                                 * K (2048 to 16384), K-major: one wave
                                 * that auto and split cut to fill the
                                 * SMs, the chunk sums added by a second
                                 * kernel (sched_plan reduce_apart). */
                                if (dts[c] != GEMMD_F64)
                                        run_own_draws(names[c], "gemm-fill", dts[c], tfs[c], nsm, DRAW_LONGK,
                                                      0x452821e638d01377ull, 1, 2, 1);
                                continue;
                        }
                        if (grp == 13) {
                                /* 16-bit GEMMs whose operands lie along K or
                                 * M (N), on or off the 16-byte grid, enough
                                 * products to pack: packed copies, the
                                 * Hopper kernel. */
                                if (dts[c] == GEMMD_F16 || dts[c] == GEMMD_BF16)
                                        run_own_draws(names[c], "gemm-packed", dts[c], tfs[c], nsm, DRAW_PACK,
                                                      0x13198a2e03707344ull, 6, 6, 1);
                                continue;
                        }
                        if (grp == 12) {
                                /* f32 GEMMs whose C columns end inside a
                                 * 16-byte granule, K-major, beta 0 (exact
                                 * f32 and TF32 only): nothing past m may
                                 * change. */
                                if (dts[c] == GEMMD_F32)
                                        run_own_draws(names[c], "gemm-cpad", dts[c], tfs[c], nsm, DRAW_CPAD,
                                                      0x243f6a8885a308d3ull, 8, 0, 0);
                                continue;
                        }
                        if (grp == 11) {
                                /* GEMMs of at most 64 rows, K-major: the
                                 * kernel whose stages hold 64 rows of A
                                 * (16-bit), on the usual and wide tiles. */
                                drawing = DRAW_SKINNY;
                                np = 20 + rndu(20);
                                for (uint32_t i = 0; i < np; i++)
                                        draw(&tp[i], dts[c], tfs[c], (int)(i % 2), 1);
                                drawing = DRAW_ANY;
                                snprintf(name, sizeof(name), "%s/gemm-skinny", names[c]);
                                run_group(name, dts[c], tfs[c], tp, np, nsm, 1, 0);
                                continue;
                        }
                        if (grp >= 9) {
                                /* GEMMs only, K-major: groups the wide
                                 * tile takes, edge sizes and long K. */
                                drawing = DRAW_GEMM;
                                np = grp == 9 ? 40 + rndu(40) : 3 + rndu(3);
                                for (uint32_t i = 0; i < np; i++)
                                        draw(&tp[i], dts[c], tfs[c], grp == 10, 1);
                                drawing = DRAW_ANY;
                                snprintf(name, sizeof(name), "%s/gemm-%s", names[c], grp == 9 ? "edge" : "longk");
                                run_group(name, dts[c], tfs[c], tp, np, nsm, 1, 0);
                                continue;
                        }
                        if (grp < 3 || grp == 4 || grp == 5) {
                                /* Edge sizes, many problems. */
                                np = 40 + rndu(40);
                                for (uint32_t i = 0; i < np; i++)
                                        draw(&tp[i], dts[c], tfs[c], 0, kmaj);
                                snprintf(name, sizeof(name), "%s/%s%d", names[c], kmaj ? "kmaj-edge" : "edge", grp);
                        } else if (grp == 7) {
                                /* Half K-major, half anything: two kernels share a plan. */
                                np = 40 + rndu(40);
                                for (uint32_t i = 0; i < np; i++)
                                        draw(&tp[i], dts[c], tfs[c], 0, i % 2);
                                snprintf(name, sizeof(name), "%s/mixed", names[c]);
                        } else {
                                /* A few long-K problems: a tail that `split` cuts. */
                                np = 3 + rndu(3);
                                for (uint32_t i = 0; i < np; i++)
                                        draw(&tp[i], dts[c], tfs[c], 1, kmaj);
                                snprintf(name, sizeof(name), "%s/%s", names[c], kmaj ? "kmaj-longk" : "longk");
                        }
                        run_group(name, dts[c], tfs[c], tp, np, nsm, kmaj, grp == 7);
                }
        }
        printf("launches with their data as a kernel parameter: %d\n", inline_runs);
        printf("groups with packed copies of their operands: %d\n", packed_groups);
        /* What every group kind must have exercised: not with a chosen
         * few groups (GEMMD_TEST_GROUPS). */
        const int all = cuda_gemm_fast_available() && !groups, b16 = !only || strstr(only, "f16") || strstr(only, "bf16");
        if (all && packed_groups == 0 && b16) {
                printf("FAIL: no 16-bit group ran with packed copies\n");
                failures++;
        }
        printf("16-bit groups with a map of C (stored by TMA but for each CTA's last tile): %d\n", cmap_groups16);
        if (all && cmap_groups16 == 0 && b16) {
                printf("FAIL: no 16-bit group had a map of C\n");
                failures++;
        }
        printf("groups also run on the wide tile: %d, on the narrow tile: %d, on the half tile: %d\n",
               tile_groups[1], tile_groups[2], tile_groups[3]);
        const uint64_t skinny = cuda_gemm_skinny_launches();
        printf("launches of the kernel with 64 rows of A: %llu\n", (unsigned long long)skinny);
        if (all && skinny == 0 && b16) {
                printf("FAIL: no 16-bit group ran on the kernel with 64 rows of A\n");
                failures++;
        }
        if (all && (tile_groups[1] == 0 || tile_groups[2] == 0 || (b16 && tile_groups[3] == 0)) && !only) {
                printf("FAIL: no group ran on the wide, the narrow or the half tile\n");
                failures++;
        }
        if (all && inline_runs == 0 && !only) {
                printf("FAIL: no group went with its launch data\n");
                failures++;
        }
        printf("test_gpu_kernels: %s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
        return failures ? 1 : 0;
}
