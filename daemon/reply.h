/*
 * reply.h - the one way back of a completed request to its client.
 *
 * Every completed request takes the same route: the thread that completes
 * its last op hands it to reply_post, which chooses (reply_route, the one
 * place that chooses) whether that thread answers it at once, in the
 * session's completion ring or on its socket, or leaves it to the loop;
 * either way the request then goes to its session's loop, which takes it
 * in (reply_take) and answers it there if nobody did. Where it stands is
 * its state (enum request_state, work.h), changed only by
 * request_set_state.
 */
#ifndef GEMMD_REPLY_H
#define GEMMD_REPLY_H

#include "daemon/work.h"

/* Moves r to state st; a move the diagram of enum request_state does not
 * allow is a bug (an assertion). */
void request_set_state(struct request *r, enum request_state st);

/* The workers' completion callback (worker_complete_fn; ctx: the server):
 * takes the requests whose last op is done, linked through `next` (any
 * thread), answers those it can at once, hands every one to its session's
 * loop, and wakes those loops. */
void reply_post(struct request *done, void *ctx);

/* Loop thread, taking in r: answers it if nobody did and its session is
 * open, else waits for the thread that answered it to let go of the
 * session (the last request of its write or run). After this r's reply no
 * longer needs the request. */
void reply_take(struct request *r);

/* Whether r's ops' user and daemon counts were given back by the thread
 * that answered it (a Completion in the ring is seen by its client before
 * the loop takes the request in). */
static inline int reply_counts_returned(const struct request *r)
{
        return r->state == REQ_RINGED || r->state == REQ_RINGED_LAST;
}

/* Whether the thread that completed r answered it. */
static inline int reply_answered_now(const struct request *r)
{
        return r->state >= REQ_SENT && r->state <= REQ_RINGED_LAST;
}

#endif
