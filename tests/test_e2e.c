/*
 * test_e2e.c - the real gemmd through the client library: handshake and
 * limits, every GEMM and SYR2K variant against a double reference, inline
 * operands, and the validation table.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/e2e_util.h"
#include "tests/e2e_assert.h"

TestSuite(e2e, .init = e2e_setup, .fini = e2e_teardown, .timeout = 120);

Test(e2e, handshake_reports_protocol_backend_and_limits)
{
        struct e2e_daemon d;
        struct gemmd_info info;
        struct gemmd_device dev;
        gemmd_client *c;

        START(&d, "--threads", "2", "--max-inflight-ops", "77", "--max-queue-ops", "999",
              "--max-ops-per-submit", "33", "--max-inline-bytes", "123456", "--max-buffers", "17",
              "--max-frame-bytes", "3000000", "--max-sessions", "5", "--max-buffer-bytes",
              "1048576", "--max-user-inflight-ops", "300", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(gemmd_get_info(c, &info), 0);
        cr_expect_eq(info.protocol_version, 1);
        cr_expect_str_eq(info.backend, "cpu");
        cr_expect_neq(info.server_version[0], '\0');
        cr_expect_neq(info.session_id, 0);
        cr_expect_eq(info.max_inflight_ops, 77);
        cr_expect_eq(info.max_queue_ops, 999);
        cr_expect_eq(info.max_ops_per_submit, 33);
        cr_expect_eq(info.max_inline_bytes, 123456);
        cr_expect_eq(info.max_buffers, 17);
        cr_expect_eq(info.max_frame_bytes, 3000000);
        cr_expect_eq(info.max_buffer_bytes, 1048576);
        cr_expect_eq(info.max_sessions, 5);
        cr_expect_eq(info.max_user_inflight_ops, 300);
        cr_assert_eq(info.ndevices, 1);
        cr_assert_eq(gemmd_get_device(c, 0, &dev), 0);
        cr_expect_str_eq(dev.backend, "cpu");
        cr_expect_eq(dev.units, 2, "one unit per --threads");
        cr_expect_eq(gemmd_get_device(c, 1, &dev), -EINVAL);
        gemmd_disconnect(c);
        STOP(&d);
}

Test(e2e, limits_on_ops_per_submit_and_sessions_are_enforced)
{
        struct e2e_daemon d;
        gemmd_client *c1, *c2, *c3 = NULL, *c4 = NULL;
        struct e2e_prob p[3];
        struct gemmd_op ops[3];
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 3, .n = 2, .k = 4,
                             .alpha = 1.5f, .beta = 0.5f};
        uint64_t seed = 11;
        char why[256];
        int rc;

        START(&d, "--threads", "1", "--max-sessions", "2", "--max-ops-per-submit", "2",
              "--max-buffers", "2", "--max-buffer-bytes", "1048576", NULL);
        /* Let the daemon see the readiness probe's connection close. */
        usleep(100000);
        c1 = e2e_connect(&d);
        c2 = e2e_connect(&d);
        cr_assert(c1 && c2);
        rc = gemmd_connect(d.sock, &c3);
        cr_expect_eq(rc, GEMMD_ELIMIT, "a third session: %s", gemmd_strerror(rc));
        cr_expect_null(c3);
        /* The library enforces the submit size locally. */
        for (int i = 0; i < 3; i++) {
                cr_assert_eq(e2e_prob_inline(&p[i], &s, &seed), 0);
                ops[i] = p[i].op;
        }
        gemmd_ticket t;
        cr_expect_eq(gemmd_submit(c1, ops, 3, GEMMD_PRIO_NORMAL, &t), GEMMD_ELIMIT);
        cr_assert_eq(e2e_run_checked(c1, p, 2, 2, NULL, why, sizeof(why)), 0, "%s", why);
        /* Buffers: at most 2 per session, of at most 1 MiB each. */
        {
                gemmd_buffer b1, b2, b3;
                void *ptr;

                cr_assert_eq(gemmd_buffer_alloc(c1, 1048576, &b1, &ptr), 0);
                cr_assert_eq(gemmd_buffer_alloc(c1, 4096, &b2, &ptr), 0);
                rc = gemmd_buffer_alloc(c1, 4096, &b3, &ptr);
                cr_expect_eq(rc, GEMMD_ELIMIT, "a third buffer: %s", gemmd_strerror(rc));
                cr_assert_eq(gemmd_buffer_free(c1, b1), 0);
                rc = gemmd_buffer_alloc(c1, 1048577, &b3, &ptr);
                cr_expect_eq(rc, GEMMD_ELIMIT, "a buffer over the size cap: %s",
                             gemmd_strerror(rc));
                cr_assert_eq(gemmd_buffer_alloc(c1, 4096, &b3, &ptr), 0, "freed place not reused");
        }
        /* A closed session frees its place. */
        gemmd_disconnect(c2);
        for (int tries = 0; tries < 100 && !c4; tries++) {
                if (gemmd_connect(d.sock, &c4))
                        usleep(10000);
        }
        cr_assert_not_null(c4, "no session after one closed");
        e2e_prob_reset(&p[2]);
        cr_assert_eq(e2e_run_checked(c4, &p[2], 1, 1, NULL, why, sizeof(why)), 0, "%s", why);
        for (int i = 0; i < 3; i++)
                e2e_prob_free(&p[i]);
        gemmd_disconnect(c4);
        gemmd_disconnect(c1);
        STOP(&d);
}

