/*
 * reply.c - the one way back of a completed request (reply.h).
 *
 * The thread that completes a group answers its requests itself where it
 * can: a small group's in the sessions' completion rings (ring_now), and,
 * with one loop, on the sockets, one write per session (socket_now);
 * a loop that also packed and wrote large groups' replies kept submits
 * waiting for admission. Every request still goes back to its session's
 * loop for everything else (counts, limits, freeing), with its state
 * saying what is left to do (server.h says why the loop reaps before it
 * judges a client by its counts).
 */
#include "daemon/reply.h"

#include <assert.h>

#include "daemon/dispatch.h"
#include "daemon/loop.h"
#include "daemon/ring.h"
#include "daemon/session.h"

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

/* Packs r's Completion into slot sl. Returns 0, or -1 when it does not fit
 * (or cannot be packed): the socket then answers r. */
static int pack_into(const struct request *r, struct ring_slot *sl)
{
        size_t n;

        if (dispatch_pack_completion_body(r, sl->body, RING_BODY, &n))
                return -1;
        sl->len = (uint32_t)n;
        return 0;
}

/* Whether r is answered by its completion word (proto/ring.h): it named
 * one it may be answered by (dispatch.c word_arm) and every op succeeded;
 * a failure takes a Completion, which says what failed. */
static int by_word(const struct request *r)
{
        if (!r->word)
                return 0;
        for (uint32_t i = 0; i < r->nops; i++)
                if (r->ops[i].status)
                        return 0;
        return 1;
}

/* Stores the completion words of the requests from head to tail that are
 * answered by one. */
static void store_words(struct request *head, const struct request *tail)
{
        for (struct request *x = head;; x = x->next) {
                if (by_word(x)) {
                        dispatch_count_reply(x); /* before the client can see it */
                        ring_cq_word(x->s, x->word - 1, x->id);
                }
                if (x == tail)
                        break;
        }
}

/*
 * ROUTE_RING: answers r and the requests after it of the same session in
 * its completion ring, each by its completion word or by a Completion in
 * a slot, as many as fit and unless the client said it sleeps, moves them
 * to REQ_RINGED (the last REQ_RINGED_LAST), gives back their user and
 * daemon counts (judged by submits on other loops) and queues them on the
 * session's loop, all before the client can see them. Returns the first
 * request it did not take (r itself when it took none).
 */
static struct request *ring_now(struct request *r)
{
        struct session *s = r->s;
        struct request *head = NULL, *tail = NULL, *x;
        uint32_t ops = 0, n = 0, nw = 0;
        int room = ring_cq_begin(s);

        if (room < 0)
                return r;
        /* A request that asked for Launched messages stays with the loop,
         * which sends those: its Completion must come after them. A word
         * takes no slot, but none is stored for a client that sleeps
         * (room 0 then). */
        while (r && r->s == s && room > 0 && !r->notify_launch) {
                if (by_word(r))
                        nw++;
                else if ((int)n < room && !pack_into(r, ring_cq_slot(s, n)))
                        n++;
                else
                        break;
                ops += r->nops;
                tail = r;
                if (!head)
                        head = r;
                r = r->next;
        }
        if (head) {
                for (x = head; x != tail; x = x->next)
                        request_set_state(x, REQ_RINGED);
                request_set_state(tail, REQ_RINGED);
                request_set_state(tail, REQ_RINGED_LAST);
                dispatch_uncount_shared(s, ops);
                if (nw)
                        store_words(head, tail); /* seen at once: after the counts */
                loop_queue_done(s->ev, head, tail);
        }
        /* A client that sleeps on its socket is kicked by the loop as it
         * takes the requests in (ring_taken), not from here: a kick is a
         * write to the socket, and with many clients, most of them
         * asleep, this thread writing kicks fell far behind the device. */
        ring_cq_end(s, n, nw);
        return r;
}

/* Replies larger than this are left to the loop thread: packing them and
 * handing them to the socket would hold out_lock (which the loop may wait
 * for) a long time, and their transfer dwarfs a thread hop anyway. */
#define REPLY_NOW_MAX_BYTES (64u << 10)

/* Whether r can be answered on the socket by the thread that completed
 * it. A request that asked for Launched messages is answered by the loop,
 * which sends those: its reply stays behind them. */
