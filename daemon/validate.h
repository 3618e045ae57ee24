/*
 * validate.h - turns a decoded Op into a runnable struct op, or a clear
 * error. Nothing reaches a worker that could touch a byte outside the
 * buffers of the session that sent it.
 */
#ifndef GEMMD_VALIDATE_H
#define GEMMD_VALIDATE_H

#include <stddef.h>

#include "daemon/buffers.h"
#include "daemon/config.h"
#include "daemon/work.h"
#include "proto/gemmd.pb-c.h"

/* What the inline operands of one submit cost, summed as validate_op goes
 * through its ops. */
struct inline_tally {
        uint64_t bytes; /* inline operand bytes, input and output: --max-inline-bytes */
        /* Bytes the daemon will hold for them until the reply is written:
         * each operand, and an inline C once more for the reply that
         * carries it back. At most `room` (the budgets' room, users.h),
         * checked before anything is allocated; over it, validate_op
         * fails with GEMMD_EBUSY and `held` says how much was asked. */
        uint64_t held, room;
};

/* Which dtypes the daemon's devices run (struct backend's dtypes bits):
 * dev[i] for device (worker) i of ndev, any for their union. */
struct dtype_caps {
        uint32_t any;
        const uint32_t *dev;
        int ndev;
};

/* Validates `in` against the session's buffers `t` and the limits, and
 * fills *out: normalized column-major problem, operand addresses, one new
 * reference per operand buffer. Inline operands are copied into fresh
 * inline buffers and counted in *tally, so that the caller can enforce the
 * per-submit cap and the byte budgets. An op whose dtype no device runs
 * (caps->any), or whose operand lives in device memory of a device that
 * does not run it, fails with GEMMD_EUNSUPPORTED.
 *
 * Returns 0, or a negative GEMMD_E* code with a one-line reason in msg;
 * on error *out holds no references. Loop thread only. */
int validate_op(const Gemmd__V1__Op *in, const struct gbuf_table *t, const struct limits *lim,
                const struct dtype_caps *caps, struct op *out, struct inline_tally *tally,
                char *msg, size_t msglen);

/* Drops the buffer references an op holds. */
void op_release(struct op *o);

#endif