/* Sizes (m, n, k) exercising 1, odd sizes and sizes that are not a
 * multiple of any tile. */
static const int64_t gemm_sizes[][3] = {
        {1, 1, 1}, {7, 33, 65}, {65, 7, 33}, {130, 65, 7}, {33, 130, 130}, {1, 130, 7}, {130, 1, 1},
};
#define NSIZES (sizeof(gemm_sizes) / sizeof(gemm_sizes[0]))

Test(e2e, gemm_every_dtype_op_and_layout_matches_reference)
{
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p[NSIZES];
        gemmd_client *c;
        uint64_t seed = 1;
        char why[256];
        int combos = 0;

        START(&d, "--threads", "2", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 4u << 20), 0);
        for (int dt = 0; dt < 4; dt++)
                for (int ta = 0; ta < 2; ta++)
                        for (int tb = 0; tb < 2; tb++)
                                for (int row = 0; row < 2; row++) {
                                        ar.used = 0;
                                        for (size_t i = 0; i < NSIZES; i++) {
                                                struct e2e_spec s = {
                                                        .kind = GEMMD_GEMM,
                                                        .dtype = (enum gemmd_dtype)dt,
                                                        .ta = (enum gemmd_trans)ta,
                                                        .tb = (enum gemmd_trans)tb,
                                                        .row_major = row,
                                                        .m = gemm_sizes[i][0],
                                                        .n = gemm_sizes[i][1],
                                                        .k = gemm_sizes[i][2],
                                                        .pad = 1 + (int64_t)(i % 3),
                                                        .alpha = i % 2 ? -0.75f : 1.5f,
                                                        /* beta 0 with C poisoned by NaN */
                                                        .beta = i % 3 == 2 ? 0.0f : 0.625f,
                                                };

                                                cr_assert_eq(e2e_prob_place(&p[i], &s, &ar, &seed),
                                                             0);
                                        }
                                        /* One multi-op submit per combination, others single. */
                                        int rc = e2e_run_checked(c, p, NSIZES,
                                                                 combos % 2 ? NSIZES : 1, NULL, why,
                                                                 sizeof(why));
                                        cr_assert_eq(rc, 0, "%s", why);
                                        for (size_t i = 0; i < NSIZES; i++)
                                                e2e_prob_free(&p[i]);
                                        combos++;
                                }
        cr_expect_eq(combos, 32);
        gemmd_disconnect(c);
        STOP(&d);
}

static const int64_t syr2k_sizes[][2] = {{1, 1}, {7, 65}, {33, 7}, {65, 130}, {130, 33}, {64, 1}};
#define NSYR (sizeof(syr2k_sizes) / sizeof(syr2k_sizes[0]))

