/*
 * devmem.c - a user asking for device memory in a loop. Each CUDA IPC
 * registration is opened, and each release closed, on the device's worker
 * thread, which launches no group meanwhile; on a GPU an open takes up to
 * tens of milliseconds and a close waits for the device. One client
 * registering and unregistering as fast as it can must not take the device
 * from everyone else: past its share of the worker's time
 * (--max-user-task-share), its registrations wait and others' groups run.
 *
 * The fault-injection build's CPU backend takes registrations as a GPU
 * does, each open and close holding the worker for GEMMD_FI_DEVMEM_MS.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/e2e_assert.h"
#include "tests/hard_util.h"

TestSuite(attack_devmem, .init = e2e_setup, .fini = e2e_teardown, .timeout = 120);

#define OPEN_MS "20"
#define NREG 24

/* The registrations of one raw session, sent at once, and when each
 * answer came (read by a thread of its own). */
struct flood {
        struct hard_raw r;
        pthread_t reader;
        uint64_t t_sent;
        uint64_t t_reply[NREG];
        int ok, failed, nreplies;
};

static void *flood_read(void *arg)
{
        struct flood *f = arg;

        while (f->nreplies < NREG) {
                Gemmd__V1__Envelope *e = hard_raw_recv(&f->r, 30000);

                if (!e)
                        break;
                f->t_reply[f->nreplies++] = e2e_now_us();
                if (e->body_case == GEMMD__V1__ENVELOPE__BODY_BUFFER_REPLY)
                        f->ok++;
                else
                        f->failed++;
        }
        return NULL;
}

/* Sends NREG registrations of device memory (each its own allocation: a
 * handle of its own) and starts the reader of their answers. */
static void flood_start(struct flood *f, const char *sock)
{
        memset(f, 0, sizeof(*f));
        cr_assert_eq(hard_raw_open(&f->r, sock), 0);
        cr_assert_eq(hard_raw_hello(&f->r), 0);
        f->t_sent = e2e_now_us();
        for (int i = 0; i < NREG; i++)
                cr_assert_eq(hard_raw_send_ipc(&f->r, 100 + (uint64_t)i, GEMMD__V1__BUFFER_REGISTER__KIND__CUDA_IPC,
                                               (uint8_t)(i + 1), 4096),
                             0);
        cr_assert_eq(pthread_create(&f->reader, NULL, flood_read, f), 0);
}

/* Starts gemmd-fi whose registrations and closes take `ms` each, with
 * `share` (NULL: the default). */
static void start_devmem_ms(struct e2e_daemon *d, const char *share, const char *ms)
{
        const char *flags[] = {"--threads", "2", share ? "--max-user-task-share" : NULL, share, NULL};

        cr_assert_eq(e2e_fi_daemon_startv(d, "GEMMD_FI_DEVMEM_MS", ms, flags), 0, "gemmd-fi did not start");
}

static void start_devmem(struct e2e_daemon *d, const char *share)
{
        start_devmem_ms(d, share, OPEN_MS);
}

/* Clients that keep the device busy, as the share only holds a user back
 * while others have work: each runs one GEMM after another until stopped. */
struct busy {
        struct e2e_daemon *d;
        pthread_t thread;
        atomic_int stop;
        int runs, failed;
};

static void *busy_main(void *arg)
{
        struct busy *b = arg;
        gemmd_client *c = e2e_connect(b->d);
        struct gemmd_op op;

        if (!c || e2e_timed_op(c, 192, 192, 192, &op)) {
                b->failed++;
                return NULL;
        }
        while (!atomic_load(&b->stop)) {
                if (gemmd_run(c, &op, 1, NULL))
                        b->failed++;
                b->runs++;
        }
        gemmd_disconnect(c);
        return NULL;
}

static void busy_start(struct busy *b, int n, struct e2e_daemon *d)
{
        for (int i = 0; i < n; i++) {
                b[i] = (struct busy){.d = d};
                cr_assert_eq(pthread_create(&b[i].thread, NULL, busy_main, &b[i]), 0);
        }
        /* Each has run a GEMM: the device is busy. */
        for (int i = 0; i < n; i++)
                for (int t = 0; t < 1000 && !b[i].runs && !b[i].failed; t++)
                        usleep(10000);
}

