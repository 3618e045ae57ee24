/*
 * blas.c - the BLAS and CBLAS entry points gemmd serves: sgemm_, dgemm_,
 * ssyr2k_, dsyr2k_ and their cblas_ forms.
 *
 * Each behaves as the reference BLAS documents (LAPACK 3.11's sgemm.f,
 * ssyr2k.f and CBLAS's cblas_sgemm.c, cblas_ssyr2k.c): the same argument
 * checks in the same order, reported through xerbla_ with the reference's
 * parameter numbers and its name padded to six characters; the same quick
 * returns; alpha == 0 (or k == 0) never reads A and B and computes
 * C = beta C here; beta == 0 never reads C. What remains goes to gemmd
 * (blas/route.c) or, when that declines, to the fallback BLAS with the
 * caller's own arguments.
 *
 * xerbla_ and cblas_xerbla are called through their dynamic symbols (this
 * library exports forwarding stubs for both and is linked without
 * -Bsymbolic), so a program's own handlers win, as the reference testers
 * need. The CBLAS forms keep the reference's contract with cblas_xerbla:
 * RowMajorStrg says a row-major call is in progress (a handler renumbers
 * the swapped arguments by it) and CBLAS_CallFromC makes the reference's
 * xerbla_ report a Fortran-level error as cblas_xerbla(info + 1).
 */
#include <ctype.h>
#include <stddef.h>

#include "blas/blas_internal.h"

/* The reference CBLAS's globals, exported under its names: programs (the
 * CBLAS testers) and the fallback's CBLAS routines read and write them. */
__attribute__((visibility("default"))) int RowMajorStrg = 0;
__attribute__((visibility("default"))) int CBLAS_CallFromC = 0;

/* Exported by the generated stubs; called through the PLT. */
void xerbla_(const char *srname, const int *info, size_t len);
void cblas_xerbla(int p, const char *rout, const char *form, ...);

/* CBLAS's enumerations (cblas.h). */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_COL_MAJOR = 102 };
enum { CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112, CBLAS_CONJ_TRANS = 113 };
enum { CBLAS_UPPER = 121, CBLAS_LOWER = 122 };

/* LSAME: the character c equals the upper-case letter u, either case. */
static int lsame(const char *c, char u)
{
        return toupper((unsigned char)*c) == u;
}

static int imax1(int a)
{
        return a > 1 ? a : 1;
}

/* The Fortran forms' arguments, the fallback's signatures (with the hidden
 * lengths of the character arguments, which the reference reads as 1). */
#define GEMM_ARGS(T)                                                                          \
        const char *ta, const char *tb, const int *m, const int *n, const int *k,             \
                const T *alpha, const T *a, const int *lda, const T *b, const int *ldb,       \
                const T *beta, T *c, const int *ldc
#define SYR2K_ARGS(T)                                                                         \
        const char *uplo, const char *tr, const int *n, const int *k, const T *alpha,         \
                const T *a, const int *lda, const T *b, const int *ldb, const T *beta, T *c,  \
                const int *ldc

/*
 * DEFINE_BLAS(p, T, DT) defines, for prefix p (s or d) and element type T:
 *   p_scale      C = beta C on rows [lo(j), hi(j)) of each column, C set to
 *                zero (not read) when beta == 0;
 *   p_gemm       the checked Fortran-level GEMM;
 *   p_syr2k      the checked Fortran-level SYR2K;
 * and the exported pgemm_, psyr2k_, cblas_pgemm, cblas_psyr2k.
 */