Test(e2e, syr2k_every_dtype_trans_uplo_and_layout_leaves_other_triangle)
{
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p[NSYR];
        gemmd_client *c;
        uint64_t seed = 2;
        char why[256];

        START(&d, "--threads", "2", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 4u << 20), 0);
        for (int dt = 0; dt < 4; dt++)
                for (int tr = 0; tr < 2; tr++)
                        for (int up = 0; up < 2; up++)
                                for (int row = 0; row < 2; row++) {
                                        ar.used = 0;
                                        for (size_t i = 0; i < NSYR; i++) {
                                                struct e2e_spec s = {
                                                        .kind = GEMMD_SYR2K,
                                                        .dtype = (enum gemmd_dtype)dt,
                                                        .ta = (enum gemmd_trans)tr,
                                                        .uplo = (enum gemmd_uplo)up,
                                                        .row_major = row,
                                                        .n = syr2k_sizes[i][0],
                                                        .k = syr2k_sizes[i][1],
                                                        .pad = (int64_t)(i % 3) + 1,
                                                        .alpha = i % 2 ? 0.5f : -1.25f,
                                                        .beta = i % 3 == 1 ? 0.0f : 0.75f,
                                                };

                                                cr_assert_eq(e2e_prob_place(&p[i], &s, &ar, &seed),
                                                             0);
                                        }
                                        int rc = e2e_run_checked(c, p, NSYR, NSYR, NULL, why,
                                                                 sizeof(why));
                                        cr_assert_eq(rc, 0, "%s", why);
                                        for (size_t i = 0; i < NSYR; i++)
                                                e2e_prob_free(&p[i]);
                                }
        gemmd_disconnect(c);
        STOP(&d);
}

Test(e2e, inline_operands_and_inline_c_are_returned)
{
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p[32];
        gemmd_client *c;
        uint64_t seed = 3;
        char why[256];
        size_t n = 0;

        START(&d, "--threads", "2", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 1u << 20), 0);
        for (int dt = 0; dt < 4; dt++) {
                for (int beta0 = 0; beta0 < 2; beta0++) {
                        struct e2e_spec g = {.kind = GEMMD_GEMM, .dtype = (enum gemmd_dtype)dt,
                                             .ta = GEMMD_OP_T, .row_major = dt == 1,
                                             .m = 9, .n = 5, .k = 13, .pad = 2, .alpha = 0.5f,
                                             .beta = beta0 ? 0.0f : -1.5f};
                        struct e2e_spec s = {.kind = GEMMD_SYR2K, .dtype = (enum gemmd_dtype)dt,
                                             .ta = (enum gemmd_trans)beta0, .uplo = GEMMD_UPPER,
                                             .row_major = dt == 2, .n = 11, .k = 6, .pad = 1,
                                             .alpha = -2.0f, .beta = beta0 ? 0.0f : 0.25f};

                        /* All inline, C included. */
                        cr_assert_eq(e2e_prob_inline(&p[n++], &g, &seed), 0);
                        cr_assert_eq(e2e_prob_inline(&p[n++], &s, &seed), 0);
                        /* Mixed: A inline, B and C in a shared buffer. */
                        for (int k = 0; k < 2; k++) {
                                struct e2e_prob *q = &p[n++];

                                cr_assert_eq(e2e_prob_place(q, k ? &s : &g, &ar, &seed), 0);
                                q->op.a = (struct gemmd_operand){.data = q->a,
                                                                 .bytes = q->abytes};
                        }
                }
        }
        cr_assert_eq(e2e_run_checked(c, p, n, 4, NULL, why, sizeof(why)), 0, "%s", why);
        for (size_t i = 0; i < n; i++)
                e2e_prob_free(&p[i]);
        gemmd_disconnect(c);
        STOP(&d);
}

