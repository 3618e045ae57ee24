/*
 * server.h - the event loops' world: the listener, the sessions, and the
 * hand-off of completed requests from the workers.
 *
 * The server wires the layers, which call one way: transport (session.h,
 * the socket; ring.h, the rings) hands whole frames up through each
 * session's struct session_up, which the server points at the protocol
 * layer (dispatch.h: decode, validate, admit); that hands ops to the
 * device side (worker.h), whose finished requests and launch notices come
 * back through the callbacks the server gives worker_start; a finished
 * request comes back by one route (reply.h) to its loop's completion queue
 * (loop_queue_done, server_reap) and is answered down through the
 * transport. Nothing below calls this file by name: the loops and the
 * state they share are data in loop.h, and what the layers ask of the
 * server (take completions in, see whether the drain is done) goes
 * through each loop's struct loop_up.
 *
 * The daemon serves its sessions with one or more event loops (struct
 * evloop, --loops), each on a thread of its own; a session stays on one
 * loop, and everything of it belongs to that loop's thread except the
 * loop's hand-off queues (done_lock), which workers append to before
 * telling the loop (loop_wake: a flag it looks at each turn while it
 * polls, else uv_async_send, whose sends coalesce; either way one turn
 * drains the whole queue), and a session's output queue (out_lock). What
 * the loops share is under the server's lock or atomic.
 *
 * With one loop, a completed request is answered by the thread that
 * completes it (reply.c, one write per session and group): the
 * reply goes out without waiting for the loop thread. The request still
 * goes back to the loop for everything else (counts, limits, freeing), and
 * the loop takes the completion queue in (server_reap) before acting on
 * anything a client sends that could depend on it: before every message
 * but a submit, and before refusing a submit for a cap. So a client that
 * answers a reply at once is never judged by counts that predate it, while
 * a busy read of submits is not held up by other sessions' replies (a
 * loop that packed replies and took the worker's lock per submit kept
 * submits waiting for admission).
 *
 * With several loops, the loops write every reply, after releasing the
 * request's counts: a submit on another loop is judged by those counts,
 * and the completing thread, writing the replies of large groups, noticed
 * the next group late.
 */
#ifndef GEMMD_SERVER_H
#define GEMMD_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "daemon/config.h"
#include "daemon/loop.h"
#include "daemon/worker.h"

#define SESSION_MAX_DENIED 64 /* sessions at once waiting to be told PERMISSION or LIMIT */

/* Starts listening, the workers and the signal handlers. Returns 0 or a
 * negative code (with a log line). */
int server_init(struct server *srv, uv_loop_t *loop, const struct gemmd_config *cfg);

/* Runs loop 0 until every handle is closed (the other loops run on their
 * threads, started by server_init). For cfg->spin_us after the last read
 * or reap a loop polls (epoll with no timeout) instead of sleeping, so
 * that a client's next request, or a worker's completion, costs no
 * wake-up of the loop thread. */
void server_run(struct server *srv);

/* Releases what server_init acquired; the loop must have run empty. */
void server_deinit(struct server *srv);

/* Starts the drain: stop accepting, finish in-flight work, reply, close. */
void server_drain(struct server *srv);

/* Loop thread: runs what the workers handed back (control tasks, completed
 * requests). Called by the async callback, and before a frame that may
 * depend on them is acted on (dispatch_frame, on_submit). */
void server_reap(struct evloop *ev);

/* Called by a worker when a control task has run (worker thread). */
void server_post_control(struct wctl *c, void *ctx);

/* Loop ev's thread: once the daemon drains and nothing is left in flight,
 * closes ev's sessions; loop 0 then stops the other loops and closes the
 * daemon. */
void server_maybe_finish(struct evloop *ev);

#endif
