/*
 * test_e2e_faults.c - faults on the CPU backend: clients SIGKILLed with
 * work queued and running cost the others nothing, their queued ops are
 * dropped, running ones finish before their memory is unmapped, and the
 * daemon's descriptors, mappings and memory return to their baseline; a
 * daemon that dies or restarts gives its clients GEMMD_EDISCONNECT, and
 * they connect again to the new one.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/hard_util.h"
#include "tests/e2e_assert.h"

TestSuite(faults, .init = e2e_setup, .fini = e2e_teardown, .timeout = 180);

/* Waits until the devices have nothing queued or in flight: a killed
 * client's memory stays mapped until the group that reads it is done.
 * Returns 0, or -1 on timeout. */
static int wait_device_idle(gemmd_client *c, int timeout_ms)
{
        char *json = e2e_idle_stats(c, timeout_ms);

        free(json);
        return json ? 0 : -1;
}

/* ---- killed clients ---------------------------------------------------------- */

#define DOOMED_SUBMITS 64
#define DOOMED_OPS (DOOMED_SUBMITS * 3)

/* A client that registers three 4 MiB buffers, queues a big op and
 * DOOMED_SUBMITS requests of three small ones, says so, and waits to be
 * killed. Never returns. */
static void doomed(const char *sock, int fd)
{
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F16, .m = 64, .n = 64, .k = 64,
                             .alpha = 1.0f, .beta = 0.0f};
        struct e2e_arena ar[3];
        struct e2e_prob p;
        struct gemmd_op ops[3], big;
        gemmd_client *c = NULL;
        gemmd_ticket t;
        uint64_t seed = 4;

        if (gemmd_connect(sock, &c))
                _exit(2);
        for (int i = 0; i < 3; i++)
                if (e2e_arena_init(&ar[i], c, 4u << 20))
                        _exit(3);
        cr_assert_eq(e2e_timed_op(c, 768, 768, 768, &big), 0);
        if (gemmd_submit(c, &big, 1, GEMMD_PRIO_HIGH, &t))
                _exit(4);
        if (e2e_prob_place(&p, &s, &ar[0], &seed))
                _exit(5);
        for (int i = 0; i < 3; i++)
                ops[i] = p.op;
        for (int i = 0; i < DOOMED_SUBMITS; i++)
                if (gemmd_submit(c, ops, 3, GEMMD_PRIO_LOW, &t))
                        _exit(6);
        if (write(fd, "q", 1) != 1)
                _exit(7);
        for (;;)
                pause();
}

/* A client that runs checked random ops until its pipe closes, then writes
 * how many it ran. */
static int bystander(const char *sock, int stop_fd, int out_fd)
{
        struct e2e_arena ar;
        uint64_t seed = 77, done = 0;
        gemmd_client *c = NULL;

        if (gemmd_connect(sock, &c) || e2e_arena_init(&ar, c, 4u << 20))
                return 2;
        for (;;) {
                struct pollfd pf = {stop_fd, POLLIN, 0};
                struct e2e_prob p[4];
                char why[300];

                if (poll(&pf, 1, 0) > 0)
                        break;
                ar.used = 0;
                for (int i = 0; i < 4; i++) {
                        struct e2e_spec s;

                        e2e_spec_random(&s, &seed, 64);
                        if (e2e_prob_place(&p[i], &s, &ar, &seed))
                                return 3;
                }
                if (e2e_run_checked(c, p, 4, 2, NULL, why, sizeof(why))) {
                        fprintf(stderr, "bystander: %s\n", why);
                        return 1;
                }
                for (int i = 0; i < 4; i++)
                        e2e_prob_free(&p[i]);
                done += 4;
        }
        gemmd_disconnect(c);
        return write(out_fd, &done, sizeof(done)) == sizeof(done) ? 0 : 4;
}

