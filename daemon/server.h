/*
 * server.h - the event loops' world: the listener, the sessions, and the
 * hand-off of completed requests from the workers.
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
 * completes it (session_reply_now, one write per session and group): the
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
#include "daemon/validate.h"
#include "daemon/worker.h"
#include "proto/frame.h"
#include "proto/ring.h"

#define SESSION_MAX_FDS 8
#define SESSION_RBUF 65536
#define SESSION_MAX_DENIED 64 /* sessions at once waiting to be told PERMISSION or LIMIT */

/* A connection's protocol state, changed only by session_set_state(). */
enum session_state {
        SESSION_HELLO,   /* nothing but Hello is accepted */
        SESSION_READY,   /* handshake done */
        SESSION_CLOSING, /* flushing a final error, then closing */
        SESSION_CLOSED,  /* socket closed; waiting for in-flight requests */
};

struct outbuf {
        struct outbuf *next;
        size_t len;
        uint64_t held; /* budget bytes given back once it is written (request.held) */
        uint8_t data[];
};

struct session {
        struct server *srv;
        struct evloop *ev; /* the event loop that serves it: only its thread touches it */
        struct session *next, *prev; /* on ev->sessions */
        uint64_t id;
        int fd;
        uv_poll_t poll;
        int poll_events;
        int refs; /* the connection + one per live request */
        enum session_state state;
        struct ucred cred;
        uint64_t t_accept_ns;
        uint64_t t_state_ns;  /* when it entered its state */
        uint64_t t_active_ns; /* its last read or frame (--idle-timeout-ms) */
        uint64_t t_frame_ns;  /* when the frame not yet whole began, or 0 */
        int denied; /* GEMMD_EPERM (not on the allow-list) or GEMMD_ELIMIT (one
                     * session too many): the first frame gets that, then close */
        int admin;  /* root or in --admin-gid: its stats show every session */
        char denied_why[112]; /* GEMMD_ELIMIT: which limit */

        /* Input: a read buffer of whole small frames, or one large body. */
        uint8_t *rbuf;
        size_t rlen;
        uint8_t *body;
        uint32_t body_len, body_got;
        int parsing; /* in parse_rbuf: replies flushed meanwhile must not re-enter it */
        int fds[SESSION_MAX_FDS]; /* received with SCM_RIGHTS, not yet used */
        int nfds;
        int fds_dropped; /* the daemon had no descriptor left to receive one */
        struct frame_arena arena;

        /* Output: packed frames not yet written. The loop thread and a
         * thread answering a completion (session_reply_now) both write, so
         * the queue, the socket's writes and out_open are under out_lock.
         * out_open is cleared when the session starts closing: from then on
         * only the loop thread writes, and the descriptor is closed only
         * after that. out_err is a write error met off the loop thread. */
        pthread_mutex_t out_lock;
        struct outbuf *out_head, *out_tail;
        size_t out_off;
        atomic_uint_fast64_t out_bytes; /* also read without the lock */
        int out_open;
        int out_err;

        struct gbuf_table bufs;
        struct user *user;  /* the peer's uid: what it holds over all its sessions */
        /* Bytes held for its inline operands and the replies carrying
         * inline results (users_inline_take); added by its loop, given
         * back by whichever thread writes the reply. */
        atomic_uint_fast64_t inline_held;
        struct lane *lanes; /* nworkers * NPRIO */
        int staged;         /* a lane holds ops not yet handed over */
        uint32_t inflight_ops;

        uint64_t submits, ops_ok, ops_failed, rejected;
        int dirty;                   /* on ev->dirty: replies to write */
        struct session *next_dirty;

