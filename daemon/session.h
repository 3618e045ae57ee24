/*
 * session.h - the transport of one client connection: framed input with
 * file descriptors, queued output, and the session's lifetime
 * (daemon/session.c; its rings are daemon/ring.h). Whole frames go up
 * through the session's struct session_up; what goes down is a frame to
 * queue (session_send, session_queue_frame, session_out_*).
 */
#ifndef GEMMD_SESSION_H
#define GEMMD_SESSION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "daemon/buffers.h"
#include "proto/frame.h"

struct evloop;
struct gemmd_ring;
struct lane;
struct server;
struct user;

#define SESSION_MAX_FDS 8
#define SESSION_RBUF 65536

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

struct session;

/* What a session hands up to the protocol layer above it: the transport
 * (this file, ring.c) never calls that layer by name. The server wires it
 * in (session_accept). */
struct session_up {
        /* One whole frame's body, from the socket or (from_ring) taken
         * from the session's submission ring. */
        void (*frame)(struct session *s, const uint8_t *body, uint32_t len, int from_ring);
        /* The end of a batch of frames (a read's, or a turn of the ring):
         * what they admitted goes on to the workers, one lock for all. */
        void (*frames_done)(struct session *s);
        /* The session closes: what it queued and has not run is dropped;
         * what runs finishes and is discarded. */
        void (*closing)(struct session *s);
};

struct session {
        struct server *srv;
        const struct session_up *up;
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
         * thread answering a completion (reply.c: session_out_begin) both write, so
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
        /* Its completion words (proto/ring.h: version 2's rings), a
         * mapping of their own held by one reference, or NULL. Set with
         * the rings and kept until the session is freed. */
        struct gbuf *words;
};

/* Serves the accepted connection fd on loop ev, handing its frames up
 * through `up`. Returns 0, or a negative code (fd is closed). */
int session_accept(struct evloop *ev, int fd, const struct session_up *up);
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
/* Queues a frame for the client; closes the session on failure. */
void session_send(struct session *s, const Gemmd__V1__Envelope *env);
/* Queues a frame packed (rc 0) into buf, n bytes after its struct outbuf
 * header, holding `held` budget bytes (request.held) until it is written;
 * rc nonzero (the packing failed) closes the session. Loop thread. */
void session_queue_frame(struct session *s, int rc, uint8_t *buf, size_t n, uint64_t held);

/*
 * Any thread: a batch of frames written at once by a thread other than the
 * session's loop (a completing thread, reply.c). session_out_begin takes
 * the session's output (out_lock) and returns whether such a thread may
 * write (0 once the session closes: then only its loop writes);
 * session_out_put queues one frame behind whatever is queued (o->len and
 * o->held set), and session_out_end writes what is queued with one system
 * call (write nonzero) and lets go of the output. What the socket does not
 * take stays queued for the loop thread; a write error is kept for it
 * (session_reply_taken).
 */
int session_out_begin(struct session *s);
void session_out_put(struct session *s, struct outbuf *o);
void session_out_end(struct session *s, int write);
/* Loop thread, when it takes in the last request of a write by another
 * thread (REQ_SENT_LAST, reply.c): waits until that thread is done with the
 * session's output, then acts on what the write left (a remainder to poll
 * for, or an error to close on). The requests before it in that write need
 * no call: that one still holds the session. */
void session_reply_taken(struct session *s);

/* Whether frames are queued for the client. */
int session_has_output(struct session *s);
/* Whether the client left so many replies unread that its input waits. */
int session_output_full(struct session *s);
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

/* Writes the replies of loop ev's sessions queued while defer_flush was
 * set. */
void session_flush_dirty(struct evloop *ev);

#endif
