/*
 * ring.h - the daemon's side of the rings a session may share with its
 * client (proto/ring.h): attaching them, taking Submits from them on the
 * loop's turns (handed up as the socket's frames are, struct session_up),
 * and the slots that Completions go in (reply.c puts them there: a small
 * group's from the thread that saw it finish, no loop or system call in
 * between, a large group's from the loops).
 */
#ifndef GEMMD_DAEMON_RING_H
#define GEMMD_DAEMON_RING_H

#include <stdint.h>

#include "daemon/session.h"
#include "proto/ring.h"

struct evloop;

/* RingAttach: maps the memfd that came with it and starts serving the
 * rings. Returns 0 (the caller answers Ack), or an error code with the
 * client told why. Loop thread. */
int ring_attach(struct session *s, uint64_t rid, const Gemmd__V1__RingAttach *m);

/* The session closes: the loop stops taking from its ring and completing
 * threads stop writing to it. Loop thread. */
void ring_close(struct session *s);

/* The session is freed: unmaps the ring and gives back the mapping it
 * counted for its user (users_map_take), who must still be held. */
void ring_free(struct session *s);

/* Takes the Submits waiting in s's ring, if its client reads its replies.
 * Returns how many. Loop thread: after its turns (ring_drain), and before
 * a frame the client sent on the socket (the protocol layer), so that a frame
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
 * ring's cq.no_poll, as ring_cq_end does for the ring's own
 * (proto/ring.h). Any thread; nothing without an open ring. */
void ring_hint(struct session *s);

/*
 * Any thread: Completions put in s's completion ring at once.
 * ring_cq_begin takes the ring (ring_lock) and returns the slots free for
 * them: 0 when the client said it sleeps on its socket (cq.flag: a reply
 * there wakes it) or left the ring full, or -1, with nothing held, when
 * the ring is closed or there is none. ring_cq_slot is the i-th of them
 * (i below what ring_cq_begin returned). ring_cq_end makes the first n
 * visible to the client, counted in the daemon's stats and with the
 * ring's cq.no_poll refreshed, and lets go of the ring; a client that fell
 * asleep meanwhile is owed a RingKick, which its loop sends
 * (ring_kick_owed, ring_taken). In between, ring_cq_word answers request
 * `id` by its completion word k instead of a slot (s->words set, k below
 * RING_WORDS), counted in the stats before the client can see it; nwords
 * tells ring_cq_end how many, for the sleep handshake.
 */
int ring_cq_begin(struct session *s);
struct ring_slot *ring_cq_slot(struct session *s, uint32_t i);
void ring_cq_word(struct session *s, uint32_t k, uint64_t id);
void ring_cq_end(struct session *s, uint32_t n, uint32_t nwords);

/* Loop thread: sends the RingKick that s's client is owed, if any. */
void ring_kick_owed(struct session *s);

/* The loop, taking in a request in REQ_RINGED_LAST: waits until the thread
 * that put it in the ring is done with the session, and sends the
 * RingKick that thread asked for. */
void ring_taken(struct session *s);

#endif
