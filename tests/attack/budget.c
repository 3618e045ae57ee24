/*
 * budget.c - what one user's client can make the daemon hold, and what the
 * daemon does when it runs out anyway.
 *
 * Memory mappings: every registered shared-memory buffer is a mapping in
 * the daemon, and the kernel allows a process only vm.max_map_count of
 * them. One user registering tens of thousands of small buffers over many
 * sessions must meet a per-user cap, not the kernel's limit; and when an
 * allocation on the worker's path fails all the same (the fault-injection
 * build makes it fail on demand: GEMMD_FAULT_ALLOC), the ops concerned
 * fail with GEMMD_ERESOURCE and the worker goes on serving.
 *
 * Memory: a submit of 51 bytes can ask for a 16 MiB inline result, which
 * the daemon computes and packs into a reply. A client that sends many and
 * reads no reply must meet the session's and the user's byte budgets, and
 * the daemon's memory must stay under the bound gemmd(8) gives for the
 * limits in force.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/e2e_assert.h"
#include "tests/hard_util.h"

TestSuite(attack_budget, .init = e2e_setup, .fini = e2e_teardown, .timeout = 240);

#define WAIT_MS 20000

/* A random inline problem run on c and checked against the reference. */
static void run_checked(gemmd_client *c, uint64_t *seed)
{
        struct e2e_spec s;
        struct e2e_prob p;
        char why[256];

        e2e_spec_random(&s, seed, 48);
        cr_assert_eq(e2e_prob_inline(&p, &s, seed), 0);
        cr_assert_eq(e2e_run_checked(c, &p, 1, 1, NULL, why, sizeof(why)), 0, "%s", why);
        e2e_prob_free(&p);
}

/* A number of the first device in the daemon's stats (JSON), or -1. */
static long long device_number(gemmd_client *c, const char *key)
{
        char *json = NULL;
        long long v = -1;

        if (gemmd_stats(c, 1, &json) == 0) {
                const char *dev = strstr(json, "\"devices\":");

                v = dev ? hard_json_number(dev, key) : -1;
        }
        free(json);
        return v;
}

/* Starts build/gemmd-fi with GEMMD_FAULT_ALLOC=site: a debug op then fails
 * the worker's allocation at that site instead of faulting the device. */
static void start_fi(struct e2e_daemon *d, const char *site)
{
        char *fi = e2e_build_path("gemmd-fi");
        int rc;

        cr_assert(fi && access(fi, X_OK) == 0, "no gemmd-fi beside gemmd");
        free(fi);
        setenv("E2E_GEMMD", "gemmd-fi", 1);
        setenv("GEMMD_FAULT_ALLOC", site, 1);
        rc = e2e_daemon_start(d, "--threads", "2", NULL);
        unsetenv("E2E_GEMMD");
        unsetenv("GEMMD_FAULT_ALLOC");
        cr_assert_eq(rc, 0, "gemmd-fi did not start");
}

/* The worker finds no memory for an op at `site` (the room for it in a
 * group, or its group's plan): the op fails with GEMMD_ERESOURCE within a
 * generous deadline, instead of the worker spinning on it; the same client
 * and another are served at once after it, and SIGTERM still ends the
 * daemon with status 0. */
static void worker_out_of_memory(const char *site)
{
        struct e2e_daemon d;
        struct e2e_spec s;
        struct e2e_prob p;
        struct gemmd_result res;
        gemmd_client *c1, *c2;
        gemmd_ticket t;
        uint64_t seed = 27;
        int rc;

        start_fi(&d, site);
        c1 = e2e_connect(&d);
        c2 = e2e_connect(&d);
        cr_assert(c1 && c2);
        run_checked(c1, &seed);

        e2e_spec_random(&s, &seed, 32);
        cr_assert_eq(e2e_prob_inline(&p, &s, &seed), 0);
        p.op.flags |= GEMMD_OPF_DEBUG_FAULT;
        cr_assert_eq(gemmd_submit(c1, &p.op, 1, GEMMD_PRIO_NORMAL, &t), 0);
        rc = gemmd_wait(c1, t, WAIT_MS, &res, 1);
        cr_assert_eq(rc, GEMMD_ERESOURCE, "the op the worker had no memory for (%s): %s", site,
                     gemmd_strerror(rc));
        cr_expect_eq(res.status, GEMMD_ERESOURCE);
        e2e_prob_free(&p);

        for (int i = 0; i < 4; i++) {
                run_checked(c2, &seed);
                run_checked(c1, &seed);
        }
        cr_expect_eq(device_number(c2, "ops_failed"), 1);
        /* Nothing was left to repair: no device process was replaced. */
        cr_expect_leq(device_number(c2, "process_restarts"), 0);
        gemmd_disconnect(c1);
        gemmd_disconnect(c2);
        STOP(&d);
}

Test(attack_budget, no_room_for_an_op_in_a_group_fails_it_and_the_worker_serves_on)
{
        worker_out_of_memory("group");
}

Test(attack_budget, no_memory_for_a_groups_plan_fails_its_ops_and_the_worker_serves_on)
{
        worker_out_of_memory("plan");
}