Test(e2e, completion_times_lie_between_submit_and_receipt)
{
        struct e2e_daemon d;
        struct e2e_prob p;
        struct e2e_spec g = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 7, .n = 5, .k = 3,
                             .alpha = 1.0f};
        struct gemmd_result res;
        struct timespec t0, t1;
        gemmd_ticket t;
        gemmd_client *c;
        uint64_t seed = 5, a0, a1;

        START(&d, "--threads", "1", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_prob_inline(&p, &g, &seed), 0);
        /* The daemon's stamps are its CLOCK_MONOTONIC: on one host they
         * fall between the client's submit and the wait's return. */
        for (int i = 0; i < 20; i++) {
                clock_gettime(CLOCK_MONOTONIC, &t0);
                cr_assert_eq(gemmd_submit(c, &p.op, 1, GEMMD_PRIO_NORMAL, &t), 0);
                memset(&res, 0, sizeof(res));
                cr_assert_eq(gemmd_wait(c, t, -1, &res, 1), 0);
                clock_gettime(CLOCK_MONOTONIC, &t1);
                a0 = (uint64_t)t0.tv_sec * 1000000000ull + (uint64_t)t0.tv_nsec;
                a1 = (uint64_t)t1.tv_sec * 1000000000ull + (uint64_t)t1.tv_nsec;
                cr_assert_eq(res.status, 0);
                cr_assert(a0 <= res.admit_ns && res.admit_ns <= res.reply_ns && res.reply_ns <= a1,
                          "submit %llu, admitted %llu, reply %llu, received %llu",
                          (unsigned long long)a0, (unsigned long long)res.admit_ns,
                          (unsigned long long)res.reply_ns, (unsigned long long)a1);
        }
        e2e_prob_free(&p);
        gemmd_disconnect(c);
        STOP(&d);
}

Test(e2e, inline_bytes_over_the_limit_are_refused)
{
        struct e2e_daemon d;
        struct e2e_prob p;
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 64, .n = 64, .k = 64,
                             .alpha = 1, .beta = 1};
        gemmd_client *c;
        gemmd_ticket t;
        uint64_t seed = 4;

        START(&d, "--threads", "1", "--max-inline-bytes", "40000", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        /* A, B and C in and C out: 4 x 16 KiB > 40000. */
        cr_assert_eq(e2e_prob_inline(&p, &s, &seed), 0);
        int rc = gemmd_submit(c, &p.op, 1, GEMMD_PRIO_NORMAL, &t);
        if (rc == 0)
                rc = gemmd_wait(c, t, 10000, NULL, 0);
        cr_expect_eq(rc, GEMMD_ELIMIT, "got %s", gemmd_strerror(rc));
        e2e_prob_free(&p);
        gemmd_disconnect(c);
        STOP(&d);
}

/* ---- validation table ------------------------------------------------- */

enum mutation {
        M_NONE,
        M_A_SHORT,     /* A's buffer one byte too short */
        M_B_SHORT,
        M_C_SHORT,
        M_LDA_SMALL,   /* lda one less than the rows as stored */
        M_LDC_SMALL,
        M_LDB_ZERO,
        M_LDA_NEG,
        M_M0,
        M_N0,
        M_K0,
        M_K_NEG,
        M_M_HUGE,      /* m = 2^40 */
        M_LDA_HUGE,    /* (cols - 1) * lda * esz overflows 64 bits */
        M_OFF_HUGE,    /* offset + span overflows 64 bits */
        M_NOBUF_A,
        M_NOBUF_C,
        M_C_OVER_A,    /* C placed inside A's bytes */
        M_BETA_NO_C,   /* beta != 0 and C inline without data */
        M_MISALIGNED,  /* B's offset not a multiple of the element size */
        M_INLINE_SHORT /* inline A one element shorter than the op reads */
};

struct vcase {
        char name[48];
        enum gemmd_op_kind kind;
        enum gemmd_dtype dtype;
        int row_major;
        enum mutation mut;
        int expect;
};

