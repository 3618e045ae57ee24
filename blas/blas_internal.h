/*
 * blas_internal.h - what the parts of gemmd's libblas.so.3 share.
 *
 * blas/blas.c has the BLAS and CBLAS entry points gemmd serves (GEMM and
 * SYR2K in single and double precision): the reference BLAS's argument
 * checks and quick returns, then blas/route.c, which sends a call to the
 * daemon through staged shared memory, or says it must go to the fallback
 * BLAS; blas/fallback.c loads that library and hands out its functions,
 * both to the generated stubs of every other symbol and to blas.c.
 */
#ifndef GEMMD_BLAS_INTERNAL_H
#define GEMMD_BLAS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "gemmd.h"

#define BLAS_HIDDEN __attribute__((visibility("hidden")))

/* ---- fallback.c ------------------------------------------------------- */

/* The fallback's functions that blas.c calls when a call does not go to
 * gemmd. */
enum blas_fn { BLAS_FN_SGEMM, BLAS_FN_DGEMM, BLAS_FN_SSYR2K, BLAS_FN_DSYR2K, BLAS_FN_COUNT };

/* Returns the fallback BLAS's function fn, loading the library on first
 * use. Where there is no fallback (or it lacks fn), prints why on stderr
 * and aborts: a BLAS has no way to return an error. */
BLAS_HIDDEN void *blas_fallback_fn(enum blas_fn fn);

/* Path of the fallback BLAS in use, or NULL if none could be loaded
 * (loads it on first use). */
BLAS_HIDDEN const char *blas_fallback_path(void);

/* ---- route.c ---------------------------------------------------------- */

/* One GEMM or SYR2K in the column-major BLAS form, arguments already
 * checked, not a quick return, alpha != 0 and k > 0. */
struct blas_call {
        enum gemmd_op_kind kind;
        enum gemmd_dtype dtype; /* GEMMD_F32 or GEMMD_F64 */
        int trans_a, trans_b;   /* 1: op is the transpose (SYR2K: trans_a only) */
        int upper;              /* SYR2K: the triangle of C */
        int64_t m, n, k;        /* SYR2K: m == n */
        double alpha, beta;
        const void *a, *b;
        void *c;
        int64_t lda, ldb, ldc;
};

/* Runs the call on gemmd when it should and can: its flops reach the
 * threshold, the daemon is reachable, the operands fit its limits and it
 * completes the op. Returns 0 when C holds the result, or -1 when the
 * caller must run the call on the fallback BLAS (C is then untouched). */
BLAS_HIDDEN int blas_route(const struct blas_call *call);

/* Whether a call of this many flops goes to gemmd at all
 * ($GEMMD_BLAS_THRESHOLD, read once). */
BLAS_HIDDEN int blas_above_threshold(double flops);

/* Prints "gemmd-blas: <message>" on stderr when $GEMMD_BLAS_VERBOSE is set
 * to a non-zero value. */
BLAS_HIDDEN void blas_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* GEMMD_BLAS_INTERNAL_H */
