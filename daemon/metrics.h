/*
 * metrics.h - the daemon's counters in the Prometheus text exposition
 * format, served over HTTP by the loop thread (--metrics-listen).
 *
 * The endpoint answers `GET /metrics` (and HEAD) with text/plain version
 * 0.0.4, anything else with 404 or 405, and closes every connection after
 * its response. It is small and bounded: requests are capped at
 * METRICS_MAX_REQUEST bytes, at most METRICS_MAX_CONNS connections are open
 * at once, and a connection is closed METRICS_CONN_TIMEOUT_MS after it was
 * accepted, whatever it is doing.
 *
 * The counters the rest of the daemon does not keep (ops and requests by
 * kind, dtype, status and uid; error replies by code and uid; the sums of
 * the time histograms) are kept here, fed by metrics_count_request() and
 * metrics_count_error(). Everything in this module belongs to the loop
 * thread: there is one endpoint per process, so its state is file-static.
 */
#ifndef GEMMD_METRICS_H
#define GEMMD_METRICS_H

#include <stddef.h>
#include <sys/types.h>

struct request;
struct server;

#define METRICS_MAX_REQUEST 8192
#define METRICS_MAX_CONNS 32
#define METRICS_CONN_TIMEOUT_MS 10000
#define METRICS_MAX_UIDS 256 /* distinct uids counted apart; more share uid="other" */

/* Starts serving srv->cfg->metrics_listen ("unix:PATH" or "tcp:HOST:PORT",
 * HOST an IPv4 address or a bracketed IPv6 one) on srv->loop. Does nothing
 * and returns 0 when it is NULL. On failure it logs why and returns a
 * negative errno; a bad address or a failed bind leaves no handle open. */
int metrics_start(struct server *srv);

/* Closes the listener (removing its socket file) and every open connection.
 * Part of the drain: afterwards the endpoint holds no handle, so the loop
 * can run empty. Safe to call when nothing was started, and more than once. */
void metrics_stop(void);

/* Counts a finished request and each of its ops (by kind, dtype, status and
 * the session's uid), and adds its ops' queue and run times to the sums of
 * the time histograms. Called by dispatch_completion before the request is
 * freed. */
void metrics_count_request(const struct request *r);

/* Counts one error reply with wire code `code` sent to a session of `uid`. */
void metrics_count_error(uid_t uid, int code);

/* Renders every metric of srv into a malloc'd text the caller frees with
 * free(); *len receives its length. Returns 0 or -ENOMEM. */
int metrics_render(struct server *srv, char **out, size_t *len);

#endif
