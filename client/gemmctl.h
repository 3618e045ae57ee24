/*
 * gemmctl.h - subcommands of gemmctl that live in their own files.
 */
#ifndef GEMMD_GEMMCTL_H
#define GEMMD_GEMMCTL_H

/* `gemmctl plan ...`: argv[0] is "plan". Works without a daemon. Returns the
 * process exit status. */
int gemmctl_plan_main(int argc, char **argv);

#endif
