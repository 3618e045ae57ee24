/*
 * test_e2e_cpu.c - what the daemon costs the host's CPUs: the CPU seconds
 * per thread role in the JSON stats move with work and add up to the
 * process's total, and an idle daemon uses next to no CPU, with the default
 * flags, with the polling a GPU host would use (--spin-us 50 --loops 3), and
 * with a device process (whose own time counts too).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/e2e_assert.h"
#include "tests/hard_util.h"

TestSuite(cpu, .init = e2e_setup, .fini = e2e_teardown, .timeout = 120);

#define BURST_OPS 48
/* The idle window, and the most CPU the daemon may use in it: a few timer
 * ticks cost microseconds, a thread that polls would cost the whole window.
 * The bound leaves room for a loaded two-CPU machine's noise. */
#define IDLE_MS 2000
#define IDLE_MAX_MS 50.0

/* The role names of cpuacct.c that are threads of the daemon's process. */
static const char *const thread_roles[] = {"loop",    "worker",         "completion",
                                           "pin",     "compute",        "devproc-reader"};
#define NTHREAD_ROLES (sizeof(thread_roles) / sizeof(thread_roles[0]))

/* What the JSON stats say of the CPU: seconds per role, in all, and the
 * ops run; and the first device's process pid (0 without one). */
struct cpu_fig {
        double role[NTHREAD_ROLES], other, devproc, process, total;
        long long ops;
        int pid;
};

static double role_s(const char *roles, const char *name)
{
        char key[64];
        const char *p;

        snprintf(key, sizeof(key), "\"%s\":{", name);
        p = strstr(roles, key);
        return p ? hard_json_double(p, "s") : -1.0;
}

static void read_fig(gemmd_client *c, struct cpu_fig *f)
{
        char *json = NULL;
        const char *cpu, *roles, *dev;
        int rc = gemmd_stats(c, 1, &json);

        cr_assert_eq(rc, 0, "gemmd_stats: %s", gemmd_strerror(rc));
        cpu = strstr(json, "\"cpu\":{");
        cr_assert_not_null(cpu, "no cpu object in the stats: %s", json);
        roles = strstr(cpu, "\"roles\":{");
        cr_assert_not_null(roles, "no roles in the stats' cpu: %s", json);
        for (size_t i = 0; i < NTHREAD_ROLES; i++) {
                f->role[i] = role_s(roles, thread_roles[i]);
                cr_assert_geq(f->role[i], 0, "role %s missing: %s", thread_roles[i], json);
        }
        f->other = role_s(roles, "other");
        f->devproc = role_s(roles, "device-process");
        f->process = hard_json_double(cpu, "process_s");
        f->total = hard_json_double(cpu, "total_s");
        f->ops = hard_json_number(cpu, "ops");
        dev = strstr(json, "\"devices\":");
        f->pid = dev ? (int)hard_json_number(dev, "process_pid") : 0;
        cr_assert(f->other >= 0 && f->devproc >= 0 && f->process > 0 && f->ops >= 0,
                  "incomplete cpu figures: %s", json);
        free(json);
}

static double fig_role(const struct cpu_fig *f, const char *name)
{
        for (size_t i = 0; i < NTHREAD_ROLES; i++)
                if (!strcmp(thread_roles[i], name))
                        return f->role[i];
        return -1;
}

/* Reads the figures until `ops` ops have been counted (the worker counts
 * a group just after its ops are answered), for up to 5 s. */
static void read_fig_ops(gemmd_client *c, long long ops, struct cpu_fig *f)
{
        for (int waited = 0;; waited += 10) {
                read_fig(c, f);
                if (f->ops >= ops || waited >= 5000)
                        break;
                usleep(10000);
        }
        cr_assert_geq(f->ops, ops, "the stats count %lld ops of %lld run", f->ops, ops);
}

/* CPU milliseconds of process pid so far, every thread of it, or -1: its
 * CPU clock, what /proc/PID/stat's utime + stime show in ticks of 10 ms. */