ParameterizedTestParameters(e2e, validation_rejects_and_computes_nothing)
{
        static struct vcase cases[] = {
                {"fits exactly", GEMMD_GEMM, GEMMD_F32, 0, M_NONE, 0},
                {"A one byte past its buffer", GEMMD_GEMM, GEMMD_F32, 0, M_A_SHORT, GEMMD_EBOUNDS},
                {"fits exactly row-major f16", GEMMD_GEMM, GEMMD_F16, 1, M_NONE, 0},
                {"B one byte past, row-major f16", GEMMD_GEMM, GEMMD_F16, 1, M_B_SHORT,
                 GEMMD_EBOUNDS},
                {"C one byte past", GEMMD_GEMM, GEMMD_BF16, 0, M_C_SHORT, GEMMD_EBOUNDS},
                {"fits exactly syr2k bf16", GEMMD_SYR2K, GEMMD_BF16, 0, M_NONE, 0},
                {"syr2k C one byte past", GEMMD_SYR2K, GEMMD_BF16, 0, M_C_SHORT, GEMMD_EBOUNDS},
                {"syr2k A one byte past row-major", GEMMD_SYR2K, GEMMD_F32, 1, M_A_SHORT,
                 GEMMD_EBOUNDS},
                {"lda smaller than rows", GEMMD_GEMM, GEMMD_F32, 0, M_LDA_SMALL, GEMMD_EINVAL},
                {"ldc smaller than cols, row-major", GEMMD_GEMM, GEMMD_F32, 1, M_LDC_SMALL,
                 GEMMD_EINVAL},
                {"ldb zero", GEMMD_GEMM, GEMMD_F16, 0, M_LDB_ZERO, GEMMD_EINVAL},
                {"lda negative", GEMMD_GEMM, GEMMD_F32, 0, M_LDA_NEG, GEMMD_EINVAL},
                {"m zero", GEMMD_GEMM, GEMMD_F32, 0, M_M0, GEMMD_EINVAL},
                {"n zero", GEMMD_GEMM, GEMMD_F32, 0, M_N0, GEMMD_EINVAL},
                {"k zero", GEMMD_GEMM, GEMMD_F32, 0, M_K0, GEMMD_EINVAL},
                {"syr2k n zero", GEMMD_SYR2K, GEMMD_F32, 0, M_N0, GEMMD_EINVAL},
                {"k negative", GEMMD_GEMM, GEMMD_F32, 0, M_K_NEG, GEMMD_EINVAL},
                {"m = 2^40", GEMMD_GEMM, GEMMD_F32, 0, M_M_HUGE, GEMMD_EOVERFLOW},
                {"lda * cols overflows", GEMMD_GEMM, GEMMD_F32, 0, M_LDA_HUGE, GEMMD_EOVERFLOW},
                {"offset + size overflows", GEMMD_GEMM, GEMMD_F32, 0, M_OFF_HUGE, GEMMD_EOVERFLOW},
                {"unknown buffer for A", GEMMD_GEMM, GEMMD_F32, 0, M_NOBUF_A, GEMMD_ENOBUF},
                {"unknown buffer for C", GEMMD_SYR2K, GEMMD_F16, 0, M_NOBUF_C, GEMMD_ENOBUF},
                {"C overlaps A", GEMMD_GEMM, GEMMD_F32, 0, M_C_OVER_A, GEMMD_EINVAL},
                {"beta not 0 without C", GEMMD_GEMM, GEMMD_F32, 0, M_BETA_NO_C, GEMMD_EINVAL},
                {"misaligned offset", GEMMD_GEMM, GEMMD_F32, 0, M_MISALIGNED, GEMMD_EINVAL},
                {"inline A one element short", GEMMD_GEMM, GEMMD_F16, 0, M_INLINE_SHORT,
                 GEMMD_EBOUNDS},
        };

        return cr_make_param_array(struct vcase, cases, sizeof(cases) / sizeof(cases[0]));
}

#define VOFF 64 /* operands start this far into their buffers */

/* The case's op: shapes come from a fixed spec; each operand lives at VOFF
 * in a buffer of its own sized to end exactly where the operand ends (one
 * byte less for the *_SHORT mutations). */
struct vsetup {
        struct e2e_prob p;
        struct e2e_arena buf[3];
        uint8_t *c_before;
        uint64_t c_len;
        void *inline_a;
};

