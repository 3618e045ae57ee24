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

/* Runs build/soak with `args` (NULL-terminated), its output in OUT_NAME
 * under the test's directory and in the test log, and expects it to pass. */
static void run_soak(const char *out_name, const char *const *args)
{
        char *argv[16], out[PATH_MAX], *text;
        int n = 0, st;

        argv[n++] = e2e_build_path("soak");
        while (*args && n < 15)
                argv[n++] = (char *)*args++;
        argv[n] = NULL;
        snprintf(out, sizeof(out), "%s/%s", e2e_dir, out_name);
        st = e2e_run(argv, out, out, 200000);
        text = e2e_read_file(out, NULL);
        /* The figures go to the test log either way. */
        fprintf(stderr, "%s", text ? text : "(no output)\n");
        cr_expect_eq(st, 0, "%s failed (status %d)", out_name, st);
        cr_expect(text && strstr(text, "soak: PASS"));
        free(text);
        free(argv[0]);
}

Test(soak, sixteen_clients_ten_seconds_random_kills_nothing_lost_resources_back)
{
        static const char *const args[] = {"--clients", "16", "--seconds", "10", "--kill-ms", "150",
                                           NULL};

        run_soak("soak.out", args);
}

Test(soak, an_honest_user_beside_a_hostile_one_loses_nothing_and_the_daemon_stays_bounded)
{
        static const char *const args[] = {"--clients", "6", "--hostile", "6", "--seconds", "12",
                                           "--kill-ms", "700", NULL};

        if (geteuid() != 0)
                cr_skip_test("acting as two other users needs root");
        run_soak("soak-hostile.out", args);
}
