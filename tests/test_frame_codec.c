/*
 * test_frame_codec.c - the hand-written fast paths of proto/frame.c (Submit
 * decoding, Completion encoding) against protobuf-c itself, on random and
 * mutated messages: the bytes written must be identical, and decoding must
 * agree on success, on arena exhaustion, and on every decoded field; and
 * the one place they must not agree: a 32-bit field given more than 32
 * bits, whose low bits protobuf-c keeps and gemmd refuses.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "gemmd.h"
#include "proto/frame.h"

static uint64_t st = 88172645463325252ull;

static uint64_t rnd(void)
{
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        return st;
}

/* A value of the kinds that stress varint encodings: zero, small, large,
 * and negative numbers seen as 64-bit. */
static uint64_t rv(void)
{
        switch (rnd() % 6) {
        case 0:
                return 0;
        case 1:
                return rnd() % 3;
        case 2:
                return rnd() % 200;
        case 3:
                return rnd();
        case 4:
                return (uint64_t)-(int64_t)(rnd() % 5);
        default:
                return rnd() % 100000;
        }
}

static const char *strs[] = {NULL, "", "x", "device failure: a long enough text 0123456789",
                             "cpu-bf16"};

Test(frame_codec, completion_encoder_matches_protobuf_c)
{
        uint8_t data[300];

        for (int i = 0; i < 300; i++)
                data[i] = (uint8_t)i;
        for (int it = 0; it < 20000; it++) {
                size_t n = 1 + rnd() % (rnd() % 4 == 0 ? 100 : 4);
                Gemmd__V1__OpResult *res = calloc(n, sizeof(*res));
                Gemmd__V1__OpResult **rp = calloc(n, sizeof(*rp));
                Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
                Gemmd__V1__Completion c = GEMMD__V1__COMPLETION__INIT;
                uint8_t *b1, *b2;
                size_t n1, n2;
                int r1, r2;

                cr_assert(res && rp);
                for (size_t i = 0; i < n; i++) {
                        gemmd__v1__op_result__init(&res[i]);
                        rp[i] = &res[i];
                        res[i].status = rnd() % 4 == 0 ? (int)(rnd() % 20) - 2 : 0;
                        res[i].message = (char *)strs[rnd() % 5];
                        res[i].kernel = (char *)strs[rnd() % 5];
                        if (rnd() % 3 == 0) {
                                res[i].c_data.len = rnd() % 300;
                                res[i].c_data.data = data;
                        }
                        res[i].queue_us = rv();
                        res[i].run_us = rv();
                        res[i].group_id = rv();
                        res[i].group_size = (uint32_t)rv();
                        res[i].admit_ns = rnd() % 2 ? rv() : 0;
                        res[i].reply_ns = rnd() % 2 ? rv() << 20 : 0;
                }
                c.n_results = n;
                c.results = rp;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_COMPLETION;
                env.completion = &c;
                env.request_id = rv();
                r1 = frame_pack(&env, 8, UINT32_MAX, &b1, &n1);
                r2 = frame_pack_completion(env.request_id, res, n, 8, UINT32_MAX, &b2, &n2);
                cr_assert_eq(r1, 0);
                cr_assert_eq(r2, 0);
                cr_assert_eq(n1, n2, "case %d: %zu bytes against protobuf-c's %zu", it, n2, n1);
                cr_assert(!memcmp(b1 + 8, b2 + 8, n1), "case %d: bytes differ", it);
                /* In place (a ring's slot): the body alone, the same bytes,
                 * and nothing when one byte short. */
                {
                        uint8_t *b3 = malloc(n1);
                        size_t n3 = 0;

                        cr_assert_not_null(b3);
                        cr_assert_eq(frame_pack_completion_body(env.request_id, res, n, b3,
                                                                n1 - FRAME_HDR_BYTES, &n3),
                                     0);
                        cr_assert_eq(n3, n1 - FRAME_HDR_BYTES);
                        cr_assert(!memcmp(b1 + 8 + FRAME_HDR_BYTES, b3, n3), "case %d: body differs", it);
                        cr_assert_eq(frame_pack_completion_body(env.request_id, res, n, b3, n3 - 1, &n3),
                                     GEMMD_ETOOBIG);
                        free(b3);
                }
                free(b1);
                free(b2);
                free(res);
                free(rp);
        }
}

