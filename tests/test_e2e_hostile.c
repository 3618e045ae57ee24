/*
 * test_e2e_hostile.c - hostile requests through the real daemon, one table
 * row per attack: sizes that are huge or overflow, leading dimensions
 * smaller than the rows, offsets past the end, another session's buffers,
 * descriptors that are missing, extra or not memory at all, empty,
 * garbage and oversized frames, frames trickled byte by byte or cut off,
 * and more connections than allowed. Each gets its clear error (or the
 * connection is closed where the protocol says so), and afterwards the
 * daemon still serves a well-behaved client and exits 0 on SIGTERM.
 *
 * Then floods: thousands of bad frames on several connections, and a
 * client that never reads its replies; the daemon's descriptors come back
 * to their baseline and its memory stays bounded.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/hard_util.h"
#include "tests/e2e_assert.h"

TestSuite(hostile, .init = e2e_setup, .fini = e2e_teardown, .timeout = 120);

#define BUF_BYTES (1u << 20)
#define TIMEOUT_MS 10000

/* What a case works with: the daemon and a session (Hello done) with one
 * registered shared buffer of BUF_BYTES. */
struct hctx {
        struct e2e_daemon *d;
        struct hard_raw r;
        uint64_t buf;
};

/* ---- building requests ---------------------------------------------------- */

/* A valid 64 x 64 x 64 f32 GEMM with A, B, C one after another in the
 * session's buffer; cases break one field of it. */
struct opbox {
        Gemmd__V1__Op op;
        Gemmd__V1__Operand a, b, c;
};

static void op_init(struct opbox *o, uint64_t buf)
{
        gemmd__v1__op__init(&o->op);
        gemmd__v1__operand__init(&o->a);
        gemmd__v1__operand__init(&o->b);
        gemmd__v1__operand__init(&o->c);
        o->op.kind = GEMMD__V1__OP_KIND__GEMM;
        o->op.dtype = GEMMD__V1__DTYPE__F32;
        o->op.m = o->op.n = o->op.k = 64;
        o->op.lda = o->op.ldb = o->op.ldc = 64;
        o->op.alpha = 1.0f;
        o->a.buffer_id = o->b.buffer_id = o->c.buffer_id = buf;
        o->a.offset = 0;
        o->b.offset = 64 * 64 * 4;
        o->c.offset = 2 * 64 * 64 * 4;
        o->op.a = &o->a;
        o->op.b = &o->b;
        o->op.c = &o->c;
}

static int send_ops(struct hctx *x, uint64_t rid, Gemmd__V1__Op **ops, size_t n, uint32_t prio,
                    int trickle_us)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Submit sub = GEMMD__V1__SUBMIT__INIT;

        sub.n_ops = n;
        sub.ops = ops;
        sub.priority = prio;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_SUBMIT;
        env.submit = &sub;
        return hard_raw_send(&x->r, rid, &env, NULL, 0, trickle_us);
}

static int send_op(struct hctx *x, uint64_t rid, struct opbox *o)
{
        Gemmd__V1__Op *p = &o->op;

        return send_ops(x, rid, &p, 1, 1, 0);
}

/* Receives frames until one answers rid (or, with rid 0, an Error with
 * request_id 0) and asserts it is an Error with `code`. */
static void expect_error(struct hard_raw *r, uint64_t rid, Gemmd__V1__Code code)
{
        for (int i = 0; i < 64; i++) {
                Gemmd__V1__Envelope *e = hard_raw_recv(r, TIMEOUT_MS);

                cr_assert_not_null(e, "no answer to request %llu (%s)", (unsigned long long)rid,
                                   r->eof ? "end of stream" : "timeout or garbage");
                if (e->request_id != rid)
                        continue;
                if (rid == 0 && e->body_case != GEMMD__V1__ENVELOPE__BODY_ERROR)
                        continue;
                cr_assert_eq(e->body_case, GEMMD__V1__ENVELOPE__BODY_ERROR,
                             "request %llu: body %d, not an Error", (unsigned long long)rid,
                             (int)e->body_case);
                cr_expect_eq(e->error->code, code, "request %llu: code %d (%s), expected %d",
                             (unsigned long long)rid, (int)e->error->code, e->error->message,
                             (int)code);
                cr_expect(e->error->message && *e->error->message, "an Error without words");
                return;
        }
        cr_assert_fail("no Error for request %llu", (unsigned long long)rid);
}

/* Asserts the next frame answering rid is body `body`. */
static void expect_body(struct hard_raw *r, uint64_t rid, Gemmd__V1__Envelope__BodyCase body)
{
        for (int i = 0; i < 64; i++) {
                Gemmd__V1__Envelope *e = hard_raw_recv(r, TIMEOUT_MS);

                cr_assert_not_null(e, "no answer to request %llu", (unsigned long long)rid);
                if (e->request_id != rid)
                        continue;
                cr_assert_eq(e->body_case, body, "request %llu: body %d (%s)",
                             (unsigned long long)rid, (int)e->body_case,
                             e->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR ? e->error->message : "");
                return;
        }
        cr_assert_fail("no answer to request %llu", (unsigned long long)rid);
}

