/*
 * fuzz_common.c - buffers and op checks of the fuzz targets.
 */
#include "tests/fuzz/fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemmd.h"

void fuzz_limits(struct limits *lim)
{
        struct gemmd_config cfg;

        config_defaults(&cfg);
        *lim = cfg.lim;
        lim->max_inline_bytes = 1u << 20;
}

void fuzz_table_set(struct gbuf_table *t, const uint64_t *sizes, int n)
{
        gbuf_table_deinit(t);
        gbuf_table_init(t);
        for (int i = 0; i < n; i++) {
                struct gbuf *b;

                /* An inline buffer's bytes end where its allocation does. */
                if (gbuf_new_inline(sizes[i], NULL, &b) || gbuf_table_add(t, b))
                        abort();
        }
}

static void fail(const char *what, const struct op *o)
{
        fprintf(stderr, "fuzz: %s: kind %u dtype %u m %u n %u k %u lda %llu ldb %llu ldc %llu "
                        "ta %u tb %u uplo %u\n",
                what, o->kp.kind, o->kp.dtype, o->kp.m, o->kp.n, o->kp.k,
                (unsigned long long)o->kp.lda, (unsigned long long)o->kp.ldb,
                (unsigned long long)o->kp.ldc, o->kp.trans_a, o->kp.trans_b, o->kp.uplo);
        abort();
}

static volatile uint8_t sink;

/* Reads (and for C rewrites) the bytes of element (r, c) of a column-major
 * matrix at base with leading dimension ld, after checking it against the
 * operand's span. */
static void touch(const struct op *o, int idx, uint64_t r, uint64_t c, uint64_t ld, size_t esz,
                  int write)
{
        uint64_t at = (c * ld + r) * esz;
        uint8_t *p = (uint8_t *)(uintptr_t)(gbuf_addr(o->buf[idx]) + o->off[idx]);

        if (at + esz > o->span[idx])
                fail("an element lies outside its operand's span", o);
        for (size_t i = 0; i < esz; i++) {
                sink ^= p[at + i];
                if (write)
                        p[at + i] = p[at + i];
        }
}

static void touch_matrix(const struct op *o, int idx, uint64_t rows, uint64_t cols, uint64_t ld,
                         size_t esz, int write, int all, int lower_tri, int upper_tri)
{
        if (!all) {
                touch(o, idx, 0, 0, ld, esz, write);
                touch(o, idx, rows - 1, cols - 1, ld, esz, write);
                touch(o, idx, rows - 1, 0, ld, esz, write);
                touch(o, idx, 0, cols - 1, ld, esz, write);
                return;
        }
        for (uint64_t c = 0; c < cols; c++)
                for (uint64_t r = 0; r < rows; r++) {
                        if ((lower_tri && r < c) || (upper_tri && r > c))
                                continue;
                        touch(o, idx, r, c, ld, esz, write);
                }
}

void fuzz_check_op(const struct op *o)
{
        const struct gemmd_kproblem *p = &o->kp;
        size_t esz = gemmd_dtype_size((enum gemmd_dtype)p->dtype);
        uint64_t m = p->m, n = p->n, k = p->k;
        int all;

        if (!esz || !m || !n || !k)
                fail("a validated op with no element size or an empty dimension", o);
        for (int i = 0; i < 3; i++) {
                const struct gbuf *b = o->buf[i];

                if (!b || o->off[i] > b->bytes || o->span[i] > b->bytes - o->off[i])
                        fail("an operand reaches past its buffer", o);
        }
        all = m * n + m * k + n * k <= 1u << 14;
        if (p->kind == SCHED_GEMM) {
                touch_matrix(o, 0, p->trans_a ? k : m, p->trans_a ? m : k, p->lda, esz, 0, all, 0, 0);
                touch_matrix(o, 1, p->trans_b ? n : k, p->trans_b ? k : n, p->ldb, esz, 0, all, 0, 0);
                touch_matrix(o, 2, m, n, p->ldc, esz, 1, all, 0, 0);
        } else {
                if (m != n)
                        fail("a SYR2K whose C is not square", o);
                touch_matrix(o, 0, p->trans_a ? k : n, p->trans_a ? n : k, p->lda, esz, 0, all, 0, 0);
                touch_matrix(o, 1, p->trans_a ? k : n, p->trans_a ? n : k, p->ldb, esz, 0, all, 0, 0);
                /* Only the stored triangle of C is touched. */
                if (all)
                        touch_matrix(o, 2, n, n, p->ldc, esz, 1, 1, p->uplo == 0, p->uplo == 1);
                else
                        touch(o, 2, n - 1, n - 1, p->ldc, esz, 1);
        }
}
