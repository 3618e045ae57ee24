/*
 * ring.c - the daemon's side of a session's rings (proto/ring.h).
 *
 * Submits: the loop that serves the session copies each body out of its
 * slot, gives the slot back, and hands the copy up (the session's
 * struct session_up) as if it had come off the socket (only Submit may
 * come this way). The loop looks
 * at its rings after each of its turns; while it polls (--spin-us) that is
 * every few hundred nanoseconds. Before it blocks it sets each ring's
 * sq.flag: clients then send their Submits on the socket, which wakes it,
 * and one that put a Submit in the ring just before kicks it there.
 *
 * Completions go in through ring_cq_begin, ring_cq_slot and ring_cq_end,
 * under ring_lock, from reply.c. Of a small group, the thread that saw it
 * finish packs each finished request's Completion into the next free
 * slot, queues the requests on their loop, and only then makes the slots
 * visible (ring_cq_end): a client that answers a
 * completion with a new submit finds the request already on the loop's
 * queue, which on_submit reaps before it refuses for a cap. The user's and
 * the daemon's counts are given back before the slots are visible too
 * (they are judged by submits on other loops). The loop frees the session
 * only after taking the ring's lock once more (REQ_RINGED_LAST), so the ring
 * stays mapped while a thread writes to it. Of a large group, the loops
 * put them in the rings as they take the requests in, side by side. A client that said it sleeps (cq.flag) gets its Completions on the
 * socket, which wakes it; one put in the ring as it fell asleep is
 * followed by a RingKick.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/loop.h"
#include "daemon/ring.h"
#include "daemon/session.h"
#include "daemon/users.h"
#include "gemmd.h"

/* Tells a client that sleeps to look at its completion ring. Loop thread. */
static void send_kick(struct session *s)
{
        Gemmd__V1__Envelope env = GEMMD__V1__ENVELOPE__INIT;
        Gemmd__V1__RingKick kick = GEMMD__V1__RING_KICK__INIT;

        env.body_case = GEMMD__V1__ENVELOPE__BODY_RING_KICK;
        env.ring_kick = &kick;
        session_send(s, &env);
}

/* Maps the ring in fd if it is one the daemon can trust not to move:
 * RING_BYTES long, a memfd sealed against shrinking, as shared-memory
 * buffers are (gbuf_map_sealed: a file cut short under the mapping would
 * SIGBUS the daemon). */
static int map_ring(int fd, struct gemmd_ring **out)
{
        void *p;
        int rc = gbuf_map_sealed(fd, RING_BYTES, &p);

        if (rc == GEMMD_EBOUNDS)
                rc = GEMMD_EINVAL;
        if (!rc)
                *out = p;
        return rc;
}

/* Maps the completion words that follow version 2's rings in fd (a
 * mapping of their own, which the GPU backends may page-lock: they are
 * stored by kernels). */
static int map_words(int fd, struct gbuf **out)
{
        int rc = gbuf_new_shm_at(fd, RING_WORDS_OFF, RING_WORDS * sizeof(uint64_t), out);

        return rc == GEMMD_EBOUNDS ? GEMMD_EINVAL : rc;
}

/* The daemon's mappings that rings take, with their completion words or
 * without: the words are a mapping of their own. */
static unsigned ring_maps(int with_words)
{
        return with_words ? 2 : 1;
}

