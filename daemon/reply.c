/*
 * reply.c - the one way back of a completed request (reply.h).
 *
 * The thread that completes a group answers its requests itself where it
 * can: a small group's in the sessions' completion rings (ring_post), and,
 * with one loop, on the sockets, one write per session (session_reply_now);
 * a loop that also packed and wrote large groups' replies kept submits
 * waiting for admission. Every request still goes back to its session's
 * loop for everything else (counts, limits, freeing), with its state
 * saying what is left to do (server.h says why the loop reaps before it
 * judges a client by its counts).
 */
#include "daemon/reply.h"

#include <assert.h>

#include "daemon/ring.h"
#include "daemon/server.h"

/* The moves enum request_state allows, one bit per target state. */
static const uint16_t legal_moves[REQ_STATES] = {
        [REQ_RUNNING] = 1u << REQ_DONE | 1u << REQ_SENT | 1u << REQ_RINGED,
        [REQ_DONE] = 1u << REQ_ANSWERED | 1u << REQ_DROPPED,
        [REQ_SENT] = 1u << REQ_SENT_LAST,
        [REQ_RINGED] = 1u << REQ_RINGED_LAST,
};

void request_set_state(struct request *r, enum request_state st)
{
        assert((unsigned)r->state < REQ_STATES && (legal_moves[r->state] >> st & 1u));
        r->state = st;
}

/* Who answers a completed request. */
enum reply_route {
        ROUTE_RING,   /* the completing thread, in the session's completion ring */
        ROUTE_SOCKET, /* the completing thread, on the session's socket */
        ROUTE_LOOP,   /* the session's loop, as it takes the request in (reply_take:
                       * the ring if it has room, else the socket) */
};

/* Requests of one group past which the completing thread leaves the rings
 * to the loops: packing a large group's Completions here kept it from
 * noticing the next group, and the loops pack them side by side. Larger
 * values did no better; a build may set it to measure again. */
#ifndef RING_POST_MAX
#define RING_POST_MAX 8
#endif

/*
 * The one place the route of r's reply is chosen, by the thread that
 * completed it. small: r's group is small enough for this thread to fill
 * rings (RING_POST_MAX); ring_full: its ring was tried and took none of
 * it; stuck: a reply before it must be written by the loop, so none after
 * it may go out first. A session with rings takes a small group's
 * Completions there, and they need no order against its socket's replies;
 * one that does not fit (a large inline C) or finds the ring full takes
 * the socket alone. With several loops the loops write every reply: a
 * reply then goes out after its request's counts are released, which a
 * submit on another loop is judged by, and this thread, writing the
 * replies of a large group, noticed the next group late. A large group's
 * requests of a session with rings are for its loop to put there.
 */
static enum reply_route reply_route(const struct server *srv, const struct request *r, int small,
                                    int ring_full, int stuck)
{
        int ring = atomic_load_explicit(&r->s->ring_open, memory_order_relaxed);

        if (ring && small && !ring_full)
                return ROUTE_RING;
        if (srv->nloops == 1 && !stuck && (!ring || ring_full))
                return ROUTE_SOCKET;
        return ROUTE_LOOP;
}

/* Hands r and the requests after it that go to the same loop unanswered
 * (one lock for the run) to that loop, in state REQ_DONE: those the ring
 * does not take, which wait behind r (as if stuck). Returns the first
 * request after the run. */
static struct request *post_to_loop(const struct server *srv, struct request *r, int small)
{
        struct evloop *ev = r->s->ev;
        struct request *tail = r, *next;

        request_set_state(r, REQ_DONE);
        while (tail->next && tail->next->s->ev == ev &&
               reply_route(srv, tail->next, small, 0, 1) == ROUTE_LOOP) {
                tail = tail->next;
                request_set_state(tail, REQ_DONE);
        }
        next = tail->next;
        server_queue_done_list(ev, r, tail);
        return next;
}

/*
 * With one loop, requests go in order, while each can be answered here:
 * once one must wait for the loop, the ones after it wait too, so that no
 * reply of a session overtakes one the loop still has to write. The loop
 * of each is noted before it is handed over (it may be freed then).
 */
void reply_post(struct request *done, void *ctx)
{
        struct server *srv = ctx;
        struct request *r = done, *next;
        uint64_t woken = 0; /* loops to wake, by index */
        int stuck = 0, small = 1, n = 0;

        for (next = done; next && small; next = next->next)
                small = ++n <= RING_POST_MAX;
        while (r) {
                woken |= 1ull << r->s->ev->index;
                switch (reply_route(srv, r, small, 0, stuck)) {
                case ROUTE_RING:
                        if ((next = ring_post(r)) != r) {
                                r = next;
                                continue;
                        }
                        /* The ring took none: r alone goes another way. */
                        next = r->next;
                        r->next = NULL;
                        if (reply_route(srv, r, small, 1, stuck) == ROUTE_SOCKET &&
                            !session_reply_now(r, &stuck)) {
                                r = next;
                                continue;
                        }
                        post_to_loop(srv, r, small);
                        r = next;
                        break;
                case ROUTE_SOCKET:
                        if ((next = session_reply_now(r, &stuck)) != r) {
                                r = next;
                                continue;
                        }
                        r = post_to_loop(srv, r, small);
                        break;
                case ROUTE_LOOP:
                        r = post_to_loop(srv, r, small);
                        break;
                }
        }
        for (int i = 0; woken; i++, woken >>= 1)
                if (woken & 1)
                        uv_async_send(&srv->loops[i].async);
}

void reply_take(struct request *r)
{
        struct session *s = r->s;

        switch (r->state) {
        case REQ_RINGED_LAST:
                ring_taken(s);
                break;
        case REQ_SENT_LAST:
                session_reply_taken(s);
                break;
        case REQ_DONE:
                if (s->state == SESSION_CLOSED) {
                        request_set_state(r, REQ_DROPPED);
                        break;
                }
                if (ring_reply(r))
                        session_send_completion(s, r);
                request_set_state(r, REQ_ANSWERED);
                break;
        default:
                /* REQ_SENT, REQ_RINGED: the last of their write or run
                 * holds the session for them. */
                break;
        }
}
