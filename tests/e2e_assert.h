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

#endif
