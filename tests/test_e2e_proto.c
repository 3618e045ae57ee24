/*
 * test_e2e_proto.c - the wire protocol spoken by hand over a raw Unix
 * socket (proto/frame.h and the generated protobuf-c code): malformed and
 * oversized frames, a wrong first message or version, frames trickled byte
 * by byte. Meanwhile a bystander client process keeps running ops through
 * the library and checking them; it must never notice.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "gemmd.h"
#include "proto/frame.h"
#include "tests/e2e_util.h"
#include "tests/e2e_assert.h"
#include "tests/hard_util.h"

TestSuite(e2e, .init = e2e_setup, .fini = e2e_teardown, .timeout = 120);

#define RECV_TIMEOUT_MS 10000

/* ---- a connection spoken by hand ---------------------------------------- */

struct raw {
        int fd;
        struct frame_arena arena;
        uint8_t *body;
};

static void raw_open(struct raw *r, const struct e2e_daemon *d)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct timeval tv = {RECV_TIMEOUT_MS / 1000, 0};

        memset(r, 0, sizeof(*r));
        cr_assert_lt(strlen(d->sock), sizeof(sa.sun_path));
        memcpy(sa.sun_path, d->sock, strlen(d->sock) + 1);
        r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert_geq(r->fd, 0);
        cr_assert_eq(connect(r->fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect: %s",
                     strerror(errno));
        setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        frame_arena_init(&r->arena, 16u << 20);
}

static void raw_close(struct raw *r)
{
        close(r->fd);
        frame_arena_deinit(&r->arena);
        free(r->body);
        r->body = NULL;
}

static void put_le32(uint8_t *p, uint32_t v)
{
        p[0] = v & 0xff;
        p[1] = (v >> 8) & 0xff;
        p[2] = (v >> 16) & 0xff;
        p[3] = v >> 24;
}

static void raw_write(struct raw *r, const void *buf, size_t n)
{
        const uint8_t *p = buf;

        while (n) {
                ssize_t w = send(r->fd, p, n, MSG_NOSIGNAL);

                cr_assert_gt(w, 0, "send: %s", strerror(errno));
                p += w;
                n -= (size_t)w;
        }
}

/* Sends env as one frame, all at once or one byte per write with a pause
 * between writes. */
static void raw_send(struct raw *r, uint64_t request_id, Gemmd__V1__Envelope *env, int trickle_us)
{
        uint8_t *buf;
        size_t n;

        env->request_id = request_id;
        cr_assert_eq(frame_pack(env, 0, UINT32_MAX, &buf, &n), 0);
        if (!trickle_us) {
                raw_write(r, buf, n);
        } else {
                for (size_t i = 0; i < n; i++) {
                        raw_write(r, buf + i, 1);
                        usleep((useconds_t)trickle_us);
                }
        }
        free(buf);
}

/* Reads exactly n bytes. Returns 1, 0 at a clean end of stream before the
 * first byte, -1 on error or timeout. */
static int read_full(int fd, void *buf, size_t n)
{
        uint8_t *p = buf;
        size_t got = 0;

        while (got < n) {
                ssize_t k = recv(fd, p + got, n - got, 0);

                if (k == 0)
                        return got ? -1 : 0;
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -1;
                }
                got += (size_t)k;
        }
        return 1;
}

/* Receives one frame; fails the test on end of stream or timeout. The
 * envelope lives until the next raw_recv. */
static Gemmd__V1__Envelope *raw_recv(struct raw *r)
{
        uint8_t hdr[FRAME_HDR_BYTES];
        uint32_t len;
        Gemmd__V1__Envelope *env;
        int rc = read_full(r->fd, hdr, sizeof(hdr));

        cr_assert_eq(rc, 1, "no frame from gemmd (%s)", rc ? "timeout or error" : "end of stream");
        cr_assert_eq(frame_len_decode(hdr, 64u << 20, &len), 0);
        free(r->body);
        r->body = malloc(len ? len : 1);
        cr_assert_not_null(r->body);
        cr_assert_eq(read_full(r->fd, r->body, len), len ? 1 : 0);
        env = frame_unpack(&r->arena, r->body, len);
        cr_assert_not_null(env, "gemmd sent a frame that does not decode");
        return env;
}