/* The session still works: a valid op completes. */
static void expect_session_alive(struct hctx *x, uint64_t rid)
{
        struct opbox o;

        op_init(&o, x->buf);
        cr_assert_eq(send_op(x, rid, &o), 0);
        expect_body(&x->r, rid, GEMMD__V1__ENVELOPE__BODY_COMPLETION);
}

static void expect_closed(struct hctx *x)
{
        cr_expect(hard_raw_wait_eof(&x->r, TIMEOUT_MS), "the daemon kept the connection open");
}

static void send_stats(struct hctx *x, uint64_t rid, const int *fds, int nfds)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__StatsRequest st = GEMMD__V1__STATS_REQUEST__INIT;

        env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST;
        env.stats_request = &st;
        cr_assert_eq(hard_raw_send(&x->r, rid, &env, fds, nfds, 0), 0);
}

/* ---- the cases -------------------------------------------------------------- */

#define OP_CASE(fn, field_stmt, code)                          \
        static void fn(struct hctx *x)                         \
        {                                                      \
                struct opbox o;                                \
                op_init(&o, x->buf);                           \
                field_stmt;                                    \
                cr_assert_eq(send_op(x, 10, &o), 0);           \
                expect_error(&x->r, 10, GEMMD__V1__CODE__##code); \
                expect_session_alive(x, 11);                   \
        }

OP_CASE(c_huge_m, o.op.m = 1ll << 40, OVERFLOW)
OP_CASE(c_huge_k, o.op.k = 1ll << 34, OVERFLOW)
OP_CASE(c_span_overflows, (o.op.m = 1000, o.op.lda = 1ll << 62), OVERFLOW)
OP_CASE(c_ld_smaller_than_rows, o.op.lda = 32, INVALID)
OP_CASE(c_ldc_zero, o.op.ldc = 0, INVALID)
OP_CASE(c_negative_size, o.op.n = -5, INVALID)
OP_CASE(c_zero_size, o.op.k = 0, INVALID)
OP_CASE(c_offset_past_end, o.b.offset = BUF_BYTES, BOUNDS)
OP_CASE(c_operand_runs_past_end, o.c.offset = BUF_BYTES - 64 * 4, BOUNDS)
OP_CASE(c_offset_plus_span_overflows, o.a.offset = UINT64_MAX - 3, OVERFLOW)
OP_CASE(c_misaligned_offset, o.a.offset = 2, INVALID)
OP_CASE(c_unknown_buffer, o.b.buffer_id = 0xdeadbeef, NO_BUFFER)
OP_CASE(c_c_overlaps_a, o.c.offset = 64, INVALID)
OP_CASE(c_unknown_dtype, o.op.dtype = 9, INVALID)
OP_CASE(c_unknown_kind, o.op.kind = 7, INVALID)
OP_CASE(c_bad_trans, o.op.trans_a = 3, INVALID)
OP_CASE(c_syr2k_ldc_small, (o.op.kind = GEMMD__V1__OP_KIND__SYR2K, o.op.ldc = 10), INVALID)
OP_CASE(c_inline_too_short,
        (o.a.buffer_id = 0, o.a.data.data = (uint8_t *)"01234567", o.a.data.len = 8), BOUNDS)
OP_CASE(c_no_operand, o.op.b = NULL, INVALID)
/* An output C sent inline without data costs nothing on the wire: 16 GiB
 * of it must be refused before anything is allocated. */
OP_CASE(c_inline_c_of_16_gib,
        (o.op.m = o.op.n = 65536, o.op.k = 1, o.op.lda = 65536, o.op.ldb = 1, o.op.ldc = 65536,
         o.b.offset = 65536 * 4, o.c.buffer_id = 0), LIMIT)

/* A buffer id that is valid in another session names nothing here. */
static void c_another_sessions_buffer(struct hctx *x)
{
        struct hctx y = {.d = x->d};
        struct opbox o;
        int64_t small;

        cr_assert_eq(hard_raw_open(&y.r, x->d->sock), 0);
        cr_assert_eq(hard_raw_hello(&y.r), 0);
        op_init(&o, x->buf); /* the id x registered; y has none */
        cr_assert_eq(send_op(&y, 20, &o), 0);
        expect_error(&y.r, 20, GEMMD__V1__CODE__NO_BUFFER);
        /* With a buffer of its own under that id, the bounds are its own. */
        small = hard_raw_register(&y.r, 21, 4096, 4096);
        cr_assert_eq(small, (int64_t)x->buf, "ids are per session");
        cr_assert_eq(send_op(&y, 22, &o), 0);
        expect_error(&y.r, 22, GEMMD__V1__CODE__BOUNDS);
        hard_raw_close(&y.r);
        expect_session_alive(x, 23);
}

static void c_register_with_two_fds(struct hctx *x)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;
        int fds[2] = {hard_memfd(4096), hard_memfd(4096)};

        reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__SHM;
        reg.bytes = 4096;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
        env.buffer_register = &reg;
        cr_assert_eq(hard_raw_send(&x->r, 30, &env, fds, 2, 0), 0);
        close(fds[0]);
        close(fds[1]);
        /* The registration takes one; the other is refused and closed. */
        expect_body(&x->r, 30, GEMMD__V1__ENVELOPE__BODY_BUFFER_REPLY);
        expect_error(&x->r, 0, GEMMD__V1__CODE__PROTOCOL);
        expect_session_alive(x, 31);
}

