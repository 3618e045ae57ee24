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

/* Validates `in` against the session's buffers `t` and the limits, and
 * fills *out: normalized column-major problem, operand addresses, one new
 * reference per operand buffer. Inline operands are copied into fresh
 * inline buffers; *inline_bytes is increased by their size (input and
 * output) so the caller can enforce the per-submit cap.
 *
 * Returns 0, or a negative GEMMD_E* code with a one-line reason in msg;
 * on error *out holds no references. Loop thread only. */
int validate_op(const Gemmd__V1__Op *in, const struct gbuf_table *t, const struct limits *lim,
                struct op *out, uint64_t *inline_bytes, char *msg, size_t msglen);

/* Drops the buffer references an op holds. */
void op_release(struct op *o);

#endif
