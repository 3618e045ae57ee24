/*
 * fuzz_validate.c - libFuzzer target: validate_op on ops built field by
 * field from the input, against a table of buffers whose sizes also come
 * from the input. Each integer field is drawn from edge values (0, 1, -1,
 * INT32_MAX, INT64_MAX, 2^31, near UINT64_MAX...) or from the input's own
 * bytes, so the overflow checks meet the values that break them. Every op
 * that validates must pass fuzz_check_op: it stays inside its buffers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemmd.h"
#include "tests/fuzz/fuzz_common.h"

struct reader {
        const uint8_t *p;
        size_t n;
};

static uint64_t rd(struct reader *r, int bytes)
{
        uint64_t v = 0;

        for (int i = 0; i < bytes && r->n; i++, r->p++, r->n--)
                v |= (uint64_t)*r->p << (8 * i);
        return v;
}

static int64_t pick_i64(struct reader *r)
{
        switch (rd(r, 1) % 14) {
        case 0: return 0;
        case 1: return 1;
        case 2: return -1;
        case 3: return (int64_t)rd(r, 1);
        case 4: return (int64_t)rd(r, 2);
        case 5: return INT32_MAX;
        case 6: return INT64_MAX;
        case 7: return INT64_MIN;
        case 8: return 1ll << 31;
        case 9: return (1ll << 32) + (int64_t)rd(r, 1);
        case 10: return (int64_t)rd(r, 8);
        case 11: return 64 + (int64_t)(rd(r, 1) % 8);
        case 12: return (int64_t)(rd(r, 1) % 80);
        default: return (int64_t)(1ull << (rd(r, 1) % 63)) - (int64_t)(rd(r, 1) % 3);
        }
}

static uint64_t pick_u64(struct reader *r)
{
        switch (rd(r, 1) % 8) {
        case 0: return 0;
        case 1: return (uint64_t)rd(r, 1) * 2;
        case 2: return (uint64_t)rd(r, 2) * 4;
        case 3: return UINT64_MAX - rd(r, 1);
        case 4: return (uint64_t)INT64_MAX + rd(r, 1);
        case 5: return rd(r, 8);
        case 6: return 4096 - rd(r, 1) % 16 * 4;
        default: return rd(r, 3) & ~3ull;
        }
}

static uint64_t pick_size(struct reader *r)
{
        switch (rd(r, 1) % 6) {
        case 0: return 1 + rd(r, 1);
        case 1: return 4096;
        case 2: return 65536;
        case 3: return 1 + rd(r, 2);
        case 4: return 3 * 64 * 64 * 4;
        default: return 1 + rd(r, 3) % (1u << 20);
        }
}

static uint8_t inline_src[1u << 20];

static void operand(struct reader *r, Gemmd__V1__Operand *o, Gemmd__V1__Operand **slot)
{
        uint64_t sel = rd(r, 1);

        gemmd__v1__operand__init(o);
        if (sel % 7 == 0) {
                *slot = NULL; /* absent */
                return;
        }
        *slot = o;
        o->buffer_id = sel % 7 == 1 ? 0 : sel % 7 == 6 ? pick_u64(r) : sel % 7 - 1;
        o->offset = pick_u64(r);
        if (o->buffer_id == 0) {
                size_t len = (size_t)rd(r, 3) % (sizeof(inline_src) + 1);

                o->data.len = len;
                o->data.data = len ? inline_src : NULL;
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static struct gbuf_table table;
        static struct limits lim;
        static int init;
        struct reader r = {data, size};
        Gemmd__V1__Op op = GEMMD__V1__OP__INIT;
        Gemmd__V1__Operand a, b, c;
        uint64_t sizes[4];
        struct inline_tally tally = {.room = UINT64_MAX};
        struct op out;
        char msg[256];
        int nbuf;

        if (!init) {
                gbuf_table_init(&table);
                fuzz_limits(&lim);
                init = 1;
        }
        nbuf = (int)(rd(&r, 1) % 5);
        for (int i = 0; i < nbuf; i++)
                sizes[i] = pick_size(&r);
        fuzz_table_set(&table, sizes, nbuf);
        op.kind = (Gemmd__V1__OpKind)(rd(&r, 1) % 3);
        op.dtype = (Gemmd__V1__DType)(rd(&r, 1) % 4);
        op.trans_a = (Gemmd__V1__Trans)(rd(&r, 1) % 3);
        op.trans_b = (Gemmd__V1__Trans)(rd(&r, 1) % 3);
        op.uplo = (Gemmd__V1__Uplo)(rd(&r, 1) % 3);
        op.row_major = rd(&r, 1) & 1;
        op.allow_tf32 = rd(&r, 1) & 1;
        op.m = pick_i64(&r);
        op.n = pick_i64(&r);
        op.k = pick_i64(&r);
        op.lda = pick_i64(&r);
        op.ldb = pick_i64(&r);
        op.ldc = pick_i64(&r);
        op.alpha = 1.0f;
        op.beta = (rd(&r, 1) & 1) ? 0.0f : 0.5f;
        operand(&r, &a, &op.a);
        operand(&r, &b, &op.b);
        operand(&r, &c, &op.c);
        if (op.dtype == GEMMD__V1__DTYPE__F64) {
                op.alpha_f64 = op.alpha;
                op.beta_f64 = op.beta;
        }
        /* The dtypes the one device runs: all four once the input is
         * spent, so that older inputs keep validating. */
        uint32_t dev = r.n ? (uint32_t)rd(&r, 1) & 0xf : 0xf;
        struct dtype_caps caps = {.any = dev, .dev = &dev, .ndev = 1};
        int rc = validate_op(&op, &table, &lim, &caps, &out, &tally, msg, sizeof(msg));

        /* Checked right after the kind and the dtype, before anything else. */
        if (op.kind <= 1 && op.dtype <= 3 && !(dev & (1u << op.dtype)) && rc != GEMMD_EUNSUPPORTED) {
                fprintf(stderr, "fuzz: a dtype no device runs validated as %d\n", rc);
                abort();
        }
        if (rc == 0) {
                fuzz_check_op(&out);
                op_release(&out);
        }
        return 0;
}