#define DEFINE_BLAS(p, T, DT, GEMM_NAME, SYR2K_NAME, FN_GEMM, FN_SYR2K)                       \
        typedef void p##gemm_fn(GEMM_ARGS(T), size_t, size_t);                                \
        typedef void p##syr2k_fn(SYR2K_ARGS(T), size_t, size_t);                              \
                                                                                              \
        /* C = beta C on a column range of rows; tri: 0 all m rows, 1 upper, 2 lower. */      \
        static void p##_scale(T *c, int ldc, int m, int n, int tri, T beta)                   \
        {                                                                                     \
                for (int j = 0; j < n; j++) {                                                 \
                        int lo = tri == 2 ? j : 0, hi = tri == 1 ? j + 1 : m;                 \
                        T *col = c + (size_t)j * (size_t)ldc;                                 \
                        for (int i = lo; i < hi; i++)                                         \
                                col[i] = beta == 0 ? (T)0 : beta * col[i];                    \
                }                                                                             \
        }                                                                                     \
                                                                                              \
        /* sgemm.f's checks and quick returns, then gemmd or the fallback. */                 \
        static void p##_gemm(GEMM_ARGS(T))                                                    \
        {                                                                                     \
                int nota = lsame(ta, 'N'), notb = lsame(tb, 'N');                             \
                int nrowa = nota ? *m : *k, nrowb = notb ? *k : *n, info = 0;                 \
                                                                                              \
                if (!nota && !lsame(ta, 'C') && !lsame(ta, 'T'))                              \
                        info = 1;                                                             \
                else if (!notb && !lsame(tb, 'C') && !lsame(tb, 'T'))                         \
                        info = 2;                                                             \
                else if (*m < 0)                                                              \
                        info = 3;                                                             \
                else if (*n < 0)                                                              \
                        info = 4;                                                             \
                else if (*k < 0)                                                              \
                        info = 5;                                                             \
                else if (*lda < imax1(nrowa))                                                 \
                        info = 8;                                                             \
                else if (*ldb < imax1(nrowb))                                                 \
                        info = 10;                                                            \
                else if (*ldc < imax1(*m))                                                    \
                        info = 13;                                                            \
                if (info) {                                                                   \
                        xerbla_(GEMM_NAME, &info, 6);                                         \
                        return;                                                               \
                }                                                                             \
                if (*m == 0 || *n == 0 || ((*alpha == 0 || *k == 0) && *beta == 1))           \
                        return;                                                               \
                if (*alpha == 0 || *k == 0) {                                                 \
                        p##_scale(c, *ldc, *m, *n, 0, *beta);                                 \
                        return;                                                               \
                }                                                                             \
                struct blas_call call = {                                                     \
                        .kind = GEMMD_GEMM, .dtype = DT, .trans_a = !nota, .trans_b = !notb,  \
                        .m = *m, .n = *n, .k = *k, .alpha = *alpha, .beta = *beta,            \
                        .a = a, .b = b, .c = c, .lda = *lda, .ldb = *ldb, .ldc = *ldc};       \
                if (blas_above_threshold(2.0 * *m * *n * *k) && blas_route(&call) == 0)       \
                        return;                                                               \
                ((p##gemm_fn *)blas_fallback_fn(FN_GEMM))(ta, tb, m, n, k, alpha, a, lda, b,  \
                                                          ldb, beta, c, ldc, 1, 1);           \
        }                                                                                     \
                                                                                              \
        /* ssyr2k.f's checks and quick returns, then gemmd or the fallback. */                \
        static void p##_syr2k(SYR2K_ARGS(T))                                                  \
        {                                                                                     \
                int upper = lsame(uplo, 'U'), notr = lsame(tr, 'N');                          \
                int nrowa = notr ? *n : *k, info = 0;                                         \
                                                                                              \
                if (!upper && !lsame(uplo, 'L'))                                              \
                        info = 1;                                                             \
                else if (!notr && !lsame(tr, 'T') && !lsame(tr, 'C'))                         \
                        info = 2;                                                             \
                else if (*n < 0)                                                              \
                        info = 3;                                                             \
                else if (*k < 0)                                                              \
                        info = 4;                                                             \
                else if (*lda < imax1(nrowa))                                                 \
                        info = 7;                                                             \
                else if (*ldb < imax1(nrowa))                                                 \
                        info = 9;                                                             \
                else if (*ldc < imax1(*n))                                                    \
                        info = 12;                                                            \
                if (info) {                                                                   \
                        xerbla_(SYR2K_NAME, &info, 6);                                        \
                        return;                                                               \
                }                                                                             \
                if (*n == 0 || ((*alpha == 0 || *k == 0) && *beta == 1))                      \
                        return;                                                               \
                if (*alpha == 0 || *k == 0) {                                                 \
                        p##_scale(c, *ldc, *n, *n, upper ? 1 : 2, *beta);                     \
                        return;                                                               \
                }                                                                             \
                struct blas_call call = {                                                     \
                        .kind = GEMMD_SYR2K, .dtype = DT, .trans_a = !notr, .upper = upper,   \
                        .m = *n, .n = *n, .k = *k, .alpha = *alpha, .beta = *beta,            \
                        .a = a, .b = b, .c = c, .lda = *lda, .ldb = *ldb, .ldc = *ldc};       \
                if (blas_above_threshold(2.0 * *n * *n * *k) && blas_route(&call) == 0)       \
                        return;                                                               \
                ((p##syr2k_fn *)blas_fallback_fn(FN_SYR2K))(uplo, tr, n, k, alpha, a, lda, b, \
                                                            ldb, beta, c, ldc, 1, 1);         \
        }                                                                                     \
                                                                                              \
        __attribute__((visibility("default"))) void p##gemm_(GEMM_ARGS(T))                    \
        {                                                                                     \
                p##_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);               \
        }                                                                                     \
                                                                                              \
        __attribute__((visibility("default"))) void p##syr2k_(SYR2K_ARGS(T))                  \
        {                                                                                     \
                p##_syr2k(uplo, tr, n, k, alpha, a, lda, b, ldb, beta, c, ldc);               \
        }                                                                                     \
                                                                                              \
        /* cblas_pgemm: a row-major call is the column-major one of C^T = */                  \
        /* op(B)^T op(A)^T: B and A swap places, and so do M and N. */                        \
        __attribute__((visibility("default"))) void cblas_##p##gemm(                          \
                int layout, int transa, int transb, const int M, const int N, const int K,    \
                const T alpha, const T *A, const int lda, const T *B, const int ldb,          \
                const T beta, T *C, const int ldc)                                            \
        {                                                                                     \
                char tA, tB;                                                                  \
                int row = layout == CBLAS_ROW_MAJOR;                                          \
                                                                                              \
                RowMajorStrg = 0;                                                             \
                CBLAS_CallFromC = 1;                                                          \
                if (layout != CBLAS_COL_MAJOR && !row) {                                      \
                        cblas_xerbla(1, "cblas_" #p "gemm", "Illegal layout setting, %d\n",   \
                                     layout);                                                 \
                } else {                                                                      \
                        RowMajorStrg = row;                                                   \
                        if (!cblas_trans(transa, &tA))                                        \
                                cblas_xerbla(2, "cblas_" #p "gemm",                           \
                                             "Illegal TransA setting, %d\n", transa);         \
                        else if (!cblas_trans(transb, &tB))                                   \
                                cblas_xerbla(3, "cblas_" #p "gemm",                           \
                                             "Illegal TransB setting, %d\n", transb);         \
                        else if (row)                                                         \
                                p##_gemm(&tB, &tA, &N, &M, &K, &alpha, B, &ldb, A, &lda,      \
                                         &beta, C, &ldc);                                     \
                        else                                                                  \
                                p##_gemm(&tA, &tB, &M, &N, &K, &alpha, A, &lda, B, &ldb,      \
                                         &beta, C, &ldc);                                     \
                }                                                                             \
                CBLAS_CallFromC = 0;                                                          \
                RowMajorStrg = 0;                                                             \
        }                                                                                     \
                                                                                              \
        /* cblas_psyr2k: row-major C is the column-major C^T, whose other */                  \
        /* triangle is meant, of A, B read transposed: uplo and trans flip. */                \
        __attribute__((visibility("default"))) void cblas_##p##syr2k(                         \
                int layout, int uplo, int trans, const int N, const int K, const T alpha,     \
                const T *A, const int lda, const T *B, const int ldb, const T beta, T *C,     \
                const int ldc)                                                                \
        {                                                                                     \
                char ul, tr;                                                                  \
                int row = layout == CBLAS_ROW_MAJOR;                                          \
                                                                                              \
                RowMajorStrg = 0;                                                             \
                CBLAS_CallFromC = 1;                                                          \
                if (layout != CBLAS_COL_MAJOR && !row) {                                      \
                        cblas_xerbla(1, "cblas_" #p "syr2k", "Illegal layout setting, %d\n",  \
                                     layout);                                                 \
                } else {                                                                      \
                        RowMajorStrg = row;                                                   \
                        if (!cblas_uplo(uplo, row, &ul))                                      \
                                cblas_xerbla(row ? 3 : 2, "cblas_" #p "syr2k",                \
                                             "Illegal Uplo setting, %d\n", uplo);             \
                        else if (!cblas_trans_syr2k(trans, row, &tr))                         \
                                cblas_xerbla(3, "cblas_" #p "syr2k",                          \
                                             "Illegal Trans setting, %d\n", trans);           \
                        else                                                                  \
                                p##_syr2k(&ul, &tr, &N, &K, &alpha, A, &lda, B, &ldb, &beta,  \
                                          C, &ldc);                                           \
                }                                                                             \
                CBLAS_CallFromC = 0;                                                          \
                RowMajorStrg = 0;                                                             \
        }