static void build_case(gemmd_client *c, const struct vcase *vc, struct vsetup *v, uint64_t *seed)
{
        struct e2e_spec s = {.kind = vc->kind, .dtype = vc->dtype, .ta = GEMMD_OP_N,
                             .tb = GEMMD_OP_T, .uplo = GEMMD_LOWER, .row_major = vc->row_major,
                             .m = 7, .n = 9, .k = 5, .pad = 2, .alpha = 1.5f, .beta = 0.5f};
        struct e2e_prob *p = &v->p;
        size_t esz = gemmd_dtype_size(vc->dtype);
        uint64_t bytes[3];
        void *ptr[3];

        e2e_prob_shape(p, &s);
        bytes[0] = p->abytes;
        bytes[1] = p->bbytes;
        bytes[2] = p->cbytes;
        for (int i = 0; i < 3; i++) {
                uint64_t size = VOFF + bytes[i];

                if ((vc->mut == M_A_SHORT && i == 0) || (vc->mut == M_B_SHORT && i == 1) ||
                    (vc->mut == M_C_SHORT && i == 2))
                        size--;
                if (vc->mut == M_C_OVER_A && i == 0)
                        size += bytes[2]; /* room for C inside A's buffer */
                cr_assert_eq(e2e_arena_init(&v->buf[i], c, size), 0);
                ptr[i] = v->buf[i].base + VOFF;
                for (uint64_t e = 0; e < (size - VOFF) / esz; e++)
                        e2e_set(vc->dtype, ptr[i], e, e2e_rand_val(seed));
        }
        p->a = ptr[0];
        p->b = ptr[1];
        p->c = ptr[2];
        p->op.a = (struct gemmd_operand){.buffer = v->buf[0].id, .offset = VOFF};
        p->op.b = (struct gemmd_operand){.buffer = v->buf[1].id, .offset = VOFF};
        p->op.c = (struct gemmd_operand){.buffer = v->buf[2].id, .offset = VOFF};
        switch (vc->mut) {
        case M_LDA_SMALL:
                p->op.lda = 6; /* A is 7 x 5 column-major */
                break;
        case M_LDC_SMALL:
                p->op.ldc = 8; /* C is 7 x 9 row-major: ldc >= 9 */
                break;
        case M_LDB_ZERO:
                p->op.ldb = 0;
                break;
        case M_LDA_NEG:
                p->op.lda = -7;
                break;
        case M_M0:
                p->op.m = 0;
                break;
        case M_N0:
                p->op.n = 0;
                break;
        case M_K0:
                p->op.k = 0;
                break;
        case M_K_NEG:
                p->op.k = -5;
                break;
        case M_M_HUGE:
                p->op.m = 1ll << 40;
                break;
        case M_LDA_HUGE:
                p->op.lda = INT64_MAX / 2;
                break;
        case M_OFF_HUGE:
                p->op.a.offset = UINT64_MAX - 63; /* a multiple of every element size */
                break;
        case M_NOBUF_A:
                p->op.a.buffer = v->buf[2].id + 1000;
                break;
        case M_NOBUF_C:
                p->op.c.buffer = v->buf[2].id + 1000;
                break;
        case M_C_OVER_A:
                /* C starts on A's last element, in A's buffer. */
                p->op.c = (struct gemmd_operand){.buffer = v->buf[0].id,
                                                 .offset = VOFF + p->abytes - esz};
                p->c = v->buf[0].base + p->op.c.offset;
                break;
        case M_BETA_NO_C:
                p->op.c = (struct gemmd_operand){.out = p->c, .bytes = p->cbytes};
                break;
        case M_MISALIGNED:
                p->op.b.offset = VOFF - 2; /* f32: 2 is not a multiple of 4 */
                break;
        case M_INLINE_SHORT:
                v->inline_a = malloc(p->abytes);
                cr_assert_not_null(v->inline_a);
                memcpy(v->inline_a, p->a, p->abytes);
                p->op.a = (struct gemmd_operand){.data = v->inline_a, .bytes = p->abytes - esz};
                break;
        default:
                break;
        }
        /* What must not change when the op is refused: its C buffer, whole. */
        {
                struct e2e_arena *cb = vc->mut == M_C_OVER_A ? &v->buf[0] : &v->buf[2];

                v->c_len = cb->size;
                v->c_before = malloc(v->c_len);
                cr_assert_not_null(v->c_before);
                memcpy(v->c_before, cb->base, v->c_len);
        }
        p->c0 = malloc(p->cbytes);
        cr_assert_not_null(p->c0);
        if (vc->mut != M_C_SHORT)
                memcpy(p->c0, p->c, p->cbytes);
}

