/*
 * test_gpu_e2e.c - gemmd's CUDA backend end to end: the real daemon on a
 * GPU, clients with operands in shared memory (staged by the daemon), in
 * their own device memory (CUDA IPC), and inline. Skips where no GPU is.
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/e2e_util.h"

static int have_gpu(void)
{
        int n = 0;
        pid_t pid = fork();
        int st;

        /* Ask in a child: the parent must not own a CUDA context before it
         * forks the client processes. */
        if (pid == 0)
                _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 1);
        if (pid < 0 || waitpid(pid, &st, 0) < 0)
                return 0;
        return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

#define SKIP_WITHOUT_GPU()                                                       \
        do {                                                                     \
                if (!have_gpu())                                                 \
                        cr_skip_test("no CUDA device: GPU test skipped");        \
        } while (0)

TestSuite(gpu_e2e, .init = e2e_setup, .fini = e2e_teardown, .timeout = 300);

/* A number that follows `key` in the first device of a stats JSON text. */
static long long device_number(const char *json, const char *key)
{
        const char *dev = strstr(json, "\"devices\":[");
        char pat[64];
        const char *p;

        snprintf(pat, sizeof(pat), "\"%s\":", key);
        p = dev ? strstr(dev, pat) : NULL;
        return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* Random problems of every kind, dtype, op and layout, through shared memory
 * and inline, several submits in flight so they share groups. The shared
 * memory is page-locked off the worker while the first groups bounce it,
 * so both ways are checked. The device times a sample of the groups. */
Test(gpu_e2e, shared_and_inline_operands)
{
        struct e2e_daemon d;
        gemmd_client *c;
        struct e2e_arena ar;
        struct e2e_prob p[96];
        uint64_t seed = 42;
        char why[512];

        SKIP_WITHOUT_GPU();
        cr_assert_eq(e2e_daemon_start(&d, "--backend", "cuda", NULL), 0);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, 256u << 20), 0);
        for (int i = 0; i < 96; i++) {
                struct e2e_spec s;

                e2e_spec_random(&s, &seed, i < 64 ? 300 : 40);
                if (i < 64)
                        cr_assert_eq(e2e_prob_place(&p[i], &s, &ar, &seed), 0);
                else
                        cr_assert_eq(e2e_prob_inline(&p[i], &s, &seed), 0);
        }
        cr_assert_eq(e2e_run_checked(c, p, 96, 4, NULL, why, sizeof(why)), 0, "%s", why);
        /* Again, now that the arena has had time to be locked. */
        for (int i = 0; i < 96; i++)
                e2e_prob_reset(&p[i]);
        cr_assert_eq(e2e_run_checked(c, p, 96, 4, NULL, why, sizeof(why)), 0, "%s", why);
        {
                char *json = NULL;
                long long groups, timed;

                cr_assert_not_null(json = e2e_idle_stats(c, 5000));
                groups = device_number(json, "groups");
                timed = device_number(json, "timed_groups");
                cr_expect_gt(timed, 0, "%s", json);
                cr_expect_leq(timed, groups, "%s", json);
                /* --timing-every 16: 2 of the first 16 groups, 2 of every 16 after. */
                cr_expect_leq(timed, 2 * ((groups + 15) / 16), "%s", json);
                free(json);
        }
        for (int i = 0; i < 96; i++)
                e2e_prob_free(&p[i]);
        gemmd_disconnect(c);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* One client process: its operands in its own device memory, registered
 * through CUDA IPC, checked against the double-precision reference. */