int ring_attach(struct session *s, uint64_t rid, const Gemmd__V1__RingAttach *m)
{
        struct evloop *ev = s->ev;
        struct gemmd_ring *ring = NULL;
        struct gbuf *words = NULL;
        int fd = session_take_fd(s), rc;
        const int version_ok = m->version == 1 || m->version == GEMMD_RING_VERSION;

        if (!s->srv->cfg->rings)
                rc = GEMMD_EUNSUPPORTED;
        else if (fd < 0)
                rc = GEMMD_EPROTO;
        else if (s->ring)
                rc = GEMMD_EINVAL;
        else if (!version_ok)
                rc = GEMMD_EUNSUPPORTED;
        else if (m->bytes != RING_FILE_BYTES(m->version))
                rc = GEMMD_EINVAL;
        else if (users_map_take_n(s, rid, ring_maps(m->version >= 2)))
                rc = GEMMD_ELIMIT; /* the client was told */
        else if ((rc = map_ring(fd, &ring)) != 0 || (m->version >= 2 && (rc = map_words(fd, &words)) != 0)) {
                if (ring)
                        munmap(ring, RING_BYTES);
                users_map_give_n(s, ring_maps(m->version >= 2));
        }
        if (fd >= 0)
                close(fd);
        if (rc == GEMMD_ELIMIT)
                return rc;
        if (rc) {
                session_send_error(s, rid, rc, -1, "%s",
                                   !s->srv->cfg->rings    ? "rings are off (--rings no)"
                                   : fd < 0               ? "RingAttach without a file descriptor"
                                   : s->ring              ? "the session already has rings"
                                   : !version_ok          ? "ring version not supported"
                                   : m->bytes != RING_FILE_BYTES(m->version) ? "rings of the wrong size"
                                   : rc == GEMMD_EINVAL   ? "the rings must be a memfd on tmpfs (not "
                                                            "hugetlbfs) of the size given, sealed "
                                                            "against shrinking and not against "
                                                            "writes"
                                                          : gemmd_strerror(rc));
                return rc;
        }
        pthread_mutex_lock(&s->ring_lock);
        s->ring = ring;
        s->words = words; /* its one reference */
        s->sq_tail = 0;
        s->cq_head = 0;
        atomic_store(&s->ring_open, 1);
        pthread_mutex_unlock(&s->ring_lock);
        atomic_fetch_add(&s->srv->rings_now, 1);
        s->ring_prev = NULL;
        s->ring_next = ev->rings;
        if (ev->rings)
                ev->rings->ring_prev = s;
        ev->rings = s;
        return 0;
}

void ring_close(struct session *s)
{
        if (!s->ring)
                return;
        pthread_mutex_lock(&s->ring_lock);
        atomic_store(&s->ring_open, 0);
        pthread_mutex_unlock(&s->ring_lock);
        atomic_fetch_sub(&s->srv->rings_now, 1);
        if (s->ring_prev)
                s->ring_prev->ring_next = s->ring_next;
        else
                s->ev->rings = s->ring_next;
        if (s->ring_next)
                s->ring_next->ring_prev = s->ring_prev;
        s->ring_next = s->ring_prev = NULL;
}

void ring_free(struct session *s)
{
        if (s->ring) {
                munmap(s->ring, RING_BYTES);
                users_map_give_n(s, ring_maps(s->words != NULL));
        }
        s->ring = NULL;
        gbuf_unref(s->words);
        s->words = NULL;
}

/* Whether the loop takes s's Submits now: not while the client leaves its
 * replies unread (as its socket is not read then); the loop comes back to
 * it after its next turn, which a write to the socket ends. */
static int drainable(struct session *s)
{
        return s->state == SESSION_READY && !session_output_full(s);
}

/* A ring the client broke: said once, then the session ends. */
static void corrupt(struct session *s, const char *what)
{
        session_send_error(s, 0, GEMMD_EPROTO, -1, "submission ring: %s", what);
        session_close_after_flush(s);
}

/* Takes the Submits waiting in s's ring, as long as the client reads its
 * replies (as a read of the socket does). */
int ring_take(struct session *s)
{
        struct gemmd_ring *ring = s->ring;
        uint8_t body[RING_BODY];
        int n = ring_avail(&ring->sq, s->sq_tail, RING_SQ), taken = 0;

        if (n < 0) {
                corrupt(s, "head out of range");
                return 0;
        }
        while (n-- > 0 && drainable(s)) {
                struct ring_slot *sl = &ring->s[s->sq_tail % RING_SQ];
                /* Read once: the client may change it under us. */
                uint32_t len = __atomic_load_n(&sl->len, __ATOMIC_RELAXED);

                if (len == 0 || len > RING_BODY) {
                        corrupt(s, "a slot's length is out of range");
                        break;
                }
                memcpy(body, sl->body, len);
                ring_release(&ring->sq, ++s->sq_tail);
                s->up->frame(s, body, len, 1);
                pc_add(&s->srv->counts, PC_SUBMITS_RING, 1);
                taken++;
        }
        if (taken)
                s->t_active_ns = now_ns(); /* as a read of the socket (--idle-timeout-ms) */
        s->up->frames_done(s);
        return taken;
}

int ring_drain(struct evloop *ev)
{
        struct session *s, *next;
        uint64_t t0 = 0;
        int taken = 0;

        if (ev->rings_armed) {
                ev->rings_armed = 0;
                for (s = ev->rings; s; s = s->ring_next)
                        ring_disarm(&s->ring->sq);
        }
        for (s = ev->rings; s; s = next) {
                next = s->ring_next;
                /* A session whose client leaves its replies unread waits,
                 * without keeping the loop polling for it. */
                if (!drainable(s) || ring_avail(&s->ring->sq, s->sq_tail, RING_SQ) == 0)
                        continue;
                if (!t0) {
                        t0 = now_ns();
                        ev->active_ns = t0;
                        if (atomic_load(&ev->srv->draining))
                                ev->draining = 1;
                        ev->defer_flush++;
                }
                /* s may close here (a broken ring): next was read before,
                 * and a close unlinks only s. */
                s->refs++;
                taken += ring_take(s);
                session_unref(s);
        }
        if (t0) {
                ev->defer_flush--;
                session_flush_dirty(ev);
                ev->loop_part_ns[LOOP_FRAMES] += now_ns() - t0;
                loop_account(ev, t0);
        }
        return taken;
}