static int socket_now_ok(const struct request *r)
{
        uint64_t inline_bytes = 0;

        if (r->notify_launch)
                return 0;
        for (uint32_t i = 0; i < r->nops; i++)
                if (r->ops[i].buf[2] && r->ops[i].buf[2]->kind == GBUF_INLINE)
                        inline_bytes += r->ops[i].span[2];
        return inline_bytes <= REPLY_NOW_MAX_BYTES;
}

/*
 * ROUTE_SOCKET: answers r and the requests after it of the same session,
 * each packed and queued behind whatever is queued (frames keep the order
 * they were queued in, whichever thread writes them), then written with
 * one system call. The answered requests go to REQ_SENT, the last of them
 * REQ_SENT_LAST, and on the completion queue before the write: whatever
 * the client sends in answer, the loop takes them in before acting on it.
 * From then on they are the loop's; the last one holds the session until
 * the output is let go (session_reply_taken). What the socket does not
 * take at once stays queued for the loop thread. Returns the first request
 * it did not answer (the next session's, or NULL), and sets *stuck when
 * that one is of this session and must be answered by the loop: it is
 * closing, asked for Launched messages, or has a large inline result.
 */
static struct request *socket_now(struct request *r, int *stuck)
{
        struct session *s = r->s;
        struct request *head = NULL, *tail = NULL;
        unsigned answered = 0;
        int open;

        *stuck = 0;
        ring_hint(s);
        open = session_out_begin(s);
        while (r && r->s == s) {
                struct outbuf *o;
                uint8_t *buf = NULL;
                size_t n = 0;

                if (!open || !socket_now_ok(r) || dispatch_pack_completion(r, &buf, &n)) {
                        *stuck = 1;
                        break;
                }
                request_set_state(r, REQ_SENT);
                o = (struct outbuf *)buf;
                o->len = n;
                /* The reply holds the request's budget bytes from here on. */
                o->held = r->held;
                r->held = 0;
                session_out_put(s, o);
                answered++;
                tail = r;
                if (!head)
                        head = r;
                r = r->next;
        }
        if (head) {
                pc_add(&s->srv->counts, PC_REPLIES_NOW, answered);
                request_set_state(tail, REQ_SENT_LAST);
                loop_queue_done(s->ev, head, tail);
        }
        /* One write for all of this session's replies; none when the first
         * one is the loop's: so is all that is queued. */
        session_out_end(s, head != NULL);
        return r;
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
        loop_queue_done(ev, r, tail);
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
                        if ((next = ring_now(r)) != r) {
                                r = next;
                                continue;
                        }
                        /* The ring took none: r alone goes another way. */
                        next = r->next;
                        r->next = NULL;
                        if (reply_route(srv, r, small, 1, stuck) == ROUTE_SOCKET &&
                            !socket_now(r, &stuck)) {
                                r = next;
                                continue;
                        }
                        post_to_loop(srv, r, small);
                        r = next;
                        break;
                case ROUTE_SOCKET:
                        if ((next = socket_now(r, &stuck)) != r) {
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
                        loop_wake(&srv->loops[i]);
}

/* The loop, answering a request nobody answered: in the session's ring
 * (by its completion word or a Completion in a slot) if it has one with
 * room and the client did not say it sleeps. Returns 0 if it did, else -1
 * (the socket answers). */
static int ring_by_loop(struct request *r)
{
        struct session *s = r->s;
        int room, word = by_word(r);

        if (!s->ring || r->notify_launch)
                return -1;
        room = ring_cq_begin(s);
        if (room < 0)
                return -1;
        if (room == 0 || (!word && pack_into(r, ring_cq_slot(s, 0)))) {
                ring_cq_end(s, 0, 0);
                return -1;
        }
        if (word) {
                dispatch_count_reply(r);
                ring_cq_word(s, r->word - 1, r->id);
        }
        ring_cq_end(s, !word, word);
        ring_kick_owed(s);
        return 0;
}

/* The loop, answering a request nobody answered on the socket: its
 * Completion takes over the budget bytes r held (request.held) until it
 * is written. */
static void socket_by_loop(struct session *s, struct request *r)
{
        uint8_t *buf = NULL;
        size_t n = 0;
        int rc;

        ring_hint(s);
        rc = dispatch_pack_completion(r, &buf, &n);
        session_queue_frame(s, rc, buf, n, rc ? 0 : r->held);
        if (!rc)
                r->held = 0;
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
                if (ring_by_loop(r))
                        socket_by_loop(s, r);
                request_set_state(r, REQ_ANSWERED);
                break;
        default:
                /* REQ_SENT, REQ_RINGED: the last of their write or run
                 * holds the session for them. */
                break;
        }
}
