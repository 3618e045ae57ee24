/*
 * server.h - the event loops' world: the listener, the sessions, and the
 * hand-off of completed requests from the workers.
 *
 * The server wires the layers, which call one way: transport (session.h,
 * the socket; ring.h, the rings) hands whole frames up through each
 * session's struct session_up, which the server points at the protocol
 * layer (dispatch.h: decode, validate, admit); that hands ops to the
 * device side (worker.h); a finished request comes back by one route
 * (reply.h) to its loop's completion queue (server_queue_done_list,
 * server_reap) and is answered down through the transport.
 *
 * The daemon serves its sessions with one or more event loops (struct
 * evloop, --loops), each on a thread of its own; a session stays on one
 * loop, and everything of it belongs to that loop's thread except the
 * loop's hand-off queues (done_lock), which workers append to before
 * waking the loop with uv_async_send (sends coalesce, so the callback
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

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "daemon/buffers.h"
#include "daemon/config.h"
#include "daemon/worker.h"
#include "proto/frame.h"
#include "proto/ring.h"

#define SESSION_MAX_DENIED 64 /* sessions at once waiting to be told PERMISSION or LIMIT */

struct session;

/* Parts of the loop's busy time, for its account (stats.c). They nest:
 * a reap can run inside a frame's handling. */
enum loop_part {
        LOOP_RECV,    /* recvmsg of client bytes */
        LOOP_FRAMES,  /* decoding and acting on whole frames */
        LOOP_ENQUEUE, /* handing admitted ops to a worker (its lock) */
        LOOP_REAP,    /* taking completed requests in (server_reap) */
        LOOP_PARTS
};

/*
 * One event loop and its thread. Loop 0 is the main one (main.c's loop,
 * on the main thread): it also listens, handles signals, metrics and the
 * watchdog, and hands each accepted connection to a loop in turn (itself
 * included) through that loop's new-connection queue. Every other loop
 * runs on a thread of its own. A session lives on one loop for good, and
 * a request goes back to its session's loop (its `home`), so everything of
 * a session stays on one thread as before; what the loops share is under
 * the server's lock or atomic (struct server).
 */
struct evloop {
        struct server *srv;
        int index;
        uv_loop_t *loop;
        uv_loop_t own; /* the loop of a thread of its own (index > 0) */
        pthread_t thread;
        uv_async_t async;
        uv_timer_t sweep_timer; /* session_sweep */

        /* Handed in by other threads: completed requests, control tasks,
         * and accepted connections (index > 0). */
        pthread_mutex_t done_lock;
        struct request *done_head, *done_tail;
        struct wctl *ctl_head, *ctl_tail;
        int *newfds;
        uint32_t nnew, capnew;

        struct session *sessions; /* its sessions; the list changes under srv->lock */
        struct session *rings;    /* its sessions with rings (its thread only) */
        int rings_armed;          /* it told them it sleeps (ring_sleep) */
        int defer_flush;          /* > 0: replies wait for session_flush_dirty */
        struct session *dirty;    /* sessions with replies to write */
        /* The drain as this loop sees it: set by its own thread between
         * callbacks (at a read's start, on_async, or server_drain on loop
         * 0), so that a read under way when the drain starts finishes
         * admitting what it reads, as with one loop. */
        int draining;
        atomic_int finished;      /* drained: its sessions are closed (index > 0) */
        atomic_int stop;          /* told by loop 0 to leave its run (index > 0) */

        uint64_t active_ns; /* when the loop last read or reaped (server_run) */
        /* The loop's own account (server_loop_account): its callbacks, the
         * time they held the thread, and their durations in log2 us
         * buckets. A long callback delays every client's next read. */
        uint64_t loop_callbacks, loop_busy_ns, loop_hist[HIST_BUCKETS];
        uint64_t loop_part_ns[LOOP_PARTS]; /* where the busy time went */
};