/* Packs a random Submit envelope into buf; returns its length. */
static size_t random_submit(uint8_t *buf, const uint8_t *data)
{
        Gemmd__V1__Envelope e = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Submit sm = GEMMD__V1__SUBMIT__INIT;
        Gemmd__V1__Op ops[5], *opp[5];
        Gemmd__V1__Operand od[15];
        size_t no = rnd() % 5;

        for (size_t i = 0; i < no; i++) {
                Gemmd__V1__Op *o = &ops[i];
                Gemmd__V1__Operand **dst[3] = {&o->a, &o->b, &o->c};

                gemmd__v1__op__init(o);
                opp[i] = o;
                o->kind = rv() % 3;
                o->dtype = rv() % 4;
                o->trans_a = rv() % 2;
                o->trans_b = rv() % 2;
                o->uplo = rv() % 2;
                o->row_major = rnd() % 2;
                o->allow_tf32 = rnd() % 2;
                o->m = (int64_t)rv();
                o->n = (int64_t)rv();
                o->k = (int64_t)rv();
                o->lda = (int64_t)rv();
                o->ldb = (int64_t)rv();
                o->ldc = (int64_t)rv();
                o->alpha = rnd() % 3 ? 1.5f : 0.0f;
                o->beta = rnd() % 2 ? -2.0f : 0.0f;
                o->alpha_f64 = rnd() % 2 ? 1.0 / 3 : 0.0;
                o->beta_f64 = rnd() % 2 ? -0.1 : 0.0;
                o->debug_fault = rnd() % 5 == 0;
                for (int j = 0; j < 3; j++) {
                        Gemmd__V1__Operand *x = &od[i * 3 + j];

                        if (rnd() % 4 == 0)
                                continue;
                        gemmd__v1__operand__init(x);
                        x->buffer_id = rv();
                        x->offset = rv();
                        if (rnd() % 3 == 0) {
                                x->data.len = rnd() % 40;
                                x->data.data = (uint8_t *)data;
                        }
                        *dst[j] = x;
                }
        }
        sm.n_ops = no;
        sm.ops = opp;
        sm.priority = (uint32_t)(rv() % 4);
        sm.notify_launch = rnd() % 2;
        sm.word = rnd() % 3 ? 0 : (uint32_t)rv();
        e.request_id = rv();
        e.body_case = GEMMD__V1__ENVELOPE__BODY_SUBMIT;
        e.submit = &sm;
        return gemmd__v1__envelope__pack(&e, buf);
}