/* A valid small inline op; returns its status. */
static int run_small(gemmd_client *c, uint64_t *seed, char *why, size_t len)
{
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .ta = GEMMD_OP_T, .m = 5,
                             .n = 6, .k = 7, .pad = 1, .alpha = 2.0f, .beta = -1.0f};
        struct e2e_prob p;
        int rc;

        if (e2e_prob_inline(&p, &s, seed))
                return -ENOMEM;
        rc = e2e_run_checked(c, &p, 1, 1, NULL, why, len);
        e2e_prob_free(&p);
        return rc;
}

ParameterizedTest(struct vcase *vc, e2e, validation_rejects_and_computes_nothing)
{
        struct e2e_daemon d;
        struct vsetup v = {0};
        struct e2e_arena ok_ar;
        struct e2e_prob ok;
        struct e2e_spec ok_spec = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 4, .n = 3,
                                   .k = 2, .pad = 1, .alpha = 1.0f, .beta = 1.0f};
        struct gemmd_op ops[2];
        struct gemmd_result res[2];
        gemmd_client *c, *other;
        gemmd_ticket t;
        uint64_t seed = 5;
        char why[256];
        double err;
        int rc;

        START(&d, "--threads", "1", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        build_case(c, vc, &v, &seed);
        /* A valid op first in the same submit: a rejected submit computes
         * none of its ops. */
        cr_assert_eq(e2e_arena_init(&ok_ar, c, 4096), 0);
        cr_assert_eq(e2e_prob_place(&ok, &ok_spec, &ok_ar, &seed), 0);
        ops[0] = ok.op;
        ops[1] = v.p.op;
        rc = gemmd_submit(c, ops, 2, GEMMD_PRIO_NORMAL, &t);
        cr_assert_eq(rc, 0, "%s: gemmd_submit: %s", vc->name, gemmd_strerror(rc));
        rc = gemmd_wait(c, t, 10000, res, 2);
        cr_assert_eq(rc, vc->expect, "%s: got %s (%d), expected %s", vc->name,
                     gemmd_strerror(rc), rc, gemmd_strerror(vc->expect));
        if (vc->expect == 0) {
                cr_assert_eq(e2e_prob_check(&ok, &err, why, sizeof(why)), 0, "%s", why);
                cr_assert_eq(e2e_prob_check(&v.p, &err, why, sizeof(why)), 0, "%s: %s",
                             vc->name, why);
        } else {
                const uint8_t *cb = vc->mut == M_C_OVER_A ? v.buf[0].base : v.buf[2].base;

                cr_assert_eq(res[0].status, vc->expect, "%s: op 0 status %d", vc->name,
                             res[0].status);
                cr_assert_eq(memcmp(ok.c, ok.c0, ok.cbytes), 0,
                             "%s: the valid op of a refused submit was computed", vc->name);
                cr_assert_eq(memcmp(cb, v.c_before, v.c_len), 0,
                             "%s: a refused op wrote its C", vc->name);
        }
        /* The connection still works, and so does another client. */
        e2e_prob_reset(&ok);
        cr_assert_eq(e2e_run_checked(c, &ok, 1, 1, NULL, why, sizeof(why)), 0,
                     "%s: same connection afterwards: %s", vc->name, why);
        other = e2e_connect(&d);
        cr_assert_not_null(other);
        cr_assert_eq(run_small(other, &seed, why, sizeof(why)), 0, "%s: second client: %s",
                     vc->name, why);
        gemmd_disconnect(other);
        e2e_prob_free(&ok);
        free(v.p.c0);
        free(v.c_before);
        free(v.inline_a);
        gemmd_disconnect(c);
        STOP(&d);
}

