/*
 * ring.h - the daemon's side of the rings a session may share with its
 * client (proto/ring.h): attaching them, taking Submits from them on the
 * loop's turns, and putting Completions in them, a small group's from the
 * thread that saw it finish (no loop or system call in between), a large
 * group's from the loops.
 */
#ifndef GEMMD_DAEMON_RING_H
#define GEMMD_DAEMON_RING_H

#include "daemon/server.h"

/* RingAttach: maps the memfd that came with it and starts serving the
 * rings. Answers Ack or Error. Loop thread. */
void ring_attach(struct session *s, uint64_t rid, const Gemmd__V1__RingAttach *m);

/* The session closes: the loop stops taking from its ring and completing
 * threads stop writing to it. Loop thread. */
void ring_close(struct session *s);

/* The session is freed: unmaps the ring and gives back the mapping it
 * counted for its user (users_map_take), who must still be held. */
void ring_free(struct session *s);

/* Takes the Submits waiting in s's ring, if its client reads its replies.
 * Returns how many. Loop thread: after its turns (ring_drain), and before
 * a frame the client sent on the socket (dispatch_frame), so that a frame
 * comes after every Submit the client put in the ring before it. */
int ring_take(struct session *s);

/* Takes every Submit waiting in the rings of ev's sessions. Returns how
 * many. Loop thread, between its turns (run_loop). */
int ring_drain(struct evloop *ev);

/* Before the loop blocks: tells ev's sessions it sleeps (their Submits
 * then take the socket). Returns 0, without sleeping, if a Submit came
 * meanwhile. */
int ring_sleep(struct evloop *ev);

/* Before a Completion goes to s's client on its socket: refreshes the
 * ring's cq.no_poll, as ring_post and ring_reply do for the ring's own
 * (proto/ring.h). Any thread; nothing without an open ring. */
void ring_hint(struct session *s);

/* A completing thread: puts the Completions of r and the requests after it
 * of the same session in its completion ring, as many as fit and unless
 * the client said it sleeps, and queues them on the session's loop. Returns the first request it did not take
 * (r itself when it took none): the caller hands that on as usual. */
struct request *ring_post(struct request *r);

/* The loop, answering a request it took in unanswered: puts its
 * Completion in the session's ring if the session has one with room and
 * the client did not say it sleeps.
 * Returns 0 if it did, else -1 (the socket answers). */
int ring_reply(struct request *r);

/* The loop, taking in a request in REQ_RINGED_LAST: waits until the thread
 * that put it in the ring is done with the session, and sends the
 * RingKick that thread asked for. */
void ring_taken(struct session *s);

#endif
