/*
 * test_e2e_ring.c - the rings a session shares with the daemon beside its
 * socket (proto/ring.h, daemon/ring.c): through the library, results as
 * on the socket, a daemon and a client that sleep and miss nothing, and
 * the socket alone when either side declines; by hand, every RingAttach
 * the daemon must refuse, a broken submission ring, something other than a
 * Submit in it, how the sleep flags and kicks route each message, a client
 * that never takes its completions (its replies then come on the socket,
 * each exactly once), and one that reads nothing at all (the daemon leaves
 * its ring alone without polling for it).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "gemmd.h"
#include "proto/frame.h"
#include "proto/ring.h"
#include "tests/e2e_util.h"
#include "tests/e2e_assert.h"
#include "tests/hard_util.h"

TestSuite(ring, .init = e2e_setup, .fini = e2e_teardown, .timeout = 120);

#define RECV_TIMEOUT_MS 10000
/* The memfd of this version's rings: the rings, then the completion words. */
#define RING_FILE RING_FILE_BYTES(GEMMD_RING_VERSION)

/* A number that follows `key` in gemmd_stats's JSON. */
static long long stat_of(gemmd_client *c, const char *key)
{
        char *text = NULL;
        long long v;

        cr_assert_eq(gemmd_stats(c, 1, &text), 0);
        v = hard_json_number(text, key);
        cr_assert_geq(v, 0, "no %s in %s", key, text);
        free(text);
        return v;
}

/* Connects with $GEMMD_RING and $GEMMD_SPIN_US set for this handle only. */
static gemmd_client *connect_with(const struct e2e_daemon *d, const char *ring, const char *spin)
{
        gemmd_client *c;

        if (ring)
                setenv("GEMMD_RING", ring, 1);
        if (spin)
                setenv("GEMMD_SPIN_US", spin, 1);
        c = e2e_connect(d);
        unsetenv("GEMMD_RING");
        unsetenv("GEMMD_SPIN_US");
        cr_assert_not_null(c);
        return c;
}

/* n random small problems, the first half in a shared buffer and the rest
 * inline (most of those too large for a ring's slot), run per_submit to a
 * submit and checked against the reference. */
static void run_random(gemmd_client *c, size_t n, size_t per_submit, uint64_t seed)
{
        struct e2e_prob *p = calloc(n, sizeof(*p));
        struct e2e_arena ar;
        char why[256];

        cr_assert_not_null(p);
        cr_assert_eq(e2e_arena_init(&ar, c, 8u << 20), 0);
        for (size_t i = 0; i < n; i++) {
                struct e2e_spec s;

                e2e_spec_random(&s, &seed, 40);
                if (i >= n / 2)
                        cr_assert_eq(e2e_prob_inline(&p[i], &s, &seed), 0);
                else
                        cr_assert_eq(e2e_prob_place(&p[i], &s, &ar, &seed), 0);
        }
        /* A round trip first: a daemon that polls is awake for the submits
         * that follow (one that sleeps takes the first on the socket). */
        cr_assert_eq(e2e_round_trip(c), 0);
        cr_assert_eq(e2e_run_checked(c, p, n, per_submit, NULL, why, sizeof(why)), 0, "%s", why);
        for (size_t i = 0; i < n; i++)
                e2e_prob_free(&p[i]);
        free(p);
}

/* Through the library, results are the same whichever way each message
 * goes; which way depends on who polls (the raw tests below pin each
 * down). */
Test(ring, a_library_client_attaches_its_rings_and_gets_every_result_right)
{
        struct e2e_daemon d;
        gemmd_client *c, *c2;

        for (int polls = 0; polls < 2; polls++) {
                cr_assert_eq(e2e_daemon_start(&d, "--spin-us", polls ? "1000" : "0", NULL), 0);
                c = connect_with(&d, NULL, polls ? "1000" : "0");
                c2 = connect_with(&d, "0", NULL);
                cr_assert_eq(stat_of(c, "rings_now"), 1, "one of the two clients has rings");
                run_random(c, 300, 3, 11 + (uint64_t)polls);
                run_random(c2, 40, 2, 21 + (uint64_t)polls);
                gemmd_disconnect(c2);
                gemmd_disconnect(c);
                /* A session's rings go with it. */
                c = connect_with(&d, "0", NULL);
                for (int i = 0; stat_of(c, "rings_now") != 0; i++) {
                        cr_assert_lt(i, 1000, "the rings of a closed session are still counted");
                        usleep(1000);
                }
                gemmd_disconnect(c);
                cr_assert_eq(e2e_daemon_stop(&d), 0);
        }
}

Test(ring, a_client_or_daemon_without_rings_keeps_to_the_socket)
{
        /* A client that declines them, then a daemon that does. */
        static const struct {
                const char *flag, *value, *client_ring;
        } way[2] = {{"--rings", "yes", "0"}, {"--rings", "no", NULL}};
        struct e2e_daemon d;
        gemmd_client *c;

        for (int i = 0; i < 2; i++) {
                cr_assert_eq(e2e_daemon_start(&d, way[i].flag, way[i].value, NULL), 0);
                c = connect_with(&d, way[i].client_ring, NULL);
                run_random(c, 60, 2, 5 + (uint64_t)i);
                cr_expect_eq(stat_of(c, "rings_now"), 0);
                cr_expect_eq(stat_of(c, "submits_ring"), 0);
                cr_expect_eq(stat_of(c, "replies_ring"), 0);
                gemmd_disconnect(c);
                cr_assert_eq(e2e_daemon_stop(&d), 0);
        }
}

/* A daemon that never polls and a client that never polls: each side
 * says in the ring that it sleeps, so Submits and Completions take the
 * socket (which wakes the other side), except when one side fell asleep
 * just as the other used the ring, which a RingKick answers. A missed
 * wake-up would leave the wait, or the poll on gemmd_fd, to time out. */