static void c_fds_without_register(struct hctx *x)
{
        int fds[3] = {hard_memfd(4096), hard_memfd(4096), hard_memfd(4096)};

        send_stats(x, 40, fds, 3);
        for (int i = 0; i < 3; i++)
                close(fds[i]);
        expect_body(&x->r, 40, GEMMD__V1__ENVELOPE__BODY_STATS_REPLY);
        expect_error(&x->r, 0, GEMMD__V1__CODE__PROTOCOL);
        /* No stray descriptor is left to be taken by a later registration. */
        {
                Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
                Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;

                reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__SHM;
                reg.bytes = 4096;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
                env.buffer_register = &reg;
                cr_assert_eq(hard_raw_send(&x->r, 41, &env, NULL, 0, 0), 0);
                expect_error(&x->r, 41, GEMMD__V1__CODE__PROTOCOL);
        }
        expect_session_alive(x, 42);
}

static void c_register_without_fd(struct hctx *x)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;

        reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__SHM;
        reg.bytes = 4096;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
        env.buffer_register = &reg;
        cr_assert_eq(hard_raw_send(&x->r, 50, &env, NULL, 0, 0), 0);
        expect_error(&x->r, 50, GEMMD__V1__CODE__PROTOCOL);
        expect_session_alive(x, 51);
}

static void c_register_more_than_the_file(struct hctx *x)
{
        cr_expect_eq(hard_raw_register(&x->r, 60, 1u << 20, 4096), -GEMMD__V1__CODE__BOUNDS);
        cr_expect_eq(hard_raw_register(&x->r, 61, 0, 4096), -GEMMD__V1__CODE__INVALID);
        cr_expect_eq(hard_raw_register(&x->r, 62, 1ull << 62, 4096), -GEMMD__V1__CODE__LIMIT);
        expect_session_alive(x, 63);
}

/* Memory that could be cut short under the daemon's mapping (a memfd not
 * sealed against shrinking) would let its owner crash the daemon with
 * SIGBUS: it is refused, with words. A sealed one cannot be shrunk. */
static void c_register_unsealed_memory(struct hctx *x)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *e;
        Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;
        int fd = memfd_create("unsealed", MFD_CLOEXEC), sealed = hard_memfd(8192);

        cr_assert_geq(fd, 0);
        cr_assert_geq(sealed, 0);
        cr_assert_eq(ftruncate(fd, 8192), 0);
        reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__SHM;
        reg.bytes = 8192;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
        env.buffer_register = &reg;
        cr_assert_eq(hard_raw_send(&x->r, 75, &env, &fd, 1, 0), 0);
        close(fd);
        e = hard_raw_recv(&x->r, TIMEOUT_MS);
        cr_assert(e && e->request_id == 75 && e->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR,
                  "an unsealed memfd was not refused");
        cr_expect_eq(e->error->code, GEMMD__V1__CODE__INVALID);
        cr_expect(e->error->message && strstr(e->error->message, "sealed"), "message: %s",
                  e->error->message ? e->error->message : "(none)");
        cr_expect(ftruncate(sealed, 4096) < 0 && errno == EPERM, "a sealed memfd shrank");
        close(sealed);
        expect_session_alive(x, 76);
}

static void c_register_a_pipe(struct hctx *x)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;
        int p[2];

        cr_assert_eq(pipe(p), 0);
        reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__SHM;
        reg.bytes = 4096;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
        env.buffer_register = &reg;
        cr_assert_eq(hard_raw_send(&x->r, 70, &env, p, 1, 0), 0);
        close(p[0]);
        close(p[1]);
        expect_error(&x->r, 70, GEMMD__V1__CODE__INVALID);
        expect_session_alive(x, 71);
}

static void c_too_many_fds(struct hctx *x)
{
        int fds[12];

        for (int i = 0; i < 12; i++)
                fds[i] = hard_memfd(4096);
        send_stats(x, 80, fds, 12);
        for (int i = 0; i < 12; i++)
                close(fds[i]);
        expect_error(&x->r, 0, GEMMD__V1__CODE__PROTOCOL);
        expect_closed(x);
}

static void c_zero_length_frame(struct hctx *x)
{
        static const uint8_t zero[4] = {0, 0, 0, 0};

        cr_assert_eq(hard_raw_write(&x->r, zero, 4, NULL, 0), 0);
        expect_error(&x->r, 0, GEMMD__V1__CODE__PROTOCOL);
        expect_session_alive(x, 90);
}

