/*
 * test_config.c - the daemon's defaults that depend on the host: how many
 * event loops serve the connections when --loops is not given
 * (config_auto_loops).
 */
#include <criterion/criterion.h>

#include "daemon/config.h"

/* GPU backends?, devices, online CPUs, and the loops they get. */
static const struct {
        int gpu, ndevices;
        long cpus;
        int want;
} cases[] = {
        /* The CPU backend's cores compute: one loop, whatever the host. */
        {0, 1, 2, 1},
        {0, 1, 128, 1},
        /* A GPU host of fewer than 8 CPUs keeps them for the clients. */
        {1, 1, 4, 1},
        {1, 4, 7, 1},
        /* Two a device, at least four. */
        {1, 1, 8, 4},
        {1, 1, 16, 4},
        {1, 2, 32, 4},
        {1, 3, 32, 6},
        {1, 4, 64, 8},
        {1, 8, 128, 16},
        /* Past four, never more than a quarter of the CPUs, nor LOOPS_MAX. */
        {1, 4, 16, 4},
        {1, 4, 24, 6},
        {1, 8, 48, 12},
        {1, 64, 4096, LOOPS_MAX},
};

Test(auto_loops, by_backend_devices_and_cpus)
{
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const int got = config_auto_loops(cases[i].gpu, cases[i].ndevices, cases[i].cpus);

                cr_expect_eq(got, cases[i].want, "gpu %d, %d devices, %ld CPUs: %d loops, want %d", cases[i].gpu,
                             cases[i].ndevices, cases[i].cpus, got, cases[i].want);
        }
}