Test(ring, a_sleeping_daemon_and_a_sleeping_client_miss_nothing)
{
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct e2e_prob p;
        gemmd_client *c;
        uint64_t seed = 3, t0;
        char why[256];

        cr_assert_eq(e2e_daemon_start(&d, "--spin-us", "0", NULL), 0);
        c = connect_with(&d, NULL, "0");
        cr_assert_eq(e2e_arena_init(&ar, c, 1u << 20), 0);
        t0 = e2e_now_us();
        for (int i = 0; i < 200; i++) {
                struct e2e_spec s;
                gemmd_ticket t;
                double err;
                int r;

                e2e_spec_random(&s, &seed, 24);
                ar.used = 0;
                cr_assert_eq(e2e_prob_place(&p, &s, &ar, &seed), 0);
                cr_assert_eq(gemmd_submit(c, &p.op, 1, GEMMD_PRIO_NORMAL, &t), 0);
                if (i % 2) {
                        /* An event loop's way: poll the descriptor. */
                        gemmd_ticket got;

                        while ((r = gemmd_poll(c, &got)) == 0) {
                                struct pollfd pf = {gemmd_fd(c), POLLIN, 0};

                                cr_assert_eq(poll(&pf, 1, 5000), 1, "gemmd_fd not woken (op %d)", i);
                        }
                        cr_assert_eq(r, 1);
                        cr_assert_eq(got, t);
                        r = gemmd_wait(c, t, 0, NULL, 0);
                } else {
                        r = gemmd_wait(c, t, 5000, NULL, 0);
                }
                cr_assert_eq(r, 0, "op %d: %s", i, gemmd_strerror(r));
                cr_assert_eq(e2e_prob_check(&p, &err, why, sizeof(why)), 0, "op %d: %s", i, why);
                e2e_prob_free(&p);
        }
        /* 200 round trips, far below the 5 s a missed wake-up costs. */
        cr_expect_lt(e2e_now_us() - t0, 5000000);
        gemmd_disconnect(c);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* ---- by hand ------------------------------------------------------------ */

/* A connection spoken by hand (tests/hard_util.h), with its rings. */
struct raw {
        struct hard_raw h;
        struct gemmd_ring *ring; /* mapped RING_FILE long */
        _Atomic uint64_t *words; /* in it */
        uint32_t sq_head, cq_tail;
};

static void raw_open(struct raw *r, const struct e2e_daemon *d)
{
        memset(r, 0, sizeof(*r));
        cr_assert_eq(hard_raw_open(&r->h, d->sock), 0);
}

static void raw_close(struct raw *r)
{
        hard_raw_close(&r->h);
        if (r->ring)
                munmap(r->ring, RING_FILE);
        memset(r, 0, sizeof(*r));
}

/* Sends env as one frame, with fd (>= 0) as SCM_RIGHTS. */
static void raw_send(struct raw *r, uint64_t id, Gemmd__V1__Envelope *env, int fd)
{
        cr_assert_eq(hard_raw_send(&r->h, id, env, fd >= 0 ? &fd : NULL, fd >= 0, 0), 0);
}

/* The next frame on the socket; it lives until the next raw_recv. */
static Gemmd__V1__Envelope *raw_recv(struct raw *r)
{
        Gemmd__V1__Envelope *env = hard_raw_recv(&r->h, RECV_TIMEOUT_MS);

        cr_assert_not_null(env, "no frame from gemmd (%s)", r->h.eof ? "end of stream" : "timeout or garbage");
        return env;
}

/* The next frame that is not a RingKick. */
static Gemmd__V1__Envelope *raw_recv_reply(struct raw *r)
{
        Gemmd__V1__Envelope *env;

        while ((env = raw_recv(r))->body_case == GEMMD__V1__ENVELOPE__BODY_RING_KICK)
                ;
        return env;
}

static void expect_error(struct raw *r, Gemmd__V1__Code code, const char *what)
{
        Gemmd__V1__Envelope *env = raw_recv_reply(r);

        cr_assert_eq(env->body_case, GEMMD__V1__ENVELOPE__BODY_ERROR, "%s: body %d", what,
                     (int)env->body_case);
        cr_assert_eq(env->error->code, code, "%s: code %d (%s), expected %d", what, (int)env->error->code,
                     env->error->message ? env->error->message : "", (int)code);
}

/* The daemon closes the connection (a reset counts: it may close with
 * our last kick unread). */
static void expect_eof(struct raw *r, const char *what)
{
        cr_assert(hard_raw_wait_eof(&r->h, RECV_TIMEOUT_MS), "%s: the connection stays open", what);
}

/* Hello, and the daemon's HelloReply saying it takes rings. */
static void raw_hello(struct raw *r)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
        Gemmd__V1__Hello h = GEMMD__V1__HELLO__INIT;

        h.protocol_version = GEMMD_PROTOCOL_VERSION;
        h.client_name = "e2e-ring";
        env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO;
        env.hello = &h;
        raw_send(r, 1, &env, -1);
        rep = raw_recv(r);
        cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_HELLO_REPLY);
        cr_assert_eq(rep->hello_reply->ring_version, GEMMD_RING_VERSION);
}

/* A stats round trip: the session still works. */
static void raw_alive(struct raw *r, uint64_t id)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
        Gemmd__V1__StatsRequest q = GEMMD__V1__STATS_REQUEST__INIT;

        env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST;
        env.stats_request = &q;
        raw_send(r, id, &env, -1);
        rep = raw_recv_reply(r);
        cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_STATS_REPLY, "body %d", (int)rep->body_case);
        cr_assert_eq(rep->request_id, id);
}

/* A memfd of `bytes`, sealed against shrinking if `seal`. */
static int ring_fd(uint64_t bytes, int seal)
{
        int fd = seal ? hard_memfd(bytes) : memfd_create("e2e-ring", MFD_CLOEXEC);

        cr_assert_geq(fd, 0);
        if (!seal)
                cr_assert_eq(ftruncate(fd, (off_t)bytes), 0);
        return fd;
}

/* Sends RingAttach (with fd unless it is < 0) and returns the answer. */
static Gemmd__V1__Envelope *raw_attach(struct raw *r, uint64_t id, uint32_t version, uint64_t bytes,
                                       int fd)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__RingAttach m = GEMMD__V1__RING_ATTACH__INIT;

        m.version = version;
        m.bytes = bytes;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_RING_ATTACH;
        env.ring_attach = &m;
        raw_send(r, id, &env, fd);
        return raw_recv_reply(r);
}

/* Sends RingAttach and returns the code of the Error it must get. */
static int attach_refused(struct raw *r, uint64_t id, uint32_t version, uint64_t bytes, int fd)
{
        Gemmd__V1__Envelope *rep = raw_attach(r, id, version, bytes, fd);

        cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_ERROR, "RingAttach %llu: body %d",
                     (unsigned long long)id, (int)rep->body_case);
        cr_assert(rep->error->message && *rep->error->message);
        return (int)rep->error->code;
}

