/*
 * test_frame_codec.c - the hand-written fast paths of proto/frame.c (Submit
 * decoding, Completion encoding) against protobuf-c itself, on random and
 * mutated messages: the bytes written must be identical, and decoding must
 * agree on success, on arena exhaustion, and on every decoded field.
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