static void c_garbage_frame(struct hctx *x)
{
        uint8_t frame[4 + 64];
        uint64_t seed = 5;

        frame[0] = 64;
        frame[1] = frame[2] = frame[3] = 0;
        for (int i = 0; i < 64; i++)
                frame[4 + i] = (uint8_t)(0xff ^ e2e_rand(&seed));
        frame[4] = 0xff; /* field 31, wire type 7: never valid */
        cr_assert_eq(hard_raw_write(&x->r, frame, sizeof(frame), NULL, 0), 0);
        expect_error(&x->r, 0, GEMMD__V1__CODE__PROTOCOL);
        expect_session_alive(x, 100);
}

static void c_oversized_length_prefix(struct hctx *x)
{
        static const uint8_t hdr[4] = {0xf0, 0xff, 0xff, 0xff};

        cr_assert_eq(hard_raw_write(&x->r, hdr, 4, NULL, 0), 0);
        expect_error(&x->r, 0, GEMMD__V1__CODE__TOO_BIG);
        expect_closed(x);
}

static void c_trickled_bad_submit(struct hctx *x)
{
        struct opbox o;
        Gemmd__V1__Op *p = &o.op;

        op_init(&o, x->buf);
        o.op.ldb = 3;
        cr_assert_eq(send_ops(x, 110, &p, 1, 1, 200), 0);
        expect_error(&x->r, 110, GEMMD__V1__CODE__INVALID);
        expect_session_alive(x, 111);
}

static void c_partial_frame_then_hang_up(struct hctx *x)
{
        struct hctx y = {.d = x->d};
        static const uint8_t partial[] = {200, 0, 0, 0, 0x08, 0x01};
        gemmd_client *c = NULL;
        long long got;

        for (int i = 0; i < 8; i++) {
                /* --max-sessions 2: the last one may still be closing. */
                for (int tries = 0;; tries++) {
                        cr_assert_eq(hard_raw_open(&y.r, x->d->sock), 0);
                        if (i % 2 == 0 || hard_raw_hello(&y.r) == 0)
                                break;
                        hard_raw_close(&y.r);
                        cr_assert_lt(tries, 100);
                        usleep(10000);
                }
                cr_assert_eq(hard_raw_write(&y.r, partial, sizeof(partial), NULL, 0), 0);
                hard_raw_close(&y.r);
        }
        for (int tries = 0; tries < 200 && gemmd_connect(x->d->sock, &c); tries++)
                usleep(10000);
        cr_assert_not_null(c);
        cr_expect_eq(hard_wait_sessions(c, 2, TIMEOUT_MS, &got), 0, "%lld sessions", got);
        gemmd_disconnect(c);
        expect_session_alive(x, 120);
}

static void c_too_many_connections(struct hctx *x)
{
        struct hctx y = {.d = x->d};
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Hello h = GEMMD__V1__HELLO__INIT;
        struct hard_raw second;

        /* x holds one of the two places. */
        cr_assert_eq(hard_raw_open(&second, x->d->sock), 0);
        cr_assert_eq(hard_raw_hello(&second), 0);
        cr_assert_eq(hard_raw_open(&y.r, x->d->sock), 0);
        h.protocol_version = GEMMD_PROTOCOL_VERSION;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO;
        env.hello = &h;
        cr_assert_eq(hard_raw_send(&y.r, 130, &env, NULL, 0, 0), 0);
        expect_error(&y.r, 130, GEMMD__V1__CODE__LIMIT);
        expect_closed(&y);
        hard_raw_close(&y.r);
        hard_raw_close(&second);
        expect_session_alive(x, 131);
}

static void c_silent_connection(struct hctx *x)
{
        struct hctx y = {.d = x->d};
        uint64_t t0 = e2e_now_us();

        /* --hello-timeout-ms 1000: a connection that says nothing holds a
         * place only that long. */
        cr_assert_eq(hard_raw_open(&y.r, x->d->sock), 0);
        expect_error(&y.r, 0, GEMMD__V1__CODE__PROTOCOL);
        expect_closed(&y);
        cr_expect_geq(e2e_now_us() - t0, 900000, "closed before the timeout");
        hard_raw_close(&y.r);
        expect_session_alive(x, 135);
}

static void c_submit_ops_count(struct hctx *x)
{
        struct opbox o[5];
        Gemmd__V1__Op *p[5];

        for (int i = 0; i < 5; i++) {
                op_init(&o[i], x->buf);
                p[i] = &o[i].op;
        }
        cr_assert_eq(send_ops(x, 140, p, 0, 1, 0), 0);
        expect_error(&x->r, 140, GEMMD__V1__CODE__INVALID);
        cr_assert_eq(send_ops(x, 141, p, 5, 1, 0), 0); /* --max-ops-per-submit 4 */
        expect_error(&x->r, 141, GEMMD__V1__CODE__LIMIT);
        cr_assert_eq(send_ops(x, 142, p, 1, 9, 0), 0);
        expect_error(&x->r, 142, GEMMD__V1__CODE__INVALID);
        cr_assert_eq(send_ops(x, 0, p, 1, 1, 0), 0);
        expect_error(&x->r, 0, GEMMD__V1__CODE__INVALID);
        expect_session_alive(x, 143);
}

