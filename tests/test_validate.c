/*
 * test_validate.c - op validation against what the daemon's devices run:
 * an op of a dtype no device runs, or whose operand is in the memory of a
 * device that does not run it, is refused with GEMMD_EUNSUPPORTED before
 * it holds anything; an accepted f64 op carries its scalars unrounded.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "daemon/backend.h"
#include "gemmd.h"
#include "tests/fuzz/fuzz_common.h"

#define ALL_BUT_F64                                                                              \
        (BACKEND_DTYPE(GEMMD_F32) | BACKEND_DTYPE(GEMMD_F16) | BACKEND_DTYPE(GEMMD_BF16))
#define ALL (ALL_BUT_F64 | BACKEND_DTYPE(GEMMD_F64))

static struct gbuf_table table;
static struct limits lim;
static Gemmd__V1__Operand opnd[3];

/* Buffer 1: 4 KiB of host memory; buffer 2: 4 KiB of "device memory" on
 * device 1 (the validation only reads its kind, device and address). */
static void setup(void)
{
        const uint64_t sizes[2] = {4096, 4096};

        gbuf_table_init(&table);
        fuzz_limits(&lim);
        fuzz_table_set(&table, sizes, 2);
        struct gbuf *dev = gbuf_table_find(&table, 2);
        dev->kind = GBUF_CUDA;
        dev->device = 1;
        dev->dev_addr = 0x7f0000000000ull;
}

static void teardown(void) { gbuf_table_deinit(&table); }

/* A 4 x 3 x 5 GEMM of `dtype` with A, B and C at offsets of buffer 1
 * (a_buf: A's buffer), alpha 1/3 and beta 0.1 in the fields its dtype
 * travels in. */
static Gemmd__V1__Op make_op(int dtype, uint64_t a_buf)
{
        Gemmd__V1__Op op = GEMMD__V1__OP__INIT;

        for (int i = 0; i < 3; i++) {
                gemmd__v1__operand__init(&opnd[i]);
                opnd[i].buffer_id = i == 0 ? a_buf : 1;
                opnd[i].offset = 1024 * (uint64_t)i;
        }
        op.kind = GEMMD__V1__OP_KIND__GEMM;
        op.dtype = (Gemmd__V1__DType)dtype;
        op.m = 4, op.n = 3, op.k = 5;
        op.lda = 4, op.ldb = 5, op.ldc = 4;
        if (dtype == GEMMD_F64) {
                op.alpha_f64 = 1.0 / 3;
                op.beta_f64 = 0.1;
        } else {
                op.alpha = 1.0f / 3;
                op.beta = 0.1f;
        }
        op.a = &opnd[0], op.b = &opnd[1], op.c = &opnd[2];
        return op;
}

/* Validates op against one or two devices' dtypes; returns the code and
 * leaves the reason in msg. */
static int run(const Gemmd__V1__Op *op, uint32_t dev0, uint32_t dev1, struct op *out, char *msg,
               size_t len)
{
        uint32_t dev[2] = {dev0, dev1};
        struct dtype_caps caps = {.any = dev0 | dev1, .dev = dev, .ndev = 2};
        struct inline_tally tally = {.room = UINT64_MAX};

        return validate_op(op, &table, &lim, &caps, out, &tally, msg, len);
}

/* The references the table's buffers hold beyond the table's own. */
static int extra_refs(void)
{
        return atomic_load(&gbuf_table_find(&table, 1)->refs) - 1 +
               atomic_load(&gbuf_table_find(&table, 2)->refs) - 1;
}

Test(validate, f64_is_refused_where_no_device_runs_it, .init = setup, .fini = teardown)
{
        Gemmd__V1__Op op = make_op(GEMMD_F64, 1);
        struct op out;
        char msg[256] = "";

        cr_assert_eq(run(&op, ALL_BUT_F64, ALL_BUT_F64, &out, msg, sizeof(msg)),
                     GEMMD_EUNSUPPORTED);
        cr_assert(strstr(msg, "f64 is not supported by this daemon's devices"), "%s", msg);
        cr_assert_eq(extra_refs(), 0, "a refused op holds a buffer");

        /* The other dtypes still pass on the same devices. */
        for (int d = GEMMD_F32; d <= GEMMD_BF16; d++) {
                op = make_op(d, 1);
                cr_assert_eq(run(&op, ALL_BUT_F64, ALL_BUT_F64, &out, msg, sizeof(msg)), 0,
                             "%s", msg);
                op_release(&out);
        }
        /* One device that runs it is enough for host memory. */
        op = make_op(GEMMD_F64, 1);
        cr_assert_eq(run(&op, ALL_BUT_F64, ALL, &out, msg, sizeof(msg)), 0, "%s", msg);
        op_release(&out);
        cr_assert_eq(extra_refs(), 0);
}

Test(validate, f64_in_memory_of_a_device_without_it_is_refused, .init = setup, .fini = teardown)
{
        Gemmd__V1__Op op = make_op(GEMMD_F64, 2);
        struct op out;
        char msg[256] = "";

        cr_assert_eq(run(&op, ALL, ALL_BUT_F64, &out, msg, sizeof(msg)), GEMMD_EUNSUPPORTED);
        cr_assert(strstr(msg, "f64 is not supported by device 1, where A lives"), "%s", msg);
        cr_assert_eq(extra_refs(), 0, "a refused op holds a buffer");
        cr_assert_eq(run(&op, ALL_BUT_F64, ALL, &out, msg, sizeof(msg)), 0, "%s", msg);
        cr_assert_eq(out.kp.a, 0x7f0000000000ull);
        op_release(&out);
}

Test(validate, f64_scalars_reach_the_kernels_unrounded, .init = setup, .fini = teardown)
{
        Gemmd__V1__Op op = make_op(GEMMD_F64, 1);
        struct op out;
        char msg[256] = "";

        cr_assert_eq(run(&op, ALL, ALL, &out, msg, sizeof(msg)), 0, "%s", msg);
        cr_assert_eq(out.kp.dtype, GEMMD_F64);
        cr_assert(out.kp.alpha_f64 == 1.0 / 3 && out.kp.beta_f64 == 0.1);
        cr_assert(out.kp.alpha == (float)(1.0 / 3) && out.kp.beta == (float)0.1);
        cr_assert_eq(out.span[0], (uint64_t)(4 * 5 * 8), "f64 elements are 8 bytes");
        /* Its kernel-config key is its own. */
        cr_assert_eq(out.key, (uint32_t)GEMMD_F64);
        op_release(&out);

        /* An f32 op reads the float fields and ignores the f64 ones. */
        op = make_op(GEMMD_F32, 1);
        op.alpha_f64 = 7.0;
        cr_assert_eq(run(&op, ALL, ALL, &out, msg, sizeof(msg)), 0, "%s", msg);
        cr_assert(out.kp.alpha == 1.0f / 3 && out.kp.alpha_f64 == (double)(1.0f / 3));
        op_release(&out);
}