/* Runs one doomed client and kills it delay_us after it queued its work. */
static void kill_one(const struct e2e_daemon *d, int delay_us)
{
        int p[2];
        pid_t pid;
        char b;

        cr_assert_eq(pipe(p), 0);
        fflush(NULL);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                close(p[0]);
                doomed(d->sock, p[1]);
        }
        close(p[1]);
        cr_assert_eq(read(p[0], &b, 1), 1, "the doomed client did not queue its work");
        close(p[0]);
        if (delay_us)
                usleep((useconds_t)delay_us);
        kill(pid, SIGKILL);
        cr_assert_eq(waitpid(pid, NULL, 0), pid);
}

Test(faults, clients_killed_mid_flight_cost_others_nothing_and_resources_return)
{
        struct e2e_daemon d;
        struct hard_res base, after;
        gemmd_client *mon;
        int stop[2], out[2];
        uint64_t by_ops = 0;
        long long got, ops0, ops1;
        char b1[128], b2[128];
        pid_t by;

        /* One group at a time: what waits behind the running group is queued. */
        START(&d, "--threads", "2", "--max-groups-inflight", "1", NULL);
        mon = e2e_connect(&d);
        cr_assert_not_null(mon);
        kill_one(&d, 0); /* warm-up */
        cr_assert_eq(hard_wait_sessions(mon, 1, 20000, &got), 0, "%lld sessions", got);
        /* Its running group still holds its memory: the base is taken after. */
        cr_assert_eq(wait_device_idle(mon, 20000), 0, "the device did not go idle");
        cr_assert_eq(hard_res_settled(d.pid, &base, 5000), 0);
        ops0 = hard_device_number(mon, "ops");

        cr_assert_eq(pipe(stop) | pipe(out), 0);
        fflush(NULL);
        by = fork();
        cr_assert_geq(by, 0);
        if (by == 0) {
                close(stop[1]);
                close(out[0]);
                _exit(bystander(d.sock, stop[0], out[1]));
        }
        close(stop[0]);
        close(out[1]);
        for (int round = 0; round < 12; round++)
                kill_one(&d, (round % 4) * 5000);
        usleep(200000);
        close(stop[1]);
        cr_assert_eq(read(out[0], &by_ops, sizeof(by_ops)), sizeof(by_ops), "no bystander report");
        close(out[0]);
        cr_assert_eq(e2e_wait_child(by, 60000), 0, "the bystander saw a wrong or failed op");
        cr_assert_gt(by_ops, 0);

        cr_assert_eq(hard_wait_sessions(mon, 1, 20000, &got), 0, "%lld sessions", got);
        cr_assert_eq(wait_device_idle(mon, 20000), 0, "the device did not go idle");
        cr_assert_eq(hard_res_back(d.pid, &base, &after, 10000), 0);
        ops1 = hard_device_number(mon, "ops");
        fprintf(stderr, "12 clients killed with %d ops queued each; bystander ran %llu ops, all "
                        "right; the device ran %lld of the killed clients' ops; daemon before %s, "
                        "after %s\n",
                DOOMED_OPS + 1, (unsigned long long)by_ops, ops1 - ops0 - (long long)by_ops,
                hard_res_str(&base, b1, sizeof(b1)), hard_res_str(&after, b2, sizeof(b2)));
        /* Queued ops were dropped, not run. */
        cr_expect_lt(ops1 - ops0, (long long)by_ops + 12 * (DOOMED_OPS + 1) / 2);
        cr_expect_eq(after.fds, base.fds, "descriptors: %d before, %d after", base.fds, after.fds);
        cr_expect_eq(after.shm_maps, base.shm_maps, "mappings: %d before, %d after", base.shm_maps,
                     after.shm_maps);
        cr_expect_leq(after.rss_kb, base.rss_kb + 8192, "VmRSS %ld kB -> %ld kB", base.rss_kb,
                      after.rss_kb);
        gemmd_disconnect(mon);
        STOP(&d);
}

