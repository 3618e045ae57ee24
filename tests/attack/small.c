/*
 * small.c - the smaller holes one local user could use against the
 * others: another user's sessions read through stats, 32-bit fields
 * given more than 32 bits, a launch that fails for a reason of its own
 * taken for a broken device, and the startup options that were read
 * otherwise than they were written (--devices, --max-frame-bytes).
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemmd.h"
#include "tests/e2e_assert.h"
#include "tests/hard_util.h"

TestSuite(attack_small, .init = e2e_setup, .fini = e2e_teardown, .timeout = 180);

/* ---- startup options ------------------------------------------------------- */

/* Runs build/gemmd with the flags (NULL-terminated, at most 8) on a socket
 * of the test's directory, expecting it to refuse them: returns its exit
 * status (-1 when it was still running after 10 s, and was killed) and
 * what it wrote, which the caller frees. */
static int run_refused(char **err, ...)
{
        char *bin = e2e_build_path("gemmd"), sock[256], errp[256], *argv[16];
        const char *flag;
        int argc = 0, st;
        va_list ap;

        snprintf(sock, sizeof(sock), "%s/refused.sock", e2e_dir);
        snprintf(errp, sizeof(errp), "%s/refused.err", e2e_dir);
        argv[argc++] = bin;
        argv[argc++] = "--backend";
        argv[argc++] = "cpu";
        argv[argc++] = "--socket";
        argv[argc++] = sock;
        va_start(ap, err);
        while ((flag = va_arg(ap, const char *)) && argc < 14)
                argv[argc++] = (char *)flag;
        va_end(ap);
        argv[argc] = NULL;
        st = e2e_run(argv, NULL, errp, 10000);
        *err = e2e_read_file(errp, NULL);
        free(bin);
        return st;
}

/* --devices was matched as a substring of the list ("10" also selected 1
 * and 0) and took anything: a list that is not distinct indices is
 * refused at startup, saying what is wrong. */
Test(attack_small, devices_takes_only_a_list_of_distinct_indices)
{
        static const char *const bad[][2] = {
                {"1,1", "twice"}, {"10,x", "\"x\""}, {"1,,2", "\"\""}, {"0x1", "\"0x1\""},
                {"-1", "\"-1\""}, {"99999999999999999999", "99999999999999999999"},
        };

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char *err = NULL;
                int st = run_refused(&err, "--devices", bad[i][0], NULL);

                cr_expect_eq(st, 2, "--devices %s: exit status %d", bad[i][0], st);
                cr_expect(err && strstr(err, "--devices") && strstr(err, bad[i][1]),
                          "--devices %s: %s", bad[i][0], err ? err : "(no output)");
                free(err);
        }
}

/* --max-frame-bytes 1048576 was raised to the inline limit + 1 MiB
 * (17825792) without a word: a limit the operator set is now refused
 * when it cannot hold the inline bytes, and only the default grows. */
Test(attack_small, a_frame_limit_below_the_inline_limit_is_refused)
{
        struct e2e_daemon d;
        struct gemmd_info info;
        gemmd_client *c;
        char *err = NULL;
        int st = run_refused(&err, "--max-frame-bytes", "1048576", NULL);

        cr_expect_eq(st, 2, "exit status %d", st);
        cr_expect(err && strstr(err, "--max-frame-bytes 1048576") &&
                          strstr(err, "--max-inline-bytes 16777216") && strstr(err, "17825792"),
                  "%s", err ? err : "(no output)");
        free(err);

        /* Set both, consistently, and the daemon keeps them as given. */
        START(&d, "--max-frame-bytes", "1052672", "--max-inline-bytes", "4096", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(gemmd_get_info(c, &info), 0);
        cr_expect_eq(info.max_frame_bytes, 1052672);
        gemmd_disconnect(c);
        STOP(&d);

        /* Not given, the frame limit grows with the inline one. */
        START(&d, "--max-inline-bytes", "33554432", NULL);
        c = e2e_connect(&d);
        cr_assert_not_null(c);
        cr_assert_eq(gemmd_get_info(c, &info), 0);
        cr_expect_eq(info.max_frame_bytes, 33554432 + 1048576);
        gemmd_disconnect(c);
        STOP(&d);
}
