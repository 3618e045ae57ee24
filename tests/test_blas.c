/*
 * test_blas.c - gemmd's libblas.so.3 (blas/) in what the reference testers
 * do not reach: which calls the flop threshold sends to gemmd, results
 * staying right when the daemon is down, goes away or comes back, NaN in C
 * with beta == 0, C's gaps and other triangle untouched, transposes and
 * leading dimensions on larger sizes, threads calling at once, fork, and the
 * error handlers a program defines winning over the library's.
 *
 * The suite links build/blas/libblas.so.3 by its soname, as any BLAS
 * program does, and each test (its own process under Criterion) sets the
 * environment the library reads once per process before its first call.
 * Results are compared with a long double reference on random inputs, C
 * poisoned first; which calls the daemon ran is read from its statistics.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/e2e_util.h"
#include "tests/hard_util.h"

void sgemm_(const char *, const char *, const int *, const int *, const int *, const float *,
            const float *, const int *, const float *, const int *, const float *, float *,
            const int *);
void dgemm_(const char *, const char *, const int *, const int *, const int *, const double *,
            const double *, const int *, const double *, const int *, const double *, double *,
            const int *);
void ssyr2k_(const char *, const char *, const int *, const int *, const float *, const float *,
             const int *, const float *, const int *, const float *, float *, const int *);
void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                 float *, int);
void cblas_dsyr2k(int, int, int, int, int, double, const double *, int, const double *, int,
                  double, double *, int);
extern int RowMajorStrg, CBLAS_CallFromC;

#ifndef REFERENCE_BLAS
#define REFERENCE_BLAS "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"
#endif

/* ---- the program's own error handlers, which must win ------------------ */

static struct {
        int calls, info, row_major, from_c;
        char name[16];
} seen;

void xerbla_(const char *srname, const int *info, size_t len)
{
        seen.calls++;
        seen.info = *info;
        seen.from_c = CBLAS_CallFromC;
        snprintf(seen.name, sizeof(seen.name), "%.*s", (int)(len < 15 ? len : 15), srname);
}

void cblas_xerbla(int p, const char *rout, const char *form, ...)
{
        seen.calls++;
        seen.info = p;
        seen.row_major = RowMajorStrg;
        snprintf(seen.name, sizeof(seen.name), "%s", rout);
}

/* ---- fixture ---------------------------------------------------------- */

static struct e2e_daemon gd;

/* Starts a daemon and points the library at it, with threshold `thr`. */
static void start(const char *thr)
{
        cr_assert_eq(e2e_daemon_start(&gd, "--threads", "1", NULL), 0);
        setenv("GEMMD_SOCKET", gd.sock, 1);
        setenv("GEMMD_BLAS_FALLBACK", REFERENCE_BLAS, 1);
        setenv("GEMMD_BLAS_THRESHOLD", thr, 1);
}

/* Ops the daemon has run (its first device's count), once the count
 * reaches `want` or a second has passed: the count may trail the replies. */
static long long daemon_ops(long long want)
{
        gemmd_client *c = e2e_connect(&gd);
        long long ops = -1;

        cr_assert_not_null(c);
        usleep(50000); /* a count that must stay put has time to move */
        for (int i = 0; i < 100 && ops != want; i++) {
                char *json = NULL;

                if (i)
                        usleep(10000);
                cr_assert_eq(gemmd_stats(c, 1, &json), 0);
                ops = hard_json_number(strstr(json, "\"devices\""), "ops");
                free(json);
        }
        gemmd_disconnect(c);
        return ops;
}

TestSuite(blas, .init = e2e_setup, .fini = e2e_teardown, .timeout = 120);

/* ---- problems ----------------------------------------------------------- */

/* A GEMM of either precision, with its operands in malloc'd memory. */
struct prob {
        int dbl;
        char ta, tb;
        int m, n, k, lda, ldb, ldc;
        double alpha, beta;
        void *a, *b, *c, *c0;
};

static double get(const struct prob *p, const void *x, size_t i)
{
        return p->dbl ? ((const double *)x)[i] : ((const float *)x)[i];
}

static void *rand_mat(int dbl, size_t n, uint64_t *seed)
{
        void *x = malloc(n * (dbl ? 8 : 4));

        cr_assert_not_null(x);
        for (size_t i = 0; i < n; i++) {
                if (dbl)
                        ((double *)x)[i] = e2e_rand_val(seed);
                else
                        ((float *)x)[i] = (float)e2e_rand_val(seed);
        }
        return x;
}

