/*
 * seals.c - memory made unreadable under the daemon. A client owns the
 * memfds it registers (as buffers or rings) and can truncate, punch, grow
 * and seal them whenever it likes, in any order, while ops read and write
 * them. A file cut short under one of the daemon's mappings would make its
 * next touch a SIGBUS that kills the daemon for everyone, so the daemon
 * maps only memfds that can no longer shrink, and checks that before it
 * reads their size.
 *
 * The races are run as an attacker would: an unsealed memfd is sent, and
 * at once truncated to nothing and sealed, hoping to land between the
 * daemon's look at the size and its look at the seals.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gemmd.h"
#include "proto/ring.h"
#include "tests/e2e_assert.h"
#include "tests/hard_util.h"

TestSuite(attack_seals, .init = e2e_setup, .fini = e2e_teardown, .timeout = 120);

#define TIMEOUT_MS 10000
#define RACE_SECONDS 4
#define DIM 256
#define MAT_BYTES (DIM * DIM * 4)
#define FILE_BYTES (4 * MAT_BYTES)

/* A DIM^3 f32 GEMM on buffer `buf`, in the storage of a hard_gemm2 (the
 * same fields): A at 0, B after it, C after B. */
static void gemm_submit(struct hard_gemm2 *g, uint64_t buf, Gemmd__V1__Envelope *env)
{
        gemmd__v1__submit__init(&g->sub);
        gemmd__v1__op__init(&g->op);
        gemmd__v1__operand__init(&g->a);
        gemmd__v1__operand__init(&g->b);
        gemmd__v1__operand__init(&g->c);
        g->op.kind = GEMMD__V1__OP_KIND__GEMM;
        g->op.dtype = GEMMD__V1__DTYPE__F32;
        g->op.m = g->op.n = g->op.k = DIM;
        g->op.lda = g->op.ldb = g->op.ldc = DIM;
        g->op.alpha = 1.0f;
        g->a.buffer_id = g->b.buffer_id = g->c.buffer_id = buf;
        g->b.offset = MAT_BYTES;
        g->c.offset = 2 * MAT_BYTES;
        g->op.a = &g->a;
        g->op.b = &g->b;
        g->op.c = &g->c;
        g->ops[0] = &g->op;
        g->sub.n_ops = 1;
        g->sub.ops = g->ops;
        g->sub.priority = GEMMD_PRIO_NORMAL;
        env->body_case = GEMMD__V1__ENVELOPE__BODY_SUBMIT;
        env->submit = &g->sub;
}

/* The next frame answering rid, or NULL (the daemon is gone or silent). */
static Gemmd__V1__Envelope *answer(struct hard_raw *r, uint64_t rid)
{
        for (int i = 0; i < 256; i++) {
                Gemmd__V1__Envelope *e = hard_raw_recv(r, TIMEOUT_MS);

                if (!e || e->request_id == rid)
                        return e;
        }
        return NULL;
}

/* Sends one GEMM on buf and returns its Completion's status (wire code),
 * or -1 when no Completion came. */
static int run_gemm(struct hard_raw *r, uint64_t rid, uint64_t buf)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *e;
        struct hard_gemm2 g;

        gemm_submit(&g, buf, &env);
        if (hard_raw_send(r, rid, &env, NULL, 0, 0))
                return -1;
        e = answer(r, rid);
        if (!e || e->body_case != GEMMD__V1__ENVELOPE__BODY_COMPLETION ||
            e->completion->n_results != 1)
                return -1;
        return (int)e->completion->results[0]->status;
}

/* Asserts that another user's well-behaved session is served right (an
 * inline 2 x 2 GEMM with a known answer): the daemon survived. */
static void expect_daemon_serves(const struct e2e_daemon *d)
{
        static const float want[4] = HARD_GEMM2_C;
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *e;
        struct hard_gemm2 g;
        struct hard_raw r;
        float c[4];

        cr_assert_eq(kill(d->pid, 0), 0, "the daemon is gone");
        cr_assert_eq(hard_raw_open(&r, d->sock), 0, "the daemon does not accept connections");
        cr_assert_eq(hard_raw_hello(&r), 0, "no HelloReply");
        hard_gemm2_submit(&g, &env);
        cr_assert_eq(hard_raw_send(&r, 9, &env, NULL, 0, 0), 0);
        e = answer(&r, 9);
        cr_assert(e && e->body_case == GEMMD__V1__ENVELOPE__BODY_COMPLETION,
                  "a well-behaved op was not answered");
        cr_assert_eq(e->completion->results[0]->status, 0);
        cr_assert_eq(e->completion->results[0]->c_data.len, sizeof(c));
        memcpy(c, e->completion->results[0]->c_data.data, sizeof(c));
        for (int i = 0; i < 4; i++)
                cr_expect_float_eq(c[i], want[i], 1e-6f, "C[%d]", i);
        hard_raw_close(&r);
}