/* Asserts that the next frame is an Error with `code`. */
static void expect_error(struct raw *r, Gemmd__V1__Code code, const char *what)
{
        Gemmd__V1__Envelope *env = raw_recv(r);

        cr_assert_eq(env->body_case, GEMMD__V1__ENVELOPE__BODY_ERROR,
                     "%s: expected an Error, got body %d", what, (int)env->body_case);
        cr_assert_eq(env->error->code, code, "%s: error code %d (%s), expected %d", what,
                     (int)env->error->code, env->error->message ? env->error->message : "",
                     (int)code);
        cr_assert(env->error->message && *env->error->message, "%s: error without a text", what);
}

/* Asserts that the daemon closes the connection (after what it sent). */
static void expect_eof(struct raw *r, const char *what)
{
        uint8_t b;
        ssize_t k;

        do
                k = recv(r->fd, &b, 1, 0);
        while (k < 0 && errno == EINTR);
        cr_assert_eq(k, 0, "%s: expected end of stream, got %zd", what, k);
}

/* Asserts an Error with `code`, then the end of the connection, and
 * closes it. */
static void expect_refused(struct raw *r, Gemmd__V1__Code code, const char *what)
{
        expect_error(r, code, what);
        expect_eof(r, what);
        raw_close(r);
}

static Gemmd__V1__HelloReply *raw_hello(struct raw *r, uint32_t version, int trickle_us)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Hello h = GEMMD__V1__HELLO__INIT;
        Gemmd__V1__Envelope *rep;

        h.protocol_version = version;
        h.client_name = "e2e-raw";
        env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO;
        env.hello = &h;
        raw_send(r, 1, &env, trickle_us);
        if (version != GEMMD_PROTOCOL_VERSION)
                return NULL;
        rep = raw_recv(r);
        cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_HELLO_REPLY, "body %d",
                     (int)rep->body_case);
        cr_assert_eq(rep->request_id, 1);
        cr_assert_eq(rep->hello_reply->protocol_version, GEMMD_PROTOCOL_VERSION);
        cr_assert_not_null(rep->hello_reply->limits);
        return rep->hello_reply;
}

/* Sends a StatsRequest and asserts the reply. */
static void raw_stats(struct raw *r, uint64_t id, int trickle_us)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__StatsRequest q = GEMMD__V1__STATS_REQUEST__INIT;
        Gemmd__V1__Envelope *rep;

        env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST;
        env.stats_request = &q;
        raw_send(r, id, &env, trickle_us);
        rep = raw_recv(r);
        cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_STATS_REPLY, "body %d",
                     (int)rep->body_case);
        cr_assert_eq(rep->request_id, id);
        cr_assert(rep->stats_reply->text && strstr(rep->stats_reply->text, "gemmd"));
}

/* ---- the bystander ---------------------------------------------------- */

struct bystander {
        pid_t pid;
        int fd; /* closing it tells the child to finish */
};

/* Runs random small ops with checks until the parent closes its end of
 * fd. Returns 0 after at least one op and no failure. */
static int bystander_main(void *ctx, int fd)
{
        const struct e2e_daemon *d = ctx;
        gemmd_client *c = e2e_connect(d);
        struct e2e_arena ar;
        uint64_t seed = (uint64_t)getpid();
        long ops = 0;
        char why[256];

        if (!c || e2e_arena_init(&ar, c, 1u << 20))
                return 2;
        for (;;) {
                struct pollfd pf = {fd, POLLIN, 0};
                struct e2e_prob p;
                struct e2e_spec s;

                if (ops > 0 && poll(&pf, 1, 0) == 1)
                        break;
                ar.used = 0;
                e2e_spec_random(&s, &seed, 24);
                if (e2e_prob_place(&p, &s, &ar, &seed))
                        return 3;
                if (e2e_run_checked(c, &p, 1, 1, NULL, why, sizeof(why))) {
                        fprintf(stderr, "bystander: op %ld: %s\n", ops, why);
                        return 1;
                }
                e2e_prob_free(&p);
                ops++;
        }
        gemmd_disconnect(c);
        return 0;
}

/* Starts a bystander client of gemmd d. */
static void bystander_start(struct bystander *b, struct e2e_daemon *d)
{
        b->pid = e2e_fork(bystander_main, d, &b->fd);
        cr_assert_gt(b->pid, 0);
}

/* Stops the bystander, which must have seen nothing wrong, then gemmd. */
static void stop_with_bystander(struct e2e_daemon *d, struct bystander *b)
{
        close(b->fd);
        cr_assert_eq(e2e_wait_child(b->pid, 30000), 0, "the bystander client failed");
        STOP(d);
}

/* ---- tests ------------------------------------------------------------ */