static int is_t(char t)
{
        return t != 'N' && t != 'n';
}

static void prob_make(struct prob *p, uint64_t *seed)
{
        int ar = is_t(p->ta) ? p->k : p->m, ac = is_t(p->ta) ? p->m : p->k;
        int br = is_t(p->tb) ? p->n : p->k, bc = is_t(p->tb) ? p->k : p->n;
        size_t es = p->dbl ? 8 : 4, cn = (size_t)p->ldc * p->n;

        p->lda = ar + (p->lda > 0 ? p->lda : 0);
        p->ldb = br + (p->ldb > 0 ? p->ldb : 0);
        p->ldc = p->m + (p->ldc > 0 ? p->ldc : 0);
        cn = (size_t)p->ldc * p->n;
        p->a = rand_mat(p->dbl, (size_t)p->lda * ac, seed);
        p->b = rand_mat(p->dbl, (size_t)p->ldb * bc, seed);
        p->c = rand_mat(p->dbl, cn, seed);
        for (int j = 0; p->beta == 0 && j < p->n; j++)
                for (int i = 0; i < p->m; i++) {
                        if (p->dbl)
                                ((double *)p->c)[(size_t)j * p->ldc + i] = NAN;
                        else
                                ((float *)p->c)[(size_t)j * p->ldc + i] = NAN;
                }
        p->c0 = malloc(cn * es);
        memcpy(p->c0, p->c, cn * es);
}

static void prob_run(const struct prob *p)
{
        if (p->dbl)
                dgemm_(&p->ta, &p->tb, &p->m, &p->n, &p->k, &p->alpha, p->a, &p->lda, p->b,
                       &p->ldb, &p->beta, p->c, &p->ldc);
        else {
                float al = (float)p->alpha, be = (float)p->beta;
                sgemm_(&p->ta, &p->tb, &p->m, &p->n, &p->k, &al, p->a, &p->lda, p->b, &p->ldb,
                       &be, p->c, &p->ldc);
        }
}

/* Checks C against the long double reference (relative to the magnitudes
 * summed) and every element between columns bit for bit. Returns 0 or -1
 * with a message. */
static int prob_check(const struct prob *p, char *why, size_t len)
{
        double tol = p->dbl ? 1e-13 : 2e-5;
        size_t es = p->dbl ? 8 : 4;

        for (int j = 0; j < p->n; j++) {
                for (int i = 0; i < p->ldc; i++) {
                        size_t ci = (size_t)j * p->ldc + i;
                        if (i >= p->m) {
                                if (memcmp((char *)p->c + ci * es, (char *)p->c0 + ci * es, es)) {
                                        snprintf(why, len, "gap (%d,%d) of C changed", i, j);
                                        return -1;
                                }
                                continue;
                        }
                        long double s = 0, mag = 0;
                        for (int l = 0; l < p->k; l++) {
                                size_t ai = is_t(p->ta) ? (size_t)i * p->lda + l
                                                        : (size_t)l * p->lda + i;
                                size_t bi = is_t(p->tb) ? (size_t)l * p->ldb + j
                                                        : (size_t)j * p->ldb + l;
                                long double t = (long double)get(p, p->a, ai) * get(p, p->b, bi);
                                s += t;
                                mag += fabsl(t);
                        }
                        s *= p->alpha;
                        mag *= fabs(p->alpha);
                        if (p->beta != 0) {
                                s += p->beta * (long double)get(p, p->c0, ci);
                                mag += fabs(p->beta * get(p, p->c0, ci));
                        }
                        double got = get(p, p->c, ci);
                        if (!(fabsl(got - s) <= tol * (mag + 1e-30L))) {
                                snprintf(why, len, "C(%d,%d) = %g, expected %Lg", i, j, got, s);
                                return -1;
                        }
                }
        }
        return 0;
}

static void prob_free(struct prob *p)
{
        free(p->a);
        free(p->b);
        free(p->c);
        free(p->c0);
}

/* Makes, runs and checks one problem. */
static void run_checked(struct prob p, uint64_t *seed)
{
        char why[256];

        prob_make(&p, seed);
        prob_run(&p);
        cr_assert_eq(prob_check(&p, why, sizeof(why)), 0, "%cgemm %c%c %dx%dx%d: %s",
                     p.dbl ? 'd' : 's', p.ta, p.tb, p.m, p.n, p.k, why);
        prob_free(&p);
}

/* ---- tests -------------------------------------------------------------- */