        /* The rings the client attached (daemon/ring.c, proto/ring.h), or
         * NULL. The loop takes Submits from sq (sq_tail: its own);
         * completing threads put Completions in cq under ring_lock,
         * which also guards cq_head and ring_open (cleared at close).
         * ring_kick: the client sleeps and is owed a RingKick on the
         * socket (set by a completing thread, sent by the loop). */
        struct gemmd_ring *ring;
        struct session *ring_next, *ring_prev; /* on ev->rings */
        uint32_t sq_tail;
        pthread_mutex_t ring_lock;
        uint32_t cq_head;
        atomic_int ring_open; /* also read without the lock, as a hint */
        atomic_int ring_kick;
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
        int defer_flush;          /* > 0: replies wait for server_flush_dirty */
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

/* Called by a worker with requests whose last op is done, linked through
 * `next` (any thread): answers what it can at once, and queues every one
 * for the loop thread. */
void server_post_completions(struct request *done, void *ctx);

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

/* Picks the worker for a request's ops: the device whose memory an
 * operand is in, else the least pending of the devices that run all of
 * its ops' dtypes. NULL when that device, or every device, lacks one. */
struct worker *server_pick_worker(struct server *srv, const struct request *r);

/* Loop ev's thread: once the daemon drains and nothing is left in flight,
 * closes ev's sessions; loop 0 then stops the other loops and closes the
 * daemon. */
void server_maybe_finish(struct evloop *ev);

/* Wakes every loop (uv_async_send): something they wait for in the drain
 * changed. Any thread. */
void server_wake_all(struct server *srv);

/* session.c */
int session_accept(struct evloop *ev, int fd);
/* Whether the peer of the accepted connection fd would be served now
 * (session_accept decides): 0, GEMMD_EPERM (not allowed) or GEMMD_ELIMIT,
 * with the reason in why. Loop 0, before handing fd to a loop. */
int session_admissible(struct server *srv, int fd, char *why, size_t len);
/* Loop ev's timer (every 1 s or less): closes its sessions that sent no
 * Hello in time (--hello-timeout-ms), left a frame unfinished
 * (--frame-timeout-ms), did not read their last error, or stayed idle
 * (--idle-timeout-ms). */
void session_sweep(uv_timer_t *t);
void session_set_state(struct session *s, enum session_state st);
/* Hands the ops that the session's submits admitted (staged on its lanes)
 * to the workers. Called after each read's frames and before a close. */
void session_hand_over(struct session *s);
/* Queues a frame for the client; closes the session on failure. */
void session_send(struct session *s, const Gemmd__V1__Envelope *env);
/* Queues the Completion of r (dispatch_pack_completion), which takes over
 * the budget bytes r held (request.held) until it is written. */
void session_send_completion(struct session *s, struct request *r);
/* Any thread, for a list of requests whose last ops are done (linked by
 * next): answers r and the requests after it of the same session, each
 * packed and queued behind whatever is queued, then written with one
 * system call. The answered requests are marked replied, the last of them
 * reply_sync, and put on the completion queue (server_queue_done_list) before
 * the write. What the socket does not take at once stays queued for the
 * loop thread. Returns the first request it did not answer (the next
 * session's, or NULL), and sets *stuck when that one is of this session
 * and must be answered by the loop: it is closing, asked for Launched
 * messages, or has a large inline result. */
struct request *session_reply_now(struct request *r, int *stuck);
/* Loop thread, when it takes in the last request of a write by
 * session_reply_now (reply_sync): waits until that thread is done with the
 * session's output, then acts on what the write left (a remainder to poll
 * for, or an error to close on). The requests before it in that write need
 * no call: that one still holds the session. */
void session_reply_taken(struct session *s);

/* Whether frames are queued for the client. */
int session_has_output(struct session *s);
/* Whether the client left so many replies unread that its input waits. */
int session_output_full(struct session *s);
/* Gives back the user's and the daemon's counts of n ops of s (any thread;
 * the session's own count is its loop's). */
void server_uncount_shared(struct session *s, uint32_t n);
void session_send_error(struct session *s, uint64_t request_id, int err, int op_index,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Sends nothing more after what is queued, then closes. */
void session_close_after_flush(struct session *s);
void session_close(struct session *s);
void session_unref(struct session *s);
/* Takes the oldest received file descriptor, or -1. */
int session_take_fd(struct session *s);
/* Answers request rid, a `what` that came without the descriptor it
 * needs: RESOURCE when the daemon had none left to receive it with, else
 * PROTOCOL. */
void session_no_fd(struct session *s, uint64_t rid, const char *what);

/* Writes the replies queued while defer_flush was set. */
void server_flush_dirty(struct evloop *ev);

/* dispatch.c */
/* Acts on one frame body; from_ring: it came through the session's
 * submission ring, where only Submit may come. */
void dispatch_frame(struct session *s, const uint8_t *buf, uint32_t len, int from_ring);
/* Answers request rid with Ack. */
void dispatch_ack(struct session *s, uint64_t rid);
void dispatch_completion(struct request *r);
/* Packs the Completion of r (per op: status, timings, an inline C's bytes)
 * into a new allocation with room for a struct outbuf before the frame, as
 * frame_pack_completion, and counts the reply in the daemon's stats. Reads
 * only r, so any thread may call it once r's last op is done. */
int dispatch_pack_completion(const struct request *r, uint8_t **buf, size_t *n);
/* The same Completion written at dst (a ring's slot, cap bytes) without a
 * frame header; GEMMD_ETOOBIG, with nothing written or counted, when it
 * does not fit. */
int dispatch_pack_completion_body(const struct request *r, uint8_t *dst, size_t cap, size_t *n);

/* stats.c */
/* Renders the daemon's stats as text or JSON into *out (malloc'd). With
 * only_uid >= 0, the sessions and per-user counts shown are those of that
 * uid alone (the daemon-wide totals stay); with -1, everyone's. Returns 0
 * or a negative errno. */
int stats_render(struct server *srv, int json, long long only_uid, char **out);

#endif