Test(faults, a_killed_clients_memory_stays_mapped_until_its_running_op_is_done)
{
        struct e2e_daemon d;
        struct hard_res during, after;
        gemmd_client *mon, *c;
        struct gemmd_op op;
        gemmd_ticket t;
        struct gemmd_result r;
        uint64_t t0, run_us, k;
        int p[2];
        pid_t pid;

        START(&d, "--threads", "1", NULL);
        mon = e2e_connect(&d);
        cr_assert_not_null(mon);
        /* Size an op of about a second here. */
        cr_assert_eq(e2e_timed_op(mon, 512, 512, 256, &op), 0);
        cr_assert_eq(gemmd_run(mon, &op, 1, &r), 0);
        k = r.run_us ? 256 * 1000000ull / r.run_us : 8192;
        k = k < 256 ? 256 : k > 16384 ? 16384 : k;
        run_us = r.run_us * k / 256;
        cr_assert_eq(pipe(p), 0);
        fflush(NULL);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                close(p[0]);
                if (gemmd_connect(d.sock, &c))
                        _exit(2);
                if (e2e_timed_op(c, 512, 512, (int64_t)k, &op) ||
                    gemmd_submit(c, &op, 1, GEMMD_PRIO_NORMAL, &t) || write(p[1], "s", 1) != 1)
                        _exit(3);
                for (;;)
                        pause();
        }
        close(p[1]);
        {
                char b;

                cr_assert_eq(read(p[0], &b, 1), 1);
        }
        close(p[0]);
        t0 = e2e_now_us();
        usleep(50000); /* it is running now */
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        usleep(100000); /* the daemon has seen the hang-up */
        cr_assert_eq(hard_res_read(d.pid, &during), 0);
        if (e2e_now_us() - t0 + 100000 < run_us)
                cr_expect_geq(during.shm_maps, 2, "the killed client's buffer was unmapped while "
                                                  "its op ran (%d mappings)", during.shm_maps);
        for (int tries = 0; tries < 1000; tries++) {
                cr_assert_eq(hard_res_read(d.pid, &after), 0);
                if (after.shm_maps == 1)
                        break;
                usleep(10000);
        }
        cr_expect_eq(after.shm_maps, 1, "the killed client's buffer stayed mapped");
        gemmd_disconnect(mon);
        STOP(&d);
}

/* ---- a daemon that dies or restarts ------------------------------------------ */


/* Connects, retrying while the daemon is away, as a client would. */
static gemmd_client *reconnect(const char *sock)
{
        gemmd_client *c = NULL;

        for (int tries = 0; tries < 500; tries++) {
                if (gemmd_connect(sock, &c) == 0)
                        return c;
                usleep(10000);
        }
        return NULL;
}