Test(blas, threshold_decides_which_calls_reach_gemmd)
{
        uint64_t seed = 1;

        start("1024"); /* 2 * 8 * 8 * 8 */
        run_checked((struct prob){.ta = 'N', .tb = 'N', .m = 8, .n = 8, .k = 8, .alpha = 1.5,
                                  .beta = 0.5},
                    &seed);
        cr_assert_eq(daemon_ops(1), 1, "a call of exactly the threshold's flops goes to gemmd");
        run_checked((struct prob){.ta = 'N', .tb = 'N', .m = 7, .n = 8, .k = 8, .alpha = 1.5,
                                  .beta = 0.5},
                    &seed);
        run_checked((struct prob){.ta = 'T', .tb = 'N', .m = 8, .n = 8, .k = 7, .alpha = -1,
                                  .beta = 0},
                    &seed);
        cr_assert_eq(daemon_ops(1), 1, "calls below the threshold stay on the fallback");
        run_checked((struct prob){.ta = 't', .tb = 'c', .m = 9, .n = 8, .k = 8, .alpha = 0.25,
                                  .beta = 1},
                    &seed);
        cr_assert_eq(daemon_ops(2), 2);
        cr_assert_eq(e2e_daemon_stop(&gd), 0);
}

/* Transposes in both cases, leading dimensions with gaps, K over one of the
 * daemon's 512-long chunks, beta 0 (C NaN), 1 and other. */
Test(blas, transposes_and_leading_dimensions_through_gemmd)
{
        static const char ts[] = "NnTtCc";
        uint64_t seed = 7;
        int runs = 0;

        start("0");
        for (int dbl = 0; dbl < 2; dbl++)
                for (int i = 0; i < 6; i++)
                        for (int j = 0; j < 6; j += 1 + (i & 1)) {
                                struct prob p = {.dbl = dbl, .ta = ts[i], .tb = ts[j],
                                                 .m = (int)e2e_rand_int(&seed, 1, 40),
                                                 .n = (int)e2e_rand_int(&seed, 1, 40),
                                                 .k = (int)e2e_rand_int(&seed, 1, 700),
                                                 .lda = (int)e2e_rand_int(&seed, 0, 3),
                                                 .ldb = (int)e2e_rand_int(&seed, 0, 3),
                                                 .ldc = (int)e2e_rand_int(&seed, 0, 3),
                                                 .alpha = 0.75, .beta = (double)(runs % 3) * 0.5};
                                run_checked(p, &seed);
                                runs++;
                        }
        cr_assert_eq(daemon_ops(runs), runs, "every call reached gemmd");
        cr_assert_eq(e2e_daemon_stop(&gd), 0);
}

Test(blas, nan_in_c_with_beta_zero_never_leaks)
{
        float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 1, 1, 1, 1, 1}, c[4];
        float alpha = 1, beta = 0;
        int two = 2, three = 3;

        start("0");
        for (int zero_alpha = 0; zero_alpha < 2; zero_alpha++) {
                float al = zero_alpha ? 0.0f : alpha;
                for (int i = 0; i < 4; i++)
                        c[i] = NAN;
                /* C(2x2) = A(2x3) B(3x2), A and B never read when alpha is 0 */
                sgemm_("N", "N", &two, &two, &three, &al, zero_alpha ? NULL : a, &two,
                       zero_alpha ? NULL : b, &three, &beta, c, &two);
                for (int i = 0; i < 4; i++) {
                        float want = zero_alpha ? 0 : (i % 2 ? 2 + 4 + 6 : 1 + 3 + 5);
                        cr_assert_eq(c[i], want, "alpha %g: C[%d] = %g, want %g", al, i, c[i],
                                     want);
                }
        }
        /* SYR2K, beta 0: the lower triangle is written, the upper left alone */
        {
                float s[9], sa[6] = {1, 2, 3, 4, 5, 6};
                int n = 3;
                for (int i = 0; i < 9; i++)
                        s[i] = NAN;
                ssyr2k_("L", "N", &n, &two, &alpha, sa, &n, sa, &n, &beta, s, &n);
                for (int j = 0; j < 3; j++)
                        for (int i = 0; i < 3; i++) {
                                float want = 2 * (sa[i] * sa[j] + sa[3 + i] * sa[3 + j]);
                                if (i >= j)
                                        cr_assert_eq(s[j * 3 + i], want, "C(%d,%d)", i, j);
                                else
                                        cr_assert(isnan(s[j * 3 + i]), "upper C(%d,%d) written", i, j);
                        }
        }
        cr_assert_eq(daemon_ops(2), 2, "the alpha != 0 GEMM and the SYR2K ran on gemmd");
        cr_assert_eq(e2e_daemon_stop(&gd), 0);
}

