/*
 * test_soak.c - the short soaks of `make test`: build/soak with 16 client
 * processes for 10 seconds, one killed about every 150 ms, and (as root)
 * 6 honest client processes of one user beside 6 attackers of another for
 * 12 seconds (see soak.c; `make soak` runs the long plain one).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/hard_util.h"

TestSuite(soak, .init = e2e_setup, .fini = e2e_teardown, .timeout = 240);

Test(soak, sixteen_clients_ten_seconds_random_kills_nothing_lost_resources_back)
{
        char *bin = e2e_build_path("soak"), out[PATH_MAX], *text;
        char *argv[] = {bin, "--clients", "16", "--seconds", "10", "--kill-ms", "150", NULL};
        int st;

        snprintf(out, sizeof(out), "%s/soak.out", e2e_dir);
        st = e2e_run(argv, out, out, 200000);
        text = e2e_read_file(out, NULL);
        /* The figures go to the test log either way. */
        fprintf(stderr, "%s", text ? text : "(no output)\n");
        cr_expect_eq(st, 0, "the soak failed (status %d)", st);
        cr_expect(text && strstr(text, "soak: PASS"));
        free(text);
        free(bin);
}

Test(soak, an_honest_user_beside_a_hostile_one_loses_nothing_and_the_daemon_stays_bounded)
{
        char *bin = e2e_build_path("soak"), out[PATH_MAX], *text;
        char *argv[] = {bin, "--clients", "6", "--hostile", "6", "--seconds", "12", "--kill-ms", "700",
                        NULL};
        int st;

        if (geteuid() != 0)
                cr_skip_test("acting as two other users needs root");
        snprintf(out, sizeof(out), "%s/soak-hostile.out", e2e_dir);
        st = e2e_run(argv, out, out, 200000);
        text = e2e_read_file(out, NULL);
        fprintf(stderr, "%s", text ? text : "(no output)\n");
        cr_expect_eq(st, 0, "the hostile soak failed (status %d)", st);
        cr_expect(text && strstr(text, "soak: PASS"));
        free(text);
        free(bin);
}