Test(faults, a_dead_or_restarted_daemon_gives_edisconnect_then_clients_reconnect)
{
        char sock[PATH_MAX], log[PATH_MAX], *text = NULL;
        struct gemmd_op slow;
        gemmd_client *c;
        gemmd_ticket t1, t2;
        gemmd_buffer id;
        uint64_t seed = 31;
        void *ptr;
        pid_t pid;
        int rc;

        snprintf(sock, sizeof(sock), "%s/restart.sock", e2e_dir);
        snprintf(log, sizeof(log), "%s/restart.log", e2e_dir);

        /* A crash: everything in flight and everything later fails with
         * GEMMD_EDISCONNECT. */
        pid = hard_spawn_daemon(sock, log, "--threads", "1", NULL);
        cr_assert_gt(pid, 0);
        c = reconnect(sock);
        cr_assert_not_null(c);
        e2e_assert_random_op(c, &seed, 48);
        cr_assert_eq(e2e_timed_op(c, 512, 512, 2048, &slow), 0);
        cr_assert_eq(gemmd_submit(c, &slow, 1, GEMMD_PRIO_NORMAL, &t1), 0);
        cr_assert_eq(gemmd_submit(c, &slow, 1, GEMMD_PRIO_NORMAL, &t2), 0);
        usleep(20000);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        rc = gemmd_wait(c, t1, 10000, NULL, 0);
        cr_expect_eq(rc, GEMMD_EDISCONNECT, "in flight: %s", gemmd_strerror(rc));
        rc = gemmd_wait(c, t2, 10000, NULL, 0);
        cr_expect_eq(rc, GEMMD_EDISCONNECT, "queued: %s", gemmd_strerror(rc));
        cr_expect_eq(gemmd_submit(c, &slow, 1, GEMMD_PRIO_NORMAL, &t1), GEMMD_EDISCONNECT);
        cr_expect_eq(gemmd_buffer_alloc(c, 4096, &id, &ptr), GEMMD_EDISCONNECT);
        cr_expect_eq(gemmd_stats(c, 0, &text), GEMMD_EDISCONNECT);
        gemmd_disconnect(c);
        /* Nobody listens on the socket file the dead daemon left. */
        rc = gemmd_connect(sock, &c);
        cr_expect(rc == -ECONNREFUSED || rc == -ENOENT, "connect to a dead daemon: %s",
                  gemmd_strerror(rc));

        /* A new daemon on the same path serves the reconnected client. */
        pid = hard_spawn_daemon(sock, log, "--threads", "1", NULL);
        cr_assert_gt(pid, 0);
        c = reconnect(sock);
        cr_assert_not_null(c);
        e2e_assert_random_op(c, &seed, 48);

        /* An orderly restart: work in flight is finished and answered, then
         * the connection ends. */
        cr_assert_eq(e2e_timed_op(c, 512, 512, 1024, &slow), 0);
        cr_assert_eq(gemmd_submit(c, &slow, 1, GEMMD_PRIO_NORMAL, &t1), 0);
        usleep(20000);
        kill(pid, SIGTERM);
        rc = gemmd_wait(c, t1, 30000, NULL, 0);
        cr_expect_eq(rc, 0, "work in flight at SIGTERM: %s", gemmd_strerror(rc));
        cr_expect_eq(e2e_wait_child(pid, 30000), 0, "gemmd did not exit 0 on SIGTERM");
        rc = gemmd_submit(c, &slow, 1, GEMMD_PRIO_NORMAL, &t2);
        if (rc == 0)
                rc = gemmd_wait(c, t2, 10000, NULL, 0);
        cr_expect(rc == GEMMD_EDISCONNECT || rc == GEMMD_ESHUTDOWN, "after the drain: %s",
                  gemmd_strerror(rc));
        gemmd_disconnect(c);
        pid = hard_spawn_daemon(sock, log, "--threads", "1", NULL);
        cr_assert_gt(pid, 0);
        c = reconnect(sock);
        cr_assert_not_null(c);
        e2e_assert_random_op(c, &seed, 48);
        gemmd_disconnect(c);
        kill(pid, SIGTERM);
        cr_expect_eq(e2e_wait_child(pid, 30000), 0);
}

/* ---- the device process ------------------------------------------------------ */


/* Runs n random problems placed in the client's shared buffer `ar` and
 * checks every result. */
static void run_shared_checked(gemmd_client *c, struct e2e_arena *ar, uint64_t *seed, size_t n)
{
        struct e2e_prob p[8];
        struct e2e_spec s;
        char why[256];

        cr_assert_leq(n, 8);
        for (size_t i = 0; i < n; i++) {
                e2e_spec_random(&s, seed, 48);
                cr_assert_eq(e2e_prob_place(&p[i], &s, ar, seed), 0, "arena full");
        }
        cr_assert_eq(e2e_run_checked(c, p, n, 2, NULL, why, sizeof(why)), 0, "%s", why);
        for (size_t i = 0; i < n; i++)
                e2e_prob_free(&p[i]);
}

/* The device process dies (here: SIGKILL from outside) with groups in
 * flight and more queued: the groups it had fail with GEMMD_EDEVICE, the
 * queued ones run in the next device process, the session stays, and the
 * shared memory it registered before serves again without a new
 * registration. The old process is reaped; the daemon stops cleanly. */
