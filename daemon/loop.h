/*
 * loop.h - the event loops (struct evloop) and the state they share
 * (struct server): the data that every layer running on a loop touches,
 * below all of them. Nothing here calls up: what the server (server.c,
 * which owns and wires the loops) must do when a layer below it asks is
 * reached through the loop's hooks (struct loop_up), which server_init
 * sets. What belongs to the loop object itself (its account, its
 * completion queue, waking the loops) is here.
 */
#ifndef GEMMD_LOOP_H
#define GEMMD_LOOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/config.h"
#include "daemon/pcount.h"
#include "daemon/work.h"

struct backend;
struct evloop;
struct request;
struct session;
struct user;
struct wctl;
struct worker;

/* What a loop asks of the server above it (server.c sets them; every
 * loop has the same). The transport, the protocol layer and device
 * memory's control tasks reach the server only through these. */
struct loop_up {
        /* Loop ev's thread: takes in what the workers handed back
         * (completed requests, control tasks) before acting on something
         * that may depend on it (server_reap). */
        void (*reap)(struct evloop *ev);
        /* Loop ev's thread: something the drain waits for changed (a
         * session closed or wrote all its output, a control task ended):
         * once the daemon drains and nothing is left in flight, closes
         * ev's sessions and, on loop 0, the daemon (server_maybe_finish). */
        void (*settled)(struct evloop *ev);
};

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
        const struct loop_up *up;
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

        /* The hand-off without a system call: another thread that queues
         * something for the loop sets `handed`; a loop that polls (its
         * --spin-us window) looks at it each turn, so only a loop that is
         * (or may be) asleep gets the async wake-up, a write to its
         * eventfd (loop_wake). Apart from the loop's own fields, since
         * other threads write it. */
        _Alignas(64) atomic_int handed;
        atomic_int polling; /* the loop looks at `handed` each turn */
        _Alignas(64) uint64_t active_ns; /* when the loop last read or reaped (server_run) */
        /* The loop's own account (loop_account): its callbacks, the
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
        /* What the devices run, for validation: caps.dev points at
         * dev_dtypes, one per backend. */
        struct dtype_caps caps;
        uint32_t *dev_dtypes;

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
        /* Admitted and not yet completed, all sessions (admit): moved by
         * every op's admission and completion, so alone on its line. */
        _Alignas(64) atomic_uint queued_ops;
        _Alignas(64) uint32_t pending_controls; /* control tasks whose done() has not run */
        atomic_int draining;
        int exit_code;          /* the daemon's exit status after the drain */
        atomic_int device_lost; /* set by a worker whose device broke */
        /* Requests admitted, replies and how they went (pcount.h): every
         * op adds to them, from every loop and completing thread. */
        struct pcounts counts;
        atomic_uint rings_now; /* sessions with rings attached */
        /* Sessions with ops in flight, and how many of them may have their
         * clients poll (cfg->client_poll_max, resolved): past that, each
         * Completion asks its client to sleep (ring_hint, proto/ring.h).
         * Read by every reply to a ring, so on a line of its own. */
        _Alignas(64) atomic_uint busy_sessions;
        _Alignas(64) uint32_t poll_max;

        uint64_t t_start_ns;
        atomic_uint_fast64_t sessions_total, rejections[32];
};

/* Adds one loop callback that started at t0 (now_ns()) to loop ev's
 * account: the loop object's own business, so kept with it rather than
 * asked of the server. Called by the outermost callbacks only: client I/O,
 * a turn of the rings and the completion wake-up (accepting connections,
 * rare, is left out). */
static inline void loop_account(struct evloop *ev, uint64_t t0)
{
        uint64_t dt = now_ns() - t0;

        ev->loop_callbacks++;
        ev->loop_busy_ns += dt;
        ev->loop_hist[hist_bucket(dt / 1000)]++;
}

/* Appends the requests from head to tail (linked by next) to loop ev's
 * completion queue, under one lock, without waking the loop (the caller
 * does: loop_wake). Any thread (the reply path, reply.c). */
static inline void loop_queue_done(struct evloop *ev, struct request *head, struct request *tail)
{
        tail->next = NULL;
        pthread_mutex_lock(&ev->done_lock);
        if (ev->done_tail)
                ev->done_tail->next = head;
        else
                ev->done_head = head;
        ev->done_tail = tail;
        pthread_mutex_unlock(&ev->done_lock);
}

/* Tells loop ev that something was queued for it (completions, control
 * tasks, connections, a stop): it takes them in its next turn if it polls,
 * else the async handle wakes it. Any thread. With the loop's store of
 * `polling` before its look at `handed` (run_loop), one of the two sees
 * the other's store: the loop never sleeps on a hand-off. */
static inline void loop_wake(struct evloop *ev)
{
        atomic_store(&ev->handed, 1);
        if (!atomic_load(&ev->polling))
                uv_async_send(&ev->async);
}

/* Wakes every loop: something they wait for in the drain changed. Any
 * thread. */
static inline void loop_wake_all(struct server *srv)
{
        for (int i = 0; i < srv->nloops; i++)
                loop_wake(&srv->loops[i]);
}

#endif
