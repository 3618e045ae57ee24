/*
 * test_config.c - the daemon's defaults that depend on the host: how many
 * event loops serve the connections when --loops is not given
 * (config_auto_loops).
 */
#include <criterion/criterion.h>

#include "daemon/config.h"

/* The CPU backend's cores compute: one loop, whatever the host. */
Test(auto_loops, cpu_backend_takes_one)
{
        cr_expect_eq(config_auto_loops(0, 1, 2), 1);
        cr_expect_eq(config_auto_loops(0, 1, 128), 1);
}

/* A GPU host of fewer than 8 CPUs keeps them for the clients. */
Test(auto_loops, small_hosts_take_one)
{
        cr_expect_eq(config_auto_loops(1, 1, 4), 1);
        cr_expect_eq(config_auto_loops(1, 4, 7), 1);
}

/* Two a device, at least four. */
Test(auto_loops, two_a_device)
{
        cr_expect_eq(config_auto_loops(1, 1, 8), 4);
        cr_expect_eq(config_auto_loops(1, 1, 16), 4);
        cr_expect_eq(config_auto_loops(1, 2, 32), 4);
        cr_expect_eq(config_auto_loops(1, 3, 32), 6);
        cr_expect_eq(config_auto_loops(1, 4, 64), 8);
        cr_expect_eq(config_auto_loops(1, 8, 128), 16);
}

/* Past four, never more than a quarter of the CPUs, nor LOOPS_MAX. */
Test(auto_loops, capped_by_the_cpus)
{
        cr_expect_eq(config_auto_loops(1, 4, 16), 4);
        cr_expect_eq(config_auto_loops(1, 4, 24), 6);
        cr_expect_eq(config_auto_loops(1, 8, 48), 12);
        cr_expect_eq(config_auto_loops(1, 64, 4096), LOOPS_MAX);
}
