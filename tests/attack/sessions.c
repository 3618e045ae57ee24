/*
 * sessions.c - a hostile local user against everyone else through its
 * connections: large frames whose decoding buffers an idle session would
 * keep.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/e2e_assert.h"
#include "tests/hard_util.h"

TestSuite(attack_sessions, .init = e2e_setup, .fini = e2e_teardown, .timeout = 150);

/* A small GEMM on c, checked. Returns 0 or -1. */
static int run_gemm(gemmd_client *c)
{
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 5, .n = 3, .k = 7,
                             .alpha = 1.0f, .beta = 0.5f};
        struct e2e_prob p;
        uint64_t seed = 5;
        char why[256];
        int rc;

        if (e2e_prob_inline(&p, &s, &seed))
                return -1;
        rc = e2e_run_checked(c, &p, 1, 1, NULL, why, sizeof(why));
        if (rc)
                fprintf(stderr, "sessions: %s\n", why);
        e2e_prob_free(&p);
        return rc;
}

/* The same on a new connection: the daemon serves a newcomer. */
static int served(const char *sock)
{
        gemmd_client *c = NULL;
        int rc = gemmd_connect(sock, &c);

        if (rc) {
                fprintf(stderr, "sessions: connect: %s\n", gemmd_strerror(rc));
                return -1;
        }
        rc = run_gemm(c);
        gemmd_disconnect(c);
        return rc;
}

/* ---- decode buffers -------------------------------------------------------- */

Test(attack_sessions, sessions_give_back_a_large_frames_buffers_once_it_is_done)
{
        enum { SESSIONS = 16, K = 2000000 }; /* A and B: 1 x K and K x 1 f32, 16 MB inline */
        struct hard_raw r[SESSIONS];
        struct e2e_daemon d;
        struct hard_res base, first, after;
        float *a = malloc((size_t)K * 4), *b = malloc((size_t)K * 4), c = 0;
        char b1[128], b2[128], b3[128];

        cr_assert(a && b);
        for (int i = 0; i < K; i++) {
                a[i] = 1.0f;
                b[i] = (i % 2) ? 0.5f : -0.25f;
        }
        START(&d, "--threads", "1", NULL);
        for (int i = 0; i < SESSIONS; i++) {
                cr_assert_eq(hard_raw_open(&r[i], d.sock), 0);
                cr_assert_eq(hard_raw_hello(&r[i]), 0);
        }
        cr_assert_eq(hard_res_settled(d.pid, &base, 5000), 0);
        /* One legitimate large request each, in a frame over 16 MB that the
         * daemon decodes by protobuf-c's general path, answered; then every
         * session sits idle. */
        for (int i = 0; i < SESSIONS; i++) {
                Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
                Gemmd__V1__Submit sub = GEMMD__V1__SUBMIT__INIT;
                Gemmd__V1__Op op = GEMMD__V1__OP__INIT, *ops[1] = {&op};
                Gemmd__V1__Operand oa = GEMMD__V1__OPERAND__INIT, ob = GEMMD__V1__OPERAND__INIT,
                                   oc = GEMMD__V1__OPERAND__INIT;

                oa.data = (ProtobufCBinaryData){(size_t)K * 4, (uint8_t *)a};
                ob.data = (ProtobufCBinaryData){(size_t)K * 4, (uint8_t *)b};
                oc.data = (ProtobufCBinaryData){4, (uint8_t *)&c};
                op.kind = GEMMD__V1__OP_KIND__GEMM;
                op.dtype = GEMMD__V1__DTYPE__F32;
                op.m = op.n = 1;
                op.k = K;
                op.lda = op.ldc = 1;
                op.ldb = K;
                op.alpha = 1.0f;
                op.a = &oa;
                op.b = &ob;
                op.c = &oc;
                sub.n_ops = 1;
                sub.ops = ops;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_SUBMIT;
                env.submit = &sub;
                cr_assert_eq(hard_raw_send(&r[i], 10, &env, NULL, 0, 0), 0);
                rep = hard_raw_recv(&r[i], 60000);
                cr_assert_not_null(rep, "session %d: no answer to its large request", i);
                cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_COMPLETION, "session %d: %s",
                             i,
                             rep->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR ? rep->error->message
                                                                              : "not a completion");
                cr_assert_eq(rep->completion->n_results, 1);
                cr_expect_eq(rep->completion->results[0]->status, GEMMD__V1__CODE__OK);
                /* What the first one leaves is the daemon's for good (a
                 * device process's launch slots grow to the largest
                 * group); what each one after it leaves is its session's. */
                if (i == 0) {
                        usleep(300000);
                        cr_assert_eq(hard_res_read(d.pid, &first), 0);
                }
        }
        usleep(300000);
        cr_assert_eq(hard_res_read(d.pid, &after), 0);
        fprintf(stderr, "%d idle sessions after a 16 MB frame each: daemon before %s, after the "
                        "first %s, after all %s\n",
                SESSIONS, hard_res_str(&base, b1, sizeof(b1)), hard_res_str(&first, b2, sizeof(b2)),
                hard_res_str(&after, b3, sizeof(b3)));
        /* A session's small read buffer and arena, not the frame's size. */
        cr_expect_leq(after.rss_kb, first.rss_kb + 8192,
                      "%d idle sessions hold %ld kB more after one large frame each", SESSIONS - 1,
                      after.rss_kb - first.rss_kb);
        cr_expect_leq(after.rss_kb, base.rss_kb + 32768, "VmRSS %ld kB -> %ld kB", base.rss_kb,
                      after.rss_kb);
        /* They are still served. */
        for (int i = 0; i < SESSIONS; i++)
                hard_raw_close(&r[i]);
        cr_expect_eq(served(d.sock), 0);
        STOP(&d);
        free(a);
        free(b);
}