static void c_decoding_bomb(struct hctx *x)
{
        /* 200000 empty ops: 2 bytes each on the wire, much more decoded. */
        size_t n = 200000, len = 2 + 3 * 2 + 2 * n + 8;
        uint8_t *f = malloc(4 + len), *p;
        size_t body;

        cr_assert_not_null(f);
        p = f + 4;
        *p++ = 0x08; /* request_id = 150 */
        *p++ = 150;
        *p++ = 0x01;
        *p++ = 0x82; /* field 16 (submit), length-delimited */
        *p++ = 0x01;
        body = 2 * n;
        for (size_t v = body; ; v >>= 7) { /* varint length */
                *p++ = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
                if (v < 0x80)
                        break;
        }
        for (size_t i = 0; i < n; i++) {
                *p++ = 0x0a; /* ops, empty */
                *p++ = 0x00;
        }
        len = (size_t)(p - (f + 4));
        f[0] = len & 0xff;
        f[1] = (len >> 8) & 0xff;
        f[2] = (len >> 16) & 0xff;
        f[3] = (len >> 24) & 0xff;
        cr_assert_eq(hard_raw_write(&x->r, f, 4 + len, NULL, 0), 0);
        free(f);
        /* Refused as too large to decode, or for its op count. */
        {
                Gemmd__V1__Envelope *e = hard_raw_recv(&x->r, TIMEOUT_MS);

                cr_assert_not_null(e);
                cr_assert_eq(e->body_case, GEMMD__V1__ENVELOPE__BODY_ERROR);
                cr_expect(e->error->code == GEMMD__V1__CODE__LIMIT, "code %d: %s",
                          (int)e->error->code, e->error->message);
        }
        expect_session_alive(x, 151);
}

static void c_protocol_order(struct hctx *x)
{
        struct hctx y = {.d = x->d};
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__Hello h = GEMMD__V1__HELLO__INIT;
        Gemmd__V1__BufferRelease rel = GEMMD__V1__BUFFER_RELEASE__INIT;

        /* A second Hello, and releasing what does not exist. */
        h.protocol_version = GEMMD_PROTOCOL_VERSION;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO;
        env.hello = &h;
        cr_assert_eq(hard_raw_send(&x->r, 160, &env, NULL, 0, 0), 0);
        expect_error(&x->r, 160, GEMMD__V1__CODE__PROTOCOL);
        rel.buffer_id = 999;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_RELEASE;
        env.buffer_release = &rel;
        cr_assert_eq(hard_raw_send(&x->r, 161, &env, NULL, 0, 0), 0);
        expect_error(&x->r, 161, GEMMD__V1__CODE__NO_BUFFER);
        /* Anything before Hello closes the connection; so does a wrong
         * version. */
        cr_assert_eq(hard_raw_open(&y.r, x->d->sock), 0);
        send_stats(&y, 162, NULL, 0);
        expect_error(&y.r, 162, GEMMD__V1__CODE__PROTOCOL);
        expect_closed(&y);
        hard_raw_close(&y.r);
        h.protocol_version = 99;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO;
        env.hello = &h;
        /* --max-sessions 2: the connection just closed may not be counted
         * out yet (its loop does that on its next turn, and under several
         * loops this one may be served first), which a Hello is told as
         * LIMIT. Then again, until the Hello is judged on its version. */
        for (int tries = 0;; tries++) {
                int code = -1;

                cr_assert_eq(hard_raw_open(&y.r, x->d->sock), 0);
                cr_assert_eq(hard_raw_send(&y.r, 163, &env, NULL, 0, 0), 0);
                for (int i = 0; i < 64 && code < 0; i++) {
                        Gemmd__V1__Envelope *e = hard_raw_recv(&y.r, TIMEOUT_MS);

                        cr_assert_not_null(e, "no answer to request 163");
                        if (e->request_id == 163 && e->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR)
                                code = (int)e->error->code;
                }
                if (code != GEMMD__V1__CODE__LIMIT || tries == 100) {
                        cr_expect_eq(code, GEMMD__V1__CODE__VERSION, "request 163: code %d", code);
                        break;
                }
                hard_raw_close(&y.r);
                usleep(10000);
        }
        expect_closed(&y);
        hard_raw_close(&y.r);
        expect_session_alive(x, 164);
}

static void c_cuda_ipc_on_a_cpu_daemon(struct hctx *x)
{
        cr_assert_eq(hard_raw_send_ipc(&x->r, 170, GEMMD__V1__BUFFER_REGISTER__KIND__CUDA_IPC, 1, 4096), 0);
        expect_error(&x->r, 170, GEMMD__V1__CODE__UNSUPPORTED);
        cr_assert_eq(hard_raw_send_ipc(&x->r, 171, 5, 1, 4096), 0);
        expect_error(&x->r, 171, GEMMD__V1__CODE__INVALID);
        expect_session_alive(x, 172);
}