/* Attaches a good ring and maps it. */
static void raw_attach_ok(struct raw *r)
{
        int fd = ring_fd(RING_FILE, 1);
        Gemmd__V1__Envelope *rep = raw_attach(r, 2, GEMMD_RING_VERSION, RING_FILE, fd);

        cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_ACK, "body %d", (int)rep->body_case);
        r->ring = mmap(NULL, RING_FILE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        cr_assert_neq(r->ring, MAP_FAILED);
        r->words = (_Atomic uint64_t *)((char *)r->ring + RING_WORDS_OFF);
        close(fd);
}

static void raw_kick(struct raw *r)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__RingKick k = GEMMD__V1__RING_KICK__INIT;

        env.body_case = GEMMD__V1__ENVELOPE__BODY_RING_KICK;
        env.ring_kick = &k;
        raw_send(r, 0, &env, -1);
}

/* Puts env in the submission ring (waiting for room) and, if `kick`,
 * kicks a loop that said it sleeps, as a client must. */
static void ring_send(struct raw *r, uint64_t id, Gemmd__V1__Envelope *env, int kick)
{
        struct ring_slot *sl;
        size_t n;

        env->request_id = id;
        n = gemmd__v1__envelope__get_packed_size(env);
        cr_assert_leq(n, RING_BODY);
        for (int i = 0; ring_room(&r->ring->sq, r->sq_head, RING_SQ) <= 0; i++) {
                cr_assert_lt(i, 10000, "the daemon took nothing from the ring for 10 s");
                usleep(1000);
        }
        sl = &r->ring->s[r->sq_head % RING_SQ];
        sl->len = (uint32_t)gemmd__v1__envelope__pack(env, sl->body);
        if (ring_publish(&r->ring->sq, ++r->sq_head) && kick)
                raw_kick(r);
}

/* A 2 x 2 x 2 f32 GEMM with inline operands: C = A B with a = 1 2 3 4,
 * b = 5 6 7 8 column-major. */
static const float gemm_c[4] = HARD_GEMM2_C;

/* A daemon whose loops never poll (--spin-us 0) and that lets clients
 * poll while at most poll_max sessions have work in flight, a session with
 * rings on it, and its loop asleep, as its flag in the ring says. */
static void open_beside_a_sleeping_loop(struct e2e_daemon *d, struct raw *r, const char *poll_max)
{
        cr_assert_eq(e2e_daemon_start(d, "--spin-us", "0", "--client-poll-max", poll_max, NULL), 0);
        raw_open(r, d);
        raw_hello(r);
        raw_attach_ok(r);
        for (int i = 0; !atomic_load(&r->ring->sq.flag); i++) {
                cr_assert_lt(i, 5000, "the loop never said it sleeps");
                usleep(1000);
        }
}

static void ring_send_gemm(struct raw *r, uint64_t id, int kick)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        struct hard_gemm2 g;

        hard_gemm2_submit(&g, &env);
        ring_send(r, id, &env, kick);
}

/* Checks one Completion of ring_send_gemm and marks its id seen. */
static void take_completion(const Gemmd__V1__Envelope *env, uint8_t *seen, uint64_t first, uint64_t n)
{
        const Gemmd__V1__OpResult *res;

        cr_assert_eq(env->body_case, GEMMD__V1__ENVELOPE__BODY_COMPLETION, "body %d", (int)env->body_case);
        cr_assert(env->request_id >= first && env->request_id < first + n, "id %llu",
                  (unsigned long long)env->request_id);
        cr_assert_eq(seen[env->request_id - first], 0, "id %llu twice", (unsigned long long)env->request_id);
        seen[env->request_id - first] = 1;
        cr_assert_eq(env->completion->n_results, 1);
        res = env->completion->results[0];
        cr_assert_eq(res->status, GEMMD__V1__CODE__OK);
        cr_assert_eq(res->c_data.len, sizeof(gemm_c));
        cr_assert_eq(memcmp(res->c_data.data, gemm_c, sizeof(gemm_c)), 0);
}