/* A CBLAS transpose as the Fortran character; 0 if it is not one. */
static int cblas_trans(int t, char *out)
{
        switch (t) {
        case CBLAS_NO_TRANS: *out = 'N'; return 1;
        case CBLAS_TRANS: *out = 'T'; return 1;
        case CBLAS_CONJ_TRANS: *out = 'C'; return 1;
        default: return 0;
        }
}

/* A CBLAS uplo as the Fortran character, flipped for row-major. */
static int cblas_uplo(int u, int row, char *out)
{
        if (u != CBLAS_UPPER && u != CBLAS_LOWER)
                return 0;
        *out = (u == CBLAS_UPPER) != row ? 'U' : 'L';
        return 1;
}

/* SYR2K's trans as the Fortran character: row-major flips N and T (and
 * takes ConjTrans, the same as Trans for real data, to N). */
static int cblas_trans_syr2k(int t, int row, char *out)
{
        if (!cblas_trans(t, out))
                return 0;
        if (row)
                *out = t == CBLAS_NO_TRANS ? 'T' : 'N';
        return 1;
}

DEFINE_BLAS(s, float, GEMMD_F32, "SGEMM ", "SSYR2K", BLAS_FN_SGEMM, BLAS_FN_SSYR2K)
DEFINE_BLAS(d, double, GEMMD_F64, "DGEMM ", "DSYR2K", BLAS_FN_DGEMM, BLAS_FN_DSYR2K)