static void busy_stop(struct busy *b, int n)
{
        for (int i = 0; i < n; i++)
                atomic_store(&b[i].stop, 1);
        for (int i = 0; i < n; i++) {
                pthread_join(b[i].thread, NULL);
                cr_expect_eq(b[i].failed, 0, "a busy client's GEMM failed");
                cr_expect_gt(b[i].runs, 0, "a busy client ran nothing");
        }
}

/* A flood of registrations, then another client's GEMM: returns how many
 * of the flood's answers came before that GEMM's. Every registration must
 * be answered, and granted. With `nbusy`, that many clients keep the
 * device busy meanwhile. */
static int answered_before_gemm(struct e2e_daemon *d, int nbusy, uint64_t *flood_us)
{
        struct busy busy[2];
        struct flood f;
        gemmd_client *c;
        uint64_t seed = 7, t_gemm;
        int before = 0;

        busy_start(busy, nbusy, d);
        flood_start(&f, d->sock);
        c = e2e_connect(d);
        cr_assert(c);
        e2e_assert_random_op(c, &seed, 24);
        t_gemm = e2e_now_us();
        pthread_join(f.reader, NULL);
        busy_stop(busy, nbusy);
        cr_expect_eq(f.ok, NREG, "registrations granted: %d of %d (%d refused)", f.ok, NREG, f.failed);
        for (int i = 0; i < f.nreplies; i++)
                before += f.t_reply[i] < t_gemm;
        *flood_us = f.nreplies ? f.t_reply[f.nreplies - 1] - f.t_sent : 0;
        /* Closing the session closes its memory: never held, so the daemon
         * still stops at once. */
        hard_raw_close(&f.r);
        gemmd_disconnect(c);
        return before;
}

/* While other clients keep the device busy: without a bound, the worker
 * runs every open before the GEMM's group; with a share of 5%, a burst of
 * them runs (250 ms of opens of 20 ms: about 12), the GEMM goes next, and
 * the rest are spread over the time their share takes to fill (20 ms at
 * 5%: 400 ms each). With the device idle, nothing waits. */
Test(attack_devmem, a_user_registering_device_memory_in_a_loop_leaves_the_device_to_others)
{
        struct e2e_daemon d;
        uint64_t flood_us;
        int before;
        char *log;

        start_devmem(&d, "100");
        before = answered_before_gemm(&d, 2, &flood_us);
        cr_expect_geq(before, NREG - 2, "unbounded: %d of %d opens ran before the GEMM", before, NREG);
        cr_assert_eq(e2e_daemon_stop(&d), 0);

        start_devmem(&d, "5");
        before = answered_before_gemm(&d, 2, &flood_us);
        cr_expect_leq(before, 16, "with the share: %d of %d opens ran before the GEMM", before, NREG);
        cr_expect_geq(before, 4, "with the share: only %d opens ran before the GEMM (the burst)", before);
        /* At least 8 opens past the burst, 400 ms apart. */
        cr_expect_geq(flood_us, 2500000, "the opens ended %llu us after they were sent",
                      (unsigned long long)flood_us);
        /* The device idle: the opens run one after another (24 x 20 ms). */
        answered_before_gemm(&d, 0, &flood_us);
        cr_expect_lt(flood_us, 2000000, "on an idle device the opens took %llu us",
                     (unsigned long long)flood_us);
        /* The stats count the tasks (48 opens and as many closes, once
         * their sessions are gone) and those that waited. */
        {
                gemmd_client *c = e2e_connect(&d);
                long long tasks = -1;

                cr_assert(c);
                for (int t = 0; t < 200 && (tasks = hard_device_number(c, "tasks")) < 2 * 2 * NREG; t++)
                        usleep(20000);
                cr_expect_eq(tasks, 2 * 2 * NREG, "%lld tasks", tasks);
                const long long held = hard_device_number(c, "tasks_held");

                cr_expect_geq(held, 8, "%lld tasks held", held);
                gemmd_disconnect(c);
        }
        cr_assert_eq(e2e_daemon_stop(&d), 0);
        log = e2e_read_file(d.log, NULL);
        cr_assert(log);
        cr_expect(strstr(log, "took more than its share of the worker's time (5%)"),
                  "no line about the held registrations in the log:\n%s", log);
        cr_expect(strstr(log, "tasks waited for their user's share"), "no count of held tasks at exit");
        free(log);
}