struct server {
        uv_loop_t *loop; /* loop 0's */
        const struct gemmd_config *cfg;
        int listen_fd;
        int listen_owned; /* we created the socket file (not socket activation) */
        uv_poll_t listen_poll;
        int listening;
        /* Out of descriptors, a connection is refused on the spare one
         * (on_listen); without it the listener rests a while. At most a
         * warning a second says so, with the count since the last. */
        int spare_fd;
        uv_timer_t listen_rest;
        uint64_t accept_warn_ns;
        uint32_t accept_refused;
        uv_signal_t sigterm, sigint;

        struct evloop *loops; /* nloops; loops[0] is the main one */
        int nloops;
        uint32_t next_loop; /* the loop the next connection goes to */

        struct backend **backends;
        int nbackends;
        struct worker *workers;
        int nworkers;

        /* The lock of what the loops share: the users and their counts,
         * the session counts and every loop's session list, the daemon's
         * queued ops and pending control tasks. Held briefly: admission
         * and completion of a request take it once each. */
        pthread_mutex_t lock;
        struct user *users; /* users with sessions (users.h) */
        atomic_uint mappings; /* buffers and rings mapped for all users (users_map_take) */
        uint32_t nsessions;
        uint32_t ndenied; /* sessions with `denied` set, counted in nsessions */
        uint64_t next_session_id;
        uint32_t queued_ops; /* admitted and not yet completed, all sessions */
        uint32_t pending_controls; /* control tasks whose done() has not run */
        atomic_int draining;
        int exit_code;          /* the daemon's exit status after the drain */
        atomic_int device_lost; /* set by a worker whose device broke */
        /* Completions packed for the wire: how many, how many of them the
         * completing thread wrote itself, and the summed time from the
         * request's last op done to its reply packed (either thread). */
        atomic_uint_fast64_t replies, replies_now, replies_ring, reply_wait_ns;
        atomic_uint_fast64_t submits_ring; /* Submits taken from rings */
        atomic_uint rings_now;             /* sessions with rings attached */
        /* Sessions with ops in flight, and how many of them may have their
         * clients poll (cfg->client_poll_max, resolved): past that, each
         * Completion asks its client to sleep (ring_hint, proto/ring.h). */
        atomic_uint busy_sessions;
        uint32_t poll_max;
        atomic_uint_fast64_t no_poll_replies; /* answers that asked it (a ring batch or a socket reply) */

        uint64_t t_start_ns;
        atomic_uint_fast64_t sessions_total, requests, rejections[32];
};

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

/* Appends the requests from head to tail (linked by next) to loop ev's
 * completion queue, under one lock, without waking the loop (the caller
 * does: uv_async_send). Any thread. */
void server_queue_done_list(struct evloop *ev, struct request *head, struct request *tail);

/* Loop thread: runs what the workers handed back (control tasks, completed
 * requests). Called by the async callback, and before a frame that may
 * depend on them is acted on (dispatch_frame, on_submit). */
void server_reap(struct evloop *ev);

/* Adds one loop callback that started at t0 (now_ns()) to the loop's
 * account. Called by the outermost callbacks only: client I/O and the
 * completion wake-up (accepting connections, rare, is left out). */
void server_loop_account(struct evloop *ev, uint64_t t0);

/* Called by a worker when a control task has run (worker thread). */
void server_post_control(struct wctl *c, void *ctx);

/* Picks the worker for a request's ops (least pending on CUDA). */
struct worker *server_pick_worker(struct server *srv, const struct request *r);

/* Loop ev's thread: once the daemon drains and nothing is left in flight,
 * closes ev's sessions; loop 0 then stops the other loops and closes the
 * daemon. */
void server_maybe_finish(struct evloop *ev);

/* Wakes every loop (uv_async_send): something they wait for in the drain
 * changed. Any thread. */
void server_wake_all(struct server *srv);

/* stats.c */
/* Renders the daemon's stats as text or JSON into *out (malloc'd). With
 * only_uid >= 0, the sessions and per-user counts shown are those of that
 * uid alone (the daemon-wide totals stay); with -1, everyone's. Returns 0
 * or a negative errno. */
int stats_render(struct server *srv, int json, long long only_uid, char **out);

#endif