Test(faults, a_killed_device_process_fails_its_groups_then_another_serves_the_same_sessions)
{
        struct e2e_daemon d;
        struct e2e_arena ar;
        struct gemmd_op slow;
        gemmd_ticket t[4];
        gemmd_client *c;
        uint64_t seed = 41;
        long long pid0, pid1;

        /* Polling (--spin-us) as on a GPU: both ends of the rings poll. */
        cr_assert_eq(e2e_daemon_start(&d, "--device-process", "yes", "--threads", "1",
                                      "--max-groups-inflight", "1", "--spin-us", "50", NULL), 0);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 8u << 20), 0);
        run_shared_checked(c, &ar, &seed, 8);
        pid0 = hard_device_number(c, "process_pid");
        cr_assert_gt(pid0, 0, "no device process in the stats");
        cr_assert_eq(hard_device_number(c, "process_restarts"), 0);

        /* One op running (about a second on one thread), three queued
         * behind it, which form the next group. */
        cr_assert_eq(e2e_timed_op(c, 2048, 2048, 1024, &slow), 0);
        cr_assert_eq(gemmd_submit(c, &slow, 1, GEMMD_PRIO_NORMAL, &t[0]), 0);
        for (int tries = 0; tries < 1000 && hard_device_number(c, "inflight_groups") != 1; tries++)
                usleep(1000);
        for (int i = 1; i < 4; i++)
                cr_assert_eq(gemmd_submit(c, &slow, 1, GEMMD_PRIO_NORMAL, &t[i]), 0);
        usleep(20000);
        cr_assert_eq(kill((pid_t)pid0, SIGKILL), 0);
        for (int i = 0; i < 4; i++) {
                int rc = gemmd_wait(c, t[i], 120000, NULL, 0);

                if (i == 0)
                        cr_expect_eq(rc, GEMMD_EDEVICE, "the running op: %s", gemmd_strerror(rc));
                else
                        cr_expect_eq(rc, 0, "queued op %d: %s", i, gemmd_strerror(rc));
        }

        run_shared_checked(c, &ar, &seed, 8);
        pid1 = hard_device_number(c, "process_pid");
        cr_expect(pid1 > 0 && pid1 != pid0, "device process %lld, before %lld", pid1, pid0);
        cr_expect_eq(hard_device_number(c, "process_restarts"), 1);
        cr_expect(kill((pid_t)pid0, 0) < 0 && errno == ESRCH, "the old device process was not reaped");
        gemmd_disconnect(c);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
        cr_expect(kill((pid_t)pid1, 0) < 0 && errno == ESRCH, "the device process outlived the daemon");
}

/* A device fault injected by a debug op (a fault-injection build; on the
 * CPU backend the device process dies of it) fails that op's group with
 * GEMMD_EDEVICE and nothing else: another client connected before the
 * fault, and the faulting client itself, go on with the buffers they
 * registered, inline operands too, in a new device process. */