static void c_per_session_caps(struct hctx *x)
{
        static const uint8_t big[64 * 64 * 4]; /* one inline 64 x 64 f32 operand */
        struct opbox o;

        /* --max-buffers 2: the session has one; a second fits, a third not. */
        cr_assert_gt(hard_raw_register(&x->r, 180, 4096, 4096), 0);
        cr_expect_eq(hard_raw_register(&x->r, 181, 4096, 4096), -GEMMD__V1__CODE__LIMIT);
        /* --max-inline-bytes 16384: one inline 64 x 64 f32 A fits, three do not. */
        op_init(&o, x->buf);
        o.a.buffer_id = 0;
        o.a.data.data = (uint8_t *)big;
        o.a.data.len = sizeof(big);
        {
                Gemmd__V1__Op *p[3] = {&o.op, &o.op, &o.op};

                cr_assert_eq(send_ops(x, 182, p, 3, 1, 0), 0);
                expect_error(&x->r, 182, GEMMD__V1__CODE__LIMIT);
                cr_assert_eq(send_ops(x, 183, p, 1, 1, 0), 0);
                expect_body(&x->r, 183, GEMMD__V1__ENVELOPE__BODY_COMPLETION);
        }
        expect_session_alive(x, 184);
}

struct hcase {
        const char *name;
        void (*run)(struct hctx *x);
};

