/*
 * test_config.c - the daemon's defaults that depend on the host: how many
 * event loops serve the connections when --loops is not given
 * (config_auto_loops), and how --resident reads (config_parse_args).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>

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

/* Parses "gemmd FLAG VALUE" (VALUE NULL: no flag at all) into *cfg,
 * which the caller releases; returns config_parse_args's result. */
static int parse_flag(const char *flag, const char *value, struct gemmd_config *cfg)
{
        char a0[] = "gemmd", a1[32], a2[16];
        char *argv[] = {a0, a1, a2, NULL};

        config_defaults(cfg);
        snprintf(a1, sizeof(a1), "%s", flag);
        if (value)
                snprintf(a2, sizeof(a2), "%s", value);
        return config_parse_args(cfg, value ? 3 : 1, argv);
}

/* --resident: auto (-1, the backend's choice) unless told yes or no; a
 * value that is none of these is refused. */
Test(resident, auto_by_default_yes_no_and_auto_as_given)
{
        static const struct {
                const char *value;
                int rc, want;
        } rcases[] = {{NULL, 0, -1}, {"auto", 0, -1}, {"yes", 0, 1}, {"no", 0, 0}, {"sometimes", -EINVAL, 0}};

        for (size_t i = 0; i < sizeof(rcases) / sizeof(rcases[0]); i++) {
                struct gemmd_config cfg;
                const int rc = parse_flag("--resident", rcases[i].value, &cfg);
                const int got = cfg.resident;

                config_release(&cfg);
                cr_expect_eq(rc, rcases[i].rc, "--resident %s: rc %d, want %d", rcases[i].value ? rcases[i].value : "(none)",
                             rc, rcases[i].rc);
                if (rcases[i].rc == 0)
                        cr_expect_eq(got, rcases[i].want, "--resident %s: %d, want %d",
                                     rcases[i].value ? rcases[i].value : "(none)", got, rcases[i].want);
        }
}

/* --resident-readers: 2 unless given, 1 to 4 (the kernel's most); any
 * other value is refused. */
Test(resident, readers_two_by_default_one_to_four_as_given)
{
        static const struct {
                const char *value;
                int rc;
                uint32_t want;
        } rcases[] = {{NULL, 0, 2}, {"1", 0, 1}, {"4", 0, 4}, {"0", -EINVAL, 0}, {"5", -EINVAL, 0}, {"two", -EINVAL, 0}};

        for (size_t i = 0; i < sizeof(rcases) / sizeof(rcases[0]); i++) {
                struct gemmd_config cfg;
                const int rc = parse_flag("--resident-readers", rcases[i].value, &cfg);
                const uint32_t got = cfg.resident_readers;
                const char *v = rcases[i].value ? rcases[i].value : "(none)";

                config_release(&cfg);
                cr_expect_eq(rc, rcases[i].rc, "--resident-readers %s: rc %d, want %d", v, rc, rcases[i].rc);
                if (rcases[i].rc == 0)
                        cr_expect_eq(got, rcases[i].want, "--resident-readers %s: %u, want %u", v, got, rcases[i].want);
        }
}
