/*
 * fuzz_common.h - what the fuzz targets share: a table of registered
 * buffers whose bytes are exactly their size (so that AddressSanitizer sees
 * any access past them), and the check that a validated op stays inside
 * its buffers.
 *
 * Each target defines LLVMFuzzerTestOneInput. Built with
 * -fsanitize=fuzzer (make fuzz) it runs under libFuzzer; built with
 * tests/fuzz/driver.c (make test) it replays the committed corpus.
 */
#ifndef GEMMD_FUZZ_COMMON_H
#define GEMMD_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/buffers.h"
#include "daemon/config.h"
#include "daemon/validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The daemon's default limits, with max_inline_bytes lowered to 1 MiB. */
void fuzz_limits(struct limits *lim);

/* Replaces the table's buffers with fresh ones of the given sizes (ids 1,
 * 2, ...), each a malloc'd block of exactly that many bytes. */
void fuzz_table_set(struct gbuf_table *t, const uint64_t *sizes, int n);

/* Checks a validated op: every operand lies inside its buffer, and every
 * element the kernels would read or write (the normalized column-major
 * problem, with its leading dimensions) lies inside its operand's span.
 * Touches those elements (all of them for small problems, the corners of
 * each operand otherwise) so that AddressSanitizer reports any that is
 * outside its buffer. Aborts on a violation. */
void fuzz_check_op(const struct op *o);

#endif