Test(e2e, released_buffer_is_unknown_afterwards)
{
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p;
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_BF16, .m = 8, .n = 8, .k = 8,
                             .alpha = 1, .beta = 0};
        gemmd_client *c;
        gemmd_ticket t;
        uint64_t seed = 6;
        char why[256];
        int rc;

        START(&d, "--threads", "1", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 8192), 0);
        cr_assert_eq(e2e_prob_place(&p, &s, &ar, &seed), 0);
        cr_assert_eq(e2e_run_checked(c, &p, 1, 1, NULL, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(gemmd_buffer_free(c, ar.id), 0);
        cr_expect_eq(gemmd_buffer_free(c, ar.id), GEMMD_ENOBUF);
        rc = gemmd_submit(c, &p.op, 1, GEMMD_PRIO_NORMAL, &t);
        cr_assert_eq(rc, 0);
        rc = gemmd_wait(c, t, 10000, NULL, 0);
        cr_expect_eq(rc, GEMMD_ENOBUF, "got %s", gemmd_strerror(rc));
        cr_expect_eq(gemmd_wait(c, t, 0, NULL, 0), GEMMD_ENOTICKET);
        free(p.c0);
        gemmd_disconnect(c);
        STOP(&d);
}

/*
 * f64 end to end: GEMM and SYR2K of random sizes, transposes and layouts,
 * inline or in shared memory, some with beta 0 over a C of NaNs, and
 * scalars that have no float (1/3, 0.1), each checked at f64's tolerance.
 * Judged again with the scalars rounded to float, every result must fail:
 * the daemon computed with the doubles. The handshake says the CPU device
 * runs every dtype.
 */
#define NF64 24

/* x rounded to float, as a double. Through a volatile: GCC 12 folds a pair
 * of (double)(float) round trips that it vectorizes into nothing. */
static double float_of(double x)
{
        volatile float f = (float)x;

        return f;
}

Test(e2e, f64_random_ops_match_reference_with_double_scalars)
{
        static const double alphas[] = {1.0 / 3, -0.1, 2.2};
        static const double betas[] = {0.0, 0.1, -1.0 / 3};
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p[NF64];
        struct gemmd_device dev;
        gemmd_client *c;
        uint64_t seed = 64;
        char why[300];

        START(&d, "--threads", "2", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(gemmd_get_device(c, 0, &dev), 0);
        cr_assert_eq(dev.dtypes, 0xfu, "the CPU device runs f32, f16, bf16 and f64, not %#x",
                     dev.dtypes);
        cr_assert_eq(e2e_arena_init(&ar, c, 16u << 20), 0);
        for (int i = 0; i < NF64; i++) {
                struct e2e_spec s;

                e2e_spec_random(&s, &seed, 150);
                s.dtype = GEMMD_F64;
                s.alpha = alphas[i % 3];
                s.beta = betas[(i / 3) % 3];
                if (i % 2)
                        cr_assert_eq(e2e_prob_inline(&p[i], &s, &seed), 0);
                else
                        cr_assert_eq(e2e_prob_place(&p[i], &s, &ar, &seed), 0);
        }
        cr_assert_eq(e2e_run_checked(c, p, NF64, 6, NULL, why, sizeof(why)), 0, "%s", why);
        for (int i = 0; i < NF64; i++) {
                double err;

                p[i].s.alpha = float_of(p[i].s.alpha);
                p[i].s.beta = float_of(p[i].s.beta);
                cr_assert_neq(e2e_prob_check(&p[i], &err, why, sizeof(why)), 0,
                              "op %d passes with float scalars too (error %.3g)", i, err);
                e2e_prob_free(&p[i]);
        }
        gemmd_disconnect(c);
        STOP(&d);
}