/* Spins for a pseudo-random while below `span` iterations: the attacker
 * sweeps its truncation over the daemon's window. */
static void jitter(uint64_t *seed, unsigned span)
{
        volatile unsigned sink = 0;
        unsigned n = (unsigned)(e2e_rand(seed) % span);

        for (unsigned i = 0; i < n; i++)
                sink += i;
}

/* Cuts fd to nothing and then seals it against shrinking: a file that
 * passes a size check made before this and a seal check made after. */
static void truncate_and_seal(int fd)
{
        (void)!ftruncate(fd, 0);
        (void)!fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK);
}

Test(attack_seals, a_buffer_truncated_and_sealed_during_its_registration_is_refused)
{
        struct e2e_daemon d;
        struct hard_raw r;
        uint64_t seed = 0x5ea15, rid = 100, t_end;
        int tries = 0, refused = 0;

        cr_assert_eq(e2e_daemon_start(&d, NULL), 0);
        cr_assert_eq(hard_raw_open(&r, d.sock), 0);
        cr_assert_eq(hard_raw_hello(&r), 0);
        t_end = e2e_now_us() + RACE_SECONDS * 1000000ull;
        while (e2e_now_us() < t_end) {
                Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *e;
                Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;
                int fd = memfd_create("attack", MFD_CLOEXEC | MFD_ALLOW_SEALING);

                cr_assert_geq(fd, 0);
                cr_assert_eq(ftruncate(fd, FILE_BYTES), 0);
                reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__SHM;
                reg.bytes = FILE_BYTES;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
                env.buffer_register = &reg;
                cr_assert_eq(hard_raw_send(&r, ++rid, &env, &fd, 1, 0), 0, "the daemon is gone");
                jitter(&seed, 40000);
                truncate_and_seal(fd);
                close(fd);
                tries++;
                e = answer(&r, rid);
                cr_assert_not_null(e, "no answer to registration %d: the daemon died", tries);
                if (e->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR) {
                        cr_assert(e->error->code == GEMMD__V1__CODE__INVALID ||
                                          e->error->code == GEMMD__V1__CODE__BOUNDS,
                                  "code %d (%s)", (int)e->error->code, e->error->message);
                        refused++;
                        continue;
                }
                /* Accepted: the file is empty now, whatever the daemon saw.
                 * An op on it must not take the daemon down. */
                cr_assert_eq(e->body_case, GEMMD__V1__ENVELOPE__BODY_BUFFER_REPLY);
                uint64_t id = e->buffer_reply->buffer_id;

                cr_assert_neq(run_gemm(&r, ++rid, id), -1,
                              "an op on a buffer cut short under the daemon (try %d) got no answer",
                              tries);
        }
        cr_log_info("%d registrations raced, %d refused", tries, refused);
        /* Truncation always came before the seal: the daemon can only have
         * seen an unsealed file or an empty one. */
        cr_expect_eq(refused, tries, "%d of %d raced registrations were accepted", tries - refused,
                     tries);
        hard_raw_close(&r);
        expect_daemon_serves(&d);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

Test(attack_seals, a_ring_truncated_and_sealed_during_its_attach_is_refused)
{
        struct e2e_daemon d;
        uint64_t seed = 0x41e6, t_end;
        int tries = 0, refused = 0;

        cr_assert_eq(e2e_daemon_start(&d, NULL), 0);
        t_end = e2e_now_us() + RACE_SECONDS * 1000000ull;
        /* One ring per session: a session whose ring was taken is left for
         * a new one. */
        while (e2e_now_us() < t_end) {
                struct hard_raw r;
                uint64_t rid = 10;

                cr_assert_eq(hard_raw_open(&r, d.sock), 0, "the daemon is gone");
                cr_assert_eq(hard_raw_hello(&r), 0, "no HelloReply: the daemon died");
                while (e2e_now_us() < t_end) {
                        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *e;
                        Gemmd__V1__RingAttach ra = GEMMD__V1__RING_ATTACH__INIT;
                        Gemmd__V1__StatsRequest st = GEMMD__V1__STATS_REQUEST__INIT;
                        int fd = memfd_create("attack-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);

                        cr_assert_geq(fd, 0);
                        cr_assert_eq(ftruncate(fd, (off_t)RING_FILE_BYTES(GEMMD_RING_VERSION)), 0);
                        ra.version = GEMMD_RING_VERSION;
                        ra.bytes = RING_FILE_BYTES(GEMMD_RING_VERSION);
                        env.body_case = GEMMD__V1__ENVELOPE__BODY_RING_ATTACH;
                        env.ring_attach = &ra;
                        cr_assert_eq(hard_raw_send(&r, ++rid, &env, &fd, 1, 0), 0);
                        jitter(&seed, 40000);
                        truncate_and_seal(fd);
                        close(fd);
                        tries++;
                        e = answer(&r, rid);
                        cr_assert_not_null(e, "no answer to ring attach %d: the daemon died", tries);
                        if (e->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR) {
                                cr_assert_eq(e->error->code, GEMMD__V1__CODE__INVALID, "%s",
                                             e->error->message);
                                refused++;
                                continue;
                        }
                        /* Attached to an empty file: the daemon looks at the
                         * ring after its next turn, which a stats request
                         * gives it. */
                        cr_assert_eq(e->body_case, GEMMD__V1__ENVELOPE__BODY_ACK);
                        env = (Gemmd__V1__Envelope)GEMMD__V1__ENVELOPE__INIT;
                        env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST;
                        env.stats_request = &st;
                        cr_assert_eq(hard_raw_send(&r, ++rid, &env, NULL, 0, 0), 0);
                        cr_assert_not_null(answer(&r, rid),
                                           "a ring cut short under the daemon (try %d): no answer",
                                           tries);
                        break;
                }
                hard_raw_close(&r);
        }
        cr_log_info("%d ring attaches raced, %d refused", tries, refused);
        cr_expect_eq(refused, tries, "%d of %d raced ring attaches were accepted", tries - refused,
                     tries);
        expect_daemon_serves(&d);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* ---- a registered buffer changed in every order while ops run ------------ */

enum change { SHRINK, PUNCH, GROW, SEAL, NCHANGES };

static const char *const change_names[NCHANGES] = {"shrink", "punch", "grow", "seal"};

/* Applies one change to the sealed memfd fd of `bytes` that the daemon maps.
 * Shrinking and sealing must fail: the seal the daemon asked for holds, and
 * the daemon sealed the file against more. Punching and growing work. */
static void apply(int fd, enum change c, uint64_t bytes)
{
        switch (c) {
        case SHRINK:
                cr_assert(ftruncate(fd, 0) < 0 && errno == EPERM,
                          "a registered memfd could be truncated");
                break;
        case PUNCH:
                cr_assert_eq(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes),
                             0);
                break;
        case GROW:
                cr_assert_eq(ftruncate(fd, (off_t)(2 * bytes)), 0);
                break;
        case SEAL:
                /* The daemon sealed it against further seals: a write seal
                 * would keep a device process from mapping it. */
                cr_assert(fcntl(fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_FUTURE_WRITE) < 0 &&
                                  errno == EPERM,
                          "a registered memfd could be sealed further");
                cr_assert(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) < 0);
                break;
        default:
                break;
        }
}

/* Registers a new sealed memfd of FILE_BYTES with random operands, keeping
 * its descriptor in *fd. Returns the buffer id. */
static uint64_t register_kept(struct hard_raw *r, uint64_t rid, int *fd, uint64_t *seed)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *e;
        Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;
        float *p;

        *fd = hard_memfd(FILE_BYTES);
        cr_assert_geq(*fd, 0);
        p = mmap(NULL, FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
        cr_assert_neq(p, MAP_FAILED);
        for (size_t i = 0; i < FILE_BYTES / sizeof(float); i++)
                p[i] = (float)e2e_rand_val(seed);
        munmap(p, FILE_BYTES);
        reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__SHM;
        reg.bytes = FILE_BYTES;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
        env.buffer_register = &reg;
        cr_assert_eq(hard_raw_send(r, rid, &env, fd, 1, 0), 0);
        e = answer(r, rid);
        cr_assert(e && e->body_case == GEMMD__V1__ENVELOPE__BODY_BUFFER_REPLY,
                  "a sealed memfd was not registered");
        return e->buffer_reply->buffer_id;
}

Test(attack_seals, truncating_punching_growing_and_sealing_in_every_order_while_ops_run)
{
        enum { OPS = 8 };
        struct e2e_daemon d;
        struct hard_raw r;
        uint64_t seed = 0x0dd5, rid = 1000;
        int perm[NCHANGES] = {0, 1, 2, 3}, orders = 0;

        cr_assert_eq(e2e_daemon_start(&d, NULL), 0);
        cr_assert_eq(hard_raw_open(&r, d.sock), 0);
        cr_assert_eq(hard_raw_hello(&r), 0);
        /* Every permutation of the four changes, in lexicographic order. */
        for (;;) {
                Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
                struct hard_gemm2 g[OPS];
                int fd;
                uint64_t buf = register_kept(&r, ++rid, &fd, &seed), first = rid + 1;

                for (int i = 0; i < OPS; i++) {
                        gemm_submit(&g[i], buf, &env);
                        cr_assert_eq(hard_raw_send(&r, ++rid, &env, NULL, 0, 0), 0);
                }
                for (int i = 0; i < NCHANGES; i++)
                        apply(fd, (enum change)perm[i], FILE_BYTES);
                /* Every op is answered, in any order: it read zeros where a
                 * hole was punched, never past the end of the file. */
                for (int got = 0; got < OPS;) {
                        Gemmd__V1__Envelope *e = hard_raw_recv(&r, TIMEOUT_MS);

                        cr_assert(e, "order %s %s %s %s: %d of %d ops answered", change_names[perm[0]],
                                  change_names[perm[1]], change_names[perm[2]],
                                  change_names[perm[3]], got, OPS);
                        if (e->request_id < first || e->request_id > rid)
                                continue;
                        cr_assert_eq(e->body_case, GEMMD__V1__ENVELOPE__BODY_COMPLETION);
                        cr_expect_eq(e->completion->results[0]->status, 0, "status %d: %s",
                                     (int)e->completion->results[0]->status,
                                     e->completion->results[0]->message);
                        got++;
                }
                cr_assert_eq(run_gemm(&r, ++rid, buf), 0, "the buffer is no longer usable");
                close(fd);
                orders++;
                /* The next permutation in lexicographic order. */
                int i = NCHANGES - 2, j = NCHANGES - 1, t;

                while (i >= 0 && perm[i] >= perm[i + 1])
                        i--;
                if (i < 0)
                        break;
                while (perm[j] <= perm[i])
                        j--;
                t = perm[i], perm[i] = perm[j], perm[j] = t;
                for (int a = i + 1, b = NCHANGES - 1; a < b; a++, b--)
                        t = perm[a], perm[a] = perm[b], perm[b] = t;
        }
        cr_expect_eq(orders, 24);
        hard_raw_close(&r);
        expect_daemon_serves(&d);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

Test(attack_seals, memory_that_could_fault_under_the_daemon_is_refused_in_words)
{
        struct e2e_daemon d;
        struct hard_raw r;
        struct {
                const char *what;
                int fd;
                Gemmd__V1__Code code;
                const char *says;
        } cases[3];
        int n = 0;

        cr_assert_eq(e2e_daemon_start(&d, NULL), 0);
        cr_assert_eq(hard_raw_open(&r, d.sock), 0);
        cr_assert_eq(hard_raw_hello(&r), 0);
        /* Sealed against writes: the daemon writes C there. */
        cases[n].what = "a write-sealed memfd";
        cases[n].fd = hard_memfd(FILE_BYTES);
        cr_assert_geq(cases[n].fd, 0);
        cr_assert_eq(fcntl(cases[n].fd, F_ADD_SEALS, F_SEAL_WRITE), 0);
        cases[n].code = GEMMD__V1__CODE__INVALID;
        cases[n++].says = "not against writes";
        /* Not sealed at all. */
        cases[n].what = "an unsealed memfd";
        cases[n].fd = memfd_create("unsealed", MFD_CLOEXEC);
        cr_assert_eq(ftruncate(cases[n].fd, FILE_BYTES), 0);
        cases[n].code = GEMMD__V1__CODE__INVALID;
        cases[n++].says = "sealed against shrinking";
        /* hugetlbfs, where the host has huge pages to make one. */
        cases[n].fd = memfd_create("huge", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
        if (cases[n].fd >= 0 && ftruncate(cases[n].fd, 2 << 20) == 0 &&
            fcntl(cases[n].fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0) {
                cases[n].what = "a hugetlbfs memfd";
                cases[n].code = GEMMD__V1__CODE__INVALID;
                cases[n++].says = "hugetlbfs";
        } else if (cases[n].fd >= 0) {
                close(cases[n].fd);
        }
        for (int i = 0; i < n; i++) {
                Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *e;
                Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;

                reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__SHM;
                reg.bytes = FILE_BYTES;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
                env.buffer_register = &reg;
                cr_assert_eq(hard_raw_send(&r, 50 + (uint64_t)i, &env, &cases[i].fd, 1, 0), 0);
                close(cases[i].fd);
                e = answer(&r, 50 + (uint64_t)i);
                cr_assert(e && e->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR, "%s was not refused",
                          cases[i].what);
                cr_expect_eq(e->error->code, cases[i].code, "%s: code %d (%s)", cases[i].what,
                             (int)e->error->code, e->error->message);
                cr_expect(e->error->message && strstr(e->error->message, cases[i].says),
                          "%s: message \"%s\" does not say \"%s\"", cases[i].what,
                          e->error->message ? e->error->message : "", cases[i].says);
        }
        hard_raw_close(&r);
        expect_daemon_serves(&d);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}
