/*
 * test_cpu_gemm.c - the CPU tile code (kernels/cpu_gemm.c) and the 16-bit
 * float conversions (kernels/half.h).
 *
 * Groups of random problems are planned with sched_plan_build in every mode
 * and run CTA by CTA, from several threads. Results are checked against a
 * long double reference built from the same (rounded) inputs, both
 * norm-wise and element by element; outputs start poisoned, the elements a
 * problem must not touch (the other SYR2K triangle, rows between m and ldc)
 * are compared bit for bit with what was there, and every mode, split or
 * not, must give identical bits, equal to a scalar emulation of the
 * canonical accumulation order.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemmd.h"
#include "kernels/cpu_gemm.h"
#include "kernels/half.h"
#include "scheduler/plan.h"

/* ------------------------------------------------------------------------ */
/* Helpers: random numbers, elements of any dtype. */

static uint64_t rnd(uint64_t *s)
{
        uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

/* Uniform in [-1, -1/64] U [1/64, 1] with 53 random bits (rounded to the
 * dtype when stored): random, never zero. */
static double rnd_val(uint64_t *s)
{
        double u = (double)(rnd(s) >> 11) * 0x1p-53;
        double v = 1.0 / 64 + u * (1.0 - 1.0 / 64);
        return (rnd(s) & 1) ? -v : v;
}

static size_t esize(int dtype) { return dtype == GEMMD_F64 ? 8 : dtype == GEMMD_F32 ? 4 : 2; }

static double get_elem(int dtype, const void *buf, size_t i)
{
        switch (dtype) {
        case GEMMD_F16:
                return gemmd_f16_to_f32(((const uint16_t *)buf)[i]);
        case GEMMD_BF16:
                return gemmd_bf16_to_f32(((const uint16_t *)buf)[i]);
        case GEMMD_F64:
                return ((const double *)buf)[i];
        default:
                return ((const float *)buf)[i];
        }
}

static void set_elem(int dtype, void *buf, size_t i, double v)
{
        switch (dtype) {
        case GEMMD_F16:
                ((uint16_t *)buf)[i] = gemmd_f32_to_f16((float)v);
                break;
        case GEMMD_BF16:
                ((uint16_t *)buf)[i] = gemmd_f32_to_bf16((float)v);
                break;
        case GEMMD_F64:
                ((double *)buf)[i] = v;
                break;
        default:
                ((float *)buf)[i] = (float)v;
                break;
        }
}

/* A NaN with a recognizable payload, written where nothing may be read. */
static void set_poison(int dtype, void *buf, size_t i)
{
        if (dtype == GEMMD_F64) {
                uint64_t x = 0x7ff8deaddeadbeefull;
                memcpy((double *)buf + i, &x, 8);
        } else if (dtype == GEMMD_F32) {
                uint32_t x = 0x7fc0dead;
                memcpy((float *)buf + i, &x, 4);
        } else {
                ((uint16_t *)buf)[i] = dtype == GEMMD_F16 ? 0x7e5a : 0x7fa5;
        }
}

/* v rounded to the dtype. */
static double round_to(int dtype, double v)
{
        if (dtype == GEMMD_F16)
                return gemmd_f16_to_f32(gemmd_f32_to_f16((float)v));
        if (dtype == GEMMD_BF16)
                return gemmd_bf16_to_f32(gemmd_f32_to_bf16((float)v));
        if (dtype == GEMMD_F32)
                return (float)v;
        return v;
}

/* The scalars a problem is computed with: f64 takes them as sent, the
 * others rounded to float (kproblem.h). */
static double alpha_of(const struct gemmd_kproblem *kp)
{
        return kp->dtype == GEMMD_F64 ? kp->alpha_f64 : kp->alpha;
}

static double beta_of(const struct gemmd_kproblem *kp)
{
        return kp->dtype == GEMMD_F64 ? kp->beta_f64 : kp->beta;
}

/* ------------------------------------------------------------------------ */
/* Test problems and groups. */

struct spec {
        uint8_t kind, dtype, ta, tb, uplo;
        uint32_t m, n, k; /* SYR2K: m is set to n */
        uint32_t pad;     /* extra rows in every leading dimension */
        double alpha, beta;
};

struct tprob {
        struct gemmd_kproblem kp;
        void *a, *b, *c, *c0; /* c0: the initial C, bit for bit */
        size_t na, nb, nc;    /* elements of A's, B's and C's storage */
        double *ref, *absref; /* m x n, ld m; NULL until computed */
};

struct group {
        uint32_t n;
        struct tprob *p;
        struct gemmd_kproblem *kps;
        struct sched_problem *sps;
};

/* Whether element (i, j) of C is one the problem computes. */
static int stored(const struct gemmd_kproblem *kp, uint32_t i, uint32_t j)
{
        if (kp->kind != SCHED_SYR2K)
                return 1;
        return kp->uplo == GEMMD_UPPER ? i <= j : i >= j;
}

/* Fills a rows x cols matrix (leading dimension ld) with random values of
 * the dtype and its padding rows with poison. */
static void *make_matrix(int dtype, uint32_t rows, uint32_t cols, int64_t ld, uint64_t *rng)
{
        size_t n = (size_t)ld * cols;
        void *x = malloc(n * esize(dtype));

        cr_assert(x);
        for (uint32_t j = 0; j < cols; j++)
                for (int64_t i = 0; i < ld; i++) {
                        size_t idx = (size_t)i + (size_t)j * ld;
                        if (i < rows)
                                set_elem(dtype, x, idx, rnd_val(rng));
                        else
                                set_poison(dtype, x, idx);
                }
        return x;
}

static void prob_make(struct tprob *tp, const struct spec *s, uint64_t *rng)
{
        struct gemmd_kproblem *kp = &tp->kp;
        uint32_t m = s->kind == SCHED_SYR2K ? s->n : s->m, n = s->n, k = s->k;
        uint32_t ra, ca, rb, cb;

        memset(tp, 0, sizeof(*tp));
        if (s->kind == SCHED_SYR2K) {
                ra = rb = s->ta ? k : n;
                ca = cb = s->ta ? n : k;
        } else {
                ra = s->ta ? k : m;
                ca = s->ta ? m : k;
                rb = s->tb ? n : k;
                cb = s->tb ? k : n;
        }
        *kp = (struct gemmd_kproblem){
                .lda = ra + s->pad,
                .ldb = rb + (s->pad * 3) % 7,
                .ldc = m + (s->pad * 5) % 11,
                .m = m, .n = n, .k = k,
                .alpha = (float)s->alpha, .beta = (float)s->beta,
                .alpha_f64 = s->alpha, .beta_f64 = s->beta,
                .kind = s->kind, .dtype = s->dtype,
                .trans_a = s->ta, .trans_b = s->kind == SCHED_SYR2K ? 0 : s->tb,
                .uplo = s->kind == SCHED_SYR2K ? s->uplo : 0,
                .tf32 = 1, /* ignored by the CPU */
        };
        tp->a = make_matrix(s->dtype, ra, ca, kp->lda, rng);
        tp->b = make_matrix(s->dtype, rb, cb, kp->ldb, rng);
        tp->na = (size_t)kp->lda * ca;
        tp->nb = (size_t)kp->ldb * cb;

        /* C: real values where the problem reads them (beta != 0), poison
         * where it must not read (beta == 0), and random values or poison
         * in the elements it must not touch. */
        tp->nc = (size_t)kp->ldc * n;
        tp->c = malloc(tp->nc * esize(s->dtype));
        tp->c0 = malloc(tp->nc * esize(s->dtype));
        cr_assert(tp->c && tp->c0);
        for (uint32_t j = 0; j < n; j++)
                for (int64_t i = 0; i < kp->ldc; i++) {
                        size_t idx = (size_t)i + (size_t)j * kp->ldc;
                        int inside = i < m && stored(kp, (uint32_t)i, j);
                        if ((inside && s->beta != 0.0) || (!inside && i < m && (rnd(rng) & 1)))
                                set_elem(s->dtype, tp->c, idx, rnd_val(rng));
                        else
                                set_poison(s->dtype, tp->c, idx);
                }
        memcpy(tp->c0, tp->c, tp->nc * esize(s->dtype));
        kp->a = (uintptr_t)tp->a;
        kp->b = (uintptr_t)tp->b;
        kp->c = (uintptr_t)tp->c;
}

static void prob_free(struct tprob *tp)
{
        free(tp->a);
        free(tp->b);
        free(tp->c);
        free(tp->c0);
        free(tp->ref);
        free(tp->absref);
}

static struct group *group_new(const struct spec *specs, uint32_t n, uint64_t seed)
{
        struct group *g = calloc(1, sizeof(*g));
        uint64_t rng = seed;

        cr_assert(g);
        g->n = n;
        g->p = calloc(n, sizeof(*g->p));
        g->kps = calloc(n, sizeof(*g->kps));
        g->sps = calloc(n, sizeof(*g->sps));
        cr_assert(g->p && g->kps && g->sps);
        for (uint32_t i = 0; i < n; i++) {
                prob_make(&g->p[i], &specs[i], &rng);
                g->kps[i] = g->p[i].kp;
                g->sps[i] = (struct sched_problem){
                        .kind = g->kps[i].kind, .dtype = g->kps[i].dtype,
                        .uplo = g->kps[i].uplo, .tf32 = g->kps[i].tf32,
                        .m = g->kps[i].m, .n = g->kps[i].n, .k = g->kps[i].k,
                };
        }
        return g;
}

static void group_free(struct group *g)
{
        if (!g)
                return;
        for (uint32_t i = 0; i < g->n; i++)
                prob_free(&g->p[i]);
        free(g->p);
        free(g->kps);
        free(g->sps);
        free(g);
}

/* Restores every C to its initial bits. */
static void group_reset(struct group *g)
{
        for (uint32_t i = 0; i < g->n; i++)
                memcpy(g->p[i].c, g->p[i].c0, g->p[i].nc * esize(g->p[i].kp.dtype));
}

/* Copies of every C, for bitwise comparisons between runs. */
static void **group_snapshot(const struct group *g)
{
        void **snap = calloc(g->n, sizeof(*snap));

        cr_assert(snap);
        for (uint32_t i = 0; i < g->n; i++) {
                size_t bytes = g->p[i].nc * esize(g->p[i].kp.dtype);
                snap[i] = malloc(bytes);
                cr_assert(snap[i]);
                memcpy(snap[i], g->p[i].c, bytes);
        }
        return snap;
}

static void snapshot_free(const struct group *g, void **snap)
{
        for (uint32_t i = 0; i < g->n; i++)
                free(snap[i]);
        free(snap);
}

/* Asserts that problem i of g holds exactly the bits of snap[i]. */
static void expect_same_bits(const struct group *g, uint32_t i, const void *snap, const char *what)
{
        const struct tprob *tp = &g->p[i];
        size_t es = esize(tp->kp.dtype);

        if (memcmp(tp->c, snap, tp->nc * es) == 0)
                return;
        for (size_t x = 0; x < tp->nc; x++)
                if (memcmp((char *)tp->c + x * es, (const char *)snap + x * es, es)) {
                        cr_assert_fail("%s: problem %u (kind %u dtype %u m %u n %u k %u) "
                                       "element (%zu, %zu) differs: %.9g vs %.9g",
                                       what, i, tp->kp.kind, tp->kp.dtype, tp->kp.m, tp->kp.n,
                                       tp->kp.k, x % (size_t)tp->kp.ldc, x / (size_t)tp->kp.ldc,
                                       get_elem(tp->kp.dtype, tp->c, x),
                                       get_elem(tp->kp.dtype, snap, x));
                }
}

/* ------------------------------------------------------------------------ */
/* Running a plan: every CTA, from `nthreads` threads (1: the calling
 * thread, CTAs in reverse order). */

struct runner {
        const struct group *g;
        const struct sched_plan *plan;
        const struct sched_config *cfg;
        struct cpu_workspace *ws;
        uint32_t nctas;
        atomic_uint next;
};

static void *run_thread(void *arg)
{
        struct runner *r = arg;

        for (;;) {
                uint32_t c = atomic_fetch_add(&r->next, 1);
                if (c >= r->nctas)
                        return NULL;
                cpu_gemm_run_cta(r->g->kps, r->g->sps, r->plan, r->cfg, c, r->ws);
        }
}

static uint32_t plan_ctas(const struct sched_plan *plan, const struct sched_config *cfg)
{
        return plan->nctas ? plan->nctas : cfg->ctas;
}

static void run_plan_ws(const struct group *g, const struct sched_plan *plan,
                        const struct sched_config *cfg, int nthreads, struct cpu_workspace *ws)
{
        struct runner r = {g, plan, cfg, ws, plan_ctas(plan, cfg), 0};

        if (nthreads <= 1) {
                for (uint32_t c = r.nctas; c-- > 0;)
                        cpu_gemm_run_cta(g->kps, g->sps, plan, cfg, c, ws);
        } else {
                pthread_t th[16];
                cr_assert(nthreads <= 16);
                for (int t = 0; t < nthreads; t++)
                        cr_assert_eq(pthread_create(&th[t], NULL, run_thread, &r), 0);
                for (int t = 0; t < nthreads; t++)
                        pthread_join(th[t], NULL);
        }
        for (uint32_t s = 0; s < plan->nsplit; s++)
                cr_assert_eq(ws->arrivals[s], 0, "split tile %u: arrivals not reset", s);
}

static void ws_alloc(struct cpu_workspace *ws, const struct sched_plan *plan,
                     const struct sched_config *cfg)
{
        size_t n = (size_t)plan->ws_chunks * cfg->shape.tm * cfg->shape.tn;

        ws->chunks = malloc(n ? n * CPU_WS_ELEM_BYTES : 1);
        ws->arrivals = calloc(plan->nsplit ? plan->nsplit : 1, sizeof(uint32_t));
        cr_assert(ws->chunks && ws->arrivals);
        /* Garbage in the workspace must not matter: all ones is a NaN in
         * float and in double. */
        memset(ws->chunks, 0xff, n * CPU_WS_ELEM_BYTES);
}

static void ws_free(struct cpu_workspace *ws)
{
        free(ws->chunks);
        free(ws->arrivals);
}

/* Plans g in `mode` and runs it. Returns the plan's split tile count. */
static uint32_t run_group(const struct group *g, enum sched_mode mode, struct sched_shape shape,
                          uint32_t ctas, int nthreads)
{
        struct sched_config cfg = {.mode = mode, .shape = shape, .ctas = ctas};
        struct sched_plan plan;
        struct cpu_workspace ws;
        uint32_t nsplit;
        int rc;

        sched_plan_init(&plan);
        rc = sched_plan_build(&plan, g->sps, g->n, &cfg);
        cr_assert_eq(rc, 0, "sched_plan_build(%s): %d", sched_mode_name(mode), rc);
        ws_alloc(&ws, &plan, &cfg);
        run_plan_ws(g, &plan, &cfg, nthreads, &ws);
        nsplit = plan.nsplit;
        ws_free(&ws);
        sched_plan_deinit(&plan);
        return nsplit;
}

/* ------------------------------------------------------------------------ */
/* References. */

/* op(X)(r, p) as the problem defines it: X[r + p*ld] for N, X[p + r*ld] for T. */
static double op_elem(int dtype, const void *x, int64_t ld, int t, uint32_t r, uint32_t p)
{
        size_t idx = t ? (size_t)p + (size_t)r * ld : (size_t)r + (size_t)p * ld;
        return get_elem(dtype, x, idx);
}

/* Reference of problem tp, summed in long double (so that it is a
 * reference for f64 too), and, per element, the sum of the magnitudes of
 * everything that went into it (for the error bound). */
static void prob_ref(struct tprob *tp)
{
        const struct gemmd_kproblem *kp = &tp->kp;
        uint32_t m = kp->m, n = kp->n, k = kp->k;
        int syr2k = kp->kind == SCHED_SYR2K;
        double *ad = malloc(sizeof(double) * m * k); /* op(A), m x k */
        double *bd = malloc(sizeof(double) * k * n); /* GEMM: op(B) k x n; SYR2K: n x k */
        long double *s = calloc((size_t)m * n, sizeof(long double));
        long double *sa = calloc((size_t)m * n, sizeof(long double));
        double *out = malloc(sizeof(double) * m * n), *absout = malloc(sizeof(double) * m * n);

        cr_assert(ad && bd && s && sa && out && absout);
        for (uint32_t p = 0; p < k; p++)
                for (uint32_t i = 0; i < m; i++)
                        ad[i + (size_t)p * m] =
                                op_elem(kp->dtype, tp->a, kp->lda, kp->trans_a, i, p);
        if (syr2k) {
                for (uint32_t p = 0; p < k; p++)
                        for (uint32_t j = 0; j < n; j++)
                                bd[j + (size_t)p * n] =
                                        op_elem(kp->dtype, tp->b, kp->ldb, kp->trans_a, j, p);
                for (uint32_t j = 0; j < n; j++)
                        for (uint32_t p = 0; p < k; p++) {
                                long double aj = ad[j + (size_t)p * m], bj = bd[j + (size_t)p * n];
                                for (uint32_t i = 0; i < m; i++) {
                                        long double ai = ad[i + (size_t)p * m];
                                        long double bi = bd[i + (size_t)p * n];
                                        s[i + (size_t)j * m] += ai * bj + bi * aj;
                                        sa[i + (size_t)j * m] += fabsl(ai * bj) + fabsl(bi * aj);
                                }
                        }
        } else {
                for (uint32_t j = 0; j < n; j++)
                        for (uint32_t p = 0; p < k; p++)
                                bd[p + (size_t)j * k] =
                                        op_elem(kp->dtype, tp->b, kp->ldb, !kp->trans_b, j, p);
                for (uint32_t j = 0; j < n; j++)
                        for (uint32_t p = 0; p < k; p++) {
                                long double b = bd[p + (size_t)j * k];
                                for (uint32_t i = 0; i < m; i++) {
                                        long double t = ad[i + (size_t)p * m] * b;
                                        s[i + (size_t)j * m] += t;
                                        sa[i + (size_t)j * m] += fabsl(t);
                                }
                        }
        }
        for (uint32_t j = 0; j < n; j++)
                for (uint32_t i = 0; i < m; i++) {
                        size_t x = i + (size_t)j * m;
                        long double c = 0, alpha = alpha_of(kp), beta = beta_of(kp);
                        if (beta != 0 && stored(kp, i, j))
                                c = get_elem(kp->dtype, tp->c0, i + (size_t)j * kp->ldc);
                        out[x] = (double)(alpha * s[x] + beta * c);
                        absout[x] = (double)(fabsl(alpha) * sa[x] + fabsl(beta * c));
                }
        free(ad);
        free(bd);
        free(s);
        free(sa);
        tp->ref = out;
        tp->absref = absout;
}

/* The canonical accumulation order (cpu_gemm.h), one element at a time in
 * scalar code. The volatile temporaries keep every product and sum rounded
 * to f32 whatever the compiler's contraction setting. */
static float canon_elem_f32(const struct tprob *tp, uint32_t i, uint32_t j)
{
        const struct gemmd_kproblem *kp = &tp->kp;
        int d = kp->dtype, t = kp->trans_a;
        uint32_t nkc = sched_kchunks(kp->k);
        float total = 0.0f;

        for (uint32_t c = 0; c < nkc; c++) {
                uint32_t k0 = c * SCHED_KCHUNK;
                uint32_t k1 = k0 + SCHED_KCHUNK < kp->k ? k0 + SCHED_KCHUNK : kp->k;
                float acc = 0.0f;
                volatile float prod;
                if (kp->kind == SCHED_SYR2K) {
                        for (uint32_t p = k0; p < k1; p++) {
                                prod = (float)op_elem(d, tp->a, kp->lda, t, i, p) *
                                       (float)op_elem(d, tp->b, kp->ldb, t, j, p);
                                acc = acc + prod;
                        }
                        for (uint32_t p = k0; p < k1; p++) {
                                prod = (float)op_elem(d, tp->b, kp->ldb, t, i, p) *
                                       (float)op_elem(d, tp->a, kp->lda, t, j, p);
                                acc = acc + prod;
                        }
                } else {
                        for (uint32_t p = k0; p < k1; p++) {
                                prod = (float)op_elem(d, tp->a, kp->lda, kp->trans_a, i, p) *
                                       (float)op_elem(d, tp->b, kp->ldb, !kp->trans_b, j, p);
                                acc = acc + prod;
                        }
                }
                if (c == 0)
                        total = acc;
                else
                        total = total + acc;
        }
        volatile float r = kp->alpha * total;
        if (kp->beta != 0.0f) {
                volatile float bc = kp->beta * (float)get_elem(d, tp->c0, i + (size_t)j * kp->ldc);
                r = r + bc;
        }
        return (float)round_to(d, r);
}

/* The f64 order: no chunks, one sum from zero over all of K in increasing
 * k (SYR2K: all of the first term's k, then all of the second's), with
 * the f64 scalars. */
static double canon_elem_f64(const struct tprob *tp, uint32_t i, uint32_t j)
{
        const struct gemmd_kproblem *kp = &tp->kp;
        int d = kp->dtype, t = kp->trans_a, syr2k = kp->kind == SCHED_SYR2K;
        double total = 0.0;
        volatile double prod;

        for (uint32_t p = 0; p < kp->k; p++) {
                prod = syr2k ? op_elem(d, tp->a, kp->lda, t, i, p) * op_elem(d, tp->b, kp->ldb, t, j, p)
                             : op_elem(d, tp->a, kp->lda, kp->trans_a, i, p) *
                                       op_elem(d, tp->b, kp->ldb, !kp->trans_b, j, p);
                total = total + prod;
        }
        for (uint32_t p = 0; syr2k && p < kp->k; p++) {
                prod = op_elem(d, tp->b, kp->ldb, t, i, p) * op_elem(d, tp->a, kp->lda, t, j, p);
                total = total + prod;
        }
        volatile double r = kp->alpha_f64 * total;
        if (kp->beta_f64 != 0.0) {
                volatile double bc = kp->beta_f64 * get_elem(d, tp->c0, i + (size_t)j * kp->ldc);
                r = r + bc;
        }
        return r;
}

/* The canonical result of element (i, j), as a double. */
static double canon_elem(const struct tprob *tp, uint32_t i, uint32_t j)
{
        return tp->kp.dtype == GEMMD_F64 ? canon_elem_f64(tp, i, j) : canon_elem_f32(tp, i, j);
}

/* Checks problem i of g against its reference: norm-wise and element-wise
 * error bounds, no NaN where the reference has none, and every element the
 * problem must not touch bitwise unchanged. */
static void check_prob(struct group *g, uint32_t pi, const char *what)
{
        struct tprob *tp = &g->p[pi];
        const struct gemmd_kproblem *kp = &tp->kp;
        int d = kp->dtype;
        size_t es = esize(d);
        double u_out = d == GEMMD_F16 ? 0x1p-11 : d == GEMMD_BF16 ? 0x1p-8 : 0.0;
        double u_acc = d == GEMMD_F64 ? 0x1p-53 : 0x1p-24;
        double floor_abs = d == GEMMD_F16 ? 0x1p-25 : d == GEMMD_F64 ? 1e-300 : 1e-37;
        double tol_norm = d == GEMMD_F16   ? 2e-3
                          : d == GEMMD_BF16 ? 1e-2
                          : d == GEMMD_F64  ? 1e-14
                                            : 1e-5;
        double nterms = kp->kind == SCHED_SYR2K ? 2.0 * kp->k : kp->k;
        double err2 = 0, ref2 = 0;

        if (!tp->ref)
                prob_ref(tp);
        for (uint32_t j = 0; j < kp->n; j++)
                for (int64_t i = 0; i < kp->ldc; i++) {
                        size_t x = (size_t)i + (size_t)j * kp->ldc;
                        if (i >= kp->m || !stored(kp, (uint32_t)i, j)) {
                                cr_assert(memcmp((char *)tp->c + x * es, (char *)tp->c0 + x * es,
                                                 es) == 0,
                                          "%s: problem %u (kind %u uplo %u m %u n %u ldc %lld) "
                                          "element (%lld, %u) must be untouched",
                                          what, pi, kp->kind, kp->uplo, kp->m, kp->n,
                                          (long long)kp->ldc, (long long)i, j);
                                continue;
                        }
                        double out = get_elem(d, tp->c, x);
                        double ref = tp->ref[i + (size_t)j * kp->m];
                        double bound = tp->absref[i + (size_t)j * kp->m] *
                                               ((nterms + 4) * u_acc + u_out) + floor_abs;
                        cr_assert(fabs(out - ref) <= bound,
                                  "%s: problem %u (kind %u dtype %u ta %u tb %u uplo %u m %u n %u "
                                  "k %u alpha %g beta %g) element (%lld, %u): got %.17g, want "
                                  "%.17g (bound %.3g)",
                                  what, pi, kp->kind, d, kp->trans_a, kp->trans_b, kp->uplo, kp->m,
                                  kp->n, kp->k, alpha_of(kp), beta_of(kp), (long long)i, j, out, ref,
                                  bound);
                        err2 += (out - ref) * (out - ref);
                        ref2 += ref * ref;
                }
        cr_assert(ref2 > 0, "%s: problem %u: empty reference", what, pi);
        cr_assert(sqrt(err2 / ref2) <= tol_norm,
                  "%s: problem %u (kind %u dtype %u m %u n %u k %u): relative error %.3g > %.3g",
                  what, pi, kp->kind, d, kp->m, kp->n, kp->k, sqrt(err2 / ref2), tol_norm);
}

static void check_group(struct group *g, const char *what)
{
        for (uint32_t i = 0; i < g->n; i++)
                check_prob(g, i, what);
}

/* ------------------------------------------------------------------------ */
/* Groups used by the tests. */

static const struct sched_shape shapes[] = {{64, 64, 32}, {128, 64, 64}, {64, 128, 64}};
#define NSHAPES (sizeof(shapes) / sizeof(shapes[0]))

/* 1/3 and 0.1 have no exact float: an f64 problem must use them as doubles. */
static const double alphas[] = {1.0, -0.5, 1.25, 1.0 / 3, 2.0};
static const double betas[] = {0.0, 1.0, -2.0, 0.1, 0.0, 0.25};

/* The dtypes the kernel runs, in enum order: f32, f16, bf16, f64. */
#define NDT 4

/* A group of one config (dtype, kind, uplo): sizes of 1, odd sizes, sizes
 * around and between tile multiples, k from 1 to 2000 across canonical
 * chunk boundaries, every transpose combination, padded leading dims, and
 * alpha/beta pairs including beta == 0. Returns the problem count. */
static uint32_t mixed_specs(struct spec *out, int dtype, int kind, int uplo)
{
        static const uint32_t gemm[][3] = {
                {1, 1, 1},      {1, 37, 513},   {37, 1, 2000},  {65, 63, 511},
                {129, 70, 512}, {200, 131, 1025}, {64, 64, 32}, {130, 129, 7},
                {3, 200, 1},    {127, 65, 1100},
        };
        static const uint32_t syr2k[][2] = {
                {1, 1},     {1, 2000},  {37, 513}, {64, 511},   {65, 1024},
                {129, 300}, {150, 1025}, {200, 7}, {127, 1100}, {63, 64},
        };
        uint32_t n = 10;

        for (uint32_t i = 0; i < n; i++) {
                struct spec s = {
                        .kind = (uint8_t)kind, .dtype = (uint8_t)dtype,
                        .ta = i & 1, .tb = (i >> 1) & 1, .uplo = (uint8_t)uplo,
                        .pad = (uint32_t[]){0, 1, 5, 17}[i % 4],
                        .alpha = alphas[i % 5], .beta = betas[i % 6],
                };
                if (kind == SCHED_SYR2K) {
                        s.m = s.n = syr2k[i][0];
                        s.k = syr2k[i][1];
                } else {
                        s.m = gemm[i][0];
                        s.n = gemm[i][1];
                        s.k = gemm[i][2];
                }
                out[i] = s;
        }
        return n;
}

static uint64_t seed_of(int a, int b, int c)
{
        return 0x5eed0000ull + (uint64_t)a * 1000 + (uint64_t)b * 10 + (uint64_t)c;
}

/* ------------------------------------------------------------------------ */
/* Accuracy: every config x mode x shape. */

struct acc_param {
        int dtype, kind, uplo, mode, shape;
};

ParameterizedTestParameters(cpu_gemm, accuracy)
{
        static struct acc_param ps[NDT * 3 * SCHED_NMODES * NSHAPES];
        size_t n = 0;

        for (int d = 0; d < NDT; d++)
                for (int kind = 0; kind < 3; kind++)
                        for (int m = 0; m < SCHED_NMODES; m++)
                                for (int s = 0; s < (int)NSHAPES; s++)
                                        ps[n++] = (struct acc_param){d, kind > 0, kind == 2, m, s};
        return cr_make_param_array(struct acc_param, ps, n);
}

ParameterizedTest(struct acc_param *p, cpu_gemm, accuracy)
{
        struct spec specs[16];
        char what[96];
        uint32_t n = mixed_specs(specs, p->dtype, p->kind, p->uplo);
        struct group *g = group_new(specs, n, seed_of(p->dtype, p->kind, p->uplo));

        snprintf(what, sizeof(what), "dtype %d kind %d uplo %d mode %s shape %ux%u", p->dtype,
                 p->kind, p->uplo, sched_mode_name(p->mode), shapes[p->shape].tm,
                 shapes[p->shape].tn);
        run_group(g, p->mode, shapes[p->shape], 12, 3);
        check_group(g, what);
        group_free(g);
}

/* ------------------------------------------------------------------------ */
/* Bit-exactness: the canonical order, whatever the mode, split or group. */

struct cfg_param {
        int dtype, kind, uplo;
};

/* Every dtype x (GEMM, SYR2K lower, SYR2K upper). */
static struct cfg_param cfg_params[NDT * 3];

static size_t cfg_params_fill(void)
{
        size_t n = 0;

        for (int d = 0; d < NDT; d++)
                for (int kind = 0; kind < 3; kind++)
                        cfg_params[n++] = (struct cfg_param){d, kind > 0, kind == 2};
        return n;
}

ParameterizedTestParameters(cpu_gemm, canonical_bits)
{
        size_t n = cfg_params_fill();
        return cr_make_param_array(struct cfg_param, cfg_params, n);
}

ParameterizedTestParameters(cpu_gemm, modes_same_bits)
{
        size_t n = cfg_params_fill();
        return cr_make_param_array(struct cfg_param, cfg_params, n);
}

ParameterizedTestParameters(cpu_gemm, every_chunk_split)
{
        size_t n = cfg_params_fill();
        return cr_make_param_array(struct cfg_param, cfg_params, n);
}

/* Every element equals the scalar emulation of the canonical order. */
ParameterizedTest(struct cfg_param *p, cpu_gemm, canonical_bits)
{
        static const uint32_t sz[][3] = {{33, 70, 1100}, {70, 33, 513}, {5, 9, 1}, {66, 66, 512}};
        struct spec specs[4];

        for (uint32_t i = 0; i < 4; i++)
                specs[i] = (struct spec){
                        .kind = (uint8_t)p->kind, .dtype = (uint8_t)p->dtype,
                        .ta = i & 1, .tb = (i >> 1) & 1, .uplo = (uint8_t)p->uplo,
                        .m = sz[i][0], .n = p->kind == SCHED_SYR2K ? sz[i][0] : sz[i][1],
                        .k = sz[i][2], .pad = i, .alpha = alphas[i], .beta = betas[i],
                };
        struct group *g = group_new(specs, 4, seed_of(p->dtype, p->kind, p->uplo) + 7);

        run_group(g, SCHED_LPT, shapes[1], 5, 2);
        for (uint32_t i = 0; i < g->n; i++) {
                struct tprob *tp = &g->p[i];
                for (uint32_t j = 0; j < tp->kp.n; j++)
                        for (uint32_t r = 0; r < tp->kp.m; r++) {
                                if (!stored(&tp->kp, r, j))
                                        continue;
                                double want = canon_elem(tp, r, j);
                                double got = get_elem(tp->kp.dtype, tp->c,
                                                      r + (size_t)j * tp->kp.ldc);
                                cr_assert(memcmp(&want, &got, sizeof(double)) == 0,
                                          "dtype %u problem %u element (%u, %u): got %a, "
                                          "canonical %a",
                                          tp->kp.dtype, i, r, j, got, want);
                        }
        }
        group_free(g);
}

/* A group with few, deep tiles: a tail that the split mode cuts. */
static struct group *deep_group(const struct cfg_param *p, uint64_t seed)
{
        struct spec specs[3] = {
                {.m = 100, .n = 90, .k = 2000, .tb = 1, .pad = 3, .alpha = 1.0, .beta = 0.5},
                {.m = 64, .n = 130, .k = 1537, .ta = 1, .alpha = -1.5, .beta = 0.0},
                {.m = 7, .n = 20, .k = 1024, .ta = 1, .tb = 1, .pad = 1, .alpha = 1.0 / 3,
                 .beta = 0.1},
        };

        for (int i = 0; i < 3; i++) {
                specs[i].kind = (uint8_t)p->kind;
                specs[i].dtype = (uint8_t)p->dtype;
                specs[i].uplo = (uint8_t)p->uplo;
                if (p->kind == SCHED_SYR2K)
                        specs[i].m = specs[i].n;
        }
        return group_new(specs, 3, seed);
}

/* Every mode, on several CTA counts and shapes and from several threads,
 * gives the lpt plan's bits; the split plans do cut tiles, f64's never. */
ParameterizedTest(struct cfg_param *p, cpu_gemm, modes_same_bits)
{
        static const uint32_t ctas[] = {4, 16, 64, 132};
        struct group *g = deep_group(p, seed_of(p->dtype, p->kind, p->uplo) + 11);
        uint32_t split_tiles = 0;

        for (size_t s = 0; s < NSHAPES; s++) {
                group_reset(g);
                run_group(g, SCHED_LPT, shapes[s], 8, 1);
                check_group(g, "lpt");
                void **want = group_snapshot(g);
                for (size_t c = 0; c < sizeof(ctas) / sizeof(ctas[0]); c++)
                        for (int mode = 0; mode < SCHED_NMODES; mode++) {
                                char what[64];
                                snprintf(what, sizeof(what), "%s, %u ctas, shape %zu",
                                         sched_mode_name(mode), ctas[c], s);
                                group_reset(g);
                                uint32_t ns = run_group(g, mode, shapes[s], ctas[c], 4);
                                if (mode == SCHED_SPLIT)
                                        split_tiles += ns;
                                for (uint32_t i = 0; i < g->n; i++)
                                        expect_same_bits(g, i, want[i], what);
                        }
                snapshot_free(g, want);
        }
        if (p->dtype == GEMMD_F64)
                cr_expect(split_tiles == 0, "a split plan cut %u f64 tiles (f64 K is one pass)", split_tiles);
        else
                cr_expect(split_tiles > 0, "no split plan cut a tile: the split path went untested");
        group_free(g);
}

/*
 * A hand-made plan that splits every tile into one entry per canonical
 * chunk, spread over the CTAs so that the parts of a tile run on different
 * threads in varying order; run many times with one reused workspace. The
 * bits must equal the lpt plan's. This exercises the kernel's split path
 * independently of the planner's choices.
 */
ParameterizedTest(struct cfg_param *p, cpu_gemm, every_chunk_split)
{
        struct group *g = deep_group(p, seed_of(p->dtype, p->kind, p->uplo) + 13);
        struct sched_shape shape = shapes[1];
        struct sched_config cfg = {.mode = SCHED_SPLIT, .shape = shape, .ctas = 7};
        uint32_t nsplit = 0, ne = 0, nws = 0;

        for (uint32_t i = 0; i < g->n; i++) {
                uint32_t t = sched_tile_count(&g->sps[i], shape);
                nsplit += t;
                ne += t * sched_kchunks(g->sps[i].k);
                nws += t * sched_kchunks(g->sps[i].k);
        }
        struct sched_entry *all = calloc(ne, sizeof(*all));
        struct sched_entry *entries = calloc(ne, sizeof(*entries));
        uint32_t *parts = calloc(nsplit, 4), *wsl = calloc(nsplit, 4);
        uint32_t cta_begin[8];
        cr_assert(all && entries && parts && wsl);

        uint32_t e = 0, s = 0, w = 0;
        for (uint32_t i = 0; i < g->n; i++) {
                uint32_t nkc = sched_kchunks(g->sps[i].k);
                for (uint32_t t = 0; t < sched_tile_count(&g->sps[i], shape); t++, s++) {
                        parts[s] = nkc;
                        wsl[s] = w;
                        w += nkc;
                        for (uint32_t c = 0; c < nkc; c++)
                                all[e++] = (struct sched_entry){i, t, (uint16_t)c,
                                                                (uint16_t)(c + 1), s};
                }
        }
        /* Entry x goes to CTA (x * 3) % 7, CTA lists in reverse entry order. */
        uint32_t n = 0;
        for (uint32_t c = 0; c < 7; c++) {
                cta_begin[c] = n;
                for (uint32_t x = ne; x-- > 0;)
                        if ((x * 3) % 7 == c)
                                entries[n++] = all[x];
        }
        cta_begin[7] = n;
        struct sched_plan plan = {
                .nctas = 7, .nproblems = g->n, .nentries = ne, .nsplit = nsplit,
                .ws_chunks = nws, .cta_begin = cta_begin, .entries = entries,
                .split_parts = parts, .split_ws = wsl,
        };
        struct cpu_workspace ws;

        run_group(g, SCHED_LPT, shape, 3, 1);
        void **want = group_snapshot(g);
        ws_alloc(&ws, &plan, &cfg);
        for (int rep = 0; rep < 12; rep++) {
                group_reset(g);
                run_plan_ws(g, &plan, &cfg, 1 + rep % 6, &ws);
                for (uint32_t i = 0; i < g->n; i++)
                        expect_same_bits(g, i, want[i], "every chunk split");
        }
        check_group(g, "every chunk split");
        ws_free(&ws);
        snapshot_free(g, want);
        free(all);
        free(entries);
        free(parts);
        free(wsl);
        group_free(g);
}

/* The fill split (a wave of a few GEMM tiles and long K, every
 * tile cut to fill the CTAs, sched_plan reduce_apart) gives the bits of
 * whole tiles, and the results check: a lone problem and a pair, every
 * transpose, beta zero and not. */
Test(cpu_gemm, fill_split_same_bits)
{
        static const uint8_t dts[] = {GEMMD_F16, GEMMD_BF16, GEMMD_F32};

        for (int d = 0; d < 3; d++)
                for (uint32_t np = 1; np <= 2; np++) {
                        struct spec specs[2] = {
                                {.kind = SCHED_GEMM, .dtype = dts[d], .ta = 1, .tb = 0, .m = 130, .n = 70,
                                 .k = 5000, .pad = 1, .alpha = 0.5, .beta = 0},
                                {.kind = SCHED_GEMM, .dtype = dts[d], .ta = 0, .tb = 1, .m = 64, .n = 129,
                                 .k = 3000 + 700 * d, .pad = 0, .alpha = 1, .beta = -1},
                        };
                        struct group *g = group_new(specs, np, seed_of(dts[d], 7, (int)np));

                        run_group(g, SCHED_LPT, shapes[1], 132, 1);
                        check_group(g, "fill: lpt");
                        void **want = group_snapshot(g);
                        for (int mode = SCHED_SPLIT; mode <= SCHED_AUTO; mode += SCHED_AUTO - SCHED_SPLIT) {
                                group_reset(g);
                                cr_assert(run_group(g, (enum sched_mode)mode, shapes[1], 132, 4) > 0,
                                          "%s cut no tile", sched_mode_name(mode));
                                for (uint32_t i = 0; i < np; i++)
                                        expect_same_bits(g, i, want[i], "fill split");
                        }
                        snapshot_free(g, want);
                        group_free(g);
                }
}

/* A problem gives the same bits alone as inside a bigger group, in any
 * mode: batching never changes a result. */
Test(cpu_gemm, alone_equals_grouped)
{
        struct spec specs[2 * NDT * 3];
        uint32_t n = 0;

        for (int d = 0; d < NDT; d++)
                for (int kind = 0; kind < 3; kind++) {
                        struct spec tmp[16];
                        uint32_t c = mixed_specs(tmp, d, kind > 0, kind == 2);
                        specs[n++] = tmp[(d * 3 + kind) % c];
                        specs[n++] = tmp[(d * 3 + kind + 5) % c];
                }
        struct group *big = group_new(specs, n, 99);

        run_group(big, SCHED_SPLIT, shapes[0], 132, 4);
        check_group(big, "grouped");
        for (uint32_t i = 0; i < n; i++) {
                struct group *one = group_new(&specs[i], 1, 0);
                /* Same inputs and initial C as inside the big group. */
                size_t es = esize(specs[i].dtype);
                struct tprob *a = &one->p[0], *b = &big->p[i];
                memcpy(a->a, b->a, b->na * es);
                memcpy(a->b, b->b, b->nb * es);
                memcpy(a->c0, b->c0, b->nc * es);
                for (int mode = 0; mode < SCHED_NMODES; mode++) {
                        group_reset(one);
                        run_group(one, mode, shapes[mode % NSHAPES], 1 + mode * 3, 2);
                        expect_same_bits(one, 0, b->c, sched_mode_name(mode));
                }
                group_free(one);
        }
        group_free(big);
}

/* beta == 0: C is never read, so NaN and infinity in C do not propagate;
 * beta != 0 reads C. */
Test(cpu_gemm, beta_zero_does_not_read_c)
{
        for (int d = 0; d < NDT; d++) {
                struct spec s[2] = {
                        {.kind = SCHED_GEMM, .dtype = (uint8_t)d, .m = 70, .n = 5, .k = 600,
                         .alpha = 1.0f, .beta = 0.0f},
                        {.kind = SCHED_SYR2K, .dtype = (uint8_t)d, .uplo = 1, .m = 70, .n = 70,
                         .k = 3, .ta = 1, .alpha = 2.0f, .beta = 0.0f},
                };
                struct group *g = group_new(s, 2, 5 + d);
                for (uint32_t i = 0; i < 2; i++) {
                        struct tprob *tp = &g->p[i];
                        for (size_t x = 0; x < tp->nc; x++) {
                                uint32_t r = x % tp->kp.ldc, c = x / tp->kp.ldc;
                                if (r < tp->kp.m && stored(&tp->kp, r, c))
                                        set_elem(d, tp->c0, x, (x & 1) ? INFINITY : -NAN);
                        }
                }
                group_reset(g);
                run_group(g, SCHED_LPT, shapes[0], 4, 1);
                check_group(g, "beta 0");

                /* With beta != 0 the infinities and NaNs must come through. */
                g->kps[0].beta = g->p[0].kp.beta = 1.0f;
                g->kps[0].beta_f64 = g->p[0].kp.beta_f64 = 1.0;
                group_reset(g);
                run_group(g, SCHED_ROUND_ROBIN, shapes[0], 4, 1);
                double v0 = get_elem(d, g->p[0].c, 0), v1 = get_elem(d, g->p[0].c, 1);
                cr_assert(isnan(v0) && isinf(v1), "beta 1: got %g %g", v0, v1);
                group_free(g);
        }
}

/* Small integers make every sum exact: the kernel must get them exactly, for
 * every dtype, with k across several chunks. */
Test(cpu_gemm, exact_integers)
{
        for (int d = 0; d < NDT; d++) {
                struct spec s = {.kind = SCHED_GEMM, .dtype = (uint8_t)d, .m = 67, .n = 45,
                                 .k = 1500, .ta = 1, .tb = 1, .pad = 2, .alpha = 1.0f,
                                 .beta = 1.0f};
                struct group *g = group_new(&s, 1, 1);
                struct tprob *tp = &g->p[0];
                size_t na = (size_t)tp->kp.lda * tp->kp.m, nb = (size_t)tp->kp.ldb * tp->kp.k;
                uint64_t rng = 3;
                for (size_t x = 0; x < na; x++)
                        if (x % tp->kp.lda < tp->kp.k)
                                set_elem(d, tp->a, x, (double)(int)(rnd(&rng) % 3) - 1.0);
                for (size_t x = 0; x < nb; x++)
                        if (x % tp->kp.ldb < tp->kp.n)
                                set_elem(d, tp->b, x, (double)(int)(rnd(&rng) % 3) - 1.0);
                for (size_t x = 0; x < tp->nc; x++)
                        if (x % tp->kp.ldc < tp->kp.m)
                                set_elem(d, tp->c0, x, 3.0);
                group_reset(g);
                run_group(g, SCHED_DEVICE, shapes[1], 3, 2);
                prob_ref(tp);
                for (uint32_t j = 0; j < tp->kp.n; j++)
                        for (uint32_t i = 0; i < tp->kp.m; i++) {
                                double want = round_to(d, tp->ref[i + (size_t)j * tp->kp.m]);
                                double got = get_elem(d, tp->c, i + (size_t)j * tp->kp.ldc);
                                cr_assert_eq(got, want, "dtype %d (%u, %u): %g vs %g", d, i, j,
                                             got, want);
                        }
                group_free(g);
        }
}

/* CTAs past the plan's CTA count do nothing; the others complete it. */
Test(cpu_gemm, ctas_past_the_plan_do_nothing)
{
        struct spec s = {.kind = SCHED_GEMM, .dtype = GEMMD_F32, .m = 100, .n = 70, .k = 10,
                         .alpha = 1.0f, .beta = 0.0f};
        struct group *g = group_new(&s, 1, 2);

        for (int mode = 0; mode < SCHED_NMODES; mode++) {
                struct sched_config cfg = {.mode = mode, .shape = shapes[0], .ctas = 3};
                struct sched_plan plan;
                struct cpu_workspace ws;
                uint32_t nctas;

                sched_plan_init(&plan);
                cr_assert_eq(sched_plan_build(&plan, g->sps, 1, &cfg), 0);
                nctas = plan_ctas(&plan, &cfg);
                ws_alloc(&ws, &plan, &cfg);
                group_reset(g);
                for (uint32_t c = nctas; c < nctas + 40; c++)
                        cpu_gemm_run_cta(g->kps, g->sps, &plan, &cfg, c, &ws);
                cr_assert(memcmp(g->p[0].c, g->p[0].c0, g->p[0].nc * 4) == 0,
                          "%s: a CTA past the plan wrote C", sched_mode_name(mode));
                for (uint32_t c = 0; c < nctas; c++)
                        cpu_gemm_run_cta(g->kps, g->sps, &plan, &cfg, c, &ws);
                check_group(g, sched_mode_name(mode));
                ws_free(&ws);
                sched_plan_deinit(&plan);
        }
        group_free(g);
}

/* ------------------------------------------------------------------------ */
/* half.h */

/* The value of an f16 or bf16 bit pattern, computed independently. */
static double f16_value(uint16_t h)
{
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
        return (h & 0x8000) ? -v : v;
}

static double bf16_value(uint16_t h)
{
        int e = (h >> 7) & 0xff, m = h & 0x7f;
        double v = e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
        return (h & 0x8000) ? -v : v;
}

/* Round-to-nearest-even into a format whose non-negative finite patterns
 * 0 .. maxfin are increasing in value; maxfin + 1 is infinity, whose value
 * for rounding is the next power of two (IEEE overflow rule). */
static uint16_t ref_round(double x, double (*value)(uint16_t), uint16_t maxfin, double inf_at)
{
        uint16_t sign = signbit(x) ? 0x8000 : 0;
        double a = fabs(x);
        uint32_t lo = 0, hi = maxfin;

        if (a >= inf_at)
                return sign | (uint16_t)(maxfin + 1);
        while (lo < hi) { /* largest pattern with value <= a */
                uint32_t mid = (lo + hi + 1) / 2;
                if (value((uint16_t)mid) <= a)
                        lo = mid;
                else
                        hi = mid - 1;
        }
        double v0 = value((uint16_t)lo);
        double v1 = lo == maxfin ? 2 * inf_at - value(maxfin) : value((uint16_t)(lo + 1));
        if (a - v0 > v1 - a || (a - v0 == v1 - a && (lo & 1)))
                lo++;
        return sign | (uint16_t)lo;
}

static void check_f16(float f)
{
        uint16_t got = gemmd_f32_to_f16(f);

        if (isnan(f)) {
                cr_assert((got & 0x7c00) == 0x7c00 && (got & 0x3ff) && (got & 0x200),
                          "f16(NaN %08x) = %04x", gemmd_f32_bits(f), got);
                cr_assert_eq(got >> 15, gemmd_f32_bits(f) >> 31);
                return;
        }
        uint16_t want = ref_round(f, f16_value, 0x7bff, 65520.0);
        cr_assert_eq(got, want, "f16(%a) = %04x, want %04x", f, got, want);
#ifdef __FLT16_MAX__
        _Float16 h = (_Float16)f;
        uint16_t hb;
        memcpy(&hb, &h, 2);
        cr_assert_eq(got, hb, "f16(%a) = %04x, the compiler says %04x", f, got, hb);
#endif
}

static void check_bf16(float f)
{
        uint16_t got = gemmd_f32_to_bf16(f);

        if (isnan(f)) {
                cr_assert((got & 0x7f80) == 0x7f80 && (got & 0x7f) && (got & 0x40),
                          "bf16(NaN %08x) = %04x", gemmd_f32_bits(f), got);
                cr_assert_eq(got >> 15, gemmd_f32_bits(f) >> 31);
                return;
        }
        /* Halfway between the largest bf16 and 2^128 (infinity). */
        uint16_t want = ref_round(f, bf16_value, 0x7f7f, ldexp(0x1ff, 119));
        cr_assert_eq(got, want, "bf16(%a) = %04x, want %04x", f, got, want);
}

Test(half, f16_to_f32_exact_and_round_trip)
{
        for (uint32_t h = 0; h < 0x10000; h++) {
                float f = gemmd_f16_to_f32((uint16_t)h);
                int e = (h >> 10) & 0x1f, m = h & 0x3ff;
                if (e == 0x1f && m) {
                        cr_assert(isnan(f), "%04x", h);
                        cr_assert_eq(gemmd_f32_to_f16(f), h | 0x200, "NaN %04x", h);
                        continue;
                }
                if (e == 0x1f)
                        cr_assert(isinf(f) && (f < 0) == (h >> 15), "%04x", h);
                else
                        cr_assert_eq((double)f, f16_value((uint16_t)h), "%04x", h);
                cr_assert_eq(signbit(f) != 0, (h >> 15) != 0, "sign of %04x", h);
                cr_assert_eq(gemmd_f32_to_f16(f), h, "round trip of %04x", h);
        }
}

Test(half, bf16_to_f32_exact_and_round_trip)
{
        for (uint32_t h = 0; h < 0x10000; h++) {
                float f = gemmd_bf16_to_f32((uint16_t)h);
                int e = (h >> 7) & 0xff, m = h & 0x7f;
                if (e == 0xff && m) {
                        cr_assert(isnan(f), "%04x", h);
                        cr_assert_eq(gemmd_f32_to_bf16(f), h | 0x40, "NaN %04x", h);
                        continue;
                }
                if (e != 0xff)
                        cr_assert_eq((double)f, bf16_value((uint16_t)h), "%04x", h);
                cr_assert_eq(gemmd_f32_to_bf16(f), h, "round trip of %04x", h);
        }
}

/* Every f16 value, the midpoints between neighbours and the floats next to
 * them (ties, just above and below), plus random floats of every exponent. */
Test(half, f32_to_f16_rounds_to_nearest_even)
{
        uint64_t rng = 42;

        for (uint32_t h = 0; h <= 0x7bff; h++) {
                double v0 = f16_value((uint16_t)h);
                double v1 = h == 0x7bff ? 65536.0 : f16_value((uint16_t)(h + 1));
                float mid = (float)((v0 + v1) / 2);
                cr_assert_eq((double)mid, (v0 + v1) / 2); /* exact in f32 */
                float fs[] = {(float)v0, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
                for (int i = 0; i < 4; i++) {
                        check_f16(fs[i]);
                        check_f16(-fs[i]);
                }
        }
        float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-30f, 1e30f,
                           0x1p-25f, 0x1p-26f, 65504.0f, 65519.99f, 65520.0f, 1e-45f};
        for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
                check_f16(special[i]);
        for (int i = 0; i < 2000000; i++)
                check_f16(gemmd_bits_f32((uint32_t)rnd(&rng)));
        for (int i = 0; i < 2000000; i++) /* concentrated on f16's range */
                check_f16(gemmd_bits_f32(0x30000000u + (uint32_t)(rnd(&rng) % 0x18000000u)) *
                          ((i & 1) ? -1.0f : 1.0f));
}

Test(half, f32_to_bf16_rounds_to_nearest_even)
{
        uint64_t rng = 43;

        for (uint32_t h = 0; h <= 0x7f7f; h++) {
                double v0 = bf16_value((uint16_t)h);
                double v1 = h == 0x7f7f ? ldexp(1, 128) : bf16_value((uint16_t)(h + 1));
                double midd = (v0 + v1) / 2;
                float mid = (float)midd;
                cr_assert_eq((double)mid, midd);
                float fs[] = {(float)v0, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
                for (int i = 0; i < 4; i++) {
                        if (isinf(fs[i]))
                                continue;
                        check_bf16(fs[i]);
                        check_bf16(-fs[i]);
                }
        }
        float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, 3.4e38f};
        for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
                check_bf16(special[i]);
        for (int i = 0; i < 2000000; i++)
                check_bf16(gemmd_bits_f32((uint32_t)rnd(&rng)));
}