Test(e2e, malformed_frame_after_hello_gets_protocol_error_and_session_goes_on)
{
        static const uint8_t junk[] = {7, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
        struct e2e_daemon d;
        struct bystander by;
        struct raw r;

        START(&d, "--threads", "2", NULL);
        bystander_start(&by, &d);
        raw_open(&r, &d);
        raw_hello(&r, GEMMD_PROTOCOL_VERSION, 0);
        raw_write(&r, junk, sizeof(junk));
        expect_error(&r, GEMMD__V1__CODE__PROTOCOL, "malformed frame");
        raw_stats(&r, 42, 0);
        /* An empty frame (an Envelope with no body) is not a request either. */
        raw_write(&r, "\0\0\0\0", 4);
        expect_error(&r, GEMMD__V1__CODE__PROTOCOL, "empty envelope");
        raw_stats(&r, 43, 0);
        raw_close(&r);
        stop_with_bystander(&d, &by);
}

Test(e2e, oversized_length_prefix_gets_too_big_then_end_of_stream)
{
        struct e2e_daemon d;
        struct bystander by;
        struct raw r;
        uint8_t hdr[4];
        uint32_t max;

        START(&d, "--threads", "2", "--max-inline-bytes", "4096", "--max-frame-bytes",
              "1100000", NULL);
        bystander_start(&by, &d);
        raw_open(&r, &d);
        max = raw_hello(&r, GEMMD_PROTOCOL_VERSION, 0)->limits->max_frame_bytes;
        cr_assert_eq(max, 1100000);
        put_le32(hdr, max + 1);
        raw_write(&r, hdr, 4);
        expect_refused(&r, GEMMD__V1__CODE__TOO_BIG, "limit + 1");

        /* The same before the handshake, with the largest length there is. */
        raw_open(&r, &d);
        raw_write(&r, "\xff\xff\xff\xff", 4);
        expect_refused(&r, GEMMD__V1__CODE__TOO_BIG, "0xffffffff");

        /* A frame exactly at the limit is read (and refused only for what
         * it holds, not for its size). */
        raw_open(&r, &d);
        raw_hello(&r, GEMMD_PROTOCOL_VERSION, 0);
        {
                size_t n = 4 + max;
                uint8_t *big = calloc(1, n);
                uint32_t len = max;

                cr_assert_not_null(big);
                put_le32(big, len);
                /* Field 5 (unknown to the Envelope), length-delimited, to the end. */
                big[4] = (5 << 3) | 2;
                {
                        uint32_t rest = len - 1 - 3;

                        big[5] = 0x80 | (rest & 0x7f);
                        big[6] = 0x80 | ((rest >> 7) & 0x7f);
                        big[7] = (rest >> 14) & 0x7f;
                }
                raw_write(&r, big, n);
                free(big);
                expect_error(&r, GEMMD__V1__CODE__PROTOCOL, "a frame at the limit with no body");
                raw_stats(&r, 9, 0);
        }
        raw_close(&r);
        stop_with_bystander(&d, &by);
}

Test(e2e, first_message_must_be_hello)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__StatsRequest q = GEMMD__V1__STATS_REQUEST__INIT;
        struct e2e_daemon d;
        struct bystander by;
        struct raw r;

        START(&d, "--threads", "2", NULL);
        bystander_start(&by, &d);
        raw_open(&r, &d);
        env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST;
        env.stats_request = &q;
        raw_send(&r, 5, &env, 0);
        expect_refused(&r, GEMMD__V1__CODE__PROTOCOL, "stats before hello");

        /* Garbage as the very first frame: the same. */
        raw_open(&r, &d);
        raw_write(&r, "\3\0\0\0\xff\xff\xff", 7);
        expect_refused(&r, GEMMD__V1__CODE__PROTOCOL, "garbage before hello");

        /* A second Hello on a live session is an error, not the end. */
        raw_open(&r, &d);
        raw_hello(&r, GEMMD_PROTOCOL_VERSION, 0);
        {
                Gemmd__V1__Envelope e2 = GEMMD__V1__ENVELOPE__INIT;
                Gemmd__V1__Hello h = GEMMD__V1__HELLO__INIT;

                h.protocol_version = GEMMD_PROTOCOL_VERSION;
                e2.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO;
                e2.hello = &h;
                raw_send(&r, 2, &e2, 0);
                expect_error(&r, GEMMD__V1__CODE__PROTOCOL, "second hello");
                raw_stats(&r, 3, 0);
        }
        raw_close(&r);
        stop_with_bystander(&d, &by);
}