Test(faults, an_injected_device_fault_fails_its_group_and_the_sessions_go_on)
{
        struct e2e_daemon d;
        struct e2e_arena ar1, ar2;
        struct e2e_spec s;
        struct e2e_prob p;
        gemmd_client *c1, *c2;
        uint64_t seed = 43;
        char *fi = e2e_build_path("gemmd-fi");
        int rc;

        cr_assert(fi && access(fi, X_OK) == 0, "no gemmd-fi beside gemmd");
        free(fi);
        setenv("E2E_GEMMD", "gemmd-fi", 1);
        rc = e2e_daemon_start(&d, "--device-process", "yes", "--threads", "2", NULL);
        unsetenv("E2E_GEMMD");
        cr_assert_eq(rc, 0);
        c1 = e2e_connect(&d);
        c2 = e2e_connect(&d);
        cr_assert(c1 && c2);
        cr_assert_eq(e2e_arena_init(&ar1, c1, 4u << 20), 0);
        cr_assert_eq(e2e_arena_init(&ar2, c2, 4u << 20), 0);
        run_shared_checked(c1, &ar1, &seed, 4);
        run_shared_checked(c2, &ar2, &seed, 4);

        e2e_spec_random(&s, &seed, 32);
        cr_assert_eq(e2e_prob_inline(&p, &s, &seed), 0);
        p.op.flags |= GEMMD_OPF_DEBUG_FAULT;
        rc = gemmd_run(c1, &p.op, 1, NULL);
        cr_expect_eq(rc, GEMMD_EDEVICE, "the faulting op: %s", gemmd_strerror(rc));
        e2e_prob_free(&p);

        run_shared_checked(c2, &ar2, &seed, 4);
        run_shared_checked(c1, &ar1, &seed, 4);
        e2e_assert_random_op(c1, &seed, 48);
        cr_expect_eq(hard_device_number(c1, "process_restarts"), 1);
        cr_expect_eq(hard_device_number(c1, "ops_failed"), 1);
        gemmd_disconnect(c1);
        gemmd_disconnect(c2);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* The device process maps a client's shared memory when a group first
 * uses it, and unmaps it with the daemon: after the session closes (or
 * the client is killed), nothing of it stays mapped there, and the device
 * process's descriptors are back where they were. */
Test(faults, the_device_process_lets_go_of_a_closed_sessions_memory)
{
        struct e2e_daemon d;
        struct hard_res base, busy, after;
        struct e2e_arena ar;
        gemmd_client *mon, *c;
        uint64_t seed = 47;
        long long dev;

        cr_assert_eq(e2e_daemon_start(&d, "--device-process", "yes", "--threads", "2", NULL), 0);
        mon = e2e_connect(&d);
        cr_assert_not_null(mon);
        dev = hard_device_number(mon, "process_pid");
        cr_assert_gt(dev, 0);
        cr_assert_eq(hard_res_settled((pid_t)dev, &base, 5000), 0);

        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 4u << 20), 0);
        run_shared_checked(c, &ar, &seed, 4);
        cr_assert_eq(hard_res_read((pid_t)dev, &busy), 0);
        cr_expect_eq(busy.shm_maps, base.shm_maps + 1, "the device process maps %d, before %d",
                     busy.shm_maps, base.shm_maps);
        gemmd_disconnect(c);
        for (int tries = 0; tries < 500; tries++) {
                cr_assert_eq(hard_res_read((pid_t)dev, &after), 0);
                if (after.shm_maps == base.shm_maps && after.fds == base.fds)
                        break;
                usleep(10000);
        }
        cr_expect_eq(after.shm_maps, base.shm_maps, "the closed session's memory stayed mapped");
        cr_expect_eq(after.fds, base.fds, "device process descriptors %d, before %d", after.fds,
                     base.fds);
        gemmd_disconnect(mon);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* Whether process pid has ended: gone, or a zombie nobody reaps yet (its
 * parent died, and PID 1 of a container may not reap). */
static int process_ended(pid_t pid)
{
        char path[64], buf[256];
        FILE *f;
        const char *p;

        if (kill(pid, 0) < 0 && errno == ESRCH)
                return 1;
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        if (!(f = fopen(path, "re")))
                return 1;
        p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
        fclose(f);
        return p && p[1] == ' ' && p[2] == 'Z';
}

/* A daemon that dies (SIGKILL) takes its device process along: the device
 * process sees the end of its socket and exits. */
Test(faults, a_killed_daemon_leaves_no_device_process_behind)
{
        struct e2e_daemon d;
        gemmd_client *c;
        long long dev;
        int ended = 0;

        cr_assert_eq(e2e_daemon_start(&d, "--device-process", "yes", "--threads", "1", NULL), 0);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        dev = hard_device_number(c, "process_pid");
        cr_assert_gt(dev, 0);
        gemmd_disconnect(c);
        kill(d.pid, SIGKILL);
        cr_assert_eq(e2e_wait_child(d.pid, 10000), 128 + SIGKILL);
        d.pid = 0;
        for (int tries = 0; tries < 500 && !(ended = process_ended((pid_t)dev)); tries++)
                usleep(10000);
        cr_expect(ended, "device process %lld outlived its daemon", dev);
        if (!ended)
                kill((pid_t)dev, SIGKILL);
}