static double proc_cpu_ms(int pid)
{
        struct timespec ts;
        clockid_t clock;

        if (clock_getcpuclockid(pid, &clock) != 0 || clock_gettime(clock, &ts) != 0)
                return -1;
        return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A burst of checked GEMMs, enough to give every role some work. */
static void burst(gemmd_client *c)
{
        static struct e2e_prob p[BURST_OPS];
        struct e2e_spec s = {.kind = GEMMD_GEMM, .dtype = GEMMD_F32, .m = 96, .n = 96, .k = 128,
                             .alpha = 1.0f, .beta = 0.5f};
        struct e2e_arena ar;
        uint64_t seed = 28;
        char why[256];

        cr_assert_eq(e2e_arena_init(&ar, c, 8u << 20), 0);
        for (int i = 0; i < BURST_OPS; i++)
                cr_assert_eq(e2e_prob_place(&p[i], &s, &ar, &seed), 0);
        cr_assert_eq(e2e_run_checked(c, p, BURST_OPS, 4, NULL, why, sizeof(why)), 0, "%s", why);
        for (int i = 0; i < BURST_OPS; i++)
                e2e_prob_free(&p[i]);
}

/*
 * Starts a daemon with `flags`, runs a burst, checks that the roles' figures
 * moved with it and add up to the process's, then closes the client, lets
 * the polling windows pass and measures the daemon's CPU (its device
 * process's included) over IDLE_MS of idleness, from its CPU clock and from its own
 * stats.
 */
static void check_cost(const char *name, const char *const *flags)
{
        struct e2e_daemon d;
        struct cpu_fig f0, f1, f2;
        gemmd_client *c;
        double a, b, named = 0, idle_ms, told_ms;
        long long groups, by_loop;

        cr_assert_eq(e2e_daemon_startv(&d, flags), 0, "gemmd did not start");
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        read_fig(c, &f0);
        groups = hard_device_number(c, "groups");
        by_loop = hard_device_number(c, "loop_groups");
        burst(c);
        read_fig_ops(c, f0.ops + BURST_OPS, &f1);
        groups = hard_device_number(c, "groups") - groups;
        by_loop = hard_device_number(c, "loop_groups") - by_loop;

        /* Every role that served the burst used CPU for it: the worker
         * unless a loop launched every group (--loop-launch); the compute
         * runs in the device process where there is one. */
        cr_expect_gt(fig_role(&f1, "loop"), fig_role(&f0, "loop"), "loop: no CPU time for the burst");
        cr_expect(by_loop >= 0 && by_loop <= groups, "%lld of %lld groups launched by a loop", by_loop, groups);
        if (by_loop < groups)
                cr_expect_gt(fig_role(&f1, "worker"), fig_role(&f0, "worker"),
                             "worker: no CPU time for the burst (%lld of %lld groups launched by a loop)",
                             by_loop, groups);
        if (f1.pid > 0) {
                cr_expect_gt(f1.devproc, f0.devproc, "device-process: no CPU time for the burst");
                cr_expect_gt(fig_role(&f1, "devproc-reader"), 0, "devproc-reader: no CPU time");
        } else {
                cr_expect_gt(fig_role(&f1, "compute"), fig_role(&f0, "compute"),
                             "compute: no CPU time for the burst");
                cr_expect_eq(f1.devproc, 0, "device-process time without a device process");
        }
        /* The named roles cover the process: what they miss ("other") is the
         * main thread's time before it registered, next to nothing. */
        for (size_t i = 0; i < NTHREAD_ROLES; i++)
                named += f1.role[i];
        cr_expect_leq(named, f1.process + 0.001, "roles %.6f s, more than the process's %.6f s",
                      named, f1.process);
        cr_expect_geq(named, 0.9 * f1.process - 0.002, "roles %.6f s of the process's %.6f s",
                      named, f1.process);
        cr_expect_leq(f1.other, 0.1 * f1.process + 0.002, "other: %.6f s of %.6f", f1.other,
                      f1.process);
        cr_expect_leq(fabs(f1.total - f1.process - f1.devproc), 0.001,
                      "total %.6f s is not the process's %.6f and the device process's %.6f",
                      f1.total, f1.process, f1.devproc);
        gemmd_disconnect(c);

        /* The spin windows are 50 us; a session's close is done in far less
         * than this. */
        usleep(300 * 1000);
        a = proc_cpu_ms(d.pid) + (f1.pid > 0 ? proc_cpu_ms(f1.pid) : 0);
        usleep(IDLE_MS * 1000);
        b = proc_cpu_ms(d.pid) + (f1.pid > 0 ? proc_cpu_ms(f1.pid) : 0);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        read_fig(c, &f2);
        gemmd_disconnect(c);
        idle_ms = b - a;
        told_ms = (f2.total - f1.total) * 1e3;
        fprintf(stderr, "cpu %s: %.3f ms of CPU in %d ms idle (its CPU clock), %.3f ms by the daemon's "
                        "stats over the window and the connections around it\n",
                name, idle_ms, IDLE_MS, told_ms);
        cr_expect(a >= 0 && b >= 0, "cannot read the CPU clock of process %d", d.pid);
        cr_expect_lt(idle_ms, IDLE_MAX_MS, "%s: %.3f ms of CPU in %d ms of idleness", name, idle_ms,
                     IDLE_MS);
        cr_expect_lt(told_ms, IDLE_MAX_MS, "%s: the stats count %.3f ms of CPU while idle", name,
                     told_ms);
        STOP(&d);
}

Test(cpu, default_flags)
{
        const char *const flags[] = {"--threads", "2", NULL};

        check_cost("default", flags);
}

Test(cpu, polling_loops)
{
        const char *const flags[] = {"--threads", "2", "--spin-us", "50", "--loops", "3", NULL};

        check_cost("--spin-us 50 --loops 3", flags);
}

Test(cpu, device_process)
{
        const char *const flags[] = {"--threads", "2", "--spin-us", "50", "--device-process", "yes",
                                     NULL};

        check_cost("--spin-us 50 --device-process yes", flags);
}
