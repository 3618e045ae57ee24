/*
 * test_soak.c - the short soak of `make test`: build/soak with 16 client
 * processes for 10 seconds, one killed about every 150 ms (see soak.c;
 * `make soak` runs the long one).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