Test(blas, daemon_down_gone_and_back)
{
        uint64_t seed = 3;
        struct prob p = {.ta = 'N', .tb = 'T', .m = 20, .n = 17, .k = 33, .ldc = 2, .alpha = 1,
                         .beta = 0.5};

        start("0");
        run_checked(p, &seed);
        cr_assert_eq(daemon_ops(1), 1);
        cr_assert_eq(e2e_daemon_stop(&gd), 0);
        /* gone: the connection breaks on this call, which still comes out right */
        run_checked(p, &seed);
        run_checked(p, &seed);
        /* back on the same socket: reached again after the retry interval */
        cr_assert_eq(e2e_daemon_start(&gd, "--threads", "1", NULL), 0);
        setenv("GEMMD_SOCKET", gd.sock, 1); /* read at connect time */
        sleep(3);
        run_checked(p, &seed);
        cr_assert_eq(daemon_ops(1), 1, "the new daemon served the call after the retry");
        cr_assert_eq(e2e_daemon_stop(&gd), 0);
}

Test(blas, no_daemon_at_all)
{
        uint64_t seed = 5;

        setenv("GEMMD_SOCKET", "/nonexistent/gemmd.sock", 1);
        setenv("GEMMD_BLAS_FALLBACK", REFERENCE_BLAS, 1);
        setenv("GEMMD_BLAS_THRESHOLD", "0", 1);
        for (int dbl = 0; dbl < 2; dbl++)
                run_checked((struct prob){.dbl = dbl, .ta = 'C', .tb = 'N', .m = 31, .n = 5,
                                          .k = 64, .lda = 1, .alpha = -0.5, .beta = 2},
                            &seed);
}

/* A call whose operands exceed one buffer of the daemon goes to the fallback,
 * and so do all calls once the user's registered bytes are spent. */
Test(blas, daemon_limits_send_calls_to_the_fallback)
{
        uint64_t seed = 9;
        struct prob small = {.ta = 'N', .tb = 'N', .m = 30, .n = 30, .k = 30, .alpha = 1, .beta = 1};
        struct prob big = {.dbl = 1, .ta = 'T', .tb = 'N', .m = 200, .n = 200, .k = 300, .alpha = 1,
                           .beta = 0.5};

        cr_assert_eq(e2e_daemon_start(&gd, "--threads", "1", "--max-buffer-bytes", "1M", NULL), 0);
        setenv("GEMMD_SOCKET", gd.sock, 1);
        setenv("GEMMD_BLAS_FALLBACK", REFERENCE_BLAS, 1);
        setenv("GEMMD_BLAS_THRESHOLD", "0", 1);
        run_checked(small, &seed);
        run_checked(big, &seed); /* 1.6 MB of operands */
        run_checked(small, &seed);
        cr_assert_eq(daemon_ops(2), 2, "only the small calls ran on gemmd");
        cr_assert_eq(e2e_daemon_stop(&gd), 0);
}

Test(blas, no_room_for_a_staging_buffer)
{
        uint64_t seed = 13;

        cr_assert_eq(e2e_daemon_start(&gd, "--threads", "1", "--max-user-buffer-bytes", "64K", NULL),
                     0);
        setenv("GEMMD_SOCKET", gd.sock, 1);
        setenv("GEMMD_BLAS_FALLBACK", REFERENCE_BLAS, 1);
        setenv("GEMMD_BLAS_THRESHOLD", "0", 1);
        for (int i = 0; i < 3; i++)
                run_checked((struct prob){.ta = 'N', .tb = 'T', .m = 12, .n = 9, .k = 40,
                                          .alpha = 2, .beta = 1},
                            &seed);
        cr_assert_eq(daemon_ops(0), 0);
        cr_assert_eq(e2e_daemon_stop(&gd), 0);
}

struct thread_arg {
        int id;
        int failures;
        char why[256];
};

static void *thread_main(void *arg)
{
        struct thread_arg *t = arg;
        uint64_t seed = 100 + t->id;

        for (int i = 0; i < 12; i++) {
                struct prob p = {.dbl = i & 1, .ta = i & 2 ? 'T' : 'N', .tb = i & 4 ? 'T' : 'N',
                                 .m = (int)e2e_rand_int(&seed, 1, 60),
                                 .n = (int)e2e_rand_int(&seed, 1, 60),
                                 .k = (int)e2e_rand_int(&seed, 1, 300),
                                 .ldc = (int)e2e_rand_int(&seed, 0, 2), .alpha = 1.25,
                                 .beta = i % 3 ? 0.5 : 0};
                prob_make(&p, &seed);
                prob_run(&p);
                if (prob_check(&p, t->why, sizeof(t->why)) != 0)
                        t->failures++;
                prob_free(&p);
        }
        return NULL;
}