Test(e2e, wrong_protocol_version_is_refused)
{
        struct e2e_daemon d;
        struct bystander by;
        struct raw r;
        static const uint32_t versions[] = {0, 2, 0xffffffffu};

        START(&d, "--threads", "2", NULL);
        bystander_start(&by, &d);
        for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
                raw_open(&r, &d);
                raw_hello(&r, versions[i], 0);
                expect_refused(&r, GEMMD__V1__CODE__VERSION, "wrong version");
        }
        stop_with_bystander(&d, &by);
}

/* A 3 x 4 by 4 x 2 column-major f32 GEMM with inline operands. */
static void raw_inline_gemm(struct raw *r, uint64_t id, int trickle_us)
{
        float a[12], b[8], c[6];
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
        Gemmd__V1__Submit sub = GEMMD__V1__SUBMIT__INIT;
        Gemmd__V1__Op op = GEMMD__V1__OP__INIT, *ops[1] = {&op};
        Gemmd__V1__Operand oa = GEMMD__V1__OPERAND__INIT, ob = GEMMD__V1__OPERAND__INIT;
        Gemmd__V1__Operand oc = GEMMD__V1__OPERAND__INIT;
        Gemmd__V1__OpResult *res;
        uint64_t seed = id;
        const float *got;

        for (int i = 0; i < 12; i++)
                a[i] = (float)e2e_rand_val(&seed);
        for (int i = 0; i < 8; i++)
                b[i] = (float)e2e_rand_val(&seed);
        for (int i = 0; i < 6; i++)
                c[i] = (float)e2e_rand_val(&seed);
        oa.data = (ProtobufCBinaryData){sizeof(a), (uint8_t *)a};
        ob.data = (ProtobufCBinaryData){sizeof(b), (uint8_t *)b};
        oc.data = (ProtobufCBinaryData){sizeof(c), (uint8_t *)c};
        op.kind = GEMMD__V1__OP_KIND__GEMM;
        op.dtype = GEMMD__V1__DTYPE__F32;
        op.m = 3;
        op.n = 2;
        op.k = 4;
        op.lda = 3;
        op.ldb = 4;
        op.ldc = 3;
        op.alpha = 1.5f;
        op.beta = -0.5f;
        op.a = &oa;
        op.b = &ob;
        op.c = &oc;
        sub.n_ops = 1;
        sub.ops = ops;
        sub.priority = 1;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_SUBMIT;
        env.submit = &sub;
        raw_send(r, id, &env, trickle_us);
        rep = raw_recv(r);
        cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_COMPLETION, "body %d",
                     (int)rep->body_case);
        cr_assert_eq(rep->request_id, id);
        cr_assert_eq(rep->completion->n_results, 1);
        res = rep->completion->results[0];
        cr_assert_eq(res->status, GEMMD__V1__CODE__OK);
        cr_assert_eq(res->c_data.len, sizeof(c));
        got = (const float *)res->c_data.data;
        for (int i = 0; i < 3; i++)
                for (int j = 0; j < 2; j++) {
                        double ref = -0.5 * c[i + 3 * j];

                        for (int q = 0; q < 4; q++)
                                ref += 1.5 * (double)a[i + 3 * q] * b[q + 4 * j];
                        cr_assert_leq(fabs(got[i + 3 * j] - ref), 1e-5 * (1 + fabs(ref)),
                                      "C(%d,%d) = %g, expected %g", i, j, got[i + 3 * j], ref);
                }
}

Test(e2e, frames_trickled_byte_by_byte_are_handled)
{
        struct e2e_daemon d;
        struct bystander by;
        struct raw r;

        START(&d, "--threads", "2", NULL);
        bystander_start(&by, &d);
        raw_open(&r, &d);
        raw_hello(&r, GEMMD_PROTOCOL_VERSION, 300);
        raw_stats(&r, 2, 300);
        raw_inline_gemm(&r, 3, 200);
        /* And the other way: two requests in one write. */
        {
                Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
                Gemmd__V1__StatsRequest q = GEMMD__V1__STATS_REQUEST__INIT;
                uint8_t *b1, *b2, *both;
                size_t n1, n2;

                env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST;
                env.stats_request = &q;
                env.request_id = 10;
                cr_assert_eq(frame_pack(&env, 0, UINT32_MAX, &b1, &n1), 0);
                env.request_id = 11;
                cr_assert_eq(frame_pack(&env, 0, UINT32_MAX, &b2, &n2), 0);
                both = malloc(n1 + n2);
                cr_assert_not_null(both);
                memcpy(both, b1, n1);
                memcpy(both + n1, b2, n2);
                raw_write(&r, both, n1 + n2);
                rep = raw_recv(&r);
                cr_assert_eq(rep->request_id, 10);
                rep = raw_recv(&r);
                cr_assert_eq(rep->request_id, 11);
                free(b1);
                free(b2);
                free(both);
        }
        raw_inline_gemm(&r, 12, 0);
        raw_close(&r);
        stop_with_bystander(&d, &by);
}

