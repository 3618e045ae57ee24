/*
 * watchdog.h - what systemd hears while gemmd runs: STATUS lines, and
 * WATCHDOG=1 pings that stand for the workers' progress, not just for a
 * loop that still turns.
 *
 * Under systemd ($NOTIFY_SOCKET set) a timer on the loop thread sends a
 * STATUS line (sessions, ops in flight, requests served) on every tick.
 * When the service has WatchdogSec= (systemd passes $WATCHDOG_USEC, and
 * $WATCHDOG_PID naming this process when it is set), the tick comes every
 * quarter of that period and also sends WATCHDOG=1, unless a worker that
 * has work queued or running has finished nothing (no group, no control
 * task) for half the period. A wedged device therefore stops the pings and
 * systemd restarts the daemon about 1.5 periods after its last progress; a
 * wedged loop thread stops them by itself. WatchdogSec= must exceed the
 * run time of the longest group (bounded by --max-group-tiles).
 */
#ifndef GEMMD_WATCHDOG_H
#define GEMMD_WATCHDOG_H

struct server;

/* Starts the timer on srv->loop; does nothing and returns 0 without
 * $NOTIFY_SOCKET. Returns 0 or a negative errno. */
int watchdog_start(struct server *srv);

/* Closes the timer: part of the drain, so the loop can run empty. Safe
 * when nothing was started, and more than once. */
void watchdog_stop(void);

#endif
