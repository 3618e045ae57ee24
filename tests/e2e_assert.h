/*
 * e2e_assert.h - the assertions every end-to-end Criterion suite shares
 * (e2e_util.h itself stays free of Criterion, for child processes).
 */
#ifndef GEMMD_E2E_ASSERT_H
#define GEMMD_E2E_ASSERT_H

#include <criterion/criterion.h>

#include "tests/e2e_util.h"

#define START(d, ...) cr_assert_eq(e2e_daemon_start((d), __VA_ARGS__), 0, "gemmd did not start")
#define STOP(d) cr_assert_eq(e2e_daemon_stop(d), 0, "gemmd did not exit 0 on SIGTERM")

/* Runs one random inline op (sizes up to maxdim) on c and asserts it is
 * answered right, against the double-precision reference. */
static inline void e2e_assert_random_op(gemmd_client *c, uint64_t *seed, int64_t maxdim)
{
        struct e2e_spec s;
        struct e2e_prob p;
        char why[300];

        e2e_spec_random(&s, seed, maxdim);
        cr_assert_eq(e2e_prob_inline(&p, &s, seed), 0);
        cr_assert_eq(e2e_run_checked(c, &p, 1, 1, NULL, why, sizeof(why)), 0, "%s", why);
        e2e_prob_free(&p);
}

#endif