static struct hcase cases[] = {
        {"huge m", c_huge_m},
        {"huge k", c_huge_k},
        {"span overflows", c_span_overflows},
        {"ld smaller than rows", c_ld_smaller_than_rows},
        {"ldc zero", c_ldc_zero},
        {"negative size", c_negative_size},
        {"zero size", c_zero_size},
        {"offset past the end", c_offset_past_end},
        {"operand runs past the end", c_operand_runs_past_end},
        {"offset plus span overflows", c_offset_plus_span_overflows},
        {"misaligned offset", c_misaligned_offset},
        {"unknown buffer", c_unknown_buffer},
        {"another session's buffer", c_another_sessions_buffer},
        {"C overlaps A", c_c_overlaps_a},
        {"unknown dtype", c_unknown_dtype},
        {"unknown op kind", c_unknown_kind},
        {"bad trans", c_bad_trans},
        {"syr2k ldc too small", c_syr2k_ldc_small},
        {"inline operand too short", c_inline_too_short},
        {"operand missing", c_no_operand},
        {"inline C of 16 GiB without data", c_inline_c_of_16_gib},
        {"register with two fds", c_register_with_two_fds},
        {"fds without a register", c_fds_without_register},
        {"register without an fd", c_register_without_fd},
        {"register more than the file", c_register_more_than_the_file},
        {"register a pipe", c_register_a_pipe},
        {"register memory not sealed against shrinking", c_register_unsealed_memory},
        {"too many fds", c_too_many_fds},
        {"zero-length frame", c_zero_length_frame},
        {"garbage frame", c_garbage_frame},
        {"oversized length prefix", c_oversized_length_prefix},
        {"bad submit trickled byte by byte", c_trickled_bad_submit},
        {"partial frames then hang-ups", c_partial_frame_then_hang_up},
        {"too many connections", c_too_many_connections},
        {"a connection that never says Hello", c_silent_connection},
        {"op counts, priority, request id", c_submit_ops_count},
        {"decoding bomb", c_decoding_bomb},
        {"protocol order and version", c_protocol_order},
        {"CUDA IPC on a CPU daemon, unknown kind", c_cuda_ipc_on_a_cpu_daemon},
        {"per-session buffer and inline caps", c_per_session_caps},
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* Parameters cross into the test's own process by value, so they carry an
 * index into `cases`, never its pointers. */
ParameterizedTestParameters(hostile, each_attack_gets_a_clear_error_and_the_daemon_serves_on)
{
        static int idx[NCASES];

        for (size_t i = 0; i < NCASES; i++)
                idx[i] = (int)i;
        return cr_make_param_array(int, idx, NCASES);
}

ParameterizedTest(int *pi, hostile, each_attack_gets_a_clear_error_and_the_daemon_serves_on)
{
        const struct hcase *hc = &cases[*pi];
        struct e2e_daemon d;
        struct hctx x = {.d = &d};
        struct e2e_spec s = {.kind = GEMMD_SYR2K, .dtype = GEMMD_BF16, .n = 33, .k = 17,
                             .alpha = 1.0f, .beta = 0.5f};
        struct e2e_prob p;
        uint64_t seed = 9;
        gemmd_client *c;
        char why[256];
        int64_t id;

        cr_log_info("case: %s", hc->name);
        START(&d, "--threads", "1", "--max-sessions", "2", "--max-ops-per-submit", "4",
              "--max-buffers", "2", "--max-inline-bytes", "16384", "--max-buffer-bytes",
              "1073741824", "--hello-timeout-ms", "1000", NULL);
        /* The readiness probe's session goes away (with 3 loops and a
         * device process on a busy 2-CPU machine, 50 ms was once not
         * enough, and a case's second connection found the 2 taken). */
        usleep(250000);
        cr_assert_eq(hard_raw_open(&x.r, d.sock), 0);
        cr_assert_eq(hard_raw_hello(&x.r), 0);
        id = hard_raw_register(&x.r, 2, BUF_BYTES, BUF_BYTES);
        cr_assert_gt(id, 0, "register: %lld", (long long)id);
        x.buf = (uint64_t)id;
        hc->run(&x);
        hard_raw_close(&x.r);

        /* Whatever happened, the daemon serves the next client. */
        for (int tries = 0; tries < 200 && !(c = NULL, gemmd_connect(d.sock, &c) == 0); tries++)
                usleep(10000);
        cr_assert_not_null(c, "%s: no client is served afterwards", hc->name);
        cr_assert_eq(e2e_prob_inline(&p, &s, &seed), 0);
        cr_expect_eq(e2e_run_checked(c, &p, 1, 1, NULL, why, sizeof(why)), 0, "%s", why);
        e2e_prob_free(&p);
        gemmd_disconnect(c);
        STOP(&d);
}

/* ---- floods ------------------------------------------------------------------- */

#define FLOOD_CONNS 4
#define FLOOD_ROUNDS 600

/* One round of bad frames on x; reads the answers. */
static void flood_round(struct hctx *x, int i, uint64_t *seed)
{
        struct opbox o;
        static const uint8_t zero[4] = {0, 0, 0, 0};
        uint8_t junk[4 + 32];
        int fd;

        op_init(&o, x->buf);
        switch (i % 5) {
        case 0:
                o.op.lda = 1;
                break;
        case 1:
                o.a.offset = UINT64_MAX - 3;
                break;
        case 2:
                o.b.buffer_id = 77;
                break;
        case 3:
                o.op.m = 1ll << 50;
                break;
        default:
                o.c.offset = BUF_BYTES;
                break;
        }
        cr_assert_eq(send_op(x, 1000 + (uint64_t)i, &o), 0);
        expect_error(&x->r, 1000 + (uint64_t)i, i % 5 == 0 ? GEMMD__V1__CODE__INVALID
                                              : i % 5 == 1 ? GEMMD__V1__CODE__OVERFLOW
                                              : i % 5 == 2 ? GEMMD__V1__CODE__NO_BUFFER
                                              : i % 5 == 3 ? GEMMD__V1__CODE__OVERFLOW
                                                           : GEMMD__V1__CODE__BOUNDS);
        cr_assert_eq(hard_raw_write(&x->r, zero, 4, NULL, 0), 0);
        expect_error(&x->r, 0, GEMMD__V1__CODE__PROTOCOL);
        junk[0] = 32;
        junk[1] = junk[2] = junk[3] = 0;
        for (int j = 0; j < 32; j++)
                junk[4 + j] = (uint8_t)e2e_rand(seed);
        junk[4] = 0xff;
        cr_assert_eq(hard_raw_write(&x->r, junk, sizeof(junk), NULL, 0), 0);
        expect_error(&x->r, 0, GEMMD__V1__CODE__PROTOCOL);
        fd = hard_memfd(4096);
        send_stats(x, 2000 + (uint64_t)i, &fd, 1);
        close(fd);
        expect_body(&x->r, 2000 + (uint64_t)i, GEMMD__V1__ENVELOPE__BODY_STATS_REPLY);
        expect_error(&x->r, 0, GEMMD__V1__CODE__PROTOCOL);
        cr_assert_eq(hard_raw_register(&x->r, 3000 + (uint64_t)i, 1u << 20, 4096),
                     -GEMMD__V1__CODE__BOUNDS);
}

/* A connection that declares a large frame, sends part of it, hangs up. */
static void half_big_frame(const char *sock)
{
        struct hard_raw r;
        size_t n = 4u << 20;
        uint8_t *f = calloc(1, n);

        cr_assert_not_null(f);
        cr_assert_eq(hard_raw_open(&r, sock), 0);
        cr_assert_eq(hard_raw_hello(&r), 0);
        f[0] = 0;
        f[1] = 0;
        f[2] = 0x80; /* 8 MiB declared, 4 MiB sent */
        f[3] = 0;
        cr_assert_eq(hard_raw_write(&r, f, n, NULL, 0), 0);
        hard_raw_close(&r);
        free(f);
}

Test(hostile, a_flood_of_bad_frames_leaves_descriptors_and_memory_where_they_were)
{
        struct e2e_daemon d;
        struct hctx x[FLOOD_CONNS];
        struct hard_res base, after;
        uint64_t seed = 99;
        gemmd_client *mon;
        long long got;
        char b1[128], b2[128];

        START(&d, "--threads", "1", NULL);
        mon = e2e_connect(&d);
        cr_assert_not_null(mon);
        /* Warm up every path once, then take the baseline. */
        for (int k = 0; k < 2; k++) {
                for (int c = 0; c < FLOOD_CONNS; c++) {
                        x[c].d = &d;
                        cr_assert_eq(hard_raw_open(&x[c].r, d.sock), 0);
                        cr_assert_eq(hard_raw_hello(&x[c].r), 0);
                        x[c].buf = (uint64_t)hard_raw_register(&x[c].r, 2, BUF_BYTES, BUF_BYTES);
                        cr_assert_gt(x[c].buf, 0);
                }
                for (int i = 0; i < (k ? FLOOD_ROUNDS : 5); i++)
                        for (int c = 0; c < FLOOD_CONNS; c++)
                                flood_round(&x[c], i, &seed);
                for (int i = 0; i < (k ? 20 : 1); i++)
                        half_big_frame(d.sock);
                for (int c = 0; c < FLOOD_CONNS; c++)
                        hard_raw_close(&x[c].r);
                cr_assert_eq(hard_wait_sessions(mon, 1, TIMEOUT_MS, &got), 0, "%lld sessions", got);
                if (k)
                        cr_assert_eq(hard_res_back(d.pid, &base, &after, 10000), 0);
                else
                        cr_assert_eq(hard_res_settled(d.pid, &base, 5000), 0);
        }
        fprintf(stderr, "flood of %d bad frames and %d half-sent 8 MiB frames: daemon before %s, after %s\n",
                FLOOD_CONNS * FLOOD_ROUNDS * 5, 20, hard_res_str(&base, b1, sizeof(b1)),
                hard_res_str(&after, b2, sizeof(b2)));
        cr_expect_eq(after.fds, base.fds);
        cr_expect_eq(after.shm_maps, base.shm_maps);
        cr_expect_leq(after.rss_kb, base.rss_kb + 8192, "VmRSS grew from %ld kB to %ld kB",
                      base.rss_kb, after.rss_kb);
        gemmd_disconnect(mon);
        STOP(&d);
}

Test(hostile, a_client_that_never_reads_is_read_no_more_and_costs_bounded_memory)
{
        struct e2e_daemon d;
        struct hctx x = {.d = &d};
        struct hard_res base, peak, after;
        gemmd_client *mon;
        long long got;
        char b1[128], b2[128], b3[128];
        int sent = 0;

        START(&d, "--threads", "1", "--max-output-bytes", "1048576", NULL);
        mon = e2e_connect(&d);
        cr_assert_not_null(mon);
        cr_assert_eq(hard_res_settled(d.pid, &base, 5000), 0);
        cr_assert_eq(hard_raw_open(&x.r, d.sock), 0);
        cr_assert_eq(hard_raw_hello(&x.r), 0);
        /* Stats requests (a few kB of answer each), never read, until the
         * daemon stops reading and the socket fills. */
        {
                int fl = fcntl(x.r.fd, F_GETFL);

                fcntl(x.r.fd, F_SETFL, fl | O_NONBLOCK);
                for (int i = 0; i < 200000; i++) {
                        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
                        Gemmd__V1__StatsRequest st = GEMMD__V1__STATS_REQUEST__INIT;
                        uint8_t *buf;
                        size_t n;

                        env.request_id = (uint64_t)i + 1;
                        env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST;
                        env.stats_request = &st;
                        cr_assert_eq(frame_pack(&env, 0, UINT32_MAX, &buf, &n), 0);
                        if (send(x.r.fd, buf, n, MSG_NOSIGNAL) != (ssize_t)n) {
                                free(buf);
                                break;
                        }
                        free(buf);
                        sent++;
                }
        }
        cr_expect_lt(sent, 200000, "the daemon went on reading a client that reads nothing");
        usleep(200000);
        cr_assert_eq(hard_res_read(d.pid, &peak), 0);
        /* Others are still served meanwhile. */
        {
                char *text = NULL;

                cr_expect_eq(gemmd_stats(mon, 0, &text), 0);
                free(text);
        }
        hard_raw_close(&x.r);
        cr_assert_eq(hard_wait_sessions(mon, 1, TIMEOUT_MS, &got), 0);
        usleep(100000);
        cr_assert_eq(hard_res_read(d.pid, &after), 0);
        fprintf(stderr, "a client that never reads (%d requests sent): daemon before %s, with it %s, after %s\n",
                sent, hard_res_str(&base, b1, sizeof(b1)), hard_res_str(&peak, b2, sizeof(b2)),
                hard_res_str(&after, b3, sizeof(b3)));
        cr_expect_leq(peak.rss_kb, base.rss_kb + 16384, "VmRSS %ld kB -> %ld kB", base.rss_kb,
                      peak.rss_kb);
        cr_expect_eq(after.fds, base.fds);
        gemmd_disconnect(mon);
        STOP(&d);
}
