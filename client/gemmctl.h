/*
 * gemmctl.h - subcommands of gemmctl that live in their own files.
 */
#ifndef GEMMD_GEMMCTL_H
#define GEMMD_GEMMCTL_H

#include <stdint.h>
#include <stdio.h>

/* `gemmctl plan ...`: argv[0] is "plan". Works without a daemon. Returns the
 * process exit status. */
int gemmctl_plan_main(int argc, char **argv);

/* `gemmctl top`: every `interval` seconds, `count` times (0: until
 * interrupted), prints a block of what changed in the daemon's statistics.
 * Returns the process exit status. */
int gemmctl_top_run(const char *socket, double interval, long count);

/* Writes one block of `gemmctl top` to f from two samples of the daemon's
 * JSON statistics taken dt seconds apart, leaving out session `self` (the
 * one asking). Returns 0, or -EINVAL when a sample is not a JSON object. */
int gemmctl_top_block(FILE *f, const char *socket, const char *prev_json, const char *cur_json,
                      double dt, uint64_t self);

#endif