Test(blas, threads_call_at_once)
{
        enum { NT = 6 };
        pthread_t th[NT];
        struct thread_arg args[NT];

        start("0");
        for (int i = 0; i < NT; i++) {
                args[i] = (struct thread_arg){.id = i};
                cr_assert_eq(pthread_create(&th[i], NULL, thread_main, &args[i]), 0);
        }
        for (int i = 0; i < NT; i++) {
                pthread_join(th[i], NULL);
                cr_expect_eq(args[i].failures, 0, "thread %d: %s", i, args[i].why);
        }
        cr_assert_eq(daemon_ops(NT * 12), NT * 12, "every thread's calls reached gemmd");
        cr_assert_eq(e2e_daemon_stop(&gd), 0);
}

Test(blas, fork_child_uses_its_own_connection)
{
        uint64_t seed = 11;
        struct prob p = {.ta = 'N', .tb = 'N', .m = 16, .n = 16, .k = 16, .alpha = 1, .beta = 1};
        int status;
        pid_t pid;

        start("0");
        run_checked(p, &seed); /* the parent connects */
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                char why[256];
                struct prob q = p;
                prob_make(&q, &seed);
                prob_run(&q);
                _exit(prob_check(&q, why, sizeof(why)) == 0 ? 0 : 1);
        }
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's result was wrong");
        run_checked(p, &seed); /* the parent's connection still works */
        cr_assert_eq(daemon_ops(3), 3, "parent, child and parent again ran on gemmd");
        cr_assert_eq(e2e_daemon_stop(&gd), 0);
}

Test(blas, a_programs_own_error_handlers_win)
{
        float x = 1;
        int m = 2, neg = -1;

        setenv("GEMMD_SOCKET", "/nonexistent/gemmd.sock", 1);
        setenv("GEMMD_BLAS_FALLBACK", REFERENCE_BLAS, 1);
        sgemm_("X", "N", &m, &m, &m, &x, &x, &m, &x, &m, &x, &x, &m);
        cr_assert_eq(seen.calls, 1);
        cr_assert_str_eq(seen.name, "SGEMM ");
        cr_assert_eq(seen.info, 1);
        sgemm_("N", "N", &m, &m, &m, &x, &x, &m, &x, &m, &x, &x, &neg);
        cr_assert_eq(seen.info, 13, "ldc is parameter 13");
        ssyr2k_("U", "N", &m, &m, &x, &x, &neg, &x, &m, &x, &x, &m);
        cr_assert_str_eq(seen.name, "SSYR2K");
        cr_assert_eq(seen.info, 7, "lda is parameter 7");
        /* CBLAS: its own checks through cblas_xerbla, numbered as CBLAS does */
        cblas_sgemm(0, 111, 111, 2, 2, 2, 1, &x, 2, &x, 2, 0, &x, 2);
        cr_assert_str_eq(seen.name, "cblas_sgemm");
        cr_assert_eq(seen.info, 1, "a bad layout is parameter 1");
        cblas_sgemm(101, 111, 7, 2, 2, 2, 1, &x, 2, &x, 2, 0, &x, 2);
        cr_assert_eq(seen.info, 3, "a bad TransB is parameter 3");
        cr_assert_eq(seen.row_major, 1, "RowMajorStrg is set during a row-major call");
        cr_assert_eq(RowMajorStrg, 0, "and cleared after it");
        cblas_dsyr2k(101, 5, 111, 2, 2, 1, NULL, 2, NULL, 2, 0, NULL, 2);
        cr_assert_eq(seen.info, 3, "row-major: a bad Uplo is parameter 3, as the reference says");
        /* the rest reach the Fortran checks, reported by xerbla_ with CBLAS_CallFromC set */
        cblas_sgemm(102, 111, 111, -1, 2, 2, 1, &x, 2, &x, 2, 0, &x, 2);
        cr_assert_str_eq(seen.name, "SGEMM ");
        cr_assert_eq(seen.info, 3);
        cr_assert_eq(seen.from_c, 1);
        cr_assert_eq(seen.calls, 7);
}
