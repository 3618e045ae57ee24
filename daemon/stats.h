/*
 * stats.h - the daemon's stats report (daemon/stats.c), which reads every
 * layer's counters and calls none of them: the protocol layer answers a
 * StatsRequest with it.
 */
#ifndef GEMMD_STATS_H
#define GEMMD_STATS_H

struct server;

/* Renders the daemon's stats as text or JSON into *out (malloc'd). With
 * only_uid >= 0, the sessions and per-user counts shown are those of that
 * uid alone (the daemon-wide totals stay); with -1, everyone's. Returns 0
 * or a negative errno. */
int stats_render(struct server *srv, int json, long long only_uid, char **out);

#endif
