/*
 * unixsock.h - a listening Unix stream socket at a path, for gemmd's own
 * socket and the metrics endpoint.
 */
#ifndef GEMMD_UNIXSOCK_H
#define GEMMD_UNIXSOCK_H

/* Creates a non-blocking, close-on-exec socket bound to `path` (mode 0660)
 * and listening with `backlog`. A socket file that no process serves any
 * more (left by one that died) is replaced; one that a live process serves
 * is not. Returns the descriptor, -ENAMETOOLONG, -EADDRINUSE (served by a
 * live process) or another negative errno. */
int unixsock_listen(const char *path, int backlog);

#endif
