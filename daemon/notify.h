/*
 * notify.h - the sd_notify(3) protocol, spoken directly: one datagram to
 * $NOTIFY_SOCKET. Without systemd (no variable) every call does nothing.
 */
#ifndef GEMMD_NOTIFY_H
#define GEMMD_NOTIFY_H

/* Sends `state` ("READY=1", "STATUS=...", "WATCHDOG=1", "STOPPING=1").
 * Returns 0, or a negative errno (callers log and go on). */
int notify_send(const char *state);

#endif