static int ipc_client(const struct e2e_daemon *d, uint64_t seed, int nprob)
{
        gemmd_client *c = e2e_connect(d);
        int bad = 0;

        if (!c)
                return 2;
        for (int i = 0; i < nprob && !bad; i++) {
                struct e2e_spec s;
                struct e2e_prob p;
                void *dev[3] = {0};
                gemmd_buffer id[3] = {0};
                struct gemmd_result res;
                gemmd_ticket t;
                double err;
                char why[256];
                int rc;

                e2e_spec_random(&s, &seed, 200);
                if (e2e_prob_inline(&p, &s, &seed))
                        return 3;
                uint64_t bytes[3] = {p.abytes, p.bbytes, p.cbytes};
                const void *src[3] = {p.a, p.b, p.c0};

                for (int j = 0; j < 3; j++) {
                        /* The daemon's kernels do not wait on this process's
                         * work: a copy from pageable memory can return before
                         * its data is on the device, so synchronize. */
                        if (cudaMalloc(&dev[j], bytes[j]) != cudaSuccess ||
                            cudaMemcpy(dev[j], src[j], bytes[j], cudaMemcpyHostToDevice) != cudaSuccess ||
                            cudaDeviceSynchronize() != cudaSuccess) {
                                fprintf(stderr, "ipc client: cuda setup failed\n");
                                return 4;
                        }
                        rc = gemmd_register_device(c, dev[j], bytes[j], &id[j]);
                        if (rc) {
                                fprintf(stderr, "ipc client: register: %s\n", gemmd_strerror(rc));
                                return 5;
                        }
                }
                p.op.a = (struct gemmd_operand){.buffer = id[0]};
                p.op.b = (struct gemmd_operand){.buffer = id[1]};
                p.op.c = (struct gemmd_operand){.buffer = id[2]};
                rc = gemmd_submit(c, &p.op, 1, GEMMD_PRIO_NORMAL, &t);
                if (!rc)
                        rc = gemmd_wait(c, t, 60000, &res, 1);
                if (rc) {
                        fprintf(stderr, "ipc client: %s: %s\n", e2e_spec_str(&s, why, sizeof(why)),
                                gemmd_strerror(rc));
                        bad = 1;
                } else if (cudaMemcpy(p.c, dev[2], p.cbytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
                        bad = 1;
                } else if (e2e_prob_check(&p, &err, why, sizeof(why))) {
                        char desc[128];

                        fprintf(stderr, "ipc client: %s: %s\n", e2e_spec_str(&s, desc, sizeof(desc)), why);
                        bad = 1;
                }
                for (int j = 0; j < 3; j++) {
                        gemmd_unregister(c, id[j]);
                        cudaFree(dev[j]);
                }
                e2e_prob_free(&p);
        }
        gemmd_disconnect(c);
        return bad;
}

Test(gpu_e2e, two_processes_with_ipc_buffers)
{
        struct e2e_daemon d;
        pid_t kids[2];

        SKIP_WITHOUT_GPU();
        cr_assert_eq(e2e_daemon_start(&d, "--backend", "cuda", NULL), 0);
        for (int i = 0; i < 2; i++) {
                kids[i] = fork();
                cr_assert_geq(kids[i], 0);
                if (kids[i] == 0)
                        _exit(ipc_client(&d, 1000 + (uint64_t)i, 40));
        }
        for (int i = 0; i < 2; i++)
                cr_expect_eq(e2e_wait_child(kids[i], 240000), 0, "IPC client %d failed", i);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* A device range that claims more than its allocation is refused. */
Test(gpu_e2e, ipc_range_past_allocation_refused)
{
        struct e2e_daemon d;
        pid_t kid;

        SKIP_WITHOUT_GPU();
        cr_assert_eq(e2e_daemon_start(&d, "--backend", "cuda", NULL), 0);
        kid = fork();
        cr_assert_geq(kid, 0);
        if (kid == 0) {
                gemmd_client *c = e2e_connect(&d);
                void *p;
                gemmd_buffer id;
                int rc;

                if (!c || cudaMalloc(&p, 1 << 20) != cudaSuccess)
                        _exit(2);
                rc = gemmd_register_device(c, p, (1 << 20) + (4 << 20), &id);
                /* The library or the daemon must notice; either way no id. */
                _exit(rc == GEMMD_EBOUNDS ? 0 : 3);
        }
        cr_expect_eq(e2e_wait_child(kid, 60000), 0);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* Device memory allocated by the daemon, and a client stream that waits for
 * the ops through the daemon's IPC event instead of gemmd_wait: the copy of
 * C queued behind the wait must see the result. */
static int stream_client(const struct e2e_daemon *d, uint64_t seed, int nprob)
{
        gemmd_client *c = e2e_connect(d);
        cudaStream_t stream;
        int bad = 0;

        if (!c || cudaStreamCreate(&stream) != cudaSuccess)
                return 2;
        for (int i = 0; i < nprob && !bad; i++) {
                struct e2e_spec s;
                struct e2e_prob p;
                void *dev[3] = {0};
                gemmd_buffer id[3] = {0};
                gemmd_ticket t;
                double err;
                char why[256];
                int rc;

                e2e_spec_random(&s, &seed, 256);
                if (e2e_prob_inline(&p, &s, &seed))
                        return 3;
                uint64_t bytes[3] = {p.abytes, p.bbytes, p.cbytes};
                const void *src[3] = {p.a, p.b, p.c0};

                for (int j = 0; j < 3; j++) {
                        rc = gemmd_device_alloc(c, bytes[j], 0, &id[j], &dev[j]);
                        if (rc) {
                                fprintf(stderr, "stream client: device_alloc: %s\n", gemmd_strerror(rc));
                                return 4;
                        }
                        if (cudaMemcpy(dev[j], src[j], bytes[j], cudaMemcpyHostToDevice) != cudaSuccess ||
                            cudaDeviceSynchronize() != cudaSuccess)
                                return 5;
                }
                p.op.a = (struct gemmd_operand){.buffer = id[0]};
                p.op.b = (struct gemmd_operand){.buffer = id[1]};
                p.op.c = (struct gemmd_operand){.buffer = id[2]};
                rc = gemmd_submit(c, &p.op, 1, GEMMD_PRIO_NORMAL | GEMMD_SUBMIT_LAUNCH_EVENTS, &t);
                if (!rc)
                        rc = gemmd_stream_wait(c, t, stream, 60000);
                if (!rc && (cudaMemcpyAsync(p.c, dev[2], p.cbytes, cudaMemcpyDeviceToHost, stream) !=
                                    cudaSuccess ||
                            cudaStreamSynchronize(stream) != cudaSuccess))
                        rc = GEMMD_EDEVICE;
                if (rc) {
                        fprintf(stderr, "stream client: %s: %s\n", e2e_spec_str(&s, why, sizeof(why)),
                                gemmd_strerror(rc));
                        bad = 1;
                } else if (e2e_prob_check(&p, &err, why, sizeof(why))) {
                        char desc[128];

                        fprintf(stderr, "stream client: %s: %s\n", e2e_spec_str(&s, desc, sizeof(desc)), why);
                        bad = 1;
                }
                if (gemmd_wait(c, t, 60000, NULL, 0) != rc && !bad)
                        bad = 1;
                for (int j = 0; j < 3; j++)
                        gemmd_unregister(c, id[j]);
                e2e_prob_free(&p);
        }
        cudaStreamDestroy(stream);
        gemmd_disconnect(c);
        return bad;
}

Test(gpu_e2e, daemon_allocated_memory_and_stream_wait)
{
        struct e2e_daemon d;
        pid_t kid;

        SKIP_WITHOUT_GPU();
        cr_assert_eq(e2e_daemon_start(&d, "--backend", "cuda", NULL), 0);
        kid = fork();
        cr_assert_geq(kid, 0);
        if (kid == 0)
                _exit(stream_client(&d, 77, 40));
        cr_expect_eq(e2e_wait_child(kid, 240000), 0, "stream client failed");
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* A device fault (a kernel writing to an illegal address, injected through
 * a fault-injection build of the daemon) fails the ops of its group with a
 * clear status. With a device process (--device-process yes), the daemon
 * replaces that process, opens the client's device memory again in the
 * new one, and the same buffers work (exit 10). Without (--device-process
 * no), CUDA cannot give the daemon's own process a working context again
 * (scripts/cuda-recovery-probe.cu): it drains and exits 1 for its
 * supervisor to restart it, the client seeing a clear error (exit 11).
 * Anything else is a failure. */
static int fault_client(const struct e2e_daemon *d)
{
        gemmd_client *c = e2e_connect(d);
        uint64_t seed = 5;
        struct e2e_spec s;
        struct e2e_prob p;
        void *dev[3];
        gemmd_buffer id[3];
        struct gemmd_op bad;
        double err;
        char why[256];
        int rc;

        if (!c)
                return 2;
        e2e_spec_random(&s, &seed, 128);
        s.dtype = GEMMD_BF16;
        if (e2e_prob_inline(&p, &s, &seed))
                return 3;
        uint64_t bytes[3] = {p.abytes, p.bbytes, p.cbytes};
        const void *src[3] = {p.a, p.b, p.c0};

        for (int j = 0; j < 3; j++)
                if (cudaMalloc(&dev[j], bytes[j]) != cudaSuccess ||
                    cudaMemcpy(dev[j], src[j], bytes[j], cudaMemcpyHostToDevice) != cudaSuccess ||
                    cudaDeviceSynchronize() != cudaSuccess ||
                    gemmd_register_device(c, dev[j], bytes[j], &id[j]))
                        return 4;
        p.op.a = (struct gemmd_operand){.buffer = id[0]};
        p.op.b = (struct gemmd_operand){.buffer = id[1]};
        p.op.c = (struct gemmd_operand){.buffer = id[2]};
        for (int round = 0; round < 2; round++) {
                if (cudaMemcpy(dev[2], p.c0, p.cbytes, cudaMemcpyHostToDevice) != cudaSuccess ||
                    cudaDeviceSynchronize() != cudaSuccess)
                        return 5;
                rc = gemmd_run(c, &p.op, 1, NULL);
                if (round == 1 && (rc == GEMMD_EDEVICE || rc == GEMMD_EDISCONNECT ||
                                   rc == GEMMD_ESHUTDOWN)) {
                        fprintf(stderr, "fault client: after the fault: %s (%s)\n", gemmd_strerror(rc),
                                gemmd_last_error(c));
                        return 11;
                }
                if (rc || cudaMemcpy(p.c, dev[2], p.cbytes, cudaMemcpyDeviceToHost) != cudaSuccess ||
                    e2e_prob_check(&p, &err, why, sizeof(why))) {
                        fprintf(stderr, "fault client: round %d: %s %s\n", round,
                                rc ? gemmd_strerror(rc) : "", rc ? "" : why);
                        return 6;
                }
                if (round == 1)
                        break;
                bad = p.op;
                bad.flags |= GEMMD_OPF_DEBUG_FAULT;
                rc = gemmd_run(c, &bad, 1, NULL);
                if (rc != GEMMD_EDEVICE) {
                        fprintf(stderr, "fault client: the faulting op returned %s\n", gemmd_strerror(rc));
                        return 7;
                }
        }
        gemmd_disconnect(c);
        return 10;
}

static void fault_run(const char *devproc, int want)
{
        struct e2e_daemon d;
        char *fi = e2e_build_path("gemmd-fi");
        pid_t kid;
        int rc, st;

        SKIP_WITHOUT_GPU();
        if (!fi || access(fi, X_OK) != 0)
                cr_skip_test("no gemmd-fi (fault-injection build) beside the tests");
        free(fi);
        setenv("E2E_GEMMD", "gemmd-fi", 1);
        rc = e2e_daemon_start(&d, "--backend", "cuda", "--device-process", devproc, NULL);
        unsetenv("E2E_GEMMD");
        cr_assert_eq(rc, 0);
        kid = fork();
        cr_assert_geq(kid, 0);
        if (kid == 0)
                _exit(fault_client(&d));
        st = e2e_wait_child(kid, 240000);
        e2e_daemon_print_log(&d, "the fault-injection daemon so far");
        cr_assert_eq(st, want, "fault client: %d, expected %d", st, want);
        if (st == 10) {
                fprintf(stderr, "device fault: a new device process serves the same sessions\n");
                /* A second client, after the fault, is served normally. */
                kid = fork();
                if (kid == 0)
                        _exit(ipc_client(&d, 99, 10));
                cr_expect_eq(e2e_wait_child(kid, 240000), 0, "client after the fault failed");
                cr_assert_eq(e2e_daemon_stop(&d), 0);
        } else {
                fprintf(stderr, "device fault: not repairable in process; the daemon drains and exits 1\n");
                cr_assert_eq(e2e_wait_child(d.pid, 30000), 1, "gemmd should exit 1 for a restart");
                d.pid = 0;
        }
}

Test(gpu_e2e, device_fault_fails_its_group_then_a_new_device_process_serves)
{
        fault_run("yes", 10);
}

Test(gpu_e2e, device_fault_without_a_device_process_drains_for_a_restart)
{
        fault_run("no", 11);
}

/* ---- a fault under load ------------------------------------------------------ */

struct load {
        const struct e2e_daemon *d;
        uint64_t seed;
        int ms;
};

/* A client that keeps four requests of random problems in flight (shared
 * memory registered once) for ctx->ms and checks every result; an op that
 * fails with GEMMD_EDEVICE (its group was on the device at the fault) is
 * counted, any other failure is an error. Writes "ok failed" to fd. */
static int load_client(void *arg, int fd)
{
        struct load *l = arg;
        gemmd_client *c = e2e_connect(l->d);
        struct e2e_arena ar;
        uint64_t seed = l->seed, deadline = e2e_now_us() + (uint64_t)l->ms * 1000, ok = 0, failed = 0;
        char why[256];

        if (!c || e2e_arena_init(&ar, c, 16u << 20))
                return 2;
        while (e2e_now_us() < deadline) {
                struct e2e_prob p[4];
                gemmd_ticket t[4];
                struct e2e_spec s;
                double err;

                ar.used = 0; /* the last round's ops are done */
                for (int i = 0; i < 4; i++) {
                        e2e_spec_random(&s, &seed, 256);
                        if (e2e_prob_place(&p[i], &s, &ar, &seed) ||
                            gemmd_submit(c, &p[i].op, 1, GEMMD_PRIO_NORMAL, &t[i]))
                                return 3;
                }
                for (int i = 0; i < 4; i++) {
                        int rc = gemmd_wait(c, t[i], 120000, NULL, 0);

                        if (rc == GEMMD_EDEVICE) {
                                failed++;
                        } else if (rc) {
                                fprintf(stderr, "load client: %s\n", gemmd_strerror(rc));
                                return 4;
                        } else if (e2e_prob_check(&p[i], &err, why, sizeof(why))) {
                                fprintf(stderr, "load client: wrong result: %s\n", why);
                                return 5;
                        } else {
                                ok++;
                        }
                        e2e_prob_free(&p[i]);
                }
        }
        dprintf(fd, "%llu %llu\n", (unsigned long long)ok, (unsigned long long)failed);
        gemmd_disconnect(c);
        return 0;
}

/* Four clients keep the device busy; a fifth injects a device fault. Only
 * ops of the groups on the device at that moment fail (GEMMD_EDEVICE);
 * every other result is right, before and after; the clients keep their
 * sessions and buffers; the device process is replaced once. Prints how
 * long the device was away: from the faulting op's answer to the next
 * op served. */
Test(gpu_e2e, device_fault_under_load_fails_only_the_groups_in_flight)
{
        struct e2e_daemon d;
        struct load l[4];
        pid_t kid[4];
        int fd[4];
        char *fi = e2e_build_path("gemmd-fi"), *json = NULL;
        uint64_t seed = 61, ok = 0, failed = 0, t0, t1;
        struct e2e_spec s;
        struct e2e_prob p;
        gemmd_client *c;
        int rc;

        SKIP_WITHOUT_GPU();
        if (!fi || access(fi, X_OK) != 0)
                cr_skip_test("no gemmd-fi (fault-injection build) beside the tests");
        free(fi);
        setenv("E2E_GEMMD", "gemmd-fi", 1);
        rc = e2e_daemon_start(&d, "--backend", "cuda", "--device-process", "yes", NULL);
        unsetenv("E2E_GEMMD");
        cr_assert_eq(rc, 0);
        for (int i = 0; i < 4; i++) {
                l[i] = (struct load){.d = &d, .seed = 100 + (uint64_t)i, .ms = 5000};
                kid[i] = e2e_fork(load_client, &l[i], &fd[i]);
                cr_assert_gt(kid[i], 0);
        }
        usleep(1500000);
        /* Inline operands: this process owns no CUDA context. */
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        e2e_spec_random(&s, &seed, 64);
        cr_assert_eq(e2e_prob_inline(&p, &s, &seed), 0);
        p.op.flags |= GEMMD_OPF_DEBUG_FAULT;
        rc = gemmd_run(c, &p.op, 1, NULL);
        t0 = e2e_now_us();
        cr_expect_eq(rc, GEMMD_EDEVICE, "the faulting op: %s", gemmd_strerror(rc));
        e2e_prob_free(&p);
        for (;;) {
                char why[256];

                e2e_spec_random(&s, &seed, 64);
                cr_assert_eq(e2e_prob_inline(&p, &s, &seed), 0);
                rc = e2e_run_checked(c, &p, 1, 1, NULL, why, sizeof(why));
                e2e_prob_free(&p);
                if (rc == 0)
                        break;
                cr_assert_lt(e2e_now_us() - t0, 60000000ull, "not served again: %s", why);
        }
        t1 = e2e_now_us();
        for (int i = 0; i < 4; i++) {
                char buf[64] = {0};
                unsigned long long a = 0, b = 0;

                cr_expect_eq(e2e_wait_child(kid[i], 120000), 0, "load client %d failed", i);
                if (read(fd[i], buf, sizeof(buf) - 1) > 0 && sscanf(buf, "%llu %llu", &a, &b) == 2) {
                        ok += a;
                        failed += b;
                }
                close(fd[i]);
        }
        cr_assert_eq(gemmd_stats(c, 1, &json), 0);
        fprintf(stderr,
                "fault under load: 4 clients, %llu ops right, %llu failed with the fault's groups; "
                "served again %.1f ms after the faulting op was answered; device process "
                "started again %lld times\n",
                (unsigned long long)ok, (unsigned long long)failed, (t1 - t0) / 1e3,
                e2e_devices_sum(json, "process_restarts"));
        cr_expect_eq(e2e_devices_sum(json, "process_restarts"), 1);
        /* At most what was in flight: 4 clients x 4 requests. */
        cr_expect_leq(failed, 16);
        cr_expect_gt(ok, 100);
        free(json);
        gemmd_disconnect(c);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

/* Sampled elements of p's C (host copy) against a double-precision dot
 * product; returns 0 or -1 with the reason. */
static int sampled_check(const struct e2e_prob *p, uint64_t seed, char *why, size_t len)
{
        for (int q = 0; q < 64; q++) {
                int64_t row = e2e_rand_int(&seed, 0, p->s.m - 1), col = e2e_rand_int(&seed, 0, p->s.n - 1);
                double ref = 0, mag = 0;

                for (int64_t l = 0; l < p->s.k; l++) {
                        double a = e2e_get(p->s.dtype, p->a, (uint64_t)(l + row * p->op.lda));
                        double b = e2e_get(p->s.dtype, p->b, (uint64_t)(l + col * p->op.ldb));

                        ref += a * b;
                        mag += fabs(a * b);
                }
                double got = e2e_get(p->s.dtype, p->c, (uint64_t)(row + col * p->op.ldc));

                if (!(fabs(got - p->s.alpha * ref) <= e2e_tol(p->s.dtype) * mag + 1e-30)) {
                        snprintf(why, len, "C(%lld, %lld) = %g, reference %g", (long long)row, (long long)col, got,
                                 p->s.alpha * ref);
                        return -1;
                }
        }
        return 0;
}

/*
 * Runs n ops of spec s (inputs filled from `seed`) on a CUDA daemon started
 * with `flags` (NULL-terminated, after "--backend cuda"), in one shared
 * arena of arena_bytes: submitted together, or one at a time, each waited
 * for. Keeps each result in p[i].c0 (the arena goes with the connection)
 * and returns the device counter `key` of the daemon's stats.
 */
static long long spec_run(const char *const *flags, const struct e2e_spec *s, int n, uint64_t seed,
                          uint64_t arena_bytes, int together, struct e2e_prob *p, const char *key)
{
        const char *argv[16] = {"--backend", "cuda"};
        struct e2e_daemon d;
        gemmd_client *c;
        struct e2e_arena ar;
        struct gemmd_result res[16];
        struct gemmd_op ops[16];
        gemmd_ticket t;
        char *json = NULL;
        int na = 2;

        cr_assert(n <= 16);
        while (flags && *flags && na < 15)
                argv[na++] = *flags++;
        argv[na] = NULL;
        cr_assert_eq(e2e_daemon_startv(&d, argv), 0);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(e2e_arena_init(&ar, c, arena_bytes), 0);
        for (int i = 0; i < n; i++) {
                cr_assert_eq(e2e_prob_place(&p[i], s, &ar, &seed), 0);
                ops[i] = p[i].op;
        }
        for (int i = 0; i < n; i += together ? n : 1) {
                const int cnt = together ? n : 1;

                cr_assert_eq(gemmd_submit(c, &ops[i], (size_t)cnt, GEMMD_PRIO_NORMAL, &t), 0);
                cr_assert_eq(gemmd_wait(c, t, 60000, &res[i], (size_t)cnt), 0);
        }
        for (int i = 0; i < n; i++) {
                cr_assert_eq(res[i].status, 0, "op %d: %s", i, gemmd_strerror(res[i].status));
                memcpy(p[i].c0, p[i].c, p[i].cbytes);
                p[i].a = p[i].b = p[i].c = NULL;
        }
        cr_assert_not_null(json = e2e_idle_stats(c, 5000));
        const long long v = device_number(json, key);
        free(json);
        gemmd_disconnect(c);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
        return v;
}

/* Checks sampled elements of the n results p[i].c0 of spec_run against a
 * double-precision reference, from the same inputs regenerated (`seed`,
 * one problem at a time in a buffer of `per` bytes); the samples of op i
 * are drawn from check_seed + i. */
static void spec_check(const struct e2e_spec *s, int n, uint64_t seed, uint64_t per, const struct e2e_prob *p,
                       uint64_t check_seed)
{
        struct e2e_prob r;
        struct e2e_arena ar = {0};

        ar.base = malloc(per);
        ar.size = per;
        cr_assert_not_null(ar.base);
        for (int i = 0; i < n; i++) {
                char why[200];

                ar.used = 0;
                cr_assert_eq(e2e_prob_place(&r, s, &ar, &seed), 0);
                r.c = p[i].c0; /* the result the daemon gave */
                cr_assert_eq(sampled_check(&r, check_seed + (uint64_t)i, why, sizeof(why)), 0, "op %d %s", i, why);
                free(r.c0);
        }
        free(ar.base);
}

/* One way of running a spec's ops (spec_run): the daemon's flags, and
 * whether the ops go together or one at a time. */
struct spec_way {
        const char *const *flags;
        int together;
};

/*
 * Runs the n ops of spec s both ways (inputs from `seed`, arenas of
 * arena_bytes) and puts the stats counter `key` of each way's daemon in
 * *ka and *kb; the results must be the same bits both ways, and sampled
 * elements must match the double reference (spec_check, buffers of
 * `per` bytes, samples from check_seed).
 */
static void same_bits_both_ways(const struct e2e_spec *s, int n, uint64_t seed, uint64_t arena_bytes,
                                struct spec_way a, struct spec_way b, const char *key, long long *ka,
                                long long *kb, uint64_t per, uint64_t check_seed)
{
        struct e2e_prob pa[8], pb[8];

        cr_assert_leq(n, 8);
        memset(pa, 0, sizeof(pa));
        memset(pb, 0, sizeof(pb));
        *ka = spec_run(a.flags, s, n, seed, arena_bytes, a.together, pa, key);
        *kb = spec_run(b.flags, s, n, seed, arena_bytes, b.together, pb, key);
        for (int i = 0; i < n; i++)
                cr_assert_eq(memcmp(pa[i].c0, pb[i].c0, pa[i].cbytes), 0, "op %d: bits differ between the ways", i);
        spec_check(s, n, seed, per, pa, check_seed);
        for (int i = 0; i < n; i++) {
                free(pa[i].c0);
                free(pb[i].c0);
        }
}

/*
 * The wide tile, end to end. Eight bf16 GEMMs of 2048 x 2304 x 256 in the
 * layout the Hopper kernel reads (A stored m x k, B n x k) make one group
 * of 192 wide tiles against 288 usual ones each, which the cost model
 * gives the wide tile. The same inputs on a daemon with --wide-tiles no
 * must give the same bits, its stats must count no wide group where the
 * first counts some, and sampled elements must match a double-precision
 * reference (the whole reference would take the CPU minutes).
 */
#define WIDE_OPS 8

static const struct e2e_spec wide_spec = {.kind = GEMMD_GEMM, .dtype = GEMMD_BF16, .ta = GEMMD_OP_T,
                                          .tb = GEMMD_OP_N, .m = 2048, .n = 2304, .k = 256, .alpha = 1.f,
                                          .beta = 0.f};

Test(gpu_e2e, wide_tile_same_bits_as_the_usual_one)
{
        static const char *const yes[] = {"--wide-tiles", "yes", "--max-group-tiles", "4096", NULL};
        static const char *const no[] = {"--wide-tiles", "no", "--max-group-tiles", "4096", NULL};
        long long nw, nu;

        SKIP_WITHOUT_GPU();
        same_bits_both_ways(&wide_spec, WIDE_OPS, 7, 128u << 20, (struct spec_way){yes, 1}, (struct spec_way){no, 1},
                            "wide_groups", &nw, &nu, 20u << 20, 99);
        cr_expect_gt(nw, 0, "no group took the wide tile");
        cr_expect_eq(nu, 0, "--wide-tiles no still took it");
}

/*
 * Packed copies, end to end. Eight bf16 GEMMs of 256 x 256 x 255 in the
 * layout the Hopper kernel reads (A stored m x k, B n x k) but with k, and
 * so their leading dimensions, odd: no tensor map reads them in place.
 * Sent together they make a group of enough products for packed copies
 * (the daemon's stats count it); sent one at a time each is too small to
 * pack (under cuda_gemm_pack_bytes' 24 Mi products) and runs on the sm_80
 * kernel. The bits must be the same, and sampled elements must match a
 * double-precision reference.
 */
#define PACK_OPS 8

static const struct e2e_spec pack_spec = {.kind = GEMMD_GEMM, .dtype = GEMMD_BF16, .ta = GEMMD_OP_T,
                                          .tb = GEMMD_OP_N, .m = 256, .n = 256, .k = 255, .alpha = 1.f,
                                          .beta = 0.f};

Test(gpu_e2e, packed_copies_same_bits_as_in_place)
{
        long long ng, na;

        SKIP_WITHOUT_GPU();
        same_bits_both_ways(&pack_spec, PACK_OPS, 11, 64u << 20, (struct spec_way){NULL, 1},
                            (struct spec_way){NULL, 0}, "packed_groups", &ng, &na, 8u << 20, 5);
        cr_expect_gt(ng, 0, "the group of eight was not packed");
        cr_expect_eq(na, 0, "a lone GEMM was packed");
}

/*
 * The narrow tile, end to end: one synchronous call at a time, as a
 * library is most often called. Each GEMM below is a group of its own
 * whose 128 x 128 tiles leave SMs idle and whose 128 x 64 ones fit one
 * wave, so the daemon runs it on the narrow tile; each result must match
 * a long double reference (C poisoned first, untouched elements checked),
 * and a daemon with --narrow-tiles no must give the same bits and count
 * no narrow group.
 * Sizes off the tile (edges in m and n), k off the chunk, beta 0 and not,
 * f16 and bf16.
 * The first two daemons launch each group (--resident no), with and
 * without the narrow tile. With the resident kernel the narrow tile of a
 * 16-bit group is the half tile (64 x 128, on the resident kernel
 * itself): a third daemon runs the same calls with it, and must give the
 * same bits, take it for every op whose half tiles outnumber its usual
 * ones (all but the one of 64 rows) and run those on the resident kernel.
 */
#define NARROW_OPS 6

static void narrow_run(const char *narrow, const char *resident, void *out[NARROW_OPS],
                       uint64_t bytes[NARROW_OPS], long long *narrow_groups, long long *resident_groups)
{
        static const struct e2e_spec specs[NARROW_OPS] = {
                {.kind = GEMMD_GEMM, .dtype = GEMMD_BF16, .ta = GEMMD_OP_T, .tb = GEMMD_OP_N, .m = 544, .n = 544,
                 .k = 544, .alpha = 1.0, .beta = 0.0},
                {.kind = GEMMD_GEMM, .dtype = GEMMD_F16, .ta = GEMMD_OP_T, .tb = GEMMD_OP_N, .m = 600, .n = 520,
                 .k = 1104, .alpha = 0.5, .beta = 0.25},
                {.kind = GEMMD_GEMM, .dtype = GEMMD_BF16, .ta = GEMMD_OP_T, .tb = GEMMD_OP_N, .m = 130, .n = 70,
                 .k = 64, .alpha = -1.0, .beta = 1.0},
                {.kind = GEMMD_GEMM, .dtype = GEMMD_F16, .ta = GEMMD_OP_T, .tb = GEMMD_OP_N, .m = 64, .n = 1000,
                 .k = 520, .alpha = 1.0, .beta = 0.0, .pad = 8},
                {.kind = GEMMD_GEMM, .dtype = GEMMD_BF16, .ta = GEMMD_OP_T, .tb = GEMMD_OP_N, .m = 777, .n = 333,
                 .k = 600, .alpha = 2.0, .beta = -0.5},
                {.kind = GEMMD_GEMM, .dtype = GEMMD_F16, .ta = GEMMD_OP_T, .tb = GEMMD_OP_N, .m = 1024, .n = 1024,
                 .k = 128, .alpha = 1.0, .beta = 0.0},
        };
        struct e2e_daemon d;
        gemmd_client *c;
        struct e2e_arena ar = {0};
        gemmd_buffer dev_id = 0;
        void *dev = NULL;
        uint64_t seed = 11;
        char *json = NULL;

        cr_assert_eq(e2e_daemon_start(&d, "--backend", "cuda", "--narrow-tiles", narrow, "--resident", resident, NULL),
                     0);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        /* Operands in the client's device memory (CUDA IPC), as the
         * resident kernel takes them; placed and checked in a host copy. */
        ar.size = 64u << 20;
        cr_assert_not_null(ar.base = malloc(ar.size));
        cr_assert_eq(cudaMalloc(&dev, ar.size), cudaSuccess);
        cr_assert_eq(gemmd_register_device(c, dev, ar.size, &dev_id), 0);
        for (int i = 0; i < NARROW_OPS; i++) {
                struct e2e_prob p;
                struct gemmd_result res;
                gemmd_ticket t;
                double err;
                char why[200];

                const uint64_t from = ar.used; /* the op's operands lie beyond */

                cr_assert_eq(e2e_prob_place(&p, &specs[i], &ar, &seed), 0);
                p.op.a.buffer = p.op.b.buffer = p.op.c.buffer = dev_id;
                cr_assert_eq(cudaMemcpy((char *)dev + from, ar.base + from, ar.used - from, cudaMemcpyHostToDevice),
                             cudaSuccess);
                cr_assert_eq(gemmd_submit(c, &p.op, 1, GEMMD_PRIO_NORMAL, &t), 0);
                cr_assert_eq(gemmd_wait(c, t, 60000, &res, 1), 0);
                cr_assert_eq(res.status, 0, "op %d: %s", i, gemmd_strerror(res.status));
                cr_assert_eq(cudaMemcpy(ar.base + from, (char *)dev + from, ar.used - from, cudaMemcpyDeviceToHost),
                             cudaSuccess);
                /* The reference once; the other daemon's bits must equal these. */
                if (!strcmp(narrow, "yes"))
                        cr_assert_eq(e2e_prob_check(&p, &err, why, sizeof(why)), 0, "op %d: %s", i, why);
                out[i] = malloc(p.cbytes);
                cr_assert_not_null(out[i]);
                memcpy(out[i], p.c, p.cbytes);
                bytes[i] = p.cbytes;
                free(p.c0);
        }
        cr_assert_not_null(json = e2e_idle_stats(c, 5000));
        *narrow_groups = device_number(json, "narrow_groups");
        *resident_groups = device_number(json, "resident_groups");
        free(json);
        gemmd_disconnect(c);
        cr_assert_eq(cudaFree(dev), cudaSuccess);
        free(ar.base);
        cr_assert_eq(e2e_daemon_stop(&d), 0);
}

Test(gpu_e2e, narrow_and_half_tiles_for_lone_calls_same_bits_as_the_usual_one)
{
        void *nw[NARROW_OPS], *us[NARROW_OPS], *hf[NARROW_OPS];
        uint64_t nwb[NARROW_OPS], usb[NARROW_OPS], hfb[NARROW_OPS];
        long long nn = -1, nu = -1, nh = -1, rn = -1, ru = -1, rh = -1;

        SKIP_WITHOUT_GPU();
        narrow_run("yes", "no", nw, nwb, &nn, &rn);
        narrow_run("no", "no", us, usb, &nu, &ru);
        narrow_run("yes", "yes", hf, hfb, &nh, &rh);
        cr_expect_eq(nn, NARROW_OPS, "every lone GEMM should take the narrow tile");
        cr_expect_eq(nu, 0, "--narrow-tiles no still took it");
        cr_expect_eq(nh, NARROW_OPS - 1, "every lone GEMM but the one of 64 rows should take the half tile");
        cr_expect_eq(rn + ru, 0, "--resident no ran a group on it");
        cr_expect_eq(rh, NARROW_OPS, "the resident kernel took %lld of the %d lone GEMMs", rh, NARROW_OPS);
        for (int i = 0; i < NARROW_OPS; i++) {
                cr_assert_eq(nwb[i], usb[i]);
                cr_assert_eq(hfb[i], usb[i]);
                cr_assert_eq(memcmp(nw[i], us[i], nwb[i]), 0, "op %d: bits differ between the tiles", i);
                cr_assert_eq(memcmp(hf[i], us[i], hfb[i]), 0, "op %d: bits differ between the half tile and the usual",
                             i);
                free(nw[i]);
                free(us[i]);
                free(hf[i]);
        }
}

/*
 * The resident kernel (--resident yes) against a launch per group. One
 * client process keeps its operands in one device allocation (CUDA IPC)
 * and submits rounds of problems, several in flight: mostly 16-bit GEMMs
 * the resident kernel takes (some long enough in K to be split), among
 * random problems it does not take, so it is stopped and started again
 * within a round, and a pause after each round lets it stop for idleness.
 * Groups hold at most three ops (--max-group-ops), so that most fit the
 * resident kernel (it takes a group of no more tiles than CTAs), where a
 * round's 16-bit GEMMs would otherwise gather into a few large groups.
 * Every result must match the double-precision reference (C poisoned with
 * NaN where beta is 0), every element outside it must be untouched, and
 * the bits must be those of the same problems on a daemon without it.
 */
#define RES_PROBS 96
#define RES_ROUNDS 2

struct res_out {
        uint64_t hash[RES_ROUNDS][RES_PROBS];
        long long resident_groups, groups;
        int bad;
        char why[256];
};

static uint64_t fnv1a(const void *p, uint64_t n)
{
        const uint8_t *b = p;
        uint64_t h = 1469598103934665603ull;

        for (uint64_t i = 0; i < n; i++)
                h = (h ^ b[i]) * 1099511628211ull;
        return h;
}

static int res_client(const struct e2e_daemon *d, void *arg)
{
        struct res_out *out = arg;
        const uint64_t bytes = 192u << 20;
        struct e2e_arena ar = {0};
        struct e2e_prob p[RES_PROBS];
        gemmd_ticket t[RES_PROBS];
        struct gemmd_result r;
        gemmd_buffer dev_id = 0;
        gemmd_client *c = e2e_connect(d);
        void *dev = NULL;
        char *json = NULL;

        if (!c || !(ar.base = malloc(bytes)))
                return 2;
        ar.size = bytes;
        if (cudaMalloc(&dev, bytes) != cudaSuccess || gemmd_register_device(c, dev, bytes, &dev_id))
                return 3;
        for (int round = 0; round < RES_ROUNDS; round++) {
                uint64_t seed = 500 + (uint64_t)round;

                ar.used = 0;
                for (int i = 0; i < RES_PROBS; i++) {
                        struct e2e_spec s;

                        if (i % 6 == 5) {
                                e2e_spec_random(&s, &seed, 128);
                        } else {
                                /* What the Hopper kernel reads: A stored m x k, B n x k. */
                                memset(&s, 0, sizeof(s));
                                s.kind = GEMMD_GEMM;
                                s.dtype = i & 1 ? GEMMD_F16 : GEMMD_BF16;
                                s.ta = GEMMD_OP_T;
                                s.tb = GEMMD_OP_N;
                                s.m = e2e_rand_int(&seed, 1, 384);
                                s.n = e2e_rand_int(&seed, 1, 384);
                                s.k = 8 * e2e_rand_int(&seed, 1, i % 8 == 0 ? 300 : 48);
                                s.alpha = i % 3 ? 1.0f : -0.5f;
                                s.beta = i % 4 ? 0.0f : 0.5f;
                        }
                        if (e2e_prob_place(&p[i], &s, &ar, &seed))
                                return 4;
                        p[i].op.a.buffer = p[i].op.b.buffer = p[i].op.c.buffer = dev_id;
                }
                if (cudaMemcpy(dev, ar.base, ar.used, cudaMemcpyHostToDevice) != cudaSuccess ||
                    cudaDeviceSynchronize() != cudaSuccess)
                        return 5;
                /* One op per submit, all in flight: groups of several. */
                for (int i = 0; i < RES_PROBS; i++)
                        if (gemmd_submit(c, &p[i].op, 1, GEMMD_PRIO_NORMAL, &t[i]))
                                return 6;
                for (int i = 0; i < RES_PROBS; i++) {
                        int rc = gemmd_wait(c, t[i], 20000, &r, 1);

                        if (rc || r.status) {
                                snprintf(out->why, sizeof(out->why), "round %d op %d: %s", round, i,
                                         gemmd_strerror(rc ? rc : r.status));
                                out->bad++;
                        }
                }
                if (cudaMemcpy(ar.base, dev, ar.used, cudaMemcpyDeviceToHost) != cudaSuccess)
                        return 7;
                for (int i = 0; i < RES_PROBS; i++) {
                        double err;
                        char why[200], desc[128];

                        if (e2e_prob_check(&p[i], &err, why, sizeof(why))) {
                                snprintf(out->why, sizeof(out->why), "round %d op %d %s: %s", round, i,
                                         e2e_spec_str(&p[i].s, desc, sizeof(desc)), why);
                                out->bad++;
                        }
                        out->hash[round][i] = fnv1a(p[i].c, p[i].cbytes);
                        e2e_prob_free(&p[i]);
                }
                usleep(20000); /* idle: the resident kernel stops */
        }
        if (!(json = e2e_idle_stats(c, 5000)))
                return 8;
        out->resident_groups = device_number(json, "resident_groups");
        out->groups = device_number(json, "groups");
        free(json);
        gemmd_unregister(c, dev_id);
        gemmd_disconnect(c);
        cudaFree(dev);
        free(ar.base);
        return 0;
}

/* Runs client(d, out) in a process of its own (its CUDA context is not
 * this one's), waits for it, then stops the daemon; `what` names the run. */
static void run_client(struct e2e_daemon *d, int (*client)(const struct e2e_daemon *, void *), void *out,
                       const char *what)
{
        pid_t kid = fork();

        cr_assert_geq(kid, 0);
        if (kid == 0)
                _exit(client(d, out));
        cr_expect_eq(e2e_wait_child(kid, 240000), 0, "client failed (%s)", what);
        cr_assert_eq(e2e_daemon_stop(d), 0);
}

static void res_run(const char *resident, struct res_out *out)
{
        struct e2e_daemon d;

        memset(out, 0, sizeof(*out));
        cr_assert_eq(e2e_daemon_start(&d, "--backend", "cuda", "--resident", resident, "--max-group-ops", "3", NULL),
                     0);
        run_client(&d, res_client, out, resident);
}

Test(gpu_e2e, resident_kernel_same_bits_as_launches)
{
        struct res_out *o = mmap(NULL, 2 * sizeof(*o), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

        SKIP_WITHOUT_GPU();
        cr_assert_neq(o, MAP_FAILED);
        res_run("yes", &o[0]);
        res_run("no", &o[1]);
        printf("resident kernel: %lld of %lld groups (--resident yes), %lld of %lld (no)\n",
               o[0].resident_groups, o[0].groups, o[1].resident_groups, o[1].groups);
        cr_expect_eq(o[0].bad, 0, "--resident yes: %d wrong, last: %s", o[0].bad, o[0].why);
        cr_expect_eq(o[1].bad, 0, "--resident no: %d wrong, last: %s", o[1].bad, o[1].why);
        cr_expect_gt(o[0].resident_groups, 0, "the resident kernel took no group");
        cr_expect_lt(o[0].resident_groups, o[0].groups, "every group took the resident kernel");
        cr_expect_eq(o[1].resident_groups, 0, "--resident no: groups took the resident kernel");
        for (int r = 0; r < RES_ROUNDS; r++)
                for (int i = 0; i < RES_PROBS; i++)
                        cr_expect_eq(o[0].hash[r][i], o[1].hash[r][i], "round %d op %d: bits differ", r, i);
        munmap(o, 2 * sizeof(*o));
}

/*
 * Early completion (--early-completion yes): a request is answered once
 * its own problem's C is whole, while the rest of its group still runs.
 * One client process keeps its operands in one device allocation (CUDA
 * IPC) and submits, one op per submit, a long bf16 GEMM and EARLY_SMALL
 * small 16-bit GEMMs (some long enough in K to be split, some with beta):
 * the bf16 ones first, then, once they are answered, the f16 ones, so
 * that an idle device's batch window gathers the long GEMM and the small
 * bf16 ones into one group (a group holds one kernel configuration; the
 * window, 200 ms, outlasts the 24 submits). Both daemons deal
 * the plan with --mode spt, the cheapest problems first, so that the
 * small ops' tiles run before the long one's (sorted, the default, puts
 * the longest K first). As each
 * ticket completes, in completion order, the client copies that op's C
 * back at once, while the group may still run, and checks it: small ones
 * against the double-precision reference (and the bytes around them),
 * the long one at sampled elements. With early completion the daemon
 * must count ops answered before their group ended, and the small ops
 * beside the long one must be answered before it (their run time, to
 * their own end, shorter); without it none of that. The bits must be the
 * same either way.
 */
#define EARLY_SMALL 47

struct early_out {
        uint64_t hash[EARLY_SMALL + 1];
        long long ops_early;
        long long ops_word_dev; /* answered by the GPU in their completion words */
        int before_others; /* ops answered before another op of their group */
        int beside_long;   /* small ops in the long op's group */
        uint64_t long_run_us; /* the long op's run, launch to its C done: the window for early answers */
        int bad;
        char why[256];
};

static int early_client(const struct e2e_daemon *d, void *arg)
{
        struct early_out *out = arg;
        enum { N = EARLY_SMALL + 1 };
        const uint64_t bytes = 768u << 20;
        struct e2e_arena ar = {0};
        struct e2e_prob p[N];
        gemmd_ticket t[N];
        struct gemmd_result r[N];
        gemmd_buffer dev_id = 0;
        gemmd_client *c = e2e_connect(d);
        char *dev = NULL, *json = NULL;
        uint64_t seed = 900;
        int left = 0;

        if (!c || !(ar.base = malloc(bytes)))
                return 2;
        ar.size = bytes;
        if (cudaMalloc((void **)&dev, bytes) != cudaSuccess || gemmd_register_device(c, dev, bytes, &dev_id))
                return 3;
        for (int i = 0; i < N; i++) {
                struct e2e_spec s;

                memset(&s, 0, sizeof(s));
                s.kind = GEMMD_GEMM;
                s.ta = GEMMD_OP_T; /* what the Hopper kernel reads: A stored m x k, B n x k */
                s.tb = GEMMD_OP_N;
                if (i == 0) {
                        /* Long enough (milliseconds) that the completion
                         * thread looks while it runs even when the rest of
                         * the suite, run beside it, keeps the CPUs busy: at
                         * k = 8192 (about 1 ms) it once had not before the
                         * group ended, and no op was answered early. */
                        s.dtype = GEMMD_BF16;
                        s.m = s.n = 4096;
                        s.k = 32768;
                        s.alpha = 1.0f;
                } else {
                        s.dtype = i & 1 ? GEMMD_F16 : GEMMD_BF16;
                        s.m = e2e_rand_int(&seed, 1, 384);
                        s.n = e2e_rand_int(&seed, 1, 384);
                        s.k = 8 * e2e_rand_int(&seed, 1, i % 8 == 0 ? 300 : 48);
                        s.alpha = i % 3 ? 1.0f : -0.5f;
                        s.beta = i % 4 ? 0.0f : 0.5f;
                }
                if (e2e_prob_place(&p[i], &s, &ar, &seed))
                        return 4;
                p[i].op.a.buffer = p[i].op.b.buffer = p[i].op.c.buffer = dev_id;
        }
        if (cudaMemcpy(dev, ar.base, ar.used, cudaMemcpyHostToDevice) != cudaSuccess)
                return 5;
        memset(r, 0, sizeof(r));
        /* bf16 (the even ones and the long one), then f16 once those are
         * answered: submitted back to back, some of the second kind could
         * be admitted before the last of the first (a submit that finds
         * the ring full or its loop asleep takes the socket, and the loop
         * reads the two in its own order), and a group looks only a few
         * ops past its session's head (run beside the rest of the suite,
         * that left up to 10 of the 23 small bf16 ops out of the long
         * op's group). */
        for (int pass = 0; pass < 2; pass++) {
                for (int i = 0; i < N; i++)
                        if ((i & 1) == pass) {
                                if (gemmd_submit(c, &p[i].op, 1, GEMMD_PRIO_NORMAL, &t[i]))
                                        return 6;
                                left++;
                        }
                while (left > 0) {
                        gemmd_ticket got;
                        int i, rc = gemmd_wait_any(c, 60000, &got);
                        char why[200], desc[128];
                        double err;

                        if (rc != 1)
                                return 7;
                        for (i = 0; i < N && t[i] != got; i++)
                                ;
                        if (i == N)
                                return 8;
                        rc = gemmd_wait(c, got, 0, &r[i], 1);
                        left--;
                        if (rc || r[i].status) {
                                snprintf(out->why, sizeof(out->why), "op %d: %s", i,
                                         gemmd_strerror(rc ? rc : r[i].status));
                                out->bad++;
                                continue;
                        }
                        /* This op's C (and the bytes around it) as they are now. */
                        const uint64_t off = (uint64_t)((char *)p[i].c - (char *)ar.base);
                        if (cudaMemcpy(p[i].c, dev + off, p[i].cbytes, cudaMemcpyDeviceToHost) != cudaSuccess)
                                return 9;
                        if (i == 0 ? sampled_check(&p[i], 77, why, sizeof(why))
                                   : e2e_prob_check(&p[i], &err, why, sizeof(why))) {
                                snprintf(out->why, sizeof(out->why), "op %d %s: %s", i,
                                         e2e_spec_str(&p[i].s, desc, sizeof(desc)), why);
                                out->bad++;
                        }
                        out->hash[i] = fnv1a(p[i].c, p[i].cbytes);
                }
        }
        for (int i = 0; i < N; i++) {
                int first = 0;

                for (int j = 0; j < N && !first; j++)
                        first = r[j].group_id == r[i].group_id && r[i].run_us < r[j].run_us;
                out->before_others += first;
                out->beside_long += i > 0 && r[i].group_id == r[0].group_id;
        }
        out->long_run_us = r[0].run_us;
        if (!(json = e2e_idle_stats(c, 5000)))
                return 10;
        out->ops_early = device_number(json, "ops_early");
        out->ops_word_dev = device_number(json, "ops_word_dev");
        free(json);
        for (int i = 0; i < N; i++)
                e2e_prob_free(&p[i]);
        gemmd_unregister(c, dev_id);
        gemmd_disconnect(c);
        cudaFree(dev);
        free(ar.base);
        return 0;
}

/* words: whether the client names completion words (proto/ring.h); an
 * op they answer has no group or timings in its result, so the runs that
 * look at those go without. */
static void early_run(const char *early, int words, struct early_out *out)
{
        struct e2e_daemon d;

        memset(out, 0, sizeof(*out));
        cr_assert_eq(e2e_daemon_start(&d, "--backend", "cuda", "--early-completion", early, "--mode", "spt",
                                      "--batch-window-us", "200000", NULL),
                     0);
        setenv("GEMMD_WORDS", words ? "1" : "0", 1);
        run_client(&d, early_client, out, early);
        unsetenv("GEMMD_WORDS");
}

Test(gpu_e2e, early_completion_answers_each_op_when_its_c_is_whole)
{
        struct early_out *o = mmap(NULL, 3 * sizeof(*o), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

        SKIP_WITHOUT_GPU();
        cr_assert_neq(o, MAP_FAILED);
        early_run("yes", 0, &o[0]);
        early_run("no", 0, &o[1]);
        early_run("yes", 1, &o[2]);
        printf("early completion: %lld ops answered early, %d before another op of their group, %d small "
               "ops beside the long one, which ran %llu us (--early-completion yes); %lld, %d, %d (no)\n",
               o[0].ops_early, o[0].before_others, o[0].beside_long, (unsigned long long)o[0].long_run_us,
               o[1].ops_early, o[1].before_others, o[1].beside_long);
        cr_expect_eq(o[0].bad, 0, "--early-completion yes: %d wrong, last: %s", o[0].bad, o[0].why);
        cr_expect_eq(o[1].bad, 0, "--early-completion no: %d wrong, last: %s", o[1].bad, o[1].why);
        cr_expect_gt(o[0].ops_early, 0, "no op was answered early");
        cr_expect_eq(o[1].ops_early, 0, "--early-completion no answered ops early");
        /* The batch window put every small bf16 op beside the long one (or
         * nothing below would be tested); each is done long before it. */
        cr_expect_eq(o[0].beside_long, EARLY_SMALL / 2, "%d small ops beside the long one", o[0].beside_long);
        cr_expect_geq(o[0].before_others, o[0].beside_long, "%d of %d answered before the long one",
                      o[0].before_others, o[0].beside_long);
        cr_expect_eq(o[1].before_others, 0, "--early-completion no: ops of one group answered apart");
        for (int i = 0; i < EARLY_SMALL + 1; i++)
                cr_expect_eq(o[0].hash[i], o[1].hash[i], "op %d: bits differ", i);
        /* With completion words, the GPU itself answers ops (once the
         * words are page-locked, after the first group): each C copied
         * back the moment its word said so is whole and right. */
        printf("completion words: %lld ops answered by the GPU in their words, %lld early in all\n",
               o[2].ops_word_dev, o[2].ops_early);
        cr_expect_eq(o[2].bad, 0, "with words: %d wrong, last: %s", o[2].bad, o[2].why);
        if (e2e_devproc()) /* a device process does not map the clients' words */
                cr_expect_eq(o[2].ops_word_dev, 0, "a device process stored completion words");
        else
                cr_expect_gt(o[2].ops_word_dev, 0, "the GPU stored no completion word");
        cr_expect_eq(o[0].ops_word_dev, 0, "a client without words was answered in one");
        for (int i = 0; i < EARLY_SMALL + 1; i++)
                cr_expect_eq(o[2].hash[i], o[0].hash[i], "op %d: bits differ with words", i);
        munmap(o, 3 * sizeof(*o));
}