int ring_sleep(struct evloop *ev)
{
        struct session *s;

        if (!ev->rings)
                return 1;
        ev->rings_armed = 1;
        for (s = ev->rings; s; s = s->ring_next)
                if (drainable(s) && !ring_arm(&s->ring->sq, s->sq_tail))
                        return 0; /* ring_drain disarms them all */
        return 1;
}

/* The completion slots s's client leaves free after head. None when it
 * said it sleeps on its socket (cq.flag): a reply there wakes it, where a
 * Completion in the ring would need a RingKick after it (one put in the
 * ring as it fell asleep gets one). A tail the client made impossible
 * counts as a full ring too. Either way its replies take the socket. */
static int cq_room(struct session *s, uint32_t head)
{
        if (atomic_load_explicit(&s->ring->cq.flag, memory_order_relaxed))
                return 0;
        return ring_room(&s->ring->cq, head, RING_CQ);
}

/* Refreshes cq.no_poll from the daemon's load (server.h, busy_sessions);
 * the caller holds ring_lock and the ring is open. Stored only when it
 * changes: the client reads that cache line on each wait. */
static void hint_locked(struct session *s)
{
        const uint32_t v = atomic_load_explicit(&s->srv->busy_sessions, memory_order_relaxed) >
                           s->srv->poll_max;

        if (atomic_load_explicit(&s->ring->cq.no_poll, memory_order_relaxed) != v)
                atomic_store_explicit(&s->ring->cq.no_poll, v, memory_order_relaxed);
        if (v)
                pc_add(&s->srv->counts, PC_NO_POLL_REPLIES, 1);
}

void ring_hint(struct session *s)
{
        if (!atomic_load_explicit(&s->ring_open, memory_order_relaxed))
                return;
        pthread_mutex_lock(&s->ring_lock);
        if (atomic_load_explicit(&s->ring_open, memory_order_relaxed))
                hint_locked(s);
        pthread_mutex_unlock(&s->ring_lock);
}

int ring_cq_begin(struct session *s)
{
        pthread_mutex_lock(&s->ring_lock);
        if (!atomic_load_explicit(&s->ring_open, memory_order_relaxed)) {
                pthread_mutex_unlock(&s->ring_lock);
                return -1;
        }
        return cq_room(s, s->cq_head);
}

struct ring_slot *ring_cq_slot(struct session *s, uint32_t i)
{
        return &s->ring->c[(s->cq_head + i) % RING_CQ];
}

void ring_cq_word(struct session *s, uint32_t k, uint64_t id)
{
        _Atomic uint64_t *w = (_Atomic uint64_t *)s->words->host + k;

        /* Counted before it is seen, as ring_cq_end counts the slots. */
        pc_add(&s->srv->counts, PC_REPLIES_WORD, 1);
        atomic_store_explicit(w, WORD_VALUE(id, WORD_OK | WORD_FINAL), memory_order_release);
}

void ring_cq_end(struct session *s, uint32_t n, uint32_t nwords)
{
        if (n || nwords) {
                s->cq_head += n;
                hint_locked(s);
                /* Counted before they are seen: a client's stats request
                 * sent in answer to them then finds them counted. */
                pc_add(&s->srv->counts, PC_REPLIES_RING, n);
                /* The kick is owed under the lock: the loop's ring_taken
                 * takes the lock before it looks. */
                if (ring_publish(&s->ring->cq, s->cq_head) &&
                    atomic_exchange_explicit(&s->ring->cq.flag, 0, memory_order_relaxed))
                        atomic_store(&s->ring_kick, 1);
        }
        pthread_mutex_unlock(&s->ring_lock);
}

void ring_kick_owed(struct session *s)
{
        if (atomic_exchange(&s->ring_kick, 0) && s->state != SESSION_CLOSED)
                send_kick(s);
}

void ring_taken(struct session *s)
{
        pthread_mutex_lock(&s->ring_lock);
        pthread_mutex_unlock(&s->ring_lock);
        ring_kick_owed(s);
}