/* SIGTERM while registrations wait for their share: the drain runs them at
 * once (it waits for them), answers each, and the daemon exits 0 in about
 * the time the opens take, not the seconds the share would spread them
 * over. */
Test(attack_devmem, a_drain_does_not_wait_for_the_share)
{
        struct e2e_daemon d;
        struct flood f;
        uint64_t t0, stop_us;

        start_devmem(&d, NULL);
        flood_start(&f, d.sock);
        /* The burst has run and the rest wait. */
        usleep(600000);
        t0 = e2e_now_us();
        cr_assert_eq(e2e_daemon_stop(&d), 0);
        stop_us = e2e_now_us() - t0;
        pthread_join(f.reader, NULL);
        cr_expect_eq(f.ok, NREG, "registrations answered and granted: %d of %d (%d refused)", f.ok, NREG,
                     f.failed);
        cr_expect_lt(stop_us, 2000000, "the drain took %llu us", (unsigned long long)stop_us);
        hard_raw_close(&f.r);
}

/* Sends a release of buffer `id` as request rid and returns the answer's
 * body case, and in *us how long it took. */
static int release_timed(struct hard_raw *r, uint64_t rid, uint64_t id, uint64_t *us)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT, *rep;
        Gemmd__V1__BufferRelease rel = GEMMD__V1__BUFFER_RELEASE__INIT;
        uint64_t t0 = e2e_now_us();

        rel.buffer_id = id;
        env.body_case = GEMMD__V1__ENVELOPE__BODY_BUFFER_RELEASE;
        env.buffer_release = &rel;
        cr_assert_eq(hard_raw_send(r, rid, &env, NULL, 0, 0), 0);
        rep = hard_raw_recv(r, 10000);
        cr_assert(rep, "no answer to the release");
        cr_assert_eq(rep->request_id, rid);
        *us = e2e_now_us() - t0;
        return (int)rep->body_case;
}

/* A client's own device memory released: answered only once the daemon's
 * mapping is closed (a close here takes 300 ms), so that the client may
 * free it when gemmd_unregister returns; a second release of the same id
 * is refused at once, and the session goes on. */
Test(attack_devmem, a_release_of_device_memory_is_answered_once_it_is_closed)
{
        Gemmd__V1__Envelope *rep;
        struct e2e_daemon d;
        struct hard_raw r;
        uint64_t id, us;

        start_devmem_ms(&d, NULL, "300");
        cr_assert_eq(hard_raw_open(&r, d.sock), 0);
        cr_assert_eq(hard_raw_hello(&r), 0);
        cr_assert_eq(hard_raw_send_ipc(&r, 1, GEMMD__V1__BUFFER_REGISTER__KIND__CUDA_IPC, 9, 4096), 0);
        rep = hard_raw_recv(&r, 10000);
        cr_assert(rep && rep->body_case == GEMMD__V1__ENVELOPE__BODY_BUFFER_REPLY, "not registered");
        id = rep->buffer_reply->buffer_id;

        cr_expect_eq(release_timed(&r, 2, id, &us), GEMMD__V1__ENVELOPE__BODY_ACK);
        cr_expect_geq(us, 280000, "the release was answered %llu us after it was sent, before the close",
                      (unsigned long long)us);
        cr_expect_eq(release_timed(&r, 3, id, &us), GEMMD__V1__ENVELOPE__BODY_ERROR);
        cr_expect_lt(us, 250000, "a release of an unknown buffer took %llu us", (unsigned long long)us);
        cr_assert_eq(hard_raw_send_ipc(&r, 4, GEMMD__V1__BUFFER_REGISTER__KIND__CUDA_IPC, 9, 4096), 0);
        rep = hard_raw_recv(&r, 10000);
        cr_expect(rep && rep->body_case == GEMMD__V1__ENVELOPE__BODY_BUFFER_REPLY,
                  "the session does not register again");
        hard_raw_close(&r);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}