Test(e2e, client_hanging_up_mid_frame_costs_nothing)
{
        struct e2e_daemon d;
        struct bystander by;
        struct raw r;
        static const uint8_t partial[] = {100, 0, 0, 0, 0x08, 0x01};

        START(&d, "--threads", "2", NULL);
        bystander_start(&by, &d);
        for (int i = 0; i < 20; i++) {
                raw_open(&r, &d);
                if (i % 2)
                        raw_hello(&r, GEMMD_PROTOCOL_VERSION, 0);
                raw_write(&r, partial, sizeof(partial));
                raw_close(&r);
        }
        raw_open(&r, &d);
        raw_hello(&r, GEMMD_PROTOCOL_VERSION, 0);
        raw_inline_gemm(&r, 2, 0);
        raw_close(&r);
        stop_with_bystander(&d, &by);
}

/* Packs a 2 x 2 x 2 f32 GEMM with inline operands as one frame. */
static void pack_inline_gemm(uint64_t id, uint8_t **buf, size_t *n)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        struct hard_gemm2 g;

        hard_gemm2_submit(&g, &env);
        env.request_id = id;
        cr_assert_eq(frame_pack(&env, 0, UINT32_MAX, buf, n), 0);
}

/* Submits admitted from one read are handed to the worker together at the
 * end of the read: a frame later in that read that ends the session must
 * not strand them. The client gets the refusal (after any completion that
 * was ready first, each at most once) and the end of the stream; the ops
 * run or are dropped, and none stays counted as unfinished. */
Test(e2e, submits_read_with_a_fatal_frame_are_not_stranded)
{
        enum { NSUB = 6 };
        struct e2e_daemon d;
        struct raw r;
        uint8_t *all = NULL;
        size_t len = 0;
        uint32_t max;
        int done[NSUB] = {0}, refused = 0;

        START(&d, "--threads", "2", NULL);
        raw_open(&r, &d);
        max = raw_hello(&r, GEMMD_PROTOCOL_VERSION, 0)->limits->max_frame_bytes;
        for (int i = 0; i < NSUB; i++) {
                uint8_t *f;
                size_t n;

                pack_inline_gemm(100 + (uint64_t)i, &f, &n);
                all = realloc(all, len + n + 4);
                cr_assert_not_null(all);
                memcpy(all + len, f, n);
                len += n;
                free(f);
        }
        put_le32(all + len, max + 1); /* a length past the limit: fatal */
        len += 4;
        raw_write(&r, all, len);
        free(all);
        while (!refused) {
                Gemmd__V1__Envelope *env = raw_recv(&r);

                if (env->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR) {
                        cr_assert_eq(env->error->code, GEMMD__V1__CODE__TOO_BIG, "error %d",
                                     (int)env->error->code);
                        refused = 1;
                        continue;
                }
                cr_assert_eq(env->body_case, GEMMD__V1__ENVELOPE__BODY_COMPLETION, "body %d",
                             (int)env->body_case);
                cr_assert(env->request_id >= 100 && env->request_id < 100 + NSUB, "id %llu",
                          (unsigned long long)env->request_id);
                cr_assert_eq(env->completion->results[0]->status, GEMMD__V1__CODE__OK);
                cr_assert_eq(++done[env->request_id - 100], 1, "request %llu answered twice",
                             (unsigned long long)env->request_id);
        }
        expect_eof(&r, "after the refusal");
        raw_close(&r);

        /* The daemon counts none of them as unfinished. */
        {
                gemmd_client *c = e2e_connect(&d);
                char *text = NULL;
                int zero = 0;

                for (int i = 0; i < 200 && !zero; i++) {
                        cr_assert_eq(gemmd_stats(c, 0, &text), 0);
                        zero = strstr(text, ", 0 ops unfinished") != NULL;
                        free(text);
                        if (!zero)
                                usleep(10000);
                }
                cr_assert(zero, "ops left unfinished after the session ended");
                gemmd_disconnect(c);
        }
        STOP(&d);
}