Test(ring, every_ring_attach_the_daemon_cannot_trust_is_refused_and_the_session_goes_on)
{
        struct e2e_daemon d;
        struct raw r;
        int fd;

        cr_assert_eq(e2e_daemon_start(&d, NULL), 0);
        raw_open(&r, &d);
        raw_hello(&r);
        cr_assert_eq(attach_refused(&r, 10, GEMMD_RING_VERSION, RING_FILE, -1),
                     GEMMD__V1__CODE__PROTOCOL, "no descriptor");
        /* Not sealed: the client could cut it short under the mapping. */
        fd = ring_fd(RING_FILE, 0);
        cr_assert_eq(attach_refused(&r, 11, GEMMD_RING_VERSION, RING_FILE, fd),
                     GEMMD__V1__CODE__INVALID, "unsealed");
        close(fd);
        /* Shorter than the rings. */
        fd = ring_fd(RING_BYTES / 2, 1);
        cr_assert_eq(attach_refused(&r, 12, GEMMD_RING_VERSION, RING_FILE, fd),
                     GEMMD__V1__CODE__INVALID, "short file");
        close(fd);
        fd = ring_fd(RING_FILE, 1);
        cr_assert_eq(attach_refused(&r, 13, GEMMD_RING_VERSION, RING_FILE - 1, fd),
                     GEMMD__V1__CODE__INVALID, "wrong size");
        cr_assert_eq(attach_refused(&r, 14, GEMMD_RING_VERSION + 1, RING_FILE, fd),
                     GEMMD__V1__CODE__UNSUPPORTED, "wrong version");
        close(fd);
        raw_alive(&r, 15);
        raw_attach_ok(&r);
        fd = ring_fd(RING_FILE, 1);
        cr_assert_eq(attach_refused(&r, 16, GEMMD_RING_VERSION, RING_FILE, fd),
                     GEMMD__V1__CODE__INVALID, "a second ring");
        close(fd);
        /* The first ring still serves. */
        ring_send_gemm(&r, 100, 1);
        {
                uint8_t seen[1] = {0};

                for (int i = 0; ring_avail(&r.ring->cq, r.cq_tail, RING_CQ) == 0; i++) {
                        cr_assert_lt(i, 10000, "no completion in the ring");
                        usleep(1000);
                }
                take_completion(frame_unpack(&r.h.arena, r.ring->c[0].body, r.ring->c[0].len), seen, 100, 1);
        }
        raw_alive(&r, 17);
        raw_close(&r);

        /* A daemon without rings says so and refuses them. */
        cr_assert_eq(e2e_daemon_stop(&d), 0);
        cr_assert_eq(e2e_daemon_start(&d, "--rings", "no", NULL), 0);
        raw_open(&r, &d);
        {
                Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
                Gemmd__V1__Hello h = GEMMD__V1__HELLO__INIT;

                h.protocol_version = GEMMD_PROTOCOL_VERSION;
                env.body_case = GEMMD__V1__ENVELOPE__BODY_HELLO;
                env.hello = &h;
                raw_send(&r, 1, &env, -1);
                rep = raw_recv(&r);
                cr_assert_eq(rep->hello_reply->ring_version, 0);
        }
        fd = ring_fd(RING_FILE, 1);
        cr_assert_eq(attach_refused(&r, 2, GEMMD_RING_VERSION, RING_FILE, fd),
                     GEMMD__V1__CODE__UNSUPPORTED, "rings off");
        close(fd);
        raw_alive(&r, 3);
        raw_close(&r);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

Test(ring, a_broken_submission_ring_ends_its_session_and_no_other)
{
        struct e2e_daemon d;
        gemmd_client *other;
        struct raw r;

        cr_assert_eq(e2e_daemon_start(&d, NULL), 0);
        other = connect_with(&d, NULL, NULL);
        for (int how = 0; how < 3; how++) {
                raw_open(&r, &d);
                raw_hello(&r);
                raw_attach_ok(&r);
                if (how == 0) {
                        /* A head past everything the ring holds. */
                        atomic_store(&r.ring->sq.head, RING_SQ + 5);
                } else {
                        /* A slot that says it is empty, or longer than a slot. */
                        r.ring->s[0].len = how == 1 ? 0 : RING_BODY + 1;
                        ring_publish(&r.ring->sq, 1);
                }
                /* As a client must: kick a daemon that said it sleeps. */
                if (atomic_load(&r.ring->sq.flag))
                        raw_kick(&r);
                expect_error(&r, GEMMD__V1__CODE__PROTOCOL, "broken ring");
                expect_eof(&r, "broken ring");
                raw_close(&r);
                run_random(other, 10, 2, 40 + (uint64_t)how);
        }
        gemmd_disconnect(other);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

Test(ring, only_submit_may_come_through_the_ring)
{
        struct e2e_daemon d;
        struct raw r;
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__StatsRequest q = GEMMD__V1__STATS_REQUEST__INIT;

        cr_assert_eq(e2e_daemon_start(&d, NULL), 0);
        raw_open(&r, &d);
        raw_hello(&r);
        raw_attach_ok(&r);
        env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST;
        env.stats_request = &q;
        ring_send(&r, 20, &env, 1);
        expect_error(&r, GEMMD__V1__CODE__PROTOCOL, "stats through the ring");
        raw_alive(&r, 21);
        raw_close(&r);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* A client that never advances its completion tail: the ring fills, and
 * every Completion after that comes on the socket. None is lost or sent
 * twice; then, once the client takes the ring's, the ring serves again. */
Test(ring, completions_past_a_full_ring_take_the_socket_each_exactly_once)
{
        enum { N = RING_CQ + 40, FIRST = 1000 };
        struct e2e_daemon d;
        struct raw r;
        uint8_t *seen = calloc(N + 1, 1);
        int on_socket = 0;

        cr_assert_not_null(seen);
        cr_assert_eq(e2e_daemon_start(&d, "--max-inflight-ops", "1024", "--max-user-inflight-ops", "4096",
                                      "--max-queue-ops", "4096", NULL),
                     0);
        raw_open(&r, &d);
        raw_hello(&r);
        raw_attach_ok(&r);
        for (int i = 0; i < N; i++)
                ring_send_gemm(&r, FIRST + (uint64_t)i, 1);
        /* The ring's share: RING_CQ of them, left where they are. */
        for (int i = 0; ring_avail(&r.ring->cq, 0, RING_CQ) < RING_CQ; i++) {
                cr_assert_lt(i, 10000, "the completion ring did not fill");
                usleep(1000);
        }
        /* The rest on the socket. */
        while (on_socket < N - RING_CQ) {
                take_completion(raw_recv_reply(&r), seen, FIRST, N);
                on_socket++;
        }
        for (uint32_t t = 0; t < RING_CQ; t++) {
                const struct ring_slot *sl = &r.ring->c[t % RING_CQ];

                take_completion(frame_unpack(&r.h.arena, sl->body, sl->len), seen, FIRST, N);
        }
        ring_release(&r.ring->cq, r.cq_tail = RING_CQ);
        for (int i = 0; i < N; i++)
                cr_assert_eq(seen[i], 1, "id %d never completed", FIRST + i);
        /* With room again, the next one comes through the ring. */
        memset(seen, 0, N);
        ring_send_gemm(&r, FIRST, 1);
        for (int i = 0; ring_avail(&r.ring->cq, r.cq_tail, RING_CQ) == 0; i++) {
                cr_assert_lt(i, 10000, "no completion in the ring after it emptied");
                usleep(1000);
        }
        take_completion(frame_unpack(&r.h.arena, r.ring->c[r.cq_tail % RING_CQ].body,
                                     r.ring->c[r.cq_tail % RING_CQ].len),
                        seen, FIRST, N);
        raw_alive(&r, 5);
        raw_close(&r);
        free(seen);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* A Submit put in the ring of a loop that said it sleeps is taken once
 * the client kicks; a client that says it sleeps gets its Completion on
 * the socket, and one that does not, in the ring. */
Test(ring, the_kicks_and_sleep_flags_route_each_message)
{
        struct e2e_daemon d;
        struct raw r;
        uint8_t seen[2] = {0, 0};

        open_beside_a_sleeping_loop(&d, &r, "auto");
        /* Into the ring all the same: ring_send kicks, as the flag asks. */
        ring_send_gemm(&r, 500, 1);
        for (int i = 0; ring_avail(&r.ring->cq, r.cq_tail, RING_CQ) == 0; i++) {
                cr_assert_lt(i, 5000, "a kicked loop did not take the Submit");
                usleep(1000);
        }
        take_completion(frame_unpack(&r.h.arena, r.ring->c[0].body, r.ring->c[0].len), seen, 500, 2);
        ring_release(&r.ring->cq, ++r.cq_tail);
        /* Now the client sleeps: its next Completion takes the socket. */
        atomic_store(&r.ring->cq.flag, 1);
        ring_send_gemm(&r, 501, 1);
        take_completion(raw_recv_reply(&r), seen, 500, 2);
        cr_assert_eq(ring_avail(&r.ring->cq, r.cq_tail, RING_CQ), 0);
        raw_alive(&r, 7);
        raw_close(&r);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* Waits for a Completion in r's ring, checks it and gives its slot back. */
static void take_ring_completion(struct raw *r, uint8_t *seen, uint64_t first, uint64_t n)
{
        const struct ring_slot *sl;

        for (int i = 0; ring_avail(&r->ring->cq, r->cq_tail, RING_CQ) == 0; i++) {
                cr_assert_lt(i, 5000, "no Completion in the ring");
                usleep(1000);
        }
        sl = &r->ring->c[r->cq_tail % RING_CQ];
        take_completion(frame_unpack(&r->h.arena, sl->body, sl->len), seen, first, n);
        ring_release(&r->ring->cq, ++r->cq_tail);
}

/* Past --client-poll-max sessions with work in flight, each Completion
 * asks its client to sleep rather than poll (cq.no_poll), in the ring and
 * on the socket alike; within it, to poll. The session being answered
 * counts: its request is in flight until its Completion is out. */
Test(ring, completions_ask_clients_to_sleep_past_the_polling_budget)
{
        struct e2e_daemon d;
        struct raw r;
        uint8_t seen[3] = {0, 0, 0};

        open_beside_a_sleeping_loop(&d, &r, "0");
        cr_assert_eq(atomic_load(&r.ring->cq.no_poll), 0, "set before any Completion");
        ring_send_gemm(&r, 600, 1);
        take_ring_completion(&r, seen, 600, 3);
        cr_assert_eq(atomic_load(&r.ring->cq.no_poll), 1, "one session in flight, none may poll");
        /* Cleared by hand: a Completion on the socket (the client said it
         * sleeps) sets it again. */
        atomic_store(&r.ring->cq.no_poll, 0);
        atomic_store(&r.ring->cq.flag, 1);
        ring_send_gemm(&r, 601, 1);
        take_completion(raw_recv_reply(&r), seen, 600, 3);
        cr_assert_eq(atomic_load(&r.ring->cq.no_poll), 1, "not refreshed with a Completion on the socket");
        raw_close(&r);
        cr_assert_eq(e2e_daemon_stop(&d), 0);

        /* One session may poll: a hint left set is cleared. */
        open_beside_a_sleeping_loop(&d, &r, "1");
        atomic_store(&r.ring->cq.no_poll, 1);
        ring_send_gemm(&r, 602, 1);
        take_ring_completion(&r, seen, 600, 3);
        cr_assert_eq(atomic_load(&r.ring->cq.no_poll), 0, "a lone session was asked to sleep");
        raw_close(&r);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* A frame on the socket comes after every Submit the client put in its
 * ring before it, even when the loop sleeps and was not kicked: the stats
 * it asks for count that Submit. */
Test(ring, a_frame_on_the_socket_comes_after_the_submits_in_the_ring)
{
        struct e2e_daemon d;
        struct raw r;
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
        Gemmd__V1__StatsRequest q = GEMMD__V1__STATS_REQUEST__INIT;
        uint8_t seen[1] = {0};

        open_beside_a_sleeping_loop(&d, &r, "auto");
        /* Into the ring with no kick: only the next frame wakes the loop. */
        ring_send_gemm(&r, 700, 0);
        env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST;
        env.stats_request = &q;
        q.json = 1;
        raw_send(&r, 701, &env, -1);
        rep = raw_recv_reply(&r);
        while (rep->body_case == GEMMD__V1__ENVELOPE__BODY_COMPLETION) {
                take_completion(rep, seen, 700, 1);
                rep = raw_recv_reply(&r);
        }
        cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_STATS_REPLY, "body %d", (int)rep->body_case);
        cr_assert_eq(hard_json_number(rep->stats_reply->text, "submits_ring"), 1, "%s", rep->stats_reply->text);
        raw_close(&r);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* The daemon's CPU time so far, in clock ticks (utime + stime). */
static long long cpu_ticks(pid_t pid)
{
        char path[64], buf[1024], *p;
        long long ut = 0, st = 0;
        FILE *f;
        size_t n;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        f = fopen(path, "r");
        cr_assert_not_null(f);
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        /* Fields 14 and 15, counted after the ")" that ends the name. */
        p = strrchr(buf, ')');
        cr_assert_not_null(p);
        cr_assert_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &ut, &st), 2);
        return ut + st;
}

/* A client that fills its rings and never reads its socket: once its
 * unread replies pass --max-output-bytes the daemon takes no more of its
 * Submits, as it reads no more of its socket, and does not poll for it
 * meanwhile (a polling daemon, --spin-us 1000, would otherwise burn a
 * core on the waiting Submits). Reading the replies lets it go on. */
Test(ring, a_client_that_never_reads_has_its_ring_left_alone_without_a_busy_daemon)
{
        enum { FIRST = 10000, MAX = 20000 };
        struct e2e_daemon d;
        struct raw r;
        uint64_t id = FIRST;
        uint32_t tail, last = 0;
        long long t0;
        int still = 0;

        cr_assert_eq(e2e_daemon_start(&d, "--spin-us", "1000", "--max-output-bytes", "65536",
                                      "--max-inflight-ops", "1024", NULL),
                     0);
        raw_open(&r, &d);
        raw_hello(&r);
        raw_attach_ok(&r);
        /* Feed the ring until the daemon stops taking from it for 300 ms. */
        while (still < 300) {
                if (ring_room(&r.ring->sq, r.sq_head, RING_SQ) > 0 && id < FIRST + MAX) {
                        ring_send_gemm(&r, id++, 1);
                        continue;
                }
                usleep(1000);
                tail = atomic_load(&r.ring->sq.tail);
                still = tail == last ? still + 1 : 0;
                last = tail;
        }
        cr_assert_lt(id, FIRST + MAX, "the daemon took all %d Submits of a client that reads nothing", MAX);
        cr_assert_neq(atomic_load(&r.ring->sq.head), atomic_load(&r.ring->sq.tail), "nothing left waiting");
        /* Idle with Submits waiting: under a tenth of a core over a second. */
        t0 = cpu_ticks(d.pid);
        usleep(1000000);
        cr_expect_lt(cpu_ticks(d.pid) - t0, sysconf(_SC_CLK_TCK) / 10, "the daemon polls for a stalled client");
        /* The client reads its replies: every Submit is answered, once. */
        {
                uint64_t total = id - FIRST, seen = 0;

                for (int idle = 0; seen < total;) {
                        int n = ring_avail(&r.ring->cq, r.cq_tail, RING_CQ);
                        struct pollfd pf = {r.h.fd, POLLIN, 0};

                        cr_assert_geq(n, 0);
                        if (n > 0) {
                                seen += (uint64_t)n;
                                r.cq_tail += (uint32_t)n;
                                ring_release(&r.ring->cq, r.cq_tail);
                                idle = 0;
                        } else if (poll(&pf, 1, 10) == 1) {
                                /* A Completion, or a refusal at admission (the
                                 * ring can be taken faster than ops finish). */
                                Gemmd__V1__Envelope *env = raw_recv(&r);

                                if (env->body_case == GEMMD__V1__ENVELOPE__BODY_COMPLETION ||
                                    (env->body_case == GEMMD__V1__ENVELOPE__BODY_ERROR &&
                                     env->error->code == GEMMD__V1__CODE__BUSY))
                                        seen++;
                                idle = 0;
                        } else {
                                cr_assert_lt(++idle, 1000,
                                             "%llu of %llu answers, then nothing for 10 s (submission "
                                             "ring: head %u, tail %u, flag %u; completion ring: head %u, "
                                             "tail %u, flag %u)",
                                             (unsigned long long)seen, (unsigned long long)total,
                                             atomic_load(&r.ring->sq.head), atomic_load(&r.ring->sq.tail),
                                             atomic_load(&r.ring->sq.flag), atomic_load(&r.ring->cq.head),
                                             atomic_load(&r.ring->cq.tail), atomic_load(&r.ring->cq.flag));
                        }
                }
                cr_assert_eq(seen, total);
                cr_assert_eq(atomic_load(&r.ring->sq.head), atomic_load(&r.ring->sq.tail));
        }
        raw_alive(&r, 9);
        raw_close(&r);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* ---- polling, as the daemon's load allows ------------------------------- */

/* A 1024^3 f32 GEMM placed in c's own buffer: on the CPU backend of a
 * small machine it runs for tens of milliseconds at least. */
static void long_gemm(gemmd_client *c, struct e2e_arena *ar, struct e2e_prob *p, uint64_t seed)
{
        const struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 1024, .n = 1024, .k = 1024,
                                   .alpha = 1.0f};

        cr_assert_eq(e2e_arena_init(ar, c, 16u << 20), 0);
        cr_assert_eq(e2e_prob_place(p, &s, ar, &seed), 0);
}

/* What the hint is judged by: the sessions with ops in flight. Two
 * clients' long GEMMs are two, and none once they are answered. */
Test(ring, the_daemon_counts_the_sessions_with_work_in_flight)
{
        struct e2e_daemon d;
        gemmd_client *c[2], *obs;
        struct e2e_arena ar[2];
        struct e2e_prob p[2];
        gemmd_ticket t[2];
        long long busy = 0;

        cr_assert_eq(e2e_daemon_start(&d, NULL), 0);
        obs = connect_with(&d, NULL, NULL);
        for (int i = 0; i < 2; i++) {
                c[i] = connect_with(&d, NULL, NULL);
                long_gemm(c[i], &ar[i], &p[i], 31 + (uint64_t)i);
        }
        cr_assert_eq(stat_of(obs, "busy_sessions"), 0);
        for (int i = 0; i < 2; i++) {
                cr_assert_eq(gemmd_submit(c[i], &p[i].op, 1, GEMMD_PRIO_NORMAL, &t[i]), 0);
                cr_assert_eq(e2e_round_trip(c[i]), 0); /* admitted */
        }
        busy = stat_of(obs, "busy_sessions");
        cr_assert_eq(busy, 2, "%lld sessions counted busy while two GEMMs run", busy);
        for (int i = 0; i < 2; i++)
                cr_assert_eq(gemmd_wait(c[i], t[i], 30000, NULL, 0), 0);
        for (int i = 0; (busy = stat_of(obs, "busy_sessions")) != 0; i++) {
                cr_assert_lt(i, 2000, "%lld sessions still counted busy", busy);
                usleep(1000);
        }
        for (int i = 0; i < 2; i++) {
                e2e_prob_free(&p[i]);
                gemmd_disconnect(c[i]);
        }
        gemmd_disconnect(obs);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* A library client that would poll for a whole second (GEMMD_SPIN_US)
 * sleeps through a long wait once a Completion asked it to (budget 0): it
 * tells the daemon so (cq.flag), which then answers on the socket, and its
 * thread takes next to no CPU. Where nothing asked it (a daemon with room
 * for it), it polls through the wait and takes the answer from its ring. */
Test(ring, a_library_client_sleeps_when_asked_and_polls_otherwise)
{
        for (int budget = 0; budget < 2; budget++) {
                struct e2e_daemon d;
                struct e2e_arena ar;
                struct e2e_prob p;
                struct timespec a, b;
                gemmd_client *c;
                gemmd_ticket t;
                long long ring0;
                uint64_t w0;
                double cpu, wall;

                cr_assert_eq(e2e_daemon_start(&d, "--client-poll-max", budget ? "64" : "0", NULL), 0);
                c = connect_with(&d, NULL, "1000000");
                long_gemm(c, &ar, &p, 41);
                /* The first answer brings the daemon's hint. */
                cr_assert_eq(gemmd_submit(c, &p.op, 1, GEMMD_PRIO_NORMAL, &t), 0);
                cr_assert_eq(gemmd_wait(c, t, 30000, NULL, 0), 0);
                ring0 = stat_of(c, "replies_ring") + stat_of(c, "replies_word");
                e2e_prob_reset(&p);
                cr_assert_eq(gemmd_submit(c, &p.op, 1, GEMMD_PRIO_NORMAL, &t), 0);
                w0 = e2e_now_us();
                clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
                cr_assert_eq(gemmd_wait(c, t, 30000, NULL, 0), 0);
                clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
                wall = (double)(e2e_now_us() - w0);
                cpu = (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3;
                /* In its ring: by a Completion in a slot or by its word. */
                if (budget) {
                        cr_expect_eq(stat_of(c, "replies_ring") + stat_of(c, "replies_word"), ring0 + 1,
                                     "a polling client was answered on its socket");
                } else {
                        cr_expect_eq(stat_of(c, "replies_ring") + stat_of(c, "replies_word"), ring0,
                                     "a client asked to sleep was answered in its ring");
                        cr_expect_lt(cpu, wall / 20, "asked to sleep, it took %.0f us of CPU in a %.0f us wait",
                                     cpu, wall);
                }
                e2e_prob_free(&p);
                gemmd_disconnect(c);
                cr_assert_eq(e2e_daemon_stop(&d), 0);
        }
}

/* ---- the ring's own arithmetic ------------------------------------------ */

Test(ring, indices_the_other_side_made_impossible_are_caught)
{
        static struct gemmd_ring g;

        /* Producer at 10 with the consumer's tail at 3: 7 used. */
        atomic_store(&g.sq.tail, 3);
        cr_assert_eq(ring_room(&g.sq, 10, RING_SQ), RING_SQ - 7);
        /* A tail ahead of the head, or a whole ring behind it. */
        atomic_store(&g.sq.tail, 11);
        cr_assert_eq(ring_room(&g.sq, 10, RING_SQ), -1);
        atomic_store(&g.sq.tail, 10u - RING_SQ - 1);
        cr_assert_eq(ring_room(&g.sq, 10, RING_SQ), -1);
        /* Across the wrap of the 32-bit counters. */
        atomic_store(&g.sq.tail, UINT32_MAX - 1);
        cr_assert_eq(ring_room(&g.sq, 2, RING_SQ), RING_SQ - 4);
        atomic_store(&g.cq.head, 1);
        cr_assert_eq(ring_avail(&g.cq, UINT32_MAX, RING_CQ), 2);
        atomic_store(&g.cq.head, RING_CQ + 1);
        cr_assert_eq(ring_avail(&g.cq, 0, RING_CQ), -1);
        /* Arming sees what came meanwhile. */
        atomic_store(&g.cq.head, 5);
        cr_assert_eq(ring_arm(&g.cq, 4), 0);
        cr_assert_eq(atomic_load(&g.cq.flag), 0);
        cr_assert_eq(ring_arm(&g.cq, 5), 1);
        cr_assert_eq(atomic_load(&g.cq.flag), 1);
        cr_assert_eq(ring_publish(&g.cq, 6), 1);
        ring_disarm(&g.cq);
        cr_assert_eq(ring_publish(&g.cq, 7), 0);
}

/* ---- completion words ------------------------------------------------- */

/* A number from the daemon's JSON stats, asked on the raw connection. */
static long long raw_stat(struct raw *r, uint64_t id, const char *key)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
        Gemmd__V1__StatsRequest q = GEMMD__V1__STATS_REQUEST__INIT;

        q.json = 1;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_STATS_REQUEST;
        env.stats_request = &q;
        raw_send(r, id, &env, -1);
        rep = raw_recv_reply(r);
        cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_STATS_REPLY, "body %d", (int)rep->body_case);
        return hard_json_number(rep->stats_reply->text, key);
}

/* Registers a sealed memfd of `bytes` as a shared-memory buffer and maps
 * it here too. Returns the buffer id. */
static uint64_t raw_shm(struct raw *r, uint64_t rid, uint64_t bytes, void **map)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
        Gemmd__V1__BufferRegister reg = GEMMD__V1__BUFFER_REGISTER__INIT;
        int fd = hard_memfd(bytes);

        cr_assert_geq(fd, 0);
        *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        cr_assert_neq(*map, MAP_FAILED);
        reg.kind = GEMMD__V1__BUFFER_REGISTER__KIND__SHM;
        reg.bytes = bytes;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_REGISTER;
        env.buffer_register = &reg;
        raw_send(r, rid, &env, fd);
        close(fd);
        rep = raw_recv_reply(r);
        cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_BUFFER_REPLY, "body %d", (int)rep->body_case);
        return rep->buffer_reply->buffer_id;
}

/* The 2 x 2 x 2 GEMM of hard_gemm2 with A, B and C at 0, 16 and c_off of
 * buffer buf (which holds A and B), naming completion word `word`
 * (1 + its index, 0 none); c_off past the buffer makes it out of bounds. */
static void shm_gemm2(struct hard_gemm2 *g, Gemmd__V1__Envelope *env, uint64_t buf, uint64_t c_off,
                      uint32_t word)
{
        hard_gemm2_submit(g, env);
        g->a = (Gemmd__V1__Operand)GEMMD__V1__OPERAND__INIT;
        g->b = (Gemmd__V1__Operand)GEMMD__V1__OPERAND__INIT;
        g->c = (Gemmd__V1__Operand)GEMMD__V1__OPERAND__INIT;
        g->a.buffer_id = g->b.buffer_id = g->c.buffer_id = buf;
        g->b.offset = 16;
        g->c.offset = c_off;
        g->sub.word = word;
}

/* A request that names a completion word is answered there, once, and
 * only when it may be: every op a success, its results in the client's
 * memory, the client awake. Everything else gets its Completion or Error
 * and leaves the word alone. A word past the last, or named on rings of
 * version 1 (which have none), is refused and the session goes on. */
Test(ring, completion_words_answer_only_what_they_may)
{
        static const float ab[8] = {1, 2, 3, 4, 5, 6, 7, 8}, want[4] = HARD_GEMM2_C;
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
        struct hard_gemm2 g;
        struct e2e_daemon d;
        struct raw r;
        void *data;
        uint64_t did;
        long long maps;
        int fd;

        cr_assert_eq(e2e_daemon_start(&d, NULL), 0);

        /* Rings of version 1 are still taken, and have no words: one of the
         * daemon's mappings, where version 2's take two. */
        raw_open(&r, &d);
        raw_hello(&r);
        did = raw_shm(&r, 2, 4096, &data);
        maps = raw_stat(&r, 20, "mappings");
        fd = ring_fd(RING_BYTES, 1);
        rep = raw_attach(&r, 3, 1, RING_BYTES, fd);
        close(fd);
        cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_ACK, "version 1: body %d", (int)rep->body_case);
        cr_assert_eq(raw_stat(&r, 21, "mappings"), maps + 1);
        memcpy(data, ab, sizeof(ab));
        shm_gemm2(&g, &env, did, 32, 1);
        raw_send(&r, 4, &env, -1);
        expect_error(&r, GEMMD__V1__CODE__INVALID, "a word on rings without words");
        raw_alive(&r, 5);
        raw_close(&r);
        munmap(data, 4096);

        raw_open(&r, &d);
        raw_hello(&r);
        /* The words must be there: a file of version 2 that ends with the
         * rings is refused. */
        fd = ring_fd(RING_BYTES, 1);
        cr_assert_eq(attach_refused(&r, 2, GEMMD_RING_VERSION, RING_FILE, fd), GEMMD__V1__CODE__INVALID,
                     "no room for the words");
        close(fd);
        /* The first session's buffer and rings go when the daemon has
         * closed it, which another loop may still be doing: this session
         * has none yet. */
        for (int tries = 0; (maps = raw_stat(&r, 22, "mappings")) != 0 && tries < 5000; tries++)
                usleep(1000);
        cr_assert_eq(maps, 0, "the first session's mappings stayed");
        raw_attach_ok(&r);
        cr_assert_eq(raw_stat(&r, 23, "mappings"), maps + 2);
        did = raw_shm(&r, 3, 4096, &data);
        memcpy(data, ab, sizeof(ab));

        /* Past the last word. */
        shm_gemm2(&g, &env, did, 32, RING_WORDS + 1);
        raw_send(&r, 9, &env, -1);
        expect_error(&r, GEMMD__V1__CODE__INVALID, "word past the last");

        /* Answered by its word (the last one: every index is the client's
         * to name), the result in place, no Completion anywhere. */
        shm_gemm2(&g, &env, did, 32, RING_WORDS);
        ring_send(&r, 10, &env, 1);
        for (int i = 0; atomic_load(&r.words[RING_WORDS - 1]) == 0; i++) {
                cr_assert_lt(i, 10000, "the word was never stored");
                usleep(1000);
        }
        cr_assert_eq(atomic_load(&r.words[RING_WORDS - 1]), WORD_VALUE(10, WORD_OK | WORD_FINAL));
        cr_assert_eq(memcmp((char *)data + 32, want, sizeof(want)), 0, "C is not in place");
        raw_alive(&r, 11); /* the next frame on the socket is this answer */
        cr_assert_eq(ring_avail(&r.ring->cq, r.cq_tail, RING_CQ), 0, "a Completion came too");

        /* An inline C comes back in its Completion: the word is left alone. */
        hard_gemm2_submit(&g, &env);
        g.sub.word = 2;
        ring_send(&r, 12, &env, 1);
        for (int i = 0; ring_avail(&r.ring->cq, r.cq_tail, RING_CQ) == 0; i++) {
                cr_assert_lt(i, 10000, "no completion in the ring");
                usleep(1000);
        }
        {
                uint8_t seen[1] = {0};
                const struct ring_slot *sl = &r.ring->c[r.cq_tail % RING_CQ];

                take_completion(frame_unpack(&r.h.arena, sl->body, sl->len), seen, 12, 1);
                ring_release(&r.ring->cq, ++r.cq_tail);
        }
        cr_assert_eq(atomic_load(&r.words[1]), 0);

        /* A refused op gets its Error, and the word stays as it was. */
        shm_gemm2(&g, &env, did, 4096 - 8, 3);
        raw_send(&r, 13, &env, -1);
        expect_error(&r, GEMMD__V1__CODE__BOUNDS, "C out of its buffer");
        cr_assert_eq(atomic_load(&r.words[2]), 0);

        /* A client that said it sleeps is answered on its socket, which
         * wakes it; the word stays as it was. */
        atomic_store(&r.ring->cq.flag, 1);
        shm_gemm2(&g, &env, did, 48, 4);
        raw_send(&r, 14, &env, -1);
        rep = raw_recv_reply(&r);
        cr_assert_eq(rep->body_case, GEMMD__V1__ENVELOPE__BODY_COMPLETION, "body %d", (int)rep->body_case);
        cr_assert_eq(rep->request_id, 14);
        cr_assert_eq(rep->completion->results[0]->status, GEMMD__V1__CODE__OK);
        cr_assert_eq(atomic_load(&r.words[3]), 0);
        cr_assert_eq(memcmp((char *)data + 48, want, sizeof(want)), 0);
        atomic_store(&r.ring->cq.flag, 0);

        /* The same word named again, by the next request. */
        memset((char *)data + 32, 0, sizeof(want));
        shm_gemm2(&g, &env, did, 32, RING_WORDS);
        raw_send(&r, 15, &env, -1);
        for (int i = 0; atomic_load(&r.words[RING_WORDS - 1]) != WORD_VALUE(15, WORD_OK | WORD_FINAL); i++) {
                cr_assert_lt(i, 10000, "the word was never stored again");
                usleep(1000);
        }
        cr_assert_eq(memcmp((char *)data + 32, want, sizeof(want)), 0);
        raw_alive(&r, 16);
        munmap(data, 4096);
        raw_close(&r);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* Through the library, results are the same with completion words and
 * without ($GEMMD_WORDS=0), and only the former are answered by word. */
Test(ring, a_library_client_is_answered_by_its_words_and_gets_every_result_right)
{
        struct e2e_daemon d;

        cr_assert_eq(e2e_daemon_start(&d, NULL), 0);
        for (int words = 0; words < 2; words++) {
                gemmd_client *c;
                long long w0;

                setenv("GEMMD_WORDS", words ? "1" : "0", 1);
                c = connect_with(&d, NULL, "1000000");
                unsetenv("GEMMD_WORDS");
                w0 = stat_of(c, "replies_word");
                run_random(c, 400, 1, 11 + (uint64_t)words);
                run_random(c, 200, 5, 13 + (uint64_t)words);
                if (words)
                        cr_expect_gt(stat_of(c, "replies_word"), w0, "no request was answered by its word");
                else
                        cr_expect_eq(stat_of(c, "replies_word"), w0, "answered by a word it never named");
                gemmd_disconnect(c);
        }
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}