Test(frame_codec, submit_decoder_agrees_with_protobuf_c)
{
        static uint8_t buf[8192], p1[16384], p2[16384];
        uint8_t data[64];
        int same = 0;

        for (int i = 0; i < 64; i++)
                data[i] = (uint8_t)(i * 7);
        for (int it = 0; it < 50000; it++) {
                size_t len = random_submit(buf, data);
                int m = (int)(rnd() % 4);
                struct frame_arena a1, a2;
                Gemmd__V1__Envelope *x1, *x2;

                /* Sometimes flip bits, truncate, or splice a copy in. */
                if (m == 1) {
                        for (int q = 0, k = 1 + (int)(rnd() % 3); q < k; q++)
                                buf[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
                } else if (m == 2 && len > 1) {
                        len = rnd() % len;
                } else if (m == 3 && len > 2 && 2 * len < sizeof(buf)) {
                        size_t a = rnd() % len, b = a + rnd() % (len - a);

                        memmove(buf + len, buf + a, b - a);
                        len += b - a;
                }
                frame_arena_init(&a1, rnd() % 8 == 0 ? 2000 + rnd() % 100000 : 1u << 26);
                frame_arena_init(&a2, a1.cap);
                x1 = frame_unpack(&a1, buf, len);
                frame_arena_reset(&a2);
                x2 = gemmd__v1__envelope__unpack(&a2.alloc, len, buf);
                /* Where protobuf-c took a 32-bit field's low bits, gemmd refuses. */
                if (x2 && frame_check_widths(&gemmd__v1__envelope__descriptor, buf, len, NULL, NULL)) {
                        cr_assert_null(x1, "case %d: a 32-bit field given more was decoded", it);
                        cr_assert_not_null(a1.wide_field, "case %d: no field named", it);
                        x2 = NULL;
                }
                cr_assert_eq(!!x1, !!x2, "case %d: decodes %d, protobuf-c %d", it, !!x1, !!x2);
                cr_assert_eq(a1.exhausted, a2.exhausted, "case %d: arena exhaustion differs", it);
                if (x1) {
                        size_t s1 = gemmd__v1__envelope__get_packed_size(x1);
                        size_t s2 = gemmd__v1__envelope__get_packed_size(x2);

                        cr_assert_eq(s1, s2, "case %d: decoded messages differ in size", it);
                        cr_assert_leq(s1, sizeof(p1));
                        gemmd__v1__envelope__pack(x1, p1);
                        gemmd__v1__envelope__pack(x2, p2);
                        cr_assert(!memcmp(p1, p2, s1), "case %d: decoded messages differ", it);
                        same++;
                }
                frame_arena_deinit(&a1);
                frame_arena_deinit(&a2);
        }
        /* Most unmutated cases decode: the comparison saw real messages. */
        cr_assert_gt(same, 10000, "only %d cases decoded", same);
}

/* ---- 32-bit fields given more than 32 bits --------------------------------- */

struct wr {
        uint8_t b[256];
        size_t n;
};

static void put_var(struct wr *w, uint64_t v)
{
        while (v >= 0x80) {
                w->b[w->n++] = (uint8_t)(v | 0x80);
                v >>= 7;
        }
        w->b[w->n++] = (uint8_t)v;
}

/* A varint field. */
static void put_vfield(struct wr *w, uint32_t field, uint64_t v)
{
        put_var(w, (uint64_t)field << 3);
        put_var(w, v);
}

/* A length-delimited field holding the bytes of `in`. */
static void put_msg(struct wr *w, uint32_t field, const struct wr *in)
{
        put_var(w, (uint64_t)field << 3 | 2);
        put_var(w, in->n);
        memcpy(w->b + w->n, in->b, in->n);
        w->n += in->n;
}

/* An Envelope (request 7) of a Submit of one f32 GEMM 4 x 4 x 4 with
 * trans_b = tb, then the Submit's `extra` varint field (0: none). */
static void submit_with(struct wr *env, uint64_t tb, uint32_t extra, uint64_t extra_v)
{
        struct wr op = {.n = 0}, sm = {.n = 0};

        put_vfield(&op, 4, tb);
        for (uint32_t f = 8; f <= 13; f++)
                put_vfield(&op, f, 4);
        put_msg(&sm, 1, &op);
        if (extra)
                put_vfield(&sm, extra, extra_v);
        env->n = 0;
        put_vfield(env, 1, 7);
        put_msg(env, 16, &sm);
}

/* An Envelope of an Error whose op_index (int32) is the varint v. */
static void error_with(struct wr *env, uint64_t v)
{
        struct wr e = {.n = 0};

        put_vfield(&e, 1, 4);
        put_vfield(&e, 3, v);
        env->n = 0;
        put_vfield(env, 1, 9);
        put_msg(env, 18, &e);
}

/* frame_unpack's verdict on env: 1 decoded, 0 refused for the field
 * `field` of `message`. Asserts protobuf-c itself decodes it either way. */
static int decodes(const struct wr *env, const char *message, const char *field)
{
        struct frame_arena a;
        Gemmd__V1__Envelope *x;
        int ok;

        frame_arena_init(&a, 1u << 20);
        x = gemmd__v1__envelope__unpack(&a.alloc, env->n, env->b);
        cr_assert_not_null(x, "protobuf-c refuses the message itself");
        x = frame_unpack(&a, env->b, env->n);
        ok = x != NULL;
        if (!ok) {
                cr_assert_not(a.exhausted);
                cr_assert_str_eq(a.wide_message ? a.wide_message : "(none)", message);
                cr_assert_str_eq(a.wide_field ? a.wide_field : "(none)", field);
        }
        frame_arena_deinit(&a);
        return ok;
}

Test(frame_codec, a_32_bit_field_given_more_is_refused)
{
        struct frame_arena a;
        Gemmd__V1__Envelope *x;
        struct wr env;

        /* protobuf-c alone reads trans_b = 2^32 + 1 as 1 (T): the hole. */
        submit_with(&env, (1ull << 32) + 1, 0, 0);
        frame_arena_init(&a, 1u << 20);
        x = gemmd__v1__envelope__unpack(&a.alloc, env.n, env.b);
        cr_assert(x && x->submit && x->submit->n_ops == 1);
        cr_assert_eq(x->submit->ops[0]->trans_b, 1);
        frame_arena_deinit(&a);
        cr_expect_not(decodes(&env, "Op", "trans_b"));

        submit_with(&env, 1, 0, 0);
        cr_expect(decodes(&env, NULL, NULL), "trans_b = 1");
        submit_with(&env, 1, 2, 1ull << 32);
        cr_expect_not(decodes(&env, "Submit", "priority"));
        submit_with(&env, 1, 2, UINT32_MAX);
        cr_expect(decodes(&env, NULL, NULL), "priority = 2^32 - 1 fits a uint32");
        submit_with(&env, 1, 3, 1ull << 32);
        cr_expect_not(decodes(&env, "Submit", "notify_launch"));
        submit_with(&env, 1, 4, UINT32_MAX);
        cr_expect(decodes(&env, NULL, NULL), "word = 2^32 - 1 fits a uint32");
        submit_with(&env, 1, 4, 1ull << 32);
        cr_expect_not(decodes(&env, "Submit", "word"));
        /* An enum is an int32: negative numbers come sign-extended to 64
         * bits, and nothing else above 2^31 - 1 is one. */
        submit_with(&env, (uint64_t)-1, 0, 0);
        cr_expect(decodes(&env, NULL, NULL), "trans_b = -1");
        submit_with(&env, UINT32_MAX, 0, 0);
        cr_expect_not(decodes(&env, "Op", "trans_b"));
        /* Fields past the schema and 64-bit fields are not 32-bit ones. */
        submit_with(&env, 0, 9, UINT64_MAX);
        cr_expect(decodes(&env, NULL, NULL), "an unknown field of 2^64 - 1");
}

Test(frame_codec, an_int32_takes_exactly_its_sign_extensions)
{
        static const struct {
                uint64_t v;
                int ok;
        } cases[] = {
                {0, 1},
                {INT32_MAX, 1},
                {(uint64_t)INT32_MAX + 1, 0},
                {UINT32_MAX, 0},
                {1ull << 32, 0},
                {(uint64_t)(int64_t)-1, 1},
                {(uint64_t)(int64_t)INT32_MIN, 1},
                {(uint64_t)(int64_t)INT32_MIN - 1, 0},
                {0xffffffff00000000ull, 0},
                {0x8000000000000000ull, 0},
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct wr env;

                error_with(&env, cases[i].v);
                cr_expect_eq(decodes(&env, "Error", "op_index"), cases[i].ok,
                             "op_index 0x%llx", (unsigned long long)cases[i].v);
        }
}

/* A tenth varint byte past bit 63, which protobuf-c drops, is more than
 * 32 bits for a 32-bit field (and is skipped for a 64-bit one). */
Test(frame_codec, a_varint_past_64_bits_is_refused_for_32_bit_fields)
{
        static const uint8_t minus_one_over[] = {0xff, 0xff, 0xff, 0xff, 0xff,
                                                 0xff, 0xff, 0xff, 0xff, 0x7f};
        struct wr e = {.n = 0}, env = {.n = 0};

        put_vfield(&e, 1, 4);
        put_var(&e, 3 << 3);
        memcpy(e.b + e.n, minus_one_over, sizeof(minus_one_over));
        e.n += sizeof(minus_one_over);
        put_msg(&env, 18, &e);
        cr_expect_not(decodes(&env, "Error", "op_index"));

        env.n = 0;
        put_var(&env, 1 << 3); /* request_id, a uint64 */
        memcpy(env.b + env.n, minus_one_over, sizeof(minus_one_over));
        env.n += sizeof(minus_one_over);
        cr_expect(decodes(&env, NULL, NULL), "a uint64 of 10 full bytes");
}
